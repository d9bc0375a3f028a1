//! The audit log (`--audit-log`): one whole JSON line per run, even from many concurrent
//! runs, with the time, the caller's uid, argv, the config's digest and the verdict.
//! (The seccomp kill report and `--seccomp-log`, which read the kernel's audit records,
//! are in tests/jail/attacks.rs with the probe they use.)

use crate::common;

use common::limits::*;
use common::*;
use serde_json::Value;
use std::collections::BTreeSet;
use std::process::Stdio;

both_modes!(concurrent_audit_log_lines_stay_whole);

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
            key_set(&["time", "uid", "pid", "argv", "config_digest", "verdict"]),
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
        assert!(entry["pid"].as_u64().is_some_and(|pid| pid > 1), "{entry}");
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
