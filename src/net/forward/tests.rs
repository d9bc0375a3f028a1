//! The forwarder's decisions and its relay, driven without a jail (smoltcp's sans-IO
//! style): the tests build the packets the jail's kernel would write to its TUN device,
//! feed them to a [`Relay`], read what it sends back and what it asks of the host, and
//! answer as the host would (a Unix socket pair stands for brig's host connection).

use super::decide::{self, Names, Opening, Packet};
use super::flow;
use super::fuzzing::{self, raw, tcp, udp};
use super::relay::{Relay, Request};
use crate::net::policy::Policy;
use crate::net::record::NetworkRecord;
use crate::net::{JAIL_ADDRESS, JAIL_ADDRESS_V6, RESOLVER, dns};
use simple_dns::rdata::RData;
use simple_dns::{RCODE, TYPE};
use smoltcp::time::{Duration, Instant};
use smoltcp::wire::{
    IpEndpoint, IpProtocol, Ipv4Packet, Ipv6Packet, TcpControl, TcpPacket, UdpPacket,
};
use std::collections::HashMap;
use std::io::{ErrorKind, Read, Write};
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::os::unix::net::UnixStream;

const JAIL: IpAddr = IpAddr::V4(JAIL_ADDRESS);
const ALLOWED: IpAddr = IpAddr::V4(Ipv4Addr::new(151, 101, 113, 8));
/// `example.com`'s synthetic address under [`fuzzing::policy`] (its first exact name).
const EXAMPLE_COM: IpAddr = IpAddr::V4(Ipv4Addr::new(198, 18, 0, 1));
/// Where the tests' host resolver says the names are.
const RESOLVED: IpAddr = IpAddr::V4(Ipv4Addr::new(151, 101, 113, 10));
const JAIL_SEQ: i32 = 1000;

fn plan(rules: &[&str], pins: &[&str], bytes: Option<u64>, connections: Option<u32>) -> Policy {
    let owned = |texts: &[&str]| texts.iter().map(|t| t.to_string()).collect::<Vec<_>>();
    let mut policy = Policy::plan(&owned(rules), &owned(pins), None, connections).unwrap();
    policy.max_bytes = bytes;
    policy
}

/// One TCP segment brig sent to the jail.
#[derive(Debug)]
struct Segment {
    from: IpEndpoint,
    to: IpEndpoint,
    syn: bool,
    ack: bool,
    rst: bool,
    seq: i32,
    ack_number: i32,
    payload: Vec<u8>,
}

/// What brig sent the jail, packet by packet.
fn parse_ip(packet: &[u8]) -> (IpAddr, IpAddr, IpProtocol, Vec<u8>) {
    if packet[0] >> 4 == 4 {
        let ip = Ipv4Packet::new_checked(packet).unwrap();
        let src = IpAddr::V4(ip.src_addr());
        (
            src,
            ip.dst_addr().into(),
            ip.next_header(),
            ip.payload().to_vec(),
        )
    } else {
        let ip = Ipv6Packet::new_checked(packet).unwrap();
        let src = IpAddr::V6(ip.src_addr());
        (
            src,
            ip.dst_addr().into(),
            ip.next_header(),
            ip.payload().to_vec(),
        )
    }
}

fn segment(packet: &[u8]) -> Option<Segment> {
    let (src, dst, protocol, payload) = parse_ip(packet);
    if protocol != IpProtocol::Tcp {
        return None;
    }
    let tcp = TcpPacket::new_checked(&payload[..]).unwrap();
    Some(Segment {
        from: IpEndpoint::new(src.into(), tcp.src_port()),
        to: IpEndpoint::new(dst.into(), tcp.dst_port()),
        syn: tcp.syn(),
        ack: tcp.ack(),
        rst: tcp.rst(),
        seq: tcp.seq_number().0,
        ack_number: tcp.ack_number().0,
        payload: tcp.payload().to_vec(),
    })
}

/// The jail's side of the test: a relay, its clock, and the host's ends of its flows.
struct Jail {
    relay: Relay<UnixStream>,
    now: Instant,
    /// Flow id → the host's end of its connection.
    hosts: HashMap<usize, UnixStream>,
}

impl Jail {
    fn new(policy: Policy) -> Jail {
        Jail {
            relay: Relay::new(policy, 7, Instant::ZERO).unwrap(),
            now: Instant::ZERO,
            hosts: HashMap::new(),
        }
    }

    fn fuzz_policy() -> Jail {
        Jail::new(fuzzing::policy())
    }

    /// The jail writes `packets`; returns what brig wrote back.
    fn send(&mut self, packets: impl IntoIterator<Item = Vec<u8>>) -> Vec<Vec<u8>> {
        for packet in packets {
            self.relay.receive(packet);
        }
        self.exchange()
    }

    fn exchange(&mut self) -> Vec<Vec<u8>> {
        self.now += Duration::from_millis(1);
        let mut out = Vec::new();
        self.relay
            .exchange(self.now, &mut |packet| out.push(packet.to_vec()));
        out
    }

    fn requests(&mut self) -> Vec<Request> {
        std::iter::from_fn(|| self.relay.next_request()).collect()
    }

    /// The host accepts flow `flow`'s connection.
    fn accept(&mut self, flow: usize) -> Vec<Vec<u8>> {
        let (brig, host) = UnixStream::pair().unwrap();
        brig.set_nonblocking(true).unwrap();
        host.set_nonblocking(true).unwrap();
        self.relay.connected(flow, brig, false);
        self.hosts.insert(flow, host);
        self.exchange()
    }

    /// The host sends `bytes` on flow `flow`.
    fn host_sends(&mut self, flow: usize, bytes: &[u8]) -> Vec<Vec<u8>> {
        self.hosts.get_mut(&flow).unwrap().write_all(bytes).unwrap();
        self.relay.ready(flow, true, false);
        self.exchange()
    }

    /// What the host has received on flow `flow` so far; None: the jail's side finished.
    fn host_reads(&mut self, flow: usize) -> Option<Vec<u8>> {
        let mut bytes = vec![0; 64 * 1024];
        match self.hosts.get_mut(&flow).unwrap().read(&mut bytes) {
            Ok(0) => None,
            Ok(count) => Some(bytes[..count].to_vec()),
            Err(err) if err.kind() == ErrorKind::WouldBlock => Some(Vec::new()),
            Err(err) => panic!("host read: {err}"),
        }
    }

    /// The jail's handshake to `target` from `port`, once brig's SYN-ACK comes; returns
    /// brig's next sequence number.
    fn complete_handshake(&mut self, out: &[Vec<u8>], port: u16, target: (IpAddr, u16)) -> i32 {
        let [syn_ack] = segments(out).try_into().expect("one SYN-ACK");
        assert!(syn_ack.syn && syn_ack.ack && !syn_ack.rst, "{syn_ack:?}");
        assert_eq!(syn_ack.ack_number, JAIL_SEQ + 1);
        assert_eq!(syn_ack.from, IpEndpoint::new(target.0.into(), target.1));
        let ack = tcp(
            (JAIL, port),
            target,
            TcpControl::None,
            JAIL_SEQ + 1,
            Some(syn_ack.seq + 1),
            b"",
        );
        assert!(self.send([ack]).is_empty());
        syn_ack.seq + 1
    }

    fn finish(mut self) -> NetworkRecord {
        self.relay.finish()
    }
}

fn segments(out: &[Vec<u8>]) -> Vec<Segment> {
    out.iter().filter_map(|packet| segment(packet)).collect()
}

fn syn(port: u16, target: (IpAddr, u16)) -> Vec<u8> {
    tcp((JAIL, port), target, TcpControl::Syn, JAIL_SEQ, None, b"")
}

/// The one reset brig sent for the jail's SYN from `port`.
fn assert_reset(out: &[Vec<u8>], port: u16) {
    let [reset] = segments(out).try_into().expect("one segment");
    assert!(reset.rst && reset.ack, "{reset:?}");
    assert_eq!((reset.to.port, reset.ack_number), (port, JAIL_SEQ + 1));
}

/// The record's one connection entry: (name, port, address, allowed, reason, count).
fn only_connection(
    record: &NetworkRecord,
) -> (
    Option<String>,
    u16,
    Option<IpAddr>,
    bool,
    Option<String>,
    u64,
) {
    let [entry] = record.connections.as_slice() else {
        panic!("one destination: {:?}", record.connections);
    };
    (
        entry.name.clone(),
        entry.port,
        entry.address,
        entry.allowed,
        entry.reason.clone(),
        entry.connections,
    )
}

/// A DNS query from the jail to brig's resolver, and the answer's rcode and A record.
fn ask(jail: &mut Jail, name: &str) -> (RCODE, Option<Ipv4Addr>) {
    let query = dns::query(0x4242, name, TYPE::A).unwrap();
    let out = jail.send([udp((JAIL, 5353), (IpAddr::V4(RESOLVER), 53), &query)]);
    let [reply] = out.as_slice() else {
        panic!("one reply: {out:?}");
    };
    let (src, dst, protocol, payload) = parse_ip(reply);
    assert_eq!(
        (src, dst, protocol),
        (IpAddr::V4(RESOLVER), JAIL, IpProtocol::Udp)
    );
    let datagram = UdpPacket::new_checked(&payload[..]).unwrap();
    assert_eq!((datagram.src_port(), datagram.dst_port()), (53, 5353));
    let answer = simple_dns::Packet::parse(datagram.payload()).unwrap();
    let address = answer
        .answers
        .iter()
        .find_map(|record| match &record.rdata {
            RData::A(a) => Some(Ipv4Addr::from(a.address)),
            _ => None,
        });
    (answer.rcode(), address)
}

// ---- decide: the pure functions ----

#[test]
fn classify_sorts_each_kind_of_packet() {
    let resolver = IpAddr::V4(RESOLVER);
    let v6 = IpAddr::V6(JAIL_ADDRESS_V6);
    let cases = [
        (
            syn(40000, (ALLOWED, 80)),
            Packet::Tcp {
                jail: IpEndpoint::new(JAIL.into(), 40000),
                target: IpEndpoint::new(ALLOWED.into(), 80),
                opening: true,
            },
        ),
        (
            tcp((JAIL, 1), (ALLOWED, 2), TcpControl::None, 5, Some(6), b"x"),
            Packet::Tcp {
                jail: IpEndpoint::new(JAIL.into(), 1),
                target: IpEndpoint::new(ALLOWED.into(), 2),
                opening: false,
            },
        ),
        (udp((JAIL, 999), (resolver, 53), b"q"), Packet::Dns),
        (
            udp((JAIL, 999), (IpAddr::from([8, 8, 8, 8]), 53), b"q"),
            Packet::Udp {
                destination: IpAddr::from([8, 8, 8, 8]),
                port: Some(53),
            },
        ),
        (
            udp((JAIL, 999), (resolver, 54), b"q"),
            Packet::Udp {
                destination: resolver,
                port: Some(54),
            },
        ),
        (
            raw(JAIL, ALLOWED, 1, &[8, 0, 0, 0, 0, 0, 0, 0]),
            Packet::Icmp {
                destination: ALLOWED,
            },
        ),
        (
            raw(
                v6,
                "ff02::2".parse().unwrap(),
                58,
                &[133, 0, 0, 0, 0, 0, 0, 0],
            ),
            Packet::Chatter,
        ),
        (
            raw(v6, "2a04:4e42::7".parse().unwrap(), 58, &[128, 0, 0, 0]),
            Packet::Icmp {
                destination: "2a04:4e42::7".parse().unwrap(),
            },
        ),
        (
            raw(JAIL, ALLOWED, 47, b"gre"),
            Packet::Other {
                protocol: 47,
                destination: ALLOWED,
            },
        ),
        (vec![], Packet::Malformed),
        (vec![0x75; 40], Packet::Malformed),
    ];
    for (packet, expected) in cases {
        assert_eq!(decide::classify(&packet), expected, "{packet:02x?}");
    }
    let target = ("2a04:4e42::7".parse().unwrap(), 443);
    assert!(matches!(
        decide::classify(&tcp((v6, 40000), target, TcpControl::Syn, 1, None, b"")),
        Packet::Tcp { opening: true, .. }
    ));
}

#[test]
fn every_cut_short_packet_is_malformed() {
    let whole = tcp(
        (JAIL, 40000),
        (ALLOWED, 80),
        TcpControl::Psh,
        1,
        Some(1),
        b"data",
    );
    for cut in 0..whole.len() {
        assert_eq!(
            decide::classify(&whole[..cut]),
            Packet::Malformed,
            "cut {cut}"
        );
    }
    // An IP header whose total length leaves no room for a TCP header.
    let mut short = syn(40000, (ALLOWED, 80));
    short[3] = 24;
    assert_eq!(decide::classify(&short), Packet::Malformed);
}

#[test]
fn ipv4_fragments_are_fragments_whatever_they_carry() {
    let mut first = syn(40000, (ALLOWED, 80));
    first[6] |= 0x20; // more fragments
    let mut later = syn(40000, (ALLOWED, 80));
    later[7] = 3; // offset 24 bytes
    for packet in [first, later] {
        assert_eq!(
            decide::classify(&packet),
            Packet::Fragment {
                destination: ALLOWED
            }
        );
    }
}

#[test]
fn new_connections_are_judged_by_the_policy_alone() {
    let policy = fuzzing::policy();
    let names = Names::new(&policy);
    let to = |address: IpAddr, port| IpEndpoint::new(address.into(), port);
    let refuse = |name: Option<&str>, reason: &str| Opening::Refuse {
        name: name.map(String::from),
        reason: reason.into(),
    };
    let cases = [
        (to(ALLOWED, 80), Opening::Connect(ALLOWED)),
        (to(ALLOWED, 443), refuse(None, "not on the list")),
        (
            to("2a04:4e42::7".parse().unwrap(), 443),
            Opening::Connect("2a04:4e42::7".parse().unwrap()),
        ),
        (
            to(IpAddr::from([127, 0, 0, 1]), 80),
            refuse(None, "loopback address, not on the list"),
        ),
        (
            to(IpAddr::from([169, 254, 169, 254]), 80),
            refuse(None, "link-local (metadata) address, not on the list"),
        ),
        (to(EXAMPLE_COM, 443), Opening::Resolve("example.com".into())),
        (
            to(EXAMPLE_COM, 80),
            refuse(
                Some("example.com"),
                "port 80 is not allowed for example.com",
            ),
        ),
        (
            to(IpAddr::from([198, 18, 0, 99]), 443),
            refuse(None, "an address brig's resolver never gave out"),
        ),
        // `*.example.org` allows any port.
        (
            to(IpAddr::from([198, 18, 0, 2]), 22),
            Opening::Resolve("pinned.example.org".into()),
        ),
    ];
    for (target, expected) in cases {
        assert_eq!(
            decide::open(&policy, &names, target, &[]),
            expected,
            "{target}"
        );
    }
}

#[test]
fn a_deny_list_lets_the_rest_out_and_allow_wins() {
    // E2B's denyOut: 93.184.216.0/24 and one name refused, 93.184.216.34 allowed back.
    let policy = Policy::plan(
        &["93.184.216.34".to_string(), "ok.blocked.test".to_string()],
        &["pinned.test:10.0.0.7".to_string()],
        None,
        None,
    )
    .unwrap()
    .deny(&["93.184.216.0/24".into(), "*.blocked.test".into()])
    .unwrap();
    let mut names = Names::new(&policy);
    let public = names.address_for("public.test").unwrap();
    let blocked = names.address_for("x.blocked.test").unwrap();
    let to = |address: IpAddr, port| IpEndpoint::new(address.into(), port);
    let own = [IpAddr::from([151, 101, 0, 9])];
    let refuse = |name: Option<&str>, reason: &str| Opening::Refuse {
        name: name.map(String::from),
        reason: reason.into(),
    };
    let cases = [
        // Not named by any rule: goes out, by address or by name.
        (
            to(IpAddr::from([1, 1, 1, 1]), 443),
            Opening::Connect(IpAddr::from([1, 1, 1, 1])),
        ),
        (
            to(public.into(), 443),
            Opening::Resolve("public.test".into()),
        ),
        // Denied, unless an allow rule names it too.
        (
            to(IpAddr::from([93, 184, 216, 1]), 443),
            refuse(None, "denied (a --deny-net rule names it) address"),
        ),
        (
            to(IpAddr::from([93, 184, 216, 34]), 443),
            Opening::Connect(IpAddr::from([93, 184, 216, 34])),
        ),
        (
            to(blocked.into(), 443),
            refuse(
                Some("x.blocked.test"),
                "x.blocked.test is denied (--deny-net *.blocked.test)",
            ),
        ),
        // brig's own refusals stay: loopback, private, the host's addresses.
        (
            to(IpAddr::from([127, 0, 0, 1]), 80),
            refuse(None, "loopback address"),
        ),
        (
            to(IpAddr::from([10, 0, 0, 7]), 80),
            refuse(None, "private (RFC 1918) address"),
        ),
        (
            to(own[0], 80),
            refuse(
                None,
                "host-own (an address of one of this host's interfaces) address",
            ),
        ),
    ];
    for (target, expected) in cases {
        assert_eq!(
            decide::open(&policy, &names, target, &own),
            expected,
            "{target}"
        );
    }
    // A flow held under it is judged the same way when the policy is replaced.
    let still = |name: Option<&str>, address: &str| {
        decide::still_allowed(&policy, name, None, address.parse().ok(), 443, &own)
    };
    assert_eq!(still(None, "1.1.1.1"), Ok(()));
    assert!(still(None, "93.184.216.1").is_err());
    assert_eq!(still(Some("public.test"), "1.1.1.1"), Ok(()));
    assert!(still(Some("public.test"), "93.184.216.1").is_err());
    assert!(still(Some("x.blocked.test"), "1.1.1.1").is_err());
    assert_eq!(still(Some("pinned.test"), "10.0.0.7"), Ok(()));
}

// ---- the relay, driven with packets ----

#[test]
fn a_syn_to_an_allowed_address_is_held_while_brig_connects() {
    let mut jail = Jail::fuzz_policy();
    let out = jail.send([syn(40000, (ALLOWED, 80))]);
    assert!(out.is_empty(), "the SYN is held: {out:?}");
    assert_eq!(
        jail.requests(),
        [Request::Connect {
            flow: 0,
            address: SocketAddr::new(ALLOWED, 80)
        }]
    );
    // The jail's kernel sends its SYN again: the held one will do.
    assert!(jail.send([syn(40000, (ALLOWED, 80))]).is_empty());
    assert!(jail.requests().is_empty());
    assert_eq!(jail.relay.flows(), 1);
}

#[test]
fn a_connected_flow_relays_both_ways_and_is_recorded() {
    let mut jail = Jail::fuzz_policy();
    jail.send([syn(40000, (ALLOWED, 80))]);
    jail.requests();
    let out = jail.accept(0);
    let mut brig_seq = jail.complete_handshake(&out, 40000, (ALLOWED, 80));
    let request = b"GET / HTTP/1.1\r\nHost: 151.101.113.8\r\n\r\n";
    let data = tcp(
        (JAIL, 40000),
        (ALLOWED, 80),
        TcpControl::Psh,
        JAIL_SEQ + 1,
        Some(brig_seq),
        request,
    );
    let out = jail.send([data]);
    assert!(segments(&out).iter().all(|s| s.ack && !s.rst), "{out:?}");
    assert_eq!(jail.host_reads(0).unwrap(), request);
    let out = jail.host_sends(0, b"HTTP/1.1 204 No Content\r\n\r\n");
    let [answer] = segments(&out).try_into().unwrap();
    assert_eq!(answer.payload, b"HTTP/1.1 204 No Content\r\n\r\n");
    assert_eq!(answer.seq, brig_seq);
    brig_seq += answer.payload.len() as i32;
    // The jail closes its side: the host sees the end of the stream.
    let fin = tcp(
        (JAIL, 40000),
        (ALLOWED, 80),
        TcpControl::Fin,
        JAIL_SEQ + 1 + request.len() as i32,
        Some(brig_seq),
        b"",
    );
    jail.send([fin]);
    assert_eq!(jail.host_reads(0), None);
    let record = jail.finish();
    let (name, port, address, allowed, reason, count) = only_connection(&record);
    assert_eq!(
        (name.as_deref(), port, address, allowed, reason, count),
        (Some("151.101.113.8"), 80, Some(ALLOWED), true, None, 1)
    );
    assert_eq!(record.bytes_sent, request.len() as u64);
    assert_eq!(record.bytes_received, 27);
}

#[test]
fn a_syn_to_an_address_off_the_list_is_reset_and_recorded() {
    let mut jail = Jail::fuzz_policy();
    let target = (IpAddr::from([1, 1, 1, 1]), 443);
    let out = jail.send([syn(40001, target)]);
    assert_reset(&out, 40001);
    assert!(jail.requests().is_empty(), "nothing asked of the host");
    assert_eq!(jail.relay.flows(), 0);
    let record = jail.finish();
    assert_eq!(
        only_connection(&record),
        (
            None,
            443,
            Some(target.0),
            false,
            Some("not on the list".into()),
            1
        )
    );
}

#[test]
fn a_syn_to_the_hosts_loopback_or_metadata_is_refused_with_the_range() {
    let mut jail = Jail::fuzz_policy();
    for (port, address) in [(1, [127, 0, 0, 1]), (2, [169, 254, 169, 254])] {
        assert_reset(&jail.send([syn(port, (IpAddr::from(address), 80))]), port);
    }
    assert!(jail.requests().is_empty());
    let reasons: Vec<String> = jail
        .finish()
        .connections
        .into_iter()
        .filter_map(|c| c.reason)
        .collect();
    assert_eq!(
        reasons,
        [
            "loopback address, not on the list",
            "link-local (metadata) address, not on the list"
        ]
    );
}

#[test]
fn a_failed_connect_tries_the_next_address_then_resets_the_jail() {
    let mut jail = Jail::new(plan(&["multi.example:443"], &[], None, None));
    ask(&mut jail, "multi.example");
    let target = (IpAddr::from([198, 18, 0, 1]), 443);
    jail.send([syn(40002, target)]);
    assert_eq!(jail.requests(), [Request::Resolve("multi.example".into())]);
    let first: IpAddr = "151.101.113.20".parse().unwrap();
    let second: IpAddr = "2a04:4e42::20".parse().unwrap();
    jail.relay
        .resolved("multi.example", Ok(vec![first, second]));
    let connect = |address| Request::Connect {
        flow: 0,
        address: SocketAddr::new(address, 443),
    };
    assert_eq!(jail.requests(), [connect(first)]);
    jail.relay.connect_failed(0, "Network is unreachable");
    assert_eq!(jail.requests(), [connect(second)]);
    assert!(jail.exchange().is_empty(), "the SYN is still held");
    jail.relay.connect_failed(0, "Connection refused");
    assert!(jail.requests().is_empty());
    assert_reset(&jail.exchange(), 40002);
    let record = jail.finish();
    let (name, _, address, allowed, reason, _) = only_connection(&record);
    assert_eq!(
        (name.as_deref(), address, allowed, reason.as_deref()),
        (
            Some("multi.example"),
            Some(second),
            false,
            Some("connect failed: Connection refused")
        )
    );
}

#[test]
fn a_listed_name_gets_a_synthetic_address_and_nothing_leaves_the_host() {
    let mut jail = Jail::fuzz_policy();
    assert_eq!(
        ask(&mut jail, "Example.COM"),
        (RCODE::NoError, Some(Ipv4Addr::new(198, 18, 0, 1)))
    );
    assert_eq!(
        ask(&mut jail, "a.example.org"),
        (RCODE::NoError, Some(Ipv4Addr::new(198, 18, 0, 3)))
    );
    assert_eq!(
        ask(&mut jail, "a.example.org"),
        (RCODE::NoError, Some(Ipv4Addr::new(198, 18, 0, 3)))
    );
    assert!(
        jail.requests().is_empty(),
        "a lookup alone asks the host nothing"
    );
    let record = jail.finish();
    let lookups: Vec<(String, Option<IpAddr>, u64)> = record
        .lookups
        .into_iter()
        .map(|l| (l.name, l.answer, l.count))
        .collect();
    assert_eq!(
        lookups,
        [
            (
                "a.example.org".into(),
                Some(IpAddr::from([198, 18, 0, 3])),
                2
            ),
            ("example.com".into(), Some(EXAMPLE_COM), 1),
        ]
    );
}

#[test]
fn an_unlisted_name_is_nxdomain_and_recorded() {
    let mut jail = Jail::fuzz_policy();
    assert_eq!(
        ask(&mut jail, "exfil.attacker.test"),
        (RCODE::NameError, None)
    );
    assert_eq!(ask(&mut jail, "example.org"), (RCODE::NameError, None));
    assert!(jail.requests().is_empty());
    let record = jail.finish();
    assert!(record.lookups.iter().all(|l| l.answer.is_none()));
    assert_eq!(record.lookups.len(), 2);
}

#[test]
fn a_syn_to_a_synthetic_address_resolves_on_the_host_then_connects() {
    let mut jail = Jail::fuzz_policy();
    jail.send([
        syn(40003, (EXAMPLE_COM, 443)),
        syn(40004, (EXAMPLE_COM, 443)),
    ]);
    assert_eq!(
        jail.requests(),
        [Request::Resolve("example.com".into())],
        "one lookup for both connections"
    );
    jail.relay.resolved("example.com", Ok(vec![RESOLVED]));
    let to = SocketAddr::new(RESOLVED, 443);
    assert_eq!(
        jail.requests(),
        [
            Request::Connect {
                flow: 0,
                address: to
            },
            Request::Connect {
                flow: 1,
                address: to
            }
        ]
    );
    // A third connection uses the answer brig has.
    jail.send([syn(40005, (EXAMPLE_COM, 443))]);
    assert_eq!(
        jail.requests(),
        [Request::Connect {
            flow: 2,
            address: to
        }]
    );
    let out = jail.accept(1);
    jail.complete_handshake(&out, 40004, (EXAMPLE_COM, 443));
}

#[test]
fn a_name_that_resolves_to_loopback_is_refused_dns_rebinding() {
    let mut jail = Jail::fuzz_policy();
    jail.send([syn(40006, (EXAMPLE_COM, 443))]);
    jail.requests();
    jail.relay
        .resolved("example.com", Ok(vec![IpAddr::from([127, 0, 0, 1])]));
    assert!(jail.requests().is_empty(), "no connect to loopback");
    assert_reset(&jail.exchange(), 40006);
    let (name, _, address, allowed, reason, _) = only_connection(&jail.finish());
    assert_eq!(
        (name.as_deref(), address, allowed, reason.as_deref()),
        (
            Some("example.com"),
            Some(IpAddr::from([127, 0, 0, 1])),
            false,
            Some("example.com resolves to a loopback address")
        )
    );
}

#[test]
fn a_name_that_does_not_resolve_is_refused() {
    let mut jail = Jail::fuzz_policy();
    jail.send([syn(40007, (EXAMPLE_COM, 443))]);
    jail.requests();
    jail.relay.resolved("example.com", Err("NXDOMAIN".into()));
    assert_reset(&jail.exchange(), 40007);
    let (_, _, _, _, reason, _) = only_connection(&jail.finish());
    assert_eq!(
        reason.as_deref(),
        Some("example.com does not resolve: NXDOMAIN")
    );
}

#[test]
fn a_pinned_name_connects_to_its_pin_without_a_lookup() {
    let mut jail = Jail::new(plan(
        &["db.internal:5432"],
        &["db.internal:127.0.0.1"],
        None,
        None,
    ));
    jail.send([syn(40008, (IpAddr::from([198, 18, 0, 1]), 5432))]);
    assert_eq!(
        jail.requests(),
        [Request::Connect {
            flow: 0,
            address: "127.0.0.1:5432".parse().unwrap()
        }]
    );
}

#[test]
fn synthetic_addresses_never_given_out_or_on_other_ports_are_refused() {
    let mut jail = Jail::fuzz_policy();
    assert_reset(
        &jail.send([syn(1, (IpAddr::from([198, 18, 0, 77]), 443))]),
        1,
    );
    assert_reset(&jail.send([syn(2, (EXAMPLE_COM, 80))]), 2);
    assert!(jail.requests().is_empty());
    let reasons: Vec<(Option<String>, Option<String>)> = jail
        .finish()
        .connections
        .into_iter()
        .map(|c| (c.name, c.reason))
        .collect();
    assert_eq!(
        reasons,
        [
            (
                None,
                Some("an address brig's resolver never gave out".into())
            ),
            (
                Some("example.com".into()),
                Some("port 80 is not allowed for example.com".into())
            ),
        ]
    );
}

#[test]
fn udp_other_than_dns_icmp_and_other_protocols_are_dropped_and_recorded() {
    let mut jail = Jail::fuzz_policy();
    let quic = udp((JAIL, 5000), (ALLOWED, 443), b"\xc0quic");
    let other_dns = udp((JAIL, 5000), (IpAddr::from([8, 8, 8, 8]), 53), b"q");
    let ping = raw(JAIL, ALLOWED, 1, &[8, 0, 0xf7, 0xff, 0, 0, 0, 0]);
    let gre = raw(JAIL, ALLOWED, 47, b"tunnel");
    let solicitation = raw(
        IpAddr::V6(JAIL_ADDRESS_V6),
        "ff02::2".parse().unwrap(),
        58,
        &[133, 0, 0, 0, 0, 0, 0, 0],
    );
    let out = jail.send([quic.clone(), quic, other_dns, ping, gre, solicitation]);
    assert!(out.is_empty(), "nothing answers: {out:?}");
    assert!(jail.requests().is_empty());
    let dropped: Vec<(String, Option<IpAddr>, Option<u16>, u64)> = jail
        .finish()
        .dropped
        .into_iter()
        .map(|d| (d.protocol, d.address, d.port, d.packets))
        .collect();
    assert_eq!(
        dropped,
        [
            ("47".into(), Some(ALLOWED), None, 1),
            ("icmp".into(), Some(ALLOWED), None, 1),
            ("udp".into(), Some(IpAddr::from([8, 8, 8, 8])), Some(53), 1),
            ("udp".into(), Some(ALLOWED), Some(443), 2),
        ]
    );
}

#[test]
fn malformed_and_cut_short_packets_are_dropped_silently() {
    let mut jail = Jail::fuzz_policy();
    let whole = syn(40009, (ALLOWED, 80));
    let mut packets: Vec<Vec<u8>> = (0..whole.len()).map(|cut| whole[..cut].to_vec()).collect();
    packets.push(vec![0x60; 3]);
    packets.push(vec![0xff; 100]);
    let mut lying = whole.clone();
    lying[0] = 0x4f; // a header length beyond the packet
    packets.push(lying);
    assert!(jail.send(packets).is_empty());
    assert!(jail.requests().is_empty());
    let record = jail.finish();
    assert!(record.connections.is_empty() && record.dropped.is_empty());
}

#[test]
fn a_fragment_opens_nothing_and_is_recorded() {
    let mut jail = Jail::fuzz_policy();
    let mut first = syn(40010, (ALLOWED, 80));
    first[6] |= 0x20;
    let mut later = syn(40011, (ALLOWED, 80));
    later[7] = 8;
    assert!(jail.send([first, later]).is_empty());
    assert!(jail.requests().is_empty(), "no host connect for a fragment");
    assert_eq!(jail.relay.flows(), 0);
    let dropped: Vec<(String, u64)> = jail
        .finish()
        .dropped
        .into_iter()
        .map(|d| (d.protocol, d.packets))
        .collect();
    assert_eq!(dropped, [("fragment".into(), 2)]);
}

#[test]
fn a_segment_of_no_flow_is_reset() {
    let mut jail = Jail::fuzz_policy();
    let stray = tcp(
        (JAIL, 40012),
        (ALLOWED, 80),
        TcpControl::Psh,
        5,
        Some(9),
        b"x",
    );
    let out = jail.send([stray]);
    let [reset] = segments(&out).try_into().unwrap();
    assert!(reset.rst);
    assert!(jail.requests().is_empty());
    assert_eq!(jail.relay.flows(), 0);
}

#[test]
fn a_syn_flood_is_bounded_by_the_flow_cap() {
    let mut jail = Jail::fuzz_policy(); // --net-connections 8
    let flood: Vec<Vec<u8>> = (0..40).map(|i| syn(41000 + i, (ALLOWED, 80))).collect();
    let out = jail.send(flood);
    assert_eq!(jail.relay.flows(), 8);
    assert_eq!(jail.requests().len(), 8);
    let resets = segments(&out);
    assert_eq!(resets.len(), 32);
    assert!(resets.iter().all(|s| s.rst && s.to.port >= 41008));
    let record = jail.finish();
    assert_eq!(record.limit_reached, Some("net-connections"));
    let refused: u64 = record
        .connections
        .iter()
        .filter(|c| c.reason.as_deref() == Some("--net-connections reached"))
        .map(|c| c.connections)
        .sum();
    assert_eq!(refused, 32);
}

#[test]
fn a_dns_flood_is_bounded_by_the_resolver_queue() {
    let mut jail = Jail::fuzz_policy();
    let query = dns::query(1, "example.com", TYPE::A).unwrap();
    let flood: Vec<Vec<u8>> = (0..200)
        .map(|i| udp((JAIL, 10000 + i), (IpAddr::V4(RESOLVER), 53), &query))
        .collect();
    let out = jail.send(flood);
    assert!(!out.is_empty() && out.len() <= 200, "{}", out.len());
    assert!(jail.requests().is_empty());
}

#[test]
fn a_host_header_off_the_list_ends_the_connection_before_the_host_sees_it() {
    let mut jail = Jail::fuzz_policy();
    let out = on_web_flow(
        &mut jail,
        40013,
        b"GET / HTTP/1.1\r\nHost: evil.test\r\n\r\n",
    );
    assert!(segments(&out).iter().any(|s| s.rst), "{out:?}");
    assert_eq!(
        jail.host_reads(0),
        None,
        "the host saw nothing but the close"
    );
    let (name, _, _, allowed, reason, _) = only_connection(&jail.finish());
    assert_eq!(
        (name.as_deref(), allowed, reason.as_deref()),
        (
            Some("api.example.org"),
            false,
            Some(
                "HTTP Host names evil.test, which is not on the list (connection for api.example.org); to allow it add --allow-net evil.test:80"
            )
        )
    );
}

/// Opens a flow from `port` to api.example.org:80, completes the jail's handshake and
/// sends `payload` on it: what brig sent back to the jail.
fn on_web_flow(jail: &mut Jail, port: u16, payload: &[u8]) -> Vec<Vec<u8>> {
    ask(jail, "api.example.org");
    let target = (IpAddr::from([198, 18, 0, 3]), 80);
    jail.send([syn(port, target)]);
    jail.requests();
    jail.relay.resolved("api.example.org", Ok(vec![RESOLVED]));
    jail.requests();
    let out = jail.accept(0);
    let brig_seq = jail.complete_handshake(&out, port, target);
    let data = tcp(
        (JAIL, port),
        target,
        TcpControl::Psh,
        JAIL_SEQ + 1,
        Some(brig_seq),
        payload,
    );
    jail.send([data])
}

#[test]
fn a_later_request_naming_another_host_ends_the_connection_after_the_first_went_through() {
    let mut jail = Jail::fuzz_policy();
    let first = b"GET / HTTP/1.1\r\nHost: api.example.org\r\n\r\n";
    let second = b"GET / HTTP/1.1\r\nHost: evil.test\r\n\r\n";
    let out = on_web_flow(&mut jail, 40020, &[&first[..], &second[..]].concat());
    assert!(segments(&out).iter().any(|s| s.rst), "{out:?}");
    let record = jail.finish();
    let (_, _, _, allowed, reason, _) = only_connection(&record);
    assert!(!allowed);
    assert!(reason.unwrap().starts_with("HTTP Host names evil.test"));
}

#[test]
fn a_head_not_whole_within_its_time_is_refused() {
    let mut jail = Jail::fuzz_policy();
    let out = on_web_flow(&mut jail, 40021, b"GET / HTTP/1.1\r\nHost: api.exa");
    assert!(
        segments(&out).iter().all(|s| !s.rst),
        "held, not refused yet"
    );
    assert_eq!(jail.host_reads(0), Some(Vec::new()), "nothing passed yet");
    // The relay asks to be woken at the deadline.
    let delay = jail.relay.poll_delay(jail.now).expect("a deadline");
    assert!(delay <= flow::HEAD_TIME, "{delay}");
    jail.now += flow::HEAD_TIME;
    let out = jail.exchange();
    assert!(segments(&out).iter().any(|s| s.rst), "{out:?}");
    assert_eq!(jail.host_reads(0), None);
    let (_, _, _, allowed, reason, _) = only_connection(&jail.finish());
    assert!(!allowed);
    assert_eq!(
        reason.as_deref(),
        Some("an HTTP request head did not arrive whole within 10 s")
    );
}

#[test]
fn the_byte_cap_cuts_open_flows_and_refuses_new_ones() {
    let mut jail = Jail::new(plan(&["151.101.113.8:80"], &[], Some(10), None));
    jail.send([syn(40014, (ALLOWED, 80))]);
    jail.requests();
    let out = jail.accept(0);
    jail.complete_handshake(&out, 40014, (ALLOWED, 80));
    let out = jail.host_sends(0, b"0123456789abcdef");
    assert!(segments(&out).iter().any(|s| s.rst), "cut: {out:?}");
    assert_reset(&jail.send([syn(40015, (ALLOWED, 80))]), 40015);
    assert!(jail.requests().is_empty());
    let record = jail.finish();
    assert_eq!(record.limit_reached, Some("net-bytes"));
    assert!(
        record
            .connections
            .iter()
            .all(|c| c.reason.as_deref() == Some("--net-bytes reached"))
    );
}

#[test]
fn flows_still_held_when_the_jail_ends_are_recorded_as_such() {
    let mut jail = Jail::fuzz_policy();
    jail.send([syn(40016, (EXAMPLE_COM, 443))]);
    jail.requests();
    let (name, _, _, allowed, reason, _) = only_connection(&jail.finish());
    assert_eq!(
        (name.as_deref(), allowed, reason.as_deref()),
        (Some("example.com"), false, Some("the jail ended first"))
    );
}

#[test]
fn a_host_connection_handed_in_late_is_dropped() {
    let mut jail = Jail::fuzz_policy();
    jail.send([syn(40017, (IpAddr::from([151, 101, 113, 7]), 81))]);
    jail.requests();
    jail.relay.connect_failed(0, "Connection refused");
    assert_reset(&jail.exchange(), 40017);
    // The mechanism's connect completes after all: nothing to hand it to.
    let (brig, mut host) = UnixStream::pair().unwrap();
    jail.relay.connected(0, brig, true);
    assert!(jail.exchange().is_empty());
    host.set_nonblocking(true).unwrap();
    assert_eq!(host.read(&mut [0; 8]).unwrap(), 0, "brig closed it");
}

// ---- the fuzz targets' entry points, over the corpus and its mutations ----

/// A fuzz target's name, its entry point and its seeds.
type Target = (&'static str, fn(&[u8]), Vec<Vec<u8>>);

fn targets() -> [Target; 3] {
    [
        ("jail_packets", fuzzing::jail_packets, seeds::jail_packets()),
        ("first_bytes", fuzzing::first_bytes, seeds::first_bytes()),
        ("dns_query", fuzzing::dns_query, seeds::dns_query()),
    ]
}

fn corpus_dir(target: &str) -> std::path::PathBuf {
    std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("fuzz/corpus")
        .join(target)
}

/// The committed corpus holds every seed (`BRIG_WRITE_CORPUS=1` writes them).
#[test]
fn the_fuzz_corpus_holds_the_seeds() {
    for (target, _, seeds) in targets() {
        let dir = corpus_dir(target);
        for (index, seed) in seeds.iter().enumerate() {
            let path = dir.join(format!("seed-{index:02}"));
            if std::env::var_os("BRIG_WRITE_CORPUS").is_some() {
                std::fs::create_dir_all(&dir).unwrap();
                std::fs::write(&path, seed).unwrap();
            }
            let committed = std::fs::read(&path).unwrap_or_else(|err| {
                panic!("{}: {err} (BRIG_WRITE_CORPUS=1 writes it)", path.display())
            });
            assert_eq!(&committed, seed, "{} is stale", path.display());
        }
    }
}

/// What `cargo fuzz` does, briefly and deterministically, so that `cargo test` alone runs
/// the entry points: every file of the corpus (seeds and any crash found since), then
/// seeded random mutations of them (bit flips, cuts, insertions, splices).
#[test]
fn the_fuzz_entry_points_survive_the_corpus_and_its_mutations() {
    let mut state: u64 = 0x2545_f491_4f6c_dd1d;
    let mut next = move || {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        state
    };
    for (target, run, _) in targets() {
        let mut inputs: Vec<Vec<u8>> = std::fs::read_dir(corpus_dir(target))
            .unwrap()
            .map(|entry| std::fs::read(entry.unwrap().path()).unwrap())
            .collect();
        assert!(!inputs.is_empty(), "{target}: an empty corpus");
        for input in &inputs {
            run(input);
        }
        let rounds = if target == "jail_packets" { 1500 } else { 4000 };
        for _ in 0..rounds {
            let mut input = inputs[next() as usize % inputs.len()].clone();
            for _ in 0..1 + next() % 4 {
                let at = |len: usize, r: u64| if len == 0 { 0 } else { r as usize % len };
                match next() % 5 {
                    0 if !input.is_empty() => {
                        let i = at(input.len(), next());
                        input[i] ^= 1 << (next() % 8);
                    }
                    1 if !input.is_empty() => {
                        let i = at(input.len(), next());
                        input[i] = next() as u8;
                    }
                    2 => input.truncate(at(input.len() + 1, next())),
                    3 => {
                        let i = at(input.len() + 1, next());
                        input.insert(i, next() as u8);
                    }
                    _ => {
                        let other = &inputs[next() as usize % inputs.len()];
                        let from = at(other.len() + 1, next());
                        let i = at(input.len() + 1, next());
                        input.splice(i..i, other[from..].iter().copied());
                    }
                }
            }
            run(&input);
            if inputs.len() < 64 {
                inputs.push(input);
            }
        }
    }
}

mod seeds {
    //! Valid inputs of each kind, the fuzz targets' starting corpus.
    use super::*;

    pub fn jail_packets() -> Vec<Vec<u8>> {
        let v6 = IpAddr::V6(JAIL_ADDRESS_V6);
        let v6_target: IpAddr = "2a04:4e42::7".parse().unwrap();
        let get = b"GET / HTTP/1.1\r\nHost: example.com\r\n\r\n";
        let hello = include_bytes!("../../../tests/data/client-hello-example.com.bin");
        let resolver = (IpAddr::V4(RESOLVER), 53);
        let lookup = |name| {
            udp(
                (JAIL, 5353),
                resolver,
                &dns::query(7, name, TYPE::A).unwrap(),
            )
        };
        // After `prelude`, a whole connection from port 40000: SYN, the ACK of brig's
        // SYN-ACK (the fuzz relay's sequence numbers are fixed), `first`, FIN.
        let conversation = |prelude: Vec<Vec<u8>>, target: (IpAddr, u16), first: &[u8]| {
            let mut packets = prelude;
            packets.push(syn(40000, target));
            let answers = fuzzing::jail_packets_answered(&fuzzing::join_packets(&packets));
            let syn_ack = segments(&answers)
                .into_iter()
                .find(|s| s.syn && s.to.port == 40000)
                .unwrap_or_else(|| panic!("a SYN-ACK from {target:?}: {answers:02x?}"));
            let (seq, ack) = (JAIL_SEQ + 1, Some(syn_ack.seq + 1));
            let end = seq + first.len() as i32;
            packets.push(tcp((JAIL, 40000), target, TcpControl::None, seq, ack, b""));
            packets.push(tcp((JAIL, 40000), target, TcpControl::Psh, seq, ack, first));
            packets.push(tcp((JAIL, 40000), target, TcpControl::Fin, end, ack, b""));
            packets
        };
        let fronted = b"GET / HTTP/1.1\r\nHost: evil.test\r\n\r\n";
        [
            vec![lookup("example.com")],
            conversation(vec![], (ALLOWED, 80), get),
            conversation(vec![], (EXAMPLE_COM, 443), hello),
            conversation(
                vec![lookup("a.example.org")],
                (IpAddr::from([198, 18, 0, 3]), 80),
                fronted,
            ),
            vec![
                lookup("example.com"),
                syn(40001, (EXAMPLE_COM, 443)),
                syn(40002, (IpAddr::from([151, 101, 113, 7]), 81)),
            ],
            vec![tcp(
                (v6, 40000),
                (v6_target, 443),
                TcpControl::Syn,
                1000,
                None,
                b"",
            )],
            vec![
                udp((JAIL, 5000), (ALLOWED, 443), b"quic"),
                raw(JAIL, ALLOWED, 1, &[8, 0, 0xf7, 0xff, 0, 0, 0, 0]),
                raw(
                    v6,
                    "ff02::2".parse().unwrap(),
                    58,
                    &[133, 0, 0, 0, 0, 0, 0, 0],
                ),
                raw(JAIL, ALLOWED, 47, b"gre"),
            ],
            vec![syn(40003, (IpAddr::from([127, 0, 0, 1]), 80))],
        ]
        .iter()
        .map(|packets| fuzzing::join_packets(packets))
        .collect()
    }

    /// A control byte (what the destination expects, the segment size; see
    /// `fuzzing::first_bytes`), then the jail's stream.
    pub fn first_bytes() -> Vec<Vec<u8>> {
        let streams: [(u8, &[u8]); 7] = [
            (120, include_bytes!("../../../tests/data/client-hello-example.com.bin")),
            (
                4,
                b"GET / HTTP/1.1\r\nHost: example.com:8080\r\nAccept: */*\r\n\r\nGET /2 HTTP/1.1\r\nHost: xother.test\r\n\r\n",
            ),
            (
                30,
                b"POST /x HTTP/1.1\r\nhost: [2a04:4e42::1]:443\r\nContent-Length: 2\r\n\r\nhi",
            ),
            (
                63,
                b"POST / HTTP/1.1\r\nHost: a.test\r\nTransfer-Encoding: chunked\r\n\r\n5;x=y\r\nhello\r\n0\r\nT: 1\r\n\r\nGET / HTTP/1.1\r\nHost: a.test\r\n\r\n",
            ),
            (
                9,
                b"GET /ws HTTP/1.1\r\nHost: a.test\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\r\n\x81\x05hello",
            ),
            (0, b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"),
            (1, b"SSH-2.0-OpenSSH_9.2\r\n"),
        ];
        streams
            .iter()
            .map(|(control, stream)| [&[*control][..], stream].concat())
            .collect()
    }

    pub fn dns_query() -> Vec<Vec<u8>> {
        [
            ("example.com", TYPE::A),
            ("a.example.org", TYPE::AAAA),
            ("exfil.attacker.test", TYPE::TXT),
            ("1.0.18.198.in-addr.arpa", TYPE::PTR),
        ]
        .into_iter()
        .map(|(name, qtype)| dns::query(0x1234, name, qtype).unwrap())
        .collect()
    }
}

#[test]
fn ipv6_connections_are_relayed_like_ipv4_ones() {
    let mut jail = Jail::fuzz_policy();
    let v6 = IpAddr::V6(JAIL_ADDRESS_V6);
    let target: IpAddr = "2a04:4e42::7".parse().unwrap();
    jail.send([tcp(
        (v6, 40018),
        (target, 443),
        TcpControl::Syn,
        JAIL_SEQ,
        None,
        b"",
    )]);
    assert_eq!(
        jail.requests(),
        [Request::Connect {
            flow: 0,
            address: SocketAddr::new(target, 443)
        }]
    );
    let out = jail.accept(0);
    let [syn_ack] = segments(&out).try_into().unwrap();
    assert!(syn_ack.syn && syn_ack.ack);
    assert_eq!(syn_ack.to, IpEndpoint::new(v6.into(), 40018));
}

// ---- a session's policy replaced while it runs (`session_network`) ----

/// A held flow (name, claimed name, host address, port) and what a new policy says of it.
type Rejudged = (
    Option<&'static str>,
    Option<&'static str>,
    Option<IpAddr>,
    u16,
    Result<(), &'static str>,
);

#[test]
fn flows_are_judged_again_by_a_replaced_policy() {
    let policy = plan(
        &["example.com:443", "151.101.113.8:80"],
        &["db.test:127.0.0.1"],
        None,
        None,
    );
    let loopback = Some(IpAddr::from([127, 0, 0, 1]));
    let cases: [Rejudged; 8] = [
        (None, None, Some(ALLOWED), 80, Ok(())),
        (None, Some("anything.test"), Some(ALLOWED), 80, Ok(())),
        (
            None,
            None,
            Some(ALLOWED),
            81,
            Err("151.101.113.8 port 81 is not on the list"),
        ),
        (Some("example.com"), None, Some(RESOLVED), 443, Ok(())),
        (
            Some("example.com"),
            None,
            Some(RESOLVED),
            80,
            Err("example.com port 80 is not on the list"),
        ),
        (
            Some("example.com"),
            Some("other.test"),
            Some(RESOLVED),
            443,
            Err("other.test port 443 is not on the list"),
        ),
        // A pin makes a name resolve, not reachable: it needs a rule too.
        (
            Some("db.test"),
            None,
            loopback,
            5432,
            Err("db.test port 5432 is not on the list"),
        ),
        // Resolved to loopback with no pin of its own: DNS rebinding, as at opening.
        (
            Some("example.com"),
            None,
            loopback,
            443,
            Err("example.com is at a loopback address"),
        ),
    ];
    for (name, claimed, address, port, expected) in cases {
        assert_eq!(
            decide::still_allowed(&policy, name, claimed, address, port, &[]),
            expected.map_err(String::from),
            "{name:?} {claimed:?} {address:?} {port}"
        );
    }
}

#[test]
fn a_locked_policy_cuts_open_flows_it_refuses_and_keeps_the_others() {
    let mut jail = Jail::new(plan(
        &["151.101.113.7:81", "151.101.113.8:80"],
        &[],
        None,
        None,
    ));
    let kept = (IpAddr::from([151, 101, 113, 7]), 81);
    jail.send([syn(40020, (ALLOWED, 80)), syn(40021, kept)]);
    assert_eq!(jail.requests().len(), 2);
    let out = jail.accept(0);
    jail.complete_handshake(&out, 40020, (ALLOWED, 80));
    let out = jail.accept(1);
    jail.complete_handshake(&out, 40021, kept);
    assert_eq!(
        jail.relay
            .replace_policy(plan(&["151.101.113.7:81"], &[], None, None)),
        1
    );
    let out = jail.exchange();
    let resets: Vec<u16> = segments(&out)
        .iter()
        .filter(|s| s.rst)
        .map(|s| s.to.port)
        .collect();
    assert_eq!(resets, [40020], "only the refused flow is reset: {out:?}");
    assert_eq!(jail.host_reads(0), None, "its host side is closed");
    assert_eq!(jail.host_reads(1), Some(Vec::new()), "the other stays open");
    // The kept flow still relays.
    let out = jail.host_sends(1, b"still here");
    assert!(segments(&out).iter().any(|s| s.payload == b"still here"));
    // A new connection to the address the policy no longer allows is refused.
    assert_reset(&jail.send([syn(40022, (ALLOWED, 80))]), 40022);
    assert!(jail.requests().is_empty());
    let record = jail.finish();
    let reasons: Vec<Option<String>> = record
        .connections
        .iter()
        .filter(|c| c.address == Some(ALLOWED))
        .map(|c| c.reason.clone())
        .collect();
    assert!(
        reasons.iter().any(|reason| reason.as_deref()
            == Some(
                "the session's network policy changed: 151.101.113.8 port 80 is not on the list"
            )),
        "{reasons:?}"
    );
    assert_eq!(
        record.rules,
        ["151.101.113.7:81"],
        "the record has the policy in force"
    );
}

#[test]
fn a_held_connection_the_new_policy_refuses_is_reset() {
    let mut jail = Jail::fuzz_policy();
    jail.send([syn(40023, (EXAMPLE_COM, 443))]);
    assert_eq!(jail.requests(), [Request::Resolve("example.com".into())]);
    assert_eq!(jail.relay.replace_policy(plan(&[], &[], None, None)), 1);
    assert_reset(&jail.exchange(), 40023);
    // The lookup's answer comes after all: nothing is waiting for it.
    jail.relay.resolved("example.com", Ok(vec![RESOLVED]));
    assert!(jail.requests().is_empty());
    assert_eq!(jail.relay.flows(), 0);
}

#[test]
fn an_opened_policy_lets_new_names_and_addresses_through() {
    let mut jail = Jail::new(plan(&[], &[], None, None));
    assert_eq!(ask(&mut jail, "example.com"), (RCODE::NameError, None));
    assert_reset(&jail.send([syn(40024, (ALLOWED, 80))]), 40024);
    assert_eq!(
        jail.relay.replace_policy(plan(
            &["example.com:443", "151.101.113.8:80"],
            &[],
            None,
            None
        )),
        0
    );
    let (rcode, address) = ask(&mut jail, "example.com");
    assert_eq!(rcode, RCODE::NoError);
    let address = IpAddr::V4(address.expect("a synthetic address"));
    jail.send([syn(40025, (address, 443)), syn(40026, (ALLOWED, 80))]);
    assert_eq!(
        jail.requests(),
        [
            Request::Resolve("example.com".into()),
            Request::Connect {
                flow: 1,
                address: SocketAddr::new(ALLOWED, 80)
            }
        ]
    );
}

#[test]
fn an_encrypted_client_hello_passes_only_where_an_ech_rule_names_its_outer_name() {
    use crate::net::inspect::Claim;
    let policy = plan(
        &["ech://cloudflare-ech.com:443", "web.test:443"],
        &[],
        None,
        None,
    );
    let target = IpEndpoint::new(smoltcp::wire::IpAddress::v4(198, 18, 0, 1), 443);
    let tls = |sni, ech| Claim::Tls {
        sni: Some(sni),
        ech,
    };
    let judged = |name, claim| decide::claim(&policy, Some(name), target, claim);
    assert_eq!(
        judged("cloudflare-ech.com", tls("cloudflare-ech.com", true)),
        Ok(())
    );
    let refused = judged("web.test", tls("web.test", true)).unwrap_err();
    assert_eq!(
        refused,
        "a TLS ClientHello for web.test is encrypted (ECH), which hides the server it is really for; brig refuses ECH unless a rule allows it for that outer name: --allow-net ech://web.test:443"
    );
    assert_eq!(judged("web.test", tls("web.test", false)), Ok(()));
    assert!(
        judged(
            "web.test",
            Claim::Tls {
                sni: None,
                ech: false
            }
        )
        .is_err()
    );
    // A connection to an address rule: the operator named the address.
    assert_eq!(
        decide::claim(&policy, None, target, tls("any.test", true)),
        Ok(())
    );
}

#[test]
fn a_raw_flow_ends_when_the_replaced_policy_no_longer_allows_raw_tcp() {
    let raw = || plan(&["tcp://151.101.113.8:5432"], &[], None, None);
    let mut jail = Jail::new(raw());
    jail.send([syn(40030, (ALLOWED, 5432))]);
    jail.requests();
    let out = jail.accept(0);
    jail.complete_handshake(&out, 40030, (ALLOWED, 5432));
    assert_eq!(jail.relay.replace_policy(raw()), 0, "still raw: kept");
    let judged = plan(&["151.101.113.8:5432"], &[], None, None);
    assert_eq!(jail.relay.replace_policy(judged), 1);
    let out = jail.exchange();
    assert!(segments(&out).iter().any(|s| s.rst), "{out:?}");
    let (_, _, _, _, reason, _) = only_connection(&jail.finish());
    assert_eq!(
        reason.as_deref(),
        Some(
            "the session's network policy changed: no tcp:// rule allows raw TCP to port 5432 any more"
        )
    );
}
