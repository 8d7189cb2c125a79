//! The differential tier (opt-in, like `real_apiserver.rs`): a few hundred generated read
//! requests, each sent to a real kube-apiserver and through kache in front of it, the two
//! answers compared byte for byte (status, Content-Type, Content-Encoding, body) after
//! normalising only what must differ: a list's resourceVersion and the RV inside its continue
//! token (the two answers are taken a moment apart while the cluster's global RV moves).
//! Prints the count of cases, equal and different, and every difference; fails if any. Also
//! normalised: the upstream's current RV in a too-large-RV 504 (it moves between the two),
//! the start key's leading `/` in continue tokens (the apiserver writes it when its watch
//! cache answers and not when etcd does; the cases are counted and listed), and gzip bodies
//! (compared decompressed; whether each side compressed is compared).
//!
//! ```sh
//! KACHE_REAL_KUBECONFIG=~/real-apiserver/kubeconfig KACHE_REAL_CONTEXT=admin \
//!   cargo test --test it real_differential -- --nocapture
//! ```
//!
//! Kinds: pods (a namespace of 600 and one of its own, a node's pods across namespaces),
//! nodes, ConfigMaps, a CRD in an `example.com` group (namespaced) and one in a `*.k8s.io`
//! group (cluster-scoped), which the test creates (namespaces `kache-fid-a`/`-b`, as
//! `tools/fidelity_objects.sh` does). Encodings: JSON, protobuf, protobuf-first, Table,
//! PartialObjectMetadata(List) in JSON and protobuf, gzip. resourceVersion modes (unset, 0,
//! NotOlderThan, Exact, legacy exact with a limit), selectors, paging (and each side's
//! continue token sent to the other), watches, pretty output and bad parameters.

use crate::support::kache_over;
use crate::support::real::real_upstream;
use bytes::Bytes;
use http::{Method, Request};
use http_body_util::{BodyExt, Full};
use kache::upstream::Upstream;
use serde_json::{json, Value};
use std::collections::BTreeMap;

const JSON: &str = "application/json";
const PB: &str = "application/vnd.kubernetes.protobuf";
const PB_FIRST: &str = "application/vnd.kubernetes.protobuf, application/json";
const TABLE: &str = "application/json;as=Table;v=v1;g=meta.k8s.io,application/json;as=Table;v=v1beta1;g=meta.k8s.io,application/json";
const META_LIST: &str = "application/json;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1,application/json";
const META_LIST_PB: &str =
    "application/vnd.kubernetes.protobuf;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1,application/json;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1,application/json";
const META: &str = "application/json;as=PartialObjectMetadata;g=meta.k8s.io;v=v1,application/json";
const META_PB: &str = "application/vnd.kubernetes.protobuf;as=PartialObjectMetadata;g=meta.k8s.io;v=v1,application/json";

/// One generated request.
#[derive(Clone)]
struct Case {
    path: String,
    headers: Vec<(&'static str, String)>,
}

impl Case {
    fn new(path: impl Into<String>, accept: &str) -> Case {
        Case { path: path.into(), headers: vec![("accept", accept.to_string()), ("user-agent", "kache-differential/1.0".into())] }
    }

    fn with(mut self, name: &'static str, value: &str) -> Case {
        self.headers.retain(|(k, _)| *k != name);
        self.headers.push((name, value.to_string()));
        self
    }

    fn describe(&self) -> String {
        let accept = self.headers.iter().find(|(k, _)| *k == "accept").map_or("", |(_, v)| v.as_str());
        let extra: Vec<String> =
            self.headers.iter().filter(|(k, _)| *k != "accept" && *k != "user-agent").map(|(k, v)| format!("{k}: {v}")).collect();
        let ua = self.headers.iter().find(|(k, v)| *k == "user-agent" && !v.starts_with("kache-")).map(|(_, v)| format!(" UA {v}"));
        format!(
            "GET {} [{}]{}{}",
            self.path,
            short(accept),
            ua.unwrap_or_default(),
            if extra.is_empty() { String::new() } else { format!(" {}", extra.join(" ")) }
        )
    }
}

fn short(accept: &str) -> &'static str {
    match accept {
        JSON => "json",
        PB => "pb",
        PB_FIRST => "pb,json",
        TABLE => "table",
        META_LIST | META => "meta",
        META_LIST_PB | META_PB => "meta-pb",
        _ => "other",
    }
}

/// An answer: status, Content-Type, Content-Encoding, body.
#[derive(Debug, Clone, PartialEq)]
struct Answer {
    status: u16,
    content_type: String,
    encoding: String,
    body: Vec<u8>,
}

async fn ask_upstream(up: &Upstream, c: &Case) -> Answer {
    let headers: Vec<(&str, &str)> = c.headers.iter().map(|(k, v)| (*k, v.as_str())).collect();
    let resp = up.request(Method::GET, &c.path, &headers, Vec::new()).await.unwrap_or_else(|e| panic!("{}: {e}", c.path));
    let (parts, body) = resp.into_parts();
    answer(parts, body.collect().await.expect("upstream body").to_bytes())
}

async fn ask_kache(api: &crate::support::Api, c: &Case) -> Answer {
    let mut b = Request::builder().method(Method::GET).uri(format!("{}{}", api.base, c.path));
    for (k, v) in &c.headers {
        b = b.header(*k, v);
    }
    let resp = api.client.request(b.body(Full::new(Bytes::new())).unwrap()).await.unwrap_or_else(|e| panic!("{}: {e}", c.path));
    let (parts, body) = resp.into_parts();
    answer(parts, body.collect().await.expect("kache body").to_bytes())
}

fn answer(parts: http::response::Parts, body: Bytes) -> Answer {
    let h = |n: http::HeaderName| parts.headers.get(n).and_then(|v| v.to_str().ok()).unwrap_or("").to_string();
    Answer {
        status: parts.status.as_u16(),
        content_type: h(http::header::CONTENT_TYPE),
        encoding: h(http::header::CONTENT_ENCODING),
        body: body.to_vec(),
    }
}

// ---- normalisation: only a list's resourceVersion and its continue token's RV ----

fn b64(s: &str) -> Option<Vec<u8>> {
    use base64::Engine;
    base64::engine::general_purpose::URL_SAFE_NO_PAD.decode(s).ok()
}

thread_local! {
    /// Whether [`norm_token`] drops the start key's leading `/` (off to count the answers
    /// whose tokens differ only in that).
    static STRIP_SLASH: std::cell::Cell<bool> = const { std::cell::Cell::new(true) };
}

/// Normalised with the start key's `/` kept.
fn normalise_keeping_slash(a: &Answer) -> Answer {
    STRIP_SLASH.with(|f| f.set(false));
    let n = normalise(a.clone());
    STRIP_SLASH.with(|f| f.set(true));
    n
}

/// A continue token with its RV replaced by 1 and its start key without a leading `/` (the
/// apiserver writes `/key` when its watch cache serves the list and `key` when etcd does,
/// which depends on its compactions; both sides accept both). The start key itself is kept.
fn norm_token(t: &str) -> String {
    use base64::Engine;
    let Some(raw) = b64(t) else { return t.to_string() };
    let Ok(mut v) = serde_json::from_slice::<Value>(&raw) else { return t.to_string() };
    v["rv"] = json!(1);
    if let Some(s) = v["start"].as_str().and_then(|s| s.strip_prefix('/')).filter(|_| STRIP_SLASH.with(|f| f.get())) {
        v["start"] = json!(s);
    }
    base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(v.to_string())
}

fn replace_all(hay: &[u8], needle: &[u8], with: &[u8]) -> Vec<u8> {
    if needle.is_empty() {
        return hay.to_vec();
    }
    let mut out = Vec::with_capacity(hay.len());
    let mut i = 0;
    while i < hay.len() {
        if hay[i..].starts_with(needle) {
            out.extend_from_slice(with);
            i += needle.len();
        } else {
            out.push(hay[i]);
            i += 1;
        }
    }
    out
}

/// A JSON list (or Table) answer with its list RV and continue token normalised in place,
/// bytes otherwise untouched (compact or indented).
fn norm_json(body: &[u8]) -> Vec<u8> {
    let Ok(v) = serde_json::from_slice::<Value>(body) else { return body.to_vec() };
    let mut out = body.to_vec();
    let meta = &v["metadata"];
    let is_list = v.get("items").is_some() || v.get("rows").is_some();
    if let (true, Some(rv)) = (is_list, meta["resourceVersion"].as_str()) {
        for sep in [":", ": "] {
            out = replace_all(
                &out,
                format!("\"resourceVersion\"{sep}\"{rv}\"").as_bytes(),
                format!("\"resourceVersion\"{sep}\"RV\"").as_bytes(),
            );
        }
    }
    if let Some(c) = meta["continue"].as_str().filter(|c| !c.is_empty()) {
        out = replace_all(&out, c.as_bytes(), norm_token(c).as_bytes());
    }
    out
}

fn varint(b: &[u8], pos: &mut usize) -> Option<u64> {
    let (mut v, mut shift) = (0u64, 0);
    loop {
        let x = *b.get(*pos)?;
        *pos += 1;
        v |= u64::from(x & 0x7f) << shift;
        if x & 0x80 == 0 {
            return Some(v);
        }
        shift += 7;
    }
}

/// (field, wire type, bytes of a length-delimited field or the varint's encoding).
pub(crate) fn fields(b: &[u8]) -> Option<Vec<(u64, u64, Vec<u8>)>> {
    let (mut pos, mut out) = (0, Vec::new());
    while pos < b.len() {
        let key = varint(b, &mut pos)?;
        let (f, wt) = (key >> 3, key & 7);
        let start = pos;
        match wt {
            0 => {
                varint(b, &mut pos)?;
                out.push((f, wt, b[start..pos].to_vec()));
            }
            2 => {
                let n = varint(b, &mut pos)? as usize;
                out.push((f, wt, b.get(pos..pos + n)?.to_vec()));
                pos += n;
            }
            _ => return None,
        }
    }
    Some(out)
}

fn put_varint(out: &mut Vec<u8>, mut x: u64) {
    while x >= 0x80 {
        out.push((x as u8 & 0x7f) | 0x80);
        x >>= 7;
    }
    out.push(x as u8);
}

fn put(out: &mut Vec<u8>, f: u64, wt: u64, v: &[u8]) {
    put_varint(out, (f << 3) | wt);
    if wt == 2 {
        put_varint(out, v.len() as u64);
    }
    out.extend_from_slice(v);
}

fn rebuild(fs: &[(u64, u64, Vec<u8>)]) -> Vec<u8> {
    let mut out = Vec::new();
    for (f, wt, v) in fs {
        put(&mut out, *f, *wt, v);
    }
    out
}

/// A protobuf list answer (`k8s\0` + Unknown{raw: List{ListMeta, items}}) with its ListMeta's
/// RV and continue token normalised.
fn norm_pb(body: &[u8]) -> Vec<u8> {
    let try_norm = || -> Option<Vec<u8>> {
        let rest = body.strip_prefix(b"k8s\0")?;
        let mut unknown = fields(rest)?;
        let raw = unknown.iter_mut().find(|(f, _, _)| *f == 2)?;
        let mut list = fields(&raw.2)?;
        let meta = list.iter_mut().find(|(f, wt, _)| *f == 1 && *wt == 2)?;
        let mut m = fields(&meta.2)?;
        // A list's ListMeta holds only fields 1-4; an object's field 1 is an ObjectMeta.
        if m.iter().any(|(f, _, _)| *f > 4) {
            return None;
        }
        for (f, _, v) in m.iter_mut() {
            match f {
                2 if !v.is_empty() => *v = b"RV".to_vec(),
                3 if !v.is_empty() => *v = norm_token(std::str::from_utf8(v).ok()?).into_bytes(),
                _ => {}
            }
        }
        meta.2 = rebuild(&m);
        raw.2 = rebuild(&list);
        let mut out = b"k8s\0".to_vec();
        out.extend(rebuild(&unknown));
        Some(out)
    };
    try_norm().unwrap_or_else(|| body.to_vec())
}

fn normalise(mut a: Answer) -> Answer {
    // Compressed bytes depend on the compressor and its level: compare what they hold (the
    // Content-Encoding itself is compared as it is).
    if a.encoding == "gzip" {
        use std::io::Read;
        let mut plain = Vec::new();
        if flate2::read::MultiGzDecoder::new(&a.body[..]).read_to_end(&mut plain).is_ok() {
            a.body = plain;
        }
    }
    if a.encoding.is_empty() || a.encoding == "gzip" {
        a.body = if a.content_type.starts_with(PB) { norm_pb(&a.body) } else { norm_json(&a.body) };
        // A 504 for a resourceVersion not reached names the upstream's RV at that moment.
        if a.status == 504 {
            a.body = norm_current(&a.body);
        }
    }
    a
}

/// `current: N` (the RV a too-large-RV 504 reports) as `current: RV`.
fn norm_current(body: &[u8]) -> Vec<u8> {
    let needle = b"current: ";
    let Some(at) = body.windows(needle.len()).position(|w| w == needle) else { return body.to_vec() };
    let start = at + needle.len();
    let end = start + body[start..].iter().take_while(|b| b.is_ascii_digit()).count();
    [&body[..start], b"RV".as_slice(), &body[end..]].concat()
}

/// A JSON Table with the cells of its Age column blanked, or `None` for anything else.
fn ageless(body: &[u8]) -> Option<Value> {
    let mut t: Value = serde_json::from_slice(body).ok()?;
    if t["kind"] != "Table" {
        return None;
    }
    let age = t["columnDefinitions"].as_array()?.iter().position(|c| c["name"] == "Age")?;
    for row in t["rows"].as_array_mut()? {
        row["cells"][age] = json!("");
    }
    Some(t)
}

/// Where two bodies first differ, with some context from each.
fn first_difference(a: &[u8], k: &[u8]) -> String {
    let i = a.iter().zip(k).position(|(x, y)| x != y).unwrap_or(a.len().min(k.len()));
    let show = |b: &[u8]| String::from_utf8_lossy(&b[i.saturating_sub(60)..(i + 80).min(b.len())]).replace('\n', "\\n");
    format!(
        "bodies {} vs {} bytes, first difference at byte {i}:\n        apiserver: …{}…\n        kache:     …{}…",
        a.len(),
        k.len(),
        show(a),
        show(k)
    )
}

// ---- the objects and the cases ----

async fn send_json(up: &Upstream, method: Method, path: &str, v: &Value) -> (u16, Value) {
    let headers = [("content-type", JSON), ("accept", JSON)];
    let resp = up.request(method, path, &headers, v.to_string().into_bytes()).await.unwrap_or_else(|e| panic!("{path}: {e}"));
    let status = resp.status().as_u16();
    let body = resp.into_body().collect().await.unwrap().to_bytes();
    (status, serde_json::from_slice(&body).unwrap_or(Value::Null))
}

/// Create (or keep) the tier's objects: what tools/fidelity_objects.sh makes.
async fn objects(up: &Upstream) {
    let schema = json!({"openAPIV3Schema": {"type": "object", "x-kubernetes-preserve-unknown-fields": true}});
    let crd = |name: &str, group: &str, plural: &str, kind: &str, scope: &str, approved: bool| {
        let mut meta = json!({"name": name});
        if approved {
            meta["annotations"] = json!({"api-approved.kubernetes.io": "https://github.com/kubernetes/enhancements/pull/1111"});
        }
        json!({"apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition", "metadata": meta,
            "spec": {"group": group, "scope": scope, "names": {"plural": plural, "singular": kind.to_lowercase(), "kind": kind, "listKind": format!("{kind}List")},
                "versions": [{"name": "v1", "served": true, "storage": true, "schema": schema}]}})
    };
    for c in [
        crd("widgets.fid.example.com", "fid.example.com", "widgets", "Widget", "Namespaced", false),
        crd("gadgets.fid.k8s.io", "fid.k8s.io", "gadgets", "Gadget", "Cluster", true),
    ] {
        let (s, v) = send_json(up, Method::POST, "/apis/apiextensions.k8s.io/v1/customresourcedefinitions", &c).await;
        assert!(s == 201 || s == 409, "CRD: {s} {v}");
    }
    for group in ["/apis/fid.example.com/v1", "/apis/fid.k8s.io/v1"] {
        crate::support::eventually(60, 200, || async move {
            let r = up.get(group, JSON).await.map_err(|e| e.to_string())?;
            if r.status() == 200 {
                Ok(())
            } else {
                Err(format!("{group}: {}", r.status()))
            }
        })
        .await;
    }
    let create = |path: String, v: Value| async move {
        let (s, b) = send_json(up, Method::POST, &path, &v).await;
        assert!(s == 201 || s == 409, "{path}: {s} {b}");
    };
    for ns in ["kache-fid-a", "kache-fid-b"] {
        create("/api/v1/namespaces".into(), json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}})).await;
        for i in 1..=3 {
            let labels = json!({"app": format!("w{i}"), "tier": format!("t{}", i % 2)});
            create(
                format!("/apis/fid.example.com/v1/namespaces/{ns}/widgets"),
                json!({"apiVersion": "fid.example.com/v1", "kind": "Widget", "metadata": {"name": format!("w{i}"), "labels": labels}, "spec": {"size": i, "color": "red"}}),
            )
            .await;
            let labels = json!({"app": format!("c{i}"), "tier": format!("t{}", i % 2)});
            create(
                format!("/api/v1/namespaces/{ns}/configmaps"),
                json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": format!("cm{i}"), "labels": labels}, "data": {"k": format!("v{i}")}}),
            )
            .await;
        }
    }
    for i in 1..=4 {
        let labels = json!({"app": format!("g{i}"), "tier": format!("t{}", i % 2)});
        create(
            "/apis/fid.k8s.io/v1/gadgets".into(),
            json!({"apiVersion": "fid.k8s.io/v1", "kind": "Gadget", "metadata": {"name": format!("g{i}"), "labels": labels}, "spec": {"n": i}}),
        )
        .await;
    }
}

/// A collection to list, the accepts that make sense for it, a name in it, and selectors.
struct Collection {
    path: &'static str,
    builtin: bool,
    name: String,
    labels: &'static [&'static str],
    field: Option<&'static str>,
}

async fn cases(up: &Upstream) -> Vec<Case> {
    let pod = {
        let r = up.get("/api/v1/namespaces/ns-001/pods?limit=1", JSON).await.unwrap();
        let v: Value = serde_json::from_slice(&r.into_body().collect().await.unwrap().to_bytes()).unwrap();
        v["items"][0]["metadata"]["name"].as_str().expect("the apiserver holds pods in ns-001").to_string()
    };
    let cols = [
        Collection {
            path: "/api/v1/namespaces/ns-001/pods",
            builtin: true,
            name: pod,
            labels: &["app%3Danalytics", "tier%20in%20(data,web),shard!%3D3"],
            field: Some("spec.nodeName%3Dnode-0851"),
        },
        Collection {
            path: "/api/v1/namespaces/kache-fid-a/configmaps",
            builtin: true,
            name: "cm1".into(),
            labels: &["tier%3Dt1", "app%20notin%20(c1)"],
            field: Some("metadata.name%3Dcm2"),
        },
        Collection {
            path: "/api/v1/configmaps",
            builtin: true,
            name: String::new(),
            labels: &["tier%3Dt1"],
            field: Some("metadata.namespace%3Dkache-fid-b"),
        },
        Collection {
            path: "/api/v1/nodes",
            builtin: true,
            name: "node-0001".into(),
            labels: &["pool%3Dpool-1"],
            field: Some("spec.unschedulable%3Dfalse"),
        },
        Collection {
            path: "/apis/fid.example.com/v1/namespaces/kache-fid-a/widgets",
            builtin: false,
            name: "w1".into(),
            labels: &["tier%3Dt1", "app"],
            field: Some("metadata.name%3Dw2"),
        },
        Collection {
            path: "/apis/fid.example.com/v1/widgets",
            builtin: false,
            name: String::new(),
            labels: &["tier%3Dt0"],
            field: Some("metadata.namespace%3Dkache-fid-b"),
        },
        Collection {
            path: "/apis/fid.k8s.io/v1/gadgets",
            builtin: false,
            name: "g1".into(),
            labels: &["tier%3Dt1", "!app"],
            field: Some("metadata.name%3Dg3"),
        },
    ];
    // The global RV now, for the NotOlderThan and Exact modes.
    let rv = {
        let r = up.get("/api/v1/namespaces/kache-fid-a/configmaps?limit=1", JSON).await.unwrap();
        let v: Value = serde_json::from_slice(&r.into_body().collect().await.unwrap().to_bytes()).unwrap();
        v["metadata"]["resourceVersion"].as_str().unwrap().to_string()
    };
    let mut out = Vec::new();
    for c in &cols {
        let big = c.path.ends_with("/nodes") || c.path.contains("ns-001");
        let mut queries: Vec<String> = vec![
            String::new(),
            "resourceVersion=0".into(),
            "limit=2".into(),
            "limit=2&resourceVersion=0".into(),
            "limit=-1".into(),
            format!("resourceVersion={rv}&resourceVersionMatch=NotOlderThan"),
            format!("resourceVersion={rv}&resourceVersionMatch=Exact&limit=3"),
            format!("resourceVersion={rv}&limit=3"),
        ];
        queries.extend(c.labels.iter().map(|l| format!("labelSelector={l}")));
        queries.extend(c.field.iter().map(|f| format!("fieldSelector={f}")));
        if big {
            // The whole of a big collection once per encoding is enough.
            queries.retain(|q| !q.is_empty() && q != "resourceVersion=0" && q != "limit=-1" && !q.contains("NotOlderThan"));
            queries.push("limit=50".into());
        }
        let accepts: &[&str] =
            if c.builtin { &[JSON, PB, PB_FIRST, TABLE, META_LIST, META_LIST_PB] } else { &[JSON, PB_FIRST, PB, TABLE, META_LIST] };
        for q in &queries {
            for a in accepts {
                let sep = if q.is_empty() { "" } else { "?" };
                out.push(Case::new(format!("{}{sep}{q}", c.path), a));
            }
        }
        // Pretty, for humans.
        if !big {
            out.push(Case::new(format!("{}?pretty=true", c.path), JSON));
            out.push(Case::new(c.path, JSON).with("user-agent", "curl/8.5.0"));
            out.push(Case::new(format!("{}?limit=abc", c.path), JSON).with("user-agent", "curl/8.5.0"));
            out.push(Case::new(format!("{}?limit=1", c.path), JSON).with("accept-encoding", "gzip"));
        } else {
            // Big enough for the apiserver to compress.
            out.push(Case::new(format!("{}?limit=500", c.path), JSON).with("accept-encoding", "gzip"));
        }
        if !c.name.is_empty() {
            let one = format!("{}/{}", c.path, c.name);
            for a in
                if c.builtin { [JSON, PB, PB_FIRST, TABLE, META, META_PB].as_slice() } else { [JSON, PB_FIRST, TABLE, META].as_slice() }
            {
                out.push(Case::new(one.clone(), a));
            }
            out.push(Case::new(format!("{one}?resourceVersion=0"), JSON));
            out.push(Case::new(format!("{}/does-not-exist", c.path), JSON));
            out.push(Case::new(format!("{}/does-not-exist", c.path), PB_FIRST));
        }
        // Watches that end: the initial state and nothing else.
        if !big {
            for a in if c.builtin { [JSON, "application/vnd.kubernetes.protobuf;stream=watch"].as_slice() } else { [JSON].as_slice() } {
                out.push(Case::new(format!("{}?watch=1&resourceVersion=0&timeoutSeconds=1", c.path), a));
            }
            out.push(Case::new(
                format!(
                    "{}?watch=yes&resourceVersion=0&timeoutSeconds=1&{}",
                    c.path,
                    c.field.map(|f| format!("fieldSelector={f}")).unwrap_or_default()
                ),
                JSON,
            ));
            out.push(Case::new(format!("{}?watch=1&resourceVersion=1&timeoutSeconds=1", c.path), JSON));
        }
    }
    // Bad parameters, on a cached kind.
    let cm = "/api/v1/namespaces/kache-fid-a/configmaps";
    for q in [
        "limit=abc",
        "limit=1.5",
        "limit=99999999999999999999",
        "resourceVersion=abc",
        "resourceVersion=-1",
        "timeoutSeconds=abc&watch=1",
        "continue=garbage",
        "continue=a%21b",
        "continue=e30",
        "resourceVersionMatch=Exact",
        "resourceVersionMatch=Bogus&resourceVersion=1",
        "resourceVersionMatch=Bogus",
        "resourceVersionMatch=Exact&resourceVersion=0",
        "resourceVersionMatch=NotOlderThan&continue=x",
        "sendInitialEvents=true",
        "watch=1&resourceVersionMatch=NotOlderThan",
        "watch=1&sendInitialEvents=true",
        "labelSelector=a%20in%20(",
        "labelSelector=a%3D%3D%3Db",
        "fieldSelector=spec.nope%3Dx",
        "fieldSelector=metadata.name",
        "resourceVersion=999999999999&resourceVersionMatch=NotOlderThan",
        "resourceVersion=1&resourceVersionMatch=Exact",
    ] {
        out.push(Case::new(format!("{cm}?{q}"), JSON));
        out.push(Case::new(format!("{cm}?{q}"), PB_FIRST));
    }
    // Continue tokens as Go's encoding/json reads them: its syntax errors, a negative RV
    // (the latest state), a repeated member (the last wins), a member of the wrong type.
    use base64::Engine;
    for json in [
        "no",
        "tru",
        "{\"a\":1,}",
        r#"{"v":"meta.k8s.io/v1","rv":-2,"start":"cm\u0000"}"#,
        r#"{"v":"meta.k8s.io/v1","rv":-1,"start":"a\u0000","start":"cm\u0000"}"#,
        r#"{"v":"meta.k8s.io/v1","rv":"5","start":"a"}"#,
        r#"{"V":"meta.k8s.io/v1","RV":-1,"Start":"cm\u0000"}"#,
    ] {
        let token = base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(json);
        out.push(Case::new(format!("{cm}?limit=2&continue={token}"), JSON));
    }
    out
}

/// Paging across the two: each side's first page, then each side's token sent to both.
async fn paging_cases(up: &Upstream, api: &crate::support::Api) -> Vec<Case> {
    let mut out = Vec::new();
    for path in
        ["/api/v1/namespaces/kache-fid-a/configmaps", "/apis/fid.example.com/v1/widgets", "/apis/fid.k8s.io/v1/gadgets", "/api/v1/nodes"]
    {
        let first = Case::new(format!("{path}?limit=2"), JSON);
        for body in [ask_upstream(up, &first).await.body, ask_kache(api, &first).await.body] {
            let v: Value = serde_json::from_slice(&body).unwrap();
            if let Some(c) = v["metadata"]["continue"].as_str().filter(|c| !c.is_empty()) {
                out.push(Case::new(format!("{path}?limit=2&continue={c}"), JSON));
                out.push(Case::new(format!("{path}?limit=2&continue={c}"), PB_FIRST));
            }
        }
    }
    out
}

/// Watches open on both sides from the same RV while objects are created, changed and
/// deleted: the same events, byte for byte. Returns (case, apiserver's answer, kache's).
async fn live_watches(up: &Upstream, api: &crate::support::Api) -> Vec<(Case, Answer, Answer)> {
    let ns = "kache-fid-a";
    let rv = {
        let r = up.get(&format!("/api/v1/namespaces/{ns}/configmaps?limit=1"), JSON).await.unwrap();
        let v: Value = serde_json::from_slice(&r.into_body().collect().await.unwrap().to_bytes()).unwrap();
        v["metadata"]["resourceVersion"].as_str().unwrap().to_string()
    };
    let cm = format!("/api/v1/namespaces/{ns}/configmaps");
    let widgets = format!("/apis/fid.example.com/v1/namespaces/{ns}/widgets");
    let cases = [
        Case::new(format!("{cm}?watch=1&resourceVersion={rv}&timeoutSeconds=15"), JSON),
        Case::new(format!("{cm}?watch=1&resourceVersion={rv}&timeoutSeconds=15"), "application/vnd.kubernetes.protobuf;stream=watch"),
        Case::new(format!("{cm}?watch=1&resourceVersion={rv}&timeoutSeconds=15&labelSelector=live%3Dyes"), JSON),
        Case::new(format!("{cm}?watch=1&resourceVersion={rv}&timeoutSeconds=15"), META),
        Case::new(format!("{widgets}?watch=1&resourceVersion={rv}&timeoutSeconds=15"), JSON),
    ];
    // Open every watch on both sides at once (their headers mean they have started; kache
    // may first wait for its cache to reach the RV), then write.
    let open_up = cases.iter().map(|c| async move {
        let headers: Vec<(&str, &str)> = c.headers.iter().map(|(k, v)| (*k, v.as_str())).collect();
        up.request(Method::GET, &c.path, &headers, Vec::new()).await.unwrap()
    });
    let open_kache = cases.iter().map(|c| {
        let mut b = Request::builder().method(Method::GET).uri(format!("{}{}", api.base, c.path));
        for (k, v) in &c.headers {
            b = b.header(*k, v);
        }
        let req = b.body(Full::new(Bytes::new())).unwrap();
        let client = api.client.clone();
        async move { client.request(req).await.unwrap() }
    });
    let (ups, kaches) = tokio::join!(futures_util::future::join_all(open_up), futures_util::future::join_all(open_kache));
    let mut streams = Vec::new();
    for (a, k) in ups.into_iter().zip(kaches) {
        let (ap, ab) = a.into_parts();
        let (kp, kb) = k.into_parts();
        streams.push((
            ap,
            tokio::spawn(async move { ab.collect().await.map(|b| b.to_bytes()).unwrap_or_else(|e| panic!("apiserver watch: {e}")) }),
            kp,
            tokio::spawn(async move { kb.collect().await.map(|b| b.to_bytes()).unwrap_or_else(|e| panic!("kache watch: {e}")) }),
        ));
    }
    let name = format!("live-{}", std::process::id());
    let body = |i: u32, live: &str| json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name, "labels": {"live": live}}, "data": {"i": i.to_string()}});
    let (s, v) = send_json(up, Method::POST, &cm, &body(0, "yes")).await;
    assert_eq!(s, 201, "{v}");
    send_json(up, Method::PUT, &format!("{cm}/{name}"), &body(1, "yes")).await;
    send_json(up, Method::PUT, &format!("{cm}/{name}"), &body(2, "no")).await;
    send_json(up, Method::PUT, &format!("{cm}/{name}"), &body(3, "yes")).await;
    send_json(up, Method::DELETE, &format!("{cm}/{name}"), &json!({})).await;
    let w = json!({"apiVersion": "fid.example.com/v1", "kind": "Widget", "metadata": {"name": name}, "spec": {"size": 9}});
    let (s, mut v) = send_json(up, Method::POST, &widgets, &w).await;
    assert_eq!(s, 201, "{v}");
    v["spec"]["size"] = json!(10);
    let (s, v) = send_json(up, Method::PUT, &format!("{widgets}/{name}"), &v).await;
    assert_eq!(s, 200, "{v}");
    send_json(up, Method::DELETE, &format!("{widgets}/{name}"), &json!({})).await;
    let mut out = Vec::new();
    for (c, (ap, ab, kp, kb)) in cases.into_iter().zip(streams) {
        let a = answer(ap, ab.await.unwrap());
        let k = answer(kp, kb.await.unwrap());
        out.push((c, a, k));
    }
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn real_differential_kache_answers_as_the_apiserver() {
    let Some(real) = real_upstream("real_differential") else { return };
    let up = real.upstream().await;
    objects(&up).await;
    let k = kache_over(up.clone(), &["--preload", "nodes,configmaps,widgets.fid.example.com,gadgets.fid.k8s.io"]).await;
    // Pods (30,000 in the populated apiserver) load on first use, in both encodings; wait
    // for them longer than the preload's minute.
    for accept in [JSON, PB] {
        ask_kache(&k.api, &Case::new("/api/v1/namespaces/kache-fid-a/pods?limit=1", accept)).await;
    }
    assert!(k.serving.serve.wait_synced(std::time::Duration::from_secs(600)).await, "the pod caches sync");
    let mut all = cases(&up).await;
    all.extend(paging_cases(&up, &k.api).await);
    let hits_before = k.serving.serve.cache_hits();
    let live = live_watches(&up, &k.api).await;
    let (mut equal, mut different, mut token_form, mut age_tick) = (0, Vec::new(), Vec::new(), Vec::new());
    for c in &all {
        let (ra, rk) = (ask_upstream(&up, c).await, ask_kache(&k.api, c).await);
        if normalise(ra.clone()) == normalise(rk.clone()) && normalise_keeping_slash(&ra) != normalise_keeping_slash(&rk) {
            token_form.push(c.describe());
        }
        let a = normalise(ra);
        let mut kk = normalise(rk);
        // A consistent read taken a moment later may be at a newer RV only; retry once if
        // the cluster moved between the two answers in a way normalisation cannot see.
        if a != kk {
            let a2 = normalise(ask_upstream(&up, c).await);
            if a2 == kk {
                equal += 1;
                continue;
            }
            kk = normalise(ask_kache(&k.api, c).await);
        }
        if a == kk {
            equal += 1;
            continue;
        }
        // A Table's Age cells count from the moment of each answer: the two answers may
        // straddle a tick of the printed age.
        if (a.status, &a.content_type, a.body.len()) == (kk.status, &kk.content_type, kk.body.len())
            && ageless(&a.body).is_some_and(|t| Some(t) == ageless(&kk.body))
        {
            equal += 1;
            age_tick.push(c.describe());
            continue;
        }
        let mut why = Vec::new();
        if a.status != kk.status {
            why.push(format!("status {} vs {}", a.status, kk.status));
        }
        if a.content_type != kk.content_type {
            why.push(format!("content-type {:?} vs {:?}", a.content_type, kk.content_type));
        }
        if a.encoding != kk.encoding {
            why.push(format!("content-encoding {:?} vs {:?}", a.encoding, kk.encoding));
        }
        if a.body != kk.body && a.encoding == kk.encoding {
            why.push(first_difference(&a.body, &kk.body));
        }
        different.push((c.describe(), why.join("; ")));
    }
    let events = |b: &[u8]| b.split(|c| *c == b'\n').filter(|l| !l.is_empty()).count();
    assert!(events(&live[0].1.body) >= 5, "the live watch saw the writes: {:?}", live[0].1);
    for (c, a, kk) in live {
        all.push(c.clone());
        let (a, kk) = (normalise(a), normalise(kk));
        if a == kk {
            equal += 1;
        } else {
            different.push((c.describe(), first_difference(&a.body, &kk.body)));
        }
    }
    let hits = k.serving.serve.cache_hits() - hits_before;
    eprintln!(
        "real_differential: {} cases, {equal} equal, {} different; {hits} of the kache answers came from its cache",
        all.len(),
        different.len()
    );
    eprintln!(
        "  of the equal, {} differ only in the continue token's start key form (/key from a cache, key from etcd):",
        token_form.len()
    );
    for case in &token_form {
        eprintln!("    {case}");
    }
    eprintln!("  of the equal, {} differ only in a Table's Age cells (the age ticked between the two answers):", age_tick.len());
    for case in &age_tick {
        eprintln!("    {case}");
    }
    let mut by_kind: BTreeMap<String, usize> = BTreeMap::new();
    for (case, why) in &different {
        eprintln!("  DIFFERENT {case}\n      {why}");
        *by_kind.entry(why.split(';').next().unwrap_or("").chars().take(40).collect()).or_default() += 1;
    }
    for (why, n) in by_kind {
        eprintln!("  {n:4} x {why}");
    }
    assert!(different.is_empty(), "{} of {} cases differ (listed above)", different.len(), all.len());
}
