//! One connection from the jail: its smoltcp socket on the jail's side, its host socket on
//! the other, and the bytes between them. The jail's bytes are held until the inspector
//! (`net::inspect`) has read them as the server will: each HTTP request head, a TLS
//! ClientHello; a name off the list, or bytes brig cannot judge where it must, end the
//! connection before they reach the host (no domain fronting through an allowed address,
//! on the first request or any later one).

use super::super::inspect::{self, Expect, HEAD_LIMIT, Inspector, Step};
use super::super::policy::Policy;
use super::decide;
use super::terminate::Terminator;
use crate::net::secrets::{Secrets, not_entitled};
use smoltcp::iface::SocketHandle;
use smoltcp::socket::tcp;
use smoltcp::time::{Duration, Instant};
use smoltcp::wire::IpEndpoint;
use std::io::{self, Read, Write};
use std::net::{IpAddr, Shutdown};
use std::os::unix::net::UnixStream;

/// What the jail sent and brig has not relayed yet: smoltcp's receive window.
pub const JAIL_TO_HOST_BUFFER: usize = 64 * 1024;
/// What the host sent and the jail has not acknowledged yet: smoltcp's send buffer, the
/// most brig has in flight towards the jail (large, for downloads).
pub const HOST_TO_JAIL_BUFFER: usize = 1024 * 1024;
/// How long a head (an HTTP request head, a ClientHello, a chunk-size line) may take to
/// arrive whole once its first byte has: one held longer is refused (a slow trickle would
/// otherwise hold the connection unjudged for ever).
pub const HEAD_TIME: Duration = Duration::from_secs(10);

/// The host side of a flow: brig's TCP connection (mio's), or in the unit tests and the
/// fuzz targets one end of a Unix socket pair.
pub trait Upstream: Read + Write {
    /// Passes the jail's FIN on.
    fn shutdown_write(&mut self);
}

impl Upstream for mio::net::TcpStream {
    fn shutdown_write(&mut self) {
        let _ = self.shutdown(Shutdown::Write);
    }
}

impl Upstream for UnixStream {
    fn shutdown_write(&mut self) {
        let _ = self.shutdown(Shutdown::Write);
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Phase {
    /// Waiting for the host's resolver.
    Resolving,
    /// The host socket is connecting; the jail's SYN is held.
    Connecting,
    /// Both sides connected (or the jail's handshake under way in smoltcp).
    Open,
}

pub struct Flow<U> {
    /// The jail's end of the connection and the destination it asked for.
    pub jail: IpEndpoint,
    pub target: IpEndpoint,
    /// The allowed name behind a synthetic destination; None for an address rule.
    pub name: Option<String>,
    /// The jail's SYN, held until the host side is connected.
    pub syn: Option<Vec<u8>>,
    pub phase: Phase,
    /// Addresses still to try should the current connect fail.
    pub candidates: Vec<IpAddr>,
    /// The host address brig connects or connected to.
    pub address: Option<IpAddr>,
    pub socket: Option<SocketHandle>,
    pub upstream: Option<U>,
    /// mio's edge-triggered readiness of the host socket, cleared on WouldBlock.
    pub readable: bool,
    pub writable: bool,
    /// What the policy expected on the destination when the flow opened.
    pub expect: Expect,
    /// The jail's bytes held while they are judged.
    held: Vec<u8>,
    inspector: Inspector,
    /// When the head being held began to arrive (for [`HEAD_TIME`]).
    head_since: Option<Instant>,
    /// The same inside a decrypted connection: since when the terminator holds part of a
    /// head, and how many heads it had passed then.
    inner_head_since: Option<(Instant, u64)>,
    /// Judged bytes not yet written to the host.
    pending: Vec<u8>,
    host_finished: bool,
    host_shut: bool,
    pub sent: u64,
    pub received: u64,
    /// The name the last judged request or ClientHello claimed.
    pub claimed: Option<String>,
    /// Why brig ended the connection, if it did.
    pub cut_reason: Option<String>,
    /// Its bytes named a host off the list, or could not be judged: refused.
    pub refused: bool,
    /// A TLS connection to a host entitled to a secret: brig decrypts it, judges each
    /// request and puts the secret in (`terminate`).
    terminator: Option<Box<Terminator>>,
    /// What the terminator reported (a placeholder sent where it is not entitled).
    pub reports: Vec<String>,
}

/// What one call of [`Flow::relay`] did.
#[derive(Default)]
pub struct Relayed {
    pub bytes: u64,
    /// A state change (a close, a cut) that smoltcp has to act on.
    pub changed: bool,
}

enum HostRead {
    Data(usize),
    Blocked,
    Finished,
    Failed,
}

impl<U: Upstream> Flow<U> {
    pub fn new(
        jail: IpEndpoint,
        target: IpEndpoint,
        name: Option<String>,
        syn: Vec<u8>,
        expect: Expect,
    ) -> Flow<U> {
        Flow {
            jail,
            target,
            name,
            syn: Some(syn),
            phase: Phase::Resolving,
            candidates: Vec::new(),
            address: None,
            socket: None,
            upstream: None,
            readable: false,
            writable: false,
            expect,
            held: Vec::new(),
            inspector: Inspector::new(expect),
            head_since: None,
            inner_head_since: None,
            pending: Vec::new(),
            host_finished: false,
            host_shut: false,
            sent: 0,
            received: 0,
            claimed: None,
            cut_reason: None,
            refused: false,
            terminator: None,
            reports: Vec::new(),
        }
    }

    /// Marks the connection as ended by brig, for the record.
    pub fn cut(&mut self, reason: &str) {
        self.cut_reason.get_or_insert_with(|| reason.to_string());
        self.upstream = None;
    }

    /// Relays what can move now, both ways.
    pub fn relay(&mut self, socket: &mut tcp::Socket, policy: &Policy, now: Instant) -> Relayed {
        let mut relayed = Relayed::default();
        if self.cut_reason.is_some() || self.upstream.is_none() {
            return relayed;
        }
        let judged = match self.head_deadline() {
            Some(deadline) if now >= deadline => Err(match (&self.terminator, self.head_since) {
                (Some(terminator), None) => format!(
                    "a request head inside the TLS connection brig decrypted for {} did not arrive whole within {} s",
                    terminator.host(),
                    HEAD_TIME.secs()
                ),
                _ => format!(
                    "{} did not arrive whole within {} s",
                    self.inspector.holding(),
                    HEAD_TIME.secs()
                ),
            }),
            _ => self.inspect(socket, policy, now),
        };
        if let Err(reason) = judged {
            self.refused = true;
            self.cut(&reason);
            socket.abort();
            relayed.changed = true;
            return relayed;
        }
        if let (Some(terminator), Some(upstream)) =
            (self.terminator.as_mut(), self.upstream.as_mut())
        {
            // The terminator holds bytes of its own either way: let it try both.
            let _ = terminator.flush(upstream);
            self.readable = true;
            self.writable = true;
        }
        let moved =
            self.pump_to_host(socket, &mut relayed) && self.pump_to_jail(socket, &mut relayed);
        if let Some(terminator) = self.terminator.as_mut() {
            for report in terminator.reports.drain(..) {
                if !self.reports.contains(&report) {
                    self.reports.push(report);
                }
            }
            if let Some(reason) = terminator.refusal.take() {
                self.refused = true;
                self.cut(&reason);
                socket.abort();
                relayed.changed = true;
                return relayed;
            }
        }
        if !moved {
            return self.fail(socket, relayed);
        }
        if let Some(terminator) = self.terminator.as_ref() {
            // A head held across calls counts from when it began; a head passed since
            // (the count moved) starts the clock again.
            self.inner_head_since = match (terminator.holding_head(), self.inner_head_since) {
                (false, _) => None,
                (true, Some((since, heads))) if heads == terminator.heads => Some((since, heads)),
                (true, _) => Some((now, terminator.heads)),
            };
        }
        relayed
    }

    /// When the head brig holds must be whole, if it holds one (on the connection, or
    /// inside the TLS it decrypted).
    pub fn head_deadline(&self) -> Option<Instant> {
        let inner = self.inner_head_since.map(|(since, _)| since);
        match (self.head_since, inner) {
            (Some(outer), Some(inner)) => Some(outer.min(inner) + HEAD_TIME),
            (since, None) | (None, since) => since.map(|since| since + HEAD_TIME),
        }
    }

    /// Reads what the jail sent into `held` and moves what the inspector judges fine to
    /// `pending`; Err: why the connection is refused.
    fn inspect(
        &mut self,
        socket: &mut tcp::Socket,
        policy: &Policy,
        now: Instant,
    ) -> Result<(), String> {
        if self.inspector.unread() && self.held.is_empty() {
            return Ok(());
        }
        let (name, target) = (self.name.as_deref(), self.target);
        let mut claimed = None;
        let mut tls_name = None;
        // The Host of the HTTP head the last step judged, for the placeholder check.
        let head_host = std::cell::RefCell::new(None::<String>);
        let mut judge = |claim: inspect::Claim| {
            let verdict = decide::claim(policy, name, target, claim);
            if verdict.is_ok() {
                claimed = claim.name().map(str::to_string);
                if let inspect::Claim::HttpHost(host) = claim {
                    *head_host.borrow_mut() = Some(host.to_string());
                }
                if let inspect::Claim::Tls {
                    sni: Some(sni),
                    ech: false,
                } = claim
                {
                    tls_name = Some(sni.to_string());
                }
            }
            verdict
        };
        let outcome = loop {
            while socket.can_recv()
                && self.held.len() < HEAD_LIMIT
                && self.pending.len() < HEAD_LIMIT
            {
                let room = HEAD_LIMIT - self.held.len();
                let held = &mut self.held;
                let _ = socket.recv(|data| {
                    let take = data.len().min(room);
                    held.extend_from_slice(&data[..take]);
                    (take, ())
                });
            }
            let finished = jail_finished_sending(socket) && !socket.can_recv();
            match self.inspector.step(&self.held, finished, &mut judge) {
                Step::Wait => {
                    if self.inspector.in_head() && !self.held.is_empty() {
                        self.head_since.get_or_insert(now);
                    }
                    break Ok(());
                }
                Step::Pass(count) => {
                    if let (Some(host), Some(secrets)) =
                        (head_host.borrow_mut().take(), policy.secrets.as_ref())
                        && let Err(reason) = placeholders_in_clear(
                            secrets,
                            &self.held[..count],
                            &host,
                            &mut self.reports,
                        )
                    {
                        break Err(reason);
                    }
                    self.pending.extend(self.held.drain(..count));
                    if count > 0 {
                        self.head_since = None;
                    }
                    if self.pending.len() >= HEAD_LIMIT {
                        break Ok(());
                    }
                }
                Step::Unread => {
                    self.pending.append(&mut self.held);
                    self.head_since = None;
                    break Ok(());
                }
                Step::AwaitReply => break Ok(()),
                Step::Refuse(reason) => break Err(reason),
            }
        };
        if let Some(claimed) = claimed {
            self.claimed = Some(claimed);
        }
        outcome?;
        // A name entitled to a secret: the ClientHello (held in `pending`) goes to a
        // terminator instead of the host.
        if let (Some(sni), Some(secrets)) = (tls_name, policy.secrets.as_ref())
            && self.terminator.is_none()
            && secrets.terminates(&sni.to_ascii_lowercase(), target.port)
        {
            let terminator = Terminator::new(
                std::sync::Arc::clone(secrets),
                &sni.to_ascii_lowercase(),
                target.port,
            )?;
            self.terminator = Some(Box::new(terminator));
        }
        Ok(())
    }

    /// The host side failed (reset, error): reset the jail's side too.
    fn fail(&mut self, socket: &mut tcp::Socket, mut relayed: Relayed) -> Relayed {
        self.upstream = None;
        socket.abort();
        relayed.changed = true;
        relayed
    }

    /// The jail's bytes to the host. False when the host side failed.
    fn pump_to_host(&mut self, socket: &mut tcp::Socket, relayed: &mut Relayed) -> bool {
        let Some(upstream) = self.upstream.as_mut() else {
            return false;
        };
        let upstream = &mut Through {
            upstream,
            terminator: self.terminator.as_deref_mut(),
        };
        while self.writable && !self.pending.is_empty() {
            match upstream.write(&self.pending) {
                Ok(written) => {
                    self.pending.drain(..written);
                    self.sent += written as u64;
                    relayed.bytes += written as u64;
                }
                Err(err) if err.kind() == io::ErrorKind::WouldBlock => self.writable = false,
                Err(err) if err.kind() == io::ErrorKind::Interrupted => {}
                Err(_) => return false,
            }
        }
        // Once everything is relayed unread, straight from smoltcp's buffer to the host.
        while self.writable
            && self.pending.is_empty()
            && self.held.is_empty()
            && self.inspector.unread()
            && socket.can_recv()
        {
            let written = socket.recv(|data| match upstream.write(data) {
                Ok(written) => (written, Ok(written)),
                Err(err) => (0, Err(err)),
            });
            match written {
                Ok(Ok(written)) => {
                    self.sent += written as u64;
                    relayed.bytes += written as u64;
                }
                Ok(Err(err)) if err.kind() == io::ErrorKind::WouldBlock => self.writable = false,
                Ok(Err(err)) if err.kind() == io::ErrorKind::Interrupted => {}
                Ok(Err(_)) | Err(_) => return false,
            }
        }
        // The jail closed its sending side and all of it reached the host: pass the FIN on.
        if !self.host_shut
            && self.pending.is_empty()
            && self.held.is_empty()
            && !socket.can_recv()
            && jail_finished_sending(socket)
        {
            upstream.shutdown_write();
            self.host_shut = true;
            relayed.changed = true;
        }
        true
    }

    /// The host's bytes to the jail. False when the host side failed.
    fn pump_to_jail(&mut self, socket: &mut tcp::Socket, relayed: &mut Relayed) -> bool {
        let Some(upstream) = self.upstream.as_mut() else {
            return false;
        };
        let upstream = &mut Through {
            upstream,
            terminator: self.terminator.as_deref_mut(),
        };
        let inspector = &mut self.inspector;
        while self.readable && !self.host_finished && socket.can_send() {
            let read = socket.send(|space| match upstream.read(space) {
                Ok(0) => (0, HostRead::Finished),
                Ok(count) => {
                    // The reply to a WebSocket upgrade says whether what follows is HTTP.
                    if inspector.awaiting_reply() {
                        inspector.replied(&space[..count]);
                    }
                    (count, HostRead::Data(count))
                }
                Err(err) if err.kind() == io::ErrorKind::WouldBlock => (0, HostRead::Blocked),
                Err(err) if err.kind() == io::ErrorKind::Interrupted => (0, HostRead::Data(0)),
                Err(_) => (0, HostRead::Failed),
            });
            match read {
                Ok(HostRead::Data(count)) => {
                    self.received += count as u64;
                    relayed.bytes += count as u64;
                }
                Ok(HostRead::Blocked) => self.readable = false,
                Ok(HostRead::Finished) => {
                    // FIN to the jail once smoltcp has sent everything before it.
                    self.host_finished = true;
                    socket.close();
                    relayed.changed = true;
                }
                Ok(HostRead::Failed) | Err(_) => return false,
            }
        }
        true
    }
}

/// A cleartext request head to `host` that holds a secret's placeholder: brig never puts
/// a value in cleartext, so it goes on unchanged and is reported; Err with
/// `--secret-strict`.
fn placeholders_in_clear(
    secrets: &Secrets,
    head: &[u8],
    host: &str,
    reports: &mut Vec<String>,
) -> Result<(), String> {
    for secret in secrets.sent_in(head) {
        let report = not_entitled(secret, host);
        if secrets.strict {
            return Err(format!("{report} (--secret-strict)"));
        }
        if !reports.contains(&report) {
            reports.push(report);
        }
    }
    Ok(())
}

/// The host side as the pumps see it: the host socket itself, or the terminator in front
/// of it (TLS bytes in from the jail, TLS bytes out to it).
struct Through<'a, U> {
    upstream: &'a mut U,
    terminator: Option<&'a mut Terminator>,
}

impl<U: Upstream> Read for Through<'_, U> {
    fn read(&mut self, space: &mut [u8]) -> io::Result<usize> {
        match self.terminator.as_deref_mut() {
            Some(terminator) => terminator.give_to_jail(space, self.upstream),
            None => self.upstream.read(space),
        }
    }
}

impl<U: Upstream> Write for Through<'_, U> {
    fn write(&mut self, data: &[u8]) -> io::Result<usize> {
        match self.terminator.as_deref_mut() {
            Some(terminator) => terminator.take_from_jail(data, self.upstream),
            None => self.upstream.write(data),
        }
    }

    fn flush(&mut self) -> io::Result<()> {
        self.upstream.flush()
    }
}

impl<U: Upstream> Through<'_, U> {
    fn shutdown_write(&mut self) {
        self.upstream.shutdown_write();
    }
}

/// The jail sent its FIN: nothing more will come from it.
fn jail_finished_sending(socket: &tcp::Socket) -> bool {
    matches!(
        socket.state(),
        tcp::State::CloseWait
            | tcp::State::LastAck
            | tcp::State::Closing
            | tcp::State::TimeWait
            | tcp::State::Closed
    )
}
