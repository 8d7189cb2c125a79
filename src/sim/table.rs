//! `as=Table` responses for kubectl's default human-readable output: a Name and Age column
//! for every kind, plus Ready/Status/Restarts/Node for pods. Rows carry the object's
//! metadata as PartialObjectMetadata, as the apiserver's do.

use crate::body::{self, Body};
use crate::cache::KindCache;
use crate::object::Object;
use crate::query::Options;
use crate::route::ResourcePath;
use crate::selector::{FieldSource, LabelSource};
use crate::status::Status;
use http::{Request, Response, StatusCode};
use hyper::body::Incoming;
use serde_json::{json, Value};

fn columns(pod: bool) -> Value {
    let col = |name: &str, format: &str| json!({"name": name, "type": "string", "format": format, "description": "", "priority": 0});
    if pod {
        json!([col("Name", "name"), col("Ready", ""), col("Status", ""), col("Restarts", ""), col("Age", ""), {"name": "Node", "type": "string", "format": "", "description": "", "priority": 1}])
    } else {
        json!([col("Name", "name"), col("Age", "")])
    }
}

fn age(created: &str) -> String {
    let parsed = chrono_like_seconds(created);
    let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_secs() as i64).unwrap_or(0);
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

/// Seconds since the epoch of an RFC 3339 UTC timestamp (`2026-11-01T10:00:00Z`).
fn chrono_like_seconds(ts: &str) -> Option<i64> {
    let b = ts.as_bytes();
    if b.len() < 20 {
        return None;
    }
    let n = |r: std::ops::Range<usize>| ts.get(r)?.parse::<i64>().ok();
    let (y, m, d) = (n(0..4)?, n(5..7)?, n(8..10)?);
    let (hh, mm, ss) = (n(11..13)?, n(14..16)?, n(17..19)?);
    let (y2, m2) = if m <= 2 { (y - 1, m + 9) } else { (y, m - 3) };
    let era = y2.div_euclid(400);
    let yoe = y2 - era * 400;
    let doy = (153 * m2 + 2) / 5 + d - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    let days = era * 146_097 + doe - 719_468;
    Some(days * 86_400 + hh * 3600 + mm * 60 + ss)
}

fn row(o: &Object, pod: bool) -> Option<Value> {
    let v: Value = serde_json::from_slice(&o.json_item()?).ok()?;
    let meta = v.get("metadata").cloned().unwrap_or(Value::Null);
    let created = meta["creationTimestamp"].as_str().unwrap_or("");
    let cells = if pod {
        let statuses = v["status"]["containerStatuses"].as_array().cloned().unwrap_or_default();
        let ready = statuses.iter().filter(|c| c["ready"] == true).count();
        let total = v["spec"]["containers"].as_array().map_or(0, Vec::len);
        let restarts: i64 = statuses.iter().filter_map(|c| c["restartCount"].as_i64()).sum();
        json!([o.name, format!("{ready}/{total}"), v["status"]["phase"], restarts, age(created), v["spec"]["nodeName"]])
    } else {
        json!([o.name, age(created)])
    };
    Some(json!({"cells": cells, "object": {"kind": "PartialObjectMetadata", "apiVersion": "meta.k8s.io/v1", "metadata": meta}}))
}

/// Answer a GET or LIST asked for as a Table.
pub(super) fn respond(cache: &KindCache, req: &Request<Incoming>, p: &ResourcePath) -> Result<Response<Body>, Status> {
    let r = &cache.resource;
    let pod = r.kind == "Pod" && r.group.is_empty();
    let opts = Options::parse(req.uri().query())?;
    if opts.watch {
        return Err(Status::not_acceptable("application/json, application/vnd.kubernetes.protobuf"));
    }
    opts.fields.validate(&r.selectable_fields()).map_err(|e| Status::bad_request(e.to_string()))?;
    let (rv, snap) = cache.current();
    let ns = p.namespace.as_deref();
    let rows: Vec<Value> = match &p.name {
        Some(name) => {
            let o = snap.get(&crate::object::key(ns.unwrap_or(""), name)).ok_or_else(|| Status::not_found(&r.group, &r.plural, name))?;
            row(o, pod).into_iter().collect()
        }
        None => snap
            .range(ns, None)
            .filter(|o| ns.is_none_or(|n| *o.namespace == *n))
            .filter(|o| opts.labels.matches(&***o as &dyn LabelSource) && opts.fields.matches(&***o as &dyn FieldSource))
            .filter_map(|o| row(o, pod))
            .collect(),
    };
    let table = json!({"kind": "Table", "apiVersion": "meta.k8s.io/v1", "metadata": {"resourceVersion": rv.to_string()}, "columnDefinitions": columns(pod), "rows": rows});
    let mut out = crate::json::to_vec(&table);
    out.push(b'\n');
    Ok(body::respond(StatusCode::OK, "application/json", body::full(out)))
}
