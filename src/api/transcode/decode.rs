//! Protobuf -> JSON: a bare message to the JSON object the apiserver would write.

use super::*;
use crate::api::time::{format_go_duration, format_timestamp};

/// A cursor over protobuf bytes. Errors carry an empty path; callers add it.
pub(super) struct Reader<'a> {
    buf: &'a [u8],
    pos: usize,
}

impl<'a> Reader<'a> {
    pub(super) fn new(buf: &'a [u8]) -> Self {
        Reader { buf, pos: 0 }
    }

    pub(super) fn done(&self) -> bool {
        self.pos >= self.buf.len()
    }

    pub(super) fn varint(&mut self) -> Result<u64, TranscodeError> {
        let mut rest = self.buf.get(self.pos..).unwrap_or_default();
        match prost::encoding::decode_varint(&mut rest) {
            Ok(v) => {
                self.pos = self.buf.len() - rest.len();
                Ok(v)
            }
            // A varint that runs into the end of the bytes is truncated; one that is
            // already too long (or overflows) is malformed.
            Err(_) if rest.len() < 10 && rest.iter().all(|b| *b >= 0x80) => Err(TranscodeError::Truncated { path: String::new() }),
            Err(_) => Err(TranscodeError::BadVarint { path: String::new() }),
        }
    }

    pub(super) fn take(&mut self, n: usize) -> Result<&'a [u8], TranscodeError> {
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

    pub(super) fn len_delimited(&mut self) -> Result<&'a [u8], TranscodeError> {
        let n = self.varint()?;
        let n = usize::try_from(n).map_err(|_| TranscodeError::Truncated { path: String::new() })?;
        self.take(n)
    }

    /// Read a field key: (tag, wire type). Groups are not part of Kubernetes messages.
    pub(super) fn key(&mut self) -> Result<(u64, WireType), TranscodeError> {
        let k = self.varint()?;
        let tag = k >> 3;
        match WireType::try_from(k & 7) {
            Ok(wt) if tag != 0 && tag <= MAX_TAG && !matches!(wt, WireType::StartGroup | WireType::EndGroup) => Ok((tag, wt)),
            _ => Err(TranscodeError::BadKey { path: String::new(), tag, wire_type: (k & 7) as u8 }),
        }
    }

    /// Skip a value of the given wire type.
    pub(super) fn skip(&mut self, wt: WireType) -> Result<(), TranscodeError> {
        match wt {
            WT_VARINT => self.varint().map(drop),
            WT_I64 => self.take(8).map(drop),
            WT_LEN => self.len_delimited().map(drop),
            WT_I32 => self.take(4).map(drop),
            _ => Err(TranscodeError::BadKey { path: String::new(), tag: 0, wire_type: wt as u8 }),
        }
    }
}

pub(super) fn decode_message(msg: &MessageDesc, bytes: &[u8], depth: usize, proj: &Projection) -> Result<Value, TranscodeError> {
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
        let Some(sub) = (if f.inline { Some(proj) } else { proj.field(f.json) }) else {
            r.skip(wt)?;
            continue;
        };
        decode_field(f, wt, &mut r, &mut slots[i], depth, sub).map_err(|e| e.in_field(f.json))?;
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

pub(super) fn wire_type_name(kind: FieldKind) -> &'static str {
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

pub(super) fn scalar_wire_type(kind: FieldKind) -> WireType {
    match kind {
        FieldKind::Bool | FieldKind::Int32 | FieldKind::Int64 => WT_VARINT,
        FieldKind::Double => WT_I64,
        _ => WT_LEN,
    }
}

pub(super) fn decode_field(
    f: &FieldDesc,
    wt: WireType,
    r: &mut Reader<'_>,
    slot: &mut Option<Value>,
    depth: usize,
    proj: &Projection,
) -> Result<(), TranscodeError> {
    let mismatch = || TranscodeError::WireTypeMismatch { path: String::new(), expected: wire_type_name(f.kind), found: wt as u8 };
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
                items.push(decode_single(f.kind, natural, &mut pr, depth, proj).map_err(|e| e.in_item(n))?);
            }
            return Ok(());
        }
        if wt != natural {
            return Err(mismatch());
        }
        let n = items.len();
        items.push(decode_single(f.kind, wt, r, depth, proj).map_err(|e| e.in_item(n))?);
        return Ok(());
    }
    if wt != natural {
        return Err(mismatch());
    }
    *slot = Some(decode_single(f.kind, wt, r, depth, proj)?);
    Ok(())
}

pub(super) fn decode_map_entry(mv: MapValue, entry: &[u8], depth: usize) -> Result<(String, Value), TranscodeError> {
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
            1 if wt == WT_LEN => match decode_single(FieldKind::String, wt, &mut r, depth, &WHOLE)? {
                Value::String(s) => key = s,
                _ => key.clear(),
            },
            2 if wt == WT_LEN => value = Some(decode_single(kind, wt, &mut r, depth, &WHOLE)?),
            1 | 2 => {
                return Err(TranscodeError::WireTypeMismatch {
                    path: String::new(),
                    expected: if tag == 1 { "string" } else { wire_type_name(kind) },
                    found: wt as u8,
                })
            }
            _ => r.skip(wt)?,
        }
    }
    let value = match value {
        Some(v) => v,
        None => decode_single(kind, WT_LEN, &mut Reader::new(&[0]), depth, &WHOLE)?,
    };
    Ok((key, value))
}

pub(super) fn decode_single(
    kind: FieldKind,
    wt: WireType,
    r: &mut Reader<'_>,
    depth: usize,
    proj: &Projection,
) -> Result<Value, TranscodeError> {
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
            decode_message(message(id), data, depth + 1, proj)?
        }
        _ => return Err(TranscodeError::WireTypeMismatch { path: String::new(), expected: wire_type_name(kind), found: wt as u8 }),
    })
}

pub(super) fn utf8(b: &[u8]) -> Result<String, TranscodeError> {
    String::from_utf8(b.to_vec()).map_err(|_| TranscodeError::InvalidUtf8 { path: String::new() })
}

/// The scalar fields of a special message, read leniently (unknown fields skipped).
#[derive(Default)]
pub(super) struct SpecialFields<'a> {
    v1: Option<u64>,
    v2: Option<u64>,
    b1: Option<&'a [u8]>,
    b3: Option<&'a [u8]>,
}

pub(super) fn read_special(bytes: &[u8]) -> Result<SpecialFields<'_>, TranscodeError> {
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

pub(super) fn decode_special(special: Special, bytes: &[u8]) -> Result<Value, TranscodeError> {
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
                    format_timestamp(secs, nanos, micro)
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
