#!/usr/bin/env bash
# Debian's nginx for the ingress benches (bench/ingress.sh, bench/scale.sh), sourced: the
# fetch the tests use (tests/net/nginx.sh: the package unpacked under target/, never
# installed, since its postinst would start a daemon).
set -euo pipefail

# nginx_binary: prints the path of the nginx binary, fetched once into target/tmp/nginx and
# kept between runs (the tests' cache too).
nginx_binary() {
    tests/net/nginx.sh target/tmp/nginx
}
