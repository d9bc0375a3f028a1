//! `brig rootfs build`: hermetic roots that a jail runs in with `--rootfs`, seeing nothing
//! of the host's /usr; reproducible to the byte; reported in the verdict.

use crate::common;

use common::{Mode, TempDir, assert_one_line_error, assert_success, code, stderr, stdout};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;

/// Runs `brig rootfs ...` (as root, the test's user) and returns its output.
fn rootfs(args: &[&str]) -> std::process::Output {
    let mut command = Command::new(common::brig());
    command.arg("rootfs").args(args);
    common::output_of(command)
}

/// Builds `manifest` into `dir/name`, with a tar archive beside it; returns the digest.
fn build(manifest: &str, dir: &TempDir, name: &str) -> (PathBuf, String) {
    let out = dir.path().join(name);
    let tar = dir.path().join(format!("{name}.tar"));
    let output = rootfs(&[
        "build",
        manifest,
        out.to_str().unwrap(),
        "--tar",
        tar.to_str().unwrap(),
    ]);
    let printed = assert_success(&output);
    let digest = printed
        .split_whitespace()
        .next()
        .unwrap_or_default()
        .to_string();
    assert!(digest.starts_with("sha256:"), "{printed}");
    let recorded = std::fs::read_to_string(out.join(".brig-rootfs-digest")).unwrap();
    assert_eq!(recorded.trim(), digest);
    (out, digest)
}

/// The python root, built once for the tests of this file and removed at exit.
fn python_root() -> &'static (TempDir, PathBuf, String) {
    static ROOT: OnceLock<(TempDir, PathBuf, String)> = OnceLock::new();
    ROOT.get_or_init(|| {
        let dir = TempDir::new("rootfs-python");
        let (out, digest) = build("python", &dir, "root");
        SHARED.set(dir.path().to_path_buf()).unwrap();
        // SAFETY: registers a plain `extern "C" fn()` to run at process exit.
        unsafe {
            libc::atexit(remove_shared_root);
        }
        (dir, out, digest)
    })
}

static SHARED: OnceLock<PathBuf> = OnceLock::new();

extern "C" fn remove_shared_root() {
    if let Some(dir) = SHARED.get() {
        let _ = std::fs::remove_dir_all(dir);
    }
}

/// The host's python3 and the file it resolves to, e.g. ["python3", "python3.11"].
fn host_python_names() -> Vec<String> {
    let real = std::fs::canonicalize("/usr/bin/python3").expect("python3 on the host");
    let mut names = vec![
        "python3".to_string(),
        real.file_name().unwrap().to_string_lossy().into_owned(),
    ];
    names.sort();
    names.dedup();
    names
}

const LOOK_AROUND: &str = r#"
import os, sys, json, ssl, sqlite3, ctypes, hashlib
print(json.dumps({
    "version": sys.version.split()[0],
    "root": sorted(os.listdir("/")),
    "usr": sorted(os.listdir("/usr")),
    "usr_bin": sorted(os.listdir("/usr/bin")),
    "share": os.path.exists("/usr/share"),
    "perl": os.path.exists("/usr/bin/perl"),
    "user": os.getuid(),
    "sha": hashlib.sha256(b"x").hexdigest()[:8],
}))
"#;

fn python_sees_only_its_root(mode: Mode) {
    let (_, root, digest) = python_root();
    let report = TempDir::new("rootfs-report").writable_by_all();
    let verdict_path = report.path().join("verdict.json");
    let output = common::run(
        mode,
        &[
            "run",
            "--rootfs",
            root.to_str().unwrap(),
            "--profile",
            "python",
            "--report",
            verdict_path.to_str().unwrap(),
            "--",
            "python3",
            "-c",
            LOOK_AROUND,
        ],
    );
    let printed = assert_success(&output);
    let seen: serde_json::Value = serde_json::from_str(printed.trim()).expect("JSON from the jail");
    // Exactly the manifest's programs: python3 and the file it links to.
    let usr_bin: Vec<String> = serde_json::from_value(seen["usr_bin"].clone()).unwrap();
    assert_eq!(usr_bin, host_python_names(), "{seen}");
    let usr: Vec<String> = serde_json::from_value(seen["usr"].clone()).unwrap();
    assert!(
        usr.iter()
            .all(|dir| ["bin", "lib", "lib64"].contains(&dir.as_str())),
        "the jail's /usr has more than bin, lib, lib64: {usr:?}"
    );
    assert_eq!(seen["share"], false, "/usr/share is the host's: {seen}");
    assert_eq!(seen["perl"], false, "{seen}");
    assert_eq!(seen["user"], 1000, "{seen}");
    let verdict: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&verdict_path).unwrap()).unwrap();
    assert_eq!(verdict["status"], "ok", "{verdict}");
    assert_eq!(verdict["protections"]["rootfs"]["digest"], digest.as_str());
    assert_eq!(
        verdict["protections"]["rootfs"]["path"],
        root.to_str().unwrap()
    );
}

both_modes!(python_sees_only_its_root);

#[test]
fn python_root_is_reproducible_to_the_byte() {
    let (first_dir, first, digest) = python_root();
    let dir = TempDir::new("rootfs-again");
    let (second, again) = build("python", &dir, "root");
    assert_eq!(&again, digest, "the same manifest gave another digest");
    let tar_of = |out: &Path| std::fs::read(out.with_extension("tar")).unwrap();
    let first_tar = tar_of(first);
    assert!(
        first_tar == tar_of(&second),
        "the two tar archives differ ({} and {})",
        first_dir.str(),
        dir.str()
    );
    // Every time in the archive is 0 (no SOURCE_DATE_EPOCH), owners are root.
    let listing = Command::new("tar")
        .args(["--numeric-owner", "-tvf"])
        .arg(second.with_extension("tar"))
        .output()
        .unwrap();
    let listing = String::from_utf8_lossy(&listing.stdout);
    assert!(listing.lines().count() > 100, "{listing}");
    for line in listing.lines() {
        assert!(line.contains(" 0/0 "), "owner is not 0/0: {line}");
        assert!(line.contains("1970-01-01 00:00"), "time is not 0: {line}");
    }
    // The archive extracts to the same root: verify recomputes the same digest.
    let extracted = dir.path().join("extracted");
    std::fs::create_dir(&extracted).unwrap();
    let status = Command::new("tar")
        .arg("-xf")
        .arg(second.with_extension("tar"))
        .arg("-C")
        .arg(&extracted)
        .status()
        .unwrap();
    assert!(status.success());
    let verified = rootfs(&["verify", extracted.to_str().unwrap()]);
    assert!(assert_success(&verified).starts_with(digest.as_str()));
}

#[test]
fn verify_names_what_changed() {
    let dir = TempDir::new("rootfs-tamper");
    let manifest = dir.file(
        "m.yaml",
        "programs: [/bin/true]\nwrite:\n  /srv/task.txt: \"hello\\n\"\n",
    );
    let (root, _) = build(manifest.to_str().unwrap(), &dir, "root");
    assert_success(&rootfs(&["verify", root.to_str().unwrap()]));
    std::fs::write(root.join("srv/task.txt"), "changed\n").unwrap();
    let output = rootfs(&["verify", root.to_str().unwrap()]);
    assert_one_line_error(
        &output,
        &["the root changed since it was built", "/srv/task.txt"],
    );
}

#[test]
fn node_root_has_node_and_nothing_else() {
    if !common::require(
        "/usr/bin/node",
        "tests/run.sh installs it (Debian package nodejs)",
        Path::new("/usr/bin/node").exists(),
    ) {
        return;
    }
    let dir = TempDir::new("rootfs-node");
    let (root, _) = build("node", &dir, "root");
    let output = common::run(
        Mode::Root,
        &[
            "run",
            "--rootfs",
            root.to_str().unwrap(),
            "--profile",
            "node",
            "--",
            "node",
            "-e",
            "const fs = require('fs'); console.log(JSON.stringify([fs.readdirSync('/usr/bin'), fs.existsSync('/usr/share'), fs.existsSync('/usr/lib/node_modules')]))",
        ],
    );
    assert_eq!(assert_success(&output).trim(), r#"[["node"],false,false]"#);
}

#[test]
fn shell_root_is_busybox_from_debian() {
    let dir = TempDir::new("rootfs-shell");
    let out = dir.path().join("root");
    let output = rootfs(&["build", "shell", out.to_str().unwrap()]);
    assert_success(&output);
    assert!(
        stderr(&output).contains("unpacked busybox-static_"),
        "{}",
        stderr(&output)
    );
    for mode in [Mode::Root, Mode::Rootless] {
        let output = common::run(
            mode,
            &[
                "run",
                "--rootfs",
                out.to_str().unwrap(),
                "--",
                "sh",
                "-c",
                "echo hello from $(id -un); ls /; test -e /usr && echo HOST-USR; readlink /bin/sh",
            ],
        );
        let printed = assert_success(&output);
        assert!(printed.starts_with("hello from sandbox\n"), "{printed}");
        assert!(!printed.contains("HOST-USR"), "{printed}");
        assert!(printed.trim_end().ends_with("busybox"), "{printed}");
    }
}

#[test]
fn manifest_mistakes_are_one_line_errors() {
    let dir = TempDir::new("rootfs-errors");
    let out = dir.path().join("out");
    let out = out.to_str().unwrap();
    let unknown = dir.file("unknown.yaml", "programs: [/bin/true]\nprogram: [ls]\n");
    assert_one_line_error(
        &rootfs(&["build", unknown.to_str().unwrap(), out]),
        &["unknown.yaml:2:1: unknown field `program`"],
    );
    let missing = dir.file("missing.yaml", "programs: [no-such-program-brig]\n");
    assert_one_line_error(
        &rootfs(&["build", missing.to_str().unwrap(), out]),
        &["no-such-program-brig: not found"],
    );
    assert_one_line_error(
        &rootfs(&["build", "python3000", out]),
        &["no such shipped manifest", "python, node, shell"],
    );
    // An existing directory that is not a root brig built is never replaced.
    let taken = dir.path().join("taken");
    std::fs::create_dir(&taken).unwrap();
    std::fs::write(taken.join("keep"), "mine").unwrap();
    let ok = dir.file("ok.yaml", "programs: [/bin/true]\n");
    let output = rootfs(&[
        "build",
        ok.to_str().unwrap(),
        taken.to_str().unwrap(),
        "--force",
    ]);
    assert_one_line_error(&output, &["is not a root brig built"]);
    assert_eq!(std::fs::read_to_string(taken.join("keep")).unwrap(), "mine");
    // A root brig built is replaced only with --force.
    assert_success(&rootfs(&["build", ok.to_str().unwrap(), out]));
    assert_one_line_error(&rootfs(&["build", ok.to_str().unwrap(), out]), &["--force"]);
    assert_success(&rootfs(&["build", ok.to_str().unwrap(), out, "--force"]));
    // Nothing is left beside the output.
    let mut names: Vec<String> = std::fs::read_dir(dir.path())
        .unwrap()
        .map(|entry| entry.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    assert_eq!(
        names,
        ["missing.yaml", "ok.yaml", "out", "taken", "unknown.yaml"]
    );
}

#[test]
fn shipped_manifests_are_printed() {
    let output = rootfs(&["show", "python"]);
    assert!(stdout(&output).contains("programs:"), "{}", stdout(&output));
    assert_eq!(code(&output), 0);
}
