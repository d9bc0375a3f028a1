//! A failed run's verdict says whose fault it was (`error_kind`) and which step of building
//! the jail failed (`error_stage`), for every kind of failure, as root and rootless.

use crate::common;

use common::*;

/// Runs brig with `--report FILE` and returns its exit code and the verdict.
fn verdict_of(mode: Mode, args: &[&str]) -> (i32, serde_json::Value) {
    let dir = TempDir::new("error-stage").writable_by_all();
    let report = dir.path().join("verdict.json");
    let report = report.to_str().unwrap();
    let mut full = vec!["run", "--report", report];
    full.extend_from_slice(args);
    let output = run(mode, &full);
    let text = std::fs::read_to_string(report)
        .unwrap_or_else(|err| panic!("no verdict ({err}): {}", describe(&output)));
    (code(&output), serde_json::from_str(&text).expect("JSON"))
}

fn assert_failure(verdict: &serde_json::Value, kind: &str, stage: Option<&str>) {
    assert_eq!(verdict["status"], "setup_error", "{verdict}");
    assert_eq!(verdict["error_kind"], kind, "{verdict}");
    match stage {
        Some(stage) => assert_eq!(verdict["error_stage"], stage, "{verdict}"),
        None => assert!(verdict["error_stage"].is_null(), "{verdict}"),
    }
    assert!(verdict["error"].is_string(), "{verdict}");
}

fn bad_input_has_no_stage(mode: Mode) {
    let (code, verdict) = verdict_of(mode, &["--tmpfs", "/x:0", "--", "true"]);
    assert_eq!(code, 125);
    assert_failure(&verdict, "bad_input", None);
}

fn a_mount_that_fails_names_the_mounts_stage(mode: Mode) {
    let (code, verdict) = verdict_of(
        mode,
        &["--ro-bind", "/etc/hostname:/proc/sys/brig-x", "--", "true"],
    );
    assert_eq!(code, 125);
    assert_failure(&verdict, "setup_failed", Some("mounts"));
    assert!(
        verdict["error"]
            .as_str()
            .unwrap()
            .contains("/proc/sys/brig-x"),
        "{verdict}"
    );
}

fn a_missing_working_directory_names_the_chdir_stage(mode: Mode) {
    let (code, verdict) = verdict_of(mode, &["--chdir", "/no/such/dir", "--", "true"]);
    assert_eq!(code, 125);
    assert_failure(&verdict, "setup_failed", Some("chdir"));
}

fn a_missing_program_is_an_exec_failure(mode: Mode) {
    let (code, verdict) = verdict_of(mode, &["--", "/no/such/program"]);
    assert_eq!(code, 127);
    assert_eq!(verdict["brig_exit_code"], 127, "{verdict}");
    assert_failure(&verdict, "exec_failed", Some("exec"));
}

fn success_has_no_error(mode: Mode) {
    let (code, verdict) = verdict_of(mode, &["--", "true"]);
    assert_eq!(code, 0);
    assert_eq!(verdict["status"], "ok", "{verdict}");
    for key in ["error", "error_kind", "error_stage"] {
        assert!(verdict[key].is_null(), "{key}: {verdict}");
    }
}

both_modes!(
    bad_input_has_no_stage,
    a_mount_that_fails_names_the_mounts_stage,
    a_missing_working_directory_names_the_chdir_stage,
    a_missing_program_is_an_exec_failure,
    success_has_no_error,
);

/// Rootless on a host without a delegated cgroup (this one), an explicit limit cannot be
/// enforced: the host lacks something, and the cgroup stage says where.
#[test]
fn an_unenforceable_limit_is_the_hosts_lack() {
    let (code, verdict) = verdict_of(Mode::Rootless, &["--memory", "64M", "--", "true"]);
    assert_eq!(code, 125);
    assert_failure(&verdict, "host_lacks", None);
}
