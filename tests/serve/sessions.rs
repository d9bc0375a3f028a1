//! Sessions of `brig serve`, for real, as root and rootless: a jail that lives between
//! requests. State persists across cells (variables, imports, files); two sessions are
//! isolated; idle and total timeouts destroy a session and everything of it; runaway cells
//! (an endless loop, a fork bomb, a memory bomb, an output flood) are stopped and
//! reported while the session goes on; the workspace's paths cannot lead out; closed,
//! unknown and foreign sessions are clear errors; a killed server leaves nothing.

use crate::common;

use common::limits::jail_cgroups_of;
use common::serve::{
    Server, ask, brig_lines, close_session as close, create_session as create, exchange, runners,
};
use common::*;
use serde_json::{Value, json};
use std::path::PathBuf;
use std::time::Duration;

both_modes!(
    state_persists_across_cells,
    sessions_are_isolated_from_each_other,
    commands_run_in_the_session,
    idle_and_total_timeouts_end_the_session,
    an_endless_cell_is_interrupted_and_the_state_kept,
    a_fork_bomb_cell_is_stopped_and_the_session_goes_on,
    a_memory_bomb_cell_is_stopped_and_the_session_goes_on,
    an_output_flood_is_cut_and_the_session_goes_on,
    workspace_paths_cannot_lead_out,
    closed_and_unknown_sessions_are_clear_errors,
    a_killed_server_leaves_no_session_behind,
    the_command_line_drives_a_session,
    malformed_session_requests_leave_the_server_up,
    each_exec_has_an_audit_line_with_the_session,
    a_pooled_session_is_fresh,
    node_cells_keep_their_state,
    a_session_survives_its_client,
    sigterm_ends_the_open_sessions,
    names_from_the_jail_are_escaped_on_the_terminal,
    a_session_and_its_execs_are_held_to_the_server_s_limits,
    a_forged_reply_does_not_end_a_running_cell,
    replies_that_break_the_protocol_cost_the_interpreter,
    an_undumpable_interpreter_cannot_hide_from_brig,
    the_session_timeout_ends_an_endless_cell_its_client_waits_for,
    the_session_timeout_holds_against_a_client_that_never_reads,
    a_drain_answers_every_client_within_its_grace,
);

fn cell(server: &Server, id: &str, code: &str) -> Value {
    cell_with(server, id, code, json!({}))
}

fn cell_with(server: &Server, id: &str, code: &str, extra: Value) -> Value {
    let mut message = json!({"type": "session_exec", "session": id, "code": code});
    for (key, value) in extra.as_object().into_iter().flatten() {
        message[key] = value.clone();
    }
    let reply = ask(server, message);
    assert_eq!(reply["type"], "exec", "{reply}");
    reply
}

fn command(server: &Server, id: &str, argv: &[&str], extra: Value) -> Value {
    let mut message = json!({"type": "session_exec", "session": id, "command": argv});
    for (key, value) in extra.as_object().into_iter().flatten() {
        message[key] = value.clone();
    }
    let reply = ask(server, message);
    assert_eq!(reply["type"], "exec", "{reply}");
    reply
}

fn put(server: &Server, id: &str, path: &str, data: &[u8]) -> Value {
    use base64::Engine;
    let data = base64::engine::general_purpose::STANDARD.encode(data);
    ask(
        server,
        json!({"type": "session_put", "session": id, "path": path, "data": data}),
    )
}

fn get(server: &Server, id: &str, path: &str) -> Value {
    ask(
        server,
        json!({"type": "session_get", "session": id, "path": path}),
    )
}

fn decoded(reply: &Value) -> Vec<u8> {
    use base64::Engine;
    base64::engine::general_purpose::STANDARD
        .decode(
            reply["data"]
                .as_str()
                .unwrap_or_else(|| panic!("no data: {reply}")),
        )
        .unwrap()
}

/// An error saying the session is gone: unknown by now, or ended for `why`.
fn assert_gone(reply: &Value, why: &str) {
    assert_error(reply, "");
    let message = reply["message"].as_str().unwrap();
    assert!(
        message.contains("no session") || message.contains(why),
        "neither \"no session\" nor {why:?} in {message:?}"
    );
}

fn assert_error(reply: &Value, needle: &str) {
    assert_eq!(reply["type"], "error", "{reply}");
    let message = reply["message"].as_str().unwrap();
    assert!(message.contains(needle), "{needle:?} not in {message:?}");
    assert!(!message.contains('\n'), "{message:?}");
    assert_eq!(reply["exit_code"], 125, "{reply}");
}

fn marker(label: &str) -> String {
    format!("BRIG_TEST_MARKER={}", unique(label))
}

fn state_persists_across_cells(mode: Mode) {
    let server = Server::start(mode, &["--pool", "0"]);
    let marker = marker("persists");
    let id = create(&server, json!({"options": {"env": [marker]}}));
    let runner = runners(&server);
    let first = cell(&server, &id, "import statistics\nx = 41\nrows = [1, 2, 3]");
    assert_eq!(first["verdict"]["status"], "ok", "{first}");
    assert_eq!(first["result"], Value::Null, "{first}");
    let second = cell(&server, &id, "print('mean', statistics.mean(rows))\nx + 1");
    assert_eq!(second["result"], "42", "{second}");
    assert_eq!(second["stdout"], "mean 2\n", "{second}");
    assert_eq!(second["state_lost"], false);
    assert_eq!(second["verdict"]["session"], id.as_str());
    // Files: written by a cell, read back by get; put, read by a cell.
    cell(&server, &id, "open('made.txt', 'w').write('by a cell')");
    assert_eq!(decoded(&get(&server, &id, "made.txt")), b"by a cell");
    let reply = put(&server, &id, "data/in.csv", b"a,b\n1,2\n3,4\n");
    assert_eq!(reply["size"], 12, "{reply}");
    let read = cell(
        &server,
        &id,
        "import csv\nsum(int(r['b']) for r in csv.DictReader(open('data/in.csv')))",
    );
    assert_eq!(read["result"], "6", "{read}");
    // An exception is the cell's error; the state survives it.
    let failed = cell(&server, &id, "def f():\n    return 1 / 0\nf()");
    assert_eq!(failed["verdict"]["status"], "nonzero_exit", "{failed}");
    assert_eq!(failed["verdict"]["exit_code"], 1, "{failed}");
    assert_eq!(failed["error"]["type"], "ZeroDivisionError", "{failed}");
    let traceback = failed["error"]["traceback"].as_str().unwrap();
    assert!(traceback.contains("return 1 / 0"), "{traceback}");
    assert!(!traceback.contains("brig-session"), "{traceback}");
    assert_eq!(cell(&server, &id, "x")["result"], "41");
    // A cell larger than a socket's buffer reaches the interpreter whole.
    let large = format!("y = x\n#{}\ny + 1", "#".repeat(600 << 10));
    assert_eq!(cell(&server, &id, &large)["result"], "42");
    command(&server, &id, &["sh", "-c", "sleep 300 &"], json!({}));
    // Closed: nothing of the session is left once the answer has come.
    close(&server, &id);
    assert!(
        processes_with_environ(&marker).is_empty(),
        "a process outlived close"
    );
    for runner in runner {
        assert!(
            jail_cgroups_of(runner).is_empty(),
            "cgroups left by {runner}"
        );
    }
}

fn sessions_are_isolated_from_each_other(mode: Mode) {
    let server = Server::start(mode, &["--pool", "0"]);
    let (one, two) = (create(&server, json!({})), create(&server, json!({})));
    cell(
        &server,
        &one,
        "secret = 'one'\nopen('/tmp/one', 'w').write('1')\nopen('mine', 'w').write('1')",
    );
    let sleeper = command(
        &server,
        &one,
        &["sh", "-c", "sleep 300 > /dev/null 2>&1 & echo started"],
        json!({}),
    );
    assert_eq!(sleeper["stdout"], "started\n", "{sleeper}");
    let seen = cell(
        &server,
        &two,
        "import os\n[ 'secret' in globals(), os.path.exists('/tmp/one'), os.path.exists('mine'), sorted(p for p in os.listdir('/proc') if p.isdigit() and open(f'/proc/{p}/comm').read().strip() == 'sleep') ]",
    );
    assert_eq!(seen["result"], "[False, False, False, []]", "{seen}");
    assert_error(&get(&server, &two, "mine"), "no such file");
    // The sleeper lives on in its own session, between requests.
    let ps = command(
        &server,
        &one,
        &["sh", "-c", "ps -eo comm | grep -c '^sleep$'"],
        json!({}),
    );
    assert_eq!(ps["stdout"], "1\n", "{ps}");
    close(&server, &one);
    close(&server, &two);
}

fn commands_run_in_the_session(mode: Mode) {
    let server = Server::start(mode, &["--pool", "0"]);
    let id = create(&server, json!({}));
    let reply = command(
        &server,
        &id,
        &[
            "sh",
            "-c",
            "read line; echo got $line; echo $GREETING; pwd; id -un; echo oops >&2; exit 3",
        ],
        json!({"stdin": "hello\n", "env": ["GREETING=hi"]}),
    );
    assert_eq!(
        reply["stdout"], "got hello\nhi\n/home/sandbox\nsandbox\n",
        "{reply}"
    );
    assert_eq!(reply["stderr"], "oops\n", "{reply}");
    assert_eq!(reply["verdict"]["status"], "nonzero_exit");
    assert_eq!(reply["verdict"]["exit_code"], 3);
    assert_eq!(reply["verdict"]["brig_exit_code"], 3);
    let missing = command(&server, &id, &["no-such-program"], json!({}));
    assert_eq!(missing["verdict"]["status"], "setup_error", "{missing}");
    assert_eq!(missing["verdict"]["brig_exit_code"], 127, "{missing}");
    let slow = command(&server, &id, &["sleep", "30"], json!({"time_limit": "1s"}));
    assert_eq!(slow["verdict"]["status"], "timeout", "{slow}");
    assert_eq!(slow["verdict"]["brig_exit_code"], 124, "{slow}");
    // The jail's restrictions hold for every program of the session.
    let probe = command(
        &server,
        &id,
        &[
            "sh",
            "-c",
            "grep -E '^(CapEff|NoNewPrivs|Seccomp):' /proc/self/status; cat /etc/shadow",
        ],
        json!({"chdir": "/tmp"}),
    );
    assert_eq!(
        probe["stdout"], "CapEff:\t0000000000000000\nNoNewPrivs:\t1\nSeccomp:\t2\n",
        "{probe}"
    );
    assert!(
        probe["stderr"].as_str().unwrap().contains("No such file"),
        "{probe}"
    );
    close(&server, &id);
}

fn idle_and_total_timeouts_end_the_session(mode: Mode) {
    let server = Server::start(mode, &["--pool", "0"]);
    let idle_marker = marker("idle");
    let idle = create(
        &server,
        // Long enough that a loaded machine still sees it alive after its command, short
        // enough that it has ended before the busy session below (3 s) has.
        json!({"idle_timeout": "2s", "options": {"env": [idle_marker]}}),
    );
    command(&server, &idle, &["sh", "-c", "sleep 300 &"], json!({}));
    let runner_of_idle = runners(&server);
    assert!(!processes_with_environ(&idle_marker).is_empty());
    let total_marker = marker("total");
    let total = create(
        &server,
        json!({"session_timeout": "3s", "options": {"env": [total_marker]}}),
    );
    // Busy all along, it still ends at its session_timeout.
    let started = std::time::Instant::now();
    let mut last = Value::Null;
    while started.elapsed() < Duration::from_secs(8) {
        last = ask(
            &server,
            json!({"type": "session_exec", "session": total, "code": "1"}),
        );
        if last["type"] == "error" {
            break;
        }
        std::thread::sleep(Duration::from_millis(200));
    }
    // Gone: forgotten by the server ("no session"), or, while its runner is still
    // ending, said to have ended and why.
    assert_gone(&last, "it reached its session_timeout");
    assert_gone(
        &cell_or_error(&server, &idle),
        "it was idle for its idle_timeout",
    );
    for marker in [&idle_marker, &total_marker] {
        assert!(
            wait_until(Duration::from_secs(5), || processes_with_environ(marker)
                .is_empty()),
            "a session's processes outlived it"
        );
    }
    for runner in runner_of_idle {
        assert!(
            jail_cgroups_of(runner).is_empty(),
            "cgroups left by {runner}"
        );
    }
    // The server counts a session gone once it has reaped its runner.
    let closed = || server.status()["sessions"] == 0;
    assert!(
        wait_until(Duration::from_secs(5), closed),
        "{}",
        server.status()
    );
    // Longer than the server allows: refused.
    let reply = ask(
        &server,
        json!({"type": "session_create", "idle_timeout": "2h"}),
    );
    assert_error(&reply, "longer than this server allows");
}

fn cell_or_error(server: &Server, id: &str) -> Value {
    ask(
        server,
        json!({"type": "session_exec", "session": id, "code": "1"}),
    )
}

fn an_endless_cell_is_interrupted_and_the_state_kept(mode: Mode) {
    let server = Server::start(mode, &["--pool", "0"]);
    let id = create(&server, json!({}));
    cell(&server, &id, "kept = 'yes'");
    let endless = cell_with(
        &server,
        &id,
        "while True:\n    pass",
        json!({"time_limit": "1s"}),
    );
    assert_eq!(endless["verdict"]["status"], "timeout", "{endless}");
    assert_eq!(endless["error"]["type"], "KeyboardInterrupt", "{endless}");
    assert_eq!(endless["state_lost"], false, "{endless}");
    assert_eq!(cell(&server, &id, "kept")["result"], "'yes'");
    // A cell that swallows the interrupt: the interpreter is restarted, the state lost.
    let stubborn = cell_with(
        &server,
        &id,
        "import time\nwhile True:\n    try:\n        time.sleep(10)\n    except KeyboardInterrupt:\n        pass",
        json!({"time_limit": "1s"}),
    );
    assert_eq!(stubborn["verdict"]["status"], "timeout", "{stubborn}");
    assert_eq!(stubborn["state_lost"], true, "{stubborn}");
    let after = cell(&server, &id, "'kept' in globals()");
    assert_eq!(after["result"], "False", "{after}");
    close(&server, &id);
}

fn a_fork_bomb_cell_is_stopped_and_the_session_goes_on(mode: Mode) {
    let server = Server::start(mode, &["--pool", "0"]);
    // Rootless here, without a cgroup, the jail's processes are bounded by RLIMIT_NPROC.
    let options = match mode {
        Mode::Root => json!({"options": {"pids": 64}}),
        Mode::Rootless => json!({}),
    };
    let id = create(&server, options);
    cell(&server, &id, "kept = 1");
    let bomb = cell_with(
        &server,
        &id,
        "import os\nwhile True:\n    try:\n        os.fork()\n    except OSError:\n        pass",
        json!({"time_limit": "2s"}),
    );
    assert_eq!(bomb["verdict"]["status"], "timeout", "{bomb}");
    let after = cell(&server, &id, "kept + 1");
    assert_eq!(after["result"], "2", "{after}");
    // Only init, the interpreter and this command are left: the bomb's processes were
    // killed, and reaped (the interpreter's children before its next cell, the orphans by
    // init, which on a loaded machine may take a moment: looked at again until then).
    let ps_now = || command(&server, &id, &["ps", "-eo", "stat=,comm="], json!({}));
    let only_ours = |ps: &Value| {
        let left: Vec<&str> = ps["stdout"]
            .as_str()
            .unwrap()
            .lines()
            .map(str::trim)
            .collect();
        left.len() == 3 && left[0].ends_with("brig-init") && left[1].ends_with("python3")
    };
    let mut ps = ps_now();
    let give_up = std::time::Instant::now() + Duration::from_secs(20);
    while !only_ours(&ps) && std::time::Instant::now() < give_up {
        std::thread::sleep(Duration::from_millis(200));
        ps = ps_now();
    }
    assert!(only_ours(&ps), "{ps}");
    close(&server, &id);
}

fn a_memory_bomb_cell_is_stopped_and_the_session_goes_on(mode: Mode) {
    let server = Server::start(mode, &["--pool", "0"]);
    let bomb = "chunks = []\nwhile True:\n    chunks.append(bytearray(16 << 20))";
    if mode == Mode::Root {
        // A cgroup limits the session: the kernel's OOM killer takes the interpreter.
        let id = create(&server, json!({"options": {"memory": "256M"}}));
        cell(&server, &id, "kept = 1");
        let reply = cell(&server, &id, bomb);
        assert_eq!(reply["verdict"]["status"], "oom", "{reply}");
        assert_eq!(reply["state_lost"], true, "{reply}");
        assert_eq!(reply["error"]["type"], "InterpreterDied", "{reply}");
        let after = cell(&server, &id, "'kept' in globals(), 40 + 2");
        assert_eq!(after["result"], "(False, 42)", "{after}");
        close(&server, &id);
    } else {
        // Rootless here has no cgroup: an address-space limit stops the bomb.
        let id = create(&server, json!({"options": {"rlimit": ["as=1G"]}}));
        cell(&server, &id, "kept = 1");
        let reply = cell(&server, &id, bomb);
        assert_eq!(reply["error"]["type"], "MemoryError", "{reply}");
        assert_eq!(reply["state_lost"], false, "{reply}");
        let after = cell(&server, &id, "del chunks\nkept + 1");
        assert_eq!(after["result"], "2", "{after}");
        close(&server, &id);
    }
}

fn an_output_flood_is_cut_and_the_session_goes_on(mode: Mode) {
    let server = Server::start(mode, &["--pool", "0"]);
    let id = create(&server, json!({}));
    cell(&server, &id, "kept = 1");
    let flood = cell_with(
        &server,
        &id,
        "while True:\n    print('x' * 1000)",
        json!({"output_limit": "64K"}),
    );
    assert_eq!(flood["verdict"]["status"], "output_limit", "{flood}");
    assert_eq!(
        flood["stdout"].as_str().unwrap().len(),
        64 << 10,
        "kept up to the limit"
    );
    assert_eq!(flood["verdict"]["output_truncated"], true, "{flood}");
    assert_eq!(cell(&server, &id, "kept")["result"], "1");
    let command_flood = command(&server, &id, &["yes"], json!({"output_limit": "64K"}));
    assert_eq!(
        command_flood["verdict"]["status"], "output_limit",
        "{command_flood}"
    );
    assert_eq!(command_flood["stdout"].as_str().unwrap().len(), 64 << 10);
    close(&server, &id);
}

fn workspace_paths_cannot_lead_out(mode: Mode) {
    let server = Server::start(mode, &["--pool", "0"]);
    let id = create(&server, json!({}));
    // The jail plants symlinks leading out, and a FIFO.
    command(
        &server,
        &id,
        &[
            "sh",
            "-c",
            "ln -s /etc/passwd abs; ln -s ../../../etc up; mkfifo pipe; mkdir d; ln -s .. d/parent",
        ],
        json!({}),
    );
    for path in [
        "../x",
        "/etc/passwd",
        "abs",
        "up/passwd",
        "d/parent/abs",
        "d/../../x",
    ] {
        let got = get(&server, &id, path);
        assert_eq!(got["type"], "error", "{path}: {got}");
        let put_reply = put(&server, &id, path, b"overwritten");
        assert_eq!(put_reply["type"], "error", "{path}: {put_reply}");
    }
    assert_error(&get(&server, &id, "abs"), "leads out of the workspace");
    assert_error(&get(&server, &id, "../x"), "`..`");
    assert_error(&get(&server, &id, "/etc/passwd"), "absolute");
    assert_error(&get(&server, &id, "pipe"), "not a regular file");
    assert_error(&put(&server, &id, "pipe", b"x"), "not a regular file");
    // Nothing outside changed; the workspace works.
    let passwd = std::fs::read_to_string("/etc/passwd").unwrap();
    assert!(!passwd.contains("overwritten"));
    assert_eq!(put(&server, &id, "d/ok.txt", b"fine")["type"], "put");
    assert_eq!(decoded(&get(&server, &id, "d/parent/d/ok.txt")), b"fine");
    let listed = ask(
        &server,
        json!({"type": "session_ls", "session": id, "path": "."}),
    );
    let names: Vec<&str> = listed["entries"]
        .as_array()
        .unwrap()
        .iter()
        .map(|entry| entry["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["abs", "d", "pipe", "up"], "{listed}");
    // A full workspace is named.
    let small = create(&server, json!({"workspace_size": "1M"}));
    let chunk = vec![b'x'; 512 << 10];
    let mut full = Value::Null;
    for index in 0..4 {
        full = put(&server, &small, &format!("f{index}"), &chunk);
        if full["type"] == "error" {
            break;
        }
    }
    assert_error(&full, "workspace is full");
    close(&server, &id);
    close(&server, &small);
    // Larger than the server's: the request's field, the jail option it sets and the
    // server's option to raise are named.
    let reply = ask(
        &server,
        json!({"type": "session_create", "workspace_size": "1G"}),
    );
    assert_error(
        &reply,
        "workspace_size 1G (the jail's --home-size): looser than this server's 64M; the client may ask for a workspace_size of at most 64M, or the server's operator raise its --home-size",
    );
}

fn closed_and_unknown_sessions_are_clear_errors(mode: Mode) {
    let server = Server::start(mode, &["--pool", "0"]);
    let id = create(&server, json!({}));
    close(&server, &id);
    for message in [
        json!({"type": "session_exec", "session": id, "code": "1"}),
        json!({"type": "session_ls", "session": id}),
        json!({"type": "session_close", "session": id}),
        json!({"type": "session_get", "session": "0123456789abcdef0123456789abcdef", "path": "x"}),
    ] {
        assert_error(&ask(&server, message), "no session");
    }
    // Another user may not use a session (root may, and created this one).
    if mode == Mode::Root {
        let group_server = Server::start(mode, &["--pool", "0", "--socket-group", "65534"]);
        let id = create(&group_server, json!({}));
        let request = json!({"brig": 1, "type": "session_exec", "session": id, "code": "1"});
        let output = common::serve::exchange_as_nobody(group_server.socket(), &request);
        assert!(
            stdout(&output).contains("belongs to another user"),
            "{}",
            describe(&output)
        );
        close(&group_server, &id);
    }
}

/// A cell that leaves a daemon behind: setsid and a double fork, the grandchild (named
/// `name`, reparented to the jail's init) sleeping on.
fn daemon_cell(name: &str) -> String {
    format!(
        "import os\nif os.fork() == 0:\n    os.setsid()\n    if os.fork() == 0:\n        os.execvp('sleep', ['{name}', '300'])\n    os._exit(0)\nos.wait()\n"
    )
}

/// Whether `pid` is a live process (a zombie waiting to be reaped is not).
fn alive(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|stat| {
        stat.rsplit_once(')')
            .and_then(|(_, rest)| rest.split_whitespace().next())
            .is_some_and(|state| state != "Z" && state != "X")
    })
}

/// Every process below `pid` now: the children of each of its threads, recursively.
fn descendants(pid: u32) -> Vec<u32> {
    let mut found = Vec::new();
    let mut todo = vec![pid];
    while let Some(pid) = todo.pop() {
        let tasks = std::fs::read_dir(format!("/proc/{pid}/task"));
        for task in tasks.into_iter().flatten().flatten() {
            let children =
                std::fs::read_to_string(task.path().join("children")).unwrap_or_default();
            for child in children
                .split_whitespace()
                .filter_map(|child| child.parse().ok())
            {
                found.push(child);
                todo.push(child);
            }
        }
    }
    found
}

/// Sends a session request on a connection of its own and leaves it open.
fn send_request(server: &Server, mut message: Value) -> std::os::unix::net::UnixStream {
    message["brig"] = json!(1);
    let stream = std::os::unix::net::UnixStream::connect(&server.socket).unwrap();
    common::serve::send_frame(&stream, message.to_string().as_bytes(), &[]);
    stream
}

/// The reply on `stream`, if one comes within `timeout`.
fn reply_within(stream: &std::os::unix::net::UnixStream, timeout: Duration) -> Option<Value> {
    use std::io::Read;
    let mut stream = stream;
    stream.set_read_timeout(Some(timeout)).ok()?;
    let mut length = [0u8; 4];
    stream.read_exact(&mut length).ok()?;
    let mut body = vec![0u8; u32::from_be_bytes(length) as usize];
    stream.read_exact(&mut body).ok()?;
    serde_json::from_slice(&body).ok()
}

/// SIGKILL while a cell runs: the runner, the jail's init, the interpreter, the cell's
/// command and a daemon it left (setsid, double fork) all die with the server at once,
/// and the next server removes the jail's cgroups before it answers.
fn a_killed_server_leaves_no_session_behind(mode: Mode) {
    let mut server = Server::start(mode, &["--pool", "0"]);
    let marker = marker("killed");
    let daemon = unique("brig-test-daemon");
    let id = create(&server, json!({"options": {"env": [marker]}}));
    cell(&server, &id, &daemon_cell(&daemon));
    command(&server, &id, &["sh", "-c", "sleep 300 &"], json!({}));
    assert!(
        wait_until(Duration::from_secs(5), || processes_named(&daemon).len()
            == 1),
        "the daemon does not run"
    );
    // A cell that runs on, its client waiting for it.
    let waiting = send_request(
        &server,
        json!({"type": "session_exec", "session": id, "code": "while True:\n    pass"}),
    );
    std::thread::sleep(Duration::from_millis(500));
    let tree = descendants(server.pid());
    // The runner, init, the interpreter, the daemon and the command's sleep at least.
    assert!(tree.len() >= 5, "{tree:?}");
    assert!(tree.contains(&processes_named(&daemon)[0]), "{tree:?}");
    let cgroups: Vec<PathBuf> = tree.iter().flat_map(|pid| jail_cgroups_of(*pid)).collect();
    // Root has cgroups here (rootless on a hybrid host has none).
    assert!(mode == Mode::Rootless || !cgroups.is_empty(), "{tree:?}");
    let socket: PathBuf = server.socket.clone();
    let mut process = server.running.take().expect("running");
    kill(process.pid(), libc::SIGKILL);
    // Its status only: its stderr stays open as long as anything of it lives.
    let _ = process.child.wait();
    let left = || {
        tree.iter()
            .copied()
            .filter(|pid| alive(*pid))
            .collect::<Vec<_>>()
    };
    assert!(
        wait_until(Duration::from_secs(5), || left().is_empty()),
        "processes of the killed server live on: {:?}",
        left()
    );
    assert!(processes_with_environ(&marker).is_empty());
    assert!(processes_named(&daemon).is_empty());
    // The cell's client is not left waiting: its connection closed.
    assert!(reply_within(&waiting, Duration::from_secs(5)).is_none());
    let again = Server::start_at(mode, &socket, &["--pool", "0"]);
    // Removed before the new server listened: at once, not eventually.
    let left: Vec<&PathBuf> = cgroups.iter().filter(|dir| dir.exists()).collect();
    assert!(
        left.is_empty(),
        "the killed server's cgroups are left: {left:?}"
    );
    assert_error(&cell_or_error(&again, &id), "no session");
    let fresh = create(&again, json!({}));
    close(&again, &fresh);
}

fn the_command_line_drives_a_session(mode: Mode) {
    let server = Server::start(mode, &["--pool", "0"]);
    let dir = TempDir::new("session-cli").writable_by_all();
    let at = |args: &[&str], id: &str| {
        let mut all = vec!["session"];
        all.extend_from_slice(&args[..1]);
        all.extend_from_slice(&["--server", server.socket(), "--session", id]);
        all.extend_from_slice(&args[1..]);
        run(mode, &all)
    };
    let created = run(mode, &["session", "create", "--server", server.socket()]);
    let id = assert_success(&created).trim().to_string();
    assert_eq!(id.len(), 32, "{}", describe(&created));
    let cell_file = dir.file("cell.py", "import math\nroot = math.sqrt(81)\nroot");
    let output = at(&["exec", "--code", cell_file.to_str().unwrap()], &id);
    assert_eq!(assert_success(&output), "9.0\n");
    let raising = dir.file("raise.py", "root + undefined");
    let output = at(&["exec", "--code", raising.to_str().unwrap()], &id);
    assert_eq!(code(&output), 1, "{}", describe(&output));
    assert!(
        stderr(&output).contains("NameError"),
        "{}",
        describe(&output)
    );
    let local = dir.file("in.txt", "from the host\n");
    assert_success(&at(&["put", local.to_str().unwrap(), "sub/in.txt"], &id));
    let output = at(&["exec", "--", "cat", "sub/in.txt"], &id);
    assert_eq!(assert_success(&output), "from the host\n");
    let output = at(&["ls", "sub"], &id);
    assert!(
        assert_success(&output).contains("in.txt"),
        "{}",
        describe(&output)
    );
    let back = dir.path().join("back.txt");
    assert_success(&at(&["get", "sub/in.txt", back.to_str().unwrap()], &id));
    assert_eq!(std::fs::read_to_string(&back).unwrap(), "from the host\n");
    let output = at(&["exec", "--", "sh", "-c", "exit 7"], &id);
    assert_eq!(code(&output), 7, "{}", describe(&output));
    let output = at(&["exec", "--time-limit", "1s", "--", "sleep", "30"], &id);
    assert_eq!(code(&output), 124, "{}", describe(&output));
    // Explained as `brig run` explains it.
    assert_eq!(
        brig_lines(&output),
        ["brig: time limit of 1s reached; the jail was killed"],
        "{}",
        describe(&output)
    );
    let output = at(&["get", "../etc/passwd"], &id);
    assert_one_line_error(&output, &["`..`"]);
    assert_eq!(code(&output), 125);
    let listed = run(mode, &["session", "list", "--server", server.socket()]);
    assert!(
        assert_success(&listed).contains(&id),
        "{}",
        describe(&listed)
    );
    assert_success(&at(&["close"], &id));
    let output = at(&["exec", "--", "true"], &id);
    assert_one_line_error(&output, &["no session"]);
    assert_eq!(code(&output), 125);
}

fn malformed_session_requests_leave_the_server_up(mode: Mode) {
    let server = Server::start(mode, &["--pool", "0"]);
    let id = create(&server, json!({}));
    let null = std::fs::File::open("/dev/null").unwrap();
    let fd = std::os::fd::AsRawFd::as_raw_fd(&null);
    let with_fds = exchange(
        &server.socket,
        json!({"brig": 1, "type": "session_ls", "session": id})
            .to_string()
            .as_bytes(),
        &[fd, fd, fd],
    );
    assert_error(&with_fds, "only a run request");
    for (message, needle) in [
        (
            json!({"type": "session_exec", "session": id}),
            "either \"command\"",
        ),
        (
            json!({"type": "session_exec", "session": id, "code": "1", "command": ["true"]}),
            "either",
        ),
        (
            json!({"type": "session_put", "session": id, "path": "x", "data": "%%%"}),
            "base64",
        ),
        (
            json!({"type": "session_put", "session": id, "path": "x"}),
            "malformed",
        ),
        (
            json!({"type": "session_exec", "session": id, "code": "1", "time_limit": "soon"}),
            "malformed",
        ),
        (
            json!({"type": "session_exec", "session": id, "code": "1", "language": "cobol"}),
            "malformed",
        ),
        (
            json!({"type": "session_create", "options": {"command": ["true"]}}),
            "command",
        ),
        (
            json!({"type": "session_create", "options": {"memory": "100T"}}),
            "--memory",
        ),
        (
            json!({"type": "session_create", "options": {"net": "host"}}),
            "--net host",
        ),
        (
            json!({"type": "session_create", "session_timeout": "0s"}),
            "longer than 0",
        ),
    ] {
        assert_error(&ask(&server, message.clone()), needle);
    }
    let big = "A".repeat(900 << 10);
    assert_error(
        &ask(
            &server,
            json!({"type": "session_put", "session": id, "path": "x", "data": big}),
        ),
        "append",
    );
    // Still serving, the session too.
    assert_eq!(cell(&server, &id, "6 * 7")["result"], "42");
    close(&server, &id);
}

fn each_exec_has_an_audit_line_with_the_session(mode: Mode) {
    let dir = TempDir::new("session-audit").writable_by_all();
    let log = dir.path().join("audit.log");
    let server = Server::start(mode, &["--pool", "0", "--audit-log", log.to_str().unwrap()]);
    let id = create(&server, json!({}));
    cell(&server, &id, "1");
    command(&server, &id, &["true"], json!({}));
    put(&server, &id, "f", b"no audit line for files");
    close(&server, &id);
    let text = std::fs::read_to_string(&log).unwrap();
    let lines: Vec<Value> = text
        .lines()
        .map(|line| serde_json::from_str(line).unwrap())
        .collect();
    assert_eq!(lines.len(), 2, "{text}");
    for line in &lines {
        assert_eq!(line["verdict"]["session"], id.as_str(), "{line}");
        assert_eq!(line["peer"]["uid"], 0, "{line}");
        // The client (this test, root), not the server, and what it ran.
        assert_eq!(line["uid"], 0, "{line}");
        assert_eq!(line["pid"], std::process::id(), "{line}");
    }
    assert_eq!(lines[0]["verdict"]["language"], "python");
    assert_eq!(lines[0]["argv"], json!(["python", "1"]));
    assert_eq!(lines[1]["argv"], json!(["true"]));
}

/// A session from the pool starts with its interpreter running and nothing of another
/// session's: never reused.
fn a_pooled_session_is_fresh(mode: Mode) {
    let server = Server::start(mode, &["--pool", "0", "--session-pool", "1"]);
    assert!(wait_until(
        Duration::from_secs(20),
        || server.status()["session_ready"] == 1
    ));
    let first = create(&server, json!({}));
    cell(
        &server,
        &first,
        "open('/tmp/left', 'w').write('x')\nleft = 1",
    );
    close(&server, &first);
    assert!(wait_until(
        Duration::from_secs(20),
        || server.status()["session_ready"] == 1
    ));
    let second = create(&server, json!({}));
    assert_ne!(first, second);
    let seen = cell(
        &server,
        &second,
        "import os\n('left' in globals(), os.path.exists('/tmp/left'))",
    );
    assert_eq!(seen["result"], "(False, False)", "{seen}");
    close(&server, &second);
}

fn node_cells_keep_their_state(mode: Mode) {
    if !require_program("node", "apt install nodejs") {
        return;
    }
    let server = Server::start(mode, &["--pool", "0"]);
    let id = create(&server, json!({}));
    let node = json!({"language": "node"});
    let first = cell_with(
        &server,
        &id,
        "const rows = [1, 2, 3]; let total = 0",
        node.clone(),
    );
    assert_eq!(first["verdict"]["status"], "ok", "{first}");
    let second = cell_with(
        &server,
        &id,
        "for (const r of rows) total += r; console.log('sum', total); total * 2",
        node.clone(),
    );
    assert_eq!(second["stdout"], "sum 6\n", "{second}");
    assert_eq!(second["result"], "12", "{second}");
    assert_eq!(second["verdict"]["language"], "node", "{second}");
    let failed = cell_with(&server, &id, "null.x", node.clone());
    assert_eq!(failed["error"]["type"], "TypeError", "{failed}");
    assert_eq!(failed["verdict"]["status"], "nonzero_exit", "{failed}");
    let mut endless = node.clone();
    endless["time_limit"] = json!("1s");
    let interrupted = cell_with(&server, &id, "while (true) {}", endless);
    assert_eq!(interrupted["verdict"]["status"], "timeout", "{interrupted}");
    assert_eq!(interrupted["state_lost"], false, "{interrupted}");
    assert_eq!(cell_with(&server, &id, "total", node)["result"], "6");
    // Python and Node live side by side in one session, sharing its workspace.
    cell(&server, &id, "open('shared.txt', 'w').write('from python')");
    let read = cell_with(
        &server,
        &id,
        "require('fs').readFileSync('shared.txt', 'utf8')",
        json!({"language": "node"}),
    );
    assert_eq!(read["result"], "'from python'", "{read}");
    close(&server, &id);
}

/// A client that goes away mid-cell: the cell is interrupted, the session lives on.
fn a_session_survives_its_client(mode: Mode) {
    let server = Server::start(mode, &["--pool", "0"]);
    let id = create(&server, json!({}));
    cell(&server, &id, "kept = 'still here'");
    let stream = std::os::unix::net::UnixStream::connect(&server.socket).unwrap();
    let request = json!({"brig": 1, "type": "session_exec", "session": id, "code": "import time\ntime.sleep(60)"});
    common::serve::send_frame(&stream, request.to_string().as_bytes(), &[]);
    std::thread::sleep(Duration::from_millis(500));
    drop(stream);
    // (Had the abandoned 60 s cell run on, this reply would not come within the
    // reader's 30 s.)
    let after = cell(&server, &id, "kept");
    assert_eq!(after["result"], "'still here'", "{after}");
    close(&server, &id);
}

/// SIGTERM: the server ends its open sessions (nothing of them left) and exits 0.
fn sigterm_ends_the_open_sessions(mode: Mode) {
    let mut server = Server::start(mode, &["--pool", "1", "--session-pool", "1"]);
    let marker = marker("drained");
    let id = create(&server, json!({"options": {"env": [marker]}}));
    command(&server, &id, &["sh", "-c", "sleep 300 &"], json!({}));
    cell(&server, &id, "x = 1");
    let runners = runners(&server);
    assert!(!processes_with_environ(&marker).is_empty());
    let stopped = server.stop();
    assert!(stopped.status.success(), "{}", describe(&stopped));
    assert!(
        processes_with_environ(&marker).is_empty(),
        "a session outlived the server"
    );
    for runner in runners {
        assert!(
            !std::path::Path::new(&format!("/proc/{runner}")).exists(),
            "runner {runner} outlived the server"
        );
        assert!(
            jail_cgroups_of(runner).is_empty(),
            "cgroups left by {runner}"
        );
    }
}

/// File names are chosen by the code in the jail: `brig session ls` and the errors that
/// echo a path print them with control characters escaped, so a name cannot set the
/// terminal's title, move its cursor or forge a line of output.
fn names_from_the_jail_are_escaped_on_the_terminal(mode: Mode) {
    let server = Server::start(mode, &["--pool", "0"]);
    let at = |args: &[&str], id: &str| {
        let mut all = vec!["session"];
        all.extend_from_slice(&args[..1]);
        all.extend_from_slice(&["--server", server.socket(), "--session", id]);
        all.extend_from_slice(&args[1..]);
        run(mode, &all)
    };
    let created = run(mode, &["session", "create", "--server", server.socket()]);
    let id = assert_success(&created).trim().to_string();
    let made = at(
        &[
            "exec",
            "--",
            "sh",
            "-c",
            r#"touch "$(printf 'a\033]0;pwned\007')" "$(printf 'line\nforged')" 'back\slash' "$(printf 'c1-\302\23331m')""#,
        ],
        &id,
    );
    assert_success(&made);
    let output = at(&["ls"], &id);
    let listed = assert_success(&output);
    assert!(
        !listed.contains('\x1b') && !listed.contains('\x07'),
        "{listed:?}"
    );
    assert!(!listed.contains('\u{9b}'), "{listed:?}");
    assert!(listed.contains(r"a\x1b]0;pwned\x07"), "{listed:?}");
    assert!(listed.contains(r"line\nforged"), "{listed:?}");
    assert!(listed.contains(r"back\\slash"), "{listed:?}");
    assert!(listed.contains(r"c1-\u{9b}31m"), "{listed:?}");
    assert_eq!(listed.lines().count(), 4, "{listed:?}");
    // An error that names such a path names it escaped too.
    let output = at(&["get", "a\x1b]0;gone\x07"], &id);
    let message = assert_one_line_error(&output, &["no such file"]);
    assert!(!message.contains('\x1b'), "{message:?}");
    assert_success(&at(&["close"], &id));
}

/// Issue 21: the server's one policy check holds for sessions too: a session may not get
/// a larger tmpfs or a looser rlimit than the server's jails, and an exec no looser time
/// or output limit than its session's; the same tightened is served.
fn a_session_and_its_execs_are_held_to_the_server_s_limits(mode: Mode) {
    let server = Server::start(
        mode,
        &[
            "--pool",
            "0",
            "--tmpfs-size",
            "16M",
            "--rlimit",
            "nofile=512",
        ],
    );
    for (options, needle) in [
        (
            json!({"tmpfs": ["/scratch:1G"]}),
            "--tmpfs /scratch:1G: looser than this server's 16M",
        ),
        (
            json!({"rlimit": ["nofile=4096"]}),
            "--rlimit nofile=4096: looser than this server's 512",
        ),
    ] {
        let reply = ask(
            &server,
            json!({"type": "session_create", "options": options}),
        );
        assert_error(&reply, needle);
    }
    let id = create(
        &server,
        json!({"options": {"tmpfs": ["/scratch:8M"], "tmpfs-size": "8M", "time-limit": "10s", "output-limit": "1M"}}),
    );
    let df = command(&server, &id, &["df", "-k", "/scratch"], json!({}));
    assert!(df["stdout"].as_str().unwrap().contains(" 8192 "), "{df}");
    for (extra, needle) in [
        (
            json!({"time_limit": "1m"}),
            "time_limit 60s (the jail's --time-limit): looser than this session's 10s; the client may ask for a time_limit of at most 10s",
        ),
        (
            json!({"output_limit": "2M"}),
            "output_limit 2M (the jail's --output-limit): looser than this session's 1M",
        ),
    ] {
        let mut message = json!({"type": "session_exec", "session": id, "command": ["true"]});
        for (key, value) in extra.as_object().into_iter().flatten() {
            message[key] = value.clone();
        }
        assert_error(&ask(&server, message), needle);
    }
    let served = command(
        &server,
        &id,
        &["true"],
        json!({"time_limit": "5s", "output_limit": "512K"}),
    );
    assert_eq!(served["verdict"]["status"], "ok", "{served}");
}

/// Python code for a cell that writes, on the interpreter's control descriptor, the reply
/// its interpreter would write for it (the request's id found in the driver's frame).
const FORGE_PY: &str = "import os, sys, json\nframe = sys._getframe()\nwhile 'requests' not in frame.f_locals:\n    frame = frame.f_back\nos.write(3, (json.dumps({'id': frame.f_locals['id'], 'result': \"'forged'\", 'error': None}) + '\\n').encode())\n";

/// The attack of issue 21: a cell writes its interpreter's reply itself, then runs on. The
/// client gets no `ok` while it runs: the kernel does not see the interpreter waiting for
/// its next request, so the cell is stopped at its time limit, its interpreter (whose
/// channel it wrote to) replaced; the session goes on. Python and Node.
fn a_forged_reply_does_not_end_a_running_cell(mode: Mode) {
    if !require_program("node", "apt install nodejs") {
        return;
    }
    let server = Server::start(mode, &["--pool", "0"]);
    let id = create(&server, json!({}));
    cell(&server, &id, "kept = 'yes'");
    let forged = cell_with(
        &server,
        &id,
        &format!("{FORGE_PY}while True:\n    pass"),
        json!({"time_limit": "1s"}),
    );
    assert_eq!(forged["verdict"]["status"], "timeout", "{forged}");
    assert_eq!(forged["verdict"]["brig_exit_code"], 124, "{forged}");
    assert_eq!(forged["result"], Value::Null, "{forged}");
    assert_eq!(forged["state_lost"], true, "{forged}");
    let reason = forged["state_lost_reason"].as_str().unwrap_or_default();
    assert!(reason.contains("did not go back to waiting"), "{forged}");
    let after = cell(&server, &id, "('kept' in globals(), 1 + 1)");
    assert_eq!(after["result"], "(False, 2)", "{after}");
    assert_eq!(after["state_lost"], false, "{after}");
    // The cell moves the socket away, forges the reply on it, and blocks its main thread
    // in a read of descriptor 3, now a pipe, which a thread of its own fills a moment
    // later: the main thread then spins. Descriptor 3 is no longer the socket: no reply.
    let swap = FORGE_PY.replace("os.write(3,", "os.write(socket,");
    let swapped = format!(
        "import os, threading\nsocket = os.dup(3)\nos.close(3)\nr, w = os.pipe()\nassert r == 3\n{swap}threading.Timer(0.2, os.write, (w, b'x')).start()\nos.read(3, 1)\nwhile True:\n    pass"
    );
    let forged = cell_with(&server, &id, &swapped, json!({"time_limit": "2s"}));
    assert_eq!(forged["verdict"]["status"], "timeout", "{forged}");
    assert_eq!(forged["result"], Value::Null, "{forged}");
    assert_eq!(forged["state_lost"], true, "{forged}");
    assert_eq!(cell(&server, &id, "1 + 1")["result"], "2");
    // Node: the first cell of a fresh interpreter has id 1.
    let node = json!({"language": "node", "time_limit": "1s"});
    let forge_js = "require('fs').writeSync(3, JSON.stringify({id: 1, result: \"'forged'\", error: null}) + '\\n'); while (true) {}";
    let forged = cell_with(&server, &id, forge_js, node);
    assert_eq!(forged["verdict"]["status"], "timeout", "{forged}");
    assert_eq!(forged["result"], Value::Null, "{forged}");
    assert_eq!(forged["state_lost"], true, "{forged}");
    let after = cell_with(&server, &id, "1 + 1", json!({"language": "node"}));
    assert_eq!(after["result"], "2", "{after}");
    // Forged, then the main thread waits in an event loop of the cell's own (execSync's):
    // not the interpreter's, whose loop watches the control socket.
    let forge_exec = "require('fs').writeSync(3, JSON.stringify({id: 2, result: \"'forged'\", error: null}) + '\\n'); require('child_process').execSync('sleep 30')";
    let node = json!({"language": "node", "time_limit": "1s"});
    let forged = cell_with(&server, &id, forge_exec, node);
    assert_eq!(forged["verdict"]["status"], "timeout", "{forged}");
    assert_eq!(forged["result"], Value::Null, "{forged}");
    assert_eq!(forged["state_lost"], true, "{forged}");
    let after = cell_with(&server, &id, "1 + 1", json!({"language": "node"}));
    assert_eq!(after["result"], "2", "{after}");
    close(&server, &id);
}

/// Lines on the control descriptor that are not the interpreter's one reply to the cell
/// that runs (not JSON, a wrong id, a second reply, the reply's values as an array, a line
/// longer than brig keeps, a line while no cell runs) cost the interpreter: it is
/// replaced, the answer says `state_lost` and why, and the next cell runs in the fresh one.
fn replies_that_break_the_protocol_cost_the_interpreter(mode: Mode) {
    let server = Server::start(mode, &["--pool", "0"]);
    let id = create(&server, json!({}));
    // The cell's own id and a forged result, as an array: serde would read it as the
    // reply's fields in order; brig takes only an object.
    let forged_array = FORGE_PY.replace(
        "{'id': frame.f_locals['id'], 'result': \"'forged'\", 'error': None}",
        "[frame.f_locals['id'], \"'forged'\", None]",
    );
    assert_ne!(forged_array, FORGE_PY);
    // Past brig's bound on a line (MAX_INTERPRETER_LINE, 17 MiB): its start is dropped, its
    // tail is no reply.
    let runaway =
        "import os\nos.write(3, b'{\"id\": 1, \"result\": \"' + b'x' * (18 << 20) + b'\"}\\n')\n1";
    let cases = [
        (
            "import os\nos.write(3, b'not a reply\\n')\n1",
            "not a well-formed reply",
        ),
        (
            "import os\nos.write(3, b'{\"id\": 999999, \"result\": null, \"error\": null}\\n')\n1",
            "wrong id",
        ),
        (&format!("{FORGE_PY}1"), "second reply"),
        (&format!("{forged_array}1"), "not a well-formed reply"),
        (runaway, "not a well-formed reply"),
    ];
    for (code_text, why) in cases {
        cell(&server, &id, "kept = 'yes'");
        let broken = cell(&server, &id, code_text);
        assert_eq!(broken["state_lost"], true, "{why}: {broken}");
        assert_eq!(broken["error"]["type"], "ProtocolError", "{why}: {broken}");
        assert_ne!(broken["verdict"]["status"], "ok", "{why}: {broken}");
        let reason = broken["state_lost_reason"].as_str().unwrap_or_default();
        assert!(reason.contains(why), "{why}: {broken}");
        let after = cell(&server, &id, "('kept' in globals(), 1 + 1)");
        assert_eq!(after["result"], "(False, 2)", "{why}: {after}");
        assert_eq!(after["state_lost"], false, "{why}: {after}");
    }
    // A thread of a finished cell writes a line while no cell runs: the next cell is
    // answered from a fresh interpreter, and says so.
    cell(&server, &id, "kept = 'yes'");
    let later = "import os, threading, time\ndef later():\n    while not os.path.exists('/tmp/go'):\n        time.sleep(0.02)\n    os.write(3, b'{\"id\": 1, \"result\": null, \"error\": null}\\n')\n    open('/tmp/written', 'w').close()\nthreading.Thread(target=later).start()";
    let started = cell(&server, &id, later);
    assert_eq!(started["verdict"]["status"], "ok", "{started}");
    command(&server, &id, &["touch", "/tmp/go"], json!({}));
    let written = || {
        command(&server, &id, &["test", "-e", "/tmp/written"], json!({}))["verdict"]["exit_code"]
            == 0
    };
    assert!(wait_until(Duration::from_secs(20), written));
    let next = cell(&server, &id, "('kept' in globals(), 1 + 1)");
    assert_eq!(next["result"], "(False, 2)", "{next}");
    assert_eq!(next["state_lost"], true, "{next}");
    let reason = next["state_lost_reason"].as_str().unwrap_or_default();
    assert!(reason.contains("while no cell ran"), "{next}");
    close(&server, &id);
}

/// A cell makes its interpreter undumpable (PR_SET_DUMPABLE 0), which may take away brig's
/// right to read its /proc/PID/syscall: as root brig still reads it; rootless, where it
/// cannot, the reply is not taken (fail closed: the interpreter is replaced, and says
/// why). Either way a forged reply followed by a spin is still not answered `ok`.
fn an_undumpable_interpreter_cannot_hide_from_brig(mode: Mode) {
    let server = Server::start(mode, &["--pool", "0"]);
    let id = create(&server, json!({}));
    let hidden = cell(
        &server,
        &id,
        "import ctypes\nctypes.CDLL(None).prctl(4, 0, 0, 0, 0)",
    );
    match hidden["state_lost"].as_bool() {
        Some(false) => assert_eq!(hidden["result"], "0", "{hidden}"),
        _ => {
            let reason = hidden["state_lost_reason"].as_str().unwrap_or_default();
            assert!(reason.contains("/syscall: Permission denied"), "{hidden}");
            assert_eq!(hidden["error"]["type"], "ProtocolError", "{hidden}");
        }
    }
    let hide_and_forge = format!(
        "import ctypes\nctypes.CDLL(None).prctl(4, 0, 0, 0, 0)\n{FORGE_PY}while True:\n    pass"
    );
    let forged = cell_with(&server, &id, &hide_and_forge, json!({"time_limit": "1s"}));
    assert_ne!(forged["verdict"]["status"], "ok", "{forged}");
    assert_eq!(forged["result"], Value::Null, "{forged}");
    assert_eq!(forged["state_lost"], true, "{forged}");
    assert_eq!(cell(&server, &id, "1 + 1")["result"], "2");
    close(&server, &id);
}

/// session_timeout holds during a cell whose client waits for it: at 3 s the cell is
/// ended with its session, its client answered with the session's end, nothing left.
fn the_session_timeout_ends_an_endless_cell_its_client_waits_for(mode: Mode) {
    let server = Server::start(mode, &["--pool", "0"]);
    let marker = marker("endless");
    let started = std::time::Instant::now();
    let id = create(
        &server,
        json!({"session_timeout": "3s", "options": {"env": [marker]}}),
    );
    let runner = runners(&server);
    let waiting = send_request(
        &server,
        json!({"type": "session_exec", "session": id, "code": "while True:\n    pass"}),
    );
    // 3 s, and a margin for a loaded machine (the end is answered before the teardown).
    let reply = reply_within(&waiting, Duration::from_secs(10)).expect("an answer by 13 s");
    assert_error(&reply, "it reached its session_timeout");
    assert!(started.elapsed() >= Duration::from_millis(2900), "{reply}");
    assert!(
        wait_until(Duration::from_secs(5), || processes_with_environ(&marker)
            .is_empty()),
        "the session's processes outlived it"
    );
    for runner in runner {
        assert!(
            wait_until(Duration::from_secs(5), || jail_cgroups_of(runner)
                .is_empty()),
            "cgroups left by {runner}"
        );
    }
    assert_error(&cell_or_error(&server, &id), "");
}

/// session_timeout holds against a client that never reads: a cell's large answer does
/// not keep the session (and its jail) past its end, nor does an endless cell; nor past
/// its idle_timeout.
fn the_session_timeout_holds_against_a_client_that_never_reads(mode: Mode) {
    let server = Server::start(mode, &["--pool", "0"]);
    let mut clients = Vec::new();
    let mut markers = Vec::new();
    let started = std::time::Instant::now();
    // An answer of 1 MiB, more than the socket holds: its write would block.
    let large = "import sys\nsys.stdout.write('x' * (4 << 20))";
    for (code, timeout) in [
        (large, json!({"session_timeout": "3s"})),
        ("while True:\n    pass", json!({"session_timeout": "3s"})),
        // Nor does it keep the session past its idle_timeout.
        (large, json!({"idle_timeout": "3s"})),
    ] {
        let marker = marker("unread");
        let mut ask = timeout;
        ask["options"] = json!({"env": [marker]});
        let id = create(&server, ask);
        clients.push(send_request(
            &server,
            json!({"type": "session_exec", "session": id, "code": code}),
        ));
        markers.push(marker);
    }
    // 3 s, and a margin for a loaded machine; far less than the 30 s a client has to
    // take its answer.
    for marker in &markers {
        assert!(
            wait_until(Duration::from_secs(10), || processes_with_environ(marker)
                .is_empty()),
            "a session outlived its session_timeout by 10 s: its client does not read"
        );
    }
    assert!(started.elapsed() >= Duration::from_millis(2900));
    let closed = || server.status()["sessions"] == 0;
    assert!(
        wait_until(Duration::from_secs(5), closed),
        "{}",
        server.status()
    );
    drop(clients);
}

/// SIGTERM with --drain-grace 4s while an endless one-shot run, an endless session cell
/// and a queued run wait: each client is answered (the queued one at once, within the
/// grace; the others when the grace has passed), the server exits, and nothing of it is
/// left.
fn a_drain_answers_every_client_within_its_grace(mode: Mode) {
    let mut server = Server::start(
        mode,
        &[
            "--pool",
            "0",
            "--max-jails",
            "1",
            "--queue-timeout",
            "60s",
            "--drain-grace",
            "4s",
        ],
    );
    let marker = marker("drain");
    let run = |program: &[&str]| {
        let mut options = json!({"command": program, "env": [marker]});
        options["quiet-limits"] = json!(true);
        send_request(
            &server,
            json!({"type": "run", "stdio": "capture", "options": options}),
        )
    };
    // Deaf to SIGTERM: only the end of its jail stops it.
    let endless = run(&["sh", "-c", "trap '' TERM; while :; do :; done"]);
    assert!(wait_until(
        Duration::from_secs(10),
        || server.status()["running"] == 1
    ));
    let queued = run(&["true"]);
    assert!(wait_until(
        Duration::from_secs(5),
        || server.status()["queued"] == 1
    ));
    let id = create(&server, json!({"options": {"env": [marker]}}));
    let cell = send_request(
        &server,
        json!({"type": "session_exec", "session": id, "code": "while True:\n    pass"}),
    );
    std::thread::sleep(Duration::from_millis(500));
    let tree: Vec<u32> = descendants(server.pid());
    assert!(!processes_with_environ(&marker).is_empty());
    let process = server.running.take().expect("running");
    let sent = std::time::Instant::now();
    kill(process.pid(), libc::SIGTERM);
    let answer = |stream: &std::os::unix::net::UnixStream, what: &str| {
        reply_within(stream, Duration::from_secs(30))
            .unwrap_or_else(|| panic!("no answer to the {what}"))
    };
    let queued = answer(&queued, "queued run");
    assert_error(&queued, "draining");
    // Before the grace ends, so not with the others: the endless ones end only then.
    assert!(sent.elapsed() < Duration::from_secs(4), "{queued}");
    for (stream, what) in [(&endless, "endless run"), (&cell, "endless cell")] {
        let reply = answer(stream, what);
        assert_error(&reply, "draining");
        assert!(sent.elapsed() >= Duration::from_millis(3500), "{reply}");
    }
    // The server exits once they are answered (were it to wait on, the run would hang,
    // endless as its jails are).
    let output = process.wait();
    assert!(output.status.success(), "{}", describe(&output));
    assert!(processes_with_environ(&marker).is_empty());
    let left: Vec<u32> = tree.iter().copied().filter(|pid| alive(*pid)).collect();
    assert!(left.is_empty(), "processes outlived the server: {left:?}");
    for pid in tree {
        assert!(jail_cgroups_of(pid).is_empty(), "cgroups left by {pid}");
    }
    assert!(!server.socket.exists());
}
