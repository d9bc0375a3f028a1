//! A session's commands and cells are watched by the one engine (jail::Output,
//! jail::outcome), for real, as root and rootless: the output limit holds for stdout and
//! stderr together; brig's deadline decides a cell's end whatever the cell then says; a
//! command or cell whose client leaves is stopped, and its audit line says so (not a
//! timeout); each verdict names its session and what ran (a cell's language and context,
//! a command's pid) as typed fields.

use crate::common;

use common::serve::{Server, ask, close_session as close, create_session as create, send_frame};
use common::session::with;
use common::*;
use serde_json::{Value, json};
use std::os::unix::net::UnixStream;
use std::time::Duration;

both_modes!(
    the_output_limit_holds_for_stdout_and_stderr_together,
    a_cell_past_its_time_limit_is_a_timeout_whatever_it_says,
    an_exec_whose_client_leaves_is_stopped,
);

/// 600 bytes on stdout, then 600 on stderr.
const BOTH_STREAMS: &str =
    "head -c 600 /dev/zero | tr '\\0' a; head -c 600 /dev/zero | tr '\\0' b >&2; sleep 300";

fn exec(server: &Server, id: &str, fields: Value) -> Value {
    let reply = ask(
        server,
        with(json!({"type": "session_exec", "session": id}), fields),
    );
    assert_eq!(reply["type"], "exec", "{reply}");
    reply
}

/// A limit of 1000 bytes: 600 of stdout and 400 of stderr are kept, the rest cut and
/// the jail's program killed (a limit per stream would keep both whole and wait for the
/// sleep). The same for a command and a bash cell; each verdict says the cap that held
/// and why it ended, and names what ran.
fn the_output_limit_holds_for_stdout_and_stderr_together(mode: Mode) {
    let server = Server::start(mode, &["--pool", "0"]);
    let id = create(&server, json!({}));
    let command = exec(
        &server,
        &id,
        json!({"command": ["sh", "-c", BOTH_STREAMS], "output_limit": "1000"}),
    );
    let cell = exec(
        &server,
        &id,
        json!({"code": BOTH_STREAMS, "language": "bash", "output_limit": "1000"}),
    );
    for reply in [&command, &cell] {
        let verdict = &reply["verdict"];
        assert_eq!(verdict["status"], "output_limit", "{reply}");
        assert_eq!(verdict["brig_exit_code"], 124, "{reply}");
        assert_eq!(verdict["output_truncated"], true, "{reply}");
        // The cap that held, and the line brig prints for it.
        assert_eq!(verdict["limits"]["output_limit_bytes"], 1000, "{reply}");
        let explanation = verdict["explanation"].as_str().unwrap_or_default();
        assert!(explanation.contains("output limit of"), "{reply}");
        assert_eq!(reply["stdout"], "a".repeat(600), "{reply}");
        assert_eq!(reply["stderr"], "b".repeat(400), "{reply}");
        assert_eq!(verdict["stdout_bytes"], 600, "{reply}");
        assert!(verdict["stderr_bytes"].as_u64().unwrap() > 400, "{reply}");
        assert_eq!(verdict["session"], id.as_str(), "{reply}");
    }
    // A command's verdict has its pid (a number: the jail said it), no language; a
    // cell's its language and context, no pid.
    let verdict = command["verdict"].as_object().unwrap();
    assert!(
        verdict["pid"].as_u64().is_some_and(|pid| pid > 1),
        "{command}"
    );
    assert!(!verdict.contains_key("language") && !verdict.contains_key("context"));
    let verdict = cell["verdict"].as_object().unwrap();
    assert_eq!(verdict["language"], "bash", "{cell}");
    assert_eq!(verdict["context"], cell["context"], "{cell}");
    assert!(!verdict.contains_key("pid"), "{cell}");
    close(&server, &id);
}

/// A cell that swallows the interrupt at its time limit and returns normally still ran
/// out of time: brig's clock decides, not what the cell says after it. Its state is kept.
fn a_cell_past_its_time_limit_is_a_timeout_whatever_it_says(mode: Mode) {
    let server = Server::start(mode, &["--pool", "0"]);
    let id = create(&server, json!({}));
    let code = "kept = 1\ntry:\n    while True: pass\nexcept KeyboardInterrupt:\n    pass\n'fine'";
    let reply = exec(&server, &id, json!({"code": code, "time_limit": "300ms"}));
    let verdict = &reply["verdict"];
    assert_eq!(verdict["status"], "timeout", "{reply}");
    assert_eq!(verdict["brig_exit_code"], 124, "{reply}");
    assert_eq!(verdict["exit_code"], Value::Null, "{reply}");
    assert_eq!(reply["state_lost"], false, "{reply}");
    let after = exec(&server, &id, json!({"code": "kept"}));
    assert_eq!(after["result"], "1", "{after}");
    close(&server, &id);
}

/// A client that sends an exec and hangs up: nobody waits for the result, so brig stops
/// it — the command is killed (its audit line: signaled by SIGKILL, 137, not a timeout),
/// the endless cell interrupted (its audit line: the interrupt it reported, exit 1) —
/// and the session serves the next request.
fn an_exec_whose_client_leaves_is_stopped(mode: Mode) {
    let dir = TempDir::new("session-engine-audit").writable_by_all();
    let log = dir.path().join("audit.log");
    let server = Server::start(mode, &["--pool", "0", "--audit-log", log.to_str().unwrap()]);
    let id = create(&server, json!({}));
    let lines = || -> Vec<Value> {
        std::fs::read_to_string(&log)
            .unwrap_or_default()
            .lines()
            .map(|line| serde_json::from_str(line).unwrap())
            .collect()
    };
    let started = |name: &str| {
        let stat = json!({"type": "session_stat", "session": id, "path": name});
        ask(&server, stat)["type"] == "stat"
    };
    for (request, mark, count) in [
        (
            json!({"command": ["sh", "-c", "touch command; exec sleep 300"]}),
            "command",
            1,
        ),
        (
            json!({"code": "open('cell', 'w').close()\nwhile True: pass"}),
            "cell",
            2,
        ),
    ] {
        let message = with(
            json!({"brig": 1, "type": "session_exec", "session": id}),
            request.clone(),
        );
        let stream = UnixStream::connect(server.socket()).unwrap();
        send_frame(&stream, message.to_string().as_bytes(), &[]);
        // Hung up once it runs (the session serves a stat meanwhile).
        assert!(wait_until(Duration::from_secs(30), || started(mark)));
        drop(stream);
        assert!(
            wait_until(Duration::from_secs(30), || lines().len() == count),
            "no audit line for {request}: {:?}",
            lines()
        );
    }
    let lines = lines();
    let command = &lines[0]["verdict"];
    assert_eq!(command["status"], "signaled", "{command}");
    assert_eq!(command["signal"], 9, "{command}");
    assert_eq!(command["brig_exit_code"], 137, "{command}");
    assert_eq!(command["session"], id.as_str(), "{command}");
    assert!(command["pid"].as_u64().is_some(), "{command}");
    let cell = &lines[1]["verdict"];
    assert_eq!(cell["status"], "nonzero_exit", "{cell}");
    assert_eq!(cell["exit_code"], 1, "{cell}");
    assert_eq!(cell["language"], "python", "{cell}");
    let after = exec(&server, &id, json!({"command": ["echo", "still"]}));
    assert_eq!(after["stdout"], "still\n", "{after}");
    close(&server, &id);
}
