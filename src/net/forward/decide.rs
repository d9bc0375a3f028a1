//! The forwarder's decisions, apart from its mechanism (the TUN descriptor, smoltcp, host
//! sockets): what a packet the jail wrote is ([`classify`]), and whether a new connection
//! may be opened and how ([`open`]). Pure functions of their arguments, so the unit tests
//! and the fuzz targets call them directly.

use super::super::inspect::{Claim, Expect};
use super::super::policy::Policy;
use super::super::{RESOLVER, SYNTHETIC_NET, SYNTHETIC_PREFIX};
use smoltcp::wire::{IpEndpoint, IpProtocol, Ipv4Packet, Ipv6Packet, TcpPacket, UdpPacket};
use std::collections::HashMap;
use std::net::{IpAddr, Ipv4Addr};

/// What one packet from the jail is, as far as the forwarder cares.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Packet {
    /// Not an IP packet, or its IP or TCP header is cut short or inconsistent: dropped
    /// unrecorded (the jail's kernel never writes one; only a raw socket can).
    Malformed,
    /// One fragment of an IPv4 packet. smoltcp is built without reassembly and would take
    /// the fragment's payload for a whole packet (a first fragment would open a host
    /// connection for a SYN that never completes): dropped and recorded.
    Fragment { destination: IpAddr },
    /// TCP between `jail` and `target`; `opening`: a SYN without ACK.
    Tcp {
        jail: IpEndpoint,
        target: IpEndpoint,
        opening: bool,
    },
    /// UDP to brig's resolver on port 53: smoltcp's resolver socket takes it.
    Dns,
    /// Any other UDP (port None: the UDP header is cut short): dropped and recorded.
    Udp {
        destination: IpAddr,
        port: Option<u16>,
    },
    /// The jail's kernel's own IPv6 chatter on the device (router solicitations, MLD,
    /// neighbour discovery): not the program's doing, dropped unrecorded.
    Chatter,
    /// ICMP or ICMPv6 from the program: dropped and recorded.
    Icmp { destination: IpAddr },
    /// Another IP protocol (or an IPv6 extension header): dropped and recorded.
    Other { protocol: u8, destination: IpAddr },
}

/// Sorts one packet the jail wrote to its TUN device.
pub fn classify(packet: &[u8]) -> Packet {
    let Some(header) = IpHeader::parse(packet) else {
        return Packet::Malformed;
    };
    let destination = header.destination;
    if header.fragment {
        return Packet::Fragment { destination };
    }
    let transport = &packet[header.payload..header.end];
    match header.protocol {
        IpProtocol::Tcp => {
            let Ok(tcp) = TcpPacket::new_checked(transport) else {
                return Packet::Malformed;
            };
            Packet::Tcp {
                jail: IpEndpoint::new(header.source.into(), tcp.src_port()),
                target: IpEndpoint::new(destination.into(), tcp.dst_port()),
                opening: tcp.syn() && !tcp.ack(),
            }
        }
        IpProtocol::Udp => {
            let port = UdpPacket::new_checked(transport)
                .map(|udp| udp.dst_port())
                .ok();
            if destination == IpAddr::V4(RESOLVER) && port == Some(53) {
                Packet::Dns
            } else {
                Packet::Udp { destination, port }
            }
        }
        IpProtocol::Icmpv6 if destination.is_multicast() => Packet::Chatter,
        IpProtocol::Icmp | IpProtocol::Icmpv6 => Packet::Icmp { destination },
        other => Packet::Other {
            protocol: other.into(),
            destination,
        },
    }
}

/// What the forwarder does with a new connection (a SYN no flow knows), by the policy
/// alone; the caps (`--net-bytes`, `--net-connections`) are the relay's to add.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Opening {
    /// Reset the jail's SYN and record why (with the name behind a synthetic address).
    Refuse {
        name: Option<String>,
        reason: String,
    },
    /// An allowed name behind a synthetic address: look it up on the host, check the
    /// addresses it resolves to, then connect.
    Resolve(String),
    /// An address an `IP`/`CIDR` rule allows: connect to it.
    Connect(IpAddr),
}

/// Decides a connection from the jail to `target` (`own`: the host's addresses, refused
/// to a policy that lets the rest out unless a rule names them).
pub fn open(policy: &Policy, names: &Names, target: IpEndpoint, own: &[IpAddr]) -> Opening {
    let address = IpAddr::from(target.addr);
    let port = target.port;
    match address {
        IpAddr::V4(v4) if in_synthetic_range(v4) => match names.name_of(v4) {
            None => Opening::Refuse {
                name: None,
                reason: "an address brig's resolver never gave out".into(),
            },
            Some(name) if policy.name_allowed(name, port) => Opening::Resolve(name.to_string()),
            Some(name) => Opening::Refuse {
                name: Some(name.to_string()),
                reason: match policy.denying_name(name, port) {
                    Some(rule) => format!("{name} is denied (--deny-net {})", rule.text),
                    None => format!("port {port} is not allowed for {name}"),
                },
            },
        },
        _ => match policy.direct_refusal(address, port, own) {
            None => Opening::Connect(address),
            Some(reason) => Opening::Refuse { name: None, reason },
        },
    }
}

/// Whether a flow brig already holds would be let through by `policy` were it opening
/// now (a session's policy was replaced): its name (the one the jail resolved, and the
/// one its first bytes claimed) on its port, the host address brig connected to checked
/// as after a lookup; an address rule's flow, its address. `Err`: why not.
pub fn still_allowed(
    policy: &Policy,
    name: Option<&str>,
    claimed: Option<&str>,
    address: Option<IpAddr>,
    port: u16,
    own: &[IpAddr],
) -> Result<(), String> {
    let Some(name) = name else {
        return match address {
            Some(address) => match policy.direct_refusal(address, port, own) {
                None => Ok(()),
                Some(_) if !policy.lets_the_rest_out() => {
                    Err(format!("{address} port {port} is not on the list"))
                }
                Some(reason) => Err(format!("{address} port {port}: {reason}")),
            },
            None => Err("not on the list".into()),
        };
    };
    if !policy.name_allowed(name, port) {
        return Err(format!("{name} port {port} is not on the list"));
    }
    if let Some(claimed) = claimed
        && claimed != name
        && claimed.parse::<IpAddr>().is_err()
        && !policy.name_allowed(claimed, port)
    {
        return Err(format!("{claimed} port {port} is not on the list"));
    }
    match address.and_then(|address| policy.address_refusal(address, Some(name), port, own)) {
        Some(range) => Err(format!("{name} is at a {range} address")),
        None => Ok(()),
    }
}

/// What the policy expects on a connection to `name` (or `address`) on `port`: raw TCP
/// where a `tcp://` rule allows it, HTTP or TLS on ports 80 and 443, else HTTP or TLS
/// judged when the bytes are that and anything else relayed unread.
pub fn expect(policy: &Policy, name: Option<&str>, address: IpAddr, port: u16) -> Expect {
    if policy.raw_allowed(name, address, port) {
        Expect::Raw
    } else if matches!(port, 80 | 443) {
        Expect::Web
    } else {
        Expect::Any
    }
}

/// Judges a name the connection's bytes claim (an HTTP request's Host, a ClientHello's
/// server name) on a connection brig opened for `name` (None: for an address rule, where
/// the operator allowed the address itself, whatever name is asked of it). Err: why not,
/// and what to change.
pub fn claim(
    policy: &Policy,
    name: Option<&str>,
    target: IpEndpoint,
    claim: Claim,
) -> Result<(), String> {
    let Some(name) = name else {
        return Ok(());
    };
    let port = target.port;
    let kind = claim.kind();
    if let Claim::Tls {
        sni: Some(outer),
        ech: true,
    } = claim
        && !policy.ech_allowed(outer, port)
    {
        return Err(format!(
            "a TLS ClientHello for {outer} is encrypted (ECH), which hides the server it is really for; brig refuses ECH unless a rule allows it for that outer name: --allow-net ech://{outer}:{port}"
        ));
    }
    let Some(claimed) = claim.name() else {
        return Err(format!(
            "a TLS ClientHello without a server name (SNI) on a connection for {name}; brig judges TLS by the name it asks for, so connect by name"
        ));
    };
    let names_target = claimed.parse::<IpAddr>().ok() == Some(target.addr.into());
    if claimed == name || names_target || policy.name_allowed(claimed, port) {
        return Ok(());
    }
    Err(format!(
        "{kind} names {claimed}, which is not on the list (connection for {name}); to allow it add --allow-net {claimed}:{port}"
    ))
}

/// What the forwarder needs of a packet's IP header.
struct IpHeader {
    source: IpAddr,
    destination: IpAddr,
    protocol: IpProtocol,
    /// Where the transport header starts and the IP packet ends (a TUN read holds one
    /// packet, but its header's length field rules).
    payload: usize,
    end: usize,
    /// An IPv4 fragment (more fragments follow, or this one is not the first).
    fragment: bool,
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
                    end: usize::from(ip.total_len()),
                    fragment: ip.more_frags() || ip.frag_offset() != 0,
                })
            }
            6 => {
                let ip = Ipv6Packet::new_checked(packet).ok()?;
                Some(IpHeader {
                    source: IpAddr::V6(ip.src_addr()),
                    destination: IpAddr::V6(ip.dst_addr()),
                    protocol: ip.next_header(),
                    payload: ip.header_len(),
                    end: ip.total_len(),
                    fragment: false,
                })
            }
            _ => None,
        }
    }
}

pub fn in_synthetic_range(address: Ipv4Addr) -> bool {
    let mask = u32::MAX << (32 - SYNTHETIC_PREFIX);
    u32::from(address) & mask == u32::from(SYNTHETIC_NET) & mask
}

/// The synthetic addresses the jail's resolver gives out, and the names behind them.
pub struct Names {
    by_address: HashMap<Ipv4Addr, String>,
    by_name: HashMap<String, Ipv4Addr>,
    next: u32,
}

impl Names {
    pub fn new(policy: &Policy) -> Names {
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

    pub fn name_of(&self, address: Ipv4Addr) -> Option<&str> {
        self.by_address.get(&address).map(String::as_str)
    }

    /// The name's synthetic address, given out now if it has none yet; None once the
    /// range is used up.
    pub fn address_for(&mut self, name: &str) -> Option<Ipv4Addr> {
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
