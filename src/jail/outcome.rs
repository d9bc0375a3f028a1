//! How a run ended, decided in one place for every path (one-shot, pooled, warm, a
//! session's command or cell): the facts its watcher gathered — the program's own end as the
//! jail's init reported it, init's status, what brig ended the jail for (its deadline,
//! the output cut, an OOM notification, being stopped) — become an [`Outcome`]
//! ([`decide`]); the outcome and what the kernel counted (an OOM kill, the CPU time
//! against `--cpu-time`, a network cap) become the verdict's status and brig's exit
//! status ([`Outcome::decision`]). Both are pure functions, tested as tables below.

use super::channel::Ended;
use super::output::Counts;
use crate::cgroup::{Usage, Version};
use crate::error::{Error, Result};
use crate::exit::ExitStatus;
use crate::net::record::NetworkRecord;
use crate::seccomp;
use crate::units::Span;
use crate::verdict::Status;
use nix::sys::wait::WaitStatus;
use std::time::{Duration, Instant};

/// How the program ended.
#[derive(Clone, Debug, PartialEq)]
pub enum Outcome {
    Exited(i32),
    Signaled {
        signal: i32,
        /// SIGSYS while a seccomp filter was enforced: the profile killed the program.
        seccomp: bool,
        /// The call that killed it, when the kernel's audit records name it (root only).
        syscall: Option<String>,
        /// The program's own CPU time, when init could read it.
        cpu: Option<Duration>,
    },
    /// brig killed the jail at --time-limit.
    TimedOut,
    /// brig killed the jail at --output-limit.
    OutputLimit,
    /// The program could not be executed (126) or found (127).
    ExecFailed {
        code: u8,
        message: String,
    },
}

/// Why brig itself ended the jail, if it did.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum EndedBy {
    Program,
    TimeLimit,
    OutputLimit,
    /// brig was told to stop and the program outlived the grace period; or nobody waits
    /// for the result any more (a session exec's client went away): brig killed it, as
    /// a pooled run's `ClientWatcher` kills the jail of a client gone.
    Stopped,
    /// The kernel OOM-killed a process of the jail (v1; v2 ends the jail itself).
    OutOfMemory,
}

/// The program's own end, as the jail's init reported it.
#[derive(Clone, Debug, PartialEq)]
pub enum ProgramEnd {
    Exited(i32),
    Signaled {
        signal: i32,
        cpu: Option<Duration>,
    },
    /// It could not be executed (126) or found (127).
    ExecFailed {
        code: u8,
        message: String,
    },
}

impl ProgramEnd {
    /// A session program's end as the jail's init reported it (`Ended`), and its failure
    /// to start if it reported one: an exec failure (126, 127) is the end; a setup
    /// failure (125) is, once the process exited with it (it does, at once).
    pub fn of_session(ended: &Ended, failure: Option<(u8, String)>) -> ProgramEnd {
        match (failure, ended.code) {
            (Some((code, message)), status)
                if i32::from(code) != ExitStatus::BRIG_FAILED
                    || status == Some(ExitStatus::BRIG_FAILED) =>
            {
                ProgramEnd::ExecFailed { code, message }
            }
            (_, Some(code)) => ProgramEnd::Exited(code),
            (_, None) => ProgramEnd::Signaled {
                signal: ended.signal.unwrap_or(libc::SIGKILL),
                cpu: Some(Duration::from_micros(ended.cpu_user_us + ended.cpu_sys_us)),
            },
        }
    }
}

/// What else the verdict's status depends on, besides the outcome: what the kernel and
/// brig's network relay counted.
#[derive(Clone, Copy, Debug, Default)]
pub struct Counted {
    /// The kernel OOM-killed a process of the jail (the cgroup's counter), or brig ended
    /// the jail on its OOM notification.
    pub oom: bool,
    /// `--cpu-time`: RLIMIT_CPU, per process.
    pub cpu_time_limit: Option<Duration>,
    /// `--net-bytes` or `--net-connections` was reached.
    pub net_limit: bool,
}

/// The verdict's status and brig's exit status for a run.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Decision {
    pub status: Status,
    /// The program's exit status, when it exited.
    pub exit_code: Option<i32>,
    /// The signal that ended the program, when one did.
    pub signal: Option<i32>,
    pub exit: ExitStatus,
}

impl Decision {
    /// brig failed before or while setting up the jail: whatever the kind of the error,
    /// it exits 125.
    pub const SETUP_ERROR: Decision = Decision {
        status: Status::SetupError,
        exit_code: None,
        signal: None,
        exit: ExitStatus::BrigFailed,
    };
}

/// The outcome of a run from its facts. A cut brig made comes first — its output limit,
/// its deadline: brig's clock is the authority, and the program may report its death by
/// brig's kill, or an end that raced the kill — then the program's own end as init
/// reported it, then brig's other reasons for ending the jail (being stopped, an OOM
/// notification), after which the program's own word is the better account. A jail whose init the kernel killed
/// before it reported anything (an OOM kill of the cgroup with memory.oom.group) was
/// killed by that signal. Init ending before the program did, by itself, is a bug.
pub fn decide(
    program: Option<ProgramEnd>,
    init_status: Option<WaitStatus>,
    ended_by: EndedBy,
) -> Result<Outcome> {
    match (ended_by, program, init_status) {
        // An exec failure is never a limit's doing.
        (_, Some(ProgramEnd::ExecFailed { code, message }), _) => {
            Ok(Outcome::ExecFailed { code, message })
        }
        (EndedBy::OutputLimit, _, _) => Ok(Outcome::OutputLimit),
        (EndedBy::TimeLimit, _, _) => Ok(Outcome::TimedOut),
        (_, Some(ProgramEnd::Exited(code)), _) => Ok(Outcome::Exited(code)),
        (_, Some(ProgramEnd::Signaled { signal, cpu }), _) => Ok(Outcome::Signaled {
            signal,
            seccomp: false,
            syscall: None,
            cpu,
        }),
        (EndedBy::Stopped | EndedBy::OutOfMemory, None, _) => Ok(killed(libc::SIGKILL)),
        // The kernel killed the whole jail, init included: an OOM kill of the cgroup
        // (memory.oom.group) — the verdict tells which.
        (EndedBy::Program, None, Some(WaitStatus::Signaled(_, signal, _))) => {
            Ok(killed(signal as i32))
        }
        (EndedBy::Program, None, status) => Err(Error::setup(format!(
            "the jail's init ended before the program did ({}); this is a bug",
            match status {
                Some(WaitStatus::Exited(_, code)) => format!("exit status {code}"),
                _ => "status unknown".into(),
            }
        ))),
    }
}

fn killed(signal: i32) -> Outcome {
    Outcome::Signaled {
        signal,
        seccomp: false,
        syscall: None,
        cpu: None,
    }
}

impl Outcome {
    /// brig's exit status for this outcome.
    pub fn exit_status(&self) -> ExitStatus {
        match self {
            Outcome::Exited(code) => ExitStatus::Exited(*code),
            Outcome::Signaled { signal, .. } => ExitStatus::Signaled(*signal),
            Outcome::TimedOut | Outcome::OutputLimit => ExitStatus::LimitReached,
            Outcome::ExecFailed { code, .. } if i32::from(*code) == ExitStatus::NOT_FOUND => {
                ExitStatus::NotFound
            }
            Outcome::ExecFailed { .. } => ExitStatus::CannotExecute,
        }
    }

    /// The verdict's status for this outcome. brig's own limits first (time, output),
    /// then a program that could not run, then the kernel's doing: an OOM kill (even of
    /// a program that then exited), a seccomp kill, RLIMIT_CPU (SIGXCPU, or SIGKILL once
    /// the program's own CPU time reached the limit, having ignored SIGXCPU); then the
    /// program's own end, where a network cap reached turns `ok` and `nonzero_exit` into
    /// `net_limit`. brig's exit status is the outcome's in every case.
    pub fn decision(&self, counted: Counted) -> Decision {
        let cpu_limit_reached = |cpu: &Option<Duration>| {
            counted
                .cpu_time_limit
                .is_some_and(|limit| cpu.is_some_and(|cpu| cpu >= limit))
        };
        let (status, exit_code, signal) = match self {
            Outcome::TimedOut => (Status::Timeout, None, Some(libc::SIGKILL)),
            Outcome::OutputLimit => (Status::OutputLimit, None, Some(libc::SIGKILL)),
            Outcome::ExecFailed { .. } => (Status::SetupError, None, None),
            Outcome::Signaled { signal, .. } if counted.oom => (Status::Oom, None, Some(*signal)),
            Outcome::Exited(code) if counted.oom => (Status::Oom, Some(*code), None),
            Outcome::Signaled {
                seccomp: true,
                signal,
                ..
            } => (Status::Seccomp, None, Some(*signal)),
            Outcome::Signaled { signal, cpu, .. }
                if *signal == libc::SIGXCPU
                    || (*signal == libc::SIGKILL && cpu_limit_reached(cpu)) =>
            {
                (Status::CpuTime, None, Some(*signal))
            }
            Outcome::Signaled { signal, .. } => (Status::Signaled, None, Some(*signal)),
            Outcome::Exited(0) => (Status::Ok, Some(0), None),
            Outcome::Exited(code) => (Status::NonzeroExit, Some(*code), None),
        };
        let status = match status {
            Status::Ok | Status::NonzeroExit if counted.net_limit => Status::NetLimit,
            other => other,
        };
        Decision {
            status,
            exit_code,
            signal,
            exit: self.exit_status(),
        }
    }
}

/// What the program and its jail used, as measured by whoever watched it.
#[derive(Clone, Copy, Debug, Default)]
pub struct Spent {
    pub wall: Duration,
    pub cpu_user: Duration,
    pub cpu_sys: Duration,
    pub max_rss_kib: u64,
}

/// Everything brig learned about one run.
#[derive(Clone)]
pub struct RunReport {
    pub outcome: Outcome,
    /// The wall-clock limit the run had (the plan's, or one given for this run).
    pub time_limit: Option<Span>,
    pub wall: Duration,
    pub cpu_user: Duration,
    pub cpu_sys: Duration,
    pub max_rss_kib: u64,
    pub cgroup_version: Option<Version>,
    pub cgroup_usage: Option<Usage>,
    /// brig ended the jail on the kernel's OOM notification (v1); its kill may come
    /// before the kernel's own, which the cgroup's OOM-kill counter would show.
    pub out_of_memory: bool,
    pub output: Option<Counts>,
    /// With `--seccomp-log`: the calls the profile would have denied; None when brig could
    /// not read the kernel's audit records (rootless).
    pub seccomp_log: Option<seccomp::Logged>,
    /// With `--net filtered`: every connection the jail tried, and what brig did.
    pub network: Option<NetworkRecord>,
    /// The host uid and gid the jail's user mapped to.
    pub host_ids: (u32, u32),
}

impl RunReport {
    /// A run's report: its outcome, its limit, what it used, its cgroup and host ids;
    /// nothing yet of OOM notifications, output, seccomp log or network, which its
    /// watcher adds when it has them.
    pub fn new(
        outcome: Outcome,
        time_limit: Option<Span>,
        spent: Spent,
        cgroup: (Option<Version>, Option<Usage>),
        host_ids: (u32, u32),
    ) -> RunReport {
        RunReport {
            outcome,
            time_limit,
            wall: spent.wall,
            cpu_user: spent.cpu_user,
            cpu_sys: spent.cpu_sys,
            max_rss_kib: spent.max_rss_kib,
            cgroup_version: cgroup.0,
            cgroup_usage: cgroup.1,
            out_of_memory: false,
            output: None,
            seccomp_log: None,
            network: None,
            host_ids,
        }
    }

    /// The report of a request served by a program started before it (a warm
    /// interpreter): its wall time from `started`, its own time limit, and the CPU time
    /// used before it taken off (the kernel's counts, read when it was handed over).
    pub fn since_request(
        self,
        started: Instant,
        time_limit: Option<Span>,
        cpu_user_before: Duration,
        cpu_sys_before: Duration,
    ) -> RunReport {
        RunReport {
            time_limit,
            wall: started.elapsed(),
            cpu_user: self.cpu_user.saturating_sub(cpu_user_before),
            cpu_sys: self.cpu_sys.saturating_sub(cpu_sys_before),
            ..self
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use nix::sys::signal::Signal;
    use nix::unistd::Pid;

    const KILL: i32 = libc::SIGKILL;

    fn signaled(signal: i32, cpu_ms: Option<u64>) -> Outcome {
        Outcome::Signaled {
            signal,
            seccomp: false,
            syscall: None,
            cpu: cpu_ms.map(Duration::from_millis),
        }
    }

    /// The facts of a run's end, each with the outcome they make: brig's cut, the
    /// program's word, brig's reason, init's status, in that order of precedence.
    #[test]
    fn the_outcome_of_every_ending() {
        let init_killed = Some(WaitStatus::Signaled(
            Pid::from_raw(1),
            Signal::SIGKILL,
            false,
        ));
        let init_exited = Some(WaitStatus::Exited(Pid::from_raw(1), 0));
        let not_found = || ProgramEnd::ExecFailed {
            code: 127,
            message: "not found".into(),
        };
        let failed = || Outcome::ExecFailed {
            code: 127,
            message: "not found".into(),
        };
        let killed = ProgramEnd::Signaled {
            signal: KILL,
            cpu: Some(Duration::from_millis(5)),
        };
        use EndedBy as By;
        use ProgramEnd as P;
        #[rustfmt::skip]
        let table = [
            // The program's own end.
            (Some(P::Exited(0)), init_exited, By::Program, Outcome::Exited(0)),
            (Some(P::Exited(3)), None, By::Program, Outcome::Exited(3)),
            (Some(killed.clone()), init_exited, By::Program, signaled(KILL, Some(5))),
            (Some(not_found()), init_exited, By::Program, failed()),
            // The output cut wins over everything but an exec failure.
            (Some(killed.clone()), init_exited, By::OutputLimit, Outcome::OutputLimit),
            (None, init_killed, By::OutputLimit, Outcome::OutputLimit),
            (Some(P::Exited(0)), init_exited, By::OutputLimit, Outcome::OutputLimit),
            (Some(not_found()), init_exited, By::OutputLimit, failed()),
            // The deadline, brig's clock: a timeout, whatever the program reported.
            (Some(P::Exited(0)), init_killed, By::TimeLimit, Outcome::TimedOut),
            (Some(killed.clone()), None, By::TimeLimit, Outcome::TimedOut),
            (None, init_killed, By::TimeLimit, Outcome::TimedOut),
            (Some(not_found()), None, By::TimeLimit, failed()),
            // Stopped (a session exec's client gone too): the program's word, else killed.
            (Some(P::Exited(2)), None, By::Stopped, Outcome::Exited(2)),
            (Some(killed.clone()), None, By::Stopped, signaled(KILL, Some(5))),
            // Stopped, or OOM-notified (v1): killed.
            (None, init_killed, By::Stopped, signaled(KILL, None)),
            (None, init_killed, By::OutOfMemory, signaled(KILL, None)),
            // The kernel killed init (memory.oom.group) before anything was reported.
            (None, init_killed, By::Program, signaled(KILL, None)),
        ];
        for (program, init, by, expected) in table {
            let what = format!("{program:?} {init:?} {by:?}");
            assert_eq!(decide(program, init, by).unwrap(), expected, "{what}");
        }
        // Init ending by itself before the program: a bug, said as such.
        let err = decide(None, init_exited, By::Program).unwrap_err();
        assert!(err.to_string().contains("this is a bug"), "{err}");
    }

    /// A session program's end from init's word: its status, its signal (with its CPU
    /// time), or its failure to start.
    #[test]
    fn a_session_program_s_end() {
        let ended = |code, signal| Ended {
            code,
            signal,
            cpu_user_us: 3000,
            cpu_sys_us: 2000,
            max_rss_kib: 1,
        };
        let fail = |code: u8| Some((code, "why".to_string()));
        let failed = |code| ProgramEnd::ExecFailed {
            code,
            message: "why".into(),
        };
        let brig_failed = Some(ExitStatus::BRIG_FAILED);
        #[rustfmt::skip]
        let table = [
            (ended(Some(0), None), None, ProgramEnd::Exited(0)),
            (ended(Some(3), None), None, ProgramEnd::Exited(3)),
            (ended(None, Some(15)), None, ProgramEnd::Signaled { signal: 15, cpu: Some(Duration::from_millis(5)) }),
            (ended(None, None), None, ProgramEnd::Signaled { signal: KILL, cpu: Some(Duration::from_millis(5)) }),
            (ended(Some(127), None), fail(127), failed(127)),
            (ended(Some(126), None), fail(126), failed(126)),
            (ended(brig_failed, None), fail(125), failed(125)),
            // A setup failure said, then another end: the end is what it was.
            (ended(None, Some(KILL)), fail(125), ProgramEnd::Signaled { signal: KILL, cpu: Some(Duration::from_millis(5)) }),
        ];
        for (end, failure, expected) in table {
            let what = format!("{end:?} {failure:?}");
            assert_eq!(ProgramEnd::of_session(&end, failure), expected, "{what}");
        }
    }

    /// Each outcome with what was counted, and the status and exit codes it gives.
    #[test]
    fn the_status_of_every_outcome() {
        let none = Counted::default();
        let oom = Counted { oom: true, ..none };
        let cpu = Counted {
            cpu_time_limit: Some(Duration::from_secs(1)),
            ..none
        };
        let net = Counted {
            net_limit: true,
            ..none
        };
        let sys = libc::SIGSYS;
        let xcpu = libc::SIGXCPU;
        let seccomp = Outcome::Signaled {
            signal: sys,
            seccomp: true,
            syscall: None,
            cpu: None,
        };
        let exec = |code| Outcome::ExecFailed {
            code,
            message: String::new(),
        };
        use ExitStatus as E;
        use Outcome as O;
        use Status as S;
        #[rustfmt::skip]
        let table = [
            (O::Exited(0), none, S::Ok, Some(0), None, E::Exited(0)),
            (O::Exited(2), none, S::NonzeroExit, Some(2), None, E::Exited(2)),
            (signaled(15, None), none, S::Signaled, None, Some(15), E::Signaled(15)),
            (O::TimedOut, none, S::Timeout, None, Some(KILL), E::LimitReached),
            (O::OutputLimit, none, S::OutputLimit, None, Some(KILL), E::LimitReached),
            (exec(127), none, S::SetupError, None, None, E::NotFound),
            (exec(126), none, S::SetupError, None, None, E::CannotExecute),
            (seccomp.clone(), none, S::Seccomp, None, Some(sys), E::Signaled(sys)),
            (signaled(xcpu, None), none, S::CpuTime, None, Some(xcpu), E::Signaled(xcpu)),
            // SIGKILL is RLIMIT_CPU's only once the program's own CPU reached the limit.
            (signaled(KILL, Some(1000)), cpu, S::CpuTime, None, Some(KILL), E::Signaled(KILL)),
            (signaled(KILL, Some(999)), cpu, S::Signaled, None, Some(KILL), E::Signaled(KILL)),
            (signaled(KILL, None), cpu, S::Signaled, None, Some(KILL), E::Signaled(KILL)),
            // An OOM kill counted wins over the signal, seccomp and CPU time...
            (signaled(KILL, Some(1000)), Counted { oom: true, ..cpu }, S::Oom, None, Some(KILL), E::Signaled(KILL)),
            (seccomp.clone(), oom, S::Oom, None, Some(sys), E::Signaled(sys)),
            (O::Exited(1), oom, S::Oom, Some(1), None, E::Exited(1)),
            // ...but not over brig's own limits or a program that could not run.
            (O::TimedOut, oom, S::Timeout, None, Some(KILL), E::LimitReached),
            (O::OutputLimit, oom, S::OutputLimit, None, Some(KILL), E::LimitReached),
            (exec(127), oom, S::SetupError, None, None, E::NotFound),
            // A network cap reached marks a program that ended by itself.
            (O::Exited(0), net, S::NetLimit, Some(0), None, E::Exited(0)),
            (O::Exited(4), net, S::NetLimit, Some(4), None, E::Exited(4)),
            (signaled(15, None), net, S::Signaled, None, Some(15), E::Signaled(15)),
            (O::TimedOut, net, S::Timeout, None, Some(KILL), E::LimitReached),
        ];
        for (outcome, counted, status, exit_code, signal, exit) in table {
            let expected = Decision {
                status,
                exit_code,
                signal,
                exit,
            };
            assert_eq!(
                outcome.decision(counted),
                expected,
                "{outcome:?} {counted:?}"
            );
        }
        assert_eq!(Decision::SETUP_ERROR.exit.code(), 125);
        assert_eq!(E::LimitReached.code(), 124);
    }
}
