//! The parent/child protocol. Two pipes:
//! - `go`: the parent writes one byte once the id maps are written. The parent holds its
//!   end open for the jail's whole life, so the child sees EOF if the parent dies.
//! - `report`: the jail's processes send the parent framed messages: a setup error, an
//!   exec failure, or the program's final status. Every end is close-on-exec, so the
//!   program never inherits one.

use nix::errno::Errno;
use nix::fcntl::OFlag;
use nix::unistd::{pipe2, read, write};
use std::os::fd::{AsFd, AsRawFd, OwnedFd, RawFd};

pub struct Channel {
    go_read: OwnedFd,
    go_write: OwnedFd,
    report_read: OwnedFd,
    report_write: OwnedFd,
}

/// The child's ends.
pub struct ChildEnd {
    pub go: OwnedFd,
    pub report: OwnedFd,
}

/// The parent's ends.
pub struct ParentEnd {
    pub go: OwnedFd,
    pub report: OwnedFd,
}

#[derive(Debug, PartialEq)]
pub enum Message {
    /// Setting up the jail failed: exit 125.
    SetupError(String),
    /// The program could not be executed: exit 126, or 127 when not found.
    ExecError { code: u8, message: String },
    /// The program exited with this code.
    Exited(i32),
    /// The program was killed by this signal.
    /// The program was killed by `signal` after using `cpu_ms` of CPU itself.
    Signaled { signal: i32, cpu_ms: u64 },
}

impl Channel {
    pub fn new() -> Result<Channel, Errno> {
        let (go_read, go_write) = pipe2(OFlag::O_CLOEXEC)?;
        let (report_read, report_write) = pipe2(OFlag::O_CLOEXEC)?;
        Ok(Channel {
            go_read,
            go_write,
            report_read,
            report_write,
        })
    }

    pub fn child_end(self) -> ChildEnd {
        ChildEnd {
            go: self.go_read,
            report: self.report_write,
        }
    }

    pub fn parent_end(self) -> ParentEnd {
        ParentEnd {
            go: self.go_write,
            report: self.report_read,
        }
    }
}

impl ChildEnd {
    pub fn raw_fds(&self) -> [RawFd; 2] {
        [self.go.as_raw_fd(), self.report.as_raw_fd()]
    }

    /// Blocks until the parent says go; false if the parent went away.
    pub fn wait_for_go(&self) -> bool {
        let mut byte = [0u8; 1];
        loop {
            match read(&self.go, &mut byte) {
                Ok(1) => return true,
                Err(Errno::EINTR) => continue,
                _ => return false,
            }
        }
    }

    /// False once the parent has exited (its end of `go` is closed then).
    pub fn parent_alive(&self) -> bool {
        let mut fds = [nix::poll::PollFd::new(
            self.go.as_fd(),
            nix::poll::PollFlags::POLLIN,
        )];
        matches!(
            nix::poll::poll(&mut fds, nix::poll::PollTimeout::ZERO),
            Ok(0)
        )
    }

    pub fn send(&self, message: &Message) {
        send(&self.report, message);
    }
}

impl ParentEnd {
    pub fn say_go(&self) -> Result<(), Errno> {
        write(&self.go, b"g").map(drop)
    }

    /// Every message the jail sent; call once the jail's init has exited.
    pub fn collect(&self) -> Vec<Message> {
        let mut bytes = Vec::new();
        let mut buffer = [0u8; 4096];
        while let Ok(count @ 1..) = read(&self.report, &mut buffer) {
            bytes.extend_from_slice(&buffer[..count]);
        }
        decode(&bytes)
    }
}

/// One frame: tag, u32 length, payload. Each frame is written with a single write(2) of
/// at most PIPE_BUF bytes, so frames from different processes never interleave.
fn send(fd: &impl AsFd, message: &Message) {
    let (tag, payload): (u8, Vec<u8>) = match message {
        Message::SetupError(text) => (b'E', text.as_bytes().to_vec()),
        Message::ExecError { code, message } => {
            let mut payload = vec![*code];
            payload.extend_from_slice(message.as_bytes());
            (b'X', payload)
        }
        Message::Exited(code) => (b'S', code.to_le_bytes().to_vec()),
        Message::Signaled { signal, cpu_ms } => {
            let mut payload = signal.to_le_bytes().to_vec();
            payload.extend_from_slice(&cpu_ms.to_le_bytes());
            (b'K', payload)
        }
    };
    let mut frame = Vec::with_capacity(payload.len() + 5);
    frame.push(tag);
    let payload = &payload[..payload.len().min(libc::PIPE_BUF - 5)];
    frame.extend_from_slice(&(payload.len() as u32).to_le_bytes());
    frame.extend_from_slice(payload);
    let _ = write(fd, &frame);
}

fn decode(mut bytes: &[u8]) -> Vec<Message> {
    let mut messages = Vec::new();
    while bytes.len() >= 5 {
        let tag = bytes[0];
        let length = u32::from_le_bytes([bytes[1], bytes[2], bytes[3], bytes[4]]) as usize;
        let Some(payload) = bytes.get(5..5 + length) else {
            break;
        };
        let text = || String::from_utf8_lossy(payload).into_owned();
        let number = || payload.try_into().map(i32::from_le_bytes).unwrap_or(-1);
        messages.push(match tag {
            b'E' => Message::SetupError(text()),
            b'X' if !payload.is_empty() => Message::ExecError {
                code: payload[0],
                message: String::from_utf8_lossy(&payload[1..]).into_owned(),
            },
            b'S' => Message::Exited(number()),
            b'K' if payload.len() == 12 => Message::Signaled {
                signal: i32::from_le_bytes([payload[0], payload[1], payload[2], payload[3]]),
                cpu_ms: u64::from_le_bytes(payload[4..12].try_into().unwrap_or_default()),
            },
            _ => break,
        });
        bytes = &bytes[5 + length..];
    }
    messages
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn frames_round_trip() {
        let channel = Channel::new().unwrap();
        let (go_read, go_write, report_read, report_write) = (
            channel.go_read,
            channel.go_write,
            channel.report_read,
            channel.report_write,
        );
        let child = ChildEnd {
            go: go_read,
            report: report_write,
        };
        let sent = [
            Message::SetupError("mount failed".into()),
            Message::ExecError {
                code: 127,
                message: "nope".into(),
            },
            Message::Exited(3),
            Message::Signaled {
                signal: 9,
                cpu_ms: 1500,
            },
        ];
        for message in &sent {
            child.send(message);
        }
        drop(child);
        let parent = ParentEnd {
            go: go_write,
            report: report_read,
        };
        assert_eq!(parent.collect(), sent);
    }
}
