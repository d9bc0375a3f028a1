//! What every runner shares (cold and pooled jobs in `runner.rs`, warm interpreters in
//! `warm.rs`, sessions in `session.rs`): the client's streams for a job, answering the
//! client and reporting to the server, pipes and /dev/null for a program's streams, and
//! the watcher of a running job's client.
//! `runner.rs` dispatches to the others; they depend on this module, never on it.

use super::protocol::{self, FrameReader, Reply, Request, StdioMode};
use super::wire::{DRAINING, Job, Report};
use crate::error::{Error, Result};
use crate::jail::Captured;
use crate::sys;
use crate::verdict::{Sinks, Verdict};
use nix::sys::signal::Signal;
use std::io::Write;
use std::os::fd::{AsFd, AsRawFd, OwnedFd};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicI32, Ordering};

/// The runner's control socket, which the watcher of a running job polls: the server
/// shuts it when its drain's grace is over.
static CONTROL: AtomicI32 = AtomicI32::new(-1);
/// Set when the drain's grace ended the job: its client is told so, not given a verdict.
static DRAINED: AtomicBool = AtomicBool::new(false);

/// Keeps the runner's control socket for the watcher of its job; set once, as the runner
/// starts.
pub(super) fn keep_control(control: &OwnedFd) {
    CONTROL.store(control.as_raw_fd(), Ordering::Relaxed);
}

/// A close-on-exec pipe (read end, write end) for `whom`.
pub(super) fn pipe(whom: &str) -> Result<(OwnedFd, OwnedFd)> {
    nix::unistd::pipe2(nix::fcntl::OFlag::O_CLOEXEC)
        .map_err(|errno| Error::os(format!("create a pipe for {whom}"), errno))
}

/// /dev/null, read and write, for a stream of `whom` that carries nothing.
pub(super) fn dev_null(whom: &str) -> Result<OwnedFd> {
    std::fs::File::options()
        .read(true)
        .write(true)
        .open("/dev/null")
        .map(OwnedFd::from)
        .map_err(|err| Error::setup(format!("open /dev/null for {whom}: {err}")))
}

/// Tells the server a pooled jail could not be assembled; the runner's exit status.
pub(super) fn report_failed(control: &OwnedFd, err: &Error) -> i32 {
    let report = Report::Failed {
        message: err.to_string(),
    };
    let _ = protocol::write_frame(control.as_fd(), &report, &[]);
    1
}

pub(super) fn answer_error(fds: &[OwnedFd], err: &Error) -> i32 {
    if let Some(connection) = fds.first() {
        let _ = protocol::write_reply(connection.as_fd(), &Reply::error(err));
    }
    1
}

/// The program's streams for a job: the client's own, or its stdin (fed from the
/// request) with stdout and stderr captured within `limit`.
pub(super) enum Streams {
    Client(Vec<OwnedFd>),
    Capture { stdin: OwnedFd, limit: u64 },
}

/// The client's connection and the program's streams; Err with the exit status after
/// answering the client.
pub(super) fn client_streams(
    job: &Job,
    mut fds: Vec<OwnedFd>,
    output_limit: Option<crate::units::Size>,
) -> std::result::Result<(OwnedFd, Streams), i32> {
    if fds.is_empty() {
        return Err(1);
    }
    let connection = fds.remove(0);
    match job.stdio {
        StdioMode::Fds if fds.len() == 3 => Ok((connection, Streams::Client(fds))),
        StdioMode::Fds => Err(answer_error(
            &[connection],
            &Error::input("brig serve: stdio \"fds\" needs 3 descriptors"),
        )),
        StdioMode::Capture => match feed(job.stdin.clone().unwrap_or_default()) {
            Ok(stdin) => {
                let limit = protocol::capture_limit(output_limit);
                Ok((connection, Streams::Capture { stdin, limit }))
            }
            Err(err) => Err(answer_error(&[connection], &err)),
        },
    }
}

/// A pipe whose read end gives `text` then ends: a captured run's stdin, written by a
/// thread of its own (the program reads it as it likes, or not at all).
fn feed(text: String) -> Result<OwnedFd> {
    let (read, write) = pipe("the program")?;
    std::thread::spawn(move || {
        let _ = std::fs::File::from(write).write_all(text.as_bytes());
    });
    Ok(read)
}

/// Answers the client with the verdict (and captured output), appends the server's audit
/// line, and tells the server (`control`) that the client has its answer: it may now
/// build the next jail without slowing this client.
pub(super) fn answer(
    control: &OwnedFd,
    connection: &OwnedFd,
    mut verdict: Verdict,
    job: &Job,
    captured: Option<Captured>,
    audit_log: Option<&PathBuf>,
) {
    // The client's --quiet-limits holds for the notice too.
    if job.options.quiet_limits {
        verdict.unenforced = None;
    }
    if let Some(path) = audit_log
        && let Ok(sinks) = Sinks::open(None, None, Some(path))
    {
        let served = crate::verdict::Served {
            peer: job.peer,
            argv: &job.program.argv,
        };
        let value = serde_json::to_value(&verdict).expect("a verdict always serializes");
        sinks.deliver_json(&value, Some(job.config_digest.clone()), Some(served));
    }
    let reply = match DRAINED.load(Ordering::Relaxed) {
        true => Reply::error(&Error::setup(format!(
            "brig serve: {}; the run was stopped at the end of its --drain-grace",
            DRAINING
        ))),
        false => done(verdict, job, captured),
    };
    // Within REPLY_TIMEOUT: a client that does not read loses its answer, and the slot
    // is free once the jail is torn down.
    let _ = protocol::write_reply(connection.as_fd(), &reply);
    let _ = protocol::write_frame(control.as_fd(), &Report::Answered, &[]);
}

/// The `done` frame that answers `job`: its verdict, and the output captured for it
/// (none when the program wrote to the client's own streams). A pooled runner's
/// rehearsal builds its reply with it too.
pub(super) fn done(verdict: Verdict, job: &Job, captured: Option<Captured>) -> Reply {
    let (stdout, stderr) = match captured {
        Some(captured) => (Some(captured.stdout), Some(captured.stderr)),
        None => (None, None),
    };
    Reply::Done {
        verdict: Box::new(verdict),
        config_digest: job.config_digest.clone(),
        stdout,
        stderr,
    }
}

/// Passes the client's `signal` frames on to the program (through this process's signal
/// queue, which the supervisor forwards) and ends the jail when the client goes away. Its
/// thread is started before the request comes, so that creating it costs the client
/// nothing; it waits for the client's connection.
pub(super) struct ClientWatcher(std::sync::mpsc::Sender<OwnedFd>);

impl ClientWatcher {
    /// `init`: the jail's init, killed when the client goes away.
    pub(super) fn start(init: Option<OwnedFd>) -> ClientWatcher {
        let (sender, receiver) = std::sync::mpsc::channel::<OwnedFd>();
        let forwarded = crate::jail::forwarded_signals();
        let _ = std::thread::Builder::new()
            .name("brig-client".into())
            .spawn(move || {
                let Ok(connection) = receiver.recv() else {
                    return;
                };
                let end_jail = || {
                    if let Some(init) = &init {
                        let _ = sys::pidfd_send_signal(init.as_fd(), Signal::SIGKILL);
                    }
                };
                let mut reader = FrameReader::default();
                let control = CONTROL.load(Ordering::Relaxed);
                // Polled for nothing but its hang-up (POLLHUP: the server shut it down
                // both ways), which poll always reports.
                let hang_up = nix::poll::PollFlags::POLLHUP | nix::poll::PollFlags::POLLERR;
                loop {
                    // The server drained past its grace: the jail ends, the client is
                    // told why.
                    let mut fds = vec![nix::poll::PollFd::new(
                        connection.as_fd(),
                        nix::poll::PollFlags::POLLIN,
                    )];
                    if control >= 0 {
                        let nothing = nix::poll::PollFlags::empty();
                        fds.push(nix::poll::PollFd::new(sys::borrow_fd(control), nothing));
                    }
                    if nix::poll::poll(&mut fds, nix::poll::PollTimeout::NONE).is_err() {
                        continue;
                    }
                    let drained = fds
                        .get(1)
                        .and_then(|fd| fd.revents())
                        .is_some_and(|events| events.intersects(hang_up));
                    if drained {
                        DRAINED.store(true, Ordering::Relaxed);
                        return end_jail();
                    }
                    if !fds[0].any().unwrap_or(false) {
                        continue;
                    }
                    match reader.read_blocking(&connection) {
                        Ok(Some((body, _))) => {
                            if let Ok(Request::Signal { signal }) = protocol::parse_request(&body)
                                && let Ok(signal) = Signal::try_from(signal)
                            {
                                if forwarded.contains(signal) {
                                    let _ = nix::sys::signal::kill(nix::unistd::getpid(), signal);
                                } else if signal == Signal::SIGKILL {
                                    end_jail();
                                }
                            }
                        }
                        // Gone (or speaking nonsense): the run is of no use to anyone.
                        _ => return end_jail(),
                    }
                }
            });
        ClientWatcher(sender)
    }

    /// Watches `connection` from now on.
    pub(super) fn watch(self, connection: &OwnedFd) {
        if let Ok(connection) = connection.try_clone() {
            let _ = self.0.send(connection);
        }
    }
}
