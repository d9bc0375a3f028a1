//! `get_host(port)`: HTTP and WebSocket to a server a program of the sandbox runs on
//! `port` (any port but envd's and the interpreter's, which the gateway serves itself).
//!
//! Each request gets a connection of its own, opened *inside* the sandbox's jail: the
//! server's `session_dial` has the jail's init connect to 127.0.0.1 (else ::1) on `port`
//! in the jail's own network namespace, and the connected socket comes back to the
//! gateway as a descriptor (SCM_RIGHTS), so a jail on `--net none` serves as well as a
//! filtered one and needs no network rule for it. The request goes over it with hyper's
//! client (HTTP/1.1), its body streamed both ways under hyper's backpressure; an upgrade
//! (a WebSocket's `101 Switching Protocols`) joins the client's and the server's
//! upgraded connections with `copy_bidirectional` (8 KiB a direction). No pool: a
//! connection costs a request to the brig server and a few system calls in the jail,
//! and an HTTP/1.1 server in a sandbox (`python3 -m http.server`) often closes after
//! each response anyway.
//!
//! As E2B's by default, a port's traffic needs no token: the sandbox's id in the host
//! (or the `E2b-Sandbox-Id` header) is what reaches it; `secure`'s envd token guards
//! envd only (docs/e2b.md, "Other ports"). A sandbox made with `allowPublicTraffic:
//! false` has a traffic access token, which every request to its ports must carry in
//! `e2b-traffic-access-token` (403 otherwise, E2B's words), and one made with
//! `maskRequestHost` has its ports' servers see that `Host`.

use super::backend::Failure;
use super::{Gateway, unreachable};
use axum::body::Body;
use axum::extract::Request;
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Response};
use hyper_util::rt::TokioIo;
use std::sync::Arc;
use std::time::Duration;

/// How long a connection the jail's server has not accepted yet (its backlog was full)
/// is waited for.
const ACCEPT_WAIT: Duration = Duration::from_secs(10);

/// The headers of one hop (RFC 9110, 7.6.1), not passed on; an upgrade keeps its
/// `Connection` and `Upgrade`.
const HOP_BY_HOP: [header::HeaderName; 6] = [
    header::CONNECTION,
    header::TE,
    header::TRAILER,
    header::TRANSFER_ENCODING,
    header::UPGRADE,
    header::PROXY_AUTHORIZATION,
];

/// The gateway's own credentials, never passed to a server in a sandbox: the code there
/// is not the tenant's to trust with its API key.
const GATEWAY_ONLY: [&str; 2] = ["x-api-key", TRAFFIC_TOKEN_HEADER];

/// The header a private sandbox's port traffic carries its token in (E2B's).
pub const TRAFFIC_TOKEN_HEADER: &str = "e2b-traffic-access-token";

/// Whether a request may reach `owner`'s ports: any may, unless the sandbox was made
/// with `allowPublicTraffic: false`, whose token it must carry (compared in constant
/// time). Err: E2B's 403, missing or invalid.
fn admit(
    owner: &super::auth::Owner,
    sandbox: &str,
    headers: &HeaderMap,
) -> Result<(), super::error::ApiError> {
    let Some(expected) = &owner.traffic_token else {
        return Ok(());
    };
    let refused = |why: &str| {
        super::error::ApiError::new(
            StatusCode::FORBIDDEN,
            format!(
                "sandbox {sandbox:?}: Sandbox is secured with traffic access token. {why}; send the create's trafficAccessToken in it"
            ),
        )
    };
    let Some(given) = headers.get(TRAFFIC_TOKEN_HEADER) else {
        return Err(refused(&format!(
            "Token header '{TRAFFIC_TOKEN_HEADER}' is missing"
        )));
    };
    use subtle::ConstantTimeEq;
    match bool::from(given.as_bytes().ct_eq(expected.as_bytes())) {
        true => Ok(()),
        false => Err(refused(&format!(
            "Provided token in header '{TRAFFIC_TOKEN_HEADER}' is invalid"
        ))),
    }
}

/// The `Host` the server on `port` sees for a sandbox made with `maskRequestHost`
/// (`${PORT}` replaced by the port).
fn masked_host(owner: &super::auth::Owner, port: u16) -> Option<header::HeaderValue> {
    let mask = owner.mask_host.as_ref()?;
    let host = mask.replace(super::create::PORT_PLACEHOLDER, &port.to_string());
    header::HeaderValue::from_str(&host).ok()
}

/// A port as the SDK addresses it (`E2b-Sandbox-Port`, or the host's first label): a
/// TCP port a server can listen on, 1 to 65535.
pub fn parse_port(text: &str) -> Result<u16, String> {
    text.parse::<u16>()
        .ok()
        .filter(|port| *port != 0 && !text.starts_with('+'))
        .ok_or_else(|| {
            format!("port {text:?}: not a TCP port a server can listen on; give 1-65535")
        })
}

/// Whether a request asks to switch protocols (a WebSocket's handshake): `Connection`
/// names `upgrade` and an `Upgrade` is given.
fn wants_upgrade(headers: &HeaderMap) -> bool {
    let connection_upgrade = headers
        .get_all(header::CONNECTION)
        .iter()
        .filter_map(|value| value.to_str().ok())
        .flat_map(|value| value.split(','))
        .any(|token| token.trim().eq_ignore_ascii_case("upgrade"));
    connection_upgrade && headers.contains_key(header::UPGRADE)
}

/// Removes the headers of one hop, and those `Connection` names; with `upgrade`, the
/// `Connection: upgrade` and `Upgrade` a handshake needs stay.
fn strip_hop_by_hop(headers: &mut HeaderMap, upgrade: bool) {
    let named: Vec<header::HeaderName> = headers
        .get_all(header::CONNECTION)
        .iter()
        .filter_map(|value| value.to_str().ok())
        .flat_map(|value| value.split(','))
        .filter_map(|token| header::HeaderName::from_bytes(token.trim().as_bytes()).ok())
        .filter(|name| !(upgrade && *name == header::UPGRADE))
        .collect();
    for name in named {
        headers.remove(name);
    }
    for name in HOP_BY_HOP {
        if upgrade && (name == header::CONNECTION || name == header::UPGRADE) {
            continue;
        }
        headers.remove(name);
    }
    headers.remove("keep-alive");
    headers.remove("proxy-connection");
    if upgrade {
        headers.insert(
            header::CONNECTION,
            header::HeaderValue::from_static("upgrade"),
        );
    }
}

/// Sends `request` to the server on `port` of `sandbox` (`owner`'s) and answers with its
/// response: 403 for a private sandbox's request without its traffic token ([`admit`]);
/// 502 with a message naming the port when nothing listens there, the sandbox is gone,
/// or the server broke off before its response. The one way to a sandbox's ports.
pub async fn serve(
    gateway: Arc<Gateway>,
    owner: &super::auth::Owner,
    sandbox: String,
    port: u16,
    mut request: Request,
) -> Response {
    if let Err(refused) = admit(owner, &sandbox, request.headers()) {
        return refused.into_response();
    }
    if let Some(host) = masked_host(owner, port) {
        request.headers_mut().insert(header::HOST, host);
    }
    let upgrade = wants_upgrade(request.headers());
    let permit = match upgrade {
        true => super::quota::share_for(&gateway, &gateway.tunnels, &sandbox).map(Some),
        false => Ok(None),
    };
    let opened = match &permit {
        Err(refused) => Err((refused.status(), format!("{}\n", refused.message())).into_response()),
        Ok(_) => open(&gateway, &sandbox, port).await,
    };
    let permit = permit.ok().flatten();
    let stream = match opened {
        Ok(stream) => stream,
        Err(answer) => return answer,
    };
    match relay(stream, request, upgrade, permit).await {
        Ok(response) => response,
        Err(err) => unreachable(
            &sandbox,
            format!("port {port} of sandbox {sandbox:?}: the server there broke off: {err}"),
        ),
    }
}

/// A connection to `port` of `sandbox`, accepted by the server there; else the answer
/// that says why not (502).
async fn open(
    gateway: &Arc<Gateway>,
    sandbox: &str,
    port: u16,
) -> Result<tokio::net::TcpStream, Response> {
    let dialed = {
        let gateway = gateway.clone();
        let id = sandbox.to_string();
        tokio::task::spawn_blocking(move || gateway.backend.dial(&id, port)).await
    };
    let connection = match dialed {
        Ok(Ok(connection)) => connection,
        Ok(Err(err)) if err.failure == Failure::Gone => {
            return Err(unreachable(
                sandbox,
                format!("sandbox {sandbox:?} not found"),
            ));
        }
        Ok(Err(err)) => {
            return Err(unreachable(
                sandbox,
                format!("port {port} of sandbox {sandbox:?}: {}", err.message),
            ));
        }
        Err(err) => {
            return Err((StatusCode::INTERNAL_SERVER_ERROR, err.to_string()).into_response());
        }
    };
    accepted(connection).await.map_err(|err| {
        unreachable(
            sandbox,
            format!(
                "port {port} of sandbox {sandbox:?}: {err}; is a server listening on 0.0.0.0 or 127.0.0.1 inside the sandbox?"
            ),
        )
    })
}

/// The dialed connection on tokio's reactor, once the jail's server has accepted it.
async fn accepted(connection: std::net::TcpStream) -> std::io::Result<tokio::net::TcpStream> {
    connection.set_nonblocking(true)?;
    let stream = tokio::net::TcpStream::from_std(connection)?;
    tokio::time::timeout(ACCEPT_WAIT, stream.writable())
        .await
        .map_err(|_| {
            std::io::Error::new(
                std::io::ErrorKind::TimedOut,
                format!(
                    "the connection was not accepted within {} s",
                    ACCEPT_WAIT.as_secs()
                ),
            )
        })??;
    if let Some(err) = stream.take_error()? {
        return Err(err);
    }
    // Small frames (a WebSocket's messages) go out at once.
    let _ = stream.set_nodelay(true);
    Ok(stream)
}

/// One request over `stream`; an upgrade's two sides joined once both have switched.
async fn relay(
    stream: tokio::net::TcpStream,
    mut request: Request,
    upgrade: bool,
    permit: Option<super::quota::Share>,
) -> Result<Response, hyper::Error> {
    let client_side = upgrade.then(|| hyper::upgrade::on(&mut request));
    strip_hop_by_hop(request.headers_mut(), upgrade);
    for name in GATEWAY_ONLY {
        request.headers_mut().remove(name);
    }
    // HTTP/1.1 to the server in the jail, whatever the client spoke (HTTP/2 carries the
    // host as the URI's authority, which becomes the `Host` the server sees).
    *request.version_mut() = axum::http::Version::HTTP_11;
    if !request.headers().contains_key(header::HOST)
        && let Some(authority) = request.uri().authority()
        && let Ok(host) = header::HeaderValue::from_str(authority.as_str())
    {
        request.headers_mut().insert(header::HOST, host);
    }
    // The origin form: the server in the jail sees the path and query, as from a client.
    let path = request
        .uri()
        .path_and_query()
        .map(|path| path.as_str().to_owned())
        .unwrap_or_else(|| "/".into());
    *request.uri_mut() = path.parse().unwrap_or_default();
    let (mut sender, connection) =
        hyper::client::conn::http1::handshake::<_, Body>(TokioIo::new(stream)).await?;
    tokio::spawn(async move {
        let _ = connection.with_upgrades().await;
    });
    let mut response = sender.send_request(request).await?;
    if response.status() == StatusCode::SWITCHING_PROTOCOLS
        && let Some(client_side) = client_side
    {
        let server_side = hyper::upgrade::on(&mut response);
        tokio::spawn(async move {
            let _permit = permit;
            if let (Ok(client), Ok(server)) = tokio::join!(client_side, server_side) {
                let _ = tokio::io::copy_bidirectional(
                    &mut TokioIo::new(client),
                    &mut TokioIo::new(server),
                )
                .await;
            }
        });
        return Ok(response.map(|_| Body::empty()));
    }
    strip_hop_by_hop(response.headers_mut(), false);
    Ok(response.map(Body::new))
}

#[cfg(test)]
mod tests {
    use super::{parse_port, strip_hop_by_hop, wants_upgrade};
    use axum::http::HeaderMap;

    #[test]
    fn a_port_is_a_number_from_1_to_65535() {
        assert_eq!(parse_port("8000"), Ok(8000));
        assert_eq!(parse_port("65535"), Ok(65535));
        for bad in ["0", "65536", "", "abc", "+80", "-1", "80 "] {
            let err = parse_port(bad).unwrap_err();
            assert!(err.contains("1-65535"), "{bad}: {err}");
        }
    }

    #[test]
    fn an_upgrade_keeps_its_headers_and_others_lose_those_of_one_hop() {
        let mut headers = HeaderMap::new();
        headers.insert(
            "connection",
            "keep-alive, Upgrade, x-private".parse().unwrap(),
        );
        headers.insert("upgrade", "websocket".parse().unwrap());
        headers.insert("x-private", "1".parse().unwrap());
        headers.insert("keep-alive", "timeout=5".parse().unwrap());
        headers.insert(
            "sec-websocket-key",
            "dGhlIHNhbXBsZSBub25jZQ==".parse().unwrap(),
        );
        assert!(wants_upgrade(&headers));
        let mut upgrading = headers.clone();
        strip_hop_by_hop(&mut upgrading, true);
        assert_eq!(upgrading["connection"], "upgrade");
        assert_eq!(upgrading["upgrade"], "websocket");
        assert!(upgrading.contains_key("sec-websocket-key"));
        assert!(!upgrading.contains_key("x-private"));
        assert!(!upgrading.contains_key("keep-alive"));
        strip_hop_by_hop(&mut headers, false);
        for gone in ["connection", "upgrade", "x-private", "keep-alive"] {
            assert!(!headers.contains_key(gone), "{gone}");
        }
        let mut plain = HeaderMap::new();
        plain.insert("upgrade", "websocket".parse().unwrap());
        assert!(
            !wants_upgrade(&plain),
            "Upgrade without Connection: upgrade"
        );
    }
}
