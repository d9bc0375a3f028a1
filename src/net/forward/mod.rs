//! The parent half of `--net filtered`, on a thread of brig's supervisor, which stays in
//! the host's network namespace. It reads the jail's packets from the TUN descriptor and
//! looks at each before smoltcp does: a TCP SYN opens a flow only when the policy allows
//! its destination; brig then resolves the name on the host, checks the address, connects,
//! and only then lets smoltcp complete the jail's handshake (a refusal is smoltcp's RST:
//! ECONNREFUSED in the program). DNS to brig's resolver is answered here; every other
//! packet is dropped and recorded. An open flow relays bytes between its smoltcp socket
//! and its host socket, after checking the name its first bytes claim (TLS SNI, HTTP Host).
//!
//! The decisions are apart from the mechanism: `decide` sorts packets and judges new
//! connections (pure functions), `relay` is the whole forwarder without I/O (packets and
//! host answers in, packets and host requests out), and `Stack` here is the mechanism: the
//! TUN descriptor, mio, host sockets, lookup threads and the clock.

mod body;
mod decide;
mod device;
mod flow;
#[doc(hidden)]
pub mod fuzzing;
mod relay;
mod terminate;
#[cfg(test)]
mod tests;

use super::host::{self, AddressChanges};
use super::policy::Policy;
use super::record::NetworkRecord;
use super::resolve::HostResolver;
use mio::net::TcpStream;
use mio::unix::SourceFd;
use mio::{Events, Interest, Poll, Token, Waker};
use relay::{Relay, Request};
use smoltcp::time::Instant as SmolInstant;
use std::collections::HashMap;
use std::io;
use std::net::IpAddr;
use std::os::fd::{AsRawFd, OwnedFd};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, mpsc};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

const TUN: Token = Token(0);
const WAKE: Token = Token(1);
/// The kernel's notices of the host's addresses changing.
const ADDRESSES: Token = Token(2);
/// Flow `id` is registered with mio as `Token(FIRST_FLOW + id)`.
const FIRST_FLOW: usize = 3;
/// How long brig tries to reach a destination before refusing the jail's connection.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);

/// The forwarding thread of one jail.
pub struct Forwarder {
    thread: JoinHandle<NetworkRecord>,
    stop: Arc<AtomicBool>,
    waker: Arc<Waker>,
    /// New policies for the thread, each with where to say it took it.
    policies: mpsc::Sender<NewPolicy>,
    /// The payload bytes relayed so far, as the thread last published them.
    bytes: Arc<Bytes>,
}

/// Payload bytes the jail sent out and received, over every connection so far: stored by
/// the relay's thread after each round, read by the jail's owner at any time.
#[derive(Debug, Default)]
struct Bytes {
    sent: AtomicU64,
    received: AtomicU64,
}

/// A policy to take in place of the current one, and where to answer how many flows the
/// new one ended.
type NewPolicy = (Policy, mpsc::SyncSender<usize>);

/// How long [`Forwarder::replace_policy`] waits for the thread to take the new policy (it
/// does between two rounds of its loop; a round never blocks).
const POLICY_WAIT: Duration = Duration::from_secs(5);

impl Forwarder {
    /// Starts relaying for the jail whose TUN device is `tun`, under `policy`.
    pub fn start(tun: OwnedFd, policy: &Policy) -> io::Result<Forwarder> {
        let poll = Poll::new()?;
        let waker = Arc::new(Waker::new(poll.registry(), WAKE)?);
        let stop = Arc::new(AtomicBool::new(false));
        let (policies, new_policies) = mpsc::channel();
        let mut stack = Stack::new(poll, tun, policy.clone(), Arc::clone(&waker), new_policies)?;
        let bytes = Arc::new(Bytes::default());
        let thread = std::thread::Builder::new().name("brig-net".into()).spawn({
            let (stop, bytes) = (Arc::clone(&stop), Arc::clone(&bytes));
            move || stack.run(&stop, &bytes)
        })?;
        Ok(Forwarder {
            thread,
            stop,
            waker,
            policies,
            bytes,
        })
    }

    /// Payload bytes relayed so far: sent out, received (as of the thread's last round).
    pub fn bytes_so_far(&self) -> (u64, u64) {
        (
            self.bytes.sent.load(Ordering::Relaxed),
            self.bytes.received.load(Ordering::Relaxed),
        )
    }

    /// Replaces the policy the thread judges by: once this returns, every new connection
    /// and lookup is judged by `policy`, and the flows it would not allow are ended (see
    /// `Relay::replace_policy`). How many were ended.
    pub fn replace_policy(&self, policy: Policy) -> io::Result<usize> {
        let (done, taken) = mpsc::sync_channel(1);
        self.policies
            .send((policy, done))
            .map_err(|_| io::Error::other("the network relay has stopped"))?;
        self.waker.wake()?;
        taken.recv_timeout(POLICY_WAIT).map_err(|_| {
            io::Error::new(
                io::ErrorKind::TimedOut,
                "the network relay did not take the new policy within 5 s",
            )
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

/// A host connect under way, for the flow of the same id.
struct Connecting {
    stream: TcpStream,
    /// The connect gives up at this moment.
    deadline: Instant,
    /// mio's edge-triggered readiness, handed to the relay with the stream.
    readable: bool,
    writable: bool,
}

/// The forwarder's mechanism: moves packets between the TUN descriptor and the relay, and
/// carries out the relay's requests on the host.
struct Stack {
    poll: Poll,
    tun: OwnedFd,
    relay: Relay<TcpStream>,
    connecting: HashMap<usize, Connecting>,
    resolver: Arc<HostResolver>,
    waker: Arc<Waker>,
    resolved_tx: mpsc::Sender<Resolved>,
    resolved_rx: mpsc::Receiver<Resolved>,
    new_policies: mpsc::Receiver<NewPolicy>,
    address_changes: AddressChanges,
}

impl Stack {
    fn new(
        poll: Poll,
        tun: OwnedFd,
        policy: Policy,
        waker: Arc<Waker>,
        new_policies: mpsc::Receiver<NewPolicy>,
    ) -> io::Result<Stack> {
        poll.registry()
            .register(&mut SourceFd(&tun.as_raw_fd()), TUN, Interest::READABLE)?;
        let mut relay = Relay::new(policy, random_seed(), SmolInstant::now())?;
        // Subscribed before the first read, so that no change falls between the two.
        let address_changes = AddressChanges::open()?;
        poll.registry().register(
            &mut SourceFd(&address_changes.fd()),
            ADDRESSES,
            Interest::READABLE,
        )?;
        relay.set_host_addresses(host::addresses()?);
        let (resolved_tx, resolved_rx) = mpsc::channel();
        Ok(Stack {
            poll,
            tun,
            relay,
            connecting: HashMap::new(),
            resolver: Arc::new(HostResolver::from_system()),
            waker,
            resolved_tx,
            resolved_rx,
            new_policies,
            address_changes,
        })
    }

    fn run(&mut self, stop: &AtomicBool, bytes: &Bytes) -> NetworkRecord {
        let mut events = Events::with_capacity(256);
        while !stop.load(Ordering::SeqCst) {
            let timeout = self.next_timeout();
            if let Err(err) = self.poll.poll(&mut events, timeout)
                && err.kind() != io::ErrorKind::Interrupted
            {
                break;
            }
            // Before any packet of this round: what the jail sends after the new policy
            // was handed in is judged by it.
            while let Ok((policy, done)) = self.new_policies.try_recv() {
                let ended = self.relay.replace_policy(policy);
                let _ = done.try_send(ended);
            }
            let mut tun_readable = false;
            for event in events.iter() {
                match event.token() {
                    TUN => tun_readable = true,
                    WAKE => {}
                    ADDRESSES => {
                        // A failed read keeps the addresses known so far.
                        if self.address_changes.drain()
                            && let Ok(addresses) = host::addresses()
                        {
                            self.relay.set_host_addresses(addresses);
                        }
                    }
                    Token(token) => {
                        let id = token - FIRST_FLOW;
                        let readable = event.is_readable() || event.is_read_closed();
                        let writable = event.is_writable() || event.is_error();
                        match self.connecting.get_mut(&id) {
                            Some(connecting) => {
                                connecting.readable |= readable;
                                connecting.writable |= writable;
                            }
                            None => self.relay.ready(id, readable, writable),
                        }
                    }
                }
            }
            if tun_readable {
                self.read_jail_packets();
            }
            while let Ok(resolved) = self.resolved_rx.try_recv() {
                self.relay.resolved(&resolved.name, resolved.addresses);
            }
            self.serve_requests();
            self.check_connecting();
            self.serve_requests();
            let tun = &self.tun;
            self.relay.exchange(SmolInstant::now(), &mut |packet| {
                // A full device queue drops the packet; TCP sends it again.
                let _ = nix::unistd::write(tun, packet);
            });
            let (sent, received) = self.relay.bytes_so_far();
            bytes.sent.store(sent, Ordering::Relaxed);
            bytes.received.store(received, Ordering::Relaxed);
        }
        self.relay.finish()
    }

    /// smoltcp's next timer or the next connect deadline, whichever is first.
    fn next_timeout(&mut self) -> Option<Duration> {
        let stack = self.relay.poll_delay(SmolInstant::now());
        let stack = stack.map(|delay| Duration::from_micros(delay.total_micros()));
        let now = Instant::now();
        let connect = self
            .connecting
            .values()
            .map(|connecting| connecting.deadline)
            .min()
            .map(|deadline| deadline.saturating_duration_since(now));
        [stack, connect].into_iter().flatten().min()
    }

    /// Reads every packet the jail has sent and hands it to the relay.
    fn read_jail_packets(&mut self) {
        let mut buffer = vec![0u8; super::TUN_MTU as usize];
        loop {
            match nix::unistd::read(&self.tun, &mut buffer) {
                Ok(0) => return,
                Ok(length) => self.relay.receive(buffer[..length].to_vec()),
                Err(nix::errno::Errno::EINTR) => continue,
                Err(_) => return,
            }
        }
    }

    /// Carries out what the relay asked for: lookups on threads, non-blocking connects.
    fn serve_requests(&mut self) {
        while let Some(request) = self.relay.next_request() {
            match request {
                Request::Resolve(name) => self.resolve(name),
                Request::Connect { flow, address } => match self.connect(flow, address) {
                    Ok(connecting) => {
                        self.connecting.insert(flow, connecting);
                    }
                    Err(err) => self.relay.connect_failed(flow, &err.to_string()),
                },
            }
        }
    }

    fn resolve(&mut self, name: String) {
        let (resolver, sender, waker) = (
            Arc::clone(&self.resolver),
            self.resolved_tx.clone(),
            Arc::clone(&self.waker),
        );
        let asked = name.clone();
        let spawned = std::thread::Builder::new()
            .name("brig-resolve".into())
            .spawn(move || {
                let addresses = resolver.lookup(&name);
                let _ = sender.send(Resolved { name, addresses });
                let _ = waker.wake();
            });
        if spawned.is_err() {
            self.relay
                .resolved(&asked, Err("brig could not start a lookup".into()));
        }
    }

    fn connect(&mut self, flow: usize, address: std::net::SocketAddr) -> io::Result<Connecting> {
        let mut stream = TcpStream::connect(address)?;
        // brig forwards what the jail's stack already segmented: its own writes go out as
        // they come (with Nagle, a terminated connection's second small TLS record waited
        // for the server's delayed ACK, 40 ms a handshake).
        let _ = stream.set_nodelay(true);
        let interest = Interest::READABLE | Interest::WRITABLE;
        self.poll
            .registry()
            .register(&mut stream, Token(FIRST_FLOW + flow), interest)?;
        Ok(Connecting {
            stream,
            deadline: Instant::now() + CONNECT_TIMEOUT,
            readable: false,
            writable: false,
        })
    }

    /// Completes or fails pending connects.
    fn check_connecting(&mut self) {
        let now = Instant::now();
        let due: Vec<usize> = self
            .connecting
            .iter()
            .filter(|(_, connecting)| connecting.writable || now >= connecting.deadline)
            .map(|(id, _)| *id)
            .collect();
        for id in due {
            let Some(connecting) = self.connecting.get(&id) else {
                continue;
            };
            let stream = &connecting.stream;
            let failure = match stream.take_error() {
                Ok(Some(err)) | Err(err) => Some(err.to_string()),
                Ok(None) => match stream.peer_addr() {
                    Ok(_) => None,
                    Err(_) if now < connecting.deadline => continue,
                    Err(_) => Some("no answer in 10 s".to_string()),
                },
            };
            let Some(mut connecting) = self.connecting.remove(&id) else {
                continue;
            };
            match failure {
                None => self
                    .relay
                    .connected(id, connecting.stream, connecting.readable),
                Some(reason) => {
                    let _ = self.poll.registry().deregister(&mut connecting.stream);
                    self.relay.connect_failed(id, &reason);
                }
            }
        }
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
