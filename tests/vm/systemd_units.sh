#!/bin/sh
# The shipped systemd units under a real systemd (PID 1) on pure cgroup v2.
# tests/operators/deploy.rs runs this as root inside `tests/vm/run-in-vm.sh --systemd` (the host's
# own root, read-only under a tmpfs overlay, so what is installed here vanishes with the
# VM): `systemd_units.sh BRIG DIR` (DIR/deploy/systemd holds the units as shipped).
#
#   brig-serve.service  as shipped (user brig, rootless, Delegate=yes), and at the same
#                       time a copy as root (brig-serve-root.service: the socket in
#                       /run/brig-root, the log in /var/log/brig-root, and the drop-in
#                       deploy/README.md shows, User=root): a request from a client in
#                       the group brig, a session (a command, two Python cells sharing a
#                       variable, close), a memory kill through the server (exit 137,
#                       status oom), `brig doctor` as the unit's user with a delegated
#                       cgroup (systemd-run), `systemctl stop` while a request runs (it
#                       drains: the request finishes, the stop succeeds within
#                       TimeoutStopSec, the unit's cgroup is gone), start, `systemctl
#                       restart`, and a request again.
#   brig-worker.service as shipped: one job through its spool, as deploy/README.md shows.
#
# The three run in parallel (the guest is emulated: this halves the time), each into a
# file of its own, printed in turn. Prints one line per check, `ok NAME` or `FAIL NAME:
# detail`, and `done` at the end; lines starting with `#` are notes (the doctor's output,
# the journal of a unit that logged an error).
set -u

brig_built=$1 repo=$2
if [ "${JAIL_VM_SYSTEMD:-}" != 1 ] || [ "$(cat /proc/1/comm)" != systemd ]; then
    echo "FAIL guard: not in the run-in-vm.sh --systemd guest; refusing to install units"
    exit 1
fi

W=/tmp/units
mkdir -p $W && chmod 1777 $W
CG=/sys/fs/cgroup

. "$(dirname "$0")/checks.sh"
WAIT_SECS=60 # wait_for's bound
note() { sed 's/^/# /'; }
section() { echo "# $(cut -d' ' -f1 /proc/uptime) s: $1"; }

prop() { systemctl show -P "$2" "$1"; }
journal() { journalctl -b -u "$1" --no-pager -o cat 2>&1 | tail -n 15 | note; }

# --- install, as deploy/README.md and the units' comments say ---------------------------
section "install"
install -m 755 "$brig_built" /usr/local/bin/brig
useradd --system --user-group --no-create-home brig
# A service that runs code: a member of the group brig, which may use the socket.
useradd --system --no-create-home --groups brig client
install -m 644 "$repo/deploy/systemd/brig-serve.service" /etc/systemd/system/
sed -e 's|/run/brig/|/run/brig-root/|g; s|^RuntimeDirectory=brig$|RuntimeDirectory=brig-root|' \
    -e 's|^LogsDirectory=brig$|LogsDirectory=brig-root|; s|/var/log/brig/|/var/log/brig-root/|g' \
    "$repo/deploy/systemd/brig-serve.service" >/etc/systemd/system/brig-serve-root.service
# deploy/README.md's drop-in: User=root; Group=brig stays, so that the runtime
# directory (the unit's user's and group's, 0750) stays open to the group brig; and the
# directory of the per-jail host uids' locks, which ProtectSystem= leaves read-only.
mkdir -p /etc/systemd/system/brig-serve-root.service.d
printf '[Service]\nUser=root\nRuntimeDirectory=brig-host-uids\n' >/etc/systemd/system/brig-serve-root.service.d/root.conf
install -D -m 755 "$repo/deploy/systemd/brig-worker.py" /usr/local/lib/brig-worker/brig-worker.py
install -m 644 "$repo/deploy/systemd/brig-worker.service" /etc/systemd/system/
systemctl daemon-reload
# A client trusts a listener that is root or itself, and the unit's user as deploy/README.md
# says (BRIG_SERVER_UID=brig).
as_client() { BRIG_SERVER_UID=brig setpriv --reuid=client --regid=client --init-groups "$@"; }

# --- brig-serve.service -----------------------------------------------------------------
socket_ready() { [ -S "$S" ]; }
gone() { [ ! -e "$1" ]; }

# Leaf cgroups brig-PID (a brig process's own, in a delegated cgroup) of processes that
# no longer exist, under $1.
dead_leaves() {
    for d in $(find "$1" -mindepth 1 -type d -name 'brig-[0-9]*' 2>/dev/null); do
        [ -d /proc/"${d##*/brig-}" ] || echo "$d"
    done
}
no_dead_leaves() { [ -z "$(dead_leaves "$1")" ]; }
# Jail cgroups of the unit that still hold processes: in its cgroup, and for a root
# server also in /sys/fs/cgroup/brig, a root brig's default (rootless, brig cannot write
# there: those are the root server's, which runs at the same time).
live_jails() {
    for d in $(find "$unit_cg" $root_jails -type d -name 'jail-[0-9]*' 2>/dev/null); do
        grep -q 'populated 1' "$d/cgroup.events" && echo "$d"
    done
}
not_listed() { ! as_client brig session list --server "$S" 2>&1 | grep -q "$1"; }
started_or_gone() { grep -q started $w/drain || ! kill -0 "$1" 2>/dev/null; }
no_live_jails() { [ -z "$(live_jails)" ]; }

# serve_checks MODE USER UNIT SOCKET: every check of the serve unit, names prefixed
# with MODE.
serve_checks() {
    m=$1 u=$3 S=$4 w=$W/$1
    root_jails=''
    [ "$m" = root ] && root_jails=$CG/brig
    mkdir -p $w && chmod 1777 $w
    section "$u ($m)"
    systemctl start $u
    if ! wait_for socket_ready; then
        fail "$m-serve-starts" "no socket $S; $(prop $u ActiveState), result $(prop $u Result)"
        journal $u
        systemctl stop $u
        return
    fi
    ok "$m-serve-starts"
    unit_cg=$CG$(prop $u ControlGroup)
    user=$(ps -o user= -p "$(prop $u MainPID)")
    check "$m-serve-runs-as-$2" "the server runs as $user" [ "$user" = "$2" ]
    echo "# the unit's cgroup $unit_cg: $(find "$unit_cg" -mindepth 1 -type d | sed "s|^$unit_cg/||" | head -n 12 | tr '\n' ' ')"

    # A request from a client in the group brig.
    out=$(as_client brig run --server $S -- echo hello 2>&1)
    check "$m-request" "$out" [ "$out" = hello ]

    # A session: a command, two Python cells sharing a variable, close.
    sid=$(as_client brig session create --server $S 2>$w/err)
    if [ -n "$sid" ]; then
        ok "$m-session-create"
        out=$(as_client brig session exec --server $S --session "$sid" -- sh -c 'echo $((6 * 7))' 2>&1)
        check "$m-session-exec" "$out" [ "$out" = 42 ]
        echo 'x = 6 * 7' | as_client brig session exec --server $S --session "$sid" --code - >$w/out 2>&1
        out=$(echo 'print(x)' | as_client brig session exec --server $S --session "$sid" --code - 2>&1)
        check "$m-session-cells-share-variables" "$(cat $w/out) $out" [ "$out" = 42 ]
        as_client brig session close --server $S --session "$sid" >$w/out 2>&1
        check "$m-session-close" "exit $?: $(cat $w/out)" [ $? = 0 ]
        # The server forgets the session once its runner has exited, just after the
        # answer to close.
        wait_for not_listed "$sid"
        check "$m-session-closed" "still listed: $(as_client brig session list --server $S 2>&1)" not_listed "$sid"
    else
        fail "$m-session-create" "$(cat $w/err)"
    fi

    # A memory kill through the server.
    rm -f $w/v
    as_client brig run --server $S --memory 32M --report $w/v -- sh -c 'x=a; while :; do x=$x$x; done' >$w/out 2>&1
    rc=$?
    check "$m-memory-kill-exit-137" "exit $rc: $(cat $w/out)" [ $rc = 137 ]
    v="$(jv $w/v status) $(jv $w/v cgroup) $(jv $w/v memory_bytes)"
    check "$m-memory-kill-verdict" "$v; $(cat $w/v)" [ "$v" = '"oom" "v2" 33554432' ]

    # brig doctor as the unit's user, with a delegated cgroup of its own.
    systemd-run --quiet --wait --pipe --collect --uid="$2" --gid="$2" -p Delegate=yes \
        /usr/local/bin/brig doctor </dev/null >$w/doctor 2>&1
    rc=$?
    note <$w/doctor
    check "$m-doctor-as-$2" "exit $rc" [ $rc = 0 ]

    wait_for no_dead_leaves "$unit_cg"
    check "$m-no-cgroups-of-dead-processes" "$(dead_leaves "$unit_cg" | wc -l) left, e.g. $(dead_leaves "$unit_cg" | head -n 3 | tr '\n' ' ')" \
        no_dead_leaves "$unit_cg"

    # systemctl stop while a request runs: it drains.
    as_client brig run --server $S -- sh -c 'echo started; sleep 4; echo drained' >$w/drain 2>&1 &
    client=$!
    wait_for started_or_gone $client
    echo "# jails while a request runs: $(live_jails | tr '\n' ' ')"
    systemctl stop $u
    wait $client
    rc=$?
    out=$(cat $w/drain | tr '\n' ' ')
    check "$m-stop-drains-the-running-request" "exit $rc: $out" [ "$rc $out" = "0 started drained " ]
    r="$(prop $u ActiveState) $(prop $u Result)"
    check "$m-stop-is-clean" "$r" [ "$r" = "inactive success" ]
    check "$m-stop-leaves-no-cgroup" "left: $(find "$unit_cg" 2>&1 | tr '\n' ' ')" gone "$unit_cg"
    check "$m-stop-removes-the-socket" "$(ls -la "${S%/*}" 2>&1)" gone $S
    check "$m-stop-leaves-no-jail" "$(live_jails | tr '\n' ' ')" no_live_jails

    # Start again, restart, and a request.
    systemctl start $u && wait_for socket_ready
    check "$m-start-again" "$(prop $u ActiveState)" socket_ready
    before=$(prop $u MainPID)
    systemctl restart $u && wait_for socket_ready
    after=$(prop $u MainPID)
    check "$m-restart" "main pid $before then $after" [ "$after" != "$before" -a "$after" != 0 ]
    out=$(as_client brig run --server $S -- echo again 2>&1)
    check "$m-request-after-restart" "$out" [ "$out" = again ]
    systemctl stop $u
    r="$(prop $u ActiveState) $(prop $u Result)"
    check "$m-final-stop" "$r" [ "$r" = "inactive success" ]
    journal $u >$w/journal
    grep -qi 'error\|fail' $w/journal && cat $w/journal
}

# --- brig-worker.service ----------------------------------------------------------------
worker_checks() {
    section "brig-worker.service"
    systemctl start brig-worker.service
    spool=/var/lib/brig-worker
    job_done() { [ -s $spool/outbox/job1.json ]; }
    if wait_for test -d $spool/inbox; then
        echo 'print(6 * 7)' >$spool/job1.tmp && mv $spool/job1.tmp $spool/inbox/job1.py
        wait_for job_done
    fi
    if job_done; then
        r=$(python3 -c 'import json, sys; r = json.load(open(sys.argv[1])); print(r["exit"], r["verdict"]["status"], r["verdict"]["protections"]["cgroup"], repr(r["stdout"]))' $spool/outbox/job1.json 2>&1)
        check worker-job "$r; $(cat $spool/outbox/job1.json)" [ "$r" = "0 ok v2 '42\\n'" ]
        check worker-job-moved-to-done "$(ls -R $spool)" test -e $spool/done/job1.py
    else
        fail worker-job "no $spool/outbox/job1.json; $(prop brig-worker.service ActiveState) $(prop brig-worker.service Result)"
        journal brig-worker.service
    fi
    check worker-runs-as-a-dynamic-user "$(ps -o user= -p "$(prop brig-worker.service MainPID)")" \
        [ "$(ps -o user= -p "$(prop brig-worker.service MainPID)")" = brig-worker ]
    unit_cg=$CG$(prop brig-worker.service ControlGroup)
    check worker-leaf-and-jails-cgroups "$(ls $unit_cg)" test -d $unit_cg/worker -a -d $unit_cg/jails
    systemctl stop brig-worker.service
    r="$(prop brig-worker.service ActiveState) $(prop brig-worker.service Result)"
    check worker-stop "$r" [ "$r" = "inactive success" ]
    journal brig-worker.service
}

serve_checks rootless brig brig-serve.service /run/brig/brig.sock >$W/rootless.out 2>&1 &
serve_checks root root brig-serve-root.service /run/brig-root/brig.sock >$W/root.out 2>&1 &
worker_checks >$W/worker.out 2>&1 &
wait
cat $W/rootless.out $W/root.out $W/worker.out
echo done
