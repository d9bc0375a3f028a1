#!/bin/sh
# brig's limits on a pure cgroup v2 hierarchy. tests/operators/cgroup_v2.rs runs this as root inside
# the tests/vm/run-in-vm.sh guest (Debian kernel, busybox userland, every controller
# enabled in the root cgroup.subtree_control): `cgroup_v2.sh BRIG`.
#
# Prints one line per check, `ok NAME` or `FAIL NAME: detail`, and `done` at the end;
# the Rust test counts them. Lines starting with `#` are notes. Only busybox programs are
# available, inside the jail too (it binds the guest's /usr).
set -u

brig_built=$1
if [ "${JAIL_VM:-}" != 1 ] || [ "$(cat /proc/self/cgroup)" != "0::/" ]; then
    echo "FAIL guard: not in the run-in-vm.sh guest; refusing to touch any cgroup"
    exit 1
fi

CG=/sys/fs/cgroup
W=/tmp/w # scratch: verdicts, outputs (the guest's tmpfs)
mkdir -p $W/sync && chmod 777 $W
# uid 1000 must be able to execute brig too: a copy on the guest's tmpfs.
B=/tmp/brig
cp "$brig_built" $B && chmod 755 $B

. "$(dirname "$0")/checks.sh"
WAIT_SECS=20 # wait_for's bound

# expect NAME FILE KEY=VALUE...: every KEY of the verdict in FILE has exactly VALUE.
expect() {
    name=$1 file=$2
    shift 2
    if [ ! -s "$file" ]; then
        fail "$name" "no verdict in $file"
        return
    fi
    bad=''
    for kv in "$@"; do
        key=${kv%%=*} want=${kv#*=}
        got=$(jv "$file" "$key")
        [ "$got" = "$want" ] || bad="$bad $key=$got (want $want)"
    done
    if [ -z "$bad" ]; then ok "$name"; else fail "$name" "$bad; $(cat "$file")"; fi
}

# between NAME VALUE LOW HIGH: LOW <= VALUE <= HIGH (integers).
between() {
    case $2 in
        '' | *[!0-9]*) fail "$1" "'$2' is not a number" ;;
        *) if [ "$2" -ge "$3" ] && [ "$2" -le "$4" ]; then ok "$1"; else fail "$1" "$2 not in [$3, $4]"; fi ;;
    esac
}

# The jail cgroups of brig process $2 in directory $1 (none: empty).
jails_of() { ls -d "$1"/jail-"$2"-* 2>/dev/null; }
no_jails_of() { [ -z "$(jails_of "$1" "$2")" ]; }
has_jail_of() { [ -n "$(jails_of "$1" "$2")" ]; }
# The jail's init and its program are in cgroup $1.
two_procs_in() { [ "$(wc -l <"$1/cgroup.procs")" -ge 2 ]; }

# A program that waits until the test creates $W/sync/go (bound read-only at /sync).
WAIT_GO="while [ ! -e /sync/go ]; do sleep 0.05; done"
SYNC="--ro-bind $W/sync:/sync --time-limit 60s"

# Processes whose command line is exactly the given words.
procs_with_args() {
    want=$(echo "$*")
    for p in /proc/[0-9]*; do
        args=$(tr '\0' ' ' <"$p/cmdline" 2>/dev/null)
        [ "${args% }" = "$want" ] && echo "${p#/proc/}"
    done
}

start=$(date +%s)
# section NAME: a note with the guest uptime, to see where the time goes.
section() { echo "# $(cut -d' ' -f1 /proc/uptime) s: $1"; }

# --- CLONE_INTO_CGROUP and the cgroup namespace -----------------------------------------
section "CLONE_INTO_CGROUP and the cgroup namespace"
$B run --report $W/v -- cat /proc/self/cgroup >$W/out 2>$W/err
check jail-sees-its-cgroup-as-root "$(cat $W/out $W/err)" [ "$(cat $W/out)" = "0::/" ]
expect verdict-says-v2 $W/v status='"ok"' cgroup='"v2"' cgroup_enforced=true rootless=false
# brig's own cgroup may hold only one process (brig): the jail's init exists only if
# clone3 created it directly in the jail's cgroup, as a fork would fail with EAGAIN.
mkdir $CG/tight && echo 1 >$CG/tight/pids.max
sh -c "echo \$\$ >$CG/tight/cgroup.procs && exec $B run --report $W/v -- true" >$W/out 2>&1
check clone-into-cgroup "exit $?: $(cat $W/out)" [ "$(jv $W/v status)" = '"ok"' ]
rmdir $CG/tight

# --- The limit files, the jail's processes, removal -------------------------------------
section "The limit files, the jail's processes, removal"
rm -f $W/sync/go
$B run $SYNC --memory 48M --pids 20 --cpus 0.5 -- sh -c "$WAIT_GO" &
pid=$!
if wait_for has_jail_of $CG/brig $pid; then
    dir=$(jails_of $CG/brig $pid)
    wait_for two_procs_in "$dir"
    files="$(cat $dir/memory.max) $(cat $dir/memory.swap.max) $(cat $dir/memory.oom.group) $(cat $dir/pids.max) $(cat $dir/cpu.max)"
    check limit-files "$files" [ "$files" = "50331648 0 1 20 50000 100000" ]
    procs=$(cat $dir/cgroup.procs | tr '\n' ' ')
    init=$(cat /proc/$pid/task/$pid/children | cut -d' ' -f1)
    check jail-processes-in-the-jail-cgroup "procs $procs, brig $pid, init $init" \
        sh -c "echo ' $procs' | grep -q ' $init ' && ! echo ' $procs' | grep -q ' $pid '"
    check brig-stays-in-its-own-cgroup "$(cat /proc/$pid/cgroup)" [ "$(cat /proc/$pid/cgroup)" = "0::/" ]
    check brig-parent-hands-down-controllers "$(cat $CG/brig/cgroup.subtree_control)" \
        sh -c "grep -q memory $CG/brig/cgroup.subtree_control && grep -q pids $CG/brig/cgroup.subtree_control"
else
    fail limit-files "no $CG/brig/jail-$pid-*: $(ls $CG/brig)"
fi
touch $W/sync/go
wait $pid
check jail-cgroup-removed-after-the-run "$(jails_of $CG/brig $pid)" no_jails_of $CG/brig $pid
check brig-parent-removed-when-empty "" test ! -d $CG/brig

# --- Memory -----------------------------------------------------------------------------
section "Memory"
$B run --report $W/v --memory 32M -- sh -c 'x=a; while :; do x=$x$x; done' >$W/out 2>$W/err
rc=$?
expect memory-bomb-is-oom $W/v status='"oom"' brig_exit_code=137
check memory-bomb-exit-137 "exit $rc: $(cat $W/err)" [ $rc = 137 ]
between memory-bomb-oom-kills "$(jv $W/v oom_kills)" 1 1000
between memory-peak-near-the-limit "$(jv $W/v memory_peak_bytes)" $((24 << 20)) $((32 << 20))
check memory-bomb-one-line "$(cat $W/err)" sh -c "[ \$(wc -l <$W/err) = 1 ] && grep -q '^brig: .*memory' $W/err"
# memory.oom.group: the OOM kill of a child takes the whole jail, its parent too.
$B run --report $W/v --memory 32M -- sh -c '(x=a; while :; do x=$x$x; done); echo survived; exit 0' >$W/out 2>$W/err
rc=$?
check oom-kills-the-whole-jail "exit $rc, output $(cat $W/out)" sh -c "[ $rc = 137 ] && [ ! -s $W/out ]"
expect oom-kills-the-whole-jail-verdict $W/v status='"oom"' brig_exit_code=137 exit_code=null

# --- Processes --------------------------------------------------------------------------
section "Processes"
$B run --report $W/v --pids 16 -- sh -c 'i=0; while [ $i -lt 100 ]; do sleep 5 & i=$((i+1)); done; wait' >$W/out 2>$W/err
rc=$?
expect fork-bomb-stops-at-pids $W/v pids_peak=16 status='"nonzero_exit"'
check fork-failed-in-the-jail "exit $rc: $(cat $W/err)" grep -q "can't fork" $W/err

# --- CPU time, wall time, output --------------------------------------------------------
section "CPU time, wall time, output"
$B run --report $W/v --cpu-time 1s --time-limit 30s -- sh -c 'while :; do :; done' 2>$W/err
rc=$?
expect cpu-spin-is-cpu-time $W/v status='"cpu_time"' signal=24 brig_exit_code=152
check cpu-spin-exit-152 "exit $rc" [ $rc = 152 ]
# Tick-based accounting (and an emulated CPU) may put the kill a tick before 1000 ms.
between cpu-spin-used-its-second "$(($(jv $W/v cpu_user_ms) + $(jv $W/v cpu_sys_ms)))" 900 5000
between cpu-spin-wall-well-under-time-limit "$(jv $W/v wall_ms)" 900 15000

$B run --report $W/v --time-limit 1s -- sleep 100 2>$W/err
rc=$?
expect sleep-is-timeout $W/v status='"timeout"' brig_exit_code=124
check sleep-timeout-exit-124 "exit $rc" [ $rc = 124 ]
between sleep-timeout-wall "$(jv $W/v wall_ms)" 1000 10000

$B run --report $W/v --output-limit 1M -- head -c 104857600 /dev/zero >$W/out 2>$W/err
rc=$?
check output-flood-cut-at-1MiB "$(wc -c <$W/out) bytes, exit $rc" sh -c "[ $(wc -c <$W/out) = 1048576 ] && [ $rc = 124 ]"
expect output-flood-verdict $W/v status='"output_limit"' output_truncated=true stderr_bytes=0
between output-flood-counted "$(jv $W/v stdout_bytes)" 1048577 104857600

# --- A daemon does not outlive the jail -------------------------------------------------
section "A daemon does not outlive the jail"
$B run --report $W/v -- sh -c '(setsid sleep 1234 &); sleep 0.3; exit 0' >$W/out 2>&1 &
pid=$!
wait $pid
rc=$?
check daemon-run-ok "exit $rc: $(cat $W/out)" [ $rc = 0 ]
check daemon-killed "$(procs_with_args sleep 1234)" [ -z "$(procs_with_args sleep 1234)" ]
check daemon-cgroup-removed "$(jails_of $CG/brig $pid)" no_jails_of $CG/brig $pid
expect daemon-verdict-has-usage $W/v status='"ok"' oom_kills=0
between daemon-pids-peak "$(jv $W/v pids_peak)" 3 256
between daemon-memory-peak "$(jv $W/v memory_peak_bytes)" 1 $((1 << 30))

# --- Concurrent jails get their own cgroups ---------------------------------------------
section "Concurrent jails get their own cgroups"
rm -f $W/sync/go
pids=''
for i in 1 2 3 4 5; do
    $B run $SYNC --pids $((30 + i)) --report $W/c$i -- sh -c "$WAIT_GO" &
    pids="$pids $!"
done
all_up() { for p in $pids; do has_jail_of $CG/brig $p || return 1; done; }
if wait_for all_up; then
    maxes=$(for p in $pids; do cat $(jails_of $CG/brig $p)/pids.max; done | tr '\n' ' ')
    check concurrent-jails-own-cgroups "$maxes" [ "$maxes" = "31 32 33 34 35 " ]
else
    fail concurrent-jails-own-cgroups "not all up: $(ls $CG/brig)"
fi
touch $W/sync/go
wait
left=$(for p in $pids; do jails_of $CG/brig $p; done)
check concurrent-jails-removed "$left" [ -z "$left" ]
okv=0
for i in 1 2 3 4 5; do [ "$(jv $W/c$i status)" = '"ok"' ] && okv=$((okv + 1)); done
check concurrent-jails-succeed "$okv of 5" [ $okv = 5 ]

# --- --cgroup-parent --------------------------------------------------------------------
section "--cgroup-parent"
mkdir $CG/deleg
rm -f $W/sync/go
$B run $SYNC --cgroup-parent $CG/deleg --memory 40M --pids 10 --report $W/v -- sh -c "$WAIT_GO" &
pid=$!
if wait_for has_jail_of $CG/deleg $pid; then
    dir=$(jails_of $CG/deleg $pid)
    files="$(cat $dir/memory.max) $(cat $dir/pids.max)"
    check cgroup-parent-holds-the-jail "$files" [ "$files" = "41943040 10" ]
    check cgroup-parent-not-brig-subtree "$(jails_of $CG/brig $pid)" no_jails_of $CG/brig $pid
    check cgroup-parent-controllers-enabled "$(cat $CG/deleg/cgroup.subtree_control)" \
        sh -c "grep -q memory $CG/deleg/cgroup.subtree_control && grep -q pids $CG/deleg/cgroup.subtree_control"
else
    fail cgroup-parent-holds-the-jail "no $CG/deleg/jail-$pid-*: $(ls $CG/deleg)"
fi
touch $W/sync/go
wait $pid
check cgroup-parent-jail-removed "$(jails_of $CG/deleg $pid)" no_jails_of $CG/deleg $pid
expect cgroup-parent-verdict $W/v status='"ok"' cgroup='"v2"' memory_bytes=41943040 pids=10
# The same parent, named relative to the cgroup2 mount; its memory limit holds.
$B run --report $W/v --cgroup-parent /deleg --memory 32M -- sh -c 'x=a; while :; do x=$x$x; done' 2>$W/err
rc=$?
expect cgroup-parent-relative-oom $W/v status='"oom"' brig_exit_code=137 cgroup='"v2"'
$B run --cgroup-parent $CG/no-such-cgroup -- true >$W/out 2>$W/err
rc=$?
check cgroup-parent-missing-is-125 "exit $rc: $(cat $W/err)" \
    sh -c "[ $rc = 125 ] && [ \$(wc -l <$W/err) = 1 ] && grep -q '^brig: --cgroup-parent' $W/err"
# A parent that still holds a process cannot hand controllers down: brig says so.
mkdir $CG/busy
sh -c "echo \$\$ >$CG/busy/cgroup.procs && exec sleep 1000" &
busy=$!
wait_for grep -q "^$busy\$" $CG/busy/cgroup.procs
$B run --cgroup-parent $CG/busy --memory 32M -- true >$W/out 2>$W/err
rc=$?
check cgroup-parent-busy-is-125 "exit $rc: $(cat $W/err)" \
    sh -c "[ $rc = 125 ] && [ \$(wc -l <$W/err) = 1 ] && grep -q -- '--cgroup-parent' $W/err"
kill $busy
wait $busy 2>/dev/null
rmdir $CG/busy

# --- Rootless ---------------------------------------------------------------------------
section "Rootless"
# uid 1000 in the root cgroup: nothing is delegated.
su user -s /bin/sh -c "exec $B run --memory 32M -- true" >$W/out 2>$W/err
rc=$?
check rootless-explicit-limit-fails-closed "exit $rc: $(cat $W/err)" \
    sh -c "[ $rc = 125 ] && [ \$(wc -l <$W/err) = 1 ] && grep -q 'no systemd user manager' $W/err && grep -q 'chown -R user /sys/fs/cgroup/brig-user' $W/err"
# The fix the line gives, as it gives it: root makes the cgroup, hands it over and starts
# brig's shell in it; brig then uses it as its own delegated cgroup.
mkdir $CG/brig-user
echo "+memory +pids +cpu" >$CG/cgroup.subtree_control
chown -R user $CG/brig-user
sh -c "echo \$\$ >$CG/brig-user/cgroup.procs && exec su user -s /bin/sh -c 'exec $B run --report $W/u0 --memory 32M -- true'" >$W/out 2>$W/err
rc=$?
check rootless-fix-as-said-works "exit $rc: $(cat $W/err)" [ $rc = 0 ]
expect rootless-fix-as-said-enforced $W/u0 cgroup='"v2"' cgroup_enforced=true rootless=true
for dir in $CG/brig-user/*/; do rmdir "$dir" 2>/dev/null; done
rmdir $CG/brig-user
su user -s /bin/sh -c "exec $B run --report-fd 3 -- true 3>$W/u" >$W/out 2>$W/err
rc=$?
check rootless-defaults-run-anyway "exit $rc: $(cat $W/err)" [ $rc = 0 ]
expect rootless-defaults-not-enforced $W/u status='"ok"' cgroup=null cgroup_enforced=false rootless=true
warnings=$(jv $W/u warnings)
check rootless-defaults-warn "$warnings" sh -c "echo '$warnings' | grep -q 'not enforced'"

# uid 1000 in a delegated cgroup (like a systemd unit with Delegate=yes): user1 hands
# memory, pids and cpu down; each run starts alone in a leaf of its own, owned by uid 1000.
mkdir $CG/user1 $CG/user1/s1 $CG/user1/s2
echo "+memory +pids +cpu" >$CG/user1/cgroup.subtree_control
chown -R 1000:1000 $CG/user1
# in_leaf LEAF SCRIPT: runs SCRIPT (which execs brig) as uid 1000, alone in $CG/user1/LEAF.
in_leaf() {
    sh -c "echo \$\$ >$CG/user1/$1/cgroup.procs && exec su user -s /bin/sh -c 'exec sh $2'"
}
cat >$W/r1.sh <<EOF
exec $B run --report $W/u1 --memory 32M -- sh -c 'x=a; while :; do x=\$x\$x; done'
EOF
cat >$W/r2.sh <<EOF
exec $B run --report $W/u2 --pids 12 -- sh -c 'cat /proc/self/cgroup; i=0; while [ \$i -lt 50 ]; do sleep 5 & i=\$((i+1)); done; wait'
EOF
in_leaf s1 $W/r1.sh >$W/out 2>$W/err
rc=$?
check rootless-delegated-exit-137 "exit $rc: $(cat $W/err)" [ $rc = 137 ]
expect rootless-delegated-oom $W/u1 status='"oom"' cgroup='"v2"' rootless=true cgroup_enforced=true
left=$(ls -d $CG/user1/s1/jail-* 2>/dev/null)
check rootless-delegated-jail-removed "$left" [ -z "$left" ]
in_leaf s2 $W/r2.sh >$W/out 2>$W/err
rc=$?
expect rootless-delegated-pids $W/u2 pids_peak=12 cgroup='"v2"' rootless=true
check rootless-delegated-cgroup-namespace "$(cat $W/out)" [ "$(head -n 1 $W/out)" = "0::/" ]
stale=$(ls -d $CG/user1/s1/brig-* $CG/user1/s2/brig-* 2>/dev/null | tr '\n' ' ')
echo "# left in the delegated cgroups (brig's own leaves): ${stale:-none}"

# brig sharing its delegated cgroup with the shell that started it: it cannot hand
# controllers down there (no internal processes) and can move only itself out; an
# explicit limit is refused with the fix, nothing is left behind, and doctor says so.
# As systemd delegates (Delegate=yes): the directory and its cgroup.procs,
# cgroup.subtree_control and cgroup.threads belong to the user.
delegate() {
    mkdir $CG/$1
    chown 1000:1000 $CG/$1 $CG/$1/cgroup.procs $CG/$1/cgroup.subtree_control $CG/$1/cgroup.threads
}
delegate shared
echo "$B run --memory 32M -- true 2>$W/shared.err; echo \"rc=\$?\"; $B doctor >$W/doctor 2>&1" >$W/shared.sh
sh -c "echo \$\$ >$CG/shared/cgroup.procs && su user -s /bin/sh -c 'sh $W/shared.sh'" >$W/out 2>&1
check rootless-shared-delegation-refused "$(cat $W/out $W/shared.err)" \
    sh -c "grep -q '^rc=125' $W/out && [ \$(wc -l <$W/shared.err) = 1 ] && grep -q 'holds other processes' $W/shared.err && grep -q 'exec brig' $W/shared.err"
left=$(ls -d $CG/shared/*/ 2>/dev/null | tr '\n' ' ')
check rootless-shared-delegation-leaves-nothing "$left" [ -z "$left" ]
check rootless-shared-delegation-doctor "$(grep 'cgroup limits' $W/doctor)" \
    sh -c "grep 'cgroup limits' $W/doctor | grep -q '^warn .*holds other processes'"
rmdir $CG/shared

# --- brig serve, rootless, in a delegated cgroup (a unit with Delegate=yes) -------------
# The server moves itself into a leaf (brig-PID) of the delegated cgroup and its jails go
# beside it: runs, sessions and memory kills work; once stopped it leaves the cgroup as
# it found it.
section "brig serve in a delegated cgroup"
delegate svc
# The socket in a directory of the server's own (brig refuses one others can write), and
# the clients (root) trust the server's uid.
mkdir -m 755 /tmp/svc && chown user /tmp/svc
S2=/tmp/svc/svc.sock
export BRIG_SERVER_UID=1000
# serve_in_svc ARGS: brig serve as uid 1000, alone in $CG/svc (its shell execs it).
serve_in_svc() {
    echo "exec $B serve --socket $S2 --quiet-limits $*" >$W/svc.sh
    sh -c "echo \$\$ >$CG/svc/cgroup.procs && exec su user -s /bin/sh -c 'exec sh $W/svc.sh'" >$W/svc.out 2>&1 &
    svc=$!
    wait_for test -S $S2
}
serve_in_svc --pool 1 --session-pool 1 --memory 32M --pids 64
check serve-delegated-in-its-leaf "$(cat /proc/$svc/cgroup) $(cat $W/svc.out)" [ "$(cat /proc/$svc/cgroup)" = "0::/svc/brig-$svc" ]
out=$($B run --server $S2 --report $W/d1 -- echo hello 2>$W/err)
check serve-delegated-run "$out $(cat $W/err) $(cat $W/svc.out)" [ "$out" = hello ]
expect serve-delegated-run-verdict $W/d1 status='"ok"' cgroup='"v2"' cgroup_enforced=true memory_bytes=33554432
$B run --server $S2 --report $W/d2 -- sh -c 'x=a; while :; do x=$x$x; done' >$W/out 2>$W/err
rc=$?
check serve-delegated-oom-137 "exit $rc: $(cat $W/err)" [ $rc = 137 ]
expect serve-delegated-oom-verdict $W/d2 status='"oom"' cgroup='"v2"'
sid=$($B session create --server $S2 2>$W/err)
out=$($B session exec --server $S2 --session "$sid" -- echo alive 2>&1)
check serve-delegated-session "$sid: $out $(cat $W/err)" [ "$out" = alive ]
$B session close --server $S2 --session "$sid"
failures=$($B serve --socket $S2 --status | sed -n 's/^failures: //p')
check serve-delegated-no-failures "$failures $(cat $W/svc.out)" [ "$failures" = 0 ]
kill $svc
wait $svc
rc=$?
left=$(ls -d $CG/svc/*/ 2>/dev/null | tr '\n' ' ')
check serve-delegated-stops-clean "exit $rc, left: $left; $(cat $W/svc.out)" \
    sh -c "[ $rc = 0 ] && [ -z '$left' ] && [ -z \"\$(cat $CG/svc/cgroup.subtree_control)\" ]"

# A jail build that fails (the delegated cgroup takes no more descendants than the
# server's leaf) is counted, logged once, retried later and later, and leaves no cgroup;
# a request still gets a jail of its own once the cgroup takes it.
echo 1 >$CG/svc/cgroup.max.descendants
serve_in_svc --pool 2 --memory 32M
status_of() { $B serve --socket $S2 --status | sed -n "s/^$1: //p"; }
backing_off() { [ "$(status_of failures)" -ge 3 ] && [ "$(status_of pool_retry_ms)" -gt 0 ]; }
# (Seen once: the wait between tries ends, and the next try starts, soon after.)
if wait_for backing_off; then
    ok serve-failing-build-backs-off
else
    fail serve-failing-build-backs-off "$($B serve --socket $S2 --status | tr '\n' ' ')"
fi
lines=$(grep -c 'failed to assemble' $W/svc.out)
check serve-failing-build-logged-once "$(cat $W/svc.out)" [ "$lines" = 1 ]
left=$(ls -d $CG/svc/jail-* 2>/dev/null | tr '\n' ' ')
check serve-failing-build-leaks-nothing "$left" [ -z "$left" ]
echo max >$CG/svc/cgroup.max.descendants
out=$($B run --server $S2 -- echo recovered 2>$W/err)
check serve-failing-build-request-served "$out $(cat $W/err)" [ "$out" = recovered ]
kill $svc
wait $svc
left=$(ls -d $CG/svc/*/ 2>/dev/null | tr '\n' ' ')
check serve-failing-build-stops-clean "$left" [ -z "$left" ]
rmdir $CG/svc

# --- CPU bandwidth ----------------------------------------------------------------------
unset BRIG_SERVER_UID

section "CPU bandwidth"
rm -f $W/sync/go
$B run $SYNC --cpus 0.2 -- sh -c "while [ ! -e /sync/go ]; do :; done" &
pid=$!
if wait_for has_jail_of $CG/brig $pid; then
    sleep 1.5
    dir=$(jails_of $CG/brig $pid)
    throttled=$(sed -n 's/^nr_throttled //p' $dir/cpu.stat)
    between cpus-throttles "$throttled" 1 100000
else
    fail cpus-throttles "no $CG/brig/jail-$pid-*"
fi
touch $W/sync/go
wait $pid

# --- a session of brig serve --------------------------------------------------------------
# A session's jail outlives the OOM kill of one of its programs (memory.oom.group off for
# it), and the kill is that exec's status; closed, it leaves no cgroup.
section "a session"
# Not under $W (0777): brig refuses a socket directory, or one above it, others may write.
mkdir -m 755 /tmp/serve
S=/tmp/serve/serve.sock
$B serve --socket $S --pool 0 --quiet-limits >$W/serve.out 2>&1 &
serve_pid=$!
wait_for test -S $S
sid=$($B session create --server $S --memory 32M 2>$W/err)
check session-created "$(cat $W/err)" [ -n "$sid" ]
$B session exec --server $S --session "$sid" --report $W/sv -- sh -c 'x=a; while :; do x=$x$x; done' >$W/out 2>$W/err
rc=$?
check session-oom-exit-137 "exit $rc: $(cat $W/err)" [ $rc = 137 ]
expect session-oom-verdict $W/sv status='"oom"' cgroup='"v2"' memory_bytes=33554432
out=$($B session exec --server $S --session "$sid" -- echo alive 2>&1)
check session-survives-an-oom-kill "$out" [ "$out" = alive ]
runner=$(cat /proc/$serve_pid/task/$serve_pid/children | tr -d ' ')
$B session close --server $S --session "$sid"
check session-close-removes-its-cgroup "$(jails_of $CG/brig "$runner")" no_jails_of $CG/brig "$runner"
kill $serve_pid
wait $serve_pid

echo "# checks took $(($(date +%s) - start)) s"
echo done
