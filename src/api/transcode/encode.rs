//! JSON -> protobuf: a kind's JSON object to its bare message, field by field in tag order.

use super::*;
use crate::api::time::{parse_go_duration, parse_timestamp};

/// Write `tag` + length + whatever `body` appends, without a separate buffer: one length byte
/// is reserved and the body is shifted only when its length needs more.
pub(super) fn put_nested<F>(buf: &mut Vec<u8>, tag: u32, body: F) -> Result<(), TranscodeError>
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

/// Where a JSON key of a message goes: a direct field (index) or a field inside an inline
/// field.
pub(super) enum Slot<'v> {
    Value(&'v Value),
    Inline(Vec<(usize, Slot<'v>)>),
}

/// Find the field for a JSON key: exact JSON name, then case- and underscore-insensitive
/// against the Rust name; then inside inline fields. Returns the index path.
pub(super) fn lookup(msg: &MessageDesc, key: &str, path: &mut Vec<usize>, depth: usize) -> bool {
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
pub(super) fn is_time_field(msg: &MessageDesc, path: &[usize]) -> bool {
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
pub(super) fn loose_eq(a: &str, b: &str) -> bool {
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

pub(super) fn insert_slot<'v>(slots: &mut Vec<(usize, Slot<'v>)>, path: &[usize], v: &'v Value) {
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
pub(super) fn complete_inline(msg: &MessageDesc, slots: &mut Vec<(usize, Slot<'_>)>, depth: usize) {
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
pub(super) fn encode_message_body(msg: &MessageDesc, value: &Value, buf: &mut Vec<u8>, depth: usize) -> Result<(), TranscodeError> {
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

pub(super) fn encode_slots(
    msg: &MessageDesc,
    mut slots: Vec<(usize, Slot<'_>)>,
    buf: &mut Vec<u8>,
    depth: usize,
) -> Result<(), TranscodeError> {
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

pub(super) fn encode_field(f: &FieldDesc, v: &Value, buf: &mut Vec<u8>, depth: usize) -> Result<(), TranscodeError> {
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

pub(super) fn encode_map(tag: u32, mv: MapValue, v: &Value, buf: &mut Vec<u8>, depth: usize) -> Result<(), TranscodeError> {
    let Value::Object(obj) = v else {
        return Err(TranscodeError::json("an object", v));
    };
    let mut entries: Vec<(&String, &Value)> = obj.iter().collect();
    entries.sort_unstable_by(|a, b| a.0.cmp(b.0));
    for (k, val) in entries {
        put_nested(buf, tag, |b| {
            put_bytes(b, 1, k.as_bytes());
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
pub(super) fn encode_single(kind: FieldKind, tag: u32, v: &Value, buf: &mut Vec<u8>, depth: usize) -> Result<(), TranscodeError> {
    match kind {
        FieldKind::String => {
            let s = match v {
                Value::String(s) => s.as_str(),
                Value::Null => "",
                _ => return Err(TranscodeError::json("a string", v)),
            };
            put_bytes(buf, tag, s.as_bytes());
        }
        FieldKind::Bytes => {
            let data = match v {
                Value::String(s) => BASE64.decode(s).map_err(|_| TranscodeError::json("a base64 string", v))?,
                Value::Null => Vec::new(),
                _ => return Err(TranscodeError::json("a base64 string", v)),
            };
            put_bytes(buf, tag, &data);
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
        FieldKind::Int32 | FieldKind::Int64 | FieldKind::Double => encode_number(kind, tag, v, buf)?,
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

/// Encode a number (`int32`, `int64` or `double`) as field `tag`; `null` is zero.
fn encode_number(kind: FieldKind, tag: u32, v: &Value, buf: &mut Vec<u8>) -> Result<(), TranscodeError> {
    match kind {
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
        _ => return Err(TranscodeError::json("not a number field", v)),
    }
    Ok(())
}

/// An integral JSON number as i64 (Go rejects fractions and strings for integer fields).
pub(super) fn json_int(v: &Value) -> Option<i64> {
    match v {
        Value::Number(n) => n.as_i64(),
        _ => None,
    }
}

pub(super) fn encode_special(special: Special, v: &Value, buf: &mut Vec<u8>) -> Result<(), TranscodeError> {
    match special {
        Special::Time | Special::MicroTime => {
            let (secs, nanos) = match v {
                Value::Null => (GO_ZERO_TIME_UNIX, 0),
                Value::String(s) => parse_timestamp(s).ok_or_else(|| TranscodeError::json("an RFC 3339 time", v))?,
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
            put_bytes(buf, 1, s.as_bytes());
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
            put_bytes(buf, 3, str_val.as_bytes());
        }
        Special::FieldsV1 | Special::RawExtension => {
            if !v.is_null() {
                put_bytes(buf, 1, go_compact_json(v)?.as_bytes());
            }
        }
        Special::None => {}
    }
    Ok(())
}

/// Compact JSON the way Go's encoder writes it: `<`, `>`, `&`, U+2028 and U+2029 escaped.
/// Those characters can only occur inside JSON strings, so replacing them in the serialized
/// text is safe.
pub(super) fn go_compact_json(v: &Value) -> Result<String, TranscodeError> {
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
