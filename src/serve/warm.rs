//! Warm interpreters (`brig serve --warm-python N`, `--warm-node N`): a pooled jail whose
//! program, the interpreter, is started before any request, under all the jail's
//! restrictions (privileges dropped, Landlock and seccomp applied, as for any program),
//! and has done its startup. A request for `python3 -c CODE`, `python3 SCRIPT` or
//! `python3 -` (`node -e CODE`, `node SCRIPT`, `node -`) is handed to it over descriptor
//! 3 (`warm_python.py`, `warm_node.js` do the rest), and the verdict reports `warm: true`
//! with the wall and CPU time of the request alone. That CPU time is the kernel's, never
//! the interpreter's word (the program runs in it and could write anything to descriptor
//! 3): the jail cgroup's CPU counters, or without a cgroup the interpreter's own
//! (/proc/PID/stat, then its rusage when init reaps it), read before the request is
//! handed over and subtracted from what the run's report counts. Python is given the client's streams
//! (SCM_RIGHTS); Node cannot take descriptors, so its streams are pipes this runner
//! relays to the client's.

use super::kernel;
use super::protocol;
use super::runner::{self, Job, Report};
use crate::error::Error;
use crate::jail::{Jail, Outcome, Program, RequestClock, RunReport};
use crate::plan::Plan;
use crate::sys;
use crate::verdict::Verdict;
use nix::sys::signal::Signal;
use nix::sys::socket::MsgFlags;
use std::io::{Read, Write};
use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::net::UnixStream;
use std::path::PathBuf;
use std::time::Instant;

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

/// The CPU time the jail had used when the request was handed over, as the kernel counts
/// it: the cgroup's (all its processes), and the interpreter's (its own and its reaped
/// children's), in microseconds (user, system).
#[derive(Clone, Copy, Default)]
struct CpuBefore {
    cgroup: Option<(u64, u64)>,
    interpreter: Option<(u64, u64)>,
}

/// The warm runner's life: assemble, start the interpreter, wait for a job, run it,
/// answer. The job's time limit starts when the job is handed to the interpreter (the
/// supervisor keeps it, as for any run); an interpreter that ends while it waits is
/// reported to the server, which builds another.
pub fn interpreter(control: &OwnedFd, plan: &Plan, audit_log: Option<&PathBuf>, warm: Warm) -> i32 {
    let mut jail = match Jail::assemble_for_streams(plan) {
        Ok(jail) => jail,
        Err(err) => return runner::report_failed(control, &err),
    };
    let clock = match jail.time_limit_from_request() {
        Ok(clock) => clock,
        Err(err) => return runner::report_failed(control, &err),
    };
    // The kernel names the process that writes the interpreter's "ready": its pid, whose
    // CPU time is read when the request is handed over.
    let pair = UnixStream::pair().and_then(|(ours, theirs)| {
        kernel::pass_credentials(&ours)?;
        Ok((ours, theirs))
    });
    let (ours, interpreter_end) = match pair {
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
    let cgroup = jail.cgroup_probe();
    let handler = std::thread::spawn(move || {
        hand_over(
            &handed_control,
            ours,
            pipes,
            init,
            clock,
            output_limit,
            warm,
            cgroup,
        )
    });
    // Answered as soon as the interpreter has ended (its report is with the handler by
    // then, its output relayed), before the jail's teardown; with captured output, once
    // the pipes are drained.
    let mut handler = Some(handler);
    let mut handed: Option<HandOver> = None;
    let mut answered = false;
    let result = jail.run_reporting_early(&program, Some(stdio), |report| {
        if let Some(Ok(done)) = handler.take().map(std::thread::JoinHandle::join) {
            if let HandOver::Handed(done) = &done
                && done.capture.is_none()
            {
                let verdict = warm_verdict(plan, Ok(report.clone()), done);
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
            Some(Ok(handed)) => handed,
            _ => return 0,
        },
    };
    let handed = match handed {
        HandOver::Handed(handed) => handed,
        HandOver::EndedIdle => {
            let how = match &result {
                Ok(report) => describe(&report.outcome),
                Err(err) => err.to_string(),
            };
            let message = format!(
                "a warm {} ended while it waited for a request ({how}); another is built",
                warm.name()
            );
            return runner::report_failed(control, &Error::setup(message));
        }
        HandOver::Nothing => return 0,
    };
    let mut handed = *handed;
    let captured = handed.capture.take().map(runner::Capture::finish);
    let mut result = result;
    if let Some(captured) = &captured {
        captured.amend(&mut result);
    }
    let mut verdict = warm_verdict(plan, result, &handed);
    if let Some(captured) = &captured {
        captured.amend_verdict(&mut verdict);
    }
    let Handed {
        job, connection, ..
    } = handed;
    runner::answer(control, &connection, &verdict, &job, captured, audit_log);
    0
}

/// How a program ended, for the server's log.
fn describe(outcome: &Outcome) -> String {
    match outcome {
        Outcome::Exited(code) => format!("exit status {code}"),
        Outcome::Signaled { signal, .. } => match Signal::try_from(*signal) {
            Ok(signal) => format!("killed by {signal}"),
            Err(_) => format!("killed by signal {signal}"),
        },
        Outcome::TimedOut => "killed at the time limit".into(),
        Outcome::OutputLimit => "killed at the output limit".into(),
        Outcome::ExecFailed { message, .. } => message.clone(),
    }
}

/// The verdict of a warm run: the request's own wall and CPU time, its time limit.
fn warm_verdict(plan: &Plan, report: crate::error::Result<RunReport>, handed: &Handed) -> Verdict {
    match report {
        Ok(mut report) => {
            report.time_limit = handed.job.time_limit;
            report.wall = handed.started.elapsed();
            // The report counts from the jail's start (the cgroup's counters when there
            // is a cgroup, else what init reaped): less what was used before the request.
            let from_cgroup = report
                .cgroup_usage
                .is_some_and(|usage| usage.cpu_user_usec.is_some());
            let before = match from_cgroup {
                true => handed.before.cgroup,
                false => handed.before.interpreter,
            };
            let (user, sys) = before.unwrap_or_default();
            let since = |total: std::time::Duration, before: u64| {
                total.saturating_sub(std::time::Duration::from_micros(before))
            };
            report.cpu_user = since(report.cpu_user, user);
            report.cpu_sys = since(report.cpu_sys, sys);
            let mut verdict = Verdict::of_run(plan, &report);
            verdict.warm = true;
            verdict.wall_ms = report.wall.as_millis() as u64;
            verdict
        }
        Err(err) => Verdict::of_setup_error(Some(plan), &err),
    }
}

/// How the handing over ended.
enum HandOver {
    /// The job was given to the interpreter, which is done with it.
    Handed(Box<Handed>),
    /// The interpreter ended before any job came.
    EndedIdle,
    /// No job: the server closed the control socket, or the job could not be given (its
    /// client has been answered).
    Nothing,
}

/// What the handing-over thread brings back.
struct Handed {
    job: Job,
    connection: OwnedFd,
    capture: Option<runner::Capture>,
    started: Instant,
    before: CpuBefore,
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

/// Copies `from` into `to` until `from` ends or `to` is gone (splice(2) where it can),
/// then says so on `done`.
fn relay(
    from: OwnedFd,
    to: OwnedFd,
    done: Option<std::sync::mpsc::Sender<()>>,
) -> std::thread::JoinHandle<()> {
    std::thread::spawn(move || {
        let _ = std::io::copy(&mut std::fs::File::from(from), &mut std::fs::File::from(to));
        if let Some(done) = done {
            let _ = done.send(());
        }
    })
}

/// Waits for the interpreter to be ready, tells the server, waits for the job and gives
/// it to the interpreter (with the client's streams, or relaying them), starting the
/// job's time limit; then waits until the interpreter is done (its socket closed).
/// Without a job (the server went away, or the interpreter died), it ends the jail.
#[allow(clippy::too_many_arguments)]
fn hand_over(
    control: &OwnedFd,
    mut interpreter: UnixStream,
    pipes: Option<RelayPipes>,
    init: Option<OwnedFd>,
    clock: RequestClock,
    output_limit: Option<crate::units::Size>,
    warm: Warm,
    cgroup: Option<crate::cgroup::UsageProbe>,
) -> HandOver {
    let end_jail = || {
        if let Some(init) = &init {
            let _ = sys::pidfd_send_signal(init.as_fd(), Signal::SIGKILL);
        }
    };
    let mut ready = [0u8; 1];
    let received = loop {
        match kernel::receive(interpreter.as_fd(), &mut ready, MsgFlags::empty()) {
            Err(nix::errno::Errno::EINTR) => continue,
            other => break other,
        }
    };
    // Written before any request: by the interpreter itself.
    let pid = match received {
        Ok((1, pid)) if ready == *b"R" => pid,
        _ => None,
    };
    if pid.is_none() {
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
        return HandOver::Nothing;
    }
    if protocol::write_frame(control.as_fd(), &Report::Ready, &[]).is_err() {
        end_jail();
        return HandOver::Nothing;
    }
    let watcher =
        runner::ClientWatcher::start(init.as_ref().and_then(|init| init.try_clone().ok()));
    // The interpreter says nothing until it has a job: its end of the socket readable
    // (closed) first means it died waiting.
    if !job_comes_first(control, &interpreter) {
        end_jail();
        return HandOver::EndedIdle;
    }
    let Ok(Some((body, fds))) = protocol::FrameReader::default().read_blocking(control) else {
        end_jail();
        return HandOver::Nothing;
    };
    let Ok(job) = serde_json::from_slice::<Job>(&body) else {
        end_jail();
        return HandOver::Nothing;
    };
    let init_for_capture = init.as_ref().and_then(|init| init.try_clone().ok());
    let Ok((connection, streams, capture)) =
        runner::client_streams(&job, fds, output_limit, init_for_capture)
    else {
        end_jail();
        return HandOver::Nothing;
    };
    let mut request = serde_json::to_vec(&job.program).expect("a program serializes");
    let micros = |(user, sys): (std::time::Duration, std::time::Duration)| {
        (user.as_micros() as u64, sys.as_micros() as u64)
    };
    let before = CpuBefore {
        cgroup: cgroup
            .map(|probe| probe.usage())
            .and_then(|usage| Some((usage.cpu_user_usec?, usage.cpu_sys_usec.unwrap_or(0)))),
        interpreter: pid.and_then(kernel::cpu_time).map(micros),
    };
    let started = Instant::now();
    clock.start(job.time_limit);
    let mut relays = Vec::new();
    let (done, relayed) = std::sync::mpsc::channel::<()>();
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
                    return HandOver::Nothing;
                }
            };
            // The client's stdin is read only as the program asks for it; nobody waits
            // for that copy (a terminal may never end).
            drop(relay(stdin, pipes.stdin, None));
            relays.push(relay(pipes.stdout, stdout, Some(done.clone())));
            relays.push(relay(pipes.stderr, stderr, Some(done.clone())));
            interpreter
                .write_all(&request)
                .map_err(|_| nix::errno::Errno::EPIPE)
        }
    };
    if sent.is_err() {
        end_jail();
        let message = format!(
            "brig serve: the warm {} ended just before this request reached it; retry",
            warm.name()
        );
        runner::answer_error(&[connection], &Error::setup(message));
        return HandOver::Nothing;
    }
    watcher.watch(&connection);
    wait_until_closed(&mut interpreter);
    let _ = interpreter.flush();
    // Everything the program wrote has reached the client before it is answered, unless
    // the client does not read its streams: then the relays are left behind (they end
    // with this runner) after REPLY_TIMEOUT, and the client is answered all the same.
    let deadline = Instant::now() + protocol::REPLY_TIMEOUT;
    for _ in 0..relays.len() {
        let left = deadline.saturating_duration_since(Instant::now());
        if relayed.recv_timeout(left).is_err() {
            break;
        }
    }
    drop(relays);
    HandOver::Handed(Box::new(Handed {
        job,
        connection,
        capture,
        started,
        before,
    }))
}

/// Waits until the server sends a job (or closes the control socket): true; or until
/// the interpreter's socket is readable, which before a job means it died: false.
fn job_comes_first(control: &OwnedFd, interpreter: &UnixStream) -> bool {
    use nix::poll::{PollFd, PollFlags, PollTimeout, poll};
    loop {
        let mut fds = [
            PollFd::new(control.as_fd(), PollFlags::POLLIN),
            PollFd::new(interpreter.as_fd(), PollFlags::POLLIN),
        ];
        match poll(&mut fds, PollTimeout::NONE) {
            Ok(_) => {}
            Err(nix::errno::Errno::EINTR) => continue,
            Err(_) => return true,
        }
        let ready = |fd: &PollFd| fd.revents().is_some_and(|events| !events.is_empty());
        if ready(&fds[0]) {
            return true;
        }
        if ready(&fds[1]) {
            return false;
        }
    }
}

/// Waits until the interpreter closes its socket (the program is done, or the jail was
/// ended: at the time limit, by the supervisor). What arrives is dropped: the interpreter
/// says nothing after its "ready", and nothing the program writes there is brig's to use.
fn wait_until_closed(interpreter: &mut UnixStream) {
    let mut chunk = [0u8; 512];
    loop {
        match interpreter.read(&mut chunk) {
            Ok(0) => break,
            Ok(_) => {}
            Err(err) if err.kind() == std::io::ErrorKind::Interrupted => {}
            Err(_) => break,
        }
    }
}
