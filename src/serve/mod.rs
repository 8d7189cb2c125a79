//! `kache serve`: discover the upstream's resources, keep an informer-fed cache per resource
//! and encoding in demand, answer GET/LIST/WATCH from it when it can do so faithfully, and
//! pass everything else through.
//!
//! Request pipeline: `server` -> [`Serve::handle`] (URI limit, authentication and
//! impersonation) -> `api::route::classify` -> either authorization (SubjectAccessReview), the
//! in-flight cap and `handler::{get,list,watch}` on a synced, current-enough cache, or
//! `proxy::forward` carrying the client's identity.

pub(crate) mod check;
pub(crate) mod compress;
pub(crate) mod cost;
pub mod discovery;
pub(crate) mod fair;
pub mod handler;
pub(crate) mod limit;
mod preload;
pub(crate) mod proxy;
mod read;
pub use read::PassThrough;
pub(crate) mod respond;
pub(crate) mod server;

use crate::api::media::accepts_gzip;
use crate::api::media::Format;
use crate::api::query;
use crate::api::resource::ResourceRef;
use crate::api::route::{classify, ResourcePath, Target};
use crate::api::status::Status;
use crate::auth::{impersonate, Caller, Security};
use crate::body::Body;
use crate::body::RequestBody;
use crate::cache::feed::{self, Feed, Loading};
use crate::cache::KindCache;
use crate::cache::Limits;
use crate::serve::discovery::DiscoveryError;
use crate::serve::limit::{Inflight, InflightLimits};
use crate::serve::respond::StatusResponse;
use crate::serve::server::Handler;
use crate::serve::server::Peer;
use crate::telemetry;
use crate::upstream::health;
use crate::upstream::last_discovery::{DocKey, LastDiscovery};
use crate::upstream::Credentials;
use crate::upstream::Upstream;
use arc_swap::ArcSwap;
use dashmap::DashMap;
use handler::WatchSettings;
use http::{Request, Response};
use std::sync::Arc;
use std::time::Duration;

/// Settings of the serving cache.
#[derive(Debug, Clone)]
pub struct ServeSettings {
    /// Buffer sizes of every cache.
    pub limits: Limits,
    /// Watch timing.
    pub watch: WatchSettings,
    /// How long a consistent read waits for the cache to reach the upstream's RV before it
    /// is passed through instead.
    pub consistent_wait: Duration,
    /// Resources (plural names, optionally `plural.group`) to load at start.
    pub preload: Vec<String>,
    /// Encodings to load preloaded resources in.
    pub preload_formats: Vec<Format>,
    /// Authentication and authorization of clients; `None` serves everyone with kache's own
    /// rights (tests and the demo on loopback only).
    pub security: Option<Arc<Security>>,
    /// Caps on cached reads in flight.
    pub inflight: InflightLimits,
    /// Longest request URI (path and query) accepted.
    pub max_uri_bytes: usize,
    /// Requests one client may have passed through at once (0: no bound).
    pub passthrough_per_client: usize,
    /// Watches one client may have open at once, cached or passed through (0: no bound).
    pub watches_per_client: usize,
    /// How long reads are served from a cache whose informer cannot reach the upstream.
    pub serve_stale: Duration,
    /// `--consistent-passthrough-factor`: how the cost rule weighs the upstream.
    pub passthrough_factor: f64,
    /// `--cheaper-upstream-reads check`: a consistent LIST the cost rule sends to the
    /// upstream is checked against its metadata first (see `check`).
    pub check_cheaper_reads: bool,
    /// `--revision-ledger on`: a consistent LIST is first proven by the revision ledger
    /// (`cache::ledger`).
    pub revision_ledger: bool,
    /// The bound on answers being indented (`pretty`) or gzip-compressed at once (past it
    /// they go out as they are), and the lane their jobs run in.
    pub encodes: compress::Encodes,
    /// Large answers from memory one client may have being sent at once (0: no bound); past
    /// it they wait for one of the client's own (see [`fair`]).
    pub large_per_client: usize,
    /// Bytes a second of consistent reads one client may have passed to the upstream as the
    /// cheaper way (0: no bound); past them they are proven and answered from memory.
    pub cheaper_upstream_bytes_per_client: u64,
    /// Watches a second one client may start from no resourceVersion (0: no bound), ten
    /// seconds' worth at once; past it 429.
    pub watch_starts_per_client: u64,
    /// Consistent reads a second one client may have proven (0: no bound), ten seconds'
    /// worth at once; past it they queue.
    pub consistent_reads_per_client: u64,
    /// Log one line per request (target `kache::access`): who, what, answered by whom.
    pub access_log: bool,
    /// Bytes the watches of one flow (`limit::flow`) may have queued together (0: no bound).
    pub watch_buffers_per_user: usize,
}

/// One readiness check.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Check {
    /// What is checked (`upstream`, `cache pods json`).
    pub name: String,
    /// Whether it passes (`[+]`) or not (`[-]`).
    pub pass: bool,
    /// Whether a failure makes kache unready (not while it serves from memory within the
    /// staleness bound).
    pub counts: bool,
    /// The detail after the name.
    pub detail: String,
}

impl Check {
    fn pass(name: String, detail: String) -> Check {
        Check { name, pass: true, counts: false, detail }
    }

    fn fail(name: String, detail: String, counts: bool) -> Check {
        Check { name, pass: false, counts, detail }
    }
}

/// A cache's readiness detail before its first sync: `not synced: listing, 41,200 objects
/// (176.8 MiB) so far`, or why it is not listing.
fn not_synced(loading: Loading) -> String {
    match loading {
        Loading::Listing { objects, bytes, .. } => format!("not synced: listing, {} so far", feed::amount(objects, bytes)),
        Loading::Waiting => "not synced: its list waits for its turn".into(),
        Loading::Synced | Loading::Idle => "not synced".into(),
    }
}

/// A cache's initial list in `/debug/cache`, while it is under way (`null` otherwise).
fn loading_report(loading: Loading) -> serde_json::Value {
    match loading {
        Loading::Listing { objects, bytes, elapsed } => {
            serde_json::json!({"state": "listing", "objects": objects, "bytes": bytes, "seconds": elapsed.as_secs_f64()})
        }
        Loading::Waiting => serde_json::json!({"state": "waiting"}),
        Loading::Synced | Loading::Idle => serde_json::Value::Null,
    }
}

/// A failure's detail, saying whether kache still serves from memory.
fn stale_detail(what: &str, stale: Duration, bound: Duration) -> String {
    if stale < bound {
        format!("{what}; serving from memory for up to {}s more", (bound - stale).as_secs())
    } else {
        format!("{what}; past --serve-stale ({}s)", bound.as_secs())
    }
}

/// Which cache a feed fills: one resource (group, version, plural) in one encoding.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub(crate) struct FeedKey {
    pub group: String,
    pub version: String,
    pub plural: String,
    pub format: Format,
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

/// The serving cache.
pub struct Serve {
    pub(crate) upstream: Upstream,
    pub(crate) resources: ArcSwap<Vec<ResourceRef>>,
    feeds: DashMap<FeedKey, Arc<Feed>>,
    pub(crate) settings: ServeSettings,
    hits: std::sync::atomic::AtomicU64,
    /// The upstream's last discovery answers, for an outage.
    kept: Arc<LastDiscovery>,
    /// Reads answered from cache as PartialObjectMetadata.
    pub(crate) metadata_hits: std::sync::atomic::AtomicU64,
    metrics: telemetry::RequestMetrics,
    pub(crate) inflight: Inflight,
    /// Pass-through requests in flight, per client.
    passthrough: Inflight,
    /// Watches open (cached or passed through), per client.
    watches: Inflight,
    /// The cost rule's measurements (consistent reads: proof or pass-through).
    pub(crate) costs: Arc<cost::Costs>,
    /// Requests passed through, per [`PassThrough`] reason.
    passed: [std::sync::atomic::AtomicU64; PassThrough::LABELS.len()],
    /// Consistent reads checked against the upstream's metadata, by outcome (`check::Outcome`).
    checked: [std::sync::atomic::AtomicU64; check::Outcome::LABELS.len()],
    /// Answers being indented or compressed.
    encodes: compress::Encodes,
    /// Every client's large answers being sent.
    pub(crate) large: fair::Large,
    /// Each client's budget of consistent reads passed to the upstream as the cheaper way.
    pub(crate) cheaper_upstream: crate::rate::Buckets<String>,
    /// Each client's budget of watch starts that need a consistency proof.
    pub(crate) watch_starts: crate::rate::Buckets<String>,
    /// Each flow's bound on its watches' queued bytes.
    pub(crate) watch_flows: limit::WatchFlows,
    /// Each client's budget of consistent reads that need a proof, and the reads queued now.
    pub(crate) consistent_reads: (crate::rate::Buckets<String>, std::sync::atomic::AtomicUsize),
    /// True once kache shuts down: the watches passed through end (`proxy::forward`).
    ending: tokio::sync::watch::Sender<bool>,
}

impl Serve {
    /// Discover the upstream's resources and start the preloaded informers.
    pub async fn start(upstream: Upstream, settings: ServeSettings) -> Result<Arc<Serve>, DiscoveryError> {
        let resources: Vec<ResourceRef> = discovery::discover(&upstream).await?.into_iter().map(Arc::new).collect();
        tracing::info!(resources = resources.len(), "upstream discovered");
        let inflight = Inflight::new(settings.inflight);
        let passthrough = Inflight::new(InflightLimits { global: 0, per_user: settings.passthrough_per_client });
        let settings_factor = settings.passthrough_factor;
        let encodes = settings.encodes.clone();
        let large = fair::Large::new(settings.large_per_client);
        let cheaper_upstream =
            crate::rate::Buckets::new(settings.cheaper_upstream_bytes_per_client, "max-cheaper-upstream-bytes-per-client");
        let watches = Inflight::new(InflightLimits { global: 0, per_user: settings.watches_per_client });
        let starts = settings.watch_starts_per_client;
        let watch_starts = crate::rate::Buckets::with_burst(starts, starts.saturating_mul(10), "max-watch-starts-per-client");
        let watch_flow_bytes = settings.watch_buffers_per_user;
        let reads = settings.consistent_reads_per_client;
        let consistent_reads =
            (crate::rate::Buckets::with_burst(reads, reads.saturating_mul(10), "max-consistent-reads-per-client"), Default::default());
        let serve = Arc::new(Serve {
            upstream,
            resources: ArcSwap::from_pointee(resources),
            feeds: DashMap::new(),
            settings,
            hits: Default::default(),
            kept: Default::default(),
            metadata_hits: Default::default(),
            metrics: Default::default(),
            inflight,
            passthrough,
            costs: Arc::new(cost::Costs::new(settings_factor)),
            passed: Default::default(),
            checked: Default::default(),
            encodes,
            large,
            cheaper_upstream,
            watch_starts,
            consistent_reads,
            watches,
            watch_flows: limit::WatchFlows::new(watch_flow_bytes),
            ending: tokio::sync::watch::Sender::new(false),
        });
        serve.preload();
        telemetry::register_limits();
        tokio::spawn(discovery::rediscover(Arc::downgrade(&serve)));
        tokio::spawn(health::monitor(Arc::downgrade(&serve), |s| &s.upstream));
        Ok(serve)
    }

    /// Wait until every started feed has synced, or `timeout` passes.
    pub async fn wait_synced(&self, timeout: Duration) -> bool {
        let feeds: Vec<Arc<Feed>> = self.feeds.iter().map(|e| e.value().clone()).collect();
        futures_util::future::join_all(feeds.iter().map(|f| f.wait_synced(timeout))).await.into_iter().all(|ok| ok)
    }

    /// Wait until every started feed's resource is trusted by the revision ledger
    /// (`cache::ledger`; Events' never are), or `timeout` passes.
    pub async fn wait_ledger(&self, timeout: Duration) -> bool {
        let feeds: Vec<Arc<Feed>> = self.feeds.iter().map(|e| e.value().clone()).collect();
        futures_util::future::join_all(feeds.iter().map(|f| f.wait_in_ledger(timeout))).await.into_iter().all(|ok| ok)
    }

    /// Readiness checks for the upstream and every preloaded cache. A failing check counts
    /// (makes kache unready) unless kache still serves from memory within
    /// `--serve-stale`: a Service must keep sending it clients then.
    pub fn readiness(&self) -> Vec<Check> {
        let bound = self.settings.serve_stale;
        let mut out = vec![self.upstream_check()];
        let mut caches = Vec::new();
        for e in self.feeds.iter().filter(|e| e.value().is_preloaded()) {
            let (k, f) = (e.key(), e.value());
            let name = format!("cache {}{}{} {:?}", k.plural, if k.group.is_empty() { "" } else { "." }, k.group, k.format).to_lowercase();
            let stale = f.staleness();
            let check = match (f.synced(), f.healthy()) {
                // Never fillable: its requests pass through, which is not a reason to be unready.
                _ if f.refused().is_some() => Check::pass(name, "refused by the upstream; passed through".into()),
                // kache's identity may not list it (a preloaded kind its RBAC does not grant):
                // its reads pass through as they would without the preload.
                (false, _) if f.forbidden() => Check::pass(name, "forbidden to kache's identity (403); passed through, retrying".into()),
                (true, true) => Check::pass(name, "ok".into()),
                (false, _) => Check::fail(name, not_synced(f.loading()), true),
                (true, false) if f.relisting() => Check::fail(name, stale_detail("relisting after 410 Gone", stale, bound), stale >= bound),
                (true, false) => Check::fail(name, stale_detail("upstream unreachable", stale, bound), stale >= bound),
            };
            caches.push(check);
        }
        caches.sort_by(|a, b| a.name.cmp(&b.name));
        out.extend(caches);
        out
    }

    /// The upstream's health as a readiness check.
    fn upstream_check(&self) -> Check {
        let name = "upstream".to_string();
        match &*self.upstream.health().borrow() {
            health::Health::Down { since, why, reason } => {
                let down = since.elapsed();
                let what = format!("{reason} for {}s: {why}", down.as_secs());
                let counts = down >= self.settings.serve_stale;
                Check::fail(name, stale_detail(&what, down, self.settings.serve_stale), counts)
            }
            health::Health::Up => Check::pass(name, "ok".into()),
            health::Health::Unknown => Check::pass(name, "not probed yet".into()),
        }
    }

    /// Whether reads of `feed` may still be answered from memory, or the Status to answer
    /// instead: past `--serve-stale` without the upstream, reads are refused.
    pub(crate) fn within_stale_bound(&self, feed: &Feed) -> Result<(), Status> {
        let stale = feed.staleness();
        if stale.is_zero() || stale < self.settings.serve_stale {
            return Ok(());
        }
        Err(Status::unavailable_retry(
            format!(
                "the upstream apiserver has been unavailable for {}s, longer than kache serves from memory ({}s)",
                stale.as_secs(),
                self.settings.serve_stale.as_secs()
            ),
            1,
        ))
    }

    /// Set the cache gauges (objects, bytes, window) from every running cache.
    pub fn sample(&self) {
        metrics::gauge!(telemetry::WATCH_BUFFERED_BYTES).set(self.settings.watch.buffers.queued() as f64);
        self.watch_flows.forget_idle();
        for e in self.feeds.iter() {
            let (k, f) = (e.key(), e.value());
            let labels =
                [("resource", k.plural.clone()), ("group", k.group.clone()), ("encoding", format!("{:?}", k.format).to_lowercase())];
            let snap = f.cache.snapshot();
            metrics::gauge!(telemetry::OBJECTS, &labels).set(snap.objects.len() as f64);
            metrics::gauge!(telemetry::BYTES, &labels).set(snap.bytes as f64);
            metrics::gauge!(telemetry::WINDOW_EVENTS, &labels).set(snap.window.len() as f64);
            metrics::gauge!(telemetry::WINDOW_BYTES, &labels).set(snap.window.bytes() as f64);
            metrics::gauge!(telemetry::WINDOW_SECONDS, &labels).set(snap.window.span().as_secs_f64());
            metrics::gauge!(telemetry::WATCHES_OPEN, &labels).set(f.cache.watchers() as f64);
            metrics::gauge!(telemetry::STALE_SECONDS, &labels).set(f.staleness().as_secs_f64());
        }
    }

    /// What each cache holds, for `/debug/cache` (`kache status`): one entry per resource and
    /// encoding, in resource order.
    pub fn cache_report(&self) -> serde_json::Value {
        let mut caches: Vec<serde_json::Value> = self
            .feeds
            .iter()
            .map(|e| {
                let (k, f) = (e.key(), e.value());
                let snap = f.cache.snapshot();
                let age = snap.window.newest_at().map(|t| t.elapsed().as_secs_f64());
                serde_json::json!({
                    "resource": k.plural,
                    "group": k.group,
                    "version": k.version,
                    "encoding": format!("{:?}", k.format).to_lowercase(),
                    "synced": f.synced(),
                    "loading": loading_report(f.loading()),
                    "refused": f.refused(),
                    "objects": snap.objects.len(),
                    "bytes": snap.bytes,
                    "resourceVersion": snap.rv.to_string(),
                    "lastEventAgeSeconds": age,
                    "staleSeconds": f.staleness().as_secs_f64(),
                    "window": {
                        "events": snap.window.len(),
                        "bytes": snap.window.bytes(),
                        "spanSeconds": snap.window.span().as_secs_f64(),
                        "oldestResourceVersion": snap.window.floor().to_string(),
                    },
                    "watches": f.cache.watchers(),
                })
            })
            .collect();
        let key = |v: &serde_json::Value| (v["group"].to_string(), v["resource"].to_string(), v["encoding"].to_string());
        caches.sort_by_key(key);
        let upstream = self.upstream_check();
        let passed: serde_json::Map<String, serde_json::Value> =
            PassThrough::LABELS.iter().map(|r| (r.to_string(), self.passed_through(r).into())).collect();
        let checked: serde_json::Map<String, serde_json::Value> =
            check::Outcome::LABELS.iter().map(|o| (o.to_string(), self.checks(o).into())).collect();
        serde_json::json!({
            "upstream": {"up": upstream.pass, "detail": upstream.detail},
            "inFlightReads": self.in_flight(),
            "watchBufferedBytes": self.settings.watch.buffers.queued(),
            "cacheHits": self.cache_hits(),
            "passThrough": passed,
            "consistentChecks": checked,
            "caches": caches,
        })
    }

    /// End every open watch (shutdown): the cache's, and those the upstream answers through
    /// kache (each between two events), as well as any passed through from now on. Clients
    /// resume against another replica.
    pub fn end_watches(&self) {
        self.ending.send_replace(true);
        for e in self.feeds.iter() {
            e.value().cache.end_watchers();
        }
    }

    /// Requests answered from cache so far.
    pub fn cache_hits(&self) -> u64 {
        self.hits.load(std::sync::atomic::Ordering::Relaxed)
    }

    /// Requests passed through for `reason` (a [`PassThrough`] label) so far.
    pub fn passed_through(&self, reason: &str) -> u64 {
        PassThrough::LABELS.iter().position(|l| *l == reason).map_or(0, |i| self.passed[i].load(std::sync::atomic::Ordering::Relaxed))
    }

    /// Consistent reads checked against the upstream's metadata with `outcome` (`same`,
    /// `proven`, `differed`, `failed`) so far.
    pub fn checks(&self, outcome: &str) -> u64 {
        check::Outcome::LABELS.iter().position(|l| *l == outcome).map_or(0, |i| self.checked[i].load(std::sync::atomic::Ordering::Relaxed))
    }

    /// Count a consistent read checked with `outcome`.
    pub(crate) fn count_check(&self, outcome: check::Outcome) {
        self.checked[outcome as usize].fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        metrics::counter!(telemetry::CONSISTENT_CHECKS, "outcome" => outcome.label()).increment(1);
    }

    /// Count a request passed through for `reason`.
    fn count_passthrough(&self, reason: PassThrough) {
        self.passed[reason.index()].fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        metrics::counter!(telemetry::PASSTHROUGH, "reason" => reason.label()).increment(1);
    }

    /// Requests answered from cache as PartialObjectMetadata(List) so far.
    pub fn metadata_hits(&self) -> u64 {
        self.metadata_hits.load(std::sync::atomic::Ordering::Relaxed)
    }

    /// The cache of a resource in an encoding, if it is running.
    pub fn cache(&self, group: &str, plural: &str, fmt: Format) -> Option<Arc<KindCache>> {
        self.feeds
            .iter()
            .find(|e| e.key().group == group && e.key().plural == plural && e.key().format == fmt)
            .map(|e| e.value().cache.clone())
    }

    /// The feed of `r` in `fmt`, started on first use.
    pub(crate) fn feed(&self, r: &ResourceRef, fmt: Format) -> Arc<Feed> {
        self.feed_held(r, fmt, false)
    }

    /// The feed of `r` in `fmt`; one started now waits for [`Feed::release`] when `held`.
    fn feed_held(&self, r: &ResourceRef, fmt: Format, held: bool) -> Arc<Feed> {
        let key = FeedKey { group: r.group.clone(), version: r.version.clone(), plural: r.plural.clone(), format: fmt };
        self.feeds
            .entry(key)
            .or_insert_with(|| {
                telemetry::register_cache(r, fmt);
                let cache = Arc::new(KindCache::new(r.clone(), 0, self.settings.limits));
                let feed = Feed::new(cache, fmt, self.upstream.clone());
                if held {
                    feed.hold();
                }
                tokio::spawn(feed.clone().run());
                feed
            })
            .clone()
    }

    /// Whether the upstream refused to fill `r`'s cache in `fmt` (see `Feed::refused`).
    pub(crate) fn refused(&self, r: &ResourceRef, fmt: Format) -> bool {
        let key = FeedKey { group: r.group.clone(), version: r.version.clone(), plural: r.plural.clone(), format: fmt };
        self.feeds.get(&key).is_some_and(|f| f.refused().is_some())
    }

    /// What a read passed through because its kind had not synced holds to make kache's
    /// own lists wait: every loading feed's (its kind's lists and the others' share the
    /// upstream and the cores with it) but `besides`'s (a WatchList sent that feed's list as
    /// it loads must not hold that list).
    fn warmup_yields(&self, besides: Option<&Arc<Feed>>) -> Vec<Arc<feed::yielding::Yield>> {
        let loading = self.feeds.iter().filter(|e| !e.value().synced() && besides.is_none_or(|f| !Arc::ptr_eq(e.value(), f)));
        loading.map(|e| e.value().yields()).collect()
    }

    pub(crate) fn resource(&self, p: &ResourcePath) -> Option<ResourceRef> {
        self.resources.load().iter().find(|r| r.group == p.group && r.version == p.version && r.plural == p.plural).cloned()
    }

    /// The upstream client (its health can be awaited: [`Upstream::health`]).
    pub fn upstream(&self) -> &Upstream {
        &self.upstream
    }

    /// The security the serving cache applies, if any.
    pub fn security(&self) -> Option<&Arc<Security>> {
        self.settings.security.as_ref()
    }

    /// Cached reads in flight now.
    pub fn in_flight(&self) -> usize {
        self.inflight.in_flight()
    }

    /// Large answers waiting for a place among their client's now
    /// (`--max-large-answers-per-client`).
    pub fn large_answers_waiting(&self) -> usize {
        self.large.waiting()
    }

    /// Check the URI's length, authenticate the client and apply the impersonation it asks
    /// for. `None` when security is off.
    async fn admit<B: RequestBody>(&self, req: &Request<B>) -> Result<Option<Caller>, Status> {
        let uri_len = req.uri().path_and_query().map_or(0, |p| p.as_str().len());
        if uri_len > self.settings.max_uri_bytes {
            return Err(Status::uri_too_long(self.settings.max_uri_bytes));
        }
        query::check_request_timeout(req.method(), req.uri().path(), req.uri().query())?;
        let Some(security) = &self.settings.security else { return Ok(None) };
        let peer = req.extensions().get::<Peer>();
        let cert = peer.and_then(|p| p.cert.clone());
        let ip = peer.map(|p| p.addr.ip());
        let caller = security.caller(cert.as_deref(), req.headers(), ip).await?;
        Ok(Some(caller.at(ip)))
    }

    /// The upstream's last answer to a discovery request, while the upstream is hung or
    /// unreachable (within `--serve-stale` of its going down) and the caller is
    /// authenticated, as the apiserver's discovery roles require.
    fn kept_doc(&self, doc: &DocKey, caller: Option<&Caller>) -> Option<Response<Body>> {
        self.upstream.unavailable()?;
        let down_for = match &*self.upstream.health().borrow() {
            health::Health::Down { since, .. } => since.elapsed(),
            _ => return None,
        };
        let authenticated = self.settings.security.is_none() || caller.is_some_and(|c| c.identity.in_group(crate::auth::AUTHENTICATED));
        (down_for < self.settings.serve_stale && authenticated).then(|| self.kept.answer(doc)).flatten()
    }

    /// A pass-through slot for the client and the credentials to send with, or the Status
    /// to answer instead.
    fn pass<B: RequestBody>(&self, req: &mut Request<B>, caller: Option<&Caller>) -> Result<(Credentials, limit::Permit), Status> {
        let permit =
            self.passthrough.acquire(Some(&client(req, caller))).inspect_err(|_| telemetry::limit_hit("max-passthrough-per-client"))?;
        Ok((self.outbound(req, caller)?, permit))
    }

    /// A place among the client's watches (cached or passed through), for a request that
    /// asks for one; `None` for other requests.
    fn watch_place<B>(&self, req: &Request<B>, caller: Option<&Caller>, watch: bool) -> Result<Option<limit::Permit>, Status> {
        let resource = matches!(classify(req.uri().path()), Some(Target::Resource(_)));
        if !(watch && resource && req.method() == http::Method::GET) {
            return Ok(None);
        }
        self.watches.acquire(Some(&client(req, caller))).map(Some).inspect_err(|_| telemetry::limit_hit("max-watches-per-client"))
    }

    /// Make a pass-through request carry the caller's identity; which credentials to send.
    fn outbound<B: RequestBody>(&self, req: &mut Request<B>, caller: Option<&Caller>) -> Result<Credentials, Status> {
        match (&self.settings.security, caller) {
            (Some(security), Some(caller)) => security.outbound(caller, req.headers_mut()),
            // No security: the request acts with kache's own rights, never anyone else's.
            _ => {
                impersonate::strip(req.headers_mut());
                Ok(Credentials::Kache)
            }
        }
    }
}

/// Who the per-client bounds count a request against: the authenticated user (an anonymous
/// one by its address, see [`Caller::at`]), or the address when clients are not
/// authenticated.
fn client<B>(req: &Request<B>, caller: Option<&Caller>) -> String {
    match caller {
        Some(c) => c.client.clone(),
        None => req.extensions().get::<Peer>().map(|p| p.addr.ip().to_string()).unwrap_or_default(),
    }
}

impl Serve {
    /// A request the cache declined for `reason`: a discovery document kept through an
    /// outage, or the upstream's answer (timed for the cost rule when that decided it).
    /// The client's pass-through place and its watch place (`place`, for a watch) are held
    /// for the answer's life: until its body ends, or an upgraded session (exec, attach,
    /// port-forward) closes.
    async fn passed<B: RequestBody>(
        &self,
        mut req: Request<B>,
        reason: PassThrough,
        caller: Option<&Caller>,
        place: Option<limit::Permit>,
        started: std::time::Instant,
        protobuf: bool,
    ) -> (Response<Body>, Source) {
        let doc = DocKey::of(&req);
        if let Some(resp) = doc.as_ref().and_then(|d| self.kept_doc(d, caller)) {
            return (resp, Source::Kept);
        }
        let (creds, permit) = match self.pass(&mut req, caller) {
            Ok(p) => p,
            Err(status) => return (status.into_response(protobuf), Source::Kache),
        };
        self.count_passthrough(reason);
        let yields = if reason == PassThrough::NotSynced { self.warmup_yields(None) } else { Vec::new() };
        let held = limit::Held::new([Some(permit), place]);
        let watch = req.method() == http::Method::GET && query::is_watch(req.uri().path(), req.uri().query());
        let resp = proxy::forward(&self.upstream, req, creds, held, watch.then(|| self.ending.subscribe())).await;
        let resp = match doc {
            Some(d) => self.kept.keep(d, resp),
            None => resp,
        };
        let resp = match reason {
            PassThrough::CheaperUpstream { bytes } if resp.status().is_success() => {
                let costs = self.costs.clone();
                resp.map(|b| http_body_util::BodyExt::boxed_unsync(cost::Observed::new(b, costs, bytes, started)))
            }
            PassThrough::NotSynced if resp.status().is_success() => resp.map(|b| feed::yielding::streaming(b, yields)),
            _ => resp,
        };
        (resp, Source::Upstream)
    }
}

impl Handler for Serve {
    async fn handle<B: RequestBody>(self: Arc<Self>, req: Request<B>) -> Response<Body> {
        let started = std::time::Instant::now();
        let path = match classify(req.uri().path()) {
            Some(Target::Resource(p)) => Some(p),
            _ => None,
        };
        // A request for no resource collection (discovery, /version, /openapi, health) is a
        // `get`, as the apiserver's request info calls non-resource GETs; only a resource
        // path without a name is a `list`.
        let named = path.as_ref().is_none_or(|p| p.name.is_some());
        let watch = query::watch_requested(req.uri().query());
        let verb = telemetry::verb(req.method(), named, watch);
        let protobuf = crate::api::media::wants_protobuf(req.headers());
        let pretty = !watch && crate::api::media::wants_pretty(req.uri().query(), req.headers());
        let gzip = accepts_gzip(req.headers());
        let watch_list = watch && query::initial_events_requested(req.uri().query());
        let admitted = self.admit(&req).await.and_then(|caller| {
            let place = self.watch_place(&req, caller.as_ref(), watch)?;
            Ok((caller, place))
        });
        let user = match (&admitted, self.settings.access_log) {
            (Ok((Some(caller), _)), true) => Some(caller.identity.username.clone()),
            _ => None,
        };
        let mut reason = None;
        let (resp, source) = match admitted {
            Err(status) => (status.into_response(protobuf), Source::Kache),
            Ok((caller, mut place)) => match self.cached(&req, path.as_ref(), caller.as_ref()).await {
                Ok(resp) => {
                    self.hits.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                    let mut resp = limit::hold(resp, place.take());
                    resp.headers_mut().insert(crate::api::FROM_CACHE_HEADER, http::HeaderValue::from_static("true"));
                    (resp, Source::Cache)
                }
                Err(why) => {
                    reason = Some(why);
                    self.passed(req, why, caller.as_ref(), place.take(), started, protobuf).await
                }
            },
        };
        let (resp, bytes) = shaped(resp, source, Shape { pretty, gzip, watch_list }, &self.encodes);
        let seconds = started.elapsed().as_secs_f64();
        self.metrics.record(verb, source.label(), resp.status().as_u16(), seconds, bytes);
        if self.settings.access_log {
            // The pass-through reason only for what the upstream answered (a kept discovery
            // document or a refusal by kache was not passed through).
            let reason = reason.filter(|_| source == Source::Upstream);
            let line = Access { user: user.as_deref(), verb, path: path.as_ref(), source, reason, code: resp.status().as_u16() };
            line.log(bytes, seconds);
        }
        resp
    }
}

/// One line of `--access-log`.
struct Access<'a> {
    user: Option<&'a str>,
    verb: &'static str,
    path: Option<&'a ResourcePath>,
    source: Source,
    reason: Option<PassThrough>,
    code: u16,
}

impl Access<'_> {
    /// Log the line (target `kache::access`, at info). Reads answered from cache never reach
    /// the apiserver's audit log: this line is their record. No query, name or body:
    /// selectors and names can carry data.
    fn log(&self, bytes: Option<u64>, seconds: f64) {
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

/// How the client asked for an answer: indented, compressed, and whether it is a WatchList.
#[derive(Debug, Clone, Copy)]
struct Shape {
    pretty: bool,
    gzip: bool,
    watch_list: bool,
}

/// `resp` as the client asked for it, with its body's length for the metrics when kache
/// answers it from memory. The upstream indents and compresses its own answers: those passed
/// through and those kept from before an outage are sent as the upstream sent them. kache's
/// are indented as they are sent (only for the humans who ask), and large cached ones
/// compressed for clients that ask; so are WatchLists answered from memory
/// ([`compress::gzip_watch`]), which the apiserver sends as they are.
fn shaped(resp: Response<Body>, source: Source, shape: Shape, encodes: &compress::Encodes) -> (Response<Body>, Option<u64>) {
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::serve::respond::respond;
    use http::header::{ACCEPT, ACCEPT_ENCODING, CONTENT_ENCODING, USER_AGENT};
    use http::StatusCode;
    use http_body_util::BodyExt;
    use std::io::{Read, Write};

    /// A kept document goes out as the upstream sent it: one gzip-encoded and larger than
    /// the compression threshold, to a client that accepts gzip and asks for indented output,
    /// is neither compressed again nor indented.
    #[tokio::test]
    async fn a_kept_document_is_sent_as_the_upstream_sent_it() {
        // JSON that stays larger than the threshold gzipped.
        let mut json = String::from("{\"paths\":{");
        let mut x: u64 = 1;
        for i in 0..40_000 {
            x = x.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
            json += &format!("\"/p{i}\":\"{x:016x}\",");
        }
        json += "\"/\":\"\"}}";
        let mut enc = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::new(1));
        enc.write_all(json.as_bytes()).unwrap();
        let gz = bytes::Bytes::from(enc.finish().unwrap());
        assert!(gz.len() as u64 > compress::THRESHOLD, "{}", gz.len());

        let req = Request::get("/openapi/v2")
            .header(ACCEPT, "application/json")
            .header(ACCEPT_ENCODING, "gzip")
            .header(USER_AGENT, "curl/8.5.0")
            .body(())
            .unwrap();
        assert!(crate::api::media::wants_pretty(req.uri().query(), req.headers()));
        assert!(accepts_gzip(req.headers()));
        let key = DocKey::of(&req).unwrap();
        let kept = Arc::new(LastDiscovery::default());
        let mut upstream = respond(StatusCode::OK, "application/json", crate::body::full(gz.clone()));
        upstream.headers_mut().insert(CONTENT_ENCODING, http::HeaderValue::from_static("gzip"));
        let _ = kept.keep(key.clone(), upstream).into_body().collect().await.unwrap();

        let (sent, bytes) = shaped(
            kept.answer(&key).expect("kept"),
            Source::Kept,
            Shape { pretty: true, gzip: true, watch_list: false },
            &compress::Encodes::new(4),
        );
        assert_eq!(bytes, Some(gz.len() as u64));
        assert_eq!(sent.headers().get_all(CONTENT_ENCODING).iter().count(), 1);
        assert_eq!(sent.headers().get(CONTENT_ENCODING).unwrap(), "gzip");
        let got = sent.into_body().collect().await.unwrap().to_bytes();
        assert_eq!(got, gz, "the upstream's bytes");
        let mut decoded = String::new();
        flate2::read::GzDecoder::new(&got[..]).read_to_string(&mut decoded).unwrap();
        assert_eq!(decoded, json, "decoded once, the document");
    }
}
