//! Response bodies: a full buffer, a sequence of shared `Bytes` pieces (stitched LIST
//! responses: headers around stored object bytes), or a stream (watches, pass-through).
//! Also the common response headers every apiserver response carries.

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

/// The size of the frames a [`Pieces`] body is cut into.
///
/// Small pieces (stored objects are a few KB) are copied together into frames of about this
/// size: one write per frame instead of one per piece. Measured on a `spec.nodeName` LIST of
/// 30 pods at concurrency 64, that was +9% req/s: the copy reads each object once, and the
/// kernel then copies from a buffer that is still in cache (BENCHMARKS.md).
pub const FRAME: usize = 256 * 1024;

/// A body of pieces sent in order, in frames of up to [`FRAME`] bytes (pieces that large
/// are sent as they are); its exact length is known, so HTTP/1.1 sends `Content-Length` and
/// HTTP/2 a single DATA sequence without re-buffering.
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
        let Some(first) = self.pieces.pop_front() else {
            return Poll::Ready(None);
        };
        let frame = match self.pieces.front() {
            Some(next) if first.len() + next.len() <= FRAME => {
                let mut buf = bytes::BytesMut::with_capacity(FRAME.min(usize::try_from(self.remaining).unwrap_or(FRAME)));
                buf.extend_from_slice(&first);
                while let Some(p) = self.pieces.pop_front() {
                    if buf.len() + p.len() > FRAME {
                        self.pieces.push_front(p);
                        break;
                    }
                    buf.extend_from_slice(&p);
                }
                buf.freeze()
            }
            _ => first,
        };
        self.remaining -= frame.len() as u64;
        Poll::Ready(Some(Ok(Frame::data(frame))))
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

/// A random (v4) UUID for the `Audit-Id` header, from the thread's RNG: `Uuid::new_v4` asks
/// the kernel for randomness on every call, a syscall per response.
fn audit_id() -> String {
    uuid::Builder::from_random_bytes(rand::random()).into_uuid().to_string()
}

/// A response with the headers the apiserver puts on every response.
pub fn respond(code: StatusCode, content_type: &str, body: Body) -> Response<Body> {
    let mut resp = Response::new(body);
    *resp.status_mut() = code;
    let h = resp.headers_mut();
    if let Ok(v) = HeaderValue::from_str(&audit_id()) {
        h.insert("audit-id", v);
    }
    h.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache, private"));
    if let Ok(v) = HeaderValue::from_str(content_type) {
        h.insert(header::CONTENT_TYPE, v);
    }
    resp
}

#[cfg(test)]
mod tests {
    use super::*;
    use http_body::Body as _;
    use proptest::prelude::*;

    proptest! {
        #[test]
        fn pieces_send_every_byte_in_order_in_bounded_frames(sizes in proptest::collection::vec(0usize..(FRAME + 100), 0..12)) {
            let pieces: Vec<Bytes> = sizes.iter().enumerate().map(|(i, n)| Bytes::from(vec![i as u8; *n])).collect();
            let want: Vec<u8> = pieces.iter().flat_map(|p| p.iter().copied()).collect();
            let mut body = Pieces::new(pieces);
            prop_assert_eq!(body.size_hint().exact(), Some(want.len() as u64));
            let mut got = Vec::new();
            let waker = futures_util::task::noop_waker();
            let mut cx = Context::from_waker(&waker);
            while let Poll::Ready(Some(frame)) = Pin::new(&mut body).poll_frame(&mut cx) {
                let data = frame.unwrap().into_data().unwrap();
                prop_assert!(data.len() <= FRAME || sizes.contains(&data.len()), "a frame over FRAME is one piece as it was");
                got.extend_from_slice(&data);
                prop_assert_eq!(body.size_hint().exact(), Some((want.len() - got.len()) as u64));
            }
            prop_assert!(body.is_end_stream());
            prop_assert_eq!(got, want);
        }
    }
}
