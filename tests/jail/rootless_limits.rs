//! The default limits where brig has no cgroup, and what brig reports of a jail it
//! killed. On this host brig runs as root on the cgroup v1 hierarchies and rootless
//! without any usable cgroup: root is where the defaults are cgroup limits, rootless where
//! brig falls back to RLIMIT_NPROC for the process count and says, once on stderr, that
//! the memory limit is not enforced.

use crate::common;

use common::*;
use serde_json::Value;
use std::process::{Output, Stdio};
use std::time::Duration;

both_modes!(
    unenforced_default_limits_are_said_once_with_the_fix,
    opting_out_leaves_stderr_alone,
    check_shows_what_is_enforced,
    a_fork_bomb_stops_at_the_process_limit,
    a_fork_bomb_dies_at_the_time_limit,
    a_killed_jail_reports_its_memory_and_cpu,
);

/// What every line about the unenforced memory limit names: the limit and the fix.
const LINE_NEEDLES: [&str; 4] = [
    "memory limit (1G)",
    "not enforced",
    "--cgroup-parent",
    "--quiet-limits",
];

/// Runs `brig run --report FILE ARGS -- PROGRAM`: its output and its verdict.
fn run_with_verdict(mode: Mode, args: &[&str], program: &[&str]) -> (Output, Value) {
    let dir = TempDir::new("verdict").writable_by_all();
    let report = dir.path().join("verdict.json");
    let mut all = vec!["run", "--report", report.to_str().unwrap()];
    all.extend_from_slice(args);
    let output = run(mode, &with_program(&all, program));
    let text = std::fs::read_to_string(&report)
        .unwrap_or_else(|err| panic!("no verdict: {err}; {}", describe(&output)));
    let verdict = serde_json::from_str(&text).unwrap_or_else(|err| panic!("{err}: {text}"));
    (output, verdict)
}

/// brig's own lines on stderr about unenforced limits.
fn limit_lines(output: &Output) -> Vec<String> {
    stderr(output)
        .lines()
        .filter(|line| line.starts_with("brig: ") && line.contains("not enforced"))
        .map(String::from)
        .collect()
}

fn number(verdict: &Value, key: &str) -> u64 {
    verdict[key]
        .as_u64()
        .unwrap_or_else(|| panic!("{key} is not a number: {verdict}"))
}

fn unenforced_default_limits_are_said_once_with_the_fix(mode: Mode) {
    // The program's own output, and brig's line after it, once.
    let (output, v) = run_with_verdict(mode, &[], &["sh", "-c", "echo out; echo err >&2"]);
    assert_eq!(assert_success(&output), "out\n");
    let err = stderr(&output);
    match mode {
        Mode::Root => {
            assert_eq!(err, "err\n", "a cgroup enforces the defaults here");
            assert_eq!(v["limits"]["cgroup_enforced"], true, "{v}");
            assert_eq!(v["warnings"], Value::Array(vec![]), "{v}");
        }
        Mode::Rootless => {
            assert!(err.starts_with("err\n"), "{}", describe(&output));
            assert_eq!(err.lines().count(), 2, "{}", describe(&output));
            let lines = limit_lines(&output);
            assert_eq!(lines.len(), 1, "{}", describe(&output));
            for needle in LINE_NEEDLES {
                assert!(lines[0].contains(needle), "{needle:?}: {}", lines[0]);
            }
            // The fix is the one an explicit --memory fails with.
            let explicit = run(mode, &["run", "--memory", "1G", "--", "true"]);
            let refusal = assert_one_line_error(&explicit, &["--cgroup-parent"]);
            let fix = refusal.split_once("; ").unwrap().1.trim_end();
            assert!(lines[0].contains(fix), "{fix:?} not in {}", lines[0]);
            // The verdict says the same, and where the process limit went.
            assert_eq!(v["limits"]["cgroup_enforced"], false, "{v}");
            assert_eq!(v["limits"]["memory_bytes"], 1u64 << 30, "{v}");
            assert_eq!(v["limits"]["pids"], 256, "{v}");
            let nproc = v["limits"]["rlimits"]
                .as_array()
                .unwrap()
                .iter()
                .find(|limit| limit["name"] == "nproc")
                .unwrap_or_else(|| panic!("no nproc rlimit: {v}"));
            assert_eq!((&nproc["soft"], &nproc["hard"]), (&256.into(), &256.into()));
            let warnings = v["warnings"].as_array().unwrap();
            assert_eq!(warnings.len(), 1, "{v}");
            assert!(
                warnings[0].as_str().unwrap().contains("not enforced"),
                "{v}"
            );
        }
    }

    // Killed by brig: the line, then brig's explanation last.
    let output = run(mode, &["run", "--time-limit", "300ms", "--", "sleep", "60"]);
    assert_code(&output, 124);
    let err = stderr(&output);
    let last = err.lines().last().unwrap_or_default();
    assert!(
        last.starts_with("brig: time limit"),
        "{}",
        describe(&output)
    );
    let expected = usize::from(mode == Mode::Rootless);
    assert_eq!(
        limit_lines(&output).len(),
        expected,
        "{}",
        describe(&output)
    );
    assert_eq!(err.lines().count(), 1 + expected, "{}", describe(&output));

    // A program that never ran: only the one line about that.
    let output = run(mode, &["run", "--", "no-such-program-brig-test"]);
    assert_code(&output, 127);
    assert_eq!(stderr(&output).lines().count(), 1, "{}", describe(&output));
}

fn opting_out_leaves_stderr_alone(mode: Mode) {
    let dir = TempDir::new("quiet");
    let config = dir.file("quiet.yaml", "quiet-limits: true\ncommand: [true]\n");
    let config = config.to_str().unwrap();
    let cases: [&[&str]; 4] = [
        &["run", "--memory", "max", "--pids", "max", "--", "true"],
        &["run", "--memory", "max", "--", "true"],
        &["run", "--quiet-limits", "--", "true"],
        &["run", "--config", config],
    ];
    for args in cases {
        let output = run(mode, args);
        assert_success(&output);
        assert_eq!(stderr(&output), "", "{args:?}");
    }
    // Quiet on stderr; the verdict still tells.
    let (output, v) = run_with_verdict(mode, &["--quiet-limits"], &["true"]);
    assert_success(&output);
    assert_eq!(stderr(&output), "");
    let warned = v["warnings"].to_string().contains("not enforced");
    assert_eq!(warned, mode == Mode::Rootless, "{v}");
}

/// The parts of `brig check`'s plan about limits.
fn planned_limits(mode: Mode, args: &[&str]) -> (serde_json::Value, Vec<String>) {
    let mut all = vec!["check"];
    all.extend_from_slice(args);
    all.extend_from_slice(&["--", "true"]);
    let output = run(mode, &all);
    let yaml = assert_success(&output);
    assert_eq!(stderr(&output), "", "check says it all in the plan");
    let plan: serde_json::Value =
        serde_saphyr::from_str(&yaml).unwrap_or_else(|err| panic!("{err}: {yaml}"));
    let warnings = plan["warnings"]
        .as_array()
        .map(|list| {
            list.iter()
                .filter_map(|w| w.as_str().map(String::from))
                .collect()
        })
        .unwrap_or_default();
    (plan["limits"].clone(), warnings)
}

fn check_shows_what_is_enforced(mode: Mode) {
    let (limits, warnings) = planned_limits(mode, &[]);
    let rlimit = |name: &str| {
        limits["rlimits"]
            .as_array()
            .unwrap()
            .iter()
            .find(|limit| limit["name"] == name)
            .cloned()
    };
    assert_eq!(limits["pids"], 256, "{limits}");
    match mode {
        Mode::Root => {
            assert_eq!(limits["memory"], "1G", "{limits}");
            assert!(limits["cgroup"]["version"].is_string(), "{limits}");
            assert_eq!(limits.get("not-enforced"), None, "{limits}");
            assert_eq!(
                rlimit("nproc"),
                None,
                "the cgroup counts processes: {limits}"
            );
            assert!(warnings.is_empty(), "{warnings:?}");
        }
        Mode::Rootless => {
            // The memory limit is not shown as a limit of the jail, but as not enforced.
            assert_eq!(limits["memory"], Value::Null, "{limits}");
            assert_eq!(limits.get("cgroup"), None, "{limits}");
            assert_eq!(limits["not-enforced"]["memory"], "1G", "{limits}");
            let nproc = rlimit("nproc").unwrap_or_else(|| panic!("no nproc: {limits}"));
            assert_eq!((&nproc["soft"], &nproc["hard"]), (&256.into(), &256.into()));
            assert_eq!(warnings.len(), 1, "{warnings:?}");
            assert!(warnings[0].contains("memory limit (1G) is not enforced"));
        }
    }
    // Without limits, nothing is missing; an explicit nproc is the caller's.
    let (limits, warnings) = planned_limits(
        mode,
        &["--memory", "max", "--pids", "max", "--rlimit", "nproc=77"],
    );
    assert_eq!(limits["memory"], Value::Null, "{limits}");
    assert_eq!(limits["pids"], Value::Null, "{limits}");
    assert_eq!(limits.get("not-enforced"), None, "{limits}");
    assert!(warnings.is_empty(), "{warnings:?}");
    assert_eq!(rlimit_soft(&limits, "nproc"), Some(77), "{limits}");
    if mode == Mode::Rootless {
        let (limits, _) = planned_limits(mode, &["--rlimit", "nproc=77"]);
        assert_eq!(rlimit_soft(&limits, "nproc"), Some(77), "{limits}");
        assert_eq!(limits["pids"], Value::Null, "{limits}");
    }
}

fn rlimit_soft(limits: &Value, name: &str) -> Option<u64> {
    let rlimits = limits["rlimits"].as_array()?;
    let found = rlimits.iter().filter(|limit| limit["name"] == name);
    let found: Vec<_> = found.collect();
    assert!(found.len() <= 1, "{name} twice: {limits}");
    found.first()?["soft"].as_u64()
}

/// Forks until the kernel refuses, each child sleeping a while: prints how many forks
/// succeeded and the error, then waits until `go` exists (or a timeout).
const FORK_UNTIL_REFUSED: &str = r#"
import errno, os, sys, time
children = 0
error = None
while children < 1000:
    try:
        pid = os.fork()
    except OSError as e:
        error = errno.errorcode[e.errno]
        break
    if pid == 0:
        time.sleep(20)
        os._exit(0)
    children += 1
print("children", children, flush=True)
print("error", error, flush=True)
deadline = time.time() + 20
while not os.path.exists(sys.argv[1]) and time.time() < deadline:
    time.sleep(0.05)
"#;

/// The process limit is 256 in both modes: the cgroup's pids.max as root, RLIMIT_NPROC
/// rootless. The kernel counts RLIMIT_NPROC per user in each user namespace, so two
/// jails of the same caller each get the whole limit at the same time.
fn a_fork_bomb_stops_at_the_process_limit(mode: Mode) {
    let dir = TempDir::new("forks").writable_by_all();
    let go = dir.path().join("go");
    let bind = format!("{}:/shared", dir.str());
    let mut jails: Vec<Running> = (0..2)
        .map(|_| {
            let mut brig = command(
                mode,
                &[
                    "run",
                    "--time-limit",
                    "40s",
                    "--bind",
                    &bind,
                    "--",
                    "python3",
                    "-c",
                    FORK_UNTIL_REFUSED,
                    "/shared/go",
                ],
            );
            brig.stdout(Stdio::piped()).stderr(Stdio::piped());
            Running::spawn(brig)
        })
        .collect();
    // Each jail holds its children until both have forked all they could.
    let mut reports = Vec::new();
    for jail in &mut jails {
        let stdout = jail.child.stdout.take().unwrap();
        let mut lines = std::io::BufRead::lines(std::io::BufReader::new(stdout));
        let mut next = || lines.next().and_then(Result::ok).unwrap_or_default();
        reports.push(format!("{}\n{}\n", next(), next()));
    }
    std::fs::write(&go, "").unwrap();
    for (jail, report) in jails.into_iter().zip(reports) {
        let output = jail.wait();
        assert_success(&output);
        assert_eq!(
            field(&report, "error"),
            "EAGAIN",
            "{report}{}",
            describe(&output)
        );
        let children: u64 = field(&report, "children").parse().unwrap();
        // init, the program and its children: the limit, exactly.
        assert_eq!(children + 2, 256, "{report}{}", describe(&output));
    }
}

/// Host processes whose command line contains `marker`.
fn processes_with_marker(marker: &str) -> Vec<u32> {
    host_pids()
        .into_iter()
        .filter(|pid| {
            std::fs::read(format!("/proc/{pid}/cmdline"))
                .map(|cmdline| {
                    cmdline
                        .split(|&byte| byte == 0)
                        .any(|arg| arg == marker.as_bytes())
                })
                .unwrap_or(false)
        })
        .collect()
}

/// Every process forks forever, retrying when the kernel refuses.
const FORK_BOMB: &str = r#"
import os
while True:
    try:
        os.fork()
    except OSError:
        pass
"#;

/// A time limit ends a fork bomb (256 spinning processes), and nothing of it is left. No
/// timing is asserted beyond a 30 s safety net: how fast depends on the machine's load.
fn a_fork_bomb_dies_at_the_time_limit(mode: Mode) {
    let marker = unique("brig-bomb");
    let dir = TempDir::new("bomb").writable_by_all();
    let report = dir.path().join("verdict.json");
    let mut brig = command(
        mode,
        &[
            "run",
            "--time-limit",
            "2s",
            "--report",
            report.to_str().unwrap(),
            "--",
            "python3",
            "-c",
            FORK_BOMB,
            &marker,
        ],
    );
    brig.stdout(Stdio::piped()).stderr(Stdio::piped());
    let child = brig.spawn().expect("spawn brig");
    let watchdog = Watchdog::new(child.id(), Duration::from_secs(30));
    let output = child.wait_with_output().expect("wait for brig");
    drop(watchdog);
    assert_code(&output, 124);
    let text = std::fs::read_to_string(&report).unwrap();
    let v: Value = serde_json::from_str(&text).unwrap();
    assert_eq!(v["status"], "timeout", "{v}");
    assert!(
        stderr(&output).contains("time limit"),
        "{}",
        describe(&output)
    );
    let left = processes_with_marker(&marker);
    assert!(left.is_empty(), "left behind: {left:?}");
}

/// A program that holds 200 MiB and sleeps until brig kills it at its time limit: the
/// verdict has its memory and CPU time, not those of the jail's init.
fn a_killed_jail_reports_its_memory_and_cpu(mode: Mode) {
    let program = r#"
import time
block = bytearray(200 << 20)
for i in range(0, len(block), 4096):
    block[i] = 1
print("ready", flush=True)
time.sleep(60)
"#;
    let (output, v) = run_with_verdict(mode, &["--time-limit", "3s"], &["python3", "-c", program]);
    assert_code(&output, 124);
    assert_eq!(stdout(&output), "ready\n", "{}", describe(&output));
    assert_eq!(v["status"], "timeout", "{v}");
    let rss = number(&v, "max_rss_kib");
    assert!(rss >= 200 << 10, "max_rss_kib {rss}: {v}");
    assert!(rss < 400 << 10, "max_rss_kib {rss}: {v}");
    let cpu = number(&v, "cpu_user_ms") + number(&v, "cpu_sys_ms");
    assert!(cpu > 0, "touching 200 MiB took no CPU? {v}");

    // Stopped by a signal to brig after the grace period: the same.
    let dir = TempDir::new("stopped").writable_by_all();
    let report = dir.path().join("verdict.json");
    let ignoring =
        format!("import signal\nsignal.signal(signal.SIGTERM, signal.SIG_IGN)\n{program}");
    let mut brig = command(
        mode,
        &[
            "run",
            "--report",
            report.to_str().unwrap(),
            "--",
            "python3",
            "-c",
            &ignoring,
        ],
    );
    brig.stdout(Stdio::piped()).stderr(Stdio::piped());
    let mut running = Running::spawn(brig);
    let mut line = String::new();
    let mut stdout = std::io::BufReader::new(running.child.stdout.take().unwrap());
    std::io::BufRead::read_line(&mut stdout, &mut line).unwrap();
    assert_eq!(line, "ready\n");
    kill(running.pid(), libc::SIGTERM);
    let output = running.wait();
    assert_code(&output, 128 + libc::SIGKILL);
    let v: Value = serde_json::from_str(&std::fs::read_to_string(&report).unwrap()).unwrap();
    let rss = number(&v, "max_rss_kib");
    assert!(rss >= 200 << 10, "max_rss_kib {rss}: {v}");
    let cpu = number(&v, "cpu_user_ms") + number(&v, "cpu_sys_ms");
    assert!(cpu > 0, "{v}");
}
