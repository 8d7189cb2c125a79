//! Response bodies: a full buffer, a sequence of shared `Bytes` pieces (stitched LIST
//! responses: headers around stored object bytes), or a stream (watches, pass-through).
//! Also the common response headers every apiserver response carries.

use bytes::{Buf, BufMut, Bytes};
use http::{header, HeaderValue, Response, StatusCode};
use http_body::{Frame, SizeHint};
use http_body_util::{combinators::UnsyncBoxBody, BodyExt, Full};
use std::pin::Pin;
use std::task::{Context, Poll};

/// Error type of streamed bodies.
pub type BoxError = Box<dyn std::error::Error + Send + Sync>;
/// The body type of every response kache sends.
pub type Body = UnsyncBoxBody<Chunk, BoxError>;

/// A body made of the given bytes.
pub fn full(bytes: impl Into<Bytes>) -> Body {
    Full::new(Chunk::One(bytes.into())).map_err(|never| match never {}).boxed_unsync()
}

/// A body streamed from hyper (the upstream's response, a client's request), as a [`Body`].
pub fn streamed(incoming: hyper::body::Incoming) -> Body {
    incoming.map_frame(|f| f.map_data(Chunk::One)).map_err(BoxError::from).boxed_unsync()
}

/// One DATA frame of a [`Body`]: one buffer, or several shared buffers sent back to back.
///
/// Several pieces go out in one vectored write (hyper and h2 hand `chunks_vectored` to
/// `writev`), so the stored object bytes of a LIST go from the store to the socket without
/// being copied together first.
#[derive(Debug)]
pub enum Chunk {
    /// One buffer.
    One(Bytes),
    /// Pieces in order, from `pieces[at]` on (none of them empty).
    Many { pieces: Vec<Bytes>, at: usize, remaining: usize },
}

impl Chunk {
    /// A chunk of `pieces` in order (empty pieces are left out).
    pub fn many(mut pieces: Vec<Bytes>) -> Chunk {
        pieces.retain(|p| !p.is_empty());
        let remaining = pieces.iter().map(Bytes::len).sum();
        Chunk::Many { pieces, at: 0, remaining }
    }
}

impl From<Bytes> for Chunk {
    fn from(b: Bytes) -> Chunk {
        Chunk::One(b)
    }
}

impl Buf for Chunk {
    fn remaining(&self) -> usize {
        match self {
            Chunk::One(b) => b.len(),
            Chunk::Many { remaining, .. } => *remaining,
        }
    }

    fn chunk(&self) -> &[u8] {
        match self {
            Chunk::One(b) => b,
            Chunk::Many { pieces, at, .. } => pieces.get(*at).map_or(&[], |p| p),
        }
    }

    fn advance(&mut self, mut cnt: usize) {
        match self {
            Chunk::One(b) => b.advance(cnt),
            Chunk::Many { pieces, at, remaining } => {
                assert!(cnt <= *remaining, "advance past the end of a chunk");
                *remaining -= cnt;
                while cnt > 0 {
                    let p = &mut pieces[*at];
                    if cnt < p.len() {
                        p.advance(cnt);
                        return;
                    }
                    cnt -= p.len();
                    *at += 1;
                }
            }
        }
    }

    fn chunks_vectored<'a>(&'a self, dst: &mut [std::io::IoSlice<'a>]) -> usize {
        match self {
            Chunk::One(b) => b.chunks_vectored(dst),
            Chunk::Many { pieces, at, .. } => {
                let mut n = 0;
                for (slot, p) in dst.iter_mut().zip(&pieces[*at..]) {
                    *slot = std::io::IoSlice::new(p);
                    n += 1;
                }
                n
            }
        }
    }

    fn copy_to_bytes(&mut self, len: usize) -> Bytes {
        match self {
            Chunk::One(b) => b.copy_to_bytes(len),
            Chunk::Many { pieces, at, .. } if pieces.get(*at).is_some_and(|p| p.len() >= len) => {
                let out = pieces[*at].slice(..len);
                self.advance(len);
                out
            }
            Chunk::Many { .. } => {
                let mut out = bytes::BytesMut::with_capacity(len);
                out.put((&mut *self).take(len));
                out.freeze()
            }
        }
    }
}

/// An empty body.
pub fn empty() -> Body {
    full(Bytes::new())
}

/// The most bytes a [`Pieces`] frame gathers (a single piece may be larger).
pub const FRAME: usize = 256 * 1024;

/// The most pieces a [`Pieces`] frame gathers: hyper writes at most 64 buffers per
/// `writev`, one of them the response head.
pub const FRAME_PIECES: usize = 60;

/// A body of pieces sent in order, in frames of up to [`FRAME`] bytes and [`FRAME_PIECES`]
/// pieces (a piece larger than that is a frame of its own); its exact length is known, so
/// HTTP/1.1 sends `Content-Length` and HTTP/2 a single DATA sequence without re-buffering.
///
/// Frames are [`Chunk::Many`]: the pieces are shared, not copied, and each frame is one
/// vectored write. Measured on a `spec.nodeName` LIST of 30 pods at concurrency 64 against
/// copying the pieces into one buffer: see BENCHMARKS.md.
pub struct Pieces {
    pieces: std::vec::IntoIter<Bytes>,
    remaining: u64,
}

impl Pieces {
    /// A body of `pieces`.
    pub fn new(pieces: Vec<Bytes>) -> Self {
        let remaining = pieces.iter().map(|p| p.len() as u64).sum();
        Pieces { pieces: pieces.into_iter(), remaining }
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
    type Data = Chunk;
    type Error = BoxError;

    fn poll_frame(mut self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<Option<Result<Frame<Chunk>, BoxError>>> {
        let mut frame = Vec::new();
        let mut size = 0;
        while let Some(p) = self.pieces.as_slice().first() {
            if !frame.is_empty() && (size + p.len() > FRAME || frame.len() == FRAME_PIECES) {
                break;
            }
            size += p.len();
            frame.extend(self.pieces.next());
        }
        if frame.is_empty() {
            return Poll::Ready(None);
        }
        self.remaining -= size as u64;
        let chunk = if frame.len() == 1 { Chunk::One(frame.remove(0)) } else { Chunk::many(frame) };
        Poll::Ready(Some(Ok(Frame::data(chunk))))
    }

    fn is_end_stream(&self) -> bool {
        self.pieces.as_slice().is_empty()
    }

    fn size_hint(&self) -> SizeHint {
        SizeHint::with_exact(self.remaining)
    }
}

/// A streamed body fed by a channel (watch events).
pub fn channel(rx: tokio::sync::mpsc::Receiver<Bytes>) -> Body {
    let stream = futures_util::stream::unfold(rx, |mut rx| async move {
        rx.recv().await.map(|b| (Ok::<_, BoxError>(Frame::data(Chunk::One(b))), rx))
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
                let mut data = frame.unwrap().into_data().unwrap();
                let n = data.remaining();
                prop_assert!(n <= FRAME || sizes.contains(&n), "a frame over FRAME is one piece as it was");
                let mut iov = [std::io::IoSlice::new(&[]); FRAME_PIECES];
                let used = data.chunks_vectored(&mut iov);
                prop_assert!(used <= FRAME_PIECES);
                prop_assert_eq!(iov[..used].iter().map(|s| s.len()).sum::<usize>(), n, "one vectored write carries the whole frame");
                // Read it back in uneven steps, as partial writes would.
                let mut step = 1;
                while data.has_remaining() {
                    let k = data.chunk().len().min(step);
                    got.extend_from_slice(&data.chunk()[..k]);
                    data.advance(k);
                    step = step * 3 + 1;
                }
                prop_assert_eq!(body.size_hint().exact(), Some((want.len() - got.len()) as u64));
            }
            prop_assert!(body.is_end_stream());
            prop_assert_eq!(got, want);
        }

        #[test]
        fn chunk_reads_back_every_byte_through_copy_to_bytes(sizes in proptest::collection::vec(0usize..64, 0..10), takes in proptest::collection::vec(0usize..80, 0..10)) {
            let pieces: Vec<Bytes> = sizes.iter().enumerate().map(|(i, n)| Bytes::from(vec![i as u8; *n])).collect();
            let want: Vec<u8> = pieces.iter().flat_map(|p| p.iter().copied()).collect();
            let mut c = Chunk::many(pieces);
            let mut got = Vec::new();
            for t in takes {
                let t = t.min(c.remaining());
                got.extend_from_slice(&c.copy_to_bytes(t));
            }
            got.extend_from_slice(&c.copy_to_bytes(c.remaining()));
            prop_assert_eq!(c.remaining(), 0);
            prop_assert_eq!(got, want);
        }
    }
}
