//! One request as the serving cache sees it: what it asks (read once), who answered it
//! ([`Source`]), the answer shaped as asked, and its line in the access log.

use super::compress;
use super::PassThrough;
use crate::api::media::accepts_gzip;
use crate::api::query;
use crate::api::route::{classify, ResourcePath, Target};
use crate::api::status::Status;
use crate::body::Body;
use http::{Request, Response};

/// What a request asks, read once: the resource path it names (classified), its list and
/// watch options (parsed), and how its answer is to be shaped.
pub(crate) struct Asked {
    /// When it arrived.
    pub(crate) started: std::time::Instant,
    /// The resource collection or object it names, if any.
    pub(crate) path: Option<ResourcePath>,
    /// A resource GET's options, or the apiserver's answer to bad ones (`None` for any other
    /// request).
    pub(crate) options: Option<Result<query::Options, Status>>,
    /// A watch (`watch=true`).
    pub(crate) watch: bool,
    /// A watch that sends its initial events first (a WatchList).
    pub(crate) watch_list: bool,
    /// Indented JSON (`pretty`, or a browser's or curl's request).
    pub(crate) pretty: bool,
    /// Protobuf first in its `Accept` (its errors are encoded so).
    pub(crate) protobuf: bool,
    /// gzip accepted.
    pub(crate) gzip: bool,
}

impl Asked {
    pub(crate) fn of<B>(req: &Request<B>) -> Asked {
        let path = match classify(req.uri().path()) {
            Some(Target::Resource(p)) => Some(p),
            _ => None,
        };
        let q = req.uri().query();
        let options = (path.is_some() && req.method() == http::Method::GET).then(|| query::Options::parse(q));
        let (watch, watch_list) = match &options {
            Some(Ok(o)) => (o.watch, o.watch && o.send_initial_events == Some(true)),
            // Bad options are answered later; the request is labelled as its query reads.
            _ => {
                let watch = query::watch_requested(q);
                (watch, watch && query::initial_events_requested(q))
            }
        };
        Asked {
            started: std::time::Instant::now(),
            path,
            options,
            watch,
            watch_list,
            pretty: !watch && crate::api::media::wants_pretty(q, req.headers()),
            protobuf: crate::api::media::wants_protobuf(req.headers()),
            gzip: accepts_gzip(req.headers()),
        }
    }
}

/// Who answered a request: the `source` label of the request metrics.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Source {
    /// kache itself, before any cache or upstream (authentication, limits, bad input).
    Kache,
    /// The cache.
    Cache,
    /// The upstream, passed through.
    Upstream,
    /// The upstream's discovery answer kept from before it went down: sent
    /// as the upstream sent it, counted as `cache` (kache answers it from memory, as it
    /// does cached reads during the outage).
    Kept,
}

impl Source {
    /// The metric label value.
    pub fn label(self) -> &'static str {
        match self {
            Source::Kache => "kache",
            Source::Cache | Source::Kept => "cache",
            Source::Upstream => "upstream",
        }
    }
}

/// `resp` as the client asked for it, with its body's length for the metrics when kache
/// answers it from memory. The upstream indents and compresses its own answers: those passed
/// through and those kept from before an outage are sent as the upstream sent them. kache's
/// are indented as they are sent (only for the humans who ask), and large cached ones
/// compressed for clients that ask; so are WatchLists answered from memory
/// ([`compress::gzip_watch`]), which the apiserver sends as they are.
pub(crate) fn shaped(resp: Response<Body>, source: Source, shape: &Asked, encodes: &compress::Encodes) -> (Response<Body>, Option<u64>) {
    let ours = matches!(source, Source::Kache | Source::Cache);
    let bytes = http_body::Body::size_hint(resp.body()).exact().filter(|_| matches!(source, Source::Cache | Source::Kept));
    let resp = if shape.pretty && ours { compress::indented(resp, encodes) } else { resp };
    // A WatchList's stream carries what `gzip_watch` needs; its refusals do not, and go as
    // they are.
    let resp = match (shape.gzip && source == Source::Cache, shape.watch_list) {
        (true, true) => compress::gzip_watch(resp, encodes),
        (true, false) => compress::gzip(resp, encodes),
        _ => resp,
    };
    (resp, bytes)
}

/// One line of `--access-log`.
pub(crate) struct Access<'a> {
    pub(crate) user: Option<&'a str>,
    pub(crate) verb: &'static str,
    pub(crate) path: Option<&'a ResourcePath>,
    pub(crate) source: Source,
    pub(crate) reason: Option<PassThrough>,
    pub(crate) code: u16,
}

impl Access<'_> {
    /// Log the line (target `kache::access`, at info). Reads answered from cache never reach
    /// the apiserver's audit log: this line is their record. No query, name or body:
    /// selectors and names can carry data.
    pub(crate) fn log(&self, bytes: Option<u64>, seconds: f64) {
        let (group, resource, namespace) =
            self.path.map_or(("", "", ""), |p| (p.group.as_str(), p.plural.as_str(), p.namespace.as_deref().unwrap_or("")));
        tracing::info!(
            target: "kache::access",
            user = self.user.unwrap_or(""),
            verb = self.verb,
            group,
            resource,
            namespace,
            source = self.source.label(),
            reason = self.reason.map_or("", PassThrough::label),
            code = self.code,
            bytes,
            seconds,
            "request"
        );
    }
}
