//! WATCH: start from the window (resume), from the current state (synthetic ADDED events,
//! `sendInitialEvents` with its initial-events-end bookmark), or with a 410 ERROR event; then
//! follow the cache's broadcast, turning selector transitions into ADDED/DELETED. A watcher
//! that falls behind the broadcast ring is ended, never waited for.

use super::{candidates, list::reach, selected};
use crate::body::{channel, respond, Body};
use crate::cache::{KindCache, Message};
use crate::object::Object;
use crate::query::{Format, Options};
use crate::resource::Resource;
use crate::status::Status;
use crate::window::{Event, EventType};
use crate::wire;
use bytes::{Bytes, BytesMut};
use http::{Response, StatusCode};
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::{broadcast, mpsc};
use tokio::time::{sleep_until, Instant};

/// Timing of watches.
#[derive(Debug, Clone, Copy)]
pub struct WatchSettings {
    /// Interval between periodic bookmarks.
    pub bookmark_interval: Duration,
    /// A bookmark is also sent this long before `timeoutSeconds` ends the watch.
    pub bookmark_before_end: Duration,
    /// A client that accepts no data for this long is ended (its watcher stops holding
    /// events for it); it resumes from its last RV like after any disconnect.
    pub stall_timeout: Duration,
}

impl Default for WatchSettings {
    fn default() -> Self {
        WatchSettings { bookmark_interval: Duration::from_secs(60), bookmark_before_end: Duration::from_secs(2), stall_timeout: Duration::from_secs(15) }
    }
}

/// Chunks in flight to one client before its watcher stops reading the broadcast.
const CLIENT_BUFFER: usize = 256;

/// Watch frames are joined into chunks of up to this many bytes before they are queued for
/// the client: one channel message and one write per chunk instead of three per event
/// (a WatchList of 30,000 pods was 90,000 of each). Small enough that a client's queue of
/// [`CLIENT_BUFFER`] chunks stays a few MB.
const CHUNK: usize = 32 * 1024;

/// Answer a WATCH. Returns at once with a streaming body.
pub async fn watch(cache: Arc<KindCache>, namespace: Option<String>, opts: Options, fmt: Format, settings: WatchSettings) -> Result<Response<Body>, Status> {
    opts.fields.validate(&cache.resource.selectable_fields()).map_err(|e| Status::bad_request(e.to_string()))?;
    if let Some(n) = opts.rv.filter(|n| *n > 0) {
        reach(&cache, n).await?;
    }
    let enc = Encoder::new(cache.resource.clone(), fmt);
    let (tx, rx) = mpsc::channel(CLIENT_BUFFER);
    let resp = respond(StatusCode::OK, enc.content_type(), channel(rx));
    let index = cache.resource.index.as_deref();
    let rx_events = match index.and_then(|f| opts.fields.exact(f)) {
        Some(value) => cache.subscribe_indexed(value),
        None => cache.subscribe(),
    };
    let (start_rv, snap) = cache.current();
    let mut initial: Vec<Bytes> = Vec::new();
    let initial_state = match (opts.rv, opts.send_initial_events) {
        (_, Some(send)) => send,
        (None | Some(0), None) => true,
        (Some(_), None) => false,
    };
    let ns = namespace.as_deref();
    if initial_state {
        for o in candidates(&snap, ns, &opts, index, None) {
            enc.event(&mut initial, EventType::Added, o);
        }
        if opts.send_initial_events == Some(true) && opts.bookmarks {
            enc.bookmark(&mut initial, start_rv, true);
        }
    } else if let Some(from) = opts.rv {
        match snap.window.since(from) {
            Ok(events) => {
                for ev in events {
                    transition(&enc, &mut initial, ev, ns, &opts);
                }
            }
            Err(too_old) => {
                enc.error(&mut initial, &Status::too_old(from, too_old.oldest));
                tokio::spawn(async move {
                    for b in initial {
                        let _ = tx.send(b).await;
                    }
                });
                return Ok(resp);
            }
        }
    }
    // `timeoutSeconds=0` means "no timeout given": the apiserver then picks its default too.
    let timeout = opts.timeout_seconds.filter(|s| *s > 0).map_or_else(default_timeout, Duration::from_secs);
    let w = Watcher { enc, opts, namespace, settings, tx, last_rv: start_rv.max(snap.rv) };
    tokio::spawn(w.run(initial, rx_events, snap.rv, Instant::now() + timeout));
    Ok(resp)
}

/// The apiserver's default watch length: random between 30 and 60 minutes.
fn default_timeout() -> Duration {
    Duration::from_secs(1800 + rand::random::<u64>() % 1800)
}

/// Send what a filtered watcher sees of one event.
fn transition(enc: &Encoder, out: &mut Vec<Bytes>, ev: &Event, ns: Option<&str>, opts: &Options) {
    let now = selected(&ev.object, ns, opts);
    match ev.kind {
        EventType::Added if now => enc.event(out, EventType::Added, &ev.object),
        EventType::Deleted if now => enc.event(out, EventType::Deleted, &ev.object),
        EventType::Modified => {
            let before = ev.prev.as_ref().is_some_and(|p| selected(p, ns, opts));
            match (before, now) {
                (true, true) => enc.event(out, EventType::Modified, &ev.object),
                (false, true) => enc.event(out, EventType::Added, &ev.object),
                (true, false) => {
                    let gone = ev.prev_at_rv.as_ref().or(ev.prev.as_ref()).unwrap_or(&ev.object);
                    enc.event(out, EventType::Deleted, gone)
                }
                (false, false) => {}
            }
        }
        _ => {}
    }
}

struct Watcher {
    enc: Encoder,
    opts: Options,
    namespace: Option<String>,
    settings: WatchSettings,
    tx: mpsc::Sender<Bytes>,
    /// RV up to which this watcher has delivered everything (basis of bookmarks).
    last_rv: u64,
}

impl Watcher {
    /// Hand frames to the client's connection, joined into chunks of up to [`CHUNK`] bytes;
    /// false when the client is gone or has accepted nothing for the stall timeout (then it
    /// is ended as a slow watcher).
    async fn send(&self, pieces: Vec<Bytes>) -> bool {
        // Sized once, so a chunk is not regrown on its way to CHUNK bytes.
        let room = pieces.iter().map(Bytes::len).sum::<usize>().min(CHUNK);
        let mut chunk = BytesMut::with_capacity(room);
        for p in &pieces {
            if !chunk.is_empty() && chunk.len() + p.len() > CHUNK && !self.queue(std::mem::replace(&mut chunk, BytesMut::with_capacity(room)).freeze()).await {
                return false;
            }
            chunk.extend_from_slice(p);
        }
        chunk.is_empty() || self.queue(chunk.freeze()).await
    }

    async fn queue(&self, chunk: Bytes) -> bool {
        match tokio::time::timeout(self.settings.stall_timeout, self.tx.send(chunk)).await {
            Ok(Ok(())) => true,
            Ok(Err(_)) => false,
            Err(_) => {
                metrics::counter!(crate::telemetry::WATCHERS_SLOW, "resource" => self.enc.res.plural.clone()).increment(1);
                tracing::debug!(resource = %self.enc.res.plural, "ending a watcher whose client stopped reading");
                false
            }
        }
    }

    async fn run(mut self, initial: Vec<Bytes>, mut rx: broadcast::Receiver<Message>, snap_rv: u64, end: Instant) {
        if !self.send(initial).await {
            return;
        }
        let sent = metrics::counter!(crate::telemetry::WATCH_EVENTS_SENT, "resource" => self.enc.res.plural.clone());
        let early = end.checked_sub(self.settings.bookmark_before_end).unwrap_or(end);
        let mut next_bookmark = (Instant::now() + self.settings.bookmark_interval).min(early);
        loop {
            let msg = tokio::select! {
                m = rx.recv() => m,
                _ = sleep_until(next_bookmark), if self.opts.bookmarks => {
                    let mut out = Vec::new();
                    self.enc.bookmark(&mut out, self.last_rv, false);
                    if !self.send(out).await { return; }
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
            let mut out = Vec::new();
            match msg {
                Ok(Message::Event(ev)) if ev.rv > snap_rv => {
                    transition(&self.enc, &mut out, &ev, self.namespace.as_deref(), &self.opts);
                    self.last_rv = ev.rv;
                    if !out.is_empty() {
                        sent.increment(1);
                    }
                }
                Ok(Message::Event(_)) => continue,
                Ok(Message::Progress(p)) => {
                    self.last_rv = self.last_rv.max(p);
                    continue;
                }
                // Relisted state, a watcher too slow for the ring, or a closed cache: end the
                // stream so the client resumes from its last RV (or relists on 410).
                Err(broadcast::error::RecvError::Lagged(_)) => {
                    metrics::counter!(crate::telemetry::WATCHERS_SLOW, "resource" => self.enc.res.plural.clone()).increment(1);
                    return;
                }
                Ok(Message::Reset) | Err(_) => return,
            }
            if !out.is_empty() && !self.send(out).await {
                return;
            }
        }
    }
}

/// Writes watch events of one resource in one encoding.
struct Encoder {
    res: Arc<Resource>,
    fmt: Format,
    /// `{"type":"<T>","object":{"kind":...,"apiVersion":...,` for ADDED, MODIFIED, DELETED,
    /// built once per watch instead of once per event.
    json_heads: [Bytes; 3],
    /// `res.api_version()`, built once per watch.
    api_version: String,
}

impl Encoder {
    fn new(res: Arc<Resource>, fmt: Format) -> Encoder {
        let api_version = res.api_version();
        let head = |t: EventType| Bytes::from(format!("{{\"type\":\"{}\",\"object\":{{\"kind\":\"{}\",\"apiVersion\":\"{api_version}\",", t.as_str(), res.kind));
        let json_heads = [head(EventType::Added), head(EventType::Modified), head(EventType::Deleted)];
        Encoder { res, fmt, json_heads, api_version }
    }

    fn content_type(&self) -> &'static str {
        match self.fmt {
            Format::Json => "application/json",
            Format::Protobuf => wire::PROTOBUF_WATCH,
        }
    }

    fn event(&self, out: &mut Vec<Bytes>, kind: EventType, o: &Object) {
        let t = kind.as_str();
        match self.fmt {
            Format::Json => {
                let Some(j) = &o.json else { return };
                let head = self.json_heads[kind as usize].clone();
                out.extend([head, j.slice(2..), Bytes::from_static(b"}\n")]);
            }
            Format::Protobuf => {
                let Some(m) = o.pb_message() else { return };
                let prefix = wire::watch_frame_prefix(t, &self.api_version, &self.res.kind, m.len());
                out.extend([Bytes::from(prefix), m, Bytes::from_static(wire::UNKNOWN_SUFFIX)]);
            }
        }
    }

    fn bookmark(&self, out: &mut Vec<Bytes>, rv: u64, initial_end: bool) {
        let pod = self.res.group.is_empty() && self.res.kind == "Pod";
        match self.fmt {
            Format::Json => {
                let ann = if initial_end { ",\"annotations\":{\"k8s.io/initial-events-end\":\"true\"}" } else { "" };
                let tail = if pod { ",\"spec\":{\"containers\":null},\"status\":{}" } else { "" };
                out.push(Bytes::from(format!(
                    "{{\"type\":\"BOOKMARK\",\"object\":{{\"kind\":\"{}\",\"apiVersion\":\"{}\",\"metadata\":{{\"resourceVersion\":\"{rv}\"{ann}}}{tail}}}}}\n",
                    self.res.kind,
                    self.api_version
                )));
            }
            Format::Protobuf => {
                let msg = bookmark_pb(rv, initial_end, pod);
                out.push(wire::watch_frame("BOOKMARK", &self.api_version, &self.res.kind, &msg));
            }
        }
    }

    fn error(&self, out: &mut Vec<Bytes>, status: &Status) {
        match self.fmt {
            Format::Json => {
                let mut line = b"{\"type\":\"ERROR\",\"object\":".to_vec();
                line.extend_from_slice(&status.to_json());
                line.extend_from_slice(b"}\n");
                out.push(Bytes::from(line));
            }
            Format::Protobuf => out.push(wire::watch_frame("ERROR", "v1", "Status", &status.to_pb())),
        }
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
        const SPEC: &[u8] = &[
            0x1a, 0, 0x32, 0, 0x42, 0, 0x4a, 0, 0x52, 0, 0x58, 0, 0x60, 0, 0x68, 0, 0x82, 1, 0, 0x8a, 1, 0, 0x9a, 1, 0, 0xc2, 1, 0,
        ];
        const STATUS: &[u8] = &[0x0a, 0, 0x1a, 0, 0x22, 0, 0x2a, 0, 0x32, 0, 0x4a, 0, 0x5a, 0, 0x72, 0, 0x88, 1, 0];
        wire::put_bytes(&mut msg, 2, SPEC);
        wire::put_bytes(&mut msg, 3, STATUS);
    }
    msg
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pod_bookmark_frames_match_the_golden_stream() {
        let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/../shared/golden");
        let body = std::fs::read(format!("{dir}/06b-watch-pods-sendinitialevents-labelselector.pb.body")).unwrap();
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
        assert_eq!(wire::watch_frame("BOOKMARK", "v1", "Pod", &bookmark_pb(61591, true, true)).to_vec(), bookmarks[0]);
        assert_eq!(wire::watch_frame("BOOKMARK", "v1", "Pod", &bookmark_pb(61592, false, true)).to_vec(), bookmarks[1]);
    }
}
