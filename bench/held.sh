#!/usr/bin/env bash
# What a create costs a host as it fills (docs/performance.md, "Through an ingress, and
# many hosts"): one brig host as hosts.yaml runs it (bench/topology.sh), E2B's Python SDK
# making create + run("true") + kill with no other sandbox alive and with HELD idle ones
# alive, in turns; the CPU of the server and everything under it per cycle
# (bench/held.py). `bench/held.sh [HELD] [ROUNDS] [CYCLES]` (defaults 120, 4, 60); as root.
set -euo pipefail
cd "$(dirname "$0")/.."
held=${1:-120}
rounds=${2:-4}
cycles=${3:-60}
export BRIG_MAX_SESSIONS=$((held + 16))
source bench/topology.sh
topology_start brig-held-bench
start_host h0
env -i PATH=/usr/bin:/bin E2B_API_KEY=$bench_key PYTHONDONTWRITEBYTECODE=1 "$venv/bin/python" bench/held.py \
    "$held" "$rounds" "$cycles" "${serve_pid[h0]}" "${host_url[h0]}"
