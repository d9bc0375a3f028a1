//! brig's side of a run: create the jail's process in all its namespaces, write its id
//! maps, then watch it — forwarding signals, enforcing the time limit — until it is gone.

use crate::channel::{Channel, Message};
use crate::error::{Context, Error, Result};
use crate::plan::Plan;
use crate::sys::{self, Cloned};
use crate::{child, init, seccomp, user};
use nix::poll::{PollFd, PollFlags, PollTimeout, poll};
use nix::sys::signal::{SigmaskHow, Signal, sigprocmask};
use nix::sys::signalfd::{SfdFlags, SignalFd};
use nix::sys::wait::{WaitStatus, waitpid};
use nix::unistd::Pid;
use std::os::fd::{AsFd, OwnedFd};
use std::time::{Duration, Instant};

/// How the program ended.
#[derive(Debug)]
pub enum Outcome {
    Exited(i32),
    Signaled {
        signal: i32,
        /// SIGSYS while a seccomp filter was enforced: the profile killed the program.
        seccomp: bool,
        /// The call that killed it, when the kernel's audit records name it (root only).
        syscall: Option<String>,
    },
    TimedOut(Duration),
    /// The program could not be executed (126) or found (127).
    ExecFailed {
        code: u8,
        message: String,
    },
}

impl Outcome {
    /// brig's exit status for this outcome.
    pub fn exit_code(&self) -> i32 {
        match self {
            Outcome::Exited(code) => *code,
            Outcome::Signaled { signal, .. } => 128 + signal,
            Outcome::TimedOut(_) => 124,
            Outcome::ExecFailed { code, .. } => i32::from(*code),
        }
    }
}

/// The outcome and what the kernel logged about the seccomp filter meanwhile.
#[derive(Debug)]
pub struct Finished {
    pub outcome: Outcome,
    /// With `--seccomp-log`: the calls the profile would have denied; None when brig could
    /// not read the kernel's audit records (rootless).
    pub seccomp_log: Option<seccomp::Logged>,
}

pub fn run(plan: &Plan) -> Result<Finished> {
    // Signals for the program arrive on a signalfd; the mask is inherited by the jail's
    // init, which waits for them synchronously too.
    let forwarded = init::forwarded_signals();
    sigprocmask(SigmaskHow::SIG_BLOCK, Some(&forwarded), None)
        .context(|| "block signals".into())?;
    let signals = SignalFd::with_flags(&forwarded, SfdFlags::SFD_CLOEXEC | SfdFlags::SFD_NONBLOCK)
        .context(|| "create a signalfd".into())?;
    let channel = Channel::new().context(|| "create the pipes to the jail".into())?;
    user::drop_supplementary_groups(&plan.identity)?;
    // The kernel's seccomp records name the call that killed the program or, in log
    // mode, the calls the profile would deny.
    let mut audit = match plan.seccomp.mode {
        seccomp::Mode::Off => None,
        _ => seccomp::AuditLog::open(plan.identity.host_uid),
    };

    let started = Instant::now();
    let cloned = sys::clone_process(namespace_flags(plan)).map_err(|errno| {
        Error::os("create the jail's namespaces (clone3)", errno).hint(
            "user namespaces may be disabled or restricted here (kernel.unprivileged_userns_clone, user.max_user_namespaces, AppArmor); see `brig doctor`",
        )
    })?;
    let (pid, pidfd) = match cloned {
        Cloned::Child => child::run(plan, channel.child_end()),
        Cloned::Parent { pid, pidfd } => (pid, pidfd),
    };
    let channel = channel.parent_end();
    let jail = Jail { pid, pidfd };
    if let Err(err) = user::write_id_maps(pid, &plan.identity) {
        jail.kill_and_reap();
        return Err(err);
    }
    if let Err(errno) = channel.say_go() {
        jail.kill_and_reap();
        return Err(Error::os("tell the jail to start", errno));
    }

    let deadline = plan.time_limit.map(|limit| started + limit.0);
    let timed_out = jail.supervise(&signals, deadline, audit.as_mut())?;
    let status = jail.reap();
    let messages = channel.collect();
    let mut outcome = decide(
        messages,
        status,
        timed_out.then(|| plan.time_limit.map(|l| l.0)).flatten(),
    )?;
    if let Outcome::Signaled {
        signal, seccomp, ..
    } = &mut outcome
    {
        *seccomp = *signal == libc::SIGSYS && plan.seccomp.mode == seccomp::Mode::Enforce;
    }
    let killed_by_seccomp = matches!(outcome, Outcome::Signaled { seccomp: true, .. });
    let logged = audit.map(|audit| {
        // The kernel's audit thread sends the records a moment after the fact.
        let linger = if killed_by_seccomp || plan.seccomp.mode == seccomp::Mode::Log {
            Duration::from_millis(200)
        } else {
            Duration::ZERO
        };
        let log_mode = plan.seccomp.mode == seccomp::Mode::Log;
        audit.finish(linger, |logged| !log_mode && !logged.killed.is_empty())
    });
    if let (Outcome::Signaled { syscall, .. }, Some(logged)) = (&mut outcome, &logged)
        && killed_by_seccomp
    {
        // Records carry no jail id: name the call only when every kill seen agrees.
        if let [only] = logged.killed.as_slice() {
            *syscall = Some(only.clone());
        }
    }
    Ok(Finished {
        outcome,
        seccomp_log: logged.filter(|_| plan.seccomp.mode == seccomp::Mode::Log),
    })
}

fn namespace_flags(plan: &Plan) -> u64 {
    let namespaces = &plan.namespaces;
    let wanted = [
        (namespaces.user, libc::CLONE_NEWUSER),
        (namespaces.mount, libc::CLONE_NEWNS),
        (namespaces.pid, libc::CLONE_NEWPID),
        (namespaces.net, libc::CLONE_NEWNET),
        (namespaces.ipc, libc::CLONE_NEWIPC),
        (namespaces.uts, libc::CLONE_NEWUTS),
        (namespaces.cgroup, libc::CLONE_NEWCGROUP),
        (namespaces.time, libc::CLONE_NEWTIME),
    ];
    wanted
        .iter()
        .filter(|(on, _)| *on)
        .fold(0u64, |flags, (_, flag)| flags | *flag as u64)
}

/// The jail's init process, as brig sees it.
struct Jail {
    pid: Pid,
    pidfd: OwnedFd,
}

impl Jail {
    /// Waits until init exits, passing signals on and killing the jail at the deadline.
    /// Returns whether the deadline was reached.
    fn supervise(
        &self,
        signals: &SignalFd,
        deadline: Option<Instant>,
        mut audit: Option<&mut seccomp::AuditLog>,
    ) -> Result<bool> {
        let mut timed_out = false;
        loop {
            let timeout = match deadline {
                Some(deadline) if !timed_out => {
                    let left = deadline.saturating_duration_since(Instant::now());
                    // Round up so the deadline has passed when poll returns.
                    let millis = left.as_micros().div_ceil(1000);
                    PollTimeout::try_from(millis.min(i32::MAX as u128) as i32)
                        .unwrap_or(PollTimeout::MAX)
                }
                _ => PollTimeout::NONE,
            };
            let mut fds = vec![
                PollFd::new(self.pidfd.as_fd(), PollFlags::POLLIN),
                PollFd::new(signals.as_fd(), PollFlags::POLLIN),
            ];
            if let Some(audit) = &audit {
                fds.push(PollFd::new(audit.fd(), PollFlags::POLLIN));
            }
            match poll(&mut fds, timeout) {
                Ok(_) | Err(nix::errno::Errno::EINTR) => {}
                Err(errno) => return Err(Error::os("wait for the jail", errno)),
            }
            let exited = fds[0].any().unwrap_or(false);
            let signalled = fds[1].any().unwrap_or(false);
            let audited = fds.get(2).and_then(PollFd::any).unwrap_or(false);
            drop(fds);
            if audited && let Some(audit) = audit.as_mut() {
                audit.drain();
            }
            if exited {
                return Ok(timed_out);
            }
            if signalled {
                while let Ok(Some(info)) = signals.read_signal() {
                    if let Ok(signal) = Signal::try_from(info.ssi_signo as i32) {
                        let _ = sys::pidfd_send_signal(self.pidfd.as_fd(), signal);
                    }
                }
            }
            if !timed_out && deadline.is_some_and(|deadline| Instant::now() >= deadline) {
                // Killing init kills every process in its PID namespace.
                let _ = sys::pidfd_send_signal(self.pidfd.as_fd(), Signal::SIGKILL);
                timed_out = true;
            }
        }
    }

    fn reap(&self) -> Option<WaitStatus> {
        loop {
            match waitpid(self.pid, None) {
                Err(nix::errno::Errno::EINTR) => continue,
                Ok(status) => return Some(status),
                Err(_) => return None,
            }
        }
    }

    fn kill_and_reap(&self) {
        let _ = sys::pidfd_send_signal(self.pidfd.as_fd(), Signal::SIGKILL);
        self.reap();
    }
}

fn decide(
    messages: Vec<Message>,
    init_status: Option<WaitStatus>,
    timed_out: Option<Duration>,
) -> Result<Outcome> {
    let mut program_status = None;
    for message in messages {
        match message {
            Message::SetupError(text) => return Err(Error::setup(text)),
            Message::ExecError { code, message } => {
                return Ok(Outcome::ExecFailed { code, message });
            }
            Message::Exited(code) => program_status = Some(Outcome::Exited(code)),
            Message::Signaled(signal) => {
                program_status = Some(Outcome::Signaled {
                    signal,
                    seccomp: false,
                    syscall: None,
                })
            }
        }
    }
    if let Some(status) = program_status {
        return Ok(status);
    }
    if let Some(limit) = timed_out {
        return Ok(Outcome::TimedOut(limit));
    }
    Err(Error::setup(format!(
        "the jail's init ended before the program did ({}); this is a bug or the host killed it",
        match init_status {
            Some(WaitStatus::Signaled(_, signal, _)) => format!("killed by {signal}"),
            Some(WaitStatus::Exited(_, code)) => format!("exit status {code}"),
            _ => "status unknown".into(),
        }
    )))
}
