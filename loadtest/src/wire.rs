//! Just enough of the Kubernetes wire formats to drive clients: a list's resourceVersion
//! (JSON and protobuf), watch stream framing (JSON lines and length-prefixed protobuf
//! frames), an event's type, and the `kache.dev/changed-at` stamp churn puts in pods.

use crate::scenario::Encoding;
use bytes::{Buf, Bytes, BytesMut};
use prost::encoding::WireType;

/// The annotation holding the unix nanoseconds of a pod's last change.
pub const CHANGED_AT: &[u8] = b"kache.dev/changed-at";
/// The annotation on the bookmark that ends a WatchList's initial events.
pub const INITIAL_END: &[u8] = b"k8s.io/initial-events-end";

fn varint(b: &[u8], i: &mut usize) -> Option<u64> {
    let mut rest = b.get(*i..)?;
    let v = prost::encoding::decode_varint(&mut rest).ok()?;
    *i = b.len() - rest.len();
    Some(v)
}

/// Find length-delimited field `want` in a (possibly truncated) message; return the start of
/// its payload and its declared length.
fn field(b: &[u8], mut i: usize, want: u32) -> Option<(usize, usize)> {
    while i < b.len() {
        let mut rest = &b[i..];
        let (tag, wt) = prost::encoding::decode_key(&mut rest).ok()?;
        i = b.len() - rest.len();
        match wt {
            WireType::Varint => {
                varint(b, &mut i)?;
            }
            WireType::LengthDelimited => {
                let len = usize::try_from(varint(b, &mut i)?).ok()?;
                if tag == want {
                    return Some((i, len));
                }
                i = i.checked_add(len)?;
            }
            WireType::SixtyFourBit => i += 8,
            WireType::ThirtyTwoBit => i += 4,
            WireType::StartGroup | WireType::EndGroup => return None,
        }
    }
    None
}

/// The `metadata.resourceVersion` of a list response, from its first bytes.
pub fn list_rv(prefix: &[u8], enc: Encoding) -> Option<String> {
    match enc {
        Encoding::Json => {
            let key = b"\"resourceVersion\":\"";
            let at = find(prefix, key)? + key.len();
            let end = prefix[at..].iter().position(|&c| c == b'"')?;
            Some(String::from_utf8_lossy(&prefix[at..at + end]).into_owned())
        }
        Encoding::Protobuf => {
            let b = prefix.strip_prefix(b"k8s\0")?;
            let (raw, _) = field(b, 0, 2)?;
            let (meta, mlen) = field(b, raw, 1)?;
            let meta = &b[meta..(meta + mlen).min(b.len())];
            let (rv, len) = field(meta, 0, 2)?;
            Some(String::from_utf8_lossy(meta.get(rv..rv + len)?).into_owned())
        }
    }
}

/// Position of `needle` in `hay`.
pub fn find(hay: &[u8], needle: &[u8]) -> Option<usize> {
    if needle.is_empty() || hay.len() < needle.len() {
        return None;
    }
    let first = needle[0];
    let mut i = 0;
    while i + needle.len() <= hay.len() {
        let off = hay[i..hay.len() - needle.len() + 1].iter().position(|&c| c == first)?;
        i += off;
        if &hay[i..i + needle.len()] == needle {
            return Some(i);
        }
        i += 1;
    }
    None
}

/// The `kache.dev/changed-at` stamp in an event (JSON or protobuf: the value's digits follow
/// the key after at most a few bytes of syntax).
pub fn changed_at(frame: &[u8]) -> Option<u128> {
    let at = find(frame, CHANGED_AT)? + CHANGED_AT.len();
    let rest = &frame[at..frame.len().min(at + 32)];
    let start = rest.iter().take(4).position(u8::is_ascii_digit)?;
    let digits: &[u8] = &rest[start..];
    let end = digits.iter().position(|c| !c.is_ascii_digit()).unwrap_or(digits.len());
    std::str::from_utf8(&digits[..end]).ok()?.parse().ok()
}

/// A watch event's type.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EventType {
    Added,
    Modified,
    Deleted,
    Bookmark,
    Error,
    Other,
}

fn event_type(name: &[u8]) -> EventType {
    match name {
        b"ADDED" => EventType::Added,
        b"MODIFIED" => EventType::Modified,
        b"DELETED" => EventType::Deleted,
        b"BOOKMARK" => EventType::Bookmark,
        b"ERROR" => EventType::Error,
        _ => EventType::Other,
    }
}

/// The type of one watch frame.
pub fn frame_type(frame: &[u8], enc: Encoding) -> EventType {
    match enc {
        Encoding::Json => {
            let key = b"\"type\":\"";
            let Some(at) = find(&frame[..frame.len().min(64)], key).map(|p| p + key.len()) else { return EventType::Other };
            let end = frame[at..].iter().position(|&c| c == b'"').unwrap_or(0);
            event_type(&frame[at..at + end])
        }
        Encoding::Protobuf => match field(frame, 0, 1) {
            Some((s, len)) => event_type(frame.get(s..s + len).unwrap_or_default()),
            None => EventType::Other,
        },
    }
}

/// Splits a watch body into frames.
pub struct Frames {
    enc: Encoding,
    buf: BytesMut,
}

impl Frames {
    pub fn new(enc: Encoding) -> Frames {
        Frames { enc, buf: BytesMut::new() }
    }

    pub fn push(&mut self, data: &[u8]) {
        self.buf.extend_from_slice(data);
    }

    /// The next complete frame, if one is buffered.
    pub fn next_frame(&mut self) -> Option<Bytes> {
        match self.enc {
            Encoding::Json => {
                let nl = self.buf.iter().position(|&c| c == b'\n')?;
                let line = self.buf.split_to(nl + 1).freeze();
                if line.len() <= 1 {
                    return self.next_frame();
                }
                Some(line.slice(..line.len() - 1))
            }
            Encoding::Protobuf => {
                if self.buf.len() < 4 {
                    return None;
                }
                let len = u32::from_be_bytes([self.buf[0], self.buf[1], self.buf[2], self.buf[3]]) as usize;
                if self.buf.len() < 4 + len {
                    self.buf.reserve(4 + len - self.buf.len());
                    return None;
                }
                self.buf.advance(4);
                Some(self.buf.split_to(len).freeze())
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn json_rv_and_stamp() {
        let list = br#"{"kind":"PodList","apiVersion":"v1","metadata":{"resourceVersion":"123"},"items":[]}"#;
        assert_eq!(list_rv(list, Encoding::Json).as_deref(), Some("123"));
        let ev = br#"{"type":"MODIFIED","object":{"metadata":{"annotations":{"kache.dev/changed-at":"1800000000123456789"}}}}"#;
        assert_eq!(frame_type(ev, Encoding::Json), EventType::Modified);
        assert_eq!(changed_at(ev), Some(1_800_000_000_123_456_789));
    }

    #[test]
    fn protobuf_rv_and_frames() {
        // k8s\0 + Unknown{1: typeMeta{}, 2: raw PodList{1: ListMeta{2: "77"}}}
        let meta = [0x12, 2, b'7', b'7'];
        let mut list = vec![0x0a, meta.len() as u8];
        list.extend_from_slice(&meta);
        let mut body = b"k8s\0".to_vec();
        body.extend_from_slice(&[0x0a, 0, 0x12, list.len() as u8]);
        body.extend_from_slice(&list);
        assert_eq!(list_rv(&body, Encoding::Protobuf).as_deref(), Some("77"));
        let mut ev = vec![0x0a, 5];
        ev.extend_from_slice(b"ADDED");
        let mut f = Frames::new(Encoding::Protobuf);
        f.push(&(ev.len() as u32).to_be_bytes());
        f.push(&ev[..3]);
        assert!(f.next_frame().is_none());
        f.push(&ev[3..]);
        let frame = f.next_frame().unwrap();
        assert_eq!(frame_type(&frame, Encoding::Protobuf), EventType::Added);
        let stamp = [CHANGED_AT, &[0x12, 3], b"987"].concat();
        assert_eq!(changed_at(&stamp), Some(987));
    }
}
