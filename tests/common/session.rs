//! Session requests for the session tests (tests/serve/session_rich.rs): each on a fresh
//! connection as the test's own uid (root, which every server admits), with the checks
//! every such test makes; the command line's `brig session` against a server; a readable
//! copy of a client.

use super::serve::Server;
// Shared with the other session tests (tests/common/serve.rs): one definition each.
#[allow(unused_imports)]
pub use super::serve::{ask, client_copy, close_session, create_session};
use super::*;
use serde_json::{Value, json};

/// `message` with the fields of `extra` on top.
pub fn with(mut message: Value, extra: Value) -> Value {
    for (key, value) in extra.as_object().into_iter().flatten() {
        message[key] = value.clone();
    }
    message
}

/// A code cell's reply, which must be an exec's.
pub fn code_cell(server: &Server, id: &str, code: &str, extra: Value) -> Value {
    let message = json!({"type": "session_exec", "session": id, "code": code});
    let reply = ask(server, with(message, extra));
    assert_eq!(reply["type"], "exec", "{reply}");
    reply
}

/// A one-line `bad_input` error that says `needle`.
pub fn assert_bad_input(reply: &Value, needle: &str) {
    assert_eq!(reply["type"], "error", "{reply}");
    let message = reply["message"].as_str().unwrap();
    assert!(message.contains(needle), "{needle:?} not in {message:?}");
    assert!(!message.contains('\n'), "{message:?}");
    assert_eq!(reply["kind"], "bad_input", "{reply}");
    assert_eq!(reply["exit_code"], 125, "{reply}");
}

/// `brig session SUBCOMMAND --server S --session ID ARGS...` as `mode`'s user.
pub fn session_cli(mode: Mode, server: &Server, id: &str, args: &[&str]) -> Output {
    let mut all = vec!["session"];
    all.extend_from_slice(&args[..1]);
    all.extend_from_slice(&["--server", server.socket(), "--session", id]);
    all.extend_from_slice(&args[1..]);
    run(mode, &all)
}

/// The output of `script` run as `mode`'s user with a readable copy of the `client`
/// (`python`: the script gets the socket as sys.argv[1], the client on PYTHONPATH; `node`:
/// the client module's path as process.argv[1], the socket as process.argv[2]).
pub fn client_script(mode: Mode, client: &str, script: &str, server: &Server) -> Output {
    let copy = client_copy(client);
    let module = copy.path().join(client);
    let output = if client == "python" {
        let mut command = command_as(
            mode,
            interpreter("python3"),
            &["-c", script, server.socket()],
        );
        command.env("PYTHONPATH", &module);
        output_of(command)
    } else {
        let args = [
            "-e",
            script,
            "--",
            module.to_str().unwrap(),
            server.socket(),
        ];
        output_of(command_as(mode, interpreter("node"), &args))
    };
    drop(copy);
    output
}

/// A client script's output, line by line, after it succeeded.
pub fn assert_output_lines(output: &Output, expected: &[&str]) {
    let out = assert_success(output);
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(lines, expected, "{}", describe(output));
}
