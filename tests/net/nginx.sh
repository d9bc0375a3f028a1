#!/bin/sh
# Debian's nginx, unpacked and never installed: `apt-get download nginx` and `dpkg-deb -x`
# into DIR (made if missing, kept as a cache: the next call only prints), then the
# binary's path on stdout. Installing the package would start a daemon on port 80 (its
# postinst); unpacked, nothing runs until a caller starts it, with every path its own:
#
#   nginx=$(tests/net/nginx.sh target/nginx)
#   "$nginx" -p "$dir" -c "$dir/nginx.conf" -e stderr -g 'daemon off;'
#
# (Debian's build logs errors to stderr by default and looks for its temp directories
# under /var/lib/nginx: a config for it sets client_body_temp_path, proxy_temp_path,
# fastcgi_temp_path, uwsgi_temp_path, scgi_temp_path and pid inside its own directory.)
# Its libraries (libpcre2-8-0, libssl3, zlib1g, libcrypt1) are a Debian 12 host's base.
# Used by tests/operators/kubernetes_hosts.rs (the ingress in front of the routers) and
# the benches that measure through an ingress. Exit 1 with one line on stderr when it
# cannot be had.
set -eu

if [ $# -ne 1 ]; then
    echo "usage: $0 DIR   (prints DIR/.../usr/sbin/nginx)" >&2
    exit 2
fi
dir=$1
mkdir -p "$dir"
dir=$(cd "$dir" && pwd)
nginx=$dir/root/usr/sbin/nginx

# One caller fetches; the others wait for it (flock is util-linux's, on every Debian).
exec 9>"$dir/.lock"
flock 9
if [ ! -x "$nginx" ]; then
    stage=$(mktemp -d "$dir/.stage.XXXXXX")
    trap 'rm -rf "$stage"' EXIT
    # _apt cannot write into a root-owned temp dir: apt then downloads as root, and says
    # so on stderr. Only a failure is shown.
    if ! (cd "$stage" && apt-get download nginx >"$stage/apt.log" 2>&1); then
        # Stale package lists name a version the mirror no longer has: refresh them once
        # (root only) and try again.
        if [ "$(id -u)" -eq 0 ] && apt-get update -qq >/dev/null 2>&1 &&
            (cd "$stage" && apt-get download nginx >"$stage/apt.log" 2>&1); then
            :
        else
            echo "$0: apt-get download nginx failed: $(tail -n 1 "$stage/apt.log"); run \`apt-get update\` (as root) and check \`apt-cache policy nginx\`" >&2
            exit 1
        fi
    fi
    dpkg-deb -x "$stage"/nginx_*.deb "$stage/root"
    rm -rf "$dir/root"
    mv "$stage/root" "$dir/root"
    ls "$stage"/nginx_*.deb | sed 's|.*/||' >"$dir/package"
fi
if ! "$nginx" -v >/dev/null 2>&1; then
    echo "$0: $nginx does not run (its libraries: libpcre2-8-0 libssl3 zlib1g libcrypt1): $("$nginx" -v 2>&1 | tail -n 1)" >&2
    exit 1
fi
echo "$nginx"
