//! A session's runner: a process the server forks for one session, which owns the
//! session's jail ([`SessionJail`]) for its whole life and serves its requests in one
//! event loop (`session_loop.rs`): commands, code cells in persistent interpreters
//! (`session_python.py`, `session_node.js`, `session_bash.sh`; `session/cell.rs`), and
//! files in the workspace (`workspace.rs`). The server hands it each request with the
//! client's connection; the runner answers the client itself. It
//! ends the session on `session_close`, after `idle_timeout` without a request, at
//! `session_timeout`, or when the server goes away; the jail goes with it, whole.

mod cell;
mod context;
mod lines;
mod starting;

use super::kernel::{self, Syscall};
use super::metrics::SessionCounters;
use super::policy;
use super::protocol::{self, FrameReader, Language, Request};
use super::reply::{self, FileEntry, SessionReply};
use super::runner_common::{self, dev_null, pipe};
use super::wire::{DRAINING, Opening, Report, ToSession};
use super::workspace::{self, Workspace};
use crate::error::{Error, Result};
use crate::jail::outcome::{self, EndedBy, ProgramEnd, Spent};
use crate::jail::session::{Ended, Event};
use crate::jail::{Captured, Outcome, Output, Program, RunReport, SessionJail};
use crate::options::JailOptions;
use crate::plan::Plan;
use crate::units::Span;
use crate::verdict::{Peer, RunContext, SessionExec, Sinks, Verdict};
use base64::Engine;
use nix::poll::{PollFd, PollFlags, PollTimeout};
use nix::sys::signal::Signal;
use serde::{Deserialize, Serialize};
use std::collections::HashMap;
use std::io::{Read, Write};
use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::net::UnixStream;
use std::path::PathBuf;
use std::time::{Duration, Instant};

#[path = "session_lifecycle.rs"]
mod session_lifecycle;
#[path = "session_loop.rs"]
mod session_loop;
#[path = "session_process.rs"]
mod session_process;
#[path = "session_pty.rs"]
mod session_pty;
#[path = "session_watch_stream.rs"]
mod session_watch_stream;

pub(super) use session_process::Listener;

/// The one-line error for an exec that is neither a command nor a cell.
const EXEC_FORM: &str =
    "session_exec: give either \"command\" (an argv) or \"code\" (with \"language\")";
/// How long an interpreter has to start and say it is ready.
const STARTUP: Duration = Duration::from_secs(30);
/// How long an interrupted cell has to come back (from the end of the sweep) before its
/// interpreter is killed: long enough for a machine under load, short for a cell that
/// swallows the interrupt.
const INTERRUPT_GRACE: Duration = Duration::from_secs(5);
/// How often brig looks, at first and at most, whether an interpreter that replied is
/// back waiting for its next request (doubling in between).
const CONFIRM_FIRST: Duration = Duration::from_micros(100);
const CONFIRM_MOST: Duration = Duration::from_millis(10);

const PYTHON_SCRIPT: &str = include_str!("session_python.py");
const PYTHON_LAUNCH: &str = "import sys; exec(compile(sys.argv[1], '<brig-session>', 'exec'))";
const NODE_SCRIPT: &str = include_str!("session_node.js");
const BASH_SCRIPT: &str = include_str!("session_bash.sh");
/// The longest line brig reads from an interpreter: a reply with its rich results (which
/// count against the exec's output limit, at most [`protocol::MAX_CAPTURE`], and may
/// double as JSON escapes them). A longer line breaks the protocol.
pub const MAX_INTERPRETER_LINE: usize = 2 * protocol::MAX_CAPTURE as usize + (1 << 20);

/// The request's frame from the memfd the server wrote it to.
fn read_request(memfd: &OwnedFd) -> Option<Vec<u8>> {
    let mut body = Vec::new();
    let mut file = std::fs::File::from(memfd.try_clone().ok()?);
    std::io::Seek::seek(&mut file, std::io::SeekFrom::Start(0)).ok()?;
    file.take(protocol::MAX_FRAME as u64)
        .read_to_end(&mut body)
        .ok()?;
    Some(body)
}

/// A pooled session runner: assemble, start Python, wait for a session to serve.
pub fn pooled(
    control: &OwnedFd,
    plan: &Plan,
    options: &JailOptions,
    audit_log: Option<&PathBuf>,
) -> i32 {
    let jail = match SessionJail::assemble(plan) {
        Ok(jail) => jail,
        Err(err) => return runner_common::report_failed(control, &err),
    };
    let mut session = Session::new(jail, options.clone(), audit_log.cloned());
    // A pool's session answers its first cell at once; a jail without Python still serves
    // commands and files.
    let _ = session.start_context(&context::Target::default_of(Language::Python));
    if protocol::write_frame(control.as_fd(), &Report::Ready, &[]).is_err() {
        return 0;
    }
    let Ok(Some((body, mut fds))) = FrameReader::default().read_blocking(control) else {
        return 0;
    };
    let (Ok(ToSession::Open(opening)), false) =
        (serde_json::from_slice::<ToSession>(&body), fds.is_empty())
    else {
        return 1;
    };
    session.serve(control, opening, fds.remove(0));
    0
}

/// A session of its own shape: assemble its jail, then serve it.
pub fn for_create(
    control: &OwnedFd,
    plan: &Plan,
    options: JailOptions,
    opening: Opening,
    connection: OwnedFd,
    audit_log: Option<&PathBuf>,
) -> i32 {
    match SessionJail::assemble(plan) {
        Ok(jail) => {
            let _ = protocol::write_frame(control.as_fd(), &Report::Built, &[]);
            Session::new(jail, options, audit_log.cloned()).serve(control, opening, connection);
            0
        }
        Err(err) => runner_common::answer_error(&[connection], &err),
    }
}

/// A running interpreter: its program's id in the jail, its socket and output pipes.
struct Interpreter {
    id: u32,
    /// Its pid as this runner sees it: the sender of its "ready", as the kernel said.
    pid: Option<u32>,
    /// What its main thread is blocked in while it waits for its next request.
    idle: Idle,
    control: UnixStream,
    /// What arrived on `control` beyond the last whole line (at most
    /// [`MAX_INTERPRETER_LINE`] of a line).
    lines: lines::LineBuffer,
    /// Another process wrote to `control` (a cell's child holding the descriptor): its pid.
    stranger: Option<u32>,
    stdout: OwnedFd,
    stderr: OwnedFd,
    cells: u64,
}

/// The system call an interpreter's main thread waits for a request in: Python reads its
/// control socket (descriptor 3); Node's event loop waits on its epoll descriptor, which
/// brig learns when the interpreter is ready (a cell's own loop, as execSync's, has another).
#[derive(Clone, Copy, PartialEq)]
enum Idle {
    /// In a read of descriptor 3, which must still be its end of the socket pair (this
    /// inode): not a pipe a cell put in its place.
    Receive(u64),
    /// In an epoll wait on this descriptor, which must watch the socket (this inode): the
    /// event loop's, not one a cell made (as execSync's).
    Epoll(Option<u64>, u64),
}

/// An interpreter's reply to a cell: data only (its result, error, rich results, and a
/// bash cell's exit status). Anything else on the control descriptor breaks the protocol.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct CellReply {
    id: u64,
    #[serde(default)]
    result: Option<String>,
    #[serde(default)]
    error: Option<CellError>,
    /// Mime bundles (`context::check_bundle`).
    #[serde(default)]
    results: Vec<reply::Bundle>,
    /// Results the interpreter dropped to keep its reply within its bound.
    #[serde(default)]
    results_dropped: u64,
    /// Bash: the status of the cell's last command.
    #[serde(default)]
    exit_code: Option<u8>,
}

#[derive(Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
struct CellError {
    #[serde(rename = "type")]
    kind: String,
    message: String,
    traceback: String,
}

impl From<CellError> for reply::CellError {
    fn from(error: CellError) -> reply::CellError {
        reply::CellError {
            kind: error.kind,
            message: error.message,
            traceback: error.traceback,
        }
    }
}

/// An interpreter's first line: it is ready for cells.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Ready {
    ready: bool,
}

/// Whether `line` is an interpreter's `{"ready": true}`.
fn is_ready(line: &[u8]) -> bool {
    object_line::<Ready>(line).is_some_and(|line| line.ready)
}

/// A line of an interpreter's as `T`: one JSON object with `T`'s fields (serde would take
/// an array of the values in order too, which no interpreter sends).
fn object_line<T: serde::de::DeserializeOwned>(line: &[u8]) -> Option<T> {
    let object = line.trim_ascii_start().starts_with(b"{");
    object.then(|| serde_json::from_slice(line).ok()).flatten()
}

/// The reply to cell `cell` in `line` (at most [`MAX_INTERPRETER_LINE`] bytes, as
/// [`Interpreter::next_line`] keeps them), or why the line is not one.
fn cell_reply(
    line: &[u8],
    cell: u64,
    language: Language,
) -> std::result::Result<CellReply, String> {
    let reply: CellReply = object_line(line).ok_or_else(|| {
        "a line on its control descriptor that is not a well-formed reply".to_string()
    })?;
    if reply.id != cell {
        return Err(format!(
            "a reply with the wrong id ({} where the cell's is {cell})",
            reply.id
        ));
    }
    for bundle in &reply.results {
        context::check_bundle(bundle)?;
    }
    // A status is a shell's to give; Python's and Node's come from their error.
    if reply.exit_code.is_some() && language != Language::Bash {
        return Err("a reply with an exit_code, which only bash's carry".into());
    }
    Ok(reply)
}

struct Session<'p> {
    jail: SessionJail<'p>,
    options: JailOptions,
    audit_log: Option<PathBuf>,
    id: String,
    /// The running interpreters, by context id (`context.rs`).
    interpreters: HashMap<String, Interpreter>,
    /// The contexts created by `session_context`, by id (the default ones are not here).
    contexts: std::collections::BTreeMap<String, context::Context>,
    /// The number of the next context created.
    next_context: u64,
    /// Every timeout holds by brig's clock, whatever runs and whatever the client does:
    /// the session's end (session_timeout), ...
    ends_at: Option<Instant>,
    /// ... the server's control socket, which the server shuts when it drains (watched
    /// during a request too), ...
    control: Option<OwnedFd>,
    drain_grace: Duration,
    /// ... and then the end of the drain's grace.
    drain_by: Option<Instant>,
    /// Why the session ended while it served a request.
    ended: Option<&'static str>,
    /// Its directory watchers (`watch.rs`).
    watches: super::watch::Watches,
    /// The programs the session's loop watches (commands, background processes).
    processes: session_loop::Processes,
    /// Its cells, running and waiting (`session/cell.rs`).
    cells: cell::Cells,
    /// Paused or not, and its CPU readings (`session_lifecycle.rs`).
    lifecycle: session_lifecycle::Lifecycle,
    /// Its OOM kills and network bytes as last told to the server (`metrics.rs`).
    counted: SessionCounters,
}

/// Why an exec ended early.
#[derive(Clone, Copy, PartialEq)]
enum Cut {
    TimeLimit,
    OutputLimit,
    /// The client went away: nobody waits for the result.
    ClientGone,
    /// The session was closed (or a cell's context restarted or removed) while it ran.
    Stopped,
}

impl Cut {
    /// What brig ended the exec for, as the one outcome decision takes it: a client gone
    /// stops it (the program's own word, else killed), as a pooled run's.
    fn ended_by(cut: Option<Cut>) -> EndedBy {
        match cut {
            None => EndedBy::Program,
            Some(Cut::TimeLimit) => EndedBy::TimeLimit,
            Some(Cut::OutputLimit) => EndedBy::OutputLimit,
            Some(Cut::ClientGone | Cut::Stopped) => EndedBy::Stopped,
        }
    }
}

fn nonblocking(fd: &impl AsFd) {
    let _ = nix::fcntl::fcntl(
        fd,
        nix::fcntl::FcntlArg::F_SETFL(nix::fcntl::OFlag::O_NONBLOCK),
    );
}

/// Milliseconds left until `deadline`, rounded up, for poll.
fn poll_timeout(deadline: Option<Instant>) -> PollTimeout {
    match deadline {
        None => PollTimeout::NONE,
        Some(at) => {
            let left = at.saturating_duration_since(Instant::now());
            PollTimeout::try_from(left.as_micros().div_ceil(1000).min(i32::MAX as u128) as i32)
                .unwrap_or(PollTimeout::MAX)
        }
    }
}

/// What to poll the server's control socket for: nothing it sends (a request may wait
/// there), only its hang-up, which poll always reports (POLLHUP: the server shut the
/// socket down both ways, draining, or closed it).
fn hang_up() -> PollFlags {
    PollFlags::empty()
}

/// Whether the peer of `socket` shut it down or closed it (the server, draining or gone).
fn hung_up(socket: &OwnedFd) -> bool {
    let mut fds = [PollFd::new(socket.as_fd(), hang_up())];
    let _ = nix::poll::poll(&mut fds, PollTimeout::ZERO);
    fds[0]
        .revents()
        .is_some_and(|events| events.intersects(PollFlags::POLLHUP | PollFlags::POLLERR))
}

/// The sooner of two deadlines.
fn sooner(one: Option<Instant>, other: Option<Instant>) -> Option<Instant> {
    match (one, other) {
        (Some(one), Some(other)) => Some(one.min(other)),
        (one, other) => one.or(other),
    }
}

/// Whether the client hung up (or sent something, which a session request never does).
fn client_gone(connection: &OwnedFd) -> bool {
    let mut fds = [PollFd::new(connection.as_fd(), PollFlags::POLLIN)];
    nix::poll::poll(&mut fds, PollTimeout::ZERO).is_ok_and(|ready| ready > 0)
}

impl<'p> Session<'p> {
    fn new(jail: SessionJail<'p>, options: JailOptions, audit_log: Option<PathBuf>) -> Session<'p> {
        Session {
            jail,
            options,
            audit_log,
            id: String::new(),
            interpreters: HashMap::new(),
            contexts: std::collections::BTreeMap::new(),
            next_context: 1,
            ends_at: None,
            control: None,
            drain_grace: Duration::ZERO,
            drain_by: None,
            ended: None,
            watches: Default::default(),
            processes: session_loop::Processes::default(),
            cells: cell::Cells::default(),
            lifecycle: Default::default(),
            counted: SessionCounters::default(),
        }
    }

    /// Tells the server the session's OOM kills and network bytes so far, when they grew
    /// since it last told (the server keeps the totals, ended sessions included).
    fn report_counters(&mut self) {
        let (net_bytes_sent, net_bytes_received) = self.jail.network_bytes();
        let now = SessionCounters {
            oom_kills: self.oom_kills(),
            net_bytes_sent,
            net_bytes_received,
        };
        if now == self.counted {
            return;
        }
        let Some(control) = &self.control else {
            return;
        };
        if protocol::write_frame(control.as_fd(), &Report::Counters(now), &[]).is_ok() {
            self.counted = now;
        }
    }

    /// When the session must end: its session_timeout, or the drain's grace.
    fn end_by(&self) -> Option<Instant> {
        sooner(self.ends_at, self.drain_by)
    }

    /// Whether the session has come to its end while it serves a request (and why,
    /// in `ended`): its session_timeout, or the drain's grace, which starts when the
    /// server shuts the control socket.
    fn over(&mut self) -> bool {
        if self.drain_by.is_none() && self.control.as_ref().is_some_and(hung_up) {
            self.drain_by = Some(Instant::now() + self.drain_grace);
        }
        let now = Instant::now();
        if self.ended.is_none() {
            // A paused session's end moves with the clock: it is never reached.
            if self.ends_at.is_some_and(|at| now >= at) && !self.lifecycle.paused() {
                self.ended = Some("it reached its session_timeout");
            } else if self.drain_by.is_some_and(|at| now >= at) {
                self.ended = Some(DRAINING);
            }
        }
        self.ended.is_some()
    }

    fn plan(&self) -> &'p Plan {
        self.jail.plan()
    }

    /// Serves the session until it ends, then ends its jail.
    fn serve(mut self, control: &OwnedFd, opening: Opening, connection: OwnedFd) {
        let Opening {
            id,
            session_timeout_ms,
            idle_timeout_ms,
            drain_grace_ms,
            ..
        } = opening;
        self.id = id;
        self.control = control.try_clone().ok();
        self.drain_grace = Duration::from_millis(drain_grace_ms);
        // Created while the server began to drain: the client is told so.
        if hung_up(control) {
            let err = Error::busy(format!(
                "brig serve: {DRAINING}; the session was not created"
            ));
            let _ = protocol::write_frame(connection.as_fd(), &error_reply(&err), &[]);
            return self.end_jail();
        }
        let reply = SessionReply::Session {
            session: self.id.clone(),
            workspace: self.plan().identity.home.to_string_lossy().into_owned(),
        };
        let _ = protocol::write_frame(connection.as_fd(), &reply, &[]);
        drop(connection);
        let ends_at = Instant::now() + Duration::from_millis(session_timeout_ms);
        self.ends_at = Some(ends_at);
        let idle = Duration::from_millis(idle_timeout_ms);
        let (why, closed_by) = self.serve_requests(control, ends_at, idle);
        // No request may be lost in a socket nobody reads: the server's writes fail from
        // here on, and those already sent are answered.
        let _ = nix::sys::socket::shutdown(
            std::os::fd::AsRawFd::as_raw_fd(control),
            nix::sys::socket::Shutdown::Read,
        );
        let message = format!("brig serve: session {} ended: {why}", self.id);
        nonblocking(control);
        // The requests the server sent.
        while let Ok(protocol::Read::Frame(_, fds)) = self.processes.requests.read(control.as_fd())
        {
            if let Some(connection) = fds.first() {
                let _ = protocol::write_frame(
                    connection.as_fd(),
                    &error_reply(&Error::not_found(message.clone())),
                    &[],
                );
            }
        }
        let id = self.id.clone();
        self.end_jail();
        // Answered once nothing of the session is left.
        if let Some(connection) = closed_by {
            let reply = SessionReply::Closed { session: id };
            let _ = protocol::write_frame(connection.as_fd(), &reply, &[]);
        }
    }

    fn end_jail(mut self) {
        self.report_counters();
        drop(self.interpreters);
        self.jail.end();
    }

    /// One request's reply; None when the answer went out on the connection already (a
    /// streamed read).
    fn handle(
        &mut self,
        request: Result<Request>,
        peer: Peer,
        connection: &OwnedFd,
    ) -> Option<SessionReply> {
        let request = match request {
            Ok(request) => request,
            Err(err) => return Some(error_reply(&err)),
        };
        let result = match request {
            Request::SessionExec { .. } => Err(Error::input(EXEC_FORM)),
            Request::SessionPut {
                path, data, append, ..
            } => base64::engine::general_purpose::STANDARD
                .decode(data.as_bytes())
                .map_err(|err| Error::input(format!("session_put: \"data\" is not base64: {err}")))
                .and_then(|data| self.workspace().put(&path, &data, append))
                .map(|size| Some(SessionReply::Put { path, size })),
            Request::SessionGet {
                path,
                offset,
                length,
                ..
            } => self
                .workspace()
                .get(&path, offset, length)
                .map(|(data, size)| {
                    Some(SessionReply::Get {
                        path,
                        offset,
                        size,
                        data: base64::engine::general_purpose::STANDARD.encode(data),
                    })
                }),
            Request::SessionNetwork {
                allow_net,
                deny_net,
                add_host,
                ..
            } => super::session_network::apply(
                &mut self.jail,
                &self.id,
                peer,
                &allow_net,
                &deny_net,
                add_host.as_deref(),
                self.audit_log.as_deref(),
            )
            .map(Some),
            Request::SessionDial { port, .. } => {
                super::session_dial::answer(&mut self.jail, &self.id, port, connection)
            }
            // Checked by the server against its --session-timeout.
            Request::SessionSetTimeout { timeout, .. } => {
                self.ends_at = Some(Instant::now() + timeout.0);
                Ok(Some(SessionReply::Timeout {
                    session: self.id.clone(),
                    timeout_ms: timeout.0.as_millis() as u64,
                }))
            }
            request if super::files::answers(&request) => {
                let end_by = self.end_by();
                let drain = (self.control.as_ref())
                    .filter(|_| self.drain_by.is_none())
                    .map(|control| (control.as_fd(), self.drain_grace));
                super::files::handle(
                    &workspace_of(&self.jail),
                    &mut self.watches,
                    request,
                    connection,
                    (end_by, drain),
                )
            }
            Request::SessionLs { path, .. } => {
                self.workspace().list(&path).map(|(entries, truncated)| {
                    Some(SessionReply::Ls {
                        path,
                        entries: entries.into_iter().map(FileEntry::from).collect(),
                        truncated,
                    })
                })
            }
            _ => Err(Error::input(
                "brig serve: a session's runner was handed a request that is not for a session",
            )),
        };
        result.unwrap_or_else(|err| Some(error_reply(&err)))
    }

    fn workspace(&self) -> Workspace<'_> {
        workspace_of(&self.jail)
    }

    /// Events that came between requests: an interpreter that died is forgotten (the
    /// next cell starts a fresh one); a watched program's end is noted.
    fn absorb_events(&mut self) {
        for event in self.jail.events() {
            self.note_event(event);
        }
    }

    /// Program `id` ended: if it was an interpreter, what it started goes with it, and
    /// the next cell starts a fresh one.
    fn forget_interpreter(&mut self, id: u32) {
        let key = self
            .interpreters
            .iter()
            .find(|(_, interpreter)| interpreter.id == id)
            .map(|(key, _)| key.clone());
        if let Some(key) = key {
            self.interpreter_ended(&key);
        }
    }

    /// The program ids of the running interpreters (but `but`'s): an interrupted cell's
    /// sweep keeps them, the other contexts' too (not what their cells started).
    fn interpreter_ids(&self, but: Option<u32>) -> Vec<u32> {
        self.interpreters
            .values()
            .map(|interpreter| interpreter.id)
            .filter(|id| Some(*id) != but)
            .collect()
    }

    /// The time and output limits of one exec: those asked for, held to the session's
    /// by the server's one policy check (its output limit the capture's cap when it has
    /// none).
    fn limits(
        &self,
        time_limit: Option<Span>,
        output_limit: Option<crate::units::Size>,
    ) -> Result<(Option<Duration>, u64)> {
        if time_limit.is_some_and(|limit| limit.0.is_zero()) {
            return Err(Error::input("time_limit: must be longer than 0; e.g. 5s"));
        }
        if output_limit.is_some_and(|size| size.0 == 0) {
            return Err(Error::input(
                "output_limit: must be at least 1 byte; e.g. 1M",
            ));
        }
        let plan = self.plan();
        let ours = policy::Jail {
            // Held in this runner until the reply: at most MAX_CAPTURE, whatever the jail's.
            output_limit: Some(crate::units::Size(protocol::capture_limit(
                plan.limits.output_limit,
            ))),
            ..policy::Jail::of(plan)
        };
        let asked = policy::Jail {
            time_limit: time_limit.or(ours.time_limit),
            output_limit: output_limit.or(ours.output_limit),
            ..ours
        };
        let client = JailOptions {
            time_limit,
            output_limit,
            ..JailOptions::default()
        };
        let origins: policy::Origins = [
            ("time-limit", "time_limit"),
            ("output-limit", "output_limit"),
        ]
        .into_iter()
        .map(|(option, field)| (option.to_string(), field.to_string()))
        .collect();
        let session = policy::Server {
            options: &self.options,
            jail: ours,
            may: &[],
            bind_under: &[],
            whose: "session",
        };
        policy::check(&client, &origins, &session, policy::Asked::Prepared(asked))?;
        let output = asked
            .output_limit
            .map_or(protocol::capture_limit(None), |size| size.0);
        Ok((asked.time_limit.map(|limit| limit.0), output))
    }

    /// The program of a command: the session's environment with the request's on top.
    fn program(
        &self,
        argv: Vec<String>,
        env: Vec<String>,
        chdir: Option<PathBuf>,
        as_root: bool,
    ) -> Result<Program> {
        let mut options = self.options.clone();
        // Root's: the user's home is the user's alone (0700, and root has no
        // CAP_DAC_OVERRIDE): root starts in /tmp, its HOME, unless the request says.
        if as_root {
            options
                .env
                .extend([ROOT_HOME, "USER=root", "LOGNAME=root"].map(String::from));
        }
        options.env.extend(env);
        let env = crate::plan::with_secrets(
            crate::environment::resolve(&options, &self.plan().identity)?,
            self.jail.network(),
        );
        let chdir = match chdir {
            Some(dir) => crate::mount::jail_path("chdir", &dir.to_string_lossy())?,
            None if as_root => PathBuf::from(&ROOT_HOME["HOME=".len()..]),
            None => self.plan().chdir.clone(),
        };
        let program = Program {
            argv,
            env,
            chdir,
            as_root,
        };
        program.check()?;
        Ok(program)
    }

    /// Whether a command's `user` is root (uid 0 inside, no capabilities: a session
    /// created with `root`); the jail's user by name or left out is not. Anyone else is
    /// refused: the jail maps no one else.
    fn runs_as_root(&self, user: Option<&str>) -> Result<bool> {
        let identity = &self.plan().identity;
        match user {
            None => Ok(false),
            Some("root") if identity.root => Ok(true),
            Some("root") => Err(Error::input(
                "user \"root\": this session was created without root, so its jail maps no uid 0; create the session with \"root\": true (a root brig serve with per-jail host uids), or leave the user out",
            )),
            Some(name) if name == identity.user => Ok(false),
            Some(other) => Err(Error::input(format!(
                "user {other:?}: the session's jail has no such user; give {:?}{} or leave the user out",
                identity.user,
                if identity.root { " or \"root\"" } else { "" }
            ))),
        }
    }

    fn oom_kills(&self) -> u64 {
        self.jail
            .usage()
            .and_then(|usage| usage.oom_kills)
            .unwrap_or(0)
    }

    /// The exec's verdict, with the session's id and what ran (a cell's
    /// language and context, a command's pid); the server's audit line.
    fn verdict(
        &mut self,
        end: ExecEnd,
        output: &Captured,
        served: crate::verdict::Served,
        ran: Ran,
    ) -> Verdict {
        self.report_counters();
        let mut usage = self.jail.usage();
        if let Some(usage) = usage.as_mut() {
            // The session's cgroup counts since its start; an exec's own are below.
            usage.oom_kills = Some(end.oom_kills);
            usage.cpu_user_usec = None;
            usage.cpu_sys_usec = None;
        }
        let spent = Spent {
            wall: end.wall,
            cpu_user: Duration::from_micros(end.ended.cpu_user_us),
            cpu_sys: Duration::from_micros(end.ended.cpu_sys_us),
            max_rss_kib: end.ended.max_rss_kib,
        };
        let cgroup = (self.jail.cgroup_version(), usage);
        let time_limit = end.limit.map(Span);
        // Root's command ran as the jail's second host ids: its verdict says those.
        let host_ids = match ran {
            Ran::Command { as_root: true, .. } => self.jail.root_host_ids(),
            _ => None,
        };
        let host_ids = host_ids.unwrap_or_else(|| self.jail.host_ids());
        let mut report = RunReport::new(end.outcome, time_limit, spent, cgroup, host_ids);
        // The session's cgroup is shared by every exec running at once: an OOM kill
        // during this one may have taken another's process. This exec ran out of memory
        // when its own program died of a SIGKILL brig did not send while the kernel
        // counted OOM kills; the count is reported either way.
        report.out_of_memory = end.oom_kills > 0
            && matches!(
                report.outcome,
                Outcome::Signaled {
                    signal: libc::SIGKILL,
                    ..
                }
            );
        report.output = Some(output.counts);
        // The cap that held is the exec's (none for a background process that asked for
        // none): its verdict says it, and its explanation at the cut, as a capture's does.
        let context = match output.limit {
            u64::MAX => RunContext::default(),
            limit => RunContext::captured(limit),
        };
        let context = RunContext {
            shared_cgroup: true,
            ..context
        };
        let mut verdict = Verdict::of_run_in(self.plan(), &report, context);
        verdict.in_session = Some(SessionExec {
            session: self.id.clone(),
            language: match &ran {
                Ran::Cell(target) => Some(target.language),
                Ran::Command { .. } => None,
            },
            context: match &ran {
                Ran::Cell(target) => Some(target.id.clone()),
                Ran::Command { .. } => None,
            },
            pid: match ran {
                Ran::Cell(_) => None,
                Ran::Command { pid, .. } => Some(pid),
            },
        });
        if let Some(path) = &self.audit_log
            && let Ok(sinks) = Sinks::open(None, None, Some(path))
        {
            let digest = crate::verdict::config_digest(self.plan());
            let line = serde_json::to_value(&verdict).expect("a verdict always serializes");
            sinks.deliver_json(&line, Some(digest), Some(served));
        }
        verdict
    }

    /// A new interpreter of `language` in `cwd`, spawned: it is ready once it says so
    /// and the kernel shows it waiting for its first request (`session/starting.rs`).
    fn spawn_interpreter(
        &mut self,
        language: Language,
        cwd: Option<PathBuf>,
    ) -> Result<Interpreter> {
        let argv: Vec<String> = match language {
            Language::Python => vec![
                "python3".into(),
                "-c".into(),
                PYTHON_LAUNCH.into(),
                PYTHON_SCRIPT.into(),
            ],
            Language::Node => vec!["node".into(), "-e".into(), NODE_SCRIPT.into()],
            Language::Bash => vec![
                "bash".into(),
                "--noprofile".into(),
                "--norc".into(),
                "-c".into(),
                BASH_SCRIPT.into(),
                "brig-session-bash".into(),
            ],
        };
        let program = self.program(argv, Vec::new(), cwd, false)?;
        let (ours, theirs) = UnixStream::pair()
            .and_then(|(ours, theirs)| {
                kernel::pass_credentials(&ours)?;
                Ok((ours, theirs))
            })
            .map_err(|err| Error::setup(format!("a socket pair for the interpreter: {err}")))?;
        let (stdout_read, stdout_write) = pipe("the session")?;
        let (stderr_read, stderr_write) = pipe("the session")?;
        let null = dev_null("the session's interpreter")?;
        let id = self.jail.spawn(
            &program,
            &[
                null.as_fd(),
                stdout_write.as_fd(),
                stderr_write.as_fd(),
                theirs.as_fd(),
            ],
        )?;
        let socket_inode = nix::sys::stat::fstat(&theirs)
            .map(|stat| stat.st_ino)
            .map_err(|err| Error::setup(format!("fstat the interpreter's socket: {err}")))?;
        drop((null, stdout_write, stderr_write, theirs));
        nonblocking(&stdout_read);
        nonblocking(&stderr_read);
        Ok(Interpreter {
            id,
            pid: None,
            idle: match language {
                Language::Python | Language::Bash => Idle::Receive(socket_inode),
                Language::Node => Idle::Epoll(None, socket_inode),
            },
            control: ours,
            lines: lines::LineBuffer::new(MAX_INTERPRETER_LINE),
            stranger: None,
            stdout: stdout_read,
            stderr: stderr_read,
            cells: 0,
        })
    }

    /// Before a cell: a line that came from the interpreter while no cell ran means its
    /// channel is not its own (a thread of an earlier cell wrote to it): it is killed (the
    /// next cell starts a fresh one), and the reason is returned.
    fn check_idle_interpreter(&mut self, key: &str) -> Option<String> {
        let interpreter = self.interpreters.get_mut(key)?;
        let line = interpreter.next_line();
        let why = match interpreter.stranger {
            Some(pid) => format!(
                "a line on its control descriptor written by another process of the jail (pid {pid})"
            ),
            None if line.is_some() || !interpreter.lines.is_empty() => {
                "a line on its control descriptor while no cell ran".to_string()
            }
            None => return None,
        };
        self.stop_interpreter(key);
        Some(why)
    }
}

/// What an exec ran, as its verdict names it.
enum Ran<'t> {
    Cell(&'t context::Target),
    /// A command, with its pid in the jail (None when the jail never said it), and
    /// whether it ran as root.
    Command {
        pid: Option<u32>,
        as_root: bool,
    },
}

/// How one exec ended, for its verdict.
struct ExecEnd {
    outcome: Outcome,
    limit: Option<Duration>,
    wall: Duration,
    ended: Ended,
    oom_kills: u64,
}

/// A cell's fields: its code, its language, and whether its output is streamed.
struct Cell {
    code: String,
    stream: bool,
}

/// A command's fields.
struct CommandExec {
    command: Vec<String>,
    stdin: Option<String>,
    env: Vec<String>,
    chdir: Option<PathBuf>,
    time_limit: Option<Span>,
    output_limit: Option<crate::units::Size>,
    /// `root`, the jail's user's name, or None (the jail's user).
    user: Option<String>,
}

impl Interpreter {
    /// A collector of its output (copies of its pipes) for one cell, or its start: the
    /// one bounded collector, stdout and stderr together within `limit`.
    fn collector(&self, limit: u64) -> Result<Output> {
        let copy = |pipe: &OwnedFd| {
            pipe.try_clone()
                .map_err(|err| Error::setup(format!("copy the interpreter's output pipe: {err}")))
        };
        Output::of_pipes(copy(&self.stdout)?, copy(&self.stderr)?, limit)
            .map_err(|errno| Error::os("watch the interpreter's output", errno))
    }

    /// Whether system call `number` on descriptor `first` is a read of descriptor 3, and
    /// descriptor 3 still the interpreter's end of its socket pair (`inode`).
    fn reads_socket(
        &self,
        number: libc::c_long,
        first: u64,
        inode: u64,
    ) -> std::result::Result<bool, String> {
        if !kernel::is_receive(number) || first != 3 {
            return Ok(false);
        }
        let pid = self.pid.ok_or("its pid is unknown")?;
        Ok(kernel::descriptor(pid, 3)? == format!("socket:[{inode}]"))
    }

    /// Whether the kernel shows the interpreter's main thread blocked where it waits for
    /// its next request; an error when brig cannot read that.
    fn waiting(&self) -> std::result::Result<bool, String> {
        let pid = self.pid.ok_or("its pid is unknown")?;
        Ok(match (kernel::syscall(pid)?, self.idle) {
            (Syscall::In { number, first }, Idle::Receive(inode)) => {
                self.reads_socket(number, first, inode)?
            }
            (Syscall::In { number, first }, Idle::Epoll(Some(fd), inode)) => {
                kernel::is_epoll_wait(number)
                    && first == fd
                    && kernel::epoll_watches(pid, fd, inode)?
            }
            _ => false,
        })
    }

    /// The next whole line the interpreter sent (its newline included); None when none
    /// is there yet.
    fn next_line(&mut self) -> Option<Vec<u8>> {
        loop {
            if let Some(line) = self.lines.next_line() {
                return Some(line);
            }
            // Without waiting, but only this read: a cell is written to the same socket,
            // which must block while the interpreter takes a large one in.
            let mut chunk = [0u8; 64 * 1024];
            let received = kernel::receive(
                self.control.as_fd(),
                &mut chunk,
                nix::sys::socket::MsgFlags::MSG_DONTWAIT,
            );
            match received {
                Ok((count @ 1.., sender)) => {
                    // A cell's output goes to its pipes: a runaway line here is the
                    // program's own writing to descriptor 3, kept within bounds.
                    self.lines.push(&chunk[..count]);
                    // The first writer is the interpreter, saying it is ready; another
                    // process writing later is noted (the kernel names it).
                    match (self.pid, sender) {
                        (None, Some(sender)) => self.pid = Some(sender),
                        (Some(pid), Some(sender)) if sender != pid => self.stranger = Some(sender),
                        _ => {}
                    }
                }
                _ => return None,
            }
        }
    }
}

fn describe_end(end: &Ended, oom: bool) -> String {
    match (end.code, end.signal) {
        _ if oom => "killed for memory".into(),
        (Some(code), _) => format!("exit status {code}"),
        (None, Some(signal)) => format!("killed by signal {signal}"),
        (None, None) => "killed".into(),
    }
}

fn workspace_of<'a>(jail: &'a SessionJail) -> Workspace<'a> {
    let plan = jail.plan();
    Workspace {
        dir: jail.workspace(),
        owner: jail.host_ids(),
        jail_ids: (plan.identity.uid, plan.identity.gid),
        size: plan.limits.home_size,
    }
}

fn language_name(language: Language) -> &'static str {
    match language {
        Language::Python => "python",
        Language::Node => "node",
        Language::Bash => "bash",
    }
}

fn error_reply(err: &Error) -> SessionReply {
    SessionReply::error(err)
}

/// Checks a request for a session before the server hands it on: the paths and sizes a
/// client could get wrong are its one-line errors here (the runner checks them again).
/// A root command's HOME and default directory: writable by anyone (sticky), where the
/// user's home is not root's to enter.
const ROOT_HOME: &str = "HOME=/tmp";

pub fn check_request(request: &Request) -> Result<()> {
    match request {
        Request::SessionExec {
            code: Some(_),
            user: Some(_),
            ..
        } => Err(Error::input(
            "user: only a command takes one; a code cell runs in the session's interpreter, as the jail's user; leave the user out",
        )),
        Request::SessionPut { data, .. }
            if data.len() as u64 > workspace::MAX_CHUNK * 4 / 3 + 4 =>
        {
            Err(Error::input(format!(
                "session_put: more than {} bytes of data in one request; send the rest with \"append\": true",
                workspace::MAX_CHUNK
            )))
        }
        Request::SessionExec {
            code,
            stream,
            pty: Some(size),
            ..
        } => session_pty::check_exec(*size, code.is_some(), *stream),
        Request::SessionExec { command, code, .. } if command.is_empty() == code.is_none() => {
            Err(Error::input(EXEC_FORM))
        }
        Request::SessionExec {
            code,
            stream,
            background,
            tag,
            ..
        } => session_loop::check_form(
            &session_loop::Form {
                stream: *stream,
                background: *background,
                tag: tag.clone(),
            },
            code.is_some(),
        ),
        _ => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_interpreters_reply_line_is_parsed_into_its_type() {
        let line = br#"{"id": 4, "result": "2", "error": null, "results": [{"text/plain": "2", "is_main_result": true}]}
"#;
        let reply = cell_reply(line, 4, Language::Python).unwrap();
        assert_eq!((reply.id, reply.result.as_deref()), (4, Some("2")));
        assert_eq!((reply.results.len(), reply.results_dropped), (1, 0));
        let error = br#"{"id": 5, "result": null, "error": {"type": "ZeroDivisionError", "message": "division by zero", "traceback": "Traceback"}}"#;
        let error = cell_reply(error, 5, Language::Python)
            .unwrap()
            .error
            .unwrap();
        let error = reply::CellError::from(error);
        assert_eq!(
            (error.kind.as_str(), error.traceback.as_str()),
            ("ZeroDivisionError", "Traceback")
        );
        let bash = br#"{"id": 6, "exit_code": 3}"#;
        assert_eq!(
            cell_reply(bash, 6, Language::Bash).unwrap().exit_code,
            Some(3)
        );
    }

    /// A line a cell forged (or broke) is refused whole, with why: the runner's reply
    /// holds only what the interpreter's protocol allows.
    #[test]
    fn a_malformed_or_forged_reply_line_is_refused() {
        let refused: [(&[u8], Language, &str); 10] = [
            (b"not a reply\n", Language::Python, "not a well-formed reply"),
            (b"", Language::Python, "not a well-formed reply"),
            (b"[4]\n", Language::Python, "not a well-formed reply"),
            (br#"[4, "'forged'", null, [], 0, null]"#, Language::Python, "not a well-formed reply"),
            // Fields that are not the interpreter's to give (a verdict, a status).
            (br#"{"id": 4, "verdict": {"status": "ok"}}"#, Language::Python, "not a well-formed reply"),
            (br#"{"id": 4, "error": {"type": "E", "message": "m", "traceback": "", "status": 0}}"#, Language::Node, "not a well-formed reply"),
            (br#"{"id": "4"}"#, Language::Python, "not a well-formed reply"),
            (br#"{"id": 999, "result": null}"#, Language::Python, "wrong id"),
            (br#"{"id": 4, "exit_code": 0}"#, Language::Python, "only bash"),
            (br#"{"id": 4, "results": [{"cpu_user_ms": 0}]}"#, Language::Node, "not a mime type"),
        ];
        for (line, language, why) in refused {
            let text = String::from_utf8_lossy(line);
            let err = cell_reply(line, 4, language)
                .err()
                .unwrap_or_else(|| panic!("{text}"));
            assert!(err.contains(why), "{text}: {err}");
        }
        // A status out of a shell's range is not a status.
        assert!(cell_reply(br#"{"id": 4, "exit_code": 256}"#, 4, Language::Bash).is_err());
    }

    #[test]
    fn only_the_ready_line_says_ready() {
        assert!(is_ready(b"{\"ready\":true}\n"));
        assert!(is_ready(br#"{"ready": true}"#));
        for line in [
            &br#"{"ready": false}"#[..],
            br#"{"ready": "yes"}"#,
            br#"{"ready": true, "id": 1}"#,
            br#"{"id": 1}"#,
            b"[true]\n",
            b"ready\n",
        ] {
            assert!(!is_ready(line), "{}", String::from_utf8_lossy(line));
        }
    }
}
