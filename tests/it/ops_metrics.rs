//! Operations: the admin listener of `kache serve` (the binary, so its process-wide Prometheus
//! recorder is its own) in front of the simulator.
//! - Under churn and client LIST/GET/WATCH/create traffic, `/metrics` carries every family
//!   declared in `src/telemetry.rs`, with its declared help and type and bounded labels, and
//!   the values move between two scrapes (requests, latency histogram, response bytes,
//!   informer events, window, watches open, watch events sent, a slow watcher ended, watch
//!   restarts after the upstream drops its watches).
//! - `/readyz` is 503 while the preloaded caches have not synced and 200 once they have. The
//!   "not synced yet" state is made deterministic by a proxy between kache and the simulator
//!   that lets discovery through but holds every LIST until the test opens its gate. With the
//!   upstream down, `/readyz` stays 200 within `--serve-stale` with `[-]` lines for
//!   the upstream and every cache, and turns 503 past it (at once with 0); `/livez` and
//!   `/healthz` stay 200 throughout.

use crate::support::ops::{KacheBin, Proxy, Scrape};
use crate::support::{cluster, deadline, eventually, list_rv, start, Next};
use std::collections::BTreeSet;
use std::time::Duration;

/// Families declared in src/telemetry.rs that src/ does not record yet, or records only on
/// an event this test does not provoke: every other declared family must be on the page.
/// (Authn/authz decision-cache metrics land with the security work; add their names here
/// only if they are declared before they are recorded.) `kache_objects_skipped_total`
/// counts objects kache cannot decode, which the simulator does not serve (the feed's own
/// tests count them).
const KNOWN_MISSING: &[&str] = &[kache::telemetry::OBJECTS_SKIPPED];

/// A watch client that reads at most 32 kB every 100 ms: slower than the churn of 16 kB pods,
/// so kache's per-watcher buffers fill and it falls behind the broadcast ring (it still
/// reads, so the watcher gets to notice). Resolves when kache ends the stream, with the bytes
/// read and whether the chunked body was terminated properly (`0\r\n\r\n`) before the close.
async fn slow_watcher(addr: std::net::SocketAddr, rv: u64) -> (usize, bool) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut s = tokio::net::TcpStream::connect(addr).await.expect("connect");
    let req = format!(
        "GET /api/v1/pods?watch=1&resourceVersion={rv} HTTP/1.1\r\nHost: kache\r\nAccept: application/json\r\nConnection: close\r\n\r\n"
    );
    s.write_all(req.as_bytes()).await.expect("send watch");
    let mut buf = vec![0u8; 32 * 1024];
    let (mut total, mut tail) = (0, Vec::new());
    loop {
        match s.read(&mut buf).await {
            Ok(0) | Err(_) => return (total, tail.ends_with(b"\r\n0\r\n\r\n")),
            Ok(n) => {
                total += n;
                tail.extend_from_slice(&buf[..n]);
                let cut = tail.len().saturating_sub(16);
                tail.drain(..cut);
            }
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Label keys a kache metric may carry: bounded sets only (never namespace, name or path).
const BOUNDED_LABELS: &[&str] = &[
    "class", "resource", "group", "encoding", "verb", "source", "code", "view", "reason", "outcome", "le", "version", "commit", "platform",
    "limit", "kind", "state",
];
const VERBS: &[&str] = &["get", "list", "watch", "create", "update", "patch", "delete", "deletecollection", "other"];

fn moved(a: &Scrape, b: &Scrape, name: &str, want: &[(&str, &str)]) -> (f64, f64) {
    (a.sum(name, want), b.sum(name, want))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn metrics_show_every_family_and_move_under_churn_with_clients() {
    // Large pods (16 kB) so a slow client falls behind within seconds.
    let sim = start(&cluster(&[
        "--nodes",
        "20",
        "--pods",
        "600",
        "--namespaces",
        "4",
        "--pod-size",
        "16000",
        "--churn-per-sec",
        "50",
        "--bookmark-interval",
        "1",
    ]))
    .await;
    // A small --watcher-lag so a slow client is ended quickly.
    let k = KacheBin::spawn(&format!("http://{}", sim.addr), &["--watch-bookmark-interval", "1", "--watcher-lag", "16"], &[], 120).await;
    k.readyz_becomes(200, 120).await;

    // First scrape: caches synced, churn flowing, no client of ours yet.
    let s1 = k.scrape().await;
    assert_eq!(s1.sum(kache::telemetry::WATCHES_OPEN, &[("resource", "pods")]), 0.0, "no watch is open yet");
    // Counters an alert takes increase() of are there at 0 before their first change.
    for (name, labels) in [
        (kache::telemetry::RELISTS, vec![("resource", "pods"), ("group", ""), ("encoding", "json"), ("outcome", "replaced")]),
        (kache::telemetry::WATCHERS_SLOW, vec![("resource", "pods"), ("group", "")]),
        (kache::telemetry::WATCH_EVENTS_SENT, vec![("resource", "pods"), ("group", "")]),
        (kache::telemetry::UPSTREAM_FAULTS, vec![("reason", "hung")]),
    ] {
        let found = s1.find(name, &labels);
        assert_eq!(found.iter().map(|s| s.value).collect::<Vec<_>>(), vec![0.0], "{name}{labels:?} present at 0 from the start");
    }

    // Client traffic: cached LISTs (JSON, protobuf, consistent, paged), GETs (found and not),
    // a write passed through, and a watch kept open across the second scrape.
    let api = &k.api;
    let l = api.get_ok("/api/v1/pods?resourceVersion=0").await;
    assert!(l["items"].as_array().is_some_and(|i| !i.is_empty()), "cached LIST has pods");
    let rv = list_rv(&l);
    api.get_ok("/api/v1/pods").await;
    // A consistent read of a quiet kind while leases move the RV: a freshness probe.
    api.get_ok("/api/v1/nodes").await;
    let page = api.get_ok("/api/v1/pods?limit=50").await;
    let cont = page["metadata"]["continue"].as_str().expect("a continue token").to_string();
    api.get_ok(&format!("/api/v1/pods?limit=50&continue={cont}")).await;
    assert_eq!(api.get_pb("/api/v1/nodes?resourceVersion=0").await.status, 200);
    api.get_ok("/api/v1/nodes/node-0001?resourceVersion=0").await;
    // A Table (kubectl get) and a metadata LIST (a metadata informer).
    for accept in ["application/json;as=Table;v=v1;g=meta.k8s.io", "application/json;as=PartialObjectMetadataList;v=v1;g=meta.k8s.io"] {
        let r = api.request(http::Method::GET, "/api/v1/nodes?resourceVersion=0", Some(accept), None, Vec::new()).await;
        assert_eq!(r.status, 200, "{accept}: {}", r.text());
    }
    assert_eq!(api.get("/api/v1/namespaces/default/pods/no-such-pod?resourceVersion=0").await.status, 404);
    api.create_cm("default", "ops-metrics", serde_json::json!({"a": "b"})).await;
    let mut w = api.watch(&format!("/api/v1/pods?watch=1&resourceVersion={rv}&allowWatchBookmarks=true"), "application/json").await;
    assert_eq!(w.status, 200, "watch through kache");
    let end = deadline(30);
    let mut events = 0;
    while events < 5 {
        match w.next_json(end).await {
            Next::Item(ev) => {
                if ev["type"] != "BOOKMARK" {
                    events += 1;
                }
            }
            other => panic!("watch: expected events under churn, got {other:?}"),
        }
    }
    // Keep reading the watch in the background: a client that stops reading under this churn
    // (16 kB pods, --watcher-lag 16) is itself ended as too slow, which is not this check.
    let (stop_reading, mut stopped) = tokio::sync::oneshot::channel::<()>();
    let reader = tokio::spawn(async move {
        loop {
            tokio::select! {
                _ = &mut stopped => return w,
                next = w.next_json(deadline(600)) => if !matches!(next, Next::Item(_)) { return w },
            }
        }
    });
    // A client too slow for the churn is ended (counted), without holding anyone up.
    let slow = tokio::spawn(slow_watcher(k.addr, rv));
    let (read, clean) =
        tokio::time::timeout(Duration::from_secs(120), slow).await.expect("kache ended the slow watcher within 120 s").expect("join");
    assert!(read > 0 && clean, "the slow watcher got events and a properly terminated stream ({read} bytes, clean end: {clean})");
    // The upstream drops every watch (as an apiserver restart would): informers resume.
    sim.sim.disconnect_watchers();
    let kr = &k;
    let s2 = eventually(60, 200, || async move {
        let (code, text) = kr.admin_get("/metrics").await;
        assert_eq!(code, 200, "/metrics: {text}");
        let s = Scrape::parse(&text);
        if s.sum(kache::telemetry::WATCH_RESTARTS, &[]) > 0.0 && s.sum(kache::telemetry::WATCHES_OPEN, &[("resource", "pods")]) >= 1.0 {
            Ok(s)
        } else {
            Err(format!("no upstream watch restart counted:\n{text}"))
        }
    })
    .await;

    // Every declared family is on the page (except the ones src/ does not record yet).
    let declared = kache::telemetry::METRICS;
    let families = s2.families();
    let missing: Vec<&str> = declared.iter().map(|d| d.name).filter(|n| !families.contains(*n) && !KNOWN_MISSING.contains(n)).collect();
    assert!(missing.is_empty(), "families declared in src/telemetry.rs but not on /metrics: {missing:?}\npage has: {families:?}");
    for known in KNOWN_MISSING {
        if families.contains(*known) {
            eprintln!("note: {known} is now recorded; remove it from KNOWN_MISSING");
        }
    }
    let undeclared: Vec<&String> = families.iter().filter(|f| f.starts_with("kache_") && !declared.iter().any(|d| d.name == *f)).collect();
    assert!(undeclared.is_empty(), "families on /metrics not declared in src/telemetry.rs: {undeclared:?}");
    // Each with the help and type it is declared with.
    for d in declared.iter().filter(|d| families.contains(d.name)) {
        assert_eq!(s2.helps.get(d.name).map(String::as_str), Some(d.help), "# HELP of {}", d.name);
        assert_eq!(s2.types.get(d.name).map(String::as_str), Some(d.kind.as_str()), "# TYPE of {}", d.name);
    }

    // Bounded labels only.
    let mut label_keys = BTreeSet::new();
    for s in s2.samples.iter().filter(|s| s.name.starts_with("kache_")) {
        for (key, value) in &s.labels {
            label_keys.insert(key.clone());
            assert!(BOUNDED_LABELS.contains(&key.as_str()), "{}: unbounded label {key}={value}", s.name);
            match key.as_str() {
                "verb" => assert!(VERBS.contains(&value.as_str()), "{}: verb {value}", s.name),
                "source" => assert!(value == "cache" || value == "upstream", "{}: source {value}", s.name),
                "code" => assert!(value.len() == 3 && value.chars().all(|c| c.is_ascii_digit()), "{}: code {value}", s.name),
                "encoding" => assert!(value == "json" || value == "protobuf", "{}: encoding {value}", s.name),
                "limit" => assert!(kache::telemetry::LIMITS.contains(&value.as_str()), "{}: limit {value}", s.name),
                "view" => assert!(value == "metadata" || value == "table", "{}: view {value}", s.name),
                "kind" => assert!(["descriptors", "memory", "other"].contains(&value.as_str()), "{}: kind {value}", s.name),
                "reason" => {
                    let known: &[&str] = match s.name.as_str() {
                        "kache_passthrough_total" => &kache::serve::PassThrough::LABELS,
                        "kache_objects_skipped_total" => &["json", "too_deep", "protobuf", "metadata"],
                        "kache_state_refused_total" => kache::telemetry::STATE_REFUSALS,
                        _ => &["hung", "unreachable", "unready"],
                    };
                    assert!(known.contains(&value.as_str()), "{}: reason {value}", s.name)
                }
                "outcome" => {
                    let known: &[&str] = match s.name.as_str() {
                        "kache_consistent_checks_total" => &["same", "proven", "differed", "failed", "accounted"],
                        "kache_watch_list_runs_total" => &["kept", "deflated"],
                        "kache_state_writes_total" => &["written", "failed"],
                        _ => &["initial", "diffed", "replaced", "failed"],
                    };
                    assert!(known.contains(&value.as_str()), "{}: outcome {value}", s.name)
                }
                _ => {}
            }
        }
    }

    // Histograms, not summaries; the build and the process are described.
    use kache::telemetry as t;
    for h in [t::FRESHNESS_PROBE_SECONDS, t::REQUEST_SECONDS] {
        assert_eq!(s2.types.get(h).map(String::as_str), Some("histogram"), "{h} is a histogram");
    }
    // The consistent LIST of nodes (quiet while pods churn) waited for a probe, which is
    // counted in the histogram once it has ended (its watch lasts about 3 s).
    eventually(30, 200, || async {
        let s = k.scrape().await;
        match s.find(&format!("{}_bucket", t::FRESHNESS_PROBE_SECONDS), &[("resource", "nodes"), ("group", "")]).is_empty() {
            true => Err("no nodes probe in the histogram yet".to_string()),
            false => Ok(()),
        }
    })
    .await;
    let build = s2.find(t::BUILD_INFO, &[("version", env!("CARGO_PKG_VERSION"))]);
    assert_eq!(build.iter().map(|b| b.value).collect::<Vec<_>>(), vec![1.0], "kache_build_info");
    for (name, kind) in [
        ("process_cpu_seconds_total", "counter"),
        ("process_resident_memory_bytes", "gauge"),
        ("process_open_fds", "gauge"),
        ("process_start_time_seconds", "gauge"),
    ] {
        assert_eq!(s2.types.get(name).map(String::as_str), Some(kind), "{name}");
        assert!(s2.sum(name, &[]) > 0.0, "{name} > 0");
    }
    // The allocator's accounting, one series per state (zero here: the tests' process does
    // not allocate with jemalloc, the kache binary does).
    let states: BTreeSet<String> = s2.find(t::ALLOCATOR_BYTES, &[]).iter().filter_map(|s| s.labels.get("state").cloned()).collect();
    assert_eq!(states, ["active", "allocated", "metadata", "resident", "retained"].map(String::from).into(), "kache_allocator_bytes");
    // Cache series carry the API group (core: ""), so `events` and `events.k8s.io` differ.
    assert!(s2.find(t::OBJECTS, &[("resource", "pods"), ("group", "")]).len() == 2, "pods objects per encoding, core group");
    assert!(s2.find(t::WINDOW_BYTES, &[("resource", "pods"), ("encoding", "json")]).iter().all(|s| s.value > 0.0));

    // Requests by verb, source and code.
    for (verb, source, code) in [
        ("list", "cache", "200"),
        ("get", "cache", "200"),
        ("get", "cache", "404"),
        ("watch", "cache", "200"),
        ("create", "upstream", "201"),
    ] {
        assert!(
            s2.sum(t::REQUESTS, &[("verb", verb), ("source", source), ("code", code)]) >= 1.0,
            "no {t} sample for verb={verb} source={source} code={code}",
            t = t::REQUESTS
        );
    }
    // Latency histogram with the explicit buckets, one count per request.
    assert_eq!(s2.types.get(t::REQUEST_SECONDS).map(String::as_str), Some("histogram"), "latency is a histogram: {:?}", s2.types);
    let bucket = format!("{}_bucket", t::REQUEST_SECONDS);
    let les: BTreeSet<String> = s2.find(&bucket, &[]).iter().filter_map(|s| s.labels.get("le").cloned()).collect();
    for le in ["0.0005", "0.005", "0.1", "1", "10", "+Inf"] {
        assert!(les.contains(le), "{bucket}: no le={le} bucket (have {les:?})");
    }
    let count = format!("{}_count", t::REQUEST_SECONDS);
    assert_eq!(s2.sum(&count, &[]), s2.sum(t::REQUESTS, &[]), "every counted request has a latency observation");
    // Cache contents: nodes do not churn, so their count is exact in both encodings.
    for enc in ["json", "protobuf"] {
        assert_eq!(s2.sum(t::OBJECTS, &[("resource", "nodes"), ("encoding", enc)]), 20.0, "nodes cached in {enc}");
        assert!(s2.sum(t::BYTES, &[("resource", "pods"), ("encoding", enc)]) > 0.0, "pod bytes in {enc}");
    }
    let pods = s2.sum(t::OBJECTS, &[("resource", "pods"), ("encoding", "json")]);
    assert!((400.0..=800.0).contains(&pods), "about 600 pods cached, got {pods}");

    // Values that move between the scrapes.
    for (name, want) in [
        (t::REQUESTS, vec![]),
        (count.as_str(), vec![]),
        (t::RESPONSE_BYTES, vec![("verb", "list")]),
        (t::EVENTS_INGESTED, vec![("resource", "pods")]),
        (t::WINDOW_EVENTS, vec![("resource", "pods"), ("encoding", "json")]),
        (t::WINDOW_SECONDS, vec![("resource", "pods"), ("encoding", "json")]),
        (t::WATCHES_OPEN, vec![("resource", "pods")]),
        (t::WATCH_RESTARTS, vec![]),
        (t::WATCH_EVENTS_SENT, vec![("resource", "pods")]),
        (t::WATCHERS_SLOW, vec![("resource", "pods")]),
    ] {
        let (a, b) = moved(&s1, &s2, name, &want);
        assert!(b > a, "{name}{want:?} did not grow between the scrapes: {a} -> {b}");
    }
    assert!(s2.sum(t::RELISTS, &[("resource", "pods")]) >= 2.0, "initial list of pods in two encodings counted");
    assert!(!s2.find(t::RV_LAG, &[("resource", "pods")]).is_empty(), "consistent reads probe the upstream and record the lag");
    let changed = s1.series().into_iter().filter(|(k, v)| s2.series().get(k).is_some_and(|w| w != v)).count();
    assert!(changed >= 10, "only {changed} series changed between the scrapes");

    // Closing the watch brings the gauge back down.
    let _ = stop_reading.send(());
    drop(reader.await.expect("watch reader"));
    let kr = &k;
    eventually(30, 100, || async move {
        let open = kr.scrape().await.sum(t::WATCHES_OPEN, &[("resource", "pods")]);
        if open == 0.0 {
            Ok(())
        } else {
            Err(format!("watches_open is {open} after the client left"))
        }
    })
    .await;
}

/// The preloaded caches of the default `--preload` in both encodings (protobuf where the kind
/// has it: every built-in kind).
fn default_cache_checks() -> Vec<String> {
    let mut v = Vec::new();
    for r in ["configmaps", "namespaces", "nodes", "pods", "services"] {
        for enc in ["json", "protobuf"] {
            v.push(format!("cache {r} {enc}"));
        }
    }
    v
}

/// The check lines of a verbose `/readyz` body (`[+]name detail` or `[-]name detail`).
fn check_lines(body: &str) -> Vec<&str> {
    body.lines().filter(|l| l.starts_with("[+]") || l.starts_with("[-]")).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn readyz_is_503_before_the_preloaded_caches_sync_and_200_after() {
    let sim = start(&cluster(&["--nodes", "10", "--pods", "200", "--namespaces", "3", "--bookmark-interval", "1"])).await;
    // Discovery passes, every LIST waits at the closed gate: kache starts and binds, and its
    // caches cannot sync until the test says so.
    let proxy = Proxy::start(&sim.addr, false).await;
    let k = KacheBin::spawn(&proxy.url(), &[], &[], 120).await;
    for path in ["/livez", "/healthz"] {
        assert_eq!(k.admin_get(path).await.0, 200, "{path} while syncing");
    }
    let (code, body) = k.admin_get("/readyz").await;
    assert_eq!(code, 503, "/readyz before sync: {body}");
    assert!(body.contains("readyz check failed"), "{body}");
    let (code, verbose) = k.admin_get("/readyz?verbose").await;
    assert_eq!(code, 503);
    let checks = check_lines(&verbose);
    let expect = default_cache_checks();
    for e in &expect {
        assert!(
            verbose.lines().any(|l| l.starts_with("[-]") && l.contains(&format!("{e} not synced"))),
            "/readyz?verbose lacks a failing check for {e}:\n{verbose}"
        );
    }
    assert_eq!(checks.len(), expect.len() + 1, "the upstream and one check per preloaded cache: {checks:?}");
    assert_eq!(checks[0], "[+]upstream ok", "the upstream answers (only the LISTs are held): {checks:?}");
    assert!(proxy.seen().iter().any(|c| c.path.starts_with("/api/v1/pods?limit=")), "kache asked for the pod list (held at the gate)");
    // Still not ready while the lists are held: nothing but the gate decides.
    assert_eq!(k.admin_get("/readyz").await.0, 503);

    proxy.open_gate();
    let verbose = k.readyz_becomes(200, 120).await;
    for e in &expect {
        assert!(
            verbose.lines().any(|l| l.starts_with("[+]") && l.contains(e) && l.ends_with(" ok")),
            "/readyz?verbose after sync lacks a passing {e}:\n{verbose}"
        );
    }
    assert!(verbose.contains("readyz check passed"), "{verbose}");

    // The upstream goes away: streams are cut and every request gets 503. kache serves from
    // memory (within --serve-stale, 300 s by default) and stays ready, with the
    // fault shown: the health monitor's own finding (its probe of the upstream's /readyz
    // gets the test proxy's 503) and every cache's informer.
    proxy.set_down(true);
    let k = &k;
    let (code, verbose) = crate::support::eventually(30, 100, || async move {
        let (code, v) = k.admin_get("/readyz?verbose").await;
        let lines = check_lines(&v);
        if lines[0].starts_with("[-]upstream unready for ") && lines[1..].iter().all(|l| l.contains("upstream unreachable")) {
            Ok((code, v))
        } else {
            Err(v)
        }
    })
    .await;
    assert_eq!(code, 200, "ready while serving from memory:\n{verbose}");
    assert!(check_lines(&verbose)[0].contains("/readyz answered 503: upstream down (test proxy)"), "{verbose}");
    assert!(check_lines(&verbose).iter().all(|l| l.contains("serving from memory for up to")), "{verbose}");
    let scrape = k.scrape().await;
    assert_eq!(scrape.sum("kache_upstream_up", &[]), 0.0, "kache_upstream_up with the upstream down");
    assert_eq!(scrape.sum("kache_upstream_faults_total", &[("reason", "unready")]), 1.0, "found down once, counted once");
    assert_eq!(scrape.sum("kache_upstream_faults_total", &[("reason", "hung")]), 0.0);
    for path in ["/livez", "/healthz"] {
        assert_eq!(k.admin_get(path).await.0, 200, "{path} with the upstream down (liveness must not restart kache for it)");
    }
}

/// After the upstream comes back, `/readyz` must return to 200 once the informers have
/// resumed: `Feed::healthy` is set when a resumed watch is answered, not only when a watch
/// request *ends* (`follow`), which would leave it false until that watch timed out (minutes)
/// and the replica unready that long.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn readyz_recovers_when_the_upstream_comes_back() {
    let sim = start(&cluster(&["--nodes", "10", "--pods", "200", "--namespaces", "3", "--bookmark-interval", "1"])).await;
    let proxy = Proxy::start(&sim.addr, true).await;
    // No serving from memory: unready as soon as the upstream is.
    let k = KacheBin::spawn(&proxy.url(), &["--serve-stale", "0"], &[], 120).await;
    k.readyz_becomes(200, 120).await;
    proxy.set_down(true);
    k.readyz_becomes(503, 60).await;
    proxy.set_down(false);
    let verbose = k.readyz_becomes(200, 90).await;
    assert!(!verbose.contains("[-]"), "{verbose}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn debug_cache_kache_status_and_the_access_log() {
    let sim = start(&cluster(&["--nodes", "5", "--pods", "40", "--namespaces", "3", "--bookmark-interval", "1"])).await;
    let k = KacheBin::spawn(
        &format!("http://{}", sim.addr),
        &["--preload", "pods,nodes", "--preload-encodings", "json", "--access-log", "--log-format", "json"],
        &[],
        120,
    )
    .await;
    k.readyz_becomes(200, 120).await;
    // A watch held open, so the report counts it.
    let watch = k.api.watch("/api/v1/pods?watch=1&resourceVersion=0", "application/json").await;
    assert_eq!(watch.status, 200);
    let report: serde_json::Value = eventually(30, 100, || async {
        let (code, text) = k.admin_get("/debug/cache").await;
        let v: serde_json::Value = serde_json::from_str(&text).map_err(|e| format!("{code}: {e}: {text}"))?;
        let pods = v["caches"].as_array().and_then(|c| c.iter().find(|c| c["resource"] == "pods").cloned()).ok_or("no pods cache")?;
        if pods["watches"].as_u64() >= Some(1) {
            Ok(v)
        } else {
            Err(format!("watch not counted yet: {pods}"))
        }
    })
    .await;
    assert_eq!(report["upstream"]["up"], true);
    let caches = report["caches"].as_array().unwrap();
    let pods = caches.iter().find(|c| c["resource"] == "pods" && c["encoding"] == "json").expect("pods json");
    assert_eq!((pods["group"].as_str(), pods["synced"].as_bool(), pods["objects"].as_u64()), (Some(""), Some(true), Some(40)));
    assert!(pods["bytes"].as_u64() > Some(0) && pods["resourceVersion"].as_str().is_some_and(|rv| rv.parse::<u64>().is_ok()));
    assert!(pods["window"]["oldestResourceVersion"].is_string() && pods["staleSeconds"].as_f64() == Some(0.0), "{pods}");
    assert!(caches.iter().any(|c| c["resource"] == "nodes" && c["objects"] == 5));
    drop(watch);
    // A read kache passes through: /version is no resource.
    assert_eq!(k.api.get("/version").await.status, 200);

    // `kache status` prints it as a table.
    let admin = k.admin_api.base.trim_start_matches("http://").to_string();
    let out = tokio::task::spawn_blocking(move || {
        std::process::Command::new(env!("CARGO_BIN_EXE_kache"))
            .args(["status", "--admin", &admin])
            .env_remove("KUBECONFIG")
            .output()
            .unwrap()
    })
    .await
    .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "kache status: {}", String::from_utf8_lossy(&out.stderr));
    eprintln!("{text}");
    assert!(text.starts_with("upstream: up"), "{text}");
    let row = text.lines().find(|l| l.starts_with("pods ")).unwrap_or_else(|| panic!("no pods row:\n{text}"));
    let cells: Vec<&str> = row.split_whitespace().collect();
    assert_eq!(&cells[..4], &["pods", "json", "true", "40"], "{row}");
    assert!(text.lines().next().is_some() && text.contains("RESOURCE") && text.contains("WATCHES"));
    // The watch from cache, /version passed through as no resource.
    let counts = text.lines().find(|l| l.starts_with("answered from cache: ")).unwrap_or_else(|| panic!("no counts:\n{text}"));
    assert!(counts.contains("passed through: ") && counts.contains("non_resource 1"), "{counts}");
    assert!(counts.trim_start_matches("answered from cache: ").split(';').next().unwrap().parse::<u64>().unwrap() >= 1, "{counts}");
    // --access-log: one JSON line per request, the watch among them (answered from cache,
    // as system:anonymous: the test's kache allows anonymous clients) and /version (passed
    // through, with its reason).
    let access: Vec<serde_json::Value> = eventually(30, 100, || async {
        let lines: Vec<serde_json::Value> = k
            .stderr()
            .lines()
            .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
            .filter(|v| v["target"] == "kache::access")
            .collect();
        let both = ["watch", "get"].iter().all(|verb| lines.iter().any(|v| v["fields"]["verb"] == *verb));
        if both {
            Ok(lines)
        } else {
            Err(format!("no access lines for the watch and /version yet: {lines:?}"))
        }
    })
    .await;
    let fields = |verb: &str| {
        let f = &access.iter().find(|v| v["fields"]["verb"] == verb).unwrap()["fields"];
        let s = |k: &str| f[k].as_str().map(str::to_string);
        (
            s("user"),
            s("resource"),
            s("group"),
            s("namespace"),
            s("source"),
            s("reason"),
            f["code"].as_u64(),
            f["seconds"].as_f64().is_some(),
        )
    };
    let anonymous = Some("system:anonymous".to_string());
    let some = |s: &str| Some(s.to_string());
    assert_eq!(fields("watch"), (anonymous.clone(), some("pods"), some(""), some(""), some("cache"), some(""), Some(200), true));
    assert_eq!(fields("get"), (anonymous, some(""), some(""), some(""), some("upstream"), some("non_resource"), Some(200), true));
    // A kache that is not there: an error, not a table.
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_kache")).args(["status", "--admin", "127.0.0.1:1"]).output().unwrap();
    assert_eq!(out.status.code(), Some(1), "{}", String::from_utf8_lossy(&out.stderr));
}

/// The bytes of a WatchList of every pod in JSON (gzipped when `gzip`), read up to its
/// initial-events-end bookmark.
async fn watch_list_of_pods(api: &crate::support::Api, gzip: bool) -> Vec<u8> {
    use http_body_util::BodyExt as _;
    let path = "/api/v1/pods?watch=1&sendInitialEvents=true&resourceVersionMatch=NotOlderThan&allowWatchBookmarks=true";
    let mut req = http::Request::get(format!("{}{path}", api.base)).header("accept", "application/json");
    if gzip {
        req = req.header("accept-encoding", "gzip");
    }
    let mut resp = api.client.request(req.body(http_body_util::Full::new(bytes::Bytes::new())).unwrap()).await.expect("response");
    assert_eq!(resp.status(), 200);
    assert_eq!(resp.headers().get("content-encoding").is_some(), gzip);
    let (mut raw, mut gunzip, mut text) = (Vec::new(), crate::support::gzip::Gunzip::new(), String::new());
    loop {
        let frame = resp.body_mut().frame().await.expect("a frame").unwrap().into_data().unwrap();
        raw.extend_from_slice(&frame);
        if gzip {
            gunzip.push(&frame);
            text.extend(gunzip.events().iter().map(|e| format!("{e}\n")));
        } else {
            text = String::from_utf8(raw.clone()).unwrap();
        }
        if text.contains("k8s.io/initial-events-end") {
            return raw;
        }
    }
}

/// Each event's type and name, from JSON lines.
fn named(text: &str) -> Vec<(String, String)> {
    text.lines()
        .map(|l| {
            let e: serde_json::Value = serde_json::from_str(l).unwrap();
            (e["type"].as_str().unwrap().to_string(), e["object"]["metadata"]["name"].as_str().unwrap_or("").to_string())
        })
        .collect()
}

/// A WatchList of a whole collection to a client that accepts gzip sends its initial events
/// in runs, each deflated on its own and kept (`cache::deflated`): a second WatchList sends
/// the runs the first deflated instead of deflating them again. Python's zlib (not the
/// deflater that wrote them) reads both streams to the events of an uncompressed WatchList.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_second_whole_watch_list_sends_the_runs_the_first_deflated() {
    use kache::telemetry::WATCH_LIST_RUNS;
    let sim = start(&cluster(&["--nodes", "20", "--pods", "400", "--namespaces", "4", "--bookmark-interval", "1"])).await;
    let k = KacheBin::spawn(&format!("http://{}", sim.addr), &["--preload", "pods"], &[], 60).await;
    k.readyz_becomes(200, 60).await;
    let plain = String::from_utf8(watch_list_of_pods(&k.api, false).await).unwrap();
    let expected = named(&plain);
    assert_eq!(expected.iter().filter(|(t, _)| t == "ADDED").count(), 400);

    let runs = |s: &Scrape, outcome: &str| s.sum(WATCH_LIST_RUNS, &[("outcome", outcome)]);
    let mut decoded = Vec::new();
    let mut scrapes = vec![k.scrape().await];
    for _ in 0..2 {
        let raw = watch_list_of_pods(&k.api, true).await;
        let file = tempfile::NamedTempFile::new().unwrap();
        std::fs::write(file.path(), &raw).unwrap();
        let script = "import sys, zlib; sys.stdout.buffer.write(zlib.decompressobj(31).decompress(open(sys.argv[1], 'rb').read()))";
        let path = file.path().to_owned();
        let out = tokio::task::spawn_blocking(move || std::process::Command::new("python3").args(["-c", script]).arg(path).output())
            .await
            .unwrap()
            .expect("python3 runs");
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        decoded.push(named(&String::from_utf8(out.stdout).unwrap()));
        scrapes.push(k.scrape().await);
    }
    for (i, d) in decoded.iter().enumerate() {
        assert_eq!(d, &expected, "WatchList {i}: zlib reads the events of the uncompressed WatchList");
    }
    let [before, first, second] = &scrapes[..] else { unreachable!() };
    let deflated = runs(first, "deflated") - runs(before, "deflated");
    assert!(deflated >= 3.0, "the first WatchList's runs: {deflated}");
    assert_eq!(runs(first, "kept"), runs(before, "kept"), "nothing to send from before the first");
    assert_eq!(runs(second, "kept") - runs(first, "kept"), deflated, "the second sends every run the first deflated");
    assert_eq!(runs(second, "deflated"), runs(first, "deflated"), "and deflates none again");
}

/// The `[-]cache pods json ...` line of a verbose `/readyz`, and the count of objects it says
/// the pods' list has brought so far (`None` when it says no count).
fn pods_listing(verbose: &str) -> (String, Option<u64>) {
    let line = verbose.lines().find(|l| l.contains("cache pods json")).unwrap_or_default().to_string();
    let count = line
        .strip_prefix("[-]cache pods json not synced: listing, ")
        .and_then(|rest| rest.split(" objects (").next())
        .and_then(|n| n.replace(',', "").parse().ok());
    (line, count)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn readyz_and_status_say_how_many_objects_a_loading_list_has_brought_so_far() {
    use crate::support::{kache_loading, Api};
    let sim = start(&cluster(&["--nodes", "5", "--pods", "1200", "--namespaces", "3"])).await;
    // The pods' list (kache's one unpaged LIST of them) passes its first 256 KiB, about 55
    // pods, and holds the rest: the initial list is under way and cannot end.
    let proxy = Proxy::start(&sim.addr, true).await;
    proxy.hold_body("/api/v1/pods", 256 * 1024);
    let up = kache::app::plain_upstream(&proxy.url()).unwrap();
    let k = kache_loading(up, &["--preload", "pods", "--preload-encodings", "json"]).await;
    let admin = kache::app::start_admin(k.serving.serve.clone(), "127.0.0.1:0", None).await.expect("admin starts");
    let admin = Api::new(&admin.to_string());
    let admin = &admin;
    let proxy = &proxy;
    // Once the held part is in, /readyz and /debug/cache (`kache status`) name the same count.
    let (line, n, table) = eventually(30, 20, || async move {
        let r = admin.get("/readyz?verbose").await;
        let (line, n) = pods_listing(&r.text());
        let report = admin.get_ok("/debug/cache").await;
        let pods = report["caches"].as_array().and_then(|c| c.iter().find(|c| c["resource"] == "pods").cloned()).unwrap_or_default();
        match n {
            Some(n) if n > 0 && proxy.body_held() && pods["loading"]["objects"].as_u64() == Some(n) => {
                assert_eq!(r.status, 503, "not ready while the pods load: {}", r.text());
                assert_eq!((pods["loading"]["state"].as_str(), pods["synced"].as_bool()), (Some("listing"), Some(false)), "{pods}");
                assert!(pods["loading"]["bytes"].as_u64() > Some(0), "{pods}");
                Ok((line, n, kache::app::status::table(&report)))
            }
            _ => Err(format!("{line}; /debug/cache: {pods}")),
        }
    })
    .await;
    assert!(n < 1200, "only the held list's first part has come: {line}");
    assert!(line.ends_with(" MiB) so far"), "{line}");
    let row = table.lines().find(|l| l.starts_with("pods ")).unwrap_or_default();
    let (cells, so_far) = (row.split_whitespace().collect::<Vec<_>>(), kache::cache::feed::thousands(n));
    assert_eq!(cells[..5], ["pods", "json", "listing", so_far.as_str(), "so"], "kache status shows the count so far:\n{table}");

    // The rest comes: the cache syncs and the check passes.
    proxy.release();
    let verbose = eventually(60, 50, || async move {
        let r = admin.get("/readyz?verbose").await;
        if r.status == 200 {
            Ok(r.text())
        } else {
            Err(r.text())
        }
    })
    .await;
    assert!(verbose.lines().any(|l| l == "[+]cache pods json ok"), "{verbose}");
}
