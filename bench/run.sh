#!/usr/bin/env bash
# brig's benchmark: builds brig in release mode, installs bubblewrap if missing, and
# measures brig against bwrap and a bare exec in one interleaved run. Results go to
# stdout as a table with the brig/bwrap ratios, and to bench/results.json.
# Run as root on an otherwise idle machine: `bench/run.sh [--rounds N] [--seconds S]`.
# A/B of two builds: `bench/run.sh --tools brig,brig-baseline --baseline OLD-BRIG --no-net
# --no-serve --no-sessions --no-files` (ratios brig/brig-baseline, interleaved: of the
# medians, and the median of each round's own ratio).
set -euo pipefail
cd "$(dirname "$0")/.."
if ! command -v bwrap >/dev/null; then
    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq bubblewrap >/dev/null
fi
source bench/build-release.sh
build_release
bench=$(release_binary brig-bench)
brig=$(release_binary brig)
exec "$bench" --brig "$brig" --json bench/results.json "$@"
