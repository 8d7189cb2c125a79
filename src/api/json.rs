//! JSON encoding the way the apiserver writes it: compact, `<`, `>`, `&`, U+2028 and U+2029
//! escaped as `\u003c`-style escapes (Go's encoding/json), everything else UTF-8 as is; and
//! decoding of any depth the apiserver decodes (Go's 10,000 levels), on a stack grown to fit.

use serde::{Deserialize, Serialize};
use serde_json::ser::{CompactFormatter, Formatter};
use serde_json::Value;
use std::io;

/// Compact formatter that additionally escapes the characters Go's encoding/json escapes.
struct GoFormatter;

impl Formatter for GoFormatter {
    fn write_string_fragment<W: ?Sized + io::Write>(&mut self, w: &mut W, fragment: &str) -> io::Result<()> {
        let mut start = 0;
        for (i, c) in fragment.char_indices() {
            let esc = match c {
                '<' => "\\u003c",
                '>' => "\\u003e",
                '&' => "\\u0026",
                '\u{2028}' => "\\u2028",
                '\u{2029}' => "\\u2029",
                _ => continue,
            };
            w.write_all(&fragment.as_bytes()[start..i])?;
            w.write_all(esc.as_bytes())?;
            start = i + c.len_utf8();
        }
        w.write_all(&fragment.as_bytes()[start..])
    }

    fn write_null<W: ?Sized + io::Write>(&mut self, w: &mut W) -> io::Result<()> {
        CompactFormatter.write_null(w)
    }
}

/// Encode a value as compact Go-style JSON, appending to `out`.
pub fn write<T: Serialize + ?Sized>(out: &mut Vec<u8>, value: &T) {
    let mut ser = serde_json::Serializer::with_formatter(out, GoFormatter);
    // Serializing a serde_json::Value or a derived struct into a Vec cannot fail.
    let _ = value.serialize(&mut ser);
}

/// Encode a value as compact Go-style JSON.
pub fn to_vec<T: Serialize + ?Sized>(value: &T) -> Vec<u8> {
    let mut out = Vec::with_capacity(256);
    write(&mut out, value);
    out
}

/// Encode a JSON string literal (with quotes) the Go way.
pub fn write_str(out: &mut Vec<u8>, s: &str) {
    write(out, s);
}

/// Indent compact JSON as Go's `json.Indent(dst, src, "", "  ")` does (what the apiserver's
/// pretty serializer, `json.MarshalIndent`, writes): a newline and two spaces per level
/// after `{`, `[` and `,`, `": "` after keys, empty objects and arrays left as `{}` and `[]`,
/// strings copied as they are, whitespace outside strings dropped, no newline at the end.
/// (Answers are indented a piece at a time by [`Indenter`]; this whole-text form is the
/// reference the tests compare it with.)
#[cfg(test)]
pub fn indent(src: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(src.len() + src.len() / 2);
    Indenter::default().feed(src, &mut out);
    out
}

/// The deepest nesting of arrays and objects the apiserver decodes: Go's encoding/json
/// (`maxNestingDepth` in sigs.k8s.io/json's scanner) refuses deeper input, so no object it
/// stores is deeper.
pub const MAX_DEPTH: usize = 10_000;

/// Nesting serde_json parses on the caller's stack; its default recursion limit is 128.
const SHALLOW: usize = 100;

/// Stack one level of nesting may take while a [`Value`] is parsed, walked, encoded or
/// dropped (all recursive): parsing takes the most, in a debug build well more than in a
/// release build, and this leaves room above a debug build's. The stack is mapped, not
/// touched, beyond what the recursion uses.
const STACK_PER_LEVEL: usize = 4 * 1024;

/// Why JSON could not be decoded.
#[derive(Debug, thiserror::Error)]
pub enum ParseError {
    /// Not JSON, or not the JSON the caller expects.
    #[error(transparent)]
    Json(#[from] serde_json::Error),
    /// Nested deeper than the apiserver decodes ([`MAX_DEPTH`]).
    #[error("nested {0} levels deep, more than the {MAX_DEPTH} the apiserver decodes")]
    TooDeep(usize),
}

/// Parse `bytes` and hand the value to `f`, however deep it is nested up to [`MAX_DEPTH`]:
/// serde_json's recursion limit (128) is lifted and the parse, `f` and the value's drop
/// (all recursive) run on a stack grown to the depth, so a custom resource the apiserver
/// accepted (`x-kubernetes-preserve-unknown-fields` nested 500 levels) is decoded, not
/// refused. Shallow input (nearly all) is parsed once, on the caller's stack.
pub fn with_value<R>(bytes: &[u8], f: impl FnOnce(&Value) -> R) -> Result<R, ParseError> {
    with_parsed(bytes, Parse::Whole, f)
}

/// [`with_value`] of an object without its `metadata.managedFields`, which the printers and
/// field selectors of built-in kinds never read and which is a good part of a typical object's
/// bytes (one field set per manager, as raw JSON): skipped, not built.
pub fn with_value_unmanaged<R>(bytes: &[u8], f: impl FnOnce(&Value) -> R) -> Result<R, ParseError> {
    with_parsed(bytes, Parse::Unmanaged, f)
}

#[derive(Clone, Copy)]
enum Parse {
    Whole,
    Unmanaged,
}

impl Parse {
    fn value<'de, D: serde::Deserializer<'de>>(self, d: D) -> Result<Value, D::Error> {
        match self {
            Parse::Whole => Value::deserialize(d),
            Parse::Unmanaged => d.deserialize_map(Unmanaged { top: true }),
        }
    }
}

fn with_parsed<R>(bytes: &[u8], parse: Parse, f: impl FnOnce(&Value) -> R) -> Result<R, ParseError> {
    let shallow = match parse.value(&mut serde_json::Deserializer::from_slice(bytes)) {
        Ok(v) => return Ok(f(&v)),
        Err(e) => e,
    };
    let levels = depth(bytes);
    if levels < SHALLOW {
        return Err(shallow.into());
    }
    if levels > MAX_DEPTH {
        return Err(ParseError::TooDeep(levels));
    }
    let stack = (levels + 16) * STACK_PER_LEVEL;
    stacker::maybe_grow(stack, stack, || {
        let mut de = serde_json::Deserializer::from_slice(bytes);
        de.disable_recursion_limit();
        let v = parse.value(&mut de)?;
        de.end()?;
        Ok(f(&v))
    })
}

/// An object's map (`top`) or its metadata's, built as a [`Value`] but for the metadata's
/// `managedFields`, which is skipped.
struct Unmanaged {
    top: bool,
}

impl<'de> serde::de::Visitor<'de> for Unmanaged {
    type Value = Value;

    fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(if self.top { "an object" } else { "an object's metadata" })
    }

    fn visit_map<A: serde::de::MapAccess<'de>>(self, mut map: A) -> Result<Value, A::Error> {
        let mut out = serde_json::Map::new();
        while let Some(key) = map.next_key::<String>()? {
            let v = match key.as_str() {
                "metadata" if self.top => map.next_value_seed(MetadataSeed)?,
                "managedFields" if !self.top => {
                    map.next_value::<serde::de::IgnoredAny>()?;
                    continue;
                }
                _ => map.next_value::<Value>()?,
            };
            out.insert(key, v);
        }
        Ok(Value::Object(out))
    }
}

/// The metadata of an object parsed by [`Unmanaged`].
struct MetadataSeed;

impl<'de> serde::de::DeserializeSeed<'de> for MetadataSeed {
    type Value = Value;

    fn deserialize<D: serde::Deserializer<'de>>(self, d: D) -> Result<Value, D::Error> {
        d.deserialize_map(Unmanaged { top: false })
    }
}

/// The deepest nesting of arrays and objects in a JSON text (0 for a scalar), read without
/// parsing it: brackets inside strings do not count. Malformed input gives some number.
pub fn depth(bytes: &[u8]) -> usize {
    let (mut depth, mut deepest, mut i) = (0usize, 0usize, 0);
    while i < bytes.len() {
        match bytes[i] {
            b'"' => {
                i += 1;
                while i < bytes.len() && bytes[i] != b'"' {
                    i += if bytes[i] == b'\\' { 2 } else { 1 };
                }
            }
            b'{' | b'[' => {
                depth += 1;
                deepest = deepest.max(depth);
            }
            b'}' | b']' => depth = depth.saturating_sub(1),
            _ => {}
        }
        i += 1;
    }
    deepest
}

/// A newline and the indentation of the first levels, copied whole (one copy rather than a
/// byte and a fill per line: the lines of a pretty answer are most of its bytes).
const NEWLINES: &[u8; 1 + 2 * 32] = b"\n                                                                ";

/// [`indent`] a piece at a time: the state between pieces is where the text stands (depth,
/// inside a string or after its backslash, an opening bracket whose newline waits), so a
/// body is indented as it is sent, each piece as it comes, and never held whole.
#[derive(Debug, Default, Clone)]
pub struct Indenter {
    depth: usize,
    /// An opening bracket whose newline waits to see whether the value is empty.
    open: bool,
    in_string: bool,
    /// The previous byte was a backslash inside a string.
    escaped: bool,
}

impl Indenter {
    /// Where the string that `src[i..]` continues ends: just past its closing quote (then
    /// no longer in a string), or the piece's end. Searches for the next quote or backslash
    /// (`memchr2`) rather than looking at every byte: strings are most of an object's JSON.
    fn string_end(&mut self, src: &[u8], mut i: usize) -> usize {
        loop {
            if self.escaped {
                // The byte after a backslash, perhaps the first of this piece.
                if i == src.len() {
                    return i;
                }
                self.escaped = false;
                i += 1;
            }
            match memchr::memchr2(b'"', b'\\', &src[i..]) {
                None => return src.len(),
                Some(at) if src[i + at] == b'\\' => {
                    self.escaped = true;
                    i += at + 1;
                }
                Some(at) => {
                    self.in_string = false;
                    return i + at + 1;
                }
            }
        }
    }

    /// Indent the next piece of the compact text, appending to `out`.
    pub fn feed(&mut self, src: &[u8], out: &mut Vec<u8>) {
        let newline = |out: &mut Vec<u8>, depth: usize| match NEWLINES.get(..1 + 2 * depth) {
            Some(line) => out.extend_from_slice(line),
            None => {
                out.push(b'\n');
                out.resize(out.len() + 2 * depth, b' ');
            }
        };
        let mut i = 0;
        while i < src.len() {
            if self.in_string {
                // Copy the string's bytes up to its closing quote (or the piece's end).
                let start = i;
                i = self.string_end(src, i);
                out.extend_from_slice(&src[start..i]);
                continue;
            }
            let c = src[i];
            i += 1;
            if matches!(c, b' ' | b'\t' | b'\r' | b'\n') {
                continue;
            }
            if self.open && c != b'}' && c != b']' {
                self.open = false;
                newline(out, self.depth);
            }
            match c {
                b'"' => {
                    out.push(c);
                    self.in_string = true;
                }
                b'{' | b'[' => {
                    out.push(c);
                    self.depth += 1;
                    self.open = true;
                }
                b'}' | b']' => {
                    self.depth = self.depth.saturating_sub(1);
                    if self.open {
                        self.open = false;
                    } else {
                        newline(out, self.depth);
                    }
                    out.push(c);
                }
                b',' => {
                    out.push(c);
                    newline(out, self.depth);
                }
                b':' => out.extend_from_slice(b": "),
                _ => out.push(c),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `{"a":{"a":...1...}}`, `levels` objects deep.
    fn nested(levels: usize) -> Vec<u8> {
        let mut s = "{\"a\":".repeat(levels).into_bytes();
        s.push(b'1');
        s.resize(s.len() + levels, b'}');
        s
    }

    #[test]
    fn depth_counts_brackets_outside_strings() {
        assert_eq!(depth(b"1"), 0);
        assert_eq!(depth(b"{}"), 1);
        assert_eq!(depth(br#"{"a":[{"b":"[[{{\"]"}],"c":{}}"#), 3);
        assert_eq!(depth(&nested(500)), 500);
    }

    #[test]
    fn values_nested_as_deep_as_the_apiserver_decodes_are_parsed_encoded_and_dropped() {
        // On a thread with a small stack (half of a tokio worker's): parsing 10,000 levels
        // takes far more than that without a grown stack.
        std::thread::Builder::new()
            .stack_size(1024 * 1024)
            .spawn(|| {
                for levels in [127, 128, 500, MAX_DEPTH] {
                    let text = nested(levels);
                    let again = with_value(&text, to_vec).unwrap();
                    assert_eq!(again, text, "{levels} levels");
                    let arrays = [vec![b'['; levels], vec![b']'; levels]].concat();
                    assert_eq!(with_value(&arrays, to_vec).unwrap(), arrays, "{levels} levels of arrays");
                }
                assert!(matches!(with_value(&nested(MAX_DEPTH + 1), |_| ()), Err(ParseError::TooDeep(10_001))));
                assert!(matches!(with_value(&nested(500)[..400], |_| ()), Err(ParseError::Json(_))), "truncated");
                assert!(matches!(with_value(b"{\"a\":}", |_| ()), Err(ParseError::Json(_))));
            })
            .unwrap()
            .join()
            .unwrap();
    }

    #[test]
    fn indents_byte_for_byte_as_the_apiserver() {
        // Compact and pretty answers of a real kube-apiserver to the same requests.
        for (compact, pretty) in [("cm-list", "pretty-list"), ("cm-list", "pretty-curl-list"), ("q-limit-abc", "pretty-curl-status")] {
            let c = crate::testdata::capture(compact);
            let p = crate::testdata::capture(pretty);
            assert_eq!(String::from_utf8(indent(&c.body)).unwrap(), p.text(), "{pretty}");
        }
        assert_eq!(
            indent(b"{\"a\":[],\"b\":{},\"c\":[1,{\"d\":\"x,\\\"y:{\"}]}\n"),
            b"{\n  \"a\": [],\n  \"b\": {},\n  \"c\": [\n    1,\n    {\n      \"d\": \"x,\\\"y:{\"\n    }\n  ]\n}"
        );
        assert_eq!(indent(&indent(b"{\"a\":[1]}")), indent(b"{\"a\":[1]}"), "indented input is read again the same");
    }

    #[test]
    fn indents_deeper_than_its_ready_made_lines() {
        let levels = NEWLINES.len(); // past the levels NEWLINES holds
        let pad = |d: usize| "  ".repeat(d);
        let mut want = vec!["{".to_string()];
        want.extend((1..levels).map(|d| format!("{}\"a\": {{", pad(d))));
        want.push(format!("{}\"a\": 1", pad(levels)));
        want.extend((0..levels).rev().map(|d| format!("{}}}", pad(d))));
        assert_eq!(String::from_utf8(indent(&nested(levels))).unwrap(), want.join("\n"));
    }

    proptest::proptest! {
        #[test]
        fn indenting_piece_by_piece_is_indenting_the_whole(cuts in proptest::collection::vec(0usize..400, 0..12)) {
            let src = crate::testdata::capture("cm-list").body;
            let src = [&src[..], b"{\"s\":\"a\\\\\\\"b,{[:\",\"e\":{},\"l\":[ ]}"].concat();
            let mut cuts: Vec<usize> = cuts.into_iter().map(|c| c * src.len() / 400).collect();
            cuts.sort_unstable();
            let mut out = Vec::new();
            let mut state = Indenter::default();
            let mut at = 0;
            for c in cuts.into_iter().chain([src.len()]) {
                state.feed(&src[at..c], &mut out);
                at = c;
            }
            proptest::prop_assert_eq!(out, indent(&src));
        }
    }

    #[test]
    fn escapes_like_go() {
        let v = serde_json::json!({"v": "é ✓ \"quotes\" <tag> &"});
        assert_eq!(String::from_utf8(to_vec(&v)).unwrap(), r#"{"v":"é ✓ \"quotes\" \u003ctag\u003e \u0026"}"#);
    }

    #[test]
    fn golden_configmap_round_trips_byte_identical() {
        let body = crate::testdata::golden("04a-list-configmaps.json.body");
        let v: serde_json::Value = serde_json::from_slice(&body).unwrap();
        let mut again = to_vec(&v);
        again.push(b'\n');
        assert_eq!(String::from_utf8(again).unwrap(), String::from_utf8(body).unwrap());
    }

    #[test]
    fn an_object_parsed_unmanaged_lacks_only_its_metadatas_managed_fields() {
        let obj = br#"{"metadata":{"name":"a","managedFields":[{"manager":"m","fieldsV1":{"f:x":{}}}],"labels":{"k":"v"}},"spec":{"managedFields":1},"managedFields":2}"#;
        let whole = with_value(obj, Value::clone).unwrap();
        let unmanaged = with_value_unmanaged(obj, Value::clone).unwrap();
        let mut expected = whole.clone();
        expected["metadata"].as_object_mut().unwrap().remove("managedFields");
        assert_eq!(unmanaged, expected);
        assert_eq!(unmanaged["spec"]["managedFields"], 1, "only the metadata's are skipped");
        assert_eq!(unmanaged["managedFields"], 2);
        // Deep objects still parse on a grown stack; what is not an object is refused.
        let mut deep = b"{\"metadata\":{\"name\":\"d\"},\"spec\":".to_vec();
        deep.extend_from_slice(&nested(2000));
        deep.push(b'}');
        assert_eq!(with_value_unmanaged(&deep, |v| v["metadata"]["name"].clone()).unwrap(), "d");
        assert!(with_value_unmanaged(b"[1]", Value::clone).is_err());
        assert!(with_value_unmanaged(br#"{"metadata":[]}"#, Value::clone).is_err());
    }
}
