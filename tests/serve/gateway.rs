//! `brig gateway` (src/gateway/): E2B's official Python SDK, installed unmodified from
//! PyPI (pinned, into a venv under the target directory, kept between runs), drives a real
//! gateway in front of a real `brig serve`, as root and rootless, with only
//! `E2B_API_URL`, `E2B_SANDBOX_URL` and `E2B_API_KEY` set: sandboxes created, listed,
//! timed and killed; commands run, streamed, failing, in the background, fed and killed;
//! tenants kept apart; `secure` tokens enforced; malformed JSON, protobuf and Connect
//! envelopes answered with the status the SDK expects while the gateway stays up; and
//! the gateway's own command line refusing a bad key file.
//!
//! Each Python program asserts as it goes and prints `PASS` at its end.

use crate::common;

use common::serve::Server;
use common::*;
use std::io::BufRead;
use std::path::Path;
use std::process::{Command, Output, Stdio};

both_modes!(
    e2b_sdk_runs_commands,
    e2b_sdk_reads_and_writes_files,
    e2b_async_sdk_runs_and_watches,
    e2b_sdk_lists_times_and_kills_sandboxes,
    e2b_tenants_are_kept_apart,
    e2b_a_tenants_sandboxes_are_capped,
    e2b_bad_requests_get_the_sdks_errors,
    gateway_holds_nothing_for_clients_gone,
    gateway_refuses_a_bad_key_file,
);

pub(crate) const KEY_A: &str = "e2b_00000000000000000000000000000000000000a1";
pub(crate) const KEY_B: &str = "e2b_00000000000000000000000000000000000000b2";

pub(crate) use common::e2b::sdk_python;

/// A `brig gateway` started by the test in front of `server`, stopped (SIGTERM, then
/// waited for: exit 0) when dropped.
pub(crate) struct Gateway {
    running: Option<Running>,
    pub(crate) url: String,
    _keys: TempDir,
}

impl Gateway {
    pub(crate) fn start(mode: Mode, server: &Server) -> Gateway {
        Gateway::start_with(mode, server, &[])
    }

    /// A gateway with `extra` options.
    pub(crate) fn start_with(mode: Mode, server: &Server, extra: &[&str]) -> Gateway {
        Gateway::start_at(mode, server, "127.0.0.1:0", extra)
    }

    /// A gateway listening on `listen`, with `extra` options.
    pub(crate) fn start_at(mode: Mode, server: &Server, listen: &str, extra: &[&str]) -> Gateway {
        let keys = format!("# two tenants\n{KEY_A} alice\n{KEY_B} bob\n");
        Gateway::start_keyed(mode, server, listen, &keys, extra)
    }

    /// A gateway whose API-key file is `keys`, listening on `listen`, with `extra` options.
    pub(crate) fn start_keyed(
        mode: Mode,
        server: &Server,
        listen: &str,
        keys: &str,
        extra: &[&str],
    ) -> Gateway {
        let file_keys = keys;
        let keys = TempDir::new("gateway-keys");
        let file = keys.file("keys", file_keys);
        let mut args = vec![
            "gateway",
            "--listen",
            listen,
            "--server",
            server.socket(),
            "--api-keys",
            file.to_str().unwrap(),
            // Stopped, it ends the test's sandboxes at once, not after the 30 s default.
            "--drain-grace",
            "0s",
        ];
        args.extend_from_slice(extra);
        let (running, url) = spawn_gateway(mode, &args);
        Gateway {
            running: Some(running),
            url,
            _keys: keys,
        }
    }

    /// `script` run by the SDK's python with only the three variables set (and the key
    /// given), with the gateway's URL as `sys.argv[1]`.
    pub(crate) fn sdk(&self, key: &str, script: &str) -> Option<Output> {
        Some(self.sdk_of(sdk_python()?, key, script))
    }

    /// `script` run by `python` (a venv with an E2B SDK) as [`Gateway::sdk`] runs it.
    pub(crate) fn sdk_of(&self, python: &Path, key: &str, script: &str) -> Output {
        let mut command = Command::new(python);
        command
            .args(["-c", script, &self.url])
            .env_clear()
            .env("PATH", "/usr/bin:/bin")
            .env("E2B_API_URL", &self.url)
            .env("E2B_SANDBOX_URL", &self.url)
            .env("E2B_API_KEY", key)
            .stdin(Stdio::null());
        output_of(command)
    }
}

/// `brig ARGS` (a gateway), and the URL it says it listens on (its first line).
pub(crate) fn spawn_gateway(mode: Mode, args: &[&str]) -> (Running, String) {
    let mut command = command(mode, args);
    command.stdout(Stdio::piped()).stderr(Stdio::piped());
    let mut running = Running::spawn(command);
    let mut line = String::new();
    std::io::BufReader::new(running.child.stdout.as_mut().expect("piped"))
        .read_line(&mut line)
        .expect("read the gateway's first line");
    let url = line
        .trim()
        .strip_prefix("brig gateway: listening on ")
        .unwrap_or_else(|| panic!("the gateway said {line:?}"))
        .to_string();
    (running, url)
}

impl Drop for Gateway {
    fn drop(&mut self) {
        let Some(running) = self.running.take() else {
            return;
        };
        kill(running.pid(), libc::SIGTERM);
        let output = running.wait();
        if !std::thread::panicking() {
            assert_eq!(code(&output), 0, "brig gateway: {}", describe(&output));
        }
    }
}

/// A gateway in front of a server, in `mode`, runs `script` with tenant A's key, which
/// passes.
fn sdk_program_passes(mode: Mode, script: &str) {
    let server = Server::start(mode, &[]);
    let gateway = Gateway::start(mode, &server);
    assert_passed(gateway.sdk(KEY_A, script));
}

/// `script` with `sys.argv[2:]` set to `args`.
pub(crate) fn with_args(script: &str, args: &[&str]) -> String {
    format!("import sys\nsys.argv[2:] = {args:?}\n{script}")
}

/// The script passed (it printed PASS last).
pub(crate) fn assert_passed(output: Option<Output>) {
    let Some(output) = output else { return };
    let out = assert_success(&output);
    assert_eq!(out.lines().last(), Some("PASS"), "{}", describe(&output));
}

const COMMANDS: &str = r#"
import os
from e2b import Sandbox, CommandExitException, InvalidArgumentException
sbx = Sandbox.create(envs={"SANDBOX_VAR": "from create"})

result = sbx.commands.run("echo hi")
assert (result.stdout, result.stderr, result.exit_code) == ("hi\n", "", 0), result

try:
    sbx.commands.run("echo oops >&2; exit 3")
    raise SystemExit("a failing command raised nothing")
except CommandExitException as err:
    assert (err.exit_code, err.stderr, err.error) == (3, "oops\n", "exit status 3"), err

result = sbx.commands.run('echo "$SANDBOX_VAR/$OWN"; pwd', envs={"OWN": "own"}, cwd="/tmp")
assert result.stdout == "from create/own\n/tmp\n", result

# Streaming: the callback sees the first line while the command still waits for a file
# that only the callback creates.
seen = []
def on_stdout(chunk):
    seen.append(chunk)
    if chunk == "first\n":
        sbx.commands.run("touch go")
result = sbx.commands.run(
    "echo first; while [ ! -e go ]; do sleep 0.01; done; echo second",
    on_stdout=on_stdout,
)
assert "".join(seen) == "first\nsecond\n" and seen[0] == "first\n", seen
assert result.stdout == "first\nsecond\n", result

# A background command: listed, fed on stdin, its stdin closed, its output collected.
cat = sbx.commands.run("cat", background=True, stdin=True)
assert cat.pid in [process.pid for process in sbx.commands.list()]
sbx.commands.send_stdin(cat.pid, "typed\n")
sbx.commands.close_stdin(cat.pid)
assert cat.wait().stdout == "typed\n"

# Without stdin a command reads end-of-file at once.
assert sbx.commands.run("cat; echo done").stdout == "done\n"

# E2B's conventions: the user `user`, whose home /home/user is every command's
# working directory (named in a command line too), HOME and USER set.
assert sbx.commands.run("pwd", cwd="/home/user").stdout == "/home/user\n"
assert sbx.commands.run('pwd; whoami; echo "$HOME $USER"; cd /home/user && pwd').stdout == "/home/user\nuser\n/home/user user\n/home/user\n"

# Killed: it ends by SIGKILL, and leaves the list (with the variables and the directory
# it was started with).
sleeper = sbx.commands.run("sleep 600", background=True, envs={"MARK": "m"}, cwd="/home/user")
listed = {process.pid: process for process in sbx.commands.list()}
assert listed[sleeper.pid].cmd == "/bin/bash", listed
assert listed[sleeper.pid].envs == {"MARK": "m"}, listed
assert listed[sleeper.pid].cwd == "/home/user", listed
assert sbx.commands.kill(sleeper.pid) is True
try:
    sleeper.wait()
    raise SystemExit("a killed command raised nothing")
except CommandExitException as err:
    assert (err.exit_code, err.error) == (-1, "signal: killed"), err
assert sleeper.pid not in [process.pid for process in sbx.commands.list()]
assert sbx.commands.kill(sleeper.pid) is False

# The user by name is the default one; no one else is mapped (`user="root"`:
# tests/serve/gateway_root.rs).
assert sbx.commands.run("echo as user", user="user").stdout == "as user\n"
try:
    sbx.commands.run("id", user="bob")
    raise SystemExit("a command ran as bob")
except InvalidArgumentException as err:
    assert 'user "bob": a sandbox has two users' in str(err), err

# Another client attaches to a running command and sees it end.
waiting = sbx.commands.run("read line; echo got $line", background=True, stdin=True)
waiting.disconnect()
again = sbx.commands.connect(waiting.pid)
sbx.commands.send_stdin(waiting.pid, "it\n")
assert again.wait().stdout == "got it\n"

# A terminal: typed into, resized once the first line has run, its output one stream,
# its exit status.
from e2b.sandbox.commands.command_handle import PtySize
terminal = sbx.pty.create(PtySize(rows=24, cols=80))
sbx.pty.send_stdin(terminal.pid, b"stty size; echo marker-$((6*7))\n")
screen = b""
for _, _, chunk in terminal:
    screen += chunk or b""
    if b"marker-42" in screen:
        break
sbx.pty.resize(terminal.pid, PtySize(rows=40, cols=120))
sbx.pty.send_stdin(terminal.pid, b"stty size; exit 5\n")
seen = []
try:
    terminal.wait(on_pty=seen.append)
    raise SystemExit("a terminal's exit status 5 raised nothing")
except CommandExitException as err:
    assert err.exit_code == 5, err
screen = (screen + b"".join(seen)).decode(errors="replace")
assert "24 80\r\nmarker-42\r\n" in screen and "40 120\r\n" in screen, screen

sbx.kill()
print("PASS")
"#;

fn e2b_sdk_runs_commands(mode: Mode) {
    sdk_program_passes(mode, COMMANDS);
}

const FILES: &str = r#"
import hashlib, io, os
from e2b import Sandbox, NotFoundException, InvalidArgumentException, FileType
sbx = Sandbox.create()

info = sbx.files.write("notes/hello.txt", "hi there\n")
assert (info.name, info.path) == ("hello.txt", "/home/user/notes/hello.txt"), info
assert sbx.files.read("notes/hello.txt") == "hi there\n"
# E2B's home is the workspace, the commands' working directory.
assert sbx.files.read("/home/user/notes/hello.txt") == "hi there\n"
assert sbx.commands.run("cat notes/hello.txt /home/user/notes/hello.txt").stdout == "hi there\n" * 2

assert sbx.files.exists("notes/hello.txt") and not sbx.files.exists("nope.txt")
assert sbx.files.make_dir("a/b") is True and sbx.files.make_dir("a/b") is False
moved = sbx.files.rename("notes/hello.txt", "a/b/moved.txt")
assert (moved.path, moved.size, moved.permissions) == ("/home/user/a/b/moved.txt", 9, "-rw-r--r--"), moved
listed = [(entry.path, entry.type) for entry in sbx.files.list("a", depth=2)]
assert listed == [("/home/user/a/b", FileType.DIR), ("/home/user/a/b/moved.txt", FileType.FILE)], listed

# A watcher, polled: what changed in the directory, named relative to it.
sbx.files.make_dir("watched")
watcher = sbx.files.watch_dir("watched", recursive=True)
sbx.files.write("watched/new.txt", "x")
sbx.commands.run("mkdir watched/sub && touch watched/sub/deep && rm watched/new.txt")
seen = [(event.type.value, event.name) for event in watcher.get_new_events()]
for expected in [("create", "new.txt"), ("create", "sub"), ("create", "sub/deep"), ("remove", "new.txt")]:
    assert expected in seen, (expected, seen)
watcher.stop()
sbx.files.remove("a")
assert not sbx.files.exists("a/b/moved.txt")

# Several files at once (multipart), and bytes of every value through a file object.
sbx.files.write_files([{"path": "m/one.txt", "data": "one"}, {"path": "m/two.bin", "data": b"\x00\xff"}])
assert sbx.files.read("m/one.txt") == "one" and sbx.files.read("m/two.bin", format="bytes") == b"\x00\xff"
data = os.urandom(3 << 20) + bytes(range(256))
sbx.files.write("big.bin", io.BytesIO(data))
assert sbx.files.read("big.bin", format="bytes") == data
digest = sbx.commands.run("sha256sum big.bin").stdout.split()[0]
assert digest == hashlib.sha256(data).hexdigest(), digest

# Nothing outside the workspace: absolute paths elsewhere, `..`, a symlink leading out.
try:
    sbx.files.read("missing.txt")
    raise SystemExit("a missing file was read")
except NotFoundException:
    pass
sbx.commands.run("ln -s /etc/passwd out-link")
for path in ("/etc/passwd", "../../etc/passwd", "out-link", "/home/user/../../etc/passwd"):
    for attempt in (lambda: sbx.files.read(path), lambda: sbx.files.write(path, "x"), lambda: sbx.files.list(path)):
        try:
            attempt()
            raise SystemExit(f"{path} was reached")
        except InvalidArgumentException:
            pass
sbx.kill()
print("PASS")
"#;

fn e2b_sdk_reads_and_writes_files(mode: Mode) {
    sdk_program_passes(mode, FILES);
}

/// The async SDK: its commands, files, and a streamed watcher (`WatchDir`), which it
/// uses where the sync SDK polls.
const ASYNC: &str = r#"
import asyncio
from e2b import AsyncSandbox
async def main():
    sbx = await AsyncSandbox.create()
    assert (await sbx.commands.run("echo async")).stdout == "async\n"
    seen = []
    await sbx.commands.run("echo out; echo err >&2", on_stdout=seen.append, on_stderr=seen.append)
    assert sorted(seen) == ["err\n", "out\n"], seen
    await sbx.files.make_dir("w")
    created = asyncio.Event()
    events = []
    def on_event(event):
        events.append((event.type.value, event.name))
        if event.name == "sub/new.txt":
            created.set()
    handle = await sbx.files.watch_dir("w", on_event=on_event, recursive=True)
    await sbx.commands.run("mkdir w/sub && echo x > w/sub/new.txt")
    await asyncio.wait_for(created.wait(), 30)
    assert ("create", "sub") in events and ("create", "sub/new.txt") in events, events
    await handle.stop()
    await sbx.kill()
    print("PASS", flush=True)
asyncio.run(main())
# The SDK's HTTP client (pyqwest, a Rust extension) has been seen to crash (SIGSEGV) in
# the interpreter's teardown after an async program: leave without it.
import os
os._exit(0)
"#;

fn e2b_async_sdk_runs_and_watches(mode: Mode) {
    sdk_program_passes(mode, ASYNC);
}

const LIFECYCLE: &str = r#"
from e2b import Sandbox, SandboxQuery, SandboxNotFoundException
one = Sandbox.create(metadata={"job": "one", "team": "x"}, timeout=60)
two = Sandbox.create(metadata={"job": "two", "team": "x"})

def listed(**metadata):
    query = SandboxQuery(metadata=metadata) if metadata else None
    return sorted(info.sandbox_id for info in Sandbox.list(query=query).next_items())
assert listed() == sorted([one.sandbox_id, two.sandbox_id]), listed()
assert listed(team="x") == sorted([one.sandbox_id, two.sandbox_id])
assert listed(job="one") == [one.sandbox_id]
assert listed(job="three") == []

info = one.get_info()
assert (info.template_id, info.metadata, info.state.value) == ("base", {"job": "one", "team": "x"}, "running"), info
lifetime = (info.end_at - info.started_at).total_seconds()
assert 59 <= lifetime <= 61, lifetime
one.set_timeout(600)
longer = one.get_info()
assert longer.end_at > info.end_at, (longer, info)

# connect: the same sandbox, usable.
again = Sandbox.connect(one.sandbox_id)
assert again.commands.run("echo again").stdout == "again\n"

one.kill()
assert one.is_running() is False
try:
    Sandbox.get_info(one.sandbox_id)
    raise SystemExit("a killed sandbox was found")
except SandboxNotFoundException:
    pass
try:
    one.set_timeout(60)
    raise SystemExit("a killed sandbox took a timeout")
except SandboxNotFoundException:
    pass
assert Sandbox.kill(one.sandbox_id) is False
assert listed() == [two.sandbox_id]

# A sandbox ends at its timeout: not running, its commands the SDK's timeout error.
import time
from e2b import TimeoutException
# (Its 1 s starts once it exists: a create slower than that on a loaded host must not
# race it.)
short = Sandbox.create()
short.set_timeout(1)
deadline = time.monotonic() + 30
while short.is_running():
    assert time.monotonic() < deadline, "a sandbox outlived its 1 s timeout by 30 s"
    time.sleep(0.05)
try:
    short.commands.run("true")
    raise SystemExit("an ended sandbox ran a command")
except TimeoutException:
    pass
assert listed() == [two.sandbox_id]
assert two.is_running() is True
two.kill()
assert listed() == []
print("PASS")
"#;

fn e2b_sdk_lists_times_and_kills_sandboxes(mode: Mode) {
    let server = Server::start(mode, &[]);
    let gateway = Gateway::start(mode, &server);
    assert_passed(gateway.sdk(KEY_A, LIFECYCLE));
    // Nothing is left: the server lists no session.
    let sessions =
        common::serve::exchange(&server.socket, br#"{"brig":1,"type":"session_list"}"#, &[]);
    assert_eq!(sessions["sessions"], serde_json::json!([]), "{sessions}");
}

/// Tenant A's sandbox, created secure; its id and access token on stdout.
const CREATE_SECURE: &str = r#"
from e2b import Sandbox
sbx = Sandbox.create(secure=True, timeout=120)
print(sbx.sandbox_id)
print(sbx._envd_access_token)
"#;

/// Tenant B, given A's id (`sys.argv[2]`): nothing of it is visible or touchable.
const OTHER_TENANT: &str = r#"
import sys
from e2b import Sandbox, SandboxNotFoundException, AuthenticationException
theirs = sys.argv[2]
assert theirs not in [info.sandbox_id for info in Sandbox.list().next_items()]
for attempt in (Sandbox.get_info, Sandbox.connect):
    try:
        attempt(theirs)
        raise SystemExit(f"{attempt.__name__} reached another tenant's sandbox")
    except SandboxNotFoundException:
        pass
assert Sandbox.kill(theirs) is False
try:
    Sandbox.list(api_key="e2b_" + "0" * 40).next_items()
    raise SystemExit("an unknown key listed sandboxes")
except AuthenticationException:
    pass
try:
    Sandbox.create(api_key="e2b_" + "f" * 40)
    raise SystemExit("an unknown key created a sandbox")
except AuthenticationException:
    pass
print("PASS")
"#;

/// envd of a secure sandbox (`sys.argv[2]`, token `sys.argv[3]`): refused without its
/// token or with another, served with it; then tenant A kills it.
const SECURE_TOKEN: &str = r#"
import sys, httpx
from e2b import Sandbox
url, sandbox, token = sys.argv[1:4]
list_call = dict(content=b"{}", headers={"Content-Type": "application/json", "E2b-Sandbox-Id": sandbox, "E2b-Sandbox-Port": "49983"})
with httpx.Client(base_url=url) as http:
    for headers in ({}, {"X-Access-Token": "0" * 32}):
        answer = http.post("/process.Process/List", **{**list_call, "headers": {**list_call["headers"], **headers}})
        assert answer.status_code == 401, (answer.status_code, answer.text)
        assert "X-Access-Token" in answer.json()["message"], answer.text
    answer = http.post("/process.Process/List", **{**list_call, "headers": {**list_call["headers"], "X-Access-Token": token}})
    assert answer.status_code == 200, (answer.status_code, answer.text)
sbx = Sandbox.connect(sandbox)
assert sbx.commands.run("echo mine").stdout == "mine\n"
sbx.kill()
print("PASS")
"#;

fn e2b_tenants_are_kept_apart(mode: Mode) {
    let server = Server::start(mode, &[]);
    let gateway = Gateway::start(mode, &server);
    let Some(created) = gateway.sdk(KEY_A, CREATE_SECURE) else {
        return;
    };
    let out = assert_success(&created);
    let lines: Vec<&str> = out.lines().collect();
    let [sandbox, token] = lines[..] else {
        panic!("{}", describe(&created))
    };
    assert_eq!(token.len(), 32, "{token}");
    assert_passed(gateway.sdk(KEY_B, &with_args(OTHER_TENANT, &[sandbox])));
    // Tenant B's attempts left it running: A still reaches it, with its token only.
    assert_passed(gateway.sdk(KEY_A, &with_args(SECURE_TOKEN, &[sandbox, token])));
}

/// Tenant A at its cap of two (`sys.argv[2]`: tenant B's key): a third is refused with
/// the SDK's RateLimitException, B is not held by A's cap, and a kill makes room.
const CAPPED: &str = r#"
import sys
from e2b import Sandbox, RateLimitException
first, second = Sandbox.create(), Sandbox.create()
try:
    Sandbox.create()
    raise SystemExit("a third sandbox was created past the cap of 2")
except RateLimitException as err:
    assert "--max-sandboxes-per-tenant 2" in str(err), err
others = Sandbox.create(api_key=sys.argv[2])
first.kill()
third = Sandbox.create()
for sandbox in (second, third, others):
    sandbox.kill()
print("PASS")
"#;

fn e2b_a_tenants_sandboxes_are_capped(mode: Mode) {
    let server = Server::start(mode, &[]);
    let gateway = Gateway::start_with(mode, &server, &["--max-sandboxes-per-tenant", "2"]);
    assert_passed(gateway.sdk(KEY_A, &with_args(CAPPED, &[KEY_B])));
}

/// Malformed requests of every layer: each gets the status and body the SDK maps to its
/// own error, and the gateway goes on serving (a sandbox runs a command at the end).
/// Also binary protobuf over h2c (HTTP/2 without TLS), as a Connect client may speak it.
const BAD_REQUESTS: &str = r#"
import struct, sys, httpx
from e2b import Sandbox, SandboxException
from e2b.envd.process import process_pb
url = sys.argv[1]
key = {"X-API-Key": "e2b_00000000000000000000000000000000000000a1"}
with httpx.Client(base_url=url) as http:
    answer = http.post("/sandboxes", content=b"{not json", headers=key)
    assert answer.status_code == 400 and answer.json()["code"] == 400, answer.text
    answer = http.post("/sandboxes", json={"templateID": "base", "timeout": -5}, headers=key)
    assert answer.status_code == 400 and "timeout" in answer.json()["message"], answer.text
    answer = http.post("/sandboxes", json={"templateID": "base", "metadata": {"brig-gateway.tenant": "bob"}}, headers=key)
    assert answer.status_code == 400 and "rename it" in answer.json()["message"], answer.text
    answer = http.get("/sandboxes", headers={"X-API-Key": "nope"})
    assert answer.status_code == 401 and answer.json()["code"] == 401, answer.text
    answer = http.get("/no/such/route", headers=key)
    assert answer.status_code == 404, answer.text
try:
    Sandbox.create(template="no-such-template")
    raise SystemExit("an unknown template was created")
except SandboxException as err:
    assert "400" in str(err) and "templateID" in str(err), err

sbx = Sandbox.create()
envd = {"E2b-Sandbox-Id": sbx.sandbox_id, "E2b-Sandbox-Port": "49983", "X-Access-Token": sbx._envd_access_token}
with httpx.Client(base_url=url, headers=envd) as http:
    answer = http.post("/process.Process/List", content=b"{oops", headers={"Content-Type": "application/json"})
    assert answer.status_code == 400 and answer.json()["code"] == "invalid_argument", answer.text
    answer = http.post("/process.Process/List", content=b"\xff\xff\xff", headers={"Content-Type": "application/proto"})
    assert answer.status_code == 400 and "protobuf" in answer.json()["message"], answer.text
    answer = http.post("/process.Process/List", content=b"{}", headers={"Content-Type": "text/plain"})
    assert answer.status_code == 415, answer.text
    for body in (b"\x00\x00", b"\x00\x00\x00\x00\x09{}", b"\x01\x00\x00\x00\x02{}"):
        answer = http.post("/process.Process/Start", content=body, headers={"Content-Type": "application/connect+json"})
        assert answer.status_code == 200, answer.text
        flags, length = struct.unpack(">BI", answer.content[:5])
        assert flags == 2 and b'"invalid_argument"' in answer.content[5:], answer.content
    answer = http.post("/process.Process/SendSignal", json={"process": {"pid": 999999}, "signal": "SIGNAL_SIGTERM"})
    assert answer.status_code == 404 and answer.json()["code"] == "not_found", answer.text
    answer = http.post("/process.Process/List", content=b" " * (5 << 20), headers={"Content-Type": "application/json"})
    assert answer.status_code == 429 and answer.json()["code"] == "resource_exhausted", answer.text
    answer = http.post("/filesystem.Filesystem/GetWatcherEvents", json={"watcherId": "nope"})
    assert answer.status_code == 404 and answer.json()["code"] == "not_found", answer.text
    answer = http.get("/health")
    assert answer.status_code == 204, answer.text
    answer = http.get("/health", headers={"E2b-Sandbox-Port": "8080"})
    assert answer.status_code == 502, answer.text

# The host form of a sandbox's address: {port}-{sandboxID}.{domain}.
with httpx.Client(base_url=url) as http:
    host = {"Host": f"49983-{sbx.sandbox_id}.sandboxes.example", "X-Access-Token": sbx._envd_access_token}
    answer = http.post("/process.Process/List", content=b"{}", headers={**host, "Content-Type": "application/json"})
    assert answer.status_code == 200 and answer.json() == {}, answer.text
    answer = http.get("/health", headers={"Host": "49983-0123456789abcdef0123456789abcdef.sandboxes.example"})
    assert answer.status_code == 502, answer.text

# Binary protobuf, over HTTP/2 without TLS.
with httpx.Client(base_url=url, headers=envd, http1=False, http2=True) as http:
    start = process_pb.StartRequest(process=process_pb.ProcessConfig(cmd="/bin/echo", args=["binary"]), stdin=False)
    message = start.to_binary()
    answer = http.post("/process.Process/Start", content=struct.pack(">BI", 0, len(message)) + message,
                       headers={"Content-Type": "application/connect+proto"})
    assert answer.http_version == "HTTP/2" and answer.status_code == 200, (answer.http_version, answer.text)
    body, events = answer.content, []
    while body:
        flags, length = struct.unpack(">BI", body[:5])
        payload, body = body[5:5 + length], body[5 + length:]
        if flags & 2:
            assert payload == b"{}", payload
            break
        events.append(process_pb.StartResponse.from_binary(payload).event.event)
    assert [event.field for event in events] == ["start", "data", "end"], events
    assert events[1].value.output.value == b"binary\n" and events[2].value.exited, events
    answer = http.post("/process.Process/List", content=process_pb.ListRequest().to_binary(),
                       headers={"Content-Type": "application/proto"})
    assert answer.status_code == 200 and answer.headers["content-type"] == "application/proto", answer.text
    assert process_pb.ListResponse.from_binary(answer.content).processes == [], answer.content

assert sbx.commands.run("echo still up").stdout == "still up\n"
sbx.kill()
print("PASS")
"#;

fn e2b_bad_requests_get_the_sdks_errors(mode: Mode) {
    sdk_program_passes(mode, BAD_REQUESTS);
}

/// Starts ten background commands and leaves without a word (its streams still open).
const LEAVE_STREAMS_OPEN: &str = r#"
from e2b import Sandbox
sbx = Sandbox.create(timeout=120)
handles = [sbx.commands.run("sleep 600", background=True) for _ in range(10)]
print(sbx.sandbox_id)
print(sbx._envd_access_token)
"#;

/// The sandbox of `sys.argv[2]`: its ten commands still run; then it is killed.
const STILL_RUNNING: &str = r#"
import sys
from e2b import Sandbox
sbx = Sandbox.connect(sys.argv[2])
assert len([p for p in sbx.commands.list() if p.args == ["-l", "-c", "sleep 600"]]) == 10, sbx.commands.list()
sbx.kill()
print("PASS")
"#;

/// The descriptors a process holds.
fn descriptors(pid: u32) -> usize {
    std::fs::read_dir(format!("/proc/{pid}/fd")).map_or(0, |entries| entries.count())
}

/// A client that leaves with process streams open takes nothing of the gateway along:
/// each stream's connection to the server (and its thread) goes when the HTTP connection
/// does, and the processes go on running, as envd's do.
fn gateway_holds_nothing_for_clients_gone(mode: Mode) {
    let server = Server::start(mode, &[]);
    let gateway = Gateway::start(mode, &server);
    let pid = gateway.running.as_ref().unwrap().pid();
    let before = descriptors(pid);
    let Some(left) = gateway.sdk(KEY_A, LEAVE_STREAMS_OPEN) else {
        return;
    };
    let out = assert_success(&left);
    let sandbox = out.lines().next().expect("the sandbox's id");
    let released = wait_until(std::time::Duration::from_secs(20), || {
        descriptors(pid) <= before
    });
    assert!(
        released,
        "the gateway held {} descriptors after its client left, {before} before",
        descriptors(pid)
    );
    assert_passed(gateway.sdk(KEY_A, &with_args(STILL_RUNNING, &[sandbox])));
}

/// `brig gateway` in `mode` with the server socket `socket`, the key file `keys` and
/// `extra` options, run to its end: a start refused (the test asserts how).
pub(crate) fn gateway_refused(mode: Mode, socket: &str, keys: &Path, extra: &[&str]) -> Output {
    let mut args = vec![
        "gateway",
        "--listen",
        "127.0.0.1:0",
        "--server",
        socket,
        "--api-keys",
        keys.to_str().unwrap(),
    ];
    args.extend_from_slice(extra);
    run(mode, &args)
}

fn gateway_refuses_a_bad_key_file(mode: Mode) {
    let server = Server::start(mode, &[]);
    let dir = TempDir::new("gateway-bad-keys");
    let bad = dir.file("keys", &format!("{KEY_A} alice\n{KEY_B}\n"));
    let output = gateway_refused(mode, server.socket(), &bad, &[]);
    assert_code(&output, 125);
    assert_one_line_error(
        &output,
        &[&format!("{}:2: 1 words", bad.display()), "KEY TENANT"],
    );
    let good = dir.file("good", &format!("{KEY_A} alice\n"));
    let missing = format!("{}.missing", server.socket());
    let output = gateway_refused(mode, &missing, &good, &[]);
    assert_code(&output, 125);
    assert_one_line_error(&output, &["--server", "brig serve --socket"]);
}
