//! The attack suite. A static probe (tests/probe/probe.c, built here with `gcc -static`)
//! is bound into a jail and makes one attack per run; each test asserts the exact line it
//! prints (`errno=EPERM`, `ok`, ...), as root and rootless. Each attack also runs once with
//! the protection that stops it switched off (`--seccomp none`, `--landlock off`, both),
//! where brig can switch it off, and asserts what the kernel answers then: that proves the
//! test would notice if the protection went missing. Where the kernel refuses the attack
//! anyway (it needs a capability the jail does not have), the off-run asserts that, and a
//! variant with an argument the kernel rejects first (a bad fd, a null pointer) shows that
//! the filter answers before the kernel looks.
//!
//! Run as root (tests/run.sh does); rootless runs go through `setpriv` as uid 65534.

use crate::common;

use common::Mode::{self, Root, Rootless};
use std::io::Write;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::{Mutex, OnceLock};

/// Where the kit directory appears in the jail.
const IN_JAIL: &str = "/probe";

/// brig and the probe, in 0755 directories that uid 65534 can read. Only `bin` (the
/// probes) is bound into jails; files a test keeps outside the jail live in `dir`.
struct Kit {
    dir: PathBuf,
    bin: PathBuf,
    brig: PathBuf,
}

impl Kit {
    fn probe(&self) -> PathBuf {
        self.bin.join("probe")
    }

    /// `--ro-bind` of the probes.
    fn mount(&self) -> String {
        format!("{}:{IN_JAIL}", self.bin.display())
    }
}

/// The kit, once each test has checked its prerequisites: root (which runs brig both ways)
/// and gcc (which builds the probe). None only when one is missing and skipping is
/// allowed (see `common::require`); the test then returns.
fn kit() -> Option<&'static Kit> {
    let ready = common::require_root()
        && common::require_program(
            "gcc",
            "tests/run.sh installs it, with libc6-dev for `gcc -static` (Debian packages gcc, libc6-dev)",
        );
    ready.then(built_kit)
}

/// The kit, built by the first test that needs it (after `kit()` checked the prerequisites).
fn built_kit() -> &'static Kit {
    static KIT: OnceLock<Kit> = OnceLock::new();
    KIT.get_or_init(build_kit)
}

fn build_kit() -> Kit {
    let tmp = std::env::temp_dir();
    // Leftovers of earlier runs whose process is gone.
    if let Ok(entries) = std::fs::read_dir(&tmp) {
        for entry in entries.flatten() {
            let name = entry.file_name().to_string_lossy().into_owned();
            if let Some(pid) = name.strip_prefix("brig-attacks-")
                && !Path::new("/proc").join(pid).exists()
            {
                let _ = std::fs::remove_dir_all(entry.path());
            }
        }
    }
    let dir = tmp.join(format!("brig-attacks-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let bin = dir.join("bin");
    std::fs::create_dir_all(&bin).unwrap();
    for made in [&dir, &bin] {
        std::fs::set_permissions(made, std::fs::Permissions::from_mode(0o755)).unwrap();
    }
    let source = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/probe/probe.c");
    let probe = bin.join("probe");
    let built = Command::new("gcc")
        .args(["-static", "-O1", "-Wall", "-o"])
        .arg(&probe)
        .arg(source)
        .output()
        .expect("gcc is needed to build the attack probe; tests/run.sh installs gcc and libc6-dev");
    assert!(
        built.status.success(),
        "gcc -static {source} failed (tests/run.sh installs gcc and libc6-dev):\n{}",
        String::from_utf8_lossy(&built.stderr)
    );
    // A setuid-root copy: it must not gain anything in the jail.
    let setuid = bin.join("probe-setuid");
    std::fs::copy(&probe, &setuid).unwrap();
    std::fs::set_permissions(&setuid, std::fs::Permissions::from_mode(0o4755)).unwrap();
    // brig beside the probe, where both users reach it: a hard link (the debug binary is
    // 200 MB), a copy only where target/ is on another filesystem than the temp dir.
    let brig = dir.join("brig");
    if std::fs::hard_link(env!("CARGO_BIN_EXE_brig"), &brig).is_err() {
        std::fs::copy(env!("CARGO_BIN_EXE_brig"), &brig).unwrap();
        std::fs::set_permissions(&brig, std::fs::Permissions::from_mode(0o755)).unwrap();
    }
    Kit { dir, bin, brig }
}

/// `program` as root or rootless (`common::command_as`), in the kit's directory.
fn command(kit: &Kit, who: Mode, program: &Path) -> Command {
    let mut command = common::command_as(who, program, &[]);
    command.current_dir(&kit.dir);
    command
}

fn brig(kit: &Kit, who: Mode, args: &[&str]) -> Output {
    command(kit, who, &kit.brig).args(args).output().unwrap()
}

/// `brig run POLICY --ro-bind KIT:/probe -- /probe/probe ATTACK...`: the probe's line.
fn probe(who: Mode, policy: &[&str], attack: &[&str]) -> String {
    let kit = built_kit();
    let mount = kit.mount();
    let program = format!("{IN_JAIL}/probe");
    let mut args = vec!["run"];
    args.extend(policy);
    args.extend(["--ro-bind", &mount, "--", &program]);
    args.extend(attack);
    let out = brig(kit, who, &args);
    assert!(
        out.status.success(),
        "{who:?} brig {args:?}: {:?}\n{}{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}

/// What the kernel answers without any jail, to an unprivileged process: the expected
/// result with the filter switched off, for attacks whose answer depends on the host's
/// kernel configuration (perf_event_paranoid, io_uring_disabled, ia32 and x32 support).
fn host_baseline(attack: &[&str]) -> String {
    let kit = built_kit();
    let out = command(kit, Rootless, &kit.probe())
        .args(attack)
        .output()
        .unwrap();
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}

const SECCOMP_OFF: &[&str] = &["--seccomp", "none"];
const LANDLOCK_OFF: &[&str] = &["--landlock", "off"];
const BOTH_OFF: &[&str] = &["--seccomp", "none", "--landlock", "off"];

/// One test per attack: the default jail's answer (root and rootless), then the answer
/// with protections switched off (root).
macro_rules! attacks {
    ($(
        $(#[$meta:meta])*
        $name:ident: [$($arg:expr),+] => $on:expr
            $(, seccomp_off: $seccomp_off:expr)?
            $(, landlock_off: $landlock_off:expr)?
            $(, both_off: $both_off:expr)?;
    )*) => {$(
        $(#[$meta])*
        #[test]
        fn $name() {
            if kit().is_none() {
                return;
            }
            let attack: &[&str] = &[$($arg),+];
            for who in [Root, Rootless] {
                assert_eq!(probe(who, &[], attack), $on, "{who:?}, default jail, {attack:?}");
            }
            $(assert_eq!(probe(Root, SECCOMP_OFF, attack), $seccomp_off, "--seccomp none, {attack:?}");)?
            $(assert_eq!(probe(Root, LANDLOCK_OFF, attack), $landlock_off, "--landlock off, {attack:?}");)?
            $(assert_eq!(probe(Root, BOTH_OFF, attack), $both_off, "both off, {attack:?}");)?
        }
    )*

    /// Every attack and the default jail's answer, for the same attacks on a pooled jail
    /// of `brig serve` (`attacks_fail_the_same_in_a_pooled_jail`).
    fn default_jail_answers() -> Vec<(&'static [&'static str], &'static str)> {
        vec![$((&[$($arg),+], $on)),*]
    }
    };
}

attacks! {
    // --- namespaces: seccomp is the wall; without it the kernel lets a jail nest them.

    /// unshare(CLONE_NEWUSER): the first step of most container escapes.
    unshare_user_namespace: ["unshare-user"] => "errno=EPERM", seccomp_off: "ok";
    /// unshare(CLONE_NEWUSER | CLONE_NEWNS | CLONE_NEWNET).
    unshare_user_mount_net: ["unshare"] => "errno=EPERM", seccomp_off: "ok";
    /// clone(2) with CLONE_NEWUSER: the argument filter on clone's flags.
    clone_new_user_namespace: ["clone-user"] => "errno=EPERM", seccomp_off: "ok";
    /// clone(2) without CLONE_NEW* (fork, threads) stays allowed.
    clone_without_namespaces_works: ["clone"] => "ok", seccomp_off: "ok";
    /// clone3 passes its flags in memory the filter cannot read: ENOSYS, so libc falls
    /// back to clone(2).
    clone3_answers_enosys: ["clone3"] => "errno=ENOSYS", seccomp_off: "ok";
    clone3_new_user_namespace: ["clone3-user"] => "errno=ENOSYS", seccomp_off: "ok";
    /// setns into a namespace: the kernel refuses it too (no CAP_SYS_ADMIN)...
    setns: ["setns"] => "errno=EPERM", seccomp_off: "errno=EPERM";
    /// ...so a bad fd shows who answers: the filter (EPERM) before the kernel (EBADF).
    setns_is_filtered: ["setns-badfd"] => "errno=EPERM", seccomp_off: "errno=EBADF";

    // --- mounts and roots: seccomp, then Landlock (sandboxed processes cannot mount),
    // then the kernel (no capabilities; mount flags locked).

    mount_tmpfs: ["mount"] => "errno=EPERM", seccomp_off: "errno=EPERM";
    remount_read_only_bind_read_write: ["remount-rw"] => "errno=EPERM", seccomp_off: "errno=EPERM";
    /// From a nested user namespace the jail would own its mounts; Landlock still denies
    /// mounting, and with both off the mount succeeds.
    mount_from_nested_user_namespace: ["userns-mount"] => "unshare: errno=EPERM",
        seccomp_off: "errno=EPERM", both_off: "ok";
    /// Even then the kernel keeps the read-only flag brig set: it is locked for every
    /// less privileged mount namespace.
    remount_rw_from_nested_user_namespace: ["userns-remount-rw"] => "unshare: errno=EPERM",
        seccomp_off: "errno=EPERM", both_off: "errno=EPERM";
    pivot_root: ["pivot-root"] => "errno=EPERM", seccomp_off: "errno=EPERM";
    chroot: ["chroot"] => "errno=EPERM", seccomp_off: "errno=EPERM";

    // --- other processes

    /// PTRACE_ATTACH to a child of the probe.
    ptrace_another_process: ["ptrace"] => "errno=EPERM", seccomp_off: "ok";
    /// The jail's init is undumpable: no tracing it even without the filter.
    ptrace_init: ["ptrace-init"] => "errno=EPERM", seccomp_off: "errno=EPERM";
    process_vm_readv: ["process-vm"] => "errno=EPERM", seccomp_off: "ok";
    /// kill(1, 0): brig's init is outside the program's Landlock domain (signal scope).
    signal_outside_the_domain: ["kill-init"] => "errno=EPERM",
        seccomp_off: "errno=EPERM", landlock_off: "ok";

    // --- kernel interfaces: seccomp is the wall.

    keyctl: ["keyctl"] => "errno=EPERM", seccomp_off: "ok";
    add_key: ["add-key"] => "errno=EPERM", seccomp_off: "ok";
    request_key: ["request-key"] => "errno=EPERM", seccomp_off: "errno=ENOKEY";
    /// BPF_MAP_CREATE; without the filter the host's unprivileged_bpf_disabled decides.
    bpf: ["bpf"] => "errno=EPERM", seccomp_off: host_baseline(&["bpf"]);
    /// An unknown bpf command: EINVAL from the kernel, EPERM from the filter.
    bpf_is_filtered: ["bpf-badcmd"] => "errno=EPERM", seccomp_off: "errno=EINVAL";
    /// A software counter on itself: allowed unprivileged up to perf_event_paranoid 2.
    perf_event_open: ["perf"] => "errno=EPERM", seccomp_off: host_baseline(&["perf"]);
    /// userfaultfd(UFFD_USER_MODE_ONLY), which unprivileged processes may create.
    userfaultfd: ["userfaultfd"] => "errno=EPERM", seccomp_off: "ok";
    io_uring_setup: ["io-uring"] => "errno=EPERM", seccomp_off: host_baseline(&["io-uring"]);
    /// open_by_handle_at needs CAP_DAC_READ_SEARCH...
    open_by_handle_at: ["open-by-handle"] => "errno=EPERM", seccomp_off: "errno=EPERM";
    /// ...and with a bad mount fd the kernel answers EBADF first.
    open_by_handle_at_is_filtered: ["open-by-handle-badfd"] => "errno=EPERM",
        seccomp_off: "errno=EBADF";
    /// finit_module: EPERM from the filter; without it EPERM (no CAP_SYS_MODULE) or
    /// ENOSYS on a kernel without modules.
    load_kernel_module: ["module"] => "errno=EPERM", seccomp_off: host_baseline(&["module"]);
    /// reboot(CAD_OFF): without the filter, no CAP_SYS_BOOT in the jail's namespace.
    reboot: ["reboot"] => "errno=EPERM", seccomp_off: "errno=EPERM";
    /// clock_settime: without the filter, no CAP_SYS_TIME...
    set_the_clock: ["settime"] => "errno=EPERM", seccomp_off: "errno=EPERM";
    /// ...and a null timespec makes the kernel answer EFAULT first.
    set_the_clock_is_filtered: ["settime-null"] => "errno=EPERM", seccomp_off: "errno=EFAULT";

    // --- other system call ABIs

    /// getpid with the x32 bit: not on the allowlist.
    x32_syscall: ["x32"] => "errno=EPERM", seccomp_off: host_baseline(&["x32"]);

    // --- terminals

    /// TIOCSTI on the controlling terminal: typing commands into the user's shell.
    tiocsti: ["tiocsti"] => "errno=EPERM", seccomp_off: host_baseline(&["tiocsti"]);
    /// The kernel reads the request as 32 bits; so does the filter.
    tiocsti_with_high_bits: ["tiocsti-highbits"] => "errno=EPERM",
        seccomp_off: host_baseline(&["tiocsti"]);
    tioclinux: ["tioclinux"] => "errno=EPERM", seccomp_off: "errno=ENOTTY";

    // --- sockets

    /// AF_PACKET: without the filter, no CAP_NET_RAW...
    packet_socket: ["packet"] => "errno=EPERM", seccomp_off: "errno=EPERM";
    raw_socket: ["raw"] => "errno=EPERM", seccomp_off: "errno=EPERM";
    /// ...unless the jail owns a network namespace of its own.
    packet_socket_from_nested_namespace: ["userns-packet"] => "unshare: errno=EPERM",
        seccomp_off: "ok";
    netlink_audit: ["netlink-audit"] => "errno=EPERM", seccomp_off: "ok";
    netlink_uevent: ["netlink-uevent"] => "errno=EPERM", seccomp_off: "ok";
    /// NETLINK_ROUTE stays: getaddrinfo reads the interface addresses with it.
    netlink_route_works: ["netlink-route"] => "ok", seccomp_off: "ok";

    // --- the host's files

    /// /proc/1 is brig's init, undumpable: its environment is not readable.
    read_init_environ: ["read", "/proc/1/environ"] => "errno=EACCES",
        seccomp_off: "errno=EACCES", landlock_off: "errno=EACCES";
    read_host_shadow: ["read", "/etc/shadow"] => "errno=ENOENT";
    no_host_sys: ["stat", "/sys"] => "errno=ENOENT";
    /// The root is read-only: the mount answers before Landlock is asked.
    create_in_the_root: ["create", "/planted"] => "errno=EROFS",
        landlock_off: "errno=EROFS";
    create_in_a_read_only_bind: ["create", "/probe/planted"] => "errno=EROFS",
        landlock_off: "errno=EROFS";
    create_in_tmp_works: ["create", "/tmp/file"] => "ok";
    /// procfs lets a process write some of its own files; Landlock gives /proc read only.
    write_proc: ["write", "/proc/self/comm"] => "errno=EACCES", landlock_off: "ok";
}

/// A pooled jail of `brig serve` is the one-shot jail, assembled ahead: every attack above
/// gets the answer it gets in a one-shot run, as root and rootless.
#[test]
fn attacks_fail_the_same_in_a_pooled_jail() {
    let Some(kit) = kit() else {
        return;
    };
    let mount = kit.mount();
    let program = format!("{IN_JAIL}/probe");
    for who in [Root, Rootless] {
        let server = common::serve::Server::start(who, &["--pool", "2", "--ro-bind", &mount]);
        for (attack, expected) in default_jail_answers() {
            let output = server.run(&[], &[&[program.as_str()][..], attack].concat());
            let answer = String::from_utf8_lossy(&output.stdout).trim().to_string();
            assert_eq!(
                answer,
                expected,
                "{who:?}, pooled jail, {attack:?}: {}",
                common::describe(&output)
            );
        }
        let status = server.status();
        assert_eq!(
            status["runs"], status["pooled_runs"],
            "every run was pooled: {status}"
        );
    }
}

/// i386 getpid through `int 0x80`: the filter only accepts x86_64 calls and kills anything
/// else (the probe runs it in a child and reports the signal). The kill is audited, so this
/// takes its turn with the tests that read the audit records.
#[test]
fn i386_int80() {
    if kit().is_none() {
        return;
    }
    let _turn = AUDIT
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner());
    for who in [Root, Rootless] {
        assert_eq!(probe(who, &[], &["int80"]), "signal=SYS", "{who:?}");
    }
    assert_eq!(
        probe(Root, SECCOMP_OFF, &["int80"]),
        host_baseline(&["int80"])
    );
}

#[test]
fn chroot_escape_does_not_reach_the_host() {
    let Some(kit) = kit() else { return };
    // A host path that is not in the jail.
    let host_path = kit.dir.join("brig").display().to_string();
    let attack = ["chroot-escape", host_path.as_str()];
    for who in [Root, Rootless] {
        assert_eq!(probe(who, &[], &attack), "unshare: errno=EPERM");
    }
    // Without seccomp and Landlock the escape from a nested chroot works, and lands in the
    // jail's root: the host's root was detached, there is nothing above.
    assert_eq!(probe(Root, BOTH_OFF, &attack), "host path: errno=ENOENT");
}

#[test]
fn setuid_binary_gains_nothing() {
    let Some(_) = kit() else { return };
    // The file is setuid root on the host. Three walls: nosuid mounts, no_new_privs, and
    // host root is not mapped in the jail's user namespace.
    let program = format!("{IN_JAIL}/probe-setuid");
    for who in [Root, Rootless] {
        let kit = built_kit();
        let mount = kit.mount();
        let out = brig(
            kit,
            who,
            &["run", "--ro-bind", &mount, "--", &program, "ids"],
        );
        assert_eq!(
            String::from_utf8_lossy(&out.stdout).trim(),
            "uid=1000 euid=1000 suid=1000",
            "{who:?}"
        );
    }
}

#[test]
fn writable_bind_is_writable() {
    let Some(kit) = kit() else { return };
    let out_dir = kit.dir.join("out-writable");
    std::fs::create_dir_all(&out_dir).unwrap();
    std::fs::set_permissions(&out_dir, std::fs::Permissions::from_mode(0o777)).unwrap();
    let bind = format!("{}:/out", out_dir.display());
    assert_eq!(
        probe(Root, &["--bind", &bind], &["create", "/out/new"]),
        "ok"
    );
    assert!(out_dir.join("new").exists());
}

/// Reopening stdout through /proc/self/fd when it is a host file outside the jail: Landlock
/// lets the program reopen it the way it is open (write-only here: `echo > /dev/stdout`
/// works), but not turn it into a read-write file.
#[test]
fn reopen_host_stdout() {
    let Some(kit) = kit() else { return };
    let cases: [(&[&str], &str, &str); 3] = [
        (&[], "reopen-stdout", "errno=EACCES"),
        (LANDLOCK_OFF, "reopen-stdout", "ok"),
        // Write-only, as it is open: `echo > /dev/stdout` works.
        (&[], "write", "brigok"),
    ];
    for (index, (policy, attack, expected)) in cases.into_iter().enumerate() {
        // Not under `bin`, which the jail sees: only the descriptor leads to it.
        let path = kit.dir.join(format!("stdout-{index}"));
        std::fs::write(&path, "").unwrap();
        // Writable for the jail's host uid, so that only Landlock can refuse.
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o666)).unwrap();
        let file = std::fs::OpenOptions::new()
            .append(true)
            .open(&path)
            .unwrap();
        let mount = kit.mount();
        let mut args = vec!["run"];
        args.extend(policy);
        args.extend(["--ro-bind", &mount, "--", "/probe/probe", attack]);
        if attack == "write" {
            args.push("/dev/stdout");
        }
        let status = command(kit, Root, &kit.brig)
            .args(&args)
            .stdout(file)
            .status()
            .unwrap();
        assert!(status.success());
        assert_eq!(
            std::fs::read_to_string(&path).unwrap().trim(),
            expected,
            "{args:?}"
        );
    }
}

/// A TCP listener on the host's loopback: the jail has its own network namespace, and
/// with --net none Landlock denies TCP connect as well.
#[test]
fn connect_to_host_tcp_listener() {
    if kit().is_none() {
        return;
    }
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port().to_string();
    let attack = ["tcp-connect", port.as_str()];
    // The jail's own network namespace: its 127.0.0.1 is its own lo, where nothing
    // listens. (Landlock leaves TCP to the namespace: it would add nothing here.)
    for who in [Root, Rootless] {
        assert_eq!(probe(who, &[], &attack), "errno=ECONNREFUSED", "{who:?}");
    }
    // The host's network: the test sees the listener, so it notices a missing namespace.
    assert_eq!(probe(Root, &["--net", "host"], &attack), "ok");
}

/// An abstract unix socket on the host: a private network namespace has its own abstract
/// names; with --net host, Landlock's scope keeps the jail from connecting out.
#[test]
fn connect_to_host_abstract_socket() {
    if kit().is_none() {
        return;
    }
    let name = format!("brig-attacks-{}", std::process::id());
    let listener = abstract_listener(&name);
    let attack = ["abstract-connect", name.as_str()];
    for who in [Root, Rootless] {
        assert_eq!(probe(who, &[], &attack), "errno=ECONNREFUSED", "{who:?}");
        assert_eq!(
            probe(who, &["--net", "host"], &attack),
            "errno=EPERM",
            "{who:?}"
        );
    }
    assert_eq!(
        probe(Root, &["--net", "host", "--landlock", "off"], &attack),
        "ok"
    );
    drop(listener);
}

fn abstract_listener(name: &str) -> std::os::unix::net::UnixListener {
    use std::os::linux::net::SocketAddrExt;
    let addr = std::os::unix::net::SocketAddr::from_abstract_name(name).unwrap();
    std::os::unix::net::UnixListener::bind_addr(&addr).unwrap()
}

// --- the verdict and the reports

/// Seccomp kills are reported as such; the kernel's audit records are read by the same
/// few tests at a time, so these take turns.
static AUDIT: Mutex<()> = Mutex::new(());

#[test]
fn seccomp_kill_is_reported_with_the_call() {
    let Some(kit) = kit() else { return };
    let _turn = AUDIT
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner());
    let mount = kit.mount();
    let args = [
        "run",
        "--quiet-limits",
        "--seccomp",
        "strict",
        "--ro-bind",
        &mount,
        "--",
        "/probe/probe",
        "keyctl",
    ];
    let out = brig(kit, Root, &args);
    assert_eq!(out.status.code(), Some(128 + 31));
    assert_eq!(
        String::from_utf8_lossy(&out.stderr).trim(),
        "brig: the program was killed by seccomp (syscall keyctl)"
    );
    // Rootless brig cannot read the audit records: the kill is still named as such.
    let out = brig(kit, Rootless, &args);
    assert_eq!(out.status.code(), Some(128 + 31));
    assert_eq!(
        String::from_utf8_lossy(&out.stderr).trim(),
        "brig: the program was killed by seccomp (a call its profile strict does not allow; `--seccomp-log` lists them)"
    );
}

#[test]
fn seccomp_log_lists_what_would_be_denied() {
    let Some(kit) = kit() else { return };
    let _turn = AUDIT
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner());
    let mount = kit.mount();
    let out = brig(
        kit,
        Root,
        &[
            "run",
            "--seccomp-log",
            "--ro-bind",
            &mount,
            "--",
            "/probe/probe",
            "keyctl",
        ],
    );
    assert!(out.status.success());
    // Let through (and logged), not denied.
    assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), "ok");
    assert_eq!(
        String::from_utf8_lossy(&out.stderr).trim(),
        "brig: --seccomp-log: the profile default would have denied: keyctl"
    );
    let out = brig(
        kit,
        Rootless,
        &[
            "run",
            "--seccomp-log",
            "--ro-bind",
            &mount,
            "--",
            "/probe/probe",
            "keyctl",
        ],
    );
    assert!(out.status.success());
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("journalctl -k -g type=1326"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn check_reports_the_policy() {
    let Some(kit) = kit() else { return };
    let out = brig(kit, Root, &["check", "--", "true"]);
    let plan = String::from_utf8_lossy(&out.stdout);
    assert!(
        plan.contains("seccomp:\n  profile: default\n  mode: enforce\n"),
        "{plan}"
    );
    assert!(
        plan.contains("landlock:\n  mode: best-effort\n  abi: "),
        "{plan}"
    );
    let out = brig(
        kit,
        Root,
        &[
            "check",
            "--seccomp",
            "none",
            "--landlock",
            "off",
            "--",
            "true",
        ],
    );
    let plan = String::from_utf8_lossy(&out.stdout);
    assert!(
        plan.contains("landlock:\n  mode: \"off\"\n  abi: 0\n"),
        "{plan}"
    );
    assert!(
        plan.contains("--seccomp none: no system-call filter"),
        "{plan}"
    );
    assert!(
        plan.contains("--landlock off: no Landlock wall around the files"),
        "{plan}"
    );
}

#[test]
fn bad_policy_options_fail_with_one_line() {
    let Some(kit) = kit() else { return };
    let bad_json = kit.dir.join("bad-profile.json");
    std::fs::File::create(&bad_json)
        .unwrap()
        .write_all(b"{\"main\": {\"mismatch_action\": \"allow\"")
        .unwrap();
    let bad_json = bad_json.display().to_string();
    for (args, needle) in [
        (
            vec!["--seccomp", "nonesuch"],
            "--seccomp nonesuch: unknown profile",
        ),
        (
            vec!["--seccomp", bad_json.as_str()],
            "not a valid seccompiler profile",
        ),
        (vec!["--landlock", "sometimes"], "not a Landlock mode"),
        (vec!["--landlock", "require=99"], "at most require=7"),
    ] {
        let mut full = vec!["run"];
        full.extend(&args);
        full.extend(["--", "true"]);
        let out = brig(kit, Root, &full);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(125), "{args:?}: {stderr}");
        assert_eq!(stderr.lines().count(), 1, "{args:?}: {stderr}");
        assert!(stderr.contains(needle), "{args:?}: {stderr}");
    }
}

// --- the walls do not break real programs: python3, node and sh under the default
// profile with Landlock on.

fn run_ok(who: Mode, args: &[&str]) -> String {
    let kit = built_kit();
    let out = brig(kit, who, args);
    assert!(
        out.status.success(),
        "{who:?} brig {args:?}: {:?}\n{}{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

const PYTHON: &str = r#"
import subprocess, threading, multiprocessing, ssl, socket, os
print(subprocess.run(["sh", "-c", "echo sub"], capture_output=True, text=True).stdout.strip())
t = threading.Thread(target=lambda: print("thread")); t.start(); t.join()
def square(x): return x * x
if __name__ == "__main__":
    with multiprocessing.Pool(2) as pool: print(pool.map(square, range(4)))
    for method in ("spawn", "forkserver"):
        with multiprocessing.get_context(method).Pool(1) as pool: print(method, pool.map(abs, [-1]))
    print("ssl", len(ssl.create_default_context().get_ca_certs()) >= 0)
    udp = socket.socket(socket.AF_INET, socket.SOCK_DGRAM); udp.bind(("127.0.0.1", 0))
    udp.sendto(b"u", udp.getsockname()); print("udp", udp.recv(1))
    a, b = socket.socketpair(); a.send(b"x"); print("unix", b.recv(1))
    print("resolve", socket.getaddrinfo("localhost", 80)[0][4][0])
    try:
        tcp = socket.socket(); tcp.bind(("127.0.0.1", 0)); print("tcp bound")
    except OSError as err: print("tcp", err.errno)
"#;

const PYTHON_EXPECTED: &str = "sub\nthread\n[0, 1, 4, 9]\nspawn [1]\nforkserver [1]\nssl True\nudp b'u'\nunix b'x'\nresolve 127.0.0.1\n";

#[test]
fn python_runs_under_the_policy() {
    if kit().is_none() {
        return;
    }
    for who in [Root, Rootless] {
        let hello = run_ok(
            who,
            &[
                "run",
                "--profile",
                "python",
                "--",
                "python3",
                "-c",
                "print('hello')",
            ],
        );
        assert_eq!(hello, "hello\n");
        let out = run_ok(
            who,
            &["run", "--profile", "python", "--", "python3", "-c", PYTHON],
        );
        // The jail's own loopback takes TCP as well as UDP and unix sockets.
        assert_eq!(out, format!("{PYTHON_EXPECTED}tcp bound\n"), "{who:?}");
    }
    let out = run_ok(
        Root,
        &[
            "run",
            "--profile",
            "python",
            "--landlock",
            "off",
            "--",
            "python3",
            "-c",
            PYTHON,
        ],
    );
    assert_eq!(out, format!("{PYTHON_EXPECTED}tcp bound\n"));
}

const NODE: &str = r#"
const cp = require('child_process'); const { Worker } = require('worker_threads');
console.log(cp.execSync('echo sub').toString().trim());
const w = new Worker('require("worker_threads").parentPort.postMessage(6 * 7)', { eval: true });
w.on('message', m => { console.log('worker', m); w.terminate(); });
require('fs').writeFileSync('/tmp/n', 'x');
require('dns').lookup('localhost', (e, a) => console.log('dns', e ? e.code : a));
"#;

#[test]
fn node_runs_under_the_policy() {
    if kit().is_none() {
        return;
    }
    for who in [Root, Rootless] {
        let hello = run_ok(
            who,
            &[
                "run",
                "--profile",
                "node",
                "--",
                "node",
                "-e",
                "console.log(1 + 1)",
            ],
        );
        assert_eq!(hello, "2\n");
        let out = run_ok(who, &["run", "--profile", "node", "--", "node", "-e", NODE]);
        let mut lines: Vec<&str> = out.lines().collect();
        lines.sort_unstable();
        assert_eq!(lines, ["dns 127.0.0.1", "sub", "worker 42"], "{who:?}");
    }
}

#[test]
fn sh_runs_under_the_policy() {
    if kit().is_none() {
        return;
    }
    let script = "echo hello; x=$(echo sub); echo $x; echo a > /tmp/f; cat /tmp/f | wc -c; ls / > /dev/null && echo listed";
    for who in [Root, Rootless] {
        let out = run_ok(
            who,
            &["run", "--profile", "shell", "--", "sh", "-c", script],
        );
        assert_eq!(out, "hello\nsub\n2\nlisted\n", "{who:?}");
    }
}
