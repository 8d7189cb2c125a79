//! WATCH: start from the window (resume), from the current state (synthetic ADDED events,
//! `sendInitialEvents` with its initial-events-end bookmark), or with a 410 ERROR event; then
//! follow the cache's broadcast, turning selector transitions into ADDED/DELETED. A watcher
//! that falls behind the broadcast ring is ended, never waited for.

use super::table::Include;
use super::{candidates, list::reach, selected};
use crate::api::media::{Format, View};
use crate::api::query::Options;
use crate::api::status::Status;
use crate::body::{Body, Chunk, KeepsDeflated};
use crate::cache::deflated::{cut_after, Runs};
use crate::cache::feed::growing::{End, Growing, Next};
use crate::cache::object::Object;
use crate::cache::store::Snapshot;
use crate::cache::window::{Event, EventType};
use crate::cache::{KindCache, Message};
use crate::serve::compress::InitialState;
use crate::serve::respond::respond;
use bytes::{Buf, Bytes, BytesMut};
use http::{Response, StatusCode};
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::{broadcast, mpsc, OwnedSemaphorePermit, Semaphore};
use tokio::time::{sleep_until, Instant};

/// Timing and buffers of watches.
#[derive(Debug, Clone)]
pub struct WatchSettings {
    /// Interval between periodic bookmarks.
    pub bookmark_interval: Duration,
    /// A bookmark is also sent this long before `timeoutSeconds` ends the watch.
    pub bookmark_before_end: Duration,
    /// A client that accepts no data for this long is ended (its watcher stops holding
    /// events for it); it resumes from its last RV like after any disconnect.
    pub stall_timeout: Duration,
    /// Bytes queued for one client that it has not taken yet: past them its watcher waits
    /// for it (and ends it at the stall timeout). A frame larger than this is queued alone.
    pub buffer_bytes: usize,
    /// The bytes all watches together may have queued for their clients.
    pub buffers: WatchBuffers,
    /// The bytes the watches of this watch's connection, and of its client's flow (see
    /// `serve::admission::limit::flow`), may have queued together: no connection and no client fills
    /// `buffers` for the others.
    pub shared: [Option<WatchBuffers>; 2],
    /// Holds true once kache shuts down: the watch ends then, whenever it started (a watch
    /// that arrives on an open connection after the others were ended, too).
    pub ending: Option<tokio::sync::watch::Receiver<bool>>,
}

/// Default of [`WatchSettings::buffer_bytes`]: a few chunks of events (a pod is a few KB);
/// a stalled client holds no more than this, not 128 chunks of the largest object.
pub const WATCH_BUFFER_BYTES: usize = 4 << 20;
/// Default bound of the bytes all watches together have queued.
pub const WATCH_BUFFERS_BYTES: usize = 1 << 30;
/// Default bound of the bytes one user's watches together have queued: a quarter of all.
pub const WATCH_BUFFERS_PER_USER: usize = WATCH_BUFFERS_BYTES / 4;

impl Default for WatchSettings {
    fn default() -> Self {
        WatchSettings {
            bookmark_interval: Duration::from_secs(60),
            bookmark_before_end: Duration::from_secs(2),
            stall_timeout: Duration::from_secs(15),
            buffer_bytes: WATCH_BUFFER_BYTES,
            buffers: WatchBuffers::new(WATCH_BUFFERS_BYTES),
            shared: [None, None],
            ending: None,
        }
    }
}

/// Returns once `ending` holds true (or its sender is gone); never without one.
async fn shut_down(ending: &mut Option<tokio::sync::watch::Receiver<bool>>) {
    match ending {
        Some(e) => {
            let _ = e.wait_for(|ending| *ending).await;
        }
        None => std::future::pending().await,
    }
}

/// The bytes every watch's queue may hold together, shared by the watches of a server.
#[derive(Debug, Clone)]
pub struct WatchBuffers {
    total: Arc<Semaphore>,
    bytes: usize,
}

impl WatchBuffers {
    /// A bound of `bytes` in all.
    pub fn new(bytes: usize) -> WatchBuffers {
        let bytes = bytes.clamp(1, Semaphore::MAX_PERMITS);
        WatchBuffers { total: Arc::new(Semaphore::new(bytes)), bytes }
    }

    /// Bytes queued now, over all watches.
    pub fn queued(&self) -> usize {
        self.bytes - self.total.available_permits()
    }

    /// Places for `n` bytes: at once if there are, else (counting a hit of `limit`) once
    /// there are; `None` if the bound was closed.
    async fn take(&self, n: usize, limit: &'static str) -> Option<OwnedSemaphorePermit> {
        match self.total.clone().try_acquire_many_owned(places(n, self.bytes)) {
            Ok(p) => Some(p),
            Err(_) => {
                crate::telemetry::limit_hit(limit);
                self.total.clone().acquire_many_owned(places(n, self.bytes)).await.ok()
            }
        }
    }

    /// Whether no watch holds places in it.
    pub fn idle(&self) -> bool {
        self.total.available_permits() == self.bytes
    }

    /// Whether this is the only handle on the bound.
    pub fn unshared(&self) -> bool {
        Arc::strong_count(&self.total) == 1
    }
}

/// A chunk on its way to the client, holding its bytes' places in its watch's and in all
/// watches' budgets until the connection takes it.
struct Queued {
    chunk: Chunk,
    _own: OwnedSemaphorePermit,
    _shared: [Option<OwnedSemaphorePermit>; 2],
    _all: OwnedSemaphorePermit,
}

/// The places `n` bytes take in a budget of `cap` (a larger chunk takes all of it).
fn places(n: usize, cap: usize) -> u32 {
    u32::try_from(n.min(cap)).unwrap_or(u32::MAX)
}

/// A body of the chunks queued for a client; each chunk's places are given back as the
/// connection takes it.
fn queued_body(rx: mpsc::Receiver<Queued>) -> Body {
    let stream = futures_util::stream::unfold(rx, |mut rx| async move {
        rx.recv().await.map(|q| (Ok::<_, crate::body::BoxError>(http_body::Frame::data(q.chunk)), rx))
    });
    http_body_util::BodyExt::boxed_unsync(http_body_util::StreamBody::new(stream))
}

/// Chunks in flight to one client before its watcher stops reading the broadcast. Backlog
/// chunks hold up to [`CHUNK`] bytes of frames and a live event is a chunk of its own, but
/// a frame larger than a chunk is one chunk too. The bytes queued are bounded by the
/// watch's budget ([`WatchSettings::buffer_bytes`]; a larger frame is queued alone), held
/// until the client reads or the stall timeout ends it. This is also how many live events
/// a client may have unread before the watcher waits for it (and, past the broadcast ring,
/// is ended).
const CLIENT_BUFFER: usize = 128;

/// Watch frames are joined into chunks of up to this many bytes before they are queued for
/// the client: one channel message, one write and (gzipped) one deflate job per chunk
/// instead of one per event (a WatchList of 30,000 pods would be 30,000 of each). Smaller
/// chunks spend kache's CPU on handing jobs to threads and writing their output; 256 KiB is
/// the size of the frames a LIST is gzipped in. A backlog's chunks start at 4 KiB and
/// double, so its first events go out at once; a watch's budget of queued bytes
/// ([`WatchSettings::buffer_bytes`]) holds 16.
const CHUNK: usize = 256 * 1024;

/// What one WATCH asks for, and the timing and buffers it is streamed within.
#[derive(Debug, Clone)]
pub struct WatchRequest {
    /// The namespace watched; `None` for every namespace.
    pub namespace: Option<String>,
    /// Its query: resourceVersion, selectors, initial events, bookmarks, timeout.
    pub opts: Options,
    /// The encoding its events are sent in.
    pub fmt: Format,
    /// The view of the objects it asks for (object, metadata, Table).
    pub view: View,
    /// Timing and buffers.
    pub settings: WatchSettings,
}

/// A consistent WatchList's end bookmark that waits for a freshness proof: the RV the
/// upstream had reached when the request came, and how long to wait for the cache to reach
/// it.
#[derive(Debug, Clone, Copy)]
pub struct EndAfter {
    /// The upstream's RV at the request's arrival.
    pub rv: u64,
    /// How long to wait for the cache to reach it before ending the watch.
    pub wait: Duration,
}

/// Answer a WATCH. Returns at once with a streaming body.
///
/// `end_after` is for a consistent WatchList (no resourceVersion, `sendInitialEvents=true`,
/// bookmarks allowed) whose cache has not yet been proven at the upstream's current RV:
/// the state is sent at once, then whatever changed after it, and the initial-events-end
/// bookmark once the watcher has delivered everything up to `end_after.rv` (the
/// apiserver's own stream, too, carries the changes after its snapshot before that
/// bookmark, which waits for its bookmark timer). The client thus takes in the state while
/// the proof is on its way instead of after it. Not proven in `end_after.wait`: the stream
/// ends, with no end bookmark, and the client starts its WatchList again.
pub async fn watch(cache: Arc<KindCache>, req: WatchRequest, end_after: Option<EndAfter>) -> Result<Response<Body>, Status> {
    let WatchRequest { namespace, opts, fmt, view, settings } = req;
    opts.fields.validate(&cache.resource.selectable_fields()).map_err(|e| Status::bad_request(e.to_string()))?;
    if let Some(n) = opts.rv.filter(|n| *n > 0) {
        reach(&cache, n).await?;
    }
    let include = Include::parse(opts.include_object.as_deref()).unwrap_or(Include::Metadata);
    // Subscribe before reading the snapshot: every event after it is then received (events
    // the snapshot already holds are skipped by RV).
    let rx_events = subscribe(&cache, namespace.as_deref(), &opts);
    let (start_rv, snap) = cache.latest();
    // The Table's columns are those the snapshot's cells were computed with; a change of
    // them comes with a relist, which ends this watch.
    let printer = snap.printer(&cache.resource.group, &cache.resource.plural);
    let enc = Encoder::new(cache.resource.clone(), fmt, view, include, printer);
    let (tx, rx) = mpsc::channel(CLIENT_BUFFER);
    let state = InitialState::default();
    let resp = streaming(enc.content_type(), rx, &state);
    // The apiserver (with WatchList on, as it is by default) takes a watch from no
    // resourceVersion or "0", with neither sendInitialEvents nor resourceVersionMatch, for
    // `sendInitialEvents=true`: its initial events then end with the initial-events-end
    // bookmark when bookmarks are allowed.
    let legacy = opts.rv_match.is_none() && matches!(opts.rv, None | Some(0));
    let initial_events = opts.send_initial_events.or(legacy.then_some(true));
    let end_after = end_after.filter(|e| e.rv > start_rv && initial_events == Some(true) && opts.bookmarks);
    let backlog = match (opts.rv, initial_events) {
        (_, Some(true)) | (None | Some(0), None) => {
            Backlog::State { end_bookmark: initial_events == Some(true) && opts.bookmarks && end_after.is_none(), rv: start_rv }
        }
        (Some(from), _) => Backlog::Since(from),
        (None, Some(false)) => Backlog::Nothing,
    };
    let Some(end) = deadline(&opts) else { return Ok(resp) };
    let own = Arc::new(Semaphore::new(settings.buffer_bytes.clamp(1, Semaphore::MAX_PERMITS)));
    let pending_end = end_after.map(|e| (e.rv, e.wait));
    let runs = cache.runs.clone();
    let w = Watcher { enc, opts, namespace, settings, tx, own, last_rv: start_rv.max(snap.rv), pending_end, state, runs };
    tokio::spawn(w.run(snap, backlog, rx_events, end));
    Ok(resp)
}

/// [`watch`] for a WatchList that comes while the cache is still loading its initial
/// list (`cache::feed::growing`): the list's objects the watch selects are sent as ADDED
/// events as its pages arrive; once the cache holds the list, the changes after the list's
/// RV; and the initial-events-end bookmark once the watcher has delivered everything up to
/// `end_after.rv` (at once when `None`: the list began after the request came, or any
/// state will do). If the attempt at the list fails, the stream ends without that bookmark
/// and the client starts its WatchList again, as after any watch that ends early.
pub async fn watch_growing(
    cache: Arc<KindCache>,
    growing: Arc<Growing>,
    req: WatchRequest,
    end_after: Option<EndAfter>,
) -> Result<Response<Body>, Status> {
    let WatchRequest { namespace, opts, fmt, view, settings } = req;
    opts.fields.validate(&cache.resource.selectable_fields()).map_err(|e| Status::bad_request(e.to_string()))?;
    let include = Include::parse(opts.include_object.as_deref()).unwrap_or(Include::Metadata);
    // Not a Table: its columns come with the cache's state, which is not there yet.
    let enc = Encoder::new(cache.resource.clone(), fmt, view, include, None);
    let (tx, rx) = mpsc::channel(CLIENT_BUFFER);
    // Compressed at kache's own priority (`serve::compress::watch`): the client waits on
    // each frame as the list arrives.
    let state = InitialState::loading();
    let resp = streaming(enc.content_type(), rx, &state);
    let Some(end) = deadline(&opts) else { return Ok(resp) };
    let own = Arc::new(Semaphore::new(settings.buffer_bytes.clamp(1, Semaphore::MAX_PERMITS)));
    let pending_end = opts.bookmarks.then(|| end_after.map_or((0, FAR), |e| (e.rv, e.wait)));
    let runs = cache.runs.clone();
    let w = Watcher { enc, opts, namespace, settings, tx, own, last_rv: 0, pending_end, state, runs };
    tokio::spawn(w.run_growing(cache, growing, end));
    Ok(resp)
}

/// A watch's response, its body the chunks `rx` receives, with the mark of its initial state
/// sent (`state`) in its extensions: the stream may be compressed
/// ([`crate::serve::compress::gzip_watch`]).
fn streaming(content_type: &'static str, rx: mpsc::Receiver<Queued>, state: &InitialState) -> Response<Body> {
    let mut resp = respond(StatusCode::OK, content_type, queued_body(rx));
    resp.extensions_mut().insert(state.clone());
    resp
}

/// The cache's broadcast for a watch: the index's for a selector pinning the indexed field,
/// else its namespace's for a watch of one namespace, else the kind's.
fn subscribe(cache: &KindCache, namespace: Option<&str>, opts: &Options) -> broadcast::Receiver<Message> {
    match (cache.resource.index.as_deref().and_then(|f| opts.fields.exact(f)), namespace) {
        (Some(value), _) => cache.subscribe_indexed(value),
        (None, Some(ns)) => cache.subscribe_namespace(ns),
        (None, None) => cache.subscribe(),
    }
}

/// When a watch ends (`timeoutSeconds`, or the apiserver's default when 0 or none is given);
/// `None` when it ends before it starts (a negative timeout, Go's wrapped multiplication
/// included: the apiserver's watch context has expired and its stream ends at once).
fn deadline(opts: &Options) -> Option<Instant> {
    let timeout = opts.watch_timeout().unwrap_or_else(default_timeout);
    if timeout.is_zero() {
        return None;
    }
    // Go's durations end at about 292 years; an `Instant` that far out may not exist.
    let now = Instant::now();
    Some(now.checked_add(timeout).unwrap_or_else(|| now + FAR))
}

/// What a watch sends before following the broadcast.
enum Backlog {
    /// The current state as ADDED events, then (WatchList) the initial-events-end bookmark
    /// at `rv`.
    State { end_bookmark: bool, rv: u64 },
    /// The window's events after this RV (or a 410 ERROR event when it is too old).
    Since(u64),
    /// Nothing (`sendInitialEvents=false` without a resourceVersion).
    Nothing,
}

/// The end of a watch whose deadline lies beyond what the clock can hold: a century.
const FAR: Duration = Duration::from_secs(100 * 365 * 86_400);

/// The apiserver's default watch length: random between 30 and 60 minutes.
fn default_timeout() -> Duration {
    Duration::from_secs(1800 + rand::random::<u64>() % 1800)
}

/// What a filtered watcher sees of one event: the event to send and the object it carries.
fn transition<'e>(ev: &'e Event, ns: Option<&str>, opts: &Options) -> Option<(EventType, &'e Object)> {
    let now = selected(&ev.object, ns, opts);
    match ev.kind {
        EventType::Added if now => Some((EventType::Added, &ev.object)),
        EventType::Deleted if now => Some((EventType::Deleted, &ev.object)),
        EventType::Modified => {
            let before = ev.prev.as_ref().is_some_and(|p| selected(p, ns, opts));
            match (before, now) {
                (true, true) => Some((EventType::Modified, &ev.object)),
                (false, true) => Some((EventType::Added, &ev.object)),
                (true, false) => Some((EventType::Deleted, ev.prev_at_rv.as_ref().or(ev.prev.as_ref()).unwrap_or(&ev.object))),
                (false, false) => None,
            }
        }
        _ => None,
    }
}

struct Watcher {
    enc: Encoder,
    opts: Options,
    namespace: Option<String>,
    settings: WatchSettings,
    tx: mpsc::Sender<Queued>,
    /// This watch's budget of queued bytes ([`WatchSettings::buffer_bytes`]).
    own: Arc<Semaphore>,
    /// RV up to which this watcher has delivered everything (basis of bookmarks).
    last_rv: u64,
    /// A consistent WatchList's initial-events-end bookmark still to send: once `last_rv`
    /// reaches this RV, or the stream ends when this long has passed after the state was
    /// sent ([`watch`]).
    pending_end: Option<(u64, Duration)>,
    /// Marked as the backlog's (a WatchList's initial state's) last chunk is queued.
    state: InitialState,
    /// The kind's deflated runs of WatchList events ([`crate::cache::deflated`]).
    runs: Arc<Runs>,
}

impl Watcher {
    /// Copy `f` into the chunk being built in `out`, first queueing that chunk if `f` does
    /// not fit in it. False when the client is gone or stalled (see [`Watcher::queue`]).
    async fn put(&self, out: &mut Chunks, f: Frame<'_>) -> bool {
        let n = f.len();
        if out.buf.capacity() - out.buf.len() < n {
            if !self.flush(out).await {
                return false;
            }
            out.start(n);
        }
        out.buf.extend_from_slice(&f.head);
        out.buf.extend_from_slice(f.body);
        out.buf.extend_from_slice(f.tail);
        true
    }

    /// Queue what `out` holds.
    async fn flush(&self, out: &mut Chunks) -> bool {
        out.buf.is_empty() || self.queue(Chunk::One(std::mem::take(&mut out.buf).freeze())).await
    }

    /// Hand a chunk to the client's connection, within this watch's and all watches' budgets
    /// of queued bytes (waiting for room); false when the client is gone or has taken
    /// nothing for the stall timeout (then it is ended as a slow watcher).
    async fn queue(&self, chunk: Chunk) -> bool {
        let send = async {
            let n = chunk.remaining();
            let own = match self.own.clone().try_acquire_many_owned(places(n, self.settings.buffer_bytes)) {
                Ok(p) => p,
                Err(_) => {
                    crate::telemetry::limit_hit("max-watch-buffer-bytes");
                    self.own.clone().acquire_many_owned(places(n, self.settings.buffer_bytes)).await.ok()?
                }
            };
            let [conn, flow] = &self.settings.shared;
            let conn = match conn {
                Some(b) => Some(b.take(n, "max-watch-buffers-bytes-per-connection").await?),
                None => None,
            };
            let flow = match flow {
                Some(b) => Some(b.take(n, "max-watch-buffers-bytes-per-user").await?),
                None => None,
            };
            let all = self.settings.buffers.take(n, "max-watch-buffers-bytes").await?;
            self.tx.send(Queued { chunk, _own: own, _shared: [conn, flow], _all: all }).await.ok()
        };
        match tokio::time::timeout(self.settings.stall_timeout, send).await {
            Ok(Some(())) => true,
            Ok(None) => false,
            Err(_) => {
                metrics::counter!(crate::telemetry::WATCHERS_SLOW, &crate::telemetry::resource_labels(&self.enc.res)).increment(1);
                tracing::debug!(resource = %self.enc.res.plural, "ending a watcher whose client stopped reading");
                false
            }
        }
    }

    /// Send the backlog from `snap`, encoding each frame into the chunk that goes to the
    /// client (the snapshot is held until the backlog is sent). False if the watch ends.
    async fn backlog(&self, snap: &Snapshot, backlog: Backlog) -> bool {
        let mut out = Chunks::growing();
        let ns = self.namespace.as_deref();
        match backlog {
            Backlog::State { end_bookmark, rv } => {
                let sent = match self.runs_code() {
                    Some(enc) => self.state_in_runs(snap, enc).await,
                    None => self.state(snap, &mut out).await,
                };
                if !sent {
                    return false;
                }
                if end_bookmark && !self.put(&mut out, self.enc.bookmark(rv, true)).await {
                    return false;
                }
            }
            Backlog::Since(from) => match snap.window.since(from) {
                Ok(events) => {
                    for (kind, o) in events.filter_map(|ev| transition(ev, ns, &self.opts)) {
                        if self.enc.refuses(o) {
                            return false;
                        }
                        let Some(f) = self.enc.event(kind, o) else { continue };
                        if !self.put(&mut out, f).await {
                            return false;
                        }
                    }
                }
                Err(too_old) => {
                    let f = self.enc.error(&Status::too_old(from, too_old.oldest));
                    // The stream ends after the ERROR event.
                    let _ = self.put(&mut out, f).await && self.flush(&mut out).await;
                    return false;
                }
            },
            Backlog::Nothing => {}
        }
        // Marked before the last chunk is queued: once the client's connection has taken
        // it, the stream's encoding sees the state sent (`gzip_watch` then drops its
        // compressor at the next pause instead of keeping it until a later event).
        self.state.sent();
        self.flush(&mut out).await
    }

    /// The code of the runs this watch's state goes in ([`Watcher::state_in_runs`]): a
    /// WatchList of a whole collection (no namespace, no selector) of the objects themselves.
    fn runs_code(&self) -> Option<u8> {
        let whole = self.namespace.is_none() && self.opts.labels.is_empty() && self.opts.fields.is_empty();
        self.enc.runs_kept().filter(|_| whole)
    }

    /// The state's objects this watch selects, as ADDED events in chunks; false if the watch
    /// ends.
    async fn state(&self, snap: &Snapshot, out: &mut Chunks) -> bool {
        for o in candidates(snap, self.namespace.as_deref(), &self.opts, self.enc.res.index.as_deref(), None) {
            if self.enc.refuses(o) {
                return false;
            }
            let Some(f) = self.enc.event(EventType::Added, o) else { continue };
            if !self.put(out, f).await {
                return false;
            }
        }
        true
    }

    /// Every object of the state as ADDED events, in the runs a gzip encoding keeps deflated
    /// between WatchLists of the whole collection ([`crate::cache::deflated`]); false if the
    /// watch ends.
    async fn state_in_runs(&self, snap: &Snapshot, enc: u8) -> bool {
        let pass = self.runs.begin(snap.bytes / 4);
        let mut frames = Vec::new();
        let mut len = 0;
        let mut objects = Vec::new();
        for o in snap.range(None, None) {
            let Some(f) = self.enc.event(EventType::Added, o) else { continue };
            len += f.len();
            frames.push(f);
            objects.push(o);
            if cut_after(&o.key, len) && !self.queue_run(&mut frames, &mut len, &mut objects, enc, pass).await {
                return false;
            }
        }
        if !objects.is_empty() && !self.queue_run(&mut frames, &mut len, &mut objects, enc, pass).await {
            return false;
        }
        self.runs.end(enc, pass);
        true
    }

    /// Queue the run of `objects`, whose events are `frames` (`len` bytes). A gzipped
    /// stream sends a kept run as its deflated bytes, so its frames are gathered only when
    /// the run is not kept or the stream may not be gzipped.
    async fn queue_run(&self, frames: &mut Vec<Frame<'_>>, len: &mut usize, objects: &mut Vec<&Arc<Object>>, enc: u8, pass: u64) -> bool {
        let run = self.runs.run(enc, objects, pass);
        objects.clear();
        let raw = if self.state.is_gzipped() && run.deflated().is_some() {
            Bytes::new()
        } else {
            let mut buf = BytesMut::with_capacity(*len);
            for f in frames.iter() {
                buf.extend_from_slice(&f.head);
                buf.extend_from_slice(f.body);
                buf.extend_from_slice(f.tail);
            }
            buf.freeze()
        };
        frames.clear();
        *len = 0;
        self.queue(Chunk::Run(raw, run)).await
    }

    async fn run(mut self, snap: Arc<Snapshot>, backlog: Backlog, mut rx: broadcast::Receiver<Message>, end: Instant) {
        let snap_rv = snap.rv;
        if !self.backlog(&snap, backlog).await {
            return;
        }
        drop(snap);
        let sent = metrics::counter!(crate::telemetry::WATCH_EVENTS_SENT, &crate::telemetry::resource_labels(&self.enc.res));
        let early = end.checked_sub(self.settings.bookmark_before_end).unwrap_or(end);
        let mut next_bookmark = (Instant::now() + self.settings.bookmark_interval).min(early);
        // As in the apiserver's cacher, a watch whose pre-deadline bookmark time has already
        // passed when it starts (timeoutSeconds of 2 or less) gets no bookmarks at all.
        let bookmarks = self.opts.bookmarks && early > Instant::now();
        let unproven = self.pending_end.map_or(end, |(_, wait)| Instant::now() + wait);
        let mut out = Chunks::exact();
        let mut ending = self.settings.ending.clone();
        loop {
            // The select below takes the cache's messages first: a busy kind must not keep
            // a watch past its deadline.
            if !self.end_initial_events(&mut out).await || Instant::now() >= end {
                return;
            }
            let msg = tokio::select! {
                // What the cache sent comes first: a proof that has come is seen before the
                // time to wait for it runs out.
                biased;
                m = rx.recv() => m,
                _ = sleep_until(next_bookmark), if bookmarks && self.pending_end.is_none() => {
                    if !(self.put(&mut out, self.enc.bookmark(self.last_rv, false)).await && self.flush(&mut out).await) {
                        return;
                    }
                    let now = Instant::now();
                    next_bookmark = now + self.settings.bookmark_interval;
                    if now < early {
                        next_bookmark = next_bookmark.min(early);
                    }
                    continue;
                }
                _ = sleep_until(end) => return,
                _ = sleep_until(unproven), if self.pending_end.is_some() => return,
                _ = self.tx.closed() => return,
                _ = shut_down(&mut ending) => return,
            };
            if !self.deliver(&mut out, msg, snap_rv, bookmarks, &sent).await {
                return;
            }
        }
    }

    /// [`watch_growing`]'s stream: the loading list as its pages arrive, then on from the
    /// cache (which holds the list once it ends) as a watch from the list's RV.
    async fn run_growing(mut self, cache: Arc<KindCache>, growing: Arc<Growing>, end: Instant) {
        let Some(rv) = self.growing_state(&growing, end).await else { return };
        drop(growing);
        let rx = subscribe(&cache, self.namespace.as_deref(), &self.opts);
        let (start_rv, snap) = cache.latest();
        self.last_rv = start_rv.max(snap.rv);
        self.run(snap, Backlog::Since(rv), rx, end).await
    }

    /// The loading list's objects this watch selects, as ADDED events as its pages arrive;
    /// the list's RV once the cache holds it, `None` when the watch ends (the attempt
    /// failed, the client left or stalled, the deadline passed).
    async fn growing_state(&self, growing: &Growing, end: Instant) -> Option<u64> {
        let ns = self.namespace.as_deref();
        let mut out = Chunks::growing();
        let mut read = 0;
        let mut ending = self.settings.ending.clone();
        loop {
            let next = tokio::select! {
                next = growing.next(read) => next,
                _ = sleep_until(end) => return None,
                _ = self.tx.closed() => return None,
                _ = shut_down(&mut ending) => return None,
            };
            let objects = match next {
                Next::Objects(objects) => objects,
                Next::End(End::Installed(rv)) => return Some(rv),
                Next::End(End::Failed) => return None,
            };
            read += objects.len();
            for o in objects.iter().filter(|o| selected(o, ns, &self.opts)) {
                let Some(f) = self.enc.event(EventType::Added, o) else { continue };
                if !self.put(&mut out, f).await {
                    return None;
                }
            }
            if !self.flush(&mut out).await {
                return None;
            }
        }
    }

    /// Send a consistent WatchList's initial-events-end bookmark once the watcher has
    /// delivered everything up to the RV it waits for; false if the watch ends.
    async fn end_initial_events(&mut self, out: &mut Chunks) -> bool {
        match self.pending_end {
            Some((rv, _)) if self.last_rv >= rv => {
                self.pending_end = None;
                self.put(out, self.enc.bookmark(self.last_rv, true)).await && self.flush(out).await
            }
            _ => true,
        }
    }

    /// Send what one message from the cache means for this watcher (an event it selects, a
    /// bookmark after a relist's differences); whether the stream goes on.
    async fn deliver(
        &mut self,
        out: &mut Chunks,
        msg: Result<Message, broadcast::error::RecvError>,
        snap_rv: u64,
        bookmarks: bool,
        sent: &metrics::Counter,
    ) -> bool {
        let slow = || metrics::counter!(crate::telemetry::WATCHERS_SLOW, &crate::telemetry::resource_labels(&self.enc.res)).increment(1);
        match msg {
            Ok(Message::Event(ev)) => {
                let Some(ev) = ev.upgrade() else {
                    // The window dropped this change (its count or byte bound) while the
                    // watcher lagged: end it so its client resumes, never skip.
                    slow();
                    return false;
                };
                if ev.rv <= snap_rv {
                    return true;
                }
                self.last_rv = ev.rv;
                let seen = transition(&ev, self.namespace.as_deref(), &self.opts);
                if seen.is_some_and(|(_, o)| self.enc.refuses(o)) {
                    return false;
                }
                match seen.and_then(|(kind, o)| self.enc.event(kind, o)) {
                    Some(f) => {
                        let ok = self.put(out, f).await && self.flush(out).await;
                        if ok {
                            sent.increment(1);
                        }
                        ok
                    }
                    None => true,
                }
            }
            Ok(Message::Progress(p)) => {
                self.last_rv = self.last_rv.max(p);
                true
            }
            // A relist's differences have all been sent: a bookmark at the list's RV tells
            // the client it has caught up.
            Ok(Message::Caught(p)) => {
                self.last_rv = self.last_rv.max(p);
                !bookmarks || (self.put(out, self.enc.bookmark(self.last_rv, false)).await && self.flush(out).await)
            }
            // Relisted state, a watcher too slow for the ring, or a closed cache: end the
            // stream so the client resumes from its last RV (or relists on 410).
            Err(broadcast::error::RecvError::Lagged(_)) => {
                slow();
                false
            }
            Ok(Message::Reset) | Err(_) => false,
        }
    }
}

mod frames;
use frames::{Chunks, Encoder, Frame};

#[cfg(test)]
mod tests;
