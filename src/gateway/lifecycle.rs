//! E2B's sandbox lifecycle beyond create and kill: pause and resume (in memory: the
//! session's jail frozen by the cgroup freezer, `session_pause` / `session_resume`),
//! metrics (`session_stats`: the jail's cgroup and workspace), logs (`logs.rs`), and
//! envd's `/envs` and `/metrics`.

use super::Gateway;
use super::body::RestBody;
use super::error::ApiError;
use super::logs::{Level, Selection};
use super::rest::{blocking, body, gone_is_not_found, owned, rfc3339, sandbox_of};
use crate::serve::reply::SessionStats;
use axum::Json;
use axum::extract::{Path, RawQuery, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use serde::Deserialize;
use serde_json::{Value, json};
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// The most sandboxes one `GET /sandboxes/metrics` asks for (the spec's `maxItems`).
const MAX_METRICS_IDS: usize = 100;

/// `POST /sandboxes/{id}/resume`'s body (E2B's `ResumedSandbox`; `autoPause` is taken
/// and ignored: nothing pauses by itself here).
#[derive(Deserialize, Default)]
#[serde(default)]
struct ResumeRequest {
    timeout: Option<i64>,
}

/// `POST /sandboxes/{id}/pause`'s body (optional).
#[derive(Deserialize, Default)]
#[serde(default)]
struct PauseRequest {
    memory: Option<bool>,
}

/// The caller's tenant and a request's optional JSON body (none: its defaults).
fn caller_and_body<T: serde::de::DeserializeOwned + Default>(
    gateway: &Gateway,
    headers: &HeaderMap,
    bytes: &[u8],
) -> Result<(String, T), ApiError> {
    let tenant = gateway.tenants.caller(headers)?;
    let request = match bytes.is_empty() {
        true => T::default(),
        false => body(bytes)?,
    };
    Ok((tenant, request))
}

/// `POST /sandboxes/{id}/pause`: 204, or 409 when it was paused already (the SDK's
/// `pause()` then returns False).
pub async fn pause(
    State(gateway): State<Arc<Gateway>>,
    headers: HeaderMap,
    Path(id): Path<String>,
    RestBody(bytes): RestBody,
) -> Result<Response, ApiError> {
    let (tenant, request): (_, PauseRequest) = caller_and_body(&gateway, &headers, &bytes)?;
    if request.memory == Some(false) {
        return Err(ApiError::bad_request(
            "memory: false (a pause to disk, losing the processes) is not served by brig gateway: it pauses in memory only; leave it out or give true",
        ));
    }
    let already = blocking(&gateway, move |gateway| {
        owned(gateway, &tenant, &id)?;
        let already = gateway
            .backend
            .pause(&id)
            .map_err(|err| gone_is_not_found(err, &id))?;
        if !already {
            gateway.logs.record(&id, Level::Info, "sandbox paused", &[]);
        }
        Ok(already)
    })
    .await?;
    Ok(match already {
        true => {
            ApiError::new(StatusCode::CONFLICT, "the sandbox is paused already").into_response()
        }
        false => StatusCode::NO_CONTENT.into_response(),
    })
}

/// `POST /sandboxes/{id}/resume` (deprecated by E2B for connect): as connect, 201 with
/// the sandbox's address (its end moved to `timeout`, default 15 s, from now if that is
/// later), or 409 when it was not paused.
pub async fn resume(
    State(gateway): State<Arc<Gateway>>,
    headers: HeaderMap,
    Path(id): Path<String>,
    RestBody(bytes): RestBody,
) -> Result<Response, ApiError> {
    let (tenant, request): (_, ResumeRequest) = caller_and_body(&gateway, &headers, &bytes)?;
    let timeout = super::rest::seconds(request.timeout.unwrap_or(15), "timeout")?;
    let session = blocking(&gateway, move |gateway| {
        let session = sandbox_of(gateway, &tenant, &id)?;
        if session["state"] != "paused" {
            return Err(ApiError::new(
                StatusCode::CONFLICT,
                format!("sandbox {id:?} is running, not paused"),
            ));
        }
        Ok(resume_and_extend(gateway, &tenant, session, timeout)?.0)
    })
    .await?;
    Ok((StatusCode::CREATED, Json(address_of(&session))).into_response())
}

/// Connect's work (and the deprecated resume's): `session` (the caller's, a
/// `session_list` entry) resumed if it is paused, then its end moved to `timeout` from now
/// if that is later. The entry as it is then, and whether it was resumed.
pub fn resume_and_extend(
    gateway: &Gateway,
    tenant: &str,
    mut session: Value,
    timeout: Duration,
) -> Result<(Value, bool), ApiError> {
    let id = session["session"].as_str().unwrap_or_default().to_string();
    let resumed = resume_if_paused(gateway, &session)?;
    if resumed {
        // Its end, moved by the pause.
        session = sandbox_of(gateway, tenant, &id)?;
    }
    let wanted = SystemTime::now() + timeout;
    let ends = UNIX_EPOCH + Duration::from_millis(session["ends_at_ms"].as_u64().unwrap_or(0));
    if wanted > ends {
        gateway
            .backend
            .set_timeout(&id, timeout)
            .map_err(|err| gone_is_not_found(err, &id))?;
    }
    Ok((session, resumed))
}

/// Resumes `session` (a `session_list` entry) if it is paused: whether it was.
pub fn resume_if_paused(gateway: &Gateway, session: &Value) -> Result<bool, ApiError> {
    if session["state"] != "paused" {
        return Ok(false);
    }
    let id = session["session"].as_str().unwrap_or_default();
    let paused_ms = gateway
        .backend
        .resume(id)
        .map_err(|err| gone_is_not_found(err, id))?;
    if let Some(paused_ms) = paused_ms {
        let fields = [("paused_ms", paused_ms.to_string())];
        gateway
            .logs
            .record(id, Level::Info, "sandbox resumed", &fields);
    }
    Ok(paused_ms.is_some())
}

/// A listed session's address, as create and connect answer it.
fn address_of(session: &Value) -> Value {
    let metadata = &session["metadata"];
    super::rest::address(
        metadata[super::auth::TEMPLATE_KEY]
            .as_str()
            .unwrap_or("base"),
        session["session"].as_str().unwrap_or_default(),
        metadata[super::auth::TOKEN_KEY].as_str(),
        metadata[super::auth::TRAFFIC_KEY].as_str(),
    )
}

/// E2B's `SandboxMetric` of a session's stats.
fn metric(stats: &SessionStats) -> Value {
    let memory_total = stats
        .memory_limit
        .or_else(|| {
            nix::sys::sysinfo::sysinfo()
                .ok()
                .map(|info| info.ram_total())
        })
        .unwrap_or(0);
    json!({
        "timestamp": rfc3339(stats.at_ms),
        "timestampUnix": stats.at_ms / 1000,
        "cpuCount": stats.cpus.ceil().max(1.0) as u64,
        "cpuUsedPct": (stats.cpu_percent * 100.0).round() / 100.0,
        "memUsed": stats.memory_bytes.unwrap_or(0),
        "memTotal": memory_total,
        "memCache": stats.memory_cache_bytes.unwrap_or(0),
        "diskUsed": stats.workspace_used,
        "diskTotal": stats.workspace_size,
    })
}

/// `GET /sandboxes/{id}/metrics`: one metric, now (brig keeps no history: `start` and
/// `end` are taken and ignored).
pub async fn metrics(
    State(gateway): State<Arc<Gateway>>,
    headers: HeaderMap,
    Path(id): Path<String>,
) -> Result<Response, ApiError> {
    let tenant = gateway.tenants.caller(&headers)?;
    let stats = blocking(&gateway, move |gateway| {
        owned(gateway, &tenant, &id)?;
        gateway
            .backend
            .stats(&id)
            .map_err(|err| gone_is_not_found(err, &id))
    })
    .await?;
    Ok(Json(vec![metric(&stats)]).into_response())
}

/// The ids a `GET /sandboxes/metrics` asks for (`sandbox_ids`, comma separated, the
/// parameter given once or more), 1 to [`MAX_METRICS_IDS`] of them; else a 400 naming
/// the field. A router asks it too, to send each host its own ids (`route.rs`).
pub fn metrics_ids(query: Option<&str>) -> Result<Vec<String>, ApiError> {
    let pairs: Vec<(String, String)> = serde_urlencoded::from_str(query.unwrap_or(""))
        .map_err(|err| ApiError::bad_request(format!("the query string: {err}")))?;
    let ids: Vec<String> = pairs
        .into_iter()
        .filter(|(name, _)| name == "sandbox_ids")
        .flat_map(|(_, value)| {
            value
                .split(',')
                .map(str::trim)
                .filter(|id| !id.is_empty())
                .map(str::to_string)
                .collect::<Vec<_>>()
        })
        .collect();
    if ids.is_empty() || ids.len() > MAX_METRICS_IDS {
        return Err(ApiError::bad_request(format!(
            "sandbox_ids: {} ids; give 1 to {MAX_METRICS_IDS}, comma separated",
            ids.len()
        )));
    }
    Ok(ids)
}

/// `GET /sandboxes/metrics?sandbox_ids=A,B`: the metric now of each of the caller's
/// sandboxes named (others, and those that ended, left out).
pub async fn metrics_of_many(
    State(gateway): State<Arc<Gateway>>,
    headers: HeaderMap,
    RawQuery(raw): RawQuery,
) -> Result<Response, ApiError> {
    let tenant = gateway.tenants.caller(&headers)?;
    let ids = metrics_ids(raw.as_deref())?;
    let sandboxes = blocking(&gateway, move |gateway| {
        let mut found = BTreeMap::new();
        for id in ids {
            if owned(gateway, &tenant, &id).is_err() {
                continue;
            }
            if let Ok(stats) = gateway.backend.stats(&id) {
                found.insert(id, metric(&stats));
            }
        }
        Ok(found)
    })
    .await?;
    Ok(Json(json!({ "sandboxes": sandboxes })).into_response())
}

/// envd's `GET /envs`: the environment a command of the sandbox starts with.
pub async fn envd_envs(gateway: Arc<Gateway>, sandbox: String) -> Response {
    let answer = blocking(&gateway, move |gateway| {
        Ok(gateway.backend.environment(&sandbox)?)
    })
    .await;
    match answer {
        Ok(pairs) => Json(pairs.into_iter().collect::<BTreeMap<_, _>>()).into_response(),
        Err(err) => err.into_response(),
    }
}

/// envd's `GET /metrics`: envd's `Metrics` of the sandbox now.
pub async fn envd_metrics(gateway: Arc<Gateway>, sandbox: String) -> Response {
    let answer = blocking(&gateway, move |gateway| {
        Ok(gateway.backend.stats(&sandbox)?)
    })
    .await;
    match answer {
        Ok(stats) => {
            let metric = metric(&stats);
            Json(json!({
                "ts": stats.at_ms / 1000,
                "cpu_count": metric["cpuCount"],
                "cpu_used_pct": metric["cpuUsedPct"],
                "mem_total": metric["memTotal"],
                "mem_used": metric["memUsed"],
                "mem_cache": metric["memCache"],
                "mem_total_mib": metric["memTotal"].as_u64().unwrap_or(0) >> 20,
                "mem_used_mib": metric["memUsed"].as_u64().unwrap_or(0) >> 20,
                "disk_used": metric["diskUsed"],
                "disk_total": metric["diskTotal"],
            }))
            .into_response()
        }
        Err(err) => err.into_response(),
    }
}

/// Logs a Start's process end as its stream relays it (`logs.rs`).
pub struct EndLog {
    pub gateway: Arc<Gateway>,
    pub sandbox: String,
}

impl EndLog {
    pub fn ended(&self, pid: u64, end: &crate::gateway::proto::process::process_event::EndEvent) {
        let level = match end.exit_code {
            0 => Level::Info,
            _ => Level::Warn,
        };
        self.gateway.logs.record(
            &self.sandbox,
            level,
            "process ended",
            &[
                ("pid", pid.to_string()),
                ("exit_code", end.exit_code.to_string()),
                ("status", end.status.clone()),
            ],
        );
    }
}

/// Logs a process started by envd's `Process/Start`.
pub fn log_start(gateway: &Gateway, sandbox: &str, pid: u32, command: &str) {
    gateway.logs.record(
        sandbox,
        Level::Info,
        "process started",
        &[("pid", pid.to_string()), ("cmd", command.to_string())],
    );
}

/// A sandbox's log entries: `sandbox started` (its session's creation), then the
/// gateway's (`logs.rs`), oldest first.
fn entries_of(gateway: &Gateway, session: &Value) -> Vec<super::logs::Entry> {
    let id = session["session"].as_str().unwrap_or_default();
    let started = super::logs::Entry {
        at_ms: session["created_at_ms"].as_u64().unwrap_or(0),
        level: Level::Info,
        message: "sandbox started".into(),
        fields: BTreeMap::from([(
            "template".to_string(),
            session["metadata"][super::auth::TEMPLATE_KEY]
                .as_str()
                .unwrap_or("base")
                .to_string(),
        )]),
    };
    let (mut entries, dropped) = gateway.logs.read(id);
    if dropped == 0 {
        entries.insert(0, started);
    }
    entries
}

/// The parameters of a logs query; `start_name` is v1's `start` or v2's `cursor`.
fn selection(raw: Option<&str>, start_name: &str) -> Result<Selection, ApiError> {
    let pairs: Vec<(String, String)> = serde_urlencoded::from_str(raw.unwrap_or(""))
        .map_err(|err| ApiError::bad_request(format!("the query string: {err}")))?;
    let mut selection = Selection::default();
    let number = |name: &str, value: &str| {
        value.parse::<u64>().map_err(|_| {
            ApiError::bad_request(format!("{name}: {value:?}; give a non-negative integer"))
        })
    };
    for (name, value) in pairs {
        match name.as_str() {
            name if name == start_name => selection.start = number(name, &value)?,
            "limit" => selection.limit = number("limit", &value)?.min(1000) as usize,
            "direction" => {
                selection.forward = match value.as_str() {
                    "forward" => true,
                    "backward" => false,
                    _ => {
                        return Err(ApiError::bad_request(format!(
                            "direction: {value:?}; give forward or backward"
                        )));
                    }
                }
            }
            "level" => {
                selection.level = Level::parse(&value).ok_or_else(|| {
                    ApiError::bad_request(format!(
                        "level: {value:?}; give debug, info, warn or error"
                    ))
                })?
            }
            "search" => selection.search = Some(value),
            _ => {}
        }
    }
    Ok(selection)
}

/// The caller's sandbox `id`'s log entries that the query selects (`start_name`: v1's
/// `start` or v2's `cursor`).
async fn selected_logs(
    gateway: Arc<Gateway>,
    headers: &HeaderMap,
    id: String,
    raw: Option<&str>,
    start_name: &str,
) -> Result<Vec<super::logs::Entry>, ApiError> {
    let tenant = gateway.tenants.caller(headers)?;
    let selection = selection(raw, start_name)?;
    blocking(&gateway, move |gateway| {
        let session = sandbox_of(gateway, &tenant, &id)?;
        Ok(selection.apply(entries_of(gateway, &session)))
    })
    .await
}

/// `GET /sandboxes/{id}/logs` (deprecated by E2B; `V2` false): `logs` (lines, from
/// `start`) and `logEntries`; `GET /v2/sandboxes/{id}/logs` (`V2`): `logs`, structured
/// (`cursor`, `limit`, `direction`, `level`, `search` as the spec has them).
pub async fn logs<const V2: bool>(
    State(gateway): State<Arc<Gateway>>,
    headers: HeaderMap,
    Path(id): Path<String>,
    RawQuery(raw): RawQuery,
) -> Result<Response, ApiError> {
    let start_name = if V2 { "cursor" } else { "start" };
    let entries = selected_logs(gateway, &headers, id, raw.as_deref(), start_name).await?;
    let structured: Vec<Value> = entries.iter().map(super::logs::Entry::structured).collect();
    Ok(Json(match V2 {
        true => json!({ "logs": structured }),
        false => json!({
            "logs": entries.iter().map(super::logs::Entry::line).collect::<Vec<_>>(),
            "logEntries": structured,
        }),
    })
    .into_response())
}
