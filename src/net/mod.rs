//! `--net filtered`: the jail's network namespace gets a TUN device as its default route
//! and a virtual DNS server; brig's supervisor, which stays in the host's network
//! namespace, reads the jail's packets, terminates TCP in a user-mode stack (smoltcp) and
//! opens each outbound connection itself, only after the policy says yes.
//!
//! - `policy`: the rules (`--allow-net`, `--add-host`), planned and matched;
//! - `dns`: the jail's resolver: allowed names get a synthetic address, others NXDOMAIN;
//! - `resolve`: the host-side lookup of an allowed name, at connect time;
//! - `inspect`: a connection's bytes read as a strict server reads them (every HTTP request
//!   head, the whole TLS ClientHello), and the names they claim;
//! - `host`: the host's own addresses, which allowed names must not resolve to;
//! - `tun` (child half): create and address the TUN device inside the jail;
//! - `forward` (parent half): the user-mode stack and the connections it relays;
//! - `secrets`: `--secret`, the jail's CA and the upstream trust of the connections brig
//!   decrypts to put a secret in (`forward::terminate`);
//! - `record`: what the verdict says about the network.

use std::net::{Ipv4Addr, Ipv6Addr};

/// The jail's address on its TUN device, in a /24 with the gateway and the resolver.
pub const JAIL_ADDRESS: Ipv4Addr = Ipv4Addr::new(10, 0, 2, 100);
pub const JAIL_PREFIX: u8 = 24;
/// The default route's next hop (brig's side of the TUN device).
pub const GATEWAY: Ipv4Addr = Ipv4Addr::new(10, 0, 2, 2);
/// The jail's IPv6 address and brig's side, in a unique-local /64 (where the kernel
/// has IPv6): IPv6 literals and `[IPV6]` rules work like IPv4 ones.
pub const JAIL_ADDRESS_V6: Ipv6Addr = Ipv6Addr::new(0xfd00, 0xb216, 0, 0, 0, 0, 0, 0x100);
pub const JAIL_PREFIX_V6: u8 = 64;
pub const GATEWAY_V6: Ipv6Addr = Ipv6Addr::new(0xfd00, 0xb216, 0, 0, 0, 0, 0, 2);
/// The virtual DNS server the jail's /etc/resolv.conf names.
pub const RESOLVER: Ipv4Addr = Ipv4Addr::new(10, 0, 2, 3);
/// Allowed names resolve, inside the jail, to addresses of this range (RFC 2544's
/// benchmarking block, never routed on the internet); brig maps each back to its name.
pub const SYNTHETIC_NET: Ipv4Addr = Ipv4Addr::new(198, 18, 0, 0);
pub const SYNTHETIC_PREFIX: u8 = 15;
/// The TUN device's name and MTU: large, as slirp4netns does, so that bulk transfers
/// cross the device in few packets.
pub const TUN_NAME: &str = "tun0";
pub const TUN_MTU: u32 = 65520;

pub mod dns;
pub mod forward;
pub mod host;
pub mod inspect;
pub mod policy;
pub mod record;
pub mod resolve;
pub mod secrets;
pub mod tun;
