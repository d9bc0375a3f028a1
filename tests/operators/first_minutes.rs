//! What a new user meets in the first ten minutes: the working directory bound in with one
//! flag, a warning when a writable bind is not writable by the jail's user, completions
//! that offer the profiles, fixed-choice errors that list the choices, and a
//! `--cgroup-parent` hint in the host's own cgroup form.

use crate::common;

use common::*;

fn workdir_binds_the_directory_read_only_and_starts_there(mode: Mode) {
    let dir = TempDir::new("workdir");
    dir.file("solution.py", "import os\nprint('ran in', os.getcwd())\n");
    let output = run(
        mode,
        &[
            "run",
            "-w",
            dir.str(),
            "--",
            "sh",
            "-c",
            "python3 solution.py && touch /work/new 2>&1 || echo read-only",
        ],
    );
    assert_eq!(code(&output), 0, "{}", describe(&output));
    let text = stdout(&output);
    assert!(text.starts_with("ran in /work\n"), "{text}");
    assert!(text.contains("Read-only file system"), "{text}");
    assert!(!dir.path().join("new").exists());
}

both_modes!(workdir_binds_the_directory_read_only_and_starts_there);

#[test]
fn workdir_must_be_an_existing_directory() {
    let dir = TempDir::new("workdir-bad");
    let file = dir.file("solution.py", "");
    let missing = dir.path().join("missing");
    for (path, needle) in [
        (missing.to_str().unwrap(), "cannot be used"),
        (file.to_str().unwrap(), "not a directory"),
    ] {
        let output = run(Mode::Root, &["run", "-w", path, "--", "true"]);
        assert_one_line_error(&output, &[&format!("--workdir {path}"), needle]);
        assert_eq!(code(&output), 125);
    }
}

/// As root the jail's user is a host uid of its own (`--host-uid-range`; 65534 with `off`):
/// a 0755 root-owned output directory is not writable for it, and the plan says so, and
/// the run too: once on stderr, before the program's own error; a directory it may write
/// gets no warning.
#[test]
fn an_unwritable_bind_target_is_a_warning() {
    let denied = TempDir::new("bind-denied");
    let output = run(
        Mode::Root,
        &[
            "check",
            "--bind",
            &format!("{}:/out", denied.str()),
            "--",
            "true",
        ],
    );
    assert_eq!(code(&output), 0, "{}", describe(&output));
    let text = stdout(&output);
    assert!(
        text.contains("is not world-writable") && text.contains("chmod 1777"),
        "{text}"
    );
    let output = run(
        Mode::Root,
        &[
            "check",
            "--host-uid-range",
            "off",
            "--bind",
            &format!("{}:/out", denied.str()),
            "--",
            "true",
        ],
    );
    let text = stdout(&output);
    assert!(
        text.contains("is not writable by host uid 65534") && text.contains("chown 65534"),
        "{text}"
    );
    // The attempt really fails, as the warning says.
    let output = run(
        Mode::Root,
        &[
            "run",
            "--bind",
            &format!("{}:/out", denied.str()),
            "--",
            "sh",
            "-c",
            "echo x > /out/f",
        ],
    );
    let errors = stderr(&output);
    let lines: Vec<&str> = errors.lines().collect();
    assert_eq!(lines.len(), 2, "{}", describe(&output));
    assert_eq!(
        lines[0],
        format!(
            "brig: warning: --bind {dir}:/out: {dir} is not world-writable, and the jail's user maps to a host uid of its own (one of --host-uid-range 1879048192-1879113727), so writes there fail with EACCES; `chmod 1777 {dir}`, or give every jail one host uid with --host-uid (weaker: jails then share per-user kernel counters)",
            dir = denied.str()
        ),
        "{}",
        describe(&output)
    );
    assert!(
        lines[1].contains("Permission denied"),
        "{}",
        describe(&output)
    );

    let allowed = TempDir::new("bind-allowed").writable_by_all();
    let output = run(
        Mode::Root,
        &[
            "check",
            "--bind",
            &format!("{}:/out", allowed.str()),
            "--",
            "true",
        ],
    );
    assert!(
        !stdout(&output).contains("not writable"),
        "{}",
        describe(&output)
    );
    let output = run(
        Mode::Root,
        &[
            "run",
            "--bind",
            &format!("{}:/out", allowed.str()),
            "--",
            "sh",
            "-c",
            "echo x > /out/f",
        ],
    );
    assert_eq!(code(&output), 0, "{}", describe(&output));
    assert_eq!(stderr(&output), "", "{}", describe(&output));
}

#[test]
fn profile_completes_to_the_profiles() {
    let output = run(Mode::Root, &["completions", "bash"]);
    assert!(
        stdout(&output).contains("python node shell"),
        "bash completion offers no profile names"
    );
    let output = run(Mode::Root, &["run", "--profile", "pithon", "--", "true"]);
    assert_one_line_error(
        &output,
        &["--profile", "possible values: python, node, shell"],
    );
}

#[test]
fn cgroup_parent_hint_follows_the_host() {
    let output = run(
        Mode::Root,
        &[
            "run",
            "--memory",
            "64M",
            "--cgroup-parent",
            "/bt-nonesuch",
            "--",
            "true",
        ],
    );
    // A hybrid or v1 host (like the development machines) gets the v1 form of the path.
    if std::path::Path::new("/sys/fs/cgroup/memory").is_dir() {
        assert_one_line_error(
            &output,
            &[
                "--cgroup-parent /bt-nonesuch",
                "each v1 hierarchy",
                "/sys/fs/cgroup/memory/jobs",
            ],
        );
    } else {
        assert_one_line_error(
            &output,
            &["--cgroup-parent /bt-nonesuch", "delegated cgroup directory"],
        );
    }
}

/// A root without the mount points brig needs is refused up front, naming what it lacks;
/// one changed after its digest was recorded runs with a warning that says so.
#[test]
fn prepared_roots_are_checked() {
    let dir = TempDir::new("rootfs-check");
    let root = dir.path().join("root");
    std::fs::create_dir(&root).unwrap();
    let output = run(
        Mode::Root,
        &["check", "--rootfs", root.to_str().unwrap(), "--", "true"],
    );
    assert_one_line_error(
        &output,
        &[
            "--rootfs",
            "the root lacks /proc, /dev, /tmp, /home/sandbox",
            "brig rootfs build",
        ],
    );

    for mount_point in ["proc", "dev", "tmp", "home/sandbox"] {
        std::fs::create_dir_all(root.join(mount_point)).unwrap();
    }
    let digest = format!("sha256:{}\n", "ab".repeat(32));
    std::fs::write(root.join(".brig-rootfs-digest"), digest).unwrap();
    let check = || {
        let output = run(
            Mode::Root,
            &["check", "--rootfs", root.to_str().unwrap(), "--", "true"],
        );
        assert_eq!(code(&output), 0, "{}", describe(&output));
        stdout(&output)
    };
    assert!(!check().contains("changed after its digest"), "{}", check());
    // A change is only seen once it is later than the recorded digest (with the 2 s the
    // build's final rename may take).
    std::thread::sleep(std::time::Duration::from_millis(3100));
    std::fs::write(root.join("added-later"), "x").unwrap();
    let text = check();
    assert!(
        text.contains("changed after its digest was recorded")
            && text.contains("brig rootfs verify"),
        "{text}"
    );
}

/// `--proc host`, the weaker mode for containers that refuse a fresh /proc: brig's own
/// /proc, read-only, and reported. The default fresh /proc shows only the jail.
fn proc_host_is_explicit_read_only_and_reported(mode: Mode) {
    let count = "ls /proc | grep -c '^[0-9]'";
    let fresh = run(mode, &["run", "--", "sh", "-c", count]);
    let fresh: u32 = assert_success(&fresh).trim().parse().unwrap();
    assert!(
        fresh <= 4,
        "a fresh /proc shows only the jail's processes: {fresh}"
    );

    let script = format!("{count}; echo x > /proc/self/comm || echo read-only");
    let host = run(mode, &["run", "--proc", "host", "--", "sh", "-c", &script]);
    let text = assert_success(&host);
    let seen: u32 = text.lines().next().unwrap().parse().unwrap();
    assert!(
        seen > fresh,
        "brig's /proc shows the host's processes: {text}"
    );
    assert!(text.ends_with("read-only\n"), "{text}");
    assert!(
        stderr(&host).contains("Read-only file system"),
        "{}",
        describe(&host)
    );

    let plan = run(mode, &["check", "--proc", "host", "--", "true"]);
    assert!(
        stdout(&plan).contains("--proc host: the jail sees brig's own /proc"),
        "{}",
        describe(&plan)
    );
}

both_modes!(proc_host_is_explicit_read_only_and_reported);

/// `brig --version` names the commit it was built from.
#[test]
fn version_names_the_commit() {
    let output = run(Mode::Root, &["--version"]);
    let text = assert_success(&output);
    assert!(text.starts_with("brig "), "{text}");
    let commit = text
        .split("(commit ")
        .nth(1)
        .and_then(|rest| rest.strip_suffix(")\n"))
        .unwrap_or_else(|| panic!("no commit in {text:?}"));
    let head = std::process::Command::new("git")
        .args(["rev-parse", "--short=12", "HEAD"])
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output()
        .expect("git");
    let head = String::from_utf8_lossy(&head.stdout).trim().to_string();
    assert!(
        commit.starts_with(&head),
        "--version says {commit}, HEAD is {head}"
    );
}

/// Under the default `--net none` a program can serve and test itself on the jail's own
/// loopback, over TCP (a Flask app, a test suite's local server, Jupyter's sockets).
fn loopback_tcp_works_inside_the_jail(mode: Mode) {
    let script = r#"
import socket, threading
server = socket.create_server(("127.0.0.1", 8080))
def serve():
    conn, _ = server.accept()
    conn.sendall(conn.recv(5).upper())
threading.Thread(target=serve).start()
client = socket.create_connection(("127.0.0.1", 8080), timeout=5)
client.sendall(b"hello")
print(client.recv(5).decode())
"#;
    let output = run(
        mode,
        &["run", "--profile", "python", "--", "python3", "-c", script],
    );
    assert_eq!(assert_success(&output), "HELLO\n");
}

both_modes!(loopback_tcp_works_inside_the_jail);

/// On a v1 (or hybrid) host, a cgroup that root created in each hierarchy and handed to an
/// unprivileged user is a delegated parent that user's brig can use with --cgroup-parent.
#[test]
fn rootless_brig_uses_a_chowned_v1_cgroup() {
    let v1 = std::path::Path::new("/sys/fs/cgroup/memory").is_dir();
    if !require(
        "a cgroup v1 memory hierarchy",
        "run on a hybrid or v1 host (on pure v2, tests/operators/cgroup_v2.rs covers delegation)",
        v1,
    ) {
        return;
    }
    let name = format!("bt-deleg-{}", std::process::id());
    let dirs: Vec<std::path::PathBuf> = ["memory", "pids"]
        .iter()
        .map(|controller| {
            std::path::Path::new("/sys/fs/cgroup")
                .join(controller)
                .join(&name)
        })
        .collect();
    for dir in &dirs {
        std::fs::create_dir(dir).unwrap();
        std::os::unix::fs::chown(dir, Some(NOBODY), Some(NOBODY)).unwrap();
        for file in ["cgroup.procs", "tasks"] {
            std::os::unix::fs::chown(dir.join(file), Some(NOBODY), Some(NOBODY)).unwrap();
        }
    }
    let parent = format!("/{name}");
    let output = run(
        Mode::Rootless,
        &[
            "run",
            "--cgroup-parent",
            &parent,
            "--memory",
            "64M",
            "--pids",
            "32",
            "--report-fd",
            "1",
            "--",
            "true",
        ],
    );
    let leftovers: Vec<_> = dirs
        .iter()
        .flat_map(|dir| std::fs::read_dir(dir).unwrap().flatten())
        .filter(|entry| entry.path().is_dir())
        .map(|entry| entry.path())
        .collect();
    for dir in &dirs {
        let _ = std::fs::remove_dir(dir);
    }
    assert_eq!(code(&output), 0, "{}", describe(&output));
    let verdict: serde_json::Value = serde_json::from_str(stdout(&output).trim()).unwrap();
    assert_eq!(verdict["protections"]["cgroup"], "v1", "{verdict}");
    assert_eq!(verdict["limits"]["memory_bytes"], 64 << 20, "{verdict}");
    assert!(
        leftovers.is_empty(),
        "the jail's cgroup was left: {leftovers:?}"
    );
}

/// A brig started with a real-time policy or a negative nice value does not pass them to
/// the jail, which could otherwise starve the host and brig itself.
#[test]
fn the_jail_runs_on_the_normal_scheduler() {
    if !require_root() {
        return;
    }
    let script = "import os; print(os.sched_getscheduler(0), os.nice(0))";
    let mut argv = vec![
        "chrt".to_string(),
        "-f".into(),
        "10".into(),
        "nice".into(),
        "-n".into(),
        "-5".into(),
    ];
    argv.push(brig().display().to_string());
    argv.extend(["run", "--quiet-limits", "--", "python3", "-c", script].map(String::from));
    let output = std::process::Command::new(&argv[0])
        .args(&argv[1..])
        .output()
        .unwrap();
    // SCHED_OTHER is 0; the caller's nice -5 is back to 0.
    assert_eq!(assert_success(&output), "0 0\n");
    // Proof the test can tell: without brig, the same program keeps both.
    let bare = std::process::Command::new("chrt")
        .args(["-f", "10", "nice", "-n", "-5", "python3", "-c", script])
        .output()
        .unwrap();
    assert_eq!(stdout(&bare), "1 -5\n", "{}", describe(&bare));
}
