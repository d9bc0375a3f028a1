//! Fair shares per tenant at `brig gateway` (src/gateway/quota.rs), through E2B's official
//! Python SDK (pinned, from PyPI) and raw HTTP, as root and rootless:
//!
//! - the memory quota: a tenant's sandboxes (paused ones too) may hold at most
//!   `--max-memory-per-tenant` of memory limits, or its own `max-memory=` of the key
//!   file; a create past it raises the SDK's `RateLimitException` naming the quota, the
//!   tenant's use and the fix, another tenant still creates, a kill makes room again;
//!   a sandbox found too big only once made (the server's default memory, not known to
//!   the gateway before its first create) is closed at once; eight concurrent creates
//!   of one tenant with room for two: exactly two pass;
//! - the shares of the gateway's caps: a tenant holding its `--max-streams-per-tenant`
//!   background commands is refused its next (Connect's `resource_exhausted`, the SDK's
//!   `RateLimitException`, naming the share) while another tenant still gets streams up to
//!   `--max-streams` (past it refused naming that); the same for WebSocket-style upgrades
//!   to a sandbox's port (`--max-tunnels-per-tenant`: 429, `--max-tunnels`: 503); shares
//!   are given back when streams and connections end (filled, ended, filled again); the
//!   interpreter's cells (its SDK's `run_code`) hold streams too (429 past the share);
//! - a `process.Process/StreamInput` message and a server stream's request over the 4 MiB
//!   a Connect message may have: `resource_exhausted`, one line, the gateway and the
//!   sandbox's process going on;
//! - a bad `--max-memory-per-tenant` or share: one line naming the flag, exit 125.
//!
//! Each Python program asserts as it goes and prints `PASS` at its end.

use crate::common;
use crate::gateway::{Gateway, KEY_A, KEY_B, assert_passed};
use crate::gateway_ports::ECHO_SERVER;

use common::serve::Server;
use common::*;

both_modes!(
    e2b_a_tenants_memory_is_capped,
    e2b_concurrent_creates_cannot_pass_the_quota_together,
    e2b_streams_are_shared_between_tenants,
    e2b_tunnels_are_shared_between_tenants,
    e2b_interpreter_cells_are_shared_between_tenants,
    e2b_oversized_stream_messages_are_refused,
    gateway_refuses_bad_quota_flags,
);

const KEY_C: &str = "e2b_00000000000000000000000000000000000000c3";

/// Alice has the flags' quota, Bob 256M of his own, Carol 100M (less than one sandbox of
/// the server's default).
fn keys() -> String {
    format!("{KEY_A} alice\n{KEY_B} bob max-memory=256M\n{KEY_C} carol max-memory=100M\n")
}

/// Whether sandboxes have a memory limit here: as root brig writes cgroups; rootless on
/// this host it has none to write, so a sandbox's memory is not bounded (and a memory
/// quota refuses every create, saying so).
fn limited(mode: Mode) -> bool {
    mode == Mode::Root
}

/// The server's default memory limit for sandboxes: 256M where brig can enforce one.
fn server_memory(mode: Mode) -> &'static [&'static str] {
    match limited(mode) {
        true => &["--memory", "256M"],
        false => &[],
    }
}

const MEMORY: &str = r#"
import sys
from e2b import Sandbox, RateLimitException
keys = {"bob": sys.argv[2], "carol": sys.argv[3]}

def refused(words, **create):
    try:
        sandbox = Sandbox.create(**create)
    except RateLimitException as err:
        message = str(err)
        for word in words:
            assert word in message, (word, message)
        assert "\n" not in message, message
        return
    sandbox.kill()
    raise SystemExit(f"created past the quota: {create}")

if sys.argv[4] == "unlimited":
    # No cgroup for a memory limit: a tenant with a memory quota cannot create.
    refused(["has a memory quota (--max-memory-per-tenant 600M)", "has no memory limit"])
    print("PASS")
    raise SystemExit(0)

# Carol's first create is the gateway's first: the server's default memory (256M) is
# known only once the sandbox is made; past her 100M, it goes at once.
refused(["tenant \"carol\"", "asks 256M", "max-memory=100M of carol in --api-keys", "kill one first"], api_key=keys["carol"])
assert Sandbox.list(api_key=keys["carol"]).next_items() == [], "a sandbox over the quota was left"

first, second = Sandbox.create(), Sandbox.create()
refused(["tenant \"alice\" holds 512M of memory in 2 sandboxes", "asks 256M", "--max-memory-per-tenant 600M", "kill one first"])
# A paused sandbox's memory is held: it still counts.
first.pause()
refused(["holds 512M", "paused ones count"])
# Another tenant's quota is its own.
bobs = Sandbox.create(api_key=keys["bob"])
refused(["tenant \"bob\" holds 256M", "max-memory=256M of bob in --api-keys"], api_key=keys["bob"])
# A template's own memory is what it asks.
refused(["holds 512M", "asks 128M"], template="small")
second.kill()
small = Sandbox.create(template="small")
refused(["holds 384M of memory in 2 sandboxes", "asks 256M"])
for sandbox in (first, small, bobs):
    sandbox.kill()
third = Sandbox.create()
third.kill()
print("PASS")
"#;

fn quota_gateway(mode: Mode, server: &Server, extra: &[&str]) -> (Gateway, TempDir) {
    let dir = TempDir::new("gateway-quota").writable_by_all();
    let templates = dir.file("templates.yaml", "small:\n  memory: 128M\n");
    let mut args = vec![
        "--max-memory-per-tenant",
        "600M",
        "--templates",
        templates.to_str().unwrap(),
    ];
    args.extend_from_slice(extra);
    let gateway = Gateway::start_keyed(mode, server, "127.0.0.1:0", &keys(), &args);
    (gateway, dir)
}

fn e2b_a_tenants_memory_is_capped(mode: Mode) {
    let server = Server::start(mode, server_memory(mode));
    let (gateway, _dir) = quota_gateway(mode, &server, &[]);
    let limits = if limited(mode) {
        "limited"
    } else {
        "unlimited"
    };
    let script = format!(
        "import sys\nsys.argv[2:] = {:?}\n{MEMORY}",
        [KEY_B, KEY_C, limits]
    );
    assert_passed(gateway.sdk(KEY_A, &script));
}

/// Eight creates at once with room for two: exactly two pass, however they interleave;
/// the others are refused with the quota's error (`sys.argv[2]`) and leave nothing.
const RACE: &str = r#"
import sys
from concurrent.futures import ThreadPoolExecutor
from e2b import Sandbox, RateLimitException

def create(_):
    try:
        return Sandbox.create()
    except RateLimitException as err:
        assert sys.argv[2] in str(err), err
        return None

with ThreadPoolExecutor(8) as pool:
    made = [sandbox for sandbox in pool.map(create, range(8)) if sandbox]
assert len(made) == 2, f"{len(made)} creates passed a quota with room for 2"
listed = Sandbox.list().next_items()
assert sorted(s.sandbox_id for s in listed) == sorted(s.sandbox_id for s in made), listed
for sandbox in made:
    sandbox.kill()
print("PASS")
"#;

/// The memory quota (600M, sandboxes of 256M) where sandboxes have a memory limit, the
/// count's (2) where they have none: both are checked under the tenant's create lock.
fn e2b_concurrent_creates_cannot_pass_the_quota_together(mode: Mode) {
    let server = Server::start(mode, server_memory(mode));
    let (quota, named) = match limited(mode) {
        true => (
            ["--max-memory-per-tenant", "600M"],
            "--max-memory-per-tenant 600M",
        ),
        false => (
            ["--max-sandboxes-per-tenant", "2"],
            "--max-sandboxes-per-tenant 2",
        ),
    };
    let gateway = Gateway::start_with(mode, &server, &quota);
    let script = format!("import sys\nsys.argv[2:] = [{named:?}]\n{RACE}");
    assert_passed(gateway.sdk(KEY_A, &script));
}

/// Alice holds her share (2) of background commands; her third is refused, Bob still gets
/// one, and then the gateway's whole cap (3) refuses Bob's second naming it. Ended
/// commands give their streams back: filled again, the same holds.
const STREAMS: &str = r#"
import sys, time
from e2b import Sandbox, RateLimitException, CommandExitException
alice = Sandbox.create()
bob = Sandbox.create(api_key=sys.argv[2])

def refused(sandbox, words):
    try:
        handle = sandbox.commands.run("sleep 600", background=True)
    except RateLimitException as err:
        for word in words:
            assert word in str(err), (word, str(err))
        return
    handle.kill()
    raise SystemExit("a stream past its cap was opened")

def until_given_back(sandbox):
    """A stream's share is given back as its end is sent: a client may see the end of
    another stream first. Retried a bounded number of times."""
    for _ in range(200):
        try:
            return sandbox.commands.run("sleep 600", background=True)
        except RateLimitException:
            time.sleep(0.05)
    raise SystemExit("a stream's share was never given back")

def end(handles):
    for handle in handles:
        handle.kill()
        try:
            handle.wait()
        except CommandExitException:
            pass

for round in range(2):
    mine = [alice.commands.run("sleep 600", background=True) for _ in range(2)]
    refused(alice, ["tenant \"alice\" has 2 streams open, its share (--max-streams-per-tenant 2)", "retry when one ends"])
    bobs = [bob.commands.run("sleep 600", background=True)]
    refused(bob, ["brig gateway has 3 streams open, its most (--max-streams 3)"])
    # Unary calls hold no stream: Alice still runs what is not streamed.
    assert alice.files.write("f.txt", "still served") is not None
    assert alice.files.read("f.txt") == "still served"
    end(mine[:1])
    mine[0] = until_given_back(alice)
    end(mine + bobs)
    # Filled, ended, filled again (the next round): nothing leaked.
alice.kill()
bob.kill()
print("PASS")
"#;

fn e2b_streams_are_shared_between_tenants(mode: Mode) {
    let limits = ["--max-streams", "3", "--max-streams-per-tenant", "2"];
    caps_script_passes(mode, &limits, &[KEY_B], STREAMS);
}

/// A gateway with `limits` runs `script` as tenant A, `args` its `sys.argv[2:]`.
fn caps_script_passes(mode: Mode, limits: &[&str], args: &[&str], script: &str) {
    let server = Server::start(mode, &[]);
    let gateway = Gateway::start_with(mode, &server, limits);
    let script = format!("import sys\nsys.argv[2:] = {args:?}\n{script}");
    assert_passed(gateway.sdk(KEY_A, &script));
}

/// Alice holds her share (2) of upgraded connections (WebSockets to gateway_ports.rs's
/// echo server in the jail); her third is answered 429, Bob still gets one, then 503 for
/// the gateway's whole cap (3). Closed connections give theirs
/// back: filled again, the same holds.
const TUNNELS: &str = r#"
import socket, sys, time, urllib.parse
from e2b import Sandbox
gateway = urllib.parse.urlsplit(sys.argv[1]).netloc
host, port = gateway.rsplit(":", 1)
alice = Sandbox.create(allow_internet_access=False)
bob = Sandbox.create(api_key=sys.argv[2], allow_internet_access=False)
for sandbox in (alice, bob):
    sandbox.files.write("echo.py", sys.argv[3])
    sandbox.commands.run("exec python3 echo.py 8765", background=True)

def upgrade(sandbox):
    """A connection to port 8765 of `sandbox` asking to switch: (status, its first line
    and body, the socket, open)."""
    conn = socket.create_connection((host, int(port)))
    conn.sendall((f"GET / HTTP/1.1\r\nHost: {gateway}\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n"
                  f"Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n"
                  f"E2b-Sandbox-Id: {sandbox.sandbox_id}\r\nE2b-Sandbox-Port: 8765\r\n\r\n").encode())
    answer = b""
    while b"\r\n\r\n" not in answer:
        chunk = conn.recv(4096)
        assert chunk, answer
        answer += chunk
    status = int(answer.split(b" ", 2)[1])
    if status != 101:
        # The refusal's body (a line): read what came, then close.
        conn.settimeout(5)
        try:
            while b"\n" not in answer.split(b"\r\n\r\n", 1)[1]:
                chunk = conn.recv(4096)
                if not chunk:
                    break
                answer += chunk
        except socket.timeout:
            pass
        conn.close()
    return status, answer.decode(errors="replace"), conn

def opened(sandbox, attempts=600):
    """An upgraded connection, once the server in the jail listens (502 until then) and a
    share is free (429 while a closed one's relay is still ending); bounded."""
    for _ in range(attempts):
        status, answer, conn = upgrade(sandbox)
        if status == 101:
            return conn
        assert status in (502, 429), answer
        time.sleep(0.05)
    raise SystemExit(f"never upgraded: {answer}")

def refused(sandbox, status, words):
    got, answer, _ = upgrade(sandbox)
    assert got == status, (got, answer)
    for word in words:
        assert word in answer, (word, answer)

for round in range(2):
    mine = [opened(alice) for _ in range(2)]
    refused(alice, 429, ["tenant \"alice\" has 2 upgraded connections open, its share (--max-tunnels-per-tenant 2)"])
    bobs = [opened(bob)]
    refused(bob, 503, ["brig gateway has 3 upgraded connections open, its most (--max-tunnels 3)"])
    for conn in mine + bobs:
        conn.close()
    # Filled, closed, filled again (the next round): nothing leaked.
alice.kill()
bob.kill()
print("PASS")
"#;

fn e2b_tunnels_are_shared_between_tenants(mode: Mode) {
    let limits = ["--max-tunnels", "3", "--max-tunnels-per-tenant", "2"];
    caps_script_passes(mode, &limits, &[KEY_B, ECHO_SERVER], TUNNELS);
}

/// The interpreter's cells hold streams too: Alice's share is 1, so while her long cell
/// runs her next is answered 429 (the interpreter SDK's `SandboxException`), Bob's runs;
/// once her cell has ended (its share given back before its end is sent) her next runs.
const CELLS: &str = r#"
import sys, threading, time
from e2b import SandboxException
from e2b_code_interpreter import Sandbox
alice = Sandbox.create()
bob = Sandbox.create(api_key=sys.argv[2])
long = threading.Thread(target=alice.run_code, args=(
    "import os, time\nopen('/home/user/running', 'w').close()\n"
    "while not os.path.exists('/home/user/go'):\n    time.sleep(0.01)",))
long.start()
while not alice.files.exists("running"):
    time.sleep(0.01)
try:
    alice.run_code("1+1")
    raise SystemExit("a cell past the tenant's share ran")
except SandboxException as err:
    assert "429" in str(err) and "its share (--max-streams-per-tenant 1)" in str(err), err
assert bob.run_code("1+1").text == "2"
alice.files.write("go", "")
long.join()
assert alice.run_code("2+2").text == "4"
alice.kill()
bob.kill()
print("PASS")
"#;

fn e2b_interpreter_cells_are_shared_between_tenants(mode: Mode) {
    let Some(python) = crate::gateway_interpreter::sdk_python() else {
        return;
    };
    let server = Server::start(mode, &[]);
    let limits = ["--max-streams", "2", "--max-streams-per-tenant", "1"];
    let gateway = Gateway::start_with(mode, &server, &limits);
    let script = format!("import sys\nsys.argv[2:] = [{KEY_B:?}]\n{CELLS}");
    assert_passed(Some(gateway.sdk_of(python, KEY_A, &script)));
}

/// Messages past Connect's 4 MiB: a StreamInput `data` of 5 MiB (by the SDK's own Connect
/// client) and a Start whose envelope is 5 MiB (by hand), each refused with
/// `resource_exhausted` in one line; the process the stream fed still reads what comes
/// after, and the gateway serves on.
const OVERSIZED: &str = r#"
import base64, json, os, socket, struct, sys, urllib.parse
import httpx
from connectrpc.code import Code
from connectrpc.errors import ConnectError
from protobuf import Oneof
from e2b import Sandbox
from e2b.envd.process import process_pb as P

sbx = Sandbox.create()
rpc = sbx.commands._rpc
headers = dict(sbx.commands._connection_config.sandbox_headers)
proc = sbx.commands.run('read a; echo "got $a"', background=True, stdin=True)

def start(pid):
    return P.StreamInputRequest(event=Oneof("start", P.StreamInputRequest.StartEvent(
        process=P.ProcessSelector(selector=Oneof("pid", pid)))))
def data(blob):
    return P.StreamInputRequest(event=Oneof("data", P.StreamInputRequest.DataEvent(
        input=P.ProcessInput(input=Oneof("stdin", blob)))))
try:
    rpc.stream_input(iter([start(proc.pid), data(b"x" * (5 << 20))]), headers=headers)
    raise SystemExit("a 5 MiB message was taken")
except ConnectError as err:
    assert err.code == Code.RESOURCE_EXHAUSTED, (err.code, err.message)
    assert "more than 4194304" in err.message and "smaller pieces" in err.message, err.message
    assert "\n" not in err.message, err.message

# The same by hand, the envelope's length alone past the limit (its body never sent).
def envelope(message):
    body = json.dumps(message).encode()
    return struct.pack(">BI", 0, len(body)) + body
stream = envelope({"start": {"process": {"pid": proc.pid}}}) + struct.pack(">BI", 0, (4 << 20) + 1)
answer = httpx.post(sys.argv[1] + "/process.Process/StreamInput", content=stream,
                    headers=dict(headers, **{"Content-Type": "application/connect+json"}))
assert answer.status_code == 200, (answer.status_code, answer.text)
flags, length = struct.unpack(">BI", answer.content[:5])
end = json.loads(answer.content[5:5 + length])
assert flags == 2 and end["error"]["code"] == "resource_exhausted", answer.content
assert "4194305 bytes" in end["error"]["message"], end

# A server stream's request (Start) of 5 MiB: refused in its end of stream.
big = envelope({"process": {"cmd": "/bin/echo", "args": ["y" * (5 << 20)]}})
answer = httpx.post(sys.argv[1] + "/process.Process/Start", content=big,
                    headers=dict(headers, **{"Content-Type": "application/connect+json"}))
flags, length = struct.unpack(">BI", answer.content[:5])
end = json.loads(answer.content[5:5 + length])
assert flags == 2 and end["error"]["code"] == "resource_exhausted", answer.content[:200]
assert "more than 4194304" in end["error"]["message"], end

# A client that sends its whole body before it reads (as HTTP/1.1 clients do) gets the
# refusal, not a reset: the gateway reads what it refused of a body to its end (up to
# 64 MiB), whichever handler refused it. 32 MiB
# is more than the kernel's socket buffers hold, so a gateway that closed at its refusal
# would fail these writes with a broken pipe or a reset.
def sent_whole(path, first, more, headers):
    url = urllib.parse.urlsplit(sys.argv[1])
    conn = socket.create_connection((url.hostname, url.port))
    head = [f"POST {path} HTTP/1.1", f"Host: {url.netloc}", "Transfer-Encoding: chunked",
            "Connection: close"] + [f"{name}: {value}" for name, value in headers.items()]
    conn.sendall(("\r\n".join(head) + "\r\n\r\n").encode())
    piece = b"z" * (1 << 20)
    for chunk in [first] + [piece] * more:
        conn.sendall(b"%x\r\n" % len(chunk) + chunk + b"\r\n")
    conn.sendall(b"0\r\n\r\n")
    answer = b""
    while more_bytes := conn.recv(1 << 16):
        answer += more_bytes
    conn.close()
    status = int(answer.split(b" ", 2)[1])
    return status, answer.split(b"\r\n\r\n", 1)[1]

status, body = sent_whole("/process.Process/StreamInput",
                          envelope({"start": {"process": {"pid": proc.pid}}}) + struct.pack(">BI", 0, 5 << 20),
                          32, dict(headers, **{"Content-Type": "application/connect+json"}))
assert status == 200 and b"resource_exhausted" in body, (status, body[:300])
status, body = sent_whole("/sandboxes", b"{", 32,
                          {"X-API-Key": os.environ["E2B_API_KEY"], "Content-Type": "application/json"})
assert status == 413 and b"more than 16777216" in body, (status, body[:300])
# A body refused before any of it is read (an upload to a path outside the workspace).
status, body = sent_whole("/files?path=%2Fetc%2Fpasswd", b"x", 32, headers)
assert status == 400 and b"/etc/passwd" in body, (status, body[:300])

# The process is still there, reading: what comes next reaches it.
sbx.commands.send_stdin(proc.pid, "after\n")
assert proc.wait().stdout == "got after\n"
assert sbx.commands.run("echo alive").stdout == "alive\n"
sbx.kill()
print("PASS")
"#;

fn e2b_oversized_stream_messages_are_refused(mode: Mode) {
    let server = Server::start(mode, &[]);
    let gateway = Gateway::start(mode, &server);
    assert_passed(gateway.sdk(KEY_A, OVERSIZED));
}

fn gateway_refuses_bad_quota_flags(mode: Mode) {
    let server = Server::start(mode, &[]);
    let dir = TempDir::new("gateway-bad-quota");
    let keys = dir.file("keys", &format!("{KEY_A} alice\n"));
    let keys = keys.to_str().unwrap();
    for (flags, expected) in [
        (
            &["--max-memory-per-tenant", "12Q"][..],
            &["--max-memory-per-tenant", "'12Q' is not a size", "64M"][..],
        ),
        (
            &["--max-streams", "8", "--max-streams-per-tenant", "9"],
            &[
                "--max-streams-per-tenant 9: more than --max-streams (8)",
                "at most",
            ],
        ),
        (
            &["--max-tunnels-per-tenant", "0"],
            &[
                "--max-tunnels-per-tenant 0",
                "give 1 to --max-tunnels (1024)",
            ],
        ),
    ] {
        let mut args = vec![
            "gateway",
            "--listen",
            "127.0.0.1:0",
            "--server",
            server.socket(),
            "--api-keys",
            keys,
        ];
        args.extend_from_slice(flags);
        let output = command(mode, &args).output().expect("run brig gateway");
        assert_code(&output, 125);
        assert_one_line_error(&output, expected);
    }
    // A bad setting in the key file: its line, the setting and the fix.
    let bad = dir.file("bad", &format!("{KEY_A} alice max-memory=lots\n"));
    let args = [
        "gateway",
        "--listen",
        "127.0.0.1:0",
        "--server",
        server.socket(),
        "--api-keys",
        bad.to_str().unwrap(),
    ];
    let output = command(mode, &args).output().expect("run brig gateway");
    assert_code(&output, 125);
    assert_one_line_error(&output, &[":1: \"max-memory=lots\"", "max-memory=SIZE"]);
}
