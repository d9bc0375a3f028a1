#!/usr/bin/env bash
# Debian's nginx for the ingress benches (bench/ingress.sh, bench/scale.sh), sourced: the
# package's files unpacked under target/, never installed (its postinst would start a
# daemon). One function, so that a shared fetch can take its place.
set -euo pipefail

# nginx_binary: prints the path of an nginx binary, fetched once (`apt-get download nginx`,
# the release the machine's apt sources hold, `dpkg-deb -x`) into target/bench-nginx and
# kept between runs. Unpacked aside and moved into place: an interrupted fetch leaves no
# half tree.
nginx_binary() {
    local dir=target/bench-nginx
    if [[ ! -x $dir/usr/sbin/nginx ]]; then
        rm -rf "$dir.fetching"
        mkdir -p "$dir.fetching"
        # apt-get download writes into the current directory.
        (cd "$dir.fetching" && apt-get download -q nginx >/dev/null 2>&1) || {
            echo "bench: apt-get download nginx failed (no Debian apt sources?)" >&2
            return 1
        }
        dpkg-deb -x "$dir.fetching"/nginx_*.deb "$dir.fetching/tree"
        mv "$dir.fetching/tree" "$dir"
        rm -rf "$dir.fetching"
    fi
    printf '%s\n' "$PWD/$dir/usr/sbin/nginx"
}
