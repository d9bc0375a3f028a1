//! E2B's sandbox lifecycle beyond create and kill: pause and resume (in memory: the
//! session's jail frozen by the cgroup freezer, `session_pause` / `session_resume`),
//! metrics (`session_stats`: the jail's cgroup and workspace), and envd's `/envs` and
//! `/metrics`.

use super::Gateway;
use super::error::ApiError;
use super::rest::{blocking, body, gone_is_not_found, owned, rfc3339, sandbox_of};
use crate::serve::reply::SessionStats;
use axum::Json;
use axum::extract::{Path, RawQuery, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use bytes::Bytes;
use serde::Deserialize;
use serde_json::{Value, json};
use std::collections::BTreeMap;
use std::sync::Arc;

/// The most sandboxes one `GET /sandboxes/metrics` asks for (the spec's `maxItems`).
const MAX_METRICS_IDS: usize = 100;

/// `POST /sandboxes/{id}/pause`'s body (optional).
#[derive(Deserialize, Default)]
#[serde(default)]
struct PauseRequest {
    memory: Option<bool>,
}

/// `POST /sandboxes/{id}/pause`: 204, or 409 when it was paused already (the SDK's
/// `pause()` then returns False).
pub async fn pause(
    State(gateway): State<Arc<Gateway>>,
    headers: HeaderMap,
    Path(id): Path<String>,
    bytes: Bytes,
) -> Result<Response, ApiError> {
    let tenant = gateway.tenants.caller(&headers)?;
    let request: PauseRequest = match bytes.is_empty() {
        true => PauseRequest::default(),
        false => body(&bytes)?,
    };
    if request.memory == Some(false) {
        return Err(ApiError::bad_request(
            "memory: false (a pause to disk, losing the processes) is not served by brig gateway: it pauses in memory only; leave it out or give true",
        ));
    }
    let already = blocking(&gateway, move |gateway| {
        owned(gateway, &tenant, &id)?;
        gateway
            .backend
            .pause(&id)
            .map_err(|err| gone_is_not_found(err, &id))
    })
    .await?;
    Ok(match already {
        true => ApiError::new(StatusCode::CONFLICT, "the sandbox is paused already").into_response(),
        false => StatusCode::NO_CONTENT.into_response(),
    })
}

/// `POST /sandboxes/{id}/resume` (deprecated by E2B for connect): 201 with the sandbox's
/// address, or 409 when it was not paused.
pub async fn resume(
    State(gateway): State<Arc<Gateway>>,
    headers: HeaderMap,
    Path(id): Path<String>,
    bytes: Bytes,
) -> Result<Response, ApiError> {
    let tenant = gateway.tenants.caller(&headers)?;
    if !bytes.is_empty() {
        // Its `timeout` is checked as E2B's; the sandbox keeps its end, moved by the pause.
        let request: Value = body(&bytes)?;
        if let Some(timeout) = request.get("timeout").and_then(Value::as_i64) {
            super::rest::seconds(timeout, "timeout")?;
        }
    }
    let session = blocking(&gateway, move |gateway| {
        let session = sandbox_of(gateway, &tenant, &id)?;
        match resume_if_paused(gateway, &session)? {
            true => Ok(session),
            false => Err(ApiError::new(
                StatusCode::CONFLICT,
                format!("sandbox {id:?} is running, not paused"),
            )),
        }
    })
    .await?;
    Ok((StatusCode::CREATED, Json(address_of(&session))).into_response())
}

/// Resumes `session` (a `session_list` entry) if it is paused: whether it was.
pub fn resume_if_paused(gateway: &Gateway, session: &Value) -> Result<bool, ApiError> {
    if session["state"] != "paused" {
        return Ok(false);
    }
    let id = session["session"].as_str().unwrap_or_default();
    gateway
        .backend
        .resume(id)
        .map_err(|err| gone_is_not_found(err, id))
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
    )
}

/// E2B's `SandboxMetric` of a session's stats.
fn metric(stats: &SessionStats) -> Value {
    let memory_total = stats
        .memory_limit
        .or_else(|| nix::sys::sysinfo::sysinfo().ok().map(|info| info.ram_total()))
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

/// `GET /sandboxes/metrics?sandbox_ids=A,B`: the metric now of each of the caller's
/// sandboxes named (others, and those that ended, left out).
pub async fn metrics_of_many(
    State(gateway): State<Arc<Gateway>>,
    headers: HeaderMap,
    RawQuery(raw): RawQuery,
) -> Result<Response, ApiError> {
    let tenant = gateway.tenants.caller(&headers)?;
    let pairs: Vec<(String, String)> = serde_urlencoded::from_str(raw.as_deref().unwrap_or(""))
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
    let answer = blocking(&gateway, move |gateway| Ok(gateway.backend.stats(&sandbox)?)).await;
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
