//! The listening process of `brig serve`. It stays single-threaded, because it forks a
//! runner for every jail (a jail's process is cloned without exec, which a threaded
//! process must not do). One poll loop: new connections, requests read bit by bit (a slow
//! client never blocks the others), runners reporting, signals (SIGCHLD reaps runners,
//! SIGTERM and SIGINT drain).

use super::ServeArgs;
use super::policy;
use super::protocol::{self, FrameReader, Read, Reply, Request, Status, StdioMode};
use super::runner::{self, Job, Report, SessionStart, Start};
use super::session::{DRAINING, Opening, ToSession};
use super::warm::Warm;
use super::{session_meta, session_network};
use crate::error::{Context, Error, Result};
use crate::jail::Program;
use crate::options::JailOptions;
use crate::plan::Plan;
use crate::sys;
use crate::verdict::Peer;
use nix::sys::signal::{SigSet, SigmaskHow, Signal, sigprocmask};
use nix::sys::signalfd::{SfdFlags, SignalFd};
use nix::sys::wait::{WaitPidFlag, WaitStatus, waitpid};
use nix::unistd::Pid;
use std::collections::VecDeque;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd};
use std::os::unix::fs::PermissionsExt;
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::Path;
use std::time::{Duration, Instant};

/// How long a client has to send its whole request; then it is answered with an error
/// and the connection closed (an idle or half-sent connection holds a descriptor).
const REQUEST_TIMEOUT: Duration = Duration::from_secs(5);
/// After a pooled jail fails to assemble this many times in a row, the pool waits
/// BACKOFF, twice as long after each further failure, up to MAX_BACKOFF.
const FAILURES_BEFORE_BACKOFF: u32 = 3;
const BACKOFF: Duration = Duration::from_secs(1);
const MAX_BACKOFF: Duration = Duration::from_secs(60);
/// Requests waiting for a slot at most; more are refused at once.
const MAX_QUEUE: usize = 1024;
/// Past the drain's grace, how long runners have to end their jails and answer their
/// clients before they are killed (their cgroups are then removed by the server).
const DRAIN_KILL_AFTER: Duration = Duration::from_millis(300);
/// How often a draining server looks at its deadlines.
const DRAIN_TICK: u16 = 25;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum RunnerState {
    Assembling,
    Ready,
    Busy,
    /// Serving a session (not counted in --max-jails).
    Session,
}

/// An open session, as the server knows it.
struct SessionEntry {
    id: String,
    owner: Peer,
    created: Instant,
    created_at: std::time::SystemTime,
    last_request: Instant,
    requests: u64,
    /// The session's end (its runner ends it then), moved by session_set_timeout.
    ends_at: Instant,
    metadata: session_meta::Metadata,
    limits: session_meta::Limits,
    activity: session_meta::Activity,
}

/// A kind of pooled jail: cold or with a warm interpreter, or a session's.
#[derive(Clone, Copy, PartialEq, Eq)]
struct PoolKind {
    warm: Option<Warm>,
    for_session: bool,
}

struct Runner {
    pid: Pid,
    control: OwnedFd,
    reader: FrameReader,
    state: RunnerState,
    /// In the pool: not handed a job yet.
    pooled: bool,
    /// Its jail runs a warm interpreter, for that interpreter's requests only.
    warm: Option<Warm>,
    /// A session's jail: pooled for one (`pooled`), or serving it.
    for_session: bool,
    session: Option<SessionEntry>,
    /// Its end of the control socket closed: no longer polled (it stays listed until
    /// SIGCHLD reaps it).
    silent: bool,
    /// Busy with a run whose client has no answer yet: the pool's refill waits for it.
    answering: bool,
    /// Whose run or session it serves (its client's uid), for the per-uid shares.
    uid: Option<u32>,
}

impl Runner {
    /// In the pool of `kind` (ready or being assembled).
    fn in_pool(&self, kind: PoolKind) -> bool {
        self.pooled && self.warm == kind.warm && self.for_session == kind.for_session
    }

    /// In the pool of `kind` and ready for a request.
    fn ready_in(&self, kind: PoolKind) -> bool {
        self.in_pool(kind) && self.state == RunnerState::Ready
    }
}

const COLD: PoolKind = PoolKind {
    warm: None,
    for_session: false,
};
const SESSIONS: PoolKind = PoolKind {
    warm: None,
    for_session: true,
};

/// A connection whose request has not fully arrived.
struct Incoming {
    stream: UnixStream,
    reader: FrameReader,
    peer: Peer,
    since: Instant,
}

/// What a new runner is for.
enum Spawn {
    Pooled { warm: Option<Warm> },
    SessionPool,
    ForJob(Box<Job>, Vec<OwnedFd>),
    ForSession(Box<SessionStart>),
}

/// A checked request waiting for a runner.
struct Pending {
    job: Job,
    /// The connection, then the client's streams in `fds` mode.
    fds: Vec<OwnedFd>,
    pooled: bool,
    deadline: Instant,
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

/// A uid's share of `global` slots: as asked (0: no cap of its own), else half of them,
/// rounded up; never more than all.
fn share(asked: Option<usize>, global: usize) -> usize {
    match asked {
        Some(0) => global,
        Some(asked) => asked.min(global),
        None => global.div_ceil(2),
    }
}

/// Which cap a request meets: all slots taken, or its uid's share.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Full {
    All,
    Uid,
}

/// Whether one more slot (a running jail, an open session) may be taken: `in_use` of
/// `max` in all, `of_uid` of `per_uid` by the asking uid.
fn full(in_use: usize, of_uid: usize, max: usize, per_uid: usize) -> Option<Full> {
    if in_use >= max {
        Some(Full::All)
    } else if of_uid >= per_uid {
        Some(Full::Uid)
    } else {
        None
    }
}

/// Whether a uid holding `open` connections may open one more (`cap` 0: no cap).
fn may_connect(open: usize, cap: usize) -> bool {
    cap == 0 || open < cap
}

/// `brig serve`: serves until SIGTERM or SIGINT, then drains. The exit status.
pub fn serve(args: ServeArgs) -> Result<i32> {
    if args.status {
        return print_status(&args.socket);
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
    // The jails of a server that was killed (SIGKILL) are gone before this one serves.
    let placement = pool_plan.limits.placement.clone();
    if let Some(placement) = &placement {
        placement.remove_leftover_jails();
    }
    let listener = listen(&args.socket, group)?;
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
    // Runners killed past the drain's grace could not remove their jails' cgroups.
    if let Some(placement) = &placement {
        placement.remove_leftover_jails();
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
    Ok(plan)
}

/// Options a run gives its program; any other a client sets changes the jail's shape,
/// and the run gets a jail built for it instead of a pooled one.
const PER_RUN_OPTIONS: [&str; 5] = ["command", "env", "chdir", "time-limit", "quiet-limits"];

fn has_pool_shape(client: &JailOptions) -> bool {
    let value = serde_json::to_value(client).unwrap_or_default();
    value.as_object().is_some_and(|options| {
        options
            .keys()
            .all(|key| PER_RUN_OPTIONS.contains(&key.as_str()))
    })
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

/// A group name (from /etc/group: brig is static, without NSS) or number.
fn resolve_group(name: &str) -> Result<nix::unistd::Gid> {
    if let Ok(gid) = name.parse::<u32>() {
        return Ok(nix::unistd::Gid::from_raw(gid));
    }
    let groups = std::fs::read_to_string("/etc/group").unwrap_or_default();
    groups
        .lines()
        .map(|line| line.split(':').collect::<Vec<_>>())
        .find(|fields| fields.len() >= 3 && fields[0] == name)
        .and_then(|fields| fields[2].parse().ok())
        .map(nix::unistd::Gid::from_raw)
        .ok_or_else(|| {
            Error::input(format!(
                "--socket-group {name}: no such group in /etc/group; give a group name or number"
            ))
        })
}

/// Binds the socket: 0600, or 0660 for --socket-group. A socket left by a server that
/// died is replaced; one another server listens on is not.
///
/// Nothing is done to the socket by its final path after it appears there: a server
/// running as root that chmods or chowns the path would follow a symlink that someone
/// able to write the directory swapped in, and open a root-only file to the group. So
/// the socket is bound in a directory of brig's own (mode 0700, created next to the
/// path, so the rename stays on one filesystem), given its mode and group there, where
/// no one else can replace it, and renamed into place (RENAME_NOREPLACE: whatever
/// appeared at the path meanwhile is never overwritten). The directory itself must be
/// safe (see `check_socket_dir`), or the socket could be renamed away and replaced
/// after the server started.
fn listen(path: &Path, group: Option<nix::unistd::Gid>) -> Result<UnixListener> {
    let dir = match path.parent() {
        Some(dir) if !dir.as_os_str().is_empty() => dir,
        _ => Path::new("."),
    };
    check_socket_dir(path, dir)?;
    if let Ok(meta) = std::fs::symlink_metadata(path) {
        use std::os::unix::fs::FileTypeExt;
        if !meta.file_type().is_socket() {
            return Err(Error::input(format!(
                "--socket {}: exists and is not a socket; give another path",
                path.display()
            )));
        }
        if UnixStream::connect(path).is_ok() {
            return Err(Error::input(format!(
                "--socket {}: another brig serve listens there; stop it or give another path",
                path.display()
            )));
        }
        std::fs::remove_file(path)
            .context(|| format!("--socket {}: remove the stale socket", path.display()))?;
    }
    let mut random = [0u8; 8];
    std::io::Read::read_exact(
        &mut std::fs::File::open("/dev/urandom").context(|| "open /dev/urandom".into())?,
        &mut random,
    )
    .context(|| "read /dev/urandom".into())?;
    let private = dir.join(format!(".brig-bind-{:016x}", u64::from_ne_bytes(random)));
    nix::unistd::mkdir(&private, nix::sys::stat::Mode::S_IRWXU).map_err(|errno| {
        Error::input(format!(
            "--socket {}: cannot listen there: cannot create {}: {errno}; give a path in a writable directory",
            path.display(),
            private.display()
        ))
    })?;
    let bound = bind_privately(path, &private.join("socket"), group);
    let _ = std::fs::remove_file(private.join("socket"));
    let _ = std::fs::remove_dir(&private);
    let listener = bound?;
    listener
        .set_nonblocking(true)
        .context(|| "make the socket non-blocking".into())?;
    Ok(listener)
}

/// Binds at `inner`, in brig's private directory, and renames the socket to `path`.
fn bind_privately(
    path: &Path,
    inner: &Path,
    group: Option<nix::unistd::Gid>,
) -> Result<UnixListener> {
    // Created with no access for anyone else: no window where others connect.
    let old_umask = nix::sys::stat::umask(nix::sys::stat::Mode::from_bits_truncate(0o177));
    let bound = UnixListener::bind(inner);
    nix::sys::stat::umask(old_umask);
    let listener = bound.map_err(|err| {
        Error::input(format!(
            "--socket {}: cannot listen there: {err}; give a path in a writable directory",
            path.display()
        ))
    })?;
    if let Some(group) = group {
        // By path, but inside a 0700 directory of brig's: no one else can swap it.
        nix::unistd::fchownat(
            nix::fcntl::AT_FDCWD,
            inner,
            None,
            Some(group),
            nix::fcntl::AtFlags::AT_SYMLINK_NOFOLLOW,
        )
        .context(|| format!("--socket {}: give it to the group", path.display()))?;
        std::fs::set_permissions(inner, std::fs::Permissions::from_mode(0o660))
            .context(|| format!("--socket {}: chmod 0660", path.display()))?;
    }
    nix::fcntl::renameat2(
        nix::fcntl::AT_FDCWD,
        inner,
        nix::fcntl::AT_FDCWD,
        path,
        nix::fcntl::RenameFlags::RENAME_NOREPLACE,
    )
    .map_err(|errno| match errno {
        nix::errno::Errno::EEXIST => Error::input(format!(
            "--socket {}: something else appeared there while brig bound its socket; remove it or give another path",
            path.display()
        )),
        errno => Error::os(format!("--socket {}: move the socket into place", path.display()), errno),
    })?;
    Ok(listener)
}

/// The socket's directory, and each above it, must be safe from other users, as sshd's
/// StrictModes wants of a user's files: owned by root or the server's uid, and
/// writable by no one else, unless the sticky bit is set (as on /tmp): there no one
/// else can rename or remove the server's socket. Otherwise someone who can write
/// the directory (a member of its group, say the --socket-group) could rename the
/// socket away and put anything in its place while the server runs.
fn check_socket_dir(path: &Path, dir: &Path) -> Result<()> {
    use std::os::unix::fs::MetadataExt;
    let real = std::fs::canonicalize(dir).map_err(|err| {
        Error::input(format!(
            "--socket {}: its directory {}: {err}; give a path in an existing directory",
            path.display(),
            dir.display()
        ))
    })?;
    let own = nix::unistd::geteuid().as_raw();
    for ancestor in real.ancestors() {
        let Ok(meta) = std::fs::metadata(ancestor) else {
            continue;
        };
        let mode = meta.mode();
        let (problem, fix) = if meta.uid() != 0 && meta.uid() != own {
            (format!("is owned by uid {}", meta.uid()), "chown")
        } else if mode & 0o022 != 0 && mode & 0o1000 == 0 {
            let who = match (mode & 0o020 != 0, mode & 0o002 != 0) {
                (true, true) => format!("its group (gid {}) and all users", meta.gid()),
                (true, false) => format!("its group (gid {})", meta.gid()),
                _ => "all users".to_string(),
            };
            (
                format!("is writable by {who} (mode {:04o})", mode & 0o7777),
                "chmod go-w",
            )
        } else {
            continue;
        };
        return Err(Error::input(format!(
            "--socket {}: directory {} {problem}, who could replace the socket; give a path in a directory only root or uid {own} can write ({fix} {}, or a sticky one like /tmp)",
            path.display(),
            ancestor.display(),
            ancestor.display()
        )));
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
        let mut fds: Vec<nix::poll::PollFd> = Vec::new();
        let read = nix::poll::PollFlags::POLLIN;
        fds.push(nix::poll::PollFd::new(self.signals.as_fd(), read));
        if let Some(listener) = &self.listener {
            fds.push(nix::poll::PollFd::new(listener.as_fd(), read));
        }
        // Raw descriptors, to look the sources up again after poll borrowed them; a
        // runner by its pid too: handling one event may reap a runner and spawn another
        // whose control socket gets the same number, and must not be read (blocking) for
        // the first one's end.
        let runners: Vec<(Pid, i32)> = self
            .runners
            .iter()
            .filter(|runner| !runner.silent)
            .map(|runner| (runner.pid, runner.control.as_raw_fd()))
            .collect();
        let runner_fds: Vec<i32> = runners.iter().map(|(_, fd)| *fd).collect();
        let incoming_fds: Vec<i32> = self
            .incoming
            .iter()
            .map(|incoming| incoming.stream.as_raw_fd())
            .collect();
        for fd in runner_fds.iter().chain(&incoming_fds) {
            fds.push(nix::poll::PollFd::new(sys::borrow_fd(*fd), read));
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
        let ready: Vec<bool> = fds
            .iter()
            .map(|fd| fd.revents().is_some_and(|events| !events.is_empty()))
            .collect();
        let mut index = 0;
        if ready[index] {
            self.handle_signals();
        }
        index += 1;
        if self.listener.is_some() {
            if ready[index] {
                self.accept();
            }
            index += 1;
        }
        for (pid, _) in runners {
            if ready[index] {
                self.handle_runner(pid);
            }
            index += 1;
        }
        for fd in incoming_fds {
            if ready[index] {
                self.handle_incoming(fd);
            }
            index += 1;
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
        let draining = Error::setup(format!(
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
            if runner.state != RunnerState::Busy {
                let _ = nix::sys::socket::shutdown(
                    runner.control.as_raw_fd(),
                    nix::sys::socket::Shutdown::Both,
                );
                runner.silent = true;
                runner.pooled = false;
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
                match runner.state {
                    RunnerState::Busy => self.status.running -= 1,
                    RunnerState::Session => self.status.sessions -= 1,
                    _ => {}
                }
            }
            self.dispatch_queued();
        }
    }

    fn accept(&mut self) {
        let Some(listener) = &self.listener else {
            return;
        };
        while let Ok((stream, _)) = listener.accept() {
            let credentials =
                nix::sys::socket::getsockopt(&stream, nix::sys::socket::sockopt::PeerCredentials);
            let Ok(credentials) = credentials else {
                continue;
            };
            let peer = Peer {
                uid: credentials.uid(),
                gid: credentials.gid(),
                pid: credentials.pid(),
            };
            let admitted = self.admit(&peer).and_then(|()| {
                let open = self.connections_of(peer.uid);
                let cap = self.args.max_connections_per_uid;
                match may_connect(open, cap) {
                    true => Ok(()),
                    false => Err(Error::setup(format!(
                        "brig serve: uid {} has {open} connections waiting already (--max-connections-per-uid {cap}); close some or retry later",
                        peer.uid
                    ))),
                }
            });
            if let Err(err) = admitted {
                self.status.refused += 1;
                let _ = stream.set_nonblocking(false);
                refuse(&stream, &err);
                continue;
            }
            if stream.set_nonblocking(true).is_ok() {
                self.incoming.push(Incoming {
                    stream,
                    reader: FrameReader::default(),
                    peer,
                    since: Instant::now(),
                });
            }
        }
    }

    /// Root, the server's own uid, and with --socket-group that group's members.
    fn admit(&self, peer: &Peer) -> Result<()> {
        let own = nix::unistd::geteuid().as_raw();
        let in_group = self.group.is_some_and(|group| {
            peer.gid == group.as_raw() || supplementary_groups(peer.pid).contains(&group.as_raw())
        });
        if peer.uid == 0 || peer.uid == own || in_group {
            return Ok(());
        }
        Err(Error::input(format!(
            "brig serve: uid {} may not use this server (it runs as uid {own}); start it with --socket-group GROUP for a group of users",
            peer.uid
        )))
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
            } => {
                let asked = SessionAsk {
                    options: *options,
                    session_timeout,
                    idle_timeout,
                    workspace_size,
                    metadata,
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
            | Request::SessionSignal { .. }
            | Request::SessionKill { .. }
            | Request::SessionContext { .. }
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

    /// The request's options checked and layered on the server's defaults, and whether
    /// a pooled jail has its shape.
    fn check_run(
        &self,
        mut client: JailOptions,
        (stdio, stdin, origins): (StdioMode, Option<&str>, &policy::Origins),
        fds: &[OwnedFd],
        peer: Peer,
    ) -> Result<(Job, bool)> {
        match (stdio, fds.len()) {
            (StdioMode::Fds, 3) | (StdioMode::Capture, 0) => {}
            (StdioMode::Fds, count) => {
                return Err(Error::input(format!(
                    "brig serve: stdio \"fds\" needs 3 descriptors (stdin, stdout, stderr) with the request; it came with {count}"
                )));
            }
            (StdioMode::Capture, count) => {
                return Err(Error::input(format!(
                    "brig serve: stdio \"capture\" takes no descriptors; the request came with {count}"
                )));
            }
        }
        if stdin.is_some() && stdio == StdioMode::Fds {
            return Err(Error::input(
                "brig serve: \"stdin\" goes with stdio \"capture\"; with \"fds\" send the descriptor",
            ));
        }
        if stdio == StdioMode::Fds && !fds.iter().all(is_stream_or_file) {
            return Err(Error::input(
                "brig serve: the descriptors must be files, pipes, sockets or terminals",
            ));
        }
        if stdio == StdioMode::Capture
            && let Some(size) = client.output_limit
            && size.0 > protocol::MAX_CAPTURE
        {
            let most = crate::units::Size(protocol::MAX_CAPTURE);
            return Err(Error::input(format!(
                "output-limit {size}: captured output is at most {most} (stdio \"capture\"); ask for at most {most}, or send the program's streams (stdio \"fds\")"
            )));
        }
        // Where the verdict goes is the client's business.
        client.report = None;
        client.report_fd = None;
        client.audit_log = None;
        let pooled = has_pool_shape(&client);
        let options = self.defaults.clone().overlay(client.clone());
        // A pooled run is the pool's jail with its time limit; another is planned whole
        // here, so that a bad option is the client's one-line error before anything is
        // built. Either is held to the server's by the one policy check.
        let asked = if pooled {
            policy::Asked::Prepared(policy::Jail {
                time_limit: options.time_limit,
                ..policy::Jail::of(&self.pool_plan)
            })
        } else {
            policy::Asked::Built(Box::new(options.clone()))
        };
        let planned = policy::check(&client, origins, &self.policy(), asked)?;
        let (program, time_limit, config_digest) = match planned {
            None => (
                self.pooled_program(&options)?,
                options.time_limit,
                self.pool_digest.clone(),
            ),
            Some(plan) => (
                Program::of(&plan),
                plan.time_limit,
                crate::verdict::config_digest(&plan),
            ),
        };
        let job = Job {
            options,
            program,
            time_limit,
            config_digest,
            stdio,
            stdin: stdin.map(String::from),
            peer,
        };
        Ok((job, pooled))
    }

    /// What the server holds its clients to.
    fn policy(&self) -> policy::Server<'_> {
        policy::Server {
            options: &self.defaults,
            jail: policy::Jail::of(&self.pool_plan),
            may: &self.args.client_may,
            bind_under: &self.args.allow_bind_under,
            whose: "server",
        }
    }

    /// The program of a run in a pooled jail: as `Plan::resolve` would give it.
    fn pooled_program(&self, options: &JailOptions) -> Result<Program> {
        if options.command.is_empty() {
            return Err(Error::input(
                "no program to run: give one after the options, e.g. `brig run --server S -- python3 main.py`",
            ));
        }
        if options.time_limit.is_some_and(|limit| limit.0.is_zero()) {
            return Err(Error::input("--time-limit: must be longer than 0; e.g. 5s"));
        }
        let chdir = match &options.chdir {
            Some(dir) => crate::mount::jail_path("--chdir", &dir.to_string_lossy())?,
            None => self.pool_plan.chdir.clone(),
        };
        let program = Program {
            argv: options.command.clone(),
            env: crate::environment::resolve(options, &self.pool_plan.identity)?,
            chdir,
        };
        program.check()?;
        Ok(program)
    }

    /// Whether `runner`'s jail can take `pending`: any pooled jail a request of the pool's
    /// shape, a warm one only what its interpreter can serve as a cold start would.
    fn suits(runner: &Runner, pending: &Pending) -> bool {
        runner.pooled
            && !runner.for_session
            && pending.pooled
            && runner
                .warm
                .is_none_or(|warm| warm.serves(&pending.job.program))
    }

    /// The ready pooled runner for `pending`, a warm one first.
    fn ready_for(&self, pending: &Pending) -> Option<usize> {
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
    fn should_wait_for_pool(&self, pending: &Pending) -> bool {
        pending.pooled
            && self.ready_for(pending).is_none()
            && self.runners.iter().any(|runner| {
                runner.state == RunnerState::Assembling && Self::suits(runner, pending)
            })
    }

    fn dispatch(&mut self, pending: Pending) {
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
                if let Err(err) = self.spawn(Spawn::ForJob(Box::new(job), fds)) {
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
    fn ready_count(&self, kind: PoolKind) -> usize {
        self.runners
            .iter()
            .filter(|runner| runner.ready_in(kind))
            .count()
    }

    /// Opens a session: a pooled session jail when the client asks for the server's
    /// shape, else one built for it. The runner answers the client with the session's id.
    fn create_session(&mut self, stream: &UnixStream, asked: SessionAsk, peer: Peer) -> Result<()> {
        let SessionAsk {
            options: mut client,
            session_timeout,
            idle_timeout,
            workspace_size,
            metadata,
        } = asked;
        session_meta::check_metadata(&metadata)?;
        let of_uid = self
            .runners
            .iter()
            .filter_map(|runner| runner.session.as_ref())
            .filter(|session| session.owner.uid == peer.uid)
            .count();
        let (max, per_uid) = (self.args.max_sessions, self.sessions_per_uid);
        match full(self.status.sessions, of_uid, max, per_uid) {
            Some(Full::All) => {
                return Err(Error::setup(format!(
                    "brig serve: {} sessions are open (--max-sessions); close one or retry later",
                    self.status.sessions
                )));
            }
            Some(Full::Uid) => {
                return Err(Error::setup(format!(
                    "brig serve: uid {} has {of_uid} sessions open, its share (--max-sessions-per-uid {per_uid}); close one or retry later",
                    peer.uid
                )));
            }
            None => {}
        }
        let within = |field: &str, asked: Option<crate::units::Span>, ours: crate::units::Span| {
            match asked {
                Some(asked) if asked.0.is_zero() => Err(Error::input(format!(
                    "{field}: must be longer than 0; e.g. 10m"
                ))),
                Some(asked) if asked.0 > ours.0 => Err(Error::input(format!(
                    "{field} {asked}: longer than this server allows ({ours}); ask for at most {ours}"
                ))),
                asked => Ok(asked.unwrap_or(ours).0),
            }
        };
        let session_timeout = within(
            "session_timeout",
            session_timeout,
            self.args.session_timeout,
        )?;
        let idle_timeout = within("idle_timeout", idle_timeout, self.args.idle_timeout)?;
        if !client.command.is_empty() {
            return Err(Error::input(
                "session_create: options take no \"command\"; run programs with session_exec",
            ));
        }
        client.report = None;
        client.report_fd = None;
        client.audit_log = None;
        let pooled = workspace_size.is_none()
            && serde_json::to_value(&client)
                .ok()
                .and_then(|value| value.as_object().map(|object| object.is_empty()))
                .unwrap_or(false);
        client.home_size = workspace_size.or(client.home_size);
        // A session's workspace_size is its jail's --home-size.
        let origins: policy::Origins = workspace_size
            .map(|_| ("home-size".to_string(), "workspace_size".to_string()))
            .into_iter()
            .collect();
        let options = self.defaults.clone().overlay(client.clone());
        let asked = if pooled {
            policy::Asked::Prepared(policy::Jail::of(&self.session_plan))
        } else {
            policy::Asked::Built(Box::new(with_placeholder(options.clone())))
        };
        let planned = policy::check(&client, &origins, &self.policy(), asked)?;
        let mut id_bytes = [0u8; 16];
        std::io::Read::read_exact(
            &mut std::fs::File::open("/dev/urandom").context(|| "open /dev/urandom".into())?,
            &mut id_bytes,
        )
        .context(|| "read /dev/urandom".into())?;
        let id: String = id_bytes.iter().map(|byte| format!("{byte:02x}")).collect();
        let mut opening = Opening {
            id,
            owner: peer,
            session_timeout_ms: session_timeout.as_millis() as u64,
            idle_timeout_ms: idle_timeout.as_millis() as u64,
            drain_grace_ms: self.args.drain_grace.0.as_millis() as u64,
            metadata,
            limits: session_meta::Limits::default(),
        };
        let connection = OwnedFd::from(
            stream
                .try_clone()
                .context(|| "keep the client's connection".into())?,
        );
        let ready = self
            .runners
            .iter()
            .position(|runner| runner.ready_in(SESSIONS));
        match ready {
            Some(at) if pooled => {
                opening.limits = session_meta::Limits::of(&self.session_plan, idle_timeout);
                let runner = &mut self.runners[at];
                let entry = SessionEntry::of(&opening);
                let open = ToSession::Open(opening);
                protocol::write_frame(runner.control.as_fd(), &open, &[connection.as_fd()])?;
                runner.pooled = false;
                runner.state = RunnerState::Session;
                runner.session = Some(entry);
                self.count_ready();
            }
            _ => {
                let mut plan = match planned {
                    Some(plan) => plan,
                    None => Plan::resolve(with_placeholder(options.clone()))?,
                };
                plan.limits.cgroup.oom_kills_one = true;
                opening.limits = session_meta::Limits::of(&plan, idle_timeout);
                let start = SessionStart {
                    plan,
                    options,
                    opening,
                    connection,
                };
                self.spawn(Spawn::ForSession(Box::new(start)))?;
            }
        }
        self.status.sessions += 1;
        Ok(())
    }

    /// Hands a request to its session's runner, which answers the client. The request
    /// goes in a memfd: what the server writes to a busy runner stays a few bytes.
    fn route_to_session(
        &mut self,
        stream: &UnixStream,
        request: &Request,
        body: &[u8],
        peer: Peer,
    ) -> Result<()> {
        let id = request.session().unwrap_or_default();
        let gone = || {
            Error::input(format!(
                "brig serve: no session {id} (closed, expired or never created)"
            ))
        };
        let runner = self
            .runners
            .iter_mut()
            .find(|runner| {
                runner
                    .session
                    .as_ref()
                    .is_some_and(|session| session.id == id)
            })
            .ok_or_else(gone)?;
        let session = runner.session.as_mut().expect("found");
        if peer.uid != session.owner.uid && peer.uid != 0 {
            return Err(Error::input(format!(
                "brig serve: session {id} belongs to another user (uid {}); use your own",
                session.owner.uid
            )));
        }
        super::session::check_request(request)?;
        let memfd =
            nix::sys::memfd::memfd_create(c"brig-request", nix::sys::memfd::MFdFlags::MFD_CLOEXEC)
                .context(|| "create a memfd for a session's request".into())?;
        std::io::Write::write_all(
            &mut std::fs::File::from(memfd.try_clone().context(|| "dup".into())?),
            body,
        )
        .context(|| "write a session's request".into())?;
        let connection = stream
            .try_clone()
            .context(|| "keep the client's connection".into())?;
        let frame = ToSession::Request { peer };
        // Non-blocking: a runner that stopped reading must not stop the server.
        let _ = nix::fcntl::fcntl(
            &runner.control,
            nix::fcntl::FcntlArg::F_SETFL(nix::fcntl::OFlag::O_NONBLOCK),
        );
        protocol::write_frame(
            runner.control.as_fd(),
            &frame,
            &[connection.as_fd(), memfd.as_fd()],
        )
        .map_err(|err| match err.errno() {
            Some(nix::errno::Errno::EAGAIN) => Error::setup(format!(
                "brig serve: session {id} has too many requests waiting; retry once its current one is answered"
            )),
            _ => gone(),
        })?;
        session.last_request = Instant::now();
        session.requests += 1;
        if let Request::SessionSetTimeout { timeout, .. } = request {
            session.ends_at = Instant::now() + timeout.0;
        }
        session.activity.routed(memfd);
        Ok(())
    }

    /// What the server checks of a session request before its runner sees it, beyond
    /// its owner (`route_to_session`): a new network by the server's policy, a new end
    /// against its --session-timeout.
    fn admit_to_session(&self, request: &Request, peer: &Peer) -> Result<()> {
        let id = request.session().unwrap_or_default();
        // Another uid's session: route_to_session refuses it, before these checks say
        // anything about the server's policy.
        let owned = self
            .runners
            .iter()
            .filter_map(|runner| runner.session.as_ref())
            .find(|session| session.id == id && (session.owner.uid == peer.uid || peer.uid == 0));
        let Some(session) = owned else {
            return Ok(());
        };
        match request {
            Request::SessionNetwork { .. }
                if session.limits.net != crate::options::NetMode::Filtered =>
            {
                Err(session_network::fixed(id, session.limits.net))
            }
            Request::SessionNetwork {
                allow_net,
                add_host,
                ..
            } => {
                let client = session_network::asked_options(allow_net, add_host);
                let planned = with_placeholder(self.defaults.clone().overlay(client.clone()));
                session_network::check(&client, &self.policy(), planned)
            }
            Request::SessionSetTimeout { timeout, .. } => {
                session_meta::check_timeout(*timeout, self.args.session_timeout).map(|_| ())
            }
            _ => Ok(()),
        }
    }

    /// The peer's sessions (all of them for root and the server's own uid).
    fn list_sessions(&mut self, peer: &Peer, filter: &session_meta::Metadata) -> serde_json::Value {
        let own = nix::unistd::geteuid().as_raw();
        let sessions: Vec<serde_json::Value> = self
            .runners
            .iter_mut()
            .filter_map(|runner| runner.session.as_mut())
            .filter(|session| peer.uid == 0 || peer.uid == own || peer.uid == session.owner.uid)
            .filter(|session| session_meta::matches(&session.metadata, filter))
            .map(|session| {
                let (busy, last_done) = session.activity.state();
                // Idle since its last request was answered (or routed, if later); a busy
                // session has no idle deadline running.
                let idle_since = session_meta::unix_ms(session.last_request)
                    .max(last_done.map_or(0, session_meta::wall_ms));
                let idle_deadline = (!busy).then(|| idle_since + session.limits.idle_timeout_ms);
                serde_json::json!({
                    "session": session.id,
                    "uid": session.owner.uid,
                    "metadata": session.metadata,
                    "state": if busy { "busy" } else { "idle" },
                    "created_at_ms": session_meta::wall_ms(session.created_at),
                    "ends_at_ms": session_meta::unix_ms(session.ends_at),
                    "idle_deadline_ms": idle_deadline,
                    "limits": session.limits,
                    "age_ms": session.created.elapsed().as_millis() as u64,
                    "idle_ms": session.last_request.elapsed().as_millis() as u64,
                    "requests": session.requests,
                })
            })
            .collect();
        serde_json::json!({"type": "sessions", "sessions": sessions})
    }

    fn count_ready(&mut self) {
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
    fn backoff(&self) -> Option<Duration> {
        let beyond = self
            .failures_in_a_row
            .checked_sub(FAILURES_BEFORE_BACKOFF)?;
        Some(BACKOFF.saturating_mul(1 << beyond.min(6)).min(MAX_BACKOFF))
    }

    /// Keeps --pool cold, --warm-python and --warm-node warm jails and --session-pool
    /// session jails assembling or ready, unless
    /// draining or backing off.
    fn refill_pool(&mut self) {
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
                    true => Spawn::SessionPool,
                    false => Spawn::Pooled { warm: kind.warm },
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
    fn spawn(&mut self, what: Spawn) -> Result<()> {
        use nix::sys::socket::{AddressFamily, SockFlag, SockType, socketpair};
        let (control, runner_end) = socketpair(
            AddressFamily::Unix,
            SockType::Stream,
            None,
            SockFlag::SOCK_CLOEXEC,
        )
        .context(|| "create a socket pair for a runner".into())?;
        let (pooled, warm, for_session) = match &what {
            Spawn::Pooled { warm } => (true, *warm, false),
            Spawn::SessionPool => (true, None, true),
            Spawn::ForJob(..) => (false, None, false),
            Spawn::ForSession(..) => (false, None, true),
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
                    Spawn::ForJob(_, fds) => keep.extend(fds.iter().map(AsRawFd::as_raw_fd)),
                    Spawn::ForSession(start) => keep.push(start.connection.as_raw_fd()),
                    _ => {}
                }
                let _ = crate::fds::close_inherited(&keep);
                let _ = sigprocmask(SigmaskHow::SIG_SETMASK, Some(&SigSet::empty()), None);
                let audit_log = self.defaults.audit_log.clone();
                let start = match what {
                    Spawn::Pooled { warm: None } => Start::Pooled(&self.pool_plan),
                    Spawn::Pooled { warm: Some(warm) } => Start::Warm(&self.pool_plan, warm),
                    Spawn::ForJob(job, fds) => Start::ForJob(job, fds),
                    Spawn::SessionPool => Start::SessionPool(&self.session_plan, &self.defaults),
                    Spawn::ForSession(start) => Start::Session(start),
                };
                runner::main(runner_end, start, audit_log);
            }
            Some(pid) => {
                let answering = matches!(what, Spawn::ForJob(..));
                let uid = match &what {
                    Spawn::ForJob(job, _) => Some(job.peer.uid),
                    Spawn::ForSession(start) => Some(start.opening.owner.uid),
                    _ => None,
                };
                let (state, session) = match what {
                    _ if pooled => (RunnerState::Assembling, None),
                    Spawn::ForSession(start) => {
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
    fn handle_runner(&mut self, pid: Pid) -> bool {
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
    fn dispatch_queued(&mut self) {
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

    /// Whether a run of `uid` meets a cap now.
    fn full_for(&self, uid: u32) -> Option<Full> {
        let of_uid = self
            .runners
            .iter()
            .filter(|runner| runner.state == RunnerState::Busy && runner.uid == Some(uid))
            .count();
        full(
            self.status.running,
            of_uid,
            self.args.max_jails,
            self.jails_per_uid,
        )
    }

    /// Whether `pending` may start now: a slot free for its uid, and no pooled jail of
    /// its kind about to be ready.
    fn may_start(&self, pending: &Pending) -> bool {
        self.full_for(pending.job.peer.uid).is_none() && !self.should_wait_for_pool(pending)
    }

    /// The connections of `uid` the server holds: requests being sent or waiting.
    fn connections_of(&self, uid: u32) -> usize {
        let incoming = self
            .incoming
            .iter()
            .filter(|incoming| incoming.peer.uid == uid)
            .count();
        let queued = self
            .queue
            .iter()
            .filter(|pending| pending.job.peer.uid == uid)
            .count();
        incoming + queued
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
        while let Some(at) = self
            .queue
            .iter()
            .position(|pending| pending.deadline <= now)
        {
            let pending = self.queue.remove(at).expect("found");
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
            refuse(&pending.fds[0], &Error::setup(message));
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
                runner.silent = true;
                if kill {
                    let _ = nix::sys::signal::kill(runner.pid, Signal::SIGKILL);
                }
            }
        }
    }
}

/// What a `session_create` asks for.
struct SessionAsk {
    options: JailOptions,
    session_timeout: Option<crate::units::Span>,
    idle_timeout: Option<crate::units::Span>,
    workspace_size: Option<crate::units::Size>,
    metadata: session_meta::Metadata,
}

impl SessionEntry {
    fn of(opening: &Opening) -> SessionEntry {
        SessionEntry {
            id: opening.id.clone(),
            owner: opening.owner,
            created: Instant::now(),
            created_at: std::time::SystemTime::now(),
            last_request: Instant::now(),
            requests: 0,
            ends_at: Instant::now() + Duration::from_millis(opening.session_timeout_ms),
            metadata: opening.metadata.clone(),
            limits: opening.limits.clone(),
            activity: session_meta::Activity::default(),
        }
    }
}

/// Answers a request with one error frame (the connection then closes).
fn refuse(connection: &impl AsFd, error: &Error) {
    let _ = protocol::write_frame(connection.as_fd(), &Reply::error(error), &[]);
}

/// Files, pipes, sockets and terminals may become a program's streams; not directories,
/// epoll or event descriptors, or other exotica a client might send.
fn is_stream_or_file(fd: &OwnedFd) -> bool {
    use nix::sys::stat::SFlag;
    let Ok(stat) = nix::sys::stat::fstat(fd) else {
        return false;
    };
    let kind = SFlag::from_bits_truncate(stat.st_mode) & SFlag::S_IFMT;
    if kind == SFlag::S_IFDIR {
        return false;
    }
    // Anonymous inodes (epoll, eventfd, signalfd, pidfd) have no file type bits we want.
    let link = std::fs::read_link(format!("/proc/self/fd/{}", fd.as_raw_fd())).unwrap_or_default();
    !link.to_string_lossy().starts_with("anon_inode:")
}

/// The supplementary groups of process `pid`, from /proc.
fn supplementary_groups(pid: i32) -> Vec<u32> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    status
        .lines()
        .find_map(|line| line.strip_prefix("Groups:"))
        .map(|groups| {
            groups
                .split_whitespace()
                .filter_map(|gid| gid.parse().ok())
                .collect()
        })
        .unwrap_or_default()
}

/// `brig serve --status`: asks the server on `socket` and prints its answer as YAML.
fn print_status(socket: &Path) -> Result<i32> {
    let stream = super::client::connect(socket)?;
    protocol::write_frame(
        stream.as_fd(),
        &serde_json::json!({"brig": protocol::VERSION, "type": "status"}),
        &[],
    )?;
    let (body, _) = FrameReader::default()
        .read_blocking(&stream)?
        .ok_or_else(|| {
            Error::setup("brig serve --status: the server closed the connection without an answer")
        })?;
    match serde_json::from_slice::<Reply>(&body) {
        Ok(Reply::Status(status)) => {
            let yaml = serde_saphyr::to_string(&status)
                .map_err(|err| Error::setup(format!("print the status: {err}")))?;
            print!("{yaml}");
            Ok(0)
        }
        Ok(Reply::Error { message, .. }) => Err(Error::setup(message)),
        _ => Err(Error::setup(
            "brig serve --status: an answer that is not a status",
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_uid_gets_its_share_of_the_slots() {
        // (asked, global) -> share
        for (asked, global, expected) in [
            (None, 64, 32),
            (None, 32, 16),
            (None, 1, 1),
            (None, 3, 2),
            (Some(0), 64, 64),
            (Some(5), 64, 5),
            (Some(100), 64, 64),
            (Some(64), 64, 64),
        ] {
            assert_eq!(share(asked, global), expected, "{asked:?} of {global}");
        }
    }

    #[test]
    fn a_slot_is_taken_within_the_global_cap_and_the_uids_share() {
        // (in use, of the uid, max, per uid) -> which cap is met
        for (in_use, of_uid, max, per_uid, expected) in [
            (0, 0, 64, 32, None),
            (31, 31, 64, 32, None),
            (32, 32, 64, 32, Some(Full::Uid)),
            (40, 2, 64, 32, None),
            (64, 2, 64, 32, Some(Full::All)),
            (64, 32, 64, 32, Some(Full::All)),
            (0, 0, 1, 1, None),
            (1, 1, 1, 1, Some(Full::All)),
            (1, 0, 2, 1, None),
            (1, 1, 2, 1, Some(Full::Uid)),
        ] {
            assert_eq!(
                full(in_use, of_uid, max, per_uid),
                expected,
                "{in_use} in use, {of_uid} of the uid, max {max}, {per_uid} per uid"
            );
        }
    }

    #[test]
    fn connections_are_capped_per_uid() {
        for (open, cap, expected) in [
            (0, 64, true),
            (63, 64, true),
            (64, 64, false),
            (1000, 64, false),
            (1000, 0, true),
        ] {
            assert_eq!(may_connect(open, cap), expected, "{open} open, cap {cap}");
        }
    }
}
