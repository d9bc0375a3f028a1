//! A session's streamed execs and background processes, for real, as root and rootless:
//! output arrives while the program runs, in the order it was produced; a background
//! process lives on between requests, is listed, connected to (what it wrote before,
//! then live, then its verdict), fed stdin, signaled and killed; a flood nobody reads and
//! a client that never reads are bounded and do not stop the session; everything of a
//! session's processes goes with it; another uid cannot reach them; bad requests are
//! one-line errors. The CLI drives the same (the clients: tests/serve/clients.rs).

use crate::common;

use common::limits::jail_cgroups_of;
use common::serve::{
    Server, ask, close_session as close, create_session as create, exchange_as_nobody, read_reply,
    runners, send_frame,
};
use common::*;
use serde_json::{Value, json};
use std::os::unix::net::UnixStream;
use std::time::Duration;

both_modes!(
    streamed_output_arrives_in_order_while_the_command_runs,
    a_streamed_cell_arrives_before_it_ends,
    a_streamed_exec_is_held_to_its_output_limit,
    a_background_process_lives_on_and_is_driven_by_requests,
    signal_and_kill_give_signaled_verdicts,
    a_flood_nobody_reads_is_bounded_and_the_session_answers,
    background_processes_end_with_their_session,
    bad_process_requests_are_one_line_errors,
    the_command_line_streams_and_drives_processes,
    background_processes_go_on_while_a_cell_runs,
    a_process_is_listed_with_its_env_and_cwd_and_a_full_stdin_is_busy,
    a_closed_or_ended_session_is_gone_at_once_as_not_found,
);

#[test]
fn another_uid_cannot_reach_a_session_s_processes() {
    if !require_root() {
        return;
    }
    let server = Server::start(Mode::Root, &["--pool", "0", "--socket-group", "65534"]);
    let id = create(&server, json!({}));
    let started = background(&server, &id, &["sleep", "300"], "victim");
    let pid = started["pid"].as_u64().unwrap();
    for request in [
        json!({"type": "session_connect", "session": id, "pid": pid}),
        json!({"type": "session_kill", "session": id, "pid": pid}),
        json!({"type": "session_signal", "session": id, "tag": "victim", "signal": "TERM"}),
        json!({"type": "session_stdin", "session": id, "pid": pid, "data": "x"}),
        json!({"type": "session_ps", "session": id}),
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
    // Untouched: it still runs.
    assert_eq!(process_of(&server, &id, pid)["running"], true);
    close(&server, &id);
}

/// Sends a request on a connection of its own, left open for its frames.
fn open(server: &Server, mut message: Value) -> UnixStream {
    message["brig"] = json!(1);
    let stream = UnixStream::connect(&server.socket).unwrap();
    send_frame(&stream, message.to_string().as_bytes(), &[]);
    stream
}

/// The next frame on `stream` (None when it closed). Waiting is bounded (30 s) only to
/// keep a broken server from hanging the test.
fn frame(stream: &UnixStream) -> Option<Value> {
    read_reply(stream)
}

/// Frames until one that is not `output`: the outputs (stream, bytes), and that one.
fn until_end(stream: &UnixStream) -> (Vec<(String, Vec<u8>)>, Value) {
    let mut outputs = Vec::new();
    loop {
        let next = frame(stream).expect("a frame");
        if next["type"] != "output" {
            return (outputs, next);
        }
        outputs.push(output_of_frame(&next));
    }
}

/// An `output` frame's stream and bytes (`data` text, or `base64`).
fn output_of_frame(frame: &Value) -> (String, Vec<u8>) {
    use base64::Engine;
    assert_eq!(frame["type"], "output", "{frame}");
    assert!(frame["t_ms"].is_u64(), "{frame}");
    let bytes = match (&frame["data"], &frame["base64"]) {
        (Value::String(text), Value::Null) => text.as_bytes().to_vec(),
        (Value::Null, Value::String(encoded)) => base64::engine::general_purpose::STANDARD
            .decode(encoded)
            .unwrap(),
        _ => panic!("neither data nor base64: {frame}"),
    };
    (frame["stream"].as_str().unwrap().to_string(), bytes)
}

/// Output frames until the bytes of `stream` read so far end with `wanted`.
fn read_until(connection: &UnixStream, stream: &str, wanted: &[u8]) -> Vec<u8> {
    let mut got = Vec::new();
    while !got.ends_with(wanted) {
        let next = frame(connection).unwrap_or_else(|| panic!("closed before {wanted:?}: {got:?}"));
        let (which, bytes) = output_of_frame(&next);
        if which == stream {
            got.extend(bytes);
        }
    }
    got
}

fn background(server: &Server, id: &str, argv: &[&str], tag: &str) -> Value {
    let reply = ask(
        server,
        json!({"type": "session_exec", "session": id, "command": argv, "background": true, "tag": tag}),
    );
    assert_eq!(reply["type"], "process", "{reply}");
    assert_eq!(reply["running"], true, "{reply}");
    assert_eq!(reply["tag"], tag, "{reply}");
    reply
}

fn put(server: &Server, id: &str, path: &str) {
    let reply = ask(
        server,
        json!({"type": "session_put", "session": id, "path": path, "data": ""}),
    );
    assert_eq!(reply["type"], "put", "{reply}");
}

fn process_of(server: &Server, id: &str, pid: u64) -> Value {
    let list = ask(server, json!({"type": "session_ps", "session": id}));
    assert_eq!(list["type"], "processes", "{list}");
    list["processes"]
        .as_array()
        .unwrap()
        .iter()
        .find(|process| process["pid"] == pid)
        .unwrap_or_else(|| panic!("no process {pid} in {list}"))
        .clone()
}

fn assert_error(reply: &Value, needle: &str) {
    assert_eq!(reply["type"], "error", "{reply}");
    let message = reply["message"].as_str().unwrap();
    assert!(message.contains(needle), "{needle:?} not in {message:?}");
    assert!(!message.contains('\n'), "{message:?}");
    assert_eq!(reply["exit_code"], 125, "{reply}");
    assert_eq!(reply["kind"], "bad_input", "{reply}");
}

/// A shell loop that waits for a file of the workspace (made by the test, by session_put).
fn wait_for(file: &str) -> String {
    format!("while [ ! -e {file} ]; do sleep 0.01; done")
}

fn streamed_output_arrives_in_order_while_the_command_runs(mode: Mode) {
    let server = Server::start(mode, &["--pool", "0"]);
    let id = create(&server, json!({}));
    // Each line waits for the test to have seen the one before: what arrives, arrives
    // while the command runs, and in the order written, across stdout and stderr.
    let script = format!(
        "echo one; {}; echo two >&2; {}; printf 'caf\\303'; printf '\\251 \\377\\n'",
        wait_for("go1"),
        wait_for("go2")
    );
    let stream = open(
        &server,
        json!({"type": "session_exec", "session": id, "command": ["sh", "-c", script], "stream": true}),
    );
    assert_eq!(read_until(&stream, "stdout", b"one\n"), b"one\n");
    // The session serves other requests meanwhile (this one lets the command go on).
    put(&server, &id, "go1");
    assert_eq!(read_until(&stream, "stderr", b"two\n"), b"two\n");
    put(&server, &id, "go2");
    let (outputs, end) = until_end(&stream);
    let stdout: Vec<u8> = outputs
        .iter()
        .filter(|(which, _)| which == "stdout")
        .flat_map(|(_, bytes)| bytes.clone())
        .collect();
    // A character split between writes arrives whole; bytes that are not UTF-8 arrive
    // as they are (base64).
    let expected = b"caf\xc3\xa9 \xff\n";
    assert_eq!(stdout, expected);
    assert_eq!(end["type"], "exec", "{end}");
    assert_eq!(end["verdict"]["status"], "ok", "{end}");
    assert_eq!(end["verdict"]["stdout_bytes"], 4 + expected.len(), "{end}");
    assert_eq!(end["dropped"], 0, "{end}");
    assert!(
        end.get("stdout").is_none(),
        "streamed output is not repeated: {end}"
    );
    close(&server, &id);
}

fn a_streamed_cell_arrives_before_it_ends(mode: Mode) {
    let server = Server::start(mode, &["--pool", "0"]);
    let marker = format!("BRIG_TEST_MARKER={}", unique("streamed-cell"));
    let id = create(&server, json!({"options": {"env": [marker]}}));
    // The cell prints, then waits for SIGUSR1, which the test sends once it has the
    // first line.
    let code = "import signal, sys\nsignal.pthread_sigmask(signal.SIG_BLOCK, [signal.SIGUSR1])\nprint('one', flush=True)\nprint('err', file=sys.stderr, flush=True)\nsignal.sigwait([signal.SIGUSR1])\nprint('two')\n40 + 2";
    let stream = open(
        &server,
        json!({"type": "session_exec", "session": id, "code": code, "stream": true}),
    );
    assert_eq!(read_until(&stream, "stdout", b"one\n"), b"one\n");
    let interpreters: Vec<u32> = processes_with_environ(&marker)
        .into_iter()
        .filter(|pid| {
            std::fs::read(format!("/proc/{pid}/cmdline"))
                .is_ok_and(|cmdline| String::from_utf8_lossy(&cmdline).contains("python3"))
        })
        .collect();
    assert_eq!(interpreters.len(), 1, "{interpreters:?}");
    kill(interpreters[0], libc::SIGUSR1);
    let (outputs, end) = until_end(&stream);
    assert!(
        outputs.contains(&("stdout".into(), b"two\n".to_vec())),
        "{outputs:?}"
    );
    assert_eq!(end["type"], "exec", "{end}");
    assert_eq!(end["verdict"]["status"], "ok", "{end}");
    assert_eq!(end["result"], "42", "{end}");
    assert_eq!(end["verdict"]["stderr_bytes"], 4, "{end}");
    close(&server, &id);
}

fn a_streamed_exec_is_held_to_its_output_limit(mode: Mode) {
    let server = Server::start(mode, &["--pool", "0"]);
    let id = create(&server, json!({}));
    let stream = open(
        &server,
        json!({"type": "session_exec", "session": id, "stream": true, "output_limit": "100K",
               "command": ["sh", "-c", "yes"]}),
    );
    let (outputs, end) = until_end(&stream);
    let streamed: usize = outputs.iter().map(|(_, bytes)| bytes.len()).sum();
    assert_eq!(streamed, 100 << 10, "what is streamed stops at the limit");
    assert_eq!(end["verdict"]["status"], "output_limit", "{end}");
    assert_eq!(end["verdict"]["output_truncated"], true, "{end}");
    close(&server, &id);
}

fn a_background_process_lives_on_and_is_driven_by_requests(mode: Mode) {
    let server = Server::start(mode, &["--pool", "0"]);
    let id = create(&server, json!({}));
    // `$$`: the pid is the process's own in the jail.
    let started = background(
        &server,
        &id,
        &["sh", "-c", "echo ready $$; exec cat"],
        "echo",
    );
    let pid = started["pid"].as_u64().unwrap();
    assert_eq!(
        started["command"],
        json!(["sh", "-c", "echo ready $$; exec cat"])
    );
    // Other requests, while it runs.
    let other = ask(
        &server,
        json!({"type": "session_exec", "session": id, "command": ["echo", "meanwhile"]}),
    );
    assert_eq!(other["stdout"], "meanwhile\n", "{other}");
    let listed = process_of(&server, &id, pid);
    assert_eq!(listed["running"], true, "{listed}");
    assert_eq!(listed["tag"], "echo", "{listed}");
    assert!(listed["started_unix_ms"].as_u64().unwrap() > 0, "{listed}");
    let fed = ask(
        &server,
        json!({"type": "session_stdin", "session": id, "tag": "echo", "data": "missed\n"}),
    );
    assert_eq!(fed["written"], 7, "{fed}");
    // Connected: what it wrote before (kept for whoever connects), then live output.
    let connection = open(
        &server,
        json!({"type": "session_connect", "session": id, "pid": pid}),
    );
    let first = frame(&connection).unwrap();
    assert_eq!(first["type"], "process", "{first}");
    assert_eq!(first["backlog_dropped"], 0, "{first}");
    let ready = format!("ready {pid}\nmissed\n");
    read_until(&connection, "stdout", ready.as_bytes());
    let fed = ask(
        &server,
        json!({"type": "session_stdin", "session": id, "pid": pid, "data": "live\n", "close": true}),
    );
    assert_eq!(fed["closed"], true, "{fed}");
    assert_eq!(read_until(&connection, "stdout", b"live\n"), b"live\n");
    // Its stdin closed, cat ends: the verdict comes last.
    let (_, end) = until_end(&connection);
    assert_eq!(end["type"], "exited", "{end}");
    assert_eq!(end["verdict"]["status"], "ok", "{end}");
    assert_eq!(end["verdict"]["exit_code"], 0, "{end}");
    assert_eq!(end["dropped"], 0, "{end}");
    let listed = process_of(&server, &id, pid);
    assert_eq!(listed["running"], false, "{listed}");
    assert_eq!(listed["status"]["exit_code"], 0, "{listed}");
    // Connecting after its end: its output and its verdict.
    let again = open(
        &server,
        json!({"type": "session_connect", "session": id, "tag": "echo"}),
    );
    assert_eq!(frame(&again).unwrap()["running"], false);
    let (outputs, end) = until_end(&again);
    let all: Vec<u8> = outputs.into_iter().flat_map(|(_, bytes)| bytes).collect();
    assert_eq!(all, format!("ready {pid}\nmissed\nlive\n").as_bytes());
    assert_eq!(end["verdict"]["exit_code"], 0, "{end}");
    close(&server, &id);
}

fn signal_and_kill_give_signaled_verdicts(mode: Mode) {
    let server = Server::start(mode, &["--pool", "0"]);
    let id = create(&server, json!({}));
    for (tag, request) in [
        (
            "termed",
            json!({"type": "session_signal", "signal": "TERM"}),
        ),
        ("numbered", json!({"type": "session_signal", "signal": 2})),
        ("killed", json!({"type": "session_kill"})),
    ] {
        let pid = background(&server, &id, &["sleep", "300"], tag)["pid"].clone();
        let connection = open(
            &server,
            json!({"type": "session_connect", "session": id, "pid": pid}),
        );
        assert_eq!(frame(&connection).unwrap()["running"], true);
        let mut request = request;
        request["session"] = json!(id);
        request["tag"] = json!(tag);
        let reply = ask(&server, request);
        assert_eq!(reply["type"], "signaled", "{reply}");
        let (_, end) = until_end(&connection);
        let signal = match tag {
            "termed" => 15,
            "numbered" => 2,
            _ => 9,
        };
        assert_eq!(end["verdict"]["status"], "signaled", "{tag}: {end}");
        assert_eq!(end["verdict"]["signal"], signal, "{tag}: {end}");
        // Ended: it cannot be signaled again.
        let again = ask(
            &server,
            json!({"type": "session_kill", "session": id, "pid": pid}),
        );
        assert_error(&again, "has ended");
    }
    close(&server, &id);
}

/// The runner's peak resident memory, in KiB.
fn peak_rss_kib(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let line = status
        .lines()
        .find(|line| line.starts_with("VmHWM:"))
        .unwrap_or_else(|| panic!("no VmHWM in {status}"));
    line.split_whitespace().nth(1).unwrap().parse().unwrap()
}

fn a_flood_nobody_reads_is_bounded_and_the_session_answers(mode: Mode) {
    let server = Server::start(mode, &["--pool", "0"]);
    let id = create(&server, json!({}));
    let runner = runners(&server)[0];
    const FLOOD: u64 = 50_000_000;
    let script = format!("{}; yes | head -c {FLOOD}; echo; echo done", wait_for("go"));
    let pid = background(&server, &id, &["sh", "-c", &script], "flood")["pid"].clone();
    // A client that connects and never reads.
    let _stuck = open(
        &server,
        json!({"type": "session_connect", "session": id, "pid": pid}),
    );
    let before = peak_rss_kib(runner);
    put(&server, &id, "go");
    // The session answers while the flood goes on, until it has ended (and all it
    // wrote has been read).
    let all_read = wait_until(Duration::from_secs(300), || {
        process_of(&server, &id, pid.as_u64().unwrap())["running"] == false
    });
    assert!(
        all_read,
        "{}",
        process_of(&server, &id, pid.as_u64().unwrap())
    );
    let grown = peak_rss_kib(runner).saturating_sub(before);
    eprintln!("the runner's peak RSS grew by {grown} KiB for a {FLOOD}-byte flood");
    assert!(
        grown < 32 << 10,
        "the runner grew by {grown} KiB for a {FLOOD}-byte flood nobody read"
    );
    // What a client connecting now gets: the latest MiB, and how much came before it.
    let late = open(
        &server,
        json!({"type": "session_connect", "session": id, "tag": "flood"}),
    );
    let head = frame(&late).unwrap();
    let dropped = head["backlog_dropped"].as_u64().unwrap();
    let (outputs, end) = until_end(&late);
    let tail: Vec<u8> = outputs.into_iter().flat_map(|(_, bytes)| bytes).collect();
    assert!(
        tail.ends_with(b"y\n\ndone\n"),
        "{:?}",
        &tail[tail.len() - 10..]
    );
    assert_eq!(dropped + tail.len() as u64, FLOOD + 6, "{head}");
    assert!(tail.len() <= 1 << 20);
    assert_eq!(end["verdict"]["stdout_bytes"], FLOOD + 6, "{end}");
    let other = ask(
        &server,
        json!({"type": "session_exec", "session": id, "command": ["echo", "answered"]}),
    );
    assert_eq!(other["stdout"], "answered\n", "{other}");
    close(&server, &id);
}

fn background_processes_end_with_their_session(mode: Mode) {
    let mut server = Server::start(mode, &["--pool", "0"]);
    let cases = ["close", "idle", "session_timeout", "sigkill"];
    for case in cases {
        let marker = format!("BRIG_TEST_MARKER={}", unique(case));
        let timeouts = match case {
            "idle" => json!({"idle_timeout": "5s"}),
            "session_timeout" => json!({"session_timeout": "8s"}),
            _ => json!({}),
        };
        let mut extra = json!({"options": {"env": [marker]}});
        for (key, value) in timeouts.as_object().unwrap() {
            extra[key] = value.clone();
        }
        let id = create(&server, extra);
        let runner = *runners(&server).last().unwrap();
        background(&server, &id, &["sleep", "300"], "sleeper");
        // Connected to it: a client listening does not keep the session past its
        // session_timeout.
        let connection = (case == "session_timeout").then(|| {
            open(
                &server,
                json!({"type": "session_connect", "session": id, "tag": "sleeper"}),
            )
        });
        // Started by the jail's init, which the reply does not wait for.
        assert!(
            wait_until(Duration::from_secs(30), || processes_with_environ(&marker)
                .len()
                == 1),
            "{case}: the background process does not run"
        );
        let cgroups = jail_cgroups_of(runner);
        assert!(mode == Mode::Rootless || !cgroups.is_empty(), "{case}");
        match case {
            "close" => close(&server, &id),
            "sigkill" => {
                let mut process = server.running.take().expect("running");
                kill(process.pid(), libc::SIGKILL);
                let _ = process.child.wait();
            }
            // A running background process does not keep an idle session alive.
            _ => {}
        }
        assert!(
            wait_until(Duration::from_secs(60), || processes_with_environ(&marker)
                .is_empty()),
            "{case}: the background process outlived its session"
        );
        if let Some(connection) = connection {
            assert_eq!(frame(&connection).unwrap()["type"], "process");
            // Told why, then let go.
            let (_, end) = until_end(&connection);
            assert_eq!(end["type"], "error", "{end}");
            assert!(
                end["message"].as_str().unwrap().contains("session_timeout"),
                "{end}"
            );
        }
        assert!(
            wait_until(Duration::from_secs(10), || cgroups
                .iter()
                .all(|dir| !dir.exists())),
            "{case}: cgroups left: {cgroups:?}"
        );
    }
}

fn bad_process_requests_are_one_line_errors(mode: Mode) {
    let server = Server::start(mode, &["--pool", "0"]);
    let id = create(&server, json!({}));
    let ended = background(&server, &id, &["true"], "short")["pid"].clone();
    let sleeper = background(&server, &id, &["sleep", "300"], "sleeper")["pid"].clone();
    assert!(wait_until(Duration::from_secs(30), || {
        process_of(&server, &id, ended.as_u64().unwrap())["running"] == false
    }));
    for (request, needle) in [
        (
            json!({"type": "session_connect", "pid": 999_999}),
            "no process with pid 999999",
        ),
        (
            json!({"type": "session_kill", "tag": "nobody"}),
            "no process with tag \"nobody\"",
        ),
        (
            json!({"type": "session_kill"}),
            "give either \"pid\" or \"tag\"",
        ),
        (
            json!({"type": "session_kill", "pid": sleeper, "tag": "sleeper"}),
            "give either",
        ),
        (
            json!({"type": "session_signal", "pid": sleeper, "signal": "NOPE"}),
            "signal: \"NOPE\" is not a signal",
        ),
        (
            json!({"type": "session_signal", "pid": sleeper, "signal": 99}),
            "signal: 99",
        ),
        (
            json!({"type": "session_stdin", "pid": ended, "data": "x"}),
            "has ended",
        ),
        (
            json!({"type": "session_exec", "command": ["true"], "background": true, "stream": true}),
            "\"background\" and \"stream\" together",
        ),
        (
            json!({"type": "session_exec", "code": "1", "background": true}),
            "\"background\" is for commands",
        ),
        (
            json!({"type": "session_exec", "command": ["true"], "tag": "x"}),
            "\"tag\" names a background process",
        ),
        (
            json!({"type": "session_exec", "command": ["true"], "background": true, "tag": ""}),
            "tag: 1 to 128 characters",
        ),
        (
            json!({"type": "session_exec", "command": ["true"], "background": true, "tag": "sleeper"}),
            "has the tag \"sleeper\" already",
        ),
        (
            json!({"type": "session_connect", "pid": "one"}),
            "malformed request",
        ),
    ] {
        let mut request = request;
        request["session"] = json!(id);
        assert_error(&ask(&server, request.clone()), needle);
    }
    // The session and its process are still there.
    assert_eq!(
        process_of(&server, &id, sleeper.as_u64().unwrap())["running"],
        true
    );
    close(&server, &id);
}

fn the_command_line_streams_and_drives_processes(mode: Mode) {
    use std::io::BufRead;
    let server = Server::start(mode, &["--pool", "0"]);
    let at = |args: &[&str], id: &str| {
        let mut all = vec!["session"];
        all.extend_from_slice(&args[..1]);
        all.extend_from_slice(&["--server", server.socket(), "--session", id]);
        all.extend_from_slice(&args[1..]);
        all.iter()
            .map(|arg| arg.to_string())
            .collect::<Vec<String>>()
    };
    let created = run(mode, &["session", "create", "--server", server.socket()]);
    let id = assert_success(&created).trim().to_string();
    // --stream prints as produced: the first line is there while the command waits.
    let script = format!("echo one; {}; echo two", wait_for("go"));
    let args = at(&["exec", "--stream", "--", "sh", "-c", &script], &id);
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let mut streaming = command(mode, &args);
    streaming.stdout(std::process::Stdio::piped());
    let mut child = streaming.spawn().unwrap();
    let mut lines = std::io::BufReader::new(child.stdout.take().unwrap()).lines();
    assert_eq!(lines.next().unwrap().unwrap(), "one");
    put(&server, &id, "go");
    assert_eq!(lines.next().unwrap().unwrap(), "two");
    assert!(lines.next().is_none());
    assert!(child.wait().unwrap().success());
    // A streamed cell: its output, then its result.
    let dir = TempDir::new("session-cli-stream").writable_by_all();
    let cell = dir.file("cell.py", "print('a')\n40 + 2");
    let args = at(&["exec", "--stream", "--code", cell.to_str().unwrap()], &id);
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    assert_eq!(assert_success(&run(mode, &args)), "a\n42\n");
    let cli = |args: &[&str]| {
        let args = at(args, &id);
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        run(mode, &args)
    };
    let started = cli(&[
        "exec",
        "--background",
        "--tag",
        "srv",
        "--",
        "sh",
        "-c",
        "echo ready; exec cat",
    ]);
    let pid = assert_success(&started).trim().to_string();
    assert!(pid.parse::<u32>().is_ok(), "{}", describe(&started));
    let listed = assert_success(&cli(&["ps"]));
    assert!(
        listed.lines().any(|line| line.contains("running")
            && line.contains("srv")
            && line.split_whitespace().next() == Some(pid.as_str())),
        "{listed}"
    );
    assert_success(&cli(&[
        "stdin", "--tag", "srv", "--data", "hi\n", "--close",
    ]));
    let connected = cli(&["connect", "--pid", &pid]);
    assert_eq!(assert_success(&connected), "ready\nhi\n");
    let sleeper = cli(&["exec", "--background", "--", "sleep", "300"]);
    let sleeper = assert_success(&sleeper).trim().to_string();
    assert_success(&cli(&["signal", "--pid", &sleeper, "--signal", "TERM"]));
    let ended = cli(&["connect", "--pid", &sleeper]);
    assert_code(&ended, 128 + 15);
    let refused = cli(&["kill", "--pid", "99999"]);
    assert_one_line_error(&refused, &["session_kill", "no process with pid 99999"]);
    let both = cli(&["kill", "--pid", "1", "--tag", "srv"]);
    assert_one_line_error(&both, &["'--pid <PID>' cannot be used with '--tag <TAG>'"]);
    close(&server, &id);
}

/// Host pids of the session's processes (by its marker) whose command line starts with
/// `name`.
fn jailed(marker: &str, name: &str) -> Vec<u32> {
    processes_with_environ(marker)
        .into_iter()
        .filter(|pid| {
            std::fs::read(format!("/proc/{pid}/cmdline"))
                .is_ok_and(|cmdline| cmdline.starts_with(name.as_bytes()))
        })
        .collect()
}

fn background_processes_go_on_while_a_cell_runs(mode: Mode) {
    let server = Server::start(mode, &["--pool", "0"]);
    let marker = format!("BRIG_TEST_MARKER={}", unique("cell-and-background"));
    let id = create(&server, json!({"options": {"env": [marker]}}));
    let script = format!("{}; echo b", wait_for("go"));
    let short = background(&server, &id, &["sh", "-c", &script], "short")["pid"].clone();
    // A process that started another, in its process group.
    background(&server, &id, &["sh", "-c", "sleep 300 & wait"], "tree");
    let connection = open(
        &server,
        json!({"type": "session_connect", "session": id, "pid": short}),
    );
    assert_eq!(frame(&connection).unwrap()["type"], "process");
    assert!(wait_until(Duration::from_secs(30), || jailed(
        &marker, "sleep"
    )
    .len()
        == 1));
    // A cell that lets the short process go on, then waits for SIGUSR1.
    let code = "import signal\nsignal.pthread_sigmask(signal.SIG_BLOCK, [signal.SIGUSR1])\nopen('go', 'w').close()\nsignal.sigwait([signal.SIGUSR1])\n'woken'";
    let waiting = open(
        &server,
        json!({"type": "session_exec", "session": id, "code": code}),
    );
    // While the cell runs: the process's output, its end, its verdict.
    assert_eq!(read_until(&connection, "stdout", b"b\n"), b"b\n");
    let (_, end) = until_end(&connection);
    assert_eq!(end["type"], "exited", "{end}");
    assert_eq!(end["verdict"]["status"], "ok", "{end}");
    // Requests are served while the cell runs: a command, the list, a file; the next
    // cell waits for this one's end.
    let meanwhile = ask(
        &server,
        json!({"type": "session_exec", "session": id, "command": ["echo", "meanwhile"]}),
    );
    assert_eq!(meanwhile["stdout"], "meanwhile\n", "{meanwhile}");
    assert_eq!(
        process_of(&server, &id, short.as_u64().unwrap())["running"],
        false
    );
    put(&server, &id, "during-the-cell");
    let next_cell = open(
        &server,
        json!({"type": "session_exec", "session": id, "code": "'next'"}),
    );
    let interpreters = jailed(&marker, "python3");
    assert_eq!(interpreters.len(), 1, "{interpreters:?}");
    kill(interpreters[0], libc::SIGUSR1);
    let reply = frame(&waiting).unwrap();
    assert_eq!(reply["result"], "'woken'", "{reply}");
    let reply = frame(&next_cell).unwrap();
    assert_eq!(reply["result"], "'next'", "{reply}");
    // A cell cut at its time limit: what it started goes, the background processes and
    // what they started stay.
    let cut = ask(
        &server,
        json!({"type": "session_exec", "session": id, "code": "import subprocess\nsubprocess.Popen(['sleep', '301'])\nwhile True:\n    pass", "time_limit": "1s"}),
    );
    assert_eq!(cut["verdict"]["status"], "timeout", "{cut}");
    let list = ask(&server, json!({"type": "session_ps", "session": id}));
    let tree = list["processes"]
        .as_array()
        .unwrap()
        .iter()
        .find(|process| process["tag"] == "tree")
        .unwrap();
    assert_eq!(tree["running"], true, "{list}");
    let sleeping: Vec<Vec<u8>> = jailed(&marker, "sleep")
        .into_iter()
        .map(|pid| std::fs::read(format!("/proc/{pid}/cmdline")).unwrap())
        .collect();
    assert_eq!(
        sleeping,
        [b"sleep\x00300\x00".to_vec()],
        "the cell's sleep 301 goes, the tree's stays"
    );
    close(&server, &id);
}

fn a_process_is_listed_with_its_env_and_cwd_and_a_full_stdin_is_busy(mode: Mode) {
    let server = Server::start(mode, &["--pool", "0"]);
    let id = create(&server, json!({"options": {"env": ["SESSION_WIDE=1"]}}));
    put(&server, &id, "work/.keep");
    // It reads no stdin: what is sent piles up in the runner's buffer.
    let started = ask(
        &server,
        json!({"type": "session_exec", "session": id, "command": ["sleep", "300"],
               "background": true, "env": ["GREETING=hi there"], "chdir": "/home/sandbox/work"}),
    );
    assert_eq!(started["type"], "process", "{started}");
    let pid = started["pid"].as_u64().unwrap();
    let listed = process_of(&server, &id, pid);
    // The request's variables (not the session's), and the directory it runs in.
    assert_eq!(listed["env"], json!(["GREETING=hi there"]), "{listed}");
    assert_eq!(listed["cwd"], "/home/sandbox/work", "{listed}");
    let default = background(&server, &id, &["sleep", "300"], "default");
    assert_eq!(default["env"], json!([]), "{default}");
    assert_eq!(default["cwd"], "/home/sandbox", "{default}");
    // 600 KiB fit the 1 MiB buffer (the pipe takes 64 KiB of it); 600 more do not: the
    // same bytes would fit once it reads, so the refusal is `busy`, not the request's fault.
    let chunk = "x".repeat(600 << 10);
    let fed = ask(
        &server,
        json!({"type": "session_stdin", "session": id, "pid": pid, "data": chunk}),
    );
    assert_eq!(fed["written"], 600 << 10, "{fed}");
    let full = ask(
        &server,
        json!({"type": "session_stdin", "session": id, "pid": pid, "data": chunk}),
    );
    assert_eq!(full["type"], "error", "{full}");
    assert_eq!(full["kind"], "busy", "{full}");
    assert!(
        full["message"].as_str().unwrap().contains("not yet read"),
        "{full}"
    );
    // The session and the process are still there.
    assert_eq!(process_of(&server, &id, pid)["running"], true);
    close(&server, &id);
}

fn a_closed_or_ended_session_is_gone_at_once_as_not_found(mode: Mode) {
    let server = Server::start(mode, &["--pool", "0"]);
    let listed = |id: &str| {
        let list = ask(&server, json!({"type": "session_list"}));
        assert_eq!(list["type"], "sessions", "{list}");
        list["sessions"]
            .as_array()
            .unwrap()
            .iter()
            .any(|session| session["session"] == id)
    };
    // Closed: once `closed` is answered, the server lists it no more and knows it no
    // more (were the check off, the runner still tearing the jail down would list it).
    for _ in 0..5 {
        let id = create(&server, json!({}));
        background(&server, &id, &["sleep", "300"], "sleeper");
        assert!(listed(&id));
        close(&server, &id);
        assert!(
            !listed(&id),
            "session {id} listed after its close was answered"
        );
        let again = ask(&server, json!({"type": "session_ps", "session": id}));
        assert_eq!(again["type"], "error", "{again}");
        assert_eq!(again["kind"], "not_found", "{again}");
        assert!(
            again["message"].as_str().unwrap().contains("no session"),
            "{again}"
        );
    }
    // Ended by its timeout while a request waits on it: that request is told the session
    // ended, as `not_found` (nothing a client sends again would find it).
    let id = create(&server, json!({"session_timeout": "2s"}));
    let waiting = ask(
        &server,
        json!({"type": "session_exec", "session": id, "command": ["sleep", "300"]}),
    );
    assert_eq!(waiting["type"], "error", "{waiting}");
    assert_eq!(waiting["kind"], "not_found", "{waiting}");
    assert!(
        waiting["message"]
            .as_str()
            .unwrap()
            .contains("ended: it reached its session_timeout"),
        "{waiting}"
    );
    assert!(!listed(&id));
}
