//! GET of one object from the current snapshot.

use crate::api::status::Status;
use crate::api::wire;
use crate::cache::object;
use crate::cache::KindCache;
use crate::serve::body::{respond, try_stitched, Body, Stitch};
use crate::serve::query::Format;
use http::{Response, StatusCode};

/// Answer a GET of `name` (in `namespace` for namespaced kinds).
pub fn get(cache: &KindCache, namespace: Option<&str>, name: &str, fmt: Format) -> Result<Response<Body>, Status> {
    let r = &cache.resource;
    let snap = cache.snapshot();
    let key = object::key(namespace.unwrap_or(""), name);
    let o = snap.get(&key).ok_or_else(|| Status::not_found(&r.group, &r.plural, name))?;
    let missing = || Status::internal(format!("{} are not held in this encoding", r.plural));
    let body = try_stitched(o.clone(), |o| match fmt {
        Format::Json => {
            let j = o.json.as_ref().ok_or_else(missing)?;
            // The stored item is `,{...}`: the type meta goes in front of its fields.
            let mut head = Vec::with_capacity(48);
            object::with_type_meta(&mut head, &r.api_version(), &r.kind, b"{}");
            head.pop();
            head.push(b',');
            Ok(Stitch { head, items: vec![&j[2..]], tail: b"\n" })
        }
        Format::Protobuf => {
            let m = o.pb_message_ref().ok_or_else(missing)?;
            let head = wire::envelope_prefix(&r.api_version(), &r.kind, m.len());
            Ok(Stitch { head, items: vec![m], tail: wire::UNKNOWN_SUFFIX })
        }
    })?;
    Ok(respond(StatusCode::OK, content_type(fmt), body))
}

/// Content-Type of a non-watch response.
pub(crate) fn content_type(fmt: Format) -> &'static str {
    match fmt {
        Format::Json => "application/json",
        Format::Protobuf => wire::PROTOBUF,
    }
}
