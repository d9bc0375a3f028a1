//! envd, the API E2B's SDK speaks to inside a sandbox (`spec/envd/envd.yaml`,
//! `proto/e2b-envd/process/process.proto`), served on brig sessions: the process service
//! over Connect (`connect.rs`) and `/health`.
//!
//! A process is a background command of the session (`session_exec` with `background`):
//! `Start` starts it and attaches (`session_connect`), so its output streams as the
//! runner reads it, then its end; a client that hangs up leaves it running (as envd's),
//! and `Connect` attaches again (what the client missed, the latest 1 MiB, first).
//! `List`, `SendInput`, `CloseStdin`, `SendSignal` and `Update` (a terminal's size) are
//! `session_ps`, `session_stdin`, `session_signal` and `session_resize`.
//!
//! `StreamInput`, a client stream, is `stream_input.rs`. The filesystem service and
//! `/files` are `files.rs` (`WatchDir`, a stream, is served here with the process
//! streams: one relay for both). Not served yet: `/envs` (answered 501, naming what is
//! missing).

use super::Gateway;
use super::backend::{BackendError, Selector, Start, Stream};
use super::connect::{self, Code, Codec, ConnectError, Shape};
use super::proto::process::{
    self as pb, ProcessEvent, process_event, process_event::data_event, process_input,
    process_selector,
};
use axum::body::Body;
use axum::http::{HeaderMap, Method, StatusCode, header};
use axum::response::{IntoResponse, Response};
use bytes::Bytes;
use serde_json::Value;
use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::mpsc;

/// The envd version the gateway tells the SDK (what its features are gated on: stdin
/// control, the default user, closing stdin).
pub const ENVD_VERSION: &str = "0.5.2";

/// The header with which E2B's SDK asks for keepalive events on a stream, every that
/// many seconds.
const KEEPALIVE_HEADER: &str = "keepalive-ping-interval";

/// Chunks of a stream's answer waiting for the HTTP connection.
const BODY_CHUNKS: usize = 16;

/// One envd request for sandbox `sandbox` (its owner already known to exist).
pub async fn serve(
    gateway: Arc<Gateway>,
    sandbox: String,
    method: Method,
    uri: &axum::http::Uri,
    headers: HeaderMap,
    body: Body,
) -> Response {
    let path = uri.path();
    match (method.as_str(), path) {
        ("GET", "/health") => return health(gateway, sandbox).await,
        (_, "/files") => {
            return super::files::transfer(gateway, sandbox, method, uri.query(), &headers, body)
                .await;
        }
        ("GET", "/envs") => {
            return super::lifecycle::envd_envs(gateway, sandbox).await;
        }
        ("GET", "/metrics") => {
            return super::lifecycle::envd_metrics(gateway, sandbox).await;
        }
        (_, "/envs") | (_, "/metrics") => {
            return super::error::ApiError::new(
                StatusCode::NOT_IMPLEMENTED,
                format!("{path}: only GET is served"),
            )
            .into_response();
        }
        _ => {}
    }
    // A client stream: its messages are handled as they arrive, not read whole first.
    if path == "/process.Process/StreamInput"
        && method == Method::POST
        && let Some((codec, shape)) = connect::call_of(&headers)
    {
        return super::stream_input::serve(gateway, sandbox, codec, shape, body).await;
    }
    let body = read_body(body).await;
    let Some(rpc) = path.strip_prefix('/') else {
        return StatusCode::NOT_FOUND.into_response();
    };
    let Some((service, procedure)) = rpc.split_once('/') else {
        return StatusCode::NOT_FOUND.into_response();
    };
    if method != Method::POST {
        return (
            StatusCode::METHOD_NOT_ALLOWED,
            [(header::ALLOW, "POST")],
            "envd's procedures take POST\n",
        )
            .into_response();
    }
    let Some((codec, shape)) = connect::call_of(&headers) else {
        return connect::unsupported_media(&headers);
    };
    let body = match body {
        Ok(body) => body,
        Err(err) => return fail(shape, codec, err),
    };
    let call = Call {
        gateway,
        sandbox,
        codec,
        keepalive: keepalive_period(&headers),
    };
    let answer = match (service, procedure, shape) {
        ("process.Process", "Start", Shape::Stream) => {
            let as_root = match user_of(&headers) {
                Ok(as_root) => as_root,
                Err(err) => return fail(shape, codec, err),
            };
            return match root_is_mapped(&call.gateway, as_root)
                .and_then(|()| connect::decode::<pb::StartRequest>(codec, shape, &body))
            {
                Ok(request) => call.start(request, as_root),
                Err(err) => fail(shape, codec, err),
            };
        }
        ("process.Process", "Connect", Shape::Stream) => {
            return match connect::decode::<pb::ConnectRequest>(codec, shape, &body) {
                Ok(request) => call.connect(request),
                Err(err) => fail(shape, codec, err),
            };
        }
        ("process.Process", "List", Shape::Unary) => match connect::decode(codec, shape, &body) {
            Ok(pb::ListRequest {}) => call.list().await,
            Err(err) => Err(err),
        },
        ("process.Process", "SendInput", Shape::Unary) => {
            match connect::decode(codec, shape, &body) {
                Ok(request) => call.send_input(request).await,
                Err(err) => Err(err),
            }
        }
        ("process.Process", "CloseStdin", Shape::Unary) => {
            match connect::decode(codec, shape, &body) {
                Ok(request) => call.close_stdin(request).await,
                Err(err) => Err(err),
            }
        }
        ("process.Process", "SendSignal", Shape::Unary) => {
            match connect::decode(codec, shape, &body) {
                Ok(request) => call.send_signal(request).await,
                Err(err) => Err(err),
            }
        }
        ("process.Process", "Update", Shape::Unary) => match connect::decode(codec, shape, &body) {
            Ok(request) => call.update(request).await,
            Err(err) => Err(err),
        },
        ("process.Process", "Start" | "Connect", Shape::Unary)
        | (
            "process.Process",
            "List" | "SendInput" | "CloseStdin" | "SendSignal" | "Update",
            Shape::Stream,
        ) => Err(ConnectError::invalid(format!(
            "process.Process/{procedure} is a {} procedure; send it with the matching Content-Type",
            if shape == Shape::Unary {
                "streaming"
            } else {
                "unary"
            }
        ))),
        // Files are the workspace's, the user's: never done as root (`AS_ROOT_REFUSED`).
        ("filesystem.Filesystem", _, _) if matches!(user_of(&headers), Ok(true)) => {
            Err(ConnectError::invalid(super::files::AS_ROOT_REFUSED))
        }
        ("filesystem.Filesystem", _, Shape::Unary) => {
            super::files::procedure(call.gateway, call.sandbox, codec, procedure, &body).await
        }
        ("filesystem.Filesystem", "WatchDir", Shape::Stream) => {
            return match connect::decode(codec, shape, &body) {
                Ok(request) => call.watch_dir(request),
                Err(err) => fail(shape, codec, err),
            };
        }
        ("filesystem.Filesystem", _, Shape::Stream) => Err(ConnectError::new(
            Code::Unimplemented,
            format!(
                "filesystem.Filesystem/{procedure} (a stream) is not served by brig gateway yet (see docs/e2b.md)"
            ),
        )),
        _ => Err(ConnectError::new(
            Code::Unimplemented,
            format!("{service}/{procedure}: no such procedure in envd"),
        )),
    };
    match answer {
        Ok(response) => response,
        Err(err) => fail(shape, codec, err),
    }
}

/// envd's health: 204 while the sandbox runs (its session answers `session_stats`); 502
/// while it is paused, and once it has ended (killed, or at its timeout), when the gateway
/// forgets it: the SDK's `is_running()` is then false.
async fn health(gateway: Arc<Gateway>, sandbox: String) -> Response {
    let backend = gateway.backend.clone();
    let id = sandbox.clone();
    let answer = tokio::task::spawn_blocking(move || backend.stats(&id)).await;
    match answer {
        // A paused sandbox's envd does not answer at E2B: the SDK's `is_running()` is False.
        Ok(Ok(stats)) if stats.state == "paused" => {
            super::unreachable(&sandbox, format!("sandbox {sandbox:?} is paused"))
        }
        Ok(Ok(_)) => StatusCode::NO_CONTENT.into_response(),
        Ok(Err(err)) if err.failure == super::backend::Failure::Gone => {
            gateway.tenants.forget(&sandbox);
            super::unreachable(&sandbox, format!("sandbox {sandbox:?} has ended"))
        }
        Ok(Err(err)) => super::error::ApiError::from(err).into_response(),
        Err(err) => super::error::ApiError::new(StatusCode::INTERNAL_SERVER_ERROR, err.to_string())
            .into_response(),
    }
}

/// A request's body, at most [`connect::MAX_MESSAGE`] bytes.
async fn read_body(body: Body) -> Result<Bytes, ConnectError> {
    super::body::read(body, connect::MAX_MESSAGE)
        .await
        .map_err(|err| match err {
            super::body::BodyError::TooLarge { .. } => ConnectError::new(
                Code::ResourceExhausted,
                format!("the request is {}; send smaller messages", err.describe()),
            ),
            super::body::BodyError::Broken(_) => ConnectError::invalid(format!(
                "the request's body: {}; send it whole",
                err.describe()
            )),
        })
}

/// An error as the call's shape carries it: a unary call's status and body, or a stream
/// of only its end.
fn fail(shape: Shape, codec: Codec, err: ConnectError) -> Response {
    match shape {
        Shape::Unary => err.into_response(),
        Shape::Stream => (
            [(header::CONTENT_TYPE, connect::stream_content_type(codec))],
            connect::end_of_stream(Some(&err)),
        )
            .into_response(),
    }
}

/// Whether a process is to run as root (envd's `Authorization: Basic base64(USER:)`):
/// E2B's default user `user`, or `root`: uid 0 *inside* the jail's user namespace, which
/// a root brig serve maps to a host uid of the sandbox's own, with no capability (no
/// mount, chown, reading others' files; `sudo` gives nothing more). Anyone else is
/// refused rather than run as someone else.
fn user_of(headers: &HeaderMap) -> Result<bool, ConnectError> {
    use base64::Engine;
    let Some(value) = headers.get(header::AUTHORIZATION) else {
        return Ok(false);
    };
    let user = value
        .to_str()
        .ok()
        .and_then(|value| value.strip_prefix("Basic "))
        .and_then(|encoded| {
            base64::engine::general_purpose::STANDARD
                .decode(encoded.trim())
                .ok()
        })
        .and_then(|decoded| String::from_utf8(decoded).ok())
        .map(|decoded| decoded.split(':').next().unwrap_or("").to_string())
        .ok_or_else(|| {
            ConnectError::invalid(
                "Authorization: not `Basic` with base64 of `USER:`; leave the user out",
            )
        })?;
    match user.as_str() {
        "" | "user" => Ok(false),
        "root" => Ok(true),
        other => Err(ConnectError::invalid(format!(
            "user {other:?}: a sandbox has two users, `user` and `root` (uid 0 inside, without capabilities); give one of them or leave the user out"
        ))),
    }
}

/// Root is served where the server maps it (its sandboxes are created with `root`); else
/// the one-line reason, as the SDK's InvalidArgument.
fn root_is_mapped(gateway: &Gateway, as_root: bool) -> Result<(), ConnectError> {
    if as_root && !gateway.backend.maps_root() {
        return Err(ConnectError::invalid(
            "user \"root\": this brig serve runs rootless (or with one host id shared by all jails), so a sandbox's jail maps one id, its user's, and there is no root inside; run brig serve as root (per-jail host uids) for root, or leave the user out",
        ));
    }
    Ok(())
}

/// The keepalive period a stream's client asked for, within 1 s to 5 min.
fn keepalive_period(headers: &HeaderMap) -> Option<Duration> {
    let seconds: u64 = headers
        .get(KEEPALIVE_HEADER)?
        .to_str()
        .ok()?
        .trim()
        .parse()
        .ok()?;
    Some(Duration::from_secs(seconds.clamp(1, 300)))
}

/// One call's context.
struct Call {
    gateway: Arc<Gateway>,
    sandbox: String,
    codec: Codec,
    keepalive: Option<Duration>,
}

impl Call {
    /// Runs a blocking backend call off the async threads.
    async fn blocking<T: Send + 'static>(
        &self,
        work: impl FnOnce(&super::backend::Backend, &str) -> Result<T, BackendError> + Send + 'static,
    ) -> Result<T, ConnectError> {
        let backend = self.gateway.backend.clone();
        let sandbox = self.sandbox.clone();
        tokio::task::spawn_blocking(move || work(&backend, &sandbox))
            .await
            .map_err(|err| ConnectError::new(Code::Internal, format!("brig gateway: {err}")))?
            .map_err(ConnectError::from)
    }

    fn start(self, request: pb::StartRequest, as_root: bool) -> Response {
        let start = match command_of(&request, as_root) {
            Ok(start) => start,
            Err(err) => return fail(Shape::Stream, self.codec, err),
        };
        // envd's default when a client does not say: stdin open.
        let close_stdin = request.stdin == Some(false) && start.pty.is_none();
        let gateway = self.gateway.clone();
        let logged = super::lifecycle::EndLog {
            gateway: self.gateway.clone(),
            sandbox: self.sandbox.clone(),
        };
        self.stream(
            move |backend, sandbox| {
                let command = start.argv.join(" ");
                let process = backend.start(sandbox, start)?;
                let pid = process.pid.unwrap_or(0);
                super::lifecycle::log_start(&gateway, sandbox, pid, &command);
                let selector = Selector::Pid(pid);
                if close_stdin {
                    // A program that has already ended has no stdin left to close.
                    if let Err(err) = backend.stdin(sandbox, &selector, &[], true)
                        && err.failure != super::backend::Failure::NotFound
                    {
                        return Err(err);
                    }
                }
                backend.connect(sandbox, &selector)
            },
            Events::Process(Some(logged)),
        )
    }

    fn connect(self, request: pb::ConnectRequest) -> Response {
        let selector = match selector_of(request.process.as_ref()) {
            Ok(selector) => selector,
            Err(err) => return fail(Shape::Stream, self.codec, err),
        };
        self.stream(
            move |backend, sandbox| backend.connect(sandbox, &selector),
            Events::Process(None),
        )
    }

    /// `filesystem.Filesystem/WatchDir`: the server's streamed watcher, its events as
    /// they come until the client hangs up (which drops the watcher).
    pub(super) fn watch_dir(self, request: super::proto::filesystem::WatchDirRequest) -> Response {
        let watched = match super::files::in_workspace(&request.path) {
            Ok(watched) => watched,
            Err(message) => return fail(Shape::Stream, self.codec, ConnectError::invalid(message)),
        };
        let path = watched.clone();
        self.stream(
            move |backend, sandbox| backend.watch_stream(sandbox, &path, request.recursive),
            Events::Watch { watched },
        )
    }

    /// A stream's answer: `attach` runs off the async threads, then each of the server's
    /// frames becomes an event as it comes (`events` says which), until the end.
    fn stream(
        self,
        attach: impl FnOnce(&super::backend::Backend, &str) -> Result<Stream, BackendError>
        + Send
        + 'static,
        events: Events,
    ) -> Response {
        let codec = self.codec;
        let permit =
            match super::quota::share_for(&self.gateway, &self.gateway.streams, &self.sandbox) {
                Ok(permit) => permit,
                Err(refused) => {
                    let refused = ConnectError::new(Code::ResourceExhausted, refused.message());
                    return fail(Shape::Stream, codec, refused);
                }
            };
        let (chunks, receiver) = mpsc::channel::<Bytes>(BODY_CHUNKS);
        tokio::spawn(async move {
            let error = match self.blocking(attach).await {
                Ok(stream) => relay(stream, &chunks, codec, self.keepalive, &events).await,
                Err(err) => Some(err),
            };
            // Given back before the end is sent: a client that saw its stream end may
            // open the next at once.
            drop(permit);
            let _ = chunks.send(connect::end_of_stream(error.as_ref())).await;
        });
        let body = futures_util::stream::unfold(receiver, |mut receiver| async move {
            let chunk = receiver.recv().await?;
            Some((Ok::<_, Infallible>(chunk), receiver))
        });
        (
            [(header::CONTENT_TYPE, connect::stream_content_type(codec))],
            Body::from_stream(body),
        )
            .into_response()
    }

    async fn list(self) -> Result<Response, ConnectError> {
        let processes = self
            .blocking(|backend, sandbox| backend.processes(sandbox))
            .await?;
        let processes = processes
            .iter()
            .filter(|process| process.running)
            .map(|process| {
                let mut argv = process.command.iter().cloned();
                let envs = process
                    .env
                    .iter()
                    .filter_map(|var| var.split_once('='))
                    .map(|(name, value)| (name.to_string(), value.to_string()))
                    .collect();
                pb::ProcessInfo {
                    config: Some(pb::ProcessConfig {
                        cmd: argv.next().unwrap_or_default(),
                        args: argv.collect(),
                        envs,
                        cwd: Some(process.cwd.clone()).filter(|cwd| !cwd.is_empty()),
                    }),
                    pid: process.pid.unwrap_or(0),
                    tag: process.tag.clone(),
                }
            })
            .collect();
        Ok(connect::unary(self.codec, &pb::ListResponse { processes }))
    }

    async fn send_input(self, request: pb::SendInputRequest) -> Result<Response, ConnectError> {
        let selector = selector_of(request.process.as_ref())?;
        let data = match request.input.and_then(|input| input.input) {
            Some(process_input::Input::Stdin(data) | process_input::Input::Pty(data)) => data,
            None => return Err(ConnectError::invalid("input: give stdin or pty bytes")),
        };
        self.blocking(move |backend, sandbox| backend.stdin(sandbox, &selector, &data, false))
            .await?;
        Ok(connect::unary(self.codec, &pb::SendInputResponse {}))
    }

    async fn close_stdin(self, request: pb::CloseStdinRequest) -> Result<Response, ConnectError> {
        let selector = selector_of(request.process.as_ref())?;
        self.blocking(move |backend, sandbox| backend.stdin(sandbox, &selector, &[], true))
            .await?;
        Ok(connect::unary(self.codec, &pb::CloseStdinResponse {}))
    }

    async fn send_signal(self, request: pb::SendSignalRequest) -> Result<Response, ConnectError> {
        let selector = selector_of(request.process.as_ref())?;
        let signal = match pb::Signal::try_from(request.signal) {
            Ok(pb::Signal::Sigterm) => libc::SIGTERM,
            Ok(pb::Signal::Sigkill) => libc::SIGKILL,
            _ => {
                return Err(ConnectError::invalid(format!(
                    "signal: {} is not one envd sends; give SIGNAL_SIGTERM or SIGNAL_SIGKILL",
                    request.signal
                )));
            }
        };
        self.blocking(move |backend, sandbox| backend.signal(sandbox, &selector, signal))
            .await?;
        Ok(connect::unary(self.codec, &pb::SendSignalResponse {}))
    }

    async fn update(self, request: pb::UpdateRequest) -> Result<Response, ConnectError> {
        let selector = selector_of(request.process.as_ref())?;
        let Some(size) = pty_size(request.pty.as_ref())? else {
            return Ok(connect::unary(self.codec, &pb::UpdateResponse {}));
        };
        self.blocking(move |backend, sandbox| backend.resize(sandbox, &selector, size))
            .await?;
        Ok(connect::unary(self.codec, &pb::UpdateResponse {}))
    }
}

/// What `Start` asks to run.
fn command_of(request: &pb::StartRequest, as_root: bool) -> Result<Start, ConnectError> {
    let config = request
        .process
        .as_ref()
        .ok_or_else(|| ConnectError::invalid("process: missing; give the process's cmd"))?;
    if config.cmd.is_empty() {
        return Err(ConnectError::invalid(
            "process.cmd: empty; give the program to run (e.g. /bin/bash)",
        ));
    }
    let mut env: Vec<String> = config
        .envs
        .iter()
        .map(|(name, value)| format!("{name}={value}"))
        .collect();
    env.sort();
    Ok(Start {
        argv: std::iter::once(config.cmd.clone())
            .chain(config.args.iter().cloned())
            .collect(),
        env,
        chdir: config
            .cwd
            .as_deref()
            .filter(|cwd| !cwd.is_empty())
            .map(Into::into),
        tag: request.tag.clone(),
        pty: pty_size(request.pty.as_ref())?,
        as_root,
    })
}

fn pty_size(
    pty: Option<&pb::Pty>,
) -> Result<Option<crate::serve::protocol::PtySize>, ConnectError> {
    let Some(size) = pty.and_then(|pty| pty.size.as_ref()) else {
        return Ok(None);
    };
    let side = |value: u32, name: &str| {
        u16::try_from(value)
            .map_err(|_| ConnectError::invalid(format!("pty.size.{name}: {value}; give 1 to 1000")))
    };
    Ok(Some(crate::serve::protocol::PtySize {
        cols: side(size.cols, "cols")?,
        rows: side(size.rows, "rows")?,
    }))
}

pub(super) fn selector_of(process: Option<&pb::ProcessSelector>) -> Result<Selector, ConnectError> {
    match process.and_then(|process| process.selector.as_ref()) {
        Some(process_selector::Selector::Pid(pid)) => Ok(Selector::Pid(*pid)),
        Some(process_selector::Selector::Tag(tag)) => Ok(Selector::Tag(tag.clone())),
        None => Err(ConnectError::invalid(
            "process: give the process's pid or tag",
        )),
    }
}

/// What a stream's frames become.
enum Events {
    /// A process's (`Start`, `Connect`): `process`, `output`, `exited` frames; a Start's
    /// logs the end (`logs.rs`).
    Process(Option<super::lifecycle::EndLog>),
    /// A watcher's (`WatchDir`): `watcher`, `watch_event`, `watch_end` frames, events named
    /// relative to `watched`.
    Watch { watched: String },
}

impl Events {
    /// The message for one of the server's frames, and whether it is the last.
    fn message(&self, codec: Codec, frame: &Value) -> Option<(Bytes, bool)> {
        use super::proto::filesystem::{WatchDirResponse, watch_dir_response};
        match self {
            Events::Process(logged) => {
                let event = event_of(frame)?;
                let end = matches!(event, process_event::Event::End(_));
                if let (Some(logged), process_event::Event::End(ended)) = (logged, &event) {
                    logged.ended(frame["pid"].as_u64().unwrap_or(0), ended);
                }
                // Start and Connect answer messages of the same shape.
                let message = pb::StartResponse {
                    event: Some(ProcessEvent { event: Some(event) }),
                };
                Some((connect::envelope(codec, &message), end))
            }
            Events::Watch { watched } => {
                let (event, end) = match frame["type"].as_str()? {
                    "watcher" => (watch_dir_response::Event::Start(Default::default()), false),
                    "watch_event" => (
                        watch_dir_response::Event::Filesystem(super::files::event_of(
                            frame, watched,
                        )?),
                        false,
                    ),
                    "watch_end" => return Some((Bytes::new(), true)),
                    _ => return None,
                };
                let message = WatchDirResponse { event: Some(event) };
                Some((connect::envelope(codec, &message), end))
            }
        }
    }

    fn keepalive(&self, codec: Codec) -> Bytes {
        use super::proto::filesystem::{WatchDirResponse, watch_dir_response};
        match self {
            Events::Process(_) => connect::envelope(
                codec,
                &pb::StartResponse {
                    event: Some(ProcessEvent {
                        event: Some(process_event::Event::Keepalive(process_event::KeepAlive {})),
                    }),
                },
            ),
            Events::Watch { .. } => connect::envelope(
                codec,
                &WatchDirResponse {
                    event: Some(watch_dir_response::Event::Keepalive(Default::default())),
                },
            ),
        }
    }
}

/// A stream's frames as events, until its end; the error that ended it early, if any.
/// Keepalive events go out when nothing else did for the client's period.
async fn relay(
    mut stream: Stream,
    chunks: &mpsc::Sender<Bytes>,
    codec: Codec,
    keepalive: Option<Duration>,
    events: &Events,
) -> Option<ConnectError> {
    let period = keepalive.unwrap_or(Duration::from_secs(3600));
    let mut ticker = tokio::time::interval_at(tokio::time::Instant::now() + period, period);
    loop {
        let (message, end) = tokio::select! {
            frame = stream.frames.recv() => match frame {
                Some(Ok(frame)) => match events.message(codec, &frame) {
                    Some(message) => message,
                    None => continue,
                },
                Some(Err(err)) => return Some(err.into()),
                None => return Some(ConnectError::new(Code::Unavailable, "brig gateway: the stream from the server broke off")),
            },
            _ = ticker.tick(), if keepalive.is_some() => (events.keepalive(codec), false),
            () = chunks.closed() => return None,
        };
        if !message.is_empty() && chunks.send(message).await.is_err() {
            return None;
        }
        ticker.reset();
        if end {
            return None;
        }
    }
}

/// The event of one of the server's frames (`process`, `output`, `exited`).
fn event_of(frame: &Value) -> Option<process_event::Event> {
    use base64::Engine;
    match frame["type"].as_str()? {
        "process" => Some(process_event::Event::Start(process_event::StartEvent {
            pid: frame["pid"].as_u64()? as u32,
        })),
        "output" => {
            let data = match (frame["data"].as_str(), frame["base64"].as_str()) {
                (Some(text), _) => text.as_bytes().to_vec(),
                (None, Some(encoded)) => base64::engine::general_purpose::STANDARD
                    .decode(encoded)
                    .ok()?,
                (None, None) => return None,
            };
            let output = match frame["stream"].as_str()? {
                "stdout" => data_event::Output::Stdout(data),
                "stderr" => data_event::Output::Stderr(data),
                _ => data_event::Output::Pty(data),
            };
            Some(process_event::Event::Data(process_event::DataEvent {
                output: Some(output),
            }))
        }
        "exited" => Some(process_event::Event::End(end_of(&frame["verdict"]))),
        _ => None,
    }
}

/// envd's end event for a brig verdict: the exit code and Go's `ProcessState` wording
/// (`exit status 1`, `signal: killed`), and brig's explanation when brig ended it (time
/// or output limit, memory).
fn end_of(verdict: &Value) -> process_event::EndEvent {
    let signal = verdict["signal"].as_i64();
    let exit_code = verdict["exit_code"].as_i64();
    let status = match (exit_code, signal) {
        (Some(code), _) => format!("exit status {code}"),
        (None, Some(signal)) => format!("signal: {}", signal_name(signal as i32)),
        (None, None) => verdict["status"].as_str().unwrap_or("ended").to_string(),
    };
    // envd's error is Go's `cmd.Wait()` error (`exit status 3`, `signal: killed`); for a
    // program brig ended (its time or output limit, memory), brig's explanation.
    let error = match verdict["status"].as_str() {
        Some("ok") => None,
        Some("nonzero_exit" | "signaled") => Some(status.clone()),
        _ => Some(
            verdict["explanation"]
                .as_str()
                .map_or_else(|| status.clone(), str::to_string),
        ),
    };
    process_event::EndEvent {
        exit_code: exit_code.map_or(-1, |code| code as i32),
        exited: exit_code.is_some(),
        status,
        error,
    }
}

/// Go's names for the signals that end processes.
fn signal_name(signal: i32) -> String {
    match signal {
        libc::SIGKILL => "killed".into(),
        libc::SIGTERM => "terminated".into(),
        libc::SIGINT => "interrupt".into(),
        libc::SIGHUP => "hangup".into(),
        libc::SIGPIPE => "broken pipe".into(),
        libc::SIGSEGV => "segmentation fault".into(),
        libc::SIGABRT => "aborted".into(),
        other => format!("signal {other}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_verdict_ends_as_envd_says_it() {
        let ok = end_of(&serde_json::json!({"status":"ok","exit_code":0}));
        assert_eq!(
            (ok.exit_code, ok.exited, ok.status.as_str()),
            (0, true, "exit status 0")
        );
        let failed = end_of(&serde_json::json!({"status":"nonzero_exit","exit_code":3}));
        assert_eq!(
            (failed.exit_code, failed.status.as_str()),
            (3, "exit status 3")
        );
        assert_eq!(failed.error.as_deref(), Some("exit status 3"));
        assert_eq!(ok.error, None);
        let killed = end_of(&serde_json::json!({"status":"signaled","exit_code":null,"signal":9}));
        assert_eq!(
            (
                killed.exit_code,
                killed.exited,
                killed.status.as_str(),
                killed.error
            ),
            (-1, false, "signal: killed", Some("signal: killed".into()))
        );
        let timeout = end_of(
            &serde_json::json!({"status":"timeout","signal":9,"explanation":"brig ended it at its time limit"}),
        );
        assert_eq!(
            timeout.error.as_deref(),
            Some("brig ended it at its time limit")
        );
    }
}
