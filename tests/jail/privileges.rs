//! Who the program is in the jail: its ids and how they map to the host, its capabilities,
//! setuid binaries, and the environment it gets. Each test tries to gain something and
//! shows that it cannot.

use crate::common;

use common::*;
use std::os::unix::fs::MetadataExt;

both_modes!(
    jail_user_maps_to_an_unprivileged_host_user,
    chosen_jail_ids_still_map_to_the_unprivileged_host_user,
    host_ids_can_be_chosen_only_as_root,
    capabilities_are_empty_and_no_new_privs_is_set,
    setuid_binaries_do_not_raise_privileges,
    host_secret_in_brigs_environment_is_absent_inside,
    term_is_passed_through_when_set,
);

const IDENTITY_SCRIPT: &str = r#"
import errno, os, pwd
print("uid", os.getuid(), os.geteuid())
print("gid", os.getgid(), os.getegid())
print("groups", *os.getgroups())
print("user", pwd.getpwuid(os.getuid()).pw_name)
print("setgroups", open("/proc/self/setgroups").read().strip())
for name in ["uid_map", "gid_map"]:
    lines = open(f"/proc/self/{name}").read().splitlines()
    print(name + "-lines", len(lines))
    print(name, *lines[0].split())
for label, action in [("setuid-0", lambda: os.setuid(0)), ("setgroups-0", lambda: os.setgroups([0]))]:
    try:
        action()
        print(label, "OK")
    except OSError as e:
        print(label, errno.errorcode[e.errno])
with open("/out/written", "w") as f:
    f.write("from the jail\n")
os.mkdir("/out/dir")
"#;

/// Runs the identity script with a writable /out and returns its output and the host
/// owner (uid, gid) of the file and the directory it created there.
fn identity(mode: Mode, extra: &[&str]) -> (String, Vec<(u32, u32)>) {
    let out_dir = TempDir::new("out").writable_by_all();
    let bind = format!("{}:/out", out_dir.str());
    let mut args = vec!["run", "--bind", &bind];
    args.extend_from_slice(extra);
    args.extend(["--", "python3", "-c", IDENTITY_SCRIPT]);
    let out = assert_success(&run(mode, &args));
    let owners = ["written", "dir"]
        .iter()
        .map(|name| {
            let meta = std::fs::metadata(out_dir.path().join(name)).unwrap();
            (meta.uid(), meta.gid())
        })
        .collect();
    (out, owners)
}

fn assert_common_identity(out: &str) {
    assert_eq!(field(out, "user"), "sandbox", "{out}");
    assert_eq!(field(out, "setgroups"), "deny", "{out}");
    assert_eq!(field(out, "uid_map-lines"), "1", "{out}");
    assert_eq!(field(out, "gid_map-lines"), "1", "{out}");
    // uid 0 is not mapped in the jail's user namespace: EINVAL rather than EPERM.
    let setuid = field(out, "setuid-0");
    assert!(setuid == "EINVAL" || setuid == "EPERM", "setuid(0): {out}");
    assert_eq!(field(out, "setgroups-0"), "EPERM", "{out}");
}

/// The host id the jail's user maps to: rootless the caller's, as root one of the default
/// per-jail range's (uid and gid of the same number).
fn jail_host_id(mode: Mode, out: &str) -> u32 {
    let host: u32 = field(out, "uid_map")
        .split_whitespace()
        .nth(1)
        .and_then(|id| id.parse().ok())
        .unwrap_or_else(|| panic!("no uid_map: {out}"));
    match mode {
        Mode::Rootless => assert_eq!(host, mode.host_id(), "{out}"),
        Mode::Root => assert!((0x7000_0000..=0x7000_FFFF).contains(&host), "{out}"),
    }
    host
}

fn jail_user_maps_to_an_unprivileged_host_user(mode: Mode) {
    let (out, owners) = identity(mode, &[]);
    assert_eq!(field(&out, "uid"), "1000 1000", "{out}");
    assert_eq!(field(&out, "gid"), "1000 1000", "{out}");
    let groups = field(&out, "groups");
    assert!(
        groups.split_whitespace().all(|g| g == "1000"),
        "no supplementary group of the host may follow the program: {out}"
    );
    assert_common_identity(&out);
    let host = jail_host_id(mode, &out);
    assert_eq!(field(&out, "uid_map"), format!("1000 {host} 1"), "{out}");
    assert_eq!(field(&out, "gid_map"), format!("1000 {host} 1"), "{out}");
    for owner in owners {
        assert_eq!(owner, (host, host));
        assert_ne!(owner.0, 0, "the jail wrote a file as host root");
    }
}

fn chosen_jail_ids_still_map_to_the_unprivileged_host_user(mode: Mode) {
    let (out, owners) = identity(mode, &["--uid", "1234", "--gid", "2345"]);
    assert_eq!(field(&out, "uid"), "1234 1234", "{out}");
    assert_eq!(field(&out, "gid"), "2345 2345", "{out}");
    assert_common_identity(&out);
    let host = jail_host_id(mode, &out);
    assert_eq!(field(&out, "uid_map"), format!("1234 {host} 1"), "{out}");
    assert_eq!(field(&out, "gid_map"), format!("2345 {host} 1"), "{out}");
    for owner in owners {
        assert_eq!(owner, (host, host));
    }
}

fn host_ids_can_be_chosen_only_as_root(mode: Mode) {
    let chosen = ["--host-uid", "4321", "--host-gid", "4322"];
    match mode {
        Mode::Root => {
            let (out, owners) = identity(mode, &chosen);
            assert_eq!(field(&out, "uid"), "1000 1000", "{out}");
            assert_eq!(field(&out, "uid_map"), "1000 4321 1", "{out}");
            assert_eq!(field(&out, "gid_map"), "1000 4322 1", "{out}");
            for owner in owners {
                assert_eq!(owner, (4321, 4322));
            }
        }
        Mode::Rootless => {
            // An unprivileged user may not pick someone else's ids...
            let mut args = vec!["run"];
            args.extend(with_program(&chosen, &["true"]));
            assert_one_line_error(&run(mode, &args), &["--host-uid"]);
            // ...but naming their own is fine.
            let (out, owners) = identity(mode, &["--host-uid", "65534", "--host-gid", "65534"]);
            assert_eq!(field(&out, "uid_map"), "1000 65534 1", "{out}");
            for owner in owners {
                assert_eq!(owner, (NOBODY, NOBODY));
            }
        }
    }
}

fn capabilities_are_empty_and_no_new_privs_is_set(mode: Mode) {
    let out = assert_success(&run(mode, &["run", "--", "cat", "/proc/self/status"]));
    let value = |key: &str| {
        out.lines()
            .find_map(|line| line.strip_prefix(&format!("{key}:")))
            .unwrap_or_else(|| panic!("no {key} in /proc/self/status:\n{out}"))
            .trim()
            .to_string()
    };
    for key in ["CapInh", "CapPrm", "CapEff", "CapBnd", "CapAmb"] {
        assert_eq!(value(key), "0000000000000000", "{key}");
    }
    assert_eq!(value("NoNewPrivs"), "1");
    assert_eq!(value("Seccomp").len(), 1);
}

fn setuid_binaries_do_not_raise_privileges(mode: Mode) {
    // A setuid-root copy of `id`: if the bit worked, `id -u` would print 0.
    let dir = TempDir::new("suid");
    let suid_id = dir.path().join("id");
    std::fs::copy("/usr/bin/id", &suid_id).unwrap();
    std::os::unix::fs::chown(&suid_id, Some(0), Some(0)).unwrap();
    set_mode(&suid_id, 0o4755);
    let bind = format!("{}:/opt/suid", dir.str());
    let script = r#"
import os, subprocess
print("suid-bit", bool(os.stat("/opt/suid/id").st_mode & 0o4000))
print("suid-euid", subprocess.run(["/opt/suid/id", "-u"], capture_output=True, text=True).stdout.strip())
host_suid = "/usr/bin/su"
if os.path.exists(host_suid):
    print("host-suid-bit", bool(os.stat(host_suid).st_mode & 0o4000))
for line in open("/proc/self/mountinfo"):
    fields = line.split()
    print("mount", fields[4], fields[5])
"#;
    let out = assert_success(&run(
        mode,
        &["run", "--ro-bind", &bind, "--", "python3", "-c", script],
    ));
    assert_eq!(field(&out, "suid-bit"), "True", "{out}");
    assert_eq!(field(&out, "suid-euid"), "1000", "{out}");
    let mounts: Vec<(String, String)> = fields(&out)
        .into_iter()
        .filter(|(key, _)| key == "mount")
        .map(|(_, rest)| {
            let (point, options) = rest.split_once(' ').unwrap();
            (point.to_string(), options.to_string())
        })
        .collect();
    let options_of = |point: &str| {
        mounts
            .iter()
            .find(|(p, _)| p == point)
            .map(|(_, o)| o.split(',').map(str::to_string).collect::<Vec<_>>())
            .unwrap_or_else(|| panic!("{point} is not a mount in the jail:\n{out}"))
    };
    for point in ["/usr", "/opt/suid"] {
        let options = options_of(point);
        for flag in ["ro", "nosuid", "nodev"] {
            assert!(
                options.iter().any(|o| o == flag),
                "{point} lacks {flag}: {options:?}"
            );
        }
    }
    for (point, options) in &mounts {
        assert!(
            options.split(',').any(|o| o == "nosuid"),
            "{point} is not nosuid: {options}"
        );
    }
}

const ENV_SCRIPT: &str = r#"
import ctypes, errno, os
for name, value in sorted(os.environ.items()):
    print("env", f"{name}={value}")
for pid in sorted(p for p in os.listdir("/proc") if p.isdigit()):
    try:
        data = open(f"/proc/{pid}/environ", "rb").read()
        print("environ", pid, "SECRET" if b"s3cr3t" in data else "clean")
    except OSError as e:
        print("environ", pid, errno.errorcode[e.errno])
libc = ctypes.CDLL(None, use_errno=True)
PTRACE_ATTACH = 16
ret = libc.ptrace(PTRACE_ATTACH, 1, None, None)
print("ptrace-init", "OK" if ret == 0 else errno.errorcode[ctypes.get_errno()])
"#;

fn env_lines(out: &str) -> Vec<String> {
    fields(out)
        .into_iter()
        .filter(|(key, _)| key == "env")
        .map(|(_, var)| var)
        .collect()
}

fn host_secret_in_brigs_environment_is_absent_inside(mode: Mode) {
    let mut jail = command(
        mode,
        &[
            "run",
            "--env",
            "K=V",
            "--env",
            "EMPTY=",
            "--env-pass",
            "BRIG_TEST_PASSED",
            "--env-pass",
            "BRIG_TEST_NOT_SET",
            "--",
            "python3",
            "-c",
            ENV_SCRIPT,
        ],
    );
    jail.env("BRIG_TEST_SECRET", "s3cr3t")
        .env("BRIG_TEST_PASSED", "passed-value")
        .env_remove("BRIG_TEST_NOT_SET");
    let out = assert_success(&output_of(jail));
    assert_eq!(
        env_lines(&out),
        [
            "BRIG_TEST_PASSED=passed-value",
            "EMPTY=",
            "HOME=/home/sandbox",
            "K=V",
            "LANG=C.UTF-8",
            "PATH=/usr/local/bin:/usr/bin:/bin",
        ],
        "{out}"
    );
    let environs: Vec<(String, String)> = fields(&out)
        .into_iter()
        .filter(|(key, _)| key == "environ")
        .map(|(_, rest)| {
            let (pid, what) = rest.split_once(' ').unwrap();
            (pid.to_string(), what.to_string())
        })
        .collect();
    assert!(environs.len() >= 2, "{out}");
    for (pid, what) in &environs {
        if pid == "1" {
            // Init is brig's fork and holds brig's environment: it must stay unreadable.
            assert_eq!(what, "EACCES", "/proc/1/environ:\n{out}");
        } else {
            assert_eq!(what, "clean", "/proc/{pid}/environ:\n{out}");
        }
    }
    assert_eq!(field(&out, "ptrace-init"), "EPERM", "{out}");

    // And with nothing added, the environment is exactly PATH, HOME and LANG.
    assert_eq!(
        jail_environment(mode, "BRIG_TEST_SECRET", "s3cr3t"),
        [
            "HOME=/home/sandbox",
            "LANG=C.UTF-8",
            "PATH=/usr/local/bin:/usr/bin:/bin"
        ]
    );
}

/// The program's environment, sorted, when brig runs with `name=value` in its own.
fn jail_environment(mode: Mode, name: &str, value: &str) -> Vec<String> {
    let mut jail = command(mode, &["run", "--", "/usr/bin/env"]);
    jail.env(name, value);
    let out = assert_success(&output_of(jail));
    let mut vars: Vec<String> = out.lines().map(String::from).collect();
    vars.sort();
    vars
}

fn term_is_passed_through_when_set(mode: Mode) {
    assert_eq!(
        jail_environment(mode, "TERM", "xterm-brig-test"),
        [
            "HOME=/home/sandbox",
            "LANG=C.UTF-8",
            "PATH=/usr/local/bin:/usr/bin:/bin",
            "TERM=xterm-brig-test"
        ]
    );
}
