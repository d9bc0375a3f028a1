//! brig as a library: a jail is assembled first and given its program later, a jail that
//! never runs a program leaves nothing behind, and a caller with other threads is refused;
//! and `serve::Client`, through examples/session.rs against a `brig serve`.
//!
//! A jail's processes are cloned without exec, so this test needs a single-threaded
//! process: it has its own `main` instead of libtest's threaded harness, and prints the
//! plain `N passed, N failed` line.

use brig::jail::{Jail, Program};
use brig::{ErrorKind, Plan, config};
use std::path::{Path, PathBuf};

fn plan(yaml: &str) -> Plan {
    Plan::resolve(config::parse(yaml, "test").expect("options")).expect("plan")
}

/// A directory the jail's user can write to, bound into the jail at /out.
struct Out(PathBuf);

impl Out {
    fn new(name: &str) -> Out {
        let dir = std::env::temp_dir().join(format!("bt-library-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir(&dir).unwrap();
        std::process::Command::new("chmod")
            .arg("0777")
            .arg(&dir)
            .status()
            .unwrap();
        Out(dir)
    }

    fn read(&self, name: &str) -> String {
        std::fs::read_to_string(self.0.join(name)).unwrap_or_default()
    }
}

impl Drop for Out {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// The program comes after the jail is built: not the plan's command, with its own
/// environment and working directory.
fn program_given_after_assembly() -> Result<(), String> {
    let out = Out::new("later");
    let plan = plan(&format!(
        "bind: ['{}:/out']\nmemory: max\npids: max\ncommand: [/bin/false]\n",
        out.0.display()
    ));
    let jail = Jail::assemble(&plan).map_err(|err| format!("assemble: {err}"))?;
    let program = Program {
        argv: vec![
            "sh".into(),
            "-c".into(),
            "echo \"$GREETING from $(pwd)\" > /out/said; exit 7".into(),
        ],
        env: vec!["PATH=/usr/bin:/bin".into(), "GREETING=hello".into()],
        chdir: PathBuf::from("/tmp"),
        as_root: false,
    };
    let report = jail.run(&program).map_err(|err| format!("run: {err}"))?;
    let status = report.outcome.exit_status().code();
    let said = out.read("said");
    if status != 7 || said != "hello from /tmp\n" {
        return Err(format!("status {status}, said {said:?}"));
    }
    Ok(())
}

/// A jail dropped without a program is killed and reaped: no child of this process is
/// left, and its cgroup is gone.
fn unused_jail_leaves_nothing() -> Result<(), String> {
    let plan = plan("command: [true]\n");
    let cgroups = |dir: &Path| -> Vec<String> {
        std::fs::read_dir(dir)
            .map(|entries| {
                entries
                    .flatten()
                    .filter(|entry| entry.path().is_dir())
                    .map(|entry| entry.file_name().to_string_lossy().into_owned())
                    .collect()
            })
            .unwrap_or_default()
    };
    let parents: Vec<PathBuf> = ["memory", "pids", "unified"]
        .iter()
        .map(|name| Path::new("/sys/fs/cgroup").join(name).join("brig"))
        .collect();
    let before: Vec<Vec<String>> = parents.iter().map(|dir| cgroups(dir)).collect();
    let jail = Jail::assemble(&plan).map_err(|err| format!("assemble: {err}"))?;
    drop(jail);
    match nix::sys::wait::waitpid(None, Some(nix::sys::wait::WaitPidFlag::WNOHANG)) {
        Err(nix::errno::Errno::ECHILD) => {}
        other => return Err(format!("a child is left: {other:?}")),
    }
    let after: Vec<Vec<String>> = parents.iter().map(|dir| cgroups(dir)).collect();
    if before != after {
        return Err(format!("cgroups before {before:?}, after {after:?}"));
    }
    Ok(())
}

/// A program the jail cannot run as given is refused before it reaches the jail, which is
/// then torn down like any other.
fn bad_program_is_refused() -> Result<(), String> {
    let plan = plan("memory: max\npids: max\ncommand: [true]\n");
    let bad = [
        Program {
            argv: vec![],
            env: vec![],
            chdir: PathBuf::from("/"),
            as_root: false,
        },
        Program {
            argv: vec!["echo".into(), "a\0b".into()],
            env: vec![],
            chdir: PathBuf::from("/"),
            as_root: false,
        },
        Program {
            argv: vec!["true".into()],
            env: vec![],
            chdir: PathBuf::from("relative"),
            as_root: false,
        },
    ];
    for program in bad {
        let jail = Jail::assemble(&plan).map_err(|err| format!("assemble: {err}"))?;
        match jail.run(&program) {
            Err(err) if err.kind() == ErrorKind::BadInput => {}
            other => return Err(format!("{program:?}: {:?}", other.map(|r| r.outcome))),
        }
        if nix::sys::wait::waitpid(None, Some(nix::sys::wait::WaitPidFlag::WNOHANG))
            != Err(nix::errno::Errno::ECHILD)
        {
            return Err("the refused jail was left behind".into());
        }
    }
    Ok(())
}

/// With a second thread alive, assembling is refused with a clear error.
fn threaded_caller_is_refused() -> Result<(), String> {
    let plan = plan("memory: max\npids: max\ncommand: [true]\n");
    let (stop, wait) = std::sync::mpsc::channel::<()>();
    let thread = std::thread::spawn(move || {
        let _ = wait.recv();
    });
    let result = Jail::assemble(&plan);
    drop(stop);
    thread.join().unwrap();
    match result {
        Err(err)
            if err.kind() == ErrorKind::SetupFailed
                && err.message().contains("single-threaded") =>
        {
            Ok(())
        }
        Err(err) => Err(format!("wrong error: {err}")),
        Ok(_) => Err("a multi-threaded caller was allowed to clone a jail".into()),
    }
}

fn entries(dir: &str) -> usize {
    std::fs::read_dir(dir).map_or(0, |entries| entries.count())
}

/// A `--net filtered` run relays on a thread of its own and holds the jail's TUN device:
/// once `run` returns, the caller is single-threaded again and holds no descriptor more
/// than before (so it can assemble the next jail), and the report has the record.
fn filtered_run_leaves_no_thread_or_descriptor() -> Result<(), String> {
    // The kernel completes connections to the backlog without an accept: no thread.
    let listener = std::net::TcpListener::bind("127.0.0.1:0").map_err(|err| err.to_string())?;
    let port = listener.local_addr().map_err(|err| err.to_string())?.port();
    let (fds_before, tasks_before) = (entries("/proc/self/fd"), entries("/proc/self/task"));
    let plan = plan(&format!(
        "allow-net: ['web.test:{port}']\nadd-host: ['web.test:127.0.0.1']\nmemory: max\npids: max\n\
         command: [/usr/bin/python3, -c, \"import socket; socket.create_connection(('web.test', {port})).sendall(b'x')\"]\n"
    ));
    let report = brig::jail::run(&plan).map_err(|err| format!("run: {err}"))?;
    let network = report.network.ok_or("no network record")?;
    let json = serde_json::to_string(&network).map_err(|err| err.to_string())?;
    if network.connections.len() != 1 || network.bytes_sent != 1 {
        return Err(format!("one connection, one byte: {json}"));
    }
    let (fds_after, tasks_after) = (entries("/proc/self/fd"), entries("/proc/self/task"));
    if (fds_after, tasks_after) != (fds_before, tasks_before) {
        return Err(format!(
            "descriptors {fds_before} -> {fds_after}, threads {tasks_before} -> {tasks_after}"
        ));
    }
    drop(listener);
    Ok(())
}

/// A program given its own standard streams (as a server gives a pooled jail its
/// client's) reads and writes them, not those init inherited; brig keeps no copy, so the
/// output pipe ends when the program does.
fn program_gets_the_given_streams() -> Result<(), String> {
    use std::io::{Read, Write};
    let plan = plan("memory: max\npids: max\ncommand: [/bin/false]\n");
    let jail = Jail::assemble_for_streams(&plan).map_err(|err| format!("assemble: {err}"))?;
    let pipe = || nix::unistd::pipe().map_err(|err| err.to_string());
    let ((in_read, in_write), (out_read, out_write), (err_read, err_write)) =
        (pipe()?, pipe()?, pipe()?);
    let program = Program {
        argv: vec![
            "sh".into(),
            "-c".into(),
            "read line; echo \"out $line\"; echo \"err $line\" >&2".into(),
        ],
        env: vec!["PATH=/usr/bin:/bin".into()],
        chdir: PathBuf::from("/"),
        as_root: false,
    };
    std::fs::File::from(in_write)
        .write_all(b"hello\n")
        .map_err(|err| err.to_string())?;
    let report = jail
        .run_with_stdio(&program, Some(vec![in_read, out_write, err_write]))
        .map_err(|err| format!("run: {err}"))?;
    let read_all = |fd: std::os::fd::OwnedFd| {
        let mut text = String::new();
        std::fs::File::from(fd)
            .read_to_string(&mut text)
            .map(|_| text)
    };
    let (out, err) = (
        read_all(out_read).map_err(|e| e.to_string())?,
        read_all(err_read).map_err(|e| e.to_string())?,
    );
    if format!("{:?}", report.outcome) != "Exited(0)"
        || out != "out hello\n"
        || err != "err hello\n"
    {
        return Err(format!(
            "{:?}: stdout {out:?}, stderr {err:?}",
            report.outcome
        ));
    }
    Ok(())
}

/// What a per-jail host uid's switch around the clone touches: the ids, dumpability and
/// the effective capabilities.
fn caller_identity() -> String {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    let caps: Vec<&str> = status
        .lines()
        .filter(|line| line.starts_with("CapEff") || line.starts_with("CapPrm"))
        .collect();
    format!(
        "{:?} {:?} dumpable={:?} {caps:?}",
        nix::unistd::getresuid(),
        nix::unistd::getresgid(),
        nix::sys::prctl::get_dumpable()
    )
}

/// As root each jail's user namespace is created by its own host uid, brig switching its
/// effective ids around the clone: whichever step of assembling fails (each descriptor
/// brig opens runs into a lower RLIMIT_NOFILE, clone3's pidfd among them), and after a
/// jail that assembled, the caller is root again with its capabilities, and dumpable.
fn caller_is_root_again_whatever_fails() -> Result<(), String> {
    use nix::sys::resource::{Resource, getrlimit, setrlimit};
    let plan = plan("memory: max\npids: max\ncommand: [true]\n");
    let before = caller_identity();
    let (soft, hard) = getrlimit(Resource::RLIMIT_NOFILE).map_err(|err| err.to_string())?;
    let mut failures = Vec::new();
    for limit in 3..256 {
        setrlimit(Resource::RLIMIT_NOFILE, limit, hard).map_err(|err| err.to_string())?;
        let assembled = Jail::assemble(&plan);
        let outcome = match &assembled {
            Ok(jail) => Ok(jail.host_ids()),
            Err(err) => Err(err.to_string()),
        };
        drop(assembled);
        setrlimit(Resource::RLIMIT_NOFILE, soft, hard).map_err(|err| err.to_string())?;
        let after = caller_identity();
        if after != before {
            return Err(format!(
                "with nofile {limit} ({outcome:?}) the caller is {after}, was {before}"
            ));
        }
        match outcome {
            Ok((uid, gid)) if (0x7000_0000..=0x7000_FFFF).contains(&uid) && uid == gid => {
                return if failures.iter().any(|why: &String| why.contains("clone3")) {
                    Ok(())
                } else {
                    Err(format!("no failure in clone3 itself: {failures:?}"))
                };
            }
            Ok(ids) => return Err(format!("the jail's host ids are {ids:?}")),
            Err(why) => failures.push(why),
        }
    }
    Err(format!("never assembled: {failures:?}"))
}

type Test = fn() -> Result<(), String>;

/// examples/session.rs as a program: built here (`cargo test --all-targets` builds examples
/// as tests only, and a test binary alone builds none), beside this test binary.
fn session_example_program() -> Result<std::path::PathBuf, String> {
    static BUILT: std::sync::OnceLock<Result<std::path::PathBuf, String>> =
        std::sync::OnceLock::new();
    BUILT
        .get_or_init(|| {
            let built = std::process::Command::new(env!("CARGO"))
                .args(["build", "--quiet", "--example", "session"])
                .current_dir(env!("CARGO_MANIFEST_DIR"))
                .status()
                .map_err(|err| format!("cargo build --example session: {err}"))?;
            if !built.success() {
                return Err(format!("cargo build --example session: {built}"));
            }
            std::env::current_exe()
                .map_err(|err| err.to_string())?
                .parent()
                .and_then(Path::parent)
                .map(|dir| dir.join("examples/session"))
                .filter(|example| example.exists())
                .ok_or_else(|| "cargo built no examples/session beside the test binary".into())
        })
        .clone()
}

/// examples/session.rs against a `brig serve`
/// this test starts: it prints what its session did, and leaves no session behind.
fn session_example_runs_against_a_server() -> Result<(), String> {
    session_example(false)
}

/// The same with the server run as nobody (uid 65534) and the example trusting it
/// through `BRIG_SERVER_UID`.
fn session_example_runs_against_a_rootless_server() -> Result<(), String> {
    session_example(true)
}

fn session_example(rootless: bool) -> Result<(), String> {
    let dir = std::env::temp_dir().join(format!(
        "bt-library-serve-{}-{rootless}",
        std::process::id()
    ));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir(&dir).map_err(|err| format!("{}: {err}", dir.display()))?;
    // Sticky and open to all, so that nobody can make its socket there (brig takes a
    // directory others may write only if it is sticky); the binary copied into it,
    // where nobody can run it (the build directory may be closed to it).
    let chmod = |path: &Path, mode: u32| {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode))
            .map_err(|err| format!("chmod {}: {err}", path.display()))
    };
    chmod(&dir, 0o1777)?;
    let socket = dir.join("brig.sock");
    let mut command = match rootless {
        false => std::process::Command::new(env!("CARGO_BIN_EXE_brig")),
        true => {
            let copy = dir.join("brig");
            std::fs::copy(env!("CARGO_BIN_EXE_brig"), &copy)
                .map_err(|err| format!("copy brig: {err}"))?;
            chmod(&copy, 0o755)?;
            let mut command = std::process::Command::new("setpriv");
            command.args(["--reuid=65534", "--regid=65534", "--clear-groups"]);
            command.arg(copy);
            command
        }
    };
    let mut server = command
        .args(["serve", "--quiet-limits", "--pool", "0", "--socket"])
        .arg(&socket)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .map_err(|err| format!("start brig serve: {err}"))?;
    let ran = (|| {
        let client = brig::serve::Client::new(&socket).trusting(65534);
        // Up once it answers its status (the socket exists before it listens).
        let mut tries = 0;
        while client.status().is_err() {
            tries += 1;
            if tries > 1000 {
                return Err("brig serve did not answer within 10s".to_string());
            }
            std::thread::sleep(std::time::Duration::from_millis(10));
        }
        // setpriv has become brig by now: the listener is who the test says.
        let status = std::fs::read_to_string(format!("/proc/{}/status", server.id()))
            .map_err(|err| format!("the server's /proc status: {err}"))?;
        let uid = status
            .lines()
            .find_map(|line| line.strip_prefix("Uid:"))
            .and_then(|ids| ids.split_whitespace().next())
            .unwrap_or_default();
        if uid != if rootless { "65534" } else { "0" } {
            return Err(format!("brig serve runs as uid {uid}"));
        }
        let example = session_example_program()?;
        let output = std::process::Command::new(&example)
            .arg(&socket)
            .env("BRIG_SERVER_UID", if rootless { "65534" } else { "0" })
            .output()
            .map_err(|err| format!("{}: {err}", example.display()))?;
        let stdout = String::from_utf8_lossy(&output.stdout);
        let stderr = String::from_utf8_lossy(&output.stderr);
        if !output.status.success() {
            return Err(format!(
                "the example failed ({}): {stdout}{stderr}",
                output.status
            ));
        }
        for expected in [
            "hello from sandbox\n",
            "exit code Some(0)",
            "read back: written by the example\n",
            "ls: hello.txt 23 bytes\n",
            "[Stdout] written by the example\n",
            "[Stderr] done\n",
            "streamed: Ok\n",
            "closed\n",
        ] {
            if !stdout.contains(expected) {
                return Err(format!(
                    "no {expected:?} in the example's output: {stdout}{stderr}"
                ));
            }
        }
        // The server counts a session gone once it has reaped its runner, just after the
        // close was answered.
        let mut left = usize::MAX;
        for _ in 0..1000 {
            left = client.status().map_err(|err| err.to_string())?.sessions;
            if left == 0 {
                return Ok(());
            }
            std::thread::sleep(std::time::Duration::from_millis(10));
        }
        Err(format!(
            "{left} sessions still open 10s after the example closed its own"
        ))
    })();
    let _ = nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(server.id() as i32),
        nix::sys::signal::Signal::SIGTERM,
    );
    let stopped = server.wait().map_err(|err| err.to_string());
    let _ = std::fs::remove_dir_all(&dir);
    match (ran, stopped) {
        (Err(why), _) => Err(why),
        (Ok(()), Ok(status)) if status.success() => Ok(()),
        (Ok(()), Ok(status)) => Err(format!("brig serve ended {status} at SIGTERM")),
        (Ok(()), Err(why)) => Err(why),
    }
}

fn main() {
    let tests: [(&str, Test); 9] = [
        (
            "caller_is_root_again_whatever_fails",
            caller_is_root_again_whatever_fails,
        ),
        ("program_given_after_assembly", program_given_after_assembly),
        ("unused_jail_leaves_nothing", unused_jail_leaves_nothing),
        ("bad_program_is_refused", bad_program_is_refused),
        ("threaded_caller_is_refused", threaded_caller_is_refused),
        (
            "program_gets_the_given_streams",
            program_gets_the_given_streams,
        ),
        (
            "filtered_run_leaves_no_thread_or_descriptor",
            filtered_run_leaves_no_thread_or_descriptor,
        ),
        (
            "session_example_runs_against_a_server",
            session_example_runs_against_a_server,
        ),
        (
            "session_example_runs_against_a_rootless_server",
            session_example_runs_against_a_rootless_server,
        ),
    ];
    let mut failed = 0;
    for (name, test) in tests {
        match test() {
            Ok(()) => println!("test {name} ... ok"),
            Err(why) => {
                failed += 1;
                println!("test {name} ... FAILED: {why}");
            }
        }
    }
    println!("{} passed, {failed} failed", tests.len() - failed);
    std::process::exit(if failed == 0 { 0 } else { 1 });
}
