//! `brig serve` under a misbehaving client or a flooding jail, as root and rootless: the
//! output captured for a client is bounded before the runner buffers it (on every path),
//! a client that does not read its answer loses it but not the slot, idle and half-sent
//! connections are capped per uid and timed out, and one uid cannot take every jail or
//! session slot from another.

use crate::common;

use common::serve::{Server, exchange, read_reply, send_frame};
use common::*;
use serde_json::{Value, json};
use std::io::Write;
use std::os::fd::AsFd;
use std::os::unix::net::UnixStream;
use std::process::Stdio;
use std::time::Duration;

both_modes!(
    captured_output_is_bounded_before_it_is_buffered,
    warm_captured_output_is_bounded_before_it_is_buffered,
    a_client_that_does_not_read_loses_its_answer_not_the_slot,
    a_warm_node_client_that_does_not_read_its_stdout_loses_it_not_the_slot,
    a_relayed_client_that_does_not_read_its_stdout_loses_it_not_the_slot,
    idle_connections_are_capped_per_uid,
    a_half_sent_request_is_answered_with_an_error,
    a_uid_at_its_share_of_jails_waits_while_another_is_served,
    a_uid_at_its_share_of_sessions_is_refused_while_another_is_served,
);

const MIB: u64 = 1 << 20;
/// What a reply carries at most of captured output (stdout and stderr together).
const MAX_CAPTURE: u64 = 8 * MIB;
/// What a runner may hold beyond the captured output: its own code and data.
const MARGIN: u64 = 32 * MIB;
/// 300 MB of text, then the program ends by itself.
const FLOOD: &str = "head -c 300000000 /dev/zero | tr '\\0' a";

/// The other uid of the two the tests use: root and 65534.
fn other(mode: Mode) -> Mode {
    match mode {
        Mode::Root => Mode::Rootless,
        Mode::Rootless => Mode::Root,
    }
}

/// A server in `mode` that uid 65534 may use too (root may use any).
fn shared_server(mode: Mode, args: &[&str]) -> Server {
    let mut all = args.to_vec();
    if mode == Mode::Root {
        all.extend(["--socket-group", "65534"]);
    }
    Server::start(mode, &all)
}

/// `brig ARGS` as the other uid of `mode`'s server, trusting that server's uid.
fn run_other(mode: Mode, args: &[&str]) -> std::process::Output {
    let mut command = command(other(mode), args);
    let server_uid = match mode {
        Mode::Root => "0",
        Mode::Rootless => "65534",
    };
    command.env("BRIG_SERVER_UID", server_uid);
    output_of(command)
}

/// `request`'s reply, sent as `mode`'s uid: root (this test process) or 65534.
fn ask_as(mode: Mode, server: &Server, request: Value) -> Value {
    match mode {
        Mode::Root => common::serve::ask(server, request),
        Mode::Rootless => {
            let mut request = request;
            request["brig"] = json!(1);
            let output = common::serve::exchange_as_nobody(server.socket(), &request);
            serde_json::from_str(&stdout(&output))
                .unwrap_or_else(|_| panic!("{}", describe(&output)))
        }
    }
}

/// The largest VmHWM (bytes) of the server's children: its runners.
fn runners_peak(server: u32) -> u64 {
    let children = std::fs::read_to_string(format!("/proc/{server}/task/{server}/children"))
        .unwrap_or_default();
    children
        .split_whitespace()
        .filter_map(|pid| std::fs::read_to_string(format!("/proc/{pid}/status")).ok())
        .filter_map(|status| {
            status
                .lines()
                .find_map(|line| line.strip_prefix("VmHWM:"))
                .and_then(|value| value.trim().trim_end_matches(" kB").parse::<u64>().ok())
        })
        .max()
        .unwrap_or(0)
        * 1024
}

/// Sends `body`, waits until the reply starts to arrive (the runner has its output
/// and its reply by then), takes the runners' peak memory, then reads the reply.
fn flood(server: &Server, body: &Value) -> (Value, u64) {
    let stream = UnixStream::connect(&server.socket).expect("connect");
    let mut body = body.clone();
    body["brig"] = json!(1);
    send_frame(&stream, body.to_string().as_bytes(), &[]);
    let mut fds = [nix::poll::PollFd::new(
        stream.as_fd(),
        nix::poll::PollFlags::POLLIN,
    )];
    let ready = nix::poll::poll(&mut fds, nix::poll::PollTimeout::from(60_000u16));
    assert!(
        ready.is_ok_and(|ready| ready == 1),
        "no reply within a minute"
    );
    let peak = runners_peak(server.pid());
    let reply = read_reply(&stream).expect("a reply");
    (reply, peak)
}

/// The reply says the output was cut, carries at most MAX_CAPTURE of it, and the runner
/// held no more than that and a margin.
fn assert_cut_and_bounded(what: &str, reply: &Value, verdict: &Value, peak: u64) {
    assert_eq!(verdict["status"], "output_limit", "{what}: {verdict}");
    assert_eq!(verdict["output_truncated"], true, "{what}: {verdict}");
    assert!(
        verdict["explanation"]
            .as_str()
            .is_some_and(|line| line.contains("output limit")),
        "{what}: {verdict}"
    );
    let kept =
        reply["stdout"].as_str().map_or(0, str::len) + reply["stderr"].as_str().map_or(0, str::len);
    assert!(kept as u64 <= MAX_CAPTURE, "{what}: {kept} bytes kept");
    assert!(
        peak < MAX_CAPTURE + MARGIN,
        "{what}: a runner reached {} MiB for a reply of at most {} MiB",
        peak / MIB,
        MAX_CAPTURE / MIB
    );
}

/// A server whose --output-limit is 1G (for its clients' own streams): what it captures
/// for a client is still bounded, on each path: a pooled jail, a jail built for the
/// request, a session's command.
fn captured_output_is_bounded_before_it_is_buffered(mode: Mode) {
    let server = Server::start(mode, &["--pool", "1", "--output-limit", "1G"]);
    let (reply, peak) = flood(
        &server,
        &json!({"type": "run", "stdio": "capture", "options": {"command": ["sh", "-c", FLOOD]}}),
    );
    assert_cut_and_bounded("pooled", &reply, &reply["verdict"], peak);
    assert_eq!(
        reply["verdict"]["limits"]["output_limit_bytes"],
        MAX_CAPTURE
    );

    let (reply, peak) = flood(
        &server,
        &json!({"type": "run", "stdio": "capture",
                "options": {"hostname": "built", "command": ["sh", "-c", FLOOD]}}),
    );
    assert_cut_and_bounded("built for the request", &reply, &reply["verdict"], peak);

    // A client asking to capture more than a reply carries is told so.
    let reply = exchange(
        &server.socket,
        json!({"brig": 1, "type": "run", "stdio": "capture",
               "options": {"output-limit": "1G", "command": ["true"]}})
        .to_string()
        .as_bytes(),
        &[],
    );
    assert_eq!(reply["type"], "error", "{reply}");
    let message = reply["message"].as_str().unwrap();
    assert!(
        message.contains("output-limit 1G") && message.contains("\"fds\""),
        "{message}"
    );

    let created = exchange(
        &server.socket,
        br#"{"brig":1,"type":"session_create"}"#,
        &[],
    );
    let id = created["session"].as_str().expect("a session").to_string();
    let (reply, peak) = flood(
        &server,
        &json!({"type": "session_exec", "session": id, "command": ["sh", "-c", FLOOD]}),
    );
    assert_cut_and_bounded("a session's command", &reply, &reply["verdict"], peak);
    let closed = exchange(
        &server.socket,
        json!({"brig": 1, "type": "session_close", "session": id})
            .to_string()
            .as_bytes(),
        &[],
    );
    assert_eq!(closed["type"], "closed", "{closed}");
}

/// A warm Python writes to the capture's pipes itself, a warm Node's output is relayed
/// into them: the capture's bound holds for both, and the answer says it was cut.
fn warm_captured_output_is_bounded_before_it_is_buffered(mode: Mode) {
    let server = Server::start(
        mode,
        &["--pool", "0", "--warm-python", "1", "--warm-node", "1"],
    );
    assert!(wait_until(Duration::from_secs(60), || {
        let status = server.status();
        status["warm_ready"] == 1 && status["warm_node_ready"] == 1
    }));
    let python = "import sys\nfor _ in range(4600): sys.stdout.write('a' * 65536)";
    let (reply, peak) = flood(
        &server,
        &json!({"type": "run", "stdio": "capture", "options": {"command": ["python3", "-c", python]}}),
    );
    assert_eq!(reply["verdict"]["warm"], true, "{reply:.300}");
    assert_cut_and_bounded("warm Python", &reply, &reply["verdict"], peak);

    let node = "const s = 'a'.repeat(65536); let n = 0; \
                function w() { while (n < 4600) { n++; if (!process.stdout.write(s)) return process.stdout.once('drain', w); } } w();";
    let (reply, peak) = flood(
        &server,
        &json!({"type": "run", "stdio": "capture", "options": {"command": ["node", "-e", node]}}),
    );
    assert_eq!(reply["verdict"]["warm"], true, "{reply:.300}");
    assert_cut_and_bounded("warm Node", &reply, &reply["verdict"], peak);
    assert_eq!(server.status()["warm_runs"], 2);
}

/// A client asks for a large captured output and never reads its answer: with one jail
/// slot, another request is served once brig has given up on the first client (its
/// reply timeout), never later than a generous deadline.
fn a_client_that_does_not_read_loses_its_answer_not_the_slot(mode: Mode) {
    let server = Server::start(
        mode,
        &["--pool", "1", "--max-jails", "1", "--queue-timeout", "120s"],
    );
    let silent = UnixStream::connect(&server.socket).expect("connect");
    send_frame(
        &silent,
        br#"{"brig":1,"type":"run","stdio":"capture","options":{"command":["sh","-c","yes | head -c 4000000"]}}"#,
        &[],
    );
    assert!(wait_until(
        Duration::from_secs(30),
        || server.status()["runs"] == 1
    ));
    let served = server.run(&[], &["echo", "served"]);
    assert_eq!(stdout(&served), "served\n", "{}", describe(&served));
    // The first client's answer was dropped, not delivered late: the connection ends
    // before a whole reply.
    silent
        .set_read_timeout(Some(Duration::from_secs(30)))
        .unwrap();
    let mut received = Vec::new();
    let _ = std::io::Read::read_to_end(&mut &silent, &mut received);
    let length = u32::from_be_bytes(received[..4].try_into().unwrap()) as usize;
    assert!(
        received.len() < 4 + length,
        "the whole reply of {length} bytes came"
    );
}

/// A warm Node's output is relayed by its runner into the client's stdout: a client that
/// never reads it loses the output, not the slot (the run ends at its time limit, and
/// another request is served).
fn a_warm_node_client_that_does_not_read_its_stdout_loses_it_not_the_slot(mode: Mode) {
    let server = Server::start(
        mode,
        &[
            "--pool",
            "0",
            "--warm-node",
            "1",
            "--max-jails",
            "1",
            "--queue-timeout",
            "120s",
        ],
    );
    assert!(wait_until(Duration::from_secs(60), || {
        server.status()["warm_node_ready"] == 1
    }));
    let flood = "const s = 'a'.repeat(65536); setInterval(() => process.stdout.write(s), 1)";
    let mut client = command(
        mode,
        &[
            "run",
            "--server",
            server.socket(),
            "--time-limit",
            "2s",
            "--",
            "node",
            "-e",
            flood,
        ],
    );
    client.stdout(Stdio::piped()).stderr(Stdio::null());
    let mut client = client.spawn().expect("start the client");
    // Held open, never read.
    let _unread = client.stdout.take();
    assert!(wait_until(Duration::from_secs(30), || {
        server.status()["warm_runs"] == 1
    }));
    let served = server.run(&[], &["echo", "served"]);
    assert_eq!(stdout(&served), "served\n", "{}", describe(&served));
    let _ = client.kill();
    let _ = client.wait();
}

/// With the server's --output-limit a run's output goes through brig's relay into the
/// client's own stdout: a client that never reads it loses the output, not the slot:
/// the run ends at its time limit (status 124) and another request is served.
fn a_relayed_client_that_does_not_read_its_stdout_loses_it_not_the_slot(mode: Mode) {
    let server = Server::start(
        mode,
        &[
            "--pool",
            "1",
            "--output-limit",
            "1G",
            "--max-jails",
            "1",
            "--queue-timeout",
            "120s",
        ],
    );
    let mut client = command(
        mode,
        &[
            "run",
            "--server",
            server.socket(),
            "--time-limit",
            "2s",
            "--",
            "yes",
        ],
    );
    client.stdout(Stdio::piped()).stderr(Stdio::null());
    let mut client = client.spawn().expect("start the client");
    // Held open, never read.
    let _unread = client.stdout.take();
    assert!(wait_until(Duration::from_secs(30), || {
        server.status()["runs"] == 1
    }));
    let served = server.run(&[], &["echo", "served"]);
    assert_eq!(stdout(&served), "served\n", "{}", describe(&served));
    let mut status = None;
    assert!(wait_until(Duration::from_secs(60), || {
        status = client.try_wait().ok().flatten();
        status.is_some()
    }));
    assert_eq!(status.and_then(|status| status.code()), Some(124));
}

/// Holds `count` connections to `socket` as `mode`'s uid, sending nothing, reopening
/// each the server closes; prints `ready` once all are open, and on stdin's end the
/// first refusal it read.
const HOLDER: &str = r#"
import os, resource, select, socket, struct, sys, time
soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
path, count = sys.argv[1], int(sys.argv[2])
def connect():
    s = socket.socket(socket.AF_UNIX)
    s.connect(path)
    return s
held = [connect() for _ in range(count)]
print("ready", flush=True)
first = None
poller = select.poll()
by_fd = {}
for s in held:
    poller.register(s, select.POLLIN)
    by_fd[s.fileno()] = s
poller.register(sys.stdin, select.POLLIN)
while True:
    events = poller.poll(1000)
    if any(fd == sys.stdin.fileno() for fd, _ in events):
        break
    for fd, _ in events:
        s = by_fd.pop(fd)
        poller.unregister(fd)
        data = s.recv(65536)
        if first is None and len(data) > 4:
            first = data[4:].decode(errors="replace")
        s.close()
        time.sleep(0.01)
        s = connect()
        by_fd[s.fileno()] = s
        poller.register(s, select.POLLIN)
print(first)
"#;

fn open_fds(pid: u32) -> usize {
    std::fs::read_dir(format!("/proc/{pid}/fd")).map_or(0, |dir| dir.count())
}

/// 1,100 idle connections of one uid: the server holds at most its per-uid cap of them,
/// refuses the rest with a line naming the option, stays up, and serves another uid.
fn idle_connections_are_capped_per_uid(mode: Mode) {
    let server = shared_server(mode, &["--pool", "1"]);
    let fds_before = open_fds(server.pid());
    let python = interpreter("python3");
    let mut holder = command_as(mode, python, &["-c", HOLDER, server.socket(), "1100"]);
    holder
        .current_dir("/")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let mut holder = holder.spawn().expect("start the holder");
    let mut lines = std::io::BufRead::lines(std::io::BufReader::new(holder.stdout.take().unwrap()));
    let ready = lines.next().and_then(Result::ok);
    assert_eq!(ready.as_deref(), Some("ready"));
    for _ in 0..5 {
        let held = open_fds(server.pid());
        assert!(
            held <= fds_before + 64 + 8,
            "the server holds {held} descriptors ({fds_before} before the idle connections)"
        );
        std::thread::sleep(Duration::from_millis(200));
    }
    let output = run_other(
        mode,
        &[
            "run",
            "--server",
            server.socket(),
            "--",
            "echo",
            "other uid",
        ],
    );
    assert_eq!(stdout(&output), "other uid\n", "{}", describe(&output));
    drop(holder.stdin.take());
    let refusal = lines.next().and_then(Result::ok).unwrap_or_default();
    let _ = holder.wait();
    let refusal: Value = serde_json::from_str(&refusal).unwrap_or_else(|_| json!(refusal));
    assert_eq!(refusal["type"], "error", "{refusal}");
    assert_eq!(refusal["kind"], "busy", "{refusal}");
    let message = refusal["message"].as_str().unwrap_or_default();
    assert!(message.contains("--max-connections-per-uid"), "{refusal}");
    let status = server.status();
    assert_eq!(status["runs"], 1, "{status}");
}

/// A request that never arrives whole is answered with the protocol's error after the
/// bound (5 s), and its connection closed.
fn a_half_sent_request_is_answered_with_an_error(mode: Mode) {
    let server = Server::start(mode, &["--pool", "0"]);
    let mut stream = UnixStream::connect(&server.socket).expect("connect");
    stream.write_all(&[0, 0, 1]).unwrap();
    let reply = read_reply(&stream).expect("an error frame");
    assert_eq!(reply["type"], "error", "{reply}");
    assert_eq!(reply["exit_code"], 125, "{reply}");
    let message = reply["message"].as_str().unwrap();
    assert!(message.contains("within 5s"), "{message}");
    let mut rest = Vec::new();
    let _ = std::io::Read::read_to_end(&mut stream, &mut rest);
    assert!(rest.is_empty(), "{rest:?}");
}

/// `--max-jails 2`: each uid's share is 1. A uid with one run going and another waiting
/// does not keep the other uid from the second slot.
fn a_uid_at_its_share_of_jails_waits_while_another_is_served(mode: Mode) {
    let server = shared_server(
        mode,
        &["--pool", "0", "--max-jails", "2", "--queue-timeout", "60s"],
    );
    let hold = || {
        let mut client = command(
            mode,
            &["run", "--server", server.socket(), "--", "sleep", "120"],
        );
        client.stdout(Stdio::null()).stderr(Stdio::null());
        Running::spawn(client)
    };
    let first = hold();
    assert!(wait_until(Duration::from_secs(30), || {
        server.status()["running"] == 1
    }));
    let second = hold();
    assert!(wait_until(Duration::from_secs(30), || {
        let status = server.status();
        status["running"] == 1 && status["queued"] == 1
    }));
    let output = run_other(
        mode,
        &[
            "run",
            "--server",
            server.socket(),
            "--",
            "echo",
            "other uid",
        ],
    );
    assert_eq!(stdout(&output), "other uid\n", "{}", describe(&output));
    // The first run ends (its client killed): the waiting one starts.
    kill(first.pid(), libc::SIGKILL);
    let _ = first.wait();
    assert!(wait_until(Duration::from_secs(30), || {
        let status = server.status();
        status["running"] == 1 && status["queued"] == 0
    }));
    kill(second.pid(), libc::SIGKILL);
    let _ = second.wait();
}

/// `--max-sessions 2`: each uid's share is 1; a second session of one uid is refused
/// with a line naming the option while the other uid opens one.
fn a_uid_at_its_share_of_sessions_is_refused_while_another_is_served(mode: Mode) {
    let server = shared_server(mode, &["--pool", "0", "--max-sessions", "2"]);
    let first = run(mode, &["session", "create", "--server", server.socket()]);
    assert_eq!(code(&first), 0, "{}", describe(&first));
    let refused = run(mode, &["session", "create", "--server", server.socket()]);
    assert_one_line_error(&refused, &["--max-sessions-per-uid 1"]);
    let refused = ask_as(mode, &server, json!({"type": "session_create"}));
    assert_eq!(refused["type"], "error", "{refused}");
    assert_eq!(refused["kind"], "busy", "{refused}");
    assert_eq!(refused["exit_code"], 125, "{refused}");
    let theirs = run_other(mode, &["session", "create", "--server", server.socket()]);
    assert_eq!(code(&theirs), 0, "{}", describe(&theirs));
    for (mine, output) in [(true, &first), (false, &theirs)] {
        let id = stdout(output);
        let args = [
            "session",
            "close",
            "--server",
            server.socket(),
            "--session",
            id.trim(),
        ];
        let closed = match mine {
            true => run(mode, &args),
            false => run_other(mode, &args),
        };
        assert_eq!(code(&closed), 0, "{}", describe(&closed));
    }
}
