//! The simulated apiserver's LIST/GET contract over real HTTP: protobuf envelopes decoded
//! with `k8s-pb`, every resourceVersion mode of LIST, pagination with continue tokens in the
//! apiserver's format, errors as `Status` objects (compared with golden captures), and a
//! property test that paging always reassembles the unpaginated list.

use crate::support::*;
use k8s_pb::api::core::v1::{Pod, PodList};
use serde_json::{json, Value};

const NS_PODS: &[&str] = &["--nodes", "10", "--pods", "300"];

fn pb_names_rvs(list: &PodList) -> Vec<(String, String)> {
    list.items
        .iter()
        .map(|p| {
            let m = p.metadata.clone().unwrap_or_default();
            (format!("{}/{}", m.namespace.unwrap_or_default(), m.name.unwrap_or_default()), m.resource_version.unwrap_or_default())
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn protobuf_list_equals_json_list_at_the_same_rv() {
    let mut c = cluster(NS_PODS);
    c.churn_per_sec = 50.0;
    let s = start(&c).await;
    let r = s.get_pb("/api/v1/pods").await;
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(r.header("content-type"), Some(PROTOBUF));
    let u = unknown(&r.body);
    assert_eq!(type_of(&u), ("v1".to_string(), "PodList".to_string()));
    assert_eq!(u.content_encoding.as_deref(), Some(""), "contentEncoding written empty");
    assert!(r.body.ends_with(&[0x1a, 0x00, 0x22, 0x00]), "envelope ends with empty fields 3 and 4");
    let list: PodList = decode_envelope(&r.body, "PodList");
    let meta = list.metadata.clone().unwrap();
    let rv: u64 = meta.resource_version.as_deref().unwrap().parse().unwrap();
    assert!(meta.r#continue.as_deref().unwrap_or("").is_empty(), "no continue without limit");
    assert!(list.items.len() > 250, "{} pods", list.items.len());
    let pb = pb_names_rvs(&list);

    let j = s.get_ok(&format!("/api/v1/pods?resourceVersion={rv}&resourceVersionMatch=Exact")).await;
    assert_eq!(list_rv(&j), rv);
    assert_eq!(keys_rvs(j["items"].as_array().unwrap()), pb, "protobuf and JSON lists at RV {rv} differ");
    // Every item also agrees on a spec field (the bytes are not just names).
    for (p, i) in list.items.iter().zip(j["items"].as_array().unwrap()) {
        let node = p.spec.as_ref().and_then(|s| s.node_name.clone()).unwrap_or_default();
        assert_eq!(node, i["spec"]["nodeName"].as_str().unwrap_or(""));
    }

    // A limited protobuf list carries continue and remainingItemCount in ListMeta.
    let r = s.get_pb(&format!("/api/v1/pods?limit=7&resourceVersion={rv}&resourceVersionMatch=Exact")).await;
    let page: PodList = decode_envelope(&r.body, "PodList");
    let m = page.metadata.unwrap();
    assert_eq!(page.items.len(), 7);
    assert_eq!(m.remaining_item_count, Some(pb.len() as i64 - 7));
    let token = decode_token(m.r#continue.as_deref().unwrap());
    assert_eq!(token, format!("{{\"v\":\"meta.k8s.io/v1\",\"rv\":{rv},\"start\":\"/{}\\u0000\"}}", pb[6].0));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn protobuf_get_returns_the_same_pod_as_json() {
    let s = start(&cluster(NS_PODS)).await;
    let (_, pods) = s.all_pods().await;
    let p = &pods[17];
    let (ns, name) = (p["metadata"]["namespace"].as_str().unwrap(), p["metadata"]["name"].as_str().unwrap());
    let path = format!("/api/v1/namespaces/{ns}/pods/{name}");
    let r = s.get_pb(&path).await;
    assert_eq!(r.status, 200);
    assert_eq!(r.header("content-type"), Some(PROTOBUF));
    assert_eq!(type_of(&unknown(&r.body)), ("v1".into(), "Pod".into()));
    let pod: Pod = decode_envelope(&r.body, "Pod");
    let m = pod.metadata.unwrap();
    let j = s.get_ok(&path).await;
    assert_eq!(j["kind"], "Pod");
    assert_eq!(j["apiVersion"], "v1");
    assert_eq!(m.name.as_deref(), Some(name));
    assert_eq!(m.namespace.as_deref(), Some(ns));
    assert_eq!(m.resource_version.as_deref(), j["metadata"]["resourceVersion"].as_str());
    assert_eq!(m.uid.as_deref(), j["metadata"]["uid"].as_str());
    assert_eq!(m.labels.get("app").map(String::as_str), j["metadata"]["labels"]["app"].as_str());
    let spec = pod.spec.unwrap();
    assert_eq!(spec.node_name.as_deref(), j["spec"]["nodeName"].as_str());
    assert_eq!(spec.containers.len(), j["spec"]["containers"].as_array().unwrap().len());
    assert_eq!(pod.status.unwrap().phase.as_deref(), j["status"]["phase"].as_str());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn protobuf_watch_frames_decode_to_pod_events() {
    let s = start(&cluster(NS_PODS)).await;
    let (_, pods) = s.all_pods().await;
    let ns = pods[0]["metadata"]["namespace"].as_str().unwrap().to_string();
    let in_ns: Vec<(String, String)> = keys_rvs(&pods).into_iter().filter(|(k, _)| k.starts_with(&format!("{ns}/"))).collect();
    let mut w = s.watch(&format!("/api/v1/namespaces/{ns}/pods?watch=1&resourceVersion=0&timeoutSeconds=2"), PROTOBUF).await;
    assert_eq!(w.status, 200);
    assert_eq!(w.headers.get("content-type").unwrap(), "application/vnd.kubernetes.protobuf;stream=watch");
    let end = deadline(20);
    let mut got = Vec::new();
    loop {
        match w.next_frame(end).await {
            Next::Item(f) => {
                let (ty, inner) = watch_event(&f);
                assert_eq!(ty, "ADDED");
                assert_eq!(type_of(&inner), ("v1".into(), "Pod".into()));
                let pod = <Pod as prost::Message>::decode(inner.raw.as_deref().unwrap()).expect("inner raw is a bare Pod");
                let m = pod.metadata.unwrap();
                got.push((format!("{}/{}", m.namespace.unwrap(), m.name.unwrap()), m.resource_version.unwrap()));
            }
            Next::End => break,
            Next::TimedOut => panic!("protobuf watch with timeoutSeconds=2 did not end"),
        }
    }
    assert_eq!(got, in_ns, "RV=0 watch: one ADDED per pod in key order with its own RV");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn list_rv_unset_and_zero() {
    let s = start(&cluster(NS_PODS)).await;
    let cur = s.sim.resource_version();
    let l = s.get_ok("/api/v1/pods").await;
    assert_eq!(l["kind"], "PodList");
    assert_eq!(l["apiVersion"], "v1");
    assert_eq!(list_rv(&l), cur, "RV unset reads the current state");
    let items = l["items"].as_array().unwrap();
    assert_eq!(items.len(), 300);
    assert!(items[0].get("kind").is_none(), "list items carry no kind");
    let ks = names(items);
    let mut sorted = ks.clone();
    sorted.sort();
    assert_eq!(ks, sorted, "items in key order");

    let z = s.get_ok("/api/v1/pods?resourceVersion=0&limit=5").await;
    assert_eq!(z["items"].as_array().unwrap().len(), 300, "limit ignored for RV=0");
    assert!(z["metadata"].get("continue").is_none());
    assert!(z["metadata"].get("remainingItemCount").is_none());
    assert_eq!(keys_rvs(z["items"].as_array().unwrap()), keys_rvs(items));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn list_not_older_than_waits_then_504() {
    let s = start(&cluster(NS_PODS)).await;
    let cur = s.sim.resource_version();
    for q in [format!("resourceVersion={cur}&resourceVersionMatch=NotOlderThan"), format!("resourceVersion={}", cur - 50)] {
        let l = s.get_ok(&format!("/api/v1/pods?{q}")).await;
        assert!(list_rv(&l) >= cur - 50, "{q}");
        assert_eq!(l["items"].as_array().unwrap().len(), 300, "{q}");
    }
    let far = cur + 1_000_000;
    let r = s.get(&format!("/api/v1/pods?resourceVersion={far}&resourceVersionMatch=NotOlderThan")).await;
    assert_eq!(r.status, 504, "{}", r.text());
    assert_eq!(r.header("retry-after"), Some("1"));
    let st = r.json();
    assert_eq!(st["kind"], "Status");
    assert_eq!(st["reason"], "Timeout");
    assert_eq!(st["code"], 504);
    assert_eq!(st["message"], format!("Timeout: Too large resource version: {far}, current: {cur}"));
    assert_eq!(
        st["details"],
        json!({"causes":[{"reason":"ResourceVersionTooLarge","message":"Too large resource version"}],"retryAfterSeconds":1})
    );
    // Same shape as the capture, modulo the two numbers.
    let g = String::from_utf8(golden("10d-list-rv-too-large-notolderthan-504.json.body")).unwrap();
    assert_eq!(r.text(), g.replace("10061515", &far.to_string()).replace("61515", &cur.to_string()));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn list_exact_returns_the_past_state_or_410() {
    let s = start(&cluster(NS_PODS)).await;
    let ns = "kube-system";
    let path = format!("/api/v1/namespaces/{ns}/configmaps");
    let before = s.get_ok(&path).await;
    let r0 = list_rv(&before);
    let existing = before["items"].as_array().unwrap().clone();
    assert!(existing.len() >= 2, "kube-system has configmaps");
    let victim = existing[0]["metadata"]["name"].as_str().unwrap().to_string();
    let changed = existing[1]["metadata"]["name"].as_str().unwrap().to_string();

    let created = s.create_cm(ns, "exact-new", json!({"a": "1"})).await;
    let r1 = obj_rv(&created);
    let p = s.patch(&format!("{path}/{changed}"), &json!({"data": {"exact": "changed"}})).await;
    let patched = s.must("patch", p).await;
    let d = s.delete(&format!("{path}/{victim}")).await;
    s.must("delete", d).await;
    let now = s.get_ok(&path).await;
    assert_ne!(keys_rvs(now["items"].as_array().unwrap()), keys_rvs(&existing));

    // Exact at r0: exactly the state then, byte for byte per item.
    let then = s.get_ok(&format!("{path}?resourceVersion={r0}&resourceVersionMatch=Exact")).await;
    assert_eq!(list_rv(&then), r0);
    assert_eq!(then["items"], before["items"]);
    // Legacy form: an RV with a limit is Exact too.
    let legacy = s.get_ok(&format!("{path}?resourceVersion={r0}&limit=500")).await;
    assert_eq!(legacy["items"], before["items"]);
    // Exact at r1: the create is in, the patch and delete are not.
    let mid = s.get_ok(&format!("{path}?resourceVersion={r1}&resourceVersionMatch=Exact")).await;
    let mid_items = mid["items"].as_array().unwrap();
    let find = |items: &[Value], n: &str| items.iter().find(|i| i["metadata"]["name"] == n).cloned();
    assert!(find(mid_items, "exact-new").is_some());
    assert!(find(mid_items, &victim).is_some(), "deleted later");
    assert!(find(mid_items, &changed).unwrap()["data"].get("exact").is_none(), "patched later");
    let latest = s.get_ok(&format!("{path}?resourceVersion={}&resourceVersionMatch=Exact", obj_rv(&patched))).await;
    assert_eq!(find(latest["items"].as_array().unwrap(), &changed).unwrap()["data"]["exact"], "changed");

    // Older than any kept state: 410, the capture's body exactly.
    same_error_as_captured(
        &s,
        "/api/v1/namespaces/golden/pods?resourceVersionMatch=Exact&resourceVersion=1&limit=5",
        410,
        "10e-list-exact-rv1-limit5-410",
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn list_pages_follow_continue_from_one_snapshot() {
    let s = start(&cluster(NS_PODS)).await;
    let (rv, all) = s.all_pods().await;
    let want = keys_rvs(&all);
    let mut got = Vec::new();
    let mut path = "/api/v1/pods?limit=100".to_string();
    let mut page_no = 0;
    loop {
        let l = s.get_ok(&path).await;
        page_no += 1;
        assert_eq!(list_rv(&l), rv, "every page at the first page's RV");
        let items = l["items"].as_array().unwrap();
        got.extend(keys_rvs(items));
        if page_no == 1 {
            // A write between pages must not show up in later pages.
            let (k, _) = &want[250];
            let (ns, name) = k.split_once('/').unwrap();
            let p = s.patch(&format!("/api/v1/namespaces/{ns}/pods/{name}"), &json!({"metadata": {"labels": {"paged": "yes"}}})).await;
            s.must("patch between pages", p).await;
        }
        match l["metadata"].get("continue").and_then(Value::as_str) {
            Some(t) => {
                assert_eq!(l["metadata"]["remainingItemCount"], json!(want.len() - got.len()));
                let last = got.last().unwrap().0.clone();
                assert_eq!(decode_token(t), format!("{{\"v\":\"meta.k8s.io/v1\",\"rv\":{rv},\"start\":\"/{last}\\u0000\"}}"));
                path = format!("/api/v1/pods?limit=100&continue={t}");
            }
            None => {
                assert!(l["metadata"].get("remainingItemCount").is_none());
                break;
            }
        }
    }
    assert_eq!(page_no, 3);
    assert_eq!(got, want);

    // Namespaced: the token's start is relative to the namespace.
    let ns = all[0]["metadata"]["namespace"].as_str().unwrap();
    let l = s.get_ok(&format!("/api/v1/namespaces/{ns}/pods?limit=2")).await;
    let second = l["items"][1]["metadata"]["name"].as_str().unwrap();
    let t = l["metadata"]["continue"].as_str().unwrap();
    let rv2 = list_rv(&l);
    assert_eq!(decode_token(t), format!("{{\"v\":\"meta.k8s.io/v1\",\"rv\":{rv2},\"start\":\"/{second}\\u0000\"}}"));
    let next = s.get_ok(&format!("/api/v1/namespaces/{ns}/pods?limit=2&continue={t}")).await;
    let in_ns: Vec<&Value> = all.iter().filter(|p| p["metadata"]["namespace"] == ns).collect();
    assert_eq!(next["items"][0]["metadata"]["name"], in_ns[2]["metadata"]["name"]);
    // Cluster-scoped kinds: start is "/<name>\u0000".
    let n = s.get_ok("/api/v1/nodes?limit=2").await;
    assert_eq!(n["metadata"]["remainingItemCount"], 8);
    let t = n["metadata"]["continue"].as_str().unwrap();
    assert!(decode_token(t).ends_with(&format!("\"start\":\"/{}\\u0000\"}}", n["items"][1]["metadata"]["name"].as_str().unwrap())));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn expired_and_garbage_continue_tokens() {
    let s = start(&cluster(NS_PODS)).await;
    let expired = encode_token("{\"v\":\"meta.k8s.io/v1\",\"rv\":1,\"start\":\"/x\\u0000\"}");
    let r = s.get(&format!("/api/v1/pods?limit=5&continue={expired}")).await;
    assert_eq!(r.status, 410, "{}", r.text());
    let st = r.json();
    assert_eq!(st["reason"], "Expired");
    assert_eq!(st["code"], 410);
    let cont = st["metadata"]["continue"].as_str().expect("410 carries metadata.continue");
    assert_eq!(decode_token(cont), "{\"v\":\"meta.k8s.io/v1\",\"rv\":-1,\"start\":\"x\\u0000\"}");
    // The captured request, byte for byte.
    let golden_req = "eyJ2IjoibWV0YS5rOHMuaW8vdjEiLCJydiI6MSwic3RhcnQiOiIvd2ViLTFcdTAwMDAifQ";
    let r = s.get(&format!("/api/v1/namespaces/golden/pods?limit=2&continue={golden_req}")).await;
    assert_eq!(r.body.to_vec(), golden("10g-list-expired-continue-410.json.body"));
    let r = s.get_pb(&format!("/api/v1/namespaces/golden/pods?limit=2&continue={golden_req}")).await;
    assert_eq!(r.status, 410);
    assert_eq!(r.body.to_vec(), golden("10g-list-expired-continue-410.pb.body"));

    same_error_as_captured(&s, "/api/v1/namespaces/golden/pods?limit=2&continue=garbage-token", 400, "10f-list-garbage-continue-400").await;
}

/// `path` answers `code` with the captured body, in JSON and in protobuf (`capture` is the
/// golden file name without `.json.body` / `.pb.body`).
async fn same_error_as_captured(s: &TestSim, path: &str, code: u16, capture: &str) {
    let r = s.get(path).await;
    assert_eq!(r.status, code);
    assert_eq!(r.body.to_vec(), golden(&format!("{capture}.json.body")));
    let r = s.get_pb(path).await;
    assert_eq!(r.status, code);
    assert_eq!(r.body.to_vec(), golden(&format!("{capture}.pb.body")));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn errors_are_status_objects_in_json_and_protobuf() {
    let s = start(&cluster(NS_PODS)).await;
    // (path, code, golden capture)
    let cases = [
        ("/api/v1/namespaces/golden/pods/does-not-exist", 404, "10a-get-missing-pod-404"),
        ("/api/v1/namespaces/golden/pods?labelSelector=a%20in%20(", 400, "10b-list-bad-labelselector-400"),
        ("/api/v1/namespaces/golden/pods?fieldSelector=spec.bogus%3D1", 400, "10c-list-unsupported-fieldselector-400"),
    ];
    for (path, code, g) in cases {
        let r = s.get(path).await;
        assert_eq!(r.status, code, "{path}");
        assert_eq!(r.header("content-type"), Some("application/json"));
        assert_eq!(r.text(), String::from_utf8(golden(&format!("{g}.json.body"))).unwrap(), "{path}");
        let r = s.get_pb(path).await;
        assert_eq!(r.status, code, "{path}");
        assert_eq!(r.header("content-type"), Some(PROTOBUF));
        assert_eq!(r.body.to_vec(), golden(&format!("{g}.pb.body")), "{path} (protobuf)");
        let st: PbStatus = decode_envelope(&r.body, "Status");
        assert_eq!(st.code, Some(code as i32));
    }
    // Tables are JSON only; the 406 is indented JSON although protobuf was asked for (11d).
    let r = s
        .request(
            http::Method::GET,
            "/api/v1/namespaces/golden/pods",
            Some("application/vnd.kubernetes.protobuf;as=Table;v=v1;g=meta.k8s.io"),
            None,
            Vec::new(),
        )
        .await;
    assert_eq!(r.status, 406);
    assert_eq!(r.header("content-type"), Some("application/json"));
    assert_eq!(r.body.to_vec(), golden("11d-list-pods-as-table-protobuf-accept.pb.body"));
    let bad = s.get("/api/v1/pods?labelSelector=a%20in%20(").await.json();
    assert_eq!(bad["message"], "unable to parse requirement: found '', expected: ',', ')' or identifier");
    let bad = s.get("/api/v1/pods?fieldSelector=spec.bogus%3D1").await.json();
    assert_eq!(bad["message"], "field label not supported: spec.bogus");

    // 409 Conflict on a stale-RV update, as in the 10k capture.
    let ns = "default";
    let cm = s.create_cm(ns, "conflict-demo", json!({"k": "v1"})).await;
    let mut upd = cm.clone();
    upd["data"]["k"] = json!("v2");
    let ok = s.put(&format!("/api/v1/namespaces/{ns}/configmaps/conflict-demo"), &upd).await;
    let ok = s.must("update with the current RV", ok).await;
    assert!(obj_rv(&ok) > obj_rv(&cm));
    upd["data"]["k"] = json!("v3");
    let r = s.put(&format!("/api/v1/namespaces/{ns}/configmaps/conflict-demo"), &upd).await;
    assert_eq!(r.status, 409);
    assert_eq!(r.body.to_vec(), golden("10k-conflict-step3-stale-update-409.json.body"));
    let r = s
        .request(
            http::Method::PUT,
            &format!("/api/v1/namespaces/{ns}/configmaps/conflict-demo"),
            Some(PROTOBUF),
            Some("application/json"),
            upd.to_string().into_bytes(),
        )
        .await;
    assert_eq!(r.status, 409);
    assert_eq!(r.body.to_vec(), golden("10k-conflict-step3-stale-update-409.pb.body"));
    assert_eq!(s.get_ok(&format!("/api/v1/namespaces/{ns}/configmaps/conflict-demo")).await["data"]["k"], "v2");

    // 409 AlreadyExists on a duplicate create.
    let dup = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "conflict-demo"}});
    let r = s.post(&format!("/api/v1/namespaces/{ns}/configmaps"), &dup).await;
    assert_eq!(r.status, 409);
    assert_eq!(
        r.json(),
        json!({"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure","message":"configmaps \"conflict-demo\" already exists","reason":"AlreadyExists","details":{"name":"conflict-demo","kind":"configmaps"},"code":409})
    );
    let r = s
        .request(
            http::Method::POST,
            &format!("/api/v1/namespaces/{ns}/configmaps"),
            Some(PROTOBUF),
            Some("application/json"),
            dup.to_string().into_bytes(),
        )
        .await;
    assert_eq!(r.status, 409);
    let st: PbStatus = decode_envelope(&r.body, "Status");
    assert_eq!((st.reason.as_deref(), st.code), (Some("AlreadyExists"), Some(409)));
    assert_eq!(st.details.unwrap().name.as_deref(), Some("conflict-demo"));

    // The delete that ends the capture's sequence: Success status.
    let r = s.delete(&format!("/api/v1/namespaces/{ns}/configmaps/conflict-demo")).await;
    assert_eq!(r.status, 200);
    let st = r.json();
    assert_eq!(st["status"], "Success");
    assert_eq!(st["details"]["name"], "conflict-demo");
    assert_eq!(s.get(&format!("/api/v1/namespaces/{ns}/configmaps/conflict-demo")).await.status, 404);
}

/// Follow `continue` to the end; returns the items and checks the pages' bookkeeping.
async fn paged(s: &TestSim, base: &str, limit: usize, filtered: bool) -> (u64, Vec<(String, String)>) {
    let mut out = Vec::new();
    let mut path = format!("{base}&limit={limit}");
    let mut rv = None;
    loop {
        let l = s.get_ok(&path).await;
        let items = l["items"].as_array().unwrap();
        assert!(items.len() <= limit);
        assert_eq!(*rv.get_or_insert(list_rv(&l)), list_rv(&l));
        out.extend(keys_rvs(items));
        match l["metadata"].get("continue").and_then(Value::as_str) {
            Some(t) => {
                assert_eq!(items.len(), limit, "a page that is cut is full");
                if !filtered {
                    assert!(l["metadata"]["remainingItemCount"].as_u64().unwrap() > 0);
                }
                path = format!("{base}&limit={limit}&continue={t}");
            }
            None => return (rv.unwrap(), out),
        }
    }
}

#[test]
fn proptest_paging_reassembles_the_unpaginated_list() {
    use proptest::prelude::*;
    use proptest::test_runner::{Config, TestRunner};
    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
    let s = rt.block_on(start(&cluster(NS_PODS)));
    let (_, pods) = rt.block_on(s.all_pods());
    let app = pods[0]["metadata"]["labels"]["app"].as_str().unwrap().to_string();
    let ns = pods[0]["metadata"]["namespace"].as_str().unwrap().to_string();
    let selectors: Vec<String> = vec![
        String::new(),
        format!("app={app}"),
        "tier=backend".into(),
        "tier in (frontend,edge)".into(),
        "env!=prod".into(),
        "track".into(),
        "!team".into(),
        "tier notin (backend,data),env=dev".into(),
    ];
    let scopes = ["/api/v1/pods".to_string(), format!("/api/v1/namespaces/{ns}/pods")];
    let strategy = (1usize..120, 0..selectors.len(), 0..scopes.len(), proptest::bool::ANY);
    let mut runner = TestRunner::new(Config { cases: 16, failure_persistence: None, ..Config::default() });
    runner
        .run(&strategy, |(limit, sel, scope, by_node)| {
            let mut query = format!("labelSelector={}", q(&selectors[sel]));
            if by_node {
                query.push_str(&format!("&fieldSelector={}", q("spec.nodeName=node-0003")));
            }
            let base = format!("{}?{query}", scopes[scope]);
            let (rv, got) = rt.block_on(paged(&s, &base, limit, sel != 0 || by_node));
            let full = rt.block_on(s.get_ok(&format!("{base}&resourceVersion={rv}&resourceVersionMatch=Exact")));
            let want = keys_rvs(full["items"].as_array().unwrap());
            prop_assert_eq!(got, want, "{} limit {}", base, limit);
            Ok(())
        })
        .unwrap();
    drop(s);
}

fn count(l: &Value) -> usize {
    l["items"].as_array().unwrap().len()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn field_selectors_see_unset_fields_as_the_apiserver_does() {
    let s = start(&cluster(NS_PODS)).await;
    // The apiserver's field set holds Go zero values for unset fields.
    assert_eq!(count(&s.get_ok("/api/v1/pods?fieldSelector=spec.hostNetwork%3Dfalse").await), 300);
    assert_eq!(count(&s.get_ok("/api/v1/pods?fieldSelector=spec.hostNetwork%3Dtrue").await), 0);
    assert_eq!(count(&s.get_ok("/api/v1/nodes?fieldSelector=spec.unschedulable%3Dfalse").await), 10);
    let p = s.patch("/api/v1/nodes/node-0004", &json!({"spec": {"unschedulable": true}})).await;
    s.must("cordon", p).await;
    let cordoned = s.get_ok("/api/v1/nodes?fieldSelector=spec.unschedulable%3Dtrue").await;
    assert_eq!(item_names_of(&cordoned), vec!["/node-0004".to_string()]);
    assert_eq!(count(&s.get_ok("/api/v1/nodes?fieldSelector=spec.unschedulable%3Dfalse").await), 9);

    // `spec.nodeName=` is the scheduler's query for unscheduled pods (served from the index).
    let ns = "default";
    let r0 = s.sim.resource_version();
    let watch = s
        .watch(&format!("/api/v1/pods?watch=1&fieldSelector=spec.nodeName%3D&resourceVersion={r0}&timeoutSeconds=2"), "application/json")
        .await;
    let pending = json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "unscheduled"}, "spec": {"containers": [{"name": "c", "image": "x"}]}});
    let created = s.must("create", s.post(&format!("/api/v1/namespaces/{ns}/pods"), &pending).await).await;
    for path in ["/api/v1/pods?fieldSelector=spec.nodeName%3D", "/api/v1/namespaces/default/pods?fieldSelector=spec.nodeName%3D&limit=1"] {
        let l = s.get_ok(path).await;
        assert_eq!(item_names_of(&l), vec![format!("{ns}/unscheduled")], "{path}");
        assert!(l["metadata"].get("continue").is_none(), "{path}");
    }
    assert_eq!(count(&s.get_ok("/api/v1/pods?fieldSelector=spec.nodeName%21%3D").await), 300);
    let evs = {
        let mut w = watch;
        w.json_until_end(deadline(20)).await
    };
    assert_eq!(
        evs.iter().map(|e| (e["type"].as_str().unwrap(), obj_rv(&e["object"]))).collect::<Vec<_>>(),
        vec![("ADDED", obj_rv(&created))]
    );
}

fn item_names_of(l: &Value) -> Vec<String> {
    names(l["items"].as_array().unwrap())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn protobuf_request_bodies_create_and_update() {
    use k8s_pb::api::core::v1::ConfigMap;
    use k8s_pb::apimachinery::pkg::apis::meta::v1::ObjectMeta;
    use prost::Message;
    let s = start(&cluster(NS_PODS)).await;
    let envelope = |cm: &ConfigMap| {
        let u = Unknown {
            type_meta: Some(k8s_pb::apimachinery::pkg::runtime::TypeMeta {
                api_version: Some("v1".into()),
                kind: Some("ConfigMap".into()),
            }),
            raw: Some(cm.encode_to_vec()),
            content_encoding: Some(String::new()),
            content_type: Some(String::new()),
        };
        let mut body = b"k8s\0".to_vec();
        body.extend(u.encode_to_vec());
        body
    };
    let mut cm = ConfigMap {
        metadata: Some(ObjectMeta { name: Some("from-pb".into()), ..ObjectMeta::default() }),
        data: [("k".to_string(), "v1".to_string())].into(),
        ..ConfigMap::default()
    };
    // What client-go's typed clients (and `kubectl create configmap`) send.
    let r = s.request(http::Method::POST, "/api/v1/namespaces/default/configmaps", Some(PROTOBUF), Some(PROTOBUF), envelope(&cm)).await;
    assert_eq!(r.status, 201, "{}", r.text());
    let created: ConfigMap = decode_envelope(&r.body, "ConfigMap");
    let meta = created.metadata.clone().unwrap();
    assert_eq!(meta.namespace.as_deref(), Some("default"));
    assert!(meta.uid.as_ref().is_some_and(|u| !u.is_empty()));
    let got = s.get_ok("/api/v1/namespaces/default/configmaps/from-pb").await;
    assert_eq!(got["data"], json!({"k": "v1"}));
    assert_eq!(got["metadata"]["resourceVersion"].as_str(), meta.resource_version.as_deref());

    cm.metadata = Some(meta);
    cm.data.insert("k".into(), "v2".into());
    let r =
        s.request(http::Method::PUT, "/api/v1/namespaces/default/configmaps/from-pb", Some(PROTOBUF), Some(PROTOBUF), envelope(&cm)).await;
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(s.get_ok("/api/v1/namespaces/default/configmaps/from-pb").await["data"], json!({"k": "v2"}));
    let r = s
        .request(
            http::Method::POST,
            "/api/v1/namespaces/default/configmaps",
            Some("application/json"),
            Some(PROTOBUF),
            b"not protobuf".to_vec(),
        )
        .await;
    assert_eq!(r.status, 400, "{}", r.text());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn strategic_merge_and_json_patches() {
    let s = start(&cluster(NS_PODS)).await;
    let deploys = s.get_ok("/apis/apps/v1/deployments?limit=1").await;
    let d = &deploys["items"][0];
    let path = format!(
        "/apis/apps/v1/namespaces/{}/deployments/{}",
        d["metadata"]["namespace"].as_str().unwrap(),
        d["metadata"]["name"].as_str().unwrap()
    );
    let before = d["spec"]["template"]["spec"]["containers"].as_array().unwrap().clone();
    assert!(before.len() >= 2, "a sidecar to keep");
    let first = before[0]["name"].as_str().unwrap();
    // `kubectl set image deploy/d <first>=new:v2`.
    let order: Vec<Value> = before.iter().map(|c| json!({"name": c["name"]})).collect();
    let smp =
        json!({"spec": {"template": {"spec": {"$setElementOrder/containers": order, "containers": [{"image": "new:v2", "name": first}]}}}});
    let r = s
        .request(
            http::Method::PATCH,
            &path,
            Some("application/json"),
            Some("application/strategic-merge-patch+json"),
            smp.to_string().into_bytes(),
        )
        .await;
    let after = s.must("set image", r).await;
    let after = after["spec"]["template"]["spec"]["containers"].as_array().unwrap().clone();
    assert_eq!(after.len(), before.len(), "containers merged by name, none dropped");
    assert_eq!(after[0]["image"], "new:v2");
    let mut want = before[0].clone();
    want["image"] = json!("new:v2");
    assert_eq!(after[0], want, "the other fields of the container are kept");
    assert_eq!(after[1..], before[1..]);

    // JSON patch (`kubectl patch --type=json`).
    let cm = s.create_cm("default", "json-patched", json!({"a": "1"})).await;
    let ops = json!([{"op": "test", "path": "/data/a", "value": "1"}, {"op": "replace", "path": "/data/a", "value": "2"}, {"op": "add", "path": "/data/b", "value": "3"}]);
    let r = s
        .request(
            http::Method::PATCH,
            "/api/v1/namespaces/default/configmaps/json-patched",
            Some("application/json"),
            Some("application/json-patch+json"),
            ops.to_string().into_bytes(),
        )
        .await;
    let patched = s.must("json patch", r).await;
    assert_eq!(patched["data"], json!({"a": "2", "b": "3"}));
    assert!(obj_rv(&patched) > obj_rv(&cm));
    let bad = json!([{"op": "test", "path": "/data/a", "value": "1"}]);
    let r = s
        .request(
            http::Method::PATCH,
            "/api/v1/namespaces/default/configmaps/json-patched",
            Some("application/json"),
            Some("application/json-patch+json"),
            bad.to_string().into_bytes(),
        )
        .await;
    assert_eq!(r.status, 422, "{}", r.text());
    assert_eq!(r.json()["kind"], "Status");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dry_run_writes_change_nothing() {
    let s = start(&cluster(NS_PODS)).await;
    let cm = s.create_cm("default", "dry", json!({"a": "1"})).await;
    let rv = s.sim.resource_version();
    let path = "/api/v1/namespaces/default/configmaps";
    let new = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "dry-new"}});
    let r = s.post(&format!("{path}?dryRun=All"), &new).await;
    assert_eq!(r.status, 201, "{}", r.text());
    let r = s.patch(&format!("{path}/dry?dryRun=All"), &json!({"data": {"a": "2"}})).await;
    assert_eq!(s.must("dry-run patch", r).await["data"]["a"], "2", "the response shows the result");
    let r = s.request(http::Method::DELETE, &format!("{path}/dry?dryRun=All"), Some("application/json"), None, Vec::new()).await;
    assert_eq!(r.status, 200, "{}", r.text());
    // kubectl puts it in the DeleteOptions body instead.
    let opts = json!({"kind": "DeleteOptions", "apiVersion": "v1", "dryRun": ["All"]}).to_string().into_bytes();
    let r = s.request(http::Method::DELETE, &format!("{path}/dry"), Some("application/json"), Some("application/json"), opts).await;
    assert_eq!(r.status, 200, "{}", r.text());
    let r = s.request(http::Method::DELETE, &format!("{path}?dryRun=All&labelSelector="), Some("application/json"), None, Vec::new()).await;
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(s.sim.resource_version(), rv, "no write happened");
    assert_eq!(s.get(&format!("{path}/dry-new")).await.status, 404);
    assert_eq!(s.get_ok(&format!("{path}/dry")).await, cm);
    assert!(count(&s.get_ok(path).await) > 1);
}

fn unix_now() -> i64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_secs() as i64
}

/// Unix seconds of `YYYY-MM-DDTHH:MM:SSZ` (RFC 3339 in whole seconds, UTC, as the apiserver
/// writes a creationTimestamp); `None` for anything else.
fn rfc3339_seconds_utc(ts: &str) -> Option<i64> {
    let b = ts.as_bytes();
    let shape = b.len() == 20 && [(4, b'-'), (7, b'-'), (10, b'T'), (13, b':'), (16, b':'), (19, b'Z')].iter().all(|&(i, c)| b[i] == c);
    let n = |r: std::ops::Range<usize>| ts.get(r).filter(|d| d.bytes().all(|c| c.is_ascii_digit()))?.parse::<u16>().ok();
    if !shape {
        return None;
    }
    let month = time::Month::try_from(n(5..7)? as u8).ok()?;
    let date = time::Date::from_calendar_date(i32::from(n(0..4)?), month, n(8..10)? as u8).ok()?;
    let at = date.with_hms(n(11..13)? as u8, n(14..16)? as u8, n(17..19)? as u8).ok()?;
    Some(at.assume_utc().unix_timestamp())
}

/// A created object's `creationTimestamp` as a real apiserver writes it: RFC 3339 in whole
/// seconds, UTC with a `Z`, within `[not_before, not_after]` (Unix seconds).
fn assert_created_within(o: &Value, not_before: i64, not_after: i64) {
    let ts = o["metadata"]["creationTimestamp"].as_str().unwrap_or_else(|| panic!("no creationTimestamp: {o}"));
    let at = rfc3339_seconds_utc(ts).unwrap_or_else(|| panic!("not RFC 3339 in whole seconds, UTC: {ts}"));
    assert!(at >= not_before, "{ts} is {} s before the request", not_before - at);
    assert!(at <= not_after, "{ts} is {} s after the response", at - not_after);
}

/// The Age column kubectl shows for a pod, from the simulator's Table.
async fn age_of(s: &TestSim, o: &Value) -> String {
    let (ns, name) = (o["metadata"]["namespace"].as_str().unwrap(), o["metadata"]["name"].as_str().unwrap());
    let path = format!("/api/v1/namespaces/{ns}/pods/{name}");
    let r = s.request(http::Method::GET, &path, Some("application/json;as=Table;v=v1;g=meta.k8s.io"), None, vec![]).await;
    let t = r.json();
    let col = t["columnDefinitions"].as_array().unwrap().iter().position(|c| c["name"] == "Age").expect("an Age column");
    t["rows"][0]["cells"][col].as_str().unwrap_or_default().to_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn created_pods_carry_the_time_they_were_created() {
    // Churn creates one pod in every ten operations: at 50 a second, one within a fifth of
    // a second of real time (the deadline only bounds a broken run).
    let mut c = cluster(&["--nodes", "3", "--pods", "30"]);
    c.churn_per_sec = 50.0;
    let s = start(&c).await;
    let before = unix_now();
    let from = s.sim.resource_version();
    let mut w = s.watch(&format!("/api/v1/pods?watch=1&resourceVersion={from}"), "application/json").await;
    let added = loop {
        let e = w.next_json(deadline(30)).await.item("a churn event");
        if e["type"] == "ADDED" {
            break e["object"].clone();
        }
    };
    assert_created_within(&added, before, unix_now());
    let age = age_of(&s, &added).await;
    assert!(age.ends_with('s') && age.trim_end_matches('s').parse::<u32>().is_ok(), "churn's new pod shows AGE {age}");

    // A pod POSTed is stamped when it is created, whatever the client sent.
    let pod = json!({"apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": "stamped", "namespace": "default", "creationTimestamp": "2031-01-01T00:00:00Z"},
        "spec": {"containers": [{"name": "app", "image": "busybox"}]}});
    let before = unix_now();
    let r = s.post("/api/v1/namespaces/default/pods", &pod).await;
    let created = s.must("create pod", r).await;
    assert_created_within(&created, before, unix_now());
    let age = age_of(&s, &created).await;
    assert!(age.ends_with('s') && age.trim_end_matches('s').parse::<u32>().is_ok(), "a POSTed pod shows AGE {age}");
}
