//! The parent/child protocol. Two pipes, and a socket for descriptors:
//! - `go`: the parent writes one byte once the id maps are written, and later the program
//!   to run (a `P` frame). The parent holds its end open for the jail's whole life, so
//!   the child sees EOF if the parent dies.
//! - `report`: the jail's processes send the parent framed messages: the jail is ready,
//!   a setup error, an exec failure, or the program's final status. Every end is
//!   close-on-exec, so the program never inherits one.
//! - `descriptors` (only for jails that need it): a unix socket pair for descriptors
//!   (SCM_RIGHTS): the child hands brig
//!   one it made inside the jail (the TUN device of `--net filtered`), and brig gives the
//!   program its standard streams when they are not init's (a server's client's).

use super::Program;
use crate::error::{Error, Stage};
use nix::errno::Errno;
use nix::fcntl::OFlag;
use nix::unistd::{pipe2, read, write};
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd, RawFd};
use std::path::PathBuf;

pub struct Channel {
    go_read: OwnedFd,
    go_write: OwnedFd,
    report_read: OwnedFd,
    report_write: OwnedFd,
    descriptors: Option<(OwnedFd, OwnedFd)>,
}

/// The child's ends.
pub struct ChildEnd {
    pub go: OwnedFd,
    pub report: OwnedFd,
    pub descriptors: Option<OwnedFd>,
}

/// The parent's ends.
pub struct ParentEnd {
    pub go: OwnedFd,
    pub report: OwnedFd,
    pub descriptors: Option<OwnedFd>,
}

/// The program's standard input, output and error, and any descriptors after them (3,
/// 4, ...), when brig gives them with the program instead of letting it inherit init's.
pub type Stdio = Vec<OwnedFd>;

#[derive(Clone, Debug, PartialEq)]
pub enum Message {
    /// The jail is assembled; its init waits for the program.
    Ready,
    /// Setting up the jail failed at `stage` (with `errno` when a system call refused):
    /// exit 125.
    SetupError {
        stage: Option<Stage>,
        errno: Option<i32>,
        message: String,
    },
    /// The program could not be executed: exit 126, or 127 when not found.
    ExecError { code: u8, message: String },
    /// The program exited with this code.
    Exited(i32),
    /// The program was killed by `signal` after using `cpu_ms` of CPU itself.
    Signaled { signal: i32, cpu_ms: u64 },
    /// A session's program `id` could not be started or executed (125, 126, 127); its
    /// [`Message::Ended`] follows.
    ProgramError { id: u32, code: u8, message: String },
    /// A session's program `id` ended, with its own resource usage.
    Ended { id: u32, end: Ended },
    /// A session's sweep is done: nothing but init and the kept programs is alive.
    Swept,
    /// A session's program `id` was started as process `pid` (in the jail's PID
    /// namespace), sent by the program itself before its exec.
    Started { id: u32, pid: u32 },
}

/// How a session's program ended, and what it used (its own, and its reaped children's).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Ended {
    /// Its exit status, or None when a signal killed it.
    pub code: Option<i32>,
    pub signal: Option<i32>,
    pub cpu_user_us: u64,
    pub cpu_sys_us: u64,
    pub max_rss_kib: u64,
}

/// What a session's init is told to do once its jail is ready.
#[derive(Debug, PartialEq)]
pub enum Command {
    /// Start `program` as program `id`, in a process group of its own, with the
    /// descriptors sent along as its 0, 1, 2, ...
    Spawn { id: u32, program: Program },
    /// Start `program` as program `id` on a new terminal of the jail's devpts, `cols` ×
    /// `rows`: init opens it, hands its master to brig over the descriptor socket (or,
    /// when it cannot, a message without one: the errno's number as its payload), and
    /// the program gets the slave as its 0, 1, 2 and controlling terminal.
    SpawnTerminal {
        id: u32,
        program: Program,
        cols: u16,
        rows: u16,
    },
    /// Send `signal` to program `id`, or to its process group with `group`.
    Signal { id: u32, signal: i32, group: bool },
    /// SIGKILL every process of the jail but init, the programs `keep`, and the
    /// programs `keep_groups` with their process groups (what they started).
    Sweep {
        keep: Vec<u32>,
        keep_groups: Vec<u32>,
    },
    /// Connect to `port` of the jail's own loopback (a server a program runs there):
    /// init opens the connection inside the jail's network namespace and hands the
    /// socket to brig over the descriptor socket (or the errno's number without one,
    /// as for a terminal). The descriptor flows out of the jail only.
    Dial { port: u16 },
}

impl Channel {
    /// The pipes, and the descriptor socket when `with_descriptors`.
    pub fn new(with_descriptors: bool) -> Result<Channel, Errno> {
        use nix::sys::socket::{AddressFamily, SockFlag, SockType, socketpair};
        let (go_read, go_write) = pipe2(OFlag::O_CLOEXEC)?;
        let (report_read, report_write) = pipe2(OFlag::O_CLOEXEC)?;
        let descriptors = match with_descriptors {
            true => Some(socketpair(
                AddressFamily::Unix,
                SockType::SeqPacket,
                None,
                SockFlag::SOCK_CLOEXEC,
            )?),
            false => None,
        };
        Ok(Channel {
            go_read,
            go_write,
            report_read,
            report_write,
            descriptors,
        })
    }

    pub fn child_end(self) -> ChildEnd {
        ChildEnd {
            go: self.go_read,
            report: self.report_write,
            descriptors: self.descriptors.map(|(_, child)| child),
        }
    }

    pub fn parent_end(self) -> ParentEnd {
        ParentEnd {
            go: self.go_write,
            report: self.report_read,
            descriptors: self.descriptors.map(|(parent, _)| parent),
        }
    }
}

impl ChildEnd {
    pub fn raw_fds(&self) -> Vec<RawFd> {
        [
            Some(&self.go),
            Some(&self.report),
            self.descriptors.as_ref(),
        ]
        .into_iter()
        .flatten()
        .map(AsRawFd::as_raw_fd)
        .collect()
    }

    /// Tells brig a descriptor it waits for could not be made: `errno` instead of it.
    pub fn hand_over_nothing(&self, errno: Errno) {
        if let Some(socket) = self.descriptors.as_ref() {
            let _ = crate::sys::send_with_fds(socket.as_fd(), &(errno as i32).to_le_bytes(), &[]);
        }
    }

    /// Hands brig a descriptor made inside the jail.
    pub fn hand_over(&self, fd: OwnedFd) -> Result<(), Errno> {
        let socket = self.descriptors.as_ref().ok_or(Errno::EBADF)?;
        crate::sys::send_fd(socket.as_fd(), fd.as_fd())
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

    /// Blocks until the parent sends the program to run, with its standard streams when
    /// brig gives them; None if the parent went away or sent something else.
    pub fn wait_for_program(&self) -> Option<(Program, Option<Stdio>)> {
        let (tag, payload) = read_frame(&self.go)?;
        let program = decode_program(&payload)?;
        match tag {
            b'P' => Some((program, None)),
            b'Q' => {
                let mut byte = [0u8; 1];
                let (_, fds) =
                    crate::sys::receive_with_fds(self.descriptors.as_ref()?.as_fd(), &mut byte)
                        .ok()?;
                (fds.len() >= 3).then_some((program, Some(fds)))
            }
            _ => None,
        }
    }

    /// A session's next command, with the descriptors of a spawn; None once brig closed
    /// its end (the session is over) or sent something else.
    pub fn next_command(&self) -> Option<(Command, Stdio)> {
        let (tag, payload) = read_frame(&self.go)?;
        let number = |at: usize| -> Option<u32> {
            Some(u32::from_le_bytes(
                payload.get(at..at + 4)?.try_into().ok()?,
            ))
        };
        match tag {
            b'S' => {
                let program = decode_program(payload.get(4..)?)?;
                let mut byte = [0u8; 1];
                let (_, fds) =
                    crate::sys::receive_with_fds(self.descriptors.as_ref()?.as_fd(), &mut byte)
                        .ok()?;
                let command = Command::Spawn {
                    id: number(0)?,
                    program,
                };
                Some((command, fds))
            }
            b'T' => {
                let size = |at: usize| -> Option<u16> {
                    Some(u16::from_le_bytes(
                        payload.get(at..at + 2)?.try_into().ok()?,
                    ))
                };
                let command = Command::SpawnTerminal {
                    id: number(0)?,
                    cols: size(4)?,
                    rows: size(6)?,
                    program: decode_program(payload.get(8..)?)?,
                };
                Some((command, Vec::new()))
            }
            b'K' => Some((
                Command::Signal {
                    id: number(0)?,
                    signal: number(4)? as i32,
                    group: *payload.get(8)? != 0,
                },
                Vec::new(),
            )),
            b'W' => {
                // The number of `keep`, then `keep`, then `keep_groups`.
                let count = number(0)? as usize;
                let ids: Vec<u32> = payload
                    .get(4..)?
                    .chunks_exact(4)
                    .map(|chunk| u32::from_le_bytes(chunk.try_into().unwrap_or_default()))
                    .collect();
                let (keep, keep_groups) = ids.split_at(count.min(ids.len()));
                let command = Command::Sweep {
                    keep: keep.to_vec(),
                    keep_groups: keep_groups.to_vec(),
                };
                Some((command, Vec::new()))
            }
            b'D' => Some((
                Command::Dial {
                    port: u16::from_le_bytes(payload.get(0..2)?.try_into().ok()?),
                },
                Vec::new(),
            )),
            _ => None,
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

    /// Reports a failed setup step to brig.
    pub fn send_error(&self, err: &Error) {
        self.send(&Message::SetupError {
            stage: err.stage(),
            errno: err.errno().map(|errno| errno as i32),
            message: err.to_string(),
        });
    }
}

impl ParentEnd {
    pub fn say_go(&self) -> Result<(), Errno> {
        write(&self.go, b"g").map(drop)
    }

    /// Waits until the jail is assembled. Err with what the jail said instead (a setup
    /// error), or nothing when it died without a word.
    pub fn wait_until_ready(&self) -> Result<(), Vec<Message>> {
        match read_frame(&self.report) {
            Some((b'R', _)) => Ok(()),
            Some((tag, payload)) => {
                let mut messages: Vec<Message> = decode_frame(tag, &payload).into_iter().collect();
                messages.extend(self.collect());
                Err(messages)
            }
            None => Err(self.collect()),
        }
    }

    /// The descriptor the jail hands over next (a terminal's master), or the errno it
    /// sent instead ([`ChildEnd::hand_over_nothing`]); blocks until it comes (poll
    /// [`Self::descriptors_fd`] first).
    pub fn receive_handed(&self) -> Result<OwnedFd, Errno> {
        let socket = self.descriptors.as_ref().ok_or(Errno::EBADF)?;
        let mut errno = [0u8; 4];
        let (count, fds) = crate::sys::receive_with_fds(socket.as_fd(), &mut errno)?;
        match fds.into_iter().next() {
            Some(fd) => Ok(fd),
            None if count == 4 => Err(Errno::from_raw(i32::from_le_bytes(errno))),
            None => Err(Errno::EPIPE),
        }
    }

    /// The descriptor socket, to poll for what the jail hands over.
    pub fn descriptors_fd(&self) -> Option<BorrowedFd<'_>> {
        self.descriptors.as_ref().map(AsFd::as_fd)
    }

    /// The descriptor the jail handed over, once it is ready.
    pub fn take_handed_over(&self) -> Option<OwnedFd> {
        crate::sys::receive_fd(self.descriptors.as_ref()?.as_fd())
    }

    /// Hands the jail the program to run, and its standard streams when given.
    pub fn send_program(&self, program: &Program, stdio: Option<&Stdio>) -> Result<(), Errno> {
        let payload = encode_program(program);
        let mut frame = Vec::with_capacity(payload.len() + 5);
        frame.push(if stdio.is_some() { b'Q' } else { b'P' });
        frame.extend_from_slice(&(payload.len() as u32).to_le_bytes());
        frame.extend_from_slice(&payload);
        write_all(&self.go, &frame)?;
        if let Some(stdio) = stdio {
            let fds: Vec<BorrowedFd> = stdio.iter().map(AsFd::as_fd).collect();
            let socket = self.descriptors.as_ref().ok_or(Errno::EBADF)?;
            crate::sys::send_with_fds(socket.as_fd(), b"s", &fds)?;
        }
        Ok(())
    }

    /// Tells a session's init what to do; a spawn's descriptors go along.
    pub fn send_command(&self, command: &Command, stdio: &[BorrowedFd]) -> Result<(), Errno> {
        let (tag, payload) = match command {
            Command::Spawn { id, program } => {
                let mut payload = id.to_le_bytes().to_vec();
                payload.extend_from_slice(&encode_program(program));
                (b'S', payload)
            }
            Command::SpawnTerminal {
                id,
                program,
                cols,
                rows,
            } => {
                let mut payload = id.to_le_bytes().to_vec();
                payload.extend_from_slice(&cols.to_le_bytes());
                payload.extend_from_slice(&rows.to_le_bytes());
                payload.extend_from_slice(&encode_program(program));
                (b'T', payload)
            }
            Command::Signal { id, signal, group } => {
                let mut payload = id.to_le_bytes().to_vec();
                payload.extend_from_slice(&signal.to_le_bytes());
                payload.push(u8::from(*group));
                (b'K', payload)
            }
            Command::Sweep { keep, keep_groups } => {
                let count = (keep.len() as u32).to_le_bytes();
                let ids = keep
                    .iter()
                    .chain(keep_groups)
                    .flat_map(|id| id.to_le_bytes());
                (b'W', count.into_iter().chain(ids).collect())
            }
            Command::Dial { port } => (b'D', port.to_le_bytes().to_vec()),
        };
        let mut frame = Vec::with_capacity(payload.len() + 5);
        frame.push(tag);
        frame.extend_from_slice(&(payload.len() as u32).to_le_bytes());
        frame.extend_from_slice(&payload);
        write_all(&self.go, &frame)?;
        if matches!(command, Command::Spawn { .. }) {
            let socket = self.descriptors.as_ref().ok_or(Errno::EBADF)?;
            crate::sys::send_with_fds(socket.as_fd(), b"s", stdio)?;
        }
        Ok(())
    }

    /// The report pipe's end, to poll (a session's messages arrive while init lives).
    pub fn report_fd(&self) -> BorrowedFd<'_> {
        self.report.as_fd()
    }

    /// Reads of the report pipe return what has arrived, never wait ([`Self::read_available`]).
    pub fn report_without_waiting(&self) -> Result<(), Errno> {
        nix::fcntl::fcntl(
            &self.report,
            nix::fcntl::FcntlArg::F_SETFL(OFlag::O_NONBLOCK),
        )
        .map(drop)
    }

    /// The whole messages that have arrived, without blocking (the report pipe must be
    /// non-blocking); a frame's start waits in `pending` for its rest.
    pub fn read_available(&self, pending: &mut Vec<u8>) -> Vec<Message> {
        let mut buffer = [0u8; 4096];
        while let Ok(count @ 1..) = read(&self.report, &mut buffer) {
            pending.extend_from_slice(&buffer[..count]);
        }
        let (messages, used) = decode_prefix(pending);
        pending.drain(..used);
        messages
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

/// Reads one whole frame (tag, u32 length, payload); None at EOF or on an error.
fn read_frame(fd: &impl AsFd) -> Option<(u8, Vec<u8>)> {
    let mut header = [0u8; 5];
    read_exact(fd, &mut header)?;
    let length = u32::from_le_bytes([header[1], header[2], header[3], header[4]]) as usize;
    let mut payload = vec![0u8; length];
    read_exact(fd, &mut payload)?;
    Some((header[0], payload))
}

fn read_exact(fd: &impl AsFd, mut buffer: &mut [u8]) -> Option<()> {
    while !buffer.is_empty() {
        match read(fd, buffer) {
            Ok(0) => return None,
            Ok(count) => buffer = &mut buffer[count..],
            Err(Errno::EINTR) => {}
            Err(_) => return None,
        }
    }
    Some(())
}

fn write_all(fd: &impl AsFd, mut bytes: &[u8]) -> Result<(), Errno> {
    while !bytes.is_empty() {
        match write(fd, bytes) {
            Ok(written) => bytes = &bytes[written..],
            Err(Errno::EINTR) => {}
            Err(errno) => return Err(errno),
        }
    }
    Ok(())
}

/// argc and envc (u32 each), whether it runs as root (u32, 0 or 1), then chdir, the
/// arguments and the environment, each ended by a NUL byte (the plan refused strings
/// with one).
fn encode_program(program: &Program) -> Vec<u8> {
    let mut payload = Vec::new();
    payload.extend_from_slice(&(program.argv.len() as u32).to_le_bytes());
    payload.extend_from_slice(&(program.env.len() as u32).to_le_bytes());
    payload.extend_from_slice(&u32::from(program.as_root).to_le_bytes());
    let chdir = program.chdir.to_string_lossy();
    for text in std::iter::once(chdir.as_ref())
        .chain(program.argv.iter().map(String::as_str))
        .chain(program.env.iter().map(String::as_str))
    {
        payload.extend_from_slice(text.as_bytes());
        payload.push(0);
    }
    payload
}

fn decode_program(payload: &[u8]) -> Option<Program> {
    let argc = u32::from_le_bytes(payload.get(0..4)?.try_into().ok()?) as usize;
    let envc = u32::from_le_bytes(payload.get(4..8)?.try_into().ok()?) as usize;
    let as_root = match u32::from_le_bytes(payload.get(8..12)?.try_into().ok()?) {
        0 => false,
        1 => true,
        _ => return None,
    };
    // Every string ends with its NUL: exactly 1 + argc + envc of them.
    let texts: Vec<String> = payload[12..]
        .strip_suffix(&[0])?
        .split(|byte| *byte == 0)
        .map(|text| String::from_utf8_lossy(text).into_owned())
        .collect();
    if argc == 0 || texts.len() != 1 + argc + envc {
        return None;
    }
    let mut texts = texts.into_iter();
    let chdir = PathBuf::from(texts.next()?);
    let argv = texts.by_ref().take(argc).collect();
    let env = texts.collect();
    Some(Program {
        argv,
        env,
        chdir,
        as_root,
    })
}

/// One frame: tag, u32 length, payload. Each frame is written with a single write(2) of
/// at most PIPE_BUF bytes, so frames from different processes never interleave.
fn send(fd: &impl AsFd, message: &Message) {
    let (tag, payload): (u8, Vec<u8>) = match message {
        Message::Ready => (b'R', Vec::new()),
        Message::SetupError {
            stage,
            errno,
            message,
        } => {
            let mut payload = vec![stage.map_or(u8::MAX, Stage::to_wire)];
            payload.extend_from_slice(&errno.unwrap_or(0).to_le_bytes());
            payload.extend_from_slice(message.as_bytes());
            (b'E', payload)
        }
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
        Message::ProgramError { id, code, message } => {
            let mut payload = id.to_le_bytes().to_vec();
            payload.push(*code);
            payload.extend_from_slice(message.as_bytes());
            (b'x', payload)
        }
        Message::Swept => (b'w', Vec::new()),
        Message::Started { id, pid } => {
            let mut payload = id.to_le_bytes().to_vec();
            payload.extend_from_slice(&pid.to_le_bytes());
            (b'P', payload)
        }
        Message::Ended { id, end } => {
            let mut payload = id.to_le_bytes().to_vec();
            let (kind, value) = match (end.code, end.signal) {
                (Some(code), _) => (0u8, code),
                (None, signal) => (1u8, signal.unwrap_or(0)),
            };
            payload.push(kind);
            payload.extend_from_slice(&value.to_le_bytes());
            for number in [end.cpu_user_us, end.cpu_sys_us, end.max_rss_kib] {
                payload.extend_from_slice(&number.to_le_bytes());
            }
            (b'N', payload)
        }
    };
    let mut frame = Vec::with_capacity(payload.len() + 5);
    frame.push(tag);
    let payload = &payload[..payload.len().min(libc::PIPE_BUF - 5)];
    frame.extend_from_slice(&(payload.len() as u32).to_le_bytes());
    frame.extend_from_slice(payload);
    let _ = write(fd, &frame);
}

fn decode(bytes: &[u8]) -> Vec<Message> {
    decode_prefix(bytes).0
}

/// The whole frames at the start of `bytes`, and how many bytes they took.
fn decode_prefix(bytes: &[u8]) -> (Vec<Message>, usize) {
    let mut messages = Vec::new();
    let mut used = 0;
    while bytes.len() - used >= 5 {
        let rest = &bytes[used..];
        let length = u32::from_le_bytes([rest[1], rest[2], rest[3], rest[4]]) as usize;
        let Some(payload) = rest.get(5..5 + length) else {
            break;
        };
        // A frame brig does not know is skipped; the next one is still whole.
        messages.extend(decode_frame(rest[0], payload));
        used += 5 + length;
    }
    (messages, used)
}

/// One frame's message; None for a tag or payload brig does not know.
fn decode_frame(tag: u8, payload: &[u8]) -> Option<Message> {
    let number = || payload.try_into().map(i32::from_le_bytes).unwrap_or(-1);
    Some(match tag {
        b'R' => Message::Ready,
        b'E' if payload.len() >= 5 => Message::SetupError {
            stage: Stage::from_wire(payload[0]),
            errno: Some(i32::from_le_bytes([
                payload[1], payload[2], payload[3], payload[4],
            ]))
            .filter(|errno| *errno != 0),
            message: String::from_utf8_lossy(&payload[5..]).into_owned(),
        },
        b'X' if !payload.is_empty() => Message::ExecError {
            code: payload[0],
            message: String::from_utf8_lossy(&payload[1..]).into_owned(),
        },
        b'S' => Message::Exited(number()),
        b'w' => Message::Swept,
        b'P' if payload.len() == 8 => Message::Started {
            id: u32::from_le_bytes(payload[0..4].try_into().ok()?),
            pid: u32::from_le_bytes(payload[4..8].try_into().ok()?),
        },
        b'x' if payload.len() >= 5 => Message::ProgramError {
            id: u32::from_le_bytes(payload[0..4].try_into().ok()?),
            code: payload[4],
            message: String::from_utf8_lossy(&payload[5..]).into_owned(),
        },
        b'N' if payload.len() == 33 => {
            let value = i32::from_le_bytes(payload[5..9].try_into().ok()?);
            let number =
                |at: usize| u64::from_le_bytes(payload[at..at + 8].try_into().unwrap_or_default());
            Message::Ended {
                id: u32::from_le_bytes(payload[0..4].try_into().ok()?),
                end: Ended {
                    code: (payload[4] == 0).then_some(value),
                    signal: (payload[4] == 1).then_some(value),
                    cpu_user_us: number(9),
                    cpu_sys_us: number(17),
                    max_rss_kib: number(25),
                },
            }
        }
        b'K' if payload.len() == 12 => Message::Signaled {
            signal: i32::from_le_bytes([payload[0], payload[1], payload[2], payload[3]]),
            cpu_ms: u64::from_le_bytes(payload[4..12].try_into().unwrap_or_default()),
        },
        _ => return None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn frames_round_trip() {
        let channel = Channel::new(true).unwrap();
        let (go_read, go_write, report_read, report_write) = (
            channel.go_read,
            channel.go_write,
            channel.report_read,
            channel.report_write,
        );
        let (parent_descriptors, child_descriptors) = channel.descriptors.unwrap();
        let child = ChildEnd {
            go: go_read,
            report: report_write,
            descriptors: Some(child_descriptors),
        };
        let sent = [
            Message::SetupError {
                stage: Some(Stage::Mounts),
                errno: Some(libc::EPERM),
                message: "mount failed".into(),
            },
            Message::SetupError {
                stage: None,
                errno: None,
                message: "no stage".into(),
            },
            Message::ExecError {
                code: 127,
                message: "nope".into(),
            },
            Message::Exited(3),
            Message::Signaled {
                signal: 9,
                cpu_ms: 1500,
            },
            Message::ProgramError {
                id: 7,
                code: 127,
                message: "not found".into(),
            },
            Message::Ended {
                id: 7,
                end: Ended {
                    code: None,
                    signal: Some(9),
                    cpu_user_us: 1,
                    cpu_sys_us: 2,
                    max_rss_kib: 3,
                },
            },
            Message::Swept,
            Message::Started { id: 3, pid: 41 },
        ];
        for message in &sent {
            child.send(message);
        }
        drop(child);
        let parent = ParentEnd {
            go: go_write,
            report: report_read,
            descriptors: Some(parent_descriptors),
        };
        assert_eq!(parent.collect(), sent);
    }

    #[test]
    fn the_program_round_trips() {
        let program = Program {
            argv: vec![
                "python3".into(),
                "-c".into(),
                "print('a b')".into(),
                "".into(),
            ],
            env: vec!["PATH=/usr/bin".into(), "EMPTY=".into()],
            chdir: PathBuf::from("/home/sandbox"),
            as_root: true,
        };
        assert_eq!(decode_program(&encode_program(&program)), Some(program));
        assert_eq!(decode_program(b"\x01\0\0\0\0\0\0\0/\0"), None);
        assert_eq!(decode_program(b"\x01"), None);
    }

    #[test]
    fn session_commands_round_trip() {
        let channel = Channel::new(true).unwrap();
        let (parent_descriptors, child_descriptors) = channel.descriptors.unwrap();
        let parent = ParentEnd {
            go: channel.go_write,
            report: channel.report_read,
            descriptors: Some(parent_descriptors),
        };
        let child = ChildEnd {
            go: channel.go_read,
            report: channel.report_write,
            descriptors: Some(child_descriptors),
        };
        let (pipe_read, _pipe_write) = nix::unistd::pipe().unwrap();
        let spawn = Command::Spawn {
            id: 3,
            program: Program {
                argv: vec!["ls".into()],
                env: vec![],
                chdir: "/".into(),
                as_root: false,
            },
        };
        parent.send_command(&spawn, &[pipe_read.as_fd()]).unwrap();
        let (command, fds) = child.next_command().unwrap();
        assert_eq!((command, fds.len()), (spawn, 1));
        for command in [
            Command::Signal {
                id: 3,
                signal: 2,
                group: false,
            },
            Command::Sweep {
                keep: vec![1, 5],
                keep_groups: vec![7],
            },
            Command::Dial { port: 8000 },
        ] {
            parent.send_command(&command, &[]).unwrap();
            assert_eq!(child.next_command().unwrap().0, command);
        }
        // A message split across reads waits for its rest.
        let mut pending = Vec::new();
        nix::fcntl::fcntl(
            &parent.report,
            nix::fcntl::FcntlArg::F_SETFL(OFlag::O_NONBLOCK),
        )
        .unwrap();
        write(&child.report, &[b'S', 4, 0]).unwrap();
        assert!(parent.read_available(&mut pending).is_empty());
        write(&child.report, &[0, 0, 5, 0, 0, 0]).unwrap();
        assert_eq!(
            parent.read_available(&mut pending),
            vec![Message::Exited(5)]
        );
        assert!(pending.is_empty());
    }
}
