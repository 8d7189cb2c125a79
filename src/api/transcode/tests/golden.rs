//! Against the real kube-apiserver captures in `testdata/golden`: protobuf and JSON of the
//! same objects, and every capture of a known kind round-tripped.

use super::oracle::{assert_decodes_like_apiserver, assert_encodes_like_apiserver, prost_view};
use super::*;

#[test]
fn golden_get_pod() {
    let (kind, raw) = unwrap_unknown(&golden("01-get-pod.pb.body"));
    assert_eq!(kind, "Pod");
    let json = golden_json("01-get-pod.json.body");
    assert_decodes_like_apiserver("Pod", &raw, &json);
    assert_encodes_like_apiserver("Pod", &json, &raw);
}

#[test]
fn golden_list_pods() {
    let (kind, raw) = unwrap_unknown(&golden("02a-list-pods.pb.body"));
    assert_eq!(kind, "PodList");
    let json = golden_json("02a-list-pods.json.body");
    let items = list_items(&raw);
    let json_items = json["items"].as_array().unwrap();
    assert_eq!(items.len(), 3);
    assert_eq!(items.len(), json_items.len());
    for (raw, json) in items.iter().zip(json_items) {
        assert_decodes_like_apiserver("Pod", raw, json);
        assert_encodes_like_apiserver("Pod", json, raw);
    }
}

#[test]
fn golden_list_configmaps() {
    let (kind, raw) = unwrap_unknown(&golden("04a-list-configmaps.pb.body"));
    assert_eq!(kind, "ConfigMapList");
    let json = golden_json("04a-list-configmaps.json.body");
    let items = list_items(&raw);
    let json_items = json["items"].as_array().unwrap();
    assert_eq!(items.len(), 3);
    for (raw, json) in items.iter().zip(json_items) {
        assert_decodes_like_apiserver("ConfigMap", raw, json);
        assert_encodes_like_apiserver("ConfigMap", json, raw);
    }
    // cm-c: non-ASCII text and binaryData survive.
    let cm_c = pb_to_json(ty("ConfigMap"), &items[2]).unwrap();
    assert_eq!(cm_c["binaryData"]["blob"], "AAECAwQF");
    assert_eq!(cm_c["data"], json_items[2]["data"]);
}

#[test]
fn golden_list_nodes() {
    let (kind, raw) = unwrap_unknown(&golden("17-list-nodes-cluster-scoped-limit2.pb.body"));
    assert_eq!(kind, "NodeList");
    let json = golden_json("17-list-nodes-cluster-scoped-limit2.json.body");
    let items = list_items(&raw);
    let json_items = json["items"].as_array().unwrap();
    assert_eq!(items.len(), 2);
    for (raw, json) in items.iter().zip(json_items) {
        assert_decodes_like_apiserver("Node", raw, json);
        assert_encodes_like_apiserver("Node", json, raw);
    }
}

#[test]
fn golden_statuses() {
    for name in [
        "10a-get-missing-pod-404",
        "10b-list-bad-labelselector-400",
        "10c-list-unsupported-fieldselector-400",
        "10d-list-rv-too-large-notolderthan-504",
        "10e-list-exact-rv1-limit5-410",
        "10f-list-garbage-continue-400",
        "10g-list-expired-continue-410",
        "10h-list-pods-nobody-403",
        "10i-list-pods-no-token-anonymous-403",
        "10j-list-pods-invalid-token-401",
        "10k-conflict-step3-stale-update-409",
        "05e-delete-configmap-200",
    ] {
        let (kind, raw) = unwrap_unknown(&golden(&format!("{name}.pb.body")));
        assert_eq!(kind, "Status", "{name}");
        let json = golden_json(&format!("{name}.json.body"));
        if name.starts_with("05e") {
            // The JSON and protobuf runs deleted different objects (different uids).
            let ours = pb_to_json(ty("Status"), &raw).unwrap();
            assert_eq!(ours["status"], "Success", "{name}");
            assert_eq!(ours["details"]["kind"], "configmaps", "{name}");
            continue;
        }
        assert_decodes_like_apiserver("Status", &raw, &json);
        assert_encodes_like_apiserver("Status", &json, &raw);
    }
    // The 404 exactly, in the apiserver's JSON key order.
    let (_, raw) = unwrap_unknown(&golden("10a-get-missing-pod-404.pb.body"));
    let ours = pb_to_json(ty("Status"), &raw).unwrap();
    assert_eq!(
        serde_json::to_string(&normalize(&ours)).unwrap(),
        r#"{"status":"Failure","message":"pods \"does-not-exist\" not found","reason":"NotFound","details":{"name":"does-not-exist","kind":"pods"},"code":404}"#
    );
}

#[test]
fn golden_secret_round_trip() {
    let json = golden_json("04b-get-secret.json.body");
    let pb = json_to_pb(ty("Secret"), &json).unwrap();
    let back = pb_to_json(ty("Secret"), &pb).unwrap();
    assert_eq!(back, without_type_meta(&json));
    // Values are bytes in protobuf: decode with prost and check the plain text.
    use prost::Message as _;
    let secret = k8s_pb::api::core::v1::Secret::decode(pb.as_slice()).unwrap();
    assert_eq!(secret.data["username"], b"demo");
    assert_eq!(secret.r#type.as_deref(), Some("Opaque"));
    assert!(prost_view("Secret", &pb).contains("secret-a"));
}

// ---- golden: every capture of a known kind ------------------------------------------

/// Every JSON object of a known kind in the captures: plain objects, list items and
/// watch event objects. Gzip bodies (16b, 16c) are skipped.
fn all_json_objects() -> Vec<(String, String, Value)> {
    let kinds = ["Pod", "Node", "Namespace", "Service", "ConfigMap", "Secret", "Event", "Endpoints", "Deployment", "Status"];
    let mut out = Vec::new();
    let mut names: Vec<_> = crate::testdata::names("golden").into_iter().filter(|n| n.ends_with(".json.body")).collect();
    names.sort();
    for name in names {
        let body = golden(&name);
        let mut docs = Vec::new();
        if let Ok(v) = serde_json::from_slice::<Value>(&body) {
            docs.push(v);
        } else {
            for line in body.split(|&b| b == b'\n').filter(|l| !l.is_empty()) {
                if let Ok(v) = serde_json::from_slice::<Value>(line) {
                    docs.push(v);
                }
            }
        }
        for doc in docs {
            let (doc, list_kind) = match doc.get("object") {
                Some(obj) if doc.get("type").is_some() => (obj.clone(), None),
                _ => {
                    let k = doc["kind"].as_str().unwrap_or("").to_owned();
                    (doc, k.strip_suffix("List").map(str::to_owned))
                }
            };
            if let Some(item_kind) = list_kind {
                if kinds.contains(&item_kind.as_str()) {
                    for item in doc["items"].as_array().unwrap() {
                        out.push((name.clone(), item_kind.clone(), item.clone()));
                    }
                }
            } else if let Some(k) = doc["kind"].as_str() {
                if kinds.contains(&k) && doc["apiVersion"] == "v1" {
                    out.push((name.clone(), k.to_owned(), doc.clone()));
                }
            }
        }
    }
    out
}

#[test]
fn golden_json_round_trips_exactly() {
    let objects = all_json_objects();
    assert!(objects.len() >= 80, "only {} objects found", objects.len());
    let mut kinds_seen = std::collections::BTreeSet::new();
    for (name, kind, obj) in &objects {
        kinds_seen.insert(kind.clone());
        let pb = json_to_pb(ty(kind), obj).unwrap();
        let back = pb_to_json(ty(kind), &pb).unwrap();
        // Exact apart from key order and `null`s (e.g. the Pod bookmark's
        // `"containers":null`): every key is known and every value survives.
        assert_eq!(drop_nulls(&back), drop_nulls(&without_type_meta(obj)), "{name}: {kind}");
    }
    for k in ["Pod", "ConfigMap", "Secret", "Node", "Status"] {
        assert!(kinds_seen.contains(k), "no {k} in the captures");
    }
}

/// Every protobuf object of a known kind in the captures (objects, list items, watch
/// event objects).
fn all_pb_objects() -> Vec<(String, String, Vec<u8>)> {
    let mut out = Vec::new();
    let mut names: Vec<_> = crate::testdata::names("golden").into_iter().filter(|n| n.ends_with(".pb.body")).collect();
    names.sort();
    for name in names {
        let body = golden(&name);
        let envelopes = if body.starts_with(b"k8s\0") {
            vec![unwrap_unknown(&body)]
        } else if name.contains("watch") && body.len() > 4 {
            watch_objects(&body)
        } else {
            continue;
        };
        for (kind, raw) in envelopes {
            if let Some(item) = kind.strip_suffix("List") {
                if MessageType::for_kind("", "v1", item).is_some() {
                    for it in list_items(&raw) {
                        out.push((name.clone(), item.to_owned(), it));
                    }
                }
            } else if MessageType::for_kind("", "v1", &kind).is_some() {
                out.push((name.clone(), kind, raw));
            }
        }
    }
    out
}

#[test]
fn golden_pb_round_trips_byte_for_byte() {
    // The apiserver writes fields in tag order, maps sorted, every present field: so
    // pb -> JSON -> pb must reproduce its bytes exactly.
    let objects = all_pb_objects();
    assert!(objects.len() > 30, "only {} objects found", objects.len());
    for (name, kind, raw) in &objects {
        let json = pb_to_json(ty(kind), raw).unwrap();
        let back = json_to_pb(ty(kind), &json).unwrap();
        assert!(back == *raw, "{name}: {kind} bytes differ\n{json}");
    }
}

/// `v` with only what `paths` name (dotted JSON paths), as a full decode would hold it.
fn restricted(v: &Value, paths: &[&str]) -> Value {
    let mut out = Map::new();
    for path in paths {
        let head = path.split('.').next().unwrap_or(path);
        let Some(field) = v.get(head) else { continue };
        if out.contains_key(head) {
            continue;
        }
        let rests: Vec<&str> = paths.iter().filter_map(|p| p.split_once('.').filter(|(h, _)| *h == head).map(|(_, r)| r)).collect();
        let whole = paths.contains(&head);
        let part = match field {
            Value::Object(_) if !whole => restricted(field, &rests),
            Value::Array(items) if !whole => Value::Array(items.iter().map(|i| restricted(i, &rests)).collect()),
            _ => field.clone(),
        };
        out.insert(head.to_owned(), part);
    }
    Value::Object(out)
}

#[test]
fn a_projected_decode_is_the_full_decode_restricted_to_its_paths() {
    // What the protobuf feed reads of a pod (its metadata and selectable fields), a path
    // through a list (containers' names), and paths that name nothing.
    let paths: &[&[&str]] = &[
        &["metadata", "spec.nodeName", "spec.restartPolicy", "status.phase", "status.podIP"],
        &["metadata.name", "metadata.namespace", "metadata.resourceVersion", "metadata.labels", "spec.nodeName"],
        &["metadata.labels", "metadata.name", "spec.containers.name", "spec.containers.image"],
        &["spec", "status.conditions"],
        &["nothing.here", "metadata.nothing"],
        &[],
    ];
    let objects = all_pb_objects();
    assert!(objects.iter().any(|(_, kind, _)| kind == "Pod"), "pods in the captures");
    for (name, kind, raw) in &objects {
        let full = pb_to_json(ty(kind), raw).unwrap();
        for p in paths {
            let only = pb_to_json_only(ty(kind), raw, &Projection::of(p.iter().copied())).unwrap();
            assert_eq!(only, restricted(&full, p), "{name}: {kind} {p:?}");
        }
    }
}
