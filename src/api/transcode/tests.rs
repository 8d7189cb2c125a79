//! Unit tests plus checks against the real kube-apiserver captures in `testdata/golden`.
//!
//! Why the normalizer: the apiserver's protobuf carries every non-pointer Go field, empty
//! or not (`generateName: ""`, `hostNetwork: false`, `retryAfterSeconds: 0`), while its
//! JSON leaves those out (`omitempty`). Neither side can be derived from the other, so
//! JSON-vs-protobuf comparisons drop empty strings, zeros, `false`, `null` and empty
//! objects/arrays on both sides before comparing; everything with content must agree.
//! Round trips within one encoding are compared exactly.

use super::decode::{decode_special, Reader};
use super::encode::encode_special;
use super::*;
use crate::api::time::{format_go_duration, format_timestamp, parse_go_duration, parse_timestamp};
use proptest::prelude::*;
use serde_json::json;

use crate::testdata::golden;

fn golden_json(name: &str) -> Value {
    serde_json::from_slice(&golden(name)).unwrap()
}

fn ty(kind: &str) -> MessageType {
    let group = if kind == "Deployment" { "apps" } else { "" };
    MessageType::for_kind(group, "v1", kind).unwrap()
}

/// Every (tag, wire type, payload) of a message; payload is the LEN body or the varint
/// as little-endian bytes. Test-only, panics on bad input.
fn fields(bytes: &[u8]) -> Vec<(u64, u8, Vec<u8>)> {
    let mut r = Reader::new(bytes);
    let mut out = Vec::new();
    while !r.done() {
        let (tag, wt) = r.key().unwrap();
        let payload = match wt {
            WT_LEN => r.len_delimited().unwrap().to_vec(),
            WT_VARINT => r.varint().unwrap().to_le_bytes().to_vec(),
            WT_I64 => r.take(8).unwrap().to_vec(),
            _ => r.take(4).unwrap().to_vec(),
        };
        out.push((tag, wt as u8, payload));
    }
    out
}

/// `k8s\0` + runtime.Unknown{1: TypeMeta{1: apiVersion, 2: kind}, 2: raw, 3: "", 4: ""}
/// -> (kind, raw).
fn unwrap_unknown(body: &[u8]) -> (String, Vec<u8>) {
    assert_eq!(&body[..4], b"k8s\0");
    let f = fields(&body[4..]);
    let type_meta = fields(&f.iter().find(|x| x.0 == 1).unwrap().2);
    let kind = type_meta.iter().find(|x| x.0 == 2).unwrap().2.clone();
    let raw = f.iter().find(|x| x.0 == 2).unwrap().2.clone();
    (String::from_utf8(kind).unwrap(), raw)
}

/// The items (repeated field 2) of a list message (field 1 is ListMeta).
fn list_items(raw: &[u8]) -> Vec<Vec<u8>> {
    fields(raw).into_iter().filter(|x| x.0 == 2).map(|x| x.2).collect()
}

/// The objects of a protobuf watch stream: 4-byte big-endian frame length, WatchEvent
/// {1: type, 2: RawExtension{1: raw}} with raw a `k8s\0` envelope -> (kind, raw object).
fn watch_objects(body: &[u8]) -> Vec<(String, Vec<u8>)> {
    let mut out = Vec::new();
    let mut rest = body;
    while rest.len() >= 4 {
        let n = u32::from_be_bytes([rest[0], rest[1], rest[2], rest[3]]) as usize;
        let frame = &rest[4..4 + n];
        rest = &rest[4 + n..];
        let ev = fields(frame);
        let ext = fields(&ev.iter().find(|x| x.0 == 2).unwrap().2);
        out.push(unwrap_unknown(&ext.iter().find(|x| x.0 == 1).unwrap().2));
    }
    out
}

fn without_type_meta(v: &Value) -> Value {
    let mut v = v.clone();
    if let Value::Object(m) = &mut v {
        m.shift_remove("kind");
        m.shift_remove("apiVersion");
    }
    v
}

/// Drop empty values (see the module comment). Array elements are kept (their position
/// matters) but normalized inside.
fn normalize(v: &Value) -> Value {
    match v {
        Value::Object(m) => Value::Object(m.iter().map(|(k, v)| (k.clone(), normalize(v))).filter(|(_, v)| !is_empty(v)).collect()),
        Value::Array(a) => Value::Array(a.iter().map(normalize).collect()),
        v => v.clone(),
    }
}

fn is_empty(v: &Value) -> bool {
    match v {
        Value::Null => true,
        Value::Bool(b) => !b,
        Value::Number(n) => n.as_f64() == Some(0.0),
        Value::String(s) => s.is_empty(),
        Value::Array(a) => a.is_empty(),
        Value::Object(m) => m.is_empty(),
    }
}

/// Drop `null`s only (a zero Time decodes to null and is then not written).
fn drop_nulls(v: &Value) -> Value {
    match v {
        Value::Object(m) => Value::Object(m.iter().filter(|(_, v)| !v.is_null()).map(|(k, v)| (k.clone(), drop_nulls(v))).collect()),
        Value::Array(a) => Value::Array(a.iter().map(drop_nulls).collect()),
        v => v.clone(),
    }
}

// ---- prost as an independent oracle -------------------------------------------------

/// prost's pretty `Debug` of a k8s-pb message with empty fields dropped, the same rule
/// as [`normalize`]: `None`, `Some("")`, `Some(0)`, `Some(false)`, `[]`, `{}` fields and
/// map entries go, and so do fields whose message is left with no fields. List elements
/// stay.
fn prost_normalized(debug: &str) -> String {
    struct Node {
        head: String,
        children: Vec<Node>,
        tail: Option<String>,
    }
    fn parse(lines: &mut std::iter::Peekable<std::str::Lines<'_>>) -> Vec<Node> {
        let mut out = Vec::new();
        while let Some(line) = lines.peek() {
            let t = line.trim();
            if t.starts_with('}') || t.starts_with(']') || t.starts_with(')') {
                return out;
            }
            let line = lines.next().unwrap().trim().to_owned();
            if line.ends_with('{') || line.ends_with('[') || line.ends_with('(') {
                let children = parse(lines);
                let tail = lines.next().map(|l| l.trim().to_owned());
                out.push(Node { head: line, children, tail });
            } else {
                out.push(Node { head: line, children: Vec::new(), tail: None });
            }
        }
        out
    }
    /// `name: ` or `"map key": ` prefix?
    fn labelled(head: &str) -> bool {
        let b = head.as_bytes();
        if b.first() == Some(&b'"') {
            return head.contains("\": ");
        }
        let n = b.iter().take_while(|c| c.is_ascii_alphanumeric() || **c == b'_' || **c == b'#').count();
        n > 0 && head[n..].starts_with(": ")
    }
    fn empty_literal(v: &str) -> bool {
        matches!(v, "None," | "\"\"," | "0," | "0.0," | "false," | "[]," | "{},")
    }
    fn value_part(head: &str) -> &str {
        if let Some(rest) = head.strip_prefix('"') {
            // Map key: skip the quoted key (Debug escapes quotes inside it).
            let mut esc = false;
            for (i, c) in rest.char_indices() {
                match c {
                    '\\' if !esc => esc = true,
                    '"' if !esc => return rest[i + 1..].trim_start_matches(": "),
                    _ => esc = false,
                }
            }
            return head;
        }
        head.split_once(": ").map_or(head, |(_, v)| v)
    }
    fn prune(nodes: Vec<Node>, in_some: bool) -> Vec<Node> {
        nodes
            .into_iter()
            .filter_map(|n| {
                let lab = labelled(&n.head);
                if n.tail.is_none() {
                    let empty = if lab { empty_literal(value_part(&n.head)) } else { in_some && empty_literal(&n.head) };
                    return (!empty).then_some(n);
                }
                let some = n.head.ends_with("Some(");
                let children = prune(n.children, some);
                if children.is_empty() && (lab || in_some) {
                    return None;
                }
                Some(Node { children, ..n })
            })
            .collect()
    }
    fn render(nodes: &[Node], depth: usize, out: &mut String) {
        for n in nodes {
            out.push_str(&"  ".repeat(depth));
            out.push_str(&n.head);
            out.push('\n');
            render(&n.children, depth + 1, out);
            if let Some(t) = &n.tail {
                out.push_str(&"  ".repeat(depth));
                out.push_str(t);
                out.push('\n');
            }
        }
    }
    let nodes = prune(parse(&mut debug.lines().peekable()), false);
    let mut out = String::new();
    render(&nodes, 0, &mut out);
    out
}

/// Decode with prost (fails on any wire-type error) and return the normalized Debug.
fn prost_view(kind: &str, bytes: &[u8]) -> String {
    use k8s_pb::api::core::v1 as core;
    use prost::Message as _;
    let dbg = match kind {
        "Pod" => format!("{:#?}", core::Pod::decode(bytes).unwrap()),
        "ConfigMap" => format!("{:#?}", core::ConfigMap::decode(bytes).unwrap()),
        "Secret" => format!("{:#?}", core::Secret::decode(bytes).unwrap()),
        "Node" => format!("{:#?}", core::Node::decode(bytes).unwrap()),
        "Status" => format!("{:#?}", k8s_pb::apimachinery::pkg::apis::meta::v1::Status::decode(bytes).unwrap()),
        other => panic!("no prost type for {other}"),
    };
    prost_normalized(&dbg)
}

/// JSON object -> our protobuf -> prost, against the apiserver's protobuf -> prost.
fn assert_encodes_like_apiserver(kind: &str, json: &Value, apiserver_raw: &[u8]) {
    let ours = json_to_pb(ty(kind), json).unwrap();
    let a = prost_view(kind, &ours);
    let b = prost_view(kind, apiserver_raw);
    assert_eq!(a, b, "{kind}: our encoding differs from the apiserver's (normalized)");
    assert!(b.lines().count() > 10, "suspiciously empty comparison: {b}");
}

/// The apiserver's protobuf -> our JSON, against the apiserver's JSON.
fn assert_decodes_like_apiserver(kind: &str, raw: &[u8], json: &Value) {
    let ours = pb_to_json(ty(kind), raw).unwrap();
    assert_eq!(normalize(&ours), normalize(&without_type_meta(json)), "{kind}");
}

// ---- golden: protobuf <-> JSON of the same object -----------------------------------

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

// ---- API and unit behaviour ---------------------------------------------------------

#[test]
fn for_kind_knows_the_roots() {
    for (g, k, name) in [
        ("", "Pod", "k8s.io.api.core.v1.Pod"),
        ("", "Node", "k8s.io.api.core.v1.Node"),
        ("", "Namespace", "k8s.io.api.core.v1.Namespace"),
        ("", "Service", "k8s.io.api.core.v1.Service"),
        ("", "ConfigMap", "k8s.io.api.core.v1.ConfigMap"),
        ("", "Secret", "k8s.io.api.core.v1.Secret"),
        ("", "Event", "k8s.io.api.core.v1.Event"),
        ("", "Endpoints", "k8s.io.api.core.v1.Endpoints"),
        ("apps", "Deployment", "k8s.io.api.apps.v1.Deployment"),
        ("", "Status", "k8s.io.apimachinery.pkg.apis.meta.v1.Status"),
        ("meta.k8s.io", "Status", "k8s.io.apimachinery.pkg.apis.meta.v1.Status"),
    ] {
        assert_eq!(MessageType::for_kind(g, "v1", k).unwrap().proto_name(), name);
    }
    assert_eq!(MessageType::for_kind("", "v1", "Deployment"), None);
    assert_eq!(MessageType::for_kind("apps", "v1beta1", "Deployment"), None);
    assert_eq!(MessageType::for_kind("", "v1", "PodList"), None);
}

#[test]
fn schema_is_consistent() {
    for (i, m) in schema::MESSAGES.iter().enumerate() {
        assert!(m.fields.windows(2).all(|w| w[0].tag < w[1].tag), "{}", m.name);
        for f in m.fields {
            assert_eq!(f.inline, f.json.is_empty(), "{}.{}", m.name, f.name);
            let ids = match f.kind {
                FieldKind::Message(id) | FieldKind::Map(MapValue::Message(id)) => Some(id),
                _ => None,
            };
            if let Some(id) = ids {
                assert!(usize::from(id) < schema::MESSAGES.len(), "{}.{}", m.name, f.name);
            }
        }
        let _ = i;
    }
}

#[test]
fn json_names_with_acronyms() {
    let pod = json!({"spec": {"hostIPC": true, "hostPID": true, "containers": [{"name": "c"}]},
                     "status": {"podIPs": [{"ip": "10.0.0.1"}], "hostIP": "1.2.3.4", "qosClass": "Burstable"}});
    let pb = json_to_pb(ty("Pod"), &pod).unwrap();
    assert_eq!(pb_to_json(ty("Pod"), &pb).unwrap(), pod);
    // Go's decoder is case-insensitive; so is ours (output uses the canonical name).
    let loose = json!({"spec": {"hostipc": true, "host_pid": true}});
    let back = pb_to_json(ty("Pod"), &json_to_pb(ty("Pod"), &loose).unwrap()).unwrap();
    assert_eq!(back, json!({"spec": {"hostIPC": true, "hostPID": true}}));
}

#[test]
fn kind_api_version_and_unknown_keys_are_ignored() {
    let cm = json!({"kind": "ConfigMap", "apiVersion": "v1", "metadata": {"name": "x", "futureField": 1}, "data": {"a": "b"}});
    let pb = json_to_pb(ty("ConfigMap"), &cm).unwrap();
    assert_eq!(pb_to_json(ty("ConfigMap"), &pb).unwrap(), json!({"metadata": {"name": "x"}, "data": {"a": "b"}}));
}

#[test]
fn empty_values_are_written_when_present() {
    let cm = json!({"metadata": {"name": "", "generation": 0, "labels": {}}, "immutable": false});
    let pb = json_to_pb(ty("ConfigMap"), &cm).unwrap();
    // metadata{1: "", 7: 0}, immutable(4) false; empty maps have no entries to write.
    assert_eq!(pb, [0x0a, 0x04, 0x0a, 0x00, 0x38, 0x00, 0x20, 0x00]);
    assert_eq!(pb_to_json(ty("ConfigMap"), &pb).unwrap(), json!({"metadata": {"name": "", "generation": 0}, "immutable": false}));
}

#[test]
fn map_entries_are_sorted_and_complete() {
    let cm = json!({"data": {"b": "2", "a": "", "é": "x"}});
    let pb = json_to_pb(ty("ConfigMap"), &cm).unwrap();
    let entries: Vec<_> = fields(&pb).into_iter().map(|f| fields(&f.2)).collect();
    let keys: Vec<_> = entries.iter().map(|e| String::from_utf8(e[0].2.clone()).unwrap()).collect();
    assert_eq!(keys, ["a", "b", "é"]);
    assert_eq!(entries[0].len(), 2, "empty value still written");
    // A map entry without value (or key) decodes to the empty value.
    let bare = [0x12, 0x03, 0x0a, 0x01, b'k'];
    assert_eq!(pb_to_json(ty("ConfigMap"), &bare).unwrap(), json!({"data": {"k": ""}}));
}

#[test]
fn special_types() {
    let pod = json!({
        "metadata": {"creationTimestamp": "2026-11-22T02:05:06Z",
                     "deletionTimestamp": "2026-11-22T04:05:06+02:00"},
        "spec": {"containers": [{
            "name": "c",
            "resources": {"requests": {"cpu": "10m", "memory": "16Mi"}, "limits": {"cpu": 2}},
            "ports": [{"containerPort": 80}],
            "livenessProbe": {"httpGet": {"port": 8080, "path": "/healthz"}, "periodSeconds": 5},
            "readinessProbe": {"tcpSocket": {"port": "http"}},
        }]}
    });
    let pb = json_to_pb(ty("Pod"), &pod).unwrap();
    use prost::Message as _;
    let p = k8s_pb::api::core::v1::Pod::decode(pb.as_slice()).unwrap();
    let meta = p.metadata.as_ref().unwrap();
    assert_eq!(meta.creation_timestamp.as_ref().unwrap().seconds, Some(1_795_313_106));
    assert_eq!(meta.deletion_timestamp.as_ref().unwrap().seconds, Some(1_795_313_106));
    let c = &p.spec.as_ref().unwrap().containers[0];
    let res = c.resources.as_ref().unwrap();
    assert_eq!(res.requests["cpu"].string.as_deref(), Some("10m"));
    assert_eq!(res.limits["cpu"].string.as_deref(), Some("2"));
    let http = c.liveness_probe.as_ref().unwrap().handler.as_ref().unwrap().http_get.as_ref().unwrap();
    let port = http.port.as_ref().unwrap();
    assert_eq!((port.r#type, port.int_val, port.str_val.as_deref()), (Some(0), Some(8080), Some("")));
    let tcp = c.readiness_probe.as_ref().unwrap().handler.as_ref().unwrap().tcp_socket.as_ref().unwrap();
    assert_eq!(tcp.port.as_ref().unwrap().str_val.as_deref(), Some("http"));

    let back = pb_to_json(ty("Pod"), &pb).unwrap();
    assert_eq!(back["metadata"]["deletionTimestamp"], "2026-11-22T02:05:06Z");
    assert_eq!(back["spec"]["containers"][0]["livenessProbe"], json!({"httpGet": {"path": "/healthz", "port": 8080}, "periodSeconds": 5}));
    assert_eq!(back["spec"]["containers"][0]["readinessProbe"], json!({"tcpSocket": {"port": "http"}}));
    assert_eq!(back["spec"]["containers"][0]["resources"]["limits"]["cpu"], "2");
}

#[test]
fn inline_structs_always_written() {
    // Probe.handler is an embedded Go struct: written even when empty (Go does too).
    let pod = json!({"spec": {"containers": [{"name": "c", "livenessProbe": {"periodSeconds": 5}}]}});
    let pb = json_to_pb(ty("Pod"), &pod).unwrap();
    use prost::Message as _;
    let p = k8s_pb::api::core::v1::Pod::decode(pb.as_slice()).unwrap();
    let probe = p.spec.unwrap().containers[0].liveness_probe.clone().unwrap();
    assert!(probe.handler.is_some());
    assert_eq!(probe.period_seconds, Some(5));
    // Volume.volumeSource and the LocalObjectReference in selectors are inline too.
    let pod = json!({"spec": {"volumes": [{"name": "v", "configMap": {"name": "cm", "optional": true}}],
        "containers": [{"name": "c", "env": [{"name": "E", "valueFrom": {"secretKeyRef": {"name": "s", "key": "k"}}}]}]}});
    let pb = json_to_pb(ty("Pod"), &pod).unwrap();
    assert_eq!(pb_to_json(ty("Pod"), &pb).unwrap(), pod);
    let p = k8s_pb::api::core::v1::Pod::decode(pb.as_slice()).unwrap();
    let vol = &p.spec.as_ref().unwrap().volumes[0];
    let cm = vol.volume_source.as_ref().unwrap().config_map.as_ref().unwrap();
    assert_eq!(cm.local_object_reference.as_ref().unwrap().name.as_deref(), Some("cm"));
}

#[test]
fn times() {
    assert_eq!(parse_timestamp("1970-01-01T00:00:00Z"), Some((0, 0)));
    assert_eq!(parse_timestamp("2026-11-22T02:05:06Z"), Some((1_795_313_106, 0)));
    assert_eq!(parse_timestamp("2026-11-22T02:05:06.123456Z"), Some((1_795_313_106, 123_456_000)));
    assert_eq!(parse_timestamp("2026-11-21T21:05:06-05:00"), Some((1_795_313_106, 0)));
    assert_eq!(parse_timestamp("0001-01-01T00:00:00Z"), Some((GO_ZERO_TIME_UNIX, 0)));
    assert_eq!(parse_timestamp("2024-02-29T00:00:00Z").map(|t| t.0), Some(1_709_164_800));
    for bad in [
        "",
        "2026-11-22",
        "2026-11-22T02:05:06",
        "2026-13-01T00:00:00Z",
        "2025-02-29T00:00:00Z",
        "2026-11-22T24:00:00Z",
        "2026-11-22T02:05:06.Z",
        "2026-11-22T02:05:06+0100",
        "２026-11-22T02:05:06Z",
    ] {
        assert_eq!(parse_timestamp(bad), None, "{bad}");
    }
    assert_eq!(format_timestamp(1_795_313_106, 0, false).unwrap(), "2026-11-22T02:05:06Z");
    assert_eq!(format_timestamp(1_795_313_106, 5_000, true).unwrap(), "2026-11-22T02:05:06.000005Z");
    assert_eq!(format_timestamp(-1, 0, false).unwrap(), "1969-12-31T23:59:59Z");
    assert_eq!(format_timestamp(i64::MAX, 0, false), None);
    // Event.eventTime is a MicroTime; the zero time is JSON null both ways.
    let ev = json!({"firstTimestamp": null, "eventTime": "2026-11-22T02:05:06.250000Z", "series": null});
    let pb = json_to_pb(ty("Event"), &ev).unwrap();
    assert_eq!(pb[..2], [0x32, 0x00], "null time: empty message, like Go's zero time");
    assert_eq!(pb_to_json(ty("Event"), &pb).unwrap(), json!({"firstTimestamp": null, "eventTime": "2026-11-22T02:05:06.250000Z"}));
    // The zero time spelled out in seconds also decodes to null.
    let zero = [0x32, 0x0d, 0x08, 0x80, 0x92, 0xb8, 0xc3, 0x98, 0xfe, 0xff, 0xff, 0xff, 0x01, 0x10, 0x00];
    assert_eq!(pb_to_json(ty("Event"), &zero).unwrap(), json!({"firstTimestamp": null}));
    let epoch = [0x32, 0x04, 0x08, 0x00, 0x10, 0x00];
    assert_eq!(pb_to_json(ty("Event"), &epoch).unwrap(), json!({"firstTimestamp": "1970-01-01T00:00:00Z"}));
}

#[test]
fn durations_like_go() {
    for (d, s) in [
        (0, "0s"),
        (1, "1ns"),
        (1_500, "1.5µs"),
        (1_100_000, "1.1ms"),
        (300_000_000_000, "5m0s"),
        (3_723_500_000_000, "1h2m3.5s"),
        (-90_000_000_000, "-1m30s"),
        (2_000_000_000, "2s"),
        (i64::MIN, "-2562047h47m16.854775808s"),
    ] {
        assert_eq!(format_go_duration(d), s);
        assert_eq!(parse_go_duration(s), Some(d), "{s}");
    }
    assert_eq!(parse_go_duration("1h30m"), Some(5_400_000_000_000));
    assert_eq!(parse_go_duration("1.5h"), Some(5_400_000_000_000));
    assert_eq!(parse_go_duration("10us"), Some(10_000));
    assert_eq!(parse_go_duration(".5s"), Some(500_000_000));
    for bad in ["", "5", "5x", "-", "s", "1.s.", "9999999999999999999h", "3000000h"] {
        assert_eq!(parse_go_duration(bad), None, "{bad}");
    }
    let mut buf = Vec::new();
    encode_special(Special::Duration, &json!("5m0s"), &mut buf).unwrap();
    assert_eq!(decode_special(Special::Duration, &buf).unwrap(), json!("5m0s"));
}

#[test]
fn raw_json_types() {
    let v = json!({"f:a": {".": {}}, "x": [1, "<&>"]});
    for special in [Special::FieldsV1, Special::RawExtension] {
        let mut buf = Vec::new();
        encode_special(special, &v, &mut buf).unwrap();
        let raw = &fields(&buf)[0].2;
        assert_eq!(raw.as_slice(), br#"{"f:a":{".":{}},"x":[1,"\u003c\u0026\u003e"]}"#);
        assert_eq!(decode_special(special, &buf).unwrap(), v);
        assert!(decode_special(special, &[0x0a, 0x01, b'{']).is_err());
    }
    assert_eq!(decode_special(Special::RawExtension, &[]).unwrap(), Value::Null);
}

#[test]
fn int_or_string_and_quantity_edges() {
    let mut buf = Vec::new();
    encode_special(Special::IntOrString, &json!(-3), &mut buf).unwrap();
    assert_eq!(decode_special(Special::IntOrString, &buf).unwrap(), json!(-3));
    assert!(encode_special(Special::IntOrString, &json!(1.5), &mut buf).is_err());
    assert!(encode_special(Special::IntOrString, &json!(1u64 << 40), &mut buf).is_err());
    assert!(decode_special(Special::IntOrString, &[0x08, 0x02]).is_err());
    assert_eq!(decode_special(Special::Quantity, &[]).unwrap(), json!("0"));
}

#[test]
fn errors_name_the_field() {
    let err = |kind: &str, v: Value| json_to_pb(ty(kind), &v).unwrap_err().to_string();
    assert_eq!(
        err("Pod", json!({"spec": {"containers": [{"name": "a"}, {"name": "b", "ports": [{"containerPort": "80"}]}]}})),
        "spec.containers[1].ports[0].containerPort: expected a 32-bit integer, found string \"80\""
    );
    assert_eq!(err("ConfigMap", json!({"metadata": {"labels": {"app": 1}}})), "metadata.labels[app]: expected a string, found number 1");
    assert_eq!(err("Secret", json!({"data": {"k": "not base64!"}})), "data[k]: expected a base64 string, found string \"not base64!\"");
    assert_eq!(
        err("Pod", json!({"metadata": {"creationTimestamp": "yesterday"}})),
        "metadata.creationTimestamp: expected an RFC 3339 time, found string \"yesterday\""
    );
    assert_eq!(
        err("Pod", json!({"spec": {"containers": [{"livenessProbe": {"httpGet": {"port": true}}}]}})),
        "spec.containers[0].livenessProbe.httpGet.port: expected a 32-bit integer or a string, found boolean true"
    );
    assert_eq!(err("Pod", json!([])), "(top level): expected an object, found an array");
    assert_eq!(err("Pod", json!({"spec": {"priority": 1u64 << 33}})), "spec.priority: expected a 32-bit integer, found number 8589934592");

    // Decoding: the path of the field being read.
    let e = pb_to_json(ty("ConfigMap"), &[0x0a, 0x03, 0x0a, 0x09, b'a']).unwrap_err();
    assert_eq!(e.to_string(), "metadata.name: protobuf input is truncated");
    let e = pb_to_json(ty("ConfigMap"), &[0x0a, 0x02, 0x08, 0x01]).unwrap_err();
    assert_eq!(e.to_string(), "metadata.name: wire type 0 does not fit a field of type string");
    let e = pb_to_json(ty("ConfigMap"), &[0x0a, 0x03, 0x0a, 0x01, 0xff]).unwrap_err();
    assert!(matches!(e, TranscodeError::InvalidUtf8 { ref path } if path == "metadata.name"), "{e}");
    let e = pb_to_json(ty("ConfigMap"), &[0x03]).unwrap_err();
    assert!(matches!(e, TranscodeError::BadKey { wire_type: 3, .. }), "{e}");
    let e = pb_to_json(ty("ConfigMap"), &[0x20, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01]).unwrap_err();
    assert!(matches!(e, TranscodeError::BadVarint { .. }), "{e}");
}

#[test]
fn decoder_accepts_packed_and_skips_unknown() {
    // ContainerPort? No: Capabilities has only strings. Use a repeated int64:
    // PodSecurityContext.supplementalGroups (tag 4), packed.
    let psc = [0x22, 0x03, 0x01, 0x02, 0x03];
    let spec = [&[0x72u8, psc.len() as u8][..], &psc].concat();
    let mut pod = vec![0x12, spec.len() as u8];
    pod.extend_from_slice(&spec);
    // Unknown fields of every wire type are skipped.
    pod.extend_from_slice(&[0xf8, 0x3f, 0x01, 0xf9, 0x3f, 1, 2, 3, 4, 5, 6, 7, 8, 0xfa, 0x3f, 0x00, 0xfd, 0x3f, 1, 2, 3, 4]);
    let json = pb_to_json(ty("Pod"), &pod).unwrap();
    assert_eq!(json, json!({"spec": {"securityContext": {"supplementalGroups": [1, 2, 3]}}}));
    // And we write them unpacked, like gogo for proto2.
    let ours = json_to_pb(ty("Pod"), &json).unwrap();
    assert_eq!(ours, [0x12, 0x08, 0x72, 0x06, 0x20, 0x01, 0x20, 0x02, 0x20, 0x03]);
}

#[test]
fn long_messages_get_multibyte_lengths() {
    for n in [0usize, 1, 126, 127, 128, 16_383, 16_384, 200_000] {
        let cm = json!({"metadata": {"name": "x".repeat(n)}});
        let pb = json_to_pb(ty("ConfigMap"), &cm).unwrap();
        use prost::Message as _;
        let decoded = k8s_pb::api::core::v1::ConfigMap::decode(pb.as_slice()).unwrap();
        assert_eq!(decoded.metadata.unwrap().name.unwrap().len(), n);
        assert_eq!(pb_to_json(ty("ConfigMap"), &pb).unwrap(), cm);
    }
}

#[test]
fn varint_len_matches_encoding() {
    for v in [0u64, 1, 127, 128, 300, 16_383, 16_384, u64::from(u32::MAX), u64::MAX] {
        let mut b = Vec::new();
        put_varint(&mut b, v);
        assert_eq!(b.len(), varint_len(v));
        assert_eq!(Reader::new(&b).varint().unwrap(), v);
    }
}

fn label_map() -> impl Strategy<Value = serde_json::Map<String, Value>> {
    proptest::collection::btree_map("[a-z0-9./-]{0,20}|\\PC{0,8}", "\\PC{0,30}", 0..12)
        .prop_map(|m| m.into_iter().map(|(k, v)| (k, Value::String(v))).collect())
}

proptest! {
    #[test]
    fn labels_and_annotations_round_trip(labels in label_map(), annotations in label_map()) {
        let cm = json!({"metadata": {"name": "x", "labels": labels, "annotations": annotations}});
        let pb = json_to_pb(ty("ConfigMap"), &cm).unwrap();
        // An empty map has no entries to write, so it comes back absent.
        let mut expected = json!({"metadata": {"name": "x"}});
        if !labels.is_empty() {
            expected["metadata"]["labels"] = Value::Object(labels.clone());
        }
        if !annotations.is_empty() {
            expected["metadata"]["annotations"] = Value::Object(annotations.clone());
        }
        prop_assert_eq!(pb_to_json(ty("ConfigMap"), &pb).unwrap(), expected);
        use prost::Message as _;
        let decoded = k8s_pb::api::core::v1::ConfigMap::decode(pb.as_slice()).unwrap();
        prop_assert_eq!(decoded.metadata.unwrap().labels.len(), labels.len());
    }

    #[test]
    fn arbitrary_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..300)) {
        for (_, _, _, id) in schema::ROOTS {
            let _ = pb_to_json(MessageType(*id), &bytes);
        }
    }

    #[test]
    fn mutated_golden_pod_never_panics(pos in 0usize..2000, byte in any::<u8>(), cut in 0usize..2000) {
        let (_, mut raw) = unwrap_unknown(&golden("01-get-pod.pb.body"));
        let pos = pos % raw.len();
        raw[pos] = byte;
        raw.truncate(cut.max(pos + 1));
        if let Ok(json) = pb_to_json(ty("Pod"), &raw) {
            // Whatever decodes, encodes.
            let _ = json_to_pb(ty("Pod"), &json);
        }
    }

    #[test]
    fn arbitrary_json_never_panics(v in arb_json()) {
        for (_, _, _, id) in schema::ROOTS {
            let _ = json_to_pb(MessageType(*id), &v);
            let _ = json_to_pb(MessageType(*id), &json!({"metadata": v.clone(), "spec": v.clone(), "data": v.clone()}));
        }
    }
}

fn arb_json() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::from),
        any::<i64>().prop_map(Value::from),
        any::<f64>().prop_filter("finite", |x| x.is_finite()).prop_map(Value::from),
        "[a-zA-Z:.0-9-]{0,12}".prop_map(Value::from),
    ];
    leaf.prop_recursive(4, 40, 6, |inner| {
        prop_oneof![
            proptest::collection::vec(inner.clone(), 0..4).prop_map(Value::from),
            proptest::collection::btree_map(
                prop_oneof![
                    Just("name".to_owned()),
                    Just("labels".to_owned()),
                    Just("containers".to_owned()),
                    Just("creationTimestamp".to_owned()),
                    Just("port".to_owned()),
                    "[a-z]{1,6}"
                ],
                inner,
                0..4
            )
            .prop_map(|m| Value::Object(m.into_iter().collect())),
        ]
    })
}
