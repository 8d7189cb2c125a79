//! `as=Table` responses the read path does not give: `includeObject=Object`, and kinds kache
//! has no printer for (a Name and Age column), for GET, LIST and WATCH (each watch event's
//! object a one-row Table with the column definitions only in the first event, as the
//! apiserver does). Printed kinds use the same printers and column definitions as the read
//! path (`api::table`; for a custom resource, its CRD's columns kept with its objects). Rows
//! carry what `includeObject` asks for, as the apiserver's do: the object's metadata as
//! PartialObjectMetadata (the default), the whole object, or nothing. A LIST takes the same
//! resourceVersion, selector and `limit`/`continue` path as any other LIST.

use crate::api::media::Format;
use crate::api::query::Options;
use crate::api::route::ResourcePath;
use crate::api::status::Status;
use crate::api::table::{human_duration, TablePrinter};
use crate::body::RequestBody;
use crate::body::{self, Body};
use crate::cache::KindCache;
use crate::serve::handler::table::now;
use crate::serve::handler::table::Include;
use crate::serve::handler::{self, WatchSettings};
use crate::serve::respond;
use bytes::{BufMut, Bytes};
use http::{Request, Response, StatusCode};
use http_body_util::BodyExt;
use serde_json::{json, Value};
use std::sync::Arc;

/// Which columns a kind's table has: a printer's, or Name and Age.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Columns {
    Printed(TablePrinter),
    Plain,
}

impl Columns {
    fn of(cache: &KindCache) -> Columns {
        cache.snapshot().printer(&cache.resource.group, &cache.resource.plural).map_or(Columns::Plain, Columns::Printed)
    }

    /// The `columnDefinitions` (JSON).
    fn definitions(&self) -> Vec<u8> {
        match self {
            Columns::Printed(p) => p.columns().to_vec(),
            Columns::Plain => {
                let col =
                    |name: &str, format: &str| json!({"name": name, "type": "string", "format": format, "description": "", "priority": 0});
                crate::api::json::to_vec(&json!([col("Name", "name"), col("Age", "")]))
            }
        }
    }
}

/// What a row's `object` holds (`includeObject`): what the read path serves
/// ([`Include`], metadata by default), or the whole object, which the simulator also serves.
#[derive(Debug, Clone)]
enum Embed {
    Part(Include),
    /// The whole object, with its `kind` and `apiVersion`.
    Object {
        kind: String,
        api_version: String,
    },
}

impl Embed {
    fn of(include: Option<&str>, r: &crate::api::resource::Resource) -> Embed {
        match include {
            Some("Object") => Embed::Object { kind: r.kind.clone(), api_version: r.api_version() },
            other => Embed::Part(Include::parse(other).unwrap_or(Include::Metadata)),
        }
    }

    fn object(&self, v: &Value) -> Value {
        match self {
            Embed::Part(Include::Metadata) => {
                let meta = v.get("metadata").cloned().unwrap_or(Value::Null);
                json!({"kind": "PartialObjectMetadata", "apiVersion": "meta.k8s.io/v1", "metadata": meta})
            }
            Embed::Object { kind, api_version } => {
                let mut o = v.clone();
                if let Some(m) = o.as_object_mut() {
                    m.entry("kind").or_insert_with(|| Value::String(kind.clone()));
                    m.entry("apiVersion").or_insert_with(|| Value::String(api_version.clone()));
                }
                o
            }
            Embed::Part(Include::None) => Value::Null,
        }
    }
}

/// One row (JSON): the cells (and a printer's row conditions) and the object as `embed`
/// says. A printer's cells are written as its template renders them, not re-encoded, so
/// numbers keep Go's form (`0.000001234`, `1e+21`).
fn row(v: &Value, cols: &Columns, embed: &Embed) -> Vec<u8> {
    let meta = v.get("metadata").cloned().unwrap_or(Value::Null);
    let mut out = b"{\"cells\":".to_vec();
    match cols {
        // The template renders what follows `"cells":` in a row, conditions included.
        Columns::Printed(p) => out.extend_from_slice(&p.cells(v).render(now())),
        Columns::Plain => {
            let age =
                crate::api::table::time(&meta["creationTimestamp"]).map_or("<unknown>".into(), |t| human_duration(now() - t as f64 / 1e6));
            out.extend_from_slice(&crate::api::json::to_vec(&json!([meta["name"].clone(), age])));
        }
    }
    out.extend_from_slice(b",\"object\":");
    out.extend_from_slice(&crate::api::json::to_vec(&embed.object(v)));
    out.push(b'}');
    out
}

/// A Table of `rows` with list metadata `meta` and `columns` (JSON; `null` after a watch's
/// first event).
fn table(meta: Value, columns: &[u8], rows: Vec<Vec<u8>>) -> Vec<u8> {
    let mut out = b"{\"kind\":\"Table\",\"apiVersion\":\"meta.k8s.io/v1\",\"metadata\":".to_vec();
    out.extend_from_slice(&crate::api::json::to_vec(&meta));
    out.extend_from_slice(b",\"columnDefinitions\":");
    out.extend_from_slice(columns);
    out.extend_from_slice(b",\"rows\":[");
    out.extend_from_slice(&rows.join(&b','));
    out.extend_from_slice(b"]}");
    out
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
    let embed = Embed::of(opts.include_object.as_deref(), r);
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
            table(json!({"resourceVersion": o.rv.to_string()}), &cols.definitions(), vec![row(&decode(o)?, &cols, &embed)])
        }
        None if opts.watch => {
            let req = handler::WatchRequest {
                namespace: p.namespace.clone(),
                opts,
                fmt: Format::Json,
                view: crate::api::media::View::Object,
                settings,
            };
            let events = handler::watch(cache.clone(), req, None).await?;
            return Ok(watch_tables(events, cols, embed));
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
            let rows = page.items.iter().map(|o| decode(o).map(|v| row(&v, &cols, &embed))).collect::<Result<Vec<_>, _>>()?;
            table(meta, &cols.definitions(), rows)
        }
    };
    out.push(b'\n');
    Ok(respond::respond(StatusCode::OK, "application/json", body::full(out)))
}

/// Turn a JSON watch stream into a stream of one-row Tables (ERROR and BOOKMARK events pass
/// unchanged). Only the first Table carries column definitions: kubectl reuses them.
fn watch_tables(events: Response<Body>, cols: Columns, embed: Embed) -> Response<Body> {
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
                        let columns = if first { cols.definitions() } else { b"null".to_vec() };
                        first = false;
                        let t =
                            table(json!({"resourceVersion": obj["metadata"]["resourceVersion"]}), &columns, vec![row(obj, &cols, &embed)]);
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
        let golden: Value = serde_json::from_slice(&crate::testdata::golden("11b-get-pod-as-table.json.body")).unwrap();
        let pod: Value = serde_json::from_slice(&crate::testdata::golden("01-get-pod.json.body")).unwrap();
        let names = |cols: &Value| cols.as_array().unwrap().iter().map(|c| (c["name"].clone(), c["priority"].clone())).collect::<Vec<_>>();
        let pods = Columns::Printed(TablePrinter::Builtin(crate::api::table::Printer::Pod));
        assert_eq!(names(&serde_json::from_slice(&pods.definitions()).unwrap()), names(&golden["columnDefinitions"]));
        let r: Value = serde_json::from_slice(&row(&pod, &pods, &Embed::Part(Include::Metadata))).unwrap();
        let cells = r["cells"].as_array().unwrap();
        let want = golden["rows"][0]["cells"].as_array().unwrap();
        for i in [0, 1, 2, 3, 5, 6, 7, 8] {
            assert_eq!(cells[i], want[i], "cell {i}");
        }
        assert_eq!(r["object"]["metadata"], golden["rows"][0]["object"]["metadata"]);
    }
}
