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

/** `sandbox.commands`: programs run in the session's jail. */
class Commands {
  constructor(sandbox) {
    this._sandbox = sandbox;
  }

  /**
   * Runs `cmd`, an argv array or a shell command line (run with /bin/sh -c); resolves to
   * {exitCode, stdout, stderr, verdict}, `exitCode` as `brig run` would exit.
   */
  async run(cmd, { stdin, timeout, env, cwd, outputLimit } = {}) {
    const command = typeof cmd === "string" ? ["/bin/sh", "-c", cmd] : cmd.map(String);
    const reply = await this._sandbox._request({
      type: "session_exec",
      command,
      stdin,
      env: env && !Array.isArray(env) ? Object.entries(env).map(([k, v]) => `${k}=${v}`) : env,
      chdir: cwd,
      time_limit: duration(timeout),
      output_limit: outputLimit,
    }, "exec");
    const verdict = reply.verdict || {};
    return {
      exitCode: verdict.brig_exit_code ?? verdict.exit_code ?? 125,
      stdout: reply.stdout ?? "",
      stderr: reply.stderr ?? "",
      verdict,
    };
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
   * Runs a cell in `context` (a context from createCodeContext, or its id), or in the
   * default context of `language` (python, node or bash; python when neither is given);
   * resolves to {stdout, stderr, logs: {stdout: [], stderr: []}, result, results: [Result],
   * text, error: null | {type, message, traceback}, verdict, stateLost, stateLostReason,
   * context, ok}.
   */
  async runCode(code, { language, context, timeout, outputLimit } = {}) {
    const body = { type: "session_exec", code, time_limit: duration(timeout), output_limit: outputLimit };
    if (context !== undefined && context !== null) body.context = contextId(context);
    if (language !== undefined || body.context === undefined) body.language = language ?? "python";
    const reply = await this._request(body, "exec");
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
}

// A result's mime types and the property each is under.
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

/** This uid's sessions (all of them for root): [{session, uid, age_ms, idle_ms, execs}]. */
async function listSessions({ socket, timeoutMs } = {}) {
  const reply = await request(socketOf({ socket }), { type: "session_list" }, "sessions", timeoutMs);
  return reply.sessions || [];
}

module.exports = { run, status, Sandbox, listSessions, BrigError, PROTOCOL_VERSION };
