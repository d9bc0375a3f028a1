#!/usr/bin/env bash
# The E2B API's speed (issue 23, docs/performance.md "E2B API"): `brig serve` and `brig
# gateway` on loopback, driven through E2B's Python SDKs (e2b-code-interpreter 2.9.1 on
# e2b 2.45.1, pinned, in a venv of their own under target/) by bench/e2b_speed.py: create +
# command + kill and `run_code("1+1")`, rotated with the same cycle through brig's own
# protocol; ComputeSDK's time-to-interactive in
# its three modes (sequential, staggered, burst); the server's and the gateway's own
# memory with 100 sandboxes alive; 50 concurrent clients' `run_code`. One table.
# `bench/e2b.sh [ROUNDS]` (default 100: ComputeSDK's count); as root, on an idle machine.
set -euo pipefail
cd "$(dirname "$0")/.."
rounds=${1:-100}
source bench/build-release.sh
source bench/harness.sh
build_release
brig=$(release_binary brig)
venv=target/bench-venv-e2b-code-interpreter-2.9.1
pinned_venv "$venv" e2b-code-interpreter==2.9.1 e2b==2.45.1
bench_workdir brig-e2b-bench
key=e2b_00000000000000000000000000000000000000b2
echo "$key bench" >"$work/keys"
# Room for the burst's 100 sandboxes and the live ones beside them, all one uid's (the
# gateway's), whose connections may all wait at once.
"$brig" serve --socket "$work/serve.sock" --quiet-limits --max-sessions 128 \
    --max-sessions-per-uid 0 --max-connections-per-uid 0 2>"$work/serve.log" &
serve_pid=$!
pids+=("$serve_pid")
for _ in $(seq 100); do [[ -S $work/serve.sock ]] && break; sleep 0.05; done
# The gateway prints its address first; a fixed port keeps the script short.
port=$((20000 + RANDOM % 20000))
"$brig" gateway --listen "127.0.0.1:$port" --server "$work/serve.sock" --api-keys "$work/keys" \
    >"$work/gateway.log" 2>&1 &
gateway_pid=$!
pids+=("$gateway_pid")
for _ in $(seq 100); do grep -q listening "$work/gateway.log" && break; sleep 0.05; done
# No __pycache__ in bench/ (the clients, spawned, import this script by its path).
env -i PATH=/usr/bin:/bin PYTHONDONTWRITEBYTECODE=1 E2B_API_KEY=$key E2B_API_URL="http://127.0.0.1:$port" \
    E2B_SANDBOX_URL="http://127.0.0.1:$port" \
    PYTHONPATH=clients/python "$venv/bin/python" bench/e2b_speed.py "$rounds" "$serve_pid" "$gateway_pid" \
    "$work/serve.sock"
