//! `kache serve`: discover the upstream's resources, keep an informer-fed cache per resource
//! and encoding in demand, answer GET/LIST/WATCH from it when it can do so faithfully, and
//! pass everything else through.
//!
//! Request pipeline: `server` -> [`Serve::handle`] (URI limit, authentication and
//! impersonation) -> `route::classify` -> either authorization (SubjectAccessReview), the
//! in-flight cap and `handler::{get,list,watch}` on a synced, current-enough cache, or
//! `proxy::forward` carrying the client's identity.

pub mod body;
pub mod handler;
pub mod limit;
pub mod proxy;
pub mod query;
pub mod route;
pub mod server;
pub mod upstream;

use crate::auth::{impersonate, Attributes, Caller, Security};
use crate::serve::body::Body;
use crate::serve::limit::{Guarded, Inflight, InflightLimits};
use crate::serve::proxy::Credentials;
use crate::serve::server::Peer;
use crate::api::status::Status;
use crate::cache::Limits;
use handler::WatchSettings;
use crate::cache::informer::{Feed, InformerError};
use crate::serve::query::{negotiate, Format, ListMode, Negotiated, Options};
use crate::api::resource::{builtin_fields, Resource, ResourceRef};
use crate::serve::route::{classify, ResourcePath, Target};
use crate::serve::server::Handler;
use crate::serve::upstream::Upstream;
use crate::cache::KindCache;
use crate::telemetry;
use arc_swap::ArcSwap;
use dashmap::DashMap;
use http::{header, Method, Request, Response};
use http_body_util::BodyExt;
use hyper::body::Incoming;
use serde_json::Value;
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
}

type FeedKey = (String, String, String, Format);

/// The serving cache.
pub struct Serve {
    upstream: Upstream,
    resources: ArcSwap<Vec<ResourceRef>>,
    feeds: DashMap<FeedKey, Arc<Feed>>,
    settings: ServeSettings,
    hits: std::sync::atomic::AtomicU64,
    metrics: telemetry::RequestMetrics,
    inflight: Inflight,
}

/// Whether a group is one of Kubernetes' own (served in protobuf), not a custom resource's.
fn builtin_group(group: &str) -> bool {
    group.is_empty() || !group.contains('.') || group.ends_with(".k8s.io")
}

fn resources_of(list: &Value, group: &str, version: &str) -> Vec<Resource> {
    let mut out = Vec::new();
    for e in list["resources"].as_array().into_iter().flatten() {
        let name = e["name"].as_str().unwrap_or("");
        let verbs: Vec<&str> = e["verbs"].as_array().into_iter().flatten().filter_map(Value::as_str).collect();
        if name.is_empty() || name.contains('/') || !verbs.contains(&"list") || !verbs.contains(&"watch") {
            continue;
        }
        let kind = e["kind"].as_str().unwrap_or("").to_string();
        let strings = |k: &str| e[k].as_array().into_iter().flatten().filter_map(Value::as_str).map(str::to_string).collect::<Vec<_>>();
        out.push(Resource {
            group: group.to_string(),
            version: version.to_string(),
            plural: name.to_string(),
            singular: e["singularName"].as_str().unwrap_or("").to_string(),
            namespaced: e["namespaced"].as_bool().unwrap_or(false),
            protobuf: builtin_group(group),
            short_names: strings("shortNames"),
            categories: strings("categories"),
            fields: builtin_fields(group, &kind).iter().map(|s| s.to_string()).collect(),
            index: (group.is_empty() && kind == "Pod").then(|| "spec.nodeName".to_string()),
            kind,
        });
    }
    out
}

async fn get_json(upstream: &Upstream, path: &str) -> Result<Value, InformerError> {
    let resp = upstream.get(path, "application/json").await?;
    let code = resp.status().as_u16();
    let body = resp.into_body().collect().await.map_err(|e| InformerError::Transport(e.into()))?.to_bytes();
    if code != 200 {
        return Err(InformerError::Status { code, body: String::from_utf8_lossy(&body[..body.len().min(200)]).into() });
    }
    serde_json::from_slice(&body).map_err(|e| InformerError::Decode(e.to_string()))
}

/// Every listable and watchable resource the upstream serves (preferred versions).
pub async fn discover(upstream: &Upstream) -> Result<Vec<Resource>, InformerError> {
    let mut out = resources_of(&get_json(upstream, "/api/v1").await?, "", "v1");
    let groups = get_json(upstream, "/apis").await?;
    for g in groups["groups"].as_array().into_iter().flatten() {
        let (Some(name), Some(version)) = (g["name"].as_str(), g["preferredVersion"]["version"].as_str()) else { continue };
        match get_json(upstream, &format!("/apis/{name}/{version}")).await {
            Ok(list) => out.extend(resources_of(&list, name, version)),
            Err(e) => tracing::warn!(group = name, error = %e, "discovery of a group failed"),
        }
    }
    Ok(out)
}

/// How often the upstream's resources are discovered again, so kinds that appear later
/// (new CRDs, new API versions) are cached too.
const REDISCOVERY: Duration = Duration::from_secs(30);

/// Rediscover the upstream's resources every [`REDISCOVERY`] while `serve` lives. Caches of
/// kinds that disappear stay until their informers fail; requests for them pass through.
async fn rediscover(serve: std::sync::Weak<Serve>) {
    loop {
        tokio::time::sleep(REDISCOVERY).await;
        let Some(serve) = serve.upgrade() else { return };
        match discover(&serve.upstream).await {
            Ok(found) => {
                let found: Vec<ResourceRef> = found.into_iter().map(Arc::new).collect();
                if **serve.resources.load() != found {
                    tracing::info!(resources = found.len(), "upstream resources changed");
                    serve.resources.store(Arc::new(found));
                }
            }
            Err(e) => tracing::debug!(error = %e, "rediscovery failed; keeping the known resources"),
        }
    }
}

impl Serve {
    /// Discover the upstream's resources and start the preloaded informers.
    pub async fn start(upstream: Upstream, settings: ServeSettings) -> Result<Arc<Serve>, InformerError> {
        let resources: Vec<ResourceRef> = discover(&upstream).await?.into_iter().map(Arc::new).collect();
        tracing::info!(resources = resources.len(), "upstream discovered");
        let inflight = Inflight::new(settings.inflight);
        let serve = Arc::new(Serve { upstream, resources: ArcSwap::from_pointee(resources), feeds: DashMap::new(), settings, hits: Default::default(), metrics: Default::default(), inflight });
        for name in serve.settings.preload.clone() {
            let found = serve.resources.load().iter().find(|r| r.plural == name || format!("{}.{}", r.plural, r.group) == name).cloned();
            match found {
                Some(r) => {
                    for fmt in serve.settings.preload_formats.clone() {
                        if fmt == Format::Json || r.protobuf {
                            serve.feed(&r, fmt).mark_preloaded();
                        }
                    }
                }
                None => tracing::warn!(resource = %name, "preload: the upstream has no such listable resource"),
            }
        }
        tokio::spawn(rediscover(Arc::downgrade(&serve)));
        Ok(serve)
    }

    /// Wait until every started feed has synced, or `timeout` passes.
    pub async fn wait_synced(&self, timeout: Duration) -> bool {
        let feeds: Vec<Arc<Feed>> = self.feeds.iter().map(|e| e.value().clone()).collect();
        for f in feeds {
            if !f.wait_synced(timeout).await {
                return false;
            }
        }
        true
    }

    /// Readiness checks: (name, passing, detail) for every preloaded cache.
    pub fn readiness(&self) -> Vec<(String, bool, String)> {
        let mut out = Vec::new();
        for e in self.feeds.iter().filter(|e| e.value().is_preloaded()) {
            let (k, f) = (e.key(), e.value());
            let name = format!("cache {}{}{} {:?}", k.2, if k.0.is_empty() { "" } else { "." }, k.0, k.3).to_lowercase();
            let (pass, why) = match (f.synced(), f.healthy()) {
                (true, true) => (true, "ok"),
                (false, _) => (false, "not synced"),
                (true, false) => (false, "upstream unreachable"),
            };
            out.push((name, pass, why.to_string()));
        }
        out.sort();
        out
    }

    /// Set the cache gauges (objects, bytes, window) from every running cache.
    pub fn sample(&self) {
        for e in self.feeds.iter() {
            let (k, f) = (e.key(), e.value());
            let labels = [("resource", k.2.clone()), ("encoding", format!("{:?}", k.3).to_lowercase())];
            let snap = f.cache.snapshot();
            metrics::gauge!(telemetry::OBJECTS, &labels).set(snap.objects.len() as f64);
            metrics::gauge!(telemetry::BYTES, &labels).set(snap.bytes as f64);
            metrics::gauge!(telemetry::WINDOW_EVENTS, &labels).set(snap.window.len() as f64);
            metrics::gauge!(telemetry::WINDOW_SECONDS, &labels).set(snap.window.span().as_secs_f64());
            metrics::gauge!(telemetry::WATCHES_OPEN, &labels).set(f.cache.watchers() as f64);
        }
    }

    /// End every open watch (shutdown): clients resume against another replica.
    pub fn end_watches(&self) {
        for e in self.feeds.iter() {
            e.value().cache.end_watchers();
        }
    }

    /// Requests answered from cache so far.
    pub fn cache_hits(&self) -> u64 {
        self.hits.load(std::sync::atomic::Ordering::Relaxed)
    }

    /// The cache of a resource in an encoding, if it is running.
    pub fn cache(&self, group: &str, plural: &str, fmt: Format) -> Option<Arc<KindCache>> {
        self.feeds.iter().find(|e| e.key().0 == group && e.key().2 == plural && e.key().3 == fmt).map(|e| e.value().cache.clone())
    }

    /// The feed of `r` in `fmt`, started on first use.
    fn feed(&self, r: &ResourceRef, fmt: Format) -> Arc<Feed> {
        let key = (r.group.clone(), r.version.clone(), r.plural.clone(), fmt);
        self.feeds
            .entry(key)
            .or_insert_with(|| {
                let cache = Arc::new(KindCache::new(r.clone(), 0, self.settings.limits));
                let feed = Feed::new(cache, fmt, self.upstream.clone());
                tokio::spawn(feed.clone().run());
                feed
            })
            .clone()
    }

    fn resource(&self, p: &ResourcePath) -> Option<ResourceRef> {
        self.resources.load().iter().find(|r| r.group == p.group && r.version == p.version && r.plural == p.plural).cloned()
    }

    /// Whether the cache has caught up with the upstream's current RV (a consistent read).
    async fn fresh(&self, feed: &Feed) -> bool {
        match feed.upstream_rv().await {
            Ok(rv) => self.reached(feed, rv).await,
            Err(e) => {
                tracing::debug!(error = %e, "consistency probe failed; passing through");
                false
            }
        }
    }

    /// Whether the cache has reached `rv` (waiting a little for it): a request for a newer
    /// RV than the cache has is passed through rather than answered late or with 504.
    async fn reached(&self, feed: &Feed, rv: u64) -> bool {
        feed.cache.progress() >= rv || feed.cache.wait_for(rv, self.settings.consistent_wait).await
    }

    /// The security the serving cache applies, if any.
    pub fn security(&self) -> Option<&Arc<Security>> {
        self.settings.security.as_ref()
    }

    /// Cached reads in flight now.
    pub fn in_flight(&self) -> usize {
        self.inflight.in_flight()
    }

    /// Check the URI's length, authenticate the client and apply the impersonation it asks
    /// for. `None` when security is off.
    async fn admit(&self, req: &Request<Incoming>) -> Result<Option<Caller>, Status> {
        let uri_len = req.uri().path_and_query().map_or(0, |p| p.as_str().len());
        if uri_len > self.settings.max_uri_bytes {
            return Err(Status::uri_too_long(self.settings.max_uri_bytes));
        }
        let Some(security) = &self.settings.security else { return Ok(None) };
        let cert = req.extensions().get::<Peer>().and_then(|p| p.cert.clone());
        security.caller(cert.as_deref(), req.headers()).await.map(Some)
    }

    /// Make a pass-through request carry the caller's identity; which credentials to send.
    fn outbound(&self, req: &mut Request<Incoming>, caller: Option<&Caller>) -> Result<Credentials, Status> {
        match (&self.settings.security, caller) {
            (Some(security), Some(caller)) => security.outbound(caller, req.headers_mut()),
            // No security: the request acts with kache's own rights, never anyone else's.
            _ => {
                impersonate::strip(req.headers_mut());
                Ok(Credentials::Kache)
            }
        }
    }

    /// Answer from cache, or `None` to pass the request through. A request kache would
    /// answer is authorized first (before its options are judged, as in the apiserver).
    async fn cached(&self, req: &Request<Incoming>, p: Option<&ResourcePath>, caller: Option<&Caller>) -> Option<Response<Body>> {
        if req.method() != Method::GET {
            return None;
        }
        let p = p?;
        let r = self.resource(p).filter(|_| p.subresource.is_none())?;
        let scoped = if r.namespaced { p.namespace.is_some() || p.name.is_none() } else { p.namespace.is_none() };
        if !scoped {
            return None;
        }
        let accept = req.headers().get(header::ACCEPT).and_then(|v| v.to_str().ok());
        let Negotiated::Serve(fmt) = negotiate(accept, r.protobuf) else { return None };
        let protobuf = fmt == Format::Protobuf;
        let parsed = Options::parse(req.uri().query());
        // A watch of one named object (the legacy form) is the upstream's to answer.
        if p.name.is_some() && parsed.as_ref().is_ok_and(|o| o.watch) {
            return None;
        }
        if let (Some(security), Some(caller)) = (&self.settings.security, caller) {
            let attributes = Attributes::of_resource(req.method(), req.uri().path(), p.clone(), req.uri().query());
            if let Err(status) = security.authorize(caller, &attributes).await {
                return Some(status.into_response(protobuf));
            }
        }
        let opts = match parsed {
            Ok(o) => o,
            Err(status) => return Some(status.into_response(protobuf)),
        };
        // Fields kache does not know for this kind: the upstream decides (400 or an answer).
        if opts.fields.fields().any(|f| !r.supports_field(f)) {
            return None;
        }
        let feed = self.feed(&r, fmt);
        if !feed.synced() {
            return None;
        }
        // Watches are long-running and not counted, as in the apiserver's max-in-flight.
        let permit = if opts.watch {
            None
        } else {
            match self.inflight.acquire(caller.map(|c| c.identity.username.as_str())) {
                Ok(p) => Some(p),
                Err(status) => return Some(status.into_response(protobuf)),
            }
        };
        let cache = &feed.cache;
        let ns = p.namespace.as_deref();
        let result = match &p.name {
            Some(name) => {
                match opts.rv {
                    None if !self.fresh(&feed).await => return None,
                    Some(n) if !self.reached(&feed, n).await => return None,
                    _ => {}
                }
                handler::get(cache, ns, name, fmt)
            }
            None if opts.watch => {
                let current = match opts.rv {
                    None => self.fresh(&feed).await,
                    Some(n) => self.reached(&feed, n).await,
                };
                if !current {
                    return None;
                }
                handler::watch(cache.clone(), p.namespace.clone(), opts, fmt, self.settings.watch).await
            }
            None => {
                let past = match opts.list_mode() {
                    ListMode::Consistent if !self.fresh(&feed).await => return None,
                    ListMode::NotOlderThan(n) | ListMode::Exact(n) if !self.reached(&feed, n).await => return None,
                    ListMode::Exact(n) => Some(n),
                    ListMode::Continue => opts.cont.as_ref().and_then(|c| u64::try_from(c.rv).ok()),
                    _ => None,
                };
                // A past state the cache no longer keeps may still be in the upstream's history.
                if past.is_some_and(|n| n <= cache.progress() && cache.at(n).is_err()) {
                    return None;
                }
                handler::list(cache, ns, &opts, fmt).await
            }
        };
        let resp = result.unwrap_or_else(|status| status.into_response(protobuf));
        Some(match permit {
            Some(permit) => resp.map(|b| Guarded::wrap(b, permit)),
            None => resp,
        })
    }
}

impl Handler for Serve {
    async fn handle(self: Arc<Self>, mut req: Request<Incoming>) -> Response<Body> {
        let started = std::time::Instant::now();
        let path = match classify(req.uri().path()) {
            Some(Target::Resource(p)) => Some(p),
            _ => None,
        };
        let named = path.as_ref().is_some_and(|p| p.name.is_some());
        let watch = req.uri().query().is_some_and(|q| q.split('&').any(|p| p == "watch=true" || p == "watch=1"));
        let verb = telemetry::verb(req.method(), named, watch);
        let protobuf = crate::api::status::wants_protobuf(req.headers());
        let (resp, source) = match self.admit(&req).await {
            Err(status) => (status.into_response(protobuf), "kache"),
            Ok(caller) => match self.cached(&req, path.as_ref(), caller.as_ref()).await {
                Some(resp) => {
                    self.hits.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                    (resp, "cache")
                }
                None => match self.outbound(&mut req, caller.as_ref()) {
                    Ok(creds) => (proxy::forward(&self.upstream, req, creds).await, "upstream"),
                    Err(status) => (status.into_response(protobuf), "kache"),
                },
            },
        };
        let bytes = http_body::Body::size_hint(resp.body()).exact().filter(|_| source == "cache");
        self.metrics.record(verb, source, resp.status().as_u16(), started.elapsed().as_secs_f64(), bytes);
        resp
    }
}
