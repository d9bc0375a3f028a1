#!/usr/bin/env bash
# deploy/kubernetes/'s layout on loopback, for bench/ingress.sh and bench/scale.sh,
# sourced (from the repository's root), then `topology_start NAME`: brig hosts (a
# `brig serve` and a `brig gateway --host-id` beside it: hosts.yaml's pod), routers
# (`brig gateway` without a server: gateway.yaml) and Debian's nginx as the ingress
# (ingress.yaml's settings) and as the hosts' Service for creates (brig-hosts-any).
# Every process is added to $pids (killed at exit); every file is under $work.
set -euo pipefail
source bench/build-release.sh
source bench/harness.sh
source bench/nginx.sh

# topology_start NAME: the release build ($brig), E2B's Python SDK pinned in a venv
# ($venv), a work directory /tmp/NAME.XXXXXX ($work: bench/harness.sh's, removed at exit
# with the processes in $pids) and the ingress's certificate.
topology_start() {
    build_release
    brig=$(release_binary brig)
    venv=target/bench-venv-e2b-2.45.1
    pinned_venv "$venv" e2b==2.45.1
    bench_workdir "$1"
    make_certificate
}

# hosts.yaml's and config.yaml's sizes: BRIG_SESSION_POOL and BRIG_MAX_SESSIONS.
session_pool=${BRIG_SESSION_POOL:-4}
max_sessions=${BRIG_MAX_SESSIONS:-32}
bench_key=e2b_00000000000000000000000000000000000000c3

declare -A host_url serve_pid gateway_pid

# free_port: a TCP port of 127.0.0.1 free now (for nginx, which takes no port 0).
free_port() {
    python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}

# gateway_url LOG: the URL a gateway printed first ("listening on URL"), waited for.
gateway_url() {
    local line
    for _ in $(seq 200); do
        line=$(grep -m1 -o 'listening on .*' "$1" 2>/dev/null || true)
        if [[ -n $line ]]; then
            printf '%s\n' "${line#listening on }"
            return
        fi
        sleep 0.05
    done
    echo "bench: no gateway listening after 10 s; its output: $1" >&2
    cat "$1" >&2
    return 1
}

# start_host NAME: a brig host as hosts.yaml runs one (serve's and gateway's options);
# sets host_url[NAME], serve_pid[NAME], gateway_pid[NAME].
start_host() {
    local name=$1
    [[ -f $work/keys ]] || echo "$bench_key bench" >"$work/keys"
    "$brig" serve --socket "$work/$name.sock" --quiet-limits --session-pool "$session_pool" \
        --max-sessions "$max_sessions" --max-sessions-per-uid 0 --max-jails-per-uid 0 \
        --max-connections-per-uid 0 --pool 0 2>"$work/$name-serve.log" &
    serve_pid[$name]=$!
    pids+=($!)
    for _ in $(seq 200); do [[ -S $work/$name.sock ]] && break; sleep 0.05; done
    "$brig" gateway --listen 127.0.0.1:0 --server "$work/$name.sock" --api-keys "$work/keys" \
        --host-id "$name" --drain-grace 0s >"$work/$name-gateway.log" 2>&1 &
    gateway_pid[$name]=$!
    pids+=($!)
    host_url[$name]=$(gateway_url "$work/$name-gateway.log")
}

# start_router NAME CREATE_URL HOST...: a router as gateway.yaml runs one, its --peers
# the HOSTs (started by start_host), its creates to CREATE_URL (the hosts' Service); sets
# router_url[NAME] and router_pid[NAME].
declare -A router_url router_pid
start_router() {
    local name=$1 create_url=$2 peers="" host
    shift 2
    for host in "$@"; do peers+="${peers:+,}$host=${host_url[$host]}"; done
    "$brig" gateway --listen 127.0.0.1:0 --peers "$peers" --create-url "$create_url" \
        --api-keys "$work/keys" --drain-grace 0s >"$work/$name.log" 2>&1 &
    router_pid[$name]=$!
    pids+=($!)
    router_url[$name]=$(gateway_url "$work/$name.log")
}

# The nginx configuration's servers, added to by ingress_server and service_server.
nginx_servers=""

# upstream NAME URL...: an nginx upstream of the URLs (http://HOST:PORT), kept-alive
# connections as ingress-nginx keeps them (HTTP/1.1, `keepalive` per worker).
upstream() {
    local name=$1 url
    shift
    nginx_servers+="    upstream $name {"$'\n'
    for url in "$@"; do nginx_servers+="        server ${url#http://};"$'\n'; done
    nginx_servers+="        keepalive 64;"$'\n'"    }"$'\n'
}

# The proxying of ingress.yaml's annotations and ingress-nginx's defaults: HTTP/1.1 to the
# upstream, the client's Host on (the host form), WebSocket's Upgrade joined, nothing
# buffered either way, an hour for a stream, no body cap.
proxying='
            proxy_http_version 1.1;
            proxy_set_header Host $http_host;
            proxy_set_header Upgrade $http_upgrade;
            proxy_set_header Connection $connection_upgrade;
            proxy_buffering off;
            proxy_request_buffering off;
            proxy_read_timeout 3600s;
            proxy_send_timeout 3600s;'

# ingress_server NAME PLAIN_PORT TLS_PORT ROUTER_URL...: the Ingress, to the routers:
# api.$domain and *.$domain (the SDK's host form) and, as the default server, any other
# name (the SDK with E2B_SANDBOX_URL), in plain HTTP and in TLS ($work/tls.pem).
ingress_server() {
    local name=$1 plain=$2 tls=$3
    shift 3
    upstream "$name" "$@"
    nginx_servers+="
    server {
        listen 127.0.0.1:$plain default_server;
        listen 127.0.0.1:$tls ssl default_server;
        server_name api.$domain *.$domain;
        ssl_certificate $work/tls.pem;
        ssl_certificate_key $work/tls.key;
        client_max_body_size 0;
        location / {
            proxy_pass http://$name;$proxying
        }
    }
"
}

# service_server NAME PORT HOST_URL...: the hosts' Service for creates (brig-hosts-any),
# requests balanced round-robin over the hosts' gateways.
service_server() {
    local name=$1 port=$2
    shift 2
    upstream "$name" "$@"
    nginx_servers+="
    server {
        listen 127.0.0.1:$port;
        client_max_body_size 0;
        location / {
            proxy_pass http://$name;$proxying
        }
    }
"
}

# The ingress's domain, and a certificate for it, its wildcard and 127.0.0.1 (the SDK in
# the bench reaches the ingress by address: bench/route.py), made once per run.
domain=bench.brig.test
make_certificate() {
    # A CA of the run's own ($work/ca.pem, for the clients' SSL_CERT_FILE) and the
    # ingress's certificate signed by it (rustls refuses a CA certificate as a server's).
    openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -days 1 \
        -subj "/CN=brig bench CA" -keyout "$work/ca.key" -out "$work/ca.pem" 2>/dev/null
    openssl req -new -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes \
        -subj "/CN=$domain" -keyout "$work/tls.key" 2>/dev/null |
        openssl x509 -req -CA "$work/ca.pem" -CAkey "$work/ca.key" -days 1 -out "$work/tls.pem" \
            -extfile <(echo "subjectAltName=DNS:$domain,DNS:*.$domain,IP:127.0.0.1") 2>/dev/null
}

# start_nginx: nginx with the servers added so far, everything under $work/nginx, in the
# foreground of its own (daemon off), one worker per CPU; sets nginx_pid.
start_nginx() {
    local nginx
    nginx=$(nginx_binary)
    mkdir -p "$work/nginx/temp"
    cat >"$work/nginx/nginx.conf" <<EOF
worker_processes auto;
pid $work/nginx/nginx.pid;
error_log $work/nginx/error.log warn;
events { worker_connections 4096; }
http {
    access_log off;
    client_body_temp_path $work/nginx/temp/body;
    proxy_temp_path $work/nginx/temp/proxy;
    fastcgi_temp_path $work/nginx/temp/fastcgi;
    uwsgi_temp_path $work/nginx/temp/uwsgi;
    scgi_temp_path $work/nginx/temp/scgi;
    # A WebSocket's Upgrade goes on; without one the upstream connection is kept alive.
    map \$http_upgrade \$connection_upgrade { default upgrade; '' ''; }
$nginx_servers}
EOF
    "$nginx" -p "$work/nginx" -c "$work/nginx/nginx.conf" -g 'daemon off;' 2>"$work/nginx/stderr" &
    nginx_pid=$!
    pids+=($!)
    for _ in $(seq 200); do [[ -s $work/nginx/nginx.pid ]] && return; sleep 0.05; done
    echo "bench: nginx did not start:" >&2
    cat "$work/nginx/stderr" "$work/nginx/error.log" >&2
    return 1
}
