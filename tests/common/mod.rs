//! Helpers shared by the integration tests: running brig as root and rootless, temporary
//! directories that clean up after themselves, and checks on brig's output and on the
//! host's process table.
//!
//! Every jail test runs twice: as root (brig started directly by the test, which runs as
//! root) and rootless (brig started through `setpriv` as uid/gid 65534 with no
//! supplementary groups). `both_modes!` generates the two `#[test]` functions.
//!
//! No test passes by skipping: a test whose prerequisite (a program, root, ...) is missing
//! calls `require` (or `require_program`, `require_root`), which fails it with one line
//! saying what is missing and how to get it. Only with `BRIG_TEST_ALLOW_SKIP=1` does the
//! test return instead, and the skip is recorded for `tests/run.sh` to list.
//!
//! Each test binary's root (tests/jail/main.rs, tests/serve/main.rs,
//! tests/operators/main.rs, tests/host_identity.rs) declares `#[macro_use] mod common;`
//! (through `#[path]` for the folders), and each of its modules `use crate::common;` (the
//! limit, verdict, cgroup and audit tests also use `common::limits`; the VM tests use `Vm`).

#![allow(dead_code)]

pub mod e2b;
pub mod limits;
pub mod memory;
pub mod net;
pub mod secrets;
pub mod serve;
pub mod session;

use std::ffi::OsString;
use std::io::Read;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::sync::OnceLock;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::mpsc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// The unprivileged host id: brig's default mapping as root, and the rootless caller.
pub const NOBODY: u32 = 65534;

/// How long one brig run may take before the test kills it and fails.
pub const RUN_TIMEOUT: Duration = Duration::from_secs(60);

/// Prefix of the directory holding the copy of brig that uid 65534 can execute.
pub const ROOTLESS_DIR_PREFIX: &str = "brig-tests-";

/// Runs `fn NAME(mode: Mode)` as two tests, `NAME::root` and `NAME::rootless`.
/// (Each test binary's root declares `#[macro_use] mod common;`.)
macro_rules! both_modes {
    ($($name:ident),* $(,)?) => {$(
        mod $name {
            #[test]
            fn root() {
                super::$name($crate::common::Mode::Root)
            }
            #[test]
            fn rootless() {
                super::$name($crate::common::Mode::Rootless)
            }
        }
    )*};
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mode {
    /// brig runs as root (the test's own user).
    Root,
    /// brig runs as uid/gid 65534 via `setpriv`.
    Rootless,
}

impl Mode {
    /// The host uid/gid that the jail's user maps to in this mode rootless, or as root
    /// with `--host-uid-range off` (by default, as root, each jail has one of its own).
    pub fn host_id(self) -> u32 {
        NOBODY
    }
}

/// The brig binary cargo built for these tests.
pub fn brig() -> &'static Path {
    Path::new(env!("CARGO_BIN_EXE_brig"))
}

/// A copy of brig that uid 65534 can read and execute, in a 0755 directory named after
/// this test process. It is removed when the test binary exits; copies left behind by
/// test processes that no longer exist are removed when the next one makes its copy.
pub fn rootless_brig() -> &'static Path {
    static COPY: OnceLock<PathBuf> = OnceLock::new();
    COPY.get_or_init(|| {
        remove_stale_rootless_copies();
        let dir = rootless_dir();
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir(&dir).expect("create the rootless brig directory");
        set_mode(&dir, 0o755);
        let copy = dir.join("brig");
        // `cp` writes the copy in its own process: if this (multi-threaded) test process
        // held the file open for writing, a concurrent fork could keep it open and make
        // exec fail with ETXTBSY.
        let status = Command::new("cp")
            .arg(brig())
            .arg(&copy)
            .stdin(Stdio::null())
            .status()
            .expect("run cp");
        assert!(status.success(), "cp {} failed", brig().display());
        set_mode(&copy, 0o755);
        // SAFETY: registers a plain `extern "C" fn()` to run at process exit.
        unsafe {
            libc::atexit(remove_rootless_copy);
        }
        copy
    })
}

fn rootless_dir() -> PathBuf {
    std::env::temp_dir().join(format!("{ROOTLESS_DIR_PREFIX}{}", std::process::id()))
}

extern "C" fn remove_rootless_copy() {
    let _ = std::fs::remove_dir_all(rootless_dir());
}

fn remove_stale_rootless_copies() {
    let Ok(entries) = std::fs::read_dir(std::env::temp_dir()) else {
        return;
    };
    for entry in entries.flatten() {
        let name = entry.file_name().to_string_lossy().into_owned();
        let Some(pid) = name.strip_prefix(ROOTLESS_DIR_PREFIX) else {
            continue;
        };
        if pid.parse::<u32>().is_ok() && !Path::new("/proc").join(pid).exists() {
            let _ = std::fs::remove_dir_all(entry.path());
        }
    }
}

pub fn set_mode(path: &Path, mode: u32) {
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode))
        .unwrap_or_else(|err| panic!("chmod {mode:o} {}: {err}", path.display()));
}

/// The brig binary to start in `mode`: the one cargo built, or its copy that uid 65534 can
/// execute.
pub fn brig_for(mode: Mode) -> &'static Path {
    match mode {
        Mode::Root => brig(),
        Mode::Rootless => rootless_brig(),
    }
}

/// The command line that starts brig with `args` in `mode`.
pub fn argv(mode: Mode, args: &[&str]) -> Vec<OsString> {
    argv_as(mode, brig_for(mode), args)
}

/// The command line that starts `program` with `args` in `mode`: directly as root, or
/// through `setpriv` as uid/gid 65534 with no supplementary groups.
pub fn argv_as(mode: Mode, program: impl Into<OsString>, args: &[&str]) -> Vec<OsString> {
    assert!(
        nix::unistd::geteuid().is_root(),
        "the integration tests run brig as root and, through setpriv, rootless: run them as root"
    );
    let mut argv: Vec<OsString> = match mode {
        Mode::Root => vec![],
        Mode::Rootless => vec![
            "setpriv".into(),
            "--reuid=65534".into(),
            "--regid=65534".into(),
            "--clear-groups".into(),
        ],
    };
    argv.push(program.into());
    argv.extend(args.iter().map(OsString::from));
    argv
}

/// The system's interpreter (`/usr/bin/NAME`) where there is one: a PATH lookup may find a
/// per-user shim (pyenv) that uid 65534 cannot run, and the jails bind the host's /usr.
pub fn interpreter(name: &str) -> String {
    let system = Path::new("/usr/bin").join(name);
    if system.exists() {
        system.display().to_string()
    } else {
        name.to_string()
    }
}

/// A `Command` for `argv`: stdin from /dev/null, working directory `/` (readable by
/// every user), and no TERM, so that the jail's environment is predictable.
pub fn command_from(argv: &[OsString]) -> Command {
    let mut command = Command::new(&argv[0]);
    command
        .args(&argv[1..])
        .current_dir("/")
        .env_remove("TERM")
        .stdin(Stdio::null());
    command
}

/// A `Command` that runs brig with `args` in `mode`.
pub fn command(mode: Mode, args: &[&str]) -> Command {
    command_from(&argv(mode, args))
}

/// A `Command` that runs `program` with `args` in `mode` (see `argv_as`, `command_from`).
pub fn command_as(mode: Mode, program: impl Into<OsString>, args: &[&str]) -> Command {
    command_from(&argv_as(mode, program, args))
}

/// Runs brig with `args` in `mode` and returns what it printed and its status.
pub fn run(mode: Mode, args: &[&str]) -> Output {
    output_of(command(mode, args))
}

/// Runs `command` to completion, capturing stdout and stderr; kills it after
/// `RUN_TIMEOUT` so that a hanging brig fails the test instead of blocking the suite.
pub fn output_of(mut command: Command) -> Output {
    command.stdout(Stdio::piped()).stderr(Stdio::piped());
    let child = command
        .spawn()
        .unwrap_or_else(|err| panic!("spawn {command:?}: {err}"));
    let watchdog = Watchdog::new(child.id(), RUN_TIMEOUT);
    let output = child.wait_with_output().expect("wait for brig");
    drop(watchdog);
    output
}

/// Kills a process (by its pid, which this test started) if it is still running when
/// the timeout expires; dropping the watchdog disarms it.
pub struct Watchdog {
    disarm: Option<mpsc::Sender<()>>,
    thread: Option<JoinHandle<()>>,
}

impl Watchdog {
    pub fn new(pid: u32, timeout: Duration) -> Watchdog {
        let (disarm, armed) = mpsc::channel::<()>();
        let thread = std::thread::spawn(move || {
            if let Err(mpsc::RecvTimeoutError::Timeout) = armed.recv_timeout(timeout) {
                eprintln!("watchdog: pid {pid} still running after {timeout:?}; killing it");
                kill(pid, libc::SIGKILL);
            }
        });
        Watchdog {
            disarm: Some(disarm),
            thread: Some(thread),
        }
    }
}

impl Drop for Watchdog {
    fn drop(&mut self) {
        drop(self.disarm.take());
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

/// A spawned brig that is killed and reaped if the test ends (or panics) before it does.
pub struct Running {
    pub child: Child,
    watchdog: Option<Watchdog>,
}

impl Running {
    pub fn spawn(mut command: Command) -> Running {
        let child = command
            .spawn()
            .unwrap_or_else(|err| panic!("spawn {command:?}: {err}"));
        let watchdog = Some(Watchdog::new(child.id(), RUN_TIMEOUT));
        Running { child, watchdog }
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Waits for the process, reading whatever stdout and stderr are still piped.
    pub fn wait(mut self) -> Output {
        let stdout = read_all(self.child.stdout.take());
        let stderr = read_all(self.child.stderr.take());
        let status = self.child.wait().expect("wait for brig");
        self.watchdog.take();
        Output {
            status,
            stdout: stdout.join().expect("read stdout"),
            stderr: stderr.join().expect("read stderr"),
        }
    }
}

fn read_all<R: Read + Send + 'static>(pipe: Option<R>) -> JoinHandle<Vec<u8>> {
    std::thread::spawn(move || {
        let mut bytes = Vec::new();
        if let Some(mut pipe) = pipe {
            let _ = pipe.read_to_end(&mut bytes);
        }
        bytes
    })
}

impl Drop for Running {
    fn drop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            kill(self.child.id(), libc::SIGKILL);
            let _ = self.child.wait();
        }
        self.watchdog.take();
    }
}

/// Sends `signal` to `pid`, a process this test started.
pub fn kill(pid: u32, signal: libc::c_int) {
    // SAFETY: kill(2) has no memory-safety preconditions.
    unsafe {
        libc::kill(pid as libc::pid_t, signal);
    }
}

/// The exit code, panicking with the output if the process died of a signal.
pub fn code(output: &Output) -> i32 {
    output
        .status
        .code()
        .unwrap_or_else(|| panic!("brig died of a signal: {}", describe(output)))
}

pub fn stdout(output: &Output) -> String {
    String::from_utf8_lossy(&output.stdout).into_owned()
}

pub fn stderr(output: &Output) -> String {
    String::from_utf8_lossy(&output.stderr).into_owned()
}

/// Status, stdout and stderr, for assertion messages.
pub fn describe(output: &Output) -> String {
    format!(
        "status {:?}\n--- stdout\n{}--- stderr\n{}---",
        output.status,
        stdout(output),
        stderr(output)
    )
}

/// Asserts that brig exited with `expected` and returns its stdout.
pub fn assert_code(output: &Output, expected: i32) -> String {
    assert_eq!(
        output.status.code(),
        Some(expected),
        "expected exit status {expected}; {}",
        describe(output)
    );
    stdout(output)
}

/// Asserts that the program ran and exited 0, and returns its stdout.
pub fn assert_success(output: &Output) -> String {
    assert_code(output, 0)
}

/// Asserts brig's contract for its own failures: exit status 125, nothing on stdout, and
/// exactly one line on stderr that starts with `brig: ` and contains every needle.
/// Returns that line.
pub fn assert_one_line_error(output: &Output, needles: &[&str]) -> String {
    if let Some(problem) = one_line_error_problem(output, needles) {
        panic!("{problem}");
    }
    stderr(output)
}

/// What breaks the one-line-error contract in `output`, if anything.
pub fn one_line_error_problem(output: &Output, needles: &[&str]) -> Option<String> {
    let err = stderr(output);
    let mut problems = Vec::new();
    if output.status.code() != Some(125) {
        problems.push(format!("exit status {:?}, not 125", output.status.code()));
    }
    if err.lines().count() != 1 || !err.ends_with('\n') {
        problems.push("stderr is not exactly one line".to_string());
    }
    if !err.starts_with("brig: ") {
        problems.push("stderr does not start with `brig: `".to_string());
    }
    for needle in needles {
        if !err.contains(needle) {
            problems.push(format!("stderr does not mention {needle:?}"));
        }
    }
    if !output.stdout.is_empty() {
        problems.push("something was printed on stdout".to_string());
    }
    (!problems.is_empty()).then(|| format!("{}; {}", problems.join(", "), describe(output)))
}

/// `key value...` lines printed by a jail script, as (key, rest of the line).
pub fn fields(text: &str) -> Vec<(String, String)> {
    text.lines()
        .filter_map(|line| {
            let (key, value) = line.split_once(' ').unwrap_or((line, ""));
            (!key.is_empty()).then(|| (key.to_string(), value.to_string()))
        })
        .collect()
}

/// The value of the first `key value` line, panicking with the whole text if missing.
pub fn field(text: &str, key: &str) -> String {
    fields(text)
        .into_iter()
        .find(|(k, _)| k == key)
        .map(|(_, v)| v)
        .unwrap_or_else(|| panic!("no line starting with {key:?} in:\n{text}"))
}

/// A token unique to this test process and call, for file and process names.
pub fn unique(label: &str) -> String {
    static NEXT: AtomicUsize = AtomicUsize::new(0);
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.subsec_nanos())
        .unwrap_or(0);
    format!(
        "{label}-{}-{}-{nanos:x}",
        std::process::id(),
        NEXT.fetch_add(1, Ordering::Relaxed)
    )
}

/// A fresh directory under the system temp dir, removed with its contents on drop.
/// Its mode is 0755, so rootless brig (uid 65534) can read it; `writable_by_all` makes it
/// 0777. Names start with `bt-` (never `brig`, which the leftover checks look for).
pub struct TempDir {
    path: PathBuf,
}

impl TempDir {
    pub fn new(label: &str) -> TempDir {
        let path = std::env::temp_dir().join(unique(&format!("bt-{label}")));
        std::fs::create_dir(&path).unwrap_or_else(|err| panic!("create {}: {err}", path.display()));
        set_mode(&path, 0o755);
        TempDir { path }
    }

    pub fn writable_by_all(self) -> TempDir {
        set_mode(&self.path, 0o777);
        self
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The path as a `&str`, for building brig arguments.
    pub fn str(&self) -> &str {
        self.path.to_str().expect("temp paths are UTF-8")
    }

    /// Writes a file (mode 0644) inside the directory and returns its path.
    pub fn file(&self, name: &str, contents: &str) -> PathBuf {
        let path = self.path.join(name);
        std::fs::write(&path, contents)
            .unwrap_or_else(|err| panic!("write {}: {err}", path.display()));
        set_mode(&path, 0o644);
        path
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.path);
    }
}

/// A file directly in the system temp dir (e.g. /tmp), removed on drop.
pub struct TempFile {
    path: PathBuf,
}

impl TempFile {
    pub fn new(label: &str, contents: &str) -> TempFile {
        let path = std::env::temp_dir().join(unique(&format!("bt-{label}")));
        std::fs::write(&path, contents)
            .unwrap_or_else(|err| panic!("write {}: {err}", path.display()));
        set_mode(&path, 0o644);
        TempFile { path }
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    pub fn str(&self) -> &str {
        self.path.to_str().expect("temp paths are UTF-8")
    }
}

impl Drop for TempFile {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.path);
    }
}

/// Polls `done` every 20 ms until it returns true or `timeout` passes.
pub fn wait_until(timeout: Duration, mut done: impl FnMut() -> bool) -> bool {
    let deadline = Instant::now() + timeout;
    loop {
        if done() {
            return true;
        }
        if Instant::now() >= deadline {
            return false;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Pids of host processes, as the test (root, host namespaces) sees them.
pub fn host_pids() -> Vec<u32> {
    std::fs::read_dir("/proc")
        .expect("read /proc")
        .flatten()
        .filter_map(|entry| entry.file_name().to_str()?.parse().ok())
        .collect()
}

/// Host processes whose argv[0] is exactly `name` (set with `exec -a NAME` in the jail).
pub fn processes_named(name: &str) -> Vec<u32> {
    host_pids()
        .into_iter()
        .filter(|pid| {
            std::fs::read(format!("/proc/{pid}/cmdline"))
                .map(|cmdline| cmdline.split(|&b| b == 0).next() == Some(name.as_bytes()))
                .unwrap_or(false)
        })
        .collect()
}

/// Host processes whose environment contains `needle`.
pub fn processes_with_environ(needle: &str) -> Vec<u32> {
    host_pids()
        .into_iter()
        .filter(|pid| {
            std::fs::read(format!("/proc/{pid}/environ"))
                .map(|environ| {
                    environ
                        .split(|&b| b == 0)
                        .any(|var| var == needle.as_bytes())
                })
                .unwrap_or(false)
        })
        .collect()
}

/// Number of mounts in the test's (the host's) mount namespace.
pub fn host_mount_count() -> usize {
    std::fs::read_to_string("/proc/self/mountinfo")
        .expect("read /proc/self/mountinfo")
        .lines()
        .count()
}

/// Entries of the system temp dir whose name contains `brig`, except the directories of
/// rootless copies (made and swept by these tests).
pub fn brig_named_temp_entries() -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(std::env::temp_dir())
        .expect("read the temp dir")
        .flatten()
        .map(|entry| entry.file_name().to_string_lossy().into_owned())
        .filter(|name| name.contains("brig") && !name.starts_with(ROOTLESS_DIR_PREFIX))
        .collect();
    names.sort();
    names
}

/// `args` followed by `--` and `program`, as one argument list.
pub fn with_program<'a>(args: &[&'a str], program: &[&'a str]) -> Vec<&'a str> {
    let mut all = args.to_vec();
    all.push("--");
    all.extend_from_slice(program);
    all
}

// ---------------------------------------------------------------------------------------
// Prerequisites: a missing one fails the test, unless skipping is allowed explicitly

/// Set to `1`, a missing prerequisite skips the test (recorded) instead of failing it.
pub const ALLOW_SKIP_VAR: &str = "BRIG_TEST_ALLOW_SKIP";

/// Where skips are recorded (`tests/run.sh` sets it); by default
/// `$CARGO_TARGET_TMPDIR/brig-test-skips` (target/x86_64-unknown-linux-gnu/tmp/...).
pub const SKIP_DIR_VAR: &str = "BRIG_TEST_SKIP_DIR";

/// Whether the test may go on: true when `available`. When not, the test fails with one
/// line naming `what` is missing and `how` to get it; only with `BRIG_TEST_ALLOW_SKIP=1`
/// does this return false instead (the caller returns), after appending
/// `CRATE::TEST: what is missing` to this process's file in the skip directory.
///
/// ```ignore
/// if !require("qemu-system-x86_64", "tests/run.sh installs it", found) {
///     return;
/// }
/// ```
pub fn require(what: &str, how: &str, available: bool) -> bool {
    if available {
        return true;
    }
    let test = current_test();
    if std::env::var_os(ALLOW_SKIP_VAR).is_some_and(|value| value == "1") {
        let record = record_skip(&format!("{test}: {what} is missing\n"));
        eprintln!(
            "SKIPPED {test}: {what} is missing ({ALLOW_SKIP_VAR}=1); recorded in {}; to run it: {how}",
            record.display()
        );
        return false;
    }
    panic!(
        "{test} needs {what}, which is missing; to get it: {how}. ({ALLOW_SKIP_VAR}=1 skips such tests instead, recorded for tests/run.sh to list)"
    );
}

/// `require` for a program that must be on PATH (found as `command -v` would).
pub fn require_program(program: &str, how: &str) -> bool {
    require(
        &format!("the program `{program}`"),
        how,
        program_on_path(program),
    )
}

/// `require` for running as root.
pub fn require_root() -> bool {
    require(
        "root",
        "run the tests as root (tests/run.sh)",
        nix::unistd::geteuid().is_root(),
    )
}

/// Whether an executable file named `program` is in a directory of PATH.
pub fn program_on_path(program: &str) -> bool {
    let path = std::env::var_os("PATH").unwrap_or_default();
    std::env::split_paths(&path).any(|dir| {
        std::fs::metadata(dir.join(program))
            .is_ok_and(|meta| meta.is_file() && meta.permissions().mode() & 0o111 != 0)
    })
}

/// `crate::test_name` of the running test (libtest names each test's thread after it).
fn current_test() -> String {
    let thread = std::thread::current();
    let name = thread.name().unwrap_or("unknown test");
    format!("{}::{name}", env!("CARGO_CRATE_NAME"))
}

/// The directory skips are recorded in.
pub fn skip_dir() -> PathBuf {
    std::env::var_os(SKIP_DIR_VAR)
        .map(PathBuf::from)
        .unwrap_or_else(|| Path::new(env!("CARGO_TARGET_TMPDIR")).join("brig-test-skips"))
}

/// Appends `line` to this test process's own file in the skip directory (one write on an
/// O_APPEND file, so concurrent tests of the process keep their lines whole; other test
/// processes have files of their own). Returns the file.
fn record_skip(line: &str) -> PathBuf {
    use std::io::Write;
    let dir = skip_dir();
    std::fs::create_dir_all(&dir)
        .unwrap_or_else(|err| panic!("create the skip directory {}: {err}", dir.display()));
    let path = dir.join(format!(
        "{}.{}",
        env!("CARGO_CRATE_NAME"),
        std::process::id()
    ));
    std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(&path)
        .and_then(|mut file| file.write_all(line.as_bytes()))
        .unwrap_or_else(|err| panic!("record the skip in {}: {err}", path.display()));
    path
}

// ---------------------------------------------------------------------------------------
// The pure cgroup v2 VM (tests/vm/run-in-vm.sh)

/// tests/vm/run-in-vm.sh: boots a throwaway qemu VM whose kernel has only cgroup2 (every
/// controller enabled) and runs one command there as root.
pub fn vm_runner() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/vm/run-in-vm.sh")
}

/// A directory shared with a VM (the guest sees only it, at the same path) holding a copy
/// of brig; removed on drop.
pub struct Vm {
    share: TempDir,
    brig: PathBuf,
}

impl Vm {
    /// None (the test returns) only when qemu is missing, the test is not root (who could
    /// install it) and skipping is allowed.
    pub fn new(label: &str) -> Option<Vm> {
        let qemu = "qemu-system-x86_64";
        if !require(
            &format!("the program `{qemu}`"),
            "run the test as root once (tests/vm/run-in-vm.sh installs qemu-system-x86 with apt-get), or apt-get install qemu-system-x86",
            program_on_path(qemu) || nix::unistd::geteuid().is_root(),
        ) {
            return None;
        }
        let share = TempDir::new(label);
        let brig_copy = share.path().join("brig");
        let copied = Command::new("cp")
            .arg(brig())
            .arg(&brig_copy)
            .stdin(Stdio::null())
            .status()
            .expect("run cp");
        assert!(copied.success(), "cp {}", brig().display());
        Some(Vm {
            share,
            brig: brig_copy,
        })
    }

    /// The shared directory.
    pub fn share(&self) -> &Path {
        self.share.path()
    }

    /// brig's copy in the shared directory.
    pub fn brig(&self) -> &Path {
        &self.brig
    }

    /// Runs `command` in a VM with one CPU (boot included, at most `timeout_secs`; then
    /// run-in-vm.sh kills qemu and exits 124) and returns its output. No Watchdog:
    /// run-in-vm.sh enforces its own timeout and kills qemu by pid.
    pub fn run(&self, timeout_secs: u64, command: &[&std::ffi::OsStr]) -> Output {
        let mut vm_run = Command::new(vm_runner());
        vm_run
            .args(["--quiet", "--cpus", "1", "--timeout"])
            .arg(timeout_secs.to_string())
            .arg("--share")
            .arg(self.share())
            .arg("--")
            .args(command)
            .stdin(Stdio::null());
        vm_run.output().expect("run tests/vm/run-in-vm.sh")
    }
}

/// Copies tests/vm/checks.sh, which the VM scripts source, into a VM's shared directory.
pub fn copy_vm_checks(share: &Path) {
    let source = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/vm/checks.sh");
    std::fs::copy(source, share.join("checks.sh")).expect("copy tests/vm/checks.sh");
}

/// Checks a VM script's output, which prints `ok NAME` or `FAIL NAME: detail` per check
/// and `done` last: no check failed, run-in-vm.sh exited 0, the script finished, no check
/// name repeats and exactly `expected` checks passed. `what` names the run in the report.
pub fn assert_vm_checks(what: &str, output: &Output, elapsed: Duration, expected: usize) {
    let out = stdout(output);
    let report = format!(
        "{what} exit {:?} after {elapsed:.1?}\n--- stdout\n{out}--- stderr\n{}---",
        output.status.code(),
        stderr(output)
    );
    let failed: Vec<&str> = out.lines().filter(|l| l.starts_with("FAIL")).collect();
    assert!(
        failed.is_empty(),
        "failed checks:\n{}\n{report}",
        failed.join("\n")
    );
    assert_eq!(output.status.code(), Some(0), "{report}");
    assert_eq!(
        out.lines().last(),
        Some("done"),
        "the script did not finish\n{report}"
    );
    let passed: Vec<&str> = out
        .lines()
        .filter_map(|line| line.strip_prefix("ok "))
        .collect();
    let mut unique_names = passed.clone();
    unique_names.sort_unstable();
    unique_names.dedup();
    assert_eq!(
        unique_names.len(),
        passed.len(),
        "check names repeat\n{report}"
    );
    assert_eq!(
        passed.len(),
        expected,
        "expected {expected} checks\n{report}"
    );
}

/// A venv's python with `packages` (pinned, `name==version`) from PyPI, made at the first
/// call for `cell` (by one test; the others wait) in a directory under the target
/// directory named after them, and kept between runs; `require`d, as `what`.
pub fn pinned_python(
    cell: &'static OnceLock<Option<PathBuf>>,
    packages: &[&str],
    what: &str,
) -> Option<&'static Path> {
    let python = cell.get_or_init(|| {
        let venv = Path::new(env!("CARGO_TARGET_TMPDIR"))
            .join(format!("venv-{}", packages.join("-").replace("==", "-")));
        let python = venv.join("bin/python");
        if python.exists() {
            return Some(python);
        }
        // Built aside and renamed into place: an interrupted install leaves no half venv
        // (the venv's python finds its packages wherever the venv is; only the scripts
        // in bin/ name their directory: run modules with `python -m`).
        let building = venv.with_extension(format!("building-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&building);
        let made = Command::new(interpreter("python3"))
            .args(["-m", "venv"])
            .arg(&building)
            .status()
            .is_ok_and(|status| status.success())
            && Command::new(building.join("bin/python"))
                .args([
                    "-m",
                    "pip",
                    "install",
                    "--quiet",
                    "--disable-pip-version-check",
                ])
                .args(packages)
                .status()
                .is_ok_and(|status| status.success());
        let placed = made && (std::fs::rename(&building, &venv).is_ok() || python.exists());
        let _ = std::fs::remove_dir_all(&building);
        placed.then_some(python)
    });
    let found = require(
        &format!("{what} ({}, from PyPI)", packages.join(" ")),
        "let the test make a venv (`python3 -m venv`; on Debian `apt-get install python3-venv`) and reach PyPI once (kept under the target directory)",
        python.is_some(),
    );
    found.then(|| python.as_deref().unwrap())
}
