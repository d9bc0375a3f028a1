//! The Python and Node clients of `brig serve` (clients/python, clients/node) against a
//! real server, as root and rootless: a run with captured output, a run with the
//! caller's own streams (Python), a refused request, and the status.

#[macro_use]
mod common;

use common::serve::Server;
use common::*;
use std::path::Path;

both_modes!(python_client_runs_and_reports, node_client_runs_and_reports);

/// A copy of `clients/NAME` that uid 65534 can read (the checkout may not be).
fn client_copy(name: &str) -> TempDir {
    let dir = TempDir::new(&format!("client-{name}"));
    let source = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("clients")
        .join(name);
    let copied = std::process::Command::new("cp")
        .arg("-r")
        .arg(&source)
        .arg(dir.path().join(name))
        .status()
        .expect("cp");
    assert!(copied.success());
    std::process::Command::new("chmod")
        .args(["-R", "a+rX"])
        .arg(dir.path())
        .status()
        .expect("chmod");
    dir
}

const PYTHON_SCRIPT: &str = r#"
import io, json, os, sys, tempfile
import brig_client
socket = sys.argv[1]
result = brig_client.run(["sh", "-c", "cat; echo err >&2; exit 3"], socket=socket, stdin="in\n")
print(json.dumps([result.exit_code, result.status, result.stdout, result.stderr, result.verdict["exit_code"]]))
with tempfile.TemporaryFile() as out:
    result = brig_client.run(["echo", "through my own file"], socket=socket, capture=False,
                             stdio=[open(os.devnull), out, sys.stderr])
    out.seek(0)
    print(json.dumps([result.exit_code, out.read().decode()]))
try:
    brig_client.run(["true"], socket=socket, options={"net": "host"})
except brig_client.BrigError as error:
    print(json.dumps([error.kind, error.exit_code, "--client-may net-host" in error.message]))
print(json.dumps(sorted(brig_client.status(socket))))
"#;

fn python_client_runs_and_reports(mode: Mode) {
    let server = Server::start(mode, &["--pool", "1"]);
    let client = client_copy("python");
    let python = interpreter("python3");
    let mut command = command_as(mode, python, &["-c", PYTHON_SCRIPT, server.socket()]);
    command.env("PYTHONPATH", client.path().join("python"));
    let output = output_of(command);
    let out = assert_success(&output);
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(
        lines[0],
        r#"[3, "nonzero_exit", "in\n", "err\n", 3]"#,
        "{}",
        describe(&output)
    );
    assert_eq!(lines[1], r#"[0, "through my own file\n"]"#);
    assert_eq!(lines[2], r#"["bad_input", 125, true]"#);
    assert!(
        lines[3].contains("\"pooled_runs\"") && lines[3].contains("\"ready\""),
        "{}",
        lines[3]
    );
}

const NODE_SCRIPT: &str = r#"
const brig = require(process.argv[1]);
const socket = process.argv[2];
(async () => {
  const result = await brig.run(["sh", "-c", "cat; echo err >&2; exit 3"], { socket, stdin: "in\n" });
  console.log(JSON.stringify([result.exitCode, result.status, result.stdout, result.stderr]));
  try {
    await brig.run(["true"], { socket, options: { seccomp: "none" } });
  } catch (error) {
    console.log(JSON.stringify([error.name, error.kind, error.exitCode, error.message.includes("--client-may seccomp-none")]));
  }
  const status = await brig.status({ socket });
  console.log(JSON.stringify(Object.keys(status).sort()));
})().catch((error) => { console.error(error); process.exit(1); });
"#;

fn node_client_runs_and_reports(mode: Mode) {
    if !require_program("node", "apt install nodejs") {
        return;
    }
    let server = Server::start(mode, &["--pool", "1"]);
    let client = client_copy("node");
    let module = client.path().join("node");
    let output = output_of(command_as(
        mode,
        interpreter("node"),
        &[
            "-e",
            NODE_SCRIPT,
            "--",
            module.to_str().unwrap(),
            server.socket(),
        ],
    ));
    let out = assert_success(&output);
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(
        lines[0],
        r#"[3,"nonzero_exit","in\n","err\n"]"#,
        "{}",
        describe(&output)
    );
    assert_eq!(lines[1], r#"["BrigError","bad_input",125,true]"#);
    assert!(lines[2].contains("\"pooled_runs\""), "{}", lines[2]);
}
