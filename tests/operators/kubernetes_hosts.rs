//! Many brig hosts as deploy/kubernetes/ runs them, behind a real ingress (issue 25's
//! multi-host test): no cluster can be had here, so the pods run under podman and Debian's
//! nginx plays ingress-nginx, everything configured from the manifests themselves.
//!
//! - Three host pods (hosts.yaml's StatefulSet: named brig-host-0..2 as its pods are; its
//!   init container, then `serve` and `gateway` sharing the socket's emptyDir) and two
//!   routers (gateway.yaml's Deployment, `a` and `b`), each container with its manifest's
//!   args (`$(VAR)`s expanded from the ConfigMap and the pod's name), securityContext
//!   (user namespace, seccomp profile, unmasked /proc, uid 1000, no capability, a
//!   read-only root), limits and volumes, translated to podman's options by the same
//!   code as kubernetes.rs's `the_host_pod_runs_under_podman`. One container root
//!   (deploy/container/build-root.sh) serves every container, as one image would.
//! - The cluster's network: a podman network of its own (netavark, DNS by aardvark-dns).
//!   The headless Service's names (`brig-host-N.brig-hosts`, which the gateways'
//!   `--peer-url` uses) are network aliases of the hosts' gateway containers.
//!   The Services `brig-hosts-any` (creates) and `brig-gateway` (the routers) are
//!   nginx upstreams, round robin, which is kube-proxy's part: `brig-hosts-any` is
//!   nginx listening on the network's gateway address, given to the routers by
//!   `--add-host`. What differs from a cluster: kube-proxy drops a host from
//!   `brig-hosts-any` once its readinessProbe fails; here a draining host stays in the
//!   round robin and refuses creates with 503, which the router's retry (3 tries of
//!   `--create-url`) covers, the window a real cluster has until the probe notices.
//!   Every pod shares one user-namespace mapping (the kubelet gives each its own range).
//!   No podman pods: they need an infra image, which cannot be pulled here. A pod's
//!   containers would share its network namespace; here `serve` (which listens on no
//!   port, only on the socket in the shared emptyDir) has no network, and `gateway` is on
//!   the podman network.
//! - The ingress: nginx (tests/net/nginx.sh fetches Debian's package, unpacked, never
//!   installed) with ingress.yaml's rules (`api.DOMAIN`, `*.DOMAIN` to the Service
//!   brig-gateway; a host outside the rules gets nginx's 404), its TLS (a certificate
//!   for both, from a CA made here with openssl; the SDK trusts it through
//!   SSL_CERT_FILE) and each of its annotations as the nginx directive ingress-nginx
//!   makes of it (an annotation the test cannot translate fails it), plus what
//!   ingress-nginx always sets (HTTP/1.1 upstream, the WebSocket's `Upgrade`, `Host`
//!   passed on). DNS: the SDK resolves `*.DOMAIN` to nginx on 127.0.0.1 (the wildcard
//!   record), by a getaddrinfo in the test's Python prelude. nginx listens on three
//!   ports: one balanced over both routers (the Service), and one pinned to each router,
//!   so that the test chooses which router a request goes through; its access log
//!   (port, host, upstream) shows which one did.
//!
//! Through E2B's official SDK (pinned): 30 sandboxes created through the ingress (every
//! other one through each router) spread over the hosts (all three, or at least two);
//! each used (a command, a file written and read, `run_code`) through the *other* router,
//! which the access log confirms; a command's output streams through the ingress (its
//! first line reaches the SDK while the command waits), a 3 MiB file passes (over nginx's
//! 1 MiB default body), a WebSocket to a sandbox's port is joined end to end; brig-host-2's
//! gateway SIGTERMed while a command runs in one of its sandboxes (its `/readyz` says
//! draining, new creates land elsewhere, the command ends with the SDK's error, the
//! gateway exits 0 when the grace is over, then its server drains and exits 0);
//! brig-host-1 SIGKILLed (`podman kill -s KILL`, both containers): its sandboxes are the
//! SDK's NotFound through both routers (the kind asserted; only the hang is bounded, the
//! time is printed), brig-host-0's work on; `/metrics` of a host and both routers, fetched
//! over podman's network, parsed by prometheus-client's text parser. At the end: no
//! container, network, nginx, process in the test's cgroup or temp directory is left.
//!
//! The ConfigMap's BRIG_DRAIN_GRACE (30 s) is set to 3 s here, as an operator would, to keep
//! the test short. Runs as root only: the pods need podman as root (rootless podman is not
//! set up on the test machines), though brig in them runs as uid 1000.

use crate::common;
use crate::containers::{
    BRIG_IN_CONTAINER, Detached, cgroup_parent, container_logs, container_root, have_podman,
    podman_command, podman_command_on, podman_run, repo, stop_drains,
};
use crate::kubernetes::{KEY, arg_strings, container, expanded_args, object, pod_options};

use common::e2b::{PYTHON_GET, PYTHON_METRICS};
use common::{TempDir, describe, stderr, stdout};
use serde_json::{Value, json};
use std::io::{BufRead, Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::Duration;

/// A generous bound on a wait for something that normally takes well under a second (a
/// container's start, a drain of 3 s): reaching it fails the test, nothing is timed.
const PATIENCE: Duration = Duration::from_secs(120);

/// The drain grace the test gives the hosts (the ConfigMap's is 30 s).
const DRAIN_GRACE: &str = "3";

/// The router gateways: gateway.yaml's Deployment, two replicas, here `a` and `b`.
const ROUTERS: [&str; 2] = ["a", "b"];

/// `podman ARGS`, its output.
fn podman(args: &[&str]) -> Output {
    Command::new("podman")
        .args(args)
        .stdin(Stdio::null())
        .output()
        .expect("run podman")
}

/// A podman network, removed when dropped (after its containers: declare it first).
struct Network(String);

impl Network {
    fn create(name: &str) -> Network {
        let made = podman(&["network", "create", name]);
        assert!(made.status.success(), "{}", describe(&made));
        Network(name.to_string())
    }

    /// The network's gateway address (the host's side of its bridge).
    fn gateway(&self) -> String {
        let said = podman(&[
            "network",
            "inspect",
            &self.0,
            "--format",
            "{{range .Subnets}}{{.Gateway}}{{end}}",
        ]);
        let address = stdout(&said).trim().to_string();
        assert!(!address.is_empty(), "{}", describe(&said));
        address
    }

    /// A container's address on this network.
    fn address_of(&self, name: &str) -> String {
        let format = format!(
            "{{{{(index .NetworkSettings.Networks \"{}\").IPAddress}}}}",
            self.0
        );
        let said = podman(&["inspect", "--format", &format, name]);
        let address = stdout(&said).trim().to_string();
        assert!(!address.is_empty(), "{}", describe(&said));
        address
    }
}

impl Drop for Network {
    fn drop(&mut self) {
        let _ = podman(&["network", "rm", "--force", &self.0]);
    }
}

/// A plain HTTP/1.0 GET of `path` from `address` (`IP:PORT`): the status and the body,
/// or None when nothing answers.
fn http_get(address: &str, path: &str) -> Option<(u16, String)> {
    let socket = address.parse().ok()?;
    let mut connection = TcpStream::connect_timeout(&socket, Duration::from_secs(2)).ok()?;
    connection
        .set_read_timeout(Some(Duration::from_secs(30)))
        .ok()?;
    write!(connection, "GET {path} HTTP/1.0\r\nHost: {address}\r\n\r\n").ok()?;
    let mut answer = String::new();
    connection.read_to_string(&mut answer).ok()?;
    let status = answer.split_whitespace().nth(1)?.parse().ok()?;
    let body = answer.split_once("\r\n\r\n")?.1.to_string();
    Some((status, body))
}

/// Waits (bounded by PATIENCE) until `done`; else fails with `what` and `context()`.
fn wait_for(what: &str, mut done: impl FnMut() -> bool, context: impl Fn() -> String) {
    if !common::wait_until(PATIENCE, &mut done) {
        panic!("{what}: not within {PATIENCE:?}\n{}", context());
    }
}

/// A container's state: (running, exit code).
fn container_state(name: &str) -> (bool, i64) {
    let said = podman(&[
        "inspect",
        "--format",
        "{{.State.Running}} {{.State.ExitCode}}",
        name,
    ]);
    let text = stdout(&said);
    let mut words = text.split_whitespace();
    let running = words.next() == Some("true");
    let code = words
        .next()
        .and_then(|code| code.parse().ok())
        .unwrap_or(-1);
    (running, code)
}

/// Debian's nginx, from tests/net/nginx.sh (cached under the target directory).
fn nginx_binary() -> Option<PathBuf> {
    let fetched = Command::new(repo("tests/net/nginx.sh"))
        .arg(Path::new(env!("CARGO_TARGET_TMPDIR")).join("nginx"))
        .stdin(Stdio::null())
        .output()
        .expect("run tests/net/nginx.sh");
    let found = common::require(
        "Debian's nginx (tests/net/nginx.sh)",
        &format!(
            "{}; it needs apt-get and dpkg-deb and the package lists (apt-get update)",
            stderr(&fetched).trim()
        ),
        fetched.status.success(),
    );
    found.then(|| PathBuf::from(stdout(&fetched).trim()))
}

/// nginx, a child of the test, run in the foreground with every path in its directory;
/// ended by its pid (SIGTERM) when dropped.
struct Nginx {
    child: Option<Child>,
    dir: PathBuf,
}

impl Nginx {
    fn start(binary: &Path, dir: &Path) -> Nginx {
        let log = std::fs::File::create(dir.join("error.log")).expect("nginx's error log");
        let child = Command::new(binary)
            .arg("-p")
            .arg(dir)
            .arg("-c")
            .arg(dir.join("nginx.conf"))
            .args(["-e", "stderr", "-g", "daemon off;"])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .expect("start nginx");
        Nginx {
            child: Some(child),
            dir: dir.to_path_buf(),
        }
    }

    fn pid(&self) -> u32 {
        self.child.as_ref().expect("running").id()
    }

    /// Whether it still runs (it exits at once when it cannot listen).
    fn running(&mut self) -> bool {
        self.child
            .as_mut()
            .is_some_and(|child| matches!(child.try_wait(), Ok(None)))
    }

    fn log(&self) -> String {
        format!(
            "nginx's error log:\n{}",
            std::fs::read_to_string(self.dir.join("error.log")).unwrap_or_default()
        )
    }

    /// The access log's lines: `PORT HOST "REQUEST" STATUS UPSTREAM`.
    fn access_log(&self) -> String {
        std::fs::read_to_string(self.dir.join("access.log")).unwrap_or_default()
    }

    /// SIGTERM (nginx's fast shutdown) and the wait: whether it exited 0.
    fn stop(&mut self) -> bool {
        let Some(mut child) = self.child.take() else {
            return true;
        };
        common::kill(child.id(), libc::SIGTERM);
        child.wait().is_ok_and(|status| status.success())
    }
}

impl Drop for Nginx {
    fn drop(&mut self) {
        self.stop();
    }
}

/// A free port on 127.0.0.1 (the kernel's choice; free again once the listener closes).
fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|listener| listener.local_addr())
        .expect("a free port")
        .port()
}

/// A CA and a certificate of it for `names` (openssl), as cert-manager would make the
/// Secret brig-tls: (the CA's certificate, the certificate, its key).
fn certificate(dir: &Path, names: &[String]) -> (PathBuf, PathBuf, PathBuf) {
    let openssl = |args: &[&str]| {
        let output = Command::new("openssl")
            .args(args)
            .current_dir(dir)
            .stdin(Stdio::null())
            .output()
            .expect("run openssl");
        assert!(
            output.status.success(),
            "openssl {args:?}: {}",
            describe(&output)
        );
    };
    let curve = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1"];
    let mut ca = vec!["req", "-x509", "-nodes", "-days", "2"];
    ca.extend(curve);
    ca.extend([
        "-keyout",
        "ca.key",
        "-out",
        "ca.crt",
        "-subj",
        "/CN=brig test CA",
    ]);
    openssl(&ca);
    let mut request = vec!["req", "-nodes"];
    request.extend(curve);
    let subject = format!("/CN={}", names[0]);
    request.extend(["-keyout", "tls.key", "-out", "tls.csr", "-subj", &subject]);
    openssl(&request);
    let alternative: Vec<String> = names.iter().map(|name| format!("DNS:{name}")).collect();
    std::fs::write(
        dir.join("san.ext"),
        format!("subjectAltName={}\n", alternative.join(",")),
    )
    .unwrap();
    openssl(&[
        "x509",
        "-req",
        "-in",
        "tls.csr",
        "-CA",
        "ca.crt",
        "-CAkey",
        "ca.key",
        "-CAcreateserial",
        "-days",
        "2",
        "-extfile",
        "san.ext",
        "-out",
        "tls.crt",
    ]);
    (dir.join("ca.crt"), dir.join("tls.crt"), dir.join("tls.key"))
}

/// The nginx directive ingress-nginx makes of each of the Ingress's annotations; an
/// annotation without a translation here fails the test (add it, or drop it from the
/// manifest).
fn annotation_directives(ingress: &Value) -> Vec<String> {
    let mut directives = Vec::new();
    for (key, value) in ingress["metadata"]["annotations"]
        .as_object()
        .into_iter()
        .flatten()
    {
        let value = value.as_str().expect("annotations are strings");
        let directive = match key.strip_prefix("nginx.ingress.kubernetes.io/") {
            Some("proxy-buffering") => format!("proxy_buffering {value};"),
            Some("proxy-request-buffering") => format!("proxy_request_buffering {value};"),
            Some("proxy-read-timeout") => format!("proxy_read_timeout {value}s;"),
            Some("proxy-send-timeout") => format!("proxy_send_timeout {value}s;"),
            Some("proxy-body-size") => format!("client_max_body_size {value};"),
            _ => panic!("ingress.yaml's annotation {key}: no translation to nginx here"),
        };
        directives.push(directive);
    }
    directives
}

/// What nginx needs to know to play the ingress and the Services.
struct Ingress<'a> {
    dir: &'a Path,
    /// The Ingress's rules' hosts (`api.DOMAIN`, `*.DOMAIN`).
    hosts: Vec<String>,
    directives: Vec<String>,
    /// `any` (the Service brig-gateway: both routers), then one port per router.
    ports: [u16; 3],
    routers: Vec<String>,
    /// brig-hosts-any: nginx's address for it, and the hosts' gateways behind it.
    hosts_any: String,
    host_gateways: Vec<String>,
    /// The port the gateways listen on (their containerPort).
    port: u16,
}

impl Ingress<'_> {
    fn config(&self) -> String {
        let dir = self.dir.display();
        let port = self.port;
        let servers = |addresses: &[String]| -> String {
            addresses
                .iter()
                .map(|address| format!("server {address}:{port}; "))
                .collect()
        };
        let [_, pinned_a, pinned_b] = self.ports;
        let listen: String = self
            .ports
            .iter()
            .map(|port| format!("listen 127.0.0.1:{port} ssl http2; "))
            .collect();
        let default_listen: String = self
            .ports
            .iter()
            .map(|port| format!("listen 127.0.0.1:{port} ssl http2 default_server; "))
            .collect();
        format!(
            r#"worker_processes 1;
pid {dir}/nginx.pid;
events {{ worker_connections 1024; }}
http {{
    client_body_temp_path {dir}/client_body;
    proxy_temp_path {dir}/proxy;
    fastcgi_temp_path {dir}/fastcgi;
    uwsgi_temp_path {dir}/uwsgi;
    scgi_temp_path {dir}/scgi;
    log_format routed '$server_port $http_host "$request" $status $upstream_addr';
    access_log {dir}/access.log routed;
    ssl_certificate {dir}/tls.crt;
    ssl_certificate_key {dir}/tls.key;
    # ingress-nginx: a WebSocket's Upgrade passed on, else the connection closed.
    map $http_upgrade $connection_upgrade {{ default upgrade; '' close; }}
    # The ingress's port chooses the routers: both (the Service), or one.
    map $server_port $routers {{ {pinned_a} router-a; {pinned_b} router-b; default brig-gateway; }}
    upstream brig-gateway {{ {both} }}
    upstream router-a {{ {router_a} }}
    upstream router-b {{ {router_b} }}
    upstream brig-hosts-any {{ {hosts} }}
    # The Ingress brig: its rules' hosts, its TLS, its annotations.
    server {{
        {listen}
        server_name {names};
        {directives}
        location / {{
            proxy_pass http://$routers;
            proxy_http_version 1.1;
            proxy_set_header Host $http_host;
            proxy_set_header Upgrade $http_upgrade;
            proxy_set_header Connection $connection_upgrade;
            proxy_set_header X-Forwarded-For $remote_addr;
            proxy_set_header X-Forwarded-Proto https;
        }}
    }}
    # Any other host: ingress-nginx's default backend, 404.
    server {{
        {default_listen}
        server_name _;
        return 404;
    }}
    # The Service brig-hosts-any (kube-proxy's part): the hosts, round robin.
    server {{
        listen {hosts_any}:{port};
        proxy_buffering off;
        proxy_request_buffering off;
        client_max_body_size 0;
        proxy_read_timeout 3600s;
        location / {{
            proxy_pass http://brig-hosts-any;
            proxy_http_version 1.1;
            proxy_set_header Host $http_host;
            proxy_set_header Connection "";
        }}
    }}
}}
"#,
            both = servers(&self.routers),
            router_a = servers(&self.routers[..1]),
            router_b = servers(&self.routers[1..]),
            hosts = servers(&self.host_gateways),
            names = self.hosts.join(" "),
            directives = self.directives.join("\n        "),
            hosts_any = self.hosts_any,
        )
    }
}

/// What every script starts with. argv[1]: the setup (JSON): `domain`, the ingress's
/// `ports` (`any`, `a`, `b`), the `hosts`' and `routers`' own URLs on podman's network.
/// `through(port)` points the SDK at the ingress on that port (`get(url)`, `families(url)`
/// and `host_metrics(url)`: tests/common/e2b.rs).
const PRELUDE: &str = r#"
import json, os, socket, ssl, subprocess, sys, threading, time
setup = json.loads(sys.argv[1])
DOMAIN, PORTS, HOSTS, ROUTERS = setup["domain"], setup["ports"], setup["hosts"], setup["routers"]
# The wildcard DNS record: api.DOMAIN and *.DOMAIN are the ingress, nginx on 127.0.0.1.
resolve = socket.getaddrinfo
def ingress_record(host, *args, **kwargs):
    if isinstance(host, str) and host.endswith("." + DOMAIN):
        host = "127.0.0.1"
    return resolve(host, *args, **kwargs)
socket.getaddrinfo = ingress_record
def head_of(connection):
    head = b""
    while not head.endswith(b"\r\n\r\n"):
        byte = connection.recv(1)
        if not byte:
            break
        head += byte
    return head.decode()
# The SDK's HTTP client (reqwest, with a resolver of its own) is given the record through
# a proxy: a CONNECT tunnel, to the names of DOMAIN only, resolved as above.
def tunnel(client):
    with client:
        head = head_of(client)
        if not head.startswith("CONNECT "):
            return
        host, port = head.split(" ")[1].rsplit(":", 1)
        if not host.endswith("." + DOMAIN):
            client.sendall(b"HTTP/1.1 403 Forbidden\r\nContent-Length: 0\r\n\r\n")
            return
        with socket.create_connection((host, int(port))) as upstream:
            client.sendall(b"HTTP/1.1 200 Connection established\r\n\r\n")
            def pump(source, sink):
                try:
                    while data := source.recv(65536):
                        sink.sendall(data)
                    sink.shutdown(socket.SHUT_WR)
                except OSError:
                    pass
            back = threading.Thread(target=pump, args=(upstream, client), daemon=True)
            back.start()
            pump(client, upstream)
            back.join()
record = socket.create_server(("127.0.0.1", 0))
def serve_record():
    while True:
        connection, _ = record.accept()
        threading.Thread(target=tunnel, args=(connection,), daemon=True).start()
threading.Thread(target=serve_record, daemon=True).start()
RECORD = f"http://127.0.0.1:{record.getsockname()[1]}"
from e2b_code_interpreter import Sandbox
from e2b import NotFoundException, SandboxException
def through(port):
    return {"api_url": f"https://api.{DOMAIN}:{PORTS[port]}", "domain": f"{DOMAIN}:{PORTS[port]}",
            "proxy": RECORD}
def other(router):
    return {"a": "b", "b": "a"}[router]
def host_of(sandbox_id):
    return sandbox_id[:-33]
"#;

/// 30 sandboxes created through the ingress, every other one through each router; each
/// used through the other router. Prints {created: {id: router}, spread: {host: count}}.
const SPREAD: &str = r#"
for url in list(HOSTS.values()) + list(ROUTERS.values()):
    assert get(url + "/healthz")[0] == 200, url
    status, body = get(url + "/readyz")
    assert status == 200 and json.loads(body)["ready"] is True, (url, body)
created = {}
for number in range(30):
    router = "ab"[number % 2]
    box = Sandbox.create(timeout=600, **through(router))
    created[box.sandbox_id] = router
spread = {}
for sandbox_id in created:
    spread[host_of(sandbox_id)] = spread.get(host_of(sandbox_id), 0) + 1
assert set(spread) <= set(HOSTS) and len(spread) >= 2, spread
for number, (sandbox_id, router) in enumerate(created.items()):
    box = Sandbox.connect(sandbox_id, **through(other(router)))
    assert box.sandbox_id == sandbox_id
    assert box.commands.run(f"echo {number}").stdout == f"{number}\n"
    box.files.write("/home/user/note", f"note {number}")
    assert box.files.read("/home/user/note") == f"note {number}"
    assert box.run_code(f"{number} * 6").text == str(number * 6)
print(json.dumps({"created": created, "spread": spread}))
print("PASS")
"#;

/// What the ingress must pass on as ingress.yaml's annotations and ingress-nginx's
/// defaults say: a command's output as it comes (unbuffered), a body over nginx's 1 MiB
/// default, a WebSocket's upgrade to a sandbox's port; a host outside the rules is
/// nginx's 404.
const INGRESS: &str = r#"
box = Sandbox.create(timeout=600, **through("any"))
# Streaming: the callback sees the first line while the command still waits for a file
# that only the callback creates (buffered, the command would time out).
seen = []
def on_stdout(chunk):
    seen.append(chunk)
    if chunk == "first\n":
        box.commands.run("touch go")
result = box.commands.run(
    "echo first; while [ ! -e go ]; do sleep 0.01; done; echo second",
    on_stdout=on_stdout, timeout=60,
)
assert "".join(seen) == "first\nsecond\n" and seen[0] == "first\n", seen
print("streamed")
blob = os.urandom(3 << 20)
box.files.write("/home/user/blob", blob)
assert box.files.read("/home/user/blob", format="bytes") == blob
print("3 MiB body")
# A server in the sandbox that switches protocols only for a request that asks to, then
# echoes in upper case.
box.files.write("/home/user/upgrade.py", '''
import socket, sys
listener = socket.socket()
listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
listener.bind(("127.0.0.1", 8765))
listener.listen()
while True:
    conn, _ = listener.accept()
    head = b""
    while not head.endswith(b"\\r\\n\\r\\n"):
        head += conn.recv(1)
    if b"upgrade: websocket" not in head.lower() or b"connection: upgrade" not in head.lower():
        conn.sendall(b"HTTP/1.1 400 Bad Request\\r\\nContent-Length: 10\\r\\n\\r\\nno upgrade")
        conn.close()
        continue
    conn.sendall(b"HTTP/1.1 101 Switching Protocols\\r\\nUpgrade: websocket\\r\\nConnection: Upgrade\\r\\n\\r\\n")
    while True:
        data = conn.recv(256)
        if not data:
            break
        conn.sendall(data.upper())
    conn.close()
''')
box.commands.run("python3 /home/user/upgrade.py", background=True)
trusted = ssl.create_default_context(cafile=os.environ["SSL_CERT_FILE"])
host = box.get_host(8765)
name, port = host.rsplit(":", 1)
for attempt in range(600):
    tls = trusted.wrap_socket(socket.create_connection((name, int(port)), timeout=30), server_hostname=name)
    tls.sendall((f"GET /socket HTTP/1.1\r\nHost: {host}\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n"
                 "Sec-WebSocket-Version: 13\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n\r\n").encode())
    head = head_of(tls)
    if head.startswith("HTTP/1.1 101"):
        break
    tls.close()
    time.sleep(0.05)   # 502 until the server listens
assert head.startswith("HTTP/1.1 101"), head
for word in ("first", "second"):
    tls.sendall(word.encode())
    echoed = b""
    while len(echoed) < len(word):
        echoed += tls.recv(len(word) - len(echoed))
    assert echoed == word.upper().encode(), echoed
tls.close()
print("upgraded")
tls = trusted.wrap_socket(socket.create_connection(("127.0.0.1", PORTS["any"]), timeout=30),
                          server_hostname=f"api.{DOMAIN}")
tls.sendall(b"GET /sandboxes HTTP/1.1\r\nHost: elsewhere.example.org\r\nConnection: close\r\n\r\n")
head = head_of(tls)
assert head.startswith("HTTP/1.1 404") and "server: nginx" in head.lower(), head
box.kill()
print("PASS")
"#;

/// setup's `drain`: {sandbox: an id of the host, container: its gateway container}. A
/// command runs in the sandbox while its host's gateway is told to stop (SIGTERM): the host
/// says draining at once, creates go elsewhere, the command ends with the SDK's error.
const DRAIN: &str = r#"
sandbox_id, container = setup["drain"]["sandbox"], setup["drain"]["container"]
draining = host_of(sandbox_id)
box = Sandbox.connect(sandbox_id, **through("a"))
running = box.commands.run("sleep 600", background=True)
told = subprocess.run(["podman", "kill", "--signal", "TERM", container], capture_output=True)
assert told.returncode == 0, told
for _ in range(2400):
    status, body = get(HOSTS[draining] + "/readyz")
    if status == 503:
        break
    time.sleep(0.05)
assert status == 503 and "draining" in json.loads(body)["reason"], (status, body)
fresh = [Sandbox.create(timeout=60, **through("any")) for _ in range(4)]
assert all(host_of(new.sandbox_id) != draining for new in fresh), [new.sandbox_id for new in fresh]
for new in fresh:
    assert new.commands.run("echo fresh").stdout == "fresh\n"
    new.kill()
started = time.monotonic()
try:
    running.wait()
    raise SystemExit("a command of a draining host ended without an error")
except SandboxException as err:
    print(f"drained: {type(err).__name__} after {time.monotonic() - started:.1f}s: {err}")
print("PASS")
"#;

/// setup's `killed`: {dead: a sandbox of the host to be killed, drained: another of the
/// drained host's, alive: one of the host left}. Connects to `dead` through both routers,
/// says `connected` and waits for a line (its host is killed meanwhile): then every call
/// for it is the SDK's NotFound, the drained host's too; `alive` works on; the routers'
/// `/readyz` and the metrics of a host and of both routers.
const KILLED: &str = r#"
dead, drained, alive = setup["killed"]["dead"], setup["killed"]["drained"], setup["killed"]["alive"]
boxes = [(router, Sandbox.connect(dead, **through(router))) for router in ("a", "b")]
print("connected", flush=True)
sys.stdin.readline()
slowest = 0.0
def not_found(what, call):
    global slowest
    started = time.monotonic()
    try:
        call()
        raise SystemExit(f"{what} did not fail")
    except NotFoundException as err:
        slowest = max(slowest, time.monotonic() - started)
        print(what, "NotFound", type(err).__name__)
for router, box in boxes:
    for what, call in [
        ("command", lambda: box.commands.run("echo x", request_timeout=30)),
        ("file", lambda: box.files.read("/home/user/note", request_timeout=30)),
        ("code", lambda: box.run_code("1", request_timeout=30)),
        ("connect", lambda: Sandbox.connect(dead, **through(router))),
    ]:
        not_found(f"{what} {router}", call)
not_found("drained", lambda: Sandbox.connect(drained, **through("any")).commands.run("echo x", request_timeout=30))
print(f"NotFound, the slowest: {slowest:.3f}s")
box = Sandbox.connect(alive, **through("b"))
assert box.commands.run("echo alive").stdout == "alive\n"
assert box.run_code("21 * 2").text == "42"
left = host_of(alive)
for router, url in ROUTERS.items():
    status, body = get(url + "/readyz")
    assert status == 200, (router, status, body)
    hosts = json.loads(body)["hosts"]
    assert hosts[left] == "ready", hosts
    assert all(hosts[name] != "ready" for name in HOSTS if name != left), hosts

host_metrics(HOSTS[left])
unreachable = 0
for router, url in ROUTERS.items():
    metrics = families(url)
    assert metrics["brig_request_seconds"].type == "histogram", router
    assert "brig_sandbox_slots_free" not in metrics, router
    routed = [s for s in metrics["brig_request_seconds"].samples if s.name.endswith("_count")]
    assert sum(s.value for s in routed) >= 30, routed
    failures = {s.labels["kind"]: s.value for s in metrics["brig_failures"].samples if s.name == "brig_failures_total"}
    unreachable += failures.get("peer_unreachable", 0)
assert unreachable >= 1, unreachable
print("PASS")
"#;

/// The SDK's python running `script` (after PRELUDE) with `setup`, tenant alice's key and
/// the test CA trusted.
fn sdk_command(python: &Path, script: &str, setup: &Value, ca: &Path) -> Command {
    let mut command = Command::new(python);
    command
        .arg("-c")
        .arg(format!("{PRELUDE}{PYTHON_GET}{PYTHON_METRICS}{script}"))
        .arg(setup.to_string())
        .env_clear()
        .env("PATH", "/usr/sbin:/usr/bin:/sbin:/bin")
        .env("E2B_API_KEY", KEY)
        .env("SSL_CERT_FILE", ca);
    command
}

/// Runs `command` to its end, killed (by pid) if it runs past PATIENCE.
fn bounded(mut command: Command) -> Output {
    command
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let child = command.spawn().expect("spawn");
    let watchdog = common::Watchdog::new(child.id(), PATIENCE);
    let output = child.wait_with_output().expect("wait");
    drop(watchdog);
    output
}

/// The script printed PASS last; else the failure with `context` (nginx's logs).
fn passed(output: &Output, context: impl Fn() -> String) {
    assert!(
        output.status.success() && stdout(output).lines().last() == Some("PASS"),
        "{}\n{}",
        describe(output),
        context()
    );
}

fn strs(strings: &[String]) -> Vec<&str> {
    strings.iter().map(String::as_str).collect()
}

/// The pids of the processes in the cgroups podman made for this test process's
/// containers (every controller's hierarchy).
fn processes_in_test_cgroups() -> Vec<String> {
    fn walk(dir: &Path, found: &mut Vec<String>) {
        if let Ok(procs) = std::fs::read_to_string(dir.join("cgroup.procs")) {
            found.extend(procs.lines().map(str::to_string));
        }
        for entry in std::fs::read_dir(dir).into_iter().flatten().flatten() {
            if entry.file_type().is_ok_and(|kind| kind.is_dir()) {
                walk(&entry.path(), found);
            }
        }
    }
    let parent = cgroup_parent().trim_start_matches('/');
    let mut found = Vec::new();
    walk(&Path::new("/sys/fs/cgroup").join(parent), &mut found);
    for entry in std::fs::read_dir("/sys/fs/cgroup")
        .into_iter()
        .flatten()
        .flatten()
    {
        walk(&entry.path().join(parent), &mut found);
    }
    found.sort();
    found.dedup();
    found
}

/// A container started detached: removed (podman rm --force) when the guard drops.
fn start_detached(mut podman: Command, name: &str) -> Detached {
    let started = podman.stdin(Stdio::null()).output().expect("run podman");
    let guard = Detached(name.to_string());
    assert!(started.status.success(), "{name}: {}", describe(&started));
    guard
}

#[test]
fn hosts_and_routers_under_podman_behind_nginx() {
    if !have_podman() || !common::require_root() {
        return;
    }
    if !common::require_program("openssl", "apt-get install openssl") {
        return;
    }
    let Some(python) = common::e2b::sdk_python() else {
        return;
    };
    let Some(nginx_binary) = nginx_binary() else {
        return;
    };
    let tag = format!("brig-ingress-{}", std::process::id());

    // The manifests, as `kubectl apply -k` would apply them (the operator's Secret: one
    // key of the right form; the drain grace shortened).
    let statefulset = object("StatefulSet", "brig-host");
    let deployment = object("Deployment", "brig-gateway");
    let ingress = object("Ingress", "brig");
    let mut config = object("ConfigMap", "brig-config");
    config["data"]["BRIG_DRAIN_GRACE"] = Value::String(DRAIN_GRACE.into());
    let mut secret = object("Secret", "brig-api-keys");
    secret["stringData"] = json!({"api-keys": format!("{KEY} alice\n")});
    let pod = &statefulset["spec"]["template"]["spec"];
    let router_pod = &deployment["spec"]["template"]["spec"];
    let replicas = statefulset["spec"]["replicas"].as_u64().expect("replicas");
    assert_eq!(replicas, 3, "the test runs the StatefulSet's 3 hosts");
    assert_eq!(deployment["spec"]["replicas"], ROUTERS.len());
    let headless = statefulset["spec"]["serviceName"].as_str().unwrap();
    let (serve, gateway) = (container(pod, "serve"), container(pod, "gateway"));
    let init = container(pod, "socket-dir");
    let router = container(router_pod, "gateway");
    let port = gateway["ports"][0]["containerPort"].as_u64().unwrap() as u16;
    assert_eq!(router["ports"][0]["containerPort"], port);
    // The Service the routers send creates to: `--create-url=http://NAME:PORT`.
    let create_url = arg_strings(router)
        .into_iter()
        .find_map(|arg| arg.strip_prefix("--create-url=").map(str::to_string))
        .expect("the routers' --create-url");
    let create_service = create_url
        .strip_prefix("http://")
        .and_then(|rest| rest.split(':').next())
        .unwrap()
        .to_string();
    assert_eq!(create_url, format!("http://{create_service}:{port}"));
    // The Ingress: its hosts (api.DOMAIN, *.DOMAIN), all to the routers' Service.
    let rules = ingress["spec"]["rules"].as_array().unwrap();
    let hosts: Vec<String> = rules
        .iter()
        .map(|rule| rule["host"].as_str().unwrap().to_string())
        .collect();
    for rule in rules {
        assert_eq!(
            rule["http"]["paths"][0]["backend"]["service"]["name"],
            deployment["metadata"]["name"]
        );
    }
    let domain = hosts
        .iter()
        .find_map(|host| host.strip_prefix("*."))
        .expect("a wildcard rule")
        .to_string();
    assert!(hosts.contains(&format!("api.{domain}")), "{hosts:?}");
    let directives = annotation_directives(&ingress);

    let root = container_root();
    // Mount points the runtime makes (as the node's root, before the user namespace).
    for dir in ["root/run/brig", "root/etc/brig"] {
        std::fs::create_dir_all(root.path().join(dir)).unwrap();
    }
    // And the files a container on a network gets bound over (an image has them).
    for file in [
        "root/etc/resolv.conf",
        "root/etc/hosts",
        "root/etc/hostname",
    ] {
        let path = root.path().join(file);
        if !path.exists() {
            std::fs::write(path, "").unwrap();
        }
    }
    let volumes = TempDir::new("ingress-pods");
    let nginx_dir = TempDir::new("ingress-nginx");
    let temp_dirs = [
        root.path().to_path_buf(),
        volumes.path().to_path_buf(),
        nginx_dir.path().to_path_buf(),
    ];
    let network = Network::create(&tag);
    let mut containers: Vec<Detached> = Vec::new();

    // The hosts: brig-host-0..2, the StatefulSet's pod names.
    let mut host_urls = serde_json::Map::new();
    let mut host_addresses = Vec::new();
    let mut host_serves = Vec::new();
    for ordinal in 0..replicas {
        let pod_name = format!(
            "{}-{ordinal}",
            statefulset["metadata"]["name"].as_str().unwrap()
        );
        let dir = volumes.path().join(&pod_name);
        std::fs::create_dir(&dir).unwrap();
        let options = |c: &Value| pod_options(pod, c, &dir, &config, &secret);
        let made = podman_run(&root, &strs(&options(init)), &strs(&arg_strings(init)));
        assert!(made.status.success(), "{}", describe(&made));

        let serve_name = format!("{tag}-{pod_name}-serve");
        let mut command = vec![BRIG_IN_CONTAINER.to_string()];
        command.extend(expanded_args(serve, &config, &pod_name));
        let name_option = format!("--name={serve_name}");
        containers.push(start_detached(
            podman_command(
                &root,
                &["--detach", &name_option],
                &strs(&options(serve)),
                &strs(&command),
            ),
            &serve_name,
        ));
        // The liveness probe's command answers before the gateway starts (in a pod the
        // gateway would restart until the socket answers).
        let mut probe = vec!["exec".to_string(), serve_name.clone()];
        probe.extend(arg_strings(&serve["livenessProbe"]["exec"]));
        wait_for(
            &format!("{serve_name}'s liveness probe"),
            || podman(&strs(&probe)).status.success(),
            || container_logs(&serve_name),
        );

        let gateway_name = format!("{tag}-{pod_name}-gateway");
        let mut command = vec![BRIG_IN_CONTAINER.to_string()];
        command.extend(expanded_args(gateway, &config, &pod_name));
        let name_option = format!("--name={gateway_name}");
        // The headless Service's name of the pod, on the network's DNS.
        let alias = format!("--network-alias={pod_name}.{headless}");
        containers.push(start_detached(
            podman_command_on(
                &network.0,
                &root,
                &["--detach", &name_option, &alias],
                &strs(&options(gateway)),
                &strs(&command),
            ),
            &gateway_name,
        ));
        let address = format!("{}:{port}", network.address_of(&gateway_name));
        wait_for(
            &format!("{gateway_name}'s /readyz"),
            || http_get(&address, "/readyz").is_some_and(|(status, _)| status == 200),
            || container_logs(&gateway_name),
        );
        host_urls.insert(pod_name.clone(), json!(format!("http://{address}")));
        host_addresses.push(address.rsplit_once(':').unwrap().0.to_string());
        host_serves.push((pod_name, serve_name, gateway_name));
    }

    // The routers, `brig-hosts-any` being nginx on the network's gateway address.
    let service_address = network.gateway();
    let mut router_urls = serde_json::Map::new();
    let mut router_addresses = Vec::new();
    for name in ROUTERS {
        let router_name = format!("{tag}-router-{name}");
        let dir = volumes.path().join(format!("router-{name}"));
        std::fs::create_dir(&dir).unwrap();
        let mut options = pod_options(router_pod, router, &dir, &config, &secret);
        options.push(format!("--add-host={create_service}:{service_address}"));
        let mut command = vec![BRIG_IN_CONTAINER.to_string()];
        command.extend(expanded_args(
            router,
            &config,
            &format!("brig-gateway-{name}"),
        ));
        let name_option = format!("--name={router_name}");
        containers.push(start_detached(
            podman_command_on(
                &network.0,
                &root,
                &["--detach", &name_option],
                &strs(&options),
                &strs(&command),
            ),
            &router_name,
        ));
        let address = network.address_of(&router_name);
        let url = format!("{address}:{port}");
        wait_for(
            &format!("{router_name}'s /readyz"),
            || http_get(&url, "/readyz").is_some_and(|(status, _)| status == 200),
            || {
                format!(
                    "{:?}\n{}",
                    http_get(&url, "/readyz"),
                    container_logs(&router_name)
                )
            },
        );
        router_urls.insert(name.to_string(), json!(format!("http://{url}")));
        router_addresses.push(address);
    }

    // The ingress.
    let mut names = hosts.clone();
    names.sort();
    let (ca, _, _) = certificate(nginx_dir.path(), &names);
    let ports = [free_port(), free_port(), free_port()];
    let config_text = Ingress {
        dir: nginx_dir.path(),
        hosts: hosts.clone(),
        directives,
        ports,
        routers: router_addresses.clone(),
        hosts_any: service_address.clone(),
        host_gateways: host_addresses.clone(),
        port,
    }
    .config();
    std::fs::write(nginx_dir.path().join("nginx.conf"), &config_text).unwrap();
    let mut nginx = Nginx::start(&nginx_binary, nginx_dir.path());
    let nginx_pid = nginx.pid();
    let mut listening: Vec<String> = ports
        .iter()
        .map(|port| format!("127.0.0.1:{port}"))
        .collect();
    listening.push(format!("{service_address}:{port}"));
    for address in &listening {
        let socket: std::net::SocketAddr = address.parse().unwrap();
        wait_for(
            &format!("nginx on {address}"),
            || TcpStream::connect_timeout(&socket, Duration::from_secs(1)).is_ok(),
            || format!("{}\n{config_text}", nginx.log()),
        );
    }
    // Its own listeners, not another's on the same addresses.
    assert!(nginx.running(), "{}", nginx.log());
    let setup = json!({
        "domain": domain,
        "ports": {"any": ports[0], "a": ports[1], "b": ports[2]},
        "hosts": host_urls,
        "routers": router_urls,
    });

    // 30 sandboxes, each used through the router that did not create it.
    let spread = bounded(sdk_command(python, SPREAD, &setup, &ca));
    passed(&spread, || {
        format!("{}\n{}", nginx.access_log(), nginx.log())
    });
    let printed = stdout(&spread);
    let result: Value = serde_json::from_str(printed.lines().rev().nth(1).unwrap()).unwrap();
    eprintln!("the 30 sandboxes' hosts: {}", result["spread"]);
    let created = result["created"].as_object().unwrap();
    assert_eq!(created.len(), 30);
    // nginx's access log: each sandbox's requests (its host form) came in on the other
    // router's port and went to that router.
    let log = nginx.access_log();
    for (id, router) in created {
        let other = if router == "a" { 1 } else { 0 };
        let lines: Vec<&str> = log
            .lines()
            .filter(|line| line.contains(&format!("-{id}.{domain}")))
            .collect();
        assert!(lines.len() >= 3, "{id}: {lines:?}\n{log}");
        for line in lines {
            assert!(
                line.starts_with(&format!("{} ", ports[1 + other]))
                    && line.ends_with(&format!(" {}:{port}", router_addresses[other])),
                "{id} (made through {router}): {line}"
            );
        }
    }
    // ingress-nginx speaks HTTP/2 to clients that offer it (the SDK's REST and envd
    // clients do); the interpreter's client keeps to HTTP/1.1.
    assert!(log.contains(" HTTP/2.0\" "), "{log}");
    let spread_hosts = result["spread"].as_object().unwrap();
    assert_eq!(
        spread_hosts.len(),
        3,
        "the Service's round robin gives every host sandboxes: {spread_hosts:?}"
    );
    let of = |host: &str, nth: usize| -> String {
        created
            .keys()
            .filter(|id| id.starts_with(&format!("{host}-")))
            .nth(nth)
            .unwrap_or_else(|| panic!("no sandbox {nth} of {host}"))
            .clone()
    };

    let through_ingress = bounded(sdk_command(python, INGRESS, &setup, &ca));
    passed(&through_ingress, || {
        format!("{}\n{}", nginx.access_log(), nginx.log())
    });

    // brig-host-2 drains: SIGTERM to its gateway, as the kubelet's; its server after the
    // gateway exits (the kubelet's, after the preStop sleep).
    let (drained, drained_serve, drained_gateway) = host_serves[2].clone();
    let mut drain_setup = setup.clone();
    drain_setup["drain"] = json!({"sandbox": of(&drained, 0), "container": drained_gateway});
    let drain = bounded(sdk_command(python, DRAIN, &drain_setup, &ca));
    passed(&drain, || {
        format!("{}\n{}", nginx.access_log(), nginx.log())
    });
    let said = stdout(&drain);
    eprintln!(
        "{}",
        said.lines()
            .find(|line| line.starts_with("drained:"))
            .unwrap_or("")
    );
    wait_for(
        &format!("{drained_gateway} to exit"),
        || !container_state(&drained_gateway).0,
        || container_logs(&drained_gateway),
    );
    let logs = container_logs(&drained_gateway);
    assert_eq!(container_state(&drained_gateway).1, 0, "{logs}");
    assert!(logs.contains("brig gateway: draining"), "{logs}");
    assert!(logs.contains("brig gateway: drained: ended"), "{logs}");
    stop_drains(&drained_serve);

    // brig-host-1 killed, both containers, while the SDK holds a sandbox of it.
    let (killed, killed_serve, killed_gateway) = host_serves[1].clone();
    let alive = &host_serves[0].0;
    let mut kill_setup = setup.clone();
    kill_setup["killed"] = json!({
        "dead": of(&killed, 0),
        "drained": of(&drained, 1),
        "alive": of(alive, 0),
    });
    let serve_pid: u32 = stdout(&podman(&[
        "inspect",
        "--format",
        "{{.State.Pid}}",
        &killed_serve,
    ]))
    .trim()
    .parse()
    .expect("the server's pid");
    let mut jails = common::memory::descendants(serve_pid);
    jails.push(serve_pid);
    assert!(jails.len() > 1, "the server's processes: {jails:?}");
    let mut script = sdk_command(python, KILLED, &kill_setup, &ca);
    script
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let mut running = common::Running::spawn(script);
    let mut out = std::io::BufReader::new(running.child.stdout.take().expect("piped"));
    let mut line = String::new();
    out.read_line(&mut line).expect("the script's first line");
    if line != "connected\n" {
        panic!("the script said {line:?}: {}", describe(&running.wait()));
    }
    let killing = podman(&["kill", "--signal", "KILL", &killed_gateway, &killed_serve]);
    assert!(killing.status.success(), "{}", describe(&killing));
    wait_for(
        "the killed host's processes to be gone",
        || {
            jails
                .iter()
                .all(|pid| !Path::new(&format!("/proc/{pid}")).exists())
        },
        || format!("{jails:?}"),
    );
    running
        .child
        .stdin
        .take()
        .expect("piped")
        .write_all(b"go\n")
        .expect("tell the script the host is gone");
    let mut rest = String::new();
    out.read_to_string(&mut rest).expect("the script's output");
    let output = running.wait();
    assert!(
        output.status.success() && rest.lines().last() == Some("PASS"),
        "{rest}\n{}\n{}\n{}",
        describe(&output),
        nginx.access_log(),
        nginx.log()
    );
    for what in ["command", "file", "code", "connect"] {
        for router in ROUTERS {
            assert!(
                rest.contains(&format!("{what} {router} NotFound ")),
                "{rest}"
            );
        }
    }
    eprintln!(
        "{}",
        rest.lines()
            .find(|line| line.starts_with("NotFound"))
            .unwrap_or("")
    );

    // Nothing left: nginx ended, the containers and the network removed, no process in
    // the test's cgroups, no temp directory.
    assert!(nginx.stop(), "{}", nginx.log());
    assert!(!Path::new(&format!("/proc/{nginx_pid}")).exists());
    drop(containers);
    let listed = podman(&["ps", "--all", "--quiet", "--filter", &format!("name={tag}")]);
    assert_eq!(stdout(&listed), "", "{}", describe(&listed));
    let network_name = network.0.clone();
    drop(network);
    assert!(
        !podman(&["network", "exists", &network_name])
            .status
            .success()
    );
    assert_eq!(processes_in_test_cgroups(), Vec::<String>::new());
    drop((root, volumes, nginx_dir));
    for dir in temp_dirs {
        assert!(!dir.exists(), "{} left", dir.display());
    }
}
