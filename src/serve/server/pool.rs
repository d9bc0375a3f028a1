//! The runners: a pool of jails assembled before requests come (cold, warm, a session's),
//! which runner serves which request, the queue of requests waiting for a slot, and the
//! runners' reports.

use super::sessions::SessionEntry;
use super::{Server, refuse};
use crate::error::{Context, Error, Result};
use crate::jail::Program;
use crate::serve::metrics::{JailKind, SessionCounters};
use crate::serve::protocol::{self, FrameReader, Read};
use crate::serve::runner;
use crate::serve::wire::{Job, Report, Start, Warm};
use crate::sys;
use nix::sys::signal::{SigSet, SigmaskHow, Signal, sigprocmask};
use nix::unistd::Pid;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd};
use std::time::{Duration, Instant};

/// After a pooled jail fails to assemble this many times in a row, the pool waits
/// BACKOFF, twice as long after each further failure, up to MAX_BACKOFF.
const FAILURES_BEFORE_BACKOFF: u32 = 3;
const BACKOFF: Duration = Duration::from_secs(1);
const MAX_BACKOFF: Duration = Duration::from_secs(60);

/// Requests waiting for a slot at most; more are refused at once.
const MAX_QUEUE: usize = 1024;

/// A kind of pooled jail: cold or with a warm interpreter, or a session's.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct PoolKind {
    pub(super) warm: Option<Warm>,
    pub(super) for_session: bool,
}

const COLD: PoolKind = PoolKind {
    warm: None,
    for_session: false,
};
pub(super) const SESSIONS: PoolKind = PoolKind {
    warm: None,
    for_session: true,
};

impl PoolKind {
    /// Whether a pooled jail of this kind may take a run of `program`, `pool_shape` if the
    /// run's jail has the pool's shape: a cold one any such run, a warm one only what its
    /// interpreter serves as a cold start would, a session's none.
    pub(super) fn serves(self, pool_shape: bool, program: &Program) -> bool {
        pool_shape && !self.for_session && self.warm.is_none_or(|warm| warm.serves(program))
    }
}

/// What a runner is for.
pub(super) enum Role {
    /// In the pool of its kind: not handed a request yet.
    Pool(PoolKind),
    /// Runs one client's program (counted in --max-jails and its uid's share).
    Job {
        uid: u32,
        /// Its client has no answer yet: the pool's refill waits for it.
        answering: bool,
    },
    /// Serves a session (counted in --max-sessions, not --max-jails).
    Session(Box<SessionEntry>),
}

/// Where a runner is in its life.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Phase {
    /// A pooled runner assembling its jail.
    Assembling,
    /// A pooled runner whose jail waits for a request.
    Ready,
    /// Serving its job or session (from its fork, for a runner made for one).
    Busy,
    /// Done for the server: its pooled jail failed, or its control socket is shut or
    /// closed. Not polled, handed nothing; it stays listed (its role still counts in the
    /// caps) until SIGCHLD reaps it.
    Closed,
}

/// A runner the server forked, from its fork until it is reaped.
pub(super) struct Runner {
    pub(super) pid: Pid,
    pub(super) control: OwnedFd,
    pub(super) reader: FrameReader,
    pub(super) role: Role,
    pub(super) phase: Phase,
    /// Forked then: its jail's build is timed from here (`metrics.rs`).
    pub(super) spawned: Instant,
    /// What its session said it counted last (`Report::Counters`).
    pub(super) counted: SessionCounters,
}

impl Runner {
    /// In the pool of `kind` (ready or being assembled).
    fn in_pool(&self, kind: PoolKind) -> bool {
        matches!(self.role, Role::Pool(its) if its == kind) && self.phase != Phase::Closed
    }

    /// In the pool of `kind` and ready for a request.
    pub(super) fn ready_in(&self, kind: PoolKind) -> bool {
        matches!(self.role, Role::Pool(its) if its == kind) && self.phase == Phase::Ready
    }

    /// Its control socket is read for reports.
    pub(super) fn polled(&self) -> bool {
        self.phase != Phase::Closed
    }

    /// Runs a program whose client has no answer yet.
    fn answering(&self) -> bool {
        matches!(
            self.role,
            Role::Job {
                answering: true,
                ..
            }
        )
    }

    /// Runs a program of `uid`'s.
    pub(super) fn runs_for(&self, uid: u32) -> bool {
        matches!(self.role, Role::Job { uid: its, .. } if its == uid)
    }

    /// The session it serves.
    pub(super) fn session(&self) -> Option<&SessionEntry> {
        match &self.role {
            Role::Session(session) => Some(session),
            _ => None,
        }
    }

    pub(super) fn session_mut(&mut self) -> Option<&mut SessionEntry> {
        match &mut self.role {
            Role::Session(session) => Some(session),
            _ => None,
        }
    }

    /// The pooled jail in `phase` that may take a run of `program` (`pool_shape`: see
    /// `PoolKind::serves`).
    fn may_take(&self, phase: Phase, pool_shape: bool, program: &Program) -> bool {
        self.phase == phase
            && matches!(self.role, Role::Pool(kind) if kind.serves(pool_shape, program))
    }

    fn is_warm(&self) -> bool {
        matches!(self.role, Role::Pool(PoolKind { warm: Some(_), .. }))
    }

    /// The kind of jail it builds, as the metrics name it.
    fn jail_kind(&self) -> JailKind {
        match self.role {
            Role::Pool(PoolKind {
                for_session: true, ..
            }) => JailKind::SessionPool,
            Role::Pool(PoolKind {
                warm: Some(Warm::Python),
                ..
            }) => JailKind::WarmPython,
            Role::Pool(PoolKind {
                warm: Some(Warm::Node),
                ..
            }) => JailKind::WarmNode,
            Role::Pool(_) => JailKind::Pooled,
            Role::Job { .. } => JailKind::Job,
            Role::Session(_) => JailKind::Session,
        }
    }
}

/// The ready pooled runner (its index) for a run of `program`, a warm one first.
fn ready_for(runners: &[Runner], pool_shape: bool, program: &Program) -> Option<usize> {
    let ready = |warm: bool| {
        runners.iter().position(|runner| {
            runner.is_warm() == warm && runner.may_take(Phase::Ready, pool_shape, program)
        })
    };
    ready(true).or_else(|| ready(false))
}

/// A run of the pool's shape finds no ready jail, but one being assembled could take it:
/// it will be ready sooner than a new one would.
fn should_wait_for_pool(runners: &[Runner], pool_shape: bool, program: &Program) -> bool {
    pool_shape
        && ready_for(runners, pool_shape, program).is_none()
        && runners
            .iter()
            .any(|runner| runner.may_take(Phase::Assembling, pool_shape, program))
}

/// How many pooled jails of `kind` are ready.
fn ready_count(runners: &[Runner], kind: PoolKind) -> usize {
    runners
        .iter()
        .filter(|runner| runner.ready_in(kind))
        .count()
}

/// How many jails of `kind` to start assembling now for the pool to hold `wanted`. While
/// a client waits for its answer, none if one of the kind is ready: building takes the
/// CPUs that client's run needs.
fn to_build(runners: &[Runner], kind: PoolKind, wanted: usize) -> usize {
    if runners.iter().any(Runner::answering) && ready_count(runners, kind) > 0 {
        return 0;
    }
    let pooled = runners.iter().filter(|runner| runner.in_pool(kind)).count();
    wanted.saturating_sub(pooled)
}

/// How long the pool waits before it builds again, after `failures_in_a_row`.
fn backoff(failures_in_a_row: u32) -> Option<Duration> {
    let beyond = failures_in_a_row.checked_sub(FAILURES_BEFORE_BACKOFF)?;
    Some(BACKOFF.saturating_mul(1 << beyond.min(6)).min(MAX_BACKOFF))
}

/// A checked request waiting for a runner.
pub(super) struct Pending {
    pub(super) job: Job,
    /// The connection, then the client's streams in `fds` mode.
    pub(super) fds: Vec<OwnedFd>,
    /// Its jail has the pool's shape.
    pub(super) pooled: bool,
    pub(super) deadline: Instant,
}

impl Server {
    fn ready_for(&self, pending: &Pending) -> Option<usize> {
        ready_for(&self.runners, pending.pooled, &pending.job.program)
    }

    pub(super) fn dispatch(&mut self, pending: Pending) {
        if !self.may_start(&pending) {
            if self.queue.len() >= MAX_QUEUE {
                return refuse(
                    &pending.fds[0],
                    &Error::busy(format!(
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
                if self.runners[at].is_warm() {
                    self.status.warm_runs += 1;
                }
                let runner = &mut self.runners[at];
                let fds: Vec<BorrowedFd> = pending.fds.iter().map(AsFd::as_fd).collect();
                runner.role = Role::Job {
                    uid: pending.job.peer.uid,
                    answering: true,
                };
                runner.phase = Phase::Busy;
                if protocol::write_frame(runner.control.as_fd(), &pending.job, &fds).is_err() {
                    refuse(
                        &pending.fds[0],
                        &Error::busy("brig serve: the pooled jail went away; retry"),
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

    pub(super) fn count_ready(&mut self) {
        let warm = |warm| PoolKind {
            warm: Some(warm),
            ..COLD
        };
        self.status.ready = ready_count(&self.runners, COLD);
        self.status.warm_ready = ready_count(&self.runners, warm(Warm::Python));
        self.status.warm_node_ready = ready_count(&self.runners, warm(Warm::Node));
        self.status.session_ready = ready_count(&self.runners, SESSIONS);
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
        for (kind, wanted) in kinds {
            for _ in 0..to_build(&self.runners, kind, wanted) {
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
                // Its siblings live (none is reaped yet): its jail build's sweep for
                // stale jails need not read their /proc status.
                crate::cgroup::owners_known_alive(
                    self.runners
                        .iter()
                        .map(|runner| runner.pid.as_raw() as u32)
                        .chain([server.as_raw() as u32]),
                );
                let audit_log = self.defaults.audit_log.clone();
                let prepared = runner::Prepared {
                    pool_plan: &self.pool_plan,
                    session_plan: &self.session_plan,
                    defaults: &self.defaults,
                };
                runner::main(runner_end, what, prepared, audit_log);
            }
            Some(pid) => {
                let (role, phase) = match what {
                    Start::Pooled { warm } => {
                        (Role::Pool(PoolKind { warm, ..COLD }), Phase::Assembling)
                    }
                    Start::SessionPool => (Role::Pool(SESSIONS), Phase::Assembling),
                    Start::ForJob(job, _) => {
                        let uid = job.peer.uid;
                        (
                            Role::Job {
                                uid,
                                answering: true,
                            },
                            Phase::Busy,
                        )
                    }
                    Start::Session(start) => {
                        let entry = SessionEntry::of(&start.opening);
                        (Role::Session(Box::new(entry)), Phase::Busy)
                    }
                };
                self.runners.push(Runner {
                    pid,
                    control,
                    reader: FrameReader::default(),
                    role,
                    phase,
                    spawned: Instant::now(),
                    counted: SessionCounters::default(),
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
            .position(|runner| runner.pid == pid && runner.polled())
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
                    let runner = &mut self.runners[at];
                    if runner.phase == Phase::Assembling {
                        let took = runner.spawned.elapsed();
                        self.status.metrics.built(runner.jail_kind(), took);
                    }
                    self.runners[at].phase = Phase::Ready;
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
                Ok(Report::Built) => {
                    let runner = &self.runners[at];
                    let took = runner.spawned.elapsed();
                    self.status.metrics.built(runner.jail_kind(), took);
                }
                Ok(Report::Counters(now)) => {
                    let runner = &mut self.runners[at];
                    self.status.metrics.counted(&runner.counted, &now);
                    runner.counted = now;
                }
                Ok(Report::Answered) => {
                    if let Role::Job { answering, .. } = &mut self.runners[at].role {
                        *answering = false;
                    }
                }
                Ok(Report::NotPaused) => {
                    if let Role::Session(session) = &mut self.runners[at].role {
                        session.paused_at = None;
                    }
                }
                Ok(Report::Failed { message }) => {
                    self.status.failures += 1;
                    self.failures_in_a_row += 1;
                    let runner = &mut self.runners[at];
                    let line = match runner.phase {
                        // A ready jail's program ended while it waited (a warm interpreter).
                        Phase::Ready => format!("brig serve: {message}"),
                        _ => format!(
                            "brig serve: a pooled jail failed to assemble: {message} (the pool retries, waiting longer each time; failures in a row are counted in --status, not logged)"
                        ),
                    };
                    // Out of the pool; it has nothing more to say, and ends.
                    if let Role::Pool(_) = runner.role {
                        runner.phase = Phase::Closed;
                    }
                    self.count_ready();
                    let backoff = backoff(self.failures_in_a_row);
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
            // again and again: stop watching its socket.
            Ok(Read::Closed) | Err(_) => {
                self.runners[at].phase = Phase::Closed;
                return false;
            }
        }
        true
    }

    /// Starts the queued requests that may start now, oldest first; a request whose uid
    /// is at its share lets those of other uids by.
    pub(super) fn dispatch_queued(&mut self) {
        while let Some(pending) = self
            .queue
            .iter()
            .position(|pending| self.may_start(pending))
            .and_then(|at| self.queue.remove(at))
        {
            self.dispatch(pending);
        }
        self.status.queued = self.queue.len();
    }

    /// Whether `pending` may start now: a slot free for its uid, and no pooled jail of
    /// its kind about to be ready.
    fn may_start(&self, pending: &Pending) -> bool {
        self.full_for(pending.job.peer.uid).is_none()
            && !should_wait_for_pool(&self.runners, pending.pooled, &pending.job.program)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `argv` and `env` split at spaces.
    fn program(argv: &str, env: &str) -> Program {
        Program {
            argv: argv.split_whitespace().map(String::from).collect(),
            env: env.split_whitespace().map(String::from).collect(),
            chdir: "/".into(),
            as_root: false,
        }
    }

    const PYTHON: PoolKind = PoolKind {
        warm: Some(Warm::Python),
        for_session: false,
    };
    const NODE: PoolKind = PoolKind {
        warm: Some(Warm::Node),
        for_session: false,
    };

    /// Runners as the server lists them, by role and phase.
    type Listed = Vec<(Role, Phase)>;

    /// The runners, each with /dev/null for a control socket (nothing here reads or
    /// writes it), and how they read in a failing assertion.
    fn runners(listed: Listed) -> (Vec<Runner>, String) {
        let shape: Vec<String> = listed
            .iter()
            .map(|(role, phase)| format!("{}:{phase:?}", describe(role)))
            .collect();
        let runners = listed
            .into_iter()
            .map(|(role, phase)| Runner {
                pid: Pid::from_raw(1),
                control: OwnedFd::from(std::fs::File::open("/dev/null").expect("/dev/null")),
                reader: FrameReader::default(),
                role,
                phase,
                spawned: Instant::now(),
                counted: SessionCounters::default(),
            })
            .collect();
        (runners, shape.join(", "))
    }

    fn describe(role: &Role) -> String {
        match role {
            Role::Pool(kind) => format!("pool {kind:?}"),
            Role::Job { answering, .. } => format!("job (answering {answering})"),
            Role::Session(_) => "session".into(),
        }
    }

    fn job(answering: bool) -> Role {
        Role::Job {
            uid: 1000,
            answering,
        }
    }

    fn session() -> Role {
        let opening = crate::serve::wire::Opening {
            id: "0f".into(),
            owner: crate::verdict::Peer {
                uid: 1000,
                gid: 1000,
                pid: 1,
            },
            session_timeout_ms: 60_000,
            idle_timeout_ms: 60_000,
            drain_grace_ms: 0,
            metadata: Default::default(),
            limits: Default::default(),
            freezable: false,
        };
        Role::Session(Box::new(SessionEntry::of(&opening)))
    }

    #[test]
    fn a_pooled_jail_takes_only_the_runs_its_kind_serves_as_a_cold_start_would() {
        // (kind, the run has the pool's shape, argv, env) -> may take it
        for (kind, pool_shape, argv, env, expected) in [
            // A cold jail: any run of the pool's shape.
            (COLD, true, "sh -c true", "", true),
            (COLD, true, "python3 -I x.py", "PYTHONPATH=/x", true),
            (COLD, false, "sh -c true", "", false),
            // A session's pooled jail takes no run.
            (SESSIONS, true, "sh -c true", "", false),
            // A warm Python: python3 (or its path) with -c CODE, a script or stdin.
            (PYTHON, true, "python3 -c print(1)", "", true),
            (PYTHON, true, "/usr/bin/python3 main.py", "", true),
            (PYTHON, true, "python3 main.py --flag", "", true),
            (PYTHON, true, "python3", "", true),
            (PYTHON, true, "python3 -", "", true),
            (PYTHON, false, "python3 -c print(1)", "", false),
            // ... not -c without its code, another option of its own, another program,
            // nor a variable that acts at startup (which is done).
            (PYTHON, true, "python3 -c", "", false),
            (PYTHON, true, "python3 -I main.py", "", false),
            (PYTHON, true, "python3 -m http.server", "", false),
            (PYTHON, true, "python main.py", "", false),
            (PYTHON, true, "/opt/python3 main.py", "", false),
            (PYTHON, true, "node -e 0", "", false),
            (PYTHON, true, "python3 main.py", "PYTHONPATH=/x", false),
            (
                PYTHON,
                true,
                "python3 main.py",
                "HOME=/tmp PYTHONSAFEPATH=1",
                false,
            ),
            (
                PYTHON,
                true,
                "python3 main.py",
                "NODE_OPTIONS=x HOME=/tmp",
                true,
            ),
            // A warm Node: node with -e CODE, a script or stdin; no NODE_* variable.
            (NODE, true, "node -e 0", "", true),
            (NODE, true, "/usr/bin/node main.js", "", true),
            (NODE, true, "node -", "", true),
            (NODE, true, "node -e", "", false),
            (NODE, true, "node --require x main.js", "", false),
            (NODE, true, "nodejs main.js", "", false),
            (NODE, true, "python3 -c 1", "", false),
            (NODE, true, "node main.js", "NODE_OPTIONS=--x", false),
            (NODE, true, "node main.js", "PYTHONPATH=/x", true),
        ] {
            assert_eq!(
                kind.serves(pool_shape, &program(argv, env)),
                expected,
                "{kind:?}, pool shape {pool_shape}: {argv:?} with {env:?}"
            );
        }
    }

    #[test]
    fn a_run_goes_to_a_ready_warm_jail_first_then_a_ready_cold_one() {
        use Phase::{Assembling, Busy, Closed, Ready};
        let pool = Role::Pool;
        // (runners, the run has the pool's shape, argv) -> the runner it goes to
        let cases: Vec<(Listed, bool, &str, Option<usize>)> = vec![
            (vec![], true, "sh", None),
            (vec![(pool(COLD), Ready)], true, "sh", Some(0)),
            (vec![(pool(COLD), Ready)], false, "sh", None),
            // Not ready yet, done with, or taken.
            (vec![(pool(COLD), Assembling)], true, "sh", None),
            (vec![(pool(COLD), Closed)], true, "sh", None),
            (vec![(job(true), Busy)], true, "sh", None),
            (vec![(session(), Busy)], true, "sh", None),
            (vec![(pool(SESSIONS), Ready)], true, "sh", None),
            // Warm first, when it serves the run; cold otherwise.
            (
                vec![(pool(COLD), Ready), (pool(PYTHON), Ready)],
                true,
                "python3 -",
                Some(1),
            ),
            (
                vec![(pool(COLD), Ready), (pool(PYTHON), Ready)],
                true,
                "sh",
                Some(0),
            ),
            (vec![(pool(PYTHON), Ready)], true, "sh", None),
            (
                vec![(pool(NODE), Ready), (pool(COLD), Ready)],
                true,
                "python3 -",
                Some(1),
            ),
            (
                vec![(pool(PYTHON), Closed), (pool(COLD), Ready)],
                true,
                "python3 -",
                Some(1),
            ),
            // The first ready of its kind.
            (
                vec![
                    (pool(COLD), Assembling),
                    (pool(COLD), Ready),
                    (pool(COLD), Ready),
                ],
                true,
                "sh",
                Some(1),
            ),
        ];
        for (listed, pool_shape, argv, expected) in cases {
            let (runners, shape) = runners(listed);
            assert_eq!(
                ready_for(&runners, pool_shape, &program(argv, "")),
                expected,
                "[{shape}], pool shape {pool_shape}: {argv}"
            );
        }
    }

    #[test]
    fn a_run_waits_for_a_pooled_jail_being_assembled_only_when_none_is_ready() {
        use Phase::{Assembling, Closed, Ready};
        let pool = Role::Pool;
        // (runners, the run has the pool's shape, argv) -> it waits
        let cases: Vec<(Listed, bool, &str, bool)> = vec![
            (vec![], true, "sh", false),
            (vec![(pool(COLD), Assembling)], true, "sh", true),
            (vec![(pool(COLD), Assembling)], false, "sh", false),
            (
                vec![(pool(COLD), Assembling), (pool(COLD), Ready)],
                true,
                "sh",
                false,
            ),
            (vec![(pool(COLD), Closed)], true, "sh", false),
            (vec![(pool(SESSIONS), Assembling)], true, "sh", false),
            // A warm one being assembled is waited for only by what it would serve.
            (vec![(pool(PYTHON), Assembling)], true, "python3 -", true),
            (vec![(pool(PYTHON), Assembling)], true, "sh", false),
            (
                vec![(pool(PYTHON), Assembling), (pool(COLD), Ready)],
                true,
                "python3 -",
                false,
            ),
        ];
        for (listed, pool_shape, argv, expected) in cases {
            let (runners, shape) = runners(listed);
            assert_eq!(
                should_wait_for_pool(&runners, pool_shape, &program(argv, "")),
                expected,
                "[{shape}], pool shape {pool_shape}: {argv}"
            );
        }
    }

    #[test]
    fn the_pool_builds_what_it_lacks_but_not_while_a_client_waits_and_one_is_ready() {
        use Phase::{Assembling, Busy, Closed, Ready};
        let pool = Role::Pool;
        // (runners, kind, wanted) -> how many to build
        let cases: Vec<(Listed, PoolKind, usize, usize)> = vec![
            (vec![], COLD, 2, 2),
            (vec![], COLD, 0, 0),
            (vec![(pool(COLD), Assembling)], COLD, 2, 1),
            (vec![(pool(COLD), Ready)], COLD, 2, 1),
            (vec![(pool(COLD), Ready), (pool(COLD), Ready)], COLD, 1, 0),
            // Gone from the pool: failed or shut, or taken by a run.
            (vec![(pool(COLD), Closed)], COLD, 2, 2),
            (vec![(job(false), Busy)], COLD, 2, 2),
            // Each kind is counted apart.
            (vec![(pool(PYTHON), Ready)], COLD, 1, 1),
            (vec![(pool(COLD), Ready)], SESSIONS, 1, 1),
            // A client waits for its answer: none while one of the kind is ready...
            (vec![(job(true), Busy), (pool(COLD), Ready)], COLD, 3, 0),
            // ... but a kind with none ready is refilled.
            (vec![(job(true), Busy)], COLD, 2, 2),
            (
                vec![(job(true), Busy), (pool(COLD), Assembling)],
                COLD,
                2,
                1,
            ),
            (vec![(job(true), Busy), (pool(PYTHON), Ready)], COLD, 1, 1),
            // An answered run does not hold the pool back.
            (vec![(job(false), Busy), (pool(COLD), Ready)], COLD, 3, 2),
        ];
        for (listed, kind, wanted, expected) in cases {
            let (runners, shape) = runners(listed);
            assert_eq!(
                to_build(&runners, kind, wanted),
                expected,
                "[{shape}]: {kind:?}, {wanted} wanted"
            );
        }
    }

    #[test]
    fn the_pool_backs_off_after_failures_in_a_row_doubling_up_to_a_minute() {
        let secs = Duration::from_secs;
        for (failures, expected) in [
            (0, None),
            (2, None),
            (3, Some(secs(1))),
            (4, Some(secs(2))),
            (5, Some(secs(4))),
            (8, Some(secs(32))),
            (9, Some(secs(60))),
            (u32::MAX, Some(secs(60))),
        ] {
            assert_eq!(backoff(failures), expected, "{failures} failures in a row");
        }
    }

    #[test]
    fn a_runner_counts_in_its_uids_share_while_its_role_is_its_job() {
        // (runner, uid) -> counted for the uid
        let cases: Vec<(Listed, u32, bool)> = vec![
            (vec![(job(true), Phase::Busy)], 1000, true),
            (vec![(job(false), Phase::Closed)], 1000, true),
            (vec![(job(true), Phase::Busy)], 1001, false),
            (vec![(session(), Phase::Busy)], 1000, false),
            (vec![(Role::Pool(COLD), Phase::Ready)], 1000, false),
        ];
        for (listed, uid, expected) in cases {
            let (runners, shape) = runners(listed);
            assert_eq!(runners[0].runs_for(uid), expected, "{shape} for uid {uid}");
        }
    }
}
