//! The watch loop's behaviour on paused time: backlogs, bookmarks, timeouts, buffers.

use super::frames::bookmark_pb;
use super::*;
use crate::api::resource::Resource;
use crate::api::wire;
use bytes::Bytes;

/// A queued chunk's bytes.
fn bytes(mut c: Chunk) -> Bytes {
    c.copy_to_bytes(c.remaining())
}

fn configmaps() -> Arc<Resource> {
    Arc::new(crate::sim::catalog::resource("configmaps"))
}

/// A ConfigMap whose stored JSON item is about `size` bytes.
fn cm(i: usize, size: usize) -> Object {
    let mut o = Object::bare(crate::cache::object::key("ns", &format!("cm-{i:04}")), 10 + i as u64);
    o.json = Some(Bytes::from(format!(",{{\"metadata\":{{\"name\":\"cm-{i:04}\"}},\"data\":{{\"k\":\"{}\"}}}}", "x".repeat(size))));
    o
}

/// A JSON watch of every namespace's configmaps with `opts`, within `settings`.
fn json(opts: Options, settings: WatchSettings) -> WatchRequest {
    WatchRequest { namespace: None, opts, fmt: Format::Json, view: View::Object, settings }
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
        pending_end: None,
        state: InitialState::default(),
        runs: Arc::default(),
    }
}

#[tokio::test]
async fn a_backlog_is_every_frame_once_in_order_in_chunks_cut_at_frame_boundaries() {
    // Small and large objects, one larger than a chunk, enough for many chunks.
    let objects: Vec<Object> = (0..4000).map(|i| cm(i, if i == 150 { 3 * CHUNK / 2 } else { 50 + (i * 37) % 900 })).collect();
    let snap = Snapshot::from_objects(objects, 500, 10, None);
    let (tx, mut rx) = mpsc::channel(CLIENT_BUFFER);
    // One namespace's WatchList: in chunks (a whole collection's goes in runs, below).
    let mut w = watcher(tx);
    w.namespace = Some("ns".into());
    let mut frames: Vec<Vec<u8>> = Vec::new();
    for o in snap.range(None, None) {
        let f = w.enc.event(EventType::Added, o).expect("held in JSON");
        frames.push([&f.head[..], f.body, f.tail].concat());
    }
    let b = w.enc.bookmark(500, true);
    frames.push(b.head.to_vec());
    let state = w.state.clone();
    let reader = tokio::spawn(async move {
        // Each chunk, and whether the state was marked sent when it was taken.
        let mut taken = Vec::new();
        while let Some(c) = rx.recv().await {
            taken.push((bytes(c.chunk), state.is_sent()));
        }
        taken
    });
    assert!(w.backlog(&snap, Backlog::State { end_bookmark: true, rv: 500 }).await);
    drop(w);
    let taken = reader.await.unwrap();
    // So a gzip encoding drops its compressor at the pause after the state, not at a later event.
    assert_eq!(taken.last().map(|t| t.1), Some(true), "the state is marked sent when its last chunk is taken");
    let chunks: Vec<Bytes> = taken.into_iter().map(|t| t.0).collect();
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

/// A WatchList of a whole collection: its backlog's chunks and the runs they carry.
async fn whole_state(snap: &Snapshot, runs: &Arc<Runs>) -> Vec<Chunk> {
    whole_state_to(snap, runs, InitialState::default()).await
}

/// [`whole_state`] for a stream whose encoding `state` marks.
async fn whole_state_to(snap: &Snapshot, runs: &Arc<Runs>, state: InitialState) -> Vec<Chunk> {
    let (tx, mut rx) = mpsc::channel(CLIENT_BUFFER);
    let mut w = watcher(tx);
    w.runs = runs.clone();
    w.state = state;
    let reader = tokio::spawn(async move {
        let mut taken = Vec::new();
        while let Some(c) = rx.recv().await {
            taken.push(c.chunk);
        }
        taken
    });
    assert!(w.backlog(snap, Backlog::State { end_bookmark: true, rv: snap.rv }).await);
    drop(w);
    reader.await.unwrap()
}

/// A snapshot at RV 20,000 of `n` ConfigMaps of 50 to 950 bytes of data.
fn configmaps_of_many_sizes(n: usize) -> Snapshot {
    Snapshot::from_objects((0..n).map(|i| cm(i, 50 + (i * 37) % 900)), 20_000, 10, None)
}

/// A chunk's bytes, unsent.
fn raw(c: &Chunk) -> &[u8] {
    match c {
        Chunk::One(b) | Chunk::Run(b, _) => b,
        other => panic!("stitched: {other:?}"),
    }
}

fn run_of(c: &Chunk) -> &Arc<dyn crate::body::KeepsDeflated> {
    match c {
        Chunk::Run(_, run) => run,
        other => panic!("not a run: {other:?}"),
    }
}

#[tokio::test]
async fn a_whole_watch_list_goes_in_runs_its_keys_cut_and_the_next_one_finds_them_again() {
    let snap = configmaps_of_many_sizes(10_000);
    let runs: Arc<Runs> = Arc::default();
    let first = whole_state(&snap, &runs).await;

    // Every frame once, in key order, in runs cut after the first frame where `cut_after`
    // says; the end bookmark after them, in a chunk of its own.
    let w = watcher(mpsc::channel(1).0);
    let frames: Vec<(Arc<str>, Vec<u8>)> = snap
        .range(None, None)
        .map(|o| {
            let f = w.enc.event(EventType::Added, o).unwrap();
            (o.key.clone(), [&f.head[..], f.body, f.tail].concat())
        })
        .collect();
    let (last, state) = first.split_last().unwrap();
    assert!(matches!(last, Chunk::One(_)), "the bookmark: {last:?}");
    assert_eq!(raw(last), &w.enc.bookmark(20_000, true).head[..]);
    let mut at = 0;
    for (i, c) in state.iter().enumerate() {
        run_of(c);
        let mut len = 0;
        let mut expected = Vec::new();
        loop {
            let (key, f) = &frames[at];
            at += 1;
            len += f.len();
            expected.extend_from_slice(f);
            if cut_after(key, len) || at == frames.len() {
                break;
            }
        }
        assert_eq!(raw(c), &expected[..], "run {i}");
    }
    assert_eq!(at, frames.len(), "every object once");
    assert!(state.len() > 20, "{} runs", state.len());

    // The same state again: the same runs.
    let again = whole_state(&snap, &runs).await;
    assert_eq!(again.len(), first.len());
    for (a, b) in state.iter().zip(&again) {
        assert!(Arc::ptr_eq(run_of(a), run_of(b)), "the run found again");
    }

    // One object changed: its run is new, the runs after it fall back in step.
    let (changed, _) = snap.apply(EventType::Modified, cm(5000, 200), None);
    let third = whole_state(&changed, &runs).await;
    let holding = state.iter().position(|c| raw(c).windows(9).any(|w| w == b"\"cm-5000\"")).unwrap();
    let found: Vec<bool> = third[..third.len() - 1].iter().map(|c| state.iter().any(|s| Arc::ptr_eq(run_of(s), run_of(c)))).collect();
    assert!(!found[holding], "the changed object's run is new");
    let same = found.iter().filter(|f| **f).count();
    assert!(same + 3 >= state.len(), "{same} of {} runs found again", state.len());
    assert_eq!(runs.held().0, third.len() - 1, "the runs the last pass did not send are dropped");
}

/// A gzipped stream sends a kept run as its deflated bytes, so the watcher does not gather
/// that run's frames; it gathers every other run's, and every run's for a stream that is not
/// (or not yet) gzipped.
#[tokio::test]
async fn a_gzipped_streams_kept_runs_are_queued_without_their_frames() {
    let snap = configmaps_of_many_sizes(3_000);
    let runs: Arc<Runs> = Arc::default();
    let first = whole_state(&snap, &runs).await;
    let state = &first[..first.len() - 1];
    assert!(state.len() > 4, "{} runs", state.len());
    let frames: Vec<Vec<u8>> = state.iter().map(|c| raw(c).to_vec()).collect();
    // Every other run kept, as a stream that deflated it would keep it.
    for c in state.iter().step_by(2) {
        run_of(c).keep(Bytes::from_static(b"deflated"), flate2::Crc::new(), raw(c).len());
        assert!(run_of(c).deflated().is_some());
    }
    let gzipped = InitialState::default();
    gzipped.gzipped();
    for (to, state) in [("gzipped", gzipped), ("plain", InitialState::default())] {
        let again = whole_state_to(&snap, &runs, state).await;
        assert_eq!(again.len(), first.len(), "{to}");
        for (i, c) in again[..again.len() - 1].iter().enumerate() {
            assert!(Arc::ptr_eq(run_of(c), run_of(&first[i])), "{to}: run {i} found again");
            let kept_out = to == "gzipped" && i % 2 == 0;
            let expected: &[u8] = if kept_out { b"" } else { &frames[i] };
            assert_eq!(raw(c), expected, "{to}: run {i}");
        }
    }
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
    let frame = bytes(rx.recv().await.expect("one chunk").chunk);
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
    let resp = watch(cache.clone(), json(opts, settings), None).await.expect("watch opens");
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
        let resp = watch(cache.clone(), json(opts, WatchSettings::default()), None).await.expect("a watch");
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
    let resp = watch(cache.clone(), json(opts, WatchSettings::default()), None).await.unwrap();
    resp.into_body().collect().await.unwrap();
    assert!((1800..3600).contains(&started.elapsed().as_secs()), "{:?}", started.elapsed());
    // A timeout of 292 years is kept as given (the apiserver's watch lasts that long).
    let opts = Options::parse(Some("watch=1&timeoutSeconds=9223372036")).unwrap();
    assert_eq!(opts.watch_timeout(), Some(Duration::from_secs(9_223_372_036)));
    let resp = watch(cache.clone(), json(opts, WatchSettings::default()), None).await.unwrap();
    let mut body = resp.into_body();
    assert!(body.frame().await.is_some(), "the initial ADDED event");
    let open = tokio::time::timeout(Duration::from_secs(86_400), body.frame()).await;
    assert!(open.is_err(), "still open a day later");
}

#[tokio::test(start_paused = true)]
async fn stalled_watches_hold_at_most_their_buffer_and_all_of_them_the_total() {
    // 1 MB ConfigMaps, clients that stop reading. Unbounded by bytes, each watch would
    // queue up to 128 chunks of at least the largest object: ~128 MB per stalled watch.
    let cache = Arc::new(KindCache::new(configmaps(), 10, crate::cache::Limits::default()));
    for i in 0..40 {
        cache.apply(EventType::Added, cm(i, 1 << 20));
    }
    let settings = WatchSettings { buffer_bytes: 4 << 20, buffers: WatchBuffers::new(6 << 20), ..WatchSettings::default() };
    let budget = settings.buffers.clone();
    let mut open = Vec::new();
    for _ in 0..3 {
        let opts = Options::parse(Some("watch=1&timeoutSeconds=600")).unwrap();
        open.push(watch(cache.clone(), json(opts, settings.clone()), None).await.unwrap());
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
    let body = watch(cache, json(opts, settings), None).await.unwrap().into_body();
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
        let resp = watch(cache.clone(), json(opts, WatchSettings::default()), None).await.unwrap();
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

/// A consistent WatchList waiting for a proof of `rv` (at most `wait`): its events as
/// (type, name or bookmark RV, whether annotated initial-events-end, second sent).
async fn proving(cache: &Arc<KindCache>, rv: u64, wait: u64) -> Vec<(String, String, bool, u64)> {
    use http_body_util::BodyExt as _;
    let q = "watch=1&sendInitialEvents=true&resourceVersionMatch=NotOlderThan&allowWatchBookmarks=true&timeoutSeconds=60";
    let opts = Options::parse(Some(q)).unwrap();
    let end_after = Some(EndAfter { rv, wait: Duration::from_secs(wait) });
    let resp = watch(cache.clone(), json(opts, WatchSettings::default()), end_after).await.unwrap();
    let start = Instant::now();
    let mut body = resp.into_body();
    let mut out = Vec::new();
    while let Some(frame) = body.frame().await {
        let mut data = frame.unwrap().into_data().unwrap();
        let n = bytes::Buf::remaining(&data);
        let data = bytes::Buf::copy_to_bytes(&mut data, n);
        for line in data.split(|b| *b == b'\n').filter(|l| !l.is_empty()) {
            let v: serde_json::Value = serde_json::from_slice(line).unwrap();
            let t = v["type"].as_str().unwrap().to_string();
            let m = &v["object"]["metadata"];
            let what = if t == "BOOKMARK" { m["resourceVersion"].as_str() } else { m["name"].as_str() };
            let end = m["annotations"]["k8s.io/initial-events-end"] == "true";
            out.push((t, what.unwrap().to_string(), end, start.elapsed().as_secs()));
        }
        if out.iter().any(|e| e.2) {
            break;
        }
    }
    out
}

#[tokio::test(start_paused = true)]
async fn a_consistent_watch_list_sends_the_state_at_once_and_its_end_bookmark_once_proven() {
    let cache = Arc::new(KindCache::new(configmaps(), 10, crate::cache::Limits::default()));
    cache.apply(EventType::Added, cm(1, 10));
    cache.apply(EventType::Added, cm(2, 10));
    cache.advance(15, false);
    // The upstream was at 18 when the request came: a change at 16 and then the proof (a
    // bookmark at 20) arrive while the state is already sent.
    let c = cache.clone();
    tokio::spawn(async move {
        tokio::time::sleep(Duration::from_secs(1)).await;
        c.apply(EventType::Added, cm(6, 10));
        tokio::time::sleep(Duration::from_secs(1)).await;
        c.advance(20, true);
    });
    let ev = |t: &str, what: &str, end: bool, at: u64| (t.to_string(), what.to_string(), end, at);
    assert_eq!(
        proving(&cache, 18, 5).await,
        vec![
            ev("ADDED", "cm-0001", false, 0),
            ev("ADDED", "cm-0002", false, 0),
            ev("ADDED", "cm-0006", false, 1),
            ev("BOOKMARK", "20", true, 2)
        ]
    );
}

#[tokio::test(start_paused = true)]
async fn a_consistent_watch_list_not_proven_in_time_ends_without_its_end_bookmark() {
    let cache = Arc::new(KindCache::new(configmaps(), 10, crate::cache::Limits::default()));
    cache.apply(EventType::Added, cm(1, 10));
    cache.advance(15, false);
    let ev = |t: &str, what: &str, end: bool, at: u64| (t.to_string(), what.to_string(), end, at);
    assert_eq!(proving(&cache, 30, 3).await, vec![ev("ADDED", "cm-0001", false, 0)], "no bookmark of any kind, and the stream ends");
    // Already proven when the watch starts: the end bookmark follows the state at once.
    assert_eq!(proving(&cache, 15, 3).await, vec![ev("ADDED", "cm-0001", false, 0), ev("BOOKMARK", "15", true, 0)]);
}

#[tokio::test(start_paused = true)]
async fn a_watch_ends_when_kache_shuts_down_even_one_that_starts_after() {
    let cache = Arc::new(KindCache::new(configmaps(), 10, crate::cache::Limits::default()));
    let (ending, rx) = tokio::sync::watch::channel(false);
    let settings = WatchSettings { ending: Some(rx), ..WatchSettings::default() };
    let q = "watch=1&resourceVersion=10&timeoutSeconds=100";
    let stop = tokio::spawn(async move {
        tokio::time::sleep(Duration::from_secs(3)).await;
        ending.send_replace(true);
        ending
    });
    let (events, ended) = timed(&cache, q, settings.clone()).await;
    assert_eq!((events.len(), ended), (0, 3), "the open watch ends at shutdown, not at its timeout");
    let _ending = stop.await.unwrap();
    // One that starts once kache is shutting down ends at once.
    let (_, ended) = timed(&cache, q, settings).await;
    assert_eq!(ended, 0);
}
