//! A program a session's runner watches while it serves other requests: a command run in
//! the foreground (its client waits for the verdict, streamed or not) or in the background
//! (clients list it, connect to it, write its stdin, signal it). One type, [`Watched`]:
//! its pipes → the one bounded collector (`jail::Output`, stdout and stderr together
//! within the exec's limit, kept for its reply or handed to this module) → chunks to its
//! clients and a background process's bounded backlog (for clients that connect later)
//! → its outcome (`jail::outcome`). Clients attached to it are
//! [`Listener`]s: frames queued for them are written without blocking, within bounds.

use super::Cut;
use super::protocol::PtySize;
use crate::jail::session::Ended;
use crate::jail::{Captured, Output};
use crate::serve::reply::{self, OutputStream, SessionReply};
use crate::verdict::Peer;
use nix::errno::Errno;
use nix::sys::socket::MsgFlags;
use serde_json::Value;
use std::collections::VecDeque;
use std::os::fd::{AsFd, AsRawFd, OwnedFd};
use std::time::{Duration, Instant, SystemTime};

/// What a background process's backlog keeps of its output, stdout and stderr together:
/// the latest bytes; older ones are dropped (and counted) as new ones come.
pub const BACKLOG: usize = 1 << 20;
/// Frames waiting for one client: past this, output frames for it are dropped (counted
/// in its final frame's `dropped`); its final frame is always queued.
pub const LISTENER_BUFFER: usize = 2 << 20;
/// Stdin written by clients and not yet read by the process.
pub const STDIN_BUFFER: usize = 1 << 20;
/// Ended background processes kept for `session_ps` and `session_connect` (their
/// verdict and backlog), oldest forgotten first.
pub const KEEP_ENDED: usize = 16;
/// Commands running at once in one session (foreground and background): with their
/// backlogs and clients, what the runner holds stays bounded.
pub const MAX_RUNNING: usize = 32;
/// Clients connected to one process at once (each may hold its replayed backlog, and
/// up to [`LISTENER_BUFFER`] of live output).
pub const MAX_LISTENERS: usize = 8;
/// The longest tag.
pub const MAX_TAG: usize = 128;

/// An output frame's `stream`: a command's pipes, or a terminal's one stream.
const STREAMS: [OutputStream; 3] = [
    OutputStream::Stdout,
    OutputStream::Stderr,
    OutputStream::Pty,
];
/// The index of a terminal's stream in [`STREAMS`].
const TERMINAL: usize = 2;

/// One piece of output as it was read.
struct Chunk {
    stream: usize,
    t_ms: u64,
    data: Vec<u8>,
}

/// The `output` frame of a chunk: text as `data` when it is UTF-8 (a character split
/// between reads is held back until its end arrives), else the bytes as `base64`.
fn output_frame(chunk: &Chunk) -> SessionReply {
    SessionReply::Output(reply::Output::of(
        STREAMS[chunk.stream],
        &chunk.data,
        chunk.t_ms,
    ))
}

/// `carry` (a partial character from the last read) and `read`, less a character
/// `read` ends in the middle of, which goes to `carry`.
fn whole_characters(carry: &mut Vec<u8>, read: &[u8]) -> Vec<u8> {
    let mut data = std::mem::take(carry);
    data.extend_from_slice(read);
    if let Err(err) = std::str::from_utf8(&data)
        && err.error_len().is_none()
    {
        *carry = data.split_off(err.valid_up_to());
    }
    data
}

/// Output as read, cut into chunks of whole characters, timed from a program's start.
struct Chunker {
    /// Per stream: a partial character from the last read.
    carry: [Vec<u8>; 2],
    started: Instant,
}

impl Chunker {
    fn new() -> Chunker {
        Chunker {
            carry: [Vec::new(), Vec::new()],
            started: Instant::now(),
        }
    }

    /// The chunk of what was read of `stream` (None when it is all held back).
    fn chunk(&mut self, stream: usize, read: &[u8]) -> Option<Chunk> {
        let data = whole_characters(&mut self.carry[stream], read);
        self.timed(stream, data)
    }

    /// What is held back of `stream` at its end, as it is.
    fn rest(&mut self, stream: usize) -> Option<Chunk> {
        let data = std::mem::take(&mut self.carry[stream]);
        self.timed(stream, data)
    }

    fn timed(&self, stream: usize, data: Vec<u8>) -> Option<Chunk> {
        (!data.is_empty()).then(|| Chunk {
            stream,
            t_ms: self.started.elapsed().as_millis() as u64,
            data,
        })
    }
}

/// A client attached to a process, and the frames not yet written to it.
pub struct Listener {
    pub connection: OwnedFd,
    pending: Vec<u8>,
    sent: usize,
    /// Output bytes not queued for it because it did not read.
    pub dropped: u64,
    /// Since when it has had frames waiting and taken none.
    stalled_since: Option<Instant>,
    /// It hung up, or its socket failed: let go at the end of the loop's turn.
    pub gone: bool,
    /// The memfd of the request it was answered for: emptied when its last frame is
    /// queued, which tells the server (it keeps a copy) the request is done
    /// (`session_list`'s state) and since when (the memfd's mtime).
    request: Option<OwnedFd>,
}

impl Drop for Listener {
    /// A client let go unanswered (it hung up, the session ended): its request is over.
    fn drop(&mut self) {
        self.answered();
    }
}

impl Listener {
    /// Answering the request in `memfd` (see `request`).
    pub fn answering(mut self, memfd: Option<OwnedFd>) -> Listener {
        self.request = memfd;
        self
    }

    /// Its request is answered: the last frame is queued.
    pub fn answered(&mut self) {
        if let Some(memfd) = self.request.take() {
            let _ = nix::unistd::ftruncate(&memfd, 0);
        }
    }

    pub fn new(connection: OwnedFd) -> Listener {
        Listener {
            connection,
            pending: Vec::new(),
            sent: 0,
            dropped: 0,
            stalled_since: None,
            gone: false,
            request: None,
        }
    }

    fn waiting(&self) -> usize {
        self.pending.len() - self.sent
    }

    pub fn has_pending(&self) -> bool {
        self.waiting() > 0
    }

    /// Whether an output frame would be queued (not dropped).
    fn has_room(&self) -> bool {
        self.waiting() < LISTENER_BUFFER
    }

    /// Queues a frame; an output frame (`output_bytes` of the program's) is dropped
    /// and counted when the client already has [`LISTENER_BUFFER`] waiting.
    pub fn queue(&mut self, frame: &impl serde::Serialize, output_bytes: Option<usize>) {
        if let Some(bytes) = output_bytes
            && !self.has_room()
        {
            self.dropped += bytes as u64;
            return;
        }
        let body = serde_json::to_vec(frame).unwrap_or_default();
        if self.sent == self.pending.len() {
            self.pending.clear();
            self.sent = 0;
        }
        self.pending
            .extend_from_slice(&(body.len() as u32).to_be_bytes());
        self.pending.extend_from_slice(&body);
        if self.stalled_since.is_none() {
            self.stalled_since = Some(Instant::now());
        }
    }

    /// Writes what the socket takes now; false when the client is gone.
    pub fn flush(&mut self) -> bool {
        while self.has_pending() {
            let flags = MsgFlags::MSG_DONTWAIT | MsgFlags::MSG_NOSIGNAL;
            match nix::sys::socket::send(
                self.connection.as_raw_fd(),
                &self.pending[self.sent..],
                flags,
            ) {
                Ok(count) => {
                    self.sent += count;
                    self.stalled_since = Some(Instant::now());
                }
                Err(Errno::EINTR) => {}
                Err(Errno::EAGAIN) => return true,
                Err(_) => return false,
            }
        }
        self.stalled_since = None;
        self.pending.clear();
        self.sent = 0;
        true
    }

    /// When a client that takes nothing of what waits for it is given up.
    pub fn give_up_at(&self, patience: Duration) -> Option<Instant> {
        self.stalled_since
            .filter(|_| self.has_pending())
            .map(|since| since + patience)
    }

    /// Writes what waits within `deadline` (blocking until then at most).
    pub fn flush_by(&mut self, deadline: Instant) {
        while self.flush() && self.has_pending() {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return;
            }
            let mut fds = [nix::poll::PollFd::new(
                self.connection.as_fd(),
                nix::poll::PollFlags::POLLOUT,
            )];
            let _ = nix::poll::poll(&mut fds, super::poll_timeout(Some(deadline)));
        }
    }
}

/// The foreground client of an exec: it waits for the verdict.
pub struct Foreground {
    pub client: Listener,
    pub stream: bool,
}

/// A cell's output streamed to its client as it is read (the interpreter's pipes are
/// read by the session's loop as a source of the running cell, `session/cell.rs`).
pub struct CellStream {
    pub client: Listener,
    chunker: Chunker,
}

impl CellStream {
    pub fn new(connection: OwnedFd) -> CellStream {
        CellStream {
            client: Listener::new(connection),
            chunker: Chunker::new(),
        }
    }

    /// Queues what was read of stream `index` and writes what the client takes now.
    pub fn send(&mut self, index: usize, read: &[u8]) {
        let chunk = self.chunker.chunk(index, read);
        self.queue(chunk);
        self.client.flush();
    }

    fn queue(&mut self, chunk: Option<Chunk>) {
        if let Some(chunk) = chunk {
            self.client
                .queue(&output_frame(&chunk), Some(chunk.data.len()));
        }
    }

    /// A character cut short at the end goes as it is.
    pub fn finish(&mut self) {
        for index in 0..2 {
            let rest = self.chunker.rest(index);
            self.queue(rest);
        }
    }
}

/// A program the runner watches.
pub struct Watched {
    /// Its program id in the session (brig's: events and signals name it).
    pub id: u32,
    /// Its pid in the jail (the protocol's `pid`), once the jail's init has said it.
    pub pid: Option<u32>,
    /// A background process's starter, answered once its pid is known.
    pub announce: Option<Listener>,
    pub argv: Vec<String>,
    pub env: Vec<String>,
    pub cwd: String,
    pub tag: Option<String>,
    pub peer: Peer,
    pub background: bool,
    pub started_unix_ms: u64,
    pub started: Instant,
    /// Its output's collector (its stdout and stderr pipes); None once its output ended.
    pub output: Option<Output>,
    pub stdin: Option<OwnedFd>,
    stdin_pending: Vec<u8>,
    /// Close stdin once what is pending is written.
    stdin_close: bool,
    /// What the collector counted and kept for the reply, once its output ended.
    pub captured: Captured,
    chunker: Chunker,
    backlog: VecDeque<Chunk>,
    backlog_bytes: usize,
    /// Output bytes the backlog lost, oldest first.
    pub backlog_dropped: u64,
    pub time_limit: Option<Duration>,
    pub deadline: Option<Instant>,
    pub cut: Option<Cut>,
    pub failure: Option<(u8, String)>,
    pub ended: Option<Ended>,
    /// Its verdict, once it has ended.
    pub verdict: Option<Box<crate::verdict::Verdict>>,
    pub oom_before: u64,
    pub foreground: Option<Foreground>,
    pub listeners: Vec<Listener>,
    /// A program on a terminal (`session_pty.rs`): its size, and the master (only the
    /// runner holds it) while it runs; its output is read from the master, as pipe 0.
    pub pty: Option<PtySize>,
    pub terminal: Option<OwnedFd>,
    /// Runs as root inside (`session_exec`'s `user`): its verdict names root's host ids.
    pub as_root: bool,
}

/// How a program is to be watched.
pub struct Watch {
    pub argv: Vec<String>,
    /// The variables its request set, and its working directory (`session_ps` says them).
    pub env: Vec<String>,
    pub cwd: String,
    pub tag: Option<String>,
    /// Who started it (its verdict's audit line names them).
    pub peer: Peer,
    pub background: bool,
    pub time_limit: Option<Duration>,
    pub oom_before: u64,
}

impl Watched {
    /// Watched with `output`, its collector: capturing for a reply (a foreground exec
    /// that does not stream), or handing what it reads to the watcher.
    pub fn new(
        id: u32,
        watch: Watch,
        output: Output,
        stdin: OwnedFd,
        stdin_data: Vec<u8>,
    ) -> Watched {
        let background = watch.background;
        let started = Instant::now();
        Watched {
            id,
            pid: None,
            announce: None,
            argv: watch.argv,
            env: watch.env,
            cwd: watch.cwd,
            tag: watch.tag,
            peer: watch.peer,
            background,
            started_unix_ms: SystemTime::now()
                .duration_since(SystemTime::UNIX_EPOCH)
                .map_or(0, |since| since.as_millis() as u64),
            started,
            output: Some(output),
            // A foreground command's stdin is what the request gave, then its end.
            stdin_close: !background,
            stdin: Some(stdin),
            stdin_pending: stdin_data,
            captured: Captured::default(),
            chunker: Chunker::new(),
            backlog: VecDeque::new(),
            backlog_bytes: 0,
            backlog_dropped: 0,
            time_limit: watch.time_limit,
            deadline: watch.time_limit.map(|limit| started + limit),
            cut: None,
            failure: None,
            ended: None,
            verdict: None,
            oom_before: watch.oom_before,
            as_root: false,
            foreground: None,
            listeners: Vec::new(),
            pty: None,
            terminal: None,
        }
    }

    pub fn running(&self) -> bool {
        self.ended.is_none()
    }

    /// Whether a client waits on it (its exec's, or one connected).
    pub fn attached(&self) -> bool {
        self.foreground.is_some() || !self.listeners.is_empty()
    }

    /// Whether its stdin has something to write (or to close).
    pub fn stdin_wanted(&self) -> bool {
        self.stdin.is_some() && (!self.stdin_pending.is_empty() || self.stdin_close)
    }

    /// Queues `data` for its stdin (and its end, with `close`); an error when it has
    /// [`STDIN_BUFFER`] not yet read (`busy`: the same bytes fit once it reads) or its
    /// stdin is closed (`bad_input`).
    pub fn queue_stdin(&mut self, data: &[u8], close: bool) -> crate::error::Result<usize> {
        if self.stdin.is_none() || self.stdin_close {
            return Err(crate::error::Error::input("its stdin is closed"));
        }
        if self.stdin_pending.len() + data.len() > STDIN_BUFFER {
            return Err(crate::error::Error::busy(format!(
                "it has {} bytes of stdin not yet read (the most is {STDIN_BUFFER}); retry once it reads",
                self.stdin_pending.len()
            )));
        }
        self.stdin_pending.extend_from_slice(data);
        self.stdin_close = close;
        self.feed_stdin();
        Ok(data.len())
    }

    /// Writes what its stdin takes now, without blocking.
    pub fn feed_stdin(&mut self) {
        let Some(stdin) = &self.stdin else { return };
        while !self.stdin_pending.is_empty() {
            match nix::unistd::write(stdin, &self.stdin_pending) {
                Ok(count) => {
                    self.stdin_pending.drain(..count);
                }
                Err(Errno::EINTR) => {}
                Err(Errno::EAGAIN) => return,
                // Nobody reads it any more: what waits is dropped.
                Err(_) => {
                    self.stdin_pending.clear();
                    self.stdin = None;
                    return;
                }
            }
        }
        if self.stdin_close {
            self.stdin = None;
        }
    }

    /// Reads what pipe `index` has now (the collector counts it, keeps it for the reply
    /// or hands on what is within the limit: to whoever streams it, to the backlog);
    /// true when the output limit was passed.
    pub fn read(&mut self, index: usize) -> bool {
        let Some(mut output) = self.output.take() else {
            return false;
        };
        // A terminal's output is one stream, the terminal's.
        let terminal = self.pty.is_some();
        let within = output.pump_to(index, |index, kept| {
            let mut chunk = self.chunker.chunk(index, kept);
            if let Some(chunk) = chunk.as_mut().filter(|_| terminal) {
                chunk.stream = TERMINAL;
            }
            self.publish(chunk);
        });
        self.output = Some(output);
        !within
    }

    fn publish(&mut self, chunk: Option<Chunk>) {
        let Some(chunk) = chunk else { return };
        // Encoded once, and only when someone takes it.
        let streamed = self
            .foreground
            .as_mut()
            .filter(|f| f.stream)
            .map(|f| &mut f.client);
        let mut takers: Vec<&mut Listener> = streamed
            .into_iter()
            .chain(self.listeners.iter_mut())
            .collect();
        if takers.iter().any(|taker| taker.has_room()) {
            let frame = output_frame(&chunk);
            for taker in &mut takers {
                taker.queue(&frame, Some(chunk.data.len()));
            }
        } else {
            for taker in &mut takers {
                taker.dropped += chunk.data.len() as u64;
            }
        }
        if self.background {
            self.backlog_bytes += chunk.data.len();
            self.backlog.push_back(chunk);
            while self.backlog_bytes > BACKLOG
                && let Some(oldest) = self.backlog.pop_front()
            {
                self.backlog_bytes -= oldest.data.len();
                self.backlog_dropped += oldest.data.len() as u64;
            }
        }
    }

    /// Its end: what is left in its pipes is read (once: processes it left running may
    /// hold them open), a character cut short is sent as it is; the collector gives what
    /// it kept and counted, and goes.
    pub fn finish_output(&mut self) {
        for index in 0..2 {
            self.read(index);
            let mut rest = self.chunker.rest(index);
            if let Some(chunk) = rest.as_mut().filter(|_| self.pty.is_some()) {
                chunk.stream = TERMINAL;
            }
            self.publish(rest);
        }
        if let Some(mut output) = self.output.take() {
            output.close();
            self.captured = output.into_captured();
        }
        self.stdin = None;
        self.terminal = None;
    }

    /// Attaches a client: the `process` frame, then what the backlog holds, then (if it
    /// has ended) the verdict.
    pub fn connect(&mut self, connection: OwnedFd) -> Listener {
        let mut listener = Listener::new(connection);
        listener.queue(&self.describe(), None);
        // The backlog is bounded itself: all of it is queued.
        for chunk in &self.backlog {
            listener.queue(&output_frame(chunk), None);
        }
        if self.verdict.is_some() {
            listener.queue(&self.end_frame(0), None);
        }
        listener
    }

    /// The frame a connected client gets last.
    pub fn end_frame(&self, dropped: u64) -> SessionReply {
        SessionReply::Exited(Box::new(reply::Exited {
            pid: self.pid,
            tag: self.tag.clone(),
            verdict: self.verdict.clone(),
            dropped,
        }))
    }

    /// What `session_ps` and `session_connect` say of it.
    pub fn process(&self) -> reply::Process {
        let status = self.verdict.as_ref().map(|verdict| reply::ProcessStatus {
            status: Some(verdict.status),
            exit_code: verdict.exit_code,
            signal: verdict.signal,
        });
        reply::Process {
            pid: self.pid,
            tag: self.tag.clone(),
            command: self.argv.clone(),
            background: self.background,
            running: self.running(),
            status,
            started_unix_ms: self.started_unix_ms,
            backlog_dropped: self.backlog_dropped,
            pty: self.pty,
            env: self.env.clone(),
            cwd: self.cwd.clone(),
        }
    }

    /// Its `process` frame (a start's answer, `session_connect`'s first frame).
    pub fn describe(&self) -> SessionReply {
        SessionReply::Process(Box::new(self.process()))
    }
}

/// A signal by number (1 to 64) or name (`TERM`, `SIGTERM`, `sigterm`).
pub fn parse_signal(value: &Value) -> Result<nix::sys::signal::Signal, String> {
    use nix::sys::signal::Signal;
    let fix = "give a number (e.g. 15) or a name (e.g. \"TERM\" or \"SIGTERM\")";
    let signal = match value {
        Value::Number(number) => number
            .as_i64()
            .and_then(|n| i32::try_from(n).ok())
            .and_then(|n| Signal::try_from(n).ok()),
        Value::String(name) => {
            let name = name.trim().to_ascii_uppercase();
            let name = match name.starts_with("SIG") {
                true => name,
                false => format!("SIG{name}"),
            };
            name.parse::<Signal>().ok()
        }
        _ => None,
    };
    signal.ok_or_else(|| format!("signal: {value} is not a signal; {fix}"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn characters_split_between_reads_are_held_back() {
        let mut carry = Vec::new();
        let euro = "€".as_bytes();
        assert_eq!(whole_characters(&mut carry, &[b'a', euro[0]]), b"a");
        assert_eq!(carry, &euro[..1]);
        assert_eq!(whole_characters(&mut carry, &euro[1..]), euro);
        assert!(carry.is_empty());
        // Bytes that are not UTF-8 go on at once, as base64.
        let bytes = whole_characters(&mut carry, &[0xff, b'x']);
        assert_eq!(bytes, [0xff, b'x']);
        let frame = output_frame(&Chunk {
            stream: 1,
            t_ms: 3,
            data: bytes,
        });
        let SessionReply::Output(output) = frame else {
            panic!("not an output frame");
        };
        assert_eq!(output.base64.as_deref(), Some("/3g="));
        assert_eq!(output.stream, OutputStream::Stderr);
        assert!(output.data.is_none());
    }

    #[test]
    fn signals_by_name_or_number() {
        use nix::sys::signal::Signal;
        assert_eq!(parse_signal(&json!("TERM")), Ok(Signal::SIGTERM));
        assert_eq!(parse_signal(&json!("sigint")), Ok(Signal::SIGINT));
        assert_eq!(parse_signal(&json!(9)), Ok(Signal::SIGKILL));
        for bad in [json!("NOPE"), json!(0), json!(99), json!(null), json!(-1)] {
            let err = parse_signal(&bad).unwrap_err();
            assert!(err.starts_with("signal:") && !err.contains('\n'), "{err}");
        }
    }

    #[test]
    fn a_listener_that_does_not_read_drops_output_and_counts_it() {
        let (ours, _theirs) = std::os::unix::net::UnixStream::pair().unwrap();
        let mut listener = Listener::new(OwnedFd::from(ours));
        let chunk = json!({"type": "output", "data": "x".repeat(64 << 10)});
        for _ in 0..64 {
            listener.queue(&chunk, Some(64 << 10));
            listener.flush();
        }
        assert!(listener.dropped > 0);
        assert!(listener.waiting() <= LISTENER_BUFFER + (65 << 10));
        // The last frame is queued whatever waits.
        let before = listener.waiting();
        listener.queue(&json!({"type": "exited"}), None);
        assert!(listener.waiting() > before);
    }
}
