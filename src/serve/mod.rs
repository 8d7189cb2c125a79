//! `kache serve`: discover the upstream's resources, keep an informer-fed cache per resource
//! and encoding in demand, answer GET/LIST/WATCH from it when it can do so faithfully, and
//! pass everything else through.
//!
//! Request pipeline: `server` -> [`Serve::handle`] (URI limit, authentication and
//! impersonation) -> `api::route::classify` -> either authorization (SubjectAccessReview), the
//! in-flight cap and `handler::{get,list,watch}` on a synced, current-enough cache, or
//! `proxy::forward` carrying the client's identity.

pub(crate) mod admission;
pub(crate) mod check;
pub(crate) mod compress;
pub(crate) mod cost;
pub mod discovery;
pub mod handler;
pub mod lane;
mod persist;
pub use persist::StateSettings;
mod preload;
pub(crate) mod proxy;
mod read;
pub use read::PassThrough;
mod request;
pub(crate) use request::Asked;
pub use request::Source;
use request::{shaped, Access};
pub(crate) mod respond;
pub(crate) mod server;
mod settings;
pub use settings::ServeSettings;
mod tally;

use crate::api::media::Format;
use crate::api::query;
use crate::api::resource::ResourceRef;
use crate::api::route::ResourcePath;
use crate::api::status::Status;
use crate::auth::{impersonate, Caller, Security};
use crate::body::Body;
use crate::body::RequestBody;
use crate::cache::feed::{self, Feed};
use crate::cache::KindCache;
use crate::serve::admission::{limit, Admission};
use crate::serve::discovery::DiscoveryError;
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
use http::{Request, Response};
use std::sync::Arc;
use std::time::Duration;

/// Which cache a feed fills: one resource (group, version, plural) in one encoding.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub(crate) struct FeedKey {
    pub group: String,
    pub version: String,
    pub plural: String,
    pub format: Format,
}

/// The serving cache.
pub struct Serve {
    pub(crate) upstream: Upstream,
    pub(crate) resources: ArcSwap<Vec<ResourceRef>>,
    feeds: DashMap<FeedKey, Arc<Feed>>,
    pub(crate) settings: ServeSettings,
    /// The upstream's last discovery answers, for an outage.
    kept: Arc<LastDiscovery>,
    metrics: telemetry::RequestMetrics,
    /// What one client may hold or start.
    pub(crate) admission: Admission,
    /// Its own answers counted.
    pub(crate) tally: tally::Tally,
    /// The cost rule's measurements (consistent reads: proof or pass-through).
    pub(crate) costs: Arc<cost::Costs>,
    /// Answers being indented or compressed.
    encodes: compress::Encodes,
    /// True once kache shuts down: the watches passed through end (`proxy::forward`).
    ending: tokio::sync::watch::Sender<bool>,
    /// The caches' saved states (`--state-dir`).
    persist: Option<Arc<persist::Persist>>,
}

impl Serve {
    /// Discover the upstream's resources and start the preloaded informers.
    pub async fn start(upstream: Upstream, settings: ServeSettings) -> Result<Arc<Serve>, DiscoveryError> {
        let resources: Vec<ResourceRef> = discovery::discover(&upstream).await?.into_iter().map(Arc::new).collect();
        tracing::info!(resources = resources.len(), "upstream discovered");
        let settings_factor = settings.passthrough_factor;
        let encodes = settings.encodes.clone();
        let admission = Admission::new(&settings);
        let persist = settings.state.clone().map(|s| Arc::new(persist::Persist::new(s)));
        let serve = Arc::new(Serve {
            upstream,
            resources: ArcSwap::from_pointee(resources),
            feeds: DashMap::new(),
            settings,
            kept: Default::default(),
            metrics: Default::default(),
            admission,
            tally: Default::default(),
            costs: Arc::new(cost::Costs::new(settings_factor)),
            encodes,
            ending: tokio::sync::watch::Sender::new(false),
            persist,
        });
        preload::preload(&serve).await;
        if let Some(every) = serve.persist.as_ref().and_then(|p| p.every()) {
            tokio::spawn(Serve::save_every(Arc::downgrade(&serve), every));
        }
        telemetry::register_limits();
        tokio::spawn(discovery::rediscover(Arc::downgrade(&serve)));
        tokio::spawn(health::monitor(Arc::downgrade(&serve), |s| &s.upstream));
        Ok(serve)
    }

    /// Write every synced cache's state (`--state-dir`; nothing without it).
    pub async fn save_state(&self) {
        if let Some(p) = &self.persist {
            let feeds: Vec<Arc<Feed>> = self.feeds.iter().map(|e| e.value().clone()).collect();
            p.save(feeds, &self.upstream).await;
        }
    }

    /// Write the states every `every`, while `serve` lives.
    async fn save_every(serve: std::sync::Weak<Serve>, every: Duration) {
        let mut tick = tokio::time::interval_at(tokio::time::Instant::now() + every, every);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tick.tick().await;
            let Some(serve) = serve.upgrade() else { return };
            serve.save_state().await;
        }
    }

    /// Wait until every started feed has synced, or `timeout` passes.
    pub async fn wait_synced(&self, timeout: Duration) -> bool {
        let feeds: Vec<Arc<Feed>> = self.feeds.iter().map(|e| e.value().clone()).collect();
        futures_util::future::join_all(feeds.iter().map(|f| f.wait_synced(timeout))).await.into_iter().all(|ok| ok)
    }

    /// Wait until every started feed's resource is trusted by the revision ledger
    /// (`upstream::ledger`; Events' never are), or `timeout` passes.
    pub async fn wait_ledger(&self, timeout: Duration) -> bool {
        let feeds: Vec<Arc<Feed>> = self.feeds.iter().map(|e| e.value().clone()).collect();
        futures_util::future::join_all(feeds.iter().map(|f| f.wait_in_ledger(timeout))).await.into_iter().all(|ok| ok)
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

    /// Every running feed and the cache it fills (for the admin listener's reports).
    pub(crate) fn feeds(&self) -> Vec<(FeedKey, Arc<Feed>)> {
        self.feeds.iter().map(|e| (e.key().clone(), e.value().clone())).collect()
    }

    /// Answer one request in-process, as a connection would have it answered: a request in,
    /// the response out, no socket (tests, and embedding kache in another server). Without
    /// a connection it has no peer address: per-client bounds count it under the
    /// authenticated user, or under no address.
    pub async fn call<B: RequestBody>(self: &Arc<Self>, req: Request<B>) -> Response<Body> {
        Handler::handle(self.clone(), req).await
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
        self.tally.hits()
    }

    /// Requests passed through for `reason` (a [`PassThrough`] label) so far.
    pub fn passed_through(&self, reason: &str) -> u64 {
        self.tally.passed_through(reason)
    }

    /// Consistent reads checked against the upstream's metadata with `outcome` (`same`,
    /// `proven`, `differed`, `failed`, `accounted`) so far.
    pub fn checks(&self, outcome: &str) -> u64 {
        self.tally.checks(outcome)
    }

    /// Requests answered from cache as PartialObjectMetadata(List) so far.
    pub fn metadata_hits(&self) -> u64 {
        self.tally.metadata_hits()
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
        self.admission.inflight.in_flight()
    }

    /// Large answers waiting for a place among their client's now
    /// (`--max-large-answers-per-client`).
    pub fn large_answers_waiting(&self) -> usize {
        self.admission.large.waiting()
    }

    /// ReadyCheck the URI's length, authenticate the client and apply the impersonation it asks
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
        let permit = self
            .admission
            .passthrough
            .acquire(Some(&client(req, caller)))
            .inspect_err(|_| telemetry::limit_hit("max-passthrough-per-client"))?;
        Ok((self.outbound(req, caller)?, permit))
    }

    /// A place among the client's watches (cached or passed through), for a request that
    /// asks for one; `None` for other requests.
    fn watch_place<B>(&self, req: &Request<B>, asked: &Asked, caller: Option<&Caller>) -> Result<Option<limit::Permit>, Status> {
        if !(asked.watch && asked.path.is_some() && req.method() == http::Method::GET) {
            return Ok(None);
        }
        self.admission.watches.acquire(Some(&client(req, caller))).map(Some).inspect_err(|_| telemetry::limit_hit("max-watches-per-client"))
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
    /// A request the cache declined for `reason`: a discovery document kept through an
    /// outage, or the upstream's answer (timed for the cost rule when that decided it).
    /// The client's pass-through place and its watch place (`place`, for a watch) are held
    /// for the answer's life: until its body ends, or an upgraded session (exec, attach,
    /// port-forward) closes.
    async fn passed<B: RequestBody>(
        &self,
        mut req: Request<B>,
        asked: &Asked,
        reason: PassThrough,
        caller: Option<&Caller>,
        place: Option<limit::Permit>,
    ) -> (Response<Body>, Source) {
        let doc = DocKey::of(&req);
        if let Some(resp) = doc.as_ref().and_then(|d| self.kept_doc(d, caller)) {
            return (resp, Source::Kept);
        }
        let (creds, permit) = match self.pass(&mut req, caller) {
            Ok(p) => p,
            Err(status) => return (status.into_response(asked.protobuf), Source::Kache),
        };
        self.tally.passthrough(reason);
        let yields = if reason == PassThrough::NotSynced { self.warmup_yields(None) } else { Vec::new() };
        let held = limit::Held::new([Some(permit), place]);
        let watch = req.method() == http::Method::GET && (asked.watch || query::watch_path(req.uri().path()));
        let resp = proxy::forward(&self.upstream, req, creds, held, watch.then(|| self.ending.subscribe())).await;
        let resp = match doc {
            Some(d) => self.kept.keep(d, resp),
            None => resp,
        };
        let resp = match reason {
            PassThrough::CheaperUpstream { bytes } if resp.status().is_success() => {
                let costs = self.costs.clone();
                resp.map(|b| cost::Observed::wrap(b, costs, bytes, asked.started))
            }
            PassThrough::NotSynced if resp.status().is_success() => resp.map(|b| feed::yielding::streaming(b, yields)),
            _ => resp,
        };
        (resp, Source::Upstream)
    }
}

impl Handler for Serve {
    async fn handle<B: RequestBody>(self: Arc<Self>, req: Request<B>) -> Response<Body> {
        let asked = Asked::of(&req);
        let verb = telemetry::verb(req.method(), asked.path.as_ref().is_none_or(|p| p.name.is_some()), asked.watch);
        let admitted = self.admit(&req).await.and_then(|caller| {
            let place = self.watch_place(&req, &asked, caller.as_ref())?;
            Ok((caller, place))
        });
        let user = match (&admitted, self.settings.access_log) {
            (Ok((Some(caller), _)), true) => Some(caller.identity.username.clone()),
            _ => None,
        };
        let mut reason = None;
        let (resp, source) = match admitted {
            Err(status) => (status.into_response(asked.protobuf), Source::Kache),
            Ok((caller, mut place)) => match self.cached(&req, &asked, caller.as_ref()).await {
                Ok(resp) => {
                    self.tally.hit();
                    let mut resp = limit::hold(resp, place.take());
                    resp.headers_mut().insert(crate::api::FROM_CACHE_HEADER, http::HeaderValue::from_static("true"));
                    (resp, Source::Cache)
                }
                Err(why) => {
                    reason = Some(why);
                    self.passed(req, &asked, why, caller.as_ref(), place.take()).await
                }
            },
        };
        let (resp, bytes) = shaped(resp, source, &asked, &self.encodes);
        let seconds = asked.started.elapsed().as_secs_f64();
        self.metrics.record(verb, source.label(), resp.status().as_u16(), seconds, bytes);
        if self.settings.access_log {
            // The pass-through reason only for what the upstream answered (a kept discovery
            // document or a refusal by kache was not passed through).
            let reason = reason.filter(|_| source == Source::Upstream);
            let line = Access { user: user.as_deref(), verb, path: asked.path.as_ref(), source, reason, code: resp.status().as_u16() };
            line.log(bytes, seconds);
        }
        resp
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

#[cfg(test)]
mod tests;
