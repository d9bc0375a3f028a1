//! Request bodies, read within a limit, and read to their end when refused.
//!
//! An HTTP/1.1 client sends its whole body before it reads the answer. A server that
//! answers early and closes the connection with the body's rest unread makes the kernel
//! reset it: the client, still writing, gets a broken pipe instead of the answer (E2B's
//! SDK then raises "unavailable", not the refusal). So every refusal of a body the
//! gateway has started to read reads the rest and drops it, up to [`DRAINED_AT_MOST`]
//! (nginx's lingering close, bounded); past that the connection goes.

use super::error::ApiError;
use axum::body::{Body, BodyDataStream, Bytes};
use axum::extract::{FromRequest, Request};
use axum::http::StatusCode;
use futures_util::StreamExt;

/// What a refused body is read to its end for (and dropped); past it the connection goes.
pub const DRAINED_AT_MOST: usize = 64 << 20;

/// A REST body is a small JSON object; 16 MiB is far past any E2B sends.
pub const MAX_REST_BODY: usize = 16 << 20;

/// Why a body was not taken.
#[derive(Debug)]
pub enum BodyError {
    /// More than the limit: `seen` bytes, `drained` false when the client sent so much
    /// more that the gateway stopped reading (the number is then a lower bound).
    TooLarge {
        seen: usize,
        limit: usize,
        drained: bool,
    },
    /// The client's body broke off (its connection closed or sent a bad chunk).
    Broken(String),
}

impl BodyError {
    /// "N bytes, more than LIMIT" or "over N bytes, more than LIMIT".
    pub fn describe(&self) -> String {
        match self {
            BodyError::TooLarge {
                seen,
                limit,
                drained,
            } => format!(
                "{}{seen} bytes, more than {limit}",
                if *drained { "" } else { "over " }
            ),
            BodyError::Broken(err) => format!("it broke off ({err})"),
        }
    }
}

/// `body` whole, if it is at most `limit` bytes; past the limit the rest is read and
/// dropped (up to [`DRAINED_AT_MOST`]) so that the refusal reaches the client.
pub async fn read(body: Body, limit: usize) -> Result<Bytes, BodyError> {
    let mut chunks = body.into_data_stream();
    let mut whole = bytes::BytesMut::new();
    while let Some(chunk) = chunks.next().await {
        let chunk = chunk.map_err(|err| BodyError::Broken(err.to_string()))?;
        if whole.len() + chunk.len() > limit {
            let seen = whole.len() + chunk.len();
            drop(whole);
            let (rest, drained) = drain_rest(chunks).await;
            return Err(BodyError::TooLarge {
                seen: seen + rest,
                limit,
                drained,
            });
        }
        whole.extend_from_slice(&chunk);
    }
    Ok(whole.freeze())
}

/// Reads a body that is not wanted to its end, up to [`DRAINED_AT_MOST`].
pub async fn drain(body: Body) {
    drain_rest(body.into_data_stream()).await;
}

/// Reads what is left of a body, up to [`DRAINED_AT_MOST`]: the bytes read, and whether
/// that was its end.
pub async fn drain_rest(mut chunks: BodyDataStream) -> (usize, bool) {
    let mut seen = 0usize;
    while let Some(chunk) = chunks.next().await {
        let Ok(chunk) = chunk else {
            return (seen, true);
        };
        seen += chunk.len();
        if seen > DRAINED_AT_MOST {
            return (seen, false);
        }
    }
    (seen, true)
}

/// A REST request's body (at most [`MAX_REST_BODY`]), as an extractor: a larger one is a
/// 413 in E2B's error body, a broken one a 400.
pub struct RestBody(pub Bytes);

impl<S: Send + Sync> FromRequest<S> for RestBody {
    type Rejection = ApiError;

    async fn from_request(request: Request, _: &S) -> Result<RestBody, ApiError> {
        read(request.into_body(), MAX_REST_BODY)
            .await
            .map(RestBody)
            .map_err(|err| rest_refusal(&err))
    }
}

/// The REST API's answer to a body it cannot take.
pub fn rest_refusal(err: &BodyError) -> ApiError {
    match err {
        BodyError::TooLarge { .. } => ApiError::new(
            StatusCode::PAYLOAD_TOO_LARGE,
            format!(
                "the request body: {}; send E2B's JSON object, as spec/openapi.yml describes",
                err.describe()
            ),
        ),
        BodyError::Broken(_) => ApiError::bad_request(format!(
            "the request body: {}; send it whole",
            err.describe()
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn chunked(chunks: Vec<&'static [u8]>) -> Body {
        let stream = futures_util::stream::iter(
            chunks
                .into_iter()
                .map(|chunk| Ok::<_, std::io::Error>(Bytes::from_static(chunk))),
        );
        Body::from_stream(stream)
    }

    fn block_on<F: std::future::Future>(future: F) -> F::Output {
        tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap()
            .block_on(future)
    }

    #[test]
    fn a_body_within_its_limit_is_read_whole() {
        let body = chunked(vec![b"ab", b"cd", b""]);
        assert_eq!(
            block_on(read(body, 4)).unwrap(),
            Bytes::from_static(b"abcd")
        );
    }

    #[test]
    fn a_body_past_its_limit_is_read_to_its_end_and_counted() {
        let body = chunked(vec![b"ab", b"cde", b"fgh"]);
        let err = block_on(read(body, 4)).unwrap_err();
        assert!(
            matches!(
                err,
                BodyError::TooLarge {
                    seen: 8,
                    limit: 4,
                    drained: true
                }
            ),
            "{err:?}"
        );
        assert_eq!(err.describe(), "8 bytes, more than 4");
    }

    #[test]
    fn a_broken_body_says_so() {
        let stream = futures_util::stream::iter(vec![
            Ok(Bytes::from_static(b"ab")),
            Err(std::io::Error::other("reset")),
        ]);
        let err = block_on(read(Body::from_stream(stream), 4)).unwrap_err();
        assert!(err.describe().contains("reset"), "{err:?}");
    }
}
