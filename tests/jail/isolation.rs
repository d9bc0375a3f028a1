//! The jail's view of the host: files, mounts, processes, network and hostname. Each test
//! tries to reach something of the host's from inside and shows that it cannot.

use crate::common;

use common::*;
use std::collections::BTreeSet;
use std::path::Path;

both_modes!(
    host_files_outside_the_binds_are_invisible,
    read_only_mounts_cannot_be_written_or_remounted,
    tmp_and_home_are_writable_but_size_limited,
    host_processes_are_invisible,
    network_has_only_loopback_and_it_is_up,
    net_host_shares_the_host_interfaces,
    hostname_is_private_to_the_jail,
    working_directory_is_home_unless_chdir,
    dev_is_minimal_and_device_nodes_cannot_be_made,
    rootfs_replaces_the_root_and_stays_read_only,
);

fn set_of<'a>(items: impl IntoIterator<Item = &'a str>) -> BTreeSet<String> {
    items.into_iter().map(str::to_string).collect()
}

fn words(text: &str) -> BTreeSet<String> {
    set_of(text.split_whitespace())
}

/// What the default jail's / and /etc should contain on this host.
fn expected_root_and_etc() -> (BTreeSet<String>, BTreeSet<String>) {
    let mut root = set_of(["dev", "etc", "home", "proc", "tmp"]);
    for dir in ["usr", "bin", "sbin", "lib", "lib64", "lib32", "libx32"] {
        let host = Path::new("/").join(dir);
        if let Ok(meta) = std::fs::symlink_metadata(&host)
            && (meta.is_dir() || meta.file_type().is_symlink())
        {
            root.insert(dir.to_string());
        }
    }
    let mut etc = set_of(["group", "hostname", "hosts", "nsswitch.conf", "passwd"]);
    if Path::new("/etc/ld.so.cache").exists() {
        etc.insert("ld.so.cache".into());
    }
    if Path::new("/etc/ssl/certs").exists() {
        etc.insert("ssl".into());
    }
    if Path::new("/etc/alternatives").exists() {
        etc.insert("alternatives".into());
    }
    if Path::new("/etc/pki/tls/certs").exists() || Path::new("/etc/pki/ca-trust/extracted").exists()
    {
        etc.insert("pki".into());
    }
    (root, etc)
}

fn host_files_outside_the_binds_are_invisible(mode: Mode) {
    let dir = TempDir::new("canary");
    let in_dir = dir.file("canary.txt", "host secret");
    let in_tmp = TempFile::new("canary", "host secret");
    let host_secrets = ["/etc/shadow", "/etc/os-release", "/root"];
    for path in host_secrets {
        assert!(Path::new(path).exists(), "host should have {path}");
    }
    let script = r#"
import os, sys
for path in sys.argv[1:]:
    print("exists", path, os.path.lexists(path))
for name, path in [("root", "/"), ("etc", "/etc"), ("etc-ssl", "/etc/ssl"), ("home", "/home"), ("tmp", "/tmp")]:
    print(name, *sorted(os.listdir(path)))
"#;
    let mut args = vec!["run", "--", "python3", "-c", script];
    let in_dir = in_dir.to_str().unwrap();
    args.extend([in_dir, dir.str(), in_tmp.str()]);
    args.extend(host_secrets);
    let out = assert_success(&run(mode, &args));

    let exists: Vec<(String, String)> = fields(&out)
        .into_iter()
        .filter(|(key, _)| key == "exists")
        .collect();
    assert_eq!(exists.len(), 3 + host_secrets.len(), "{out}");
    for (_, line) in exists {
        assert!(
            line.ends_with(" False"),
            "visible in the jail: {line}\n{out}"
        );
    }
    let (root, etc) = expected_root_and_etc();
    assert_eq!(words(&field(&out, "root")), root, "{out}");
    assert_eq!(words(&field(&out, "etc")), etc, "{out}");
    if etc.contains("ssl") {
        // Only the CA certificates: not /etc/ssl/private or openssl.cnf.
        assert_eq!(field(&out, "etc-ssl"), "certs", "{out}");
    }
    assert_eq!(field(&out, "home"), "sandbox", "{out}");
    assert_eq!(
        field(&out, "tmp"),
        "",
        "the jail's /tmp should start empty: {out}"
    );
}

const MOUNT_ATTACKS: &str = r#"
import ctypes, errno, os
libc = ctypes.CDLL(None, use_errno=True)
MS_REMOUNT, MS_BIND, MNT_DETACH = 32, 4096, 2
CLONE_NEWNS, CLONE_NEWUSER = 0x20000, 0x10000000

def name(err):
    return errno.errorcode.get(err, str(err))

def attempt(label, action):
    try:
        action()
        print(label, "OK")
    except OSError as e:
        print(label, name(e.errno))

def call(label, ret):
    print(label, "OK" if ret == 0 else name(ctypes.get_errno()))

def remount_all(prefix):
    for target in ["/usr", "/", "/ro"]:
        call(prefix + target, libc.mount(None, target.encode(), None, MS_REMOUNT | MS_BIND, None))

attempt("create-in-usr", lambda: open("/usr/brig-test-x", "w").close())
attempt("create-in-root", lambda: open("/brig-test-x", "w").close())
attempt("mkdir-in-etc", lambda: os.mkdir("/etc/brig-test-x"))
attempt("append-passwd", lambda: open("/etc/passwd", "a").close())
attempt("create-in-ro-bind", lambda: open("/ro/x", "w").close())
remount_all("remount:")
call("umount:/usr", libc.umount2(b"/usr", MNT_DETACH))
# Every capability of a nested user namespace must not unlock the mounts either.
if libc.unshare(CLONE_NEWUSER | CLONE_NEWNS) != 0:
    print("nested-unshare", name(ctypes.get_errno()))
else:
    print("nested-unshare OK")
    remount_all("nested-remount:")
    attempt("nested-create-in-usr", lambda: open("/usr/brig-test-x", "w").close())
    attempt("nested-create-in-ro-bind", lambda: open("/ro/x", "w").close())
"#;

fn read_only_mounts_cannot_be_written_or_remounted(mode: Mode) {
    // 0777 on the host: only the read-only bind stops the jail from writing there.
    let ro = TempDir::new("ro").writable_by_all();
    let bind = format!("{}:/ro", ro.str());
    let out = assert_success(&run(
        mode,
        &[
            "run",
            "--ro-bind",
            &bind,
            "--",
            "python3",
            "-c",
            MOUNT_ATTACKS,
        ],
    ));
    for key in [
        "create-in-usr",
        "create-in-root",
        "mkdir-in-etc",
        "append-passwd",
        "create-in-ro-bind",
    ] {
        assert_eq!(field(&out, key), "EROFS", "{key}:\n{out}");
    }
    for key in ["remount:/usr", "remount:/", "remount:/ro", "umount:/usr"] {
        assert_eq!(field(&out, key), "EPERM", "{key}:\n{out}");
    }
    if field(&out, "nested-unshare") == "OK" {
        for key in [
            "nested-remount:/usr",
            "nested-remount:/",
            "nested-remount:/ro",
        ] {
            assert_eq!(field(&out, key), "EPERM", "{key}:\n{out}");
        }
        for key in ["nested-create-in-usr", "nested-create-in-ro-bind"] {
            assert_eq!(field(&out, key), "EROFS", "{key}:\n{out}");
        }
    }
    let left: Vec<_> = std::fs::read_dir(ro.path()).unwrap().collect();
    assert!(left.is_empty(), "the jail wrote into a read-only bind");
}

fn tmp_and_home_are_writable_but_size_limited(mode: Mode) {
    let script = r#"
import errno, os
def fill(path, size):
    try:
        with open(path, "wb") as f:
            f.write(b"x" * size)
        return "OK"
    except OSError as e:
        return errno.errorcode[e.errno]
MiB = 1 << 20
home = os.environ["HOME"]
print("tmp-small", fill("/tmp/small", 4096))
print("tmp-2MiB", fill("/tmp/big", 2 * MiB))
print("home-small", fill(home + "/small", 4096))
print("home-2MiB", fill(home + "/big", 2 * MiB))
print("data-1MiB", fill("/data/first", MiB))
print("data-2MiB-more", fill("/data/second", 2 * MiB))
"#;
    let out = assert_success(&run(
        mode,
        &[
            "run",
            "--tmpfs-size",
            "1M",
            "--tmpfs",
            "/data:2M",
            "--",
            "python3",
            "-c",
            script,
        ],
    ));
    for (key, expected) in [
        ("tmp-small", "OK"),
        ("tmp-2MiB", "ENOSPC"),
        ("home-small", "OK"),
        ("home-2MiB", "ENOSPC"),
        ("data-1MiB", "OK"),
        ("data-2MiB-more", "ENOSPC"),
    ] {
        assert_eq!(field(&out, key), expected, "{key}:\n{out}");
    }

    // The same through the shell, with the message a user sees.
    let output = run(
        mode,
        &[
            "run",
            "--tmpfs-size",
            "1M",
            "--",
            "sh",
            "-c",
            "head -c 2097152 /dev/zero > /tmp/fill",
        ],
    );
    assert_ne!(code(&output), 0, "{}", describe(&output));
    assert!(
        stderr(&output).contains("No space left on device"),
        "{}",
        describe(&output)
    );
}

fn host_processes_are_invisible(mode: Mode) {
    let script = r#"
import errno, os, sys
pids = sorted(int(p) for p in os.listdir("/proc") if p.isdigit())
print("pids", *pids)
print("self", os.getpid())
print("parent", os.getppid())
print("init", open("/proc/1/comm").read().strip())
comms = set()
for pid in pids:
    try:
        comms.add(open(f"/proc/{pid}/comm").read().strip())
    except OSError:
        pass
print("comms", *sorted(comms))
try:
    os.kill(int(sys.argv[1]), 0)
    print("signal-host OK")
except OSError as e:
    print("signal-host", errno.errorcode[e.errno])
"#;
    let test_pid = std::process::id().to_string();
    let out = assert_success(&run(
        mode,
        &["run", "--", "python3", "-c", script, &test_pid],
    ));
    let pids: Vec<u32> = field(&out, "pids")
        .split_whitespace()
        .map(|p| p.parse().unwrap())
        .collect();
    assert!(pids.len() < 10, "too many processes visible: {out}");
    assert!(pids.contains(&1), "{out}");
    assert!(
        !pids.contains(&std::process::id()),
        "the test is visible: {out}"
    );
    let own: u32 = field(&out, "self").parse().unwrap();
    assert_ne!(own, 1, "the program must not be PID 1: {out}");
    assert!(pids.contains(&own), "{out}");
    assert_eq!(field(&out, "parent"), "1", "{out}");
    assert_eq!(field(&out, "init"), "brig-init", "{out}");
    assert_eq!(field(&out, "comms"), "brig-init python3", "{out}");
    assert_eq!(field(&out, "signal-host"), "ESRCH", "{out}");
}

const NET_SCRIPT: &str = r#"
import errno, socket
lines = open("/proc/net/dev").read().splitlines()[2:]
print("ifaces", *sorted(line.split(":")[0].strip() for line in lines))
# UDP here; TCP on the jail's own lo is tests/operators/first_minutes.rs.
server = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
server.bind(("127.0.0.1", 0))
server.settimeout(5)
client = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
client.sendto(b"ping", server.getsockname())
print("loopback", server.recv(4).decode())
outside = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
outside.settimeout(2)
try:
    outside.connect(("192.0.2.1", 80))
    print("outside OK")
except OSError as e:
    print("outside", errno.errorcode.get(e.errno, e.errno))
"#;

fn network_has_only_loopback_and_it_is_up(mode: Mode) {
    let out = assert_success(&run(mode, &["run", "--", "python3", "-c", NET_SCRIPT]));
    assert_eq!(field(&out, "ifaces"), "lo", "{out}");
    assert_eq!(field(&out, "loopback"), "ping", "{out}");
    assert_eq!(field(&out, "outside"), "ENETUNREACH", "{out}");
}

fn host_interfaces() -> BTreeSet<String> {
    std::fs::read_to_string("/proc/net/dev")
        .unwrap()
        .lines()
        .skip(2)
        .filter_map(|line| Some(line.split_once(':')?.0.trim().to_string()))
        .collect()
}

fn net_host_shares_the_host_interfaces(mode: Mode) {
    let host = host_interfaces();
    assert!(
        host.len() > 1,
        "the host should have more than lo: {host:?}"
    );
    let out = assert_success(&run(
        mode,
        &["run", "--net", "host", "--", "python3", "-c", NET_SCRIPT],
    ));
    assert_eq!(words(&field(&out, "ifaces")), host, "{out}");
    assert_eq!(field(&out, "loopback"), "ping", "{out}");
}

fn host_hostname() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .unwrap()
        .trim()
        .to_string()
}

fn hostname_is_private_to_the_jail(mode: Mode) {
    let script = r#"
import ctypes, errno, socket
print("hostname", socket.gethostname())
print("etc-hostname", open("/etc/hostname").read().strip())
libc = ctypes.CDLL(None, use_errno=True)
ret = libc.sethostname(b"evil", 4)
print("sethostname", "OK" if ret == 0 else errno.errorcode[ctypes.get_errno()])
"#;
    let before = host_hostname();
    let out = assert_success(&run(mode, &["run", "--", "python3", "-c", script]));
    assert_eq!(field(&out, "hostname"), "brig", "{out}");
    assert_eq!(field(&out, "etc-hostname"), "brig", "{out}");
    assert_eq!(field(&out, "sethostname"), "EPERM", "{out}");

    let out = assert_success(&run(
        mode,
        &[
            "run",
            "--hostname",
            "judge-7",
            "--",
            "python3",
            "-c",
            script,
        ],
    ));
    assert_eq!(field(&out, "hostname"), "judge-7", "{out}");
    assert_eq!(field(&out, "etc-hostname"), "judge-7", "{out}");
    assert_eq!(host_hostname(), before, "the host's hostname changed");
}

fn working_directory_is_home_unless_chdir(mode: Mode) {
    let out = assert_success(&run(mode, &["run", "--", "sh", "-c", "pwd; echo $HOME"]));
    assert_eq!(out, "/home/sandbox\n/home/sandbox\n");
    let out = assert_success(&run(mode, &["run", "--chdir", "/tmp", "--", "pwd"]));
    assert_eq!(out, "/tmp\n");
}

fn dev_is_minimal_and_device_nodes_cannot_be_made(mode: Mode) {
    let script = r#"
import errno, os, pty, stat
def attempt(label, action):
    try:
        action()
        print(label, "OK")
    except OSError as e:
        print(label, errno.errorcode[e.errno])
print("dev", *sorted(os.listdir("/dev")))
attempt("write-null", lambda: open("/dev/null", "w").write("x"))
attempt("write-shm", lambda: open("/dev/shm/x", "w").write("x"))
attempt("create-in-dev", lambda: open("/dev/x", "w").close())
attempt("openpty", lambda: pty.openpty())
# A block device for the host's first disk, in a writable place.
attempt("mknod-disk", lambda: os.mknod("/tmp/disk", stat.S_IFBLK | 0o600, os.makedev(8, 0)))
attempt("mknod-mem", lambda: os.mknod("/tmp/mem", stat.S_IFCHR | 0o600, os.makedev(1, 1)))
"#;
    let out = assert_success(&run(mode, &["run", "--", "python3", "-c", script]));
    assert_eq!(
        field(&out, "dev"),
        "fd full null ptmx pts random shm stderr stdin stdout tty urandom zero",
        "{out}"
    );
    for (key, expected) in [
        ("write-null", "OK"),
        ("write-shm", "OK"),
        ("create-in-dev", "EROFS"),
        ("openpty", "OK"),
        ("mknod-disk", "EPERM"),
        ("mknod-mem", "EPERM"),
    ] {
        assert_eq!(field(&out, key), expected, "{key}:\n{out}");
    }
}

fn rootfs_replaces_the_root_and_stays_read_only(mode: Mode) {
    let root = TempDir::new("rootfs");
    for dir in ["proc", "dev", "tmp", "home/sandbox", "usr", "data"] {
        std::fs::create_dir_all(root.path().join(dir)).unwrap();
        set_mode(&root.path().join(dir), 0o755);
    }
    for (link, target) in [
        ("bin", "usr/bin"),
        ("lib", "usr/lib"),
        ("lib64", "usr/lib64"),
    ] {
        std::os::unix::fs::symlink(target, root.path().join(link)).unwrap();
    }
    let marker = root.file("marker", "from the prepared root\n");
    // Writable by anyone on the host, so only the read-only root can refuse the write.
    set_mode(&marker, 0o666);
    let script = r#"
import errno, os
print("root", *sorted(os.listdir("/")))
print("marker", open("/marker").read().strip())
for label, path, how in [("create", "/new", "w"), ("write-marker", "/marker", "a")]:
    try:
        open(path, how).close()
        print(label, "OK")
    except OSError as e:
        print(label, errno.errorcode[e.errno])
print("usr-python", os.path.exists("/usr/bin/python3"))
"#;
    let in_root = |program: &[&str]| {
        let mut args = vec![
            "run",
            "--rootfs",
            root.str(),
            "--ro-bind",
            "/usr:/usr",
            "--",
        ];
        args.extend_from_slice(program);
        assert_success(&run(mode, &args))
    };
    let out = in_root(&["/bin/python3", "-c", script]);
    assert_eq!(
        field(&out, "root"),
        "bin data dev home lib lib64 marker proc tmp usr",
        "{out}"
    );
    assert_eq!(field(&out, "marker"), "from the prepared root", "{out}");
    assert_eq!(field(&out, "create"), "EROFS", "{out}");
    assert_eq!(field(&out, "write-marker"), "EROFS", "{out}");
    assert_eq!(field(&out, "usr-python"), "True", "{out}");
    assert!(!root.path().join("new").exists());
    assert_eq!(
        std::fs::read_to_string(&marker).unwrap(),
        "from the prepared root\n"
    );

    // The same root with the shell from the brief.
    let out = in_root(&["/bin/sh", "-c", "ls /"]);
    assert_eq!(
        words(&out),
        words("bin data dev home lib lib64 marker proc tmp usr")
    );
}
