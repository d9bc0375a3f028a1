//! envd's `process.Process/StreamInput`: a Connect client stream (HTTP/2, or HTTP/1.1
//! with a chunked body) of `StreamInputRequest` envelopes: first `start` (which process),
//! then `data` (stdin or terminal bytes) and `keepalive` in any number. Each `data` is a
//! `session_stdin` as its envelope arrives, in order, so a process reads what was sent
//! while the stream is still open; the answer, once the client ends its stream, is one
//! `StreamInputResponse` and the end of the stream (or the end with the error that
//! stopped it). The gateway holds at most one message (4 MiB) of a stream at a time.

use super::Gateway;
use super::backend::Selector;
use super::connect::{self, Code, Codec, ConnectError, Shape};
use super::proto::process::{self as pb, process_input, stream_input_request};
use axum::body::{Body, BodyDataStream};
use axum::http::header;
use axum::response::{IntoResponse, Response};
use bytes::{Buf, Bytes, BytesMut};
use std::sync::Arc;

/// Serves one `StreamInput` call to `sandbox`'s envd, `shape` and `codec` as its
/// Content-Type says.
pub async fn serve(
    gateway: Arc<Gateway>,
    sandbox: String,
    codec: Codec,
    shape: Shape,
    body: Body,
) -> Response {
    let mut chunks = body.into_data_stream();
    let outcome = match shape {
        Shape::Stream => relay(&gateway, &sandbox, codec, &mut chunks).await,
        Shape::Unary => Err(ConnectError::invalid(
            "process.Process/StreamInput is a client stream; send it as application/connect+json or application/connect+proto",
        )),
    };
    // A stream refused before its end: the rest is read and dropped by `body::layer`.
    drop(chunks);
    let mut answer = BytesMut::new();
    match outcome {
        Ok(()) => {
            answer.extend_from_slice(&connect::envelope(codec, &pb::StreamInputResponse {}));
            answer.extend_from_slice(&connect::end_of_stream(None));
        }
        Err(err) => answer.extend_from_slice(&connect::end_of_stream(Some(&err))),
    }
    (
        [(header::CONTENT_TYPE, connect::stream_content_type(codec))],
        answer.freeze(),
    )
        .into_response()
}

/// Reads the stream's envelopes as they come and hands each one's input to the process.
async fn relay(
    gateway: &Arc<Gateway>,
    sandbox: &str,
    codec: Codec,
    chunks: &mut BodyDataStream,
) -> Result<(), ConnectError> {
    use futures_util::StreamExt;
    let mut envelopes = Envelopes::default();
    let mut process: Option<Selector> = None;
    loop {
        while let Some(message) = envelopes.next()? {
            let request: pb::StreamInputRequest = connect::decode(codec, Shape::Unary, &message)?;
            match (request.event, &process) {
                (Some(stream_input_request::Event::Start(start)), None) => {
                    process = Some(super::envd::selector_of(start.process.as_ref())?);
                }
                (Some(stream_input_request::Event::Start(_)), Some(_)) => {
                    return Err(ConnectError::invalid(
                        "a second start event: a stream feeds one process; open another stream for another",
                    ));
                }
                (Some(_) | None, None) => {
                    return Err(ConnectError::invalid(
                        "the stream's first message must be a start event naming the process (pid or tag)",
                    ));
                }
                (Some(stream_input_request::Event::Data(data)), Some(selector)) => {
                    let bytes = match data.input.and_then(|input| input.input) {
                        Some(
                            process_input::Input::Stdin(bytes) | process_input::Input::Pty(bytes),
                        ) => bytes,
                        None => {
                            return Err(ConnectError::invalid(
                                "data.input: give stdin or pty bytes",
                            ));
                        }
                    };
                    let (backend, sandbox, selector) = (
                        gateway.backend.clone(),
                        sandbox.to_string(),
                        selector.clone(),
                    );
                    tokio::task::spawn_blocking(move || {
                        backend.stdin(&sandbox, &selector, &bytes, false)
                    })
                    .await
                    .map_err(|err| {
                        ConnectError::new(Code::Internal, format!("brig gateway: {err}"))
                    })?
                    .map_err(ConnectError::from)?;
                }
                (Some(stream_input_request::Event::Keepalive(_)) | None, Some(_)) => {}
            }
        }
        match chunks.next().await {
            Some(Ok(chunk)) => envelopes.push(chunk),
            Some(Err(err)) => {
                return Err(ConnectError::invalid(format!(
                    "the request's stream broke off: {err}; send it whole"
                )));
            }
            None => break,
        }
    }
    envelopes.finish()?;
    match process {
        Some(_) => Ok(()),
        None => Err(ConnectError::invalid(
            "the stream ended without a start event; send start (the process), then data",
        )),
    }
}

/// The envelopes of a client stream, cut from its body's chunks as they arrive.
#[derive(Default)]
struct Envelopes {
    pending: BytesMut,
}

impl Envelopes {
    fn push(&mut self, chunk: Bytes) {
        self.pending.extend_from_slice(&chunk);
    }

    /// The next whole message, if it has all arrived.
    fn next(&mut self) -> Result<Option<Bytes>, ConnectError> {
        let [flags, a, b, c, d, ..] = self.pending[..] else {
            return Ok(None);
        };
        if flags & 0x01 != 0 {
            return Err(ConnectError::invalid(
                "a compressed envelope: this server negotiates no compression; send it uncompressed",
            ));
        }
        let length = u32::from_be_bytes([a, b, c, d]) as usize;
        if length > connect::MAX_MESSAGE {
            return Err(ConnectError::new(
                Code::ResourceExhausted,
                format!(
                    "a message of {length} bytes, more than {}; send stdin in smaller pieces",
                    connect::MAX_MESSAGE
                ),
            ));
        }
        if self.pending.len() < 5 + length {
            return Ok(None);
        }
        self.pending.advance(5);
        Ok(Some(self.pending.split_to(length).freeze()))
    }

    /// The stream has ended: nothing may be left half sent.
    fn finish(&self) -> Result<(), ConnectError> {
        match self.pending.len() {
            0 => Ok(()),
            left => Err(ConnectError::invalid(format!(
                "the stream ended inside an envelope ({left} bytes of it); send whole envelopes"
            ))),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn envelopes_are_cut_as_their_bytes_arrive() {
        let mut envelopes = Envelopes::default();
        envelopes.push(Bytes::from_static(&[0, 0, 0]));
        assert_eq!(envelopes.next().unwrap(), None);
        envelopes.push(Bytes::from_static(&[0, 2, b'{']));
        assert_eq!(envelopes.next().unwrap(), None);
        envelopes.push(Bytes::from_static(&[b'}', 0, 0, 0, 0, 0]));
        assert_eq!(envelopes.next().unwrap().as_deref(), Some(&b"{}"[..]));
        assert_eq!(envelopes.next().unwrap().as_deref(), Some(&b""[..]));
        assert_eq!(envelopes.next().unwrap(), None);
        envelopes.finish().unwrap();

        envelopes.push(Bytes::from_static(&[0, 0, 0, 0, 9, b'x']));
        assert!(envelopes.next().unwrap().is_none());
        assert!(
            envelopes
                .finish()
                .unwrap_err()
                .message
                .contains("inside an envelope")
        );

        let mut big = Envelopes::default();
        big.push(Bytes::from_static(&[0, 0xff, 0, 0, 0]));
        assert_eq!(big.next().unwrap_err().code, Code::ResourceExhausted);
        let mut compressed = Envelopes::default();
        compressed.push(Bytes::from_static(&[1, 0, 0, 0, 0]));
        assert!(
            compressed
                .next()
                .unwrap_err()
                .message
                .contains("compressed")
        );
    }
}
