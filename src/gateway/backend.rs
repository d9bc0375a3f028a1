//! Every call the gateway makes to the `brig serve` it fronts, in one place, on the
//! library's typed blocking client (`serve::Client`, one request per unix-socket
//! connection; docs/protocol.md). The calls block, so the async side runs them with
//! `spawn_blocking`, and a stream (a process's output, a watcher, a file) gets a thread of
//! its own that hands what it reads over a bounded channel. The sandbox's processes are
//! typed (`serve::reply::Process`); listings, entries and a stream's frames are handed on
//! as the protocol's JSON, which the HTTP side maps field by field.

use crate::error::{Error, ErrorKind};
use crate::options::JailOptions;
use crate::serve::protocol::{PtySize, Request};
use crate::serve::reply::{Process, SessionReply};
use crate::serve::{Client, Create, Exec, Frames, ProcessRef, Reading, Session};
use crate::units::Span;
use serde_json::Value;
use std::collections::BTreeMap;
use std::os::unix::net::UnixStream;
use std::path::PathBuf;
use std::time::Duration;
use tokio::sync::mpsc;

/// How many frames of a stream wait for the HTTP side; past it the reading thread stops
/// reading, and the server keeps (then drops and counts) the rest, as for any slow client.
const STREAM_FRAMES: usize = 64;

/// Why a call failed, as the HTTP side needs to tell it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Failure {
    /// The session (the sandbox) does not exist (any more): killed, or at its end.
    Gone,
    /// A process or a file does not exist (any more).
    NotFound,
    /// The server refused the request's content (`bad_input`).
    BadInput,
    /// The server could not be reached, or broke off.
    Unavailable,
    /// Anything else the server reported.
    Server,
}

/// A failed call: what kind, and the server's one-line message.
#[derive(Clone, Debug)]
pub struct BackendError {
    pub failure: Failure,
    pub message: String,
}

impl BackendError {
    fn unavailable(message: String) -> BackendError {
        BackendError {
            failure: Failure::Unavailable,
            message,
        }
    }
}

impl From<Error> for BackendError {
    fn from(err: Error) -> BackendError {
        let message = err.to_string();
        BackendError {
            failure: classify(err.kind(), &message),
            message,
        }
    }
}

impl std::fmt::Display for BackendError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.message)
    }
}

pub type Outcome<T> = std::result::Result<T, BackendError>;

/// What a new session is made of.
pub struct NewSession {
    pub timeout: Duration,
    pub metadata: BTreeMap<String, String>,
    /// Its jail (`create::sandbox_options`).
    pub options: JailOptions,
    /// Exactly these `allow-net` and `deny-net` rules, set once it is made (the
    /// server's `add-host` pins kept): a create's options add to the server's rules,
    /// `session_network` replaces them.
    pub only_rules: Option<super::create::Rules>,
    /// The tenant's `--tenant-secrets`.
    pub secrets: Vec<crate::net::secrets::Given>,
}

/// A command to start in the background.
pub struct Start {
    pub argv: Vec<String>,
    pub env: Vec<String>,
    pub chdir: Option<PathBuf>,
    pub tag: Option<String>,
    pub pty: Option<PtySize>,
    /// As root inside (`user="root"`; the sandbox maps it, [`Backend::maps_root`]).
    pub as_root: bool,
}

/// Which process a request is for.
pub type Selector = ProcessRef;

/// The server on one socket.
#[derive(Clone, Debug)]
pub struct Backend {
    client: Client,
    /// Whether the server maps root into its sessions (its status' `session_root`),
    /// asked once it answers.
    root: std::sync::Arc<std::sync::OnceLock<bool>>,
}

impl Backend {
    pub fn new(socket: PathBuf) -> Backend {
        Backend {
            client: Client::new(socket),
            root: Default::default(),
        }
    }

    /// Whether sandboxes are created with `root` (uid 0 inside for `user="root"`): the
    /// server runs as root with per-jail host uids. A server that does not answer yet
    /// is asked again next time.
    pub fn maps_root(&self) -> bool {
        if let Some(root) = self.root.get() {
            return *root;
        }
        match self.client.status() {
            Ok(status) => *self.root.get_or_init(|| status.session_root),
            Err(_) => false,
        }
    }

    fn session(&self, id: &str) -> Session {
        self.client.session(id)
    }

    /// Whether the server answers (its `status`).
    pub fn check(&self) -> Outcome<()> {
        self.client.status().map(drop).map_err(Into::into)
    }

    /// The server's status (its sessions, their cap, its pool, whether it drains).
    pub fn status(&self) -> Outcome<crate::serve::protocol::Status> {
        self.client.status().map_err(Into::into)
    }

    pub fn create(&self, new: NewSession) -> Outcome<String> {
        let session = self.client.create(&Create {
            options: new.options,
            session_timeout: Some(Span(new.timeout)),
            metadata: new.metadata,
            secrets: new.secrets,
            root: self.maps_root(),
            ..Create::default()
        })?;
        if let Some(rules) = new.only_rules
            && let Err(err) = self.set_rules(session.id(), rules)
        {
            // Nothing has run in it yet: it goes, and the create is refused.
            let _ = session.close();
            return Err(err);
        }
        Ok(session.id().to_string())
    }

    /// Exactly these rules for a filtered session from now on, its pins kept; a refusal
    /// names `network.denyOut` (a deny rule's) or `network.allowOut`.
    pub fn set_rules(&self, session: &str, rules: super::create::Rules) -> Outcome<()> {
        self.session(session)
            .set_rules(rules.allow, rules.deny)
            .map(drop)
            .map_err(|err| {
                let mut err = BackendError::from(err);
                let field = match err.message.contains("--deny-net") {
                    true => "network.denyOut",
                    false => "network.allowOut",
                };
                err.message = format!("{field}: {}", err.message);
                err
            })
    }

    /// The sessions whose metadata hold every pair of `metadata` (`session_list`'s
    /// entries, as the protocol writes them).
    pub fn list(&self, metadata: BTreeMap<String, String>) -> Outcome<Vec<Value>> {
        let sessions = self.client.list(&metadata)?;
        Ok(sessions.iter().map(json).collect())
    }

    /// Closes a session: answered once the server has forgotten it (it is in no
    /// `session_list` from then on).
    pub fn close(&self, session: &str) -> Outcome<()> {
        Ok(self.session(session).close()?)
    }

    pub fn set_timeout(&self, session: &str, timeout: Duration) -> Outcome<()> {
        Ok(self.session(session).set_timeout(Span(timeout))?)
    }

    /// Pauses a session (its jail frozen); whether it was paused already.
    pub fn pause(&self, session: &str) -> Outcome<bool> {
        Ok(self.session(session).pause()?)
    }

    /// Resumes a paused session: how long it was paused, in ms (None: it ran already).
    pub fn resume(&self, session: &str) -> Outcome<Option<u64>> {
        Ok(match self.session(session).resume()? {
            SessionReply::Resumed {
                already: false,
                paused_ms,
                ..
            } => Some(paused_ms),
            _ => None,
        })
    }

    /// A session's resource use now (`session_stats`).
    pub fn stats(&self, session: &str) -> Outcome<crate::serve::reply::SessionStats> {
        Ok(self.session(session).stats()?)
    }

    /// The environment a session's commands start with: `env -0` run in it.
    pub fn environment(&self, session: &str) -> Outcome<Vec<(String, String)>> {
        let reply = self.session(session).exec(&Exec::command(["env", "-0"]))?;
        let text = reply.stdout.unwrap_or_default();
        Ok(text
            .split('\0')
            .filter_map(|pair| pair.split_once('='))
            .map(|(name, value)| (name.to_string(), value.to_string()))
            .collect())
    }

    /// Starts a command in the background (or on a terminal): its process.
    pub fn start(&self, session: &str, start: Start) -> Outcome<Process> {
        let exec = Exec {
            env: start.env,
            chdir: start.chdir,
            tag: start.tag,
            user: start.as_root.then(|| "root".to_string()),
            ..Exec::command(start.argv)
        };
        let session = self.session(session);
        Ok(match start.pty {
            Some(size) => session.pty(&exec, size)?,
            None => session.start(&exec)?,
        })
    }

    /// The session's processes (running, and the last ended ones).
    pub fn processes(&self, session: &str) -> Outcome<Vec<Process>> {
        Ok(self.session(session).ps()?)
    }

    /// Writes `data` to a process's stdin (or its terminal), then closes it with `close`.
    pub fn stdin(
        &self,
        session: &str,
        process: &Selector,
        data: &[u8],
        close: bool,
    ) -> Outcome<()> {
        self.session(session).stdin(process, data, close)?;
        Ok(())
    }

    pub fn signal(&self, session: &str, process: &Selector, signal: i32) -> Outcome<()> {
        self.session(session).signal(process, &signal.to_string())?;
        Ok(())
    }

    pub fn resize(&self, session: &str, process: &Selector, size: PtySize) -> Outcome<()> {
        Ok(self.session(session).resize(process, size)?)
    }

    /// A connection to `port` of the session's loopback, opened inside its jail
    /// (`session_dial`): a server a program of the sandbox runs.
    pub fn dial(&self, session: &str, port: u16) -> Outcome<std::net::TcpStream> {
        Ok(self.session(session).dial(port)?)
    }

    /// A path's entry (`session_stat`'s, as the protocol writes it).
    pub fn stat(&self, session: &str, path: &str) -> Outcome<Value> {
        Ok(json(&self.session(session).stat(path)?))
    }

    /// A directory's entries, `depth` levels deep (`session_ls`).
    pub fn list_dir(&self, session: &str, path: &str, depth: u32) -> Outcome<Vec<Value>> {
        let (entries, _) = self.session(session).ls(path, Some(depth))?;
        Ok(entries.iter().map(json).collect())
    }

    /// Makes a directory and its parents; whether it was made (false: it was there).
    pub fn make_dir(&self, session: &str, path: &str) -> Outcome<bool> {
        Ok(self.session(session).mkdir(path)?)
    }

    pub fn rename(&self, session: &str, source: &str, destination: &str) -> Outcome<()> {
        Ok(self.session(session).rename(source, destination)?)
    }

    pub fn remove(&self, session: &str, path: &str) -> Outcome<()> {
        self.session(session).remove(path)?;
        Ok(())
    }

    /// A polled watcher of a directory (`session_watch`): its id.
    pub fn watch(&self, session: &str, path: &str, recursive: bool) -> Outcome<String> {
        Ok(self.session(session).watch(path, recursive)?)
    }

    /// What a watcher saw since the last call (`session_watch_events`).
    pub fn watch_events(&self, session: &str, watcher: &str) -> Outcome<Vec<Value>> {
        let (events, _) = self.session(session).watch_events(watcher)?;
        Ok(events.iter().map(json).collect())
    }

    pub fn unwatch(&self, session: &str, watcher: &str) -> Outcome<()> {
        Ok(self.session(session).unwatch(watcher)?)
    }

    /// Writes `data` to a file (parents made), or appends it.
    pub fn put(&self, session: &str, path: &str, data: &[u8], append: bool) -> Outcome<()> {
        self.session(session).put(path, data, append)?;
        Ok(())
    }

    /// A file's bytes as they are read (`session_read`): its length, then its chunks over
    /// a bounded channel (an error if the connection ends short). Dropping the
    /// [`FileStream`] hangs up.
    pub fn read_file(&self, session: &str, path: &str) -> Outcome<FileStream> {
        let reading = self.session(session).open_read(path, 0, None)?;
        let length = reading.length();
        let hangup = reading.hang_up_handle()?;
        let (chunks, receiver) = mpsc::channel(STREAM_FRAMES);
        std::thread::Builder::new()
            .name("gateway-file".into())
            .spawn(move || copy_file(reading, chunks))
            .map_err(|err| {
                BackendError::unavailable(format!("brig gateway: start a file's thread: {err}"))
            })?;
        Ok(FileStream {
            length,
            chunks: receiver,
            _hangup: Hangup(hangup),
        })
    }

    /// A streamed watcher of a directory (`session_watch` with `stream`): its `watcher`
    /// frame, then a `watch_event` frame a change, until the hang-up. Dropping the
    /// returned [`Stream`] hangs up, which drops the watcher.
    pub fn watch_stream(&self, session: &str, path: &str, recursive: bool) -> Outcome<Stream> {
        self.stream(&Request::SessionWatch {
            session: session.into(),
            path: path.into(),
            recursive,
            stream: true,
        })
    }

    /// Attaches to a process: its `process` frame, its kept output, live output, then
    /// its `exited` frame, each as the server sends it, over a bounded channel. Dropping
    /// the returned [`Stream`] hangs up (the process goes on).
    pub fn connect(&self, session: &str, process: &Selector) -> Outcome<Stream> {
        let (pid, tag) = match process {
            ProcessRef::Pid(pid) => (Some(*pid), None),
            ProcessRef::Tag(tag) => (None, Some(tag.clone())),
        };
        self.stream(&Request::SessionConnect {
            session: session.into(),
            pid,
            tag,
        })
    }

    /// One request, one reply, as the protocol's JSON; an `error` reply is the call's error.
    pub(super) fn call(&self, request: &Request) -> Outcome<Value> {
        Ok(json(&self.client.request(request)?))
    }

    /// A request whose answer is a stream of frames, relayed by a thread of its own.
    pub(super) fn stream(&self, request: &Request) -> Outcome<Stream> {
        let frames = self.client.open(request)?;
        let hangup = frames.hang_up_handle()?;
        let (sender, receiver) = mpsc::channel(STREAM_FRAMES);
        std::thread::Builder::new()
            .name("gateway-stream".into())
            .spawn(move || relay(frames, sender))
            .map_err(|err| {
                BackendError::unavailable(format!("brig gateway: start a stream's thread: {err}"))
            })?;
        Ok(Stream {
            frames: receiver,
            _hangup: Hangup(hangup),
        })
    }
}

/// A typed reply as the protocol's JSON.
fn json(value: &impl serde::Serialize) -> Value {
    serde_json::to_value(value).expect("a reply always serializes")
}

/// A file's bytes as they come (see [`Backend::read_file`]).
pub struct FileStream {
    pub length: u64,
    pub chunks: mpsc::Receiver<Outcome<bytes::Bytes>>,
    _hangup: Hangup,
}

/// Shuts a connection when dropped, which ends the thread reading it.
struct Hangup(UnixStream);

impl Drop for Hangup {
    fn drop(&mut self) {
        let _ = self.0.shutdown(std::net::Shutdown::Both);
    }
}

/// A file's thread: its bytes from the server to the channel, in chunks.
fn copy_file(mut reading: Reading, chunks: mpsc::Sender<Outcome<bytes::Bytes>>) {
    use std::io::Read;
    let mut buffer = vec![0u8; 64 << 10];
    loop {
        let chunk = match reading.read(&mut buffer) {
            Ok(0) => return,
            Ok(count) => Ok(bytes::Bytes::copy_from_slice(&buffer[..count])),
            Err(err) => Err(BackendError::unavailable(format!("brig gateway: {err}"))),
        };
        let failed = chunk.is_err();
        if chunks.blocking_send(chunk).is_err() || failed {
            return;
        }
    }
}

/// A process's frames as they come; the connection is shut when this is dropped, which
/// ends its thread.
pub struct Stream {
    pub frames: mpsc::Receiver<Outcome<Value>>,
    _hangup: Hangup,
}

/// A stream's thread: frames from the server to the channel until the end (an `exited`,
/// `watch_end` or `error` frame, or the server's close), or until the HTTP side hangs up.
fn relay(mut frames: Frames, sender: mpsc::Sender<Outcome<Value>>) {
    loop {
        let (frame, last) = match frames.next_frame() {
            Ok(Some(SessionReply::Error { message, kind, .. })) => {
                let failure = classify(kind, &message);
                (Err(BackendError { failure, message }), true)
            }
            Ok(Some(frame)) => {
                let last = matches!(
                    frame,
                    SessionReply::Exited(_) | SessionReply::WatchEnd { .. } | SessionReply::Exec(_)
                );
                (Ok(json(&frame)), last)
            }
            Ok(None) => (
                Err(BackendError::unavailable(
                    "brig gateway: the brig server ended the stream early".into(),
                )),
                true,
            ),
            Err(err) => (Err(err.into()), true),
        };
        if sender.blocking_send(frame).is_err() || last {
            return;
        }
    }
}

/// What a refusal means for the HTTP side: by its kind (a session gone is `not_found`),
/// then, among the request's faults, the process or file that is not there.
fn classify(kind: ErrorKind, message: &str) -> Failure {
    match kind {
        ErrorKind::NotFound => Failure::Gone,
        // The client's own: it could not reach the server, or the server broke off.
        _ if message.starts_with("--server ") => Failure::Unavailable,
        // (The gateway's own uid created every session it serves.)
        ErrorKind::BadInput if message.contains("belongs to another user") => Failure::Gone,
        // envd knows only running processes: one that has ended is not found, as there.
        ErrorKind::BadInput
            if message.contains("no process with")
                || message.contains(" has ended")
                || message.contains("no such file in the workspace") =>
        {
            Failure::NotFound
        }
        ErrorKind::BadInput => Failure::BadInput,
        ErrorKind::Busy => Failure::Unavailable,
        _ => Failure::Server,
    }
}

#[cfg(test)]
mod tests {
    use super::{Failure, classify};
    use crate::error::ErrorKind;

    #[test]
    fn a_sandbox_that_ended_is_gone_and_a_process_that_ended_not_found() {
        for (kind, message, failure) in [
            (
                ErrorKind::NotFound,
                "brig serve: no session 0a1b (closed, expired or never created)",
                Failure::Gone,
            ),
            (
                ErrorKind::NotFound,
                "brig serve: session 0a1b ended: it reached its session_timeout",
                Failure::Gone,
            ),
            (
                ErrorKind::BadInput,
                "brig serve: session 0a1b belongs to another user",
                Failure::Gone,
            ),
            (
                ErrorKind::BadInput,
                "no process with pid 9 in session 0a1b; see session_ps",
                Failure::NotFound,
            ),
            (
                ErrorKind::BadInput,
                "session_signal: process 14 has ended; see session_ps",
                Failure::NotFound,
            ),
            (
                ErrorKind::BadInput,
                "path \"x\": no such file in the workspace",
                Failure::NotFound,
            ),
            (
                ErrorKind::BadInput,
                "tag: \"a\" is in use",
                Failure::BadInput,
            ),
            (
                ErrorKind::BadInput,
                "--server /run/b.sock: cannot connect: refused",
                Failure::Unavailable,
            ),
            (
                ErrorKind::Busy,
                "session_stdin: process 3: it has 65536 bytes of stdin not yet read",
                Failure::Unavailable,
            ),
        ] {
            assert_eq!(classify(kind, message), failure, "{message}");
        }
    }
}
