//! A runner: a process the server forks for one jail. A pooled runner assembles the
//! server's default jail at once, tells the server it is ready and waits; a runner for a
//! request whose jail has another shape assembles that one. Either way it then runs the
//! request's program with the client's streams (or pipes it captures), answers the
//! client itself, and exits: a jail is never reused. Its `main` hands a warm
//! interpreter's jail to `warm.rs` and a session's to `session.rs`; what the three share
//! is in `runner_common.rs`.
//!
//! The runner is single-threaded until its jail is assembled; then threads pass the
//! client's signals on and feed or drain captured streams.

use super::protocol::{self, FrameReader, StdioMode};
use super::runner_common::{
    self, ClientWatcher, Streams, answer, answer_error, client_streams, report_failed,
};
use super::wire::{Job, Report, SessionStart, Start};
use crate::error::Error;
use crate::jail::{Captured, Jail, Program};
use crate::options::JailOptions;
use crate::plan::Plan;
use crate::sys;
use crate::verdict::{Peer, RunContext, Verdict};
use std::os::fd::{AsFd, OwnedFd};
use std::path::PathBuf;

/// The jails the server prepared, which pooled runners assemble: read in the runner from
/// the server's memory, which a forked runner shares.
pub struct Prepared<'a> {
    /// The server's default jail (cold and warm pools).
    pub pool_plan: &'a Plan,
    /// A pooled session's jail, and its programs' options.
    pub session_plan: &'a Plan,
    pub defaults: &'a JailOptions,
}

/// The runner's life; ends the process.
pub fn main(control: OwnedFd, start: Start, prepared: Prepared, audit_log: Option<PathBuf>) -> ! {
    runner_common::keep_control(&control);
    if matches!(start, Start::SessionPool | Start::Session(_)) {
        // A session's runner sleeps until a request or a program's output, end or pid, and
        // answers with little work. In short turns it preempts the program that woke it;
        // else, on a busy CPU, it waits until that program's turn ends: a background
        // start's answer waited for the program's whole exec (docs/performance.md).
        let _ = sys::ask_for_short_turns();
    }
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
    let _ = rehearse(plan);
    if protocol::write_frame(control.as_fd(), &Report::Ready, &[]).is_err() {
        return 0;
    }
    let watcher = ClientWatcher::start(jail.init_pidfd().try_clone_to_owned().ok());
    // The server gone (or draining) closes the control socket: the jail goes unused.
    let Ok(Some((body, fds))) = FrameReader::default().read_blocking(control) else {
        return 0;
    };
    let Some(job) = decode_job(&body) else {
        return 1;
    };
    run_job(jail, plan, job, fds, audit_log, control, watcher)
}

/// A job frame's body as the server sent it (`protocol::write_frame`); None when it is
/// not one.
fn decode_job(body: &[u8]) -> Option<Job> {
    serde_json::from_slice(body).ok()
}

/// Walks a request's path once before any request comes: decoding a job, encoding a
/// verdict. This process is a fork of the server, sharing its memory until it writes
/// there; the first writes (the allocator's pages, the encoders' buffers) would otherwise
/// copy pages while a client waits.
///
/// It goes through the functions the request takes ([`decode_job`], `runner_common::done`),
/// so that it cannot drift from them; the encoded reply is returned for its test.
fn rehearse(plan: &Plan) -> Option<Vec<u8>> {
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
    let job = decode_job(&serde_json::to_vec(&job).ok()?)?;
    let verdict = Verdict::of_setup_error(Some(plan), &Error::setup("rehearsal"));
    serde_json::to_vec(&runner_common::done(verdict, &job, None)).ok()
}

fn for_job(job: Job, fds: Vec<OwnedFd>, audit_log: Option<&PathBuf>, control: &OwnedFd) -> i32 {
    let plan = match Plan::resolve(job.options.clone()) {
        Ok(plan) => plan,
        Err(err) => return answer_error(&fds, &err),
    };
    match Jail::assemble_for_streams(&plan) {
        Ok(jail) => {
            let _ = protocol::write_frame(control.as_fd(), &Report::Built, &[]);
            let watcher = ClientWatcher::start(jail.init_pidfd().try_clone_to_owned().ok());
            run_job(jail, &plan, job, fds, audit_log, control, watcher)
        }
        Err(err) => answer_error(&fds, &err),
    }
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::serve::protocol::Reply;

    fn options() -> JailOptions {
        let yaml = "command: [python3, -c, 'print(1)']\ntmpfs: [/tmp:64M]\n";
        crate::config::parse(yaml, "test").unwrap()
    }

    fn plan() -> Plan {
        Plan::resolve(options()).unwrap()
    }

    /// The rehearsal's reply is a run's answer as the client reads it: a `done` frame with
    /// a verdict of the current schema.
    #[test]
    fn the_rehearsal_ends_in_the_reply_a_client_reads() {
        let bytes = rehearse(&plan()).expect("the rehearsal encodes a reply");
        let frame: serde_json::Value = serde_json::from_slice(&bytes).unwrap();
        assert_eq!(frame["type"], "done", "{frame}");
        assert_eq!(frame["verdict"]["schema"], "brig-verdict/1", "{frame}");
        let reply: Reply = serde_json::from_slice(&bytes).unwrap();
        assert!(matches!(reply, Reply::Done { .. }), "{reply:?}");
    }

    /// A job as the server encodes it comes out of the runner's decoder whole, every field
    /// set: what the rehearsal decodes is what a request brings.
    #[test]
    fn a_job_survives_the_frame_whole() {
        let plan = plan();
        let job = Job {
            options: options(),
            program: Program::of(&plan),
            time_limit: plan.time_limit,
            config_digest: "digest".into(),
            stdio: StdioMode::Capture,
            stdin: Some("input".into()),
            peer: Peer {
                uid: 1000,
                gid: 1000,
                pid: 42,
            },
        };
        let sent = serde_json::to_value(&job).unwrap();
        let decoded = decode_job(&serde_json::to_vec(&job).unwrap()).expect("a job");
        assert_eq!(serde_json::to_value(&decoded).unwrap(), sent);
    }
}
