//! What the verdict says about a `--net filtered` run: the rules, every destination the
//! jail tried (allowed or refused, and why), the names it looked up, what was dropped,
//! and the bytes each way.

use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::net::IpAddr;

/// The verdict's `network` object.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct NetworkRecord {
    /// The `--allow-net` rules, as given.
    pub rules: Vec<String>,
    /// The `--add-host` pins, `NAME:IP`.
    pub hosts: Vec<String>,
    /// One entry per destination (name, port, address) and decision.
    pub connections: Vec<Destination>,
    /// The names the jail asked brig's resolver for.
    pub lookups: Vec<Lookup>,
    /// Packets dropped: UDP other than DNS to brig's resolver, ICMP, IPv4 fragments,
    /// other protocols.
    pub dropped: Vec<Dropped>,
    /// Payload bytes the jail sent out and received, over every connection.
    pub bytes_sent: u64,
    pub bytes_received: u64,
    /// `net-bytes` or `net-connections` when a cap was reached and brig refused more.
    #[serde(deserialize_with = "limit_name")]
    pub limit_reached: Option<crate::verdict::known::Name>,
    /// `--secret`: where a secret's placeholder went that is not entitled to it (it went
    /// on unchanged), one line each; never a value.
    #[serde(default)]
    pub secret_placeholders: Vec<String>,
}

/// The caps [`NetworkRecord::limit_reached`] names.
pub const NET_LIMITS: [&str; 2] = ["net-bytes", "net-connections"];

fn limit_name<'de, D: serde::Deserializer<'de>>(
    deserializer: D,
) -> Result<Option<&'static str>, D::Error> {
    use serde::de::Error;
    Option::<String>::deserialize(deserializer)?
        .map(|name| crate::verdict::known::find(&name, &NET_LIMITS, "network.limit_reached"))
        .transpose()
        .map_err(D::Error::custom)
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Destination {
    /// The name the connection was for (its synthetic address, or what TLS SNI or HTTP
    /// Host claimed); null for a connection to an address.
    pub name: Option<String>,
    pub port: u16,
    /// The address brig connected to (allowed), or the one the jail asked for (refused);
    /// null when refused before a name was resolved.
    pub address: Option<IpAddr>,
    pub allowed: bool,
    /// Why brig refused or ended the connection.
    pub reason: Option<String>,
    pub connections: u64,
    pub bytes_sent: u64,
    pub bytes_received: u64,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Lookup {
    pub name: String,
    /// The synthetic address the jail got, or null: NXDOMAIN, and nothing was asked
    /// of any resolver outside the jail.
    pub answer: Option<IpAddr>,
    pub count: u64,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Dropped {
    /// `udp`, `icmp`, `fragment` (an IPv4 fragment) or the IP protocol number.
    pub protocol: String,
    pub address: Option<IpAddr>,
    pub port: Option<u16>,
    pub packets: u64,
}

/// What the record groups connections by: name, port, address, allowed, reason.
type DestinationKey = (Option<String>, u16, Option<IpAddr>, bool, Option<String>);

/// Collects the record while the jail runs; small maps keyed by what the verdict groups by.
#[derive(Default)]
pub struct Recorder {
    destinations: BTreeMap<DestinationKey, Counts>,
    lookups: BTreeMap<String, (Option<IpAddr>, u64)>,
    dropped: BTreeMap<(String, Option<IpAddr>, Option<u16>), u64>,
    pub limit_reached: Option<&'static str>,
    secret_placeholders: std::collections::BTreeSet<String>,
}

#[derive(Default, Clone, Copy)]
struct Counts {
    connections: u64,
    sent: u64,
    received: u64,
}

/// One connection's entry in the record.
pub struct Connection<'a> {
    pub name: Option<&'a str>,
    pub port: u16,
    pub address: Option<IpAddr>,
    /// None: allowed; Some: refused or cut, and why.
    pub refusal: Option<&'a str>,
    /// Whether it was ever relayed (a connection cut mid-way was allowed first).
    pub relayed: bool,
    pub sent: u64,
    pub received: u64,
}

impl Recorder {
    pub fn connection(&mut self, connection: Connection) {
        let key = (
            connection.name.map(str::to_string),
            connection.port,
            connection.address,
            connection.relayed || connection.refusal.is_none(),
            connection.refusal.map(str::to_string),
        );
        let counts = self.destinations.entry(key).or_default();
        counts.connections += 1;
        counts.sent += connection.sent;
        counts.received += connection.received;
    }

    pub fn secret_placeholder(&mut self, report: &str) {
        self.secret_placeholders.insert(report.to_string());
    }

    pub fn lookup(&mut self, name: &str, answer: Option<IpAddr>) {
        let entry = self.lookups.entry(name.to_string()).or_insert((answer, 0));
        entry.0 = answer;
        entry.1 += 1;
    }

    pub fn dropped(&mut self, protocol: &str, address: Option<IpAddr>, port: Option<u16>) {
        *self
            .dropped
            .entry((protocol.to_string(), address, port))
            .or_default() += 1;
    }

    pub fn finish(self, rules: Vec<String>, hosts: Vec<String>) -> NetworkRecord {
        let connections: Vec<Destination> = self
            .destinations
            .into_iter()
            .map(
                |((name, port, address, allowed, reason), counts)| Destination {
                    name,
                    port,
                    address,
                    allowed,
                    reason,
                    connections: counts.connections,
                    bytes_sent: counts.sent,
                    bytes_received: counts.received,
                },
            )
            .collect();
        NetworkRecord {
            rules,
            hosts,
            bytes_sent: connections.iter().map(|c| c.bytes_sent).sum(),
            bytes_received: connections.iter().map(|c| c.bytes_received).sum(),
            connections,
            lookups: self
                .lookups
                .into_iter()
                .map(|(name, (answer, count))| Lookup {
                    name,
                    answer,
                    count,
                })
                .collect(),
            dropped: self
                .dropped
                .into_iter()
                .map(|((protocol, address, port), packets)| Dropped {
                    protocol,
                    address,
                    port,
                    packets,
                })
                .collect(),
            limit_reached: self.limit_reached,
            secret_placeholders: self.secret_placeholders.into_iter().collect(),
        }
    }
}
