//! brig's limits on a pure cgroup v2 hierarchy, which this host (hybrid cgroups, brig on
//! the v1 hierarchies) cannot show. One test boots one throwaway VM with
//! `tests/vm/run-in-vm.sh` (a Debian kernel with only cgroup2, every controller
//! enabled; busybox userland) and runs `tests/vm/cgroup_v2.sh` there as root: memory and
//! fork bombs, CPU time, time limit, output flood, daemons, CLONE_INTO_CGROUP, the limit
//! files, `--cgroup-parent`, concurrent jails, rootless brig with and without a
//! delegated cgroup (alone in it, or sharing it with its caller), a rootless `brig serve`
//! in a delegated cgroup (runs, sessions, a memory kill, a failing build that backs off),
//! and a `brig serve` session that outlives an OOM kill. The script prints `ok NAME` or `FAIL NAME: detail` per check.
//!
//! The checks create cgroups at the root of the guest's hierarchy and move shells into
//! them, so they run only in the VM, even on a host with pure cgroup v2 (the script
//! refuses to run outside the guest). The VM never touches the host's cgroups. Under TCG
//! (no usable KVM here) the boot takes a few seconds and the whole test about 25 s.

use crate::common;

use common::*;
use std::path::Path;
use std::time::{Duration, Instant};

/// How many `ok` lines the script prints when every check passes.
const CHECKS: usize = 78;

/// The VM's own limit (boot included); run-in-vm.sh exits 124 when it is reached.
const VM_TIMEOUT_SECS: u64 = 170;

#[test]
fn limits_on_pure_cgroup_v2_in_a_vm() {
    let Some(vm) = Vm::new("vm") else { return };
    // The guest sees only the shared directory: brig and the script, copied into one.
    let script = vm.share().join("cgroup_v2.sh");
    let source = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/vm/cgroup_v2.sh");
    std::fs::copy(source, &script).expect("copy the script");
    copy_vm_checks(vm.share());

    let started = Instant::now();
    let output = vm.run(
        VM_TIMEOUT_SECS,
        &["sh".as_ref(), script.as_os_str(), vm.brig().as_os_str()],
    );
    let elapsed = started.elapsed();
    eprintln!("cgroup v2 VM run took {elapsed:.1?}");

    assert_vm_checks("run-in-vm.sh", &output, elapsed, CHECKS);
    assert!(
        elapsed < Duration::from_secs(VM_TIMEOUT_SECS),
        "took {elapsed:?}"
    );
}
