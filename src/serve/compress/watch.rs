//! gzip for a WatchList stream answered from memory.
//!
//! A client-go informer starts with a WatchList: every object as an event, then its
//! bookmark, then live events, on one stream. Unlike a LIST, the apiserver does not compress
//! watches, and a Go client reading a large uncompressed stream sends the server one HTTP/2
//! WINDOW_UPDATE (a TLS record and a `write`) for every few KB it reads, which slows its
//! sync well behind a LIST's. Compressed, it reads many times the objects per read.
//!
//! So a WatchList to a client that accepts gzip is one gzip member, sent in three steps:
//! - until the watch has sent its initial state ([`InitialState`]), its frames are deflated
//!   at level 1, as kache's LISTs are, and whenever the stream has nothing more ready what
//!   was deflated is flushed (a sync flush: everything so far decodable);
//! - once the state has been sent and the stream has nothing more ready, the deflater is
//!   flushed and dropped with its place among the encodes ([`Encodes`]);
//! - from then on each frame goes out as a stored deflate block (five bytes of header, the
//!   event's bytes as they are) and an empty one ([`FLUSHED`]: Go's inflater hands out a
//!   block's bytes only when the next block begins or at an empty stored block), so a watch
//!   that lives for days holds a CRC and a count, not a compressor's window and tables.
//!
//! One member, as every gzip reader reads (some, such as OkHttp's, read no second member).
//!
//! A WatchList of a whole collection sends its state in runs ([`crate::cache::deflated`]):
//! a run is deflated from a reset deflater, denser than the rest ([`RUN_LEVEL`]: it is
//! deflated once and sent many times), and ended with a sync flush, and kept, so it refers to
//! nothing before it and ends on a byte; a run kept by an earlier WatchList goes out as those
//! bytes, its CRC combined into the member's, and the deflater is reset before it deflates
//! again.
//!
//! Only a stream that carries an [`InitialState`] is compressed: a WatchList answered from
//! the cache's state, or sent a kind's list as it loads (kache just started). The latter's
//! frames are deflated at kache's own priority ([`InitialState::loading`]), not in the
//! low-priority lane: its client waits on each of them while the apiserver and kache's own
//! list take the cores, so deflated in the lane they would reach it later than frames sent
//! uncompressed, while at kache's priority compressing them brings the client's sync sooner.

use super::{Encodes, INDENT_INLINE};
use crate::body::{Body, BoxError, Chunk};
use crate::body::{Deflated, KeepsDeflated};
use crate::serve::lane::Lane;
use bytes::{Buf, Bytes};
use flate2::{Compress, Compression, Crc, FlushCompress, Status};
use http::{header, HeaderValue, Response};
use http_body::{Frame, SizeHint};
use http_body_util::BodyExt;
use std::future::Future;
use std::io;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::task::{ready, Context, Poll};
use tokio::sync::OwnedSemaphorePermit;
use tokio::task::JoinHandle;

/// A gzip member's header: deflate, no name or time, unknown OS (as Go's writer and flate2's).
const HEADER: [u8; 10] = [0x1f, 0x8b, 8, 0, 0, 0, 0, 0, 0, 0xff];

/// The largest stored block.
const STORED_MAX: usize = 0xffff;

/// An empty stored block (what a sync flush ends with), after each event that goes stored.
/// Go's inflater hands out a block's bytes only when the next block begins, except that an
/// empty stored block hands out everything before it: without it a Go client would decode
/// each live event only when the next one came, and a WatchList's end bookmark, sent once
/// its freshness proof came after the state, only with the kind's next event (a client-go
/// informer of a quiet kind would not sync).
const FLUSHED: [u8; 5] = [0, 0, 0, 0xff, 0xff];

/// The level a WatchList's runs are deflated at. A run is deflated once and sent to every
/// WatchList while its objects do not change, so it is deflated denser than a stream's own
/// bytes (level 1, the apiserver's): level 7 deflates more slowly, a cost paid once, but
/// leaves fewer bytes to send, and Go's gzip reader inflates them faster.
const RUN_LEVEL: u32 = 7;

/// Whether a watch has sent its initial state: set by the watcher, read by the encoding of
/// its stream (a response extension).
#[derive(Debug, Clone, Default)]
pub struct InitialState {
    sent: Arc<AtomicBool>,
    /// Set once [`gzip_watch`] has taken the stream: a kept run's raw frames are then not
    /// needed ([`InitialState::is_gzipped`]).
    gzipped: Arc<AtomicBool>,
    /// Sent a kind's list as it loads ([`InitialState::loading`]).
    loading: bool,
}

impl InitialState {
    /// The mark of a stream sent a kind's list as it loads: its client waits on each frame,
    /// so its frames are deflated at kache's own priority, not in the lane.
    pub fn loading() -> InitialState {
        InitialState { sent: Arc::default(), gzipped: Arc::default(), loading: true }
    }

    /// The state has been handed to the client's connection.
    pub fn sent(&self) {
        self.sent.store(true, Ordering::Release);
    }

    pub(crate) fn is_sent(&self) -> bool {
        self.sent.load(Ordering::Acquire)
    }

    /// The stream is gzipped from now on.
    pub(crate) fn gzipped(&self) {
        self.gzipped.store(true, Ordering::Release);
    }

    /// Whether the stream is gzipped, for good: a run whose deflated bytes are kept then goes
    /// out as those bytes, and its frames need not be gathered. False until [`gzip_watch`]
    /// has wrapped the stream (a watcher that asks sooner gathers them, which is only
    /// wasted work).
    pub fn is_gzipped(&self) -> bool {
        self.gzipped.load(Ordering::Acquire)
    }
}

/// `resp`, a WatchList's stream, gzip-encoded as this module says; as it is when it carries
/// no [`InitialState`] and while the encodes are at their bound.
pub fn gzip_watch(resp: Response<Body>, encodes: &Encodes) -> Response<Body> {
    let Some(state) = resp.extensions().get::<InitialState>().cloned() else { return resp };
    let Some(place) = encodes.place() else { return resp };
    state.gzipped();
    let (mut parts, body) = resp.into_parts();
    parts.headers.remove(header::CONTENT_LENGTH);
    parts.headers.insert(header::CONTENT_ENCODING, HeaderValue::from_static("gzip"));
    parts.headers.append(header::VARY, HeaderValue::from_static("Accept-Encoding"));
    let gz = Gz {
        deflate: Some(Box::new(Compress::new(Compression::new(1), false))),
        crc: Crc::new(),
        started: false,
        pending: false,
        stale: false,
    };
    let lane = if state.loading { crate::serve::lane::Lane::default() } else { encodes.lane_for(crate::serve::admission::fair::LARGE + 1) };
    let body = WatchGzipped { inner: body, gz: Some(gz), job: None, finished: false, dirty: false, lane, place: Some(place), state };
    Response::from_parts(parts, body.boxed_unsync())
}

/// The member's state, moved into a job while one runs.
struct Gz {
    /// Raw deflate while the initial burst lasts; `None` once the stream has caught up.
    deflate: Option<Box<Compress>>,
    /// CRC and length of every byte taken, for the trailer.
    crc: Crc,
    /// Whether the header has gone out.
    started: bool,
    /// Whether bytes went into the deflater since its last sync flush.
    pending: bool,
    /// Whether the deflater is reset (and set back to level 1) before its next bytes: kept
    /// bytes went out after its last, so its window is not what the reader has, or it last
    /// deflated a run, at [`RUN_LEVEL`]. Lazily: a reset clears 128 KiB of tables, so runs
    /// back to back are not each followed by one.
    stale: bool,
}

/// What a job gives back: the state, and the bytes it wrote.
type WatchJob = JoinHandle<(Gz, io::Result<Vec<u8>>)>;

impl Gz {
    /// `out`, begun with the header if it has not gone out yet.
    fn out(&mut self, capacity: usize) -> Vec<u8> {
        let mut out = Vec::with_capacity(capacity + HEADER.len());
        if !self.started {
            out.extend_from_slice(&HEADER);
            self.started = true;
        }
        out
    }

    /// `data` deflated.
    fn deflate(&mut self, mut data: Chunk) -> io::Result<Vec<u8>> {
        let mut out = self.out(data.remaining() / 4 + 64);
        self.pending = true;
        if std::mem::take(&mut self.stale) {
            if let Some(c) = self.deflate.as_mut() {
                c.reset();
                c.set_level(Compression::new(1)).map_err(io::Error::other)?;
            }
        }
        while data.has_remaining() {
            let piece = data.chunk();
            self.crc.update(piece);
            let n = piece.len();
            self.run(piece, FlushCompress::None, &mut out)?;
            data.advance(n);
        }
        Ok(out)
    }

    /// Everything deflated so far made decodable.
    fn flush(&mut self) -> io::Result<Vec<u8>> {
        let mut out = self.out(64);
        self.sync(&mut out)?;
        Ok(out)
    }

    /// Everything deflated so far made decodable, and the deflater dropped: the stream has
    /// caught up, and what follows goes stored.
    fn caught_up(&mut self) -> io::Result<Vec<u8>> {
        let out = self.flush()?;
        self.deflate = None;
        Ok(out)
    }

    /// A sync flush of what the deflater holds, if anything.
    fn sync(&mut self, out: &mut Vec<u8>) -> io::Result<()> {
        if std::mem::take(&mut self.pending) {
            self.run(&[], FlushCompress::Sync, out)?;
        }
        Ok(())
    }

    /// A run of a WatchList's events ([`crate::cache::deflated`]) deflated on its own: what
    /// came before flushed, then the run from a reset deflater at [`RUN_LEVEL`], ended with a
    /// sync flush, so its bytes refer to nothing before them and end on a byte. The run keeps
    /// them for the next WatchList ([`Gz::splice`]). Stored, once the deflater is dropped.
    fn deflate_run(&mut self, raw: Bytes, run: &dyn KeepsDeflated) -> io::Result<Vec<u8>> {
        let mut out = self.out(raw.len() / 4 + 64);
        self.sync(&mut out)?;
        let Some(c) = self.deflate.as_mut() else {
            out.extend(self.stored(Chunk::One(raw)));
            return Ok(out);
        };
        c.reset();
        // Just reset, the deflater has nothing to flush: the level changes at once.
        c.set_level(Compression::new(RUN_LEVEL)).map_err(io::Error::other)?;
        self.stale = true;
        let start = out.len();
        self.run(&raw, FlushCompress::Sync, &mut out)?;
        let mut crc = Crc::new();
        crc.update(&raw);
        self.crc.combine(&crc);
        run.keep(Bytes::copy_from_slice(&out[start..]), crc, raw.len());
        Ok(out)
    }

    /// A run's kept deflated bytes, after what came before is flushed; the deflater is reset
    /// before it deflates again (what follows must not refer to bytes it did not write).
    fn splice(&mut self, d: &Deflated) -> io::Result<Vec<u8>> {
        let mut out = self.out(d.bytes.len() + 64);
        self.sync(&mut out)?;
        self.stale = true;
        out.extend_from_slice(&d.bytes);
        self.crc.combine(&d.crc);
        Ok(out)
    }

    /// `data` as stored blocks, then an empty one ([`FLUSHED`]).
    fn stored(&mut self, mut data: Chunk) -> Vec<u8> {
        let mut out = self.out(data.remaining() + 5 * (data.remaining() / STORED_MAX + 3));
        while data.has_remaining() {
            let piece = data.chunk();
            self.crc.update(piece);
            for part in piece.chunks(STORED_MAX) {
                // BFINAL 0, BTYPE 00 (stored), padded to the byte; LEN and its complement.
                let len = part.len() as u16;
                out.push(0);
                out.extend_from_slice(&len.to_le_bytes());
                out.extend_from_slice(&(!len).to_le_bytes());
                out.extend_from_slice(part);
            }
            let n = piece.len();
            data.advance(n);
        }
        out.extend_from_slice(&FLUSHED);
        out
    }

    /// The member's end: the final block and the trailer.
    fn finish(&mut self) -> io::Result<Vec<u8>> {
        let mut out = self.out(64);
        if self.deflate.is_some() {
            self.run(&[], FlushCompress::Finish, &mut out)?;
        } else {
            // An empty final stored block.
            out.extend_from_slice(&[1, 0, 0, 0xff, 0xff]);
        }
        out.extend_from_slice(&self.crc.sum().to_le_bytes());
        out.extend_from_slice(&self.crc.amount().to_le_bytes());
        Ok(out)
    }

    /// Feed `input` to the deflater with `flush`, appending to `out` until it has taken all
    /// of it and has nothing more to give.
    fn run(&mut self, input: &[u8], flush: FlushCompress, out: &mut Vec<u8>) -> io::Result<()> {
        let Some(c) = self.deflate.as_mut() else { return Ok(()) };
        let start = c.total_in();
        loop {
            out.reserve(input.len() / 2 + 4096);
            let taken = usize::try_from(c.total_in() - start).unwrap_or(usize::MAX);
            let status = c.compress_vec(&input[taken.min(input.len())..], out, flush).map_err(io::Error::other)?;
            let all_taken = c.total_in() - start == input.len() as u64;
            let room_left = out.len() < out.capacity();
            let done = match flush {
                FlushCompress::Finish => status == Status::StreamEnd,
                _ => all_taken && room_left,
            };
            if done {
                return Ok(());
            }
        }
    }
}

/// A WatchList's body gzip-encoded, as the module says.
struct WatchGzipped {
    inner: Body,
    /// The state, while no job holds it.
    gz: Option<Gz>,
    /// The job deflating the last frame, or flushing.
    job: Option<WatchJob>,
    /// Whether the inner body has ended (and the trailer gone out).
    finished: bool,
    /// Whether bytes went into the deflater since the stream last caught up.
    dirty: bool,
    /// Where the deflate jobs run.
    lane: Lane,
    /// A place among the encodes, held while the deflater lives.
    place: Option<OwnedSemaphorePermit>,
    /// Whether the watch has sent its initial state.
    state: InitialState,
}

fn data(out: Vec<u8>) -> Poll<Option<Result<Frame<Chunk>, BoxError>>> {
    Poll::Ready(Some(Ok(Frame::data(Chunk::One(Bytes::from(out))))))
}

impl WatchGzipped {
    /// Run `work` on `gz`: off the async workers when `large`, here otherwise (the bytes, if
    /// it ran here).
    fn start(
        &mut self,
        mut gz: Gz,
        large: bool,
        work: impl FnOnce(&mut Gz) -> io::Result<Vec<u8>> + Send + 'static,
    ) -> Option<io::Result<Vec<u8>>> {
        if large {
            self.job = Some(self.lane.spawn(move || {
                let out = work(&mut gz);
                (gz, out)
            }));
            return None;
        }
        let out = work(&mut gz);
        self.gz = Some(gz);
        Some(out)
    }

    /// Start encoding one frame of the inner body: a run from its kept deflated copy or
    /// deflated anew, other bytes deflated (or stored, once the stream caught up).
    fn encode(&mut self, gz: Gz, frame: Frame<Chunk>) -> Option<io::Result<Vec<u8>>> {
        match frame.into_data() {
            Ok(Chunk::Run(raw, run)) => {
                self.dirty = true;
                let kept = run.deflated().is_some();
                metrics::counter!(crate::telemetry::WATCH_LIST_RUNS, "outcome" => if kept { "kept" } else { "deflated" }).increment(1);
                if kept {
                    self.start(gz, false, move |gz| gz.splice(run.deflated().expect("kept")))
                } else {
                    let large = raw.len() > INDENT_INLINE;
                    self.start(gz, large, move |gz| gz.deflate_run(raw, &*run))
                }
            }
            Ok(bytes) if gz.deflate.is_some() => {
                self.dirty = true;
                let large = bytes.remaining() > INDENT_INLINE;
                self.start(gz, large, move |gz| gz.deflate(bytes))
            }
            Ok(bytes) => self.start(gz, false, move |gz| Ok(gz.stored(bytes))),
            // Trailers (none in a watch) are dropped.
            Err(_) => {
                self.gz = Some(gz);
                None
            }
        }
    }
}

impl http_body::Body for WatchGzipped {
    type Data = Chunk;
    type Error = BoxError;

    fn poll_frame(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Result<Frame<Chunk>, BoxError>>> {
        let this = &mut *self;
        loop {
            let ran = if let Some(job) = this.job.as_mut() {
                let (gz, out) = ready!(Pin::new(job).poll(cx)).map_err(|e| Box::new(e) as BoxError)?;
                this.job = None;
                this.gz = Some(gz);
                Some(out)
            } else {
                if this.finished {
                    return Poll::Ready(None);
                }
                let Some(gz) = this.gz.take() else { return Poll::Ready(None) };
                match Pin::new(&mut this.inner).poll_frame(cx) {
                    Poll::Pending if gz.deflate.is_some() && this.dirty => {
                        this.dirty = false;
                        this.start(gz, false, if this.state.is_sent() { Gz::caught_up } else { Gz::flush })
                    }
                    Poll::Pending => {
                        this.gz = Some(gz);
                        return Poll::Pending;
                    }
                    Poll::Ready(Some(Ok(frame))) => this.encode(gz, frame),
                    Poll::Ready(Some(Err(e))) => return Poll::Ready(Some(Err(e))),
                    Poll::Ready(None) => {
                        this.finished = true;
                        this.start(gz, false, Gz::finish)
                    }
                }
            };
            if this.gz.as_ref().is_some_and(|gz| gz.deflate.is_none()) {
                this.place = None;
            }
            if let Some(out) = ran {
                let out = out?;
                if !out.is_empty() {
                    return data(out);
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
    use crate::serve::respond::respond;
    use http::StatusCode;
    use std::io::Read;
    use tokio::sync::mpsc;

    /// A watch-like body: frames as `tx` sends them, pending in between; its initial state
    /// marked sent when `sent`.
    fn channel_body_with(sent: bool) -> (mpsc::UnboundedSender<Vec<u8>>, Response<Body>, InitialState) {
        let (tx, rx) = mpsc::unbounded_channel::<Vec<u8>>();
        let stream = futures_util::stream::unfold(rx, |mut rx| async move {
            rx.recv().await.map(|v| (Ok::<_, BoxError>(Frame::data(Chunk::One(Bytes::from(v)))), rx))
        });
        let body = http_body_util::StreamBody::new(stream).boxed_unsync();
        let mut resp = respond(StatusCode::OK, "application/vnd.kubernetes.protobuf;stream=watch", body);
        let state = InitialState::default();
        if sent {
            state.sent();
        }
        resp.extensions_mut().insert(state.clone());
        (tx, resp, state)
    }

    fn channel_body() -> (mpsc::UnboundedSender<Vec<u8>>, Response<Body>) {
        let (tx, resp, _) = channel_body_with(true);
        (tx, resp)
    }

    fn vec(mut c: Chunk) -> Vec<u8> {
        c.copy_to_bytes(c.remaining()).to_vec()
    }

    /// Event-like bytes: compressible, as objects of one kind are.
    fn events(n: usize, tag: u8) -> Vec<u8> {
        (0..n)
            .flat_map(|i| format!("{{\"type\":\"ADDED\",\"object\":{{\"name\":\"pod-{tag}-{i}\",\"phase\":\"Running\"}}}}\n").into_bytes())
            .collect()
    }

    /// What a streaming reader has decoded from `gz` so far (header skipped, no trailer
    /// needed).
    fn decodable(gz: &[u8]) -> Vec<u8> {
        let Some(deflated) = gz.get(HEADER.len()..) else { return Vec::new() };
        let mut d = flate2::Decompress::new(false);
        let mut out = Vec::new();
        loop {
            out.reserve(deflated.len() * 4 + 1024);
            let taken = usize::try_from(d.total_in()).unwrap();
            d.decompress_vec(&deflated[taken..], &mut out, flate2::FlushDecompress::Sync).unwrap();
            if out.len() < out.capacity() {
                return out;
            }
        }
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_watch_list_is_deflated_until_it_catches_up_then_each_event_goes_stored() {
        let encodes = Encodes::new(1);
        let (tx, resp) = channel_body();
        let resp = gzip_watch(resp, &encodes);
        assert_eq!(resp.headers()[header::CONTENT_ENCODING], "gzip");
        assert!(encodes.place().is_none(), "the deflater holds a place");
        let mut body = resp.into_body();

        // The initial burst: three frames ready at once, one over the inline size.
        let burst = [events(200, 1), events(2000, 2), events(10, 3)];
        for f in &burst {
            tx.send(f.clone()).unwrap();
        }
        let mut sent = Vec::new();
        let mut frames = 0;
        // The stream has caught up when a frame makes every event so far decodable.
        while decodable(&sent) != burst.concat() {
            sent.extend_from_slice(&vec(body.frame().await.unwrap().unwrap().into_data().unwrap()));
            frames += 1;
            assert!(frames < 10, "the burst never became decodable");
        }
        let all: usize = burst.iter().map(Vec::len).sum();
        assert!(sent.len() < all / 5, "{} bytes for {all}", sent.len());
        assert!(encodes.place().is_some(), "the place is given back when the stream catches up");

        // A live event: its bytes as they are, in a stored block that decodes at once.
        let live = events(1, 4);
        tx.send(live.clone()).unwrap();
        let frame = vec(body.frame().await.unwrap().unwrap().into_data().unwrap());
        assert_eq!(&frame[5..5 + live.len()], &live[..], "a stored block: header, then the event");
        assert_eq!(&frame[5 + live.len()..], &FLUSHED, "then an empty stored block, so a Go client decodes the event at once");
        sent.extend_from_slice(&frame);
        assert_eq!(decodable(&sent), [burst.concat(), live.clone()].concat());

        // The end: one member that a gzip reader checks whole (CRC and length).
        drop(tx);
        while let Some(f) = body.frame().await {
            sent.extend_from_slice(&vec(f.unwrap().into_data().unwrap()));
        }
        let mut out = Vec::new();
        flate2::read::GzDecoder::new(&sent[..]).read_to_end(&mut out).unwrap();
        assert_eq!(out, [burst.concat(), live].concat());
    }

    /// A WatchList's stream may pause while its state is sent (a client reading faster than
    /// the watcher encodes): each pause flushes what was sent, and the deflater lives on
    /// until the watch marks its state sent.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_watch_list_keeps_deflating_across_pauses_until_its_state_is_sent() {
        let encodes = Encodes::new(1);
        let (tx, resp, state) = channel_body_with(false);
        let mut body = gzip_watch(resp, &encodes).into_body();
        let (mut sent, mut expected) = (Vec::new(), Vec::new());
        for part in 0..3 {
            let objects = events(300, part);
            tx.send(objects.clone()).unwrap();
            expected.extend(objects);
            while decodable(&sent) != expected {
                sent.extend(vec(body.frame().await.unwrap().unwrap().into_data().unwrap()));
            }
            assert!(encodes.place().is_none(), "still deflating after pause {part}");
        }
        state.sent();
        let tail = events(5, 9);
        tx.send(tail.clone()).unwrap();
        expected.extend(tail);
        while decodable(&sent) != expected {
            sent.extend(vec(body.frame().await.unwrap().unwrap().into_data().unwrap()));
        }
        assert!(encodes.place().is_some(), "the deflater is dropped once the state is sent and the stream caught up");
        assert!(sent.len() < expected.len() / 5, "{} bytes for {}", sent.len(), expected.len());
    }

    /// A WatchList of a whole collection sends its state in runs (`cache::deflated`): the
    /// first stream deflates each run on its own and keeps it; the next splices the kept
    /// bytes in, between chunks it deflates itself, and both are members a gzip reader
    /// checks whole.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_whole_watch_lists_runs_are_deflated_once_and_spliced_into_the_next_member() {
        use crate::cache::deflated::Runs;
        use crate::cache::object::{key, Object};
        let runs = Runs::default();
        let pass = runs.begin(1 << 30);
        let objects: Vec<Arc<Object>> = (0..3).map(|i| Arc::new(Object::bare(key("ns", &format!("p{i}")), i + 1))).collect();
        let run = |i: usize| runs.run(1, &[&objects[i]], pass);
        let raws: Vec<Vec<u8>> = (0..3).map(|i| events(400 + 300 * i, i as u8)).collect();
        let (before, bookmark, live) = (events(20, 7), events(1, 8), events(1, 9));

        let mut members = Vec::new();
        for round in 0..2 {
            let (tx, rx) = mpsc::unbounded_channel::<Chunk>();
            let stream =
                futures_util::stream::unfold(rx, |mut rx| async move { rx.recv().await.map(|c| (Ok::<_, BoxError>(Frame::data(c)), rx)) });
            let mut resp = respond(StatusCode::OK, "application/json", http_body_util::StreamBody::new(stream).boxed_unsync());
            let state = InitialState::default();
            resp.extensions_mut().insert(state.clone());
            let mut body = gzip_watch(resp, &Encodes::new(1)).into_body();
            let mut expected = Vec::new();
            if round == 1 {
                // Bytes the stream deflates itself before a kept run.
                tx.send(Chunk::One(Bytes::from(before.clone()))).unwrap();
                expected.extend_from_slice(&before);
            }
            for (i, raw) in raws.iter().enumerate() {
                tx.send(Chunk::Run(Bytes::from(raw.clone()), run(i))).unwrap();
                expected.extend_from_slice(raw);
            }
            tx.send(Chunk::One(Bytes::from(bookmark.clone()))).unwrap();
            expected.extend_from_slice(&bookmark);
            let mut sent = Vec::new();
            loop {
                // A reader that goes wrong fails here instead of waiting for more.
                let d = decodable(&sent);
                assert!(expected.starts_with(&d), "round {round}: what decodes so far differs");
                if d == expected {
                    break;
                }
                sent.extend(vec(body.frame().await.unwrap().unwrap().into_data().unwrap()));
            }
            state.sent();
            tx.send(Chunk::One(Bytes::from(live.clone()))).unwrap();
            expected.extend_from_slice(&live);
            drop(tx);
            while let Some(f) = body.frame().await {
                sent.extend(vec(f.unwrap().into_data().unwrap()));
            }
            let mut out = Vec::new();
            flate2::read::GzDecoder::new(&sent[..]).read_to_end(&mut out).unwrap();
            assert_eq!(out, expected, "round {round}: one member, its CRC and length checked");
            members.push(sent);
        }
        for (i, raw) in raws.iter().enumerate() {
            let kept = run(i).deflated().expect("kept by the first stream").bytes.clone();
            assert!(kept.len() < raw.len() / 5, "run {i}: {} bytes for {}", kept.len(), raw.len());
            let mut fast = Gz { deflate: Some(Box::new(Compress::new(Compression::new(1), false))), ..gz_stored() };
            let level_1 = fast.deflate(Chunk::One(Bytes::from(raw.clone()))).unwrap().len() + fast.flush().unwrap().len();
            assert!(kept.len() < level_1, "run {i} deflated denser than the stream's level 1: {} bytes, {level_1}", kept.len());
            for (round, member) in members.iter().enumerate() {
                assert!(member.windows(kept.len()).any(|w| w == &kept[..]), "round {round} sends run {i}'s kept bytes");
            }
        }
    }

    /// A member's state after its header, its deflater dropped.
    fn gz_stored() -> Gz {
        Gz { deflate: None, crc: Crc::new(), started: true, pending: false, stale: false }
    }

    #[tokio::test]
    async fn an_event_larger_than_a_stored_block_goes_in_several() {
        let mut gz = gz_stored();
        let event: Vec<u8> = (0..STORED_MAX * 2 + 10).map(|i| (i % 251) as u8).collect();
        let mut sent = gz.stored(Chunk::One(Bytes::from(event.clone())));
        sent.extend(gz.finish().unwrap());
        let mut member = HEADER.to_vec();
        member.extend(sent);
        let mut out = Vec::new();
        flate2::read::GzDecoder::new(&member[..]).read_to_end(&mut out).unwrap();
        assert_eq!(out, event);
    }

    #[tokio::test]
    async fn a_stream_without_an_initial_state_goes_out_as_it_is() {
        let (_tx, mut resp) = channel_body();
        resp.extensions_mut().clear();
        let resp = gzip_watch(resp, &Encodes::new(1));
        assert!(resp.headers().get(header::CONTENT_ENCODING).is_none());
    }

    #[tokio::test]
    async fn a_watch_list_past_the_encodes_bound_goes_out_as_it_is() {
        let encodes = Encodes::new(1);
        let _held = encodes.place().unwrap();
        let (_tx, resp) = channel_body();
        let resp = gzip_watch(resp, &encodes);
        assert!(resp.headers().get(header::CONTENT_ENCODING).is_none());
    }
}
