//! `brig serve` and `brig run --server`, for real, as root and rootless: a pooled run
//! looks like a one-shot run from inside, a jail is never reused, the queue behind
//! --max-jails, signals, a killed client or server leaving nothing, the client policy,
//! a peer of another uid, and malformed protocol messages that leave the server up.

use crate::common;

use common::limits::parse_verdict;
use common::serve::{Server, brig_lines, exchange, fake_listener, read_reply};
use common::*;
use std::io::{Read, Write};
use std::os::fd::AsRawFd;
use std::os::unix::net::UnixStream;
use std::path::PathBuf;
use std::process::{Output, Stdio};
use std::time::Duration;

both_modes!(
    a_pooled_run_looks_like_a_one_shot_run,
    a_jail_is_never_reused,
    requests_beyond_max_jails_wait_then_give_up,
    signals_to_the_client_reach_the_program,
    a_killed_client_takes_its_jail_along,
    a_killed_server_leaves_nothing_after_a_restart,
    looser_options_are_refused_unless_allowed,
    the_reported_escapes_are_refused_and_their_tightening_served,
    names_the_jail_looked_up_are_escaped_on_the_terminal,
    malformed_messages_leave_the_server_up,
    capture_mode_returns_the_output,
    a_jail_of_another_shape_is_built_for_the_request,
    a_pooled_run_takes_its_own_time_limit,
    the_audit_logs_name_the_client,
    sigterm_drains,
    a_drain_begun_beside_a_new_connection_keeps_its_grace,
    the_output_limit_holds_in_a_pooled_jail,
    the_server_takes_its_hard_descriptor_limit,
    a_listener_of_another_uid_gets_nothing,
    limit_hits_are_explained_as_by_a_one_shot_run,
    an_unenforced_default_limit_is_said_through_the_server,
    brig_run_does_not_read_brig_server,
);

/// `brig session` takes its socket from BRIG_SERVER; `brig run` does not: only --server
/// sends a run to a server.
fn brig_run_does_not_read_brig_server(mode: Mode) {
    let server = Server::start(mode, &["--pool", "1"]);
    let with_server = |args: &[&str]| {
        let mut command = command(mode, args);
        command.env("BRIG_SERVER", server.socket());
        output_of(command)
    };
    let output = with_server(&["run", "--quiet-limits", "--", "true"]);
    assert_eq!(code(&output), 0, "{}", describe(&output));
    assert_eq!(server.status()["runs"], 0, "the run went to the server");
    let output = with_server(&["session", "list"]);
    assert_eq!(code(&output), 0, "{}", describe(&output));
}

/// clap's errors stay one line and keep what names the fix: the missing arguments (and
/// the variable that can give them), clap's tips, the subcommand whose help to read.
#[test]
fn command_line_errors_name_the_missing_arguments_and_tips() {
    let cases: &[(&[&str], &[&str])] = &[
        (
            &["session", "create"],
            &[
                "required arguments were not provided: --server <SOCKET> (or $BRIG_SERVER)",
                "see `brig session create --help`",
            ],
        ),
        (
            &["serve", "--status"],
            &[
                "required arguments were not provided: --socket <PATH>",
                "see `brig serve --help`",
            ],
        ),
        (
            &["run", "--tim-limit", "3s", "--", "true"],
            &[
                "unexpected argument '--tim-limit' found",
                "a similar argument exists: '--time-limit'",
                "see `brig run --help`",
            ],
        ),
        (
            &["sesion", "list"],
            &["a similar subcommand exists: 'session'"],
        ),
    ];
    for (args, needles) in cases {
        let mut command = command(Mode::Root, args);
        command.env_remove("BRIG_SERVER").env_remove("BRIG_SESSION");
        assert_one_line_error(&output_of(command), needles);
    }
}

/// `brig run --server` says on stderr what `brig run` says when brig or the kernel ends
/// the run: a time limit (in a pooled jail), an output cut (in a jail built for the
/// request), and as root (a cgroup to enforce --memory) an OOM kill.
fn limit_hits_are_explained_as_by_a_one_shot_run(mode: Mode) {
    let server = Server::start(mode, &["--pool", "1"]);
    let mut cases: Vec<(&[&str], &[&str], i32)> = vec![
        (&["--time-limit", "1s"], &["sleep", "30"], 124),
        (
            &["--output-limit", "1K"],
            &["sh", "-c", "head -c 100000 /dev/zero"],
            124,
        ),
    ];
    if mode == Mode::Root {
        cases.push((
            &["--memory", "32M"],
            &["python3", "-c", "x = bytearray(1 << 30)"],
            137,
        ));
    }
    for (options, program, status) in cases {
        let mut one_shot_args = vec!["run", "--quiet-limits"];
        one_shot_args.extend_from_slice(options);
        one_shot_args.push("--");
        one_shot_args.extend_from_slice(program);
        let one_shot = run(mode, &one_shot_args);
        let served = server.run(options, program);
        assert_eq!(code(&one_shot), status, "{}", describe(&one_shot));
        assert_eq!(code(&served), status, "{}", describe(&served));
        let line = brig_lines(&one_shot);
        assert_eq!(line.len(), 1, "{options:?}: {}", describe(&one_shot));
        assert_eq!(
            brig_lines(&served),
            line,
            "{options:?}: {}",
            describe(&served)
        );
    }
}

/// A default limit the host cannot enforce (rootless here: no cgroup) is said through
/// the server as by `brig run`, unless the client or the server asks for quiet.
fn an_unenforced_default_limit_is_said_through_the_server(mode: Mode) {
    let server = Server::start_with(mode, &["--pool", "1"]);
    let one_shot = run(mode, &["run", "--", "true"]);
    let served = server.run(&[], &["true"]);
    assert_eq!(code(&served), 0, "{}", describe(&served));
    assert_eq!(
        brig_lines(&served),
        brig_lines(&one_shot),
        "{}",
        describe(&served)
    );
    if mode == Mode::Rootless {
        let lines = brig_lines(&served);
        assert_eq!(lines.len(), 1, "{}", describe(&served));
        assert!(lines[0].contains("was not enforced"), "{lines:?}");
    }
    let quiet = server.run(&["--quiet-limits"], &["true"]);
    assert_eq!(
        brig_lines(&quiet),
        Vec::<String>::new(),
        "{}",
        describe(&quiet)
    );
}

fn open_fds(pid: u32) -> usize {
    std::fs::read_dir(format!("/proc/{pid}/fd")).map_or(0, |dir| dir.count())
}

/// What a program sees of its jail, printed the same way for both kinds of run.
const PROBE: &str = "id; hostname; echo pid $$; grep -E '^(CapEff|CapBnd|NoNewPrivs|Seccomp):' /proc/self/status; ls /; ls -A /tmp; cat /proc/self/cgroup; exit 3";

fn a_pooled_run_looks_like_a_one_shot_run(mode: Mode) {
    let server = Server::start(mode, &["--pool", "1"]);
    let dir = TempDir::new("verdicts").writable_by_all();
    let (served_report, one_shot_report) = (
        dir.path().join("served.json"),
        dir.path().join("one-shot.json"),
    );
    let served = server.run(
        &[
            "--quiet-limits",
            "--report",
            served_report.to_str().unwrap(),
        ],
        &["sh", "-c", PROBE],
    );
    let one_shot = run(
        mode,
        &[
            "run",
            "--quiet-limits",
            "--report",
            one_shot_report.to_str().unwrap(),
            "--",
            "sh",
            "-c",
            PROBE,
        ],
    );
    assert_eq!(code(&served), 3, "{}", describe(&served));
    assert_eq!(stdout(&served), stdout(&one_shot), "{}", describe(&served));
    assert_eq!(stderr(&served), stderr(&one_shot));
    let read = |path: &PathBuf| parse_verdict(&std::fs::read_to_string(path).expect("a verdict"));
    let (mut served, mut one_shot) = (read(&served_report), read(&one_shot_report));
    // As root each jail has a host uid of its own: the same kind, another number.
    for verdict in [&mut served, &mut one_shot] {
        let identity = &mut verdict["protections"]["host_identity"];
        if identity["mode"] == "per-jail" {
            identity["uid"] = serde_json::Value::Null;
            identity["gid"] = serde_json::Value::Null;
        }
    }
    for key in [
        "status",
        "exit_code",
        "brig_exit_code",
        "protections",
        "limits",
    ] {
        assert_eq!(served[key], one_shot[key], "{key}: {served} vs {one_shot}");
    }
    assert_eq!(server.status()["pooled_runs"], 1);
}

fn a_jail_is_never_reused(mode: Mode) {
    let server = Server::start(mode, &["--pool", "1"]);
    for _ in 0..3 {
        let output = server.run(
            &[],
            &[
                "sh",
                "-c",
                "test ! -e /tmp/left-behind && touch /tmp/left-behind && echo fresh $$",
            ],
        );
        assert_eq!(stdout(&output), "fresh 2\n", "{}", describe(&output));
    }
    let status = server.status();
    assert_eq!(status["runs"], 3, "{status}");
}

fn requests_beyond_max_jails_wait_then_give_up(mode: Mode) {
    let server = Server::start(
        mode,
        &["--pool", "1", "--max-jails", "1", "--queue-timeout", "1s"],
    );
    let mut first = command(
        mode,
        &["run", "--server", server.socket(), "--", "sleep", "4"],
    );
    first.stdout(Stdio::piped()).stderr(Stdio::piped());
    let first = Running::spawn(first);
    assert!(wait_until(
        Duration::from_secs(5),
        || server.status()["running"] == 1
    ));
    let waited = server.run(&[], &["true"]);
    assert_one_line_error(&waited, &["--max-jails", "--queue-timeout"]);
    let first = first.wait();
    assert_eq!(code(&first), 0, "{}", describe(&first));
    let after = server.run(&[], &["echo", "my turn"]);
    assert_eq!(stdout(&after), "my turn\n", "{}", describe(&after));
}

fn signals_to_the_client_reach_the_program(mode: Mode) {
    let server = Server::start(mode, &["--pool", "1"]);
    let script = "trap 'echo got TERM; exit 7' TERM; echo ready; while :; do sleep 0.05; done";
    let mut client = command(
        mode,
        &["run", "--server", server.socket(), "--", "sh", "-c", script],
    );
    client.stdout(Stdio::piped()).stderr(Stdio::piped());
    let mut client = Running::spawn(client);
    let mut stdout_pipe = client.child.stdout.take().expect("stdout");
    let mut ready = [0u8; 6];
    stdout_pipe
        .read_exact(&mut ready)
        .expect("the program started");
    kill(client.pid(), libc::SIGTERM);
    let mut rest = String::new();
    stdout_pipe.read_to_string(&mut rest).expect("read");
    let output = client.wait();
    assert_eq!(code(&output), 7, "{}", describe(&output));
    assert_eq!(rest, "got TERM\n");
}

fn a_killed_client_takes_its_jail_along(mode: Mode) {
    let server = Server::start(mode, &["--pool", "1"]);
    let marker = format!("BRIG_TEST_MARKER={}", unique("client"));
    let mut client = command(
        mode,
        &[
            "run",
            "--server",
            server.socket(),
            "--env",
            &marker,
            "--",
            "sleep",
            "100",
        ],
    );
    client.stdout(Stdio::null()).stderr(Stdio::null());
    let client = Running::spawn(client);
    assert!(wait_until(Duration::from_secs(5), || {
        !processes_with_environ(&marker).is_empty()
    }));
    kill(client.pid(), libc::SIGKILL);
    drop(client);
    assert!(
        wait_until(Duration::from_secs(5), || processes_with_environ(&marker)
            .is_empty()),
        "the jail outlived its client"
    );
    assert!(wait_until(
        Duration::from_secs(5),
        || server.status()["running"] == 0
    ));
    let output = server.run(&[], &["echo", "still serving"]);
    assert_eq!(stdout(&output), "still serving\n");
}

fn a_killed_server_leaves_nothing_after_a_restart(mode: Mode) {
    let mut server = Server::start(mode, &["--pool", "2"]);
    let marker = format!("BRIG_TEST_MARKER={}", unique("server"));
    let mut client = command(
        mode,
        &[
            "run",
            "--server",
            server.socket(),
            "--env",
            &marker,
            "--",
            "sleep",
            "100",
        ],
    );
    client.stdout(Stdio::null()).stderr(Stdio::null());
    let client = Running::spawn(client);
    assert!(wait_until(Duration::from_secs(5), || {
        !processes_with_environ(&marker).is_empty()
    }));
    let runners = children(server.pid());
    assert!(runners.len() >= 2, "pooled and busy runners: {runners:?}");
    let server_process = server.running.take().expect("running");
    kill(server_process.pid(), libc::SIGKILL);
    let _ = server_process.wait();
    let gone = |pid: &u32| !std::path::Path::new(&format!("/proc/{pid}")).exists();
    assert!(
        wait_until(Duration::from_secs(10), || runners.iter().all(gone)),
        "runners outlived the server: {runners:?}"
    );
    assert!(
        processes_with_environ(&marker).is_empty(),
        "the jail outlived the server"
    );
    let client = client.wait();
    assert_ne!(code_or_signal(&client), 0, "{}", describe(&client));
    // The killed server's socket is still there; a new server replaces it.
    assert!(server.socket.exists());
    let again = Server::start_at(mode, &server.socket, &["--pool", "1"]);
    let output = again.run(&[], &["echo", "back"]);
    assert_eq!(stdout(&output), "back\n", "{}", describe(&output));
}

fn children(pid: u32) -> Vec<u32> {
    std::fs::read_to_string(format!("/proc/{pid}/task/{pid}/children"))
        .unwrap_or_default()
        .split_whitespace()
        .filter_map(|child| child.parse().ok())
        .collect()
}

fn code_or_signal(output: &Output) -> i32 {
    use std::os::unix::process::ExitStatusExt;
    output
        .status
        .code()
        .unwrap_or_else(|| 128 + output.status.signal().unwrap_or(0))
}

fn looser_options_are_refused_unless_allowed(mode: Mode) {
    let server = Server::start(
        mode,
        &[
            "--pool",
            "1",
            "--time-limit",
            "20s",
            "--seccomp",
            "strict",
            "--tmpfs-size",
            "16M",
        ],
    );
    let refused: &[(&[&str], &str)] = &[
        (&["--net", "host"], "--client-may net-host"),
        (&["--seccomp", "none"], "--client-may seccomp-none"),
        (&["--seccomp-log"], "--client-may seccomp-log"),
        (&["--landlock", "off"], "--client-may landlock-off"),
        (&["--allow-net", "pypi.org:443"], "--client-may allow-net"),
        (&["--proc", "host"], "--client-may proc-host"),
        (&["--ro-bind", "/etc:/x"], "--allow-bind-under"),
        (&["--env-pass", "HOME"], "--env-pass"),
        (&["--time-limit", "0s"], "--time-limit"),
        // Limits may only be tightened.
        (&["--time-limit", "1h"], "looser than this server's 20s"),
        (&["--tmpfs-size", "1G"], "--tmpfs-size 1G: looser"),
        (&["--seccomp", "default"], "--seccomp default: looser"),
        (&["--rlimit", "nofile=100000"], "--rlimit nofile"),
    ];
    for (args, needle) in refused {
        let output = server.run(args, &["true"]);
        assert_one_line_error(&output, &[needle]);
    }
    let status = server.status();
    assert_eq!(status["refused"], refused.len() as u64, "{status}");
    // Tighter is fine: a jail built for the request.
    let output = server.run(&["--time-limit", "5s", "--tmpfs-size", "8M"], &["true"]);
    assert_eq!(code(&output), 0, "{}", describe(&output));
    // Where the server's memory limit is enforced (a cgroup: here, as root), no client
    // may lift it.
    if mode == Mode::Root {
        let output = server.run(&["--memory", "max"], &["true"]);
        assert_one_line_error(&output, &["--memory max: looser than this server's 1G"]);
    }
    // A value the client did not type (its profile's) is named as such, with what each
    // side can change.
    let output = server.run(&["--profile", "node"], &["node", "-e", "0"]);
    assert_one_line_error(
        &output,
        &[
            "--time-limit 60s (from profile node): looser than this server's 20s",
            "the client may pass --time-limit 20s or less to override it",
            "or the server's operator raise its --time-limit",
        ],
    );
    drop(server);
    let allowed = Server::start(mode, &["--pool", "1", "--client-may", "net-host"]);
    let output = allowed.run(&["--net", "host"], &["true"]);
    assert_eq!(code(&output), 0, "{}", describe(&output));
}

/// Issue 21: through the server a client got a 1 GiB /tmp and /scratch, `--rlimit
/// cpu=unlimited` past the server's CPU limit, and a --net-bytes above the server's.
/// Each is refused (125, one line naming the option, the server's value and the fix)
/// before anything is built; the same tightened is served.
fn the_reported_escapes_are_refused_and_their_tightening_served(mode: Mode) {
    // The server's jails inherit its hard RLIMIT_CPU of 3600 s (a systemd LimitCPU=).
    let server = Server::start_under(
        mode,
        &["prlimit", "--cpu=3600:3600", "--"],
        &[
            "--quiet-limits",
            "--pool",
            "1",
            "--tmpfs-size",
            "16M",
            "--allow-net",
            "127.0.0.1:9",
            "--net-bytes",
            "1M",
        ],
    );
    let refused: &[(&[&str], &[&str])] = &[
        (
            &["--tmpfs", "/scratch:1G"],
            &[
                "--tmpfs /scratch:1G: looser than this server's 16M",
                "ask for at most 16M",
            ],
        ),
        (
            &["--tmpfs", "/tmp:1G"],
            &[
                "--tmpfs /tmp:1G: looser than this server's 16M",
                "raise its --tmpfs",
            ],
        ),
        (
            &["--rlimit", "cpu=unlimited"],
            &[
                "--rlimit cpu=unlimited: looser than this server's 3600",
                "ask for at most 3600",
            ],
        ),
        (
            &["--net-bytes", "1G"],
            &[
                "--net-bytes 1G: looser than this server's 1M",
                "raise its --net-bytes",
            ],
        ),
    ];
    for (args, needles) in refused {
        assert_one_line_error(&server.run(args, &["true"]), needles);
    }
    assert_eq!(server.status()["refused"], refused.len() as u64);
    let served: &[(&[&str], &[&str], &str)] = &[
        (
            &["--tmpfs", "/scratch:8M", "--tmpfs-size", "8M"],
            &[
                "sh",
                "-c",
                "df -k /scratch /tmp | tail -n +2 | tr -s ' ' | cut -d' ' -f2",
            ],
            "8192\n8192\n",
        ),
        (
            &["--rlimit", "cpu=60"],
            &["sh", "-c", "ulimit -H -t"],
            "60\n",
        ),
        (&["--net-bytes", "512K"], &["echo", "served"], "served\n"),
    ];
    for (args, program, expected) in served {
        let output = server.run(args, program);
        assert_eq!(code(&output), 0, "{args:?}: {}", describe(&output));
        assert_eq!(
            String::from_utf8_lossy(&output.stdout),
            *expected,
            "{args:?}"
        );
    }
}

/// A name the jail looks up is the jail's choice, terminal escapes included: brig's
/// network line names it escaped, through a server and in a one-shot run.
fn names_the_jail_looked_up_are_escaped_on_the_terminal(mode: Mode) {
    // A query for `a<ESC>]0;pwned<BEL>b.test`, sent to the jail's resolver as is.
    let query = r#"
import socket, struct
ns = [l.split()[1] for l in open('/etc/resolv.conf') if l.startswith('nameserver')][0]
label = b'a\x1b]0;pwned\x07b'
q = struct.pack('>HHHHHH', 1, 0x0100, 1, 0, 0, 0) + bytes([len(label)]) + label
q += b'\x04test\x00' + struct.pack('>HH', 1, 1)
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
s.settimeout(10)
s.sendto(q, (ns, 53))
s.recv(512)
"#;
    let network = [
        "--add-host",
        "host.test:127.0.0.1",
        "--allow-net",
        "host.test:9",
    ];
    let mut args = vec!["--pool", "0"];
    args.extend(network);
    let server = Server::start(mode, &args);
    let served = server.run(&[], &["python3", "-c", query]);
    let mut one_shot = vec!["run", "--quiet-limits"];
    one_shot.extend(network);
    one_shot.extend(["--", "python3", "-c", query]);
    for output in [served, run(mode, &one_shot)] {
        assert_eq!(code(&output), 0, "{}", describe(&output));
        let err = stderr(&output);
        assert!(!err.contains('\x1b') && !err.contains('\x07'), "{err:?}");
        assert!(
            err.contains(r"1 name not on the list was not resolved: a\x1b]0;pwned\x07b.test"),
            "{err:?}"
        );
    }
}

fn malformed_messages_leave_the_server_up(mode: Mode) {
    let server = Server::start(mode, &["--pool", "1"]);
    let settled = || {
        let status = server.status();
        status["running"] == 0 && status["ready"] == 1
    };
    assert!(wait_until(Duration::from_secs(30), settled));
    let fds_before = open_fds(server.pid());
    let null = std::fs::File::open("/dev/null").unwrap();
    let dir = std::fs::File::open("/").unwrap();
    let n = null.as_raw_fd();
    let cases: Vec<(&[u8], Vec<i32>, &str)> = vec![
        (b"not json", vec![], "not JSON"),
        (br#"{"type":"status"}"#, vec![], "\"brig\": 1"),
        (br#"{"brig":9,"type":"status"}"#, vec![], "version 9"),
        (br#"{"brig":1,"type":"explode"}"#, vec![], "malformed"),
        (
            br#"{"brig":1,"type":"run","options":{"command":["true"]}}"#,
            vec![],
            "needs 3 descriptors",
        ),
        (
            br#"{"brig":1,"type":"run","options":{"command":["true"]}}"#,
            vec![n; 5],
            "needs 3 descriptors",
        ),
        (
            br#"{"brig":1,"type":"run","options":{"command":["true"]}}"#,
            vec![n; 9],
            "too many descriptors",
        ),
        (
            br#"{"brig":1,"type":"run","options":{"command":["true"]}}"#,
            vec![n, dir.as_raw_fd(), n],
            "files, pipes",
        ),
        (
            br#"{"brig":1,"type":"run","options":{"bogus":1}}"#,
            vec![],
            "bogus",
        ),
        (
            br#"{"brig":1,"type":"signal","signal":15}"#,
            vec![],
            "before any run",
        ),
        // Unknown fields are refused, as docs/protocol.md says, at every level.
        (
            br#"{"brig":1,"type":"run","options":{"command":["true"]},"bogus":1}"#,
            vec![n; 3],
            "unknown field `bogus`",
        ),
        (
            br#"{"brig":1,"type":"status","verbose":true}"#,
            vec![],
            "unknown field `verbose`",
        ),
        (
            br#"{"brig":1,"type":"session_ls","session":"x","recursive":true}"#,
            vec![],
            "unknown field `recursive`",
        ),
    ];
    for (body, fds, needle) in cases {
        let reply = exchange(&server.socket, body, &fds);
        assert_eq!(reply["type"], "error", "{reply}");
        assert_eq!(reply["exit_code"], 125, "{reply}");
        let message = reply["message"].as_str().unwrap();
        assert!(
            message.contains(needle) && !message.contains('\n'),
            "{needle}: {message}"
        );
    }
    // An oversized frame, and one cut short by a client that goes away.
    let stream = UnixStream::connect(&server.socket).unwrap();
    (&stream).write_all(&(64u32 << 20).to_be_bytes()).unwrap();
    let reply = read_reply(&stream).expect("a reply");
    assert!(
        reply["message"].as_str().unwrap().contains("the most is"),
        "{reply}"
    );
    let stream = UnixStream::connect(&server.socket).unwrap();
    (&stream).write_all(&100u32.to_be_bytes()).unwrap();
    (&stream).write_all(b"{\"brig\":").unwrap();
    drop(stream);
    // Still serving, and holding no descriptor more than before, once the run's jail is
    // torn down (after its client was answered) and the pool is full again.
    let output = server.run(&[], &["echo", "up"]);
    assert_eq!(stdout(&output), "up\n", "{}", describe(&output));
    assert!(wait_until(Duration::from_secs(30), settled));
    assert!(
        wait_until(Duration::from_secs(5), || open_fds(server.pid())
            <= fds_before),
        "the server leaked descriptors: {} before, {} after",
        fds_before,
        open_fds(server.pid())
    );
}

fn capture_mode_returns_the_output(mode: Mode) {
    let server = Server::start(mode, &["--pool", "1"]);
    let body = br#"{"brig":1,"type":"run","stdio":"capture","stdin":"from stdin\n","options":{"command":["sh","-c","cat; echo to stderr >&2; exit 4"]}}"#;
    let reply = exchange(&server.socket, body, &[]);
    assert_eq!(reply["type"], "done", "{reply}");
    assert_eq!(reply["stdout"], "from stdin\n", "{reply}");
    assert_eq!(reply["stderr"], "to stderr\n", "{reply}");
    assert_eq!(reply["verdict"]["exit_code"], 4, "{reply}");
    assert!(
        reply["config_digest"]
            .as_str()
            .unwrap()
            .starts_with("sha256:")
    );
}

fn a_jail_of_another_shape_is_built_for_the_request(mode: Mode) {
    let server = Server::start(mode, &["--pool", "1"]);
    let output = server.run(
        &["--hostname", "other", "--tmpfs-size", "8M"],
        &["hostname"],
    );
    assert_eq!(stdout(&output), "other\n", "{}", describe(&output));
    let status = server.status();
    assert_eq!(
        (status["runs"].as_u64(), status["pooled_runs"].as_u64()),
        (Some(1), Some(0)),
        "{status}"
    );
}

/// Rootless on this host brig has no cgroup (tests/jail/rootless_limits.rs), so a server asked
/// for --memory and --pids cannot enforce them: it refuses to start, once, with the fix,
/// exit 125, which the shipped unit names in RestartPreventExitStatus= (no restart loop).
#[test]
fn a_server_whose_limits_this_host_cannot_enforce_refuses_once() {
    if !require_root() {
        return;
    }
    let dir = TempDir::new("serve-limits").writable_by_all();
    let socket = dir.path().join("brig.sock");
    let output = run(
        Mode::Rootless,
        &[
            "serve",
            "--socket",
            socket.to_str().unwrap(),
            "--memory",
            "512M",
            "--pids",
            "128",
        ],
    );
    assert_one_line_error(&output, &["--memory", "--cgroup-parent"]);
    assert!(!socket.exists(), "a socket was left");
    let unit = std::fs::read_to_string(
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("deploy/systemd/brig-serve.service"),
    )
    .unwrap();
    assert!(
        unit.lines()
            .any(|line| line.trim() == "RestartPreventExitStatus=125"),
        "{unit}"
    );
}

/// A peer of another uid is refused by its credentials, even when the socket's mode
/// would let it connect.
#[test]
fn a_peer_of_another_uid_is_refused() {
    if !require_root() {
        return;
    }
    let server = Server::start(Mode::Root, &["--pool", "1"]);
    set_mode(&server.socket, 0o666);
    let output = run(
        Mode::Rootless,
        &["run", "--server", server.socket(), "--", "true"],
    );
    assert_one_line_error(
        &output,
        &["uid 65534 may not use this server", "--socket-group"],
    );
    assert_eq!(server.status()["refused"], 1);
}

#[test]
fn bad_serve_options_are_one_line_errors() {
    let dir = TempDir::new("serve-bad");
    let socket = dir.path().join("s.sock");
    let socket = socket.to_str().unwrap();
    for (args, needle) in [
        (
            vec!["serve", "--socket", socket, "--", "python3"],
            "takes no program",
        ),
        (
            vec!["serve", "--socket", socket, "--report", "/tmp/x"],
            "--report",
        ),
        (
            vec!["serve", "--socket", "/nonexistent/dir/s.sock"],
            "--socket /nonexistent/dir/s.sock",
        ),
        (
            vec![
                "serve",
                "--socket",
                socket,
                "--socket-group",
                "no-such-group-here",
            ],
            "--socket-group",
        ),
        (vec!["run", "--server", socket, "--", "true"], "--server"),
        (
            vec![
                "serve",
                "--socket",
                socket,
                "--warm-python",
                "1",
                "--output-limit",
                "1M",
            ],
            "--warm-python with --output-limit",
        ),
        (
            vec![
                "serve",
                "--socket",
                socket,
                "--warm-node",
                "1",
                "--output-limit",
                "1M",
            ],
            "--warm-node with --output-limit",
        ),
        (
            vec!["serve", "--socket", socket, "--idle-timeout", "soon"],
            "--idle-timeout",
        ),
    ] {
        let output = run(Mode::Root, &args);
        assert_one_line_error(&output, &[needle]);
    }
    assert!(!std::path::Path::new(socket).exists());
}

/// What the socket's directory holds besides `keep`: nothing brig left (no socket, no
/// private bind directory).
fn left_in(dir: &std::path::Path) -> Vec<String> {
    std::fs::read_dir(dir)
        .unwrap()
        .map(|entry| entry.unwrap().file_name().to_string_lossy().into_owned())
        .collect()
}

/// A socket directory that others can write (its group: the --socket-group's members;
/// everyone; another owner) is refused with one line naming it and the fix: whoever
/// can write it could rename the socket away and put a symlink in its place. Root and
/// rootless; nothing is left behind.
#[test]
fn a_socket_directory_others_can_write_is_refused() {
    let chown = |path: &std::path::Path, uid: u32, gid: u32| {
        std::os::unix::fs::chown(path, Some(uid), Some(gid)).unwrap();
    };
    for (mode, owner, group, bits, socket_group, needle) in [
        (
            Mode::Root,
            0,
            4242,
            0o770,
            Some("4242"),
            "writable by its group (gid 4242)",
        ),
        (
            Mode::Root,
            0,
            0,
            0o777,
            None,
            "writable by its group (gid 0) and all users",
        ),
        (
            Mode::Root,
            0,
            0,
            0o757,
            Some("4242"),
            "writable by all users",
        ),
        (Mode::Root, 4242, 4242, 0o755, None, "owned by uid 4242"),
        (
            Mode::Rootless,
            65534,
            4242,
            0o770,
            None,
            "writable by its group (gid 4242)",
        ),
        (
            Mode::Rootless,
            4242,
            65534,
            0o775,
            None,
            "owned by uid 4242",
        ),
    ] {
        let parent = TempDir::new("socket-dir");
        let dir = parent.path().join("run");
        std::fs::create_dir(&dir).unwrap();
        chown(&dir, owner, group);
        set_mode(&dir, bits);
        let socket = dir.join("brig.sock");
        let mut args = vec!["serve", "--socket", socket.to_str().unwrap()];
        if let Some(group) = socket_group {
            args.extend(["--socket-group", group]);
        }
        let output = run(mode, &args);
        let message = assert_one_line_error(
            &output,
            &[
                &format!("directory {} ", dir.display()),
                needle,
                "who could replace the socket",
            ],
        );
        assert!(
            message.contains(&format!(" {}", dir.display())),
            "{message}"
        );
        assert!(left_in(&dir).is_empty(), "{:?}", left_in(&dir));
    }
    // The same directory, made safe by the sticky bit (as /tmp), is accepted.
    let parent = TempDir::new("socket-dir");
    set_mode(parent.path(), 0o1777);
    let server = Server::start_at(
        Mode::Rootless,
        &parent.path().join("brig.sock"),
        &["--pool", "0"],
    );
    assert_eq!(left_in(parent.path()), ["brig.sock"]);
    drop(server);
}

/// The old race: the server bound its socket, then chowned and chmodded it by path. An
/// attacker who could write the directory renamed the fresh socket away and put a
/// symlink to a root-only file in its place in between: the server (root) gave the
/// file to the --socket-group, mode 0660. The window is made wide here (strace holds
/// the server for a second after bind) and the attacker (a thread of this test) swaps
/// the path as soon as a socket appears there: the target keeps its owner and mode,
/// because the server never touches the socket by its final path.
#[test]
fn a_symlink_swapped_in_for_the_socket_is_never_followed() {
    use std::os::unix::fs::MetadataExt;
    let secrets = TempDir::new("secrets");
    let target = secrets.file("shadow", "root only\n");
    set_mode(&target, 0o600);
    let dir = TempDir::new("socket-race");
    set_mode(dir.path(), 0o700);
    let socket = dir.path().join("brig.sock");
    let moved = dir.path().join("moved.sock");
    let mut command = std::process::Command::new("strace");
    command
        .args([
            "-qq",
            "-o",
            "/dev/null",
            "-e",
            "inject=bind:delay_exit=1000000",
        ])
        .arg(brig())
        .args(["serve", "--pool", "0", "--socket-group", "4242", "--socket"])
        .arg(&socket)
        .current_dir("/")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped());
    let strace = common::Running::spawn(command);
    let swapped = wait_until(Duration::from_secs(10), || {
        use std::os::unix::fs::FileTypeExt;
        match std::fs::symlink_metadata(&socket) {
            Ok(meta) if meta.file_type().is_socket() => {
                std::fs::rename(&socket, &moved).unwrap();
                std::os::unix::fs::symlink(&target, &socket).unwrap();
                true
            }
            _ => false,
        }
    });
    assert!(swapped, "no socket appeared at {}", socket.display());
    assert!(wait_until(Duration::from_secs(10), || UnixStream::connect(
        &moved
    )
    .is_ok()));
    let meta = std::fs::metadata(&target).unwrap();
    let children = std::fs::read_to_string(format!(
        "/proc/{}/task/{}/children",
        strace.pid(),
        strace.pid()
    ))
    .unwrap();
    let server: u32 = children.split_whitespace().next().unwrap().parse().unwrap();
    kill(server, libc::SIGTERM);
    let output = strace.wait();
    assert_eq!(
        (meta.uid(), meta.gid(), meta.mode() & 0o7777),
        (0, 0, 0o600),
        "the server followed the symlink: {}",
        describe(&output)
    );
    assert!(output.status.success(), "{}", describe(&output));
}

fn a_pooled_run_takes_its_own_time_limit(mode: Mode) {
    let server = Server::start(mode, &["--pool", "1"]);
    assert!(wait_until(
        Duration::from_secs(5),
        || server.status()["ready"] == 1
    ));
    let dir = TempDir::new("time-limit").writable_by_all();
    let report = dir.path().join("verdict.json");
    let output = server.run(
        &["--time-limit", "1s", "--report", report.to_str().unwrap()],
        &["sleep", "30"],
    );
    assert_eq!(code(&output), 124, "{}", describe(&output));
    let verdict = parse_verdict(&std::fs::read_to_string(&report).unwrap());
    assert_eq!(verdict["status"], "timeout", "{verdict}");
    assert_eq!(verdict["limits"]["time_limit_ms"], 1000, "{verdict}");
    assert_eq!(server.status()["pooled_runs"], 1);
}

/// The server's audit line names the client (its uid and pid, SO_PEERCRED) and the
/// program it ran, not the server's own uid and command line: for a pooled run, a jail
/// built for the request and a Python run (warm when its jail is ready); the client's
/// own log names the client's command line.
fn the_audit_logs_name_the_client(mode: Mode) {
    let dir = TempDir::new("audit").writable_by_all();
    let server_log = dir.path().join("server.log");
    // A root server lets uid 65534 in too (its group), so that the server's uid and
    // its client's differ.
    let mut args = vec![
        "--pool",
        "1",
        "--warm-python",
        "1",
        "--audit-log",
        server_log.to_str().unwrap(),
    ];
    if mode == Mode::Root {
        args.extend(["--socket-group", "nogroup"]);
    }
    let server = Server::start(mode, &args);
    let lines = |path: &PathBuf| -> Vec<serde_json::Value> {
        let text =
            std::fs::read_to_string(path).unwrap_or_else(|err| panic!("{}: {err}", path.display()));
        text.lines()
            .map(|line| serde_json::from_str(line).unwrap())
            .collect()
    };
    let runs: &[(&[&str], &[&str], i32)] = &[
        (&[], &["sh", "-c", "exit 5"], 5),
        (&["--tmpfs-size", "8M"], &["sh", "-c", "exit 6"], 6),
        (&[], &["python3", "-c", "raise SystemExit(7)"], 7),
    ];
    let runs_each = runs.len();
    let clients = match mode {
        Mode::Root => vec![Mode::Root, Mode::Rootless],
        Mode::Rootless => vec![Mode::Rootless],
    };
    let runs = clients
        .iter()
        .flat_map(|client| runs.iter().map(move |run| (*client, run)));
    for (at, (client_mode, (options, program, status))) in runs.enumerate() {
        let client_uid = if client_mode == Mode::Root { 0 } else { NOBODY };
        // Each client's own log (the root client's is not the rootless one's to write).
        let client_log = dir.path().join(format!("client-{client_uid}.log"));
        let mut args = vec![
            "run",
            "--server",
            server.socket(),
            "--audit-log",
            client_log.to_str().unwrap(),
        ];
        args.extend_from_slice(options);
        args.push("--");
        args.extend_from_slice(program);
        let mut client = command(client_mode, &args);
        client.stdout(Stdio::piped()).stderr(Stdio::piped());
        let client = Running::spawn(client);
        let pid = client.pid();
        let output = client.wait();
        assert_eq!(code(&output), *status, "{}", describe(&output));
        let (served, client) = (&lines(&server_log)[at], &lines(&client_log)[at % runs_each]);
        assert_eq!(served["uid"], client_uid, "{served}");
        assert_eq!(served["pid"], pid, "{served}");
        assert_eq!(served["argv"], serde_json::json!(program), "{served}");
        assert_eq!(served["peer"]["uid"], client_uid, "{served}");
        assert_eq!(served["peer"]["pid"], pid, "{served}");
        assert_eq!(served["verdict"]["exit_code"], *status, "{served}");
        assert_eq!(served["verdict"], client["verdict"]);
        assert_eq!(served["config_digest"], client["config_digest"]);
        assert_eq!(client["uid"], client_uid, "{client}");
        assert_eq!(client["argv"][1], "run", "{client}");
        assert!(client["peer"].is_null(), "{client}");
    }
}

/// SIGTERM: no new requests; a run that ends within --drain-grace ends normally, one that
/// does not is stopped and its client told so; then the server exits with nothing left, its socket removed.
fn sigterm_drains(mode: Mode) {
    let mut server = Server::start(mode, &["--pool", "2", "--drain-grace", "2s"]);
    let spawn = |program: &[&str]| {
        let mut args = vec!["run", "--server", server.socket(), "--"];
        args.extend_from_slice(program);
        let mut client = command(mode, &args);
        client.stdout(Stdio::piped()).stderr(Stdio::piped());
        Running::spawn(client)
    };
    let short = spawn(&["sh", "-c", "sleep 1; echo finished"]);
    let long = spawn(&["sleep", "60"]);
    assert!(wait_until(
        Duration::from_secs(5),
        || server.status()["running"] == 2
    ));
    let runners = children(server.pid());
    let stopped = server.stop();
    assert!(stopped.status.success(), "{}", describe(&stopped));
    assert!(
        stderr(&stopped).contains("draining"),
        "{}",
        describe(&stopped)
    );
    let short = short.wait();
    assert_eq!(
        (code(&short), stdout(&short)),
        (0, "finished\n".to_string()),
        "{}",
        describe(&short)
    );
    // Stopped at the end of the grace, and told why.
    let long = long.wait();
    assert_one_line_error(&long, &["the server is draining", "--drain-grace"]);
    let gone = |pid: &u32| !std::path::Path::new(&format!("/proc/{pid}")).exists();
    assert!(
        runners.iter().all(gone),
        "runners outlived the server: {runners:?}"
    );
    assert!(!server.socket.exists());
}

/// SIGTERM and a new connection seen in one turn of the server's loop: the drain closes
/// the listener mid-turn, and each runner is still read by its own readiness. (Read by
/// the listener's instead, the server blocked on a busy runner with nothing to say until
/// its run ended, and the drain's grace never came.)
fn a_drain_begun_beside_a_new_connection_keeps_its_grace(mode: Mode) {
    // No pool: the run's runner is the only one the server polls.
    let mut server = Server::start(
        mode,
        &["--pool", "0", "--session-pool", "0", "--drain-grace", "1s"],
    );
    let mut client = command(
        mode,
        &["run", "--server", server.socket(), "--", "sleep", "60"],
    );
    client.stdout(Stdio::piped()).stderr(Stdio::piped());
    let long = Running::spawn(client);
    assert!(wait_until(
        Duration::from_secs(5),
        || server.status()["running"] == 1
    ));
    // Stopped, the server finds both a connection and SIGTERM waiting when it goes on.
    kill(server.pid(), libc::SIGSTOP);
    let _waiting = UnixStream::connect(&server.socket).expect("connect to the server");
    kill(server.pid(), libc::SIGTERM);
    kill(server.pid(), libc::SIGCONT);
    let long = long.wait();
    assert_one_line_error(&long, &["the server is draining", "--drain-grace"]);
    let stopped = server.stop();
    assert!(stopped.status.success(), "{}", describe(&stopped));
}

/// The server's --output-limit holds for its clients' streams too: the program writes
/// into brig's relay, which forwards to the client within the limit, then ends the jail.
fn the_output_limit_holds_in_a_pooled_jail(mode: Mode) {
    let server = Server::start(mode, &["--pool", "1", "--output-limit", "1K"]);
    let output = server.run(&[], &["sh", "-c", "yes | head -c 100000; echo done >&2"]);
    assert_eq!(code(&output), 124, "{}", describe(&output));
    assert_eq!(output.stdout.len(), 1024, "{}", describe(&output));
    let small = server.run(&[], &["sh", "-c", "echo fits"]);
    assert_eq!(stdout(&small), "fits\n", "{}", describe(&small));
    // Capture mode too.
    let body = br#"{"brig":1,"type":"run","stdio":"capture","options":{"command":["sh","-c","yes | head -c 5000"]}}"#;
    let reply = exchange(&server.socket, body, &[]);
    assert_eq!(reply["verdict"]["status"], "output_limit", "{reply}");
    assert_eq!(reply["stdout"].as_str().unwrap().len(), 1024, "{reply}");
    assert_eq!(server.status()["pooled_runs"], 3);
}

/// Started with the soft RLIMIT_NOFILE of a login shell (1,024) under a higher hard
/// limit, the server raises its soft limit to the hard one: about a thousand idle
/// connections no longer exhaust it. Its jails keep their own (1,024 by default).
fn the_server_takes_its_hard_descriptor_limit(mode: Mode) {
    let server = Server::start_under(mode, &["prlimit", "--nofile=1024:4096", "--"], &[]);
    let limits = std::fs::read_to_string(format!("/proc/{}/limits", server.pid())).unwrap();
    let line = limits
        .lines()
        .find(|line| line.starts_with("Max open files"))
        .expect("a Max open files line");
    let values: Vec<&str> = line.split_whitespace().collect();
    assert_eq!(values[3..5], ["4096", "4096"], "{line}");
    let output = server.run(&[], &["sh", "-c", "ulimit -n"]);
    assert_eq!(stdout(&output), "1024\n", "{}", describe(&output));
}

/// `brig run --server` and `brig session` check who listens before they send anything:
/// a socket of another uid would get the caller's stdio descriptors and decide its exit
/// status. Refused with one line and exit 125, the listener got nothing; trusted with
/// BRIG_SERVER_UID, the same listener gets the request and its three descriptors.
fn a_listener_of_another_uid_gets_nothing(mode: Mode) {
    let dir = TempDir::new("fake-listener").writable_by_all();
    let (listener, socket) = fake_listener(&dir, "run.sock");
    let output = run(
        mode,
        &["run", "--server", socket.to_str().unwrap(), "--", "false"],
    );
    assert_eq!(code(&output), 125, "{}", describe(&output));
    let message = stderr(&output);
    assert_eq!(message.lines().count(), 1, "{message}");
    assert!(
        message.contains("uid 4242") && message.contains("BRIG_SERVER_UID=4242"),
        "{message}"
    );
    assert_eq!(stdout(&listener.wait()), "0 0\n");

    let (listener, socket) = fake_listener(&dir, "session.sock");
    let output = run(
        mode,
        &[
            "session",
            "ls",
            "--server",
            socket.to_str().unwrap(),
            "--session",
            "s1",
        ],
    );
    assert_eq!(code(&output), 125, "{}", describe(&output));
    assert!(
        stderr(&output).contains("uid 4242"),
        "{}",
        describe(&output)
    );
    assert_eq!(stdout(&listener.wait()), "0 0\n");

    // The control: told to trust uid 4242, the client sends its request and descriptors.
    let (listener, socket) = fake_listener(&dir, "trusted.sock");
    let mut command = common::command(
        mode,
        &["run", "--server", socket.to_str().unwrap(), "--", "false"],
    );
    command.env("BRIG_SERVER_UID", "4242");
    let output = common::output_of(command);
    assert_eq!(code(&output), 125, "{}", describe(&output));
    let received = stdout(&listener.wait());
    assert!(received.ends_with(" 3\n"), "{received}");
}
