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

function expect(reply, asked, expected) {
  if (reply.type === "error") throw new BrigError(reply.message, reply.kind, reply.exit_code);
  if (reply.type !== expected) throw new BrigError(`brig serve answered ${asked} with ${JSON.stringify(reply.type)}`);
  return reply;
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

const CHUNK = 512 << 10; // the most data one session_put or session_get carries

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
  if (reply.type === "error") throw new BrigError(reply.message, reply.kind, reply.exit_code);
  if (reply.type !== expected) throw new BrigError(`brig serve answered ${body.type} with ${JSON.stringify(reply.type)}`);
  return reply;
}

/** `sandbox.files`: the session's workspace; paths are relative to it. */
class Files {
  constructor(sandbox) {
    this._sandbox = sandbox;
  }

  /** Writes a string (UTF-8) or bytes to `path` in 512 KiB chunks; resolves to the file's size. */
  async write(path, data) {
    const bytes = typeof data === "string" ? Buffer.from(data, "utf8") : Buffer.from(data);
    let size = 0;
    for (let start = 0; start < Math.max(bytes.length, 1); start += CHUNK) {
      const reply = await this._sandbox._request({
        type: "session_put",
        path,
        data: bytes.subarray(start, start + CHUNK).toString("base64"),
        append: start > 0,
      }, "put");
      size = reply.size;
    }
    return size;
  }

  /** The file at `path`: a string (UTF-8), or a Buffer with `{format: "bytes"}`. */
  async read(path, { format = "text" } = {}) {
    if (format !== "text" && format !== "bytes") throw new TypeError("format is 'text' or 'bytes'");
    const chunks = [];
    let offset = 0;
    for (;;) {
      const reply = await this._sandbox._request({ type: "session_get", path, offset, length: CHUNK }, "get");
      const data = Buffer.from(reply.data || "", "base64");
      chunks.push(data);
      offset += data.length;
      if (data.length === 0 || offset >= reply.size) break;
    }
    const content = Buffer.concat(chunks);
    return format === "bytes" ? content : content.toString("utf8");
  }

  /** The entries of the directory `path`: [{name, type, size, mode}], sorted by name. */
  async list(path = ".") {
    const reply = await this._sandbox._request({ type: "session_ls", path }, "ls");
    return (reply.entries || []).map(({ name, type, size, mode }) => ({ name, type, size, mode }));
  }
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
      expect(attached.frame, "session_connect", "process");
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
    expect(end, "session_connect", "exited");
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
   */
  async run(cmd, { stdin, timeout, env, cwd, outputLimit, onStdout, onStderr, background, tag } = {}) {
    const command = typeof cmd === "string" ? ["/bin/sh", "-c", cmd] : cmd.map(String);
    const body = {
      type: "session_exec",
      command,
      stdin,
      env: env && !Array.isArray(env) ? Object.entries(env).map(([k, v]) => `${k}=${v}`) : env,
      chdir: cwd,
      time_limit: duration(timeout),
      output_limit: outputLimit,
    };
    if (background) {
      const reply = await this._sandbox._request({ ...body, background: true, tag }, "process");
      return new CommandHandle(this, reply.pid, reply.tag);
    }
    if (onStdout || onStderr) {
      const output = collector(onStdout, onStderr);
      const end = await this._sandbox._stream({ ...body, stream: true }, output.onFrame);
      expect(end, "session_exec", "exec");
      return commandResult(end.verdict, output.text.stdout.join(""), output.text.stderr.join(""));
    }
    const reply = await this._sandbox._request(body, "exec");
    return commandResult(reply.verdict, reply.stdout ?? "", reply.stderr ?? "");
  }

  /** The session's processes: [{pid, tag, command, running, status, started_unix_ms, backlog_dropped}]. */
  async list() {
    const reply = await this._sandbox._request({ type: "session_ps" }, "processes");
    return reply.processes || [];
  }

  /** Attaches to a process by pid (or `{tag}`); `wait()` on the handle reads its output. */
  async connect(pid, { tag } = {}) {
    const sandbox = this._sandbox;
    const attached = await stream(sandbox.socket, {
      brig: PROTOCOL_VERSION, type: "session_connect", session: sandbox.sessionId,
      ...(pid !== undefined && pid !== null ? { pid } : {}), ...(tag !== undefined ? { tag } : {}),
    }, () => {}, { keep: true });
    try {
      expect(attached.frame, "session_connect", "process");
    } catch (error) {
      attached.connection.destroy();
      throw error;
    }
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
    this._timeoutMs = timeoutMs;
    this._closed = false;
  }

  /** Creates a session; `options` are `brig run`'s by their YAML names. */
  static async create({ socket, options = {}, sessionTimeout, idleTimeout, workspaceSize, timeoutMs } = {}) {
    const reply = await request(socketOf({ socket }), {
      type: "session_create",
      options,
      session_timeout: duration(sessionTimeout),
      idle_timeout: duration(idleTimeout),
      workspace_size: workspaceSize,
    }, "session", timeoutMs);
    return new Sandbox(reply.session, { socket, timeoutMs, workspace: reply.workspace });
  }

  /** Attaches to an existing session (this uid's), say from another process. */
  static async connect(sessionId, { socket, timeoutMs } = {}) {
    return new Sandbox(sessionId, { socket, timeoutMs });
  }

  /**
   * Runs a cell in the session's interpreter of `language` (python or node); resolves to
   * {stdout, stderr, result, error: null | {type, message, traceback}, verdict, stateLost,
   * stateLostReason, ok}.
   */
  async runCode(code, { language = "python", timeout, outputLimit, onStdout, onStderr } = {}) {
    const body = {
      type: "session_exec",
      code,
      language,
      time_limit: duration(timeout),
      output_limit: outputLimit,
    };
    let reply;
    if (onStdout || onStderr) {
      // Streamed: the output goes to the callbacks as it is produced.
      const output = collector(onStdout, onStderr);
      reply = expect(await this._stream({ ...body, stream: true }, output.onFrame), "session_exec", "exec");
      reply = { ...reply, stdout: output.text.stdout.join(""), stderr: output.text.stderr.join("") };
    } else {
      reply = await this._request(body, "exec");
    }
    const verdict = reply.verdict || {};
    const error = reply.error || null;
    return {
      stdout: reply.stdout ?? "",
      stderr: reply.stderr ?? "",
      result: reply.result ?? null,
      error,
      verdict,
      stateLost: Boolean(reply.state_lost),
      stateLostReason: reply.state_lost_reason ?? null,
      ok: error === null && verdict.status === "ok",
    };
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

/** This uid's sessions (all of them for root): [{session, uid, age_ms, idle_ms, execs}]. */
async function listSessions({ socket, timeoutMs } = {}) {
  const reply = await request(socketOf({ socket }), { type: "session_list" }, "sessions", timeoutMs);
  return reply.sessions || [];
}

module.exports = { run, status, Sandbox, CommandHandle, listSessions, BrigError, PROTOCOL_VERSION };
