//! Metric families (name, type, help), the Prometheus recorder, and the periodic sampler of
//! cache gauges. Labels are bounded: resource and group, encoding, verb, source, code, view;
//! never namespace, name or raw path. The `process_*` families are read from /proc at each
//! scrape.

use metrics_exporter_prometheus::{Matcher, PrometheusBuilder, PrometheusHandle};
use std::sync::OnceLock;

/// How Prometheus types a family.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Counter,
    Gauge,
    Histogram,
}

impl Kind {
    /// The name `# TYPE` gives it.
    pub fn as_str(self) -> &'static str {
        match self {
            Kind::Counter => "counter",
            Kind::Gauge => "gauge",
            Kind::Histogram => "histogram",
        }
    }
}

/// A declared family: what `/metrics` says of it in `# HELP` and `# TYPE`, and what the
/// README's metrics table says of it.
#[derive(Debug, Clone, Copy)]
pub struct Metric {
    pub name: &'static str,
    pub kind: Kind,
    /// Its constant's doc comment on one line.
    pub help: &'static str,
}

impl Metric {
    /// The base unit its name carries (`_seconds`, `_bytes`, before any `_total`), if any.
    pub fn unit(&self) -> Option<metrics::Unit> {
        let base = self.name.strip_suffix("_total").unwrap_or(self.name);
        if base.ends_with("_seconds") {
            Some(metrics::Unit::Seconds)
        } else if base.ends_with("_bytes") {
            Some(metrics::Unit::Bytes)
        } else {
            None
        }
    }
}

/// Each family as a `pub const` of its name, documented, and all of them in [`METRICS`]
/// with that documentation as their help: one text for rustdoc, `# HELP` and the README.
macro_rules! families {
    (@kind counter) => { Kind::Counter };
    (@kind gauge) => { Kind::Gauge };
    (@kind histogram) => { Kind::Histogram };
    ($($(#[doc = $doc:literal])+ $kind:ident $ident:ident = $name:literal;)+) => {
        $($(#[doc = $doc])+ pub const $ident: &str = $name;)+

        /// Every declared family, in the order declared.
        pub const METRICS: &[Metric] =
            &[$(Metric { name: $name, kind: families!(@kind $kind), help: concat!($($doc),+).trim_ascii() }),+];
    };
}

families! {
    /// 1, labelled with the running build: version, git commit (when built with
    /// `KACHE_GIT_COMMIT` set), platform.
    gauge BUILD_INFO = "kache_build_info";
    /// Upstream connections open, by class (`own`: informers, discovery, freshness probes;
    /// `review`: token and access reviews; `probe`: health probes; `passthrough`: clients'
    /// requests: HTTP/2; `bulk`: kache's own lists of whole collections, HTTP/1.1, one at a
    /// time each).
    gauge UPSTREAM_CONNECTIONS = "kache_upstream_connections";
    /// Whether the upstream answered kache's last health probe (`/readyz`) with 200: 1 or 0.
    gauge UPSTREAM_UP = "kache_upstream_up";
    /// Times the upstream was found down, by reason (`hung`: no answer within the deadline;
    /// `unreachable`: connection refused or broken; `unready`: `/readyz` not 200).
    counter UPSTREAM_FAULTS = "kache_upstream_faults_total";
    /// Seconds the cache may have missed upstream changes (0 while its informer is connected
    /// to an upstream found up), by resource and encoding: how stale what kache serves is.
    gauge STALE_SECONDS = "kache_cache_stale_seconds";
    /// Freshness probes started (short watches that prove a cache current), by resource and
    /// encoding.
    counter FRESHNESS_PROBES = "kache_freshness_probes_total";
    /// Duration of freshness probes, by resource and encoding (a histogram: buckets from 5 ms
    /// to 10 s).
    histogram FRESHNESS_PROBE_SECONDS = "kache_freshness_probe_seconds";
    /// Requests answered, by verb, source (`cache` or `upstream`) and HTTP code.
    counter REQUESTS = "kache_requests_total";
    /// Requests passed through to the upstream, by reason (`serve::PassThrough`: write,
    /// non_resource, subresource, unknown_resource, scope, encoding, named_watch, view,
    /// unknown_field, not_synced, no_printer, cheaper_upstream, unproven, unavailable, stale).
    counter PASSTHROUGH = "kache_passthrough_total";
    /// Consistent LISTs proven current without waiting for a bookmark, by outcome:
    /// `accounted`: by the revision ledger (`upstream::ledger`), every revision since the cache's
    /// last proof another resource's write; or checked against the upstream's metadata
    /// (`serve::check`) where the cost rule would send them upstream: `same`, answered from
    /// cache, the pages matched; `proven`, answered from cache, proven meanwhile; `differed`,
    /// `failed`, passed through.
    counter CONSISTENT_CHECKS = "kache_consistent_checks_total";
    /// Reads answered from cache as metadata (PartialObjectMetadata) or Tables rather than the
    /// objects, by view (`metadata`, `table`) and verb.
    counter CACHED_VIEWS = "kache_cached_views_total";
    /// Time to response headers, by verb and source.
    histogram REQUEST_SECONDS = "kache_request_duration_seconds";
    /// Bytes of cached (non-watch) responses, by verb.
    counter RESPONSE_BYTES = "kache_response_bytes_total";
    /// Objects held, by resource and encoding.
    gauge OBJECTS = "kache_cache_objects";
    /// Encoded bytes held, by resource and encoding.
    gauge BYTES = "kache_cache_bytes";
    /// jemalloc's accounting of kache's memory, by state: `allocated` (held by kache),
    /// `active` (the pages of the size classes holding it), `resident`, `metadata` (its own
    /// structures), `retained` (address space kept for reuse). Zero where jemalloc is not the
    /// allocator.
    gauge ALLOCATOR_BYTES = "kache_allocator_bytes";
    /// Events in the window, by resource and encoding.
    gauge WINDOW_EVENTS = "kache_cache_window_events";
    /// Bytes of the object versions the window holds (bounded by `--cache-window-bytes`), by
    /// resource and encoding.
    gauge WINDOW_BYTES = "kache_cache_window_bytes";
    /// Seconds between the oldest and newest event in the window.
    gauge WINDOW_SECONDS = "kache_cache_window_span_seconds";
    /// How far the cache's RV trails the upstream's at the last consistency probe.
    gauge RV_LAG = "kache_cache_rv_lag";
    /// Upstream events ingested, by resource and encoding.
    counter EVENTS_INGESTED = "kache_informer_events_total";
    /// LISTs of the informers (the initial one included), by resource, encoding and outcome
    /// (`initial`; `diffed`: a relist told to open watchers as events; `replaced`: a relist that
    /// ended them; `failed`).
    counter RELISTS = "kache_informer_relists_total";
    /// Caches filled from a saved state at start (`--state-dir`), by resource and encoding.
    counter STATE_RESTORED = "kache_state_restored_total";
    /// Saved states not used at start, by reason (`truncated`, `corrupt`, `foreign_version`,
    /// `other_cluster`, `ahead`, `inconsistent`, ...; a missing file is not counted).
    counter STATE_REFUSED = "kache_state_refused_total";
    /// States written (`--state-dir`), by outcome (`written`, `failed`).
    counter STATE_WRITES = "kache_state_writes_total";
    /// Upstream watch restarts, by resource and encoding.
    counter WATCH_RESTARTS = "kache_informer_watch_restarts_total";
    /// Objects left out of a cache because kache cannot decode them (the kind stays cached
    /// without them), by resource and reason (`json`, `too_deep`: nested deeper than the
    /// apiserver decodes, `protobuf`, `metadata`: no name or resourceVersion).
    counter OBJECTS_SKIPPED = "kache_objects_skipped_total";
    /// Watches open, by resource.
    gauge WATCHES_OPEN = "kache_watches_open";
    /// Watch events sent to clients, by resource.
    counter WATCH_EVENTS_SENT = "kache_watch_events_sent_total";
    /// Watchers ended for falling behind, by resource.
    counter WATCHERS_SLOW = "kache_watchers_ended_slow_total";
    /// Bytes of events queued for watches' clients and not yet taken, over all watches.
    gauge WATCH_BUFFERED_BYTES = "kache_watch_buffered_bytes";
    /// Runs of a gzipped WatchList's initial events (`cache::deflated`), by `outcome`: `kept`,
    /// sent from the deflated copy an earlier WatchList left; `deflated`, deflated for this one.
    counter WATCH_LIST_RUNS = "kache_watch_list_runs_total";
    /// Client connections open.
    gauge CONNECTIONS_OPEN = "kache_connections_open";
    /// Failed accepts of client connections, by `kind`: `descriptors` (the process or system
    /// is out of file descriptors), `memory` (out of socket buffers or memory), `other`.
    counter ACCEPT_ERRORS = "kache_accept_errors_total";
    /// Times a bound on what one request, object or client may cost was reached, by `limit`:
    /// the flag that sets it, without its dashes (`max-table-cell-bytes-per-object`, ...).
    counter LIMIT_HITS = "kache_limit_hits_total";
}

/// The `outcome` labels of [`CONSISTENT_CHECKS`], in the order of `serve::check::Outcome`.
pub const CONSISTENT_CHECK_OUTCOMES: [&str; 5] = ["same", "proven", "differed", "failed", "accounted"];

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
    for reason in STATE_REFUSALS {
        metrics::counter!(STATE_REFUSED, "reason" => *reason).increment(0);
    }
    for outcome in ["written", "failed"] {
        metrics::counter!(STATE_WRITES, "outcome" => outcome).increment(0);
    }
}

/// The reasons of `kache_state_refused_total` (`cache::state::StateRefused::reason`, but a
/// missing file).
pub const STATE_REFUSALS: &[&str] = &[
    "unreadable",
    "truncated",
    "corrupt",
    "foreign_version",
    "other_cluster",
    "other_resource",
    "other_encoding",
    "ahead",
    "inconsistent",
];

static HANDLE: OnceLock<Option<PrometheusHandle>> = OnceLock::new();

/// Install the process-wide Prometheus recorder (once) and return its handle; set
/// `kache_build_info` and the process-wide families at zero.
pub fn install() -> Option<PrometheusHandle> {
    HANDLE
        .get_or_init(|| {
            let latency = [0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0];
            // A probe waits for the apiserver's next bookmark tick, about a second apart, and
            // ends by its 3 s timeout: fine buckets up to that.
            let probe = [0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 1.5, 2.0, 2.5, 3.0, 5.0, 10.0];
            let handle = PrometheusBuilder::new()
                .set_buckets_for_metric(Matcher::Full(REQUEST_SECONDS.into()), &latency)
                .ok()?
                .set_buckets_for_metric(Matcher::Full(FRESHNESS_PROBE_SECONDS.into()), &probe)
                .ok()?
                .install_recorder()
                .map_err(|e| tracing::warn!(error = %e, "metrics recorder not installed"))
                .ok()?;
            describe();
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
            for outcome in CONSISTENT_CHECK_OUTCOMES {
                metrics::counter!(CONSISTENT_CHECKS, "outcome" => outcome).increment(0);
            }
            Some(handle)
        })
        .clone()
}

/// Give every declared family its help and unit, so each has a `# HELP` line.
fn describe() {
    for m in METRICS {
        let (name, unit, help) = (metrics::KeyName::from_const_str(m.name), m.unit(), metrics::SharedString::const_str(m.help));
        metrics::with_recorder(|r| match m.kind {
            Kind::Counter => r.describe_counter(name, unit, help),
            Kind::Gauge => r.describe_gauge(name, unit, help),
            Kind::Histogram => r.describe_histogram(name, unit, help),
        });
    }
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
    for name in [EVENTS_INGESTED, WATCH_RESTARTS, FRESHNESS_PROBES, STATE_RESTORED] {
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

/// Set [`ALLOCATOR_BYTES`] from jemalloc's statistics (nothing where they cannot be read).
pub fn record_allocator() {
    use tikv_jemalloc_ctl::{epoch, stats};
    if epoch::advance().is_err() {
        return;
    }
    for (state, value) in [
        ("allocated", stats::allocated::read()),
        ("active", stats::active::read()),
        ("resident", stats::resident::read()),
        ("metadata", stats::metadata::read()),
        ("retained", stats::retained::read()),
    ] {
        if let Ok(v) = value {
            metrics::gauge!(ALLOCATOR_BYTES, "state" => state).set(v as f64);
        }
    }
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

#[cfg(test)]
mod tests {
    use super::*;

    /// Every declared family, once it has a series, is rendered with its constant's doc as
    /// its `# HELP` and its declared `# TYPE`; no `kache_` family goes without a help.
    #[test]
    fn every_family_is_rendered_with_its_help() {
        let handle = install().expect("the recorder");
        // A label of its own, so no series another test reads is touched.
        let labels = [("test", "help")];
        for m in METRICS {
            match m.kind {
                Kind::Counter => metrics::counter!(m.name, &labels).increment(0),
                Kind::Gauge => metrics::gauge!(m.name, &labels).increment(0.0),
                Kind::Histogram => metrics::histogram!(m.name, &labels).record(0.0),
            }
        }
        let text = handle.render();
        for m in METRICS {
            assert!(text.contains(&format!("# HELP {} {}\n", m.name, m.help)), "{}: no help, or another:\n{text}", m.name);
            assert!(text.contains(&format!("# TYPE {} {}\n", m.name, m.kind.as_str())), "{}: no type, or another:\n{text}", m.name);
        }
        let lines: Vec<&str> = text.lines().collect();
        for (i, family) in lines.iter().enumerate().filter_map(|(i, l)| Some((i, l.strip_prefix("# TYPE ")?.split(' ').next()?))) {
            let help = i.checked_sub(1).map(|h| lines[h]).unwrap_or("");
            assert!(help.starts_with(&format!("# HELP {family} ")), "{family} has no # HELP line:\n{text}");
        }
    }
}
