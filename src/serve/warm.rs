//! Warm interpreters (`brig serve --warm-python N`): a pooled jail whose program, Python,
//! is started before any request, under all the jail's restrictions (privileges dropped,
//! Landlock and seccomp applied, as for any program), and has done its startup. A
//! request for `python3 -c CODE`, `python3 SCRIPT` or `python3 -` is handed to it over
//! descriptor 3 with the client's streams (`warm_python.py` does the rest), and the
//! verdict reports `warm: true` with the wall and CPU time of the request alone.

use super::protocol;
use super::runner::{self, Job, Report};
use crate::error::Error;
use crate::jail::{Jail, Outcome, Program, RunReport};
use crate::plan::Plan;
use crate::sys;
use crate::verdict::Verdict;
use nix::sys::signal::Signal;
use serde::Deserialize;
use std::io::{Read, Write};
use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::net::UnixStream;
use std::path::PathBuf;
use std::time::{Duration, Instant};

/// The interpreter a warm jail runs, as the jail sees it.
const PYTHON: &str = "/usr/bin/python3";
const BOOTSTRAP: &str = include_str!("warm_python.py");
/// `python3 -c LAUNCH BOOTSTRAP`: the bootstrap's frames carry their own file name, so
/// that they can be left out of a program's tracebacks.
const LAUNCH: &str = "import sys; exec(compile(sys.argv[1], '<brig-warm>', 'exec'))";

/// Whether a warm Python can serve `program` as a cold `python3` would: the interpreter
/// named as the jail's PATH finds it, `-c CODE`, a script or `-` (stdin), no option of
/// its own, and no PYTHON* variable (those act at startup, which is done).
pub fn serves(program: &Program) -> bool {
    let argv = &program.argv;
    let interpreter = matches!(argv.first().map(String::as_str), Some("python3" | PYTHON));
    let form = match argv.get(1).map(String::as_str) {
        None | Some("-") => true,
        Some("-c") => argv.len() >= 3,
        Some(first) => !first.starts_with('-'),
    };
    let startup_env = program.env.iter().any(|var| var.starts_with("PYTHON"));
    interpreter && form && !startup_env
}

/// The most of the warm Python's report the runner keeps.
const MAX_REPORT: usize = 4096;

/// What the warm Python reports when it is done: the CPU time of the request.
#[derive(Default, Deserialize)]
struct Usage {
    cpu_user_ms: u64,
    cpu_sys_ms: u64,
}

/// The warm runner's life: assemble, start Python, wait for a job, run it, answer.
pub fn python(control: &OwnedFd, plan: &Plan, audit_log: Option<&PathBuf>) -> i32 {
    let jail = match Jail::assemble_for_streams(plan) {
        Ok(jail) => jail,
        Err(err) => return failed(control, &err),
    };
    let (ours, python_end) = match UnixStream::pair() {
        Ok(pair) => pair,
        Err(err) => {
            return failed(
                control,
                &Error::setup(format!("a socket pair for Python: {err}")),
            );
        }
    };
    let null = || {
        std::fs::File::options()
            .read(true)
            .write(true)
            .open("/dev/null")
            .map(OwnedFd::from)
    };
    let (Ok(stdin), Ok(stdout), Ok(stderr)) = (null(), null(), null()) else {
        return failed(control, &Error::setup("open /dev/null for the warm Python"));
    };
    let program = Program {
        argv: vec![PYTHON.into(), "-c".into(), LAUNCH.into(), BOOTSTRAP.into()],
        env: plan.env.clone(),
        chdir: plan.chdir.clone(),
    };
    let init = jail.init_pidfd().try_clone_to_owned().ok();
    let handed_control = match control.try_clone() {
        Ok(control) => control,
        Err(_) => return 1,
    };
    let output_limit = plan.limits.output_limit;
    let handler = std::thread::spawn(move || hand_over(&handed_control, ours, init, output_limit));
    // Answered as soon as Python has ended (its report is with the handler by then),
    // before the jail's teardown; with captured output, once the pipes are drained.
    let mut handler = Some(handler);
    let mut handed: Option<Handed> = None;
    let mut answered = false;
    let result = jail.run_reporting_early(
        &program,
        Some(vec![stdin, stdout, stderr, OwnedFd::from(python_end)]),
        |report| {
            if let Some(Ok(Some(done))) = handler.take().map(std::thread::JoinHandle::join) {
                if done.capture.is_none() && !done.timed_out {
                    let verdict = warm_verdict(plan, Ok(report.clone()), &done);
                    runner::answer(&done.connection, &verdict, &done.job, None, audit_log);
                    let _ = protocol::write_frame(control.as_fd(), &Report::Answered, &[]);
                    answered = true;
                }
                handed = Some(done);
            }
        },
    );
    if answered {
        return 0;
    }
    let handed = match handed {
        Some(handed) => handed,
        None => match handler.map(std::thread::JoinHandle::join) {
            Some(Ok(Some(handed))) => handed,
            _ => return 0,
        },
    };
    let verdict = warm_verdict(plan, result, &handed);
    let Handed {
        job,
        connection,
        capture,
        ..
    } = handed;
    runner::answer(&connection, &verdict, &job, capture, audit_log);
    let _ = protocol::write_frame(control.as_fd(), &Report::Answered, &[]);
    0
}

/// The verdict of a warm run: the request's own wall and CPU time, its time limit.
fn warm_verdict(plan: &Plan, report: crate::error::Result<RunReport>, handed: &Handed) -> Verdict {
    match report {
        Ok(mut report) => {
            report.time_limit = handed.job.time_limit;
            report.wall = handed.started.elapsed();
            if handed.timed_out {
                report.outcome = Outcome::TimedOut;
            }
            let mut verdict = Verdict::of_run(plan, &report);
            verdict.warm = true;
            verdict.wall_ms = report.wall.as_millis() as u64;
            if let Some(usage) = &handed.usage {
                verdict.cpu_user_ms = usage.cpu_user_ms;
                verdict.cpu_sys_ms = usage.cpu_sys_ms;
            }
            verdict
        }
        Err(err) => Verdict::of_setup_error(Some(plan), &err),
    }
}

fn failed(control: &OwnedFd, err: &Error) -> i32 {
    let report = Report::Failed {
        message: err.to_string(),
    };
    let _ = protocol::write_frame(control.as_fd(), &report, &[]);
    1
}

/// What the handing-over thread brings back.
struct Handed {
    job: Job,
    connection: OwnedFd,
    capture: Option<runner::Capture>,
    started: Instant,
    usage: Option<Usage>,
    timed_out: bool,
}

/// Waits for Python to be ready, tells the server, waits for the job and gives it to
/// Python; then enforces the job's time limit and collects Python's report. Without a
/// job (the server went away, or Python died), it ends the jail.
fn hand_over(
    control: &OwnedFd,
    mut python: UnixStream,
    init: Option<OwnedFd>,
    output_limit: Option<crate::units::Size>,
) -> Option<Handed> {
    let end_jail = || {
        if let Some(init) = &init {
            let _ = sys::pidfd_send_signal(init.as_fd(), Signal::SIGKILL);
        }
    };
    let mut ready = [0u8; 1];
    if python.read_exact(&mut ready).is_err() || ready != *b"R" {
        let _ = protocol::write_frame(
            control.as_fd(),
            &Report::Failed {
                message: "the warm Python did not start (see `brig run -- python3 -c pass`)".into(),
            },
            &[],
        );
        end_jail();
        return None;
    }
    if protocol::write_frame(control.as_fd(), &Report::Ready, &[]).is_err() {
        end_jail();
        return None;
    }
    let watcher =
        runner::ClientWatcher::start(init.as_ref().and_then(|init| init.try_clone().ok()));
    let Ok(Some((body, fds))) = protocol::FrameReader::default().read_blocking(control) else {
        end_jail();
        return None;
    };
    let Ok(job) = serde_json::from_slice::<Job>(&body) else {
        end_jail();
        return None;
    };
    let Ok((connection, streams, capture)) = runner::client_streams(&job, fds, output_limit) else {
        end_jail();
        return None;
    };
    let request = serde_json::to_vec(&job.program).expect("a program serializes");
    let borrowed: Vec<_> = streams.iter().map(AsFd::as_fd).collect();
    let started = Instant::now();
    if sys::send_with_fds(python.as_fd(), &request, &borrowed).is_err() {
        end_jail();
        return None;
    }
    drop(streams);
    watcher.watch(&connection);
    let (usage, timed_out) = wait_for_python(
        &mut python,
        job.time_limit.map(|limit| started + limit.0),
        end_jail,
    );
    let _ = python.flush();
    Some(Handed {
        job,
        connection,
        capture,
        started,
        usage,
        timed_out,
    })
}

/// Reads Python's usage report, or kills the jail at `deadline`; (usage, timed out).
fn wait_for_python(
    python: &mut UnixStream,
    deadline: Option<Instant>,
    end_jail: impl Fn(),
) -> (Option<Usage>, bool) {
    let mut report = Vec::new();
    loop {
        let timeout = deadline.map(|at| at.saturating_duration_since(Instant::now()));
        if timeout == Some(Duration::ZERO) {
            end_jail();
            return (None, true);
        }
        let _ = python.set_read_timeout(timeout.map(|left| left.max(Duration::from_millis(1))));
        let mut chunk = [0u8; 512];
        match python.read(&mut chunk) {
            Ok(0) => return (serde_json::from_slice(&report).ok(), false),
            // The program could write to descriptor 3 too: keep what a report needs.
            Ok(count) if report.len() < MAX_REPORT => report.extend_from_slice(&chunk[..count]),
            Ok(_) => {}
            Err(err)
                if matches!(
                    err.kind(),
                    std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                ) => {}
            Err(_) => return (serde_json::from_slice(&report).ok(), false),
        }
    }
}
