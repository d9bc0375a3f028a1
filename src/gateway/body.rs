//! Request bodies: read within a limit, and read to their end when their handler did not.
//!
//! An HTTP/1.1 client sends its whole body before it reads the answer. A server that
//! answers early and closes the connection with the body's rest unread makes the kernel
//! reset it: the client, still writing, gets a broken pipe instead of the answer (E2B's
//! SDK then raises "unavailable", not the refusal). So the gateway's outermost layer
//! ([`layer`]) reads what its handler left of a body and drops it, up to
//! [`DRAINED_AT_MOST`] (nginx's lingering close, bounded), before the answer goes; past
//! that the connection goes. No handler drains a body itself.

use super::error::ApiError;
use axum::body::{Body, Bytes, HttpBody};
use axum::extract::{FromRequest, Request};
use axum::http::{StatusCode, header};
use axum::middleware::Next;
use axum::response::Response;
use futures_util::StreamExt;
use hyper::body::{Frame, SizeHint};
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};

/// What a refused body is read to its end for (and dropped); past it the connection goes.
const DRAINED_AT_MOST: usize = 64 << 20;

/// A REST body (a request's; an answer a host rewrites or a router merges; a create a
/// router keeps to send again) is a small JSON object: 16 MiB is far past any E2B sends.
pub const MAX_REST_BODY: usize = 16 << 20;

/// Why a body was not taken.
#[derive(Debug)]
pub enum BodyError {
    /// More than the limit (what is left of it the layer reads and drops).
    TooLarge { limit: usize },
    /// The client's body broke off (its connection closed or sent a bad chunk).
    Broken(String),
}

impl BodyError {
    /// "more than LIMIT bytes", or how it broke off.
    pub fn describe(&self) -> String {
        match self {
            BodyError::TooLarge { limit } => format!("more than {limit} bytes"),
            BodyError::Broken(err) => format!("it broke off ({err})"),
        }
    }
}

/// `body` whole, if it is at most `limit` bytes.
pub async fn read(body: Body, limit: usize) -> Result<Bytes, BodyError> {
    let mut chunks = body.into_data_stream();
    let mut whole = bytes::BytesMut::new();
    while let Some(chunk) = chunks.next().await {
        let chunk = chunk.map_err(|err| BodyError::Broken(err.to_string()))?;
        if whole.len() + chunk.len() > limit {
            return Err(BodyError::TooLarge { limit });
        }
        whole.extend_from_slice(&chunk);
    }
    Ok(whole.freeze())
}

/// Reads what is left of a body, up to [`DRAINED_AT_MOST`], and drops it.
async fn drain(rest: Body) {
    let mut chunks = rest.into_data_stream();
    let mut seen = 0usize;
    while let Some(Ok(chunk)) = chunks.next().await {
        seen += chunk.len();
        if seen > DRAINED_AT_MOST {
            return;
        }
    }
}

/// The layer around every route: a request body its handler dropped before its end is
/// read to its end (up to [`DRAINED_AT_MOST`]) before the answer goes. A body never
/// polled under `Expect: 100-continue` is left alone: its client has sent none of it and
/// waits for the answer (reading it would ask for it, to drop it).
pub async fn layer(request: Request, next: Next) -> Response {
    let expects_continue = request
        .headers()
        .get(header::EXPECT)
        .is_some_and(|value| value.as_bytes().eq_ignore_ascii_case(b"100-continue"));
    let left = Arc::new(Mutex::new(None));
    let request = request.map(|body| {
        Body::new(Watched {
            inner: Some(body),
            polled: false,
            expects_continue,
            left: left.clone(),
        })
    });
    let answer = next.run(request).await;
    let rest = left.lock().map(|mut left| left.take()).unwrap_or(None);
    if let Some(rest) = rest {
        drain(rest).await;
    }
    answer
}

/// A request body that, dropped before its end, leaves its rest in `left` for [`layer`].
struct Watched {
    inner: Option<Body>,
    polled: bool,
    expects_continue: bool,
    left: Arc<Mutex<Option<Body>>>,
}

impl HttpBody for Watched {
    type Data = Bytes;
    type Error = axum::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, axum::Error>>> {
        let this = &mut *self;
        this.polled = true;
        match this.inner.as_mut() {
            Some(inner) => Pin::new(inner).poll_frame(cx),
            None => Poll::Ready(None),
        }
    }

    fn is_end_stream(&self) -> bool {
        self.inner.as_ref().is_none_or(HttpBody::is_end_stream)
    }

    fn size_hint(&self) -> SizeHint {
        self.inner
            .as_ref()
            .map(HttpBody::size_hint)
            .unwrap_or_else(|| SizeHint::with_exact(0))
    }
}

impl Drop for Watched {
    fn drop(&mut self) {
        let Some(inner) = self.inner.take() else {
            return;
        };
        if inner.is_end_stream() || (self.expects_continue && !self.polled) {
            return;
        }
        if let Ok(mut left) = self.left.lock() {
            *left = Some(inner);
        }
    }
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
    fn a_body_past_its_limit_is_refused_with_the_limit() {
        let body = chunked(vec![b"ab", b"cde", b"fgh"]);
        let err = block_on(read(body, 4)).unwrap_err();
        assert!(matches!(err, BodyError::TooLarge { limit: 4 }), "{err:?}");
        assert_eq!(err.describe(), "more than 4 bytes");
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
