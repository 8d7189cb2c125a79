//! Parsing and validation of GET/LIST/WATCH options (the query string), with the
//! apiserver's error messages. Nothing here touches cache state.

use crate::api::selector::{FieldSelector, LabelSelector};
use crate::api::status::Status;
use crate::api::token::Continue;

/// `resourceVersionMatch`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Match {
    /// `NotOlderThan`.
    NotOlderThan,
    /// `Exact`.
    Exact,
}

/// LIST and WATCH options.
#[derive(Debug, Clone, Default)]
pub struct Options {
    /// `watch=true` (or `watch=1`).
    pub watch: bool,
    /// `resourceVersion`; `None` when unset or empty.
    pub rv: Option<u64>,
    /// `resourceVersionMatch`.
    pub rv_match: Option<Match>,
    /// `limit` (0 = none).
    pub limit: u64,
    /// `continue`.
    pub cont: Option<Continue>,
    /// `labelSelector`.
    pub labels: LabelSelector,
    /// `fieldSelector`.
    pub fields: FieldSelector,
    /// `allowWatchBookmarks`.
    pub bookmarks: bool,
    /// `sendInitialEvents`.
    pub send_initial_events: Option<bool>,
    /// `timeoutSeconds`, as sent (any int64; see [`Options::watch_timeout`]).
    pub timeout_seconds: Option<i64>,
    /// `includeObject` (Table rows), as given.
    pub include_object: Option<String>,
}

/// How a LIST picks its snapshot, from the resourceVersion parameters.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ListMode {
    /// RV unset: most recent, consistent.
    Consistent,
    /// RV=0: any state, at once; `limit` ignored.
    Any,
    /// Not older than this RV.
    NotOlderThan(u64),
    /// Exactly this RV.
    Exact(u64),
    /// Continue from a token.
    Continue,
}

/// A boolean query parameter's value, as the apiserver converts it: `0` and `false` (any
/// case) are false, anything else (empty included) is true (apimachinery's
/// `Convert_Slice_string_To_bool`; `watch=yes` and `allowWatchBookmarks=maybe` are true).
pub(crate) fn boolean(v: &str) -> bool {
    !(v == "0" || v.eq_ignore_ascii_case("false"))
}

/// Whether a raw query string asks for a watch (its first `watch` value true), for labelling
/// a request before its options are parsed.
pub fn watch_requested(query: Option<&str>) -> bool {
    flag(query, "watch")
}

/// Whether a request is a watch: `watch=true`, or a path under the legacy `watch/` prefix
/// (`/api/v1/watch/pods`), which the apiserver still serves.
pub fn is_watch(path: &str, query: Option<&str>) -> bool {
    watch_requested(query) || watch_path(path)
}

/// Whether a path is under the legacy `watch/` prefix (`/api/v1/watch/pods`).
pub fn watch_path(path: &str) -> bool {
    after_version(path) == Some("watch")
}

/// The path segment after the API version (`watch` in `/apis/apps/v1/watch/deployments`).
fn after_version(path: &str) -> Option<&str> {
    let mut segs = path.trim_start_matches('/').split('/');
    match segs.next() {
        Some("api") => segs.nth(1),
        Some("apis") => segs.nth(2),
        _ => None,
    }
}

/// Whether a watch asks for its initial events (`sendInitialEvents=true`: a WatchList).
pub fn initial_events_requested(query: Option<&str>) -> bool {
    flag(query, "sendInitialEvents")
}

/// Whether the first `key` of `query` is true, as the apiserver reads a boolean parameter.
fn flag(query: Option<&str>, key: &str) -> bool {
    form_urlencoded::parse(query.unwrap_or("").as_bytes()).find(|(k, _)| k == key).is_some_and(|(_, v)| boolean(&v))
}

/// The apiserver's check of the `timeout` query parameter (its request-deadline filter, ahead
/// of authentication): on a request that is not long-running, a first `timeout` value that
/// is not a Go duration is a 400. A valid one only shortens the apiserver's own deadline,
/// which kache's answers from memory do not come near.
pub fn check_request_timeout(method: &http::Method, path: &str, query: Option<&str>) -> Result<(), Status> {
    let Some(q) = query.filter(|q| q.contains("timeout")) else { return Ok(()) };
    let Some((_, v)) = form_urlencoded::parse(q.as_bytes()).find(|(k, _)| k == "timeout") else { return Ok(()) };
    if v.is_empty() || long_running(method, path, query) {
        return Ok(());
    }
    match crate::api::time::go_duration(&v) {
        Ok(_) => Ok(()),
        Err(e) => Err(Status::bad_request(format!("invalid timeout specified in the request URL - {e}"))),
    }
}

/// Whether the apiserver treats a request as long-running (no request deadline): a watch
/// (`watch=true`, or under a `watch/` prefix), a proxy, or the attach, exec, log,
/// port-forward and proxy subresources.
fn long_running(method: &http::Method, path: &str, query: Option<&str>) -> bool {
    use crate::api::route::{classify, Target};
    if matches!(after_version(path), Some("watch" | "proxy")) {
        return true;
    }
    match classify(path) {
        Some(Target::Resource(p)) => {
            let collection = p.name.is_none() && matches!(*method, http::Method::GET | http::Method::HEAD);
            (collection && watch_requested(query))
                || p.subresource.as_deref().is_some_and(|s| matches!(s, "attach" | "exec" | "log" | "portforward" | "proxy"))
        }
        _ => false,
    }
}

/// Go's `strconv.ParseInt(v, 10, 64)`, with its error text.
fn parse_int(v: &str) -> Result<i64, Status> {
    let digits = v.strip_prefix(['+', '-']).unwrap_or(v);
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return Err(Status::bad_request(format!("strconv.ParseInt: parsing {}: invalid syntax", go_quote(v))));
    }
    v.parse().map_err(|_| Status::bad_request(format!("strconv.ParseInt: parsing {}: value out of range", go_quote(v))))
}

/// A resourceVersion as the storage layer parses it (Go's `strconv.ParseUint`), with the
/// apiserver's 400.
fn parse_rv(v: &str) -> Result<u64, Status> {
    let err = |why: &str| {
        let q = go_quote(v);
        Status::bad_request(format!("invalid resource version: resourceVersion: Invalid value: {q}: strconv.ParseUint: parsing {q}: {why}"))
    };
    if !v.bytes().all(|b| b.is_ascii_digit()) {
        return Err(err("invalid syntax"));
    }
    v.parse().map_err(|_| err("value out of range"))
}

/// Go's `%q` of a string (`strconv.Quote`) for the ASCII and printable text query values hold.
pub(crate) fn go_quote(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 2);
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\u{7}' => out.push_str("\\a"),
            '\u{8}' => out.push_str("\\b"),
            '\u{c}' => out.push_str("\\f"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            '\u{b}' => out.push_str("\\v"),
            c if (c as u32) < 0x20 || c == '\u{7f}' => out.push_str(&format!("\\x{:02x}", c as u32)),
            c if c.is_control() || c == '\u{a0}' || c == '\u{ad}' => out.push_str(&format!("\\u{:04x}", c as u32)),
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

/// One field error of `ListOptions` validation (a cause of the 422).
struct FieldError {
    reason: &'static str,
    field: &'static str,
    /// The error's text after `field: `.
    detail: String,
}

fn forbidden(field: &'static str, why: &str) -> FieldError {
    FieldError { reason: "FieldValueForbidden", field, detail: format!("Forbidden: {why}") }
}

fn not_supported(field: &'static str, value: &str, supported: &[&str]) -> FieldError {
    let list: Vec<String> = supported.iter().map(|s| go_quote(s)).collect();
    FieldError {
        reason: "FieldValueNotSupported",
        field,
        detail: format!("Unsupported value: {}: supported values: {}", go_quote(value), list.join(", ")),
    }
}

/// The apiserver's 422 for invalid `ListOptions` (one error, or several in brackets).
fn invalid_list_options(errs: Vec<FieldError>) -> Status {
    let texts: Vec<String> = errs.iter().map(|e| format!("{}: {}", e.field, e.detail)).collect();
    let joined = if texts.len() == 1 { texts[0].clone() } else { format!("[{}]", texts.join(", ")) };
    let mut s = Status::invalid("ListOptions.meta.k8s.io", "", &joined);
    s.details = Some(Box::new(crate::api::status::Details {
        group: "meta.k8s.io".into(),
        kind: "ListOptions".into(),
        causes: errs
            .into_iter()
            .map(|e| crate::api::status::Cause { reason: e.reason.into(), message: e.detail, field: e.field.into() })
            .collect(),
        ..Default::default()
    }));
    s
}

impl Options {
    /// Parse a raw (percent-encoded) query string the apiserver's way: the first value of
    /// each parameter, converted in `ListOptions`' field order (400 on a conversion error),
    /// then validated (422 Invalid), then what the storage layer checks (the
    /// resourceVersion's syntax, the continue token: 400).
    pub fn parse(query: Option<&str>) -> Result<Options, Status> {
        let mut first: std::collections::HashMap<std::borrow::Cow<'_, str>, std::borrow::Cow<'_, str>> = Default::default();
        for (k, v) in form_urlencoded::parse(query.unwrap_or("").as_bytes()) {
            first.entry(k).or_insert(v);
        }
        let get = |k: &str| first.get(k).map(|v| &**v);
        let mut o = Options::default();
        if let Some(v) = get("labelSelector") {
            o.labels = LabelSelector::parse(v).map_err(|e| Status::bad_request(e.to_string()))?;
        }
        if let Some(v) = get("fieldSelector") {
            o.fields = FieldSelector::parse(v).map_err(|e| Status::bad_request(e.to_string()))?;
        }
        o.watch = get("watch").is_some_and(boolean);
        o.bookmarks = get("allowWatchBookmarks").is_some_and(boolean);
        let rv = get("resourceVersion").unwrap_or("");
        let rv_match = get("resourceVersionMatch").unwrap_or("");
        if let Some(v) = get("timeoutSeconds") {
            o.timeout_seconds = Some(parse_int(v)?);
        }
        if let Some(v) = get("limit") {
            // Zero and negative limits mean no limit (the apiserver pages only when limit > 0).
            o.limit = u64::try_from(parse_int(v)?).unwrap_or(0);
        }
        let cont = get("continue").unwrap_or("");
        o.send_initial_events = get("sendInitialEvents").map(boolean);
        o.include_object = get("includeObject").map(str::to_string);
        let errs = o.validate(rv, rv_match, cont);
        if !errs.is_empty() {
            return Err(invalid_list_options(errs));
        }
        o.rv_match = match rv_match {
            "NotOlderThan" => Some(Match::NotOlderThan),
            "Exact" => Some(Match::Exact),
            _ => None,
        };
        if !rv.is_empty() {
            o.rv = Some(parse_rv(rv)?);
        }
        if !cont.is_empty() {
            o.cont = Some(Continue::decode(cont).map_err(|e| Status::bad_request(e.to_string()))?);
            if o.rv.is_some_and(|rv| rv != 0) {
                return Err(Status::bad_request("specifying resource version is not allowed when using continue"));
            }
            // RV=0 with a continue token is the token's snapshot, as in the apiserver.
            o.rv = None;
        }
        Ok(o)
    }

    /// The apiserver's `ListOptions` validation (apimachinery's ValidateListOptions), in its
    /// order.
    fn validate(&self, rv: &str, rv_match: &str, cont: &str) -> Vec<FieldError> {
        const MATCH: &str = "resourceVersionMatch";
        let mut errs = Vec::new();
        if self.watch {
            if self.send_initial_events.is_some() && rv_match != "NotOlderThan" {
                errs.push(forbidden(MATCH, "sendInitialEvents requires setting resourceVersionMatch to NotOlderThan"));
            }
            if !rv_match.is_empty() {
                if self.send_initial_events.is_none() {
                    errs.push(forbidden(MATCH, "resourceVersionMatch is forbidden for watch unless sendInitialEvents is provided"));
                }
                if rv_match != "NotOlderThan" {
                    errs.push(not_supported(MATCH, rv_match, &["NotOlderThan"]));
                }
                if !cont.is_empty() {
                    errs.push(forbidden(MATCH, "resourceVersionMatch is forbidden when continue is provided"));
                }
            }
            return errs;
        }
        if !rv_match.is_empty() {
            if rv.is_empty() {
                errs.push(forbidden(MATCH, "resourceVersionMatch is forbidden unless resourceVersion is provided"));
            }
            if !cont.is_empty() {
                errs.push(forbidden(MATCH, "resourceVersionMatch is forbidden when continue is provided"));
            }
            if rv_match != "Exact" && rv_match != "NotOlderThan" {
                errs.push(not_supported(MATCH, rv_match, &["Exact", "NotOlderThan", ""]));
            }
            if rv_match == "Exact" && rv == "0" {
                errs.push(forbidden(MATCH, "resourceVersionMatch \"exact\" is forbidden for resourceVersion \"0\""));
            }
        }
        if self.send_initial_events.is_some() {
            errs.push(forbidden("sendInitialEvents", "sendInitialEvents is forbidden for list"));
        }
        errs
    }

    /// How a LIST with these options picks its snapshot.
    pub fn list_mode(&self) -> ListMode {
        if self.cont.is_some() {
            return ListMode::Continue;
        }
        match (self.rv, self.rv_match) {
            (None, _) => ListMode::Consistent,
            (Some(0), _) => ListMode::Any,
            (Some(n), Some(Match::Exact)) => ListMode::Exact(n),
            (Some(n), Some(Match::NotOlderThan)) => ListMode::NotOlderThan(n),
            // Legacy semantics: an RV with a limit means exact, without one not-older-than.
            (Some(n), None) if self.limit > 0 => ListMode::Exact(n),
            (Some(n), None) => ListMode::NotOlderThan(n),
        }
    }

    /// How long a watch with these options lasts, as the apiserver computes it: Go's
    /// `time.Duration(timeoutSeconds) * time.Second`, which wraps around on overflow, so
    /// `9223372036854775807` is -1 s. `None` when no timeout was given or it comes to zero
    /// (the apiserver then picks its default); `Some(ZERO)` when it is negative: the
    /// apiserver's watch ends at once (its context's deadline has passed).
    pub fn watch_timeout(&self) -> Option<std::time::Duration> {
        let nanos = self.timeout_seconds?.wrapping_mul(1_000_000_000);
        match nanos {
            0 => None,
            n if n < 0 => Some(std::time::Duration::ZERO),
            n => Some(std::time::Duration::from_nanos(n.unsigned_abs())),
        }
    }

    /// Whether a label or field selector filters the result.
    pub fn filtered(&self) -> bool {
        !self.labels.is_empty() || !self.fields.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn list_modes_follow_the_contract_table() {
        let m = |q: &str| Options::parse(Some(q)).unwrap().list_mode();
        assert_eq!(m(""), ListMode::Consistent);
        assert_eq!(m("resourceVersion=0&limit=2"), ListMode::Any);
        assert_eq!(m("resourceVersion=5"), ListMode::NotOlderThan(5));
        assert_eq!(m("resourceVersion=5&limit=2"), ListMode::Exact(5));
        assert_eq!(m("resourceVersion=5&resourceVersionMatch=NotOlderThan&limit=2"), ListMode::NotOlderThan(5));
        assert_eq!(m("resourceVersion=5&resourceVersionMatch=Exact"), ListMode::Exact(5));
    }

    #[test]
    fn bad_options_get_the_apiservers_status_byte_for_byte() {
        // Every captured answer of a real kube-apiserver to a query kache judges itself.
        let all = crate::testdata::captures("q-");
        assert!(all.len() >= 20, "the q-* captures are there");
        for (name, c) in all {
            let parsed = Options::parse(c.query());
            if c.code == 200 {
                // The apiserver started a watch (the lenient booleans).
                assert!(c.text().starts_with("{\"type\":\"ADDED\""), "{name}: a watch");
                let o = parsed.unwrap_or_else(|e| panic!("{name}: {e:?}"));
                assert!(o.watch, "{name}: a watch");
                continue;
            }
            let status = parsed.err().unwrap_or_else(|| panic!("{name}: the apiserver answered {}", c.code));
            assert_eq!(status.code, c.code, "{name}");
            assert_eq!(c.content_type, "application/json", "{name}");
            assert_eq!(String::from_utf8(status.encode(false)).unwrap(), c.text(), "{name}");
        }
    }

    #[test]
    fn watch_timeouts_wrap_as_go_multiplies() {
        let t = |q: &str| Options::parse(Some(q)).unwrap().watch_timeout();
        assert_eq!(t("watch=1"), None);
        assert_eq!(t("watch=1&timeoutSeconds=0"), None, "zero: the apiserver's default");
        assert_eq!(t("watch=1&timeoutSeconds=30"), Some(std::time::Duration::from_secs(30)));
        assert_eq!(t("watch=1&timeoutSeconds=-30"), Some(std::time::Duration::ZERO), "negative: ends at once");
        assert_eq!(t("watch=1&timeoutSeconds=9223372036854775807"), Some(std::time::Duration::ZERO), "-1 s");
        // 2^64 / 10^9 rounded up, times 10^9, wraps past zero to 290,448,384 ns.
        assert_eq!(t("watch=1&timeoutSeconds=18446744074"), Some(std::time::Duration::from_nanos(290_448_384)));
        assert_eq!(Options::parse(Some("timeoutSeconds=9223372036854775808")).unwrap_err().code, 400, "out of int64's range");
    }

    #[test]
    fn a_malformed_timeout_parameter_is_refused_unless_the_request_is_long_running() {
        use http::Method;
        let check = |m: &Method, path: &str, q: &str| check_request_timeout(m, path, Some(q)).map_err(|s| s.message);
        assert_eq!(check(&Method::GET, "/api/v1/pods", "timeout=32s"), Ok(()));
        assert_eq!(check(&Method::GET, "/api/v1/pods", "timeout="), Ok(()), "empty is no timeout");
        assert_eq!(check(&Method::GET, "/api", "timeout=-5m"), Ok(()), "valid, however odd");
        let bad = "invalid timeout specified in the request URL - time: missing unit in duration \"30\"";
        assert_eq!(check(&Method::GET, "/api/v1/pods", "timeout=30"), Err(bad.to_string()));
        assert_eq!(check(&Method::GET, "/api/v1/namespaces/a/pods/p", "timeout=30&timeout=1s"), Err(bad.to_string()), "the first value");
        assert_eq!(check(&Method::POST, "/api/v1/namespaces/a/configmaps", "timeout=30"), Err(bad.to_string()));
        assert_eq!(
            check(&Method::GET, "/version", "timeout=9999999999h"),
            Err("invalid timeout specified in the request URL - time: invalid duration \"9999999999h\"".to_string())
        );
        // Long-running requests are not given a deadline, so not checked.
        for (path, q) in [
            ("/api/v1/pods", "watch=1&timeout=30"),
            ("/api/v1/watch/pods", "timeout=30"),
            ("/apis/apps/v1/watch/namespaces/a/deployments", "timeout=30"),
            ("/api/v1/namespaces/a/pods/p/exec", "timeout=30"),
            ("/api/v1/namespaces/a/pods/p/log", "timeout=30"),
            ("/api/v1/namespaces/a/pods/p/portforward", "timeout=30"),
            ("/api/v1/namespaces/a/services/s/proxy", "timeout=30"),
        ] {
            assert_eq!(check(&Method::GET, path, q), Ok(()), "{path}?{q}");
        }
        assert!(check(&Method::GET, "/api/v1/namespaces/a/pods/p", "watch=1&timeout=30").is_err(), "a named GET is no watch");
    }

    #[test]
    fn booleans_are_read_leniently_and_only_the_first_value_counts() {
        let o = Options::parse(Some("watch=yes&allowWatchBookmarks=maybe")).unwrap();
        assert!(o.watch && o.bookmarks);
        let o = Options::parse(Some("watch=FALSE&allowWatchBookmarks=0&watch=1")).unwrap();
        assert!(!o.watch && !o.bookmarks);
        assert!(Options::parse(Some("watch")).unwrap().watch, "present without a value is true");
        assert!(!Options::parse(Some("")).unwrap().watch);
        assert!(watch_requested(Some("watch=no")) && !watch_requested(Some("watch=False&watch=1")));
        assert_eq!(Options::parse(Some("limit=-1")).unwrap().limit, 0, "a negative limit is no limit");
        assert_eq!(Options::parse(Some("limit=5&limit=abc")).unwrap().limit, 5);
        let c = "eyJ2IjoibWV0YS5rOHMuaW8vdjEiLCJydiI6MSwic3RhcnQiOiIvY20xXHUwMDAwIn0";
        assert_eq!(Options::parse(Some(&format!("continue={c}&resourceVersion=0"))).unwrap().list_mode(), ListMode::Continue);
    }

    #[test]
    fn a_watch_is_asked_by_the_query_or_by_the_legacy_path() {
        assert!(is_watch("/api/v1/pods", Some("watch=1")));
        assert!(is_watch("/api/v1/watch/namespaces/a/pods/p", None));
        assert!(is_watch("/apis/apps/v1/watch/deployments", Some("watch=0")));
        assert!(!is_watch("/api/v1/pods", Some("watch=false")));
        assert!(!is_watch("/api/v1/namespaces/watch/pods", None), "a namespace called watch");
        assert!(!is_watch("/apis/watch/v1/things", None), "a group called watch");
    }
}
