//! The host-side lookup of an allowed name, when the jail connects to it. brig is a static
//! binary (no NSS, so no getaddrinfo): it reads /etc/hosts, then asks the nameservers of
//! /etc/resolv.conf itself, over UDP, and over TCP when the answer is truncated. Only
//! names the policy allows are ever looked up.

use super::dns;
use simple_dns::rdata::RData;
use simple_dns::{Packet, PacketFlag, RCODE, TYPE};
use std::io::{Read, Write};
use std::net::{IpAddr, Ipv4Addr, SocketAddr, TcpStream, UdpSocket};
use std::path::Path;
use std::time::{Duration, Instant};

/// glibc's defaults, with the timeout capped: a jail's connect waits for it.
const DEFAULT_TIMEOUT: Duration = Duration::from_secs(5);
const DEFAULT_ATTEMPTS: u32 = 2;
const DNS_PORT: u16 = 53;

pub struct HostResolver {
    nameservers: Vec<SocketAddr>,
    hosts: Vec<(String, IpAddr)>,
    timeout: Duration,
    attempts: u32,
}

/// What one nameserver said.
enum Answer {
    Addresses(Vec<IpAddr>),
    NoSuchName,
    NoAddress,
}

impl HostResolver {
    pub fn from_system() -> HostResolver {
        HostResolver::from_files(Path::new("/etc/resolv.conf"), Path::new("/etc/hosts"))
    }

    /// Missing files mean no entries; with no nameserver, 127.0.0.1 is asked, as glibc does.
    pub fn from_files(resolv_conf: &Path, hosts: &Path) -> HostResolver {
        let resolv_conf = std::fs::read_to_string(resolv_conf).unwrap_or_default();
        let hosts = std::fs::read_to_string(hosts).unwrap_or_default();
        let mut resolver = HostResolver::with_nameservers(Vec::new(), parse_hosts(&hosts));
        for line in resolv_conf.lines() {
            let mut words = line.split_whitespace();
            match words.next() {
                Some("nameserver") => {
                    let server = words
                        .next()
                        .and_then(|ip| ip.split('%').next()?.parse::<IpAddr>().ok());
                    resolver
                        .nameservers
                        .extend(server.map(|ip| SocketAddr::new(ip, DNS_PORT)));
                }
                Some("options") => {
                    for option in words {
                        let number =
                            |prefix: &str| option.strip_prefix(prefix)?.parse::<u64>().ok();
                        if let Some(seconds) = number("timeout:") {
                            resolver.timeout = Duration::from_secs(seconds.clamp(1, 5));
                        }
                        if let Some(attempts) = number("attempts:") {
                            resolver.attempts = attempts.clamp(1, 5) as u32;
                        }
                    }
                }
                _ => {}
            }
        }
        if resolver.nameservers.is_empty() {
            resolver
                .nameservers
                .push(SocketAddr::new(Ipv4Addr::LOCALHOST.into(), DNS_PORT));
        }
        resolver
    }

    pub fn with_nameservers(
        nameservers: Vec<SocketAddr>,
        hosts: Vec<(String, IpAddr)>,
    ) -> HostResolver {
        HostResolver {
            nameservers,
            hosts,
            timeout: DEFAULT_TIMEOUT,
            attempts: DEFAULT_ATTEMPTS,
        }
    }

    pub fn with_timeout(mut self, timeout: Duration) -> HostResolver {
        self.timeout = timeout;
        self
    }

    /// The addresses of `name`, IPv4 first; blocking. The error is one line naming it.
    pub fn lookup(&self, name: &str) -> Result<Vec<IpAddr>, String> {
        let name = name.trim_end_matches('.').to_ascii_lowercase();
        let from_hosts: Vec<IpAddr> = self
            .hosts
            .iter()
            .filter(|(known, _)| *known == name)
            .map(|(_, ip)| *ip)
            .collect();
        if !from_hosts.is_empty() {
            return Ok(from_hosts);
        }
        for qtype in [TYPE::A, TYPE::AAAA] {
            match self.ask_servers(&name, qtype)? {
                (Answer::Addresses(addresses), _) => return Ok(addresses),
                (Answer::NoSuchName, server) => {
                    return Err(format!("{name}: no such host (NXDOMAIN from {server})"));
                }
                (Answer::NoAddress, _) => {}
            }
        }
        Err(format!("{name}: no address"))
    }

    /// Asks each nameserver in turn, `attempts` rounds; the first that answers decides.
    fn ask_servers(&self, name: &str, qtype: TYPE) -> Result<(Answer, SocketAddr), String> {
        let mut last_error = String::from("no nameserver");
        for _ in 0..self.attempts {
            for server in &self.nameservers {
                match self.ask(*server, name, qtype) {
                    Ok(answer) => return Ok((answer, *server)),
                    Err(err) => last_error = format!("{server}: {err}"),
                }
            }
        }
        let servers: Vec<String> = self.nameservers.iter().map(ToString::to_string).collect();
        Err(format!(
            "{name}: the host's nameservers ({}) did not answer ({last_error})",
            servers.join(", ")
        ))
    }

    fn ask(&self, server: SocketAddr, name: &str, qtype: TYPE) -> Result<Answer, String> {
        let id = query_id();
        let query = dns::query(id, name, qtype).ok_or("not a valid DNS name")?;
        let local: SocketAddr = match server {
            SocketAddr::V4(_) => (Ipv4Addr::UNSPECIFIED, 0).into(),
            SocketAddr::V6(_) => (std::net::Ipv6Addr::UNSPECIFIED, 0).into(),
        };
        let socket = UdpSocket::bind(local).map_err(|err| err.to_string())?;
        socket.connect(server).map_err(|err| err.to_string())?;
        socket.send(&query).map_err(|err| err.to_string())?;
        let deadline = Instant::now() + self.timeout;
        let mut buffer = [0u8; 4096];
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Err("timed out".into());
            }
            socket
                .set_read_timeout(Some(left))
                .map_err(|err| err.to_string())?;
            let length = match socket.recv(&mut buffer) {
                Ok(length) => length,
                Err(err)
                    if err.kind() == std::io::ErrorKind::WouldBlock
                        || err.kind() == std::io::ErrorKind::TimedOut =>
                {
                    return Err("timed out".into());
                }
                Err(err) => return Err(err.to_string()),
            };
            let Ok(reply) = Packet::parse(&buffer[..length]) else {
                continue;
            };
            if reply.id() != id || !answers(&reply, name) {
                continue;
            }
            if reply.has_flags(PacketFlag::TRUNCATION) {
                return self.ask_over_tcp(server, &query, id, name);
            }
            return read_answer(&reply, name);
        }
    }

    fn ask_over_tcp(
        &self,
        server: SocketAddr,
        query: &[u8],
        id: u16,
        name: &str,
    ) -> Result<Answer, String> {
        let mut stream =
            TcpStream::connect_timeout(&server, self.timeout).map_err(|err| err.to_string())?;
        stream
            .set_read_timeout(Some(self.timeout))
            .map_err(|err| err.to_string())?;
        let mut framed = (query.len() as u16).to_be_bytes().to_vec();
        framed.extend_from_slice(query);
        stream.write_all(&framed).map_err(|err| err.to_string())?;
        let mut length = [0u8; 2];
        stream
            .read_exact(&mut length)
            .map_err(|err| err.to_string())?;
        let mut reply = vec![0u8; usize::from(u16::from_be_bytes(length))];
        stream
            .read_exact(&mut reply)
            .map_err(|err| err.to_string())?;
        let reply = Packet::parse(&reply).map_err(|err| format!("a malformed answer: {err}"))?;
        if reply.id() != id || !answers(&reply, name) {
            return Err("an answer to another question".into());
        }
        read_answer(&reply, name)
    }
}

/// Is `reply` about `name` (its one question names it)?
fn answers(reply: &Packet, name: &str) -> bool {
    reply.questions.len() == 1
        && reply.questions[0]
            .qname
            .to_string()
            .trim_end_matches('.')
            .eq_ignore_ascii_case(name)
}

/// The addresses of `name` in the answer section, following its CNAME chain.
fn read_answer(reply: &Packet, name: &str) -> Result<Answer, String> {
    match reply.rcode() {
        RCODE::NoError => {}
        RCODE::NameError => return Ok(Answer::NoSuchName),
        other => return Err(format!("answered {other:?}")),
    }
    let mut chain = vec![name.to_string()];
    let owner = |record: &simple_dns::ResourceRecord| {
        record
            .name
            .to_string()
            .trim_end_matches('.')
            .to_ascii_lowercase()
    };
    // A chain is at most as long as the answer section.
    for _ in 0..reply.answers.len() {
        let next = reply.answers.iter().find_map(|record| match &record.rdata {
            RData::CNAME(target) if chain.last() == Some(&owner(record)) => Some(
                target
                    .0
                    .to_string()
                    .trim_end_matches('.')
                    .to_ascii_lowercase(),
            ),
            _ => None,
        });
        match next {
            Some(target) if !chain.contains(&target) => chain.push(target),
            _ => break,
        }
    }
    let addresses: Vec<IpAddr> = reply
        .answers
        .iter()
        .filter(|record| chain.contains(&owner(record)))
        .filter_map(|record| match &record.rdata {
            RData::A(a) => Some(IpAddr::V4(Ipv4Addr::from(a.address))),
            RData::AAAA(aaaa) => Some(IpAddr::V6(std::net::Ipv6Addr::from(aaaa.address))),
            _ => None,
        })
        .collect();
    Ok(if addresses.is_empty() {
        Answer::NoAddress
    } else {
        Answer::Addresses(addresses)
    })
}

/// /etc/hosts: `ADDRESS NAME [ALIAS...]`, `#` comments.
fn parse_hosts(text: &str) -> Vec<(String, IpAddr)> {
    let mut entries = Vec::new();
    for line in text.lines() {
        let line = line.split('#').next().unwrap_or_default();
        let mut words = line.split_whitespace();
        let Some(ip) = words.next().and_then(|ip| ip.parse::<IpAddr>().ok()) else {
            continue;
        };
        for name in words {
            entries.push((name.trim_end_matches('.').to_ascii_lowercase(), ip));
        }
    }
    entries
}

/// A query id that an off-path sender cannot guess easily.
fn query_id() -> u16 {
    let mut random = [0u8; 2];
    match std::fs::File::open("/dev/urandom").and_then(|mut file| file.read_exact(&mut random)) {
        Ok(()) => u16::from_ne_bytes(random),
        Err(_) => {
            let now = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .unwrap_or_default();
            (now.subsec_nanos() ^ std::process::id()) as u16
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use simple_dns::rdata::{A, CNAME};
    use simple_dns::{CLASS, Name, ResourceRecord};
    use std::net::TcpListener;

    /// How the test server answers a question.
    #[derive(Clone, Copy)]
    enum Behaviour {
        Address,
        NxDomain,
        Cname,
        Truncated,
        Silent,
    }

    /// A DNS server on 127.0.0.1 (UDP, and TCP on the same port) answering as told.
    fn server(behaviour: Behaviour) -> SocketAddr {
        // The kernel picks a free UDP port; TCP's same port may be another test's (or
        // another build's) at that moment: pick again.
        let (udp, tcp, address) = (0..100)
            .find_map(|_| {
                let udp = UdpSocket::bind("127.0.0.1:0").ok()?;
                let address = udp.local_addr().ok()?;
                let tcp = TcpListener::bind(address).ok()?;
                Some((udp, tcp, address))
            })
            .expect("a port free for both UDP and TCP on 127.0.0.1");
        std::thread::spawn(move || {
            let mut buffer = [0u8; 512];
            while let Ok((length, peer)) = udp.recv_from(&mut buffer) {
                if let Some(reply) = answer(&buffer[..length], behaviour, true) {
                    let _ = udp.send_to(&reply, peer);
                }
            }
        });
        std::thread::spawn(move || {
            for mut stream in tcp.incoming().flatten() {
                let mut length = [0u8; 2];
                let _ = stream.read_exact(&mut length);
                let mut query = vec![0u8; usize::from(u16::from_be_bytes(length))];
                let _ = stream.read_exact(&mut query);
                if let Some(reply) = answer(&query, behaviour, false) {
                    let mut framed = (reply.len() as u16).to_be_bytes().to_vec();
                    framed.extend(reply);
                    let _ = stream.write_all(&framed);
                }
            }
        });
        address
    }

    fn answer(query: &[u8], behaviour: Behaviour, over_udp: bool) -> Option<Vec<u8>> {
        let query = Packet::parse(query).ok()?;
        let question = query.questions.first()?.clone();
        let mut reply = Packet::new_reply(query.id());
        reply.questions.push(question.clone());
        let is_a = question.qtype == simple_dns::QTYPE::TYPE(TYPE::A);
        let a = |name: Name<'static>, ip: [u8; 4]| {
            ResourceRecord::new(name, CLASS::IN, 60, RData::A(A::from(Ipv4Addr::from(ip))))
        };
        match behaviour {
            Behaviour::Silent => return None,
            Behaviour::NxDomain => *reply.rcode_mut() = RCODE::NameError,
            Behaviour::Truncated if over_udp => reply.set_flags(PacketFlag::TRUNCATION),
            Behaviour::Address | Behaviour::Truncated if is_a => {
                reply
                    .answers
                    .push(a(question.qname.clone().into_owned(), [93, 184, 216, 34]));
            }
            Behaviour::Cname if is_a => {
                let target = Name::new_unchecked("edge.cdn.test");
                reply.answers.push(ResourceRecord::new(
                    question.qname.clone(),
                    CLASS::IN,
                    60,
                    RData::CNAME(CNAME(target.clone())),
                ));
                reply.answers.push(a(target, [151, 101, 0, 223]));
                reply
                    .answers
                    .push(a(Name::new_unchecked("unrelated.test"), [10, 0, 0, 1]));
            }
            _ => {}
        }
        reply.build_bytes_vec().ok()
    }

    /// A resolver asking a test server. One that answers gets a timeout no loaded machine
    /// reaches (a test of its answer must not turn into a test of the scheduler); the
    /// silent one is waited for briefly.
    fn resolver(behaviour: Behaviour) -> HostResolver {
        let timeout = match behaviour {
            Behaviour::Silent => Duration::from_millis(300),
            _ => Duration::from_secs(30),
        };
        HostResolver::with_nameservers(vec![server(behaviour)], Vec::new()).with_timeout(timeout)
    }

    fn ip(text: &str) -> IpAddr {
        text.parse().unwrap()
    }

    #[test]
    fn answers_come_from_the_nameserver() {
        assert_eq!(
            resolver(Behaviour::Address).lookup("pypi.org"),
            Ok(vec![ip("93.184.216.34")])
        );
        assert_eq!(
            resolver(Behaviour::Truncated).lookup("pypi.org"),
            Ok(vec![ip("93.184.216.34")])
        );
        assert_eq!(
            resolver(Behaviour::Cname).lookup("www.pypi.org"),
            Ok(vec![ip("151.101.0.223")]),
            "the CNAME's target's address, not the unrelated record's"
        );
    }

    #[test]
    fn failures_are_one_line_naming_the_name() {
        let err = resolver(Behaviour::NxDomain)
            .lookup("nowhere.test")
            .unwrap_err();
        assert!(
            err.starts_with("nowhere.test: no such host (NXDOMAIN from 127.0.0.1:"),
            "{err}"
        );
        let err = resolver(Behaviour::Silent).lookup("slow.test").unwrap_err();
        assert!(
            err.starts_with("slow.test: the host's nameservers") && err.contains("timed out"),
            "{err}"
        );
        assert!(!err.contains('\n'));
    }

    #[test]
    fn hosts_and_resolv_conf_are_read() {
        let dir = std::env::temp_dir().join(format!("brig-resolve-test-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let (resolv, hosts) = (dir.join("resolv.conf"), dir.join("hosts"));
        std::fs::write(&resolv, "# x\nnameserver 10.255.255.53\nnameserver fe80::1%eth0\noptions timeout:30 attempts:3\n").unwrap();
        std::fs::write(
            &hosts,
            "127.0.0.1 localhost\n10.1.2.3 DB.internal db # the database\n",
        )
        .unwrap();
        let resolver = HostResolver::from_files(&resolv, &hosts);
        std::fs::remove_dir_all(&dir).unwrap();
        assert_eq!(
            resolver.nameservers,
            [
                SocketAddr::new(ip("10.255.255.53"), 53),
                SocketAddr::new(ip("fe80::1"), 53)
            ]
        );
        assert_eq!(
            (resolver.timeout, resolver.attempts),
            (Duration::from_secs(5), 3)
        );
        assert_eq!(resolver.lookup("db.internal."), Ok(vec![ip("10.1.2.3")]));
        assert_eq!(resolver.lookup("DB"), Ok(vec![ip("10.1.2.3")]));
        let empty =
            HostResolver::from_files(Path::new("/nonexistent/a"), Path::new("/nonexistent/b"));
        assert_eq!(empty.nameservers, [SocketAddr::new(ip("127.0.0.1"), 53)]);
    }
}
