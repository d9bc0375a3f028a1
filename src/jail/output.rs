//! The one bounded output collector. A program's stdout and stderr go through pipes to
//! brig, which takes at most the limit of both **together** (`--output-limit`; for a
//! captured run 1 MiB unless asked, at most `protocol::MAX_CAPTURE`) through a fixed
//! buffer: past the limit the output is cut and the jail killed (status `output_limit`).
//! What is taken goes to one of four sinks, the same for both streams: brig's own stdout
//! and stderr (`brig run --output-limit`), a server's client's descriptors (relayed),
//! memory (captured for a reply; bounded by the limit, never more than a chunk read past
//! it), or whoever pumps it (a session's runner, which streams it to its clients and keeps
//! a background process's backlog: [`Output::pump_to`]). A client that does not take what is relayed to it within [`CLIENT_PATIENCE`]
//! loses the rest (counted, not forwarded), so that nothing waits on it.
//!
//! The collector is driven by whoever watches the program: the supervisor's poll loop
//! ([`Output::pump`] on a readable pipe), a session's runner's loops, or, for a program whose supervisor already runs
//! (a warm interpreter given its request), a thread of its own ([`Output::collect`]).

use nix::errno::Errno;
use nix::fcntl::{FcntlArg, OFlag, fcntl};
use nix::unistd::{pipe2, read, write};
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};

/// The jail's ends: they become its fds 1 and 2.
pub struct JailEnds {
    pub stdout: OwnedFd,
    pub stderr: OwnedFd,
}

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Counts {
    /// Bytes the program wrote (read by brig), kept or not.
    pub stdout_bytes: u64,
    pub stderr_bytes: u64,
    /// The output passed the limit: it was cut there and the jail killed.
    pub truncated: bool,
    /// The last byte forwarded to stderr was not a newline.
    pub stderr_mid_line: bool,
}

/// What a captured run kept: within the limit, stdout and stderr together.
#[derive(Debug, Default)]
pub struct Captured {
    pub stdout: String,
    pub stderr: String,
    pub counts: Counts,
    /// The limit that held.
    pub limit: u64,
}

pub struct Output {
    streams: [Stream; 2],
    limit: u64,
    kept: u64,
    buffer: Box<[u8; CHUNK]>,
    pub counts: Counts,
}

/// How much is read at a time: what a collector holds beyond its captured bytes.
const CHUNK: usize = 64 * 1024;

struct Stream {
    pipe: Option<OwnedFd>,
    sink: Sink,
}

/// Where a stream's kept bytes go.
enum Sink {
    /// brig's own fd 1 or 2; a reader that went away is not brig's failure.
    Own(i32),
    /// A server's client's stream. `stalled`: the client did not take its output within
    /// [`CLIENT_PATIENCE`]; what follows is counted, not forwarded.
    Client { fd: OwnedFd, stalled: bool },
    /// Kept for a reply (bounded by the limit).
    Memory(Vec<u8>),
    /// Kept by nobody here: what is within the limit goes to the pump's caller only.
    Caller,
}

/// How long brig waits for a server's client to take output it relays.
const CLIENT_PATIENCE: std::time::Duration = std::time::Duration::from_secs(10);

impl Output {
    /// A collector of at most `limit` bytes whose pipes are new: the jail's ends are
    /// returned. Until told otherwise it forwards to brig's own stdout and stderr.
    pub fn new(limit: u64) -> Result<(Output, JailEnds), Errno> {
        let (stdout_read, stdout_write) = pipe2(OFlag::O_CLOEXEC | OFlag::O_NONBLOCK)?;
        let (stderr_read, stderr_write) = pipe2(OFlag::O_CLOEXEC | OFlag::O_NONBLOCK)?;
        // Only brig's ends are non-blocking; the program gets ordinary blocking pipes.
        for end in [&stdout_write, &stderr_write] {
            fcntl(end, FcntlArg::F_SETFL(OFlag::empty()))?;
        }
        let output = Output::of(stdout_read, stderr_read, limit);
        let ends = JailEnds {
            stdout: stdout_write,
            stderr: stderr_write,
        };
        Ok((output, ends))
    }

    /// A collector of pipes that exist already (brig's read ends), made non-blocking.
    pub fn of_pipes(stdout: OwnedFd, stderr: OwnedFd, limit: u64) -> Result<Output, Errno> {
        for end in [&stdout, &stderr] {
            fcntl(end, FcntlArg::F_SETFL(OFlag::O_NONBLOCK))?;
        }
        Ok(Output::of(stdout, stderr, limit))
    }

    fn of(stdout: OwnedFd, stderr: OwnedFd, limit: u64) -> Output {
        Output {
            streams: [
                Stream {
                    pipe: Some(stdout),
                    sink: Sink::Own(1),
                },
                Stream {
                    pipe: Some(stderr),
                    sink: Sink::Own(2),
                },
            ],
            limit,
            kept: 0,
            buffer: Box::new([0; CHUNK]),
            counts: Counts::default(),
        }
    }

    /// Relays to these instead of brig's own stdout and stderr.
    pub fn relay_to(&mut self, stdout: OwnedFd, stderr: OwnedFd) {
        self.streams[0].sink = Sink::Client {
            fd: stdout,
            stalled: false,
        };
        self.streams[1].sink = Sink::Client {
            fd: stderr,
            stalled: false,
        };
    }

    /// Keeps the output in memory, at most `limit` bytes (no more than the collector's
    /// limit so far).
    pub fn capture(&mut self, limit: u64) {
        self.limit = self.limit.min(limit);
        for stream in &mut self.streams {
            stream.sink = Sink::Memory(Vec::new());
        }
    }

    /// Keeps nothing itself: what is within the limit goes to whoever pumps
    /// ([`Output::pump_to`]), which streams it on.
    pub fn to_caller(&mut self) {
        for stream in &mut self.streams {
            stream.sink = Sink::Caller;
        }
    }

    pub fn is_capturing(&self) -> bool {
        matches!(self.streams[0].sink, Sink::Memory(_))
    }

    /// The pipes still open, for poll; index 0 is stdout, 1 stderr.
    pub fn open_pipes(&self) -> Vec<(usize, BorrowedFd<'_>)> {
        self.streams
            .iter()
            .enumerate()
            .filter_map(|(index, stream)| stream.pipe.as_ref().map(|pipe| (index, pipe.as_fd())))
            .collect()
    }

    /// Moves what is readable now on stream `index`. Returns false once the limit is
    /// exceeded: the caller kills the jail (what comes after the cut is counted, never
    /// kept).
    pub fn pump(&mut self, index: usize) -> bool {
        self.pump_to(index, |_, _| {})
    }

    /// [`Output::pump`], and what is within the limit also handed to `taker` (stream
    /// index, bytes), read by read.
    pub fn pump_to(&mut self, index: usize, mut taker: impl FnMut(usize, &[u8])) -> bool {
        loop {
            let Some(pipe) = &self.streams[index].pipe else {
                return true;
            };
            let count = match read(pipe, &mut self.buffer[..]) {
                Ok(0) => {
                    self.streams[index].pipe = None;
                    return true;
                }
                Ok(count) => count,
                Err(Errno::EINTR) => continue,
                // A terminal's master once no process holds its slave any more.
                Err(Errno::EIO) => {
                    self.streams[index].pipe = None;
                    return true;
                }
                Err(_) => return true, // EAGAIN: nothing more for now
            };
            if index == 0 {
                self.counts.stdout_bytes += count as u64;
            } else {
                self.counts.stderr_bytes += count as u64;
            }
            let allowed = self.limit.saturating_sub(self.kept).min(count as u64) as usize;
            let bytes = &self.buffer[..allowed];
            match &mut self.streams[index].sink {
                Sink::Own(target) => forward(crate::sys::borrow_fd(*target), bytes),
                Sink::Client { stalled: true, .. } => {}
                Sink::Client { fd, stalled } => *stalled = !forward_within(fd.as_fd(), bytes),
                Sink::Memory(kept) => kept.extend_from_slice(bytes),
                Sink::Caller => {}
            }
            if allowed > 0 {
                taker(index, bytes);
            }
            if index == 1 && allowed > 0 {
                self.counts.stderr_mid_line = self.buffer[allowed - 1] != b'\n';
            }
            self.kept += allowed as u64;
            if allowed < count {
                self.counts.truncated = true;
                return false;
            }
        }
    }

    /// After the jail is gone: takes what is left in the pipes (within the limit).
    pub fn drain(&mut self) {
        for index in 0..self.streams.len() {
            while self.streams[index].pipe.is_some() {
                let before = self.counts.stdout_bytes + self.counts.stderr_bytes;
                if !self.pump(index) {
                    self.streams[index].pipe = None;
                }
                if self.counts.stdout_bytes + self.counts.stderr_bytes == before {
                    break;
                }
            }
        }
    }

    /// Reads stream `index` no more (a terminal's output is one stream: its second is a
    /// copy of the first, never read).
    pub fn without(&mut self, index: usize) {
        self.streams[index].pipe = None;
    }

    /// Stops reading: what is still in the pipes is left there (processes the program
    /// left running may hold them open).
    pub fn close(&mut self) {
        for stream in &mut self.streams {
            stream.pipe = None;
        }
    }

    /// Collects until both pipes end (the program and whatever it started are gone),
    /// calling `at_cut` once at the cut (which ends the jail): for a program whose
    /// supervisor already runs, on a thread of its own.
    pub fn collect(mut self, mut at_cut: impl FnMut()) -> Output {
        use nix::poll::{PollFd, PollFlags, PollTimeout, poll};
        let mut cut = false;
        loop {
            let open = self.open_pipes();
            if open.is_empty() {
                break;
            }
            let indices: Vec<usize> = open.iter().map(|(index, _)| *index).collect();
            let mut fds: Vec<PollFd> = open
                .iter()
                .map(|(_, fd)| PollFd::new(*fd, PollFlags::POLLIN))
                .collect();
            match poll(&mut fds, PollTimeout::NONE) {
                Ok(_) | Err(Errno::EINTR) => {}
                Err(_) => break,
            }
            let ready: Vec<usize> = indices
                .into_iter()
                .zip(&fds)
                .filter(|(_, fd)| fd.any().unwrap_or(false))
                .map(|(index, _)| index)
                .collect();
            drop(fds);
            drop(open);
            for index in ready {
                if !self.pump(index) && !cut {
                    cut = true;
                    at_cut();
                }
            }
        }
        self
    }

    /// What a capturing collector kept (invalid UTF-8 replaced), and its counts.
    pub fn into_captured(self) -> Captured {
        let [stdout, stderr] = self.streams.map(|stream| match stream.sink {
            // Moved, not copied, when it is UTF-8.
            Sink::Memory(bytes) => String::from_utf8(bytes)
                .unwrap_or_else(|err| String::from_utf8_lossy(err.as_bytes()).into_owned()),
            _ => String::new(),
        });
        Captured {
            stdout,
            stderr,
            counts: self.counts,
            limit: self.limit,
        }
    }
}

/// Writes to a server's client's stream without blocking longer than [`CLIENT_PATIENCE`]
/// for room (whatever its blocking mode, which is the client's): at most PIPE_BUF bytes
/// at a time once poll says it is writable. False when the client did not take it.
fn forward_within(fd: BorrowedFd, mut bytes: &[u8]) -> bool {
    use nix::poll::{PollFd, PollFlags, PollTimeout, poll};
    let deadline = std::time::Instant::now() + CLIENT_PATIENCE;
    while !bytes.is_empty() {
        let left = deadline.saturating_duration_since(std::time::Instant::now());
        let millis = left.as_millis().min(i32::MAX as u128) as i32;
        let mut fds = [PollFd::new(fd, PollFlags::POLLOUT)];
        match poll(
            &mut fds,
            PollTimeout::try_from(millis).unwrap_or(PollTimeout::MAX),
        ) {
            Ok(0) => return false,
            Err(Errno::EINTR) => continue,
            Err(_) => return true,
            Ok(_) => {}
        }
        let chunk = bytes.len().min(libc::PIPE_BUF);
        match write(fd, &bytes[..chunk]) {
            Ok(written) => bytes = &bytes[written..],
            Err(Errno::EINTR | Errno::EAGAIN) => {}
            Err(_) => return true,
        }
    }
    true
}

/// Writes where the output goes; a reader that went away is not brig's failure.
fn forward(fd: BorrowedFd, mut bytes: &[u8]) {
    while !bytes.is_empty() {
        match write(fd, bytes) {
            Ok(written) => bytes = &bytes[written..],
            Err(Errno::EINTR) => {}
            Err(_) => return,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

    /// The limit is stdout and stderr together; the cut stops the stream and says so.
    #[test]
    fn the_limit_holds_for_both_streams_together() {
        let (mut output, ends) = Output::new(10).unwrap();
        output.capture(u64::MAX);
        std::fs::File::from(ends.stdout)
            .write_all(b"123456")
            .unwrap();
        let mut stderr = std::fs::File::from(ends.stderr);
        stderr.write_all(b"abcdefgh").unwrap();
        assert!(output.pump(0));
        assert!(!output.pump(1), "past the limit");
        drop(stderr);
        output.drain();
        let captured = output.into_captured();
        assert_eq!(captured.stdout, "123456");
        assert_eq!(captured.stderr, "abcd");
        assert_eq!(
            captured.counts,
            Counts {
                stdout_bytes: 6,
                stderr_bytes: 8,
                truncated: true,
                stderr_mid_line: true,
            }
        );
        assert_eq!(captured.limit, 10);
    }

    /// A caller's collector keeps nothing itself: it hands on what is within the limit,
    /// read by read, and counts the rest.
    #[test]
    fn a_caller_gets_what_is_within_the_limit() {
        let (mut output, ends) = Output::new(5).unwrap();
        output.to_caller();
        std::fs::File::from(ends.stdout).write_all(b"abc").unwrap();
        std::fs::File::from(ends.stderr)
            .write_all(b"defgh")
            .unwrap();
        let mut taken = Vec::new();
        assert!(output.pump_to(0, |index, bytes| taken.push((index, bytes.to_vec()))));
        assert!(!output.pump_to(1, |index, bytes| taken.push((index, bytes.to_vec()))));
        assert_eq!(taken, [(0, b"abc".to_vec()), (1, b"de".to_vec())]);
        output.close();
        assert!(output.open_pipes().is_empty());
        let captured = output.into_captured();
        assert_eq!(
            (captured.stdout.as_str(), captured.stderr.as_str()),
            ("", "")
        );
        assert_eq!(captured.counts.stderr_bytes, 5);
        assert!(captured.counts.truncated);
    }

    /// A collector on its own thread ends when its pipes do, keeping everything within
    /// the limit; capturing never raises a limit already set.
    #[test]
    fn a_thread_collects_until_the_pipes_end() {
        let (mut output, ends) = Output::new(1 << 20).unwrap();
        output.capture(u64::MAX);
        let thread = std::thread::spawn(move || output.collect(|| {}));
        let mut stdout = std::fs::File::from(ends.stdout);
        for _ in 0..100 {
            stdout.write_all(&[b'x'; 1000]).unwrap();
        }
        drop(stdout);
        drop(ends.stderr);
        let captured = thread.join().unwrap().into_captured();
        assert_eq!(captured.stdout.len(), 100_000);
        assert!(!captured.counts.truncated);
        assert_eq!(captured.limit, 1 << 20);
    }
}
