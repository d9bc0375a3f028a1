//! What a host gateway's `/metrics` says of its server (src/serve/metrics.rs,
//! src/gateway/server_metrics.rs), moved for real, as root and rootless: sandboxes created
//! through E2B's SDK (the pinned one of tests/serve/gateway_hosts.rs, with its pinned
//! `prometheus-client` text parser), bytes sent out and received through brig's user-mode
//! network (`--net filtered`) to a local server, and (as root, where the sandbox has a
//! memory cgroup of its own) a sandbox's process OOM-killed; the sandboxes killed before
//! the scrape (the server keeps ended sandboxes' counts). Scraped before and after:
//! `brig_jail_build_seconds_count{kind="session"}` grew by the sandboxes built,
//! `brig_oom_kills_total` by 1 (0 rootless: nothing was killed),
//! `brig_network_bytes_total{direction=out|in}` by the payloads (and their requests' and
//! answers' heads, under 4 KiB).

use crate::common;
use crate::gateway::{Gateway, KEY_A, assert_passed};

use common::net::{Servers, require_tun};
use common::serve::Server;
use common::*;

both_modes!(gateway_metrics_count_builds_oom_kills_and_network_bytes);

/// argv: the gateway's URL, the local HTTP server's port, `oom` or `no-oom`.
const SCRIPT: &str = r#"
import sys, urllib.request
from prometheus_client.parser import text_string_to_metric_families
from e2b import Sandbox, CommandExitException
url, port, oom = sys.argv[1], sys.argv[2], sys.argv[3] == "oom"

def scrape():
    with urllib.request.urlopen(url + "/metrics", timeout=30) as answer:
        text = answer.read().decode()
    families = {family.name: family for family in text_string_to_metric_families(text)}
    for name, kind in [("brig_jail_build_seconds", "histogram"), ("brig_oom_kills", "counter"), ("brig_network_bytes", "counter")]:
        assert families[name].type == kind, (name, families.get(name))
    return {(s.name, tuple(sorted(s.labels.items()))): s.value for f in families.values() for s in f.samples}

def grew(before, after, name, **labels):
    key = (name, tuple(sorted(labels.items())))
    return after.get(key, 0) - before.get(key, 0)

before = scrape()
boxes = [Sandbox.create() for _ in range(2)]
payload = 300_000
moved = boxes[0].commands.run(
    f"head -c {payload} /dev/zero > up && "
    # Out 300 kB, echoed back in; then 300 kB more in.
    f"curl -sS --max-time 60 -o /dev/null --data-binary @up http://web.test:{port}/echo && "
    f"curl -sS --max-time 60 http://web.test:{port}/bytes/{payload} | wc -c"
)
assert moved.stdout.strip() == str(payload), moved
if oom:
    small = Sandbox.create("small")
    boxes.append(small)
    try:
        small.commands.run("python3 -c 'b = bytearray(512 << 20); b[::4096] = b\"x\" * len(b[::4096])'")
        raise SystemExit("512 MiB fitted in a 64 MiB sandbox")
    except CommandExitException as err:
        print("oom:", err.exit_code, err.error)
built = len(boxes)
# Ended sandboxes stay counted: all are killed before the scrape.
for box in boxes:
    box.kill()
after = scrape()
builds = grew(before, after, "brig_jail_build_seconds_count", kind="session")
assert builds == built, (builds, built)
inf = grew(before, after, "brig_jail_build_seconds_bucket", kind="session", le="+Inf")
assert inf == built, inf
took = grew(before, after, "brig_jail_build_seconds_sum", kind="session")
assert 0 < took, took
kills = grew(before, after, "brig_oom_kills_total")
assert kills == (1 if oom else 0), kills
out = grew(before, after, "brig_network_bytes_total", direction="out")
received = grew(before, after, "brig_network_bytes_total", direction="in")
# Out: the POSTed payload (and the requests' heads); in: it echoed, and the payload
# fetched (and the answers' heads). Nothing counted twice.
assert payload <= out < payload + 4096, out
assert 2 * payload <= received < 2 * payload + 4096, received
print("builds", builds, "took", round(took, 4), "oom kills", kills, "out", out, "in", received)
print("PASS")
"#;

fn gateway_metrics_count_builds_oom_kills_and_network_bytes(mode: Mode) {
    if !require_tun(mode) {
        return;
    }
    let Some(python) = common::e2b::sdk_python() else {
        return;
    };
    let servers = Servers::start();
    // Every sandbox's jail built for its create (no pool), each with a network relay.
    let server = Server::start(
        mode,
        &[
            "--pool",
            "0",
            "--session-pool",
            "0",
            "--net",
            "filtered",
            "--add-host",
            "web.test:127.0.0.1",
            "--allow-net",
            "web.test",
        ],
    );
    // As root, a sandbox of 64 MiB: its jail has a memory cgroup of its own.
    let dir = TempDir::new("gateway-metrics").writable_by_all();
    let file = dir.file("templates.yaml", "small:\n  memory: 64M\n");
    let (extra, oom): (&[&str], &str) = match mode {
        Mode::Root => (&["--templates", file.to_str().unwrap()], "oom"),
        Mode::Rootless => (&[], "no-oom"),
    };
    let gateway = Gateway::start_with(mode, &server, extra);
    let script = format!(
        "import sys\nsys.argv[2:] = [{:?}, {oom:?}]\n{SCRIPT}",
        servers.http.to_string()
    );
    let output = gateway.sdk_of(python, KEY_A, &script);
    eprintln!("{}", stdout(&output));
    assert_passed(Some(output));
}
