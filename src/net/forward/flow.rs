//! One connection from the jail: its smoltcp socket on the jail's side, its host socket on
//! the other, and the bytes between them. The jail's first bytes are held until they show
//! which name they claim (TLS SNI, HTTP Host): a name off the list ends the connection
//! before anything reaches the host (no domain fronting through an allowed address).

use super::super::policy::Policy;
use super::super::sniff::{self, SNIFF_LIMIT, Sniffed};
use smoltcp::iface::SocketHandle;
use smoltcp::socket::tcp;
use smoltcp::wire::IpEndpoint;
use std::io::{self, Read, Write};
use std::net::{IpAddr, Shutdown};
use std::os::unix::net::UnixStream;

/// What the jail sent and brig has not relayed yet: smoltcp's receive window.
pub const JAIL_TO_HOST_BUFFER: usize = 64 * 1024;
/// What the host sent and the jail has not acknowledged yet: smoltcp's send buffer, the
/// most brig has in flight towards the jail (large, for downloads).
pub const HOST_TO_JAIL_BUFFER: usize = 1024 * 1024;

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
    /// The jail's first bytes, held while they are judged; None once judged.
    sniffing: Option<Vec<u8>>,
    /// Judged bytes not yet written to the host.
    pending: Vec<u8>,
    host_finished: bool,
    host_shut: bool,
    pub sent: u64,
    pub received: u64,
    /// The name the first bytes claimed.
    pub claimed: Option<String>,
    /// Why brig ended the connection, if it did.
    pub cut_reason: Option<String>,
    /// Its first bytes named a host off the list: refused before a byte was relayed.
    pub refused: bool,
}

/// What one call of [`Flow::relay`] did.
#[derive(Default)]
pub struct Relayed {
    pub bytes: u64,
    /// A state change (a close, a cut) that smoltcp has to act on.
    pub changed: bool,
}

enum Judgement {
    Wait,
    Pass(Option<String>),
    Refuse(String),
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
            sniffing: Some(Vec::new()),
            pending: Vec::new(),
            host_finished: false,
            host_shut: false,
            sent: 0,
            received: 0,
            claimed: None,
            cut_reason: None,
            refused: false,
        }
    }

    /// Marks the connection as ended by brig, for the record.
    pub fn cut(&mut self, reason: &str) {
        self.cut_reason.get_or_insert_with(|| reason.to_string());
        self.upstream = None;
    }

    /// Relays what can move now, both ways.
    pub fn relay(&mut self, socket: &mut tcp::Socket, policy: &Policy) -> Relayed {
        let mut relayed = Relayed::default();
        if self.cut_reason.is_some() || self.upstream.is_none() {
            return relayed;
        }
        if self.sniffing.is_some() {
            match self.judge_first_bytes(socket, policy) {
                Judgement::Wait => {}
                Judgement::Pass(claimed) => {
                    self.claimed = claimed;
                    self.pending = self.sniffing.take().unwrap_or_default();
                }
                Judgement::Refuse(reason) => {
                    self.refused = true;
                    self.cut(&reason);
                    socket.abort();
                    relayed.changed = true;
                    return relayed;
                }
            }
        }
        if self.sniffing.is_none() && !self.pump_to_host(socket, &mut relayed) {
            return self.fail(socket, relayed);
        }
        if !self.pump_to_jail(socket, &mut relayed) {
            return self.fail(socket, relayed);
        }
        relayed
    }

    /// The host side failed (reset, error): reset the jail's side too.
    fn fail(&mut self, socket: &mut tcp::Socket, mut relayed: Relayed) -> Relayed {
        self.upstream = None;
        socket.abort();
        relayed.changed = true;
        relayed
    }

    fn judge_first_bytes(&mut self, socket: &mut tcp::Socket, policy: &Policy) -> Judgement {
        let Some(first) = self.sniffing.as_mut() else {
            return Judgement::Pass(None);
        };
        while socket.can_recv() && first.len() < SNIFF_LIMIT {
            let room = SNIFF_LIMIT - first.len();
            let _ = socket.recv(|data| {
                let take = data.len().min(room);
                first.extend_from_slice(&data[..take]);
                (take, ())
            });
        }
        let jail_done = jail_finished_sending(socket);
        let (kind, claimed) = match sniff::sniff(first) {
            Sniffed::NeedMore if first.len() < SNIFF_LIMIT && !jail_done => {
                return Judgement::Wait;
            }
            Sniffed::NeedMore | Sniffed::Opaque => return Judgement::Pass(None),
            Sniffed::Tls { sni } => ("TLS SNI", sni),
            Sniffed::Http { host } => ("HTTP Host", host),
        };
        let Some(claimed) = claimed else {
            return Judgement::Pass(None);
        };
        // A connection to an address rule: the operator allowed the address itself.
        let Some(name) = self.name.as_deref() else {
            return Judgement::Pass(Some(claimed));
        };
        let names_target = claimed.parse::<IpAddr>().ok() == Some(self.target.addr.into());
        if claimed == name || names_target || policy.name_allowed(&claimed, self.target.port) {
            Judgement::Pass(Some(claimed))
        } else {
            Judgement::Refuse(format!(
                "{kind} names {claimed}, which is not on the list (connection for {name})"
            ))
        }
    }

    /// The jail's bytes to the host. False when the host side failed.
    fn pump_to_host(&mut self, socket: &mut tcp::Socket, relayed: &mut Relayed) -> bool {
        let Some(upstream) = self.upstream.as_mut() else {
            return false;
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
        while self.writable && self.pending.is_empty() && socket.can_recv() {
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
        while self.readable && !self.host_finished && socket.can_send() {
            let read = socket.send(|space| match upstream.read(space) {
                Ok(0) => (0, HostRead::Finished),
                Ok(count) => (count, HostRead::Data(count)),
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
