//! Validation of label keys and values (apimachinery's validation of qualified names and
//! label values), with the apiserver's texts.

use crate::api::quote::go_quote;
use std::fmt::Write as _;

pub(super) const NAME_FMT: &str = "([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]";
pub(super) const NAME_MSG: &str = "must consist of alphanumeric characters, '-', '_' or '.', \
and must start and end with an alphanumeric character";
pub(super) const NAME_EXAMPLES: &[&str] = &["MyName", "my.name", "123-abc"];
pub(super) const VALUE_FMT: &str = "(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?";
pub(super) const VALUE_MSG: &str = "a valid label must be an empty string or consist of alphanumeric \
characters, '-', '_' or '.', and must start and end with an alphanumeric character";
pub(super) const VALUE_EXAMPLES: &[&str] = &["MyValue", "my_value", "12345"];
pub(super) const SUBDOMAIN_FMT: &str = r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*";
pub(super) const SUBDOMAIN_MSG: &str = "a lowercase RFC 1123 subdomain must consist of lower case \
alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character";
pub(super) const NAME_MAX: usize = 63;
pub(super) const SUBDOMAIN_MAX: usize = 253;

pub(super) fn regex_error(msg: &str, re: &str, examples: &[&str]) -> String {
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

pub(super) fn max_len_error(n: usize) -> String {
    format!("must be no more than {n} bytes")
}

/// `^([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]$`
pub(super) fn is_label_name(s: &str) -> bool {
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
pub(super) fn is_dns_subdomain(s: &str) -> bool {
    let lower_alnum = |c: &u8| c.is_ascii_lowercase() || c.is_ascii_digit();
    s.split('.').all(|part| {
        let b = part.as_bytes();
        match (b.first(), b.last()) {
            (Some(first), Some(last)) => lower_alnum(first) && lower_alnum(last) && b.iter().all(|c| lower_alnum(c) || *c == b'-'),
            _ => false,
        }
    })
}

pub(super) fn subdomain_errors(s: &str) -> Vec<String> {
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
pub(super) fn label_key_errors(key: &str) -> Vec<String> {
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

pub(super) fn label_value_errors(value: &str) -> Vec<String> {
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
pub(super) fn invalid(path: &str, value: &str, detail: &str) -> String {
    format!("{path}: Invalid value: {}: {detail}", go_quote(value))
}
