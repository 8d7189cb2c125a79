//! The metadata and Table views of the read path, checked against captures from a real
//! kube-apiserver (`testdata/golden`): a pod cache built from the golden namespace's LIST
//! answers as the apiserver answered for the same objects at the same versions.

use super::watching;
use crate::api::media::{Format, View};
use crate::api::query::Options;
use crate::api::wire;
use crate::cache::object::{item_json, Object};
use crate::cache::{KindCache, Limits};
use crate::serve::handler::table::Include;
use crate::serve::handler::{get, list, watch};
use http_body_util::BodyExt;
use serde_json::Value;
use std::sync::Arc;

fn golden(name: &str) -> Vec<u8> {
    crate::testdata::golden(name)
}

fn pods() -> Arc<crate::api::resource::Resource> {
    Arc::new(crate::sim::catalog::resource("pods"))
}

/// The RV the metadata and Table captures (11*) report for their lists.
const LIST_RV: u64 = 61527;

/// The golden namespace's pods (three, as 02a listed them) in both encodings.
fn cache() -> Arc<KindCache> {
    let res = pods();
    let json: Value = serde_json::from_slice(&golden("02a-list-pods.json.body")).unwrap();
    let objects = build(&res, &json, Some(&golden("02a-list-pods.pb.body")));
    let cache = Arc::new(KindCache::new(res, LIST_RV, Limits::default()));
    cache.replace(objects, LIST_RV);
    cache
}

/// The golden namespace's ConfigMaps (04a), in JSON.
fn configmaps() -> Arc<KindCache> {
    let res = Arc::new(crate::sim::catalog::resource("configmaps"));
    let json: Value = serde_json::from_slice(&golden("04a-list-configmaps.json.body")).unwrap();
    let objects = build(&res, &json, None);
    let cache = Arc::new(KindCache::new(res, LIST_RV, Limits::default()));
    cache.replace(objects, LIST_RV);
    cache
}

fn build(res: &crate::api::resource::Resource, json: &Value, pb: Option<&[u8]>) -> Vec<Object> {
    let items = json["items"].as_array().unwrap();
    let bare = pb.map(pb_items).unwrap_or_default();
    items.iter().enumerate().map(|(i, v)| Object::new(res, v, Some(&item_json(v)), bare.get(i).map(Vec::as_slice)).unwrap()).collect()
}

/// The bare item messages of a protobuf list envelope.
fn pb_items(body: &[u8]) -> Vec<Vec<u8>> {
    let unknown = &body[4..];
    let mut pos = 0;
    let mut raw = None;
    while let Some((field, _, range)) = wire::next_field(unknown, &mut pos) {
        if field == 2 {
            raw = Some(&unknown[range]);
        }
    }
    let raw = raw.expect("raw");
    let mut pos = 0;
    let mut out = Vec::new();
    while let Some((field, _, range)) = wire::next_field(raw, &mut pos) {
        if field == 2 {
            out.push(raw[range].to_vec());
        }
    }
    out
}

async fn body(resp: http::Response<crate::body::Body>) -> Vec<u8> {
    resp.into_body().collect().await.unwrap().to_bytes().to_vec()
}

const METADATA: View = View::Metadata { list: false, beta: false };
const METADATA_LIST: View = View::Metadata { list: true, beta: false };

#[tokio::test]
async fn metadata_lists_equal_the_apiservers_in_json_and_protobuf() {
    let c = cache();
    let opts = Options::default();
    let json = body(list(&c, Some("golden"), &opts, Format::Json, METADATA_LIST).await.unwrap()).await;
    assert_eq!(
        String::from_utf8(json).unwrap(),
        String::from_utf8(golden("11e-list-pods-as-partialobjectmetadatalist.json.body")).unwrap()
    );
    let pb = body(list(&c, Some("golden"), &opts, Format::Protobuf, METADATA_LIST).await.unwrap()).await;
    assert_eq!(pb, golden("11e-list-pods-as-partialobjectmetadatalist.pb.body"));
}

#[tokio::test]
async fn an_empty_metadata_list_has_null_items_as_the_apiserver_writes_it() {
    let c = cache();
    let opts = Options::parse(Some("labelSelector=app%3Dnone")).unwrap();
    let json = body(list(&c, Some("golden"), &opts, Format::Json, METADATA_LIST).await.unwrap()).await;
    assert_eq!(json, b"{\"kind\":\"PartialObjectMetadataList\",\"apiVersion\":\"meta.k8s.io/v1\",\"metadata\":{\"resourceVersion\":\"61527\"},\"items\":null}\n");
    let beta = body(list(&c, Some("golden"), &opts, Format::Json, View::Metadata { list: true, beta: true }).await.unwrap()).await;
    assert!(beta.starts_with(b"{\"kind\":\"PartialObjectMetadataList\",\"apiVersion\":\"meta.k8s.io/v1beta1\""));
}

#[tokio::test]
async fn metadata_gets_equal_the_apiservers() {
    let c = cache();
    let json = body(get(&c, Some("golden"), "web-1", Format::Json, METADATA, Include::Metadata).unwrap()).await;
    assert_eq!(String::from_utf8(json).unwrap(), String::from_utf8(golden("11f-get-pod-as-partialobjectmetadata.json.body")).unwrap());
    // No protobuf capture of a metadata GET: it is the list item's message in the envelope.
    let pb = body(get(&c, Some("golden"), "web-1", Format::Protobuf, METADATA, Include::Metadata).unwrap()).await;
    let listed = pb_items(&golden("11e-list-pods-as-partialobjectmetadatalist.pb.body"));
    let mut want = wire::envelope_prefix("meta.k8s.io/v1", "PartialObjectMetadata", listed[1].len());
    want.extend_from_slice(&listed[1]);
    want.extend_from_slice(wire::UNKNOWN_SUFFIX);
    assert_eq!(pb, want);
}

#[tokio::test(start_paused = true)]
async fn metadata_watches_equal_the_apiservers() {
    let c = cache();
    let opts = Options::parse(Some("watch=1&resourceVersion=0&timeoutSeconds=1")).unwrap();
    let resp = watch(c.clone(), watching(Some("golden"), opts, Format::Json, METADATA), None).await.unwrap();
    let got = body(resp).await;
    assert_eq!(
        String::from_utf8(got).unwrap(),
        String::from_utf8(golden("11g-watch-pods-rv0-as-partialobjectmetadata.json.body")).unwrap()
    );
}

/// What a real kube-apiserver v1.36.2 sent for a metadata WatchList that selects nothing
/// (`?watch=1&sendInitialEvents=true&resourceVersionMatch=NotOlderThan&allowWatchBookmarks=true`
/// with `labelSelector=app=nope`) at RV 65778: only the initial-events-end bookmark.
const WATCHLIST_END_PB: &str = "0000007b0a08424f4f4b4d41524b126f0a6d6b3873000a270a0e6d6574612e6b38732e696f2f7631121550617274\
69616c4f626a6563744d65746164617461123a0a380a0012001a0022002a00320536353737383800420062210a196b38732e696f2f696e697469616c2d\
6576656e74732d656e64120474727565";
const WATCHLIST_END_JSON: &str = "{\"type\":\"BOOKMARK\",\"object\":{\"kind\":\"PartialObjectMetadata\",\"apiVersion\":\"meta.k8s.io/v1\",\"metadata\":{\"resourceVersion\":\"65778\",\"annotations\":{\"k8s.io/initial-events-end\":\"true\"}}}}\n";

#[tokio::test(start_paused = true)]
async fn a_metadata_watchlist_ends_with_the_apiservers_bookmark() {
    let res = pods();
    let c = Arc::new(KindCache::new(res, 65778, Limits::default()));
    let q = "watch=1&sendInitialEvents=true&resourceVersionMatch=NotOlderThan&allowWatchBookmarks=true&labelSelector=app%3Dnope&timeoutSeconds=1";
    let run = |fmt| {
        let c = c.clone();
        async move { body(watch(c, watching(Some("ns-001"), Options::parse(Some(q)).unwrap(), fmt, METADATA), None).await.unwrap()).await }
    };
    assert_eq!(String::from_utf8(run(Format::Json).await).unwrap(), WATCHLIST_END_JSON);
    let mut want =
        (0..WATCHLIST_END_PB.len()).step_by(2).map(|i| u8::from_str_radix(&WATCHLIST_END_PB[i..i + 2], 16).unwrap()).collect::<Vec<u8>>();
    want.extend_from_slice(wire::UNKNOWN_SUFFIX);
    assert_eq!(run(Format::Protobuf).await, want);
}

/// A Table with its Age cells (the column named Age) blanked: they count from the moment
/// of the answer.
fn ageless(body: &[u8]) -> Value {
    let mut t: Value = serde_json::from_slice(body).unwrap();
    let age = t["columnDefinitions"].as_array().unwrap().iter().position(|c| c["name"] == "Age").expect("an Age column");
    for row in t["rows"].as_array_mut().unwrap() {
        row["cells"][age] = Value::from("AGE");
    }
    t
}

const TABLE: View = View::Table { beta: false };

#[tokio::test]
async fn pod_and_configmap_tables_equal_the_apiservers() {
    let c = cache();
    let got = body(list(&c, Some("golden"), &Options::default(), Format::Json, TABLE).await.unwrap()).await;
    assert_eq!(ageless(&got), ageless(&golden("11a-list-pods-as-table.json.body")));
    let got = body(get(&c, Some("golden"), "web-1", Format::Json, TABLE, Include::Metadata).unwrap()).await;
    assert_eq!(ageless(&got), ageless(&golden("11b-get-pod-as-table.json.body")));
    let cms = configmaps();
    let got = body(list(&cms, Some("golden"), &Options::default(), Format::Json, TABLE).await.unwrap()).await;
    assert_eq!(ageless(&got), ageless(&golden("11c-list-configmaps-as-table.json.body")));
    // Byte for byte apart from the ages: the same bytes once they are put back.
    let want = golden("11c-list-configmaps-as-table.json.body");
    let got = String::from_utf8(got).unwrap();
    // The cell with its delimiters: the bare age ("4d") may also occur inside a uid.
    let cell = format!(",\"{}\"]", age_cell(&got));
    let aged = ["80s", "80s", "79s"].iter().fold(got.clone(), |s, a| s.replacen(&cell, &format!(",\"{a}\"]"), 1));
    assert_eq!(aged, String::from_utf8(want).unwrap());
}

/// The first Age cell of a ConfigMap Table (`,"<age>"]`).
fn age_cell(t: &str) -> String {
    let at = t.find(",\"object\"").unwrap();
    let cells = &t[..at];
    let start = cells.rfind(",\"").unwrap() + 2;
    let end = cells.rfind('"').unwrap();
    cells[start..end].to_string()
}

#[tokio::test]
async fn table_rows_carry_nothing_with_include_object_none_and_v1beta1_says_so() {
    let c = cache();
    let opts = Options::parse(Some("includeObject=None&limit=1")).unwrap();
    let got: Value =
        serde_json::from_slice(&body(list(&c, Some("golden"), &opts, Format::Json, View::Table { beta: true }).await.unwrap()).await)
            .unwrap();
    assert_eq!(got["apiVersion"], "meta.k8s.io/v1beta1");
    assert_eq!(got["rows"].as_array().unwrap().len(), 1);
    assert_eq!(got["rows"][0]["object"], Value::Null);
    assert_eq!(got["metadata"]["remainingItemCount"], 2);
    assert!(got["metadata"]["continue"].is_string());
}

/// A capture of `tools/capture_table_watch.sh` (`testdata/table-watch`).
fn captured(name: &str) -> Vec<Value> {
    let bytes = crate::testdata::table_watch(name);
    bytes.split(|b| *b == b'\n').filter(|l| !l.is_empty()).map(|l| serde_json::from_slice(l).unwrap()).collect()
}

/// Watch Table events with their relative times blanked: the Age cell (its column found in
/// the first event's definitions) and the "(... ago)" of a restart count.
fn timeless(events: &[Value]) -> Vec<Value> {
    let cols = events.first().and_then(|e| e["object"]["columnDefinitions"].as_array()).expect("columns in the first event");
    let age = cols.iter().position(|c| c["name"] == "Age").expect("an Age column");
    let mut out = events.to_vec();
    for e in &mut out {
        for row in e["object"]["rows"].as_array_mut().expect("rows") {
            row["cells"][age] = Value::from("AGE");
            for cell in row["cells"].as_array_mut().unwrap() {
                if let Some(s) = cell.as_str().filter(|s| s.ends_with(" ago)")) {
                    *cell = Value::from(format!("{} (T ago)", s.split(' ').next().unwrap()));
                }
            }
        }
    }
    out
}

#[tokio::test(start_paused = true)]
async fn table_watches_equal_the_apiservers() {
    for plural in ["configmaps", "pods"] {
        let res = Arc::new(crate::sim::catalog::resource(plural));
        let objects = captured(&format!("{plural}.objects.json"));
        let rv = |v: &Value| v["metadata"]["resourceVersion"].as_str().unwrap().parse::<u64>().unwrap();
        let from = rv(&objects[0]["object"]) - 1;
        for (file, query) in [("table", "&allowWatchBookmarks=true"), ("table-none", "&includeObject=None")] {
            let want = captured(&format!("{plural}.{file}.json"));
            let cache = Arc::new(KindCache::new(res.clone(), from, Limits::default()));
            for ev in &objects {
                let v = &ev["object"];
                let kind = match ev["type"].as_str().unwrap() {
                    "ADDED" => crate::cache::window::EventType::Added,
                    "MODIFIED" => crate::cache::window::EventType::Modified,
                    _ => crate::cache::window::EventType::Deleted,
                };
                cache.apply(kind, Object::new(&res, v, Some(&item_json(v)), None).unwrap());
            }
            // The upstream's progress when the apiserver sent its bookmark.
            if let Some(b) = want.iter().find(|e| e["type"] == "BOOKMARK") {
                cache.advance(rv(&b["object"]), true);
            }
            let ns = objects[0]["object"]["metadata"]["namespace"].as_str().unwrap().to_string();
            let q = format!("watch=true&resourceVersion={from}&timeoutSeconds=8{query}");
            let resp =
                watch(cache.clone(), watching(Some(&ns), Options::parse(Some(&q)).unwrap(), Format::Json, TABLE), None).await.unwrap();
            let got: Vec<Value> =
                body(resp).await.split(|b| *b == b'\n').filter(|l| !l.is_empty()).map(|l| serde_json::from_slice(l).unwrap()).collect();
            assert_eq!(timeless(&got), timeless(&want), "{plural} {file}");
        }
    }
}
