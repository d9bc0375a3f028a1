//! E2B's REST API (`spec/openapi.yml`): sandboxes created, listed, inspected, timed and
//! killed, each a brig session. The caller is the tenant of its `X-API-Key`
//! (`auth.rs`); errors are E2B's `Error` body (`error.rs`).

use super::Gateway;
use super::auth::{MASK_KEY, Owner, RESERVED, TEMPLATE_KEY, TENANT_KEY, TOKEN_KEY, TRAFFIC_KEY};
use super::backend::{Backend, NewSession};
use super::body::RestBody;
use super::envd::ENVD_VERSION;
use super::error::ApiError;
use axum::Json;
use axum::extract::{Path, RawQuery, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use serde::Deserialize;
use serde_json::{Value, json};
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, UNIX_EPOCH};

/// E2B's default sandbox timeout, when a request gives none.
const DEFAULT_TIMEOUT_SECONDS: u64 = 15;

pub fn routes() -> axum::Router<Arc<Gateway>> {
    axum::Router::new()
        .route("/health", get(health))
        .route("/sandboxes", post(create).get(list))
        .route("/v2/sandboxes", get(list))
        .route("/sandboxes/{id}", get(detail).delete(kill))
        .route("/sandboxes/{id}/timeout", post(set_timeout))
        .route("/sandboxes/{id}/connect", post(connect))
        .route("/sandboxes/{id}/pause", post(super::lifecycle::pause))
        .route("/sandboxes/{id}/resume", post(super::lifecycle::resume))
        .route("/sandboxes/{id}/metrics", get(super::lifecycle::metrics))
        .route("/sandboxes/metrics", get(super::lifecycle::metrics_of_many))
        .route("/sandboxes/{id}/logs", get(super::lifecycle::logs::<false>))
        .route(
            "/v2/sandboxes/{id}/logs",
            get(super::lifecycle::logs::<true>),
        )
        .route(
            "/sandboxes/{id}/network",
            axum::routing::put(super::create::update_network),
        )
}

async fn health() -> StatusCode {
    StatusCode::NO_CONTENT
}

/// Runs a blocking backend call off the async threads.
pub(super) async fn blocking<T: Send + 'static>(
    gateway: &Arc<Gateway>,
    work: impl FnOnce(&Gateway) -> Result<T, ApiError> + Send + 'static,
) -> Result<T, ApiError> {
    let gateway = gateway.clone();
    tokio::task::spawn_blocking(move || work(&gateway))
        .await
        .map_err(|err| ApiError::new(StatusCode::INTERNAL_SERVER_ERROR, err.to_string()))?
}

/// A JSON body, or a 400 naming what is wrong with it.
pub(super) fn body<T: serde::de::DeserializeOwned>(bytes: &[u8]) -> Result<T, ApiError> {
    serde_json::from_slice(bytes).map_err(|err| {
        ApiError::bad_request(format!(
            "the request body: {err}; send a JSON object as spec/openapi.yml describes"
        ))
    })
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct NewSandbox {
    #[serde(rename = "templateID")]
    template_id: String,
    timeout: Option<i64>,
    #[serde(default)]
    metadata: Option<BTreeMap<String, String>>,
    #[serde(default)]
    env_vars: Option<BTreeMap<String, String>>,
    #[serde(default)]
    secure: Option<bool>,
    #[serde(default, rename = "allow_internet_access")]
    allow_internet_access: Option<bool>,
    #[serde(default)]
    auto_pause: Option<bool>,
    #[serde(default)]
    network: Option<Value>,
    #[serde(default)]
    mcp: Option<Value>,
    #[serde(default)]
    volume_mounts: Option<Value>,
}

/// A timeout in seconds, as E2B gives it (a non-negative int32).
pub(super) fn seconds(value: i64, field: &str) -> Result<Duration, ApiError> {
    if value <= 0 || value > i64::from(i32::MAX) {
        return Err(ApiError::bad_request(format!(
            "{field}: {value}; give a number of seconds from 1 (to close a sandbox, kill it)"
        )));
    }
    Ok(Duration::from_secs(value as u64))
}

async fn create(
    State(gateway): State<Arc<Gateway>>,
    headers: HeaderMap,
    RestBody(bytes): RestBody,
) -> Result<Response, ApiError> {
    let tenant = gateway.tenants.caller(&headers)?;
    let request: NewSandbox = body(&bytes)?;
    let template = gateway.templates.get(&request.template_id)?;
    let egress = super::create::egress(request.allow_internet_access, request.network.as_ref())?;
    let ingress = super::create::ingress(request.network.as_ref())?;
    let not_served = |field: &str, given: bool| {
        if given {
            Err(ApiError::bad_request(format!(
                "{field}: not served by brig gateway yet (see docs/e2b.md); leave it out"
            )))
        } else {
            Ok(())
        }
    };
    not_served("autoPause", request.auto_pause == Some(true))?;
    not_served(
        "mcp",
        request.mcp.as_ref().is_some_and(|mcp| !mcp.is_null()),
    )?;
    not_served(
        "volumeMounts",
        request
            .volume_mounts
            .as_ref()
            .is_some_and(|mounts| mounts.as_array().is_none_or(|mounts| !mounts.is_empty())),
    )?;
    let timeout = seconds(
        request.timeout.unwrap_or(DEFAULT_TIMEOUT_SECONDS as i64),
        "timeout",
    )?;
    let mut metadata = request.metadata.unwrap_or_default();
    if let Some(key) = metadata.keys().find(|key| key.starts_with(RESERVED)) {
        return Err(ApiError::bad_request(format!(
            "metadata[{key:?}]: keys starting {RESERVED:?} are the gateway's own; rename it"
        )));
    }
    let new_token = || {
        super::auth::new_token().map_err(|err| {
            ApiError::new(
                StatusCode::INTERNAL_SERVER_ERROR,
                format!("brig gateway: read /dev/urandom for an access token: {err}"),
            )
        })
    };
    let token = match request.secure == Some(true) {
        true => Some(new_token()?),
        false => None,
    };
    let traffic_token = match ingress.private {
        true => Some(new_token()?),
        false => None,
    };
    metadata.insert(TENANT_KEY.into(), tenant.clone());
    metadata.insert(TEMPLATE_KEY.into(), request.template_id.clone());
    if let Some(token) = &token {
        metadata.insert(TOKEN_KEY.into(), token.clone());
    }
    if let Some(traffic_token) = &traffic_token {
        metadata.insert(TRAFFIC_KEY.into(), traffic_token.clone());
    }
    if let Some(mask) = &ingress.mask_host {
        metadata.insert(MASK_KEY.into(), mask.clone());
    }
    let mut env = Vec::new();
    for (name, value) in request.env_vars.unwrap_or_default() {
        if name.is_empty() || name.contains('=') || name.contains('\0') || value.contains('\0') {
            return Err(ApiError::bad_request(format!(
                "envVars[{name:?}]: a variable's name must be non-empty without '=' or NUL, its value without NUL"
            )));
        }
        env.push(format!("{name}={value}"));
    }
    let new = NewSession {
        timeout,
        metadata,
        options: super::create::sandbox_options(template, &egress, env),
        only_rules: match egress {
            super::create::Egress::Only(rules) => Some(rules),
            _ => None,
        },
        secrets: gateway.secrets.of(&tenant),
    };
    let memory = super::quota::template_memory(template);
    let id = super::quota::create_within(&gateway, &tenant, memory, new).await?;
    gateway.tenants.created(
        &id,
        Owner {
            tenant,
            token: token.clone(),
            traffic_token: traffic_token.clone(),
            mask_host: ingress.mask_host,
        },
    );
    let sandbox = address(
        &request.template_id,
        &id,
        token.as_deref(),
        traffic_token.as_deref(),
    );
    Ok((StatusCode::CREATED, Json(sandbox)).into_response())
}

/// E2B's `Sandbox`: how to reach a sandbox (create's and connect's answer), with the
/// token its ports need when it was made with `allowPublicTraffic: false`.
pub(super) fn address(
    template: &str,
    id: &str,
    token: Option<&str>,
    traffic_token: Option<&str>,
) -> Value {
    let mut sandbox = json!({
        "templateID": template,
        "alias": template,
        "sandboxID": id,
        "clientID": CLIENT_ID,
        "envdVersion": ENVD_VERSION,
        "domain": null,
    });
    if let Some(token) = token {
        sandbox["envdAccessToken"] = token.into();
    }
    if let Some(traffic_token) = traffic_token {
        sandbox["trafficAccessToken"] = traffic_token.into();
    }
    sandbox
}

/// E2B's deprecated `clientID`, the same for every sandbox here.
const CLIENT_ID: &str = "brig";

/// The caller's sandboxes (sessions whose metadata name its tenant) that hold every pair
/// of `filter`.
pub(super) fn sandboxes_of(
    gateway: &Gateway,
    tenant: &str,
    mut filter: BTreeMap<String, String>,
) -> Result<Vec<Value>, ApiError> {
    if let Some(key) = filter.keys().find(|key| key.starts_with(RESERVED)) {
        return Err(ApiError::bad_request(format!(
            "metadata: {key:?} is a key of the gateway's own; filter by your own keys"
        )));
    }
    filter.insert(TENANT_KEY.into(), tenant.into());
    Ok(gateway.backend.list(filter)?)
}

/// The caller's sandbox `id`: its session's entry, or 404 (none, or another tenant's).
pub(super) fn sandbox_of(gateway: &Gateway, tenant: &str, id: &str) -> Result<Value, ApiError> {
    let all = gateway.backend.list(BTreeMap::new())?;
    gateway.tenants.refresh(&all);
    all.into_iter()
        .find(|session| session["session"] == id && session["metadata"][TENANT_KEY] == tenant)
        .ok_or_else(|| ApiError::no_sandbox(id))
}

/// A session's entry as E2B's `ListedSandbox` / `SandboxDetail`.
fn described(session: &Value, detail: bool) -> Value {
    let metadata = &session["metadata"];
    let template = metadata[TEMPLATE_KEY].as_str().unwrap_or("base");
    let own: BTreeMap<&String, &Value> = metadata
        .as_object()
        .into_iter()
        .flatten()
        .filter(|(key, _)| !key.starts_with(RESERVED))
        .collect();
    let limits = &session["limits"];
    let mib = |value: &Value| value.as_u64().map_or(0, |bytes| bytes >> 20);
    let cpus = limits["cpus"].as_f64().map_or_else(
        || std::thread::available_parallelism().map_or(1, |count| count.get() as u64),
        |cpus| cpus.ceil() as u64,
    );
    let mut sandbox = json!({
        "templateID": template,
        "alias": template,
        "sandboxID": session["session"],
        "clientID": CLIENT_ID,
        "startedAt": rfc3339(session["created_at_ms"].as_u64().unwrap_or(0)),
        "endAt": rfc3339(session["ends_at_ms"].as_u64().unwrap_or(0)),
        "envdVersion": ENVD_VERSION,
        "cpuCount": cpus.max(1),
        "memoryMB": mib(&limits["memory"]),
        "diskSizeMB": mib(&limits["workspace_size"]),
        "state": if session["state"] == "paused" { "paused" } else { "running" },
        "metadata": own,
    });
    if detail {
        sandbox["allowInternetAccess"] = (limits["net"] != "none").into();
        sandbox["domain"] = Value::Null;
        if let Some(token) = metadata[TOKEN_KEY].as_str() {
            sandbox["envdAccessToken"] = token.into();
        }
    }
    sandbox
}

pub(super) fn rfc3339(unix_ms: u64) -> String {
    humantime::format_rfc3339_millis(UNIX_EPOCH + Duration::from_millis(unix_ms)).to_string()
}

/// A list's query: `metadata` (`k1=v1&k2=v2`, each key and value percent-encoded, as the
/// SDK sends it) and, for v2, `state` (`running`, `paused`; comma separated or repeated).
/// Other parameters (`limit`, `nextToken`, `order`, ...) are taken and ignored: every
/// list is one page.
#[derive(Default)]
struct ListQuery {
    metadata: Option<String>,
    states: Vec<String>,
}

impl ListQuery {
    fn parse(raw: Option<&str>) -> Result<ListQuery, ApiError> {
        let pairs: Vec<(String, String)> = serde_urlencoded::from_str(raw.unwrap_or(""))
            .map_err(|err| ApiError::bad_request(format!("the query string: {err}")))?;
        let mut query = ListQuery::default();
        for (name, value) in pairs {
            match name.as_str() {
                "metadata" => query.metadata = Some(value),
                "state" => query
                    .states
                    .extend(value.split(',').map(|state| state.trim().to_string())),
                _ => {}
            }
        }
        Ok(query)
    }
}

/// The pairs of a `metadata` query parameter.
fn metadata_filter(query: &ListQuery) -> Result<BTreeMap<String, String>, ApiError> {
    let Some(text) = &query.metadata else {
        return Ok(BTreeMap::new());
    };
    serde_urlencoded::from_str::<Vec<(String, String)>>(text)
        .map(|pairs| pairs.into_iter().collect())
        .map_err(|err| {
            ApiError::bad_request(format!(
                "metadata: {err}; give key=value pairs joined by '&', each percent-encoded"
            ))
        })
}

/// `GET /sandboxes` and `GET /v2/sandboxes` (the same list: one page).
async fn list(
    State(gateway): State<Arc<Gateway>>,
    headers: HeaderMap,
    RawQuery(raw): RawQuery,
) -> Result<Response, ApiError> {
    let tenant = gateway.tenants.caller(&headers)?;
    let query = ListQuery::parse(raw.as_deref())?;
    let filter = metadata_filter(&query)?;
    let wanted = |state: &str| query.states.is_empty() || query.states.iter().any(|s| s == state);
    let (running_wanted, paused_wanted) = (wanted("running"), wanted("paused"));
    let sessions = blocking(&gateway, move |gateway| {
        sandboxes_of(gateway, &tenant, filter)
    })
    .await?;
    let listed: Vec<Value> = sessions
        .iter()
        .map(|session| described(session, false))
        .filter(|sandbox| match sandbox["state"] == "paused" {
            true => paused_wanted,
            false => running_wanted,
        })
        .collect();
    Ok(Json(listed).into_response())
}

async fn detail(
    State(gateway): State<Arc<Gateway>>,
    headers: HeaderMap,
    Path(id): Path<String>,
) -> Result<Response, ApiError> {
    let tenant = gateway.tenants.caller(&headers)?;
    let session = blocking(&gateway, move |gateway| sandbox_of(gateway, &tenant, &id)).await?;
    Ok(Json(described(&session, true)).into_response())
}

async fn kill(
    State(gateway): State<Arc<Gateway>>,
    headers: HeaderMap,
    Path(id): Path<String>,
) -> Result<Response, ApiError> {
    let tenant = gateway.tenants.caller(&headers)?;
    blocking(&gateway, move |gateway| {
        owned(gateway, &tenant, &id)?;
        let closed = gateway.backend.close(&id);
        gateway.tenants.forget(&id);
        gateway.logs.forget(&id);
        closed.map_err(|err| gone_is_not_found(err, &id))
    })
    .await?;
    Ok(StatusCode::NO_CONTENT.into_response())
}

/// 404 unless `id` is the caller's (from the owners' cache, refreshed on a miss).
pub(super) fn owned(gateway: &Gateway, tenant: &str, id: &str) -> Result<(), ApiError> {
    match gateway.tenants.owner(&gateway.backend, id)? {
        Some(owner) if owner.tenant == tenant => Ok(()),
        _ => Err(ApiError::no_sandbox(id)),
    }
}

/// A sandbox that ended between the check and the call is not found, as E2B says it.
pub(super) fn gone_is_not_found(err: super::backend::BackendError, id: &str) -> ApiError {
    match err.failure {
        super::backend::Failure::Gone => ApiError::no_sandbox(id),
        _ => err.into(),
    }
}

#[derive(Deserialize)]
struct TimeoutRequest {
    timeout: i64,
}

/// The caller's tenant and the `timeout` of its body (set_timeout's, connect's).
fn timeout_request(
    gateway: &Gateway,
    headers: &HeaderMap,
    bytes: &[u8],
) -> Result<(String, Duration), ApiError> {
    let tenant = gateway.tenants.caller(headers)?;
    let request: TimeoutRequest = body(bytes)?;
    Ok((tenant, seconds(request.timeout, "timeout")?))
}

async fn set_timeout(
    State(gateway): State<Arc<Gateway>>,
    headers: HeaderMap,
    Path(id): Path<String>,
    RestBody(bytes): RestBody,
) -> Result<Response, ApiError> {
    let (tenant, timeout) = timeout_request(&gateway, &headers, &bytes)?;
    blocking(&gateway, move |gateway| {
        owned(gateway, &tenant, &id)?;
        gateway
            .backend
            .set_timeout(&id, timeout)
            .map_err(|err| gone_is_not_found(err, &id))?;
        let seconds = timeout.as_secs().to_string();
        let fields = [("timeout_s", seconds)];
        gateway
            .logs
            .record(&id, super::logs::Level::Info, "timeout set", &fields);
        Ok(())
    })
    .await?;
    Ok(StatusCode::NO_CONTENT.into_response())
}

/// E2B's connect: the sandbox's address (201 when it was paused and is resumed, 200 when
/// it ran), its end moved to `timeout` from now if that is later (a sandbox's life is
/// only ever extended by it).
async fn connect(
    State(gateway): State<Arc<Gateway>>,
    headers: HeaderMap,
    Path(id): Path<String>,
    RestBody(bytes): RestBody,
) -> Result<Response, ApiError> {
    let (tenant, timeout) = timeout_request(&gateway, &headers, &bytes)?;
    let (session, resumed) = blocking(&gateway, move |gateway| {
        let session = sandbox_of(gateway, &tenant, &id)?;
        super::lifecycle::resume_and_extend(gateway, &tenant, session, timeout)
    })
    .await?;
    let metadata = &session["metadata"];
    let sandbox = address(
        metadata[TEMPLATE_KEY].as_str().unwrap_or("base"),
        session["session"].as_str().unwrap_or_default(),
        metadata[TOKEN_KEY].as_str(),
        metadata[TRAFFIC_KEY].as_str(),
    );
    let status = match resumed {
        true => StatusCode::CREATED,
        false => StatusCode::OK,
    };
    Ok((status, Json(sandbox)).into_response())
}

/// Whether the server behind the gateway answers (for `brig gateway`'s start).
pub fn check(backend: &Backend) -> Result<(), super::backend::BackendError> {
    backend.check().map(drop)
}
