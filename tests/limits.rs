//! Real limits, real abuse: memory and fork bombs, CPU spins, sleeps, disk fills, output
//! floods and daemons, each stopped by the limit meant for it, and the verdict that tells
//! which limit ended the run. On this host brig runs as root on the cgroup v1 hierarchies;
//! rootless it has no cgroup, so the cgroup limits are root-only tests here (cgroup v2,
//! delegation included, is tests/cgroup_v2.rs, in a VM).
//!
//! Every run goes through `jail`/`finish`, which also check that brig removed its jail's
//! cgroups (`<hierarchy>/brig/jail-<brig's pid>-*`) before it exited.

#[macro_use]
mod common;

use common::*;
use serde_json::Value;
use std::collections::BTreeSet;
use std::io::Write;
use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitStatus, Output, Stdio};
use std::time::{Duration, Instant};

both_modes!(
    cpu_spin_ends_at_cpu_time,
    cpu_time_status_only_when_the_cpu_limit_fired,
    cpu_used_by_a_killed_jail_is_reported,
    sleep_ends_at_time_limit,
    disk_fill_stops_at_the_tmpfs_size,
    output_flood_is_cut_at_the_output_limit,
    output_limit_counts_both_streams_together,
    output_without_a_limit_passes_fully,
    setsid_daemon_does_not_survive,
    verdict_fields_for_each_status,
    report_fd_receives_the_verdict,
    setup_errors_write_a_verdict,
    concurrent_audit_log_lines_stay_whole,
    rlimits_reach_the_program,
    bad_rlimits_are_rejected,
    yaml_config_sets_the_limits,
    missing_cgroup_parent_is_rejected,
);

const MIB: u64 = 1 << 20;

// ---------------------------------------------------------------------------------------
// Running brig and reading what it left

/// A finished brig run: what it printed.
struct Done {
    output: Output,
}

/// Waits for a spawned brig, then checks that it removed its jail's cgroups.
fn finish(running: Running) -> Done {
    let pid = running.pid();
    let output = running.wait();
    assert_no_jail_cgroups(pid);
    Done { output }
}

/// Runs brig with `args` in `mode`, capturing its output.
fn jail(mode: Mode, args: &[&str]) -> Done {
    let mut brig = command(mode, args);
    brig.stdout(Stdio::piped()).stderr(Stdio::piped());
    finish(Running::spawn(brig))
}

/// Runs `brig run --report FILE ARGS -- PROGRAM` and returns the run and its verdict.
fn jail_with_verdict(mode: Mode, args: &[&str], program: &[&str]) -> (Done, Value) {
    let dir = TempDir::new("verdict").writable_by_all();
    let report = dir.path().join("verdict.json");
    let mut all = vec!["run", "--report", report.to_str().unwrap()];
    all.extend_from_slice(args);
    let done = jail(mode, &with_program(&all, program));
    let verdict = read_verdict(&report, &done.output);
    (done, verdict)
}

/// The verdict in `path`: exactly one line holding one JSON object.
fn read_verdict(path: &Path, output: &Output) -> Value {
    let text = std::fs::read_to_string(path).unwrap_or_else(|err| {
        panic!(
            "no verdict in {}: {err}; {}",
            path.display(),
            describe(output)
        )
    });
    parse_verdict(&text)
}

fn parse_verdict(text: &str) -> Value {
    assert!(
        text.ends_with('\n') && text.lines().count() == 1,
        "the verdict should be one line: {text:?}"
    );
    let verdict: Value =
        serde_json::from_str(text).unwrap_or_else(|err| panic!("not JSON: {err}: {text}"));
    assert_verdict_shape(&verdict);
    verdict
}

fn keys(object: &Value) -> BTreeSet<String> {
    object
        .as_object()
        .unwrap_or_else(|| panic!("not an object: {object}"))
        .keys()
        .cloned()
        .collect()
}

fn key_set(names: &[&str]) -> BTreeSet<String> {
    names.iter().map(|name| name.to_string()).collect()
}

/// The verdict has exactly the documented keys, with the documented types.
fn assert_verdict_shape(v: &Value) {
    assert_eq!(
        keys(v),
        key_set(&[
            "schema",
            "status",
            "brig_exit_code",
            "exit_code",
            "signal",
            "wall_ms",
            "cpu_user_ms",
            "cpu_sys_ms",
            "max_rss_kib",
            "memory_peak_bytes",
            "oom_kills",
            "pids_peak",
            "stdout_bytes",
            "stderr_bytes",
            "output_truncated",
            "limits",
            "protections",
            "warnings",
            "error",
        ]),
        "{v}"
    );
    assert_eq!(v["schema"], "brig-verdict/1", "{v}");
    let status = v["status"].as_str().unwrap_or_else(|| panic!("{v}"));
    assert!(
        [
            "ok",
            "nonzero_exit",
            "signaled",
            "timeout",
            "cpu_time",
            "oom",
            "output_limit",
            "setup_error"
        ]
        .contains(&status),
        "{v}"
    );
    assert!(v["brig_exit_code"].is_i64(), "{v}");
    for key in ["wall_ms", "cpu_user_ms", "cpu_sys_ms", "max_rss_kib"] {
        assert!(v[key].is_u64(), "{key}: {v}");
    }
    for key in [
        "exit_code",
        "signal",
        "memory_peak_bytes",
        "oom_kills",
        "pids_peak",
        "stdout_bytes",
        "stderr_bytes",
    ] {
        assert!(v[key].is_null() || v[key].is_u64(), "{key}: {v}");
    }
    assert!(v["output_truncated"].is_boolean(), "{v}");
    assert!(v["warnings"].is_array(), "{v}");
    assert!(v["error"].is_null() || v["error"].is_string(), "{v}");
    if !v["limits"].is_null() {
        assert_eq!(
            keys(&v["limits"]),
            key_set(&[
                "time_limit_ms",
                "cpu_time_ms",
                "memory_bytes",
                "pids",
                "cpus",
                "cgroup_enforced",
                "output_limit_bytes",
                "tmpfs_size_bytes",
                "rlimits",
            ]),
            "{v}"
        );
        for rlimit in v["limits"]["rlimits"].as_array().expect("rlimits") {
            assert_eq!(keys(rlimit), key_set(&["name", "soft", "hard"]), "{v}");
        }
    }
    if !v["protections"].is_null() {
        assert_eq!(
            keys(&v["protections"]),
            key_set(&[
                "namespaces",
                "cgroup",
                "rootfs",
                "rootless",
                "net",
                "capabilities",
                "no_new_privs",
                "landlock_abi",
                "seccomp_profile",
            ]),
            "{v}"
        );
    }
    // Anything but a setup error happened in a jail that was fully described.
    if status != "setup_error" {
        assert!(
            v["limits"].is_object() && v["protections"].is_object(),
            "{v}"
        );
    }
}

fn number(v: &Value, key: &str) -> u64 {
    v[key]
        .as_u64()
        .unwrap_or_else(|| panic!("{key} is not a number: {v}"))
}

/// brig's exit status, which must also be the verdict's `brig_exit_code`.
fn exit_status(done: &Done, verdict: &Value) -> i32 {
    let code = code(&done.output);
    assert_eq!(
        verdict["brig_exit_code"],
        code,
        "{verdict}\n{}",
        describe(&done.output)
    );
    code
}

/// Asserts brig's stderr is exactly one `brig: ` line mentioning every needle.
fn assert_one_brig_line(output: &Output, needles: &[&str]) {
    let err = stderr(output);
    assert!(
        err.lines().count() == 1 && err.starts_with("brig: ") && err.ends_with('\n'),
        "expected one brig line on stderr; {}",
        describe(output)
    );
    for needle in needles {
        assert!(err.contains(needle), "{needle:?}: {}", describe(output));
    }
}

// ---------------------------------------------------------------------------------------
// The host's cgroups

/// Every directory brig may create jail cgroups in: `<v1 hierarchy>/brig` and the v2 one.
fn brig_cgroup_parents() -> Vec<PathBuf> {
    let root = Path::new("/sys/fs/cgroup");
    let mut parents = vec![root.join("brig")];
    if let Ok(entries) = std::fs::read_dir(root) {
        parents.extend(entries.flatten().map(|entry| entry.path().join("brig")));
    }
    parents
}

/// The jail cgroups of the brig process `pid` that exist now, in every hierarchy.
fn jail_cgroups_of(pid: u32) -> Vec<PathBuf> {
    let prefix = format!("jail-{pid}-");
    let mut found = Vec::new();
    for parent in brig_cgroup_parents() {
        let Ok(entries) = std::fs::read_dir(&parent) else {
            continue;
        };
        for entry in entries.flatten() {
            if entry.file_name().to_string_lossy().starts_with(&prefix) {
                found.push(entry.path());
            }
        }
    }
    found.sort();
    found
}

/// brig removes its jail's cgroups before it exits, whatever ended the run.
fn assert_no_jail_cgroups(pid: u32) {
    let left = jail_cgroups_of(pid);
    assert!(left.is_empty(), "brig {pid} left cgroups behind: {left:?}");
}

/// The v1 cgroup directory of brig `pid`'s jail in `controller`'s hierarchy.
fn v1_jail_cgroup(controller: &str, pid: u32) -> Option<PathBuf> {
    v1_jail_cgroup_in(controller, "brig", pid)
}

/// The jail cgroup of brig `pid` under `parent` in a v1 hierarchy.
fn v1_jail_cgroup_in(controller: &str, parent: &str, pid: u32) -> Option<PathBuf> {
    let parent = Path::new("/sys/fs/cgroup").join(controller).join(parent);
    let prefix = format!("jail-{pid}-");
    std::fs::read_dir(parent)
        .ok()?
        .flatten()
        .find(|entry| entry.file_name().to_string_lossy().starts_with(&prefix))
        .map(|entry| entry.path())
}

fn read_trimmed(path: &Path) -> String {
    std::fs::read_to_string(path)
        .unwrap_or_else(|err| panic!("read {}: {err}", path.display()))
        .trim()
        .to_string()
}

// ---------------------------------------------------------------------------------------
// Programs

const MEMORY_BOMB: &str = "a = []\nwhile True:\n    a.append(bytearray(1 << 20))\n";

/// Forks children that sleep until the fork fails, then reports how many it made.
const FORK_BOMB: &str = r#"
import errno, os, time
n = 0
while n < 1000:
    try:
        pid = os.fork()
    except OSError as e:
        print("forks", n, errno.errorcode[e.errno], flush=True)
        break
    if pid == 0:
        time.sleep(60)
        os._exit(0)
    n += 1
else:
    print("forks", n, "never-failed", flush=True)
"#;

const SPIN: &str = "while :; do :; done";

// ---------------------------------------------------------------------------------------
// 1. Memory

#[test]
fn memory_bomb_ends_as_oom() {
    let started = Instant::now();
    let (done, v) = jail_with_verdict(
        Mode::Root,
        &["--memory", "64M"],
        &["python3", "-c", MEMORY_BOMB],
    );
    let elapsed = started.elapsed();
    assert_eq!(exit_status(&done, &v), 137, "{v}");
    assert_eq!(v["status"], "oom", "{v}");
    assert_eq!(v["signal"], 9, "{v}");
    assert!(number(&v, "oom_kills") >= 1, "{v}");
    let peak = number(&v, "memory_peak_bytes");
    assert!(
        (48 * MIB..=64 * MIB).contains(&peak),
        "memory_peak_bytes {peak} should be near the 64M limit: {v}"
    );
    assert_eq!(v["limits"]["memory_bytes"], 64 * MIB, "{v}");
    assert_eq!(v["limits"]["cgroup_enforced"], true, "{v}");
    assert_eq!(v["protections"]["cgroup"], "v1", "{v}");
    assert_one_brig_line(&done.output, &["memory", "64M"]);
    // The host is fine: the kernel stopped the bomb at once and brig returned promptly.
    assert!(elapsed < Duration::from_secs(20), "took {elapsed:?}");
}

/// On cgroup v2 memory.oom.group makes an OOM kill take the whole jail; the contract is
/// the same verdict and exit status on v1: an OOM-killed child must not leave the rest of
/// the jail running to exit 0 under an `oom` verdict.
#[test]
fn oom_kill_of_a_child_ends_the_whole_jail() {
    let script = format!(
        "python3 -c '{MEMORY_BOMB}'; echo survived $?; sleep 2; echo still running; exit 0"
    );
    let (done, v) = jail_with_verdict(Mode::Root, &["--memory", "64M"], &["sh", "-c", &script]);
    assert_eq!(v["status"], "oom", "{v}");
    // brig ends the jail on the kernel's OOM notification, sometimes before the kernel's
    // own OOM kill is counted: the counter is there, but may be 0.
    number(&v, "oom_kills");
    assert_eq!(
        exit_status(&done, &v),
        137,
        "an oom verdict should come with exit 137 (the whole jail killed); {v}\n{}",
        describe(&done.output)
    );
    assert!(
        !stdout(&done.output).contains("still running"),
        "the jail kept running after the OOM kill: {}",
        describe(&done.output)
    );
}

// ---------------------------------------------------------------------------------------
// 2. Processes

#[test]
fn fork_bomb_stops_at_pids() {
    let pids = 16;
    let started = Instant::now();
    let (done, v) = jail_with_verdict(
        Mode::Root,
        &["--pids", &pids.to_string()],
        &["python3", "-c", FORK_BOMB],
    );
    assert_eq!(exit_status(&done, &v), 0, "{v}");
    // The jail's init and the program count too: N - 2 forks succeed, then EAGAIN.
    let out = stdout(&done.output);
    assert_eq!(field(&out, "forks"), format!("{} EAGAIN", pids - 2), "{v}");
    assert_eq!(v["pids_peak"], pids, "{v}");
    assert_eq!(v["limits"]["pids"], pids, "{v}");
    // The sleeping children die with the jail as soon as the program exits.
    assert!(started.elapsed() < Duration::from_secs(20));
}

#[test]
fn cpus_limit_cpu_bandwidth() {
    let script = "import time\n\
                  wall, cpu = time.monotonic(), time.process_time()\n\
                  while time.monotonic() - wall < 2: pass\n\
                  print('cpu', round(time.process_time() - cpu, 3))\n";
    let (done, v) = jail_with_verdict(Mode::Root, &["--cpus", "0.25"], &["python3", "-c", script]);
    assert_eq!(exit_status(&done, &v), 0);
    let cpu: f64 = field(&stdout(&done.output), "cpu").parse().unwrap();
    // A quarter CPU for 2 s is 0.5 s; allow for the period boundaries.
    assert!(cpu < 0.8, "used {cpu} s of CPU in 2 s at --cpus 0.25: {v}");
    assert_eq!(v["limits"]["cpus"], 0.25, "{v}");
}

// ---------------------------------------------------------------------------------------
// 3. CPU time

fn cpu_spin_ends_at_cpu_time(mode: Mode) {
    let started = Instant::now();
    let (done, v) = jail_with_verdict(
        mode,
        &["--cpu-time", "1s", "--time-limit", "30s"],
        &["sh", "-c", SPIN],
    );
    let elapsed = started.elapsed();
    assert_eq!(exit_status(&done, &v), 152, "{v}");
    assert_eq!(v["status"], "cpu_time", "{v}");
    assert_eq!(v["signal"], libc::SIGXCPU, "{v}");
    assert_eq!(v["exit_code"], Value::Null, "{v}");
    // RLIMIT_CPU is checked on the scheduler tick (CONFIG_HZ=250 here), and user and system
    // time are sampled from ticks too: the kill may come a tick or so before 1000 ms.
    let cpu = number(&v, "cpu_user_ms") + number(&v, "cpu_sys_ms");
    assert!(
        (900..5000).contains(&cpu),
        "{cpu} ms of CPU at --cpu-time 1s: {v}"
    );
    assert!(elapsed < Duration::from_secs(10), "took {elapsed:?}: {v}");
    assert_eq!(v["limits"]["cpu_time_ms"], 1000, "{v}");
    let rlimits = v["limits"]["rlimits"].as_array().unwrap();
    assert!(
        rlimits
            .iter()
            .any(|r| r["name"] == "cpu" && r["soft"] == 1 && r["hard"] == 2),
        "RLIMIT_CPU soft 1, hard 2: {v}"
    );
    assert_one_brig_line(&done.output, &["CPU time"]);

    // A program that ignores SIGXCPU gets SIGKILL at the hard limit: still cpu_time.
    let (done, v) = jail_with_verdict(
        mode,
        &["--cpu-time", "1s", "--time-limit", "30s"],
        &["sh", "-c", &format!("trap '' XCPU; {SPIN}")],
    );
    assert_eq!(exit_status(&done, &v), 137, "{v}");
    assert_eq!(v["status"], "cpu_time", "{v}");
    assert_eq!(v["signal"], 9, "{v}");
}

/// RLIMIT_CPU is per process: children that each stay under it do not hit it, even when
/// they add up to more. A program that then kills itself with SIGKILL was `signaled`.
fn cpu_time_status_only_when_the_cpu_limit_fired(mode: Mode) {
    let script = r#"
import os, time
for _ in range(3):
    if os.fork() == 0:
        start = time.process_time()
        while time.process_time() - start < 0.6:
            pass
        os._exit(0)
for _ in range(3):
    os.wait()
os.kill(os.getpid(), 9)
"#;
    let (done, v) = jail_with_verdict(
        mode,
        &["--cpu-time", "1s", "--time-limit", "30s"],
        &["python3", "-c", script],
    );
    assert_eq!(exit_status(&done, &v), 137, "{v}");
    assert_eq!(v["signal"], 9, "{v}");
    assert_eq!(
        v["status"], "signaled",
        "no process reached the 1 s CPU limit (3 x 0.6 s); the program killed itself: {v}"
    );
}

/// The verdict's CPU time counts what the jail used even when brig had to kill it.
fn cpu_used_by_a_killed_jail_is_reported(mode: Mode) {
    let (done, v) = jail_with_verdict(mode, &["--time-limit", "1500ms"], &["sh", "-c", SPIN]);
    assert_eq!(exit_status(&done, &v), 124, "{v}");
    assert_eq!(v["status"], "timeout", "{v}");
    let cpu = number(&v, "cpu_user_ms") + number(&v, "cpu_sys_ms");
    assert!(
        cpu >= 500,
        "the program spun for 1.5 s but the verdict reports {cpu} ms of CPU: {v}"
    );
}

// ---------------------------------------------------------------------------------------
// 4. Wall time

fn sleep_ends_at_time_limit(mode: Mode) {
    let started = Instant::now();
    let (done, v) = jail_with_verdict(mode, &["--time-limit", "1s"], &["sleep", "1000"]);
    let elapsed = started.elapsed();
    assert_eq!(exit_status(&done, &v), 124, "{v}");
    assert_eq!(v["status"], "timeout", "{v}");
    assert_eq!(v["exit_code"], Value::Null, "{v}");
    assert_eq!(v["limits"]["time_limit_ms"], 1000, "{v}");
    let wall = number(&v, "wall_ms");
    assert!((1000..3000).contains(&wall), "wall_ms {wall}: {v}");
    assert!(elapsed < Duration::from_secs(5), "took {elapsed:?}");
    assert_one_brig_line(&done.output, &["time limit"]);
}

// ---------------------------------------------------------------------------------------
// 5. Disk

fn disk_fill_stops_at_the_tmpfs_size(mode: Mode) {
    // A program that handles ENOSPC ends as it likes: here, ok.
    let script = r#"
import errno, os
written = 0
try:
    with open("/tmp/fill", "wb") as f:
        while True:
            f.write(b"x" * 65536)
            f.flush()
            written += 65536
except OSError as e:
    print("error", errno.errorcode[e.errno])
print("written", written)
print("size", os.stat("/tmp/fill").st_size)
"#;
    let (done, v) = jail_with_verdict(mode, &["--tmpfs-size", "2M"], &["python3", "-c", script]);
    assert_eq!(exit_status(&done, &v), 0, "{v}");
    assert_eq!(v["status"], "ok", "{v}");
    let out = stdout(&done.output);
    assert_eq!(field(&out, "error"), "ENOSPC", "{out}");
    let size: u64 = field(&out, "size").parse().unwrap();
    assert!(
        (MIB..=2 * MIB).contains(&size),
        "/tmp held {size} bytes at --tmpfs-size 2M"
    );
    assert_eq!(v["limits"]["tmpfs_size_bytes"], 2 * MIB, "{v}");

    // A program that does not: a failed write is its own nonzero exit.
    let (done, v) = jail_with_verdict(
        mode,
        &["--tmpfs-size", "2M"],
        &["sh", "-c", "head -c 10485760 /dev/zero > /tmp/fill"],
    );
    assert_eq!(exit_status(&done, &v), 1, "{v}");
    assert_eq!(v["status"], "nonzero_exit", "{v}");
    assert_eq!(v["exit_code"], 1, "{v}");
    assert!(
        stderr(&done.output).contains("No space left on device"),
        "{}",
        describe(&done.output)
    );
}

// ---------------------------------------------------------------------------------------
// 6. Output

/// Runs `command` to completion and also returns its peak RSS in KiB (from wait4, so the
/// largest of brig and the processes it reaped: an upper bound for brig's own).
#[allow(clippy::zombie_processes)] // the child is reaped with wait4, for its rusage
fn run_measuring_rss(mut command: Command) -> (Done, u64) {
    command.stdout(Stdio::piped()).stderr(Stdio::piped());
    let mut child = command
        .spawn()
        .unwrap_or_else(|err| panic!("spawn {command:?}: {err}"));
    let pid = child.id();
    let watchdog = Watchdog::new(pid, RUN_TIMEOUT);
    let read = |pipe: Option<Box<dyn std::io::Read + Send>>| {
        std::thread::spawn(move || {
            let mut bytes = Vec::new();
            if let Some(mut pipe) = pipe {
                let _ = pipe.read_to_end(&mut bytes);
            }
            bytes
        })
    };
    let stdout = read(child.stdout.take().map(|p| Box::new(p) as _));
    let stderr = read(child.stderr.take().map(|p| Box::new(p) as _));
    let mut status = 0;
    // SAFETY: an all-zero rusage is a valid value for wait4 to overwrite.
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    loop {
        // SAFETY: status and usage are valid for writes; pid is our own child.
        let reaped = unsafe { libc::wait4(pid as libc::pid_t, &mut status, 0, &mut usage) };
        if reaped == pid as libc::pid_t {
            break;
        }
        let err = std::io::Error::last_os_error();
        assert_eq!(err.kind(), std::io::ErrorKind::Interrupted, "wait4: {err}");
    }
    drop(watchdog);
    let output = Output {
        status: ExitStatus::from_raw(status),
        stdout: stdout.join().unwrap(),
        stderr: stderr.join().unwrap(),
    };
    assert_no_jail_cgroups(pid);
    (Done { output }, usage.ru_maxrss.max(0) as u64)
}

fn output_flood_is_cut_at_the_output_limit(mode: Mode) {
    let dir = TempDir::new("flood").writable_by_all();
    let report = dir.path().join("verdict.json");
    let started = Instant::now();
    let (done, max_rss_kib) = run_measuring_rss(command(
        mode,
        &[
            "run",
            "--report",
            report.to_str().unwrap(),
            "--output-limit",
            "1M",
            "--",
            "head",
            "-c",
            "1073741824",
            "/dev/zero",
        ],
    ));
    let elapsed = started.elapsed();
    let v = read_verdict(&report, &done.output);
    assert_eq!(exit_status(&done, &v), 124, "{v}");
    assert_eq!(v["status"], "output_limit", "{v}");
    assert_eq!(v["output_truncated"], true, "{v}");
    assert_eq!(
        done.output.stdout.len() as u64,
        MIB,
        "exactly 1 MiB should reach brig's stdout: {v}"
    );
    assert!(done.output.stdout.iter().all(|&byte| byte == 0));
    assert!(number(&v, "stdout_bytes") > MIB, "{v}");
    assert_eq!(v["stderr_bytes"], 0, "{v}");
    assert_eq!(v["limits"]["output_limit_bytes"], MIB, "{v}");
    assert_one_brig_line(&done.output, &["output limit"]);
    // brig relays through a fixed buffer, and kills the flood at once.
    assert!(
        max_rss_kib < 16 * 1024,
        "brig's peak RSS was {max_rss_kib} KiB relaying a 1 GiB flood"
    );
    assert!(elapsed < Duration::from_secs(10), "took {elapsed:?}");

    // Exactly the limit is not over it; and small output is counted per stream.
    let (done, v) = jail_with_verdict(
        mode,
        &["--output-limit", "1M"],
        &["head", "-c", "1048576", "/dev/zero"],
    );
    assert_eq!(exit_status(&done, &v), 0, "{v}");
    assert_eq!(v["status"], "ok", "{v}");
    assert_eq!(v["output_truncated"], false, "{v}");
    assert_eq!(v["stdout_bytes"], MIB, "{v}");
    assert_eq!(done.output.stdout.len() as u64, MIB);
    let (done, v) = jail_with_verdict(
        mode,
        &["--output-limit", "1M"],
        &["sh", "-c", "echo out; echo error >&2"],
    );
    assert_eq!(exit_status(&done, &v), 0, "{v}");
    assert_eq!(
        (&v["stdout_bytes"], &v["stderr_bytes"]),
        (&4.into(), &6.into())
    );
    assert_eq!(stdout(&done.output), "out\n");
    assert_eq!(stderr(&done.output), "error\n");
}

fn output_limit_counts_both_streams_together(mode: Mode) {
    let (done, v) = jail_with_verdict(
        mode,
        &["--output-limit", "1M"],
        &[
            "sh",
            "-c",
            "head -c 700000 /dev/zero; head -c 700000 /dev/zero >&2",
        ],
    );
    assert_eq!(exit_status(&done, &v), 124, "{v}");
    assert_eq!(v["status"], "output_limit", "{v}");
    assert_eq!(done.output.stdout.len(), 700_000);
    // stderr: the program's share of the limit, then brig's own line.
    let err = &done.output.stderr;
    let program_part = err.iter().take_while(|&&byte| byte == 0).count();
    assert_eq!(
        700_000 + program_part as u64,
        MIB,
        "stdout and stderr together should be cut at 1 MiB"
    );
    let brig_line = String::from_utf8_lossy(&err[program_part..]);
    assert!(brig_line.contains("output limit"), "{brig_line:?}");
    assert_eq!(v["stdout_bytes"], 700_000, "{v}");
    assert!(number(&v, "stderr_bytes") > MIB - 700_000, "{v}");
}

fn output_without_a_limit_passes_fully(mode: Mode) {
    let size = 100 * MIB;
    let (done, v) = jail_with_verdict(mode, &[], &["head", "-c", &size.to_string(), "/dev/zero"]);
    assert_eq!(exit_status(&done, &v), 0, "{v}");
    assert_eq!(done.output.stdout.len() as u64, size);
    assert_eq!(v["status"], "ok", "{v}");
    assert_eq!(v["stdout_bytes"], Value::Null, "{v}");
    assert_eq!(v["stderr_bytes"], Value::Null, "{v}");
    assert_eq!(v["output_truncated"], false, "{v}");
    assert_eq!(v["limits"]["output_limit_bytes"], Value::Null, "{v}");
}

// ---------------------------------------------------------------------------------------
// 7. Daemons

fn setsid_daemon_does_not_survive(mode: Mode) {
    let name = unique("brig-daemon");
    // Double fork plus setsid: the daemon is reparented to the jail's init.
    let script = format!("(setsid bash -c 'exec -a {name} sleep 1000' &); read line; exit 0");
    let mut brig = command(mode, &["run", "--", "sh", "-c", &script]);
    brig.stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let mut running = Running::spawn(brig);
    let brig_pid = running.pid();
    assert!(
        wait_until(Duration::from_secs(10), || !processes_named(&name)
            .is_empty()),
        "the daemon never started"
    );
    let daemon = processes_named(&name)[0];
    if mode == Mode::Root {
        // The daemon sits in the jail's cgroups, like everything else in the jail.
        let cgroups = std::fs::read_to_string(format!("/proc/{daemon}/cgroup")).unwrap();
        for controller in ["memory", "pids"] {
            let wanted = format!(":{controller}:/brig/jail-{brig_pid}-");
            assert!(cgroups.contains(&wanted), "{wanted} in\n{cgroups}");
        }
    }
    let mut stdin = running.child.stdin.take().unwrap();
    stdin.write_all(b"go\n").unwrap();
    drop(stdin);
    let done = finish(running);
    assert_code(&done.output, 0);
    assert_eq!(
        processes_named(&name),
        Vec::<u32>::new(),
        "the daemon outlived the jail"
    );
}

// ---------------------------------------------------------------------------------------
// 8. The verdict

/// One status and what its verdict must say.
struct Case<'a> {
    args: &'a [&'a str],
    program: &'a [&'a str],
    status: &'a str,
    code: i32,
    exit_code: Value,
    signal: Option<i32>,
    /// A line from brig on stderr (with this text), or none at all.
    brig_says: Option<&'a str>,
}

fn verdict_fields_for_each_status(mode: Mode) {
    let bomb = ["python3", "-c", MEMORY_BOMB];
    let mut cases = vec![
        Case {
            args: &[],
            program: &["true"],
            status: "ok",
            code: 0,
            exit_code: 0.into(),
            signal: None,
            brig_says: None,
        },
        Case {
            args: &[],
            program: &["sh", "-c", "exit 3"],
            status: "nonzero_exit",
            code: 3,
            exit_code: 3.into(),
            signal: None,
            brig_says: None,
        },
        Case {
            args: &[],
            program: &["sh", "-c", "kill -SEGV $$"],
            status: "signaled",
            code: 139,
            exit_code: Value::Null,
            signal: Some(11),
            brig_says: None,
        },
        Case {
            args: &["--time-limit", "1s"],
            program: &["sleep", "1000"],
            status: "timeout",
            code: 124,
            exit_code: Value::Null,
            signal: None,
            brig_says: Some("time limit"),
        },
        Case {
            args: &["--cpu-time", "1s", "--time-limit", "30s"],
            program: &["sh", "-c", SPIN],
            status: "cpu_time",
            code: 152,
            exit_code: Value::Null,
            signal: Some(libc::SIGXCPU),
            brig_says: Some("CPU time"),
        },
        Case {
            args: &["--output-limit", "1K"],
            program: &["head", "-c", "1048576", "/dev/zero"],
            status: "output_limit",
            code: 124,
            exit_code: Value::Null,
            signal: None,
            brig_says: Some("output limit"),
        },
        Case {
            args: &[],
            program: &["no-such-program-brig-test"],
            status: "setup_error",
            code: 127,
            exit_code: Value::Null,
            signal: None,
            brig_says: Some("no-such-program-brig-test"),
        },
        Case {
            args: &[],
            program: &["/etc/hostname"],
            status: "setup_error",
            code: 126,
            exit_code: Value::Null,
            signal: None,
            brig_says: Some("/etc/hostname"),
        },
        Case {
            args: &["--ro-bind", "/no/such/brig-test-source"],
            program: &["true"],
            status: "setup_error",
            code: 125,
            exit_code: Value::Null,
            signal: None,
            brig_says: Some("/no/such/brig-test-source"),
        },
    ];
    if mode == Mode::Root {
        cases.push(Case {
            args: &["--memory", "32M"],
            program: &bomb,
            status: "oom",
            code: 137,
            exit_code: Value::Null,
            signal: Some(9),
            brig_says: Some("memory"),
        });
    }
    for case in cases {
        let (done, v) = jail_with_verdict(mode, case.args, case.program);
        let what = format!("{:?} {:?}: {v}", case.args, case.program);
        assert_eq!(v["status"], case.status, "{what}");
        assert_eq!(exit_status(&done, &v), case.code, "{what}");
        assert_eq!(v["exit_code"], case.exit_code, "{what}");
        if let Some(signal) = case.signal {
            assert_eq!(v["signal"], signal, "{what}");
        }
        match case.brig_says {
            Some(needle) => assert_one_brig_line(&done.output, &[needle]),
            None => assert_eq!(stderr(&done.output), "", "{what}"),
        }
        if case.status == "setup_error" {
            let error = v["error"].as_str().unwrap_or_else(|| panic!("{what}"));
            assert!(error.contains(case.brig_says.unwrap()), "{what}");
            continue;
        }
        assert_eq!(v["error"], Value::Null, "{what}");
        let limits = &v["limits"];
        let protections = &v["protections"];
        assert_eq!(protections["rootless"], mode == Mode::Rootless, "{what}");
        assert_eq!(protections["capabilities"], "none", "{what}");
        assert_eq!(protections["no_new_privs"], true, "{what}");
        assert_eq!(protections["net"], "none", "{what}");
        let namespaces: Vec<&str> = protections["namespaces"]
            .as_array()
            .unwrap()
            .iter()
            .filter_map(Value::as_str)
            .collect();
        for namespace in ["user", "mount", "pid", "net", "ipc", "uts", "cgroup"] {
            assert!(namespaces.contains(&namespace), "{namespace}: {what}");
        }
        match mode {
            Mode::Root => {
                assert_eq!(protections["cgroup"], "v1", "{what}");
                assert_eq!(limits["cgroup_enforced"], true, "{what}");
                assert_eq!(v["warnings"], Value::Array(vec![]), "{what}");
                assert!(v["memory_peak_bytes"].is_u64(), "{what}");
                assert!(number(&v, "pids_peak") >= 2, "{what}");
                assert!(v["oom_kills"].is_u64(), "{what}");
            }
            Mode::Rootless => {
                assert_eq!(protections["cgroup"], Value::Null, "{what}");
                assert_eq!(limits["cgroup_enforced"], false, "{what}");
                assert_eq!(v["memory_peak_bytes"], Value::Null, "{what}");
                assert_eq!(v["pids_peak"], Value::Null, "{what}");
                let warnings = v["warnings"].to_string();
                assert!(warnings.contains("not enforced"), "{what}");
            }
        }
        if case.status != "output_limit" {
            assert_eq!(v["stdout_bytes"], Value::Null, "{what}");
            assert_eq!(v["output_truncated"], false, "{what}");
        }
        assert!(number(&v, "max_rss_kib") > 0, "{what}");
    }
}

fn report_fd_receives_the_verdict(mode: Mode) {
    let dir = TempDir::new("report-fd");
    let report = dir.path().join("verdict.json");
    // The launcher opens fd 3 on the file and execs brig (so brig keeps the pid).
    let mut launcher: Vec<std::ffi::OsString> = vec![
        "sh".into(),
        "-c".into(),
        "exec \"$@\" 3>\"$REPORT\"".into(),
        "sh".into(),
    ];
    let program = "if [ -e /proc/self/fd/3 ]; then echo fd3 open; else echo fd3 closed; fi; exit 4";
    launcher.extend(argv(
        mode,
        &["run", "--report-fd", "3", "--", "sh", "-c", program],
    ));
    let mut brig = command_from(&launcher);
    brig.env("REPORT", &report)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let done = finish(Running::spawn(brig));
    let v = read_verdict(&report, &done.output);
    assert_eq!(exit_status(&done, &v), 4, "{v}");
    assert_eq!(v["status"], "nonzero_exit", "{v}");
    assert_eq!(
        stdout(&done.output),
        "fd3 closed\n",
        "the verdict's descriptor must not reach the jail"
    );

    // A descriptor that is not open: brig says so once, and runs nothing.
    let output = jail(
        mode,
        &["run", "--report-fd", "7", "--", "sh", "-c", "echo ran"],
    )
    .output;
    assert_one_line_error(&output, &["--report-fd 7"]);
}

fn setup_errors_write_a_verdict(mode: Mode) {
    let dir = TempDir::new("setup-error").writable_by_all();
    let report = dir.path().join("verdict.json");
    let report = report.to_str().unwrap();
    for (args, needle) in [
        (&["--memory", "1M"][..], "--memory"),
        (&["--pids", "0"][..], "--pids"),
        (&["--pids", "1"][..], "--pids 1"),
        (&["--cpu-time", "0s"][..], "--cpu-time"),
        (&["--rlimit", "nofile=x"][..], "--rlimit"),
        (&["--ro-bind", "/no/such/brig-test-source"][..], "/no/such"),
        (
            &["--rlimit", "nofile=999999999"][..],
            "--rlimit nofile=999999999",
        ),
    ] {
        let _ = std::fs::remove_file(report);
        let mut all = vec!["run", "--report", report];
        all.extend_from_slice(args);
        let output = jail(mode, &with_program(&all, &["sh", "-c", "echo ran"])).output;
        let line = assert_one_line_error(&output, &[needle]);
        let v = read_verdict(Path::new(report), &output);
        assert_eq!(v["status"], "setup_error", "{args:?}: {v}");
        assert_eq!(v["brig_exit_code"], 125, "{args:?}: {v}");
        let error = v["error"].as_str().unwrap_or_else(|| panic!("{v}"));
        assert!(error.contains(needle), "{args:?}: {v}");
        assert!(
            line.contains(error),
            "the verdict's error is the line: {line} / {v}"
        );
    }
}

// ---------------------------------------------------------------------------------------
// 9. The audit log

/// Days since 1970-01-01 of a civil date (Howard Hinnant's algorithm).
fn days_from_civil(year: i64, month: i64, day: i64) -> i64 {
    let year = if month <= 2 { year - 1 } else { year };
    let era = year.div_euclid(400);
    let yoe = year - era * 400;
    let doy = (153 * (month + if month > 2 { -3 } else { 9 }) + 2) / 5 + day - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

/// Seconds since the epoch of an RFC 3339 UTC time like 2025-01-31T12:34:56.789Z.
fn parse_rfc3339_utc(text: &str) -> Option<i64> {
    let bytes = text.as_bytes();
    let shape_ok = bytes.len() >= 20
        && text.ends_with('Z')
        && bytes[4] == b'-'
        && bytes[7] == b'-'
        && bytes[10] == b'T'
        && bytes[13] == b':'
        && bytes[16] == b':';
    if !shape_ok {
        return None;
    }
    let number = |range: std::ops::Range<usize>| text.get(range)?.parse::<i64>().ok();
    let (year, month, day) = (number(0..4)?, number(5..7)?, number(8..10)?);
    let (hour, minute, second) = (number(11..13)?, number(14..16)?, number(17..19)?);
    if !(1..=12).contains(&month) || !(1..=31).contains(&day) || hour > 23 || minute > 59 {
        return None;
    }
    Some(days_from_civil(year, month, day) * 86_400 + hour * 3600 + minute * 60 + second)
}

fn concurrent_audit_log_lines_stay_whole(mode: Mode) {
    let dir = TempDir::new("audit").writable_by_all();
    let log = dir.path().join("audit.log");
    let log_str = log.to_str().unwrap().to_string();
    // Long lines make torn appends likelier to show.
    let padding = "p".repeat(32 * 1024);
    let runs = 20;
    let jails: Vec<Running> = (0..runs)
        .map(|index| {
            let script = format!("exit {index}");
            let mut brig = command(
                mode,
                &[
                    "run",
                    "--audit-log",
                    &log_str,
                    "--",
                    "sh",
                    "-c",
                    &script,
                    &padding,
                ],
            );
            brig.stdout(Stdio::piped()).stderr(Stdio::piped());
            Running::spawn(brig)
        })
        .collect();
    for (index, running) in jails.into_iter().enumerate() {
        let done = finish(running);
        assert_code(&done.output, index as i32);
    }
    let text = std::fs::read_to_string(&log).unwrap();
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines.len(), runs, "one line per run");
    assert!(text.ends_with('\n'));
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs() as i64;
    let mut codes = BTreeSet::new();
    for line in lines {
        let entry: Value =
            serde_json::from_str(line).unwrap_or_else(|err| panic!("not JSON ({err}): {line}"));
        assert_eq!(
            keys(&entry),
            key_set(&["time", "uid", "argv", "config_digest", "verdict"]),
            "{entry}"
        );
        let time = entry["time"].as_str().unwrap();
        let seconds = parse_rfc3339_utc(time).unwrap_or_else(|| panic!("not RFC 3339: {time}"));
        assert!((seconds - now).abs() < 600, "{time} is not now");
        let uid = match mode {
            Mode::Root => 0,
            Mode::Rootless => NOBODY,
        };
        assert_eq!(entry["uid"], uid, "{entry}");
        let argv: Vec<&str> = entry["argv"]
            .as_array()
            .unwrap()
            .iter()
            .map(|arg| arg.as_str().unwrap())
            .collect();
        assert!(argv[0].ends_with("brig") && argv[1] == "run", "{argv:?}");
        assert_eq!(argv.last(), Some(&padding.as_str()), "argv is whole");
        let digest = entry["config_digest"].as_str().unwrap();
        let hex = digest.strip_prefix("sha256:").unwrap_or("");
        assert!(
            hex.len() == 64 && hex.bytes().all(|b| b.is_ascii_hexdigit()),
            "{digest}"
        );
        assert_verdict_shape(&entry["verdict"]);
        codes.insert(number(&entry["verdict"], "brig_exit_code"));
    }
    assert_eq!(codes, (0..runs as u64).collect(), "every run's own verdict");

    // A run that fails before it has a plan is logged too, without a digest.
    let done = jail(
        mode,
        &[
            "run",
            "--audit-log",
            &log_str,
            "--ro-bind",
            "/no/such/brig-test-source",
            "--",
            "true",
        ],
    );
    assert_one_line_error(&done.output, &["/no/such/brig-test-source"]);
    let text = std::fs::read_to_string(&log).unwrap();
    let last: Value = serde_json::from_str(text.lines().last().unwrap()).unwrap();
    assert_eq!(text.lines().count(), runs + 1);
    assert_eq!(last["verdict"]["status"], "setup_error", "{last}");
    assert_eq!(last["config_digest"], Value::Null, "{last}");
}

// ---------------------------------------------------------------------------------------
// 10. Many jails at once

#[test]
fn fifty_concurrent_jails_get_their_own_cgroups() {
    let sync = TempDir::new("sync");
    let reports = TempDir::new("reports");
    let bind = format!("{}:/sync", sync.str());
    let count = 50;
    let jails: Vec<Running> = (0..count)
        .map(|index| {
            let report = reports.path().join(format!("{index}.json"));
            let pids = (100 + index).to_string();
            let mut brig = command(
                Mode::Root,
                &[
                    "run",
                    "--ro-bind",
                    &bind,
                    "--pids",
                    &pids,
                    "--time-limit",
                    "50s",
                    "--report",
                    report.to_str().unwrap(),
                    "--",
                    "sh",
                    "-c",
                    "while [ ! -e /sync/go ]; do sleep 0.05; done",
                ],
            );
            brig.stdout(Stdio::piped()).stderr(Stdio::piped());
            Running::spawn(brig)
        })
        .collect();
    let pids: Vec<u32> = jails.iter().map(Running::pid).collect();
    let all_up = wait_until(Duration::from_secs(40), || {
        pids.iter().all(|&pid| {
            v1_jail_cgroup("pids", pid).is_some_and(|dir| {
                std::fs::read_to_string(dir.join("cgroup.procs"))
                    .is_ok_and(|procs| procs.lines().count() >= 2)
            })
        })
    });
    assert!(all_up, "not every jail got its cgroup with its processes");
    let mut seen = BTreeSet::new();
    for (index, &pid) in pids.iter().enumerate() {
        let dir = v1_jail_cgroup("pids", pid).unwrap();
        assert!(seen.insert(dir.clone()), "{} shared", dir.display());
        assert_eq!(
            read_trimmed(&dir.join("pids.max")),
            (100 + index).to_string()
        );
        let memory = v1_jail_cgroup("memory", pid).expect("a memory cgroup too");
        assert_eq!(
            read_trimmed(&memory.join("memory.limit_in_bytes")),
            "1073741824"
        );
    }
    std::fs::write(sync.path().join("go"), "").unwrap();
    for (index, running) in jails.into_iter().enumerate() {
        let done = finish(running);
        let report = reports.path().join(format!("{index}.json"));
        let v = read_verdict(&report, &done.output);
        assert_eq!(exit_status(&done, &v), 0, "{v}");
        assert_eq!(v["protections"]["cgroup"], "v1", "{v}");
        assert_eq!(v["limits"]["pids"], 100 + index, "{v}");
    }
    for pid in pids {
        assert_no_jail_cgroups(pid);
    }
}

/// A brig that is SIGKILLed cannot remove its jail's cgroups; the next brig does.
#[test]
fn cgroups_of_a_killed_brig_are_removed_by_the_next_run() {
    let mut brig = command(Mode::Root, &["run", "--", "sleep", "1000"]);
    brig.stdout(Stdio::null()).stderr(Stdio::null());
    let mut running = Running::spawn(brig);
    let pid = running.pid();
    assert!(
        wait_until(Duration::from_secs(10), || jail_cgroups_of(pid).len() >= 2),
        "the jail never got its cgroups"
    );
    let dirs = jail_cgroups_of(pid);
    kill(pid, libc::SIGKILL);
    running.child.wait().unwrap();
    // The jail dies with brig (parent-death signal); its cgroups stay until a later brig
    // removes them (any brig: the tests run in parallel).
    let procs = |dir: &PathBuf| std::fs::read_to_string(dir.join("cgroup.procs"));
    let gone_or_empty = |dir: &PathBuf| match procs(dir) {
        Ok(text) => text.is_empty(),
        Err(err) => err.kind() == std::io::ErrorKind::NotFound,
    };
    assert!(
        wait_until(Duration::from_secs(5), || dirs.iter().all(gone_or_empty)),
        "the jail outlived brig: {:?}",
        dirs.iter().map(|dir| (dir, procs(dir))).collect::<Vec<_>>()
    );
    let done = jail(Mode::Root, &["run", "--", "true"]);
    assert_code(&done.output, 0);
    assert!(
        wait_until(Duration::from_secs(5), || jail_cgroups_of(pid).is_empty()),
        "still there after the next run: {:?}",
        jail_cgroups_of(pid)
    );
}

// ---------------------------------------------------------------------------------------
// 11. No usable cgroup: fail closed

const DELEGATION_HINTS: [&str; 3] = ["Delegate=yes", "--cgroup-parent", "systemd-run"];

#[test]
fn rootless_explicit_cgroup_limits_fail_closed() {
    for args in [
        &["--memory", "100M"][..],
        &["--pids", "10"][..],
        &["--cpus", "1"][..],
    ] {
        let mut all = vec!["run"];
        all.extend_from_slice(args);
        let output = jail(
            Mode::Rootless,
            &with_program(&all, &["sh", "-c", "echo ran"]),
        )
        .output;
        assert_one_line_error(&output, &DELEGATION_HINTS);
    }
}

#[test]
fn rootless_default_limits_run_unenforced_with_a_warning() {
    let (done, v) = jail_with_verdict(Mode::Rootless, &[], &["sh", "-c", "echo ran"]);
    assert_eq!(exit_status(&done, &v), 0, "{v}");
    assert_eq!(stdout(&done.output), "ran\n");
    assert_eq!(v["status"], "ok", "{v}");
    assert_eq!(v["limits"]["cgroup_enforced"], false, "{v}");
    assert_eq!(v["limits"]["memory_bytes"], 1 << 30, "{v}");
    assert_eq!(v["limits"]["pids"], 256, "{v}");
    assert_eq!(v["protections"]["cgroup"], Value::Null, "{v}");
    let warnings = v["warnings"].as_array().unwrap();
    assert_eq!(warnings.len(), 1, "{v}");
    assert!(
        warnings[0].as_str().unwrap().contains("not enforced"),
        "{v}"
    );
}

/// brig's hints send the user to `brig doctor`; that command has to exist.
#[test]
fn the_suggested_brig_doctor_exists() {
    let output = jail(Mode::Rootless, &["run", "--memory", "100M", "--", "true"]).output;
    if stderr(&output).contains("brig doctor") {
        let doctor = jail(Mode::Root, &["doctor", "--help"]).output;
        assert_success(&doctor);
    }
}

fn missing_cgroup_parent_is_rejected(mode: Mode) {
    for parent in [
        "/nonexistent-brig-test",
        "/sys/fs/cgroup/pids/nonexistent-brig-test",
    ] {
        let output = jail(
            mode,
            &[
                "run",
                "--cgroup-parent",
                parent,
                "--",
                "sh",
                "-c",
                "echo ran",
            ],
        )
        .output;
        assert_one_line_error(&output, &["--cgroup-parent"]);
    }
}

/// `--cgroup-parent` naming an existing cgroup (here the `brig` subtree itself, which
/// brig creates) puts the jail there, with the limits.
#[test]
fn cgroup_parent_places_the_jail() {
    // The operator's delegated subtree: this test's own cgroup in each v1 hierarchy
    // brig uses, removed again at the end (brig leaves a given parent alone).
    let name = format!("brigtest-parent-{}", std::process::id());
    let parents: Vec<PathBuf> = ["pids", "memory", "cpuacct"]
        .iter()
        .map(|hierarchy| Path::new("/sys/fs/cgroup").join(hierarchy).join(&name))
        .collect();
    for parent in &parents {
        std::fs::create_dir(parent).expect("create the test's parent cgroup");
    }
    struct RemoveParents(Vec<PathBuf>);
    impl Drop for RemoveParents {
        fn drop(&mut self) {
            for parent in &self.0 {
                let _ = std::fs::remove_dir(parent);
            }
        }
    }
    let _cleanup = RemoveParents(parents.clone());
    let given = format!("/{name}");
    let mut brig = command(
        Mode::Root,
        &[
            "run",
            "--cgroup-parent",
            &given,
            "--memory",
            "40M",
            "--pids",
            "20",
            "--",
            "sh",
            "-c",
            "read line; exit 0",
        ],
    );
    brig.stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let mut running = Running::spawn(brig);
    let pid = running.pid();
    assert!(
        wait_until(Duration::from_secs(10), || {
            v1_jail_cgroup_in("pids", &name, pid).is_some()
                && v1_jail_cgroup_in("memory", &name, pid).is_some()
        }),
        "no jail cgroup under the given parent"
    );
    let pids_dir = v1_jail_cgroup_in("pids", &name, pid).unwrap();
    let memory_dir = v1_jail_cgroup_in("memory", &name, pid).unwrap();
    assert_eq!(read_trimmed(&pids_dir.join("pids.max")), "20");
    assert_eq!(
        read_trimmed(&memory_dir.join("memory.limit_in_bytes")),
        (40 * MIB).to_string()
    );
    assert!(pids_dir.starts_with(&parents[0]), "{}", pids_dir.display());
    drop(running.child.stdin.take());
    let done = finish(running);
    assert_code(&done.output, 0);
    for parent in &parents {
        assert!(
            parent.is_dir(),
            "brig removed the given parent {}",
            parent.display()
        );
    }
}

// ---------------------------------------------------------------------------------------
// 12. rlimits

/// Prints `NAME soft hard` for some resources, -1 for unlimited.
const SHOW_RLIMITS: &str = r#"
import resource
for name in ["CORE", "NOFILE", "FSIZE", "STACK", "CPU"]:
    soft, hard = resource.getrlimit(getattr(resource, "RLIMIT_" + name))
    print(name.lower(), soft, hard)
"#;

fn rlimits_reach_the_program(mode: Mode) {
    let infinity = "-1";
    // The defaults.
    let out = assert_success(&jail(mode, &["run", "--", "python3", "-c", SHOW_RLIMITS]).output);
    assert_eq!(field(&out, "core"), "0 0", "{out}");
    assert_eq!(field(&out, "nofile"), "1024 1024", "{out}");
    assert_eq!(
        field(&out, "fsize"),
        format!("{0} {0}", 1u64 << 30),
        "{out}"
    );
    assert_eq!(
        field(&out, "cpu"),
        format!("{infinity} {infinity}"),
        "{out}"
    );

    // What the shell sees.
    let out = assert_success(
        &jail(
            mode,
            &[
                "run",
                "--rlimit",
                "nofile=64",
                "--",
                "sh",
                "-c",
                "ulimit -n; ulimit -c",
            ],
        )
        .output,
    );
    assert_eq!(out, "64\n0\n");

    // SOFT:HARD, sizes, unlimited; later wins over the defaults; the verdict lists them.
    let (done, v) = jail_with_verdict(
        mode,
        &[
            "--rlimit",
            "nofile=32:64",
            "--rlimit",
            "stack=16M",
            "--rlimit",
            "core=unlimited",
        ],
        &["python3", "-c", SHOW_RLIMITS],
    );
    let out = assert_success(&done.output);
    assert_eq!(field(&out, "nofile"), "32 64", "{out}");
    assert_eq!(field(&out, "stack"), format!("{0} {0}", 16 * MIB), "{out}");
    assert_eq!(
        field(&out, "core"),
        format!("{infinity} {infinity}"),
        "{out}"
    );
    let rlimits = v["limits"]["rlimits"].as_array().unwrap();
    let find = |name: &str| {
        rlimits
            .iter()
            .find(|r| r["name"] == name)
            .unwrap_or_else(|| panic!("{name} in {v}"))
    };
    assert_eq!(
        (&find("nofile")["soft"], &find("nofile")["hard"]),
        (&32.into(), &64.into())
    );
    assert_eq!(find("stack")["soft"], 16 * MIB);
    assert_eq!(find("core")["soft"], "unlimited");
    assert_eq!(find("fsize")["soft"], 1u64 << 30);

    // fsize: a write past it is SIGXFSZ.
    let (done, v) = jail_with_verdict(
        mode,
        &["--rlimit", "fsize=1M"],
        &["sh", "-c", "exec head -c 2097152 /dev/zero > /tmp/big"],
    );
    assert_eq!(exit_status(&done, &v), 128 + libc::SIGXFSZ, "{v}");
    assert_eq!(v["status"], "signaled", "{v}");
    assert_eq!(v["signal"], libc::SIGXFSZ, "{v}");

    // Above the hard limit brig runs with: brig cannot raise it.
    let output = jail(
        mode,
        &[
            "run",
            "--rlimit",
            "nofile=999999999",
            "--",
            "sh",
            "-c",
            "echo ran",
        ],
    )
    .output;
    assert_one_line_error(&output, &["--rlimit nofile", "hard limit"]);
}

fn bad_rlimits_are_rejected(mode: Mode) {
    for spec in [
        "nofile",
        "bogus=1",
        "=5",
        "nofile=",
        "nofile=x",
        "nofile=-1",
        "nofile=10:5",
        "nofile=unlimited:5",
        "nofile=1:2:3",
        "stack=12Q",
    ] {
        let output = jail(
            mode,
            &["run", "--rlimit", spec, "--", "sh", "-c", "echo ran"],
        )
        .output;
        assert_one_line_error(&output, &["--rlimit"]);
    }
}

// ---------------------------------------------------------------------------------------
// 13. YAML

fn yaml_config_sets_the_limits(mode: Mode) {
    let dir = TempDir::new("yaml").writable_by_all();
    let report = dir.path().join("verdict.json");
    let report = report.to_str().unwrap();
    // A fork loop bounded at 40, then a spin until the CPU limit.
    let script = r#"
import os, resource, time
print("nofile", *resource.getrlimit(resource.RLIMIT_NOFILE), flush=True)
n = 0
while n < 40:
    try:
        pid = os.fork()
    except OSError:
        break
    if pid == 0:
        time.sleep(60)
        os._exit(0)
    n += 1
print("forks", n, flush=True)
while True:
    pass
"#;
    let cgroup_part = "memory: 48M\npids: 12\n";
    let common_part = format!(
        "rlimit: [nofile=77, \"stack=8M\"]\n\
         output-limit: 64K\n\
         cpu-time: 1s\n\
         time-limit: 30s\n\
         tmpfs-size: 2M\n\
         report: {report}\n\
         command: [python3, -c, {script:?}]\n"
    );
    let config = dir.file("limits.yaml", &format!("{cgroup_part}{common_part}"));
    let config = config.to_str().unwrap();
    let without_cgroup = dir.file("no-cgroup.yaml", &common_part);
    let without_cgroup = without_cgroup.to_str().unwrap();

    if mode == Mode::Rootless {
        // Explicit cgroup limits from a file fail closed just like from the command line.
        let output = jail(mode, &["run", "--config", config]).output;
        assert_one_line_error(&output, &DELEGATION_HINTS);
    }
    let used = match mode {
        Mode::Root => config,
        Mode::Rootless => without_cgroup,
    };
    let done = jail(mode, &["run", "--config", used]);
    let v = read_verdict(Path::new(report), &done.output);
    assert_eq!(exit_status(&done, &v), 152, "{v}");
    assert_eq!(v["status"], "cpu_time", "{v}");
    let out = stdout(&done.output);
    assert_eq!(field(&out, "nofile"), "77 77", "{out}");
    let limits = &v["limits"];
    assert_eq!(limits["output_limit_bytes"], 64 * 1024, "{v}");
    assert_eq!(limits["cpu_time_ms"], 1000, "{v}");
    assert_eq!(limits["time_limit_ms"], 30_000, "{v}");
    assert_eq!(limits["tmpfs_size_bytes"], 2 * MIB, "{v}");
    let rlimit = |name: &str| {
        let found = limits["rlimits"].as_array().unwrap().iter();
        let mut found = found.filter(|r| r["name"] == name);
        let r = found.next().unwrap_or_else(|| panic!("{name}: {v}"));
        (r["soft"].clone(), r["hard"].clone())
    };
    assert_eq!(rlimit("nofile"), (77.into(), 77.into()), "{v}");
    assert_eq!(rlimit("stack"), ((8 * MIB).into(), (8 * MIB).into()), "{v}");
    match mode {
        Mode::Root => {
            assert_eq!(
                field(&out, "forks"),
                "10",
                "12 pids: init, the program, 10 forks"
            );
            assert_eq!(v["pids_peak"], 12, "{v}");
            assert_eq!(limits["memory_bytes"], 48 * MIB, "{v}");
            assert_eq!(limits["pids"], 12, "{v}");
            assert_eq!(limits["cgroup_enforced"], true, "{v}");
        }
        Mode::Rootless => assert_eq!(field(&out, "forks"), "40", "{out}"),
    }

    // The command line overrides the file: a later --rlimit wins, a new command replaces.
    let done = jail(
        mode,
        &[
            "run",
            "--config",
            used,
            "--rlimit",
            "nofile=55",
            "--",
            "sh",
            "-c",
            "ulimit -n",
        ],
    );
    let v = read_verdict(Path::new(report), &done.output);
    assert_eq!(exit_status(&done, &v), 0, "{v}");
    assert_eq!(stdout(&done.output), "55\n");

    // Output limit and memory from a file.
    let flood = dir.file(
        "flood.yaml",
        &format!("output-limit: 1K\nreport: {report}\ncommand: [head, -c, '1048576', /dev/zero]\n"),
    );
    let done = jail(mode, &["run", "--config", flood.to_str().unwrap()]);
    let v = read_verdict(Path::new(report), &done.output);
    assert_eq!(exit_status(&done, &v), 124, "{v}");
    assert_eq!(v["status"], "output_limit", "{v}");
    assert_eq!(done.output.stdout.len(), 1024);
    if mode == Mode::Root {
        let bomb = dir.file(
            "bomb.yaml",
            &format!("memory: 32M\nreport: {report}\ncommand: [python3, -c, {MEMORY_BOMB:?}]\n"),
        );
        let done = jail(mode, &["run", "--config", bomb.to_str().unwrap()]);
        let v = read_verdict(Path::new(report), &done.output);
        assert_eq!(exit_status(&done, &v), 137, "{v}");
        assert_eq!(v["status"], "oom", "{v}");
        assert_eq!(v["limits"]["memory_bytes"], 32 * MIB, "{v}");
    }
}

/// On v1 the jail's first process joins its cgroups through `tasks` files brig opened as
/// root; none of those descriptors may survive into the jail, where the program could use
/// them to move itself out of its limits. Checked from the host, for every process in the
/// jail's cgroups (init included, which the program cannot inspect itself).
#[test]
fn no_jail_process_keeps_a_descriptor_into_the_cgroup_tree() {
    let mut brig = command(
        Mode::Root,
        &["run", "--memory", "64M", "--", "sleep", "1000"],
    );
    brig.stdout(Stdio::null()).stderr(Stdio::null());
    let mut running = Running::spawn(brig);
    let pid = running.pid();
    let jail_pids = || -> Vec<String> {
        let mut pids: Vec<String> = jail_cgroups_of(pid)
            .iter()
            .filter_map(|dir| std::fs::read_to_string(dir.join("cgroup.procs")).ok())
            .flat_map(|text| text.lines().map(String::from).collect::<Vec<_>>())
            .collect();
        pids.sort();
        pids.dedup();
        pids
    };
    assert!(
        wait_until(Duration::from_secs(10), || jail_pids().len() >= 2),
        "the jail's init and program never showed up in its cgroups"
    );
    for jail_pid in jail_pids() {
        let fds = std::fs::read_dir(format!("/proc/{jail_pid}/fd")).unwrap();
        for fd in fds.flatten() {
            let target = std::fs::read_link(fd.path()).unwrap_or_default();
            assert!(
                !target.starts_with("/sys/fs/cgroup"),
                "jail process {jail_pid} holds {} -> {}",
                fd.path().display(),
                target.display()
            );
        }
    }
    kill(pid, libc::SIGTERM);
    running.child.wait().unwrap();
    assert_no_jail_cgroups(pid);
}
