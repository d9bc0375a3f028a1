//! `brig session pty`: starts a program (by default the jail's shell) on a terminal of
//! the session's jail, the size of this command's terminal, and attaches this terminal
//! to it: raw mode (restored at the end, also before SIGTERM, SIGHUP or SIGINT end
//! it), what is typed goes as `session_stdin` (bytes, base64), what it writes comes
//! through `session_connect`, and a resize of this terminal (SIGWINCH) is a
//! `session_resize` (docs/protocol.md, "Terminals"). Without a terminal of its own,
//! standard input is typed into it until its end, as it is.

use super::At;
use brig::error::{Error, Result};
use brig::serve::protocol::PtySize;
use brig::serve::reply::{Output, SessionReply};
use brig::serve::{Exec, ProcessRef};
use brig::verdict::Sinks;
use nix::poll::{PollFd, PollFlags, PollTimeout};
use nix::sys::signal::{SigSet, Signal};
use nix::sys::signalfd::{SfdFlags, SignalFd};
use nix::sys::termios::{self, SetArg, Termios};
use std::io::Write;
use std::os::fd::{AsFd, BorrowedFd};

/// This command's terminal in raw mode, as it was again once dropped.
struct RawMode {
    saved: Termios,
}

impl RawMode {
    /// Raw mode for `terminal`; None when it is not a terminal.
    fn enter(terminal: BorrowedFd) -> Option<RawMode> {
        let saved = termios::tcgetattr(terminal).ok()?;
        let mut raw = saved.clone();
        termios::cfmakeraw(&mut raw);
        termios::tcsetattr(terminal, SetArg::TCSANOW, &raw).ok()?;
        Some(RawMode { saved })
    }
}

impl Drop for RawMode {
    fn drop(&mut self) {
        let _ = termios::tcsetattr(std::io::stdin().as_fd(), SetArg::TCSANOW, &self.saved);
    }
}

pub fn attach(at: &At, command: Vec<String>, tag: Option<String>) -> Result<i32> {
    let stdin = std::io::stdin();
    let size = PtySize::of_terminal(stdin.as_fd()).unwrap_or(PtySize { cols: 80, rows: 24 });
    let session = at.session();
    let exec = Exec {
        command,
        tag,
        ..Exec::default()
    };
    let started = session.pty(&exec, size)?;
    let pid =
        ProcessRef::Pid(started.pid.ok_or_else(|| {
            Error::setup("brig serve started the terminal without saying its pid")
        })?);
    let (_, mut frames) = session.connect(&pid)?;
    // Resizes arrive as a descriptor the loop polls; so do the signals that end this
    // command (none comes from the keyboard in raw mode), so that the terminal is
    // restored before they take their course. One ignored from the start stays so.
    let signals = SigSet::from_iter([
        Signal::SIGWINCH,
        Signal::SIGINT,
        Signal::SIGTERM,
        Signal::SIGHUP,
    ]);
    signals
        .thread_block()
        .map_err(|errno| Error::os("block SIGWINCH and the ending signals", errno))?;
    let resizes = SignalFd::with_flags(&signals, SfdFlags::SFD_NONBLOCK | SfdFlags::SFD_CLOEXEC)
        .map_err(|errno| Error::os("open a signalfd for SIGWINCH and the ending signals", errno))?;
    let raw = RawMode::enter(stdin.as_fd());
    let mut typing = true;
    let end = loop {
        let read = PollFlags::POLLIN;
        let mut fds = vec![
            PollFd::new(frames.as_fd(), read),
            PollFd::new(resizes.as_fd(), read),
        ];
        if typing {
            fds.push(PollFd::new(stdin.as_fd(), read));
        }
        // A frame the reader holds already is not news to poll: do not wait for more.
        let wait = match frames.has_frame() {
            true => PollTimeout::ZERO,
            false => PollTimeout::NONE,
        };
        nix::poll::poll(&mut fds, wait)
            .or_else(|errno| match errno {
                nix::errno::Errno::EINTR => Ok(0),
                errno => Err(errno),
            })
            .map_err(|errno| Error::os("wait for the terminal or this one", errno))?;
        let ready: Vec<bool> = fds.iter().map(|fd| fd.any().unwrap_or(false)).collect();
        if ready[1] {
            let mut resized = false;
            while let Ok(Some(info)) = resizes.read_signal() {
                match Signal::try_from(info.ssi_signo as i32) {
                    Ok(Signal::SIGWINCH) => resized = true,
                    Ok(ending) => {
                        drop(raw);
                        end_by(ending);
                    }
                    Err(_) => {}
                }
            }
            if let Some(size) = resized
                .then(|| PtySize::of_terminal(stdin.as_fd()))
                .flatten()
            {
                // It may have ended meanwhile: its end frame says so.
                let _ = session.resize(&pid, size);
            }
        }
        if typing && ready.get(2) == Some(&true) {
            let mut buffer = [0u8; 16 << 10];
            match nix::unistd::read(&stdin, &mut buffer) {
                Ok(0) | Err(_) => typing = false,
                Ok(count) => {
                    session.stdin(&pid, &buffer[..count], false)?;
                }
            }
        }
        if ready[0] || frames.has_frame() {
            match frames.next_reply()? {
                SessionReply::Output(output) => write_output(&output)?,
                SessionReply::Exited(exited) => break exited,
                other => {
                    return Err(Error::setup(format!(
                        "brig serve answered with a `{}` frame where `exited` was due",
                        other.kind()
                    )));
                }
            }
        }
    };
    drop(raw);
    let sinks = Sinks::open(None, None, None)?;
    Ok(super::verdict_lines(end.verdict.as_deref(), &sinks))
}

/// Ends this command by `signal`, its default action (the shell sees 128 + N): the
/// connection closes with it; the program goes on in the session.
fn end_by(signal: Signal) -> ! {
    let _ = nix::sys::signal::raise(signal);
    let _ = SigSet::from(signal).thread_unblock();
    // Not ended by it (a handler or an ignore set since): as a shell would report it.
    std::process::exit(128 + signal as i32)
}

/// A terminal's output to this command's stdout, as it is.
fn write_output(output: &Output) -> Result<()> {
    let bytes = output.bytes()?;
    let mut stdout = std::io::stdout();
    stdout
        .write_all(&bytes)
        .and_then(|()| stdout.flush())
        .map_err(|err| Error::setup(format!("write the terminal's output: {err}")))
}
