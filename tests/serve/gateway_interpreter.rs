//! E2B's code interpreter through `brig gateway` (src/gateway/interpreter.rs), driven by
//! E2B's official `e2b-code-interpreter` SDK, installed unmodified from PyPI (pinned, in a
//! venv kept under the target directory), as root and rootless:
//!
//! - by the SDK's `E2B_SANDBOX_URL` form (plain HTTP, its `E2b-Sandbox-Id` /
//!   `E2b-Sandbox-Port: 49999` headers): `run_code` with state across calls, an error
//!   with name, value and traceback, `on_stdout` streaming, the SDK's `timeout`
//!   interrupting a cell (its state kept), a matplotlib figure as PNG
//!   without savefig, `envs`, contexts in python, javascript and bash (create, list,
//!   restart, remove), an unknown context and a bad language refused with the SDK's
//!   errors; a secure sandbox's `/execute` without its token, or with another, refused
//!   (401, the cell never runs), and one for a sandbox that does not exist 502;
//! - over TLS (`--tls-cert`, `--tls-key`: a test CA and a certificate for `*.brig.test`
//!   made with openssl), with the SDK trusting the CA by `SSL_CERT_FILE` and resolving
//!   `*.brig.test` through a DNS stub of the script's own, named by a `/etc/resolv.conf`
//!   bound over the host's in the client's own mount namespace (the host's /etc is
//!   untouched). As root the gateway listens on port 443 of a loopback address of the
//!   test's, and the SDK reaches the interpreter by its host form,
//!   `https://49999-{sandboxID}.brig.test`, as it does E2B's; rootless (no port 443 for
//!   uid 65534) by `E2B_SANDBOX_URL` over TLS.
//!
//! Each Python program asserts as it goes and prints `PASS` at its end.

use crate::common;
pub(crate) use crate::gateway::sdk_python;
use crate::gateway::{Gateway, KEY_A, assert_passed};

use common::serve::Server;
use common::*;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

both_modes!(
    e2b_interpreter_runs_code_in_contexts,
    e2b_interpreter_over_tls_by_host_name,
    gateway_refuses_bad_tls_files,
);

fn has_matplotlib() -> bool {
    require(
        "python3's matplotlib (in the jail's python)",
        "apt-get install python3-matplotlib",
        Command::new(interpreter("python3"))
            .args(["-c", "import matplotlib"])
            .stderr(Stdio::null())
            .status()
            .is_ok_and(|status| status.success()),
    )
}

const RUN_CODE: &str = r#"
import base64, sys
from e2b_code_interpreter import Sandbox
from e2b import NotFoundException, SandboxException
sbx = Sandbox.create()

# State across calls; the final expression is the main result.
first = sbx.run_code("x = 41\nprint('hi')\nx")
assert first.logs.stdout == ["hi\n"] and first.text == "41" and first.error is None, first
assert sbx.run_code("x + 1").text == "42"

# An error: name, value, traceback; the interpreter and its state stay.
failed = sbx.run_code("1/0")
assert (failed.error.name, failed.error.value) == ("ZeroDivisionError", "division by zero"), failed.error
assert failed.error.traceback.startswith("Traceback (most recent call last)"), failed.error.traceback
assert sbx.run_code("x").text == "41"

# Streaming: the callback sees the first line while the cell still waits for a file that
# only the callback creates (through another cell of another context).
seen = []
def on_stdout(message):
    seen.append(message.line)
    if message.line == "first\n":
        sbx.run_code("touch go", language="bash")
streamed = sbx.run_code(
    "import os, time\nprint('first', flush=True)\n"
    "while not os.path.exists('go'): time.sleep(0.01)\nprint('second')",
    on_stdout=on_stdout,
)
assert seen[0] == "first\n" and "".join(seen) == "first\nsecond\n", seen
assert "".join(streamed.logs.stdout) == "first\nsecond\n", streamed.logs

# The SDK's timeout: it hangs up, which interrupts the cell (a file it would write after
# the sleep never appears); the context and its state stay.
from e2b import TimeoutException
try:
    sbx.run_code("import time\ntime.sleep(30)\nopen('slept', 'w').close()", timeout=1)
    raise SystemExit("a cell past its timeout raised nothing")
except TimeoutException:
    pass
assert sbx.run_code("x").text == "41"
assert sbx.run_code("import os; os.path.exists('slept')").text == "False"

# envs: set for the cell, gone after it.
assert sbx.run_code("import os; os.environ.get('COLOR')", envs={"COLOR": "teal"}).text == "'teal'"
assert sbx.run_code("os.environ.get('COLOR')").text is None

# A matplotlib figure, shown: a PNG, without savefig.
chart = sbx.run_code("import matplotlib.pyplot as plt\nplt.plot([1, 2, 3])\nplt.show()")
pngs = [result.png for result in chart.results if result.png]
assert len(pngs) == 1 and chart.error is None, chart
assert base64.b64decode(pngs[0]).startswith(b"\x89PNG\r\n\x1a\n")

# Rich results: HTML and JSON by display().
shown = sbx.run_code("display({'a': 1})\nfrom IPython.display import HTML\nHTML('<b>x</b>')")
assert shown.results[0].json == {"a": 1}, shown.results
assert shown.results[-1].html == "<b>x</b>" and shown.results[-1].is_main_result, shown.results

# The default contexts of the other languages.
js = sbx.run_code("console.log('from js'); 6 * 7", language="javascript")
assert (js.logs.stdout, js.text) == (["from js\n"], "42"), js
assert sbx.run_code("echo $((6 * 7))", language="bash").logs.stdout == ["42\n"]

# Contexts: created, listed, run in, restarted (state lost), removed.
node = sbx.create_code_context(language="javascript")
shell = sbx.create_code_context(language="bash", cwd="/home/user")
assert (node.language, shell.language, shell.cwd) == ("javascript", "bash", "/home/user"), (node, shell)
assert sbx.run_code("let kept = 5; kept * 2", context=node).text == "10"
assert sbx.run_code("kept", context=node).text == "5"
assert sbx.run_code("export Q=7; cd /tmp", context=shell).error is None
# Two writes: one chunk or two, as the runner read them (Jupyter batches alike).
assert "".join(sbx.run_code("echo $Q; pwd", context=shell).logs.stdout) == "7\n/tmp\n"
listed = {context.id: context.language for context in sbx.list_code_contexts()}
assert listed[node.id] == "javascript" and listed[shell.id] == "bash" and listed["python"] == "python", listed
sbx.restart_code_context(node)
assert sbx.run_code("typeof kept", context=node).text == "'undefined'"
sbx.remove_code_context(shell)
assert shell.id not in [context.id for context in sbx.list_code_contexts()]

# Refusals, as the SDK raises them.
try:
    sbx.run_code("1", context=shell)
    raise SystemExit("a removed context ran a cell")
except NotFoundException as err:
    assert "no context" in str(err), err
try:
    sbx.run_code("1", language="cobol")
    raise SystemExit("an unknown language ran a cell")
except SandboxException as err:
    assert "400" in str(err) and "language" in str(err), err

# A secure sandbox's cells need its token: without it, or with another, 401; the
# attack's cell never runs (no file appears). A sandbox that does not exist: 502.
import httpx
url = sys.argv[1] + "/execute"
headers = {"E2b-Sandbox-Id": sbx.sandbox_id, "E2b-Sandbox-Port": "49999"}
cell = {"code": "open('attacked', 'w').close()"}
for token in [None, "0" * 32]:
    sent = dict(headers, **({"X-Access-Token": token} if token else {}))
    answer = httpx.post(url, json=cell, headers=sent)
    assert answer.status_code == 401 and "X-Access-Token" in answer.text, (answer.status_code, answer.text)
assert sbx.run_code("import os; os.path.exists('attacked')").text == "False"
answer = httpx.post(url, json=cell, headers=dict(headers, **{"E2b-Sandbox-Id": "0" * 32}))
assert answer.status_code == 502, (answer.status_code, answer.text)

sbx.kill()
print("PASS")
"#;

fn e2b_interpreter_runs_code_in_contexts(mode: Mode) {
    let Some(python) = sdk_python() else { return };
    if !has_matplotlib() {
        return;
    }
    let server = Server::start(mode, &[]);
    let gateway = Gateway::start(mode, &server);
    assert_passed(Some(gateway.sdk_of(python, KEY_A, RUN_CODE)));
}

/// A DNS stub on `sys.argv[1]`:53 answering every A query with that address (and other
/// types with no answer), in a thread of the script's own: prepended to the SDK's script.
const DNS_STUB: &str = r#"
import socket, struct, sys, threading
ADDRESS = sys.argv[1]
def dns_stub(sock):
    while True:
        query, peer = sock.recvfrom(512)
        end = 12
        while query[end]:
            end += query[end] + 1
        question = query[12:end + 5]
        qtype = struct.unpack("!H", query[end + 1:end + 3])[0]
        answers = 1 if qtype == 1 else 0
        reply = query[:2] + struct.pack("!HHHHH", 0x8180, 1, answers, 0, 0) + question
        if answers:
            reply += struct.pack("!HHHIH", 0xC00C, 1, 1, 60, 4) + socket.inet_aton(ADDRESS)
        sock.sendto(reply, peer)
stub = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
stub.bind((ADDRESS, 53))
threading.Thread(target=dns_stub, args=(stub,), daemon=True).start()
"#;

const OVER_TLS: &str = r#"
import os
from e2b_code_interpreter import Sandbox
sbx = Sandbox.create()
if "E2B_SANDBOX_URL" not in os.environ:
    # The host form, as against E2B: https://49999-{id}.brig.test
    assert sbx._jupyter_url == f"https://49999-{sbx.sandbox_id}.brig.test", sbx._jupyter_url
assert sbx.run_code("y = 20").error is None
assert sbx.run_code("y + 22").text == "42"
out = []
assert sbx.run_code("print('streamed over TLS')", on_stdout=lambda m: out.append(m.line)).error is None
assert out == ["streamed over TLS\n"], out
node = sbx.create_code_context(language="javascript")
assert sbx.run_code("[1, 2].length", context=node).text == "2"
assert sbx.run_code("echo bash", language="bash").logs.stdout == ["bash\n"]
# envd on the same listener: its host form too.
assert sbx.commands.run("echo envd").stdout == "envd\n"
sbx.kill()
print("PASS")
"#;

/// A test CA, and a certificate for `*.brig.test` it signed: (CA, certificate, key).
fn wildcard_certificate(dir: &TempDir) -> (PathBuf, PathBuf, PathBuf) {
    let path = |name: &str| dir.path().join(name);
    let openssl = |args: &[&str]| {
        let output = output_of({
            let mut command = Command::new("openssl");
            command.args(args).current_dir(dir.path());
            command
        });
        assert_success(&output);
    };
    let ec = [
        "-newkey",
        "ec",
        "-pkeyopt",
        "ec_paramgen_curve:prime256v1",
        "-nodes",
    ];
    let mut ca = vec!["req", "-x509"];
    ca.extend_from_slice(&ec);
    ca.extend_from_slice(&["-keyout", "ca.key", "-out", "ca.pem", "-days", "2"]);
    ca.extend_from_slice(&["-subj", "/CN=brig test CA"]);
    openssl(&ca);
    let mut request = vec!["req"];
    request.extend_from_slice(&ec);
    request.extend_from_slice(&["-keyout", "server.key", "-out", "server.csr"]);
    request.extend_from_slice(&["-subj", "/CN=brig.test"]);
    openssl(&request);
    dir.file(
        "server.ext",
        "subjectAltName=DNS:*.brig.test,DNS:brig.test\nbasicConstraints=CA:FALSE\nextendedKeyUsage=serverAuth\n",
    );
    openssl(&[
        "x509",
        "-req",
        "-in",
        "server.csr",
        "-CA",
        "ca.pem",
        "-CAkey",
        "ca.key",
        "-CAcreateserial",
        "-out",
        "server.pem",
        "-days",
        "2",
        "-extfile",
        "server.ext",
    ]);
    for file in ["ca.pem", "ca.key", "server.pem", "server.key", "server.ext"] {
        set_mode(&path(file), 0o644);
    }
    (path("ca.pem"), path("server.pem"), path("server.key"))
}

fn e2b_interpreter_over_tls_by_host_name(mode: Mode) {
    if !require_root()
        || !require(
            "openssl and unshare",
            "apt-get install openssl util-linux",
            program_on_path("openssl") && program_on_path("unshare"),
        )
    {
        return;
    }
    let Some(python) = sdk_python() else { return };
    let dir = TempDir::new("gateway-tls");
    set_mode(dir.path(), 0o755);
    let (ca, cert, key) = wildcard_certificate(&dir);
    // A loopback address of this test's own (its DNS stub on port 53, the gateway on 443
    // as root), so that parallel runs do not meet.
    let pid = std::process::id();
    let address = format!(
        "127.{}.{}.{}",
        60 + mode as u32,
        (pid >> 8) & 0xff,
        (pid & 0xff).max(1)
    );
    let listen = match mode {
        Mode::Root => format!("{address}:443"),
        Mode::Rootless => format!("{address}:0"),
    };
    let server = Server::start(mode, &[]);
    let gateway = Gateway::start_at(
        mode,
        &server,
        &listen,
        &[
            "--tls-cert",
            cert.to_str().unwrap(),
            "--tls-key",
            key.to_str().unwrap(),
        ],
    );
    let port = gateway.url.rsplit(':').next().unwrap().to_string();
    assert!(gateway.url.starts_with("https://"), "{}", gateway.url);
    let resolv = dir.file(
        "resolv.conf",
        &format!("nameserver {address}\noptions attempts:2 timeout:2\n"),
    );
    let api = match mode {
        Mode::Root => "https://api.brig.test".to_string(),
        Mode::Rootless => format!("https://api.brig.test:{port}"),
    };
    let script = format!("{DNS_STUB}\n{OVER_TLS}");
    let mut command = Command::new("unshare");
    command
        .args(["--mount", "--propagation", "private", "--", "sh", "-c"])
        .arg(r#"mount --bind "$0" /etc/resolv.conf && exec "$@""#)
        .arg(&resolv)
        .arg(python)
        .args(["-c", &script, &address])
        .env_clear()
        .env("PATH", "/usr/bin:/bin:/usr/sbin:/sbin")
        .env("E2B_DOMAIN", "brig.test")
        .env("E2B_API_URL", &api)
        .env("E2B_API_KEY", KEY_A)
        .env("SSL_CERT_FILE", &ca)
        .stdin(Stdio::null());
    if mode == Mode::Rootless {
        command.env(
            "E2B_SANDBOX_URL",
            format!("https://sandbox.brig.test:{port}"),
        );
    }
    assert_passed(Some(output_of(command)));
}

/// A certificate or key that cannot be read, or that do not go together, or one flag
/// without the other: one line naming the flag and the fix, exit 125, nothing served.
fn gateway_refuses_bad_tls_files(mode: Mode) {
    if !require(
        "openssl",
        "apt-get install openssl",
        program_on_path("openssl"),
    ) {
        return;
    }
    let server = Server::start(mode, &[]);
    let dir = TempDir::new("gateway-bad-tls");
    set_mode(dir.path(), 0o755);
    let (ca, cert, key) = wildcard_certificate(&dir);
    let keys = dir.file("keys", &format!("{KEY_A} alice\n"));
    set_mode(&keys, 0o644);
    let ca_key = dir.path().join("ca.key");
    let (ca, ca_key, cert, key, keys) = (
        ca.to_str().unwrap(),
        ca_key.to_str().unwrap(),
        cert.to_str().unwrap(),
        key.to_str().unwrap(),
        keys.to_str().unwrap(),
    );
    for (tls, needles) in [
        (vec!["--tls-cert", cert], vec!["--tls-cert needs --tls-key"]),
        (vec!["--tls-key", key], vec!["--tls-key needs --tls-cert"]),
        (
            vec!["--tls-cert", keys, "--tls-key", key],
            vec![
                "--tls-cert",
                "no CERTIFICATE",
                "give the server's certificate",
            ],
        ),
        (
            vec!["--tls-cert", cert, "--tls-key", ca],
            vec!["--tls-key", "cannot read a PEM private key"],
        ),
        (
            vec!["--tls-cert", cert, "--tls-key", "/nonexistent/key.pem"],
            vec!["--tls-key /nonexistent/key.pem", "cannot read"],
        ),
        // A key, but of another certificate (the CA's).
        (
            vec!["--tls-cert", cert, "--tls-key", ca_key],
            vec!["--tls-key", "does not go with --tls-cert"],
        ),
    ] {
        let output = crate::gateway::gateway_refused(mode, server.socket(), Path::new(keys), &tls);
        assert_code(&output, 125);
        assert_one_line_error(&output, &needles);
        assert!(output.stdout.is_empty(), "{}", describe(&output));
    }
}
