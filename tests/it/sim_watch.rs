//! The simulated apiserver's WATCH contract over real HTTP: resuming from the event window,
//! the 410 ERROR event for a resume point older than the window, bookmarks (periodic and the
//! `sendInitialEvents` end marker), `timeoutSeconds`, and label/field selector transitions
//! turned into ADDED/MODIFIED/DELETED.

use crate::support::*;
use serde_json::{json, Value};

const SMALL: &[&str] = &["--nodes", "10", "--pods", "300"];

fn ev_type(e: &Value) -> &str {
    e["type"].as_str().unwrap()
}

fn ev_rv(e: &Value) -> u64 {
    obj_rv(&e["object"])
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn watch_resumes_from_an_rv_inside_the_window() {
    let s = start(&cluster(SMALL)).await;
    let ns = "default";
    let path = format!("/api/v1/namespaces/{ns}/configmaps");
    let r0 = list_rv(&s.get_ok(&path).await);
    let created = s.create_cm(ns, "resume-me", json!({"v": "1"})).await;
    let p = s.patch(&format!("{path}/resume-me"), &json!({"data": {"v": "2"}})).await;
    let modified = s.must("patch", p).await;
    // A change of another kind in between must not show up.
    let other = s.get_ok("/api/v1/pods?limit=1").await["items"][0].clone();
    let op = format!(
        "/api/v1/namespaces/{}/pods/{}",
        other["metadata"]["namespace"].as_str().unwrap(),
        other["metadata"]["name"].as_str().unwrap()
    );
    let p = s.patch(&op, &json!({"metadata": {"annotations": {"noise": "1"}}})).await;
    s.must("patch pod", p).await;
    let d = s.delete(&format!("{path}/resume-me")).await;
    s.must("delete", d).await;
    let deleted_rv = s.sim.resource_version();

    for accept in ["application/json", PROTOBUF] {
        let mut w = s.watch(&format!("{path}?watch=1&resourceVersion={r0}&timeoutSeconds=2"), accept).await;
        assert_eq!(w.status, 200);
        let got: Vec<(String, u64, Value)> = if accept == PROTOBUF {
            let mut out = Vec::new();
            let end = deadline(20);
            loop {
                match w.next_frame(end).await {
                    Next::Item(f) => {
                        let (t, inner) = watch_event(&f);
                        assert_eq!(type_of(&inner).1, "ConfigMap");
                        let cm = <k8s_pb::api::core::v1::ConfigMap as prost::Message>::decode(inner.raw.as_deref().unwrap()).unwrap();
                        let rv = cm.metadata.as_ref().unwrap().resource_version.as_deref().unwrap().parse().unwrap();
                        out.push((t, rv, json!(cm.data)));
                    }
                    Next::End => break,
                    Next::TimedOut => panic!("protobuf watch did not end"),
                }
            }
            out
        } else {
            w.json_until_end(deadline(20))
                .await
                .into_iter()
                .map(|e| (ev_type(&e).to_string(), ev_rv(&e), e["object"]["data"].clone()))
                .collect()
        };
        let want = vec![
            ("ADDED".to_string(), obj_rv(&created), json!({"v": "1"})),
            ("MODIFIED".to_string(), obj_rv(&modified), json!({"v": "2"})),
            ("DELETED".to_string(), deleted_rv, json!({"v": "2"})),
        ];
        assert_eq!(got, want, "{accept}: exactly the events after {r0}, in order");
    }
    // Resuming from the middle delivers only what follows.
    let mut w = s.watch(&format!("{path}?watch=1&resourceVersion={}&timeoutSeconds=1", obj_rv(&modified)), "application/json").await;
    let rest = w.json_until_end(deadline(20)).await;
    assert_eq!(rest.iter().map(|e| (ev_type(e).to_string(), ev_rv(e))).collect::<Vec<_>>(), vec![("DELETED".to_string(), deleted_rv)]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn watch_older_than_the_window_gets_a_single_410_error_event() {
    let mut c = cluster(SMALL);
    c.window_events = 5;
    let s = start(&c).await;
    let ns = "default";
    let path = format!("/api/v1/namespaces/{ns}/configmaps");
    let r0 = list_rv(&s.get_ok(&path).await);
    let mut rvs = Vec::new();
    for i in 0..8 {
        rvs.push(obj_rv(&s.create_cm(ns, &format!("churn-{i}"), json!({"i": i.to_string()})).await));
    }
    let mut w = s.watch(&format!("{path}?watch=1&resourceVersion={r0}"), "application/json").await;
    assert_eq!(w.status, 200, "the watch starts; the error is an event");
    let evs = w.json_until_end(deadline(20)).await;
    assert_eq!(evs.len(), 1, "a single event, then the stream ends: {evs:?}");
    assert_eq!(evs[0]["type"], "ERROR");
    let st = &evs[0]["object"];
    assert_eq!(
        (st["kind"].as_str(), st["status"].as_str(), st["reason"].as_str(), st["code"].as_u64()),
        (Some("Status"), Some("Failure"), Some("Expired"), Some(410))
    );
    let msg = st["message"].as_str().unwrap();
    let prefix = format!("too old resource version: {r0} (");
    assert!(msg.starts_with(&prefix) && msg.ends_with(')'), "{msg}");
    let oldest: u64 = msg[prefix.len()..msg.len() - 1].parse().unwrap();
    assert!(oldest > r0 && oldest < rvs[7], "{msg}");

    // The same in protobuf: one ERROR frame holding a Status.
    let mut w = s.watch(&format!("{path}?watch=1&resourceVersion={r0}"), PROTOBUF).await;
    assert_eq!(w.status, 200);
    let end = deadline(20);
    let (t, inner) = watch_event(&w.next_frame(end).await.item("410 frame"));
    assert_eq!(t, "ERROR");
    assert_eq!(type_of(&inner), ("v1".into(), "Status".into()));
    let st = <PbStatus as prost::Message>::decode(inner.raw.as_deref().unwrap()).unwrap();
    assert_eq!((st.reason.as_deref(), st.code, st.message.as_deref()), (Some("Expired"), Some(410), Some(msg)));
    assert!(matches!(w.next_frame(end).await, Next::End));

    // The newest 5 events are still there.
    let mut w = s.watch(&format!("{path}?watch=1&resourceVersion={}&timeoutSeconds=1", rvs[3]), "application/json").await;
    let evs = w.json_until_end(deadline(20)).await;
    assert_eq!(evs.iter().map(ev_rv).collect::<Vec<_>>(), rvs[4..].to_vec());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bookmarks_never_go_backwards() {
    let mut c = cluster(SMALL);
    c.bookmark_interval_seconds = 1;
    c.churn_per_sec = 20.0;
    let s = start(&c).await;
    let from = s.sim.resource_version();
    let mut w = s
        .watch(&format!("/api/v1/pods?watch=1&resourceVersion={from}&allowWatchBookmarks=true&timeoutSeconds=5"), "application/json")
        .await;
    let evs = w.json_until_end(deadline(30)).await;
    let bookmarks: Vec<&Value> = evs.iter().filter(|e| e["type"] == "BOOKMARK").collect();
    assert!(bookmarks.len() >= 2, "{} bookmarks in 5 s at a 1 s interval", bookmarks.len());
    assert!(evs.len() > bookmarks.len(), "churn produced events");
    let mut seen = from;
    for e in &evs {
        let rv = ev_rv(e);
        if e["type"] == "BOOKMARK" {
            assert!(rv >= seen, "bookmark {rv} went back from {seen}");
            let o = &e["object"];
            assert_eq!((o["kind"].as_str(), o["apiVersion"].as_str()), (Some("Pod"), Some("v1")));
            assert_eq!(o["metadata"].as_object().unwrap().len(), 1, "a bookmark holds only the RV: {o}");
        } else {
            assert!(rv > seen, "{} at {rv} after {seen}", e["type"]);
        }
        seen = rv;
    }
    assert!(ev_rv(bookmarks.last().unwrap()) > from, "bookmarks move with the churn");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn send_initial_events_ends_with_the_annotated_bookmark() {
    let s = start(&cluster(SMALL)).await;
    let (_, pods) = s.all_pods().await;
    let ns = pods[0]["metadata"]["namespace"].as_str().unwrap().to_string();
    // A write to another kind moves the global RV past every pod's.
    s.create_cm("default", "move-rv", json!({})).await;
    let cur = s.sim.resource_version();
    let want: Vec<(String, String)> = keys_rvs(&pods).into_iter().filter(|(k, _)| k.starts_with(&format!("{ns}/"))).collect();
    let q = "watch=1&sendInitialEvents=true&resourceVersionMatch=NotOlderThan&allowWatchBookmarks=true&timeoutSeconds=2";
    let mut w = s.watch(&format!("/api/v1/namespaces/{ns}/pods?{q}"), "application/json").await;
    assert_eq!(w.status, 200);
    let evs = w.json_until_end(deadline(20)).await;
    let added: Vec<Value> = evs.iter().take_while(|e| e["type"] == "ADDED").map(|e| e["object"].clone()).collect();
    assert_eq!(keys_rvs(&added), want, "ADDED for every object");
    let end = &evs[added.len()];
    assert_eq!(end["type"], "BOOKMARK");
    assert_eq!(end["object"]["metadata"]["annotations"], json!({"k8s.io/initial-events-end": "true"}));
    // The shape of the captured pod bookmark (06b), at this RV.
    let bookmark = json!({"kind": "Pod", "apiVersion": "v1", "metadata": {"resourceVersion": cur.to_string(), "annotations": {"k8s.io/initial-events-end": "true"}}, "spec": {"containers": null}, "status": {}});
    assert_eq!(end["object"], bookmark);
    let brv = ev_rv(end);
    assert!(added.iter().all(|o| obj_rv(o) <= brv));
    assert_eq!(brv, cur, "the initial state is consistent at the current RV");
    assert!(evs[added.len() + 1..].iter().all(|e| e["type"] == "BOOKMARK"), "no changes, only bookmarks after");

    // Protobuf: the same sequence of frames.
    let mut w = s.watch(&format!("/api/v1/namespaces/{ns}/pods?{q}"), PROTOBUF).await;
    let end = deadline(20);
    let mut n = 0;
    loop {
        let (t, inner) = watch_event(&w.next_frame(end).await.item("initial frame"));
        assert_eq!(type_of(&inner).1, "Pod");
        let pod = <k8s_pb::api::core::v1::Pod as prost::Message>::decode(inner.raw.as_deref().unwrap()).unwrap();
        let m = pod.metadata.unwrap();
        if t == "BOOKMARK" {
            assert_eq!(m.annotations.get("k8s.io/initial-events-end").map(String::as_str), Some("true"));
            assert_eq!(m.resource_version.as_deref(), Some(cur.to_string().as_str()));
            break;
        }
        assert_eq!(t, "ADDED");
        n += 1;
    }
    assert_eq!(n, want.len());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn timeout_seconds_ends_the_stream() {
    let s = start(&cluster(SMALL)).await;
    let cur = s.sim.resource_version();
    for accept in ["application/json", PROTOBUF] {
        let mut w = s.watch(&format!("/api/v1/pods?watch=1&resourceVersion={cur}&timeoutSeconds=1"), accept).await;
        assert_eq!(w.status, 200);
        let end = deadline(20);
        if accept == PROTOBUF {
            assert!(matches!(w.next_frame(end).await, Next::End), "{accept}: no events, then the end");
        } else {
            assert!(w.json_until_end(end).await.is_empty());
        }
    }
}

/// A pod's API path.
fn pod_path(p: &Value) -> String {
    format!("/api/v1/namespaces/{}/pods/{}", p["metadata"]["namespace"].as_str().unwrap(), p["metadata"]["name"].as_str().unwrap())
}

/// Read exactly the events a watch delivers until it ends.
async fn drain(mut w: WatchStream) -> Vec<Value> {
    assert_eq!(w.status, 200);
    w.json_until_end(deadline(30)).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn label_selector_transitions_become_added_modified_deleted() {
    let s = start(&cluster(SMALL)).await;
    let (r0, pods) = s.all_pods().await;
    let pod = pods[42].clone();
    assert_ne!(pod["metadata"]["labels"]["tier"], "probe");
    let path = pod_path(&pod);
    let q = format!("/api/v1/pods?watch=1&labelSelector={}&resourceVersion={r0}&timeoutSeconds=3", q("tier=probe"));
    let live = s.watch(&q, "application/json").await;

    let p = s.patch(&path, &json!({"metadata": {"labels": {"tier": "probe"}}})).await;
    let a1 = s.must("add label", p).await;
    let p = s.patch(&path, &json!({"metadata": {"annotations": {"probe/step": "2"}}})).await;
    let a2 = s.must("annotate", p).await;
    let p = s.patch(&path, &json!({"metadata": {"labels": {"tier": null}}})).await;
    let a3 = s.must("remove label", p).await;
    assert!(a3["metadata"]["labels"].get("tier").is_none());
    // A change after leaving the selector is not seen.
    let p = s.patch(&path, &json!({"metadata": {"annotations": {"probe/step": "4"}}})).await;
    s.must("annotate again", p).await;

    let resumed = s.watch(&q, "application/json").await;
    for (how, evs) in [("live", drain(live).await), ("resumed", drain(resumed).await)] {
        let seq: Vec<(&str, u64)> = evs.iter().map(|e| (ev_type(e), ev_rv(e))).collect();
        assert_eq!(seq, vec![("ADDED", obj_rv(&a1)), ("MODIFIED", obj_rv(&a2)), ("DELETED", obj_rv(&a3))], "{how}");
        assert_eq!(evs[0]["object"]["metadata"]["labels"]["tier"], "probe");
        assert_eq!(evs[1]["object"]["metadata"]["annotations"]["probe/step"], "2");
        let gone = &evs[2]["object"];
        assert_eq!(gone["metadata"]["labels"]["tier"], "probe", "{how}: DELETED carries the last matching state");
        assert_eq!(gone["metadata"]["annotations"]["probe/step"], "2");
        assert_eq!(gone["kind"], "Pod");
    }
    // Protobuf: the DELETED object's bytes are the previous state rewritten to the new RV.
    let mut w = s.watch(&q, PROTOBUF).await;
    let end = deadline(30);
    let mut seq = Vec::new();
    loop {
        match w.next_frame(end).await {
            Next::Item(f) => {
                let (t, inner) = watch_event(&f);
                let pod = <k8s_pb::api::core::v1::Pod as prost::Message>::decode(inner.raw.as_deref().unwrap()).unwrap();
                let m = pod.metadata.unwrap();
                seq.push((t, m.resource_version.unwrap().parse::<u64>().unwrap(), m.labels.get("tier").cloned()));
            }
            Next::End => break,
            Next::TimedOut => panic!("protobuf watch did not end"),
        }
    }
    let probe = Some("probe".to_string());
    assert_eq!(
        seq,
        vec![
            ("ADDED".into(), obj_rv(&a1), probe.clone()),
            ("MODIFIED".into(), obj_rv(&a2), probe.clone()),
            ("DELETED".into(), obj_rv(&a3), probe)
        ]
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn field_selector_transitions_via_the_status_subresource() {
    let s = start(&cluster(SMALL)).await;
    let (r0, pods) = s.all_pods().await;
    let pod = pods.iter().find(|p| p["status"]["phase"] == "Running").expect("a running pod").clone();
    let path = pod_path(&pod);
    let ns = pod["metadata"]["namespace"].as_str().unwrap();
    let sel = q("status.phase=Succeeded");
    let q1 = format!("/api/v1/pods?watch=1&fieldSelector={sel}&resourceVersion={r0}&timeoutSeconds=3");
    let q2 = format!("/api/v1/namespaces/{ns}/pods?watch=1&fieldSelector={sel}&resourceVersion={r0}&timeoutSeconds=3");
    let (live, live_ns) = (s.watch(&q1, "application/json").await, s.watch(&q2, "application/json").await);

    let p = s.patch(&format!("{path}/status"), &json!({"status": {"phase": "Succeeded"}})).await;
    let a1 = s.must("phase Succeeded", p).await;
    assert_eq!(a1["status"]["phase"], "Succeeded");
    // The main resource ignores status but takes the annotation.
    let p = s.patch(&path, &json!({"metadata": {"annotations": {"probe": "x"}}, "status": {"phase": "Failed"}})).await;
    let a2 = s.must("annotate", p).await;
    assert_eq!(a2["status"]["phase"], "Succeeded", "status is only changed through /status");
    let p = s.patch(&format!("{path}/status"), &json!({"status": {"phase": "Running"}})).await;
    let a3 = s.must("phase Running", p).await;

    let resumed = s.watch(&q1, "application/json").await;
    for (how, evs) in [("live", drain(live).await), ("live namespaced", drain(live_ns).await), ("resumed", drain(resumed).await)] {
        let seq: Vec<(&str, u64)> = evs.iter().map(|e| (ev_type(e), ev_rv(e))).collect();
        assert_eq!(seq, vec![("ADDED", obj_rv(&a1)), ("MODIFIED", obj_rv(&a2)), ("DELETED", obj_rv(&a3))], "{how}");
        assert_eq!(evs[2]["object"]["status"]["phase"], "Succeeded", "{how}: DELETED carries the last matching state");
        assert_eq!(evs[2]["object"]["metadata"]["annotations"]["probe"], "x");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn watch_rv_too_large_times_out_and_rv_zero_lists_first() {
    let s = start(&cluster(SMALL)).await;
    let cur = s.sim.resource_version();
    let far = cur + 1_000_000;
    let r = s.get(&format!("/api/v1/pods?watch=1&resourceVersion={far}")).await;
    assert_eq!(r.status, 504, "{}", r.text());
    let st = r.json();
    assert_eq!((st["reason"].as_str(), st["details"]["causes"][0]["reason"].as_str()), (Some("Timeout"), Some("ResourceVersionTooLarge")));

    let (_, pods) = s.all_pods().await;
    let mut w = s.watch("/api/v1/pods?watch=1&resourceVersion=0&timeoutSeconds=1", "application/json").await;
    let evs = w.json_until_end(deadline(30)).await;
    assert!(evs.iter().all(|e| e["type"] == "ADDED" && e["object"]["kind"] == "Pod"));
    let objs: Vec<Value> = evs.into_iter().map(|e| e["object"].clone()).collect();
    assert_eq!(keys_rvs(&objs), keys_rvs(&pods), "synthetic ADDED in key order with each object's own RV");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn timeout_seconds_zero_means_no_timeout_given() {
    let s = start(&cluster(SMALL)).await;
    let cur = s.sim.resource_version();
    let mut w =
        s.watch(&format!("/api/v1/namespaces/default/configmaps?watch=1&resourceVersion={cur}&timeoutSeconds=0"), "application/json").await;
    assert_eq!(w.status, 200);
    let created = s.create_cm("default", "after-zero", json!({})).await;
    let ev = w.next_json(deadline(20)).await.item("the watch is still open after timeoutSeconds=0");
    assert_eq!((ev_type(&ev), ev_rv(&ev)), ("ADDED", obj_rv(&created)));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn watchers_end_when_their_clients_go_away() {
    let s = start(&cluster(SMALL)).await;
    let pods = s.sim.cache("", "pods").unwrap().clone();
    let cur = s.sim.resource_version();
    let base = pods.watchers();
    let table = "application/json;as=Table;v=v1;g=meta.k8s.io,application/json";
    let mut open = Vec::new();
    for accept in ["application/json", PROTOBUF, table] {
        let w = s.watch(&format!("/api/v1/pods?watch=1&resourceVersion={cur}"), accept).await;
        assert_eq!(w.status, 200, "{accept}");
        open.push(w);
    }
    let settle = |want: usize, what: &'static str| {
        let pods = pods.clone();
        async move {
            let end = deadline(20);
            while pods.watchers() != want {
                assert!(tokio::time::Instant::now() < end, "{what}: {} watchers, want {want}", pods.watchers());
                tokio::time::sleep(std::time::Duration::from_millis(20)).await;
            }
        }
    };
    settle(base + 3, "after opening").await;
    drop(open);
    settle(base, "after the clients went away").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn node_name_watches_follow_a_pod_from_pending_to_bound() {
    let s = start(&cluster(SMALL)).await;
    let r0 = s.sim.resource_version();
    let w = |sel: &str| format!("/api/v1/pods?watch=1&fieldSelector={}&resourceVersion={r0}&timeoutSeconds=3", q(sel));
    // The scheduler's view, a kubelet's view, and an unrelated kubelet, opened before the changes.
    let (pending, node3, node4) = (
        s.watch(&w("spec.nodeName="), "application/json").await,
        s.watch(&w("spec.nodeName=node-0003"), "application/json").await,
        s.watch(&w("spec.nodeName=node-0004"), "application/json").await,
    );
    let pod =
        json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "to-bind"}, "spec": {"containers": [{"name": "c", "image": "x"}]}});
    let path = "/api/v1/namespaces/default/pods";
    let created = s.must("create", s.post(path, &pod).await).await;
    let bound = s.must("bind", s.patch(&format!("{path}/to-bind"), &json!({"spec": {"nodeName": "node-0003"}})).await).await;
    let labelled = s.must("label", s.patch(&format!("{path}/to-bind"), &json!({"metadata": {"labels": {"x": "y"}}})).await).await;
    s.must("delete", s.delete(&format!("{path}/to-bind")).await).await;
    let deleted = s.sim.resource_version();
    let seq = |evs: Vec<Value>| evs.iter().map(|e| (e["type"].as_str().unwrap().to_string(), ev_rv(e))).collect::<Vec<_>>();
    let t = |t: &str, rv: u64| (t.to_string(), rv);
    let want_pending = vec![t("ADDED", obj_rv(&created)), t("DELETED", obj_rv(&bound))];
    let want_node3 = vec![t("ADDED", obj_rv(&bound)), t("MODIFIED", obj_rv(&labelled)), t("DELETED", deleted)];
    assert_eq!(seq(drain(pending).await), want_pending, "spec.nodeName= (live)");
    assert_eq!(seq(drain(node3).await), want_node3, "spec.nodeName=node-0003 (live)");
    assert_eq!(seq(drain(node4).await), vec![], "another node sees nothing");
    assert_eq!(seq(drain(s.watch(&w("spec.nodeName="), "application/json").await).await), want_pending, "resumed");
    assert_eq!(seq(drain(s.watch(&w("spec.nodeName=node-0003"), "application/json").await).await), want_node3, "resumed");
}
