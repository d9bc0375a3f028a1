//! The Connect protocol (connectrpc.com/docs/protocol), as envd speaks it: unary calls
//! (`application/json`, `application/proto`: the body is the message; an error is an
//! HTTP status with `{"code","message"}`) and server streams (`application/connect+json`,
//! `application/connect+proto`: 5-byte envelopes, a flags byte and a big-endian length,
//! then the message; the last envelope, flag 2, carries the end of the stream, with the
//! error if any). Messages are the generated prost types: binary with prost, JSON with
//! their pbjson mapping. Compression is not negotiated (E2B's SDK turns it off): a
//! compressed envelope is refused.

use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Response};
use bytes::{BufMut, Bytes, BytesMut};

/// The largest request message taken (envd's requests are small; stdin travels in
/// pieces).
pub const MAX_MESSAGE: usize = 4 << 20;

const FLAG_COMPRESSED: u8 = 0x01;
const FLAG_END_STREAM: u8 = 0x02;

/// How messages are encoded.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Codec {
    Json,
    Proto,
}

/// A call's shape: one message each way, or a stream of replies.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Shape {
    Unary,
    Stream,
}

/// Connect's error codes (those envd's clients meet).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Code {
    InvalidArgument,
    NotFound,
    AlreadyExists,
    ResourceExhausted,
    Unimplemented,
    Internal,
    Unavailable,
}

impl Code {
    pub fn as_str(self) -> &'static str {
        match self {
            Code::InvalidArgument => "invalid_argument",
            Code::NotFound => "not_found",
            Code::AlreadyExists => "already_exists",
            Code::ResourceExhausted => "resource_exhausted",
            Code::Unimplemented => "unimplemented",
            Code::Internal => "internal",
            Code::Unavailable => "unavailable",
        }
    }

    /// The HTTP status of a unary error with this code (the protocol's table).
    fn status(self) -> StatusCode {
        match self {
            Code::InvalidArgument => StatusCode::BAD_REQUEST,
            Code::NotFound => StatusCode::NOT_FOUND,
            Code::AlreadyExists => StatusCode::CONFLICT,
            Code::ResourceExhausted => StatusCode::TOO_MANY_REQUESTS,
            Code::Unimplemented => StatusCode::NOT_IMPLEMENTED,
            Code::Internal => StatusCode::INTERNAL_SERVER_ERROR,
            Code::Unavailable => StatusCode::SERVICE_UNAVAILABLE,
        }
    }
}

/// A Connect error: its code, and one line saying what failed and the fix.
#[derive(Clone, Debug)]
pub struct ConnectError {
    pub code: Code,
    pub message: String,
}

impl ConnectError {
    pub fn new(code: Code, message: impl Into<String>) -> ConnectError {
        ConnectError {
            code,
            message: message.into(),
        }
    }

    pub fn invalid(message: impl Into<String>) -> ConnectError {
        ConnectError::new(Code::InvalidArgument, message)
    }

    fn body(&self) -> serde_json::Value {
        serde_json::json!({"code": self.code.as_str(), "message": self.message})
    }
}

impl From<super::backend::BackendError> for ConnectError {
    fn from(err: super::backend::BackendError) -> ConnectError {
        use super::backend::Failure;
        let code = match err.failure {
            Failure::NotFound => Code::NotFound,
            // E2B's proxy answers for a sandbox that has ended; the SDK says it timed out.
            Failure::Gone => Code::Unavailable,
            Failure::BadInput => Code::InvalidArgument,
            Failure::Unavailable => Code::Unavailable,
            Failure::Server => Code::Internal,
        };
        ConnectError::new(code, err.message)
    }
}

/// A unary error: the code's status, the error as JSON.
impl IntoResponse for ConnectError {
    fn into_response(self) -> Response {
        (self.code.status(), axum::Json(self.body())).into_response()
    }
}

/// The codec and shape a request's `Content-Type` asks for; None for one Connect does
/// not have (answered 415).
pub fn call_of(headers: &HeaderMap) -> Option<(Codec, Shape)> {
    let content_type = headers.get(header::CONTENT_TYPE)?.to_str().ok()?;
    let media = content_type.split(';').next()?.trim().to_ascii_lowercase();
    Some(match media.as_str() {
        "application/json" => (Codec::Json, Shape::Unary),
        "application/proto" => (Codec::Proto, Shape::Unary),
        "application/connect+json" => (Codec::Json, Shape::Stream),
        "application/connect+proto" => (Codec::Proto, Shape::Stream),
        _ => return None,
    })
}

/// The answer to a request whose content type is not Connect's.
pub fn unsupported_media(headers: &HeaderMap) -> Response {
    let given = headers
        .get(header::CONTENT_TYPE)
        .and_then(|value| value.to_str().ok())
        .unwrap_or("none");
    (
        StatusCode::UNSUPPORTED_MEDIA_TYPE,
        format!(
            "Content-Type {given:?}: envd takes application/json or application/proto (unary), application/connect+json or application/connect+proto (streams)\n"
        ),
    )
        .into_response()
}

/// The one request message of a body.
pub fn decode<M>(codec: Codec, shape: Shape, body: &[u8]) -> Result<M, ConnectError>
where
    M: prost::Message + serde::de::DeserializeOwned + Default,
{
    let message = match shape {
        Shape::Unary => body,
        Shape::Stream => {
            let [flags, a, b, c, d, rest @ ..] = body else {
                return Err(ConnectError::invalid(format!(
                    "a stream's request must be one envelope (5-byte header, then the message); got {} bytes",
                    body.len()
                )));
            };
            if flags & FLAG_COMPRESSED != 0 {
                return Err(ConnectError::invalid(
                    "a compressed envelope: this server negotiates no compression; send it uncompressed",
                ));
            }
            let length = u32::from_be_bytes([*a, *b, *c, *d]) as usize;
            if length != rest.len() {
                return Err(ConnectError::invalid(format!(
                    "the envelope says {length} bytes, {} follow; send exactly one whole message",
                    rest.len()
                )));
            }
            rest
        }
    };
    match codec {
        Codec::Json => serde_json::from_slice(message).map_err(|err| {
            ConnectError::invalid(format!("the request is not a valid JSON message: {err}"))
        }),
        Codec::Proto => M::decode(message).map_err(|err| {
            ConnectError::invalid(format!(
                "the request is not a valid protobuf message: {err}"
            ))
        }),
    }
}

/// A message's bytes.
pub fn encode<M: prost::Message + serde::Serialize>(codec: Codec, message: &M) -> Vec<u8> {
    match codec {
        Codec::Json => serde_json::to_vec(message).expect("a generated message serializes"),
        Codec::Proto => message.encode_to_vec(),
    }
}

/// A unary call's answer.
pub fn unary<M: prost::Message + serde::Serialize>(codec: Codec, message: &M) -> Response {
    let content_type = match codec {
        Codec::Json => "application/json",
        Codec::Proto => "application/proto",
    };
    (
        [(header::CONTENT_TYPE, content_type)],
        encode(codec, message),
    )
        .into_response()
}

/// The content type of a stream's answer.
pub fn stream_content_type(codec: Codec) -> &'static str {
    match codec {
        Codec::Json => "application/connect+json",
        Codec::Proto => "application/connect+proto",
    }
}

/// One message of a stream, enveloped.
pub fn envelope<M: prost::Message + serde::Serialize>(codec: Codec, message: &M) -> Bytes {
    framed(0, &encode(codec, message))
}

/// The end of a stream: `{}`, or `{"error": {...}}` (always JSON).
pub fn end_of_stream(error: Option<&ConnectError>) -> Bytes {
    let body = match error {
        Some(error) => serde_json::json!({"error": error.body()}),
        None => serde_json::json!({}),
    };
    framed(FLAG_END_STREAM, &serde_json::to_vec(&body).expect("JSON"))
}

fn framed(flags: u8, payload: &[u8]) -> Bytes {
    let mut frame = BytesMut::with_capacity(5 + payload.len());
    frame.put_u8(flags);
    frame.put_u32(payload.len() as u32);
    frame.put_slice(payload);
    frame.freeze()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::gateway::proto::process::ListRequest;

    #[test]
    fn a_stream_request_is_one_whole_envelope() {
        let good = [0u8, 0, 0, 0, 2, b'{', b'}'];
        decode::<ListRequest>(Codec::Json, Shape::Stream, &good).unwrap();
        for (body, expected) in [
            (&[0u8, 0, 0][..], "got 3 bytes"),
            (&[0, 0, 0, 0, 9, b'{', b'}'][..], "says 9 bytes, 2 follow"),
            (&[1, 0, 0, 0, 2, b'{', b'}'][..], "compressed"),
            (&[0, 0, 0, 0, 2, b'{', b'x'][..], "not a valid JSON message"),
        ] {
            let err = decode::<ListRequest>(Codec::Json, Shape::Stream, body).unwrap_err();
            assert_eq!(err.code, Code::InvalidArgument);
            assert!(err.message.contains(expected), "{}", err.message);
        }
    }

    #[test]
    fn the_end_of_a_stream_carries_its_error() {
        let end = end_of_stream(Some(&ConnectError::new(Code::NotFound, "gone")));
        assert_eq!(end[0], FLAG_END_STREAM);
        let body: serde_json::Value = serde_json::from_slice(&end[5..]).unwrap();
        assert_eq!(body["error"]["code"], "not_found");
        assert_eq!(&end_of_stream(None)[5..], b"{}");
    }
}
