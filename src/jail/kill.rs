//! How brig ends a jail and measures what it ended: the jail's init as brig holds it
//! (its pid, its pidfd and, rootless, its namespaces), killed whole at once, every
//! process of its PID namespace signalled from inside, and reaped; and the usage of
//! processes killed before anyone could reap them ([`descendants_usage`]).

use crate::procfs::Stat;
use crate::sys::{self, Cloned};
use nix::poll::{PollFd, PollFlags, PollTimeout, poll};
use nix::sys::signal::Signal;
use nix::sys::wait::{WaitStatus, waitpid};
use nix::unistd::Pid;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::os::unix::fs::MetadataExt;
use std::time::Duration;

/// How long brig's helper waits for the process that signals the jail from inside, in ms.
const SENDER_TIMEOUT_MS: u16 = 2000;

/// The jail's init process, as brig sees it.
pub(super) struct Init {
    pid: Pid,
    pidfd: OwnedFd,
    /// Rootless: the jail's user and PID namespaces, to join them when killing the jail.
    /// As root, init's pidfd is the way in.
    namespaces: Option<[OwnedFd; 2]>,
}

impl Init {
    /// The init just cloned, which waits for brig's go-ahead; `rootless`: its namespaces
    /// are opened now (see `open_namespaces`).
    pub(super) fn new(pid: Pid, pidfd: OwnedFd, rootless: bool) -> Init {
        Init {
            pid,
            pidfd,
            namespaces: rootless.then(|| Init::open_namespaces(pid)).flatten(),
        }
    }

    pub(super) fn pid(&self) -> Pid {
        self.pid
    }

    /// Readable once init has exited; a signal sent through it never reaches another
    /// process.
    pub(super) fn pidfd(&self) -> BorrowedFd<'_> {
        self.pidfd.as_fd()
    }

    /// Kills every process of the jail. Killing init alone would do, as its death kills
    /// everything in its PID namespace, but only once init gets a CPU: it waits its turn
    /// behind every runnable process of the jail, 13 s behind a fork bomb's 3,900 on two
    /// CPUs. So the rest of the jail is killed from inside the namespace too, at once.
    /// Init first: with a SIGKILL pending it reports nothing of the program's death.
    pub(super) fn kill(&self) {
        self.kill_init();
        self.signal_from_inside(Signal::SIGKILL);
    }

    /// Blocks until init has exited (it does once it has reported the program's end).
    pub(super) fn wait_for_exit(&self) {
        let mut fds = [PollFd::new(self.pidfd.as_fd(), PollFlags::POLLIN)];
        while let Err(nix::errno::Errno::EINTR) = poll(&mut fds, PollTimeout::NONE) {}
    }

    pub(super) fn kill_init(&self) {
        let _ = sys::pidfd_send_signal(self.pidfd.as_fd(), Signal::SIGKILL);
    }

    /// Rootless, joining the jail's PID namespace takes CAP_SYS_ADMIN over it and in one's
    /// own user namespace, which brig has only in the jail's user namespace. Joining
    /// through init's pidfd would need brig to be allowed to inspect init, which it is
    /// not once init has made itself undumpable: so the namespaces are opened now, while
    /// init waits for brig's go-ahead.
    fn open_namespaces(pid: Pid) -> Option<[OwnedFd; 2]> {
        let open = |name: &str| {
            std::fs::File::open(format!("/proc/{pid}/ns/{name}"))
                .ok()
                .map(OwnedFd::from)
        };
        Some([open("user")?, open("pid")?])
    }

    /// Sends `signal` to every process of the jail's PID namespace but its init: `kill(-1)`
    /// from a process in that namespace, which reaches exactly the namespace's processes,
    /// in one pass under the kernel's task-list lock, and no fork completes with a signal
    /// pending, so none gets away. The sender is a grandchild of brig whose parent joined
    /// the namespace (as root through init's pidfd, Linux 5.8+). Where that fails (no
    /// process left to fork in the caller's quota, with `--pids max`), init's death kills
    /// the jail, later.
    pub(super) fn signal_from_inside(&self, signal: Signal) {
        use nix::sched::{CloneFlags, setns};
        let Ok(own_namespace) = std::fs::metadata("/proc/self/ns/pid").map(|meta| meta.ino())
        else {
            return;
        };
        match sys::fork_process() {
            Ok(Some(helper)) => while let Err(nix::errno::Errno::EINTR) = waitpid(helper, None) {},
            Ok(None) => {
                // A copy of brig: undumpable, so that no jail process can read its memory.
                let _ = nix::sys::prctl::set_dumpable(false);
                let joined = match &self.namespaces {
                    Some([user, pid]) => setns(user, CloneFlags::CLONE_NEWUSER)
                        .and_then(|()| setns(pid, CloneFlags::CLONE_NEWPID)),
                    None => setns(&self.pidfd, CloneFlags::CLONE_NEWPID),
                };
                if joined.is_err() {
                    sys::exit_now(1);
                }
                match sys::clone_process(0, None) {
                    Ok(Cloned::Parent { pid, pidfd, .. }) => {
                        // In the jail's PID namespace, a jail process could stop the
                        // sender (rootless without Landlock's signal scoping) and so hold
                        // brig: it gets SENDER_TIMEOUT_MS, then it is killed. (Not waiting
                        // at all would leave a zombie for the host's init to reap, and the
                        // jail's init waits for every process of its namespace to be gone.)
                        let mut sent = [PollFd::new(pidfd.as_fd(), PollFlags::POLLIN)];
                        let timeout = PollTimeout::from(SENDER_TIMEOUT_MS);
                        if !poll(&mut sent, timeout).is_ok_and(|ready| ready > 0) {
                            let _ = sys::pidfd_send_signal(pidfd.as_fd(), Signal::SIGKILL);
                        }
                        while let Err(nix::errno::Errno::EINTR) = waitpid(pid, None) {}
                        sys::exit_now(0);
                    }
                    Ok(Cloned::Child) => {
                        // Only ever from another PID namespace than brig's: there, kill(-1)
                        // would reach every process brig may signal.
                        let inside = std::fs::metadata("/proc/self/ns/pid")
                            .is_ok_and(|meta| meta.ino() != own_namespace);
                        if inside {
                            let _ = nix::sys::signal::kill(Pid::from_raw(-1), signal);
                        }
                        sys::exit_now(0);
                    }
                    Err(_) => sys::exit_now(1),
                }
            }
            Err(_) => {}
        }
    }

    /// Waits for init; its usage includes that of every process it reaped.
    pub(super) fn reap(&self) -> (Option<WaitStatus>, Measured) {
        match sys::wait4(self.pid) {
            Ok((status, usage)) => (Some(status), Measured::of_rusage(&usage)),
            Err(_) => (None, Measured::default()),
        }
    }
}

/// CPU time and peak memory of a group of processes.
#[derive(Clone, Copy, Default)]
pub(super) struct Measured {
    pub(super) user: Duration,
    pub(super) system: Duration,
    pub(super) max_rss_kib: u64,
}

impl Measured {
    fn of_rusage(usage: &libc::rusage) -> Measured {
        let time = |tv: libc::timeval| {
            Duration::from_secs(tv.tv_sec.max(0) as u64)
                + Duration::from_micros(tv.tv_usec.max(0) as u64)
        };
        Measured {
            user: time(usage.ru_utime),
            system: time(usage.ru_stime),
            max_rss_kib: usage.ru_maxrss.max(0) as u64,
        }
    }
}

/// Every live descendant of `root` (not `root` itself): their CPU time, including what
/// they reaped (/proc/PID/stat), and the largest peak resident set among them
/// (/proc/PID/status; that of children they reaped is not in /proc).
pub(super) fn descendants_usage(root: Pid) -> Measured {
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return Measured::default();
    };
    // pid -> (ppid, its CPU time including what it reaped)
    let table: std::collections::HashMap<u64, (u64, (Duration, Duration))> = entries
        .flatten()
        .filter_map(|entry| entry.file_name().to_str()?.parse::<u64>().ok())
        .filter_map(|pid| {
            let stat = Stat::read(pid)?;
            Some((pid, (stat.field(4)?, stat.cpu(true))))
        })
        .collect();
    let root = root.as_raw() as u64;
    let is_descendant = |mut pid: u64| {
        for _ in 0..table.len() {
            match table.get(&pid) {
                Some((ppid, _)) if *ppid == root => return true,
                Some((ppid, _)) if *ppid > 1 => pid = *ppid,
                _ => return false,
            }
        }
        false
    };
    table.iter().filter(|(pid, _)| is_descendant(**pid)).fold(
        Measured::default(),
        |usage, (pid, (_, cpu))| Measured {
            user: usage.user + cpu.0,
            system: usage.system + cpu.1,
            max_rss_kib: usage
                .max_rss_kib
                .max(crate::procfs::peak_rss_kib(*pid).unwrap_or(0)),
        },
    )
}
