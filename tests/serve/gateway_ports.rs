//! A server the sandboxed program runs, reached from the host (src/gateway/ports.rs,
//! src/serve/session_dial.rs), as root and rootless, in jails on `--net none` (no way
//! out, no network rule):
//!
//! - through `brig gateway` by E2B's official SDK (pinned, from PyPI): `python3 -m
//!   http.server` started as a background command, fetched by `get_host(8000)`'s host
//!   form and by the SDK's `E2b-Sandbox-Id` / `E2b-Sandbox-Port` headers (a 4 MiB file,
//!   byte-exact), over HTTP/1.1 and h2c (the host form's authority routing it); a
//!   WebSocket echo server in the jail (hand-written, test code) and the pinned
//!   `websockets` client on the host round-tripping text and a 100 KB binary message,
//!   by both forms, and one open when its sandbox is killed ending; a closed port, a
//!   port that is no port and a sandbox that does not exist answered with their status
//!   and a message naming the port; E2B's Node SDK (npm, pinned) reaching a server by
//!   its `getHost(8000)`;
//! - by `session_dial` itself, through the Python client's `Sandbox.dial(port)`: a
//!   connected socket, a closed port refused with "connection refused", ports 0 and
//!   70000 refused naming the field, and the jail holding no copy of the connection;
//!   through `brig session dial` (stdin to the server, its answer on stdout, a closed
//!   port one line on stderr and 125) and the Node client's `dial` over it; a jail on
//!   `--net filtered` dialed alike, and a server bound to ::1 only; and refused for a
//!   session on the host's network, whose loopback is the host's (a listener of the
//!   host's is not reached).
//!
//! - `allowPublicTraffic: false`: the create's (and connect's) `trafficAccessToken`
//!   required in `e2b-traffic-access-token` on the sandbox's ports, by both forms, HTTP
//!   and WebSocket (403 missing, 403 wrong, served with it, never passed to the jail's
//!   server), and `maskRequestHost` the `Host` that server sees; a public sandbox gets
//!   no token.
//!
//! Each Python program asserts as it goes and prints `PASS` at its end.

use crate::common;
use crate::gateway::{Gateway, KEY_A, assert_passed, sdk_python};

use common::net::require_tun;
use common::serve::{Server, client_copy};
use common::*;

both_modes!(
    e2b_get_host_serves_http_from_the_jail,
    e2b_get_host_relays_websockets,
    session_dial_hands_over_a_connection,
    session_dial_refuses_a_jail_on_the_hosts_network,
    session_dial_reaches_a_filtered_jail_and_ipv6_loopback,
    node_client_dials_a_server_in_the_jail,
    e2b_node_sdk_get_host_reaches_a_server_in_the_jail,
    e2b_private_traffic_needs_its_token_and_a_mask_is_the_host_seen,
);

/// Helpers every script starts with: `fetch` (status, headers, body) and `until_served`,
/// which retries while the server in the jail is not listening yet (the gateway's 502
/// "connection refused"), a bounded number of times.
const PRELUDE: &str = r#"
import hashlib, json, sys, time, urllib.error, urllib.request
gateway = sys.argv[1]

def fetch(path, headers):
    request = urllib.request.Request(gateway + path, headers=headers)
    try:
        with urllib.request.urlopen(request) as answer:
            return answer.status, answer.headers, answer.read()
    except urllib.error.HTTPError as err:
        return err.code, err.headers, err.read()

def until_served(attempt):
    for _ in range(600):
        try:
            return attempt()
        except NotYet:
            time.sleep(0.05)
    raise SystemExit("the server in the jail never listened")

class NotYet(Exception):
    pass

def start_one_shot(sbx):
    """A one-shot server on port 8003 of `sbx` that writes down the head of the request it
    is sent (head.txt in the workspace) and answers `ok`."""
    sbx.files.write("one_shot.py", (
        "import socket\n"
        "listener = socket.create_server(('127.0.0.1', 8003))\n"
        "connection, _ = listener.accept()\n"
        "head = b''\n"
        "while b'\\r\\n\\r\\n' not in head:\n"
        "    head += connection.recv(4096)\n"
        "open('head.txt', 'wb').write(head)\n"
        "connection.sendall(b'HTTP/1.1 200 OK\\r\\nContent-Length: 2\\r\\nConnection: close\\r\\n\\r\\nok')\n"
    ))
    sbx.commands.run("exec python3 one_shot.py", background=True)
"#;

const HTTP: &str = r#"
import os
from e2b import Sandbox
sbx = Sandbox.create(allow_internet_access=False)
sbx.files.write("site/hello.txt", "hello from the jail\n")
big = os.urandom(4 << 20)
sbx.files.write("site/big.bin", big)
sbx.commands.run("cd site && exec python3 -m http.server 8000 --bind 127.0.0.1", background=True)

# The SDK's host form: {port}-{sandboxID}.{domain}, sent as the Host of a request to
# the gateway (what a DNS name for it would lead to).
host = sbx.get_host(8000)
assert host.startswith(f"8000-{sbx.sandbox_id}."), host
def first_fetch():
    status, headers, body = fetch("/hello.txt", {"Host": host})
    if status == 502 and b"connection refused" in body:
        raise NotYet()
    return status, body
status, body = until_served(first_fetch)
assert (status, body) == (200, b"hello from the jail\n"), (status, body)

# The E2B_SANDBOX_URL form: the sandbox's id and the port in headers.
by_headers = {"E2b-Sandbox-Id": sbx.sandbox_id, "E2b-Sandbox-Port": "8000"}
status, headers, body = fetch("/big.bin", by_headers)
assert status == 200 and headers.get("Content-Length") == str(len(big)), (status, dict(headers))
assert hashlib.sha256(body).hexdigest() == hashlib.sha256(big).hexdigest(), len(body)
# A directory listing and a 404 come from the server in the jail, as it answers them.
status, _, body = fetch("/", by_headers)
assert status == 200 and b"hello.txt" in body and b"big.bin" in body, (status, body[:200])
status, _, _ = fetch("/nope", by_headers)
assert status == 404, status

# What the server in the jail is sent: the request's own headers and its Host, never the
# tenant's API key (a one-shot server there writes down the request's head).
start_one_shot(sbx)
sent = {"Host": sbx.get_host(8003), "X-API-Key": "e2b_secret", "X-Mine": "kept"}
def head_served():
    status, _, body = fetch("/asked?x=1", sent)
    if status == 502 and b"connection refused" in body:
        raise NotYet()
    return status, body
assert until_served(head_served) == (200, b"ok")
head = sbx.files.read("head.txt").lower()
assert head.startswith("get /asked?x=1 http/1.1\r\n"), head
assert f"host: {sbx.get_host(8003)}\r\n".lower() in head and "x-mine: kept\r\n" in head, head
assert "e2b_secret" not in head and "x-api-key" not in head, head

# HTTP/2 without TLS (h2c) from the client: the server in the jail gets HTTP/1.1, with
# the request's authority as its Host.
import httpx
with httpx.Client(base_url=gateway, http1=False, http2=True) as http:
    answer = http.get("/hello.txt", headers={"Host": host})
    assert (answer.http_version, answer.status_code, answer.content) == ("HTTP/2", 200, b"hello from the jail\n"), answer
    answer = http.get("/big.bin", headers=by_headers)
    assert answer.status_code == 200 and answer.content == big, (answer.status_code, len(answer.content))

# Nothing listens on 8001: 502, with a message naming the port and what to check.
status, _, body = fetch("/", {"Host": f"8001-{sbx.sandbox_id}.sandboxes.example"})
message = json.loads(body)["message"]
assert status == 502 and "port 8001" in message, (status, body)
assert "is a server listening on 0.0.0.0 or 127.0.0.1 inside the sandbox?" in message, message

# A body sent to it is read to its end first: the client gets its 502, and the
# connection serves the next request.
with httpx.Client(base_url=gateway) as http:
    closed = {"E2b-Sandbox-Id": sbx.sandbox_id, "E2b-Sandbox-Port": "8001"}
    answer = http.post("/upload", content=b"x" * (1 << 20), headers=closed)
    assert answer.status_code == 502 and "port 8001" in answer.json()["message"], answer.text
    answer = http.get("/hello.txt", headers=by_headers)
    assert (answer.status_code, answer.content) == (200, b"hello from the jail\n"), answer

# A port that is no port: 400, naming it.
for port in ["0", "70000", "http"]:
    status, _, body = fetch("/", {"E2b-Sandbox-Id": sbx.sandbox_id, "E2b-Sandbox-Port": port})
    assert status == 400 and port in json.loads(body)["message"], (port, status, body)

# A sandbox that does not exist: 502, as E2B's proxy answers.
status, _, body = fetch("/", {"Host": "8000-0123456789abcdef0123456789abcdef.sandboxes.example"})
assert status == 502 and "not found" in json.loads(body)["message"], (status, body)

# The server's process is the sandbox's like any command: killed, it serves no more.
server = [p for p in sbx.commands.list() if "http.server" in " ".join(p.args)][0]
assert sbx.commands.kill(server.pid)
def refused_now():
    status, _, body = fetch("/hello.txt", by_headers)
    # While it dies, a connection its listener held is reset (502 naming that).
    if status == 200 or b"connection refused" not in body:
        raise NotYet()
    return status, body
status, body = until_served(refused_now)
assert status == 502 and b"connection refused" in body, (status, body)

sbx.kill()
print("PASS")
"#;

/// `script` (after the prelude) passes, run by the SDK's python against a gateway in
/// front of a server, in `mode`.
fn sdk_script_passes(mode: Mode, script: &str) {
    let Some(python) = sdk_python() else { return };
    let server = Server::start(mode, &[]);
    let gateway = Gateway::start(mode, &server);
    let script = format!("{PRELUDE}\n{script}");
    assert_passed(Some(gateway.sdk_of(python, KEY_A, &script)));
}

fn e2b_get_host_serves_http_from_the_jail(mode: Mode) {
    sdk_script_passes(mode, HTTP);
}

/// A WebSocket echo server (RFC 6455, the least of it: text, binary, ping, close), run in
/// the jail by python3 on `sys.argv[1]`; test code, so written out by hand.
pub(crate) const ECHO_SERVER: &str = r#"
import base64, hashlib, socket, struct, sys, threading
GUID = b"258EAFA5-E914-47DA-95CA-C5AB0DC85B11"

def exactly(conn, count):
    data = b""
    while len(data) < count:
        chunk = conn.recv(count - len(data))
        if not chunk:
            raise EOFError()
        data += chunk
    return data

def serve(conn):
    with conn:
        head = b""
        while b"\r\n\r\n" not in head:
            chunk = conn.recv(4096)
            if not chunk:
                return
            head += chunk
        key = [line.split(b":", 1)[1].strip() for line in head.split(b"\r\n")
               if line.lower().startswith(b"sec-websocket-key:")][0]
        accept = base64.b64encode(hashlib.sha1(key + GUID).digest())
        conn.sendall(b"HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\n"
                     b"Connection: Upgrade\r\nSec-WebSocket-Accept: " + accept + b"\r\n\r\n")
        while True:
            first, second = exactly(conn, 2)
            opcode, length = first & 0x0F, second & 0x7F
            if length == 126:
                (length,) = struct.unpack(">H", exactly(conn, 2))
            elif length == 127:
                (length,) = struct.unpack(">Q", exactly(conn, 8))
            mask = exactly(conn, 4) if second & 0x80 else b"\0\0\0\0"
            masked = exactly(conn, length)
            payload = bytes(byte ^ mask[i % 4] for i, byte in enumerate(masked))
            if opcode == 8:
                conn.sendall(bytes([0x88, len(payload)]) + payload)
                return
            if opcode == 9:
                opcode = 10
            size = len(payload)
            if size < 126:
                header = bytes([0x80 | opcode, size])
            elif size < 65536:
                header = bytes([0x80 | opcode, 126]) + struct.pack(">H", size)
            else:
                header = bytes([0x80 | opcode, 127]) + struct.pack(">Q", size)
            conn.sendall(header + payload)

listener = socket.socket()
listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
listener.bind(("0.0.0.0", int(sys.argv[1])))
listener.listen()
while True:
    conn, _ = listener.accept()
    threading.Thread(target=serve, args=(conn,), daemon=True).start()
"#;

const WEBSOCKETS: &str = r#"
import os, socket, urllib.parse
from e2b import Sandbox
from websockets.exceptions import InvalidStatus
from websockets.sync.client import connect
sbx = Sandbox.create(allow_internet_access=False)
sbx.files.write("echo.py", sys.argv[2])
sbx.commands.run("exec python3 echo.py 8765", background=True)
address = urllib.parse.urlsplit(gateway).netloc

def round_trips(socket_to_gateway, uri, headers):
    def opened():
        try:
            return connect(uri, sock=socket_to_gateway(), additional_headers=headers)
        except InvalidStatus as err:
            if err.response.status_code == 502:
                raise NotYet()
            raise
    with until_served(opened) as websocket:
        websocket.send("hello through the gateway")
        assert websocket.recv() == "hello through the gateway"
        blob = os.urandom(100_000)
        websocket.send(blob)
        assert websocket.recv() == blob
        for n in range(20):
            websocket.send(f"message {n}")
        assert [websocket.recv() for _ in range(20)] == [f"message {n}" for n in range(20)]
        websocket.ping().wait()

host, port = address.rsplit(":", 1)
to_gateway = lambda: socket.create_connection((host, int(port)))
# The host form: ws://{get_host(8765)}/, over a connection to the gateway.
round_trips(to_gateway, f"ws://{sbx.get_host(8765)}/", {})
# The E2B_SANDBOX_URL form: the gateway's own address, the sandbox in headers.
round_trips(to_gateway, f"ws://{address}/echo",
            {"E2b-Sandbox-Id": sbx.sandbox_id, "E2b-Sandbox-Port": "8765"})

# A closed port refuses the handshake with 502.
try:
    connect(f"ws://{address}/", additional_headers={"E2b-Sandbox-Id": sbx.sandbox_id,
                                                    "E2b-Sandbox-Port": "8766"})
    raise SystemExit("a WebSocket to a closed port opened")
except InvalidStatus as err:
    assert err.response.status_code == 502, err
    assert b"port 8766" in err.response.body, err.response.body

# A WebSocket open when its sandbox is killed ends (the server in the jail dies with it;
# its end closes the relay) rather than hang; the gateway serves on.
from websockets.exceptions import ConnectionClosed
websocket = connect(f"ws://{address}/", additional_headers={"E2b-Sandbox-Id": sbx.sandbox_id,
                                                             "E2b-Sandbox-Port": "8765"})
websocket.send("before the end")
assert websocket.recv() == "before the end"
sbx.kill()
try:
    websocket.recv(timeout=60)
    raise SystemExit("a WebSocket outlived its sandbox")
except ConnectionClosed:
    pass
except TimeoutError:
    raise SystemExit("a WebSocket to a killed sandbox was left open")
Sandbox.create().kill()
print("PASS")
"#;

fn e2b_get_host_relays_websockets(mode: Mode) {
    sdk_script_passes(
        mode,
        &format!("sys.argv[2:] = [{ECHO_SERVER:?}]\n{WEBSOCKETS}"),
    );
}

const DIAL: &str = r#"
import os, subprocess, sys, time
from brig_client import BrigError, Sandbox
socket_path = sys.argv[1]
with Sandbox(socket=socket_path, options={"net": "none"}) as sb:
    sb.files.write("site/f.txt", "served\n")
    sb.commands.run("cd site && exec python3 -m http.server 8000 --bind 127.0.0.1", background=True)
    for _ in range(600):
        try:
            connection = sb.dial(8000)
            break
        except BrigError as err:
            assert err.kind == "bad_input" and "connection refused" in err.message, err
            time.sleep(0.05)
    else:
        raise SystemExit("the server in the jail never listened")
    with connection:
        assert connection.getpeername()[1] == 8000, connection.getpeername()
        connection.sendall(b"GET /f.txt HTTP/1.0\r\n\r\n")
        answer = b""
        while chunk := connection.recv(65536):
            answer += chunk
    assert answer.startswith(b"HTTP/1.0 200") and answer.endswith(b"\r\n\r\nserved\n"), answer

    # The jail holds no copy of a connection it handed over: its init closed its own
    # (init's descriptors are not the programs' to read: it is undumpable), and a
    # program started while one is held out has only its own pipes.
    held = sb.dial(8000)
    descriptors = sb.commands.run("for fd in /proc/self/fd/*; do readlink $fd; done").stdout
    held.close()
    assert "pipe:" in descriptors and "socket:" not in descriptors, descriptors

    try:
        sb.dial(8001)
        raise SystemExit("a closed port was dialed")
    except BrigError as err:
        assert (err.kind, err.exit_code) == ("bad_input", 125), err
        assert "port 8001" in err.message and "connection refused" in err.message, err.message
        assert "is a server listening on 0.0.0.0 or 127.0.0.1 inside the sandbox?" in err.message, err.message
    for port in (0, 70000):
        try:
            sb.dial(port)
            raise SystemExit(f"port {port} was dialed")
        except BrigError as err:
            assert err.kind == "bad_input" and '"port"' in err.message and "1-65535" in err.message, err
    # The session serves on after each refusal.
    assert sb.commands.run("echo still").stdout == "still\n"

    # `brig session dial`, as nc: standard input to the server, its answer to stdout.
    brig = [sys.argv[2], "session", "dial", "--server", socket_path, "--session", sb.session_id]
    answer = subprocess.run(brig + ["8000"], input=b"GET /f.txt HTTP/1.0\r\n\r\n", capture_output=True)
    assert answer.returncode == 0 and answer.stdout.startswith(b"HTTP/1.0 200"), answer
    assert answer.stdout.endswith(b"\r\n\r\nserved\n"), answer
    refused = subprocess.run(brig + ["8001"], stdin=subprocess.DEVNULL, capture_output=True)
    assert refused.returncode == 125 and refused.stdout == b"", refused
    assert refused.stderr.count(b"\n") == 1 and b"connection refused" in refused.stderr, refused
print("PASS")
"#;

/// `script` passes, run by python3 (as `mode`'s user) with the Python client on its path
/// and `args` as `sys.argv[1:]`.
fn python_client_script_passes(mode: Mode, script: &str, args: &[&str]) {
    let client = client_copy("python");
    let mut argv = vec!["-c", script];
    argv.extend_from_slice(args);
    let mut command = command_as(mode, interpreter("python3"), &argv);
    command.env("PYTHONPATH", client.path().join("python"));
    let output = output_of(command);
    let out = assert_success(&output);
    assert_eq!(out.lines().last(), Some("PASS"), "{}", describe(&output));
}

fn session_dial_hands_over_a_connection(mode: Mode) {
    let server = Server::start(mode, &[]);
    let brig = brig_for(mode).to_str().unwrap();
    python_client_script_passes(mode, DIAL, &[server.socket(), brig]);
}

/// A session on `--net filtered` (a TUN device, brig's relay, an empty allow list) is
/// dialed all the same, inside its own namespace; a server bound to ::1 only is reached
/// by init's second try.
const DIAL_FILTERED: &str = r#"
import sys, time
from brig_client import BrigError, Sandbox

def get(sb, port):
    for _ in range(600):
        try:
            connection = sb.dial(port)
            break
        except BrigError as err:
            assert "connection refused" in err.message, err
            time.sleep(0.05)
    else:
        raise SystemExit(f"the server on port {port} never listened")
    with connection:
        connection.sendall(b"GET /f.txt HTTP/1.0\r\n\r\n")
        answer = b""
        while chunk := connection.recv(65536):
            answer += chunk
        return connection.family.name, answer

with Sandbox(socket=sys.argv[1]) as sb:
    # Filtered: brig's TUN device beside lo.
    devices = [line.split(":")[0].strip() for line in sb.commands.run("cat /proc/net/dev").stdout.splitlines()[2:]]
    assert len(devices) == 2 and "lo" in devices, devices
    sb.files.write("site/f.txt", "filtered\n")
    sb.commands.run("cd site && exec python3 -m http.server 8000 --bind 127.0.0.1", background=True)
    family, answer = get(sb, 8000)
    assert family == "AF_INET" and answer.endswith(b"\r\n\r\nfiltered\n"), (family, answer)
    sb.commands.run("cd site && exec python3 -m http.server 8002 --bind ::1", background=True)
    family, answer = get(sb, 8002)
    assert family == "AF_INET6" and answer.endswith(b"\r\n\r\nfiltered\n"), (family, answer)
print("PASS")
"#;

fn session_dial_reaches_a_filtered_jail_and_ipv6_loopback(mode: Mode) {
    if !require_tun(mode) {
        return;
    }
    let server = Server::start(mode, &["--pool", "0", "--net", "filtered"]);
    python_client_script_passes(mode, DIAL_FILTERED, &[server.socket()]);
}

/// A session on the host's network (`--net host`, the server's own choice) has no
/// loopback of its own: 127.0.0.1 there is the host's, and a listener of the host's on
/// the port asked for must not be reached through the server (the server would connect
/// as its own uid where the client may not).
const DIAL_HOST_NETWORK: &str = r#"
import socket, sys
from brig_client import BrigError, Sandbox
host_listener = socket.create_server(("127.0.0.1", 0))
port = host_listener.getsockname()[1]
host_listener.settimeout(0)
with Sandbox(socket=sys.argv[1]) as sb:
    try:
        sb.dial(port)
        raise SystemExit("a session on the host's network dialed the host's loopback")
    except BrigError as err:
        assert err.kind == "bad_input" and "--net host" in err.message, err
    try:
        host_listener.accept()
        raise SystemExit("the host's listener was reached")
    except BlockingIOError:
        pass
    assert sb.commands.run("echo still").stdout == "still\n"
print("PASS")
"#;

fn session_dial_refuses_a_jail_on_the_hosts_network(mode: Mode) {
    let server = Server::start(mode, &["--net", "host"]);
    python_client_script_passes(mode, DIAL_HOST_NETWORK, &[server.socket()]);
}

/// The Node client's `dial` (through `brig session dial`: Node cannot take a descriptor).
const NODE_DIAL: &str = r#"
const [module, socket, brig] = process.argv.slice(1);
const { Sandbox, BrigError } = require(module);
const assert = require("assert");
function fetchOnce(sandbox, port) {
  return new Promise((resolve, reject) => {
    const connection = sandbox.dial(port, { brig });
    const chunks = [];
    connection.on("data", (chunk) => chunks.push(chunk));
    connection.on("end", () => resolve(Buffer.concat(chunks).toString()));
    connection.on("error", reject);
    connection.end("GET /f.txt HTTP/1.0\r\n\r\n");
  });
}
(async () => {
  const sandbox = await Sandbox.create({ socket, options: { net: "none" } });
  await sandbox.files.write("site/f.txt", "served to node\n");
  await sandbox.commands.run("cd site && exec python3 -m http.server 8000 --bind 127.0.0.1", { background: true });
  let answer;
  for (let attempt = 0; answer === undefined; attempt++) {
    try {
      answer = await fetchOnce(sandbox, 8000);
    } catch (error) {
      assert(error instanceof BrigError && /connection refused/.test(error.message), error);
      assert(attempt < 600, "the server in the jail never listened");
      await new Promise((resolve) => setTimeout(resolve, 50));
    }
  }
  assert(answer.startsWith("HTTP/1.0 200") && answer.endsWith("\r\n\r\nserved to node\n"), answer);
  await assert.rejects(fetchOnce(sandbox, 8001), (error) =>
    error instanceof BrigError && error.kind === "bad_input" && error.exitCode === 125 &&
    /port 8001/.test(error.message) && /connection refused/.test(error.message));
  await sandbox.close();
  console.log("PASS");
})().catch((error) => { console.error(error); process.exit(1); });
"#;

fn node_client_dials_a_server_in_the_jail(mode: Mode) {
    if !require_program("node", "apt install nodejs") {
        return;
    }
    let server = Server::start(mode, &[]);
    let client = client_copy("node");
    let module = client.path().join("node");
    let brig = brig_for(mode).to_str().unwrap();
    let output = output_of(command_as(
        mode,
        interpreter("node"),
        &[
            "-e",
            NODE_DIAL,
            "--",
            module.to_str().unwrap(),
            server.socket(),
            brig,
        ],
    ));
    let out = assert_success(&output);
    assert_eq!(out.lines().last(), Some("PASS"), "{}", describe(&output));
}

/// E2B's Node SDK: `getHost(8000)` leads to the server in the jail (its host form sent as
/// the `Host` of a request to the gateway, as a DNS name for it would lead there).
const NODE_SDK_GET_HOST: &str = r#"
const { Sandbox } = require("e2b");
const assert = require("node:assert/strict");
const http = require("node:http");
const gateway = new URL(process.env.E2B_SANDBOX_URL);
function get(host) {
  return new Promise((resolve, reject) => {
    const request = http.get({ hostname: gateway.hostname, port: gateway.port, path: "/page.txt", headers: { Host: host } }, (answer) => {
      const chunks = [];
      answer.on("data", (chunk) => chunks.push(chunk));
      answer.on("end", () => resolve([answer.statusCode, Buffer.concat(chunks).toString()]));
    });
    request.on("error", reject);
  });
}
(async () => {
  const sbx = await Sandbox.create({ allowInternetAccess: false });
  await sbx.files.write("site/page.txt", "from node's sandbox\n");
  await sbx.commands.run("cd site && exec python3 -m http.server 8000", { background: true });
  const host = sbx.getHost(8000);
  assert.ok(host.startsWith(`8000-${sbx.sandboxId}.`), host);
  let answer;
  for (let attempt = 0; ; attempt++) {
    answer = await get(host);
    if (answer[0] !== 502 || !answer[1].includes("connection refused")) break;
    assert.ok(attempt < 600, "the server in the jail never listened");
    await new Promise((resolve) => setTimeout(resolve, 50));
  }
  assert.deepEqual(answer, [200, "from node's sandbox\n"]);
  await sbx.kill();
  console.log("PASS");
})().catch((err) => {
  console.error(err);
  process.exit(1);
});
"#;

fn e2b_node_sdk_get_host_reaches_a_server_in_the_jail(mode: Mode) {
    crate::gateway_node::node_sdk_script_passes(mode, NODE_SDK_GET_HOST);
}

const PRIVATE: &str = r#"
import socket, urllib.parse
from e2b import Sandbox
from websockets.exceptions import InvalidStatus
from websockets.sync.client import connect
TOKEN_HEADER = "e2b-traffic-access-token"
sbx = Sandbox.create(allow_internet_access=False, network={
    "allow_public_traffic": False, "mask_request_host": "app.example:${PORT}"})
token = sbx.traffic_access_token
assert isinstance(token, str) and len(token) == 32, token
assert Sandbox.connect(sbx.sandbox_id).traffic_access_token == token
sbx.files.write("site/hello.txt", "hello\n")
sbx.commands.run("cd site && exec python3 -m http.server 8000 --bind 127.0.0.1", background=True)

host_form = {"Host": sbx.get_host(8000)}
header_form = {"E2b-Sandbox-Id": sbx.sandbox_id, "E2b-Sandbox-Port": "8000"}
# Without the token, or with another: 403 in E2B's words, before the jail is asked.
for form in (host_form, header_form):
    status, _, body = fetch("/hello.txt", form)
    assert status == 403 and b"Token header 'e2b-traffic-access-token' is missing" in body, (status, body)
    status, _, body = fetch("/hello.txt", {**form, TOKEN_HEADER: "0" * 32})
    assert status == 403 and b"Provided token in header 'e2b-traffic-access-token' is invalid" in body, (status, body)
# With it: the jail's server answers, by both forms.
def served():
    status, _, body = fetch("/hello.txt", {**host_form, TOKEN_HEADER: token})
    if status == 502 and b"connection refused" in body:
        raise NotYet()
    return status, body
assert until_served(served) == (200, b"hello\n")
status, _, body = fetch("/hello.txt", {**header_form, TOKEN_HEADER: token})
assert (status, body) == (200, b"hello\n"), (status, body)
# envd is not a port of the sandbox's program: no traffic token asked.
assert sbx.commands.run("echo envd").stdout == "envd\n"

# The Host the jail's server sees is the mask, the port in it; the token is not passed.
start_one_shot(sbx)
def head_served():
    status, _, body = fetch("/asked", {"Host": sbx.get_host(8003), TOKEN_HEADER: token})
    if status == 502 and b"connection refused" in body:
        raise NotYet()
    return status, body
assert until_served(head_served) == (200, b"ok")
head = sbx.files.read("head.txt").lower()
assert "host: app.example:8003\r\n" in head, head
assert token not in head and TOKEN_HEADER not in head, head

# A WebSocket's handshake: refused without the token, relayed with it.
sbx.files.write("echo.py", sys.argv[2])
sbx.commands.run("exec python3 echo.py 8765", background=True)
address = urllib.parse.urlsplit(gateway).netloc
gateway_host, gateway_port = address.rsplit(":", 1)
# Both forms: the gateway's address with the sandbox in headers; the host form
# ws://{get_host(8765)}/ over a connection to the gateway.
forms = [
    (f"ws://{address}/", {"E2b-Sandbox-Id": sbx.sandbox_id, "E2b-Sandbox-Port": "8765"}),
    (f"ws://{sbx.get_host(8765)}/", {}),
]
def ws(uri, headers):
    return connect(uri, additional_headers=headers,
                   sock=socket.create_connection((gateway_host, int(gateway_port))))
for uri, headers in forms:
    try:
        ws(uri, headers)
        raise SystemExit(f"a WebSocket to {uri} without the traffic token opened")
    except InvalidStatus as err:
        assert err.response.status_code == 403, err
    def opened():
        try:
            return ws(uri, {**headers, TOKEN_HEADER: token})
        except InvalidStatus as err:
            if err.response.status_code == 502:
                raise NotYet()
            raise
    with until_served(opened) as websocket:
        websocket.send("private hello")
        assert websocket.recv() == "private hello"

# The default is public: no token given, none needed.
public = Sandbox.create(allow_internet_access=False)
assert public.traffic_access_token is None
for bad, expected in (({"mask_request_host": "a b"}, "mask request host is not valid"),):
    try:
        Sandbox.create(network=bad)
        raise SystemExit(f"{bad} made a sandbox")
    except Exception as err:
        assert expected in str(err), err
sbx.kill()
public.kill()
print("PASS")
"#;

fn e2b_private_traffic_needs_its_token_and_a_mask_is_the_host_seen(mode: Mode) {
    sdk_script_passes(
        mode,
        &format!("sys.argv[2:] = [{ECHO_SERVER:?}]\n{PRIVATE}"),
    );
}
