//! Every call the gateway makes to the `brig serve` it fronts, in one place: brig's native
//! protocol (docs/protocol.md), one request per unix-socket connection, typed requests
//! (`serve::protocol::Request`). The calls block (the server answers over a blocking
//! socket), so the async side runs them with `spawn_blocking`, and a stream (a process's
//! output) gets a thread of its own that hands frames over a bounded channel.
//!
//! When the library's typed blocking `serve::Client` lands, this file switches to it;
//! nothing outside it speaks to the server.

use crate::serve::client;
use crate::serve::protocol::{self, FrameReader, PtySize, Request};
use crate::units::Span;
use serde_json::Value;
use std::collections::BTreeMap;
use std::os::fd::AsFd;
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
    /// `K=V`, for every program of the session.
    pub env: Vec<String>,
    /// No network at all (E2B's `allow_internet_access: false`).
    pub no_network: bool,
}

/// A command to start in the background.
pub struct Start {
    pub argv: Vec<String>,
    pub env: Vec<String>,
    pub chdir: Option<PathBuf>,
    pub tag: Option<String>,
    pub pty: Option<PtySize>,
}

/// Which process a request is for.
#[derive(Clone, Debug)]
pub enum Selector {
    Pid(u32),
    Tag(String),
}

impl Selector {
    fn pid(&self) -> Option<u32> {
        match self {
            Selector::Pid(pid) => Some(*pid),
            Selector::Tag(_) => None,
        }
    }

    fn tag(&self) -> Option<String> {
        match self {
            Selector::Pid(_) => None,
            Selector::Tag(tag) => Some(tag.clone()),
        }
    }
}

/// The server on one socket.
#[derive(Clone, Debug)]
pub struct Backend {
    socket: PathBuf,
}

impl Backend {
    pub fn new(socket: PathBuf) -> Backend {
        Backend { socket }
    }

    /// Whether the server answers (its `status`).
    pub fn check(&self) -> Outcome<Value> {
        self.call(&Request::Status)
    }

    pub fn create(&self, new: NewSession) -> Outcome<String> {
        let mut options = crate::options::JailOptions {
            env: new.env,
            ..Default::default()
        };
        if new.no_network {
            options.net = Some(crate::options::NetMode::None);
        }
        let reply = self.call(&Request::SessionCreate {
            options: Box::new(options),
            session_timeout: Some(Span(new.timeout)),
            idle_timeout: None,
            workspace_size: None,
            metadata: new.metadata,
        })?;
        string_field(&reply, "session")
    }

    /// The sessions whose metadata hold every pair of `metadata`.
    pub fn list(&self, metadata: BTreeMap<String, String>) -> Outcome<Vec<Value>> {
        let reply = self.call(&Request::SessionList { metadata })?;
        Ok(reply["sessions"].as_array().cloned().unwrap_or_default())
    }

    pub fn close(&self, session: &str) -> Outcome<()> {
        self.call(&Request::SessionClose {
            session: session.into(),
        })
        .map(drop)
    }

    pub fn set_timeout(&self, session: &str, timeout: Duration) -> Outcome<()> {
        self.call(&Request::SessionSetTimeout {
            session: session.into(),
            timeout: Span(timeout),
        })
        .map(drop)
    }

    /// Starts a command in the background; its `process` frame (`pid` among it).
    pub fn start(&self, session: &str, start: Start) -> Outcome<Value> {
        self.call(&Request::SessionExec {
            session: session.into(),
            command: start.argv,
            code: None,
            language: None,
            context: None,
            stdin: None,
            env: start.env,
            chdir: start.chdir,
            time_limit: None,
            output_limit: None,
            stream: false,
            background: true,
            tag: start.tag,
            pty: start.pty,
        })
    }

    /// The session's processes (running, and the last ended ones).
    pub fn processes(&self, session: &str) -> Outcome<Vec<Value>> {
        let reply = self.call(&Request::SessionPs {
            session: session.into(),
        })?;
        Ok(reply["processes"].as_array().cloned().unwrap_or_default())
    }

    /// Writes `data` to a process's stdin (or its terminal), then closes it with `close`.
    pub fn stdin(
        &self,
        session: &str,
        process: &Selector,
        data: &[u8],
        close: bool,
    ) -> Outcome<()> {
        use base64::Engine;
        self.call(&Request::SessionStdin {
            session: session.into(),
            pid: process.pid(),
            tag: process.tag(),
            data: String::new(),
            base64: (!data.is_empty())
                .then(|| base64::engine::general_purpose::STANDARD.encode(data)),
            close,
        })
        .map(drop)
    }

    pub fn signal(&self, session: &str, process: &Selector, signal: i32) -> Outcome<()> {
        self.call(&Request::SessionSignal {
            session: session.into(),
            pid: process.pid(),
            tag: process.tag(),
            signal: signal.into(),
        })
        .map(drop)
    }

    pub fn resize(&self, session: &str, process: &Selector, size: PtySize) -> Outcome<()> {
        self.call(&Request::SessionResize {
            session: session.into(),
            pid: process.pid(),
            tag: process.tag(),
            cols: size.cols,
            rows: size.rows,
        })
        .map(drop)
    }

    /// A path's entry (`session_stat`).
    pub fn stat(&self, session: &str, path: &str) -> Outcome<Value> {
        let reply = self.call(&Request::SessionStat {
            session: session.into(),
            path: path.into(),
        })?;
        Ok(reply["entry"].clone())
    }

    /// A directory's entries, `depth` levels deep (`session_ls`).
    pub fn list_dir(&self, session: &str, path: &str, depth: u32) -> Outcome<Vec<Value>> {
        let reply = self.call(&Request::SessionLs {
            session: session.into(),
            path: path.into(),
            depth: Some(depth),
        })?;
        Ok(reply["entries"].as_array().cloned().unwrap_or_default())
    }

    /// Makes a directory and its parents; whether it was made (false: it was there).
    pub fn make_dir(&self, session: &str, path: &str) -> Outcome<bool> {
        let reply = self.call(&Request::SessionMkdir {
            session: session.into(),
            path: path.into(),
            parents: true,
        })?;
        Ok(reply["created"] == true)
    }

    pub fn rename(&self, session: &str, source: &str, destination: &str) -> Outcome<()> {
        self.call(&Request::SessionRename {
            session: session.into(),
            source: source.into(),
            destination: destination.into(),
        })
        .map(drop)
    }

    pub fn remove(&self, session: &str, path: &str) -> Outcome<()> {
        self.call(&Request::SessionRemove {
            session: session.into(),
            path: path.into(),
        })
        .map(drop)
    }

    /// A polled watcher of a directory (`session_watch`): its id.
    pub fn watch(&self, session: &str, path: &str, recursive: bool) -> Outcome<String> {
        let reply = self.call(&Request::SessionWatch {
            session: session.into(),
            path: path.into(),
            recursive,
            stream: false,
        })?;
        string_field(&reply, "watcher")
    }

    /// What a watcher saw since the last call (`session_watch_events`).
    pub fn watch_events(&self, session: &str, watcher: &str) -> Outcome<Vec<Value>> {
        let reply = self.call(&Request::SessionWatchEvents {
            session: session.into(),
            watcher: watcher.into(),
        })?;
        Ok(reply["events"].as_array().cloned().unwrap_or_default())
    }

    pub fn unwatch(&self, session: &str, watcher: &str) -> Outcome<()> {
        self.call(&Request::SessionUnwatch {
            session: session.into(),
            watcher: watcher.into(),
        })
        .map(drop)
    }

    /// Writes `data` to a file (parents made), or appends it.
    pub fn put(&self, session: &str, path: &str, data: &[u8], append: bool) -> Outcome<()> {
        use base64::Engine;
        self.call(&Request::SessionPut {
            session: session.into(),
            path: path.into(),
            data: base64::engine::general_purpose::STANDARD.encode(data),
            append,
        })
        .map(drop)
    }

    /// A file's bytes as they are read (`session_read`): its length, then its chunks over
    /// a bounded channel (an error if the connection ends short). Dropping the
    /// [`FileStream`] hangs up.
    pub fn read_file(&self, session: &str, path: &str) -> Outcome<FileStream> {
        let mut connection = self.send(&Request::SessionRead {
            session: session.into(),
            path: path.into(),
            offset: 0,
            length: None,
        })?;
        let reading = exact_frame(&mut connection)?;
        let length = reading["length"].as_u64().unwrap_or(0);
        let hangup = connection.try_clone().map_err(|err| {
            BackendError::unavailable(format!("brig gateway: duplicate a connection: {err}"))
        })?;
        let (chunks, receiver) = mpsc::channel(STREAM_FRAMES);
        std::thread::Builder::new()
            .name("gateway-file".into())
            .spawn(move || copy_file(connection, length, chunks))
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
        self.stream(&Request::SessionConnect {
            session: session.into(),
            pid: process.pid(),
            tag: process.tag(),
        })
    }

    /// A request whose answer is a stream of frames, relayed by a thread of its own.
    pub(super) fn stream(&self, request: &Request) -> Outcome<Stream> {
        let connection = self.send(request)?;
        let hangup = connection.try_clone().map_err(|err| {
            BackendError::unavailable(format!("brig gateway: duplicate a connection: {err}"))
        })?;
        let (frames, receiver) = mpsc::channel(STREAM_FRAMES);
        std::thread::Builder::new()
            .name("gateway-stream".into())
            .spawn(move || relay(connection, frames))
            .map_err(|err| {
                BackendError::unavailable(format!("brig gateway: start a stream's thread: {err}"))
            })?;
        Ok(Stream {
            frames: receiver,
            _hangup: Hangup(hangup),
        })
    }

    /// One request, one reply; an `error` reply is the call's error.
    pub(super) fn call(&self, request: &Request) -> Outcome<Value> {
        let connection = self.send(request)?;
        match read_frame(&mut FrameReader::replies(), &connection)? {
            Some(reply) => Ok(reply),
            None => Err(BackendError::unavailable(
                "brig gateway: the brig server closed the connection without an answer".into(),
            )),
        }
    }

    /// Connects and sends `request` (with the protocol's version).
    fn send(&self, request: &Request) -> Outcome<UnixStream> {
        let connection = client::connect(&self.socket)
            .map_err(|err| BackendError::unavailable(err.to_string()))?;
        let mut frame = serde_json::to_value(request).expect("a request always serializes");
        frame["brig"] = protocol::VERSION.into();
        protocol::write_frame(connection.as_fd(), &frame, &[])
            .map_err(|err| BackendError::unavailable(err.to_string()))?;
        Ok(connection)
    }
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

/// A file's thread: `length` raw bytes from the server to the channel, in chunks.
fn copy_file(mut connection: UnixStream, length: u64, chunks: mpsc::Sender<Outcome<bytes::Bytes>>) {
    use std::io::Read;
    let mut left = length;
    let mut buffer = vec![0u8; 64 << 10];
    while left > 0 {
        let want = buffer.len().min(left as usize);
        let chunk = match connection.read(&mut buffer[..want]) {
            Ok(0) | Err(_) => Err(BackendError::unavailable(format!(
                "brig gateway: the file ended after {} of {length} bytes (it shrank while it was read, or the sandbox ended)",
                length - left
            ))),
            Ok(count) => {
                left -= count as u64;
                Ok(bytes::Bytes::copy_from_slice(&buffer[..count]))
            }
        };
        let failed = chunk.is_err();
        if chunks.blocking_send(chunk).is_err() || failed {
            return;
        }
    }
}

/// One reply frame read byte-exact (raw data may follow it on the connection).
fn exact_frame(connection: &mut UnixStream) -> Outcome<Value> {
    use std::io::Read;
    let gone = |err: std::io::Error| {
        BackendError::unavailable(format!(
            "brig gateway: the brig server closed the connection without an answer ({err})"
        ))
    };
    let mut length = [0u8; 4];
    connection.read_exact(&mut length).map_err(gone)?;
    let length = u32::from_be_bytes(length) as usize;
    if length > protocol::MAX_FRAME {
        return Err(BackendError::unavailable(format!(
            "brig gateway: the brig server sent a frame of {length} bytes"
        )));
    }
    let mut body = vec![0u8; length];
    connection.read_exact(&mut body).map_err(gone)?;
    reply_of(&body)
}

/// A process's frames as they come; the connection is shut when this is dropped, which
/// ends its thread.
pub struct Stream {
    pub frames: mpsc::Receiver<Outcome<Value>>,
    _hangup: Hangup,
}

/// A stream's thread: frames from the server to the channel until the end (an `exited`,
/// `watch_end`, a streamed cell's `exec` or an `error` frame, or the server's close), or
/// until the HTTP side hangs up.
fn relay(connection: UnixStream, frames: mpsc::Sender<Outcome<Value>>) {
    let mut reader = FrameReader::replies();
    loop {
        let (frame, last) = match read_frame(&mut reader, &connection) {
            Ok(Some(frame)) => {
                let last =
                    ["exited", "watch_end", "exec"].contains(&frame["type"].as_str().unwrap_or(""));
                (Ok(frame), last)
            }
            Ok(None) => (
                Err(BackendError::unavailable(
                    "brig gateway: the brig server ended the stream early".into(),
                )),
                true,
            ),
            Err(err) => (Err(err), true),
        };
        if frames.blocking_send(frame).is_err() || last {
            return;
        }
    }
}

/// The next reply frame; an `error` frame as the error it reports.
fn read_frame(reader: &mut FrameReader, connection: &UnixStream) -> Outcome<Option<Value>> {
    let Some((body, _)) = reader
        .read_blocking(connection)
        .map_err(|err| BackendError::unavailable(err.to_string()))?
    else {
        return Ok(None);
    };
    reply_of(&body).map(Some)
}

/// A reply frame's JSON; an `error` frame as the error it reports.
fn reply_of(body: &[u8]) -> Outcome<Value> {
    let reply: Value = serde_json::from_slice(body).map_err(|err| {
        BackendError::unavailable(format!(
            "brig gateway: the brig server sent a frame that is not JSON: {err}"
        ))
    })?;
    if reply["type"] == "error" {
        let message = reply["message"].as_str().unwrap_or("an error").to_string();
        return Err(BackendError {
            failure: classify(&reply, &message),
            message,
        });
    }
    Ok(reply)
}

/// What an `error` frame means for the HTTP side.
fn classify(reply: &Value, message: &str) -> Failure {
    // envd knows only running processes: one that has ended is not found, as there.
    // A session at its end answers its waiting requests `session ID ended: WHY` (its
    // timeout, the server draining) before it is gone from the server's table.
    let ended = message.contains("session ") && message.contains(" ended: ");
    if message.contains(": no session ") || ended || message.contains("belongs to another user") {
        // (The gateway's own uid created every session it serves.)
        Failure::Gone
    } else if message.contains("no process with")
        || message.contains(" has ended")
        || message.contains("no such file in the workspace")
    {
        Failure::NotFound
    } else if reply["kind"] == "bad_input" {
        Failure::BadInput
    } else {
        Failure::Server
    }
}

fn string_field(reply: &Value, field: &str) -> Outcome<String> {
    reply[field].as_str().map(str::to_string).ok_or_else(|| {
        BackendError::unavailable(format!(
            "brig gateway: the brig server's answer lacks \"{field}\": {reply}"
        ))
    })
}

#[cfg(test)]
mod tests {
    use super::{Failure, classify};
    use serde_json::json;

    #[test]
    fn a_sandbox_that_ended_is_gone_by_any_of_the_servers_words() {
        let bad = json!({"kind": "bad_input"});
        for (message, failure) in [
            (
                "brig serve: no session 0a1b (closed, expired or never created)",
                Failure::Gone,
            ),
            (
                "brig serve: session 0a1b ended: it reached its session_timeout",
                Failure::Gone,
            ),
            (
                "brig serve: session 0a1b belongs to another user",
                Failure::Gone,
            ),
            (
                "no process with pid 9 in session 0a1b; see session_ps",
                Failure::NotFound,
            ),
            (
                "session_signal: process 14 has ended; see session_ps",
                Failure::NotFound,
            ),
            (
                "path \"x\": no such file in the workspace",
                Failure::NotFound,
            ),
            ("tag: \"a\" is in use", Failure::BadInput),
        ] {
            assert_eq!(classify(&bad, message), failure, "{message}");
        }
    }
}
