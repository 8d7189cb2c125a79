//! Why kache passes a request through, and the cost rule of consistent reads.
//!
//! Each pass-through reason (`kache::serve::PassThrough`, `kache_passthrough_total{reason}`)
//! is made to happen by a request that needs it, against kache in front of the simulator;
//! the count for that reason moves and no other read's does. The cost rule is run with its
//! default factor: a consistent read whose answer is small goes to the upstream at once, one
//! whose answer is large waits for the freshness proof and comes from cache; factor 0 sends
//! neither through.

use crate::support::ops::Proxy;
use crate::support::{
    cluster, deadline, eventually, kache_in_front, kache_loading, list_rv, obj_rv, start, Next, TestKache, TestSim, WatchStream,
};
use kache::serve::PassThrough;
use serde_json::json;

const SIM: &[&str] = &["--nodes", "5", "--pods", "60", "--namespaces", "3", "--bookmark-interval", "1"];
const TABLE: &str = "application/json;as=Table;v=v1;g=meta.k8s.io";

async fn setup(flags: &[&str]) -> (TestSim, TestKache) {
    let sim = start(&cluster(SIM)).await;
    // The cost rule alone: no read proven by the revision ledger (`serve_ledger`).
    let mut f = vec!["--preload", "pods,namespaces", "--revision-ledger", "off"];
    f.extend_from_slice(flags);
    let k = kache_in_front(&sim.addr.to_string(), &f).await;
    assert!(k.serving.serve.wait_synced(crate::support::QUICK).await, "preloaded caches sync");
    (sim, k)
}

/// Every reason's count.
fn counts(k: &TestKache) -> Vec<u64> {
    PassThrough::LABELS.iter().map(|l| k.serving.serve.passed_through(l)).collect()
}

/// Run `request`, then assert it passed through for `reason` (its count moved by one) and
/// for no other reason; `status` is what the client got (`None`: whatever the upstream says).
async fn passes_for<F, Fut>(k: &TestKache, reason: &str, status: Option<u16>, request: F)
where
    F: FnOnce() -> Fut,
    Fut: std::future::Future<Output = crate::support::Resp>,
{
    let before = counts(k);
    let hits = k.serving.serve.cache_hits();
    let r = request().await;
    if let Some(status) = status {
        assert_eq!(r.status, status, "{reason}: {}", r.text());
    }
    let after = counts(k);
    let moved: Vec<(&str, u64)> =
        PassThrough::LABELS.iter().zip(before.iter().zip(&after)).filter(|(_, (b, a))| a > b).map(|(l, (b, a))| (*l, a - b)).collect();
    assert_eq!(moved, vec![(reason, 1)], "the request passed through for {reason} only");
    assert_eq!(k.serving.serve.cache_hits(), hits, "{reason}: not answered from cache");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn requests_kache_cannot_answer_pass_through_with_their_reason() {
    let (_sim, k) = setup(&[]).await;
    let api = &k.api;
    let cm = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c", "namespace": "default"}});
    passes_for(&k, "write", Some(201), || api.post("/api/v1/namespaces/default/configmaps", &cm)).await;
    passes_for(&k, "non_resource", Some(200), || api.get("/version")).await;
    let pods = api.get("/api/v1/pods?resourceVersion=0").await.json();
    let pod = &pods["items"][0]["metadata"];
    let (ns, name) = (pod["namespace"].as_str().unwrap(), pod["name"].as_str().unwrap());
    let status = format!("/api/v1/namespaces/{ns}/pods/{name}/status");
    passes_for(&k, "subresource", Some(200), || api.get(&status)).await;
    passes_for(&k, "unknown_resource", Some(404), || api.get("/apis/nothing.example.com/v1/things")).await;
    passes_for(&k, "scope", Some(404), || api.get("/api/v1/namespaces/default/nodes")).await;
    passes_for(&k, "encoding", None, || api.get_with("/api/v1/pods?resourceVersion=0", &[("accept", "application/yaml")])).await;
    let named = format!("/api/v1/namespaces/{ns}/pods/{name}?watch=1&timeoutSeconds=1");
    passes_for(&k, "named_watch", Some(200), || api.get(&named)).await;
    passes_for(&k, "view", Some(200), || api.get_with("/api/v1/pods?resourceVersion=0&includeObject=Object", &[("accept", TABLE)])).await;
    passes_for(&k, "unknown_field", Some(400), || api.get("/api/v1/pods?resourceVersion=0&fieldSelector=spec.noSuchField%3Dx")).await;
    // A kind no request has read yet: its cache starts now and has not synced. A small
    // kind's list may end between the request's start of the feed and its look at it (it
    // is then answered from cache, rightly): the next unread kind is tried then.
    let mut raced = Vec::new();
    for kind in ["secrets", "services", "endpoints", "configmaps", "events"] {
        let (before, hits) = (k.serving.serve.passed_through("not_synced"), k.serving.serve.cache_hits());
        let r = api.get(&format!("/api/v1/namespaces/default/{kind}?resourceVersion=0")).await;
        assert_eq!(r.status, 200, "{kind}: {}", r.text());
        if k.serving.serve.passed_through("not_synced") == before + 1 {
            assert_eq!(k.serving.serve.cache_hits(), hits, "{kind}: not answered from cache");
            break;
        }
        assert_eq!(k.serving.serve.cache_hits(), hits + 1, "{kind}: neither passed through for not_synced nor answered from cache");
        raced.push(kind);
    }
    assert!(raced.len() < 5, "no unread kind passed through for not_synced: {raced:?}");
    // An exact resourceVersion from before the cache's history: the upstream's own 410.
    passes_for(&k, "stale", Some(410), || api.get("/api/v1/pods?resourceVersion=1&resourceVersionMatch=Exact")).await;
    // The answer is what the upstream gives: the same items.
    let direct = _sim.api.get("/api/v1/pods?resourceVersion=0").await.json();
    assert_eq!(pods["items"].as_array().unwrap().len(), direct["items"].as_array().unwrap().len());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_resource_version_past_the_upstreams_gets_the_apiservers_504_without_asking_it_again() {
    // No writes: an RV ahead of the upstream's is never reached. kache waits for it as the
    // apiserver would (the consistent wait) and refuses it as the apiserver does, instead of
    // passing it on for the upstream to wait again.
    // Factor 0: every read that needs a proof waits for it (none is cheaper upstream).
    let (sim, k) = setup(&["--consistent-passthrough-factor", "0"]).await;
    // A write the cache has not seen yet: a read at least that new is proven and answered.
    let written = obj_rv(&sim.api.create_cm("default", "not-older-than", json!({})).await);
    let (hits, before) = (k.serving.serve.cache_hits(), counts(&k));
    let r = k.api.get(&format!("/api/v1/namespaces?resourceVersion={written}&resourceVersionMatch=NotOlderThan")).await;
    assert_eq!(counts(&k), before, "not passed through");
    assert_eq!(r.status, 200, "{}", r.text());
    assert!(list_rv(&r.json()) >= written);
    assert_eq!(k.serving.serve.cache_hits(), hits + 1, "from cache");
    let rv = list_rv(&sim.api.get("/api/v1/namespaces?limit=1").await.json());
    let future = rv + 1000;
    let pod = sim.api.get("/api/v1/pods?limit=1").await.json()["items"][0]["metadata"].clone();
    let reads = [
        format!("/api/v1/pods?resourceVersion={future}&resourceVersionMatch=NotOlderThan"),
        format!(
            "/api/v1/namespaces/{}/pods/{}?resourceVersion={future}",
            pod["namespace"].as_str().unwrap(),
            pod["name"].as_str().unwrap()
        ),
    ];
    for path in reads {
        let before = counts(&k);
        let r = k.api.get(&path).await;
        assert_eq!(r.status, 504, "{path}: {}", r.text());
        let s = r.json();
        assert_eq!(s["reason"], "Timeout");
        assert!(s["message"].as_str().unwrap().starts_with(&format!("Timeout: Too large resource version: {future}, current: ")), "{s}");
        assert_eq!(s["details"]["causes"][0]["reason"], "ResourceVersionTooLarge");
        assert_eq!(s["details"]["retryAfterSeconds"], 1);
        assert_eq!(r.header("retry-after"), Some("1"));
        assert_eq!(counts(&k), before, "{path}: not passed through");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_consistent_read_while_the_upstream_is_down_is_unavailable() {
    let sim = start(&cluster(SIM)).await;
    let proxy = Proxy::start(&sim.addr, true).await;
    let k = kache_in_front(&proxy.addr.to_string(), &["--preload", "pods"]).await;
    assert!(k.serving.serve.wait_synced(crate::support::QUICK).await);
    proxy.set_down(true);
    // The probe for the upstream's RV gets 503: no proof, the upstream's own answer.
    passes_for(&k, "unavailable", Some(503), || k.api.get("/api/v1/pods")).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_custom_resources_table_before_its_crd_was_read_has_no_printer() {
    let sim = start(&cluster(SIM)).await;
    let proxy = Proxy::start(&sim.addr, true).await;
    // kache may not read the CRD: the widgets' cache fills, but without printer columns.
    proxy.refuse("/apis/apiextensions.k8s.io/v1/customresourcedefinitions/");
    let k = kache_in_front(&proxy.addr.to_string(), &["--preload", "widgets.example.com"]).await;
    assert!(k.serving.serve.wait_synced(crate::support::QUICK).await);
    let before = counts(&k);
    let r = k.api.get_with("/apis/example.com/v1/widgets?resourceVersion=0", &[("accept", TABLE)]).await;
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(r.json()["kind"], "Table");
    let i = PassThrough::LABELS.iter().position(|l| *l == "no_printer").unwrap();
    assert_eq!(counts(&k)[i], before[i] + 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn small_consistent_reads_go_upstream_at_once_and_large_ones_wait_for_the_proof() {
    // Factor 0.01: the upstream is preferred for answers up to about 160 KB (seeded costs);
    // those are passed through as they are (not checked).
    let (sim, k) = setup(&["--consistent-passthrough-factor", "0.01", "--cheaper-upstream-reads", "pass-through"]).await;
    // Three namespaces: a few hundred bytes. Cheaper upstream, and the same answer.
    passes_for(&k, "cheaper_upstream", Some(200), || k.api.get("/api/v1/namespaces")).await;
    // One pod by name: an etcd read for the apiserver.
    let pods = sim.api.get("/api/v1/pods").await.json();
    let m = &pods["items"][0]["metadata"];
    let path = format!("/api/v1/namespaces/{}/pods/{}", m["namespace"].as_str().unwrap(), m["name"].as_str().unwrap());
    passes_for(&k, "cheaper_upstream", Some(200), || k.api.get(&path)).await;
    // Every pod (60 of several KB each): from cache after the proof.
    let hits = k.serving.serve.cache_hits();
    let before = counts(&k);
    let all = k.api.get("/api/v1/pods").await;
    assert_eq!(all.status, 200);
    assert_eq!(k.serving.serve.cache_hits(), hits + 1, "from cache");
    assert_eq!(counts(&k), before, "nothing passed through");
    let got = all.json();
    assert_eq!(got["items"].as_array().unwrap().len(), pods["items"].as_array().unwrap().len());
    assert!(list_rv(&got) >= list_rv(&pods), "a consistent read: at least the upstream's RV when asked");
}

/// The names of a LIST's items (a Table's rows or the objects).
fn names(list: &serde_json::Value) -> Vec<String> {
    let items = list["items"].as_array().or_else(|| list["rows"].as_array()).expect("items or rows");
    items.iter().map(|i| i["metadata"]["name"].as_str().or_else(|| i["object"]["metadata"]["name"].as_str()).unwrap().to_string()).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_small_consistent_list_is_checked_against_the_upstreams_metadata_and_answered_from_cache() {
    let (sim, k) = setup(&["--consistent-passthrough-factor", "0.01"]).await;
    let serve = &k.serving.serve;
    let checked = || serve.checks("same") + serve.checks("proven");
    // The namespaces: the upstream's metadata says the cache holds them as they are.
    let (hits, before, c0) = (serve.cache_hits(), counts(&k), checked());
    let upstream_rv = list_rv(&sim.api.get("/api/v1/namespaces").await.json());
    let r = k.api.get("/api/v1/namespaces").await;
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!((serve.cache_hits(), counts(&k), checked()), (hits + 1, before.clone(), c0 + 1), "checked and answered from cache");
    assert_eq!(names(&r.json()), names(&sim.api.get("/api/v1/namespaces").await.json()));
    assert!(list_rv(&r.json()) >= upstream_rv, "at the upstream's RV when checked, not the cache's");
    // A namespace's pods as a Table, five to a page (as kubectl pages): every page from
    // cache, each checked or proven at the first page's RV; together the namespace's pods.
    let direct = sim.api.get("/api/v1/pods").await.json();
    let ns = direct["items"][0]["metadata"]["namespace"].as_str().unwrap().to_string();
    let mut want: Vec<String> = direct["items"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|i| i["metadata"]["namespace"] == ns.as_str())
        .map(|i| i["metadata"]["name"].as_str().unwrap().to_string())
        .collect();
    want.sort();
    let (hits, mut got, mut cont, mut pages) = (serve.cache_hits(), Vec::new(), String::new(), 0);
    loop {
        let q = if cont.is_empty() { String::new() } else { format!("&continue={cont}") };
        let r = k.api.get_with(&format!("/api/v1/namespaces/{ns}/pods?limit=5{q}"), &[("accept", TABLE)]).await;
        assert_eq!(r.status, 200, "{}", r.text());
        let page = r.json();
        assert_eq!(page["kind"], "Table");
        got.extend(names(&page));
        pages += 1;
        cont = page["metadata"]["continue"].as_str().unwrap_or("").to_string();
        if cont.is_empty() {
            break;
        }
    }
    got.sort();
    assert_eq!(got, want, "the namespace's pods, each once");
    assert!(pages > 1, "{pages} pages");
    assert_eq!(serve.cache_hits(), hits + pages, "every page from cache");
    assert_eq!(counts(&k), before, "nothing passed through");
    // A pod by name goes to the upstream (a check would cost it the same etcd read).
    let m = &direct["items"][0]["metadata"];
    let path = format!("/api/v1/namespaces/{ns}/pods/{}", m["name"].as_str().unwrap());
    passes_for(&k, "cheaper_upstream", Some(200), || k.api.get(&path)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_check_the_upstream_does_not_answer_passes_the_read_through() {
    let sim = start(&cluster(SIM)).await;
    let proxy = Proxy::start(&sim.addr, true).await;
    let k = kache_in_front(
        &proxy.addr.to_string(),
        &["--preload", "pods", "--consistent-passthrough-factor", "0.01", "--revision-ledger", "off"],
    )
    .await;
    assert!(k.serving.serve.wait_synced(crate::support::QUICK).await);
    let ns = sim.api.get("/api/v1/pods").await.json()["items"][0]["metadata"]["namespace"].as_str().unwrap().to_string();
    // The upstream refuses this namespace's pods to anyone (kache's check included).
    proxy.refuse(&format!("/api/v1/namespaces/{ns}/pods"));
    let failed = k.serving.serve.checks("failed");
    let path = format!("/api/v1/namespaces/{ns}/pods");
    passes_for(&k, "cheaper_upstream", Some(403), || k.api.get(&path)).await;
    assert_eq!(k.serving.serve.checks("failed"), failed + 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn factor_zero_answers_every_consistent_read_from_cache() {
    let (_sim, k) = setup(&["--consistent-passthrough-factor", "0"]).await;
    let hits = k.serving.serve.cache_hits();
    let before = counts(&k);
    for path in ["/api/v1/namespaces", "/api/v1/namespaces/default"] {
        let r = k.api.get(path).await;
        assert_eq!(r.status, 200, "{path}: {}", r.text());
    }
    assert_eq!(k.serving.serve.cache_hits(), hits + 2);
    assert_eq!(counts(&k), before);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_clients_cheaper_upstream_reads_past_its_budget_are_proven_and_answered_from_cache() {
    // A budget of 1 byte a second: the first small consistent read spends it (and more).
    let flags = [
        "--consistent-passthrough-factor",
        "0.01",
        "--max-cheaper-upstream-rate-per-client",
        "1",
        "--cheaper-upstream-reads",
        "pass-through",
    ];
    let (_sim, k) = setup(&flags).await;
    passes_for(&k, "cheaper_upstream", Some(200), || k.api.get("/api/v1/namespaces")).await;
    let hits = k.serving.serve.cache_hits();
    let before = counts(&k);
    let r = k.api.get("/api/v1/namespaces").await;
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(k.serving.serve.cache_hits(), hits + 1, "the next one from cache, after the proof");
    assert_eq!(counts(&k), before, "nothing passed through");
    assert_eq!(r.json()["items"].as_array().unwrap().len(), 3, "the three namespaces");
}

/// kache in front of a proxy that passes the first 256 KiB of the pods list (kache's one
/// unpaged LIST) and holds the rest, preloading `preload` (the pods first) in JSON: its
/// initial list of the pods is under way and cannot end until `release`.
async fn loading(pods: &str, preload: &str) -> (TestSim, Proxy, TestKache) {
    let sim = start(&cluster(&["--nodes", "5", "--pods", pods, "--namespaces", "3", "--bookmark-interval", "1"])).await;
    let proxy = Proxy::start(&sim.addr, true).await;
    proxy.hold_body("/api/v1/pods", 256 * 1024);
    let up = kache::app::plain_upstream(&proxy.url()).unwrap();
    let k = kache_loading(up, &["--preload", preload, "--preload-encodings", "json"]).await;
    eventually(30, 20, || async {
        if proxy.body_held() {
            Ok(())
        } else {
            Err("the pods list has not reached its hold yet".to_string())
        }
    })
    .await;
    (sim, proxy, k)
}

const WATCH_LIST: &str = "/api/v1/pods?watch=1&sendInitialEvents=true&resourceVersionMatch=NotOlderThan&allowWatchBookmarks=true";

/// The next `n` events, each an ADDED pod: their names.
async fn added(w: &mut WatchStream, n: usize) -> Vec<String> {
    let mut names = Vec::new();
    while names.len() < n {
        let Next::Item(ev) = w.next_json(deadline(30)).await else { panic!("the stream ended or stalled after {} pods", names.len()) };
        assert_eq!(ev["type"], "ADDED", "{ev}");
        names.push(ev["object"]["metadata"]["name"].as_str().unwrap().to_string());
    }
    names
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_watch_list_while_the_cache_loads_gets_its_pods_as_they_arrive_and_is_not_passed_through() {
    let (sim, proxy, k) = loading("1200", "pods").await;
    // A write after kache's list began: the WatchList's state must be at least that new.
    let written = obj_rv(&sim.api.create_cm("default", "after-the-list-began", json!({})).await);
    let before = counts(&k);
    let mut w = k.api.watch(WATCH_LIST, "application/json").await;
    assert_eq!(w.status, 200);
    // The list's first pods come while the rest of it is held upstream.
    let mut names = added(&mut w, 10).await;
    proxy.release();
    let end = loop {
        let Next::Item(ev) = w.next_json(deadline(30)).await else { panic!("no end bookmark after {} pods", names.len()) };
        if ev["type"] == "BOOKMARK" {
            break ev;
        }
        assert_eq!(ev["type"], "ADDED", "{ev}");
        names.push(ev["object"]["metadata"]["name"].as_str().unwrap().to_string());
    };
    assert_eq!(end["object"]["metadata"]["annotations"]["k8s.io/initial-events-end"], "true");
    assert!(obj_rv(&end["object"]) >= written, "the state is at least as new as the request: {end}");
    let (_, direct) = sim.api.all_pods().await;
    let mut want: Vec<String> = direct.iter().map(|p| p["metadata"]["name"].as_str().unwrap().to_string()).collect();
    want.sort();
    names.sort();
    assert_eq!(names, want, "every pod once");
    assert_eq!(counts(&k), before, "nothing passed through");
    let passed = proxy.seen().into_iter().filter(|c| c.path.contains("sendInitialEvents")).count();
    assert_eq!(passed, 0, "the upstream was asked for no WatchList");
}

/// A WatchList sent a loading list to a client that accepts gzip (as every Go client does)
/// comes compressed, and the pods kache holds so far decode before the rest of the list has
/// come: every pod once, then the initial-events-end bookmark.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_watch_list_sent_a_loading_list_is_gzipped_and_its_first_pods_decode_before_the_rest_come() {
    use http_body_util::BodyExt as _;
    let (sim, proxy, k) = loading("1200", "pods").await;
    let before = counts(&k);
    let req = http::Request::get(format!("{}{WATCH_LIST}", k.api.base))
        .header("accept", "application/json")
        .header("accept-encoding", "gzip")
        .body(http_body_util::Full::new(bytes::Bytes::new()))
        .unwrap();
    let mut resp = k.api.client.request(req).await.expect("response");
    assert_eq!(resp.status(), 200);
    assert_eq!(resp.headers()["content-encoding"], "gzip");
    let mut gunzip = crate::support::gzip::Gunzip::new();
    let mut read = async || {
        gunzip.push(&resp.body_mut().frame().await.expect("a frame").unwrap().into_data().unwrap());
        gunzip.events()
    };
    // The list is held upstream past its first pods: those decode already.
    let mut events = Vec::new();
    while events.len() < 10 {
        events.extend(read().await);
    }
    assert!(events.iter().all(|e| e["type"] == "ADDED"), "only pods before the rest of the list: {events:?}");
    proxy.release();
    while !events.last().is_some_and(|e| e["type"] == "BOOKMARK") {
        events.extend(read().await);
    }
    let end = events.pop().unwrap();
    assert_eq!(end["object"]["metadata"]["annotations"]["k8s.io/initial-events-end"], "true");
    let mut names: Vec<&str> = events.iter().map(|e| e["object"]["metadata"]["name"].as_str().unwrap()).collect();
    names.sort_unstable();
    let (_, direct) = sim.api.all_pods().await;
    let mut want: Vec<&str> = direct.iter().map(|p| p["metadata"]["name"].as_str().unwrap()).collect();
    want.sort_unstable();
    assert_eq!(names, want, "every pod once, as ADDED");
    assert!(events.iter().all(|e| e["type"] == "ADDED"));
    assert_eq!(counts(&k), before, "nothing passed through");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_watch_list_sent_a_list_that_fails_ends_without_its_end_bookmark() {
    let (_sim, proxy, k) = loading("700", "pods").await;
    let mut w = k.api.watch(WATCH_LIST, "application/json").await;
    assert_eq!(w.status, 200);
    let mut names = added(&mut w, 10).await;
    // The list's connection breaks midway: the attempt fails, and the client must start again.
    proxy.cut_streams();
    for ev in w.json_until_end(deadline(30)).await {
        assert_eq!(ev["type"], "ADDED", "only the failed attempt's pods, no end bookmark: {ev}");
        names.push(ev["object"]["metadata"]["name"].as_str().unwrap().to_string());
    }
    let n = names.len();
    names.sort();
    names.dedup();
    assert!(names.len() == n && n < 700, "each pod the list brought once, not the whole list: {n}");
}

/// The lists the proxy saw of a collection (its `limit=1` count and watches aside).
fn lists_of(proxy: &Proxy, collection: &str) -> usize {
    proxy.seen().iter().filter(|c| c.method == "GET" && c.path == collection).count()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn preloaded_kinds_list_in_turn_and_a_watch_list_starts_its_kinds_list_at_once() {
    let (_sim, proxy, k) = loading("1200", "pods,namespaces,services").await;
    // The pods' list is under way: the kinds after it wait for their turn.
    assert_eq!((lists_of(&proxy, "/api/v1/namespaces"), lists_of(&proxy, "/api/v1/services")), (0, 0), "{:?}", proxy.seen());
    // A WatchList of namespaces does not wait: their list starts and it is sent it.
    let before = counts(&k);
    let url = "/api/v1/namespaces?watch=1&sendInitialEvents=true&resourceVersionMatch=NotOlderThan&allowWatchBookmarks=true";
    let mut w = k.api.watch(url, "application/json").await;
    assert_eq!(w.status, 200);
    let mut names = Vec::new();
    let end = loop {
        let Next::Item(ev) = w.next_json(deadline(30)).await else { panic!("no end bookmark after {names:?}") };
        if ev["type"] == "BOOKMARK" {
            break ev;
        }
        names.push(ev["object"]["metadata"]["name"].as_str().unwrap().to_string());
    };
    assert_eq!(end["object"]["metadata"]["annotations"]["k8s.io/initial-events-end"], "true");
    assert_eq!(names.len(), 3, "the three namespaces: {names:?}");
    assert_eq!(counts(&k), before, "nothing passed through");
    assert_eq!(lists_of(&proxy, "/api/v1/namespaces"), 1, "the namespaces were listed for it");
    assert_eq!(lists_of(&proxy, "/api/v1/services"), 0, "the services still wait for the pods");
    // Once the pods' list ends, the services' turn comes.
    proxy.release();
    assert!(k.serving.serve.wait_synced(crate::support::QUICK).await, "every preloaded cache syncs");
    assert_eq!(lists_of(&proxy, "/api/v1/services"), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_preloaded_kind_the_upstream_refuses_does_not_hold_up_the_next() {
    let sim = start(&cluster(SIM)).await;
    let proxy = Proxy::start(&sim.addr, true).await;
    proxy.refuse("/api/v1/pods");
    let up = kache::app::plain_upstream(&proxy.url()).unwrap();
    let k = kache_loading(up, &["--preload", "pods,namespaces", "--preload-encodings", "json"]).await;
    eventually(30, 20, || async {
        match k.serving.serve.cache("", "namespaces", kache::api::media::Format::Json) {
            Some(c) if c.snapshot().range(None, None).count() == 3 => Ok(()),
            _ => Err("the namespaces have not been listed".to_string()),
        }
    })
    .await;
    assert!(lists_of(&proxy, "/api/v1/pods") >= 1, "the pods came first");
}
