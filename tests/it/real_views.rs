//! The opt-in real tier (see `real_apiserver`): metadata views (PartialObjectMetadata lists,
//! gets and watches, JSON and protobuf) from cache equal what the real apiserver answers.

use crate::real_apiserver::*;
use crate::support::*;
use serde_json::{json, Value};

pub(crate) const META_LIST_JSON: &str = "application/json;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1,application/json";
pub(crate) const META_LIST_PB: &str = "application/vnd.kubernetes.protobuf;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1,application/json;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1,application/json";
pub(crate) const META_JSON: &str = "application/json;as=PartialObjectMetadata;g=meta.k8s.io;v=v1,application/json";
pub(crate) const META_PB: &str = "application/vnd.kubernetes.protobuf;as=PartialObjectMetadata;g=meta.k8s.io;v=v1,application/json";

/// A list answer with what must differ between two answers blanked: the list's
/// resourceVersion and continue token (JSON: re-serialized in its own key order; protobuf:
/// the ListMeta fields rewritten, every other byte kept).
pub(crate) fn normalized_list(body: &[u8]) -> Vec<u8> {
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

pub(crate) fn normalized_pb_list(body: &[u8]) -> Vec<u8> {
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
pub(crate) fn watch_events(body: &[u8]) -> Vec<Vec<u8>> {
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
