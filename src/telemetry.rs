//! Metric names, the Prometheus recorder, and the periodic sampler of cache gauges. Labels
//! are bounded: resource, encoding, verb, source, code, view; never namespace, name or raw
//! path.

use metrics_exporter_prometheus::{Matcher, PrometheusBuilder, PrometheusHandle};
use std::sync::OnceLock;

/// Upstream HTTP/2 connections open, by class (`own`: informers, discovery, freshness
/// probes; `review`: token and access reviews; `probe`: health probes; `passthrough`:
/// clients' requests).
pub const UPSTREAM_CONNECTIONS: &str = "kache_upstream_connections";
/// Whether the upstream answered kache's last health probe (`/readyz`) with 200: 1 or 0.
pub const UPSTREAM_UP: &str = "kache_upstream_up";
/// Times the upstream was found down, by reason (`hung`: no answer within the deadline;
/// `unreachable`: connection refused or broken; `unready`: `/readyz` not 200).
pub const UPSTREAM_FAULTS: &str = "kache_upstream_faults_total";
/// Seconds the cache may have missed upstream changes (0 while its informer is connected
/// to an upstream found up), by resource and encoding: how stale what kache serves is.
pub const STALE_SECONDS: &str = "kache_cache_stale_seconds";
/// Freshness probes started (short watches that prove a cache current), by resource and
/// encoding.
pub const FRESHNESS_PROBES: &str = "kache_freshness_probes_total";
/// Duration of freshness probes, by resource and encoding.
pub const FRESHNESS_PROBE_SECONDS: &str = "kache_freshness_probe_seconds";
/// Requests answered, by verb, source (`cache` or `upstream`) and HTTP code.
pub const REQUESTS: &str = "kache_requests_total";
/// Reads answered from cache as metadata (PartialObjectMetadata) or Tables rather than the
/// objects, by view (`metadata`, `table`) and verb.
pub const CACHED_VIEWS: &str = "kache_cached_views_total";
/// Time to response headers, by verb and source.
pub const REQUEST_SECONDS: &str = "kache_request_duration_seconds";
/// Bytes of cached (non-watch) responses, by verb.
pub const RESPONSE_BYTES: &str = "kache_response_bytes_total";
/// Objects held, by resource and encoding.
pub const OBJECTS: &str = "kache_cache_objects";
/// Encoded bytes held, by resource and encoding.
pub const BYTES: &str = "kache_cache_bytes";
/// Events in the window, by resource and encoding.
pub const WINDOW_EVENTS: &str = "kache_cache_window_events";
/// Seconds between the oldest and newest event in the window.
pub const WINDOW_SECONDS: &str = "kache_cache_window_span_seconds";
/// How far the cache's RV trails the upstream's at the last consistency probe.
pub const RV_LAG: &str = "kache_cache_rv_lag";
/// Upstream events ingested, by resource and encoding.
pub const EVENTS_INGESTED: &str = "kache_informer_events_total";
/// LISTs of the informers (the initial one included), by resource, encoding and outcome
/// (`initial`; `diffed`: a relist told to open watchers as events; `replaced`: a relist that
/// ended them; `failed`).
pub const RELISTS: &str = "kache_informer_relists_total";
/// Upstream watch restarts, by resource and encoding.
pub const WATCH_RESTARTS: &str = "kache_informer_watch_restarts_total";
/// Watches open, by resource.
pub const WATCHES_OPEN: &str = "kache_watches_open";
/// Watch events sent to clients, by resource.
pub const WATCH_EVENTS_SENT: &str = "kache_watch_events_sent_total";
/// Watchers ended for falling behind, by resource.
pub const WATCHERS_SLOW: &str = "kache_watchers_ended_slow_total";
/// Bytes of events queued for watches' clients and not yet taken, over all watches.
pub const WATCH_BUFFERED_BYTES: &str = "kache_watch_buffered_bytes";
/// Times a bound on what one request, object or client may cost was reached, by `limit`:
/// the flag that sets it, without its dashes (`max-table-cell-bytes-per-object`, ...).
pub const LIMIT_HITS: &str = "kache_limit_hits_total";

/// The `limit` label values of [`LIMIT_HITS`]: the flags whose bounds are counted.
pub const LIMITS: &[&str] = &[
    "auth-cache-entries",
    "max-concurrent-encodes",
    "max-concurrent-reviews",
    "max-passthrough-per-client",
    "max-table-cell-bytes-per-object",
    "max-watch-buffer-bytes",
    "max-watch-buffers-bytes",
    "max-watches-per-client",
    "write-timeout-seconds",
];

/// Count a hit of the bound `limit` sets (a flag's name without its dashes, one of
/// [`LIMITS`]).
pub fn limit_hit(limit: &'static str) {
    debug_assert!(LIMITS.contains(&limit), "{limit} is not in LIMITS");
    metrics::counter!(LIMIT_HITS, "limit" => limit).increment(1);
}

/// Register every [`LIMIT_HITS`] series at zero, so a rate or an alert sees the first hit.
pub fn register_limits() {
    for limit in LIMITS {
        metrics::counter!(LIMIT_HITS, "limit" => *limit).increment(0);
    }
}

static HANDLE: OnceLock<Option<PrometheusHandle>> = OnceLock::new();

/// Install the process-wide Prometheus recorder (once) and return its handle.
pub fn install() -> Option<PrometheusHandle> {
    HANDLE
        .get_or_init(|| {
            let latency = [0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0];
            PrometheusBuilder::new()
                .set_buckets_for_metric(Matcher::Full(REQUEST_SECONDS.into()), &latency)
                .ok()?
                .install_recorder()
                .map_err(|e| tracing::warn!(error = %e, "metrics recorder not installed"))
                .ok()
        })
        .clone()
}

/// The per-request series of one (verb, source, code), registered once: looking a series up
/// by its labels on every request cost ~2% of a node LIST's CPU.
pub struct RequestSeries {
    requests: metrics::Counter,
    seconds: metrics::Histogram,
    /// Registered at the first body of known size, so no zero series appear for others.
    bytes: OnceLock<metrics::Counter>,
}

/// Per-request series by (verb, source, code). Handles bind to the recorder installed when
/// they are registered: install it (see [`install`]) before serving.
#[derive(Default)]
pub struct RequestMetrics(dashmap::DashMap<(&'static str, &'static str, u16), RequestSeries>);

impl RequestMetrics {
    /// Count a request answered with `code` after `seconds`, and the `bytes` of its body
    /// when known.
    pub fn record(&self, verb: &'static str, source: &'static str, code: u16, seconds: f64, bytes: Option<u64>) {
        let key = (verb, source, code);
        let series = match self.0.get(&key) {
            Some(series) => series,
            None => self
                .0
                .entry(key)
                .or_insert_with(|| RequestSeries {
                    requests: metrics::counter!(REQUESTS, "verb" => verb, "source" => source, "code" => code.to_string()),
                    seconds: metrics::histogram!(REQUEST_SECONDS, "verb" => verb, "source" => source),
                    bytes: OnceLock::new(),
                })
                .downgrade(),
        };
        series.requests.increment(1);
        series.seconds.record(seconds);
        if let Some(n) = bytes {
            series.bytes.get_or_init(|| metrics::counter!(RESPONSE_BYTES, "verb" => verb)).increment(n);
        }
    }
}

/// The verb of a request, as the apiserver's metrics name it.
pub fn verb(method: &http::Method, named: bool, watch: bool) -> &'static str {
    match (method.as_str(), named, watch) {
        ("GET", _, true) => "watch",
        ("GET", true, _) => "get",
        ("GET", false, _) => "list",
        ("POST", _, _) => "create",
        ("PUT", _, _) => "update",
        ("PATCH", _, _) => "patch",
        ("DELETE", true, _) => "delete",
        ("DELETE", false, _) => "deletecollection",
        _ => "other",
    }
}
