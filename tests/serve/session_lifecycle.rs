//! `session_pause`, `session_resume` and `session_stats` (docs/protocol.md) through the
//! Python and Node clients and `brig session pause|resume|stats`, as root and rootless.
//! A paused session outlives its first `session_timeout` and `idle_timeout`: it is still
//! there, paused, after a session created later with the same timeout has ended at its
//! own (no timed assertion: that later session's end is the condition), and it resumes
//! where it was. Where the session's jail has no cgroup (rootless on a host that
//! delegates none) the pause is refused with one line naming why and the fix, and the
//! session's stats show no cgroup counters.

use crate::common;

use common::serve::{Server, client_copy, run_node_client};
use common::*;

both_modes!(
    python_client_pauses_past_the_timeouts,
    node_client_and_cli_pause_resume_and_stat,
);

const PYTHON_PAUSE: &str = r#"
import json, sys, time
import brig_client
socket = sys.argv[1]
show = lambda *values: print(json.dumps(list(values)))
count = lambda sb: int(sb.files.read("counter").strip() or 0) if sb.files.exists("counter") else 0

def wait_for(done):
    # Polled gently: a client hammering the runner would starve the jail on a busy host.
    while not done():
        time.sleep(0.005)

sb = brig_client.Sandbox(socket=socket, session_timeout="20s", idle_timeout="20s")
# A session with the same timeout created after it ends after its first end.
later = brig_client.Sandbox(socket=socket, session_timeout="20s")
sb.commands.run("i=0; while true; do i=$((i+1)); echo $i > c.new; mv c.new counter; sleep 0.01; done", background=True)
wait_for(lambda: count(sb) >= 3)
try:
    show(sb.pause())
except brig_client.BrigError as error:
    show("refused", error.kind, "cannot be paused" in error.message and "\n" not in error.message,
         sb.stats()["cpu_usec"])
    sb.close()
    later.close()
    sys.exit(0)
frozen = count(sb)
stats = sb.stats()
show(stats["state"], stats["cpu_usec"] is not None, stats["workspace_size"] > 0)
# Refused while paused: what needs the jail's processes.
try:
    sb.commands.run("true")
    show("ran")
except brig_client.BrigError as error:
    show(error.kind, "is paused" in error.message)
# The later session ends at its own end, past the paused one's first.
wait_for(lambda: all(s["session"] != later.session_id for s in brig_client.list_sessions(socket)))
listed = {s["session"]: s for s in brig_client.list_sessions(socket)}
mine = listed[sb.session_id]
show(mine["state"], mine["idle_deadline_ms"], count(sb) == frozen)
show(sb.pause())
# A timeout set while paused runs from the resume.
sb.set_timeout("20s")
before = time.time() * 1000
resumed = sb.resume()
show(resumed["already"], resumed["paused_ms"] > 0, resumed["ends_at_ms"] >= before + 20000 - 1)
wait_for(lambda: count(sb) > frozen + 3)
show(sb.commands.run("echo back").stdout, sb.resume()["already"])
sb.close()
"#;

fn python_client_pauses_past_the_timeouts(mode: Mode) {
    let server = Server::start(mode, &[]);
    let client = client_copy("python");
    let mut command = command_as(
        mode,
        interpreter("python3"),
        &["-c", PYTHON_PAUSE, server.socket()],
    );
    command.env("PYTHONPATH", client.path().join("python"));
    let output = output_of(command);
    let out = assert_success(&output);
    let lines: Vec<&str> = out.lines().collect();
    if lines.first() == Some(&r#"["refused", "host_lacks", true, null]"#) {
        // Only where the jail has no cgroup (its stats: no CPU counter), never as root.
        assert_eq!(mode, Mode::Rootless, "{}", describe(&output));
        return;
    }
    assert_eq!(
        lines,
        [
            "[false]",
            r#"["paused", true, true]"#,
            r#"["busy", true]"#,
            r#"["paused", null, true]"#,
            "[true]",
            r#"[false, true, true]"#,
            r#"["back\n", true]"#,
        ],
        "{}",
        describe(&output)
    );
}

const NODE_PAUSE: &str = r#"
const brig = require(process.argv[1]);
const socket = process.argv[2];
const show = (...values) => console.log(JSON.stringify(values));
(async () => {
  const sb = await brig.Sandbox.create({ socket });
  const stats = await sb.stats();
  show(stats.state, stats.cpus > 0, stats.workspace_size > 0);
  try {
    show(await sb.pause(), await sb.pause());
    const resumed = await sb.resume();
    show(resumed.already, (await sb.resume()).already);
  } catch (error) {
    show("refused", error.message.includes("cannot be paused"), stats.cpu_usec);
  }
  console.log(sb.sessionId);
})().catch((error) => { console.error(error); process.exit(1); });
"#;

fn node_client_and_cli_pause_resume_and_stat(mode: Mode) {
    if !require_program("node", "apt install nodejs") {
        return;
    }
    let server = Server::start(mode, &[]);
    let output = run_node_client(mode, NODE_PAUSE, server.socket());
    let out = assert_success(&output);
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(
        lines[0],
        r#"["running",true,true]"#,
        "{}",
        describe(&output)
    );
    let freezable = lines[1] != r#"["refused",true,null]"#;
    if freezable {
        assert_eq!(&lines[1..3], [r#"[false,true]"#, r#"[false,true]"#]);
    } else {
        assert_eq!(mode, Mode::Rootless, "{}", describe(&output));
    }
    let id = lines.last().unwrap();
    let cli = |verb: &str| {
        run(
            mode,
            &[
                "session",
                verb,
                "--server",
                server.socket(),
                "--session",
                id,
            ],
        )
    };
    let stats = assert_success(&cli("stats"));
    let stats: serde_json::Value = serde_json::from_str(&stats).expect("stats as JSON");
    assert_eq!(stats["state"], "running", "{stats}");
    let paused = cli("pause");
    if freezable {
        assert_eq!(assert_success(&paused), format!("session {id} paused\n"));
        assert_eq!(
            assert_success(&cli("pause")),
            format!("session {id} was paused already\n")
        );
        let stats = assert_success(&cli("stats"));
        assert!(stats.contains(r#""state":"paused""#), "{stats}");
        let resumed = assert_success(&cli("resume"));
        assert!(
            resumed.starts_with(&format!("session {id} resumed after ")),
            "{resumed}"
        );
        assert_eq!(
            assert_success(&cli("resume")),
            format!("session {id} was not paused\n")
        );
    } else {
        assert_one_line_error(&paused, &["cannot be paused", "cgroup"]);
    }
}
