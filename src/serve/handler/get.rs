//! GET of one object from the current snapshot, as the object or its PartialObjectMetadata.

use super::table::{self, Include};
use crate::api::media::{Format, View};
use crate::api::status::Status;
use crate::api::wire;
use crate::body::{try_stitched, Body, Stitch};
use crate::cache::object::{self, Object};
use crate::cache::KindCache;
use crate::serve::respond::respond;
use http::{Response, StatusCode};

/// Answer a GET of `name` (in `namespace` for namespaced kinds) in `view` (the object, its
/// metadata, or a one-row Table with `include` in its row).
pub fn get(
    cache: &KindCache,
    namespace: Option<&str>,
    name: &str,
    fmt: Format,
    view: View,
    include: Include,
) -> Result<Response<Body>, Status> {
    let r = &cache.resource;
    let snap = cache.snapshot();
    let key = object::key(namespace.unwrap_or(""), name);
    let o = snap.get(&key).ok_or_else(|| Status::not_found(&r.group, &r.plural, name))?;
    let missing = || Status::internal(format!("{} are not held in this encoding", r.plural));
    if let View::Table { beta } = view {
        let printer = snap.printer(&r.group, &r.plural).ok_or_else(missing)?;
        let body = try_stitched(o.clone(), |o| {
            let mut items = Vec::with_capacity(8);
            table::row(o, 0, beta, include, table::now(), &mut items).ok_or_else(missing)?;
            Ok(Stitch {
                head: table::head(&printer, beta, &format!("\"resourceVersion\":\"{}\"", o.rv)),
                items,
                tail: b"]}\n".as_slice().into(),
            })
        })?;
        return Ok(respond(StatusCode::OK, "application/json", body));
    }
    let body = try_stitched(o.clone(), |o| {
        let (api_version, kind, body) = match view {
            View::Metadata { beta, .. } => (View::meta_api_version(beta).to_string(), "PartialObjectMetadata", metadata(o, fmt)),
            _ => (r.api_version(), r.kind.as_str(), whole(o, fmt)),
        };
        let body = body.ok_or_else(missing)?;
        Ok(match fmt {
            // A custom resource's stored item is the whole object.
            Format::Json if r.custom() && view == View::Object => {
                Stitch { head: Vec::new(), items: vec![o.json_item_ref().ok_or_else(missing)?.into()], tail: b"\n".as_slice().into() }
            }
            Format::Json => {
                // The stored members follow the type meta: `{"kind":..,"apiVersion":..,` then
                // the object's members (its `{` dropped), or `"metadata":` and the metadata.
                let mut head = Vec::with_capacity(64);
                object::with_type_meta(&mut head, &api_version, kind, b"{}");
                head.pop();
                head.push(b',');
                let tail: &[u8] = if matches!(view, View::Metadata { .. }) {
                    head.extend_from_slice(b"\"metadata\":");
                    b"}\n"
                } else {
                    b"\n"
                };
                Stitch { head, items: vec![body.into()], tail: tail.into() }
            }
            Format::Protobuf => {
                let head = wire::envelope_prefix(&api_version, kind, body.len());
                Stitch { head, items: vec![body.into()], tail: wire::UNKNOWN_SUFFIX.into() }
            }
        })
    })?;
    Ok(respond(StatusCode::OK, content_type(fmt), body))
}

/// The object's stored bytes for a GET: JSON members after the opening brace, or the bare
/// protobuf message.
fn whole(o: &Object, fmt: Format) -> Option<&[u8]> {
    match fmt {
        Format::Json => o.json.as_deref()?.get(2..),
        Format::Protobuf => o.pb_message_ref(),
    }
}

/// The object's metadata: the JSON of `metadata`, or the PartialObjectMetadata message.
pub(crate) fn metadata(o: &Object, fmt: Format) -> Option<&[u8]> {
    match fmt {
        Format::Json => o.json_metadata(),
        Format::Protobuf => o.pb_metadata(),
    }
}

/// Content-Type of a non-watch response.
pub(crate) fn content_type(fmt: Format) -> &'static str {
    match fmt {
        Format::Json => "application/json",
        Format::Protobuf => wire::PROTOBUF,
    }
}
