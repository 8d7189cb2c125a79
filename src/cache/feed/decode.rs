//! What the upstream sends a feed, decoded: LIST pages and items (JSON or protobuf), metadata lists,
//! watch events cut from the stream, bookmarks and in-stream errors. Pure functions over
//! bytes. An item or event object that cannot be decoded is the caller's to skip; a page or
//! frame that cannot be read fails the request.

use super::FeedError;
use crate::api::json::ParseError;
use crate::api::media::Format;
use crate::api::resource::Resource;
use crate::api::table::CustomColumns;
use crate::api::transcode::{pb_to_json_only, MessageType, Projection, TranscodeError};
use crate::api::wire;
use crate::cache::object::read_projection;
use crate::cache::object::{Key, Object, ObjectError};
use bytes::{Buf, Bytes, BytesMut};
use serde::Deserialize;
use serde_json::value::RawValue;
use std::sync::Arc;

/// Why something the upstream sent could not be decoded.
#[derive(Debug, thiserror::Error)]
pub enum DecodeError {
    /// JSON that does not parse, or not into what was expected (a list, a watch event).
    #[error("JSON: {0}")]
    Json(#[from] serde_json::Error),
    /// An object nested deeper than the apiserver itself decodes.
    #[error("an object nested {0} levels deep, more than the {max} the apiserver decodes", max = crate::api::json::MAX_DEPTH)]
    TooDeep(usize),
    /// A protobuf object that does not transcode to JSON.
    #[error("protobuf object: {0}")]
    Transcode(#[from] TranscodeError),
    /// Protobuf kache reads field by field is malformed; names what was read.
    #[error("malformed protobuf {0}")]
    Protobuf(&'static str),
    /// An object without the name or resourceVersion kache keys it by.
    #[error("{0}")]
    Object(#[from] ObjectError),
    /// A list's resourceVersion that is not a decimal integer.
    #[error("bad resourceVersion {0:?}")]
    ResourceVersion(String),
    /// A watch event of a type the apiserver does not send.
    #[error("unknown watch event type {0:?}")]
    EventType(String),
    /// A LIST without `limit` returned a continue token.
    #[error("an unpaged list returned a continue token")]
    UnpagedContinue,
    /// A list body that ended before its last item, or does not balance.
    #[error("a list body cut short")]
    Truncated,
}

impl From<ParseError> for DecodeError {
    fn from(e: ParseError) -> DecodeError {
        match e {
            ParseError::Json(e) => DecodeError::Json(e),
            ParseError::TooDeep(levels) => DecodeError::TooDeep(levels),
        }
    }
}

impl DecodeError {
    /// The `reason` label of an object skipped for this error (bounded).
    pub fn reason(&self) -> &'static str {
        match self {
            DecodeError::Json(_) => "json",
            DecodeError::TooDeep(_) => "too_deep",
            DecodeError::Transcode(_) | DecodeError::Protobuf(_) => "protobuf",
            DecodeError::Object(_) | DecodeError::ResourceVersion(_) => "metadata",
            DecodeError::EventType(_) | DecodeError::UnpagedContinue | DecodeError::Truncated => "other",
        }
    }
}

/// Objects decoded from a LIST (pages, or one streamed answer), and why the items left out could not be.
#[derive(Debug, Default)]
pub(super) struct Listed {
    pub(super) objects: Vec<Object>,
    pub(super) skipped: Vec<DecodeError>,
}

impl Listed {
    pub(super) fn push(&mut self, object: Result<Object, DecodeError>) {
        match object {
            Ok(o) => self.objects.push(o),
            Err(e) => self.skipped.push(e),
        }
    }
}

/// A watch event cut from the stream: its type and its object's bytes (a JSON object or a
/// bare protobuf message).
pub(crate) struct RawEvent {
    pub(crate) kind: String,
    pub(crate) object: Bytes,
}

#[derive(Deserialize)]
struct ListMetaJson {
    #[serde(rename = "resourceVersion", default)]
    resource_version: String,
    #[serde(rename = "continue", default)]
    cont: Option<String>,
    #[serde(rename = "remainingItemCount", default)]
    remaining: Option<i64>,
}

impl ListMetaJson {
    /// `remainingItemCount`, when given (a negative count is none).
    fn remaining(&self) -> Option<u64> {
        self.remaining.and_then(|n| u64::try_from(n).ok())
    }
}

/// A JSON list with its items undecoded (skipping over an item is iterative, so any depth
/// passes).
#[derive(Deserialize)]
pub(super) struct ListJson<'a> {
    metadata: ListMetaJson,
    #[serde(borrow, default)]
    pub(super) items: Vec<&'a RawValue>,
}

impl ListJson<'_> {
    /// The list's resourceVersion.
    pub(super) fn rv(&self) -> Result<u64, DecodeError> {
        parse_rv(&self.metadata.resource_version)
    }

    /// How many objects the pages after this one hold (`remainingItemCount`), when given.
    pub(super) fn remaining(&self) -> Option<u64> {
        self.metadata.remaining()
    }
}

#[derive(Deserialize)]
pub(super) struct EventJson<'a> {
    #[serde(rename = "type")]
    kind: &'a str,
    #[serde(borrow)]
    object: &'a RawValue,
}

/// `metadata.resourceVersion` alone (everything else skipped over, at any depth).
#[derive(Deserialize)]
struct RvJson {
    metadata: MetaRvJson,
}

#[derive(Deserialize)]
struct MetaRvJson {
    #[serde(rename = "resourceVersion")]
    resource_version: Option<String>,
}

pub(super) fn parse_rv(s: &str) -> Result<u64, DecodeError> {
    s.parse().map_err(|_| DecodeError::ResourceVersion(s.to_string()))
}

/// A JSON list page: its items into `out` (those that cannot be decoded skipped), and its
/// (RV, continue).
pub(super) fn json_page(r: &Resource, body: &[u8], custom: Option<&Arc<CustomColumns>>, out: &mut Listed) -> Result<PageMeta, DecodeError> {
    let list: ListJson<'_> = serde_json::from_slice(body)?;
    for item in &list.items {
        out.push(json_object(r, item.get().as_bytes(), custom));
    }
    list_page_meta(list.metadata)
}

/// A JSON list's `metadata` object, read alone: (RV, continue).
pub(super) fn json_list_meta(meta: &[u8]) -> Result<PageMeta, DecodeError> {
    list_page_meta(serde_json::from_slice(meta)?)
}

fn list_page_meta(meta: ListMetaJson) -> Result<PageMeta, DecodeError> {
    let remaining = meta.remaining();
    Ok(PageMeta { rv: parse_rv(&meta.resource_version)?, cont: meta.cont.unwrap_or_default(), remaining })
}

/// What a list page says of the list: its resourceVersion, the continue token of the next
/// page (empty on the last) and how many items the pages after it hold (the apiserver's
/// `remainingItemCount`, given for paged lists without a selector).
#[derive(Debug, Default, PartialEq, Eq)]
pub(super) struct PageMeta {
    pub(super) rv: u64,
    pub(super) cont: String,
    pub(super) remaining: Option<u64>,
}

/// A protobuf list page (the `k8s\0` envelope): its items into `out` (those that cannot be
/// decoded skipped), and its (RV, continue).
pub(super) fn pb_page(r: &Resource, body: &[u8], out: &mut Listed) -> Result<PageMeta, DecodeError> {
    let (_, _, raw) = wire::open_envelope(body).ok_or(DecodeError::Protobuf("list envelope"))?;
    pb_list(r, raw, out)
}

/// A JSON watch event's object as a list item: without its leading `kind` and `apiVersion`
/// for built-in kinds; custom resources' list items are the whole object.
pub(super) fn strip_type_meta(obj: &[u8], r: &Resource) -> Vec<u8> {
    if r.custom() {
        return obj.to_vec();
    }
    let prefix = format!("{{\"kind\":\"{}\",\"apiVersion\":\"{}\",", r.kind, r.api_version());
    match obj.strip_prefix(prefix.as_bytes()) {
        Some(rest) => {
            let mut out = Vec::with_capacity(rest.len() + 1);
            out.push(b'{');
            out.extend_from_slice(rest);
            out
        }
        // Not in the apiserver's key order: re-encode once at ingest.
        None => crate::api::json::with_value(obj, crate::cache::object::item_json).unwrap_or_else(|_| obj.to_vec()),
    }
}

/// An object from its JSON list item, decoded at any depth the apiserver decodes. A built-in
/// kind's is decoded without its managedFields (its printer and field selectors never read
/// them; the stored bytes keep them); a custom resource's whole (its CRD's columns may
/// point anywhere, and its metadata is re-encoded from the decoded form).
pub(crate) fn json_object(r: &Resource, item: &[u8], custom: Option<&Arc<CustomColumns>>) -> Result<Object, DecodeError> {
    let object = |v: &serde_json::Value| Object::printed(r, v, Some(item), None, custom);
    Ok(if r.protobuf && custom.is_none() {
        crate::api::json::with_value_unmanaged(item, object)
    } else {
        crate::api::json::with_value(item, object)
    }??)
}

/// An object from its bare protobuf message: transcoded for the kinds kache knows, else
/// keyed by its metadata alone.
pub(crate) fn pb_object(r: &Resource, bare: &[u8]) -> Result<Object, DecodeError> {
    pb_object_reading(r, bare, &read_projection(r))
}

/// [`pb_object`], decoding only what `proj` names (`read_projection`: one per page, not per object).
pub(crate) fn pb_object_reading(r: &Resource, bare: &[u8], proj: &Projection) -> Result<Object, DecodeError> {
    let v = match MessageType::for_kind(&r.group, &r.version, &r.kind) {
        Some(ty) => pb_to_json_only(ty, bare, proj)?,
        None => wire::object_meta_json(bare).ok_or(DecodeError::Protobuf("object metadata"))?,
    };
    Ok(Object::new(r, &v, None, Some(bare))?)
}

/// A watch event's object, in the feed's encoding.
pub(super) fn event_object(r: &Resource, fmt: Format, obj: &[u8], custom: Option<&Arc<CustomColumns>>) -> Result<Object, DecodeError> {
    match fmt {
        Format::Json => json_object(r, &strip_type_meta(obj, r), custom),
        Format::Protobuf => pb_object(r, obj),
    }
}

/// An object's `metadata.resourceVersion`, read alone (a bookmark's, or that of an object
/// that cannot be decoded whole).
pub(super) fn object_rv(fmt: Format, obj: &[u8]) -> Option<u64> {
    match fmt {
        Format::Json => serde_json::from_slice::<RvJson>(obj).ok()?.metadata.resource_version?.parse().ok(),
        Format::Protobuf => wire::object_meta_json(obj)?["metadata"]["resourceVersion"].as_str()?.parse().ok(),
    }
}

/// Objects of a protobuf list message, and its (RV, continue).
fn pb_list(r: &Resource, raw: &[u8], out: &mut Listed) -> Result<PageMeta, DecodeError> {
    const BAD: DecodeError = DecodeError::Protobuf("list");
    let (mut pos, mut page) = (0, PageMeta::default());
    let proj = read_projection(r);
    while pos < raw.len() {
        let (field, _, range) = wire::next_field(raw, &mut pos).ok_or(BAD)?;
        match field {
            1 => page = pb_list_meta(&raw[range])?,
            2 => out.push(pb_object_reading(r, &raw[range], &proj)),
            _ => {}
        }
    }
    Ok(page)
}

/// resourceVersion (2), continue (3) and remainingItemCount (4) of a protobuf ListMeta.
pub(super) fn pb_list_meta(m: &[u8]) -> Result<PageMeta, DecodeError> {
    const BAD: DecodeError = DecodeError::Protobuf("list metadata");
    let (mut p, mut page) = (0, PageMeta::default());
    while p < m.len() {
        let (f, wire_type, r) = wire::next_field(m, &mut p).ok_or(BAD)?;
        let varint = || (wire_type == prost::encoding::WireType::Varint).then(|| wire::get_varint(m, &mut r.start.clone())).flatten();
        let text = || std::str::from_utf8(&m[r.clone()]).map_err(|_| BAD);
        match f {
            2 => page.rv = parse_rv(text()?)?,
            3 => page.cont = text()?.to_string(),
            // An int64 as a varint: a negative count would be ten bytes of high bits.
            4 => page.remaining = varint().filter(|n| i64::try_from(*n).is_ok()),
            _ => {}
        }
    }
    Ok(page)
}

/// What a metadata list says of an object: enough to tell whether the cache's copy is it.
#[derive(Debug, PartialEq, Eq)]
pub struct Stamp {
    /// Store key (`namespace/name` or `name`).
    pub key: Key,
    /// `metadata.resourceVersion`.
    pub rv: u64,
}

/// The identities of a protobuf PartialObjectMetadataList's items (the `k8s\0` envelope),
/// and its list metadata.
pub(super) fn pb_identities(body: &[u8], out: &mut Vec<Stamp>) -> Result<PageMeta, DecodeError> {
    const BAD: DecodeError = DecodeError::Protobuf("metadata list");
    let (_, _, raw) = wire::open_envelope(body).ok_or(DecodeError::Protobuf("metadata list envelope"))?;
    let (mut pos, mut page) = (0, PageMeta::default());
    while pos < raw.len() {
        let (field, _, range) = wire::next_field(raw, &mut pos).ok_or(BAD)?;
        let m = &raw[range];
        match field {
            1 => page = pb_list_meta(m)?,
            2 => {
                // PartialObjectMetadata { metadata: ObjectMeta = 1 }
                let (mut p, mut meta) = (0, None);
                while p < m.len() {
                    let (f, _, r) = wire::next_field(m, &mut p).ok_or(BAD)?;
                    if f == 1 {
                        meta = Some(&m[r]);
                    }
                }
                out.push(pb_identity(meta.ok_or(BAD)?)?);
            }
            _ => {}
        }
    }
    Ok(page)
}

/// Key and resourceVersion of a protobuf ObjectMeta.
fn pb_identity(meta: &[u8]) -> Result<Stamp, DecodeError> {
    const BAD: DecodeError = DecodeError::Protobuf("object metadata");
    let (mut p, mut name, mut ns, mut rv) = (0, "", "", "");
    while p < meta.len() {
        let (f, _, r) = wire::next_field(meta, &mut p).ok_or(BAD)?;
        let text = || std::str::from_utf8(&meta[r.clone()]).map_err(|_| BAD);
        match f {
            1 => name = text()?,
            3 => ns = text()?,
            6 => rv = text()?,
            _ => {}
        }
    }
    Ok(Stamp { key: crate::cache::object::key(ns, name), rv: parse_rv(rv)? })
}

/// Cut the next complete event off the buffer (`None` until one is whole): a JSON line, or a
/// length-prefixed protobuf frame.
pub(crate) fn cut_event(fmt: Format, buf: &mut BytesMut) -> Result<Option<RawEvent>, DecodeError> {
    match fmt {
        Format::Json => {
            let Some(nl) = buf.iter().position(|b| *b == b'\n') else { return Ok(None) };
            let line = buf.split_to(nl + 1).freeze();
            let ev: EventJson<'_> = serde_json::from_slice(&line)?;
            Ok(Some(RawEvent { kind: ev.kind.to_string(), object: line.slice_ref(ev.object.get().as_bytes()) }))
        }
        Format::Protobuf => {
            if buf.len() < 4 {
                return Ok(None);
            }
            let len = u32::from_be_bytes([buf[0], buf[1], buf[2], buf[3]]) as usize;
            if buf.len() < 4 + len {
                return Ok(None);
            }
            buf.advance(4);
            let frame = buf.split_to(len).freeze();
            pb_event(&frame).map(Some).ok_or(DecodeError::Protobuf("watch frame"))
        }
    }
}

/// (type, bare object) of a protobuf WatchEvent.
fn pb_event(frame: &Bytes) -> Option<RawEvent> {
    let (mut pos, mut kind, mut object) = (0, String::new(), Bytes::new());
    while pos < frame.len() {
        let (field, _, range) = wire::next_field(frame, &mut pos)?;
        match field {
            1 => kind = String::from_utf8(frame[range].to_vec()).ok()?,
            2 => {
                let ext = &frame[range];
                let mut p = 0;
                while p < ext.len() {
                    let (f, _, r) = wire::next_field(ext, &mut p)?;
                    if f == 1 {
                        let (_, _, bare) = wire::open_envelope(&ext[r])?;
                        object = frame.slice_ref(bare);
                    }
                }
            }
            _ => {}
        }
    }
    Some(RawEvent { kind, object })
}

/// The error an ERROR watch event carries: 410 is [`FeedError::Expired`].
pub(super) fn watch_error(obj: &[u8], fmt: Format) -> FeedError {
    #[derive(Deserialize)]
    struct Code {
        code: Option<u64>,
    }
    let code = match fmt {
        Format::Json => serde_json::from_slice::<Code>(obj).ok().and_then(|s| s.code),
        Format::Protobuf => status_code_pb(obj),
    };
    match code {
        Some(410) => FeedError::Expired,
        _ => FeedError::Status { code: code.unwrap_or(0) as u16, body: crate::api::status::describe_body(obj), retry_after: None },
    }
}

/// `code` (field 6) of a protobuf Status.
fn status_code_pb(obj: &[u8]) -> Option<u64> {
    let mut pos = 0;
    while pos < obj.len() {
        let (field, wt, range) = wire::next_field(obj, &mut pos)?;
        if field == 6 && wt == prost::encoding::WireType::Varint {
            return wire::get_varint(obj, &mut range.start.clone());
        }
    }
    None
}

#[cfg(test)]
pub(super) mod tests {
    use super::*;
    use crate::testdata::capture;
    use serde_json::Value;

    fn widgets() -> Resource {
        Resource { protobuf: false, ..crate::sim::catalog::resource("widgets") }
    }

    /// A Widget whose `spec` holds `{"a":` nested until the object is `levels` deep.
    pub(crate) fn nested_widget(name: &str, rv: u64, levels: usize) -> Vec<u8> {
        let head = format!(
            "{{\"apiVersion\":\"fid.example.com/v1\",\"kind\":\"Widget\",\"metadata\":{{\"name\":\"{name}\",\"namespace\":\"default\",\"resourceVersion\":\"{rv}\"}},\"spec\":"
        );
        let mut s = head.into_bytes();
        s.extend_from_slice("{\"a\":".repeat(levels - 1).as_bytes());
        s.push(b'1');
        s.resize(s.len() + levels, b'}');
        s
    }

    #[test]
    fn a_custom_resources_watch_object_is_stored_as_its_list_item() {
        // The same Widget, as a real apiserver sent it in a LIST and in a watch event.
        let r = widgets();
        let listed: Value = serde_json::from_slice(&capture("cr-list-widgets").body).unwrap();
        let item = crate::api::json::to_vec(&listed["items"][0]);
        let event = capture("cr-watch-widget-rv0");
        let ev: EventJson<'_> = serde_json::from_slice(event.body.trim_ascii_end()).unwrap();
        assert_eq!(strip_type_meta(ev.object.get().as_bytes(), &r), item);
        assert!(item.starts_with(b"{\"apiVersion\":\"fid.example.com/v1\",\"kind\":\"Widget\","));
    }

    #[test]
    fn identities_of_a_protobuf_metadata_list_are_its_items_names_and_rvs() {
        // The same PartialObjectMetadataList a real apiserver sent in protobuf and JSON.
        let pb = crate::testdata::golden("11e-list-pods-as-partialobjectmetadatalist.pb.body");
        let json: Value = serde_json::from_slice(&crate::testdata::golden("11e-list-pods-as-partialobjectmetadatalist.json.body")).unwrap();
        let (_, kind, _) = wire::open_envelope(&pb).unwrap();
        assert_eq!(kind, "PartialObjectMetadataList");
        let mut got = Vec::new();
        let PageMeta { rv, cont, .. } = pb_identities(&pb, &mut got).unwrap();
        let want: Vec<Stamp> = json["items"]
            .as_array()
            .unwrap()
            .iter()
            .map(|i| {
                let m = &i["metadata"];
                Stamp {
                    key: crate::cache::object::key(m["namespace"].as_str().unwrap(), m["name"].as_str().unwrap()),
                    rv: m["resourceVersion"].as_str().unwrap().parse().unwrap(),
                }
            })
            .collect();
        assert!(!want.is_empty());
        assert_eq!(got, want);
        assert_eq!(rv.to_string(), json["metadata"]["resourceVersion"].as_str().unwrap());
        assert_eq!(cont, json["metadata"]["continue"].as_str().unwrap_or(""));
    }

    #[test]
    fn a_protobuf_status_is_logged_as_text() {
        // A real apiserver's 406 to a protobuf-only LIST of a custom resource.
        let c = capture("cr-gadgets-pb-only");
        assert_eq!(c.code, 406);
        assert_eq!(
            crate::api::status::describe_body(&c.body),
            "NotAcceptable: only the following media types are accepted: application/json, application/yaml, application/vnd.kubernetes.protobuf"
        );
        assert_eq!(crate::api::status::describe_body(b"{\"kind\":\"Status\"}"), "{\"kind\":\"Status\"}");
    }

    #[test]
    fn objects_nested_as_deep_as_the_apiserver_accepts_are_decoded_in_lists_and_events() {
        // A tokio worker's stack is 2 MiB; decoding 10,000 levels needs far more unless
        // the stack grows.
        std::thread::Builder::new()
            .stack_size(2 * 1024 * 1024)
            .spawn(|| {
                let r = widgets();
                for levels in [130, 500, crate::api::json::MAX_DEPTH] {
                    let obj = nested_widget("deep", 7, levels);
                    assert_eq!(crate::api::json::depth(&obj), levels);
                    let list = [&b"{\"metadata\":{\"resourceVersion\":\"9\"},\"items\":["[..], &obj, b"]}"].concat();
                    let mut listed = Listed::default();
                    assert_eq!(json_page(&r, &list, None, &mut listed).unwrap(), PageMeta { rv: 9, ..PageMeta::default() });
                    assert!(listed.skipped.is_empty(), "{levels}: {:?}", listed.skipped);
                    assert_eq!(listed.objects.len(), 1);
                    let o = &listed.objects[0];
                    assert_eq!((&*o.key, o.rv, o.json_item_ref()), ("default/deep", 7, Some(&obj[..])), "{levels} levels");
                    let line = [&b"{\"type\":\"ADDED\",\"object\":"[..], &obj, b"}\n"].concat();
                    let ev = cut_event(Format::Json, &mut BytesMut::from(&line[..])).unwrap().unwrap();
                    assert_eq!(event_object(&r, Format::Json, &ev.object, None).unwrap(), *o, "{levels} levels");
                }
            })
            .unwrap()
            .join()
            .unwrap();
    }

    #[test]
    fn an_item_that_cannot_be_decoded_is_left_out_of_its_page_with_its_reason() {
        let r = widgets();
        let too_deep = nested_widget("deeper", 8, crate::api::json::MAX_DEPTH + 1);
        let ok = nested_widget("fine", 9, 3);
        let list = [
            &b"{\"metadata\":{\"resourceVersion\":\"10\"},\"items\":[{\"metadata\":{\"resourceVersion\":\"5\"}},"[..],
            &too_deep,
            b",",
            &ok,
            b"]}",
        ]
        .concat();
        let mut listed = Listed::default();
        assert_eq!(json_page(&r, &list, None, &mut listed).unwrap(), PageMeta { rv: 10, ..PageMeta::default() });
        assert_eq!(listed.objects.iter().map(|o| &*o.key).collect::<Vec<_>>(), ["default/fine"]);
        assert_eq!(listed.skipped.iter().map(DecodeError::reason).collect::<Vec<_>>(), ["metadata", "too_deep"]);
        assert_eq!(object_rv(Format::Json, &too_deep), Some(8), "its RV is still read, to resume past it");
        assert!(std::error::Error::source(&FeedError::from(listed.skipped.remove(0))).is_some(), "the cause is kept");
    }

    /// The catalogue's kind `plural`, and the objects of its captured list page `capture`
    /// (protobuf or JSON by its name), every one decoded.
    fn captured(plural: &str, capture: &str) -> (Resource, Listed) {
        let r = crate::sim::catalog::resource(plural);
        let body = crate::testdata::golden(capture);
        let mut listed = Listed::default();
        if capture.ends_with(".pb.body") {
            pb_page(&r, &body, &mut listed).unwrap();
        } else {
            assert!(String::from_utf8_lossy(&body).contains("\"managedFields\""), "{capture} has managed fields");
            json_page(&r, &body, None, &mut listed).unwrap();
        }
        assert!(listed.objects.len() >= 2 && listed.skipped.is_empty(), "{capture}: {} objects", listed.objects.len());
        (r, listed)
    }

    #[test]
    fn a_protobuf_object_decoded_in_part_is_the_object_decoded_whole() {
        // The protobuf feed decodes only an object's metadata and selectable fields: the
        // cache's object (key, RV, fields, labels, bytes) must be what a full decode makes.
        for (plural, capture) in [("pods", "02a-list-pods.pb.body"), ("configmaps", "04a-list-configmaps.pb.body")] {
            let (r, listed) = captured(plural, capture);
            let ty = MessageType::for_kind(&r.group, &r.version, &r.kind).expect("a known kind");
            for o in &listed.objects {
                let bare = o.pb_message_ref().expect("the message's bytes");
                let whole = Object::new(&r, &crate::api::transcode::pb_to_json(ty, bare).unwrap(), None, Some(bare)).unwrap();
                assert_eq!(o, &whole, "{capture}");
            }
            // Pods select on fields beyond metadata: those were read.
            assert!(plural != "pods" || r.fields.iter().any(|f| f == "spec.nodeName"));
        }
    }

    #[test]
    fn the_json_and_protobuf_objects_of_one_version_share_their_selectables() {
        // Each encoding's cache decodes the same versions: their selectable fields and labels
        // must come out equal from either encoding, and be held once.
        for (plural, capture) in [("pods", "02a-list-pods"), ("configmaps", "04a-list-configmaps")] {
            let (_, json) = captured(plural, &format!("{capture}.json.body"));
            let (_, pb) = captured(plural, &format!("{capture}.pb.body"));
            assert_eq!(json.objects.len(), pb.objects.len(), "{capture}");
            for (j, p) in json.objects.iter().zip(&pb.objects) {
                assert_eq!((&j.key, j.rv), (&p.key, p.rv), "{capture}");
                assert!(j.shares_selectables(p), "{capture}: {:?} / {:?}", j.key, p.key);
            }
        }
    }

    #[test]
    fn a_json_object_decoded_without_its_managed_fields_is_the_object_decoded_whole() {
        // Built-in kinds' JSON objects are decoded without metadata.managedFields: the
        // cache's object (key, RV, fields, labels, Table cells, bytes) must be what a whole
        // decode makes, and the captures must hold managed fields for this to mean anything.
        for (plural, capture) in [("pods", "02a-list-pods.json.body"), ("configmaps", "04a-list-configmaps.json.body")] {
            let (r, listed) = captured(plural, capture);
            for o in &listed.objects {
                let item = o.json_item_ref().expect("the item's bytes");
                let whole = crate::api::json::with_value(item, |v| Object::printed(&r, v, Some(item), None, None)).unwrap().unwrap();
                assert_eq!(o, &whole, "{capture}");
                assert!(o.cells().is_some() || plural != "pods", "pods are printed");
            }
        }
    }

    #[test]
    fn a_page_says_how_many_items_the_pages_after_it_hold_in_both_encodings() {
        let pods = crate::sim::catalog::resource("pods");
        let json: serde_json::Value = serde_json::from_slice(&crate::testdata::golden("02c-list-pods-limit2-page1.json.body")).unwrap();
        let remaining = json["metadata"]["remainingItemCount"].as_u64().expect("the capture has remainingItemCount");
        let mut listed = Listed::default();
        let page = json_page(&pods, &crate::testdata::golden("02c-list-pods-limit2-page1.json.body"), None, &mut listed).unwrap();
        assert_eq!((page.remaining, page.cont.is_empty(), listed.objects.len()), (Some(remaining), false, 2));
        let mut listed = Listed::default();
        let page = pb_page(&pods, &crate::testdata::golden("02c-list-pods-limit2-page1.pb.body"), &mut listed).unwrap();
        assert_eq!((page.remaining, page.cont.is_empty(), listed.objects.len()), (Some(remaining), false, 2));
        // The last page, and an unpaged list, say nothing.
        let page =
            json_page(&pods, &crate::testdata::golden("02d-list-pods-limit2-page2.json.body"), None, &mut Listed::default()).unwrap();
        assert_eq!(page.remaining, None);
        let page = pb_page(&pods, &crate::testdata::golden("02a-list-pods.pb.body"), &mut Listed::default()).unwrap();
        assert_eq!((page.remaining, page.cont.as_str()), (None, ""));
    }
}
