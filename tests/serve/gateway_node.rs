//! `brig gateway` driven by E2B's official Node SDK (npm `e2b`, pinned, installed
//! unmodified under the target directory by the first test that needs it, kept between
//! runs), as root and rootless, with only `E2B_API_URL`, `E2B_SANDBOX_URL` and
//! `E2B_API_KEY` set: a sandbox created, a command run (its stdout, a failing one raising
//! the SDK's `CommandExitError` with its exit code and stderr), a file written and read
//! back, the sandbox killed and no longer running. The Python SDK's wider tour is
//! tests/serve/gateway.rs, whose gateway this one starts.
//!
//! The program asserts as it goes and prints `PASS` at its end.

use crate::common;
use crate::gateway::{Gateway, KEY_A};

use common::serve::Server;
use common::*;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::OnceLock;

both_modes!(e2b_node_sdk_runs_commands_and_files);

/// The npm package the test installs (the same 2.x family as the Python SDK, e2b 2.45).
const E2B_NODE_SDK: &str = "e2b@2.45.0";

/// The directory whose `node_modules` holds the pinned SDK, installed at the first call
/// (by one test; the others wait) into a directory named after the version.
fn sdk_dir() -> Option<&'static Path> {
    static DIR: OnceLock<Option<PathBuf>> = OnceLock::new();
    let dir = DIR.get_or_init(|| {
        let dir = Path::new(env!("CARGO_TARGET_TMPDIR"))
            .join(format!("npm-{}", E2B_NODE_SDK.replace('@', "-")));
        let installed = |dir: &Path| dir.join("node_modules/e2b/package.json").exists();
        if installed(&dir) {
            return Some(dir);
        }
        // Installed aside and renamed into place: an interrupted install leaves nothing
        // half made where the next run looks.
        let building = dir.with_extension(format!("building-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&building);
        let made = std::fs::create_dir_all(&building).is_ok()
            && Command::new("npm")
                .args([
                    "install",
                    "--no-audit",
                    "--no-fund",
                    "--silent",
                    E2B_NODE_SDK,
                ])
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
    let found = require(
        &format!("the E2B Node SDK ({E2B_NODE_SDK}, from npm)"),
        &format!(
            "let the test reach the npm registry once for `npm install {E2B_NODE_SDK}` (kept under the target directory; node and npm on PATH)"
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
    let Some(sdk) = sdk_dir() else { return };
    let server = Server::start(mode, &[]);
    let gateway = Gateway::start(mode, &server);
    let mut command = Command::new("node");
    command
        .args(["-e", TOUR])
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
