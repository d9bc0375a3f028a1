//! A session's runner takes short turns on the CPU, and nothing of its jail does, as root
//! and rootless. The runner asks the kernel for the shortest slice (a fair task's
//! `sched_attr.sched_runtime`, Linux 6.12's EEVDF): woken by a program's pid, output or
//! end, it preempts that program instead of waiting for the program's turn to end. The
//! jail's init and programs keep the default slice: the runner's head start must not pass
//! to what the jail runs. What the short turns gain is a benchmark (bench/, see
//! docs/performance.md), not asserted here.

use crate::common;

use common::serve::{Server, ask, close_session, create_session, runners};
use common::*;
use serde_json::json;
use std::time::Duration;

both_modes!(a_session_runner_takes_short_turns_and_its_jail_does_not);

/// The slice the runner asks for (src/sys.rs, `SHORT_SLICE_NS`).
const SHORT_SLICE_NS: u64 = 100_000;

/// `se.slice` of a /proc/PID/sched text: the task's slice in nanoseconds.
fn slice_in(sched: &str) -> Option<u64> {
    sched
        .lines()
        .find_map(|line| line.strip_prefix("se.slice")?.split(':').nth(1))
        .and_then(|value| value.trim().parse().ok())
}

fn slice_of(pid: u32) -> Option<u64> {
    slice_in(&std::fs::read_to_string(format!("/proc/{pid}/sched")).ok()?)
}

/// Whether the kernel takes a fair task's requested slice (6.12 and later) and shows
/// slices in /proc/PID/sched.
fn kernel_takes_slices() -> bool {
    let release = std::fs::read_to_string("/proc/sys/kernel/osrelease").unwrap_or_default();
    let mut numbers = release
        .split(|c: char| !c.is_ascii_digit())
        .filter_map(|part| part.parse::<u32>().ok());
    let version = (numbers.next().unwrap_or(0), numbers.next().unwrap_or(0));
    version >= (6, 12) && slice_of(std::process::id()).is_some()
}

fn a_session_runner_takes_short_turns_and_its_jail_does_not(mode: Mode) {
    if !require(
        "a kernel that takes a task's requested slice (Linux 6.12 or later) and shows it in /proc/PID/sched",
        "run on Linux 6.12 or later built with CONFIG_SCHED_DEBUG",
        kernel_takes_slices(),
    ) {
        return;
    }
    // What this test's own process has: the default slice.
    let default = slice_of(std::process::id()).expect("the test's own slice");
    assert_ne!(
        default, SHORT_SLICE_NS,
        "the test itself runs with a short slice"
    );
    let server = Server::start(mode, &["--pool", "0", "--session-pool", "1"]);
    let id = create_session(&server, json!({}));
    // The session's runner and the pooled one (every runner of this server is a
    // session's) ask for short turns; the server itself does not.
    let runners = runners(&server);
    assert!(!runners.is_empty(), "no runner");
    assert_eq!(slice_of(server.pid()), Some(default), "the server's slice");
    for runner in &runners {
        // A runner the pool forked a moment ago asks for its slice as its first step:
        // wait for that step, not for a time.
        wait_until(Duration::from_secs(10), || {
            slice_of(*runner) == Some(SHORT_SLICE_NS)
        });
        assert_eq!(slice_of(*runner), Some(SHORT_SLICE_NS), "runner {runner}");
        // Its jail's init: the default again.
        let children = std::fs::read_to_string(format!("/proc/{runner}/task/{runner}/children"))
            .unwrap_or_default();
        for init in children
            .split_whitespace()
            .filter_map(|pid| pid.parse().ok())
        {
            assert_eq!(
                slice_of(init),
                Some(default),
                "init {init} of runner {runner}"
            );
        }
    }
    // A command and a background process of the session: the default, seen from inside.
    let probe = ["/bin/sh", "-c", "grep se.slice /proc/self/sched"];
    let reply = ask(
        &server,
        json!({"type": "session_exec", "session": id, "command": probe}),
    );
    assert_eq!(
        reply["stdout"].as_str().and_then(slice_in),
        Some(default),
        "{reply}"
    );
    let started = ask(
        &server,
        json!({"type": "session_exec", "session": id, "command": ["/bin/sleep", "300"], "background": true}),
    );
    assert_eq!(started["type"], "process", "{started}");
    let inside = ask(
        &server,
        json!({"type": "session_exec", "session": id, "command": ["/bin/cat", format!("/proc/{}/sched", started["pid"])]}),
    );
    assert_eq!(
        inside["stdout"].as_str().and_then(slice_in),
        Some(default),
        "{inside}"
    );
    close_session(&server, &id);
}
