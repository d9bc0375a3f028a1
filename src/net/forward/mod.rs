//! The parent half of `--net filtered`, on a thread of brig's supervisor, which stays in
//! the host's network namespace. It reads the jail's packets from the TUN descriptor and
//! looks at each before smoltcp does: a TCP SYN opens a flow only when the policy allows
//! its destination; brig then resolves the name on the host, checks the address, connects,
//! and only then lets smoltcp complete the jail's handshake (a refusal is smoltcp's RST:
//! ECONNREFUSED in the program). DNS to brig's resolver is answered here; every other
//! packet is dropped and recorded. An open flow relays bytes between its smoltcp socket
//! and its host socket, after checking the name its first bytes claim (TLS SNI, HTTP Host).

mod device;
mod flow;

use super::policy::Policy;
use super::record::{Connection, NetworkRecord, Recorder};
use super::resolve::HostResolver;
use super::{
    GATEWAY, GATEWAY_V6, JAIL_PREFIX, JAIL_PREFIX_V6, RESOLVER, SYNTHETIC_NET, SYNTHETIC_PREFIX,
    dns,
};
use device::Queues;
use flow::{Flow, Phase};
use mio::net::TcpStream;
use mio::unix::SourceFd;
use mio::{Events, Interest, Poll, Token, Waker};
use smoltcp::iface::{Config, Interface, SocketHandle, SocketSet};
use smoltcp::socket::{tcp, udp};
use smoltcp::time::Instant as SmolInstant;
use smoltcp::wire::{
    HardwareAddress, IpAddress, IpCidr, IpEndpoint, IpProtocol, Ipv4Packet, Ipv6Packet, TcpPacket,
    UdpPacket,
};
use std::collections::HashMap;
use std::io;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::os::fd::{AsRawFd, OwnedFd};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, mpsc};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

const TUN: Token = Token(0);
const WAKE: Token = Token(1);
/// Flow `id` is registered with mio as `Token(FIRST_FLOW + id)`.
const FIRST_FLOW: usize = 2;
/// How long brig tries to reach a destination before refusing the jail's connection.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);
/// DNS queries brig's resolver holds at once (each up to 512 bytes, plus EDNS's 1232).
const DNS_QUEUE: usize = 16;

/// The forwarding thread of one jail.
pub struct Forwarder {
    thread: JoinHandle<NetworkRecord>,
    stop: Arc<AtomicBool>,
    waker: Arc<Waker>,
}

impl Forwarder {
    /// Starts relaying for the jail whose TUN device is `tun`, under `policy`.
    pub fn start(tun: OwnedFd, policy: &Policy) -> io::Result<Forwarder> {
        let poll = Poll::new()?;
        let waker = Arc::new(Waker::new(poll.registry(), WAKE)?);
        let stop = Arc::new(AtomicBool::new(false));
        let mut stack = Stack::new(poll, tun, policy.clone(), Arc::clone(&waker))?;
        let thread = std::thread::Builder::new().name("brig-net".into()).spawn({
            let stop = Arc::clone(&stop);
            move || stack.run(&stop)
        })?;
        Ok(Forwarder {
            thread,
            stop,
            waker,
        })
    }

    /// Stops relaying (closing every connection still open) and returns the record. A
    /// host-side lookup still under way is not waited for: its thread ends on its own
    /// within the resolver's timeout, and its answer is dropped.
    pub fn finish(self) -> NetworkRecord {
        self.stop.store(true, Ordering::SeqCst);
        let _ = self.waker.wake();
        self.thread.join().unwrap_or_default()
    }
}

/// The answer of a host-side lookup, from a resolver thread.
struct Resolved {
    name: String,
    addresses: Result<Vec<IpAddr>, String>,
}

struct Stack {
    poll: Poll,
    tun: OwnedFd,
    device: Queues,
    iface: Interface,
    sockets: SocketSet<'static>,
    dns: SocketHandle,
    policy: Policy,
    names: Names,
    flows: HashMap<usize, Flow>,
    /// (the jail's end, the destination it asked for) → flow id.
    by_tuple: HashMap<(IpEndpoint, IpEndpoint), usize>,
    next_id: usize,
    resolver: Arc<HostResolver>,
    waker: Arc<Waker>,
    resolved_tx: mpsc::Sender<Resolved>,
    resolved_rx: mpsc::Receiver<Resolved>,
    /// Lookups under way: name → the flows waiting for it.
    waiting: HashMap<String, Vec<usize>>,
    cache: HashMap<String, Vec<IpAddr>>,
    recorder: Recorder,
    /// Payload bytes relayed, both ways, for `--net-bytes`.
    relayed: u64,
}

impl Stack {
    fn new(poll: Poll, tun: OwnedFd, policy: Policy, waker: Arc<Waker>) -> io::Result<Stack> {
        poll.registry()
            .register(&mut SourceFd(&tun.as_raw_fd()), TUN, Interest::READABLE)?;
        let mut device = Queues::default();
        let mut config = Config::new(HardwareAddress::Ip);
        config.random_seed = random_seed();
        let mut iface = Interface::new(config, &mut device, SmolInstant::now());
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
        let (resolved_tx, resolved_rx) = mpsc::channel();
        Ok(Stack {
            poll,
            tun,
            device,
            iface,
            sockets,
            dns,
            names: Names::new(&policy),
            policy,
            flows: HashMap::new(),
            by_tuple: HashMap::new(),
            next_id: 0,
            resolver: Arc::new(HostResolver::from_system()),
            waker,
            resolved_tx,
            resolved_rx,
            waiting: HashMap::new(),
            cache: HashMap::new(),
            recorder: Recorder::default(),
            relayed: 0,
        })
    }

    fn run(&mut self, stop: &AtomicBool) -> NetworkRecord {
        let mut events = Events::with_capacity(256);
        while !stop.load(Ordering::SeqCst) {
            let timeout = self.next_timeout();
            if let Err(err) = self.poll.poll(&mut events, timeout)
                && err.kind() != io::ErrorKind::Interrupted
            {
                break;
            }
            let mut tun_readable = false;
            for event in events.iter() {
                match event.token() {
                    TUN => tun_readable = true,
                    WAKE => {}
                    Token(token) => {
                        let id = token - FIRST_FLOW;
                        if let Some(flow) = self.flows.get_mut(&id) {
                            flow.readable |= event.is_readable() || event.is_read_closed();
                            flow.writable |= event.is_writable() || event.is_error();
                        }
                    }
                }
            }
            if tun_readable {
                self.read_jail_packets();
            }
            while let Ok(resolved) = self.resolved_rx.try_recv() {
                self.on_resolved(resolved);
            }
            self.check_connecting();
            self.exchange();
        }
        self.shut_down()
    }

    /// smoltcp's next timer or the next connect deadline, whichever is first.
    fn next_timeout(&mut self) -> Option<Duration> {
        let stack = self.iface.poll_delay(SmolInstant::now(), &self.sockets);
        let stack = stack.map(|delay| Duration::from_micros(delay.total_micros()));
        let now = Instant::now();
        let connect = self
            .flows
            .values()
            .filter_map(|flow| flow.deadline)
            .min()
            .map(|deadline| deadline.saturating_duration_since(now));
        [stack, connect].into_iter().flatten().min()
    }

    /// Reads every packet the jail has sent and sorts it: to smoltcp, or dropped.
    fn read_jail_packets(&mut self) {
        let mut buffer = vec![0u8; super::TUN_MTU as usize];
        loop {
            match nix::unistd::read(&self.tun, &mut buffer) {
                Ok(0) => return,
                Ok(length) => self.classify(buffer[..length].to_vec()),
                Err(nix::errno::Errno::EINTR) => continue,
                Err(_) => return,
            }
        }
    }

    fn classify(&mut self, packet: Vec<u8>) {
        let Some(header) = IpHeader::parse(&packet) else {
            return;
        };
        let destination = header.destination;
        match header.protocol {
            IpProtocol::Tcp => {
                let Ok(tcp) = TcpPacket::new_checked(&packet[header.payload..]) else {
                    return;
                };
                let jail = IpEndpoint::new(header.source.into(), tcp.src_port());
                let target = IpEndpoint::new(destination.into(), tcp.dst_port());
                let opening = tcp.syn() && !tcp.ack();
                match self.by_tuple.get(&(jail, target)) {
                    // A SYN sent again while brig still connects: the held one will do.
                    Some(id) if self.flows.get(id).is_some_and(|flow| flow.socket.is_none()) => {}
                    Some(_) => self.device.rx.push_back(packet),
                    None if opening => self.open(packet, jail, target),
                    // Not part of any flow: smoltcp answers with a reset.
                    None => self.device.rx.push_back(packet),
                }
            }
            IpProtocol::Udp => {
                let port = UdpPacket::new_checked(&packet[header.payload..])
                    .map(|udp| udp.dst_port())
                    .ok();
                if destination == IpAddr::V4(RESOLVER) && port == Some(53) {
                    self.device.rx.push_back(packet);
                } else {
                    self.recorder.dropped("udp", Some(destination), port);
                }
            }
            // The jail's kernel's own IPv6 chatter on the device (router solicitations,
            // MLD, neighbour discovery) is not the program's doing.
            IpProtocol::Icmpv6 if destination.is_multicast() => {}
            IpProtocol::Icmp | IpProtocol::Icmpv6 => {
                self.recorder.dropped("icmp", Some(destination), None)
            }
            other => self
                .recorder
                .dropped(&u8::from(other).to_string(), Some(destination), None),
        }
    }

    /// A new connection from the jail: refuse it at once, or hold its SYN while brig
    /// resolves and connects.
    fn open(&mut self, syn: Vec<u8>, jail: IpEndpoint, target: IpEndpoint) {
        let address = IpAddr::from(target.addr);
        let port = target.port;
        let synthetic = match address {
            IpAddr::V4(v4) if in_synthetic_range(v4) => Some(v4),
            _ => None,
        };
        let (name, refusal) = if let Some(synthetic) = synthetic {
            match self.names.name_of(synthetic) {
                None => (
                    None,
                    Some("an address brig's resolver never gave out".to_string()),
                ),
                Some(name) if self.policy.name_allowed(name, port) => {
                    (Some(name.to_string()), None)
                }
                Some(name) => (
                    Some(name.to_string()),
                    Some(format!("port {port} is not allowed for {name}")),
                ),
            }
        } else if self.policy.ip_allowed(address, port) {
            (None, None)
        } else {
            let why = super::policy::denied_range(address)
                .map(|range| format!("{range} address, not on the list"))
                .unwrap_or_else(|| "not on the list".into());
            (None, Some(why))
        };
        let refusal = refusal.or_else(|| self.over_limit());
        if let Some(reason) = refusal {
            let address = name.is_none().then_some(address);
            self.recorder.connection(Connection {
                name: name.as_deref(),
                port,
                address,
                refusal: Some(&reason),
                relayed: false,
                sent: 0,
                received: 0,
            });
            self.device.rx.push_back(syn);
            return;
        }
        let id = self.next_id;
        self.next_id += 1;
        self.by_tuple.insert((jail, target), id);
        let flow = Flow::new(jail, target, name.clone(), syn);
        self.flows.insert(id, flow);
        match name {
            Some(name) => self.resolve(id, name),
            None => self.connect(id, vec![address]),
        }
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
        if waiters.len() > 1 {
            return;
        }
        let (resolver, sender, waker) = (
            Arc::clone(&self.resolver),
            self.resolved_tx.clone(),
            Arc::clone(&self.waker),
        );
        let spawned = std::thread::Builder::new()
            .name("brig-resolve".into())
            .spawn(move || {
                let addresses = resolver.lookup(&name);
                let _ = sender.send(Resolved { name, addresses });
                let _ = waker.wake();
            });
        if spawned.is_err() {
            self.refuse(id, "brig could not start a lookup".into(), None);
        }
    }

    fn on_resolved(&mut self, resolved: Resolved) {
        let waiters = self.waiting.remove(&resolved.name).unwrap_or_default();
        match resolved.addresses {
            Ok(addresses) => {
                self.cache.insert(resolved.name.clone(), addresses.clone());
                for id in waiters {
                    self.connect_to_name(id, &resolved.name, addresses.clone());
                }
            }
            Err(reason) => {
                for id in waiters {
                    self.refuse(
                        id,
                        format!("{} does not resolve: {reason}", resolved.name),
                        None,
                    );
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
                    .address_refusal(*address, Some(name), port)
                    .is_none()
            });
        if usable.is_empty() {
            let first = denied.first().copied();
            let why = first
                .and_then(|address| self.policy.address_refusal(address, Some(name), port))
                .unwrap_or("denied");
            let reason = format!("{name} resolves to a {why} address");
            return self.refuse(id, reason, first);
        }
        self.connect(id, usable);
    }

    /// Starts a non-blocking connect to the first of `candidates`; the others are tried
    /// in turn if it fails.
    fn connect(&mut self, id: usize, mut candidates: Vec<IpAddr>) {
        let Some(flow) = self.flows.get_mut(&id) else {
            return;
        };
        candidates.reverse();
        let port = flow.target.port;
        let mut last_error = None;
        while let Some(address) = candidates.pop() {
            match TcpStream::connect(SocketAddr::new(address, port)) {
                Ok(mut stream) => {
                    let token = Token(FIRST_FLOW + id);
                    let interest = Interest::READABLE | Interest::WRITABLE;
                    if self
                        .poll
                        .registry()
                        .register(&mut stream, token, interest)
                        .is_err()
                    {
                        continue;
                    }
                    flow.address = Some(address);
                    flow.upstream = Some(stream);
                    flow.candidates = candidates;
                    flow.deadline = Some(Instant::now() + CONNECT_TIMEOUT);
                    flow.phase = Phase::Connecting;
                    return;
                }
                Err(err) => last_error = Some((address, err)),
            }
        }
        let (address, reason) = match last_error {
            Some((address, err)) => (Some(address), format!("connect failed: {err}")),
            None => (None, "nothing to connect to".into()),
        };
        self.refuse(id, reason, address);
    }

    /// Completes or fails pending connects.
    fn check_connecting(&mut self) {
        let now = Instant::now();
        let connecting: Vec<usize> = self
            .flows
            .iter()
            .filter(|(_, flow)| flow.phase == Phase::Connecting)
            .filter(|(_, flow)| flow.writable || flow.deadline.is_some_and(|at| now >= at))
            .map(|(id, _)| *id)
            .collect();
        for id in connecting {
            let Some(flow) = self.flows.get_mut(&id) else {
                continue;
            };
            let Some(stream) = flow.upstream.as_ref() else {
                continue;
            };
            let failure = match stream.take_error() {
                Ok(Some(err)) | Err(err) => Some(err.to_string()),
                Ok(None) => match stream.peer_addr() {
                    Ok(_) => None,
                    Err(_) if flow.deadline.is_some_and(|at| now < at) => continue,
                    Err(_) => Some("no answer in 10 s".to_string()),
                },
            };
            match failure {
                None => self.accept(id),
                Some(reason) => {
                    if let Some(mut stream) = flow.upstream.take() {
                        let _ = self.poll.registry().deregister(&mut stream);
                    }
                    flow.writable = false;
                    let remaining = std::mem::take(&mut flow.candidates);
                    let address = flow.address;
                    if remaining.is_empty() {
                        self.refuse(id, format!("connect failed: {reason}"), address);
                    } else {
                        self.connect(id, remaining);
                    }
                }
            }
        }
    }

    /// The host side is connected: give smoltcp a socket listening for the held SYN.
    fn accept(&mut self, id: usize) {
        let Some(flow) = self.flows.get_mut(&id) else {
            return;
        };
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
        flow.socket = Some(self.sockets.add(socket));
        flow.phase = Phase::Open;
        flow.deadline = None;
        if let Some(syn) = flow.syn.take() {
            self.device.rx.push_back(syn);
        }
    }

    /// Refuses a held connection: the jail gets smoltcp's reset for its SYN.
    fn refuse(&mut self, id: usize, reason: String, address: Option<IpAddr>) {
        let Some(mut flow) = self.flows.remove(&id) else {
            return;
        };
        self.by_tuple.remove(&(flow.jail, flow.target));
        if let Some(mut stream) = flow.upstream.take() {
            let _ = self.poll.registry().deregister(&mut stream);
        }
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

    /// Lets smoltcp take in what the jail sent, relays between the sockets, and sends
    /// the jail what smoltcp has for it, until nothing moves.
    fn exchange(&mut self) {
        for _ in 0..64 {
            self.iface
                .poll(SmolInstant::now(), &mut self.device, &mut self.sockets);
            self.remove_finished();
            let answered = self.answer_dns();
            let mut moved = false;
            let ids: Vec<usize> = self.flows.keys().copied().collect();
            for id in ids {
                moved |= self.relay(id);
            }
            self.iface
                .poll(SmolInstant::now(), &mut self.device, &mut self.sockets);
            let wrote = self.write_jail_packets();
            if !(moved || answered || wrote) && self.device.rx.is_empty() {
                break;
            }
        }
    }

    /// Writes what smoltcp emitted to the jail's TUN device; true if there was any.
    fn write_jail_packets(&mut self) -> bool {
        let any = !self.device.tx.is_empty();
        while let Some(packet) = self.device.tx.pop_front() {
            // A full device queue drops the packet; TCP sends it again.
            let _ = nix::unistd::write(&self.tun, &packet);
        }
        any
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
    fn relay(&mut self, id: usize) -> bool {
        let Some(flow) = self.flows.get_mut(&id) else {
            return false;
        };
        let Some(handle) = flow.socket else {
            return false;
        };
        let socket = self.sockets.get_mut::<tcp::Socket>(handle);
        let outcome = flow.relay(socket, &self.policy);
        self.relayed += outcome.bytes;
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
        if let Some(mut stream) = flow.upstream.take() {
            let _ = self.poll.registry().deregister(&mut stream);
        }
        if let Some(handle) = flow.socket.take() {
            self.sockets.remove(handle);
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

    /// The jail is gone or brig stops: close every connection and hand in the record.
    fn shut_down(&mut self) -> NetworkRecord {
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

/// What the forwarder needs of a packet's IP header.
struct IpHeader {
    source: IpAddr,
    destination: IpAddr,
    protocol: IpProtocol,
    /// Where the transport header starts.
    payload: usize,
}

impl IpHeader {
    fn parse(packet: &[u8]) -> Option<IpHeader> {
        match packet.first()? >> 4 {
            4 => {
                let ip = Ipv4Packet::new_checked(packet).ok()?;
                Some(IpHeader {
                    source: IpAddr::V4(ip.src_addr()),
                    destination: IpAddr::V4(ip.dst_addr()),
                    protocol: ip.next_header(),
                    payload: usize::from(ip.header_len()),
                })
            }
            6 => {
                let ip = Ipv6Packet::new_checked(packet).ok()?;
                Some(IpHeader {
                    source: IpAddr::V6(ip.src_addr()),
                    destination: IpAddr::V6(ip.dst_addr()),
                    protocol: ip.next_header(),
                    payload: ip.header_len(),
                })
            }
            _ => None,
        }
    }
}

fn in_synthetic_range(address: Ipv4Addr) -> bool {
    let mask = u32::MAX << (32 - SYNTHETIC_PREFIX);
    u32::from(address) & mask == u32::from(SYNTHETIC_NET) & mask
}

/// The synthetic addresses the jail's resolver gives out, and the names behind them.
struct Names {
    by_address: HashMap<Ipv4Addr, String>,
    by_name: HashMap<String, Ipv4Addr>,
    next: u32,
}

impl Names {
    fn new(policy: &Policy) -> Names {
        let mut names = Names {
            by_address: HashMap::new(),
            by_name: HashMap::new(),
            next: u32::from(SYNTHETIC_NET) + 1,
        };
        for (name, address) in policy.synthetic_hosts() {
            names.next = names.next.max(u32::from(address) + 1);
            names.by_address.insert(address, name.clone());
            names.by_name.insert(name, address);
        }
        names
    }

    fn name_of(&self, address: Ipv4Addr) -> Option<&str> {
        self.by_address.get(&address).map(String::as_str)
    }

    /// The name's synthetic address, given out now if it has none yet; None once the
    /// range is used up.
    fn address_for(&mut self, name: &str) -> Option<Ipv4Addr> {
        if let Some(address) = self.by_name.get(name) {
            return Some(*address);
        }
        let address = Ipv4Addr::from(self.next);
        if !in_synthetic_range(address) {
            return None;
        }
        self.next += 1;
        self.by_address.insert(address, name.to_string());
        self.by_name.insert(name.to_string(), address);
        Some(address)
    }
}

/// smoltcp picks its initial sequence numbers and ports from this seed.
fn random_seed() -> u64 {
    let mut seed = [0u8; 8];
    if std::fs::File::open("/dev/urandom")
        .and_then(|mut random| io::Read::read_exact(&mut random, &mut seed))
        .is_err()
    {
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap_or_default();
        return now.as_nanos() as u64 ^ u64::from(std::process::id());
    }
    u64::from_le_bytes(seed)
}
