//! The name a TCP connection's first bytes claim: the server name (SNI) of a TLS
//! ClientHello, parsed by tls-parser, or the `Host` of an HTTP/1 request, parsed by
//! httparse. brig checks it against the policy before relaying anything (no domain
//! fronting through an allowed address); what follows is relayed unread.

use tls_parser::{TlsExtension, TlsMessage, TlsMessageHandshake};

#[derive(Debug, PartialEq, Eq)]
pub enum Sniffed {
    /// Not enough bytes yet to tell.
    NeedMore,
    /// A TLS ClientHello, with the host name it asks for.
    Tls { sni: Option<String> },
    /// An HTTP/1 request, with its `Host` (no port).
    Http { host: Option<String> },
    /// Another protocol: nothing to check.
    Opaque,
}

/// brig reads at most this much before deciding; a claim not complete by then is
/// treated as opaque.
pub const SNIFF_LIMIT: usize = 16 * 1024;

const TLS_HANDSHAKE: u8 = 0x16;
const CLIENT_HELLO: u8 = 1;
const RECORD_HEADER: usize = 5;
/// The largest record TLS allows (2^14 plus the expansion TLS 1.2 permits).
const MAX_RECORD: usize = (1 << 14) + 2048;
const SNI_HOST_NAME: u8 = 0;

const METHODS: [&str; 9] = [
    "GET", "POST", "PUT", "HEAD", "DELETE", "OPTIONS", "PATCH", "CONNECT", "TRACE",
];

pub fn sniff(first: &[u8]) -> Sniffed {
    match first.first() {
        None => Sniffed::NeedMore,
        Some(&TLS_HANDSHAKE) => tls(first),
        Some(_) => http(first),
    }
}

/// Gathers the handshake message from as many records as it spans, then parses it.
fn tls(mut bytes: &[u8]) -> Sniffed {
    let mut handshake: Vec<u8> = Vec::new();
    loop {
        if bytes.len() < RECORD_HEADER {
            return Sniffed::NeedMore;
        }
        if bytes[0] != TLS_HANDSHAKE {
            return Sniffed::Opaque;
        }
        let length = usize::from(u16::from_be_bytes([bytes[3], bytes[4]]));
        if length == 0 || length > MAX_RECORD {
            return Sniffed::Opaque;
        }
        let Some(payload) = bytes.get(RECORD_HEADER..RECORD_HEADER + length) else {
            return Sniffed::NeedMore;
        };
        handshake.extend_from_slice(payload);
        bytes = &bytes[RECORD_HEADER + length..];
        if handshake.len() >= 4 {
            if handshake[0] != CLIENT_HELLO {
                return Sniffed::Opaque;
            }
            let body = usize::from(handshake[1]) << 16
                | usize::from(handshake[2]) << 8
                | usize::from(handshake[3]);
            if body + 4 > SNIFF_LIMIT {
                return Sniffed::Opaque;
            }
            if handshake.len() >= body + 4 {
                return client_hello(&handshake[..body + 4]);
            }
        }
    }
}

fn client_hello(message: &[u8]) -> Sniffed {
    let Ok((_, TlsMessage::Handshake(TlsMessageHandshake::ClientHello(hello)))) =
        tls_parser::parse_tls_message_handshake(message)
    else {
        return Sniffed::Opaque;
    };
    let extensions = hello
        .ext
        .and_then(|raw| tls_parser::parse_tls_extensions(raw).ok())
        .map(|(_, extensions)| extensions)
        .unwrap_or_default();
    let sni = extensions.iter().find_map(|extension| match extension {
        TlsExtension::SNI(names) => names
            .iter()
            .find(|(kind, _)| kind.0 == SNI_HOST_NAME)
            .map(|(_, name)| normalize(&String::from_utf8_lossy(name))),
        _ => None,
    });
    Sniffed::Tls { sni }
}

fn http(bytes: &[u8]) -> Sniffed {
    let token_end = bytes.iter().position(|&byte| byte == b' ');
    let token = &bytes[..token_end.unwrap_or(bytes.len())];
    let known = METHODS.iter().any(|method| match token_end {
        Some(_) => method.as_bytes() == token,
        None => method.as_bytes().starts_with(token),
    });
    if !known {
        return Sniffed::Opaque;
    }
    if token_end.is_none() {
        return Sniffed::NeedMore;
    }
    let mut headers = [httparse::EMPTY_HEADER; 64];
    let mut request = httparse::Request::new(&mut headers);
    match request.parse(bytes) {
        Ok(httparse::Status::Partial) => Sniffed::NeedMore,
        Ok(httparse::Status::Complete(_)) => {
            let host = request
                .headers
                .iter()
                .find(|header| header.name.eq_ignore_ascii_case("host"))
                .map(|header| without_port(&String::from_utf8_lossy(header.value)));
            Sniffed::Http { host }
        }
        // Too many headers, or not HTTP after all.
        Err(_) => Sniffed::Opaque,
    }
}

/// `example.com:8080` → `example.com`, `[2001:db8::1]:443` → `2001:db8::1`.
fn without_port(host: &str) -> String {
    let host = host.trim();
    if let Some(inside) = host.strip_prefix('[') {
        return normalize(inside.split(']').next().unwrap_or_default());
    }
    normalize(host.rsplit_once(':').map_or(host, |(name, _)| name))
}

fn normalize(name: &str) -> String {
    name.trim_end_matches('.').to_ascii_lowercase()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A ClientHello for `Example.COM`, as Python's ssl module (OpenSSL 3) sends it.
    const HELLO: &[u8] = include_bytes!("../../tests/data/client-hello-example.com.bin");

    #[test]
    fn a_client_hello_names_its_server() {
        assert_eq!(
            sniff(HELLO),
            Sniffed::Tls {
                sni: Some("example.com".into())
            }
        );
        // Every prefix is "need more", never a wrong answer.
        for cut in 0..HELLO.len() {
            assert_eq!(sniff(&HELLO[..cut]), Sniffed::NeedMore, "cut at {cut}");
        }
    }

    #[test]
    fn a_client_hello_split_over_two_records_is_gathered() {
        let payload = &HELLO[RECORD_HEADER..];
        let (first, second) = payload.split_at(100);
        let mut split = Vec::new();
        for part in [first, second] {
            split.extend_from_slice(&HELLO[..3]);
            split.extend_from_slice(&(part.len() as u16).to_be_bytes());
            split.extend_from_slice(part);
        }
        assert_eq!(
            sniff(&split),
            Sniffed::Tls {
                sni: Some("example.com".into())
            }
        );
        assert_eq!(sniff(&split[..RECORD_HEADER + 100 + 3]), Sniffed::NeedMore);
    }

    #[test]
    fn garbage_after_the_handshake_byte_is_opaque() {
        assert_eq!(sniff(&[0x16, 3, 1, 0, 4, 2, 0, 0, 0]), Sniffed::Opaque);
        assert_eq!(sniff(&[0x16, 3, 1, 0, 0]), Sniffed::Opaque);
        let mut corrupt = HELLO.to_vec();
        corrupt[RECORD_HEADER + 4] = 0xff;
        corrupt[RECORD_HEADER + 5] = 0xff;
        let _ = sniff(&corrupt);
    }

    #[test]
    fn http_requests_name_their_host() {
        let cases = [
            (
                "GET / HTTP/1.1\r\nHost: Example.com:8080\r\n\r\n",
                Some("example.com"),
            ),
            (
                "POST /x HTTP/1.1\r\nhost: [2001:db8::1]:443\r\n\r\n",
                Some("2001:db8::1"),
            ),
            ("GET / HTTP/1.0\r\n\r\n", None),
        ];
        for (request, host) in cases {
            assert_eq!(
                sniff(request.as_bytes()),
                Sniffed::Http {
                    host: host.map(String::from)
                },
                "{request}"
            );
            for cut in 1..request.len() - 1 {
                assert_eq!(
                    sniff(&request.as_bytes()[..cut]),
                    Sniffed::NeedMore,
                    "{request} at {cut}"
                );
            }
        }
    }

    #[test]
    fn other_protocols_are_opaque() {
        for bytes in [
            &b"SSH-2.0-OpenSSH_9.2\r\n"[..],
            b"\x00\x00\x00\x08\x04\xd2\x16\x2f",
            b"get / HTTP/1.1\r\n",
            b"GETX / HTTP/1.1",
        ] {
            assert_eq!(sniff(bytes), Sniffed::Opaque, "{bytes:?}");
        }
        assert_eq!(sniff(b""), Sniffed::NeedMore);
        assert_eq!(sniff(b"GE"), Sniffed::NeedMore);
        assert_eq!(
            sniff(b"GET / HTTP/1.1\r\nBad Header\r\n\r\n"),
            Sniffed::Opaque
        );
    }
}
