"use strict";
// A client for `brig serve` (protocol version 1): frames of a 4-byte big-endian length and
// one JSON object over a unix stream socket. Runs use "capture" mode, since Node cannot
// pass descriptors: the reply carries the program's stdout and stderr.

const net = require("net");

const PROTOCOL_VERSION = 1;
const DEFAULT_SOCKET = "/run/brig/brig.sock";
const MAX_FRAME = 1 << 20;

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
    let buffer = Buffer.alloc(0);
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
    connection.on("data", (chunk) => {
      buffer = Buffer.concat([buffer, chunk]);
      if (buffer.length < 4) return;
      const length = buffer.readUInt32BE(0);
      if (length > MAX_FRAME) return finish(new BrigError(`brig serve sent a frame of ${length} bytes`));
      if (buffer.length < 4 + length) return;
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

module.exports = { run, status, BrigError, PROTOCOL_VERSION };
