//! The opt-in tier: kache in front of a real kube-apiserver (`../shared/real-apiserver/`
//! builds and runs v1.36.2 with etcd). Runs when `KACHE_REAL_KUBECONFIG` names its kubeconfig
//! (`KACHE_REAL_CONTEXT` picks a context, default the current one; it needs the rights of
//! `admin`); each test says it is skipped otherwise. CI has no such apiserver.
//!
//! ```sh
//! KACHE_REAL_KUBECONFIG=~/real-apiserver/kubeconfig KACHE_REAL_CONTEXT=admin \
//!   cargo test --release --test it real_ -- --test-threads 1 --nocapture
//! ```
//!
//! What a real apiserver does that the simulator only models: its own leases and every
//! write of any kind move the global resourceVersion, so a quiet kind's newest event is
//! behind the RV a consistent read returns; bookmarks come on the watch cache's timer; an
//! HTTP/2 connection carries at most 100 streams. The writer below moves the global RV
//! through ConfigMaps in a namespace of the tier's own while the reads look at pods.

use crate::support::{deadline, kache_over, list_rv, obj_rv, Next, TestKache};
use kache::upstream::Upstream;
use serde_json::{json, Value};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

const NS: &str = "kache-real-tier";

/// One pod of the populated cluster (`populate.py` labels its pods `app=...`), not of a
/// namespace some test or engineer made.
const POPULATED_POD: &str = "/api/v1/pods?limit=1&labelSelector=app%3Danalytics";

/// kache over the real apiserver, or `None` (after saying why) when the tier is off.
async fn real(test: &str, preload: &str) -> Option<TestKache> {
    real_with(test, &["--preload", preload]).await
}

/// [`real`] with kache's flags given whole.
async fn real_with(test: &str, flags: &[&str]) -> Option<TestKache> {
    let Some(path) = std::env::var_os("KACHE_REAL_KUBECONFIG") else {
        eprintln!("{test}: skipped, KACHE_REAL_KUBECONFIG is not set (see tests/it/real_apiserver.rs)");
        return None;
    };
    let context = std::env::var("KACHE_REAL_CONTEXT").ok();
    let up = Upstream::load(Some(std::path::Path::new(&path)), context.as_deref()).await.expect("the real apiserver's kubeconfig loads");
    let k = kache_over(up, flags).await;
    let ns = json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NS}});
    let r = k.api.post("/api/v1/namespaces", &ns).await;
    assert!(r.status == 201 || r.status == 409, "namespace {NS}: {} {}", r.status, r.text());
    Some(k)
}

/// Moves the global resourceVersion (a ConfigMap written every 100 ms, through kache) until
/// dropped, as a real cluster's leases do.
struct Writer(Arc<AtomicBool>);

impl Writer {
    fn start(k: &TestKache, name: &str) -> Writer {
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
    // The apiserver's own answer, through kube-rs directly (a metadata-only consistent LIST).
    let pods: kube::Api<k8s_openapi::api::core::v1::Pod> = kube::Api::all(direct_client().await);
    let direct = pods.list_metadata(&kube::api::ListParams::default()).await.expect("direct LIST");
    let needed: u64 = direct.metadata.resource_version.as_deref().unwrap().parse().unwrap();
    let mut want: Vec<(String, u64)> = direct
        .items
        .iter()
        .map(|p| {
            let m = &p.metadata;
            let rv = m.resource_version.as_deref().unwrap().parse().unwrap();
            (format!("{}/{}", m.namespace.as_deref().unwrap_or_default(), m.name.as_deref().unwrap_or_default()), rv)
        })
        .collect();
    let before = k.serving.serve.cache_hits();
    let q = "/api/v1/pods?watch=1&sendInitialEvents=true&resourceVersionMatch=NotOlderThan&allowWatchBookmarks=true&timeoutSeconds=300";
    let mut w = k.api.watch(q, "application/json").await;
    assert_eq!(w.status, 200);
    assert_eq!(k.serving.serve.cache_hits(), before + 1, "the WatchList is answered from cache");
    let end = deadline(300);
    let mut got = Vec::new();
    let end_rv = loop {
        let e = w.next_json(end).await.item("initial events");
        match e["type"].as_str() {
            Some("ADDED") => got.push((key(&e["object"]), obj_rv(&e["object"]))),
            Some("BOOKMARK") if e["object"]["metadata"]["annotations"]["k8s.io/initial-events-end"] == "true" => {
                break e["object"]["metadata"]["resourceVersion"].as_str().unwrap().parse::<u64>().unwrap();
            }
            Some("BOOKMARK") => {}
            other => panic!("unexpected {other:?}: {e}"),
        }
    };
    assert!(end_rv >= needed, "the end bookmark ({end_rv}) is at least the RV the client needed");
    // Pods are quiet: the state at the end bookmark is the LIST's.
    got.sort();
    want.sort();
    assert_eq!(got.len(), want.len());
    assert!(got == want, "the initial events equal the consistent LIST");
}

/// The real apiserver's client configuration: `KACHE_REAL_KUBECONFIG` at
/// `KACHE_REAL_CONTEXT` (the tier is on).
pub(crate) async fn real_config() -> kube::Config {
    let path = std::env::var_os("KACHE_REAL_KUBECONFIG").expect("the tier is on");
    let kc = kube::config::Kubeconfig::read_from(path).expect("kubeconfig");
    let options = kube::config::KubeConfigOptions { context: std::env::var("KACHE_REAL_CONTEXT").ok(), ..Default::default() };
    kube::Config::from_custom_kubeconfig(kc, &options).await.expect("config")
}

/// A kube-rs client of the real apiserver itself (not through kache).
async fn direct_client() -> kube::Client {
    kube::Client::try_from(real_config().await).expect("client")
}

fn key(o: &Value) -> String {
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
        let s = w.await.unwrap().expect("response headers arrive");
        assert_eq!(s.status, 200);
        open.push(s);
    }
    assert_eq!(k.serving.serve.cache_hits(), before, "passed through, not answered from cache");
}

/// A GET sent to the real apiserver itself, read to the end: (status, body).
async fn direct_get(client: &kube::Client, path: &str, accept: &str) -> (u16, bytes::Bytes) {
    use http_body_util::BodyExt;
    let req = http::Request::get(path).header(http::header::ACCEPT, accept).body(kube::client::Body::empty()).unwrap();
    let resp = client.send(req).await.unwrap_or_else(|e| panic!("direct GET {path}: {e}"));
    let status = resp.status().as_u16();
    (status, resp.into_body().collect().await.expect("direct body").to_bytes())
}

const META_LIST_JSON: &str = "application/json;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1,application/json";
const META_LIST_PB: &str = "application/vnd.kubernetes.protobuf;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1,application/json;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1,application/json";
const META_JSON: &str = "application/json;as=PartialObjectMetadata;g=meta.k8s.io;v=v1,application/json";
const META_PB: &str = "application/vnd.kubernetes.protobuf;as=PartialObjectMetadata;g=meta.k8s.io;v=v1,application/json";

/// A list answer with what must differ between two answers blanked: the list's
/// resourceVersion and continue token (JSON: re-serialized in its own key order; protobuf:
/// the ListMeta fields rewritten, every other byte kept).
fn normalized_list(body: &[u8]) -> Vec<u8> {
    if body.starts_with(b"k8s\0") {
        return normalized_pb_list(body);
    }
    let mut v: Value = serde_json::from_slice(body).unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(body)));
    if let Some(m) = v["metadata"].as_object_mut() {
        m.insert("resourceVersion".into(), json!("RV"));
        if m.contains_key("continue") {
            m.insert("continue".into(), json!("TOKEN"));
        }
    }
    serde_json::to_vec(&v).unwrap()
}

fn normalized_pb_list(body: &[u8]) -> Vec<u8> {
    use kache_test_wire::*;
    let (type_meta, raw) = envelope(body);
    let mut out = type_meta;
    let mut pos = 0;
    while let Some((field, start, payload)) = field(raw, &mut pos) {
        if field == 1 {
            // ListMeta: 2 resourceVersion and 3 continue blanked, the rest kept.
            let mut p = 0;
            while let Some((f, s, _)) = kache_test_wire::field(payload, &mut p) {
                match f {
                    2 | 3 => out.extend_from_slice(format!("<{f}>").as_bytes()),
                    _ => out.extend_from_slice(&payload[s..p]),
                }
            }
        } else {
            out.extend_from_slice(&raw[start..pos]);
        }
    }
    out
}

/// Just enough protobuf reading for the comparisons above.
mod kache_test_wire {
    /// The type meta bytes and the raw message of a `k8s\0` envelope.
    pub fn envelope(body: &[u8]) -> (Vec<u8>, &[u8]) {
        let unknown = &body[4..];
        let (mut pos, mut tm, mut raw) = (0, Vec::new(), &[][..]);
        while let Some((f, _, payload)) = field(unknown, &mut pos) {
            match f {
                1 => tm = payload.to_vec(),
                2 => raw = payload,
                _ => {}
            }
        }
        (tm, raw)
    }

    /// One length-delimited (or varint) field: (number, start of its key, payload).
    pub fn field<'a>(buf: &'a [u8], pos: &mut usize) -> Option<(u32, usize, &'a [u8])> {
        let start = *pos;
        let mut rest = buf.get(*pos..).filter(|r| !r.is_empty())?;
        let (f, wt) = prost::encoding::decode_key(&mut rest).ok()?;
        let payload = match wt {
            prost::encoding::WireType::LengthDelimited => {
                let len = prost::encoding::decode_varint(&mut rest).ok()? as usize;
                let p = rest.get(..len)?;
                rest = &rest[len..];
                p
            }
            _ => {
                let before = rest.len();
                prost::encoding::decode_varint(&mut rest).ok()?;
                &buf[buf.len() - before..buf.len() - rest.len()]
            }
        };
        *pos = buf.len() - rest.len();
        Some((f, start, payload))
    }
}

/// The lines of a JSON watch, or the frames of a protobuf one, sorted (initial events come
/// in key order from both, but need not be cut the same way).
fn watch_events(body: &[u8]) -> Vec<Vec<u8>> {
    let mut out = Vec::new();
    if body.first() == Some(&b'{') {
        out.extend(body.split(|b| *b == b'\n').filter(|l| !l.is_empty()).map(<[u8]>::to_vec));
    } else {
        let mut pos = 0;
        while pos + 4 <= body.len() {
            let n = u32::from_be_bytes(body[pos..pos + 4].try_into().unwrap()) as usize;
            out.push(body[pos..pos + 4 + n].to_vec());
            pos += 4 + n;
        }
    }
    out.sort();
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn real_metadata_lists_gets_and_watches_equal_the_apiservers_and_come_from_cache() {
    let Some(k) = real("real_metadata_reads", "pods,nodes").await else { return };
    let direct = direct_client().await;
    let one = k.api.get_ok(POPULATED_POD).await;
    let ns = one["items"][0]["metadata"]["namespace"].as_str().expect("the apiserver holds pods").to_string();
    let name = one["items"][0]["metadata"]["name"].as_str().unwrap().to_string();
    let label = one["items"][0]["metadata"]["labels"]
        .as_object()
        .and_then(|l| l.iter().next())
        .map(|(k, v)| format!("{k}%3D{}", v.as_str().unwrap()));
    let _w = Writer::start(&k, "rv-mover-5");
    let before = k.serving.serve.cache_hits();
    let mut asked = 0;
    let mut queries =
        vec!["".to_string(), "?resourceVersion=0".into(), "?limit=100".into(), "?fieldSelector=status.phase%3DRunning".into()];
    queries.extend(label.map(|l| format!("?labelSelector={l}")));
    let mut paths: Vec<String> = queries.iter().map(|q| format!("/api/v1/namespaces/{ns}/pods{q}")).collect();
    paths
        .extend(["", "?resourceVersion=0", "?limit=100", "?fieldSelector=spec.unschedulable%3Dfalse"].map(|q| format!("/api/v1/nodes{q}")));
    for accept in [META_LIST_JSON, META_LIST_PB] {
        for path in &paths {
            let via = k.api.request(http::Method::GET, path, Some(accept), None, Vec::new()).await;
            let (code, want) = direct_get(&direct, path, accept).await;
            asked += 1;
            assert_eq!((via.status, code), (200, 200), "{path} {accept}: {}", via.text());
            assert_eq!(
                via.header("content-type"),
                Some(if accept == META_LIST_PB { "application/vnd.kubernetes.protobuf" } else { "application/json" })
            );
            assert!(normalized_list(&via.body) == normalized_list(&want), "{path} as {accept}: the metadata lists differ");
        }
    }
    for accept in [META_JSON, META_PB] {
        let path = format!("/api/v1/namespaces/{ns}/pods/{name}");
        let via = k.api.request(http::Method::GET, &path, Some(accept), None, Vec::new()).await;
        let (_, want) = direct_get(&direct, &path, accept).await;
        asked += 1;
        assert!(via.body == want, "{path} as {accept}: {} vs {}", via.text(), String::from_utf8_lossy(&want));
        let path = format!("/api/v1/namespaces/{ns}/pods?watch=1&resourceVersion=0&timeoutSeconds=2");
        let via = k.api.request(http::Method::GET, &path, Some(accept), None, Vec::new()).await;
        let (_, want) = direct_get(&direct, &path, accept).await;
        asked += 1;
        let (via, want) = (watch_events(&via.body), watch_events(&want));
        assert!(!want.is_empty() && via == want, "{path} as {accept}: {} events through kache, {} direct", via.len(), want.len());
    }
    let hits = k.serving.serve.cache_hits() - before;
    eprintln!("{hits} of {asked} metadata reads from cache, every one equal to the apiserver's");
    assert_eq!(hits, asked, "every metadata read is answered from cache");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn real_a_kube_rs_metadata_watcher_syncs_from_cache_and_follows_changes() {
    use futures_util::StreamExt;
    use k8s_openapi::api::core::v1::Pod;
    use kube::core::PartialObjectMeta;
    use kube::runtime::watcher;
    let Some(k) = real("real_metadata_watcher", "pods").await else { return };
    let one = k.api.get_ok(POPULATED_POD).await;
    let ns = one["items"][0]["metadata"]["namespace"].as_str().expect("the apiserver holds pods").to_string();
    let name = one["items"][0]["metadata"]["name"].as_str().unwrap().to_string();
    let client = kube::Client::try_from(kube::Config::new(format!("http://{}", k.serving.addr).parse().unwrap())).unwrap();
    let before = k.serving.serve.cache_hits();
    let mut events = watcher(kube::Api::<PartialObjectMeta<Pod>>::namespaced(client, &ns), watcher::Config::default()).boxed();
    let end = deadline(120);
    let mut synced = 0usize;
    loop {
        let e = tokio::time::timeout_at(end, events.next()).await.expect("the watcher syncs in time").expect("stream").expect("event");
        match e {
            watcher::Event::InitApply(_) => synced += 1,
            watcher::Event::InitDone => break,
            _ => {}
        }
    }
    assert!(synced > 0, "the initial sync listed the namespace's pods");
    assert!(k.serving.serve.cache_hits() > before, "the sync was answered from cache");
    // Label changes to one pod, through kache; the watcher sees each.
    for i in 0..5 {
        let patch = json!({"metadata": {"labels": {"kache-metadata-watch": i.to_string()}}});
        let r = k.api.patch(&format!("/api/v1/namespaces/{ns}/pods/{name}"), &patch).await;
        k.api.must("label the pod", r).await;
        loop {
            let e = tokio::time::timeout_at(end, events.next()).await.expect("the change arrives in time").expect("stream").expect("event");
            if let watcher::Event::Apply(m) = e {
                let l = m.metadata.labels.unwrap_or_default();
                if m.metadata.name.as_deref() == Some(&name) && l.get("kache-metadata-watch") == Some(&i.to_string()) {
                    break;
                }
            }
        }
    }
    let r = k
        .api
        .patch(&format!("/api/v1/namespaces/{ns}/pods/{name}"), &json!({"metadata": {"labels": {"kache-metadata-watch": null}}}))
        .await;
    k.api.must("unlabel the pod", r).await;
    eprintln!("metadata watcher: {synced} pods synced, 5 of 5 changes seen");
}

/// kubectl's table output with the values of its relative-time columns (AGE, LAST SEEN,
/// FIRST SEEN, a running job's DURATION, which count from the moment of each answer) taken
/// out. Cells are cut at the offsets where the header's columns start (kubectl pads every
/// column to the widest cell, header included, with at least three spaces between).
fn ageless_table(out: &[u8]) -> Vec<Vec<String>> {
    const TIMES: [&str; 4] = ["AGE", "LAST SEEN", "FIRST SEEN", "DURATION"];
    let text = String::from_utf8_lossy(out);
    let mut lines = text.lines();
    let Some(header) = lines.next() else { return Vec::new() };
    // Column starts: the header's first character and each one after two or more spaces.
    let mut starts = vec![0usize];
    let b = header.as_bytes();
    for i in 2..b.len() {
        if b[i] != b' ' && b[i - 1] == b' ' && b[i - 2] == b' ' {
            starts.push(i);
        }
    }
    let cut = |l: &str| -> Vec<String> {
        (0..starts.len())
            .map(|c| {
                let end = starts.get(c + 1).copied().unwrap_or(l.len()).min(l.len());
                l.get(starts[c].min(l.len())..end).unwrap_or("").trim().to_string()
            })
            .collect()
    };
    let header = cut(header);
    let mut rows = vec![header.clone()];
    for l in lines {
        let mut cells = cut(l);
        for (i, h) in header.iter().enumerate() {
            if TIMES.contains(&h.as_str()) && !cells[i].is_empty() {
                cells[i] = h.clone();
            }
        }
        rows.push(cells);
    }
    rows
}

/// Objects of the kinds kache prints beyond pods and nodes, in the tier's namespace, with a
/// status set as their controllers would (none runs beside the test apiserver).
async fn printed_objects(k: &TestKache) {
    let labels = json!({"kache-print": "tier"});
    let template = |app: &str| {
        json!({"metadata": {"labels": {"app": app}}, "spec": {"restartPolicy": "Always", "containers": [
            {"name": "main", "image": format!("{app}:1")}, {"name": "side", "image": "side:2"}]}})
    };
    let job_template = json!({"spec": {"restartPolicy": "Never", "containers": [{"name": "work", "image": "busybox"}, {"name": "helper", "image": "helper:1"}]}});
    let objects: Vec<(&str, Value, Option<Value>)> = vec![
        (
            "/api/v1/namespaces/{NS}/services",
            json!({"apiVersion": "v1", "kind": "Service", "metadata": {"name": "printed-web", "labels": labels},
            "spec": {"selector": {"app": "web", "tier": "front"}, "ports": [{"name": "http", "port": 80}, {"name": "dns", "port": 53, "protocol": "UDP"}]}}),
            None,
        ),
        (
            "/api/v1/namespaces/{NS}/services",
            json!({"apiVersion": "v1", "kind": "Service", "metadata": {"name": "printed-lb", "labels": labels},
            "spec": {"type": "LoadBalancer", "selector": {"app": "lb"}, "ports": [{"name": "a", "port": 443}]}}),
            Some(json!({"status": {"loadBalancer": {"ingress": [{"ip": "203.0.113.9"}, {"hostname": "lb.example.com"}]}}})),
        ),
        (
            "/api/v1/namespaces/{NS}/services",
            json!({"apiVersion": "v1", "kind": "Service", "metadata": {"name": "printed-ext", "labels": labels},
            "spec": {"type": "ExternalName", "externalName": "db.example.com"}}),
            None,
        ),
        (
            "/apis/apps/v1/namespaces/{NS}/deployments",
            json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "printed", "labels": labels},
            "spec": {"replicas": 3, "selector": {"matchLabels": {"app": "web"}, "matchExpressions": [{"key": "env", "operator": "NotIn", "values": ["z", "a"]}]},
                "template": template("web")}}),
            Some(json!({"status": {"replicas": 3, "readyReplicas": 2, "updatedReplicas": 1, "availableReplicas": 2}})),
        ),
        (
            "/apis/apps/v1/namespaces/{NS}/replicasets",
            json!({"apiVersion": "apps/v1", "kind": "ReplicaSet", "metadata": {"name": "printed", "labels": labels},
            "spec": {"replicas": 2, "selector": {"matchLabels": {"app": "rs"}}, "template": template("rs")}}),
            Some(json!({"status": {"replicas": 2, "readyReplicas": 1}})),
        ),
        (
            "/apis/apps/v1/namespaces/{NS}/statefulsets",
            json!({"apiVersion": "apps/v1", "kind": "StatefulSet", "metadata": {"name": "printed", "labels": labels},
            "spec": {"replicas": 3, "serviceName": "printed-web", "selector": {"matchLabels": {"app": "sts"}}, "template": template("sts")}}),
            Some(json!({"status": {"replicas": 3, "readyReplicas": 2}})),
        ),
        (
            "/apis/apps/v1/namespaces/{NS}/daemonsets",
            json!({"apiVersion": "apps/v1", "kind": "DaemonSet", "metadata": {"name": "printed", "labels": labels},
            "spec": {"selector": {"matchLabels": {"app": "ds"}}, "template": {"metadata": {"labels": {"app": "ds"}},
                "spec": {"nodeSelector": {"disk": "ssd"}, "containers": [{"name": "agent", "image": "agent:1"}]}}}}),
            Some(
                json!({"status": {"desiredNumberScheduled": 5, "currentNumberScheduled": 4, "numberReady": 3, "updatedNumberScheduled": 2, "numberAvailable": 1, "numberMisscheduled": 0}}),
            ),
        ),
        (
            "/apis/batch/v1/namespaces/{NS}/jobs",
            json!({"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "printed-running", "labels": labels},
            "spec": {"completions": 3, "parallelism": 2, "template": job_template}}),
            Some(json!({"status": {"startTime": "2021-01-01T00:00:00Z", "succeeded": 1}})),
        ),
        (
            "/apis/batch/v1/namespaces/{NS}/jobs",
            json!({"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "printed-done", "labels": labels},
            "spec": {"template": job_template}}),
            Some(
                json!({"status": {"startTime": "2024-01-01T10:00:00Z", "completionTime": "2024-01-01T10:03:25Z", "succeeded": 1, "conditions": [
                {"type": "SuccessCriteriaMet", "status": "True", "lastTransitionTime": "2024-01-01T10:03:25Z"},
                {"type": "Complete", "status": "True", "lastTransitionTime": "2024-01-01T10:03:25Z"}]}}),
            ),
        ),
        (
            "/api/v1/namespaces/{NS}/events",
            json!({"apiVersion": "v1", "kind": "Event", "metadata": {"name": "printed.1", "labels": labels},
            "involvedObject": {"kind": "Pod", "name": "web-0", "namespace": NS, "fieldPath": "spec.containers{web}"}, "reason": "BackOff",
            "message": "Back-off restarting", "type": "Warning", "count": 7, "firstTimestamp": "2021-03-04T05:06:07Z", "lastTimestamp": "2024-01-02T03:04:05Z",
            "source": {"component": "kubelet", "host": "node-0001"}}),
            None,
        ),
        (
            "/api/v1/namespaces/{NS}/events",
            json!({"apiVersion": "v1", "kind": "Event", "metadata": {"name": "printed.2", "labels": labels},
            "involvedObject": {"kind": "Deployment", "name": "printed", "namespace": NS}, "reason": "ScalingReplicaSet", "message": "Scaled up", "type": "Normal",
            "eventTime": "2022-05-06T07:08:09.123456Z", "series": {"count": 4, "lastObservedTime": "2023-06-07T08:09:10.654321Z"},
            "reportingComponent": "deployment-controller", "reportingInstance": "cm-1", "action": "Scale"}),
            None,
        ),
        (
            "/apis/discovery.k8s.io/v1/namespaces/{NS}/endpointslices",
            json!({"apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice",
            "metadata": {"name": "printed", "labels": {"kache-print": "tier", "kubernetes.io/service-name": "printed-web"}}, "addressType": "IPv4",
            "ports": [{"name": "http", "port": 80}, {"name": "named"}],
            "endpoints": [{"addresses": ["10.0.0.1"]}, {"addresses": ["10.0.0.2"]}, {"addresses": ["10.0.0.3"]}, {"addresses": ["10.0.0.4"]}]}),
            None,
        ),
        (
            "/api/v1/namespaces/{NS}/persistentvolumeclaims",
            json!({"apiVersion": "v1", "kind": "PersistentVolumeClaim", "metadata": {"name": "printed-bound", "labels": labels},
            "spec": {"accessModes": ["ReadWriteOnce", "ReadWriteMany"], "resources": {"requests": {"storage": "1Gi"}}, "volumeName": "pv-printed", "storageClassName": "fast"}}),
            Some(json!({"status": {"phase": "Bound", "capacity": {"storage": "2Gi"}, "accessModes": ["ReadWriteMany", "ReadOnlyMany"]}})),
        ),
        (
            "/api/v1/namespaces/{NS}/persistentvolumeclaims",
            json!({"apiVersion": "v1", "kind": "PersistentVolumeClaim", "metadata": {"name": "printed-pending", "labels": labels},
            "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Gi"}}, "storageClassName": "slow", "volumeMode": "Block"}}),
            None,
        ),
    ];
    for (path, v, status) in objects {
        let path = path.replace("{NS}", NS);
        let name = v["metadata"]["name"].as_str().unwrap().to_string();
        let r = k.api.post(&path, &v).await;
        assert!(r.status == 201 || r.status == 409, "{path} {name}: {}", r.text());
        if let Some(status) = status {
            let r = k.api.patch(&format!("{path}/{name}/status"), &status).await;
            k.api.must(&format!("status of {path} {name}"), r).await;
        }
    }
}

/// `kubectl ARGS` run directly against the real apiserver (its kubeconfig and context).
fn direct_kubectl(cache: &std::path::Path, args: &[&str]) -> std::process::Command {
    let config = std::env::var("KACHE_REAL_KUBECONFIG").expect("the real tier is on");
    let mut c = crate::support::kubectl_command(std::path::Path::new(&config), cache, args);
    if let Some(context) = std::env::var("KACHE_REAL_CONTEXT").ok().filter(|c| !c.is_empty()) {
        c.arg("--context").arg(context);
    }
    c
}

/// Run `kubectl ARGS` through kache and directly; both succeed and print the same table
/// (ages aside), with rows. Returns the requests kache answered from cache meanwhile, and
/// the lines printed.
async fn prints_the_same(k: &TestKache, via: &crate::support::Kubectl, cache: &std::path::Path, args: &[&str]) -> (u64, usize) {
    let before = k.serving.serve.cache_hits();
    let got = via.run(args).await;
    let hits = k.serving.serve.cache_hits() - before;
    let mut direct = direct_kubectl(cache, args);
    let want = tokio::task::spawn_blocking(move || direct.output()).await.unwrap().expect("kubectl direct");
    let what = format!("kubectl {}", args.join(" "));
    assert!(got.status.success() && want.status.success(), "{what}: {}", String::from_utf8_lossy(&got.stderr));
    let (got_rows, want_rows) = (ageless_table(&got.stdout), ageless_table(&want.stdout));
    assert!(want_rows.len() > 1, "{what}: the apiserver printed rows");
    assert!(
        got_rows == want_rows,
        "{what}: printed differently\nthrough kache:\n{}\ndirect:\n{}",
        String::from_utf8_lossy(&got.stdout),
        String::from_utf8_lossy(&want.stdout)
    );
    (hits, want_rows.len())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn real_kubectl_get_prints_what_the_apiserver_prints_from_cache() {
    let preload = "pods,nodes,namespaces,configmaps,secrets,serviceaccounts,services,deployments,replicasets,statefulsets,daemonsets,jobs,events,events.events.k8s.io,endpointslices,persistentvolumeclaims,roles,clusterroles";
    let Some(k) = real("real_kubectl_get", preload).await else { return };
    let one = k.api.get_ok(POPULATED_POD).await;
    let ns = one["items"][0]["metadata"]["namespace"].as_str().expect("the apiserver holds pods").to_string();
    let name = one["items"][0]["metadata"]["name"].as_str().unwrap().to_string();
    let node = one["items"][0]["spec"]["nodeName"].as_str().unwrap_or("node-0000").to_string();
    // A Secret and a ServiceAccount to print (a cluster without a controller-manager has none).
    let secret = json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "printed"}, "type": "Opaque", "data": {"a": "eA==", "b": "eQ=="}});
    let sa = json!({"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": "printed"}});
    for (path, v) in [("secrets", secret), ("serviceaccounts", sa)] {
        let r = k.api.post(&format!("/api/v1/namespaces/{NS}/{path}"), &v).await;
        assert!(r.status == 201 || r.status == 409, "{path}: {}", r.text());
    }
    printed_objects(&k).await;
    let via = crate::support::Kubectl::new(&format!("http://{}", k.serving.addr));
    let cache = tempfile::tempdir().unwrap();
    let field = format!("spec.nodeName={node}");
    let mut commands: Vec<Vec<&str>> = vec![
        vec!["get", "pods", "-n", &ns],
        vec!["get", "pods", "-n", &ns, "-o", "wide"],
        vec!["get", "pods", "-n", &ns, "--chunk-size=50"],
        vec!["get", "pods", "-A", "--field-selector", &field, "-o", "wide"],
        vec!["get", "pods", "-n", &ns, "-l", "app=analytics"],
        vec!["get", "pod", "-n", &ns, &name],
        vec!["get", "pod", "-n", &ns, &name, "-o", "wide"],
        vec!["get", "nodes"],
        vec!["get", "nodes", "-o", "wide"],
        vec!["get", "node", &node],
        vec!["get", "namespaces"],
        vec!["get", "configmaps", "-A"],
        vec!["get", "secrets", "-A"],
        vec!["get", "serviceaccounts", "-A"],
    ];
    for kind in [
        "services",
        "deployments",
        "replicasets",
        "statefulsets",
        "daemonsets",
        "jobs",
        "events",
        "endpointslices",
        "persistentvolumeclaims",
    ] {
        commands.push(vec!["get", kind, "-n", NS]);
        commands.push(vec!["get", kind, "-n", NS, "-o", "wide"]);
        commands.push(vec!["get", kind, "-A", "-l", "kache-print=tier"]);
        commands.push(vec!["get", kind, "-A", "-o", "wide"]);
    }
    commands.push(vec!["get", "deployment", "printed", "-n", NS, "-o", "wide"]);
    commands.push(vec!["get", "service", "printed-lb", "-n", NS]);
    // Kinds without a printer: the apiserver's default table (Name, Created At).
    commands.push(vec!["get", "clusterroles"]);
    commands.push(vec!["get", "roles", "-A"]);
    let mut served = 0;
    for args in &commands {
        let (hits, _) = prints_the_same(&k, &via, cache.path(), args).await;
        let what = format!("kubectl {}", args.join(" "));
        // A consistent read of events is the upstream's: kache cannot show its events cache
        // current (see the README); the Tables of events at resourceVersion=0 are checked below.
        if args[1] != "events" {
            assert!(hits >= 1, "{what}: answered from cache");
            served += 1;
        }
    }
    eprintln!("{served} of {} kubectl get commands printed what the apiserver prints, answered from cache", commands.len());
    // Events (core and events.k8s.io) as Tables from cache, at resourceVersion=0.
    let direct = direct_client().await;
    let table = "application/json;as=Table;v=v1;g=meta.k8s.io";
    for base in ["/api/v1", "/apis/events.k8s.io/v1"] {
        let path = format!("{base}/namespaces/{NS}/events?labelSelector=kache-print%3Dtier&resourceVersion=0");
        let before = k.serving.serve.cache_hits();
        let via = k.api.request(http::Method::GET, &path, Some(table), None, Vec::new()).await;
        assert_eq!(k.serving.serve.cache_hits() - before, 1, "{path}: answered from cache");
        let (code, want) = direct_get(&direct, &path, table).await;
        assert_eq!((via.status, code), (200, 200), "{path}: {}", via.text());
        let cells = |v: &Value| v["rows"].as_array().unwrap().iter().map(|r| r["cells"].clone()).collect::<Vec<_>>();
        let (got, want) = (cells(&via.json()), cells(&serde_json::from_slice(&want).unwrap()));
        assert_eq!(got.len(), 2, "{path}: the tier's events");
        // Their times are years back: the relative times print the same at either answer.
        assert_eq!(got, want, "{path}: the apiserver's cells");
    }
    eprintln!("2 of 2 event Tables at resourceVersion=0 printed what the apiserver prints, answered from cache");
}

/// Lines a running command prints, collected as they come.
fn collect_lines(mut child: std::process::Child) -> (std::process::Child, Arc<std::sync::Mutex<Vec<String>>>) {
    use std::io::BufRead as _;
    let lines = Arc::new(std::sync::Mutex::new(Vec::new()));
    let out = child.stdout.take().expect("piped stdout");
    let sink = lines.clone();
    std::thread::spawn(move || {
        for l in std::io::BufReader::new(out).lines().map_while(Result::ok) {
            sink.lock().unwrap().push(l);
        }
    });
    (child, lines)
}

/// Wait (up to a minute, so a broken watch fails rather than hangs) until `lines` holds `n`.
async fn until_lines(lines: &std::sync::Mutex<Vec<String>>, n: usize, what: &str) {
    for _ in 0..600 {
        if lines.lock().unwrap().len() >= n {
            return;
        }
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    let got = lines.lock().unwrap().clone();
    panic!("{what}: {} lines, waited for {n}: {got:?}", got.len());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn real_kubectl_get_watch_prints_what_the_apiserver_prints_from_cache() {
    let Some(k) = real("real_kubectl_get_watch", "pods,configmaps").await else { return };
    // No controller-manager: the namespace may lack the default ServiceAccount a pod needs.
    let sa = json!({"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": "default"}});
    k.api.post(&format!("/api/v1/namespaces/{NS}/serviceaccounts"), &sa).await;
    let via = crate::support::Kubectl::new(&format!("http://{}", k.serving.addr));
    let cache = tempfile::tempdir().unwrap();
    let suffix = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_millis();
    // One pod at least, so that both kubectls print their initial rows before the changes.
    let resident = json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": format!("resident-{suffix}")},
        "spec": {"containers": [{"name": "c", "image": "registry.example/app:1"}]}});
    assert_eq!(k.api.post(&format!("/api/v1/namespaces/{NS}/pods"), &resident).await.status, 201);
    for kind in ["configmaps", "pods"] {
        let args = ["get", kind, "-n", NS, "-w", "--output-watch-events"];
        let listed = k.api.get_ok(&format!("/api/v1/namespaces/{NS}/{kind}")).await["items"].as_array().unwrap().len();
        let before = k.serving.serve.cache_hits();
        let mut through = via.command(&args);
        let mut direct = direct_kubectl(cache.path(), &args);
        let (mut a, got) = collect_lines(through.stdout(std::process::Stdio::piped()).spawn().expect("kubectl through kache"));
        let (mut b, want) = collect_lines(direct.stdout(std::process::Stdio::piped()).spawn().expect("kubectl direct"));
        // The header and the initial rows: both watches are open from their list's RV.
        until_lines(&got, 1 + listed, "through kache").await;
        until_lines(&want, 1 + listed, "direct").await;
        let name = format!("watched-{suffix}");
        let changes = match kind {
            "configmaps" => {
                let cm = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name}, "data": {"a": "1", "b": "2"}});
                assert_eq!(k.api.post(&format!("/api/v1/namespaces/{NS}/configmaps"), &cm).await.status, 201);
                let path = format!("/api/v1/namespaces/{NS}/configmaps/{name}");
                assert_eq!(k.api.patch(&path, &json!({"data": {"c": "3"}})).await.status, 200);
                assert_eq!(k.api.delete(&path).await.status, 200);
                3
            }
            _ => {
                let pod = json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name},
                    "spec": {"containers": [{"name": "c", "image": "registry.example/app:1"}]}});
                let r = k.api.post(&format!("/api/v1/namespaces/{NS}/pods"), &pod).await;
                assert_eq!(r.status, 201, "{}", r.text());
                let path = format!("/api/v1/namespaces/{NS}/pods/{name}");
                let status = json!({"status": {"phase": "Running", "podIP": "10.9.8.7", "containerStatuses": [{"name": "c",
                    "image": "registry.example/app:1", "imageID": "", "ready": true, "restartCount": 1, "started": true,
                    "state": {"running": {"startedAt": "2026-01-01T00:00:00Z"}}}]}});
                assert_eq!(k.api.patch(&format!("{path}/status"), &status).await.status, 200);
                assert_eq!(k.api.delete(&format!("{path}?gracePeriodSeconds=0")).await.status, 200);
                // ADDED, MODIFIED (Running), MODIFIED (Terminating), DELETED.
                4
            }
        };
        until_lines(&got, 1 + listed + changes, "through kache").await;
        until_lines(&want, 1 + listed + changes, "direct").await;
        let _ = (a.kill(), b.kill(), a.wait(), b.wait());
        let (got, want) = (got.lock().unwrap().join("\n"), want.lock().unwrap().join("\n"));
        let (got_rows, want_rows) = (ageless_table(got.as_bytes()), ageless_table(want.as_bytes()));
        assert!(got_rows == want_rows, "kubectl {}: printed differently\nthrough kache:\n{got}\ndirect:\n{want}", args.join(" "));
        let hits = k.serving.serve.cache_hits() - before;
        assert!(hits >= 2, "kubectl {}: the LIST and the watch answered from cache ({hits})", args.join(" "));
        eprintln!("kubectl {}: {} lines equal, {hits} requests from cache", args.join(" "), want_rows.len());
    }
    k.api.delete(&format!("/api/v1/namespaces/{NS}/pods/resident-{suffix}?gracePeriodSeconds=0")).await;
}

/// The namespace of the custom resources the CRD test makes (its objects are deleted one by
/// one; the namespace stays, as none is emptied without a controller-manager).
const CRD_NS: &str = "kache-crd-real";

/// The CRDs of `tools/crd_fixtures/crds.yaml` (as captured in `testdata/crd`), created
/// in the real apiserver if it lacks them, and established.
async fn crds(direct: &kube::Client) {
    use http_body_util::BodyExt;
    for plural in ["widgets", "plains"] {
        let captured = crate::support::crd_golden(&format!("crd-{plural}.json"));
        let name = captured["metadata"]["name"].as_str().unwrap().to_string();
        let crd = json!({"apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
            "metadata": {"name": name}, "spec": captured["spec"]});
        let req = http::Request::post("/apis/apiextensions.k8s.io/v1/customresourcedefinitions")
            .header(http::header::CONTENT_TYPE, "application/json")
            .body(kube::client::Body::from(crd.to_string().into_bytes()))
            .unwrap();
        let resp = direct.send(req).await.expect("create the CRD");
        let code = resp.status().as_u16();
        let body = resp.into_body().collect().await.unwrap().to_bytes();
        assert!(code == 201 || code == 409, "CRD {name}: {code} {}", String::from_utf8_lossy(&body));
        // Established within a minute (at once when it existed).
        let mut established = false;
        for _ in 0..600 {
            let (_, body) =
                direct_get(direct, &format!("/apis/apiextensions.k8s.io/v1/customresourcedefinitions/{name}"), "application/json").await;
            let v: Value = serde_json::from_slice(&body).unwrap();
            let conditions = v["status"]["conditions"].as_array().cloned().unwrap_or_default();
            if conditions.iter().any(|c| c["type"] == "Established" && c["status"] == "True") {
                established = true;
                break;
            }
            tokio::time::sleep(std::time::Duration::from_millis(100)).await;
        }
        assert!(established, "CRD {name} established");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn real_kubectl_get_of_custom_resources_prints_their_printer_columns_and_metadata_from_cache() {
    if std::env::var_os("KACHE_REAL_KUBECONFIG").is_none() {
        eprintln!("real_kubectl_get_crd: skipped, KACHE_REAL_KUBECONFIG is not set (see tests/it/real_apiserver.rs)");
        return;
    }
    let direct = direct_client().await;
    crds(&direct).await;
    let Some(k) = real("real_kubectl_get_crd", "widgets.crd.example.com,plains.crd.example.com").await else { return };
    let ns = json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": CRD_NS}});
    let r = k.api.post("/api/v1/namespaces", &ns).await;
    assert!(r.status == 201 || r.status == 409, "namespace {CRD_NS}: {}", r.text());
    let widgets = format!("/apis/crd.example.com/v1/namespaces/{CRD_NS}/widgets");
    let suffix = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_millis();
    // Values of every column type, wrong types, missing and nested values, a finalizer and
    // labels and annotations out of ObjectMeta's order.
    let objects = [
        json!({"metadata": {"labels": {"app": "w", "kache-crd": "real"}, "annotations": {"note": "<a> & b"}, "name": format!("w1-{suffix}")},
            "spec": {"replicas": 3, "ratio": 0.5, "owner": {"name": "alice"}, "tags": ["a", "b<c>"], "limits": {"mem": "2Gi", "cpu": "1", "nested": {"x": [1, 2.5, true, null]}}},
            "status": {"phase": "Running", "ready": true, "startedAt": "2026-01-01T00:00:00Z",
                "conditions": [{"type": "Synced", "status": "False"}, {"type": "Ready", "status": "True"}]}}),
        json!({"metadata": {"name": format!("w2-{suffix}"), "labels": {"app": "v", "kache-crd": "real"}},
            "spec": {"replicas": "three", "ratio": 7, "tags": [], "limits": {}, "owner": {}},
            "status": {"ready": "yes", "startedAt": "not-a-date"}}),
        json!({"metadata": {"name": format!("w3-{suffix}"), "labels": {"kache-crd": "real"}},
            "spec": {"replicas": 2.7, "ratio": 1e21, "owner": {"name": "<b>&amp;\u{e9}"}, "tags": [{"k": "v"}]},
            "status": {"phase": 42, "ready": false, "startedAt": "", "conditions": [{"type": "Ready"}]}}),
        json!({"metadata": {"name": format!("w4-{suffix}"), "labels": {"kache-crd": "real"}},
            "spec": {"replicas": 9007199254740993u64, "ratio": 0.000001234, "owner": {"name": 12.5}, "tags": "not-a-list"},
            "status": {"phase": ["x", true], "startedAt": "2026-03-04T05:06:07+02:00"}}),
    ];
    let mut names = Vec::new();
    for mut o in objects {
        o["apiVersion"] = json!("crd.example.com/v1");
        o["kind"] = json!("Widget");
        names.push(o["metadata"]["name"].as_str().unwrap().to_string());
        let r = k.api.post(&widgets, &o).await;
        assert_eq!(r.status, 201, "{}", r.text());
    }
    let plain = json!({"apiVersion": "crd.example.com/v1", "kind": "Plain", "metadata": {"name": format!("kache-crd-real-{suffix}"), "labels": {"kache-crd": "real"}}});
    assert_eq!(k.api.post("/apis/crd.example.com/v1/plains", &plain).await.status, 201);

    let via = crate::support::Kubectl::new(&format!("http://{}", k.serving.addr));
    let cache = tempfile::tempdir().unwrap();
    let commands: Vec<Vec<&str>> = vec![
        vec!["get", "widgets", "-n", CRD_NS],
        vec!["get", "widgets", "-n", CRD_NS, "-o", "wide"],
        vec!["get", "widgets.crd.example.com", "-A"],
        vec!["get", "widgets", "-A", "-o", "wide", "-l", "kache-crd=real"],
        vec!["get", "widgets", "-n", CRD_NS, "-l", "app in (v,w)"],
        vec!["get", "widget", "-n", CRD_NS, &names[0], "-o", "wide"],
        vec!["get", "plains", "-l", "kache-crd=real"],
        vec!["get", "plains", "-o", "wide"],
    ];
    for args in &commands {
        let (hits, rows) = prints_the_same(&k, &via, cache.path(), args).await;
        let what = format!("kubectl {}", args.join(" "));
        assert!(hits >= 1, "{what}: answered from cache");
        eprintln!("{what}: {} rows equal, {hits} from cache", rows - 1);
    }

    // Metadata LIST and GET: byte for byte (the list's resourceVersion aside), from cache.
    for (path, accept) in [
        (widgets.clone(), META_LIST_JSON),
        (format!("{widgets}?labelSelector=app%3Dw"), META_LIST_JSON),
        ("/apis/crd.example.com/v1/widgets?limit=2".to_string(), META_LIST_JSON),
        ("/apis/crd.example.com/v1/plains".to_string(), META_LIST_JSON),
        (format!("{widgets}/{}", names[0]), META_JSON),
        (format!("{widgets}/{}", names[2]), META_JSON),
    ] {
        let before = k.serving.serve.cache_hits();
        let got = k.api.request(http::Method::GET, &path, Some(accept), None, Vec::new()).await;
        assert_eq!(k.serving.serve.cache_hits() - before, 1, "{path}: answered from cache");
        let (code, want) = direct_get(&direct, &path, accept).await;
        assert_eq!((got.status, code), (200, 200), "{path}: {}", got.text());
        if accept == META_JSON {
            assert_eq!(got.text(), String::from_utf8_lossy(&want), "{path}");
        } else {
            assert_eq!(
                String::from_utf8(normalized_list(&got.body)).unwrap(),
                String::from_utf8(normalized_list(&want)).unwrap(),
                "{path}"
            );
        }
        eprintln!("{path} as {}: equal, from cache", accept.split(';').nth(1).unwrap_or(""));
    }
    // The protobuf metadata view of custom resources is the upstream's (kache holds them in
    // JSON only), and equal to it.
    let before = k.serving.serve.cache_hits();
    let got = k.api.request(http::Method::GET, &widgets, Some(META_LIST_PB), None, Vec::new()).await;
    assert_eq!(k.serving.serve.cache_hits(), before, "a protobuf metadata LIST of custom resources passes through");
    let (_, want) = direct_get(&direct, &widgets, META_LIST_PB).await;
    assert_eq!(normalized_list(&got.body), normalized_list(&want));

    // kubectl get -w: the LIST and the watch from cache, the changes printed as directly.
    let args = ["get", "widgets", "-n", CRD_NS, "-w", "--output-watch-events", "-o", "wide"];
    let listed = names.len();
    let before = k.serving.serve.cache_hits();
    let mut through = via.command(&args);
    let mut direct_cmd = direct_kubectl(cache.path(), &args);
    let (mut a, got) = collect_lines(through.stdout(std::process::Stdio::piped()).spawn().expect("kubectl through kache"));
    let (mut b, want) = collect_lines(direct_cmd.stdout(std::process::Stdio::piped()).spawn().expect("kubectl direct"));
    until_lines(&got, 1 + listed, "through kache").await;
    until_lines(&want, 1 + listed, "direct").await;
    let name = format!("watched-{suffix}");
    let w = json!({"apiVersion": "crd.example.com/v1", "kind": "Widget", "metadata": {"name": name, "labels": {"app": "w"}},
        "spec": {"replicas": 1, "tags": ["x"]}, "status": {"phase": "Pending", "startedAt": "2026-02-02T02:02:02Z"}});
    assert_eq!(k.api.post(&widgets, &w).await.status, 201);
    let path = format!("{widgets}/{name}");
    assert_eq!(k.api.patch(&path, &json!({"spec": {"replicas": 5}, "status": {"phase": "Running", "ready": true}})).await.status, 200);
    assert_eq!(k.api.delete(&path).await.status, 200);
    until_lines(&got, 1 + listed + 3, "through kache").await;
    until_lines(&want, 1 + listed + 3, "direct").await;
    let _ = (a.kill(), b.kill(), a.wait(), b.wait());
    let (got, want) = (got.lock().unwrap().join("\n"), want.lock().unwrap().join("\n"));
    let (got_rows, want_rows) = (ageless_table(got.as_bytes()), ageless_table(want.as_bytes()));
    assert!(got_rows == want_rows, "kubectl {}: printed differently\nthrough kache:\n{got}\ndirect:\n{want}", args.join(" "));
    let hits = k.serving.serve.cache_hits() - before;
    assert!(hits >= 2, "kubectl {}: the LIST and the watch answered from cache ({hits})", args.join(" "));
    eprintln!("kubectl {}: {} lines equal, {hits} requests from cache", args.join(" "), want_rows.len());

    for n in &names {
        k.api.delete(&format!("{widgets}/{n}")).await;
    }
    k.api.delete(&format!("/apis/crd.example.com/v1/plains/kache-crd-real-{suffix}")).await;
}

/// The CRD `gizmos.crd.example.com` with `columns` as its version's printer columns (none
/// when empty), created or updated through `direct`.
async fn gizmos_crd(direct: &kube::Client, columns: Value) {
    use http_body_util::BodyExt;
    let mut version = json!({"name": "v1", "served": true, "storage": true,
        "schema": {"openAPIV3Schema": {"type": "object", "x-kubernetes-preserve-unknown-fields": true}}});
    if columns.as_array().is_some_and(|c| !c.is_empty()) {
        version["additionalPrinterColumns"] = columns;
    }
    let crd = json!({"apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition", "metadata": {"name": "gizmos.crd.example.com"},
        "spec": {"group": "crd.example.com", "scope": "Cluster", "names": {"plural": "gizmos", "singular": "gizmo", "kind": "Gizmo"}, "versions": [version]}});
    let base = "/apis/apiextensions.k8s.io/v1/customresourcedefinitions";
    let send = |req: http::Request<kube::client::Body>| async move {
        let resp = direct.send(req).await.expect("CRD request");
        (resp.status().as_u16(), resp.into_body().collect().await.unwrap().to_bytes())
    };
    let post = http::Request::post(base)
        .header(http::header::CONTENT_TYPE, "application/json")
        .body(kube::client::Body::from(crd.to_string().into_bytes()))
        .unwrap();
    let (mut code, mut body) = send(post).await;
    if code == 409 {
        let patch = json!({"spec": {"versions": crd["spec"]["versions"]}});
        let req = http::Request::patch(format!("{base}/gizmos.crd.example.com"))
            .header(http::header::CONTENT_TYPE, "application/merge-patch+json")
            .body(kube::client::Body::from(patch.to_string().into_bytes()))
            .unwrap();
        (code, body) = send(req).await;
    }
    assert!(code == 200 || code == 201, "CRD gizmos: {code} {}", String::from_utf8_lossy(&body));
    for _ in 0..600 {
        let (_, body) = direct_get(direct, &format!("{base}/gizmos.crd.example.com"), "application/json").await;
        let v: Value = serde_json::from_slice(&body).unwrap();
        if v["status"]["conditions"].as_array().into_iter().flatten().any(|c| c["type"] == "Established" && c["status"] == "True") {
            return;
        }
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    panic!("CRD gizmos not established");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn real_a_crds_changed_printer_columns_are_printed_from_cache_once_its_watch_ends() {
    if std::env::var_os("KACHE_REAL_KUBECONFIG").is_none() {
        eprintln!("real_crd_columns_change: skipped, KACHE_REAL_KUBECONFIG is not set (see tests/it/real_apiserver.rs)");
        return;
    }
    let direct = direct_client().await;
    gizmos_crd(&direct, json!([])).await;
    let Some(k) = real("real_crd_columns_change", "gizmos.crd.example.com").await else { return };
    let suffix = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_millis();
    let name = format!("kache-crd-gizmo-{suffix}");
    let g = json!({"apiVersion": "crd.example.com/v1", "kind": "Gizmo", "metadata": {"name": name}, "spec": {"size": 7, "color": "red"}});
    assert_eq!(k.api.post("/apis/crd.example.com/v1/gizmos", &g).await.status, 201);
    let table = "application/json;as=Table;v=v1;g=meta.k8s.io";
    let path = "/apis/crd.example.com/v1/gizmos";
    let names =
        |v: &Value| v["columnDefinitions"].as_array().unwrap().iter().map(|c| c["name"].as_str().unwrap().to_string()).collect::<Vec<_>>();
    let before = k.serving.serve.cache_hits();
    let got = k.api.request(http::Method::GET, path, Some(table), None, Vec::new()).await;
    assert_eq!(k.serving.serve.cache_hits() - before, 1, "the default table from cache");
    assert_eq!(names(&got.json()), ["Name", "Age"]);
    // New columns: the apiserver ends the gizmos' watches, kache reads the CRD again and
    // relists; until then its Tables keep the old columns (or pass through while it lists).
    gizmos_crd(&direct, json!([{"name": "Size", "type": "integer", "jsonPath": ".spec.size"}, {"name": "Color", "type": "string", "jsonPath": ".spec.color", "priority": 1}])).await;
    let mut seen = false;
    for _ in 0..600 {
        let before = k.serving.serve.cache_hits();
        let got = k.api.request(http::Method::GET, path, Some(table), None, Vec::new()).await;
        if k.serving.serve.cache_hits() - before == 1 && names(&got.json()) == ["Name", "Size", "Color"] {
            let (_, want) = direct_get(&direct, path, table).await;
            let cells =
                |v: &Value| v["rows"].as_array().unwrap().iter().map(|r| r["cells"].as_array().unwrap().clone()).collect::<Vec<_>>();
            let (got, want): (Value, Value) = (got.json(), serde_json::from_slice(&want).unwrap());
            assert_eq!(got["columnDefinitions"], want["columnDefinitions"]);
            let without_age = |rows: Vec<Vec<Value>>| {
                rows.into_iter()
                    .map(|mut r| {
                        r.truncate(3);
                        r
                    })
                    .collect::<Vec<_>>()
            };
            assert_eq!(without_age(cells(&got)), without_age(cells(&want)));
            assert!(cells(&got).iter().any(|r| r[0] == json!(name) && r[1] == json!(7) && r[2] == json!("red")), "{got}");
            seen = true;
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    assert!(seen, "kache printed the CRD's new columns from cache within a minute");
    eprintln!("a CRD's new printer columns printed from cache, as the apiserver prints them");
    gizmos_crd(&direct, json!([])).await;
    k.api.delete(&format!("{path}/{name}")).await;
}

/// The simulator's fault relay in front of the real apiserver (a black-holed network, as a
/// stopped apiserver looks from outside): found hung within seconds, cached reads keep
/// answering, a write gets kache's 503 at once, and all is well again on resume. (Stopping
/// and restarting a real apiserver process is `tools/real_fault_run.py`.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn real_a_black_holed_apiserver_is_found_and_cached_reads_keep_answering() {
    if std::env::var_os("KACHE_REAL_KUBECONFIG").is_none() {
        eprintln!("real_a_black_holed_apiserver: skipped, KACHE_REAL_KUBECONFIG is not set (see tests/it/real_apiserver.rs)");
        return;
    }
    kache::upstream::install_crypto_provider();
    let mut config = real_config().await;
    let authority = config.cluster_url.authority().expect("server address").to_string();
    let target = tokio::net::lookup_host(&authority).await.unwrap().next().expect("server resolves");
    let relay = kache::sim::fault::FaultProxy::start("127.0.0.1:0", target).await.unwrap();
    config.cluster_url = format!("https://{}", relay.addr).parse().unwrap();
    let up = Upstream::new(&config).expect("upstream");
    let k = kache_over(up, &["--preload", "configmaps", "--upstream-timeout-seconds", "2"]).await;
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
    let checks = k.serving.serve.readiness();
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
