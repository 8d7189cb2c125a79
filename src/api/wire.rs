//! Protobuf framing of the Kubernetes API: the `k8s\0` + `runtime.Unknown` envelope, list
//! messages whose items are bare object bytes, and length-prefixed watch frames. Everything
//! here writes small headers around object bytes that are never copied or re-encoded. The
//! varint and key primitives are `prost::encoding`'s, wrapped for `Vec<u8>` and byte offsets.

use prost::encoding::{self, WireType};

/// The 4-byte magic that starts every non-watch protobuf body.
pub const MAGIC: &[u8; 4] = b"k8s\0";
/// `runtime.Unknown` fields 3 and 4 (contentEncoding, contentType), always written empty.
pub const UNKNOWN_SUFFIX: &[u8] = &[0x1a, 0x00, 0x22, 0x00];
/// Protobuf media type.
pub const PROTOBUF: &str = "application/vnd.kubernetes.protobuf";
/// Protobuf watch media type.
pub const PROTOBUF_WATCH: &str = "application/vnd.kubernetes.protobuf;stream=watch";

/// Append a base-128 varint.
pub fn put_varint(buf: &mut Vec<u8>, v: u64) {
    encoding::encode_varint(v, buf);
}

/// Bytes a varint of `v` takes.
pub fn varint_len(v: u64) -> usize {
    encoding::encoded_len_varint(v)
}

/// Append the key of a field.
pub fn put_key(buf: &mut Vec<u8>, field: u32, wire_type: WireType) {
    encoding::encode_key(field, wire_type, buf);
}

/// Append the key of a length-delimited field and its length.
pub fn put_len_header(buf: &mut Vec<u8>, field: u32, len: usize) {
    put_key(buf, field, WireType::LengthDelimited);
    put_varint(buf, len as u64);
}

/// Bytes a length-delimited field of `len` bytes takes in total (key + length + payload).
pub fn len_field_size(field: u32, len: usize) -> usize {
    encoding::key_len(field) + varint_len(len as u64) + len
}

/// Append a length-delimited field.
pub fn put_bytes(buf: &mut Vec<u8>, field: u32, data: &[u8]) {
    put_len_header(buf, field, data.len());
    buf.extend_from_slice(data);
}

/// Append a varint field.
pub fn put_uint(buf: &mut Vec<u8>, field: u32, v: u64) {
    put_key(buf, field, WireType::Varint);
    put_varint(buf, v);
}

fn type_meta(api_version: &str, kind: &str) -> Vec<u8> {
    let mut tm = Vec::with_capacity(api_version.len() + kind.len() + 4);
    put_bytes(&mut tm, 1, api_version.as_bytes());
    put_bytes(&mut tm, 2, kind.as_bytes());
    tm
}

/// The bytes that go before `raw_len` bytes of object (or list) message to make a complete
/// `k8s\0` + Unknown envelope; [`UNKNOWN_SUFFIX`] goes after.
pub fn envelope_prefix(api_version: &str, kind: &str, raw_len: usize) -> Vec<u8> {
    let mut out = Vec::with_capacity(32 + kind.len());
    out.extend_from_slice(MAGIC);
    put_bytes(&mut out, 1, &type_meta(api_version, kind));
    put_len_header(&mut out, 2, raw_len);
    out
}

/// Size of a complete envelope around `raw_len` bytes.
pub fn envelope_len(api_version: &str, kind: &str, raw_len: usize) -> usize {
    envelope_prefix(api_version, kind, raw_len).len() + raw_len + UNKNOWN_SUFFIX.len()
}

/// A complete envelope around `raw` (for small messages such as Status).
pub fn envelope(api_version: &str, kind: &str, raw: &[u8]) -> Vec<u8> {
    let mut out = envelope_prefix(api_version, kind, raw.len());
    out.extend_from_slice(raw);
    out.extend_from_slice(UNKNOWN_SUFFIX);
    out
}

/// Encode a `ListMeta` {1 selfLink, 2 resourceVersion, 3 continue, 4 remainingItemCount}.
/// The apiserver writes the three strings even when empty.
pub fn list_meta(rv: u64, cont: Option<&str>, remaining: Option<u64>) -> Vec<u8> {
    let mut m = Vec::with_capacity(16);
    put_bytes(&mut m, 1, b"");
    put_bytes(&mut m, 2, rv.to_string().as_bytes());
    put_bytes(&mut m, 3, cont.unwrap_or("").as_bytes());
    if let Some(n) = remaining {
        put_uint(&mut m, 4, n);
    }
    m
}

/// Header of one list item: field 2 of the list message holding the bare object.
pub fn item_header(len: usize) -> Vec<u8> {
    let mut h = Vec::with_capacity(6);
    put_len_header(&mut h, 2, len);
    h
}

/// The pieces of one protobuf watch frame around an object's bare bytes: `prefix`, the
/// object bytes, then [`UNKNOWN_SUFFIX`].
pub fn watch_frame_prefix(event_type: &str, api_version: &str, kind: &str, obj_len: usize) -> Vec<u8> {
    let envelope_total = envelope_len(api_version, kind, obj_len);
    let raw_ext_len = len_field_size(1, envelope_total);
    let event_len = len_field_size(1, event_type.len()) + len_field_size(2, raw_ext_len);
    let mut out = Vec::with_capacity(64);
    out.extend_from_slice(&(event_len as u32).to_be_bytes());
    put_bytes(&mut out, 1, event_type.as_bytes());
    put_len_header(&mut out, 2, raw_ext_len);
    put_len_header(&mut out, 1, envelope_total);
    out.extend_from_slice(&envelope_prefix(api_version, kind, obj_len));
    out
}

/// A complete watch frame around already-enveloped-less raw bytes (small objects).
pub fn watch_frame(event_type: &str, api_version: &str, kind: &str, raw: &[u8]) -> Vec<u8> {
    let mut out = watch_frame_prefix(event_type, api_version, kind, raw.len());
    out.extend_from_slice(raw);
    out.extend_from_slice(UNKNOWN_SUFFIX);
    out
}

/// Read a varint at `*pos`, advancing it.
pub fn get_varint(buf: &[u8], pos: &mut usize) -> Option<u64> {
    let mut rest = buf.get(*pos..)?;
    let v = encoding::decode_varint(&mut rest).ok()?;
    *pos = buf.len() - rest.len();
    Some(v)
}

/// One field of a message: (field number, wire type, payload range for length-delimited
/// fields or the whole value range otherwise). `None` for truncated or malformed bytes and
/// for the group wire types, which Kubernetes messages never use.
pub fn next_field(buf: &[u8], pos: &mut usize) -> Option<(u32, WireType, std::ops::Range<usize>)> {
    let mut rest = buf.get(*pos..)?;
    let (field, wt) = encoding::decode_key(&mut rest).ok()?;
    *pos = buf.len() - rest.len();
    let start = *pos;
    let end = match wt {
        WireType::Varint => {
            get_varint(buf, pos)?;
            *pos
        }
        WireType::SixtyFourBit => pos.checked_add(8)?,
        WireType::ThirtyTwoBit => pos.checked_add(4)?,
        WireType::LengthDelimited => {
            let len = usize::try_from(get_varint(buf, pos)?).ok()?;
            let s = *pos;
            let end = s.checked_add(len).filter(|e| *e <= buf.len())?;
            *pos = end;
            return Some((field, wt, s..end));
        }
        WireType::StartGroup | WireType::EndGroup => return None,
    };
    *pos = end;
    (end <= buf.len()).then_some((field, wt, start..end))
}

/// Rewrite `metadata.resourceVersion` (ObjectMeta field 6 inside object field 1) of a bare
/// object message. `None` if the bytes are not a well-formed object message.
pub fn with_resource_version(obj: &[u8], rv: u64) -> Option<Vec<u8>> {
    let mut out = Vec::with_capacity(obj.len() + 8);
    let mut pos = 0;
    while pos < obj.len() {
        let start = pos;
        let (field, wt, range) = next_field(obj, &mut pos)?;
        if field != 1 || wt != WireType::LengthDelimited {
            out.extend_from_slice(&obj[start..pos]);
            continue;
        }
        let meta = &obj[range];
        let mut new_meta = Vec::with_capacity(meta.len() + 8);
        let mut mp = 0;
        let mut written = false;
        while mp < meta.len() {
            let ms = mp;
            let (f, _, _) = next_field(meta, &mut mp)?;
            if f == 6 {
                if !written {
                    put_bytes(&mut new_meta, 6, rv.to_string().as_bytes());
                    written = true;
                }
            } else {
                if f > 6 && !written {
                    put_bytes(&mut new_meta, 6, rv.to_string().as_bytes());
                    written = true;
                }
                new_meta.extend_from_slice(&meta[ms..mp]);
            }
        }
        if !written {
            put_bytes(&mut new_meta, 6, rv.to_string().as_bytes());
        }
        put_bytes(&mut out, 1, &new_meta);
    }
    Some(out)
}

/// Split a complete `k8s\0` + Unknown body into (apiVersion, kind, raw). `None` if malformed.
pub fn open_envelope(body: &[u8]) -> Option<(String, String, &[u8])> {
    let rest = body.strip_prefix(MAGIC)?;
    let (mut api_version, mut kind, mut raw) = (String::new(), String::new(), &rest[0..0]);
    let mut pos = 0;
    while pos < rest.len() {
        let (field, _, range) = next_field(rest, &mut pos)?;
        match field {
            1 => {
                let tm = &rest[range];
                let mut p = 0;
                while p < tm.len() {
                    let (f, _, r) = next_field(tm, &mut p)?;
                    let s = String::from_utf8(tm[r].to_vec()).ok()?;
                    if f == 1 {
                        api_version = s;
                    } else if f == 2 {
                        kind = s;
                    }
                }
            }
            2 => raw = &rest[range],
            _ => {}
        }
    }
    Some((api_version, kind, raw))
}

/// The identity fields of a bare object message's ObjectMeta (field 1): name (1),
/// namespace (3), resourceVersion (6) and labels (11), as JSON `{"metadata": {...}}` for
/// kinds without a full schema. `None` if malformed.
pub fn object_meta_json(obj: &[u8]) -> Option<serde_json::Value> {
    let mut pos = 0;
    let mut meta = serde_json::Map::new();
    while pos < obj.len() {
        let (field, wt, range) = next_field(obj, &mut pos)?;
        if field != 1 || wt != WireType::LengthDelimited {
            continue;
        }
        let m = &obj[range];
        let mut p = 0;
        let mut labels = serde_json::Map::new();
        while p < m.len() {
            let (f, fwt, r) = next_field(m, &mut p)?;
            let text = || std::str::from_utf8(&m[r.clone()]).ok().map(|s| serde_json::Value::String(s.to_string()));
            match (f, fwt) {
                (1, WireType::LengthDelimited) => meta.insert("name".into(), text()?),
                (3, WireType::LengthDelimited) => meta.insert("namespace".into(), text()?),
                (6, WireType::LengthDelimited) => meta.insert("resourceVersion".into(), text()?),
                (11, WireType::LengthDelimited) => {
                    let entry = &m[r];
                    let (mut ep, mut k, mut v) = (0, String::new(), String::new());
                    while ep < entry.len() {
                        let (ef, _, er) = next_field(entry, &mut ep)?;
                        let s = std::str::from_utf8(&entry[er]).ok()?.to_string();
                        if ef == 1 {
                            k = s;
                        } else if ef == 2 {
                            v = s;
                        }
                    }
                    labels.insert(k, serde_json::Value::String(v));
                    None
                }
                _ => None,
            };
        }
        meta.insert("labels".into(), serde_json::Value::Object(labels));
    }
    Some(serde_json::json!({ "metadata": meta }))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn golden(name: &str) -> Vec<u8> {
        crate::testdata::golden(name)
    }

    #[test]
    fn envelope_rebuilds_the_golden_get() {
        let body = golden("01-get-pod.pb.body");
        let (av, kind, raw) = open_envelope(&body).unwrap();
        assert_eq!((av.as_str(), kind.as_str()), ("v1", "Pod"));
        assert_eq!(envelope(&av, &kind, raw), body);
    }

    #[test]
    fn list_rebuilds_the_golden_page_from_items() {
        let body = golden("02c-list-pods-limit2-page1.pb.body");
        let (_, kind, raw) = open_envelope(&body).unwrap();
        assert_eq!(kind, "PodList");
        let mut pos = 0;
        let mut items = Vec::new();
        let mut meta = None;
        while pos < raw.len() {
            let (f, _, r) = next_field(raw, &mut pos).unwrap();
            if f == 1 {
                meta = Some(raw[r].to_vec());
            } else {
                items.push(raw[r].to_vec());
            }
        }
        let json: serde_json::Value = serde_json::from_slice(&golden("02c-list-pods-limit2-page1.json.body")).unwrap();
        let rv: u64 = json["metadata"]["resourceVersion"].as_str().unwrap().parse().unwrap();
        // The pb and json captures are separate requests; rebuild ListMeta from the pb's own fields.
        let mut p = 0;
        let m = meta.unwrap();
        let (mut pb_rv, mut cont, mut remaining) = (0u64, String::new(), None);
        while p < m.len() {
            let (f, _, r) = next_field(&m, &mut p).unwrap();
            match f {
                2 => pb_rv = std::str::from_utf8(&m[r]).unwrap().parse().unwrap(),
                3 => cont = String::from_utf8(m[r].to_vec()).unwrap(),
                4 => remaining = Some(get_varint(&m, &mut r.start.clone()).unwrap()),
                _ => {}
            }
        }
        assert!(pb_rv > 0 && rv > 0);
        let rebuilt = list_meta(pb_rv, Some(&cont), remaining);
        let mut list = Vec::new();
        put_bytes(&mut list, 1, &rebuilt);
        for it in &items {
            list.extend_from_slice(&item_header(it.len()));
            list.extend_from_slice(it);
        }
        assert_eq!(envelope("v1", "PodList", &list), body);
    }

    #[test]
    fn watch_frames_rebuild_the_golden_stream() {
        let body = golden("05b-watch-configmaps-from-list-rv.pb.body");
        let mut pos = 0;
        let mut rebuilt = Vec::new();
        let mut types = Vec::new();
        while pos < body.len() {
            let len = u32::from_be_bytes(body[pos..pos + 4].try_into().unwrap()) as usize;
            let ev = &body[pos + 4..pos + 4 + len];
            pos += 4 + len;
            let mut p = 0;
            let (_, _, tr) = next_field(ev, &mut p).unwrap();
            let (_, _, rr) = next_field(ev, &mut p).unwrap();
            let t = std::str::from_utf8(&ev[tr]).unwrap().to_string();
            let rawext = &ev[rr];
            let mut q = 0;
            let (_, _, er) = next_field(rawext, &mut q).unwrap();
            let (av, kind, raw) = open_envelope(&rawext[er]).unwrap();
            rebuilt.extend_from_slice(&watch_frame(&t, &av, &kind, raw));
            types.push(t);
        }
        assert_eq!(&types[..3], ["ADDED", "MODIFIED", "DELETED"]);
        assert_eq!(rebuilt, body);
    }

    #[test]
    fn resource_version_rewrite_changes_only_the_rv() {
        let body = golden("01-get-pod.pb.body");
        let (_, _, raw) = open_envelope(&body).unwrap();
        let new = with_resource_version(raw, 99).unwrap();
        let back = with_resource_version(&new, 61505).unwrap();
        assert_eq!(back, raw);
        assert_ne!(new, raw);
    }

    #[test]
    fn malformed_input_is_none_not_a_panic() {
        assert!(open_envelope(b"k8s\0\x0a\xff\xff\xff").is_none());
        assert!(with_resource_version(b"\x0a\x05ab", 1).is_none());
        assert_eq!(varint_len(0), 1);
        assert_eq!(varint_len(127), 1);
        assert_eq!(varint_len(128), 2);
    }
}
