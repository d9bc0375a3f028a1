//! The listening process of `brig serve`. It stays single-threaded, because it forks a
//! runner for every jail (a jail's process is cloned without exec, which a threaded
//! process must not do). One poll loop: new connections, requests read bit by bit (a slow
//! client never blocks the others), runners reporting, signals (SIGCHLD reaps runners,
//! SIGTERM and SIGINT drain).
//!
//! - `mod.rs`: the loop, signals, requests read and dispatched, deadlines, drain;
//! - `admit.rs`: who may connect, and the per-uid caps and shares;
//! - `check.rs`: a run request checked against the server's policy;
//! - `pool.rs`: the runners (their role and phase), the pool, the queue;
//! - `sessions.rs`: opening, routing and listing sessions;
//! - `listen.rs`: the socket.

mod admit;
mod check;
mod listen;
mod pool;
mod sessions;

use super::ServeArgs;
use super::protocol::{self, FrameReader, Read, Reply, Request, Status};
use super::wire::DRAINING;
use crate::error::{Context, Error, Result};
use crate::options::JailOptions;
use crate::plan::Plan;
use crate::verdict::Peer;
use admit::{Full, resolve_group, share};
use nix::sys::signal::{SigSet, SigmaskHow, Signal, sigprocmask};
use nix::sys::signalfd::{SfdFlags, SignalFd};
use nix::sys::wait::{WaitPidFlag, WaitStatus, waitpid};
use nix::unistd::Pid;
use pool::{Pending, Phase, Role, Runner};
use sessions::SessionAsk;
use std::collections::VecDeque;
use std::os::fd::{AsFd, AsRawFd, OwnedFd};
use std::os::unix::net::{UnixListener, UnixStream};
use std::time::{Duration, Instant};

/// How long a client has to send its whole request; then it is answered with an error
/// and the connection closed (an idle or half-sent connection holds a descriptor).
const REQUEST_TIMEOUT: Duration = Duration::from_secs(5);

/// Past the drain's grace, how long runners have to end their jails and answer their
/// clients before they are killed (their cgroups are then removed by the server).
const DRAIN_KILL_AFTER: Duration = Duration::from_millis(300);
/// How often a draining server looks at its deadlines.
const DRAIN_TICK: u16 = 25;

/// What a descriptor the loop polls is.
#[derive(Clone, Copy, Debug)]
enum Source {
    Signals,
    Listener,
    /// A runner's control socket.
    Runner(Pid),
    /// A connection whose request is arriving (by its descriptor).
    Incoming(i32),
}

/// A connection whose request has not fully arrived.
struct Incoming {
    stream: UnixStream,
    reader: FrameReader,
    peer: Peer,
    since: Instant,
}

struct Server {
    args: ServeArgs,
    defaults: JailOptions,
    pool_plan: Plan,
    /// The jail of a pooled session: the pool's, whose OOM kills take one process.
    session_plan: Plan,
    pool_digest: String,
    listener: Option<UnixListener>,
    signals: SignalFd,
    runners: Vec<Runner>,
    incoming: Vec<Incoming>,
    queue: VecDeque<Pending>,
    status: Status,
    /// Set by SIGTERM: when running jails are told to stop.
    drain_deadline: Option<Instant>,
    failures_in_a_row: u32,
    refill_after: Option<Instant>,
    /// Who may connect besides root and the server's own uid.
    group: Option<nix::unistd::Gid>,
    /// One uid's share of the jails and of the sessions (`share`).
    jails_per_uid: usize,
    sessions_per_uid: usize,
}

/// `brig serve`: serves until SIGTERM or SIGINT, then drains. The exit status.
pub fn serve(args: ServeArgs) -> Result<i32> {
    if args.status {
        // A question for a running server, the command line's (`serve::Client::status`).
        return Err(Error::input(
            "--status asks the server on --socket; it does not start one",
        ));
    }
    let mut defaults = defaults(&args)?;
    if args.warm_python > 0 && defaults.output_limit.is_some() {
        return Err(Error::input(
            "--warm-python with --output-limit: a warm Python writes to its client's streams itself, past brig's relay; drop one of them",
        ));
    }
    if args.warm_node > 0 && defaults.output_limit.is_some() {
        return Err(Error::input(
            "--warm-node with --output-limit: a warm Node's output is relayed without brig's limit; drop one of them",
        ));
    }
    let mut pool_plan = Plan::resolve(with_placeholder(defaults.clone()))?;
    // Rootless in a delegated cgroup v2 (a unit with Delegate=yes): the server moves into
    // a leaf of its own, its jails go beside it.
    // Dropped when the server ends, on every path.
    let leaf = match &pool_plan.limits.placement {
        Some(placement) => placement.settle_server()?,
        None => None,
    };
    if let Some(leaf) = &leaf {
        defaults.cgroup_parent = Some(leaf.jails_parent().to_path_buf());
        pool_plan = Plan::resolve(with_placeholder(defaults.clone()))?;
    }
    let group = args
        .socket_group
        .as_deref()
        .map(resolve_group)
        .transpose()?;
    // Signals are read from a descriptor in the loop; runners reset the mask.
    let mut handled = SigSet::empty();
    for signal in [
        Signal::SIGCHLD,
        Signal::SIGTERM,
        Signal::SIGINT,
        Signal::SIGHUP,
    ] {
        handled.add(signal);
    }
    sigprocmask(SigmaskHow::SIG_BLOCK, Some(&handled), None).context(|| "block signals".into())?;
    let signals = SignalFd::with_flags(&handled, SfdFlags::SFD_CLOEXEC | SfdFlags::SFD_NONBLOCK)
        .context(|| "create a signalfd".into())?;
    let session_plan = session_plan(defaults.clone())?;
    raise_nofile()?;
    // The jails of a server that was killed (SIGKILL) are gone before this one serves,
    // and so are the locks of their per-jail host uids.
    let placement = pool_plan.limits.placement.clone();
    if let Some(placement) = &placement {
        placement.remove_leftover_jails();
    }
    let per_jail_uids = matches!(
        pool_plan.identity.host,
        crate::identity::HostIds::PerJail { .. }
    );
    if per_jail_uids {
        crate::identity::remove_stale_locks();
    }
    let listener = listen::listen(&args.socket, group)?;
    let pool_digest = crate::verdict::config_digest(&pool_plan);
    let jails_per_uid = share(args.max_jails_per_uid, args.max_jails);
    let sessions_per_uid = share(args.max_sessions_per_uid, args.max_sessions);
    let mut server = Server {
        status: Status {
            version: env!("CARGO_PKG_VERSION").into(),
            pid: std::process::id(),
            pool: args.pool,
            warm_python: args.warm_python,
            warm_node: args.warm_node,
            max_jails: args.max_jails,
            max_sessions: args.max_sessions,
            session_pool: args.session_pool,
            session_root: crate::identity::can_map_root(&session_plan.identity).is_ok(),
            ..Status::default()
        },
        args,
        defaults,
        pool_plan,
        session_plan,
        pool_digest,
        listener: Some(listener),
        signals,
        runners: Vec::new(),
        incoming: Vec::new(),
        queue: VecDeque::new(),
        drain_deadline: None,
        failures_in_a_row: 0,
        refill_after: None,
        group,
        jails_per_uid,
        sessions_per_uid,
    };
    eprintln!(
        "brig serve: listening on {} (pool {}, max jails {}, {} per uid)",
        server.args.socket.display(),
        server.args.pool,
        server.args.max_jails,
        server.jails_per_uid
    );
    let result = server.run();
    // Runners killed past the drain's grace could not remove their jails' cgroups, nor
    // their host uids' locks.
    if let Some(placement) = &placement {
        placement.remove_leftover_jails();
    }
    if per_jail_uids {
        crate::identity::remove_stale_locks();
    }
    let _ = std::fs::remove_file(&server.args.socket);
    drop(leaf);
    result.map(|()| 0)
}

/// The server's default options: the config file under the command line; a program or a
/// report destination makes no sense for a server.
fn defaults(args: &ServeArgs) -> Result<JailOptions> {
    let defaults = crate::config::resolve(args.config.as_deref(), args.options.clone())?;
    if !defaults.command.is_empty() {
        return Err(Error::input(
            "brig serve takes no program: each client names its own (`brig run --server PATH -- PROGRAM`)",
        ));
    }
    if defaults.report.is_some() || defaults.report_fd.is_some() {
        return Err(Error::input(
            "brig serve: --report and --report-fd are each client's (`brig run --server PATH --report FILE`); the server's record is --audit-log",
        ));
    }
    if let Some(dir) = defaults.workdir.as_ref().or(defaults.rootfs.as_ref())
        && !dir.is_absolute()
    {
        return Err(Error::input(format!(
            "brig serve: {} is relative; give absolute paths to a server",
            dir.display()
        )));
    }
    Ok(defaults)
}

/// The pooled jail waits for its program; the plan needs one to be valid.
fn with_placeholder(mut options: JailOptions) -> JailOptions {
    options.command = vec!["true".into()];
    options
}

/// The plan of a session's jail: the options', whose OOM kills take one process (the
/// interpreter, restarted), not the session.
fn session_plan(options: JailOptions) -> Result<Plan> {
    let mut plan = Plan::resolve(with_placeholder(options))?;
    plan.limits.cgroup.oom_kills_one = true;
    plan.limits.cgroup.pausable = true;
    Ok(plan)
}

/// Every connection and runner holds descriptors: the soft RLIMIT_NOFILE a shell gives
/// (often 1,024) would run out after about a thousand idle clients, so the server takes
/// its hard limit. Jails get their own (`--rlimit nofile`, 1,024 by default).
fn raise_nofile() -> Result<()> {
    use nix::sys::resource::{Resource, getrlimit, setrlimit};
    let (soft, hard) =
        getrlimit(Resource::RLIMIT_NOFILE).context(|| "read RLIMIT_NOFILE".into())?;
    if soft < hard {
        setrlimit(Resource::RLIMIT_NOFILE, hard, hard)
            .context(|| format!("raise the soft RLIMIT_NOFILE from {soft} to {hard}"))?;
    }
    Ok(())
}

impl Server {
    fn run(&mut self) -> Result<()> {
        loop {
            self.refill_pool();
            if self.drain_deadline.is_some() && self.runners.is_empty() {
                return Ok(());
            }
            self.wait_and_handle();
            self.expire();
        }
    }

    /// One poll over every descriptor, and what each has for us.
    fn wait_and_handle(&mut self) {
        let read = nix::poll::PollFlags::POLLIN;
        // Each descriptor polled with what it is; a runner by its pid: handling one event
        // may reap a runner and spawn another whose control socket gets the same number,
        // and must not be read (blocking) for the first one's end. An incoming connection
        // by its descriptor, which stays its own while it is listed.
        let mut sources = vec![Source::Signals];
        let mut fds = vec![nix::poll::PollFd::new(self.signals.as_fd(), read)];
        if let Some(listener) = &self.listener {
            sources.push(Source::Listener);
            fds.push(nix::poll::PollFd::new(listener.as_fd(), read));
        }
        for runner in self.runners.iter().filter(|runner| runner.polled()) {
            sources.push(Source::Runner(runner.pid));
            fds.push(nix::poll::PollFd::new(runner.control.as_fd(), read));
        }
        for incoming in &self.incoming {
            sources.push(Source::Incoming(incoming.stream.as_raw_fd()));
            fds.push(nix::poll::PollFd::new(incoming.stream.as_fd(), read));
        }
        // Idle, the server sleeps until something happens; with deadlines to keep (slow
        // requests, the queue, draining, a pool backing off) it looks again soon.
        let waiting = !self.incoming.is_empty()
            || !self.queue.is_empty()
            || self.drain_deadline.is_some()
            || self.refill_after.is_some();
        let timeout = if self.drain_deadline.is_some() {
            nix::poll::PollTimeout::from(DRAIN_TICK)
        } else if waiting {
            nix::poll::PollTimeout::from(100u16)
        } else {
            nix::poll::PollTimeout::NONE
        };
        if nix::poll::poll(&mut fds, timeout).is_err() {
            return;
        }
        let ready: Vec<Source> = sources
            .into_iter()
            .zip(&fds)
            .filter(|(_, fd)| fd.revents().is_some_and(|events| !events.is_empty()))
            .map(|(source, _)| source)
            .collect();
        drop(fds);
        for source in ready {
            match source {
                Source::Signals => self.handle_signals(),
                Source::Listener => self.accept(),
                Source::Runner(pid) => {
                    self.handle_runner(pid);
                }
                Source::Incoming(fd) => self.handle_incoming(fd),
            }
        }
    }

    fn handle_signals(&mut self) {
        while let Ok(Some(info)) = self.signals.read_signal() {
            match Signal::try_from(info.ssi_signo as i32) {
                Ok(Signal::SIGCHLD) => self.reap(),
                Ok(_) => self.start_draining(),
                Err(_) => {}
            }
        }
    }

    /// Stops taking requests; idle pooled jails are let go, running ones finish (until
    /// --drain-grace, then they are told to stop).
    fn start_draining(&mut self) {
        if self.drain_deadline.is_some() {
            return;
        }
        eprintln!(
            "brig serve: draining: no new requests; {} jail(s) running",
            self.status.running
        );
        self.status.draining = true;
        self.drain_deadline = Some(Instant::now() + self.args.drain_grace.0);
        self.listener = None;
        let _ = std::fs::remove_file(&self.args.socket);
        // Every waiting client is answered: queued requests and those still arriving now,
        // running ones when their jails end (sessions' runners answer theirs).
        let draining = Error::busy(format!(
            "brig serve: {DRAINING}; the request was not run; retry with another server"
        ));
        for pending in std::mem::take(&mut self.queue) {
            refuse(&pending.fds[0], &draining);
        }
        self.status.queued = 0;
        for incoming in std::mem::take(&mut self.incoming) {
            refuse(&incoming.stream, &draining);
        }
        // An idle runner sees its control socket shut and exits, dropping its jail; a
        // session's runner ends its session. The server waits for every runner, so that
        // nothing of it is left once it has exited.
        for runner in &mut self.runners {
            if !matches!(runner.role, Role::Job { .. }) {
                let _ = nix::sys::socket::shutdown(
                    runner.control.as_raw_fd(),
                    nix::sys::socket::Shutdown::Both,
                );
                runner.phase = Phase::Closed;
            }
        }
    }

    fn reap(&mut self) {
        loop {
            let status = match waitpid(None, Some(WaitPidFlag::WNOHANG)) {
                Ok(WaitStatus::StillAlive) | Err(_) => return,
                Ok(status) => status,
            };
            let Some(pid) = status.pid() else { continue };
            // What it said last (a pooled jail that failed) may still be unread: a
            // runner's exit and its last report arrive together.
            while self.handle_runner(pid) {}
            if let Some(at) = self.runners.iter().position(|runner| runner.pid == pid) {
                let runner = self.runners.remove(at);
                match runner.role {
                    Role::Job { .. } => self.status.running -= 1,
                    Role::Session(_) => self.status.sessions -= 1,
                    Role::Pool(_) => {}
                }
            }
            self.dispatch_queued();
        }
    }

    fn handle_incoming(&mut self, fd: i32) {
        let Some(at) = self
            .incoming
            .iter()
            .position(|incoming| incoming.stream.as_raw_fd() == fd)
        else {
            return;
        };
        let read = {
            let incoming = &mut self.incoming[at];
            incoming.reader.read(incoming.stream.as_fd())
        };
        match read {
            Ok(Read::Partial) => {}
            Ok(Read::Closed) => {
                self.incoming.remove(at);
            }
            Ok(Read::Frame(body, fds)) => {
                let incoming = self.incoming.remove(at);
                self.handle_request(incoming, &body, fds);
            }
            Err(err) => {
                let incoming = self.incoming.remove(at);
                self.status.refused += 1;
                let _ = incoming.stream.set_nonblocking(false);
                refuse(&incoming.stream, &err);
            }
        }
    }

    fn handle_request(&mut self, incoming: Incoming, body: &[u8], fds: Vec<OwnedFd>) {
        let stream = incoming.stream;
        let _ = stream.set_nonblocking(false);
        let request = match protocol::parse_request(body) {
            Ok(request) => request,
            Err(err) => {
                self.status.refused += 1;
                return refuse(&stream, &err);
            }
        };
        if !matches!(request, Request::Run { .. }) && !fds.is_empty() {
            self.status.refused += 1;
            return refuse(
                &stream,
                &Error::input("brig serve: only a run request may come with descriptors"),
            );
        }
        match request {
            Request::Status => {
                let mut status = self.status.clone();
                status.pool_retry_ms = self.refill_after.map_or(0, |at| {
                    at.saturating_duration_since(Instant::now()).as_millis() as u64
                });
                let _ = protocol::write_frame(stream.as_fd(), &Reply::Status(status), &[]);
            }
            Request::Signal { .. } => {
                refuse(
                    &stream,
                    &Error::input(
                        "brig serve: a signal frame before any run; send it while a run is going",
                    ),
                );
            }
            Request::SessionCreate {
                options,
                session_timeout,
                idle_timeout,
                workspace_size,
                metadata,
                secrets,
                root,
            } => {
                let asked = SessionAsk {
                    options: *options,
                    session_timeout,
                    idle_timeout,
                    workspace_size,
                    metadata,
                    secrets,
                    root,
                };
                if let Err(err) = self.create_session(&stream, asked, incoming.peer) {
                    self.status.refused += 1;
                    refuse(&stream, &err);
                }
            }
            Request::SessionList { metadata } => {
                let reply = self.list_sessions(&incoming.peer, &metadata);
                let _ = protocol::write_frame(stream.as_fd(), &reply, &[]);
            }
            request @ (Request::SessionExec { .. }
            | Request::SessionPut { .. }
            | Request::SessionGet { .. }
            | Request::SessionLs { .. }
            | Request::SessionNetwork { .. }
            | Request::SessionSetTimeout { .. }
            | Request::SessionStat { .. }
            | Request::SessionExists { .. }
            | Request::SessionMkdir { .. }
            | Request::SessionRename { .. }
            | Request::SessionRemove { .. }
            | Request::SessionWrite { .. }
            | Request::SessionRead { .. }
            | Request::SessionWatch { .. }
            | Request::SessionWatchEvents { .. }
            | Request::SessionUnwatch { .. }
            | Request::SessionPs { .. }
            | Request::SessionConnect { .. }
            | Request::SessionStdin { .. }
            | Request::SessionResize { .. }
            | Request::SessionDial { .. }
            | Request::SessionSignal { .. }
            | Request::SessionKill { .. }
            | Request::SessionContext { .. }
            | Request::SessionPause { .. }
            | Request::SessionResume { .. }
            | Request::SessionStats { .. }
            | Request::SessionClose { .. }) => {
                if let Err(err) = self
                    .admit_to_session(&request, &incoming.peer)
                    .and_then(|()| self.route_to_session(&stream, &request, body, incoming.peer))
                {
                    self.status.refused += 1;
                    refuse(&stream, &err);
                }
            }
            Request::Run {
                options,
                stdio,
                stdin,
                origins,
            } => match self.check_run(
                *options,
                (stdio, stdin.as_deref(), &origins),
                &fds,
                incoming.peer,
            ) {
                Ok((job, pooled)) => {
                    let mut all = vec![OwnedFd::from(stream)];
                    all.extend(fds);
                    self.dispatch(Pending {
                        job,
                        fds: all,
                        pooled,
                        deadline: Instant::now() + self.args.queue_timeout.0,
                    });
                }
                Err(err) => {
                    self.status.refused += 1;
                    refuse(&stream, &err);
                }
            },
        }
    }

    /// Times out slow requests and queued ones; past the drain deadline, stops runners.
    fn expire(&mut self) {
        let now = Instant::now();
        let (late, on_time): (Vec<Incoming>, Vec<Incoming>) = std::mem::take(&mut self.incoming)
            .into_iter()
            .partition(|incoming| now.duration_since(incoming.since) >= REQUEST_TIMEOUT);
        self.incoming = on_time;
        for incoming in late {
            self.status.refused += 1;
            refuse(
                &incoming.stream,
                &Error::input(format!(
                    "brig serve: the request did not arrive whole within {}s of connecting; send it at once",
                    REQUEST_TIMEOUT.as_secs()
                )),
            );
        }
        let max_jails = self.args.max_jails;
        let per_uid = self.jails_per_uid;
        let waited = self.args.queue_timeout;
        while let Some(pending) = self
            .queue
            .iter()
            .position(|pending| pending.deadline <= now)
            .and_then(|at| self.queue.remove(at))
        {
            self.status.refused += 1;
            let uid = pending.job.peer.uid;
            let message = match self.full_for(uid) {
                Some(Full::Uid) => format!(
                    "brig serve: uid {uid} runs {per_uid} jails already, its share (--max-jails-per-uid); waited {waited} (--queue-timeout); retry later"
                ),
                _ => format!(
                    "brig serve: all {max_jails} jails are busy (--max-jails); waited {waited} (--queue-timeout); retry later"
                ),
            };
            refuse(&pending.fds[0], &Error::busy(message));
        }
        self.status.queued = self.queue.len();
        self.dispatch_queued();
        // Past the grace, every runner is told to end its jail (its control socket shut:
        // it kills the jail and answers its client that the server is draining); one
        // that has not ended a moment later is killed, its jail with it.
        if let Some(deadline) = self.drain_deadline
            && now >= deadline
        {
            let kill = now >= deadline + DRAIN_KILL_AFTER;
            for runner in &mut self.runners {
                let _ = nix::sys::socket::shutdown(
                    runner.control.as_raw_fd(),
                    nix::sys::socket::Shutdown::Both,
                );
                runner.phase = Phase::Closed;
                if kill {
                    let _ = nix::sys::signal::kill(runner.pid, Signal::SIGKILL);
                }
            }
        }
    }
}
/// Answers a request with one error frame (the connection then closes).
fn refuse(connection: &impl AsFd, error: &Error) {
    let _ = protocol::write_frame(connection.as_fd(), &Reply::error(error), &[]);
}
