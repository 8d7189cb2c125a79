//! What a watcher sends: the chunks it fills and the frames of its events, bookmarks and
//! errors in the client's encoding and view (JSON, protobuf, Table rows).

use super::CHUNK;
use crate::api::media::{Format, View};
use crate::api::resource::Resource;
use crate::api::status::Status;
use crate::api::table::TablePrinter;
use crate::api::wire;
use crate::cache::object::Object;
use crate::cache::window::EventType;
use crate::serve::handler::table::{self as rows, Include};
use bytes::BytesMut;
use std::borrow::Cow;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

/// The chunk being filled for one client. A backlog's chunks start small and double up to
/// [`CHUNK`] (a resume with two events does not hold 256 KiB); live events get chunks of
/// exactly their size.
pub(super) struct Chunks {
    pub(super) buf: BytesMut,
    /// Capacity of the next chunk (at least the frame that starts it).
    room: usize,
}

impl Chunks {
    pub(super) fn growing() -> Chunks {
        Chunks { buf: BytesMut::new(), room: 4096 }
    }

    pub(super) fn exact() -> Chunks {
        Chunks { buf: BytesMut::new(), room: 0 }
    }

    /// Start a new chunk for a frame of `n` bytes.
    pub(super) fn start(&mut self, n: usize) {
        self.buf = BytesMut::with_capacity(n.max(self.room));
        self.room = (self.room * 2).min(CHUNK);
    }
}

/// One watch frame as the pieces copied into a chunk: a head (built for the frame, or
/// shared by the watch), the object's stored bytes, a constant tail.
pub(super) struct Frame<'a> {
    pub(super) head: Cow<'a, [u8]>,
    pub(super) body: &'a [u8],
    pub(super) tail: &'static [u8],
}

impl Frame<'_> {
    pub(super) fn len(&self) -> usize {
        self.head.len() + self.body.len() + self.tail.len()
    }

    /// A frame built whole.
    pub(super) fn owned(bytes: Vec<u8>) -> Frame<'static> {
        Frame { head: Cow::Owned(bytes), body: &[], tail: &[] }
    }
}

/// Writes watch events of one resource in one encoding and view (the objects, their
/// PartialObjectMetadata, or one-row Tables).
pub(super) struct Encoder {
    pub(super) res: Arc<Resource>,
    fmt: Format,
    /// Whether events carry PartialObjectMetadata instead of the objects.
    metadata: bool,
    /// For a Table watch (`kubectl get -w`): each event's object is a Table of one row.
    table: Option<TableEvents>,
    /// `{"type":"<T>","object":{"kind":...,"apiVersion":...,` (and `"metadata":` for the
    /// metadata view) for ADDED, MODIFIED, DELETED, built once per watch instead of once per
    /// event.
    json_heads: [Vec<u8>; 3],
    /// The `apiVersion` and `kind` events carry, built once per watch.
    api_version: String,
    kind: String,
}

impl Encoder {
    pub(super) fn new(res: Arc<Resource>, fmt: Format, view: View, include: Include, printer: Option<TablePrinter>) -> Encoder {
        let (api_version, kind, metadata) = match view {
            View::Metadata { beta, .. } => (View::meta_api_version(beta).to_string(), "PartialObjectMetadata".to_string(), true),
            _ => (res.api_version(), res.kind.clone(), false),
        };
        let table = match view {
            View::Table { beta } => printer.map(|printer| TableEvents { printer, beta, include, columns_sent: AtomicBool::new(false) }),
            _ => None,
        };
        let head = |t: EventType| {
            let meta = if metadata { "\"metadata\":" } else { "" };
            if res.custom() && !metadata {
                // A custom resource's stored item is the whole object.
                return format!("{{\"type\":\"{}\",\"object\":", t.as_str()).into_bytes();
            }
            format!("{{\"type\":\"{}\",\"object\":{{\"kind\":\"{kind}\",\"apiVersion\":\"{api_version}\",{meta}", t.as_str()).into_bytes()
        };
        let json_heads = [head(EventType::Added), head(EventType::Modified), head(EventType::Deleted)];
        Encoder { res, fmt, metadata, table, json_heads, api_version, kind }
    }

    pub(super) fn content_type(&self) -> &'static str {
        match self.fmt {
            Format::Json => "application/json",
            Format::Protobuf => wire::PROTOBUF_WATCH,
        }
    }

    /// The code of this watch's events among the runs a kind keeps deflated
    /// ([`crate::cache::deflated`]): the objects' own events, in JSON or protobuf (a Table's
    /// rows and the metadata view are not kept).
    pub(super) fn runs_kept(&self) -> Option<u8> {
        if self.metadata || self.table.is_some() {
            return None;
        }
        Some(match self.fmt {
            Format::Json => 0,
            Format::Protobuf => 1,
        })
    }

    /// Whether this watch cannot carry `o` faithfully: a Table watch meeting an object whose
    /// cells were withheld for their size. The watch is then ended (the client resumes,
    /// and its new watch is the upstream's while such an object is held), never skipped.
    pub(super) fn refuses(&self, o: &Object) -> bool {
        self.table.is_some() && o.unprinted()
    }

    /// The frame of a `kind` event carrying `o` (None if `o` is not held in this encoding).
    pub(super) fn event<'a>(&'a self, kind: EventType, o: &'a Object) -> Option<Frame<'a>> {
        if let Some(t) = &self.table {
            return t.event(kind.as_str(), o).map(Frame::owned);
        }
        match self.fmt {
            Format::Json => {
                // Stored JSON is `,{...}`: the object's members follow the shared head (for
                // the metadata view, the metadata's JSON follows `"metadata":`).
                let head = Cow::Borrowed(&self.json_heads[kind as usize][..]);
                if self.metadata {
                    return Some(Frame { head, body: o.json_metadata()?, tail: b"}}\n" });
                }
                let from = if self.res.custom() { 1 } else { 2 };
                Some(Frame { head, body: o.json.as_deref()?.get(from..)?, tail: b"}\n" })
            }
            Format::Protobuf => {
                let m = if self.metadata { o.pb_metadata()? } else { o.pb_message_ref()? };
                let head = wire::watch_frame_prefix(kind.as_str(), &self.api_version, &self.kind, m.len());
                Some(Frame { head: Cow::Owned(head), body: m, tail: wire::UNKNOWN_SUFFIX })
            }
        }
    }

    pub(super) fn bookmark(&self, rv: u64, initial_end: bool) -> Frame<'static> {
        if let Some(t) = &self.table {
            return Frame::owned(t.bookmark(rv, initial_end));
        }
        // A bookmark is an empty object with only its RV; the apiserver's empty pod still
        // writes its spec and status, a PartialObjectMetadata has nothing else.
        let pod = !self.metadata && self.res.group.is_empty() && self.res.kind == "Pod";
        match self.fmt {
            Format::Json => {
                let ann = if initial_end { ",\"annotations\":{\"k8s.io/initial-events-end\":\"true\"}" } else { "" };
                let tail = if pod { ",\"spec\":{\"containers\":null},\"status\":{}" } else { "" };
                Frame::owned(
                    format!(
                        "{{\"type\":\"BOOKMARK\",\"object\":{{\"kind\":\"{}\",\"apiVersion\":\"{}\",\"metadata\":{{\"resourceVersion\":\"{rv}\"{ann}}}{tail}}}}}\n",
                        self.kind, self.api_version
                    )
                    .into_bytes(),
                )
            }
            Format::Protobuf => {
                Frame::owned(wire::watch_frame("BOOKMARK", &self.api_version, &self.kind, &bookmark_pb(rv, initial_end, pod)))
            }
        }
    }

    pub(super) fn error(&self, status: &Status) -> Frame<'static> {
        match self.fmt {
            Format::Json => {
                let mut line = b"{\"type\":\"ERROR\",\"object\":".to_vec();
                line.extend_from_slice(&status.to_json());
                line.extend_from_slice(b"}\n");
                Frame::owned(line)
            }
            Format::Protobuf => Frame::owned(wire::watch_frame("ERROR", "v1", "Status", &status.to_pb())),
        }
    }
}

/// The events of a Table watch, as the apiserver writes them: each event's object is a
/// Table whose `metadata` holds the object's RV and whose one row is the object's, the
/// column definitions in the first event of the watch only (`null` after). A bookmark's row
/// is the printer's row for an empty object, its metadata only the RV (and the
/// initial-events-end annotation).
pub(super) struct TableEvents {
    printer: TablePrinter,
    beta: bool,
    include: Include,
    /// Whether an event has carried the column definitions yet.
    columns_sent: AtomicBool,
}

impl TableEvents {
    /// `{"type":..,"object":{"kind":"Table",..,"columnDefinitions":..,"rows":[` for an
    /// object at `rv`.
    pub(super) fn head(&self, event: &str, rv: u64) -> Vec<u8> {
        let mut out = format!(
            "{{\"type\":\"{event}\",\"object\":{{\"kind\":\"Table\",\"apiVersion\":\"{}\",\"metadata\":{{\"resourceVersion\":\"{rv}\"}},\"columnDefinitions\":",
            View::meta_api_version(self.beta)
        )
        .into_bytes();
        if self.columns_sent.swap(true, Ordering::Relaxed) {
            out.extend_from_slice(b"null");
        } else {
            out.extend_from_slice(self.printer.columns());
        }
        out.extend_from_slice(b",\"rows\":[");
        out
    }

    pub(super) fn event(&self, event: &str, o: &Object) -> Option<Vec<u8>> {
        let mut pieces = Vec::new();
        rows::row(o, 0, self.beta, self.include, rows::now(), &mut pieces)?;
        let mut out = self.head(event, o.rv);
        for p in &pieces {
            out.extend_from_slice(p.bytes());
        }
        out.extend_from_slice(b"]}}\n");
        Some(out)
    }

    pub(super) fn bookmark(&self, rv: u64, initial_end: bool) -> Vec<u8> {
        let mut out = self.head("BOOKMARK", rv);
        out.extend_from_slice(b"{\"cells\":");
        out.extend_from_slice(&self.printer.cells(&serde_json::json!({})).render(rows::now()));
        match self.include {
            Include::Metadata => {
                let ann = if initial_end { ",\"annotations\":{\"k8s.io/initial-events-end\":\"true\"}" } else { "" };
                out.extend_from_slice(
                    format!(
                        ",\"object\":{{\"kind\":\"PartialObjectMetadata\",\"apiVersion\":\"{}\",\"metadata\":{{\"resourceVersion\":\"{rv}\"{ann}}}}}}}",
                        View::meta_api_version(self.beta)
                    )
                    .as_bytes(),
                );
            }
            Include::None => out.extend_from_slice(b",\"object\":null}"),
        }
        out.extend_from_slice(b"]}}\n");
        out
    }
}

/// The protobuf bookmark object: ObjectMeta with the RV (and the initial-events-end
/// annotation), and for pods the empty spec and status the apiserver writes.
pub(super) fn bookmark_pb(rv: u64, initial_end: bool, pod: bool) -> Vec<u8> {
    let mut meta = Vec::with_capacity(64);
    for f in 1..=5 {
        wire::put_bytes(&mut meta, f, b"");
    }
    wire::put_bytes(&mut meta, 6, rv.to_string().as_bytes());
    wire::put_uint(&mut meta, 7, 0);
    wire::put_bytes(&mut meta, 8, b"");
    if initial_end {
        let mut entry = Vec::new();
        wire::put_bytes(&mut entry, 1, b"k8s.io/initial-events-end");
        wire::put_bytes(&mut entry, 2, b"true");
        wire::put_bytes(&mut meta, 12, &entry);
    }
    let mut msg = Vec::with_capacity(160);
    wire::put_bytes(&mut msg, 1, &meta);
    if pod {
        const SPEC: &[u8] =
            &[0x1a, 0, 0x32, 0, 0x42, 0, 0x4a, 0, 0x52, 0, 0x58, 0, 0x60, 0, 0x68, 0, 0x82, 1, 0, 0x8a, 1, 0, 0x9a, 1, 0, 0xc2, 1, 0];
        const STATUS: &[u8] = &[0x0a, 0, 0x1a, 0, 0x22, 0, 0x2a, 0, 0x32, 0, 0x4a, 0, 0x5a, 0, 0x72, 0, 0x88, 1, 0];
        wire::put_bytes(&mut msg, 2, SPEC);
        wire::put_bytes(&mut msg, 3, STATUS);
    }
    msg
}
