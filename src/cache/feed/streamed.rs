//! An unpaged LIST read as it arrives: each item is cut from the body as soon as its last
//! byte has come, so a list of 30,000 pods is decoded (and sent to WatchLists waiting on it,
//! `growing`) while the upstream is still encoding it, and no more than one item and one
//! network chunk are held undecoded.
//!
//! Why unpaged: a kube-apiserver answers an unpaged LIST from its watch cache, streamed
//! (`StreamingCollectionsEncodingToJSON`/`ToProtobuf`), while the pages of a paged LIST after
//! the first come from etcd whenever the kind has had no event since the last etcd compaction
//! (`Cacher.ShouldDelegateContinue`), which then costs the apiserver and etcd far more CPU
//! than the one unpaged answer from memory.
//!
//! Both cutters keep only what they must across chunks: the JSON one a scanner's state (depth,
//! in a string, the top-level key), the protobuf one where it is in the `k8s\0` envelope and
//! how much of the list message is left.

use super::decode::{self, DecodeError, PageMeta};
use crate::api::media::Format;
use crate::api::wire;
use bytes::{Buf, BytesMut};
use prost::encoding::WireType;

/// Cuts a LIST body's items as they arrive.
pub(super) struct StreamedList {
    buf: BytesMut,
    cut: Cutter,
    /// The list's metadata (resourceVersion), once read.
    meta: Option<PageMeta>,
}

enum Cutter {
    Json(JsonScan),
    Protobuf(PbPhase),
}

impl StreamedList {
    pub(super) fn new(fmt: Format) -> StreamedList {
        let cut = match fmt {
            Format::Json => Cutter::Json(JsonScan::default()),
            Format::Protobuf => Cutter::Protobuf(PbPhase::Magic),
        };
        StreamedList { buf: BytesMut::new(), cut, meta: None }
    }

    /// Take the next bytes of the body; `item` gets each item completed by them (a JSON
    /// object, or a protobuf message without its field header), in order.
    pub(super) fn push(&mut self, data: &[u8], item: &mut dyn FnMut(&[u8])) -> Result<(), DecodeError> {
        self.buf.extend_from_slice(data);
        let consumed = match &mut self.cut {
            Cutter::Json(scan) => scan.run(&self.buf, &mut self.meta, item)?,
            Cutter::Protobuf(phase) => pb_run(phase, &self.buf, &mut self.meta, item)?,
        };
        self.buf.advance(consumed);
        Ok(())
    }

    /// At the body's end: the list's resourceVersion (a body cut short is an error).
    pub(super) fn finish(self) -> Result<PageMeta, DecodeError> {
        let complete = match &self.cut {
            Cutter::Json(scan) => scan.closed,
            Cutter::Protobuf(phase) => matches!(phase, PbPhase::Envelope { listed: true }) && self.buf.is_empty(),
        };
        match self.meta {
            Some(meta) if complete && meta.cont.is_empty() => Ok(meta),
            Some(_) if complete => Err(DecodeError::UnpagedContinue),
            _ => Err(DecodeError::Truncated),
        }
    }
}

/// The JSON scanner's state between chunks. Offsets are into the unconsumed buffer.
#[derive(Default)]
struct JsonScan {
    /// Next byte to scan.
    pos: usize,
    depth: u32,
    in_str: bool,
    escaped: bool,
    /// At depth 1, whether the next string is a key.
    expect_key: bool,
    /// The top-level key being read, or whose value is being read.
    key: Vec<u8>,
    reading_key: bool,
    /// Inside the top-level `items` array.
    in_items: bool,
    /// Where the item, or the `metadata` object, being read starts.
    start: Option<usize>,
    /// The top-level object has closed.
    closed: bool,
}

impl JsonScan {
    /// Scan `buf` from where the last call stopped; returns how many bytes at its start are
    /// no longer needed (everything before the item or metadata being read).
    fn run(&mut self, buf: &[u8], meta: &mut Option<PageMeta>, item: &mut dyn FnMut(&[u8])) -> Result<usize, DecodeError> {
        let mut i = self.pos;
        while i < buf.len() {
            i = if self.in_str {
                self.in_string(buf, i)
            } else {
                self.structural(buf, i, meta, item)?;
                i + 1
            };
        }
        let keep_from = self.start.unwrap_or(i);
        self.start = self.start.map(|s| s - keep_from);
        self.pos = i - keep_from;
        Ok(keep_from)
    }

    /// The byte at `i` inside a string; returns the index of the next byte that matters.
    fn in_string(&mut self, buf: &[u8], i: usize) -> usize {
        let c = buf[i];
        if self.escaped {
            self.escaped = false;
        } else if c == b'\\' {
            self.escaped = true;
        } else if c == b'"' {
            self.in_str = false;
            self.reading_key = false;
        } else if self.reading_key {
            self.key.push(c);
        } else {
            // Nothing in a value's string matters but its end and its escapes.
            return memchr::memchr2(b'"', b'\\', &buf[i..]).map_or(buf.len(), |n| i + n);
        }
        i + 1
    }

    /// The byte at `i` outside strings: nesting, the top-level keys, and the ends of the
    /// items and of `metadata`.
    fn structural(&mut self, buf: &[u8], i: usize, meta: &mut Option<PageMeta>, item: &mut dyn FnMut(&[u8])) -> Result<(), DecodeError> {
        let c = buf[i];
        match c {
            b'"' => {
                self.in_str = true;
                if self.depth == 1 && self.expect_key {
                    self.reading_key = true;
                    self.key.clear();
                }
            }
            b'{' | b'[' => {
                self.depth += 1;
                match self.depth {
                    1 => self.expect_key = true,
                    2 if c == b'{' && self.key == b"metadata" => self.start = Some(i),
                    2 if c == b'[' && self.key == b"items" => self.in_items = true,
                    3 if self.in_items => self.start = Some(i),
                    _ => {}
                }
            }
            b'}' | b']' => {
                match self.depth {
                    0 => return Err(DecodeError::Truncated),
                    1 => self.closed = true,
                    2 if self.in_items => self.in_items = false,
                    2 => {
                        if let Some(s) = self.start.take() {
                            *meta = Some(decode::json_list_meta(&buf[s..=i])?);
                        }
                    }
                    3 if self.in_items => {
                        if let Some(s) = self.start.take() {
                            item(&buf[s..=i]);
                        }
                    }
                    _ => {}
                }
                self.depth -= 1;
            }
            b':' if self.depth == 1 => self.expect_key = false,
            b',' if self.depth == 1 => self.expect_key = true,
            _ => {}
        }
        Ok(())
    }
}

/// Where the protobuf cutter is.
#[derive(Debug)]
enum PbPhase {
    /// Before the `k8s\0` magic.
    Magic,
    /// Among the envelope's (`runtime.Unknown`) fields; `listed` once its `raw` was read.
    Envelope { listed: bool },
    /// Inside `raw` (the list message), with this many of its bytes still to come.
    List { left: usize },
}

/// A field's header, when `buf` holds all of it: (field, wire type, header length, length of
/// the value after it).
fn field_header(buf: &[u8]) -> Result<Option<(u32, WireType, usize, usize)>, DecodeError> {
    const BAD: DecodeError = DecodeError::Protobuf("streamed list field");
    let Some(key_len) = varint_end(buf)? else { return Ok(None) };
    let (field, wt) = prost::encoding::decode_key(&mut &buf[..key_len]).map_err(|_| BAD)?;
    let value = match wt {
        WireType::Varint => match varint_end(&buf[key_len..])? {
            Some(n) => (key_len, n),
            None => return Ok(None),
        },
        WireType::SixtyFourBit => (key_len, 8),
        WireType::ThirtyTwoBit => (key_len, 4),
        WireType::LengthDelimited => {
            let Some(n) = varint_end(&buf[key_len..])? else { return Ok(None) };
            let len = prost::encoding::decode_varint(&mut &buf[key_len..key_len + n]).map_err(|_| BAD)?;
            (key_len + n, usize::try_from(len).map_err(|_| BAD)?)
        }
        WireType::StartGroup | WireType::EndGroup => return Err(BAD),
    };
    Ok(Some((field, wt, value.0, value.1)))
}

/// The length of the varint `buf` starts with, when all of it is there.
fn varint_end(buf: &[u8]) -> Result<Option<usize>, DecodeError> {
    match buf.iter().take(10).position(|b| b & 0x80 == 0) {
        Some(p) => Ok(Some(p + 1)),
        None if buf.len() >= 10 => Err(DecodeError::Protobuf("streamed list varint")),
        None => Ok(None),
    }
}

/// Cut what `buf` completes; returns the bytes consumed.
fn pb_run(phase: &mut PbPhase, buf: &[u8], meta: &mut Option<PageMeta>, item: &mut dyn FnMut(&[u8])) -> Result<usize, DecodeError> {
    let mut pos = 0;
    loop {
        let rest = &buf[pos..];
        match phase {
            PbPhase::Magic => {
                if rest.len() < wire::MAGIC.len() {
                    return Ok(pos);
                }
                if !rest.starts_with(wire::MAGIC) {
                    return Err(DecodeError::Protobuf("list envelope"));
                }
                pos += wire::MAGIC.len();
                *phase = PbPhase::Envelope { listed: false };
            }
            PbPhase::List { left: 0 } => *phase = PbPhase::Envelope { listed: true },
            PbPhase::Envelope { listed } => {
                let Some((field, wt, header, len)) = field_header(rest)? else { return Ok(pos) };
                if field == 2 && wt == WireType::LengthDelimited && !*listed {
                    pos += header;
                    *phase = PbPhase::List { left: len };
                } else if rest.len() >= header + len {
                    pos += header + len;
                } else {
                    return Ok(pos);
                }
            }
            PbPhase::List { left } => {
                let Some((field, _, header, len)) = field_header(rest)? else { return Ok(pos) };
                if header + len > *left {
                    return Err(DecodeError::Protobuf("list item past the list's end"));
                }
                if rest.len() < header + len {
                    return Ok(pos);
                }
                let value = &rest[header..header + len];
                match field {
                    1 => *meta = Some(decode::pb_list_meta(value)?),
                    2 => item(value),
                    _ => {}
                }
                pos += header + len;
                *left -= header + len;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testdata::golden;

    /// Every item of `body` cut from it fed in chunks of `chunk` bytes, and the list's RV.
    fn cut(fmt: Format, body: &[u8], chunk: usize) -> Result<(Vec<Vec<u8>>, u64), DecodeError> {
        let mut list = StreamedList::new(fmt);
        let mut items = Vec::new();
        for c in body.chunks(chunk) {
            list.push(c, &mut |i| items.push(i.to_vec()))?;
        }
        Ok((items, list.finish()?.rv))
    }

    #[test]
    fn a_json_list_cut_in_any_chunks_gives_the_items_the_whole_body_parses_to() {
        let body = golden("02c-list-pods-limit2-page1.json.body");
        let want: serde_json::Value = serde_json::from_slice(&body).unwrap();
        // A page has a continue token; an unpaged list has none.
        let mut unpaged = want.clone();
        unpaged["metadata"].as_object_mut().unwrap().remove("continue");
        let unpaged = serde_json::to_vec_pretty(&unpaged).unwrap();
        for chunk in [1, 2, 7, 100, 4096, unpaged.len()] {
            let (items, rv) = cut(Format::Json, &unpaged, chunk).unwrap();
            let items: Vec<serde_json::Value> = items.iter().map(|i| serde_json::from_slice(i).unwrap()).collect();
            assert_eq!(&items, want["items"].as_array().unwrap(), "chunks of {chunk}");
            assert_eq!(rv.to_string(), want["metadata"]["resourceVersion"].as_str().unwrap());
        }
        assert!(matches!(cut(Format::Json, &body, 64), Err(DecodeError::UnpagedContinue)));
    }

    #[test]
    fn json_strings_with_brackets_quotes_and_escapes_do_not_cut_items() {
        let body =
            br#"{"kind":"List","items":[{"a":"}]\"{[","b":{"c":["\\"]}},{"metadata":{"name":"x"}}],"metadata":{"resourceVersion":"7"}}"#;
        for chunk in [1, 3, body.len()] {
            let (items, rv) = cut(Format::Json, body, chunk).unwrap();
            assert_eq!(items, vec![br#"{"a":"}]\"{[","b":{"c":["\\"]}}"#.to_vec(), br#"{"metadata":{"name":"x"}}"#.to_vec()]);
            assert_eq!(rv, 7, "metadata after the items is read too");
        }
    }

    #[test]
    fn a_protobuf_list_cut_in_any_chunks_gives_the_pages_items() {
        let body = golden("02c-list-pods-limit2-page1.pb.body");
        let (_, _, raw) = wire::open_envelope(&body).unwrap();
        let mut want = Vec::new();
        let mut pos = 0;
        while pos < raw.len() {
            let (field, _, range) = wire::next_field(raw, &mut pos).unwrap();
            if field == 2 {
                want.push(raw[range].to_vec());
            }
        }
        assert_eq!(want.len(), 2);
        for chunk in [1, 2, 5, 1000, body.len()] {
            match cut(Format::Protobuf, &body, chunk) {
                Err(DecodeError::UnpagedContinue) => {}
                other => panic!("a page read as an unpaged list: {:?}", other.map(|(i, rv)| (i.len(), rv))),
            }
            let mut list = StreamedList::new(Format::Protobuf);
            let mut items = Vec::new();
            for c in body.chunks(chunk) {
                list.push(c, &mut |i| items.push(i.to_vec())).unwrap();
            }
            assert_eq!(items, want, "chunks of {chunk}");
        }
    }

    #[test]
    fn a_protobuf_list_without_continue_ends_with_its_rv_and_one_cut_short_is_an_error() {
        let item = b"\x0a\x03abc".to_vec();
        let mut raw = Vec::new();
        wire::put_bytes(&mut raw, 1, &wire::list_meta(42, None, None));
        wire::put_bytes(&mut raw, 2, &item);
        wire::put_bytes(&mut raw, 2, &item);
        let body = wire::envelope("v1", "PodList", &raw);
        for chunk in [1, 4, body.len()] {
            let (items, rv) = cut(Format::Protobuf, &body, chunk).unwrap();
            assert_eq!((items, rv), (vec![item.clone(), item.clone()], 42));
        }
        for short in [0, 3, 10, body.len() - 5] {
            assert!(matches!(cut(Format::Protobuf, &body[..short], 3), Err(DecodeError::Truncated)), "cut at {short}");
        }
        let json = br#"{"metadata":{"resourceVersion":"1"},"items":[{}]"#;
        assert!(matches!(cut(Format::Json, json, 5), Err(DecodeError::Truncated)));
        assert!(matches!(cut(Format::Json, b"}{}", 1), Err(DecodeError::Truncated)), "a close before any open");
    }
}
