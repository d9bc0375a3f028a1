//! What Kubernetes (or any orchestrator) asks a gateway, with no API key: `/healthz` (the
//! process answers), `/readyz` (a host: its server answers, has room for a sandbox and
//! neither it nor the gateway is draining; a router: at least one of its hosts is
//! ready) and `/metrics` (Prometheus' text format, by the `prometheus-client` crate);
//! and the drain on SIGTERM.
//!
//! Metrics (a router has the request ones only):
//!
//! | name | type | what |
//! | --- | --- | --- |
//! | `brig_sandboxes{tenant,state}` | gauge | the host's sandboxes (every one `running`) |
//! | `brig_sandbox_slots_free` | gauge | sandboxes the host can still take (`--max-sessions` less those open) |
//! | `brig_sandbox_slots` | gauge | `--max-sessions` |
//! | `brig_sandbox_pool_ready` | gauge | session jails assembled and waiting (`--session-pool`) |
//! | `brig_draining` | gauge | 1 from SIGTERM on |
//! | `brig_sandbox_create_seconds` | histogram | creates answered 201, from request to answer |
//! | `brig_request_seconds{kind}` | histogram | requests by kind: rest, envd, interpreter, forwarded, routed |
//! | `brig_failures_total{kind}` | counter | the gateway's: create_failed, create_refused_draining, peer_unreachable, server_error, drain_ended; a host's server's (its status' counts since it started, added as they grow from scrape to scrape; a new server pid counts from 0): jail_build_failed (a pooled jail that failed to assemble), request_refused (a request the server refused: full, queue timeout, bad input) |
//! | `brig_jail_build_seconds{kind}` | histogram | the server's jail builds, fork to ready: pooled, warm_python, warm_node, session_pool (refills), session (a create's own), job |
//! | `brig_oom_kills_total` | counter | OOM kills in the server's sandboxes' cgroups, ended ones included |
//! | `brig_network_bytes_total{direction}` | counter | payload bytes through brig's user-mode network, `out` and `in`, ended sandboxes included (host total) |
//! | `brig_audit_lines_dropped_total` | counter | `--audit-log` lines dropped: the writer fell behind, its queue full (`audit.rs`) |
//!
//! The last three are the server's own totals (`server_metrics.rs`), read from its status
//! at each scrape.

use super::backend::Backend;
use super::route::{HostState, RouterState, Unanswered, forward};
use super::server_metrics::ServerCollector;
use axum::body::Body;
use axum::extract::Request;
use axum::http::{Method, StatusCode, header};
use axum::response::{IntoResponse, Response};
use prometheus_client::encoding::prometheus_text;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;
use serde_json::json;
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

type Labels = Vec<(String, String)>;

/// The kinds of requests timed.
#[derive(Clone, Copy, Debug)]
pub enum RequestKind {
    Rest,
    Envd,
    Interpreter,
    /// Sent on to the host that owns the sandbox.
    Forwarded,
    /// A router's (any).
    Routed,
}

impl RequestKind {
    fn as_str(self) -> &'static str {
        match self {
            RequestKind::Rest => "rest",
            RequestKind::Envd => "envd",
            RequestKind::Interpreter => "interpreter",
            RequestKind::Forwarded => "forwarded",
            RequestKind::Routed => "routed",
        }
    }
}

/// 0.5 ms to about 16 s, doubling.
fn latency_buckets() -> Histogram {
    Histogram::new(exponential_buckets(0.0005, 2.0, 16))
}

/// A gateway's health: whether it drains, and its metrics.
pub struct Health {
    draining: AtomicBool,
    registry: Registry,
    sandboxes: Family<Labels, Gauge>,
    slots_free: Gauge,
    slots: Gauge,
    pool_ready: Gauge,
    draining_gauge: Gauge,
    create_seconds: Histogram,
    request_seconds: Family<Labels, Histogram, fn() -> Histogram>,
    failures: Family<Labels, Counter>,
    /// The server's build times, OOM kills and bytes, as its last status said them.
    server: Arc<ServerCollector>,
    /// The server's failure counts as last seen (its pid, failures, refused): the
    /// gateway's counters grow by what the server's grew.
    server_failures_seen: Mutex<(u32, u64, u64)>,
    /// `--audit-log` lines dropped for a full queue (`audit.rs`).
    audit_dropped: Counter,
}

impl Health {
    /// `host`: with the metrics of a host's sandboxes (a router has none).
    pub fn new(host: bool) -> Health {
        let mut registry = Registry::default();
        let sandboxes = Family::<Labels, Gauge>::default();
        let (slots_free, slots, pool_ready, draining_gauge) = Default::default();
        let create_seconds = latency_buckets();
        let request_seconds =
            Family::<Labels, Histogram, fn() -> Histogram>::new_with_constructor(latency_buckets);
        let failures = Family::<Labels, Counter>::default();
        let server = Arc::new(ServerCollector::default());
        if host {
            registry.register_collector(Box::new(Arc::clone(&server)));
            registry.register(
                "brig_sandboxes",
                "Sandboxes on this host, by tenant and state",
                sandboxes.clone(),
            );
            registry.register(
                "brig_sandbox_slots_free",
                "Sandboxes this host can still take (--max-sessions less those open)",
                Gauge::clone(&slots_free),
            );
            registry.register(
                "brig_sandbox_slots",
                "Sandboxes this host takes at most (--max-sessions)",
                Gauge::clone(&slots),
            );
            registry.register(
                "brig_sandbox_pool_ready",
                "Session jails assembled and waiting for a create (--session-pool)",
                Gauge::clone(&pool_ready),
            );
        }
        registry.register(
            "brig_draining",
            "1 once the gateway drains (SIGTERM): no creates, not ready",
            Gauge::clone(&draining_gauge),
        );
        registry.register(
            "brig_sandbox_create_seconds",
            "Creates answered 201, from request to answer",
            create_seconds.clone(),
        );
        registry.register(
            "brig_request_seconds",
            "Requests by kind (rest, envd, interpreter, forwarded, routed), to their answer's headers",
            request_seconds.clone(),
        );
        registry.register(
            "brig_failures",
            "Failures by kind (the gateway's: create_failed, create_refused_draining, peer_unreachable, server_error, drain_ended; its server's: jail_build_failed, request_refused)",
            failures.clone(),
        );
        let audit_dropped = Counter::default();
        registry.register(
            "brig_audit_lines_dropped",
            "--audit-log lines dropped because the log's writer fell behind (its queue of 4096 full)",
            audit_dropped.clone(),
        );
        Health {
            audit_dropped,
            draining: AtomicBool::new(false),
            registry,
            sandboxes,
            slots_free,
            slots,
            pool_ready,
            draining_gauge,
            create_seconds,
            request_seconds,
            failures,
            server,
            server_failures_seen: Mutex::new((0, 0, 0)),
        }
    }

    /// What a host's server said in its status: its own metrics, and its failures added
    /// to the gateway's (a new server pid counts from 0).
    fn server_said(&self, status: &crate::serve::protocol::Status) {
        self.server.update(&status.metrics);
        let Ok(mut seen) = self.server_failures_seen.lock() else {
            return;
        };
        if seen.0 != status.pid {
            *seen = (status.pid, 0, 0);
        }
        for (kind, before, now) in [
            ("jail_build_failed", seen.1, status.failures),
            ("request_refused", seen.2, status.refused),
        ] {
            if now > before {
                self.failures
                    .get_or_create(&vec![("kind".into(), kind.into())])
                    .inc_by(now - before);
            }
        }
        *seen = (status.pid, status.failures, status.refused);
    }

    /// The counter of dropped audit lines, for the audit log to count them in.
    pub fn audit_dropped(&self) -> Counter {
        self.audit_dropped.clone()
    }

    pub fn draining(&self) -> bool {
        self.draining.load(Ordering::Relaxed)
    }

    fn start_draining(&self) {
        self.draining.store(true, Ordering::Relaxed);
        self.draining_gauge.set(1);
    }

    pub fn failed(&self, kind: &str) {
        self.failures
            .get_or_create(&vec![("kind".into(), kind.into())])
            .inc();
    }

    pub fn created(&self, started: Instant) {
        self.create_seconds.observe(started.elapsed().as_secs_f64());
    }

    pub fn observe(&self, kind: RequestKind, started: Instant) {
        self.request_seconds
            .get_or_create(&vec![("kind".into(), kind.as_str().into())])
            .observe(started.elapsed().as_secs_f64());
    }

    fn exposition(&self) -> Response {
        let mut text = String::new();
        if prometheus_text::encode(&mut text, &self.registry).is_err() {
            return (StatusCode::INTERNAL_SERVER_ERROR, "encode the metrics").into_response();
        }
        (
            [(header::CONTENT_TYPE, prometheus_text::CONTENT_TYPE)],
            text,
        )
            .into_response()
    }
}

/// The health path a request is for, if any (they need no API key). A request for a
/// sandbox (its own `/metrics` on a port of its own) is the sandbox's.
pub fn health_path(request: &Request) -> Option<&'static str> {
    let path = request.uri().path();
    if request.method() != Method::GET
        || super::sandbox_address(request.headers(), request.uri()).is_some()
    {
        return None;
    }
    ["/healthz", "/readyz", "/metrics"]
        .into_iter()
        .find(|health| *health == path)
}

/// A host's state as `/readyz` tells it: ready, and why not.
#[derive(Debug, PartialEq, Eq)]
pub struct Readiness {
    pub ready: bool,
    pub reason: String,
}

/// Whether a host is ready, from its server's status (or why it did not answer).
pub fn readiness(
    draining: bool,
    status: Result<&crate::serve::protocol::Status, String>,
) -> Readiness {
    let not = |reason: String| Readiness {
        ready: false,
        reason,
    };
    if draining {
        return not("draining: the gateway was told to stop (SIGTERM)".into());
    }
    let status = match status {
        Ok(status) => status,
        Err(why) => return not(format!("the brig server does not answer: {why}")),
    };
    if status.draining {
        return not("draining: the brig server was told to stop".into());
    }
    if status.sessions >= status.max_sessions {
        return not(format!(
            "full: {} of {} sandboxes open (--max-sessions)",
            status.sessions, status.max_sessions
        ));
    }
    Readiness {
        ready: true,
        reason: format!(
            "{} of {} sandboxes open",
            status.sessions, status.max_sessions
        ),
    }
}

fn ready_answer(readiness: &Readiness, extra: serde_json::Value) -> Response {
    let status = match readiness.ready {
        true => StatusCode::OK,
        false => StatusCode::SERVICE_UNAVAILABLE,
    };
    let mut body = json!({"ready": readiness.ready, "reason": readiness.reason});
    if let (Some(body), Some(extra)) = (body.as_object_mut(), extra.as_object()) {
        body.extend(extra.clone());
    }
    (status, axum::Json(body)).into_response()
}

/// A host's answer to a health path.
pub async fn answer_host(state: &Arc<HostState>, path: &str) -> Response {
    if path == "/healthz" {
        return StatusCode::OK.into_response();
    }
    let gateway = state.gateway.clone();
    let with_sandboxes = path == "/metrics";
    let read = tokio::task::spawn_blocking(move || {
        let status = gateway.backend.status();
        let sandboxes = match with_sandboxes {
            true => gateway.backend.list(BTreeMap::new()).ok(),
            false => None,
        };
        (status, sandboxes)
    })
    .await;
    let (status, sandboxes) = read.unwrap_or_else(|err| {
        (
            Err(super::backend::BackendError {
                failure: super::backend::Failure::Server,
                message: err.to_string(),
            }),
            None,
        )
    });
    let health = &state.health;
    if let Ok(status) = &status {
        health.slots.set(status.max_sessions as i64);
        health
            .slots_free
            .set(status.max_sessions.saturating_sub(status.sessions) as i64);
        health.pool_ready.set(status.session_ready as i64);
        health.server_said(status);
    }
    if path == "/readyz" {
        let readiness = readiness(
            health.draining(),
            status.as_ref().map_err(|err| err.message.clone()),
        );
        let extra = match &status {
            Ok(status) => json!({
                "host": state.peers.own,
                "sandboxes": status.sessions,
                "slots_free": status.max_sessions.saturating_sub(status.sessions),
            }),
            Err(_) => json!({"host": state.peers.own}),
        };
        return ready_answer(&readiness, extra);
    }
    if let Some(sandboxes) = sandboxes {
        let mut counts: BTreeMap<String, i64> = BTreeMap::new();
        for session in &sandboxes {
            if let Some(tenant) = session["metadata"][super::auth::TENANT_KEY].as_str() {
                *counts.entry(tenant.to_string()).or_default() += 1;
            }
        }
        health.sandboxes.clear();
        for (tenant, count) in counts {
            health
                .sandboxes
                .get_or_create(&vec![
                    ("tenant".into(), tenant),
                    ("state".into(), "running".into()),
                ])
                .set(count);
        }
    }
    health.exposition()
}

/// A router's answer to a health path. Ready when a host is: each asked at once, for at
/// most a second.
pub async fn answer_router(state: &Arc<RouterState>, path: &str) -> Response {
    match path {
        "/healthz" => StatusCode::OK.into_response(),
        "/metrics" => state.health.exposition(),
        _ => {
            let peers = state.peers.all();
            let asked = peers.iter().map(|(name, url)| async move {
                let request = axum::http::Request::get("/readyz")
                    .body(Body::empty())
                    .expect("a request");
                let answer = tokio::time::timeout(
                    Duration::from_secs(1),
                    forward(&state.client, url, request),
                )
                .await;
                let said = match answer {
                    Ok(Ok(answer)) if answer.status() == StatusCode::OK => "ready".to_string(),
                    Ok(Ok(answer)) => format!("not ready ({})", answer.status().as_u16()),
                    Ok(Err(Unanswered(why))) => why,
                    Err(_) => "no answer within 1s".to_string(),
                };
                (name.clone(), said)
            });
            let hosts: BTreeMap<String, String> = futures_util::future::join_all(asked)
                .await
                .into_iter()
                .collect();
            let ready_hosts = hosts.values().filter(|said| *said == "ready").count();
            let readiness = if state.health.draining() {
                Readiness {
                    ready: false,
                    reason: "draining: the router was told to stop (SIGTERM)".into(),
                }
            } else if ready_hosts == 0 {
                Readiness {
                    ready: false,
                    reason: "no host is ready".into(),
                }
            } else {
                Readiness {
                    ready: true,
                    reason: format!("{ready_hosts} of {} hosts ready", hosts.len()),
                }
            };
            ready_answer(&readiness, json!({"hosts": hosts}))
        }
    }
}

/// SIGTERM or SIGINT.
pub async fn stop_signal() {
    use tokio::signal::unix::{SignalKind, signal};
    let (Ok(mut term), Ok(mut interrupt)) = (
        signal(SignalKind::terminate()),
        signal(SignalKind::interrupt()),
    ) else {
        return std::future::pending().await;
    };
    tokio::select! {
        _ = term.recv() => {}
        _ = interrupt.recv() => {}
    }
}

/// How often a draining host looks whether its sandboxes are all gone.
const DRAIN_TICK: Duration = Duration::from_millis(200);

/// The sessions this gateway made (those whose metadata name a tenant).
fn sandboxes_of_gateway(backend: &Backend) -> Vec<String> {
    backend
        .list(BTreeMap::new())
        .unwrap_or_default()
        .iter()
        .filter(|session| session["metadata"][super::auth::TENANT_KEY].is_string())
        .filter_map(|session| session["session"].as_str().map(str::to_string))
        .collect()
}

/// A host's drain, once told to stop: not ready and no creates at once; its sandboxes
/// run on until none is left or `grace` has passed, then are ended (their clients' calls
/// fail: the SDK's errors). Returns when the gateway may stop serving.
pub async fn drain_host(health: Arc<Health>, backend: Backend, grace: Duration) {
    stop_signal().await;
    health.start_draining();
    let deadline = Instant::now() + grace;
    let listing = backend.clone();
    let left = tokio::task::spawn_blocking(move || sandboxes_of_gateway(&listing).len())
        .await
        .unwrap_or(0);
    eprintln!(
        "brig gateway: draining: not ready, creates refused; {left} sandbox(es) may run for {}s more",
        grace.as_secs_f64()
    );
    loop {
        let listing = backend.clone();
        let left = tokio::task::spawn_blocking(move || sandboxes_of_gateway(&listing))
            .await
            .unwrap_or_default();
        if left.is_empty() {
            break;
        }
        if Instant::now() >= deadline {
            let closing = backend.clone();
            let ended = tokio::task::spawn_blocking(move || {
                left.iter()
                    .filter(|session| closing.close(session).is_ok())
                    .count()
            })
            .await
            .unwrap_or(0);
            for _ in 0..ended {
                health.failed("drain_ended");
            }
            eprintln!(
                "brig gateway: drained: ended {ended} sandbox(es) still running after the grace"
            );
            break;
        }
        tokio::time::sleep(DRAIN_TICK.min(deadline.saturating_duration_since(Instant::now())))
            .await;
    }
}

/// A router's drain: not ready at once, then it stops (it holds no sandboxes).
pub async fn drain_router(health: Arc<Health>) {
    stop_signal().await;
    health.start_draining();
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::serve::protocol::Status;

    #[test]
    fn a_host_is_ready_with_room_and_not_draining() {
        let status = |sessions, draining| Status {
            sessions,
            max_sessions: 2,
            draining,
            ..Status::default()
        };
        for (draining, status, ready, reason) in [
            (false, Ok(status(1, false)), true, "1 of 2 sandboxes open"),
            (false, Ok(status(2, false)), false, "full: 2 of 2"),
            (true, Ok(status(0, false)), false, "draining: the gateway"),
            (
                false,
                Ok(status(0, true)),
                false,
                "draining: the brig server",
            ),
            (
                false,
                Err("gone".to_string()),
                false,
                "does not answer: gone",
            ),
        ] {
            let told = readiness(draining, status.as_ref().map_err(Clone::clone));
            assert_eq!(told.ready, ready, "{told:?}");
            assert!(told.reason.contains(reason), "{told:?}");
        }
    }

    #[test]
    fn the_servers_failures_add_to_the_gateways_and_a_new_server_counts_from_zero() {
        let health = Health::new(true);
        let status = |pid, failures, refused| Status {
            pid,
            failures,
            refused,
            ..Status::default()
        };
        // The server's counts as three scrapes see them: 2 and 1; 3 and 1; then a new
        // server (another pid) that has 1 and 0.
        for said in [status(7, 2, 1), status(7, 3, 1), status(8, 1, 0)] {
            health.server_said(&said);
        }
        assert_exposes(
            &health,
            &[
                "brig_failures_total{kind=\"jail_build_failed\"} 4",
                "brig_failures_total{kind=\"request_refused\"} 1",
                "# TYPE brig_jail_build_seconds histogram",
                "brig_oom_kills_total 0",
            ],
        );
    }

    /// `health`'s exposition has each of `expected`.
    fn assert_exposes(health: &Health, expected: &[&str]) {
        let mut text = String::new();
        prometheus_text::encode(&mut text, &health.registry).unwrap();
        for expected in expected {
            assert!(text.contains(expected), "{expected} in:\n{text}");
        }
    }

    #[test]
    fn the_metrics_are_prometheus_text() {
        let health = Health::new(true);
        health.failed("peer_unreachable");
        health.observe(RequestKind::Envd, Instant::now());
        health.created(Instant::now());
        assert_exposes(
            &health,
            &[
                "# TYPE brig_sandbox_slots_free gauge",
                "brig_failures_total{kind=\"peer_unreachable\"} 1",
                "brig_request_seconds_count{kind=\"envd\"} 1",
                "brig_sandbox_create_seconds_count 1",
            ],
        );
    }
}
