//! Placeholders in request bodies (`--secret-body NAME`, a session secret's `body`), on a
//! connection brig decrypted for a secret (`terminate`): which bodies brig rewrites, and
//! their framing taken apart and put back. A rewritten body is held whole (at most
//! [`MAX_BODY`]) until it ends, so a placeholder split across TLS records, segments or
//! chunks is found like any other; then the request goes on with its `Content-Length`
//! recomputed, or a chunked body as one chunk followed by the original trailers.
//!
//! Only bodies a placeholder can be found in as text: a `Content-Type` of `text/*`,
//! `application/json` (or `+json`) or `application/x-www-form-urlencoded`, no
//! `Content-Encoding` (a compressed body is not text), no `Expect: 100-continue` (the
//! client would wait for the server before sending the body brig holds), and a
//! `Content-Length` of at most [`MAX_BODY`]; a chunked body that grows past it goes on
//! as it is. Any other body is relayed unchanged, like the request line.

/// The largest body brig holds to rewrite.
pub const MAX_BODY: usize = 1 << 20;

/// How a held body is delimited on the wire.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Framing {
    Length,
    Chunked,
}

/// The header values of `head` (a complete request head) named `name`.
fn values<'a>(headers: &'a [httparse::Header<'a>], name: &str) -> Vec<&'a [u8]> {
    headers
        .iter()
        .filter(|header| header.name.eq_ignore_ascii_case(name))
        .map(|header| header.value)
        .collect()
}

/// Whether brig rewrites the body of the request `head` (judged already: its framing is
/// one of the two, unambiguous); how it is framed.
pub fn rewritable(head: &[u8]) -> Option<Framing> {
    let mut headers = [httparse::EMPTY_HEADER; 128];
    let mut request = httparse::Request::new(&mut headers);
    request.parse(head).ok()?;
    let headers: &[httparse::Header] = request.headers;
    let text = |value: &[u8]| {
        let value = String::from_utf8_lossy(value).to_ascii_lowercase();
        let media = value
            .split(';')
            .next()
            .unwrap_or_default()
            .trim()
            .to_string();
        media.starts_with("text/")
            || media == "application/json"
            || (media.starts_with("application/") && media.ends_with("+json"))
            || media == "application/x-www-form-urlencoded"
    };
    let types = values(headers, "content-type");
    let textual = matches!(types.as_slice(), [one] if text(one));
    let encoded = values(headers, "content-encoding")
        .iter()
        .any(|value| !value.eq_ignore_ascii_case(b"identity"));
    let expects = !values(headers, "expect").is_empty();
    if !textual || encoded || expects {
        return None;
    }
    if !values(headers, "transfer-encoding").is_empty() {
        return Some(Framing::Chunked);
    }
    let length: usize = values(headers, "content-length")
        .first()
        .and_then(|value| std::str::from_utf8(value).ok()?.parse().ok())?;
    (length <= MAX_BODY).then_some(Framing::Length)
}

/// A complete chunked body (as the inspector passed it: valid) taken apart: its data, and
/// its trailer section (the header lines after the last chunk and the final CRLF).
pub fn dechunk(wire: &[u8]) -> Option<(Vec<u8>, Vec<u8>)> {
    let mut data = Vec::with_capacity(wire.len());
    let mut rest = wire;
    loop {
        let (consumed, size) = match httparse::parse_chunk_size(rest).ok()? {
            httparse::Status::Complete(parsed) => parsed,
            httparse::Status::Partial => return None,
        };
        rest = &rest[consumed..];
        if size == 0 {
            return Some((data, rest.to_vec()));
        }
        let size = usize::try_from(size).ok()?;
        data.extend_from_slice(rest.get(..size)?);
        rest = rest.get(size + 2..)?;
    }
}

/// The request `head` with `body`: the `Content-Length` line replaced by the new length,
/// or (chunked) the body as one chunk, then the last chunk and `trailers`.
pub fn reframe(head: &[u8], framing: Framing, body: &[u8], trailers: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(head.len() + body.len() + 32);
    match framing {
        Framing::Length => {
            for line in head.split_inclusive(|byte| *byte == b'\n') {
                let name = line.split(|byte| *byte == b':').next().unwrap_or_default();
                if line.contains(&b':') && name.eq_ignore_ascii_case(b"content-length") {
                    out.extend_from_slice(format!("Content-Length: {}\r\n", body.len()).as_bytes());
                } else {
                    out.extend_from_slice(line);
                }
            }
            out.extend_from_slice(body);
        }
        Framing::Chunked => {
            out.extend_from_slice(head);
            if !body.is_empty() {
                out.extend_from_slice(format!("{:x}\r\n", body.len()).as_bytes());
                out.extend_from_slice(body);
                out.extend_from_slice(b"\r\n");
            }
            out.extend_from_slice(b"0\r\n");
            out.extend_from_slice(trailers);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    const JSON_HEAD: &str = "POST /v1 HTTP/1.1\r\nHost: a.test\r\nContent-Type: application/json; charset=utf-8\r\nContent-Length: 12\r\n\r\n";

    #[test]
    fn only_plain_text_bodies_within_the_bound_are_rewritten() {
        assert_eq!(rewritable(JSON_HEAD.as_bytes()), Some(Framing::Length));
        let chunked = "POST / HTTP/1.1\r\nHost: a\r\nContent-Type: text/plain\r\nTransfer-Encoding: chunked\r\n\r\n";
        assert_eq!(rewritable(chunked.as_bytes()), Some(Framing::Chunked));
        let form = JSON_HEAD.replace(
            "application/json; charset=utf-8",
            "application/x-www-form-urlencoded",
        );
        assert_eq!(rewritable(form.as_bytes()), Some(Framing::Length));
        let problem = JSON_HEAD.replace("application/json", "application/problem+json");
        assert_eq!(rewritable(problem.as_bytes()), Some(Framing::Length));
        for refused in [
            JSON_HEAD.replace("application/json", "application/octet-stream"),
            JSON_HEAD.replace("Content-Length: 12", "Content-Length: 1048577"),
            JSON_HEAD.replace("\r\n\r\n", "\r\nContent-Encoding: gzip\r\n\r\n"),
            JSON_HEAD.replace("\r\n\r\n", "\r\nExpect: 100-continue\r\n\r\n"),
            JSON_HEAD.replace("Content-Type: application/json; charset=utf-8\r\n", ""),
        ] {
            assert_eq!(rewritable(refused.as_bytes()), None, "{refused}");
        }
    }

    #[test]
    fn a_chunked_body_is_taken_apart_and_put_back_as_one_chunk() {
        let wire = b"3;ext=1\r\nabc\r\n2\r\nde\r\n0\r\nX-T: 1\r\n\r\n";
        let (data, trailers) = dechunk(wire).unwrap();
        assert_eq!(
            (data.as_slice(), trailers.as_slice()),
            (&b"abcde"[..], &b"X-T: 1\r\n\r\n"[..])
        );
        let head = b"POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n";
        let out = reframe(head, Framing::Chunked, b"abcdef", &trailers);
        assert!(
            out.ends_with(b"\r\n\r\n6\r\nabcdef\r\n0\r\nX-T: 1\r\n\r\n"),
            "{}",
            String::from_utf8_lossy(&out)
        );
        assert_eq!(dechunk(b"0\r\n\r\n").unwrap(), (vec![], b"\r\n".to_vec()));
        assert_eq!(
            reframe(b"H\r\n\r\n", Framing::Chunked, b"", b"\r\n"),
            b"H\r\n\r\n0\r\n\r\n"
        );
    }

    #[test]
    fn the_content_length_follows_the_body() {
        let out = reframe(
            JSON_HEAD.as_bytes(),
            Framing::Length,
            b"{\"k\":\"longer value\"}",
            b"",
        );
        let text = String::from_utf8(out).unwrap();
        assert!(
            text.contains("\r\nContent-Length: 20\r\n\r\n{\"k\":\"longer value\"}"),
            "{text}"
        );
        assert!(!text.contains("Content-Length: 12"), "{text}");
    }
}
