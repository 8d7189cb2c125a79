//! JSON <-> Kubernetes protobuf for the built-in kinds kache serves.
//!
//! The simulated apiserver stores objects as JSON (`serde_json::Value`) and must also answer
//! `application/vnd.kubernetes.protobuf`. This module converts between a kind's JSON object
//! and its *bare* protobuf message (no `k8s\0` magic, no `runtime.Unknown` envelope, no
//! TypeMeta: framing is `wire`'s job), driven by the static schema table in `schema`,
//! which `tools/gen_pb_schema.py` generates from the k8s-pb and k8s-openapi crates.
//!
//! Kinds: core/v1 Pod, Node, Namespace, Service, ConfigMap, Secret, Event, Endpoints,
//! apps/v1 Deployment and meta/v1 Status, with every message they contain.
//!
//! Rules, chosen to match the apiserver's gogo-protobuf output as closely as the JSON allows:
//! - Fields are written in tag order; repeated scalars are not packed (proto2); map entries
//!   are sorted by key and always carry both key and value.
//! - A field is written iff its key is present in the JSON and not `null`, including empty
//!   strings, zeros and empty objects; a `null` Time is written as Go's zero time (an empty
//!   message), which decodes back to `null`. (Go also writes zero values of non-pointer fields that
//!   the JSON omits; that cannot be known from the JSON, and decoders treat both alike.)
//!   Inline fields (Go structs embedded with `json:",inline"`, e.g. `Probe.handler`) are always
//!   written, as Go does.
//! - JSON keys match the schema's JSON name exactly, else ignoring case and underscores (as
//!   Go's decoder is case-insensitive); unknown keys (`kind`, `apiVersion`, fields newer than
//!   the schema) are skipped.
//! - Types that are scalars in JSON but messages in protobuf: `meta/v1` Time and MicroTime
//!   (RFC 3339 strings; the zero time decodes to `null` like Go's), Duration (`"5m0s"`),
//!   FieldsV1 and `runtime.RawExtension` (any JSON; raw compact JSON bytes in protobuf),
//!   `resource.Quantity` (string) and `intstr.IntOrString` (number or string). Bytes fields
//!   are base64 strings in JSON.
//! - Decoding skips unknown fields, accepts packed and unpacked repeated scalars, and for a
//!   non-repeated field seen twice keeps the last value (messages are not merged).
//!   No input can make it panic; malformed input gives a [`TranscodeError`] naming the field.

#[rustfmt::skip]
mod schema;

use crate::api::time::{civil_from_days, days_from_civil};
use base64::engine::general_purpose::STANDARD as BASE64;
use base64::Engine as _;
use serde_json::{Map, Number, Value};

/// Deepest message nesting accepted in either direction (the schema itself is far shallower).
const MAX_DEPTH: usize = 100;

/// Seconds from 0001-01-01T00:00:00Z (Go's zero `time.Time`) to the Unix epoch, negated.
const GO_ZERO_TIME_UNIX: i64 = -62_135_596_800;

// ---------------------------------------------------------------------------------------
// Schema types (the data lives in the generated `schema` module).

/// How a message maps onto JSON.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Special {
    /// An ordinary message: a JSON object with one key per field.
    None,
    /// `meta/v1.Time`: RFC 3339 string with seconds precision.
    Time,
    /// `meta/v1.MicroTime`: RFC 3339 string with 6 fractional digits.
    MicroTime,
    /// `meta/v1.Duration`: Go duration string. (None of today's kinds contains one; kept so
    /// the generator's ROOTS can grow without code changes.)
    #[allow(dead_code)]
    Duration,
    /// `meta/v1.FieldsV1`: any JSON, raw bytes in protobuf.
    FieldsV1,
    /// `resource.Quantity`: string.
    Quantity,
    /// `intstr.IntOrString`: number or string.
    IntOrString,
    /// `runtime.RawExtension`: any JSON, raw bytes in protobuf. (Not in today's kinds either.)
    #[allow(dead_code)]
    RawExtension,
}

/// One message of the schema.
#[derive(Debug)]
struct MessageDesc {
    /// Full protobuf name, e.g. `k8s.io.api.core.v1.Pod`.
    name: &'static str,
    special: Special,
    /// Sorted by tag.
    fields: &'static [FieldDesc],
}

/// One field of a message.
#[derive(Debug)]
struct FieldDesc {
    tag: u32,
    /// The Rust (snake_case) field name in k8s-pb.
    name: &'static str,
    /// The exact JSON key; empty for inline fields.
    json: &'static str,
    kind: FieldKind,
    repeated: bool,
    /// A Go struct embedded with `json:",inline"`: its fields appear in the parent's JSON.
    inline: bool,
}

/// The type of a field (of each element for repeated fields).
#[derive(Clone, Copy, Debug)]
enum FieldKind {
    String,
    Bytes,
    Bool,
    Int32,
    Int64,
    /// Not in today's kinds (k8s uses few doubles); supported for a grown ROOTS list.
    #[allow(dead_code)]
    Double,
    /// A nested message, by id.
    Message(u16),
    /// `map<string, V>`.
    Map(MapValue),
}

/// The value type of a `map<string, V>` field.
#[derive(Clone, Copy, Debug)]
enum MapValue {
    String,
    Bytes,
    Message(u16),
}

/// Constructor used by the generated table.
const fn field(tag: u32, name: &'static str, json: &'static str, kind: FieldKind, repeated: bool, inline: bool) -> FieldDesc {
    FieldDesc { tag, name, json, kind, repeated, inline }
}

fn message(id: u16) -> &'static MessageDesc {
    // Ids in the generated table always index it; fall back to an empty message otherwise.
    static EMPTY: MessageDesc = MessageDesc { name: "", special: Special::None, fields: &[] };
    schema::MESSAGES.get(usize::from(id)).unwrap_or(&EMPTY)
}

// ---------------------------------------------------------------------------------------
// Public API.

/// A protobuf message kind the transcoder knows (an index into the schema table).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MessageType(u16);

impl MessageType {
    /// The message for a top-level kind, e.g. `("", "v1", "Pod")` or
    /// `("apps", "v1", "Deployment")`. `Status` is found as `("", "v1", "Status")` and also as
    /// `("meta.k8s.io", "v1", "Status")`. `None` for kinds the transcoder does not know.
    pub fn for_kind(group: &str, version: &str, kind: &str) -> Option<MessageType> {
        schema::ROOTS.iter().find(|(g, v, k, _)| *g == group && *v == version && *k == kind).map(|&(_, _, _, id)| MessageType(id))
    }

    /// The full protobuf message name, e.g. `k8s.io.api.core.v1.Pod`.
    pub fn proto_name(self) -> &'static str {
        message(self.0).name
    }
}

/// Why a conversion failed. Every variant carries the path of the offending field in JSON
/// terms (`spec.containers[0].ports[1].containerPort`, `metadata.labels[app]`); an empty path
/// means the top-level object.
#[derive(Debug, thiserror::Error)]
pub enum TranscodeError {
    /// A JSON value does not fit its field: wrong JSON type, integer out of range, a string
    /// that is not valid base64 / RFC 3339 time / Go duration, ...
    #[error("{}: expected {expected}, found {found}", show(.path))]
    InvalidJson {
        /// Where the value is.
        path: String,
        /// What the field accepts.
        expected: &'static str,
        /// What was found (a short description of the value).
        found: String,
    },
    /// The protobuf input ended in the middle of a field.
    #[error("{}: protobuf input is truncated", show(.path))]
    Truncated {
        /// The message or field being read.
        path: String,
    },
    /// A varint of more than 10 bytes.
    #[error("{}: malformed varint", show(.path))]
    BadVarint {
        /// The message or field being read.
        path: String,
    },
    /// A field key with tag 0 or a wire type that cannot be decoded (groups, 6, 7).
    #[error("{}: invalid field key (tag {tag}, wire type {wire_type})", show(.path))]
    BadKey {
        /// The message being read.
        path: String,
        /// The tag in the key.
        tag: u64,
        /// The wire type in the key.
        wire_type: u8,
    },
    /// A known field arrived with a wire type its schema type cannot have.
    #[error("{}: wire type {found} does not fit a field of type {expected}", show(.path))]
    WireTypeMismatch {
        /// The field.
        path: String,
        /// The field's schema type.
        expected: &'static str,
        /// The wire type found.
        found: u8,
    },
    /// A string field holds bytes that are not UTF-8.
    #[error("{}: string is not valid UTF-8", show(.path))]
    InvalidUtf8 {
        /// The field.
        path: String,
    },
    /// A protobuf value with no JSON form: an IntOrString type other than 0/1, a time outside
    /// years 0..=9999, a non-finite double, raw JSON bytes (FieldsV1, RawExtension) that do not
    /// parse.
    #[error("{}: {reason}", show(.path))]
    InvalidProto {
        /// The field.
        path: String,
        /// What is wrong.
        reason: String,
    },
    /// Messages nested deeper than the limit (only reachable with hostile input).
    #[error("{}: nested deeper than {limit} levels", show(.path))]
    TooDeep {
        /// Where the limit was hit.
        path: String,
        /// The limit.
        limit: usize,
    },
}

fn show(path: &str) -> &str {
    if path.is_empty() {
        "(top level)"
    } else {
        path
    }
}

impl TranscodeError {
    fn path_mut(&mut self) -> &mut String {
        match self {
            TranscodeError::InvalidJson { path, .. }
            | TranscodeError::Truncated { path }
            | TranscodeError::BadVarint { path }
            | TranscodeError::BadKey { path, .. }
            | TranscodeError::WireTypeMismatch { path, .. }
            | TranscodeError::InvalidUtf8 { path }
            | TranscodeError::InvalidProto { path, .. }
            | TranscodeError::TooDeep { path, .. } => path,
        }
    }

    /// Prefix the path with a field name (`spec` + `containers[0]`).
    fn in_field(mut self, name: &str) -> Self {
        if !name.is_empty() {
            let path = self.path_mut();
            let rest = std::mem::take(path);
            *path = if rest.is_empty() || rest.starts_with('[') { format!("{name}{rest}") } else { format!("{name}.{rest}") };
        }
        self
    }

    /// Prefix the path with an index or map key (`[3]`, `[app]`).
    fn in_item(mut self, item: impl std::fmt::Display) -> Self {
        let path = self.path_mut();
        let rest = std::mem::take(path);
        *path = if rest.is_empty() || rest.starts_with('[') { format!("[{item}]{rest}") } else { format!("[{item}].{rest}") };
        self
    }

    fn json(expected: &'static str, found: &Value) -> Self {
        TranscodeError::InvalidJson { path: String::new(), expected, found: describe(found) }
    }

    fn proto(reason: impl Into<String>) -> Self {
        TranscodeError::InvalidProto { path: String::new(), reason: reason.into() }
    }
}

/// A short description of a JSON value for error messages.
fn describe(v: &Value) -> String {
    match v {
        Value::Null => "null".to_owned(),
        Value::Bool(b) => format!("boolean {b}"),
        Value::Number(n) => format!("number {n}"),
        Value::String(s) if s.chars().count() <= 40 => format!("string {s:?}"),
        Value::String(_) => "a string".to_owned(),
        Value::Array(_) => "an array".to_owned(),
        Value::Object(_) => "an object".to_owned(),
    }
}

/// Encode a JSON object as the kind's bare protobuf message bytes. `kind` and `apiVersion`
/// keys are ignored (TypeMeta is not part of the bare message), as are other unknown keys.
pub fn json_to_pb(ty: MessageType, value: &Value) -> Result<Vec<u8>, TranscodeError> {
    let mut buf = Vec::with_capacity(512);
    encode_message_body(message(ty.0), value, &mut buf, 0)?;
    Ok(buf)
}

/// Decode bare protobuf message bytes into JSON: an object with keys in schema (tag) order,
/// without `kind`/`apiVersion`, fields absent on the wire left out. Unknown fields are skipped.
pub fn pb_to_json(ty: MessageType, bytes: &[u8]) -> Result<Value, TranscodeError> {
    decode_message(message(ty.0), bytes, 0)
}

// ---------------------------------------------------------------------------------------
// Wire format helpers.

const WT_VARINT: u8 = 0;
const WT_I64: u8 = 1;
const WT_LEN: u8 = 2;
const WT_I32: u8 = 5;

fn put_varint(buf: &mut Vec<u8>, mut v: u64) {
    while v >= 0x80 {
        buf.push((v as u8) | 0x80);
        v >>= 7;
    }
    buf.push(v as u8);
}

fn varint_len(v: u64) -> usize {
    let bits = 64 - (v | 1).leading_zeros() as usize;
    bits.div_ceil(7)
}

fn put_key(buf: &mut Vec<u8>, tag: u32, wire_type: u8) {
    put_varint(buf, (u64::from(tag) << 3) | u64::from(wire_type));
}

fn put_len_delimited(buf: &mut Vec<u8>, tag: u32, data: &[u8]) {
    put_key(buf, tag, WT_LEN);
    put_varint(buf, data.len() as u64);
    buf.extend_from_slice(data);
}

/// Write `tag` + length + whatever `body` appends, without a separate buffer: one length byte
/// is reserved and the body is shifted only when its length needs more.
fn put_nested<F>(buf: &mut Vec<u8>, tag: u32, body: F) -> Result<(), TranscodeError>
where
    F: FnOnce(&mut Vec<u8>) -> Result<(), TranscodeError>,
{
    put_key(buf, tag, WT_LEN);
    let at = buf.len();
    buf.push(0);
    body(buf)?;
    let len = (buf.len() - at - 1) as u64;
    let n = varint_len(len);
    if n > 1 {
        buf.splice(at + 1..at + 1, std::iter::repeat_n(0, n - 1));
    }
    let mut enc = Vec::with_capacity(n);
    put_varint(&mut enc, len);
    buf[at..at + n].copy_from_slice(&enc);
    Ok(())
}

/// A cursor over protobuf bytes. Errors carry an empty path; callers add it.
struct Reader<'a> {
    buf: &'a [u8],
    pos: usize,
}

impl<'a> Reader<'a> {
    fn new(buf: &'a [u8]) -> Self {
        Reader { buf, pos: 0 }
    }

    fn done(&self) -> bool {
        self.pos >= self.buf.len()
    }

    fn varint(&mut self) -> Result<u64, TranscodeError> {
        let mut v = 0u64;
        for i in 0..10 {
            let Some(&b) = self.buf.get(self.pos) else {
                return Err(TranscodeError::Truncated { path: String::new() });
            };
            self.pos += 1;
            v |= u64::from(b & 0x7f) << (7 * i);
            if b < 0x80 {
                return Ok(v);
            }
        }
        Err(TranscodeError::BadVarint { path: String::new() })
    }

    fn take(&mut self, n: usize) -> Result<&'a [u8], TranscodeError> {
        let end = self.pos.checked_add(n).filter(|&e| e <= self.buf.len());
        match end {
            Some(end) => {
                let s = &self.buf[self.pos..end];
                self.pos = end;
                Ok(s)
            }
            None => Err(TranscodeError::Truncated { path: String::new() }),
        }
    }

    fn len_delimited(&mut self) -> Result<&'a [u8], TranscodeError> {
        let n = self.varint()?;
        let n = usize::try_from(n).map_err(|_| TranscodeError::Truncated { path: String::new() })?;
        self.take(n)
    }

    /// Read a field key: (tag, wire type).
    fn key(&mut self) -> Result<(u64, u8), TranscodeError> {
        let k = self.varint()?;
        let tag = k >> 3;
        let wt = (k & 7) as u8;
        if tag == 0 || tag > u64::from(u32::MAX >> 3) || !matches!(wt, 0 | 1 | 2 | 5) {
            return Err(TranscodeError::BadKey { path: String::new(), tag, wire_type: wt });
        }
        Ok((tag, wt))
    }

    /// Skip a value of the given wire type.
    fn skip(&mut self, wt: u8) -> Result<(), TranscodeError> {
        match wt {
            WT_VARINT => self.varint().map(drop),
            WT_I64 => self.take(8).map(drop),
            WT_LEN => self.len_delimited().map(drop),
            WT_I32 => self.take(4).map(drop),
            _ => Err(TranscodeError::BadKey { path: String::new(), tag: 0, wire_type: wt }),
        }
    }
}

// ---------------------------------------------------------------------------------------
// JSON -> protobuf.

/// Where a JSON key of a message goes: a direct field (index) or a field inside an inline
/// field.
enum Slot<'v> {
    Value(&'v Value),
    Inline(Vec<(usize, Slot<'v>)>),
}

/// Find the field for a JSON key: exact JSON name, then case- and underscore-insensitive
/// against the Rust name; then inside inline fields. Returns the index path.
fn lookup(msg: &MessageDesc, key: &str, path: &mut Vec<usize>, depth: usize) -> bool {
    if let Some(i) = msg.fields.iter().position(|f| !f.inline && f.json == key) {
        path.push(i);
        return true;
    }
    if let Some(i) = msg.fields.iter().position(|f| !f.inline && loose_eq(key, f.name)) {
        path.push(i);
        return true;
    }
    if depth >= 8 {
        return false;
    }
    for (i, f) in msg.fields.iter().enumerate() {
        if let (true, FieldKind::Message(id)) = (f.inline, f.kind) {
            path.push(i);
            if lookup(message(id), key, path, depth + 1) {
                return true;
            }
            path.pop();
        }
    }
    false
}

/// Whether the field at `path` is a single Time or MicroTime: Go's JSON writes `null` for a
/// zero non-pointer time (`creationTimestamp` of a template or bookmark) and its protobuf an
/// empty message, so a `null` there is written as an empty message. Other `null`s are absent.
fn is_time_field(msg: &MessageDesc, path: &[usize]) -> bool {
    let mut msg = msg;
    for (n, &i) in path.iter().enumerate() {
        let Some(f) = msg.fields.get(i) else {
            return false;
        };
        let FieldKind::Message(id) = f.kind else {
            return false;
        };
        let m = message(id);
        if n + 1 == path.len() {
            return !f.repeated && matches!(m.special, Special::Time | Special::MicroTime);
        }
        msg = m;
    }
    false
}

/// `hostIPC` ~ `host_ipc`: equal ignoring ASCII case and underscores.
fn loose_eq(a: &str, b: &str) -> bool {
    let mut x = a.bytes().filter(|&c| c != b'_');
    let mut y = b.bytes().filter(|&c| c != b'_');
    loop {
        match (x.next(), y.next()) {
            (None, None) => return true,
            (Some(c), Some(d)) if c.eq_ignore_ascii_case(&d) => {}
            _ => return false,
        }
    }
}

fn insert_slot<'v>(slots: &mut Vec<(usize, Slot<'v>)>, path: &[usize], v: &'v Value) {
    match path {
        [] => {}
        [i] => slots.push((*i, Slot::Value(v))),
        [i, rest @ ..] => {
            let pos = slots.iter().position(|(j, s)| j == i && matches!(s, Slot::Inline(_)));
            let idx = match pos {
                Some(p) => p,
                None => {
                    slots.push((*i, Slot::Inline(Vec::new())));
                    slots.len() - 1
                }
            };
            if let Some((_, Slot::Inline(inner))) = slots.get_mut(idx) {
                insert_slot(inner, rest, v);
            }
        }
    }
}

/// Add an (empty) entry for every inline field not yet present, recursively, so that inline
/// fields are always written like Go's non-pointer embedded structs.
fn complete_inline(msg: &MessageDesc, slots: &mut Vec<(usize, Slot<'_>)>, depth: usize) {
    for (i, f) in msg.fields.iter().enumerate() {
        if let (true, FieldKind::Message(id)) = (f.inline, f.kind) {
            let pos = slots.iter().position(|(j, _)| *j == i);
            let idx = match pos {
                Some(p) => p,
                None => {
                    slots.push((i, Slot::Inline(Vec::new())));
                    slots.len() - 1
                }
            };
            if depth < 8 {
                if let Some((_, Slot::Inline(inner))) = slots.get_mut(idx) {
                    complete_inline(message(id), inner, depth + 1);
                }
            }
        }
    }
}

/// Encode a JSON value as the body of `msg` (special messages included).
fn encode_message_body(msg: &MessageDesc, value: &Value, buf: &mut Vec<u8>, depth: usize) -> Result<(), TranscodeError> {
    if depth > MAX_DEPTH {
        return Err(TranscodeError::TooDeep { path: String::new(), limit: MAX_DEPTH });
    }
    if msg.special != Special::None {
        return encode_special(msg.special, value, buf);
    }
    let Value::Object(obj) = value else {
        return Err(TranscodeError::json("an object", value));
    };
    let mut slots: Vec<(usize, Slot<'_>)> = Vec::with_capacity(obj.len());
    let mut path = Vec::with_capacity(2);
    for (k, v) in obj {
        path.clear();
        if lookup(msg, k, &mut path, 0) && (!v.is_null() || is_time_field(msg, &path)) {
            insert_slot(&mut slots, &path, v);
        }
    }
    complete_inline(msg, &mut slots, 0);
    encode_slots(msg, slots, buf, depth)
}

fn encode_slots(msg: &MessageDesc, mut slots: Vec<(usize, Slot<'_>)>, buf: &mut Vec<u8>, depth: usize) -> Result<(), TranscodeError> {
    // Tag order; of two keys for the same field (e.g. `hostIPC` and `hostipc`) the last wins.
    slots.sort_by_key(|(i, _)| *i);
    let mut iter = slots.into_iter().peekable();
    while let Some((i, slot)) = iter.next() {
        if matches!(iter.peek(), Some((j, _)) if *j == i) {
            continue;
        }
        let Some(f) = msg.fields.get(i) else { continue };
        match slot {
            Slot::Value(v) => encode_field(f, v, buf, depth).map_err(|e| e.in_field(f.json))?,
            Slot::Inline(inner) => {
                if let FieldKind::Message(id) = f.kind {
                    put_nested(buf, f.tag, |b| encode_slots(message(id), inner, b, depth + 1))?;
                }
            }
        }
    }
    Ok(())
}

fn encode_field(f: &FieldDesc, v: &Value, buf: &mut Vec<u8>, depth: usize) -> Result<(), TranscodeError> {
    if let FieldKind::Map(mv) = f.kind {
        return encode_map(f.tag, mv, v, buf, depth);
    }
    if f.repeated {
        let Value::Array(items) = v else {
            return Err(TranscodeError::json("an array", v));
        };
        for (i, item) in items.iter().enumerate() {
            encode_single(f.kind, f.tag, item, buf, depth).map_err(|e| e.in_item(i))?;
        }
        return Ok(());
    }
    encode_single(f.kind, f.tag, v, buf, depth)
}

fn encode_map(tag: u32, mv: MapValue, v: &Value, buf: &mut Vec<u8>, depth: usize) -> Result<(), TranscodeError> {
    let Value::Object(obj) = v else {
        return Err(TranscodeError::json("an object", v));
    };
    let mut entries: Vec<(&String, &Value)> = obj.iter().collect();
    entries.sort_unstable_by(|a, b| a.0.cmp(b.0));
    for (k, val) in entries {
        put_nested(buf, tag, |b| {
            put_len_delimited(b, 1, k.as_bytes());
            match mv {
                MapValue::String => encode_single(FieldKind::String, 2, val, b, depth),
                MapValue::Bytes => encode_single(FieldKind::Bytes, 2, val, b, depth),
                MapValue::Message(id) => encode_single(FieldKind::Message(id), 2, val, b, depth),
            }
        })
        .map_err(|e| e.in_item(k))?;
    }
    Ok(())
}

/// Encode one value (not a list, not a map) as field `tag`. A `null` (inside a list or map)
/// is written as the type's zero value, which is what Go decodes it to.
fn encode_single(kind: FieldKind, tag: u32, v: &Value, buf: &mut Vec<u8>, depth: usize) -> Result<(), TranscodeError> {
    match kind {
        FieldKind::String => {
            let s = match v {
                Value::String(s) => s.as_str(),
                Value::Null => "",
                _ => return Err(TranscodeError::json("a string", v)),
            };
            put_len_delimited(buf, tag, s.as_bytes());
        }
        FieldKind::Bytes => {
            let data = match v {
                Value::String(s) => BASE64.decode(s).map_err(|_| TranscodeError::json("a base64 string", v))?,
                Value::Null => Vec::new(),
                _ => return Err(TranscodeError::json("a base64 string", v)),
            };
            put_len_delimited(buf, tag, &data);
        }
        FieldKind::Bool => {
            let b = match v {
                Value::Bool(b) => *b,
                Value::Null => false,
                _ => return Err(TranscodeError::json("a boolean", v)),
            };
            put_key(buf, tag, WT_VARINT);
            buf.push(u8::from(b));
        }
        FieldKind::Int32 => {
            let n = match v {
                Value::Null => 0,
                _ => json_int(v).and_then(|n| i32::try_from(n).ok()).ok_or_else(|| TranscodeError::json("a 32-bit integer", v))?,
            };
            put_key(buf, tag, WT_VARINT);
            put_varint(buf, i64::from(n) as u64);
        }
        FieldKind::Int64 => {
            let n = match v {
                Value::Null => 0,
                _ => json_int(v).ok_or_else(|| TranscodeError::json("a 64-bit integer", v))?,
            };
            put_key(buf, tag, WT_VARINT);
            put_varint(buf, n as u64);
        }
        FieldKind::Double => {
            let x = match v {
                Value::Null => 0.0,
                Value::Number(n) => n.as_f64().ok_or_else(|| TranscodeError::json("a number", v))?,
                _ => return Err(TranscodeError::json("a number", v)),
            };
            put_key(buf, tag, WT_I64);
            buf.extend_from_slice(&x.to_le_bytes());
        }
        FieldKind::Message(id) => {
            let msg = message(id);
            if v.is_null() && msg.special == Special::None {
                put_nested(buf, tag, |_| Ok(()))?;
            } else {
                put_nested(buf, tag, |b| encode_message_body(msg, v, b, depth + 1))?;
            }
        }
        FieldKind::Map(_) => return Err(TranscodeError::json("not a nested map", v)),
    }
    Ok(())
}

/// An integral JSON number as i64 (Go rejects fractions and strings for integer fields).
fn json_int(v: &Value) -> Option<i64> {
    match v {
        Value::Number(n) => n.as_i64(),
        _ => None,
    }
}

fn encode_special(special: Special, v: &Value, buf: &mut Vec<u8>) -> Result<(), TranscodeError> {
    match special {
        Special::Time | Special::MicroTime => {
            let (secs, nanos) = match v {
                Value::Null => (GO_ZERO_TIME_UNIX, 0),
                Value::String(s) => parse_rfc3339(s).ok_or_else(|| TranscodeError::json("an RFC 3339 time", v))?,
                _ => return Err(TranscodeError::json("an RFC 3339 time", v)),
            };
            // Go writes its zero time (also `null`) as an empty message.
            if (secs, nanos) != (GO_ZERO_TIME_UNIX, 0) {
                put_key(buf, 1, WT_VARINT);
                put_varint(buf, secs as u64);
                put_key(buf, 2, WT_VARINT);
                put_varint(buf, i64::from(nanos) as u64);
            }
        }
        Special::Duration => {
            let d = match v {
                Value::String(s) => parse_go_duration(s).ok_or_else(|| TranscodeError::json("a Go duration", v))?,
                _ => return Err(TranscodeError::json("a Go duration string", v)),
            };
            put_key(buf, 1, WT_VARINT);
            put_varint(buf, d as u64);
        }
        Special::Quantity => {
            let s = match v {
                Value::String(s) => s.clone(),
                Value::Number(n) => n.to_string(),
                _ => return Err(TranscodeError::json("a quantity string", v)),
            };
            put_len_delimited(buf, 1, s.as_bytes());
        }
        Special::IntOrString => {
            let (ty, int_val, str_val) = match v {
                Value::String(s) => (1u64, 0i32, s.as_str()),
                Value::Number(_) => {
                    let n = json_int(v)
                        .and_then(|n| i32::try_from(n).ok())
                        .ok_or_else(|| TranscodeError::json("a 32-bit integer or a string", v))?;
                    (0, n, "")
                }
                _ => return Err(TranscodeError::json("a 32-bit integer or a string", v)),
            };
            put_key(buf, 1, WT_VARINT);
            put_varint(buf, ty);
            put_key(buf, 2, WT_VARINT);
            put_varint(buf, i64::from(int_val) as u64);
            put_len_delimited(buf, 3, str_val.as_bytes());
        }
        Special::FieldsV1 | Special::RawExtension => {
            if !v.is_null() {
                put_len_delimited(buf, 1, go_compact_json(v)?.as_bytes());
            }
        }
        Special::None => {}
    }
    Ok(())
}

/// Compact JSON the way Go's encoder writes it: `<`, `>`, `&`, U+2028 and U+2029 escaped.
/// Those characters can only occur inside JSON strings, so replacing them in the serialized
/// text is safe.
fn go_compact_json(v: &Value) -> Result<String, TranscodeError> {
    let s = serde_json::to_string(v).map_err(|e| TranscodeError::proto(e.to_string()))?;
    if !s.contains(['<', '>', '&', '\u{2028}', '\u{2029}']) {
        return Ok(s);
    }
    let mut out = String::with_capacity(s.len() + 16);
    for c in s.chars() {
        match c {
            '<' => out.push_str("\\u003c"),
            '>' => out.push_str("\\u003e"),
            '&' => out.push_str("\\u0026"),
            '\u{2028}' => out.push_str("\\u2028"),
            '\u{2029}' => out.push_str("\\u2029"),
            c => out.push(c),
        }
    }
    Ok(out)
}

// ---------------------------------------------------------------------------------------
// protobuf -> JSON.

fn decode_message(msg: &MessageDesc, bytes: &[u8], depth: usize) -> Result<Value, TranscodeError> {
    if depth > MAX_DEPTH {
        return Err(TranscodeError::TooDeep { path: String::new(), limit: MAX_DEPTH });
    }
    if msg.special != Special::None {
        return decode_special(msg.special, bytes);
    }
    let mut slots: Vec<Option<Value>> = vec![None; msg.fields.len()];
    let mut r = Reader::new(bytes);
    while !r.done() {
        let (tag, wt) = r.key()?;
        let Ok(i) = msg.fields.binary_search_by_key(&tag, |f| u64::from(f.tag)) else {
            r.skip(wt)?;
            continue;
        };
        let f = &msg.fields[i];
        // Inline fields have no JSON name: their fields' paths read as the parent's.
        decode_field(f, wt, &mut r, &mut slots[i], depth).map_err(|e| e.in_field(f.json))?;
    }
    let mut out = Map::with_capacity(slots.len());
    for (f, slot) in msg.fields.iter().zip(slots) {
        match slot {
            None => {}
            Some(Value::Object(inner)) if f.inline => out.extend(inner),
            Some(v) => {
                out.insert(f.json.to_owned(), v);
            }
        }
    }
    Ok(Value::Object(out))
}

fn wire_type_name(kind: FieldKind) -> &'static str {
    match kind {
        FieldKind::String => "string",
        FieldKind::Bytes => "bytes",
        FieldKind::Bool => "bool",
        FieldKind::Int32 => "int32",
        FieldKind::Int64 => "int64",
        FieldKind::Double => "double",
        FieldKind::Message(_) => "message",
        FieldKind::Map(_) => "map",
    }
}

fn scalar_wire_type(kind: FieldKind) -> u8 {
    match kind {
        FieldKind::Bool | FieldKind::Int32 | FieldKind::Int64 => WT_VARINT,
        FieldKind::Double => WT_I64,
        _ => WT_LEN,
    }
}

fn decode_field(f: &FieldDesc, wt: u8, r: &mut Reader<'_>, slot: &mut Option<Value>, depth: usize) -> Result<(), TranscodeError> {
    let mismatch = || TranscodeError::WireTypeMismatch { path: String::new(), expected: wire_type_name(f.kind), found: wt };
    if let FieldKind::Map(mv) = f.kind {
        if wt != WT_LEN {
            return Err(mismatch());
        }
        let entry = r.len_delimited()?;
        let (k, v) = decode_map_entry(mv, entry, depth)?;
        if !matches!(slot, Some(Value::Object(_))) {
            *slot = Some(Value::Object(Map::new()));
        }
        if let Some(Value::Object(m)) = slot {
            m.insert(k, v);
        }
        return Ok(());
    }
    let natural = scalar_wire_type(f.kind);
    if f.repeated {
        if !matches!(slot, Some(Value::Array(_))) {
            *slot = Some(Value::Array(Vec::new()));
        }
        let Some(Value::Array(items)) = slot else {
            return Ok(());
        };
        if wt == WT_LEN && natural != WT_LEN {
            // Packed repeated scalars.
            let data = r.len_delimited()?;
            let mut pr = Reader::new(data);
            while !pr.done() {
                let n = items.len();
                items.push(decode_single(f.kind, natural, &mut pr, depth).map_err(|e| e.in_item(n))?);
            }
            return Ok(());
        }
        if wt != natural {
            return Err(mismatch());
        }
        let n = items.len();
        items.push(decode_single(f.kind, wt, r, depth).map_err(|e| e.in_item(n))?);
        return Ok(());
    }
    if wt != natural {
        return Err(mismatch());
    }
    *slot = Some(decode_single(f.kind, wt, r, depth)?);
    Ok(())
}

fn decode_map_entry(mv: MapValue, entry: &[u8], depth: usize) -> Result<(String, Value), TranscodeError> {
    let kind = match mv {
        MapValue::String => FieldKind::String,
        MapValue::Bytes => FieldKind::Bytes,
        MapValue::Message(id) => FieldKind::Message(id),
    };
    let mut key = String::new();
    let mut value = None;
    let mut r = Reader::new(entry);
    while !r.done() {
        let (tag, wt) = r.key()?;
        match tag {
            1 if wt == WT_LEN => match decode_single(FieldKind::String, wt, &mut r, depth)? {
                Value::String(s) => key = s,
                _ => key.clear(),
            },
            2 if wt == WT_LEN => value = Some(decode_single(kind, wt, &mut r, depth)?),
            1 | 2 => {
                return Err(TranscodeError::WireTypeMismatch {
                    path: String::new(),
                    expected: if tag == 1 { "string" } else { wire_type_name(kind) },
                    found: wt,
                })
            }
            _ => r.skip(wt)?,
        }
    }
    let value = match value {
        Some(v) => v,
        None => decode_single(kind, WT_LEN, &mut Reader::new(&[0]), depth)?,
    };
    Ok((key, value))
}

fn decode_single(kind: FieldKind, wt: u8, r: &mut Reader<'_>, depth: usize) -> Result<Value, TranscodeError> {
    Ok(match (kind, wt) {
        (FieldKind::String, WT_LEN) => Value::String(utf8(r.len_delimited()?)?),
        (FieldKind::Bytes, WT_LEN) => Value::String(BASE64.encode(r.len_delimited()?)),
        (FieldKind::Bool, WT_VARINT) => Value::Bool(r.varint()? != 0),
        (FieldKind::Int32, WT_VARINT) => Value::from(r.varint()? as i32),
        (FieldKind::Int64, WT_VARINT) => Value::from(r.varint()? as i64),
        (FieldKind::Double, WT_I64) => {
            let b = r.take(8)?;
            let mut a = [0u8; 8];
            a.copy_from_slice(b);
            let x = f64::from_le_bytes(a);
            Value::Number(Number::from_f64(x).ok_or_else(|| TranscodeError::proto("double is not finite"))?)
        }
        (FieldKind::Message(id), WT_LEN) => {
            let data = r.len_delimited()?;
            decode_message(message(id), data, depth + 1)?
        }
        _ => return Err(TranscodeError::WireTypeMismatch { path: String::new(), expected: wire_type_name(kind), found: wt }),
    })
}

fn utf8(b: &[u8]) -> Result<String, TranscodeError> {
    String::from_utf8(b.to_vec()).map_err(|_| TranscodeError::InvalidUtf8 { path: String::new() })
}

/// The scalar fields of a special message, read leniently (unknown fields skipped).
#[derive(Default)]
struct SpecialFields<'a> {
    v1: Option<u64>,
    v2: Option<u64>,
    b1: Option<&'a [u8]>,
    b3: Option<&'a [u8]>,
}

fn read_special(bytes: &[u8]) -> Result<SpecialFields<'_>, TranscodeError> {
    let mut s = SpecialFields::default();
    let mut r = Reader::new(bytes);
    while !r.done() {
        let (tag, wt) = r.key()?;
        match (tag, wt) {
            (1, WT_VARINT) => s.v1 = Some(r.varint()?),
            (2, WT_VARINT) => s.v2 = Some(r.varint()?),
            (1, WT_LEN) => s.b1 = Some(r.len_delimited()?),
            (3, WT_LEN) => s.b3 = Some(r.len_delimited()?),
            _ => r.skip(wt)?,
        }
    }
    Ok(s)
}

fn decode_special(special: Special, bytes: &[u8]) -> Result<Value, TranscodeError> {
    let s = read_special(bytes)?;
    Ok(match special {
        // Go writes the zero time as an empty message, and reads one back as the zero time.
        Special::Time | Special::MicroTime if bytes.is_empty() => Value::Null,
        Special::Time | Special::MicroTime => {
            let secs = s.v1.unwrap_or(0) as i64;
            let nanos = s.v2.unwrap_or(0) as i32;
            if secs == GO_ZERO_TIME_UNIX && nanos == 0 {
                Value::Null
            } else {
                let micro = special == Special::MicroTime;
                Value::String(
                    format_rfc3339(secs, nanos, micro)
                        .ok_or_else(|| TranscodeError::proto(format!("time {secs}s {nanos}ns has no RFC 3339 form")))?,
                )
            }
        }
        Special::Duration => Value::String(format_go_duration(s.v1.unwrap_or(0) as i64)),
        Special::Quantity => match s.b1 {
            Some(b) => Value::String(utf8(b)?),
            None => Value::String("0".to_owned()),
        },
        Special::IntOrString => match s.v1.unwrap_or(0) {
            0 => Value::from(s.v2.unwrap_or(0) as i32),
            1 => Value::String(utf8(s.b3.unwrap_or_default())?),
            t => return Err(TranscodeError::proto(format!("IntOrString type {t} is not 0 or 1"))),
        },
        Special::FieldsV1 | Special::RawExtension => match s.b1 {
            None | Some([]) => Value::Null,
            Some(b) => serde_json::from_slice(b).map_err(|e| TranscodeError::proto(format!("raw bytes are not JSON: {e}")))?,
        },
        Special::None => Value::Null,
    })
}

// ---------------------------------------------------------------------------------------
// Time and duration formats (no date crate: civil-from-days arithmetic).

fn digits(s: &[u8]) -> Option<i64> {
    if s.is_empty() || !s.iter().all(u8::is_ascii_digit) {
        return None;
    }
    Some(s.iter().fold(0i64, |a, &c| a * 10 + i64::from(c - b'0')))
}

/// Parse `YYYY-MM-DDTHH:MM:SS[.frac](Z|±HH:MM)` into Unix seconds and nanoseconds.
fn parse_rfc3339(s: &str) -> Option<(i64, i32)> {
    let b = s.as_bytes();
    if b.len() < 20 || b[4] != b'-' || b[7] != b'-' || !matches!(b[10], b'T' | b't') {
        return None;
    }
    if b[13] != b':' || b[16] != b':' {
        return None;
    }
    let (year, month, day) = (digits(&b[0..4])?, digits(&b[5..7])?, digits(&b[8..10])?);
    let (hour, min, sec) = (digits(&b[11..13])?, digits(&b[14..16])?, digits(&b[17..19])?);
    let mut rest = &b[19..];
    let mut nanos = 0i64;
    if let [b'.', tail @ ..] = rest {
        let n = tail.iter().take_while(|c| c.is_ascii_digit()).count();
        if n == 0 || n > 9 {
            return None;
        }
        nanos = digits(&tail[..n])? * 10i64.pow(9 - n as u32);
        rest = &tail[n..];
    }
    let offset = match rest {
        [b'Z' | b'z'] => 0,
        [sign @ (b'+' | b'-'), h1, h2, b':', m1, m2] => {
            let h = digits(&[*h1, *h2])?;
            let m = digits(&[*m1, *m2])?;
            if h > 23 || m > 59 {
                return None;
            }
            let o = h * 3600 + m * 60;
            if *sign == b'-' {
                -o
            } else {
                o
            }
        }
        _ => return None,
    };
    let leap = (year % 4 == 0 && year % 100 != 0) || year % 400 == 0;
    let mdays = [31, if leap { 29 } else { 28 }, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31];
    if !(1..=12).contains(&month) || day < 1 || day > mdays[(month - 1) as usize] {
        return None;
    }
    if hour > 23 || min > 59 || sec > 59 {
        return None;
    }
    let secs = days_from_civil(year, month, day) * 86_400 + hour * 3600 + min * 60 + sec - offset;
    Some((secs, nanos as i32))
}

/// Format Unix seconds as RFC 3339 UTC: `2026-11-22T02:05:06Z`, or with `micro` the
/// MicroTime form `2026-11-22T02:05:06.123456Z`. `None` outside years 0..=9999 (Go's
/// encoder refuses those too).
fn format_rfc3339(secs: i64, nanos: i32, micro: bool) -> Option<String> {
    // Go normalizes nanos outside [0, 1e9) into the seconds.
    let total = i128::from(secs) * 1_000_000_000 + i128::from(nanos);
    let secs = i64::try_from(total.div_euclid(1_000_000_000)).ok()?;
    let nanos = total.rem_euclid(1_000_000_000) as i64;
    let days = secs.div_euclid(86_400);
    let sod = secs.rem_euclid(86_400);
    let (y, m, d) = civil_from_days(days);
    if !(0..=9999).contains(&y) {
        return None;
    }
    let (hh, mm, ss) = (sod / 3600, sod % 3600 / 60, sod % 60);
    Some(if micro {
        format!("{y:04}-{m:02}-{d:02}T{hh:02}:{mm:02}:{ss:02}.{:06}Z", nanos / 1000)
    } else {
        format!("{y:04}-{m:02}-{d:02}T{hh:02}:{mm:02}:{ss:02}Z")
    })
}

/// Go's `time.Duration.String()`: `0s`, `1.5ms`, `2µs`, `5m0s`, `1h2m3.5s`.
fn format_go_duration(d: i64) -> String {
    let neg = d < 0;
    let u = d.unsigned_abs();
    /// `v / 10^prec` with the fraction's trailing zeros (and a bare point) dropped.
    fn frac(v: u64, prec: u32) -> String {
        let p = 10u64.pow(prec);
        let (int, f) = (v / p, v % p);
        if f == 0 {
            return int.to_string();
        }
        let fs = format!("{f:0width$}", width = prec as usize);
        format!("{int}.{}", fs.trim_end_matches('0'))
    }
    let body = if u == 0 {
        "0s".to_owned()
    } else if u < 1_000 {
        format!("{u}ns")
    } else if u < 1_000_000 {
        format!("{}µs", frac(u, 3))
    } else if u < 1_000_000_000 {
        format!("{}ms", frac(u, 6))
    } else {
        let secs = frac(u % 60_000_000_000, 9);
        let mins = u / 60_000_000_000;
        if mins == 0 {
            format!("{secs}s")
        } else if mins < 60 {
            format!("{mins}m{secs}s")
        } else {
            format!("{}h{}m{secs}s", mins / 60, mins % 60)
        }
    };
    if neg {
        format!("-{body}")
    } else {
        body
    }
}

/// Go's `time.ParseDuration`: `[-+]` then one or more `<decimal><unit>` with units ns, us,
/// µs, μs, ms, s, m, h; a bare `0` is allowed.
fn parse_go_duration(s: &str) -> Option<i64> {
    let (neg, mut rest) = match s.as_bytes().first() {
        Some(b'-') => (true, &s[1..]),
        Some(b'+') => (false, &s[1..]),
        _ => (false, s),
    };
    if rest == "0" {
        return Some(0);
    }
    if rest.is_empty() {
        return None;
    }
    let mut total: u128 = 0;
    while !rest.is_empty() {
        let int_len = rest.bytes().take_while(u8::is_ascii_digit).count();
        let int_part = &rest[..int_len];
        rest = &rest[int_len..];
        let mut frac_part = "";
        if let Some(tail) = rest.strip_prefix('.') {
            let n = tail.bytes().take_while(u8::is_ascii_digit).count();
            frac_part = &tail[..n];
            rest = &tail[n..];
        }
        if int_part.is_empty() && frac_part.is_empty() {
            return None;
        }
        let unit_len = rest.char_indices().find(|&(_, c)| c == '.' || c.is_ascii_digit()).map_or(rest.len(), |(i, _)| i);
        let unit: u128 = match &rest[..unit_len] {
            "ns" => 1,
            "us" | "µs" | "μs" => 1_000,
            "ms" => 1_000_000,
            "s" => 1_000_000_000,
            "m" => 60_000_000_000,
            "h" => 3_600_000_000_000,
            _ => return None,
        };
        rest = &rest[unit_len..];
        let mut v: u128 = 0;
        for c in int_part.bytes() {
            v = v.checked_mul(10)?.checked_add(u128::from(c - b'0'))?;
            if v > u128::from(u64::MAX) {
                return None;
            }
        }
        total = total.checked_add(v.checked_mul(unit)?)?;
        let mut scale: u128 = 1;
        let mut f: u128 = 0;
        for c in frac_part.bytes().take(18) {
            f = f * 10 + u128::from(c - b'0');
            scale *= 10;
        }
        total = total.checked_add(f * unit / scale)?;
        if total > 1u128 << 63 {
            return None;
        }
    }
    if neg {
        Some((total as i128).checked_neg().and_then(|x| i64::try_from(x).ok())?)
    } else {
        i64::try_from(total).ok()
    }
}

#[cfg(test)]
mod tests {
    //! Unit tests plus checks against the real kube-apiserver captures in `shared/golden`.
    //!
    //! Why the normalizer: the apiserver's protobuf carries every non-pointer Go field, empty
    //! or not (`generateName: ""`, `hostNetwork: false`, `retryAfterSeconds: 0`), while its
    //! JSON leaves those out (`omitempty`). Neither side can be derived from the other, so
    //! JSON-vs-protobuf comparisons drop empty strings, zeros, `false`, `null` and empty
    //! objects/arrays on both sides before comparing; everything with content must agree.
    //! Round trips within one encoding are compared exactly.

    use super::*;
    use proptest::prelude::*;
    use serde_json::json;

    const GOLDEN: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../shared/golden");

    fn golden(name: &str) -> Vec<u8> {
        std::fs::read(format!("{GOLDEN}/{name}")).unwrap()
    }

    fn golden_json(name: &str) -> Value {
        serde_json::from_slice(&golden(name)).unwrap()
    }

    fn ty(kind: &str) -> MessageType {
        let group = if kind == "Deployment" { "apps" } else { "" };
        MessageType::for_kind(group, "v1", kind).unwrap()
    }

    /// Every (tag, wire type, payload) of a message; payload is the LEN body or the varint
    /// as little-endian bytes. Test-only, panics on bad input.
    fn fields(bytes: &[u8]) -> Vec<(u64, u8, Vec<u8>)> {
        let mut r = Reader::new(bytes);
        let mut out = Vec::new();
        while !r.done() {
            let (tag, wt) = r.key().unwrap();
            let payload = match wt {
                WT_LEN => r.len_delimited().unwrap().to_vec(),
                WT_VARINT => r.varint().unwrap().to_le_bytes().to_vec(),
                WT_I64 => r.take(8).unwrap().to_vec(),
                _ => r.take(4).unwrap().to_vec(),
            };
            out.push((tag, wt, payload));
        }
        out
    }

    /// `k8s\0` + runtime.Unknown{1: TypeMeta{1: apiVersion, 2: kind}, 2: raw, 3: "", 4: ""}
    /// -> (kind, raw).
    fn unwrap_unknown(body: &[u8]) -> (String, Vec<u8>) {
        assert_eq!(&body[..4], b"k8s\0");
        let f = fields(&body[4..]);
        let type_meta = fields(&f.iter().find(|x| x.0 == 1).unwrap().2);
        let kind = type_meta.iter().find(|x| x.0 == 2).unwrap().2.clone();
        let raw = f.iter().find(|x| x.0 == 2).unwrap().2.clone();
        (String::from_utf8(kind).unwrap(), raw)
    }

    /// The items (repeated field 2) of a list message (field 1 is ListMeta).
    fn list_items(raw: &[u8]) -> Vec<Vec<u8>> {
        fields(raw).into_iter().filter(|x| x.0 == 2).map(|x| x.2).collect()
    }

    /// The objects of a protobuf watch stream: 4-byte big-endian frame length, WatchEvent
    /// {1: type, 2: RawExtension{1: raw}} with raw a `k8s\0` envelope -> (kind, raw object).
    fn watch_objects(body: &[u8]) -> Vec<(String, Vec<u8>)> {
        let mut out = Vec::new();
        let mut rest = body;
        while rest.len() >= 4 {
            let n = u32::from_be_bytes([rest[0], rest[1], rest[2], rest[3]]) as usize;
            let frame = &rest[4..4 + n];
            rest = &rest[4 + n..];
            let ev = fields(frame);
            let ext = fields(&ev.iter().find(|x| x.0 == 2).unwrap().2);
            out.push(unwrap_unknown(&ext.iter().find(|x| x.0 == 1).unwrap().2));
        }
        out
    }

    fn without_type_meta(v: &Value) -> Value {
        let mut v = v.clone();
        if let Value::Object(m) = &mut v {
            m.shift_remove("kind");
            m.shift_remove("apiVersion");
        }
        v
    }

    /// Drop empty values (see the module comment). Array elements are kept (their position
    /// matters) but normalized inside.
    fn normalize(v: &Value) -> Value {
        match v {
            Value::Object(m) => Value::Object(m.iter().map(|(k, v)| (k.clone(), normalize(v))).filter(|(_, v)| !is_empty(v)).collect()),
            Value::Array(a) => Value::Array(a.iter().map(normalize).collect()),
            v => v.clone(),
        }
    }

    fn is_empty(v: &Value) -> bool {
        match v {
            Value::Null => true,
            Value::Bool(b) => !b,
            Value::Number(n) => n.as_f64() == Some(0.0),
            Value::String(s) => s.is_empty(),
            Value::Array(a) => a.is_empty(),
            Value::Object(m) => m.is_empty(),
        }
    }

    /// Drop `null`s only (a zero Time decodes to null and is then not written).
    fn drop_nulls(v: &Value) -> Value {
        match v {
            Value::Object(m) => Value::Object(m.iter().filter(|(_, v)| !v.is_null()).map(|(k, v)| (k.clone(), drop_nulls(v))).collect()),
            Value::Array(a) => Value::Array(a.iter().map(drop_nulls).collect()),
            v => v.clone(),
        }
    }

    // ---- prost as an independent oracle -------------------------------------------------

    /// prost's pretty `Debug` of a k8s-pb message with empty fields dropped, the same rule
    /// as [`normalize`]: `None`, `Some("")`, `Some(0)`, `Some(false)`, `[]`, `{}` fields and
    /// map entries go, and so do fields whose message is left with no fields. List elements
    /// stay.
    fn prost_normalized(debug: &str) -> String {
        struct Node {
            head: String,
            children: Vec<Node>,
            tail: Option<String>,
        }
        fn parse(lines: &mut std::iter::Peekable<std::str::Lines<'_>>) -> Vec<Node> {
            let mut out = Vec::new();
            while let Some(line) = lines.peek() {
                let t = line.trim();
                if t.starts_with('}') || t.starts_with(']') || t.starts_with(')') {
                    return out;
                }
                let line = lines.next().unwrap().trim().to_owned();
                if line.ends_with('{') || line.ends_with('[') || line.ends_with('(') {
                    let children = parse(lines);
                    let tail = lines.next().map(|l| l.trim().to_owned());
                    out.push(Node { head: line, children, tail });
                } else {
                    out.push(Node { head: line, children: Vec::new(), tail: None });
                }
            }
            out
        }
        /// `name: ` or `"map key": ` prefix?
        fn labelled(head: &str) -> bool {
            let b = head.as_bytes();
            if b.first() == Some(&b'"') {
                return head.contains("\": ");
            }
            let n = b.iter().take_while(|c| c.is_ascii_alphanumeric() || **c == b'_' || **c == b'#').count();
            n > 0 && head[n..].starts_with(": ")
        }
        fn empty_literal(v: &str) -> bool {
            matches!(v, "None," | "\"\"," | "0," | "0.0," | "false," | "[]," | "{},")
        }
        fn value_part(head: &str) -> &str {
            if let Some(rest) = head.strip_prefix('"') {
                // Map key: skip the quoted key (Debug escapes quotes inside it).
                let mut esc = false;
                for (i, c) in rest.char_indices() {
                    match c {
                        '\\' if !esc => esc = true,
                        '"' if !esc => return rest[i + 1..].trim_start_matches(": "),
                        _ => esc = false,
                    }
                }
                return head;
            }
            head.split_once(": ").map_or(head, |(_, v)| v)
        }
        fn prune(nodes: Vec<Node>, in_some: bool) -> Vec<Node> {
            nodes
                .into_iter()
                .filter_map(|n| {
                    let lab = labelled(&n.head);
                    if n.tail.is_none() {
                        let empty = if lab { empty_literal(value_part(&n.head)) } else { in_some && empty_literal(&n.head) };
                        return (!empty).then_some(n);
                    }
                    let some = n.head.ends_with("Some(");
                    let children = prune(n.children, some);
                    if children.is_empty() && (lab || in_some) {
                        return None;
                    }
                    Some(Node { children, ..n })
                })
                .collect()
        }
        fn render(nodes: &[Node], depth: usize, out: &mut String) {
            for n in nodes {
                out.push_str(&"  ".repeat(depth));
                out.push_str(&n.head);
                out.push('\n');
                render(&n.children, depth + 1, out);
                if let Some(t) = &n.tail {
                    out.push_str(&"  ".repeat(depth));
                    out.push_str(t);
                    out.push('\n');
                }
            }
        }
        let nodes = prune(parse(&mut debug.lines().peekable()), false);
        let mut out = String::new();
        render(&nodes, 0, &mut out);
        out
    }

    /// Decode with prost (fails on any wire-type error) and return the normalized Debug.
    fn prost_view(kind: &str, bytes: &[u8]) -> String {
        use k8s_pb::api::core::v1 as core;
        use prost::Message as _;
        let dbg = match kind {
            "Pod" => format!("{:#?}", core::Pod::decode(bytes).unwrap()),
            "ConfigMap" => format!("{:#?}", core::ConfigMap::decode(bytes).unwrap()),
            "Secret" => format!("{:#?}", core::Secret::decode(bytes).unwrap()),
            "Node" => format!("{:#?}", core::Node::decode(bytes).unwrap()),
            "Status" => format!("{:#?}", k8s_pb::apimachinery::pkg::apis::meta::v1::Status::decode(bytes).unwrap()),
            other => panic!("no prost type for {other}"),
        };
        prost_normalized(&dbg)
    }

    /// JSON object -> our protobuf -> prost, against the apiserver's protobuf -> prost.
    fn assert_encodes_like_apiserver(kind: &str, json: &Value, apiserver_raw: &[u8]) {
        let ours = json_to_pb(ty(kind), json).unwrap();
        let a = prost_view(kind, &ours);
        let b = prost_view(kind, apiserver_raw);
        assert_eq!(a, b, "{kind}: our encoding differs from the apiserver's (normalized)");
        assert!(b.lines().count() > 10, "suspiciously empty comparison: {b}");
    }

    /// The apiserver's protobuf -> our JSON, against the apiserver's JSON.
    fn assert_decodes_like_apiserver(kind: &str, raw: &[u8], json: &Value) {
        let ours = pb_to_json(ty(kind), raw).unwrap();
        assert_eq!(normalize(&ours), normalize(&without_type_meta(json)), "{kind}");
    }

    // ---- golden: protobuf <-> JSON of the same object -----------------------------------

    #[test]
    fn golden_get_pod() {
        let (kind, raw) = unwrap_unknown(&golden("01-get-pod.pb.body"));
        assert_eq!(kind, "Pod");
        let json = golden_json("01-get-pod.json.body");
        assert_decodes_like_apiserver("Pod", &raw, &json);
        assert_encodes_like_apiserver("Pod", &json, &raw);
    }

    #[test]
    fn golden_list_pods() {
        let (kind, raw) = unwrap_unknown(&golden("02a-list-pods.pb.body"));
        assert_eq!(kind, "PodList");
        let json = golden_json("02a-list-pods.json.body");
        let items = list_items(&raw);
        let json_items = json["items"].as_array().unwrap();
        assert_eq!(items.len(), 3);
        assert_eq!(items.len(), json_items.len());
        for (raw, json) in items.iter().zip(json_items) {
            assert_decodes_like_apiserver("Pod", raw, json);
            assert_encodes_like_apiserver("Pod", json, raw);
        }
    }

    #[test]
    fn golden_list_configmaps() {
        let (kind, raw) = unwrap_unknown(&golden("04a-list-configmaps.pb.body"));
        assert_eq!(kind, "ConfigMapList");
        let json = golden_json("04a-list-configmaps.json.body");
        let items = list_items(&raw);
        let json_items = json["items"].as_array().unwrap();
        assert_eq!(items.len(), 3);
        for (raw, json) in items.iter().zip(json_items) {
            assert_decodes_like_apiserver("ConfigMap", raw, json);
            assert_encodes_like_apiserver("ConfigMap", json, raw);
        }
        // cm-c: non-ASCII text and binaryData survive.
        let cm_c = pb_to_json(ty("ConfigMap"), &items[2]).unwrap();
        assert_eq!(cm_c["binaryData"]["blob"], "AAECAwQF");
        assert_eq!(cm_c["data"], json_items[2]["data"]);
    }

    #[test]
    fn golden_list_nodes() {
        let (kind, raw) = unwrap_unknown(&golden("17-list-nodes-cluster-scoped-limit2.pb.body"));
        assert_eq!(kind, "NodeList");
        let json = golden_json("17-list-nodes-cluster-scoped-limit2.json.body");
        let items = list_items(&raw);
        let json_items = json["items"].as_array().unwrap();
        assert_eq!(items.len(), 2);
        for (raw, json) in items.iter().zip(json_items) {
            assert_decodes_like_apiserver("Node", raw, json);
            assert_encodes_like_apiserver("Node", json, raw);
        }
    }

    #[test]
    fn golden_statuses() {
        for name in [
            "10a-get-missing-pod-404",
            "10b-list-bad-labelselector-400",
            "10c-list-unsupported-fieldselector-400",
            "10d-list-rv-too-large-notolderthan-504",
            "10e-list-exact-rv1-limit5-410",
            "10f-list-garbage-continue-400",
            "10g-list-expired-continue-410",
            "10h-list-pods-nobody-403",
            "10i-list-pods-no-token-anonymous-403",
            "10j-list-pods-invalid-token-401",
            "10k-conflict-step3-stale-update-409",
            "05e-delete-configmap-200",
        ] {
            let (kind, raw) = unwrap_unknown(&golden(&format!("{name}.pb.body")));
            assert_eq!(kind, "Status", "{name}");
            let json = golden_json(&format!("{name}.json.body"));
            if name.starts_with("05e") {
                // The JSON and protobuf runs deleted different objects (different uids).
                let ours = pb_to_json(ty("Status"), &raw).unwrap();
                assert_eq!(ours["status"], "Success", "{name}");
                assert_eq!(ours["details"]["kind"], "configmaps", "{name}");
                continue;
            }
            assert_decodes_like_apiserver("Status", &raw, &json);
            assert_encodes_like_apiserver("Status", &json, &raw);
        }
        // The 404 exactly, in the apiserver's JSON key order.
        let (_, raw) = unwrap_unknown(&golden("10a-get-missing-pod-404.pb.body"));
        let ours = pb_to_json(ty("Status"), &raw).unwrap();
        assert_eq!(
            serde_json::to_string(&normalize(&ours)).unwrap(),
            r#"{"status":"Failure","message":"pods \"does-not-exist\" not found","reason":"NotFound","details":{"name":"does-not-exist","kind":"pods"},"code":404}"#
        );
    }

    #[test]
    fn golden_secret_round_trip() {
        let json = golden_json("04b-get-secret.json.body");
        let pb = json_to_pb(ty("Secret"), &json).unwrap();
        let back = pb_to_json(ty("Secret"), &pb).unwrap();
        assert_eq!(back, without_type_meta(&json));
        // Values are bytes in protobuf: decode with prost and check the plain text.
        use prost::Message as _;
        let secret = k8s_pb::api::core::v1::Secret::decode(pb.as_slice()).unwrap();
        assert_eq!(secret.data["username"], b"demo");
        assert_eq!(secret.r#type.as_deref(), Some("Opaque"));
        assert!(prost_view("Secret", &pb).contains("secret-a"));
    }

    // ---- golden: every capture of a known kind ------------------------------------------

    /// Every JSON object of a known kind in the captures: plain objects, list items and
    /// watch event objects. Gzip bodies (16b, 16c) are skipped.
    fn all_json_objects() -> Vec<(String, String, Value)> {
        let kinds = ["Pod", "Node", "Namespace", "Service", "ConfigMap", "Secret", "Event", "Endpoints", "Deployment", "Status"];
        let mut out = Vec::new();
        let mut names: Vec<_> = std::fs::read_dir(GOLDEN)
            .unwrap()
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .filter(|n| n.ends_with(".json.body"))
            .collect();
        names.sort();
        for name in names {
            let body = golden(&name);
            let mut docs = Vec::new();
            if let Ok(v) = serde_json::from_slice::<Value>(&body) {
                docs.push(v);
            } else {
                for line in body.split(|&b| b == b'\n').filter(|l| !l.is_empty()) {
                    if let Ok(v) = serde_json::from_slice::<Value>(line) {
                        docs.push(v);
                    }
                }
            }
            for doc in docs {
                let (doc, list_kind) = match doc.get("object") {
                    Some(obj) if doc.get("type").is_some() => (obj.clone(), None),
                    _ => {
                        let k = doc["kind"].as_str().unwrap_or("").to_owned();
                        (doc, k.strip_suffix("List").map(str::to_owned))
                    }
                };
                if let Some(item_kind) = list_kind {
                    if kinds.contains(&item_kind.as_str()) {
                        for item in doc["items"].as_array().unwrap() {
                            out.push((name.clone(), item_kind.clone(), item.clone()));
                        }
                    }
                } else if let Some(k) = doc["kind"].as_str() {
                    if kinds.contains(&k) && doc["apiVersion"] == "v1" {
                        out.push((name.clone(), k.to_owned(), doc.clone()));
                    }
                }
            }
        }
        out
    }

    #[test]
    fn golden_json_round_trips_exactly() {
        let objects = all_json_objects();
        assert!(objects.len() >= 80, "only {} objects found", objects.len());
        let mut kinds_seen = std::collections::BTreeSet::new();
        for (name, kind, obj) in &objects {
            kinds_seen.insert(kind.clone());
            let pb = json_to_pb(ty(kind), obj).unwrap();
            let back = pb_to_json(ty(kind), &pb).unwrap();
            // Exact apart from key order and `null`s (e.g. the Pod bookmark's
            // `"containers":null`): every key is known and every value survives.
            assert_eq!(drop_nulls(&back), drop_nulls(&without_type_meta(obj)), "{name}: {kind}");
        }
        for k in ["Pod", "ConfigMap", "Secret", "Node", "Status"] {
            assert!(kinds_seen.contains(k), "no {k} in the captures");
        }
    }

    /// Every protobuf object of a known kind in the captures (objects, list items, watch
    /// event objects).
    fn all_pb_objects() -> Vec<(String, String, Vec<u8>)> {
        let mut out = Vec::new();
        let mut names: Vec<_> = std::fs::read_dir(GOLDEN)
            .unwrap()
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .filter(|n| n.ends_with(".pb.body"))
            .collect();
        names.sort();
        for name in names {
            let body = golden(&name);
            let envelopes = if body.starts_with(b"k8s\0") {
                vec![unwrap_unknown(&body)]
            } else if name.contains("watch") && body.len() > 4 {
                watch_objects(&body)
            } else {
                continue;
            };
            for (kind, raw) in envelopes {
                if let Some(item) = kind.strip_suffix("List") {
                    if MessageType::for_kind("", "v1", item).is_some() {
                        for it in list_items(&raw) {
                            out.push((name.clone(), item.to_owned(), it));
                        }
                    }
                } else if MessageType::for_kind("", "v1", &kind).is_some() {
                    out.push((name.clone(), kind, raw));
                }
            }
        }
        out
    }

    #[test]
    fn golden_pb_round_trips_byte_for_byte() {
        // The apiserver writes fields in tag order, maps sorted, every present field: so
        // pb -> JSON -> pb must reproduce its bytes exactly.
        let objects = all_pb_objects();
        assert!(objects.len() > 30, "only {} objects found", objects.len());
        for (name, kind, raw) in &objects {
            let json = pb_to_json(ty(kind), raw).unwrap();
            let back = json_to_pb(ty(kind), &json).unwrap();
            assert!(back == *raw, "{name}: {kind} bytes differ\n{json}");
        }
    }

    // ---- API and unit behaviour ---------------------------------------------------------

    #[test]
    fn for_kind_knows_the_roots() {
        for (g, k, name) in [
            ("", "Pod", "k8s.io.api.core.v1.Pod"),
            ("", "Node", "k8s.io.api.core.v1.Node"),
            ("", "Namespace", "k8s.io.api.core.v1.Namespace"),
            ("", "Service", "k8s.io.api.core.v1.Service"),
            ("", "ConfigMap", "k8s.io.api.core.v1.ConfigMap"),
            ("", "Secret", "k8s.io.api.core.v1.Secret"),
            ("", "Event", "k8s.io.api.core.v1.Event"),
            ("", "Endpoints", "k8s.io.api.core.v1.Endpoints"),
            ("apps", "Deployment", "k8s.io.api.apps.v1.Deployment"),
            ("", "Status", "k8s.io.apimachinery.pkg.apis.meta.v1.Status"),
            ("meta.k8s.io", "Status", "k8s.io.apimachinery.pkg.apis.meta.v1.Status"),
        ] {
            assert_eq!(MessageType::for_kind(g, "v1", k).unwrap().proto_name(), name);
        }
        assert_eq!(MessageType::for_kind("", "v1", "Deployment"), None);
        assert_eq!(MessageType::for_kind("apps", "v1beta1", "Deployment"), None);
        assert_eq!(MessageType::for_kind("", "v1", "PodList"), None);
    }

    #[test]
    fn schema_is_consistent() {
        for (i, m) in schema::MESSAGES.iter().enumerate() {
            assert!(m.fields.windows(2).all(|w| w[0].tag < w[1].tag), "{}", m.name);
            for f in m.fields {
                assert_eq!(f.inline, f.json.is_empty(), "{}.{}", m.name, f.name);
                let ids = match f.kind {
                    FieldKind::Message(id) | FieldKind::Map(MapValue::Message(id)) => Some(id),
                    _ => None,
                };
                if let Some(id) = ids {
                    assert!(usize::from(id) < schema::MESSAGES.len(), "{}.{}", m.name, f.name);
                }
            }
            let _ = i;
        }
    }

    #[test]
    fn json_names_with_acronyms() {
        let pod = json!({"spec": {"hostIPC": true, "hostPID": true, "containers": [{"name": "c"}]},
                         "status": {"podIPs": [{"ip": "10.0.0.1"}], "hostIP": "1.2.3.4", "qosClass": "Burstable"}});
        let pb = json_to_pb(ty("Pod"), &pod).unwrap();
        assert_eq!(pb_to_json(ty("Pod"), &pb).unwrap(), pod);
        // Go's decoder is case-insensitive; so is ours (output uses the canonical name).
        let loose = json!({"spec": {"hostipc": true, "host_pid": true}});
        let back = pb_to_json(ty("Pod"), &json_to_pb(ty("Pod"), &loose).unwrap()).unwrap();
        assert_eq!(back, json!({"spec": {"hostIPC": true, "hostPID": true}}));
    }

    #[test]
    fn kind_api_version_and_unknown_keys_are_ignored() {
        let cm = json!({"kind": "ConfigMap", "apiVersion": "v1", "metadata": {"name": "x", "futureField": 1}, "data": {"a": "b"}});
        let pb = json_to_pb(ty("ConfigMap"), &cm).unwrap();
        assert_eq!(pb_to_json(ty("ConfigMap"), &pb).unwrap(), json!({"metadata": {"name": "x"}, "data": {"a": "b"}}));
    }

    #[test]
    fn empty_values_are_written_when_present() {
        let cm = json!({"metadata": {"name": "", "generation": 0, "labels": {}}, "immutable": false});
        let pb = json_to_pb(ty("ConfigMap"), &cm).unwrap();
        // metadata{1: "", 7: 0}, immutable(4) false; empty maps have no entries to write.
        assert_eq!(pb, [0x0a, 0x04, 0x0a, 0x00, 0x38, 0x00, 0x20, 0x00]);
        assert_eq!(pb_to_json(ty("ConfigMap"), &pb).unwrap(), json!({"metadata": {"name": "", "generation": 0}, "immutable": false}));
    }

    #[test]
    fn map_entries_are_sorted_and_complete() {
        let cm = json!({"data": {"b": "2", "a": "", "é": "x"}});
        let pb = json_to_pb(ty("ConfigMap"), &cm).unwrap();
        let entries: Vec<_> = fields(&pb).into_iter().map(|f| fields(&f.2)).collect();
        let keys: Vec<_> = entries.iter().map(|e| String::from_utf8(e[0].2.clone()).unwrap()).collect();
        assert_eq!(keys, ["a", "b", "é"]);
        assert_eq!(entries[0].len(), 2, "empty value still written");
        // A map entry without value (or key) decodes to the empty value.
        let bare = [0x12, 0x03, 0x0a, 0x01, b'k'];
        assert_eq!(pb_to_json(ty("ConfigMap"), &bare).unwrap(), json!({"data": {"k": ""}}));
    }

    #[test]
    fn special_types() {
        let pod = json!({
            "metadata": {"creationTimestamp": "2026-11-22T02:05:06Z",
                         "deletionTimestamp": "2026-11-22T04:05:06+02:00"},
            "spec": {"containers": [{
                "name": "c",
                "resources": {"requests": {"cpu": "10m", "memory": "16Mi"}, "limits": {"cpu": 2}},
                "ports": [{"containerPort": 80}],
                "livenessProbe": {"httpGet": {"port": 8080, "path": "/healthz"}, "periodSeconds": 5},
                "readinessProbe": {"tcpSocket": {"port": "http"}},
            }]}
        });
        let pb = json_to_pb(ty("Pod"), &pod).unwrap();
        use prost::Message as _;
        let p = k8s_pb::api::core::v1::Pod::decode(pb.as_slice()).unwrap();
        let meta = p.metadata.as_ref().unwrap();
        assert_eq!(meta.creation_timestamp.as_ref().unwrap().seconds, Some(1_795_313_106));
        assert_eq!(meta.deletion_timestamp.as_ref().unwrap().seconds, Some(1_795_313_106));
        let c = &p.spec.as_ref().unwrap().containers[0];
        let res = c.resources.as_ref().unwrap();
        assert_eq!(res.requests["cpu"].string.as_deref(), Some("10m"));
        assert_eq!(res.limits["cpu"].string.as_deref(), Some("2"));
        let http = c.liveness_probe.as_ref().unwrap().handler.as_ref().unwrap().http_get.as_ref().unwrap();
        let port = http.port.as_ref().unwrap();
        assert_eq!((port.r#type, port.int_val, port.str_val.as_deref()), (Some(0), Some(8080), Some("")));
        let tcp = c.readiness_probe.as_ref().unwrap().handler.as_ref().unwrap().tcp_socket.as_ref().unwrap();
        assert_eq!(tcp.port.as_ref().unwrap().str_val.as_deref(), Some("http"));

        let back = pb_to_json(ty("Pod"), &pb).unwrap();
        assert_eq!(back["metadata"]["deletionTimestamp"], "2026-11-22T02:05:06Z");
        assert_eq!(
            back["spec"]["containers"][0]["livenessProbe"],
            json!({"httpGet": {"path": "/healthz", "port": 8080}, "periodSeconds": 5})
        );
        assert_eq!(back["spec"]["containers"][0]["readinessProbe"], json!({"tcpSocket": {"port": "http"}}));
        assert_eq!(back["spec"]["containers"][0]["resources"]["limits"]["cpu"], "2");
    }

    #[test]
    fn inline_structs_always_written() {
        // Probe.handler is an embedded Go struct: written even when empty (Go does too).
        let pod = json!({"spec": {"containers": [{"name": "c", "livenessProbe": {"periodSeconds": 5}}]}});
        let pb = json_to_pb(ty("Pod"), &pod).unwrap();
        use prost::Message as _;
        let p = k8s_pb::api::core::v1::Pod::decode(pb.as_slice()).unwrap();
        let probe = p.spec.unwrap().containers[0].liveness_probe.clone().unwrap();
        assert!(probe.handler.is_some());
        assert_eq!(probe.period_seconds, Some(5));
        // Volume.volumeSource and the LocalObjectReference in selectors are inline too.
        let pod = json!({"spec": {"volumes": [{"name": "v", "configMap": {"name": "cm", "optional": true}}],
            "containers": [{"name": "c", "env": [{"name": "E", "valueFrom": {"secretKeyRef": {"name": "s", "key": "k"}}}]}]}});
        let pb = json_to_pb(ty("Pod"), &pod).unwrap();
        assert_eq!(pb_to_json(ty("Pod"), &pb).unwrap(), pod);
        let p = k8s_pb::api::core::v1::Pod::decode(pb.as_slice()).unwrap();
        let vol = &p.spec.as_ref().unwrap().volumes[0];
        let cm = vol.volume_source.as_ref().unwrap().config_map.as_ref().unwrap();
        assert_eq!(cm.local_object_reference.as_ref().unwrap().name.as_deref(), Some("cm"));
    }

    #[test]
    fn times() {
        assert_eq!(parse_rfc3339("1970-01-01T00:00:00Z"), Some((0, 0)));
        assert_eq!(parse_rfc3339("2026-11-22T02:05:06Z"), Some((1_795_313_106, 0)));
        assert_eq!(parse_rfc3339("2026-11-22T02:05:06.123456Z"), Some((1_795_313_106, 123_456_000)));
        assert_eq!(parse_rfc3339("2026-11-21T21:05:06-05:00"), Some((1_795_313_106, 0)));
        assert_eq!(parse_rfc3339("0001-01-01T00:00:00Z"), Some((GO_ZERO_TIME_UNIX, 0)));
        assert_eq!(parse_rfc3339("2024-02-29T00:00:00Z").map(|t| t.0), Some(1_709_164_800));
        for bad in [
            "",
            "2026-11-22",
            "2026-11-22T02:05:06",
            "2026-13-01T00:00:00Z",
            "2025-02-29T00:00:00Z",
            "2026-11-22T24:00:00Z",
            "2026-11-22T02:05:06.Z",
            "2026-11-22T02:05:06+0100",
            "２026-11-22T02:05:06Z",
        ] {
            assert_eq!(parse_rfc3339(bad), None, "{bad}");
        }
        assert_eq!(format_rfc3339(1_795_313_106, 0, false).unwrap(), "2026-11-22T02:05:06Z");
        assert_eq!(format_rfc3339(1_795_313_106, 5_000, true).unwrap(), "2026-11-22T02:05:06.000005Z");
        assert_eq!(format_rfc3339(-1, 0, false).unwrap(), "1969-12-31T23:59:59Z");
        assert_eq!(format_rfc3339(i64::MAX, 0, false), None);
        // Event.eventTime is a MicroTime; the zero time is JSON null both ways.
        let ev = json!({"firstTimestamp": null, "eventTime": "2026-11-22T02:05:06.250000Z", "series": null});
        let pb = json_to_pb(ty("Event"), &ev).unwrap();
        assert_eq!(pb[..2], [0x32, 0x00], "null time: empty message, like Go's zero time");
        assert_eq!(pb_to_json(ty("Event"), &pb).unwrap(), json!({"firstTimestamp": null, "eventTime": "2026-11-22T02:05:06.250000Z"}));
        // The zero time spelled out in seconds also decodes to null.
        let zero = [0x32, 0x0d, 0x08, 0x80, 0x92, 0xb8, 0xc3, 0x98, 0xfe, 0xff, 0xff, 0xff, 0x01, 0x10, 0x00];
        assert_eq!(pb_to_json(ty("Event"), &zero).unwrap(), json!({"firstTimestamp": null}));
        let epoch = [0x32, 0x04, 0x08, 0x00, 0x10, 0x00];
        assert_eq!(pb_to_json(ty("Event"), &epoch).unwrap(), json!({"firstTimestamp": "1970-01-01T00:00:00Z"}));
    }

    #[test]
    fn durations_like_go() {
        for (d, s) in [
            (0, "0s"),
            (1, "1ns"),
            (1_500, "1.5µs"),
            (1_100_000, "1.1ms"),
            (300_000_000_000, "5m0s"),
            (3_723_500_000_000, "1h2m3.5s"),
            (-90_000_000_000, "-1m30s"),
            (2_000_000_000, "2s"),
            (i64::MIN, "-2562047h47m16.854775808s"),
        ] {
            assert_eq!(format_go_duration(d), s);
            assert_eq!(parse_go_duration(s), Some(d), "{s}");
        }
        assert_eq!(parse_go_duration("1h30m"), Some(5_400_000_000_000));
        assert_eq!(parse_go_duration("1.5h"), Some(5_400_000_000_000));
        assert_eq!(parse_go_duration("10us"), Some(10_000));
        assert_eq!(parse_go_duration(".5s"), Some(500_000_000));
        for bad in ["", "5", "5x", "-", "s", "1.s.", "9999999999999999999h", "3000000h"] {
            assert_eq!(parse_go_duration(bad), None, "{bad}");
        }
        let mut buf = Vec::new();
        encode_special(Special::Duration, &json!("5m0s"), &mut buf).unwrap();
        assert_eq!(decode_special(Special::Duration, &buf).unwrap(), json!("5m0s"));
    }

    #[test]
    fn raw_json_types() {
        let v = json!({"f:a": {".": {}}, "x": [1, "<&>"]});
        for special in [Special::FieldsV1, Special::RawExtension] {
            let mut buf = Vec::new();
            encode_special(special, &v, &mut buf).unwrap();
            let raw = &fields(&buf)[0].2;
            assert_eq!(raw.as_slice(), br#"{"f:a":{".":{}},"x":[1,"\u003c\u0026\u003e"]}"#);
            assert_eq!(decode_special(special, &buf).unwrap(), v);
            assert!(decode_special(special, &[0x0a, 0x01, b'{']).is_err());
        }
        assert_eq!(decode_special(Special::RawExtension, &[]).unwrap(), Value::Null);
    }

    #[test]
    fn int_or_string_and_quantity_edges() {
        let mut buf = Vec::new();
        encode_special(Special::IntOrString, &json!(-3), &mut buf).unwrap();
        assert_eq!(decode_special(Special::IntOrString, &buf).unwrap(), json!(-3));
        assert!(encode_special(Special::IntOrString, &json!(1.5), &mut buf).is_err());
        assert!(encode_special(Special::IntOrString, &json!(1u64 << 40), &mut buf).is_err());
        assert!(decode_special(Special::IntOrString, &[0x08, 0x02]).is_err());
        assert_eq!(decode_special(Special::Quantity, &[]).unwrap(), json!("0"));
    }

    #[test]
    fn errors_name_the_field() {
        let err = |kind: &str, v: Value| json_to_pb(ty(kind), &v).unwrap_err().to_string();
        assert_eq!(
            err("Pod", json!({"spec": {"containers": [{"name": "a"}, {"name": "b", "ports": [{"containerPort": "80"}]}]}})),
            "spec.containers[1].ports[0].containerPort: expected a 32-bit integer, found string \"80\""
        );
        assert_eq!(
            err("ConfigMap", json!({"metadata": {"labels": {"app": 1}}})),
            "metadata.labels[app]: expected a string, found number 1"
        );
        assert_eq!(err("Secret", json!({"data": {"k": "not base64!"}})), "data[k]: expected a base64 string, found string \"not base64!\"");
        assert_eq!(
            err("Pod", json!({"metadata": {"creationTimestamp": "yesterday"}})),
            "metadata.creationTimestamp: expected an RFC 3339 time, found string \"yesterday\""
        );
        assert_eq!(
            err("Pod", json!({"spec": {"containers": [{"livenessProbe": {"httpGet": {"port": true}}}]}})),
            "spec.containers[0].livenessProbe.httpGet.port: expected a 32-bit integer or a string, found boolean true"
        );
        assert_eq!(err("Pod", json!([])), "(top level): expected an object, found an array");
        assert_eq!(
            err("Pod", json!({"spec": {"priority": 1u64 << 33}})),
            "spec.priority: expected a 32-bit integer, found number 8589934592"
        );

        // Decoding: the path of the field being read.
        let e = pb_to_json(ty("ConfigMap"), &[0x0a, 0x03, 0x0a, 0x09, b'a']).unwrap_err();
        assert_eq!(e.to_string(), "metadata.name: protobuf input is truncated");
        let e = pb_to_json(ty("ConfigMap"), &[0x0a, 0x02, 0x08, 0x01]).unwrap_err();
        assert_eq!(e.to_string(), "metadata.name: wire type 0 does not fit a field of type string");
        let e = pb_to_json(ty("ConfigMap"), &[0x0a, 0x03, 0x0a, 0x01, 0xff]).unwrap_err();
        assert!(matches!(e, TranscodeError::InvalidUtf8 { ref path } if path == "metadata.name"), "{e}");
        let e = pb_to_json(ty("ConfigMap"), &[0x03]).unwrap_err();
        assert!(matches!(e, TranscodeError::BadKey { wire_type: 3, .. }), "{e}");
        let e = pb_to_json(ty("ConfigMap"), &[0x20, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01]).unwrap_err();
        assert!(matches!(e, TranscodeError::BadVarint { .. }), "{e}");
    }

    #[test]
    fn decoder_accepts_packed_and_skips_unknown() {
        // ContainerPort? No: Capabilities has only strings. Use a repeated int64:
        // PodSecurityContext.supplementalGroups (tag 4), packed.
        let psc = [0x22, 0x03, 0x01, 0x02, 0x03];
        let spec = [&[0x72u8, psc.len() as u8][..], &psc].concat();
        let mut pod = vec![0x12, spec.len() as u8];
        pod.extend_from_slice(&spec);
        // Unknown fields of every wire type are skipped.
        pod.extend_from_slice(&[0xf8, 0x3f, 0x01, 0xf9, 0x3f, 1, 2, 3, 4, 5, 6, 7, 8, 0xfa, 0x3f, 0x00, 0xfd, 0x3f, 1, 2, 3, 4]);
        let json = pb_to_json(ty("Pod"), &pod).unwrap();
        assert_eq!(json, json!({"spec": {"securityContext": {"supplementalGroups": [1, 2, 3]}}}));
        // And we write them unpacked, like gogo for proto2.
        let ours = json_to_pb(ty("Pod"), &json).unwrap();
        assert_eq!(ours, [0x12, 0x08, 0x72, 0x06, 0x20, 0x01, 0x20, 0x02, 0x20, 0x03]);
    }

    #[test]
    fn long_messages_get_multibyte_lengths() {
        for n in [0usize, 1, 126, 127, 128, 16_383, 16_384, 200_000] {
            let cm = json!({"metadata": {"name": "x".repeat(n)}});
            let pb = json_to_pb(ty("ConfigMap"), &cm).unwrap();
            use prost::Message as _;
            let decoded = k8s_pb::api::core::v1::ConfigMap::decode(pb.as_slice()).unwrap();
            assert_eq!(decoded.metadata.unwrap().name.unwrap().len(), n);
            assert_eq!(pb_to_json(ty("ConfigMap"), &pb).unwrap(), cm);
        }
    }

    #[test]
    fn varint_len_matches_encoding() {
        for v in [0u64, 1, 127, 128, 300, 16_383, 16_384, u64::from(u32::MAX), u64::MAX] {
            let mut b = Vec::new();
            put_varint(&mut b, v);
            assert_eq!(b.len(), varint_len(v));
            assert_eq!(Reader::new(&b).varint().unwrap(), v);
        }
    }

    fn label_map() -> impl Strategy<Value = serde_json::Map<String, Value>> {
        proptest::collection::btree_map("[a-z0-9./-]{0,20}|\\PC{0,8}", "\\PC{0,30}", 0..12)
            .prop_map(|m| m.into_iter().map(|(k, v)| (k, Value::String(v))).collect())
    }

    proptest! {
        #[test]
        fn labels_and_annotations_round_trip(labels in label_map(), annotations in label_map()) {
            let cm = json!({"metadata": {"name": "x", "labels": labels, "annotations": annotations}});
            let pb = json_to_pb(ty("ConfigMap"), &cm).unwrap();
            // An empty map has no entries to write, so it comes back absent.
            let mut expected = json!({"metadata": {"name": "x"}});
            if !labels.is_empty() {
                expected["metadata"]["labels"] = Value::Object(labels.clone());
            }
            if !annotations.is_empty() {
                expected["metadata"]["annotations"] = Value::Object(annotations.clone());
            }
            prop_assert_eq!(pb_to_json(ty("ConfigMap"), &pb).unwrap(), expected);
            use prost::Message as _;
            let decoded = k8s_pb::api::core::v1::ConfigMap::decode(pb.as_slice()).unwrap();
            prop_assert_eq!(decoded.metadata.unwrap().labels.len(), labels.len());
        }

        #[test]
        fn arbitrary_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..300)) {
            for (_, _, _, id) in schema::ROOTS {
                let _ = pb_to_json(MessageType(*id), &bytes);
            }
        }

        #[test]
        fn mutated_golden_pod_never_panics(pos in 0usize..2000, byte in any::<u8>(), cut in 0usize..2000) {
            let (_, mut raw) = unwrap_unknown(&golden("01-get-pod.pb.body"));
            let pos = pos % raw.len();
            raw[pos] = byte;
            raw.truncate(cut.max(pos + 1));
            if let Ok(json) = pb_to_json(ty("Pod"), &raw) {
                // Whatever decodes, encodes.
                let _ = json_to_pb(ty("Pod"), &json);
            }
        }

        #[test]
        fn arbitrary_json_never_panics(v in arb_json()) {
            for (_, _, _, id) in schema::ROOTS {
                let _ = json_to_pb(MessageType(*id), &v);
                let _ = json_to_pb(MessageType(*id), &json!({"metadata": v.clone(), "spec": v.clone(), "data": v.clone()}));
            }
        }
    }

    fn arb_json() -> impl Strategy<Value = Value> {
        let leaf = prop_oneof![
            Just(Value::Null),
            any::<bool>().prop_map(Value::from),
            any::<i64>().prop_map(Value::from),
            any::<f64>().prop_filter("finite", |x| x.is_finite()).prop_map(Value::from),
            "[a-zA-Z:.0-9-]{0,12}".prop_map(Value::from),
        ];
        leaf.prop_recursive(4, 40, 6, |inner| {
            prop_oneof![
                proptest::collection::vec(inner.clone(), 0..4).prop_map(Value::from),
                proptest::collection::btree_map(
                    prop_oneof![
                        Just("name".to_owned()),
                        Just("labels".to_owned()),
                        Just("containers".to_owned()),
                        Just("creationTimestamp".to_owned()),
                        Just("port".to_owned()),
                        "[a-z]{1,6}"
                    ],
                    inner,
                    0..4
                )
                .prop_map(|m| Value::Object(m.into_iter().collect())),
            ]
        })
    }
}
