//! Entry points for the fuzz targets (`fuzz/`) and for the unit test that runs them over
//! the seed corpus and its mutations (`forward::tests`): not part of brig's API. Each takes
//! untrusted bytes, as a jail would write them, and must neither panic nor grow without
//! bound. Also the packet builders (smoltcp's `wire` representations) the seeds and the
//! relay's unit tests are made with.

use super::super::policy::Policy;
use super::super::{dns, inspect};
use super::decide::{self, Names};
use super::relay::{Relay, Request};
use smoltcp::phy::ChecksumCapabilities;
use smoltcp::time::{Duration, Instant};
use smoltcp::wire::{
    IpAddress, IpProtocol, IpRepr, TcpControl, TcpPacket, TcpRepr, TcpSeqNumber, UdpPacket, UdpRepr,
};
use std::io::Write;
use std::net::IpAddr;
use std::os::unix::net::UnixStream;

/// The policy the fuzz targets run under: a name on one port, a wildcard, an address rule
/// on port 81 (its connects fail) and an IPv6 address rule; at most 8 flows at once.
pub fn policy() -> Policy {
    let rules = [
        "example.com:443",
        "*.example.org",
        "151.101.113.7:81",
        "151.101.113.8:80",
        "[2a04:4e42::7]:443",
    ];
    let rules: Vec<String> = rules.iter().map(|rule| rule.to_string()).collect();
    Policy::plan(
        &rules,
        &["pinned.example.org:151.101.113.9".into()],
        None,
        Some(8),
    )
    .expect("the fuzz policy parses")
}

/// Splits `data` into packets: each a 2-byte big-endian length and that many bytes (the
/// last one takes what is left).
pub fn split_packets(mut data: &[u8]) -> Vec<&[u8]> {
    let mut packets = Vec::new();
    while data.len() >= 2 {
        let length = usize::from(u16::from_be_bytes([data[0], data[1]]));
        let end = (2 + length).min(data.len());
        packets.push(&data[2..end]);
        data = &data[end..];
    }
    packets
}

/// The inverse of [`split_packets`].
pub fn join_packets(packets: &[Vec<u8>]) -> Vec<u8> {
    let mut data = Vec::new();
    for packet in packets {
        data.extend_from_slice(&(packet.len() as u16).to_be_bytes());
        data.extend_from_slice(packet);
    }
    data
}

/// The jail writes `data` (packets, see [`split_packets`]) to its TUN device: each is
/// classified, judged and fed to the relay, whose host requests are answered at once
/// (every name resolves to 151.101.113.10 but `*.fail.example.org`, connects to port 81
/// fail, the others get one end of a Unix socket pair whose other end has sent an HTTP
/// response), and the relay exchanges with smoltcp, 10 ms of its clock per packet.
pub fn jail_packets(data: &[u8]) {
    let _ = jail_packets_answered(data);
}

/// [`jail_packets`], returning what brig wrote back to the jail (the seeds use it to
/// answer brig's SYN-ACKs: the relay's seed is fixed, so are its sequence numbers).
pub fn jail_packets_answered(data: &[u8]) -> Vec<Vec<u8>> {
    let mut relay = Relay::<UnixStream>::new(policy(), 0x5eed, Instant::ZERO).expect("a relay");
    let mut hosts = Vec::new();
    let mut now = Instant::ZERO;
    let mut answers = Vec::new();
    for packet in split_packets(data) {
        let _ = decide::classify(packet);
        relay.receive(packet.to_vec());
        answer_requests(&mut relay, &mut hosts);
        now += Duration::from_millis(10);
        relay.exchange(now, &mut |packet| answers.push(packet.to_vec()));
        answer_requests(&mut relay, &mut hosts);
    }
    assert!(relay.flows() <= 8, "the flow table is capped");
    let _ = relay.finish();
    answers
}

fn answer_requests(relay: &mut Relay<UnixStream>, hosts: &mut Vec<UnixStream>) {
    while let Some(request) = relay.next_request() {
        match request {
            Request::Resolve(name) if name.ends_with(".fail.example.org") => {
                relay.resolved(&name, Err("no such name".into()))
            }
            Request::Resolve(name) => {
                relay.resolved(&name, Ok(vec![IpAddr::from([151, 101, 113, 10])]))
            }
            Request::Connect { flow, address } if address.port() == 81 => {
                relay.connect_failed(flow, "Connection refused (os error 111)")
            }
            Request::Connect { flow, .. } => {
                let (brig, mut host) = UnixStream::pair().expect("a socket pair");
                brig.set_nonblocking(true).expect("non-blocking");
                let _ = host.write_all(b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n");
                relay.connected(flow, brig, true);
                hosts.push(host);
            }
        }
    }
}

/// A connection's bytes from the jail, read by the inspector (TLS ClientHello, every HTTP
/// request head and body framing) as they would arrive: the first byte picks what the
/// destination expects and the size of the segments, the rest is the stream. Claims of
/// names that start with `x` are refused. Checks that the inspector never passes more
/// than it holds and that it ends (every step consumes, changes state, or stops).
pub fn first_bytes(data: &[u8]) {
    let Some((&control, stream)) = data.split_first() else {
        return;
    };
    let expect = match control % 3 {
        0 => inspect::Expect::Web,
        1 => inspect::Expect::Any,
        _ => inspect::Expect::Raw,
    };
    let segment = usize::from(control / 3).max(1);
    let mut inspector = inspect::Inspector::new(expect);
    let mut judge = |claim: inspect::Claim| match claim.name() {
        Some(name) if name.starts_with('x') => Err("x".to_string()),
        _ => Ok(()),
    };
    let mut held: Vec<u8> = Vec::new();
    let mut chunks = stream.chunks(segment).peekable();
    while let Some(chunk) = chunks.next() {
        held.extend_from_slice(chunk);
        let finished = chunks.peek().is_none();
        for _ in 0..=held.len() + 8 {
            match inspector.step(&held, finished, &mut judge) {
                inspect::Step::Pass(count) => {
                    assert!(count <= held.len(), "passed {count} of {}", held.len());
                    held.drain(..count);
                }
                inspect::Step::Unread => return,
                inspect::Step::Refuse(_) => return,
                inspect::Step::AwaitReply => {
                    inspector.replied(b"HTTP/1.1 400 No\r\n");
                }
                inspect::Step::Wait => break,
            }
        }
        if held.len() > inspect::HEAD_LIMIT {
            panic!("held {} bytes past the limit", held.len());
        }
    }
}

/// A query to brig's resolver, answered under [`policy`].
pub fn dns_query(data: &[u8]) {
    let policy = policy();
    let mut names = Names::new(&policy);
    if let Some(reply) = dns::reply(data, |name| {
        if policy.name_listed(name) {
            names.address_for(name)
        } else {
            None
        }
    }) {
        assert!(reply.len() >= 12, "a reply has a header");
    }
}

/// An IP packet (IPv4 or IPv6, as the addresses are) around `transport`, its header
/// emitted by `emit` into the transport slice.
fn ip_packet(
    source: IpAddress,
    destination: IpAddress,
    protocol: IpProtocol,
    length: usize,
    emit: impl FnOnce(&mut [u8]),
) -> Vec<u8> {
    let ip = IpRepr::new(source, destination, protocol, length, 64);
    let mut packet = vec![0; ip.buffer_len()];
    ip.emit(&mut packet[..], &ChecksumCapabilities::default());
    emit(&mut packet[ip.header_len()..]);
    packet
}

/// One TCP segment as the jail's kernel would send it.
#[allow(clippy::too_many_arguments)]
pub fn tcp(
    source: (IpAddr, u16),
    destination: (IpAddr, u16),
    control: TcpControl,
    seq: i32,
    ack: Option<i32>,
    payload: &[u8],
) -> Vec<u8> {
    let (from, to) = (IpAddress::from(source.0), IpAddress::from(destination.0));
    let repr = TcpRepr {
        src_port: source.1,
        dst_port: destination.1,
        control,
        seq_number: TcpSeqNumber(seq),
        ack_number: ack.map(TcpSeqNumber),
        window_len: 65535,
        window_scale: None,
        max_seg_size: (control == TcpControl::Syn).then_some(1460),
        sack_permitted: false,
        sack_ranges: [None; 3],
        timestamp: None,
        payload,
    };
    ip_packet(from, to, IpProtocol::Tcp, repr.buffer_len(), |bytes| {
        let mut segment = TcpPacket::new_unchecked(bytes);
        repr.emit(&mut segment, &from, &to, &ChecksumCapabilities::default());
    })
}

/// One UDP datagram.
pub fn udp(source: (IpAddr, u16), destination: (IpAddr, u16), payload: &[u8]) -> Vec<u8> {
    let (from, to) = (IpAddress::from(source.0), IpAddress::from(destination.0));
    let repr = UdpRepr {
        src_port: source.1,
        dst_port: destination.1,
    };
    let length = repr.header_len() + payload.len();
    ip_packet(from, to, IpProtocol::Udp, length, |bytes| {
        let mut datagram = UdpPacket::new_unchecked(bytes);
        repr.emit(
            &mut datagram,
            &from,
            &to,
            payload.len(),
            |space| space.copy_from_slice(payload),
            &ChecksumCapabilities::default(),
        );
    })
}

/// An IP packet of another protocol (ICMP, ...) with `payload` as is.
pub fn raw(source: IpAddr, destination: IpAddr, protocol: u8, payload: &[u8]) -> Vec<u8> {
    ip_packet(
        source.into(),
        destination.into(),
        IpProtocol::from(protocol),
        payload.len(),
        |bytes| bytes.copy_from_slice(payload),
    )
}
