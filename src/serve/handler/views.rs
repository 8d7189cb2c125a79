//! The metadata and Table views of the read path, checked against captures from a real
//! kube-apiserver (`../shared/golden`): a pod cache built from the golden namespace's LIST
//! answers as the apiserver answered for the same objects at the same versions.

use super::{get, list, watch, WatchSettings};
use crate::api::wire;
use crate::cache::object::{item_json, Object};
use crate::cache::{KindCache, Limits};
use crate::serve::query::{Format, Options, View};
use http_body_util::BodyExt;
use serde_json::Value;
use std::sync::Arc;

fn golden(name: &str) -> Vec<u8> {
    let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/../shared/golden");
    std::fs::read(format!("{dir}/{name}")).unwrap_or_else(|e| panic!("{name}: {e}"))
}

fn pods() -> Arc<crate::api::resource::Resource> {
    Arc::new(crate::sim::catalog::simulated().into_iter().find(|r| r.plural == "pods").expect("pods"))
}

/// The RV the metadata and Table captures (11*) report for their lists.
const LIST_RV: u64 = 61527;

/// The golden namespace's pods (three, as 02a listed them) in both encodings.
fn cache() -> Arc<KindCache> {
    let res = pods();
    let json: Value = serde_json::from_slice(&golden("02a-list-pods.json.body")).unwrap();
    let pb = golden("02a-list-pods.pb.body");
    let bare = pb_items(&pb);
    let items = json["items"].as_array().unwrap();
    assert_eq!(items.len(), bare.len());
    let objects: Vec<Object> = items.iter().zip(&bare).map(|(v, b)| Object::new(&res, v, Some(&item_json(v)), Some(b)).unwrap()).collect();
    let cache = Arc::new(KindCache::new(res, LIST_RV, Limits::default()));
    cache.replace(objects, LIST_RV);
    cache
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

async fn body(resp: http::Response<crate::serve::body::Body>) -> Vec<u8> {
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
    let json = body(get(&c, Some("golden"), "web-1", Format::Json, METADATA).unwrap()).await;
    assert_eq!(String::from_utf8(json).unwrap(), String::from_utf8(golden("11f-get-pod-as-partialobjectmetadata.json.body")).unwrap());
    // No protobuf capture of a metadata GET: it is the list item's message in the envelope.
    let pb = body(get(&c, Some("golden"), "web-1", Format::Protobuf, METADATA).unwrap()).await;
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
    let resp = watch(c.clone(), Some("golden".into()), opts, Format::Json, METADATA, WatchSettings::default()).await.unwrap();
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
        async move {
            body(watch(c, Some("ns-001".into()), Options::parse(Some(q)).unwrap(), fmt, METADATA, WatchSettings::default()).await.unwrap())
                .await
        }
    };
    assert_eq!(String::from_utf8(run(Format::Json).await).unwrap(), WATCHLIST_END_JSON);
    let mut want =
        (0..WATCHLIST_END_PB.len()).step_by(2).map(|i| u8::from_str_radix(&WATCHLIST_END_PB[i..i + 2], 16).unwrap()).collect::<Vec<u8>>();
    want.extend_from_slice(wire::UNKNOWN_SUFFIX);
    assert_eq!(run(Format::Protobuf).await, want);
}
