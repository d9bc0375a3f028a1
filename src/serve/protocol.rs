//! The wire protocol of `brig serve`, version 1: length-prefixed JSON frames on a unix
//! socket (at most [`MAX_FRAME`] for a request), descriptors as SCM_RIGHTS, one request per
//! connection. docs/protocol.md describes every request and reply, runs and sessions.

use crate::error::{Error, ErrorKind, Result};
use crate::options::JailOptions;
use crate::sys;
use crate::units::{Size, Span};
use serde::{Deserialize, Serialize};
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};

pub const VERSION: u64 = 1;
/// The largest frame either side accepts.
pub const MAX_FRAME: usize = 1 << 20;
/// What `capture` (and a session's exec) keeps of stdout and stderr together without an
/// `output-limit`.
pub const DEFAULT_CAPTURE: u64 = 1 << 20;
/// The most captured output a reply carries, stdout and stderr together, whatever the
/// output limit: escaped as JSON (at most 6 bytes a byte) it stays within [`MAX_REPLY`].
pub const MAX_CAPTURE: u64 = 8 << 20;
/// How long a client has to take its whole reply, by brig's clock; past it the reply is
/// dropped and the connection closed (the slot is not held for a client that does not
/// read).
pub const REPLY_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(10);

/// The output limit of a captured run or exec: the one asked for (or 1 MiB), at most
/// [`MAX_CAPTURE`].
pub fn capture_limit(output_limit: Option<Size>) -> u64 {
    output_limit
        .map_or(DEFAULT_CAPTURE, |size| size.0)
        .min(MAX_CAPTURE)
}

#[derive(Debug, Deserialize, Serialize)]
#[serde(tag = "type", rename_all = "snake_case", deny_unknown_fields)]
pub enum Request {
    Run {
        #[serde(default)]
        options: Box<JailOptions>,
        #[serde(default)]
        stdio: StdioMode,
        /// With `capture`: the program's standard input.
        #[serde(default)]
        stdin: Option<String>,
        /// Where options came from, when not from the client's command line or call:
        /// option name (`time-limit`) to `profile NAME` or `config FILE`; a refusal
        /// names it.
        #[serde(default)]
        origins: std::collections::BTreeMap<String, String>,
    },
    Signal {
        signal: i32,
    },
    Status,
    /// A session: a jail that lives between requests (`session.rs`).
    SessionCreate {
        #[serde(default)]
        options: Box<JailOptions>,
        #[serde(default)]
        session_timeout: Option<Span>,
        #[serde(default)]
        idle_timeout: Option<Span>,
        #[serde(default)]
        workspace_size: Option<Size>,
        /// The client's labels for the session (`session_list` shows and filters by
        /// them); bounded by `session_meta::check_metadata`.
        #[serde(default)]
        metadata: std::collections::BTreeMap<String, String>,
        /// Secrets the session's jail may use without seeing them (`net::secrets`):
        /// `{name, value, hosts}`; the value is never logged, echoed or listed.
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        secrets: Vec<crate::net::secrets::Given>,
        /// The jail maps uid/gid 0 too (to host ids of its own), so that a command may run
        /// as root inside (`session_exec`'s `user`), without capabilities. Root servers
        /// with per-jail host uids only.
        #[serde(default)]
        root: bool,
    },
    /// Runs a command (`command`) or a code cell (`code`) in the session.
    SessionExec {
        session: String,
        #[serde(default)]
        command: Vec<String>,
        #[serde(default)]
        code: Option<String>,
        #[serde(default)]
        language: Option<Language>,
        /// With `code`: the context (an interpreter of the session) to run it in; without
        /// it, the language's default context.
        #[serde(default)]
        context: Option<String>,
        #[serde(default)]
        stdin: Option<String>,
        #[serde(default)]
        env: Vec<String>,
        #[serde(default)]
        chdir: Option<std::path::PathBuf>,
        #[serde(default)]
        time_limit: Option<Span>,
        #[serde(default)]
        output_limit: Option<Size>,
        /// Output as `output` frames while it is produced, then the `exec` frame.
        #[serde(default)]
        stream: bool,
        /// A command started without waiting: the reply is a `process` frame at once.
        #[serde(default)]
        background: bool,
        /// A background process's name, for the requests below instead of its pid.
        #[serde(default)]
        tag: Option<String>,
        /// Start it on a terminal of the jail's own devpts, this size (a background
        /// process; without a command, the jail's shell).
        #[serde(default)]
        pty: Option<PtySize>,
        /// Who a command runs as: `root` (uid 0 inside, no capabilities; the session
        /// must have been created with `root`) or the jail's user (its name, or left
        /// out).
        #[serde(default)]
        user: Option<String>,
    },
    /// The session's processes (`session_processes.rs`).
    SessionPs {
        session: String,
    },
    /// Attaches to a process: what it wrote that is still kept, then live output, then
    /// its verdict.
    SessionConnect {
        session: String,
        #[serde(default)]
        pid: Option<u32>,
        #[serde(default)]
        tag: Option<String>,
    },
    /// Writes `data` to a process's stdin; `close` closes it after.
    SessionStdin {
        session: String,
        #[serde(default)]
        pid: Option<u32>,
        #[serde(default)]
        tag: Option<String>,
        #[serde(default)]
        data: String,
        /// Bytes as base64 instead of `data` (a terminal's input need not be text).
        #[serde(default)]
        base64: Option<String>,
        #[serde(default)]
        close: bool,
    },
    /// A terminal's new size (TIOCSWINSZ: its foreground process group gets SIGWINCH).
    SessionResize {
        session: String,
        #[serde(default)]
        pid: Option<u32>,
        #[serde(default)]
        tag: Option<String>,
        cols: u16,
        rows: u16,
    },
    /// A TCP connection to `port` of the session's own loopback (a server a program
    /// runs in the jail), opened inside the jail's network namespace and passed with the
    /// `dialed` reply as its one descriptor (SCM_RIGHTS) (`session_dial.rs`).
    SessionDial {
        session: String,
        port: u32,
    },
    /// Sends a signal (a name, `TERM` or `SIGTERM`, or a number) to a process's group.
    SessionSignal {
        session: String,
        #[serde(default)]
        pid: Option<u32>,
        #[serde(default)]
        tag: Option<String>,
        signal: serde_json::Value,
    },
    /// SIGKILL to a process's group.
    SessionKill {
        session: String,
        #[serde(default)]
        pid: Option<u32>,
        #[serde(default)]
        tag: Option<String>,
    },
    SessionPut {
        session: String,
        path: String,
        /// Base64.
        data: String,
        #[serde(default)]
        append: bool,
    },
    SessionGet {
        session: String,
        path: String,
        #[serde(default)]
        offset: u64,
        #[serde(default)]
        length: Option<u64>,
    },
    SessionLs {
        session: String,
        #[serde(default = "here")]
        path: String,
        /// How many levels deep (1: the directory's own entries).
        #[serde(default)]
        depth: Option<u32>,
    },
    /// A session's files beyond put/get/ls (`files.rs`, `watch.rs`).
    SessionStat {
        session: String,
        path: String,
    },
    SessionExists {
        session: String,
        path: String,
    },
    SessionMkdir {
        session: String,
        path: String,
        #[serde(default = "yes")]
        parents: bool,
    },
    SessionRename {
        session: String,
        source: String,
        destination: String,
    },
    SessionRemove {
        session: String,
        path: String,
    },
    /// A file of `size` bytes streamed raw on the connection after the `ready` reply.
    SessionWrite {
        session: String,
        path: String,
        size: u64,
    },
    /// A file streamed raw on the connection after the `reading` reply.
    SessionRead {
        session: String,
        path: String,
        #[serde(default)]
        offset: u64,
        #[serde(default)]
        length: Option<u64>,
    },
    SessionWatch {
        session: String,
        path: String,
        #[serde(default)]
        recursive: bool,
        /// Events sent on this connection as they happen (`watch_event` frames) until
        /// `session_unwatch`, the client's hang-up or the session's end.
        #[serde(default)]
        stream: bool,
    },
    SessionWatchEvents {
        session: String,
        watcher: String,
    },
    SessionUnwatch {
        session: String,
        watcher: String,
    },
    SessionClose {
        session: String,
    },
    /// The sessions the client may see, those whose metadata hold every pair of
    /// `metadata`.
    SessionList {
        #[serde(default)]
        metadata: std::collections::BTreeMap<String, String>,
    },
    /// Replaces a `--net filtered` session's `allow-net` and `deny-net` rules and
    /// `add-host` pins (`session_network.rs`); without `add_host`, the pins stay as they are.
    SessionNetwork {
        session: String,
        #[serde(default)]
        allow_net: Vec<String>,
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        deny_net: Vec<String>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        add_host: Option<Vec<String>>,
    },
    /// Sets the session's end to now + `timeout` (at most the server's
    /// `--session-timeout`).
    SessionSetTimeout {
        session: String,
        timeout: Span,
    },
    /// Freezes every process of the session where it is (the cgroup freezer) until
    /// `session_resume`; its timeout and idle timer stop meanwhile (`lifecycle.rs`).
    SessionPause {
        session: String,
    },
    SessionResume {
        session: String,
    },
    /// The session's resource use now: CPU, memory, workspace (`session_lifecycle.rs`).
    SessionStats {
        session: String,
    },
    /// A session's code contexts: independent interpreters (`session_context.rs`).
    SessionContext {
        session: String,
        action: ContextAction,
        /// create: the context's language (default python).
        #[serde(default)]
        language: Option<Language>,
        /// create: its working directory (a path in the jail; default the session's).
        #[serde(default)]
        cwd: Option<std::path::PathBuf>,
        /// restart, remove: which context.
        #[serde(default)]
        context: Option<String>,
    },
}

/// What a `session_context` request does.
#[derive(Clone, Copy, Debug, Deserialize, Serialize, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum ContextAction {
    Create,
    List,
    Restart,
    Remove,
}

fn here() -> String {
    ".".into()
}

fn yes() -> bool {
    true
}

/// A session's interpreters.
#[derive(Clone, Copy, Debug, Default, Deserialize, Serialize, PartialEq, Eq, Hash)]
#[serde(rename_all = "snake_case")]
pub enum Language {
    #[default]
    Python,
    Node,
    /// A persistent bash (its cwd, variables, functions and exported environment live
    /// on between cells).
    Bash,
}

impl Request {
    /// The session a request is for, if it is for one.
    pub fn session(&self) -> Option<&str> {
        match self {
            Request::SessionExec { session, .. }
            | Request::SessionPut { session, .. }
            | Request::SessionGet { session, .. }
            | Request::SessionLs { session, .. }
            | Request::SessionStat { session, .. }
            | Request::SessionExists { session, .. }
            | Request::SessionMkdir { session, .. }
            | Request::SessionRename { session, .. }
            | Request::SessionRemove { session, .. }
            | Request::SessionWrite { session, .. }
            | Request::SessionRead { session, .. }
            | Request::SessionWatch { session, .. }
            | Request::SessionWatchEvents { session, .. }
            | Request::SessionUnwatch { session, .. }
            | Request::SessionNetwork { session, .. }
            | Request::SessionSetTimeout { session, .. }
            | Request::SessionPs { session }
            | Request::SessionConnect { session, .. }
            | Request::SessionStdin { session, .. }
            | Request::SessionResize { session, .. }
            | Request::SessionDial { session, .. }
            | Request::SessionSignal { session, .. }
            | Request::SessionKill { session, .. }
            | Request::SessionClose { session }
            | Request::SessionPause { session }
            | Request::SessionResume { session }
            | Request::SessionStats { session }
            | Request::SessionContext { session, .. } => Some(session),
            _ => None,
        }
    }
}

/// A terminal's size, in characters.
#[derive(Clone, Copy, Debug, Deserialize, Serialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct PtySize {
    pub cols: u16,
    pub rows: u16,
}

#[derive(Clone, Copy, Debug, Default, Deserialize, Serialize, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum StdioMode {
    /// The client's own descriptors, passed with the request.
    #[default]
    Fds,
    /// Pipes: the reply carries what the program wrote.
    Capture,
}

#[derive(Debug, Deserialize, Serialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum Reply {
    Done {
        /// Typed both ways: a client reads the schema it knows, or is told it cannot.
        verdict: Box<crate::verdict::Verdict>,
        config_digest: String,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        stdout: Option<String>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        stderr: Option<String>,
    },
    Error {
        message: String,
        kind: ErrorKind,
        exit_code: i32,
    },
    Status(Status),
}

#[derive(Clone, Debug, Default, Deserialize, Serialize, PartialEq, Eq)]
pub struct Status {
    pub version: String,
    pub pid: u32,
    /// Pooled jails wanted, and ready now; the same for warm Python jails.
    pub pool: usize,
    pub ready: usize,
    pub warm_python: usize,
    pub warm_ready: usize,
    /// Wanted and ready warm Node jails.
    pub warm_node: usize,
    pub warm_node_ready: usize,
    /// Jails running a program now, and the most at once (`--max-jails`).
    pub running: usize,
    pub max_jails: usize,
    /// Requests waiting for a jail.
    pub queued: usize,
    pub runs: u64,
    /// Runs served by a pooled jail, and by one built for the request.
    pub pooled_runs: u64,
    /// Runs served by a warm Python or Node.
    pub warm_runs: u64,
    pub refused: u64,
    /// Pooled jails that failed to assemble (or whose warm interpreter ended idle).
    pub failures: u64,
    /// After failures in a row, how long until the pool builds again, in ms (0: not
    /// waiting).
    pub pool_retry_ms: u64,
    pub draining: bool,
    /// Sessions open now, the most at once (`--max-sessions`), and pooled session jails
    /// ready.
    pub sessions: usize,
    pub max_sessions: usize,
    pub session_pool: usize,
    pub session_ready: usize,
    /// Jail build times, sessions' OOM kills and network bytes since the server started
    /// (versioned apart: `metrics.rs`).
    #[serde(default)]
    pub metrics: super::metrics::ServerMetrics,
    /// Sessions may be created with `root` here (a root server with per-jail host uids).
    #[serde(default)]
    pub session_root: bool,
}

impl Reply {
    pub fn error(error: &Error) -> Reply {
        Reply::Error {
            message: error.to_string(),
            kind: error.kind(),
            exit_code: crate::ExitStatus::BRIG_FAILED,
        }
    }
}

/// Writes one frame, with `fds` attached to its first byte.
pub fn write_frame(socket: BorrowedFd, message: &impl Serialize, fds: &[BorrowedFd]) -> Result<()> {
    let body = serde_json::to_vec(message)
        .map_err(|err| Error::setup(format!("encode a frame: {err}")))?;
    let mut frame = (body.len() as u32).to_be_bytes().to_vec();
    frame.extend_from_slice(&body);
    let what = |errno| Error::os("write to the brig serve socket", errno);
    let mut sent = sys::send_with_fds(socket, &frame, fds).map_err(what)?;
    while sent < frame.len() {
        sent += sys::send_with_fds(socket, &frame[sent..], &[]).map_err(what)?;
    }
    Ok(())
}

/// Writes one reply frame to a client, encoded straight into the socket (no copy of a
/// large reply is held) within [`REPLY_TIMEOUT`] by brig's clock: a client that does not
/// read loses its answer, and whoever waits on the writer goes on.
pub fn write_reply(socket: BorrowedFd, message: &impl Serialize) -> Result<()> {
    write_reply_by(socket, message, std::time::Instant::now() + REPLY_TIMEOUT)
}

/// [`write_reply`] with its deadline.
pub fn write_reply_by(
    socket: BorrowedFd,
    message: &impl Serialize,
    deadline: std::time::Instant,
) -> Result<()> {
    use std::io::Write;
    let encode = |err: serde_json::Error| Error::setup(format!("encode a reply: {err}"));
    let mut length = Counter(0);
    serde_json::to_writer(&mut length, message).map_err(encode)?;
    let mut writer = std::io::BufWriter::with_capacity(64 << 10, ByDeadline { socket, deadline });
    let written = writer
        .write_all(&(length.0 as u32).to_be_bytes())
        .map_err(serde_json::Error::io)
        .and_then(|()| serde_json::to_writer(&mut writer, message))
        .and_then(|()| writer.flush().map_err(serde_json::Error::io));
    written.map_err(|err| match err.io_error_kind() {
        Some(std::io::ErrorKind::TimedOut) => Error::setup(format!(
            "brig serve: the client did not take its reply within {}s; it was dropped",
            REPLY_TIMEOUT.as_secs()
        )),
        _ => Error::setup(format!("write a reply: {err}")),
    })
}

/// Counts what is written to it.
struct Counter(usize);

impl std::io::Write for Counter {
    fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
        self.0 += bytes.len();
        Ok(bytes.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// A socket written without blocking past a deadline.
struct ByDeadline<'a> {
    socket: BorrowedFd<'a>,
    deadline: std::time::Instant,
}

impl std::io::Write for ByDeadline<'_> {
    fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
        use nix::errno::Errno;
        use nix::sys::socket::MsgFlags;
        loop {
            let flags = MsgFlags::MSG_DONTWAIT | MsgFlags::MSG_NOSIGNAL;
            match nix::sys::socket::send(
                std::os::fd::AsRawFd::as_raw_fd(&self.socket),
                bytes,
                flags,
            ) {
                Ok(count) => return Ok(count),
                Err(Errno::EINTR) => {}
                Err(Errno::EAGAIN) => {
                    let left = self
                        .deadline
                        .saturating_duration_since(std::time::Instant::now());
                    if left.is_zero() {
                        return Err(std::io::ErrorKind::TimedOut.into());
                    }
                    let millis = left.as_millis().clamp(1, i32::MAX as u128) as i32;
                    let mut fds = [nix::poll::PollFd::new(
                        self.socket,
                        nix::poll::PollFlags::POLLOUT,
                    )];
                    let timeout = nix::poll::PollTimeout::try_from(millis)
                        .unwrap_or(nix::poll::PollTimeout::MAX);
                    let _ = nix::poll::poll(&mut fds, timeout);
                }
                Err(errno) => return Err(errno.into()),
            }
        }
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// A client frame's JSON: the version checked and removed.
pub fn parse_request(body: &[u8]) -> Result<Request> {
    let mut value: serde_json::Value = serde_json::from_slice(body)
        .map_err(|err| Error::input(format!("brig serve: a request that is not JSON: {err}")))?;
    let object = value
        .as_object_mut()
        .ok_or_else(|| Error::input("brig serve: a request must be a JSON object"))?;
    match object.remove("brig").and_then(|version| version.as_u64()) {
        Some(VERSION) => {}
        Some(other) => {
            return Err(Error::input(format!(
                "brig serve: protocol version {other} is not spoken here; this server speaks \"brig\": {VERSION}"
            )));
        }
        None => {
            return Err(Error::input(format!(
                "brig serve: a request needs \"brig\": {VERSION} (the protocol version)"
            )));
        }
    }
    let given: Vec<String> = object.keys().cloned().collect();
    let request: Request = serde_json::from_value(value)
        .map_err(|err| Error::input(format!("brig serve: a malformed request: {err}")))?;
    // serde ignores unknown fields of an internally tagged enum's variants, whatever the
    // enum's `deny_unknown_fields`: a request's own fields are those it serializes back
    // (every field of every variant is serialized, even when absent or null).
    let known = serde_json::to_value(&request).unwrap_or_default();
    let kind = known["type"].as_str().unwrap_or_default().to_string();
    let known = known
        .as_object()
        .map(|object| object.keys().collect::<Vec<_>>());
    if let Some(unknown) = given
        .iter()
        .find(|key| !known.as_ref().is_some_and(|known| known.contains(key)))
    {
        let expected = known
            .unwrap_or_default()
            .into_iter()
            .filter(|key| *key != "type")
            .map(|key| format!("`{key}`"))
            .collect::<Vec<_>>();
        let expected = match expected.is_empty() {
            true => "it takes no other field".to_string(),
            false => format!("expected one of {}", expected.join(", ")),
        };
        return Err(Error::input(format!(
            "brig serve: a malformed request: unknown field `{unknown}` in a `{kind}` request, {expected}; remove it"
        )));
    }
    Ok(request)
}

/// Reads frames from a socket bit by bit (non-blocking, in the server's loop) or whole
/// (blocking, in clients and runners), with the descriptors that came with them.
pub struct FrameReader {
    buffer: Vec<u8>,
    fds: Vec<OwnedFd>,
    limit: usize,
}

/// The largest reply a client accepts: an exec's reply carries up to its output limit of
/// each stream, escaped as JSON.
pub const MAX_REPLY: usize = 64 << 20;

impl Default for FrameReader {
    /// A reader of requests: frames of at most [`MAX_FRAME`].
    fn default() -> FrameReader {
        FrameReader {
            buffer: Vec::new(),
            fds: Vec::new(),
            limit: MAX_FRAME,
        }
    }
}

/// What [`FrameReader::read`] found.
pub enum Read {
    Frame(Vec<u8>, Vec<OwnedFd>),
    /// No whole frame yet (non-blocking socket).
    Partial,
    /// The peer closed the connection between frames.
    Closed,
}

impl FrameReader {
    /// A client's reader of replies: frames of at most [`MAX_REPLY`].
    pub fn replies() -> FrameReader {
        FrameReader {
            limit: MAX_REPLY,
            ..FrameReader::default()
        }
    }

    /// Reads what is there; a whole frame when one has arrived. Errors: the peer closed
    /// mid-frame, a frame over [`MAX_FRAME`], too many descriptors, a socket error.
    pub fn read(&mut self, socket: BorrowedFd) -> Result<Read> {
        loop {
            if let Some(frame) = self.take_frame()? {
                return Ok(frame);
            }
            let mut chunk = [0u8; 16 * 1024];
            match sys::receive_with_fds(socket, &mut chunk) {
                Ok((0, _)) if self.buffer.is_empty() => return Ok(Read::Closed),
                Ok((0, _)) => {
                    return Err(Error::input(
                        "brig serve: the peer closed the connection in the middle of a frame",
                    ));
                }
                Ok((count, fds)) => {
                    self.buffer.extend_from_slice(&chunk[..count]);
                    self.fds.extend(fds);
                    if self.fds.len() > sys::MAX_FDS_PER_MESSAGE {
                        return Err(Error::input(
                            "brig serve: too many descriptors with one request; send 3 (stdin, stdout, stderr) or none",
                        ));
                    }
                }
                Err(nix::errno::Errno::EAGAIN) => return Ok(Read::Partial),
                Err(nix::errno::Errno::EMSGSIZE | nix::errno::Errno::ENOBUFS) => {
                    return Err(Error::input(
                        "brig serve: too many descriptors with one request; send 3 (stdin, stdout, stderr) or none",
                    ));
                }
                Err(errno) => return Err(Error::os("read from the brig serve socket", errno)),
            }
        }
    }

    /// Whether a whole frame is buffered already (a poll of the socket would not say so).
    pub fn has_frame(&self) -> bool {
        self.buffer.len() >= 4
            && self.buffer.len()
                >= 4 + u32::from_be_bytes([
                    self.buffer[0],
                    self.buffer[1],
                    self.buffer[2],
                    self.buffer[3],
                ]) as usize
    }

    fn take_frame(&mut self) -> Result<Option<Read>> {
        if self.buffer.len() < 4 {
            return Ok(None);
        }
        let length = u32::from_be_bytes([
            self.buffer[0],
            self.buffer[1],
            self.buffer[2],
            self.buffer[3],
        ]) as usize;
        if length > self.limit {
            return Err(Error::input(format!(
                "brig serve: a frame of {length} bytes; the most is {}",
                self.limit
            )));
        }
        if self.buffer.len() < 4 + length {
            return Ok(None);
        }
        let body = self.buffer[4..4 + length].to_vec();
        self.buffer.drain(..4 + length);
        Ok(Some(Read::Frame(body, std::mem::take(&mut self.fds))))
    }

    /// Blocks until a whole frame has arrived; None when the peer closed between frames.
    pub fn read_blocking(&mut self, socket: &impl AsFd) -> Result<Option<(Vec<u8>, Vec<OwnedFd>)>> {
        loop {
            match self.read(socket.as_fd())? {
                Read::Frame(body, fds) => return Ok(Some((body, fds))),
                Read::Closed => return Ok(None),
                Read::Partial => {
                    let mut poll = [nix::poll::PollFd::new(
                        socket.as_fd(),
                        nix::poll::PollFlags::POLLIN,
                    )];
                    let _ = nix::poll::poll(&mut poll, nix::poll::PollTimeout::NONE);
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn requests_need_the_version_and_known_fields() {
        let run =
            parse_request(br#"{"brig":1,"type":"run","options":{"command":["true"]}}"#).unwrap();
        assert!(matches!(
            run,
            Request::Run {
                stdio: StdioMode::Fds,
                ..
            }
        ));
        for (body, needle) in [
            (&br#"{"type":"status"}"#[..], "needs \"brig\": 1"),
            (br#"{"brig":2,"type":"status"}"#, "version 2"),
            (br#"[1]"#, "JSON object"),
            (br#"{"brig":1,"type":"launch"}"#, "malformed"),
            (br#"{"brig":1,"type":"run","options":{"bogus":1}}"#, "bogus"),
            (br#"{"brig":1,"type":"run","bogus":1}"#, "bogus"),
            (br#"{"brig":1,"type":"status","bogus":1}"#, "bogus"),
            (br#"{"brig":1,"type":"session_list","bogus":1}"#, "bogus"),
            (
                br#"{"brig":1,"type":"session_ls","session":"a","bogus":1}"#,
                "bogus",
            ),
            (
                br#"{"brig":1,"type":"signal","signal":2,"bogus":1}"#,
                "bogus",
            ),
            (b"not json", "not JSON"),
        ] {
            let err = parse_request(body).unwrap_err().to_string();
            assert!(err.contains(needle), "{err}");
            assert!(!err.contains('\n'), "{err}");
        }
    }

    #[test]
    fn frames_round_trip_with_descriptors_and_refuse_oversize() {
        use nix::sys::socket::{AddressFamily, SockFlag, SockType, socketpair};
        let (a, b) = socketpair(
            AddressFamily::Unix,
            SockType::Stream,
            None,
            SockFlag::SOCK_CLOEXEC,
        )
        .unwrap();
        let (pipe_read, _pipe_write) = nix::unistd::pipe().unwrap();
        write_frame(a.as_fd(), &Request::Status, &[pipe_read.as_fd()]).unwrap();
        let (body, fds) = FrameReader::default().read_blocking(&b).unwrap().unwrap();
        assert_eq!(body, br#"{"type":"status"}"#);
        assert_eq!(fds.len(), 1);
        nix::unistd::write(&a, &((MAX_FRAME as u32 + 1).to_be_bytes())).unwrap();
        let err = FrameReader::default()
            .read_blocking(&b)
            .err()
            .unwrap()
            .to_string();
        assert!(err.contains("the most is"), "{err}");
        drop(a);
        assert!(FrameReader::default().read_blocking(&b).unwrap().is_none());
    }
}
