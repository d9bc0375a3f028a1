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
}

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
                },
                Stream {
                    pipe: Some(stderr_read),
                    target: 2,
                    given: None,
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
            let stream = &self.streams[index];
            let target = match &stream.given {
                Some(fd) => fd.as_fd(),
                None => crate::sys::borrow_fd(stream.target),
            };
            forward(target, &self.buffer[..allowed]);
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
