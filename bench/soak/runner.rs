//! A pool of child processes run from one thread: at most N at a time, each reaped with
//! `waitpid`, killed by a watchdog if it runs too long. The soak is its children's
//! subreaper, so a process that outlives its brig comes back here and is counted.

use nix::errno::Errno;
use nix::sys::signal::{SigSet, SigmaskHow, Signal, kill, sigprocmask};
use nix::sys::wait::{WaitPidFlag, WaitStatus, waitpid};
use nix::unistd::Pid;
use std::collections::HashMap;
use std::process::Command;
use std::time::{Duration, Instant};

/// Makes this process the subreaper of everything it starts and blocks SIGCHLD, which
/// the pool waits for with `sigtimedwait` (children start with an empty mask: std resets
/// it before exec).
pub fn become_reaper() {
    nix::sys::prctl::set_child_subreaper(true).expect("become a child subreaper");
    let mut set = SigSet::empty();
    set.add(Signal::SIGCHLD);
    sigprocmask(SigmaskHow::SIG_BLOCK, Some(&set), None).expect("block SIGCHLD");
}

/// Waits up to `timeout` for a SIGCHLD.
pub fn wait_for_child(timeout: Duration) {
    let mut set = SigSet::empty();
    set.add(Signal::SIGCHLD);
    let timeout = libc::timespec {
        tv_sec: timeout.as_secs() as libc::time_t,
        tv_nsec: timeout.subsec_nanos() as libc::c_long,
    };
    // SAFETY: a valid signal set and timespec; the siginfo pointer may be null.
    unsafe { libc::sigtimedwait(set.as_ref(), std::ptr::null_mut(), &timeout) };
}

/// How a child ended.
#[derive(Clone, Copy, Debug)]
pub enum Ended {
    Exited(i32),
    Signaled(i32),
}

impl Ended {
    /// The shell's convention: the status, or 128+N.
    pub fn code(self) -> i32 {
        match self {
            Ended::Exited(code) => code,
            Ended::Signaled(signal) => 128 + signal,
        }
    }
}

/// A process that was not started by the pool but reaped by it: an orphan of one of our
/// processes, re-parented to the subreaper.
#[derive(Clone, Debug, serde::Serialize)]
pub struct Orphan {
    pub pid: i32,
    pub status: String,
}

/// One child to run.
pub struct Job<T> {
    pub command: Command,
    pub tag: T,
}

/// One child that ended.
pub struct Done<T> {
    pub tag: T,
    pub pid: i32,
    pub ended: Ended,
    /// The watchdog killed it.
    pub hung: bool,
}

struct Running<T> {
    tag: T,
    deadline: Instant,
    killed: bool,
}

/// Reaps whatever has ended, without waiting: our own children into `running`'s
/// completions, anything else as an orphan.
fn reap_now<T>(
    running: &mut HashMap<i32, Running<T>>,
    done: &mut impl FnMut(Done<T>),
    orphans: &mut Vec<Orphan>,
) -> bool {
    let mut any = false;
    loop {
        let (pid, ended) = match waitpid(None, Some(WaitPidFlag::WNOHANG)) {
            Ok(WaitStatus::Exited(pid, code)) => (pid, Ended::Exited(code)),
            Ok(WaitStatus::Signaled(pid, signal, _)) => (pid, Ended::Signaled(signal as i32)),
            Ok(WaitStatus::StillAlive) | Err(Errno::ECHILD) => return any,
            Ok(_) | Err(Errno::EINTR) => continue,
            Err(errno) => panic!("waitpid: {errno}"),
        };
        any = true;
        let pid = pid.as_raw();
        match running.remove(&pid) {
            Some(child) => done(Done {
                tag: child.tag,
                pid,
                ended,
                hung: child.killed,
            }),
            None => orphans.push(Orphan {
                pid,
                status: format!("{ended:?}"),
            }),
        }
    }
}

/// Runs every job, `concurrency` at a time; `started` learns each pid as it starts and
/// `done` each ending. A job still running after `limit` is killed (SIGKILL) and reported
/// as hung. Returns the orphans reaped meanwhile.
pub fn run_all<T>(
    jobs: impl IntoIterator<Item = Job<T>>,
    concurrency: usize,
    limit: Duration,
    mut started: impl FnMut(i32),
    mut done: impl FnMut(Done<T>),
) -> Vec<Orphan> {
    let mut jobs = jobs.into_iter();
    let mut running: HashMap<i32, Running<T>> = HashMap::new();
    let mut orphans = Vec::new();
    let mut exhausted = false;
    loop {
        while !exhausted && running.len() < concurrency {
            match jobs.next() {
                Some(mut job) => {
                    let child = job
                        .command
                        .spawn()
                        .unwrap_or_else(|err| panic!("start {:?}: {err}", job.command));
                    let pid = child.id() as i32;
                    // Reaped by waitpid above, not by Child.
                    drop(child);
                    started(pid);
                    running.insert(
                        pid,
                        Running {
                            tag: job.tag,
                            deadline: Instant::now() + limit,
                            killed: false,
                        },
                    );
                }
                None => exhausted = true,
            }
        }
        if running.is_empty() {
            break;
        }
        if reap_now(&mut running, &mut done, &mut orphans) {
            continue;
        }
        wait_for_child(Duration::from_millis(250));
        let now = Instant::now();
        for (pid, child) in running.iter_mut() {
            if !child.killed && now >= child.deadline {
                let _ = kill(Pid::from_raw(*pid), Signal::SIGKILL);
                child.killed = true;
            }
        }
    }
    orphans
}

/// Reaps orphans that have ended by now (no children of our own are running).
pub fn reap_orphans() -> Vec<Orphan> {
    let mut none: HashMap<i32, Running<()>> = HashMap::new();
    let mut orphans = Vec::new();
    reap_now(&mut none, &mut |_| {}, &mut orphans);
    orphans
}
