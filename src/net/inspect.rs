//! The jail's byte stream on one filtered connection, read the way a strict server reads
//! it, so that what brig judges is what the server will act on. Sans-IO: the flow hands in
//! the bytes it holds ([`Inspector::step`]) and gets back how many of them may go on, or
//! why the connection is refused; the name a step claims is judged by the caller's closure
//! (the policy's decision, `forward::decide`), apart from this reading of the bytes.
//!
//! - TLS: the ClientHello, gathered whole across records and TCP segments (records up to
//!   TLS's 2^14 bytes, the message up to 64 KiB), must name exactly one server (SNI); an
//!   encrypted ClientHello (ECH) is reported to the judge, which refuses it unless an
//!   `ech://` rule names its outer name; what follows it is relayed unread (encrypted).
//! - HTTP/1.x: every request head on the connection is parsed (httparse) and judged, the
//!   body passed by its framing (Content-Length or chunked), then the next head. What a
//!   strict server would refuse, or could read two ways, is refused: duplicate Host, an
//!   absolute-form target naming another host, obsolete line folding, bare CR or LF line
//!   ends, Content-Length with Transfer-Encoding, a head over 64 KiB. A WebSocket upgrade
//!   is relayed unread once the server answers `101`.
//! - HTTP/2 in cleartext (the prior-knowledge preface or `Upgrade: h2c`) is refused: each
//!   stream names its own `:authority`, which brig would have to follow through an HPACK
//!   decoder per connection; TLS with ALPN `h2` is judged by its SNI like any TLS.
//! - Other bytes: relayed unread where the policy allows raw TCP, refused where it
//!   expects HTTP or TLS ([`Expect::Web`]).
//!
//! Where a TLS terminator (issue 24's secrets) slots in: at the whole ClientHello. The
//! decision (`forward::decide::claim`) would answer "terminate" for a name entitled to a
//! secret; the flow would hand the held ClientHello to a per-connection terminator
//! instead of the host, and feed the decrypted stream to a fresh `Inspector` in its
//! request-head state, so that each request inside is judged by the same code.

use super::policy::host_name;
use std::net::IpAddr;
use tls_parser::{TlsExtension, TlsMessage, TlsMessageHandshake};

/// The most brig holds unjudged: an HTTP request head, or a ClientHello with the headers
/// of the records it spans.
pub const HEAD_LIMIT: usize = 64 * 1024 + 64;
/// The longest chunk-size line of a chunked body brig reads (extensions included).
const CHUNK_LINE_LIMIT: usize = 4096;
/// The largest TLS record a client may send (RFC 8446 5.1: 2^14 bytes of plaintext).
const MAX_RECORD: usize = 1 << 14;
/// The largest ClientHello brig gathers (its 4-byte handshake header included).
const MAX_CLIENT_HELLO: usize = 64 * 1024;
const TLS_HANDSHAKE: u8 = 0x16;
const CLIENT_HELLO: u8 = 1;
const RECORD_HEADER: usize = 5;
const SNI_HOST_NAME: u8 = 0;
/// The `encrypted_client_hello` extension (RFC 9849).
const ECH_EXTENSION: u16 = 0xfe0d;
/// HTTP/2's connection preface (RFC 9113 3.4).
const H2_PREFACE: &[u8] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";

/// What the policy expects on a connection's destination.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Expect {
    /// Ports 80 and 443: HTTP or TLS, judged; anything else is refused.
    Web,
    /// Another port: HTTP or TLS when the bytes are that (judged), else relayed unread.
    Any,
    /// A `tcp://` rule: relayed unread from the first byte.
    Raw,
}

/// The name a step of the stream claims, for the caller to judge.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Claim<'a> {
    /// A request's `Host` (no port).
    HttpHost(&'a str),
    /// A ClientHello's one server name (None when it has none); `ech`: it is the outer
    /// ClientHello of an encrypted one, whose real server name brig cannot see.
    Tls { sni: Option<&'a str>, ech: bool },
}

impl Claim<'_> {
    pub fn kind(&self) -> &'static str {
        match self {
            Claim::HttpHost(_) => "HTTP Host",
            Claim::Tls { .. } => "TLS SNI",
        }
    }

    pub fn name(&self) -> Option<&str> {
        match *self {
            Claim::HttpHost(name) => Some(name),
            Claim::Tls { sni, .. } => sni,
        }
    }
}

/// What the caller does with the bytes it holds.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Step {
    /// Not enough bytes to judge: hold them, read more.
    Wait,
    /// The first `n` held bytes are judged: pass them on, then step again.
    Pass(usize),
    /// Everything from here on is relayed unread.
    Unread,
    /// Hold what follows until the host's reply says what it is ([`Inspector::replied`]).
    AwaitReply,
    /// End the connection; why, phrased for whoever has to change something.
    Refuse(String),
}

#[derive(Clone, Debug, PartialEq, Eq)]
enum State {
    /// Nothing seen yet.
    Start,
    /// A TLS ClientHello under way.
    ClientHello,
    /// The next HTTP request head.
    Head,
    /// So many bytes of a Content-Length body to come.
    Body(u64),
    /// A chunked body: the next chunk-size line.
    ChunkSize,
    /// So many bytes of chunk data to come, then its CRLF.
    ChunkData(u64),
    ChunkEnd,
    /// The trailer section after the last chunk.
    Trailers,
    /// A WebSocket upgrade went out: the host's reply, as far as read.
    Upgrading(Vec<u8>),
    Unread,
}

/// The reading of one connection's jail-to-host bytes.
#[derive(Debug)]
pub struct Inspector {
    state: State,
    expect: Expect,
    /// How many held bytes of the head under way were already checked (line ends, the
    /// empty line that ends it): a head arriving a byte at a time is scanned once, not
    /// once per byte.
    scanned: usize,
    /// How many bytes must be held before the ClientHello under way is looked at again.
    need: usize,
}

impl Inspector {
    pub fn new(expect: Expect) -> Inspector {
        let state = match expect {
            Expect::Raw => State::Unread,
            Expect::Web | Expect::Any => State::Start,
        };
        Inspector {
            state,
            expect,
            scanned: 0,
            need: 0,
        }
    }

    /// Everything from here on is relayed unread.
    pub fn unread(&self) -> bool {
        self.state == State::Unread
    }

    /// Between requests: the last one's body (if any) is all passed, the next head is due.
    pub fn between_requests(&self) -> bool {
        self.state == State::Head
    }

    /// Waiting for the host's reply to a WebSocket upgrade.
    pub fn awaiting_reply(&self) -> bool {
        matches!(self.state, State::Upgrading(_))
    }

    /// In the middle of a head (HTTP request, chunk line, trailers, ClientHello): what brig
    /// holds must complete within the caller's time bound.
    pub fn in_head(&self) -> bool {
        matches!(
            self.state,
            State::Start | State::ClientHello | State::Head | State::ChunkSize | State::Trailers
        )
    }

    /// The host's bytes while [`Inspector::awaiting_reply`]: a `101` status makes the rest
    /// of the connection unread; any other status means the server stayed with HTTP, and
    /// the jail's next bytes are judged as a request head again.
    pub fn replied(&mut self, bytes: &[u8]) {
        let State::Upgrading(reply) = &mut self.state else {
            return;
        };
        const STATUS: usize = b"HTTP/1.1 101".len();
        let take = bytes.len().min(STATUS - reply.len());
        reply.extend_from_slice(&bytes[..take]);
        if reply.len() < STATUS {
            return;
        }
        let switched = reply.starts_with(b"HTTP/1.") && &reply[8..] == b" 101";
        self.state = if switched { State::Unread } else { State::Head };
    }

    /// Judges the front of `held` (the bytes the jail sent that brig has not passed on);
    /// `judge` decides a claimed name. `finished`: the jail sent its FIN, no more will come.
    pub fn step(
        &mut self,
        held: &[u8],
        finished: bool,
        judge: &mut dyn FnMut(Claim) -> Result<(), String>,
    ) -> Step {
        if held.is_empty() {
            return match self.state {
                State::Unread => Step::Unread,
                State::Upgrading(_) => Step::AwaitReply,
                _ => Step::Wait,
            };
        }
        let step = match &self.state {
            State::Unread => return Step::Unread,
            State::Upgrading(_) => return Step::AwaitReply,
            State::Start => self.start(held),
            State::ClientHello => self.client_hello(held, judge),
            State::Head => self.head(held, judge),
            State::Body(left) => self.counted(held, *left, State::Head, State::Body),
            State::ChunkSize => self.chunk_size(held),
            State::ChunkData(left) => self.counted(held, *left, State::ChunkEnd, State::ChunkData),
            State::ChunkEnd => self.chunk_end(held),
            State::Trailers => self.trailers(held),
        };
        match step {
            Step::Wait if held.len() >= HEAD_LIMIT => Step::Refuse(format!(
                "{} is longer than brig reads ({} KiB)",
                self.holding(),
                HEAD_LIMIT / 1024
            )),
            Step::Wait if finished => Step::Refuse(format!(
                "the connection ended inside {}, which brig cannot judge",
                self.holding()
            )),
            Step::Wait => {
                self.scanned = held.len();
                Step::Wait
            }
            step => {
                self.scanned = 0;
                self.need = 0;
                step
            }
        }
    }

    /// What brig is reading, for a refusal.
    pub fn holding(&self) -> &'static str {
        match self.state {
            State::Start => "the first bytes",
            State::ClientHello => "a TLS ClientHello",
            State::ChunkSize | State::ChunkData(_) | State::ChunkEnd => "a chunked body",
            State::Trailers => "a chunked body's trailers",
            _ => "an HTTP request head",
        }
    }

    /// Tells the protocol from the first bytes.
    fn start(&mut self, held: &[u8]) -> Step {
        // What was held before did not decide; nothing will until a line ends.
        if self.scanned > 0
            && held[0] != TLS_HANDSHAKE
            && !held[self.scanned..].contains(&b'\n')
            && held.len() < HEAD_LIMIT
        {
            return Step::Wait;
        }
        if held[0] == TLS_HANDSHAKE {
            self.state = State::ClientHello;
            return Step::Pass(0);
        }
        let preface = held.len().min(H2_PREFACE.len());
        if held[..preface] == H2_PREFACE[..preface] {
            return match preface >= b"PRI * HTTP/2.0".len() {
                true => Step::Refuse(H2C_REFUSED.into()),
                false => Step::Wait,
            };
        }
        if held[0] == b'\r' || held[0] == b'\n' {
            // A server skips empty lines before a request (RFC 9112 2.2) and would read
            // what follows as one that brig never judged.
            return Step::Refuse(
                "the first bytes are an empty line, which an HTTP server skips before a request; brig does not pass it".into(),
            );
        }
        match looks_like_http(held) {
            None => Step::Wait,
            Some(true) => {
                self.state = State::Head;
                Step::Pass(0)
            }
            Some(false) => match self.expect {
                Expect::Web => Step::Refuse(
                    "the bytes are neither HTTP nor TLS, which brig expects on ports 80 and 443; allow raw TCP with a tcp:// rule, e.g. --allow-net tcp://HOST:PORT".into(),
                ),
                Expect::Any | Expect::Raw => {
                    self.state = State::Unread;
                    Step::Unread
                }
            },
        }
    }

    fn client_hello(
        &mut self,
        held: &[u8],
        judge: &mut dyn FnMut(Claim) -> Result<(), String>,
    ) -> Step {
        if held.len() < self.need {
            return Step::Wait;
        }
        let (hello, consumed) = match gather_client_hello(held) {
            Gathered::NeedMore(total) => {
                self.need = total;
                return Step::Wait;
            }
            Gathered::Bad(why) => return Step::Refuse(format!("a TLS ClientHello {why}")),
            Gathered::Whole { message, consumed } => (message, consumed),
        };
        let (sni, ech) = match client_hello_name(&hello) {
            Ok(named) => named,
            Err(why) => return Step::Refuse(format!("a TLS ClientHello {why}")),
        };
        if let Err(why) = judge(Claim::Tls {
            sni: sni.as_deref(),
            ech,
        }) {
            return Step::Refuse(why);
        }
        self.state = State::Unread;
        Step::Pass(consumed)
    }

    fn head(&mut self, held: &[u8], judge: &mut dyn FnMut(Claim) -> Result<(), String>) -> Step {
        let end = match head_end(held, self.scanned) {
            Ok(Some(end)) => end,
            Ok(None) => return Step::Wait,
            Err(why) => return Step::Refuse(format!("an HTTP request head {why}")),
        };
        let request = match parse_request(&held[..end]) {
            Ok(request) => request,
            Err(why) => return Step::Refuse(why),
        };
        if let Err(why) = judge(Claim::HttpHost(&request.host)) {
            return Step::Refuse(why);
        }
        self.state = match request.body {
            _ if request.websocket => State::Upgrading(Vec::new()),
            Framing::Length(0) => State::Head,
            Framing::Length(length) => State::Body(length),
            Framing::Chunked => State::ChunkSize,
        };
        Step::Pass(end)
    }

    /// Passes up to `left` bytes of a body or chunk unread; then `done`, or `more` of what
    /// is left.
    fn counted(&mut self, held: &[u8], left: u64, done: State, more: fn(u64) -> State) -> Step {
        let pass = left.min(held.len() as u64);
        self.state = match left - pass {
            0 => done,
            rest => more(rest),
        };
        Step::Pass(pass as usize)
    }

    fn chunk_size(&mut self, held: &[u8]) -> Step {
        let Some(line) = held.windows(2).position(|pair| pair == b"\r\n") else {
            if let Err(why) = line_ends(held, 0) {
                return Step::Refuse(format!("a chunk-size line {why}"));
            }
            return match held.len() > CHUNK_LINE_LIMIT {
                true => Step::Refuse("a chunk-size line is longer than 4 KiB".into()),
                false => Step::Wait,
            };
        };
        let line = &held[..line + 2];
        if let Err(why) = line_ends(line, 0) {
            return Step::Refuse(format!("a chunk-size line {why}"));
        }
        match httparse::parse_chunk_size(line) {
            Ok(httparse::Status::Complete((consumed, size))) if consumed == line.len() => {
                self.state = match size {
                    0 => State::Trailers,
                    size => State::ChunkData(size),
                };
                Step::Pass(consumed)
            }
            _ => Step::Refuse(format!(
                "a chunk-size line does not parse: {:?}",
                String::from_utf8_lossy(&line[..line.len() - 2])
            )),
        }
    }

    fn chunk_end(&mut self, held: &[u8]) -> Step {
        let expected = &b"\r\n"[..held.len().min(2)];
        if &held[..expected.len()] != expected {
            return Step::Refuse("a chunk's data is not followed by CRLF".into());
        }
        if expected.len() < 2 {
            return Step::Wait;
        }
        self.state = State::ChunkSize;
        Step::Pass(2)
    }

    fn trailers(&mut self, held: &[u8]) -> Step {
        if held.starts_with(b"\r\n") {
            self.state = State::Head;
            return Step::Pass(2);
        }
        let end = match head_end(held, self.scanned) {
            Ok(Some(end)) => end,
            Ok(None) => return Step::Wait,
            Err(why) => return Step::Refuse(format!("a chunked body's trailers {why}")),
        };
        let mut headers = [httparse::EMPTY_HEADER; 64];
        match httparse::parse_headers(&held[..end], &mut headers) {
            Ok(httparse::Status::Complete((consumed, _))) if consumed == end => {
                self.state = State::Head;
                Step::Pass(end)
            }
            _ => Step::Refuse("a chunked body's trailers do not parse".into()),
        }
    }
}

const H2C_REFUSED: &str = "HTTP/2 without TLS (h2c) names a host per stream, which brig does not judge; use HTTP/1.1 or HTTPS";

/// Whether the first bytes are an HTTP/1 request line (`METHOD SP TARGET SP HTTP/1.x`), as
/// far as they go: None until the first line is complete (or plainly not HTTP). A method
/// is taken to be upper-case letters, `-` and `_` (what nginx accepts; servers answer
/// others with an error, never by routing on Host), so that a short message of another
/// protocol (`ping`) is told apart at once rather than held for a line end.
fn looks_like_http(held: &[u8]) -> Option<bool> {
    let method = held
        .iter()
        .take_while(|&&byte| byte.is_ascii_uppercase() || byte == b'-' || byte == b'_')
        .count();
    if method == held.len() {
        return (method >= HEAD_LIMIT).then_some(false);
    }
    if method == 0 || held[method] != b' ' {
        return Some(false);
    }
    let Some(line_end) = held.iter().position(|&byte| byte == b'\n') else {
        // A request line too long to judge: the head's bound refuses it.
        return (held.len() >= HEAD_LIMIT).then_some(true);
    };
    let line = held[..line_end]
        .strip_suffix(b"\r")
        .unwrap_or(&held[..line_end]);
    // Any version: the head parser refuses what is not HTTP/1.0 or 1.1.
    let version = line.rsplit(|&byte| byte == b' ').next().unwrap_or_default();
    Some(version.starts_with(b"HTTP/"))
}

/// Where the head ends (just past its empty line), checking every line end on the way:
/// a line ends in CRLF, never a bare LF, and no CR stands alone. The first `scanned`
/// bytes were checked before (all but the last three may be skipped).
fn head_end(held: &[u8], scanned: usize) -> Result<Option<usize>, String> {
    let from = scanned.saturating_sub(3);
    let end = held[from..]
        .windows(4)
        .position(|four| four == b"\r\n\r\n")
        .map(|at| from + at + 4);
    line_ends(&held[..end.unwrap_or(held.len())], from)?;
    Ok(end)
}

/// Every LF follows a CR and every CR precedes an LF (a CR at the very end may still),
/// from byte `from` on.
fn line_ends(bytes: &[u8], from: usize) -> Result<(), String> {
    for (at, &byte) in bytes.iter().enumerate().skip(from) {
        let before = at.checked_sub(1).map(|before| bytes[before]);
        let after = bytes.get(at + 1).copied();
        if byte == b'\n' && before != Some(b'\r') {
            return Err("ends a line with a bare LF (a strict server wants CRLF)".into());
        }
        if byte == b'\r' && after.is_some_and(|after| after != b'\n') {
            return Err("holds a bare CR (a strict server refuses it)".into());
        }
    }
    Ok(())
}

/// How a request's body is delimited.
#[derive(Debug, PartialEq, Eq)]
enum Framing {
    Length(u64),
    Chunked,
}

#[derive(Debug)]
struct Request {
    /// The `Host` header's name, lowercase, without port or trailing dot.
    host: String,
    body: Framing,
    /// `Upgrade: websocket` on a GET: the server may switch protocols.
    websocket: bool,
}

/// Parses one complete request head as a strict server would; Err: why brig refuses it.
fn parse_request(head: &[u8]) -> Result<Request, String> {
    let mut headers = [httparse::EMPTY_HEADER; 128];
    let mut request = httparse::Request::new(&mut headers);
    match request.parse(head) {
        Ok(httparse::Status::Complete(length)) if length == head.len() => {}
        Ok(_) => return Err("an HTTP request head does not parse".into()),
        Err(httparse::Error::TooManyHeaders) => {
            return Err("an HTTP request has more than 128 header fields".into());
        }
        Err(err) => {
            return Err(format!(
                "an HTTP request head does not parse as a strict server reads it ({err}): obsolete line folding, spaces around names, and the like are refused"
            ));
        }
    }
    let method = request.method.unwrap_or_default();
    let target = request.path.unwrap_or_default();
    if request.version != Some(1) && request.version != Some(0) {
        return Err("an HTTP request names a version other than HTTP/1.0 or 1.1".into());
    }
    if method == "CONNECT" {
        return Err(
            "an HTTP CONNECT request opens a tunnel brig cannot judge; reach the destination directly with its own --allow-net rule".into(),
        );
    }
    let headers: &[httparse::Header] = request.headers;
    let named = |wanted: &'static str| {
        headers
            .iter()
            .filter(move |header| header.name.eq_ignore_ascii_case(wanted))
    };
    let hosts: Vec<&httparse::Header> = named("host").collect();
    let host = match hosts.as_slice() {
        [one] => host_of(one.value).ok_or_else(|| {
            format!(
                "an HTTP request's Host {:?} is not a host name or address",
                String::from_utf8_lossy(one.value)
            )
        })?,
        [] => {
            return Err("an HTTP request without a Host header cannot be judged; send Host".into());
        }
        _ => return Err("an HTTP request has more than one Host header".into()),
    };
    if !(target.starts_with('/') || (target == "*" && method == "OPTIONS")) {
        let authority = absolute_form_host(target).ok_or_else(|| {
            format!("an HTTP request target {target:?} is neither a path nor an http(s) URL")
        })?;
        if authority != host {
            return Err(format!(
                "an HTTP request's target names {authority} but its Host names {host} (a server may read either)"
            ));
        }
    }
    let upgrade: Vec<String> = named("upgrade")
        .map(|header| String::from_utf8_lossy(header.value).to_ascii_lowercase())
        .collect();
    if upgrade.iter().any(|value| value.contains("h2c")) || named("http2-settings").count() > 0 {
        return Err(H2C_REFUSED.into());
    }
    let websocket = match upgrade.as_slice() {
        [] => false,
        [one] if one.trim() == "websocket" && method == "GET" => true,
        _ => {
            return Err(format!(
                "an HTTP request asks to upgrade to {:?}; brig lets only a GET upgrade to websocket through",
                upgrade.join(", ")
            ));
        }
    };
    let lengths: Vec<&[u8]> = named("content-length").map(|header| header.value).collect();
    let encodings: Vec<&[u8]> = named("transfer-encoding")
        .map(|header| header.value)
        .collect();
    let body = match (lengths.as_slice(), encodings.as_slice()) {
        ([], []) => Framing::Length(0),
        ([length], []) => Framing::Length(
            std::str::from_utf8(length)
                .ok()
                .filter(|digits| !digits.is_empty() && digits.bytes().all(|b| b.is_ascii_digit()))
                .and_then(|digits| digits.parse().ok())
                .ok_or_else(|| {
                    format!(
                        "an HTTP request's Content-Length {:?} is not a number",
                        String::from_utf8_lossy(length)
                    )
                })?,
        ),
        ([], [encoding])
            if encoding.eq_ignore_ascii_case(b"chunked") && request.version == Some(1) =>
        {
            Framing::Chunked
        }
        ([], [encoding]) => {
            return Err(format!(
                "an HTTP request's Transfer-Encoding {:?} is not plain `chunked` on HTTP/1.1",
                String::from_utf8_lossy(encoding)
            ));
        }
        ([_], [_]) => {
            return Err(
                "an HTTP request has both Content-Length and Transfer-Encoding (a server may read either)".into(),
            );
        }
        _ => {
            return Err(
                "an HTTP request has more than one Content-Length or Transfer-Encoding header"
                    .into(),
            );
        }
    };
    Ok(Request {
        host,
        body,
        websocket,
    })
}

/// A Host value's name or address, lowercase, no port, no trailing dot; None if it is
/// neither a host name nor an address.
fn host_of(value: &[u8]) -> Option<String> {
    let value = std::str::from_utf8(value).ok()?;
    let (host, port) = match value.strip_prefix('[') {
        Some(inside) => {
            let (address, rest) = inside.split_once(']')?;
            address.parse::<std::net::Ipv6Addr>().ok()?;
            match rest {
                "" => (address, None),
                _ => (address, Some(rest.strip_prefix(':')?)),
            }
        }
        None => match value.split_once(':') {
            Some((host, port)) => (host, Some(port)),
            None => (value, None),
        },
    };
    let port_ok = |port: &str| port.len() <= 5 && port.bytes().all(|byte| byte.is_ascii_digit());
    if port.is_some_and(|port| !port_ok(port)) {
        return None;
    }
    if host.parse::<IpAddr>().is_ok() {
        return Some(host.to_ascii_lowercase());
    }
    host_name(host).ok()
}

/// The host of an absolute-form target (`http://HOST[:PORT]/...`); None for any other
/// form, or one with user info (`http://allowed@other/`).
fn absolute_form_host(target: &str) -> Option<String> {
    let lower = target.to_ascii_lowercase();
    let rest = lower
        .strip_prefix("http://")
        .or_else(|| lower.strip_prefix("https://"))?;
    let authority = rest.split(['/', '?', '#']).next().unwrap_or_default();
    if authority.contains('@') {
        return None;
    }
    host_of(authority.as_bytes())
}

enum Gathered {
    /// At least this many bytes must be held before the next look.
    NeedMore(usize),
    Bad(String),
    /// The handshake message, and how many held bytes its records span.
    Whole {
        message: Vec<u8>,
        consumed: usize,
    },
}

/// Gathers the ClientHello from as many records as it spans.
fn gather_client_hello(mut held: &[u8]) -> Gathered {
    let mut message: Vec<u8> = Vec::new();
    let mut consumed = 0;
    loop {
        if held.len() < RECORD_HEADER {
            return Gathered::NeedMore(consumed + RECORD_HEADER);
        }
        if held[0] != TLS_HANDSHAKE {
            return Gathered::Bad(format!(
                "is interrupted by a record of type {} before it is complete",
                held[0]
            ));
        }
        if held[1] != 3 {
            return Gathered::Bad(format!("is in a record of version {}.{}", held[1], held[2]));
        }
        let length = usize::from(u16::from_be_bytes([held[3], held[4]]));
        if length == 0 || length > MAX_RECORD {
            return Gathered::Bad(format!(
                "is in a record of {length} bytes (TLS allows 1 to 16384)"
            ));
        }
        let Some(payload) = held.get(RECORD_HEADER..RECORD_HEADER + length) else {
            return Gathered::NeedMore(consumed + RECORD_HEADER + length);
        };
        message.extend_from_slice(payload);
        held = &held[RECORD_HEADER + length..];
        consumed += RECORD_HEADER + length;
        if message.len() < 4 {
            continue;
        }
        if message[0] != CLIENT_HELLO {
            return Gathered::Bad(format!("was expected, not handshake type {}", message[0]));
        }
        let whole = 4
            + (usize::from(message[1]) << 16
                | usize::from(message[2]) << 8
                | usize::from(message[3]));
        if whole > MAX_CLIENT_HELLO {
            return Gathered::Bad(format!(
                "of {whole} bytes is longer than brig reads (64 KiB)"
            ));
        }
        if message.len() == whole {
            return Gathered::Whole { message, consumed };
        }
        if message.len() > whole {
            return Gathered::Bad("shares its last record with another message".into());
        }
    }
}

/// The one server name a ClientHello asks for (None: it names none), and whether it
/// carries an encrypted ClientHello (ECH, or the older ESNI draft); Err: why brig refuses
/// it (no parse, more than one name).
fn client_hello_name(message: &[u8]) -> Result<(Option<String>, bool), String> {
    let Ok((rest, TlsMessage::Handshake(TlsMessageHandshake::ClientHello(hello)))) =
        tls_parser::parse_tls_message_handshake(message)
    else {
        return Err("does not parse".into());
    };
    if !rest.is_empty() {
        return Err("has bytes past its end".into());
    }
    let extensions = match hello.ext {
        None => Vec::new(),
        Some(raw) => match tls_parser::parse_tls_extensions(raw) {
            Ok(([], extensions)) => extensions,
            _ => return Err("has extensions that do not parse".into()),
        },
    };
    let mut names = Vec::new();
    let mut ech = false;
    for extension in &extensions {
        match extension {
            TlsExtension::SNI(list) => names.extend(list.iter()),
            TlsExtension::EncryptedServerName { .. } => ech = true,
            TlsExtension::Unknown(kind, _) if kind.0 == ECH_EXTENSION => ech = true,
            _ => {}
        }
    }
    let name = match names.as_slice() {
        [] => None,
        [(kind, name)] if kind.0 == SNI_HOST_NAME => {
            let name = std::str::from_utf8(name)
                .ok()
                .and_then(|name| host_name(name).ok())
                .ok_or_else(|| {
                    format!(
                        "names a server {:?} that is not a host name",
                        String::from_utf8_lossy(name)
                    )
                })?;
            Some(name)
        }
        [_] => return Err("names its server with a type other than host_name".into()),
        _ => {
            return Err(format!(
                "names {} servers; brig lets through exactly one",
                names.len()
            ));
        }
    };
    Ok((name, ech))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A ClientHello for `Example.COM`, as Python's ssl module (OpenSSL 3) sends it.
    const HELLO: &[u8] = include_bytes!("../../tests/data/client-hello-example.com.bin");

    /// What the inspector made of a stream fed in `segment`-byte pieces under a policy
    /// that allows the names in `allowed`.
    #[derive(Debug, Default)]
    struct Outcome {
        /// Bytes passed on as judged (an unread rest not included).
        passed: usize,
        unread: bool,
        awaiting: bool,
        refused: Option<String>,
        claims: Vec<Option<String>>,
    }

    fn read_as(expect: Expect, stream: &[u8], segment: usize, allowed: &[&str]) -> Outcome {
        let mut inspector = Inspector::new(expect);
        let mut outcome = Outcome::default();
        let mut claims = Vec::new();
        let mut judge = |claim: Claim| {
            claims.push(claim.name().map(str::to_string));
            match claim {
                Claim::Tls {
                    sni: Some(name),
                    ech: true,
                } => Err(format!("ech {name} not allowed")),
                _ => match claim.name() {
                    Some(name) if !allowed.contains(&name) => Err(format!("{name} is not allowed")),
                    _ => Ok(()),
                },
            }
        };
        let mut held: Vec<u8> = Vec::new();
        let mut chunks = stream.chunks(segment.max(1)).peekable();
        'feed: while let Some(chunk) = chunks.next() {
            held.extend_from_slice(chunk);
            let finished = chunks.peek().is_none();
            loop {
                match inspector.step(&held, finished, &mut judge) {
                    Step::Pass(count) => {
                        outcome.passed += count;
                        held.drain(..count);
                    }
                    Step::Wait => break,
                    Step::Unread => {
                        outcome.unread = true;
                        break 'feed;
                    }
                    Step::AwaitReply => {
                        outcome.awaiting = true;
                        break 'feed;
                    }
                    Step::Refuse(why) => {
                        outcome.refused = Some(why);
                        break 'feed;
                    }
                }
            }
        }
        outcome.claims = claims;
        outcome
    }

    fn http(stream: &str) -> Outcome {
        read_as(Expect::Web, stream.as_bytes(), 1 << 20, &["web.test"])
    }

    fn refused(stream: &str, needle: &str) {
        for segment in [1, 7, 1 << 20] {
            let outcome = read_as(Expect::Web, stream.as_bytes(), segment, &["web.test"]);
            let why = outcome.refused.unwrap_or_else(|| {
                panic!("not refused ({segment}-byte segments): {:.200}", stream)
            });
            assert!(why.contains(needle), "{:.200}: {why}", stream);
        }
    }

    const GET: &str = "GET / HTTP/1.1\r\nHost: web.test\r\n\r\n";

    #[test]
    fn every_request_on_a_kept_alive_connection_is_judged() {
        let fronted = format!("{GET}GET / HTTP/1.1\r\nHost: other.test\r\n\r\n");
        for segment in [1, 5, 1 << 20] {
            let outcome = read_as(Expect::Web, fronted.as_bytes(), segment, &["web.test"]);
            assert_eq!(outcome.passed, GET.len(), "the first request goes on");
            assert!(
                outcome
                    .refused
                    .unwrap()
                    .contains("other.test is not allowed")
            );
        }
        let both_allowed = format!(
            "{GET}POST /x HTTP/1.1\r\nHost: Web.Test.:80\r\nContent-Length: 3\r\n\r\nabc{GET}"
        );
        let outcome = http(&both_allowed);
        assert_eq!(outcome.refused, None);
        assert_eq!(outcome.passed, both_allowed.len());
        assert_eq!(outcome.claims.len(), 3);
    }

    #[test]
    fn bodies_pass_by_their_framing_and_the_next_head_is_judged() {
        // A body that looks like a request is a body; what follows it is the next head.
        let inner = "GET / HTTP/1.1\r\nHost: other.test\r\n\r\n";
        let by_length = format!(
            "POST / HTTP/1.1\r\nHost: web.test\r\nContent-Length: {}\r\n\r\n{inner}{GET}",
            inner.len()
        );
        assert_eq!(http(&by_length).refused, None);
        assert_eq!(http(&by_length).claims.len(), 2);
        let chunked = format!(
            "POST / HTTP/1.1\r\nHost: web.test\r\nTransfer-Encoding: chunked\r\n\r\n{:x};ext=1\r\n{inner}\r\n0\r\nX-Trailer: 1\r\n\r\n",
            inner.len()
        );
        for segment in [1, 3, 1 << 20] {
            let outcome = read_as(
                Expect::Web,
                format!("{chunked}{GET}").as_bytes(),
                segment,
                &["web.test"],
            );
            assert_eq!(outcome.refused, None, "segment {segment}");
            assert_eq!(outcome.passed, chunked.len() + GET.len());
        }
        refused(
            &format!("{chunked}GET / HTTP/1.1\r\nHost: other.test\r\n\r\n"),
            "other.test",
        );
        refused(
            "POST / HTTP/1.1\r\nHost: web.test\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabcXY",
            "not followed by CRLF",
        );
        refused(
            "POST / HTTP/1.1\r\nHost: web.test\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n",
            "chunk-size line does not parse",
        );
    }

    #[test]
    fn heads_a_strict_server_would_refuse_or_read_two_ways_are_refused() {
        let cases = [
            (
                "GET / HTTP/1.1\r\nHost: web.test\r\nHost: other.test\r\n\r\n",
                "more than one Host",
            ),
            (
                "GET http://other.test/ HTTP/1.1\r\nHost: web.test\r\n\r\n",
                "target names other.test",
            ),
            (
                "GET http://web.test@other.test/ HTTP/1.1\r\nHost: web.test\r\n\r\n",
                "neither a path",
            ),
            (
                "GET ftp://web.test/ HTTP/1.1\r\nHost: web.test\r\n\r\n",
                "neither a path",
            ),
            (
                "GET / HTTP/1.1\r\nHost: web.test\r\nX-A: 1\r\n  folded\r\n\r\n",
                "obsolete line folding",
            ),
            ("GET / HTTP/1.1\nHost: web.test\n\n", "bare LF"),
            ("GET / HTTP/1.1\r\nHost: web.test\rX: 1\r\n\r\n", "bare CR"),
            (
                "GET / HTTP/1.1\r\nHost: web.test\r\nContent-Length: 3\r\nTransfer-Encoding: chunked\r\n\r\n",
                "both Content-Length and Transfer-Encoding",
            ),
            (
                "GET / HTTP/1.1\r\nHost: web.test\r\nContent-Length: 3\r\nContent-Length: 3\r\n\r\n",
                "more than one Content-Length",
            ),
            (
                "GET / HTTP/1.1\r\nHost: web.test\r\nContent-Length: +3\r\n\r\n",
                "not a number",
            ),
            (
                "GET / HTTP/1.1\r\nHost: web.test\r\nTransfer-Encoding: gzip, chunked\r\n\r\n",
                "not plain `chunked`",
            ),
            (
                "GET / HTTP/1.1\r\nHost : web.test\r\n\r\n",
                "does not parse",
            ),
            ("GET / HTTP/1.1\r\n\r\n", "without a Host"),
            (
                "GET / HTTP/1.1\r\nHost: web.test/x\r\n\r\n",
                "not a host name",
            ),
            (
                "GET / HTTP/1.1\r\nHost: web.test:80:80\r\n\r\n",
                "not a host name",
            ),
            (
                "CONNECT other.test:443 HTTP/1.1\r\nHost: web.test\r\n\r\n",
                "CONNECT",
            ),
            (
                "GET / HTTP/1.1\r\nHost: web.test\r\nUpgrade: h2c\r\nHTTP2-Settings: AAMAAABkAAQAAP__\r\n\r\n",
                "h2c",
            ),
            (
                "GET / HTTP/1.1\r\nHost: web.test\r\nUpgrade: TLS/1.0\r\n\r\n",
                "upgrade",
            ),
            ("PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n", "h2c"),
            (
                "\r\nGET / HTTP/1.1\r\nHost: other.test\r\n\r\n",
                "empty line",
            ),
            (
                "GET / HTTP/1.1\r\nHost: web.test\r\nX: 1",
                "ended inside an HTTP request head",
            ),
        ];
        for (stream, needle) in cases {
            refused(stream, needle);
        }
        // The same requests, well formed, pass.
        for stream in [
            "GET http://web.test:80/x HTTP/1.1\r\nHost: web.test\r\n\r\n",
            "OPTIONS * HTTP/1.1\r\nHost: web.test\r\n\r\n",
            "GET / HTTP/1.0\r\nHost: web.test\r\n\r\n",
            "PROPFIND /x HTTP/1.1\r\nHost: [::1]:80\r\n\r\n",
        ] {
            let outcome = read_as(Expect::Web, stream.as_bytes(), 1, &["web.test", "::1"]);
            assert_eq!(outcome.refused, None, "{stream}");
            assert_eq!(outcome.passed, stream.len(), "{stream}");
        }
    }

    #[test]
    fn a_head_is_bounded() {
        let long = format!(
            "GET / HTTP/1.1\r\nHost: web.test\r\nX: {}\r\n",
            "a".repeat(HEAD_LIMIT)
        );
        refused(&long, "longer than brig reads");
        // Never more than the bound is held: an unfinished head stops at it.
        let line = format!("GET /{} HTTP/1.1", "a".repeat(HEAD_LIMIT));
        refused(&line, "longer than brig reads");
    }

    #[test]
    fn every_prefix_of_a_request_waits() {
        for cut in 0..GET.len() {
            let mut inspector = Inspector::new(Expect::Web);
            let step = inspector.step(&GET.as_bytes()[..cut], false, &mut |_| Ok(()));
            let step = match step {
                Step::Pass(0) => inspector.step(&GET.as_bytes()[..cut], false, &mut |_| Ok(())),
                step => step,
            };
            assert_eq!(step, Step::Wait, "cut at {cut}");
        }
    }

    #[test]
    fn a_websocket_upgrade_is_unread_only_once_the_server_switches() {
        let upgrade = "GET /ws HTTP/1.1\r\nHost: web.test\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\r\n";
        let stream = format!("{upgrade}GET / HTTP/1.1\r\nHost: other.test\r\n\r\n");
        let step = |inspector: &mut Inspector, held: &[u8]| {
            inspector.step(held, false, &mut |claim| match claim.name() {
                Some("web.test") => Ok(()),
                _ => Err("no".into()),
            })
        };
        for (reply, switched) in [
            ("HTTP/1.1 101 Switching", true),
            ("HTTP/1.1 400 Bad", false),
        ] {
            let mut inspector = Inspector::new(Expect::Web);
            let mut held = stream.as_bytes().to_vec();
            assert_eq!(step(&mut inspector, &held), Step::Pass(0));
            assert_eq!(step(&mut inspector, &held), Step::Pass(upgrade.len()));
            held.drain(..upgrade.len());
            assert_eq!(step(&mut inspector, &held), Step::AwaitReply);
            for byte in reply.as_bytes() {
                inspector.replied(&[*byte]);
            }
            let expected = match switched {
                true => Step::Unread,
                false => Step::Refuse("no".into()),
            };
            assert_eq!(step(&mut inspector, &held), expected, "{reply}");
        }
    }

    #[test]
    fn bytes_neither_http_nor_tls_are_refused_where_the_policy_expects_them() {
        let ssh = b"SSH-2.0-OpenSSH_9.2 Debian\r\n";
        assert!(
            read_as(Expect::Web, ssh, 100, &[])
                .refused
                .unwrap()
                .contains("tcp://")
        );
        assert!(read_as(Expect::Any, ssh, 100, &[]).unread);
        assert!(read_as(Expect::Raw, ssh, 100, &[]).unread);
        // A raw rule reads nothing, not even a request for another host.
        let other = b"GET / HTTP/1.1\r\nHost: other.test\r\n\r\n";
        assert!(read_as(Expect::Raw, other, 100, &[]).unread);
        assert!(read_as(Expect::Any, other, 100, &[]).refused.is_some());
        for bytes in [
            &b"\x00\x00\x00\x08\x04\xd2\x16\x2f"[..],
            b"get / HTTP/1.1\r\n",
            b"GETX",
        ] {
            let outcome = read_as(Expect::Web, bytes, 100, &[]);
            assert!(outcome.refused.is_some(), "{bytes:?}: {outcome:?}");
        }
    }

    /// A ClientHello handshake message with these extensions (type, data).
    fn client_hello(extensions: &[(u16, Vec<u8>)]) -> Vec<u8> {
        let mut body = vec![3, 3];
        body.extend([7u8; 32]);
        body.push(0); // session id
        body.extend([0, 2, 0x13, 0x01]); // one cipher suite
        body.extend([1, 0]); // null compression
        let mut raw = Vec::new();
        for (kind, data) in extensions {
            raw.extend(kind.to_be_bytes());
            raw.extend((data.len() as u16).to_be_bytes());
            raw.extend(data);
        }
        body.extend((raw.len() as u16).to_be_bytes());
        body.extend(raw);
        let mut message = vec![CLIENT_HELLO];
        message.extend(&(body.len() as u32).to_be_bytes()[1..]);
        message.extend(body);
        message
    }

    fn server_names(names: &[&str]) -> (u16, Vec<u8>) {
        let mut list = Vec::new();
        for name in names {
            list.push(SNI_HOST_NAME);
            list.extend((name.len() as u16).to_be_bytes());
            list.extend(name.as_bytes());
        }
        let mut data = (list.len() as u16).to_be_bytes().to_vec();
        data.extend(list);
        (0, data)
    }

    /// `message` in TLS records of at most `size` bytes each.
    fn records(message: &[u8], size: usize) -> Vec<u8> {
        let mut out = Vec::new();
        for part in message.chunks(size) {
            out.extend([TLS_HANDSHAKE, 3, 1]);
            out.extend((part.len() as u16).to_be_bytes());
            out.extend(part);
        }
        out
    }

    fn tls(stream: &[u8], segment: usize) -> Outcome {
        read_as(Expect::Web, stream, segment, &["example.com", "web.test"])
    }

    #[test]
    fn a_client_hello_is_judged_whole_across_records_and_segments() {
        let outcome = tls(HELLO, 1 << 20);
        assert_eq!(outcome.claims, vec![Some("example.com".to_string())]);
        assert_eq!(outcome.passed, HELLO.len());
        assert!(outcome.unread);
        let message = &HELLO[RECORD_HEADER..];
        for record in [1, 2, 100, 511] {
            for segment in [1, 13, 1 << 20] {
                let outcome = tls(&records(message, record), segment);
                assert_eq!(
                    outcome.claims,
                    vec![Some("example.com".to_string())],
                    "{record}/{segment}"
                );
                assert!(outcome.unread && outcome.refused.is_none());
            }
        }
        // Every prefix waits.
        for cut in 1..HELLO.len() {
            let mut inspector = Inspector::new(Expect::Web);
            let _ = inspector.step(&HELLO[..cut], false, &mut |_| Ok(()));
            assert_eq!(
                inspector.step(&HELLO[..cut], false, &mut |_| Ok(())),
                Step::Wait,
                "cut at {cut}"
            );
        }
        // A name hidden past 16 KiB of padding is still found, up to 64 KiB.
        let big = client_hello(&[(21, vec![0; 40_000]), server_names(&["other.test"])]);
        let outcome = tls(&records(&big, MAX_RECORD), 1000);
        assert_eq!(outcome.claims, vec![Some("other.test".to_string())]);
        assert!(outcome.refused.unwrap().contains("other.test"));
        let too_big = client_hello(&[
            (21, vec![0; 33_000]),
            (21, vec![0; 33_000]),
            server_names(&["web.test"]),
        ]);
        assert!(
            tls(&records(&too_big, MAX_RECORD), 1 << 20)
                .refused
                .unwrap()
                .contains("64 KiB")
        );
    }

    #[test]
    fn client_hellos_read_two_ways_are_refused() {
        let cases: [(Vec<u8>, &str); 6] = [
            (
                records(
                    &client_hello(&[server_names(&["web.test", "other.test"])]),
                    1000,
                ),
                "names 2 servers",
            ),
            (
                records(
                    &client_hello(&[server_names(&["web.test"]), server_names(&["other.test"])]),
                    1000,
                ),
                "names 2 servers",
            ),
            (
                records(
                    &client_hello(&[server_names(&["web.test"]), (ECH_EXTENSION, vec![0; 40])]),
                    1000,
                ),
                "ech web.test not allowed",
            ),
            (
                records(&client_hello(&[server_names(&["web test"])]), 1000),
                "not a host name",
            ),
            (
                {
                    let mut oversized =
                        records(&client_hello(&[server_names(&["web.test"])]), 1000);
                    oversized[3..5].copy_from_slice(&((MAX_RECORD + 1) as u16).to_be_bytes());
                    oversized
                },
                "TLS allows 1 to 16384",
            ),
            (
                {
                    let mut interrupted =
                        records(&client_hello(&[server_names(&["web.test"])]), 20);
                    interrupted[25] = 0x15;
                    interrupted
                },
                "interrupted by a record of type 21",
            ),
        ];
        for (stream, needle) in cases {
            let why = tls(&stream, 1 << 20)
                .refused
                .unwrap_or_else(|| panic!("{needle}: not refused"));
            assert!(why.contains(needle), "{needle}: {why}");
        }
        // No name at all: the caller decides (a connection to an address rule needs none).
        let nameless = records(&client_hello(&[]), 1000);
        assert_eq!(tls(&nameless, 1 << 20).claims, vec![None]);
    }
}
