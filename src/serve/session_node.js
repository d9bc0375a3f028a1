// brig's session Node: the persistent interpreter of a session's jail. Started inside the
// jail under all its restrictions (as `node -e THIS_FILE`), it says {"ready": true} on
// descriptor 3, then runs the cells the runner sends there, one JSON object per line, as
// the `node` REPL does: in the main context's global scope (so a cell's top-level
// let/const/class/function are seen by the next ones, and values from built-in modules
// are of the same realm as the cells': `err instanceof Error` holds for an fs error), the
// completion value (awaited when it is a promise) as the cell's result, a throw as the
// cell's error. Everything of its own lives inside the function below, out of the cells'
// scope.
//
// Request: {"id": N, "code": "..."}. Reply (after the cell's stdout and stderr are flushed):
// {"id": N, "result": "util.inspect" | null, "error": null | {"type", "message",
//  "traceback"}, "results": [mime bundle, ...], "results_dropped": N}, data only. The
// results: what the cell passed to display(), then the completion value's bundle
// (`is_main_result`: text/plain, and application/json when JSON can hold it). A line that is not such a request gets an error of type
// ProtocolError. EOF on descriptor 3 ends the interpreter with status 0 (after the requests
// already received). A cell can write to descriptor 3 too: brig takes a reply as the
// cell's end only once the kernel shows the main thread back in the event loop's wait,
// and the CPU time from the kernel (see docs/protocol.md, the trust boundary).
//
// SIGINT interrupts a running cell (error type "Interrupted"): its synchronous part through
// the script's breakOnSigint, a pending promise by no longer waiting for it (the async work
// itself goes on). Outside a cell SIGINT is ignored. Callbacks running on their own (timers,
// I/O) cannot be interrupted, and a cell's own process.on('SIGINT') listener takes SIGINT
// over while it is there (Node's semantics: then a SIGINT during a run can end Node).
'use strict';
(() => {
  const net = require('net');
  const util = require('util');
  const vm = require('vm');
  const { builtinModules, createRequire } = require('module');

  const CONTROL_FD = 3;
  // Captured now: a cell may replace them on the shared objects.
  const exit = process.exit.bind(process);
  const streams = [process.stdout, process.stderr].map((stream) => [stream, stream.write]);
  const errorOutput = (text) => streams[1][1].call(process.stderr, text);

  // --- The cells' global scope: what the REPL has. ---

  // `node -e` leaves its own require (and __filename, __dirname of "[eval]") as globals.
  // A require resolving from the working directory, as the REPL's.
  globalThis.require = createRequire(`${process.cwd()}/`);
  delete globalThis.__filename;
  delete globalThis.__dirname;

  // Built-in modules as globals, loaded at first use (`fs.readdirSync('.')`), and replaced
  // by whatever a cell assigns or declares under the same name.
  for (const name of builtinModules) {
    if (!/^[a-z][a-z0-9_]*$/.test(name) || name in globalThis) continue;
    if (['constants', 'punycode', 'sys', 'wasi'].includes(name)) continue; // deprecated or experimental
    Object.defineProperty(globalThis, name, {
      configurable: true,
      enumerable: false,
      get() {
        const lib = globalThis.require(name);
        Object.defineProperty(globalThis, name, { value: lib, writable: true, configurable: true, enumerable: false });
        return lib;
      },
      set(value) {
        Object.defineProperty(globalThis, name, { value, writable: true, configurable: true, enumerable: true });
      },
    });
  }

  // `_`: the last result, until a cell assigns `_` itself.
  let last;
  Object.defineProperty(globalThis, '_', {
    configurable: true,
    enumerable: false,
    get: () => last,
    set(value) {
      Object.defineProperty(globalThis, '_', { value, writable: true, configurable: true, enumerable: true });
    },
  });

  // --- Rich outputs: mime bundles. ---

  // The most bytes (as JSON) of a cell's results a reply carries: brig reads a line up to
  // 17 MiB and counts the results against the exec's output limit (at most 8 MiB).
  const MAX_RESULTS = 16 << 20;
  const REPR_METHODS = [
    ['_repr_html_', 'text/html'], ['_repr_markdown_', 'text/markdown'],
    ['_repr_svg_', 'image/svg+xml'], ['_repr_png_', 'image/png'], ['_repr_jpeg_', 'image/jpeg'],
    ['_repr_latex_', 'text/latex'], ['_repr_json_', 'application/json'],
    ['_repr_javascript_', 'application/javascript'],
  ];
  const isMime = (key) => /^[a-z]+\/[^\s"\\]+$/i.test(key);
  const results = { kept: [], size: 0, dropped: 0 };

  function mimeValue(mime, value) {
    if (value === undefined || value === null) return undefined;
    if (mime === 'application/json' || mime.endsWith('+json')) {
      try {
        return JSON.stringify(value) === undefined ? undefined : JSON.parse(JSON.stringify(value));
      } catch {
        return undefined;
      }
    }
    if (Buffer.isBuffer(value) || value instanceof Uint8Array) return Buffer.from(value).toString('base64');
    return typeof value === 'string' ? value : undefined;
  }

  function jsonOf(value) {
    if (typeof value === 'function' || typeof value === 'symbol' || typeof value === 'bigint') return undefined;
    return mimeValue('application/json', value);
  }

  // obj's bundle: a plain object whose keys are all mime types is the bundle itself (as
  // given: no text/plain added);
  // otherwise _repr_mimebundle_() and the _repr_*_ methods, text/plain (util.inspect),
  // and application/json for plain objects and arrays.
  function bundle(obj, json) {
    const data = {};
    const isObject = obj !== null && typeof obj === 'object';
    const keys = isObject && Object.getPrototypeOf(obj) === Object.prototype ? Object.keys(obj) : [];
    if (keys.length > 0 && keys.every(isMime)) {
      // Taken as given, as Python's display(bundle, raw=True).
      for (const key of keys) {
        const value = mimeValue(key, obj[key]);
        if (value !== undefined) data[key] = value;
      }
      return data;
    } else if (obj !== null && obj !== undefined) {
      const given = hasMethod(obj, '_repr_mimebundle_') ? safeCall(obj, '_repr_mimebundle_') : undefined;
      for (const [key, value] of Object.entries(given && typeof given === 'object' ? given : {})) {
        const kept = isMime(key) ? mimeValue(key, value) : undefined;
        if (kept !== undefined) data[key] = kept;
      }
      for (const [method, mime] of REPR_METHODS) {
        if (mime in data || !hasMethod(obj, method)) continue;
        const value = mimeValue(mime, safeCall(obj, method));
        if (value !== undefined) data[mime] = value;
      }
      const plain = Array.isArray(obj) || (isObject && Object.getPrototypeOf(obj) === Object.prototype);
      if (!('application/json' in data) && (json || plain)) {
        const value = jsonOf(obj);
        if (value !== undefined) data['application/json'] = value;
      }
    }
    if (!('text/plain' in data)) data['text/plain'] = safeInspect(obj);
    return data;
  }

  // Whether obj has a method `name` (false when looking it up throws, as a Proxy may).
  function hasMethod(obj, name) {
    try {
      return typeof obj[name] === 'function';
    } catch {
      return false;
    }
  }

  function safeCall(obj, method) {
    try {
      return obj[method]();
    } catch {
      return undefined;
    }
  }

  // value with its strings made well-formed (see `clean`), keys and all.
  function scrub(value) {
    if (typeof value === 'string') return clean(value, Infinity);
    if (Array.isArray(value)) return value.map(scrub);
    if (value !== null && typeof value === 'object') {
      return Object.fromEntries(Object.entries(value).map(([key, item]) => [scrub(key), scrub(item)]));
    }
    return value;
  }

  function addResult(data, main) {
    const entry = { ...scrub(data), is_main_result: main };
    // The text as `result` is cut (MAX_TEXT); the rich formats only by MAX_RESULTS.
    if (typeof entry['text/plain'] === 'string') entry['text/plain'] = clean(entry['text/plain']);
    let size;
    try {
      size = Buffer.byteLength(JSON.stringify(entry));
    } catch {
      results.dropped += 1;
      return;
    }
    if (results.size + size > MAX_RESULTS) {
      results.dropped += 1;
      return;
    }
    results.size += size;
    results.kept.push(entry);
  }

  Object.defineProperty(globalThis, 'display', {
    configurable: true,
    enumerable: false,
    writable: true,
    value: function display(...objs) {
      for (const obj of objs) addResult(bundle(obj, false), false);
    },
  });

  // --- Running a cell. ---

  let cells = 0;

  class Interrupted extends Error {}
  Interrupted.prototype.name = 'Interrupted';

  // SIGINT. breakOnSigint makes a script's run start Node's SIGINT watchdog and stop it
  // after: when the last start is stopped Node installs a SIGINT handler that exits the
  // process, and SIGINT listeners (process.on) are taken off around the run, leaving the
  // default (death) for a moment. So this holds a start of that watchdog for the whole
  // session (as Node's REPL does around its runs): SIGINT then never kills the
  // interpreter; during a run it interrupts the script, at other times it is only
  // recorded, and `takeSigint` reads and clears that record. That needs Node's internal
  // contextify binding; without it, a no-op listener (with that small window left).
  const contextify = binding('contextify');
  const holdsWatchdog = typeof contextify?.startSigintWatchdog === 'function'
    && typeof contextify.stopSigintWatchdog === 'function'
    && contextify.startSigintWatchdog() === true;
  if (!holdsWatchdog) process.on('SIGINT', () => {});

  function takeSigint() {
    if (!holdsWatchdog) return false;
    contextify.startSigintWatchdog();
    return contextify.stopSigintWatchdog();
  }

  // A cell's own SIGINT listener takes SIGINT over (Node's semantics); once it is removed
  // the signal's disposition is the default again, and the watchdog's handler is put back.
  let sigintListened = false;
  process.on('newListener', (event) => {
    if (event === 'SIGINT') sigintListened = true;
  });
  function rearmWatchdog() {
    if (!holdsWatchdog || !sigintListened || process.listenerCount('SIGINT') > 0) return;
    sigintListened = false;
    contextify.stopSigintWatchdog();
    contextify.startSigintWatchdog();
  }

  function binding(name) {
    // process.binding is deprecated (a warning under --pending-deprecation): quietly.
    const emitWarning = process.emitWarning;
    process.emitWarning = () => {};
    try {
      return process.binding(name);
    } catch {
      return null;
    } finally {
      process.emitWarning = emitWarning;
    }
  }

  // Errors no cell is waiting for (a timer's throw, an unhandled rejection) are the REPL's
  // "Uncaught ...": printed, and the interpreter carries on.
  process.on('uncaughtException', (error) => errorOutput(`Uncaught ${uncaught(error)}\n`));
  process.on('unhandledRejection', (reason) => errorOutput(`Uncaught (in promise) ${uncaught(reason)}\n`));

  function uncaught(thrown) {
    try {
      if (thrown !== null && typeof thrown === 'object' && typeof thrown.stack === 'string') return cellStack(thrown.stack);
    } catch {
      // inspected below
    }
    return safeInspect(thrown);
  }

  function safeInspect(value) {
    try {
      return util.inspect(value);
    } catch {
      return '<uninspectable value>';
    }
  }

  function isObjectLiteral(code) {
    return /^\s*\{/.test(code) && /\}\s*$/.test(code);
  }

  // The cell as a script. As the REPL: `{ a: 1 }` is an object, not a block; with a
  // top-level `await`, the cell runs as an async function whose declarations are hoisted
  // to the global scope, and the script's value is a promise of `{ value }`.
  function compileCell(code) {
    cells += 1;
    const filename = `<cell-${cells}>`;
    let source = code;
    let awaited = false;
    if (code.includes('await')) {
      const wrapped = topLevelAwait(code);
      if (wrapped !== null) {
        source = wrapped;
        awaited = true;
      }
    } else if (isObjectLiteral(code)) {
      source = `(${code.trim()})\n`;
    }
    try {
      return { script: new vm.Script(source, { filename }), awaited };
    } catch (error) {
      if (source === code) throw error;
      return { script: new vm.Script(code, { filename }), awaited: false };
    }
  }

  function isThenable(value) {
    return value !== null && (typeof value === 'object' || typeof value === 'function') && typeof value.then === 'function';
  }

  // The cell's promise, or an Interrupted error at a SIGINT (the watchdog's record,
  // polled: no JavaScript runs at a SIGINT it takes).
  function interruptible(promise) {
    let poll;
    return new Promise((resolve, reject) => {
      poll = setInterval(() => {
        if (takeSigint()) reject(new Interrupted('Script execution was interrupted by `SIGINT` (while awaiting its promise)'));
      }, 20);
      Promise.resolve(promise).then(resolve, reject);
    }).finally(() => clearInterval(poll));
  }

  async function runCell(code) {
    const { script, awaited } = compileCell(code);
    takeSigint(); // one from before the cell is not for it
    const value = script.runInThisContext({ breakOnSigint: true });
    if (awaited) return (await interruptible(value))?.value;
    if (isThenable(value)) return await interruptible(value);
    return value;
  }

  // The frames below the cell's (vm's, this file's "[eval]", Node's startup) are the
  // interpreter's: the stack is cut at the first of them.
  function cellStack(stack) {
    const lines = stack.split('\n');
    const ours = lines.findIndex((line) => /^\s+at .*(\bnode:vm:|\[eval\])/.test(line));
    return (ours === -1 ? lines : lines.slice(0, ours)).join('\n');
  }

  function describe(thrown) {
    try {
      if (thrown instanceof Interrupted || thrown?.code === 'ERR_SCRIPT_EXECUTION_INTERRUPTED') {
        const message = thrown.message;
        return { type: 'Interrupted', message, traceback: `Interrupted: ${message}` };
      }
      if (thrown === null || (typeof thrown !== 'object' && typeof thrown !== 'function')) {
        return { type: typeof thrown, message: String(thrown), traceback: `Uncaught ${safeInspect(thrown)}` };
      }
      const type = (typeof thrown.name === 'string' && thrown.name) || thrown.constructor?.name || typeof thrown;
      const message = typeof thrown.message === 'string' ? thrown.message : String(thrown);
      const traceback = typeof thrown.stack === 'string' ? cellStack(thrown.stack) : `Uncaught ${safeInspect(thrown)}`;
      return { type: String(type), message, traceback };
    } catch {
      return { type: typeof thrown, message: '<unprintable thrown value>', traceback: '' };
    }
  }

  // Waits until what the cell wrote to process.stdout and process.stderr is written out.
  function flush() {
    return Promise.all(
      streams.map(([stream, write]) => new Promise((resolve) => {
        if (stream.destroyed || stream.writableEnded) return resolve();
        try {
          write.call(stream, '', () => resolve());
        } catch {
          resolve();
        }
      })),
    );
  }

  // --- The protocol. ---

  const control = new net.Socket({ fd: CONTROL_FD, readable: true, writable: true, allowHalfOpen: true });
  // The runner gone: so is the session.
  control.on('error', () => exit(0));

  // Lone surrogates are not UTF-8: written out as \udXXX text rather than breaking the reply.
  // The most characters of a result, message or stack a reply carries (and of a rich
  // result's text/plain): with the results (at most MAX_RESULTS) a reply stays one line
  // within the 17 MiB brig reads (a longer line breaks the protocol).
  const MAX_TEXT = 40000;

  function clean(text, most = MAX_TEXT) {
    if (typeof text === 'string' && text.length > most) {
      text = `${text.slice(0, most)}... [${text.length - most} more characters]`;
    }
    return typeof text === 'string'
      ? text.replace(/[\ud800-\udbff](?![\udc00-\udfff])|(?<![\ud800-\udbff])[\udc00-\udfff]/g, (c) => `\\u${c.charCodeAt(0).toString(16)}`)
      : text;
  }

  function send(message) {
    return new Promise((resolve) => control.write(`${JSON.stringify(message)}\n`, () => resolve()));
  }

  function reply(id, result, error) {
    const message = {
      id: id === undefined ? null : id,
      result: clean(result),
      error: error && { type: clean(error.type), message: clean(error.message), traceback: clean(error.traceback) },
      results: results.kept,
      results_dropped: results.dropped,
    };
    results.kept = [];
    results.size = 0;
    results.dropped = 0;
    return send(message);
  }

  function protocolError(message) {
    return { type: 'ProtocolError', message, traceback: '' };
  }

  async function handle(line) {
    let request;
    try {
      request = JSON.parse(line);
    } catch (error) {
      return reply(null, null, protocolError(`not a JSON line: ${error.message}`));
    }
    if (request === null || typeof request !== 'object' || Array.isArray(request) || typeof request.code !== 'string') {
      const id = request !== null && typeof request === 'object' && !Array.isArray(request) ? request.id : null;
      return reply(id, null, protocolError('expected {"id": N, "code": "..."}'));
    }
    let result = null;
    let error = null;
    results.kept = [];
    results.size = 0;
    results.dropped = 0;
    try {
      const value = await runCell(request.code);
      if (value !== undefined) {
        last = value;
        const main = bundle(value, true);
        result = main['text/plain'];
        addResult(main, true);
      }
    } catch (thrown) {
      error = describe(thrown);
    }
    rearmWatchdog();
    await flush();
    return reply(request.id, result, error);
  }

  // Requests are run one at a time, in order; EOF is acted on after those already read.
  const queue = [];
  let chunks = [];
  let ended = false;
  let running = false;

  async function pump() {
    if (running) return;
    running = true;
    while (queue.length > 0) await handle(queue.shift());
    running = false;
    if (ended) {
      await flush();
      exit(0);
    }
  }

  control.on('data', (chunk) => {
    let newline;
    while ((newline = chunk.indexOf(10)) !== -1) {
      chunks.push(chunk.subarray(0, newline));
      queue.push(Buffer.concat(chunks).toString('utf8'));
      chunks = [];
      chunk = chunk.subarray(newline + 1);
    }
    if (chunk.length > 0) chunks.push(chunk);
    pump();
  });
  control.on('end', () => {
    ended = true;
    pump();
  });

  // --- Top-level await: Node's REPL transform (internal/repl/await, on Node's own copy of
  // acorn), loaded from Node's built-in sources at the first cell that may need it. Node
  // does not export it: without it (another Node, no process.binding), a top-level await
  // is the SyntaxError of a script. ---

  let awaitTransform;

  function topLevelAwait(code) {
    if (awaitTransform === undefined) awaitTransform = loadAwaitTransform();
    if (awaitTransform === null) return null;
    try {
      return awaitTransform(code);
    } catch (error) {
      // The transform's SyntaxError (with the line and a caret) is the cell's.
      if (error instanceof SyntaxError) throw error;
      return null;
    }
  }

  function loadAwaitTransform() {
    try {
      const natives = binding('natives');
      if (natives === null) return null;
      class Recoverable extends SyntaxError {}
      Recoverable.prototype.name = 'SyntaxError';
      const loaded = { 'internal/repl': { Recoverable } };
      const load = (id) => {
        if (id in loaded) return loaded[id];
        if (typeof natives[id] !== 'string') throw new Error(`no ${id}`);
        const module = { exports: {} };
        loaded[id] = module.exports;
        const wrapper = new vm.Script(`(function (exports, require, module, primordials) {${natives[id]}\n})`, { filename: `node:${id}` });
        wrapper.runInThisContext().call(module.exports, module.exports, load, module, primordials);
        loaded[id] = module.exports;
        return module.exports;
      };
      const transform = load('internal/repl/await').processTopLevelAwait;
      if (typeof transform !== 'function') return null;
      transform('await 0');
      return transform;
    } catch {
      return null;
    }
  }

  // Node's internal modules take their built-ins from `primordials` by derived names:
  // `ArrayPrototypePush(array, x)` is Array.prototype.push.call(array, x), `ObjectKeys` is
  // Object.keys, `RegExpPrototypeSymbolReplace` is RegExp.prototype[Symbol.replace],
  // `SafeSet` a Set. This makes each name the module asks for.
  const primordials = new Proxy({}, {
    get(cache, name) {
      if (typeof name !== 'string') return undefined;
      if (!(name in cache)) cache[name] = primordial(name);
      return cache[name];
    },
  });

  function primordial(name) {
    if (name.startsWith('Safe') && name.slice(4) in globalThis) return globalThis[name.slice(4)];
    if (name in globalThis) return globalThis[name];
    const lower = (s) => s[0].toLowerCase() + s.slice(1);
    const key = (s) => (s.startsWith('Symbol') && s.length > 6 ? Symbol[lower(s.slice(6))] : lower(s));
    for (let end = name.length - 1; end > 0; end--) {
      const owner = globalThis[name.slice(0, end)];
      if (owner === undefined || !/^[A-Z]/.test(name.slice(end))) continue;
      const rest = name.slice(end);
      if (rest === 'Prototype') return owner.prototype;
      if (rest.startsWith('Prototype')) {
        const method = owner.prototype[key(rest.slice(9))];
        return typeof method === 'function' ? Function.prototype.call.bind(method) : method;
      }
      const value = owner[key(rest)];
      return typeof value === 'function' ? value.bind(owner) : value;
    }
    return undefined;
  }

  // A cell's first run compiles vm's, util's and the protocol's paths; do it now.
  util.inspect({ a: [1, 'b'] });
  describe(new Error('warm-up'));
  send({ ready: true });
})();
