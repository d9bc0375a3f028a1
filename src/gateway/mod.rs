//! `brig gateway`: E2B's API served by brig, so that a program written for E2B's SDK runs
//! against a brig host by changing `E2B_API_URL`, `E2B_SANDBOX_URL` and `E2B_API_KEY`.
//! Its own process, next to a `brig serve` (which stays single-threaded and forking):
//! tokio and axum (hyper: HTTP/1.1 and h2c) on one listener, which serves
//!
//! - E2B's REST API (`rest.rs`): a sandbox is a brig session;
//! - envd, the in-sandbox API (`envd.rs` its processes, `files.rs` its files, over the
//!   Connect protocol of `connect.rs`, with the messages `proto.rs` generates), for
//!   requests addressed to a sandbox: by the
//!   SDK's `E2b-Sandbox-Id` / `E2b-Sandbox-Port` headers (its `E2B_SANDBOX_URL` form),
//!   or by a `Host` of `{port}-{sandboxID}.{domain}`.
//!
//! Any other port of a sandbox reaches a server its program runs there (`ports.rs`:
//! `get_host(port)`, HTTP and WebSocket, over a connection the jail's init opens).
//!
//! `config.rs` is the command line and the API-key file, `auth.rs` the tenants and who
//! owns which sandbox, `error.rs` the REST API's errors, and `backend.rs` every call to
//! the brig server. Many hosts: `route.rs` sends a request for another host's sandbox to
//! it (a host's layer in front of the rest, or a router without a server of its own),
//! `health.rs` answers `/healthz`, `/readyz`, `/metrics` and drains on SIGTERM.

mod audit;
mod auth;
mod backend;
mod body;
mod config;
mod connect;
mod create;
mod envd;
mod error;
mod files;
mod health;
mod interpreter;
mod lifecycle;
mod logs;
mod ports;
pub mod proto;
mod quota;
mod rest;
mod route;
mod secrets;
mod server_metrics;
mod stream_input;
mod tls;

pub use config::{ApiKeys, GatewayArgs};

use crate::error::{Error, Result};
use axum::extract::{Request, State};
use axum::http::{HeaderMap, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use backend::Backend;
use error::ApiError;
use std::sync::Arc;

/// The port envd listens on in an E2B sandbox, as the SDK addresses it.
pub const ENVD_PORT: u16 = 49983;

/// What every request handler shares.
pub struct Gateway {
    backend: Backend,
    tenants: auth::Tenants,
    /// Streams open at once (processes, watchers, cells, each holding a thread and a
    /// connection to the server), a share per tenant (`quota.rs`).
    streams: Arc<quota::Shares>,
    /// Upgraded connections to sandboxes' ports relayed at once (`ports.rs`), a share per
    /// tenant.
    tunnels: Arc<quota::Shares>,
    /// What each tenant's sandboxes may hold (`quota.rs`).
    quotas: quota::Quotas,
    /// `--templates`, and the built-in ones.
    templates: create::Templates,
    /// What ran in each sandbox and what was done to it (`logs.rs`).
    logs: logs::Logs,
    /// `--tenant-secrets`.
    secrets: secrets::TenantSecrets,
}

/// `brig gateway`: serves until SIGTERM or SIGINT (then drains, `health.rs`); exit 0
/// then, 125 when it cannot start as configured.
pub fn run(args: GatewayArgs) -> Result<i32> {
    let peers = route::Peers::parse(
        args.host_id.as_deref(),
        args.peers.as_deref(),
        args.peer_url.as_deref(),
        args.server.is_some(),
    )
    .map_err(Error::input)?;
    let keys = args.api_keys.as_deref().map(ApiKeys::read).transpose()?;
    let templates =
        create::Templates::load(args.templates.as_deref(), args.template_roots.as_deref())?;
    let tenant_secrets = secrets::TenantSecrets::read(args.tenant_secrets.as_deref())?;
    let tls = match (&args.tls_cert, &args.tls_key) {
        (Some(cert), Some(key)) => Some(tls::acceptor(cert, key)?),
        (None, None) => None,
        (Some(_), None) => {
            return Err(Error::input(
                "--tls-cert needs --tls-key: give the certificate's private key too",
            ));
        }
        (None, Some(_)) => {
            return Err(Error::input(
                "--tls-key needs --tls-cert: give the certificate it is the key of too",
            ));
        }
    };
    // Each connection holds a descriptor (each stream one more): a shell's soft limit
    // (often 1,024) would refuse clients after about a thousand idle ones.
    use nix::sys::resource::{Resource, getrlimit, setrlimit};
    if let Ok((soft, hard)) = getrlimit(Resource::RLIMIT_NOFILE)
        && soft < hard
    {
        setrlimit(Resource::RLIMIT_NOFILE, hard, hard).map_err(|errno| {
            Error::os(
                format!("brig gateway: raise the soft RLIMIT_NOFILE from {soft} to {hard}"),
                errno,
            )
        })?;
    }
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .map_err(|err| Error::setup(format!("brig gateway: start tokio's runtime: {err}")))?;
    let Some(server) = args.server.clone() else {
        if peers.all().is_empty() {
            return Err(Error::input(
                "a router (no --server) needs --peers: name the hosts it sends requests to",
            ));
        }
        if let Some(url) = &args.create_url
            && !url.starts_with("http://")
        {
            return Err(Error::input(format!(
                "--create-url {url}: give an http:// URL (the hosts' Service, inside the cluster)"
            )));
        }
        let health = Arc::new(health::Health::new(false));
        let tenancy = audit::Tenancy::new(keys.clone().unwrap_or_default(), None);
        let audit_log = open_audit_log(&args, tenancy, &health)?;
        let state = Arc::new(route::RouterState::new(
            peers,
            health.clone(),
            args.create_url.clone(),
            keys,
        ));
        let app = with_audit(
            axum::Router::new()
                .fallback(route::router)
                .with_state(state)
                .layer(axum::middleware::from_fn(body::layer)),
            audit_log,
        );
        let _guard = runtime.enter();
        return runtime.block_on(serve(args, app, tls, health::drain_router(health)));
    };
    let Some(keys) = keys else {
        return Err(Error::input(
            "--api-keys: needed with --server; give a file of `KEY TENANT` lines",
        ));
    };
    let streams = quota::Shares::new(
        "streams",
        (args.max_streams, "--max-streams"),
        (args.max_streams_per_tenant, "--max-streams-per-tenant"),
        keys.tenant_count(),
    )?;
    let tunnels = quota::Shares::new(
        "upgraded connections",
        (args.max_tunnels, "--max-tunnels"),
        (args.max_tunnels_per_tenant, "--max-tunnels-per-tenant"),
        keys.tenant_count(),
    )?;
    let quotas = quota::Quotas::new(
        args.max_sandboxes_per_tenant,
        args.max_memory_per_tenant,
        keys.overrides(),
    );
    let audit_keys = keys.clone();
    let backend = Backend::new(server.clone());
    rest::check(&backend).map_err(|err| {
        Error::input(format!(
            "--server {}: {err}; start `brig serve --socket {}` first",
            server.display(),
            server.display()
        ))
    })?;
    let gateway = Arc::new(Gateway {
        backend: backend.clone(),
        tenants: auth::Tenants::new(keys),
        streams: Arc::new(streams),
        tunnels: Arc::new(tunnels),
        quotas,
        templates,
        logs: logs::Logs::default(),
        secrets: tenant_secrets,
    });
    let health = Arc::new(health::Health::new(true));
    let tenancy = audit::Tenancy::new(audit_keys, Some(gateway.clone()));
    let audit_log = open_audit_log(&args, tenancy, &health)?;
    let _guard = runtime.enter();
    let host = Arc::new(route::HostState {
        gateway: gateway.clone(),
        peers,
        client: route::peer_client(),
        health: health.clone(),
    });
    let handlers = rest::routes()
        .fallback(no_route)
        .layer(axum::middleware::from_fn_with_state(
            gateway.clone(),
            to_sandbox,
        ))
        .with_state(gateway);
    // The host layer rewrites a request's sandbox id before the handlers route it: a
    // router's own layer runs after its routing, so the handlers are a service behind.
    let app = axum::Router::new()
        .fallback_service(handlers)
        .layer(axum::middleware::from_fn_with_state(
            host,
            route::host_layer,
        ))
        .layer(axum::middleware::from_fn(body::layer));
    let app = with_audit(app, audit_log);
    let drained = health::drain_host(health, backend, args.drain_grace.0);
    runtime.block_on(serve(args, app, tls, drained))
}

/// `--audit-log`, opened before the gateway listens (an unwritable path stops it).
fn open_audit_log(
    args: &GatewayArgs,
    tenancy: audit::Tenancy,
    health: &health::Health,
) -> Result<Option<Arc<audit::AuditLog>>> {
    args.audit_log
        .as_deref()
        .map(|path| audit::AuditLog::open(path, tenancy, health.audit_dropped()).map(Arc::new))
        .transpose()
}

/// The app with the audit log's layer around everything (health paths, forwards too).
fn with_audit(app: axum::Router, audit_log: Option<Arc<audit::AuditLog>>) -> axum::Router {
    match audit_log {
        Some(audit_log) => app.layer(axum::middleware::from_fn_with_state(
            audit_log,
            audit::layer,
        )),
        None => app,
    }
}

/// How long open connections may go on once the gateway has drained (streams of
/// sandboxes just ended, clients slow to close) before it exits regardless.
const CLOSE_AFTER_DRAIN: std::time::Duration = std::time::Duration::from_secs(5);

async fn serve(
    args: GatewayArgs,
    app: axum::Router,
    tls: Option<tokio_rustls::TlsAcceptor>,
    drained: impl std::future::Future<Output = ()> + Send + 'static,
) -> Result<i32> {
    let listener = tokio::net::TcpListener::bind(args.listen)
        .await
        .map_err(|err| {
            Error::input(format!(
                "--listen {}: cannot listen there: {err}; give a free HOST:PORT of this host",
                args.listen
            ))
        })?;
    let address = listener
        .local_addr()
        .map_err(|err| Error::setup(format!("brig gateway: read the listener's address: {err}")))?;
    let scheme = if tls.is_some() { "https" } else { "http" };
    {
        use std::io::Write;
        // Scripts (and the tests) read the address, the port when it was 0.
        let mut stdout = std::io::stdout();
        let _ = writeln!(stdout, "brig gateway: listening on {scheme}://{address}");
        let _ = stdout.flush();
    }
    // Drained, the gateway stops taking connections and lets open ones finish, for
    // CLOSE_AFTER_DRAIN at most.
    let (done, stopping) = tokio::sync::oneshot::channel::<()>();
    let shutdown = async move {
        drained.await;
        let _ = done.send(());
    };
    let served = async {
        match tls {
            Some(acceptor) => {
                let listener = tls::TlsListener::new(listener, acceptor).map_err(|err| {
                    Error::setup(format!("brig gateway: read the listener's address: {err}"))
                })?;
                axum::serve(listener, app)
                    .with_graceful_shutdown(shutdown)
                    .await
            }
            None => {
                // Nagle's algorithm would hold each small frame of a stream (an envelope
                // after the headers) until the client's delayed ACK, 40 ms a time.
                let listener = axum::serve::ListenerExt::tap_io(listener, |connection| {
                    let _ = connection.set_nodelay(true);
                });
                axum::serve(listener, app)
                    .with_graceful_shutdown(shutdown)
                    .await
            }
        }
        .map_err(|err| Error::setup(format!("brig gateway: serve on {address}: {err}")))
    };
    let late = async {
        if stopping.await.is_ok() {
            tokio::time::sleep(CLOSE_AFTER_DRAIN).await;
        } else {
            std::future::pending::<()>().await;
        }
    };
    tokio::select! {
        served = served => served?,
        _ = late => {}
    }
    Ok(0)
}

async fn no_route(request: Request) -> ApiError {
    ApiError::new(
        StatusCode::NOT_FOUND,
        format!(
            "{} {}: no such route in E2B's API as brig gateway serves it (see docs/e2b.md)",
            request.method(),
            request.uri().path()
        ),
    )
}

/// Which sandbox and port a request is addressed to, if any: the SDK's headers, or a
/// `Host` (HTTP/2's `:authority`, which hyper puts in the URI) of
/// `{port}-{sandboxID}.{domain}`.
fn sandbox_address(headers: &HeaderMap, uri: &axum::http::Uri) -> Option<(String, String)> {
    let text = |name: &str| headers.get(name).and_then(|value| value.to_str().ok());
    if let Some(id) = text("e2b-sandbox-id") {
        let port = text("e2b-sandbox-port").unwrap_or("49983");
        return Some((id.to_string(), port.to_string()));
    }
    let host = text("host").or_else(|| uri.authority().map(|authority| authority.as_str()))?;
    let (label, _domain) = host.split_once('.')?;
    let (port, id) = label.split_once('-')?;
    (!port.is_empty()
        && port.bytes().all(|byte| byte.is_ascii_digit())
        && !id.is_empty()
        && id
            .bytes()
            .all(|byte| byte.is_ascii_alphanumeric() || byte == b'-'))
    .then(|| (id.to_string(), port.to_string()))
}

/// E2B's proxy answers 502 for a sandbox it cannot reach: the SDK takes it as the sandbox
/// having ended (`is_running()` is false, other calls raise its timeout error).
fn unreachable(sandbox: &str, message: String) -> Response {
    (
        StatusCode::BAD_GATEWAY,
        axum::Json(serde_json::json!({"code": 502, "message": message, "sandboxId": sandbox})),
    )
        .into_response()
}

/// Sends a request addressed to a sandbox to its envd; others go on to the REST API.
async fn to_sandbox(State(gateway): State<Arc<Gateway>>, request: Request, next: Next) -> Response {
    let Some((sandbox, port)) = sandbox_address(request.headers(), request.uri()) else {
        return next.run(request).await;
    };
    let (parts, body) = request.into_parts();
    let unreachable = |message: String| unreachable(&sandbox, message);
    let to_interpreter = port == interpreter::INTERPRETER_PORT.to_string();
    // Any other port: a server the sandbox's program runs there (`ports.rs`).
    let other_port = match port != ENVD_PORT.to_string() && !to_interpreter {
        true => match ports::parse_port(&port) {
            Ok(port) => Some(port),
            Err(message) => {
                return ApiError::new(
                    StatusCode::BAD_REQUEST,
                    format!("sandbox {sandbox:?}: {message}"),
                )
                .into_response();
            }
        },
        false => None,
    };
    let owner = {
        let gateway = gateway.clone();
        let id = sandbox.clone();
        tokio::task::spawn_blocking(move || gateway.tenants.owner(&gateway.backend, &id)).await
    };
    let refused = match owner {
        Ok(Ok(Some(owner))) => Ok(owner),
        Ok(Ok(None)) => Err(unreachable(format!("sandbox {sandbox:?} not found"))),
        Ok(Err(err)) => Err(ApiError::from(err).into_response()),
        Err(err) => {
            Err(ApiError::new(StatusCode::INTERNAL_SERVER_ERROR, err.to_string()).into_response())
        }
    };
    let owner = match refused {
        Ok(owner) => owner,
        Err(answer) => {
            return answer;
        }
    };
    // A port's traffic is reached by the sandbox's id alone, as E2B's by default; with
    // its traffic access token for a sandbox made with `allowPublicTraffic: false`.
    if let Some(port) = other_port {
        let request = Request::from_parts(parts, body);
        return ports::serve(gateway, &owner, sandbox, port, request).await;
    }
    // The interpreter SDK sends the sandbox's token only with `/execute`, not with its
    // `/contexts` calls (E2B's own server checks none): those are reached by the
    // sandbox's id, as E2B's.
    let token_needed = !to_interpreter || parts.uri.path() == "/execute";
    if let Some(token) = owner.token.as_ref().filter(|_| token_needed) {
        let given = parts
            .headers
            .get("x-access-token")
            .and_then(|value| value.to_str().ok());
        if given != Some(token.as_str()) {
            return ApiError::new(
                StatusCode::UNAUTHORIZED,
                format!(
                    "sandbox {sandbox:?} is secure: send its envdAccessToken in X-Access-Token"
                ),
            )
            .into_response();
        }
    }
    if to_interpreter {
        return interpreter::serve(gateway, sandbox, parts.method, parts.uri.path(), body).await;
    }
    envd::serve(
        gateway,
        sandbox,
        parts.method,
        &parts.uri,
        parts.headers,
        body,
    )
    .await
}

#[cfg(test)]
mod tests {
    use super::sandbox_address;
    use axum::http::{HeaderMap, Uri};

    #[test]
    fn a_sandbox_is_addressed_by_headers_or_by_host() {
        let path: Uri = "/health".parse().unwrap();
        let mut headers = HeaderMap::new();
        headers.insert("host", "127.0.0.1:3000".parse().unwrap());
        assert_eq!(sandbox_address(&headers, &path), None);
        headers.insert("host", "49983-abc123.e2b.example:3000".parse().unwrap());
        assert_eq!(
            sandbox_address(&headers, &path),
            Some(("abc123".into(), "49983".into()))
        );
        // A host's name in the id (`{NAME}-{session}`, docs/kubernetes.md).
        headers.insert(
            "host",
            "49999-brig-host-2-abc123.e2b.example".parse().unwrap(),
        );
        assert_eq!(
            sandbox_address(&headers, &path),
            Some(("brig-host-2-abc123".into(), "49999".into()))
        );
        headers.insert("e2b-sandbox-id", "def456".parse().unwrap());
        headers.insert("e2b-sandbox-port", "8080".parse().unwrap());
        assert_eq!(
            sandbox_address(&headers, &path),
            Some(("def456".into(), "8080".into()))
        );
        // HTTP/2: the authority, in the URI.
        let absolute: Uri = "http://8000-abc123.e2b.example/x".parse().unwrap();
        assert_eq!(
            sandbox_address(&HeaderMap::new(), &absolute),
            Some(("abc123".into(), "8000".into()))
        );
    }
}
