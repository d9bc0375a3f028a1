//! The JSON verdict: its fields for each status (ok, nonzero_exit, signaled, timeout,
//! cpu_time, output_limit, setup_error, oom), the report written to a descriptor
//! (`--report-fd`), and the verdict of a run that fails before it starts. Its documented
//! shape is checked on every verdict read (`common::limits::read_verdict`).

use crate::common;

use common::limits::*;
use common::*;
use serde_json::Value;
use std::path::Path;
use std::process::Stdio;

both_modes!(
    verdict_fields_for_each_status,
    report_fd_receives_the_verdict,
    setup_errors_write_a_verdict,
);

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
