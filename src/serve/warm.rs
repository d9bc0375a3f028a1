//! Warm interpreters (`brig serve --warm-python N`, `--warm-node N`): a pooled jail whose
//! program, the interpreter, is started before any request, under all the jail's
//! restrictions (privileges dropped, Landlock and seccomp applied, as for any program),
//! and has done its startup. A request for `python3 -c CODE`, `python3 SCRIPT` or
//! `python3 -` (`node -e CODE`, `node SCRIPT`, `node -`) is handed to it over descriptor
//! 3 (`warm_python.py`, `warm_node.js` do the rest), and the verdict reports `warm: true`
//! with the wall and CPU time of the request alone. Python is given the client's streams
//! (SCM_RIGHTS); Node cannot take descriptors, so its streams are pipes this runner
//! relays to the client's.

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

/// The interpreters a pooled jail can keep started.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Warm {
    Python,
    Node,
}

/// The interpreters, as the jail sees them.
const PYTHON: &str = "/usr/bin/python3";
const NODE: &str = "/usr/bin/node";
const PYTHON_BOOTSTRAP: &str = include_str!("warm_python.py");
/// `python3 -c LAUNCH BOOTSTRAP`: the bootstrap's frames carry their own file name, so
/// that they can be left out of a program's tracebacks.
const PYTHON_LAUNCH: &str = "import sys; exec(compile(sys.argv[1], '<brig-warm>', 'exec'))";
const NODE_BOOTSTRAP: &str = include_str!("warm_node.js");
/// `node -e LAUNCH BOOTSTRAP`: the bootstrap's frames in a program's stack traces are
/// named as what they are, among Node's own.
const NODE_LAUNCH: &str =
    "require('vm').runInThisContext(process.argv[1], { filename: 'node:internal/brig-warm' })";

impl Warm {
    fn name(self) -> &'static str {
        match self {
            Warm::Python => "Python",
            Warm::Node => "Node",
        }
    }

    /// The interpreter's program, before any request.
    fn program(self, plan: &Plan) -> Program {
        let argv = match self {
            Warm::Python => vec![
                PYTHON.into(),
                "-c".into(),
                PYTHON_LAUNCH.into(),
                PYTHON_BOOTSTRAP.into(),
            ],
            Warm::Node => vec![
                NODE.into(),
                "-e".into(),
                NODE_LAUNCH.into(),
                NODE_BOOTSTRAP.into(),
            ],
        };
        Program {
            argv,
            env: plan.env.clone(),
            chdir: plan.chdir.clone(),
        }
    }

    /// Whether this warm interpreter can serve `program` as a cold start would: the
    /// interpreter the jail's PATH finds, its code given as an option (`-c`, `-e`), a
    /// script or `-` (stdin), no other option of its own, and no variable that acts at
    /// startup (which is done): PYTHON*, NODE_*.
    pub fn serves(self, program: &Program) -> bool {
        let argv = &program.argv;
        let (names, code_option, startup_vars): (&[&str], &str, &str) = match self {
            Warm::Python => (&["python3", PYTHON], "-c", "PYTHON"),
            Warm::Node => (&["node", NODE], "-e", "NODE_"),
        };
        let interpreter = argv
            .first()
            .is_some_and(|name| names.contains(&name.as_str()));
        let form = match argv.get(1).map(String::as_str) {
            None | Some("-") => true,
            Some(option) if option == code_option => argv.len() >= 3,
            Some(first) => !first.starts_with('-'),
        };
        let startup_env = program.env.iter().any(|var| var.starts_with(startup_vars));
        interpreter && form && !startup_env
    }
}

/// The most of the warm Python's report the runner keeps.
const MAX_REPORT: usize = 4096;

/// What the warm Python reports when it is done: the CPU time of the request.
#[derive(Default, Deserialize)]
struct Usage {
    cpu_user_ms: u64,
    cpu_sys_ms: u64,
}

/// The warm runner's life: assemble, start the interpreter, wait for a job, run it,
/// answer.
pub fn interpreter(control: &OwnedFd, plan: &Plan, audit_log: Option<&PathBuf>, warm: Warm) -> i32 {
    let jail = match Jail::assemble_for_streams(plan) {
        Ok(jail) => jail,
        Err(err) => return runner::report_failed(control, &err),
    };
    let (ours, interpreter_end) = match UnixStream::pair() {
        Ok(pair) => pair,
        Err(err) => {
            return runner::report_failed(
                control,
                &Error::setup(format!("a socket pair for the warm {}: {err}", warm.name())),
            );
        }
    };
    // Python takes the client's streams when the request comes; Node's are pipes to this
    // runner from the start.
    let streams = match warm {
        Warm::Python => null_streams().map(|streams| (streams, None)),
        Warm::Node => relay_pipes().map(|(theirs, ours)| (theirs, Some(ours))),
    };
    let (mut stdio, pipes) = match streams {
        Ok(streams) => streams,
        Err(err) => return runner::report_failed(control, &err),
    };
    stdio.push(OwnedFd::from(interpreter_end));
    let program = warm.program(plan);
    let init = jail.init_pidfd().try_clone_to_owned().ok();
    let handed_control = match control.try_clone() {
        Ok(control) => control,
        Err(_) => return 1,
    };
    let output_limit = plan.limits.output_limit;
    let handler = std::thread::spawn(move || {
        hand_over(&handed_control, ours, pipes, init, output_limit, warm)
    });
    // Answered as soon as the interpreter has ended (its report is with the handler by
    // then, its output relayed), before the jail's teardown; with captured output, once
    // the pipes are drained.
    let mut handler = Some(handler);
    let mut handed: Option<Handed> = None;
    let mut answered = false;
    let result = jail.run_reporting_early(&program, Some(stdio), |report| {
        if let Some(Ok(Some(done))) = handler.take().map(std::thread::JoinHandle::join) {
            if done.capture.is_none() && !done.timed_out {
                let verdict = warm_verdict(plan, Ok(report.clone()), &done);
                runner::answer(
                    control,
                    &done.connection,
                    &verdict,
                    &done.job,
                    None,
                    audit_log,
                );
                answered = true;
            }
            handed = Some(done);
        }
    });
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
    runner::answer(control, &connection, &verdict, &job, capture, audit_log);
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

/// What the handing-over thread brings back.
struct Handed {
    job: Job,
    connection: OwnedFd,
    capture: Option<runner::Capture>,
    started: Instant,
    usage: Option<Usage>,
    timed_out: bool,
}

/// The runner's ends of a warm Node's standard streams.
struct RelayPipes {
    stdin: OwnedFd,
    stdout: OwnedFd,
    stderr: OwnedFd,
}

fn null_streams() -> crate::error::Result<Vec<OwnedFd>> {
    (0..3)
        .map(|_| {
            std::fs::File::options()
                .read(true)
                .write(true)
                .open("/dev/null")
                .map(OwnedFd::from)
                .map_err(|err| {
                    Error::setup(format!("open /dev/null for the warm interpreter: {err}"))
                })
        })
        .collect()
}

/// Pipes for an interpreter's stdin, stdout and stderr: its ends, and this runner's.
fn relay_pipes() -> crate::error::Result<(Vec<OwnedFd>, RelayPipes)> {
    let (stdin_read, stdin_write) = runner::pipe("the warm interpreter")?;
    let (stdout_read, stdout_write) = runner::pipe("the warm interpreter")?;
    let (stderr_read, stderr_write) = runner::pipe("the warm interpreter")?;
    let ours = RelayPipes {
        stdin: stdin_write,
        stdout: stdout_read,
        stderr: stderr_read,
    };
    Ok((vec![stdin_read, stdout_write, stderr_write], ours))
}

/// Copies `from` into `to` until `from` ends or `to` is gone (splice(2) where it can).
fn relay(from: OwnedFd, to: OwnedFd) -> std::thread::JoinHandle<()> {
    std::thread::spawn(move || {
        let _ = std::io::copy(&mut std::fs::File::from(from), &mut std::fs::File::from(to));
    })
}

/// Waits for the interpreter to be ready, tells the server, waits for the job and gives
/// it to the interpreter (with the client's streams, or relaying them); then enforces the
/// job's time limit and collects the interpreter's report. Without a job (the server went
/// away, or the interpreter died), it ends the jail.
fn hand_over(
    control: &OwnedFd,
    mut interpreter: UnixStream,
    pipes: Option<RelayPipes>,
    init: Option<OwnedFd>,
    output_limit: Option<crate::units::Size>,
    warm: Warm,
) -> Option<Handed> {
    let end_jail = || {
        if let Some(init) = &init {
            let _ = sys::pidfd_send_signal(init.as_fd(), Signal::SIGKILL);
        }
    };
    let mut ready = [0u8; 1];
    if interpreter.read_exact(&mut ready).is_err() || ready != *b"R" {
        let message = match warm {
            Warm::Python => "the warm Python did not start (see `brig run -- python3 -c pass`)",
            Warm::Node => "the warm Node did not start (see `brig run -- node -e 0`)",
        };
        let _ = protocol::write_frame(
            control.as_fd(),
            &Report::Failed {
                message: message.into(),
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
    let mut request = serde_json::to_vec(&job.program).expect("a program serializes");
    let started = Instant::now();
    let mut relays = Vec::new();
    let sent = match pipes {
        None => {
            let borrowed: Vec<_> = streams.iter().map(AsFd::as_fd).collect();
            sys::send_with_fds(interpreter.as_fd(), &request, &borrowed).map(drop)
        }
        Some(pipes) => {
            request.push(b'\n');
            let [stdin, stdout, stderr]: [OwnedFd; 3] = match streams.try_into() {
                Ok(streams) => streams,
                Err(_) => {
                    end_jail();
                    return None;
                }
            };
            // The client's stdin is read only as the program asks for it; nobody waits
            // for that copy (a terminal may never end).
            drop(relay(stdin, pipes.stdin));
            relays.push(relay(pipes.stdout, stdout));
            relays.push(relay(pipes.stderr, stderr));
            interpreter
                .write_all(&request)
                .map_err(|_| nix::errno::Errno::EPIPE)
        }
    };
    if sent.is_err() {
        end_jail();
        return None;
    }
    watcher.watch(&connection);
    let (usage, timed_out) = wait_for_python(
        &mut interpreter,
        job.time_limit.map(|limit| started + limit.0),
        end_jail,
    );
    let _ = interpreter.flush();
    // Everything the program wrote has reached the client before it is answered.
    for relay in relays {
        let _ = relay.join();
    }
    Some(Handed {
        job,
        connection,
        capture,
        started,
        usage,
        timed_out,
    })
}

/// Reads the interpreter's usage report, or kills the jail at `deadline`; (usage, timed
/// out).
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
