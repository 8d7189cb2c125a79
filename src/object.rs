//! An object as kache stores it: its encoded bytes exactly as served (JSON without
//! `kind`/`apiVersion`, and bare protobuf), plus the key, resourceVersion, labels and
//! selectable field values extracted once when it was ingested.

use crate::resource::Resource;
use crate::selector::{FieldSource, LabelSource};
use bytes::Bytes;
use serde::ser::{Serialize, SerializeMap, Serializer};
use serde_json::{Map, Value};
use std::sync::Arc;

/// Store key: `namespace/name` for namespaced kinds, `name` otherwise. Its byte order is the
/// order of the apiserver's etcd keys, so it is the order LIST returns items in.
pub type Key = Arc<str>;

/// Why an object could not be ingested.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum ObjectError {
    /// The object is not a JSON object or has no `metadata.name`.
    #[error("object has no metadata.name")]
    NoName,
    /// `metadata.resourceVersion` is missing or not a decimal integer.
    #[error("object has an invalid metadata.resourceVersion {0:?}")]
    BadResourceVersion(String),
}

/// A stored object.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Object {
    /// Store key.
    pub key: Key,
    /// `metadata.namespace` (empty for cluster-scoped kinds).
    pub namespace: Box<str>,
    /// `metadata.name`.
    pub name: Box<str>,
    /// `metadata.resourceVersion`.
    pub rv: u64,
    /// Labels sorted by key.
    pub labels: Box<[(Box<str>, Box<str>)]>,
    /// Values of the kind's selectable fields (beyond name and namespace), every one of
    /// them, as the apiserver's field set renders it: unset fields hold their Go zero value
    /// (`""`, or `false`/`0` for booleans and counts).
    pub fields: Box<[(Box<str>, Box<str>)]>,
    /// `,` then the compact JSON of the object without `kind` and `apiVersion`: a LIST item
    /// with its separator, so a list is one piece per item.
    pub json: Option<Bytes>,
    /// The object as a protobuf LIST item: the field-2 key and length, then the bare message.
    pub pb: Option<Bytes>,
}

impl LabelSource for Object {
    fn label(&self, key: &str) -> Option<&str> {
        self.labels.label(key)
    }
}

impl FieldSource for Object {
    fn field(&self, name: &str) -> Option<&str> {
        match name {
            "metadata.name" => Some(&self.name),
            "metadata.namespace" => Some(&self.namespace),
            _ => self.fields.iter().find(|(k, _)| &**k == name).map(|(_, v)| &**v),
        }
    }
}

/// The store key of `name` in `namespace`.
pub fn key(namespace: &str, name: &str) -> Key {
    if namespace.is_empty() {
        Arc::from(name)
    } else {
        Arc::from(format!("{namespace}/{name}"))
    }
}

impl Object {
    /// Build an object from its decoded JSON form (used to extract keys and fields) and its
    /// encodings: `json` as produced by [`item_json`], `pb` the bare protobuf message.
    pub fn new(res: &Resource, v: &Value, json: Option<&[u8]>, pb: Option<&[u8]>) -> Result<Object, ObjectError> {
        let meta = v.get("metadata").ok_or(ObjectError::NoName)?;
        let name = meta.get("name").and_then(Value::as_str).ok_or(ObjectError::NoName)?;
        let namespace = meta.get("namespace").and_then(Value::as_str).unwrap_or("");
        let rv_str = meta.get("resourceVersion").and_then(Value::as_str).unwrap_or("");
        let rv = rv_str.parse().map_err(|_| ObjectError::BadResourceVersion(rv_str.to_string()))?;
        let mut labels: Vec<(Box<str>, Box<str>)> = meta
            .get("labels")
            .and_then(Value::as_object)
            .map(|m| m.iter().map(|(k, v)| (k.as_str().into(), v.as_str().unwrap_or("").into())).collect())
            .unwrap_or_default();
        labels.sort();
        let fields = res
            .fields
            .iter()
            .map(|f| {
                let (path, zero) = field_source(f);
                (f.as_str().into(), field_value(v, path).unwrap_or_else(|| zero.to_string()).into())
            })
            .collect();
        Ok(Object {
            key: key(namespace, name),
            namespace: namespace.into(),
            name: name.into(),
            rv,
            labels: labels.into(),
            fields,
            json: json.map(json_piece),
            pb: pb.map(pb_piece),
        })
    }

    /// The object's JSON without `kind`/`apiVersion` (a LIST item).
    pub fn json_item(&self) -> Option<Bytes> {
        self.json.as_ref().map(|j| j.slice(1..))
    }

    /// The bare protobuf message of the object.
    pub fn pb_message(&self) -> Option<Bytes> {
        let p = self.pb.as_ref()?;
        let mut pos = 1;
        crate::wire::get_varint(p, &mut pos)?;
        Some(p.slice(pos..))
    }

    /// Size of the encodings held, in bytes.
    pub fn encoded_len(&self) -> usize {
        self.json.as_ref().map_or(0, Bytes::len) + self.pb.as_ref().map_or(0, Bytes::len)
    }

    /// The same object at another resourceVersion (for DELETED events of objects leaving a
    /// selector, which carry the previous state at the new RV). Encodings that cannot be
    /// rewritten are dropped.
    pub fn at_rv(&self, rv: u64) -> Object {
        Object {
            rv,
            json: self.json.as_ref().and_then(|j| json_with_rv(j, self.rv, rv)).map(Bytes::from),
            pb: self.pb_message().and_then(|p| crate::wire::with_resource_version(&p, rv)).map(|m| pb_piece(&m)),
            ..self.clone()
        }
    }

    /// Whether the label set and field values equal another object's (so no selector can
    /// tell them apart).
    pub fn same_selectables(&self, other: &Object) -> bool {
        self.labels == other.labels && self.fields == other.fields
    }
}

/// Where a selectable field's value comes from (its JSON path) and what the apiserver's field
/// set holds when the object leaves it unset: the Go zero value of the field's type, so
/// `spec.hostNetwork=false` selects pods that do not set it, as it does in the apiserver.
fn field_source(field: &str) -> (&str, &'static str) {
    match field {
        // Events expose `source` as source.component.
        "source" => ("source.component", ""),
        "spec.hostNetwork" | "spec.unschedulable" => (field, "false"),
        "status.replicas" => (field, "0"),
        // Jobs: the field is named `status.successful`, the value is `status.succeeded`.
        "status.successful" => ("status.succeeded", "0"),
        _ => (field, ""),
    }
}

/// The value at a JSON path, rendered as the apiserver's field set renders it.
fn field_value<'a>(v: &'a Value, path: &str) -> Option<String> {
    let mut cur: &'a Value = v;
    for part in path.split('.') {
        cur = cur.get(part)?;
    }
    match cur {
        Value::String(s) => Some(s.clone()),
        Value::Bool(b) => Some(b.to_string()),
        Value::Number(n) => Some(n.to_string()),
        _ => None,
    }
}

/// Replace the first `"resourceVersion":"<old>"` (metadata's: it precedes any user content
/// that could hold that key, since keys inside string values are escaped) with `new`.
fn json_with_rv(json: &[u8], old: u64, new: u64) -> Option<Vec<u8>> {
    let needle = format!("\"resourceVersion\":\"{old}\"");
    let at = json.windows(needle.len()).position(|w| w == needle.as_bytes())?;
    let mut out = Vec::with_capacity(json.len() + 4);
    out.extend_from_slice(&json[..at]);
    out.extend_from_slice(format!("\"resourceVersion\":\"{new}\"").as_bytes());
    out.extend_from_slice(&json[at + needle.len()..]);
    Some(out)
}

fn json_piece(item: &[u8]) -> Bytes {
    let mut v = Vec::with_capacity(item.len() + 1);
    v.push(b',');
    v.extend_from_slice(item);
    Bytes::from(v)
}

fn pb_piece(message: &[u8]) -> Bytes {
    let mut v = crate::wire::item_header(message.len());
    v.extend_from_slice(message);
    Bytes::from(v)
}

struct WithoutTypeMeta<'a>(&'a Map<String, Value>);

impl Serialize for WithoutTypeMeta<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut m = s.serialize_map(None)?;
        for (k, v) in self.0.iter().filter(|(k, _)| *k != "kind" && *k != "apiVersion") {
            m.serialize_entry(k, v)?;
        }
        m.end()
    }
}

/// Encode an object's JSON as a LIST item: compact, Go-style escapes, without `kind` and
/// `apiVersion`.
pub fn item_json(v: &Value) -> Vec<u8> {
    match v.as_object() {
        Some(m) => crate::json::to_vec(&WithoutTypeMeta(m)),
        None => crate::json::to_vec(v),
    }
}

/// The JSON of a stored item with `kind` and `apiVersion` put back in front (GET and watch).
pub fn with_type_meta(out: &mut Vec<u8>, api_version: &str, kind: &str, item: &[u8]) {
    out.extend_from_slice(b"{\"kind\":");
    crate::json::write_str(out, kind);
    out.extend_from_slice(b",\"apiVersion\":");
    crate::json::write_str(out, api_version);
    match item.get(1..) {
        Some(rest) if rest != b"}" => {
            out.push(b',');
            out.extend_from_slice(rest);
        }
        _ => out.push(b'}'),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pods() -> Resource {
        crate::resource::simulated().into_iter().find(|r| r.plural == "pods").unwrap()
    }

    #[test]
    fn golden_pod_round_trips_through_item_and_type_meta() {
        let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/../shared/golden");
        let body = std::fs::read(format!("{dir}/01-get-pod.json.body")).unwrap();
        let v: Value = serde_json::from_slice(&body).unwrap();
        let item = item_json(&v);
        assert!(item.starts_with(b"{\"metadata\":"));
        let mut out = Vec::new();
        with_type_meta(&mut out, "v1", "Pod", &item);
        out.push(b'\n');
        assert_eq!(out, body);
        let o = Object::new(&pods(), &v, Some(&item), Some(b"\x0a\x02\x32\x00")).unwrap();
        assert_eq!(o.json_item().unwrap(), item);
        assert_eq!(&o.pb_message().unwrap()[..], b"\x0a\x02\x32\x00");
        assert_eq!(&*o.key, "golden/web-1");
        assert_eq!(o.rv, 61505);
        assert_eq!(o.field("spec.nodeName"), Some("node-0000"));
        assert_eq!(o.field("spec.restartPolicy"), Some("Always"));
        assert_eq!(o.label("app"), Some("web"));
        assert_eq!(o.field("spec.hostNetwork"), Some("false"), "unset booleans are false in the field set");
        assert_eq!(o.field("status.nominatedNodeName"), Some(""), "unset strings are empty");
        let moved = o.at_rv(70000);
        let mv: Value = serde_json::from_slice(&moved.json_item().unwrap()).unwrap();
        assert_eq!(&moved.pb_message().unwrap()[..], b"\x0a\x07\x32\x0570000");
        assert_eq!(mv["metadata"]["resourceVersion"], "70000");
        assert_eq!(moved.rv, 70000);
    }

    #[test]
    fn missing_name_or_rv_is_an_error() {
        let r = pods();
        assert_eq!(Object::new(&r, &serde_json::json!({}), None, None), Err(ObjectError::NoName));
        let v = serde_json::json!({"metadata": {"name": "a", "resourceVersion": "x"}});
        assert!(matches!(Object::new(&r, &v, None, None), Err(ObjectError::BadResourceVersion(_))));
    }
}
