"use strict";
// A client for `brig serve` (protocol version 1): frames of a 4-byte big-endian length and
// one JSON object over a unix stream socket. Runs use "capture" mode, since Node cannot
// pass descriptors: the reply carries the program's stdout and stderr. A `Sandbox` is a
// session (docs/protocol.md): a jail that keeps its interpreter's state and its
// files between requests, one request per connection.

const net = require("net");

const PROTOCOL_VERSION = 1;
const DEFAULT_SOCKET = "/run/brig/brig.sock";
const MAX_FRAME = 1 << 20;
// A reply may be larger than a request: captured output is up to 8 MiB (stdout and stderr
// together), and JSON escapes it. The bound only guards against a peer that is not brig.
const MAX_REPLY = 64 << 20;

class BrigError extends Error {
  constructor(message, kind = "setup_failed", exitCode = 125) {
    super(message);
    this.name = "BrigError";
    this.kind = kind;
    this.exitCode = exitCode;
  }

  // The server refused for now (full, draining): nothing ran, the same request may be
  // answered if sent again later.
  get retryable() {
    return this.kind === "busy";
  }
}

function exchange(socketPath, request, timeoutMs) {
  return new Promise((resolve, reject) => {
    const connection = net.createConnection(socketPath);
    let done = false;
    const finish = (error, value) => {
      if (done) return;
      done = true;
      connection.destroy();
      error ? reject(error) : resolve(value);
    };
    if (timeoutMs) {
      connection.setTimeout(timeoutMs, () => finish(new BrigError(`brig serve did not answer in ${timeoutMs} ms`)));
    }
    connection.on("connect", () => {
      const body = Buffer.from(JSON.stringify(request));
      const header = Buffer.alloc(4);
      header.writeUInt32BE(body.length);
      connection.write(Buffer.concat([header, body]));
    });
    const chunks = [];
    let received = 0;
    let length = -1;
    connection.on("data", (chunk) => {
      chunks.push(chunk);
      received += chunk.length;
      if (length < 0) {
        if (received < 4) return;
        length = Buffer.concat(chunks).readUInt32BE(0);
        if (length > MAX_REPLY) return finish(new BrigError(`brig serve sent a frame of ${length} bytes`));
      }
      if (received < 4 + length) return;
      const buffer = Buffer.concat(chunks, received);
      try {
        finish(null, JSON.parse(buffer.subarray(4, 4 + length).toString("utf8")));
      } catch (error) {
        finish(new BrigError(`brig serve sent something that is not JSON: ${error.message}`));
      }
    });
    connection.on("error", (error) =>
      finish(new BrigError(`--server ${socketPath}: cannot connect: ${error.message}; is \`brig serve\` running?`)));
    connection.on("end", () => finish(new BrigError("brig serve closed the connection before answering")));
  });
}

/**
 * Sends `request` and reads frames: each `output` frame goes to `onFrame`; resolves to
 * the first frame of another type (with the open connection when `keep` is set, for a
 * connect's frames after its first). A frame longer than MAX_REPLY rejects.
 */
function stream(socketPath, request, onFrame, { keep = false } = {}) {
  return new Promise((resolve, reject) => {
    const connection = net.createConnection(socketPath);
    let done = false;
    // With `keep`, frames read after the first are kept for whoever takes the connection.
    const early = [];
    const finish = (error, value) => {
      if (done) return;
      done = true;
      if (!keep || error) connection.destroy();
      error ? reject(error) : resolve(keep ? { frame: value, connection, reader, early } : value);
    };
    const reader = frameReader((frame) => {
      if (done) {
        if (keep) early.push(frame);
        return;
      }
      if (frame.type === "output") onFrame(frame);
      else finish(null, frame);
    }, (error) => finish(error));
    connection.on("connect", () => {
      const body = Buffer.from(JSON.stringify(request));
      const header = Buffer.alloc(4);
      header.writeUInt32BE(body.length);
      connection.write(Buffer.concat([header, body]));
    });
    connection.on("data", (chunk) => reader.push(chunk));
    connection.on("error", (error) =>
      finish(new BrigError(`--server ${socketPath}: cannot connect: ${error.message}; is \`brig serve\` running?`)));
    connection.on("end", () => finish(new BrigError("brig serve closed the connection before answering")));
  });
}

/** Splits a byte stream into frames: `onFrame(object)` for each, `onError` once. */
function frameReader(onFrame, onError) {
  let buffered = Buffer.alloc(0);
  const reader = {
    onFrame,
    push(chunk) {
      buffered = Buffer.concat([buffered, chunk]);
      while (buffered.length >= 4) {
        const length = buffered.readUInt32BE(0);
        if (length > MAX_REPLY) return onError(new BrigError(`brig serve sent a frame of ${length} bytes`));
        if (buffered.length < 4 + length) return;
        let frame;
        try {
          frame = JSON.parse(buffered.subarray(4, 4 + length).toString("utf8"));
        } catch (error) {
          return onError(new BrigError(`brig serve sent something that is not JSON: ${error.message}`));
        }
        buffered = buffered.subarray(4 + length);
        reader.onFrame(frame);
      }
    },
  };
  return reader;
}

/** An `output` frame's text: `data`, or bytes that are not UTF-8 (`base64`) decoded with replacement characters. */
function chunkText(frame) {
  return frame.data !== undefined ? frame.data : Buffer.from(frame.base64 || "", "base64").toString("utf8");
}

/** Collects output frames, and hands them to `onStdout`/`onStderr`. */
function collector(onStdout, onStderr) {
  const text = { stdout: [], stderr: [] };
  return {
    text,
    onFrame(frame) {
      const chunk = chunkText(frame);
      (text[frame.stream] || text.stdout).push(chunk);
      const callback = frame.stream === "stderr" ? onStderr : onStdout;
      if (callback) callback(chunk);
    },
  };
}

function socketOf(options) {
  return (options && options.socket) || process.env.BRIG_SERVER || DEFAULT_SOCKET;
}

/** Runs `argv` in a fresh jail; resolves to {exitCode, status, verdict, stdout, stderr}. */
async function run(argv, { socket, options = {}, stdin, timeoutMs } = {}) {
  const request = {
    brig: PROTOCOL_VERSION,
    type: "run",
    options: { ...options, command: [...argv] },
    stdio: "capture",
  };
  if (stdin !== undefined) request.stdin = stdin;
  const reply = await exchange(socketOf({ socket }), request, timeoutMs);
  if (reply.type === "done") {
    return {
      exitCode: reply.verdict.brig_exit_code,
      status: reply.verdict.status,
      verdict: reply.verdict,
      stdout: reply.stdout,
      stderr: reply.stderr,
      configDigest: reply.config_digest,
    };
  }
  if (reply.type === "error") throw new BrigError(reply.message, reply.kind, reply.exit_code);
  throw new BrigError(`brig serve answered a run with ${JSON.stringify(reply.type)}`);
}

/** The server's pool, runs and failures. */
async function status({ socket, timeoutMs } = {}) {
  const reply = await exchange(socketOf({ socket }), { brig: PROTOCOL_VERSION, type: "status" }, timeoutMs);
  if (reply.type !== "status") throw new BrigError(reply.message || `brig serve answered status with ${reply.type}`);
  const { type, ...rest } = reply;
  return rest;
}

// Sessions (docs/protocol.md): a jail that lives between requests.

/** A duration for the server: strings as given ("5s", "10m"), numbers as seconds. */
function duration(value) {
  if (value === undefined || value === null || typeof value === "string") return value ?? undefined;
  if (typeof value !== "number" || !Number.isFinite(value) || value < 0) {
    throw new TypeError(`a duration is a string such as '5s' or a number of seconds, not ${value}`);
  }
  const millis = Math.round(value * 1000);
  return millis % 1000 === 0 ? `${millis / 1000}s` : `${millis}ms`;
}

/** One session request on its own connection; the reply, or a BrigError. */
async function request(socketPath, body, expected, timeoutMs) {
  const fields = Object.fromEntries(Object.entries(body).filter(([, value]) => value !== undefined));
  const reply = await exchange(socketPath, { brig: PROTOCOL_VERSION, ...fields }, timeoutMs);
  return expect(reply, expected, body.type);
}

/** A request's own connection, read as frames and as raw bytes (a streamed file). */
class Connection {
  static open(socketPath, timeoutMs) {
    return new Promise((resolve, reject) => {
      const socket = net.createConnection(socketPath);
      socket.once("connect", () => resolve(new Connection(socket, timeoutMs)));
      socket.once("error", (error) =>
        reject(new BrigError(`--server ${socketPath}: cannot connect: ${error.message}; is \`brig serve\` running?`)));
    });
  }

  constructor(socket, timeoutMs) {
    this.socket = socket;
    this.chunks = [];
    this.size = 0;
    this.ended = false;
    this.error = null;
    this.waiter = null;
    const wake = () => {
      const waiter = this.waiter;
      this.waiter = null;
      if (waiter) waiter();
    };
    socket.removeAllListeners("error");
    socket.on("data", (chunk) => {
      this.chunks.push(chunk);
      this.size += chunk.length;
      wake();
    });
    socket.on("end", () => {
      this.ended = true;
      wake();
    });
    // A write the runner stopped reading (EPIPE): its answer may still be here.
    socket.on("error", (error) => {
      this.error = error;
      wake();
    });
    if (timeoutMs) {
      socket.setTimeout(timeoutMs, () => {
        this.error = new BrigError(`brig serve did not answer in ${timeoutMs} ms`);
        socket.destroy();
        wake();
      });
    }
  }

  async wait() {
    if (this.ended) throw new BrigError("brig serve closed the connection before answering");
    if (this.error) throw this.error instanceof BrigError ? this.error : new BrigError(`brig serve: ${this.error.message}`);
    await new Promise((resolve) => { this.waiter = resolve; });
  }

  /** Up to `most` bytes (at least one) of what came, without copying whole chunks. */
  async take(most) {
    while (this.size === 0) await this.wait();
    let chunk = this.chunks.shift();
    if (chunk.length > most) {
      this.chunks.unshift(chunk.subarray(most));
      chunk = chunk.subarray(0, most);
    }
    this.size -= chunk.length;
    return chunk;
  }

  async exactly(count) {
    const parts = [];
    for (let left = count; left > 0;) {
      const part = await this.take(left);
      parts.push(part);
      left -= part.length;
    }
    return Buffer.concat(parts, count);
  }

  async frame() {
    const length = (await this.exactly(4)).readUInt32BE(0);
    if (length > MAX_REPLY) throw new BrigError(`brig serve sent a frame of ${length} bytes`);
    return JSON.parse((await this.exactly(length)).toString("utf8"));
  }

  send(body) {
    const bytes = Buffer.from(JSON.stringify({ brig: PROTOCOL_VERSION, ...body }));
    const header = Buffer.alloc(4);
    header.writeUInt32BE(bytes.length);
    return this.write(Buffer.concat([header, bytes]));
  }

  /** Writes with the socket's backpressure. */
  async write(bytes) {
    if (!this.socket.write(bytes)) {
      await new Promise((resolve) => {
        const done = () => {
          this.socket.off("drain", done);
          this.socket.off("close", done);
          resolve();
        };
        this.socket.on("drain", done);
        this.socket.on("close", done);
      });
    }
  }

  close() {
    this.socket.destroy();
  }
}

function expect(reply, expected, what) {
  if (reply.type === "error") throw new BrigError(reply.message, reply.kind, reply.exit_code);
  if (reply.type !== expected) throw new BrigError(`brig serve answered ${what} with ${JSON.stringify(reply.type)}`);
  return reply;
}

/**
 * A directory watcher (`files.watchDir`). Made with `onEvent` it streams: each change is
 * passed to `onEvent({name, type})` as the server sends it; after `stop()`, `dropped`
 * counts the events the server dropped because they were not read fast enough and
 * `overflowed` says whether the kernel lost some.
 */
class WatchHandle {
  constructor(sandbox, watcher, attached, onEvent) {
    this._sandbox = sandbox;
    this.watcher = watcher;
    this.overflowed = false;
    this.dropped = 0;
    this._ended = null;
    if (attached) {
      const { connection, reader, early } = attached;
      this._ended = new Promise((resolve) => {
        reader.onFrame = (frame) => {
          if (frame.type === "watch_event") return onEvent({ name: frame.path, type: frame.kind });
          this.dropped = frame.dropped ?? 0;
          this.overflowed = Boolean(frame.overflow);
        };
        connection.removeAllListeners("end");
        connection.removeAllListeners("error");
        // The stream's end: unwatched, the session ended, or the server went away.
        connection.on("close", resolve);
        connection.on("end", () => connection.destroy());
        connection.on("error", () => connection.destroy());
        for (const frame of early.splice(0)) reader.onFrame(frame);
        connection.resume();
      });
    }
  }

  /**
   * What changed since the last call: [{name, type}], `type` create, write, remove, rename
   * (the old name) or chmod, `name` relative to the workspace. `overflowed` says whether
   * this call lost events.
   */
  async getNewEvents() {
    if (this._ended) {
      throw new BrigError(`watcher ${this.watcher} streams its events to onEvent; poll a watcher made without it`, "bad_input", 125);
    }
    const reply = await this._sandbox._request({ type: "session_watch_events", watcher: this.watcher }, "events");
    this.overflowed = Boolean(reply.overflow);
    return (reply.events || []).map(({ type, path }) => ({ name: path, type }));
  }

  async stop() {
    await this._sandbox._request({ type: "session_unwatch", watcher: this.watcher }, "unwatched");
    if (this._ended) await this._ended; // the server sends the stream's last frame and closes it
  }
}

function entryOf({ name, path, type, size, mode, uid, gid, mtime, symlink_target }) {
  const entry = { name, path: path ?? name, type, size, mode, uid, gid, modifiedTime: mtime };
  if (symlink_target !== undefined) entry.symlinkTarget = symlink_target;
  return entry;
}

/** `sandbox.files`: the session's workspace; paths are relative to it. */
class Files {
  constructor(sandbox) {
    this._sandbox = sandbox;
  }

  /**
   * Writes `data` to `path` (replacing it, creating parent directories): a string (UTF-8),
   * a Buffer or Uint8Array, or an async iterable of chunks (a Readable) with `{size}`
   * given. Any size up to the workspace, streamed on one connection (`session_write`);
   * resolves to the file's size.
   */
  async write(path, data, { size } = {}) {
    let chunks;
    if (typeof data === "string" || data instanceof Uint8Array || data instanceof ArrayBuffer) {
      const bytes = typeof data === "string" ? Buffer.from(data, "utf8") : Buffer.from(data);
      chunks = [bytes];
      size = bytes.length;
    } else if (size === undefined) {
      const parts = [];
      for await (const chunk of data) parts.push(Buffer.from(chunk));
      chunks = [Buffer.concat(parts)];
      size = chunks[0].length;
    } else {
      chunks = data;
    }
    const connection = await Connection.open(this._sandbox.socket, this._sandbox._timeoutMs);
    try {
      await connection.send({ type: "session_write", session: this._sandbox.sessionId, path, size });
      expect(await connection.frame(), "ready", "session_write");
      for await (const chunk of chunks) {
        if (connection.error) break; // the runner stopped reading: its answer says why
        // Nothing to send: an empty write to a runner that has answered already (an empty
        // file's "written") fails with EPIPE and would hide its answer.
        if (chunk.length === 0) continue;
        await connection.write(chunk);
      }
      return expect(await connection.frame(), "written", "session_write").size;
    } finally {
      connection.close();
    }
  }

  /**
   * The file at `path`, streamed (`session_read`, any size): a string (UTF-8), a Buffer
   * with `{format: "bytes"}`, or with `{format: "stream"}` an async iterable of Buffers
   * (the whole file never held).
   */
  async read(path, { format = "text" } = {}) {
    if (!["text", "bytes", "stream"].includes(format)) throw new TypeError("format is 'text', 'bytes' or 'stream'");
    const connection = await Connection.open(this._sandbox.socket, this._sandbox._timeoutMs);
    let header;
    try {
      await connection.send({ type: "session_read", session: this._sandbox.sessionId, path });
      header = expect(await connection.frame(), "reading", "session_read");
    } catch (error) {
      connection.close();
      throw error;
    }
    const chunks = (async function* () {
      try {
        for (let left = header.length; left > 0;) {
          let chunk;
          try {
            chunk = await connection.take(left);
          } catch {
            throw new BrigError(`session_read ${JSON.stringify(path)}: the connection ended ${left} bytes short (the file shrank while it was read, or the session ended)`);
          }
          left -= chunk.length;
          yield chunk;
        }
      } finally {
        connection.close();
      }
    })();
    if (format === "stream") return chunks;
    const parts = [];
    for await (const chunk of chunks) parts.push(chunk);
    const content = Buffer.concat(parts, header.length);
    return format === "bytes" ? content : content.toString("utf8");
  }

  /**
   * The entries beneath the directory `path`, `depth` levels deep (1: its own), sorted by
   * path: [{name, path, type, size, mode, uid, gid, modifiedTime, symlinkTarget?}].
   */
  async list(path = ".", { depth = 1 } = {}) {
    const reply = await this._sandbox._request({ type: "session_ls", path, depth }, "ls");
    return (reply.entries || []).map(entryOf);
  }

  /** What `path` is (a symlink as itself, with its target). */
  async getInfo(path) {
    return entryOf((await this._sandbox._request({ type: "session_stat", path }, "stat")).entry);
  }

  async stat(path) {
    return this.getInfo(path);
  }

  async exists(path) {
    return (await this._sandbox._request({ type: "session_exists", path }, "exists")).exists;
  }

  /** Makes the directory `path` (and its parents); false if it was there. */
  async makeDir(path, { parents = true } = {}) {
    return (await this._sandbox._request({ type: "session_mkdir", path, parents }, "mkdir")).created;
  }

  /** Moves `oldPath` to `newPath` (replacing a file there); resolves to what is there now. */
  async rename(oldPath, newPath) {
    await this._sandbox._request({ type: "session_rename", source: oldPath, destination: newPath }, "renamed");
    return this.getInfo(newPath);
  }

  /** Removes a file, a symlink (not its target) or a directory with all it holds. */
  async remove(path) {
    await this._sandbox._request({ type: "session_remove", path }, "removed");
  }

  /**
   * Watches the directory `path` (and with `{recursive: true}` every one beneath it). With
   * `{onEvent}` each change is sent as it happens and passed to `onEvent({name, type})`;
   * otherwise poll with `getNewEvents()`.
   */
  async watchDir(path, { recursive = false, onEvent } = {}) {
    if (onEvent) {
      const sandbox = this._sandbox;
      const attached = await openStream(sandbox, { type: "session_watch", path, recursive, stream: true }, "watcher");
      return new WatchHandle(sandbox, attached.frame.watcher, attached, onEvent);
    }
    const reply = await this._sandbox._request({ type: "session_watch", path, recursive }, "watcher");
    return new WatchHandle(this._sandbox, reply.watcher);
  }
}

/**
 * A `session_connect` to the process `which` names ({pid} or {tag}), its `process` frame
 * read: {frame, connection, reader, early} (frames read after it wait in `early`).
 */
function attach(sandbox, which) {
  return openStream(sandbox, { type: "session_connect", ...which }, "process");
}

/** A session request whose connection stays open, its first frame (`expected`) read. */
async function openStream(sandbox, request, expected) {
  const attached = await stream(sandbox.socket, {
    brig: PROTOCOL_VERSION, session: sandbox.sessionId, ...request,
  }, () => {}, { keep: true });
  try {
    expect(attached.frame, expected, request.type);
  } catch (error) {
    attached.connection.destroy();
    throw error;
  }
  return attached;
}

function commandResult(verdict, stdout, stderr) {
  verdict = verdict || {};
  return { exitCode: verdict.brig_exit_code ?? verdict.exit_code ?? 125, stdout, stderr, verdict };
}

/**
 * A background process (`commands.run(..., {background: true})`, `commands.connect()`):
 * `wait()` for its output and result, `kill()`, `signal()`, `sendStdin()`, `closeStdin()`.
 */
class CommandHandle {
  constructor(commands, pid, tag, attached) {
    this._commands = commands;
    this.pid = pid;
    this.tag = tag ?? null;
    this._attached = attached || null;
  }

  /**
   * Reads until the process ends: what it wrote (the latest MiB of what came before,
   * then live) to the callbacks and in the result, {exitCode, stdout, stderr, verdict}.
   */
  async wait({ onStdout, onStderr } = {}) {
    const sandbox = this._commands._sandbox;
    let attached = this._attached;
    this._attached = null;
    if (!attached) {
      attached = await stream(sandbox.socket, {
        brig: PROTOCOL_VERSION, type: "session_connect", session: sandbox.sessionId, pid: this.pid,
      }, () => {}, { keep: true });
      expect(attached.frame, "process", "session_connect");
    }
    const output = collector(onStdout, onStderr);
    const end = await new Promise((resolve, reject) => {
      const { connection, reader } = attached;
      reader.onFrame = (frame) => (frame.type === "output" ? output.onFrame(frame) : resolve(frame));
      connection.removeAllListeners("end");
      connection.removeAllListeners("error");
      connection.on("end", () => reject(new BrigError("brig serve closed the connection before the process ended")));
      connection.on("error", (error) => reject(new BrigError(error.message)));
      for (const frame of attached.early.splice(0)) reader.onFrame(frame);
      connection.resume();
    }).finally(() => attached.connection.destroy());
    expect(end, "exited", "session_connect");
    return commandResult(end.verdict, output.text.stdout.join(""), output.text.stderr.join(""));
  }

  /** SIGKILL to its process group. */
  kill() { return this._commands.kill(this.pid); }

  /** A signal by name ("TERM", "SIGINT") or number to its process group. */
  signal(signal) { return this._commands.signal(this.pid, signal); }

  sendStdin(data) { return this._commands.sendStdin(this.pid, data); }

  closeStdin() { return this._commands.closeStdin(this.pid); }
}

/** `sandbox.commands`: programs run in the session's jail. */
class Commands {
  constructor(sandbox) {
    this._sandbox = sandbox;
  }

  /**
   * Runs `cmd`, an argv array or a shell command line (run with /bin/sh -c); resolves to
   * {exitCode, stdout, stderr, verdict}, `exitCode` as `brig run` would exit. With
   * `onStdout`/`onStderr` the output is streamed to them as it is produced. With
   * `background: true` (and an optional `tag`) it resolves at once to a CommandHandle.
   * `user: "root"` runs it as uid 0 inside the jail, without capabilities (a sandbox
   * created with `root: true`).
   */
  async run(cmd, { stdin, timeout, env, cwd, outputLimit, onStdout, onStderr, background, tag, user } = {}) {
    const command = typeof cmd === "string" ? ["/bin/sh", "-c", cmd] : cmd.map(String);
    const body = {
      type: "session_exec",
      command,
      stdin,
      env: env && !Array.isArray(env) ? Object.entries(env).map(([k, v]) => `${k}=${v}`) : env,
      chdir: cwd,
      time_limit: duration(timeout),
      output_limit: outputLimit,
      user,
    };
    if (background) {
      const reply = await this._sandbox._request({ ...body, background: true, tag }, "process");
      return new CommandHandle(this, reply.pid, reply.tag);
    }
    if (onStdout || onStderr) {
      const output = collector(onStdout, onStderr);
      const end = await this._sandbox._stream({ ...body, stream: true }, output.onFrame);
      expect(end, "exec", "session_exec");
      return commandResult(end.verdict, output.text.stdout.join(""), output.text.stderr.join(""));
    }
    const reply = await this._sandbox._request(body, "exec");
    return commandResult(reply.verdict, reply.stdout ?? "", reply.stderr ?? "");
  }

  /** The session's processes: [{pid, tag, command, running, status, started_unix_ms, backlog_dropped, env, cwd}]. */
  async list() {
    const reply = await this._sandbox._request({ type: "session_ps" }, "processes");
    return reply.processes || [];
  }

  /** Attaches to a process by pid (or `{tag}`); `wait()` on the handle reads its output. */
  async connect(pid, { tag } = {}) {
    const attached = await attach(this._sandbox, {
      ...(pid !== undefined && pid !== null ? { pid } : {}), ...(tag !== undefined ? { tag } : {}),
    });
    // Read no further until wait(): the server bounds what waits for a slow reader; the
    // frames already read are kept for wait().
    attached.connection.pause();
    attached.reader.onFrame = (frame) => attached.early.push(frame);
    return new CommandHandle(this, attached.frame.pid, attached.frame.tag, attached);
  }

  /** SIGKILL to the process group of `pid`. */
  async kill(pid) {
    await this._sandbox._request({ type: "session_kill", pid }, "signaled");
  }

  /** A signal by name ("TERM", "SIGINT") or number to the process group of `pid`. */
  async signal(pid, signal) {
    await this._sandbox._request({ type: "session_signal", pid, signal }, "signaled");
  }

  /** Writes `data` to the stdin of `pid` (at most 1 MiB may wait unread). */
  async sendStdin(pid, data) {
    await this._sandbox._request({ type: "session_stdin", pid, data }, "stdin");
  }

  async closeStdin(pid) {
    await this._sandbox._request({ type: "session_stdin", pid, close: true }, "stdin");
  }
}

/**
 * A program on a terminal of the session's jail (`sandbox.pty.create()`): its output
 * goes to `onData` (a Buffer) as it arrives; `sendInput()` (keys: "\x03" is Ctrl-C),
 * `resize({cols, rows})`, `kill()`, `wait()` for its result {exitCode, stdout (the
 * terminal's output as text), stderr: "", verdict}.
 */
class PtyHandle {
  constructor(pty, pid, tag, attached, onData) {
    this._pty = pty;
    this.pid = pid;
    this.tag = tag ?? null;
    const output = [];
    this._ended = new Promise((resolve, reject) => {
      const { connection, reader } = attached;
      reader.onFrame = (frame) => {
        if (frame.type !== "output") return resolve(frame);
        const data = frame.data !== undefined ? Buffer.from(frame.data, "utf8") : Buffer.from(frame.base64 || "", "base64");
        output.push(data);
        if (onData) onData(data);
      };
      connection.removeAllListeners("end");
      connection.removeAllListeners("error");
      connection.on("end", () => reject(new BrigError("brig serve closed the connection before the terminal's program ended")));
      connection.on("error", (error) => reject(new BrigError(error.message)));
      for (const frame of attached.early.splice(0)) reader.onFrame(frame);
    }).finally(() => attached.connection.destroy());
    // A rejection nobody waits for is not an unhandled one; wait() sees it.
    this._ended.catch(() => {});
    this._output = output;
  }

  /** Writes `data` (a Buffer, or text as UTF-8) to the terminal, as typed. */
  sendInput(data) { return this._pty.sendInput(this.pid, data); }

  /** The terminal's new size: the program gets SIGWINCH. */
  resize({ cols, rows }) { return this._pty.resize(this.pid, { cols, rows }); }

  /** SIGKILL to its process group. */
  kill() { return this._pty.kill(this.pid); }

  /** Resolves once the program ends: {exitCode, stdout, stderr, verdict}. */
  async wait() {
    const end = expect(await this._ended, "exited", "session_connect");
    return commandResult(end.verdict, Buffer.concat(this._output).toString("utf8"), "");
  }
}

/** `sandbox.pty`: programs on a terminal of the jail's own devpts. */
class Pty {
  constructor(sandbox) {
    this._sandbox = sandbox;
  }

  /**
   * Starts `cmd` (an argv array or a shell command line; by default the jail's shell,
   * bash -i or sh -i) on a terminal of `cols` × `rows`; TERM is xterm-256color unless
   * `envs` sets it. Resolves to a PtyHandle, connected: `onData` gets its output.
   */
  async create({ cols = 80, rows = 24, onData, cmd, envs, cwd, timeout, tag } = {}) {
    const sandbox = this._sandbox;
    const reply = await sandbox._request({
      type: "session_exec",
      pty: { cols, rows },
      command: cmd === undefined ? undefined : typeof cmd === "string" ? ["/bin/sh", "-c", cmd] : cmd.map(String),
      env: envs && !Array.isArray(envs) ? Object.entries(envs).map(([k, v]) => `${k}=${v}`) : envs,
      chdir: cwd,
      time_limit: duration(timeout),
      tag,
    }, "process");
    const attached = await attach(sandbox, { pid: reply.pid });
    return new PtyHandle(this, reply.pid, reply.tag, attached, onData);
  }

  /** Writes `data` (a Buffer, or text as UTF-8) to the terminal of `pid`. */
  async sendInput(pid, data) {
    const bytes = Buffer.isBuffer(data) || data instanceof Uint8Array ? Buffer.from(data) : Buffer.from(String(data), "utf8");
    await this._sandbox._request({ type: "session_stdin", pid, base64: bytes.toString("base64") }, "stdin");
  }

  /** The terminal of `pid` is now `cols` × `rows`. */
  async resize(pid, { cols, rows }) {
    await this._sandbox._request({ type: "session_resize", pid, cols, rows }, "resized");
  }

  /** SIGKILL to the process group of `pid`. */
  async kill(pid) {
    await this._sandbox._request({ type: "session_kill", pid }, "signaled");
  }
}

/**
 * A session on `brig serve`: a jail whose interpreters keep their globals and whose
 * workspace (/home/sandbox) keeps its files until `close()`, `idleTimeout` or
 * `sessionTimeout`. Server failures (an unknown or closed session, a refused option or
 * path) reject with a BrigError.
 */
class Sandbox {
  constructor(sessionId, { socket, timeoutMs, workspace = "/home/sandbox" } = {}) {
    this.sessionId = sessionId;
    this.socket = socketOf({ socket });
    this.workspace = workspace;
    this.files = new Files(this);
    this.commands = new Commands(this);
    this.pty = new Pty(this);
    this._timeoutMs = timeoutMs;
    this._closed = false;
  }

  /**
   * Creates a session; `options` are `brig run`'s by their YAML names. `secrets`: keys the
   * sandbox may use without seeing them, each `{name, value | env, hosts}` (`env` is read
   * here, from process.env); inside, the variable `name` holds a placeholder brig replaces
   * with the value in HTTPS requests to `hosts` only. `root: true` maps uid 0 into the
   * jail too, for `commands.run(cmd, {user: "root"})` (root inside, without capabilities;
   * a root server with per-jail host uids only).
   */
  static async create({ socket, options = {}, sessionTimeout, idleTimeout, workspaceSize, metadata, secrets, root, timeoutMs } = {}) {
    const reply = await request(socketOf({ socket }), {
      type: "session_create",
      options,
      session_timeout: duration(sessionTimeout),
      idle_timeout: duration(idleTimeout),
      workspace_size: workspaceSize,
      metadata,
      secrets: secrets && secrets.map(wireSecret),
      root: root ? true : undefined,
    }, "session", timeoutMs);
    return new Sandbox(reply.session, { socket, timeoutMs, workspace: reply.workspace });
  }

  /** Attaches to an existing session (this uid's), say from another process. */
  static async connect(sessionId, { socket, timeoutMs } = {}) {
    return new Sandbox(sessionId, { socket, timeoutMs });
  }

  /**
   * Runs a cell in `context` (a context from createCodeContext, or its id), or in the
   * default context of `language` (python, node or bash; python when neither is given);
   * resolves to {stdout, stderr, logs: {stdout: [], stderr: []}, result, results: [Result],
   * text, error: null | {type, message, traceback}, verdict, stateLost, stateLostReason,
   * context, ok}.
   */
  async runCode(code, { language, context, timeout, outputLimit, onStdout, onStderr } = {}) {
    const body = { type: "session_exec", code, time_limit: duration(timeout), output_limit: outputLimit };
    if (context !== undefined && context !== null) body.context = contextId(context);
    if (language !== undefined || body.context === undefined) body.language = language ?? "python";
    let reply;
    if (onStdout || onStderr) {
      // Streamed: the output goes to the callbacks as it is produced.
      const output = collector(onStdout, onStderr);
      reply = expect(await this._stream({ ...body, stream: true }, output.onFrame), "exec", "session_exec");
      reply = { ...reply, stdout: output.text.stdout.join(""), stderr: output.text.stderr.join("") };
    } else {
      reply = await this._request(body, "exec");
    }
    const verdict = reply.verdict || {};
    const error = reply.error || null;
    const stdout = reply.stdout ?? "";
    const stderr = reply.stderr ?? "";
    const results = (reply.results || []).map(richResult);
    const main = results.find((result) => result.isMainResult);
    return {
      stdout,
      stderr,
      logs: { stdout: stdout ? [stdout] : [], stderr: stderr ? [stderr] : [] },
      result: reply.result ?? null,
      results,
      text: main ? main.text : null,
      error,
      verdict,
      stateLost: Boolean(reply.state_lost),
      stateLostReason: reply.state_lost_reason ?? null,
      context: reply.context ?? null,
      ok: error === null && verdict.status === "ok",
    };
  }

  /**
   * Replaces the session's `allow-net` and `deny-net` rules, and its `add-host` pins when
   * `addHost` is given (otherwise they stay: the server's and the session's own); a
   * session created with `--net filtered` only; an empty list lets nothing out, a
   * `denyNet` list lets out all it does not name (an `allowNet` rule wins over it). New
   * connections are judged by them at once; open ones they refuse are cut. Resolves to
   * how many were cut.
   */
  async setNetwork({ allowNet = [], addHost, denyNet = [] } = {}) {
    const request = { type: "session_network", allow_net: allowNet };
    if (denyNet.length > 0) request.deny_net = denyNet;
    if (addHost !== undefined) request.add_host = addHost;
    const reply = await this._request(request, "network");
    return reply.cut ?? 0;
  }

  /**
   * A connection to `port` of the session's own loopback: a server a program of the
   * session runs there (on 0.0.0.0, 127.0.0.1 or ::), reached with no network rule. Node
   * cannot take the descriptor `session_dial` passes (SCM_RIGHTS), so the connection is
   * `brig session dial` (the binary `brig`, else $BRIG_BIN, else `brig` on the PATH)
   * joined to a Duplex stream: what is written goes to the server, what it sends is read;
   * `end()` shuts the sending half. Nothing listening there destroys the stream with a
   * BrigError ("connection refused").
   */
  dial(port, { brig } = {}) {
    const { spawn } = require("child_process");
    const { Duplex } = require("stream");
    const program = brig ?? process.env.BRIG_BIN ?? "brig";
    const child = spawn(program, ["session", "dial", "--server", this.socket, "--session", this.sessionId, String(port)], {
      stdio: ["pipe", "pipe", "pipe"],
    });
    // The stream ends only once `brig` has exited 0: a refused dial ends its stdout
    // too, but is an error.
    const connection = new Duplex({
      read() { child.stdout.resume(); },
      // A write brig's exit cut (EPIPE) is not the stream's error: the exit says why
      // (a refused dial), below.
      write(chunk, encoding, callback) { child.stdin.write(chunk, encoding, () => callback()); },
      final(callback) { child.stdin.end(() => callback()); },
      destroy(error, callback) {
        if (child.exitCode === null && child.signalCode === null) child.kill();
        callback(error);
      },
    });
    child.stdout.on("data", (chunk) => { if (!connection.push(chunk)) child.stdout.pause(); });
    // Writes after brig has gone fail with EPIPE; its exit says why.
    child.stdin.on("error", () => {});
    const stderr = [];
    child.stderr.on("data", (chunk) => stderr.push(chunk));
    child.on("error", (error) => connection.destroy(new BrigError(`dial: cannot run ${program}: ${error.message}`)));
    child.on("close", (code) => {
      if (code === 0) {
        connection.push(null);
        return;
      }
      const message = Buffer.concat(stderr).toString().trim() || `brig session dial exited with ${code}`;
      const kind = /connection refused|"port"/.test(message) ? "bad_input" : "setup_failed";
      connection.destroy(new BrigError(message.replace(/^brig: /, ""), kind, code ?? 125));
    });
    return connection;
  }

  /** Sets the session's end to now + `timeout` (seconds or "10m"), at most the server's --session-timeout. */
  async setTimeout(timeout) {
    await this._request({ type: "session_set_timeout", timeout: duration(timeout) }, "timeout");
  }

  /**
   * Pauses the session: every process of its jail frozen where it is (the cgroup freezer),
   * its timeout and idle timer stopped, until `resume()`. Resolves to true if it was paused
   * already; rejects (BrigError) where the jail has no cgroup with a freezer.
   */
  async pause() {
    return (await this._request({ type: "session_pause" }, "paused")).already;
  }

  /** Resumes a paused session where it was: {already, paused_ms, ends_at_ms}. */
  async resume() {
    return await this._request({ type: "session_resume" }, "resumed");
  }

  /** The session's resource use now: {cpus, cpu_usec, cpu_percent, memory_bytes, memory_limit, workspace_used, workspace_size, state}. */
  async stats() {
    return await this._request({ type: "session_stats" }, "stats");
  }

  /**
   * A new interpreter of `language` (python, node or bash) in this session, with state of
   * its own, started in `cwd` (a path in the jail); resolves to {id, language, cwd}. A
   * session has at most 16.
   */
  async createCodeContext({ language = "python", cwd } = {}) {
    const reply = await this._request({ type: "session_context", action: "create", language, cwd }, "context");
    return codeContext(reply.context);
  }

  /** The contexts created, and the default contexts whose interpreter runs. */
  async listCodeContexts() {
    const reply = await this._request({ type: "session_context", action: "list" }, "contexts");
    return (reply.contexts || []).map(codeContext);
  }

  /** A fresh interpreter for `context` (a context or its id): its state is lost. */
  async restartCodeContext(context) {
    await this._request({ type: "session_context", action: "restart", context: contextId(context) }, "context");
  }

  /** Ends `context`'s interpreter and forgets the context. */
  async removeCodeContext(context) {
    await this._request({ type: "session_context", action: "remove", context: contextId(context) }, "context_removed");
  }

  /** Destroys the session: its processes and its workspace. A second call does nothing. */
  async close() {
    if (this._closed) return;
    await this._request({ type: "session_close" }, "closed");
    this._closed = true;
  }

  _request(body, expected) {
    return request(this.socket, { ...body, session: this.sessionId }, expected, this._timeoutMs);
  }

  _stream(body, onFrame) {
    const fields = Object.fromEntries(Object.entries(body).filter(([, value]) => value !== undefined));
    return stream(this.socket, { brig: PROTOCOL_VERSION, ...fields, session: this.sessionId }, onFrame);
  }
}

// A result's mime types and the property each is under.
/** A secret as the server takes it: `env` read here, into `value`. */
function wireSecret({ env, ...secret }) {
  if (env === undefined) return secret;
  if (process.env[env] === undefined) {
    throw new BrigError(`secrets: ${env} is not set in this process's environment; export it first`, "bad_input");
  }
  return { ...secret, value: process.env[env] };
}

const RESULT_TYPES = {
  "text/plain": "text", "text/html": "html", "text/markdown": "markdown",
  "image/svg+xml": "svg", "image/png": "png", "image/jpeg": "jpeg",
  "application/pdf": "pdf", "text/latex": "latex", "application/json": "json",
  "application/javascript": "javascript",
};

/**
 * One rich result of a cell (what it displayed, a matplotlib figure, its final value:
 * `isMainResult`): `text`, `html`, `markdown`, `svg`, `png`/`jpeg`/`pdf` (base64),
 * `latex`, `json`, `javascript` (undefined when absent), other mime types in `extra`,
 * and `formats()`.
 */
function richResult(bundle) {
  const result = { isMainResult: Boolean(bundle.is_main_result), extra: {} };
  for (const [mime, value] of Object.entries(bundle)) {
    if (mime in RESULT_TYPES) result[RESULT_TYPES[mime]] = value;
    else if (mime !== "is_main_result") result.extra[mime] = value;
  }
  Object.defineProperty(result, "formats", {
    enumerable: false,
    value: () => Object.values(RESULT_TYPES).filter((name) => result[name] !== undefined).concat(Object.keys(result.extra)),
  });
  return result;
}

function codeContext(context) {
  return { id: context.id, language: context.language, cwd: context.cwd ?? null };
}

function contextId(context) {
  return typeof context === "object" && context !== null ? context.id : String(context);
}

/**
 * This uid's sessions (all of them for root), those whose metadata hold every pair of
 * `metadata`: [{session, uid, metadata, state ("idle" | "busy"), created_at_ms, ends_at_ms,
 * idle_deadline_ms, limits, age_ms, idle_ms, requests}].
 */
async function listSessions({ socket, metadata = {}, timeoutMs } = {}) {
  const reply = await request(socketOf({ socket }), { type: "session_list", metadata }, "sessions", timeoutMs);
  return reply.sessions || [];
}

module.exports = { run, status, Sandbox, CommandHandle, PtyHandle, listSessions, BrigError, PROTOCOL_VERSION };
