//! The opt-in tier: kache in front of a real kube-apiserver v1.36.2 with etcd (the team's
//! `real-apiserver` scripts, kept outside this repository, build and run one). Runs when `KACHE_REAL_KUBECONFIG` names its kubeconfig
//! (`KACHE_REAL_CONTEXT` picks a context, default the current one; it needs the rights of
//! `admin`); each test says it is skipped otherwise. CI has no such apiserver.
//!
//! ```sh
//! KACHE_REAL_KUBECONFIG=~/real-apiserver/kubeconfig KACHE_REAL_CONTEXT=admin \
//!   cargo test --release --test it real_ -- --test-threads 1 --nocapture
//! ```
//!
//! Here: consistent reads, watches and pass-through against the real apiserver, and a
//! black-holed one; `real_views` has the metadata views, `real_kubectl` kubectl's printing,
//! `real_parity` the output of the parity benchmark's kubectl commands.
//!
//! What a real apiserver does that the simulator only models: its own leases and every
//! write of any kind move the global resourceVersion, so a quiet kind's newest event is
//! behind the RV a consistent read returns; bookmarks come on the watch cache's timer; an
//! HTTP/2 connection carries at most 100 streams. The writer below moves the global RV
//! through ConfigMaps in a namespace of the tier's own while the reads look at pods.

pub(crate) use crate::support::real::{real_upstream, RealUpstream};
use crate::support::{deadline, kache_over, list_rv, obj_rv, Next, TestKache};
use kache::upstream::Upstream;
use serde_json::{json, Value};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

pub(crate) const NS: &str = "kache-real-tier";

/// One pod of the populated cluster (`populate.py` labels its pods `app=...`), not of a
/// namespace some test or engineer made.
pub(crate) const POPULATED_POD: &str = "/api/v1/pods?limit=1&labelSelector=app%3Danalytics";

/// kache over the real apiserver, or `None` (after saying why) when the tier is off.
pub(crate) async fn real(test: &str, preload: &str) -> Option<TestKache> {
    real_with(test, &["--preload", preload]).await
}

/// [`real`] with kache's flags given whole.
pub(crate) async fn real_with(test: &str, flags: &[&str]) -> Option<TestKache> {
    let up = real_upstream(test)?;
    Some(over(&up, flags).await)
}

/// kache with `flags` over the real apiserver `up`, the tier's namespace made.
pub(crate) async fn over(up: &RealUpstream, flags: &[&str]) -> TestKache {
    let k = kache_over(up.upstream().await, flags).await;
    tier_namespace(&k).await;
    k
}

/// The tier's own namespace, made through kache if it is not there.
async fn tier_namespace(k: &TestKache) {
    let ns = json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NS}});
    let r = k.api.post("/api/v1/namespaces", &ns).await;
    assert!(r.status == 201 || r.status == 409, "namespace {NS}: {} {}", r.status, r.text());
}

/// Moves the global resourceVersion (a ConfigMap written every 100 ms, through kache) until
/// dropped, as a real cluster's leases do.
pub(crate) struct Writer(Arc<AtomicBool>);

impl Writer {
    pub(crate) fn start(k: &TestKache, name: &str) -> Writer {
        let stop = Arc::new(AtomicBool::new(false));
        let (flag, api, name) = (stop.clone(), k.client(), name.to_string());
        tokio::spawn(async move {
            let path = format!("/api/v1/namespaces/{NS}/configmaps/{name}");
            let mut i = 0u64;
            while !flag.load(Ordering::Relaxed) {
                let cm = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name, "namespace": NS}, "data": {"i": i.to_string()}});
                if api.put(&path, &cm).await.status == 404 {
                    api.post(&format!("/api/v1/namespaces/{NS}/configmaps"), &cm).await;
                }
                i += 1;
                tokio::time::sleep(std::time::Duration::from_millis(100)).await;
            }
        });
        Writer(stop)
    }
}

impl Drop for Writer {
    fn drop(&mut self) {
        self.0.store(true, Ordering::Relaxed);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn real_consistent_pod_lists_are_served_from_cache_while_the_global_rv_moves() {
    let Some(k) = real("real_consistent_pod_lists", "pods,configmaps").await else { return };
    let one = k.api.get_ok(POPULATED_POD).await;
    let ns = one["items"][0]["metadata"]["namespace"].as_str().expect("the apiserver holds pods").to_string();
    let _w = Writer::start(&k, "rv-mover");
    let (n, before) = (40, k.serving.serve.cache_hits());
    let mut last = 0;
    for _ in 0..n {
        let l = k.api.get_ok(&format!("/api/v1/namespaces/{ns}/pods")).await;
        assert!(list_rv(&l) >= last, "consistent LISTs never go back in RV");
        last = list_rv(&l);
    }
    let hits = k.serving.serve.cache_hits() - before;
    eprintln!("{hits} of {n} consistent pod LISTs from cache");
    assert!(hits * 100 >= n * 95, "{hits} of {n} consistent pod LISTs from cache");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn real_reads_see_the_writes_made_before_them_and_consistent_gets_come_from_cache() {
    let Some(k) = real("real_read_your_writes", "configmaps").await else { return };
    let _w = Writer::start(&k, "rv-mover-2");
    let (n, before) = (20, k.serving.serve.cache_hits());
    for i in 0..n {
        let name = format!("ryw-{}-{i}", std::process::id());
        let created = k.api.create_cm(NS, &name, json!({"i": i.to_string()})).await;
        let got = k.api.get_ok(&format!("/api/v1/namespaces/{NS}/configmaps/{name}")).await;
        assert_eq!(got["metadata"]["resourceVersion"], created["metadata"]["resourceVersion"], "GET after create: {name}");
        let l = k.api.get_ok(&format!("/api/v1/namespaces/{NS}/configmaps")).await;
        let names: Vec<&str> = l["items"].as_array().unwrap().iter().filter_map(|o| o["metadata"]["name"].as_str()).collect();
        assert!(names.contains(&name.as_str()), "LIST after create holds {name}");
        assert!(list_rv(&l) >= obj_rv(&created), "the LIST is at least as new as the write");
        k.api.delete(&format!("/api/v1/namespaces/{NS}/configmaps/{name}")).await;
    }
    let hits = k.serving.serve.cache_hits() - before;
    eprintln!("{hits} of {} consistent GETs and LISTs of ConfigMaps from cache", 2 * n);
    assert!(hits * 100 >= 2 * n * 95, "{hits} of {} consistent reads from cache", 2 * n);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn real_a_thousand_watches_from_a_fresh_rv_all_connect_and_get_every_event_once_in_order() {
    let Some(k) = real("real_thousand_watches", "configmaps").await else { return };
    let _w = Writer::start(&k, "rv-mover-3");
    let l = k.api.get_ok(&format!("/api/v1/namespaces/{NS}/configmaps?labelSelector=kache-tier%3Dwatched")).await;
    let from = list_rv(&l);
    let path =
        format!("/api/v1/namespaces/{NS}/configmaps?watch=1&labelSelector=kache-tier%3Dwatched&resourceVersion={from}&timeoutSeconds=120");
    let mut watches = Vec::new();
    for _ in 0..1000 {
        let api = k.client();
        let path = path.clone();
        watches.push(tokio::spawn(async move { api.watch(&path, "application/json").await }));
    }
    let mut streams = Vec::new();
    for w in watches {
        let s = w.await.unwrap();
        assert_eq!(s.status, 200, "every watch connects");
        streams.push(s);
    }
    // Five changes to one watched object, after every watch is open.
    let name = format!("watched-{}", std::process::id());
    let cm = |i: u32| json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name, "namespace": NS, "labels": {"kache-tier": "watched"}}, "data": {"i": i.to_string()}});
    let r = k.api.post(&format!("/api/v1/namespaces/{NS}/configmaps"), &cm(0)).await;
    let mut want = vec![("ADDED".to_string(), obj_rv(&k.api.must("create", r).await))];
    for i in 1..4 {
        let r = k.api.put(&format!("/api/v1/namespaces/{NS}/configmaps/{name}"), &cm(i)).await;
        want.push(("MODIFIED".to_string(), obj_rv(&k.api.must("update", r).await)));
    }
    let r = k.api.delete(&format!("/api/v1/namespaces/{NS}/configmaps/{name}")).await;
    k.api.must("delete", r).await;
    // The apiserver answers a ConfigMap's DELETE with a Status: the deletion's RV is the
    // one the first watch reports (newer than the last update), and every watch must agree.
    want.push(("DELETED".to_string(), 0));
    let end = deadline(120);
    for (i, s) in streams.iter_mut().enumerate() {
        let mut got = Vec::new();
        while got.len() < want.len() {
            match s.next_json(end).await {
                Next::Item(e) if e["type"] == "BOOKMARK" => {}
                Next::Item(e) => got.push((e["type"].as_str().unwrap().to_string(), obj_rv(&e["object"]))),
                other => panic!("watch {i}: {other:?} after {got:?}"),
            }
        }
        if want[4].1 == 0 {
            assert!(got[4].1 > want[3].1, "the deletion comes after the updates: {got:?}");
            want[4].1 = got[4].1;
        }
        assert_eq!(got, want, "watch {i}: every event once, in order");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn real_watch_list_is_served_from_cache_and_equals_the_apiservers_list() {
    let Some(k) = real("real_watch_list", "pods").await else { return };
    let _w = Writer::start(&k, "rv-mover-4");
    let (needed, want) = direct_pods().await;
    let before = k.serving.serve.cache_hits();
    let mut w = k.api.watch(WATCH_LIST, "application/json").await;
    assert_eq!(w.status, 200);
    assert_eq!(k.serving.serve.cache_hits(), before + 1, "the WatchList is answered from cache");
    let (got, end_rv) = initial_events(&mut w).await;
    assert!(end_rv >= needed, "the end bookmark ({end_rv}) is at least the RV the client needed");
    // Pods are quiet: the state at the end bookmark is the LIST's.
    assert_eq!(got.len(), want.len());
    assert!(got == want, "the initial events equal the consistent LIST");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn real_a_watch_list_while_kache_loads_is_sent_its_list_as_it_arrives() {
    // kache starts with the pods' JSON list to load (all of the tier's pods, which take it a
    // while); the WatchList comes while it loads.
    let Some(up) = real_upstream("real_a_watch_list_while_kache_loads") else { return };
    // The apiserver's own list first (its RV a lower bound for the WatchList's, which comes
    // later; pods are quiet): read after kache started, it gave kache's list time to end.
    let (needed, want) = direct_pods().await;
    let k = crate::support::kache_loading(up.upstream().await, &["--preload", "pods", "--preload-encodings", "json"]).await;
    tier_namespace(&k).await;
    let _w = Writer::start(&k, "rv-mover-5");
    assert!(!k.serving.serve.wait_synced(std::time::Duration::ZERO).await, "the pods' list has not ended yet");
    let (before, passed) = (k.serving.serve.cache_hits(), k.serving.serve.passed_through("not_synced"));
    let mut w = k.api.watch(WATCH_LIST, "application/json").await;
    assert_eq!(w.status, 200);
    assert_eq!(k.serving.serve.cache_hits(), before + 1, "answered by kache");
    assert_eq!(k.serving.serve.passed_through("not_synced"), passed, "not passed through");
    let (got, end_rv) = initial_events(&mut w).await;
    assert!(end_rv >= needed, "the end bookmark ({end_rv}) is at least the RV the client needed");
    assert_eq!(got.len(), want.len());
    assert!(got == want, "the initial events equal the apiserver's consistent LIST (pods are quiet)");
}

const WATCH_LIST: &str =
    "/api/v1/pods?watch=1&sendInitialEvents=true&resourceVersionMatch=NotOlderThan&allowWatchBookmarks=true&timeoutSeconds=300";

/// The apiserver's own consistent LIST of every pod, through kube-rs directly (metadata
/// only): its RV, and each pod's key and RV in order.
async fn direct_pods() -> (u64, Vec<(String, u64)>) {
    let pods: kube::Api<k8s_openapi::api::core::v1::Pod> = kube::Api::all(direct_client().await);
    let direct = pods.list_metadata(&kube::api::ListParams::default()).await.expect("direct LIST");
    let rv = direct.metadata.resource_version.as_deref().unwrap().parse().unwrap();
    let mut pods: Vec<(String, u64)> = direct
        .items
        .iter()
        .map(|p| {
            let m = &p.metadata;
            let rv = m.resource_version.as_deref().unwrap().parse().unwrap();
            (format!("{}/{}", m.namespace.as_deref().unwrap_or_default(), m.name.as_deref().unwrap_or_default()), rv)
        })
        .collect();
    pods.sort();
    (rv, pods)
}

/// A WatchList's initial events up to its initial-events-end bookmark: each pod's key and RV
/// in order, and the bookmark's RV.
async fn initial_events(w: &mut crate::support::WatchStream) -> (Vec<(String, u64)>, u64) {
    let end = deadline(300);
    let mut got = Vec::new();
    loop {
        let e = w.next_json(end).await.item("initial events");
        match e["type"].as_str() {
            Some("ADDED") => got.push((key(&e["object"]), obj_rv(&e["object"]))),
            Some("BOOKMARK") if e["object"]["metadata"]["annotations"]["k8s.io/initial-events-end"] == "true" => {
                got.sort();
                return (got, e["object"]["metadata"]["resourceVersion"].as_str().unwrap().parse().unwrap());
            }
            Some("BOOKMARK") => {}
            other => panic!("unexpected {other:?}: {e}"),
        }
    }
}

/// A kube-rs client of the real apiserver itself (not through kache; the tier is on).
pub(crate) async fn direct_client() -> kube::Client {
    RealUpstream::on().client().await
}

pub(crate) fn key(o: &Value) -> String {
    format!("{}/{}", o["metadata"]["namespace"].as_str().unwrap_or_default(), o["metadata"]["name"].as_str().unwrap_or_default())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn real_a_thousand_pass_through_watches_all_get_their_headers() {
    // One client holds them all: above kache's per-client pass-through bound (500 by default).
    let Some(k) =
        real_with("real_thousand_pass_through_watches", &["--preload", "configmaps", "--max-passthrough-per-client", "2000"]).await
    else {
        return;
    };
    // Table watches whose rows carry the whole object (`includeObject=Object`) are passed
    // through, so these thousand streams are the upstream's: past 100 on one HTTP/2
    // connection (the apiserver's default limit) kache must open more connections.
    let table = "application/json;as=Table;v=v1;g=meta.k8s.io";
    let path = format!("/api/v1/namespaces/{NS}/configmaps?watch=1&timeoutSeconds=60&includeObject=Object");
    let before = k.serving.serve.cache_hits();
    let mut watches = Vec::new();
    for _ in 0..1000 {
        let api = k.client();
        let path = path.clone();
        watches.push(tokio::spawn(async move { tokio::time::timeout_at(deadline(60), api.watch(&path, table)).await }));
    }
    let mut open = Vec::new();
    for w in watches {
        let mut s = w.await.unwrap().expect("response headers arrive");
        if s.status != 200 {
            let body = s.next_json(deadline(10)).await;
            panic!("watch {} of 1000: {} {body:?}", open.len(), s.status);
        }
        open.push(s);
    }
    assert_eq!(k.serving.serve.cache_hits(), before, "passed through, not answered from cache");
}

/// A GET sent to the real apiserver itself, read to the end: (status, body).
pub(crate) async fn direct_get(client: &kube::Client, path: &str, accept: &str) -> (u16, bytes::Bytes) {
    use http_body_util::BodyExt;
    let req = http::Request::get(path).header(http::header::ACCEPT, accept).body(kube::client::Body::empty()).unwrap();
    let resp = client.send(req).await.unwrap_or_else(|e| panic!("direct GET {path}: {e}"));
    let status = resp.status().as_u16();
    (status, resp.into_body().collect().await.expect("direct body").to_bytes())
}

/// The simulator's fault relay in front of the real apiserver (a black-holed network, as a
/// stopped apiserver looks from outside): found hung within seconds, cached reads keep
/// answering, a write gets kache's 503 at once, and all is well again on resume. (Stopping
/// and restarting a real apiserver process is `loadtest/real/fault_run.py`.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn real_a_black_holed_apiserver_is_found_and_cached_reads_keep_answering() {
    let Some(real) = real_upstream("real_a_black_holed_apiserver") else { return };
    kache::upstream::install_crypto_provider();
    let mut config = real.config().await;
    let authority = config.cluster_url.authority().expect("server address").to_string();
    let target = tokio::net::lookup_host(&authority).await.unwrap().next().expect("server resolves");
    let relay = kache::sim::fault::FaultProxy::start("127.0.0.1:0", target).await.unwrap();
    config.cluster_url = format!("https://{}", relay.addr).parse().unwrap();
    let up = Upstream::new(&config).expect("upstream");
    let k = kache_over(up, &["--preload", "configmaps", "--upstream-timeout", "2"]).await;
    let ns = json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NS}});
    let r = k.api.post("/api/v1/namespaces", &ns).await;
    assert!(r.status == 201 || r.status == 409, "namespace {NS}: {} {}", r.status, r.text());
    crate::support::upstream_becomes(&k.serving.serve, true).await;
    let before = k.api.get_ok("/api/v1/configmaps?resourceVersion=0").await;

    relay.pause(true);
    match crate::support::upstream_becomes(&k.serving.serve, false).await {
        kache::upstream::health::Health::Down { reason, .. } => assert_eq!(reason, "hung"),
        h => panic!("{h:?}"),
    }
    let checks = kache::app::admin::readiness(&k.serving.serve);
    assert!(!checks[0].pass && !checks[0].counts && checks[0].detail.starts_with("hung for "), "{checks:?}");
    let r = k.api.get("/api/v1/configmaps?resourceVersion=0").await;
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(r.json()["items"].as_array().map(Vec::len), before["items"].as_array().map(Vec::len));
    let cm = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "black-holed", "namespace": NS}});
    let w = k.api.post(&format!("/api/v1/namespaces/{NS}/configmaps"), &cm).await;
    assert_eq!(w.status, 503, "{}", w.text());
    assert_eq!(w.header("retry-after"), Some("1"));

    relay.pause(false);
    crate::support::upstream_becomes(&k.serving.serve, true).await;
    let w = k.api.post(&format!("/api/v1/namespaces/{NS}/configmaps"), &cm).await;
    assert!(w.status == 201 || w.status == 409, "{} {}", w.status, w.text());
    let _ = k.api.delete(&format!("/api/v1/namespaces/{NS}/configmaps/black-holed")).await;
}
