//! A session's secrets (`session_create`'s `secrets: [{name, value, hosts}]`, the clients'
//! `secrets=`, `brig session create --secret`): the jail holds a placeholder, brig puts
//! the value in the HTTPS request headers to the entitled host (the tests' TLS server,
//! its CA given to the server by `--upstream-ca`), and the value is in no reply, list,
//! error, server stderr or anything the jail can read. `brig gateway --tenant-secrets`
//! gives a tenant's secrets to its sandboxes, driven by E2B's pinned Python SDK. As root
//! and rootless.

use crate::common;

use common::memory::{descendants, memory_holds, pid_namespace};
use common::net::{Servers, require_tun};
use common::secrets::{SELF_PROBE, real_value};
use common::serve::{Server, ask, client_copy, create_session, run_node_client};
use common::*;
use serde_json::{Value, json};

both_modes!(
    a_session_secret_reaches_the_entitled_host_and_never_the_jail,
    bad_session_secrets_are_refused_naming_the_field_never_the_value,
    the_python_and_node_clients_and_the_command_line_give_secrets,
    the_gateway_gives_a_tenant_s_secrets_to_its_sandboxes_only,
);

const WEB: &str = "web.test";

/// A server whose sessions may reach the tests' TLS server as web.test, trusting its CA
/// upstream.
fn server_for(mode: Mode, servers: &Servers) -> Server {
    let (pin, rule) = (format!("{WEB}:127.0.0.1"), format!("{WEB}:{}", servers.tls));
    Server::start(
        mode,
        &[
            "--pool",
            "0",
            "--net",
            "filtered",
            "--add-host",
            &pin,
            "--allow-net",
            &rule,
            "--upstream-ca",
            servers.ca.to_str().unwrap(),
        ],
    )
}

/// The Authorization headers the TLS server received.
fn authorizations(servers: &Servers) -> Vec<String> {
    servers
        .log()
        .iter()
        .filter_map(|line| serde_json::from_str::<Value>(line).ok())
        .filter_map(|entry| entry["authorization"].as_str().map(str::to_string))
        .collect()
}

/// A command's reply in the session (it must succeed); its stdout.
fn exec(server: &Server, id: &str, script: &str) -> String {
    let reply = ask(
        server,
        json!({"type": "session_exec", "session": id, "command": ["sh", "-c", script]}),
    );
    assert_eq!(reply["type"], "exec", "{reply}");
    assert_eq!(reply["verdict"]["exit_code"], 0, "{reply}");
    reply["stdout"].as_str().unwrap_or_default().to_string()
}

fn curl_with_key(port: u16) -> String {
    format!("curl -sS -H \"Authorization: Bearer $API_KEY\" https://{WEB}:{port}/host && echo")
}

fn a_session_secret_reaches_the_entitled_host_and_never_the_jail(mode: Mode) {
    if !require_tun(mode) || !require_program("curl", "apt install curl") {
        return;
    }
    let servers = Servers::start();
    let mut server = server_for(mode, &servers);
    let value = real_value("session");
    let id = create_session(
        &server,
        json!({"secrets": [{"name": "API_KEY", "value": value, "hosts": [format!("{WEB}:{}", servers.tls)], "body": true}]}),
    );
    let script = format!(
        "{} && echo \"placeholder=$API_KEY\" && {SELF_PROBE}",
        curl_with_key(servers.tls)
    );
    let out = exec(&server, &id, &script);
    assert!(
        out.starts_with(&format!("{WEB}:{}\n", servers.tls)),
        "{out}"
    );
    assert!(out.contains("placeholder=brig-secret-api_key-"), "{out}");
    assert!(out.contains("files-done"), "{out}");
    assert_eq!(
        authorizations(&servers),
        vec![format!("Bearer {value}")],
        "{:?}",
        servers.log()
    );
    // `body: true`: a JSON body gets the value too (the server says how long a body it
    // read: the recomputed length).
    let posted = exec(
        &server,
        &id,
        &format!(
            "curl -sS -H 'Content-Type: application/json' --data \"{{\\\"key\\\":\\\"$API_KEY\\\"}}\" https://{WEB}:{}/record",
            servers.tls
        ),
    );
    let body = format!("{{\"key\":\"{value}\"}}");
    assert_eq!(posted, format!("got {} length\n", body.len()));
    let bodies: Vec<String> = servers
        .log()
        .iter()
        .filter_map(|line| serde_json::from_str::<Value>(line).ok())
        .filter_map(|entry| entry["body"].as_str().map(str::to_string))
        .collect();
    assert_eq!(bodies, [body]);
    // The session's jail (its init, and any interpreter) holds no copy in its memory;
    // the server's own processes do (the scan's control).
    let server_namespace = pid_namespace(server.pid());
    let (jail, ours): (Vec<u32>, Vec<u32>) = descendants(server.pid())
        .into_iter()
        .partition(|pid| pid_namespace(*pid) != server_namespace);
    let holding = |pids: &[u32]| -> Vec<(u32, bool)> {
        pids.iter()
            .filter_map(|pid| {
                memory_holds(*pid, value.as_bytes())
                    .ok()
                    .map(|holds| (*pid, holds))
            })
            .collect()
    };
    let (jail, ours) = (holding(&jail), holding(&ours));
    assert!(!jail.is_empty(), "no jail process found");
    let named: Vec<String> = jail
        .iter()
        .map(|(pid, holds)| {
            let cmdline =
                std::fs::read_to_string(format!("/proc/{pid}/cmdline")).unwrap_or_default();
            format!("{pid} {holds} {}", cmdline.replace('\0', " "))
        })
        .collect();
    assert!(
        jail.iter().all(|(_, holds)| !holds),
        "the value is in the session jail's memory: {named:?}"
    );
    assert!(
        ours.iter().any(|(_, holds)| *holds),
        "the scan found it nowhere: {ours:?}"
    );
    // The control: the same probe finds a value the session put in the jail itself.
    let control = ask(
        &server,
        json!({"type": "session_exec", "session": id, "env": [format!("LEAKED={value}")],
               "command": ["sh", "-c", SELF_PROBE]}),
    );
    assert!(
        control["stdout"].as_str().unwrap().contains(&value),
        "the probe would not notice: {control}"
    );
    // Nothing the server answers or prints holds it.
    let list = ask(&server, json!({"type": "session_list"}));
    assert_eq!(list["sessions"].as_array().unwrap().len(), 1, "{list}");
    assert!(!list.to_string().contains(&value), "{list}");
    let closed = ask(&server, json!({"type": "session_close", "session": id}));
    assert_eq!(closed["type"], "closed", "{closed}");
    let stopped = server.stop();
    assert!(stopped.status.success(), "{}", describe(&stopped));
    let stderr = String::from_utf8_lossy(&stopped.stderr);
    assert!(!stderr.contains(&value), "the server's stderr: {stderr}");
    assert!(!out.contains(&value), "the jail's output: {out}");
}

fn bad_session_secrets_are_refused_naming_the_field_never_the_value(mode: Mode) {
    if !require_tun(mode) {
        return;
    }
    let servers = Servers::start();
    let server = server_for(mode, &servers);
    let value = real_value("session");
    let entitled = format!("{WEB}:{}", servers.tls);
    let cases: Vec<(Value, &[&str])> = vec![
        (
            json!([{"name": "1KEY", "value": value, "hosts": [entitled]}]),
            &["secrets[0].name", "letters, digits and _"],
        ),
        (
            json!([{"name": "API_KEY", "value": value, "hosts": []}]),
            &["secrets[0].hosts", "no host is entitled"],
        ),
        (
            json!([{"name": "API_KEY", "value": format!("{value}\nX-Evil: 1"), "hosts": [entitled]}]),
            &["secrets[0].value", "line break"],
        ),
        (
            json!([{"name": "API_KEY", "value": value, "hosts": ["a b"]}]),
            &["secrets[0].hosts a b", "not a host name"],
        ),
        (
            json!([{"name": "API_KEY", "value": value, "hosts": ["elsewhere.test"]}]),
            &["secrets (API_KEY)", "elsewhere.test:443", "allow-net"],
        ),
        (
            json!([{"name": "K", "value": value, "hosts": [entitled]},
                   {"name": "K", "value": value, "hosts": [entitled]}]),
            &["secrets[1].name K", "given twice"],
        ),
        (
            json!([{"name": "API_KEY", "value": value, "hosts": [entitled], "env": "X"}]),
            &["unknown field `env`"],
        ),
    ];
    for (secrets, needles) in cases {
        let reply = ask(
            &server,
            json!({"type": "session_create", "secrets": secrets}),
        );
        assert_eq!(reply["type"], "error", "{secrets}: {reply}");
        let message = reply["message"].as_str().unwrap();
        for needle in needles {
            assert!(message.contains(needle), "{needle:?} not in {message:?}");
        }
        assert!(!message.contains('\n'), "{message:?}");
        assert!(
            !message.contains(&value),
            "the error shows the value: {message}"
        );
        assert_eq!(reply["kind"], "bad_input", "{reply}");
        assert_eq!(reply["exit_code"], 125, "{reply}");
    }
    // The server stays up, and nothing is left open.
    assert_eq!(server.status()["sessions"], 0);
    let list = ask(&server, json!({"type": "session_list"}));
    assert_eq!(list["sessions"], json!([]), "{list}");
}

const PYTHON_SCRIPT: &str = r#"
import json, sys
from brig_client import Sandbox, BrigError
socket, port = sys.argv[1], sys.argv[2]
hosts = [f"web.test:{port}"]
with Sandbox(socket, secrets=[{"name": "API_KEY", "env": "SECRET_SOURCE", "hosts": hosts}]) as sb:
    code = (
        "import os, urllib.request\n"
        f"r = urllib.request.Request('https://web.test:{port}/host', headers={{'Authorization': 'Bearer ' + os.environ['API_KEY']}})\n"
        "print(urllib.request.urlopen(r, timeout=30).read().decode(), os.environ['API_KEY'][:11])\n"
    )
    print(json.dumps(sb.run_code(code).stdout.strip()))
try:
    Sandbox(socket, secrets=[{"name": "API_KEY", "env": "NOT_SET_ANYWHERE", "hosts": hosts}])
except BrigError as error:
    print(json.dumps([error.kind, "NOT_SET_ANYWHERE" in error.message]))
"#;

const NODE_SCRIPT: &str = r#"
const brig = require(process.argv[1]);
const [socket, port, value] = [process.argv[2], "PORT", "VALUE"];
(async () => {
  const sb = await brig.Sandbox.create({ socket, secrets: [{ name: "API_KEY", value, hosts: [`web.test:${port}`] }] });
  const out = await sb.commands.run(`curl -sS -H "Authorization: Bearer $API_KEY" https://web.test:${port}/host; echo; echo "$API_KEY" | cut -c1-11`);
  console.log(JSON.stringify(out.stdout.replace(/\n/g, " ").trim()));
  await sb.close();
})().catch((error) => { console.log(String(error)); process.exit(1); });
"#;

fn the_python_and_node_clients_and_the_command_line_give_secrets(mode: Mode) {
    if !require_tun(mode) || !require_program("curl", "apt install curl") {
        return;
    }
    let servers = Servers::start();
    let server = server_for(mode, &servers);
    let value = real_value("session");
    let port = servers.tls.to_string();
    let expected = format!("\"{WEB}:{port} brig-secret\"");

    // Python: the value from the client's own environment (`env`).
    let client = client_copy("python");
    let mut python = command_as(
        mode,
        interpreter("python3"),
        &["-c", PYTHON_SCRIPT, server.socket(), &port],
    );
    python.env("PYTHONPATH", client.path().join("python"));
    python.env("SECRET_SOURCE", &value);
    let python = output_of(python);
    let lines = assert_success(&python);
    assert_eq!(
        lines.lines().collect::<Vec<_>>(),
        [expected.as_str(), r#"["bad_input", true]"#],
        "{}",
        describe(&python)
    );

    // Node: the value given as it is.
    let node = run_node_client(
        mode,
        &NODE_SCRIPT.replace("PORT", &port).replace("VALUE", &value),
        server.socket(),
    );
    assert_eq!(
        assert_success(&node).trim(),
        expected,
        "{}",
        describe(&node)
    );

    // The command line: --secret read on the client's side, from its environment.
    let entitled = format!("API_KEY={WEB}:{port}");
    let mut create = command(
        mode,
        &[
            "session",
            "create",
            "--server",
            server.socket(),
            "--secret",
            "API_KEY=env:SECRET_SOURCE",
            "--secret-host",
            &entitled,
        ],
    );
    create.env("SECRET_SOURCE", &value);
    let created = output_of(create);
    let id = assert_success(&created).trim().to_string();
    assert_eq!(id.len(), 32, "{}", describe(&created));
    let out = exec(&server, &id, &curl_with_key(servers.tls));
    assert_eq!(out, format!("{WEB}:{port}\n"));
    let closed = ask(&server, json!({"type": "session_close", "session": id}));
    assert_eq!(closed["type"], "closed", "{closed}");

    assert_eq!(
        authorizations(&servers),
        vec![format!("Bearer {value}"); 3],
        "{:?}",
        servers.log()
    );
}

/// Tenant A's sandbox (`sys.argv[2]`: the TLS server's port) gets API_KEY as a
/// placeholder and the server the value; tenant B's sandbox (its key `sys.argv[3]`) has
/// no API_KEY at all.
const GATEWAY_SCRIPT: &str = r#"
import sys
from e2b import Sandbox
port, other_key = sys.argv[2], sys.argv[3]
sbx = Sandbox.create()
result = sbx.commands.run(f'curl -sS -H "Authorization: Bearer $API_KEY" https://web.test:{port}/host; echo; echo "$API_KEY" | cut -c1-11')
assert result.stdout == f"web.test:{port}\nbrig-secret\n", result
sbx.kill()
other = Sandbox.create(api_key=other_key)
result = other.commands.run('echo "${API_KEY:-none}"')
assert result.stdout == "none\n", result
other.kill()
print("PASS")
"#;

fn the_gateway_gives_a_tenant_s_secrets_to_its_sandboxes_only(mode: Mode) {
    use crate::gateway::{Gateway, KEY_A, KEY_B, assert_passed, sdk_python};
    if !require_tun(mode) || !require_program("curl", "apt install curl") {
        return;
    }
    let Some(python) = sdk_python() else {
        return;
    };
    let servers = Servers::start();
    let server = server_for(mode, &servers);
    let value = real_value("session");
    let dir = TempDir::new("tenant-secrets");
    let key = dir.file("alice-key", &format!("{value}\n"));
    let file = dir.file(
        "secrets",
        &format!(
            "# alice's sandboxes call web.test with her key\nalice API_KEY=file:{} {WEB}:{}\n",
            key.display(),
            servers.tls
        ),
    );
    let gateway = Gateway::start_with(mode, &server, &["--tenant-secrets", file.to_str().unwrap()]);
    let port = servers.tls.to_string();
    let script = format!(
        "import sys\nsys.argv[2:] = {:?}\n{GATEWAY_SCRIPT}",
        [port.as_str(), KEY_B]
    );
    let output = gateway.sdk_of(python, KEY_A, &script);
    assert!(
        !String::from_utf8_lossy(&output.stdout).contains(&value),
        "{}",
        describe(&output)
    );
    assert_passed(Some(output));
    assert_eq!(
        authorizations(&servers),
        vec![format!("Bearer {value}")],
        "{:?}",
        servers.log()
    );
}
