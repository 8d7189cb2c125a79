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

/// What an `Accept` header asks for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Negotiated {
    /// An encoding kache serves.
    Serve(Format),
    /// Something else that is acceptable to the apiserver (Table, PartialObjectMetadata,
    /// YAML, ...): pass through or render specially.
    Other,
    /// Nothing acceptable.
    NotAcceptable,
}

/// Choose the encoding for an `Accept` header, the apiserver's way: the first acceptable
/// media type wins; `*/*` and a missing header mean JSON; protobuf only for kinds that have it.
pub fn negotiate(accept: Option<&str>, protobuf_ok: bool) -> Negotiated {
    let ranges = media::ranges(accept);
    if ranges.is_empty() {
        return Negotiated::Serve(Format::Json);
    }
    for range in &ranges {
        if range.as_kind.is_some() || range.essence == "application/yaml" {
            return Negotiated::Other;
        }
        if range.is_json() {
            return Negotiated::Serve(Format::Json);
        }
        if range.is_protobuf() && protobuf_ok {
            return Negotiated::Serve(Format::Protobuf);
        }
    }
    Negotiated::NotAcceptable
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
        use Negotiated::*;
        assert_eq!(negotiate(None, true), Serve(Format::Json));
        assert_eq!(negotiate(Some("application/vnd.kubernetes.protobuf,application/json"), true), Serve(Format::Protobuf));
        assert_eq!(negotiate(Some("application/vnd.kubernetes.protobuf,application/json"), false), Serve(Format::Json));
        assert_eq!(negotiate(Some("application/vnd.kubernetes.protobuf;stream=watch"), true), Serve(Format::Protobuf));
        assert_eq!(negotiate(Some("application/json;as=Table;v=v1;g=meta.k8s.io,application/json"), true), Other);
        assert_eq!(negotiate(Some("application/vnd.kubernetes.protobuf, */*"), true), Serve(Format::Protobuf));
        assert_eq!(negotiate(Some("text/html"), true), NotAcceptable);
    }
}
