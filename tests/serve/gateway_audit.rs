//! `brig gateway --audit-log FILE` (src/gateway/audit.rs), as root and rootless: two
//! tenants drive E2B's SDK (create, `commands.run`, `files.write`, kill) and a wrong key
//! is refused (401); the gateway stopped, the log has one JSON line per request: each
//! create and kill with its tenant, sandbox id, status and what happened, the envd calls
//! with the tenant owning the sandbox and the envd port, the upload's bytes in, the 401
//! with no tenant. No API key appears anywhere in the file (the wrong one neither), and
//! the file is `0600`, its owner the gateway's uid (65534 rootless, as tests/common runs it).

use crate::common;
use crate::gateway::{Gateway, KEY_A, KEY_B, assert_passed};

use common::serve::Server;
use common::*;
use serde_json::Value;
use std::os::unix::fs::MetadataExt;

both_modes!(gateway_audit_log_has_every_request_with_its_tenant);

/// A key of the SDK's form that the gateway does not know.
const WRONG_KEY: &str = "e2b_000000000000000000000000000000000000dead";

/// argv: the gateway's URL, tenant B's key, the wrong key. Prints the sandboxes' ids.
const SCRIPT: &str = r#"
import json, sys
from e2b import Sandbox, AuthenticationException
key_b, wrong = sys.argv[2], sys.argv[3]
a = Sandbox.create()
assert a.commands.run("echo a").stdout == "a\n"
a.files.write("/home/user/upload", "x" * 10_000)
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

fn gateway_audit_log_has_every_request_with_its_tenant(mode: Mode) {
    let server = Server::start(mode, &[]);
    let dir = TempDir::new("gateway-audit").writable_by_all();
    let log = dir.path().join("audit.jsonl");
    let gateway = Gateway::start_with(mode, &server, &["--audit-log", log.to_str().unwrap()]);
    let script = format!("import sys\nsys.argv[2:] = [{KEY_B:?}, {WRONG_KEY:?}]\n{SCRIPT}");
    let Some(output) = gateway.sdk(KEY_A, &script) else {
        return;
    };
    let out = stdout(&output);
    assert_passed(Some(output));
    // Stopped, the gateway has appended every queued line.
    drop(gateway);
    let ids: Value = serde_json::from_str(out.lines().rev().nth(1).expect("the ids")).unwrap();
    let (a, b) = (ids["a"].as_str().unwrap(), ids["b"].as_str().unwrap());

    let text = std::fs::read_to_string(&log).expect("the audit log");
    for key in [KEY_A, KEY_B, WRONG_KEY] {
        assert!(!text.contains(key), "an API key in the audit log:\n{text}");
    }
    let meta = std::fs::metadata(&log).unwrap();
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
    let find = |what: &str, pick: &dyn Fn(&Value) -> bool| -> Vec<&Value> {
        let found: Vec<&Value> = lines.iter().filter(|line| pick(line)).collect();
        assert!(!found.is_empty(), "no line for {what} in:\n{text}");
        found
    };
    for (id, tenant) in [(a, "alice"), (b, "bob")] {
        let created = find("a create", &|line| {
            line["event"] == "created" && line["sandbox"] == id
        });
        assert_eq!(created.len(), 1, "{created:?}");
        assert_eq!(created[0]["tenant"], tenant, "{}", created[0]);
        assert_eq!(
            (
                &created[0]["method"],
                &created[0]["path"],
                &created[0]["status"]
            ),
            (
                &Value::from("POST"),
                &Value::from("/sandboxes"),
                &Value::from(201)
            ),
            "{}",
            created[0]
        );
        let killed = find("a kill", &|line| {
            line["event"] == "killed" && line["sandbox"] == id
        });
        assert_eq!(
            (
                &killed[0]["tenant"],
                &killed[0]["method"],
                &killed[0]["status"]
            ),
            (
                &Value::from(tenant),
                &Value::from("DELETE"),
                &Value::from(204)
            ),
            "{}",
            killed[0]
        );
        // Every request naming the sandbox is its tenant's; its command went to envd.
        for line in find("its requests", &|line| line["sandbox"] == id) {
            assert_eq!(line["tenant"], tenant, "{line}");
        }
        let commands = find("its command", &|line| {
            line["sandbox"] == id && line["path"] == "/process.Process/Start"
        });
        assert_eq!(
            (&commands[0]["port"], &commands[0]["status"]),
            (&Value::from(49983), &Value::from(200)),
            "{}",
            commands[0]
        );
        assert!(
            commands[0]["bytes_out"].as_u64().unwrap() > 0,
            "{}",
            commands[0]
        );
    }
    let upload = find("the upload", &|line| {
        line["sandbox"] == a && line["path"] == "/files" && line["method"] == "POST"
    });
    assert!(
        upload[0]["bytes_in"].as_u64().unwrap() >= 10_000,
        "{}",
        upload[0]
    );
    let refused = find("the wrong key", &|line| line["status"] == 401);
    assert_eq!(refused.len(), 1, "{refused:?}");
    assert!(refused[0]["tenant"].is_null(), "{}", refused[0]);
    assert_eq!(refused[0]["event"], "create_failed", "{}", refused[0]);
    assert!(
        refused[0]["message"]
            .as_str()
            .is_some_and(|message| message.contains("X-API-Key")),
        "{}",
        refused[0]
    );
}
