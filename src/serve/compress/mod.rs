//! Encodings of answers kache writes itself, applied as they are sent, a frame at a time:
//! gzip as the apiserver does it (its `APIResponseCompression`, on by default: level 1 for a
//! client whose `Accept-Encoding` lists `gzip`, when the answer is larger than 128 KiB; Go
//! clients ask for it by default; lists of objects shrink many times), and the indentation
//! of `pretty` answers.
//!
//! Neither holds an answer whole: each frame is encoded when the connection asks for the
//! next one. gzip runs off the async workers one frame per job (a large LIST is much of a
//! core's work at level 1, as it is for the apiserver), and so does
//! the indentation of every frame over 16 KiB, so the workers that answer everyone's cheap
//! reads never spend a frame's work on one client's encode. The jobs of answers over 1 MiB
//! run in the low-priority lane ([`Lane`]: niced threads of their own), so they take the
//! cores only when nobody at kache's priority needs them; smaller answers' on the shared
//! blocking pool. A job encodes and returns, so no thread ever waits on a client that does
//! not read.
//! The encodes in progress are bounded ([`Encodes`]); past the bound an answer goes out
//! as it is (identity encoding, compact JSON), which every client reads.

mod watch;

pub use watch::{gzip_watch, InitialState};

use crate::api::json::Indenter;
use crate::body::{Body, BoxError, Chunk};
use crate::serve::lane::Lane;
use bytes::{Buf, Bytes};
use flate2::write::GzEncoder;
use http::{header, HeaderValue, Response};
use http_body::{Frame, SizeHint};
use http_body_util::BodyExt;
use std::future::Future;
use std::io::Write;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{ready, Context, Poll};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tokio::task::JoinHandle;

/// Default bound of answers being encoded at once: each holds a frame (up to 256 KiB) and
/// its encoding, and a gzip job a blocking thread while it runs.
pub const MAX_ENCODES: usize = 64;

/// Answers of at most this many bytes are sent as they are (the apiserver's threshold).
pub const THRESHOLD: u64 = 128 * 1024;

/// The bound on answers being encoded (indented or compressed) at once: each holds a place
/// until its body has been sent or dropped; and the lane their jobs run in.
#[derive(Debug, Clone)]
pub struct Encodes {
    places: Arc<Semaphore>,
    lane: Lane,
}

impl Encodes {
    /// At most `max` encodes at once (0: no bound), their jobs on the shared blocking pool.
    pub fn new(max: usize) -> Encodes {
        Encodes { places: Arc::new(Semaphore::new(if max == 0 { Semaphore::MAX_PERMITS } else { max })), lane: Lane::default() }
    }

    /// The same bound, the jobs in `lane`.
    pub fn in_lane(self, lane: Lane) -> Encodes {
        Encodes { lane, ..self }
    }

    /// The lane heavy jobs run in.
    pub fn lane(&self) -> &Lane {
        &self.lane
    }

    /// Where the jobs of an answer of at least `bytes` run: a large answer's (over
    /// [`LARGE`](super::admission::fair::LARGE), 1 MiB) in the lane, a smaller one's on the shared
    /// blocking pool at kache's priority, so a namespace's Table (a kubectl's, gzipped) never
    /// queues behind one client's encodes of a whole cluster's objects.
    fn lane_for(&self, bytes: u64) -> Lane {
        if bytes > super::admission::fair::LARGE {
            self.lane.clone()
        } else {
            Lane::default()
        }
    }

    /// A place for one more encode, or `None` (counted) when all are taken.
    fn place(&self) -> Option<OwnedSemaphorePermit> {
        let place = self.places.clone().try_acquire_owned().ok();
        if place.is_none() {
            crate::telemetry::limit_hit("max-concurrent-encodes");
        }
        place
    }
}

/// `resp` gzip-encoded if its body is known to be larger than [`THRESHOLD`] (an indented
/// answer: its compact text) and a place among the encodes is free; as it is otherwise
/// (small answers, streams of unknown length such as watches, and while the encodes are at
/// their bound).
pub fn gzip(resp: Response<Body>, encodes: &Encodes) -> Response<Body> {
    let bytes = http_body::Body::size_hint(resp.body()).lower();
    if bytes <= THRESHOLD {
        return resp;
    }
    let Some(place) = encodes.place() else { return resp };
    let (mut parts, body) = resp.into_parts();
    parts.headers.remove(header::CONTENT_LENGTH);
    parts.headers.insert(header::CONTENT_ENCODING, HeaderValue::from_static("gzip"));
    parts.headers.append(header::VARY, HeaderValue::from_static("Accept-Encoding"));
    let enc = GzEncoder::new(Vec::new(), flate2::Compression::new(1));
    let body = Gzipped { inner: body, enc: Some(enc), job: None, finished: false, lane: encodes.lane_for(bytes), _place: place };
    Response::from_parts(parts, body.boxed_unsync())
}

/// A JSON answer indented as the apiserver's pretty serializer writes it (without the
/// compact form's final newline), as it is sent; other answers (and JSON while the encodes
/// are at their bound) as they are.
pub fn indented(resp: Response<Body>, encodes: &Encodes) -> Response<Body> {
    let json = resp.headers().get(header::CONTENT_TYPE).is_some_and(|v| v.as_bytes() == b"application/json");
    if !json {
        return resp;
    }
    let Some(place) = encodes.place() else { return resp };
    let lane = encodes.lane_for(http_body::Body::size_hint(resp.body()).lower());
    let (mut parts, body) = resp.into_parts();
    parts.headers.remove(header::CONTENT_LENGTH);
    let body = Indented { inner: body, state: Some(Indenter::default()), job: None, lane, _place: place };
    Response::from_parts(parts, body.boxed_unsync())
}

/// Frames smaller than this are indented where they are polled; larger ones off the async
/// workers, one job per frame ([`Encodes::lane_for`]).
const INDENT_INLINE: usize = 16 * 1024;

/// A body indented frame by frame. Indenting is work per byte (a LIST of every pod is much
/// of a core's work): done on the async workers it would hold them from everyone else's
/// cheap reads, so each large frame is one job off them, as gzip's.
struct Indented {
    inner: Body,
    /// The indenter's state, while no job holds it.
    state: Option<Indenter>,
    /// The job indenting the last frame.
    job: Option<JoinHandle<(Indenter, Vec<u8>)>>,
    /// Where the jobs run.
    lane: Lane,
    _place: OwnedSemaphorePermit,
}

/// Indent every piece of `data` with `state`.
fn indent(mut state: Indenter, mut data: Chunk) -> (Indenter, Vec<u8>) {
    let mut out = Vec::with_capacity(data.remaining() + data.remaining() / 2);
    while data.has_remaining() {
        let piece = data.chunk();
        let n = piece.len();
        state.feed(piece, &mut out);
        data.advance(n);
    }
    (state, out)
}

impl http_body::Body for Indented {
    type Data = Chunk;
    type Error = BoxError;

    fn poll_frame(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Result<Frame<Chunk>, BoxError>>> {
        let this = &mut *self;
        loop {
            let (state, out) = if let Some(job) = this.job.as_mut() {
                let done = ready!(Pin::new(job).poll(cx));
                this.job = None;
                done.map_err(|e| Box::new(e) as BoxError)?
            } else {
                let frame = match ready!(Pin::new(&mut this.inner).poll_frame(cx)) {
                    Some(Ok(frame)) => frame,
                    other => return Poll::Ready(other),
                };
                let data = match frame.into_data() {
                    Ok(data) => data,
                    Err(frame) => return Poll::Ready(Some(Ok(frame))),
                };
                let Some(state) = this.state.take() else { return Poll::Ready(None) };
                if data.remaining() > INDENT_INLINE {
                    this.job = Some(this.lane.spawn(move || indent(state, data)));
                    continue;
                }
                indent(state, data)
            };
            this.state = Some(state);
            if !out.is_empty() {
                return Poll::Ready(Some(Ok(Frame::data(Chunk::One(Bytes::from(out))))));
            }
        }
    }

    fn is_end_stream(&self) -> bool {
        self.job.is_none() && self.inner.is_end_stream()
    }

    /// At least what is left of the compact text (indentation only adds).
    fn size_hint(&self) -> SizeHint {
        let mut hint = SizeHint::new();
        hint.set_lower(self.inner.size_hint().lower());
        hint
    }
}

/// What a compression job gives back: the encoder, and the compressed bytes it produced.
type Job = JoinHandle<(GzEncoder<Vec<u8>>, std::io::Result<Vec<u8>>)>;

/// A body compressed frame by frame, each frame one job off the async workers.
struct Gzipped {
    inner: Body,
    /// The encoder, while no job holds it.
    enc: Option<GzEncoder<Vec<u8>>>,
    /// The job compressing the last frame (or finishing the stream).
    job: Option<Job>,
    /// Whether the finishing job has been started.
    finished: bool,
    /// Where the jobs run.
    lane: Lane,
    _place: OwnedSemaphorePermit,
}

/// Compressed bytes a gzipped answer gathers before they go out as a frame (one HTTP/2 DATA
/// frame's worth), unless its body waits or ends first: a page of Table rows comes in
/// frames that compress to a few KB each, and sent as they came a client would read it in
/// several times the frames the apiserver sends.
const OUT_FRAME: usize = 16 * 1024;

/// Compress `data` (every piece of it) into `enc`, taking what it has written so far once
/// that is at least [`OUT_FRAME`] bytes.
fn compress(mut enc: GzEncoder<Vec<u8>>, mut data: Chunk) -> (GzEncoder<Vec<u8>>, std::io::Result<Vec<u8>>) {
    while data.has_remaining() {
        let piece = data.chunk();
        let n = piece.len();
        if let Err(e) = enc.write_all(piece) {
            return (enc, Err(e));
        }
        data.advance(n);
    }
    let out = if enc.get_ref().len() >= OUT_FRAME { std::mem::take(enc.get_mut()) } else { Vec::new() };
    (enc, Ok(out))
}

impl http_body::Body for Gzipped {
    type Data = Chunk;
    type Error = BoxError;

    fn poll_frame(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Result<Frame<Chunk>, BoxError>>> {
        let this = &mut *self;
        loop {
            if let Some(job) = this.job.as_mut() {
                let done = ready!(Pin::new(job).poll(cx));
                this.job = None;
                let (enc, out) = done.map_err(|e| Box::new(e) as BoxError)?;
                this.enc = Some(enc);
                let out = out?;
                if !out.is_empty() {
                    return Poll::Ready(Some(Ok(Frame::data(Chunk::One(Bytes::from(out))))));
                }
                continue;
            }
            if this.finished {
                return Poll::Ready(None);
            }
            let Some(mut enc) = this.enc.take() else { return Poll::Ready(None) };
            match Pin::new(&mut this.inner).poll_frame(cx) {
                // Nothing more ready: what was gathered goes out now.
                Poll::Pending if !enc.get_ref().is_empty() => {
                    let out = std::mem::take(enc.get_mut());
                    this.enc = Some(enc);
                    return Poll::Ready(Some(Ok(Frame::data(Chunk::One(Bytes::from(out))))));
                }
                Poll::Pending => {
                    this.enc = Some(enc);
                    return Poll::Pending;
                }
                Poll::Ready(Some(Ok(frame))) => match frame.into_data() {
                    Ok(data) => this.job = Some(this.lane.spawn(move || compress(enc, data))),
                    // Trailers (none in kache's answers) are dropped with the length.
                    Err(_) => this.enc = Some(enc),
                },
                Poll::Ready(Some(Err(e))) => return Poll::Ready(Some(Err(e))),
                Poll::Ready(None) => {
                    this.finished = true;
                    this.job = Some(this.lane.spawn(move || {
                        let out = enc.try_finish().map(|()| std::mem::take(enc.get_mut()));
                        (enc, out)
                    }));
                }
            }
        }
    }

    fn size_hint(&self) -> SizeHint {
        SizeHint::default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::body::full;
    use crate::serve::respond::respond;
    use http::StatusCode;
    use std::io::Read;

    async fn collect(resp: Response<Body>) -> Vec<u8> {
        resp.into_body().collect().await.unwrap().to_bytes().to_vec()
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn large_answers_are_gzipped_and_decode_to_the_same_bytes_small_ones_are_not() {
        let big: Vec<u8> = (0..THRESHOLD as usize + 1).map(|i| b"{\"items\":[0123456789]}"[i % 22]).collect();
        let encodes = Encodes::new(4);
        let resp = gzip(respond(StatusCode::OK, "application/json", full(big.clone())), &encodes);
        assert_eq!(resp.headers()[header::CONTENT_ENCODING], "gzip");
        assert_eq!(resp.headers()[header::VARY], "Accept-Encoding");
        let zipped = collect(resp).await;
        assert!(zipped.len() < big.len() / 10, "{} bytes compressed", zipped.len());
        let mut out = Vec::new();
        flate2::read::GzDecoder::new(&zipped[..]).read_to_end(&mut out).unwrap();
        assert_eq!(out, big);

        let small = vec![b'x'; THRESHOLD as usize];
        let resp = gzip(respond(StatusCode::OK, "application/json", full(small.clone())), &encodes);
        assert!(resp.headers().get(header::CONTENT_ENCODING).is_none(), "128 KiB exactly is sent as is");
        assert_eq!(collect(resp).await, small);
    }

    /// A stitched body of `n` incompressible pieces of 256 KB (a frame each).
    fn frames(n: usize) -> Body {
        let mut x: u64 = 7;
        let pieces: Vec<Vec<u8>> = (0..n)
            .map(|_| {
                (0..256 * 1024)
                    .map(|_| {
                        x = x.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
                        (x >> 56) as u8
                    })
                    .collect()
            })
            .collect();
        crate::body::try_stitched(Arc::new(pieces), |p| {
            let items = p.iter().map(|v| crate::body::Piece::from(v.as_slice())).collect();
            Ok::<_, ()>(crate::body::Stitch { head: Vec::new(), items, tail: b"".as_slice().into() })
        })
        .unwrap()
    }

    #[test]
    fn no_blocking_thread_waits_on_a_client_that_stops_reading() {
        // One blocking thread: were it parked handing compressed bytes to a client that
        // does not read, nothing else could run there (nor DNS for upstream connections).
        let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(1).max_blocking_threads(1).enable_all().build().unwrap();
        rt.block_on(async {
            let encodes = Encodes::new(4);
            let resp = gzip(respond(StatusCode::OK, "application/json", frames(40)), &encodes);
            let mut body = resp.into_body();
            assert!(body.frame().await.is_some(), "the first compressed bytes");
            // The client reads nothing more; the blocking thread is free for others.
            let other = tokio::task::spawn_blocking(|| 7);
            let got = tokio::time::timeout(std::time::Duration::from_secs(60), other).await;
            assert_eq!(got.expect("the blocking thread is free").unwrap(), 7);
            drop(body);
        });
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_gzipped_answer_of_many_small_pieces_goes_out_in_frames_of_at_least_16_kib() {
        // A Table page: thousands of small pieces, gathered 60 to a stitched frame that
        // compresses to a few KB. Sent as they came, the client would read several times the
        // frames the apiserver sends; gathered, every frame but the last holds OUT_FRAME bytes.
        let mut x: u64 = 7;
        let pieces: Vec<Vec<u8>> = (0..3000)
            .map(|_| {
                (0..200)
                    .map(|_| {
                        x = x.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
                        b"0123456789abcdef"[(x >> 60) as usize]
                    })
                    .collect()
            })
            .collect();
        let src = pieces.concat();
        let body = crate::body::try_stitched(Arc::new(pieces), |p| {
            let items = p.iter().map(|v| crate::body::Piece::from(v.as_slice())).collect();
            Ok::<_, ()>(crate::body::Stitch { head: Vec::new(), items, tail: b"".as_slice().into() })
        })
        .unwrap();
        let mut body = gzip(respond(StatusCode::OK, "application/json", body), &Encodes::new(4)).into_body();
        let mut sizes = Vec::new();
        let mut zipped = Vec::new();
        while let Some(frame) = body.frame().await {
            let mut data = frame.unwrap().into_data().unwrap();
            sizes.push(data.remaining());
            zipped.extend_from_slice(&data.copy_to_bytes(data.remaining()));
        }
        assert!(sizes.len() > 3, "{sizes:?}");
        assert!(sizes[..sizes.len() - 1].iter().all(|n| *n >= OUT_FRAME), "{sizes:?}");
        let mut out = Vec::new();
        flate2::read::GzDecoder::new(&zipped[..]).read_to_end(&mut out).unwrap();
        assert_eq!(out, src);
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn encodes_past_the_bound_go_out_as_they_are() {
        let encodes = Encodes::new(1);
        let big = vec![b'a'; THRESHOLD as usize * 2];
        let first = gzip(respond(StatusCode::OK, "application/json", full(big.clone())), &encodes);
        assert_eq!(first.headers()[header::CONTENT_ENCODING], "gzip");
        let second = gzip(respond(StatusCode::OK, "application/json", full(big.clone())), &encodes);
        assert!(second.headers().get(header::CONTENT_ENCODING).is_none(), "sent as is while the one place is taken");
        assert_eq!(collect(second).await, big);
        let pretty = indented(respond(StatusCode::OK, "application/json", full(&b"{\"a\":1}"[..])), &encodes);
        assert_eq!(collect(pretty).await, b"{\"a\":1}", "compact while the place is taken");
        collect(first).await;
        let third = gzip(respond(StatusCode::OK, "application/json", full(big)), &encodes);
        assert_eq!(third.headers()[header::CONTENT_ENCODING], "gzip", "the place came back when the first was sent");
        let pretty = indented(respond(StatusCode::OK, "application/json", full(&b"{\"a\":1}"[..])), &Encodes::new(1));
        assert_eq!(collect(pretty).await, b"{\n  \"a\": 1\n}");
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn large_answers_are_gzipped_and_indented_in_the_lane_smaller_ones_on_the_shared_pool() {
        let lane = Lane::new(3, 1).unwrap();
        let encodes = Encodes::new(2).in_lane(lane.clone());
        let gzipped = |bytes: usize| {
            let src: Vec<u8> = (0..bytes).map(|i| b"{\"items\":[0123456789]}"[i % 22]).collect();
            let resp = gzip(respond(StatusCode::OK, "application/json", full(src.clone())), &encodes);
            async move {
                let mut out = Vec::new();
                flate2::read::GzDecoder::new(&collect(resp).await[..]).read_to_end(&mut out).unwrap();
                assert_eq!(out, src);
            }
        };
        gzipped(super::super::admission::fair::LARGE as usize).await;
        assert_eq!(lane.jobs(), 0, "1 MiB is compressed on the shared blocking pool");
        gzipped(super::super::admission::fair::LARGE as usize + 1).await;
        assert_eq!(lane.jobs(), 2, "the frame and the stream's end, each a job in the lane");
        let items: Vec<String> = (0..60_000).map(|i| format!("{{\"name\":\"n{i}\"}}")).collect();
        let src = format!("{{\"kind\":\"List\",\"items\":[{}]}}", items.join(",")).into_bytes();
        assert!(src.len() as u64 > super::super::admission::fair::LARGE, "{} bytes", src.len());
        let pretty = collect(indented(respond(StatusCode::OK, "application/json", full(src.clone())), &encodes)).await;
        assert_eq!(pretty, crate::api::json::indent(&src));
        assert_eq!(lane.jobs(), 3, "the large frame was indented in the lane");
    }

    #[test]
    fn large_frames_are_indented_on_the_blocking_pool_not_on_the_async_worker() {
        // A LIST of every pod, indented on the async worker, would hold it from every other
        // client's request for the frame's work. Handed to the blocking pool, the poll that
        // takes the frame returns at once (Pending) and the indented frame comes once the job
        // has run. The pool's one thread is kept busy until the first poll has returned, so
        // the job cannot have run before it.
        let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(1).max_blocking_threads(1).enable_all().build().unwrap();
        rt.block_on(async {
            let items: Vec<String> = (0..2000).map(|i| format!("{{\"name\":\"n{i}\",\"v\":[{i},{{}},\"a,b:{{c}}\"]}}")).collect();
            let src = format!("{{\"kind\":\"List\",\"items\":[{}]}}", items.join(",")).into_bytes();
            assert!(src.len() > 2 * INDENT_INLINE, "{} bytes", src.len());
            let (release, held) = std::sync::mpsc::channel::<()>();
            let busy = tokio::task::spawn_blocking(move || held.recv());
            let resp = indented(respond(StatusCode::OK, "application/json", full(src.clone())), &Encodes::new(1));
            let mut body = std::pin::pin!(resp.into_body());
            let first = std::future::poll_fn(|cx| Poll::Ready(http_body::Body::poll_frame(body.as_mut(), cx).is_pending())).await;
            assert!(first, "the frame was indented in the poll that took it (on the async worker)");
            release.send(()).unwrap();
            busy.await.unwrap().unwrap();
            let got = BodyExt::collect(body).await.unwrap().to_bytes();
            assert_eq!(got, crate::api::json::indent(&src));
            // Small frames are indented where they are polled: no job for a few bytes.
            let resp = indented(respond(StatusCode::OK, "application/json", full(&b"{\"a\":[1,2]}"[..])), &Encodes::new(1));
            let mut body = std::pin::pin!(resp.into_body());
            let small = std::future::poll_fn(|cx| Poll::Ready(http_body::Body::poll_frame(body.as_mut(), cx).is_ready())).await;
            assert!(small, "a small frame is indented at once");
        });
    }

    #[tokio::test]
    async fn pretty_answers_are_indented_as_they_are_sent_never_held_whole() {
        let src = crate::testdata::capture("cm-list").body;
        let (tx, rx) = tokio::sync::mpsc::channel(4);
        let resp = indented(respond(StatusCode::OK, "application/json", crate::body::channel(rx)), &Encodes::new(1));
        let mut body = resp.into_body();
        let half = src.len() / 2;
        tx.send(Bytes::copy_from_slice(&src[..half])).await.unwrap();
        // The first half is indented and out while the rest has not been written yet.
        let first = body.frame().await.unwrap().unwrap().into_data().unwrap();
        let mut got = first.chunk().to_vec();
        tx.send(Bytes::copy_from_slice(&src[half..])).await.unwrap();
        drop(tx);
        got.extend(collect(Response::new(body)).await);
        assert_eq!(got, crate::api::json::indent(&src));
    }
}
