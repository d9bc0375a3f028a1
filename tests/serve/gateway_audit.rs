//! `brig gateway --audit-log FILE` (src/gateway/audit.rs), as root and rootless: a host's
//! gateway (`--host-id h0`) and a router in front of it, each with its log; two tenants
//! drive E2B's SDKs through the router (create, `commands.run`, `files.write`, `run_code`,
//! kill) and a wrong key is refused (401, by the router). Both stopped, the logs have one
//! JSON line per request: in the host's, each create and kill with its tenant, sandbox id,
//! status and what happened, the envd and interpreter calls with the tenant owning the
//! sandbox and their ports, the upload's bytes in; in the router's, the creates and kills
//! with their tenants, the 401 with none, and its keyless calls (envd) joined to the host's
//! line of the same request by `host_request_id`. No API key appears anywhere in either
//! file (the wrong one neither); each is `0600`, its owner the gateway's uid (65534
//! rootless, as tests/common runs it).

use crate::common;
use crate::gateway::{Gateway, KEY_A, KEY_B, assert_passed};

use common::serve::Server;
use common::*;
use serde_json::Value;
use std::os::unix::fs::MetadataExt;

both_modes!(gateway_audit_log_has_every_request_with_its_tenant);

/// A key of the SDK's form that the gateway does not know.
const WRONG_KEY: &str = "e2b_000000000000000000000000000000000000dead";

/// argv: the router's URL, tenant B's key, the wrong key. Prints the sandboxes' ids.
const SCRIPT: &str = r#"
import json, sys
from e2b_code_interpreter import Sandbox
from e2b import AuthenticationException
key_b, wrong = sys.argv[2], sys.argv[3]
a = Sandbox.create()
assert a.commands.run("echo a").stdout == "a\n"
a.files.write("/home/user/upload", "x" * 10_000)
assert a.run_code("6 * 7").text == "42"
b = Sandbox.create(api_key=key_b)
assert b.commands.run("echo b").stdout == "b\n"
try:
    Sandbox.create(api_key=wrong)
    raise SystemExit("a wrong key made a sandbox")
except AuthenticationException as err:
    print("refused:", err)
a.kill()
b.kill()
print(json.dumps({"a": a.sandbox_id, "b": b.sandbox_id}))
print("PASS")
"#;

/// The lines of the audit log at `path`, after the checks every line and the file pass:
/// the schema and fields, ids unique, no API key, mode 0600, owned by the gateway's uid.
fn read_log(mode: Mode, path: &std::path::Path) -> (String, Vec<Value>) {
    let text = std::fs::read_to_string(path).expect("the audit log");
    for key in [KEY_A, KEY_B, WRONG_KEY] {
        assert!(!text.contains(key), "an API key in the audit log:\n{text}");
    }
    let meta = std::fs::metadata(path).unwrap();
    assert_eq!(meta.mode() & 0o777, 0o600, "the audit log's mode");
    let gateway_uid = match mode {
        Mode::Root => 0,
        Mode::Rootless => 65534,
    };
    assert_eq!(meta.uid(), gateway_uid, "the audit log's owner");
    let lines: Vec<Value> = text
        .lines()
        .map(|line| serde_json::from_str(line).unwrap_or_else(|err| panic!("{line:?}: {err}")))
        .collect();
    for line in &lines {
        assert_eq!(line["schema"], "brig-gateway-audit/1", "{line}");
        for field in [
            "time",
            "request_id",
            "method",
            "path",
            "status",
            "bytes_in",
            "bytes_out",
            "duration_ms",
        ] {
            assert!(!line[field].is_null(), "{field} in {line}");
        }
    }
    let ids: std::collections::HashSet<&str> = lines
        .iter()
        .map(|line| line["request_id"].as_str().unwrap())
        .collect();
    assert_eq!(ids.len(), lines.len(), "request ids repeat");
    (text, lines)
}

/// `line` has each of `fields` with its value.
fn assert_fields(line: &Value, fields: &[(&str, Value)]) {
    for (field, value) in fields {
        assert_eq!(&line[field], value, "{field} of {line}");
    }
}

/// The lines `pick` takes; at least one.
fn find<'l>(
    text: &str,
    lines: &'l [Value],
    what: &str,
    pick: impl Fn(&Value) -> bool,
) -> Vec<&'l Value> {
    let found: Vec<&Value> = lines.iter().filter(|line| pick(line)).collect();
    assert!(!found.is_empty(), "no line for {what} in:\n{text}");
    found
}

fn gateway_audit_log_has_every_request_with_its_tenant(mode: Mode) {
    let Some(python) = common::e2b::sdk_python() else {
        return;
    };
    let server = Server::start(mode, &[]);
    let dir = TempDir::new("gateway-audit").writable_by_all();
    let (host_log, router_log) = (
        dir.path().join("host.jsonl"),
        dir.path().join("router.jsonl"),
    );
    let host = Gateway::start_with(
        mode,
        &server,
        &["--host-id", "h0", "--audit-log", host_log.to_str().unwrap()],
    );
    let keys = dir.file("keys", &format!("{KEY_A} alice\n{KEY_B} bob\n"));
    let peers = format!("h0={}", host.url);
    let (router, router_url) = crate::gateway::spawn_gateway(
        mode,
        &[
            "gateway",
            "--listen",
            "127.0.0.1:0",
            "--peers",
            &peers,
            "--api-keys",
            keys.to_str().unwrap(),
            "--audit-log",
            router_log.to_str().unwrap(),
        ],
    );
    let script = format!("import sys\nsys.argv[2:] = [{KEY_B:?}, {WRONG_KEY:?}]\n{SCRIPT}");
    let mut sdk = std::process::Command::new(python);
    sdk.args(["-c", &script, &router_url])
        .env_clear()
        .env("PATH", "/usr/bin:/bin")
        .env("E2B_API_URL", &router_url)
        .env("E2B_SANDBOX_URL", &router_url)
        .env("E2B_API_KEY", KEY_A)
        .stdin(std::process::Stdio::null());
    let output = output_of(sdk);
    let out = stdout(&output);
    assert_passed(Some(output));
    // Stopped, each gateway has appended every queued line.
    kill(router.pid(), libc::SIGTERM);
    let stopped = router.wait();
    assert_eq!(code(&stopped), 0, "the router: {}", describe(&stopped));
    drop(host);
    let ids: Value = serde_json::from_str(out.lines().rev().nth(1).expect("the ids")).unwrap();
    let (a, b) = (ids["a"].as_str().unwrap(), ids["b"].as_str().unwrap());
    assert!(a.starts_with("h0-") && b.starts_with("h0-"), "{ids}");

    let (text, lines) = read_log(mode, &host_log);
    let (router_text, router_lines) = read_log(mode, &router_log);
    for (id, tenant) in [(a, "alice"), (b, "bob")] {
        for (text, lines) in [(&text, &lines), (&router_text, &router_lines)] {
            let created = find(text, lines, "a create", |line| {
                line["event"] == "created" && line["sandbox"] == id
            });
            assert_eq!(created.len(), 1, "{created:?}");
            assert_fields(
                created[0],
                &[
                    ("tenant", tenant.into()),
                    ("method", "POST".into()),
                    ("status", 201.into()),
                ],
            );
            let killed = find(text, lines, "a kill", |line| {
                line["event"] == "killed" && line["sandbox"] == id
            });
            assert_fields(
                killed[0],
                &[
                    ("tenant", tenant.into()),
                    ("method", "DELETE".into()),
                    ("status", 204.into()),
                ],
            );
        }
        // On the host, every request naming the sandbox is its tenant's, with a key or
        // without (its command went to envd).
        for line in find(&text, &lines, "its requests", |line| line["sandbox"] == id) {
            assert_eq!(line["tenant"], tenant, "{line}");
        }
        let command = find(&text, &lines, "its command", |line| {
            line["sandbox"] == id && line["path"] == "/process.Process/Start"
        })[0];
        assert_fields(command, &[("port", 49983.into()), ("status", 200.into())]);
        assert!(command["bytes_out"].as_u64().unwrap() > 0, "{command}");
        // The router's line of the same command has no tenant (no key came), and the
        // host's line's id.
        let routed = find(&router_text, &router_lines, "the routed command", |line| {
            line["sandbox"] == id && line["path"] == "/process.Process/Start"
        })[0];
        assert!(routed["tenant"].is_null(), "{routed}");
        let joined = find(&text, &lines, "the routed command's host line", |line| {
            line["request_id"] == routed["host_request_id"]
        })[0];
        assert_eq!(
            joined["request_id"], command["request_id"],
            "{routed} -> {joined}"
        );
    }
    let upload = find(&text, &lines, "the upload", |line| {
        line["sandbox"] == a && line["path"] == "/files" && line["method"] == "POST"
    })[0];
    assert!(upload["bytes_in"].as_u64().unwrap() >= 10_000, "{upload}");
    let code = find(&text, &lines, "the interpreter's run", |line| {
        line["sandbox"] == a && line["path"] == "/execute"
    })[0];
    assert_fields(
        code,
        &[
            ("tenant", "alice".into()),
            ("port", 49999.into()),
            ("status", 200.into()),
        ],
    );
    // The wrong key: refused by the router, which has the keys; the host never saw it.
    let refused = find(&router_text, &router_lines, "the wrong key", |line| {
        line["status"] == 401
    });
    assert_eq!(refused.len(), 1, "{refused:?}");
    assert_fields(
        refused[0],
        &[("tenant", Value::Null), ("event", "create_failed".into())],
    );
    assert!(
        refused[0]["message"]
            .as_str()
            .is_some_and(|message| message.contains("X-API-Key")),
        "{}",
        refused[0]
    );
    assert!(lines.iter().all(|line| line["status"] != 401), "{text}");
}
