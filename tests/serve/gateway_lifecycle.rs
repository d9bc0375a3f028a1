//! E2B's sandbox lifecycle through `brig gateway`, driven by E2B's pinned Python SDK
//! (`gateway.rs` installs it): a sandbox paused (`Sandbox.pause()`: its jail frozen by
//! the cgroup freezer) makes no progress, lists as `paused`, refuses commands, keeps its
//! files readable, has its end moved by the time it was paused, and resumes where it was
//! on `Sandbox.connect()`; metrics (`get_metrics()`), logs (`/v2/sandboxes/{id}/logs`),
//! and envd's `/envs` and `/metrics`.
//! As root and rootless: where the session's jail has no cgroup of its own (rootless on a
//! host that delegates none), the pause is refused with the one-line reason and fix, and
//! the test checks that the session indeed has no cgroup (its stats count no CPU).
//!
//! No timed assertion: "no progress" is the paused sandbox's counter unchanged while
//! another sandbox's counter, running beside it, advanced by 50.

use crate::common;
use crate::gateway::{Gateway, KEY_A, KEY_B, assert_passed, sdk_python};

use common::serve::Server;
use common::*;

both_modes!(
    e2b_sdk_pauses_and_resumes_sandboxes,
    e2b_sdk_reads_metrics_logs_and_envs,
);

/// A counter in the workspace, written by a background loop: `counter` grows by one
/// every 10 ms while the sandbox runs.
const PAUSE: &str = r#"
import sys, time, httpx
from e2b import Sandbox, SandboxQuery, SandboxState, SandboxException

COUNT = "i=0; while true; do i=$((i+1)); echo $i > counter.new; mv counter.new counter; sleep 0.01; done"

def count(sbx):
    text = sbx.files.read("counter") if sbx.files.exists("counter") else ""
    return int(text.strip() or 0)

def wait_for(done, what):
    # Polled gently (a client hammering the gateway would starve the jails on a busy
    # host), and given up on after many polls: a broken pause, not a slow one.
    for _ in range(20000):
        if done():
            return
        time.sleep(0.005)
    raise SystemExit(f"never: {what}")

paused = Sandbox.create(timeout=300, metadata={"role": "paused"})
witness = Sandbox.create(timeout=300, metadata={"role": "witness"})
loop = paused.commands.run(COUNT, background=True)
witness.commands.run(COUNT, background=True)
wait_for(lambda: count(paused) >= 3, "the counter runs")

try:
    paused.pause()
except SandboxException as err:
    # No cgroup with a freezer for the jail: the refusal names why and the fix.
    message = str(err)
    assert "cannot be paused" in message and "cgroup" in message and "\n" not in message, message
    print("REFUSED", message)
    paused.kill(); witness.kill()
    print("PASS")
    sys.exit(0)

before = Sandbox.get_info(paused.sandbox_id)
assert before.state == SandboxState.PAUSED, before
assert paused.is_running() is False and witness.is_running() is True
# Paused again: the SDK's False (409).
assert paused.pause() is False

# No progress while the witness counts 50 more.
frozen = count(paused)
start = count(witness)
wait_for(lambda: count(witness) >= start + 50, "the witness counts on")
assert count(paused) == frozen, (count(paused), frozen)

# Listed as paused, by state filter too; the witness as running.
def listed(*states):
    query = SandboxQuery(state=list(states)) if states else None
    return {info.sandbox_id: info.state for info in Sandbox.list(query=query).next_items()}
assert listed()[paused.sandbox_id] == SandboxState.PAUSED
assert listed()[witness.sandbox_id] == SandboxState.RUNNING
assert list(listed(SandboxState.PAUSED)) == [paused.sandbox_id], listed(SandboxState.PAUSED)
assert paused.sandbox_id not in listed(SandboxState.RUNNING)

# A command is refused, saying so; files are still read (the counter above).
try:
    paused.commands.run("echo ran")
    raise SystemExit("a paused sandbox ran a command")
except Exception as err:
    assert "paused" in str(err), repr(err)

# Its end moves while it is paused.
later = Sandbox.get_info(paused.sandbox_id)
assert later.end_at > before.end_at, (later.end_at, before.end_at)

# connect() resumes it (201), where it was: the same loop counts on from its value.
again = Sandbox.connect(paused.sandbox_id)
assert Sandbox.get_info(paused.sandbox_id).state == SandboxState.RUNNING
assert again.is_running() is True
assert count(again) >= frozen
wait_for(lambda: count(again) > frozen + 3, "the counter runs on after resume")
assert loop.pid in [process.pid for process in again.commands.list()]
assert again.commands.run("echo ran").stdout == "ran\n"
# Its end stays where the pause moved it; connect only ever extends.
resumed = Sandbox.get_info(paused.sandbox_id)
assert resumed.end_at >= later.end_at, (resumed.end_at, later.end_at)

# connect of a running sandbox: 200, still running; resume of a running one: 409.
Sandbox.connect(witness.sandbox_id)
url = sys.argv[1]
with httpx.Client(base_url=url, headers={"X-API-Key": sys.argv[2]}) as http:
    answer = http.post(f"/sandboxes/{witness.sandbox_id}/resume", json={"timeout": 60})
    assert answer.status_code == 409, (answer.status_code, answer.text)
    answer = http.post(f"/sandboxes/{witness.sandbox_id}/pause", json={"memory": False})
    assert answer.status_code == 400 and "memory" in answer.json()["message"], answer.text
    # The deprecated resume route: a paused sandbox resumes, 201.
    assert http.post(f"/sandboxes/{witness.sandbox_id}/pause").status_code == 204
    answer = http.post(f"/sandboxes/{witness.sandbox_id}/resume", json={"timeout": 60})
    assert answer.status_code == 201 and answer.json()["sandboxID"] == witness.sandbox_id, answer.text

    # The log has the pause and the resume, and how long it was paused.
    logs = http.get(f"/v2/sandboxes/{paused.sandbox_id}/logs", params={"search": "sandbox"}).json()["logs"]
    assert [entry["message"] for entry in logs] == ["sandbox started", "sandbox paused", "sandbox resumed"], logs
    assert int(logs[-1]["fields"]["paused_ms"]) > 0, logs

# Another tenant's key reaches none of it: pause, resume, metrics, logs are 404.
with httpx.Client(base_url=url, headers={"X-API-Key": sys.argv[3]}) as other:
    for method, path in (("POST", "pause"), ("POST", "resume"), ("GET", "metrics"), ("GET", "logs")):
        answer = other.request(method, f"/sandboxes/{paused.sandbox_id}/{path}", json={"timeout": 60} if method == "POST" else None)
        assert answer.status_code == 404, (path, answer.status_code, answer.text)
    answer = other.get("/sandboxes/metrics", params={"sandbox_ids": paused.sandbox_id})
    assert answer.json()["sandboxes"] == {}, answer.text
assert Sandbox.get_info(paused.sandbox_id).state == SandboxState.RUNNING

# A paused sandbox is killed whole (its frozen processes too).
paused.pause()
paused.kill()
witness.kill()
assert Sandbox.list().next_items() == []
print("PASS")
"#;

fn e2b_sdk_pauses_and_resumes_sandboxes(mode: Mode) {
    let Some(python) = sdk_python() else { return };
    let server = Server::start(mode, &[]);
    let gateway = Gateway::start(mode, &server);
    let script = format!("import sys\nsys.argv[2:] = [{KEY_A:?}, {KEY_B:?}]\n{PAUSE}");
    let output = gateway.sdk_of(python, KEY_A, &script);
    let refused = stdout(&output).contains("REFUSED");
    assert_passed(Some(output));
    // Refused only where the session's jail has no cgroup: its stats count no CPU.
    let freezable = session_has_cgroup(&server);
    assert_eq!(
        refused, !freezable,
        "pause refused: {refused}; the session has a cgroup: {freezable}"
    );
    if mode == Mode::Root {
        assert!(!refused, "as root the pause is served");
    }
    let sessions =
        common::serve::exchange(&server.socket, br#"{"brig":1,"type":"session_list"}"#, &[]);
    assert_eq!(sessions["sessions"], serde_json::json!([]), "{sessions}");
}

/// Whether a session of `server` has a cgroup of its own (`session_stats` counts its
/// CPU time).
fn session_has_cgroup(server: &Server) -> bool {
    let created = common::serve::exchange(
        &server.socket,
        br#"{"brig":1,"type":"session_create"}"#,
        &[],
    );
    let id = created["session"].as_str().expect("a session").to_string();
    let stats = common::serve::exchange(
        &server.socket,
        format!(r#"{{"brig":1,"type":"session_stats","session":"{id}"}}"#).as_bytes(),
        &[],
    );
    assert_eq!(stats["type"], "stats", "{stats}");
    let closed = common::serve::exchange(
        &server.socket,
        format!(r#"{{"brig":1,"type":"session_close","session":"{id}"}}"#).as_bytes(),
        &[],
    );
    assert_eq!(closed["type"], "closed", "{closed}");
    !stats["cpu_usec"].is_null()
}

const METRICS: &str = r#"
import sys, httpx
from e2b import Sandbox
sbx = Sandbox.create(envs={"SANDBOX_VAR": "from create"})
# Some memory and some CPU, then the metrics.
sbx.commands.run("head -c 4000000 /dev/zero > blob; i=0; while [ $i -lt 20000 ]; do i=$((i+1)); done")
metrics = sbx.get_metrics()
assert len(metrics) == 1, metrics
metric = metrics[0]
assert metric.cpu_count >= 1, metric
assert 0 <= metric.cpu_used_pct <= 100, metric
assert metric.disk_total > 0 and metric.disk_used >= 4000000, metric
assert metric.mem_total > 0, metric
if sys.argv[3] == "cgroup":
    assert metric.mem_used > 0, metric
headers = {"E2b-Sandbox-Id": sbx.sandbox_id, "E2b-Sandbox-Port": "49983", "X-Access-Token": sbx._envd_access_token or ""}
with httpx.Client(base_url=sys.argv[1]) as http:
    envs = http.get("/envs", headers=headers)
    assert envs.status_code == 200, envs.text
    assert envs.json()["SANDBOX_VAR"] == "from create", envs.json()
    assert "PATH" in envs.json(), envs.json()
    envd = http.get("/metrics", headers=headers)
    assert envd.status_code == 200 and envd.json()["disk_total"] > 0, envd.text
    # Many at once: the caller's own only.
    many = http.get("/sandboxes/metrics", params={"sandbox_ids": f"{sbx.sandbox_id},{'0' * 32}"}, headers={"X-API-Key": sys.argv[2]})
    assert many.status_code == 200 and list(many.json()["sandboxes"]) == [sbx.sandbox_id], many.text
    none = http.get("/sandboxes/metrics", headers={"X-API-Key": sys.argv[2]})
    assert none.status_code == 400 and "sandbox_ids" in none.json()["message"], none.text
    # The logs: the sandbox's start, each command's start and end (a failing one's a
    # warning), a timeout set; filtered by level, ordered backward, the caller's own only.
    try:
        sbx.commands.run("exit 4")
    except Exception:
        pass
    sbx.set_timeout(120)
    api = {"X-API-Key": sys.argv[2]}
    logs = http.get(f"/v2/sandboxes/{sbx.sandbox_id}/logs", headers=api)
    assert logs.status_code == 200, logs.text
    entries = logs.json()["logs"]
    messages = [entry["message"] for entry in entries]
    assert messages == ["sandbox started"] + ["process started", "process ended"] * 2 + ["timeout set"], messages
    started = [entry for entry in entries if entry["message"] == "process started"]
    assert any("head -c 4000000" in entry["fields"]["cmd"] for entry in started), entries
    ended = [entry for entry in entries if entry["message"] == "process ended"]
    assert {(entry["fields"]["exit_code"], entry["level"]) for entry in ended} >= {("0", "info"), ("4", "warn")}, ended
    assert entries[-1]["message"] == "timeout set" and entries[-1]["fields"]["timeout_s"] == "120", entries
    warnings = http.get(f"/v2/sandboxes/{sbx.sandbox_id}/logs", params={"level": "warn"}, headers=api).json()["logs"]
    assert [entry["fields"]["exit_code"] for entry in warnings] == ["4"], warnings
    newest = http.get(f"/v2/sandboxes/{sbx.sandbox_id}/logs", params={"direction": "backward", "limit": 1}, headers=api).json()["logs"]
    assert [entry["message"] for entry in newest] == ["timeout set"], newest
    v1 = http.get(f"/sandboxes/{sbx.sandbox_id}/logs", headers=api).json()
    assert v1["logs"][0]["line"].startswith("sandbox started template=base"), v1
    assert len(v1["logs"]) == len(v1["logEntries"]) == len(entries), v1
    bad = http.get(f"/v2/sandboxes/{sbx.sandbox_id}/logs", params={"level": "loud"}, headers=api)
    assert bad.status_code == 400 and "level" in bad.json()["message"], bad.text
    assert http.get(f"/v2/sandboxes/{'0' * 32}/logs", headers=api).status_code == 404
sbx.kill()
print("PASS")
"#;

fn e2b_sdk_reads_metrics_logs_and_envs(mode: Mode) {
    let Some(python) = sdk_python() else { return };
    let server = Server::start(mode, &[]);
    let cgroup = match session_has_cgroup(&server) {
        true => "cgroup",
        false => "none",
    };
    let gateway = Gateway::start(mode, &server);
    let script = format!("import sys\nsys.argv[2:] = [{KEY_A:?}, {cgroup:?}]\n{METRICS}");
    assert_passed(Some(gateway.sdk_of(python, KEY_A, &script)));
}
