//! For operators: `brig doctor` (human and JSON output, exit status, a host where jails
//! cannot run) and `brig completions`.

use crate::common;

use common::{Mode, assert_one_line_error, code, describe, stdout};
use std::process::Command;

/// Every line of the human output is `ok    name: detail`, `warn  ...` or `FAIL  ...`,
/// and the last one says whether a default jail can run.
fn check_lines(text: &str) -> Vec<(String, String)> {
    let mut lines: Vec<&str> = text.lines().collect();
    let verdict = lines.pop().expect("doctor printed nothing");
    assert!(
        verdict.starts_with("brig can run a default jail here")
            || verdict.starts_with("brig cannot run a default jail here"),
        "last line: {verdict}"
    );
    lines
        .iter()
        .map(|line| {
            let (status, rest) = line.split_at(6);
            let status = status.trim_end();
            assert!(
                ["ok", "warn", "FAIL"].contains(&status),
                "not a check line: {line}"
            );
            let (name, _) = rest
                .split_once(": ")
                .unwrap_or_else(|| panic!("no name: {line}"));
            if status != "ok" {
                assert!(line.contains(" — fix: "), "a problem without a fix: {line}");
            }
            (status.to_string(), name.to_string())
        })
        .collect()
}

fn doctor_says_a_jail_runs_here(mode: Mode) {
    let output = common::run(mode, &["doctor"]);
    let text = stdout(&output);
    assert_eq!(code(&output), 0, "{}", describe(&output));
    let checks = check_lines(&text);
    let who = match mode {
        Mode::Root => "as root",
        Mode::Rootless => "rootless, uid 65534",
    };
    for name in [
        "user namespaces",
        "id mapping",
        "fresh /proc",
        "pivot_root",
        "cgroup namespace",
        "TUN device for --net filtered",
        "end to end",
    ] {
        let wanted = format!("{name} ({who})");
        assert!(
            checks
                .iter()
                .any(|(status, n)| *n == wanted && status == "ok"),
            "no ok line for {wanted}:\n{text}"
        );
    }
    for name in [
        "user.max_user_namespaces",
        "AppArmor userns restriction",
        "cgroup layout",
        "Landlock",
        "seccomp filter",
    ] {
        assert!(
            checks.iter().any(|(_, n)| n == name),
            "no line for {name}:\n{text}"
        );
    }
    // As root, doctor also says what an unprivileged user would get.
    let rootless_lines = checks
        .iter()
        .filter(|(_, n)| n.contains("(rootless, uid 65534)"))
        .count();
    assert!(rootless_lines >= 6, "{text}");
    if mode == Mode::Rootless {
        assert!(!text.contains("(as root)"), "{text}");
    }
}

both_modes!(doctor_says_a_jail_runs_here);

/// With /dev/net/tun closed to other users (here: a root-only file bound over it in a
/// mount namespace of the test's own), doctor warns that rootless `--net filtered` fails
/// and names the fix; with the real device, the same line is ok (above).
#[test]
fn doctor_names_the_fix_when_tun_is_closed() {
    if !common::require_root() || !common::require_program("unshare", "apt install util-linux") {
        return;
    }
    let dir = common::TempDir::new("tun");
    let closed = dir.file("tun", "");
    common::set_mode(&closed, 0o600);
    let script = "mount --bind \"$0\" /dev/net/tun && exec \"$1\" doctor --no-run";
    let output = common::output_of(common::command_from(&[
        "unshare".into(),
        "--mount".into(),
        "--propagation".into(),
        "private".into(),
        "sh".into(),
        "-c".into(),
        script.into(),
        closed.into(),
        common::brig().into(),
    ]));
    let text = stdout(&output);
    let line = text
        .lines()
        .find(|line| line.contains("TUN device for --net filtered (rootless, uid 65534)"))
        .unwrap_or_else(|| panic!("no TUN line for uid 65534:\n{text}"));
    assert!(line.starts_with("warn"), "{line}");
    assert!(
        line.contains("EACCES") && line.contains("chmod 0666 /dev/net/tun"),
        "{line}"
    );
}

#[test]
fn doctor_json_has_the_same_checks() {
    let human = common::run(Mode::Root, &["doctor", "--no-run"]);
    let json = common::run(Mode::Root, &["doctor", "--no-run", "--json"]);
    assert_eq!(code(&json), 0, "{}", describe(&json));
    let report: serde_json::Value = serde_json::from_slice(&json.stdout).expect("JSON");
    assert_eq!(report["schema"], "brig-doctor/1");
    assert_eq!(report["ok"], true);
    assert_eq!(report["rootless"], false);
    let checks = report["checks"].as_array().expect("checks");
    let names: Vec<String> = checks
        .iter()
        .map(|check| {
            let status = check["status"].as_str().unwrap();
            assert!(["ok", "warn", "fail"].contains(&status), "{check}");
            assert!(check["detail"].is_string(), "{check}");
            assert!(
                check["fix"].is_null() || check["fix"].is_string(),
                "{check}"
            );
            check["name"].as_str().unwrap().to_string()
        })
        .collect();
    let human_names: Vec<String> = check_lines(&stdout(&human))
        .into_iter()
        .map(|(_, name)| name)
        .collect();
    assert_eq!(names, human_names);
    // --no-run leaves the end-to-end runs out.
    assert!(!names.iter().any(|name| name.starts_with("end to end")));
}

/// Inside a jail, the default seccomp profile denies new namespaces: doctor must say a
/// jail cannot run there, why, and exit 1.
fn doctor_inside_a_jail_fails(mode: Mode) {
    let brig = common::brig_for(mode);
    let bind = format!("{}:/opt/brig", brig.display());
    for json in [false, true] {
        let mut args = vec!["run", "--ro-bind", &bind, "--", "/opt/brig", "doctor"];
        if json {
            args.push("--json");
        }
        let output = common::run(mode, &args);
        assert_eq!(code(&output), 1, "{}", describe(&output));
        let text = stdout(&output);
        if json {
            let report: serde_json::Value = serde_json::from_str(&text).expect("JSON");
            assert_eq!(report["ok"], false);
            let failed = report["checks"]
                .as_array()
                .unwrap()
                .iter()
                .find(|check| check["status"] == "fail")
                .expect("a failed check");
            assert!(failed["fix"].is_string(), "{failed}");
        } else {
            let checks = check_lines(&text);
            assert!(
                checks
                    .iter()
                    .any(|(status, name)| status == "FAIL" && name.starts_with("user namespaces")),
                "{text}"
            );
            assert!(text.contains("Operation not permitted"), "{text}");
            assert!(text.ends_with("fix the FAIL lines above.\n"), "{text}");
        }
    }
}

both_modes!(doctor_inside_a_jail_fails);

#[test]
fn doctor_checks_a_given_cgroup_parent() {
    let output = common::run(
        Mode::Root,
        &[
            "doctor",
            "--no-run",
            "--cgroup-parent",
            "/sys/fs/cgroup/no-such-brig-parent",
        ],
    );
    assert_eq!(code(&output), 1, "{}", describe(&output));
    let text = stdout(&output);
    assert!(
        text.lines()
            .any(|line| line
                .starts_with("FAIL  --cgroup-parent /sys/fs/cgroup/no-such-brig-parent: ")),
        "{text}"
    );
}

#[test]
fn completions_for_every_shell() {
    // Each shell syntax-checks its own script.
    for (shell, package) in [("bash", "bash"), ("zsh", "zsh"), ("fish", "fish")] {
        if !common::require_program(
            shell,
            &format!("tests/run.sh installs it (Debian package {package})"),
        ) {
            return;
        }
    }
    for shell in ["bash", "zsh", "fish"] {
        let output = common::run(Mode::Root, &["completions", shell]);
        let script = stdout(&output);
        assert_eq!(code(&output), 0, "{}", describe(&output));
        // fish writes long options as `-l ro-bind`.
        for word in ["doctor", "rootfs", "ro-bind", "seccomp-log"] {
            assert!(script.contains(word), "{shell} completions lack {word}");
        }
        // The shell must accept the script.
        let syntax_check: &[&str] = match shell {
            "bash" => &["-n"],
            "zsh" => &["-n"],
            _ => &["--no-execute"],
        };
        let path = common::TempFile::new(&format!("completions.{shell}"), &script);
        let checked = Command::new(shell)
            .args(syntax_check)
            .arg(path.path())
            .output()
            .unwrap_or_else(|err| panic!("run {shell}: {err}"));
        assert!(
            checked.status.success(),
            "{shell} rejects its completions: {}",
            String::from_utf8_lossy(&checked.stderr)
        );
    }
}

#[test]
fn bash_completes_subcommands_and_options() {
    let brig = common::brig().display().to_string();
    let script = format!(
        r#"source <("{brig}" completions bash) || exit 2
complete -p brig || exit 3
COMP_WORDS=(brig ro); COMP_CWORD=1; COMP_LINE="brig ro"; COMP_POINT=7
_brig brig ro brig; echo "1:${{COMPREPLY[*]}}"
COMP_WORDS=(brig run --time); COMP_CWORD=2; COMP_LINE="brig run --time"; COMP_POINT=15
_brig brig --time run; echo "2:${{COMPREPLY[*]}}"
COMP_WORDS=(brig completions ""); COMP_CWORD=2; COMP_LINE="brig completions "; COMP_POINT=17
_brig brig "" completions; echo "3:${{COMPREPLY[*]}}"
"#
    );
    let output = Command::new("bash")
        .args(["-c", &script])
        .output()
        .expect("bash");
    let text = stdout(&output);
    assert!(output.status.success(), "{}", describe(&output));
    assert!(
        text.contains("complete -o bashdefault -o default -o nosort -F _brig brig")
            || text.contains("-F _brig brig"),
        "{text}"
    );
    assert!(text.contains("1:rootfs"), "{text}");
    assert!(text.contains("2:--time-limit"), "{text}");
    assert!(text.contains("bash zsh fish"), "{text}");
}

#[test]
fn completions_for_an_unknown_shell_is_a_one_line_error() {
    let output = common::run(Mode::Root, &["completions", "tcsh"]);
    assert_one_line_error(&output, &["tcsh"]);
}

/// `brig doctor` on a pure cgroup v2 kernel (this host is hybrid): the layout, where jails
/// go as root, a delegated `--cgroup-parent`, and what uid 65534 gets inside a cgroup
/// delegated to it. One boot of `tests/vm/run-in-vm.sh` (about 25 s under TCG).
#[test]
fn doctor_on_pure_cgroup_v2_in_a_vm() {
    let Some(vm) = common::Vm::new("doctor-vm") else {
        return;
    };
    let script = r#"
B="$1"
echo "== plain"; "$B" doctor; echo "exit $?"
D=/sys/fs/cgroup/deleg
mkdir $D && chown 65534:65534 $D $D/cgroup.procs $D/cgroup.subtree_control $D/cgroup.threads
echo "== parent"; "$B" doctor --no-run --cgroup-parent $D; echo "exit $?"
echo "== inside"; sh -c "echo \$\$ > $D/cgroup.procs && exec $B doctor --no-run"; echo "exit $?"
echo $$ > $D/cgroup.procs
echo "== shared"; "$B" doctor --no-run; echo "exit $?"
"#;
    let output = vm.run(
        150,
        &[
            "sh".as_ref(),
            "-c".as_ref(),
            script.as_ref(),
            "sh".as_ref(),
            vm.brig().as_os_str(),
        ],
    );
    let text = stdout(&output).replace('\r', "");
    assert_eq!(output.status.code(), Some(0), "{}", describe(&output));
    let section = |name: &str| -> String {
        text.split(&format!("== {name}\n"))
            .nth(1)
            .and_then(|rest| rest.split("\n== ").next())
            .unwrap_or_else(|| panic!("no section {name}:\n{text}"))
            .to_string()
    };
    let plain = section("plain");
    assert!(plain.contains("exit 0"), "{plain}");
    assert!(
        plain.contains("ok    cgroup layout: v2 (unified): cgroup2 at /sys/fs/cgroup with "),
        "{plain}"
    );
    assert!(
        plain
            .contains("ok    cgroup limits (as root): v2, jail cgroups under /sys/fs/cgroup/brig;"),
        "{plain}"
    );
    assert!(plain.contains("ok    end to end (as root)"), "{plain}");
    let parent = section("parent");
    assert!(parent.contains("exit 0"), "{parent}");
    let line = parent
        .lines()
        .find(|line| line.contains("--cgroup-parent /sys/fs/cgroup/deleg: "))
        .unwrap_or_else(|| panic!("{parent}"));
    assert!(line.starts_with("ok    "), "{line}");
    assert!(
        line.contains("memory") && line.contains("pids") && line.ends_with("writable"),
        "{line}"
    );
    let inside = section("inside");
    assert!(
        inside.contains(
            "ok    cgroup limits (rootless, uid 65534): v2, jail cgroups under /sys/fs/cgroup/deleg"
        ),
        "{inside}"
    );
    // Sharing the delegated cgroup with the shell that started it, brig could not hand
    // controllers down there: doctor says so rather than ok.
    let shared = section("shared");
    assert!(
        shared.contains("warn  cgroup limits (rootless, uid 65534): brig's own cgroup /sys/fs/cgroup/deleg is delegated to it but holds other processes too"),
        "{shared}"
    );
}
