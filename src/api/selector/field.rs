//! Field selectors (`pkg/fields`): terms, escaping, parsing and matching.

use std::fmt;

use super::label::write_joined;
use super::{FieldSource, SelectorError};

#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct FieldTerm {
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
pub fn escape_value(s: &str) -> String {
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
pub(super) fn unescape_value(s: &str) -> Result<String, SelectorError> {
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
pub(super) fn split_terms(s: &str) -> Vec<&str> {
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
pub(super) fn split_term(term: &str) -> Option<(&str, bool, &str)> {
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
