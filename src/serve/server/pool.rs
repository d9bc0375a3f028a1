//! The runners: a pool of jails assembled before requests come (cold, warm, a session's),
//! which runner serves which request, the queue of requests waiting for a slot, and the
//! runners' reports.

use super::sessions::SessionEntry;
use super::{Server, refuse};
use crate::error::{Context, Error, Result};
use crate::serve::protocol::{self, FrameReader, Read};
use crate::serve::runner;
use crate::serve::warm::Warm;
use crate::serve::wire::{Job, Report, Start};
use crate::sys;
use nix::sys::signal::{SigSet, SigmaskHow, Signal, sigprocmask};
use nix::unistd::Pid;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd};
use std::time::{Duration, Instant};

/// After a pooled jail fails to assemble this many times in a row, the pool waits
/// BACKOFF, twice as long after each further failure, up to MAX_BACKOFF.
pub(super) const FAILURES_BEFORE_BACKOFF: u32 = 3;
pub(super) const BACKOFF: Duration = Duration::from_secs(1);
pub(super) const MAX_BACKOFF: Duration = Duration::from_secs(60);

/// Requests waiting for a slot at most; more are refused at once.
pub(super) const MAX_QUEUE: usize = 1024;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum RunnerState {
    Assembling,
    Ready,
    Busy,
    /// Serving a session (not counted in --max-jails).
    Session,
}

/// A kind of pooled jail: cold or with a warm interpreter, or a session's.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(super) struct PoolKind {
    pub(super) warm: Option<Warm>,
    pub(super) for_session: bool,
}

pub(super) struct Runner {
    pub(super) pid: Pid,
    pub(super) control: OwnedFd,
    pub(super) reader: FrameReader,
    pub(super) state: RunnerState,
    /// In the pool: not handed a job yet.
    pub(super) pooled: bool,
    /// Its jail runs a warm interpreter, for that interpreter's requests only.
    pub(super) warm: Option<Warm>,
    /// A session's jail: pooled for one (`pooled`), or serving it.
    pub(super) for_session: bool,
    pub(super) session: Option<SessionEntry>,
    /// Its end of the control socket closed: no longer polled (it stays listed until
    /// SIGCHLD reaps it).
    pub(super) silent: bool,
    /// Busy with a run whose client has no answer yet: the pool's refill waits for it.
    pub(super) answering: bool,
    /// Whose run or session it serves (its client's uid), for the per-uid shares.
    pub(super) uid: Option<u32>,
}

impl Runner {
    /// In the pool of `kind` (ready or being assembled).
    pub(super) fn in_pool(&self, kind: PoolKind) -> bool {
        self.pooled && self.warm == kind.warm && self.for_session == kind.for_session
    }

    /// In the pool of `kind` and ready for a request.
    pub(super) fn ready_in(&self, kind: PoolKind) -> bool {
        self.in_pool(kind) && self.state == RunnerState::Ready
    }
}

pub(super) const COLD: PoolKind = PoolKind {
    warm: None,
    for_session: false,
};
pub(super) const SESSIONS: PoolKind = PoolKind {
    warm: None,
    for_session: true,
};

/// A checked request waiting for a runner.
pub(super) struct Pending {
    pub(super) job: Job,
    /// The connection, then the client's streams in `fds` mode.
    pub(super) fds: Vec<OwnedFd>,
    pub(super) pooled: bool,
    pub(super) deadline: Instant,
}

impl Server {
    /// Whether `runner`'s jail can take `pending`: any pooled jail a request of the pool's
    /// shape, a warm one only what its interpreter can serve as a cold start would.
    pub(super) fn suits(runner: &Runner, pending: &Pending) -> bool {
        runner.pooled
            && !runner.for_session
            && pending.pooled
            && runner
                .warm
                .is_none_or(|warm| warm.serves(&pending.job.program))
    }

    /// The ready pooled runner for `pending`, a warm one first.
    pub(super) fn ready_for(&self, pending: &Pending) -> Option<usize> {
        let ready = |warm: bool| {
            self.runners.iter().position(|runner| {
                runner.warm.is_some() == warm
                    && runner.state == RunnerState::Ready
                    && Self::suits(runner, pending)
            })
        };
        ready(true).or_else(|| ready(false))
    }

    /// A pooled request finds no ready jail, but one is being assembled: it will be
    /// ready sooner than a new one would.
    pub(super) fn should_wait_for_pool(&self, pending: &Pending) -> bool {
        pending.pooled
            && self.ready_for(pending).is_none()
            && self.runners.iter().any(|runner| {
                runner.state == RunnerState::Assembling && Self::suits(runner, pending)
            })
    }

    pub(super) fn dispatch(&mut self, pending: Pending) {
        if !self.may_start(&pending) {
            if self.queue.len() >= MAX_QUEUE {
                return refuse(
                    &pending.fds[0],
                    &Error::setup(format!(
                        "brig serve: {MAX_QUEUE} requests wait already; retry later"
                    )),
                );
            }
            self.status.queued = self.queue.len() + 1;
            self.queue.push_back(pending);
            return;
        }
        self.status.running += 1;
        self.status.runs += 1;
        match self.ready_for(&pending) {
            Some(at) => {
                self.status.pooled_runs += 1;
                if self.runners[at].warm.is_some() {
                    self.status.warm_runs += 1;
                }
                let runner = &mut self.runners[at];
                let fds: Vec<BorrowedFd> = pending.fds.iter().map(AsFd::as_fd).collect();
                runner.state = RunnerState::Busy;
                runner.pooled = false;
                runner.answering = true;
                runner.uid = Some(pending.job.peer.uid);
                if protocol::write_frame(runner.control.as_fd(), &pending.job, &fds).is_err() {
                    refuse(
                        &pending.fds[0],
                        &Error::setup("brig serve: the pooled jail went away; retry"),
                    );
                }
                self.count_ready();
            }
            None => {
                let Pending { job, fds, .. } = pending;
                // To answer the client if no runner can be made for it.
                let connection = fds[0].try_clone().ok();
                if let Err(err) = self.spawn(Start::ForJob(Box::new(job), fds)) {
                    self.status.running -= 1;
                    self.status.failures += 1;
                    eprintln!("brig serve: {err}");
                    if let Some(connection) = connection {
                        refuse(&connection, &err);
                    }
                }
            }
        }
    }

    /// How many pooled jails of `kind` are ready.
    pub(super) fn ready_count(&self, kind: PoolKind) -> usize {
        self.runners
            .iter()
            .filter(|runner| runner.ready_in(kind))
            .count()
    }

    pub(super) fn count_ready(&mut self) {
        self.status.ready = self.ready_count(COLD);
        self.status.warm_ready = self.ready_count(PoolKind {
            warm: Some(Warm::Python),
            ..COLD
        });
        self.status.warm_node_ready = self.ready_count(PoolKind {
            warm: Some(Warm::Node),
            ..COLD
        });
        self.status.session_ready = self.ready_count(SESSIONS);
    }

    /// How long the pool waits before it builds again, after `failures_in_a_row`.
    pub(super) fn backoff(&self) -> Option<Duration> {
        let beyond = self
            .failures_in_a_row
            .checked_sub(FAILURES_BEFORE_BACKOFF)?;
        Some(BACKOFF.saturating_mul(1 << beyond.min(6)).min(MAX_BACKOFF))
    }

    /// Keeps --pool cold, --warm-python and --warm-node warm jails and --session-pool
    /// session jails assembling or ready, unless
    /// draining or backing off.
    pub(super) fn refill_pool(&mut self) {
        if self.drain_deadline.is_some() || self.refill_after.is_some_and(|at| Instant::now() < at)
        {
            return;
        }
        self.refill_after = None;
        let warm = |warm| PoolKind {
            warm: Some(warm),
            ..COLD
        };
        let kinds = [
            (COLD, self.args.pool),
            (warm(Warm::Python), self.args.warm_python),
            (warm(Warm::Node), self.args.warm_node),
            (SESSIONS, self.args.session_pool),
        ];
        // While a client waits for its answer, the next jail is built only if the pool
        // has none ready of its kind: building takes the CPUs that client's run needs.
        let answering = self.runners.iter().any(|runner| runner.answering);
        for (kind, wanted) in kinds {
            let pooled = self
                .runners
                .iter()
                .filter(|runner| runner.in_pool(kind))
                .count();
            if answering && self.ready_count(kind) > 0 {
                continue;
            }
            for _ in pooled..wanted {
                let what = match kind.for_session {
                    true => Start::SessionPool,
                    false => Start::Pooled { warm: kind.warm },
                };
                if let Err(err) = self.spawn(what) {
                    eprintln!("brig serve: {err}");
                    self.refill_after = Some(Instant::now() + BACKOFF);
                    return;
                }
            }
        }
    }

    /// Forks a runner: pooled, or for a job, whose descriptors it inherits.
    pub(super) fn spawn(&mut self, what: Start) -> Result<()> {
        use nix::sys::socket::{AddressFamily, SockFlag, SockType, socketpair};
        let (control, runner_end) = socketpair(
            AddressFamily::Unix,
            SockType::Stream,
            None,
            SockFlag::SOCK_CLOEXEC,
        )
        .context(|| "create a socket pair for a runner".into())?;
        let (pooled, warm, for_session) = match &what {
            Start::Pooled { warm } => (true, *warm, false),
            Start::SessionPool => (true, None, true),
            Start::ForJob(..) => (false, None, false),
            Start::Session(..) => (false, None, true),
        };
        let server = nix::unistd::getpid();
        match sys::fork_process().context(|| "fork a runner".into())? {
            None => {
                // The server gone, its runner goes at once, and with it its jail (whose
                // init dies with the runner, and every process of the jail with init, PID
                // 1 of its namespace). SIGKILL: a runner blocks the signals it forwards to
                // a program. Had the server died before this was set, the runner is
                // already an orphan.
                let _ = nix::sys::prctl::set_pdeathsig(Signal::SIGKILL);
                if nix::unistd::getppid() != server {
                    sys::exit_now(1);
                }
                // The runner: nothing of the server's but its own ends.
                let mut keep = vec![runner_end.as_raw_fd()];
                match &what {
                    Start::ForJob(_, fds) => keep.extend(fds.iter().map(AsRawFd::as_raw_fd)),
                    Start::Session(start) => keep.push(start.connection.as_raw_fd()),
                    _ => {}
                }
                let _ = crate::fds::close_inherited(&keep);
                let _ = sigprocmask(SigmaskHow::SIG_SETMASK, Some(&SigSet::empty()), None);
                let audit_log = self.defaults.audit_log.clone();
                let prepared = runner::Prepared {
                    pool_plan: &self.pool_plan,
                    session_plan: &self.session_plan,
                    defaults: &self.defaults,
                };
                runner::main(runner_end, what, prepared, audit_log);
            }
            Some(pid) => {
                let answering = matches!(what, Start::ForJob(..));
                let uid = match &what {
                    Start::ForJob(job, _) => Some(job.peer.uid),
                    Start::Session(start) => Some(start.opening.owner.uid),
                    _ => None,
                };
                let (state, session) = match what {
                    _ if pooled => (RunnerState::Assembling, None),
                    Start::Session(start) => {
                        (RunnerState::Session, Some(SessionEntry::of(&start.opening)))
                    }
                    _ => (RunnerState::Busy, None),
                };
                self.runners.push(Runner {
                    pid,
                    control,
                    reader: FrameReader::default(),
                    state,
                    pooled,
                    warm,
                    for_session,
                    session,
                    silent: false,
                    answering,
                    uid,
                });
                Ok(())
            }
        }
    }

    /// Reads what runner `pid` says; whether it was a whole frame (more may follow).
    pub(super) fn handle_runner(&mut self, pid: Pid) -> bool {
        let Some(at) = self
            .runners
            .iter()
            .position(|runner| runner.pid == pid && !runner.silent)
        else {
            return false;
        };
        let read = {
            let runner = &mut self.runners[at];
            runner.reader.read(runner.control.as_fd())
        };
        match read {
            Ok(Read::Frame(body, _)) => match serde_json::from_slice::<Report>(&body) {
                Ok(Report::Ready) => {
                    self.runners[at].state = RunnerState::Ready;
                    if self.failures_in_a_row > 1 {
                        eprintln!(
                            "brig serve: pooled jails assemble again, after {} failure(s) in a row",
                            self.failures_in_a_row
                        );
                    }
                    self.failures_in_a_row = 0;
                    self.count_ready();
                    self.dispatch_queued();
                }
                Ok(Report::Answered) => {
                    self.runners[at].answering = false;
                }
                Ok(Report::Failed { message }) => {
                    self.status.failures += 1;
                    self.failures_in_a_row += 1;
                    let runner = &mut self.runners[at];
                    let line = match runner.state {
                        // A ready jail's program ended while it waited (a warm interpreter).
                        RunnerState::Ready => format!("brig serve: {message}"),
                        _ => format!(
                            "brig serve: a pooled jail failed to assemble: {message} (the pool retries, waiting longer each time; failures in a row are counted in --status, not logged)"
                        ),
                    };
                    runner.pooled = false;
                    self.count_ready();
                    let backoff = self.backoff();
                    // One line for a run of failures; --status counts them all.
                    if self.failures_in_a_row == 1 {
                        eprintln!("{line}");
                    }
                    if let Some(wait) = backoff {
                        self.refill_after = Some(Instant::now() + wait);
                    }
                    // Requests that waited for this jail get one built for them.
                    self.dispatch_queued();
                }
                Err(_) => {}
            },
            Ok(Read::Partial) => return false,
            // The runner is ending; SIGCHLD removes it. Until then, poll would report EOF
            // again and again: stop watching its socket by marking it.
            Ok(Read::Closed) | Err(_) => {
                let runner = &mut self.runners[at];
                if runner.state != RunnerState::Busy {
                    runner.pooled = false;
                }
                runner.silent = true;
                return false;
            }
        }
        true
    }

    /// Starts the queued requests that may start now, oldest first; a request whose uid
    /// is at its share lets those of other uids by.
    pub(super) fn dispatch_queued(&mut self) {
        while let Some(at) = self
            .queue
            .iter()
            .position(|pending| self.may_start(pending))
        {
            let pending = self.queue.remove(at).expect("found");
            self.dispatch(pending);
        }
        self.status.queued = self.queue.len();
    }

    /// Whether `pending` may start now: a slot free for its uid, and no pooled jail of
    /// its kind about to be ready.
    pub(super) fn may_start(&self, pending: &Pending) -> bool {
        self.full_for(pending.job.peer.uid).is_none() && !self.should_wait_for_pool(pending)
    }
}
