//! brig killed with SIGKILL in the middle of a run cannot clean up: its jail's cgroup
//! stays. The jail itself must die (its init has a parent-death signal), and the next
//! brig must remove the stale cgroup (`remove_stale_jails`). Two rounds: the next run
//! starts once the killed jails are gone, and the next run starts at once.

use crate::leftovers::cgroup_owner;
use crate::runner::{self, Orphan};
use nix::sys::signal::{Signal, kill};
use nix::sys::wait::{WaitStatus, waitpid};
use nix::unistd::Pid;
use serde::Serialize;
use std::collections::HashSet;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

const HIERARCHIES: &[&str] = &["memory", "pids", "cpu", "cpuacct"];

#[derive(Debug, Default, Serialize)]
pub struct Round {
    /// Whether the next run waited for the killed jails to be gone.
    pub waited_for_jails: bool,
    pub killed: usize,
    /// Jail cgroup directories of the killed brigs, and how many were still there after
    /// the kill (all of them, unless another brig on the host removed them meanwhile).
    pub stale_dirs: usize,
    pub stale_present_after_kill: usize,
    /// Processes of the killed jails alive 5 s after the kill.
    pub survivors: Vec<String>,
    /// The next ordinary run's exit status.
    pub next_run_exit: i32,
    /// Stale directories still there after the next run, and after one more a second later.
    pub stale_after_next_run: Vec<String>,
    pub stale_after_second_run: Vec<String>,
    /// Set-up problems (a jail that never started): the round proves nothing then.
    pub problems: Vec<String>,
    /// The killed jails' inits, re-parented to the soak and reaped by it (expected).
    pub reaped_inits: Vec<Orphan>,
}

impl Round {
    pub fn failures(&self) -> usize {
        self.survivors.len()
            + self.stale_after_next_run.len()
            + self.problems.len()
            + usize::from(self.next_run_exit != 0)
    }
}

fn jail_dirs(brig: u32) -> Vec<PathBuf> {
    let mut dirs = Vec::new();
    for hierarchy in HIERARCHIES {
        let parent = Path::new("/sys/fs/cgroup").join(hierarchy).join("brig");
        let Ok(entries) = std::fs::read_dir(&parent) else {
            continue;
        };
        for entry in entries.flatten() {
            let name = entry.file_name().to_string_lossy().into_owned();
            if name.starts_with("jail-") && cgroup_owner(&name) == Some(brig) {
                dirs.push(entry.path());
            }
        }
    }
    dirs
}

/// The pids in a jail's memory cgroup (its init and the program, once it runs).
fn jail_processes(brig: u32) -> Vec<u32> {
    jail_dirs(brig)
        .iter()
        .find(|dir| dir.starts_with("/sys/fs/cgroup/memory"))
        .and_then(|dir| std::fs::read_to_string(dir.join("cgroup.procs")).ok())
        .map(|procs| procs.lines().filter_map(|pid| pid.parse().ok()).collect())
        .unwrap_or_default()
}

/// Alive and not a zombie.
fn alive(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|stat| {
        stat.rfind(')')
            .and_then(|close| stat[close + 1..].split_whitespace().next())
            .is_some_and(|state| state != "Z" && state != "X")
    })
}

fn brig_command(brig: &Path, tag: &str, program: &[&str]) -> Command {
    let mut command = Command::new(brig);
    command
        .args(["run", "--memory", "64M", "--env"])
        .arg(format!("SOAK_TAG={tag}"))
        .arg("--")
        .args(program)
        .env("SOAK_TAG", tag)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null());
    command
}

/// Runs one ordinary jail to the end; its exit status.
fn ordinary_run(brig: &Path, tag: &str, ours: &mut HashSet<u32>) -> i32 {
    let child = brig_command(brig, tag, &["true"])
        .spawn()
        .expect("start brig");
    let pid = Pid::from_raw(child.id() as i32);
    ours.insert(child.id());
    drop(child);
    loop {
        match waitpid(pid, None) {
            Ok(WaitStatus::Exited(_, code)) => return code,
            Ok(WaitStatus::Signaled(_, signal, _)) => return 128 + signal as i32,
            Ok(_) | Err(nix::errno::Errno::EINTR) => continue,
            Err(errno) => panic!("waitpid: {errno}"),
        }
    }
}

#[allow(clippy::zombie_processes)] // reaped with waitpid
pub fn round(
    brig: &Path,
    tag: &str,
    jails: usize,
    wait_for_jails: bool,
    ours: &mut HashSet<u32>,
) -> Round {
    let mut round = Round {
        waited_for_jails: wait_for_jails,
        ..Round::default()
    };
    let mut brigs = Vec::new();
    for _ in 0..jails {
        let child = brig_command(brig, tag, &["sleep", "30"])
            .spawn()
            .expect("start brig");
        ours.insert(child.id());
        brigs.push(child.id());
    }
    // Each jail is running once its init and the program are in its cgroup.
    let mut victims = Vec::new();
    let mut stale = Vec::new();
    for &pid in &brigs {
        let started = Instant::now();
        while jail_processes(pid).len() < 2 && started.elapsed() < Duration::from_secs(20) {
            std::thread::sleep(Duration::from_millis(20));
        }
        let processes = jail_processes(pid);
        if processes.len() < 2 {
            round
                .problems
                .push(format!("brig {pid}: the jail did not start in 20 s"));
        }
        victims.extend(processes);
        stale.extend(jail_dirs(pid));
    }
    for &pid in &brigs {
        let _ = kill(Pid::from_raw(pid as i32), Signal::SIGKILL);
    }
    for &pid in &brigs {
        match waitpid(Pid::from_raw(pid as i32), None) {
            Ok(WaitStatus::Signaled(_, Signal::SIGKILL, _)) => round.killed += 1,
            other => round
                .problems
                .push(format!("brig {pid} ended otherwise: {other:?}")),
        }
    }
    round.stale_dirs = stale.len();
    round.stale_present_after_kill = stale.iter().filter(|dir| dir.is_dir()).count();
    if wait_for_jails {
        let started = Instant::now();
        while victims.iter().any(|&pid| alive(pid)) && started.elapsed() < Duration::from_secs(5) {
            round.reaped_inits.extend(runner::reap_orphans());
            std::thread::sleep(Duration::from_millis(20));
        }
    }
    round.next_run_exit = ordinary_run(brig, tag, ours);
    let remaining = |stale: &[PathBuf]| -> Vec<String> {
        stale
            .iter()
            .filter(|dir| dir.is_dir())
            .map(|dir| dir.display().to_string())
            .collect()
    };
    round.stale_after_next_run = remaining(&stale);
    if !round.stale_after_next_run.is_empty() {
        std::thread::sleep(Duration::from_secs(1));
        ordinary_run(brig, tag, ours);
        round.stale_after_second_run = remaining(&stale);
    }
    let started = Instant::now();
    while victims.iter().any(|&pid| alive(pid)) && started.elapsed() < Duration::from_secs(5) {
        round.reaped_inits.extend(runner::reap_orphans());
        std::thread::sleep(Duration::from_millis(20));
    }
    round.reaped_inits.extend(runner::reap_orphans());
    round.survivors = victims
        .iter()
        .filter(|&&pid| alive(pid))
        .map(|pid| {
            let comm = std::fs::read_to_string(format!("/proc/{pid}/comm")).unwrap_or_default();
            format!("{pid} {}", comm.trim())
        })
        .collect();
    round
}
