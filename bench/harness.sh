#!/usr/bin/env bash
# What bench/route.sh and bench/e2b.sh share, sourced: a venv of pinned packages from
# PyPI under target/, and a work directory whose processes and files go at exit.
set -euo pipefail

# pinned_venv DIR PACKAGE...: makes DIR a venv with the PACKAGEs (`name==version`) unless
# it is one already (kept between runs). Built aside and moved into place: an
# interrupted install leaves no half venv.
pinned_venv() {
    local venv=$1
    shift
    if [[ ! -x $venv/bin/python ]]; then
        rm -rf "$venv.building"
        python3 -m venv "$venv.building"
        "$venv.building/bin/python" -m pip install --quiet --disable-pip-version-check "$@"
        mv "$venv.building" "$venv"
    fi
}

# bench_workdir NAME: sets $work to a fresh /tmp/NAME.XXXXXX; at exit the processes whose
# pids were added to $pids are killed and waited for, and $work is removed.
pids=()
bench_workdir() {
    work=$(mktemp -d "/tmp/$1.XXXXXX")
    trap bench_cleanup EXIT
}

bench_cleanup() {
    for pid in "${pids[@]}"; do kill "$pid" 2>/dev/null || true; done
    for pid in "${pids[@]}"; do wait "$pid" 2>/dev/null || true; done
    rm -rf "$work"
}
