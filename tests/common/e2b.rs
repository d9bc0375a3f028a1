//! E2B's Python SDKs and the Prometheus text parser, pinned from PyPI, for the tests of
//! many brig hosts: tests/serve/gateway_hosts.rs (processes on loopback) and
//! tests/operators/kubernetes_hosts.rs (podman pods behind nginx).

use std::path::{Path, PathBuf};
use std::sync::OnceLock;

/// E2B's SDKs (`e2b` at the commit the .proto files come from, proto/e2b-envd/README.md;
/// the code interpreter's on it), the text parser of Prometheus' Python client
/// (`/metrics`) and a WebSocket client (a sandbox's ports), pinned: one venv for every
/// test that drives the gateway from Python.
pub const SDK_AND_CLIENTS: [&str; 4] = [
    "e2b-code-interpreter==2.9.1",
    "e2b==2.45.1",
    "prometheus-client==0.21.1",
    "websockets==15.0.1",
];

/// The venv's python with [`SDK_AND_CLIENTS`] (made once, by one test while the others
/// wait, kept under the target directory; `require`d).
pub fn sdk_python() -> Option<&'static Path> {
    static PYTHON: OnceLock<Option<PathBuf>> = OnceLock::new();
    super::pinned_python(&PYTHON, &SDK_AND_CLIENTS, "E2B's SDK")
}

/// Python for the scripts' preludes: `get(url)`, a plain HTTP GET answering (status, body)
/// (status None and the reason when nothing answers), for `/healthz`, `/readyz` and
/// `/metrics`.
pub const PYTHON_GET: &str = r#"
import urllib.request, urllib.error
def get(url):
    try:
        with urllib.request.urlopen(url, timeout=30) as answer:
            return answer.status, answer.read().decode()
    except urllib.error.HTTPError as err:
        return err.code, err.read().decode()
    except urllib.error.URLError as err:
        return None, str(err.reason)
"#;

/// Python after [`PYTHON_GET`]: `families(url)`, a `/metrics` parsed by prometheus-client's
/// text parser (by family name); `host_metrics(url)`, a host's, with what every host
/// exports checked: its free slots (a gauge, fewer than all), tenant alice's running
/// sandboxes, creates counted, REST, envd and interpreter requests.
pub const PYTHON_METRICS: &str = r#"
from prometheus_client.parser import text_string_to_metric_families
def families(url):
    status, text = get(url + "/metrics")
    assert status == 200, (status, text)
    return {family.name: family for family in text_string_to_metric_families(text)}
def host_metrics(url):
    host = families(url)
    assert host["brig_sandbox_slots_free"].type == "gauge"
    free = host["brig_sandbox_slots_free"].samples[0].value
    assert 0 < free < host["brig_sandbox_slots"].samples[0].value, free
    states = {(s.labels["tenant"], s.labels["state"]): s.value for s in host["brig_sandboxes"].samples}
    assert states.get(("alice", "running"), 0) >= 1, states
    created = [s for s in host["brig_sandbox_create_seconds"].samples if s.name.endswith("_count")]
    assert created and created[0].value >= 1, created
    kinds = {s.labels["kind"] for s in host["brig_request_seconds"].samples}
    assert {"rest", "envd", "interpreter"} <= kinds, kinds
    return host
"#;
