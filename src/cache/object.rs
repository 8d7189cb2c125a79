//! An object as kache stores it: its encoded bytes exactly as served in a LIST (JSON without
//! `kind`/`apiVersion` for built-in kinds, whole for custom resources; bare protobuf), plus the key, resourceVersion, labels and
//! selectable field values extracted once when it was ingested.

use crate::api::resource::Resource;
use crate::api::selector::{FieldSource, LabelSource};
use crate::api::table::{Cells, CustomColumns, TablePrinter};
use crate::api::transcode::Projection;
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
///
/// Kept small: a cache holds one per object per encoding, and at 100,000 pods every byte of
/// overhead here is 100 KB of RSS. Namespace and name are parts of the key; field values and
/// labels are packed into one allocation.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Object {
    /// Store key.
    pub key: Key,
    /// `metadata.resourceVersion`.
    pub rv: u64,
    /// The kind's selectable fields (beyond name and namespace), shared by every object of
    /// the kind.
    field_names: Arc<[String]>,
    /// The values of `field_names`, in order, as the apiserver's field set renders them
    /// (unset fields hold their Go zero value: `""`, or `false`/`0` for booleans and counts),
    /// then the labels sorted by key as key, value, key, value, ...
    selectables: Packed,
    /// `,` then the compact JSON of the object as a LIST item (built-in kinds: without `kind`
    /// and `apiVersion`; custom resources: whole) with its separator, so a list is one piece
    /// per item.
    pub json: Option<Bytes>,
    /// The object as a protobuf LIST item: the field-2 key and length, then the bare message.
    pub pb: Option<Bytes>,
    /// Where the `metadata` member's value lies in `json` (start, length): the
    /// PartialObjectMetadata view is that slice. (0, 0) when unknown.
    json_meta: (u32, u32),
    /// For custom resources (whose stored metadata is in the unstructured object's key
    /// order): the metadata re-encoded in ObjectMeta's field order, as the apiserver writes
    /// their PartialObjectMetadata and Table rows. Costs about the metadata's size again per
    /// object version held.
    struct_meta: Option<Bytes>,
    /// The Table row's cells, for kinds kache prints and objects held in JSON (Tables are
    /// JSON only): computed here, once per object version.
    cells: Option<Cells>,
}

impl LabelSource for Object {
    fn label(&self, key: &str) -> Option<&str> {
        let mut it = self.selectables.iter().skip(self.field_names.len());
        while let (Some(k), Some(v)) = (it.next(), it.next()) {
            match k.cmp(key) {
                std::cmp::Ordering::Less => {}
                std::cmp::Ordering::Equal => return Some(v),
                std::cmp::Ordering::Greater => return None,
            }
        }
        None
    }

    fn label_count(&self) -> usize {
        self.selectables.iter().skip(self.field_names.len()).count() / 2
    }

    fn all_labels(&self, f: &mut dyn FnMut(&str, &str) -> bool) -> bool {
        let mut it = self.selectables.iter().skip(self.field_names.len());
        while let (Some(k), Some(v)) = (it.next(), it.next()) {
            if !f(k, v) {
                return false;
            }
        }
        true
    }
}

impl FieldSource for Object {
    fn field(&self, name: &str) -> Option<&str> {
        match name {
            "metadata.name" => Some(self.name()),
            "metadata.namespace" => Some(self.namespace()),
            _ => {
                let i = self.field_names.iter().position(|f| f == name)?;
                self.selectables.iter().nth(i)
            }
        }
    }
}

/// Strings packed into one allocation, each as its length then its bytes. The length is
/// written in 6-bit groups, low first, with 0x40 marking that another group follows, so
/// every length byte is ASCII and the whole stays a `str` that can be sliced without
/// re-validating. Interned ([`super::intern::selectables`]): the JSON and protobuf objects
/// of one version share it.
#[derive(Clone, PartialEq, Eq)]
struct Packed(Arc<str>);

impl Default for Packed {
    fn default() -> Packed {
        Packed::interned("")
    }
}

impl Packed {
    fn new<'a>(items: impl IntoIterator<Item = &'a str>) -> Packed {
        Packed::interned(&Packed::pack(items))
    }

    /// `items` packed, not interned.
    fn pack<'a>(items: impl IntoIterator<Item = &'a str>) -> String {
        let mut out = String::new();
        for item in items {
            let mut n = item.len();
            loop {
                let group = (n & 0x3f) as u8;
                n >>= 6;
                out.push(char::from(if n > 0 { group | 0x40 } else { group }));
                if n == 0 {
                    break;
                }
            }
            out.push_str(item);
        }
        out
    }

    fn interned(s: &str) -> Packed {
        Packed(super::intern::selectables().intern(s))
    }

    fn iter(&self) -> impl Iterator<Item = &str> + '_ {
        let s = &*self.0;
        let mut pos = 0;
        std::iter::from_fn(move || {
            let bytes = s.as_bytes();
            let (mut len, mut shift) = (0usize, 0);
            loop {
                let b = *bytes.get(pos)?;
                pos += 1;
                len |= usize::from(b & 0x3f) << shift;
                shift += 6;
                if b & 0x40 == 0 {
                    break;
                }
            }
            let item = s.get(pos..pos + len)?;
            pos += len;
            Some(item)
        })
    }
}

impl std::fmt::Debug for Packed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_list().entries(self.iter()).finish()
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
        Object::printed(res, v, json, pb, None)
    }

    /// [`Object::new`], a custom resource's Table cells computed with its CRD's columns.
    pub fn printed(
        res: &Resource,
        v: &Value,
        json: Option<&[u8]>,
        pb: Option<&[u8]>,
        custom: Option<&Arc<CustomColumns>>,
    ) -> Result<Object, ObjectError> {
        let meta = v.get("metadata").ok_or(ObjectError::NoName)?;
        let name = meta.get("name").and_then(Value::as_str).ok_or(ObjectError::NoName)?;
        let namespace = meta.get("namespace").and_then(Value::as_str).unwrap_or("");
        let rv_str = meta.get("resourceVersion").and_then(Value::as_str).unwrap_or("");
        let rv = rv_str.parse().map_err(|_| ObjectError::BadResourceVersion(rv_str.to_string()))?;
        let mut labels: Vec<(&str, &str)> = meta
            .get("labels")
            .and_then(Value::as_object)
            .map(|m| m.iter().map(|(k, v)| (k.as_str(), v.as_str().unwrap_or(""))).collect())
            .unwrap_or_default();
        labels.sort_unstable();
        let values: Vec<std::borrow::Cow<'_, str>> = res
            .fields
            .iter()
            .map(|f| {
                let (path, zero) = field_source(f);
                field_value(v, path).map_or(std::borrow::Cow::Borrowed(zero), std::borrow::Cow::Owned)
            })
            .collect();
        Ok(Object {
            key: super::intern::keys().intern(&key(namespace, name)),
            rv,
            field_names: res.fields.clone(),
            selectables: Packed::new(values.iter().map(|v| &**v).chain(labels.iter().flat_map(|(k, v)| [*k, *v]))),
            json_meta: json.and_then(metadata_span).unwrap_or((0, 0)),
            struct_meta: (json.is_some() && !res.protobuf).then(|| Bytes::from(object_meta_json(meta))),
            cells: json.and(TablePrinter::of(&res.group, &res.plural, custom)).map(|p| p.cells(v)),
            json: json.map(json_piece),
            pb: pb.map(pb_piece),
        })
    }

    /// What ingest derived from the object's bytes (its key, resourceVersion, selectable
    /// values and labels, metadata span, re-encoded metadata, Table cells), encoded for a saved
    /// state: [`Object::from_derived`] rebuilds the object from it and the bytes without
    /// decoding them again. Varints as protobuf writes them, `bytes` a varint length first.
    pub fn derived(&self) -> Vec<u8> {
        use prost::encoding::encode_varint;
        fn bytes(out: &mut Vec<u8>, b: &[u8]) {
            encode_varint(b.len() as u64, out);
            out.extend_from_slice(b);
        }
        let mut out = Vec::with_capacity(32 + self.key.len() + self.selectables.0.len() + self.cells.as_ref().map_or(0, |c| c.len()));
        bytes(&mut out, self.key.as_bytes());
        encode_varint(self.rv, &mut out);
        bytes(&mut out, self.selectables.0.as_bytes());
        encode_varint(self.json_meta.0.into(), &mut out);
        encode_varint(self.json_meta.1.into(), &mut out);
        match &self.struct_meta {
            None => out.push(0),
            Some(m) => {
                out.push(1);
                bytes(&mut out, m);
            }
        }
        match &self.cells {
            None => out.push(0),
            Some(c) => {
                out.push(1);
                let (json, times) = c.parts();
                bytes(&mut out, json);
                encode_varint(times.len() as u64, &mut out);
                for (at, t) in times {
                    encode_varint(at.into(), &mut out);
                    match t {
                        None => out.push(0),
                        Some(t) => {
                            out.push(1);
                            // Zigzag, as protobuf's sint64.
                            encode_varint(((t << 1) ^ (t >> 63)) as u64, &mut out);
                        }
                    }
                }
            }
        }
        out
    }

    /// The object of `res` [`Object::derived`] wrote `derived` for, with its bytes: `json` a
    /// LIST item, `pb` a bare message. `None` when `derived` is not such an encoding or does
    /// not fit the bytes (a place beyond them, selectables that are not the kind's).
    pub fn from_derived(res: &Resource, derived: &[u8], json: Option<&[u8]>, pb: Option<&[u8]>) -> Option<Object> {
        let mut d = derived;
        let varint = |d: &mut &[u8]| prost::encoding::decode_varint(d).ok();
        let bytes = |d: &mut &[u8]| -> Option<Vec<u8>> {
            let n = usize::try_from(varint(d)?).ok()?;
            let (b, rest) = (d.get(..n)?, d.get(n..)?);
            *d = rest;
            Some(b.to_vec())
        };
        let byte = |d: &mut &[u8]| -> Option<u8> {
            let (b, rest) = d.split_first()?;
            *d = rest;
            Some(*b)
        };
        let key: Key = super::intern::keys().intern(std::str::from_utf8(&bytes(&mut d)?).ok()?);
        let rv = varint(&mut d)?;
        let selectables = Packed::interned(&String::from_utf8(bytes(&mut d)?).ok()?);
        let count = selectables.iter().count();
        // Whole items to the end: packed again, the same string.
        if Packed::pack(selectables.iter()) != *selectables.0 || count < res.fields.len() || !(count - res.fields.len()).is_multiple_of(2) {
            return None;
        }
        let json_meta = (u32::try_from(varint(&mut d)?).ok()?, u32::try_from(varint(&mut d)?).ok()?);
        let meta_end = json_meta.0 as usize + json_meta.1 as usize;
        if json_meta != (0, 0) && json.is_none_or(|j| meta_end > j.len() + 1) {
            return None;
        }
        let struct_meta = match byte(&mut d)? {
            0 => None,
            1 => Some(Bytes::from(bytes(&mut d)?)),
            _ => return None,
        };
        let cells = match byte(&mut d)? {
            0 => None,
            1 => {
                let template = bytes(&mut d)?;
                let n = usize::try_from(varint(&mut d)?).ok().filter(|n| *n <= d.len())?;
                let mut times = Vec::with_capacity(n);
                for _ in 0..n {
                    let at = u32::try_from(varint(&mut d)?).ok()?;
                    let t = match byte(&mut d)? {
                        0 => None,
                        1 => {
                            let z = varint(&mut d)?;
                            Some((z >> 1) as i64 ^ -((z & 1) as i64))
                        }
                        _ => return None,
                    };
                    times.push((at, t));
                }
                Some(Cells::from_parts(&template, times)?)
            }
            _ => return None,
        };
        if !d.is_empty() || key.is_empty() || (cells.is_some() && json.is_none()) {
            return None;
        }
        Some(Object {
            key,
            rv,
            field_names: res.fields.clone(),
            selectables,
            json_meta,
            struct_meta,
            cells,
            json: json.map(json_piece),
            pb: pb.map(pb_piece),
        })
    }

    /// An object with only a key and resourceVersion (no labels, fields or encodings).
    #[cfg(test)]
    pub(crate) fn bare(key: Key, rv: u64) -> Object {
        Object {
            key,
            rv,
            field_names: Arc::from([]),
            selectables: Packed::default(),
            json: None,
            pb: None,
            json_meta: (0, 0),
            struct_meta: None,
            cells: None,
        }
    }

    /// The same object with its selectable fields replaced (tests).
    #[cfg(test)]
    pub(crate) fn with_fields<'a>(mut self, fields: impl IntoIterator<Item = (&'a str, &'a str)>) -> Object {
        let (names, values): (Vec<&str>, Vec<&str>) = fields.into_iter().unzip();
        let labels: Vec<&str> = self.selectables.iter().skip(self.field_names.len()).collect();
        self.selectables = Packed::new(values.into_iter().chain(labels));
        self.field_names = names.into_iter().map(String::from).collect();
        self
    }

    /// `metadata.namespace` (empty for cluster-scoped kinds): the key before its `/`.
    pub fn namespace(&self) -> &str {
        self.key.split_once('/').map_or("", |(ns, _)| ns)
    }

    /// `metadata.name`: the key after its `/`, if any.
    pub fn name(&self) -> &str {
        self.key.split_once('/').map_or(&*self.key, |(_, n)| n)
    }

    /// The object's JSON without `kind`/`apiVersion` (a LIST item).
    pub fn json_item(&self) -> Option<Bytes> {
        self.json.as_ref().map(|j| j.slice(1..))
    }

    /// The object's stored JSON without its `,` (a LIST item), borrowed.
    pub fn json_item_ref(&self) -> Option<&[u8]> {
        self.json.as_deref().and_then(|j| j.get(1..))
    }

    /// The bare protobuf message of the object (its stored LIST item without the item's
    /// field key and length).
    pub fn pb_message_ref(&self) -> Option<&[u8]> {
        let p = self.pb.as_ref()?;
        let mut pos = 1;
        crate::api::wire::get_varint(p, &mut pos)?;
        p.get(pos..)
    }

    /// The compact JSON of `metadata` (an ObjectMeta), sliced from the stored JSON.
    pub fn json_metadata(&self) -> Option<&[u8]> {
        if let Some(m) = &self.struct_meta {
            return Some(m);
        }
        let (at, len) = self.json_meta;
        let j = self.json.as_deref()?;
        j.get(at as usize..at as usize + len as usize).filter(|m| !m.is_empty())
    }

    /// The Table row's cells (kinds kache prints, objects held in JSON), unless withheld.
    pub fn cells(&self) -> Option<&Cells> {
        self.cells.as_ref().filter(|c| !c.is_withheld())
    }

    /// Whether the object's Table cells were withheld for their size: a Table with it in
    /// it is the upstream's to answer.
    pub fn unprinted(&self) -> bool {
        self.cells.as_ref().is_some_and(Cells::is_withheld)
    }

    /// Withhold the Table cells if they take more than `max` bytes (a custom resource whose
    /// many columns each print much of the object); true if they were.
    pub fn withhold_cells_over(&mut self, max: usize) -> bool {
        let over = self.cells.as_ref().is_some_and(|c| c.len() > max);
        if over {
            self.cells = Some(Cells::withheld());
        }
        over
    }

    /// The protobuf message's field 1 (`metadata`, an ObjectMeta) with its key and length:
    /// exactly a `PartialObjectMetadata` message, which holds only that field.
    pub fn pb_metadata(&self) -> Option<&[u8]> {
        let m = self.pb_message_ref()?;
        let mut pos = 0;
        match crate::api::wire::next_field(m, &mut pos)? {
            (1, prost::encoding::WireType::LengthDelimited, _) => m.get(..pos),
            _ => None,
        }
    }

    /// `metadata.uid`, read from whichever encoding is held (decoded on demand: only a
    /// relist compares uids, of the objects it finds changed).
    pub fn uid(&self) -> Option<String> {
        #[derive(serde::Deserialize)]
        struct Meta {
            uid: Option<String>,
        }
        if let Some(m) = self.json_metadata() {
            return serde_json::from_slice::<Meta>(m).ok()?.uid;
        }
        let m = self.pb_metadata()?;
        let mut pos = 0;
        let (_, _, meta) = crate::api::wire::next_field(m, &mut pos)?;
        let meta = &m[meta];
        let mut p = 0;
        while p < meta.len() {
            let (f, wt, r) = crate::api::wire::next_field(meta, &mut p)?;
            if f == 5 && wt == prost::encoding::WireType::LengthDelimited {
                return std::str::from_utf8(&meta[r]).ok().map(str::to_string);
            }
        }
        None
    }

    /// Size of the encodings held (a custom resource's re-encoded metadata too), in bytes.
    pub fn encoded_len(&self) -> usize {
        self.json.as_ref().map_or(0, Bytes::len) + self.pb.as_ref().map_or(0, Bytes::len) + self.struct_meta.as_ref().map_or(0, Bytes::len)
    }

    /// The same object at another resourceVersion (for DELETED events of objects leaving a
    /// selector, which carry the previous state at the new RV). Encodings that cannot be
    /// rewritten are dropped.
    pub fn at_rv(&self, rv: u64) -> Object {
        let json = self.json.as_ref().and_then(|j| json_with_rv(j, self.rv, rv)).map(Bytes::from);
        // The RV is inside metadata: its span grows or shrinks with the RV's digits.
        let grown = json.as_ref().map_or(0, |j| j.len() as i64) - self.json.as_ref().map_or(0, |j| j.len() as i64);
        let json_meta = match json {
            Some(_) if self.json_meta.1 > 0 => (self.json_meta.0, (i64::from(self.json_meta.1) + grown) as u32),
            _ => (0, 0),
        };
        Object {
            rv,
            json,
            json_meta,
            struct_meta: self.struct_meta.as_ref().and_then(|m| json_with_rv(m, self.rv, rv)).map(Bytes::from),
            pb: self.pb_message_ref().and_then(|p| crate::api::wire::with_resource_version(p, rv)).map(|m| pb_piece(&m)),
            ..self.clone()
        }
    }

    /// Whether the label set and field values equal another object's (so no selector can
    /// tell them apart).
    /// Whether `other` holds the very same selectables (one interned copy), not only equal ones.
    #[cfg(test)]
    pub(crate) fn shares_selectables(&self, other: &Object) -> bool {
        Arc::ptr_eq(&self.selectables.0, &other.selectables.0)
    }

    pub fn same_selectables(&self, other: &Object) -> bool {
        self.selectables == other.selectables
    }
}

/// Where a selectable field's value comes from (its JSON path) and what the apiserver's field
/// set holds when the object leaves it unset: the Go zero value of the field's type, so
/// `spec.hostNetwork=false` selects pods that do not set it, as it does in the apiserver.
/// What [`Object::new`] reads of an object decoded from protobuf (it keeps the message's own
/// bytes, so its metadata needs no JSON form): name, namespace, resourceVersion and labels,
/// and the sources of its kind's selectable fields. Not the rest of the metadata: a pod's
/// managedFields alone (raw JSON inside the message) cost more to decode than all of that.
pub(crate) fn read_projection(res: &Resource) -> Projection {
    const META: [&str; 4] = ["metadata.name", "metadata.namespace", "metadata.resourceVersion", "metadata.labels"];
    Projection::of(META.into_iter().chain(res.fields.iter().map(|f| field_source(f).0)))
}

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
fn field_value(v: &Value, path: &str) -> Option<String> {
    let mut cur = v;
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

/// An ObjectMeta (decoded JSON, e.g. a custom resource's in its unstructured key order) as
/// the apiserver encodes the typed struct: its fields in declaration order, empty ones left
/// out (but `creationTimestamp`, `null` when unset), owner references and managed fields
/// entries in their structs' field order too. Maps (labels, annotations, fieldsV1) keep the
/// order they come in (the apiserver writes them sorted).
pub fn object_meta_json(meta: &Value) -> Vec<u8> {
    let mut out = Vec::with_capacity(512);
    meta_members(&mut out, meta, OBJECT_META_FIELDS, &["creationTimestamp"]);
    out
}

/// `v`'s `fields` as a JSON object in that order, empty ones left out unless `always`.
fn meta_members(out: &mut Vec<u8>, v: &Value, fields: &[&str], always: &[&str]) {
    out.push(b'{');
    let mut first = true;
    for f in fields {
        let x = v.get(*f);
        let empty = match x {
            None | Some(Value::Null) => true,
            Some(Value::String(s)) => s.is_empty(),
            Some(Value::Number(n)) => n.as_f64() == Some(0.0) && *f == "generation",
            Some(Value::Object(m)) => m.is_empty() && *f != "fieldsV1",
            Some(Value::Array(a)) => a.is_empty(),
            Some(Value::Bool(_)) => false,
        };
        if empty && !always.contains(f) {
            continue;
        }
        if !first {
            out.push(b',');
        }
        first = false;
        crate::api::json::write_str(out, f);
        out.push(b':');
        match (*f, x) {
            (_, None) => out.extend_from_slice(b"null"),
            ("ownerReferences", Some(Value::Array(refs))) => {
                meta_list(out, refs, &["apiVersion", "kind", "name", "uid", "controller", "blockOwnerDeletion"])
            }
            ("managedFields", Some(Value::Array(entries))) => {
                meta_list(out, entries, &["manager", "operation", "apiVersion", "time", "fieldsType", "fieldsV1", "subresource"])
            }
            (_, Some(x)) => crate::api::json::write(out, x),
        }
    }
    out.push(b'}');
}

/// A list of structs, each as [`meta_members`] writes it.
fn meta_list(out: &mut Vec<u8>, items: &[Value], fields: &[&str]) {
    out.push(b'[');
    for (i, x) in items.iter().enumerate() {
        if i > 0 {
            out.push(b',');
        }
        meta_members(out, x, fields, &[]);
    }
    out.push(b']');
}

/// ObjectMeta's fields in declaration order.
const OBJECT_META_FIELDS: &[&str] = &[
    "name",
    "generateName",
    "namespace",
    "selfLink",
    "uid",
    "resourceVersion",
    "generation",
    "creationTimestamp",
    "deletionTimestamp",
    "deletionGracePeriodSeconds",
    "labels",
    "annotations",
    "ownerReferences",
    "finalizers",
    "managedFields",
];

/// Where the top-level `metadata` member's value lies in a stored JSON piece (`,` + `item`).
/// Built-in objects start with it (the type meta is stripped), so only the metadata is
/// read; other key orders are read whole.
fn metadata_span(item: &[u8]) -> Option<(u32, u32)> {
    use serde::Deserialize;
    use serde_json::value::RawValue;
    #[derive(Deserialize)]
    struct Meta<'a> {
        #[serde(borrow)]
        metadata: &'a RawValue,
    }
    const FIRST: &[u8] = b"{\"metadata\":";
    let raw = match item.strip_prefix(FIRST) {
        Some(rest) => <&RawValue>::deserialize(&mut serde_json::Deserializer::from_slice(rest)).ok()?,
        None => serde_json::from_slice::<Meta<'_>>(item).ok()?.metadata,
    };
    let raw = raw.get().as_bytes();
    let at = (raw.as_ptr() as usize).checked_sub(item.as_ptr() as usize)? + 1;
    Some((u32::try_from(at).ok()?, u32::try_from(raw.len()).ok()?))
}

fn json_piece(item: &[u8]) -> Bytes {
    let mut v = Vec::with_capacity(item.len() + 1);
    v.push(b',');
    v.extend_from_slice(item);
    Bytes::from(v)
}

fn pb_piece(message: &[u8]) -> Bytes {
    // Sized once: 30,000 pods copied in at start grow no buffer.
    let mut v = Vec::with_capacity(crate::api::wire::len_field_size(2, message.len()));
    crate::api::wire::put_bytes(&mut v, 2, message);
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
        Some(m) => crate::api::json::to_vec(&WithoutTypeMeta(m)),
        None => crate::api::json::to_vec(v),
    }
}

/// Encode an object of `r` as the apiserver writes it as a LIST item: [`item_json`] for
/// built-in kinds, the whole object with keys sorted at every level (Go's unstructured
/// encoding) for custom resources.
pub fn list_item_json(r: &Resource, v: &Value) -> Vec<u8> {
    if r.custom() {
        crate::api::json::to_vec(&Sorted(v))
    } else {
        item_json(v)
    }
}

/// A JSON value written with object keys in byte order.
struct Sorted<'a>(&'a Value);

impl Serialize for Sorted<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match self.0 {
            Value::Object(m) => {
                let mut keys: Vec<&String> = m.keys().collect();
                keys.sort_unstable();
                let mut out = s.serialize_map(Some(keys.len()))?;
                for k in keys {
                    out.serialize_entry(k, &Sorted(&m[k]))?;
                }
                out.end()
            }
            Value::Array(a) => s.collect_seq(a.iter().map(Sorted)),
            other => other.serialize(s),
        }
    }
}

/// A stored LIST item (without its `,`) as the whole object of a GET or watch event: the
/// type meta put back in front for built-in kinds; custom resources' items are whole.
pub fn whole_json(r: &Resource, out: &mut Vec<u8>, item: &[u8]) {
    if r.custom() {
        out.extend_from_slice(item);
    } else {
        with_type_meta(out, &r.api_version(), &r.kind, item);
    }
}

/// The JSON of a stored item with `kind` and `apiVersion` put back in front (GET and watch).
pub fn with_type_meta(out: &mut Vec<u8>, api_version: &str, kind: &str, item: &[u8]) {
    out.extend_from_slice(b"{\"kind\":");
    crate::api::json::write_str(out, kind);
    out.extend_from_slice(b",\"apiVersion\":");
    crate::api::json::write_str(out, api_version);
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
        crate::sim::catalog::resource("pods")
    }

    #[test]
    fn golden_pod_round_trips_through_item_and_type_meta() {
        let body = crate::testdata::golden("01-get-pod.json.body");
        let v: Value = serde_json::from_slice(&body).unwrap();
        let item = item_json(&v);
        assert!(item.starts_with(b"{\"metadata\":"));
        let mut out = Vec::new();
        with_type_meta(&mut out, "v1", "Pod", &item);
        out.push(b'\n');
        assert_eq!(out, body);
        let o = Object::new(&pods(), &v, Some(&item), Some(b"\x0a\x02\x32\x00")).unwrap();
        assert_eq!(o.json_item().unwrap(), item);
        assert_eq!(o.pb_message_ref().unwrap(), b"\x0a\x02\x32\x00");
        assert_eq!(&*o.key, "golden/web-1");
        assert_eq!(o.rv, 61505);
        assert_eq!(o.field("spec.nodeName"), Some("node-0000"));
        assert_eq!(o.field("spec.restartPolicy"), Some("Always"));
        assert_eq!(o.label("app"), Some("web"));
        assert_eq!(o.field("spec.hostNetwork"), Some("false"), "unset booleans are false in the field set");
        assert_eq!(o.field("status.nominatedNodeName"), Some(""), "unset strings are empty");
        let meta = crate::api::json::to_vec(&v["metadata"]);
        assert_eq!(o.json_metadata().unwrap(), meta);
        let moved = o.at_rv(70000);
        let mv: Value = serde_json::from_slice(&moved.json_item().unwrap()).unwrap();
        let moved_meta: Value = serde_json::from_slice(moved.json_metadata().unwrap()).unwrap();
        assert_eq!(moved_meta, mv["metadata"], "the span follows the rewritten RV");
        assert_eq!(moved.pb_message_ref().unwrap(), b"\x0a\x07\x32\x0570000");
        assert_eq!(mv["metadata"]["resourceVersion"], "70000");
        assert_eq!(moved.rv, 70000);
    }

    proptest::proptest! {
        #[test]
        fn packed_strings_read_back_as_written(items in proptest::collection::vec(".{0,70}|[a-z]{4000,4200}", 0..12)) {
            let p = Packed::new(items.iter().map(String::as_str));
            let back: Vec<&str> = p.iter().collect();
            proptest::prop_assert_eq!(back, items.iter().map(String::as_str).collect::<Vec<_>>());
        }
    }

    #[test]
    fn labels_are_found_by_key_and_namespace_and_name_come_from_the_key() {
        let v = serde_json::json!({"metadata": {"name": "p", "namespace": "ns", "resourceVersion": "3",
            "labels": {"b": "2", "a": "1", "long": "x".repeat(63), "": "empty-key?"}}});
        let o = Object::new(&pods(), &v, None, None).unwrap();
        assert_eq!((o.label("a"), o.label("b"), o.label("c"), o.label("aa")), (Some("1"), Some("2"), None, None));
        assert_eq!(o.label("long").map(str::len), Some(63));
        assert_eq!(o.label(""), Some("empty-key?"));
        assert_eq!((o.namespace(), o.name()), ("ns", "p"));
        let moved = o.clone().with_fields([("spec.nodeName", "n9")]);
        assert_eq!((moved.field("spec.nodeName"), moved.label("b"), moved.field("status.phase")), (Some("n9"), Some("2"), None));
        assert!(!moved.same_selectables(&o));
        let node = Object::new(&pods(), &serde_json::json!({"metadata": {"name": "n1", "resourceVersion": "1"}}), None, None).unwrap();
        assert_eq!((node.namespace(), node.name(), node.field("metadata.name")), ("", "n1", Some("n1")));
    }

    #[test]
    fn missing_name_or_rv_is_an_error() {
        let r = pods();
        assert_eq!(Object::new(&r, &serde_json::json!({}), None, None), Err(ObjectError::NoName));
        let v = serde_json::json!({"metadata": {"name": "a", "resourceVersion": "x"}});
        assert!(matches!(Object::new(&r, &v, None, None), Err(ObjectError::BadResourceVersion(_))));
    }
}
