//! brig's limits on a pure cgroup v2 hierarchy, which this host (hybrid cgroups, brig on
//! the v1 hierarchies) cannot show. One test boots one throwaway VM with
//! `../shared/vm/run-in-vm.sh` (a Debian kernel with only cgroup2, every controller
//! enabled; busybox userland) and runs `tests/vm/cgroup_v2.sh` there as root: memory and
//! fork bombs, CPU time, time limit, output flood, daemons, CLONE_INTO_CGROUP, the limit
//! files, `--cgroup-parent`, concurrent jails, and rootless brig with and without a
//! delegated cgroup. The script prints `ok NAME` or `FAIL NAME: detail` per check.
//!
//! The VM never touches the host's cgroups. Under TCG (no usable KVM here) the boot takes
//! a few seconds and the whole test about 25 s.

#[allow(unused_macros)] // both_modes: every check here is one VM run
mod common;

use common::*;
use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

/// How many `ok` lines the script prints when every check passes.
const CHECKS: usize = 55;

/// The VM's own limit (boot included); run-in-vm.sh exits 124 when it is reached.
const VM_TIMEOUT_SECS: u64 = 170;

#[test]
fn limits_on_pure_cgroup_v2_in_a_vm() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let vm = root.join("../shared/vm/run-in-vm.sh");
    if !vm.exists() {
        eprintln!(
            "SKIPPED: {} is missing, so cgroup v2 cannot be tested here",
            vm.display()
        );
        return;
    }
    // As root, run-in-vm.sh installs qemu itself; otherwise it has to be there.
    let qemu_found = Command::new("sh")
        .args(["-c", "command -v qemu-system-x86_64"])
        .output()
        .is_ok_and(|output| output.status.success());
    if !qemu_found && !nix::unistd::geteuid().is_root() {
        eprintln!("SKIPPED: qemu-system-x86_64 is not installed and only root can install it");
        return;
    }

    // The guest sees only the shared directory: brig and the script, copied into one.
    let share = TempDir::new("vm");
    let brig_copy = share.path().join("brig");
    let script = share.path().join("cgroup_v2.sh");
    let copied = Command::new("cp")
        .arg(brig())
        .arg(&brig_copy)
        .status()
        .expect("run cp");
    assert!(copied.success(), "cp {}", brig().display());
    std::fs::copy(root.join("tests/vm/cgroup_v2.sh"), &script).expect("copy the script");

    let started = Instant::now();
    let mut vm_run = Command::new(&vm);
    vm_run
        .args(["--quiet", "--cpus", "1", "--timeout"])
        .arg(VM_TIMEOUT_SECS.to_string())
        .arg("--share")
        .arg(share.path())
        .arg("--")
        .arg("sh")
        .arg(&script)
        .arg(&brig_copy);
    // No Watchdog: run-in-vm.sh enforces its own timeout and kills qemu by pid.
    let output = vm_run.output().expect("run run-in-vm.sh");
    let elapsed = started.elapsed();
    eprintln!("cgroup v2 VM run took {elapsed:.1?}");

    let out = stdout(&output);
    let report = format!(
        "run-in-vm.sh exit {:?} after {elapsed:.1?}\n--- stdout\n{out}--- stderr\n{}---",
        output.status.code(),
        stderr(&output)
    );
    let failed: Vec<&str> = out.lines().filter(|l| l.starts_with("FAIL")).collect();
    assert!(
        failed.is_empty(),
        "failed checks:\n{}\n{report}",
        failed.join("\n")
    );
    assert_eq!(output.status.code(), Some(0), "{report}");
    assert_eq!(
        out.lines().last(),
        Some("done"),
        "the script did not finish\n{report}"
    );
    let passed: Vec<&str> = out
        .lines()
        .filter_map(|line| line.strip_prefix("ok "))
        .collect();
    let mut unique_names = passed.clone();
    unique_names.sort_unstable();
    unique_names.dedup();
    assert_eq!(
        unique_names.len(),
        passed.len(),
        "check names repeat\n{report}"
    );
    assert_eq!(passed.len(), CHECKS, "expected {CHECKS} checks\n{report}");
    assert!(
        elapsed < Duration::from_secs(VM_TIMEOUT_SECS),
        "took {elapsed:?}"
    );
}
