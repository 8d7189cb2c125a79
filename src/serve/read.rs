//! The cached-read step of the request path: whether a GET can be answered from memory, and
//! if so the answer. In order: [`Serve::plan`] (method, resource, scope, encoding, options),
//! authorization, field support, a synced feed, an in-flight permit, freshness
//! ([`Serve::current`]), then `handler::{get,list,watch}`. `None` at any step passes the
//! request through to the upstream, which then answers exactly as it would without kache.

use crate::api::resource::ResourceRef;
use crate::api::status::Status;
use crate::api::table::Printer;
use crate::auth::{Attributes, Caller};
use crate::cache::informer::Feed;
use crate::serve::body::Body;
use crate::serve::handler;
use crate::serve::handler::table::Include;
use crate::serve::limit::{Guarded, Permit};
use crate::serve::query::{negotiate, Format, ListMode, Negotiated, Options, View};
use crate::serve::route::ResourcePath;
use crate::serve::Serve;
use http::{header, Method, Request, Response};
use std::sync::Arc;

/// A request kache could answer from cache, before authorization.
struct Plan<'a> {
    path: &'a ResourcePath,
    resource: ResourceRef,
    format: Format,
    view: View,
    /// The parsed options, or the apiserver's answer to bad ones (given after authorization,
    /// as the apiserver judges options only for authorized requests).
    options: Result<Options, Status>,
}

impl Serve {
    /// Answer from cache, or `None` to pass the request through. A request kache would
    /// answer is authorized first (before its options are judged, as in the apiserver).
    pub(crate) async fn cached<B: Sync>(
        &self,
        req: &Request<B>,
        p: Option<&ResourcePath>,
        caller: Option<&Caller>,
    ) -> Option<Response<Body>> {
        let plan = self.plan(req, p?)?;
        // A Status takes the encoding of the Accept header's first range, whatever the kind
        // (the apiserver's error negotiation offers protobuf for custom resources too).
        let pb = crate::api::media::wants_protobuf(req.headers());
        if let Err(status) = self.authorize(req, plan.path, caller).await {
            return Some(status.into_response(pb));
        }
        let opts = match &plan.options {
            Ok(o) => o,
            Err(status) => return Some(status.clone().into_response(pb)),
        };
        // Fields kache does not know for this kind: the upstream decides (400 or an answer).
        if opts.fields.fields().any(|f| !plan.resource.supports_field(f)) {
            return None;
        }
        let feed = self.feed(&plan.resource, plan.format);
        // A cache the request has just started is not synced yet. A watch stays open for
        // minutes (an informer's first watch of a kind holds its stream until its timeout),
        // so a watch waits a little for a kind that lists quickly rather than taking an
        // upstream stream for its whole life; anything else passes through meanwhile.
        let synced = feed.synced() || opts.watch && feed.wait_synced(self.settings.consistent_wait).await;
        if !synced {
            return None;
        }
        // A custom resource's Table needs its CRD's columns (read when its cache listed).
        if matches!(plan.view, View::Table { .. }) && !feed.cache.snapshot().prints(&plan.resource.group, &plan.resource.plural) {
            return None;
        }
        // Served from memory through an outage, but only within --serve-stale-seconds.
        if let Err(status) = self.within_stale_bound(&feed) {
            return Some(status.into_response(pb));
        }
        let permit = match self.permit(opts, caller) {
            Ok(p) => p,
            Err(status) => return Some(status.into_response(pb)),
        };
        if !self.current(&feed, plan.path, opts).await {
            return None;
        }
        let view = match plan.view {
            View::Object => None,
            View::Metadata { .. } => Some("metadata"),
            View::Table { .. } => Some("table"),
        };
        if let Some(view) = view {
            if view == "metadata" {
                self.metadata_hits.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            }
            let verb = crate::telemetry::verb(req.method(), plan.path.name.is_some(), opts.watch);
            metrics::counter!(crate::telemetry::CACHED_VIEWS, "view" => view, "verb" => verb).increment(1);
        }
        let resp = self.answer(&feed, plan.path, opts, plan.format, plan.view).await.unwrap_or_else(|status| status.into_response(pb));
        Some(match permit {
            Some(permit) => resp.map(|b| Guarded::wrap(b, permit)),
            None => resp,
        })
    }

    /// What kache would serve: a GET of a cached kind, in the request's scope, in an
    /// encoding kache holds, as the objects or (for built-in kinds) their metadata, where
    /// the apiserver would answer it (PartialObjectMetadataList for a LIST,
    /// PartialObjectMetadata for a GET or WATCH; the other way round is its 406). The legacy
    /// watch of one named object is the upstream's.
    fn plan<'a, B>(&self, req: &Request<B>, p: &'a ResourcePath) -> Option<Plan<'a>> {
        if req.method() != Method::GET || p.subresource.is_some() {
            return None;
        }
        let resource = self.resource(p)?;
        if !p.in_scope(resource.namespaced) {
            return None;
        }
        let accept = req.headers().get(header::ACCEPT).and_then(|v| v.to_str().ok());
        // A kind whose protobuf the upstream refused (a 406 to its feed) is negotiated as the
        // upstream does for kinds without protobuf.
        let protobuf = resource.protobuf && !self.refused(&resource, Format::Protobuf);
        let Negotiated::Serve(format, view) = negotiate(accept, protobuf) else { return None };
        let options = Options::parse(req.uri().query());
        let watch = options.as_ref().is_ok_and(|o| o.watch);
        if p.name.is_some() && watch {
            return None;
        }
        let served = match view {
            View::Object => true,
            // Custom resources' metadata is held in JSON only (re-encoded in ObjectMeta's
            // field order): their protobuf metadata view is the upstream's.
            View::Metadata { list, .. } => (resource.protobuf || format == Format::Json) && list == (p.name.is_none() && !watch),
            // Tables of the kinds kache prints (GET, LIST and WATCH), with metadata or
            // nothing in their rows: built-in kinds with a printer, and custom resources
            // (when their CRD's columns were read: checked once the feed is found).
            View::Table { .. } => {
                (Printer::of(&resource.group, &resource.plural).is_some() || !resource.protobuf)
                    && options.as_ref().is_ok_and(|o| Include::parse(o.include_object.as_deref()).is_some())
            }
        };
        served.then_some(Plan { path: p, resource, format, view, options })
    }

    /// The client's SubjectAccessReview (cached), when security is on.
    async fn authorize<B>(&self, req: &Request<B>, p: &ResourcePath, caller: Option<&Caller>) -> Result<(), Status> {
        let (Some(security), Some(caller)) = (self.security(), caller) else { return Ok(()) };
        let attributes = Attributes::of_resource(req.method(), req.uri().path(), p.clone(), req.uri().query());
        security.authorize(caller, &attributes).await
    }

    /// A place among the reads in flight. Watches are long-running and not counted, as in
    /// the apiserver's max-in-flight.
    fn permit(&self, opts: &Options, caller: Option<&Caller>) -> Result<Option<Permit>, Status> {
        if opts.watch {
            return Ok(None);
        }
        self.inflight.acquire(caller.map(|c| c.client.as_str())).map(Some)
    }

    /// Whether the cache can answer at the resourceVersion the request needs: a consistent
    /// read needs the upstream's current RV, an RV given needs at least that one, and a past
    /// state must still be in the cache's history (else the upstream may still have it). A
    /// watch from before the cache's window is the upstream's too: its own window may still
    /// hold that RV, and if not its 410 names its own oldest RV, which kache cannot know.
    ///
    /// After a relist told as differences, RVs of the span it covered may have come from
    /// the upstream (a passed-through read), whose states there are not the cache's: a
    /// watch from where a relisted deletion may lie below it, and an exact-RV read in the
    /// span, are the upstream's too (see `cache::Gap`).
    async fn current(&self, feed: &Arc<Feed>, p: &ResourcePath, opts: &Options) -> bool {
        if opts.watch && p.name.is_none() && opts.rv.is_some_and(|n| n > 0 && n < feed.cache.snapshot().window.floor()) {
            return false;
        }
        if opts.watch && opts.rv.is_some_and(|n| n > 0 && !feed.cache.resumable(n)) {
            return false;
        }
        if p.name.is_some() || opts.watch {
            return match opts.rv {
                None => self.fresh(feed).await,
                Some(n) => self.reached(feed, n).await,
            };
        }
        let past = match opts.list_mode() {
            ListMode::Consistent => return self.fresh(feed).await,
            ListMode::NotOlderThan(n) => return self.reached(feed, n).await,
            ListMode::Exact(n) if !self.reached(feed, n).await => return false,
            ListMode::Exact(n) => Some(n),
            ListMode::Continue => opts.cont.as_ref().and_then(|c| u64::try_from(c.rv).ok()),
            ListMode::Any => None,
        };
        let cache = &feed.cache;
        !past.is_some_and(|n| !cache.vouches_for(n) || (n <= cache.progress() && cache.at(n).is_err()))
    }

    /// The answer from cache.
    async fn answer(&self, feed: &Feed, p: &ResourcePath, opts: &Options, format: Format, view: View) -> Result<Response<Body>, Status> {
        let cache = &feed.cache;
        let ns = p.namespace.as_deref();
        match &p.name {
            Some(name) => {
                handler::get(cache, ns, name, format, view, Include::parse(opts.include_object.as_deref()).unwrap_or(Include::Metadata))
            }
            None if opts.watch => {
                handler::watch(cache.clone(), p.namespace.clone(), opts.clone(), format, view, self.settings.watch.clone()).await
            }
            None => handler::list(cache, ns, opts, format, view).await,
        }
    }

    /// Whether the cache has caught up with the upstream's current RV (a consistent read).
    async fn fresh(&self, feed: &Arc<Feed>) -> bool {
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
    /// An upstream found hung or unreachable meanwhile cannot prove it: the request passes
    /// through at once (and gets its Status there) rather than waiting out the bound.
    async fn reached(&self, feed: &Arc<Feed>, rv: u64) -> bool {
        if feed.cache.progress() >= rv {
            return true;
        }
        tokio::select! {
            proven = feed.prove(rv, self.settings.consistent_wait) => proven,
            _ = self.upstream.until_unavailable() => false,
        }
    }
}
