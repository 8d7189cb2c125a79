//! Go's `%q` of a string (`strconv.Quote`), as the apiserver's messages quote the values
//! they cite (selector and label errors, continue token errors).

use std::fmt::Write as _;

/// Go's `%q` for a string (strconv.Quote).
pub(crate) fn go_quote(s: &str) -> String {
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
pub(crate) fn go_is_print(c: char) -> bool {
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn go_quote_escapes() {
        assert_eq!(go_quote(""), "\"\"");
        assert_eq!(go_quote("a\tb\n\u{7}\u{8}\u{b}\u{c}\r"), "\"a\\tb\\n\\a\\b\\v\\f\\r\"");
        assert_eq!(go_quote("\u{7f}\u{85}\u{200b}日本"), "\"\\x7f\\u0085\\u200b日本\"");
        assert_eq!(go_quote("\u{f0000}"), "\"\\U000f0000\"");
    }
}
