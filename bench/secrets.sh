#!/usr/bin/env bash
# The cost of --secret (bench/secrets.py): hosts without secrets with and without a
# secret configured (launch, cleartext download, HTTPS set-up), and a secret-injecting
# connection against the same one relayed (100 MiB HTTPS download, set-up). Builds brig
# in release mode; run as root on an otherwise idle machine:
# `bench/secrets.sh [--rounds N] [--download MIB] [--baseline OLD-BRIG]`. Results: stdout and
# bench/secrets-results.json.
set -euo pipefail
cd "$(dirname "$0")/.."
brig=$(cargo build --release -q -p brig --message-format=json-render-diagnostics |
    python3 -c '
import json, sys
for line in sys.stdin:
    message = json.loads(line)
    if message.get("reason") == "compiler-artifact" and message["target"]["name"] == "brig" and message.get("executable"):
        print(message["executable"])
')
exec python3 bench/secrets.py --brig "$brig" "$@"
