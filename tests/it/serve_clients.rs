//! kache in front of the simulator, driven by real clients and compared with the simulator
//! itself: every LIST shape in JSON and protobuf, watches in order across an upstream
//! disconnect and a relist after 410, a kube-rs reflector under churn, kubectl, the Python
//! client, kache in front of kache, and a custom resource's Tables printed by its CRD's columns.

use crate::support::{
    captured_widget, cluster, crd_golden, deadline, eventually, kache_in_front, keys_rvs, list_rv, obj_rv, start, Api, Kubectl, Next,
    TestKache, TestSim, PROTOBUF,
};
use k8s_openapi::api::core::v1::Pod;
use serde_json::{json, Value};
use std::collections::BTreeMap;
use std::time::Duration;

fn small(extra: &[&str]) -> Vec<String> {
    let mut f: Vec<String> = ["--nodes", "20", "--pods", "400", "--namespaces", "4"].iter().map(|s| s.to_string()).collect();
    f.extend(extra.iter().map(|s| s.to_string()));
    f
}

async fn sim_with(extra: &[&str]) -> TestSim {
    let mut flags = small(extra);
    flags.extend(["--bookmark-interval".to_string(), "1".to_string()]);
    let refs: Vec<&str> = flags.iter().map(String::as_str).collect();
    start(&cluster(&refs)).await
}

/// Wait until kache's caches of `kinds` (every encoding running) have reached `rv`. A quiet
/// kind's watch cache learns that the global RV moved only when asked (a consistent read asks
/// for progress, as the apiserver's cacher does) or at the rare periodic notification, so
/// make one consistent LIST of each kind upstream first; its bookmarks then carry kache on.
async fn caught_up(k: &TestKache, sim: &TestSim, rv: u64, kinds: &[(&str, &str)]) {
    let end = deadline(60);
    for (group, plural) in kinds {
        let path = if group.is_empty() { format!("/api/v1/{plural}?limit=1") } else { format!("/apis/{group}/v1/{plural}?limit=1") };
        sim.get_ok(&path).await;
    }
    for (group, plural) in kinds {
        for fmt in [kache::api::media::Format::Json, kache::api::media::Format::Protobuf] {
            let Some(cache) = k.serving.serve.cache(group, plural, fmt) else { continue };
            while cache.progress() < rv {
                assert!(tokio::time::Instant::now() < end, "{plural} {fmt:?} stuck at {} < {rv}", cache.progress());
                cache.wait_for(rv, Duration::from_millis(200)).await;
            }
        }
    }
}

/// Items of a protobuf list as (namespace/name, RV), via k8s-pb.
fn pb_keys(body: &[u8]) -> (u64, Vec<(String, String)>) {
    let list: k8s_pb::api::core::v1::PodList = crate::support::decode_envelope(body, "PodList");
    let rv = list.metadata.as_ref().and_then(|m| m.resource_version.clone()).unwrap_or_default().parse().unwrap_or(0);
    let items = list
        .items
        .iter()
        .map(|p| {
            let m = p.metadata.as_ref().unwrap();
            (
                format!("{}/{}", m.namespace.clone().unwrap_or_default(), m.name.clone().unwrap_or_default()),
                m.resource_version.clone().unwrap_or_default(),
            )
        })
        .collect();
    (rv, items)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_list_shape_matches_the_simulator_in_json_and_protobuf() {
    let sim = sim_with(&[]).await;
    let k = kache_in_front(&sim.addr.to_string(), &["--preload", "pods,nodes,configmaps,widgets.example.com"]).await;
    // A widget (custom resource, JSON only) so that kind has content.
    let w = json!({"apiVersion": "example.com/v1", "kind": "Widget", "metadata": {"name": "w1", "namespace": "default", "labels": {"size": "big"}}, "spec": {"size": 3}});
    sim.must("create widget", sim.post("/apis/example.com/v1/namespaces/default/widgets", &w).await).await;
    let rv = list_rv(&sim.get_ok("/api/v1/pods?limit=1").await);
    // Wait until every cache has reached rv (bookmarks every second carry quiet kinds
    // forward), so the comparisons below exercise the cache, not pass-through.
    caught_up(&k, &sim, rv, &[("", "pods"), ("", "nodes"), ("", "configmaps"), ("example.com", "widgets")]).await;
    let node = "node-0003";
    let shapes: Vec<String> = vec![
        format!("/api/v1/pods?resourceVersion={rv}&resourceVersionMatch=Exact"),
        format!("/api/v1/pods?resourceVersion={rv}&resourceVersionMatch=Exact&fieldSelector=spec.nodeName%3D{node}"),
        format!("/api/v1/pods?resourceVersion={rv}&resourceVersionMatch=Exact&labelSelector=tier%3Dfrontend"),
        format!("/api/v1/namespaces/ns-0001/pods?resourceVersion={rv}&resourceVersionMatch=Exact"),
        format!("/api/v1/namespaces/ns-0001/pods?resourceVersion={rv}&resourceVersionMatch=Exact&labelSelector=app"),
        format!("/api/v1/nodes?resourceVersion={rv}&resourceVersionMatch=Exact"),
        format!("/api/v1/configmaps?resourceVersion={rv}&resourceVersionMatch=Exact"),
        format!("/apis/example.com/v1/widgets?resourceVersion={rv}&resourceVersionMatch=Exact"),
        "/api/v1/pods".to_string(),
        "/api/v1/pods?resourceVersion=0".to_string(),
        format!("/api/v1/pods?fieldSelector=spec.nodeName%3D{node}&resourceVersion=0"),
    ];
    for path in &shapes {
        let hits = k.serving.serve.cache_hits();
        let (a, b) = (sim.get(path).await, k.api.get(path).await);
        if path.contains("resourceVersion=") {
            assert_eq!(k.serving.serve.cache_hits(), hits + 1, "{path} was answered from cache");
        }
        assert_eq!(a.status, 200, "{path}: {}", a.text());
        assert_eq!(b.status, 200, "{path}: {}", b.text());
        let (av, bv) = (a.json(), b.json());
        assert_eq!(keys_rvs(av["items"].as_array().unwrap()), keys_rvs(bv["items"].as_array().unwrap()), "{path}");
        assert_eq!(av["kind"], bv["kind"], "{path}");
        if path.contains("Exact") {
            assert_eq!(list_rv(&av), list_rv(&bv), "{path}: same RV");
            assert_eq!(a.body, b.body, "{path}: byte-identical");
        }
        if path.contains("/pods") {
            let (pa, pb) = (sim.get_pb(path).await, k.api.get_pb(path).await);
            assert_eq!(pb.header("content-type"), Some(PROTOBUF), "{path}");
            let (ra, ia) = pb_keys(&pa.body);
            let (rb, ib) = pb_keys(&pb.body);
            assert_eq!(ia, ib, "{path} protobuf");
            if path.contains("Exact") {
                assert_eq!(ra, rb, "{path} protobuf RV");
                assert_eq!(pa.body, pb.body, "{path} protobuf byte-identical");
            }
        }
    }
    // Paging through kache equals kache's unpaged list at the same RV, and the token works
    // against the simulator too (same format), so a client can fail over mid-list.
    let full = k.api.get_ok(&format!("/api/v1/pods?resourceVersion={rv}&resourceVersionMatch=Exact")).await;
    let mut paged = Vec::new();
    let mut next = format!("/api/v1/pods?limit=70&resourceVersion={rv}&resourceVersionMatch=Exact");
    let mut switched = false;
    loop {
        let api = if switched { &sim.api } else { &k.api };
        let page = api.get_ok(&next).await;
        assert_eq!(list_rv(&page), rv);
        paged.extend(page["items"].as_array().unwrap().iter().cloned());
        match page["metadata"]["continue"].as_str() {
            Some(c) => next = format!("/api/v1/pods?limit=70&continue={c}"),
            None => break,
        }
        switched = !switched;
    }
    assert_eq!(keys_rvs(&paged), keys_rvs(full["items"].as_array().unwrap()));
}

/// Events of a JSON watch as (type, namespace/name, RV) until `n` arrive or the deadline.
async fn events(api: &Api, path: &str, n: usize) -> Vec<(String, String, u64)> {
    let mut w = api.watch(path, "application/json").await;
    assert_eq!(w.status, 200, "{path}");
    let end = deadline(60);
    let mut out = Vec::new();
    while out.len() < n {
        match w.next_json(end).await {
            Next::Item(ev) => {
                let t = ev["type"].as_str().unwrap().to_string();
                if t == "BOOKMARK" {
                    continue;
                }
                let m = &ev["object"]["metadata"];
                let key = format!("{}/{}", m["namespace"].as_str().unwrap_or(""), m["name"].as_str().unwrap_or(""));
                out.push((t, key, m["resourceVersion"].as_str().unwrap_or("0").parse().unwrap_or(0)));
            }
            other => panic!("{path}: stream stopped after {} of {n} events: {other:?}", out.len()),
        }
    }
    out
}

async fn churn_configmaps(sim: &TestSim, tag: &str, n: usize) {
    for i in 0..n {
        let name = format!("{tag}-{}", i % 3);
        let path = format!("/api/v1/namespaces/default/configmaps/{name}");
        if sim.get(&path).await.status == 404 {
            sim.create_cm("default", &name, json!({"i": i.to_string()})).await;
        } else if i % 4 == 3 {
            sim.must("delete", sim.delete(&path).await).await;
        } else {
            sim.must("patch", sim.patch(&path, &json!({"data": {"i": i.to_string()}})).await).await;
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn watches_through_kache_deliver_every_event_in_order_across_a_disconnect() {
    let sim = sim_with(&[]).await;
    let k = kache_in_front(&sim.addr.to_string(), &["--preload", "configmaps"]).await;
    let start_rv = list_rv(&sim.get_ok("/api/v1/configmaps?limit=1").await);
    churn_configmaps(&sim, "a", 12).await;
    // The upstream drops every watch (an apiserver restart); kache's informer resumes.
    sim.sim.disconnect_watchers();
    churn_configmaps(&sim, "a", 12).await;
    let path = format!("/api/v1/namespaces/default/configmaps?watch=1&resourceVersion={start_rv}");
    let direct = events(&sim.api, &path, 24).await;
    let through = events(&k.api, &path, 24).await;
    assert_eq!(direct, through, "same events, same order, once each");
    let rvs: Vec<u64> = through.iter().map(|e| e.2).collect();
    assert!(rvs.windows(2).all(|w| w[0] < w[1]), "strictly increasing RVs: {rvs:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_relist_after_410_reaches_open_watches_and_old_resume_points_as_the_changes() {
    let sim = sim_with(&[]).await;
    let k = kache_in_front(&sim.addr.to_string(), &["--preload", "configmaps"]).await;
    let before = list_rv(&k.api.get_ok("/api/v1/configmaps?resourceVersion=0&limit=1").await);
    let path = format!("/api/v1/namespaces/default/configmaps?watch=1&resourceVersion={before}");
    let mut open = k.api.watch(&path, "application/json").await;
    // Compaction upstream: kache's resume point expires and it relists; the changes it
    // missed reach the open watch as events (three configmaps created), which stays open.
    sim.sim.compact();
    churn_configmaps(&sim, "b", 3).await;
    sim.sim.disconnect_watchers();
    let end = deadline(60);
    let mut seen = Vec::new();
    while seen.len() < 3 {
        match open.next_json(end).await {
            Next::Item(ev) => {
                let m = &ev["object"]["metadata"];
                seen.push((ev["type"].as_str().unwrap().to_string(), m["name"].as_str().unwrap().to_string(), obj_rv(&ev["object"])));
            }
            other => panic!("the watch through kache ended or stalled after {seen:?}: {other:?}"),
        }
    }
    let created: Vec<(String, String, u64)> = ["b-0", "b-1", "b-2"].iter().map(|n| ("ADDED".to_string(), n.to_string(), 0)).collect();
    let names: Vec<(String, String, u64)> = seen.iter().map(|(t, n, _)| (t.clone(), n.clone(), 0)).collect();
    assert_eq!(names, created, "the three creations, in order");
    // kache holds the new state, and a client resuming from the old RV gets the same events.
    let want = sim.get_ok("/api/v1/configmaps?resourceVersion=0").await;
    let now = k.api.get_ok("/api/v1/configmaps?resourceVersion=0").await;
    assert_eq!(keys_rvs(now["items"].as_array().unwrap()), keys_rvs(want["items"].as_array().unwrap()));
    let resumed = events(&k.api, &path, 3).await;
    let again: Vec<(String, String, u64)> =
        resumed.iter().map(|(t, key, rv)| (t.clone(), key.trim_start_matches("default/").to_string(), *rv)).collect();
    assert_eq!(again, seen);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kube_rs_reflector_converges_to_the_simulator_through_kache() {
    use futures_util::StreamExt;
    use kube::runtime::{reflector, watcher, WatchStreamExt};
    let sim = sim_with(&[]).await;
    let k = kache_in_front(&sim.addr.to_string(), &["--preload", "pods"]).await;
    let client = kube::Client::try_from(kube::Config::new(format!("http://{}", k.serving.addr).parse().unwrap())).unwrap();
    let (reader, writer) = reflector::store::<Pod>();
    let stream = reflector(writer, watcher(kube::Api::<Pod>::all(client), watcher::Config::default())).applied_objects();
    let drain = tokio::spawn(async move {
        tokio::pin!(stream);
        while let Some(item) = stream.next().await {
            item.expect("watch stream item");
        }
    });
    reader.wait_until_ready().await.expect("reflector ready");
    // Churn through the simulator: label changes, deletes and creates.
    let (_, pods) = sim.all_pods().await;
    for (i, p) in pods.iter().take(60).enumerate() {
        let m = &p["metadata"];
        let path = format!("/api/v1/namespaces/{}/pods/{}", m["namespace"].as_str().unwrap(), m["name"].as_str().unwrap());
        if i % 6 == 5 {
            sim.must("delete pod", sim.delete(&path).await).await;
        } else {
            sim.must("patch pod", sim.patch(&path, &json!({"metadata": {"labels": {"reflected": i.to_string()}}})).await).await;
        }
    }
    let want = |items: &[Value]| -> BTreeMap<String, String> { keys_rvs(items).into_iter().collect() };
    let (_, now) = sim.all_pods().await;
    let expected = want(&now);
    let (reader, expected) = (&reader, &expected);
    eventually(60, 100, || async move {
        let got: BTreeMap<String, String> = reader
            .state()
            .iter()
            .map(|p| {
                (
                    format!("{}/{}", p.metadata.namespace.clone().unwrap_or_default(), p.metadata.name.clone().unwrap_or_default()),
                    p.metadata.resource_version.clone().unwrap_or_default(),
                )
            })
            .collect();
        if got == *expected {
            Ok(())
        } else {
            Err(format!("reflector store did not converge: {} vs {} objects", got.len(), expected.len()))
        }
    })
    .await;
    drain.abort();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kache_in_front_of_kache_serves_the_same_lists_and_watches() {
    let sim = sim_with(&[]).await;
    let k1 = kache_in_front(&sim.addr.to_string(), &["--preload", "pods,configmaps"]).await;
    let k2 = kache_in_front(&k1.serving.addr.to_string(), &["--preload", "pods,configmaps"]).await;
    let rv = list_rv(&sim.get_ok("/api/v1/pods?limit=1").await);
    let path = format!("/api/v1/pods?resourceVersion={rv}&resourceVersionMatch=NotOlderThan&fieldSelector=spec.nodeName%3Dnode-0001");
    let (a, b) = (sim.get_ok(&path).await, k2.api.get_ok(&path).await);
    assert_eq!(keys_rvs(a["items"].as_array().unwrap()), keys_rvs(b["items"].as_array().unwrap()));
    let start_rv = list_rv(&sim.get_ok("/api/v1/configmaps?limit=1").await);
    churn_configmaps(&sim, "t", 9).await;
    let wpath = format!("/api/v1/namespaces/default/configmaps?watch=1&resourceVersion={start_rv}");
    assert_eq!(events(&sim.api, &wpath, 9).await, events(&k2.api, &wpath, 9).await);
    // Writes pass through both tiers.
    let made = k2.api.create_cm("default", "via-two-tiers", json!({"k": "v"})).await;
    assert_eq!(made["metadata"]["name"], "via-two-tiers");
    assert_eq!(sim.get("/api/v1/namespaces/default/configmaps/via-two-tiers").await.status, 200);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_works_unchanged_through_kache() {
    let sim = sim_with(&[]).await;
    let k = kache_in_front(&sim.addr.to_string(), &[]).await;
    let kc = Kubectl::new(&format!("http://{}", k.serving.addr));
    let all = kc.json(&["get", "pods", "-A", "-o", "json"]).await;
    assert_eq!(all["items"].as_array().unwrap().len(), 400);
    let on_node = kc.json(&["get", "pods", "-A", "--field-selector", "spec.nodeName=node-0005", "-o", "json"]).await;
    assert_eq!(on_node["items"].as_array().unwrap().len(), 20);
    assert!(on_node["items"].as_array().unwrap().iter().all(|p| p["spec"]["nodeName"] == "node-0005"));
    let chunked = kc.json(&["get", "pods", "-A", "--chunk-size=64", "-o", "json"]).await;
    assert_eq!(crate::support::names(chunked["items"].as_array().unwrap()), crate::support::names(all["items"].as_array().unwrap()));
    let table = kc.run(&["get", "pods", "-n", "ns-0001"]).await;
    assert!(table.status.success(), "{}", String::from_utf8_lossy(&table.stderr));
    assert!(String::from_utf8_lossy(&table.stdout).starts_with("NAME"));
    let manifest = kc.dir().join("cm.yaml");
    std::fs::write(&manifest, "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: through-kache\n  namespace: default\ndata:\n  k: v\n")
        .unwrap();
    let applied = kc.run(&["apply", "-f", manifest.to_str().unwrap()]).await;
    assert!(applied.status.success(), "{}", String::from_utf8_lossy(&applied.stderr));
    let got = kc.json(&["get", "configmap", "through-kache", "-n", "default", "-o", "json"]).await;
    assert_eq!(got["data"]["k"], "v");
    let pod = all["items"][0]["metadata"].clone();
    let logs = kc.run(&["logs", "-n", pod["namespace"].as_str().unwrap(), pod["name"].as_str().unwrap(), "-c", "app"]).await;
    assert!(String::from_utf8_lossy(&logs.stdout).contains("simulated log line 1"), "{}", String::from_utf8_lossy(&logs.stderr));
    let deleted = kc.run(&["delete", "-f", manifest.to_str().unwrap()]).await;
    assert!(deleted.status.success());
    let gone = kc.run(&["get", "configmap", "through-kache", "-n", "default"]).await;
    assert!(!gone.status.success() && String::from_utf8_lossy(&gone.stderr).contains("NotFound"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn python_client_lists_and_watches_through_kache() {
    let sim = sim_with(&[]).await;
    let k = kache_in_front(&sim.addr.to_string(), &[]).await;
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/python/sim_client.py");
    let server = format!("http://{}", k.serving.addr);
    let out =
        tokio::task::spawn_blocking(move || std::process::Command::new("python3").arg(script).arg(server).arg("400").arg("20").output())
            .await
            .unwrap()
            .expect("python3 runs");
    let text = format!("{}\n{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert!(!text.contains("No module named 'kubernetes'"), "the Python client is missing: pip install kubernetes");
    assert!(out.status.success(), "python client through kache failed:\n{text}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_get_watch_through_kache_sees_live_changes() {
    let sim = sim_with(&[]).await;
    let k = kache_in_front(&sim.addr.to_string(), &["--preload", "configmaps"]).await;
    let kc = Kubectl::new(&format!("http://{}", k.serving.addr));
    let mut cmd = kc.command(&["get", "configmaps", "-n", "default", "-w", "-o", "name"]);
    cmd.stdout(std::process::Stdio::piped()).stderr(std::process::Stdio::null());
    let mut child = crate::support::ChildGuard(cmd.spawn().expect("spawn kubectl"));
    let mut rx = crate::support::stdout_lines(&mut child.0);
    // The initial list arrives first; then a new object must show up live.
    let first = tokio::time::timeout(Duration::from_secs(60), rx.recv()).await.expect("initial list").expect("kubectl output");
    assert!(first.starts_with("configmap/"), "{first}");
    sim.create_cm("default", "watched-through-kache", json!({"k": "v"})).await;
    let end = deadline(60);
    loop {
        let line = tokio::time::timeout_at(end, rx.recv()).await.expect("live event within 60 s").expect("kubectl still running");
        if line == "configmap/watched-through-kache" {
            break;
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_that_stops_reading_never_delays_other_watchers() {
    let sim = sim_with(&[]).await;
    let k = kache_in_front(&sim.addr.to_string(), &["--preload", "configmaps", "--watcher-lag", "64"]).await;
    let from = list_rv(&k.api.get_ok("/api/v1/configmaps?resourceVersion=0&limit=1").await);
    let path = format!("/api/v1/namespaces/default/configmaps?watch=1&resourceVersion={from}");
    // Opened and never read until the end: its socket and buffers fill up.
    let mut stalled = k.api.watch(&path, "application/json").await;
    let big = "x".repeat(64 * 1024);
    let n = 300;
    let reader = {
        let api = Api::new(&k.serving.addr.to_string());
        let path = path.clone();
        tokio::spawn(async move { events(&api, &path, n).await })
    };
    for i in 0..n {
        sim.create_cm("default", &format!("slow-{i}"), json!({"big": big})).await;
    }
    let got = reader.await.unwrap();
    assert_eq!(got.len(), n, "the reading watcher got every event");
    assert!(got.windows(2).all(|w| w[0].2 < w[1].2));
    // The stalled one was ended (it fell behind the ring): it holds fewer than all events.
    let mut seen = 0;
    loop {
        match stalled.next_json(deadline(60)).await {
            Next::Item(_) => seen += 1,
            Next::End => break,
            Next::TimedOut => panic!("the stalled watcher was never ended ({seen} events read)"),
        }
    }
    assert!(seen < n, "a stalled watcher cannot have kept all {n} events buffered ({seen})");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unreachable_upstream_is_a_503_status() {
    let sim = sim_with(&[]).await;
    let k = kache_in_front(&sim.addr.to_string(), &["--preload", "configmaps"]).await;
    let up = sim.addr;
    drop(sim);
    // Wait until the simulator's port refuses connections.
    eventually(30, 50, || async move {
        match tokio::net::TcpStream::connect(up).await {
            Ok(_) => Err("the simulator's port still accepts connections".to_string()),
            Err(_) => Ok(()),
        }
    })
    .await;
    let r = k.api.post("/api/v1/namespaces/default/configmaps", &json!({"metadata": {"name": "x"}})).await;
    assert_eq!(r.status, 503, "{}", r.text());
    let s = r.json();
    assert_eq!((s["kind"].as_str(), s["reason"].as_str(), s["code"].as_u64()), (Some("Status"), Some("ServiceUnavailable"), Some(503)));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn large_cached_answers_are_gzipped_for_clients_that_ask_as_the_apiserver_does() {
    use http_body_util::BodyExt as _;
    use std::io::Read as _;
    let sim = sim_with(&[]).await;
    let k = kache_in_front(&sim.addr.to_string(), &["--preload", "pods"]).await;
    let path = "/api/v1/pods?resourceVersion=0";
    let plain = k.api.get(path).await;
    assert_eq!(plain.status, 200);
    assert!(plain.header("content-encoding").is_none(), "no gzip unasked");
    assert!(plain.body.len() > 128 * 1024, "the list is over the 128 KiB threshold: {} bytes", plain.body.len());
    let before = k.serving.serve.cache_hits();
    let req = http::Request::get(format!("{}{path}", k.api.base))
        .header("accept", "application/json")
        .header("accept-encoding", "gzip")
        .body(http_body_util::Full::new(bytes::Bytes::new()))
        .unwrap();
    let resp = k.api.client.request(req).await.expect("response");
    assert_eq!(resp.headers()["content-encoding"], "gzip");
    assert_eq!(resp.headers()["vary"], "Accept-Encoding");
    let zipped = resp.into_body().collect().await.unwrap().to_bytes();
    assert_eq!(k.serving.serve.cache_hits() - before, 1, "answered from cache");
    let mut body = Vec::new();
    flate2::read::GzDecoder::new(&zipped[..]).read_to_end(&mut body).expect("a gzip stream");
    assert!(zipped.len() * 4 < body.len(), "{} bytes for {}", zipped.len(), body.len());
    let (a, b): (Value, Value) = (serde_json::from_slice(&body).unwrap(), plain.json());
    assert_eq!(a["items"], b["items"], "the same list, compressed");
}

/// A WatchList answered from memory to a client that accepts gzip (as every Go client does)
/// comes compressed: its initial events and bookmark decodable as soon as they are sent, and
/// a live event after them decodable as soon as it is sent, the same events as a WatchList
/// unasked for gzip.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_watch_list_is_gzipped_for_clients_that_ask_and_each_event_decodes_as_it_comes() {
    use http_body_util::BodyExt as _;
    let sim = sim_with(&[]).await;
    let k = kache_in_front(&sim.addr.to_string(), &["--preload", "configmaps"]).await;
    let path =
        "/api/v1/namespaces/default/configmaps?watch=1&sendInitialEvents=true&resourceVersionMatch=NotOlderThan&allowWatchBookmarks=true";
    let open = |gzip: bool| {
        let mut req = http::Request::get(format!("{}{path}", k.api.base)).header("accept", "application/json");
        if gzip {
            req = req.header("accept-encoding", "gzip");
        }
        k.api.client.request(req.body(http_body_util::Full::new(bytes::Bytes::new())).unwrap())
    };
    let named = |e: &Value| (e["type"].as_str().unwrap().to_string(), e["object"]["metadata"]["name"].as_str().unwrap_or("").to_string());
    let mut zipped = open(true).await.expect("response");
    assert_eq!(zipped.status(), 200);
    assert_eq!(zipped.headers()["content-encoding"], "gzip");
    let mut plain = open(false).await.expect("response");
    assert!(plain.headers().get("content-encoding").is_none(), "no gzip unasked");
    // Each side read a frame at a time up to its initial-events-end bookmark.
    let mut gunzip = crate::support::gzip::Gunzip::new();
    let mut initial: Vec<Value> = Vec::new();
    while !initial.last().is_some_and(|e| e["type"] == "BOOKMARK") {
        gunzip.push(&zipped.body_mut().frame().await.expect("a frame").unwrap().into_data().unwrap());
        initial.extend(gunzip.events());
    }
    let mut text = String::new();
    while !text.contains("k8s.io/initial-events-end") {
        text.push_str(std::str::from_utf8(&plain.body_mut().frame().await.expect("a frame").unwrap().into_data().unwrap()).unwrap());
    }
    assert!(initial.len() > 1, "{initial:?}");
    assert_eq!(initial.last().unwrap()["object"]["metadata"]["annotations"]["k8s.io/initial-events-end"], "true");
    let unzipped: Vec<Value> = text.lines().map(|l| serde_json::from_str(l).unwrap()).collect();
    assert_eq!(
        initial.iter().map(named).collect::<Vec<_>>(),
        unzipped.iter().map(named).collect::<Vec<_>>(),
        "the same initial events and bookmark"
    );

    let cm = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "after-the-list"}});
    let r = k.api.post("/api/v1/namespaces/default/configmaps", &cm).await;
    assert_eq!(r.status, 201, "{}", r.text());
    let mut live = Vec::new();
    while live.is_empty() {
        gunzip.push(&zipped.body_mut().frame().await.expect("a frame").unwrap().into_data().unwrap());
        live.extend(gunzip.events());
    }
    let added = ("ADDED".to_string(), "after-the-list".to_string());
    assert_eq!(live.iter().map(named).collect::<Vec<_>>(), [added], "the live event, alone, after the initial ones");
}

/// A feed whose encoding the upstream refuses (406: a custom resource taken for built-in
/// and asked for in protobuf) stops at once, says why, and never retries.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_feed_the_upstream_refuses_stops_and_says_why() {
    let sim = crate::support::start(&cluster(&[])).await;
    let mut widgets = kache::sim::catalog::resource("widgets");
    // Believed built-in, so asked for in protobuf, which the upstream does not serve for it.
    widgets.protobuf = true;
    let res = std::sync::Arc::new(widgets);
    let cache = std::sync::Arc::new(kache::cache::KindCache::new(res, 0, Default::default()));
    let up = kache::app::plain_upstream(&format!("http://{}", sim.addr)).unwrap();
    let feed = kache::cache::feed::Feed::new(cache, kache::api::media::Format::Protobuf, up);
    // `run` loops for as long as its feed can work; for this one it returns.
    tokio::time::timeout(Duration::from_secs(60), feed.clone().run()).await.expect("the feed stops instead of retrying");
    let why = feed.refused().expect("the feed says why");
    assert!(why.contains("406") && why.contains("NotAcceptable"), "{why}");
    assert!(!feed.synced());
}

/// kache in front of the simulator caches a custom resource, reads its CRD from the simulator
/// and answers the resource's Tables from its cache with the CRD's columns: those a real
/// apiserver printed for the same CRD (testdata/crd).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_custom_resources_table_is_answered_from_cache_with_its_crds_columns() {
    let sim = sim_with(&[]).await;
    let k = kache_in_front(&sim.addr.to_string(), &["--preload", "widgets.example.com"]).await;
    let widgets = "/apis/example.com/v1/namespaces/default/widgets";
    for name in ["w1", "w2", "w3"] {
        sim.must("create widget", sim.post(widgets, &captured_widget(name, "default")).await).await;
    }
    let rv = list_rv(&sim.get_ok(widgets).await);
    caught_up(&k, &sim, rv, &[("example.com", "widgets")]).await;
    let cache = k.serving.serve.cache("example.com", "widgets", kache::api::media::Format::Json).expect("the widgets cache");
    assert!(cache.snapshot().custom.is_some(), "kache read the simulator's CRD");
    let table = "application/json;as=Table;v=v1;g=meta.k8s.io";
    let path = format!("{widgets}?resourceVersion={rv}&resourceVersionMatch=Exact");
    let hits = k.serving.serve.cache_hits();
    let ours = k.api.request(http::Method::GET, &path, Some(table), None, Vec::new()).await;
    assert_eq!(ours.status, 200, "{}", ours.text());
    assert_eq!(k.serving.serve.cache_hits(), hits + 1, "answered from kache's cache");
    let ours = ours.json();
    let real = crd_golden("widgets.table.json");
    assert_eq!(ours["columnDefinitions"], real["columnDefinitions"], "the CRD's columns, as the apiserver wrote them");
    // The rows: what the simulator prints for the same objects at the same RV, relative times
    // (its date columns) aside.
    let upstream = sim.request(http::Method::GET, &path, Some(table), None, Vec::new()).await.json();
    let dates: Vec<usize> =
        real["columnDefinitions"].as_array().unwrap().iter().enumerate().filter(|(_, c)| c["type"] == "date").map(|(i, _)| i).collect();
    let rows = |t: &Value| -> Vec<Value> {
        let mut rows = t["rows"].as_array().unwrap().clone();
        for r in &mut rows {
            for &i in &dates {
                r["cells"][i] = Value::Null;
            }
        }
        rows
    };
    assert_eq!(rows(&ours).len(), 3);
    assert_eq!(rows(&ours), rows(&upstream));
    let cells = |t: &Value| t["rows"][0]["cells"].as_array().unwrap()[..5].to_vec();
    assert_eq!(cells(&ours), cells(&real), "w1's first cells, as the apiserver printed them");
}

/// A watch from before kache's window is the upstream's: the upstream's longer window still
/// holds its events (kache would have said 410), and when it does not, its 410 names its own
/// oldest RV, which kache cannot know.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_watch_older_than_kaches_window_gets_what_the_upstream_has() {
    let sim = sim_with(&[]).await;
    let k = kache_in_front(&sim.addr.to_string(), &["--preload", "configmaps", "--cache-window-events", "2"]).await;
    let path = "/api/v1/namespaces/default/configmaps";
    let from = list_rv(&sim.get_ok(path).await);
    churn_configmaps(&sim, "old", 6).await;
    let now = list_rv(&sim.get_ok(path).await);
    caught_up(&k, &sim, now, &[("", "configmaps")]).await;
    let cache = k.serving.serve.cache("", "configmaps", kache::api::media::Format::Json).unwrap();
    assert!(cache.snapshot().window.floor() > from, "the RV has left kache's window");
    let watch = format!("{path}?watch=1&resourceVersion={from}");
    let direct = events(&sim.api, &watch, 6).await;
    let through = events(&k.api, &watch, 6).await;
    assert_eq!(through, direct, "the upstream's events, not kache's 410");
}

/// kache's own answers are indented for the clients the apiserver indents for (the format is
/// checked against the apiserver's captures in the unit tests); watch streams never are.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn curl_gets_indented_json_from_cache_and_compact_watch_events() {
    use http_body_util::BodyExt;
    let sim = sim_with(&[]).await;
    let k = kache_in_front(&sim.addr.to_string(), &["--preload", "configmaps"]).await;
    let get = |path: &str, agent: &str| {
        let req = http::Request::builder()
            .uri(format!("{}{path}", k.api.base))
            .header("user-agent", agent)
            .body(http_body_util::Full::new(bytes::Bytes::new()))
            .unwrap();
        let client = k.api.client.clone();
        async move { client.request(req).await.unwrap().into_body().collect().await.unwrap().to_bytes() }
    };
    let hits = k.serving.serve.cache_hits();
    let path = "/api/v1/namespaces/default/configmaps?resourceVersion=0";
    let compact = get(path, "kubectl/v1.36").await;
    let pretty = get(path, "curl/8.5.0").await;
    assert_eq!(compact.iter().filter(|b| **b == b'\n').count(), 1, "compact, with one final newline");
    assert!(pretty.starts_with(b"{\n  \"kind\": \"ConfigMapList\",\n"), "{}", String::from_utf8_lossy(&pretty));
    let v: Value = serde_json::from_slice(&pretty).unwrap();
    assert_eq!(v, serde_json::from_slice::<Value>(&compact).unwrap());
    let status = get("/api/v1/namespaces/default/configmaps?limit=abc", "Wget/1.21").await;
    assert!(status.starts_with(b"{\n  \"kind\": \"Status\",\n"), "{}", String::from_utf8_lossy(&status));
    let watch = get("/api/v1/namespaces/default/configmaps?watch=1&resourceVersion=0&timeoutSeconds=1", "curl/8.5.0").await;
    assert!(watch.starts_with(b"{\"type\":\"ADDED\",\"object\":{"), "{}", String::from_utf8_lossy(&watch));
    assert!(k.serving.serve.cache_hits() >= hits + 4, "answered from cache");
}
