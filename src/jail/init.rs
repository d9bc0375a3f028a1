//! The jail's PID 1: forwards signals to the program, reaps zombies, and exits with the
//! program's status. Its exit ends the PID namespace, so everything else in the jail dies.

use super::channel::{ChildEnd, Command, Ended, Message};
use super::program;
use crate::error::Stage;
use crate::exit::ExitStatus;
use crate::plan::Plan;
use crate::procfs::Stat;
use crate::{privileges, sys};
use nix::sys::signal::{SigSet, Signal, kill};
use nix::sys::wait::{Id, WaitPidFlag, WaitStatus, waitid};
use nix::unistd::Pid;

/// The signals brig and the jail's init pass on to the program.
pub fn forwarded_signals() -> SigSet {
    let mut set = SigSet::empty();
    for signal in [
        Signal::SIGTERM,
        Signal::SIGINT,
        Signal::SIGHUP,
        Signal::SIGQUIT,
        Signal::SIGUSR1,
        Signal::SIGUSR2,
    ] {
        set.add(signal);
    }
    set
}

/// Init needs no privilege once it has spawned a program (or, in a session, at all: each
/// program drops its own). Undumpable, so that no program can ptrace it or read its
/// memory or environment (brig's) through /proc/1.
fn harden() -> crate::error::Result<()> {
    let _ = nix::sys::prctl::set_name(c"brig-init");
    sys::scrub_cmdline("brig-init");
    privileges::drop_all_capabilities()
        .and_then(|()| privileges::set_no_new_privs())
        .and_then(|()| {
            nix::sys::prctl::set_dumpable(false)
                .map_err(|errno| crate::error::Error::os("make the jail's init undumpable", errno))
        })
}

pub fn run(program: Pid, channel: &ChildEnd) -> ! {
    if let Err(err) = harden() {
        let _ = kill(program, Signal::SIGKILL);
        channel.send_error(&err.at(Stage::Init));
        sys::exit_now(ExitStatus::BRIG_FAILED);
    }
    let mut waited = forwarded_signals();
    waited.add(Signal::SIGCHLD);
    loop {
        match waited.wait() {
            Ok(Signal::SIGCHLD) => reap(program, channel),
            Ok(signal) => {
                let _ = kill(program, signal);
            }
            Err(_) => {}
        }
    }
}

/// Reaps every exited child; when it is the program, reports its status and exits.
fn reap(program: Pid, channel: &ChildEnd) {
    // A program killed by a signal: read its own CPU time while it is a zombie; reaped,
    // it is gone. (Per process, as RLIMIT_CPU counts it; the verdict tells a CPU-time
    // kill by it.)
    let program_signaled = waitid(
        Id::Pid(program),
        WaitPidFlag::WEXITED | WaitPidFlag::WNOHANG | WaitPidFlag::WNOWAIT,
    )
    .is_ok_and(|status| matches!(status, WaitStatus::Signaled(..)));
    let cpu_before_reaping = program_signaled
        .then(|| Stat::read(program))
        .flatten()
        .map(|stat| {
            let (user, system) = stat.cpu(false);
            (user + system).as_millis() as u64
        });
    // The program's own usage goes first: brig may report the run from it before init
    // (and with it the jail) is gone.
    while let Ok(Some((pid, status, usage))) = sys::wait4_any_nohang() {
        if pid != program {
            continue;
        }
        let (code, signal) = match status {
            WaitStatus::Exited(_, code) => (Some(code), None),
            WaitStatus::Signaled(_, signal, _) => (None, Some(signal as i32)),
            _ => continue,
        };
        channel.send(&Message::Ended {
            id: 0,
            end: ended(code, signal, &usage),
        });
        match (code, signal) {
            (Some(code), _) => {
                channel.send(&Message::Exited(code));
                sys::exit_now(code);
            }
            (None, signal) => {
                let signal = signal.unwrap_or(libc::SIGKILL);
                channel.send(&Message::Signaled {
                    signal,
                    cpu_ms: cpu_before_reaping.unwrap_or(0),
                });
                sys::exit_now(128 + signal);
            }
        }
    }
}

/// A session's init: runs the programs brig sends, one [`Message::Ended`] for each, until
/// brig closes the channel; then everything in the jail dies with init.
pub fn run_session(plan: &Plan, channel: &ChildEnd) -> ! {
    // A root session: before the capabilities go, lock root's privileges away and keep
    // 0 as init's real ids, for the programs asked to run as root.
    let kept = match plan.identity.root {
        true => crate::identity::keep_root_for_programs(&plan.identity),
        false => Ok(()),
    };
    if let Err(err) = kept.and_then(|()| harden()) {
        channel.send_error(&err.at(Stage::Init));
        sys::exit_now(ExitStatus::BRIG_FAILED);
    }
    let mut waited = forwarded_signals();
    waited.add(Signal::SIGCHLD);
    let Ok(signals) = nix::sys::signalfd::SignalFd::with_flags(
        &waited,
        nix::sys::signalfd::SfdFlags::SFD_NONBLOCK | nix::sys::signalfd::SfdFlags::SFD_CLOEXEC,
    ) else {
        sys::exit_now(ExitStatus::BRIG_FAILED);
    };
    let mut programs = Programs::default();
    loop {
        let read = nix::poll::PollFlags::POLLIN;
        let mut fds = [
            nix::poll::PollFd::new(std::os::fd::AsFd::as_fd(&channel.go), read),
            nix::poll::PollFd::new(std::os::fd::AsFd::as_fd(&signals), read),
        ];
        if nix::poll::poll(&mut fds, nix::poll::PollTimeout::NONE).is_err() {
            continue;
        }
        let command_ready = fds[0].any().unwrap_or(false);
        // Signals other than SIGCHLD are brig's business, not the session's programs'.
        while let Ok(Some(_)) = signals.read_signal() {}
        programs.reap(channel);
        if !command_ready {
            continue;
        }
        match channel.next_command() {
            None => {
                let _ = kill(Pid::from_raw(-1), Signal::SIGKILL);
                sys::exit_now(0);
            }
            Some((Command::Spawn { id, program }, stdio)) => {
                let spawned = sys::spawn_sharing_memory(&mut || {
                    program::become_program(plan, &program, Some(&stdio), channel, Some(id), false)
                });
                drop(stdio);
                started(&mut programs, id, spawned, channel);
            }
            Some((
                Command::SpawnTerminal {
                    id,
                    program,
                    cols,
                    rows,
                },
                _,
            )) => {
                // The jail's own devpts (init's /dev/ptmx is the jail's), never the
                // host's; the master goes to brig at once and is closed here, so no
                // program of the jail ever holds it.
                let slave = match sys::open_terminal(cols, rows) {
                    Ok((master, slave)) => match channel.hand_over(master) {
                        Ok(()) => slave,
                        Err(_) => continue,
                    },
                    Err(errno) => {
                        channel.hand_over_nothing(errno);
                        continue;
                    }
                };
                let stdio = [0, 1, 2].map(|_| slave.try_clone());
                let spawned = match stdio {
                    [Ok(a), Ok(b), Ok(c)] => {
                        let stdio = vec![a, b, c];
                        sys::spawn_sharing_memory(&mut || {
                            program::become_program(
                                plan,
                                &program,
                                Some(&stdio),
                                channel,
                                Some(id),
                                true,
                            )
                        })
                    }
                    _ => Err(nix::errno::Errno::EMFILE),
                };
                drop(slave);
                started(&mut programs, id, spawned, channel);
            }
            Some((Command::Signal { id, signal, group }, _)) => {
                if let Ok(signal) = Signal::try_from(signal) {
                    programs.signal(id, signal, group);
                }
            }
            Some((Command::Dial { port }, _)) => match dial_loopback(port) {
                // The connection goes to brig and is closed here: no program of the
                // jail ever holds it.
                Ok(connection) => {
                    let _ = channel.hand_over(connection);
                }
                Err(errno) => channel.hand_over_nothing(errno),
            },
            Some((Command::Sweep { keep, keep_groups }, _)) => {
                sweep(plan, &programs.pids(&keep), &programs.groups(&keep_groups));
                programs.reap(channel);
                channel.send(&Message::Swept);
            }
        }
    }
}

/// How long init waits for a connection to its loopback to be accepted: the kernel
/// answers at once (accepted or refused) unless the listener's backlog is full; then the
/// connection is handed over as it is, and brig's side waits for it.
const DIAL_WAIT_MS: u16 = 100;

/// Connects to `port` of the jail's loopback, inside the jail's network namespace:
/// 127.0.0.1, else ::1 (a server bound to that one only). The first address's error
/// when neither takes it (connection refused: nothing listens there).
fn dial_loopback(port: u16) -> Result<std::os::fd::OwnedFd, nix::errno::Errno> {
    use nix::errno::Errno;
    use nix::sys::socket::{
        AddressFamily, SockFlag, SockType, SockaddrIn, SockaddrIn6, SockaddrLike, connect,
        getsockopt, socket, sockopt,
    };
    use std::net::{Ipv4Addr, Ipv6Addr, SocketAddrV4, SocketAddrV6};
    use std::os::fd::{AsFd, AsRawFd};
    let v4 = SockaddrIn::from(SocketAddrV4::new(Ipv4Addr::LOCALHOST, port));
    let v6 = SockaddrIn6::from(SocketAddrV6::new(Ipv6Addr::LOCALHOST, port, 0, 0));
    let addresses: [(AddressFamily, &dyn SockaddrLike); 2] =
        [(AddressFamily::Inet, &v4), (AddressFamily::Inet6, &v6)];
    let mut first_error = None;
    for (family, address) in addresses {
        let attempt = socket(
            family,
            SockType::Stream,
            SockFlag::SOCK_NONBLOCK | SockFlag::SOCK_CLOEXEC,
            None,
        )
        .and_then(
            |connection| match connect(connection.as_raw_fd(), address) {
                Ok(()) => Ok(connection),
                Err(Errno::EINPROGRESS) => {
                    let mut fds = [nix::poll::PollFd::new(
                        connection.as_fd(),
                        nix::poll::PollFlags::POLLOUT,
                    )];
                    match nix::poll::poll(&mut fds, DIAL_WAIT_MS) {
                        // Still being accepted: brig's side waits for it.
                        Ok(0) => Ok(connection),
                        _ => match getsockopt(&connection, sockopt::SocketError) {
                            Ok(0) => Ok(connection),
                            Ok(error) => Err(Errno::from_raw(error)),
                            Err(errno) => Err(errno),
                        },
                    }
                }
                Err(errno) => Err(errno),
            },
        );
        match attempt {
            Ok(connection) => return Ok(connection),
            Err(errno) => {
                first_error.get_or_insert(errno);
            }
        }
    }
    Err(first_error.unwrap_or(Errno::ECONNREFUSED))
}

/// A program's spawn: watched once started (it said its pid itself, Message::Started,
/// before it exec'd), else reported failed and ended.
fn started(
    programs: &mut Programs,
    id: u32,
    spawned: Result<Pid, nix::errno::Errno>,
    channel: &ChildEnd,
) {
    match spawned {
        Ok(pid) => programs.spawned(pid, id),
        Err(errno) => {
            channel.send(&Message::ProgramError {
                id,
                code: ExitStatus::BRIG_FAILED as u8,
                message: format!(
                    "start the program's process inside the jail: {}",
                    errno.desc()
                ),
            });
            channel.send(&Message::Ended {
                id,
                end: Ended {
                    code: Some(ExitStatus::BRIG_FAILED),
                    ..Ended::default()
                },
            });
        }
    }
}

/// A session's programs as its init knows them: each leads a process group of its own
/// (what it starts), whose number is the program's pid.
#[derive(Default)]
struct Programs {
    /// The running programs: pid -> id.
    running: std::collections::HashMap<Pid, u32>,
    /// Programs that ended while processes of their group lived on: id -> the group.
    /// brig's group signal must still reach those: brig cannot know that a program
    /// ended just before its signal arrives (an interpreter it removes sees its socket
    /// close and exits; init reaps it before it reads the signal), and what the program
    /// started would outlive it. Dropped once the group is empty (its number may then
    /// be reused).
    ended_groups: std::collections::HashMap<u32, Pid>,
}

impl Programs {
    fn spawned(&mut self, pid: Pid, id: u32) {
        self.running.insert(pid, id);
        // A group that had this number is empty (the number was free to reuse).
        self.ended_groups.retain(|_, group| *group != pid);
    }

    /// Sends `signal` to program `id`, or to its process group with `group` (also
    /// when the program itself has ended).
    fn signal(&self, id: u32, signal: Signal, group: bool) {
        let running = self.running.iter().find(|(_, of)| **of == id);
        let target = match (running, group) {
            // The program leads its own process group: -pid is the group.
            (Some((pid, _)), true) => Pid::from_raw(-pid.as_raw()),
            (Some((pid, _)), false) => *pid,
            (None, true) => match self.ended_groups.get(&id) {
                Some(group) => Pid::from_raw(-group.as_raw()),
                None => return,
            },
            (None, false) => return,
        };
        let _ = kill(target, signal);
    }

    /// The pids of the running programs `ids`.
    fn pids(&self, ids: &[u32]) -> Vec<Pid> {
        self.running
            .iter()
            .filter(|(_, id)| ids.contains(id))
            .map(|(pid, _)| *pid)
            .collect()
    }

    /// The process groups of programs `ids`, running or not.
    fn groups(&self, ids: &[u32]) -> Vec<Pid> {
        let ended = self
            .ended_groups
            .iter()
            .filter(|(id, _)| ids.contains(id))
            .map(|(_, group)| *group);
        self.pids(ids).into_iter().chain(ended).collect()
    }

    /// Reaps every child that exited; a program gets its [`Message::Ended`], and its
    /// group is remembered while processes are left in it.
    fn reap(&mut self, channel: &ChildEnd) {
        while let Ok(Some((pid, status, usage))) = sys::wait4_any_nohang() {
            let Some(id) = self.running.remove(&pid) else {
                continue;
            };
            if group_has_members(pid) {
                self.ended_groups.insert(id, pid);
            }
            let (code, signal) = match status {
                WaitStatus::Exited(_, code) => (Some(code), None),
                WaitStatus::Signaled(_, signal, _) => (None, Some(signal as i32)),
                _ => (None, None),
            };
            channel.send(&Message::Ended {
                id,
                end: ended(code, signal, &usage),
            });
        }
        self.ended_groups
            .retain(|_, group| group_has_members(*group));
    }
}

/// Whether process group `group` has a process in it (a zombie counts until reaped).
fn group_has_members(group: Pid) -> bool {
    kill(Pid::from_raw(-group.as_raw()), None) != Err(nix::errno::Errno::ESRCH)
}

/// SIGKILLs every process of the jail but init and `keep`, pass after pass over the
/// jail's own /proc until none is left (a process forked during a pass is caught by the
/// next; a killed one forks no more). With `--proc host`, /proc shows other pids than
/// the jail's: everything is killed instead, `keep` too.
/// Kills every process of the jail but init, `keep`, and the process groups and sessions
/// `groups` lead (a program's group: what it started, unless that left the group; a
/// terminal's program's session: its shell's jobs).
fn sweep(plan: &Plan, keep: &[Pid], groups: &[Pid]) {
    let own_proc = plan
        .mounts
        .iter()
        .any(|op| matches!(op, crate::mount::MountOp::Proc { .. }));
    if !own_proc {
        let _ = kill(Pid::from_raw(-1), Signal::SIGKILL);
        return;
    }
    for _ in 0..1000 {
        let Ok(entries) = std::fs::read_dir("/proc") else {
            return;
        };
        let mut found = false;
        for pid in entries
            .flatten()
            .filter_map(|entry| entry.file_name().to_str()?.parse::<i32>().ok())
            .map(Pid::from_raw)
        {
            if pid.as_raw() == 1 || keep.contains(&pid) {
                continue;
            }
            let stat = Stat::read(pid);
            if stat.as_ref().and_then(Stat::state) == Some('Z') {
                continue;
            }
            // proc(5): field 5 is the process group, 6 the session. A program on a
            // terminal leads a session: its shell's jobs have groups of their own in it.
            let led = |field: usize| {
                stat.as_ref()
                    .and_then(|stat| stat.field(field))
                    .is_some_and(|leader| groups.iter().any(|pid| pid.as_raw() as u64 == leader))
            };
            if led(5) || led(6) {
                continue;
            }
            found = true;
            let _ = kill(pid, Signal::SIGKILL);
        }
        if !found {
            return;
        }
    }
}

fn ended(code: Option<i32>, signal: Option<i32>, usage: &libc::rusage) -> Ended {
    let micros = |tv: libc::timeval| tv.tv_sec.max(0) as u64 * 1_000_000 + tv.tv_usec.max(0) as u64;
    Ended {
        code,
        signal,
        cpu_user_us: micros(usage.ru_utime),
        cpu_sys_us: micros(usage.ru_stime),
        max_rss_kib: usage.ru_maxrss.max(0) as u64,
    }
}
