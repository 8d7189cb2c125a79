//! HTTP bodies, both ways: the one body type kache sends (responses to clients, requests to
//! the upstream): a full buffer, stored object bytes stitched between a head and a tail (LIST
//! and GET: borrowed from the snapshot the body holds, written with `writev`), or a stream
//! (watches, pass-through); a body passed on as it is with a [`Tap`] told of each poll
//! ([`Tapped`]: places held, progress and costs observed); and what a request body must be
//! for kache to read or forward it.

use bytes::{Buf, BufMut, Bytes};
use http_body::{Frame, SizeHint};
use http_body_util::{combinators::UnsyncBoxBody, BodyExt, Full};
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

/// Error type of streamed bodies.
pub type BoxError = Box<dyn std::error::Error + Send + Sync>;
/// The body type of every response kache sends.
pub type Body = UnsyncBoxBody<Chunk, BoxError>;

/// A body made of the given bytes.
pub fn full(bytes: impl Into<Bytes>) -> Body {
    Full::new(Chunk::One(bytes.into())).map_err(|never| match never {}).boxed_unsync()
}

/// An empty body.
pub fn empty() -> Body {
    full(Bytes::new())
}

/// What a request body must be for kache to read or forward it: hyper's `Incoming` from a
/// connection, or any body a test builds (so the app can be driven without a socket).
pub trait RequestBody: http_body::Body<Data = Bytes, Error: Into<BoxError>> + Send + Sync + Unpin + 'static {}

impl<B> RequestBody for B
where
    B: http_body::Body<Data = Bytes> + Send + Sync + Unpin + 'static,
    B::Error: Into<BoxError>,
{
}

/// A body streamed from elsewhere (the upstream's response, a client's request), as a
/// [`Body`] with the same frames, end and size hint.
pub fn streamed<B: RequestBody>(incoming: B) -> Body {
    UnsyncBoxBody::new(Streamed(incoming))
}

struct Streamed<B>(B);

impl<B: RequestBody> http_body::Body for Streamed<B> {
    type Data = Chunk;
    type Error = BoxError;

    fn poll_frame(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Result<Frame<Chunk>, BoxError>>> {
        Pin::new(&mut self.0).poll_frame(cx).map(|f| f.map(|f| f.map(|f| f.map_data(Chunk::One)).map_err(Into::into)))
    }

    fn is_end_stream(&self) -> bool {
        self.0.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.0.size_hint()
    }
}

/// A body passed on as it is (its frames, end and size hint), with a [`Tap`] told of each
/// poll: for what a body carries along without changing what it sends (places held until it
/// has been sent, a stream's progress, the time an answer took).
pub struct Tapped<B, T> {
    inner: B,
    tap: T,
}

impl<B, T> Tapped<B, T> {
    /// `inner`, telling `tap`.
    pub fn new(inner: B, tap: T) -> Tapped<B, T> {
        Tapped { inner, tap }
    }
}

/// What a [`Tapped`] body tells its tap as its inner body is polled; the tap ignores what it
/// does not implement. The body dropped (sent or abandoned) drops the tap: its `Drop` is its
/// hook for that.
pub trait Tap<D, E> {
    /// Before each poll of the inner body.
    fn polling(&mut self) {}

    /// After each poll the inner body answered: its frame, or `None` at its end; `ended`
    /// whether it has nothing after this frame (a body that knows its length is not polled
    /// again once it is all sent).
    fn polled(&mut self, frame: Option<&Result<Frame<D>, E>>, ended: bool) {
        let _ = (frame, ended);
    }
}

impl<B, T> http_body::Body for Tapped<B, T>
where
    B: http_body::Body + Unpin,
    T: Tap<B::Data, B::Error> + Unpin,
{
    type Data = B::Data;
    type Error = B::Error;

    fn poll_frame(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Result<Frame<B::Data>, B::Error>>> {
        let this = self.get_mut();
        this.tap.polling();
        let frame = std::task::ready!(Pin::new(&mut this.inner).poll_frame(cx));
        this.tap.polled(frame.as_ref(), this.inner.is_end_stream());
        Poll::Ready(frame)
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}

/// A response's pieces, borrowed from the store: a head kache wrote, stored object bytes,
/// and a static tail, sent in that order.
#[derive(yoke::Yokeable)]
pub struct Stitch<'a> {
    /// Written for this response (a list's metadata, an object's envelope).
    pub head: Vec<u8>,
    /// Stored bytes, borrowed from the owner the body holds, and the small pieces written
    /// between them (a metadata item's header).
    pub items: Vec<Piece<'a>>,
    /// The end (`]}` and a newline, protobuf's empty trailer; a custom resource list's
    /// `kind` and `metadata`, which follow its items).
    pub tail: std::borrow::Cow<'static, [u8]>,
}

/// One item piece of a [`Stitch`]: bytes borrowed from the owner (or static), or a few
/// bytes written for this response (a protobuf item's key and length) held inline, so a
/// list of 30,000 items needs no allocation per item.
#[derive(Clone, Copy)]
pub enum Piece<'a> {
    /// Borrowed bytes.
    Stored(&'a [u8]),
    /// Up to 22 bytes held here.
    Inline { len: u8, buf: [u8; 22] },
}

impl<'a> Piece<'a> {
    /// A piece holding a copy of `bytes` (at most 22 bytes; longer input is cut).
    pub fn inline(bytes: &[u8]) -> Piece<'a> {
        let mut buf = [0; 22];
        let len = bytes.len().min(22);
        buf[..len].copy_from_slice(&bytes[..len]);
        Piece::Inline { len: len as u8, buf }
    }

    /// The piece's bytes.
    pub fn bytes(&self) -> &[u8] {
        match self {
            Piece::Stored(b) => b,
            Piece::Inline { len, buf } => &buf[..usize::from(*len)],
        }
    }
}

impl<'a> From<&'a [u8]> for Piece<'a> {
    fn from(b: &'a [u8]) -> Piece<'a> {
        Piece::Stored(b)
    }
}

impl Stitch<'_> {
    /// Pieces in all: head, items, tail.
    fn count(&self) -> usize {
        self.items.len() + 2
    }

    /// Piece `i` of [`Stitch::count`].
    fn piece(&self, i: usize) -> &[u8] {
        match i {
            0 => &self.head,
            i if i <= self.items.len() => self.items[i - 1].bytes(),
            _ => &self.tail,
        }
    }

    /// Length in bytes.
    fn len(&self) -> usize {
        (0..self.count()).map(|i| self.piece(i).len()).sum()
    }
}

/// A [`Stitch`] with the owner of the bytes it borrows (a store snapshot, or one object):
/// one reference count keeps every item alive, instead of one per item.
pub type Stitched = yoke::Yoke<Stitch<'static>, yoke::erased::ErasedArcCart>;

/// One DATA frame of a [`Body`]: one buffer, or a run of a [`Stitched`] body's pieces.
///
/// A run of pieces goes out in one vectored write (hyper and h2 hand `chunks_vectored` to
/// `writev`), so the stored object bytes of a LIST go from the store to the socket without
/// being copied together first.
pub enum Chunk {
    /// One buffer.
    One(Bytes),
    /// Pieces `at..end` of `all`, the first from byte `off` on; `remaining` bytes in all.
    Pieces { all: Arc<Stitched>, at: usize, end: usize, off: usize, remaining: usize },
    /// A run of a WatchList's events, with where its deflated form is kept (the cache's
    /// runs): a gzip encoding sends that instead of deflating the bytes again; any other
    /// reader reads the bytes.
    Run(Bytes, Arc<dyn KeepsDeflated>),
}

/// A run's events deflated on their own (their blocks refer to nothing before them), and the
/// CRC of the events.
#[derive(Debug)]
pub struct Deflated {
    pub bytes: Bytes,
    pub crc: flate2::Crc,
}

/// Where a [`Chunk::Run`]'s deflated form is kept between streams.
pub trait KeepsDeflated: Send + Sync {
    /// The run deflated, once some stream has deflated it.
    fn deflated(&self) -> Option<&Deflated>;
    /// Offer `bytes`, the run's `len` bytes of events deflated, and `crc`, their CRC; the
    /// keeper decides whether to keep them.
    fn keep(&self, bytes: Bytes, crc: flate2::Crc, len: usize);
}

impl std::fmt::Debug for Chunk {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Chunk::One(b) => f.debug_tuple("One").field(&b.len()).finish(),
            Chunk::Run(b, _) => f.debug_tuple("Run").field(&b.len()).finish(),
            Chunk::Pieces { at, end, remaining, .. } => {
                f.debug_struct("Pieces").field("at", at).field("end", end).field("remaining", remaining).finish()
            }
        }
    }
}

/// The unsent, non-empty slices of pieces `at..end` of `stitch`, the first from byte `off`.
fn unsent<'a>(stitch: &'a Stitch<'_>, at: usize, end: usize, off: usize) -> impl Iterator<Item = &'a [u8]> {
    (at..end).map(move |i| if i == at { &stitch.piece(i)[off..] } else { stitch.piece(i) }).filter(|p| !p.is_empty())
}

impl Buf for Chunk {
    fn remaining(&self) -> usize {
        match self {
            Chunk::One(b) | Chunk::Run(b, _) => b.len(),
            Chunk::Pieces { remaining, .. } => *remaining,
        }
    }

    fn chunk(&self) -> &[u8] {
        match self {
            Chunk::One(b) | Chunk::Run(b, _) => b,
            Chunk::Pieces { all, at, end, off, .. } => unsent(all.get(), *at, *end, *off).next().unwrap_or(&[]),
        }
    }

    fn advance(&mut self, mut cnt: usize) {
        match self {
            Chunk::One(b) | Chunk::Run(b, _) => b.advance(cnt),
            Chunk::Pieces { all, at, end, off, remaining } => {
                assert!(cnt <= *remaining, "advance past the end of a chunk");
                *remaining -= cnt;
                let stitch = all.get();
                while cnt > 0 && *at < *end {
                    let left = stitch.piece(*at).len() - *off;
                    if cnt < left {
                        *off += cnt;
                        return;
                    }
                    cnt -= left;
                    *at += 1;
                    *off = 0;
                }
            }
        }
    }

    fn chunks_vectored<'a>(&'a self, dst: &mut [std::io::IoSlice<'a>]) -> usize {
        match self {
            Chunk::One(b) | Chunk::Run(b, _) => b.chunks_vectored(dst),
            Chunk::Pieces { all, at, end, off, .. } => {
                let mut n = 0;
                for (slot, p) in dst.iter_mut().zip(unsent(all.get(), *at, *end, *off)) {
                    *slot = std::io::IoSlice::new(p);
                    n += 1;
                }
                n
            }
        }
    }

    fn copy_to_bytes(&mut self, len: usize) -> Bytes {
        match self {
            Chunk::One(b) | Chunk::Run(b, _) => b.copy_to_bytes(len),
            Chunk::Pieces { remaining, .. } => {
                assert!(len <= *remaining, "copy_to_bytes past the end of a chunk");
                let mut out = bytes::BytesMut::with_capacity(len);
                out.put((&mut *self).take(len));
                out.freeze()
            }
        }
    }
}

/// The most bytes a frame of a stitched body gathers (a single piece may be larger).
const FRAME: usize = 256 * 1024;

/// The most pieces a frame of a stitched body gathers: hyper writes at most 64 buffers
/// per `writev`, one of them the response head.
const FRAME_PIECES: usize = 60;

/// A body of the pieces `build` borrows from `owner`; `build` may refuse with an error.
/// Its exact length is known, so HTTP/1.1 sends `Content-Length` and HTTP/2 a single DATA
/// sequence without re-buffering.
pub fn try_stitched<C, E>(owner: Arc<C>, build: impl for<'a> FnOnce(&'a C) -> Result<Stitch<'a>, E>) -> Result<Body, E>
where
    C: Send + Sync + 'static,
{
    let all = yoke::Yoke::<Stitch<'static>, Arc<C>>::try_attach_to_cart(owner, build)?.erase_arc_cart();
    let remaining = all.get().len() as u64;
    Ok(UnsyncBoxBody::new(StitchedBody { all: Arc::new(all), next: 0, remaining }))
}

/// A [`Stitched`] body, sent in frames of up to [`FRAME`] bytes and [`FRAME_PIECES`]
/// pieces (a larger piece is a frame of its own); over HTTP/1.1 each frame is one vectored
/// write (h2 cuts frames into DATA frames of its own size).
struct StitchedBody {
    all: Arc<Stitched>,
    next: usize,
    remaining: u64,
}

impl http_body::Body for StitchedBody {
    type Data = Chunk;
    type Error = BoxError;

    fn poll_frame(mut self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<Option<Result<Frame<Chunk>, BoxError>>> {
        let this = &mut *self;
        let stitch = this.all.get();
        let count = stitch.count();
        // Empty pieces are skipped, so no frame is empty.
        while this.next < count && stitch.piece(this.next).is_empty() {
            this.next += 1;
        }
        if this.next == count {
            return Poll::Ready(None);
        }
        let at = this.next;
        let mut size = 0;
        while this.next < count {
            let len = stitch.piece(this.next).len();
            if this.next > at && (size + len > FRAME || this.next - at == FRAME_PIECES) {
                break;
            }
            size += len;
            this.next += 1;
        }
        this.remaining -= size as u64;
        Poll::Ready(Some(Ok(Frame::data(Chunk::Pieces { all: this.all.clone(), at, end: this.next, off: 0, remaining: size }))))
    }

    fn is_end_stream(&self) -> bool {
        self.remaining == 0
    }

    fn size_hint(&self) -> SizeHint {
        SizeHint::with_exact(self.remaining)
    }
}

/// A streamed body fed by a channel (watch events).
pub fn channel(rx: tokio::sync::mpsc::Receiver<Bytes>) -> Body {
    let stream =
        futures_util::stream::unfold(
            rx,
            |mut rx| async move { rx.recv().await.map(|b| (Ok::<_, BoxError>(Frame::data(Chunk::One(b))), rx)) },
        );
    http_body_util::StreamBody::new(stream).boxed_unsync()
}

#[cfg(test)]
mod tests {
    use super::*;
    use http_body::Body as _;
    use proptest::prelude::*;

    /// A body of a head of `head` bytes, items of `sizes` bytes borrowed from an owner, and
    /// `tail`; the bytes it must send.
    fn stitched_body(head: usize, sizes: &[usize], tail: &'static [u8]) -> (Body, Vec<u8>) {
        let owner: Arc<Vec<Vec<u8>>> = Arc::new(sizes.iter().enumerate().map(|(i, n)| vec![i as u8 + 1; *n]).collect());
        let head = vec![0xee; head];
        let mut want = head.clone();
        owner.iter().for_each(|p| want.extend_from_slice(p));
        want.extend_from_slice(tail);
        let body = try_stitched(owner, |o| {
            Ok::<_, ()>(Stitch { head, items: o.iter().map(|v| Piece::from(v.as_slice())).collect(), tail: tail.into() })
        })
        .unwrap();
        (body, want)
    }

    proptest! {
        #[test]
        fn stitched_bodies_send_every_byte_in_order_in_bounded_frames(head in 0usize..300, sizes in proptest::collection::vec(prop_oneof![20 => 0usize..64, 1 => (FRAME - 100)..(FRAME + 100)], 0..150), full_tail in any::<bool>()) {
            let (mut body, want) = stitched_body(head, &sizes, if full_tail { b"]}\n" } else { b"" });
            prop_assert_eq!(body.size_hint().exact(), Some(want.len() as u64));
            let mut got = Vec::new();
            let waker = futures_util::task::noop_waker();
            let mut cx = Context::from_waker(&waker);
            while let Poll::Ready(Some(frame)) = Pin::new(&mut body).poll_frame(&mut cx) {
                let mut data = frame.unwrap().into_data().unwrap();
                let n = data.remaining();
                prop_assert!(n > 0, "no empty frames");
                prop_assert!(n <= FRAME || sizes.contains(&n), "a frame over FRAME is one piece as it was");
                let mut iov = [std::io::IoSlice::new(&[]); 64];
                let used = data.chunks_vectored(&mut iov);
                prop_assert!(used <= FRAME_PIECES);
                prop_assert_eq!(iov[..used].iter().map(|s| s.len()).sum::<usize>(), n, "one vectored write carries the whole frame");
                // Read it back as partial writes would: offer a few slices, take part of them
                // (across pieces, or part of one), advance by what was taken.
                let mut step = 1;
                while data.has_remaining() {
                    let mut iov = [std::io::IoSlice::new(&[]); 3];
                    let used = data.chunks_vectored(&mut iov);
                    prop_assert!(used > 0);
                    prop_assert_eq!(&*iov[0], data.chunk(), "the first slice is the current chunk");
                    let mut taken = 0;
                    for slice in &iov[..used] {
                        let t = slice.len().min(step - taken);
                        got.extend_from_slice(&slice[..t]);
                        taken += t;
                    }
                    data.advance(taken);
                    step = step * 3 + 1;
                }
                let mut after = [std::io::IoSlice::new(&[]); 1];
                prop_assert_eq!(data.chunks_vectored(&mut after), 0, "nothing left to offer");
                prop_assert_eq!(body.size_hint().exact(), Some((want.len() - got.len()) as u64));
            }
            prop_assert!(body.is_end_stream());
            prop_assert_eq!(got, want);
        }

        #[test]
        fn chunks_read_back_every_byte_through_copy_to_bytes(head in 0usize..40, sizes in proptest::collection::vec(0usize..64, 0..10), takes in proptest::collection::vec(0usize..80, 0..10)) {
            let (mut body, want) = stitched_body(head, &sizes, b"]}\n");
            let waker = futures_util::task::noop_waker();
            let mut cx = Context::from_waker(&waker);
            let Poll::Ready(Some(frame)) = Pin::new(&mut body).poll_frame(&mut cx) else { panic!("one frame") };
            let mut c = frame.unwrap().into_data().unwrap();
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

    /// A tap that writes down what it is told.
    #[derive(Default)]
    struct Log(Arc<std::sync::Mutex<Vec<String>>>);

    impl Tap<Chunk, BoxError> for Log {
        fn polling(&mut self) {
            self.0.lock().unwrap().push("polling".into());
        }

        fn polled(&mut self, frame: Option<&Result<Frame<Chunk>, BoxError>>, ended: bool) {
            let what = match frame {
                Some(Ok(f)) => format!("{} bytes", f.data_ref().map_or(0, Buf::remaining)),
                Some(Err(e)) => e.to_string(),
                None => "end".into(),
            };
            self.0.lock().unwrap().push(format!("{what}, ended {ended}"));
        }
    }

    #[tokio::test]
    async fn a_tapped_body_sends_what_its_inner_body_sends_and_tells_its_tap_each_poll() {
        let log = Log::default();
        let seen = log.0.clone();
        let (tx, rx) = tokio::sync::mpsc::channel(2);
        let mut body = Tapped::new(channel(rx), log);
        assert_eq!((body.is_end_stream(), body.size_hint().exact()), (false, None));
        tx.send(Bytes::from_static(b"abc")).await.unwrap();
        drop(tx);
        let frame = http_body_util::BodyExt::frame(&mut body).await.unwrap().unwrap();
        assert_eq!(frame.into_data().unwrap().copy_to_bytes(3), Bytes::from_static(b"abc"));
        assert!(http_body_util::BodyExt::frame(&mut body).await.is_none());
        // A stream does not know it has ended until it gives nothing: `ended` is the inner
        // body's own word.
        assert_eq!(*seen.lock().unwrap(), ["polling", "3 bytes, ended false", "polling", "end, ended false"]);

        // A body that knows its length: its last frame says so, and its size passes through.
        let mut body = Tapped::new(full("xy"), Log::default());
        assert_eq!(body.size_hint().exact(), Some(2));
        let seen = body.tap.0.clone();
        http_body_util::BodyExt::frame(&mut body).await.unwrap().unwrap();
        assert!(body.is_end_stream());
        assert_eq!(*seen.lock().unwrap(), ["polling", "2 bytes, ended true"]);
    }
}
