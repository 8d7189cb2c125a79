//! Custom resources' Tables (their CRD's printer columns) and metadata views, checked
//! against what a real kube-apiserver v1.36.2 answered for the same objects
//! (`testdata/crd`, captured by `tools/capture_crd_fixtures.sh`).

use super::watching;
use crate::api::media::{Format, View};
use crate::api::query::Options;
use crate::api::resource::Resource;
use crate::api::table::CustomColumns;
use crate::cache::object::{item_json, Object};
use crate::cache::window::EventType;
use crate::cache::{KindCache, Limits};
use crate::serve::handler::table::Include;
use crate::serve::handler::{get, list, watch};
use crate::testdata::{crd_golden as golden, timeless};
use http_body_util::BodyExt;
use serde_json::Value;
use std::sync::Arc;

fn json(name: &str) -> Value {
    serde_json::from_slice(&golden(name)).unwrap()
}

/// When a capture was answered (its Date header), in unix seconds, plus half a second: the
/// apiserver printed its relative times within that second.
fn answered(name: &str) -> f64 {
    let headers = String::from_utf8(golden(&format!("{name}.headers"))).unwrap();
    let date = headers.lines().find_map(|l| l.strip_prefix("date: ").or_else(|| l.strip_prefix("Date: "))).expect("a Date header");
    // "Wed, 25 Nov 2026 08:34:04 GMT"
    let p: Vec<&str> = date.split_whitespace().collect();
    let months = ["Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"];
    let month = months.iter().position(|m| *m == p[2]).unwrap() + 1;
    let rfc = format!("{}-{month:02}-{:0>2}T{}Z", p[3], p[1], p[4]);
    crate::api::time::parse_timestamp(&rfc).unwrap().0 as f64 + 0.5
}

fn resource(plural: &str, kind: &str, namespaced: bool) -> Arc<Resource> {
    super::fidelity::custom("crd.example.com", plural, kind, namespaced)
}

fn columns(plural: &str) -> Arc<CustomColumns> {
    Arc::new(CustomColumns::of_crd(&json(&format!("crd-{plural}.json")), "v1").unwrap())
}

/// A cache of the captured objects of `plural`, printed with their CRD's columns.
fn cache(plural: &str, kind: &str, namespaced: bool) -> Arc<KindCache> {
    let res = resource(plural, kind, namespaced);
    let list = json(&format!("{plural}.objects.json"));
    let rv: u64 = list["metadata"]["resourceVersion"].as_str().unwrap().parse().unwrap();
    let custom = columns(plural);
    let objects =
        list["items"].as_array().unwrap().iter().map(|v| Object::printed(&res, v, Some(&item_json(v)), None, Some(&custom)).unwrap());
    let cache = Arc::new(KindCache::new(res.clone(), rv, Limits::default()));
    cache.replace_printed(objects.collect::<Vec<_>>(), rv, Some(custom));
    cache
}

async fn body(resp: http::Response<crate::body::Body>) -> String {
    String::from_utf8(resp.into_body().collect().await.unwrap().to_bytes().to_vec()).unwrap()
}

const TABLE: View = View::Table { beta: false };

#[test]
fn column_definitions_are_the_apiservers_bytes() {
    for plural in ["widgets", "plains"] {
        let t = String::from_utf8(golden(&format!("{plural}.table.json"))).unwrap();
        let start = t.find("\"columnDefinitions\":").unwrap() + "\"columnDefinitions\":".len();
        let end = t.find(",\"rows\":").unwrap();
        assert_eq!(String::from_utf8_lossy(columns(plural).definitions()), &t[start..end], "{plural}");
    }
}

#[test]
fn cells_are_the_apiservers_bytes_at_the_time_it_answered() {
    for plural in ["widgets", "plains"] {
        let name = format!("{plural}.table");
        let t = String::from_utf8(golden(&format!("{name}.json"))).unwrap();
        let objects = json(&format!("{plural}.objects.json"));
        let custom = columns(plural);
        let now = answered(&name);
        let rows: Vec<&str> = t.split("{\"cells\":").skip(1).map(|r| &r[..r.find(",\"object\":").unwrap()]).collect();
        let items = objects["items"].as_array().unwrap();
        assert_eq!(rows.len(), items.len(), "{plural}");
        for (row, v) in rows.iter().zip(items) {
            let got = custom.cells(v).render(now);
            assert_eq!(String::from_utf8(got).unwrap(), *row, "{plural} {}", v["metadata"]["name"]);
        }
    }
}

#[tokio::test]
async fn tables_equal_the_apiservers_for_list_get_and_include_object_none() {
    let w = cache("widgets", "Widget", true);
    let ns = Some("kache-crd-1");
    let got = body(list(&w, ns, &Options::default(), Format::Json, TABLE).await.unwrap()).await;
    assert_eq!(timeless(&got), timeless(&String::from_utf8(golden("widgets.table.json")).unwrap()));
    let none = Options::parse(Some("includeObject=None")).unwrap();
    let got = body(list(&w, ns, &none, Format::Json, TABLE).await.unwrap()).await;
    assert_eq!(timeless(&got), timeless(&String::from_utf8(golden("widgets.table-none.json")).unwrap()));
    let got = body(get(&w, ns, "w1", Format::Json, TABLE, Include::Metadata).unwrap()).await;
    assert_eq!(timeless(&got), timeless(&String::from_utf8(golden("widgets.table-w1.json")).unwrap()));
    let p = cache("plains", "Plain", false);
    let sel = Options::parse(Some("labelSelector=kache-crd%3D1")).unwrap();
    let got = body(list(&p, None, &sel, Format::Json, TABLE).await.unwrap()).await;
    assert_eq!(timeless(&got), timeless(&String::from_utf8(golden("plains.table.json")).unwrap()));
}

const METADATA: View = View::Metadata { list: false, beta: false };
const METADATA_LIST: View = View::Metadata { list: true, beta: false };

#[tokio::test]
async fn metadata_views_equal_the_apiservers_byte_for_byte() {
    let w = cache("widgets", "Widget", true);
    let ns = Some("kache-crd-1");
    let got = body(list(&w, ns, &Options::default(), Format::Json, METADATA_LIST).await.unwrap()).await;
    assert_eq!(got, String::from_utf8(golden("widgets.metadata.json")).unwrap());
    let got = body(get(&w, ns, "w1", Format::Json, METADATA, Include::Metadata).unwrap()).await;
    assert_eq!(got, String::from_utf8(golden("widgets.metadata-w1.json")).unwrap());
    let p = cache("plains", "Plain", false);
    let sel = Options::parse(Some("labelSelector=kache-crd%3D1")).unwrap();
    let got = body(list(&p, None, &sel, Format::Json, METADATA_LIST).await.unwrap()).await;
    assert_eq!(got, String::from_utf8(golden("plains.metadata.json")).unwrap());
}

#[tokio::test(start_paused = true)]
async fn watches_of_tables_and_metadata_equal_the_apiservers() {
    let res = resource("widgets", "Widget", true);
    let custom = columns("widgets");
    let events: Vec<Value> =
        golden("watch.objects.json").split(|b| *b == b'\n').filter(|l| !l.is_empty()).map(|l| serde_json::from_slice(l).unwrap()).collect();
    assert_eq!(events.len(), 3, "a Widget created, changed and deleted");
    let from = json("widgets.objects.json")["metadata"]["resourceVersion"].as_str().unwrap().parse::<u64>().unwrap();
    for (file, query, view) in
        [("watch.table.json", "", TABLE), ("watch.table-none.json", "&includeObject=None", TABLE), ("watch.metadata.json", "", METADATA)]
    {
        let cache = Arc::new(KindCache::new(res.clone(), from, Limits::default()));
        cache.replace_printed(Vec::new(), from, Some(custom.clone()));
        for ev in &events {
            let v = &ev["object"];
            let kind = match ev["type"].as_str().unwrap() {
                "ADDED" => EventType::Added,
                "MODIFIED" => EventType::Modified,
                _ => EventType::Deleted,
            };
            cache.apply(kind, Object::printed(&res, v, Some(&item_json(v)), None, Some(&custom)).unwrap());
        }
        let q = format!("watch=true&resourceVersion={from}&timeoutSeconds=6{query}");
        let resp = watch(cache, watching(Some("kache-crd-1"), Options::parse(Some(&q)).unwrap(), Format::Json, view), None).await.unwrap();
        let got = body(resp).await;
        assert_eq!(timeless(&got), timeless(&String::from_utf8(golden(file)).unwrap()), "{file}");
    }
}

#[test]
fn relative_times_are_what_is_left_out() {
    assert_eq!(timeless(r#"["w1","5d","2m17s","3","s","\u003cunknown\u003e",1]"#), r#"["w1","T","T","3","s","\u003cunknown\u003e",1]"#);
}

#[tokio::test(start_paused = true)]
async fn a_table_watchlist_ends_with_the_apiservers_bookmark_row() {
    let want = String::from_utf8(golden("watchlist-end.plains.table.json")).unwrap();
    let v: Value = serde_json::from_str(&want).unwrap();
    let rv: u64 = v["object"]["metadata"]["resourceVersion"].as_str().unwrap().parse().unwrap();
    let cache = Arc::new(KindCache::new(resource("plains", "Plain", false), rv, Limits::default()));
    cache.replace_printed(Vec::new(), rv, Some(columns("plains")));
    let q =
        "watch=1&sendInitialEvents=true&resourceVersionMatch=NotOlderThan&allowWatchBookmarks=true&timeoutSeconds=2&labelSelector=nope%3D1";
    let got = body(watch(cache, watching(None, Options::parse(Some(q)).unwrap(), Format::Json, TABLE), None).await.unwrap()).await;
    assert_eq!(got, want);
}

#[tokio::test]
async fn a_terminating_custom_resources_metadata_is_the_apiservers() {
    let res = resource("widgets", "Widget", true);
    let v = json("terminating.object.json");
    assert!(v["metadata"]["deletionTimestamp"].is_string() && v["metadata"]["ownerReferences"].as_array().unwrap().len() == 2);
    let rv: u64 = v["metadata"]["resourceVersion"].as_str().unwrap().parse().unwrap();
    let cache = Arc::new(KindCache::new(res.clone(), rv, Limits::default()));
    cache.replace_printed(vec![Object::printed(&res, &v, Some(&item_json(&v)), None, None).unwrap()], rv, None);
    let got = body(get(&cache, Some("kache-crd-1"), "w-terminating", Format::Json, METADATA, Include::Metadata).unwrap()).await;
    assert_eq!(got, String::from_utf8(golden("terminating.metadata.json")).unwrap());
}

/// A CRD of `n` printer columns, each of type `string` at `path`.
fn many_columns(n: usize, path: &str) -> Arc<CustomColumns> {
    let cols: Vec<Value> = (0..n).map(|i| serde_json::json!({"name": format!("c{i}"), "type": "string", "jsonPath": path})).collect();
    let crd = serde_json::json!({"spec": {"versions": [{"name": "v1", "additionalPrinterColumns": cols}]}});
    Arc::new(CustomColumns::of_crd(&crd, "v1").unwrap())
}

/// A custom object of about `size` bytes of spec.
fn big(name: &str, rv: u64, size: usize) -> Value {
    serde_json::json!({"apiVersion": "crd.example.com/v1", "kind": "Plain",
        "metadata": {"name": name, "resourceVersion": rv.to_string(), "creationTimestamp": "2026-01-01T00:00:00Z"},
        "spec": {"blob": "x".repeat(size)}})
}

#[tokio::test]
async fn a_dot_column_prints_null_as_the_apiserver_does_not_the_whole_object() {
    // 300 columns of `.` over objects of 100 KB would print each object 300 times; the
    // apiserver's convertor reads `.` as the field "" and prints null.
    let res = resource("plains", "Plain", false);
    let custom = many_columns(300, ".");
    let v = big("p1", 5, 100_000);
    let o = Object::printed(&res, &v, Some(&item_json(&v)), None, Some(&custom)).unwrap();
    let cells = String::from_utf8(o.cells().expect("printed").render(0.0)).unwrap();
    assert_eq!(cells, format!("[\"p1\"{}]", ",null".repeat(300)));
}

#[tokio::test(start_paused = true)]
async fn cells_over_the_bound_are_withheld_and_the_kinds_tables_are_the_upstreams_while_held() {
    let res = resource("plains", "Plain", false);
    // 20 columns each printing the 4 KB spec: about 80 KB of cells for one object.
    let custom = many_columns(20, ".spec");
    let printed = |v: &Value| Object::printed(&res, v, Some(&item_json(v)), None, Some(&custom)).unwrap();
    let cache = Arc::new(KindCache::new(res.clone(), 5, Limits::default()));
    cache.replace_printed(vec![printed(&big("small", 5, 10))], 5, Some(custom.clone()));
    assert!(cache.snapshot().prints(&res.group, &res.plural));
    let q = Options::parse(Some("watch=1&resourceVersion=5&timeoutSeconds=30")).unwrap();
    let resp = watch(cache.clone(), watching(None, q, Format::Json, TABLE), None).await.unwrap();

    cache.apply(EventType::Added, printed(&big("huge", 6, 4_000)));
    let snap = cache.snapshot();
    assert_eq!(snap.unprinted, 1);
    assert!(!snap.prints(&res.group, &res.plural), "Tables pass through while it is held");
    let huge = snap.get(&crate::cache::object::key("", "huge")).unwrap();
    assert!(huge.unprinted() && huge.cells().is_none(), "no cells kept");
    assert!(snap.get(&crate::cache::object::key("", "small")).unwrap().cells().is_some());
    // A watch that meets it ends (its client resumes against the upstream) at once.
    let started = tokio::time::Instant::now();
    assert_eq!(body(resp).await, "", "nothing sent for it, and not skipped silently");
    assert_eq!(started.elapsed(), std::time::Duration::ZERO);

    cache.apply(EventType::Deleted, printed(&big("huge", 7, 4_000)));
    let snap = cache.snapshot();
    assert_eq!(snap.unprinted, 0);
    assert!(snap.prints(&res.group, &res.plural), "printed from memory again once it is gone");
}
