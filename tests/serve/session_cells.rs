//! A session's cells are events of its one loop, for real, as root and rootless: while a
//! cell runs every other request is served — a cell of another context runs at the same
//! time, commands, the process list and files are answered — a cell for the same context
//! waits in that context's queue and runs after, in order (not when its client left); the
//! queue's bound is a one-line error; `session_close`, a context's restart or removal
//! during a cell cuts it (its client gets its verdict); both clients run two contexts'
//! cells at once. Nothing here is timed: each proof is a cell waiting for a file another
//! request makes.

use crate::common;

use common::serve::{
    Server, ask, close_session as close, create_session as create, read_reply, send_frame,
};
use common::session::{assert_bad_input, assert_output_lines, client_script, code_cell};
use common::*;
use serde_json::{Value, json};
use std::os::unix::net::UnixStream;

both_modes!(
    cells_of_two_contexts_run_at_the_same_time,
    requests_are_answered_while_a_cell_runs,
    cells_of_one_context_run_one_after_the_other_in_order,
    a_full_queue_refuses_the_next_cell_with_a_one_line_error,
    a_close_during_a_cell_gives_the_cell_its_verdict_then_closes,
    a_restart_during_a_cell_cuts_it_and_answers_with_the_fresh_interpreter,
    both_clients_run_cells_of_two_contexts_at_the_same_time,
    a_queued_cell_whose_client_left_is_not_run,
    removing_a_context_stops_its_cell_and_refuses_its_queue,
);

/// The most cells that wait behind a context's running one (src/serve/session/cell.rs).
const MAX_QUEUED: usize = 16;

/// A request sent on a connection of its own, whose answer is read later.
fn open(server: &Server, mut message: Value) -> UnixStream {
    message["brig"] = json!(1);
    let stream = UnixStream::connect(&server.socket).unwrap();
    send_frame(&stream, message.to_string().as_bytes(), &[]);
    stream
}

/// A cell sent and taken by the session's runner: the server hands requests over in
/// order, so once a later request of the session is answered, the runner has this one.
fn sent_cell(server: &Server, id: &str, code: &str, extra: Value) -> UnixStream {
    let mut message = json!({"type": "session_exec", "session": id, "code": code});
    for (key, value) in extra.as_object().into_iter().flatten() {
        message[key] = value.clone();
    }
    let stream = open(server, message);
    let list = ask(server, json!({"type": "session_ps", "session": id}));
    assert_eq!(list["type"], "processes", "{list}");
    stream
}

/// Python that waits for `file` in the workspace to exist.
fn wait_for(file: &str) -> String {
    format!("import os, time\nwhile not os.path.exists({file:?}):\n    time.sleep(0.01)\n")
}

/// Makes `file` in the session's workspace (a request served while cells run).
fn touch(server: &Server, id: &str, file: &str) {
    let reply = ask(
        server,
        json!({"type": "session_put", "session": id, "path": file, "data": ""}),
    );
    assert_eq!(reply["type"], "put", "{reply}");
}

fn answer(stream: &UnixStream) -> Value {
    read_reply(stream).expect("an answer")
}

fn assert_ok(reply: &Value, result: &str) {
    assert_eq!(reply["type"], "exec", "{reply}");
    assert_eq!(reply["verdict"]["status"], "ok", "{reply}");
    assert_eq!(reply["result"], result, "{reply}");
}

/// Cell A (the default Python context) waits for a file that cell B, in a context of its
/// own, makes: B runs while A waits, and both end well. Were cells one at a time, B
/// would wait for A, and A run into its time limit.
fn cells_of_two_contexts_run_at_the_same_time(mode: Mode) {
    let server = Server::start(mode, &["--pool", "0"]);
    let id = create(&server, json!({}));
    let created = ask(
        &server,
        json!({"type": "session_context", "session": id, "action": "create", "language": "python"}),
    );
    let other = created["context"]["id"].as_str().expect("a context id");
    let code = format!("{}'a saw b'", wait_for("b-ran"));
    let a = sent_cell(&server, &id, &code, json!({"time_limit": "60s"}));
    let b = code_cell(
        &server,
        &id,
        "open('b-ran', 'w').close()\n'b ran'",
        json!({"context": other}),
    );
    assert_ok(&b, "'b ran'");
    assert_eq!(b["context"], other, "{b}");
    let a = answer(&a);
    assert_ok(&a, "'a saw b'");
    assert_eq!(a["context"], "python", "{a}");
    close(&server, &id);
}

/// While a cell waits: the process list is answered (and lists no cell), a command runs
/// and is answered — it makes the file the cell waits for — and a file is read.
fn requests_are_answered_while_a_cell_runs(mode: Mode) {
    let server = Server::start(mode, &["--pool", "0"]);
    let id = create(&server, json!({}));
    let code = format!("{}'the command ran'", wait_for("command-ran"));
    let waiting = sent_cell(&server, &id, &code, json!({"time_limit": "60s"}));
    let list = ask(&server, json!({"type": "session_ps", "session": id}));
    assert_eq!(list["processes"], json!([]), "{list}");
    let command = ask(
        &server,
        json!({"type": "session_exec", "session": id, "command": ["sh", "-c", "echo meanwhile; touch command-ran"]}),
    );
    assert_eq!(command["stdout"], "meanwhile\n", "{command}");
    assert_eq!(command["verdict"]["status"], "ok", "{command}");
    assert_ok(&answer(&waiting), "'the command ran'");
    close(&server, &id);
}

/// Three cells for one context: the second and third wait for the first (which waits
/// for a file), then run in the order they came, each seeing what the one before left.
fn cells_of_one_context_run_one_after_the_other_in_order(mode: Mode) {
    let server = Server::start(mode, &["--pool", "0"]);
    let id = create(&server, json!({}));
    let first = format!("{}order = [1]", wait_for("go"));
    let first = sent_cell(&server, &id, &first, json!({}));
    let second = sent_cell(&server, &id, "order.append(2)", json!({}));
    let third = sent_cell(&server, &id, "order.append(3)\norder", json!({}));
    // Neither has run: the first has not made `order` yet.
    touch(&server, &id, "go");
    for stream in [&first, &second] {
        let reply = answer(stream);
        assert_eq!(reply["verdict"]["status"], "ok", "{reply}");
        assert_eq!(reply["error"], Value::Null, "{reply}");
    }
    assert_ok(&answer(&third), "[1, 2, 3]");
    close(&server, &id);
}

/// A running cell and 16 waiting: the next is refused at once with a one-line
/// `bad_input` naming the fix; the session goes on and the 16 run.
fn a_full_queue_refuses_the_next_cell_with_a_one_line_error(mode: Mode) {
    let server = Server::start(mode, &["--pool", "0"]);
    let id = create(&server, json!({}));
    let first = format!("{}count = 0", wait_for("go"));
    let first = sent_cell(&server, &id, &first, json!({}));
    let waiting: Vec<UnixStream> = (0..MAX_QUEUED)
        .map(|_| sent_cell(&server, &id, "count += 1\ncount", json!({})))
        .collect();
    let refused = ask(
        &server,
        json!({"type": "session_exec", "session": id, "code": "1"}),
    );
    assert_bad_input(&refused, &format!("{MAX_QUEUED} more waiting"));
    assert_bad_input(&refused, "another context");
    // Another context is not full.
    let created = ask(
        &server,
        json!({"type": "session_context", "session": id, "action": "create", "language": "python"}),
    );
    let other = created["context"]["id"].as_str().expect("a context id");
    assert_ok(
        &code_cell(&server, &id, "2", json!({"context": other})),
        "2",
    );
    touch(&server, &id, "go");
    assert_eq!(answer(&first)["verdict"]["status"], "ok");
    for (index, stream) in waiting.iter().enumerate() {
        assert_ok(&answer(stream), &(index + 1).to_string());
    }
    close(&server, &id);
}

/// Python that makes `started`, then runs until it is killed.
const ENDLESS: &str = "open('started', 'w').close()\nwhile True:\n    pass";

/// Waits until the endless cell has made its file.
fn until_started(server: &Server, id: &str) {
    assert!(
        wait_until(std::time::Duration::from_secs(30), || {
            let stat = json!({"type": "session_stat", "session": id, "path": "started"});
            ask(server, stat)["type"] == "stat"
        }),
        "the cell did not start"
    );
}

/// The answer of a cell brig stopped: killed, its state lost, error `Stopped`.
fn assert_stopped(reply: &Value) {
    assert_eq!(reply["type"], "exec", "{reply}");
    let verdict = &reply["verdict"];
    assert_eq!(verdict["status"], "signaled", "{reply}");
    assert_eq!(verdict["signal"], 9, "{reply}");
    assert_eq!(reply["error"]["type"], "Stopped", "{reply}");
    assert_eq!(reply["state_lost"], true, "{reply}");
}

/// `session_context` "restart" while the context runs a cell: the cell is cut (its
/// client gets its verdict), the restart is answered once the fresh interpreter is
/// ready, and the next cell runs in it (the old state is gone).
fn a_restart_during_a_cell_cuts_it_and_answers_with_the_fresh_interpreter(mode: Mode) {
    let server = Server::start(mode, &["--pool", "0"]);
    let id = create(&server, json!({}));
    assert_ok(&code_cell(&server, &id, "kept = 1\nkept", json!({})), "1");
    let running = sent_cell(&server, &id, ENDLESS, json!({}));
    until_started(&server, &id);
    let restarted = ask(
        &server,
        json!({"type": "session_context", "session": id, "action": "restart", "context": "python"}),
    );
    assert_eq!(restarted["type"], "context", "{restarted}");
    assert_eq!(restarted["context"]["running"], true, "{restarted}");
    assert_stopped(&answer(&running));
    let fresh = code_cell(&server, &id, "'kept' in globals()", json!({}));
    assert_ok(&fresh, "False");
    close(&server, &id);
}

/// `session_close` while a cell runs (and another waits): the running cell's client gets
/// its verdict — stopped, its interpreter killed, its state lost — the waiting one's the
/// session's end, and the close is answered; nothing of the session is left.
fn a_close_during_a_cell_gives_the_cell_its_verdict_then_closes(mode: Mode) {
    let server = Server::start(mode, &["--pool", "0"]);
    let marker = format!("BRIG_TEST_MARKER={}", unique("close-during-cell"));
    let id = create(&server, json!({"options": {"env": [marker]}}));
    let running = sent_cell(&server, &id, ENDLESS, json!({}));
    let queued = sent_cell(&server, &id, "'never'", json!({}));
    until_started(&server, &id);
    let closed = ask(&server, json!({"type": "session_close", "session": id}));
    assert_eq!(closed["type"], "closed", "{closed}");
    assert_stopped(&answer(&running));
    let reply = answer(&queued);
    assert_eq!(reply["type"], "error", "{reply}");
    assert!(
        reply["message"].as_str().unwrap().contains("it was closed"),
        "{reply}"
    );
    assert!(processes_with_environ(&marker).is_empty());
}

/// A cell queued behind a running one whose client hangs up is dropped, not run: the
/// file it would make is not there for the cell after it.
fn a_queued_cell_whose_client_left_is_not_run(mode: Mode) {
    let server = Server::start(mode, &["--pool", "0"]);
    let id = create(&server, json!({}));
    let first = sent_cell(&server, &id, &wait_for("go"), json!({}));
    let left = sent_cell(&server, &id, "open('ran', 'w').close()", json!({}));
    drop(left);
    let last = sent_cell(&server, &id, "import os\nos.path.exists('ran')", json!({}));
    touch(&server, &id, "go");
    assert_eq!(answer(&first)["verdict"]["status"], "ok");
    assert_ok(&answer(&last), "False");
    close(&server, &id);
}

/// `session_context` "remove" of a context that runs a cell and has one queued: the
/// running cell is stopped (its verdict), the queued one refused with a one-line error,
/// and the context is gone.
fn removing_a_context_stops_its_cell_and_refuses_its_queue(mode: Mode) {
    let server = Server::start(mode, &["--pool", "0"]);
    let id = create(&server, json!({}));
    let created = ask(
        &server,
        json!({"type": "session_context", "session": id, "action": "create", "language": "python"}),
    );
    let context = created["context"]["id"].as_str().expect("a context id");
    let running = sent_cell(&server, &id, ENDLESS, json!({"context": context}));
    let queued = sent_cell(&server, &id, "1", json!({"context": context}));
    until_started(&server, &id);
    let removed = ask(
        &server,
        json!({"type": "session_context", "session": id, "action": "remove", "context": context}),
    );
    assert_eq!(removed["type"], "context_removed", "{removed}");
    assert_stopped(&answer(&running));
    assert_bad_input(&answer(&queued), "was removed while this cell waited");
    let gone = ask(
        &server,
        json!({"type": "session_exec", "session": id, "code": "1", "context": context}),
    );
    assert_bad_input(&gone, "no context");
    close(&server, &id);
}

/// Python: one thread's cell waits for a file the other thread's cell, in another
/// context, makes.
const PYTHON_TWO_CONTEXTS: &str = r#"
import json, sys, threading
import brig_client
sb = brig_client.Sandbox(socket=sys.argv[1])
other = sb.create_code_context()
answers = {}
def waiting():
    code = "import os, time\nwhile not os.path.exists('b-ran'):\n    time.sleep(0.01)\n'a saw b'"
    answers["a"] = sb.run_code(code, timeout="60s").text
thread = threading.Thread(target=waiting)
thread.start()
answers["b"] = sb.run_code("open('b-ran', 'w').close()\n'b ran'", context=other).text
thread.join()
print(json.dumps([answers["a"], answers["b"]]))
sb.close()
"#;

/// Node: both cells at once (Promise.all), the first waiting for the second's file.
const NODE_TWO_CONTEXTS: &str = r#"
const brig = require(process.argv[1]);
const socket = process.argv[2];
(async () => {
  const sb = await brig.Sandbox.create({ socket });
  const other = await sb.createCodeContext({ language: "node" });
  const waiting = "const fs = require('fs');\nwhile (!fs.existsSync('b-ran')) { Atomics.wait(new Int32Array(new SharedArrayBuffer(4)), 0, 0, 10); }\n'a saw b'";
  const [a, b] = await Promise.all([
    sb.runCode(waiting, { language: "node", timeout: "60s" }),
    sb.runCode("require('fs').writeFileSync('b-ran', ''); 'b ran'", { context: other }),
  ]);
  console.log(JSON.stringify([a.text, b.text]));
  await sb.close();
})().catch((error) => { console.error(error); process.exit(1); });
"#;

/// Through both clients: two contexts' cells at once, as above.
fn both_clients_run_cells_of_two_contexts_at_the_same_time(mode: Mode) {
    let server = Server::start(mode, &["--pool", "0"]);
    assert_output_lines(
        &client_script(mode, "python", PYTHON_TWO_CONTEXTS, &server),
        &[r#"["'a saw b'", "'b ran'"]"#],
    );
    assert_output_lines(
        &client_script(mode, "node", NODE_TWO_CONTEXTS, &server),
        &[r#"["'a saw b'","'b ran'"]"#],
    );
}

/// The session's cgroup counts every OOM kill of its processes: while cell A waits, cell
/// B of another context fills the session's memory and the kernel's OOM killer takes B's
/// interpreter. B's verdict is `oom`; A, which ended by itself, keeps its own `ok` (the
/// kill is still counted in its `cgroup.oom_kills`). Were the session's count the
/// verdict, A would be `oom` too. Root: a memory cgroup of the session's own.
#[test]
fn an_oom_kill_is_the_verdict_of_the_cell_it_killed_only() {
    let server = Server::start(Mode::Root, &["--pool", "0"]);
    let id = create(&server, json!({"options": {"memory": "256M"}}));
    let created = ask(
        &server,
        json!({"type": "session_context", "session": id, "action": "create", "language": "python"}),
    );
    let other = created["context"]["id"].as_str().expect("a context id");
    let a = sent_cell(
        &server,
        &id,
        &format!("{}'a ended'", wait_for("b-ended")),
        json!({"time_limit": "120s"}),
    );
    let bomb = "chunks = []\nwhile True:\n    chunks.append(bytearray(16 << 20))";
    let b = code_cell(&server, &id, bomb, json!({"context": other}));
    assert_eq!(b["verdict"]["status"], "oom", "{b}");
    assert_eq!(b["error"]["type"], "InterpreterDied", "{b}");
    touch(&server, &id, "b-ended");
    let a = answer(&a);
    assert_ok(&a, "'a ended'");
    assert_eq!(a["verdict"]["oom_kills"], 1, "{a}");
    close(&server, &id);
}
