//! A runner: a process the server forks for one jail. A pooled runner assembles the
//! server's default jail at once, tells the server it is ready and waits; a runner for a
//! request whose jail has another shape assembles that one. Either way it then runs the
//! request's program with the client's streams (or pipes it captures), answers the
//! client itself, and exits: a jail is never reused.
//!
//! The runner is single-threaded until its jail is assembled; then threads pass the
//! client's signals on and feed or drain captured streams.

use super::protocol::{self, FrameReader, Reply, Request, StdioMode};
use super::wire::{Job, Report, SessionStart, Start};
use crate::error::{Error, Result};
use crate::jail::{Captured, Jail, Program};
use crate::options::JailOptions;
use crate::plan::Plan;
use crate::sys;
use crate::verdict::{Peer, RunContext, Sinks, Verdict};
use nix::sys::signal::Signal;
use std::io::Write;
use std::os::fd::{AsFd, AsRawFd, OwnedFd};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicI32, Ordering};

/// The jails the server prepared, which pooled runners assemble: read in the runner from
/// the server's memory, which a forked runner shares.
pub struct Prepared<'a> {
    /// The server's default jail (cold and warm pools).
    pub pool_plan: &'a Plan,
    /// A pooled session's jail, and its programs' options.
    pub session_plan: &'a Plan,
    pub defaults: &'a JailOptions,
}

/// The runner's control socket, which the watcher of a running job polls: the server
/// shuts it when its drain's grace is over.
static CONTROL: AtomicI32 = AtomicI32::new(-1);
/// Set when the drain's grace ended the job: its client is told so, not given a verdict.
static DRAINED: AtomicBool = AtomicBool::new(false);

/// The runner's life; ends the process.
pub fn main(control: OwnedFd, start: Start, prepared: Prepared, audit_log: Option<PathBuf>) -> ! {
    CONTROL.store(control.as_raw_fd(), Ordering::Relaxed);
    let code = match start {
        Start::Pooled { warm: None } => pooled(&control, prepared.pool_plan, audit_log.as_ref()),
        Start::Pooled { warm: Some(warm) } => {
            super::warm::interpreter(&control, prepared.pool_plan, audit_log.as_ref(), warm)
        }
        Start::ForJob(job, fds) => for_job(*job, fds, audit_log.as_ref(), &control),
        Start::SessionPool => super::session::pooled(
            &control,
            prepared.session_plan,
            prepared.defaults,
            audit_log.as_ref(),
        ),
        Start::Session(start) => {
            let SessionStart {
                plan,
                options,
                opening,
                connection,
            } = *start;
            super::session::for_create(
                &control,
                &plan,
                options,
                opening,
                connection,
                audit_log.as_ref(),
            )
        }
    };
    sys::exit_now(code);
}

fn pooled(control: &OwnedFd, plan: &Plan, audit_log: Option<&PathBuf>) -> i32 {
    let jail = match Jail::assemble_for_streams(plan) {
        Ok(jail) => jail,
        Err(err) => return report_failed(control, &err),
    };
    rehearse(plan);
    if protocol::write_frame(control.as_fd(), &Report::Ready, &[]).is_err() {
        return 0;
    }
    let watcher = ClientWatcher::start(jail.init_pidfd().try_clone_to_owned().ok());
    // The server gone (or draining) closes the control socket: the jail goes unused.
    let Ok(Some((body, fds))) = FrameReader::default().read_blocking(control) else {
        return 0;
    };
    let Ok(job) = serde_json::from_slice::<Job>(&body) else {
        return 1;
    };
    run_job(jail, plan, job, fds, audit_log, control, watcher)
}

/// Walks a request's path once before any request comes: decoding a job, encoding a
/// verdict. This process is a fork of the server, sharing its memory until it writes
/// there; the first writes (the allocator's pages, the encoders' buffers) would otherwise
/// copy pages while a client waits.
fn rehearse(plan: &Plan) {
    let job = Job {
        options: JailOptions::default(),
        program: Program::of(plan),
        time_limit: plan.time_limit,
        config_digest: String::new(),
        stdio: StdioMode::Fds,
        stdin: None,
        peer: Peer {
            uid: 0,
            gid: 0,
            pid: 0,
        },
    };
    let encoded = serde_json::to_vec(&job).unwrap_or_default();
    let _ = serde_json::from_slice::<Job>(&encoded);
    let verdict = Verdict::of_setup_error(Some(plan), &Error::setup("rehearsal"));
    let _ = serde_json::to_vec(&Reply::Done {
        verdict: Box::new(verdict),
        config_digest: String::new(),
        stdout: None,
        stderr: None,
    });
}

fn for_job(job: Job, fds: Vec<OwnedFd>, audit_log: Option<&PathBuf>, control: &OwnedFd) -> i32 {
    let plan = match Plan::resolve(job.options.clone()) {
        Ok(plan) => plan,
        Err(err) => return answer_error(&fds, &err),
    };
    match Jail::assemble_for_streams(&plan) {
        Ok(jail) => {
            let watcher = ClientWatcher::start(jail.init_pidfd().try_clone_to_owned().ok());
            run_job(jail, &plan, job, fds, audit_log, control, watcher)
        }
        Err(err) => answer_error(&fds, &err),
    }
}

/// A close-on-exec pipe (read end, write end) for `whom`.
pub(super) fn pipe(whom: &str) -> Result<(OwnedFd, OwnedFd)> {
    nix::unistd::pipe2(nix::fcntl::OFlag::O_CLOEXEC)
        .map_err(|errno| Error::os(format!("create a pipe for {whom}"), errno))
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

/// Runs the job's program in `jail`, whose plan is `plan` (the program and the time limit
/// are the job's), answers the client and writes the server's audit line.
fn run_job(
    mut jail: Jail,
    plan: &Plan,
    job: Job,
    fds: Vec<OwnedFd>,
    audit_log: Option<&PathBuf>,
    control: &OwnedFd,
    watcher: ClientWatcher,
) -> i32 {
    let (connection, streams) = match client_streams(&job, fds, plan.limits.output_limit) {
        Ok(streams) => streams,
        Err(code) => return code,
    };
    jail.limit_time(job.time_limit);
    watcher.watch(&connection);
    match streams {
        Streams::Client(stdio) => {
            // The client is answered as soon as its program has ended, the jail's
            // teardown after that (with --output-limit, once the pipes are drained).
            let mut answered = false;
            let result = jail.run_reporting_early(&job.program, Some(stdio), |report| {
                let verdict = Verdict::of_run(plan, report);
                answer(control, &connection, verdict, &job, None, audit_log);
                answered = true;
            });
            if !answered {
                let verdict = match result {
                    Ok(report) => Verdict::of_run(plan, &report),
                    Err(err) => Verdict::of_setup_error(Some(plan), &err),
                };
                answer(control, &connection, verdict, &job, None, audit_log);
            }
        }
        Streams::Capture { stdin, limit } => {
            let (verdict, captured) = match jail.run_capturing(&job.program, stdin, limit) {
                Ok((report, captured)) => {
                    let served = RunContext::captured(captured.limit);
                    (Verdict::of_run_in(plan, &report, served), captured)
                }
                Err(err) => (
                    Verdict::of_setup_error(Some(plan), &err),
                    Captured::default(),
                ),
            };
            answer(
                control,
                &connection,
                verdict,
                &job,
                Some(captured),
                audit_log,
            );
        }
    }
    0
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
    let (stdout, stderr) = match captured {
        Some(captured) => (Some(captured.stdout), Some(captured.stderr)),
        None => (None, None),
    };
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
            super::session::DRAINING
        ))),
        false => Reply::Done {
            verdict: Box::new(verdict),
            config_digest: job.config_digest.clone(),
            stdout,
            stderr,
        },
    };
    // Within REPLY_TIMEOUT: a client that does not read loses its answer, and the slot
    // is free once the jail is torn down.
    let _ = protocol::write_reply(connection.as_fd(), &reply);
    let _ = protocol::write_frame(control.as_fd(), &Report::Answered, &[]);
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
