//! A continue token's JSON read as Go's `json.Unmarshal` reads it into the apiserver's
//! token struct, with Go's messages: the whole input is checked first (the first byte out of
//! place is named, as Go's scanner does), then members are matched to fields without regard
//! to case, the last of a repeated member wins, unknown members are ignored, `null` leaves a
//! field as it is, and the first value of the wrong type is reported once the rest is read.

use super::Wire;

/// Go's limit on nesting (`maxNestingDepth`).
const MAX_DEPTH: usize = 10_000;

/// The token in `raw`, or Go's error text for it.
pub(super) fn token(raw: &[u8]) -> Result<Wire, String> {
    check(raw)?;
    decode(raw)
}

/// Go's quoteChar: the byte (as the code point of that value) in single quotes.
fn quote_char(b: u8) -> String {
    match b {
        b'\'' => "'\\''".into(),
        b'"' => "'\"'".into(),
        _ => {
            let q = crate::api::quote::go_quote(&char::from(b).to_string());
            format!("'{}'", &q[1..q.len() - 1])
        }
    }
}

fn invalid(b: u8, context: &str) -> String {
    format!("invalid character {} {context}", quote_char(b))
}

const END: &str = "unexpected end of JSON input";

fn is_space(b: u8) -> bool {
    matches!(b, b' ' | b'\t' | b'\r' | b'\n')
}

/// A cursor over the input.
struct Scan<'a> {
    s: &'a [u8],
    i: usize,
}

impl Scan<'_> {
    fn skip_space(&mut self) {
        while self.s.get(self.i).copied().is_some_and(is_space) {
            self.i += 1;
        }
    }

    fn peek(&self) -> Option<u8> {
        self.s.get(self.i).copied()
    }

    /// The next byte between tokens (where Go skips spaces): none is the end of the input.
    fn next(&mut self) -> Result<u8, String> {
        let b = self.peek().ok_or(END)?;
        self.i += 1;
        Ok(b)
    }

    /// The next byte within a token. Go's scanner reads the end of the input as a space:
    /// a token cut short is refused for that space (`invalid character ' ' in literal
    /// true`), one a space may continue (a string) ends the input then.
    fn within(&mut self) -> Result<u8, String> {
        let b = match self.peek() {
            Some(b) => b,
            None if self.i == self.s.len() => b' ',
            None => return Err(END.into()),
        };
        self.i += 1;
        Ok(b)
    }

    /// A string's body, the opening quote read.
    fn string(&mut self) -> Result<(), String> {
        loop {
            match self.within()? {
                b'"' => return Ok(()),
                b'\\' => match self.within()? {
                    b'"' | b'\\' | b'/' | b'b' | b'f' | b'n' | b'r' | b't' => {}
                    b'u' => {
                        for _ in 0..4 {
                            let h = self.within()?;
                            if !h.is_ascii_hexdigit() {
                                return Err(invalid(h, "in \\u hexadecimal character escape"));
                            }
                        }
                    }
                    b => return Err(invalid(b, "in string escape code")),
                },
                b if b < 0x20 => return Err(invalid(b, "in string literal")),
                _ => {}
            }
        }
    }

    /// An object's key and its colon, the key's first byte read (it must open a string).
    fn key(&mut self, first: u8) -> Result<(), String> {
        if first != b'"' {
            return Err(invalid(first, "looking for beginning of object key string"));
        }
        self.string()?;
        self.skip_space();
        match self.next()? {
            b':' => Ok(()),
            b => Err(invalid(b, "after object key")),
        }
    }

    fn digits(&mut self) {
        while self.peek().is_some_and(|b| b.is_ascii_digit()) {
            self.i += 1;
        }
    }

    /// A number, its first byte (`-` or a digit) read.
    fn number(&mut self, first: u8) -> Result<(), String> {
        let lead = if first == b'-' { self.within()? } else { first };
        match lead {
            b'0' => {}
            b'1'..=b'9' => self.digits(),
            b => return Err(invalid(b, "in numeric literal")),
        }
        if self.peek() == Some(b'.') {
            self.i += 1;
            let b = self.within()?;
            if !b.is_ascii_digit() {
                return Err(invalid(b, "after decimal point in numeric literal"));
            }
            self.digits();
        }
        if matches!(self.peek(), Some(b'e' | b'E')) {
            self.i += 1;
            let mut b = self.within()?;
            if matches!(b, b'+' | b'-') {
                b = self.within()?;
            }
            if !b.is_ascii_digit() {
                return Err(invalid(b, "in exponent of numeric literal"));
            }
            self.digits();
        }
        Ok(())
    }

    /// `true`, `false` or `null`, its first byte read.
    fn literal(&mut self, first: u8) -> Result<(), String> {
        let word: &[u8] = match first {
            b't' => b"true",
            b'f' => b"false",
            _ => b"null",
        };
        for &want in &word[1..] {
            let b = self.within()?;
            if b != want {
                let name = std::str::from_utf8(word).unwrap_or_default();
                return Err(format!("{} in literal {name} (expecting {})", invalid(b, "").trim_end(), quote_char(want)));
            }
        }
        Ok(())
    }
}

/// Go's `checkValid`: the first syntax error, with Go's text.
fn check(s: &[u8]) -> Result<(), String> {
    #[derive(Clone, Copy, PartialEq)]
    enum Open {
        Object,
        Array,
    }
    let mut scan = Scan { s, i: 0 };
    let mut stack: Vec<Open> = Vec::new();
    let open = |stack: &mut Vec<Open>, o: Open| {
        stack.push(o);
        if stack.len() > MAX_DEPTH {
            Err(invalid(if o == Open::Object { b'{' } else { b'[' }, "exceeded max depth"))
        } else {
            Ok(())
        }
    };
    // Each turn reads one value, then what follows it up to the next value.
    'value: loop {
        scan.skip_space();
        match scan.next()? {
            b'{' => {
                open(&mut stack, Open::Object)?;
                scan.skip_space();
                match scan.next()? {
                    b'}' => {
                        stack.pop();
                    }
                    b => {
                        scan.key(b)?;
                        continue 'value;
                    }
                }
            }
            b'[' => {
                open(&mut stack, Open::Array)?;
                scan.skip_space();
                if scan.peek() == Some(b']') {
                    scan.i += 1;
                    stack.pop();
                } else {
                    continue 'value;
                }
            }
            b'"' => scan.string()?,
            b @ (b'-' | b'0'..=b'9') => scan.number(b)?,
            b @ (b't' | b'f' | b'n') => scan.literal(b)?,
            b => return Err(invalid(b, "looking for beginning of value")),
        }
        // A value ended: close what it ends, until a comma asks for another.
        loop {
            scan.skip_space();
            let Some(&top) = stack.last() else {
                return match scan.peek() {
                    None => Ok(()),
                    Some(b) => Err(invalid(b, "after top-level value")),
                };
            };
            let b = scan.next()?;
            match (top, b) {
                (Open::Object, b',') => {
                    scan.skip_space();
                    let first = scan.next()?;
                    scan.key(first)?;
                    continue 'value;
                }
                (Open::Object, b'}') | (Open::Array, b']') => {
                    stack.pop();
                }
                (Open::Array, b',') => continue 'value,
                (Open::Object, b) => return Err(invalid(b, "after object key:value pair")),
                (Open::Array, b) => return Err(invalid(b, "after array element")),
            }
        }
    }
}

/// A string's value (the input checked), as Go unquotes it: bytes that are not UTF-8, and
/// escaped surrogates that do not pair, become U+FFFD.
fn unquote(scan: &mut Scan<'_>) -> String {
    let mut out: Vec<u8> = Vec::new();
    let hex4 = |scan: &mut Scan<'_>| {
        let h = std::str::from_utf8(&scan.s[scan.i..scan.i + 4]).ok().and_then(|h| u32::from_str_radix(h, 16).ok()).unwrap_or(0xFFFD);
        scan.i += 4;
        h
    };
    let push = |out: &mut Vec<u8>, c: char| out.extend_from_slice(c.encode_utf8(&mut [0; 4]).as_bytes());
    loop {
        let b = scan.s[scan.i];
        scan.i += 1;
        match b {
            b'"' => break,
            b'\\' => {
                let e = scan.s[scan.i];
                scan.i += 1;
                let c = match e {
                    b'b' => '\u{8}',
                    b'f' => '\u{c}',
                    b'n' => '\n',
                    b'r' => '\r',
                    b't' => '\t',
                    b'u' => {
                        let u = hex4(scan);
                        if (0xD800..0xDC00).contains(&u) && scan.s[scan.i..].starts_with(b"\\u") {
                            let save = scan.i;
                            scan.i += 2;
                            let low = hex4(scan);
                            if (0xDC00..0xE000).contains(&low) {
                                push(&mut out, char::from_u32(0x10000 + ((u - 0xD800) << 10) + (low - 0xDC00)).unwrap_or('\u{FFFD}'));
                                continue;
                            }
                            scan.i = save;
                        }
                        char::from_u32(u).unwrap_or('\u{FFFD}')
                    }
                    other => char::from(other),
                };
                push(&mut out, c);
            }
            _ => out.push(b),
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// Skip a value (the input checked), its first byte read.
fn skip(scan: &mut Scan<'_>, first: u8) {
    let mut depth = 0usize;
    let mut b = first;
    loop {
        match b {
            b'{' | b'[' => depth += 1,
            b'}' | b']' => depth -= 1,
            b'"' => {
                let _ = scan.string();
            }
            _ => {}
        }
        if depth == 0 {
            // A scalar's remaining bytes.
            if !matches!(b, b'}' | b']' | b'"') {
                while scan.peek().is_some_and(|c| !is_space(c) && !matches!(c, b',' | b'}' | b']')) {
                    scan.i += 1;
                }
            }
            return;
        }
        b = scan.s[scan.i];
        scan.i += 1;
    }
}

/// What kind of JSON value starts with `b`, in Go's words.
fn kind(b: u8) -> &'static str {
    match b {
        b'{' => "object",
        b'[' => "array",
        b'"' => "string",
        b't' | b'f' => "bool",
        _ => "number",
    }
}

/// Go's `json.Unmarshal` of checked input into the token struct.
fn decode(s: &[u8]) -> Result<Wire, String> {
    let mut scan = Scan { s, i: 0 };
    let mut w = Wire::default();
    scan.skip_space();
    let first = scan.s[scan.i];
    scan.i += 1;
    match first {
        b'{' => {}
        b'n' => return Ok(w),
        b => return Err(format!("json: cannot unmarshal {} into Go value of type storage.continueToken", kind(b))),
    }
    let mut first_error = None;
    loop {
        scan.skip_space();
        match scan.s[scan.i] {
            b'}' => break,
            b',' => {
                scan.i += 1;
                scan.skip_space();
            }
            _ => {}
        }
        scan.i += 1; // the key's opening quote
        let key = unquote(&mut scan);
        scan.skip_space();
        scan.i += 1; // ':'
        scan.skip_space();
        let start = scan.i;
        let b = scan.s[scan.i];
        scan.i += 1;
        let field = ["v", "rv", "start"].into_iter().find(|f| fold(&key) == *f);
        let wrong = |field: &str, ty: &str, value: String| {
            format!("json: cannot unmarshal {value} into Go struct field continueToken.{field} of type {ty}")
        };
        let error = match (field, b) {
            (_, b'n') | (None, _) => {
                skip(&mut scan, b);
                None
            }
            (Some(f @ ("v" | "start")), b'"') => {
                let value = unquote(&mut scan);
                if f == "v" {
                    w.v = value;
                } else {
                    w.start = value;
                }
                None
            }
            (Some("rv"), b'-' | b'0'..=b'9') => {
                skip(&mut scan, b);
                let text = std::str::from_utf8(&scan.s[start..scan.i]).unwrap_or_default();
                match text.parse::<i64>() {
                    Ok(n) => {
                        w.rv = n;
                        None
                    }
                    Err(_) => Some(wrong("rv", "int64", format!("number {text}"))),
                }
            }
            (Some(f), b) => {
                skip(&mut scan, b);
                Some(wrong(f, if f == "rv" { "int64" } else { "string" }, kind(b).to_string()))
            }
        };
        first_error = first_error.or(error);
    }
    match first_error {
        Some(e) => Err(e),
        None => Ok(w),
    }
}

/// A member's name as matched to a field: Go folds ASCII case, and the two non-ASCII
/// letters that fold to ASCII ones (the Kelvin sign to `k`, the long s to `s`).
fn fold(key: &str) -> String {
    key.chars()
        .map(|c| match c {
            '\u{212A}' => 'k',
            '\u{17F}' => 's',
            c => c.to_ascii_lowercase(),
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn err(s: &str) -> String {
        token(s.as_bytes()).err().unwrap_or_else(|| panic!("{s:?} was taken"))
    }

    #[test]
    fn syntax_errors_are_gos() {
        // Each text is the one kube-apiserver v1.36.2 gave for a continue token of these bytes.
        let cases = [
            ("nope", "invalid character 'o' in literal null (expecting 'u')"),
            ("tru", "invalid character ' ' in literal true (expecting 'e')"),
            ("-", "invalid character ' ' in numeric literal"),
            ("1.", "invalid character ' ' after decimal point in numeric literal"),
            ("\"\\", "invalid character ' ' in string escape code"),
            ("\"ab", "unexpected end of JSON input"),
            ("\"\\u12", "invalid character ' ' in \\u hexadecimal character escape"),
            ("1e+", "invalid character ' ' in exponent of numeric literal"),
            ("{\"a\"", "unexpected end of JSON input"),
            ("7", "json: cannot unmarshal number into Go value of type storage.continueToken"),
            ("fals!", "invalid character '!' in literal false (expecting 'e')"),
            ("", "unexpected end of JSON input"),
            ("  ", "unexpected end of JSON input"),
            ("x", "invalid character 'x' looking for beginning of value"),
            ("{} x", "invalid character 'x' after top-level value"),
            ("01", "invalid character '1' after top-level value"),
            ("-x", "invalid character 'x' in numeric literal"),
            ("1.x", "invalid character 'x' after decimal point in numeric literal"),
            ("1ex", "invalid character 'x' in exponent of numeric literal"),
            ("{x", "invalid character 'x' looking for beginning of object key string"),
            ("{\"a\" 1}", "invalid character '1' after object key"),
            ("{\"a\":1 2}", "invalid character '2' after object key:value pair"),
            ("{\"a\":1,}", "invalid character '}' looking for beginning of object key string"),
            ("[1 2]", "invalid character '2' after array element"),
            ("[1,]", "invalid character ']' looking for beginning of value"),
            ("\"a\u{1}\"", "invalid character '\\x01' in string literal"),
            ("\"\\x\"", "invalid character 'x' in string escape code"),
            ("\"\\u12g4\"", "invalid character 'g' in \\u hexadecimal character escape"),
            ("{\"a\":", "unexpected end of JSON input"),
            ("'", "invalid character '\\'' looking for beginning of value"),
        ];
        for (input, want) in cases {
            assert_eq!(err(input), want, "{input:?}");
        }
        assert_eq!(err(&"[".repeat(MAX_DEPTH + 1)), "invalid character '[' exceeded max depth");
    }

    #[test]
    fn members_are_read_as_go_reads_them() {
        let w = token(br#"{"v":"a","start":"/x\u0000","start":"/y\u0000","RV":5,"other":[1,{"k":"}"}]}"#).unwrap();
        assert_eq!((w.v.as_str(), w.rv, w.start.as_str()), ("a", 5, "/y\u{0}"), "the last member wins, case folded, unknown skipped");
        let w = token(br#"{"v":null,"rv":null,"start":"\ud83d\ude00\ud800"}"#).unwrap();
        assert_eq!((w.v.as_str(), w.rv, w.start.as_str()), ("", 0, "\u{1F600}\u{FFFD}"));
        assert_eq!(token(b"null").unwrap().rv, 0);
        assert_eq!(token(b"{\"\xC5\xBFtart\":\"\xff\"}").unwrap().start, "\u{FFFD}", "long s folds to s; bad UTF-8 is U+FFFD");
    }

    #[test]
    fn type_errors_are_gos_and_the_first_is_reported() {
        assert_eq!(err("[]"), "json: cannot unmarshal array into Go value of type storage.continueToken");
        assert_eq!(err("\"x\""), "json: cannot unmarshal string into Go value of type storage.continueToken");
        assert_eq!(err("7"), "json: cannot unmarshal number into Go value of type storage.continueToken");
        assert_eq!(err(r#"{"rv":"5"}"#), "json: cannot unmarshal string into Go struct field continueToken.rv of type int64");
        assert_eq!(err(r#"{"rv":1.5}"#), "json: cannot unmarshal number 1.5 into Go struct field continueToken.rv of type int64");
        assert_eq!(
            err(r#"{"rv":99999999999999999999}"#),
            "json: cannot unmarshal number 99999999999999999999 into Go struct field continueToken.rv of type int64"
        );
        assert_eq!(err(r#"{"v":true,"rv":"x"}"#), "json: cannot unmarshal bool into Go struct field continueToken.v of type string");
        assert_eq!(err(r#"{"start":{}}"#), "json: cannot unmarshal object into Go struct field continueToken.start of type string");
    }
}
