//! The jail's processes: inherited descriptors, the terminal, the time limit, signals,
//! exit statuses, zombies, and what happens to the jail when the program or brig ends.
//! Processes started in the jail are named `brig-daemon-...`/`brig-orphan-...` with
//! `exec -a`, so the test can look for them in the host's /proc by their argv[0].

use crate::common;

use common::*;
use std::ffi::OsString;
use std::io::{BufRead, BufReader, Write};
use std::process::Stdio;
use std::time::{Duration, Instant};

both_modes!(
    only_descriptors_0_1_2_are_inherited,
    no_controlling_terminal_even_under_a_pty,
    time_limit_kills_the_program,
    time_limit_kills_a_setsid_daemon_too,
    daemon_dies_when_the_program_exits,
    exit_status_is_the_programs,
    missing_or_unexecutable_program_is_127_or_126,
    signals_sent_to_brig_reach_the_program,
    init_reaps_orphaned_zombies,
    program_cannot_kill_or_stop_init,
    brig_dying_kills_the_jail,
);

/// How long a process started in the jail may take to show up in the host's /proc.
const APPEAR_TIMEOUT: Duration = Duration::from_secs(10);

fn only_descriptors_0_1_2_are_inherited(mode: Mode) {
    let script = r#"
import os
fds = []
for fd in range(1024):
    try:
        os.fstat(fd)
        fds.append(fd)
    except OSError:
        pass
print("fds", *fds)
"#;
    // The launcher opens 7, 8 and 9 without close-on-exec and execs brig with them.
    let mut launcher: Vec<OsString> = vec![
        "sh".into(),
        "-c".into(),
        "exec 7</etc/hostname 8>/dev/null 9<&0; ls /proc/self/fd >&2; exec \"$@\"".into(),
        "sh".into(),
    ];
    launcher.extend(argv(mode, &["run", "--", "python3", "-c", script]));
    let output = output_of(command_from(&launcher));
    let out = assert_success(&output);
    let launcher_fds = stderr(&output);
    for fd in ["7", "8", "9"] {
        assert!(
            launcher_fds.lines().any(|line| line == fd),
            "the launcher should hold fd {fd}: {launcher_fds}"
        );
    }
    assert_eq!(field(&out, "fds"), "0 1 2", "{out}");
}

/// Runs argv on a new pseudo-terminal that is the controlling terminal of its session,
/// prints everything written to the terminal and exits with the command's status.
const PTY_LAUNCHER: &str = r#"
import os, pty, sys
pid, master = pty.fork()
if pid == 0:
    try:
        os.close(os.open("/dev/tty", os.O_RDWR))
        print("launcher-tty OK", flush=True)
    except OSError as e:
        print("launcher-tty", e.errno, flush=True)
    os.execvp(sys.argv[1], sys.argv[1:])
output = b""
while True:
    try:
        chunk = os.read(master, 4096)
    except OSError:
        break
    if not chunk:
        break
    output += chunk
_, status = os.waitpid(pid, 0)
sys.stdout.write(output.decode(errors="replace").replace("\r\n", "\n"))
sys.exit(os.waitstatus_to_exitcode(status))
"#;

const TTY_ATTACKS: &str = r#"
import errno, fcntl, os, termios
def name(e):
    return errno.errorcode.get(e.errno, str(e.errno))
try:
    os.close(os.open("/dev/tty", os.O_RDWR))
    print("open-dev-tty OK")
except OSError as e:
    print("open-dev-tty", name(e))
print("stdin-isatty", os.isatty(0))
after_comm = open("/proc/self/stat").read().rsplit(")", 1)[1].split()
print("tty_nr", after_comm[4])
# Push input into the terminal brig was started from (a classic sandbox escape).
try:
    fcntl.ioctl(0, termios.TIOCSTI, b"x")
    print("tiocsti OK")
except OSError as e:
    print("tiocsti", name(e))
# Become a session leader and try to take the terminal as the controlling one.
os.setsid()
try:
    fcntl.ioctl(0, termios.TIOCSCTTY, 0)
    print("steal-tty OK")
except OSError as e:
    print("steal-tty", name(e))
"#;

fn no_controlling_terminal_even_under_a_pty(mode: Mode) {
    let mut launcher: Vec<OsString> = vec!["python3".into(), "-c".into(), PTY_LAUNCHER.into()];
    launcher.extend(argv(mode, &["run", "--", "python3", "-c", TTY_ATTACKS]));
    let output = output_of(command_from(&launcher));
    let out = assert_success(&output);
    assert_eq!(field(&out, "launcher-tty"), "OK", "{out}");
    assert_eq!(field(&out, "stdin-isatty"), "True", "{out}");
    assert_eq!(field(&out, "open-dev-tty"), "ENXIO", "{out}");
    assert_eq!(field(&out, "tty_nr"), "0", "{out}");
    assert_ne!(field(&out, "tiocsti"), "OK", "{out}");
    assert_ne!(field(&out, "steal-tty"), "OK", "{out}");
}

fn time_limit_kills_the_program(mode: Mode) {
    let started = Instant::now();
    let output = run(
        mode,
        &[
            "run",
            "--quiet-limits",
            "--time-limit",
            "1s",
            "--",
            "sleep",
            "1000",
        ],
    );
    let elapsed = started.elapsed();
    assert_code(&output, 124);
    // Not before the limit; that it was the limit and not `sleep` that ended it is the
    // status (124) and the line below.
    assert!(elapsed >= Duration::from_millis(900), "took {elapsed:?}");
    let err = stderr(&output);
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(
        err.starts_with("brig: ") && err.contains("time limit"),
        "{err}"
    );
}

fn time_limit_kills_a_setsid_daemon_too(mode: Mode) {
    let name = unique("brig-daemon");
    let script = format!("setsid bash -c 'exec -a {name} sleep 1000' & sleep 1000");
    let mut jail = command(
        mode,
        &["run", "--time-limit", "2s", "--", "sh", "-c", &script],
    );
    jail.stdout(Stdio::null()).stderr(Stdio::piped());
    let running = Running::spawn(jail);
    assert!(
        wait_until(APPEAR_TIMEOUT, || !processes_named(&name).is_empty()),
        "the daemon never started"
    );
    let output = running.wait();
    assert_code(&output, 124);
    assert_eq!(
        processes_named(&name),
        Vec::<u32>::new(),
        "the daemon outlived the jail"
    );
}

fn daemon_dies_when_the_program_exits(mode: Mode) {
    let name = unique("brig-daemon");
    let script = format!("setsid bash -c 'exec -a {name} sleep 1000' & read line; exit 5");
    let mut jail = command(mode, &["run", "--", "sh", "-c", &script]);
    jail.stdin(Stdio::piped()).stdout(Stdio::null());
    let mut running = Running::spawn(jail);
    assert!(
        wait_until(APPEAR_TIMEOUT, || !processes_named(&name).is_empty()),
        "the daemon never started"
    );
    // Let the program exit while its daemon is still alive.
    let mut stdin = running.child.stdin.take().unwrap();
    stdin.write_all(b"go\n").unwrap();
    drop(stdin);
    let output = running.wait();
    assert_code(&output, 5);
    assert_eq!(
        processes_named(&name),
        Vec::<u32>::new(),
        "the daemon outlived the program"
    );
}

fn exit_status_is_the_programs(mode: Mode) {
    for (script, expected) in [
        ("exit 0", 0),
        ("exit 3", 3),
        ("exit 255", 255),
        ("kill -9 $$", 128 + 9),
        ("kill -TERM $$", 128 + 15),
    ] {
        let output = run(mode, &["run", "--quiet-limits", "--", "sh", "-c", script]);
        assert_code(&output, expected);
        assert_eq!(stderr(&output), "", "{script}");
    }
}

fn missing_or_unexecutable_program_is_127_or_126(mode: Mode) {
    for (program, expected, needle) in [
        (
            "no-such-program-brig-test",
            127,
            "no-such-program-brig-test",
        ),
        ("/no/such/program", 127, "/no/such/program"),
        ("/etc/hostname", 126, "/etc/hostname"),
        ("/tmp", 126, "/tmp"),
    ] {
        let output = run(mode, &["run", "--", program]);
        assert_code(&output, expected);
        let err = stderr(&output);
        assert_eq!(err.lines().count(), 1, "{program}: {err}");
        assert!(err.starts_with("brig: "), "{program}: {err}");
        assert!(err.contains(needle), "{program}: {err}");
    }
}

fn signals_sent_to_brig_reach_the_program(mode: Mode) {
    let handled = [
        (libc::SIGTERM, "TERM", 42),
        (libc::SIGINT, "INT", 43),
        (libc::SIGHUP, "HUP", 44),
        (libc::SIGQUIT, "QUIT", 45),
        (libc::SIGUSR1, "USR1", 46),
        (libc::SIGUSR2, "USR2", 47),
    ];
    for (signal, name, status) in handled {
        let script =
            format!("trap 'exit {status}' {name}; echo ready; while :; do sleep 0.1; done");
        let output = signal_when_ready(mode, &["sh", "-c", &script], signal);
        assert_code(&output, status);
    }
    // Not handled: the program dies of the signal and brig reports 128+N.
    let output = signal_when_ready(
        mode,
        &["sh", "-c", "echo ready; exec sleep 1000"],
        libc::SIGTERM,
    );
    assert_code(&output, 128 + libc::SIGTERM);
}

/// Starts `program` in a jail, waits for it to print `ready`, sends `signal` to brig.
fn signal_when_ready(mode: Mode, program: &[&str], signal: libc::c_int) -> std::process::Output {
    let mut args = vec!["run", "--"];
    args.extend_from_slice(program);
    let mut jail = command(mode, &args);
    jail.stdout(Stdio::piped()).stderr(Stdio::piped());
    let mut running = Running::spawn(jail);
    let mut reader = BufReader::new(running.child.stdout.take().unwrap());
    let mut line = String::new();
    reader.read_line(&mut line).unwrap();
    assert_eq!(line, "ready\n", "{program:?}");
    kill(running.pid(), signal);
    running.wait()
}

fn init_reaps_orphaned_zombies(mode: Mode) {
    let script = r#"
import os, time
child = os.fork()
if child == 0:
    if os.fork() == 0:
        time.sleep(0.2)
        os._exit(0)
    os._exit(0)
os.waitpid(child, 0)
def processes():
    found = {}
    for pid in os.listdir("/proc"):
        if pid.isdigit():
            try:
                found[int(pid)] = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()[0]
            except OSError:
                pass
    return found
# The orphaned grandchild exits after 0.2s; init has to reap it.
deadline = time.time() + 5
while len(processes()) > 2 and time.time() < deadline:
    time.sleep(0.05)
print("self", os.getpid())
print("processes", *sorted(processes()))
print("zombies", *sorted(pid for pid, state in processes().items() if state == "Z"))
"#;
    let out = assert_success(&run(mode, &["run", "--", "python3", "-c", script]));
    assert_eq!(field(&out, "zombies"), "", "{out}");
    assert_eq!(
        field(&out, "processes"),
        format!("1 {}", field(&out, "self")),
        "{out}"
    );
}

fn program_cannot_kill_or_stop_init(mode: Mode) {
    // Signals from inside the jail that init has no handler for are dropped by the
    // kernel; if init could be killed or stopped, the program's status would be lost.
    let script = "kill -KILL 1; kill -STOP 1; kill -SEGV 1; sleep 0.2; \
                  grep '^State:' /proc/1/status; exit 7";
    let output = run(mode, &["run", "--", "sh", "-c", script]);
    let out = assert_code(&output, 7);
    let state = out.strip_prefix("State:").unwrap_or(&out).trim();
    assert!(
        !state.starts_with(['T', 't', 'Z', 'X']),
        "init should be alive and not stopped: {out}"
    );
}

fn brig_dying_kills_the_jail(mode: Mode) {
    let name = unique("brig-orphan");
    let marker = format!("BRIG_TEST_MARKER={}", unique("marker"));
    let (marker_name, marker_value) = marker.split_once('=').unwrap();
    let script = format!("exec -a {name} sleep 1000");
    let mut jail = command(mode, &["run", "--", "bash", "-c", &script]);
    jail.env(marker_name, marker_value)
        .stdout(Stdio::null())
        .stderr(Stdio::null());
    let mut running = Running::spawn(jail);
    assert!(
        wait_until(APPEAR_TIMEOUT, || !processes_named(&name).is_empty()),
        "the program never started"
    );
    // brig and the jail's init (a fork of brig) carry brig's environment.
    let with_marker = processes_with_environ(&marker);
    assert!(with_marker.len() >= 2, "brig and its init: {with_marker:?}");

    kill(running.pid(), libc::SIGKILL);
    let status = running.child.wait().unwrap();
    assert_eq!(
        std::os::unix::process::ExitStatusExt::signal(&status),
        Some(libc::SIGKILL)
    );
    assert!(
        wait_until(Duration::from_secs(5), || processes_named(&name).is_empty()),
        "the program outlived brig: {:?}",
        processes_named(&name)
    );
    assert!(
        wait_until(Duration::from_secs(5), || processes_with_environ(&marker)
            .is_empty()),
        "the jail's init outlived brig: {:?}",
        processes_with_environ(&marker)
    );
}
