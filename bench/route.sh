#!/usr/bin/env bash
# What routing by sandbox id costs (docs/kubernetes.md): one host (`brig serve` and
# `brig gateway --host-id h0`) and a router (`brig gateway --peers h0=...`, no server),
# on loopback; E2B's Python SDK (e2b 2.45.1, pinned, in a venv under target/) creates a
# sandbox, runs a command and kills it through the router and directly, interleaved.
# `bench/route.sh [ROUNDS]` (default 200); as root, on an otherwise idle machine.
set -euo pipefail
cd "$(dirname "$0")/.."
rounds=${1:-200}
source bench/build-release.sh
source bench/harness.sh
build_release
brig=$(release_binary brig)
venv=target/bench-venv-e2b-2.45.1
pinned_venv "$venv" e2b==2.45.1
bench_workdir brig-route-bench
key=e2b_00000000000000000000000000000000000000a1
echo "$key bench" >"$work/keys"
"$brig" serve --socket "$work/serve.sock" --quiet-limits --max-sessions 64 --max-sessions-per-uid 0 2>"$work/serve.log" &
pids+=($!)
for _ in $(seq 100); do [[ -S $work/serve.sock ]] && break; sleep 0.05; done
# The gateways print their address first; a fixed port each keeps the script short.
host_port=$((20000 + RANDOM % 20000))
router_port=$((host_port + 1))
"$brig" gateway --listen "127.0.0.1:$host_port" --server "$work/serve.sock" --api-keys "$work/keys" \
    --host-id h0 --drain-grace 0s >"$work/host.log" 2>&1 &
pids+=($!)
"$brig" gateway --listen "127.0.0.1:$router_port" --peers "h0=http://127.0.0.1:$host_port" \
    >"$work/router.log" 2>&1 &
pids+=($!)
for _ in $(seq 100); do
    grep -q listening "$work/host.log" && grep -q listening "$work/router.log" && break
    sleep 0.05
done
env -i PATH=/usr/bin:/bin E2B_API_KEY=$key "$venv/bin/python" bench/route.py "$rounds" \
    direct="http://127.0.0.1:$host_port" routed="http://127.0.0.1:$router_port"
