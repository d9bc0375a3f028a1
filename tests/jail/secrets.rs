//! `--secret`: a key the jail uses without ever holding it. curl in the jail sends
//! `Authorization: Bearer $API_KEY` to the tests' TLS server (its CA given to brig by
//! `--upstream-ca`); brig terminates that TLS with the jail's own CA, puts the real value
//! in the header, and connects upstream verifying the server's certificate. The server
//! sees the value; the jail's environment, /proc/PID/environ and files, the verdict and
//! brig's stderr never do. A server brig cannot verify is refused.

use crate::common;

use common::limits::{jail, jail_with_verdict};
use common::net::{Servers, require_tun};
use common::secrets::{SELF_PROBE, real_value};
use common::*;
use serde_json::Value;
use std::path::{Path, PathBuf};
use std::process::Command;

both_modes!(
    a_secret_reaches_the_entitled_host_and_never_the_jail,
    an_upstream_brig_cannot_verify_is_refused,
    a_placeholder_sent_where_it_is_not_entitled_goes_unchanged_and_is_reported,
    with_secret_strict_a_placeholder_sent_where_it_is_not_entitled_is_refused,
    a_request_for_another_host_on_a_decrypted_connection_is_refused,
    python_urllib_and_node_fetch_trust_the_jails_ca_and_get_the_secret_in,
    with_secret_body_the_value_goes_into_json_bodies_too,
    inside_a_decrypted_connection_a_slow_head_h2c_and_another_host_are_refused,
    python_requests_and_git_get_the_value_in_only_at_the_entitled_host,
);

const WEB: &str = "web.test";

/// The tests' servers, and the arguments that give the jail API_KEY for the TLS server
/// (its value read from a file of `dir`).
struct Setup {
    servers: Servers,
    dir: TempDir,
    value: String,
    args: Vec<String>,
}

fn setup() -> Setup {
    let servers = Servers::start();
    let dir = TempDir::new("secret");
    let value = real_value("real");
    let args = secret_args(&servers, &dir, &value);
    Setup {
        servers,
        dir,
        value,
        args,
    }
}

/// Every reason the verdict gives for a refused or cut connection.
fn reasons(verdict: &Value) -> Vec<&str> {
    verdict["network"]["connections"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|entry| entry["reason"].as_str())
        .collect()
}

/// `--add-host`, `--allow-net` for the TLS server, and the secret API_KEY entitled to it,
/// read from a file of `dir`.
fn secret_args(servers: &Servers, dir: &TempDir, value: &str) -> Vec<String> {
    let file = dir.file("api-key", &format!("{value}\n"));
    vec![
        "--add-host".into(),
        format!("{WEB}:127.0.0.1"),
        "--allow-net".into(),
        format!("{WEB}:{}", servers.tls),
        "--secret".into(),
        format!("API_KEY=file:{}", file.display()),
        "--secret-host".into(),
        format!("API_KEY={WEB}:{}", servers.tls),
    ]
}

fn strs(owned: &[String]) -> Vec<&str> {
    owned.iter().map(String::as_str).collect()
}

/// The server's log lines of requests that carried an Authorization header.
fn authorizations(servers: &Servers) -> Vec<String> {
    servers
        .log()
        .iter()
        .filter_map(|line| serde_json::from_str::<Value>(line).ok())
        .filter_map(|entry| entry["authorization"].as_str().map(str::to_string))
        .collect()
}

fn a_secret_reaches_the_entitled_host_and_never_the_jail(mode: Mode) {
    if !require_tun(mode) || !require_program("curl", "apt install curl") {
        return;
    }
    let Setup {
        servers,
        dir: _dir,
        value,
        mut args,
    } = setup();
    args.extend(["--upstream-ca".into(), servers.ca.display().to_string()]);
    // curl finds the jail's CA through CURL_CA_BUNDLE; then everything the jail can see
    // of itself (SELF_PROBE), for the test to search.
    let script = format!(
        "curl -sS -H \"Authorization: Bearer $API_KEY\" https://{WEB}:{tls}/host && echo && \
         curl -sS -o /dev/null https://{WEB}:{tls}/in-url?key=$API_KEY && \
         echo \"placeholder=$API_KEY\" && {SELF_PROBE}",
        tls = servers.tls
    );
    let (done, verdict) = jail_with_verdict(mode, &strs(&args), &["sh", "-c", &script]);
    let out = assert_success(&done.output);
    // The control: the same probe finds a value that is in the jail's environment.
    let control_env = format!("API_KEY={value}");
    let (control, _) = jail_with_verdict(mode, &["--env", &control_env], &["sh", "-c", SELF_PROBE]);
    let control = assert_success(&control.output);
    assert!(
        control.contains(&value) && control.contains("files-done"),
        "the probe would not notice: {control}"
    );
    assert!(
        out.starts_with(&format!("{WEB}:{}\n", servers.tls)),
        "{}",
        describe(&done.output)
    );
    assert!(out.contains("placeholder=brig-secret-api_key-"), "{out}");
    assert!(out.contains("files-done"), "{out}");
    // The server got the real value, in the header, exactly once.
    assert_eq!(
        authorizations(&servers),
        vec![format!("Bearer {value}")],
        "{:?}",
        servers.log()
    );
    // Only header lines get the value: a placeholder in the URL goes as it is.
    let log = servers.log().join("\n");
    assert!(
        log.contains("/in-url?key=brig-secret-api_key-") && !log.contains(&format!("key={value}")),
        "{log}"
    );
    // Nothing the jail or the operator sees holds it.
    let stderr = String::from_utf8_lossy(&done.output.stderr);
    for (what, text) in [
        ("the jail's output", out.as_str()),
        ("brig's stderr", &stderr),
        ("the verdict", &verdict.to_string()),
    ] {
        assert!(!text.contains(&value), "{what} holds the secret: {text}");
    }
    // The connection was relayed (and judged) like any other.
    let connections = verdict["network"]["connections"].as_array().unwrap();
    assert!(
        connections
            .iter()
            .any(|entry| entry["name"] == WEB && entry["allowed"] == true),
        "{verdict}"
    );
}

/// Without `--upstream-ca` the tests' server has a certificate from a CA brig does not
/// trust (for the verifier the same case as a self-signed one): brig refuses the
/// connection, the jail's curl fails, and the value never leaves brig.
fn an_upstream_brig_cannot_verify_is_refused(mode: Mode) {
    if !require_tun(mode) || !require_program("curl", "apt install curl") {
        return;
    }
    let Setup {
        servers,
        dir: _dir,
        value,
        args,
    } = setup();
    let script = format!(
        "curl -sS -H \"Authorization: Bearer $API_KEY\" https://{WEB}:{tls}/host; echo curl=$?",
        tls = servers.tls
    );
    let (done, verdict) = jail_with_verdict(mode, &strs(&args), &["sh", "-c", &script]);
    let out = assert_success(&done.output);
    // curl: 35 (TLS connect error) or 56 (receive failure): the jail saw the reset.
    assert!(
        out.contains("curl=35") || out.contains("curl=56"),
        "{}",
        describe(&done.output)
    );
    assert!(authorizations(&servers).is_empty(), "{:?}", servers.log());
    let refused = verdict["network"]["connections"]
        .as_array()
        .unwrap()
        .iter()
        .find(|entry| entry["name"] == WEB && entry["allowed"] == false)
        .unwrap_or_else(|| panic!("no refused connection: {verdict}"))
        .clone();
    let reason = refused["reason"].as_str().unwrap_or_default();
    assert!(
        reason.contains("upstream TLS of web.test") && reason.contains("--upstream-ca"),
        "{verdict}"
    );
    assert!(!verdict.to_string().contains(&value), "{verdict}");
}

/// API_KEY entitled to web.test (TLS), OTHER to other.test (TLS), both read from files;
/// web.test's cleartext port allowed too. The jail sends OTHER's placeholder to web.test
/// over TLS (decrypted, for API_KEY) and API_KEY's over cleartext HTTP.
fn misdirected(mode: Mode, strict: bool) -> (String, Value, Vec<String>, [String; 2]) {
    let Setup {
        servers,
        dir,
        value,
        mut args,
    } = setup();
    let other = format!("{value}-other");
    let other_file = dir.file("other-key", &other);
    args.extend([
        "--upstream-ca".into(),
        servers.ca.display().to_string(),
        "--allow-net".into(),
        format!("{WEB}:{}", servers.http),
        "--add-host".into(),
        "other.test:127.0.0.1".into(),
        "--allow-net".into(),
        format!("other.test:{}", servers.tls),
        "--secret".into(),
        format!("OTHER=file:{}", other_file.display()),
        "--secret-host".into(),
        format!("OTHER=other.test:{}", servers.tls),
    ]);
    if strict {
        args.push("--secret-strict".into());
    }
    let script = format!(
        "echo \"$API_KEY $OTHER\"; \
         curl -sS -H \"Authorization: Bearer $OTHER\" https://{WEB}:{tls}/host; echo \" tls=$?\"; \
         curl -sS -H \"Authorization: Bearer $API_KEY\" http://{WEB}:{http}/host; echo \" http=$?\"",
        tls = servers.tls,
        http = servers.http
    );
    let (done, verdict) = jail_with_verdict(mode, &strs(&args), &["sh", "-c", &script]);
    let out = assert_success(&done.output);
    let stderr = String::from_utf8_lossy(&done.output.stderr).to_string();
    for text in [&out, &stderr, &verdict.to_string()] {
        assert!(!text.contains(&value) && !text.contains(&other), "{text}");
    }
    let seen = authorizations(&servers);
    let placeholders: Vec<&str> = out.lines().next().unwrap_or_default().split(' ').collect();
    assert_eq!(placeholders.len(), 2, "{out}");
    let placeholders = [placeholders[0].to_string(), placeholders[1].to_string()];
    for authorization in &seen {
        assert!(
            !authorization.contains(&value) && !authorization.contains(&other),
            "a value reached a host not entitled to it: {seen:?}"
        );
    }
    (format!("{out}{stderr}"), verdict, seen, placeholders)
}

fn a_placeholder_sent_where_it_is_not_entitled_goes_unchanged_and_is_reported(mode: Mode) {
    if !require_tun(mode) || !require_program("curl", "apt install curl") {
        return;
    }
    let (output, verdict, seen, [api_key, other]) = misdirected(mode, false);
    assert!(
        output.contains(&format!("{WEB}:"))
            && output.contains(" tls=0")
            && output.contains(" http=0"),
        "{output}"
    );
    assert_eq!(
        seen,
        vec![format!("Bearer {other}"), format!("Bearer {api_key}")],
        "each placeholder arrives as it was sent"
    );
    let reports = verdict["network"]["secret_placeholders"]
        .as_array()
        .unwrap_or_else(|| panic!("no secret_placeholders: {verdict}"));
    let reports: Vec<&str> = reports.iter().filter_map(Value::as_str).collect();
    assert_eq!(reports.len(), 2, "{verdict}");
    assert!(
        reports
            .iter()
            .all(|report| report.starts_with("secret placeholder sent to web.test, not entitled")),
        "{reports:?}"
    );
    assert!(
        output.contains("secret placeholder sent to web.test, not entitled (OTHER)")
            && output.contains("secret placeholder sent to web.test, not entitled (API_KEY)"),
        "stderr names both: {output}"
    );
}

fn with_secret_strict_a_placeholder_sent_where_it_is_not_entitled_is_refused(mode: Mode) {
    if !require_tun(mode) || !require_program("curl", "apt install curl") {
        return;
    }
    let (output, verdict, seen, _) = misdirected(mode, true);
    assert!(
        !output.contains(" tls=0") && !output.contains(" http=0"),
        "{output}"
    );
    assert!(seen.is_empty(), "no request reached the server: {seen:?}");
    let reasons = reasons(&verdict);
    assert_eq!(
        reasons
            .iter()
            .filter(
                |reason| reason.contains("not entitled") && reason.ends_with("(--secret-strict)")
            )
            .count(),
        2,
        "{verdict}"
    );
}

/// On a connection brig decrypted for web.test, a later request naming another host (an
/// allowed one, even) is refused before it reaches the server: each request is judged.
fn a_request_for_another_host_on_a_decrypted_connection_is_refused(mode: Mode) {
    if !require_tun(mode) || !require_program("curl", "apt install curl") {
        return;
    }
    let Setup {
        servers,
        dir: _dir,
        value,
        mut args,
    } = setup();
    args.extend([
        "--upstream-ca".into(),
        servers.ca.display().to_string(),
        "--add-host".into(),
        "other.test:127.0.0.1".into(),
        "--allow-net".into(),
        format!("other.test:{}", servers.tls),
    ]);
    // One curl, one connection: the first request for web.test, the second with Host
    // other.test (curl reuses the connection for the same URL authority).
    let script = format!(
        "curl -sS -H \"Authorization: Bearer $API_KEY\" https://{WEB}:{tls}/host \
         -: -H 'Host: other.test' -H \"Authorization: Bearer $API_KEY\" https://{WEB}:{tls}/host; echo \" curl=$?\"",
        tls = servers.tls
    );
    let (done, verdict) = jail_with_verdict(mode, &strs(&args), &["sh", "-c", &script]);
    let out = assert_success(&done.output);
    assert!(
        out.starts_with(&format!("{WEB}:{}", servers.tls)) && !out.contains(" curl=0"),
        "{}",
        describe(&done.output)
    );
    let log = servers.log();
    let hosts: Vec<String> = log
        .iter()
        .filter_map(|line| serde_json::from_str::<Value>(line).ok())
        .filter_map(|entry| entry["host"].as_str().map(str::to_string))
        .collect();
    assert_eq!(hosts, vec![format!("{WEB}:{}", servers.tls)], "{log:?}");
    assert_eq!(authorizations(&servers), vec![format!("Bearer {value}")]);
    let reasons = reasons(&verdict);
    assert!(
        reasons.iter().any(|reason| reason.starts_with(
            "a request for other.test on a TLS connection brig decrypted for web.test"
        )),
        "{verdict}"
    );
}

/// `brig check` shows each secret by name and host, and its placeholder, never the value.
#[test]
fn check_lists_secrets_by_name_and_host_never_the_value() {
    let dir = TempDir::new("secret-check");
    let value = real_value("real");
    let key = dir.file("api-key", &value);
    let config = dir.file(
        "secret.yaml",
        &format!(
            "allow-net: [api.example.com:443]\nsecret: ['API_KEY=file:{}']\nsecret-host: ['API_KEY=api.example.com:443']\ncommand: [true]\n",
            key.display()
        ),
    );
    let output = run(Mode::Root, &["check", "--config", config.to_str().unwrap()]);
    let out = assert_success(&output);
    for needle in [
        "secrets:\n  - name: API_KEY\n    hosts:\n    - api.example.com:443",
        "- API_KEY=brig-secret-api_key-",
        "- SSL_CERT_FILE=/etc/brig-ca-bundle.pem",
        "- NODE_EXTRA_CA_CERTS=/etc/brig-ca-bundle.pem",
    ] {
        assert!(out.contains(needle), "{needle}: {out}");
    }
    assert!(!out.contains(&value), "{out}");
}

/// Each bad secret flag: one line naming the flag and the fix, exit 125, nothing run.
#[test]
fn bad_secret_flags_are_refused_before_anything_starts() {
    let dir = TempDir::new("secret-input");
    let key = dir.file("api-key", "sk-never-printed\n");
    let file = format!("API_KEY=file:{}", key.display());
    let missing = format!("API_KEY=file:{}/missing", dir.str());
    let not_pem = dir.file("not.pem", "hello\n");
    let cases: Vec<(Vec<&str>, Vec<&str>)> = vec![
        (
            vec!["--secret", "API_KEY"],
            vec!["--secret API_KEY", "NAME=env:VAR"],
        ),
        (
            vec!["--secret", &missing, "--secret-host", "API_KEY=a.test"],
            vec!["--secret API_KEY=file:", "give a readable file"],
        ),
        (
            vec![
                "--secret",
                "API_KEY=env:BRIG_TEST_UNSET_VARIABLE",
                "--secret-host",
                "API_KEY=a.test",
            ],
            vec!["BRIG_TEST_UNSET_VARIABLE is not set", "export it"],
        ),
        (
            vec!["--secret", &file],
            vec!["--secret API_KEY", "add --secret-host API_KEY=HOST"],
        ),
        (
            vec!["--secret", &file, "--secret-host", "API_KEY=b.test"],
            vec!["--secret-host API_KEY=b.test", "add --allow-net b.test:443"],
        ),
        (
            vec!["--secret", &file, "--secret-host", "OTHER=a.test"],
            vec!["--secret-host OTHER=a.test", "no --secret is named OTHER"],
        ),
        (
            vec!["--secret", &file, "--secret-host", "API_KEY=a.test:0"],
            vec!["--secret-host API_KEY=a.test:0", "1-65535"],
        ),
        (
            vec![
                "--secret",
                &file,
                "--secret-host",
                "API_KEY=a.test",
                "--upstream-ca",
                not_pem.to_str().unwrap(),
            ],
            vec!["--upstream-ca", "no certificate"],
        ),
        (
            vec!["--net", "host", "--secret", &file],
            vec!["--secret", "--net filtered"],
        ),
    ];
    for (flags, needles) in cases {
        let mut args = vec!["run"];
        if !flags.contains(&"--net") {
            args.extend(["--allow-net", "a.test:443"]);
        }
        args.extend(flags.iter().copied());
        args.extend(["--", "true"]);
        let output = run(Mode::Root, &args);
        assert_one_line_error(&output, &needles);
        assert!(
            !String::from_utf8_lossy(&output.stderr).contains("sk-never-printed"),
            "{}",
            describe(&output)
        );
    }
}

/// Python's urllib (OpenSSL, through SSL_CERT_FILE) and Node's fetch (through
/// NODE_EXTRA_CA_CERTS) trust the jail's CA with no change to the program, and the
/// server gets the real value from each. (Python requests reads REQUESTS_CA_BUNDLE, set
/// the same way; this machine's python3 has no requests to run.)
fn python_urllib_and_node_fetch_trust_the_jails_ca_and_get_the_secret_in(mode: Mode) {
    if !require_tun(mode) || !require_program("node", "apt install nodejs") {
        return;
    }
    let Setup {
        servers,
        dir: _dir,
        value,
        mut args,
    } = setup();
    args.extend(["--upstream-ca".into(), servers.ca.display().to_string()]);
    let url = format!("https://{WEB}:{}/host", servers.tls);
    let python_code = format!(
        "import os, urllib.request\n\
         request = urllib.request.Request('{url}', headers={{'Authorization': 'Bearer ' + os.environ['API_KEY']}})\n\
         print(urllib.request.urlopen(request).read().decode())"
    );
    let node_code = format!(
        "fetch('{url}', {{headers: {{Authorization: 'Bearer ' + process.env.API_KEY}}}}).then(r => r.text()).then(t => console.log(t))"
    );
    args.extend([
        "--env".into(),
        format!("PY={python_code}"),
        "--env".into(),
        format!("NODE={node_code}"),
    ]);
    let script = format!("{} -c \"$PY\" && node -e \"$NODE\"", interpreter("python3"));
    let (done, verdict) = jail_with_verdict(mode, &strs(&args), &["sh", "-c", &script]);
    let out = assert_success(&done.output);
    let host = format!("{WEB}:{}", servers.tls);
    assert_eq!(
        out.lines().collect::<Vec<_>>(),
        [host.as_str(), host.as_str()],
        "{}",
        describe(&done.output)
    );
    assert_eq!(
        authorizations(&servers),
        vec![format!("Bearer {value}"), format!("Bearer {value}")]
    );
    let stderr = String::from_utf8_lossy(&done.output.stderr);
    for text in [out.as_str(), &stderr, &verdict.to_string()] {
        assert!(!text.contains(&value), "{text}");
    }
}

/// The bodies the TLS server read at `/record` (as its log has them).
fn bodies(servers: &Servers) -> Vec<(String, bool)> {
    servers
        .log()
        .iter()
        .filter_map(|line| serde_json::from_str::<Value>(line).ok())
        .filter_map(|entry| {
            let body = entry["body"].as_str()?.to_string();
            Some((body, entry["chunked"].as_bool()?))
        })
        .collect()
}

/// Python in the jail: a JSON body by Content-Length (urllib), then a chunked one
/// (http.client) whose placeholder is split across two chunks, then an
/// application/octet-stream body (not rewritten).
const BODY_PYTHON: &str = r#"
import http.client, json, os, ssl, sys, urllib.request
port, key = int(sys.argv[1]), os.environ["API_KEY"].encode()
url = f"https://web.test:{port}/record"
body = json.dumps({"model": "m", "api_key": key.decode()}).encode()
request = urllib.request.Request(url, data=body, headers={"Content-Type": "application/json"})
print(urllib.request.urlopen(request, timeout=30).read().decode().strip())
connection = http.client.HTTPSConnection("web.test", port, context=ssl.create_default_context(), timeout=30)
pieces = iter([b'{"split": "' + key[:7], key[7:] + b'"}'])
connection.request("POST", "/record", body=pieces, headers={"Content-Type": "application/json"}, encode_chunked=True)
print(connection.getresponse().read().decode().strip())
connection.request("POST", "/record", body=b"raw " + key, headers={"Content-Type": "application/octet-stream"})
print(connection.getresponse().read().decode().strip())
"#;

/// `--secret-body API_KEY`: the placeholder in a JSON body to the entitled host is
/// replaced and the framing follows (curl's Content-Length body and Python's, a chunked
/// body with the placeholder split across chunks); an octet-stream body goes unchanged;
/// without `--secret-body` (the control) every body arrives with the placeholder.
fn with_secret_body_the_value_goes_into_json_bodies_too(mode: Mode) {
    if !require_tun(mode)
        || !require_program("curl", "apt install curl")
        || !require_program("python3", "apt install python3")
    {
        return;
    }
    for body_flag in [true, false] {
        let Setup {
            servers,
            dir: _dir,
            value,
            mut args,
        } = setup();
        args.extend(["--upstream-ca".into(), servers.ca.display().to_string()]);
        if body_flag {
            args.extend(["--secret-body".into(), "API_KEY".into()]);
        }
        let tls = servers.tls;
        let script = format!(
            "curl -sS -H 'Content-Type: application/json' --data \"{{\\\"key\\\":\\\"$API_KEY\\\"}}\" https://{WEB}:{tls}/record && \
             python3 -c \"$1\" {tls} && echo \"placeholder=$API_KEY\""
        );
        let (done, verdict) = jail_with_verdict(
            mode,
            &strs(&args),
            &["sh", "-c", &script, "sh", BODY_PYTHON],
        );
        let out = assert_success(&done.output);
        let placeholder = out
            .lines()
            .find_map(|line| line.strip_prefix("placeholder="))
            .unwrap_or_else(|| panic!("{}", describe(&done.output)))
            .to_string();
        let sent = if body_flag { &value } else { &placeholder };
        let expected = vec![
            (format!("{{\"key\":\"{sent}\"}}"), false),
            (
                format!("{{\"model\": \"m\", \"api_key\": \"{sent}\"}}"),
                false,
            ),
            (format!("{{\"split\": \"{sent}\"}}"), true),
            (format!("raw {placeholder}"), false),
        ];
        assert_eq!(
            bodies(&servers),
            expected,
            "--secret-body {body_flag}: {out}"
        );
        // The replies name the length the server read: the recomputed one.
        let lengths: Vec<&str> = out
            .lines()
            .filter(|line| line.starts_with("got "))
            .collect();
        let length = |body: &str| format!("got {} {}", body.len(), "length");
        assert_eq!(lengths.len(), 4, "{out}");
        assert_eq!(lengths[0], length(&expected[0].0), "{out}");
        assert_eq!(
            lengths[2],
            format!("got {} chunked", expected[2].0.len()),
            "{out}"
        );
        for text in [
            out.as_str(),
            &String::from_utf8_lossy(&done.output.stderr),
            &verdict.to_string(),
        ] {
            assert!(!text.contains(&value), "{text}");
        }
    }
}

/// Three connections, each TLS to web.test, each with what a fronting or stalling client
/// sends inside: a request head that never ends, HTTP/2's prior-knowledge preface, and a
/// kept-alive second request naming another host. Each prints what came back within 20 s:
/// `cut` (reset or closed), `waiting` (nothing), or the status line. argv: the address,
/// the port, and (for --net host) the test CA.
const INSIDE_TLS: &str = r#"
import socket, ssl, sys
address, port = sys.argv[1], int(sys.argv[2])
context = ssl.create_default_context(cafile=sys.argv[3] if len(sys.argv) > 3 else None)
def connect():
    return context.wrap_socket(socket.create_connection((address, port), timeout=30), server_hostname="web.test")
def outcome(connection):
    connection.settimeout(20)
    try:
        data = connection.recv(65536)
    except socket.timeout:
        return "waiting"
    except OSError:
        return "cut"
    return data.split(b"\n")[0].strip().decode() if data else "cut"
slow = connect()
slow.sendall(b"GET /host HTTP/1.1\r\nHost: web.test\r\n")
print("slow:", outcome(slow))
h2c = connect()
h2c.sendall(b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n")
print("h2c:", outcome(h2c))
kept = connect()
kept.sendall(b"HEAD /hello HTTP/1.1\r\nHost: web.test\r\n\r\n")
first = outcome(kept)
kept.sendall(b"HEAD /hello HTTP/1.1\r\nHost: other.test\r\n\r\n")
print("kept-alive:", first, "then", outcome(kept))
"#;

/// On a connection brig decrypted for a secret, a head not whole within 10 s is refused
/// (as on cleartext), and so are HTTP/2 without TLS's preface and a later request for
/// another host; under `--net host` (the control) the same bytes get the server's
/// answers, or nothing, so each case would notice.
fn inside_a_decrypted_connection_a_slow_head_h2c_and_another_host_are_refused(mode: Mode) {
    if !require_tun(mode) || !require_program("python3", "apt install python3") {
        return;
    }
    let Setup {
        servers,
        dir: _dir,
        value: _,
        mut args,
    } = setup();
    args.extend([
        "--upstream-ca".into(),
        servers.ca.display().to_string(),
        "--add-host".into(),
        "other.test:127.0.0.1".into(),
        "--allow-net".into(),
        format!("other.test:{}", servers.tls),
    ]);
    let port = servers.tls.to_string();
    let program = ["python3", "-c", INSIDE_TLS, WEB, &port];
    let (done, verdict) = jail_with_verdict(mode, &strs(&args), &program);
    let out = assert_success(&done.output);
    assert_eq!(
        out.lines().collect::<Vec<_>>(),
        [
            "slow: cut",
            "h2c: cut",
            "kept-alive: HTTP/1.1 200 OK then cut",
        ],
        "{}",
        describe(&done.output)
    );
    let reasons = reasons(&verdict);
    for expected in [
        "a request head inside the TLS connection brig decrypted for web.test did not arrive whole within 10 s",
        "HTTP/2 without TLS (h2c)",
        "a request for other.test on a TLS connection brig decrypted for web.test",
    ] {
        assert!(
            reasons.iter().any(|reason| reason.starts_with(expected)),
            "{expected}: {verdict}"
        );
    }
    // The control: the same bytes straight to the server.
    let ca = format!("{}:/ca", servers.state_dir().display());
    let control = jail(
        mode,
        &with_program(
            &["run", "--net", "host", "--ro-bind", &ca],
            &[
                "python3",
                "-c",
                INSIDE_TLS,
                "127.0.0.1",
                &port,
                "/ca/ca.pem",
            ],
        ),
    );
    let control = assert_success(&control.output);
    assert_eq!(
        control.lines().collect::<Vec<_>>(),
        [
            "slow: waiting",
            // Python's server answers HTTP/2.0 with a bare 505 page (no status line).
            "h2c: <!DOCTYPE HTML>",
            "kept-alive: HTTP/1.1 200 OK then HTTP/1.1 200 OK",
        ],
        "{control}"
    );
}

/// The pinned `requests` (with its dependencies) from PyPI, installed once by the jail's
/// python's pip under the target directory (kept between runs); None if it cannot be.
fn requests_dir() -> Option<&'static Path> {
    use std::sync::OnceLock;
    static DIR: OnceLock<Option<PathBuf>> = OnceLock::new();
    let dir = DIR.get_or_init(|| {
        let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("pip-requests-2.34.2");
        if dir.join("requests").is_dir() {
            return Some(dir);
        }
        // Installed aside and renamed into place: an interrupted install leaves nothing.
        let partial = dir.with_extension("partial");
        let _ = std::fs::remove_dir_all(&partial);
        let installed = Command::new(interpreter("python3"))
            .args(["-m", "pip", "install", "-q", "--target"])
            .arg(&partial)
            .arg("requests==2.34.2")
            .status()
            .is_ok_and(|status| status.success());
        (installed && std::fs::rename(&partial, &dir).is_ok()).then_some(dir)
    });
    let found = require(
        "Python's requests 2.34.2 (from PyPI)",
        "let the test reach PyPI once for `python3 -m pip install --target ... requests==2.34.2` (kept under the target directory)",
        dir.is_some(),
    );
    found.then(|| dir.as_deref().unwrap())
}

/// Python's `requests` (pinned, from PyPI) and git cloning over https with the key in
/// `http.extraHeader`: each request to web.test over TLS carries the value; the same
/// `requests` call over cleartext HTTP (a connection brig does not decrypt) carries the
/// placeholder.
fn python_requests_and_git_get_the_value_in_only_at_the_entitled_host(mode: Mode) {
    if !require_tun(mode) || !require_program("git", "apt install git") {
        return;
    }
    let Some(requests) = requests_dir() else {
        return;
    };
    let Setup {
        servers,
        dir: _dir,
        value,
        mut args,
    } = setup();
    servers.git_repository("tools", &[("README", "hello from git\n")]);
    args.extend([
        "--upstream-ca".into(),
        servers.ca.display().to_string(),
        "--allow-net".into(),
        format!("{WEB}:{}", servers.http),
        "--ro-bind".into(),
        format!("{}:/opt/requests", requests.display()),
        "--env".into(),
        "PYTHONPATH=/opt/requests".into(),
    ]);
    let (tls, http) = (servers.tls, servers.http);
    let script = format!(
        "python3 -c \"import os, requests; key = {{'Authorization': 'Bearer ' + os.environ['API_KEY']}}; \
         print(requests.get('https://{WEB}:{tls}/host', headers=key, timeout=30).text); \
         print(requests.get('http://{WEB}:{http}/host', headers=key, timeout=30).text)\" && \
         git -c http.extraHeader=\"Authorization: Bearer $API_KEY\" clone -q https://{WEB}:{tls}/git/tools.git /tmp/tools && \
         cat /tmp/tools/README && echo \"placeholder=$API_KEY\""
    );
    let (done, verdict) = jail_with_verdict(mode, &strs(&args), &["sh", "-c", &script]);
    let out = assert_success(&done.output);
    let placeholder = out
        .lines()
        .find_map(|line| line.strip_prefix("placeholder="))
        .unwrap_or_else(|| panic!("{}", describe(&done.output)))
        .to_string();
    assert!(
        out.starts_with(&format!("{WEB}:{tls}\n{WEB}:{http}\nhello from git\n")),
        "{}",
        describe(&done.output)
    );
    // Per server: TLS (decrypted by brig) got the value on every request, requests' and
    // git's alike; cleartext got the placeholder.
    let seen: Vec<(String, String, String)> = servers
        .log()
        .iter()
        .filter_map(|line| serde_json::from_str::<Value>(line).ok())
        .filter_map(|entry| {
            Some((
                entry["server"].as_str()?.to_string(),
                entry["path"].as_str()?.to_string(),
                entry["authorization"].as_str()?.to_string(),
            ))
        })
        .collect();
    let git: Vec<_> = seen
        .iter()
        .filter(|(_, path, _)| path.starts_with("/git/"))
        .collect();
    assert!(git.len() >= 3, "git's requests: {seen:?}");
    for (server, path, authorization) in &seen {
        let expected = match server.as_str() {
            "tls" => format!("Bearer {value}"),
            _ => format!("Bearer {placeholder}"),
        };
        assert_eq!(authorization, &expected, "{server} {path}: {seen:?}");
    }
    assert!(
        seen.iter().any(|(server, _, _)| server == "http"),
        "{seen:?}"
    );
    for text in [
        out.as_str(),
        &String::from_utf8_lossy(&done.output.stderr),
        &verdict.to_string(),
    ] {
        assert!(!text.contains(&value), "{text}");
    }
}
