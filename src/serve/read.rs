//! The cached-read step of the request path: whether a GET can be answered from memory, and
//! if so the answer. In order: [`Serve::plan`] (method, resource, scope, encoding, options),
//! authorization, field support, a synced feed, an in-flight permit, freshness
//! ([`Serve::fresh_enough`], with the cost rule of `serve::cost` for consistent reads), then
//! `handler::{get,list,watch}`. A [`PassThrough`] at any step sends the request to the
//! upstream, which then answers exactly as it would without kache; its reason is counted in
//! `kache_passthrough_total{reason}`.

use crate::api::media::{negotiate, Format, Negotiated, View};
use crate::api::query::{ListMode, Options};
use crate::api::resource::ResourceRef;
use crate::api::route::ResourcePath;
use crate::api::status::Status;
use crate::api::table::Printer;
use crate::auth::{Attributes, Caller};
use crate::body::Body;
use crate::cache::feed::growing::Growing;
use crate::cache::feed::{yielding, Feed, LedgerProof, SyncEstimate};
use crate::cache::object::{self, Object};
use crate::serve::admission::limit::{Held, Permit};
use crate::serve::check::{self, Outcome};
use crate::serve::cost::Decision;
use crate::serve::handler;
use crate::serve::handler::table::Include;
use crate::serve::handler::{EndAfter, Verified, WatchRequest, WatchSettings};
use crate::serve::respond::StatusResponse;
use crate::serve::server::Peer;
use crate::serve::Serve;
use http::{header, Method, Request, Response};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// How long a read of a kind's whole state waits for the first page of a list that has not
/// brought one yet (its estimate needs one): a kube-apiserver sends a list's first page
/// within this when nothing else lists, later when kache has just started and its own lists
/// share the upstream.
const FIRST_PAGE_WAIT: Duration = Duration::from_millis(100);

/// How long after a WatchList was sent a loading list its proof may still start: past it
/// the list has not ended, and the watch's own deadline ends it first.
const GROWING_PROOF_AFTER: Duration = Duration::from_secs(3600);

/// Why a request went to the upstream rather than being answered from cache: the `reason`
/// label of `kache_passthrough_total` (docs/operations.md, "Pass-through reasons", lists them).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PassThrough {
    /// A method other than GET: writes, and anything else that is not a read.
    Write,
    /// A GET of no resource: discovery, `/version`, `/openapi`, health, logs of the apiserver.
    NonResource,
    /// A subresource (`/status`, `/log`, `/exec`, `/scale`, ...).
    Subresource,
    /// A resource the upstream's discovery did not list as listable and watchable.
    UnknownResource,
    /// A path outside the resource's scope (a namespace for a cluster-scoped kind, ...).
    Scope,
    /// An encoding kache does not hold for the kind (the Accept header's choice).
    Encoding,
    /// A legacy watch of one named object (`/watch/.../NAME` or `watch=1` on a name).
    NamedWatch,
    /// A view kache does not build: Tables with `includeObject=Object`, Tables of kinds
    /// without a printer, protobuf metadata of custom resources, a list-or-single mismatch.
    View,
    /// A field selector on a field kache does not index for the kind.
    UnknownField,
    /// The kind's cache has not synced yet.
    NotSynced,
    /// A custom resource's Table before its CRD's printer columns were read.
    NoPrinter,
    /// A consistent read the upstream is expected to answer sooner than a freshness proof
    /// would arrive (`--consistent-passthrough-factor`), with the answer's bytes in the index.
    CheaperUpstream {
        /// The answer's bytes in kache's index (the cost rule's measure).
        bytes: u64,
    },
    /// A read that needs a newer state than the cache has, whose proof did not come in time.
    Unproven,
    /// A read that needs a proof while the upstream is found hung or unreachable, or whose
    /// probe failed: the upstream gives its own answer (or Status).
    Unavailable,
    /// A resourceVersion the cache no longer holds (a watch from before its window, an
    /// exact-RV or continue read of a state it has dropped): the upstream may still have it.
    Stale,
}

impl PassThrough {
    /// Every reason's label, in declaration order.
    pub const LABELS: [&'static str; 15] = [
        "write",
        "non_resource",
        "subresource",
        "unknown_resource",
        "scope",
        "encoding",
        "named_watch",
        "view",
        "unknown_field",
        "not_synced",
        "no_printer",
        "cheaper_upstream",
        "unproven",
        "unavailable",
        "stale",
    ];

    /// The position of this reason in [`PassThrough::LABELS`].
    pub fn index(self) -> usize {
        match self {
            PassThrough::Write => 0,
            PassThrough::NonResource => 1,
            PassThrough::Subresource => 2,
            PassThrough::UnknownResource => 3,
            PassThrough::Scope => 4,
            PassThrough::Encoding => 5,
            PassThrough::NamedWatch => 6,
            PassThrough::View => 7,
            PassThrough::UnknownField => 8,
            PassThrough::NotSynced => 9,
            PassThrough::NoPrinter => 10,
            PassThrough::CheaperUpstream { .. } => 11,
            PassThrough::Unproven => 12,
            PassThrough::Unavailable => 13,
            PassThrough::Stale => 14,
        }
    }

    /// The metric label.
    pub fn label(self) -> &'static str {
        Self::LABELS[self.index()]
    }
}

/// A request kache could answer from cache, before authorization.
struct Plan<'a> {
    path: &'a ResourcePath,
    /// The request's query string.
    query: Option<&'a str>,
    resource: ResourceRef,
    format: Format,
    view: View,
    /// The parsed options, or the apiserver's answer to bad ones (given after authorization,
    /// as the apiserver judges options only for authorized requests).
    options: &'a Result<Options, Status>,
    /// A watch's settings, with its connection's and its client's bounds.
    watch: WatchSettings,
}

/// What the freshness step leaves the answer to do.
#[derive(Default)]
struct Fresh {
    /// A consistent WatchList's end bookmark waits for this RV (see [`Serve::proving`]).
    end_after: Option<EndAfter>,
    /// A LIST's page the upstream's metadata showed current (`serve::check`).
    verified: Option<Verified>,
    /// The apiserver's answer when no state can do: a resourceVersion it has not reached.
    refused: Option<Status>,
}

/// Whether a watch from no resourceVersion sends the state and then the initial-events-end
/// bookmark: a WatchList (`sendInitialEvents=true`), or a legacy watch the apiserver takes
/// for one (neither sendInitialEvents nor resourceVersionMatch), with bookmarks allowed.
fn ends_initial_events(opts: &Options) -> bool {
    opts.bookmarks && (opts.send_initial_events == Some(true) || opts.send_initial_events.is_none() && opts.rv_match.is_none())
}

/// The cost rule's name for a kind: `plural.group`.
fn kind_key(r: &ResourceRef) -> String {
    format!("{}.{}", r.plural, r.group)
}

impl Serve {
    /// Answer from cache, or say why the request goes to the upstream. A request kache would
    /// answer is authorized first (before its options are judged, as in the apiserver).
    pub(crate) async fn cached<B: Sync>(
        &self,
        req: &Request<B>,
        asked: &super::Asked,
        caller: Option<&Caller>,
    ) -> Result<Response<Body>, PassThrough> {
        let arrived = Instant::now();
        let mut plan = match &asked.path {
            Some(p) => self.plan(req, p, &asked.options)?,
            None if req.method() == Method::GET => return Err(PassThrough::NonResource),
            None => return Err(PassThrough::Write),
        };
        // A Status takes the encoding of the Accept header's first range, whatever the kind
        // (the apiserver's error negotiation offers protobuf for custom resources too).
        let pb = asked.protobuf;
        if let Err(status) = self.authorize(req, plan.path, caller).await {
            return Ok(status.into_response(pb));
        }
        let opts = match &plan.options {
            Ok(o) => o,
            Err(status) => return Ok(status.clone().into_response(pb)),
        };
        let (feed, growing) = self.servable(&plan, opts).await?;
        // Served from memory through an outage, but only within --serve-stale.
        if let Err(status) = self.within_stale_bound(&feed) {
            return Ok(status.into_response(pb));
        }
        let permit = match self.permit(opts, caller) {
            Ok(p) => p,
            Err(status) => return Ok(status.into_response(pb)),
        };
        let client = super::client(req, caller);
        if opts.watch {
            let conn = req.extensions().get::<Peer>().and_then(|p| p.watch_buffers.clone());
            plan.watch.shared = [conn, self.admission.watch_flows.of(&client)];
        }
        if opts.watch && opts.rv.is_none() && !self.admission.watch_starts.take(&client, 1.0) {
            // Each needs a consistency proof: a request to the apiserver.
            return Ok(Status::too_many_requests("Too many requests, please try again later.", 1).into_response(pb));
        }
        let resp = match growing {
            Some(growing) => self.growing_answer(&feed, growing, &plan, opts, arrived).await?,
            None => {
                let (fresh, columns) =
                    tokio::join!(self.fresh_enough(&feed, &plan, opts, &client), Self::columns_current(&feed, &plan, opts));
                let fresh = fresh?;
                columns?;
                self.answer(&feed, &plan, opts, fresh).await
            }
        };
        self.count_view(req, &plan, opts);
        let resp = resp.unwrap_or_else(|status| status.into_response(pb));
        // A large answer waits for a place among its client's (see `fair`).
        let bytes = http_body::Body::size_hint(resp.body()).lower();
        let large = match self.admission.large.place(&client, bytes).await {
            Ok(place) => place,
            Err(status) => return Ok(status.into_response(pb)),
        };
        Ok(match (permit, large) {
            (None, None) => resp,
            (permit, large) => {
                let held = Held::new([permit]).with_large(large);
                resp.map(|b| held.until_sent(b))
            }
        })
    }

    /// The feed that can answer `plan`: one that knows every field the request selects on,
    /// has synced, and (for a custom resource's Table) has its CRD's columns; or one still
    /// loading with the initial list under way, for a WatchList it can be sent as it loads
    /// ([`Serve::growing`]).
    async fn servable(&self, plan: &Plan<'_>, opts: &Options) -> Result<(Arc<Feed>, Option<Arc<Growing>>), PassThrough> {
        // Fields kache does not know for this kind: the upstream decides (400 or an answer).
        if opts.fields.fields().any(|f| !plan.resource.supports_field(f)) {
            return Err(PassThrough::UnknownField);
        }
        let feed = self.feed(&plan.resource, plan.format);
        if !feed.synced() {
            if let Some(growing) = self.growing(&feed, plan, opts).await {
                return Ok((feed, Some(growing)));
            }
            if !self.wait_for_sync(&feed, plan, opts).await {
                return Err(PassThrough::NotSynced);
            }
        }
        // A custom resource's Table needs its CRD's columns (read when its cache listed).
        if matches!(plan.view, View::Table { .. }) && !feed.cache.snapshot().prints(&plan.resource.group, &plan.resource.plural) {
            return Err(PassThrough::NoPrinter);
        }
        Ok((feed, None))
    }

    /// A custom resource's Table is printed with its CRD's columns as they stand when the
    /// read asks for the upstream's state (any but `resourceVersion=0`): read alongside the
    /// freshness proof; columns that changed leave the Table to the upstream (the kind's
    /// cache relists when its watch ends, as the apiserver ends them on a CRD change).
    async fn columns_current(feed: &Feed, plan: &Plan<'_>, opts: &Options) -> Result<(), PassThrough> {
        let any = opts.rv == Some(0) && opts.cont.is_none();
        if !matches!(plan.view, View::Table { .. }) || opts.watch || any || feed.columns_current().await {
            return Ok(());
        }
        Err(PassThrough::NoPrinter)
    }

    /// The initial list under way, if a watch that starts with the state (a WatchList, or a
    /// watch from no resourceVersion or "0" that the apiserver takes for one) can be sent it
    /// as it arrives (`handler::watch_growing`) rather than be passed through: the
    /// upstream then encodes the state once, not once for kache and again for the client.
    /// Not a Table (its columns come with the cache's state).
    ///
    /// Not weighed by the cost rule: the list comes from the same upstream at the rate it
    /// would stream the client the same state, and kache reads it in a fraction of its
    /// transfer (protobuf: 6 us a pod); the list yields to nothing while it is sent
    /// (`cache::feed::yielding`), and the other kinds' lists yield to it. A kind's first
    /// request waits up to [`FIRST_PAGE_WAIT`] for its list to start.
    async fn growing(&self, feed: &Feed, plan: &Plan<'_>, opts: &Options) -> Option<Arc<Growing>> {
        let state = opts.send_initial_events == Some(true) || opts.send_initial_events.is_none() && opts.rv_match.is_none();
        let watch_list = opts.watch && plan.path.name.is_none() && state && matches!(opts.rv, None | Some(0));
        if !watch_list || matches!(plan.view, View::Table { .. }) {
            return None;
        }
        if let Some(growing) = feed.growing() {
            return Some(growing);
        }
        // A preloaded list still waiting for its turn goes now (`cache::feed::turns`).
        feed.release();
        feed.next_page(FIRST_PAGE_WAIT).await;
        feed.growing()
    }

    /// A WatchList sent the loading list of `feed` as it arrives (`handler::watch_growing`);
    /// the other kinds' lists wait while it streams, as for a client passed through.
    async fn growing_answer(
        &self,
        feed: &Arc<Feed>,
        growing: Arc<Growing>,
        plan: &Plan<'_>,
        opts: &Options,
        arrived: Instant,
    ) -> Result<Result<Response<Body>, Status>, PassThrough> {
        let end_after = self.growing_end(feed, &growing, opts, arrived).await?;
        let req = WatchRequest {
            namespace: plan.path.namespace.clone(),
            opts: opts.clone(),
            fmt: plan.format,
            view: plan.view,
            settings: plan.watch.clone(),
        };
        let resp = handler::watch_growing(feed.cache.clone(), growing, req, end_after).await;
        Ok(resp.map(|r| r.map(|b| yielding::streaming(b, self.warmup_yields(Some(feed))))))
    }

    /// A WatchList sent a loading list: what its initial-events-end bookmark waits for.
    /// Nothing when any state will do (`resourceVersion=0`) or the list began after the
    /// request came (its state is then at least as new); else the upstream's RV now, which
    /// the cache is proven to have reached once it holds the list (probes start then).
    async fn growing_end(
        &self,
        feed: &Arc<Feed>,
        growing: &Growing,
        opts: &Options,
        arrived: Instant,
    ) -> Result<Option<EndAfter>, PassThrough> {
        if opts.rv == Some(0) || growing.started >= arrived {
            return Ok(None);
        }
        let rv = feed.upstream_rv().await.map_err(|e| {
            tracing::debug!(error = %e, "consistency probe failed; passing through");
            PassThrough::Unavailable
        })?;
        let f = feed.clone();
        tokio::spawn(async move {
            if f.wait_synced(GROWING_PROOF_AFTER).await && f.cache.progress() < rv {
                f.want(rv);
            }
        });
        Ok(Some(EndAfter { rv, wait: self.settings.consistent_wait }))
    }

    /// A read of a kind kache is still listing (a cache the request has just started, or
    /// kache itself starting): whether to wait for the cache rather than pass it through.
    ///
    /// - A read of the whole collection (no namespace, name or selector; a LIST, or a watch
    ///   that starts with the state) waits when the list's end is expected sooner than the
    ///   upstream would answer it (the cost rule: the list's pages so far give the time left
    ///   and the answer's size, see `Costs::wait_for_sync`), at most as long as the upstream
    ///   is expected to take. An informer started with kache thus gets the list kache is
    ///   already halfway through instead of a second one from the upstream. With no page
    ///   yet after [`FIRST_PAGE_WAIT`], it passes through (and kache's lists yield to it
    ///   while it streams: `cache::feed::yielding`).
    /// - Any other watch stays open for minutes (an informer's holds its stream until its
    ///   timeout), so it waits up to `--consistent-wait` for a kind that lists within it
    ///   rather than take an upstream stream for its whole life.
    /// - Anything else (a small answer the upstream gives in milliseconds) passes through.
    async fn wait_for_sync(&self, feed: &Arc<Feed>, plan: &Plan<'_>, opts: &Options) -> bool {
        let bound = self.settings.consistent_wait;
        let whole = plan.path.name.is_none() && plan.path.namespace.is_none() && opts.labels.is_empty() && opts.fields.is_empty();
        let state = !opts.watch || opts.send_initial_events == Some(true) || matches!(opts.rv, None | Some(0));
        let watch_wait = |eta: Duration| (opts.watch && eta <= bound).then_some(bound);
        let mut estimate = feed.sync_estimate();
        if estimate == SyncEstimate::Unknown && (opts.watch || whole && state) {
            // The list's first page tells how long the rest will take (a kube-apiserver sends
            // it within milliseconds when not busy). A read of the whole state waits for it
            // only FIRST_PAGE_WAIT: a list that has not brought one page by then (kache
            // starting, its lists sharing the upstream) ends well after the upstream would
            // answer.
            feed.next_page(if whole && state { FIRST_PAGE_WAIT.min(bound) } else { bound }).await;
            estimate = feed.sync_estimate();
        }
        let wait = match estimate {
            SyncEstimate::Synced => return true,
            SyncEstimate::Within { eta, whole: list, bytes } if whole && state => {
                let kind = kind_key(&feed.cache.resource);
                self.costs.wait_for_sync(&kind, (eta, list), bytes, opts.rv.is_none()).or(watch_wait(eta))
            }
            SyncEstimate::Within { eta, .. } => watch_wait(eta),
            SyncEstimate::Unknown => (opts.watch && !(whole && state)).then_some(bound),
        };
        match wait {
            Some(wait) => feed.wait_synced(wait).await,
            None => false,
        }
    }

    /// Count a read answered as metadata or a Table.
    fn count_view<B>(&self, req: &Request<B>, plan: &Plan<'_>, opts: &Options) {
        let view = match plan.view {
            View::Object => return,
            View::Metadata { .. } => "metadata",
            View::Table { .. } => "table",
        };
        if view == "metadata" {
            self.tally.metadata_hit();
        }
        let verb = crate::telemetry::verb(req.method(), plan.path.name.is_some(), opts.watch);
        metrics::counter!(crate::telemetry::CACHED_VIEWS, "view" => view, "verb" => verb).increment(1);
    }

    /// What kache would serve: a GET of a cached kind, in the request's scope, in an
    /// encoding kache holds, as the objects or (for built-in kinds) their metadata, where
    /// the apiserver would answer it (PartialObjectMetadataList for a LIST,
    /// PartialObjectMetadata for a GET or WATCH; the other way round is its 406). The legacy
    /// watch of one named object is the upstream's.
    fn plan<'a, B>(
        &self,
        req: &'a Request<B>,
        p: &'a ResourcePath,
        options: &'a Option<Result<Options, Status>>,
    ) -> Result<Plan<'a>, PassThrough> {
        // Options are parsed for every resource GET, and only for those.
        let (true, Some(options)) = (req.method() == Method::GET, options) else { return Err(PassThrough::Write) };
        if p.subresource.is_some() {
            return Err(PassThrough::Subresource);
        }
        let resource = self.resource(p).ok_or(PassThrough::UnknownResource)?;
        if !p.in_scope(resource.namespaced) {
            return Err(PassThrough::Scope);
        }
        let accept = req.headers().get(header::ACCEPT).and_then(|v| v.to_str().ok());
        // A kind whose protobuf the upstream refused (a 406 to its feed) is negotiated as the
        // upstream does for kinds without protobuf.
        let protobuf = resource.protobuf && !self.refused(&resource, Format::Protobuf);
        let Negotiated::Serve(format, view) = negotiate(accept, protobuf) else { return Err(PassThrough::Encoding) };
        let watch = options.as_ref().is_ok_and(|o| o.watch);
        if p.name.is_some() && watch {
            return Err(PassThrough::NamedWatch);
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
        if !served {
            return Err(PassThrough::View);
        }
        let watch = WatchSettings { ending: Some(self.ending.subscribe()), ..self.settings.watch.clone() };
        Ok(Plan { path: p, query: req.uri().query(), resource, format, view, options, watch })
    }

    /// The client's SubjectAccessReview (cached), when security is on.
    async fn authorize<B>(&self, req: &Request<B>, p: &ResourcePath, caller: Option<&Caller>) -> Result<(), Status> {
        let (Some(security), Some(caller)) = (self.security(), caller) else { return Ok(()) };
        let attributes = Attributes::of_resource(req.method(), req.uri().path(), p, req.uri().query());
        security.authorize(caller, &attributes).await
    }

    /// A place among the reads in flight. Watches are long-running and not counted, as in
    /// the apiserver's max-in-flight.
    fn permit(&self, opts: &Options, caller: Option<&Caller>) -> Result<Option<Permit>, Status> {
        if opts.watch {
            return Ok(None);
        }
        self.admission.inflight.acquire(caller.map(|c| c.client.as_str())).map(Some)
    }

    /// The answer from cache.
    async fn answer(&self, feed: &Feed, plan: &Plan<'_>, opts: &Options, fresh: Fresh) -> Result<Response<Body>, Status> {
        let (p, format, view) = (plan.path, plan.format, plan.view);
        let cache = &feed.cache;
        let ns = p.namespace.as_deref();
        if let Some(verified) = fresh.verified {
            return handler::list_verified(cache, verified, ns, opts, (format, view));
        }
        if let Some(status) = fresh.refused {
            return Err(status);
        }
        let end_after = fresh.end_after;
        match &p.name {
            Some(name) => {
                handler::get(cache, ns, name, format, view, Include::parse(opts.include_object.as_deref()).unwrap_or(Include::Metadata))
            }
            None if opts.watch => {
                let req =
                    WatchRequest { namespace: p.namespace.clone(), opts: opts.clone(), fmt: format, view, settings: plan.watch.clone() };
                handler::watch(cache.clone(), req, end_after).await
            }
            None => handler::list_in(self.encodes.lane(), cache, ns, opts, format, view).await,
        }
    }

    /// Whether the cache can answer at the resourceVersion the request needs: a consistent
    /// read needs the upstream's current RV (or goes to the upstream when it answers
    /// sooner: [`Serve::consistent`]), an RV given needs at least that one, and a past state
    /// must still be in the cache's history (else the upstream may still have it). A watch
    /// from before the cache's window is the upstream's too: its own window may still hold
    /// that RV, and if not its 410 names its own oldest RV, which kache cannot know.
    ///
    /// After a relist told as differences, RVs of the span it covered may have come from
    /// the upstream (a passed-through read), whose states there are not the cache's: a
    /// watch from where a relisted deletion may lie below it, and an exact-RV read in the
    /// span, are the upstream's too (see `cache::Gap`).
    async fn fresh_enough(&self, feed: &Arc<Feed>, plan: &Plan<'_>, opts: &Options, client: &str) -> Result<Fresh, PassThrough> {
        let named = plan.path.name.is_some();
        if opts.watch && !named && opts.rv.is_some_and(|n| n > 0 && n < feed.cache.snapshot().window.floor()) {
            return Err(PassThrough::Stale);
        }
        if opts.watch && opts.rv.is_some_and(|n| n > 0 && !feed.cache.resumable(n)) {
            return Err(PassThrough::Stale);
        }
        let wait = self.settings.consistent_wait;
        let latest = |r: Result<(), PassThrough>| r.map(|()| Fresh::default());
        if named || opts.watch {
            return match opts.rv {
                // A watch's start is not weighed: kache exists to hold watches.
                None if opts.watch && ends_initial_events(opts) => {
                    self.proving(feed, wait).await.map(|end_after| Fresh { end_after, ..Fresh::default() })
                }
                None if opts.watch => latest(self.proven(feed, wait).await),
                None => self.consistent(feed, plan, opts, client).await,
                Some(n) if !opts.watch => self.not_older_than(feed, plan, opts, client, n).await,
                Some(n) => latest(self.reached(feed, n, wait).await),
            };
        }
        let past = match opts.list_mode() {
            ListMode::Consistent => return self.consistent(feed, plan, opts, client).await,
            ListMode::NotOlderThan(n) => return self.not_older_than(feed, plan, opts, client, n).await,
            ListMode::Exact(n) => {
                self.reached(feed, n, wait).await?;
                Some(n)
            }
            ListMode::Continue => opts.cont.as_ref().and_then(|c| u64::try_from(c.rv).ok()),
            ListMode::Any => None,
        };
        let cache = &feed.cache;
        match past {
            // A later page of a list read at a state the cache has not proven (a page a
            // check verified, or the upstream's): proven by the revision ledger if it can be,
            // else checked in its turn, or (with checks off) answered once the cache is
            // proven at that state.
            Some(n) if n > cache.progress() && self.settings.revision_ledger && feed.account_for(n).await => Ok(Fresh::default()),
            Some(n) if n > cache.progress() && cache.vouches_for(n) => match self.settings.check_cheaper_reads {
                true => self.checked(feed, plan, opts).await.map_err(|_| PassThrough::Unproven),
                false => latest(self.reached(feed, n, wait).await),
            },
            Some(n) if !cache.vouches_for(n) || (n <= cache.progress() && cache.at(n).is_err()) => Err(PassThrough::Stale),
            _ => Ok(Fresh::default()),
        }
    }

    /// A LIST's page checked against the upstream's metadata (`serve::check`), the outcome
    /// counted. A page cut by `limit` has its continue token at the upstream's RV: probes
    /// start proving the cache up to it, so that a long paged list's later pages (kubectl's
    /// 60 pages of 30,000 pods) come from a proven cache rather than a check each.
    async fn checked(&self, feed: &Arc<Feed>, plan: &Plan<'_>, opts: &Options) -> Result<Fresh, Outcome> {
        let result = check::verify(feed, plan.path.namespace.as_deref(), plan.query, opts).await;
        let outcome = match &result {
            Ok(Some(v)) => {
                if opts.limit > 0 {
                    feed.want(v.rv);
                }
                Outcome::Same
            }
            Ok(None) => Outcome::Proven,
            Err(o) => *o,
        };
        self.tally.checked(outcome);
        result.map(|verified| Fresh { verified, ..Fresh::default() })
    }

    /// A consistent WatchList: the upstream's current RV, which its end bookmark waits for
    /// while the state is already on its way (`handler::watch`), with probes started
    /// to prove it; `None` when the cache has reached it already.
    async fn proving(&self, feed: &Arc<Feed>, wait: Duration) -> Result<Option<EndAfter>, PassThrough> {
        let rv = feed.upstream_rv().await.map_err(|e| {
            tracing::debug!(error = %e, "consistency probe failed; passing through");
            PassThrough::Unavailable
        })?;
        if feed.cache.progress() >= rv || (self.settings.revision_ledger && feed.account_for(rv).await) {
            return Ok(None);
        }
        feed.want(rv);
        Ok(Some(EndAfter { rv, wait }))
    }

    /// A consistent read (no resourceVersion): answered from cache after a freshness proof,
    /// or passed through at once when the upstream is expected to answer it sooner (the
    /// cost rule, `serve::cost`) and `client` has not spent its budget of such reads. The
    /// proof is waited for no longer than the upstream would take; concurrent readers of a
    /// kind share its probes; a client's proofs past its rate queue ([`Serve::queue_for_proof`]).
    async fn consistent(&self, feed: &Arc<Feed>, plan: &Plan<'_>, opts: &Options, client: &str) -> Result<Fresh, PassThrough> {
        // A LIST is first proven by the revision ledger, when its kind's writes can be told
        // from the rest (`upstream::ledger`): one shared probe, no bookmark, no check.
        let named = plan.path.name.is_some();
        if !named {
            self.admission.queue_for_proof(client).await;
        }
        let mut known = None;
        if !named && self.settings.revision_ledger {
            match feed.ledger_proof().await {
                LedgerProof::Proven => {
                    self.tally.checked(Outcome::Accounted);
                    return Ok(Fresh::default());
                }
                LedgerProof::Open(rv) => known = Some(rv),
                LedgerProof::Unused => {}
            }
        }
        let kind = kind_key(&feed.cache.resource);
        // Summing stops well past the break-even: beyond it only the proof's bound changes.
        let bytes = match self.costs.break_even(&kind) {
            Some(even) => answer_bytes(feed, plan, opts, even.saturating_mul(4)),
            None => 0,
        };
        let bound = match self.costs.decide(&kind, bytes, self.settings.consistent_wait) {
            // Within the client's budget of such reads (`--max-cheaper-upstream-rate-per-client`);
            // past it the read waits for the proof and is answered from memory, so one client
            // cannot make the apiserver do work kache could do instead.
            // A LIST is checked against the upstream's metadata first; a GET (an etcd read
            // for the apiserver, as is a check of it) goes through.
            Decision::Upstream if self.admission.cheaper_upstream.take(&client.to_string(), bytes.max(1) as f64) => {
                if named || !self.settings.check_cheaper_reads {
                    return Err(PassThrough::CheaperUpstream { bytes });
                }
                return self.checked(feed, plan, opts).await.map_err(|_| PassThrough::CheaperUpstream { bytes });
            }
            Decision::Upstream => self.settings.consistent_wait,
            Decision::Prove(bound) => bound,
        };
        if named {
            self.admission.queue_for_proof(client).await;
        }
        let started = Instant::now();
        let proven = match known {
            Some(rv) => self.reached(feed, rv, bound).await,
            None => self.proven(feed, bound).await,
        };
        match proven {
            Ok(()) => self.costs.observe_proof(&kind, started.elapsed()),
            // Not in time: the proof takes longer than measured so far.
            Err(PassThrough::Unproven) => {
                let longer = Duration::from_secs_f64(self.costs.proof_wait(&kind) * 1.5).min(self.settings.consistent_wait);
                self.costs.observe_proof(&kind, started.elapsed().max(longer));
            }
            Err(_) => {}
        }
        proven.map(|()| Fresh::default())
    }

    /// A read of a state at least as new as `rv` (a GET with a resourceVersion, a LIST with
    /// `resourceVersionMatch=NotOlderThan`). A cache that has not reached `rv` proves itself
    /// as for a consistent read, the cost rule deciding between the proof and the upstream:
    /// the upstream's current state is at least as new as any RV it gave. An RV past the
    /// upstream's state is waited for as the apiserver waits (the consistent wait, from the
    /// read's arrival) and then refused with its 504, rather than passed on to wait again.
    async fn not_older_than(&self, feed: &Arc<Feed>, plan: &Plan<'_>, opts: &Options, client: &str, rv: u64) -> Result<Fresh, PassThrough> {
        if feed.cache.progress() >= rv {
            return Ok(Fresh::default());
        }
        let arrived = Instant::now();
        let fresh = self.consistent(feed, plan, opts, client).await?;
        if feed.cache.progress() >= rv || fresh.verified.as_ref().is_some_and(|v| v.rv >= rv) {
            return Ok(fresh);
        }
        let left = self.settings.consistent_wait.saturating_sub(arrived.elapsed());
        if feed.prove(rv, left).await {
            return Ok(Fresh::default());
        }
        Ok(Fresh { refused: Some(Status::too_large_rv(rv, feed.cache.progress())), ..Fresh::default() })
    }

    /// Consistent reads queued now for their client's turn (`--max-consistent-reads-per-client`).
    pub fn consistent_reads_queued(&self) -> usize {
        self.admission.consistent_reads_queued()
    }

    /// Whether the cache has caught up with the upstream's current RV, waiting at most
    /// `wait` for the proof.
    async fn proven(&self, feed: &Arc<Feed>, wait: Duration) -> Result<(), PassThrough> {
        match feed.upstream_rv().await {
            Ok(rv) => self.reached(feed, rv, wait).await,
            Err(e) => {
                tracing::debug!(error = %e, "consistency probe failed; passing through");
                Err(PassThrough::Unavailable)
            }
        }
    }

    /// Whether the cache has reached `rv` (waiting at most `wait` for it): a request for a
    /// newer RV than the cache has is passed through rather than answered late or with 504.
    /// An upstream found hung or unreachable meanwhile cannot prove it: the request passes
    /// through at once (and gets its Status there) rather than waiting out the bound.
    async fn reached(&self, feed: &Arc<Feed>, rv: u64, wait: Duration) -> Result<(), PassThrough> {
        if feed.cache.progress() >= rv {
            return Ok(());
        }
        tokio::select! {
            proven = feed.prove(rv, wait) => if proven { Ok(()) } else { Err(PassThrough::Unproven) },
            _ = self.upstream.until_unavailable() => Err(PassThrough::Unavailable),
        }
    }
}

/// The bytes kache's index holds for the answer to `plan` as the cache stands: the object
/// of a GET, the selected items of a LIST (its first page when it has a limit), counted up
/// to a little past `cap`. The upstream's cost of the same answer is about proportional.
fn answer_bytes(feed: &Feed, plan: &Plan<'_>, opts: &Options, cap: u64) -> u64 {
    let size = |o: &Object| match plan.format {
        Format::Json => o.json.as_ref().map_or(0, |b| b.len() as u64),
        Format::Protobuf => o.pb.as_ref().map_or(0, |b| b.len() as u64),
    };
    let snap = feed.cache.snapshot();
    let ns = plan.path.namespace.as_deref();
    if let Some(name) = &plan.path.name {
        return snap.get(&object::key(ns.unwrap_or(""), name)).map_or(0, |o| size(o));
    }
    let limit = usize::try_from(opts.limit).ok().filter(|l| *l > 0).unwrap_or(usize::MAX);
    let mut total = 0;
    for o in handler::candidates(&snap, ns, opts, feed.cache.resource.index.as_deref(), None).take(limit) {
        total += size(o);
        if total > cap {
            break;
        }
    }
    total
}
