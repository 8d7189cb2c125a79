//! Parsing and validation of GET/LIST/WATCH options (the query string) and of the `Accept`
//! header, with the apiserver's error messages. Nothing here touches cache state.

use crate::api::media;
use crate::api::selector::{FieldSelector, LabelSelector};
use crate::api::status::Status;
use crate::cache::token::Continue;

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
    /// `timeoutSeconds`.
    pub timeout_seconds: Option<u64>,
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

/// A boolean query parameter's value, spelled as Go's `strconv.ParseBool` accepts (and
/// empty as false); `None` for anything else.
pub(crate) fn boolean(v: &str) -> Option<bool> {
    match v {
        "true" | "1" | "True" | "TRUE" | "t" | "T" => Some(true),
        "false" | "0" | "False" | "FALSE" | "f" | "F" | "" => Some(false),
        _ => None,
    }
}

/// Whether a raw query string asks for a watch (`watch` spelled as a true boolean), for
/// labelling a request before its options are parsed.
pub fn watch_requested(query: Option<&str>) -> bool {
    form_urlencoded::parse(query.unwrap_or("").as_bytes()).any(|(k, v)| k == "watch" && boolean(&v) == Some(true))
}

fn parse_bool(name: &str, v: &str) -> Result<bool, Status> {
    boolean(v).ok_or_else(|| Status::bad_request(format!("invalid value for {name}: {v:?}: must be true or false")))
}

fn parse_u64(name: &str, v: &str) -> Result<u64, Status> {
    v.parse().map_err(|_| Status::bad_request(format!("invalid value for {name}: {v:?}: must be a non-negative integer")))
}

impl Options {
    /// Parse a raw (percent-encoded) query string.
    pub fn parse(query: Option<&str>) -> Result<Options, Status> {
        let mut o = Options::default();
        for (k, v) in form_urlencoded::parse(query.unwrap_or("").as_bytes()) {
            match &*k {
                "watch" => o.watch = parse_bool("watch", &v)?,
                "resourceVersion" if v.is_empty() => o.rv = None,
                "resourceVersion" => o.rv = Some(v.parse().map_err(|_| Status::bad_request(format!("invalid resource version: {v:?}")))?),
                "resourceVersionMatch" => {
                    o.rv_match = match &*v {
                        "" => None,
                        "NotOlderThan" => Some(Match::NotOlderThan),
                        "Exact" => Some(Match::Exact),
                        other => {
                            return Err(Status::bad_request(format!(
                                "resourceVersionMatch: Unsupported value: \"{other}\": supported values: \"Exact\", \"NotOlderThan\""
                            )))
                        }
                    }
                }
                "limit" => o.limit = parse_u64("limit", &v)?,
                "continue" if v.is_empty() => {}
                "continue" => o.cont = Some(Continue::decode(&v).map_err(|e| Status::bad_request(e.to_string()))?),
                "labelSelector" => o.labels = LabelSelector::parse(&v).map_err(|e| Status::bad_request(e.to_string()))?,
                "fieldSelector" => o.fields = FieldSelector::parse(&v).map_err(|e| Status::bad_request(e.to_string()))?,
                "allowWatchBookmarks" => o.bookmarks = parse_bool("allowWatchBookmarks", &v)?,
                "sendInitialEvents" => o.send_initial_events = Some(parse_bool("sendInitialEvents", &v)?),
                "timeoutSeconds" => o.timeout_seconds = Some(parse_u64("timeoutSeconds", &v)?),
                "includeObject" => o.include_object = Some(v.into_owned()),
                _ => {}
            }
        }
        o.validate()?;
        Ok(o)
    }

    fn validate(&self) -> Result<(), Status> {
        if self.rv_match.is_some() && self.rv.is_none() && !self.watch {
            return Err(Status::bad_request("resourceVersionMatch is forbidden unless resourceVersion is provided"));
        }
        if self.cont.is_some() && self.rv.is_some() {
            return Err(Status::bad_request("specifying resource version is not allowed when using continue"));
        }
        if self.cont.is_some() && self.rv_match.is_some() {
            return Err(Status::bad_request("resourceVersionMatch is forbidden when continue is provided"));
        }
        if self.rv_match == Some(Match::Exact) && self.rv == Some(0) {
            return Err(Status::bad_request("resourceVersionMatch \"exact\" is forbidden for resourceVersion \"0\""));
        }
        if self.watch && self.rv_match == Some(Match::Exact) {
            return Err(Status::bad_request("resourceVersionMatch is forbidden for watch unless sendInitialEvents is provided"));
        }
        if self.send_initial_events.is_some() && !self.watch {
            return Err(Status::bad_request("sendInitialEvents is forbidden for list"));
        }
        if self.send_initial_events.is_some() && self.rv_match != Some(Match::NotOlderThan) {
            return Err(Status::bad_request("sendInitialEvents requires setting resourceVersionMatch to NotOlderThan"));
        }
        if self.watch && self.rv_match.is_some() && self.send_initial_events.is_none() {
            return Err(Status::bad_request("resourceVersionMatch is forbidden for watch unless sendInitialEvents is provided"));
        }
        Ok(())
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

    /// Whether a label or field selector filters the result.
    pub fn filtered(&self) -> bool {
        !self.labels.is_empty() || !self.fields.is_empty()
    }
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
    for clause in media::clauses(accept) {
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
fn accepted(clause: &media::Clause<'_>, offered: Offered, protobuf_ok: bool) -> Option<Negotiated> {
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
    fn bad_options_are_400s_with_reasons() {
        for q in [
            "resourceVersion=abc",
            "limit=-1",
            "resourceVersionMatch=Exact",
            "resourceVersionMatch=Bogus&resourceVersion=1",
            "continue=garbage-token",
            "labelSelector=a%20in%20(",
            "watch=maybe",
            "sendInitialEvents=true",
            "watch=1&sendInitialEvents=true",
            "resourceVersionMatch=Exact&resourceVersion=0",
        ] {
            let e = Options::parse(Some(q)).unwrap_err();
            assert_eq!(e.code, 400, "{q}");
            assert!(!e.message.is_empty(), "{q}");
        }
        let e = Options::parse(Some("labelSelector=a%20in%20(")).unwrap_err();
        assert_eq!(e.message, "unable to parse requirement: found '', expected: ',', ')' or identifier");
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
