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
use super::runner_common;
use super::wire::{Job, Report, Warm};
use crate::error::Error;
use crate::jail::{Captured, Jail, Outcome, Output, Program, RequestClock, RunReport};
use crate::plan::Plan;
use crate::sys;
use crate::verdict::{RunContext, Verdict};
use nix::sys::signal::Signal;
use nix::sys::socket::MsgFlags;
use std::io::{Read, Write};
use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::net::UnixStream;
use std::path::PathBuf;
use std::time::Instant;

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
            as_root: false,
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
        Err(err) => return runner_common::report_failed(control, &err),
    };
    let clock = match jail.time_limit_from_request() {
        Ok(clock) => clock,
        Err(err) => return runner_common::report_failed(control, &err),
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
            return runner_common::report_failed(
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
        Err(err) => return runner_common::report_failed(control, &err),
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
                let verdict = warm_verdict(plan, Ok(report.clone()), done, None);
                runner_common::answer(
                    control,
                    &done.connection,
                    verdict,
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
            return runner_common::report_failed(control, &Error::setup(message));
        }
        HandOver::Nothing => return 0,
    };
    let mut handed = *handed;
    // The jail is gone: the captured pipes have ended.
    let captured = handed
        .capture
        .take()
        .and_then(|collector| collector.join().ok())
        .map(Output::into_captured);
    let verdict = warm_verdict(plan, result, &handed, captured.as_ref());
    let Handed {
        job, connection, ..
    } = handed;
    runner_common::answer(control, &connection, verdict, &job, captured, audit_log);
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

/// The verdict of a warm run: the report made the request's own (its wall and CPU time,
/// its time limit), and what the request's collector counted of a captured output.
fn warm_verdict(
    plan: &Plan,
    report: crate::error::Result<RunReport>,
    handed: &Handed,
    captured: Option<&Captured>,
) -> Verdict {
    match report {
        Ok(report) => {
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
            let mut report = report.since_request(
                handed.started,
                handed.job.time_limit,
                std::time::Duration::from_micros(user),
                std::time::Duration::from_micros(sys),
            );
            let mut context = RunContext::warm();
            if let Some(captured) = captured {
                report.output = Some(captured.counts);
                context.output_limit = Some(captured.limit);
            }
            Verdict::of_run_in(plan, &report, context)
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
    /// The collector of a captured output, joined once the jail is gone.
    capture: Option<std::thread::JoinHandle<Output>>,
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
        .map(|_| runner_common::dev_null("the warm interpreter"))
        .collect()
}

/// Pipes for an interpreter's stdin, stdout and stderr: its ends, and this runner's.
fn relay_pipes() -> crate::error::Result<(Vec<OwnedFd>, RelayPipes)> {
    let (stdin_read, stdin_write) = runner_common::pipe("the warm interpreter")?;
    let (stdout_read, stdout_write) = runner_common::pipe("the warm interpreter")?;
    let (stderr_read, stderr_write) = runner_common::pipe("the warm interpreter")?;
    let ours = RelayPipes {
        stdin: stdin_write,
        stdout: stdout_read,
        stderr: stderr_read,
    };
    Ok((vec![stdin_read, stdout_write, stderr_write], ours))
}

/// Copies the client's stdin into the interpreter's, as the program asks for it;
/// nobody waits for that copy (a terminal may never end).
fn copy_stdin(from: OwnedFd, to: OwnedFd) {
    std::thread::spawn(move || {
        let _ = std::io::copy(&mut std::fs::File::from(from), &mut std::fs::File::from(to));
    });
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
        runner_common::ClientWatcher::start(init.as_ref().and_then(|init| init.try_clone().ok()));
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
    let Ok((connection, streams)) = runner_common::client_streams(&job, fds, output_limit) else {
        end_jail();
        return HandOver::Nothing;
    };
    let request = serde_json::to_vec(&job.program).expect("a program serializes");
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
    // The program's output goes through the one collector, bounded as any run's, unless
    // a warm Python writes to the client's own descriptors. At the cut, the supervisor
    // is told (through the request's clock): it ends the jail and decides the outcome.
    let given = give(&mut interpreter, request, streams, pipes, output_limit);
    let (collector, capturing) = match given {
        Ok(Some((output, capturing))) => (Some(output), capturing),
        Ok(None) => (None, false),
        Err(()) => {
            end_jail();
            let message = format!(
                "brig serve: the warm {} ended just before this request reached it; retry",
                warm.name()
            );
            runner_common::answer_error(&[connection], &Error::busy(message));
            return HandOver::Nothing;
        }
    };
    let (done, collected) = std::sync::mpsc::channel::<()>();
    let collector = collector.map(|output| {
        std::thread::spawn(move || {
            let output = output.collect(|| clock.output_cut());
            let _ = done.send(());
            output
        })
    });
    watcher.watch(&connection);
    wait_until_closed(&mut interpreter);
    let _ = interpreter.flush();
    // Everything the program wrote has reached the client before it is answered, unless
    // the client does not read its streams: then the collector is left behind (it ends
    // with this runner) after REPLY_TIMEOUT, and the client is answered all the same. A
    // captured output is taken once the jail is gone.
    let capture = match (collector, capturing) {
        (Some(collector), true) => Some(collector),
        (Some(_), false) => {
            let _ = collected.recv_timeout(protocol::REPLY_TIMEOUT);
            None
        }
        (None, _) => None,
    };
    HandOver::Handed(Box::new(Handed {
        job,
        connection,
        capture,
        started,
        before,
    }))
}

/// Gives the request to the interpreter with its streams: a warm Python takes the
/// client's descriptors, or the pipes of a collector that captures; a warm Node's streams
/// are pipes to this runner from the start, whose output a collector relays to the
/// client's or captures. Returns that collector and whether it captures; Err when the
/// interpreter is gone (or a stream could not be set up).
fn give(
    interpreter: &mut UnixStream,
    mut request: Vec<u8>,
    streams: runner_common::Streams,
    pipes: Option<RelayPipes>,
    output_limit: Option<crate::units::Size>,
) -> Result<Option<(Output, bool)>, ()> {
    match (pipes, streams) {
        (None, runner_common::Streams::Client(stdio)) => {
            let borrowed: Vec<_> = stdio.iter().map(AsFd::as_fd).collect();
            sys::send_with_fds(interpreter.as_fd(), &request, &borrowed).map_err(drop)?;
            Ok(None)
        }
        (None, runner_common::Streams::Capture { stdin, limit }) => {
            let (mut output, ends) = Output::new(limit).map_err(drop)?;
            output.capture(limit);
            let given = [stdin.as_fd(), ends.stdout.as_fd(), ends.stderr.as_fd()];
            sys::send_with_fds(interpreter.as_fd(), &request, &given).map_err(drop)?;
            Ok(Some((output, true)))
        }
        (Some(pipes), streams) => {
            // Without an output limit, relayed output is counted, not cut: it is never
            // held beyond the collector's one chunk.
            let limit = output_limit.map_or(u64::MAX, |limit| limit.0);
            let mut output = Output::of_pipes(pipes.stdout, pipes.stderr, limit).map_err(drop)?;
            let capturing = match streams {
                runner_common::Streams::Client(stdio) => {
                    let [stdin, stdout, stderr]: [OwnedFd; 3] = stdio.try_into().map_err(drop)?;
                    copy_stdin(stdin, pipes.stdin);
                    output.relay_to(stdout, stderr);
                    false
                }
                runner_common::Streams::Capture { stdin, limit } => {
                    copy_stdin(stdin, pipes.stdin);
                    output.capture(limit);
                    true
                }
            };
            request.push(b'\n');
            interpreter.write_all(&request).map_err(drop)?;
            Ok(Some((output, capturing)))
        }
    }
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
