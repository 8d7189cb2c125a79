//! Kubernetes label and field selectors: parsing, validation and matching with the
//! semantics and error texts of k8s.io/apimachinery (`pkg/labels`, `pkg/fields`).

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::{self, Write as _};

/// Error from parsing or validating a selector; Display is the exact apiserver message text.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SelectorError(pub String);

impl fmt::Display for SelectorError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for SelectorError {}

/// Access to an object's labels.
pub trait LabelSource {
    /// The value of the label `key`, or `None` when the object does not have it.
    fn label(&self, key: &str) -> Option<&str>;
}

impl LabelSource for BTreeMap<String, String> {
    fn label(&self, key: &str) -> Option<&str> {
        self.get(key).map(String::as_str)
    }
}

/// Labels as a slice of `(key, value)` pairs sorted by key (looked up by binary search; the
/// tests' second label representation).
#[cfg(test)]
impl LabelSource for [(Box<str>, Box<str>)] {
    fn label(&self, key: &str) -> Option<&str> {
        let i = self.binary_search_by(|(k, _)| (**k).cmp(key)).ok()?;
        self.get(i).map(|(_, v)| &**v)
    }
}

/// Access to an object's selectable fields (e.g. "metadata.name", "spec.nodeName").
pub trait FieldSource {
    /// The value of the field `name`; `None` compares as the empty string.
    fn field(&self, name: &str) -> Option<&str>;
}

impl FieldSource for BTreeMap<String, String> {
    fn field(&self, name: &str) -> Option<&str> {
        self.get(name).map(String::as_str)
    }
}

// ---------------------------------------------------------------------------
// Validation of label keys and values (pkg/api/validate/content), with its texts.
// ---------------------------------------------------------------------------

const NAME_FMT: &str = "([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]";
const NAME_MSG: &str = "must consist of alphanumeric characters, '-', '_' or '.', \
and must start and end with an alphanumeric character";
const NAME_EXAMPLES: &[&str] = &["MyName", "my.name", "123-abc"];
const VALUE_FMT: &str = "(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?";
const VALUE_MSG: &str = "a valid label must be an empty string or consist of alphanumeric \
characters, '-', '_' or '.', and must start and end with an alphanumeric character";
const VALUE_EXAMPLES: &[&str] = &["MyValue", "my_value", "12345"];
const SUBDOMAIN_FMT: &str = r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*";
const SUBDOMAIN_MSG: &str = "a lowercase RFC 1123 subdomain must consist of lower case \
alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character";
const NAME_MAX: usize = 63;
const SUBDOMAIN_MAX: usize = 253;

fn regex_error(msg: &str, re: &str, examples: &[&str]) -> String {
    let mut out = format!("{msg} (e.g. ");
    for (i, example) in examples.iter().enumerate() {
        if i > 0 {
            out.push_str(" or ");
        }
        let _ = write!(out, "'{example}', ");
    }
    let _ = write!(out, "regex used for validation is '{re}')");
    out
}

fn max_len_error(n: usize) -> String {
    format!("must be no more than {n} bytes")
}

/// `^([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]$`
fn is_label_name(s: &str) -> bool {
    let b = s.as_bytes();
    match (b.first(), b.last()) {
        (Some(first), Some(last)) => {
            first.is_ascii_alphanumeric()
                && last.is_ascii_alphanumeric()
                && b.iter().all(|c| c.is_ascii_alphanumeric() || matches!(c, b'-' | b'_' | b'.'))
        }
        _ => false,
    }
}

/// `^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$`
fn is_dns_subdomain(s: &str) -> bool {
    let lower_alnum = |c: &u8| c.is_ascii_lowercase() || c.is_ascii_digit();
    s.split('.').all(|part| {
        let b = part.as_bytes();
        match (b.first(), b.last()) {
            (Some(first), Some(last)) => lower_alnum(first) && lower_alnum(last) && b.iter().all(|c| lower_alnum(c) || *c == b'-'),
            _ => false,
        }
    })
}

fn subdomain_errors(s: &str) -> Vec<String> {
    let mut errs = Vec::new();
    if s.len() > SUBDOMAIN_MAX {
        errs.push(max_len_error(SUBDOMAIN_MAX));
    }
    if !is_dns_subdomain(s) {
        errs.push(regex_error(SUBDOMAIN_MSG, SUBDOMAIN_FMT, &["example.com"]));
    }
    errs
}

/// Problems with a label key (a "qualified name"): `[prefix/]name`.
fn label_key_errors(key: &str) -> Vec<String> {
    let mut errs = Vec::new();
    let name = match key.split_once('/') {
        None => key,
        Some((_, name)) if name.contains('/') => {
            let re = regex_error(NAME_MSG, NAME_FMT, NAME_EXAMPLES);
            return vec![format!("a valid label key {re} with an optional DNS subdomain prefix and '/' (e.g. 'example.com/MyName')")];
        }
        Some((prefix, name)) => {
            if prefix.is_empty() {
                errs.push("prefix part must be non-empty".to_owned());
            } else {
                errs.extend(subdomain_errors(prefix).into_iter().map(|m| format!("prefix part {m}")));
            }
            name
        }
    };
    if name.is_empty() {
        errs.push("name part must be non-empty".to_owned());
    } else if name.len() > NAME_MAX {
        errs.push(format!("name part {}", max_len_error(NAME_MAX)));
    }
    if !is_label_name(name) {
        errs.push(format!("name part {}", regex_error(NAME_MSG, NAME_FMT, NAME_EXAMPLES)));
    }
    errs
}

fn label_value_errors(value: &str) -> Vec<String> {
    let mut errs = Vec::new();
    if value.len() > NAME_MAX {
        errs.push(max_len_error(NAME_MAX));
    }
    if !value.is_empty() && !is_label_name(value) {
        errs.push(regex_error(VALUE_MSG, VALUE_FMT, VALUE_EXAMPLES));
    }
    errs
}

/// A field.Invalid error rendered as `<path>: Invalid value: "<value>": <detail>`.
fn invalid(path: &str, value: &str, detail: &str) -> String {
    format!("{path}: Invalid value: {}: {detail}", go_quote(value))
}

/// Go's `%q` for a string (strconv.Quote).
fn go_quote(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 2);
    out.push('"');
    for c in s.chars() {
        let _ = match c {
            '"' => write!(out, "\\\""),
            '\\' => write!(out, "\\\\"),
            '\x07' => write!(out, "\\a"),
            '\x08' => write!(out, "\\b"),
            '\x0c' => write!(out, "\\f"),
            '\n' => write!(out, "\\n"),
            '\r' => write!(out, "\\r"),
            '\t' => write!(out, "\\t"),
            '\x0b' => write!(out, "\\v"),
            c if go_is_print(c) => write!(out, "{c}"),
            c if (c as u32) < 0x20 || c == '\x7f' => write!(out, "\\x{:02x}", c as u32),
            c if (c as u32) < 0x10000 => write!(out, "\\u{:04x}", c as u32),
            c => write!(out, "\\U{:08x}", c as u32),
        };
    }
    out.push('"');
    out
}

/// An approximation of Go's `unicode.IsPrint` without Unicode tables: graphic
/// characters and ASCII space, excluding controls, other spaces, format and private-use
/// characters (unassigned code points count as printable here).
fn go_is_print(c: char) -> bool {
    if c.is_ascii() {
        return matches!(c, ' '..='~');
    }
    !(c.is_control()
        || c.is_whitespace()
        || matches!(c as u32,
            0xAD | 0x600..=0x605 | 0x61C | 0x6DD | 0x70F | 0x180E | 0x200B..=0x200F
            | 0x202A..=0x202E | 0x2060..=0x206F | 0xFEFF | 0xFFF9..=0xFFFB | 0xE000..=0xF8FF
            | 0xFFFE | 0xFFFF | 0xE0001 | 0xE0020..=0xE007F | 0xF0000..=0x10FFFF))
}

// ---------------------------------------------------------------------------
// Label selector lexer (a byte lexer behaving like labels.Lexer).
// ---------------------------------------------------------------------------

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Tok {
    End,
    Ident,
    In,
    NotIn,
    Bang,
    Equals,
    DoubleEquals,
    NotEquals,
    Greater,
    Less,
    OpenParen,
    CloseParen,
    Comma,
}

#[derive(Debug, Clone, Copy)]
struct Token<'a> {
    tok: Tok,
    lit: &'a str,
}

const END: Token<'static> = Token { tok: Tok::End, lit: "" };

fn is_whitespace(b: u8) -> bool {
    matches!(b, b' ' | b'\t' | b'\r' | b'\n')
}

fn is_special(b: u8) -> bool {
    matches!(b, b'=' | b'!' | b'(' | b')' | b',' | b'>' | b'<')
}

fn special_tok(s: &str) -> Option<Tok> {
    Some(match s {
        ")" => Tok::CloseParen,
        "," => Tok::Comma,
        "!" => Tok::Bang,
        "==" => Tok::DoubleEquals,
        "=" => Tok::Equals,
        ">" => Tok::Greater,
        "<" => Tok::Less,
        "!=" => Tok::NotEquals,
        "(" => Tok::OpenParen,
        _ => return None,
    })
}

/// Reads bytes like the Go lexer: 0 means end of input, and a NUL byte in the input
/// also reads as 0 (so it ends a word or operator, and at the start of a token ends the input).
struct Lexer<'a> {
    src: &'a str,
    pos: usize,
}

impl<'a> Lexer<'a> {
    fn read(&mut self) -> u8 {
        match self.src.as_bytes().get(self.pos) {
            Some(&b) => {
                self.pos += 1;
                b
            }
            None => 0,
        }
    }

    fn unread(&mut self) {
        self.pos = self.pos.saturating_sub(1);
    }

    fn slice(&self, from: usize, to: usize) -> &'a str {
        self.src.get(from..to).unwrap_or("")
    }

    fn next_token(&mut self) -> Token<'a> {
        let mut ch = self.read();
        while is_whitespace(ch) {
            ch = self.read();
        }
        if ch == 0 {
            return END;
        }
        self.unread();
        if is_special(ch) {
            self.operator()
        } else {
            self.word()
        }
    }

    fn word(&mut self) -> Token<'a> {
        let start = self.pos;
        let end = loop {
            let before = self.pos;
            let ch = self.read();
            if ch == 0 {
                break before;
            }
            if is_special(ch) || is_whitespace(ch) {
                self.unread();
                break before;
            }
        };
        let lit = self.slice(start, end);
        let tok = match lit {
            "in" => Tok::In,
            "notin" => Tok::NotIn,
            _ => Tok::Ident,
        };
        Token { tok, lit }
    }

    /// An operator: `==` and `!=` take two bytes, every other special byte is one token.
    /// Like the Go scanner, a NUL byte right after the operator is swallowed.
    fn operator(&mut self) -> Token<'a> {
        let start = self.pos;
        let first = self.read();
        if matches!(first, b'=' | b'!') && self.src.as_bytes().get(self.pos) == Some(&b'=') {
            self.pos += 1;
        }
        let lit = self.slice(start, self.pos);
        if self.src.as_bytes().get(self.pos) == Some(&0) {
            self.pos += 1;
        }
        // Every special byte, and `==`/`!=`, is a token, so the fallback is never used.
        Token { tok: special_tok(lit).unwrap_or(Tok::End), lit }
    }
}

fn tokenize(src: &str) -> Vec<Token<'_>> {
    let mut lexer = Lexer { src, pos: 0 };
    let mut toks = Vec::new();
    loop {
        let t = lexer.next_token();
        toks.push(t);
        if t.tok == Tok::End {
            return toks;
        }
    }
}

// ---------------------------------------------------------------------------
// Label selector parser (labels.Parser).
// ---------------------------------------------------------------------------

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Op {
    Equals,
    DoubleEquals,
    NotEquals,
    In,
    NotIn,
    Exists,
    DoesNotExist,
    GreaterThan(i64),
    LessThan(i64),
}

/// One requirement; `values` is sorted and free of duplicates.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Requirement {
    key: String,
    op: Op,
    values: Vec<String>,
}

/// In the values context the keywords `in` and `notin` are plain identifiers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Ctx {
    KeyAndOperator,
    Values,
}

struct Parser<'a> {
    toks: Vec<Token<'a>>,
    pos: usize,
}

fn found(lit: &str, expected: &str) -> String {
    format!("found '{lit}', expected: {expected}")
}

impl<'a> Parser<'a> {
    fn peek(&self, ctx: Ctx) -> (Tok, &'a str) {
        let t = self.toks.get(self.pos).copied().unwrap_or(END);
        let tok = match (ctx, t.tok) {
            (Ctx::Values, Tok::In | Tok::NotIn) => Tok::Ident,
            (_, tok) => tok,
        };
        (tok, t.lit)
    }

    fn next(&mut self, ctx: Ctx) -> (Tok, &'a str) {
        let item = self.peek(ctx);
        self.pos += 1;
        item
    }

    fn parse(&mut self) -> Result<Vec<Requirement>, String> {
        let mut reqs = Vec::new();
        loop {
            let (tok, lit) = self.peek(Ctx::Values);
            match tok {
                Tok::Ident | Tok::Bang => {
                    let req = self.requirement().map_err(|e| format!("unable to parse requirement: {e}"))?;
                    reqs.push(req);
                    match self.next(Ctx::Values) {
                        (Tok::End, _) => return Ok(reqs),
                        (Tok::Comma, _) => {
                            let (t2, l2) = self.peek(Ctx::Values);
                            if t2 != Tok::Ident && t2 != Tok::Bang {
                                return Err(found(l2, "identifier after ','"));
                            }
                        }
                        (_, l) => return Err(found(l, "',' or 'end of string'")),
                    }
                }
                Tok::End => return Ok(reqs),
                _ => return Err(found(lit, "!, identifier, or 'end of string'")),
            }
        }
    }

    fn requirement(&mut self) -> Result<Requirement, String> {
        let (key, unary) = self.key_and_inferred_operator()?;
        if let Some(op) = unary {
            return Ok(Requirement { key: key.to_owned(), op, values: Vec::new() });
        }
        let op = self.operator()?;
        let values = match op {
            Op::In | Op::NotIn => self.set_values()?,
            _ => self.exact_value()?,
        };
        new_requirement(key, op, values.into_iter().collect())
    }

    /// The key, and `Exists`/`DoesNotExist` when no binary operator follows.
    fn key_and_inferred_operator(&mut self) -> Result<(&'a str, Option<Op>), String> {
        let (mut tok, mut lit) = self.next(Ctx::Values);
        let negated = tok == Tok::Bang;
        if negated {
            (tok, lit) = self.next(Ctx::Values);
        }
        if tok != Tok::Ident {
            return Err(found(lit, "identifier"));
        }
        let errs = label_key_errors(lit);
        if !errs.is_empty() {
            return Err(invalid("<nil>", lit, &errs.join("; ")));
        }
        let (next, _) = self.peek(Ctx::Values);
        let unary = if negated {
            Some(Op::DoesNotExist)
        } else if matches!(next, Tok::End | Tok::Comma) {
            Some(Op::Exists)
        } else {
            None
        };
        Ok((lit, unary))
    }

    /// Comparison operators carry a placeholder bound until the value is parsed.
    fn operator(&mut self) -> Result<Op, String> {
        match self.next(Ctx::KeyAndOperator) {
            (Tok::In, _) => Ok(Op::In),
            (Tok::NotIn, _) => Ok(Op::NotIn),
            (Tok::Equals, _) => Ok(Op::Equals),
            (Tok::DoubleEquals, _) => Ok(Op::DoubleEquals),
            (Tok::NotEquals, _) => Ok(Op::NotEquals),
            (Tok::Greater, _) => Ok(Op::GreaterThan(0)),
            (Tok::Less, _) => Ok(Op::LessThan(0)),
            (_, lit) => Err(found(lit, "in, notin, =, ==, !=, gt, lt")),
        }
    }

    /// `( v1, v2, ... )`; empty members (`()`, `(,a)`, `(a,)`) mean the empty value.
    fn set_values(&mut self) -> Result<BTreeSet<&'a str>, String> {
        let (tok, lit) = self.next(Ctx::Values);
        if tok != Tok::OpenParen {
            return Err(format!("found '{lit}' expected: '('"));
        }
        let (tok, lit) = self.peek(Ctx::Values);
        match tok {
            Tok::Ident | Tok::Comma => {
                let set = self.identifier_list()?;
                if self.next(Ctx::Values).0 != Tok::CloseParen {
                    return Err(found(lit, "')'"));
                }
                Ok(set)
            }
            Tok::CloseParen => {
                self.next(Ctx::Values);
                Ok(BTreeSet::from([""]))
            }
            _ => Err(found(lit, "',', ')' or identifier")),
        }
    }

    /// Leaves the closing parenthesis unconsumed.
    fn identifier_list(&mut self) -> Result<BTreeSet<&'a str>, String> {
        let mut set = BTreeSet::new();
        loop {
            match self.next(Ctx::Values) {
                (Tok::Ident, lit) => {
                    set.insert(lit);
                    match self.peek(Ctx::Values) {
                        (Tok::Comma, _) => {}
                        (Tok::CloseParen, _) => return Ok(set),
                        (_, l2) => return Err(found(l2, "',' or ')'")),
                    }
                }
                (Tok::Comma, _) => {
                    if set.is_empty() {
                        set.insert("");
                    }
                    match self.peek(Ctx::Values).0 {
                        Tok::CloseParen => {
                            set.insert("");
                            return Ok(set);
                        }
                        Tok::Comma => {
                            self.next(Ctx::Values);
                            set.insert("");
                        }
                        _ => {}
                    }
                }
                (_, lit) => return Err(found(lit, "',', or identifier")),
            }
        }
    }

    fn exact_value(&mut self) -> Result<BTreeSet<&'a str>, String> {
        if matches!(self.peek(Ctx::Values).0, Tok::End | Tok::Comma) {
            return Ok(BTreeSet::from([""]));
        }
        match self.next(Ctx::Values) {
            (Tok::Ident, lit) => Ok(BTreeSet::from([lit])),
            (_, lit) => Err(found(lit, "identifier")),
        }
    }
}

/// Checks the values like labels.NewRequirement (the key was checked while parsing).
fn new_requirement(key: &str, op: Op, values: Vec<&str>) -> Result<Requirement, String> {
    let mut errs: Vec<String> = Vec::new();
    let mut op = op;
    if let Op::GreaterThan(_) | Op::LessThan(_) = op {
        for (i, v) in values.iter().enumerate() {
            match v.parse::<i64>() {
                Ok(n) if matches!(op, Op::GreaterThan(_)) => op = Op::GreaterThan(n),
                Ok(n) => op = Op::LessThan(n),
                Err(_) => errs.push(invalid(&format!("values[{i}]"), v, "for 'Gt', 'Lt' operators, the value must be an integer")),
            }
        }
    }
    for (i, v) in values.iter().enumerate() {
        let problems = label_value_errors(v);
        if !problems.is_empty() {
            errs.push(invalid(&format!("values[{i}][{key}]"), v, &problems.join("; ")));
        }
    }
    errs.dedup();
    match errs.len() {
        0 => Ok(Requirement { key: key.to_owned(), op, values: values.into_iter().map(str::to_owned).collect() }),
        1 => Err(errs.concat()),
        _ => Err(format!("[{}]", errs.join(", "))),
    }
}

impl Requirement {
    fn has(&self, value: &str) -> bool {
        self.values.iter().any(|v| v == value)
    }

    fn matches<L: LabelSource + ?Sized>(&self, labels: &L) -> bool {
        let got = labels.label(&self.key);
        let number = || got.and_then(|v| v.parse::<i64>().ok());
        match self.op {
            Op::Equals | Op::DoubleEquals | Op::In => got.is_some_and(|v| self.has(v)),
            Op::NotEquals | Op::NotIn => got.is_none_or(|v| !self.has(v)),
            Op::Exists => got.is_some(),
            Op::DoesNotExist => got.is_none(),
            Op::GreaterThan(bound) => number().is_some_and(|n| n > bound),
            Op::LessThan(bound) => number().is_some_and(|n| n < bound),
        }
    }
}

impl fmt::Display for Requirement {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let first = self.values.first().map_or("", String::as_str);
        match self.op {
            Op::Exists => write!(f, "{}", self.key),
            Op::DoesNotExist => write!(f, "!{}", self.key),
            Op::Equals => write!(f, "{}={first}", self.key),
            Op::DoubleEquals => write!(f, "{}=={first}", self.key),
            Op::NotEquals => write!(f, "{}!={first}", self.key),
            Op::GreaterThan(_) => write!(f, "{}>{first}", self.key),
            Op::LessThan(_) => write!(f, "{}<{first}", self.key),
            Op::In => write!(f, "{} in ({})", self.key, self.values.join(",")),
            Op::NotIn => write!(f, "{} notin ({})", self.key, self.values.join(",")),
        }
    }
}

/// A parsed label selector: an AND of requirements, sorted by key.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct LabelSelector {
    reqs: Vec<Requirement>,
}

impl LabelSelector {
    /// Parses the `labelSelector` syntax; "" or only whitespace matches everything.
    pub fn parse(s: &str) -> Result<Self, SelectorError> {
        let mut parser = Parser { toks: tokenize(s), pos: 0 };
        let mut reqs = parser.parse().map_err(SelectorError)?;
        reqs.sort_by(|a, b| a.key.cmp(&b.key));
        Ok(Self { reqs })
    }

    /// True when the selector has no requirements (matches everything).
    pub fn is_empty(&self) -> bool {
        self.reqs.is_empty()
    }

    /// True when every requirement matches the labels.
    pub fn matches<L: LabelSource + ?Sized>(&self, labels: &L) -> bool {
        self.reqs.iter().all(|r| r.matches(labels))
    }
}

/// The apiserver's canonical form (requirements by key, set values sorted); it parses back.
impl fmt::Display for LabelSelector {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write_joined(f, &self.reqs)
    }
}

fn write_joined<T: fmt::Display>(f: &mut fmt::Formatter<'_>, items: &[T]) -> fmt::Result {
    for (i, item) in items.iter().enumerate() {
        if i > 0 {
            f.write_str(",")?;
        }
        write!(f, "{item}")?;
    }
    Ok(())
}

// ---------------------------------------------------------------------------
// Field selectors (pkg/fields).
// ---------------------------------------------------------------------------

#[derive(Debug, Clone, PartialEq, Eq)]
struct FieldTerm {
    field: String,
    value: String,
    negated: bool,
}

impl fmt::Display for FieldTerm {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let op = if self.negated { "!=" } else { "=" };
        write!(f, "{}{op}{}", self.field, escape_value(&self.value))
    }
}

/// Escapes `\`, `,` and `=` with a backslash (fields.EscapeValue).
fn escape_value(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        if matches!(c, '\\' | ',' | '=') {
            out.push('\\');
        }
        out.push(c);
    }
    out
}

/// fields.UnescapeValue, with its error texts.
fn unescape_value(s: &str) -> Result<String, SelectorError> {
    let fail = |what: String| SelectorError(format!("invalid field selector: {what}"));
    let mut out = String::with_capacity(s.len());
    let mut chars = s.chars();
    while let Some(c) = chars.next() {
        match c {
            '\\' => match chars.next() {
                Some(e @ ('\\' | ',' | '=')) => out.push(e),
                e => {
                    let e = e.map(String::from).unwrap_or_default();
                    return Err(fail(format!("invalid escape sequence: \\{e}")));
                }
            },
            // Go prints the rune with %v, i.e. as its code point number.
            ',' | '=' => {
                let code = u32::from(c);
                return Err(fail(format!("unescaped character in value: {code}")));
            }
            _ => out.push(c),
        }
    }
    Ok(out)
}

/// Splits on commas not escaped by a backslash (escapes are kept in the terms).
fn split_terms(s: &str) -> Vec<&str> {
    let mut terms = Vec::new();
    if s.is_empty() {
        return terms;
    }
    let (mut start, mut escaped) = (0, false);
    for (i, b) in s.bytes().enumerate() {
        if escaped {
            escaped = false;
        } else if b == b'\\' {
            escaped = true;
        } else if b == b',' {
            terms.push(s.get(start..i).unwrap_or(""));
            start = i + 1;
        }
    }
    terms.push(s.get(start..).unwrap_or(""));
    terms
}

/// Splits at the first operator (`!=`, `==` or `=`, tried in that order at each
/// position): `(field, negated, raw value)`.
fn split_term(term: &str) -> Option<(&str, bool, &str)> {
    let bytes = term.as_bytes();
    (0..bytes.len()).find_map(|i| {
        let rest = bytes.get(i..)?;
        let (negated, len) = if rest.starts_with(b"!=") {
            (true, 2)
        } else if rest.starts_with(b"==") {
            (false, 2)
        } else if rest.starts_with(b"=") {
            (false, 1)
        } else {
            return None;
        };
        Some((term.get(..i)?, negated, term.get(i + len..)?))
    })
}

/// A parsed field selector: an AND of `field=value` / `field!=value` terms.
///
/// Terms are kept sorted by their canonical text, as the apiserver sorts the raw terms
/// (the two orders differ only in how `==` sorts, which matters to no result).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct FieldSelector {
    terms: Vec<FieldTerm>,
}

impl FieldSelector {
    /// Parses the `fieldSelector` syntax; "" matches everything. Whitespace is not
    /// trimmed: it is part of the field name or value, as in the apiserver.
    pub fn parse(s: &str) -> Result<Self, SelectorError> {
        let mut parts = split_terms(s);
        parts.sort_unstable();
        let mut terms = Vec::new();
        for part in parts.into_iter().filter(|p| !p.is_empty()) {
            let Some((field, negated, raw)) = split_term(part) else {
                return Err(SelectorError(format!("invalid selector: '{s}'; can't understand '{part}'")));
            };
            let value = unescape_value(raw)?;
            // The apiserver's transform drops a term whose field and value are both empty.
            if !field.is_empty() || !value.is_empty() {
                terms.push(FieldTerm { field: field.to_owned(), value, negated });
            }
        }
        terms.sort_by_cached_key(FieldTerm::to_string);
        Ok(Self { terms })
    }

    /// True when the selector has no terms (matches everything).
    pub fn is_empty(&self) -> bool {
        self.terms.is_empty()
    }

    /// Check every field named is in `supported`; else Err("field label not supported: spec.bogus").
    pub fn validate(&self, supported: &[&str]) -> Result<(), SelectorError> {
        match self.fields().find(|f| !supported.contains(f)) {
            Some(f) => Err(SelectorError(format!("field label not supported: {f}"))),
            None => Ok(()),
        }
    }

    /// The value of an equality requirement (`f=v` or `f==v`) on `field`, if there is one (used to pick the spec.nodeName index).
    pub fn exact(&self, field: &str) -> Option<&str> {
        self.terms.iter().find(|t| !t.negated && t.field == field).map(|t| t.value.as_str())
    }

    /// True when every term matches; a field the object lacks compares as "".
    pub fn matches<F: FieldSource + ?Sized>(&self, fields: &F) -> bool {
        self.matches_besides(fields, None)
    }

    /// [`matches`](Self::matches) for an object known to hold `known.1` in field `known.0`
    /// (it came from that field's index): equality terms on it are not checked again.
    pub fn matches_besides<F: FieldSource + ?Sized>(&self, fields: &F, known: Option<(&str, &str)>) -> bool {
        self.terms
            .iter()
            .filter(|t| t.negated || known != Some((t.field.as_str(), t.value.as_str())))
            .all(|t| (fields.field(&t.field).unwrap_or("") == t.value) != t.negated)
    }

    /// The field names mentioned, in term order (a name may repeat).
    pub fn fields(&self) -> impl Iterator<Item = &str> {
        self.terms.iter().map(|t| t.field.as_str())
    }
}

/// The canonical form (`==` written as `=`, values escaped); it parses back.
impl fmt::Display for FieldSelector {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write_joined(f, &self.terms)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    const NAME_RE: &str = "must consist of alphanumeric characters, '-', '_' or '.', and must start and end \
with an alphanumeric character (e.g. 'MyName',  or 'my.name',  or '123-abc', regex used for validation is \
'([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]')";
    const VALUE_RE: &str = "a valid label must be an empty string or consist of alphanumeric characters, '-', '_' \
or '.', and must start and end with an alphanumeric character (e.g. 'MyValue',  or 'my_value',  or '12345', \
regex used for validation is '(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?')";
    const SUBDOMAIN_RE: &str = "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, \
'-' or '.', and must start and end with an alphanumeric character (e.g. 'example.com', regex used for validation \
is '[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')";
    const INT_ERR: &str = "for 'Gt', 'Lt' operators, the value must be an integer";

    fn labels(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()
    }

    fn sel(s: &str) -> LabelSelector {
        LabelSelector::parse(s).unwrap_or_else(|e| panic!("{s:?} should parse: {e}"))
    }

    fn label_err(s: &str) -> String {
        match LabelSelector::parse(s) {
            Ok(v) => panic!("{s:?} should fail, parsed as {v:?}"),
            Err(e) => e.to_string(),
        }
    }

    fn fsel(s: &str) -> FieldSelector {
        FieldSelector::parse(s).unwrap_or_else(|e| panic!("{s:?} should parse: {e}"))
    }

    fn field_err(s: &str) -> String {
        match FieldSelector::parse(s) {
            Ok(v) => panic!("{s:?} should fail, parsed as {v:?}"),
            Err(e) => e.to_string(),
        }
    }

    /// Label selector `s` against labels, both ways of supplying labels.
    fn lm(s: &str, pairs: &[(&str, &str)]) -> bool {
        let map = labels(pairs);
        let mut slice: Vec<(Box<str>, Box<str>)> = pairs.iter().map(|(k, v)| (Box::from(*k), Box::from(*v))).collect();
        slice.sort();
        let selector = sel(s);
        let by_map = selector.matches(&map);
        assert_eq!(by_map, selector.matches(slice.as_slice()), "map vs slice for {s:?}");
        by_map
    }

    // ----- label selectors: operators and matching -----

    #[test]
    fn matches_besides_skips_only_the_known_equality() {
        let f = FieldSelector::parse("spec.nodeName=a,spec.nodeName!=b,status.phase=Running").unwrap();
        let obj: BTreeMap<String, String> =
            [("spec.nodeName", "zzz"), ("status.phase", "Running")].into_iter().map(|(k, v)| (k.to_string(), v.to_string())).collect();
        assert!(!f.matches(&obj));
        assert!(f.matches_besides(&obj, Some(("spec.nodeName", "a"))), "the known term is taken as held");
        assert!(!f.matches_besides(&obj, Some(("spec.nodeName", "c"))), "another value is still checked");
        let both = FieldSelector::parse("spec.nodeName=a,spec.nodeName=b").unwrap();
        assert!(!both.matches_besides(&obj, Some(("spec.nodeName", "a"))), "a second equality on the field is still checked");
    }

    #[test]
    fn empty_and_whitespace_match_everything() {
        for s in ["", " ", "\t\r\n ", "  \n"] {
            let sel = sel(s);
            assert!(sel.is_empty());
            assert!(sel.matches(&labels(&[])));
            assert!(sel.matches(&labels(&[("a", "b")])));
            assert_eq!(sel.to_string(), "");
        }
        assert!(LabelSelector::default().is_empty());
        assert!(!sel("a").is_empty());
    }

    #[test]
    fn equality_operators() {
        for s in ["a=b", "a==b", " a = b ", "a\t==\tb"] {
            assert!(lm(s, &[("a", "b")]), "{s}");
            assert!(lm(s, &[("a", "b"), ("c", "d")]), "{s}");
            assert!(!lm(s, &[("a", "c")]), "{s}");
            assert!(!lm(s, &[]), "{s}");
        }
        assert!(lm("a=", &[("a", "")]));
        assert!(!lm("a=", &[]));
        assert!(!lm("a=", &[("a", "x")]));
    }

    #[test]
    fn not_equals_matches_missing_label() {
        assert!(lm("a!=b", &[]));
        assert!(lm("a!=b", &[("a", "c")]));
        assert!(!lm("a!=b", &[("a", "b")]));
        assert!(lm("a != ", &[("a", "x")]));
        assert!(!lm("a!=", &[("a", "")]));
    }

    #[test]
    fn set_operators() {
        assert!(lm("a in (x,y)", &[("a", "y")]));
        assert!(!lm("a in (x,y)", &[("a", "z")]));
        assert!(!lm("a in (x,y)", &[]));
        assert!(lm("a notin (x,y)", &[]));
        assert!(lm("a notin (x,y)", &[("a", "z")]));
        assert!(!lm("a notin (x,y)", &[("a", "x")]));
        assert!(lm("a in ( x , y )", &[("a", "x")]));
        assert!(lm("a in(x)", &[("a", "x")]));
        assert!(lm("a notin(x)", &[("a", "y")]));
    }

    #[test]
    fn set_with_empty_values() {
        assert!(lm("a in ()", &[("a", "")]));
        assert!(!lm("a in ()", &[("a", "x")]));
        assert!(lm("a in (,x)", &[("a", "")]));
        assert!(lm("a in (x,)", &[("a", "")]));
        assert!(lm("a in (x,,y)", &[("a", "")]));
        assert!(lm("a in (x,,y)", &[("a", "y")]));
        assert!(lm("a in (,)", &[("a", "")]));
        assert_eq!(sel("a in (x,,y)").to_string(), "a in (,x,y)");
        assert_eq!(sel("a in (y,x,y)").to_string(), "a in (x,y)");
        assert_eq!(sel("a notin ()").to_string(), "a notin ()");
    }

    #[test]
    fn exists_and_does_not_exist() {
        assert!(lm("a", &[("a", "")]));
        assert!(!lm("a", &[("b", "")]));
        assert!(lm("!a", &[("b", "")]));
        assert!(!lm("!a", &[("a", "x")]));
        assert!(lm("! a", &[]));
        assert!(lm("a,!b", &[("a", "1")]));
        assert!(!lm("a,!b", &[("a", "1"), ("b", "2")]));
    }

    #[test]
    fn numeric_comparisons() {
        assert!(lm("a>1", &[("a", "2")]));
        assert!(!lm("a>1", &[("a", "1")]));
        assert!(!lm("a>1", &[("a", "x")]));
        assert!(!lm("a>1", &[]));
        assert!(lm("a<5", &[("a", "-3")]));
        assert!(lm("a < 5", &[("a", "+4")]));
        assert!(!lm("a<5", &[("a", "5")]));
        assert!(!lm("a<5", &[("a", "")]));
        assert!(!lm("a<5", &[("a", "99999999999999999999")]));
        assert!(lm("a>007", &[("a", "8")]));
        assert_eq!(sel("a>007").to_string(), "a>007");
    }

    #[test]
    fn conjunction_and_ordering() {
        let s = sel("b=1, a in (y,x) ,!c,d");
        assert_eq!(s.to_string(), "a in (x,y),b=1,!c,d");
        assert!(s.matches(&labels(&[("a", "x"), ("b", "1"), ("d", "")])));
        assert!(!s.matches(&labels(&[("a", "x"), ("b", "1")])));
        assert!(!s.matches(&labels(&[("a", "x"), ("b", "1"), ("c", ""), ("d", "")])));
    }

    #[test]
    fn keywords_as_keys_and_values() {
        assert!(lm("in=notin", &[("in", "notin")]));
        assert!(lm("notin in (in,notin)", &[("notin", "in")]));
        assert!(lm("in", &[("in", "")]));
        assert!(lm("!notin", &[]));
        assert!(lm("x in (in)", &[("x", "in")]));
    }

    #[test]
    fn prefixed_keys() {
        assert!(lm("app.kubernetes.io/name=web", &[("app.kubernetes.io/name", "web")]));
        assert!(lm("example.com/a_b-c.d", &[("example.com/a_b-c.d", "")]));
        let long_name = "a".repeat(63);
        assert!(lm(&format!("{long_name}={long_name}"), &[(&long_name, &long_name)]));
    }

    #[test]
    fn display_forms() {
        for (input, shown) in [
            ("a==b", "a==b"),
            ("a = b", "a=b"),
            ("a!=", "a!="),
            ("!a", "!a"),
            ("a>5", "a>5"),
            ("a<5", "a<5"),
            ("a notin (b)", "a notin (b)"),
            ("in in (in)", "in in (in)"),
        ] {
            assert_eq!(sel(input).to_string(), shown);
            assert_eq!(sel(shown), sel(input));
        }
    }

    #[test]
    fn nul_bytes_behave_like_the_go_lexer() {
        // NUL right after a word or operator separates tokens; at a token start it ends the input.
        assert_eq!(sel("a=\0b"), sel("a=b"));
        assert_eq!(sel("a \0b=c"), sel("a"));
        assert_eq!(label_err("a\0b"), "unable to parse requirement: found 'b', expected: in, notin, =, ==, !=, gt, lt");
    }

    #[test]
    fn label_source_slice_uses_sorted_keys() {
        let slice: Vec<(Box<str>, Box<str>)> = vec![("a".into(), "1".into()), ("c".into(), "3".into()), ("e".into(), "5".into())];
        let s = slice.as_slice();
        assert_eq!(s.label("a"), Some("1"));
        assert_eq!(s.label("c"), Some("3"));
        assert_eq!(s.label("e"), Some("5"));
        assert_eq!(s.label("b"), None);
        assert_eq!(s.label(""), None);
        let empty: &[(Box<str>, Box<str>)] = &[];
        assert_eq!(empty.label("a"), None);
    }

    // ----- label selectors: syntax errors -----

    #[test]
    fn error_unterminated_set() {
        assert_eq!(label_err("a in ("), "unable to parse requirement: found '', expected: ',', ')' or identifier");
        assert_eq!(label_err("a in (="), "unable to parse requirement: found '=', expected: ',', ')' or identifier");
    }

    #[test]
    fn error_selector_level() {
        assert_eq!(label_err(",a"), "found ',', expected: !, identifier, or 'end of string'");
        assert_eq!(label_err("=a"), "found '=', expected: !, identifier, or 'end of string'");
        assert_eq!(label_err("!=a"), "found '!=', expected: !, identifier, or 'end of string'");
        assert_eq!(label_err(")"), "found ')', expected: !, identifier, or 'end of string'");
        assert_eq!(label_err("a,"), "found '', expected: identifier after ','");
        assert_eq!(label_err("a,,b"), "found ',', expected: identifier after ','");
        assert_eq!(label_err("a=b c"), "found 'c', expected: ',' or 'end of string'");
        assert_eq!(label_err("a=b)"), "found ')', expected: ',' or 'end of string'");
        assert_eq!(label_err("!a=b"), "found '=', expected: ',' or 'end of string'");
        assert_eq!(label_err("a in (b) c"), "found 'c', expected: ',' or 'end of string'");
    }

    #[test]
    fn error_requirement_level() {
        let cases = [
            ("!!a", "found '!', expected: identifier"),
            ("!", "found '', expected: identifier"),
            ("!,a", "found ',', expected: identifier"),
            ("a b", "found 'b', expected: in, notin, =, ==, !=, gt, lt"),
            ("a (", "found '(', expected: in, notin, =, ==, !=, gt, lt"),
            ("a !b", "found '!', expected: in, notin, =, ==, !=, gt, lt"),
            ("a in b", "found 'b' expected: '('"),
            ("a in", "found '' expected: '('"),
            ("a notin ,", "found ',' expected: '('"),
            ("a in (b c)", "found 'c', expected: ',' or ')'"),
            ("a in (b", "found '', expected: ',' or ')'"),
            ("a in (b,", "found '', expected: ',', or identifier"),
            ("a in (b,=)", "found '=', expected: ',', or identifier"),
            ("a in (,,)", "found ')', expected: ',', or identifier"),
            ("a in (b,,)", "found ')', expected: ',', or identifier"),
            ("a===", "found '=', expected: identifier"),
            ("a=(", "found '(', expected: identifier"),
            ("a!=!", "found '!', expected: identifier"),
            ("a>)", "found ')', expected: identifier"),
        ];
        for (input, msg) in cases {
            assert_eq!(label_err(input), format!("unable to parse requirement: {msg}"), "{input:?}");
        }
    }

    // ----- label selectors: key and value validation -----

    #[test]
    fn error_invalid_key_name() {
        assert_eq!(
            label_err("app:monolith"),
            format!("unable to parse requirement: <nil>: Invalid value: \"app:monolith\": name part {NAME_RE}")
        );
        assert_eq!(label_err("-a=b"), format!("unable to parse requirement: <nil>: Invalid value: \"-a\": name part {NAME_RE}"));
        let long = "a".repeat(64);
        assert_eq!(
            label_err(&long),
            format!("unable to parse requirement: <nil>: Invalid value: \"{long}\": name part must be no more than 63 bytes")
        );
    }

    #[test]
    fn error_invalid_key_prefix() {
        assert_eq!(
            label_err("app.kubernetes_io/name=x"),
            format!("unable to parse requirement: <nil>: Invalid value: \"app.kubernetes_io/name\": prefix part {SUBDOMAIN_RE}")
        );
        assert_eq!(label_err("/a"), "unable to parse requirement: <nil>: Invalid value: \"/a\": prefix part must be non-empty");
        assert_eq!(
            label_err("a/"),
            format!("unable to parse requirement: <nil>: Invalid value: \"a/\": name part must be non-empty; name part {NAME_RE}")
        );
        let prefix = "a".repeat(254);
        assert_eq!(
            label_err(&format!("{prefix}/x")),
            format!("unable to parse requirement: <nil>: Invalid value: \"{prefix}/x\": prefix part must be no more than 253 bytes")
        );
        assert_eq!(
            label_err("a/b/c"),
            format!(
                "unable to parse requirement: <nil>: Invalid value: \"a/b/c\": a valid label key {NAME_RE} \
with an optional DNS subdomain prefix and '/' (e.g. 'example.com/MyName')"
            )
        );
    }

    #[test]
    fn error_key_is_go_quoted() {
        assert_eq!(label_err("a\"b\\"), format!("unable to parse requirement: <nil>: Invalid value: \"a\\\"b\\\\\": name part {NAME_RE}"));
        assert_eq!(
            label_err("\u{1}x\u{a0}é"),
            format!("unable to parse requirement: <nil>: Invalid value: \"\\x01x\\u00a0é\": name part {NAME_RE}")
        );
    }

    #[test]
    fn error_invalid_values() {
        assert_eq!(
            label_err("app=demo-{nginx}"),
            format!("unable to parse requirement: values[0][app]: Invalid value: \"demo-{{nginx}}\": {VALUE_RE}")
        );
        let long = "v".repeat(64);
        assert_eq!(
            label_err(&format!("a!={long}")),
            format!("unable to parse requirement: values[0][a]: Invalid value: \"{long}\": must be no more than 63 bytes")
        );
        let long_bad = format!("{long}-");
        assert_eq!(
            label_err(&format!("a=={long_bad}")),
            format!("unable to parse requirement: values[0][a]: Invalid value: \"{long_bad}\": must be no more than 63 bytes; {VALUE_RE}")
        );
        assert_eq!(
            label_err("k in (ok,-y,-x)"),
            format!(
                "unable to parse requirement: [values[0][k]: Invalid value: \"-x\": {VALUE_RE}, \
values[1][k]: Invalid value: \"-y\": {VALUE_RE}]"
            )
        );
    }

    #[test]
    fn error_numeric_values() {
        assert_eq!(label_err("environment>qa"), format!("unable to parse requirement: values[0]: Invalid value: \"qa\": {INT_ERR}"));
        assert_eq!(label_err("a<"), format!("unable to parse requirement: values[0]: Invalid value: \"\": {INT_ERR}"));
        assert_eq!(
            label_err("a>99999999999999999999"),
            format!("unable to parse requirement: values[0]: Invalid value: \"99999999999999999999\": {INT_ERR}")
        );
        assert_eq!(label_err("a>-1"), format!("unable to parse requirement: values[0][a]: Invalid value: \"-1\": {VALUE_RE}"));
        assert_eq!(
            label_err("a<-x"),
            format!(
                "unable to parse requirement: [values[0]: Invalid value: \"-x\": {INT_ERR}, \
values[0][a]: Invalid value: \"-x\": {VALUE_RE}]"
            )
        );
    }

    #[test]
    fn error_type_traits() {
        let e = LabelSelector::parse("a in (").err().unwrap_or_else(|| SelectorError(String::new()));
        let boxed: Box<dyn std::error::Error> = Box::new(e.clone());
        assert_eq!(boxed.to_string(), e.0);
    }

    #[test]
    fn go_quote_escapes() {
        assert_eq!(go_quote(""), "\"\"");
        assert_eq!(go_quote("a\tb\n\u{7}\u{8}\u{b}\u{c}\r"), "\"a\\tb\\n\\a\\b\\v\\f\\r\"");
        assert_eq!(go_quote("\u{7f}\u{85}\u{200b}日本"), "\"\\x7f\\u0085\\u200b日本\"");
        assert_eq!(go_quote("\u{f0000}"), "\"\\U000f0000\"");
    }

    // ----- field selectors -----

    fn fields(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        labels(pairs)
    }

    #[test]
    fn field_empty_selectors() {
        for s in ["", ",", ",,,", "=", "!=", "=,!="] {
            let f = fsel(s);
            assert!(f.is_empty(), "{s:?}");
            assert!(f.matches(&fields(&[])));
            assert_eq!(f.to_string(), "");
        }
        assert!(FieldSelector::default().is_empty());
    }

    #[test]
    fn field_operators() {
        let node = fields(&[("spec.nodeName", "n1"), ("metadata.name", "p")]);
        assert!(fsel("spec.nodeName=n1").matches(&node));
        assert!(fsel("spec.nodeName==n1").matches(&node));
        assert!(!fsel("spec.nodeName!=n1").matches(&node));
        assert!(fsel("spec.nodeName!=n2").matches(&node));
        assert!(fsel("spec.nodeName=n1,metadata.name=p").matches(&node));
        assert!(!fsel("spec.nodeName=n1,metadata.name=q").matches(&node));
        assert!(fsel(",spec.nodeName=n1,,").matches(&node));
    }

    #[test]
    fn field_missing_compares_as_empty() {
        let none = fields(&[]);
        assert!(fsel("spec.nodeName=").matches(&none));
        assert!(fsel("spec.nodeName==").matches(&none));
        assert!(!fsel("spec.nodeName!=").matches(&none));
        assert!(fsel("spec.nodeName!=n1").matches(&none));
        assert!(!fsel("spec.nodeName=n1").matches(&none));
        assert!(fsel("spec.nodeName=").matches(&fields(&[("spec.nodeName", "")])));
    }

    #[test]
    fn field_whitespace_is_significant() {
        let f = fsel("a = b");
        assert_eq!(f.fields().collect::<Vec<_>>(), ["a "]);
        assert_eq!(f.exact("a "), Some(" b"));
        assert!(f.matches(&fields(&[("a ", " b")])));
        assert!(!f.matches(&fields(&[("a", "b")])));
    }

    #[test]
    fn field_escapes() {
        assert_eq!(fsel(r"a=b\,c").exact("a"), Some("b,c"));
        assert_eq!(fsel(r"a=b\=c").exact("a"), Some("b=c"));
        assert_eq!(fsel(r"a=b\\c").exact("a"), Some(r"b\c"));
        assert_eq!(fsel(r"a=\\").exact("a"), Some("\\"));
        assert_eq!(fsel(r"a=x\,y,b=z").exact("b"), Some("z"));
        assert_eq!(fsel("a=!x").exact("a"), Some("!x"));
        let f = fsel(r"a=b\,c\=d\\");
        assert_eq!(f.to_string(), r"a=b\,c\=d\\");
        assert!(f.matches(&fields(&[("a", r"b,c=d\")])));
        // Escapes in the field name are kept verbatim.
        assert_eq!(fsel(r"x\,y=1").fields().collect::<Vec<_>>(), [r"x\,y"]);
    }

    #[test]
    fn field_errors() {
        assert_eq!(field_err("x"), "invalid selector: 'x'; can't understand 'x'");
        assert_eq!(field_err("a=b,foo"), "invalid selector: 'a=b,foo'; can't understand 'foo'");
        assert_eq!(field_err("a!b"), "invalid selector: 'a!b'; can't understand 'a!b'");
        assert_eq!(field_err(r"a\,b"), r"invalid selector: 'a\,b'; can't understand 'a\,b'");
        assert_eq!(field_err("a=b=c"), "invalid field selector: unescaped character in value: 61");
        assert_eq!(field_err("a!==b"), "invalid field selector: unescaped character in value: 61");
        assert_eq!(field_err("a===b"), "invalid field selector: unescaped character in value: 61");
        assert_eq!(field_err(r"a=b\x"), r"invalid field selector: invalid escape sequence: \x");
        assert_eq!(field_err(r"a=b\é"), r"invalid field selector: invalid escape sequence: \é");
        assert_eq!(field_err(r"a=b\"), r"invalid field selector: invalid escape sequence: \");
        assert_eq!(field_err(r"a=b\,c\"), r"invalid field selector: invalid escape sequence: \");
    }

    #[test]
    fn field_errors_follow_sorted_term_order() {
        // The apiserver sorts the terms before parsing them: 'a' is reported before 'z'.
        assert_eq!(field_err("z,a"), "invalid selector: 'z,a'; can't understand 'a'");
        assert_eq!(field_err(r"z=\q,a=1=2"), "invalid field selector: unescaped character in value: 61");
    }

    #[test]
    fn field_exact_and_fields() {
        let f = fsel("spec.nodeName=n1,metadata.name!=x,status.phase==Running");
        assert_eq!(f.exact("spec.nodeName"), Some("n1"));
        assert_eq!(f.exact("status.phase"), Some("Running"));
        assert_eq!(f.exact("metadata.name"), None);
        assert_eq!(f.exact("metadata.namespace"), None);
        assert_eq!(f.fields().collect::<Vec<_>>(), ["metadata.name", "spec.nodeName", "status.phase"]);
        assert_eq!(f.to_string(), "metadata.name!=x,spec.nodeName=n1,status.phase=Running");
        assert_eq!(fsel("spec.nodeName=").exact("spec.nodeName"), Some(""));
    }

    #[test]
    fn field_validate() {
        let supported = ["metadata.name", "metadata.namespace", "spec.nodeName"];
        assert_eq!(fsel("spec.nodeName=a,metadata.name!=b").validate(&supported), Ok(()));
        assert_eq!(fsel("").validate(&supported), Ok(()));
        assert_eq!(
            fsel("spec.nodeName=a,spec.bogus=b").validate(&supported),
            Err(SelectorError("field label not supported: spec.bogus".to_owned()))
        );
        assert_eq!(fsel("=x").validate(&supported), Err(SelectorError("field label not supported: ".to_owned())));
    }

    #[test]
    fn field_display_round_trips() {
        for s in [r"b=2,a!=1", r"a==x\,y", r"a\=b", r"a\!=b", r"a\=,c=d", r"x!!=y", "=v", "a=", "a!="] {
            let f = fsel(s);
            assert_eq!(fsel(&f.to_string()), f, "{s:?} -> {f}");
        }
    }

    // ----- properties -----

    #[derive(Debug, Clone)]
    enum RefOp {
        Eq(String),
        DoubleEq(String),
        Ne(String),
        In(Vec<String>),
        NotIn(Vec<String>),
        Exists,
        NotExists,
        Gt(i64),
        Lt(i64),
    }

    #[derive(Debug, Clone)]
    struct RefReq {
        key: String,
        op: RefOp,
        ws: String,
    }

    const KEYS: &[&str] = &["a", "b", "x.io/c", "in"];
    const VALUES: &[&str] = &["", "x", "y", "1", "2", "10", "in", "-3", "+4", "abc"];

    fn key() -> impl Strategy<Value = String> {
        proptest::sample::select(KEYS).prop_map(str::to_owned)
    }

    fn value() -> impl Strategy<Value = String> {
        // Values of labels; the selector side uses the valid ones.
        proptest::sample::select(VALUES).prop_map(str::to_owned)
    }

    fn selector_value() -> impl Strategy<Value = String> {
        value().prop_filter("valid label value", |v| label_value_errors(v).is_empty())
    }

    fn value_set() -> impl Strategy<Value = Vec<String>> {
        proptest::collection::btree_set(selector_value(), 1..4).prop_map(|s| s.into_iter().collect())
    }

    fn ref_op() -> impl Strategy<Value = RefOp> {
        prop_oneof![
            selector_value().prop_map(RefOp::Eq),
            selector_value().prop_map(RefOp::DoubleEq),
            selector_value().prop_map(RefOp::Ne),
            value_set().prop_map(RefOp::In),
            value_set().prop_map(RefOp::NotIn),
            Just(RefOp::Exists),
            Just(RefOp::NotExists),
            (0i64..12).prop_map(RefOp::Gt),
            (0i64..12).prop_map(RefOp::Lt),
        ]
    }

    fn ref_req() -> impl Strategy<Value = RefReq> {
        let ws = proptest::sample::select(&["", " ", "\t", " \n "][..]).prop_map(str::to_owned);
        (key(), ref_op(), ws).prop_map(|(key, op, ws)| RefReq { key, op, ws })
    }

    fn render(reqs: &[RefReq]) -> String {
        let parts: Vec<String> = reqs
            .iter()
            .map(|r| {
                let (k, w) = (&r.key, &r.ws);
                match &r.op {
                    RefOp::Eq(v) => format!("{w}{k}{w}={w}{v}{w}"),
                    RefOp::DoubleEq(v) => format!("{k}{w}=={w}{v}"),
                    RefOp::Ne(v) => format!("{w}{k}!={v}"),
                    RefOp::In(vs) => format!("{k} in{w}({w}{}{w}){w}", vs.join(",")),
                    RefOp::NotIn(vs) => format!("{w}{k} notin ({})", vs.join(&format!("{w},{w}"))),
                    RefOp::Exists => format!("{w}{k}{w}"),
                    RefOp::NotExists => format!("!{w}{k}"),
                    RefOp::Gt(n) => format!("{k}{w}>{w}{n}"),
                    RefOp::Lt(n) => format!("{k}<{n}{w}"),
                }
            })
            .collect();
        parts.join(",")
    }

    fn reference_matches(reqs: &[RefReq], labels: &BTreeMap<String, String>) -> bool {
        reqs.iter().all(|r| {
            let got = labels.get(&r.key).map(String::as_str);
            let num = got.and_then(|v| v.parse::<i64>().ok());
            match &r.op {
                RefOp::Eq(v) | RefOp::DoubleEq(v) => got == Some(v.as_str()),
                RefOp::Ne(v) => got != Some(v.as_str()),
                RefOp::In(vs) => got.is_some_and(|g| vs.iter().any(|v| v == g)),
                RefOp::NotIn(vs) => !got.is_some_and(|g| vs.iter().any(|v| v == g)),
                RefOp::Exists => got.is_some(),
                RefOp::NotExists => got.is_none(),
                RefOp::Gt(n) => num.is_some_and(|g| g > *n),
                RefOp::Lt(n) => num.is_some_and(|g| g < *n),
            }
        })
    }

    fn label_map() -> impl Strategy<Value = BTreeMap<String, String>> {
        proptest::collection::btree_map(key(), value(), 0..4)
    }

    /// Strings from selector-ish fragments, so that many of them parse.
    fn label_soup() -> impl Strategy<Value = String> {
        let atoms = &["a", "b", "in", "notin", "=", "==", "!=", "!", "(", ")", ",", ">", "<", "1", "-", "x/", " ", "\t", "\0"][..];
        proptest::collection::vec(proptest::sample::select(atoms), 0..14).prop_map(|v| v.concat())
    }

    fn field_soup() -> impl Strategy<Value = String> {
        let atoms = &["a", "b.c", "=", "==", "!=", "!", ",", "\\", "\\,", "\\=", "\\\\", " ", "é"][..];
        proptest::collection::vec(proptest::sample::select(atoms), 0..14).prop_map(|v| v.concat())
    }

    #[derive(Debug, Clone)]
    struct RefTerm {
        field: String,
        value: String,
        op: &'static str,
    }

    fn ref_term() -> impl Strategy<Value = RefTerm> {
        let field = proptest::sample::select(&["f", "g.h", "spec.nodeName"][..]).prop_map(str::to_owned);
        let op = proptest::sample::select(&["=", "==", "!="][..]);
        (field, "[ab,=\\\\! ]{0,4}", op).prop_map(|(field, value, op)| RefTerm { field, value, op })
    }

    proptest! {
        #[test]
        fn label_matching_agrees_with_reference(
            reqs in proptest::collection::vec(ref_req(), 0..5),
            labels in label_map(),
        ) {
            let text = render(&reqs);
            let selector = LabelSelector::parse(&text).map_err(|e| TestCaseError::fail(format!("{text:?}: {e}")))?;
            prop_assert_eq!(selector.is_empty(), reqs.is_empty());
            prop_assert_eq!(selector.matches(&labels), reference_matches(&reqs, &labels), "{:?}", text);
            let slice: Vec<(Box<str>, Box<str>)> =
                labels.iter().map(|(k, v)| (Box::from(k.as_str()), Box::from(v.as_str()))).collect();
            prop_assert_eq!(selector.matches(slice.as_slice()), selector.matches(&labels));
        }

        #[test]
        fn label_display_round_trips(reqs in proptest::collection::vec(ref_req(), 0..5)) {
            let selector = sel(&render(&reqs));
            prop_assert_eq!(sel(&selector.to_string()), selector);
        }

        #[test]
        fn label_parse_never_panics_and_round_trips(s in label_soup()) {
            if let Ok(selector) = LabelSelector::parse(&s) {
                let shown = selector.to_string();
                prop_assert_eq!(LabelSelector::parse(&shown), Ok(selector), "{:?} -> {:?}", s, shown);
            }
        }

        #[test]
        fn parsers_never_panic_on_arbitrary_strings(s in any::<String>()) {
            if let Ok(selector) = LabelSelector::parse(&s) {
                let _ = selector.matches(&BTreeMap::new());
                prop_assert_eq!(LabelSelector::parse(&selector.to_string()), Ok(selector));
            }
            if let Ok(selector) = FieldSelector::parse(&s) {
                let _ = selector.matches(&BTreeMap::new());
                prop_assert_eq!(FieldSelector::parse(&selector.to_string()), Ok(selector));
            }
        }

        #[test]
        fn field_parse_never_panics_and_round_trips(s in field_soup()) {
            if let Ok(selector) = FieldSelector::parse(&s) {
                let shown = selector.to_string();
                prop_assert_eq!(FieldSelector::parse(&shown), Ok(selector), "{:?} -> {:?}", s, shown);
            }
        }

        #[test]
        fn field_matching_agrees_with_reference(
            terms in proptest::collection::vec(ref_term(), 0..5),
            object in proptest::collection::btree_map(
                proptest::sample::select(&["f", "g.h", "spec.nodeName"][..]).prop_map(str::to_owned),
                "[ab,=\\\\! ]{0,3}",
                0..3,
            ),
        ) {
            let text: Vec<String> =
                terms.iter().map(|t| format!("{}{}{}", t.field, t.op, escape_value(&t.value))).collect();
            let text = text.join(",");
            let selector = FieldSelector::parse(&text).map_err(|e| TestCaseError::fail(format!("{text:?}: {e}")))?;
            let expected = terms.iter().all(|t| {
                (object.get(&t.field).map_or("", String::as_str) == t.value) != (t.op == "!=")
            });
            prop_assert_eq!(selector.matches(&object), expected, "{:?}", text);
            for name in ["f", "g.h", "spec.nodeName"] {
                let eq: Vec<&str> = terms
                    .iter()
                    .filter(|t| t.field == name && t.op != "!=")
                    .map(|t| t.value.as_str())
                    .collect();
                match selector.exact(name) {
                    Some(v) => prop_assert!(eq.contains(&v)),
                    None => prop_assert!(eq.is_empty()),
                }
            }
            prop_assert_eq!(FieldSelector::parse(&selector.to_string()), Ok(selector));
        }
    }
}
