//! The jail's cgroups: each jail gets its own (fifty at once), under brig's subtree or a
//! given `--cgroup-parent`; they are removed when the run ends, and those of a killed brig
//! by the next run; no descriptor into the cgroup tree reaches the jail; and without a
//! usable cgroup (rootless here) explicit limits fail closed while the defaults run
//! unenforced, with a warning. On this host these are the v1 hierarchies; cgroup v2 is
//! tests/operators/cgroup_v2.rs, in a VM.

use crate::common;

use common::limits::*;
use common::*;
use serde_json::Value;
use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

both_modes!(missing_cgroup_parent_is_rejected);

// ---------------------------------------------------------------------------------------
// Many jails at once

#[test]
fn fifty_concurrent_jails_get_their_own_cgroups() {
    let sync = TempDir::new("sync");
    let reports = TempDir::new("reports");
    let bind = format!("{}:/sync", sync.str());
    let count = 50;
    let jails: Vec<Running> = (0..count)
        .map(|index| {
            let report = reports.path().join(format!("{index}.json"));
            let pids = (100 + index).to_string();
            let mut brig = command(
                Mode::Root,
                &[
                    "run",
                    "--ro-bind",
                    &bind,
                    "--pids",
                    &pids,
                    "--time-limit",
                    "50s",
                    "--report",
                    report.to_str().unwrap(),
                    "--",
                    "sh",
                    "-c",
                    "while [ ! -e /sync/go ]; do sleep 0.05; done",
                ],
            );
            brig.stdout(Stdio::piped()).stderr(Stdio::piped());
            Running::spawn(brig)
        })
        .collect();
    let pids: Vec<u32> = jails.iter().map(Running::pid).collect();
    let all_up = wait_until(Duration::from_secs(40), || {
        pids.iter().all(|&pid| {
            v1_jail_cgroup("pids", pid).is_some_and(|dir| {
                std::fs::read_to_string(dir.join("cgroup.procs"))
                    .is_ok_and(|procs| procs.lines().count() >= 2)
            })
        })
    });
    assert!(all_up, "not every jail got its cgroup with its processes");
    let mut seen = BTreeSet::new();
    for (index, &pid) in pids.iter().enumerate() {
        let dir = v1_jail_cgroup("pids", pid).unwrap();
        assert!(seen.insert(dir.clone()), "{} shared", dir.display());
        assert_eq!(
            read_trimmed(&dir.join("pids.max")),
            (100 + index).to_string()
        );
        let memory = v1_jail_cgroup("memory", pid).expect("a memory cgroup too");
        assert_eq!(
            read_trimmed(&memory.join("memory.limit_in_bytes")),
            "1073741824"
        );
    }
    std::fs::write(sync.path().join("go"), "").unwrap();
    for (index, running) in jails.into_iter().enumerate() {
        let done = finish(running);
        let report = reports.path().join(format!("{index}.json"));
        let v = read_verdict(&report, &done.output);
        assert_eq!(exit_status(&done, &v), 0, "{v}");
        assert_eq!(v["protections"]["cgroup"], "v1", "{v}");
        assert_eq!(v["limits"]["pids"], 100 + index, "{v}");
    }
    for pid in pids {
        assert_no_jail_cgroups(pid);
    }
}

/// Starts `brig run -- sleep 1000` as root, waits for its jail's cgroups, SIGKILLs brig and
/// returns brig's pid and the cgroups it had.
fn sigkill_brig_in_a_jail_with_dirs() -> (u32, Vec<PathBuf>) {
    let mut brig = command(Mode::Root, &["run", "--", "sleep", "1000"]);
    brig.stdout(Stdio::null()).stderr(Stdio::null());
    let mut running = Running::spawn(brig);
    let pid = running.pid();
    assert!(
        wait_until(Duration::from_secs(10), || jail_cgroups_of(pid).len() >= 2),
        "the jail never got its cgroups"
    );
    let dirs = jail_cgroups_of(pid);
    kill(pid, libc::SIGKILL);
    running.child.wait().unwrap();
    (pid, dirs)
}

fn sigkill_brig_in_a_jail() -> u32 {
    sigkill_brig_in_a_jail_with_dirs().0
}

/// A brig that is SIGKILLed cannot remove its jail's cgroups; the next brig does.
#[test]
fn cgroups_of_a_killed_brig_are_removed_by_the_next_run() {
    let (pid, dirs) = sigkill_brig_in_a_jail_with_dirs();
    // The jail dies with brig (parent-death signal); its cgroups stay until a later brig
    // removes them (any brig: the tests run in parallel).
    let procs = |dir: &PathBuf| std::fs::read_to_string(dir.join("cgroup.procs"));
    let gone_or_empty = |dir: &PathBuf| match procs(dir) {
        Ok(text) => text.is_empty(),
        Err(err) => err.kind() == std::io::ErrorKind::NotFound,
    };
    assert!(
        wait_until(Duration::from_secs(5), || dirs.iter().all(gone_or_empty)),
        "the jail outlived brig: {:?}",
        dirs.iter().map(|dir| (dir, procs(dir))).collect::<Vec<_>>()
    );
    let done = jail(Mode::Root, &["run", "--", "true"]);
    assert_code(&done.output, 0);
    assert!(
        wait_until(Duration::from_secs(5), || jail_cgroups_of(pid).is_empty()),
        "still there after the next run: {:?}",
        jail_cgroups_of(pid)
    );
}

/// The next run may start while the killed jail is still being torn down: it kills what
/// is left and waits for the cgroups to empty, so they are gone when it returns.
#[test]
fn the_next_run_at_once_removes_a_killed_brigs_cgroups() {
    for _ in 0..5 {
        let pid = sigkill_brig_in_a_jail();
        let done = jail(Mode::Root, &["run", "--", "true"]);
        assert_code(&done.output, 0);
        assert_eq!(
            jail_cgroups_of(pid),
            Vec::<PathBuf>::new(),
            "left after the next run"
        );
    }
}

// ---------------------------------------------------------------------------------------
// No usable cgroup: fail closed

#[test]
fn rootless_explicit_cgroup_limits_fail_closed() {
    for args in [
        &["--memory", "100M"][..],
        &["--pids", "10"][..],
        &["--cpus", "1"][..],
    ] {
        let mut all = vec!["run"];
        all.extend_from_slice(args);
        let output = jail(
            Mode::Rootless,
            &with_program(&all, &["sh", "-c", "echo ran"]),
        )
        .output;
        assert_one_line_error(&output, &delegation_hints());
    }
}

#[test]
fn rootless_default_limits_run_unenforced_with_a_warning() {
    let (done, v) = jail_with_verdict(Mode::Rootless, &[], &["sh", "-c", "echo ran"]);
    assert_eq!(exit_status(&done, &v), 0, "{v}");
    assert_eq!(stdout(&done.output), "ran\n");
    assert_eq!(v["status"], "ok", "{v}");
    assert_eq!(v["limits"]["cgroup_enforced"], false, "{v}");
    assert_eq!(v["limits"]["memory_bytes"], 1 << 30, "{v}");
    assert_eq!(v["limits"]["pids"], 256, "{v}");
    assert_eq!(v["protections"]["cgroup"], Value::Null, "{v}");
    let warnings = v["warnings"].as_array().unwrap();
    assert_eq!(warnings.len(), 1, "{v}");
    assert!(
        warnings[0].as_str().unwrap().contains("not enforced"),
        "{v}"
    );
}

/// brig's hints send the user to `brig doctor`; that command has to exist.
#[test]
fn the_suggested_brig_doctor_exists() {
    let output = jail(Mode::Rootless, &["run", "--memory", "100M", "--", "true"]).output;
    if stderr(&output).contains("brig doctor") {
        let doctor = jail(Mode::Root, &["doctor", "--help"]).output;
        assert_success(&doctor);
    }
}

fn missing_cgroup_parent_is_rejected(mode: Mode) {
    for parent in [
        "/nonexistent-brig-test",
        "/sys/fs/cgroup/pids/nonexistent-brig-test",
    ] {
        let output = jail(
            mode,
            &[
                "run",
                "--cgroup-parent",
                parent,
                "--",
                "sh",
                "-c",
                "echo ran",
            ],
        )
        .output;
        assert_one_line_error(&output, &["--cgroup-parent"]);
    }
}

/// `--cgroup-parent` naming an existing cgroup (here the `brig` subtree itself, which
/// brig creates) puts the jail there, with the limits.
#[test]
fn cgroup_parent_places_the_jail() {
    // The operator's delegated subtree: this test's own cgroup in each v1 hierarchy
    // brig uses, removed again at the end (brig leaves a given parent alone).
    let name = format!("brigtest-parent-{}", std::process::id());
    let parents: Vec<PathBuf> = ["pids", "memory", "cpuacct"]
        .iter()
        .map(|hierarchy| Path::new("/sys/fs/cgroup").join(hierarchy).join(&name))
        .collect();
    for parent in &parents {
        std::fs::create_dir(parent).expect("create the test's parent cgroup");
    }
    struct RemoveParents(Vec<PathBuf>);
    impl Drop for RemoveParents {
        fn drop(&mut self) {
            for parent in &self.0 {
                let _ = std::fs::remove_dir(parent);
            }
        }
    }
    let _cleanup = RemoveParents(parents.clone());
    let given = format!("/{name}");
    let mut brig = command(
        Mode::Root,
        &[
            "run",
            "--cgroup-parent",
            &given,
            "--memory",
            "40M",
            "--pids",
            "20",
            "--",
            "sh",
            "-c",
            "read line; exit 0",
        ],
    );
    brig.stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let mut running = Running::spawn(brig);
    let pid = running.pid();
    // The directories appear before brig writes their limits; the jail's processes are
    // added after: wait for those.
    let populated = |controller: &str| {
        v1_jail_cgroup_in(controller, &name, pid).is_some_and(|dir| {
            std::fs::read_to_string(dir.join("cgroup.procs"))
                .is_ok_and(|procs| !procs.trim().is_empty())
        })
    };
    assert!(
        wait_until(Duration::from_secs(10), || populated("pids")
            && populated("memory")),
        "no jail cgroup with the jail in it under the given parent"
    );
    let pids_dir = v1_jail_cgroup_in("pids", &name, pid).unwrap();
    let memory_dir = v1_jail_cgroup_in("memory", &name, pid).unwrap();
    assert_eq!(read_trimmed(&pids_dir.join("pids.max")), "20");
    assert_eq!(
        read_trimmed(&memory_dir.join("memory.limit_in_bytes")),
        (40 * MIB).to_string()
    );
    assert!(pids_dir.starts_with(&parents[0]), "{}", pids_dir.display());
    drop(running.child.stdin.take());
    let done = finish(running);
    assert_code(&done.output, 0);
    for parent in &parents {
        assert!(
            parent.is_dir(),
            "brig removed the given parent {}",
            parent.display()
        );
    }
}

/// On v1 the jail's first process joins its cgroups through `tasks` files brig opened as
/// root; none of those descriptors may survive into the jail, where the program could use
/// them to move itself out of its limits. Checked from the host, for every process in the
/// jail's cgroups (init included, which the program cannot inspect itself).
#[test]
fn no_jail_process_keeps_a_descriptor_into_the_cgroup_tree() {
    let mut brig = command(
        Mode::Root,
        &["run", "--memory", "64M", "--", "sleep", "1000"],
    );
    brig.stdout(Stdio::null()).stderr(Stdio::null());
    let mut running = Running::spawn(brig);
    let pid = running.pid();
    let jail_pids = || -> Vec<String> {
        let mut pids: Vec<String> = jail_cgroups_of(pid)
            .iter()
            .filter_map(|dir| std::fs::read_to_string(dir.join("cgroup.procs")).ok())
            .flat_map(|text| text.lines().map(String::from).collect::<Vec<_>>())
            .collect();
        pids.sort();
        pids.dedup();
        pids
    };
    assert!(
        wait_until(Duration::from_secs(10), || jail_pids().len() >= 2),
        "the jail's init and program never showed up in its cgroups"
    );
    for jail_pid in jail_pids() {
        let fds = std::fs::read_dir(format!("/proc/{jail_pid}/fd")).unwrap();
        for fd in fds.flatten() {
            let target = std::fs::read_link(fd.path()).unwrap_or_default();
            assert!(
                !target.starts_with("/sys/fs/cgroup"),
                "jail process {jail_pid} holds {} -> {}",
                fd.path().display(),
                target.display()
            );
        }
    }
    kill(pid, libc::SIGTERM);
    running.child.wait().unwrap();
    assert_no_jail_cgroups(pid);
}
