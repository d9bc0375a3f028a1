//! `--secret`: the value is in no memory the jail has, and the process that holds it is
//! out of the jail's reach. While Python in the jail holds a decrypted connection open
//! (its request sent with the placeholder, the value put in by brig), the test, as root
//! on the host, reads `/proc/PID/mem` of every process of the jail (every readable
//! mapping) and of brig's own processes: the value is in brig's (the control: the scan
//! finds it where it is) and in none of the jail's. From inside, the jail's program
//! tries what an attacker would: every process it can see (`/proc`: its own PID
//! namespace, brig's supervisor is not in it) has its memory read and is ptrace-attached
//! (exact errno each); and core dumps are off (RLIMIT_CORE 0 hard, not raisable; a
//! crash leaves no core). A second control puts the value in the jail's environment:
//! the same host scan then finds it in the jail's memory.

use crate::common;

use common::memory::{descendants, memory_holds, pid_namespace};
use common::net::{Servers, require_tun};
use common::*;
use std::io::{BufRead, BufReader, Write};
use std::process::{Output, Stdio};

both_modes!(the_value_is_in_no_jail_memory_and_the_supervisor_is_out_of_reach);

const WEB: &str = "web.test";

/// The jail's program: one HTTPS request with the placeholder, the connection kept open;
/// then the attack on every other process it can see; then core dumps; then it waits
/// for a line on stdin (the host's scan runs meanwhile).
const ATTACK: &str = r#"
import ctypes, errno, http.client, os, resource, signal, ssl, subprocess, sys
port = int(sys.argv[1])
connection = http.client.HTTPSConnection("web.test", port, context=ssl.create_default_context(), timeout=30)
connection.request("GET", "/host", headers={"Authorization": "Bearer " + os.environ["API_KEY"]})
print("reply", connection.getresponse().read().decode(), flush=True)
libc = ctypes.CDLL(None, use_errno=True)
libc.ptrace.argtypes = [ctypes.c_long, ctypes.c_long, ctypes.c_void_p, ctypes.c_void_p]
def name(code):
    return errno.errorcode.get(code, str(code))
for pid in sorted(int(entry) for entry in os.listdir("/proc") if entry.isdigit()):
    if pid == os.getpid():
        continue
    try:
        with open(f"/proc/{pid}/mem", "rb") as mem:
            start = int(open(f"/proc/{pid}/maps").readline().split("-")[0], 16)
            mem.seek(start)
            mem.read(4096)
        memory = "read"
    except OSError as error:
        memory = name(error.errno)
    if libc.ptrace(16, pid, None, None) == 0:  # PTRACE_ATTACH
        traced = "attached"
        libc.ptrace(17, pid, None, None)  # PTRACE_DETACH
    else:
        traced = name(ctypes.get_errno())
    print("pid", pid, memory, traced, flush=True)
soft, hard = resource.getrlimit(resource.RLIMIT_CORE)
try:
    resource.setrlimit(resource.RLIMIT_CORE, (resource.RLIM_INFINITY, resource.RLIM_INFINITY))
    raised = "raised"
except (ValueError, OSError) as error:
    raised = "refused"
os.chdir("/tmp")
crash = subprocess.run([sys.executable, "-c", "import os, signal; os.kill(os.getpid(), signal.SIGSEGV)"])
cores = [entry for entry in os.listdir("/tmp") if "core" in entry]
print("core", soft, hard, raised, -crash.returncode, cores, flush=True)
print("ready", flush=True)
sys.stdin.readline()
"#;

/// Processes scanned: each pid, and whether its memory holds the value.
type Scanned = Vec<(u32, bool)>;

/// The jail's processes and brig's own (same PID namespace as brig), while the jail waits.
fn jail_and_brig(running: &Running) -> (Vec<u32>, Vec<u32>) {
    let brig_namespace = pid_namespace(running.pid());
    descendants(running.pid())
        .into_iter()
        .partition(|pid| pid_namespace(*pid) != brig_namespace)
}

/// Starts brig on ATTACK (with `extra` arguments); the lines it printed up to `ready`,
/// the jail's processes and brig's, each with whether its memory holds `value`.
fn attacked(
    mode: Mode,
    args: &[String],
    tls: u16,
    value: &str,
) -> (Vec<String>, Scanned, Scanned, Output) {
    let mut all: Vec<&str> = vec!["run"];
    all.extend(args.iter().map(String::as_str));
    let port = tls.to_string();
    all.extend(["--", "python3", "-c", ATTACK, &port]);
    let mut command = command(mode, &all);
    if args.iter().any(|arg| arg.ends_with("=env:BT_MEMORY_KEY")) {
        command.env("BT_MEMORY_KEY", value);
    }
    command
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let mut running = Running::spawn(command);
    let mut stdout = BufReader::new(running.child.stdout.take().unwrap());
    let mut lines = Vec::new();
    loop {
        let mut line = String::new();
        if stdout.read_line(&mut line).unwrap() == 0 {
            break;
        }
        if line.trim() == "ready" {
            break;
        }
        lines.push(line.trim().to_string());
    }
    let (jail, brig) = jail_and_brig(&running);
    let scan = |pids: Vec<u32>| -> Vec<(u32, bool)> {
        pids.into_iter()
            .filter_map(|pid| {
                memory_holds(pid, value.as_bytes())
                    .ok()
                    .map(|holds| (pid, holds))
            })
            .collect()
    };
    let (jail, brig) = (scan(jail), scan(brig));
    let _ = running.child.stdin.take().unwrap().write_all(b"done\n");
    let output = running.wait();
    (lines, jail, brig, output)
}

fn the_value_is_in_no_jail_memory_and_the_supervisor_is_out_of_reach(mode: Mode) {
    if !require_tun(mode) || !require_program("python3", "apt install python3") {
        return;
    }
    let servers = Servers::start();
    let dir = TempDir::new("secret-memory");
    let value = format!(
        "sk-memory-{}-{:?}",
        std::process::id(),
        std::time::Instant::now()
    )
    .replace(|c: char| !c.is_ascii_alphanumeric() && c != '-', "");
    let key = dir.file("api-key", &value);
    // The value from a file, and from brig's environment (whose block the jail's init,
    // a fork of brig, shares until it scrubs it).
    for source in [
        format!("API_KEY=file:{}", key.display()),
        "API_KEY=env:BT_MEMORY_KEY".to_string(),
    ] {
        let args: Vec<String> = [
            "--add-host",
            &format!("{WEB}:127.0.0.1"),
            "--allow-net",
            &format!("{WEB}:{}", servers.tls),
            "--upstream-ca",
            servers.ca.to_str().unwrap(),
            "--secret",
            &source,
            "--secret-host",
            &format!("API_KEY={WEB}:{}", servers.tls),
        ]
        .iter()
        .map(|arg| arg.to_string())
        .collect();
        let (lines, jail, brig, output) = attacked(mode, &args, servers.tls, &value);
        assert_eq!(
            code(&output),
            0,
            "{source}: {lines:?} {}",
            describe(&output)
        );
        assert_eq!(
            lines[0],
            format!("reply {WEB}:{}", servers.tls),
            "{lines:?}"
        );
        // The jail's program, and brig's init in the jail, were scanned: no value.
        assert!(jail.len() >= 2, "the jail's processes: {jail:?}");
        assert!(
            jail.iter().all(|(_, holds)| !holds),
            "{source}: the value is in the jail's memory: {jail:?}"
        );
        // The control: brig's supervisor (outside the jail) holds it, and the scan finds it.
        assert!(
            brig.iter().any(|(_, holds)| *holds),
            "the scan found the value nowhere: {brig:?}"
        );
        // Inside: the only other process the jail sees is its PID 1, brig's init (not
        // the supervisor, which is in no namespace the jail sees); reading its memory and
        // attaching to it are refused.
        let seen: Vec<&String> = lines
            .iter()
            .filter(|line| line.starts_with("pid "))
            .collect();
        assert_eq!(seen, ["pid 1 EACCES EPERM"], "{lines:?}");
        // Core dumps: none allowed (soft and hard 0), none raisable, none written by a
        // crash (SIGSEGV, 11).
        let core = lines.iter().find(|line| line.starts_with("core ")).unwrap();
        assert_eq!(core, "core 0 0 refused 11 []", "{lines:?}");
    }

    // The control: a value in the jail's environment is found by the same scan (another
    // one: brig zeroes every copy of a secret's value before it makes the jail, one
    // given to the jail by --env as well).
    let leaked = value.replace("sk-memory-", "sk-control-");
    let args: Vec<String> = [
        "--add-host",
        &format!("{WEB}:127.0.0.1"),
        "--allow-net",
        &format!("{WEB}:{}", servers.tls),
        "--upstream-ca",
        servers.ca.to_str().unwrap(),
        "--secret",
        &format!("API_KEY=file:{}", key.display()),
        "--secret-host",
        &format!("API_KEY={WEB}:{}", servers.tls),
        "--env",
        &format!("LEAKED={leaked}"),
    ]
    .iter()
    .map(|arg| arg.to_string())
    .collect();
    let (lines, jail, _, output) = attacked(mode, &args, servers.tls, &leaked);
    assert_eq!(code(&output), 0, "{lines:?} {}", describe(&output));
    assert!(
        jail.iter().any(|(_, holds)| *holds),
        "the scan would not notice: {jail:?}"
    );
}
