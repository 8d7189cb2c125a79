//! The read path against answers captured from a real kube-apiserver v1.36.2
//! (`testdata/fidelity`, `tools/capture_fidelity.py`): a cache built from a captured LIST's
//! items (stored as the informer stores them: the upstream's item bytes) at the capture's
//! resourceVersion answers byte for byte as the apiserver did. Custom resources (a CRD in
//! `fid.example.com`, and a cluster-scoped one in `fid.k8s.io`) keep `apiVersion`/`kind` on
//! their items and write their lists with keys in byte order.

use super::watching;
use crate::api::media::{Format, View};
use crate::api::query::Options;
use crate::api::resource::Resource;
use crate::cache::object::Object;
use crate::cache::{KindCache, Limits};
use crate::serve::handler::table::Include;
use crate::serve::handler::{get, list, watch};
use crate::testdata::{capture, Capture};
use http_body_util::BodyExt;
use serde_json::value::RawValue;
use std::sync::Arc;

/// A custom resource (JSON only) of `group`/v1.
pub(super) fn custom(group: &str, plural: &str, kind: &str, namespaced: bool) -> Arc<Resource> {
    Arc::new(Resource {
        group: group.into(),
        version: "v1".into(),
        plural: plural.into(),
        singular: kind.to_lowercase(),
        kind: kind.into(),
        namespaced,
        protobuf: false,
        short_names: vec![],
        categories: vec![],
        fields: Arc::from([]),
        index: None,
    })
}

fn widgets() -> Arc<Resource> {
    custom("fid.example.com", "widgets", "Widget", true)
}

fn gadgets() -> Arc<Resource> {
    custom("fid.k8s.io", "gadgets", "Gadget", false)
}

fn configmaps() -> Arc<Resource> {
    Arc::new(crate::sim::catalog::resource("configmaps"))
}

/// The list RV a captured LIST reports.
fn list_rv(c: &Capture) -> u64 {
    let v: serde_json::Value = serde_json::from_slice(&c.body).unwrap();
    v["metadata"]["resourceVersion"].as_str().unwrap().parse().unwrap()
}

/// A cache of `res` holding the items of the captured LIST `from`, at `rv`.
fn cache_of(res: Arc<Resource>, from: &str, rv: u64) -> Arc<KindCache> {
    #[derive(serde::Deserialize)]
    struct List<'a> {
        #[serde(borrow)]
        items: Vec<&'a RawValue>,
    }
    let c = capture(from);
    let l: List<'_> = serde_json::from_slice(&c.body).unwrap();
    let objects: Vec<Object> = l
        .items
        .iter()
        .map(|raw| {
            let v: serde_json::Value = serde_json::from_str(raw.get()).unwrap();
            Object::new(&res, &v, Some(raw.get().as_bytes()), None).unwrap()
        })
        .collect();
    let cache = Arc::new(KindCache::new(res, rv, Limits::default()));
    cache.replace(objects, rv);
    cache
}

async fn text(resp: http::Response<crate::body::Body>) -> String {
    String::from_utf8(resp.into_body().collect().await.unwrap().to_bytes().to_vec()).unwrap()
}

/// kache's LIST of `res` (all of whose objects are in capture `from`) for the request of
/// capture `name`, in the namespace its path names.
async fn list_as(res: Arc<Resource>, from: &str, name: &str) -> (String, String) {
    let c = capture(name);
    let cache = cache_of(res, from, list_rv(&c));
    let ns = c.path.split("/namespaces/").nth(1).and_then(|r| r.split('/').next()).map(str::to_string);
    let opts = Options::parse(c.query()).unwrap();
    let got = text(list(&cache, ns.as_deref(), &opts, Format::Json, View::Object).await.unwrap()).await;
    (got, c.text().to_string())
}

#[tokio::test]
async fn custom_resource_lists_keep_type_meta_on_items_as_the_apiserver_does() {
    for name in ["cr-list-widgets", "cr-list-widgets-limit2", "cr-list-widgets-all", "cr-list-widgets-empty"] {
        let (got, want) = list_as(widgets(), "cr-list-widgets-all", name).await;
        assert_eq!(got, want, "{name}");
    }
    for name in ["cr-list-gadgets", "cr-list-gadgets-limit1"] {
        let (got, want) = list_as(gadgets(), "cr-list-gadgets", name).await;
        assert_eq!(got, want, "{name}");
    }
}

#[tokio::test]
async fn a_custom_resource_get_is_its_stored_object() {
    let c = capture("cr-get-widget");
    let cache = cache_of(widgets(), "cr-list-widgets-all", 1);
    let got = text(get(&cache, Some("kache-fid-a"), "w1", Format::Json, View::Object, Include::Metadata).unwrap()).await;
    assert_eq!(got, c.text());
}

#[tokio::test(start_paused = true)]
async fn a_custom_resource_watch_sends_its_stored_object() {
    let c = capture("cr-watch-widget-rv0");
    let cache = cache_of(widgets(), "cr-list-widgets-all", 1);
    let opts = Options::parse(c.query()).unwrap();
    let resp = watch(cache, watching(Some("kache-fid-a"), opts, Format::Json, View::Object), None).await.unwrap();
    assert_eq!(text(resp).await, c.text());
}

#[tokio::test]
async fn limit_minus_one_lists_everything() {
    let (got, want) = list_as(configmaps(), "cm-list", "cm-list-limit-minus1").await;
    assert_eq!(got, want);
    assert_eq!(want, capture("cm-list").text(), "the apiserver's answer is the unlimited list");
}

#[tokio::test]
async fn pretty_answers_are_the_compact_ones_indented() {
    // `?pretty=true` / `pretty=1` answers of the apiserver, against kache's compact answer
    // indented (the serve layer indents what the handlers write).
    let pretty = |s: String| String::from_utf8(crate::api::json::indent(s.as_bytes())).unwrap();
    let (got, want) = list_as(widgets(), "cr-list-widgets-all", "pretty-cr-list").await;
    assert_eq!(pretty(got), want);
    let (got, want) = list_as(configmaps(), "cm-list", "pretty-list-1").await;
    assert_eq!(pretty(got), want);
}

#[test]
fn a_custom_resources_status_follows_the_first_accept_range() {
    // The apiserver answers a missing custom resource asked for as "protobuf, json" with a
    // protobuf Status: the read path encodes its Status by the Accept header's first range.
    let c = capture("cr-get-missing-pb-first");
    let accept = c.headers.iter().find(|(k, _)| k == "Accept").map(|(_, v)| v.clone()).unwrap();
    let mut headers = http::HeaderMap::new();
    headers.insert(http::header::ACCEPT, accept.parse().unwrap());
    assert!(crate::api::media::wants_protobuf(&headers));
    assert_eq!((c.code, c.content_type.as_str()), (404, "application/vnd.kubernetes.protobuf"));
    assert_eq!(crate::api::status::Status::not_found("fid.example.com", "widgets", "does-not-exist").encode(true), c.body);
}
