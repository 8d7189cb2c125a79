//! The `Accept` header: its clauses as the apiserver reads and orders them ([`clauses`],
//! what content negotiation uses), and which encoding error bodies take.

use crate::api::wire;

/// Whether error bodies for this request are written in protobuf: its first media range is
/// protobuf (the apiserver answers a Status in the request's negotiated encoding).
pub fn wants_protobuf(headers: &http::HeaderMap) -> bool {
    let accept = headers.get(http::header::ACCEPT).and_then(|v| v.to_str().ok()).unwrap_or("");
    let first = accept.split(',').find(|part| !part.trim().is_empty());
    first.is_some_and(|part| part.split(';').next().unwrap_or("").trim().eq_ignore_ascii_case(wire::PROTOBUF))
}

/// Whether the apiserver would indent its JSON answer to this request (its pretty
/// serializer): the first `pretty` query value when it is not empty, read as Go's
/// `strconv.ParseBool` (anything else is false); without one, a `User-Agent` starting with
/// `curl`, `Wget` or `Mozilla/5.0`; or `pretty=1` on an `Accept` clause (approximated: on
/// any clause, not only the one negotiated). Watch streams are never indented.
pub fn wants_pretty(query: Option<&str>, headers: &http::HeaderMap) -> bool {
    let query = query.unwrap_or("");
    if query.contains("pretty") {
        if let Some((_, v)) = form_urlencoded::parse(query.as_bytes()).find(|(k, _)| k == "pretty") {
            if !v.is_empty() {
                return matches!(&*v, "1" | "t" | "T" | "TRUE" | "true" | "True");
            }
        }
    }
    let agent = headers.get(http::header::USER_AGENT).and_then(|v| v.to_str().ok()).unwrap_or("");
    if agent.starts_with("curl") || agent.starts_with("Wget") || agent.starts_with("Mozilla/5.0") {
        return true;
    }
    let accept = headers.get(http::header::ACCEPT).and_then(|v| v.to_str().ok()).unwrap_or("");
    clauses(accept).iter().any(|c| c.param("pretty") == Some("1"))
}

/// One clause of an `Accept` header as the apiserver reads it (goautoneg): type and
/// subtype as written (compared case-sensitively), `q`, and the other parameters.
#[derive(Debug, Clone, PartialEq)]
pub struct Clause<'a> {
    /// The type (`application`, `*`).
    pub kind: &'a str,
    /// The subtype (`json`, `vnd.kubernetes.protobuf`, `*`).
    pub subtype: &'a str,
    /// `q` (1 when absent, 0 when unparsable).
    pub q: f32,
    /// The other parameters, in order.
    pub params: Vec<(&'a str, &'a str)>,
}

impl Clause<'_> {
    /// The value of parameter `name`.
    pub fn param(&self, name: &str) -> Option<&str> {
        self.params.iter().rev().find(|(k, _)| *k == name).map(|(_, v)| *v)
    }
}

/// The clauses of an `Accept` header in the order the apiserver tries them: parsed as
/// goautoneg parses them (a part without a `/` is dropped unless it is `*`; a parameter
/// without a value is dropped), then sorted by its ordering (higher `q` first, a concrete
/// type or subtype before a wildcard) with the insertion sort Go's `sort.Sort` uses for
/// short slices, so ties keep the client's order.
pub fn clauses(accept: &str) -> Vec<Clause<'_>> {
    fn trim(s: &str) -> &str {
        s.trim_matches(' ')
    }
    let mut out: Vec<Clause<'_>> = Vec::new();
    for part in accept.split(',') {
        let part = trim(part);
        let (range, params) = part.split_once(';').unwrap_or((part, ""));
        let (kind, subtype) = match range.split_once('/') {
            None if trim(range) == "*" => ("*", "*"),
            None => continue,
            Some((_, sub)) if sub.contains('/') => continue,
            Some((t, sub)) => (trim(t), trim(sub)),
        };
        let mut c = Clause { kind, subtype, q: 1.0, params: Vec::new() };
        for p in params.split(';').filter(|p| !p.is_empty()) {
            let Some((k, v)) = p.split_once('=') else { continue };
            if v.is_empty() || v.contains('=') {
                continue;
            }
            match trim(k) {
                "q" => c.q = v.parse().unwrap_or(0.0),
                k => c.params.push((k, trim(v))),
            }
        }
        out.push(c);
    }
    let less = |a: &Clause<'_>, b: &Clause<'_>| a.q > b.q || (a.kind != "*" && b.kind == "*") || (a.subtype != "*" && b.subtype == "*");
    for i in 1..out.len() {
        let mut j = i;
        while j > 0 && less(&out[j], &out[j - 1]) {
            out.swap(j, j - 1);
            j -= 1;
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pretty_is_decided_as_the_apiserver_decides_it() {
        // Every captured pretty-* answer of a real kube-apiserver: indented or not.
        for (name, c) in crate::testdata::captures("pretty-") {
            if name.contains("watch") || name.contains("-pb") {
                continue; // watch streams are never indented; protobuf has no indentation
            }
            let mut headers = http::HeaderMap::new();
            for (k, v) in &c.headers {
                headers.insert(http::HeaderName::from_bytes(k.as_bytes()).unwrap(), v.parse().unwrap());
            }
            let indented = c.body.starts_with(b"{\n");
            assert_eq!(wants_pretty(c.query(), &headers), indented, "{name}");
        }
        let none = http::HeaderMap::new();
        assert!(!wants_pretty(Some("pretty=yes"), &none) && wants_pretty(Some("pretty=T"), &none));
        let mut accept = http::HeaderMap::new();
        accept.insert(http::header::ACCEPT, "application/json;pretty=1".parse().unwrap());
        assert!(wants_pretty(None, &accept));
    }

    #[test]
    fn clauses_are_tried_in_goautonegs_order() {
        let order = |a: &str| clauses(a).iter().map(|c| format!("{}/{}", c.kind, c.subtype)).collect::<Vec<_>>();
        assert_eq!(order("*/*, application/json"), ["application/json", "*/*"]);
        assert_eq!(order("application/json;q=0.5, application/yaml"), ["application/yaml", "application/json"]);
        assert_eq!(order("application/*, application/yaml, text"), ["application/yaml", "application/*"]);
        assert_eq!(order("*"), ["*/*"]);
        assert_eq!(order("a/b/c, x/y"), ["x/y"]);
        let c = &clauses("application/json; as=Table ;g=meta.k8s.io;v=v1;bad;x=1=2")[0];
        assert_eq!((c.param("as"), c.param("g"), c.param("v"), c.params.len()), (Some("Table"), Some("meta.k8s.io"), Some("v1"), 3));
    }

    #[test]
    fn status_encoding_follows_the_first_range() {
        let h = |a: &str| {
            let mut m = http::HeaderMap::new();
            m.insert(http::header::ACCEPT, a.parse().unwrap());
            wants_protobuf(&m)
        };
        assert!(h("application/vnd.kubernetes.protobuf, application/json"));
        assert!(!h("application/json, application/vnd.kubernetes.protobuf"));
        assert!(!h("*/*"));
        assert!(h("Application/Vnd.Kubernetes.Protobuf") && h(" , application/vnd.kubernetes.protobuf;as=Table"));
        assert!(!h("  "));
    }
}
