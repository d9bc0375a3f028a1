//! `brig session pty`: starts a program (by default the jail's shell) on a terminal of
//! the session's jail, the size of this command's terminal, and attaches this terminal
//! to it: raw mode (restored at the end, also before SIGTERM, SIGHUP or SIGINT end
//! it), what is typed goes as `session_stdin` (bytes, base64), what it writes comes
//! through `session_connect`, and a resize of this terminal (SIGWINCH) is a
//! `session_resize` (docs/protocol.md, "Terminals"). Without a terminal of its own,
//! standard input is typed into it until its end, as it is.

use super::{At, next_reply, request};
use crate::error::{Error, Result};
use crate::serve::protocol::{self, FrameReader};
use crate::verdict::Sinks;
use base64::Engine;
use nix::poll::{PollFd, PollFlags, PollTimeout};
use nix::sys::signal::{SigSet, Signal};
use nix::sys::signalfd::{SfdFlags, SignalFd};
use nix::sys::termios::{self, SetArg, Termios};
use serde_json::{Value, json};
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
    let (cols, rows) = crate::sys::window_size(stdin.as_fd()).unwrap_or((80, 24));
    let mut exec = json!({
        "type": "session_exec",
        "session": at.session,
        "pty": {"cols": cols, "rows": rows},
    });
    if !command.is_empty() {
        exec["command"] = json!(command);
    }
    if let Some(tag) = tag {
        exec["tag"] = json!(tag);
    }
    let started = request(&at.server, exec)?;
    let pid = started["pid"].clone();
    let connection = crate::serve::client::connect(&at.server)?;
    let connect = json!({"brig": protocol::VERSION, "type": "session_connect", "session": at.session, "pid": pid});
    protocol::write_frame(connection.as_fd(), &connect, &[])?;
    let mut reader = FrameReader::replies();
    next_reply(&at.server, &connection, &mut reader)?;
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
            PollFd::new(connection.as_fd(), read),
            PollFd::new(resizes.as_fd(), read),
        ];
        if typing {
            fds.push(PollFd::new(stdin.as_fd(), read));
        }
        // A frame the reader holds already is not news to poll: do not wait for more.
        let wait = match reader.has_frame() {
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
            if let Some((cols, rows)) = resized
                .then(|| crate::sys::window_size(stdin.as_fd()))
                .flatten()
            {
                // It may have ended meanwhile: its end frame says so.
                let _ = request(
                    &at.server,
                    json!({"type": "session_resize", "session": at.session, "pid": pid, "cols": cols, "rows": rows}),
                );
            }
        }
        if typing && ready.get(2) == Some(&true) {
            let mut buffer = [0u8; 16 << 10];
            match nix::unistd::read(&stdin, &mut buffer) {
                Ok(0) | Err(_) => typing = false,
                Ok(count) => {
                    let typed = base64::engine::general_purpose::STANDARD.encode(&buffer[..count]);
                    request(
                        &at.server,
                        json!({"type": "session_stdin", "session": at.session, "pid": pid, "base64": typed}),
                    )?;
                }
            }
        }
        if ready[0] || reader.has_frame() {
            let frame = next_reply(&at.server, &connection, &mut reader)?;
            match frame["type"].as_str() {
                Some("output") => write_output(&frame)?,
                _ => break frame,
            }
        }
    };
    drop(raw);
    let sinks = Sinks::open(None, None, None)?;
    Ok(super::verdict_lines(&end["verdict"], &sinks))
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
fn write_output(frame: &Value) -> Result<()> {
    let bytes = super::processes::output_bytes(frame)?;
    let mut stdout = std::io::stdout();
    stdout
        .write_all(&bytes)
        .and_then(|()| stdout.flush())
        .map_err(|err| Error::setup(format!("write the terminal's output: {err}")))
}
