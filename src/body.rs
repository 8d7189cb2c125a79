//! Response bodies: a full buffer, a sequence of shared `Bytes` pieces (stitched LIST
//! responses: headers around stored object bytes, nothing copied), or a stream (watches,
//! pass-through). Also the common response headers every apiserver response carries.

use bytes::Bytes;
use http::{header, HeaderValue, Response, StatusCode};
use http_body::{Frame, SizeHint};
use http_body_util::{combinators::UnsyncBoxBody, BodyExt, Full};
use std::collections::VecDeque;
use std::pin::Pin;
use std::task::{Context, Poll};

/// Error type of streamed bodies.
pub type BoxError = Box<dyn std::error::Error + Send + Sync>;
/// The body type of every response kache sends.
pub type Body = UnsyncBoxBody<Bytes, BoxError>;

/// A body made of the given bytes.
pub fn full(bytes: impl Into<Bytes>) -> Body {
    Full::new(bytes.into()).map_err(|never| match never {}).boxed_unsync()
}

/// An empty body.
pub fn empty() -> Body {
    full(Bytes::new())
}

/// A body of pieces sent in order; its exact length is known, so HTTP/1.1 sends
/// `Content-Length` and HTTP/2 a single DATA sequence without re-buffering.
pub struct Pieces {
    pieces: VecDeque<Bytes>,
    remaining: u64,
}

impl Pieces {
    /// A body of `pieces`.
    pub fn new(pieces: Vec<Bytes>) -> Self {
        let remaining = pieces.iter().map(|p| p.len() as u64).sum();
        Pieces { pieces: pieces.into(), remaining }
    }

    /// Total length in bytes.
    pub fn len(&self) -> u64 {
        self.remaining
    }

    /// Whether the body is empty.
    pub fn is_empty(&self) -> bool {
        self.remaining == 0
    }

    /// Box it as a [`Body`].
    pub fn boxed(self) -> Body {
        UnsyncBoxBody::new(self)
    }
}

impl http_body::Body for Pieces {
    type Data = Bytes;
    type Error = BoxError;

    fn poll_frame(mut self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        match self.pieces.pop_front() {
            Some(p) => {
                self.remaining -= p.len() as u64;
                Poll::Ready(Some(Ok(Frame::data(p))))
            }
            None => Poll::Ready(None),
        }
    }

    fn is_end_stream(&self) -> bool {
        self.pieces.is_empty()
    }

    fn size_hint(&self) -> SizeHint {
        SizeHint::with_exact(self.remaining)
    }
}

/// A streamed body fed by a channel (watch events).
pub fn channel(rx: tokio::sync::mpsc::Receiver<Bytes>) -> Body {
    let stream = futures_util::stream::unfold(rx, |mut rx| async move {
        rx.recv().await.map(|b| (Ok::<_, BoxError>(Frame::data(b)), rx))
    });
    http_body_util::StreamBody::new(stream).boxed_unsync()
}

/// A response with the headers the apiserver puts on every response.
pub fn respond(code: StatusCode, content_type: &str, body: Body) -> Response<Body> {
    let mut resp = Response::new(body);
    *resp.status_mut() = code;
    let h = resp.headers_mut();
    if let Ok(v) = HeaderValue::from_str(&uuid::Uuid::new_v4().to_string()) {
        h.insert("audit-id", v);
    }
    h.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache, private"));
    if let Ok(v) = HeaderValue::from_str(content_type) {
        h.insert(header::CONTENT_TYPE, v);
    }
    resp
}
