//! Helpers of the limit tests (limits.rs, verdict.rs, cgroup_lifecycle.rs, audit.rs): runs
//! of brig that also check that it removed its jail's cgroups
//! (`<hierarchy>/brig/jail-<brig's pid>-*`) before it exited, the JSON verdict and its
//! documented shape, the host's jail cgroups, and the programs that abuse the limits.

use super::*;
use serde_json::Value;
use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::{Output, Stdio};

pub const MIB: u64 = 1 << 20;

// ---------------------------------------------------------------------------------------
// Running brig and reading what it left

/// A finished brig run: what it printed.
pub struct Done {
    pub output: Output,
}

/// Waits for a spawned brig, then checks that it removed its jail's cgroups.
pub fn finish(running: Running) -> Done {
    let pid = running.pid();
    let output = running.wait();
    assert_no_jail_cgroups(pid);
    Done { output }
}

/// Runs brig with `args` in `mode`, capturing its output.
pub fn jail(mode: Mode, args: &[&str]) -> Done {
    // These tests read brig's stderr for its own lines about the run; rootless, the
    // notice about the unenforced default memory limit is tests/jail/rootless_limits.rs's.
    let mut quiet = args.to_vec();
    if quiet.first() == Some(&"run") {
        quiet.insert(1, "--quiet-limits");
    }
    let mut brig = command(mode, &quiet);
    brig.stdout(Stdio::piped()).stderr(Stdio::piped());
    finish(Running::spawn(brig))
}

/// Runs `brig run --report FILE ARGS -- PROGRAM` and returns the run and its verdict.
pub fn jail_with_verdict(mode: Mode, args: &[&str], program: &[&str]) -> (Done, Value) {
    let dir = TempDir::new("verdict").writable_by_all();
    let report = dir.path().join("verdict.json");
    let mut all = vec!["run", "--report", report.to_str().unwrap()];
    all.extend_from_slice(args);
    let done = jail(mode, &with_program(&all, program));
    let verdict = read_verdict(&report, &done.output);
    (done, verdict)
}

/// The verdict in `path`: exactly one line holding one JSON object.
pub fn read_verdict(path: &Path, output: &Output) -> Value {
    let text = std::fs::read_to_string(path).unwrap_or_else(|err| {
        panic!(
            "no verdict in {}: {err}; {}",
            path.display(),
            describe(output)
        )
    });
    parse_verdict(&text)
}

pub fn parse_verdict(text: &str) -> Value {
    assert!(
        text.ends_with('\n') && text.lines().count() == 1,
        "the verdict should be one line: {text:?}"
    );
    let verdict: Value =
        serde_json::from_str(text).unwrap_or_else(|err| panic!("not JSON: {err}: {text}"));
    assert_verdict_shape(&verdict);
    verdict
}

pub fn keys(object: &Value) -> BTreeSet<String> {
    object
        .as_object()
        .unwrap_or_else(|| panic!("not an object: {object}"))
        .keys()
        .cloned()
        .collect()
}

pub fn key_set(names: &[&str]) -> BTreeSet<String> {
    names.iter().map(|name| name.to_string()).collect()
}

/// The verdict's `network` object (`--net filtered`) has exactly the documented keys.
pub fn assert_network_shape(network: &Value) {
    assert_eq!(
        keys(network),
        key_set(&[
            "rules",
            "hosts",
            "connections",
            "lookups",
            "dropped",
            "bytes_sent",
            "bytes_received",
            "limit_reached",
            "secret_placeholders",
        ]),
        "{network}"
    );
    for connection in network["connections"].as_array().expect("connections") {
        assert_eq!(
            keys(connection),
            key_set(&[
                "name",
                "port",
                "address",
                "allowed",
                "reason",
                "connections",
                "bytes_sent",
                "bytes_received",
            ]),
            "{network}"
        );
    }
    for lookup in network["lookups"].as_array().expect("lookups") {
        assert_eq!(
            keys(lookup),
            key_set(&["name", "answer", "count"]),
            "{network}"
        );
    }
    for dropped in network["dropped"].as_array().expect("dropped") {
        assert_eq!(
            keys(dropped),
            key_set(&["protocol", "address", "port", "packets"]),
            "{network}"
        );
    }
}

/// The verdict has exactly the documented keys, with the documented types.
pub fn assert_verdict_shape(v: &Value) {
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
            "warm",
            "limits",
            "protections",
            "warnings",
            "error",
            "error_kind",
            "error_stage",
            "network",
            "unenforced",
            "explanation",
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
            "net_limit",
            "seccomp",
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
    // A failure names its kind; the stage only where a step of the jail failed.
    assert_eq!(v["error"].is_null(), v["error_kind"].is_null(), "{v}");
    assert!(
        v["error_stage"].is_null() || v["error_stage"].is_string(),
        "{v}"
    );
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
                "host_identity",
            ]),
            "{v}"
        );
        assert_eq!(
            keys(&v["protections"]["host_identity"]),
            key_set(&["mode", "uid", "gid"]),
            "{v}"
        );
    }
    if !v["network"].is_null() {
        assert_network_shape(&v["network"]);
    }
    // Anything but a setup error happened in a jail that was fully described.
    if status != "setup_error" {
        assert!(
            v["limits"].is_object() && v["protections"].is_object(),
            "{v}"
        );
    }
}

pub fn number(v: &Value, key: &str) -> u64 {
    v[key]
        .as_u64()
        .unwrap_or_else(|| panic!("{key} is not a number: {v}"))
}

/// brig's exit status, which must also be the verdict's `brig_exit_code`.
pub fn exit_status(done: &Done, verdict: &Value) -> i32 {
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
pub fn assert_one_brig_line(output: &Output, needles: &[&str]) {
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
pub fn brig_cgroup_parents() -> Vec<PathBuf> {
    let root = Path::new("/sys/fs/cgroup");
    let mut parents = vec![root.join("brig")];
    if let Ok(entries) = std::fs::read_dir(root) {
        parents.extend(entries.flatten().map(|entry| entry.path().join("brig")));
    }
    parents
}

/// The jail cgroups of the brig process `pid` that exist now, in every hierarchy.
pub fn jail_cgroups_of(pid: u32) -> Vec<PathBuf> {
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
pub fn assert_no_jail_cgroups(pid: u32) {
    let left = jail_cgroups_of(pid);
    assert!(left.is_empty(), "brig {pid} left cgroups behind: {left:?}");
}

/// The v1 cgroup directory of brig `pid`'s jail in `controller`'s hierarchy.
pub fn v1_jail_cgroup(controller: &str, pid: u32) -> Option<PathBuf> {
    v1_jail_cgroup_in(controller, "brig", pid)
}

/// The jail cgroup of brig `pid` under `parent` in a v1 hierarchy.
pub fn v1_jail_cgroup_in(controller: &str, parent: &str, pid: u32) -> Option<PathBuf> {
    let parent = Path::new("/sys/fs/cgroup").join(controller).join(parent);
    let prefix = format!("jail-{pid}-");
    std::fs::read_dir(parent)
        .ok()?
        .flatten()
        .find(|entry| entry.file_name().to_string_lossy().starts_with(&prefix))
        .map(|entry| entry.path())
}

pub fn read_trimmed(path: &Path) -> String {
    std::fs::read_to_string(path)
        .unwrap_or_else(|err| panic!("read {}: {err}", path.display()))
        .trim()
        .to_string()
}

// ---------------------------------------------------------------------------------------
// Programs

pub const MEMORY_BOMB: &str = "a = []\nwhile True:\n    a.append(bytearray(1 << 20))\n";

pub const SPIN: &str = "while :; do :; done";

/// What brig's one line says when explicit cgroup limits cannot be enforced for uid
/// 65534 (`nobody`): on a host whose memory controller is cgroup v1, where systemd
/// delegates nothing, the cgroup root creates and chowns; on cgroup v2, systemd's
/// delegation.
pub fn delegation_hints() -> [&'static str; 3] {
    if std::path::Path::new("/sys/fs/cgroup/memory/memory.limit_in_bytes").exists() {
        [
            "memory controller is cgroup v1",
            "chown -R nobody $d/brig-nobody",
            "--cgroup-parent /brig-nobody",
        ]
    } else {
        ["Delegate=yes", "--cgroup-parent", "systemd-run"]
    }
}
