//! WATCH: start from the window (resume), from the current state (synthetic ADDED events,
//! `sendInitialEvents` with its initial-events-end bookmark), or with a 410 ERROR event; then
//! follow the cache's broadcast, turning selector transitions into ADDED/DELETED. A watcher
//! that falls behind the broadcast ring is ended, never waited for.

use super::table::{self as rows, Include};
use super::{candidates, list::reach, selected};
use crate::api::media::{Format, View};
use crate::api::query::Options;
use crate::api::resource::Resource;
use crate::api::status::Status;
use crate::api::table::TablePrinter;
use crate::api::wire;
use crate::body::{Body, Chunk};
use crate::cache::object::Object;
use crate::cache::store::Snapshot;
use crate::cache::window::{Event, EventType};
use crate::cache::{KindCache, Message};
use crate::serve::respond::respond;
use bytes::{Bytes, BytesMut};
use http::{Response, StatusCode};
use std::borrow::Cow;
use std::sync::atomic::{AtomicBool, Ordering};
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
}

/// Default of [`WatchSettings::buffer_bytes`]: a few chunks of events (a pod is a few KB);
/// a stalled client holds no more than this, not 128 chunks of the largest object.
pub const WATCH_BUFFER_BYTES: usize = 4 << 20;
/// Default bound of the bytes all watches together have queued.
pub const WATCH_BUFFERS_BYTES: usize = 1 << 30;

impl Default for WatchSettings {
    fn default() -> Self {
        WatchSettings {
            bookmark_interval: Duration::from_secs(60),
            bookmark_before_end: Duration::from_secs(2),
            stall_timeout: Duration::from_secs(15),
            buffer_bytes: WATCH_BUFFER_BYTES,
            buffers: WatchBuffers::new(WATCH_BUFFERS_BYTES),
        }
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
}

/// A chunk on its way to the client, holding its bytes' places in its watch's and in all
/// watches' budgets until the connection takes it.
struct Queued {
    chunk: Bytes,
    _own: OwnedSemaphorePermit,
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
        rx.recv().await.map(|q| (Ok::<_, crate::body::BoxError>(http_body::Frame::data(Chunk::One(q.chunk))), rx))
    });
    http_body_util::BodyExt::boxed_unsync(http_body_util::StreamBody::new(stream))
}

/// Chunks in flight to one client before its watcher stops reading the broadcast. Backlog
/// chunks hold up to [`CHUNK`] bytes of frames and a live event is a chunk of its own, but
/// a frame larger than a chunk is one chunk too: the bytes queued are at most 128 times
/// the larger of `CHUNK` and the largest object watched (4 MB for pods), held until the
/// client reads or the stall timeout ends it. This is also how many live events a client
/// may have unread before the watcher waits for it (and, past the broadcast ring, is
/// ended).
const CLIENT_BUFFER: usize = 128;

/// Watch frames are joined into chunks of up to this many bytes before they are queued for
/// the client: one channel message and one write per chunk instead of one per event (a
/// WatchList of 30,000 pods would be 30,000 of each).
const CHUNK: usize = 32 * 1024;

/// Answer a WATCH. Returns at once with a streaming body.
pub async fn watch(
    cache: Arc<KindCache>,
    namespace: Option<String>,
    opts: Options,
    fmt: Format,
    view: View,
    settings: WatchSettings,
) -> Result<Response<Body>, Status> {
    opts.fields.validate(&cache.resource.selectable_fields()).map_err(|e| Status::bad_request(e.to_string()))?;
    if let Some(n) = opts.rv.filter(|n| *n > 0) {
        reach(&cache, n).await?;
    }
    let include = Include::parse(opts.include_object.as_deref()).unwrap_or(Include::Metadata);
    // Subscribe before reading the snapshot: every event after it is then received (events
    // the snapshot already holds are skipped by RV).
    let rx_events = match cache.resource.index.as_deref().and_then(|f| opts.fields.exact(f)) {
        Some(value) => cache.subscribe_indexed(value),
        None => cache.subscribe(),
    };
    let (start_rv, snap) = cache.latest();
    // The Table's columns are those the snapshot's cells were computed with; a change of
    // them comes with a relist, which ends this watch.
    let printer = snap.printer(&cache.resource.group, &cache.resource.plural);
    let enc = Encoder::new(cache.resource.clone(), fmt, view, include, printer);
    let (tx, rx) = mpsc::channel(CLIENT_BUFFER);
    let resp = respond(StatusCode::OK, enc.content_type(), queued_body(rx));
    // The apiserver (with WatchList on, as it is by default) takes a watch from no
    // resourceVersion or "0", with neither sendInitialEvents nor resourceVersionMatch, for
    // `sendInitialEvents=true`: its initial events then end with the initial-events-end
    // bookmark when bookmarks are allowed.
    let legacy = opts.rv_match.is_none() && matches!(opts.rv, None | Some(0));
    let initial_events = opts.send_initial_events.or(legacy.then_some(true));
    let backlog = match (opts.rv, initial_events) {
        (_, Some(true)) | (None | Some(0), None) => {
            Backlog::State { end_bookmark: initial_events == Some(true) && opts.bookmarks, rv: start_rv }
        }
        (Some(from), _) => Backlog::Since(from),
        (None, Some(false)) => Backlog::Nothing,
    };
    // `timeoutSeconds=0` means "no timeout given": the apiserver then picks its default too.
    let timeout = opts.watch_timeout().unwrap_or_else(default_timeout);
    if timeout.is_zero() {
        // A negative timeout (Go's wrapped multiplication included): the apiserver's watch
        // context has expired before it starts, and its stream ends at once.
        return Ok(resp);
    }
    // Go's durations end at about 292 years; an `Instant` that far out may not exist.
    let now = Instant::now();
    let end = now.checked_add(timeout).unwrap_or_else(|| now + FAR);
    let own = Arc::new(Semaphore::new(settings.buffer_bytes.clamp(1, Semaphore::MAX_PERMITS)));
    let w = Watcher { enc, opts, namespace, settings, tx, own, last_rv: start_rv.max(snap.rv) };
    tokio::spawn(w.run(snap, backlog, rx_events, end));
    Ok(resp)
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
        out.buf.is_empty() || self.queue(std::mem::take(&mut out.buf).freeze()).await
    }

    /// Hand a chunk to the client's connection, within this watch's and all watches' budgets
    /// of queued bytes (waiting for room); false when the client is gone or has taken
    /// nothing for the stall timeout (then it is ended as a slow watcher).
    async fn queue(&self, chunk: Bytes) -> bool {
        let send = async {
            let n = chunk.len();
            let own = match self.own.clone().try_acquire_many_owned(places(n, self.settings.buffer_bytes)) {
                Ok(p) => p,
                Err(_) => {
                    crate::telemetry::limit_hit("max-watch-buffer-bytes");
                    self.own.clone().acquire_many_owned(places(n, self.settings.buffer_bytes)).await.ok()?
                }
            };
            let budget = &self.settings.buffers;
            let all = match budget.total.clone().try_acquire_many_owned(places(n, budget.bytes)) {
                Ok(p) => p,
                Err(_) => {
                    crate::telemetry::limit_hit("max-watch-buffers-bytes");
                    budget.total.clone().acquire_many_owned(places(n, budget.bytes)).await.ok()?
                }
            };
            self.tx.send(Queued { chunk, _own: own, _all: all }).await.ok()
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
                for o in candidates(snap, ns, &self.opts, self.enc.res.index.as_deref(), None) {
                    if self.enc.refuses(o) {
                        return false;
                    }
                    let Some(f) = self.enc.event(EventType::Added, o) else { continue };
                    if !self.put(&mut out, f).await {
                        return false;
                    }
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
        self.flush(&mut out).await
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
        let mut out = Chunks::exact();
        loop {
            let msg = tokio::select! {
                m = rx.recv() => m,
                _ = sleep_until(next_bookmark), if bookmarks => {
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
                _ = self.tx.closed() => return,
            };
            match msg {
                Ok(Message::Event(ev)) => {
                    let Some(ev) = ev.upgrade() else {
                        // The window dropped this change (its count or byte bound) while
                        // the watcher lagged: end it so its client resumes, never skip.
                        metrics::counter!(crate::telemetry::WATCHERS_SLOW, &crate::telemetry::resource_labels(&self.enc.res)).increment(1);
                        return;
                    };
                    if ev.rv <= snap_rv {
                        continue;
                    }
                    self.last_rv = ev.rv;
                    let seen = transition(&ev, self.namespace.as_deref(), &self.opts);
                    if seen.is_some_and(|(_, o)| self.enc.refuses(o)) {
                        return;
                    }
                    let frame = seen.and_then(|(kind, o)| self.enc.event(kind, o));
                    if let Some(f) = frame {
                        if !(self.put(&mut out, f).await && self.flush(&mut out).await) {
                            return;
                        }
                        sent.increment(1);
                    }
                }
                Ok(Message::Progress(p)) => {
                    self.last_rv = self.last_rv.max(p);
                    continue;
                }
                // A relist's differences have all been sent: a bookmark at the list's RV
                // tells the client it has caught up.
                Ok(Message::Caught(p)) => {
                    self.last_rv = self.last_rv.max(p);
                    if bookmarks && !(self.put(&mut out, self.enc.bookmark(self.last_rv, false)).await && self.flush(&mut out).await) {
                        return;
                    }
                }
                // Relisted state, a watcher too slow for the ring, or a closed cache: end the
                // stream so the client resumes from its last RV (or relists on 410).
                Err(broadcast::error::RecvError::Lagged(_)) => {
                    metrics::counter!(crate::telemetry::WATCHERS_SLOW, &crate::telemetry::resource_labels(&self.enc.res)).increment(1);
                    return;
                }
                Ok(Message::Reset) | Err(_) => return,
            }
        }
    }
}

/// The chunk being filled for one client. A backlog's chunks start small and double up to
/// [`CHUNK`] (a resume with two events does not hold 32 KB); live events get chunks of
/// exactly their size.
struct Chunks {
    buf: BytesMut,
    /// Capacity of the next chunk (at least the frame that starts it).
    room: usize,
}

impl Chunks {
    fn growing() -> Chunks {
        Chunks { buf: BytesMut::new(), room: 4096 }
    }

    fn exact() -> Chunks {
        Chunks { buf: BytesMut::new(), room: 0 }
    }

    /// Start a new chunk for a frame of `n` bytes.
    fn start(&mut self, n: usize) {
        self.buf = BytesMut::with_capacity(n.max(self.room));
        self.room = (self.room * 2).min(CHUNK);
    }
}

/// One watch frame as the pieces copied into a chunk: a head (built for the frame, or
/// shared by the watch), the object's stored bytes, a constant tail.
struct Frame<'a> {
    head: Cow<'a, [u8]>,
    body: &'a [u8],
    tail: &'static [u8],
}

impl Frame<'_> {
    fn len(&self) -> usize {
        self.head.len() + self.body.len() + self.tail.len()
    }

    /// A frame built whole.
    fn owned(bytes: Vec<u8>) -> Frame<'static> {
        Frame { head: Cow::Owned(bytes), body: &[], tail: &[] }
    }
}

/// Writes watch events of one resource in one encoding and view (the objects, their
/// PartialObjectMetadata, or one-row Tables).
struct Encoder {
    res: Arc<Resource>,
    fmt: Format,
    /// Whether events carry PartialObjectMetadata instead of the objects.
    metadata: bool,
    /// For a Table watch (`kubectl get -w`): each event's object is a Table of one row.
    table: Option<TableEvents>,
    /// `{"type":"<T>","object":{"kind":...,"apiVersion":...,` (and `"metadata":` for the
    /// metadata view) for ADDED, MODIFIED, DELETED, built once per watch instead of once per
    /// event.
    json_heads: [Vec<u8>; 3],
    /// The `apiVersion` and `kind` events carry, built once per watch.
    api_version: String,
    kind: String,
}

impl Encoder {
    fn new(res: Arc<Resource>, fmt: Format, view: View, include: Include, printer: Option<TablePrinter>) -> Encoder {
        let (api_version, kind, metadata) = match view {
            View::Metadata { beta, .. } => (View::meta_api_version(beta).to_string(), "PartialObjectMetadata".to_string(), true),
            _ => (res.api_version(), res.kind.clone(), false),
        };
        let table = match view {
            View::Table { beta } => printer.map(|printer| TableEvents { printer, beta, include, columns_sent: AtomicBool::new(false) }),
            _ => None,
        };
        let head = |t: EventType| {
            let meta = if metadata { "\"metadata\":" } else { "" };
            if res.custom() && !metadata {
                // A custom resource's stored item is the whole object.
                return format!("{{\"type\":\"{}\",\"object\":", t.as_str()).into_bytes();
            }
            format!("{{\"type\":\"{}\",\"object\":{{\"kind\":\"{kind}\",\"apiVersion\":\"{api_version}\",{meta}", t.as_str()).into_bytes()
        };
        let json_heads = [head(EventType::Added), head(EventType::Modified), head(EventType::Deleted)];
        Encoder { res, fmt, metadata, table, json_heads, api_version, kind }
    }

    fn content_type(&self) -> &'static str {
        match self.fmt {
            Format::Json => "application/json",
            Format::Protobuf => wire::PROTOBUF_WATCH,
        }
    }

    /// Whether this watch cannot carry `o` faithfully: a Table watch meeting an object whose
    /// cells were withheld for their size. The watch is then ended (the client resumes,
    /// and its new watch is the upstream's while such an object is held), never skipped.
    fn refuses(&self, o: &Object) -> bool {
        self.table.is_some() && o.unprinted()
    }

    /// The frame of a `kind` event carrying `o` (None if `o` is not held in this encoding).
    fn event<'a>(&'a self, kind: EventType, o: &'a Object) -> Option<Frame<'a>> {
        if let Some(t) = &self.table {
            return t.event(kind.as_str(), o).map(Frame::owned);
        }
        match self.fmt {
            Format::Json => {
                // Stored JSON is `,{...}`: the object's members follow the shared head (for
                // the metadata view, the metadata's JSON follows `"metadata":`).
                let head = Cow::Borrowed(&self.json_heads[kind as usize][..]);
                if self.metadata {
                    return Some(Frame { head, body: o.json_metadata()?, tail: b"}}\n" });
                }
                let from = if self.res.custom() { 1 } else { 2 };
                Some(Frame { head, body: o.json.as_deref()?.get(from..)?, tail: b"}\n" })
            }
            Format::Protobuf => {
                let m = if self.metadata { o.pb_metadata()? } else { o.pb_message_ref()? };
                let head = wire::watch_frame_prefix(kind.as_str(), &self.api_version, &self.kind, m.len());
                Some(Frame { head: Cow::Owned(head), body: m, tail: wire::UNKNOWN_SUFFIX })
            }
        }
    }

    fn bookmark(&self, rv: u64, initial_end: bool) -> Frame<'static> {
        if let Some(t) = &self.table {
            return Frame::owned(t.bookmark(rv, initial_end));
        }
        // A bookmark is an empty object with only its RV; the apiserver's empty pod still
        // writes its spec and status, a PartialObjectMetadata has nothing else.
        let pod = !self.metadata && self.res.group.is_empty() && self.res.kind == "Pod";
        match self.fmt {
            Format::Json => {
                let ann = if initial_end { ",\"annotations\":{\"k8s.io/initial-events-end\":\"true\"}" } else { "" };
                let tail = if pod { ",\"spec\":{\"containers\":null},\"status\":{}" } else { "" };
                Frame::owned(
                    format!(
                        "{{\"type\":\"BOOKMARK\",\"object\":{{\"kind\":\"{}\",\"apiVersion\":\"{}\",\"metadata\":{{\"resourceVersion\":\"{rv}\"{ann}}}{tail}}}}}\n",
                        self.kind, self.api_version
                    )
                    .into_bytes(),
                )
            }
            Format::Protobuf => {
                Frame::owned(wire::watch_frame("BOOKMARK", &self.api_version, &self.kind, &bookmark_pb(rv, initial_end, pod)))
            }
        }
    }

    fn error(&self, status: &Status) -> Frame<'static> {
        match self.fmt {
            Format::Json => {
                let mut line = b"{\"type\":\"ERROR\",\"object\":".to_vec();
                line.extend_from_slice(&status.to_json());
                line.extend_from_slice(b"}\n");
                Frame::owned(line)
            }
            Format::Protobuf => Frame::owned(wire::watch_frame("ERROR", "v1", "Status", &status.to_pb())),
        }
    }
}

/// The events of a Table watch, as the apiserver writes them: each event's object is a
/// Table whose `metadata` holds the object's RV and whose one row is the object's, the
/// column definitions in the first event of the watch only (`null` after). A bookmark's row
/// is the printer's row for an empty object, its metadata only the RV (and the
/// initial-events-end annotation).
struct TableEvents {
    printer: TablePrinter,
    beta: bool,
    include: Include,
    /// Whether an event has carried the column definitions yet.
    columns_sent: AtomicBool,
}

impl TableEvents {
    /// `{"type":..,"object":{"kind":"Table",..,"columnDefinitions":..,"rows":[` for an
    /// object at `rv`.
    fn head(&self, event: &str, rv: u64) -> Vec<u8> {
        let mut out = format!(
            "{{\"type\":\"{event}\",\"object\":{{\"kind\":\"Table\",\"apiVersion\":\"{}\",\"metadata\":{{\"resourceVersion\":\"{rv}\"}},\"columnDefinitions\":",
            View::meta_api_version(self.beta)
        )
        .into_bytes();
        if self.columns_sent.swap(true, Ordering::Relaxed) {
            out.extend_from_slice(b"null");
        } else {
            out.extend_from_slice(self.printer.columns());
        }
        out.extend_from_slice(b",\"rows\":[");
        out
    }

    fn event(&self, event: &str, o: &Object) -> Option<Vec<u8>> {
        let mut pieces = Vec::new();
        rows::row(o, 0, self.beta, self.include, rows::now(), &mut pieces)?;
        let mut out = self.head(event, o.rv);
        for p in &pieces {
            out.extend_from_slice(p.bytes());
        }
        out.extend_from_slice(b"]}}\n");
        Some(out)
    }

    fn bookmark(&self, rv: u64, initial_end: bool) -> Vec<u8> {
        let mut out = self.head("BOOKMARK", rv);
        out.extend_from_slice(b"{\"cells\":");
        out.extend_from_slice(&self.printer.cells(&serde_json::json!({})).render(rows::now()));
        match self.include {
            Include::Metadata => {
                let ann = if initial_end { ",\"annotations\":{\"k8s.io/initial-events-end\":\"true\"}" } else { "" };
                out.extend_from_slice(
                    format!(
                        ",\"object\":{{\"kind\":\"PartialObjectMetadata\",\"apiVersion\":\"{}\",\"metadata\":{{\"resourceVersion\":\"{rv}\"{ann}}}}}}}",
                        View::meta_api_version(self.beta)
                    )
                    .as_bytes(),
                );
            }
            Include::None => out.extend_from_slice(b",\"object\":null}"),
        }
        out.extend_from_slice(b"]}}\n");
        out
    }
}

/// The protobuf bookmark object: ObjectMeta with the RV (and the initial-events-end
/// annotation), and for pods the empty spec and status the apiserver writes.
fn bookmark_pb(rv: u64, initial_end: bool, pod: bool) -> Vec<u8> {
    let mut meta = Vec::with_capacity(64);
    for f in 1..=5 {
        wire::put_bytes(&mut meta, f, b"");
    }
    wire::put_bytes(&mut meta, 6, rv.to_string().as_bytes());
    wire::put_uint(&mut meta, 7, 0);
    wire::put_bytes(&mut meta, 8, b"");
    if initial_end {
        let mut entry = Vec::new();
        wire::put_bytes(&mut entry, 1, b"k8s.io/initial-events-end");
        wire::put_bytes(&mut entry, 2, b"true");
        wire::put_bytes(&mut meta, 12, &entry);
    }
    let mut msg = Vec::with_capacity(160);
    wire::put_bytes(&mut msg, 1, &meta);
    if pod {
        const SPEC: &[u8] =
            &[0x1a, 0, 0x32, 0, 0x42, 0, 0x4a, 0, 0x52, 0, 0x58, 0, 0x60, 0, 0x68, 0, 0x82, 1, 0, 0x8a, 1, 0, 0x9a, 1, 0, 0xc2, 1, 0];
        const STATUS: &[u8] = &[0x0a, 0, 0x1a, 0, 0x22, 0, 0x2a, 0, 0x32, 0, 0x4a, 0, 0x5a, 0, 0x72, 0, 0x88, 1, 0];
        wire::put_bytes(&mut msg, 2, SPEC);
        wire::put_bytes(&mut msg, 3, STATUS);
    }
    msg
}

#[cfg(test)]
mod tests {
    use super::*;

    fn configmaps() -> Arc<Resource> {
        Arc::new(crate::sim::catalog::simulated().into_iter().find(|r| r.plural == "configmaps").expect("configmaps"))
    }

    /// A ConfigMap whose stored JSON item is about `size` bytes.
    fn cm(i: usize, size: usize) -> Object {
        let mut o = Object::bare(crate::cache::object::key("ns", &format!("cm-{i:04}")), 10 + i as u64);
        o.json = Some(Bytes::from(format!(",{{\"metadata\":{{\"name\":\"cm-{i:04}\"}},\"data\":{{\"k\":\"{}\"}}}}", "x".repeat(size))));
        o
    }

    fn watcher(tx: mpsc::Sender<Queued>) -> Watcher {
        Watcher {
            own: Arc::new(Semaphore::new(WATCH_BUFFER_BYTES)),
            enc: Encoder::new(configmaps(), Format::Json, View::Object, Include::Metadata, None),
            opts: Options::default(),
            namespace: None,
            settings: WatchSettings::default(),
            tx,
            last_rv: 0,
        }
    }

    #[tokio::test]
    async fn a_backlog_is_every_frame_once_in_order_in_chunks_cut_at_frame_boundaries() {
        // Small and large objects, one larger than a chunk, enough for many chunks.
        let objects: Vec<Object> = (0..400).map(|i| cm(i, if i == 150 { 3 * CHUNK / 2 } else { 50 + (i * 37) % 900 })).collect();
        let snap = Snapshot::from_objects(objects, 500, 10, None);
        let (tx, mut rx) = mpsc::channel(CLIENT_BUFFER);
        let w = watcher(tx);
        let mut frames: Vec<Vec<u8>> = Vec::new();
        for o in snap.range(None, None) {
            let f = w.enc.event(EventType::Added, o).expect("held in JSON");
            frames.push([&f.head[..], f.body, f.tail].concat());
        }
        let b = w.enc.bookmark(500, true);
        frames.push(b.head.to_vec());
        let reader = tokio::spawn(async move {
            let mut chunks = Vec::new();
            while let Some(c) = rx.recv().await {
                chunks.push(c.chunk);
            }
            chunks
        });
        assert!(w.backlog(&snap, Backlog::State { end_bookmark: true, rv: 500 }).await);
        drop(w);
        let chunks = reader.await.unwrap();
        assert_eq!(chunks.concat(), frames.concat(), "every frame once, in key order, then the bookmark");
        let mut ends = std::collections::BTreeSet::new();
        let mut at = 0;
        for f in &frames {
            at += f.len();
            ends.insert(at);
        }
        let mut at = 0;
        for (i, c) in chunks.iter().enumerate() {
            let start = at;
            at += c.len();
            assert!(ends.contains(&at), "chunk {i} ends inside a frame");
            let one_frame = ends.range(start + 1..at).next().is_none();
            // Chunks start at 4 KB and double up to CHUNK (a larger frame is a chunk alone).
            let limit = (4096usize << i.min(8)).min(CHUNK);
            assert!(c.len() <= limit || one_frame, "chunk {i} of {} bytes holds several frames past {limit}", c.len());
        }
        assert!(chunks.len() > 10, "{} chunks", chunks.len());
    }

    #[tokio::test]
    async fn a_backlog_stops_when_the_client_is_gone() {
        let objects: Vec<Object> = (0..50).map(|i| cm(i, 2000)).collect();
        let snap = Snapshot::from_objects(objects, 100, 10, None);
        let (tx, rx) = mpsc::channel(CLIENT_BUFFER);
        drop(rx);
        assert!(!watcher(tx).backlog(&snap, Backlog::State { end_bookmark: false, rv: 100 }).await);
    }

    #[tokio::test]
    async fn a_resume_from_a_trimmed_window_is_one_410_error_event() {
        let mut snap = Snapshot::from_objects(Vec::new(), 5, 2, None);
        for i in 0..5 {
            let (next, _) = snap.apply(EventType::Added, cm(i, 10), None);
            snap = next;
        }
        let (tx, mut rx) = mpsc::channel(CLIENT_BUFFER);
        assert!(!watcher(tx).backlog(&snap, Backlog::Since(5)).await, "the watch ends after the error");
        let frame = rx.recv().await.expect("one chunk").chunk;
        assert!(rx.recv().await.is_none(), "nothing after the ERROR event");
        let v: serde_json::Value = serde_json::from_slice(&frame).unwrap();
        assert_eq!(v["type"], "ERROR");
        assert_eq!(v["object"]["code"], 410, "{v}");
    }

    /// Run a JSON watch of configmaps with `query` on the paused clock, calling `during`
    /// once the watch is open; returns each event as (type, name or bookmark RV, seconds
    /// since the watch opened) and the seconds at which the stream ended.
    async fn timed(cache: &Arc<KindCache>, query: &str, settings: WatchSettings) -> (Vec<(String, String, u64)>, u64) {
        use http_body_util::BodyExt as _;
        let opts = Options::parse(Some(query)).expect("valid query");
        let resp = watch(cache.clone(), None, opts, Format::Json, View::Object, settings).await.expect("watch opens");
        let start = Instant::now();
        let mut body = resp.into_body();
        let mut out = Vec::new();
        while let Some(frame) = body.frame().await {
            let mut data = frame.expect("frame").into_data().expect("data");
            let n = bytes::Buf::remaining(&data);
            let data = bytes::Buf::copy_to_bytes(&mut data, n);
            for line in data.split(|b| *b == b'\n').filter(|l| !l.is_empty()) {
                let v: serde_json::Value = serde_json::from_slice(line).expect("JSON event");
                let t = v["type"].as_str().unwrap_or_default().to_string();
                let m = &v["object"]["metadata"];
                let what = if t == "BOOKMARK" { m["resourceVersion"].as_str() } else { m["name"].as_str() };
                out.push((t, what.unwrap_or_default().to_string(), start.elapsed().as_secs()));
            }
        }
        (out, start.elapsed().as_secs())
    }

    fn ev(t: &str, what: &str, at: u64) -> (String, String, u64) {
        (t.to_string(), what.to_string(), at)
    }

    #[tokio::test(start_paused = true)]
    async fn bookmarks_come_each_interval_and_two_seconds_before_the_deadline_carrying_progress() {
        let cache = Arc::new(KindCache::new(configmaps(), 10, crate::cache::Limits::default()));
        let settings = WatchSettings { bookmark_interval: Duration::from_secs(5), ..WatchSettings::default() };
        let writer = cache.clone();
        tokio::spawn(async move {
            tokio::time::sleep(Duration::from_secs(1)).await;
            writer.apply(EventType::Added, cm(1, 10));
            tokio::time::sleep(Duration::from_secs(6)).await;
            // Another kind's commit (or an upstream bookmark): progress with no event.
            writer.advance(20, true);
        });
        let q = "watch=1&resourceVersion=10&allowWatchBookmarks=true&timeoutSeconds=12";
        let (events, ended) = timed(&cache, q, settings).await;
        assert_eq!(
            events,
            vec![ev("ADDED", "cm-0001", 1), ev("BOOKMARK", "11", 5), ev("BOOKMARK", "20", 10)],
            "a bookmark each interval, the last one 2 s before the 12 s deadline, at the progress made"
        );
        assert_eq!(ended, 12, "timeoutSeconds ends the stream");
    }

    #[tokio::test(start_paused = true)]
    async fn timeouts_are_the_apiservers_wrapped_go_durations_and_never_panic() {
        use http_body_util::BodyExt as _;
        let cache = Arc::new(KindCache::new(configmaps(), 10, crate::cache::Limits::default()));
        cache.apply(EventType::Added, cm(1, 10));
        // Go computes `time.Duration(timeoutSeconds) * time.Second` in int64: 2^63-1 s wraps
        // to -1 s, 10^10 s to about -267 years (the watch ends at once, nothing sent);
        // 18446744074 s wraps to +290,448,384 ns.
        for (q, lasts) in [
            ("watch=1&timeoutSeconds=9223372036854775807", Duration::ZERO),
            ("watch=1&timeoutSeconds=10000000000", Duration::ZERO),
            ("watch=1&timeoutSeconds=-1", Duration::ZERO),
            ("watch=1&timeoutSeconds=18446744074", Duration::from_nanos(290_448_384)),
        ] {
            let opts = Options::parse(Some(q)).unwrap();
            let started = Instant::now();
            let resp = watch(cache.clone(), None, opts, Format::Json, View::Object, WatchSettings::default()).await.expect("a watch");
            assert_eq!(resp.status(), StatusCode::OK, "{q}");
            let body = resp.into_body().collect().await.unwrap().to_bytes();
            // The paused clock's timers fire on whole milliseconds.
            let took = started.elapsed();
            assert!(took >= lasts && took < lasts + Duration::from_millis(1), "{q}: {took:?}");
            if lasts.is_zero() {
                assert!(body.is_empty(), "{q}: {body:?}");
            }
        }
        // -2^63 s wraps to exactly zero: the apiserver's default, 30 to 60 minutes.
        let opts = Options::parse(Some("watch=1&timeoutSeconds=-9223372036854775808")).unwrap();
        assert_eq!(opts.watch_timeout(), None);
        let started = Instant::now();
        let resp = watch(cache.clone(), None, opts, Format::Json, View::Object, WatchSettings::default()).await.unwrap();
        resp.into_body().collect().await.unwrap();
        assert!((1800..3600).contains(&started.elapsed().as_secs()), "{:?}", started.elapsed());
        // A timeout of 292 years is kept as given (the apiserver's watch lasts that long).
        let opts = Options::parse(Some("watch=1&timeoutSeconds=9223372036")).unwrap();
        assert_eq!(opts.watch_timeout(), Some(Duration::from_secs(9_223_372_036)));
        let resp = watch(cache.clone(), None, opts, Format::Json, View::Object, WatchSettings::default()).await.unwrap();
        let mut body = resp.into_body();
        assert!(body.frame().await.is_some(), "the initial ADDED event");
        let open = tokio::time::timeout(Duration::from_secs(86_400), body.frame()).await;
        assert!(open.is_err(), "still open a day later");
    }

    #[tokio::test(start_paused = true)]
    async fn stalled_watches_hold_at_most_their_buffer_and_all_of_them_the_total() {
        // The case: 1 MB ConfigMaps, clients that stop reading. Each watch queued up
        // to 128 chunks of at least the largest object: ~128 MB per stalled watch.
        let cache = Arc::new(KindCache::new(configmaps(), 10, crate::cache::Limits::default()));
        for i in 0..40 {
            cache.apply(EventType::Added, cm(i, 1 << 20));
        }
        let settings = WatchSettings { buffer_bytes: 4 << 20, buffers: WatchBuffers::new(6 << 20), ..WatchSettings::default() };
        let budget = settings.buffers.clone();
        let mut open = Vec::new();
        for _ in 0..3 {
            let opts = Options::parse(Some("watch=1&timeoutSeconds=600")).unwrap();
            open.push(watch(cache.clone(), None, opts, Format::Json, View::Object, settings.clone()).await.unwrap());
            tokio::time::sleep(Duration::from_millis(10)).await;
            assert!(budget.queued() <= 6 << 20, "{} bytes queued in all", budget.queued());
        }
        assert!(budget.queued() > 4 << 20, "the first two filled their buffers: {}", budget.queued());
        // Nobody reads: at the stall timeout the watchers end and their bytes come back.
        tokio::time::sleep(settings.stall_timeout + Duration::from_secs(1)).await;
        drop(open);
        tokio::time::sleep(Duration::from_millis(10)).await;
        assert_eq!(budget.queued(), 0);
    }

    #[tokio::test(start_paused = true)]
    async fn a_watch_whose_client_reads_gets_everything_through_a_small_buffer() {
        use http_body_util::BodyExt as _;
        let cache = Arc::new(KindCache::new(configmaps(), 10, crate::cache::Limits::default()));
        for i in 0..50 {
            cache.apply(EventType::Added, cm(i, 100_000));
        }
        let settings = WatchSettings { buffer_bytes: 64 * 1024, buffers: WatchBuffers::new(128 * 1024), ..WatchSettings::default() };
        let opts = Options::parse(Some("watch=1&timeoutSeconds=5")).unwrap();
        let body = watch(cache, None, opts, Format::Json, View::Object, settings).await.unwrap().into_body();
        let bytes = body.collect().await.unwrap().to_bytes();
        let added = bytes.split(|b| *b == b'\n').filter(|l| l.starts_with(b"{\"type\":\"ADDED\"")).count();
        assert_eq!(added, 50, "every object, frames larger than the buffer included");
    }

    #[tokio::test(start_paused = true)]
    async fn without_allow_watch_bookmarks_there_are_none_and_the_timeout_still_ends_the_watch() {
        let cache = Arc::new(KindCache::new(configmaps(), 10, crate::cache::Limits::default()));
        let settings = WatchSettings { bookmark_interval: Duration::from_secs(1), ..WatchSettings::default() };
        let (events, ended) = timed(&cache, "watch=1&resourceVersion=10&timeoutSeconds=30", settings).await;
        assert_eq!(events, vec![]);
        assert_eq!(ended, 30);
    }

    #[tokio::test(start_paused = true)]
    async fn watch_list_sends_the_state_then_the_end_bookmark_at_once() {
        let cache = Arc::new(KindCache::new(configmaps(), 10, crate::cache::Limits::default()));
        cache.apply(EventType::Added, cm(1, 10));
        cache.apply(EventType::Added, cm(2, 10));
        cache.advance(15, false);
        let q = "watch=1&sendInitialEvents=true&resourceVersionMatch=NotOlderThan&allowWatchBookmarks=true&timeoutSeconds=3";
        let (events, ended) = timed(&cache, q, WatchSettings::default()).await;
        // The end bookmark carries the progress (15), not the newest object's RV (12); the
        // next periodic bookmark comes 2 s before the 3 s deadline.
        assert_eq!(events, vec![ev("ADDED", "cm-0001", 0), ev("ADDED", "cm-0002", 0), ev("BOOKMARK", "15", 0), ev("BOOKMARK", "15", 1)]);
        assert_eq!(ended, 3);
    }

    #[tokio::test(start_paused = true)]
    async fn a_watch_from_no_rv_or_rv_0_ends_its_initial_events_with_the_initial_events_end_bookmark() {
        // The apiserver defaults these watches to sendInitialEvents=true (a real
        // kube-apiserver v1.36.2 sent `ADDED a` then a BOOKMARK annotated
        // `k8s.io/initial-events-end: "true"` for `?watch=true&resourceVersion=&allowWatchBookmarks=true`).
        use http_body_util::BodyExt as _;
        let cache = Arc::new(KindCache::new(configmaps(), 10, crate::cache::Limits::default()));
        cache.apply(EventType::Added, cm(1, 10));
        cache.advance(15, false);
        for (query, annotated) in [
            ("watch=1&allowWatchBookmarks=true&timeoutSeconds=3", Some("15")),
            ("watch=1&resourceVersion=0&allowWatchBookmarks=true&timeoutSeconds=3", Some("15")),
            // Not without bookmarks, nor from a given RV, nor with an explicit choice.
            ("watch=1&timeoutSeconds=3", None),
            ("watch=1&resourceVersion=10&allowWatchBookmarks=true&timeoutSeconds=3", None),
            ("watch=1&sendInitialEvents=false&resourceVersionMatch=NotOlderThan&allowWatchBookmarks=true&timeoutSeconds=3", None),
        ] {
            let opts = Options::parse(Some(query)).unwrap();
            let resp = watch(cache.clone(), None, opts, Format::Json, View::Object, WatchSettings::default()).await.unwrap();
            let bytes = resp.into_body().collect().await.unwrap().to_bytes();
            let events: Vec<serde_json::Value> =
                bytes.split(|b| *b == b'\n').filter(|l| !l.is_empty()).map(|l| serde_json::from_slice(l).unwrap()).collect();
            let ends: Vec<&str> = events
                .iter()
                .filter(|e| e["object"]["metadata"]["annotations"]["k8s.io/initial-events-end"] == "true")
                .map(|e| e["object"]["metadata"]["resourceVersion"].as_str().unwrap())
                .collect();
            assert_eq!(ends, annotated.into_iter().collect::<Vec<_>>(), "{query}: {events:?}");
            if annotated.is_some() {
                assert_eq!(events[0]["type"], "ADDED", "{query}");
                assert_eq!(events[1]["type"], "BOOKMARK", "{query}: the end bookmark follows the initial events");
            }
        }
    }

    #[test]
    fn pod_bookmark_frames_match_the_golden_stream() {
        let body = crate::testdata::golden("06b-watch-pods-sendinitialevents-labelselector.pb.body");
        let mut pos = 0;
        let mut bookmarks = Vec::new();
        while pos < body.len() {
            let n = u32::from_be_bytes(body[pos..pos + 4].try_into().unwrap()) as usize;
            if body[pos + 6..pos + 14] == *b"BOOKMARK" {
                bookmarks.push(body[pos..pos + 4 + n].to_vec());
            }
            pos += 4 + n;
        }
        assert_eq!(bookmarks.len(), 2);
        assert_eq!(wire::watch_frame("BOOKMARK", "v1", "Pod", &bookmark_pb(61591, true, true)), bookmarks[0]);
        assert_eq!(wire::watch_frame("BOOKMARK", "v1", "Pod", &bookmark_pb(61592, false, true)), bookmarks[1]);
    }
}
