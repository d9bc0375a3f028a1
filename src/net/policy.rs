//! The egress policy of `--net filtered`: the `--allow-net` and `--deny-net` rules and
//! `--add-host` pins, parsed and checked before the jail exists, and the questions the
//! forwarder asks of them (may this name be resolved, may this name or address be reached
//! on this port, may brig connect to this address it resolved).
//!
//! Without `--deny-net` the policy is an allow list: only what a rule names goes out. With
//! it, the policy is E2B's `denyOut`: what a deny rule names is refused unless an
//! `--allow-net` rule names it too (allow wins), and everything else goes out, except the
//! ranges brig always refuses (loopback, private, link-local...: [`denied_range`], and the
//! host's own addresses) unless an IP rule or a pin names them.
//!
//! Rules use Deno's `--allow-net` spelling: `HOST[:PORT]`, `*.DOMAIN[:PORT]` (any depth of
//! subdomain, not the bare domain), `IP[:PORT]`, `CIDR[:PORT]`, IPv6 in brackets; with
//! `tcp://` in front and a port (`tcp://db.example:5432`), raw TCP to it is relayed unread
//! (without it, ports 80 and 443 carry only HTTP or TLS, judged).

use crate::error::{Error, Result};
use crate::units::Size;
use ipnet::IpNet;
use serde::{Serialize, Serializer};
use std::fmt;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::str::FromStr;

/// What a rule's host part matches.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Host {
    /// Exactly this name (lowercase, no trailing dot).
    Name(String),
    /// Any name that ends in `.DOMAIN`, at any depth; not DOMAIN itself.
    Suffix(String),
    Ip(IpAddr),
    Cidr(IpNet),
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Rule {
    pub host: Host,
    /// None: any port.
    pub port: Option<u16>,
    /// `tcp://`: bytes that are neither HTTP nor TLS may pass, unread.
    pub raw: bool,
    /// `ech://`: an encrypted ClientHello whose outer server name this rule matches may
    /// pass (the name inside is never seen).
    pub ech: bool,
    /// The rule as the operator wrote it, for the record and for error messages.
    pub text: String,
}

/// `--add-host NAME:IP`: NAME resolves to IP, which brig connects to even in a denied
/// range, because the operator named it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Pin {
    pub name: String,
    pub ip: IpAddr,
}

#[derive(Clone, Debug, Serialize)]
#[serde(rename_all = "kebab-case")]
pub struct Policy {
    #[serde(rename = "allow-net")]
    pub rules: Vec<Rule>,
    /// `--deny-net`: refused unless an allow rule names it too; with any, the rest goes out.
    #[serde(rename = "deny-net", skip_serializing_if = "Vec::is_empty")]
    pub deny: Vec<Rule>,
    #[serde(rename = "add-host", skip_serializing_if = "Vec::is_empty")]
    pub pins: Vec<Pin>,
    /// `--net-bytes`: total bytes relayed, both ways, before every connection is cut and
    /// new ones refused.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_bytes: Option<u64>,
    /// `--net-connections`: connections open at once (each may hold up to about a MiB
    /// of brig's memory while the jail reads slowly).
    pub max_connections: u32,
    /// `--secret`: the hosts whose TLS brig terminates to put a secret in (names and
    /// hosts shown, never a value).
    #[serde(
        skip_serializing_if = "Option::is_none",
        serialize_with = "super::secrets::shown"
    )]
    pub secrets: Option<std::sync::Arc<super::secrets::Secrets>>,
}

/// Connections open at once without `--net-connections`: bounds what a jail can make
/// brig hold in memory.
pub const DEFAULT_MAX_CONNECTIONS: u32 = 256;

impl Policy {
    /// Parses and checks every rule and pin; the first bad one is a one-line input error.
    pub fn plan(
        allow_net: &[String],
        add_host: &[String],
        net_bytes: Option<Size>,
        net_connections: Option<u32>,
    ) -> Result<Policy> {
        let rules = allow_net
            .iter()
            .map(|text| text.parse::<Rule>().map_err(Error::input))
            .collect::<Result<Vec<Rule>>>()?;
        let mut pins: Vec<Pin> = Vec::new();
        for text in add_host {
            let pin: Pin = text.parse().map_err(Error::input)?;
            if let Some(earlier) = pins.iter().find(|earlier| earlier.name == pin.name) {
                if earlier.ip != pin.ip {
                    return Err(Error::input(format!(
                        "--add-host {text}: {} is already pinned to {}; give each name one address",
                        pin.name, earlier.ip
                    )));
                }
                continue;
            }
            pins.push(pin);
        }
        if net_bytes.is_some_and(|size| size.0 == 0) {
            return Err(Error::input(
                "--net-bytes: must be more than 0; e.g. 100M (leave it out for no cap)",
            ));
        }
        if net_connections == Some(0) {
            return Err(Error::input(
                "--net-connections: must be at least 1; e.g. 64 (leave it out for no cap)",
            ));
        }
        Ok(Policy {
            rules,
            deny: Vec::new(),
            pins,
            max_bytes: net_bytes.map(|size| size.0),
            max_connections: net_connections.unwrap_or(DEFAULT_MAX_CONNECTIONS),
            secrets: None,
        })
    }

    /// The policy with `--deny-net` rules (same spelling as `--allow-net`'s, without a
    /// scheme): from then on it lets out what they do not name.
    pub fn deny(mut self, deny_net: &[String]) -> Result<Policy> {
        self.deny = deny_net
            .iter()
            .map(|text| Rule::parse(text, "--deny-net").map_err(Error::input))
            .collect::<Result<Vec<Rule>>>()?;
        if let Some(rule) = self.deny.iter().find(|rule| rule.raw || rule.ech) {
            return Err(Error::input(format!(
                "--deny-net {}: a deny rule takes no scheme (it refuses every byte to what it names); write HOST[:PORT], IP[:PORT] or CIDR[:PORT]",
                rule.text
            )));
        }
        Ok(self)
    }

    /// Does the policy let out what no rule names (it has `--deny-net` rules)?
    pub fn lets_the_rest_out(&self) -> bool {
        !self.deny.is_empty()
    }

    /// May the jail connect to `name` on `port`? An allow rule names it, or the policy
    /// lets the rest out and no deny rule names it.
    pub fn name_allowed(&self, name: &str, port: u16) -> bool {
        self.name_listed_on(name, port)
            || (self.lets_the_rest_out() && self.denying_name(name, port).is_none())
    }

    /// Does an `--allow-net` rule name `name` on `port`?
    fn name_listed_on(&self, name: &str, port: u16) -> bool {
        self.rules
            .iter()
            .any(|rule| rule.matches_name(name) && rule.port.is_none_or(|only| only == port))
    }

    /// The `--deny-net` rule that names `name` on `port`, if one does.
    pub fn denying_name(&self, name: &str, port: u16) -> Option<&Rule> {
        self.deny
            .iter()
            .find(|rule| rule.matches_name(name) && rule.port.is_none_or(|only| only == port))
    }

    /// Does the jail's resolver answer for `name` (some rule names it, on some port, the
    /// operator pinned it, or the policy lets the rest out and no deny rule refuses the
    /// name on every port)? Any other name is NXDOMAIN, and no query leaves the host.
    pub fn name_listed(&self, name: &str) -> bool {
        self.pinned(name).is_some()
            || self.rules.iter().any(|rule| rule.matches_name(name))
            || (self.lets_the_rest_out()
                && !self
                    .deny
                    .iter()
                    .any(|rule| rule.matches_name(name) && rule.port.is_none()))
    }

    /// May the jail connect to `ip` on `port` because an `IP` or `CIDR` allow rule names
    /// it (the operator meant it, whatever its range)?
    pub fn ip_allowed(&self, ip: IpAddr, port: u16) -> bool {
        let ip = canonical(ip);
        self.rules
            .iter()
            .any(|rule| rule.matches_ip(ip) && rule.port.is_none_or(|only| only == port))
    }

    /// Does a `--deny-net` `IP` or `CIDR` rule name `ip` on `port`?
    fn ip_denied(&self, ip: IpAddr, port: u16) -> bool {
        let ip = canonical(ip);
        self.deny
            .iter()
            .any(|rule| rule.matches_ip(ip) && rule.port.is_none_or(|only| only == port))
    }

    /// May the jail connect to `ip` on `port` directly, by address (not through brig's
    /// resolver)? An IP allow rule names it, or the policy lets the rest out and
    /// [`Policy::address_refusal`] finds nothing against it. Some: why not.
    pub fn direct_refusal(&self, ip: IpAddr, port: u16, own: &[IpAddr]) -> Option<String> {
        if self.ip_allowed(ip, port) {
            return None;
        }
        if !self.lets_the_rest_out() {
            return Some(
                denied_range(ip)
                    .map(|range| format!("{range} address, not on the list"))
                    .unwrap_or_else(|| "not on the list".into()),
            );
        }
        self.address_refusal(ip, None, port, own)
            .map(|why| format!("{why} address"))
    }

    /// Does a `tcp://` rule allow raw TCP to `name` (or, for a connection to an address,
    /// to `ip`) on `port`?
    pub fn raw_allowed(&self, name: Option<&str>, ip: IpAddr, port: u16) -> bool {
        let ip = canonical(ip);
        self.rules.iter().any(|rule| {
            rule.raw
                && rule.port == Some(port)
                && match name {
                    Some(name) => rule.matches_name(name),
                    None => rule.matches_ip(ip),
                }
        })
    }

    /// Does an `ech://` rule allow an encrypted ClientHello whose outer name is `name`?
    pub fn ech_allowed(&self, name: &str, port: u16) -> bool {
        self.rules.iter().any(|rule| {
            rule.ech && rule.matches_name(name) && rule.port.is_none_or(|only| only == port)
        })
    }

    pub fn pinned(&self, name: &str) -> Option<IpAddr> {
        self.pins
            .iter()
            .find(|pin| pin.name == name)
            .map(|pin| pin.ip)
    }

    /// Why brig must not connect to `ip`, an address it resolved for `name` (or was given
    /// directly): a `--deny-net` rule names it (unless an allow rule names it or `name`:
    /// allow wins), or it is in a denied range or one of the host's own addresses (`own`),
    /// unless an `IP`/`CIDR` allow rule or a pin of `name` names it. Checked after
    /// resolution, so an allowed name that resolves to 127.0.0.1 or to the host's public
    /// address (DNS rebinding) is still refused, and so is a name that resolves into a
    /// denied block.
    pub fn address_refusal(
        &self,
        ip: IpAddr,
        name: Option<&str>,
        port: u16,
        own: &[IpAddr],
    ) -> Option<&'static str> {
        if self.ip_allowed(ip, port) {
            return None;
        }
        let name_listed = name.is_some_and(|name| self.name_listed_on(name, port));
        if !name_listed && self.ip_denied(ip, port) {
            return Some("denied (a --deny-net rule names it)");
        }
        let pinned_here = name
            .and_then(|name| self.pinned(name))
            .is_some_and(|pinned| canonical(pinned) == canonical(ip));
        if pinned_here {
            return None;
        }
        denied_range(ip).or_else(|| {
            own.iter()
                .any(|address| canonical(*address) == canonical(ip))
                .then_some("host-own (an address of one of this host's interfaces)")
        })
    }

    /// One warning per rule that names loopback (`127.0.0.1`, `[::1]`, `localhost`, a CIDR
    /// around them): in the jail those are the jail's own `lo`, which needs no rule, not
    /// the host's, so the rule lets nothing through; the way to the host's loopback is a
    /// name pinned to it.
    pub fn loopback_warnings(&self) -> Vec<String> {
        let v4 = IpAddr::V4(Ipv4Addr::LOCALHOST);
        let v6 = IpAddr::V6(Ipv6Addr::LOCALHOST);
        self.rules
            .iter()
            .filter_map(|rule| {
                let pin = match &rule.host {
                    Host::Ip(ip) if canonical(*ip).is_loopback() => canonical(*ip),
                    Host::Cidr(net) if net.contains(&v4) => v4,
                    Host::Cidr(net) if net.contains(&v6) => v6,
                    Host::Name(name) if name == "localhost" || name.ends_with(".localhost") => v4,
                    Host::Suffix(domain) if domain == "localhost" => v4,
                    _ => return None,
                };
                let pin = match pin {
                    IpAddr::V6(ip) => format!("[{ip}]"),
                    IpAddr::V4(ip) => ip.to_string(),
                };
                let port = rule.port.map_or("PORT".to_string(), |port| port.to_string());
                Some(format!(
                    "--allow-net {}: in the jail this is the jail's own loopback (which needs no rule), not the host's, so the rule lets nothing through; to reach a server on the host's loopback, pin a name to it: `--add-host host.test:{pin} --allow-net host.test:{port}`",
                    rule.text
                ))
            })
            .collect()
    }

    /// The names the jail's /etc/hosts lists, with the synthetic addresses the resolver
    /// gives them: every exact name of a rule, then every pinned name, from 198.18.0.1 on.
    pub fn synthetic_hosts(&self) -> Vec<(String, Ipv4Addr)> {
        let names = self
            .rules
            .iter()
            .filter_map(|rule| match &rule.host {
                Host::Name(name) => Some(name.as_str()),
                _ => None,
            })
            .chain(self.pins.iter().map(|pin| pin.name.as_str()));
        let mut hosts: Vec<(String, Ipv4Addr)> = Vec::new();
        for name in names {
            if hosts.iter().all(|(known, _)| known != name) {
                let address =
                    Ipv4Addr::from(u32::from(super::SYNTHETIC_NET) + 1 + hosts.len() as u32);
                hosts.push((name.to_string(), address));
            }
        }
        hosts
    }
}

impl Rule {
    fn matches_name(&self, name: &str) -> bool {
        match &self.host {
            Host::Name(exact) => exact == name,
            Host::Suffix(domain) => name
                .strip_suffix(domain.as_str())
                .is_some_and(|head| head.len() > 1 && head.ends_with('.')),
            Host::Ip(_) | Host::Cidr(_) => false,
        }
    }

    fn matches_ip(&self, ip: IpAddr) -> bool {
        match &self.host {
            Host::Ip(only) => canonical(*only) == ip,
            Host::Cidr(net) => net.contains(&ip),
            Host::Name(_) | Host::Suffix(_) => false,
        }
    }
}

/// The range `ip` belongs to when it is one a jail must not reach unless the operator
/// names it: the host itself, private networks, link-local (cloud metadata), and the
/// like, IPv4-mapped and NAT64 forms of them included.
pub fn denied_range(ip: IpAddr) -> Option<&'static str> {
    match canonical(ip) {
        IpAddr::V4(v4) => denied_v4(v4),
        IpAddr::V6(v6) => denied_v6(v6),
    }
}

fn denied_v4(ip: Ipv4Addr) -> Option<&'static str> {
    let [a, b, _, _] = ip.octets();
    Some(match (a, b) {
        (0, _) => "unspecified (0.0.0.0/8)",
        (127, _) => "loopback",
        (10, _) | (192, 168) => "private (RFC 1918)",
        (172, 16..=31) => "private (RFC 1918)",
        (169, 254) => "link-local (metadata)",
        (100, 64..=127) => "shared (CGNAT 100.64.0.0/10)",
        (198, 18..=19) => "benchmarking (198.18.0.0/15)",
        (224..=239, _) => "multicast",
        (240..=255, _) => "reserved",
        (192, 0) if ip.octets()[2] == 0 => "IETF protocol (192.0.0.0/24)",
        (192, 0) if ip.octets()[2] == 2 => "documentation (TEST-NET-1 192.0.2.0/24)",
        (198, 51) if ip.octets()[2] == 100 => "documentation (TEST-NET-2 198.51.100.0/24)",
        (203, 0) if ip.octets()[2] == 113 => "documentation (TEST-NET-3 203.0.113.0/24)",
        (192, 88) if ip.octets()[2] == 99 => "deprecated 6to4 relay (192.88.99.0/24)",
        _ => return None,
    })
}

fn denied_v6(ip: Ipv6Addr) -> Option<&'static str> {
    let first = ip.segments()[0];
    Some(match first {
        _ if ip.is_unspecified() => "unspecified (::)",
        _ if ip.is_loopback() => "loopback",
        0xfe80..=0xfebf => "link-local (fe80::/10)",
        0xfc00..=0xfdff => "unique-local (fc00::/7)",
        0xff00..=0xffff => "multicast",
        0xfec0..=0xfeff => "site-local (fec0::/10)",
        _ => return special_v6(ip),
    })
}

/// IANA's IPv6 special-purpose ranges that are not globally reachable, or that carry
/// another address inside (6to4, Teredo) which brig would not see.
fn special_v6(ip: Ipv6Addr) -> Option<&'static str> {
    const RANGES: [(&str, u8, &str); 10] = [
        ("100::", 64, "discard-only (100::/64)"),
        ("64:ff9b:1::", 48, "local-use NAT64 (64:ff9b:1::/48)"),
        ("2001::", 32, "Teredo (2001::/32)"),
        ("2001:2::", 48, "benchmarking (2001:2::/48)"),
        ("2001:10::", 28, "deprecated ORCHID (2001:10::/28)"),
        ("2001:20::", 28, "ORCHIDv2 (2001:20::/28)"),
        ("2001:db8::", 32, "documentation (2001:db8::/32)"),
        ("3fff::", 20, "documentation (3fff::/20)"),
        ("2002::", 16, "6to4 (2002::/16)"),
        ("5f00::", 16, "segment routing (5f00::/16)"),
    ];
    let bits = u128::from(ip);
    RANGES.iter().find_map(|(network, prefix, label)| {
        let network = u128::from(network.parse::<Ipv6Addr>().ok()?);
        let mask = u128::MAX << (128 - u32::from(*prefix));
        (bits & mask == network).then_some(*label)
    })
}

/// The IPv4 address behind IPv4-mapped (`::ffff:a.b.c.d`), IPv4-compatible (`::a.b.c.d`)
/// and NAT64 (`64:ff9b::a.b.c.d`) IPv6 forms, so that every spelling meets the same checks.
fn canonical(ip: IpAddr) -> IpAddr {
    let IpAddr::V6(v6) = ip else {
        return ip;
    };
    if let Some(v4) = v6.to_ipv4_mapped() {
        return IpAddr::V4(v4);
    }
    let segments = v6.segments();
    let embedded = Ipv4Addr::from((u32::from(segments[6]) << 16) | u32::from(segments[7]));
    let compatible = segments[..6] == [0; 6] && u32::from(embedded) > 1;
    let nat64 = segments[..6] == [0x64, 0xff9b, 0, 0, 0, 0];
    if compatible || nat64 {
        IpAddr::V4(embedded)
    } else {
        ip
    }
}

impl FromStr for Rule {
    type Err = String;

    fn from_str(text: &str) -> std::result::Result<Rule, String> {
        Rule::parse(text, "--allow-net")
    }
}

impl Rule {
    /// A rule as `flag` (`--allow-net`, `--deny-net`) gives it; errors name the flag.
    pub fn parse(text: &str, flag: &str) -> std::result::Result<Rule, String> {
        let bad = |why: &str| format!("{flag} {text}: {why}");
        let (scheme, rest) = match text.split_once("://") {
            None => (String::new(), text),
            Some((scheme, rest)) => (scheme.to_ascii_lowercase(), rest),
        };
        let (raw, ech) = match scheme.as_str() {
            "" => (false, false),
            "tcp" => (true, false),
            "ech" => (false, true),
            _ => {
                return Err(bad(&format!(
                    "'{scheme}://' is not a rule scheme; write HOST[:PORT] (HTTP and TLS are judged by what they name), tcp://HOST:PORT for raw TCP or ech://NAME[:PORT] for encrypted ClientHellos"
                )));
            }
        };
        let (host, port) = split_host_port(rest).map_err(|why| bad(&why))?;
        let port = port
            .map(|port| parse_port(port).map_err(|why| bad(&why)))
            .transpose()?;
        if raw && port.is_none() {
            return Err(bad(
                "a tcp:// rule names its port, e.g. tcp://db.example:5432",
            ));
        }
        let host = parse_host(host).map_err(|why| bad(&why))?;
        if ech && !matches!(host, Host::Name(_) | Host::Suffix(_)) {
            return Err(bad(
                "an ech:// rule names the outer server name, e.g. ech://cloudflare-ech.com:443",
            ));
        }
        Ok(Rule {
            host,
            port,
            raw,
            ech,
            text: text.to_string(),
        })
    }
}

/// Splits `HOST[:PORT]`, where HOST is a name, an IPv4 address or CIDR, or an IPv6 one in
/// brackets.
fn split_host_port(text: &str) -> std::result::Result<(&str, Option<&str>), String> {
    if text.is_empty() {
        return Err("empty rule; give HOST[:PORT], e.g. pypi.org:443".into());
    }
    if let Some(inside) = text.strip_prefix('[') {
        let (host, rest) = inside
            .split_once(']')
            .ok_or("unclosed '['; write IPv6 as [::1]:443")?;
        return match rest {
            "" => Ok((host, None)),
            _ => match rest.strip_prefix(':') {
                Some(port) => Ok((host, Some(port))),
                None => Err(format!(
                    "'{rest}' after ']'; write [IPV6]:PORT, e.g. [2001:db8::1]:443"
                )),
            },
        };
    }
    match text.matches(':').count() {
        0 => Ok((text, None)),
        1 => {
            let (host, port) = text.split_once(':').expect("one colon");
            Ok((host, Some(port)))
        }
        _ => Err("an IPv6 address goes in brackets, e.g. [2001:db8::1]:443".into()),
    }
}

fn parse_port(port: &str) -> std::result::Result<u16, String> {
    match port.parse::<u32>() {
        Ok(number @ 1..=65535) => Ok(number as u16),
        Ok(_) => Err(format!("port {port} is out of range; use 1 to 65535")),
        Err(_) => Err(format!(
            "'{port}' is not a port; give a number from 1 to 65535, or leave out ':PORT' for any port"
        )),
    }
}

fn parse_host(host: &str) -> std::result::Result<Host, String> {
    if host.contains('/') {
        let net: IpNet = host
            .parse()
            .map_err(|_| format!("'{host}' is not a CIDR; write e.g. 10.20.0.0/16"))?;
        if net.trunc() != net {
            return Err(format!(
                "{host} has bits set past the prefix; did you mean {}?",
                net.trunc()
            ));
        }
        return Ok(match (net, canonical(net.addr())) {
            (IpNet::V6(v6), IpAddr::V4(v4)) if v6.prefix_len() >= 96 => {
                let prefix = v6.prefix_len() - 96;
                Host::Cidr(IpNet::new(IpAddr::V4(v4), prefix).map_err(|err| err.to_string())?)
            }
            _ => Host::Cidr(net),
        });
    }
    if let Ok(ip) = host.parse::<IpAddr>() {
        return Ok(Host::Ip(canonical(ip)));
    }
    if let Some(domain) = host.strip_prefix("*.") {
        return Ok(Host::Suffix(host_name(domain)?));
    }
    Ok(Host::Name(host_name(host)?))
}

/// A DNS name as a rule or pin may give it: lowercase labels of letters, digits, `-` and
/// `_`, not all digits at the end (`127.1` is not a name).
pub fn host_name(text: &str) -> std::result::Result<String, String> {
    let name = text.strip_suffix('.').unwrap_or(text).to_ascii_lowercase();
    if name.contains('*') {
        return Err(format!(
            "'{text}': a wildcard may only start a rule, as in *.example.com"
        ));
    }
    if name.is_empty() || name.len() > 253 {
        return Err(format!("'{text}' is not a host name"));
    }
    for label in name.split('.') {
        let good_chars = label
            .bytes()
            .all(|byte| byte.is_ascii_alphanumeric() || byte == b'-' || byte == b'_');
        if label.is_empty()
            || label.len() > 63
            || !good_chars
            || label.starts_with('-')
            || label.ends_with('-')
        {
            return Err(format!(
                "'{text}' is not a host name (label '{label}'); use letters, digits and '-'"
            ));
        }
    }
    let last = name.rsplit('.').next().unwrap_or_default();
    if last.bytes().all(|byte| byte.is_ascii_digit()) {
        return Err(format!(
            "'{text}' is neither a host name nor an IP address; write IPv4 addresses in full, e.g. 127.0.0.1"
        ));
    }
    Ok(name)
}

impl FromStr for Pin {
    type Err = String;

    fn from_str(text: &str) -> std::result::Result<Pin, String> {
        let bad = |why: String| format!("--add-host {text}: {why}");
        let (name, ip) = text
            .split_once(':')
            .ok_or_else(|| bad("give NAME:IP, e.g. api.internal:10.1.2.3".into()))?;
        let name = host_name(name).map_err(bad)?;
        let bare = ip
            .strip_prefix('[')
            .and_then(|ip| ip.strip_suffix(']'))
            .unwrap_or(ip);
        let ip = bare.parse::<IpAddr>().map_err(|_| {
            bad(format!(
                "'{ip}' is not an IP address; e.g. 10.1.2.3 or [fd00::1]"
            ))
        })?;
        Ok(Pin {
            name,
            ip: canonical(ip),
        })
    }
}

impl fmt::Display for Rule {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.raw {
            f.write_str("tcp://")?;
        }
        if self.ech {
            f.write_str("ech://")?;
        }
        match &self.host {
            Host::Name(name) => write!(f, "{name}")?,
            Host::Suffix(domain) => write!(f, "*.{domain}")?,
            Host::Ip(IpAddr::V6(ip)) => write!(f, "[{ip}]")?,
            Host::Ip(ip) => write!(f, "{ip}")?,
            Host::Cidr(IpNet::V6(net)) => write!(f, "[{net}]")?,
            Host::Cidr(net) => write!(f, "{net}")?,
        }
        match self.port {
            Some(port) => write!(f, ":{port}"),
            None => f.write_str(" (any port)"),
        }
    }
}

impl Serialize for Rule {
    fn serialize<S: Serializer>(&self, serializer: S) -> std::result::Result<S::Ok, S::Error> {
        serializer.collect_str(self)
    }
}

impl fmt::Display for Pin {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.ip {
            IpAddr::V6(ip) => write!(f, "{}:[{ip}]", self.name),
            IpAddr::V4(ip) => write!(f, "{}:{ip}", self.name),
        }
    }
}

impl Serialize for Pin {
    fn serialize<S: Serializer>(&self, serializer: S) -> std::result::Result<S::Ok, S::Error> {
        serializer.collect_str(self)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn policy(rules: &[&str], pins: &[&str]) -> Policy {
        let owned = |texts: &[&str]| {
            texts
                .iter()
                .map(|text| text.to_string())
                .collect::<Vec<_>>()
        };
        Policy::plan(&owned(rules), &owned(pins), None, None).unwrap()
    }

    #[test]
    fn loopback_rules_are_explained() {
        let policy = policy(
            &[
                "127.0.0.1:8765",
                "localhost:8765",
                "[::1]",
                "127.0.0.0/8:80",
                "pypi.org:443",
                "10.0.0.0/8",
            ],
            &[],
        );
        let warnings = policy.loopback_warnings();
        assert_eq!(warnings.len(), 4, "{warnings:#?}");
        assert_eq!(
            warnings[0],
            "--allow-net 127.0.0.1:8765: in the jail this is the jail's own loopback (which needs no rule), not the host's, so the rule lets nothing through; to reach a server on the host's loopback, pin a name to it: `--add-host host.test:127.0.0.1 --allow-net host.test:8765`"
        );
        assert!(warnings[1].starts_with("--allow-net localhost:8765: "));
        assert!(
            warnings[2].ends_with("`--add-host host.test:[::1] --allow-net host.test:PORT`"),
            "{}",
            warnings[2]
        );
        assert!(warnings[3].starts_with("--allow-net 127.0.0.0/8:80: "));
    }

    fn ip(text: &str) -> IpAddr {
        text.parse().unwrap()
    }

    #[test]
    fn rules_parse_in_deno_spelling() {
        let cases = [
            ("pypi.org:443", Host::Name("pypi.org".into()), Some(443)),
            ("PyPI.org.", Host::Name("pypi.org".into()), None),
            ("*.github.com", Host::Suffix("github.com".into()), None),
            ("1.2.3.4:80", Host::Ip(ip("1.2.3.4")), Some(80)),
            (
                "10.20.0.0/16:5432",
                Host::Cidr("10.20.0.0/16".parse().unwrap()),
                Some(5432),
            ),
            ("[2001:db8::1]:443", Host::Ip(ip("2001:db8::1")), Some(443)),
            ("[::1]", Host::Ip(ip("::1")), None),
            (
                "[fd00::/8]:22",
                Host::Cidr("fd00::/8".parse().unwrap()),
                Some(22),
            ),
            ("[::ffff:127.0.0.1]", Host::Ip(ip("127.0.0.1")), None),
        ];
        for (text, host, port) in cases {
            let rule: Rule = text.parse().unwrap_or_else(|err| panic!("{text}: {err}"));
            assert_eq!((rule.host, rule.port), (host, port), "{text}");
        }
    }

    #[test]
    fn bad_rules_name_the_rule_and_the_fix() {
        let cases = [
            ("", "empty rule"),
            ("pypi.org:0", "out of range"),
            ("pypi.org:65536", "out of range"),
            ("pypi.org:https", "not a port"),
            ("pypi.*.org", "wildcard may only start"),
            ("*github.com", "wildcard may only start"),
            ("*", "wildcard may only start"),
            ("::1", "in brackets"),
            ("[::1", "unclosed"),
            ("[::1]443", "after ']'"),
            ("127.1", "write IPv4 addresses in full"),
            ("10.0.0.1/8", "did you mean 10.0.0.0/8"),
            ("10.0.0.0/33", "not a CIDR"),
            ("exa mple.com", "not a host name"),
            ("-bad.com", "not a host name"),
        ];
        for (text, needle) in cases {
            let err = text.parse::<Rule>().unwrap_err();
            assert!(err.starts_with(&format!("--allow-net {text}:")), "{err}");
            assert!(err.contains(needle), "{text}: {err}");
        }
    }

    #[test]
    fn names_match_exactly_or_by_suffix_at_any_depth() {
        let policy = policy(&["pypi.org:443", "*.github.com"], &[]);
        assert!(policy.name_allowed("pypi.org", 443));
        assert!(!policy.name_allowed("pypi.org", 80));
        assert!(!policy.name_allowed("www.pypi.org", 443));
        assert!(policy.name_allowed("api.github.com", 22));
        assert!(policy.name_allowed("a.b.github.com", 443));
        assert!(!policy.name_allowed("github.com", 443));
        assert!(!policy.name_allowed("evilgithub.com", 443));
        assert!(policy.name_listed("pypi.org"));
        assert!(!policy.name_listed("example.com"));
    }

    #[test]
    fn denied_ranges_cover_every_spelling() {
        for text in [
            "127.0.0.1",
            "127.0.0.2",
            "10.1.2.3",
            "172.16.0.1",
            "192.168.1.1",
            "169.254.169.254",
            "100.64.0.1",
            "0.0.0.0",
            "224.0.0.1",
            "255.255.255.255",
            "::1",
            "::",
            "fe80::1",
            "fd00::1",
            "ff02::1",
            "::ffff:127.0.0.1",
            "::ffff:169.254.169.254",
            "::127.0.0.1",
            "64:ff9b::10.0.0.1",
            "192.0.2.1",
            "198.51.100.7",
            "203.0.113.200",
            "198.19.255.1",
            "192.88.99.1",
            "100::1",
            "2001::1",
            "2001:0:4136:e378:8000:63bf:3fff:fdd2",
            "2001:2::1",
            "2001:10::1",
            "2001:2f::1",
            "2001:db8::1",
            "2002:7f00:1::1",
            "3fff::1",
            "5f00::1",
            "64:ff9b:1::1",
        ] {
            assert!(denied_range(ip(text)).is_some(), "{text} should be denied");
        }
        for text in [
            "1.1.1.1",
            "151.101.0.223",
            "2a04:4e42::223",
            "::ffff:1.1.1.1",
            "192.0.3.1",
            "203.0.114.1",
            "2001:4860:4860::8888",
            "2001:1::1",
            "2003::1",
        ] {
            assert_eq!(denied_range(ip(text)), None, "{text}");
        }
    }

    #[test]
    fn address_checks_honour_ip_rules_and_pins() {
        let policy = policy(
            &["10.20.0.0/16:5432", "api.test:443", "other.test"],
            &["api.test:127.0.0.1"],
        );
        assert!(policy.ip_allowed(ip("10.20.3.4"), 5432));
        assert!(!policy.ip_allowed(ip("10.20.3.4"), 22));
        assert!(policy.ip_allowed(ip("::ffff:10.20.3.4"), 5432));
        assert_eq!(
            policy.address_refusal(ip("10.20.3.4"), None, 5432, &[]),
            None
        );
        assert!(policy.loopback_warnings().is_empty());
        assert_eq!(
            policy.address_refusal(ip("127.0.0.1"), Some("api.test"), 443, &[]),
            None
        );
        // A name that is not pinned resolving to loopback is DNS rebinding.
        assert_eq!(
            policy.address_refusal(ip("127.0.0.1"), Some("other.test"), 443, &[]),
            Some("loopback")
        );
        assert_eq!(
            policy.address_refusal(ip("93.184.216.34"), Some("other.test"), 80, &[]),
            None
        );
    }

    #[test]
    fn the_hosts_own_addresses_are_refused_unless_named() {
        let policy = policy(
            &["api.test:443", "other.test", "203.0.113.5:443"],
            &["api.test:198.51.100.9"],
        );
        let own = [ip("93.184.216.34"), ip("2a01:4f8::1")];
        for address in ["93.184.216.34", "2a01:4f8::1", "::ffff:93.184.216.34"] {
            assert_eq!(
                policy.address_refusal(ip(address), Some("other.test"), 443, &own),
                Some("host-own (an address of one of this host's interfaces)"),
                "{address}"
            );
        }
        // A pin or an IP rule names it: the operator meant it.
        let own = [ip("198.51.100.9"), ip("203.0.113.5")];
        assert_eq!(
            policy.address_refusal(ip("198.51.100.9"), Some("api.test"), 443, &own),
            None
        );
        assert_eq!(
            policy.address_refusal(ip("203.0.113.5"), Some("other.test"), 443, &own),
            None
        );
        assert_eq!(
            policy.address_refusal(ip("203.0.113.5"), Some("other.test"), 80, &own),
            Some("documentation (TEST-NET-3 203.0.113.0/24)")
        );
    }

    fn policy_with_ech() -> Policy {
        policy(&["ech://cloudflare-ech.com:443", "web.test:443"], &[])
    }

    #[test]
    fn tcp_rules_allow_raw_bytes_to_their_host_and_port() {
        let policy = policy(
            &[
                "tcp://db.test:5432",
                "web.test:443",
                "tcp://10.1.0.0/16:6379",
                "TCP://[fd00::1]:22",
            ],
            &[],
        );
        let any = ip("198.18.0.1");
        assert!(policy.raw_allowed(Some("db.test"), any, 5432));
        assert!(!policy.raw_allowed(Some("db.test"), any, 5433));
        assert!(policy.name_allowed("db.test", 5432));
        assert!(!policy.raw_allowed(Some("web.test"), any, 443));
        assert!(policy.raw_allowed(None, ip("10.1.2.3"), 6379));
        assert!(policy.raw_allowed(None, ip("fd00::1"), 22));
        assert!(!policy.raw_allowed(None, ip("10.2.2.3"), 6379));
        assert_eq!(policy.rules[0].to_string(), "tcp://db.test:5432");
        let ech = policy_with_ech();
        assert!(ech.ech_allowed("cloudflare-ech.com", 443));
        assert!(ech.name_allowed("cloudflare-ech.com", 443));
        assert!(!ech.ech_allowed("web.test", 443));
        for (text, needle) in [
            ("ech://10.0.0.1:443", "outer server name"),
            ("tcp://db.test", "names its port"),
            ("http://web.test:80", "not a rule scheme"),
            ("tcp://", "empty rule"),
        ] {
            let err = text.parse::<Rule>().unwrap_err();
            assert!(
                err.starts_with(&format!("--allow-net {text}:")) && err.contains(needle),
                "{err}"
            );
        }
    }

    #[test]
    fn pins_parse_and_conflicts_are_refused() {
        assert_eq!(
            "api.test:[fd00::1]".parse::<Pin>().unwrap(),
            Pin {
                name: "api.test".into(),
                ip: ip("fd00::1")
            }
        );
        assert_eq!("db:10.0.0.5".parse::<Pin>().unwrap().ip, ip("10.0.0.5"));
        for (text, needle) in [
            ("api.test", "NAME:IP"),
            ("api.test:nowhere", "not an IP"),
            ("*.x:1.2.3.4", "wildcard"),
        ] {
            let err = text.parse::<Pin>().unwrap_err();
            assert!(
                err.starts_with("--add-host") && err.contains(needle),
                "{err}"
            );
        }
        let err = Policy::plan(
            &[],
            &["a.test:1.2.3.4".into(), "a.test:1.2.3.5".into()],
            None,
            None,
        )
        .unwrap_err();
        assert!(
            err.message().contains("already pinned"),
            "{}",
            err.message()
        );
        let err = Policy::plan(&[], &[], None, Some(0)).unwrap_err();
        assert!(
            err.message().starts_with("--net-connections"),
            "{}",
            err.message()
        );
    }

    #[test]
    fn deny_rules_refuse_what_they_name_and_allow_wins() {
        let policy = policy(
            &["10.9.0.5", "ok.bad.test", "1.2.3.4:443"],
            &["pin.test:10.9.0.6"],
        )
        .deny(&[
            "10.9.0.0/16".into(),
            "*.bad.test".into(),
            "1.2.3.0/24".into(),
            "slow.test:80".into(),
        ])
        .unwrap();
        assert!(policy.lets_the_rest_out());
        // (name, address resolved or connected to, port, allowed?)
        let cases: [(Option<&str>, &str, u16, bool); 15] = [
            // Named by no rule: out (public addresses).
            (Some("example.test"), "93.184.216.34", 443, true),
            (None, "93.184.216.34", 443, true),
            // A deny CIDR: refused, by name or by address ...
            (Some("example.test"), "1.2.3.9", 443, false),
            (None, "1.2.3.9", 443, false),
            (None, "::ffff:1.2.3.9", 443, false),
            // ... unless an allow rule names the address (on its port) ...
            (None, "1.2.3.4", 443, true),
            (None, "1.2.3.4", 80, false),
            // ... or the name (allow wins, as E2B's allowOut over denyOut).
            (Some("ok.bad.test"), "1.2.3.9", 443, true),
            // A denied name, on every port; a deny rule with a port, only on it.
            (Some("x.bad.test"), "93.184.216.34", 443, false),
            (Some("slow.test"), "93.184.216.34", 80, false),
            (Some("slow.test"), "93.184.216.34", 443, true),
            // A pin into a denied block is refused; an allowed IP in it is not.
            (Some("pin.test"), "10.9.0.6", 443, false),
            (None, "10.9.0.5", 22, true),
            // brig's own refusals stay (loopback, private) where no rule names them.
            (Some("example.test"), "127.0.0.1", 443, false),
            (None, "192.168.1.1", 443, false),
        ];
        for (name, address, port, allowed) in cases {
            let address = ip(address);
            let got = match name {
                Some(name) => {
                    policy.name_allowed(name, port)
                        && policy
                            .address_refusal(address, Some(name), port, &[])
                            .is_none()
                }
                None => policy.direct_refusal(address, port, &[]).is_none(),
            };
            assert_eq!(got, allowed, "{name:?} {address} port {port}");
        }
        assert!(policy.name_listed("example.test"));
        assert!(policy.name_listed("slow.test"));
        assert!(policy.name_listed("ok.bad.test"));
        assert!(!policy.name_listed("x.bad.test"));
        // Without deny rules the policy stays an allow list.
        let only = policy_without_deny();
        assert!(!only.lets_the_rest_out());
        assert!(!only.name_allowed("example.test", 443));
        assert!(only.direct_refusal(ip("93.184.216.34"), 443, &[]).is_some());
    }

    fn policy_without_deny() -> Policy {
        policy(&["a.test"], &[])
    }

    #[test]
    fn bad_deny_rules_name_the_flag() {
        for (text, needle) in [
            ("tcp://db.test:5432", "takes no scheme"),
            ("ech://x.test", "takes no scheme"),
            ("10.0.0.1/8", "did you mean 10.0.0.0/8"),
            ("", "empty rule"),
        ] {
            let err = policy(&[], &[]).deny(&[text.into()]).unwrap_err();
            assert!(
                err.message().starts_with(&format!("--deny-net {text}:"))
                    && err.message().contains(needle),
                "{}",
                err.message()
            );
        }
    }

    #[test]
    fn synthetic_hosts_list_exact_names_and_pins_once() {
        let policy = policy(
            &["a.test:443", "*.wild.test", "a.test:80", "9.9.9.9"],
            &["b.test:10.0.0.1"],
        );
        assert_eq!(
            policy.synthetic_hosts(),
            vec![
                ("a.test".to_string(), Ipv4Addr::new(198, 18, 0, 1)),
                ("b.test".to_string(), Ipv4Addr::new(198, 18, 0, 2)),
            ]
        );
    }
}
