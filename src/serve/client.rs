//! `brig run --server PATH`: the same options, exit statuses and verdict as a one-shot
//! run, served by a `brig serve` on PATH. The client's own stdin, stdout and stderr go to
//! the jail with the request (SCM_RIGHTS), so output flows straight through; SIGINT,
//! SIGTERM, SIGHUP, SIGQUIT, SIGUSR1 and SIGUSR2 to the client reach the program. The
//! command line delivers and prints the answer (src/cli/served.rs).

use super::protocol::{self, FrameReader, Read, Reply, Request, StdioMode};
use crate::error::{Context, Error, Result};
use crate::options::JailOptions;
use nix::sys::signal::{SigmaskHow, sigprocmask};
use nix::sys::signalfd::{SfdFlags, SignalFd};
use std::os::fd::AsFd;
use std::os::unix::net::UnixStream;
use std::path::Path;

/// The environment variable naming one more uid a client trusts to listen on its server's
/// socket (besides root and its own).
pub const SERVER_UID_ENV: &str = "BRIG_SERVER_UID";

/// Connects to the server, and checks who listens (SO_PEERCRED) before anything is sent:
/// whoever it is gets this process's stdio descriptors and decides its exit status, so
/// only root, this process's own uid or the uid in `BRIG_SERVER_UID` is trusted.
pub fn connect(socket: &Path) -> Result<UnixStream> {
    connect_trusting(socket, None)
}

/// [`connect`], trusting the listener's uid `also` too (a caller's explicit choice, as
/// `BRIG_SERVER_UID` is the environment's).
pub fn connect_trusting(socket: &Path, also: Option<u32>) -> Result<UnixStream> {
    let stream = UnixStream::connect(socket).map_err(|err| {
        Error::input(format!(
            "--server {}: cannot connect: {err}; is `brig serve --socket {}` running, and may you use it?",
            socket.display(),
            socket.display()
        ))
    })?;
    let listener =
        nix::sys::socket::getsockopt(&stream, nix::sys::socket::sockopt::PeerCredentials)
            .context(|| {
                format!(
                    "--server {}: read the listener's credentials",
                    socket.display()
                )
            })?
            .uid();
    let own = nix::unistd::geteuid().as_raw();
    let trusted = match std::env::var(SERVER_UID_ENV) {
        Ok(value) => Some(user_id(&value).ok_or_else(|| {
            Error::input(format!(
                "{SERVER_UID_ENV}={value} (from the environment): no such user in /etc/passwd; give the name or number of the user whose server you trust"
            ))
        })?),
        Err(_) => None,
    };
    if listener != 0 && listener != own && Some(listener) != trusted && Some(listener) != also {
        return Err(Error::input(format!(
            "--server {}: the listener is uid {listener}, neither root nor you (uid {own}); nothing was sent. If you trust that user's server, set {SERVER_UID_ENV}={listener}",
            socket.display()
        )));
    }
    Ok(stream)
}

/// A user's number, or the number of a user named in /etc/passwd (brig is static,
/// without NSS).
fn user_id(name: &str) -> Option<u32> {
    if let Ok(uid) = name.parse() {
        return Some(uid);
    }
    std::fs::read_to_string("/etc/passwd")
        .ok()?
        .lines()
        .map(|line| line.split(':').collect::<Vec<_>>())
        .find(|fields| fields.len() >= 3 && fields[0] == name)
        .and_then(|fields| fields[2].parse().ok())
}

/// Runs `options` (already layered with `--config`) on the server at `socket` with this
/// process's stdin, stdout and stderr, forwarding its signals; the server's answer: a
/// `done` with the verdict, or an `error` (a refusal, or the jail's failure) with the
/// exit status it gives. `origins`: where options came from other than the command line
/// (`config::origins`), for the server's refusals. Where the verdict goes (`--report`,
/// `--audit-log`) is the caller's: it is left out of the request.
pub fn run(
    socket: &Path,
    options: JailOptions,
    origins: std::collections::BTreeMap<String, String>,
) -> Result<Reply> {
    let stream = connect(socket)?;
    let forwarded = crate::jail::forwarded_signals();
    sigprocmask(SigmaskHow::SIG_BLOCK, Some(&forwarded), None)
        .context(|| "block signals".into())?;
    let signals = SignalFd::with_flags(&forwarded, SfdFlags::SFD_CLOEXEC | SfdFlags::SFD_NONBLOCK)
        .context(|| "create a signalfd".into())?;
    let request = super::api::versioned(&Request::Run {
        options: Box::new(for_server(options)),
        stdio: StdioMode::Fds,
        stdin: None,
        origins,
    })?;
    let stdio = [0, 1, 2].map(crate::sys::borrow_fd);
    if let Err(err) = protocol::write_frame(stream.as_fd(), &request, &stdio) {
        // A server that refuses the peer answers at once and closes: its answer explains.
        return match FrameReader::replies().read_blocking(&stream) {
            Ok(Some((body, _))) => parse_reply(&body),
            _ => Err(err),
        };
    }
    stream
        .set_nonblocking(true)
        .context(|| "make the connection non-blocking".into())?;
    let mut reader = FrameReader::replies();
    loop {
        let read = nix::poll::PollFlags::POLLIN;
        let mut fds = [
            nix::poll::PollFd::new(stream.as_fd(), read),
            nix::poll::PollFd::new(signals.as_fd(), read),
        ];
        if nix::poll::poll(&mut fds, nix::poll::PollTimeout::NONE).is_err() {
            continue;
        }
        while let Ok(Some(info)) = signals.read_signal() {
            let signal = Request::Signal {
                signal: info.ssi_signo as i32,
            };
            let _ = stream.set_nonblocking(false);
            if let Ok(frame) = super::api::versioned(&signal) {
                let _ = protocol::write_frame(stream.as_fd(), &frame, &[]);
            }
            let _ = stream.set_nonblocking(true);
        }
        match reader.read(stream.as_fd())? {
            Read::Partial => {}
            Read::Closed => {
                return Err(Error::setup(format!(
                    "--server {}: the server closed the connection before the run ended",
                    socket.display()
                )));
            }
            Read::Frame(body, _) => return parse_reply(&body),
        }
    }
}

/// A run's answer: `done` or `error`.
fn parse_reply(body: &[u8]) -> Result<Reply> {
    let reply: Reply = serde_json::from_slice(body).map_err(|err| {
        Error::setup(format!(
            "brig serve sent an answer this client does not understand: {err}"
        ))
    })?;
    match reply {
        Reply::Status(_) => Err(Error::setup("brig serve answered a run with its status")),
        reply => Ok(reply),
    }
}

/// The options as the server takes them: the profile already expanded here, where the
/// verdict goes left out (it is this client's to write).
fn for_server(mut options: JailOptions) -> JailOptions {
    options.profile = None;
    options.report = None;
    options.report_fd = None;
    options.audit_log = None;
    options
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_trusted_server_user_is_a_name_or_a_number() {
        assert_eq!(super::user_id("root"), Some(0));
        assert_eq!(super::user_id("4242"), Some(4242));
        assert_eq!(super::user_id("no-such-user-here"), None);
    }
}
