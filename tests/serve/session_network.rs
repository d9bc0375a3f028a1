//! A session's live network policy (`session_network`), its metadata and listing
//! (`session_create`'s `metadata`, `session_list`), and its end moved while it lives
//! (`session_set_timeout`), for real, as root and rootless: local servers on this host
//! (tests/net/servers.py) reached through `--net filtered`, connections made by Python in
//! the session's jail.

use crate::common;

use common::net::{Servers, TwoByAddress, require_tun};
use common::serve::{Server, ask, client_copy, create_session, exchange, run_node_client};
use common::*;
use serde_json::{Value, json};
use std::time::Duration;

both_modes!(
    locking_the_network_cuts_what_it_refuses_and_reopening_lets_it_through,
    a_network_change_without_add_host_keeps_the_pins,
    a_network_looser_than_the_server_s_is_refused,
    only_a_filtered_session_can_change_its_network,
    metadata_round_trips_and_filters_the_list,
    metadata_is_bounded,
    set_timeout_extends_the_session_and_is_capped,
    the_list_tells_a_busy_session_from_an_idle_one,
    another_uid_cannot_change_another_s_session,
    the_command_line_lists_sets_the_network_and_the_timeout,
    the_python_client_sets_the_network_and_the_timeout_and_lists,
    the_node_client_sets_the_network_and_the_timeout_and_lists,
    a_deny_list_refuses_what_it_names_by_protocol_cli_and_clients,
);

/// The name the tests give the servers (pinned to 127.0.0.1).
const WEB: &str = "web.test";

/// A Python cell's stdout (the cell must succeed).
fn cell(server: &Server, id: &str, code: &str) -> String {
    let reply = ask(
        server,
        json!({"type": "session_exec", "session": id, "code": code}),
    );
    assert_eq!(reply["type"], "exec", "{reply}");
    assert_eq!(reply["verdict"]["exit_code"], 0, "{reply}");
    reply["stdout"].as_str().unwrap_or_default().to_string()
}

fn network(server: &Server, id: &str, allow_net: &[String], add_host: &[&str]) -> Value {
    ask(
        server,
        json!({"type": "session_network", "session": id, "allow_net": allow_net, "add_host": add_host}),
    )
}

fn assert_error(reply: &Value, needles: &[&str]) {
    assert_eq!(reply["type"], "error", "{reply}");
    let message = reply["message"].as_str().unwrap();
    for needle in needles {
        assert!(message.contains(needle), "{needle:?} not in {message:?}");
    }
    assert!(!message.contains('\n'), "{message:?}");
    assert_eq!(reply["kind"], "bad_input", "{reply}");
    assert_eq!(reply["exit_code"], 125, "{reply}");
}

fn close(server: &Server, id: &str) {
    let reply = ask(server, json!({"type": "session_close", "session": id}));
    assert_eq!(reply["type"], "closed", "{reply}");
}

fn list(server: &Server, filter: Value) -> Vec<Value> {
    let reply = ask(server, json!({"type": "session_list", "metadata": filter}));
    assert_eq!(reply["type"], "sessions", "{reply}");
    reply["sessions"].as_array().unwrap().clone()
}

/// What a connection from the jail to `web.test:PORT` gets: `ok` or the errno's name.
fn connect_code(port: u16) -> String {
    connect_to(WEB, port)
}

/// What a connection from the jail to `host:port` gets: `ok`, the errno's name, or
/// `EAI_NONAME` when the name does not resolve.
fn connect_to(host: &str, port: u16) -> String {
    format!(
        "import errno, socket\ntry:\n    socket.create_connection(({host:?}, {port}), timeout=10).close()\n    print('ok')\nexcept socket.gaierror as e:\n    print('EAI_NONAME' if e.errno == socket.EAI_NONAME else e)\nexcept OSError as e:\n    print(errno.errorcode.get(e.errno, e))\n"
    )
}

/// A second name for the servers, which the session starts without.
const OTHER: &str = "other.test";

fn locking_the_network_cuts_what_it_refuses_and_reopening_lets_it_through(mode: Mode) {
    if !require_tun(mode) {
        return;
    }
    let servers = Servers::start();
    let (http, echo) = (servers.http, servers.echo);
    let dir = TempDir::new("session-net-audit").writable_by_all();
    let log = dir.path().join("audit.log");
    let pin = format!("{WEB}:127.0.0.1");
    let (http_rule, echo_rule) = (format!("{WEB}:{http}"), format!("{WEB}:{echo}"));
    let (other_pin, other_rule) = (format!("{OTHER}:127.0.0.1"), format!("{OTHER}:{http}"));
    // other.test is not on the server's list: a session may have it by the server's
    // consent (--client-may allow-net), and starts without it (nor in its /etc/hosts).
    let server = pinned_server(
        mode,
        &pin,
        &[&http_rule, &echo_rule],
        &[
            "--client-may",
            "allow-net",
            "--audit-log",
            log.to_str().unwrap(),
        ],
    );
    let id = create_session(&server, json!({}));
    assert_eq!(cell(&server, &id, &connect_to(OTHER, http)), "EAI_NONAME\n");
    // Two live connections: the echo server's (to be refused) and the web server's (kept).
    let opened = cell(
        &server,
        &id,
        &format!(
            "import errno, socket\necho = socket.create_connection(({WEB:?}, {echo}), timeout=10)\necho.sendall(b'ping')\nprint(echo.recv(4).decode())\nweb = socket.create_connection(({WEB:?}, {http}), timeout=10)\n"
        ),
    );
    assert_eq!(opened, "ping\n");

    // Lock: only the web server from now on.
    let locked = network(&server, &id, std::slice::from_ref(&http_rule), &[&pin]);
    assert_eq!(locked["type"], "network", "{locked}");
    assert_eq!(locked["allow_net"], json!([http_rule]), "{locked}");
    assert_eq!(locked["cut"], 1, "the echo connection: {locked}");
    // The live echo connection was reset by brig ...
    let echoed = cell(
        &server,
        &id,
        "try:\n    echo.sendall(b'again')\n    print('got', echo.recv(5))\nexcept OSError as e:\n    print(errno.errorcode.get(e.errno, e))\n",
    );
    assert_eq!(echoed, "ECONNRESET\n");
    // ... a new one is refused ...
    assert_eq!(cell(&server, &id, &connect_code(echo)), "ECONNREFUSED\n");
    // ... and the one the new policy allows goes on.
    let fetched = cell(
        &server,
        &id,
        &format!(
            "web.sendall(b'GET /hello HTTP/1.0\\r\\nHost: {WEB}\\r\\n\\r\\n')\nreply = b''\nwhile True:\n    chunk = web.recv(4096)\n    if not chunk: break\n    reply += chunk\nprint(reply.split(b'\\r\\n')[0].decode(), reply.endswith(b'hello\\n'))\n"
        ),
    );
    assert!(
        fetched.starts_with("HTTP/1.") && fetched.contains(" 200 ") && fetched.ends_with("True\n"),
        "{fetched:?}"
    );

    // Reopened: the echo server is reachable again, at once, and a name the session did
    // not have resolves (brig's resolver answers from the new rules).
    let reopened = network(
        &server,
        &id,
        &[http_rule.clone(), echo_rule.clone(), other_rule.clone()],
        &[&pin, &other_pin],
    );
    assert_eq!(reopened["type"], "network", "{reopened}");
    assert_eq!(reopened["cut"], 0, "{reopened}");
    assert_eq!(cell(&server, &id, &connect_code(echo)), "ok\n");
    assert_eq!(cell(&server, &id, &connect_to(OTHER, http)), "ok\n");

    // Locked entirely (an empty list: the pin goes too): nothing gets out.
    let sealed = network(&server, &id, &[], &[]);
    assert_eq!(sealed["type"], "network", "{sealed}");
    assert_eq!(cell(&server, &id, &connect_code(http)), "ECONNREFUSED\n");
    close(&server, &id);

    // Each change is an audit line: who, which session, the rules before and after.
    let text = std::fs::read_to_string(&log).unwrap();
    let changes: Vec<Value> = text
        .lines()
        .map(|line| serde_json::from_str::<Value>(line).unwrap())
        .filter(|line| line["event"] == "session_network")
        .collect();
    assert_eq!(changes.len(), 3, "{text}");
    let first = &changes[0];
    assert_eq!(first["session"], id.as_str(), "{first}");
    assert_eq!(first["uid"], 0, "{first}");
    assert_eq!(first["pid"], std::process::id(), "{first}");
    assert_eq!(first["old"]["allow_net"], json!([http_rule, echo_rule]));
    assert_eq!(first["old"]["add_host"], json!([pin]));
    assert_eq!(first["new"]["allow_net"], json!([http_rule]));
    assert_eq!(first["cut"], 1);
    assert_eq!(changes[2]["new"], json!({"allow_net": [], "add_host": []}));
}

fn a_network_change_without_add_host_keeps_the_pins(mode: Mode) {
    if !require_tun(mode) {
        return;
    }
    let servers = Servers::start();
    let (http, echo) = (servers.http, servers.echo);
    let pin = format!("{WEB}:127.0.0.1");
    let (http_rule, echo_rule) = (format!("{WEB}:{http}"), format!("{WEB}:{echo}"));
    let server = pinned_server(mode, &pin, &[&http_rule, &echo_rule], &[]);
    let id = create_session(&server, json!({}));
    // No add_host: the rules change, the server's pin stays (web.test still resolves).
    let narrowed = ask(
        &server,
        json!({"type": "session_network", "session": id, "allow_net": [http_rule]}),
    );
    assert_eq!(narrowed["type"], "network", "{narrowed}");
    assert_eq!(narrowed["add_host"], json!([pin]), "{narrowed}");
    assert_eq!(cell(&server, &id, &connect_code(http)), "ok\n");
    assert_eq!(cell(&server, &id, &connect_code(echo)), "ECONNREFUSED\n");
    // An empty add_host still replaces them: the name no longer reaches the server.
    let unpinned = network(&server, &id, std::slice::from_ref(&http_rule), &[]);
    assert_eq!(unpinned["add_host"], json!([]), "{unpinned}");
    // (/etc/hosts keeps the name; without its pin the relay cannot place it: refused.)
    assert_eq!(cell(&server, &id, &connect_code(http)), "ECONNREFUSED\n");
    close(&server, &id);

    // The clients: without add_host the pins stay, with an empty one they go.
    let python = format!(
        "import sys\nfrom brig_client import Sandbox\nwith Sandbox(socket=sys.argv[1]) as sb:\n    sb.set_network(allow_net=[{http_rule:?}])\n    print(sb.run_code({:?}).stdout.strip())\n    sb.set_network(allow_net=[{http_rule:?}], add_host=[])\n    print(sb.run_code({:?}).stdout.strip())\n",
        connect_code(http),
        connect_code(http)
    );
    assert_lines(
        &python_client(mode, &python, &server),
        &["ok", "ECONNREFUSED"],
    );
    if require_program("node", "apt install nodejs") {
        let node = format!(
            "const brig = require(process.argv[1]);\n(async () => {{\n  const sb = await brig.Sandbox.create({{ socket: process.argv[2] }});\n  await sb.setNetwork({{ allowNet: [{http_rule:?}] }});\n  console.log((await sb.runCode({:?})).stdout.trim());\n  await sb.setNetwork({{ allowNet: [{http_rule:?}], addHost: [] }});\n  console.log((await sb.runCode({:?})).stdout.trim());\n  await sb.close();\n}})().catch((error) => {{ console.error(error); process.exit(1); }});\n",
            connect_code(http),
            connect_code(http)
        );
        assert_lines(
            &run_node_client(mode, &node, server.socket()),
            &["ok", "ECONNREFUSED"],
        );
    }
}

fn a_network_looser_than_the_server_s_is_refused(mode: Mode) {
    if !require_tun(mode) {
        return;
    }
    let server = filtered_server(mode);
    let id = create_session(&server, json!({}));
    let refused = network(&server, &id, &["example.com:443".into()], &[]);
    assert_error(
        &refused,
        &[
            "--allow-net example.com:443",
            "web.test:80",
            "--client-may allow-net",
        ],
    );
    let refused = network(
        &server,
        &id,
        &["web.test:80".into()],
        &["web.test:10.0.0.1"],
    );
    assert_error(
        &refused,
        &["--add-host web.test:10.0.0.1", "--client-may allow-net"],
    );
    let malformed = network(&server, &id, &["web.test:http".into()], &[]);
    assert_error(&malformed, &["web.test:http"]);
    // The session goes on, under the rules it had.
    assert_eq!(cell(&server, &id, "print(1)"), "1\n");
    // What the server allows is allowed: a subset of its own list.
    let tighter = network(&server, &id, &[], &[]);
    assert_eq!(tighter["type"], "network", "{tighter}");
    close(&server, &id);
}

fn only_a_filtered_session_can_change_its_network(mode: Mode) {
    let server = Server::start(mode, &["--pool", "0"]);
    let id = create_session(&server, json!({}));
    let refused = network(&server, &id, &[], &[]);
    assert_error(
        &refused,
        &[
            "--net none",
            "create it with --net filtered",
            "empty allow-net",
        ],
    );
    assert_eq!(cell(&server, &id, "print(2)"), "2\n");
    close(&server, &id);
    if !require_tun(mode) {
        return;
    }
    // An empty filtered list: nothing reachable, and changeable later.
    let filtered = Server::start(mode, &["--pool", "0", "--net", "filtered"]);
    let id = create_session(&filtered, json!({}));
    let changed = network(&filtered, &id, &[], &[]);
    assert_eq!(changed["type"], "network", "{changed}");
    close(&filtered, &id);
}

fn metadata_round_trips_and_filters_the_list(mode: Mode) {
    let server = Server::start(mode, &["--pool", "0", "--session-timeout", "10m"]);
    let ada = create_session(
        &server,
        json!({"metadata": {"user": "ada", "purpose": "ci"}, "session_timeout": "5m"}),
    );
    let bob = create_session(&server, json!({"metadata": {"user": "bob"}}));
    let plain = create_session(&server, json!({}));
    let all = list(&server, json!({}));
    assert_eq!(all.len(), 3, "{all:?}");
    let found = list(&server, json!({"user": "ada"}));
    let [entry] = found.as_slice() else {
        panic!("one session for user=ada: {found:?}");
    };
    assert_eq!(entry["session"], ada.as_str());
    assert_eq!(entry["metadata"], json!({"user": "ada", "purpose": "ci"}));
    assert_eq!(entry["uid"], 0);
    assert_eq!(entry["state"], "idle");
    let created = entry["created_at_ms"].as_u64().unwrap();
    let ends = entry["ends_at_ms"].as_u64().unwrap();
    let idle = entry["idle_deadline_ms"].as_u64().unwrap();
    // Its session_timeout (5 minutes) from its creation, give or take the clock's reading.
    assert!(ends.abs_diff(created + 300_000) < 60_000, "{entry}");
    assert!(idle > created, "{entry}");
    assert!(
        entry["limits"]["workspace_size"].as_u64().unwrap() > 0,
        "{entry}"
    );
    assert!(entry["limits"].get("memory").is_some(), "{entry}");
    // Every pair of the filter must hold.
    assert!(list(&server, json!({"user": "ada", "purpose": "prod"})).is_empty());
    let bobs = list(&server, json!({"user": "bob"}));
    assert_eq!(bobs.len(), 1);
    assert_eq!(bobs[0]["session"], bob.as_str());
    assert_eq!(list(&server, json!({"purpose": "ci"})).len(), 1);
    let plain_entry = all.iter().find(|s| s["session"] == plain.as_str()).unwrap();
    assert_eq!(plain_entry["metadata"], json!({}));
    for id in [ada, bob, plain] {
        close(&server, &id);
    }
}

fn metadata_is_bounded(mode: Mode) {
    let server = Server::start(mode, &["--pool", "0"]);
    let many: serde_json::Map<String, Value> =
        (0..33).map(|i| (format!("k{i}"), json!("v"))).collect();
    let cases = [
        (json!(many), "metadata: 33 keys, at most 32"),
        (json!({"k".repeat(65): "v"}), "65 bytes, at most 64"),
        (
            json!({"note": "v".repeat(513)}),
            "metadata[\"note\"]: 513 bytes, at most 512",
        ),
        (json!({"": "v"}), "metadata: an empty key"),
    ];
    for (metadata, needle) in cases {
        let reply = ask(
            &server,
            json!({"type": "session_create", "metadata": metadata}),
        );
        assert_error(&reply, &[needle]);
    }
    let not_strings = ask(
        &server,
        json!({"type": "session_create", "metadata": {"n": 1}}),
    );
    assert_error(&not_strings, &["malformed request", "expected a string"]);
    // Nothing was created, and the server still serves.
    assert!(list(&server, json!({})).is_empty());
    let most: serde_json::Map<String, Value> = (0..32)
        .map(|i| (format!("{i:0>64}"), json!("v".repeat(512))))
        .collect();
    let id = create_session(&server, json!({"metadata": most}));
    assert_eq!(
        list(&server, json!({}))[0]["metadata"]
            .as_object()
            .unwrap()
            .len(),
        32
    );
    close(&server, &id);
}

fn set_timeout_extends_the_session_and_is_capped(mode: Mode) {
    let server = Server::start(mode, &["--pool", "0", "--session-timeout", "1m"]);
    let id = create_session(&server, json!({"session_timeout": "2s"}));
    let extended = ask(
        &server,
        json!({"type": "session_set_timeout", "session": id, "timeout": "50s"}),
    );
    assert_eq!(extended["type"], "timeout", "{extended}");
    assert_eq!(extended["timeout_ms"], 50_000, "{extended}");
    // Past its first end, the session is still there.
    std::thread::sleep(Duration::from_secs(3));
    assert_eq!(cell(&server, &id, "print(3)"), "3\n");
    let entry = list(&server, json!({}))[0].clone();
    let (created, ends) = (
        entry["created_at_ms"].as_u64().unwrap(),
        entry["ends_at_ms"].as_u64().unwrap(),
    );
    assert!(ends > created + 40_000, "{entry}");
    // No longer than the server's --session-timeout, and not 0.
    let capped = ask(
        &server,
        json!({"type": "session_set_timeout", "session": id, "timeout": "61s"}),
    );
    assert_error(
        &capped,
        &["\"timeout\" 61s", "--session-timeout 60s", "at most 60s"],
    );
    let zero = ask(
        &server,
        json!({"type": "session_set_timeout", "session": id, "timeout": "0s"}),
    );
    assert_error(&zero, &["\"timeout\" must be longer than 0"]);
    // Shortened: the session ends at its new end.
    let shortened = ask(
        &server,
        json!({"type": "session_set_timeout", "session": id, "timeout": "1s"}),
    );
    assert_eq!(shortened["type"], "timeout", "{shortened}");
    assert!(
        wait_until(Duration::from_secs(30), || list(&server, json!({}))
            .is_empty()),
        "the session outlived its new end"
    );
}

fn the_list_tells_a_busy_session_from_an_idle_one(mode: Mode) {
    let server = Server::start(mode, &["--pool", "0"]);
    let id = create_session(&server, json!({}));
    assert_eq!(list(&server, json!({}))[0]["state"], "idle");
    // A command that runs until the test kills it from the host (a session serves one
    // request at a time: nothing sent to the session could end it).
    // Unique to this test process and mode (the root and rootless cases run at once).
    let marker = format!(
        "{}.{}",
        100_000 + std::process::id(),
        if mode == Mode::Root { 1 } else { 2 }
    );
    let socket = server.socket.clone();
    let waiting = {
        let (id, marker) = (id.clone(), marker.clone());
        std::thread::spawn(move || {
            let message = json!({"brig": 1, "type": "session_exec", "session": id,
                "command": ["sleep", marker]});
            exchange(&socket, message.to_string().as_bytes(), &[])
        })
    };
    let sleeper = || {
        host_pids().into_iter().find(|pid| {
            std::fs::read(format!("/proc/{pid}/cmdline"))
                .is_ok_and(|line| line == format!("sleep\0{marker}\0").as_bytes())
        })
    };
    assert!(
        wait_until(Duration::from_secs(30), || sleeper().is_some()),
        "no sleep"
    );
    let busy = list(&server, json!({}))[0].clone();
    assert_eq!(busy["state"], "busy", "{busy}");
    assert!(busy["idle_deadline_ms"].is_null(), "{busy}");
    kill(sleeper().unwrap(), libc::SIGKILL);
    let done = waiting.join().unwrap();
    assert_eq!(done["type"], "exec", "{done}");
    let idle = list(&server, json!({}))[0].clone();
    assert_eq!(idle["state"], "idle", "answered before listed: {idle}");
    assert!(idle["idle_deadline_ms"].as_u64().is_some(), "{idle}");
    close(&server, &id);
}

/// One request as uid 65534 (another user than the session's owner, root).
fn ask_as_nobody(server: &Server, message: Value) -> String {
    let mut message = message;
    message["brig"] = json!(1);
    let script = format!(
        "import json,socket,struct\ns=socket.socket(socket.AF_UNIX)\ns.connect({:?})\nb={:?}.encode()\ns.sendall(struct.pack('>I',len(b))+b)\nn=struct.unpack('>I',s.recv(4))[0]\nprint(s.recv(n).decode())",
        server.socket(),
        message.to_string()
    );
    let mut foreign = std::process::Command::new("setpriv");
    foreign.args(["--reuid=65534", "--regid=65534", "--groups=65534"]);
    foreign.arg(interpreter("python3")).args(["-c", &script]);
    stdout(&output_of(foreign))
}

fn another_uid_cannot_change_another_s_session(mode: Mode) {
    if !require_program("setpriv", "apt install util-linux") {
        return;
    }
    let server = Server::start(
        mode,
        &[
            "--pool",
            "0",
            "--socket-group",
            "65534",
            "--session-timeout",
            "10m",
        ],
    );
    let id = create_session(&server, json!({"session_timeout": "5m"}));
    let before = list(&server, json!({}))[0]["ends_at_ms"].as_u64().unwrap();
    for message in [
        json!({"type": "session_network", "session": id, "allow_net": []}),
        json!({"type": "session_set_timeout", "session": id, "timeout": "10m"}),
    ] {
        let reply = ask_as_nobody(&server, message);
        assert!(reply.contains("belongs to another user"), "{reply}");
    }
    // Its end did not move.
    let after = list(&server, json!({}))[0]["ends_at_ms"].as_u64().unwrap();
    assert!(after.abs_diff(before) < 1_000, "{before} {after}");
    close(&server, &id);
}

fn the_command_line_lists_sets_the_network_and_the_timeout(mode: Mode) {
    let server = Server::start(mode, &["--pool", "0", "--session-timeout", "10m"]);
    let session = |args: &[&str]| {
        let mut all = vec!["session", args[0], "--server", server.socket()];
        all.extend_from_slice(&args[1..]);
        run(mode, &all)
    };
    let created = session(&[
        "create",
        "--metadata",
        "user=ada",
        "--metadata",
        "purpose=ci",
    ]);
    let id = assert_success(&created).trim().to_string();
    assert_eq!(id.len(), 32, "{id:?}");
    let listed = assert_success(&session(&["list", "--metadata", "user=ada"]));
    assert!(listed.contains(&id), "{listed}");
    assert!(
        listed.contains("purpose=ci") && listed.contains("idle"),
        "{listed}"
    );
    let none = assert_success(&session(&["list", "--metadata", "user=bob"]));
    assert!(!none.contains(&id), "{none}");
    let extended = assert_success(&session(&["timeout", "--session", &id, "5m"]));
    assert!(
        extended.contains(&format!("session {id} ends in")),
        "{extended}"
    );
    let capped = session(&["timeout", "--session", &id, "11m"]);
    assert_one_line_error(&capped, &["--session-timeout", "at most"]);
    assert_eq!(code(&capped), 125);
    let refused = session(&["net", "--session", &id, "--allow-net", "example.com:443"]);
    assert_one_line_error(&refused, &["--net none", "create it with --net filtered"]);
    assert_eq!(code(&refused), 125);
    let bad = session(&["create", "--metadata", "no-equals-sign"]);
    assert_one_line_error(&bad, &["--metadata no-equals-sign", "KEY=VALUE"]);
    assert_success(&session(&["close", "--session", &id]));
    if !require_tun(mode) {
        return;
    }
    let filtered = filtered_server(mode);
    let session = |args: &[&str]| {
        let mut all = vec!["session", args[0], "--server", filtered.socket()];
        all.extend_from_slice(&args[1..]);
        run(mode, &all)
    };
    let id = assert_success(&session(&["create"])).trim().to_string();
    let locked = assert_success(&session(&["net", "--session", &id]));
    assert_eq!(locked, "connections cut: 0\n");
    let looser = session(&["net", "--session", &id, "--allow-net", "example.com:443"]);
    assert_one_line_error(
        &looser,
        &["--allow-net example.com:443", "--client-may allow-net"],
    );
    assert_success(&session(&["close", "--session", &id]));
}

/// The server the client tests use: `--net filtered` with one rule, the clients' sessions
/// start under it.
/// A server whose sessions are filtered to `rules`, with the name pinned by `pin`, and
/// `extra` options.
fn pinned_server(mode: Mode, pin: &str, rules: &[&str], extra: &[&str]) -> Server {
    let mut args = vec!["--pool", "0", "--net", "filtered", "--add-host", pin];
    for rule in rules {
        args.extend(["--allow-net", rule]);
    }
    args.extend_from_slice(extra);
    Server::start(mode, &args)
}

fn filtered_server(mode: Mode) -> Server {
    Server::start(
        mode,
        &[
            "--pool",
            "0",
            "--net",
            "filtered",
            "--allow-net",
            "web.test:80",
            "--session-timeout",
            "10m",
        ],
    )
}

/// What `script` prints, run by Python with the Python client, `server`'s socket its
/// `sys.argv[1]`.
fn python_client(mode: Mode, script: &str, server: &Server) -> std::process::Output {
    let client = client_copy("python");
    let mut command = command_as(
        mode,
        interpreter("python3"),
        &["-c", script, server.socket()],
    );
    command.env("PYTHONPATH", client.path().join("python"));
    output_of(command)
}

/// The lines a client script prints, against `expected`.
fn assert_lines(output: &std::process::Output, expected: &[&str]) {
    let out = assert_success(output);
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(lines, expected, "{}", describe(output));
}

const PYTHON_SCRIPT: &str = r#"
import json, sys
import brig_client
from brig_client import BrigError, Sandbox
socket = sys.argv[1]
def show(*values):
    print(json.dumps(values), flush=True)
with Sandbox(socket=socket, metadata={"user": "ada", "purpose": "ci"}, session_timeout="1m") as sb:
    mine = brig_client.list_sessions(socket, metadata={"user": "ada"})
    show([s["session"] == sb.session_id for s in mine], mine[0]["metadata"], mine[0]["state"])
    show(brig_client.list_sessions(socket, metadata={"user": "bob"}))
    show(sb.set_network(allow_net=[]), sb.set_network(allow_net=["web.test:80"]))
    try:
        sb.set_network(allow_net=["example.com:443"])
    except BrigError as error:
        show(error.kind, error.exit_code, "--client-may allow-net" in error.message)
    before = brig_client.list_sessions(socket)[0]["ends_at_ms"]
    sb.set_timeout(300)
    show(brig_client.list_sessions(socket)[0]["ends_at_ms"] - before > 200000)
    try:
        sb.set_timeout("11m")
    except BrigError as error:
        show(error.kind, "--session-timeout" in error.message)
"#;

fn the_python_client_sets_the_network_and_the_timeout_and_lists(mode: Mode) {
    if !require_tun(mode) {
        return;
    }
    let server = filtered_server(mode);
    let client = client_copy("python");
    let mut command = command_as(
        mode,
        interpreter("python3"),
        &["-c", PYTHON_SCRIPT, server.socket()],
    );
    command.env("PYTHONPATH", client.path().join("python"));
    assert_lines(
        &output_of(command),
        &[
            r#"[[true], {"purpose": "ci", "user": "ada"}, "idle"]"#,
            r#"[[]]"#,
            r#"[0, 0]"#,
            r#"["bad_input", 125, true]"#,
            r#"[true]"#,
            r#"["bad_input", true]"#,
        ],
    );
}

const NODE_SCRIPT: &str = r#"
const brig = require(process.argv[1]);
const socket = process.argv[2];
const show = (...values) => console.log(JSON.stringify(values));
(async () => {
  const sb = await brig.Sandbox.create({ socket, metadata: { user: "ada", purpose: "ci" }, sessionTimeout: "1m" });
  const mine = await brig.listSessions({ socket, metadata: { user: "ada" } });
  show(mine.map((s) => s.session === sb.sessionId), mine[0].metadata, mine[0].state);
  show(await brig.listSessions({ socket, metadata: { user: "bob" } }));
  show(await sb.setNetwork({ allowNet: [] }), await sb.setNetwork({ allowNet: ["web.test:80"] }));
  try {
    await sb.setNetwork({ allowNet: ["example.com:443"] });
  } catch (error) {
    show(error.kind, error.exitCode, error.message.includes("--client-may allow-net"));
  }
  const before = (await brig.listSessions({ socket }))[0].ends_at_ms;
  await sb.setTimeout(300);
  show((await brig.listSessions({ socket }))[0].ends_at_ms - before > 200000);
  try {
    await sb.setTimeout("11m");
  } catch (error) {
    show(error.kind, error.message.includes("--session-timeout"));
  }
  await sb.close();
})().catch((error) => { console.error(error); process.exit(1); });
"#;

fn the_node_client_sets_the_network_and_the_timeout_and_lists(mode: Mode) {
    if !require_tun(mode) || !require_program("node", "apt install nodejs") {
        return;
    }
    let server = filtered_server(mode);
    let output = run_node_client(mode, NODE_SCRIPT, server.socket());
    assert_lines(
        &output,
        &[
            r#"[[true],{"purpose":"ci","user":"ada"},"idle"]"#,
            r#"[[]]"#,
            r#"[0,0]"#,
            r#"["bad_input",125,true]"#,
            r#"[true]"#,
            r#"["bad_input",true]"#,
        ],
    );
}

/// `deny_net`: a session given a deny list reaches what it does not name and not what it
/// does (ECONNREFUSED), through the protocol, `brig session net --deny-net` and both
/// clients; a server with an allow list and no consent refuses one; a bad rule is one
/// line naming `--deny-net`.
fn a_deny_list_refuses_what_it_names_by_protocol_cli_and_clients(mode: Mode) {
    if !require_tun(mode) {
        return;
    }
    // Two servers told apart by address, pinned as web.test and other.test.
    let TwoByAddress { web, other } = TwoByAddress::start();
    let server = Server::start(
        mode,
        &[&["--pool", "0"][..], &TwoByAddress::SERVE_ARGS].concat(),
    );
    let probe = format!(
        "{}{}",
        connect_to(WEB, web.http),
        connect_to(OTHER, other.http)
    );
    let id = create_session(&server, json!({}));
    assert_eq!(cell(&server, &id, &probe), "ok\nok\n");
    let denied = ask(
        &server,
        json!({"type": "session_network", "session": id, "allow_net": [], "deny_net": ["127.0.0.2"]}),
    );
    assert_eq!(denied["deny_net"], json!(["127.0.0.2"]), "{denied}");
    assert_eq!(cell(&server, &id, &probe), "ECONNREFUSED\nok\n");
    let bad = ask(
        &server,
        json!({"type": "session_network", "session": id, "deny_net": ["tcp://web.test:80"]}),
    );
    assert_error(&bad, &["--deny-net tcp://web.test:80", "takes no scheme"]);
    close(&server, &id);
    // The command line (its own session: the CLI runs as the mode's user; `net`
    // replaces the pins too).
    let session = |args: &[&str]| {
        let mut all = vec!["session", args[0], "--server", server.socket()];
        all.extend_from_slice(&args[1..]);
        run(mode, &all)
    };
    let id = assert_success(&session(&["create"])).trim().to_string();
    let cut = session(&[
        "net",
        "--session",
        &id,
        "--deny-net",
        "127.0.0.3",
        "--add-host",
        "web.test:127.0.0.2",
        "--add-host",
        "other.test:127.0.0.3",
    ]);
    assert_eq!(assert_success(&cut), "connections cut: 0\n");
    assert_eq!(cell(&server, &id, &probe), "ok\nECONNREFUSED\n");
    assert_success(&session(&["close", "--session", &id]));

    // The clients.
    let python = format!(
        "import sys\nfrom brig_client import Sandbox\nwith Sandbox(socket=sys.argv[1]) as sb:\n    sb.set_network(deny_net=['127.0.0.2'])\n    print(sb.run_code({probe:?}).stdout.strip().replace('\\n', ' '))\n"
    );
    assert_lines(&python_client(mode, &python, &server), &["ECONNREFUSED ok"]);
    if require_program("node", "apt install nodejs") {
        let node = format!(
            "const brig = require(process.argv[1]);\n(async () => {{\n  const sb = await brig.Sandbox.create({{ socket: process.argv[2] }});\n  await sb.setNetwork({{ denyNet: ['127.0.0.3'] }});\n  console.log((await sb.runCode({probe:?})).stdout.trim().replace('\\n', ' '));\n  await sb.close();\n}})().catch((error) => {{ console.error(error); process.exit(1); }});\n"
        );
        assert_lines(
            &run_node_client(mode, &node, server.socket()),
            &["ok ECONNREFUSED"],
        );
    }

    // A server with an allow list, no consent: a deny list lets out more.
    let strict = filtered_server(mode);
    let id = create_session(&strict, json!({}));
    let refused = ask(
        &strict,
        json!({"type": "session_network", "session": id, "deny_net": ["1.1.1.1"]}),
    );
    assert_error(
        &refused,
        &[
            "--deny-net 1.1.1.1: this server does not let clients ask for it",
            "--client-may allow-net",
        ],
    );
    close(&strict, &id);
}
