# The check helpers both VM scripts source (tests/vm/cgroup_v2.sh, systemd_units.sh):
# one line per check, `ok NAME` or `FAIL NAME: detail`, which tests/common's
# `assert_vm_checks` counts. POSIX sh; busybox is enough.

ok() { echo "ok $1"; }
fail() { echo "FAIL $1: $2"; }
# check NAME DETAIL CONDITION...: ok when the condition (a command) succeeds.
check() {
    name=$1 detail=$2
    shift 2
    if "$@"; then ok "$name"; else fail "$name" "$detail"; fi
}

# The value of KEY in a one-line JSON object (verdict keys are unique), strings quoted.
jv() { sed -nE 's/.*"'"$2"'":("[^"]*"|\[[^]]*\]|[^,}]*).*/\1/p' "$1"; }

# wait_for CONDITION...: polls every 0.1 s for up to WAIT_SECS seconds (the script sets
# it: the emulated guests are slow, and differently so).
wait_for() {
    deadline=$(($(cut -d. -f1 /proc/uptime) + ${WAIT_SECS:-20}))
    while ! "$@"; do
        [ "$(cut -d. -f1 /proc/uptime)" -lt "$deadline" ] || return 1
        sleep 0.1
    done
}
