//! A TLS connection brig terminates because its server name is entitled to a secret
//! (`net::secrets`). Sans-IO like the rest of the flow: rustls on both sides (the jail
//! sees a leaf signed by its own CA; the host side verifies the real certificate), and
//! between them a fresh `Inspector` judges every decrypted request head, which must name
//! the host the connection was terminated for; in each head the placeholder of every
//! secret that host is entitled to is replaced by the real value. The placeholder of a
//! secret the host is *not* entitled to goes on unchanged and is reported (refused with
//! `--secret-strict`).
//!
//! With `--secret-body` the placeholder is replaced in the bodies of those requests too:
//! a text, JSON or form body is held whole (at most `body::MAX_BODY`) until it ends, then
//! rewritten and re-framed (`body`).
//!
//! Bounded: no more than [`BACKLOG`] bytes wait on either side (and one held body); past
//! that the flow is told `WouldBlock` and holds the bytes in its own (bounded) buffers.

use super::super::inspect::{Claim, Expect, Inspector, Step};
use super::super::secrets::{Secret, Secrets, find, not_entitled};
use super::body::{self, Framing};
use rustls::{ClientConnection, ServerConnection, pki_types::ServerName};
use std::io::{self, Read, Write};
use std::sync::Arc;

/// The most decrypted or encrypted bytes held towards either side.
const BACKLOG: usize = 256 * 1024;

pub struct Terminator {
    secrets: Arc<Secrets>,
    /// The server name the jail asked for, and its port.
    host: String,
    port: u16,
    jail_side: ServerConnection,
    host_side: ClientConnection,
    inspector: Inspector,
    /// Decrypted jail bytes not yet judged.
    plain: Vec<u8>,
    host_finished: bool,
    /// The jail sent its close_notify.
    jail_closed: bool,
    /// Why the connection must end (a request for another host, an untrusted upstream).
    pub refusal: Option<String>,
    /// `secret placeholder sent to HOST, not entitled` (once per secret).
    pub reports: Vec<String>,
    /// A request whose body brig rewrites, held until its body ends.
    held: Option<Held>,
    /// Request heads passed so far (the flow times each head: [`Terminator::holding_head`]).
    pub heads: u64,
}

/// A request held for its body: its head (placeholders in its headers replaced already)
/// and its body as framed on the wire so far.
struct Held {
    head: Vec<u8>,
    framing: Framing,
    wire: Vec<u8>,
}

impl Terminator {
    pub fn new(secrets: Arc<Secrets>, host: &str, port: u16) -> Result<Terminator, String> {
        let mut jail_side = ServerConnection::new(secrets.leaf(host)?)
            .map_err(|err| format!("TLS towards the jail for {host}: {err}"))?;
        let name = ServerName::try_from(host.to_string())
            .map_err(|err| format!("{host} is not a TLS server name: {err}"))?;
        let mut host_side = ClientConnection::new(secrets.upstream(), name)
            .map_err(|err| format!("TLS towards {host}: {err}"))?;
        // Bounded by the flow instead: brig feeds either side only once it took the last.
        jail_side.set_buffer_limit(None);
        host_side.set_buffer_limit(None);
        Ok(Terminator {
            secrets,
            host: host.to_string(),
            port,
            jail_side,
            host_side,
            inspector: Inspector::new(Expect::Web),
            plain: Vec::new(),
            host_finished: false,
            jail_closed: false,
            refusal: None,
            reports: Vec::new(),
            held: None,
            heads: 0,
        })
    }

    /// The server name this connection was decrypted for.
    pub fn host(&self) -> &str {
        &self.host
    }

    /// The jail's TLS bytes: decrypted, judged, passed to the host side. How many of
    /// `data` were taken.
    pub fn take_from_jail(&mut self, data: &[u8], upstream: &mut dyn Write) -> io::Result<usize> {
        self.flush(upstream)?;
        if self.refusal.is_some() {
            return Err(io::Error::other("refused"));
        }
        // The host is not taking what it has: hold the jail's bytes in the flow.
        if self.backlogged() || self.host_side.wants_write() {
            return Err(io::ErrorKind::WouldBlock.into());
        }
        let mut cursor = data;
        let taken = self.jail_side.read_tls(&mut cursor)?;
        if let Err(err) = self.jail_side.process_new_packets() {
            return Err(self.refuse(format!("the jail's TLS for {}: {err}", self.host)));
        }
        let mut buffer = [0u8; 16 * 1024];
        loop {
            match self.jail_side.reader().read(&mut buffer) {
                Ok(0) => {
                    // The jail's close_notify: pass the orderly close on.
                    if !self.jail_closed {
                        self.jail_closed = true;
                        self.host_side.send_close_notify();
                    }
                    break;
                }
                Ok(count) => self.plain.extend_from_slice(&buffer[..count]),
                Err(err) if err.kind() == io::ErrorKind::WouldBlock => break,
                Err(err) => return Err(err),
            }
        }
        self.judge()?;
        self.flush(upstream)?;
        Ok(taken)
    }

    /// The host's TLS bytes, read from `upstream`, decrypted and re-encrypted for the
    /// jail into `space`. Ok(0): the host finished and everything is out.
    pub fn give_to_jail<U: Read + Write>(
        &mut self,
        space: &mut [u8],
        upstream: &mut U,
    ) -> io::Result<usize> {
        // Read from the host only once what it sent before is out to the jail: what brig
        // holds towards the jail stays within one read of BACKLOG bytes.
        let mut buffer = [0u8; 16 * 1024];
        let mut read = 0;
        while !self.host_finished && !self.jail_side.wants_write() && read < BACKLOG {
            match self.host_side.read_tls(upstream) {
                Ok(0) => self.host_finished = true,
                Ok(count) => {
                    read += count;
                    if let Err(err) = self.host_side.process_new_packets() {
                        // Past the handshake the host is verified: a TLS error then
                        // ends the connection like a reset, it is no refusal.
                        if !self.host_side.is_handshaking() {
                            return Err(io::Error::other(err));
                        }
                        return Err(self.refuse(format!(
                            "the upstream TLS of {}: {err} (brig verifies it against the host's roots and --upstream-ca)",
                            self.host
                        )));
                    }
                }
                Err(err) if err.kind() == io::ErrorKind::WouldBlock => break,
                Err(err) => return Err(err),
            }
            loop {
                match self.host_side.reader().read(&mut buffer) {
                    Ok(0) => {
                        self.host_finished = true;
                        break;
                    }
                    Ok(count) => {
                        if self.inspector.awaiting_reply() {
                            self.inspector.replied(&buffer[..count]);
                        }
                        self.jail_side.writer().write_all(&buffer[..count])?;
                    }
                    Err(err) if err.kind() == io::ErrorKind::WouldBlock => break,
                    Err(err) if err.kind() == io::ErrorKind::UnexpectedEof => {
                        self.host_finished = true;
                        break;
                    }
                    Err(err) => return Err(err),
                }
            }
        }
        // The host side's handshake answers (and any request that waited for it).
        self.judge()?;
        self.flush(upstream)?;
        if self.jail_side.wants_write() {
            let mut out = &mut space[..];
            return self.jail_side.write_tls(&mut out);
        }
        if self.host_finished {
            return Ok(0);
        }
        Err(io::ErrorKind::WouldBlock.into())
    }

    /// Writes what the host side has to send (handshake, requests) as far as it goes.
    pub fn flush(&mut self, upstream: &mut dyn Write) -> io::Result<()> {
        while self.host_side.wants_write() {
            match self.host_side.write_tls(upstream) {
                Ok(_) => {}
                Err(err) if err.kind() == io::ErrorKind::WouldBlock => break,
                Err(err) => return Err(err),
            }
        }
        Ok(())
    }

    /// Part of a request head (or chunk line, trailers) is held, waiting for the rest:
    /// the flow refuses one not whole within its head time, as on cleartext.
    pub fn holding_head(&self) -> bool {
        self.inspector.in_head() && !self.plain.is_empty()
    }

    fn backlogged(&self) -> bool {
        // rustls holds what it could not write yet; its own limit bounds it, this one
        // keeps brig from feeding more while it is large.
        self.plain.len() >= BACKLOG
    }

    fn refuse(&mut self, reason: String) -> io::Error {
        let error = io::Error::new(io::ErrorKind::PermissionDenied, reason.clone());
        self.refusal.get_or_insert(reason);
        error
    }

    /// Judges the decrypted bytes held; what passes goes to the host side, heads with the
    /// entitled placeholders replaced.
    fn judge(&mut self) -> io::Result<()> {
        while !self.plain.is_empty() {
            let (host, port) = (self.host.clone(), self.port);
            let mut head = false;
            let mut judge = |claim: Claim| match claim {
                Claim::HttpHost(named) if named.eq_ignore_ascii_case(&host) => {
                    head = true;
                    Ok(())
                }
                Claim::HttpHost(named) => Err(format!(
                    "a request for {named} on a TLS connection brig decrypted for {host}:{port} (it holds a secret for {host} only); connect to {named} separately"
                )),
                Claim::Tls { .. } => Err(format!(
                    "TLS inside the TLS connection brig decrypted for {host}:{port}; brig judges the requests inside, which must be HTTP/1"
                )),
            };
            let step = self.inspector.step(&self.plain, false, &mut judge);
            match step {
                Step::Wait => return Ok(()),
                Step::Pass(count) => {
                    let chunk: Vec<u8> = self.plain.drain(..count).collect();
                    self.pass(chunk, head)?;
                }
                Step::Unread | Step::AwaitReply => {
                    let chunk = std::mem::take(&mut self.plain);
                    self.host_side.writer().write_all(&chunk)?;
                }
                Step::Refuse(reason) => return Err(self.refuse(reason)),
            }
        }
        Ok(())
    }

    /// Judged bytes on their way to the host: a head with its placeholders replaced (and
    /// held, when brig rewrites its body), a held body's bytes added to it until it ends.
    fn pass(&mut self, chunk: Vec<u8>, head: bool) -> io::Result<()> {
        if head {
            self.heads += 1;
            let head = self.replace(chunk)?;
            let framing = (!self.inspector.between_requests())
                .then(|| body::rewritable(&head))
                .flatten()
                .filter(|_| self.body_secrets().next().is_some());
            match framing {
                Some(framing) => {
                    self.held = Some(Held {
                        head,
                        framing,
                        wire: Vec::new(),
                    })
                }
                None => self.host_side.writer().write_all(&head)?,
            }
            return Ok(());
        }
        let Some(held) = &mut self.held else {
            return self.host_side.writer().write_all(&chunk);
        };
        held.wire.extend_from_slice(&chunk);
        if self.inspector.between_requests() {
            let held = self.held.take().expect("held");
            return self.release(held);
        }
        if held.wire.len() > body::MAX_BODY {
            // A chunked body past the bound goes on as it is (documented).
            let held = self.held.take().expect("held");
            self.host_side.writer().write_all(&held.head)?;
            self.host_side.writer().write_all(&held.wire)?;
        }
        Ok(())
    }

    /// The secrets whose placeholder brig replaces in bodies to this host.
    fn body_secrets(&self) -> impl Iterator<Item = &Secret> {
        self.secrets
            .secrets
            .iter()
            .filter(|secret| secret.body && secret.entitles(&self.host, self.port))
    }

    /// A held request whose body has ended: its placeholders replaced, re-framed, sent.
    fn release(&mut self, held: Held) -> io::Result<()> {
        let (mut data, trailers) = match held.framing {
            Framing::Length => (held.wire, Vec::new()),
            Framing::Chunked => match body::dechunk(&held.wire) {
                Some(parts) => parts,
                None => {
                    // The inspector passed it as valid: this does not happen; send as is.
                    self.host_side.writer().write_all(&held.head)?;
                    return self.host_side.writer().write_all(&held.wire);
                }
            },
        };
        let secrets = Arc::clone(&self.secrets);
        for secret in secrets.sent_in(&data) {
            if secret.body && secret.entitles(&self.host, self.port) {
                data = replace_all(&data, secret.placeholder.as_bytes(), &secret.value());
            } else if !secret.entitles(&self.host, self.port) {
                self.not_entitled(secret)?;
            }
        }
        let request = body::reframe(&held.head, held.framing, &data, &trailers);
        self.host_side.writer().write_all(&request)
    }

    /// A placeholder sent to this host, which its secret does not entitle: reported once,
    /// or refused with `--secret-strict`.
    fn not_entitled(&mut self, secret: &Secret) -> io::Result<()> {
        let report = not_entitled(secret, &self.host);
        if self.secrets.strict {
            return Err(self.refuse(format!("{report} (--secret-strict)")));
        }
        if !self.reports.contains(&report) {
            self.reports.push(report);
        }
        Ok(())
    }

    /// A request head with the placeholder of every secret this host is entitled to
    /// replaced in its header lines (not the request line: a value never goes into a URL,
    /// which servers log); another secret's placeholder is left as it is and reported.
    fn replace(&mut self, head: Vec<u8>) -> io::Result<Vec<u8>> {
        let secrets = Arc::clone(&self.secrets);
        let headers_at = find(&head, b"\n").map_or(head.len(), |at| at + 1);
        let (request_line, headers) = head.split_at(headers_at);
        let mut headers = headers.to_vec();
        for secret in secrets.sent_in(&head) {
            let placeholder = secret.placeholder.as_bytes();
            if secret.entitles(&self.host, self.port) {
                headers = replace_all(&headers, placeholder, &secret.value());
                continue;
            }
            self.not_entitled(secret)?;
        }
        let mut replaced = request_line.to_vec();
        replaced.extend_from_slice(&headers);
        Ok(replaced)
    }
}

fn replace_all(haystack: &[u8], needle: &[u8], with: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(haystack.len() + with.len());
    let mut rest = haystack;
    while let Some(at) = find(rest, needle) {
        out.extend_from_slice(&rest[..at]);
        out.extend_from_slice(with);
        rest = &rest[at + needle.len()..];
    }
    out.extend_from_slice(rest);
    out
}
