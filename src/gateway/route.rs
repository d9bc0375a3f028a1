//! Many brig hosts behind many gateways, with no shared state: a sandbox's id names the
//! host that owns it, so any gateway can send a request for it there.
//!
//! - The id: a host started with `--host-id NAME` gives its sandboxes the id
//!   `{NAME}-{session}` (the session id: 32 lowercase hex digits, brig serve's), which
//!   reads back unambiguously from its end and stays a DNS label in the host form
//!   `{port}-{id}.{domain}` (`NAME` at most [`HOST_ID_MAX`] characters). The server
//!   knows only the session id: a host takes its own name off what it is asked and puts
//!   it on every `sandboxID` it answers. A bare session id (a host without `--host-id`)
//!   is served by the host it reaches.
//! - A host layer ([`host_layer`], in front of the REST API and envd): a request for
//!   another host's sandbox goes there (`--peer-url` / `--peers`), streaming both ways
//!   with hyper's client; a create while draining is refused (503, so that a router tries
//!   another host); `/healthz`, `/readyz` and `/metrics` are answered here (`health.rs`).
//! - A router (a gateway without `--server`, [`router`]): creates go to `--create-url`
//!   or to the `--peers` in turn (the next one on 503 or no answer), lists are asked of
//!   every peer and merged, the metrics of many sandboxes split by the host each id
//!   names ([`MANY_METRICS`]), everything else goes to the host the id names.
//!
//! A host that does not answer (connection refused, its name gone from DNS, no connection
//! within [`CONNECT_TIMEOUT`]) is taken as gone with its sandboxes: the SDK's NotFound
//! (404: E2B's error body for the REST API, Connect's `not_found` for a sandbox's own).

use super::body::MAX_REST_BODY;
use super::connect::{Code, ConnectError};
use super::error::ApiError;
use super::health::{self, Health, RequestKind};
use axum::body::Body;
use axum::extract::{Request, State};
use axum::http::{HeaderMap, HeaderName, HeaderValue, Method, StatusCode, Uri, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;
use serde_json::Value;
use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

/// A session id as brig serve makes it: 128 random bits in lowercase hex.
pub const SESSION_ID_LEN: usize = 32;

/// The longest `--host-id`: `{port}-{NAME}-{session}` must stay a DNS label (63), with a
/// port of up to 5 digits.
pub const HOST_ID_MAX: usize = 63 - "65535-".len() - 1 - SESSION_ID_LEN;

/// A peer that accepts no connection within this is taken as gone.
pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(1);

/// How many hosts a router's create tries before it gives up (each refusing with 503 or
/// not answering); with `--create-url`, how many times it asks that address.
const CREATE_TRIES: usize = 3;

/// Whether `name` may be a `--host-id`: a DNS label's characters (lowercase letters,
/// digits, inner '-'), 1 to [`HOST_ID_MAX`] of them. The error says what to change.
pub fn check_host_id(name: &str) -> Result<(), String> {
    if name.is_empty() || name.len() > HOST_ID_MAX {
        return Err(format!(
            "{name:?} is {} characters; give 1 to {HOST_ID_MAX} (the sandbox ids it goes into must stay DNS labels)",
            name.len()
        ));
    }
    if !name
        .bytes()
        .all(|byte| byte.is_ascii_lowercase() || byte.is_ascii_digit() || byte == b'-')
        || name.starts_with('-')
        || name.ends_with('-')
    {
        return Err(format!(
            "{name:?}: use lowercase letters, digits and inner '-' only (a DNS label, e.g. a StatefulSet pod's name)"
        ));
    }
    Ok(())
}

fn is_session_id(text: &str) -> bool {
    text.len() == SESSION_ID_LEN
        && text
            .bytes()
            .all(|byte| byte.is_ascii_digit() || (b'a'..=b'f').contains(&byte))
}

/// The id a sandbox is known by outside: the session id, with the host's name before it.
pub fn public_id(host: Option<&str>, session: &str) -> String {
    match host {
        Some(host) => format!("{host}-{session}"),
        None => session.to_string(),
    }
}

/// What an id says: the host that owns it (None: a bare session id) and the session id.
/// None for a text brig makes no ids like.
pub fn parse_id(id: &str) -> Option<(Option<&str>, &str)> {
    if is_session_id(id) {
        return Some((None, id));
    }
    let split = id.len().checked_sub(SESSION_ID_LEN + 1)?;
    let (host, rest) = (id.get(..split)?, id.get(split..)?);
    let session = rest.strip_prefix('-')?;
    (is_session_id(session) && check_host_id(host).is_ok()).then_some((Some(host), session))
}

/// Where a request's sandbox id was written.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Addressed {
    /// The SDK's `E2b-Sandbox-Id` header (envd, the interpreter, a port).
    Header,
    /// A `Host` of `{port}-{id}.{domain}`.
    Host,
    /// The REST API's `/sandboxes/{id}...` (or `/v2/sandboxes/{id}...`).
    Path,
}

/// The REST API's metrics of many sandboxes, whose ids are in the query, not the path.
pub const MANY_METRICS: &str = "/sandboxes/metrics";

/// The sandbox a request is for, and where it said so.
pub fn addressed(uri: &Uri, headers: &HeaderMap) -> Option<(String, Addressed)> {
    if let Some((id, _port)) = super::sandbox_address(headers, uri) {
        let how = if headers.contains_key("e2b-sandbox-id") {
            Addressed::Header
        } else {
            Addressed::Host
        };
        return Some((id, how));
    }
    let path = uri.path();
    if path == MANY_METRICS {
        return None;
    }
    let rest = path
        .strip_prefix("/sandboxes/")
        .or_else(|| path.strip_prefix("/v2/sandboxes/"))?;
    let id = rest.split('/').next().filter(|id| !id.is_empty())?;
    Some((id.to_string(), Addressed::Path))
}

/// Where a request for a sandbox goes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Decision {
    /// Served by this host's server, which knows the sandbox as `session`.
    Here { session: String },
    /// Another host's: sent to its gateway at `url`.
    Forward { host: String, url: String },
    /// No host this gateway can reach owns it: the SDK's NotFound, with why.
    NotFound { reason: String },
}

/// Who this gateway is and which peers it knows.
#[derive(Clone, Debug, Default)]
pub struct Peers {
    /// `--host-id` (None: a router, or a single host without names).
    pub own: Option<String>,
    /// `--peers`: names, each with its own URL when given as `NAME=URL`.
    pub named: BTreeMap<String, Option<String>>,
    /// `--peer-url`, with `{host}` where a peer's name goes.
    pub template: Option<String>,
    /// Whether this gateway has a server of its own (a host, not a router).
    pub has_server: bool,
}

impl Peers {
    /// Reads `--peers` (`NAME[=URL],...`) and `--peer-url`; the error names the option
    /// and the fix.
    pub fn parse(
        own: Option<&str>,
        peers: Option<&str>,
        template: Option<&str>,
        has_server: bool,
    ) -> Result<Peers, String> {
        if let Some(own) = own {
            check_host_id(own).map_err(|err| format!("--host-id {err}"))?;
        }
        if let Some(template) = template {
            check_url(template, "--peer-url")?;
            if !template.contains("{host}") {
                return Err(format!(
                    "--peer-url {template}: no {{host}} in it; write where a host's name goes, e.g. http://{{host}}.brig-hosts:3000"
                ));
            }
        }
        let mut named = BTreeMap::new();
        for entry in peers
            .unwrap_or("")
            .split(',')
            .filter(|entry| !entry.is_empty())
        {
            let (name, url) = match entry.split_once('=') {
                Some((name, url)) => {
                    check_url(url, "--peers")?;
                    (name, Some(url.trim_end_matches('/').to_string()))
                }
                None => (entry, None),
            };
            check_host_id(name).map_err(|err| format!("--peers: {err}"))?;
            if url.is_none() && template.is_none() {
                return Err(format!(
                    "--peers {name}: no URL for it; write {name}=http://HOST:PORT or give --peer-url"
                ));
            }
            if named.insert(name.to_string(), url).is_some() {
                return Err(format!(
                    "--peers: {name} is listed twice; list each host once"
                ));
            }
        }
        Ok(Peers {
            own: own.map(str::to_string),
            named,
            template: template.map(|url| url.trim_end_matches('/').to_string()),
            has_server,
        })
    }

    /// The base URL of `host`'s gateway, if this gateway knows how to reach it.
    pub fn url_of(&self, host: &str) -> Option<String> {
        if let Some(Some(url)) = self.named.get(host) {
            return Some(url.clone());
        }
        self.template
            .as_ref()
            .map(|template| template.replace("{host}", host))
    }

    /// Every peer's name and URL (`--peers`), for lists and a router's creates.
    pub fn all(&self) -> Vec<(String, String)> {
        self.named
            .keys()
            .filter(|name| Some(name.as_str()) != self.own.as_deref())
            .filter_map(|name| Some((name.clone(), self.url_of(name)?)))
            .collect()
    }

    /// Where a request for sandbox `id` goes.
    pub fn decide(&self, id: &str) -> Decision {
        let not_found = |reason: String| Decision::NotFound { reason };
        match parse_id(id) {
            Some((Some(host), session)) if Some(host) == self.own.as_deref() => Decision::Here {
                session: session.to_string(),
            },
            Some((Some(host), _)) => match self.url_of(host) {
                Some(url) => Decision::Forward {
                    host: host.to_string(),
                    url,
                },
                None => not_found(format!(
                    "sandbox {id:?} not found: its host {host:?} is not one this gateway knows (--peers, --peer-url)"
                )),
            },
            // A bare id is the server's own; anything else, too, for a host, whose
            // server answers it is not found.
            _ if self.has_server => Decision::Here {
                session: id.to_string(),
            },
            Some((None, _)) => not_found(format!(
                "sandbox {id:?} not found: its id names no host, so a router cannot tell whose it is; ask its host's gateway"
            )),
            None => not_found(format!("sandbox {id:?} not found: not a sandbox id")),
        }
    }
}

fn check_url(url: &str, option: &str) -> Result<(), String> {
    if url.starts_with("http://") {
        Ok(())
    } else {
        Err(format!(
            "{option} {url}: give an http:// URL (gateways talk plain HTTP to each other, inside the cluster)"
        ))
    }
}

/// hyper's client, HTTP/1.1, for the peers.
pub type PeerClient = Client<HttpConnector, Body>;

pub fn peer_client() -> PeerClient {
    let mut connector = HttpConnector::new();
    connector.set_connect_timeout(Some(CONNECT_TIMEOUT));
    connector.set_nodelay(true);
    Client::builder(TokioExecutor::new())
        .pool_idle_timeout(Duration::from_secs(30))
        .build(connector)
}

/// Headers that belong to one connection, not to the request carried on.
const HOP_BY_HOP: [&str; 7] = [
    "connection",
    "keep-alive",
    "proxy-connection",
    "te",
    "trailer",
    "transfer-encoding",
    "upgrade",
];

fn strip_hop_by_hop(headers: &mut HeaderMap) {
    for name in HOP_BY_HOP {
        headers.remove(name);
    }
}

/// The answer for a sandbox nobody reachable owns: E2B's 404 on the REST API,
/// Connect's `not_found` (also 404, which the interpreter's SDK takes as NotFound) on a
/// sandbox's own ports.
pub fn not_found(how: Addressed, reason: String) -> Response {
    match how {
        Addressed::Path => ApiError::new(StatusCode::NOT_FOUND, reason).into_response(),
        Addressed::Header | Addressed::Host => {
            ConnectError::new(Code::NotFound, reason).into_response()
        }
    }
}

/// Why a peer gave no answer.
pub struct Unanswered(pub String);

/// The answer to a request that a peer did not take: NotFound, on a connection that then
/// closes (`Connection: close`): the request's body went with the attempt unread, and a
/// client reusing the connection would find it closed under its next request.
fn unanswered(how: Addressed, reason: String) -> Response {
    let mut answer = not_found(how, reason);
    answer
        .headers_mut()
        .insert(header::CONNECTION, HeaderValue::from_static("close"));
    answer
}

/// Sends `request` to the gateway at `base` (its path and query kept, its headers too
/// but those of one connection), streaming both bodies; a WebSocket (or other) upgrade
/// is joined end to end once the peer switches protocols.
pub async fn forward(
    client: &PeerClient,
    base: &str,
    mut request: Request,
) -> Result<Response, Unanswered> {
    let path = request
        .uri()
        .path_and_query()
        .map_or("/", |path| path.as_str());
    let uri: Uri = format!("{base}{path}")
        .parse()
        .map_err(|err| Unanswered(format!("{base}{path}: not a URL: {err}")))?;
    // An HTTP/2 request's authority is its Host: it names the sandbox in the host form.
    if !request.headers().contains_key(header::HOST)
        && let Some(authority) = request.uri().authority()
        && let Ok(value) = HeaderValue::from_str(authority.as_str())
    {
        request.headers_mut().insert(header::HOST, value);
    }
    let upgrade = request.headers().get(header::UPGRADE).cloned();
    let upgrade_here = upgrade.as_ref().map(|_| hyper::upgrade::on(&mut request));
    let (mut parts, body) = request.into_parts();
    strip_hop_by_hop(&mut parts.headers);
    if let Some(protocol) = &upgrade {
        parts
            .headers
            .insert(header::CONNECTION, HeaderValue::from_static("upgrade"));
        parts.headers.insert(header::UPGRADE, protocol.clone());
    }
    let mut outgoing = axum::http::Request::from_parts(parts, body);
    *outgoing.uri_mut() = uri;
    *outgoing.version_mut() = axum::http::Version::HTTP_11;
    let mut answer = client
        .request(outgoing)
        .await
        .map_err(|err| Unanswered(describe_client_error(base, &err)))?;
    if answer.status() == StatusCode::SWITCHING_PROTOCOLS
        && let Some(upgrade_here) = upgrade_here
    {
        let upgrade_there = hyper::upgrade::on(&mut answer);
        tokio::spawn(async move {
            if let (Ok(here), Ok(there)) = (upgrade_here.await, upgrade_there.await) {
                let mut here = hyper_util::rt::TokioIo::new(here);
                let mut there = hyper_util::rt::TokioIo::new(there);
                let _ = tokio::io::copy_bidirectional(&mut here, &mut there).await;
            }
        });
        let (parts, _) = answer.into_parts();
        return Ok(Response::from_parts(parts, Body::empty()));
    }
    let (mut parts, body) = answer.into_parts();
    strip_hop_by_hop(&mut parts.headers);
    Ok(Response::from_parts(parts, Body::new(body)))
}

fn describe_client_error(base: &str, err: &hyper_util::client::legacy::Error) -> String {
    use std::error::Error as _;
    let mut text = err.to_string();
    let mut source = err.source();
    while let Some(cause) = source {
        text.push_str(": ");
        text.push_str(&cause.to_string());
        source = cause.source();
    }
    format!("{base} does not answer ({text})")
}

/// The kind of a request, for the metrics.
fn kind_of(how: Option<Addressed>, headers: &HeaderMap, uri: &Uri) -> RequestKind {
    match how {
        None | Some(Addressed::Path) => RequestKind::Rest,
        Some(_) => match super::sandbox_address(headers, uri) {
            Some((_, port)) if port == super::interpreter::INTERPRETER_PORT.to_string() => {
                RequestKind::Interpreter
            }
            _ => RequestKind::Envd,
        },
    }
}

/// What the host layer needs: the gateway, its peers, its health.
pub struct HostState {
    pub gateway: Arc<super::Gateway>,
    pub peers: Peers,
    pub client: PeerClient,
    pub health: Arc<Health>,
}

/// In front of a host's REST API and envd: health, forwarding, its name on ids, creates
/// refused while draining.
pub async fn host_layer(
    State(state): State<Arc<HostState>>,
    mut request: Request,
    next: Next,
) -> Response {
    if let Some(path) = health::health_path(&request) {
        return health::answer_host(&state, path).await;
    }
    let started = Instant::now();
    let target = addressed(request.uri(), request.headers());
    let kind = kind_of(
        target.as_ref().map(|(_, how)| *how),
        request.headers(),
        request.uri(),
    );
    if let Some((id, how)) = &target {
        match state.peers.decide(id) {
            Decision::Here { session } => {
                if session != *id {
                    readdress(&mut request, *how, id, &session);
                }
            }
            Decision::Forward { host, url } => {
                let answer = match forward(&state.client, &url, request).await {
                    Ok(answer) => answer,
                    Err(Unanswered(why)) => {
                        state.health.failed("peer_unreachable");
                        unanswered(
                            *how,
                            format!("sandbox {id:?} not found: its host {host:?} at {why}"),
                        )
                    }
                };
                state.health.observe(RequestKind::Forwarded, started);
                return answer;
            }
            Decision::NotFound { reason } => {
                return not_found(*how, reason);
            }
        }
    }
    if request.method() == Method::GET && request.uri().path() == MANY_METRICS {
        let answer = many_metrics(
            &state.peers,
            &state.client,
            &state.health,
            request,
            Some(next),
        )
        .await;
        state.health.observe(kind, started);
        return answer;
    }
    let create = request.method() == Method::POST && request.uri().path() == "/sandboxes";
    if create && state.health.draining() {
        state.health.failed("create_refused_draining");
        return ApiError::new(
            StatusCode::SERVICE_UNAVAILABLE,
            format!(
                "brig host {} is draining (SIGTERM): it takes no new sandboxes; create on another host",
                state.peers.own.as_deref().unwrap_or("(unnamed)")
            ),
        )
        .into_response();
    }
    let rest = matches!(kind, RequestKind::Rest);
    let answer = next.run(request).await;
    let status = answer.status();
    if create {
        if status == StatusCode::CREATED {
            state.health.created(started);
        } else {
            state.health.failed("create_failed");
        }
    } else if status.is_server_error() {
        state.health.failed("server_error");
    }
    let answer = match (&state.peers.own, rest) {
        (Some(own), true) => with_host_on_ids(answer, own).await,
        _ => answer,
    };
    state.health.observe(kind, started);
    answer
}

/// Rewrites a request for `public` (this host's name and `session`) to `session`, the id
/// the server knows, where the request named it.
fn readdress(request: &mut Request, how: Addressed, public: &str, session: &str) {
    match how {
        Addressed::Header => {
            if let Ok(value) = HeaderValue::from_str(session) {
                request
                    .headers_mut()
                    .insert(HeaderName::from_static("e2b-sandbox-id"), value);
            }
        }
        Addressed::Host => {
            // HTTP/2 names the host in the URI's authority, HTTP/1.1 in `Host`: the
            // rewritten name goes in `Host`, which the handlers read first.
            let host = request
                .headers()
                .get(header::HOST)
                .and_then(|value| value.to_str().ok())
                .or_else(|| {
                    request
                        .uri()
                        .authority()
                        .map(|authority| authority.as_str())
                })
                .map(|host| host.replacen(&format!("-{public}."), &format!("-{session}."), 1));
            if let Some(value) = host.and_then(|host| HeaderValue::from_str(&host).ok()) {
                request.headers_mut().insert(header::HOST, value);
            }
        }
        Addressed::Path => {
            let uri = request.uri();
            let path = uri.path().replacen(
                &format!("/sandboxes/{public}"),
                &format!("/sandboxes/{session}"),
                1,
            );
            let rewritten = match uri.query() {
                Some(query) => format!("{path}?{query}"),
                None => path,
            };
            if let Ok(rewritten) = rewritten.parse() {
                *request.uri_mut() = rewritten;
            }
        }
    }
}

/// A REST answer with this host's name put on every `sandboxID` in it (a sandbox, or a
/// list of them).
async fn with_host_on_ids(answer: Response, own: &str) -> Response {
    let json = answer
        .headers()
        .get(header::CONTENT_TYPE)
        .and_then(|value| value.to_str().ok())
        .is_some_and(|value| value.starts_with("application/json"));
    if !json {
        return answer;
    }
    let (mut parts, body) = answer.into_parts();
    let Ok(bytes) = axum::body::to_bytes(body, MAX_REST_BODY).await else {
        return ApiError::new(
            StatusCode::INTERNAL_SERVER_ERROR,
            format!("brig gateway: a REST answer over {MAX_REST_BODY} bytes, or broken off"),
        )
        .into_response();
    };
    let Ok(mut value) = serde_json::from_slice::<Value>(&bytes) else {
        return Response::from_parts(parts, Body::from(bytes));
    };
    name_ids(&mut value, own);
    let bytes = serde_json::to_vec(&value).expect("JSON");
    parts.headers.remove(header::CONTENT_LENGTH);
    Response::from_parts(parts, Body::from(bytes))
}

/// Puts `own` on the bare session ids of `value`'s `sandboxID`s.
pub fn name_ids(value: &mut Value, own: &str) {
    let name = |sandbox: &mut Value| {
        if let Some(id) = sandbox.get("sandboxID").and_then(Value::as_str)
            && is_session_id(id)
        {
            sandbox["sandboxID"] = public_id(Some(own), id).into();
        }
    };
    match value {
        Value::Array(sandboxes) => sandboxes.iter_mut().for_each(name),
        Value::Object(_) => name(value),
        _ => {}
    }
}

/// What a router needs.
pub struct RouterState {
    pub peers: Peers,
    pub client: PeerClient,
    pub health: Arc<Health>,
    /// `--create-url`: where creates go (None: the peers in turn).
    pub create_url: Option<String>,
    /// `--api-keys`, if the router has them (else it checks a key's form only).
    pub keys: Option<super::ApiKeys>,
    /// The peer the next create starts with.
    next: AtomicUsize,
}

impl RouterState {
    pub fn new(
        peers: Peers,
        health: Arc<Health>,
        create_url: Option<String>,
        keys: Option<super::ApiKeys>,
    ) -> RouterState {
        RouterState {
            peers,
            client: peer_client(),
            health,
            create_url,
            keys,
            next: AtomicUsize::new(0),
        }
    }
}

/// Whether a router lets a REST request by: a key present and of the form keys have (or
/// one of `--api-keys`, when it has them).
pub fn check_key(keys: Option<&super::ApiKeys>, headers: &HeaderMap) -> Result<(), ApiError> {
    let unauthorized = |message: &str| ApiError::new(StatusCode::UNAUTHORIZED, message);
    let key = headers
        .get("x-api-key")
        .and_then(|value| value.to_str().ok())
        .ok_or_else(|| unauthorized("no X-API-Key header; send one of this gateway's API keys"))?;
    let known = match keys {
        Some(keys) => keys.tenant(key).is_some(),
        None => key.len() >= 16 && key.bytes().all(|byte| byte.is_ascii_graphic()),
    };
    if known {
        Ok(())
    } else {
        Err(unauthorized(
            "X-API-Key: not a key of this gateway; ask its operator for one",
        ))
    }
}

/// Every request a router takes.
pub async fn router(State(state): State<Arc<RouterState>>, request: Request) -> Response {
    if let Some(path) = health::health_path(&request) {
        return health::answer_router(&state, path).await;
    }
    let started = Instant::now();
    let target = addressed(request.uri(), request.headers());
    let rest = !matches!(target, Some((_, Addressed::Header | Addressed::Host)));
    if rest && let Err(err) = check_key(state.keys.as_ref(), request.headers()) {
        return err.into_response();
    }
    let path = request.uri().path().to_string();
    let answer = match (target, request.method().clone()) {
        (Some((id, how)), _) => match state.peers.decide(&id) {
            Decision::Forward { host, url } => match forward(&state.client, &url, request).await {
                Ok(answer) => answer,
                Err(Unanswered(why)) => {
                    state.health.failed("peer_unreachable");
                    unanswered(
                        how,
                        format!("sandbox {id:?} not found: its host {host:?} at {why}"),
                    )
                }
            },
            Decision::NotFound { reason } | Decision::Here { session: reason } => {
                not_found(how, reason)
            }
        },
        (None, Method::POST) if path == "/sandboxes" => {
            let answer = create(&state, request).await;
            if answer.status() == StatusCode::CREATED {
                state.health.created(started);
            } else {
                state.health.failed("create_failed");
            }
            answer
        }
        (None, Method::GET) if path == "/sandboxes" || path == "/v2/sandboxes" => {
            list(&state, request).await
        }
        (None, Method::GET) if path == MANY_METRICS => {
            many_metrics(&state.peers, &state.client, &state.health, request, None).await
        }
        (None, _) => {
            let (parts, _) = request.into_parts();
            ApiError::new(
                StatusCode::NOT_FOUND,
                format!(
                    "{} {}: a brig router serves creates, lists, many sandboxes' metrics and requests for a sandbox (see docs/kubernetes.md)",
                    parts.method,
                    parts.uri.path()
                ),
            )
            .into_response()
        }
    };
    state.health.observe(RequestKind::Routed, started);
    answer
}

/// The hosts a router's create tries, in order: `--create-url` [`CREATE_TRIES`] times,
/// or the peers from the next one in turn.
pub fn create_targets(
    create_url: Option<&str>,
    peers: &[(String, String)],
    start: usize,
) -> Vec<(String, String)> {
    match create_url {
        Some(url) => vec![("--create-url".to_string(), url.to_string()); CREATE_TRIES],
        None if peers.is_empty() => Vec::new(),
        None => (0..peers.len())
            .map(|offset| peers[(start + offset) % peers.len()].clone())
            .collect(),
    }
}

/// A create, sent to one host after another until one takes it (anything but 503 or no
/// answer).
async fn create(state: &RouterState, request: Request) -> Response {
    let (parts, body) = request.into_parts();
    let bytes = match super::body::read(body, MAX_REST_BODY).await {
        Ok(bytes) => bytes,
        Err(err) => return super::body::rest_refusal(&err).into_response(),
    };
    let start = state.next.fetch_add(1, Ordering::Relaxed);
    let targets = create_targets(state.create_url.as_deref(), &state.peers.all(), start);
    let mut refusals = Vec::new();
    for (name, url) in targets {
        let attempt = Request::from_parts(parts.clone(), Body::from(bytes.clone()));
        match forward(&state.client, &url, attempt).await {
            Ok(answer) if answer.status() == StatusCode::SERVICE_UNAVAILABLE => {
                let (_, body) = answer.into_parts();
                let said = axum::body::to_bytes(body, 64 << 10)
                    .await
                    .unwrap_or_default();
                let said = serde_json::from_slice::<Value>(&said)
                    .ok()
                    .and_then(|said| said["message"].as_str().map(str::to_string))
                    .unwrap_or_else(|| "503".to_string());
                refusals.push(format!("{name}: {said}"));
            }
            Ok(answer) => return answer,
            Err(Unanswered(why)) => {
                state.health.failed("peer_unreachable");
                refusals.push(format!("{name}: {why}"));
            }
        }
    }
    ApiError::new(
        StatusCode::SERVICE_UNAVAILABLE,
        format!(
            "no brig host takes creates now ({}); retry later, or add hosts",
            if refusals.is_empty() {
                "no --peers, no --create-url".to_string()
            } else {
                refusals.join("; ")
            }
        ),
    )
    .into_response()
}

/// `GET /sandboxes/metrics?sandbox_ids=...` where ids name their hosts: each host is
/// asked for its own ids (this host's through `local`, the handlers behind the host
/// layer, with its session ids), concurrently, and the answers' `sandboxes` merged under
/// the ids as asked. An id no reachable host owns, or a host that does not answer, is
/// left out (as the one-host answer leaves out another tenant's and ended sandboxes); a
/// host that refuses (a bad key) is answered as it answered.
async fn many_metrics(
    peers: &Peers,
    client: &PeerClient,
    health: &Health,
    request: Request,
    local: Option<Next>,
) -> Response {
    let (parts, _) = request.into_parts();
    let ids = match super::lifecycle::metrics_ids(parts.uri.query()) {
        Ok(ids) => ids,
        Err(err) => return err.into_response(),
    };
    // By where each goes: None for this host, else the peer's URL; (as asked, as sent).
    let mut by_host: BTreeMap<Option<String>, Vec<(String, String)>> = BTreeMap::new();
    for id in ids {
        match peers.decide(&id) {
            Decision::Here { session } if local.is_some() => {
                by_host.entry(None).or_default().push((id, session))
            }
            Decision::Forward { url, .. } => {
                by_host.entry(Some(url)).or_default().push((id.clone(), id))
            }
            _ => {}
        }
    }
    let ask = |ids: &[(String, String)]| {
        let sent: Vec<&str> = ids.iter().map(|(_, sent)| sent.as_str()).collect();
        let query =
            serde_urlencoded::to_string([("sandbox_ids", sent.join(","))]).unwrap_or_default();
        let mut request = Request::from_parts(parts.clone(), Body::empty());
        *request.uri_mut() = format!("{MANY_METRICS}?{query}")
            .parse()
            .unwrap_or_default();
        request
    };
    let mut asked = Vec::new();
    let mut here = None;
    for (host, ids) in &by_host {
        match host {
            None => here = Some(ask(ids)),
            Some(url) => {
                asked.push(async move { (Some(url), forward(client, url, ask(ids)).await) })
            }
        }
    }
    let remote = futures_util::future::join_all(asked);
    let (mut answers, local_answer) = match (here, local) {
        (Some(request), Some(next)) => {
            let (answers, answer) = tokio::join!(remote, next.run(request));
            (answers, Some(answer))
        }
        _ => (remote.await, None),
    };
    answers.extend(local_answer.map(|answer| (None, Ok(answer))));
    let mut merged = serde_json::Map::new();
    for (host, answer) in answers {
        let Ok(answer) = answer else {
            health.failed("peer_unreachable");
            continue;
        };
        if answer.status() != StatusCode::OK {
            return answer;
        }
        let said = json_of::<Value>(answer).await;
        let Some(Value::Object(sandboxes)) = said.map(|mut said| said["sandboxes"].take()) else {
            return ApiError::new(
                StatusCode::BAD_GATEWAY,
                "a host's metrics were not E2B's SandboxesWithMetrics (or over 16 MiB)",
            )
            .into_response();
        };
        let ids = &by_host[&host.cloned()];
        for (sent, metric) in sandboxes {
            // Under the id as asked (a session id here is this host's public id).
            if let Some((asked, _)) = ids.iter().find(|(_, id)| *id == sent) {
                merged.insert(asked.clone(), metric);
            }
        }
    }
    axum::Json(serde_json::json!({ "sandboxes": merged })).into_response()
}

/// A peer's answer as JSON of type `T`: None when it is not, or is over
/// [`MAX_REST_BODY`], or broke off.
async fn json_of<T: serde::de::DeserializeOwned>(answer: Response) -> Option<T> {
    let bytes = axum::body::to_bytes(answer.into_body(), MAX_REST_BODY)
        .await
        .ok()?;
    serde_json::from_slice(&bytes).ok()
}

/// A list: every peer's, merged. A peer that does not answer has no sandboxes (they went
/// with it); one that refuses (a bad key, a bad filter) is answered as it answered.
async fn list(state: &RouterState, request: Request) -> Response {
    let (parts, _) = request.into_parts();
    let peers = state.peers.all();
    let asked = peers.iter().map(|(_, url)| {
        let request = Request::from_parts(parts.clone(), Body::empty());
        forward(&state.client, url, request)
    });
    let answers = futures_util::future::join_all(asked).await;
    let mut merged = Vec::new();
    for answer in answers {
        let Ok(answer) = answer else {
            state.health.failed("peer_unreachable");
            continue;
        };
        if answer.status() != StatusCode::OK {
            return answer;
        }
        match json_of::<Vec<Value>>(answer).await {
            Some(listed) => merged.extend(listed),
            None => {
                return ApiError::new(
                    StatusCode::BAD_GATEWAY,
                    "a host's list was not a JSON array (or over 16 MiB)",
                )
                .into_response();
            }
        }
    }
    axum::Json(merged).into_response()
}

#[cfg(test)]
mod tests {
    use super::*;

    const SESSION: &str = "0123456789abcdef0123456789abcdef";

    #[test]
    fn an_id_names_its_host_and_reads_back() {
        for host in ["h0", "brig-host-2", "a", &"x".repeat(HOST_ID_MAX)] {
            let id = public_id(Some(host), SESSION);
            assert_eq!(parse_id(&id), Some((Some(host), SESSION)), "{id}");
            // The host form stays a DNS label.
            assert!(format!("65535-{id}").len() <= 63, "{id}");
        }
        assert_eq!(public_id(None, SESSION), SESSION);
        assert_eq!(parse_id(SESSION), Some((None, SESSION)));
    }

    #[test]
    fn a_bad_id_or_host_name_is_refused() {
        for id in [
            "",
            "abc",
            "h0-0123",
            "H0-0123456789abcdef0123456789abcdef",
            "h0_0123456789abcdef0123456789abcdef",
            "-0123456789abcdef0123456789abcdef",
            "h0-0123456789ABCDEF0123456789abcdef",
            "h0-0123456789abcdef0123456789abcdefa",
            "h.0-0123456789abcdef0123456789abcdef",
        ] {
            assert_eq!(parse_id(id), None, "{id:?}");
        }
        for (name, expected) in [
            ("", "is 0 characters; give 1 to 24"),
            (&"x".repeat(25), "is 25 characters"),
            ("Brig", "lowercase letters, digits and inner '-'"),
            ("brig-", "inner '-'"),
            ("brig.host", "inner '-'"),
        ] {
            let err = check_host_id(name).unwrap_err();
            assert!(err.contains(expected), "{name:?}: {err}");
        }
    }

    #[test]
    fn a_request_goes_to_the_host_its_id_names() {
        let host = Peers::parse(
            Some("h0"),
            Some("h1=http://127.0.0.1:4001,h2"),
            Some("http://{host}.brig-hosts:3000"),
            true,
        )
        .unwrap();
        let router = Peers::parse(None, Some("h0,h1"), Some("http://{host}:3000"), false).unwrap();
        let bare_router =
            Peers::parse(None, Some("h0=http://127.0.0.1:4000"), None, false).unwrap();
        let here = |session: &str| Decision::Here {
            session: session.into(),
        };
        let forward = |host: &str, url: &str| Decision::Forward {
            host: host.into(),
            url: url.into(),
        };
        let id = |host: &str| public_id(Some(host), SESSION);
        for (peers, sandbox, expected) in [
            (&host, id("h0"), Ok(here(SESSION))),
            (&host, SESSION.to_string(), Ok(here(SESSION))),
            (&host, "junk".to_string(), Ok(here("junk"))),
            (&host, id("h1"), Ok(forward("h1", "http://127.0.0.1:4001"))),
            (
                &host,
                id("h2"),
                Ok(forward("h2", "http://h2.brig-hosts:3000")),
            ),
            (
                &host,
                id("h9"),
                Ok(forward("h9", "http://h9.brig-hosts:3000")),
            ),
            (&router, id("h0"), Ok(forward("h0", "http://h0:3000"))),
            (&router, SESSION.to_string(), Err("names no host")),
            (&router, "junk".to_string(), Err("not a sandbox id")),
            (
                &bare_router,
                id("h0"),
                Ok(forward("h0", "http://127.0.0.1:4000")),
            ),
            (
                &bare_router,
                id("h1"),
                Err("its host \"h1\" is not one this gateway knows"),
            ),
        ] {
            match (peers.decide(&sandbox), expected) {
                (Decision::NotFound { reason }, Err(expected)) => {
                    assert!(reason.contains(expected), "{sandbox}: {reason}")
                }
                (decision, Ok(expected)) => assert_eq!(decision, expected, "{sandbox}"),
                (decision, Err(expected)) => panic!("{sandbox}: {decision:?}, not {expected}"),
            }
        }
    }

    #[test]
    fn bad_peer_options_are_named_with_their_fix() {
        for (own, peers, template, expected) in [
            (Some("H0"), None, None, "--host-id \"H0\": use lowercase"),
            (None, None, Some("http://hosts:3000"), "no {host} in it"),
            (
                None,
                None,
                Some("https://{host}:3000"),
                "give an http:// URL",
            ),
            (None, Some("h0"), None, "--peers h0: no URL for it"),
            (
                None,
                Some("h0=ftp://x"),
                None,
                "--peers ftp://x: give an http://",
            ),
            (
                None,
                Some("h0=http://a,h0=http://b"),
                None,
                "h0 is listed twice",
            ),
            (None, Some("h_0=http://a"), None, "--peers: \"h_0\""),
        ] {
            let err = Peers::parse(own, peers, template, false).unwrap_err();
            assert!(err.contains(expected), "{err}");
        }
    }

    #[test]
    fn a_routers_creates_go_round_the_peers() {
        let peers: Vec<(String, String)> = ["h0", "h1", "h2"]
            .iter()
            .map(|name| (name.to_string(), format!("http://{name}")))
            .collect();
        let names = |targets: Vec<(String, String)>| {
            targets
                .into_iter()
                .map(|(name, _)| name)
                .collect::<Vec<_>>()
        };
        assert_eq!(names(create_targets(None, &peers, 0)), ["h0", "h1", "h2"]);
        assert_eq!(names(create_targets(None, &peers, 4)), ["h1", "h2", "h0"]);
        assert_eq!(
            names(create_targets(Some("http://svc"), &peers, 1)),
            ["--create-url"; CREATE_TRIES]
        );
        assert!(create_targets(None, &[], 0).is_empty());
    }

    #[test]
    fn a_request_for_this_host_is_readdressed_where_it_named_the_sandbox() {
        let public = public_id(Some("h0"), SESSION);
        let request = |uri: &str, headers: &[(&str, String)]| {
            let mut request = Request::builder().uri(uri);
            for (name, value) in headers {
                request = request.header(*name, value);
            }
            request.body(Body::empty()).unwrap()
        };
        let mut by_path = request(&format!("/sandboxes/{public}/timeout?x=1"), &[]);
        assert_eq!(
            addressed(by_path.uri(), by_path.headers()),
            Some((public.clone(), Addressed::Path))
        );
        readdress(&mut by_path, Addressed::Path, &public, SESSION);
        assert_eq!(
            by_path.uri().to_string(),
            format!("/sandboxes/{SESSION}/timeout?x=1")
        );
        let mut by_header = request(
            "/process.Process/List",
            &[
                ("e2b-sandbox-id", public.clone()),
                ("host", "127.0.0.1:3000".into()),
            ],
        );
        assert_eq!(
            addressed(by_header.uri(), by_header.headers()),
            Some((public.clone(), Addressed::Header))
        );
        readdress(&mut by_header, Addressed::Header, &public, SESSION);
        assert_eq!(by_header.headers()["e2b-sandbox-id"], SESSION);
        let mut by_host = request("/execute", &[("host", format!("49999-{public}.brig.test"))]);
        assert_eq!(
            addressed(by_host.uri(), by_host.headers()),
            Some((public.clone(), Addressed::Host))
        );
        readdress(&mut by_host, Addressed::Host, &public, SESSION);
        assert_eq!(
            by_host.headers()["host"],
            format!("49999-{SESSION}.brig.test").as_str()
        );
        let listed = request("/v2/sandboxes?state=running", &[]);
        assert_eq!(addressed(listed.uri(), listed.headers()), None);
        // Many sandboxes' metrics name them in the query: no one sandbox's request.
        let many = request(&format!("/sandboxes/metrics?sandbox_ids={public}"), &[]);
        assert_eq!(addressed(many.uri(), many.headers()), None);
        let one = request(&format!("/sandboxes/{public}/metrics"), &[]);
        assert_eq!(
            addressed(one.uri(), one.headers()),
            Some((public.clone(), Addressed::Path))
        );
    }

    #[test]
    fn a_hosts_answers_carry_its_name() {
        let mut one = serde_json::json!({"sandboxID": SESSION, "templateID": "base"});
        name_ids(&mut one, "h1");
        assert_eq!(one["sandboxID"], public_id(Some("h1"), SESSION));
        let mut listed = serde_json::json!([{"sandboxID": SESSION}, {"sandboxID": "other"}]);
        name_ids(&mut listed, "h1");
        assert_eq!(listed[0]["sandboxID"], public_id(Some("h1"), SESSION));
        assert_eq!(listed[1]["sandboxID"], "other");
    }

    #[test]
    fn a_router_checks_a_keys_form_or_the_key() {
        let mut headers = HeaderMap::new();
        assert!(check_key(None, &headers).is_err());
        headers.insert("x-api-key", "short".parse().unwrap());
        assert!(check_key(None, &headers).is_err());
        headers.insert("x-api-key", "e2b_0123456789abcdef".parse().unwrap());
        assert!(check_key(None, &headers).is_ok());
        let keys = super::super::ApiKeys::parse("e2b_fedcba9876543210 bob\n", "keys").unwrap();
        assert!(check_key(Some(&keys), &headers).is_err());
        headers.insert("x-api-key", "e2b_fedcba9876543210".parse().unwrap());
        assert!(check_key(Some(&keys), &headers).is_ok());
    }
}
