#!/usr/bin/env bash
# brig's soak test: builds brig and brig-soak in release mode and runs thousands of mixed
# jails (the `brig run` command and the library in-process; root and rootless via
# setpriv; with and without a cgroup; one at a time and eight at a time), checks every
# exit status and verdict, SIGKILLs brig mid-run, and counts what is left behind:
# processes, cgroups, mounts, temp files, and the library workers' fd and RSS growth.
# Prints a table and writes bench/soak-results.json; exits 0 only when every count is 0.
# Run as root: `bench/soak.sh [--runs N] [--concurrency N] [--modes 'WORDS'] [--seed N]`.
# `bench/soak.sh --sessions [--cycles N] [--workers N]` soaks brig serve's sessions instead
# (bench/soak_sessions.py).
set -euo pipefail
cd "$(dirname "$0")/.."
source bench/build-release.sh
build_release
brig=$(release_binary brig)
if [[ ${1:-} == --sessions ]]; then
    shift
    exec /usr/bin/python3 bench/soak_sessions.py --brig "$brig" "$@"
fi
soak=$(release_binary brig-soak)
exec "$soak" --brig "$brig" --json bench/soak-results.json "$@"
