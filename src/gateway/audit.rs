//! `brig gateway --audit-log FILE`: one JSON line per request, whatever its route (REST,
//! envd, the interpreter, files, ports, a host's forwards, a router's), written by one
//! layer around the whole app, when the request's answer has ended (its body sent to the
//! end, or given up by the client):
//!
//! ```json
//! {"schema":"brig-gateway-audit/1","time":"2026-11-27T13:05:00.123Z","request_id":"8f3c…-17",
//!  "tenant":"alice","method":"DELETE","path":"/sandboxes/h0-3fa9…","sandbox":"h0-3fa9…",
//!  "port":null,"status":204,"bytes_in":0,"bytes_out":0,"duration_ms":4.1,"event":"killed"}
//! ```
//!
//! `tenant` is the name its `X-API-Key` stands for, or for a request that carries no key
//! (envd, the interpreter, a port: the SDK sends the sandbox's id) the tenant that owns the
//! sandbox as this gateway knows it; null when neither (a wrong key, a sandbox of another
//! host). The key itself is never written. `path` is without its query (where a signed URL
//! puts its signature). `event` says what a create or a kill did: `created` (with the new
//! sandbox's id in `sandbox`), `create_failed` (and the answer's `message`), `killed`,
//! `kill_failed`. Bytes are the bodies' (an upgraded connection's traffic is not counted).
//! A router knows no sandbox's owner: its line of a request without a key has no tenant,
//! and `host_request_id`, the id of the owning host's line, which has it.
//!
//! Request tasks never wait on the disk: a line goes into a bounded queue
//! ([`QUEUE_LINES`]) that one writer thread empties, appending each line whole (the
//! `brig run --audit-log` convention: `0600`, O_APPEND, an exclusive lock per write). A
//! line that finds the queue full is dropped and counted: in
//! `brig_audit_lines_dropped_total` on `/metrics`, and in the log itself, as a line
//! `{"schema":...,"time":...,"dropped":N}` the writer adds before its next line (or
//! within a second).

use axum::body::{Body, Bytes, HttpBody};
use axum::extract::{Request, State};
use axum::http::HeaderValue;
use axum::middleware::Next;
use axum::response::Response;
use hyper::body::{Frame, SizeHint};
use prometheus_client::metrics::counter::Counter;
use serde::Serialize;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::{Receiver, RecvTimeoutError, SyncSender, TrySendError};
use std::time::{Duration, Instant};

/// The audit line's schema: a field may be added within it; a meaning changes only with
/// the next.
pub const SCHEMA: &str = "brig-gateway-audit/1";

/// Lines waiting for the writer at most; more are dropped (and counted).
pub const QUEUE_LINES: usize = 4096;

/// A text the client chose (a path, a sandbox id) is kept to this many bytes in a line.
const FIELD_BYTES: usize = 512;

/// A create's answer is read this far for its sandbox's id or its error's message.
const ANSWER_PEEK: usize = 4096;

/// The request's header a client may read its line's `request_id` from.
pub const REQUEST_ID_HEADER: &str = "x-brig-request-id";

/// One request's line.
#[derive(Debug, Serialize)]
struct Line {
    schema: &'static str,
    time: String,
    request_id: String,
    tenant: Option<String>,
    method: String,
    path: String,
    sandbox: Option<String>,
    port: Option<u16>,
    status: u16,
    bytes_in: u64,
    bytes_out: u64,
    duration_ms: f64,
    #[serde(skip_serializing_if = "Option::is_none")]
    event: Option<&'static str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    message: Option<String>,
    /// A router's: the `request_id` of the host's line for the same request (the host's
    /// answer says it), where the tenant of a request without a key is.
    #[serde(skip_serializing_if = "Option::is_none")]
    host_request_id: Option<String>,
}

/// The line the writer adds for lines dropped since its last.
#[derive(Serialize)]
struct Dropped {
    schema: &'static str,
    time: String,
    dropped: u64,
}

/// Who a request is: the tenant of an API key, or of a sandbox this gateway knows.
pub struct Tenancy {
    keys: super::ApiKeys,
    /// A host's gateway: its sandboxes' owners (a router knows none).
    gateway: Option<Arc<super::Gateway>>,
}

impl Tenancy {
    pub fn new(keys: super::ApiKeys, gateway: Option<Arc<super::Gateway>>) -> Tenancy {
        Tenancy { keys, gateway }
    }

    fn tenant(&self, request: &Request, sandbox: Option<&str>) -> Option<String> {
        let key = request
            .headers()
            .get("x-api-key")
            .and_then(|value| value.to_str().ok());
        if let Some(key) = key {
            return self.keys.tenant(key).map(str::to_string);
        }
        let (_host, session) = super::route::parse_id(sandbox?)?;
        self.gateway.as_ref()?.tenants.tenant_of(session)
    }
}

/// The audit log: the queue to its writer, and what is dropped.
pub struct AuditLog {
    /// Taken as the log goes: its writer then appends what is queued and ends.
    queue: Option<SyncSender<String>>,
    writer: Option<std::thread::JoinHandle<()>>,
    dropped: Arc<AtomicU64>,
    dropped_metric: Counter,
    tenancy: Tenancy,
    /// This process's requests are `{run}-{number}`.
    run: String,
    next: AtomicU64,
}

impl AuditLog {
    /// Opens `path` (created `0600`; an unwritable path is refused at start) and starts
    /// its writer. `dropped_metric` counts the lines dropped.
    pub fn open(
        path: &Path,
        tenancy: Tenancy,
        dropped_metric: Counter,
    ) -> crate::error::Result<AuditLog> {
        AuditLog::open_with(path, tenancy, dropped_metric, QUEUE_LINES)
    }

    /// [`AuditLog::open`] with a queue of `capacity` lines.
    fn open_with(
        path: &Path,
        tenancy: Tenancy,
        dropped_metric: Counter,
        capacity: usize,
    ) -> crate::error::Result<AuditLog> {
        let file = crate::verdict::open_audit_log(path)?;
        let (queue, lines) = std::sync::mpsc::sync_channel(capacity);
        let dropped = Arc::new(AtomicU64::new(0));
        let writer = Writer {
            path: path.to_path_buf(),
            file,
            dropped: Arc::clone(&dropped),
        };
        let writer = std::thread::Builder::new()
            .name("brig-audit".into())
            .spawn(move || writer.run(lines))
            .map_err(|err| {
                crate::error::Error::setup(format!(
                    "--audit-log {}: start its writer thread: {err}",
                    path.display()
                ))
            })?;
        let run = crate::gateway::auth::new_token()
            .map(|token| token[..12].to_string())
            .unwrap_or_else(|_| std::process::id().to_string());
        Ok(AuditLog {
            queue: Some(queue),
            writer: Some(writer),
            dropped,
            dropped_metric,
            tenancy,
            run,
            next: AtomicU64::new(1),
        })
    }

    /// Queues a line; a full queue drops it, counted.
    fn write(&self, line: &Line) {
        let Ok(mut text) = serde_json::to_string(line) else {
            return;
        };
        text.push('\n');
        let Some(queue) = &self.queue else {
            return;
        };
        match queue.try_send(text) {
            Ok(()) => {}
            Err(TrySendError::Full(_)) | Err(TrySendError::Disconnected(_)) => {
                self.dropped.fetch_add(1, Ordering::Relaxed);
                self.dropped_metric.inc();
            }
        }
    }
}

/// The gateway stopping: the lines still queued are appended before it exits (at most
/// [`QUEUE_LINES`]).
impl Drop for AuditLog {
    fn drop(&mut self) {
        drop(self.queue.take());
        if let Some(writer) = self.writer.take() {
            let _ = writer.join();
        }
    }
}

/// The thread that appends the queued lines.
struct Writer {
    path: PathBuf,
    file: std::fs::File,
    dropped: Arc<AtomicU64>,
}

impl Writer {
    fn run(self, lines: Receiver<String>) {
        loop {
            let next = lines.recv_timeout(Duration::from_secs(1));
            let dropped = self.dropped.swap(0, Ordering::Relaxed);
            if dropped > 0 {
                let note = Dropped {
                    schema: SCHEMA,
                    time: crate::verdict::rfc3339_now(),
                    dropped,
                };
                if let Ok(mut text) = serde_json::to_string(&note) {
                    text.push('\n');
                    self.append(&text);
                }
            }
            match next {
                Ok(line) => self.append(&line),
                Err(RecvTimeoutError::Timeout) => {}
                Err(RecvTimeoutError::Disconnected) => return,
            }
        }
    }

    fn append(&self, text: &str) {
        if let Err(err) = crate::verdict::append_audit_line(&self.file, text.as_bytes()) {
            eprintln!(
                "brig gateway: --audit-log {}: append a line: {err}",
                self.path.display()
            );
        }
    }
}

/// What a create's or a kill's answer says happened.
fn event(method: &str, path: &str, status: u16) -> Option<&'static str> {
    let path = path.strip_prefix("/v2").unwrap_or(path);
    let create = method == "POST" && path == "/sandboxes";
    let kill = method == "DELETE"
        && path
            .strip_prefix("/sandboxes/")
            .is_some_and(|id| !id.is_empty() && !id.contains('/'));
    let ok = (200..300).contains(&status);
    match (create, kill, ok) {
        (true, _, true) => Some("created"),
        (true, _, false) => Some("create_failed"),
        (_, true, true) => Some("killed"),
        (_, true, false) => Some("kill_failed"),
        _ => None,
    }
}

/// At most [`FIELD_BYTES`] of a client's text.
fn bounded(text: &str) -> String {
    let mut end = text.len().min(FIELD_BYTES);
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    text[..end].to_string()
}

/// The line of a request whose answer is under way: written when its body ends or is
/// dropped (this is dropped with it).
struct Pending {
    audit: Arc<AuditLog>,
    line: Line,
    started: Instant,
    bytes_in: Arc<AtomicU64>,
    bytes_out: u64,
    /// A create's answer's first bytes (its sandbox's id, or its error).
    peeked: Option<Vec<u8>>,
}

impl Pending {
    fn saw(&mut self, data: &[u8]) {
        self.bytes_out += data.len() as u64;
        if let Some(peeked) = &mut self.peeked {
            let room = ANSWER_PEEK.saturating_sub(peeked.len());
            peeked.extend_from_slice(&data[..data.len().min(room)]);
        }
    }
}

impl Drop for Pending {
    fn drop(&mut self) {
        let line = &mut self.line;
        line.bytes_in = self.bytes_in.load(Ordering::Relaxed);
        line.bytes_out = self.bytes_out;
        line.duration_ms = (self.started.elapsed().as_secs_f64() * 1e6).round() / 1e3;
        if let Some(peeked) = &self.peeked {
            let answer: serde_json::Value = serde_json::from_slice(peeked).unwrap_or_default();
            match line.event {
                Some("created") => {
                    line.sandbox = answer["sandboxID"].as_str().map(bounded);
                }
                _ => line.message = answer["message"].as_str().map(bounded),
            }
        }
        self.audit.write(line);
    }
}

/// A body whose data frames `on_data` sees as they pass; its size and end are the inner
/// body's, so that HTTP/1.1 still sends a `Content-Length` where one was known.
struct Counted<F> {
    inner: Body,
    on_data: F,
}

impl<F: FnMut(&[u8]) + Send + Unpin + 'static> HttpBody for Counted<F> {
    type Data = Bytes;
    type Error = axum::Error;

    fn poll_frame(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<Result<Frame<Bytes>, axum::Error>>> {
        let this = &mut *self;
        let polled = std::pin::Pin::new(&mut this.inner).poll_frame(cx);
        if let std::task::Poll::Ready(Some(Ok(frame))) = &polled
            && let Some(data) = frame.data_ref()
        {
            (this.on_data)(data);
        }
        polled
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}

/// `body`, its data frames seen by `on_data`.
fn counted(body: Body, on_data: impl FnMut(&[u8]) + Send + Unpin + 'static) -> Body {
    Body::new(Counted {
        inner: body,
        on_data,
    })
}

/// The layer: times the request, counts its bodies, and writes its line when its answer
/// has ended.
pub async fn layer(State(audit): State<Arc<AuditLog>>, request: Request, next: Next) -> Response {
    let started = Instant::now();
    let time = crate::verdict::rfc3339_now();
    let number = audit.next.fetch_add(1, Ordering::Relaxed);
    let request_id = format!("{}-{number}", audit.run);
    let addressed = super::route::addressed(request.uri(), request.headers()).map(|(id, _)| id);
    let port = super::sandbox_address(request.headers(), request.uri())
        .and_then(|(_, port)| port.parse::<u16>().ok());
    let tenant = audit.tenancy.tenant(&request, addressed.as_deref());
    let method = request.method().to_string();
    let path = bounded(request.uri().path());
    let bytes_in = Arc::new(AtomicU64::new(0));
    let request = {
        let seen = Arc::clone(&bytes_in);
        request.map(|body| {
            counted(body, move |data| {
                seen.fetch_add(data.len() as u64, Ordering::Relaxed);
            })
        })
    };
    let mut response = next.run(request).await;
    // Only a router's answers come from a brig host's layer; a host's may come from a
    // sandbox's program (a port), which may say anything.
    let host_request_id = match audit.tenancy.gateway {
        None => response
            .headers()
            .get(REQUEST_ID_HEADER)
            .and_then(|value| value.to_str().ok())
            .map(bounded),
        Some(_) => None,
    };
    if let Ok(value) = HeaderValue::from_str(&request_id) {
        response.headers_mut().insert(REQUEST_ID_HEADER, value);
    }
    let status = response.status().as_u16();
    let event = event(&method, &path, status);
    let peek = matches!(event, Some("created" | "create_failed" | "kill_failed"));
    let mut pending = Pending {
        audit: Arc::clone(&audit),
        line: Line {
            schema: SCHEMA,
            time,
            request_id,
            tenant,
            method,
            path,
            sandbox: addressed.as_deref().map(bounded),
            port,
            status,
            bytes_in: 0,
            bytes_out: 0,
            duration_ms: 0.0,
            event,
            message: None,
            host_request_id,
        },
        started,
        bytes_in,
        bytes_out: 0,
        peeked: peek.then(Vec::new),
    };
    response.map(|body| counted(body, move |data| pending.saw(data)))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::OpenOptionsExt;

    #[test]
    fn a_create_and_a_kill_say_what_happened_other_requests_nothing() {
        // (method, path, status) -> event
        for (method, path, status, expected) in [
            ("POST", "/sandboxes", 201, Some("created")),
            ("POST", "/v2/sandboxes", 201, Some("created")),
            ("POST", "/sandboxes", 400, Some("create_failed")),
            ("POST", "/sandboxes", 401, Some("create_failed")),
            ("DELETE", "/sandboxes/h0-0f", 204, Some("killed")),
            ("DELETE", "/sandboxes/0f", 404, Some("kill_failed")),
            ("DELETE", "/sandboxes/", 404, None),
            ("DELETE", "/sandboxes/0f/refreshes", 204, None),
            ("GET", "/sandboxes", 200, None),
            ("GET", "/sandboxes/0f", 200, None),
            ("POST", "/process.Process/Start", 200, None),
        ] {
            assert_eq!(
                event(method, path, status),
                expected,
                "{method} {path} {status}"
            );
        }
    }

    fn line(number: u64) -> Line {
        Line {
            schema: SCHEMA,
            time: crate::verdict::rfc3339_now(),
            request_id: format!("test-{number}"),
            tenant: Some("alice".into()),
            method: "GET".into(),
            path: format!("/sandboxes/{}", "0".repeat(400)),
            sandbox: None,
            port: None,
            status: 200,
            bytes_in: 0,
            bytes_out: 0,
            duration_ms: 0.0,
            event: None,
            message: None,
            host_request_id: None,
        }
    }

    /// The log is a FIFO nobody reads: the writer blocks once the pipe is full, the
    /// queue fills, and lines are dropped, never waited for. Once read, the log says
    /// how many were dropped, as the metric does.
    #[test]
    fn lines_a_stuck_disk_has_no_room_for_are_dropped_counted_and_said() {
        use std::io::BufRead;
        let dir = std::env::temp_dir().join(format!("brig-audit-test-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let fifo = dir.join("audit.fifo");
        let _ = std::fs::remove_file(&fifo);
        nix::unistd::mkfifo(&fifo, nix::sys::stat::Mode::from_bits_truncate(0o600)).unwrap();
        // A reader first (not blocking), so that the log's open does not wait for one.
        let reader = std::fs::OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_NONBLOCK)
            .open(&fifo)
            .unwrap();
        let metric = Counter::default();
        let tenancy = Tenancy::new(super::super::ApiKeys::default(), None);
        let audit = AuditLog::open_with(&fifo, tenancy, metric.clone(), 4).unwrap();
        let mut written = 0;
        while metric.get() == 0 {
            written += 1;
            audit.write(&line(written));
        }
        let dropped_so_far = metric.get();
        // Read it all (blocking now): the writer goes on, says what it dropped, and
        // ends with the log.
        let flags = nix::fcntl::fcntl(&reader, nix::fcntl::FcntlArg::F_GETFL).unwrap();
        let blocking = nix::fcntl::OFlag::from_bits_truncate(flags) - nix::fcntl::OFlag::O_NONBLOCK;
        nix::fcntl::fcntl(&reader, nix::fcntl::FcntlArg::F_SETFL(blocking)).unwrap();
        let reading = std::thread::spawn(move || {
            std::io::BufReader::new(reader)
                .lines()
                .map(Result::unwrap)
                .collect::<Vec<String>>()
        });
        drop(audit);
        let lines = reading.join().unwrap();
        let said: u64 = lines
            .iter()
            .filter_map(|line| serde_json::from_str::<serde_json::Value>(line).ok())
            .filter_map(|line| line["dropped"].as_u64())
            .sum();
        assert_eq!(said, dropped_so_far, "{lines:?}");
        assert_eq!(
            lines.len() as u64,
            written - dropped_so_far + 1,
            "every line not dropped, and the one saying so"
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }

    /// The counting body sees every byte and keeps the inner body's size, so that an
    /// answer of known length still goes out with its `Content-Length`.
    #[test]
    fn a_counted_body_sees_its_bytes_and_keeps_its_size() {
        let seen = Arc::new(AtomicU64::new(0));
        let body = {
            let seen = Arc::clone(&seen);
            counted(Body::from("hello, world"), move |data| {
                seen.fetch_add(data.len() as u64, Ordering::Relaxed);
            })
        };
        assert_eq!(body.size_hint().exact(), Some(12));
        let runtime = tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap();
        let bytes = runtime
            .block_on(axum::body::to_bytes(body, 1 << 10))
            .unwrap();
        assert_eq!(
            (&bytes[..], seen.load(Ordering::Relaxed)),
            (&b"hello, world"[..], 12)
        );
    }

    #[test]
    fn a_clients_text_is_bounded_on_a_char_boundary() {
        assert_eq!(bounded("/sandboxes"), "/sandboxes");
        let long = "é".repeat(FIELD_BYTES);
        let kept = bounded(&long);
        assert!(kept.len() <= FIELD_BYTES && kept.len() >= FIELD_BYTES - 1);
        assert!(kept.chars().all(|c| c == 'é'));
    }
}
