//! brig's input: flags, config files, profiles and `brig check`. Bad input must end brig
//! with status 125 and one line on stderr that names the field, and leave nothing behind.

use crate::common;

use common::*;
use serde::Deserialize;
use std::process::Output;

both_modes!(
    bad_input_is_one_line_and_exit_125,
    unknown_flag_is_rejected_with_125,
    bind_destination_through_a_jail_symlink_is_rejected,
    mount_errors_found_while_building_the_jail_name_the_option,
    profiles_run_their_interpreters,
    config_file_sets_options_and_the_command_line_overrides_it,
    check_prints_the_plan_and_runs_nothing,
    check_rejects_bad_input,
    check_rejects_a_destination_through_a_jail_symlink,
);

/// What the host looks like, to show that a failed brig left nothing behind.
struct Snapshot {
    mounts: usize,
    temp_entries: Vec<String>,
}

impl Snapshot {
    fn take() -> Snapshot {
        Snapshot {
            mounts: host_mount_count(),
            temp_entries: brig_named_temp_entries(),
        }
    }
}

/// Runs brig with `args` and checks that it left nothing behind: no new mount on the
/// host, no new `brig` entry in the temp dir, and no process that descends from it
/// (each carries brig's environment, so a marker variable finds them).
fn run_and_check_leftovers(mode: Mode, args: &[&str]) -> Output {
    let argv = argv(mode, args);
    let marker = unique("leftover");
    let before = Snapshot::take();
    let mut brig = command_from(&argv);
    brig.env("BRIG_TEST_MARKER", &marker);
    let output = output_of(brig);
    let after = Snapshot::take();
    assert_eq!(after.mounts, before.mounts, "host mounts changed: {args:?}");
    assert_eq!(
        after.temp_entries, before.temp_entries,
        "temp dir entries changed: {args:?}"
    );
    let left = processes_with_environ(&format!("BRIG_TEST_MARKER={marker}"));
    assert!(
        left.is_empty(),
        "processes left behind by {args:?}: {left:?}"
    );
    output
}

fn bad_input_is_one_line_and_exit_125(mode: Mode) {
    let dir = TempDir::new("config");
    let unknown_key = dir.file("unknown-key.yaml", "hostname: a\nbogus: 1\n");
    let wrong_type = dir.file("wrong-type.yaml", "hostname: a\nuid: alice\n");
    let not_a_list = dir.file("not-a-list.yaml", "ro-bind: /usr\ncommand: [true]\n");
    let plain_file = dir.file("plain-file", "");
    let missing_config = dir.path().join("missing.yaml");
    let missing_path = dir.path().join("no-such-dir");
    let (unknown_key, wrong_type, not_a_list, plain_file, missing_config, missing_path) = (
        unknown_key.to_str().unwrap(),
        wrong_type.to_str().unwrap(),
        not_a_list.to_str().unwrap(),
        plain_file.to_str().unwrap(),
        missing_config.to_str().unwrap(),
        missing_path.to_str().unwrap(),
    );
    let missing_ro_bind = format!("{missing_path}:/x");
    let dotdot_bind = format!("{}:/a/../etc", dir.str());
    let unknown_key_at = format!("{unknown_key}:2:1");
    let wrong_type_at = format!("{wrong_type}:2:");
    let not_a_list_at = format!("{not_a_list}:1:");
    let cases: Vec<(Vec<&str>, Vec<&str>)> = vec![
        (vec!["--tmpfs-size", "12X"], vec!["--tmpfs-size", "12X"]),
        (vec!["--tmpfs-size", "1K"], vec!["--tmpfs-size"]),
        (vec!["--time-limit", "5x"], vec!["--time-limit", "5x"]),
        (vec!["--time-limit", "0s"], vec!["--time-limit"]),
        (
            vec!["--ro-bind", &missing_ro_bind],
            vec!["--ro-bind", missing_path],
        ),
        (
            vec!["--bind", &missing_ro_bind],
            vec!["--bind", missing_path],
        ),
        (
            vec!["--ro-bind", "/usr:relative/dst"],
            vec!["--ro-bind", "relative"],
        ),
        (vec!["--bind", &dotdot_bind], vec!["--bind", "'..'"]),
        (vec!["--bind", "/usr:/"], vec!["--bind", "root"]),
        (vec!["--tmpfs", "/x/../etc"], vec!["--tmpfs", "'..'"]),
        (vec!["--tmpfs", "data"], vec!["--tmpfs", "relative"]),
        (vec!["--tmpfs", "/data:12X"], vec!["--tmpfs", "12X"]),
        (vec!["--profile", "nope"], vec!["--profile", "nope"]),
        (
            vec!["--config", unknown_key],
            vec![&unknown_key_at, "bogus"],
        ),
        (vec!["--config", wrong_type], vec![&wrong_type_at, "uid"]),
        (
            vec!["--config", not_a_list],
            vec![&not_a_list_at, "ro-bind"],
        ),
        (
            vec!["--config", missing_config],
            vec!["--config", missing_config],
        ),
        (
            vec!["--rootfs", missing_path],
            vec!["--rootfs", missing_path],
        ),
        (vec!["--rootfs", plain_file], vec!["--rootfs", plain_file]),
        (vec!["--hostname", "bad name"], vec!["--hostname"]),
        (vec!["--env", "NOEQUALS"], vec!["--env", "NOEQUALS"]),
        (vec!["--env-pass", "1BAD"], vec!["--env-pass", "1BAD"]),
        (vec!["--net", "bogus"], vec!["--net", "bogus"]),
        (vec!["--uid", "alice"], vec!["--uid", "alice"]),
        (vec!["--uid", "4294967295"], vec!["--uid"]),
        (vec!["--host-uid", "0"], vec!["--host-uid"]),
        (vec!["--host-gid", "0"], vec!["--host-gid"]),
        (
            vec!["--chdir", "/no/such/dir"],
            vec!["--chdir", "/no/such/dir"],
        ),
    ];
    let mut problems = Vec::new();
    for (options, needles) in &cases {
        let mut args = vec!["run"];
        args.extend(options);
        args.extend(["--", "true"]);
        let output = run_and_check_leftovers(mode, &args);
        if let Some(problem) = one_line_error_problem(&output, needles) {
            problems.push(format!("brig {args:?}: {problem}"));
        }
    }
    // No program at all, with and without options.
    for args in [
        vec!["run"],
        vec!["run", "--hostname", "x"],
        vec!["run", "--"],
    ] {
        let output = run_and_check_leftovers(mode, &args);
        if let Some(problem) = one_line_error_problem(&output, &["program"]) {
            problems.push(format!("brig {args:?}: {problem}"));
        }
    }
    assert!(problems.is_empty(), "{}", problems.join("\n\n"));
}

fn unknown_flag_is_rejected_with_125(mode: Mode) {
    for args in [
        vec!["run", "--bogus", "--", "true"],
        vec!["run", "--bogus", "true"],
        vec!["run", "--hostname", "x", "--bogus", "--", "true"],
        vec!["check", "--bogus", "--", "true"],
    ] {
        let output = run_and_check_leftovers(mode, &args);
        assert_one_line_error(&output, &["--bogus"]);
    }
}

fn bind_destination_through_a_jail_symlink_is_rejected(mode: Mode) {
    // /lib is a symlink in the jail (merged /usr): following it would mount elsewhere.
    let output = run_and_check_leftovers(
        mode,
        &["run", "--ro-bind", "/usr/share:/lib/x", "--", "true"],
    );
    assert_one_line_error(&output, &["/lib", "symlink"]);

    // A symlink the host planted in a bound directory, pointing at /.
    let planted = TempDir::new("planted");
    std::os::unix::fs::symlink("/", planted.path().join("link")).unwrap();
    let bind = format!("{}:/out", planted.str());
    let output = run_and_check_leftovers(
        mode,
        &[
            "run",
            "--bind",
            &bind,
            "--ro-bind",
            "/usr/share:/out/link/x",
            "--",
            "true",
        ],
    );
    assert_one_line_error(&output, &["/out/link", "symlink"]);
}

fn mount_errors_found_while_building_the_jail_name_the_option(mode: Mode) {
    // These are only found while the jail is assembled; the message must still say
    // which option to fix.
    let mut problems = Vec::new();
    for (spec, dst) in [
        ("/usr/share:/lib/x", "/lib/x"),
        ("/usr/share:/proc/x", "/proc/x"),
    ] {
        let output = run_and_check_leftovers(mode, &["run", "--ro-bind", spec, "--", "true"]);
        if let Some(problem) = one_line_error_problem(&output, &[dst, "--ro-bind"]) {
            problems.push(format!("--ro-bind {spec}: {problem}"));
        }
    }
    assert!(problems.is_empty(), "{}", problems.join("\n\n"));
}

fn profiles_run_their_interpreters(mode: Mode) {
    for (profile, program, expected) in [
        (
            "python",
            vec!["python3", "-c", "print('hello from the jail')"],
            "hello from the jail\n",
        ),
        ("node", vec!["node", "-e", "console.log('hi')"], "hi\n"),
        ("shell", vec!["sh", "-c", "echo hi"], "hi\n"),
    ] {
        let mut args = vec!["run", "--quiet-limits", "--profile", profile, "--"];
        args.extend(program);
        let output = run(mode, &args);
        assert_eq!(assert_success(&output), expected, "--profile {profile}");
        assert_eq!(stderr(&output), "", "--profile {profile}");
    }
}

fn config_file_sets_options_and_the_command_line_overrides_it(mode: Mode) {
    let dir = TempDir::new("config");
    let config = dir.file(
        "jail.yaml",
        "profile: shell\n\
         hostname: from-config\n\
         env:\n  - FROM_CONFIG=1\n\
         command: [sh, -c, 'echo \"$(hostname) $FROM_CONFIG $FROM_CLI\"']\n",
    );
    let config = config.to_str().unwrap();
    let out = assert_success(&run(mode, &["run", "--config", config]));
    assert_eq!(out, "from-config 1 \n");
    let out = assert_success(&run(
        mode,
        &[
            "run",
            "--config",
            config,
            "--hostname",
            "from-cli",
            "--env",
            "FROM_CLI=2",
        ],
    ));
    assert_eq!(out, "from-cli 1 2\n", "the command line wins, lists append");
    let out = assert_success(&run(
        mode,
        &["run", "--config", config, "--", "sh", "-c", "echo replaced"],
    ));
    assert_eq!(
        out, "replaced\n",
        "a command on the command line replaces the file's"
    );

    // The profile's time limit comes through the file, and the command line overrides it.
    let plan = parse_plan(&assert_success(&run(mode, &["check", "--config", config])));
    assert_eq!(plan.time_limit.as_deref(), Some("60s"));
    assert_eq!(plan.hostname, "from-config");
    let plan = parse_plan(&assert_success(&run(
        mode,
        &["check", "--config", config, "--time-limit", "5s"],
    )));
    assert_eq!(plan.time_limit.as_deref(), Some("5s"));
}

/// The parts of `brig check`'s YAML that the tests look at.
#[derive(Debug, Deserialize)]
struct Plan {
    command: Vec<String>,
    hostname: String,
    #[serde(alias = "time_limit", rename = "time-limit")]
    time_limit: Option<String>,
    identity: Identity,
    env: Vec<String>,
    mounts: Vec<Mount>,
}

#[derive(Debug, Deserialize)]
struct Identity {
    uid: u32,
    rootless: bool,
}

#[derive(Debug, Deserialize)]
struct Mount {
    op: String,
    dst: Option<String>,
    src: Option<String>,
}

fn parse_plan(yaml: &str) -> Plan {
    serde_saphyr::from_str(yaml).unwrap_or_else(|err| panic!("not a plan: {err}\n{yaml}"))
}

fn check_prints_the_plan_and_runs_nothing(mode: Mode) {
    let out_dir = TempDir::new("out").writable_by_all();
    let bind = format!("{}:/out", out_dir.str());
    let output = run_and_check_leftovers(
        mode,
        &[
            "check",
            "--bind",
            &bind,
            "--hostname",
            "planned",
            "--env",
            "K=V",
            "--",
            "sh",
            "-c",
            "touch /out/created",
        ],
    );
    let yaml = assert_success(&output);
    assert_eq!(stderr(&output), "");
    assert!(yaml.contains("\nmounts:\n"), "{yaml}");
    let plan = parse_plan(&yaml);
    assert_eq!(plan.command, ["sh", "-c", "touch /out/created"]);
    assert_eq!(plan.hostname, "planned");
    assert_eq!(plan.identity.uid, 1000);
    assert_eq!(plan.identity.rootless, mode == Mode::Rootless);
    assert!(plan.env.iter().any(|var| var == "K=V"), "{yaml}");
    let out_mount = plan
        .mounts
        .iter()
        .find(|m| m.dst.as_deref() == Some("/out"))
        .unwrap_or_else(|| panic!("no /out mount in the plan:\n{yaml}"));
    assert_eq!(out_mount.op, "bind");
    assert_eq!(out_mount.src.as_deref(), Some(out_dir.str()));
    for dst in ["/usr", "/proc", "/tmp", "/home/sandbox"] {
        assert!(
            plan.mounts.iter().any(|m| m.dst.as_deref() == Some(dst)),
            "no {dst} in the plan:\n{yaml}"
        );
    }
    let created: Vec<_> = std::fs::read_dir(out_dir.path()).unwrap().collect();
    assert!(created.is_empty(), "brig check ran the program");
}

fn check_rejects_bad_input(mode: Mode) {
    let dir = TempDir::new("config");
    let unknown_key = dir.file("unknown-key.yaml", "hostname: a\nbogus: 1\n");
    let unknown_key = unknown_key.to_str().unwrap();
    let unknown_key_at = format!("{unknown_key}:2:1");
    for (args, needles) in [
        (
            vec!["check", "--tmpfs-size", "12X", "--", "true"],
            vec!["--tmpfs-size"],
        ),
        (
            vec!["check", "--ro-bind", "/no/such/src:/x", "--", "true"],
            vec!["--ro-bind"],
        ),
        (
            vec!["check", "--config", unknown_key, "--", "true"],
            vec![&unknown_key_at, "bogus"],
        ),
        (
            vec!["check", "--host-uid", "0", "--", "true"],
            vec!["--host-uid"],
        ),
        (vec!["check"], vec!["program"]),
    ] {
        let output = run_and_check_leftovers(mode, &args);
        assert_one_line_error(&output, &needles);
    }
}

fn check_rejects_a_destination_through_a_jail_symlink(mode: Mode) {
    // `brig run` refuses this (see bind_destination_through_a_jail_symlink_is_rejected);
    // the plan itself says /lib is a symlink, so `brig check` can tell as well.
    let output = run_and_check_leftovers(
        mode,
        &["check", "--ro-bind", "/usr/share:/lib/x", "--", "true"],
    );
    assert_one_line_error(&output, &["/lib", "symlink"]);
}
