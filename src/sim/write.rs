//! The simulator's write path: create, update, patch (merge, strategic, JSON), delete,
//! deletecollection and the `/status` subresource, each under the global lock so every
//! change gets the next resourceVersion and conflicts are judged against the latest state.
//! Bodies are JSON, or protobuf for built-in kinds.

use super::{encode, encode_printed, object_response, patch, Sim};
use crate::api::media::Format;
use crate::api::query::Options;
use crate::api::route::ResourcePath;
use crate::api::status::{Details, Status};
use crate::api::transcode::{pb_to_json, MessageType};
use crate::api::wire::PROTOBUF;
use crate::body::RequestBody;
use crate::body::{self, Body};
use crate::cache::object;
use crate::cache::window::EventType;
use crate::cache::KindCache;
use crate::serve::respond::respond;
use crate::serve::respond::StatusResponse;
use http::{header, Request, Response, StatusCode};
use serde_json::{Map, Value};

/// Largest request body the simulator reads (the apiserver's limit is 3 MiB).
const MAX_BODY_BYTES: usize = 3 * 1024 * 1024;

async fn read_json<B: RequestBody>(req: Request<B>) -> Result<(Value, String), Status> {
    let ct = req.headers().get(header::CONTENT_TYPE).and_then(|v| v.to_str().ok()).unwrap_or("application/json").to_string();
    let media = ct.split(';').next().unwrap_or("").trim().to_ascii_lowercase();
    if !matches!(
        media.as_str(),
        "application/json"
            | "application/merge-patch+json"
            | "application/strategic-merge-patch+json"
            | "application/json-patch+json"
            | PROTOBUF
    ) {
        return Err(Status::unsupported_media_type(&ct));
    }
    let bytes = super::read_body(req, MAX_BODY_BYTES).await?;
    if media == PROTOBUF {
        return Ok((from_protobuf(&bytes, &ct)?, "application/json".into()));
    }
    let v =
        serde_json::from_slice(&bytes).map_err(|e| Status::bad_request(format!("the body of the request could not be decoded: {e}")))?;
    Ok((v, media))
}

/// A protobuf request body (client-go typed clients and kubectl's `create` send built-in
/// kinds this way): the `k8s\0` envelope opened and the object transcoded to JSON.
fn from_protobuf(body: &[u8], ct: &str) -> Result<Value, Status> {
    let undecodable = |e: String| Status::bad_request(format!("the body of the request could not be decoded: {e}"));
    let (api_version, kind, raw) =
        crate::api::wire::open_envelope(body).ok_or_else(|| undecodable("not a Kubernetes protobuf envelope".into()))?;
    let (group, version) = api_version.split_once('/').unwrap_or(("", api_version.as_str()));
    let ty = MessageType::for_kind(group, version, &kind).ok_or_else(|| Status::unsupported_media_type(ct))?;
    let mut v = pb_to_json(ty, raw).map_err(|e| undecodable(e.to_string()))?;
    if let Some(m) = v.as_object_mut() {
        m.insert("kind".into(), Value::String(kind));
        m.insert("apiVersion".into(), Value::String(api_version));
    }
    Ok(v)
}

/// Put `kind`, `apiVersion`, `metadata` first, as the apiserver writes objects.
fn ordered(r: &crate::api::resource::Resource, v: Value) -> Value {
    let Value::Object(mut m) = v else { return v };
    let mut out = Map::new();
    out.insert("kind".into(), Value::String(r.kind.clone()));
    out.insert("apiVersion".into(), Value::String(r.api_version()));
    m.remove("kind");
    m.remove("apiVersion");
    if let Some(meta) = m.remove("metadata") {
        out.insert("metadata".into(), order_meta(meta));
    }
    out.extend(m);
    Value::Object(out)
}

fn order_meta(meta: Value) -> Value {
    let Value::Object(mut m) = meta else { return meta };
    let mut out = Map::new();
    for k in [
        "name",
        "generateName",
        "namespace",
        "uid",
        "resourceVersion",
        "generation",
        "creationTimestamp",
        "deletionTimestamp",
        "labels",
        "annotations",
        "ownerReferences",
        "finalizers",
    ] {
        if let Some(v) = m.remove(k) {
            out.insert(k.into(), v);
        }
    }
    out.extend(m);
    Value::Object(out)
}

fn current(cache: &KindCache, ns: Option<&str>, name: &str) -> Result<Value, Status> {
    let r = &cache.resource;
    let snap = cache.snapshot();
    let o = snap.get(&object::key(ns.unwrap_or(""), name)).ok_or_else(|| Status::not_found(&r.group, &r.plural, name))?;
    let j = o.json_item().ok_or_else(|| Status::internal("object has no JSON form"))?;
    serde_json::from_slice(&j).map_err(|e| Status::internal(e.to_string()))
}

fn dry_run(query: Option<&str>) -> bool {
    form_urlencoded::parse(query.unwrap_or("").as_bytes()).any(|(k, v)| k == "dryRun" && v == "All")
}

/// Whether a DELETE is a dry run: `?dryRun=All`, or `dryRun: ["All"]` in the DeleteOptions
/// body, where kubectl (JSON) and client-go's typed clients (protobuf) put it.
pub(super) async fn delete_is_dry_run<B: RequestBody>(req: Request<B>) -> Result<bool, Status> {
    if dry_run(req.uri().query()) {
        return Ok(true);
    }
    let bytes = super::read_body(req, MAX_BODY_BYTES).await?;
    if bytes.is_empty() {
        return Ok(false);
    }
    if let Some((_, _, raw)) = crate::api::wire::open_envelope(&bytes) {
        // DeleteOptions field 5: repeated string dryRun.
        let mut pos = 0;
        while let Some((field, _, range)) = crate::api::wire::next_field(raw, &mut pos) {
            if field == 5 && &raw[range] == b"All" {
                return Ok(true);
            }
        }
        return Ok(false);
    }
    let v: Value =
        serde_json::from_slice(&bytes).map_err(|e| Status::bad_request(format!("the body of the request could not be decoded: {e}")))?;
    Ok(v["dryRun"].as_array().is_some_and(|d| d.iter().any(|x| x == "All")))
}

impl Sim {
    /// Store `v` as the next revision of an object and return the response.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn commit(
        &self,
        cache: &KindCache,
        rv: &mut u64,
        kind: EventType,
        mut v: Value,
        code: StatusCode,
        fmt: Format,
        dry: bool,
    ) -> Result<Response<Body>, Status> {
        let next = *rv + 1;
        v["metadata"]["resourceVersion"] = Value::String(next.to_string());
        let v = ordered(&cache.resource, v);
        let o = encode_printed(&cache.resource, &v, cache.snapshot().custom.as_ref())?;
        if !dry {
            *rv = next;
            let ev = cache.apply(kind, o);
            for c in self.caches.values() {
                c.advance(next, false);
            }
            return Ok(object_response(&cache.resource, &ev.object, code, fmt));
        }
        Ok(object_response(&cache.resource, &o, code, fmt))
    }

    pub(super) async fn create<B: RequestBody>(
        &self,
        cache: &KindCache,
        req: Request<B>,
        p: &ResourcePath,
        fmt: Format,
    ) -> Result<Response<Body>, Status> {
        let r = cache.resource.clone();
        let dry = dry_run(req.uri().query());
        let (mut v, _) = read_json(req).await?;
        if !v.is_object() {
            return Err(Status::bad_request("the body of the request must be an object"));
        }
        for (k, want) in [("kind", r.kind.clone()), ("apiVersion", r.api_version())] {
            if let Some(got) = v.get(k).and_then(Value::as_str).filter(|g| *g != want) {
                return Err(Status::bad_request(format!(
                    "the API version in the data ({got}) does not match the expected API version ({want})"
                )));
            }
        }
        let meta = v
            .get_mut("metadata")
            .and_then(Value::as_object_mut)
            .ok_or_else(|| Status::invalid(&r.kind, "", "metadata.name: Required value: name or generateName is required"))?;
        if let Some(ns) = &p.namespace {
            match meta.get("namespace").and_then(Value::as_str) {
                Some(given) if given != ns => {
                    return Err(Status::bad_request(
                        "the namespace of the provided object does not match the namespace sent on the request",
                    ))
                }
                _ => {
                    meta.insert("namespace".into(), Value::String(ns.clone()));
                }
            }
        }
        let name = match (meta.get("name").and_then(Value::as_str), meta.get("generateName").and_then(Value::as_str)) {
            (Some(n), _) if !n.is_empty() => n.to_string(),
            (_, Some(g)) if !g.is_empty() => format!("{g}{}", &uuid::Uuid::new_v4().simple().to_string()[..5]),
            _ => return Err(Status::invalid(&r.kind, "", "metadata.name: Required value: name or generateName is required")),
        };
        meta.insert("name".into(), Value::String(name.clone()));
        meta.insert("uid".into(), Value::String(uuid::Uuid::new_v4().to_string()));
        meta.insert("creationTimestamp".into(), Value::String(super::rbac::now_rfc3339()));
        if v.get("spec").is_some() {
            v["metadata"]["generation"] = Value::from(1);
        }
        let mut rv = self.rv.lock().unwrap_or_else(|e| e.into_inner());
        if cache.snapshot().get(&object::key(p.namespace.as_deref().unwrap_or(""), &name)).is_some() {
            return Err(Status::already_exists(&r.group, &r.plural, &name));
        }
        self.commit(cache, &mut rv, EventType::Added, v, StatusCode::CREATED, fmt, dry)
    }

    pub(super) async fn update<B: RequestBody>(
        &self,
        cache: &KindCache,
        req: Request<B>,
        p: &ResourcePath,
        fmt: Format,
    ) -> Result<Response<Body>, Status> {
        let dry = dry_run(req.uri().query());
        let (v, _) = read_json(req).await?;
        self.replace(cache, p, fmt, dry, |_cur| Ok(v))
    }

    pub(super) async fn patch<B: RequestBody>(
        &self,
        cache: &KindCache,
        req: Request<B>,
        p: &ResourcePath,
        fmt: Format,
    ) -> Result<Response<Body>, Status> {
        let dry = dry_run(req.uri().query());
        let (patch, media) = read_json(req).await?;
        // Custom resources have no strategic merge patch: kubectl sends them merge patches.
        let strategic = media == "application/strategic-merge-patch+json" && cache.resource.protobuf;
        self.replace(cache, p, fmt, dry, |cur| {
            let mut next = cur.clone();
            match media.as_str() {
                "application/json-patch+json" => patch::json_patch(&mut next, &patch)?,
                _ if strategic => patch::strategic_merge(&mut next, &patch),
                _ => patch::merge(&mut next, &patch),
            }
            Ok(next)
        })
    }

    /// Update an object to what `change` makes of its current state, with the apiserver's
    /// rules: a stale resourceVersion conflicts, identity fields are kept, the main resource
    /// keeps status and `/status` changes only status.
    fn replace(
        &self,
        cache: &KindCache,
        p: &ResourcePath,
        fmt: Format,
        dry: bool,
        change: impl FnOnce(&Value) -> Result<Value, Status>,
    ) -> Result<Response<Body>, Status> {
        let r = cache.resource.clone();
        let name = p.name.as_deref().unwrap_or("");
        let mut rv = self.rv.lock().unwrap_or_else(|e| e.into_inner());
        let cur = current(cache, p.namespace.as_deref(), name)?;
        let mut next = change(&cur)?;
        if next.get("metadata").and_then(|m| m.get("name")).and_then(Value::as_str).is_some_and(|n| n != name) {
            return Err(Status::bad_request("the name of the object does not match the name on the URL"));
        }
        let given_rv = next["metadata"].get("resourceVersion").and_then(Value::as_str).unwrap_or("").to_string();
        if !given_rv.is_empty() && given_rv != cur["metadata"]["resourceVersion"] {
            return Err(Status::conflict(&r.group, &r.plural, name));
        }
        next = kept_by_server(&cur, next, p.subresource.as_deref() == Some("status"), crate::sim::catalog::has_status(&r));
        let mut a = cur.clone();
        a["metadata"]["resourceVersion"] = Value::Null;
        let mut b = next.clone();
        b["metadata"]["resourceVersion"] = Value::Null;
        if strip_type(a) == strip_type(b) {
            // A no-op write does not create a new revision, as in the apiserver.
            let o = encode(&r, &ordered(&r, cur))?;
            return Ok(object_response(&r, &o, StatusCode::OK, fmt));
        }
        self.commit(cache, &mut rv, EventType::Modified, next, StatusCode::OK, fmt, dry)
    }

    /// DELETE of one object (a dry run checks it exists and changes nothing).
    pub(super) fn delete(&self, cache: &KindCache, ns: Option<&str>, name: &str, fmt: Format, dry: bool) -> Result<Response<Body>, Status> {
        let mut rv = self.rv.lock().unwrap_or_else(|e| e.into_inner());
        let cur = current(cache, ns, name)?;
        let uid = cur["metadata"]["uid"].as_str().unwrap_or("").to_string();
        self.commit(cache, &mut rv, EventType::Deleted, cur, StatusCode::OK, fmt, dry)?;
        let r = &cache.resource;
        let details = Details { name: name.into(), group: r.group.clone(), kind: r.plural.clone(), uid, ..Details::default() };
        Ok(Status::success(details).into_response(fmt == Format::Protobuf))
    }

    pub(super) fn delete_collection(
        &self,
        cache: &KindCache,
        ns: Option<&str>,
        query: Option<&str>,
        fmt: Format,
        dry: bool,
    ) -> Result<Response<Body>, Status> {
        let opts = Options::parse(query)?;
        opts.fields.validate(&cache.resource.selectable_fields()).map_err(|e| Status::bad_request(e.to_string()))?;
        let snap = cache.snapshot();
        let names: Vec<(String, String)> = crate::serve::handler::candidates(&snap, ns, &opts, cache.resource.index.as_deref(), None)
            .map(|o| (o.namespace().to_string(), o.name().to_string()))
            .collect();
        for (ns, name) in names {
            let ns = (!ns.is_empty()).then_some(ns);
            match self.delete(cache, ns.as_deref(), &name, fmt, dry) {
                Ok(_) | Err(Status { code: 404, .. }) => {}
                Err(e) => return Err(e),
            }
        }
        Ok(Status::success(Details::default()).into_response(fmt == Format::Protobuf))
    }
}

/// An update's new state `next` with what the apiserver keeps from the current `cur`: its
/// identity fields; for `/status` (`status_only`) everything but status; for a kind with a
/// status subresource (`has_status`) its status, and a generation counting spec changes.
fn kept_by_server(cur: &Value, mut next: Value, status_only: bool, has_status: bool) -> Value {
    for k in ["name", "namespace", "uid", "creationTimestamp", "generation"] {
        match cur["metadata"].get(k) {
            Some(v) => next["metadata"][k] = v.clone(),
            None => {
                if let Some(m) = next["metadata"].as_object_mut() {
                    m.remove(k);
                }
            }
        }
    }
    if status_only {
        let status = next.get("status").cloned();
        next = cur.clone();
        match status {
            Some(s) => next["status"] = s,
            None => {
                if let Some(m) = next.as_object_mut() {
                    m.remove("status");
                }
            }
        }
    } else if has_status {
        match cur.get("status") {
            Some(s) => next["status"] = s.clone(),
            None => {
                if let Some(m) = next.as_object_mut() {
                    m.remove("status");
                }
            }
        }
        if cur.get("spec") != next.get("spec") {
            let g = cur["metadata"]["generation"].as_i64().unwrap_or(0) + 1;
            next["metadata"]["generation"] = Value::from(g);
        }
    }
    next
}

fn strip_type(mut v: Value) -> Value {
    if let Some(m) = v.as_object_mut() {
        m.remove("kind");
        m.remove("apiVersion");
    }
    v
}

/// `pods/{name}/log`: a few deterministic lines, so log pass-through can be exercised.
pub(super) fn log(cache: &KindCache, ns: Option<&str>, name: &str) -> Result<Response<Body>, Status> {
    let cur = current(cache, ns, name)?;
    let node = cur["spec"]["nodeName"].as_str().unwrap_or("");
    let text = (1..=3).map(|i| format!("simulated log line {i} of pod {name} on {node}\n")).collect::<String>();
    Ok(respond(StatusCode::OK, "text/plain", body::full(text)))
}
