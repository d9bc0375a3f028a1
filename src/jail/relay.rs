//! `--output-limit`: the program's stdout and stderr go through pipes to brig, which
//! forwards at most the limit (stdout and stderr together) through a fixed buffer, so a
//! flood cannot exhaust the caller's memory; past the limit the jail is killed.

use nix::errno::Errno;
use nix::fcntl::OFlag;
use nix::unistd::{pipe2, read, write};
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};

/// The jail's ends: they become its fds 1 and 2.
pub struct JailEnds {
    pub stdout: OwnedFd,
    pub stderr: OwnedFd,
}

#[derive(Clone, Copy, Debug, Default)]
pub struct Counts {
    pub stdout_bytes: u64,
    pub stderr_bytes: u64,
    pub truncated: bool,
    /// The last byte forwarded to stderr was not a newline.
    pub stderr_mid_line: bool,
}

pub struct Relay {
    streams: [Stream; 2],
    limit: u64,
    forwarded: u64,
    buffer: Box<[u8; 64 * 1024]>,
    pub counts: Counts,
}

struct Stream {
    pipe: Option<OwnedFd>,
    /// brig's own fd 1 or 2.
    target: i32,
    /// Where the output goes instead of `target` (a server's client's stream).
    given: Option<OwnedFd>,
    /// The client did not take its output within [`CLIENT_PATIENCE`]: what follows is
    /// counted, not forwarded, so that brig's supervisor (and the time limit it keeps)
    /// never waits on a client that does not read.
    given_stalled: bool,
}

/// How long brig waits for a server's client to take output it relays.
const CLIENT_PATIENCE: std::time::Duration = std::time::Duration::from_secs(10);

impl Relay {
    pub fn new(limit: u64) -> Result<(Relay, JailEnds), Errno> {
        let (stdout_read, stdout_write) = pipe2(OFlag::O_CLOEXEC | OFlag::O_NONBLOCK)?;
        let (stderr_read, stderr_write) = pipe2(OFlag::O_CLOEXEC | OFlag::O_NONBLOCK)?;
        // Only brig's ends are non-blocking; the program gets ordinary blocking pipes.
        for end in [&stdout_write, &stderr_write] {
            nix::fcntl::fcntl(end, nix::fcntl::FcntlArg::F_SETFL(OFlag::empty()))?;
        }
        let relay = Relay {
            streams: [
                Stream {
                    pipe: Some(stdout_read),
                    target: 1,
                    given: None,
                    given_stalled: false,
                },
                Stream {
                    pipe: Some(stderr_read),
                    target: 2,
                    given: None,
                    given_stalled: false,
                },
            ],
            limit,
            forwarded: 0,
            buffer: Box::new([0; 64 * 1024]),
            counts: Counts::default(),
        };
        Ok((
            relay,
            JailEnds {
                stdout: stdout_write,
                stderr: stderr_write,
            },
        ))
    }

    /// Forwards to these instead of brig's own stdout and stderr.
    pub fn redirect(&mut self, stdout: OwnedFd, stderr: OwnedFd) {
        self.streams[0].given = Some(stdout);
        self.streams[1].given = Some(stderr);
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
    /// exceeded: the caller kills the jail.
    pub fn pump(&mut self, index: usize) -> bool {
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
                Err(_) => return true, // EAGAIN: nothing more for now
            };
            if index == 0 {
                self.counts.stdout_bytes += count as u64;
            } else {
                self.counts.stderr_bytes += count as u64;
            }
            let allowed = self.limit.saturating_sub(self.forwarded).min(count as u64) as usize;
            let stream = &mut self.streams[index];
            match &stream.given {
                Some(_) if stream.given_stalled => {}
                Some(fd) => {
                    stream.given_stalled = !forward_within(fd.as_fd(), &self.buffer[..allowed]);
                }
                None => forward(
                    crate::sys::borrow_fd(stream.target),
                    &self.buffer[..allowed],
                ),
            }
            if index == 1 && allowed > 0 {
                self.counts.stderr_mid_line = self.buffer[allowed - 1] != b'\n';
            }
            self.forwarded += allowed as u64;
            if allowed < count {
                self.counts.truncated = true;
                return false;
            }
        }
    }

    /// After the jail is gone: forwards what is left in the pipes (within the limit).
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
