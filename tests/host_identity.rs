//! Per-jail host identities (issue 21): the kernel charges what a jail uses of its per-user
//! counters (inotify instances, pending signals, POSIX message queue bytes) to the uid
//! that created its user namespace, at the host's level. As root each jail's namespace is
//! created by a host uid of its own (`--host-uid-range`), so a jail that exhausts a counter
//! leaves host root and its sibling jails their own; the control runs with
//! `--host-uid-range off` (every namespace created by root) show host root and a sibling
//! getting the exact errno. Within the jail its own namespace's limits hold, rootless too.
//!
//! The jails that exhaust a counter hold it until the test closes their stdin. The
//! control runs exhaust root's counters for a moment: they run one at a time (a lock).

#[macro_use]
mod common;

use common::*;
use std::io::{BufRead, BufReader, Write};
use std::process::{ChildStdin, Stdio};
use std::sync::Mutex;

both_modes!(
    a_jail_is_bounded_by_its_own_namespaces_inotify_limit,
    a_jail_is_bounded_by_its_own_sigpending_limit,
);

/// The control runs take host root's counters: one test at a time.
static ROOT_COUNTERS: Mutex<()> = Mutex::new(());

/// Opens inotify instances until refused; prints `inotify COUNT ERRNO HOSTUID`.
const INOTIFY: &str = r#"
import ctypes, errno, os, sys
libc = ctypes.CDLL(None, use_errno=True)
n = 0
while True:
    if libc.inotify_init1(0) < 0:
        err = errno.errorcode[ctypes.get_errno()]
        break
    n += 1
host = open("/proc/self/uid_map").read().split()[1]
print("inotify", n, err, host, flush=True)
sys.stdin.read()
"#;

/// Adds inotify watches on one instance until refused; prints `watches COUNT ERRNO`.
const WATCHES: &str = r#"
import ctypes, errno, os, sys
libc = ctypes.CDLL(None, use_errno=True)
fd = libc.inotify_init1(0)
os.mkdir("/tmp/w")
n = 0
while True:
    path = f"/tmp/w/{n}".encode()
    os.mkdir(path)
    if libc.inotify_add_watch(fd, path, 0x100) < 0:
        err = errno.errorcode[ctypes.get_errno()]
        break
    n += 1
print("watches", n, err, flush=True)
"#;

/// Queues real-time signals (blocked) until refused; prints `sigpending COUNT ERRNO HOSTUID`.
const SIGPENDING: &str = r#"
import errno, os, signal, sys, threading
signal.pthread_sigmask(signal.SIG_BLOCK, [signal.SIGRTMIN])
me = threading.get_ident()
n = 0
while True:
    try:
        signal.pthread_kill(me, signal.SIGRTMIN)
    except OSError as e:
        err = errno.errorcode[e.errno]
        break
    n += 1
host = open("/proc/self/uid_map").read().split()[1]
print("sigpending", n, err, host, flush=True)
sys.stdin.read()
"#;

/// Creates POSIX message queues, from large to the smallest, until none fits; prints
/// `mqueue COUNT ERRNO HOSTUID`.
const MQUEUE: &str = r#"
import ctypes, errno, os, sys
libc = ctypes.CDLL(None, use_errno=True)
libc.mq_open.restype = ctypes.c_int
class Attr(ctypes.Structure):
    _fields_ = [("flags", ctypes.c_long), ("maxmsg", ctypes.c_long), ("msgsize", ctypes.c_long), ("curmsgs", ctypes.c_long), ("pad", ctypes.c_long * 4)]
n = 0
err = None
for maxmsg, msgsize in [(10, 8192), (1, 8192), (1, 1024), (1, 128), (1, 16), (1, 1)]:
    while True:
        attr = Attr(0, maxmsg, msgsize, 0)
        fd = libc.mq_open(f"/q{n}".encode(), os.O_CREAT | os.O_RDWR | os.O_EXCL, 0o600, ctypes.byref(attr))
        if fd < 0:
            err = errno.errorcode[ctypes.get_errno()]
            break
        n += 1
host = open("/proc/self/uid_map").read().split()[1]
print("mqueue", n, err, host, flush=True)
sys.stdin.read()
"#;

/// A sibling jail's one try: prints `OK` or the errno's name.
const TRY_INOTIFY: &str = r#"
import ctypes, errno
libc = ctypes.CDLL(None, use_errno=True)
print("OK" if libc.inotify_init1(0) >= 0 else errno.errorcode[ctypes.get_errno()])
"#;

const TRY_SIGNAL: &str = r#"
import errno, signal, threading
signal.pthread_sigmask(signal.SIG_BLOCK, [signal.SIGRTMIN])
try:
    signal.pthread_kill(threading.get_ident(), signal.SIGRTMIN)
    print("OK")
except OSError as e:
    print(errno.errorcode[e.errno])
"#;

const TRY_MQUEUE: &str = r#"
import ctypes, errno, os
libc = ctypes.CDLL(None, use_errno=True)
libc.mq_open.restype = ctypes.c_int
class Attr(ctypes.Structure):
    _fields_ = [("flags", ctypes.c_long), ("maxmsg", ctypes.c_long), ("msgsize", ctypes.c_long), ("curmsgs", ctypes.c_long), ("pad", ctypes.c_long * 4)]
attr = Attr(0, 1, 1, 0)
fd = libc.mq_open(b"/sibling", os.O_CREAT | os.O_RDWR, 0o600, ctypes.byref(attr))
print("OK" if fd >= 0 else errno.errorcode[ctypes.get_errno()])
"#;

/// A jail that has exhausted a counter and holds it until dropped (its stdin closes).
struct Holder {
    running: Option<Running>,
    stdin: Option<ChildStdin>,
    /// The program's report: the counter's name, how many it got, the errno, its host uid.
    words: Vec<String>,
}

impl Holder {
    fn start(mode: Mode, options: &[&str], script: &str) -> Holder {
        let python = interpreter("python3");
        let mut args: Vec<&str> = vec!["run"];
        args.extend(options);
        args.extend(["--", &python, "-c", script]);
        let mut command = command(mode, &args);
        command
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        let mut running = Running::spawn(command);
        let stdin = running.child.stdin.take();
        let mut line = String::new();
        BufReader::new(running.child.stdout.take().expect("stdout"))
            .read_line(&mut line)
            .expect("read the jail's report");
        let words: Vec<String> = line.split_whitespace().map(String::from).collect();
        let mut holder = Holder {
            running: Some(running),
            stdin,
            words,
        };
        if holder.words.len() != 4 {
            let output = holder.finish();
            panic!("the jail said {line:?}:\n{}", describe(&output));
        }
        holder
    }

    fn count(&self) -> u64 {
        self.words[1].parse().expect("a count")
    }

    fn errno(&self) -> &str {
        &self.words[2]
    }

    fn host_uid(&self) -> u32 {
        self.words[3].parse().expect("a host uid")
    }

    /// Lets the jail end; its output.
    fn finish(&mut self) -> std::process::Output {
        drop(self.stdin.take());
        self.running.take().expect("running").wait()
    }
}

impl Drop for Holder {
    fn drop(&mut self) {
        if self.running.is_some() {
            let _ = self.finish();
        }
    }
}

/// A sibling jail's one try at the counter: `OK` or the errno's name.
fn sibling(options: &[&str], script: &str) -> String {
    let python = interpreter("python3");
    let mut args: Vec<&str> = vec!["run"];
    args.extend(options);
    args.extend(["--", &python, "-c", script]);
    let output = run(Mode::Root, &args);
    assert_success(&output).trim().to_string()
}

fn errno_name(errno: nix::errno::Errno) -> String {
    format!("{errno:?}")
}

/// Host root (this process) tries once: `OK` or the errno's name.
fn root_inotify() -> String {
    // SAFETY: no arguments; the descriptor is closed at once.
    let fd = unsafe { libc::inotify_init1(libc::IN_CLOEXEC) };
    if fd >= 0 {
        unsafe { libc::close(fd) };
        "OK".into()
    } else {
        errno_name(nix::errno::Errno::last())
    }
}

fn root_timer() -> String {
    let mut event: libc::sigevent = unsafe { std::mem::zeroed() };
    event.sigev_notify = libc::SIGEV_NONE;
    let mut timer: libc::timer_t = std::ptr::null_mut();
    // SAFETY: both pointers are valid for the call; the timer is deleted at once.
    let created = unsafe { libc::timer_create(libc::CLOCK_MONOTONIC, &mut event, &mut timer) };
    if created == 0 {
        unsafe { libc::timer_delete(timer) };
        "OK".into()
    } else {
        errno_name(nix::errno::Errno::last())
    }
}

fn root_mqueue() -> String {
    let name = std::ffi::CString::new(format!("/bt-hostid-{}", std::process::id())).unwrap();
    let mut attr: libc::mq_attr = unsafe { std::mem::zeroed() };
    attr.mq_maxmsg = 1;
    attr.mq_msgsize = 1;
    // SAFETY: a valid name and attribute struct; the queue is closed and unlinked at once.
    let fd = unsafe {
        libc::mq_open(
            name.as_ptr(),
            libc::O_CREAT | libc::O_RDWR,
            0o600 as libc::mode_t,
            &mut attr as *mut libc::mq_attr,
        )
    };
    if fd >= 0 {
        unsafe {
            libc::mq_close(fd);
            libc::mq_unlink(name.as_ptr());
        }
        "OK".into()
    } else {
        errno_name(nix::errno::Errno::last())
    }
}

fn soft_limit(resource: nix::sys::resource::Resource) -> u64 {
    nix::sys::resource::getrlimit(resource)
        .expect("getrlimit")
        .0
}

fn host_inotify_instances() -> u64 {
    std::fs::read_to_string("/proc/sys/fs/inotify/max_user_instances")
        .expect("read max_user_instances")
        .trim()
        .parse()
        .expect("a number")
}

/// Enough jails of 64 inotify instances each (their namespace's limit) to take all of
/// one host uid's.
fn inotify_holders(options: &[&str]) -> Vec<Holder> {
    let jails = host_inotify_instances().div_ceil(64) + 1;
    (0..jails)
        .map(|_| Holder::start(Mode::Root, options, INOTIFY))
        .collect()
}

#[test]
fn jails_exhausting_inotify_leave_host_root_and_siblings_theirs() {
    let _one = ROOT_COUNTERS.lock().unwrap_or_else(|err| err.into_inner());
    let holders = inotify_holders(&[]);
    let uids: std::collections::BTreeSet<u32> = holders.iter().map(Holder::host_uid).collect();
    assert_eq!(
        uids.len(),
        holders.len(),
        "each jail its own host uid: {uids:?}"
    );
    for holder in &holders {
        assert_eq!((holder.count(), holder.errno()), (64, "EMFILE"));
        assert!((0x7000_0000..=0x7000_FFFF).contains(&holder.host_uid()));
    }
    assert_eq!(root_inotify(), "OK");
    assert_eq!(sibling(&[], TRY_INOTIFY), "OK");
    drop(holders);

    // The control: every namespace created by root, whose instances the jails take.
    let off = ["--host-uid-range", "off"];
    let holders = inotify_holders(&off);
    assert!(
        holders.iter().any(|holder| holder.count() < 64),
        "the jails should have run into root's limit: {:?}",
        holders
            .iter()
            .map(|holder| &holder.words)
            .collect::<Vec<_>>()
    );
    assert_eq!(root_inotify(), "EMFILE");
    assert_eq!(sibling(&off, TRY_INOTIFY), "EMFILE");
}

#[test]
fn a_jail_queueing_signals_leaves_host_root_and_siblings_theirs() {
    let _one = ROOT_COUNTERS.lock().unwrap_or_else(|err| err.into_inner());
    // The jail may queue as many as host root may (its limit is root's own).
    let limit = soft_limit(nix::sys::resource::Resource::RLIMIT_SIGPENDING);
    let rlimit = format!("sigpending={limit}");
    let holder = Holder::start(Mode::Root, &["--rlimit", &rlimit], SIGPENDING);
    assert_eq!(holder.errno(), "EAGAIN");
    assert!(holder.count() > limit / 2, "{:?}", holder.words);
    assert_eq!(root_timer(), "OK");
    assert_eq!(sibling(&[], TRY_SIGNAL), "OK");
    drop(holder);

    let off = ["--host-uid-range", "off"];
    let holder = Holder::start(
        Mode::Root,
        &["--rlimit", &rlimit, off[0], off[1]],
        SIGPENDING,
    );
    assert_eq!(holder.errno(), "EAGAIN");
    assert_eq!(root_timer(), "EAGAIN");
    assert_eq!(sibling(&off, TRY_SIGNAL), "EAGAIN");
}

#[test]
fn a_jail_filling_message_queues_leaves_host_root_and_siblings_theirs() {
    let _one = ROOT_COUNTERS.lock().unwrap_or_else(|err| err.into_inner());
    // Where Landlock is enforced it refuses mq_open in the jail (EACCES: the queues live on
    // a file system of their own); without it, only the counters bound the jail.
    let limit = soft_limit(nix::sys::resource::Resource::RLIMIT_MSGQUEUE);
    let rlimit = format!("msgqueue={limit}");
    let no_landlock = ["--landlock", "off"];
    let options = ["--rlimit", &rlimit, no_landlock[0], no_landlock[1]];
    let holder = Holder::start(Mode::Root, &options, MQUEUE);
    assert_eq!(holder.errno(), "EMFILE", "{:?}", holder.words);
    assert_eq!(root_mqueue(), "OK");
    assert_eq!(sibling(&no_landlock, TRY_MQUEUE), "OK");
    drop(holder);

    let off = ["--host-uid-range", "off", no_landlock[0], no_landlock[1]];
    let options = [&options[..], &off[..2]].concat();
    let holder = Holder::start(Mode::Root, &options, MQUEUE);
    assert_eq!(holder.errno(), "EMFILE", "{:?}", holder.words);
    assert_eq!(root_mqueue(), "EMFILE");
    assert_eq!(sibling(&off, TRY_MQUEUE), "EMFILE");
}

/// The jail's own namespace allows 64 inotify instances and 16,384 watches, whoever
/// created it: rootless, the rest of the caller's instances stay the caller's.
fn a_jail_is_bounded_by_its_own_namespaces_inotify_limit(mode: Mode) {
    let holder = Holder::start(mode, &[], INOTIFY);
    assert_eq!((holder.count(), holder.errno()), (64, "EMFILE"));
    if mode == Mode::Rootless {
        assert_eq!(holder.host_uid(), NOBODY);
        // The caller (uid 65534, outside any jail) can still create one.
        let python = interpreter("python3");
        let output = output_of(command_from(&argv_as(mode, &python, &["-c", TRY_INOTIFY])));
        assert_eq!(assert_success(&output).trim(), "OK");
    }
    drop(holder);
    let python = interpreter("python3");
    let output = run(mode, &["run", "--", &python, "-c", WATCHES]);
    assert_eq!(assert_success(&output).trim(), "watches 16384 ENOSPC");
}

/// RLIMIT_SIGPENDING defaults to 1024 for every jail: its 1025th queued signal is refused.
fn a_jail_is_bounded_by_its_own_sigpending_limit(mode: Mode) {
    let holder = Holder::start(mode, &[], SIGPENDING);
    assert_eq!((holder.count(), holder.errno()), (1024, "EAGAIN"));
}

#[test]
fn concurrent_jails_get_different_host_uids_and_the_verdict_says_which() {
    let dir = TempDir::new("host-identity").writable_by_all();
    let first = Holder::start(Mode::Root, &[], INOTIFY);
    let report = dir.path().join("verdict.json");
    let report = report.to_str().unwrap();
    let output = run(
        Mode::Root,
        &["run", "--report", report, "--", "cat", "/proc/self/uid_map"],
    );
    let map = assert_success(&output);
    let second: u32 = map.split_whitespace().nth(1).unwrap().parse().unwrap();
    assert_ne!(second, first.host_uid());
    let verdict: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(report).unwrap()).unwrap();
    let identity = &verdict["protections"]["host_identity"];
    assert_eq!(identity["mode"], "per-jail", "{verdict}");
    assert_eq!(identity["uid"], second, "{verdict}");
    assert_eq!(identity["gid"], second, "{verdict}");

    let output = run(
        Mode::Root,
        &[
            "run",
            "--host-uid-range",
            "off",
            "--report",
            report,
            "--",
            "true",
        ],
    );
    assert_success(&output);
    let verdict: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(report).unwrap()).unwrap();
    let identity = &verdict["protections"]["host_identity"];
    assert_eq!(identity["mode"], "shared", "{verdict}");
    assert_eq!(identity["uid"], NOBODY, "{verdict}");
}

#[test]
fn rootless_jails_keep_the_callers_uid_and_say_so() {
    let dir = TempDir::new("host-identity").writable_by_all();
    let report = dir.path().join("verdict.json");
    let report = report.to_str().unwrap();
    let output = run(Mode::Rootless, &["run", "--report", report, "--", "true"]);
    assert_success(&output);
    let verdict: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(report).unwrap()).unwrap();
    let identity = &verdict["protections"]["host_identity"];
    assert_eq!(identity["mode"], "caller", "{verdict}");
    assert_eq!(identity["uid"], NOBODY, "{verdict}");
    // `off` changes nothing rootless; a range is refused.
    assert_success(&run(
        Mode::Rootless,
        &["run", "--host-uid-range", "off", "--", "true"],
    ));
    let output = run(
        Mode::Rootless,
        &[
            "run",
            "--host-uid-range",
            "1879048192-1879048200",
            "--",
            "true",
        ],
    );
    assert_code(&output, 125);
    assert_one_line_error(
        &output,
        &["--host-uid-range", "only root", "drop the option"],
    );
}

#[test]
fn an_exhausted_range_is_refused_with_the_fix() {
    // One uid, outside the default range: no other jail takes it.
    let range = "1879113728-1879113728";
    let holder = Holder::start(Mode::Root, &["--host-uid-range", range], INOTIFY);
    assert_eq!(holder.host_uid(), 1879113728);
    // The uid's lock, root's alone, while the jail lives; removed with it.
    let lock = std::path::Path::new("/run/brig-host-uids/1879113728");
    let dir = std::fs::symlink_metadata("/run/brig-host-uids").unwrap();
    use std::os::unix::fs::MetadataExt;
    assert!(
        dir.is_dir() && dir.uid() == 0 && dir.mode() & 0o022 == 0,
        "{dir:?}"
    );
    assert!(lock.exists());
    let output = run(
        Mode::Root,
        &["run", "--host-uid-range", range, "--", "true"],
    );
    assert_code(&output, 125);
    assert_one_line_error(
        &output,
        &[
            "--host-uid-range 1879113728-1879113728",
            "held by running jails",
            "widen the range",
        ],
    );
    drop(holder);
    assert!(!lock.exists());
    assert_success(&run(
        Mode::Root,
        &["run", "--host-uid-range", range, "--", "true"],
    ));
    assert!(!lock.exists());
}

/// A brig killed (SIGKILL) cannot remove its host uid's lock file; a server starting
/// removes the files no one holds, and keeps those held.
#[test]
fn a_server_starting_removes_the_locks_killed_brigs_left() {
    let dir = std::path::Path::new("/run/brig-host-uids");
    // Single uids outside the default range: no other jail takes them.
    let (killed, held) = ("1879113730", "1879113731");
    let range = |uid: &str| format!("{uid}-{uid}");
    let mut victim = Holder::start(Mode::Root, &["--host-uid-range", &range(killed)], INOTIFY);
    let holder = Holder::start(Mode::Root, &["--host-uid-range", &range(held)], INOTIFY);
    let brig = victim.running.take().expect("running");
    kill(brig.pid(), libc::SIGKILL);
    let _ = brig.wait();
    // Its jail dies with it (it holds the lock too, till its last process is gone).
    let lock = dir.join(killed);
    let free = || {
        std::fs::File::open(&lock).is_ok_and(|file| {
            nix::fcntl::Flock::lock(file, nix::fcntl::FlockArg::LockExclusiveNonblock).is_ok()
        })
    };
    assert!(
        wait_until(std::time::Duration::from_secs(10), free),
        "the killed brig's lock should be left, and free: {}",
        lock.display()
    );
    let server = common::serve::Server::start(Mode::Root, &["--pool", "0"]);
    assert!(!lock.exists(), "a lock no one holds was left");
    assert!(dir.join(held).exists(), "a held lock was removed");
    assert_eq!(holder.host_uid().to_string(), held);
    drop(server);
    drop(holder);
    assert!(!dir.join(held).exists());
}

#[test]
fn bad_ranges_are_refused_naming_the_field_and_origin() {
    for (range, needles) in [
        ("5-4", vec!["--host-uid-range", "4-5"]),
        ("0-10", vec!["--host-uid-range", "host root"]),
        ("60000-70000", vec!["--host-uid-range", "65534"]),
        ("1000", vec!["--host-uid-range", "FIRST-LAST"]),
        ("a-b", vec!["--host-uid-range", "not a uid"]),
    ] {
        let output = run(
            Mode::Root,
            &["run", "--host-uid-range", range, "--", "true"],
        );
        assert_code(&output, 125);
        assert_one_line_error(&output, &needles);
    }
    let config = TempFile::new(
        "host-uid-range.yaml",
        "host-uid-range: 0-10\ncommand: [true]\n",
    );
    let output = run(Mode::Root, &["run", "--config", config.str()]);
    assert_code(&output, 125);
    assert_one_line_error(&output, &[config.str(), "host-uid-range", "host root"]);
    let output = run(
        Mode::Root,
        &[
            "run",
            "--host-uid-range",
            "1879048192-1879048200",
            "--host-uid",
            "4321",
            "--",
            "true",
        ],
    );
    assert_code(&output, 125);
    assert_one_line_error(
        &output,
        &["--host-uid-range", "--host-uid", "give one of them"],
    );
}

#[test]
fn files_a_jail_writes_into_a_bind_are_owned_by_its_host_uid() {
    let dir = TempDir::new("host-identity-out").writable_by_all();
    let bind = format!("{}:/out", dir.str());
    let report = dir.path().join("verdict.json");
    let output = run(
        Mode::Root,
        &[
            "run",
            "--bind",
            &bind,
            "--report",
            report.to_str().unwrap(),
            "--",
            "sh",
            "-c",
            "echo hi > /out/file",
        ],
    );
    assert_success(&output);
    let verdict: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&report).unwrap()).unwrap();
    use std::os::unix::fs::MetadataExt;
    let meta = std::fs::metadata(dir.path().join("file")).unwrap();
    assert_eq!(meta.uid(), verdict["protections"]["host_identity"]["uid"]);
    assert_eq!(meta.gid(), verdict["protections"]["host_identity"]["gid"]);
    // A bind the jail's own uid cannot write is warned about, with the fix.
    let closed = TempDir::new("host-identity-closed");
    let bind = format!("{}:/out", closed.str());
    let output = run(Mode::Root, &["run", "--bind", &bind, "--", "true"]);
    assert!(
        stderr(&output).contains("is not world-writable") && stderr(&output).contains("chmod 1777"),
        "{}",
        describe(&output)
    );
    let _ = std::io::stdout().flush();
}

#[test]
fn doctor_says_which_host_identities_apply() {
    let output = run(Mode::Root, &["doctor", "--no-run"]);
    let text = stdout(&output);
    assert!(
        text.lines().any(|line| line.starts_with(
            "ok    host identities (as root): per-jail: each jail maps to, and its user namespace is created by, a host uid of its own from 1879048192-1879113727"
        )),
        "{}",
        describe(&output)
    );
    let output = run(Mode::Rootless, &["doctor", "--no-run"]);
    let text = stdout(&output);
    assert!(
        text.lines().any(|line| line.starts_with(
            "ok    host identities (rootless, uid 65534): caller: jails map to your own uid"
        )),
        "{}",
        describe(&output)
    );
}

/// brig as root in a user namespace that maps only uids and gids 0-65535, as in a
/// container with a user namespace of its own: `args` run there; its output.
fn in_a_small_user_namespace(args: &[&str]) -> std::process::Output {
    let mut command = std::process::Command::new("unshare");
    command
        .args(["--user", "sh", "-c", "read go && exec \"$0\" \"$@\""])
        .arg(brig())
        .args(args)
        .current_dir("/")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let mut running = Running::spawn(command);
    let pid = running.pid();
    let own = std::fs::read_link("/proc/self/ns/user").unwrap();
    assert!(
        wait_until(RUN_TIMEOUT, || std::fs::read_link(format!(
            "/proc/{pid}/ns/user"
        ))
        .is_ok_and(|ns| ns != own)),
        "unshare did not enter a user namespace"
    );
    for map in ["uid_map", "gid_map"] {
        std::fs::write(format!("/proc/{pid}/{map}"), "0 0 65536\n").unwrap();
    }
    let mut stdin = running.child.stdin.take().unwrap();
    stdin.write_all(b"go\n").unwrap();
    drop(stdin);
    running.wait()
}

/// Where brig's own user namespace does not map the default range (a container's), root's
/// jails fall back to the shared 65534 and say so; a range asked for is refused there.
#[test]
fn where_the_range_is_not_mapped_brig_says_so() {
    let dir = TempDir::new("host-identity-small-ns").writable_by_all();
    let report = dir.path().join("verdict.json");
    let output = in_a_small_user_namespace(&[
        "run",
        "--quiet-limits",
        "--memory",
        "max",
        "--pids",
        "max",
        "--report",
        report.to_str().unwrap(),
        "--",
        "true",
    ]);
    assert_success(&output);
    let verdict: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&report).unwrap()).unwrap();
    assert_eq!(
        verdict["protections"]["host_identity"]["mode"], "shared",
        "{verdict}"
    );
    assert_eq!(
        verdict["protections"]["host_identity"]["uid"], NOBODY,
        "{verdict}"
    );
    assert!(
        verdict["warnings"]
            .as_array()
            .unwrap()
            .iter()
            .any(|warning| warning
                .as_str()
                .unwrap()
                .contains("does not map the default --host-uid-range")),
        "{verdict}"
    );
    let output = in_a_small_user_namespace(&[
        "run",
        "--host-uid-range",
        "1879048192-1879048200",
        "--",
        "true",
    ]);
    assert_code(&output, 125);
    assert_one_line_error(
        &output,
        &[
            "--host-uid-range 1879048192-1879048200",
            "does not map",
            "/proc/self/uid_map",
        ],
    );
}
