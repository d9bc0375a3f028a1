//! Programs on a terminal in a session (`session_exec` with `pty`), for real, as root and
//! rootless: the terminal is the jail's own (/dev/pts/N of the jail's devpts), input
//! echoes and runs commands, the window follows `session_resize` (SIGWINCH), Ctrl-C
//! interrupts the foreground job, exit ends it with a verdict; the attacks (TIOCSTI,
//! TIOCLINUX, the host's terminals, the master) fail with exact errors; it ends with its
//! session; another uid cannot reach it; bad requests are one-line errors.

use crate::common;

use common::serve::{
    Server, ask, close_session as close, create_session as create, exchange_as_nobody, read_reply,
    runners, send_frame,
};
use common::session::{assert_bad_input, assert_output_lines, client_script, session_cli};
use common::*;
use serde_json::{Value, json};
use std::os::unix::net::UnixStream;
use std::time::Duration;

both_modes!(
    a_terminal_runs_the_jail_s_shell,
    resize_reaches_the_program_as_sigwinch,
    ctrl_c_interrupts_the_foreground_job,
    terminal_escapes_fail,
    a_terminal_ends_with_its_session,
    a_cut_cell_leaves_a_terminal_s_jobs_alone,
    a_flood_nobody_reads_is_bounded,
    bad_terminal_requests_are_one_line_errors,
    python_client_terminals,
    node_client_terminals,
    the_command_line_attaches_a_terminal,
);

#[test]
fn another_uid_cannot_reach_a_session_s_terminal() {
    if !require_root() {
        return;
    }
    let server = Server::start(Mode::Root, &["--pool", "0", "--socket-group", "65534"]);
    let id = create(&server, json!({}));
    let started = start(&server, &id, json!({}));
    let pid = started["pid"].as_u64().unwrap();
    for request in [
        json!({"type": "session_connect", "session": id, "pid": pid}),
        json!({"type": "session_resize", "session": id, "pid": pid, "cols": 10, "rows": 10}),
        json!({"type": "session_stdin", "session": id, "pid": pid, "data": "id\n"}),
        json!({"type": "session_exec", "session": id, "pty": {"cols": 80, "rows": 24}}),
    ] {
        let mut request = request;
        request["brig"] = json!(1);
        let output = exchange_as_nobody(server.socket(), &request);
        assert!(
            stdout(&output).contains("belongs to another user"),
            "{request}: {}",
            describe(&output)
        );
    }
    close(&server, &id);
}

/// Starts a program on an 80×24 terminal (`extra`: its command, env, tag); its
/// `process` frame.
fn start(server: &Server, id: &str, extra: Value) -> Value {
    let mut request =
        json!({"type": "session_exec", "session": id, "pty": {"cols": 80, "rows": 24}});
    for (key, value) in extra.as_object().unwrap() {
        request[key] = value.clone();
    }
    let reply = ask(server, request);
    assert_eq!(reply["type"], "process", "{reply}");
    assert_eq!(reply["running"], true, "{reply}");
    assert_eq!(reply["background"], true, "{reply}");
    assert_eq!(reply["pty"], json!({"cols": 80, "rows": 24}), "{reply}");
    reply
}

/// A connection to process `pid`: its `process` frame is read.
fn connect(server: &Server, id: &str, pid: u64) -> UnixStream {
    let stream = UnixStream::connect(&server.socket).unwrap();
    let request = json!({"brig": 1, "type": "session_connect", "session": id, "pid": pid});
    send_frame(&stream, request.to_string().as_bytes(), &[]);
    let first = read_reply(&stream).expect("a process frame");
    assert_eq!(first["type"], "process", "{first}");
    stream
}

fn input(server: &Server, id: &str, pid: u64, data: &str) {
    let reply = ask(
        server,
        json!({"type": "session_stdin", "session": id, "pid": pid, "data": data}),
    );
    assert_eq!(reply["type"], "stdin", "{reply}");
}

/// The terminal's output until it contains `wanted` (every frame's stream is "pty");
/// all of it. The wait is bounded by the frame reader (30 s a frame).
fn read_until(stream: &UnixStream, wanted: &str) -> String {
    let mut got = String::new();
    while !got.contains(wanted) {
        let frame =
            read_reply(stream).unwrap_or_else(|| panic!("closed before {wanted:?}: {got:?}"));
        assert_eq!(
            frame["type"], "output",
            "before {wanted:?}: {frame} after {got:?}"
        );
        assert_eq!(frame["stream"], "pty", "{frame}");
        got.push_str(frame["data"].as_str().unwrap_or_default());
    }
    got
}

/// Frames until the `exited` one.
fn until_exited(stream: &UnixStream) -> Value {
    loop {
        let frame = read_reply(stream).expect("a frame");
        if frame["type"] != "output" {
            return frame;
        }
    }
}

fn a_terminal_runs_the_jail_s_shell(mode: Mode) {
    let server = Server::start(mode, &["--pool", "0"]);
    let id = create(&server, json!({}));
    let started = start(&server, &id, json!({"tag": "shell"}));
    let pid = started["pid"].as_u64().unwrap();
    let stream = connect(&server, &id, pid);
    // The arithmetic shows the shell ran the line (its echo shows `$((6*7))`).
    input(&server, &id, pid, "tty; echo \"hi-$((6*7))\"; stty size\n");
    let seen = read_until(&stream, "24 80");
    assert!(seen.contains("tty; echo"), "input echoes: {seen:?}");
    assert!(seen.contains("hi-42"), "{seen:?}");
    // The jail's own devpts, a fresh instance: its first terminal.
    assert!(seen.contains("/dev/pts/0"), "{seen:?}");
    // Resized, the shell's next command sees the new size.
    let resized = ask(
        &server,
        json!({"type": "session_resize", "session": id, "tag": "shell", "cols": 100, "rows": 30}),
    );
    assert_eq!(
        resized,
        json!({"type": "resized", "pid": pid, "cols": 100, "rows": 30})
    );
    input(&server, &id, pid, "stty size\n");
    read_until(&stream, "30 100");
    let listed = ask(&server, json!({"type": "session_ps", "session": id}));
    let shell = &listed["processes"][0];
    assert_eq!(shell["pty"], json!({"cols": 100, "rows": 30}), "{listed}");
    // Exit ends it with its verdict.
    input(&server, &id, pid, "exit 3\n");
    let end = until_exited(&stream);
    assert_eq!(end["type"], "exited", "{end}");
    assert_eq!(end["verdict"]["exit_code"], 3, "{end}");
    close(&server, &id);
}

fn resize_reaches_the_program_as_sigwinch(mode: Mode) {
    let server = Server::start(mode, &["--pool", "0"]);
    let id = create(&server, json!({}));
    // `wait` returns at a trapped signal: the trap runs at once.
    let script =
        "trap 'echo winch $(stty size)' WINCH; echo ready; while :; do sleep 1 & wait; done";
    let started = start(&server, &id, json!({"command": ["sh", "-c", script]}));
    let pid = started["pid"].as_u64().unwrap();
    let stream = connect(&server, &id, pid);
    read_until(&stream, "ready");
    let resized = ask(
        &server,
        json!({"type": "session_resize", "session": id, "pid": pid, "cols": 132, "rows": 43}),
    );
    assert_eq!(resized["type"], "resized", "{resized}");
    read_until(&stream, "winch 43 132");
    let killed = ask(
        &server,
        json!({"type": "session_kill", "session": id, "pid": pid}),
    );
    assert_eq!(killed["type"], "signaled", "{killed}");
    let end = until_exited(&stream);
    assert_eq!(end["verdict"]["signal"], 9, "{end}");
    close(&server, &id);
}

fn ctrl_c_interrupts_the_foreground_job(mode: Mode) {
    let server = Server::start(mode, &["--pool", "0"]);
    let id = create(&server, json!({}));
    let started = start(&server, &id, json!({}));
    let pid = started["pid"].as_u64().unwrap();
    let stream = connect(&server, &id, pid);
    input(&server, &id, pid, "sleep 300\n");
    // Once `sleep` runs (exec'd: the shell made its group the terminal's foreground
    // one before), Ctrl-C goes to it through the terminal's line discipline.
    let sleeping = || {
        let reply = ask(
            &server,
            json!({"type": "session_exec", "session": id, "command": ["sh", "-c", "cat /proc/[0-9]*/comm 2>/dev/null"]}),
        );
        reply["stdout"]
            .as_str()
            .unwrap_or_default()
            .lines()
            .any(|line| line == "sleep")
    };
    assert!(
        wait_until(Duration::from_secs(30), sleeping),
        "sleep does not run"
    );
    input(&server, &id, pid, "\u{3}");
    input(&server, &id, pid, "echo \"status-$?\"\n");
    // 128 + SIGINT.
    read_until(&stream, "status-130");
    assert!(!sleeping(), "sleep survived Ctrl-C");
    close(&server, &id);
}

fn terminal_escapes_fail(mode: Mode) {
    if !require(
        "python3",
        "install python3 on the host",
        std::path::Path::new("/usr/bin/python3").exists(),
    ) {
        return;
    }
    let server = Server::start(mode, &["--pool", "0"]);
    let id = create(&server, json!({}));
    // Typing into the terminal (TIOCSTI) and the console's TIOCLINUX, on the program's
    // own controlling terminal: refused by brig's seccomp profile (EPERM), which is what
    // stops them where the kernel's dev.tty.legacy_tiocsti allows TIOCSTI.
    let probe = r#"
import errno, fcntl, os, termios
for name, request, arg in [("TIOCSTI", termios.TIOCSTI, b"x"), ("TIOCLINUX", 0x541C, b"\x07")]:
    try:
        fcntl.ioctl(0, request, arg)
        print(name, "allowed")
    except OSError as err:
        print(name, "refused", errno.errorcode[err.errno])
print("stdin", os.readlink("/proc/self/fd/0"), os.ttyname(0))
print("pts", sorted(os.listdir("/dev/pts")))
print("console", os.path.exists("/dev/console"))
fds = []
for pid in [p for p in os.listdir("/proc") if p.isdigit()]:
    try:
        fds += [os.readlink(f"/proc/{pid}/fd/{fd}") for fd in os.listdir(f"/proc/{pid}/fd")]
    except PermissionError:
        print("fds of", pid, "refused")
    except FileNotFoundError:
        pass
print("masters", [fd for fd in fds if "ptmx" in fd])
print("done")
"#;
    let started = start(&server, &id, json!({"command": ["python3", "-c", probe]}));
    let pid = started["pid"].as_u64().unwrap();
    let stream = connect(&server, &id, pid);
    let seen = read_until(&stream, "done");
    let seen = seen.replace("\r\n", "\n");
    for expected in [
        "TIOCSTI refused EPERM\n",
        "TIOCLINUX refused EPERM\n",
        // Its terminal is the jail's devpts' first; the jail's /dev/pts holds nothing
        // else (a fresh instance: no host terminal), and there is no /dev/console.
        "stdin /dev/pts/0 /dev/pts/0\n",
        "pts ['0', 'ptmx']\n",
        "console False\n",
        // The master is held by brig's runner alone: no process of the jail has it (the
        // jail's init, undumpable, does not show its descriptors).
        "fds of 1 refused\n",
        "masters []\n",
    ] {
        assert!(seen.contains(expected), "{expected:?} not in {seen:?}");
    }
    assert_eq!(until_exited(&stream)["verdict"]["exit_code"], 0);
    // A program without a terminal cannot open one through /dev/tty (ENXIO: it has no
    // controlling terminal), nor the host's console.
    let reply = ask(
        &server,
        json!({"type": "session_exec", "session": id, "command": ["sh", "-c", "cat /dev/tty; cat /dev/console"]}),
    );
    let stderr = reply["stderr"].as_str().unwrap_or_default();
    assert!(
        stderr.contains("/dev/tty: No such device or address"),
        "{reply}"
    );
    assert!(
        stderr.contains("/dev/console: No such file or directory"),
        "{reply}"
    );
    close(&server, &id);
}

fn a_terminal_ends_with_its_session(mode: Mode) {
    let server = Server::start(mode, &["--pool", "0"]);
    let marker = format!("BRIG_TEST_MARKER={}", unique("pty"));
    let id = create(&server, json!({}));
    let runner = *runners(&server).last().expect("the session's runner");
    // The runner's descriptors of terminals' masters (one terminal: its output, its
    // input, the master itself).
    let masters = || {
        std::fs::read_dir(format!("/proc/{runner}/fd"))
            .unwrap()
            .flatten()
            .filter_map(|fd| std::fs::read_link(fd.path()).ok())
            .filter(|target| target.to_string_lossy().contains("ptmx"))
            .count()
    };
    let started = start(&server, &id, json!({"command": ["sh", "-c", "exit 0"]}));
    let stream = connect(&server, &id, started["pid"].as_u64().unwrap());
    assert_eq!(until_exited(&stream)["type"], "exited");
    assert_eq!(masters(), 0, "an ended terminal's master is closed");
    start(
        &server,
        &id,
        json!({"env": [marker], "command": ["sleep", "300"]}),
    );
    assert_eq!(masters(), 3);
    assert!(
        wait_until(Duration::from_secs(30), || processes_with_environ(&marker)
            .len()
            == 1),
        "the terminal's program does not run"
    );
    close(&server, &id);
    assert!(
        wait_until(Duration::from_secs(60), || processes_with_environ(&marker)
            .is_empty()),
        "the terminal's program outlived its session"
    );
}

/// Root only: a session's `pids` option needs a cgroup brig may write (rootless here, the
/// host has none to give; there the default RLIMIT_NPROC holds instead).
#[test]
fn a_terminal_counts_against_the_session_s_pids() {
    if !require_root() {
        return;
    }
    let server = Server::start(Mode::Root, &["--pool", "0"]);
    // The session's cgroup holds what a terminal's program starts, as for any of the
    // session's processes.
    let id = create(&server, json!({"options": {"pids": 16}}));
    let script = "for i in $(seq 40); do sleep 300 & done; echo all-started; wait";
    let started = start(&server, &id, json!({"command": ["sh", "-c", script]}));
    let pid = started["pid"].as_u64().unwrap();
    let stream = connect(&server, &id, pid);
    let seen = read_until(&stream, "fork");
    let end = until_exited(&stream);
    assert!(!seen.contains("all-started"), "{seen:?}");
    assert_ne!(end["verdict"]["exit_code"], 0, "{end}");
    assert_eq!(end["verdict"]["pids_peak"], 16, "{end}");
    close(&server, &id);
}

fn a_cut_cell_leaves_a_terminal_s_jobs_alone(mode: Mode) {
    let server = Server::start(mode, &["--pool", "0"]);
    let id = create(&server, json!({}));
    // An interactive bash on a terminal has job control: each job is a process group of
    // its own, in the terminal's session.
    let started = start(&server, &id, json!({"command": ["bash", "-i"]}));
    let pid = started["pid"].as_u64().unwrap();
    let stream = connect(&server, &id, pid);
    // `J%sB` with `O`: the line it prints says JOB, its echo does not.
    input(
        &server,
        &id,
        pid,
        "sleep 302 & printf 'J%sB %s %s\\n' O $(cut -d' ' -f5 /proc/$!/stat) $$\n",
    );
    let mut seen = read_until(&stream, "JOB ");
    while !seen[seen.find("JOB ").unwrap()..].contains('\n') {
        seen += &read_until(&stream, "\n");
    }
    let numbers: Vec<u64> = seen[seen.find("JOB ").unwrap() + 4..]
        .lines()
        .next()
        .unwrap()
        .split_whitespace()
        .map(|n| n.parse().unwrap())
        .collect();
    let [group, shell] = numbers[..] else {
        panic!("no job line in {seen:?}")
    };
    assert_ne!(group, shell, "the job has a group of its own");
    // A cell cut at its time limit: the sweep kills what the cell started, not the
    // terminal's job.
    let cut = ask(
        &server,
        json!({"type": "session_exec", "session": id, "code": "while True:\n    pass", "time_limit": "1s"}),
    );
    assert_eq!(cut["verdict"]["status"], "timeout", "{cut}");
    let reply = ask(
        &server,
        json!({"type": "session_exec", "session": id, "command": ["sh", "-c", format!("cat /proc/{group}/cmdline | tr '\\0' ' '")]}),
    );
    assert_eq!(
        reply["stdout"], "sleep 302 ",
        "the job survives the sweep: {reply}"
    );
    close(&server, &id);
}

fn a_flood_nobody_reads_is_bounded(mode: Mode) {
    let server = Server::start(mode, &["--pool", "0"]);
    let id = create(&server, json!({}));
    // 3 MB through the terminal with nobody connected: the backlog keeps the latest
    // MiB, the rest is dropped and counted; the program is not held up.
    let flood = "head -c 3000000 /dev/zero | tr '\\0' x; echo end";
    let started = start(
        &server,
        &id,
        json!({"command": ["sh", "-c", flood], "tag": "flood"}),
    );
    let pid = started["pid"].as_u64().unwrap();
    let ended = || {
        let list = ask(&server, json!({"type": "session_ps", "session": id}));
        list["processes"][0]["running"] == false
    };
    assert!(
        wait_until(Duration::from_secs(60), ended),
        "the flood did not end"
    );
    let list = ask(&server, json!({"type": "session_ps", "session": id}));
    let dropped = list["processes"][0]["backlog_dropped"].as_u64().unwrap();
    assert!(dropped >= 3_000_000 - (1 << 20), "{list}");
    let stream = UnixStream::connect(&server.socket).unwrap();
    let request = json!({"brig": 1, "type": "session_connect", "session": id, "pid": pid});
    send_frame(&stream, request.to_string().as_bytes(), &[]);
    assert_eq!(read_reply(&stream).unwrap()["type"], "process");
    let mut kept = String::new();
    let end = loop {
        let frame = read_reply(&stream).expect("a frame");
        if frame["type"] != "output" {
            break frame;
        }
        kept.push_str(frame["data"].as_str().unwrap_or_default());
    };
    assert!(kept.len() <= 1 << 20, "{} bytes kept", kept.len());
    assert!(
        kept.ends_with("end\r\n"),
        "{:?}",
        &kept[kept.len().saturating_sub(20)..]
    );
    assert_eq!(end["verdict"]["exit_code"], 0, "{end}");
    close(&server, &id);
}

fn bad_terminal_requests_are_one_line_errors(mode: Mode) {
    let server = Server::start(mode, &["--pool", "0"]);
    let id = create(&server, json!({}));
    let exec = |extra: Value| {
        let mut request = json!({"type": "session_exec", "session": id});
        for (key, value) in extra.as_object().unwrap() {
            request[key] = value.clone();
        }
        ask(&server, request)
    };
    assert_bad_input(
        &exec(json!({"pty": {"cols": 0, "rows": 24}})),
        "pty: a terminal of 0 cols",
    );
    assert_bad_input(
        &exec(json!({"pty": {"cols": 80, "rows": 5000}})),
        "from 1 to 1000",
    );
    assert_bad_input(
        &exec(json!({"pty": {"cols": 80, "rows": 24}, "code": "1", "language": "python"})),
        "not a code cell",
    );
    assert_bad_input(
        &exec(json!({"pty": {"cols": 80, "rows": 24}, "command": ["sh"], "stream": true})),
        "drop \"stream\"",
    );
    assert_bad_input(
        &exec(json!({"pty": {"cols": "wide", "rows": 24}})),
        "malformed request",
    );
    let shell = start(&server, &id, json!({"command": ["sleep", "300"]}));
    let pid = shell["pid"].as_u64().unwrap();
    let plain = ask(
        &server,
        json!({"type": "session_exec", "session": id, "command": ["sleep", "300"], "background": true}),
    );
    let plain_pid = plain["pid"].as_u64().unwrap();
    let resize = |pid: u64, cols: u64| {
        ask(
            &server,
            json!({"type": "session_resize", "session": id, "pid": pid, "cols": cols, "rows": 24}),
        )
    };
    assert_bad_input(&resize(plain_pid, 80), "has no terminal");
    assert_bad_input(&resize(999, 80), "no process with pid 999");
    assert_bad_input(&resize(pid, 0), "session_resize: a terminal of 0 cols");
    assert_bad_input(
        &ask(
            &server,
            json!({"type": "session_stdin", "session": id, "pid": pid, "data": "", "close": true}),
        ),
        "Ctrl-D",
    );
    assert_bad_input(
        &ask(
            &server,
            json!({"type": "session_stdin", "session": id, "pid": pid, "data": "x", "base64": "eA=="}),
        ),
        "both \"data\" and \"base64\"",
    );
    // Bytes as base64 reach it; the session still serves, and the process still runs.
    let written = ask(
        &server,
        json!({"type": "session_stdin", "session": id, "pid": pid, "base64": "/wA="}),
    );
    assert_eq!(written["written"], 2, "{written}");
    let listed = ask(&server, json!({"type": "session_ps", "session": id}));
    assert_eq!(listed["processes"].as_array().unwrap().len(), 2, "{listed}");
    close(&server, &id);
}

const PYTHON_CLIENT_SCRIPT: &str = r#"
import json, sys
import brig_client
show = lambda *values: print(json.dumps(values))
sb = brig_client.Sandbox(socket=sys.argv[1])
seen = []
term = sb.pty.create(size=(80, 24), on_data=seen.append, cmd="read line; echo got-$line; stty size; exit 4")
show([p.pid for p in sb.commands.list()] == [term.pid])
# The resize is in force once it returns: the line read after it sees the new size.
term.resize((100, 30))
term.send_input(b"x\n")
result = term.wait()
show(result.exit_code, "got-x" in result.stdout, "30 100" in result.stdout,
     all(isinstance(chunk, bytes) for chunk in seen), b"".join(seen).decode() == result.stdout)
sleeper = sb.pty.create(cmd=["sleep", "300"])
sleeper.send_input("\x03")
show(sleeper.wait().verdict["signal"])
shell = sb.pty.create()
shell.kill()
show(shell.wait().verdict["signal"])
try:
    sb.pty.create(size=(0, 24))
except brig_client.BrigError as error:
    show(error.kind, "from 1 to 1000" in str(error))
sb.close()
"#;

fn python_client_terminals(mode: Mode) {
    let server = Server::start(mode, &["--pool", "0"]);
    assert_output_lines(
        &client_script(mode, "python", PYTHON_CLIENT_SCRIPT, &server),
        &[
            "[true]",
            "[4, true, true, true, true]",
            "[2]",
            "[9]",
            r#"["bad_input", true]"#,
        ],
    );
}

const NODE_CLIENT_SCRIPT: &str = r#"
const brig = require(process.argv[1]);
const socket = process.argv[2];
const show = (...values) => console.log(JSON.stringify(values));
(async () => {
  const sb = await brig.Sandbox.create({ socket });
  let seen = "";
  let ready;
  const readyNow = new Promise((resolve) => { ready = resolve; });
  const onData = (data) => {
    seen += data.toString("utf8");
    if (seen.includes("ready")) ready();
  };
  const term = await sb.pty.create({ cols: 80, rows: 24, onData, cmd: "echo ready; read line; echo got-$line; stty size; exit 4" });
  // Output arrives while it runs.
  await readyNow;
  await term.resize({ cols: 120, rows: 40 });
  await term.sendInput("y\n");
  const result = await term.wait();
  show(result.exitCode, seen.includes("got-y"), seen.includes("40 120"), result.stdout === seen);
  const sleeper = await sb.pty.create({ cmd: ["sleep", "300"] });
  await sleeper.sendInput(Buffer.from([3]));
  show((await sleeper.wait()).verdict.signal);
  const shell = await sb.pty.create();
  await shell.kill();
  show((await shell.wait()).verdict.signal);
  try {
    await sb.pty.create({ cols: 80, rows: 0 });
  } catch (error) {
    show(error.kind, error.message.includes("from 1 to 1000"));
  }
  await sb.close();
})().catch((error) => { console.error(error); process.exit(1); });
"#;

fn node_client_terminals(mode: Mode) {
    if !require_program("node", "apt install nodejs") {
        return;
    }
    let server = Server::start(mode, &["--pool", "0"]);
    assert_output_lines(
        &client_script(mode, "node", NODE_CLIENT_SCRIPT, &server),
        &["[4,true,true,true]", "[2]", "[9]", r#"["bad_input",true]"#],
    );
}

fn the_command_line_attaches_a_terminal(mode: Mode) {
    let server = Server::start(mode, &["--pool", "0"]);
    // The session is the CLI's user's (rootless: not the test's).
    let created = run(mode, &["session", "create", "--server", server.socket()]);
    let id = assert_success(&created).trim().to_string();
    // Without a terminal of its own, `brig session pty` types its standard input into
    // the jail's shell (80 × 24) and exits as the shell did.
    let typed = TempFile::new(
        "pty-input",
        "echo \"hi-$((6*7))\"; tty; stty size; exit 3\n",
    );
    let mut command = command(
        mode,
        &[
            "session",
            "pty",
            "--server",
            server.socket(),
            "--session",
            &id,
        ],
    );
    command.stdin(std::fs::File::open(typed.path()).unwrap());
    let output = output_of(command);
    let seen = stdout(&output);
    assert_eq!(output.status.code(), Some(3), "{}", describe(&output));
    for expected in ["hi-42", "/dev/pts/0", "24 80"] {
        assert!(seen.contains(expected), "{expected:?} not in {seen:?}");
    }
    // A program of its own, tagged; then listed as ended.
    let output = session_cli(
        mode,
        &server,
        &id,
        &["pty", "--tag", "t", "--", "sh", "-c", "exit 5"],
    );
    assert_eq!(output.status.code(), Some(5), "{}", describe(&output));
    let listed = assert_success(&session_cli(mode, &server, &id, &["ps"]));
    assert!(
        listed
            .lines()
            .any(|line| line.contains("exited 5") && line.contains(" t ")),
        "{listed}"
    );
    assert_success(&session_cli(mode, &server, &id, &["close"]));
}
