//! `as=Table` responses for kubectl's default human-readable output: a Name and Age column
//! for every kind, the apiserver's pod columns (Ready/Status/Restarts/Age, and IP/Node/
//! Nominated Node/Readiness Gates for `-o wide`) and a Data column for ConfigMaps. Rows carry
//! the object's metadata as PartialObjectMetadata, as the apiserver's do. A LIST takes the same
//! resourceVersion, selector and `limit`/`continue` path as any other LIST; a WATCH
//! (`kubectl get -w`) sends each event's object as a one-row Table, with the column
//! definitions only in the first event, as the apiserver does.

use crate::api::status::Status;
use crate::api::table::Printer;
use crate::cache::KindCache;
use crate::serve::body::RequestBody;
use crate::serve::body::{self, Body};
use crate::serve::handler::{self, WatchSettings};
use crate::serve::query::{Format, Options};
use crate::serve::route::ResourcePath;
use bytes::{BufMut, Bytes};
use http::{Request, Response, StatusCode};
use http_body_util::BodyExt;
use serde_json::{json, Map, Value};
use std::sync::Arc;

/// Which columns a kind's table has.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Columns {
    Pod,
    ConfigMap,
    Plain,
}

impl Columns {
    fn of(cache: &KindCache) -> Columns {
        let r = &cache.resource;
        match (r.group.as_str(), r.kind.as_str()) {
            ("", "Pod") => Columns::Pod,
            ("", "ConfigMap") => Columns::ConfigMap,
            _ => Columns::Plain,
        }
    }

    fn definitions(self) -> Value {
        let col = |name: &str, format: &str, priority: u8| json!({"name": name, "type": "string", "format": format, "description": "", "priority": priority});
        match self {
            Columns::Pod => json!([
                col("Name", "name", 0),
                col("Ready", "", 0),
                col("Status", "", 0),
                col("Restarts", "", 0),
                col("Age", "", 0),
                col("IP", "", 1),
                col("Node", "", 1),
                col("Nominated Node", "", 1),
                col("Readiness Gates", "", 1),
            ]),
            Columns::ConfigMap => json!([col("Name", "name", 0), col("Data", "", 0), col("Age", "", 0)]),
            Columns::Plain => json!([col("Name", "name", 0), col("Age", "", 0)]),
        }
    }
}

fn age(created: &str) -> String {
    let parsed = crate::api::time::parse_rfc3339(created);
    let now = crate::api::time::unix_now();
    match parsed {
        Some(t) if now >= t => {
            let s = now - t;
            if s < 120 {
                format!("{s}s")
            } else if s < 7200 {
                format!("{}m", s / 60)
            } else if s < 172_800 {
                format!("{}h", s / 3600)
            } else {
                format!("{}d", s / 86_400)
            }
        }
        _ => "<unknown>".into(),
    }
}

/// `<none>` for an empty or missing string, as kubectl's printers write it.
fn or_none(v: &Value) -> String {
    v.as_str().filter(|s| !s.is_empty()).unwrap_or("<none>").to_string()
}

/// One row: the cells and the object's metadata.
fn row(v: &Value, cols: Columns) -> Value {
    let meta = v.get("metadata").cloned().unwrap_or(Value::Null);
    let name = meta["name"].clone();
    let age = age(meta["creationTimestamp"].as_str().unwrap_or(""));
    let cells = match cols {
        Columns::Pod => {
            let statuses = v["status"]["containerStatuses"].as_array().cloned().unwrap_or_default();
            let ready = statuses.iter().filter(|c| c["ready"] == true).count();
            let total = v["spec"]["containers"].as_array().map_or(0, Vec::len);
            let restarts: i64 = statuses.iter().filter_map(|c| c["restartCount"].as_i64()).sum();
            let gates = match v["spec"]["readinessGates"].as_array() {
                Some(g) if !g.is_empty() => {
                    let conds = v["status"]["conditions"].as_array().cloned().unwrap_or_default();
                    let met =
                        g.iter().filter(|gate| conds.iter().any(|c| c["type"] == gate["conditionType"] && c["status"] == "True")).count();
                    format!("{met}/{}", g.len())
                }
                _ => "<none>".into(),
            };
            json!([
                name,
                format!("{ready}/{total}"),
                v["status"]["phase"],
                restarts.to_string(),
                age,
                or_none(&v["status"]["podIP"]),
                or_none(&v["spec"]["nodeName"]),
                or_none(&v["status"]["nominatedNodeName"]),
                gates,
            ])
        }
        Columns::ConfigMap => {
            let n = |k: &str| v[k].as_object().map_or(0, Map::len);
            json!([name, n("data") + n("binaryData"), age])
        }
        Columns::Plain => json!([name, age]),
    };
    json!({"cells": cells, "object": {"kind": "PartialObjectMetadata", "apiVersion": "meta.k8s.io/v1", "metadata": meta}})
}

fn table(meta: Value, columns: Value, rows: Vec<Value>) -> Vec<u8> {
    let t = json!({"kind": "Table", "apiVersion": "meta.k8s.io/v1", "metadata": meta, "columnDefinitions": columns, "rows": rows});
    crate::api::json::to_vec(&t)
}

/// Answer a GET, LIST or WATCH asked for as a Table.
pub(super) async fn respond<B: RequestBody>(
    cache: &Arc<KindCache>,
    req: &Request<B>,
    p: &ResourcePath,
    settings: WatchSettings,
) -> Result<Response<Body>, Status> {
    let r = &cache.resource;
    let cols = Columns::of(cache);
    let opts = Options::parse(req.uri().query())?;
    let ns = p.namespace.as_deref();
    let decode = |o: &crate::cache::object::Object| -> Result<Value, Status> {
        let j = o.json_item().ok_or_else(|| Status::internal("object has no JSON form"))?;
        serde_json::from_slice(&j).map_err(|e| Status::internal(e.to_string()))
    };
    let mut out = match &p.name {
        Some(name) => {
            let snap = cache.snapshot();
            let o =
                snap.get(&crate::cache::object::key(ns.unwrap_or(""), name)).ok_or_else(|| Status::not_found(&r.group, &r.plural, name))?;
            table(json!({"resourceVersion": o.rv.to_string()}), cols.definitions(), vec![row(&decode(o)?, cols)])
        }
        None if opts.watch => {
            let events =
                handler::watch(cache.clone(), p.namespace.clone(), opts, Format::Json, crate::serve::query::View::Object, settings).await?;
            return Ok(watch_tables(events, cols, Printer::of(&r.group, &r.plural)));
        }
        None => {
            let page = handler::page(cache, ns, &opts).await?;
            let mut meta = json!({"resourceVersion": page.rv.to_string()});
            if let Some(c) = page.cont {
                meta["continue"] = Value::String(c);
            }
            if let Some(n) = page.remaining {
                meta["remainingItemCount"] = Value::from(n);
            }
            let rows = page.items.iter().map(|o| decode(o).map(|v| row(&v, cols))).collect::<Result<Vec<_>, _>>()?;
            table(meta, cols.definitions(), rows)
        }
    };
    out.push(b'\n');
    Ok(body::respond(StatusCode::OK, "application/json", body::full(out)))
}

/// Turn a JSON watch stream into a stream of one-row Tables (ERROR and BOOKMARK events pass
/// unchanged). Only the first Table carries column definitions: kubectl reuses them.
fn watch_tables(events: Response<Body>, cols: Columns, printer: Option<Printer>) -> Response<Body> {
    let (parts, mut events) = events.into_parts();
    let (tx, rx) = tokio::sync::mpsc::channel::<Bytes>(64);
    tokio::spawn(async move {
        let (mut buf, mut first) = (Vec::new(), true);
        loop {
            // Dropping `events` when the client goes away ends the watcher behind it.
            let frame = tokio::select! {
                f = events.frame() => f,
                _ = tx.closed() => return,
            };
            let Some(Ok(frame)) = frame else { return };
            let Ok(data) = frame.into_data() else { continue };
            buf.put(data);
            while let Some(i) = buf.iter().position(|b| *b == b'\n') {
                let line: Vec<u8> = buf.drain(..=i).collect();
                let out = match serde_json::from_slice::<Value>(&line) {
                    Ok(ev) if matches!(ev["type"].as_str(), Some("ADDED" | "MODIFIED" | "DELETED")) => {
                        let obj = &ev["object"];
                        // Kinds kache prints get the apiserver's columns and cells, as their
                        // LISTs do (kubectl prints a new header when the columns change).
                        let (defs, row) = match printer {
                            Some(p) => {
                                let cells: Value = serde_json::from_slice(&p.cells(obj).render(crate::serve::handler::table::now()))
                                    .unwrap_or(Value::Null);
                                let meta =
                                    json!({"kind": "PartialObjectMetadata", "apiVersion": "meta.k8s.io/v1", "metadata": obj["metadata"]});
                                (serde_json::from_slice(p.columns()).unwrap_or(Value::Null), json!({"cells": cells, "object": meta}))
                            }
                            None => (cols.definitions(), row(obj, cols)),
                        };
                        let columns = if first { defs } else { Value::Null };
                        first = false;
                        let t = table(json!({"resourceVersion": obj["metadata"]["resourceVersion"]}), columns, vec![row]);
                        let mut line = format!("{{\"type\":{},\"object\":", ev["type"]).into_bytes();
                        line.extend_from_slice(&t);
                        line.extend_from_slice(b"}\n");
                        line
                    }
                    _ => line,
                };
                if tx.send(Bytes::from(out)).await.is_err() {
                    return;
                }
            }
        }
    });
    Response::from_parts(parts, body::channel(rx))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pod_rows_have_the_apiservers_columns() {
        let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/../shared/golden");
        let golden: Value = serde_json::from_slice(&std::fs::read(format!("{dir}/11b-get-pod-as-table.json.body")).unwrap()).unwrap();
        let pod: Value = serde_json::from_slice(&std::fs::read(format!("{dir}/01-get-pod.json.body")).unwrap()).unwrap();
        let names = |cols: &Value| cols.as_array().unwrap().iter().map(|c| (c["name"].clone(), c["priority"].clone())).collect::<Vec<_>>();
        assert_eq!(names(&Columns::Pod.definitions()), names(&golden["columnDefinitions"]));
        let r = row(&pod, Columns::Pod);
        let cells = r["cells"].as_array().unwrap();
        let want = golden["rows"][0]["cells"].as_array().unwrap();
        for i in [0, 1, 2, 3, 5, 6, 7, 8] {
            assert_eq!(cells[i], want[i], "cell {i}");
        }
        assert_eq!(r["object"]["metadata"], golden["rows"][0]["object"]["metadata"]);
    }
}
