//! What `brig gateway` makes of `Sandbox.create(...)`, through E2B's Python SDK (the
//! pinned `e2b` of tests/serve/gateway.rs), as root and rootless:
//!
//! - templates: two of a `--templates` file, differing in a variable, the workspace's
//!   size and (as root) the memory limit, each sandbox with its own; one looser than the
//!   server's policy (`net: host`) refused; an unknown template refused naming the known
//!   ones; a bad file stopping the gateway at start with one line;
//! - the network: `network={"allow_out": [...], "deny_out": [ALL_TRAFFIC]}` lets curl in
//!   the sandbox reach the listed local server and not another the server itself allows;
//!   `allow_internet_access=False` reaches neither; what E2B refuses (a domain in
//!   `deny_out`, an `allow_out` domain without `deny_out` of all traffic) and a deny list
//!   on a server with an allow list are refused (400), not ignored; `update_network`
//!   locks a live sandbox and opens it to one name, and another tenant's is not found;
//! - `deny_out` of one local server's address (on a server whose operator lets clients
//!   shape their network): that server refused (curl 7), another answers; with the
//!   address in `allow_out` too, it answers (allow wins); `update_network` to a deny list;
//! - E2B's user: `brig run --user` names the jail's user and home, a bad name refused.

use crate::common;
use crate::gateway::{Gateway, KEY_A, KEY_B};

use common::net::{Servers, TwoByAddress, require_tun};
use common::serve::Server;
use common::*;

both_modes!(
    e2b_templates_make_their_own_sandboxes,
    e2b_a_bad_templates_file_stops_the_gateway,
    e2b_network_allow_list_reaches_only_what_it_lists,
    e2b_deny_out_refuses_what_it_lists_and_lets_the_rest_out,
    a_jail_user_names_its_home,
);

/// Two templates that differ visibly: a variable and the workspace's size, and (as root,
/// where brig has cgroups to write here) the memory limit.
fn templates(mode: Mode) -> String {
    let memory = |size: &str| match mode {
        Mode::Root => format!("  memory: {size}\n"),
        Mode::Rootless => String::new(),
    };
    format!(
        "# two templates that differ visibly\nsmall:\n  env: [SIZE=small]\n  home-size: 16M\n{}large:\n  env: [SIZE=large]\n  home-size: 48M\n{}loose:\n  net: host\n",
        memory("96M"),
        memory("192M")
    )
}

const TEMPLATE_TOUR: &str = r#"
import sys
from e2b import Sandbox, SandboxException, CommandExitException
with_memory = sys.argv[2] == "memory"
small = Sandbox.create("small", envs={"FROM_CREATE": "c"})
large = Sandbox.create("large")
base = Sandbox.create()
for sbx, size in ((small, "small"), (large, "large"), (base, "")):
    out = sbx.commands.run('echo "$SIZE"; whoami; pwd').stdout
    assert out == f"{size}\nuser\n/home/user\n", (size, out)
assert small.commands.run('echo "$FROM_CREATE"').stdout == "c\n"
small_info, large_info = small.get_info(), large.get_info()
assert (small_info.template_id, large_info.template_id) == ("small", "large")
sizes = [sbx.commands.run("df -BM --output=size /home/user | tail -1").stdout.strip() for sbx in (small, large)]
assert sizes == ["16M", "48M"], sizes
# The workspace's size holds: 32 MiB fit in the large one's 48, not in the small one's 16.
def fits(command, expected):
    """`command` succeeds in the large sandbox and fails in the small one (its error)."""
    assert large.commands.run(command).stdout == expected
    try:
        small.commands.run(command)
    except CommandExitException as err:
        return err
    raise SystemExit(f"{command} fitted in the small sandbox")
fill = "head -c 32M /dev/zero > fill && echo written"
assert "No space left on device" in fits(fill, "written\n").stderr
if with_memory:
    assert (small_info.memory_mb, large_info.memory_mb) == (96, 192), (small_info, large_info)
    # The memory limit holds: 128 MiB is more than the small one's 96.
    grow = "python3 -c 'b = bytearray(128 << 20); b[::4096] = b\"x\" * len(b[::4096]); print(len(b) >> 20)'"
    assert fits(grow, "128\n").exit_code != 0
# A template is held to the server's policy like any client: no looser network.
try:
    Sandbox.create("loose")
    raise SystemExit("a template looser than the server made a sandbox")
except SandboxException as err:
    assert "--net host" in str(err) and "--client-may" in str(err), err
try:
    Sandbox.create("desktop")
    raise SystemExit("an unknown template made a sandbox")
except SandboxException as err:
    assert 'templateID: "desktop" is not a template of this gateway; use one of base, code-interpreter-v1, large, loose, small' in str(err), err
for sbx in (small, large, base):
    sbx.kill()
print("PASS")
"#;

fn e2b_templates_make_their_own_sandboxes(mode: Mode) {
    let server = Server::start(mode, &[]);
    let dir = TempDir::new("gateway-templates").writable_by_all();
    let file = dir.file("templates.yaml", &templates(mode));
    let gateway = Gateway::start_with(mode, &server, &["--templates", file.to_str().unwrap()]);
    let memory = match mode {
        Mode::Root => "memory",
        Mode::Rootless => "",
    };
    let script = format!("import sys\nsys.argv[2:] = [{memory:?}]\n{TEMPLATE_TOUR}");
    crate::gateway::assert_passed(gateway.sdk(KEY_A, &script));
}

fn e2b_a_bad_templates_file_stops_the_gateway(mode: Mode) {
    let server = Server::start(mode, &[]);
    let dir = TempDir::new("gateway-bad-templates").writable_by_all();
    let keys = dir.file("keys", &format!("{KEY_A} alice\n"));
    for (text, expected) in [
        ("small:\n  memroy: 96M\n", "templates.yaml:2"),
        (
            "small:\n  user: root\n",
            "template \"small\": `user` is the gateway's own",
        ),
        ("small:\n  profile: ruby\n", "unknown profile 'ruby'"),
    ] {
        let file = dir.file("templates.yaml", text);
        let templates = ["--templates", file.to_str().unwrap()];
        let output = crate::gateway::gateway_refused(mode, server.socket(), &keys, &templates);
        assert_one_line_error(&output, &["--templates", expected]);
    }
}

/// The names the tests give the local servers (pinned to 127.0.0.1 by the server).
const LISTED: &str = "web.test";
const UNLISTED: &str = "other.test";

const NETWORK_TOUR: &str = r#"
import sys
from e2b import Sandbox, SandboxException, CommandExitException
from e2b.sandbox.network import ALL_TRAFFIC
port = sys.argv[2]
def fetch(sbx, host):
    try:
        return sbx.commands.run(f"curl -sS --max-time 20 http://{host}:{port}/hello").stdout
    except CommandExitException as err:
        return f"curl exit {err.exit_code}"

# By default, what the server lets out: both.
open_one = Sandbox.create()
assert (fetch(open_one, "web.test"), fetch(open_one, "other.test")) == ("hello\n", "hello\n")

# Deny all but what allow_out lists.
listed = Sandbox.create(network={"allow_out": ["web.test"], "deny_out": [ALL_TRAFFIC]})
assert fetch(listed, "web.test") == "hello\n"
# A name the server pinned but the list leaves out is refused at connect (curl: 7,
# ECONNREFUSED from brig's relay).
assert fetch(listed, "other.test") == "curl exit 7"

# A live sandbox's network replaced (the SDK's update_network): locked, then one name again.
open_one.update_network({"deny_out": [ALL_TRAFFIC]})
assert (fetch(open_one, "web.test"), fetch(open_one, "other.test")) == ("curl exit 7", "curl exit 7")
open_one.update_network({"allow_out": ["other.test"], "deny_out": [ALL_TRAFFIC]})
assert (fetch(open_one, "web.test"), fetch(open_one, "other.test")) == ("curl exit 7", "hello\n")
for update, expected in (
    ({}, "network: letting everything out again is not served on a live sandbox"),
    # A deny list lets the rest out: looser than this server's allow list.
    ({"deny_out": ["8.8.8.8"]}, "network.denyOut: --deny-net 8.8.8.8: this server does not let clients ask for it"),
    ({"allow_out": ["nowhere.test"], "deny_out": [ALL_TRAFFIC]}, "network.allowOut: --allow-net nowhere.test"),
):
    try:
        open_one.update_network(update)
        raise SystemExit(f"{update} was taken")
    except SandboxException as err:
        assert expected in str(err), (update, err)
# Another tenant's sandbox is one that does not exist: its network stays as it is.
from e2b import NotFoundException
try:
    Sandbox.update_network(open_one.sandbox_id, {"deny_out": [ALL_TRAFFIC]}, api_key=sys.argv[3])
    raise SystemExit("another tenant changed the network")
except NotFoundException as err:
    assert "not found" in str(err), err
# The refused updates changed nothing.
assert fetch(open_one, "other.test") == "hello\n"

# Nothing at all (on a server whose own network is filtered): no name resolves (curl: 6).
closed = Sandbox.create(allow_internet_access=False)
assert closed.get_info().allow_internet_access is False
for host in ("web.test", "other.test"):
    assert fetch(closed, host) == "curl exit 6", host

# What brig cannot say exactly is refused, not ignored.
for network, expected in (
    ({"deny_out": ["8.8.8.8"]}, "network.denyOut: --deny-net 8.8.8.8: this server does not let clients ask for it"),
    ({"deny_out": ["example.com"]}, "network.denyOut[0]: invalid denied CIDR example.com"),
    ({"allow_out": ["web.test"]}, "you must include 'ALL_TRAFFIC' in deny out"),
    ({"allow_out": ["a b"], "deny_out": [ALL_TRAFFIC]}, "network.allowOut[0]"),
    ({"allow_out": ["nowhere.test"], "deny_out": [ALL_TRAFFIC]}, "network.allowOut: --allow-net nowhere.test"),
):
    try:
        Sandbox.create(network=network)
        raise SystemExit(f"{network} made a sandbox")
    except SandboxException as err:
        assert expected in str(err), (network, err)
# A sandbox made without a network cannot be given one.
try:
    closed.update_network({"allow_out": ["web.test"], "deny_out": [ALL_TRAFFIC]})
    raise SystemExit("a sandbox without a network got one")
except SandboxException as err:
    assert "network.allowOut: session_network" in str(err) and "--net none" in str(err), err
for sbx in (open_one, listed, closed):
    sbx.kill()
assert Sandbox.list().next_items() == [], "the refused creates left sandboxes"
print("PASS")
"#;

fn e2b_network_allow_list_reaches_only_what_it_lists(mode: Mode) {
    if !require_tun(mode) {
        return;
    }
    let servers = Servers::start();
    let pins = [
        format!("{LISTED}:127.0.0.1"),
        format!("{UNLISTED}:127.0.0.1"),
    ];
    let server = Server::start(
        mode,
        &[
            "--net",
            "filtered",
            "--add-host",
            &pins[0],
            "--add-host",
            &pins[1],
            "--allow-net",
            LISTED,
            "--allow-net",
            UNLISTED,
        ],
    );
    let gateway = Gateway::start(mode, &server);
    let script = format!(
        "import sys\nsys.argv[2:] = [{:?}, {KEY_B:?}]\n{NETWORK_TOUR}",
        servers.http.to_string()
    );
    crate::gateway::assert_passed(gateway.sdk(KEY_A, &script));
}

const DENY_TOUR: &str = r#"
import sys
from e2b import Sandbox, SandboxException, CommandExitException
denied_port, other_port = sys.argv[2], sys.argv[3]
def fetch(sbx, host, port):
    try:
        return sbx.commands.run(f"curl -sS --max-time 20 http://{host}:{port}/hello").stdout
    except CommandExitException as err:
        return f"curl exit {err.exit_code}"

# denyOut of web.test's address (127.0.0.2): refused at connect (curl: 7, ECONNREFUSED
# from brig's relay); other.test (127.0.0.3) answers: the rest goes out.
denied = Sandbox.create(network={"deny_out": ["127.0.0.2/32"]})
assert fetch(denied, "web.test", denied_port) == "curl exit 7"
assert fetch(denied, "other.test", other_port) == "hello\n"
# allowOut wins over denyOut.
allowed = Sandbox.create(network={"allow_out": ["127.0.0.2"], "deny_out": ["127.0.0.2/32"]})
assert fetch(allowed, "web.test", denied_port) == "hello\n"
# A live sandbox given a deny list (update_network).
live = Sandbox.create()
assert (fetch(live, "web.test", denied_port), fetch(live, "other.test", other_port)) == ("hello\n", "hello\n")
live.update_network({"deny_out": ["127.0.0.3"]})
assert (fetch(live, "web.test", denied_port), fetch(live, "other.test", other_port)) == ("hello\n", "curl exit 7")
for network, expected in (
    ({"deny_out": ["web.test"]}, "network.denyOut[0]: invalid denied CIDR web.test"),
    ({"allow_out": ["web.test"], "deny_out": ["127.0.0.2"]}, "you must include 'ALL_TRAFFIC' in deny out"),
):
    try:
        Sandbox.create(network=network)
        raise SystemExit(f"{network} made a sandbox")
    except SandboxException as err:
        assert expected in str(err), (network, err)
for sbx in (denied, allowed, live):
    sbx.kill()
assert Sandbox.list().next_items() == [], "the refused creates left sandboxes"
print("PASS")
"#;

/// Two local servers told apart by address (127.0.0.2 and 127.0.0.3, pinned as web.test
/// and other.test), on a server that lets clients shape their network (a deny list lets
/// out more than its allow list).
fn e2b_deny_out_refuses_what_it_lists_and_lets_the_rest_out(mode: Mode) {
    if !require_tun(mode) {
        return;
    }
    let TwoByAddress { web: denied, other } = TwoByAddress::start();
    let server = Server::start(mode, &TwoByAddress::SERVE_ARGS);
    let gateway = Gateway::start(mode, &server);
    let script = format!(
        "import sys\nsys.argv[2:] = [{:?}, {:?}]\n{DENY_TOUR}",
        denied.http.to_string(),
        other.http.to_string()
    );
    crate::gateway::assert_passed(gateway.sdk(KEY_A, &script));
    // What reached each server: the denied one, only the sandboxes allowed to it (the
    // allowOut one's request, the live one's two); the other, all but the last.
    let hellos = |servers: &Servers| {
        servers
            .log()
            .iter()
            .filter_map(|line| serde_json::from_str::<serde_json::Value>(line).ok())
            .filter(|entry| entry["server"] == "http" && entry["path"] == "/hello")
            .count()
    };
    assert_eq!((hellos(&denied), hellos(&other)), (3, 2));
}

fn a_jail_user_names_its_home(mode: Mode) {
    let output = output_of(command(
        mode,
        &[
            "run",
            "--user",
            "user",
            "--",
            "sh",
            "-c",
            "whoami; echo $HOME; pwd; grep ^user: /etc/passwd",
        ],
    ));
    assert_eq!(
        assert_success(&output),
        "user\n/home/user\n/home/user\nuser:x:1000:1000:user:/home/user:/bin/sh\n"
    );
    for (name, expected) in [
        ("root", "--user root: that name is another account's"),
        ("../x", "--user \"../x\": use 1 to 32 lowercase letters"),
    ] {
        let output = run(mode, &["run", "--user", name, "--", "true"]);
        assert_one_line_error(&output, &[expected]);
    }
}
