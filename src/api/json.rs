//! JSON encoding the way the apiserver writes it: compact, `<`, `>`, `&`, U+2028 and U+2029
//! escaped as `\u003c`-style escapes (Go's encoding/json), everything else UTF-8 as is.

use serde::Serialize;
use serde_json::ser::{CompactFormatter, Formatter};
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
pub fn indent(src: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(src.len() + src.len() / 2);
    let mut depth = 0usize;
    // An opening bracket whose newline waits to see whether the value is empty.
    let mut open = false;
    let newline = |out: &mut Vec<u8>, depth: usize| {
        out.push(b'\n');
        out.resize(out.len() + 2 * depth, b' ');
    };
    let mut i = 0;
    while i < src.len() {
        let c = src[i];
        if matches!(c, b' ' | b'\t' | b'\r' | b'\n') {
            i += 1;
            continue;
        }
        if open && c != b'}' && c != b']' {
            open = false;
            newline(&mut out, depth);
        }
        match c {
            b'"' => {
                let start = i;
                i += 1;
                while i < src.len() && src[i] != b'"' {
                    i += if src[i] == b'\\' { 2 } else { 1 };
                }
                out.extend_from_slice(&src[start..(i + 1).min(src.len())]);
            }
            b'{' | b'[' => {
                out.push(c);
                depth += 1;
                open = true;
            }
            b'}' | b']' => {
                depth = depth.saturating_sub(1);
                if open {
                    open = false;
                } else {
                    newline(&mut out, depth);
                }
                out.push(c);
            }
            b',' => {
                out.push(c);
                newline(&mut out, depth);
            }
            b':' => out.extend_from_slice(b": "),
            _ => out.push(c),
        }
        i += 1;
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

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
}
