//! Rich outputs, contexts and the bash context of `brig serve` sessions, for real, as root
//! and rootless: a matplotlib figure comes back as a PNG without savefig; a pandas
//! DataFrame as its HTML table and text (protocol and both clients); display() of
//! html, markdown, svg and json; the final value's bundle; Node's display(); several
//! independent interpreters per session (create, list, restart, remove, a cap; what a
//! removed, restarted or dead interpreter started goes with it; a cell's time limit spares
//! the other contexts); a
//! persistent bash (cwd, variables, functions, exit status, interrupt); a reply forged by
//! bash-run code is not taken; results count against the output limit; bad input is a
//! one-line error.

use crate::common;

use common::serve::Server;
use common::session::*;
use common::*;
use serde_json::{Value, json};

both_modes!(
    a_matplotlib_figure_comes_back_as_png,
    display_gives_mime_bundles,
    node_display_and_final_value,
    contexts_are_independent_interpreters,
    an_ended_context_takes_its_process_group,
    a_dead_interpreter_takes_its_process_group,
    a_cell_s_time_limit_spares_the_other_contexts,
    contexts_are_capped_and_checked,
    a_bash_context_keeps_its_state,
    a_bash_cell_is_interrupted_at_its_time_limit,
    a_forged_reply_from_bash_is_not_taken,
    results_count_against_the_output_limit,
    python_client_rich_outputs_and_contexts,
    node_client_rich_outputs_and_contexts,
    the_command_line_shows_rich_results,
    contexts_count_against_the_session_s_pids,
);

fn context(server: &Server, id: &str, action: &str, extra: Value) -> Value {
    let message = json!({"type": "session_context", "session": id, "action": action});
    ask(server, with(message, extra))
}

fn results(reply: &Value) -> &Vec<Value> {
    reply["results"]
        .as_array()
        .unwrap_or_else(|| panic!("no results: {reply}"))
}

/// A PNG's width and height from its IHDR chunk, after checking its signature.
fn png_size(base64_png: &str) -> (u32, u32) {
    use base64::Engine;
    let png = base64::engine::general_purpose::STANDARD
        .decode(base64_png)
        .expect("base64");
    assert!(png.len() > 24, "{} bytes", png.len());
    assert_eq!(&png[..8], b"\x89PNG\r\n\x1a\n", "not a PNG signature");
    assert_eq!(&png[12..16], b"IHDR");
    let word = |at: usize| u32::from_be_bytes(png[at..at + 4].try_into().unwrap());
    (word(16), word(20))
}

/// Whether the system's python3 (the jail's) imports `module`.
fn has_python_module(module: &str) -> bool {
    std::process::Command::new("/usr/bin/python3")
        .args(["-c", &format!("import {module}")])
        .stderr(std::process::Stdio::null())
        .status()
        .is_ok_and(|status| status.success())
}

fn a_matplotlib_figure_comes_back_as_png(mode: Mode) {
    if !require(
        "python3's matplotlib",
        "apt-get install python3-matplotlib",
        has_python_module("matplotlib"),
    ) {
        return;
    }
    let server = Server::start(mode, &["--pool", "0"]);
    let id = create_session(&server, json!({}));
    // Open at the end of the cell, never saved: it comes back, 640x480 at 100 dpi.
    let drawn = code_cell(
        &server,
        &id,
        "import matplotlib.pyplot as plt\nplt.plot([1, 2, 3], [4, 1, 9])\nplt.title('t')\nNone",
        json!({}),
    );
    assert_eq!(drawn["verdict"]["status"], "ok", "{drawn}");
    let figures = results(&drawn);
    assert_eq!(figures.len(), 1, "{drawn}");
    assert_eq!(figures[0]["is_main_result"], false, "{drawn}");
    assert_eq!(
        png_size(figures[0]["image/png"].as_str().unwrap()),
        (640, 480)
    );
    assert!(
        figures[0]["text/plain"]
            .as_str()
            .unwrap()
            .contains("Figure")
    );
    // Closed once shown: the next cell has none; plt.show() twice gives two figures.
    let after = code_cell(&server, &id, "len(plt.get_fignums())", json!({}));
    assert_eq!(after["result"], "0", "{after}");
    let shown = code_cell(
        &server,
        &id,
        "for size in (2, 3):\n    plt.figure(figsize=(size, 1))\n    plt.plot([1, 2])\n    plt.show()",
        json!({}),
    );
    let sizes: Vec<(u32, u32)> = results(&shown)
        .iter()
        .map(|bundle| png_size(bundle["image/png"].as_str().unwrap()))
        .collect();
    assert_eq!(sizes, [(200, 100), (300, 100)], "{shown}");
    assert_eq!(shown["stderr"], "", "{shown}");
    // A cell that raises still shows what it drew, as a notebook does.
    let raised = code_cell(&server, &id, "plt.plot([1, 2])\n1 / 0", json!({}));
    assert_eq!(raised["error"]["type"], "ZeroDivisionError", "{raised}");
    assert_eq!(results(&raised).len(), 1, "{raised}");
    assert!(results(&raised)[0]["image/png"].is_string(), "{raised}");
    // A figure as the final value is the main result, and comes back once.
    let value = code_cell(&server, &id, "plt.figure(figsize=(1, 1))", json!({}));
    let bundles = results(&value);
    assert_eq!(bundles.len(), 1, "{value}");
    assert_eq!(bundles[0]["is_main_result"], true, "{value}");
    assert_eq!(
        png_size(bundles[0]["image/png"].as_str().unwrap()),
        (100, 100)
    );
    close_session(&server, &id);
}

fn display_gives_mime_bundles(mode: Mode) {
    let server = Server::start(mode, &["--pool", "0"]);
    let id = create_session(&server, json!({}));
    let code = r#"
class Page:
    def _repr_html_(self):
        return "<b>bold</b>"
    def _repr_markdown_(self):
        return "**bold**"
class Picture:
    def _repr_svg_(self):
        return "<svg xmlns='http://www.w3.org/2000/svg'/>"
class Both:
    def _repr_mimebundle_(self, include=None, exclude=None):
        return {"text/html": "<i>x</i>", "application/json": {"a": [1, 2]}}
class Broken:
    def _repr_html_(self):
        raise RuntimeError("no")
class Odd:
    def __getattr__(self, name):
        raise KeyError(name)
    def __repr__(self):
        return "odd"
display(Page(), Picture())
display(Both())
display(Broken())
display({"k": [1, None]}, Odd())
print("printed")
{"answer": 42}
"#;
    let reply = code_cell(&server, &id, code, json!({}));
    assert_eq!(reply["verdict"]["status"], "ok", "{reply}");
    assert_eq!(reply["stdout"], "printed\n", "{reply}");
    let bundles = results(&reply);
    assert_eq!(bundles.len(), 7, "{reply}");
    assert_eq!(bundles[0]["text/html"], "<b>bold</b>");
    assert_eq!(bundles[0]["text/markdown"], "**bold**");
    assert!(
        bundles[0]["text/plain"]
            .as_str()
            .unwrap()
            .contains("Page object")
    );
    assert_eq!(
        bundles[1]["image/svg+xml"],
        "<svg xmlns='http://www.w3.org/2000/svg'/>"
    );
    assert_eq!(bundles[2]["text/html"], "<i>x</i>");
    assert_eq!(bundles[2]["application/json"], json!({"a": [1, 2]}));
    // A failing _repr_html_ adds nothing; the repr is still there.
    assert!(bundles[3].get("text/html").is_none(), "{reply}");
    assert!(
        bundles[3]["text/plain"]
            .as_str()
            .unwrap()
            .contains("Broken")
    );
    assert_eq!(bundles[4]["application/json"], json!({"k": [1, null]}));
    // An object whose __getattr__ raises: its repr.
    assert_eq!(bundles[5]["text/plain"], "odd");
    for bundle in &bundles[..6] {
        assert_eq!(bundle["is_main_result"], false, "{reply}");
    }
    // The final value: its bundle, the main result; `result` as before.
    assert_eq!(bundles[6]["is_main_result"], true);
    assert_eq!(bundles[6]["text/plain"], "{'answer': 42}");
    assert_eq!(bundles[6]["application/json"], json!({"answer": 42}));
    assert_eq!(reply["result"], "{'answer': 42}");
    // Cells written for a notebook: IPython.display's classes (brig's, without IPython).
    let notebook = code_cell(
        &server,
        &id,
        "from IPython.display import display, HTML, Markdown, SVG\ndisplay(HTML('<p>h</p>'), Markdown('*m*'))\nSVG('<svg/>')",
        json!({}),
    );
    let bundles = results(&notebook);
    assert_eq!(bundles.len(), 3, "{notebook}");
    assert_eq!(bundles[0]["text/html"], "<p>h</p>");
    assert_eq!(bundles[1]["text/markdown"], "*m*");
    assert_eq!(bundles[2]["image/svg+xml"], "<svg/>");
    assert_eq!(bundles[2]["is_main_result"], true);
    // Text that is not UTF-8 (a lone surrogate) is written out, not a broken reply.
    let odd = code_cell(
        &server,
        &id,
        "display({'text/html': 'a\\udc80b'}, raw=True)",
        json!({}),
    );
    assert_eq!(results(&odd)[0]["text/html"], "a\\udc80b", "{odd}");
    assert_eq!(odd["state_lost"], false, "{odd}");
    // A statement last: no main result, no results at all.
    let quiet = code_cell(&server, &id, "x = 1", json!({}));
    assert_eq!(quiet["results"], json!([]), "{quiet}");
    // A repr that raises is the cell's error, as before.
    let bad_repr = "class R:\n    def __repr__(self):\n        raise ValueError('no repr')\nR()";
    let failed = code_cell(&server, &id, bad_repr, json!({}));
    assert_eq!(failed["error"]["type"], "ValueError", "{failed}");
    assert_eq!(failed["state_lost"], false, "{failed}");
    // An error: what was displayed before it still comes back.
    let failed = code_cell(&server, &id, "display(1)\n1 / 0", json!({}));
    assert_eq!(failed["error"]["type"], "ZeroDivisionError", "{failed}");
    assert_eq!(results(&failed).len(), 1, "{failed}");
    assert_eq!(results(&failed)[0]["text/plain"], "1");
    close_session(&server, &id);
}

fn node_display_and_final_value(mode: Mode) {
    if !require_program("node", "apt install nodejs") {
        return;
    }
    let server = Server::start(mode, &["--pool", "0"]);
    let id = create_session(&server, json!({}));
    let node = json!({"language": "node"});
    let code = r#"
display({ 'text/html': '<p>hi</p>', 'text/plain': 'hi' });
display({ _repr_html_() { return '<em>x</em>'; }, _repr_markdown_: () => '*x*' });
display([1, 2]);
display(new Proxy({}, { get() { throw new Error('no'); } }));
({ a: 1, b: [true, null] })
"#;
    let reply = code_cell(&server, &id, code, node.clone());
    assert_eq!(reply["verdict"]["status"], "ok", "{reply}");
    let bundles = results(&reply);
    assert_eq!(bundles.len(), 5, "{reply}");
    assert_eq!(bundles[0]["text/html"], "<p>hi</p>");
    assert_eq!(bundles[0]["text/plain"], "hi");
    assert_eq!(bundles[1]["text/html"], "<em>x</em>");
    assert_eq!(bundles[1]["text/markdown"], "*x*");
    assert_eq!(bundles[2]["application/json"], json!([1, 2]));
    // An object whose every property throws: its inspection.
    assert!(bundles[3]["text/plain"].is_string(), "{reply}");
    assert_eq!(bundles[4]["is_main_result"], true);
    assert_eq!(
        bundles[4]["application/json"],
        json!({"a": 1, "b": [true, null]})
    );
    assert_eq!(bundles[4]["text/plain"], reply["result"]);
    // Text that is not UTF-8 (a lone surrogate) is written out, not a broken reply.
    let odd = code_cell(
        &server,
        &id,
        "display({ 'text/html': 'a\\udc80b' })",
        json!({"language": "node"}),
    );
    assert_eq!(results(&odd)[0]["text/html"], "a\\udc80b", "{odd}");
    assert_eq!(odd["state_lost"], false, "{odd}");
    // A value JSON cannot hold: text only.
    let function = code_cell(&server, &id, "(function f() {})", node);
    let bundles = results(&function);
    assert_eq!(bundles.len(), 1, "{function}");
    assert!(bundles[0].get("application/json").is_none(), "{function}");
    assert_eq!(bundles[0]["text/plain"], "[Function: f]");
    close_session(&server, &id);
}

fn contexts_are_independent_interpreters(mode: Mode) {
    let server = Server::start(mode, &["--pool", "0"]);
    let id = create_session(&server, json!({}));
    let one = context(&server, &id, "create", json!({"language": "python"}));
    assert_eq!(one["type"], "context", "{one}");
    let one = one["context"]["id"].as_str().unwrap().to_string();
    let two = context(&server, &id, "create", json!({"cwd": "/tmp"}));
    assert_eq!(two["context"]["cwd"], "/tmp", "{two}");
    let two = two["context"]["id"].as_str().unwrap().to_string();
    assert_ne!(one, two);
    code_cell(&server, &id, "x = 'one'", json!({"context": one}));
    code_cell(&server, &id, "x = 'two'", json!({"context": two}));
    code_cell(&server, &id, "x = 'default'", json!({}));
    for (at, expected) in [
        (Some(&one), "'one'"),
        (Some(&two), "'two'"),
        (None, "'default'"),
    ] {
        let extra = at.map_or(json!({}), |at| json!({"context": at}));
        let reply = code_cell(&server, &id, "x", extra);
        assert_eq!(reply["result"], expected, "{reply}");
        assert_eq!(reply["verdict"]["context"], reply["context"], "{reply}");
    }
    // Each its own process, in its own working directory.
    let pid = |at: &str| {
        code_cell(
            &server,
            &id,
            "import os; os.getpid()",
            json!({"context": at}),
        )["result"]
            .clone()
    };
    assert_ne!(pid(&one), pid(&two));
    let cwd = code_cell(&server, &id, "os.getcwd()", json!({"context": two}));
    assert_eq!(cwd["result"], "'/tmp'", "{cwd}");
    // Listed: the default context that runs, and both created ones.
    let listed = context(&server, &id, "list", json!({}));
    let ids: Vec<&str> = listed["contexts"]
        .as_array()
        .unwrap()
        .iter()
        .map(|context| context["id"].as_str().unwrap())
        .collect();
    assert_eq!(ids, ["python", one.as_str(), two.as_str()], "{listed}");
    // Restart: a fresh interpreter; the other contexts keep theirs.
    let restarted = context(&server, &id, "restart", json!({"context": one}));
    assert_eq!(restarted["type"], "context", "{restarted}");
    let gone = code_cell(&server, &id, "x", json!({"context": one}));
    assert_eq!(gone["error"]["type"], "NameError", "{gone}");
    assert_eq!(
        code_cell(&server, &id, "x", json!({"context": two}))["result"],
        "'two'"
    );
    // Remove: the context is gone with its interpreter (and what it started in its
    // process group), its cells are refused.
    let started = code_cell(
        &server,
        &id,
        "import os, subprocess; child = subprocess.Popen(['sleep', '600']); (os.getpid(), child.pid)",
        json!({"context": one}),
    );
    let pids = started["result"]
        .as_str()
        .unwrap()
        .trim_matches(['(', ')'])
        .replace(' ', "");
    let removed = context(&server, &id, "remove", json!({"context": one}));
    assert_eq!(removed["type"], "context_removed", "{removed}");
    let left = still_there(&server, &id, &pids, json!({"context": two}));
    assert_eq!(left, "[False, False]");
    let refused = ask(
        &server,
        json!({"type": "session_exec", "session": id, "code": "x", "context": one}),
    );
    assert_bad_input(&refused, "no context");
    assert_eq!(
        code_cell(&server, &id, "x", json!({"context": two}))["result"],
        "'two'"
    );
    close_session(&server, &id);
}

/// Which of `pids` (comma-separated) still run in the session's jail, as a Python list of
/// booleans, asked in the context `at`: killed processes are gone once the jail's init has
/// reaped them (it looks again until then, at most 10 s).
fn still_there(server: &Server, id: &str, pids: &str, at: Value) -> String {
    let code = format!(
        "import os, time\nfor _ in range(200):\n    if not any(os.path.exists(f'/proc/{{p}}') for p in ({pids},)):\n        break\n    time.sleep(0.05)\n[os.path.exists(f'/proc/{{p}}') for p in ({pids},)]"
    );
    let reply = code_cell(server, id, &code, at);
    reply["result"]
        .as_str()
        .unwrap_or_else(|| panic!("no result: {reply}"))
        .to_string()
}

/// A cell of context `at` that starts `sleep 600` in the background: the interpreter's pid
/// and the sleep's, comma-separated.
fn start_a_sleep(server: &Server, id: &str, at: Value) -> String {
    let started = code_cell(
        server,
        id,
        "import os, subprocess; child = subprocess.Popen(['sleep', '600']); (os.getpid(), child.pid)",
        at,
    );
    started["result"]
        .as_str()
        .unwrap_or_else(|| panic!("no result: {started}"))
        .trim_matches(['(', ')'])
        .replace(' ', "")
}

/// Removing or restarting a context ends what its cells started (the interpreter's process
/// group), every time. brig signals the group, then closes the interpreter's socket, at
/// which the interpreter exits; when the jail's init reaped it before it read the signal,
/// it used to drop the signal and the sleep lived on. Repeated: that order is the
/// scheduler's.
fn an_ended_context_takes_its_process_group(mode: Mode) {
    let server = Server::start(mode, &["--pool", "0"]);
    let id = create_session(&server, json!({}));
    for round in 0..10 {
        let made = context(&server, &id, "create", json!({}));
        let at = made["context"]["id"].as_str().unwrap().to_string();
        let pids = start_a_sleep(&server, &id, json!({"context": at}));
        let action = if round % 2 == 0 { "remove" } else { "restart" };
        let done = context(&server, &id, action, json!({"context": at}));
        assert!(
            ["context_removed", "context"].contains(&done["type"].as_str().unwrap()),
            "{done}"
        );
        let left = still_there(&server, &id, &pids, json!({}));
        assert_eq!(
            left, "[False, False]",
            "round {round}: {action} left {pids}"
        );
        if action == "restart" {
            context(&server, &id, "remove", json!({"context": at}));
        }
    }
    close_session(&server, &id);
}

/// An interpreter that dies, in a cell or between cells, takes what its cells started
/// with it (its process group), as a removed one does: Python, and bash.
fn a_dead_interpreter_takes_its_process_group(mode: Mode) {
    let server = Server::start(mode, &["--pool", "0"]);
    let id = create_session(&server, json!({}));
    // In a cell: the reply says the state is lost; the sleep is gone.
    let died = code_cell(
        &server,
        &id,
        "import os, subprocess\nchild = subprocess.Popen(['sleep', '600'])\nprint(child.pid, flush=True)\nos._exit(3)",
        json!({}),
    );
    assert_eq!(died["state_lost"], true, "{died}");
    let sleep = died["stdout"].as_str().unwrap().trim().to_string();
    assert_eq!(still_there(&server, &id, &sleep, json!({})), "[False]");
    // Between cells: a context whose interpreter exits after its reply.
    let made = context(&server, &id, "create", json!({}));
    let at = made["context"]["id"].as_str().unwrap().to_string();
    let pids = start_a_sleep(&server, &id, json!({"context": at}));
    let exits = code_cell(
        &server,
        &id,
        "import os, threading; threading.Timer(0.2, os._exit, [0]).start()",
        json!({"context": at}),
    );
    assert_eq!(exits["verdict"]["status"], "ok", "{exits}");
    assert_eq!(
        still_there(&server, &id, &pids, json!({})),
        "[False, False]"
    );
    // Bash: a job in the background, then the shell exits.
    let died = code_cell(
        &server,
        &id,
        "sleep 600 &\necho $!\nexit 3",
        json!({"language": "bash"}),
    );
    assert_eq!(died["state_lost"], true, "{died}");
    let sleep = died["stdout"].as_str().unwrap().trim().to_string();
    assert!(sleep.parse::<u32>().is_ok(), "{died}");
    assert_eq!(still_there(&server, &id, &sleep, json!({})), "[False]");
    close_session(&server, &id);
}

/// A cell interrupted at its time limit ends what the session's cells started, but not
/// the other contexts' interpreters (their state stays).
fn a_cell_s_time_limit_spares_the_other_contexts(mode: Mode) {
    let server = Server::start(mode, &["--pool", "0"]);
    let id = create_session(&server, json!({}));
    let made = context(&server, &id, "create", json!({}));
    let other = made["context"]["id"].as_str().unwrap().to_string();
    code_cell(&server, &id, "x = 'kept'", json!({"context": other}));
    // Interrupted, and then (it ignores the interruption) killed and restarted.
    for code in [
        "import time; time.sleep(600)",
        "import signal, time\nsignal.signal(signal.SIGINT, signal.SIG_IGN)\ntime.sleep(600)",
    ] {
        let cut = code_cell(&server, &id, code, json!({"time_limit": "1s"}));
        assert_eq!(cut["verdict"]["status"], "timeout", "{cut}");
        let kept = code_cell(&server, &id, "x", json!({"context": other}));
        assert_eq!(kept["result"], "'kept'", "{kept}");
        assert_eq!(kept["state_lost"], false, "{kept}");
    }
    close_session(&server, &id);
}

fn contexts_are_capped_and_checked(mode: Mode) {
    let server = Server::start(mode, &["--pool", "0"]);
    let id = create_session(&server, json!({}));
    // Bash contexts are the lightest interpreter to start 16 of.
    for _ in 0..16 {
        let made = context(&server, &id, "create", json!({"language": "bash"}));
        assert_eq!(made["type"], "context", "{made}");
    }
    let refused = context(&server, &id, "create", json!({"language": "bash"}));
    assert_bad_input(&refused, "16 contexts");
    // Bad input: each a one-line error naming the field, the session goes on.
    let mismatch = ask(
        &server,
        json!({"type": "session_exec", "session": id, "code": "1", "language": "python", "context": "ctx-1"}),
    );
    assert_bad_input(
        &mismatch,
        "language: context \"ctx-1\" runs bash, not python",
    );
    let unknown = ask(
        &server,
        json!({"type": "session_exec", "session": id, "code": "1", "context": "ctx-99"}),
    );
    assert_bad_input(&unknown, "context: no context \"ctx-99\"");
    assert_bad_input(
        &context(&server, &id, "restart", json!({})),
        "needs \"context\"",
    );
    assert_bad_input(
        &context(&server, &id, "remove", json!({"context": "nope"})),
        "no context",
    );
    let removed = context(&server, &id, "remove", json!({"context": "ctx-2"}));
    assert_eq!(removed["type"], "context_removed", "{removed}");
    assert_bad_input(
        &context(&server, &id, "create", json!({"cwd": "relative"})),
        "cwd",
    );
    let nul = ask(
        &server,
        json!({"type": "session_exec", "session": id, "code": "echo a\u{0}b", "context": "ctx-1"}),
    );
    assert_bad_input(&nul, "NUL");
    let bad_action = context(&server, &id, "explode", json!({}));
    assert_eq!(bad_action["type"], "error", "{bad_action}");
    assert_eq!(bad_action["exit_code"], 125, "{bad_action}");
    // After two removals there is room for two more.
    let removed = context(&server, &id, "remove", json!({"context": "ctx-3"}));
    assert_eq!(removed["type"], "context_removed", "{removed}");
    let made = context(&server, &id, "create", json!({"language": "bash"}));
    assert_eq!(made["context"]["id"], "ctx-17", "{made}");
    let last = context(&server, &id, "create", json!({"language": "bash"}));
    assert_eq!(last["context"]["id"], "ctx-18", "{last}");
    let full = context(&server, &id, "create", json!({"language": "bash"}));
    assert_bad_input(&full, "16 contexts");
    let ok = code_cell(&server, &id, "echo fine", json!({"context": "ctx-17"}));
    assert_eq!(ok["stdout"], "fine\n", "{ok}");
    close_session(&server, &id);
}

fn a_bash_context_keeps_its_state(mode: Mode) {
    let server = Server::start(mode, &["--pool", "0"]);
    let id = create_session(&server, json!({}));
    let bash = json!({"language": "bash"});
    let first = code_cell(
        &server,
        &id,
        "cd /tmp && mkdir -p here && cd here\nname=world\nexport SHOUT=loud\ngreet() { echo \"hello $1\"; }\necho started",
        bash.clone(),
    );
    assert_eq!(first["verdict"]["status"], "ok", "{first}");
    assert_eq!(first["stdout"], "started\n", "{first}");
    assert_eq!(first["context"], "bash", "{first}");
    let second = code_cell(
        &server,
        &id,
        "pwd; greet \"$name\"; sh -c 'echo $SHOUT'; echo oops >&2",
        bash.clone(),
    );
    assert_eq!(
        second["stdout"], "/tmp/here\nhello world\nloud\n",
        "{second}"
    );
    assert_eq!(second["stderr"], "oops\n", "{second}");
    // The status of the cell's last command is the verdict's exit code.
    let failed = code_cell(&server, &id, "true; (exit 3)", bash.clone());
    assert_eq!(failed["verdict"]["status"], "nonzero_exit", "{failed}");
    assert_eq!(failed["verdict"]["exit_code"], 3, "{failed}");
    assert_eq!(failed["error"], Value::Null, "{failed}");
    let not_found = code_cell(&server, &id, "no-such-command-here", bash.clone());
    assert_eq!(not_found["verdict"]["exit_code"], 127, "{not_found}");
    // A cell's own functions named as the shell's builtins leave its loop alone.
    let shadowing =
        "read() { echo mine; }; printf() { echo mine; }; source() { :; }; trap() { :; }";
    code_cell(&server, &id, shadowing, bash.clone());
    let after = code_cell(&server, &id, "read; echo $name", bash.clone());
    assert_eq!(after["stdout"], "mine\nworld\n", "{after}");
    assert_eq!(after["state_lost"], false, "{after}");
    // `exit` ends the shell: the next cell runs in a fresh one.
    let exited = code_cell(&server, &id, "exit 4", bash.clone());
    assert_eq!(exited["state_lost"], true, "{exited}");
    let fresh = code_cell(&server, &id, "echo \"[$name]\"", bash);
    assert_eq!(fresh["stdout"], "[]\n", "{fresh}");
    assert_eq!(fresh["state_lost"], false, "{fresh}");
    close_session(&server, &id);
}

fn a_bash_cell_is_interrupted_at_its_time_limit(mode: Mode) {
    let server = Server::start(mode, &["--pool", "0"]);
    let id = create_session(&server, json!({}));
    let bash = json!({"language": "bash"});
    code_cell(&server, &id, "kept=yes; cd /tmp", bash.clone());
    let limited = json!({"language": "bash", "time_limit": "1s"});
    // A command the cell waits for, then a loop in the shell itself.
    for code in [
        "sleep 60; echo not-reached",
        "while :; do :; done; echo not-reached",
    ] {
        let cut = code_cell(&server, &id, code, limited.clone());
        assert_eq!(cut["verdict"]["status"], "timeout", "{cut}");
        assert_eq!(cut["verdict"]["brig_exit_code"], 124, "{cut}");
        assert_eq!(cut["state_lost"], false, "{cut}");
        assert!(
            !cut["stdout"].as_str().unwrap().contains("not-reached"),
            "{cut}"
        );
        let after = code_cell(&server, &id, "echo $kept $PWD", bash.clone());
        assert_eq!(after["stdout"], "yes /tmp\n", "{after}");
    }
    // An output flood is cut the same way, the shell kept.
    let flood = json!({"language": "bash", "output_limit": "100K"});
    let cut = code_cell(&server, &id, "yes; echo not-reached", flood);
    assert_eq!(cut["verdict"]["status"], "output_limit", "{cut}");
    assert_eq!(cut["state_lost"], false, "{cut}");
    let after = code_cell(&server, &id, "echo $kept", bash.clone());
    assert_eq!(after["stdout"], "yes\n", "{after}");
    close_session(&server, &id);
}

/// Bash-run code writes a well-formed reply on every socket the shell holds (its copy of
/// the control socket, moved off descriptor 3 for the cell) and runs on: the reply is not
/// taken, since the kernel does not show the shell back in its read of descriptor 3.
fn a_forged_reply_from_bash_is_not_taken(mode: Mode) {
    let server = Server::start(mode, &["--pool", "0"]);
    let id = create_session(&server, json!({}));
    let bash = json!({"language": "bash"});
    code_cell(&server, &id, "kept=yes", bash.clone());
    let forge = r#"
for fd in /proc/$$/fd/*; do
  case "$(readlink "$fd")" in socket:*) printf '{"id":2,"exit_code":0}\n' >&"${fd##*/}" && echo forged ;; esac
done
sleep 60
"#;
    let forged = code_cell(
        &server,
        &id,
        forge,
        json!({"language": "bash", "time_limit": "1s"}),
    );
    assert_eq!(forged["stdout"], "forged\n", "{forged}");
    assert_eq!(forged["verdict"]["status"], "timeout", "{forged}");
    assert_eq!(forged["state_lost"], true, "{forged}");
    let reason = forged["state_lost_reason"].as_str().unwrap_or_default();
    assert!(reason.contains("did not go back to waiting"), "{forged}");
    // A child of the cell holds no descriptor of the socket to forge with.
    // Python's reply carries no status: one that does breaks the protocol.
    let forge_py = "import os, threading\nthreading.Timer(0.3, os.write, (3, b'{\"id\": 1, \"exit_code\": 0}\\n')).start()\nimport time; time.sleep(1)\n1";
    let forged = code_cell(&server, &id, forge_py, json!({}));
    assert_eq!(forged["state_lost"], true, "{forged}");
    let reason = forged["state_lost_reason"].as_str().unwrap_or_default();
    assert!(reason.contains("exit_code"), "{forged}");
    let child = code_cell(
        &server,
        &id,
        "sh -c 'for fd in /proc/self/fd/*; do readlink $fd; done' | grep -c socket",
        bash.clone(),
    );
    assert_eq!(child["stdout"], "0\n", "{child}");
    let after = code_cell(&server, &id, "echo \"[$kept]\"", bash);
    assert_eq!(after["stdout"], "[]\n", "{after}");
    close_session(&server, &id);
}

fn results_count_against_the_output_limit(mode: Mode) {
    let server = Server::start(mode, &["--pool", "0"]);
    let reply = ask(
        &server,
        json!({"type": "session_create", "options": {"output-limit": "8M"}}),
    );
    let id = reply["session"]
        .as_str()
        .unwrap_or_else(|| panic!("{reply}"))
        .to_string();
    // 3 results of 40 kB: two fit in 100 kB, the third is dropped with a clear error.
    let code = "for _ in range(3):\n    display({'text/html': 'x' * 40000}, raw=True)";
    let reply = code_cell(&server, &id, code, json!({"output_limit": "100K"}));
    assert_eq!(reply["verdict"]["status"], "output_limit", "{reply}");
    assert_eq!(results(&reply).len(), 2, "{reply}");
    assert_eq!(reply["error"]["type"], "OutputLimit", "{reply}");
    assert!(
        reply["error"]["message"]
            .as_str()
            .unwrap()
            .contains("1 result(s) of the cell were dropped"),
        "{reply}"
    );
    assert_eq!(reply["state_lost"], false, "{reply}");
    // Output first: 90 kB printed leaves no room for a 40 kB result.
    let printed = code_cell(
        &server,
        &id,
        "print('y' * 90000)\ndisplay({'text/html': 'x' * 40000}, raw=True)",
        json!({"output_limit": "100K"}),
    );
    assert_eq!(printed["verdict"]["status"], "output_limit", "{printed}");
    assert_eq!(printed["results"], json!([]), "{printed}");
    // Results past the interpreter's own bound (16 MiB) are dropped there, bounded.
    let huge = code_cell(
        &server,
        &id,
        "for _ in range(5):\n    display({'text/html': 'x' * (4 << 20)}, raw=True)",
        json!({"output_limit": "8M"}),
    );
    assert_eq!(huge["verdict"]["status"], "output_limit", "{huge}");
    assert_eq!(results(&huge).len(), 1, "{huge}");
    assert_eq!(huge["state_lost"], false, "{huge}");
    assert_eq!(code_cell(&server, &id, "1 + 1", json!({}))["result"], "2");
    close_session(&server, &id);
}

const PYTHON_CLIENT_SCRIPT: &str = r#"
import json, sys
import brig_client
show = lambda *values: print(json.dumps(values))
sb = brig_client.Sandbox(socket=sys.argv[1])
ex = sb.run_code("display({'text/html': '<b>x</b>'}, raw=True)\nclass P:\n    def _repr_svg_(self):\n        return '<svg/>'\ndisplay(P())\n{'a': 1}")
show(len(ex.results), ex.results[0].html, ex.results[1].svg, ex.results[2].is_main_result, ex.results[2].json, ex.text, ex.results[0].formats())
ctx = sb.create_code_context("bash", cwd="/tmp")
first = sb.run_code("v=1; pwd; cd /", context=ctx)
second = sb.run_code("echo $v $PWD; (exit 5)", context=ctx.id)
show(ctx.id, ctx.language, ctx.cwd, first.logs.stdout, second.stdout, second.verdict["exit_code"], second.context)
py = sb.create_code_context()
sb.run_code("y = 2", context=py)
show([c.id for c in sb.list_code_contexts()])
sb.restart_code_context(py)
error = sb.run_code("y", context=py).error
show(error.type, error.name == error.type, error.value == error.message)
sb.remove_code_context(py)
try:
    sb.run_code("1", context=py)
except brig_client.BrigError as error:
    show(error.kind, "no context" in error.message)
sb.close()
"#;

fn python_client_rich_outputs_and_contexts(mode: Mode) {
    let server = Server::start(mode, &["--pool", "0"]);
    assert_output_lines(
        &client_script(mode, "python", PYTHON_CLIENT_SCRIPT, &server),
        &[
            r#"[3, "<b>x</b>", "<svg/>", true, {"a": 1}, "{'a': 1}", ["html"]]"#,
            r#"["ctx-1", "bash", "/tmp", ["/tmp\n"], "1 /\n", 5, "ctx-1"]"#,
            r#"[["python", "ctx-1", "ctx-2"]]"#,
            r#"["NameError", true, true]"#,
            r#"["bad_input", true]"#,
        ],
    );
}

const NODE_CLIENT_SCRIPT: &str = r#"
const brig = require(process.argv[1]);
const socket = process.argv[2];
const show = (...values) => console.log(JSON.stringify(values));
(async () => {
  const sb = await brig.Sandbox.create({ socket });
  const ctx = await sb.createCodeContext({ language: "node" });
  let ex = await sb.runCode("display({ 'text/markdown': '*t*' }); [1, 2]", { context: ctx });
  show(ex.results.length, ex.results[0].markdown, ex.results[0].formats(), ex.results[1].isMainResult, ex.results[1].json, ex.text, ex.context);
  const bash = await sb.createCodeContext({ language: "bash", cwd: "/tmp" });
  await sb.runCode("cd /; w=2", { context: bash.id });
  ex = await sb.runCode("echo $w $PWD", { context: bash });
  show(bash.language, bash.cwd, ex.logs.stdout, ex.verdict.exit_code);
  show((await sb.listCodeContexts()).map((c) => c.id));
  await sb.runCode("let kept = 3", { context: ctx });
  await sb.restartCodeContext(ctx);
  ex = await sb.runCode("typeof kept", { context: ctx });
  show(ex.result);
  await sb.removeCodeContext(bash);
  try {
    await sb.runCode("echo", { context: bash });
    show("still there");
  } catch (error) {
    show(error.kind, error.message.includes("no context"));
  }
  await sb.close();
})().catch((error) => { console.error(error); process.exit(1); });
"#;

fn node_client_rich_outputs_and_contexts(mode: Mode) {
    if !require_program("node", "apt install nodejs") {
        return;
    }
    let server = Server::start(mode, &["--pool", "0"]);
    assert_output_lines(
        &client_script(mode, "node", NODE_CLIENT_SCRIPT, &server),
        &[
            r#"[2,"*t*",["markdown"],true,[1,2],"[ 1, 2 ]","ctx-1"]"#,
            r#"["bash","/tmp",["2 /\n"],0]"#,
            r#"[["ctx-1","ctx-2"]]"#,
            r#"["'undefined'"]"#,
            r#"["bad_input",true]"#,
        ],
    );
}

/// `brig session exec --code` prints the text of what a cell displayed and writes its
/// rich formats with --results-dir; `brig session context` manages contexts.
fn the_command_line_shows_rich_results(mode: Mode) {
    let server = Server::start(mode, &["--pool", "0"]);
    let dir = TempDir::new("session-rich-cli").writable_by_all();
    let at = |args: &[&str], id: &str| session_cli(mode, &server, id, args);
    let created = run(mode, &["session", "create", "--server", server.socket()]);
    let id = assert_success(&created).trim().to_string();
    let cell_file = dir.file(
        "cell.py",
        "display({'image/svg+xml': '<svg/>', 'text/plain': 'a picture'}, raw=True)\n{'n': 1}",
    );
    let results = dir.path().join("results");
    let output = at(
        &[
            "exec",
            "--code",
            cell_file.to_str().unwrap(),
            "--results-dir",
            results.to_str().unwrap(),
        ],
        &id,
    );
    assert_eq!(assert_success(&output), "a picture\n{'n': 1}\n");
    assert_eq!(
        std::fs::read_to_string(results.join("result-1.svg")).unwrap(),
        "<svg/>"
    );
    assert_eq!(
        std::fs::read_to_string(results.join("result-2.json")).unwrap(),
        r#"{"n":1}"#
    );
    let made = at(
        &["context", "create", "--language", "bash", "--cwd", "/tmp"],
        &id,
    );
    let context = assert_success(&made).trim().to_string();
    assert_eq!(context, "ctx-1");
    let bash_file = dir.file("cell.sh", "pwd; exit_with() { return $1; }; exit_with 6");
    let output = at(
        &[
            "exec",
            "--code",
            bash_file.to_str().unwrap(),
            "--context",
            &context,
        ],
        &id,
    );
    assert_eq!(code(&output), 6, "{}", describe(&output));
    assert_eq!(stdout(&output), "/tmp\n", "{}", describe(&output));
    let listed = at(&["context", "list"], &id);
    assert_eq!(
        assert_success(&listed),
        "python\tpython\t-\trunning\nctx-1\tbash\t/tmp\trunning\n"
    );
    assert_success(&at(&["context", "remove", "--context", "ctx-1"], &id));
    let output = at(
        &[
            "exec",
            "--code",
            bash_file.to_str().unwrap(),
            "--context",
            "ctx-1",
        ],
        &id,
    );
    assert_eq!(code(&output), 125, "{}", describe(&output));
    assert!(
        stderr(&output).contains("no context"),
        "{}",
        describe(&output)
    );
    assert_success(&at(&["close"], &id));
}

/// Every context is a process of the session's jail (its process table shows them all):
/// they count against its limits. As root its pids limit is its cgroup's, and a context
/// that does not fit is refused with a one-line error while the session goes on
/// (rootless here, without a usable cgroup, the jail's processes are bounded by
/// RLIMIT_NPROC, per uid).
fn contexts_count_against_the_session_s_pids(mode: Mode) {
    let server = Server::start(mode, &["--pool", "0"]);
    let options = match mode {
        Mode::Root => json!({"options": {"pids": 6}}),
        Mode::Rootless => json!({}),
    };
    let id = create_session(&server, options);
    let mut made = Vec::new();
    for _ in 0..16 {
        let reply = context(&server, &id, "create", json!({"language": "bash"}));
        if reply["type"] != "context" {
            assert_eq!(mode, Mode::Root, "{reply}");
            let message = reply["message"].as_str().unwrap();
            assert!(
                message.contains("bash interpreter did not start"),
                "{message}"
            );
            assert!(!message.contains('\n'), "{message}");
            break;
        }
        made.push(reply["context"]["id"].as_str().unwrap().to_string());
    }
    match mode {
        // Init and five shells: the sixth shell is one pid too many.
        Mode::Root => assert_eq!(made.len(), 5, "{made:?}"),
        Mode::Rootless => assert_eq!(made.len(), 16, "{made:?}"),
    }
    // All of them in the jail's process table, seen from one of them (with builtins
    // only: at the pids limit a fork fails).
    let last = made.last().unwrap().clone();
    let seen = code_cell(
        &server,
        &id,
        "n=0; for f in /proc/[0-9]*/comm; do read -r c < $f; [ \"$c\" = bash ] && n=$((n + 1)); done; echo $n",
        json!({"context": last}),
    );
    assert_eq!(seen["stdout"], format!("{}\n", made.len()), "{seen}");
    // Room again once one goes.
    let removed = context(&server, &id, "remove", json!({"context": made[0]}));
    assert_eq!(removed["type"], "context_removed", "{removed}");
    let again = context(&server, &id, "create", json!({"language": "bash"}));
    assert_eq!(again["type"], "context", "{again}");
    close_session(&server, &id);
}

both_modes!(
    a_pandas_data_frame_comes_back_as_html_and_text,
    both_clients_show_a_pandas_data_frame,
);

/// Whether the jail's python3 has pandas (the test's prerequisite, named when missing).
fn require_pandas() -> bool {
    require(
        "python3's pandas",
        "apt-get install python3-pandas",
        has_python_module("pandas"),
    )
}

/// A cell that shows a DataFrame with display() and ends with it.
const DATA_FRAME_CELL: &str =
    "import pandas as pd\ndf = pd.DataFrame({'a': [1, 2], 'b': ['x', 'y']})\ndisplay(df)\ndf";

/// A DataFrame's text: its columns' header, then a row an index.
const DATA_FRAME_TEXT: &str = "   a  b\n0  1  x\n1  2  y";

/// Checks that a bundle (or a client's rich result, `html_key` and `text_key` naming its
/// fields) is the DataFrame's: an HTML table of its cells and its text.
fn assert_data_frame(bundle: &Value, html_key: &str, text_key: &str) {
    let html = bundle[html_key]
        .as_str()
        .unwrap_or_else(|| panic!("no {html_key}: {bundle}"));
    assert!(html.contains("<table"), "{html}");
    for cell in ["<th>a</th>", "<th>b</th>", "<td>x</td>", "<td>2</td>"] {
        assert!(html.contains(cell), "{cell} not in {html}");
    }
    assert_eq!(bundle[text_key], DATA_FRAME_TEXT, "{bundle}");
}

fn a_pandas_data_frame_comes_back_as_html_and_text(mode: Mode) {
    if !require_pandas() {
        return;
    }
    let server = Server::start(mode, &["--pool", "0"]);
    let id = create_session(&server, json!({}));
    let shown = code_cell(&server, &id, DATA_FRAME_CELL, json!({}));
    assert_eq!(shown["verdict"]["status"], "ok", "{shown}");
    let bundles = results(&shown);
    assert_eq!(bundles.len(), 2, "{shown}");
    // display() first, then the final value: the main result, also the reply's text.
    for (bundle, main) in bundles.iter().zip([false, true]) {
        assert_eq!(bundle["is_main_result"], main, "{shown}");
        assert_data_frame(bundle, "text/html", "text/plain");
    }
    assert_eq!(shown["result"], DATA_FRAME_TEXT, "{shown}");
    // A Series has no HTML of its own: its text only.
    let series = code_cell(&server, &id, "df['a']", json!({}));
    let bundles = results(&series);
    assert_eq!(bundles.len(), 1, "{series}");
    assert!(bundles[0].get("text/html").is_none(), "{series}");
    assert!(
        bundles[0]["text/plain"]
            .as_str()
            .unwrap()
            .starts_with("0    1\n1    2\nName: a"),
        "{series}"
    );
    close_session(&server, &id);
}

const PYTHON_DATA_FRAME_SCRIPT: &str = r#"
import json, sys
import brig_client
sb = brig_client.Sandbox(socket=sys.argv[1])
ex = sb.run_code(CELL)
for result in ex.results:
    print(json.dumps({"main": result.is_main_result, "html": result.html, "text": result.text, "formats": result.formats()}))
print(json.dumps(ex.text))
sb.close()
"#;

const NODE_DATA_FRAME_SCRIPT: &str = r#"
const brig = require(process.argv[1]);
(async () => {
  const sb = await brig.Sandbox.create({ socket: process.argv[2] });
  const ex = await sb.runCode(CELL);
  for (const result of ex.results) {
    console.log(JSON.stringify({ main: result.isMainResult, html: result.html, text: result.text, formats: result.formats() }));
  }
  console.log(JSON.stringify(ex.text));
  await sb.close();
})().catch((error) => { console.error(error); process.exit(1); });
"#;

/// Each client's rich results of the DataFrame cell: its display() and its final value,
/// each with the table as `html` and its `text`.
fn both_clients_show_a_pandas_data_frame(mode: Mode) {
    if !require_pandas() || !require_program("node", "apt install nodejs") {
        return;
    }
    let server = Server::start(mode, &["--pool", "0"]);
    for (client, script) in [
        ("python", PYTHON_DATA_FRAME_SCRIPT),
        ("node", NODE_DATA_FRAME_SCRIPT),
    ] {
        // The cell as a JSON string, a literal in both languages.
        let script = script.replace("CELL", &json!(DATA_FRAME_CELL).to_string());
        let output = client_script(mode, client, &script, &server);
        let printed = assert_success(&output);
        let lines: Vec<Value> = (printed.lines())
            .map(|line| serde_json::from_str(line).unwrap_or_else(|_| panic!("{client}: {line}")))
            .collect();
        assert_eq!(lines.len(), 3, "{client}: {printed}");
        for (result, main) in lines.iter().zip([false, true]) {
            assert_eq!(result["main"], main, "{client}: {result}");
            assert_eq!(
                result["formats"],
                json!(["text", "html"]),
                "{client}: {result}"
            );
            assert_data_frame(result, "html", "text");
        }
        assert_eq!(lines[2], DATA_FRAME_TEXT, "{client}: {printed}");
    }
}
