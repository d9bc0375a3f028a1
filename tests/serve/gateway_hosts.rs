//! Many brig hosts behind many gateways (src/gateway/route.rs, health.rs), all processes
//! on loopback, as root and rootless: three hosts (a `brig serve` and a `brig gateway
//! --host-id` beside it each: h0, h1, h2; h0 knows the others by `--peers`) and two
//! routers (gateways without a server),
//! driven by E2B's official SDKs (e2b, e2b-code-interpreter, pinned from PyPI):
//!
//! - sandboxes created through one router spread over the hosts (their ids name them);
//!   each is used (a command, a file written and read, `run_code`) through the *other*
//!   router, and one through a host's gateway that is not its owner (host to host);
//!   lists through a router hold every host's;
//! - h2 told to stop (SIGTERM to its gateway) while a command runs in one of its
//!   sandboxes: `/readyz` says draining at once (503), creates go to the other hosts, the
//!   command ends with an SDK error once `--drain-grace` has passed (no hang), the gateway
//!   exits 0 and `/readyz` has nobody to answer;
//! - h1 killed (SIGKILL, gateway and server): its sandboxes are the SDK's NotFound
//!   through either router (the error's kind asserted; only the hang is bounded, by the
//!   SDK's request timeout), its server's processes are gone, h0's sandboxes work on;
//! - `/metrics` of a host and of a router parsed by the pinned `prometheus-client`'s
//!   text parser; `/healthz` and `/readyz` of hosts and routers;
//! - a router joins an `Upgrade` (a WebSocket's handshake, to a sandbox's port) end to end
//!   with a peer of the test's own that switches protocols and echoes: bytes go both ways
//!   after the 101, one exchange at a time (nothing waits for the whole stream).
//!
//! Each Python program asserts as it goes and prints `PASS` (after its own lines) last.

use crate::common;
use crate::gateway::{KEY_A, KEY_B, assert_passed, spawn_gateway};

use common::e2b::{PYTHON_GET, PYTHON_METRICS};
use common::serve::Server;
use common::*;
use std::io::BufRead;
use std::path::Path;
use std::process::{Command, Output, Stdio};
use std::time::Duration;

both_modes!(
    sandboxes_are_routed_across_hosts_by_id,
    a_router_joins_an_upgrade_end_to_end,
);

#[test]
fn gateway_refuses_bad_routing_options() {
    refuses_bad_routing_options(Mode::Root);
}

/// A `brig gateway` with `args`, and the URL it listens on.
struct Gateway {
    running: Option<Running>,
    url: String,
}

impl Gateway {
    fn start(mode: Mode, args: &[&str]) -> Gateway {
        let mut all = vec!["gateway"];
        all.extend_from_slice(args);
        let (running, url) = spawn_gateway(mode, &all);
        Gateway {
            running: Some(running),
            url,
        }
    }

    fn pid(&self) -> u32 {
        self.running.as_ref().expect("running").pid()
    }

    /// Waits for the gateway (told to stop by someone): its output.
    fn wait(&mut self) -> Output {
        self.running.take().expect("running").wait()
    }
}

impl Drop for Gateway {
    fn drop(&mut self) {
        if let Some(running) = self.running.take() {
            kill(running.pid(), libc::SIGTERM);
            let output = running.wait();
            if !std::thread::panicking() {
                assert_eq!(code(&output), 0, "brig gateway: {}", describe(&output));
            }
        }
    }
}

/// `script` run by the SDK's python with `args` as `sys.argv[1:]` and tenant A's key.
fn sdk(python: &Path, script: &str, args: &[&str]) -> Output {
    let mut command = Command::new(python);
    command
        .arg("-c")
        .arg(script)
        .args(args)
        .env_clear()
        .env("PATH", "/usr/bin:/bin")
        .env("E2B_API_KEY", KEY_A)
        .stdin(Stdio::null());
    output_of(command)
}

/// What every script starts with: `via(url)` points the SDK at a gateway; `get(url)` is
/// a plain HTTP GET (status, body).
const PRELUDE: &str = r#"
import json, os, sys, time, urllib.request, urllib.error
from e2b_code_interpreter import Sandbox
from e2b import NotFoundException, SandboxException
def via(url):
    os.environ["E2B_API_URL"] = url
    os.environ["E2B_SANDBOX_URL"] = url
"#;

/// argv: router A, router B, h0's gateway, h0, h1, h2's URLs, another tenant's key.
/// Creates six sandboxes through A, uses each through B (one through h0's gateway
/// instead, when not h0's), asks their metrics at once, prints their ids as JSON.
const SPREAD: &str = r#"
router_a, router_b, host0 = sys.argv[1:4]
for url in sys.argv[1:6]:
    assert get(url + "/healthz")[0] == 200, url
    status, body = get(url + "/readyz")
    assert status == 200 and json.loads(body)["ready"] is True, (url, body)
via(router_a)
boxes = [Sandbox.create(timeout=300) for _ in range(6)]
ids = [box.sandbox_id for box in boxes]
hosts = {sandbox_id.rsplit("-", 1)[0] for sandbox_id in ids}
assert len(hosts) >= 2 and hosts <= {"h0", "h1", "h2"}, ids
via(router_b)
for number, sandbox_id in enumerate(ids):
    # One sandbox of another host reached through h0's own gateway (host to host).
    if not sandbox_id.startswith("h0-") and number % 2:
        via(host0)
    box = Sandbox.connect(sandbox_id)
    assert box.sandbox_id == sandbox_id
    assert box.commands.run(f"echo {number}").stdout == f"{number}\n"
    box.files.write("/home/user/note", f"note {number}")
    assert box.files.read("/home/user/note") == f"note {number}"
    assert box.run_code(f"{number} * 6").text == str(number * 6)
    via(router_b)
listed = {sandbox.sandbox_id for sandbox in Sandbox.list().next_items()}
assert set(ids) <= listed, (ids, listed)
# The metrics of many sandboxes (E2B's GET /sandboxes/metrics): each host asked for its
# own ids, merged under the ids as asked; an id no host owns left out; through a router
# and through a host's gateway (its own ids and its peers'); another tenant gets none.
def many_metrics(url, key, asked):
    request = urllib.request.Request(f"{url}/sandboxes/metrics?sandbox_ids={','.join(asked)}",
                                     headers={"X-API-Key": key})
    with urllib.request.urlopen(request, timeout=30) as answer:
        return json.loads(answer.read())["sandboxes"]
nobody = ["h1-" + "0" * 32, "0" * 32, "h9-" + "1" * 32]
for url in (router_b, host0):
    metrics = many_metrics(url, os.environ["E2B_API_KEY"], ids + nobody)
    assert sorted(metrics) == sorted(ids), (url, sorted(metrics), ids)
    assert all(m["cpuCount"] >= 1 and "memUsed" in m and "diskTotal" in m for m in metrics.values()), metrics
    assert many_metrics(url, sys.argv[6], ids) == {}, url
status, body = get(router_b + "/sandboxes/metrics")
assert status in (400, 401), (status, body)
print(json.dumps(ids))
print("PASS")
"#;

/// argv: router A, h2's gateway, h2's gateway's pid, a sandbox of h2's. A command runs
/// there while h2 is told to stop: h2 says draining at once, creates go elsewhere, the
/// command ends with the SDK's error, not a hang.
const DRAIN: &str = r#"
import signal, threading
router_a, host2, pid, sandbox_id = sys.argv[1:5]
via(router_a)
box = Sandbox.connect(sandbox_id)
running = box.commands.run("sleep 600", background=True)
os.kill(int(pid), signal.SIGTERM)
for _ in range(300):
    status, body = get(host2 + "/readyz")
    if status == 503:
        break
    time.sleep(0.01)
assert status == 503 and "draining" in json.loads(body)["reason"], (status, body)
fresh = [Sandbox.create(timeout=60) for _ in range(3)]
assert all(not new.sandbox_id.startswith("h2-") for new in fresh), [new.sandbox_id for new in fresh]
for new in fresh:
    assert new.commands.run("echo fresh").stdout == "fresh\n"
    new.kill()
try:
    running.wait()
    raise SystemExit("a command of a drained host ended without an error")
except SandboxException as err:
    print("drained:", type(err).__name__, err)
print("PASS")
"#;

/// argv: router A, router B, h0's gateway, h2's gateway, then sandbox ids of h1 and of
/// h0. Connects to h1's sandbox through both routers, says `connected` and waits for a
/// line (h1 is killed meanwhile): then every call for it is the SDK's NotFound through
/// either router; h0's sandbox works on; a router's metrics and h0's parse; `/readyz`
/// says h2 is gone.
const KILLED: &str = r#"
router_a, router_b, host0, host2, dead, alive = sys.argv[1:7]
boxes = []
for router in (router_a, router_b):
    via(router)
    boxes.append((router, Sandbox.connect(dead)))
print("connected", flush=True)
sys.stdin.readline()
for router, box in boxes:
    via(router)
    for what, call in [
        ("command", lambda: box.commands.run("echo x", request_timeout=30)),
        ("file", lambda: box.files.read("/home/user/note", request_timeout=30)),
        ("code", lambda: box.run_code("1", request_timeout=30)),
        ("connect", lambda: Sandbox.connect(dead)),
    ]:
        try:
            call()
            raise SystemExit(f"{what} of a killed host's sandbox through {router} did not fail")
        except NotFoundException as err:
            print(what, type(err).__name__)
via(router_b)
box = Sandbox.connect(alive)
assert box.commands.run("echo alive").stdout == "alive\n"
assert box.run_code("21 * 2").text == "42"
status, body = get(host2 + "/readyz")
assert status is None, (status, body)
status, body = get(router_a + "/readyz")
assert status == 200, (status, body)
hosts = json.loads(body)["hosts"]
assert hosts["h0"] == "ready" and hosts["h1"] != "ready" and hosts["h2"] != "ready", hosts

host = host_metrics(host0)
kinds = {s.labels["kind"] for s in host["brig_request_seconds"].samples}
assert "forwarded" in kinds, kinds
router = families(router_a)
assert router["brig_request_seconds"].type == "histogram"
failures = {s.labels["kind"]: s.value for s in router["brig_failures"].samples if s.name == "brig_failures_total"}
assert failures.get("peer_unreachable", 0) >= 1, failures
assert "brig_sandbox_slots_free" not in router
print("PASS")
"#;

/// A host: its server, and its gateway named `name` (knowing `peers`, if any).
struct Host {
    gateway: Gateway,
    server: Server,
}

fn start_host(mode: Mode, name: &str, peers: Option<&str>, keys: &Path) -> Host {
    let server = Server::start(mode, &[]);
    let mut args = vec![
        "--listen",
        "127.0.0.1:0",
        "--server",
        server.socket(),
        "--api-keys",
        keys.to_str().unwrap(),
        "--host-id",
        name,
        "--drain-grace",
        "2s",
    ];
    if let Some(peers) = peers {
        args.extend(["--peers", peers]);
    }
    let gateway = Gateway::start(mode, &args);
    Host { gateway, server }
}

/// The pids of processes whose command line names `socket` (a server's, its runners').
fn processes_of(socket: &str) -> Vec<u32> {
    let mut found = Vec::new();
    for entry in std::fs::read_dir("/proc").into_iter().flatten().flatten() {
        let Some(pid) = entry
            .file_name()
            .to_str()
            .and_then(|n| n.parse::<u32>().ok())
        else {
            continue;
        };
        let cmdline = std::fs::read(entry.path().join("cmdline")).unwrap_or_default();
        if String::from_utf8_lossy(&cmdline).contains(socket) {
            found.push(pid);
        }
    }
    found
}

/// The ids the SPREAD script printed before PASS.
fn ids_of(output: &Output) -> Vec<String> {
    let out = stdout(output);
    let line = out.lines().rev().nth(1).expect("the ids' line");
    serde_json::from_str(line).unwrap_or_else(|err| panic!("{line:?}: {err}"))
}

fn sandboxes_are_routed_across_hosts_by_id(mode: Mode) {
    let Some(python) = common::e2b::sdk_python() else {
        return;
    };
    let keys_dir = TempDir::new("hosts-keys");
    let keys = keys_dir.file("keys", &format!("{KEY_A} alice\n{KEY_B} bob\n"));
    // h1 and h2 first: h0 knows them (it forwards to them), they need not know it.
    let host2 = start_host(mode, "h2", None, &keys);
    let host1 = start_host(mode, "h1", None, &keys);
    let others = format!("h1={},h2={}", host1.gateway.url, host2.gateway.url);
    let host0 = start_host(mode, "h0", Some(&others), &keys);
    let urls = [
        host0.gateway.url.clone(),
        host1.gateway.url.clone(),
        host2.gateway.url.clone(),
    ];
    let host_url = |host: usize| urls[host].clone();
    let mut hosts = vec![host0, host1, host2];
    let peers = format!("h0={},{others}", urls[0]);
    let routers: Vec<Gateway> = (0..2)
        .map(|_| Gateway::start(mode, &["--listen", "127.0.0.1:0", "--peers", &peers]))
        .collect();
    let (router_a, router_b) = (routers[0].url.clone(), routers[1].url.clone());

    let spread = sdk(
        python,
        &format!("{PRELUDE}{PYTHON_GET}{SPREAD}"),
        &[
            &router_a,
            &router_b,
            &host_url(0),
            &host_url(1),
            &host_url(2),
            KEY_B,
        ],
    );
    assert_passed(Some(spread.clone()));
    let ids = ids_of(&spread);
    let of = |host: &str| {
        ids.iter()
            .find(|id| id.starts_with(&format!("{host}-")))
            .unwrap_or_else(|| panic!("no sandbox on {host}: {ids:?}"))
            .clone()
    };

    // h2 drains: its gateway exits 0 once its sandboxes are ended, then its server stops.
    let drained = sdk(
        python,
        &format!("{PRELUDE}{PYTHON_GET}{DRAIN}"),
        &[
            &router_a,
            &host_url(2),
            &hosts[2].gateway.pid().to_string(),
            &of("h2"),
        ],
    );
    assert_passed(Some(drained.clone()));
    assert!(
        stdout(&drained).contains("drained: "),
        "{}",
        describe(&drained)
    );
    let mut host2 = hosts.pop().expect("h2");
    let gateway = host2.gateway.wait();
    assert_eq!(code(&gateway), 0, "{}", describe(&gateway));
    let said = stderr(&gateway);
    assert!(said.contains("brig gateway: draining"), "{said}");
    assert!(said.contains("brig gateway: drained: ended"), "{said}");
    drop(host2);

    let mut killed = Command::new(python);
    killed
        .arg("-c")
        .arg(format!("{PRELUDE}{PYTHON_GET}{PYTHON_METRICS}{KILLED}"))
        .args([
            &router_a,
            &router_b,
            &host_url(0),
            &host_url(2),
            &of("h1"),
            &of("h0"),
        ])
        .env_clear()
        .env("PATH", "/usr/bin:/bin")
        .env("E2B_API_KEY", KEY_A)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let mut killed = Running::spawn(killed);
    let mut line = String::new();
    let mut said = std::io::BufReader::new(killed.child.stdout.take().expect("piped"));
    said.read_line(&mut line)
        .expect("read the script's first line");
    if line != "connected\n" {
        panic!("the script said {line:?}: {}", describe(&killed.wait()));
    }
    let host1 = hosts.pop().expect("h1");
    let socket = host1.server.socket().to_string();
    let Host {
        mut gateway,
        mut server,
    } = host1;
    kill(gateway.pid(), libc::SIGKILL);
    let server_running = server.running.take().expect("running");
    kill(server_running.pid(), libc::SIGKILL);
    let _ = gateway.wait();
    let _ = server_running.wait();
    assert!(
        wait_until(Duration::from_secs(10), || processes_of(&socket).is_empty()),
        "processes of the killed server left: {:?}",
        processes_of(&socket)
    );
    let _ = std::fs::remove_file(&socket);
    drop(server);
    use std::io::Write;
    killed
        .child
        .stdin
        .take()
        .expect("piped")
        .write_all(b"go\n")
        .expect("tell the script h1 is gone");
    let mut rest = String::new();
    std::io::Read::read_to_string(&mut said, &mut rest).expect("read the script's output");
    let output = killed.wait();
    assert!(
        output.status.success() && rest.lines().last() == Some("PASS"),
        "{rest}\n{}",
        describe(&output)
    );
    for what in ["command", "file", "code", "connect"] {
        assert_eq!(rest.matches(&format!("{what} ")).count(), 2, "{rest}");
    }
}

fn refuses_bad_routing_options(mode: Mode) {
    for (args, expected) in [
        (
            &["--listen", "127.0.0.1:0"][..],
            "a router (no --server) needs --peers",
        ),
        (
            &[
                "--listen",
                "127.0.0.1:0",
                "--peers",
                "H0=http://127.0.0.1:1",
            ][..],
            "--peers: \"H0\": use lowercase letters",
        ),
        (
            &["--listen", "127.0.0.1:0", "--peers", "h0"][..],
            "--peers h0: no URL for it",
        ),
        (
            &["--listen", "127.0.0.1:0", "--peer-url", "http://hosts:3000"][..],
            "no {host} in it",
        ),
        (
            &[
                "--listen",
                "127.0.0.1:0",
                "--host-id",
                "a-name-far-too-long-for-a-label",
            ][..],
            "is 31 characters; give 1 to 24",
        ),
        (
            &[
                "--listen",
                "127.0.0.1:0",
                "--peers",
                "h0=http://127.0.0.1:1",
                "--create-url",
                "https://hosts",
            ][..],
            "--create-url https://hosts: give an http:// URL",
        ),
    ] {
        let mut all = vec!["gateway"];
        all.extend_from_slice(args);
        let output = run(mode, &all);
        assert_eq!(code(&output), 125, "{args:?}: {}", describe(&output));
        assert_one_line_error(&output, &[expected]);
    }
}

/// An HTTP message's head (through its blank line), read a byte at a time so that
/// nothing after it is taken.
fn read_head(connection: &mut std::net::TcpStream) -> String {
    use std::io::Read;
    let mut head = Vec::new();
    let mut byte = [0u8; 1];
    while !head.ends_with(b"\r\n\r\n") {
        connection.read_exact(&mut byte).expect("read an HTTP head");
        head.push(byte[0]);
    }
    String::from_utf8_lossy(&head).into_owned()
}

/// A peer of the test's own on loopback: it reads one request's head, answers 101 and
/// echoes every byte after it in upper case. Its address, and the request head it read.
fn upgrading_peer() -> (u16, std::thread::JoinHandle<String>) {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let port = listener.local_addr().expect("address").port();
    let peer = std::thread::spawn(move || {
        use std::io::{Read, Write};
        let (mut connection, _) = listener.accept().expect("accept");
        let head = read_head(&mut connection);
        connection
            .write_all(b"HTTP/1.1 101 Switching Protocols\r\nConnection: upgrade\r\nUpgrade: websocket\r\n\r\n")
            .expect("switch");
        let mut chunk = [0u8; 256];
        loop {
            let read = connection.read(&mut chunk).unwrap_or(0);
            if read == 0 {
                break;
            }
            connection
                .write_all(&chunk[..read].to_ascii_uppercase())
                .expect("echo");
        }
        head
    });
    (port, peer)
}

fn a_router_joins_an_upgrade_end_to_end(mode: Mode) {
    use std::io::{Read, Write};
    let (port, peer) = upgrading_peer();
    let router = Gateway::start(
        mode,
        &[
            "--listen",
            "127.0.0.1:0",
            "--peers",
            &format!("h0=http://127.0.0.1:{port}"),
        ],
    );
    let address = router.url.strip_prefix("http://").expect("an http URL");
    let mut client = std::net::TcpStream::connect(address).expect("connect to the router");
    client
        .set_read_timeout(Some(Duration::from_secs(30)))
        .expect("a read timeout");
    let sandbox = "h0-0123456789abcdef0123456789abcdef";
    write!(
        client,
        "GET /socket HTTP/1.1\r\nHost: 8080-{sandbox}.brig.test\r\nConnection: Upgrade\r\nUpgrade: websocket\r\nSec-WebSocket-Version: 13\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n\r\n"
    )
    .expect("send the handshake");
    let head = read_head(&mut client).to_ascii_lowercase();
    assert!(head.starts_with("http/1.1 101"), "{head}");
    assert!(head.contains("upgrade: websocket"), "{head}");
    // One exchange at a time: each answer comes back before the next is sent.
    for word in ["first", "second"] {
        client.write_all(word.as_bytes()).expect("send");
        let mut echoed = vec![0u8; word.len()];
        client.read_exact(&mut echoed).expect("read the echo");
        assert_eq!(echoed, word.to_ascii_uppercase().as_bytes());
    }
    drop(client);
    let seen = peer.join().expect("the peer").to_ascii_lowercase();
    // The peer saw the handshake as sent: the host form, the upgrade, the key.
    assert!(seen.starts_with("get /socket http/1.1\r\n"), "{seen}");
    assert!(
        seen.contains(&format!("host: 8080-{sandbox}.brig.test")),
        "{seen}"
    );
    assert!(seen.contains("upgrade: websocket"), "{seen}");
    assert!(
        seen.contains("sec-websocket-key: dghlihnhbxbszsbub25jzq=="),
        "{seen}"
    );
}
