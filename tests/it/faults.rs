//! kache through upstream faults, driven by the simulator's fault switches
//! (`kache::sim::fault`): a relay between kache and the simulator that pauses (connections
//! accepted, nothing answered), drops connections and goes down, and the simulator's own
//! restart (fresh window: 410 for old resourceVersions, a 429 "(re)initializing" warm-up)
//! and slow answers. What must hold:
//!
//! - a hung, dead or slow upstream is found by the health monitor and shown as a `[-]upstream`
//!   line in `/readyz?verbose` (and cleared when it is back);
//! - reads kache holds (RV=0) keep answering from memory; what needs the upstream gets a
//!   Status (503 or 504 with Retry-After) within kache's deadline instead of hanging;
//! - after dropped connections or a restart, kache's caches come back and clients (a kube-rs
//!   reflector, a raw watch) converge without losing, repeating or reordering events;
//! - one client's passed-through watches cannot take the upstream from reviews and other
//!   clients, and are bounded per client; one it has stopped reading holds only its own
//!   stream's window of the upstream connection, not the connection;
//! - a client's malformed body is its own 400, not an upstream outage.
//!
//! Nothing here sleeps for a fixed time or asserts a duration: tests wait on kache's health
//! channel, on cache progress, or poll a condition with a bound.

use crate::support::auth::{SecureKache, SecureSim, Who};
use crate::support::{deadline, eventually, faulty, keys_rvs, list_rv, obj_rv, Next, QUICK};
use http::Method;
use k8s_openapi::api::core::v1::Pod;
use kache::upstream::health::Health;
use serde_json::{json, Value};
use std::collections::BTreeMap;
use std::time::Duration;

/// A watch in this view is always passed through (kache serves Tables for GET and LIST only).
const TABLE: &str = "application/json;as=Table;v=v1;g=meta.k8s.io";
const SIM: &[&str] = &["--nodes", "5", "--pods", "60", "--namespaces", "3", "--bookmark-interval", "1"];
/// Short deadlines, so each test's outage is found and answered quickly.
const DEADLINES: &[&str] = &["--upstream-timeout", "2", "--passthrough-timeout", "2"];

fn flags(extra: &[&'static str]) -> Vec<&'static str> {
    let mut f = vec!["--preload", "pods"];
    f.extend_from_slice(DEADLINES);
    f.extend_from_slice(extra);
    f
}

/// A failed answer that is a Status with a retry hint (503 or 504).
fn assert_retryable_status(what: &str, r: &crate::support::Resp) {
    assert!(r.status == 503 || r.status == 504, "{what}: {} {}", r.status, r.text());
    let v = r.json();
    assert_eq!(v["kind"], "Status", "{what}: {v}");
    assert_eq!(v["code"], r.status, "{what}: {v}");
    assert!(r.header("retry-after").is_some(), "{what}: no Retry-After: {:?}", r.headers);
}

fn upstream_line(verbose: &str) -> &str {
    verbose.lines().find(|l| l[3..].starts_with("upstream")).unwrap_or_else(|| panic!("no upstream check in:\n{verbose}"))
}

fn cm(name: &str) -> Value {
    json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name, "namespace": "default"}, "data": {"k": "v"}})
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_paused_upstream_is_reported_while_cached_reads_answer_and_the_rest_get_a_status() {
    let f = faulty(SIM, &flags(&[])).await;
    f.upstream_becomes(true).await;
    let (code, verbose) = f.readyz().await;
    assert_eq!((code, upstream_line(&verbose)), (200, "[+]upstream ok"), "{verbose}");
    let list = f.kache.api.get_ok("/api/v1/pods?resourceVersion=0").await;
    let pod = &list["items"][0]["metadata"];
    let one = format!("/api/v1/namespaces/{}/pods/{}?resourceVersion=0", pod["namespace"].as_str().unwrap(), pod["name"].as_str().unwrap());

    f.relay.pause(true);
    match f.upstream_becomes(false).await {
        Health::Down { reason, .. } => assert_eq!(reason, "hung"),
        h => panic!("{h:?}"),
    }
    let (_, verbose) = f.readyz().await;
    assert!(upstream_line(&verbose).starts_with("[-]upstream hung"), "{verbose}");

    // Reads kache holds answer from memory.
    let again = f.kache.api.get("/api/v1/pods?resourceVersion=0").await;
    assert_eq!(again.status, 200, "{}", again.text());
    assert_eq!(keys_rvs(again.json()["items"].as_array().unwrap()), keys_rvs(list["items"].as_array().unwrap()));
    assert_eq!(f.kache.api.get(&one).await.status, 200);
    // What needs the upstream gets a Status within kache's deadline (the client's own
    // bound, QUICK, is far longer), never a hang.
    assert_retryable_status("a write", &f.kache.api.post("/api/v1/namespaces/default/configmaps", &cm("while-paused")).await);
    assert_retryable_status("a consistent list", &f.kache.api.get("/api/v1/pods?limit=5").await);

    f.relay.pause(false);
    f.upstream_becomes(true).await;
    let (code, verbose) = f.readyz().await;
    assert_eq!((code, upstream_line(&verbose)), (200, "[+]upstream ok"), "{verbose}");
    let created = f.kache.api.post("/api/v1/namespaces/default/configmaps", &cm("after-pause")).await;
    assert_eq!(created.status, 201, "{}", created.text());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slow_upstream_gives_pass_through_a_timeout_status_and_one_whose_readyz_is_slow_too_is_found_hung() {
    let f = faulty(SIM, &["--preload", "pods", "--passthrough-timeout", "1"]).await;
    f.upstream_becomes(true).await;
    // API answers slower than the pass-through deadline (1 s) while /readyz answers at
    // once (an apiserver whose priority and fairness queues requests): a 504, and the
    // upstream is not taken for hung.
    f.sim.sim.set_delay(Duration::from_secs(2), false);
    let r =
        f.kache.api.request(Method::GET, "/api/v1/namespaces/default/configmaps?includeObject=Object", Some(TABLE), None, Vec::new()).await;
    assert_retryable_status("a passed-through read of a slow upstream", &r);
    assert_eq!((r.status, r.json()["reason"].as_str()), (504, Some("Timeout")), "{}", r.text());
    // A write the upstream may still carry out: the apiserver's 504, and no Retry-After
    // (client-go would send it again by itself).
    let r = f.kache.api.post("/api/v1/namespaces/default/configmaps", &cm("slow")).await;
    assert_eq!((r.status, r.json()["reason"].as_str()), (504, Some("Timeout")), "{}", r.text());
    assert!(r.json()["message"].as_str().unwrap().contains("may still be processing"), "{}", r.text());
    assert_eq!(r.header("retry-after"), None, "{:?}", r.headers);
    assert_eq!(f.kache.api.get("/api/v1/pods?resourceVersion=0").await.status, 200);
    let (code, verbose) = f.readyz().await;
    assert_eq!((code, upstream_line(&verbose)), (200, "[+]upstream ok"), "{verbose}");
    // /readyz slower than the probe's deadline too: found hung, and pass-through fails at once.
    f.sim.sim.set_delay(Duration::from_secs(5), true);
    match f.upstream_becomes(false).await {
        Health::Down { reason, .. } => assert_eq!(reason, "hung"),
        h => panic!("{h:?}"),
    }
    let r = f.kache.api.post("/api/v1/namespaces/default/configmaps", &cm("slower")).await;
    assert_eq!(r.status, 503, "{}", r.text());
    assert!(r.json()["message"].as_str().unwrap().contains("has been hung for"), "{}", r.text());
    f.sim.sim.set_delay(Duration::ZERO, false);
    f.upstream_becomes(true).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dropped_connections_are_resumed_and_a_watch_through_kache_misses_nothing() {
    let f = faulty(SIM, &flags(&[])).await;
    let from = list_rv(&f.kache.api.get_ok("/api/v1/pods?resourceVersion=0").await);
    let mut watch = f.kache.api.watch(&format!("/api/v1/pods?watch=1&resourceVersion={from}"), "application/json").await;
    assert_eq!(watch.status, 200);
    let (_, pods) = f.sim.all_pods().await;
    let mut written = Vec::new();
    for (i, p) in pods.iter().take(12).enumerate() {
        if i % 4 == 0 {
            f.relay.drop_connections();
        }
        let m = &p["metadata"];
        let path = format!("/api/v1/namespaces/{}/pods/{}", m["namespace"].as_str().unwrap(), m["name"].as_str().unwrap());
        let patched = f.sim.must("patch", f.sim.patch(&path, &json!({"metadata": {"labels": {"dropped": i.to_string()}}})).await).await;
        written.push(obj_rv(&patched));
    }
    let end = deadline(QUICK.as_secs());
    let mut seen = Vec::new();
    while seen.len() < written.len() {
        match watch.next_json(end).await {
            Next::Item(ev) if ev["type"] == "BOOKMARK" => {}
            Next::Item(ev) => {
                assert_eq!(ev["type"], "MODIFIED", "{ev}");
                seen.push(obj_rv(&ev["object"]));
            }
            other => panic!("watch through kache ended or stalled after {seen:?} of {written:?}: {other:?}"),
        }
    }
    assert_eq!(seen, written, "every write once, in order, across dropped upstream connections");
}

/// A pod's (namespace/name) and the API path of its object.
fn pod_path(p: &Value) -> (String, String) {
    let m = &p["metadata"];
    let (ns, name) = (m["namespace"].as_str().unwrap(), m["name"].as_str().unwrap());
    (format!("{ns}/{name}"), format!("/api/v1/namespaces/{ns}/pods/{name}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_upstream_restart_reaches_open_watches_as_the_changes_missed_not_as_a_relist() {
    use futures_util::StreamExt;
    use kube::runtime::watcher;
    let f = faulty(SIM, &flags(&[])).await;
    f.upstream_becomes(true).await;
    // Two clients watch through kache: a raw watch with bookmarks, and a kube-rs watcher
    // (LIST, then WATCH), whose every event is recorded.
    let from = list_rv(&f.kache.api.get_ok("/api/v1/pods?resourceVersion=0").await);
    let mut raw =
        f.kache.api.watch(&format!("/api/v1/pods?watch=1&allowWatchBookmarks=true&resourceVersion={from}"), "application/json").await;
    assert_eq!(raw.status, 200);
    let client = kube::Client::try_from(kube::Config::new(format!("http://{}", f.kache.serving.addr).parse().unwrap())).unwrap();
    let (events_tx, mut events) = tokio::sync::mpsc::unbounded_channel();
    let informer = tokio::spawn(async move {
        let stream = watcher(kube::Api::<Pod>::all(client), watcher::Config::default());
        tokio::pin!(stream);
        while let Some(ev) = stream.next().await {
            let what = match ev {
                Ok(watcher::Event::Init) => "init".to_string(),
                Ok(watcher::Event::InitApply(_)) => "init-apply".into(),
                Ok(watcher::Event::InitDone) => "init-done".into(),
                Ok(watcher::Event::Apply(p)) => format!("apply {}/{}", p.metadata.namespace.unwrap(), p.metadata.name.unwrap()),
                Ok(watcher::Event::Delete(p)) => format!("delete {}/{}", p.metadata.namespace.unwrap(), p.metadata.name.unwrap()),
                Err(e) => format!("error {e}"),
            };
            if events_tx.send(what).is_err() {
                return;
            }
        }
    });
    let (_, pods) = f.sim.all_pods().await;
    let end = deadline(QUICK.as_secs());
    let mut listed = 0;
    loop {
        match tokio::time::timeout_at(end, events.recv()).await.expect("the informer syncs").unwrap().as_str() {
            "init-done" => break,
            "init-apply" => listed += 1,
            _ => {}
        }
    }
    assert_eq!(listed, pods.len());

    // The upstream goes away; meanwhile pods change, go and come; then it restarts with no
    // history (410 for kache's RV) and a warm-up of 429s.
    f.relay.down(true);
    f.upstream_becomes(false).await;
    // (type, key, RV) of each change; a deletion's RV is not known to the list kache reads.
    let mut changes: Vec<(String, String, u64)> = Vec::new();
    for (i, p) in pods.iter().take(10).enumerate() {
        let (key, path) = pod_path(p);
        if i % 5 == 4 {
            f.sim.must("delete", f.sim.delete(&path).await).await;
            changes.push(("DELETED".into(), key, 0));
        } else {
            let patched = f.sim.must("patch", f.sim.patch(&path, &json!({"metadata": {"labels": {"restart": i.to_string()}}})).await).await;
            changes.push(("MODIFIED".into(), key, obj_rv(&patched)));
        }
    }
    let mut born = pods[20].clone();
    born["metadata"] = json!({"name": "born-while-down", "namespace": p_ns(&pods[20])});
    let (key, path) = pod_path(&born);
    let created = f.sim.must("create", f.sim.post(path.rsplit_once('/').unwrap().0, &born).await).await;
    changes.push(("ADDED".into(), key, obj_rv(&created)));
    f.sim.sim.restart(Duration::from_secs(2));
    let rv = f.sim.sim.resource_version();
    f.relay.down(false);
    f.upstream_becomes(true).await;

    // The raw watch stays open and receives exactly the changes, in increasing RV order,
    // then a bookmark at the new list's RV.
    let end = deadline(QUICK.as_secs());
    let mut seen: Vec<(String, String, u64)> = Vec::new();
    loop {
        match raw.next_json(end).await {
            Next::Item(ev) if ev["type"] == "BOOKMARK" => {
                if obj_rv(&ev["object"]) >= rv {
                    break;
                }
            }
            Next::Item(ev) => {
                let (key, _) = pod_path(&ev["object"]);
                seen.push((ev["type"].as_str().unwrap().to_string(), key, obj_rv(&ev["object"])));
            }
            other => panic!("the watch through kache ended or stalled after {seen:?}: {other:?}"),
        }
    }
    let rvs: Vec<u64> = seen.iter().map(|e| e.2).collect();
    assert!(rvs.windows(2).all(|w| w[0] < w[1]) && rvs[0] > from, "RVs increase: {seen:?}");
    let mut got: Vec<(String, String, u64)> =
        seen.iter().map(|(t, k, at)| (t.clone(), k.clone(), if t == "DELETED" { 0 } else { *at })).collect();
    got.sort();
    changes.sort();
    assert_eq!(got, changes, "the changes missed, each once");

    // The kube-rs watcher saw the same changes and no second list.
    let mut want: Vec<String> =
        changes.iter().map(|(t, k, _)| format!("{} {k}", if t == "DELETED" { "delete" } else { "apply" })).collect();
    want.sort();
    let end = deadline(QUICK.as_secs());
    let mut after: Vec<String> = Vec::new();
    while after.len() < want.len() {
        match tokio::time::timeout_at(end, events.recv()).await {
            Ok(Some(e)) => after.push(e),
            other => panic!("the kube-rs watcher stalled after {after:?}: {other:?}"),
        }
    }
    after.sort();
    assert_eq!(after, want, "kube-rs: the changes, no relist");
    informer.abort();
}

fn p_ns(p: &Value) -> String {
    p["metadata"]["namespace"].as_str().unwrap().to_string()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn after_an_upstream_restart_caches_come_back_and_a_kube_rs_reflector_converges() {
    use futures_util::StreamExt;
    use kube::runtime::{reflector, watcher, WatchStreamExt};
    let f = faulty(SIM, &flags(&[])).await;
    f.upstream_becomes(true).await;
    let client = kube::Client::try_from(kube::Config::new(format!("http://{}", f.kache.serving.addr).parse().unwrap())).unwrap();
    let (reader, writer) = reflector::store::<Pod>();
    let stream = reflector(writer, watcher(kube::Api::<Pod>::all(client), watcher::Config::default())).applied_objects();
    let drain = tokio::spawn(async move {
        tokio::pin!(stream);
        while let Some(item) = stream.next().await {
            let _ = item;
        }
    });
    reader.wait_until_ready().await.expect("reflector ready");

    // The upstream dies: found, and what needs it gets a Status at once.
    f.relay.down(true);
    match f.upstream_becomes(false).await {
        Health::Down { reason, .. } => assert_eq!(reason, "unreachable"),
        h => panic!("{h:?}"),
    }
    assert_retryable_status(
        "a write while the upstream is down",
        &f.kache.api.post("/api/v1/namespaces/default/configmaps", &cm("down")).await,
    );
    assert_eq!(f.kache.api.get("/api/v1/pods?resourceVersion=0").await.status, 200);
    // Changes happen meanwhile; then it restarts with no history and a warm-up of 429s.
    let (_, pods) = f.sim.all_pods().await;
    for (i, p) in pods.iter().take(10).enumerate() {
        let m = &p["metadata"];
        let path = format!("/api/v1/namespaces/{}/pods/{}", m["namespace"].as_str().unwrap(), m["name"].as_str().unwrap());
        if i % 5 == 4 {
            f.sim.must("delete", f.sim.delete(&path).await).await;
        } else {
            f.sim.must("patch", f.sim.patch(&path, &json!({"metadata": {"labels": {"restart": i.to_string()}}})).await).await;
        }
    }
    f.sim.sim.restart(Duration::from_secs(2));
    let rv = f.sim.sim.resource_version();
    f.relay.down(false);
    f.upstream_becomes(true).await;

    // Both encodings' caches reach the restarted upstream's state.
    for fmt in [kache::api::media::Format::Json, kache::api::media::Format::Protobuf] {
        let cache = f.kache.serving.serve.cache("", "pods", fmt).expect("pods cache");
        assert!(cache.wait_for(rv, QUICK).await, "{fmt:?} cache reached RV {rv} after the restart (at {})", cache.progress());
    }
    let want: BTreeMap<String, String> = keys_rvs(&f.sim.all_pods().await.1).into_iter().collect();
    let (reader, want) = (&reader, &want);
    eventually(60, 100, || async move {
        let got: BTreeMap<String, String> = reader
            .state()
            .iter()
            .map(|p| {
                let m = &p.metadata;
                (
                    format!("{}/{}", m.namespace.clone().unwrap_or_default(), m.name.clone().unwrap_or_default()),
                    m.resource_version.clone().unwrap_or_default(),
                )
            })
            .collect();
        if got == *want {
            Ok(())
        } else {
            Err(format!("reflector: {} objects, simulator: {}", got.len(), want.len()))
        }
    })
    .await;
    drain.abort();
    let (code, verbose) = f.readyz().await;
    assert_eq!(code, 200, "{verbose}");
    assert!(!verbose.contains("[-]"), "{verbose}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pass_through_is_bounded_per_client() {
    let f = faulty(SIM, &flags(&["--max-passthrough-per-client", "2"])).await;
    let pod = &f.kache.api.get_ok("/api/v1/pods?resourceVersion=0&limit=1").await["items"][0]["metadata"];
    // A watch of Tables carrying whole objects is always passed through.
    let path = format!("/api/v1/namespaces/{}/pods?watch=1&includeObject=Object", pod["namespace"].as_str().unwrap());
    let w1 = f.kache.api.watch(&path, TABLE).await;
    let w2 = f.kache.api.watch(&path, TABLE).await;
    assert_eq!((w1.status, w2.status), (200, 200));
    // Over the socket, as the watches: one client.
    let third = f.kache.client().post("/api/v1/namespaces/default/configmaps", &cm("third")).await;
    assert_eq!(third.status, 429, "{}", third.text());
    assert_eq!(third.header("retry-after"), Some("1"));
    // Cached reads are not pass-through and not held back.
    assert_eq!(f.kache.api.get("/api/v1/pods?resourceVersion=0&limit=1").await.status, 200);
    drop(w1);
    // The slot comes back when kache sees the watch's client go.
    let api = &f.kache.client();
    eventually(30, 50, || async move {
        let r = api.post("/api/v1/namespaces/default/configmaps", &cm("after")).await;
        if r.status == 201 {
            Ok(())
        } else {
            Err(format!("{} {}", r.status, r.text()))
        }
    })
    .await;
    drop(w2);
}

/// A chunked request body whose chunk size is not hexadecimal: the client's fault.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_malformed_chunked_body_is_the_clients_400() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let f = faulty(SIM, &flags(&[])).await;
    let mut s = tokio::net::TcpStream::connect(f.kache.serving.addr).await.unwrap();
    let head = "POST /api/v1/namespaces/default/configmaps HTTP/1.1\r\nHost: kache\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n";
    s.write_all(head.as_bytes()).await.unwrap();
    s.write_all(b"5\r\n{\"a\":\r\nZZ-not-hex\r\n").await.unwrap();
    let mut out = Vec::new();
    tokio::time::timeout(QUICK, s.read_to_end(&mut out)).await.expect("an answer in time").unwrap();
    let text = String::from_utf8_lossy(&out);
    assert!(text.starts_with("HTTP/1.1 400"), "{text}");
    assert!(text.contains("\"kind\":\"Status\"") && text.contains("request body"), "{text}");
    assert!(!f.kache.serving.serve.upstream().is_down(), "a client's bad body says nothing about the upstream");
}

/// With security on: reviews ride kache's own connections, so a hundred and fifty watches
/// passed through for one client (more than the upstream's 100 streams per HTTP/2
/// connection) neither starve a new client's TokenReview and SubjectAccessReview nor
/// another client's pass-through write; and a paused upstream leaves cached reads of
/// callers whose decisions are cached answering, while a caller never seen gets a Status.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reviews_and_other_clients_are_not_starved_and_cached_decisions_hold_through_a_pause() {
    let sim = SecureSim::start().await;
    let relay = kache::sim::fault::FaultProxy::start("127.0.0.1:0", sim.running.addr).await.unwrap();
    let kubeconfig = sim.upstream_kubeconfig_at(&format!("https://{}", relay.addr));
    let k = SecureKache::start_at(&sim, &kubeconfig, DEADLINES).await;
    let admin = k.client(Who::Token("admin-token"));
    let mut held = Vec::new();
    for i in 0..150 {
        let r = admin.open("/api/v1/namespaces/a/pods?watch=1&includeObject=Object", &[("accept", TABLE)]).await;
        assert_eq!(r.status(), 200, "passed-through watch {i}");
        held.push(r);
    }
    let (passthrough, own) = k.serving.serve.upstream().connections();
    assert!(passthrough >= 2, "150 pass-through streams need a second upstream connection: {passthrough}");
    assert_eq!(own, 1, "kache's own calls keep a connection of their own");
    let alice = k.client(Who::Token("alice-token"));
    let r = alice.get("/api/v1/namespaces/a/pods?resourceVersion=0").await;
    assert_eq!(r.status, 200, "a new client's reviews are not starved: {}", r.text());
    let bob = k.client(Who::Token("bob-token"));
    let r =
        bob.post("/api/v1/namespaces/a/configmaps", &json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "bob-1"}})).await;
    assert_eq!(r.status, 201, "another client's pass-through write: {}", r.text());
    drop(held);

    relay.pause(true);
    upstream_down(&k).await;
    let r = alice.get("/api/v1/namespaces/a/pods?resourceVersion=0").await;
    assert_eq!(r.status, 200, "alice's decisions are cached: {}", r.text());
    let node = k.client(Who::Token("node-token"));
    let r = node.get("/api/v1/nodes?resourceVersion=0").await;
    assert_retryable_status("a caller never reviewed, with the upstream paused", &r);
    relay.pause(false);
    crate::support::upstream_becomes(&k.serving.serve, true).await;
    assert_eq!(node.get("/api/v1/nodes?resourceVersion=0").await.status, 200);
}

/// A passed-through watch whose client stopped reading (a kubectl piped into a pager, a
/// suspended process) holds at most its own stream's flow-control window on kache's upstream
/// HTTP/2 connection, never the whole connection's: with megabytes of changes piled up behind
/// the stalled stream, another client's writes and reads riding the same connection are
/// answered. (With one window for the stream and the connection, they would wait for the
/// stalled reader, for ever.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stalled_pass_through_watch_does_not_hold_up_its_upstream_connection() {
    let sim = SecureSim::start().await;
    let k = SecureKache::start(&sim, DEADLINES).await;
    let _watch = stalled_watch(&k, "admin-token", "/api/v1/namespaces/a/configmaps?watch=1&includeObject=Object", TABLE).await;
    // 24 MB of changes for the stalled watch, written to the upstream directly: more than
    // every buffer on its way holds (sockets, hyper's write buffer, HTTP/2 windows).
    let admin = sim.client(Who::Token("admin-token"));
    let big = "x".repeat(512 * 1024);
    for i in 0..48 {
        let cm = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": format!("big-{i}")}, "data": {"big": big}});
        admin.must(admin.post("/api/v1/namespaces/a/configmaps", &cm).await);
    }
    let bob = k.client(Who::Token("bob-token"));
    for i in 0..8 {
        let small = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": format!("bob-{i}")}, "data": {"k": "v"}});
        let r = bob.post("/api/v1/namespaces/a/configmaps", &small).await;
        assert_eq!(r.status, 201, "write {i} beside a stalled watch: {}", r.text());
    }
    let r = bob.get_with("/api/v1/namespaces/a/configmaps/big-0?includeObject=Object", &[("accept", TABLE)]).await;
    assert_eq!(r.status, 200, "a passed-through read beside a stalled watch: {}", r.text());
    assert_eq!(r.json()["rows"][0]["object"]["data"]["big"].as_str().map(str::len), Some(big.len()));
}

/// A watch through kache over HTTP/1.1 and TLS whose client reads its response head and
/// then nothing more, on a socket with a small receive buffer.
async fn stalled_watch(k: &SecureKache, token: &str, path: &str, accept: &str) -> tokio_rustls::client::TlsStream<tokio::net::TcpStream> {
    use rustls::pki_types::{pem::PemObject, CertificateDer, ServerName};
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut roots = rustls::RootCertStore::empty();
    for c in CertificateDer::pem_slice_iter(k.serving.ca_pem.as_deref().expect("TLS").as_bytes()) {
        roots.add(c.unwrap()).unwrap();
    }
    let mut config = rustls::ClientConfig::builder_with_provider(std::sync::Arc::new(rustls::crypto::ring::default_provider()))
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_root_certificates(roots)
        .with_no_client_auth();
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    let socket = tokio::net::TcpSocket::new_v4().unwrap();
    socket.set_recv_buffer_size(4096).unwrap();
    let tcp = socket.connect(k.serving.addr).await.unwrap();
    let connector = tokio_rustls::TlsConnector::from(std::sync::Arc::new(config));
    let mut tls = connector.connect(ServerName::try_from("localhost").unwrap(), tcp).await.unwrap();
    let head = format!("GET {path} HTTP/1.1\r\nHost: kache\r\nAuthorization: Bearer {token}\r\nAccept: {accept}\r\n\r\n");
    tls.write_all(head.as_bytes()).await.unwrap();
    // The status line only (byte by byte, so nothing past it is taken off the socket).
    let mut line = Vec::new();
    while !line.ends_with(b"\r\n") {
        line.push(tls.read_u8().await.unwrap());
    }
    assert!(line.starts_with(b"HTTP/1.1 200"), "{}", String::from_utf8_lossy(&line));
    tls
}

async fn upstream_down(k: &SecureKache) {
    crate::support::upstream_becomes(&k.serving.serve, false).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sim_fault_endpoint_flips_the_switches() {
    let sim = crate::support::start(&crate::support::cluster(SIM)).await;
    let relay = kache::sim::fault::FaultProxy::start("127.0.0.1:0", sim.addr).await.unwrap();
    let addr = kache::sim::fault::serve_control("127.0.0.1:0", None, sim.sim.clone(), Some(relay.clone())).await.unwrap();
    let api = crate::support::Api::new(&addr.to_string());
    assert_eq!(api.request(Method::POST, "/pause", None, None, vec![]).await.status, 200);
    assert!(relay.relay().paused);
    assert_eq!(api.request(Method::POST, "/resume", None, None, vec![]).await.status, 200);
    assert!(!relay.relay().paused);
    assert_eq!(api.request(Method::POST, "/restart?warmup_ms=60000", None, None, vec![]).await.status, 200);
    let r = sim.get("/api/v1/pods?limit=1").await;
    assert_eq!(r.status, 429, "{}", r.text());
    assert_eq!(r.json()["message"], "storage is (re)initializing");
    assert_eq!(r.header("retry-after"), Some("1"));
    assert_eq!(sim.get("/readyz").await.status, 200, "the restarted apiserver says ready before its caches are");
}

/// Within `--serve-stale` (300 by default) kache stays ready and answers what it holds,
/// says `[-]upstream` in `/readyz?verbose`, and fails what needs the upstream at once (503
/// from the health monitor's finding, not a 504 after a deadline).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reads_from_memory_through_an_outage_within_the_stale_bound() {
    let f = faulty(SIM, &flags(&[])).await;
    f.upstream_becomes(true).await;
    let before = f.kache.api.get_ok("/api/v1/pods?resourceVersion=0").await;
    f.relay.down(true);
    f.upstream_becomes(false).await;
    let r = f.kache.api.get("/api/v1/pods?resourceVersion=0").await;
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(keys_rvs(r.json()["items"].as_array().unwrap()), keys_rvs(before["items"].as_array().unwrap()));
    let (code, verbose) = f.readyz().await;
    assert_eq!(code, 200, "ready while serving from memory:\n{verbose}");
    let line = upstream_line(&verbose);
    assert!(line.starts_with("[-]upstream unreachable for ") && line.contains("; serving from memory for up to "), "{verbose}");
    assert!(verbose.contains("[-]cache pods json upstream unreachable; serving from memory"), "{verbose}");
    let w = f.kache.api.post("/api/v1/namespaces/default/configmaps", &cm("fast")).await;
    assert_retryable_status("a write while the upstream is known down", &w);
    assert_eq!(w.status, 503);
    assert!(
        w.json()["message"].as_str().unwrap().contains("has been unreachable for"),
        "failed fast on the monitor's finding: {}",
        w.text()
    );
    let c = f.kache.api.get("/api/v1/pods?limit=5").await;
    assert_retryable_status("a consistent list while the upstream is known down", &c);
    assert_eq!(c.status, 503);
    let m = crate::support::ops::Scrape::parse(&f.admin.get("/metrics").await.text());
    assert!(
        m.find("kache_cache_stale_seconds", &[("resource", "pods"), ("encoding", "json")]).iter().any(|s| s.value > 0.0),
        "the staleness gauge moves during the outage"
    );
    f.relay.down(false);
    f.upstream_becomes(true).await;
}

/// Past `--serve-stale` without the upstream kache is unready and refuses cached
/// reads too; when the upstream is back it serves again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn past_the_stale_bound_kache_is_unready_and_refuses_cached_reads() {
    let f = faulty(SIM, &flags(&["--serve-stale", "1"])).await;
    f.upstream_becomes(true).await;
    f.relay.down(true);
    f.upstream_becomes(false).await;
    let admin = &f.admin;
    // Each cache keeps its own staleness clock: wait for the one the read below is served
    // from (pods in JSON), not for the first cache past the bound.
    let past = |l: &str| l.starts_with("[-]cache pods json ") && l.ends_with("past --serve-stale (1s)");
    let verbose = eventually(30, 100, || async move {
        let r = admin.get("/readyz?verbose").await;
        let text = r.text();
        if r.status == 503 && text.lines().any(past) {
            Ok(text)
        } else {
            Err(text)
        }
    })
    .await;
    let r = f.kache.api.get("/api/v1/pods?resourceVersion=0").await;
    assert_retryable_status(&format!("a cached read past the bound; readyz said:\n{verbose}"), &r);
    assert!(r.json()["message"].as_str().unwrap().contains("longer than kache serves from memory (1s)"), "{}", r.text());
    f.relay.down(false);
    f.upstream_becomes(true).await;
    let api = &f.kache.api;
    eventually(30, 100, || async move {
        let r = api.get("/api/v1/pods?resourceVersion=0").await;
        if r.status == 200 {
            Ok(())
        } else {
            Err(r.text())
        }
    })
    .await;
}

/// With security on, decisions past their TTL are used while the upstream cannot be asked
/// (within `--serve-stale`); a caller never judged gets 503 at once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn last_known_decisions_hold_cached_reads_through_an_outage() {
    let sim = SecureSim::start().await;
    let relay = kache::sim::fault::FaultProxy::start("127.0.0.1:0", sim.running.addr).await.unwrap();
    let kubeconfig = sim.upstream_kubeconfig_at(&format!("https://{}", relay.addr));
    let mut extra = DEADLINES.to_vec();
    extra.extend(["--token-cache-ttl", "1", "--authz-cache-allow-ttl", "1", "--authz-cache-deny-ttl", "1"]);
    let k = SecureKache::start_at(&sim, &kubeconfig, &extra).await;
    crate::support::upstream_becomes(&k.serving.serve, true).await;
    let alice = k.client(Who::Token("alice-token"));
    assert_eq!(alice.get("/api/v1/namespaces/a/pods?resourceVersion=0").await.status, 200);
    assert_eq!(alice.get("/api/v1/namespaces/b/pods?resourceVersion=0").await.status, 403);
    let reviews = sim.token_reviews();
    // The hung upstream is found only after the monitor's 3 s probe deadline, which began
    // after alice's decisions were made: by then their 1 s TTLs have passed.
    relay.pause(true);
    upstream_down(&k).await;
    assert_eq!(alice.get("/api/v1/namespaces/a/pods?resourceVersion=0").await.status, 200, "last known allow");
    assert_eq!(alice.get("/api/v1/namespaces/b/pods?resourceVersion=0").await.status, 403, "last known deny");
    let node = k.client(Who::Token("node-token"));
    let r = node.get("/api/v1/nodes?resourceVersion=0").await;
    assert_retryable_status("a caller never judged", &r);
    assert_eq!(r.status, 503);
    relay.pause(false);
    crate::support::upstream_becomes(&k.serving.serve, true).await;
    assert_eq!(node.get("/api/v1/nodes?resourceVersion=0").await.status, 200);
    assert!(sim.token_reviews() > reviews, "decisions are asked for again once the upstream is back");
}

/// Discovery kept from before the outage is answered byte for byte as the upstream sent it:
/// not indented for a client that asks for indented output (here a curl user agent) as
/// kache's own answers are (a kept document may be gzip-encoded: indenting would corrupt it,
/// compressing would encode it twice).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kept_discovery_is_answered_as_the_upstream_sent_it() {
    let f = faulty(SIM, &flags(&[])).await;
    f.upstream_becomes(true).await;
    let api = &f.kache.api;
    let up = api.get("/apis").await;
    assert_eq!(up.status, 200, "{}", up.text());
    f.relay.pause(true);
    f.upstream_becomes(false).await;
    let curl = api.get_with("/apis", &[("user-agent", "curl/8.5.0")]).await;
    assert_eq!(curl.status, 200, "{}", curl.text());
    assert_eq!(curl.header("content-type"), Some("application/json"));
    assert_eq!(curl.text(), up.text(), "the upstream's bytes, not indented");
    f.relay.pause(false);
    f.upstream_becomes(true).await;
}

/// kubectl through kache with the upstream hung: what kache holds still prints; what needs
/// the upstream fails with kache's Status (kubectl prints its message) instead of hanging
/// until kubectl's own timeout; after the upstream is back, `kubectl get pods` works.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_through_a_paused_upstream() {
    let f = faulty(SIM, &flags(&[])).await;
    f.upstream_becomes(true).await;
    let server = format!("http://{}", f.kache.serving.addr);
    let kubectl = crate::support::Kubectl::new(&server);
    // Discovery passes through kache while the upstream is up, which keeps its answers.
    let before = kubectl.run(&["api-resources"]).await;
    assert!(before.status.success(), "{}", String::from_utf8_lossy(&before.stderr));
    f.relay.pause(true);
    f.upstream_becomes(false).await;
    // A kubectl without a discovery cache (a fresh pod, a restarted controller) still finds
    // the resources: kache answers discovery with the upstream's last answers.
    let fresh = crate::support::Kubectl::new(&server);
    let during = fresh.run(&["api-resources"]).await;
    assert!(during.status.success(), "{}", String::from_utf8_lossy(&during.stderr));
    assert_eq!(String::from_utf8_lossy(&during.stdout), String::from_utf8_lossy(&before.stdout));
    // A resourceVersion=0 list is answered from memory.
    let out = kubectl.run(&["get", "--raw", "/api/v1/pods?resourceVersion=0&limit=3"]).await;
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let list: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(list["kind"], "PodList");
    // A list without a resourceVersion is a consistent read, the upstream's to answer: it
    // fails with kache's Status (client-go retries it after each Retry-After first).
    let out = kubectl.run(&["get", "--raw", "/api/v1/pods?limit=3"]).await;
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("has been hung for"), "kubectl shows kache's Status: {err}");
    f.relay.pause(false);
    f.upstream_becomes(true).await;
    let out = kubectl.run(&["get", "pods", "-A", "-o", "name"]).await;
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
}

/// After a relist told as differences, a client may hold an RV of the span it covered that
/// came from the upstream (here, a LIST straight from it while kache was cut off). kache
/// places the deletions the list revealed at RVs of its own, so a watch from that RV is not
/// kache's to answer where a deletion may lie below it: the client must get every deletion
/// it has not seen, or the upstream's own answer, never a stream that skips one.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_resume_point_the_upstream_gave_inside_a_relisted_span_misses_no_deletion() {
    let f = faulty(SIM, &flags(&[])).await;
    f.upstream_becomes(true).await;
    let from = list_rv(&f.kache.api.get_ok("/api/v1/pods?resourceVersion=0").await);
    let mut open = f.kache.api.watch(&format!("/api/v1/pods?watch=1&resourceVersion={from}"), "application/json").await;
    assert_eq!(open.status, 200);
    let (_, pods) = f.sim.all_pods().await;
    let mut keyed: Vec<(String, String)> = pods.iter().map(pod_path).collect();
    keyed.sort();
    let [(small, small_path), (big1, big1_path), (big2, big2_path)] = [keyed[0].clone(), keyed[1].clone(), keyed[2].clone()];

    f.relay.down(true);
    f.upstream_becomes(false).await;
    f.sim.must("delete", f.sim.delete(&big1_path).await).await;
    f.sim.must("delete", f.sim.delete(&big2_path).await).await;
    // A client lists straight from the upstream: `small` is there at this RV.
    let held = list_rv(&f.sim.get_ok("/api/v1/pods?limit=1").await);
    f.sim.must("delete", f.sim.delete(&small_path).await).await;
    f.sim.sim.restart(Duration::ZERO);
    f.relay.down(false);
    f.upstream_becomes(true).await;

    // kache relisted and told the open watch the three deletions at RVs of its own choosing
    // (by key, not in the order they happened).
    let end = deadline(QUICK.as_secs());
    let mut deleted = Vec::new();
    while deleted.len() < 3 {
        match open.next_json(end).await {
            Next::Item(ev) if ev["type"] == "DELETED" => deleted.push(pod_path(&ev["object"]).0),
            Next::Item(_) => {}
            other => panic!("the open watch ended or stalled after {deleted:?}: {other:?}"),
        }
    }
    assert_eq!(deleted, [small.clone(), big1.clone(), big2.clone()], "the relist's order, not the upstream's (else nothing was relisted)");

    // The client resumes through kache from the RV it got from the upstream: it gets
    // `small`'s deletion, or the upstream's 410 (which makes it list again). It must not
    // get a stream without `small`'s deletion.
    let mut resumed = f.kache.api.watch(&format!("/api/v1/pods?watch=1&resourceVersion={held}"), "application/json").await;
    assert_eq!(resumed.status, 200);
    let end = deadline(QUICK.as_secs());
    let mut seen = Vec::new();
    loop {
        match resumed.next_json(end).await {
            Next::Item(ev) if ev["type"] == "ERROR" => {
                assert_eq!(ev["object"]["code"], 410, "{ev}");
                break;
            }
            Next::Item(ev) if ev["type"] == "DELETED" && pod_path(&ev["object"]).0 == small => break,
            Next::Item(ev) => seen.push((ev["type"].clone(), pod_path(&ev["object"]).0)),
            other => panic!("a watch from {held} through kache got {seen:?} and then {other:?}, never {small}'s deletion"),
        }
    }
}
