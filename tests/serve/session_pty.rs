//! Programs on a terminal in a session (`session_exec` with `pty`), for real, as root and
//! rootless: the terminal is the jail's own (/dev/pts/N of the jail's devpts), input
//! echoes and runs commands, the window follows `session_resize` (SIGWINCH), Ctrl-C
//! interrupts the foreground job, exit ends it with a verdict; the attacks (TIOCSTI,
//! TIOCLINUX, the host's terminals, the master) fail with exact errors; it ends with its
//! session; another uid cannot reach it; bad requests are one-line errors. `brig session
//! pty` on a real pseudo-terminal (Python's `pty.fork()`): keystrokes and Ctrl-C reach the
//! jail's program, SIGWINCH resizes the inner terminal, `stty -g` is the same after as
//! before, also when the session is closed under it or a signal ends the command.

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

/// A session made by `brig session create` as `mode`'s user; its id.
fn cli_session(mode: Mode, server: &Server) -> String {
    let created = run(mode, &["session", "create", "--server", server.socket()]);
    assert_success(&created).trim().to_string()
}

/// `brig session ps`: whether a line has every one of `words`.
fn listed_with(mode: Mode, server: &Server, id: &str, words: &[&str]) -> bool {
    let listed = assert_success(&session_cli(mode, server, id, &["ps"]));
    listed
        .lines()
        .any(|line| words.iter().all(|word| line.contains(word)))
}

fn the_command_line_attaches_a_terminal(mode: Mode) {
    let server = Server::start(mode, &["--pool", "0"]);
    // The session is the CLI's user's (rootless: not the test's).
    let id = cli_session(mode, &server);
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
    assert!(listed_with(mode, &server, &id, &["exited 5", " t "]));
    assert_success(&session_cli(mode, &server, &id, &["close"]));
}

both_modes!(
    the_command_line_on_a_real_terminal,
    the_command_line_restores_its_terminal_when_cut_short,
);

/// Runs a command on a fresh pseudo-terminal (Python's `pty.fork()`, the terminal's
/// size set first) and plays a script on it: `expect` (read until the text shows, after
/// what the last `expect` matched; 30 s a step, so a hang fails instead of blocking),
/// `type` (written as keystrokes), `resize` (the terminal's new rows and columns, as a
/// terminal emulator sets them: the kernel sends SIGWINCH to its foreground group),
/// `run` (a command run beside it, to completion), `signal` (a signal's number, sent to
/// the command the wrapping shell runs), `settings` (the terminal's `stty -g`
/// now, as another opener of it sees them). Then reads to the end; prints
/// `{"status": ..., "output": ..., "settings": [...]}`.
const TERMINAL_DRIVER: &str = r#"
import fcntl, json, os, pty, select, struct, subprocess, sys, termios, time
spec = json.loads(sys.argv[1])
def window(fd, rows, cols):
    fcntl.ioctl(fd, termios.TIOCSWINSZ, struct.pack("HHHH", rows, cols, 0, 0))
pid, master = pty.fork()
if pid == 0:
    window(0, *spec["size"])
    os.execvp(spec["argv"][0], spec["argv"])
seen, matched, settings = b"", 0, []
def read(deadline):
    global seen
    ready, _, _ = select.select([master], [], [], max(0, deadline - time.monotonic()))
    if not ready:
        return False
    try:
        data = os.read(master, 65536)
    except OSError:  # EIO: every holder of the terminal's other end closed it
        data = b""
    seen += data
    return bool(data)
for step in spec["steps"]:
    if "expect" in step:
        wanted, deadline = step["expect"].encode(), time.monotonic() + 30
        while seen.find(wanted, matched) < 0:
            if not read(deadline):
                sys.exit("no %r in %r" % (wanted, seen))
        matched = seen.find(wanted, matched) + len(wanted)
    elif "type" in step:
        os.write(master, step["type"].encode())
    elif "resize" in step:
        window(master, *step["resize"])
    elif "run" in step:
        subprocess.run(step["run"], check=True, stdout=subprocess.DEVNULL)
    elif "signal" in step:  # to the command the wrapping shell runs
        with open("/proc/%d/task/%d/children" % (pid, pid)) as children:
            os.kill(int(children.read().split()[0]), step["signal"])
    elif "settings" in step:
        with open(os.readlink("/proc/%d/fd/0" % pid), "rb", buffering=0) as terminal:
            stty = subprocess.run(["stty", "-g"], stdin=terminal, check=True, capture_output=True)
        settings.append(stty.stdout.decode().strip())
deadline = time.monotonic() + 30
while read(deadline):
    pass
_, status = os.waitpid(pid, 0)
print(json.dumps({"status": os.waitstatus_to_exitcode(status), "output": seen.decode(errors="replace"), "settings": settings}))
"#;

/// `brig session pty` (as `mode`'s user) on a real terminal of `rows` × `cols`, wrapped
/// in a shell that prints the terminal's settings (`stty -g`) before and after it and
/// its exit status, with `steps` played on it (see TERMINAL_DRIVER). What the terminal
/// showed, (before, after, status), and what the `settings` steps saw.
fn pty_cli_on_a_terminal(
    mode: Mode,
    server: &Server,
    id: &str,
    program: &[&str],
    steps: Value,
) -> (String, (String, String, String), Vec<String>) {
    let mut args = vec![
        "session",
        "pty",
        "--server",
        server.socket(),
        "--session",
        id,
    ];
    if !program.is_empty() {
        args.push("--");
        args.extend_from_slice(program);
    }
    let mut wrapped: Vec<String> = [
        "sh",
        "-c",
        "echo \"before=$(stty -g)\"; \"$@\"; status=$?; echo \"after=$(stty -g)\"; echo \"status=$status\"",
        "sh",
    ]
    .map(String::from)
    .to_vec();
    wrapped.extend(
        argv(mode, &args)
            .into_iter()
            .map(|arg| arg.into_string().unwrap()),
    );
    let spec = json!({"argv": wrapped, "size": [30, 100], "steps": steps});
    let output = output_of(command_from(&[
        interpreter("python3").into(),
        "-c".into(),
        TERMINAL_DRIVER.into(),
        spec.to_string().into(),
    ]));
    let report: Value = serde_json::from_str(assert_success(&output).trim())
        .unwrap_or_else(|_| panic!("{}", describe(&output)));
    assert_eq!(report["status"], 0, "the wrapping shell: {report}");
    let shown = report["output"].as_str().unwrap().to_string();
    let line = |key: &str| {
        let start = shown
            .rfind(&format!("{key}="))
            .unwrap_or_else(|| panic!("no {key}= in {shown:?}"))
            + key.len()
            + 1;
        let rest = &shown[start..];
        rest[..rest.find(['\r', '\n']).unwrap_or(rest.len())].to_string()
    };
    let wrapper = (line("before"), line("after"), line("status"));
    let settings = (report["settings"].as_array().unwrap().iter())
        .map(|each| each.as_str().unwrap().to_string())
        .collect();
    (shown, wrapper, settings)
}

/// On a real terminal, `brig session pty` puts it in raw mode: what is typed reaches the
/// jail's terminal as it is (Ctrl-C included: it interrupts the jail's program, not the
/// command), the window's size follows the outer terminal's (at the start and at each
/// SIGWINCH), and the command exits as the program did with the terminal as it was.
fn the_command_line_on_a_real_terminal(mode: Mode) {
    let server = Server::start(mode, &["--pool", "0"]);
    let id = cli_session(mode, &server);
    // The jail's python3 sleeps; "ar" "med" is printed only once its SIGINT handler is
    // in place (the echo of the typed line does not contain it).
    let sleeper = "python3 -c \"import time; print('ar' + 'med', flush=True); time.sleep(300)\"\r";
    let (shown, (before, after, status), raw) = pty_cli_on_a_terminal(
        mode,
        &server,
        &id,
        &[],
        json!([
            // The shell's prompt: attached, in raw mode.
            {"expect": "$ "},
            {"type": "tty; stty size\r"},
            {"expect": "/dev/pts/0"},
            {"expect": "30 100"},
            {"type": sleeper},
            {"expect": "armed"},
            {"settings": true},
            {"type": "\u{3}"},
            {"expect": "KeyboardInterrupt"},
            {"type": "echo \"status-$?\"\r"},
            {"expect": "status-130"},
            {"resize": [40, 120]},
            {"type": "stty size\r"},
            {"expect": "40 120"},
            {"type": "exit 7\r"},
        ]),
    );
    assert_eq!(status, "7", "{shown:?}");
    assert!(before.contains(':'), "not `stty -g`'s form: {before:?}");
    assert_eq!(after, before, "{shown:?}");
    // The control: meanwhile (raw mode) they differed, so the comparison tells.
    assert_eq!(raw.len(), 1);
    assert_ne!(raw[0], before, "not in raw mode while attached");
    assert_success(&session_cli(mode, &server, &id, &["close"]));
}

/// `brig session pty` cut short, by the session's close under it or by a signal that
/// ends it, leaves the terminal as it was.
fn the_command_line_restores_its_terminal_when_cut_short(mode: Mode) {
    let server = Server::start(mode, &["--pool", "0"]);
    let id = cli_session(mode, &server);
    let armed = ["sh", "-c", "echo ar''med; sleep 300"];
    // SIGTERM (as `kill` sends it): its default status, and the program goes on.
    let (shown, (before, after, status), _) = pty_cli_on_a_terminal(
        mode,
        &server,
        &id,
        &armed,
        json!([{"expect": "armed"}, {"signal": libc::SIGTERM}]),
    );
    assert_eq!(after, before, "{shown:?}");
    assert_eq!(status, "143", "{shown:?}");
    assert!(listed_with(mode, &server, &id, &["sleep 300", "running"]));
    // The session closed under it: one line that says so, written once the terminal is
    // back in its mode (its newline made "\r\n"), and brig's own status for a program
    // it could not see to its end.
    let close: Vec<String> = argv(
        mode,
        &[
            "session",
            "close",
            "--server",
            server.socket(),
            "--session",
            &id,
        ],
    )
    .into_iter()
    .map(|arg| arg.into_string().unwrap())
    .collect();
    let (shown, (before, after, status), _) = pty_cli_on_a_terminal(
        mode,
        &server,
        &id,
        &armed,
        json!([{"expect": "armed"}, {"run": close}]),
    );
    assert_eq!(after, before, "{shown:?}");
    assert_eq!(status, "125", "{shown:?}");
    assert!(
        shown.contains(&format!(
            "brig: brig serve: session {id} ended: it was closed\r\n"
        )),
        "{shown:?}"
    );
    assert!(
        wait_until(Duration::from_secs(10), || runners(&server).is_empty()),
        "the session's runner is left"
    );
}
