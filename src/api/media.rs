//! The `Accept` header: its clauses as the apiserver reads and orders them ([`clauses`]),
//! content negotiation ([`negotiate`]: the encoding and view a read is answered in), and
//! which encoding error bodies take; `Accept-Encoding` ([`accepts_gzip`]).

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

/// Whether the client accepts gzip, as the apiserver reads `Accept-Encoding`: one of its
/// comma-separated tokens is exactly `gzip` (parameters such as `;q=` are not parsed).
pub fn accepts_gzip(headers: &http::HeaderMap) -> bool {
    headers.get_all(http::header::ACCEPT_ENCODING).iter().filter_map(|v| v.to_str().ok()).any(|v| v.split(',').any(|t| t.trim() == "gzip"))
}

/// A response encoding kache can write from stored bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, clap::ValueEnum)]
pub enum Format {
    /// `application/json`.
    Json,
    /// `application/vnd.kubernetes.protobuf`.
    Protobuf,
}

/// Which view of the objects a read asks for, from the `as=`, `g=`, `v=` parameters of the
/// `Accept` clause the apiserver picks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum View {
    /// The objects themselves.
    Object,
    /// `PartialObjectMetadata` (`list: false`: GET and WATCH) or `PartialObjectMetadataList`
    /// (LIST), in `meta.k8s.io/v1` or (`beta`) `meta.k8s.io/v1beta1`.
    Metadata { list: bool, beta: bool },
    /// `Table` (JSON only), in `meta.k8s.io/v1` or `v1beta1`.
    Table { beta: bool },
}

impl View {
    /// The `apiVersion` of a metadata or Table view.
    pub fn meta_api_version(beta: bool) -> &'static str {
        if beta {
            "meta.k8s.io/v1beta1"
        } else {
            "meta.k8s.io/v1"
        }
    }
}

/// What an `Accept` header asks for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Negotiated {
    /// An encoding and a view kache writes from stored bytes.
    Serve(Format, View),
    /// Something else the apiserver answers (YAML, a Table in YAML): pass through.
    Other,
    /// Nothing acceptable: the apiserver's 406.
    NotAcceptable,
}

/// The encodings the apiserver offers for a resource, in its order.
#[derive(Clone, Copy, PartialEq)]
enum Offered {
    Json,
    Yaml,
    Protobuf,
}

/// Choose the encoding and view for an `Accept` header, the apiserver's way: clauses in
/// goautoneg's order, each tried against JSON, YAML and protobuf in turn; the first whose
/// parameters the endpoint allows wins (`as=` only for Table, in JSON or YAML, and
/// PartialObjectMetadata(List), in `meta.k8s.io` v1 or v1beta1; `stream=` only `watch`,
/// not for YAML). A missing header means JSON; protobuf objects only for kinds that have it.
pub fn negotiate(accept: Option<&str>, protobuf_ok: bool) -> Negotiated {
    let accept = accept.map(str::trim).unwrap_or("");
    if accept.is_empty() {
        return Negotiated::Serve(Format::Json, View::Object);
    }
    for clause in clauses(accept) {
        for offered in [Offered::Json, Offered::Yaml, Offered::Protobuf] {
            let (kind, subtype) = match offered {
                Offered::Json => ("application", "json"),
                Offered::Yaml => ("application", "yaml"),
                Offered::Protobuf => ("application", "vnd.kubernetes.protobuf"),
            };
            let type_matches =
                clause.kind == "*" && clause.subtype == "*" || clause.kind == kind && (clause.subtype == subtype || clause.subtype == "*");
            if !type_matches {
                continue;
            }
            if let Some(n) = accepted(&clause, offered, protobuf_ok) {
                return n;
            }
        }
    }
    Negotiated::NotAcceptable
}

/// What one clause offered as `offered` gives, or `None` when the endpoint refuses it.
fn accepted(clause: &Clause<'_>, offered: Offered, protobuf_ok: bool) -> Option<Negotiated> {
    if clause.param("stream").is_some_and(|s| offered == Offered::Yaml || s != "watch") {
        return None;
    }
    if clause.param("sv").is_some_and(|v| v != "v1") {
        return None;
    }
    let (kind, group, version) = (clause.param("as"), clause.param("g"), clause.param("v"));
    let format = match offered {
        Offered::Json => Some(Format::Json),
        Offered::Yaml => None,
        Offered::Protobuf => Some(Format::Protobuf),
    };
    if kind.is_none() && group.is_none() && version.is_none() {
        if offered == Offered::Protobuf && !protobuf_ok {
            return None;
        }
        return Some(format.map_or(Negotiated::Other, |f| Negotiated::Serve(f, View::Object)));
    }
    let beta = match (group, version) {
        (Some("meta.k8s.io"), Some("v1")) => false,
        (Some("meta.k8s.io"), Some("v1beta1")) => true,
        _ => return None,
    };
    let view = match kind {
        Some("Table") if offered != Offered::Protobuf => View::Table { beta },
        Some("PartialObjectMetadata") => View::Metadata { list: false, beta },
        Some("PartialObjectMetadataList") => View::Metadata { list: true, beta },
        _ => return None,
    };
    Some(format.map_or(Negotiated::Other, |f| Negotiated::Serve(f, view)))
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

    #[test]
    fn gzip_is_accepted_as_the_apiserver_reads_the_header() {
        let h = |v: &str| {
            let mut m = http::HeaderMap::new();
            m.insert(http::header::ACCEPT_ENCODING, http::HeaderValue::from_str(v).unwrap());
            m
        };
        assert!(accepts_gzip(&h("gzip")));
        assert!(accepts_gzip(&h("deflate, gzip")));
        assert!(!accepts_gzip(&h("gzip;q=1.0")), "the apiserver does not parse parameters");
        assert!(!accepts_gzip(&h("br")));
        assert!(!accepts_gzip(&http::HeaderMap::new()));
    }

    #[test]
    fn accept_negotiation_matches_client_behaviour() {
        use Format::{Json, Protobuf};
        use Negotiated::*;
        let object = |f| Serve(f, View::Object);
        assert_eq!(negotiate(None, true), object(Json));
        assert_eq!(negotiate(Some(" "), true), object(Json));
        assert_eq!(negotiate(Some("application/vnd.kubernetes.protobuf,application/json"), true), object(Protobuf));
        assert_eq!(negotiate(Some("application/vnd.kubernetes.protobuf,application/json"), false), object(Json));
        assert_eq!(negotiate(Some("application/vnd.kubernetes.protobuf;stream=watch"), true), object(Protobuf));
        assert_eq!(negotiate(Some("application/vnd.kubernetes.protobuf, */*"), true), object(Protobuf));
        assert_eq!(negotiate(Some("text/html"), true), NotAcceptable);
        assert_eq!(negotiate(Some("application/yaml"), true), Other);
        assert_eq!(negotiate(Some("application/yaml;stream=watch, application/json"), true), object(Json));
        // kubectl get's default, and -o yaml's Table request.
        let table = Serve(Json, View::Table { beta: false });
        assert_eq!(
            negotiate(
                Some("application/json;as=Table;v=v1;g=meta.k8s.io,application/json;as=Table;v=v1beta1;g=meta.k8s.io,application/json"),
                true
            ),
            table
        );
        assert_eq!(negotiate(Some("application/json;as=Table;v=v1beta1;g=meta.k8s.io"), true), Serve(Json, View::Table { beta: true }));
        // A protobuf Table is refused and the next clause taken (406 when there is none).
        assert_eq!(negotiate(Some("application/vnd.kubernetes.protobuf;as=Table;v=v1;g=meta.k8s.io"), true), NotAcceptable);
        assert_eq!(
            negotiate(Some("application/vnd.kubernetes.protobuf;as=Table;v=v1;g=meta.k8s.io, application/json"), true),
            object(Json)
        );
        // client-go's metadata client.
        let meta = |f, list| Serve(f, View::Metadata { list, beta: false });
        let metadata_list = "application/vnd.kubernetes.protobuf;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1,application/json;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1,application/json";
        assert_eq!(negotiate(Some(metadata_list), true), meta(Protobuf, true));
        assert_eq!(negotiate(Some(metadata_list), false), meta(Protobuf, true), "metadata is protobuf for every kind");
        assert_eq!(negotiate(Some("application/json;as=PartialObjectMetadata;g=meta.k8s.io;v=v1"), true), meta(Json, false));
        assert_eq!(negotiate(Some("application/json;as=PartialObjectMetadata;v=v1"), true), NotAcceptable, "no group");
        assert_eq!(negotiate(Some("application/json;as=Pod;g=meta.k8s.io;v=v1, application/json"), true), object(Json));
        assert_eq!(negotiate(Some("application/json;q=0.1, application/vnd.kubernetes.protobuf"), true), object(Protobuf));
    }
}
