//! Unit tests plus checks against the real kube-apiserver captures in `testdata/golden`:
//! `golden` (the captures), `oracle` (prost decoding both sides), `behaviour` (units and
//! properties); the helpers they share are here.
//!
//! Why the normalizer: the apiserver's protobuf carries every non-pointer Go field, empty
//! or not (`generateName: ""`, `hostNetwork: false`, `retryAfterSeconds: 0`), while its
//! JSON leaves those out (`omitempty`). Neither side can be derived from the other, so
//! JSON-vs-protobuf comparisons drop empty strings, zeros, `false`, `null` and empty
//! objects/arrays on both sides before comparing; everything with content must agree.
//! Round trips within one encoding are compared exactly.

use super::decode::{decode_special, Reader};
use super::encode::encode_special;
use super::*;
use crate::api::time::{format_go_duration, format_timestamp, parse_go_duration, parse_timestamp};
use proptest::prelude::*;
use serde_json::json;

mod behaviour;
mod golden;
mod oracle;

use crate::testdata::golden;

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
        out.push((tag, wt as u8, payload));
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
