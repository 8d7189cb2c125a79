//! Continue tokens in the apiserver's format: unpadded base64url of
//! `{"v":"meta.k8s.io/v1","rv":N,"start":"/<key>\u0000"}`, `start` relative to the collection
//! (so a client can fail over between kache and the apiserver in the middle of a LIST).

use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine;
use serde::Serialize;

mod gojson;

/// A decoded continue token.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Continue {
    /// RV of the snapshot the list is consistent at; -1 means "continue inconsistently".
    pub rv: i64,
    /// The last key returned, relative to the collection (no leading `/`).
    pub after: String,
    /// Whether the page starts at `after` itself rather than after it: the apiserver reads a
    /// token's start key as the first key of the page, and writes the last key returned with
    /// a NUL appended; a start key without it (made by hand) names a key to start at.
    pub inclusive: bool,
}

/// The token's JSON; a missing member is its zero value, as in Go.
#[derive(Serialize, Default)]
struct Wire {
    v: String,
    rv: i64,
    start: String,
}

/// Why a continue token was refused (the message is the apiserver's, after `invalid continue token: `).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid continue token: {0}")]
pub struct BadToken(pub String);

impl Continue {
    /// Encode: `start` is `/` + the last key + NUL, as the apiserver writes it.
    pub fn encode(&self) -> String {
        self.encode_start(format!("/{}{}", self.after, self.nul()))
    }

    fn nul(&self) -> &'static str {
        if self.inclusive {
            ""
        } else {
            "\u{0}"
        }
    }

    /// Encode with `start` written without the leading `/` (the form the apiserver puts in the
    /// token of an expired-continue 410).
    pub fn encode_bare(&self) -> String {
        self.encode_start(format!("{}{}", self.after, self.nul()))
    }

    fn encode_start(&self, start: String) -> String {
        let w = Wire { v: "meta.k8s.io/v1".into(), rv: self.rv, start };
        URL_SAFE_NO_PAD.encode(crate::api::json::to_vec(&w))
    }

    /// Decode a token a client sent, with the apiserver's messages (storage's
    /// DecodeContinue): base64 without padding whose trailing bits need not be zero, as Go's
    /// decoder reads it, then JSON.
    pub fn decode(token: &str) -> Result<Continue, BadToken> {
        let raw = LENIENT
            .decode(token.as_bytes())
            .map_err(|_| BadToken(format!("continue key is not valid: illegal base64 data at input byte {}", illegal_byte(token))))?;
        let w = gojson::token(&raw).map_err(|e| BadToken(format!("continue key is not valid: {e}")))?;
        if w.v != "meta.k8s.io/v1" {
            return Err(BadToken(format!("continue key is not valid: server does not recognize this encoded version {}", w.v)));
        }
        if w.rv == 0 {
            return Err(BadToken("continue key is not valid: incorrect encoded start resourceVersion (version meta.k8s.io/v1)".into()));
        }
        if w.start.is_empty() {
            return Err(BadToken("continue key is not valid: encoded start key empty (version meta.k8s.io/v1)".into()));
        }
        // The apiserver roots the start key (`/` + it, unless it has one) and refuses it
        // unless Go's `path.Clean` leaves it as it is: no empty, `.` or `..` segment, no
        // trailing `/` (`/` alone is the collection's start).
        let start = w.start.strip_prefix('/').unwrap_or(&w.start);
        if !start.is_empty() && start.split('/').any(|seg| seg.is_empty() || seg == ".." || seg == ".") {
            return Err(BadToken(format!("continue key is not valid: {}", w.start)));
        }
        let (after, inclusive) = match start.strip_suffix('\u{0}') {
            Some(after) => (after, false),
            None => (start, true),
        };
        // Any negative RV reads as the storage's latest state, as -1 does.
        Ok(Continue { rv: w.rv.max(-1), after: after.to_string(), inclusive })
    }
}

/// Unpadded base64url that, like Go's `RawURLEncoding`, ignores non-zero trailing bits.
const LENIENT: base64::engine::GeneralPurpose = base64::engine::GeneralPurpose::new(
    &base64::alphabet::URL_SAFE,
    base64::engine::GeneralPurposeConfig::new()
        .with_decode_allow_trailing_bits(true)
        .with_decode_padding_mode(base64::engine::DecodePaddingMode::RequireNone),
);

/// Where Go's base64 decoder reports corrupt input: the first byte outside the alphabet, or
/// the start of a trailing partial quantum of one byte.
fn illegal_byte(s: &str) -> usize {
    let ok = |c: u8| c.is_ascii_alphanumeric() || c == b'-' || c == b'_';
    match s.bytes().position(|c| !ok(c)) {
        Some(i) => i,
        None => s.len() / 4 * 4,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn golden_tokens_decode_and_reencode_identically() {
        let page1 = "eyJ2IjoibWV0YS5rOHMuaW8vdjEiLCJydiI6NjE1MDksInN0YXJ0IjoiL3dlYi0xXHUwMDAwIn0";
        let c = Continue::decode(page1).unwrap();
        assert_eq!(c, Continue { rv: 61509, after: "web-1".into(), inclusive: false });
        assert_eq!(c.encode(), page1);
        let expired = "eyJ2IjoibWV0YS5rOHMuaW8vdjEiLCJydiI6LTEsInN0YXJ0Ijoid2ViLTFcdTAwMDAifQ";
        assert_eq!(Continue { rv: -1, after: "web-1".into(), inclusive: false }.encode_bare(), expired);
    }

    #[test]
    fn garbage_gets_the_apiservers_message() {
        assert_eq!(
            Continue::decode("garbage-token").unwrap_err().to_string(),
            "invalid continue token: continue key is not valid: illegal base64 data at input byte 12"
        );
        let e = |t: &str| Continue::decode(t).unwrap_err().to_string();
        // Captured from kube-apiserver v1.36.2 (testdata/fidelity/q-continue-*).
        assert_eq!(
            e("garbage"),
            "invalid continue token: continue key is not valid: invalid character '\\u0081' looking for beginning of value"
        );
        assert_eq!(e("a!b"), "invalid continue token: continue key is not valid: illegal base64 data at input byte 1");
        assert_eq!(e("e30"), "invalid continue token: continue key is not valid: server does not recognize this encoded version ");
        assert!(Continue::decode("").is_err());
        // "no" is not JSON: Go's scanner names the byte and the literal it expected.
        assert_eq!(e("bm8"), "invalid continue token: continue key is not valid: invalid character 'o' in literal null (expecting 'u')");
    }

    #[test]
    fn tokens_go_reads_are_read() {
        let token = |json: &str| URL_SAFE_NO_PAD.encode(json);
        // A negative RV is the storage's latest state, whatever its value.
        let c = Continue::decode(&token(r#"{"v":"meta.k8s.io/v1","rv":-2,"start":"a\u0000"}"#)).unwrap();
        assert_eq!(c, Continue { rv: -1, after: "a".into(), inclusive: false });
        // Members repeated: the last one counts, as in Go.
        let c = Continue::decode(&token(r#"{"v":"meta.k8s.io/v1","rv":3,"start":"a\u0000","start":"b\u0000"}"#)).unwrap();
        assert_eq!(c, Continue { rv: 3, after: "b".into(), inclusive: false });
        let e = Continue::decode(&token(r#"{"v":"meta.k8s.io/v1","rv":"3","start":"a"}"#)).unwrap_err().to_string();
        assert_eq!(
            e,
            "invalid continue token: continue key is not valid: json: cannot unmarshal string into Go struct field continueToken.rv of type int64"
        );
    }

    #[test]
    fn start_keys_path_clean_would_change_are_refused_as_the_apiserver_does() {
        let token =
            |start: &str| URL_SAFE_NO_PAD.encode(format!(r#"{{"v":"meta.k8s.io/v1","rv":7,"start":{}}}"#, serde_json::json!(start)));
        // Found by the authorization differential (tests/it/real_authz.rs): `/authz-b/` was
        // taken as `authz-b` where the apiserver answers 400.
        for bad in ["/authz-b/", "authz-b/", "a//b\u{0}", "../b", "/a/./b", "/a/../b\u{0}", "//"] {
            let e = Continue::decode(&token(bad)).unwrap_err().to_string();
            assert_eq!(e, format!("invalid continue token: continue key is not valid: {bad}"), "{bad:?}");
        }
        let cases = [
            ("/web-1\u{0}", "web-1", false),
            ("ns/web-1\u{0}", "ns/web-1", false),
            ("\u{0}", "", false),
            ("a/..\u{0}", "a/..", false),
            ("/", "", true),
            ("a/b\u{0}/c", "a/b\u{0}/c", true),
            ("cm-1", "cm-1", true),
        ];
        for (good, after, inclusive) in cases {
            let c = Continue::decode(&token(good)).unwrap_or_else(|e| panic!("{good:?}: {e}"));
            assert_eq!((c.after.as_str(), c.inclusive), (after, inclusive), "{good:?}");
        }
        // A start key to start at is written back as it came.
        let at = Continue { rv: 7, after: "cm-1".into(), inclusive: true };
        assert_eq!(Continue::decode(&at.encode()), Ok(at));
    }
}
