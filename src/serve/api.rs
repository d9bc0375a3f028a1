//! [`Client`]: the library's typed, blocking client of a `brig serve`'s sessions (the
//! command line's `brig session ...` is a thin layer over it; so is any program that
//! drives sessions from Rust). Each call is one request on a fresh connection to the
//! server's socket, whose listener is checked first (`client::connect`: root, this uid,
//! the uid in `BRIG_SERVER_UID`, or one given to [`Client::trusting`]); the answer is a
//! typed [`SessionReply`] and a refusal is a [`crate::Error`] of the server's kind (its
//! message escaped for a terminal, as names from a jail are). docs/protocol.md is the
//! contract.
//!
//! ```no_run
//! use brig::serve::{Client, Exec};
//! let client = Client::new("/run/brig.sock");
//! let session = client.create(&Default::default())?;
//! let done = session.exec(&Exec::command(["echo", "hi"]))?;
//! assert_eq!(done.stdout.as_deref(), Some("hi\n"));
//! session.close()?;
//! # Ok::<(), brig::Error>(())
//! ```

use super::protocol::{self, ContextAction, FrameReader, Language, PtySize, Request};
use super::reply::{
    ContextInfo, ExecReply, Exited, FileEntry, Output, Process, SessionInfo, SessionReply,
    WatchEvent,
};
use crate::error::{Error, ErrorKind, Result};
use crate::options::JailOptions;
use crate::units::{Size, Span};
use crate::verdict::printable;
use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};

/// A client of the `brig serve` listening on one socket.
#[derive(Clone, Debug)]
pub struct Client {
    socket: PathBuf,
    /// One more uid trusted to listen on the socket, besides root, this process's own
    /// and `BRIG_SERVER_UID`'s.
    trusted_uid: Option<u32>,
}

/// What a new session is made with; `Default` is the server's defaults.
#[derive(Clone, Debug, Default)]
pub struct Create {
    /// The jail, as for `brig run` (no command); memory, pids and cpus hold for the whole
    /// session.
    pub options: JailOptions,
    pub session_timeout: Option<Span>,
    pub idle_timeout: Option<Span>,
    pub workspace_size: Option<Size>,
    /// Labels, shown and filtered by `session_list`.
    pub metadata: BTreeMap<String, String>,
    /// Secrets the jail may use without seeing them: each value goes to the server (over
    /// its socket) and from there only into requests to its hosts.
    pub secrets: Vec<crate::net::secrets::Given>,
    /// uid/gid 0 mapped too, for commands run as root (`Exec::user`).
    pub root: bool,
}

/// A command or a code cell to run in a session: [`Exec::command`] or [`Exec::code`],
/// with the other fields as struct-update syntax sets them.
#[derive(Clone, Debug, Default)]
pub struct Exec {
    pub command: Vec<String>,
    pub code: Option<String>,
    /// A cell's interpreter (its default context), unless `context` names one.
    pub language: Option<Language>,
    pub context: Option<String>,
    /// A command's standard input.
    pub stdin: Option<String>,
    pub env: Vec<String>,
    pub chdir: Option<PathBuf>,
    pub time_limit: Option<Span>,
    pub output_limit: Option<Size>,
    /// A background process's or terminal's name, usable instead of its pid.
    pub tag: Option<String>,
    /// A command's user: `root` (a session created with `root`), else the jail's.
    pub user: Option<String>,
}

impl Exec {
    /// A command: `argv[0]` found on the jail's PATH.
    pub fn command<S: Into<String>>(argv: impl IntoIterator<Item = S>) -> Exec {
        Exec {
            command: argv.into_iter().map(Into::into).collect(),
            ..Exec::default()
        }
    }

    /// A code cell, in the default context of `language`.
    pub fn code(code: impl Into<String>, language: Language) -> Exec {
        Exec {
            code: Some(code.into()),
            language: Some(language),
            ..Exec::default()
        }
    }
}

/// A session's process, by its pid in the jail or by its tag.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ProcessRef {
    Pid(u32),
    Tag(String),
}

impl ProcessRef {
    fn split(&self) -> (Option<u32>, Option<String>) {
        match self {
            ProcessRef::Pid(pid) => (Some(*pid), None),
            ProcessRef::Tag(tag) => (None, Some(tag.clone())),
        }
    }
}

impl PtySize {
    /// The size of `terminal`; None when it is not a terminal.
    pub fn of_terminal(terminal: BorrowedFd) -> Option<PtySize> {
        crate::sys::window_size(terminal).map(|(cols, rows)| PtySize { cols, rows })
    }
}

/// A session on the server (it need not have been created by this client: any of the
/// caller's sessions, by id).
#[derive(Clone, Debug)]
pub struct Session {
    client: Client,
    id: String,
}

impl Client {
    pub fn new(socket: impl Into<PathBuf>) -> Client {
        Client {
            socket: socket.into(),
            trusted_uid: None,
        }
    }

    /// Trusts a server run by `uid` too: whoever listens on the socket answers for the
    /// sessions, so only root, this process's uid, `BRIG_SERVER_UID`'s or this one's is
    /// (another listener is refused before anything is sent).
    pub fn trusting(mut self, uid: u32) -> Client {
        self.trusted_uid = Some(uid);
        self
    }

    pub fn socket(&self) -> &Path {
        &self.socket
    }

    /// Opens a session.
    pub fn create(&self, create: &Create) -> Result<Session> {
        let mut options = create.options.clone();
        options.profile = None;
        let request = Request::SessionCreate {
            options: Box::new(options),
            session_timeout: create.session_timeout,
            idle_timeout: create.idle_timeout,
            workspace_size: create.workspace_size,
            metadata: create.metadata.clone(),
            secrets: create.secrets.clone(),
            root: create.root,
        };
        match self.request(&request)? {
            SessionReply::Session { session, .. } => Ok(self.session(session)),
            other => Err(unexpected(&other, "session")),
        }
    }

    /// The session `id` (one request checks it exists: any call on it).
    pub fn session(&self, id: impl Into<String>) -> Session {
        Session {
            client: self.clone(),
            id: id.into(),
        }
    }

    /// The caller's sessions (all of them for root), those whose labels hold every pair
    /// of `metadata`.
    pub fn list(&self, metadata: &BTreeMap<String, String>) -> Result<Vec<SessionInfo>> {
        let request = Request::SessionList {
            metadata: metadata.clone(),
        };
        match self.request(&request)? {
            SessionReply::Sessions { sessions } => Ok(sessions),
            other => Err(unexpected(&other, "sessions")),
        }
    }

    /// The server's status.
    pub fn status(&self) -> Result<protocol::Status> {
        let mut frames = self.open(&Request::Status)?;
        let body = frames.next_body()?;
        match serde_json::from_slice::<protocol::Reply>(&body) {
            Ok(protocol::Reply::Status(status)) => Ok(status),
            Ok(protocol::Reply::Error { message, kind, .. }) => Err(server_error(&message, kind)),
            _ => Err(Error::setup(
                "brig serve answered a status with something else",
            )),
        }
    }

    /// One request, one reply; an error frame is this side's error, of its kind.
    pub fn request(&self, request: &Request) -> Result<SessionReply> {
        self.open(request)?.next_reply()
    }

    /// Sends `request` and returns the connection, to read its frames one by one (a
    /// streamed exec, `session_connect`, a streamed watcher).
    pub fn open(&self, request: &Request) -> Result<Frames> {
        let stream = self.send(request)?;
        Ok(Frames {
            socket: self.socket.clone(),
            stream,
            reader: FrameReader::replies(),
        })
    }

    /// A connection with `request` sent on it.
    fn send(&self, request: &Request) -> Result<UnixStream> {
        let message = versioned(request)?;
        let stream = super::client::connect_trusting(&self.socket, self.trusted_uid)?;
        protocol::write_frame(stream.as_fd(), &message, &[])?;
        Ok(stream)
    }
}

/// The frames of one connection, as they come.
pub struct Frames {
    socket: PathBuf,
    stream: UnixStream,
    reader: FrameReader,
}

impl Frames {
    fn next_body(&mut self) -> Result<Vec<u8>> {
        let (body, _) = self.reader.read_blocking(&self.stream)?.ok_or_else(|| {
            Error::setup(format!(
                "--server {}: the server closed the connection without an answer",
                self.socket.display()
            ))
        })?;
        Ok(body)
    }

    /// The next frame as it is, an error frame too (on a stream that has started, the
    /// session's end); None when the server closed the connection.
    pub fn next_frame(&mut self) -> Result<Option<SessionReply>> {
        match self.reader.read_blocking(&self.stream)? {
            Some((body, _)) => parse(&body).map(Some),
            None => Ok(None),
        }
    }

    /// The next frame with the descriptors that came with it (`session_dial`'s
    /// connection); an error frame, or the connection's end, is this side's error.
    pub fn next_reply_with_fds(&mut self) -> Result<(SessionReply, Vec<OwnedFd>)> {
        let (body, fds) = self.reader.read_blocking(&self.stream)?.ok_or_else(|| {
            Error::setup(format!(
                "--server {}: the server closed the connection without an answer",
                self.socket.display()
            ))
        })?;
        Ok((checked(parse(&body)?)?, fds))
    }

    /// The next frame; an error frame, or the connection's end, is this side's error.
    pub fn next_reply(&mut self) -> Result<SessionReply> {
        let body = self.next_body()?;
        checked(parse(&body)?)
    }

    /// Reads `output` frames, handing each to `on_output`, up to the first other frame:
    /// the stream's end (an `exec`, an `exited`), or a `process` first for a connect.
    pub fn until_other(
        &mut self,
        on_output: &mut dyn FnMut(&Output) -> Result<()>,
    ) -> Result<SessionReply> {
        loop {
            match self.next_reply()? {
                SessionReply::Output(output) => on_output(&output)?,
                other => return Ok(other),
            }
        }
    }
}

/// The frames as they come, up to the connection's end (an error frame is an item as
/// it is: on a stream that has started, the session's end).
impl Iterator for Frames {
    type Item = Result<SessionReply>;

    fn next(&mut self) -> Option<Result<SessionReply>> {
        self.next_frame().transpose()
    }
}

impl AsFd for Frames {
    /// The connection, to poll for the next frame (with [`Frames::has_frame`]).
    fn as_fd(&self) -> BorrowedFd<'_> {
        self.stream.as_fd()
    }
}

impl Frames {
    /// Another handle on the connection: shutting it down (`Shutdown::Both`) from
    /// another thread hangs up, which ends a reader blocked in [`Frames::next_frame`]
    /// (a stream's server side then lets the process go on, or drops the watcher).
    pub fn hang_up_handle(&self) -> Result<UnixStream> {
        self.stream
            .try_clone()
            .map_err(|err| Error::setup(format!("duplicate a connection to brig serve: {err}")))
    }

    /// Whether a whole frame is already read in (a poll of the connection would not
    /// say so).
    pub fn has_frame(&self) -> bool {
        self.reader.has_frame()
    }
}

/// A file of the workspace on its way (`session_read`): `length` raw bytes.
pub struct Reading {
    path: String,
    length: u64,
    /// Bytes read so far through its `Read`.
    read: u64,
    stream: UnixStream,
}

impl Reading {
    /// The bytes the server sends.
    pub fn length(&self) -> u64 {
        self.length
    }

    /// Another handle on the connection: shutting it down from another thread hangs
    /// up, which ends a read blocked on it.
    pub fn hang_up_handle(&self) -> Result<UnixStream> {
        self.stream
            .try_clone()
            .map_err(|err| Error::setup(format!("duplicate a connection to brig serve: {err}")))
    }

    /// Copies them into `sink` (flushed); an error when fewer came (the file shrank
    /// while it was read, or the session ended).
    pub fn copy_to(&mut self, sink: &mut dyn Write) -> Result<u64> {
        let path = &self.path;
        let length = self.length;
        let copied = std::io::copy(&mut (&self.stream).take(length - self.read), sink)
            .map(|count| count + self.read)
            .and_then(|count| sink.flush().map(|()| count))
            .map_err(|err| Error::setup(format!("session_read {path:?}: {err}")))?;
        if copied != length {
            return Err(Error::setup(format!(
                "session_read {path:?}: the connection ended after {copied} of {length} bytes (the file shrank while it was read, or the session ended)"
            )));
        }
        Ok(copied)
    }
}

/// The bytes as they come, up to `length` (then 0: the end; a connection that ends
/// sooner is an `UnexpectedEof` error, the file having shrunk or the session ended).
impl Read for Reading {
    fn read(&mut self, buffer: &mut [u8]) -> std::io::Result<usize> {
        let left = self.length - self.read;
        if left == 0 || buffer.is_empty() {
            return Ok(0);
        }
        let want = buffer
            .len()
            .min(usize::try_from(left).unwrap_or(usize::MAX));
        let count = (&self.stream).read(&mut buffer[..want])?;
        if count == 0 {
            return Err(std::io::Error::new(
                std::io::ErrorKind::UnexpectedEof,
                format!(
                    "session_read {:?}: the connection ended after {} of {} bytes (the file shrank while it was read, or the session ended)",
                    self.path, self.read, self.length
                ),
            ));
        }
        self.read += count as u64;
        Ok(count)
    }
}

impl Session {
    pub fn id(&self) -> &str {
        &self.id
    }

    pub fn client(&self) -> &Client {
        &self.client
    }

    fn exec_request(
        &self,
        exec: &Exec,
        stream: bool,
        background: bool,
        pty: Option<PtySize>,
    ) -> Request {
        Request::SessionExec {
            session: self.id.clone(),
            command: exec.command.clone(),
            code: exec.code.clone(),
            language: exec.language,
            context: exec.context.clone(),
            stdin: exec.stdin.clone(),
            env: exec.env.clone(),
            chdir: exec.chdir.clone(),
            time_limit: exec.time_limit,
            output_limit: exec.output_limit,
            stream,
            background,
            tag: exec.tag.clone(),
            pty,
            user: exec.user.clone(),
        }
    }

    /// Runs a command or a cell and waits for its end: the verdict, its output, a cell's
    /// results.
    pub fn exec(&self, exec: &Exec) -> Result<ExecReply> {
        match self
            .client
            .request(&self.exec_request(exec, false, false, None))?
        {
            SessionReply::Exec(reply) => Ok(*reply),
            other => Err(unexpected(&other, "exec")),
        }
    }

    /// Runs a command or a cell, handing each chunk of output to `on_output` as it is
    /// produced; then its end (without `stdout`/`stderr`: they were streamed).
    pub fn exec_stream(
        &self,
        exec: &Exec,
        mut on_output: impl FnMut(&Output) -> Result<()>,
    ) -> Result<ExecReply> {
        let mut frames = self
            .client
            .open(&self.exec_request(exec, true, false, None))?;
        match frames.until_other(&mut on_output)? {
            SessionReply::Exec(reply) => Ok(*reply),
            other => Err(unexpected(&other, "exec")),
        }
    }

    /// Runs a code cell in context `context` (an id from [`Session::create_context`],
    /// or a language's default context: `python`, `node`, `bash`) and waits for its
    /// answer: its `cell` has the result, rich results and error.
    pub fn run_code(&self, code: &str, context: &str) -> Result<ExecReply> {
        let default = [
            ("python", Language::Python),
            ("node", Language::Node),
            ("bash", Language::Bash),
        ]
        .into_iter()
        .find(|(name, _)| *name == context);
        let exec = match default {
            Some((_, language)) => Exec::code(code, language),
            None => Exec {
                code: Some(code.into()),
                context: Some(context.into()),
                ..Exec::default()
            },
        };
        self.exec(&exec)
    }

    /// Starts a command in the background: its `process` at once.
    pub fn start(&self, exec: &Exec) -> Result<Process> {
        self.started(self.exec_request(exec, false, true, None))
    }

    /// Starts a program (`exec.command`; none: the jail's shell) on a terminal of the
    /// jail's own devpts, `size` big.
    pub fn pty(&self, exec: &Exec, size: PtySize) -> Result<Process> {
        self.started(self.exec_request(exec, false, false, Some(size)))
    }

    fn started(&self, request: Request) -> Result<Process> {
        match self.client.request(&request)? {
            SessionReply::Process(process) => Ok(*process),
            other => Err(unexpected(&other, "process")),
        }
    }

    /// The running processes and the last ended background ones.
    pub fn ps(&self) -> Result<Vec<Process>> {
        let request = Request::SessionPs {
            session: self.id.clone(),
        };
        match self.client.request(&request)? {
            SessionReply::Processes { processes } => {
                Ok(processes.into_iter().map(|listed| listed.process).collect())
            }
            other => Err(unexpected(&other, "processes")),
        }
    }

    /// Attaches to a process: its `process` frame is read, the connection is returned
    /// with its output (the backlog, then live) and its `exited` frame to come.
    pub fn connect(&self, which: &ProcessRef) -> Result<(Process, Frames)> {
        let (pid, tag) = which.split();
        let mut frames = self.client.open(&Request::SessionConnect {
            session: self.id.clone(),
            pid,
            tag,
        })?;
        match frames.next_reply()? {
            SessionReply::Process(process) => Ok((*process, frames)),
            other => Err(unexpected(&other, "process")),
        }
    }

    /// Attaches to a process and hands its output to `on_output` until it ends.
    pub fn attach(
        &self,
        which: &ProcessRef,
        mut on_output: impl FnMut(&Output) -> Result<()>,
    ) -> Result<Exited> {
        let (_, mut frames) = self.connect(which)?;
        match frames.until_other(&mut on_output)? {
            SessionReply::Exited(exited) => Ok(*exited),
            other => Err(unexpected(&other, "exited")),
        }
    }

    /// Writes `data` to a process's stdin (text as `data`, other bytes as `base64`),
    /// closing it after with `close`; how many bytes were queued.
    pub fn stdin(&self, which: &ProcessRef, data: &[u8], close: bool) -> Result<usize> {
        use base64::Engine;
        let (pid, tag) = which.split();
        let (text, base64) = match std::str::from_utf8(data) {
            Ok(text) => (text.to_string(), None),
            Err(_) => (
                String::new(),
                Some(base64::engine::general_purpose::STANDARD.encode(data)),
            ),
        };
        let request = Request::SessionStdin {
            session: self.id.clone(),
            pid,
            tag,
            data: text,
            base64,
            close,
        };
        match self.client.request(&request)? {
            SessionReply::Stdin { written, .. } => Ok(written),
            other => Err(unexpected(&other, "stdin")),
        }
    }

    /// Sends a signal (a name, `TERM` or `SIGTERM`, or a number) to a process's group;
    /// the signal's name.
    pub fn signal(&self, which: &ProcessRef, signal: &str) -> Result<String> {
        let (pid, tag) = which.split();
        let signal = signal
            .parse::<i64>()
            .map_or_else(|_| signal.into(), serde_json::Value::from);
        let request = Request::SessionSignal {
            session: self.id.clone(),
            pid,
            tag,
            signal,
        };
        match self.client.request(&request)? {
            SessionReply::Signaled { signal, .. } => Ok(signal),
            other => Err(unexpected(&other, "signaled")),
        }
    }

    /// SIGKILL to a process's group.
    pub fn kill(&self, which: &ProcessRef) -> Result<()> {
        let (pid, tag) = which.split();
        let request = Request::SessionKill {
            session: self.id.clone(),
            pid,
            tag,
        };
        match self.client.request(&request)? {
            SessionReply::Signaled { .. } => Ok(()),
            other => Err(unexpected(&other, "signaled")),
        }
    }

    /// A terminal's new size.
    pub fn resize(&self, which: &ProcessRef, size: PtySize) -> Result<()> {
        let (pid, tag) = which.split();
        let request = Request::SessionResize {
            session: self.id.clone(),
            pid,
            tag,
            cols: size.cols,
            rows: size.rows,
        };
        match self.client.request(&request)? {
            SessionReply::Resized { .. } => Ok(()),
            other => Err(unexpected(&other, "resized")),
        }
    }

    /// Starts a code context (an interpreter with state of its own).
    pub fn create_context(&self, language: Language, cwd: Option<PathBuf>) -> Result<ContextInfo> {
        self.context_request(ContextAction::Create, Some(language), cwd, None)
    }

    /// The session's contexts.
    pub fn contexts(&self) -> Result<Vec<ContextInfo>> {
        let request = self.context(ContextAction::List, None, None, None);
        match self.client.request(&request)? {
            SessionReply::Contexts { contexts } => Ok(contexts),
            other => Err(unexpected(&other, "contexts")),
        }
    }

    /// A fresh interpreter for context `id` (its state is lost).
    pub fn restart_context(&self, id: &str) -> Result<ContextInfo> {
        self.context_request(ContextAction::Restart, None, None, Some(id.into()))
    }

    /// Kills context `id`'s interpreter and forgets it.
    pub fn remove_context(&self, id: &str) -> Result<()> {
        let request = self.context(ContextAction::Remove, None, None, Some(id.into()));
        match self.client.request(&request)? {
            SessionReply::ContextRemoved { .. } => Ok(()),
            other => Err(unexpected(&other, "context_removed")),
        }
    }

    fn context(
        &self,
        action: ContextAction,
        language: Option<Language>,
        cwd: Option<PathBuf>,
        context: Option<String>,
    ) -> Request {
        Request::SessionContext {
            session: self.id.clone(),
            action,
            language,
            cwd,
            context,
        }
    }

    fn context_request(
        &self,
        action: ContextAction,
        language: Option<Language>,
        cwd: Option<PathBuf>,
        context: Option<String>,
    ) -> Result<ContextInfo> {
        let request = self.context(action, language, cwd, context);
        match self.client.request(&request)? {
            SessionReply::Context { context } => Ok(context),
            other => Err(unexpected(&other, "context")),
        }
    }

    /// Reads at most `length` bytes (at most and by default 512 KiB) of `path` from
    /// `offset`: the bytes, and the whole file's size.
    pub fn get(&self, path: &str, offset: u64, length: Option<u64>) -> Result<(Vec<u8>, u64)> {
        use base64::Engine;
        match self.client.request(&Request::SessionGet {
            session: self.id.clone(),
            path: path.into(),
            offset,
            length,
        })? {
            SessionReply::Get { data, size, .. } => {
                let bytes = base64::engine::general_purpose::STANDARD
                    .decode(data)
                    .map_err(|err| {
                        Error::setup(format!(
                            "brig serve sent file data that is not base64: {err}"
                        ))
                    })?;
                Ok((bytes, size))
            }
            other => Err(unexpected(&other, "get")),
        }
    }

    /// Writes `data` (at most 512 KiB a request) to `path` in the workspace, or appends
    /// it; the file's size now.
    pub fn put(&self, path: &str, data: &[u8], append: bool) -> Result<u64> {
        use base64::Engine;
        let request = Request::SessionPut {
            session: self.id.clone(),
            path: path.into(),
            data: base64::engine::general_purpose::STANDARD.encode(data),
            append,
        };
        match self.client.request(&request)? {
            SessionReply::Put { size, .. } => Ok(size),
            other => Err(unexpected(&other, "put")),
        }
    }

    /// Streams `size` bytes from `source` into `path` (replaced, parents created): any
    /// size, through the server's splice; the bytes written.
    pub fn write(&self, path: &str, size: u64, source: &mut dyn Read) -> Result<u64> {
        let request = Request::SessionWrite {
            session: self.id.clone(),
            path: path.into(),
            size,
        };
        let mut stream = self.client.send(&request)?;
        match reply_on(&stream, &self.client.socket)? {
            SessionReply::Ready { .. } => {}
            other => return Err(unexpected(&other, "ready")),
        }
        let sent = std::io::copy(&mut source.take(size), &mut stream);
        // A runner that stopped reading (a full workspace) answers why; a source that
        // ran short is this side's error.
        let reply = reply_on(&stream, &self.client.socket)?;
        let sent = sent.map_err(|err| {
            Error::input(format!(
                "session_write {path:?}: sending its bytes failed: {err}"
            ))
        })?;
        if sent != size {
            return Err(Error::input(format!(
                "session_write {path:?}: the source gave {sent} of the {size} bytes announced"
            )));
        }
        match reply {
            SessionReply::Written { size, .. } => Ok(size),
            other => Err(unexpected(&other, "written")),
        }
    }

    /// Streams `path` (from `offset`, `length` bytes or to its end) into `sink`; the
    /// bytes copied, checked against what the server said it would send.
    pub fn read(
        &self,
        path: &str,
        offset: u64,
        length: Option<u64>,
        sink: &mut dyn Write,
    ) -> Result<u64> {
        self.open_read(path, offset, length)?.copy_to(sink)
    }

    /// Asks for `path` (from `offset`, `length` bytes or to its end): once the server
    /// has said how many bytes it sends, the stream of them.
    pub fn open_read(&self, path: &str, offset: u64, length: Option<u64>) -> Result<Reading> {
        let request = Request::SessionRead {
            session: self.id.clone(),
            path: path.into(),
            offset,
            length,
        };
        let stream = self.client.send(&request)?;
        match reply_on(&stream, &self.client.socket)? {
            SessionReply::Reading { length, .. } => Ok(Reading {
                path: path.into(),
                length,
                read: 0,
                stream,
            }),
            other => Err(unexpected(&other, "reading")),
        }
    }

    /// What `path` is.
    pub fn stat(&self, path: &str) -> Result<FileEntry> {
        match self.client.request(&Request::SessionStat {
            session: self.id.clone(),
            path: path.into(),
        })? {
            SessionReply::Stat { entry } => Ok(entry),
            other => Err(unexpected(&other, "stat")),
        }
    }

    /// A directory's entries (`depth` levels deep, with their paths), and whether the
    /// listing was cut at its bound.
    pub fn ls(&self, path: &str, depth: Option<u32>) -> Result<(Vec<FileEntry>, bool)> {
        match self.client.request(&Request::SessionLs {
            session: self.id.clone(),
            path: path.into(),
            depth,
        })? {
            SessionReply::Ls {
                entries, truncated, ..
            } => Ok((entries, truncated)),
            other => Err(unexpected(&other, "ls")),
        }
    }

    pub fn exists(&self, path: &str) -> Result<bool> {
        match self.client.request(&Request::SessionExists {
            session: self.id.clone(),
            path: path.into(),
        })? {
            SessionReply::Exists { exists, .. } => Ok(exists),
            other => Err(unexpected(&other, "exists")),
        }
    }

    /// Makes a directory (with its parents); whether it was made (false: it was there).
    pub fn mkdir(&self, path: &str) -> Result<bool> {
        match self.client.request(&Request::SessionMkdir {
            session: self.id.clone(),
            path: path.into(),
            parents: true,
        })? {
            SessionReply::Mkdir { created, .. } => Ok(created),
            other => Err(unexpected(&other, "mkdir")),
        }
    }

    /// Moves a file or directory (a file at the destination is replaced).
    pub fn rename(&self, source: &str, destination: &str) -> Result<()> {
        match self.client.request(&Request::SessionRename {
            session: self.id.clone(),
            source: source.into(),
            destination: destination.into(),
        })? {
            SessionReply::Renamed { .. } => Ok(()),
            other => Err(unexpected(&other, "renamed")),
        }
    }

    /// Removes a file, a symlink or a directory tree; the entries removed.
    pub fn remove(&self, path: &str) -> Result<u64> {
        match self.client.request(&Request::SessionRemove {
            session: self.id.clone(),
            path: path.into(),
        })? {
            SessionReply::Removed { removed, .. } => Ok(removed),
            other => Err(unexpected(&other, "removed")),
        }
    }

    /// A polled watcher of a directory; its id.
    pub fn watch(&self, path: &str, recursive: bool) -> Result<String> {
        match self
            .client
            .request(&self.watch_request(path, recursive, false))?
        {
            SessionReply::Watcher { watcher, .. } => Ok(watcher),
            other => Err(unexpected(&other, "watcher")),
        }
    }

    /// What changed since the last call, and whether some changes were lost.
    pub fn watch_events(&self, watcher: &str) -> Result<(Vec<WatchEvent>, bool)> {
        match self.client.request(&Request::SessionWatchEvents {
            session: self.id.clone(),
            watcher: watcher.into(),
        })? {
            SessionReply::Events {
                events, overflow, ..
            } => Ok((events, overflow)),
            other => Err(unexpected(&other, "events")),
        }
    }

    pub fn unwatch(&self, watcher: &str) -> Result<()> {
        match self.client.request(&Request::SessionUnwatch {
            session: self.id.clone(),
            watcher: watcher.into(),
        })? {
            SessionReply::Unwatched { .. } => Ok(()),
            other => Err(unexpected(&other, "unwatched")),
        }
    }

    /// A streamed watcher: its id once its watches are in place, and the connection
    /// whose frames are its `watch_event`s, then its `watch_end` (or, at the session's
    /// end, an error frame: [`Frames::next_frame`] gives it as it is).
    pub fn watch_stream(&self, path: &str, recursive: bool) -> Result<(String, Frames)> {
        let mut frames = self
            .client
            .open(&self.watch_request(path, recursive, true))?;
        match frames.next_reply()? {
            SessionReply::Watcher { watcher, .. } => Ok((watcher, frames)),
            other => Err(unexpected(&other, "watcher")),
        }
    }

    fn watch_request(&self, path: &str, recursive: bool, stream: bool) -> Request {
        Request::SessionWatch {
            session: self.id.clone(),
            path: path.into(),
            recursive,
            stream,
        }
    }

    /// Replaces a `--net filtered` session's rules and pins; how many open connections
    /// the new rules cut.
    pub fn set_network(
        &self,
        allow_net: Vec<String>,
        deny_net: Vec<String>,
        add_host: Vec<String>,
    ) -> Result<u64> {
        self.network(allow_net, deny_net, Some(add_host))
    }

    /// Replaces a `--net filtered` session's `allow-net` and `deny-net` rules, its pins
    /// (the server's `--add-host` and its own) kept; how many open connections the new
    /// rules cut.
    pub fn set_rules(&self, allow_net: Vec<String>, deny_net: Vec<String>) -> Result<u64> {
        self.network(allow_net, deny_net, None)
    }

    fn network(
        &self,
        allow_net: Vec<String>,
        deny_net: Vec<String>,
        add_host: Option<Vec<String>>,
    ) -> Result<u64> {
        match self.client.request(&Request::SessionNetwork {
            session: self.id.clone(),
            allow_net,
            deny_net,
            add_host,
        })? {
            SessionReply::Network { cut, .. } => Ok(cut),
            other => Err(unexpected(&other, "network")),
        }
    }

    /// Sets the session's end to now + `timeout`.
    pub fn set_timeout(&self, timeout: Span) -> Result<()> {
        match self.client.request(&Request::SessionSetTimeout {
            session: self.id.clone(),
            timeout,
        })? {
            SessionReply::Timeout { .. } => Ok(()),
            other => Err(unexpected(&other, "timeout")),
        }
    }

    /// A TCP connection to `port` of the session's own loopback: a server a program of
    /// the session runs there (on 0.0.0.0, 127.0.0.1 or ::), reached without any network
    /// rule (`session_dial`; the jail's init connects inside the jail and the descriptor
    /// comes back with the reply). Blocking; the connection may still be being accepted
    /// (a listener's full backlog): its first read or write waits for that.
    pub fn dial(&self, port: u16) -> Result<std::net::TcpStream> {
        let mut frames = self.client.open(&Request::SessionDial {
            session: self.id.clone(),
            port: port.into(),
        })?;
        match frames.next_reply_with_fds()? {
            (SessionReply::Dialed { .. }, fds) if fds.len() == 1 => {
                let connection =
                    std::net::TcpStream::from(fds.into_iter().next().expect("one descriptor"));
                connection.set_nonblocking(false).map_err(|err| {
                    Error::setup(format!(
                        "make the connection to port {port} blocking: {err}"
                    ))
                })?;
                Ok(connection)
            }
            (SessionReply::Dialed { .. }, fds) => Err(Error::setup(format!(
                "brig serve answered session_dial with {} descriptors, not the connection's one",
                fds.len()
            ))),
            (other, _) => Err(unexpected(&other, "dialed")),
        }
    }

    /// Pauses the session: every process of its jail frozen where it is, its timeout and
    /// idle timer stopped. Whether it was paused already.
    pub fn pause(&self) -> Result<bool> {
        match self.client.request(&Request::SessionPause {
            session: self.id.clone(),
        })? {
            SessionReply::Paused { already, .. } => Ok(already),
            other => Err(unexpected(&other, "paused")),
        }
    }

    /// Resumes a paused session: its `resumed` frame (`already`: it was not paused; how
    /// long it was; its end, moved by that).
    pub fn resume(&self) -> Result<SessionReply> {
        match self.client.request(&Request::SessionResume {
            session: self.id.clone(),
        })? {
            reply @ SessionReply::Resumed { .. } => Ok(reply),
            other => Err(unexpected(&other, "resumed")),
        }
    }

    /// The session's resource use now (CPU, memory, workspace).
    pub fn stats(&self) -> Result<crate::serve::reply::SessionStats> {
        match self.client.request(&Request::SessionStats {
            session: self.id.clone(),
        })? {
            SessionReply::Stats(stats) => Ok(*stats),
            other => Err(unexpected(&other, "stats")),
        }
    }

    /// Closes the session: its jail, processes and workspace are destroyed.
    pub fn close(&self) -> Result<()> {
        match self.client.request(&Request::SessionClose {
            session: self.id.clone(),
        })? {
            SessionReply::Closed { .. } => Ok(()),
            other => Err(unexpected(&other, "closed")),
        }
    }
}

/// A request as a client sends it: with `"brig"`, the protocol's version.
pub(super) fn versioned(request: &Request) -> Result<serde_json::Value> {
    let mut message = serde_json::to_value(request)
        .map_err(|err| Error::setup(format!("encode a request: {err}")))?;
    message["brig"] = protocol::VERSION.into();
    Ok(message)
}

fn parse(body: &[u8]) -> Result<SessionReply> {
    serde_json::from_slice(body).map_err(|err| {
        Error::setup(format!(
            "brig serve sent an answer this client does not understand: {err}"
        ))
    })
}

/// The frame, or this side's error for an error frame (its message escaped: a server's
/// message may echo names from a jail).
fn checked(frame: SessionReply) -> Result<SessionReply> {
    match frame {
        SessionReply::Error { message, kind, .. } => Err(server_error(&message, kind)),
        frame => Ok(frame),
    }
}

fn server_error(message: &str, kind: ErrorKind) -> Error {
    Error::of_kind(kind, printable(message))
}

fn unexpected(frame: &SessionReply, due: &str) -> Error {
    Error::setup(format!(
        "brig serve answered with a `{}` frame where `{due}` was due",
        printable(&frame.kind())
    ))
}

/// One frame read byte-exact from `stream` (no read-ahead: raw file data may follow).
fn reply_on(mut stream: &UnixStream, socket: &Path) -> Result<SessionReply> {
    let gone = |err: std::io::Error| {
        Error::setup(format!(
            "--server {}: the server closed the connection without an answer ({err})",
            socket.display()
        ))
    };
    let mut length = [0u8; 4];
    stream.read_exact(&mut length).map_err(gone)?;
    let length = u32::from_be_bytes(length) as usize;
    if length > protocol::MAX_REPLY {
        return Err(Error::setup(format!(
            "brig serve sent a frame of {length} bytes"
        )));
    }
    let mut body = vec![0u8; length];
    stream.read_exact(&mut body).map_err(gone)?;
    checked(parse(&body)?)
}
