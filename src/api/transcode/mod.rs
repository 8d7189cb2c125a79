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

mod decode;
mod encode;
#[rustfmt::skip]
mod schema;
#[cfg(test)]
mod tests;

use crate::api::time::GO_ZERO_TIME_UNIX;
use crate::api::wire::{put_bytes, put_key, put_varint, varint_len};
use base64::engine::general_purpose::STANDARD as BASE64;
use base64::Engine as _;
use decode::decode_message;
use encode::encode_message_body;
use prost::encoding::WireType;
use serde_json::{Map, Number, Value};

/// Deepest message nesting accepted in either direction (the schema itself is far shallower).
const MAX_DEPTH: usize = 100;

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
    #[cfg_attr(not(test), allow(dead_code))]
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
    #[cfg(test)]
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
    decode_message(message(ty.0), bytes, 0, &WHOLE)
}

/// [`pb_to_json`] of only the fields `proj` names: the others are skipped on the wire, never
/// decoded (a cache that keys and selects objects by their metadata and a few fields needs
/// no more of them, and an object nested deep elsewhere costs it nothing).
pub fn pb_to_json_only(ty: MessageType, bytes: &[u8], proj: &Projection) -> Result<Value, TranscodeError> {
    decode_message(message(ty.0), bytes, 0, proj)
}

/// Which fields of a message [`pb_to_json_only`] decodes: all of them, or those named (by
/// JSON name), each with what to decode of it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Projection(Option<Vec<(String, Projection)>>);

/// Every field.
static WHOLE: Projection = Projection(None);

impl Projection {
    /// The fields at `paths` (dotted JSON paths such as `metadata` or `spec.nodeName`), each
    /// whole; a path that runs into a field that is not a message takes that field whole.
    pub fn of<'a>(paths: impl IntoIterator<Item = &'a str>) -> Projection {
        let mut p = Projection(Some(Vec::new()));
        for path in paths {
            p.add(path);
        }
        p
    }

    fn add(&mut self, path: &str) {
        let Some(fields) = &mut self.0 else { return };
        let (head, rest) = path.split_once('.').map_or((path, None), |(h, r)| (h, Some(r)));
        let at = match fields.iter().position(|(n, _)| n == head) {
            Some(at) => at,
            None => {
                fields.push((head.to_owned(), Projection(Some(Vec::new()))));
                fields.len() - 1
            }
        };
        match rest {
            Some(rest) => fields[at].1.add(rest),
            None => fields[at].1 = Projection(None),
        }
    }

    /// What to decode of the field named `json`, if anything.
    fn field(&self, json: &str) -> Option<&Projection> {
        match &self.0 {
            None => Some(&WHOLE),
            Some(fields) => fields.iter().find(|(n, _)| n == json).map(|(_, p)| p),
        }
    }
}

// ---------------------------------------------------------------------------------------
// Wire format helpers.

// The primitives are `prost::encoding`'s (through `api::wire`); these are the wire types
// under short names.
const WT_VARINT: WireType = WireType::Varint;
const WT_I64: WireType = WireType::SixtyFourBit;
const WT_LEN: WireType = WireType::LengthDelimited;
const WT_I32: WireType = WireType::ThirtyTwoBit;
const MAX_TAG: u64 = (1 << 29) - 1;
