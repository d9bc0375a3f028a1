//! envd's `process.Process/StreamInput` (a Connect client stream) through the Connect
//! client E2B's Python SDK builds for envd (`sbx.commands._rpc`: the generated
//! `ProcessClientSync` on the SDK's own HTTP stack, with its sandbox headers and token;
//! neither SDK calls `stream_input` itself), as root and rootless: a process reads the first line sent
//! while the stream is still open (the test sends the second only once the process has
//! written what it read), then the rest, over HTTP/1.1 (the SDK's plaintext transport)
//! and HTTP/2 (h2c, httpx); a stream that does not start with `start`, one for
//! a process that does not exist, and a unary call of it get Connect's errors, and the
//! sandbox goes on.

use crate::common;
use crate::gateway::{Gateway, KEY_A};

use common::serve::Server;
use common::*;

both_modes!(e2b_stream_input_feeds_a_process_as_it_arrives);

const STREAM_INPUT: &str = r#"
import sys, time
import httpx
from connectrpc.code import Code
from connectrpc.errors import ConnectError
from protobuf import Oneof
from e2b import Sandbox
from e2b.envd.process import process_pb as P

sbx = Sandbox.create()
rpc = sbx.commands._rpc
# The SDK's interceptor adds its sandbox headers (id, port, token) to unary calls and
# server streams only: a client stream gets them given.
sandbox_headers = dict(sbx.commands._connection_config.sandbox_headers)
assert sandbox_headers["E2b-Sandbox-Id"] == sbx.sandbox_id and "X-Access-Token" in sandbox_headers, sandbox_headers

def start(pid):
    return P.StreamInputRequest(event=Oneof("start", P.StreamInputRequest.StartEvent(
        process=P.ProcessSelector(selector=Oneof("pid", pid)))))
def data(text):
    return P.StreamInputRequest(event=Oneof("data", P.StreamInputRequest.DataEvent(
        input=P.ProcessInput(input=Oneof("stdin", text.encode())))))
keepalive = P.StreamInputRequest(event=Oneof("keepalive", P.StreamInputRequest.KeepAlive()))

proc = sbx.commands.run('read a; echo "$a" > first.txt; read b; echo "$a+$b"', background=True, stdin=True)
def stream():
    yield start(proc.pid)
    yield data("one\n")
    # The process has read the first line while this stream is still open.
    while not sbx.files.exists("first.txt"):
        time.sleep(0.01)
    yield keepalive
    yield data("two\n")
answer = rpc.stream_input(stream(), headers=sandbox_headers)
assert isinstance(answer, P.StreamInputResponse), answer
assert proc.wait().stdout == "one+two\n"

# The same over HTTP/2 (h2c; the SDK's plaintext connections are HTTP/1.1, chunked), JSON
# envelopes written by hand, the second sent once the process has read the first.
import base64, json, struct
def envelope(message):
    body = json.dumps(message).encode()
    return struct.pack(">BI", 0, len(body)) + body
def stdin(text):
    return envelope({"data": {"input": {"stdin": base64.b64encode(text.encode()).decode()}}})
again = sbx.commands.run('read a; echo "$a" > second.txt; read b; echo "$a/$b"', background=True, stdin=True)
def frames():
    yield envelope({"start": {"process": {"pid": again.pid}}})
    yield stdin("three\n")
    while not sbx.files.exists("second.txt"):
        time.sleep(0.01)
    yield envelope({"keepalive": {}})
    yield stdin("four\n")
with httpx.Client(http1=False, http2=True) as h2:
    answer = h2.post(sys.argv[1] + "/process.Process/StreamInput", content=frames(),
                     headers=dict(sandbox_headers, **{"Content-Type": "application/connect+json"}))
assert answer.http_version == "HTTP/2", answer.http_version
assert answer.content == envelope({}) + b"\x02" + struct.pack(">I", 2) + b"{}", answer.content
assert again.wait().stdout == "three/four\n"

# Refusals: Connect's codes, one line each; the sandbox goes on.
for requests, code, expected in (
    ([data("x\n")], Code.INVALID_ARGUMENT, "first message must be a start event"),
    ([start(99999), data("x\n")], Code.NOT_FOUND, "99999"),
    ([], Code.INVALID_ARGUMENT, "without a start event"),
):
    try:
        rpc.stream_input(iter(requests), headers=sandbox_headers)
        raise SystemExit(f"{requests} was taken")
    except ConnectError as err:
        assert err.code == code and expected in err.message and "\n" not in err.message, (code, err.code, err.message)

# A unary call of a client stream is refused (as the end of a stream: the answer is one).
headers = dict(sandbox_headers, **{"Content-Type": "application/json"})
answer = httpx.post(sys.argv[1] + "/process.Process/StreamInput", headers=headers, content=b"{}")
assert "client stream" in answer.text, (answer.status_code, answer.text)
# Without the sandbox's token, 401 before anything is read.
del headers["X-Access-Token"]
headers["Content-Type"] = "application/connect+json"
answer = httpx.post(sys.argv[1] + "/process.Process/StreamInput", headers=headers, content=b"")
assert answer.status_code == 401, (answer.status_code, answer.text)

assert sbx.commands.run("echo alive").stdout == "alive\n"
sbx.kill()
print("PASS")
"#;

fn e2b_stream_input_feeds_a_process_as_it_arrives(mode: Mode) {
    let server = Server::start(mode, &[]);
    let gateway = Gateway::start(mode, &server);
    crate::gateway::assert_passed(gateway.sdk(KEY_A, STREAM_INPUT));
}
