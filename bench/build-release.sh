#!/usr/bin/env bash
# Builds brig and brig-bench in release mode and prints where cargo put each binary, one
# `NAME<TAB>PATH` line each, from the build's own report: the target directory and the
# target triple (.cargo/config.toml's build.target) are cargo's to decide, not the
# scripts'. Sourced by bench/run.sh and bench/soak.sh: `release_binary NAME` after
# `build_release`.
set -euo pipefail

build_release() {
    RELEASE_BINARIES=$(cargo build --release -q -p brig -p brig-bench \
        --message-format=json-render-diagnostics |
        python3 -c '
import json, sys
for line in sys.stdin:
    message = json.loads(line)
    if message.get("reason") == "compiler-artifact" and message.get("executable"):
        print(message["target"]["name"], message["executable"], sep="\t")
')
}

# The path of the binary NAME that build_release built; fails when there is none.
release_binary() {
    local path
    path=$(awk -F '\t' -v name="$1" '$1 == name { print $2 }' <<<"$RELEASE_BINARIES")
    if [[ -z $path ]]; then
        echo "bench: cargo built no binary named $1" >&2
        return 1
    fi
    printf '%s\n' "$path"
}
