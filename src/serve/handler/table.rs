//! The Table view of GET and LIST (`kubectl get`): the kind's column definitions, then a
//! row per object stitched from its stored cells template (relative times filled in now)
//! and its stored metadata as the row's PartialObjectMetadata.

use crate::api::media::View;
use crate::api::table::{since, Segment, TablePrinter};
use crate::body::Piece;
use crate::cache::object::Object;

/// What a row carries besides its cells (`includeObject`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Include {
    /// The object's metadata as PartialObjectMetadata (the default).
    Metadata,
    /// Nothing (`"object":null`).
    None,
}

impl Include {
    /// `includeObject` as kache serves it: `None` for values the upstream answers
    /// (`Object`, which needs the whole object, and invalid values, its 400).
    pub fn parse(v: Option<&str>) -> Option<Include> {
        match v.unwrap_or("") {
            "" | "Metadata" => Some(Include::Metadata),
            "None" => Some(Include::None),
            _ => None,
        }
    }
}

/// The current time in unix seconds, for ages.
pub(crate) fn now() -> f64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0.0, |d| d.as_secs_f64())
}

/// A Table's head up to its rows' `[`: metadata (`list_meta`, the members inside
/// `"metadata":{...}`) and the kind's column definitions.
pub(crate) fn head(printer: &TablePrinter, beta: bool, list_meta: &str) -> Vec<u8> {
    let mut head = format!(
        "{{\"kind\":\"Table\",\"apiVersion\":\"{}\",\"metadata\":{{{list_meta}}},\"columnDefinitions\":",
        View::meta_api_version(beta)
    )
    .into_bytes();
    head.extend_from_slice(printer.columns());
    head.extend_from_slice(b",\"rows\":[");
    head
}

/// The pieces of row `i` (a `,` before every row but the first), or `None` when the object
/// has no cells or metadata held.
pub(crate) fn row<'s>(o: &'s Object, i: usize, beta: bool, include: Include, now: f64, out: &mut Vec<Piece<'s>>) -> Option<()> {
    let cells = o.cells()?;
    let meta = match include {
        Include::Metadata => Some(o.json_metadata()?),
        Include::None => None,
    };
    out.push(Piece::Stored(if i == 0 { b"{\"cells\":" } else { b",{\"cells\":" }));
    for s in cells.segments() {
        match s {
            Segment::Bytes(b) => out.push(Piece::Stored(b)),
            Segment::Since(t) => out.push(Piece::inline(since(t, now).as_bytes())),
        }
    }
    match meta {
        Some(m) => {
            out.push(Piece::Stored(if beta {
                b",\"object\":{\"kind\":\"PartialObjectMetadata\",\"apiVersion\":\"meta.k8s.io/v1beta1\",\"metadata\":"
            } else {
                b",\"object\":{\"kind\":\"PartialObjectMetadata\",\"apiVersion\":\"meta.k8s.io/v1\",\"metadata\":"
            }));
            out.push(Piece::Stored(m));
            out.push(Piece::Stored(b"}}"));
        }
        None => out.push(Piece::Stored(b",\"object\":null}")),
    }
    Some(())
}
