#!/usr/bin/env bash
# What the ingress and a router add to a sandbox's create and command (issue 25's goal:
# median within 1.5 ms of the same through the host's own gateway), deploy/kubernetes/'s
# layout on loopback (bench/topology.sh): one brig host (h0: `brig serve` + `brig gateway
# --host-id h0`), two routers (`--peers h0`, creates to `--create-url` = the hosts'
# Service, here an nginx server balancing over the hosts as brig-hosts-any does) and
# Debian's nginx as the Ingress in front of the routers (ingress.yaml's settings:
# unbuffered both ways, WebSocket's Upgrade, host-form names, TLS).
# E2B's Python SDK (e2b 2.45.1, pinned, in a venv under target/) makes create +
# commands.run("true") + kill through three paths, interleaved round by round
# (bench/route.py):
#   direct        the host's gateway, plain HTTP
#   ingress       nginx -> router -> host, plain HTTP
#   ingress-tls   the same, TLS ended by nginx (as ingress.yaml's `tls`)
# all with E2B_SANDBOX_URL (the SDK names the sandbox in a header; the host form's
# {port}-{id}.DOMAIN names need wildcard DNS, which loopback lacks: bench/route.py).
# `bench/ingress.sh [ROUNDS]` (default 200); as root, on an otherwise idle machine.
set -euo pipefail
cd "$(dirname "$0")/.."
rounds=${1:-200}
source bench/topology.sh
topology_start brig-ingress-bench
start_host h0
service_port=$(free_port)
start_router r0 "http://127.0.0.1:$service_port" h0
start_router r1 "http://127.0.0.1:$service_port" h0
plain_port=$(free_port)
tls_port=$(free_port)
ingress_server routers "$plain_port" "$tls_port" "${router_url[r0]}" "${router_url[r1]}"
service_server hosts_any "$service_port" "${host_url[h0]}"
start_nginx
echo "nginx: $("$(nginx_binary)" -v 2>&1)" >&2
env -i PATH=/usr/bin:/bin E2B_API_KEY=$bench_key SSL_CERT_FILE="$work/ca.pem" PYTHONDONTWRITEBYTECODE=1 \
    "$venv/bin/python" bench/route.py "$rounds" direct="${host_url[h0]}" \
    ingress="http://127.0.0.1:$plain_port" ingress-tls="https://127.0.0.1:$tls_port"
