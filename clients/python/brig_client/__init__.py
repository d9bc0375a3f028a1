"""A client for `brig serve`: each run gets a fresh jail from the server's warm pool,
and a `Sandbox` is a session, a jail that keeps its interpreter's state and its files
between requests.

The protocol (version 1): frames of a 4-byte big-endian length and one JSON object, over
a unix stream socket; the program's standard streams travel as SCM_RIGHTS descriptors
with the request, or are captured by the server and returned in its reply. Sessions are
described in docs/protocol.md: one request per connection.
"""

import base64
import json
import os
import pwd
import socket as _socket
import struct
import sys
import threading
from dataclasses import dataclass, field
from typing import Any, Callable, Dict, IO, List, Optional, Sequence, Tuple

__all__ = [
    "BrigError", "Result", "Client", "run", "status", "PROTOCOL_VERSION",
    "Sandbox", "Execution", "ExecutionError", "CommandResult", "EntryInfo", "list_sessions",
    "CommandHandle", "ProcessInfo",
    "RichResult", "Logs", "CodeContext",
]

PROTOCOL_VERSION = 1
DEFAULT_SOCKET = "/run/brig/brig.sock"
MAX_FRAME = 1 << 20
# A reply may be larger than a request: captured output is up to 8 MiB (stdout and stderr
# together), and JSON escapes it. The bound only guards against a peer that is not brig.
MAX_REPLY = 64 << 20


class BrigError(Exception):
    """The server refused or could not run the request (brig's exit status 125)."""

    def __init__(self, message: str, kind: str = "setup_failed", exit_code: int = 125):
        super().__init__(message)
        self.message = message
        self.kind = kind
        self.exit_code = exit_code

    @property
    def retryable(self) -> bool:
        """The server refused for now (kind ``busy``: full, draining): nothing ran, and the
        same request may be answered if sent again later."""
        return self.kind == "busy"


class _Verdicted:
    """What a reply with a verdict tells at a glance: its status, and whether it is ok."""

    verdict: Dict[str, Any]

    @property
    def status(self) -> str:
        return self.verdict.get("status", "")

    @property
    def ok(self) -> bool:
        return self.status == "ok"


@dataclass
class Result(_Verdicted):
    """One run: brig's exit status for it, the verdict (schema brig-verdict/1), and in
    capture mode what the program wrote."""

    exit_code: int
    verdict: Dict[str, Any]
    stdout: Optional[str] = None
    stderr: Optional[str] = None
    config_digest: Optional[str] = None


def _user_id(user: Optional[str]) -> Optional[int]:
    """A user's number, given its number or name (`BRIG_SERVER_UID=brig`)."""
    if not user:
        return None
    if user.isdigit():
        return int(user)
    return pwd.getpwnam(user).pw_uid


@dataclass
class Client:
    socket: str = field(default_factory=lambda: os.environ.get("BRIG_SERVER", DEFAULT_SOCKET))
    timeout: Optional[float] = None
    # Besides root and this process's uid, the one uid trusted to listen on `socket`
    # (whoever listens gets the request, its descriptors, and decides the result).
    server_uid: Optional[int] = field(default_factory=lambda: _user_id(os.environ.get("BRIG_SERVER_UID")))

    def run(
        self,
        argv: Sequence[str],
        *,
        options: Optional[Dict[str, Any]] = None,
        stdin: Optional[str] = None,
        capture: bool = True,
        stdio: Optional[Sequence[IO]] = None,
    ) -> Result:
        """Runs `argv` in a fresh jail. `options` are `brig run`'s, by their YAML names
        (`{"time-limit": "5s", "env": ["A=1"]}`). With `capture` (the default) the reply
        holds stdout and stderr and `stdin` is the program's input; without it the
        program gets `stdio` (three files) or this process's own streams."""
        request: Dict[str, Any] = {
            "brig": PROTOCOL_VERSION,
            "type": "run",
            "options": dict(options or {}, command=list(argv)),
            "stdio": "capture" if capture else "fds",
        }
        fds: List[int] = []
        if capture:
            if stdin is not None:
                request["stdin"] = stdin
        else:
            if stdin is not None:
                raise ValueError("stdin= goes with capture=True; pass stdio= files otherwise")
            streams = stdio or (sys.stdin, sys.stdout, sys.stderr)
            for stream in streams:
                if hasattr(stream, "flush"):
                    stream.flush()
            fds = [stream.fileno() for stream in streams]
            if len(fds) != 3:
                raise ValueError("stdio= needs three files: stdin, stdout, stderr")
        reply = self._exchange(request, fds)
        kind = reply.get("type")
        if kind == "done":
            verdict = reply["verdict"]
            return Result(
                exit_code=int(verdict.get("brig_exit_code", 125)),
                verdict=verdict,
                stdout=reply.get("stdout"),
                stderr=reply.get("stderr"),
                config_digest=reply.get("config_digest"),
            )
        if kind == "error":
            raise BrigError(reply.get("message", "?"), reply.get("kind", "setup_failed"), int(reply.get("exit_code", 125)))
        raise BrigError(f"brig serve answered a run with {kind!r}")

    def status(self) -> Dict[str, Any]:
        """The server's pool, runs and failures."""
        reply = self._exchange({"brig": PROTOCOL_VERSION, "type": "status"}, [])
        if reply.get("type") != "status":
            raise BrigError(reply.get("message", f"brig serve answered status with {reply.get('type')!r}"))
        return {key: value for key, value in reply.items() if key != "type"}

    def _connect(self) -> _socket.socket:
        """A connection to the server, whose listener is checked to be trusted."""
        connection = _socket.socket(_socket.AF_UNIX, _socket.SOCK_STREAM)
        try:
            connection.settimeout(self.timeout)
            try:
                connection.connect(self.socket)
            except OSError as error:
                raise BrigError(f"--server {self.socket}: cannot connect: {error}; is `brig serve` running?") from error
            credentials = connection.getsockopt(_socket.SOL_SOCKET, _socket.SO_PEERCRED, struct.calcsize("3i"))
            _, uid, _ = struct.unpack("3i", credentials)
            if uid not in (0, os.geteuid(), self.server_uid):
                raise BrigError(
                    f"--server {self.socket}: the listener is uid {uid}, neither root nor you (uid {os.geteuid()}); "
                    f"nothing was sent. If you trust that user's server, set BRIG_SERVER_UID={uid}"
                )
        except BaseException:
            connection.close()
            raise
        return connection

    def _exchange(self, request: Dict[str, Any], fds: List[int]) -> Dict[str, Any]:
        with self._open(request, fds) as connection:
            return _read_frame(connection)

    def _open(self, request: Dict[str, Any], fds: List[int]) -> _socket.socket:
        """Connects, checks who listens, sends `request`; the connection, for its frames."""
        body = json.dumps(request).encode()
        frame = struct.pack(">I", len(body)) + body
        connection = self._connect()
        try:
            try:
                if fds:
                    sent = _socket.send_fds(connection, [frame], fds)
                    connection.sendall(frame[sent:])
                else:
                    connection.sendall(frame)
            except OSError:
                pass  # a refusing server answers and closes; its answer explains
            return connection
        except BaseException:
            connection.close()
            raise


def _read_exactly(connection: _socket.socket, count: int) -> bytes:
    chunks = []
    while count:
        chunk = connection.recv(count)
        if not chunk:
            raise BrigError("brig serve closed the connection before answering")
        chunks.append(chunk)
        count -= len(chunk)
    return b"".join(chunks)


def _read_frame(connection: _socket.socket) -> Dict[str, Any]:
    (length,) = struct.unpack(">I", _read_exactly(connection, 4))
    if length > MAX_REPLY:
        raise BrigError(f"brig serve sent a frame of {length} bytes")
    return json.loads(_read_exactly(connection, length))


def run(argv: Sequence[str], *, socket: Optional[str] = None, **kwargs: Any) -> Result:
    """`Client(socket).run(argv, ...)`."""
    return (Client(socket) if socket else Client()).run(argv, **kwargs)


def status(socket: Optional[str] = None) -> Dict[str, Any]:
    return (Client(socket) if socket else Client()).status()


# Sessions (docs/protocol.md): a jail that lives between requests.


def _duration(value: Any) -> Optional[str]:
    """A duration for the server: strings as given ("5s", "10m"), numbers as seconds."""
    if value is None or isinstance(value, str):
        return value
    if isinstance(value, bool) or not isinstance(value, (int, float)) or value < 0:
        raise ValueError(f"a duration is a string such as '5s' or a number of seconds, not {value!r}")
    millis = round(value * 1000)
    return f"{millis // 1000}s" if millis % 1000 == 0 else f"{millis}ms"


def _request(client: Client, request: Dict[str, Any], expected: str) -> Dict[str, Any]:
    """One session request on its own connection; the reply, or BrigError."""
    return _expect(client._exchange(dict(request, brig=PROTOCOL_VERSION), []), expected, request["type"])


OutputCallback = Optional[Callable[[str], Any]]


def _chunk_text(frame: Dict[str, Any]) -> str:
    """An `output` frame's text: `data` as sent, bytes that are not UTF-8 (`base64`)
    decoded with replacement characters."""
    if "data" in frame:
        return frame["data"]
    return base64.b64decode(frame.get("base64", "")).decode("utf-8", errors="replace")


def _stream(client: Client, request: Dict[str, Any], end: str, on_stdout: OutputCallback,
            on_stderr: OutputCallback, connection: Optional[_socket.socket] = None) -> Tuple[Dict[str, Any], str, str]:
    """Reads `output` frames (to the callbacks, and collected) until the frame `end`:
    (that frame, stdout, stderr)."""
    if connection is None:
        connection = client._open(dict(request, brig=PROTOCOL_VERSION), [])
    collected: Dict[str, List[str]] = {"stdout": [], "stderr": []}
    with connection:
        while True:
            frame = _read_frame(connection)
            if frame.get("type") != "output":
                return _expect(frame, end, request["type"]), "".join(collected["stdout"]), "".join(collected["stderr"])
            text = _chunk_text(frame)
            stream = frame.get("stream", "stdout")
            collected.setdefault(stream, []).append(text)
            callback = on_stdout if stream == "stdout" else on_stderr
            if callback is not None:
                callback(text)


@dataclass
class ExecutionError:
    """An exception a cell raised: its type's name, its message and the traceback."""

    type: str
    message: str
    traceback: str = ""

    def __str__(self) -> str:
        return f"{self.type}: {self.message}"

    @property
    def name(self) -> str:
        """`type`, by the name code-interpreter SDKs give it."""
        return self.type

    @property
    def value(self) -> str:
        """`message`, by the name code-interpreter SDKs give it."""
        return self.message


# A result's mime types and the attribute each is under.
_RESULT_TYPES = {
    "text/plain": "text", "text/html": "html", "text/markdown": "markdown",
    "image/svg+xml": "svg", "image/png": "png", "image/jpeg": "jpeg",
    "application/pdf": "pdf", "text/latex": "latex", "application/json": "json",
    "application/javascript": "javascript",
}


@dataclass
class RichResult:
    """One rich result of a cell: what it display()ed, a matplotlib figure, or its final
    value (`is_main_result`). Each format is an attribute (None when absent): `text`,
    `html`, `markdown`, `svg`, `png` and `jpeg` and `pdf` (base64), `latex`, `json` (the
    value), `javascript`; other mime types are in `extra`."""

    text: Optional[str] = None
    html: Optional[str] = None
    markdown: Optional[str] = None
    svg: Optional[str] = None
    png: Optional[str] = None
    jpeg: Optional[str] = None
    pdf: Optional[str] = None
    latex: Optional[str] = None
    json: Any = None
    javascript: Optional[str] = None
    is_main_result: bool = False
    extra: Dict[str, Any] = field(default_factory=dict)

    @classmethod
    def from_bundle(cls, bundle: Dict[str, Any]) -> "RichResult":
        result = cls(is_main_result=bool(bundle.get("is_main_result", False)))
        for mime, value in bundle.items():
            if mime in _RESULT_TYPES:
                setattr(result, _RESULT_TYPES[mime], value)
            elif mime != "is_main_result":
                result.extra[mime] = value
        return result

    def formats(self) -> List[str]:
        """The formats this result has, by attribute name (and extra mime types)."""
        names = [name for name in _RESULT_TYPES.values() if getattr(self, name) is not None]
        return names + list(self.extra)

    def png_bytes(self) -> Optional[bytes]:
        """The PNG decoded, or None."""
        return base64.b64decode(self.png) if self.png is not None else None


@dataclass
class Logs:
    """A cell's output: its stdout and its stderr (each one string in a list)."""

    stdout: List[str]
    stderr: List[str]


@dataclass
class CodeContext:
    """An interpreter of the session with its own state: `id`, `language` (python, node
    or bash), `cwd`. The default context of each language has the language's name."""

    id: str
    language: str
    cwd: Optional[str] = None

    @classmethod
    def from_reply(cls, context: Dict[str, Any]) -> "CodeContext":
        return cls(context["id"], context["language"], context.get("cwd"))


@dataclass
class Execution(_Verdicted):
    """One cell: what it printed, the representation of its final expression (`result`,
    None after a statement), its rich results (`results`: what it displayed, its figures,
    its final value), the exception it raised (`error`), the verdict, and `state_lost`
    when the interpreter was restarted (time limit, out of memory, a broken protocol), and
    why (`state_lost_reason`)."""

    stdout: str
    stderr: str
    result: Optional[str]
    error: Optional[ExecutionError]
    verdict: Dict[str, Any]
    state_lost: bool = False
    state_lost_reason: Optional[str] = None
    results: List[RichResult] = field(default_factory=list)
    context: Optional[str] = None

    @property
    def ok(self) -> bool:
        return self.error is None and self.status == "ok"

    @property
    def logs(self) -> Logs:
        return Logs([self.stdout] if self.stdout else [], [self.stderr] if self.stderr else [])

    @property
    def text(self) -> Optional[str]:
        """The main result's text (the final value's representation), or None."""
        return next((result.text for result in self.results if result.is_main_result), None)


@dataclass
class CommandResult(_Verdicted):
    """One command: `exit_code` as `brig run` would exit (the program's status; 124 at
    the time limit, 128+N killed by signal N, 127 not found), its output, the verdict."""

    exit_code: int
    stdout: str
    stderr: str
    verdict: Dict[str, Any]


@dataclass
class EntryInfo:
    """A directory entry in the workspace; `type` is file, dir, symlink or other. `path`
    is relative to the workspace, `uid`/`gid` as the jail sees them, `modified_time` in
    seconds since the epoch, `symlink_target` for a symlink."""

    name: str
    type: str
    size: int
    mode: int
    path: str = ""
    uid: int = 0
    gid: int = 0
    modified_time: float = 0.0
    symlink_target: Optional[str] = None

    @classmethod
    def _of(cls, entry: Dict[str, Any]) -> "EntryInfo":
        return cls(entry["name"], entry["type"], int(entry.get("size", 0)), int(entry.get("mode", 0)),
                   entry.get("path", entry["name"]), int(entry.get("uid", 0)), int(entry.get("gid", 0)),
                   float(entry.get("mtime", 0.0)), entry.get("symlink_target"))


@dataclass
class FilesystemEvent:
    """One change a watcher saw: `type` is create, write, remove, rename (the old name)
    or chmod; `name` is the path relative to the workspace."""

    name: str
    type: str


class WatchHandle:
    """A directory watcher (`Files.watch_dir`): `get_new_events()` returns what changed
    since the last call; `overflowed` says whether the last call lost events (more than
    the server holds between calls); `stop()` removes it.

    Made with `on_event`, it streams: a thread reads each change as the server sends it
    and calls `on_event(event)`; `stop()` ends the stream, after which `dropped` counts
    the events the server dropped because they were not read fast enough and
    `overflowed` says whether the kernel lost some."""

    def __init__(self, sandbox: "Sandbox", watcher: str,
                 stream: Optional[Tuple[_socket.socket, Callable[[FilesystemEvent], Any]]] = None):
        self._sandbox = sandbox
        self.watcher = watcher
        self.overflowed = False
        self.dropped = 0
        self._thread: Optional[threading.Thread] = None
        if stream is not None:
            self._thread = threading.Thread(target=self._read_stream, args=stream, daemon=True)
            self._thread.start()

    def _read_stream(self, connection: _socket.socket, on_event: Callable[[FilesystemEvent], Any]) -> None:
        with connection:
            while True:
                try:
                    frame = _read_frame(connection)
                except (OSError, BrigError, ValueError, struct.error):
                    return  # the session ended or the server went away
                if frame.get("type") != "watch_event":
                    self.dropped = int(frame.get("dropped", 0))
                    self.overflowed = bool(frame.get("overflow", False))
                    return
                on_event(FilesystemEvent(frame["path"], frame["kind"]))

    def get_new_events(self) -> List[FilesystemEvent]:
        if self._thread is not None:
            raise BrigError(f"watcher {self.watcher} streams its events to on_event; poll a watcher made without it",
                            "bad_input", 125)
        reply = self._sandbox._request({"type": "session_watch_events", "watcher": self.watcher}, "events")
        self.overflowed = bool(reply.get("overflow", False))
        return [FilesystemEvent(event["path"], event["type"]) for event in reply.get("events", [])]

    def stop(self) -> None:
        self._sandbox._request({"type": "session_unwatch", "watcher": self.watcher}, "unwatched")
        if self._thread is not None:
            self._thread.join()  # the server sends the stream's last frame and closes it


def _stream_size(data: Any) -> Optional[int]:
    """The bytes left in a file object, or None when it cannot tell (a pipe)."""
    try:
        return os.fstat(data.fileno()).st_size - data.tell()
    except (AttributeError, OSError, ValueError):
        pass
    try:
        here = data.tell()
        end = data.seek(0, os.SEEK_END)
        data.seek(here)
        return end - here
    except (AttributeError, OSError, ValueError):
        return None


class Files:
    """`Sandbox.files`: the session's workspace; paths are relative to it."""

    def __init__(self, sandbox: "Sandbox"):
        self._sandbox = sandbox

    def write(self, path: str, data: Any) -> int:
        """Writes `data` to `path` (replacing it, creating parent directories): a str (as
        UTF-8), bytes, or a binary file object (streamed from its position to its end,
        with sendfile for a real file). Any size up to the workspace, one request,
        streamed on its connection (`session_write`). Returns the file's size."""
        if isinstance(data, str):
            data = data.encode()
        if isinstance(data, (bytes, bytearray, memoryview)):
            size: Optional[int] = len(data)
        else:
            size = _stream_size(data)
            if size is None:  # a pipe: its size is known once it is read
                data = data.read()
                size = len(data)
        with self._sandbox._client._connect() as connection:
            _send_request(connection, {"type": "session_write", "path": path, "size": size,
                                       "session": self._sandbox.session_id})
            _expect(_read_frame(connection), "ready", "session_write")
            try:
                if isinstance(data, (bytes, bytearray, memoryview)):
                    connection.sendall(data)
                else:
                    connection.sendfile(data, count=size)
            except OSError:
                pass  # the runner stopped reading (a full workspace): its answer says why
            return int(_expect(_read_frame(connection), "written", "session_write").get("size", 0))

    def read(self, path: str, format: str = "text") -> Any:
        """The file at `path`, streamed (`session_read`, any size): a str (UTF-8), bytes
        with `format="bytes"`, or with `format="stream"` an iterator of bytes chunks (the
        whole file never held)."""
        if format not in ("text", "bytes", "stream"):
            raise ValueError("format is 'text', 'bytes' or 'stream'")
        chunks = self._read_chunks(path)
        if format == "stream":
            return chunks
        content = b"".join(chunks)
        return content if format == "bytes" else content.decode()

    def _read_chunks(self, path: str) -> Any:
        connection = self._sandbox._client._connect()
        try:
            _send_request(connection, {"type": "session_read", "path": path, "session": self._sandbox.session_id})
            header = _expect(_read_frame(connection), "reading", "session_read")
        except BaseException:
            connection.close()
            raise

        def chunks() -> Any:
            with connection:
                left = int(header.get("length", 0))
                while left:
                    chunk = connection.recv(min(left, 1 << 20))
                    if not chunk:
                        raise BrigError(f"session_read {path!r}: the connection ended {left} bytes short "
                                        "(the file shrank while it was read, or the session ended)")
                    left -= len(chunk)
                    yield chunk

        return chunks()

    def list(self, path: str = ".", depth: int = 1) -> List[EntryInfo]:
        """The entries beneath the directory `path`, `depth` levels deep (1: its own),
        sorted by path."""
        reply = self._sandbox._request({"type": "session_ls", "path": path, "depth": depth}, "ls")
        return [EntryInfo._of(entry) for entry in reply.get("entries", [])]

    def get_info(self, path: str) -> EntryInfo:
        """What `path` is (a symlink as itself, with its target)."""
        return EntryInfo._of(self._sandbox._request({"type": "session_stat", "path": path}, "stat")["entry"])

    stat = get_info

    def exists(self, path: str) -> bool:
        return bool(self._sandbox._request({"type": "session_exists", "path": path}, "exists")["exists"])

    def make_dir(self, path: str, parents: bool = True) -> bool:
        """Makes the directory `path` (and its parents); False if it was there."""
        return bool(self._sandbox._request({"type": "session_mkdir", "path": path, "parents": parents},
                                           "mkdir")["created"])

    def rename(self, old_path: str, new_path: str) -> EntryInfo:
        """Moves `old_path` to `new_path` (replacing a file there); what is there now."""
        self._sandbox._request({"type": "session_rename", "source": old_path, "destination": new_path}, "renamed")
        return self.get_info(new_path)

    def remove(self, path: str) -> None:
        """Removes a file, a symlink (not its target) or a directory with all it holds."""
        self._sandbox._request({"type": "session_remove", "path": path}, "removed")

    def watch_dir(self, path: str, recursive: bool = False,
                  on_event: Optional[Callable[[FilesystemEvent], Any]] = None) -> WatchHandle:
        """Watches the directory `path` (and with `recursive` every one beneath it). With
        `on_event`, each change is sent as it happens and `on_event(event)` is called on a
        thread of the handle's; otherwise poll with `get_new_events()`."""
        request = {"type": "session_watch", "path": path, "recursive": recursive}
        if on_event is None:
            reply = self._sandbox._request(request, "watcher")
            return WatchHandle(self._sandbox, reply["watcher"])
        connection, reply = _open_stream(self._sandbox, dict(request, stream=True), "watcher")
        connection.settimeout(None)  # events come when files change
        return WatchHandle(self._sandbox, reply["watcher"], (connection, on_event))


def _open_stream(sandbox: "Sandbox", request: Dict[str, Any], expected: str) -> Tuple[_socket.socket, Dict[str, Any]]:
    """A session request whose connection stays open, and its first frame (`expected`)."""
    request = dict(request, session=sandbox.session_id, brig=PROTOCOL_VERSION)
    connection = sandbox._client._open(request, [])
    try:
        return connection, _expect(_read_frame(connection), expected, request["type"])
    except BaseException:
        connection.close()
        raise


def _send_request(connection: _socket.socket, request: Dict[str, Any]) -> None:
    body = json.dumps(dict(request, brig=PROTOCOL_VERSION)).encode()
    connection.sendall(struct.pack(">I", len(body)) + body)


def _expect(reply: Dict[str, Any], expected: str, what: str) -> Dict[str, Any]:
    kind = reply.get("type")
    if kind == "error":
        raise BrigError(reply.get("message", "?"), reply.get("kind", "setup_failed"), int(reply.get("exit_code", 125)))
    if kind != expected:
        raise BrigError(f"brig serve answered {what} with {kind!r}")
    return reply


def _program_fields(request: Dict[str, Any], env: Any, cwd: Optional[str], timeout: Any) -> None:
    """A program's `env` (a dict or a list of "K=V"), `cwd` and `timeout` into its request."""
    if env:
        request["env"] = [f"{k}={v}" for k, v in env.items()] if isinstance(env, dict) else list(env)
    if cwd is not None:
        request["chdir"] = cwd
    if timeout is not None:
        request["time_limit"] = _duration(timeout)


def _command_result(verdict: Dict[str, Any], stdout: str, stderr: str) -> CommandResult:
    code = verdict.get("brig_exit_code")
    if code is None:
        code = verdict.get("exit_code")
    return CommandResult(int(code if code is not None else 125), stdout, stderr, verdict)


@dataclass
class ProcessInfo:
    """A process of the session (`commands.list()`): `pid` (its pid in the jail),
    `tag`, `command`, `running`, and once it has ended its `status`, `exit_code` and
    `signal`; `started_unix_ms`; output its backlog dropped (`backlog_dropped`); the
    variables its start set (`env`, `K=V`) and its working directory in the jail (`cwd`)."""

    pid: int
    tag: Optional[str]
    command: List[str]
    running: bool
    started_unix_ms: int
    background: bool = True
    status: Optional[str] = None
    exit_code: Optional[int] = None
    signal: Optional[int] = None
    backlog_dropped: int = 0
    env: List[str] = field(default_factory=list)
    cwd: str = ""

    @classmethod
    def _of(cls, reply: Dict[str, Any]) -> "ProcessInfo":
        ended = reply.get("status") or {}
        return cls(int(reply["pid"]), reply.get("tag"), list(reply.get("command", [])), bool(reply.get("running")),
                   int(reply.get("started_unix_ms", 0)), bool(reply.get("background", True)), ended.get("status"),
                   ended.get("exit_code"), ended.get("signal"), int(reply.get("backlog_dropped", 0)),
                   list(reply.get("env", [])), str(reply.get("cwd", "")))


class CommandHandle:
    """A background process (`commands.run(..., background=True)`, `commands.connect()`):
    `wait()` for its output and result, `kill()`, `signal()`, `send_stdin()`,
    `close_stdin()`."""

    def __init__(self, commands: "Commands", pid: int, tag: Optional[str],
                 connection: Optional[_socket.socket] = None):
        self._commands = commands
        self.pid = pid
        self.tag = tag
        self._connection = connection

    def wait(self, on_stdout: OutputCallback = None, on_stderr: OutputCallback = None) -> CommandResult:
        """Connects (unless connected already) and reads until the process ends: what
        it wrote (the latest MiB of what came before, then live) to the callbacks and
        in the result, then its verdict."""
        commands = self._commands
        connection, self._connection = self._connection, None
        if connection is None:
            connection = commands._sandbox._client._open(
                {"brig": PROTOCOL_VERSION, "type": "session_connect",
                 "session": commands._sandbox.session_id, "pid": self.pid}, [])
            _expect(_read_frame(connection), "process", "session_connect")
        request = {"type": "session_connect"}
        end, stdout, stderr = _stream(commands._sandbox._client, request, "exited", on_stdout, on_stderr, connection)
        return _command_result(end.get("verdict") or {}, stdout, stderr)

    def kill(self) -> None:
        """SIGKILL to its process group."""
        self._commands.kill(self.pid)

    def signal(self, signal: Any) -> None:
        """A signal by name ("TERM", "SIGINT") or number to its process group."""
        self._commands.signal(self.pid, signal)

    def send_stdin(self, data: str) -> None:
        self._commands.send_stdin(self.pid, data)

    def close_stdin(self) -> None:
        self._commands.close_stdin(self.pid)

    def __repr__(self) -> str:
        return f"CommandHandle(pid={self.pid}, tag={self.tag!r})"


class Commands:
    """`Sandbox.commands`: programs run in the session's jail."""

    def __init__(self, sandbox: "Sandbox"):
        self._sandbox = sandbox

    def run(
        self,
        cmd: Any,
        *,
        stdin: Optional[str] = None,
        timeout: Any = None,
        env: Any = None,
        cwd: Optional[str] = None,
        output_limit: Optional[str] = None,
        on_stdout: OutputCallback = None,
        on_stderr: OutputCallback = None,
        background: bool = False,
        tag: Optional[str] = None,
        user: Optional[str] = None,
    ) -> Any:
        """Runs `cmd`, an argv list or a shell command line (run with /bin/sh -c).
        `env` is a dict or a list of "K=V"; `timeout` a duration ("5s") or seconds.
        With `on_stdout`/`on_stderr` the output is streamed to them as it is produced.
        With `background=True` (and an optional `tag`) it returns a CommandHandle at
        once; the process lives until it ends, is killed, or the session ends.
        `user="root"` runs it as uid 0 inside the jail, without capabilities (a sandbox
        made with `root=True`)."""
        argv = ["/bin/sh", "-c", cmd] if isinstance(cmd, str) else [str(arg) for arg in cmd]
        request: Dict[str, Any] = {"type": "session_exec", "command": argv}
        if user is not None:
            request["user"] = user
        if stdin is not None:
            request["stdin"] = stdin
        _program_fields(request, env, cwd, timeout)
        if output_limit is not None:
            request["output_limit"] = output_limit
        if background:
            request["background"] = True
            if tag is not None:
                request["tag"] = tag
            reply = self._sandbox._request(request, "process")
            return CommandHandle(self, int(reply["pid"]), reply.get("tag"))
        if on_stdout is not None or on_stderr is not None:
            request = dict(request, stream=True, session=self._sandbox.session_id)
            end, stdout, stderr = _stream(self._sandbox._client, request, "exec", on_stdout, on_stderr)
            return _command_result(end.get("verdict") or {}, stdout, stderr)
        reply = self._sandbox._request(request, "exec")
        return _command_result(reply.get("verdict") or {}, reply.get("stdout", ""), reply.get("stderr", ""))

    def list(self) -> List[ProcessInfo]:
        """The session's processes: running ones, and the last ended background ones."""
        reply = self._sandbox._request({"type": "session_ps"}, "processes")
        return [ProcessInfo._of(process) for process in reply.get("processes", [])]

    def connect(self, pid: Optional[int] = None, *, tag: Optional[str] = None) -> CommandHandle:
        """Attaches to a process by pid or tag; `wait()` on the handle reads its output."""
        request: Dict[str, Any] = {"brig": PROTOCOL_VERSION, "type": "session_connect",
                                   "session": self._sandbox.session_id}
        if pid is not None:
            request["pid"] = pid
        if tag is not None:
            request["tag"] = tag
        connection, reply = _open_stream(self._sandbox, request, "process")
        return CommandHandle(self, int(reply["pid"]), reply.get("tag"), connection)

    def kill(self, pid: int) -> None:
        """SIGKILL to the process group of `pid`."""
        self._sandbox._request({"type": "session_kill", "pid": pid}, "signaled")

    def signal(self, pid: int, signal: Any) -> None:
        """A signal by name ("TERM", "SIGINT") or number to the process group of `pid`."""
        self._sandbox._request({"type": "session_signal", "pid": pid, "signal": signal}, "signaled")

    def send_stdin(self, pid: int, data: str) -> None:
        """Writes `data` to the stdin of `pid` (at most 1 MiB may wait unread)."""
        self._sandbox._request({"type": "session_stdin", "pid": pid, "data": data}, "stdin")

    def close_stdin(self, pid: int) -> None:
        self._sandbox._request({"type": "session_stdin", "pid": pid, "close": True}, "stdin")


def _frame_bytes(frame: Dict[str, Any]) -> bytes:
    """An `output` frame's bytes (`data` text, or `base64`)."""
    if "data" in frame:
        return frame["data"].encode("utf-8")
    return base64.b64decode(frame.get("base64", ""))


class PtyHandle:
    """A program on a terminal of the session's jail (`pty.create()`): `send_input()`
    (keys, bytes: b"\\x03" is Ctrl-C), `resize()`, `kill()`, `wait()` for its output
    (to `on_data` as bytes) and its result (`stdout`: the terminal's output as text)."""

    def __init__(self, pty: "Pty", pid: int, tag: Optional[str], connection: _socket.socket,
                 on_data: Optional[Callable[[bytes], Any]]):
        self._pty = pty
        self.pid = pid
        self.tag = tag
        self._connection: Optional[_socket.socket] = connection
        self._on_data = on_data

    def send_input(self, data: Any) -> None:
        """Writes `data` (bytes, or text as UTF-8) to the terminal, as typed."""
        self._pty.send_input(self.pid, data)

    def resize(self, size: Tuple[int, int]) -> None:
        """The terminal's new size, (cols, rows): the program gets SIGWINCH."""
        self._pty.resize(self.pid, size)

    def kill(self) -> None:
        """SIGKILL to its process group."""
        self._pty.kill(self.pid)

    def wait(self, on_data: Optional[Callable[[bytes], Any]] = None) -> CommandResult:
        """Reads the terminal's output until the program ends (to `on_data`, else the
        `on_data` given to `create()`); its result."""
        on_data = on_data or self._on_data
        connection, self._connection = self._connection, None
        if connection is None:
            connection = self._pty._sandbox._client._open(
                {"brig": PROTOCOL_VERSION, "type": "session_connect",
                 "session": self._pty._sandbox.session_id, "pid": self.pid}, [])
            _expect(_read_frame(connection), "process", "session_connect")
        output: List[bytes] = []
        with connection:
            while True:
                frame = _read_frame(connection)
                if frame.get("type") != "output":
                    end = _expect(frame, "exited", "session_connect")
                    break
                data = _frame_bytes(frame)
                output.append(data)
                if on_data is not None:
                    on_data(data)
        text = b"".join(output).decode("utf-8", errors="replace")
        return _command_result(end.get("verdict") or {}, text, "")

    def __repr__(self) -> str:
        return f"PtyHandle(pid={self.pid}, tag={self.tag!r})"


class Pty:
    """`Sandbox.pty`: programs on a terminal of the jail's own devpts."""

    def __init__(self, sandbox: "Sandbox"):
        self._sandbox = sandbox

    def create(self, size: Tuple[int, int] = (80, 24), on_data: Optional[Callable[[bytes], Any]] = None, *,
               cmd: Any = None, env: Any = None, cwd: Optional[str] = None, timeout: Any = None,
               tag: Optional[str] = None) -> PtyHandle:
        """Starts `cmd` (an argv list or a shell command line; by default the jail's
        shell, bash -i or sh -i) on a terminal of `size` (cols, rows); TERM is
        xterm-256color unless `env` sets it. It runs until it exits, is killed, or the
        session ends; `on_data` gets its output (bytes) during `wait()`."""
        cols, rows = size
        request: Dict[str, Any] = {"type": "session_exec", "pty": {"cols": int(cols), "rows": int(rows)}}
        if cmd is not None:
            request["command"] = ["/bin/sh", "-c", cmd] if isinstance(cmd, str) else [str(arg) for arg in cmd]
        _program_fields(request, env, cwd, timeout)
        if tag is not None:
            request["tag"] = tag
        reply = self._sandbox._request(request, "process")
        pid = int(reply["pid"])
        # Connected at once: output from its start on is this handle's (the backlog
        # keeps the latest MiB whoever connects).
        connection = self._sandbox._client._open(
            {"brig": PROTOCOL_VERSION, "type": "session_connect", "session": self._sandbox.session_id,
             "pid": pid}, [])
        try:
            _expect(_read_frame(connection), "process", "session_connect")
        except BaseException:
            connection.close()
            raise
        return PtyHandle(self, pid, reply.get("tag"), connection, on_data)

    def send_input(self, pid: int, data: Any) -> None:
        """Writes `data` (bytes, or text as UTF-8) to the terminal of `pid`."""
        raw = data.encode("utf-8") if isinstance(data, str) else bytes(data)
        self._sandbox._request({"type": "session_stdin", "pid": pid,
                                "base64": base64.b64encode(raw).decode("ascii")}, "stdin")

    def resize(self, pid: int, size: Tuple[int, int]) -> None:
        """The terminal of `pid` is now `size` (cols, rows)."""
        cols, rows = size
        self._sandbox._request({"type": "session_resize", "pid": pid, "cols": int(cols), "rows": int(rows)},
                               "resized")

    def kill(self, pid: int) -> None:
        """SIGKILL to the process group of `pid`."""
        self._sandbox._request({"type": "session_kill", "pid": pid}, "signaled")


def _secrets(secrets: Sequence[Dict[str, Any]]) -> List[Dict[str, Any]]:
    """`secrets` as the server takes them: `env` read here, into `value`."""
    wire = []
    for secret in secrets:
        secret = dict(secret)
        if "env" in secret:
            var = secret.pop("env")
            if var not in os.environ:
                raise BrigError(f"secrets: {var} is not set in this process's environment; export it first", "bad_input")
            secret["value"] = os.environ[var]
        wire.append(secret)
    return wire


class Sandbox:
    """A session on `brig serve`: a jail whose interpreters keep their globals and whose
    workspace (/home/sandbox) keeps its files until `close()`, `idle_timeout` or
    `session_timeout`.

        with Sandbox(options={"memory": "512M"}) as sb:
            sb.run_code("x = 41")
            print(sb.run_code("x + 1").result)        # 42

    `options` are `brig run`'s by their YAML names, checked against the server's policy.
    `secrets` are keys the sandbox may use without seeing them: each a dict
    `{"name": "API_KEY", "value": "sk-..." or "env": "VAR", "hosts": ["api.example.com"]}`
    (`env` is read here, in this process); inside, `$API_KEY` holds a placeholder that
    brig replaces with the value in HTTPS requests to those hosts only (the session's
    `allow_net` must allow them).
    Durations are strings ("1h", "10m") or seconds; `workspace_size` is a size ("256M").
    `root=True` maps uid 0 into the jail too, for `commands.run(..., user="root")`: root
    inside, without capabilities (a root server with per-jail host uids only).
    The socket defaults to `$BRIG_SERVER`, else /run/brig/brig.sock. Failures of the
    server (an unknown or closed session, a refused option or path) raise BrigError.
    """

    def __init__(
        self,
        socket: Optional[str] = None,
        options: Optional[Dict[str, Any]] = None,
        session_timeout: Any = None,
        idle_timeout: Any = None,
        workspace_size: Optional[str] = None,
        *,
        metadata: Optional[Dict[str, str]] = None,
        timeout: Optional[float] = None,
        secrets: Optional[Sequence[Dict[str, Any]]] = None,
        root: bool = False,
        _session: Optional[str] = None,
    ):
        self._client = Client(socket, timeout) if socket else Client(timeout=timeout)
        self.files = Files(self)
        self.commands = Commands(self)
        self.pty = Pty(self)
        self._closed = False
        self.workspace = "/home/sandbox"
        if _session is not None:
            self.session_id = _session
            return
        request: Dict[str, Any] = {"type": "session_create", "options": dict(options or {})}
        for key, value in (("session_timeout", _duration(session_timeout)),
                           ("idle_timeout", _duration(idle_timeout)),
                           ("workspace_size", workspace_size),
                           ("metadata", dict(metadata) if metadata else None),
                           ("secrets", _secrets(secrets) if secrets else None),
                           ("root", True if root else None)):
            if value is not None:
                request[key] = value
        reply = _request(self._client, request, "session")
        self.session_id: str = reply["session"]
        self.workspace = reply.get("workspace", self.workspace)

    @classmethod
    def create(cls, **kwargs: Any) -> "Sandbox":
        """`Sandbox(**kwargs)`."""
        return cls(**kwargs)

    @classmethod
    def connect(cls, session_id: str, socket: Optional[str] = None, *, timeout: Optional[float] = None) -> "Sandbox":
        """Attaches to an existing session (this uid's), say from another process."""
        return cls(socket, timeout=timeout, _session=session_id)

    @property
    def socket(self) -> str:
        return self._client.socket

    def run_code(self, code: str, language: Optional[str] = None, timeout: Any = None,
                 output_limit: Optional[str] = None, context: Any = None, *,
                 on_stdout: OutputCallback = None, on_stderr: OutputCallback = None) -> Execution:
        """Runs a cell in `context` (a CodeContext or its id), or in the default context of
        `language` (python, node or bash; python when neither is given). With
        `on_stdout`/`on_stderr` its output is streamed to them as it is produced."""
        request: Dict[str, Any] = {"type": "session_exec", "code": code}
        if context is not None:
            request["context"] = context.id if isinstance(context, CodeContext) else str(context)
        if language is not None or context is None:
            request["language"] = language or "python"
        if timeout is not None:
            request["time_limit"] = _duration(timeout)
        if output_limit is not None:
            request["output_limit"] = output_limit
        if on_stdout is not None or on_stderr is not None:
            request = dict(request, stream=True, session=self.session_id)
            reply, stdout, stderr = _stream(self._client, request, "exec", on_stdout, on_stderr)
            reply = dict(reply, stdout=stdout, stderr=stderr)
        else:
            reply = self._request(request, "exec")
        error = reply.get("error")
        return Execution(
            stdout=reply.get("stdout", ""),
            stderr=reply.get("stderr", ""),
            result=reply.get("result"),
            error=ExecutionError(error.get("type", ""), error.get("message", ""), error.get("traceback", ""))
            if error else None,
            verdict=reply.get("verdict") or {},
            state_lost=bool(reply.get("state_lost", False)),
            state_lost_reason=reply.get("state_lost_reason"),
            results=[RichResult.from_bundle(bundle) for bundle in reply.get("results") or []],
            context=reply.get("context"),
        )

    def set_network(self, allow_net: Sequence[str] = (),
                    add_host: Optional[Sequence[str]] = None,
                    deny_net: Sequence[str] = ()) -> int:
        """Replaces the session's `allow-net` and `deny-net` rules, and its `add-host` pins
        when `add_host` is given (otherwise they stay: the server's and the session's own);
        a session created with `--net filtered` only; an empty list lets nothing out, a
        `deny_net` list lets out all it does not name (an `allow_net` rule wins over it).
        New connections are judged by them at once; open ones they refuse are cut. How
        many were cut."""
        request: Dict[str, Any] = {"type": "session_network", "allow_net": list(allow_net)}
        if deny_net:
            request["deny_net"] = list(deny_net)
        if add_host is not None:
            request["add_host"] = list(add_host)
        reply = self._request(request, "network")
        return int(reply.get("cut", 0))

    def dial(self, port: int) -> _socket.socket:
        """A TCP connection to `port` of the sandbox's own loopback: a server a program of
        the session runs there (on 0.0.0.0, 127.0.0.1 or ::), reached with no network rule
        (`session_dial`: the jail's init connects inside the jail and the socket comes back
        with the reply). A blocking socket, yours to close; nothing listening there raises
        BrigError ("connection refused")."""
        request = {"type": "session_dial", "session": self.session_id, "port": port,
                   "brig": PROTOCOL_VERSION}
        with self._client._open(request, []) as connection:
            data, fds, _, _ = _socket.recv_fds(connection, 1 << 16, 1)
            try:
                if len(data) < 4:
                    data += _read_exactly(connection, 4 - len(data))
                (length,) = struct.unpack(">I", data[:4])
                if length > MAX_REPLY:
                    raise BrigError(f"brig serve sent a frame of {length} bytes")
                body = data[4:] + _read_exactly(connection, max(0, 4 + length - len(data)))
                _expect(json.loads(body[:length]), "dialed", "session_dial")
                if len(fds) != 1:
                    raise BrigError(f"brig serve answered session_dial with {len(fds)} descriptors, not one")
            except BaseException:
                for fd in fds:
                    os.close(fd)
                raise
        dialed = _socket.socket(fileno=fds[0])
        dialed.setblocking(True)
        return dialed

    def set_timeout(self, timeout: Any) -> None:
        """Sets the session's end to now + `timeout` (seconds, or a string such as "10m"),
        at most the server's --session-timeout."""
        self._request({"type": "session_set_timeout", "timeout": _duration(timeout)}, "timeout")

    def pause(self) -> bool:
        """Pauses the session: every process of its jail frozen where it is (the cgroup
        freezer), its timeout and idle timer stopped, until `resume()`. True if it was
        paused already. Refused (BrigError) where the jail has no cgroup with a freezer."""
        return self._request({"type": "session_pause"}, "paused")["already"]

    def resume(self) -> Dict[str, Any]:
        """Resumes a paused session where it was: the `resumed` reply (`already`: it was
        not paused; `paused_ms`; `ends_at_ms`, its end moved by the pause)."""
        return self._request({"type": "session_resume"}, "resumed")

    def stats(self) -> Dict[str, Any]:
        """The session's resource use now: `cpus`, `cpu_usec`, `cpu_percent` (since the
        previous call), `memory_bytes`, `memory_limit`, `workspace_used`,
        `workspace_size`, `state` (running or paused)."""
        return self._request({"type": "session_stats"}, "stats")

    def create_code_context(self, language: str = "python", cwd: Optional[str] = None) -> CodeContext:
        """A new interpreter of `language` (python, node or bash) in this session, with state
        of its own, started in `cwd` (a path in the jail) or the session's directory. A
        session has at most 16."""
        request: Dict[str, Any] = {"type": "session_context", "action": "create", "language": language}
        if cwd is not None:
            request["cwd"] = cwd
        return CodeContext.from_reply(self._request(request, "context")["context"])

    def list_code_contexts(self) -> List[CodeContext]:
        """The contexts created, and the default contexts whose interpreter runs."""
        reply = self._request({"type": "session_context", "action": "list"}, "contexts")
        return [CodeContext.from_reply(context) for context in reply.get("contexts", [])]

    def restart_code_context(self, context: Any) -> None:
        """A fresh interpreter for `context` (a CodeContext or its id): its state is lost."""
        context_id = context.id if isinstance(context, CodeContext) else str(context)
        self._request({"type": "session_context", "action": "restart", "context": context_id}, "context")

    def remove_code_context(self, context: Any) -> None:
        """Ends `context`'s interpreter and forgets the context."""
        context_id = context.id if isinstance(context, CodeContext) else str(context)
        self._request({"type": "session_context", "action": "remove", "context": context_id}, "context_removed")

    def close(self) -> None:
        """Destroys the session: its processes and its workspace. A second call does nothing."""
        if not self._closed:
            self._request({"type": "session_close"}, "closed")
            self._closed = True

    def _request(self, request: Dict[str, Any], expected: str) -> Dict[str, Any]:
        return _request(self._client, dict(request, session=self.session_id), expected)

    def __enter__(self) -> "Sandbox":
        return self

    def __exit__(self, kind: Any, value: Any, traceback: Any) -> None:
        try:
            self.close()
        except BrigError:
            if kind is None:
                raise  # otherwise the exception on its way out says more

    def __repr__(self) -> str:
        return f"Sandbox(session_id={self.session_id!r}, socket={self.socket!r})"


def list_sessions(socket: Optional[str] = None, metadata: Optional[Dict[str, str]] = None) -> List[Dict[str, Any]]:
    """This uid's sessions (all of them for root), those whose metadata hold every pair of
    `metadata`: session, uid, metadata, state (idle, busy), created_at_ms, ends_at_ms,
    idle_deadline_ms, limits, age_ms, idle_ms, requests."""
    client = Client(socket) if socket else Client()
    request = {"type": "session_list", "metadata": dict(metadata or {})}
    return list(_request(client, request, "sessions").get("sessions", []))
