"""A client for `brig serve`: each run gets a fresh jail from the server's warm pool.

The protocol (version 1): frames of a 4-byte big-endian length and one JSON object, over
a unix stream socket; the program's standard streams travel as SCM_RIGHTS descriptors
with the request, or are captured by the server and returned in its reply.
"""

import json
import os
import socket as _socket
import struct
import sys
from dataclasses import dataclass, field
from typing import Any, Dict, IO, List, Optional, Sequence

__all__ = ["BrigError", "Result", "Client", "run", "status", "PROTOCOL_VERSION"]

PROTOCOL_VERSION = 1
DEFAULT_SOCKET = "/run/brig/brig.sock"
MAX_FRAME = 1 << 20


class BrigError(Exception):
    """The server refused or could not run the request (brig's exit status 125)."""

    def __init__(self, message: str, kind: str = "setup_failed", exit_code: int = 125):
        super().__init__(message)
        self.message = message
        self.kind = kind
        self.exit_code = exit_code


@dataclass
class Result:
    """One run: brig's exit status for it, the verdict (schema brig-verdict/1), and in
    capture mode what the program wrote."""

    exit_code: int
    verdict: Dict[str, Any]
    stdout: Optional[str] = None
    stderr: Optional[str] = None
    config_digest: Optional[str] = None

    @property
    def status(self) -> str:
        return self.verdict.get("status", "")

    @property
    def ok(self) -> bool:
        return self.status == "ok"


@dataclass
class Client:
    socket: str = field(default_factory=lambda: os.environ.get("BRIG_SERVER", DEFAULT_SOCKET))
    timeout: Optional[float] = None

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

    def _exchange(self, request: Dict[str, Any], fds: List[int]) -> Dict[str, Any]:
        body = json.dumps(request).encode()
        frame = struct.pack(">I", len(body)) + body
        with _socket.socket(_socket.AF_UNIX, _socket.SOCK_STREAM) as connection:
            connection.settimeout(self.timeout)
            try:
                connection.connect(self.socket)
            except OSError as error:
                raise BrigError(f"--server {self.socket}: cannot connect: {error}; is `brig serve` running?") from error
            try:
                if fds:
                    sent = _socket.send_fds(connection, [frame], fds)
                    connection.sendall(frame[sent:])
                else:
                    connection.sendall(frame)
            except OSError:
                pass  # a refusing server answers and closes; its answer explains
            return _read_frame(connection)


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
    if length > MAX_FRAME:
        raise BrigError(f"brig serve sent a frame of {length} bytes")
    return json.loads(_read_exactly(connection, length))


def run(argv: Sequence[str], *, socket: Optional[str] = None, **kwargs: Any) -> Result:
    """`Client(socket).run(argv, ...)`."""
    return (Client(socket) if socket else Client()).run(argv, **kwargs)


def status(socket: Optional[str] = None) -> Dict[str, Any]:
    return (Client(socket) if socket else Client()).status()
