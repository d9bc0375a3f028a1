#!/bin/sh
# Builds the root filesystem of brig's container image on this host, without pulling an
# image: the same manifest (deploy/container/rootfs.yaml) the Containerfile's build stage
# uses, with brig taken from BRIG instead of /usr/local/bin/brig. On a Debian 12 host it
# holds what the image holds (the image's python3 is Debian 12's too).
#
#   deploy/container/build-root.sh OUT [BRIG]      (BRIG: default, the release build)
#   podman run --rm --security-opt seccomp=unconfined --security-opt unmask=/proc/* \
#       --user 1000:1000 --rootfs OUT:O /usr/local/bin/brig run -- python3 -c 'print(1)'
#
# tests/operators/containers.rs builds the root with this script and runs it with podman.
set -eu

if [ $# -lt 1 ] || [ $# -gt 2 ]; then
    echo "usage: $0 OUT [BRIG]" >&2
    exit 2
fi
out=$1
here=$(cd "$(dirname "$0")" && pwd)
brig=$(readlink -f "${2:-$here/../../target/x86_64-unknown-linux-gnu/release/brig}")
if [ ! -x "$brig" ]; then
    echo "$0: no brig binary at $brig: build it first (cargo build --release)" >&2
    exit 1
fi

manifest=$(mktemp)
trap 'rm -f "$manifest"' EXIT
# The manifest's `- /usr/local/bin/brig` becomes `- BRIG:/usr/local/bin/brig`.
sed "s|^  - /usr/local/bin/brig\$|  - $brig:/usr/local/bin/brig|" "$here/rootfs.yaml" >"$manifest"
if ! grep -q ":/usr/local/bin/brig\$" "$manifest"; then
    echo "$0: $here/rootfs.yaml has no '  - /usr/local/bin/brig' line to rewrite" >&2
    exit 1
fi
"$brig" rootfs build "$manifest" "$out"
