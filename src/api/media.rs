//! The `Accept` header: media ranges with their parameters, parsed once, in the client's
//! order (the apiserver takes the first range it can serve, ignoring `q`). Every place that
//! reads `Accept` (cached reads, Status bodies, the simulator's Tables) uses this parser.

use crate::api::wire;

/// One media range of an `Accept` header, lower-cased, with the parameters the apiserver
/// negotiates on.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct MediaRange<'a> {
    /// `type/subtype`, e.g. `application/json`, `*/*`.
    pub essence: String,
    /// `as=` (Table, PartialObjectMetadata, PartialObjectMetadataList), as written.
    pub as_kind: Option<&'a str>,
    /// `g=`.
    pub group: Option<&'a str>,
    /// `v=`.
    pub version: Option<&'a str>,
}

impl MediaRange<'_> {
    /// JSON, or a wildcard that the apiserver answers with JSON.
    pub fn is_json(&self) -> bool {
        matches!(self.essence.as_str(), "application/json" | "application/*" | "*/*")
    }

    /// Kubernetes protobuf.
    pub fn is_protobuf(&self) -> bool {
        self.essence == wire::PROTOBUF
    }
}

/// The media ranges of an `Accept` header, in order; empty when the header is missing or
/// blank.
pub fn ranges(accept: Option<&str>) -> Vec<MediaRange<'_>> {
    let Some(accept) = accept else { return Vec::new() };
    accept
        .split(',')
        .filter(|part| !part.trim().is_empty())
        .map(|part| {
            let mut params = part.split(';').map(str::trim);
            let mut range = MediaRange { essence: params.next().unwrap_or("").to_ascii_lowercase(), ..MediaRange::default() };
            for p in params {
                let (k, v) = p.split_once('=').unwrap_or((p, ""));
                let v = v.trim_matches('"');
                match k.trim() {
                    "as" => range.as_kind = Some(v),
                    "g" => range.group = Some(v),
                    "v" => range.version = Some(v),
                    _ => {}
                }
            }
            range
        })
        .collect()
}

/// Whether error bodies for this request are written in protobuf: its first media range is
/// protobuf (the apiserver answers a Status in the request's negotiated encoding).
pub fn wants_protobuf(headers: &http::HeaderMap) -> bool {
    let accept = headers.get(http::header::ACCEPT).and_then(|v| v.to_str().ok());
    ranges(accept).first().is_some_and(MediaRange::is_protobuf)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ranges_keep_order_and_parameters() {
        let r = ranges(Some("application/json;as=Table;v=v1;g=meta.k8s.io, application/json"));
        assert_eq!(r.len(), 2);
        assert_eq!((r[0].as_kind, r[0].version, r[0].group), (Some("Table"), Some("v1"), Some("meta.k8s.io")));
        assert!(r[0].is_json() && r[1].is_json() && r[1].as_kind.is_none());
        assert!(ranges(Some("  ")).is_empty() && ranges(None).is_empty());
        assert!(ranges(Some("Application/Vnd.Kubernetes.Protobuf")).first().is_some_and(MediaRange::is_protobuf));
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
    }
}
