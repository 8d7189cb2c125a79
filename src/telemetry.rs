//! Metric names, the Prometheus recorder, and the periodic sampler of cache gauges. Labels
//! are bounded: resource and group, encoding, verb, source, code, view; never namespace,
//! name or raw path. The `process_*` families are read from /proc at each scrape.

use metrics_exporter_prometheus::{Matcher, PrometheusBuilder, PrometheusHandle};
use std::sync::OnceLock;

/// 1, labelled with the running build: version, git commit (when built with
/// `KACHE_GIT_COMMIT` set), platform.
pub const BUILD_INFO: &str = "kache_build_info";
/// Upstream connections open, by class (`own`: informers, discovery, freshness probes;
/// `review`: token and access reviews; `probe`: health probes; `passthrough`: clients'
/// requests: HTTP/2; `bulk`: kache's own lists of whole collections, HTTP/1.1, one at a
/// time each).
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
/// Duration of freshness probes, by resource and encoding (a histogram: buckets from 5 ms
/// to 10 s).
pub const FRESHNESS_PROBE_SECONDS: &str = "kache_freshness_probe_seconds";
/// Requests answered, by verb, source (`cache` or `upstream`) and HTTP code.
pub const REQUESTS: &str = "kache_requests_total";
/// Requests passed through to the upstream, by reason (`serve::PassThrough`: write,
/// non_resource, subresource, unknown_resource, scope, encoding, named_watch, view,
/// unknown_field, not_synced, no_printer, cheaper_upstream, unproven, unavailable, stale).
pub const PASSTHROUGH: &str = "kache_passthrough_total";
/// Consistent LISTs proven current without waiting for a bookmark, by outcome:
/// `accounted`: by the revision ledger (`cache::ledger`), every revision since the cache's
/// last proof another resource's write; or checked against the upstream's metadata
/// (`serve::check`) where the cost rule would send them upstream: `same`, answered from
/// cache, the pages matched; `proven`, answered from cache, proven meanwhile; `differed`,
/// `failed`, passed through.
pub const CONSISTENT_CHECKS: &str = "kache_consistent_checks_total";
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
/// Bytes of the object versions the window holds (bounded by `--cache-window-bytes`), by
/// resource and encoding.
pub const WINDOW_BYTES: &str = "kache_cache_window_bytes";
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
/// Objects left out of a cache because kache cannot decode them (the kind stays cached
/// without them), by resource and reason (`json`, `too_deep`: nested deeper than the
/// apiserver decodes, `protobuf`, `metadata`: no name or resourceVersion).
pub const OBJECTS_SKIPPED: &str = "kache_objects_skipped_total";
/// Watches open, by resource.
pub const WATCHES_OPEN: &str = "kache_watches_open";
/// Watch events sent to clients, by resource.
pub const WATCH_EVENTS_SENT: &str = "kache_watch_events_sent_total";
/// Watchers ended for falling behind, by resource.
pub const WATCHERS_SLOW: &str = "kache_watchers_ended_slow_total";
/// Bytes of events queued for watches' clients and not yet taken, over all watches.
pub const WATCH_BUFFERED_BYTES: &str = "kache_watch_buffered_bytes";
/// Runs of a gzipped WatchList's initial events (`cache::deflated`), by `outcome`: `kept`,
/// sent from the deflated copy an earlier WatchList left; `deflated`, deflated for this one.
pub const WATCH_LIST_RUNS: &str = "kache_watch_list_runs_total";
/// Client connections open.
pub const CONNECTIONS_OPEN: &str = "kache_connections_open";
/// Failed accepts of client connections, by `kind`: `descriptors` (the process or system
/// is out of file descriptors), `memory` (out of socket buffers or memory), `other`.
pub const ACCEPT_ERRORS: &str = "kache_accept_errors_total";
/// Times a bound on what one request, object or client may cost was reached, by `limit`:
/// the flag that sets it, without its dashes (`max-table-cell-bytes-per-object`, ...).
pub const LIMIT_HITS: &str = "kache_limit_hits_total";

/// The `limit` label values of [`LIMIT_HITS`]: the flags whose bounds are counted.
pub const LIMITS: &[&str] = &[
    "auth-cache-entries",
    "header-read-timeout-seconds",
    "max-connections",
    "max-connections-per-address",
    "max-cheaper-upstream-bytes-per-client",
    "max-concurrent-encodes",
    "max-concurrent-reviews",
    "max-consistent-reads-per-client",
    "max-large-answers-per-client",
    "max-passthrough-per-client",
    "max-table-cell-bytes-per-object",
    "max-token-review-rate-per-address",
    "max-watch-buffer-bytes",
    "max-watch-buffers-bytes",
    "max-watch-buffers-bytes-per-connection",
    "max-watch-buffers-bytes-per-user",
    "max-watch-starts-per-client",
    "max-watches-per-client",
    "preface-timeout-seconds",
    "stall-timeout-seconds",
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

/// Install the process-wide Prometheus recorder (once) and return its handle; set
/// `kache_build_info` and the process-wide families at zero.
pub fn install() -> Option<PrometheusHandle> {
    HANDLE
        .get_or_init(|| {
            let latency = [0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0];
            // A probe waits for the apiserver's next bookmark tick: 0.5-2.3 s is usual.
            let probe = [0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 1.5, 2.0, 2.5, 3.0, 5.0, 10.0];
            let handle = PrometheusBuilder::new()
                .set_buckets_for_metric(Matcher::Full(REQUEST_SECONDS.into()), &latency)
                .ok()?
                .set_buckets_for_metric(Matcher::Full(FRESHNESS_PROBE_SECONDS.into()), &probe)
                .ok()?
                .install_recorder()
                .map_err(|e| tracing::warn!(error = %e, "metrics recorder not installed"))
                .ok()?;
            metrics::gauge!(BUILD_INFO, "version" => env!("CARGO_PKG_VERSION"), "commit" => crate::GIT_COMMIT, "platform" => format!("{}/{}", std::env::consts::OS, std::env::consts::ARCH)).set(1.0);
            for reason in ["hung", "unreachable", "unready"] {
                metrics::counter!(UPSTREAM_FAULTS, "reason" => reason).increment(0);
            }
            register_limits();
            for kind in ["descriptors", "memory", "other"] {
                metrics::counter!(ACCEPT_ERRORS, "kind" => kind).increment(0);
            }
            metrics::gauge!(CONNECTIONS_OPEN).set(0.0);
            for outcome in ["kept", "deflated"] {
                metrics::counter!(WATCH_LIST_RUNS, "outcome" => outcome).increment(0);
            }
            for outcome in crate::serve::check::Outcome::LABELS {
                metrics::counter!(CONSISTENT_CHECKS, "outcome" => outcome).increment(0);
            }
            Some(handle)
        })
        .clone()
}

/// The labels of one cache's series: its resource (plural), API group (empty for the core
/// group, as the apiserver's metrics have it) and encoding. The group keeps `events` and
/// `events.events.k8s.io` apart.
pub fn cache_labels(r: &crate::api::resource::Resource, fmt: crate::api::media::Format) -> [(&'static str, String); 3] {
    [("resource", r.plural.clone()), ("group", r.group.clone()), ("encoding", format!("{fmt:?}").to_lowercase())]
}

/// The labels of a resource's series that have no encoding (watches sent, slow watchers).
pub fn resource_labels(r: &crate::api::resource::Resource) -> [(&'static str, String); 2] {
    [("resource", r.plural.clone()), ("group", r.group.clone())]
}

/// Register a new cache's counters at zero, so `rate()` and `increase()` over them have a
/// series from the start rather than from the first event (an alert on relists that ended
/// watches, or on slow watchers, would otherwise miss the first one).
pub fn register_cache(r: &crate::api::resource::Resource, fmt: crate::api::media::Format) {
    let labels = cache_labels(r, fmt);
    for name in [EVENTS_INGESTED, WATCH_RESTARTS, FRESHNESS_PROBES] {
        metrics::counter!(name, &labels).increment(0);
    }
    for outcome in ["initial", "diffed", "replaced", "failed"] {
        let [r0, g0, e0] = labels.clone();
        metrics::counter!(RELISTS, &[r0, g0, e0, ("outcome", outcome.to_string())]).increment(0);
    }
    let by_resource = resource_labels(r);
    metrics::counter!(WATCH_EVENTS_SENT, &by_resource).increment(0);
    metrics::counter!(WATCHERS_SLOW, &by_resource).increment(0);
}

/// The `process_*` families client libraries export (Prometheus' process collector), read
/// from /proc at each scrape, in the text format; empty where /proc is not there.
pub fn process_metrics() -> String {
    process::render().unwrap_or_default()
}

mod process {
    //! /proc/self readings: CPU time, memory, file descriptors, start time.

    /// `AT_CLKTCK` and `AT_PAGESZ` in the auxiliary vector (what `sysconf` reads), so no
    /// libc call is needed: clock ticks per second and the page size.
    fn auxv() -> Option<(f64, f64)> {
        let raw = std::fs::read("/proc/self/auxv").ok()?;
        let word = std::mem::size_of::<usize>();
        let (mut ticks, mut page) = (None, None);
        for pair in raw.chunks_exact(2 * word) {
            let read = |b: &[u8]| b.iter().rev().fold(0u64, |acc, x| (acc << 8) | u64::from(*x));
            let (key, value) = (read(&pair[..word]), read(&pair[word..]));
            match key {
                17 => ticks = Some(value as f64),
                6 => page = Some(value as f64),
                _ => {}
            }
        }
        Some((ticks.filter(|t| *t > 0.0).unwrap_or(100.0), page.unwrap_or(4096.0)))
    }

    pub(super) fn render() -> Option<String> {
        let stat = std::fs::read_to_string("/proc/self/stat").ok()?;
        // Fields after the command name (which may hold spaces) in parentheses.
        let fields: Vec<&str> = stat.rsplit_once(')')?.1.split_whitespace().collect();
        let field = |n: usize| -> Option<f64> { fields.get(n - 3)?.parse().ok() };
        let (ticks, page) = auxv()?;
        let cpu = (field(14)? + field(15)?) / ticks;
        let (start_ticks, vsize, rss) = (field(22)?, field(23)?, field(24)? * page);
        let boot: f64 = std::fs::read_to_string("/proc/stat").ok()?.lines().find_map(|l| l.strip_prefix("btime ")?.trim().parse().ok())?;
        let fds = std::fs::read_dir("/proc/self/fd").map(|d| d.count()).unwrap_or(0);
        let max_fds = std::fs::read_to_string("/proc/self/limits")
            .ok()
            .and_then(|l| l.lines().find(|l| l.starts_with("Max open files"))?.split_whitespace().nth(3)?.parse::<f64>().ok());
        let mut out = String::new();
        let mut family = |name: &str, kind: &str, help: &str, value: f64| {
            out.push_str(&format!("# HELP {name} {help}\n# TYPE {name} {kind}\n{name} {value}\n"));
        };
        family("process_cpu_seconds_total", "counter", "Total user and system CPU time spent in seconds.", cpu);
        family("process_resident_memory_bytes", "gauge", "Resident memory size in bytes.", rss);
        family("process_virtual_memory_bytes", "gauge", "Virtual memory size in bytes.", vsize);
        family("process_open_fds", "gauge", "Number of open file descriptors.", fds as f64);
        if let Some(max) = max_fds {
            family("process_max_fds", "gauge", "Maximum number of open file descriptors.", max);
        }
        family("process_start_time_seconds", "gauge", "Start time of the process since unix epoch in seconds.", boot + start_ticks / ticks);
        Some(out)
    }
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
