//! `brig gateway` driven by E2B's official Node SDK (npm `e2b`, pinned, installed
//! unmodified under the target directory by the first test that needs it, kept between
//! runs), as root and rootless, with only `E2B_API_URL`, `E2B_SANDBOX_URL` and
//! `E2B_API_KEY` set: a sandbox created, a command run (its stdout, a failing one raising
//! the SDK's `CommandExitError` with its exit code and stderr), a file written and read
//! back, the sandbox killed and no longer running; and npm's `@e2b/code-interpreter`
//! (pinned, beside that `e2b`): cells with state, streamed stdout, rich results, an error
//! with name, value and traceback, env vars, three languages, contexts. The Python SDK's
//! wider tours are tests/serve/gateway.rs and gateway_interpreter.rs, whose gateway this
//! one starts.
//!
//! The program asserts as it goes and prints `PASS` at its end.

use crate::common;
use crate::gateway::{Gateway, KEY_A};

use common::serve::Server;
use common::*;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::OnceLock;

both_modes!(
    e2b_node_sdk_runs_commands_and_files,
    e2b_node_interpreter_runs_code_in_contexts
);

/// The npm package the test installs (the same 2.x family as the Python SDK, e2b 2.45).
const E2B_NODE_SDK: &str = "e2b@2.45.0";

/// `@e2b/code-interpreter`'s release whose `e2b` range (^2.39.0) holds the pinned `e2b`
/// above, installed beside it so that npm takes that one.
const E2B_NODE_INTERPRETER: [&str; 2] = ["@e2b/code-interpreter@2.7.2", E2B_NODE_SDK];

/// The directory whose `node_modules` holds the pinned SDK.
fn sdk_dir() -> Option<&'static Path> {
    static DIR: OnceLock<Option<PathBuf>> = OnceLock::new();
    pinned_npm(&DIR, &[E2B_NODE_SDK], "e2b")
}

/// The directory whose `node_modules` holds `packages` (pinned), installed from npm at
/// the first call for `cell` (by one test; the others wait) into a directory named after
/// them, kept between runs; `main` is the package whose presence says it is installed.
fn pinned_npm(
    cell: &'static OnceLock<Option<PathBuf>>,
    packages: &[&str],
    main: &str,
) -> Option<&'static Path> {
    let dir = cell.get_or_init(|| {
        let name = packages
            .iter()
            .map(|package| package.trim_start_matches('@').replace(['@', '/'], "-"))
            .collect::<Vec<_>>()
            .join("-");
        let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!("npm-{name}"));
        let installed = |dir: &Path| {
            dir.join("node_modules")
                .join(main)
                .join("package.json")
                .exists()
        };
        if installed(&dir) {
            return Some(dir);
        }
        // Installed aside and renamed into place: an interrupted install leaves nothing
        // half made where the next run looks.
        let building = dir.with_extension(format!("building-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&building);
        let made = std::fs::create_dir_all(&building).is_ok()
            && Command::new("npm")
                .args(["install", "--no-audit", "--no-fund", "--silent"])
                .args(packages)
                .current_dir(&building)
                .stdin(Stdio::null())
                .status()
                .is_ok_and(|status| status.success())
            && installed(&building);
        if made && (std::fs::rename(&building, &dir).is_ok() || installed(&dir)) {
            let _ = std::fs::remove_dir_all(&building);
            return Some(dir);
        }
        let _ = std::fs::remove_dir_all(&building);
        None
    });
    let packages = packages.join(" ");
    let found = require(
        &format!("E2B's Node SDK ({packages}, from npm)"),
        &format!(
            "let the test reach the npm registry once for `npm install {packages}` (kept under the target directory; node and npm on PATH)"
        ),
        dir.is_some(),
    );
    found.then(|| dir.as_deref().unwrap())
}

const TOUR: &str = r#"
const { Sandbox, CommandExitError } = require("e2b");
const assert = require("node:assert/strict");

(async () => {
  const sbx = await Sandbox.create({ envs: { FROM_CREATE: "created" } });

  const hi = await sbx.commands.run('echo hi "$FROM_CREATE"');
  assert.deepEqual([hi.stdout, hi.stderr, hi.exitCode], ["hi created\n", "", 0]);

  let raised = null;
  try {
    await sbx.commands.run("echo oops >&2; exit 3");
  } catch (err) {
    raised = err;
  }
  assert.ok(raised instanceof CommandExitError, `raised ${raised}`);
  assert.deepEqual([raised.exitCode, raised.stderr, raised.error], [3, "oops\n", "exit status 3"]);

  await sbx.files.write("notes/a.txt", "from node\n");
  assert.equal(await sbx.files.read("notes/a.txt"), "from node\n");
  assert.equal((await sbx.commands.run("cat notes/a.txt")).stdout, "from node\n");
  assert.equal((await sbx.commands.run("pwd", { cwd: "/home/user/notes" })).stdout, "/home/user/notes\n");

  await sbx.kill();
  assert.equal(await sbx.isRunning(), false);
  const listed = await Sandbox.list().nextItems();
  assert.ok(!listed.some((info) => info.sandboxId === sbx.sandboxId), "a killed sandbox listed");
  console.log("PASS");
})().catch((err) => {
  console.error(err);
  process.exit(1);
});
"#;

fn e2b_node_sdk_runs_commands_and_files(mode: Mode) {
    node_sdk_script_passes(mode, TOUR);
}

/// `script` passes (prints `PASS` last), run by node with the pinned SDK against a
/// gateway in front of a server, in `mode`, with only the three variables set.
pub(crate) fn node_sdk_script_passes(mode: Mode, script: &str) {
    let Some(sdk) = sdk_dir() else { return };
    node_program_passes(mode, sdk, script);
}

/// `program` run by node in `sdk` (its `node_modules`) against a gateway in front of a
/// server, in `mode`, with only the three variables set: it prints PASS last.
fn node_program_passes(mode: Mode, sdk: &Path, program: &str) {
    let server = Server::start(mode, &[]);
    let gateway = Gateway::start(mode, &server);
    let mut command = Command::new("node");
    command
        .args(["-e", program])
        .current_dir(sdk)
        .env_clear()
        .env("PATH", "/usr/bin:/bin")
        .env("E2B_API_URL", &gateway.url)
        .env("E2B_SANDBOX_URL", &gateway.url)
        .env("E2B_API_KEY", KEY_A)
        .stdin(Stdio::null());
    let output = output_of(command);
    let out = assert_success(&output);
    assert_eq!(out.lines().last(), Some("PASS"), "{}", describe(&output));
}

/// `@e2b/code-interpreter`'s tour: state across cells, streamed stdout, a rich result, an
/// error with name, value and traceback, env vars for one cell, the other languages'
/// default contexts, and contexts created, listed, restarted and removed.
const INTERPRETER_TOUR: &str = r#"
const { Sandbox } = require("@e2b/code-interpreter");
const assert = require("node:assert/strict");

(async () => {
  const sbx = await Sandbox.create();

  const seen = [];
  const first = await sbx.runCode("x = 41\nprint('hi')\nx", { onStdout: (out) => seen.push(out.line) });
  assert.deepEqual([first.logs.stdout, first.text, first.error, seen], [["hi\n"], "41", undefined, ["hi\n"]]);
  assert.equal((await sbx.runCode("x + 1")).text, "42");

  const failed = await sbx.runCode("1/0");
  assert.deepEqual([failed.error.name, failed.error.value], ["ZeroDivisionError", "division by zero"]);
  assert.ok(failed.error.traceback.startsWith("Traceback (most recent call last)"), failed.error.traceback);
  assert.equal((await sbx.runCode("x")).text, "41");

  const shown = await sbx.runCode("display({'a': 1})\nfrom IPython.display import HTML\nHTML('<b>x</b>')");
  assert.deepEqual(shown.results[0].json, { a: 1 });
  const main = shown.results[shown.results.length - 1];
  assert.deepEqual([main.html, main.isMainResult], ["<b>x</b>", true]);

  assert.equal((await sbx.runCode("import os; os.environ.get('COLOR')", { envs: { COLOR: "teal" } })).text, "'teal'");
  assert.equal((await sbx.runCode("os.environ.get('COLOR')")).text, undefined);
  assert.equal((await sbx.runCode("import os; os.getcwd()")).text, "'/home/user'");

  const js = await sbx.runCode("console.log('from js'); 6 * 7", { language: "javascript" });
  assert.deepEqual([js.logs.stdout, js.text], [["from js\n"], "42"]);
  assert.deepEqual((await sbx.runCode("echo $((6 * 7))", { language: "bash" })).logs.stdout, ["42\n"]);

  const node = await sbx.createCodeContext({ language: "javascript" });
  const shell = await sbx.createCodeContext({ language: "bash", cwd: "/home/user" });
  assert.deepEqual([node.language, shell.language, shell.cwd], ["javascript", "bash", "/home/user"]);
  assert.equal((await sbx.runCode("let kept = 5; kept * 2", { context: node })).text, "10");
  assert.equal((await sbx.runCode("kept", { context: node })).text, "5");
  const listed = Object.fromEntries((await sbx.listCodeContexts()).map((c) => [c.id, c.language]));
  assert.deepEqual([listed[node.id], listed[shell.id], listed.python], ["javascript", "bash", "python"]);
  await sbx.restartCodeContext(node);
  assert.equal((await sbx.runCode("typeof kept", { context: node })).text, "'undefined'");
  await sbx.removeCodeContext(shell);
  assert.ok(!(await sbx.listCodeContexts()).some((c) => c.id === shell.id));
  await assert.rejects(sbx.runCode("1", { context: shell }), /no context/);

  await sbx.kill();
  assert.equal(await sbx.isRunning(), false);
  console.log("PASS");
  // The SDK leaves the request timer of a refused runCode running (60 s): exit now.
  process.exit(0);
})().catch((err) => {
  console.error(err);
  process.exit(1);
});
"#;

fn e2b_node_interpreter_runs_code_in_contexts(mode: Mode) {
    static DIR: OnceLock<Option<PathBuf>> = OnceLock::new();
    let Some(sdk) = pinned_npm(&DIR, &E2B_NODE_INTERPRETER, "@e2b/code-interpreter") else {
        return;
    };
    node_program_passes(mode, sdk, INTERPRETER_TOUR);
}
