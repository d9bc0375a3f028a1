//! The Python and Node clients of `brig serve` (clients/python, clients/node) against a
//! real server, as root and rootless: a run with captured output, a run with the
//! caller's own streams (Python), a refused request, and the status; sessions
//! (docs/protocol.md) through each client's `Sandbox`, streamed output and background
//! processes (`tests/serve/session_processes.rs` has the protocol's own); and the agent tool
//! example (deploy/clients/agent_tool.py) on them.

use crate::common;

use common::serve::{Server, client_copy, fake_listener, readable_copy, run_node_client};
use common::*;
use std::path::Path;

both_modes!(
    python_client_runs_and_reports,
    node_client_runs_and_reports,
    python_client_sessions,
    node_client_sessions,
    deploy_agent_tool_example_runs,
    python_client_checks_the_listener,
    python_client_streams_and_drives_processes,
    node_client_streams_and_drives_processes,
    both_clients_say_a_full_server_is_retryable,
);

/// `script` run by python3 with the client on its path (`sys.argv[1]` is `socket`).
fn python_client(mode: Mode, script: &str, socket: &str) -> std::process::Output {
    let client = client_copy("python");
    let mut command = command_as(mode, interpreter("python3"), &["-c", script, socket]);
    command.env("PYTHONPATH", client.path().join("python"));
    output_of(command)
}

const PYTHON_SCRIPT: &str = r#"
import io, json, os, sys, tempfile
import brig_client
socket = sys.argv[1]
result = brig_client.run(["sh", "-c", "cat; echo err >&2; exit 3"], socket=socket, stdin="in\n")
print(json.dumps([result.exit_code, result.status, result.stdout, result.stderr, result.verdict["exit_code"]]))
with tempfile.TemporaryFile() as out:
    result = brig_client.run(["echo", "through my own file"], socket=socket, capture=False,
                             stdio=[open(os.devnull), out, sys.stderr])
    out.seek(0)
    print(json.dumps([result.exit_code, out.read().decode()]))
try:
    brig_client.run(["true"], socket=socket, options={"net": "host"})
except brig_client.BrigError as error:
    print(json.dumps([error.kind, error.exit_code, "--client-may net-host" in error.message]))
print(json.dumps(sorted(brig_client.status(socket))))
"#;

fn python_client_runs_and_reports(mode: Mode) {
    let server = Server::start(mode, &["--pool", "1"]);
    let client = client_copy("python");
    let python = interpreter("python3");
    let mut command = command_as(mode, python, &["-c", PYTHON_SCRIPT, server.socket()]);
    command.env("PYTHONPATH", client.path().join("python"));
    let output = output_of(command);
    let out = assert_success(&output);
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(
        lines[0],
        r#"[3, "nonzero_exit", "in\n", "err\n", 3]"#,
        "{}",
        describe(&output)
    );
    assert_eq!(lines[1], r#"[0, "through my own file\n"]"#);
    assert_eq!(lines[2], r#"["bad_input", 125, true]"#);
    assert!(
        lines[3].contains("\"pooled_runs\"") && lines[3].contains("\"ready\""),
        "{}",
        lines[3]
    );
}

const NODE_SCRIPT: &str = r#"
const brig = require(process.argv[1]);
const socket = process.argv[2];
(async () => {
  const result = await brig.run(["sh", "-c", "cat; echo err >&2; exit 3"], { socket, stdin: "in\n" });
  console.log(JSON.stringify([result.exitCode, result.status, result.stdout, result.stderr]));
  try {
    await brig.run(["true"], { socket, options: { seccomp: "none" } });
  } catch (error) {
    console.log(JSON.stringify([error.name, error.kind, error.exitCode, error.message.includes("--client-may seccomp-none")]));
  }
  const status = await brig.status({ socket });
  console.log(JSON.stringify(Object.keys(status).sort()));
})().catch((error) => { console.error(error); process.exit(1); });
"#;

fn node_client_runs_and_reports(mode: Mode) {
    if !require_program("node", "apt install nodejs") {
        return;
    }
    let server = Server::start(mode, &["--pool", "1"]);
    let output = run_node_client(mode, NODE_SCRIPT, server.socket());
    let out = assert_success(&output);
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(
        lines[0],
        r#"[3,"nonzero_exit","in\n","err\n"]"#,
        "{}",
        describe(&output)
    );
    assert_eq!(lines[1], r#"["BrigError","bad_input",125,true]"#);
    assert!(lines[2].contains("\"pooled_runs\""), "{}", lines[2]);
}

/// A second session where `--max-sessions 1` allows one: `BrigError` of kind `busy`,
/// `retryable`; a bad input is not.
const PYTHON_BUSY_SCRIPT: &str = r#"
import json, sys
from brig_client import BrigError, Sandbox
with Sandbox(socket=sys.argv[1], timeout=60) as first:
    try:
        Sandbox(socket=sys.argv[1], timeout=60)
        print("a second session was created")
    except BrigError as error:
        print(json.dumps([error.kind, error.retryable, error.exit_code, "--max-sessions" in error.message], separators=(",", ":")))
print(json.dumps(BrigError("x", "bad_input").retryable))
"#;

const NODE_BUSY_SCRIPT: &str = r#"
const brig = require(process.argv[1]);
const socket = process.argv[2];
(async () => {
  const first = await brig.Sandbox.create({ socket, timeoutMs: 60000 });
  try {
    await brig.Sandbox.create({ socket, timeoutMs: 60000 });
    console.log("a second session was created");
  } catch (error) {
    console.log(JSON.stringify([error.kind, error.retryable, error.exitCode, error.message.includes("--max-sessions")]));
  }
  await first.close();
  console.log(JSON.stringify(new brig.BrigError("x", "bad_input").retryable));
})().catch((error) => { console.error(error); process.exit(1); });
"#;

/// A server at `--max-sessions` refuses for now: each client says so as `retryable`.
fn both_clients_say_a_full_server_is_retryable(mode: Mode) {
    let server = Server::start(mode, &["--pool", "0", "--max-sessions", "1"]);
    // Both print the same JSON: the refusal's kind, retryable, exit code, and whether the
    // message names the option; then whether a bad input is retryable.
    let says_busy = |output: std::process::Output| {
        let out = assert_success(&output);
        let lines: Vec<&str> = out.lines().collect();
        let expected = [r#"["busy",true,125,true]"#, "false"];
        assert_eq!(lines, expected, "{}", describe(&output));
    };
    says_busy(python_client(mode, PYTHON_BUSY_SCRIPT, server.socket()));
    if !require_program("node", "apt install nodejs") {
        return;
    }
    says_busy(run_node_client(mode, NODE_BUSY_SCRIPT, server.socket()));
}

/// A session through the Python client: state between cells, output, a raised exception,
/// files (one large enough to travel in chunks), a command, re-attaching, closing.
const PYTHON_SESSION_SCRIPT: &str = r#"
import json, sys
import brig_client
from brig_client import BrigError, Sandbox
socket = sys.argv[1]
def show(*values):
    print(json.dumps(values), flush=True)
with Sandbox(socket=socket, options={"env": ["BRIG_CLIENT_TEST=1"]}, session_timeout="10m", idle_timeout=300) as sb:
    first = sb.run_code("x = 41")
    show(first.ok, first.result, first.error is None)
    ex = sb.run_code("print('hello'); x + 1", language="python", timeout="10s")
    show(ex.ok, ex.stdout, ex.result, ex.verdict["status"], ex.state_lost, ex.state_lost_reason)
    ex = sb.run_code("1 / 0")
    show(ex.ok, ex.error.type, ex.error.message, "Traceback" in ex.error.traceback, ex.verdict["status"])
    show(sb.files.write("data/in.csv", "a,b\n1,2\n"), sb.files.read("data/in.csv"))
    big = bytes(range(256)) * 2800
    show(sb.files.write("big.bin", big), sb.files.read("big.bin", format="bytes") == big)
    top = [[e.name, e.type] + ([e.size] if e.type == "file" else []) for e in sb.files.list(".")]
    show(["big.bin", "file", 716800] in top, ["data", "dir"] in top)
    show([[e.name, e.type, e.size] for e in sb.files.list("data")])
    r = sb.commands.run(["/bin/sh", "-c", "echo hi; exit 3"])
    show(r.exit_code, r.stdout, r.verdict["status"])
    r = sb.commands.run("cat; echo $K", stdin="in\n", env={"K": "v"}, timeout=5)
    show(r.exit_code, r.stdout)
    again = Sandbox.connect(sb.session_id, socket=socket)
    show(again.run_code("x").result, sb.session_id in [s["session"] for s in brig_client.list_sessions(socket)])
    died = sb.run_code("import os; os._exit(3)")
    show(died.state_lost, died.state_lost_reason)
    sb.close()
    try:
        again.run_code("x")
    except BrigError as error:
        show("closed", error.exit_code, "no session" in error.message)
    else:
        show("still open")
"#;

/// The lines a session script prints, checked one by one against `expected`.
fn assert_lines(output: &std::process::Output, expected: &[&str]) {
    let out = assert_success(output);
    let lines: Vec<&str> = out.lines().collect();
    for (index, want) in expected.iter().enumerate() {
        assert_eq!(
            lines.get(index).copied(),
            Some(*want),
            "line {}: {}",
            index + 1,
            describe(output)
        );
    }
    assert_eq!(lines.len(), expected.len(), "{}", describe(output));
}

fn python_client_sessions(mode: Mode) {
    let server = Server::start(mode, &[]);
    assert_lines(
        &python_client(mode, PYTHON_SESSION_SCRIPT, server.socket()),
        &[
            r#"[true, null, true]"#,
            r#"[true, "hello\n", "42", "ok", false, null]"#,
            r#"[false, "ZeroDivisionError", "division by zero", true, "nonzero_exit"]"#,
            r#"[8, "a,b\n1,2\n"]"#,
            r#"[716800, true]"#,
            r#"[true, true]"#,
            r#"[[["in.csv", "file", 8]]]"#,
            r#"[3, "hi\n", "nonzero_exit"]"#,
            r#"[0, "in\nv\n"]"#,
            r#"["41", true]"#,
            r#"[true, "the python interpreter died (exit status 3)"]"#,
            r#"["closed", 125, true]"#,
        ],
    );
}

/// The same through the Node client, with Node cells.
const NODE_SESSION_SCRIPT: &str = r#"
const brig = require(process.argv[1]);
const socket = process.argv[2];
const show = (...values) => console.log(JSON.stringify(values));
const node = { language: "node" };
(async () => {
  const sb = await brig.Sandbox.create({ socket, options: { env: ["BRIG_CLIENT_TEST=1"] }, sessionTimeout: "10m", idleTimeout: 300 });
  let ex = await sb.runCode("x = 41", node);
  show(ex.ok, ex.error);
  ex = await sb.runCode("console.log('hello'); x + 1", { language: "node", timeout: "10s" });
  show(ex.ok, ex.stdout, ex.result, ex.verdict.status, ex.stateLost, ex.stateLostReason);
  ex = await sb.runCode("null.x", node);
  show(ex.ok, ex.error.type, ex.error.message.includes("null"), ex.verdict.status);
  show(await sb.files.write("data/in.csv", "a,b\n1,2\n"), await sb.files.read("data/in.csv"));
  const big = Buffer.alloc(256 * 2800).map((_, i) => i % 256);
  show(await sb.files.write("big.bin", big), (await sb.files.read("big.bin", { format: "bytes" })).equals(big));
  const top = (await sb.files.list(".")).map((e) => JSON.stringify(e.type === "file" ? [e.name, e.type, e.size] : [e.name, e.type]));
  show(top.includes('["big.bin","file",716800]'), top.includes('["data","dir"]'));
  show((await sb.files.list("data")).map((e) => [e.name, e.type, e.size]));
  let r = await sb.commands.run(["/bin/sh", "-c", "echo hi; exit 3"]);
  show(r.exitCode, r.stdout, r.verdict.status);
  r = await sb.commands.run("cat; echo $K", { stdin: "in\n", env: { K: "v" }, timeout: 5 });
  show(r.exitCode, r.stdout);
  const again = await brig.Sandbox.connect(sb.sessionId, { socket });
  show((await again.runCode("x", node)).result, (await brig.listSessions({ socket })).some((s) => s.session === sb.sessionId));
  const died = await sb.runCode("process.exit(3)", node);
  show(died.stateLost, died.stateLostReason);
  await sb.close();
  try {
    await again.runCode("x", node);
    show("still open");
  } catch (error) {
    show(error.name, error.exitCode, error.message.includes("no session"));
  }
})().catch((error) => { console.error(error); process.exit(1); });
"#;

fn node_client_sessions(mode: Mode) {
    if !require_program("node", "apt install nodejs") {
        return;
    }
    let server = Server::start(mode, &[]);
    let output = run_node_client(mode, NODE_SESSION_SCRIPT, server.socket());
    assert_lines(
        &output,
        &[
            r#"[true,null]"#,
            r#"[true,"hello\n","42","ok",false,null]"#,
            r#"[false,"TypeError",true,"nonzero_exit"]"#,
            r#"[8,"a,b\n1,2\n"]"#,
            r#"[716800,true]"#,
            r#"[true,true]"#,
            r#"[[["in.csv","file",8]]]"#,
            r#"[3,"hi\n","nonzero_exit"]"#,
            r#"[0,"in\nv\n"]"#,
            r#"["41",true]"#,
            r#"[true,"the node interpreter died (exit status 3)"]"#,
            r#"["BrigError",125,true]"#,
        ],
    );
}

/// deploy/clients/agent_tool.py's demo conversation: a CSV written with `files.write`,
/// then three tool calls in one session (load it, its mean, print it).
fn deploy_agent_tool_example_runs(mode: Mode) {
    let server = Server::start(mode, &[]);
    let client = client_copy("python");
    let example = readable_copy(Path::new("deploy/clients/agent_tool.py"));
    let script = example.path().join("agent_tool.py");
    let mut command = command_as(
        mode,
        interpreter("python3"),
        &[script.to_str().unwrap(), server.socket()],
    );
    command.env("PYTHONPATH", client.path().join("python"));
    let output = output_of(command);
    let out = assert_success(&output);
    let replies: Vec<serde_json::Value> = out
        .lines()
        .filter_map(|line| line.strip_prefix("tool: "))
        .map(|text| serde_json::from_str(text).expect("the tool answers JSON"))
        .collect();
    assert_eq!(replies.len(), 3, "{}", describe(&output));
    assert_eq!(replies[0]["result"], "4", "{}", describe(&output));
    assert_eq!(replies[1]["result"], "31.25", "{}", describe(&output));
    assert_eq!(
        replies[2]["stdout"],
        "mean amount: 31.25\n",
        "{}",
        describe(&output)
    );
    for reply in &replies {
        assert!(reply.get("error").is_none(), "{}", describe(&output));
    }
    // The demo closed its session.
    let sessions =
        common::serve::exchange(&server.socket, br#"{"brig":1,"type":"session_list"}"#, &[]);
    assert_eq!(sessions["sessions"], serde_json::json!([]), "{sessions}");
}

/// The Python client checks who listens before it sends a request or descriptors: a
/// listener of uid 4242 is refused (it gets nothing), unless BRIG_SERVER_UID names it.
fn python_client_checks_the_listener(mode: Mode) {
    let client = client_copy("python");
    let dir = TempDir::new("python-listener").writable_by_all();
    let script = r#"
import sys, brig_client
try:
    brig_client.run(["true"], socket=sys.argv[1], capture=False)
    print("sent")
except brig_client.BrigError as error:
    print(error.message)
"#;
    let (listener, socket) = fake_listener(&dir, "fake.sock");
    let mut command = command_as(
        mode,
        interpreter("python3"),
        &["-c", script, socket.to_str().unwrap()],
    );
    command.env("PYTHONPATH", client.path().join("python"));
    let out = assert_success(&output_of(command));
    assert!(
        out.contains("the listener is uid 4242") && out.contains("BRIG_SERVER_UID=4242"),
        "{out}"
    );
    assert_eq!(stdout(&listener.wait()), "0 0\n");
    let (listener, socket) = fake_listener(&dir, "trusted.sock");
    let mut command = command_as(
        mode,
        interpreter("python3"),
        &["-c", script, socket.to_str().unwrap()],
    );
    command
        .env("PYTHONPATH", client.path().join("python"))
        .env("BRIG_SERVER_UID", "4242");
    assert_success(&output_of(command));
    let received = stdout(&listener.wait());
    assert!(received.ends_with(" 3\n"), "{received}");
}

/// Streamed output reaches the callback while the command runs (the callback's own
/// request lets it go on); a streamed cell; a background process listed, fed, waited
/// for; connect + kill, signal; an unknown pid.
const PYTHON_PROCESSES_SCRIPT: &str = r#"
import json, sys, brig_client
sb = brig_client.Sandbox(socket=sys.argv[1], timeout=60)
seen = []
def out(text):
    seen.append(["out", text])
    if "one\n" in text:
        sb.files.write("go", "")
r = sb.commands.run("echo one; while [ ! -e go ]; do sleep 0.01; done; echo two >&2; echo three",
                    on_stdout=out, on_stderr=lambda text: seen.append(["err", text]))
print(json.dumps([r.exit_code, r.stdout, r.stderr, seen[0], sorted(map(tuple, seen[1:]))]))
cells = []
ex = sb.run_code("print('a', flush=True)\nprint('b')\n1 + 1", on_stdout=cells.append)
print(json.dumps([ex.result, "".join(cells), ex.stdout, ex.ok]))
h = sb.commands.run("echo ready; exec cat", background=True, tag="cat")
print(json.dumps([[p.pid == h.pid, p.tag, p.running, p.command[0], p.cwd, p.env] for p in sb.commands.list()]))
h.send_stdin("hello\n")
h.close_stdin()
r = h.wait()
print(json.dumps([r.exit_code, r.stdout, [p.running for p in sb.commands.list()]]))
k = sb.commands.run(["sleep", "300"], background=True)
c = sb.commands.connect(k.pid)
k.kill()
r = c.wait()
print(json.dumps([r.exit_code, r.verdict["status"], r.verdict["signal"]]))
s = sb.commands.run(["sleep", "300"], background=True, tag="s")
sb.commands.signal(s.pid, "TERM")
print(json.dumps([s.wait().verdict["signal"], sb.commands.connect(tag="s").pid == s.pid]))
try:
    sb.commands.kill(99999)
except brig_client.BrigError as error:
    print(json.dumps([error.kind, "no process with pid 99999" in str(error)]))
sb.close()
"#;

fn python_client_streams_and_drives_processes(mode: Mode) {
    let server = Server::start(mode, &["--pool", "0"]);
    assert_lines(
        &python_client(mode, PYTHON_PROCESSES_SCRIPT, server.socket()),
        &[
            r#"[0, "one\nthree\n", "two\n", ["out", "one\n"], [["err", "two\n"], ["out", "three\n"]]]"#,
            r#"["2", "a\nb\n", "a\nb\n", true]"#,
            r#"[[true, "cat", true, "/bin/sh", "/home/sandbox", []]]"#,
            r#"[0, "ready\nhello\n", [false]]"#,
            r#"[137, "signaled", 9]"#,
            r#"[15, true]"#,
            r#"["bad_input", true]"#,
        ],
    );
}

const NODE_PROCESSES_SCRIPT: &str = r#"
const brig = require(process.argv[1]);
const show = (...values) => console.log(JSON.stringify(values));
(async () => {
  const sb = await brig.Sandbox.create({ socket: process.argv[2], timeoutMs: 60000 });
  const seen = [];
  let released;
  const r = await sb.commands.run("echo one; while [ ! -e go ]; do sleep 0.01; done; echo two >&2; echo three", {
    onStdout: (text) => {
      seen.push(["out", text]);
      if (text.includes("one\n")) released = sb.files.write("go", "");
    },
    onStderr: (text) => seen.push(["err", text]),
  });
  await released;
  show(r.exitCode, r.stdout, r.stderr, seen[0], seen.slice(1).map((e) => e.join(":")).sort());
  const cells = [];
  const ex = await sb.runCode("print('a', flush=True)\nprint('b')\n1 + 1", { onStdout: (t) => cells.push(t) });
  show(ex.result, cells.join(""), ex.stdout, ex.ok);
  const h = await sb.commands.run("echo ready; exec cat", { background: true, tag: "cat" });
  show(...(await sb.commands.list()).map((p) => [p.pid === h.pid, p.tag, p.running, p.command[0], p.cwd, p.env]));
  await h.sendStdin("hello\n");
  await h.closeStdin();
  let done = await h.wait();
  show(done.exitCode, done.stdout, (await sb.commands.list()).map((p) => p.running));
  const k = await sb.commands.run(["sleep", "300"], { background: true });
  const c = await sb.commands.connect(k.pid);
  await k.kill();
  done = await c.wait();
  show(done.exitCode, done.verdict.status, done.verdict.signal);
  const s = await sb.commands.run(["sleep", "300"], { background: true, tag: "s" });
  await sb.commands.signal(s.pid, "TERM");
  show((await s.wait()).verdict.signal, (await sb.commands.connect(null, { tag: "s" })).pid === s.pid);
  try {
    await sb.commands.kill(99999);
  } catch (error) {
    show(error.kind, error.message.includes("no process with pid 99999"));
  }
  await sb.close();
})().catch((error) => {
  console.error(error);
  process.exit(1);
});
"#;

fn node_client_streams_and_drives_processes(mode: Mode) {
    if !require_program("node", "apt install nodejs") {
        return;
    }
    let server = Server::start(mode, &["--pool", "0"]);
    assert_lines(
        &run_node_client(mode, NODE_PROCESSES_SCRIPT, server.socket()),
        &[
            r#"[0,"one\nthree\n","two\n",["out","one\n"],["err:two\n","out:three\n"]]"#,
            r#"["2","a\nb\n","a\nb\n",true]"#,
            r#"[[true,"cat",true,"/bin/sh","/home/sandbox",[]]]"#,
            r#"[0,"ready\nhello\n",[false]]"#,
            r#"[137,"signaled",9]"#,
            r#"[15,true]"#,
            r#"["bad_input",true]"#,
        ],
    );
}
