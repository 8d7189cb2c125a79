//! The simulator's CRDs and its custom resources' Tables, checked against what a real
//! kube-apiserver v1.36.2 answered for a CRD with the same printer columns and the same
//! objects (`testdata/crd`), not against kache's own output: the simulator and kache share
//! the read path.

use super::*;
use crate::cache::Limits;
use crate::serve::handler::WatchSettings;
use crate::serve::server::Handler;
use crate::sim::catalog::{CRD_GROUP, CRD_PLURAL};
use crate::sim::synth::ClusterSpec;
use crate::sim::{Sim, SimAuth, SimConfig};
use crate::testdata::{crd_golden, timeless};
use bytes::Bytes;
use http::{Request, StatusCode};
use http_body_util::{BodyExt, Full};

const TABLE: &str = "application/json;as=Table;v=v1;g=meta.k8s.io";
const CRDS: &str = "/apis/apiextensions.k8s.io/v1/customresourcedefinitions";
/// The namespace of the captured widgets.
const WIDGETS: &str = "/apis/example.com/v1/namespaces/kache-crd-1/widgets";

fn sim() -> Sim {
    let cluster = ClusterSpec { nodes: 2, pods: 6, namespaces: 2, seed: 7, pod_bytes: None };
    let cfg = SimConfig { cluster, limits: Limits::default(), watch: WatchSettings::default(), advertise: "127.0.0.1:1".into() };
    Sim::new(cfg).expect("simulator builds")
}

fn golden(name: &str) -> Value {
    serde_json::from_slice(&crd_golden(name)).unwrap()
}

fn text(name: &str) -> String {
    String::from_utf8(crd_golden(name)).unwrap()
}

/// Send a request (with a bearer token, when given); the status and body.
async fn call(sim: &Arc<Sim>, method: &str, path: &str, accept: &str, token: Option<&str>, body: Option<&Value>) -> (StatusCode, String) {
    let mut req = Request::builder().method(method).uri(path).header("accept", accept).header("content-type", "application/json");
    if let Some(t) = token {
        req = req.header("authorization", format!("Bearer {t}"));
    }
    let body = body.map(|b| Bytes::from(b.to_string())).unwrap_or_default();
    let resp = sim.clone().handle(req.body(Full::new(body)).unwrap()).await;
    let status = resp.status();
    let bytes = resp.into_body().collect().await.expect("body").to_bytes();
    (status, String::from_utf8(bytes.to_vec()).expect("text"))
}

async fn get(sim: &Arc<Sim>, path: &str, accept: &str) -> String {
    let (code, body) = call(sim, "GET", path, accept, None, None).await;
    assert_eq!(code, StatusCode::OK, "{path}: {body}");
    body
}

/// Keys of a JSON object, in order.
fn keys(v: &Value) -> Vec<&str> {
    v.as_object().unwrap().keys().map(String::as_str).collect()
}

/// The captured widgets created in the simulator as their author wrote them (what the
/// apiserver sets dropped; `example.com` for `crd.example.com`), then their status.
async fn create_captured_widgets(sim: &Arc<Sim>) {
    for item in golden("widgets.objects.json")["items"].as_array().unwrap() {
        let mut meta = serde_json::Map::new();
        for k in ["name", "labels", "annotations", "finalizers"] {
            if let Some(v) = item["metadata"].get(k) {
                meta.insert(k.into(), v.clone());
            }
        }
        if let Some(a) = meta.get_mut("annotations").and_then(Value::as_object_mut) {
            a.remove("kubectl.kubernetes.io/last-applied-configuration");
        }
        let w = json!({"apiVersion": "example.com/v1", "kind": "Widget", "metadata": meta, "spec": item["spec"], "status": item["status"]});
        let (code, body) = call(sim, "POST", WIDGETS, "application/json", None, Some(&w)).await;
        assert_eq!(code, StatusCode::CREATED, "{body}");
        // Widgets have a status subresource: their status is written there.
        let mut created: Value = serde_json::from_str(&body).unwrap();
        created["status"] = item["status"].clone();
        let path = format!("{WIDGETS}/{}/status", item["metadata"]["name"].as_str().unwrap());
        let (code, body) = call(sim, "PUT", &path, "application/json", None, Some(&created)).await;
        assert_eq!(code, StatusCode::OK, "{body}");
    }
}

/// The `columnDefinitions` of a Table's JSON, as written.
fn column_bytes(table: &str) -> &str {
    let start = table.find("\"columnDefinitions\":").unwrap() + "\"columnDefinitions\":".len();
    &table[start..table[start..].find(",\"rows\":").unwrap() + start]
}

/// Each row's cells of a Table's JSON, as written, relative times left out.
fn cell_bytes(table: &str) -> Vec<String> {
    table.split("{\"cells\":").skip(1).map(|r| timeless(&r[..r.find(",\"object\":").unwrap()])).collect()
}

#[tokio::test]
async fn the_widgets_crd_is_shaped_as_the_apiserver_returns_one() {
    let sim = Arc::new(sim());
    let real = golden("crd-widgets.json");
    let ours: Value = serde_json::from_str(&get(&sim, &format!("{CRDS}/widgets.example.com"), "application/json").await).unwrap();
    assert_eq!(keys(&ours), keys(&real));
    assert_eq!((&ours["kind"], &ours["apiVersion"]), (&real["kind"], &real["apiVersion"]));
    // Metadata in the apiserver's order; no annotations or managedFields (no kubectl applied it).
    assert_eq!(keys(&ours["metadata"]), keys(&real["metadata"])[..5]);
    assert_eq!(ours["metadata"]["name"], "widgets.example.com");
    assert!(ours["metadata"]["resourceVersion"].as_str().is_some_and(|rv| rv.parse::<u64>().is_ok()));
    let (spec, want) = (&ours["spec"], &real["spec"]);
    assert_eq!(keys(spec), keys(want));
    assert_eq!(spec["group"], "example.com");
    assert_eq!((&spec["scope"], &spec["conversion"]), (&want["scope"], &want["conversion"]));
    // The names as the catalogue has them (the captured CRD's short name is its own).
    assert_eq!(keys(&spec["names"]), keys(&want["names"]));
    for k in ["plural", "singular", "kind", "listKind"] {
        assert_eq!(spec["names"][k], want["names"][k], "names.{k}");
    }
    assert_eq!(spec["names"]["shortNames"], json!(["wd"]));
    let (v, w) = (&spec["versions"][0], &want["versions"][0]);
    assert_eq!(spec["versions"].as_array().unwrap().len(), 1);
    // The simulator serves widgets/status, so its CRD says so, where Go's struct puts it.
    assert_eq!(keys(v), ["name", "served", "storage", "schema", "subresources", "additionalPrinterColumns"]);
    assert_eq!(keys(w), ["name", "served", "storage", "schema", "additionalPrinterColumns"]);
    assert_eq!(v["subresources"], json!({"status": {}}));
    for k in ["name", "served", "storage", "schema", "additionalPrinterColumns"] {
        assert_eq!(v[k], w[k], "versions[0].{k}");
    }
    let (status, want) = (&ours["status"], &real["status"]);
    assert_eq!(keys(status), keys(want));
    assert_eq!(status["acceptedNames"], spec["names"]);
    assert_eq!(status["storedVersions"], want["storedVersions"]);
    let conditions = |s: &Value| -> Vec<Value> {
        s["conditions"].as_array().unwrap().iter().map(|c| json!([keys(c), c["type"], c["status"], c["reason"], c["message"]])).collect()
    };
    assert_eq!(conditions(status), conditions(want));
}

#[tokio::test]
async fn crds_are_listed_whole_and_as_metadata_read_only_and_in_discovery() {
    let sim = Arc::new(sim());
    let list: Value = serde_json::from_str(&get(&sim, CRDS, "application/json").await).unwrap();
    assert_eq!((&list["kind"], &list["apiVersion"]), (&json!("CustomResourceDefinitionList"), &json!("apiextensions.k8s.io/v1")));
    let items = list["items"].as_array().unwrap();
    assert_eq!(items.len(), 1, "one CRD: widgets");
    assert!(items[0].get("kind").is_none() && items[0].get("apiVersion").is_none(), "a built-in kind's list items carry no type meta");
    // As kache's discovery lists them: names only.
    let accept = "application/json;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1,application/json";
    let meta: Value = serde_json::from_str(&get(&sim, CRDS, accept).await).unwrap();
    assert_eq!(meta["kind"], "PartialObjectMetadataList");
    assert_eq!(meta["items"][0]["metadata"]["name"], "widgets.example.com");
    assert!(meta["items"][0].get("spec").is_none());
    // A Table: the apiserver's default one for CRDs.
    let t: Value = serde_json::from_str(&get(&sim, CRDS, TABLE).await).unwrap();
    let names: Vec<&Value> = t["columnDefinitions"].as_array().unwrap().iter().map(|c| &c["name"]).collect();
    assert_eq!(names, [&json!("Name"), &json!("Created At")]);
    assert_eq!(t["rows"][0]["cells"], json!(["widgets.example.com", "2026-11-01T10:00:00Z"]));
    // JSON only (see catalog::serves_protobuf) and fixed.
    let (code, _) = call(&sim, "GET", CRDS, crate::api::wire::PROTOBUF, None, None).await;
    assert_eq!(code, StatusCode::NOT_ACCEPTABLE);
    let crd = items[0].clone();
    for (method, path) in
        [("POST", CRDS.to_string()), ("PUT", format!("{CRDS}/widgets.example.com")), ("DELETE", format!("{CRDS}/widgets.example.com"))]
    {
        let (code, body) = call(&sim, method, &path, "application/json", None, Some(&crd)).await;
        assert_eq!(code, StatusCode::METHOD_NOT_ALLOWED, "{method} {path}: {body}");
    }
    // Discovery: the group (as the apiserver lists it) and the resource, read only.
    let apis: Value = serde_json::from_slice(&crate::testdata::golden("12d-apis.json.body")).unwrap();
    let pick = |v: &Value| v["groups"].as_array().unwrap().iter().find(|g| g["name"] == CRD_GROUP).cloned().unwrap();
    let ours: Value = serde_json::from_str(&get(&sim, "/apis", "application/json").await).unwrap();
    assert_eq!(pick(&ours), pick(&apis));
    let ours: Value = serde_json::from_str(&get(&sim, "/apis/apiextensions.k8s.io/v1", "application/json").await).unwrap();
    assert_eq!(
        ours["resources"],
        json!([{"name": CRD_PLURAL, "singularName": "customresourcedefinition", "namespaced": false, "kind": "CustomResourceDefinition",
                "verbs": ["get", "list", "watch"], "shortNames": ["crd", "crds"], "categories": ["api-extensions"]}])
    );
}

#[tokio::test]
async fn widgets_tables_have_the_columns_and_cells_the_apiserver_printed() {
    let sim = Arc::new(sim());
    create_captured_widgets(&sim).await;
    // includeObject=None: the whole Table is the apiserver's but for its resourceVersion and
    // relative times.
    let ours = get(&sim, &format!("{WIDGETS}?includeObject=None"), TABLE).await;
    let real = text("widgets.table-none.json");
    let rv = |t: &str| serde_json::from_str::<Value>(t).unwrap()["metadata"]["resourceVersion"].as_str().unwrap().to_string();
    let ours = ours.replacen(&format!("\"resourceVersion\":\"{}\"", rv(&ours)), &format!("\"resourceVersion\":\"{}\"", rv(&real)), 1);
    assert_eq!(timeless(&ours), timeless(&real));
    // The object's metadata in rows (LIST and GET), and includeObject=Object (the
    // simulator's own Tables): the same columns and cells.
    let captured = text("widgets.table.json");
    for (path, want) in [
        (WIDGETS.to_string(), captured.clone()),
        (format!("{WIDGETS}?includeObject=Object"), captured.clone()),
        (format!("{WIDGETS}/w1"), text("widgets.table-w1.json")),
    ] {
        let ours = get(&sim, &path, TABLE).await;
        assert_eq!(column_bytes(&ours), column_bytes(&want), "{path}");
        assert_eq!(cell_bytes(&ours), cell_bytes(&want), "{path}");
    }
    let rows: Value = serde_json::from_str(&get(&sim, WIDGETS, TABLE).await).unwrap();
    let object = &rows["rows"][0]["object"];
    assert_eq!((&object["kind"], &object["metadata"]["name"]), (&json!("PartialObjectMetadata"), &json!("w1")));
}

#[tokio::test(start_paused = true)]
async fn a_watch_of_widgets_tables_carries_the_columns_in_its_first_event() {
    let sim = Arc::new(sim());
    create_captured_widgets(&sim).await;
    let events = get(&sim, &format!("{WIDGETS}?watch=1&resourceVersion=0&timeoutSeconds=1"), TABLE).await;
    let events: Vec<&str> = events.lines().collect();
    assert_eq!(events.len(), 5, "an ADDED event per widget");
    let real = text("watch.table.json");
    let first = real.lines().next().unwrap();
    assert_eq!(column_bytes(events[0]), column_bytes(first));
    assert!(events[1..].iter().all(|e| column_bytes(e) == "null"));
    let cells: Vec<String> = events.iter().flat_map(|e| cell_bytes(e)).collect();
    assert_eq!(cells, cell_bytes(&text("widgets.table.json")));
}

#[tokio::test]
async fn crds_are_authorized_by_the_simulators_rbac_like_any_resource() {
    let dir = tempfile::tempdir().unwrap();
    let users = dir.path().join("users.yaml");
    std::fs::write(&users, "tokens:\n  t-reader: {username: reader}\n  t-nobody: {username: nobody}\n").unwrap();
    let rbac = dir.path().join("rbac.json");
    let rule = r#"{"rules":[{"users":["reader"],"verbs":["get"],"apiGroups":["apiextensions.k8s.io"],"resources":["customresourcedefinitions"]}]}"#;
    std::fs::write(&rbac, rule).unwrap();
    let sim = Arc::new(sim().with_auth(SimAuth::load(Some(&users), Some(&rbac)).unwrap()));
    let one = format!("{CRDS}/widgets.example.com");
    for (token, path, want) in [
        ("t-reader", one.as_str(), StatusCode::OK),
        ("t-reader", CRDS, StatusCode::FORBIDDEN),
        ("t-nobody", one.as_str(), StatusCode::FORBIDDEN),
    ] {
        let (code, body) = call(&sim, "GET", path, "application/json", Some(token), None).await;
        assert_eq!(code, want, "{token} GET {path}: {body}");
    }
    let judged: Vec<(String, String, u16)> = sim
        .audit()
        .into_iter()
        .filter_map(|a| a.attributes.resource.map(|r| (format!("{}/{}", r.group, r.resource), a.attributes.verb, a.code)))
        .collect();
    let crds = format!("{CRD_GROUP}/{CRD_PLURAL}");
    assert_eq!(judged, [(crds.clone(), "get".into(), 200), (crds.clone(), "list".into(), 403), (crds, "get".into(), 403)]);
}
