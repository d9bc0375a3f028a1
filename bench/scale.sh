#!/usr/bin/env bash
# Creates per second through the ingress, one brig host against three (issue 25's goal:
# three sustain at least 2x the creates/s of one, on this 2-core machine), in
# deploy/kubernetes/'s layout on loopback (bench/topology.sh). Two stacks, started
# together and measured in turns (bench/scale.py):
#   one-host     nginx -> 2 routers -> host one-h0
#   three-hosts  nginx -> 2 routers -> hosts three-h0, three-h1, three-h2
# each host a `brig serve` (config.yaml's --session-pool 4, --max-sessions 32) and a
# `brig gateway --host-id`; each stack's routers know its hosts by --peers and send
# creates to --create-url, that stack's hosts' Service (an nginx server balancing over
# them round-robin, as brig-hosts-any does); the Ingress is nginx (ingress.yaml's
# settings), in plain HTTP with the SDK's header form (the TLS is the ingress's cost, not
# brig's: bench/ingress.sh measures it). CLIENTS SDK clients (E2B's Python SDK, e2b
# 2.45.1, pinned, in a venv under target/) make PER_CLIENT create + commands.run("true")
# + kill each, at once.
# `bench/scale.sh [CLIENTS] [PER_CLIENT] [ROUNDS]` (defaults 8, 25, 6); as root, on an
# otherwise idle machine. BRIG_SESSION_POOL and BRIG_MAX_SESSIONS change the hosts' sizes.
set -euo pipefail
cd "$(dirname "$0")/.."
clients=${1:-8}
per_client=${2:-25}
rounds=${3:-6}
source bench/topology.sh
topology_start brig-scale-bench
stacks=()
# add_stack NAME HOST...: the hosts, their Service, two routers, the ingress; appends the
# stack's description for scale.py to $stacks.
add_stack() {
    local name=$1 host urls=() serves=() gateways=() service_port ingress_port
    shift
    for host in "$@"; do
        start_host "$host"
        urls+=("${host_url[$host]}")
        serves+=("${serve_pid[$host]}")
        gateways+=("${gateway_pid[$host]}")
    done
    service_port=$(free_port)
    start_router "$name-r0" "http://127.0.0.1:$service_port" "$@"
    start_router "$name-r1" "http://127.0.0.1:$service_port" "$@"
    ingress_port=$(free_port)
    ingress_server "$name-routers" "$ingress_port" "$(free_port)" \
        "${router_url[$name-r0]}" "${router_url[$name-r1]}"
    service_server "$name-hosts" "$service_port" "${urls[@]}"
    local IFS=,
    stacks+=("$name|http://127.0.0.1:$ingress_port|${urls[*]}|${serves[*]}|${gateways[*]}|${router_pid[$name-r0]},${router_pid[$name-r1]}")
}
add_stack one-host one-h0
add_stack three-hosts three-h0 three-h1 three-h2
start_nginx
echo "nginx: $("$(nginx_binary)" -v 2>&1); $clients clients x $per_client cycles, $rounds rounds" >&2
env -i PATH=/usr/bin:/bin E2B_API_KEY=$bench_key PYTHONDONTWRITEBYTECODE=1 "$venv/bin/python" bench/scale.py \
    "$clients" "$per_client" "$rounds" "$session_pool" "$nginx_pid" "${stacks[@]}"
