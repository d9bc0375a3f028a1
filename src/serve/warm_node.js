// brig serve's warm Node: started inside a pooled jail under all its restrictions, it
// does Node's startup (and loads the commonly used built-in modules) ahead of a request,
// then waits on descriptor 3 for one line of JSON: the program's argv, environment and
// directory. It then behaves as `node ARGV...` started cold would: `-e CODE`, `SCRIPT`
// (CommonJS or ES module, as `node` decides), `-` or nothing (the script on stdin);
// process.argv, require.main, the exit status, uncaught errors printed and status 1. Its
// standard streams are pipes to brig's runner, which relays them to the client's (Node
// cannot take descriptors over a socket). It says nothing on descriptor 3 after its "R"
// (brig takes the request's CPU time from the kernel, not from the process the program
// runs in). It serves one request; the jail goes with it.
'use strict';
(() => {
  const fs = require('fs');
  const net = require('net');
  const path = require('path');
  const vm = require('vm');
  const Module = require('module');
  // The startup a request would otherwise pay: the modules programs use most.
  for (const name of ['util', 'events', 'stream', 'buffer', 'url', 'os', 'crypto', 'child_process',
    'http', 'https', 'assert', 'zlib', 'readline', 'string_decoder', 'timers', 'querystring']) {
    require(name);
  }
  const control = new net.Socket({ fd: 3, readable: true, writable: false });
  fs.writeSync(3, 'R');
  let received = '';
  const onData = (chunk) => {
    received += chunk;
    const end = received.indexOf('\n');
    if (end < 0) return;
    control.removeListener('data', onData);
    control.pause();
    // The socket must not keep the event loop alive: the program's own work decides when
    // Node exits, as in a cold start.
    control.unref();
    setImmediate(run, JSON.parse(received.slice(0, end)));
  };
  control.on('data', onData);
  control.on('end', () => process.exit(0));

  function run(request) {
    for (const name of Object.keys(process.env)) delete process.env[name];
    for (const variable of request.env) {
      const at = variable.indexOf('=');
      if (at > 0) process.env[variable.slice(0, at)] = variable.slice(at + 1);
    }
    process.chdir(request.chdir);
    process.execArgv = [];
    const args = request.argv.slice(1);
    if (args[0] === '-e') {
      process.argv = [process.execPath, ...args.slice(2)];
      process.execArgv = args.slice(0, 2);
      evaluate('[eval]', args[1]);
    } else if (args.length === 0 || args[0] === '-') {
      process.argv = [process.execPath, ...args];
      evaluate('[stdin]', fs.readFileSync(0, 'utf8'));
    } else {
      process.argv = [process.execPath, path.resolve(args[0]), ...args.slice(1)];
      Module.runMain();
    }
  }

  // Node calls the default loader experimental when asked for it by name, which a cold
  // start does silently: that one warning is not the program's.
  const emitWarning = process.emitWarning;
  process.emitWarning = function (warning, ...rest) {
    if (String((warning && warning.message) || warning).includes('USE_MAIN_CONTEXT_DEFAULT_LOADER')) return;
    return emitWarning.call(this, warning, ...rest);
  };

  // As Node's own evalScript: a module of that name in the working directory, whose
  // require, module, exports and __dirname the code sees as globals.
  function evaluate(name, body) {
    const cwd = process.cwd();
    const module = new Module(name);
    module.filename = path.join(cwd, name);
    module.paths = Module._nodeModulePaths(cwd);
    const wrapper = 'globalThis.module = module;\nglobalThis.exports = exports;\n' +
      'globalThis.__dirname = __dirname;\nglobalThis.require = require;\nreturn (main) => main();\n';
    globalThis.__filename = name;
    module._compile(wrapper, `${name}-wrapper`)(() =>
      vm.runInThisContext(body, {
        filename: name,
        displayErrors: true,
        // import() as in a cold start (Node 21.7+, 20.17+; without it, import() fails).
        importModuleDynamically: vm.constants && vm.constants.USE_MAIN_CONTEXT_DEFAULT_LOADER,
      }));
  }
})();
