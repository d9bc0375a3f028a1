//! The forwarder without its I/O (smoltcp's sans-IO style): packets from the jail go in
//! ([`Relay::receive`]), packets for the jail come out of [`Relay::exchange`], and what
//! needs the host (a lookup, a connect) comes out as a [`Request`] whose answer goes back
//! in ([`Relay::resolved`], [`Relay::connected`], [`Relay::connect_failed`]). The thread
//! that owns the TUN descriptor, the host sockets and the clock (`forward::Stack`) only
//! moves these; the unit tests drive the same relay with packets they build.

use super::super::inspect::Expect;
use super::super::policy::Policy;
use super::super::record::{Connection, NetworkRecord, Recorder};
use super::super::{GATEWAY, GATEWAY_V6, JAIL_PREFIX, JAIL_PREFIX_V6, RESOLVER, dns};
use super::decide::{self, Names, Opening, Packet};
use super::device::Queues;
use super::flow::{self, Flow, Phase, Upstream};
use smoltcp::iface::{Config, Interface, SocketHandle, SocketSet};
use smoltcp::socket::{tcp, udp};
use smoltcp::time::{Duration, Instant};
use smoltcp::wire::{HardwareAddress, IpAddress, IpCidr, IpEndpoint};
use std::collections::{HashMap, VecDeque};
use std::io;
use std::net::{IpAddr, SocketAddr};

/// DNS queries brig's resolver holds at once (each up to 512 bytes, plus EDNS's 1232).
pub const DNS_QUEUE: usize = 16;

/// What the relay needs done on the host.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Request {
    /// Look the allowed `name` up; answer with [`Relay::resolved`].
    Resolve(String),
    /// Connect to `address` for flow `flow`; answer with [`Relay::connected`] or
    /// [`Relay::connect_failed`].
    Connect { flow: usize, address: SocketAddr },
}

pub struct Relay<U> {
    device: Queues,
    iface: Interface,
    sockets: SocketSet<'static>,
    dns: SocketHandle,
    policy: Policy,
    names: Names,
    flows: HashMap<usize, Flow<U>>,
    /// (the jail's end, the destination it asked for) → flow id.
    by_tuple: HashMap<(IpEndpoint, IpEndpoint), usize>,
    next_id: usize,
    /// Lookups under way: name → the flows waiting for it.
    waiting: HashMap<String, Vec<usize>>,
    cache: HashMap<String, Vec<IpAddr>>,
    requests: VecDeque<Request>,
    recorder: Recorder,
    /// Payload bytes relayed, both ways, for `--net-bytes`.
    relayed: u64,
    /// ... and each way: out (the jail sent), in (the jail received).
    sent: u64,
    received: u64,
    /// Every address of every interface of the host, as last read: a name resolving to
    /// one is refused like loopback (services listening on 0.0.0.0 answer there).
    host_addresses: Vec<IpAddr>,
}

impl<U: Upstream> Relay<U> {
    /// smoltcp picks its initial sequence numbers and ports from `seed`.
    pub fn new(policy: Policy, seed: u64, now: Instant) -> io::Result<Relay<U>> {
        let mut device = Queues::default();
        let mut config = Config::new(HardwareAddress::Ip);
        config.random_seed = seed;
        let mut iface = Interface::new(config, &mut device, now);
        iface.update_ip_addrs(|addresses| {
            for address in [GATEWAY, RESOLVER] {
                let _ = addresses.push(IpCidr::new(IpAddress::Ipv4(address), JAIL_PREFIX));
            }
            let _ = addresses.push(IpCidr::new(IpAddress::Ipv6(GATEWAY_V6), JAIL_PREFIX_V6));
        });
        // Any destination is brig's to answer: smoltcp accepts packets for every address
        // routed through one of its own (see `Interface::set_any_ip`).
        iface
            .routes_mut()
            .add_default_ipv4_route(GATEWAY)
            .map_err(|_| io::Error::other("add smoltcp's default route"))?;
        iface
            .routes_mut()
            .add_default_ipv6_route(GATEWAY_V6)
            .map_err(|_| io::Error::other("add smoltcp's default IPv6 route"))?;
        iface.set_any_ip(true);
        let mut sockets = SocketSet::new(Vec::new());
        let mut resolver_socket = udp::Socket::new(
            udp::PacketBuffer::new(
                vec![udp::PacketMetadata::EMPTY; DNS_QUEUE],
                vec![0; DNS_QUEUE * 1500],
            ),
            udp::PacketBuffer::new(
                vec![udp::PacketMetadata::EMPTY; DNS_QUEUE],
                vec![0; DNS_QUEUE * 1500],
            ),
        );
        resolver_socket
            .bind((IpAddress::Ipv4(RESOLVER), 53))
            .map_err(|_| io::Error::other("bind brig's resolver"))?;
        let dns = sockets.add(resolver_socket);
        Ok(Relay {
            device,
            iface,
            sockets,
            dns,
            names: Names::new(&policy),
            policy,
            flows: HashMap::new(),
            by_tuple: HashMap::new(),
            next_id: 0,
            waiting: HashMap::new(),
            cache: HashMap::new(),
            requests: VecDeque::new(),
            recorder: Recorder::default(),
            relayed: 0,
            sent: 0,
            received: 0,
            host_addresses: Vec::new(),
        })
    }

    /// The host's own addresses, read at start and again whenever they change.
    pub fn set_host_addresses(&mut self, addresses: Vec<IpAddr>) {
        self.host_addresses = addresses;
    }

    /// The next thing to do on the host, if any.
    pub fn next_request(&mut self) -> Option<Request> {
        self.requests.pop_front()
    }

    /// How long until smoltcp's next timer (retransmission, delayed ACK) or the next
    /// deadline of a head brig holds, if there is one.
    pub fn poll_delay(&mut self, now: Instant) -> Option<Duration> {
        let heads = self
            .flows
            .values()
            .filter_map(Flow::head_deadline)
            .min()
            .map(|deadline| {
                if deadline > now {
                    deadline - now
                } else {
                    Duration::ZERO
                }
            });
        [self.iface.poll_delay(now, &self.sockets), heads]
            .into_iter()
            .flatten()
            .min()
    }

    /// Flows brig holds (resolving, connecting or open).
    pub fn flows(&self) -> usize {
        self.flows.len()
    }

    /// Sorts one packet the jail sent: to smoltcp, held, or dropped.
    pub fn receive(&mut self, packet: Vec<u8>) {
        match decide::classify(&packet) {
            Packet::Malformed | Packet::Chatter => {}
            Packet::Fragment { destination } => {
                self.recorder.dropped("fragment", Some(destination), None)
            }
            Packet::Tcp {
                jail,
                target,
                opening,
            } => match self.by_tuple.get(&(jail, target)) {
                // A SYN sent again while brig still connects: the held one will do.
                Some(id) if self.flows.get(id).is_some_and(|flow| flow.socket.is_none()) => {}
                Some(_) => self.device.rx.push_back(packet),
                None if opening => self.open(packet, jail, target),
                // Not part of any flow: smoltcp answers with a reset.
                None => self.device.rx.push_back(packet),
            },
            Packet::Dns => self.device.rx.push_back(packet),
            Packet::Udp { destination, port } => {
                self.recorder.dropped("udp", Some(destination), port)
            }
            Packet::Icmp { destination } => self.recorder.dropped("icmp", Some(destination), None),
            Packet::Other {
                protocol,
                destination,
            } => self
                .recorder
                .dropped(&protocol.to_string(), Some(destination), None),
        }
    }

    /// A new connection from the jail: refuse it at once, or hold its SYN while brig
    /// resolves and connects.
    fn open(&mut self, syn: Vec<u8>, jail: IpEndpoint, target: IpEndpoint) {
        let opening = match decide::open(&self.policy, &self.names, target, &self.host_addresses) {
            refused @ Opening::Refuse { .. } => refused,
            allowed => match self.over_limit() {
                Some(reason) => Opening::Refuse {
                    name: match allowed {
                        Opening::Resolve(name) => Some(name),
                        _ => None,
                    },
                    reason,
                },
                None => allowed,
            },
        };
        let name = match opening {
            Opening::Refuse { name, reason } => {
                let address = name.is_none().then_some(IpAddr::from(target.addr));
                self.recorder.connection(Connection {
                    name: name.as_deref(),
                    port: target.port,
                    address,
                    refusal: Some(&reason),
                    relayed: false,
                    sent: 0,
                    received: 0,
                });
                self.device.rx.push_back(syn);
                return;
            }
            Opening::Resolve(ref name) => Some(name.clone()),
            Opening::Connect(_) => None,
        };
        let id = self.next_id;
        self.next_id += 1;
        self.by_tuple.insert((jail, target), id);
        let expect = decide::expect(
            &self.policy,
            name.as_deref(),
            IpAddr::from(target.addr),
            target.port,
        );
        self.flows
            .insert(id, Flow::new(jail, target, name, syn, expect));
        match opening {
            Opening::Resolve(name) => self.resolve(id, name),
            Opening::Connect(address) => self.connect(id, vec![address]),
            Opening::Refuse { .. } => {}
        }
    }

    /// Takes `policy` in place of the one the relay has (a session's `session_network`):
    /// new connections and lookups are judged by it from now on, and every flow brig holds
    /// is judged again as if it were opening now. Those it refuses are ended: an open one
    /// is reset on both sides (the program sees ECONNRESET), a held one gets its SYN reset
    /// (ECONNREFUSED); those it allows go on untouched. Synthetic addresses already given
    /// out keep their names (a name allowed again reaches the same address). The number
    /// of flows ended.
    pub fn replace_policy(&mut self, policy: Policy) -> usize {
        self.policy = policy;
        let refused: Vec<(usize, String)> = self
            .flows
            .iter()
            .filter_map(|(id, flow)| {
                decide::still_allowed(
                    &self.policy,
                    flow.name.as_deref(),
                    flow.claimed.as_deref(),
                    flow.address,
                    flow.target.port,
                    &self.host_addresses,
                )
                .and_then(|()| {
                    // A flow relayed unread under a tcp:// rule the new policy lacks.
                    let raw_now = decide::expect(
                        &self.policy,
                        flow.name.as_deref(),
                        IpAddr::from(flow.target.addr),
                        flow.target.port,
                    ) == Expect::Raw;
                    match flow.expect == Expect::Raw && !raw_now {
                        true => Err(format!(
                            "no tcp:// rule allows raw TCP to port {} any more",
                            flow.target.port
                        )),
                        false => Ok(()),
                    }
                })
                .err()
                .map(|why| (*id, why))
            })
            .collect();
        let ended = refused.len();
        for (id, why) in refused {
            let reason = format!("the session's network policy changed: {why}");
            let open = self.flows.get(&id).and_then(|flow| flow.socket);
            match open {
                Some(handle) => {
                    if let Some(flow) = self.flows.get_mut(&id) {
                        flow.cut(&reason);
                    }
                    self.sockets.get_mut::<tcp::Socket>(handle).abort();
                }
                None => self.refuse(id, reason, None),
            }
        }
        ended
    }

    /// Refuses a new connection when a cap is reached, and records which.
    fn over_limit(&mut self) -> Option<String> {
        if self.policy.max_bytes.is_some_and(|cap| self.relayed >= cap) {
            self.recorder.limit_reached = Some("net-bytes");
            return Some("--net-bytes reached".into());
        }
        if self.flows.len() >= self.policy.max_connections as usize {
            self.recorder.limit_reached = Some("net-connections");
            return Some("--net-connections reached".into());
        }
        None
    }

    fn resolve(&mut self, id: usize, name: String) {
        if let Some(pinned) = self.policy.pinned(&name) {
            return self.connect_to_name(id, &name, vec![pinned]);
        }
        if let Some(addresses) = self.cache.get(&name).cloned() {
            return self.connect_to_name(id, &name, addresses);
        }
        let waiters = self.waiting.entry(name.clone()).or_default();
        waiters.push(id);
        if waiters.len() == 1 {
            self.requests.push_back(Request::Resolve(name));
        }
    }

    /// The answer to [`Request::Resolve`].
    pub fn resolved(&mut self, name: &str, addresses: Result<Vec<IpAddr>, String>) {
        let waiters = self.waiting.remove(name).unwrap_or_default();
        match addresses {
            Ok(addresses) => {
                self.cache.insert(name.to_string(), addresses.clone());
                for id in waiters {
                    self.connect_to_name(id, name, addresses.clone());
                }
            }
            Err(reason) => {
                for id in waiters {
                    self.refuse(id, format!("{name} does not resolve: {reason}"), None);
                }
            }
        }
    }

    /// Connects to the addresses of an allowed name that are not in a denied range (an
    /// allowed name that resolves to 127.0.0.1 is still refused: DNS rebinding).
    fn connect_to_name(&mut self, id: usize, name: &str, addresses: Vec<IpAddr>) {
        let Some(port) = self.flows.get(&id).map(|flow| flow.target.port) else {
            return;
        };
        let (usable, denied): (Vec<IpAddr>, Vec<IpAddr>) =
            addresses.into_iter().partition(|address| {
                self.policy
                    .address_refusal(*address, Some(name), port, &self.host_addresses)
                    .is_none()
            });
        if usable.is_empty() {
            let first = denied.first().copied();
            let why = first
                .and_then(|address| {
                    self.policy
                        .address_refusal(address, Some(name), port, &self.host_addresses)
                })
                .unwrap_or("denied");
            let reason = format!("{name} resolves to a {why} address");
            return self.refuse(id, reason, first);
        }
        self.connect(id, usable);
    }

    /// Asks for a connect to the first of `candidates`; the others are tried in turn if
    /// it fails.
    fn connect(&mut self, id: usize, mut candidates: Vec<IpAddr>) {
        let Some(flow) = self.flows.get_mut(&id) else {
            return;
        };
        if candidates.is_empty() {
            return self.refuse(id, "nothing to connect to".into(), None);
        }
        let address = candidates.remove(0);
        flow.address = Some(address);
        flow.candidates = candidates;
        flow.phase = Phase::Connecting;
        self.requests.push_back(Request::Connect {
            flow: id,
            address: SocketAddr::new(address, flow.target.port),
        });
    }

    /// A [`Request::Connect`] failed: try the next address, or refuse the connection.
    pub fn connect_failed(&mut self, id: usize, reason: &str) {
        let Some(flow) = self.flows.get_mut(&id) else {
            return;
        };
        if flow.phase != Phase::Connecting {
            return;
        }
        let remaining = std::mem::take(&mut flow.candidates);
        let address = flow.address;
        if remaining.is_empty() {
            self.refuse(id, format!("connect failed: {reason}"), address);
        } else {
            self.connect(id, remaining);
        }
    }

    /// A [`Request::Connect`] succeeded: give smoltcp a socket listening for the held
    /// SYN. `readable`: the host already sent something (mio's edge was seen).
    pub fn connected(&mut self, id: usize, upstream: U, readable: bool) {
        let Some(flow) = self.flows.get_mut(&id) else {
            return;
        };
        if flow.phase != Phase::Connecting {
            return;
        }
        let mut socket = tcp::Socket::new(
            tcp::SocketBuffer::new(vec![0; flow::JAIL_TO_HOST_BUFFER]),
            tcp::SocketBuffer::new(vec![0; flow::HOST_TO_JAIL_BUFFER]),
        );
        socket.set_nagle_enabled(false);
        socket.set_ack_delay(None);
        if socket.listen(flow.target).is_err() {
            let address = flow.address;
            return self.refuse(id, "brig could not take the connection".into(), address);
        }
        flow.upstream = Some(upstream);
        flow.readable = readable;
        flow.writable = true;
        flow.socket = Some(self.sockets.add(socket));
        flow.phase = Phase::Open;
        if let Some(syn) = flow.syn.take() {
            self.device.rx.push_back(syn);
        }
    }

    /// The host socket of flow `id` became readable or writable (mio's edges).
    pub fn ready(&mut self, id: usize, readable: bool, writable: bool) {
        if let Some(flow) = self.flows.get_mut(&id) {
            flow.readable |= readable;
            flow.writable |= writable;
        }
    }

    /// Refuses a held connection: the jail gets smoltcp's reset for its SYN.
    fn refuse(&mut self, id: usize, reason: String, address: Option<IpAddr>) {
        let Some(mut flow) = self.flows.remove(&id) else {
            return;
        };
        self.by_tuple.remove(&(flow.jail, flow.target));
        self.recorder.connection(Connection {
            name: flow.name.as_deref(),
            port: flow.target.port,
            address: address.or(flow.address),
            refusal: Some(&reason),
            relayed: false,
            sent: 0,
            received: 0,
        });
        if let Some(syn) = flow.syn.take() {
            self.device.rx.push_back(syn);
        }
    }

    /// Lets smoltcp take in what the jail sent, relays between the sockets, and hands
    /// `to_jail` what smoltcp has for the jail, until nothing moves.
    pub fn exchange(&mut self, now: Instant, to_jail: &mut impl FnMut(&[u8])) {
        for _ in 0..64 {
            self.iface.poll(now, &mut self.device, &mut self.sockets);
            self.remove_finished();
            let answered = self.answer_dns();
            let mut moved = false;
            let ids: Vec<usize> = self.flows.keys().copied().collect();
            for id in ids {
                moved |= self.relay(id, now);
            }
            self.iface.poll(now, &mut self.device, &mut self.sockets);
            let wrote = !self.device.tx.is_empty();
            while let Some(packet) = self.device.tx.pop_front() {
                to_jail(&packet);
            }
            if !(moved || answered || wrote) && self.device.rx.is_empty() {
                break;
            }
        }
    }

    fn answer_dns(&mut self) -> bool {
        let mut answered = false;
        let mut query = [0u8; 1500];
        loop {
            let socket = self.sockets.get_mut::<udp::Socket>(self.dns);
            let Ok((length, meta)) = socket.recv_slice(&mut query) else {
                break;
            };
            let (policy, names, recorder) = (&self.policy, &mut self.names, &mut self.recorder);
            let reply = dns::reply(&query[..length], |name| {
                let answer = if policy.name_listed(name) {
                    names.address_for(name)
                } else {
                    None
                };
                recorder.lookup(name, answer.map(IpAddr::V4));
                answer
            });
            if let Some(reply) = reply {
                let socket = self.sockets.get_mut::<udp::Socket>(self.dns);
                let _ = socket.send_slice(&reply, meta.endpoint);
            }
            answered = true;
        }
        answered
    }

    /// Moves bytes both ways for one open flow; true if any moved.
    fn relay(&mut self, id: usize, now: Instant) -> bool {
        let Some(flow) = self.flows.get_mut(&id) else {
            return false;
        };
        let Some(handle) = flow.socket else {
            return false;
        };
        let socket = self.sockets.get_mut::<tcp::Socket>(handle);
        let before = (flow.sent, flow.received);
        let outcome = flow.relay(socket, &self.policy, now);
        self.relayed += outcome.bytes;
        self.sent += flow.sent - before.0;
        self.received += flow.received - before.1;
        if self.policy.max_bytes.is_some_and(|cap| self.relayed >= cap) {
            self.recorder.limit_reached = Some("net-bytes");
            for flow in self.flows.values_mut() {
                if let Some(handle) = flow.socket {
                    flow.cut("--net-bytes reached");
                    self.sockets.get_mut::<tcp::Socket>(handle).abort();
                }
            }
        }
        outcome.bytes > 0 || outcome.changed
    }

    /// Removes flows whose jail side is closed (after the poll that sent a reset, if any).
    fn remove_finished(&mut self) {
        let finished: Vec<usize> = self
            .flows
            .iter()
            .filter(|(_, flow)| {
                flow.socket.is_some_and(|handle| {
                    let socket = self.sockets.get::<tcp::Socket>(handle);
                    matches!(socket.state(), tcp::State::Closed | tcp::State::TimeWait)
                })
            })
            .map(|(id, _)| *id)
            .collect();
        for id in finished {
            self.finish_flow(id);
        }
    }

    fn finish_flow(&mut self, id: usize) {
        let Some(mut flow) = self.flows.remove(&id) else {
            return;
        };
        self.by_tuple.remove(&(flow.jail, flow.target));
        flow.upstream = None;
        if let Some(handle) = flow.socket.take() {
            self.sockets.remove(handle);
        }
        for report in &flow.reports {
            self.recorder.secret_placeholder(report);
        }
        self.recorder.connection(Connection {
            name: flow.claimed.as_deref().or(flow.name.as_deref()),
            port: flow.target.port,
            address: flow.address,
            refusal: flow.cut_reason.as_deref(),
            relayed: !flow.refused,
            sent: flow.sent,
            received: flow.received,
        });
    }

    /// Payload bytes relayed so far, over every connection: sent out, received.
    pub fn bytes_so_far(&self) -> (u64, u64) {
        (self.sent, self.received)
    }

    /// The jail is gone or brig stops: close every connection and hand in the record.
    pub fn finish(&mut self) -> NetworkRecord {
        let ids: Vec<usize> = self.flows.keys().copied().collect();
        for id in ids {
            match self.flows.get(&id).map(|flow| flow.socket.is_some()) {
                Some(true) => self.finish_flow(id),
                _ => self.refuse(id, "the jail ended first".into(), None),
            }
        }
        let recorder = std::mem::take(&mut self.recorder);
        recorder.finish(
            self.policy
                .rules
                .iter()
                .map(|rule| rule.text.clone())
                .collect(),
            self.policy
                .pins
                .iter()
                .map(|pin| format!("{}:{}", pin.name, pin.ip))
                .collect(),
        )
    }
}
