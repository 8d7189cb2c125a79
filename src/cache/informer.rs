//! The reflector of one resource in one encoding: LIST (paged) then WATCH from the list's RV
//! with bookmarks, resuming from the last RV when a watch ends, relisting on 410 (the new
//! state swapped in whole), with exponential backoff and jitter on errors. Objects are kept
//! as the upstream's bytes; each is decoded once here only to extract its key and fields.

use crate::api::resource::Resource;
use crate::api::table::CustomColumns;
use crate::api::transcode::{pb_to_json, MessageType};
use crate::api::wire;
use crate::cache::object::Object;
use crate::cache::window::EventType;
use crate::cache::{KindCache, Relisted};
use crate::serve::body::BoxError;
use crate::serve::query::Format;
use crate::serve::upstream::{Counted, Upstream};
use crate::telemetry;
use bytes::{Buf, Bytes, BytesMut};
use http_body_util::BodyExt;
use serde::Deserialize;
use serde_json::value::RawValue;
use serde_json::Value;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::sync::watch;

/// Items per page of the initial LIST.
const PAGE: u64 = 500;

/// Changed objects a relist reads one by one at most; beyond that it lists them all.
const FETCH_AT_MOST: usize = 1000;

/// A metadata LIST in protobuf.
const METADATA_LIST_PB: &str = "application/vnd.kubernetes.protobuf;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1";

/// `timeoutSeconds` of a freshness probe: the apiserver's watch cache sends a bookmark 2 s
/// before a watch's deadline, so 3 is the shortest that gets one (about 1-2 s after the
/// start, on its bookmark timer's next tick).
const PROBE_TIMEOUT_SECONDS: u64 = 3;
/// A probe that has not ended this long after its deadline is abandoned.
const PROBE_DEADLINE: Duration = Duration::from_secs(PROBE_TIMEOUT_SECONDS + 5);
/// While readers wait, a new probe starts this often, so that one probe's bookmark is due
/// on each tick of the apiserver's bookmark timer (about every second): a reader then waits
/// for the next tick, not for a whole probe.
const PROBE_STAGGER: Duration = Duration::from_millis(1000);
/// Probes keep rolling this long after the last reader that needed one, so that the next
/// consistent read of a kind in use finds a bookmark already on its way.
const PROBE_LINGER: Duration = Duration::from_secs(10);

/// The longest `Retry-After` of a 429 an informer honours as given; a longer one is cut to
/// this. The apiserver's "storage is (re)initializing" asks 1 s after a short downtime
/// (growing with it, up to 30 s), and its cache is usually ready well before a long hint
/// has passed.
const MAX_RETRY_AFTER: Duration = Duration::from_secs(5);

/// Why an informer step failed.
#[derive(Debug, thiserror::Error)]
pub enum InformerError {
    /// The upstream could not be reached or the stream broke.
    #[error("upstream request failed: {0}")]
    Transport(#[from] BoxError),
    /// The upstream answered with an error status.
    #[error("upstream answered {code}: {body}")]
    Status {
        /// HTTP status.
        code: u16,
        /// The body as text (a Status's reason and message).
        body: String,
        /// Its `Retry-After`, in seconds.
        retry_after: Option<u64>,
    },
    /// A response body stopped coming: no bytes (for a watch, no event and no bookmark)
    /// within the bound.
    #[error("the upstream sent nothing for {0:?}")]
    Stalled(Duration),
    /// The upstream sent something that does not parse.
    #[error("cannot decode upstream data: {0}")]
    Decode(String),
    /// The watch's resourceVersion left the upstream's window: relist.
    #[error("resourceVersion expired")]
    Expired,
}

/// The field selector `metadata.name=NAME` as a query value: the name escaped as field
/// selectors read values, then URL-encoded (RBAC object names may hold spaces, `,`, `=` and
/// any character but `/`).
fn name_selector(name: &str) -> String {
    let selector = format!("metadata.name={}", crate::api::selector::escape_value(name));
    form_urlencoded::byte_serialize(selector.as_bytes()).collect()
}

/// Collection path of a resource across all namespaces.
pub fn collection_path(r: &Resource) -> String {
    if r.group.is_empty() {
        format!("/api/{}/{}", r.version, r.plural)
    } else {
        format!("/apis/{}/{}/{}", r.group, r.version, r.plural)
    }
}

/// A cache fed from the upstream, and whether it has synced.
pub struct Feed {
    /// The cache.
    pub cache: Arc<KindCache>,
    /// The encoding it holds.
    pub fmt: Format,
    synced: watch::Sender<bool>,
    healthy: AtomicBool,
    /// Since when the informer has not reached the upstream (its first failure since the
    /// last LIST or WATCH that did).
    broken_since: std::sync::Mutex<Option<tokio::time::Instant>>,
    /// Relisting after 410: the previous list is served meanwhile, but it gets no events.
    relisting: AtomicBool,
    preloaded: AtomicBool,
    probe: tokio::sync::Mutex<Option<(Instant, u64)>>,
    upstream: Upstream,
    /// The newest RV a reader waits to see proven.
    wanted: AtomicU64,
    /// Whether the probe loop runs.
    probing: AtomicBool,
    /// When the last reader that needed a probe arrived.
    demand: std::sync::Mutex<Instant>,
    /// Why the upstream will never fill this cache (it refused the encoding), once known.
    refused: std::sync::OnceLock<String>,
}

impl Feed {
    /// A feed for `cache` (not yet started).
    pub fn new(cache: Arc<KindCache>, fmt: Format, upstream: Upstream) -> Arc<Feed> {
        Arc::new(Feed {
            cache,
            fmt,
            synced: watch::Sender::new(false),
            healthy: AtomicBool::new(false),
            broken_since: std::sync::Mutex::new(None),
            relisting: AtomicBool::new(false),
            preloaded: AtomicBool::new(false),
            probe: tokio::sync::Mutex::new(None),
            upstream,
            wanted: AtomicU64::new(0),
            probing: AtomicBool::new(false),
            demand: std::sync::Mutex::new(Instant::now()),
            refused: std::sync::OnceLock::new(),
        })
    }

    /// Whether the last LIST or WATCH request reached the upstream.
    pub fn healthy(&self) -> bool {
        self.healthy.load(Ordering::Relaxed)
    }

    /// Why the upstream refused to fill this cache, if it did (the feed has stopped).
    pub fn refused(&self) -> Option<&str> {
        self.refused.get().map(String::as_str)
    }

    /// Whether the informer is relisting after its watch expired (410): the cache still
    /// answers from the previous list, which no longer gets events.
    pub fn relisting(&self) -> bool {
        self.relisting.load(Ordering::Relaxed)
    }

    /// Record whether the last LIST or WATCH reached the upstream.
    fn set_healthy(&self, ok: bool) {
        self.healthy.store(ok, Ordering::Relaxed);
        let mut since = self.broken_since.lock().unwrap_or_else(|e| e.into_inner());
        match (ok, *since) {
            (true, _) => *since = None,
            (false, None) => *since = Some(tokio::time::Instant::now()),
            (false, Some(_)) => {}
        }
    }

    /// How long this cache may have missed upstream changes: zero while its informer is
    /// connected to an upstream the health monitor finds up; else since the informer last
    /// failed or since the upstream was found down, whichever is longer ago (a hung upstream
    /// stalls an open watch before it fails).
    pub fn staleness(&self) -> Duration {
        let broken = self.broken_since.lock().unwrap_or_else(|e| e.into_inner()).map(|t| t.elapsed());
        let down = match &*self.upstream.health().borrow() {
            crate::serve::upstream::Health::Down { since, .. } => Some(since.elapsed()),
            _ => None,
        };
        broken.into_iter().chain(down).max().unwrap_or_default()
    }

    /// Count this feed in readiness.
    pub fn mark_preloaded(&self) {
        self.preloaded.store(true, Ordering::Relaxed);
    }

    /// Whether this feed counts in readiness.
    pub fn is_preloaded(&self) -> bool {
        self.preloaded.load(Ordering::Relaxed)
    }

    fn labels(&self) -> [(&'static str, String); 3] {
        telemetry::cache_labels(&self.cache.resource, self.fmt)
    }

    fn outcome_labels(&self, outcome: &'static str) -> [(&'static str, String); 4] {
        let [r, g, e] = self.labels();
        [r, g, e, ("outcome", outcome.to_string())]
    }

    /// Whether the initial list has been loaded.
    pub fn synced(&self) -> bool {
        *self.synced.borrow()
    }

    /// Wait until synced or `timeout` passes.
    pub async fn wait_synced(&self, timeout: Duration) -> bool {
        let mut rx = self.synced.subscribe();
        tokio::time::timeout(timeout, rx.wait_for(|s| *s)).await.is_ok_and(|r| r.is_ok())
    }

    /// The upstream's current resourceVersion, from a `limit=1` LIST made after this call
    /// started. Concurrent callers share probes: a caller reuses a probe that started after
    /// it arrived, so every answer is at least as new as the caller's arrival.
    pub async fn upstream_rv(&self) -> Result<u64, InformerError> {
        let arrived = Instant::now();
        let mut last = self.probe.lock().await;
        if let Some((started, rv)) = *last {
            if started >= arrived {
                return Ok(rv);
            }
        }
        if let Some(why) = self.upstream.suspected() {
            return Err(InformerError::Transport(why.into()));
        }
        let started = Instant::now();
        let path = format!("{}?limit=1", collection_path(&self.cache.resource));
        let body = tokio::select! {
            body = fetch(&self.upstream, &path, "application/json") => body?,
            why = self.upstream.until_unavailable() => return Err(InformerError::Transport(why.into())),
        };
        let list: ListJson<'_> = serde_json::from_slice(&body).map_err(|e| InformerError::Decode(e.to_string()))?;
        let rv = parse_rv(&list.metadata.resource_version)?;
        *last = Some((started, rv));
        metrics::gauge!(telemetry::RV_LAG, &self.labels()).set(rv.saturating_sub(self.cache.progress()) as f64);
        Ok(rv)
    }

    /// Wait until the cache is proven complete up to `rv` (at most `wait`), starting
    /// freshness probes if none run. `rv` is a resourceVersion the upstream had reached
    /// when the caller arrived ([`Feed::upstream_rv`]).
    ///
    /// Why a probe: the upstream's global RV moves with every write of any kind (leases,
    /// events), so a quiet kind's newest event stays far behind it, and its informer
    /// learns of the upstream's progress only from bookmarks, about once a minute. A probe
    /// is a short watch from the cache's own RV whose `timeoutSeconds` makes the
    /// apiserver's watch cache send a bookmark 2 s before its deadline (`nextBookmarkTime`
    /// in cache_watcher.go) at the RV it has processed. The stream is complete and ordered
    /// from the cache's RV, so its events (applied here unless the informer already did)
    /// and that bookmark prove there is nothing in between.
    ///
    /// The apiserver sends bookmarks on a timer that ticks about once a second, so one probe
    /// takes 1 to 2 s. Probes therefore roll: while readers wait, and for [`PROBE_LINGER`]
    /// after, a new one starts every [`PROBE_STAGGER`], so some probe's bookmark is due at
    /// every tick and a reader waits for the next tick (half a second on average). One loop
    /// per feed serves every reader; a probe lasts about 3 s, so about three of a kind are
    /// open at once (a hung one is abandoned after [`PROBE_DEADLINE`]).
    pub async fn prove(self: &Arc<Self>, rv: u64, wait: Duration) -> bool {
        if self.cache.progress() >= rv {
            return true;
        }
        self.wanted.fetch_max(rv, Ordering::Relaxed);
        *self.demand.lock().unwrap_or_else(|e| e.into_inner()) = Instant::now();
        if !self.probing.swap(true, Ordering::AcqRel) {
            tokio::spawn(self.clone().roll());
        }
        self.cache.wait_for(rv, wait).await
    }

    /// Whether probes should keep rolling: a reader still waits, or one came recently.
    fn probes_wanted(&self) -> bool {
        let recent = self.demand.lock().unwrap_or_else(|e| e.into_inner()).elapsed() < PROBE_LINGER;
        recent || self.wanted.load(Ordering::Relaxed) > self.cache.progress()
    }

    /// Start a probe every [`PROBE_STAGGER`] while [`Feed::probes_wanted`].
    async fn roll(self: Arc<Self>) {
        loop {
            if !self.probes_wanted() {
                self.probing.store(false, Ordering::Release);
                // A reader that arrived between the check and the store starts no loop of
                // its own (it saw one running): take it up again.
                if self.probes_wanted() && !self.probing.swap(true, Ordering::AcqRel) {
                    continue;
                }
                return;
            }
            tokio::spawn(self.clone().probe());
            tokio::time::sleep(PROBE_STAGGER).await;
        }
    }

    /// One probe: a short watch from the cache's RV, applying its events and bookmark.
    async fn probe(self: Arc<Self>) {
        let labels = self.labels();
        let mut from = self.cache.progress();
        let started = Instant::now();
        metrics::counter!(telemetry::FRESHNESS_PROBES, &labels).increment(1);
        let result = tokio::time::timeout(PROBE_DEADLINE, self.watch_for(&mut from, PROBE_TIMEOUT_SECONDS)).await;
        metrics::histogram!(telemetry::FRESHNESS_PROBE_SECONDS, &labels).record(started.elapsed().as_secs_f64());
        match result {
            Ok(Ok(())) => {}
            Ok(Err(e)) => tracing::debug!(resource = %self.cache.resource.plural, error = %e, "freshness probe failed"),
            Err(_) => tracing::debug!(resource = %self.cache.resource.plural, "freshness probe hung; abandoned"),
        }
    }

    /// Run the reflector until the task is dropped.
    pub async fn run(self: Arc<Self>) {
        let r = self.cache.resource.clone();
        let mut backoff = Backoff::default();
        loop {
            let custom = self.custom_columns().await;
            let listed = match self.synced() && self.cache.resource.protobuf {
                // A relist: only the objects that changed are read whole, when few did.
                true => match self.list_changes().await {
                    Ok(Some(listed)) => Ok(listed),
                    Ok(None) => self.list(custom.as_ref()).await,
                    Err(e @ InformerError::Transport(_)) => Err(e),
                    // Anything else the metadata relist met (a refusal, an answer it could
                    // not read) is no reason not to list the objects whole.
                    Err(e) => {
                        tracing::info!(resource = %self.cache.resource.plural, error = %e, "relist by metadata failed; listing every object");
                        self.list(custom.as_ref()).await
                    }
                },
                false => self.list(custom.as_ref()).await,
            };
            self.set_healthy(listed.is_ok());
            match listed {
                Ok((objects, rv)) => {
                    let n = objects.len();
                    let outcome = if self.synced() {
                        // A relist after the watch expired (an upstream restart, a long
                        // outage): open watchers get the differences, not an end.
                        match self.cache.relist(objects, rv, custom) {
                            Relisted::Diffed { added, modified, deleted } => {
                                tracing::info!(resource = %r.plural, objects = n, rv, fmt = ?self.fmt, added, modified, deleted, "relisted; watchers were sent the differences");
                                "diffed"
                            }
                            Relisted::Replaced(why) => {
                                tracing::warn!(resource = %r.plural, objects = n, rv, fmt = ?self.fmt, "relisted; state replaced and watchers ended: {why}");
                                "replaced"
                            }
                        }
                    } else {
                        tracing::info!(resource = %r.plural, objects = n, rv, fmt = ?self.fmt, "informer synced");
                        self.cache.replace_printed(objects, rv, custom);
                        "initial"
                    };
                    metrics::counter!(telemetry::RELISTS, &self.outcome_labels(outcome)).increment(1);
                    self.relisting.store(false, Ordering::Relaxed);
                    self.synced.send_replace(true);
                    backoff = Backoff::default();
                    self.follow(rv, &mut backoff).await;
                    tracing::info!(resource = %r.plural, fmt = ?self.fmt, "relisting");
                    // Stale from now until the new list is in (see `staleness`).
                    self.relisting.store(true, Ordering::Relaxed);
                    self.set_healthy(false);
                }
                // The upstream does not serve this kind in this encoding (a custom resource
                // asked for in protobuf): no retry can work. Requests pass through.
                Err(InformerError::Status { code: 406, body, .. }) => {
                    let why = format!("the upstream refuses {} in {:?} (406 {body}); this cache stays off", r.plural, self.fmt);
                    tracing::warn!(resource = %r.plural, fmt = ?self.fmt, "{why}");
                    let _ = self.refused.set(why);
                    return;
                }
                Err(e) => {
                    metrics::counter!(telemetry::RELISTS, &self.outcome_labels("failed")).increment(1);
                    self.log_failure("list failed", None, &e);
                    self.pause(&e, &mut backoff).await;
                }
            }
        }
    }

    /// Watch from `rv`, resuming after each stream end, until the RV expires.
    async fn follow(&self, mut rv: u64, backoff: &mut Backoff) {
        loop {
            let watched = self.watch(&mut rv).await;
            self.set_healthy(!matches!(
                watched,
                Err(InformerError::Transport(_) | InformerError::Status { .. } | InformerError::Stalled(_))
            ));
            metrics::counter!(telemetry::WATCH_RESTARTS, &self.labels()).increment(1);
            // The apiserver ends a custom resource's watches when its CRD changes: its
            // printer columns are read again then, and the cells computed again if they
            // changed.
            if !matches!(watched, Err(InformerError::Expired)) && self.columns_changed().await {
                tracing::info!(resource = %self.cache.resource.plural, "the CRD's printer columns changed; relisting");
                return;
            }
            match watched {
                Ok(()) => *backoff = Backoff::default(),
                Err(InformerError::Expired) => return,
                Err(e) => {
                    self.log_failure("watch failed; resuming", Some(rv), &e);
                    self.pause(&e, backoff).await;
                }
            }
        }
    }

    /// Log a failed LIST or WATCH: a warning, unless the health monitor already reported
    /// the upstream down (then one line says so for every request, not one per retry).
    fn log_failure(&self, what: &str, rv: Option<u64>, e: &InformerError) {
        let r = &self.cache.resource.plural;
        if self.upstream.is_down() {
            tracing::debug!(resource = %r, rv, error = %e, "{what}");
        } else {
            tracing::warn!(resource = %r, rv, error = %e, "{what}");
        }
    }

    /// Wait before the next attempt after `e`: a 429's `Retry-After` (at most
    /// [`MAX_RETRY_AFTER`]; the backoff does not grow), else the backoff. While the upstream
    /// is down the wait ends as soon as the health monitor finds it back, so every cache
    /// (JSON and protobuf alike) resumes or relists together within a probe interval of the
    /// upstream's recovery rather than at the end of a long backoff.
    async fn pause(&self, e: &InformerError, backoff: &mut Backoff) {
        let wait = wait_after(e, backoff);
        let mut health = self.upstream.health();
        let was_down = health.borrow_and_update().is_down();
        let recovered = async {
            if was_down {
                let _ = health.wait_for(|h| !h.is_down()).await;
            } else {
                std::future::pending::<()>().await;
            }
        };
        tokio::select! {
            _ = tokio::time::sleep(wait) => {}
            _ = recovered => *backoff = Backoff::default(),
        }
    }

    /// The initial state: paged (bounded memory per response); if the pages' snapshot
    /// expires upstream before the last page (heavy churn, short history), once more as a
    /// single unpaged LIST, which cannot expire midway.
    async fn list(&self, custom: Option<&Arc<CustomColumns>>) -> Result<(Vec<Object>, u64), InformerError> {
        match self.list_pages(Some(PAGE), custom).await {
            Err(InformerError::Expired) => {
                tracing::info!(resource = %self.cache.resource.plural, "paged list expired mid-way; listing unpaged");
                self.list_pages(None, custom).await
            }
            other => other,
        }
    }

    /// A custom resource's printer columns for the cached version, read from its CRD
    /// (`None` for built-in kinds, and when the CRD cannot be read or has columns kache does
    /// not evaluate: then its Tables pass through).
    async fn custom_columns(&self) -> Option<Arc<CustomColumns>> {
        let r = &self.cache.resource;
        if r.protobuf {
            return None;
        }
        let path = format!("/apis/apiextensions.k8s.io/v1/customresourcedefinitions/{}.{}", r.plural, r.group);
        let crd = match fetch(&self.upstream, &path, "application/json").await {
            Ok(body) => serde_json::from_slice::<Value>(&body).ok()?,
            Err(e) => {
                tracing::info!(resource = %r.plural, error = %e, "the CRD could not be read; its Tables pass through");
                return None;
            }
        };
        match CustomColumns::of_crd(&crd, &r.version) {
            Ok(c) => Some(Arc::new(c)),
            Err(e) => {
                tracing::info!(resource = %r.plural, error = %e, "the CRD's Tables pass through");
                None
            }
        }
    }

    /// Whether the CRD's printer columns differ from those the cache's cells were computed
    /// with (checked when a watch ends).
    async fn columns_changed(&self) -> bool {
        if self.cache.resource.protobuf {
            return false;
        }
        self.custom_columns().await != self.cache.snapshot().custom
    }

    /// The upstream's state for a relist, reading whole only the objects that changed: a
    /// metadata LIST (protobuf PartialObjectMetadataList: name, namespace and RV of each
    /// object, a fraction of the objects' bytes) at some RV `L`, compared with the cache;
    /// each object that is new or at another RV is read at exactly `L`; the
    /// others are the cache's own. `None` when more than [`FETCH_AT_MOST`] (or a quarter of
    /// the objects) changed: a full LIST costs less then.
    ///
    /// After an upstream restart this is the difference between re-reading every object in
    /// every encoding (30,000 pods: 170 MB of protobuf and 520 MB of JSON for the restarted
    /// apiserver to encode) and a 100 MB metadata list plus the few objects that changed.
    async fn list_changes(&self) -> Result<Option<(Vec<Object>, u64)>, InformerError> {
        let r = self.cache.resource.clone();
        let base = collection_path(&r);
        let mut listed: Vec<Identity> = Vec::new();
        let mut cont = String::new();
        let rv = loop {
            let mut path = format!("{base}?limit={PAGE}");
            if !cont.is_empty() {
                path.push_str("&continue=");
                path.push_str(&cont);
            }
            let body = fetch(&self.upstream, &path, METADATA_LIST_PB).await?;
            let (_, _, raw) = wire::open_envelope(&body).ok_or_else(|| InformerError::Decode("bad metadata list envelope".into()))?;
            let (rv, next) = pb_identities(raw, &mut listed)?;
            if next.is_empty() {
                break rv;
            }
            cont = next;
        };
        let snap = self.cache.snapshot();
        let changed: Vec<crate::cache::object::Key> = listed
            .iter()
            // The same RV is the same write of the same object (a new uid came with its own
            // RV; `KindCache::relist` tells the two apart).
            .filter(|id| snap.get(&id.key).is_none_or(|o| o.rv != id.rv))
            .map(|id| id.key.clone())
            .collect();
        if changed.len() > FETCH_AT_MOST || changed.len() > listed.len() / 4 + 1 {
            tracing::info!(resource = %r.plural, changed = changed.len(), "many objects changed; listing them all");
            return Ok(None);
        }
        use futures_util::StreamExt;
        let fetched: Vec<Result<Vec<Object>, InformerError>> =
            futures_util::stream::iter(changed.iter().cloned().map(|key| self.object_at(key, rv))).buffer_unordered(8).collect().await;
        let mut fresh: std::collections::HashMap<crate::cache::object::Key, Object> = std::collections::HashMap::new();
        for objects in fetched {
            for o in objects? {
                fresh.insert(o.key.clone(), o);
            }
        }
        let mut objects = Vec::with_capacity(listed.len());
        for id in &listed {
            match fresh.remove(&id.key) {
                Some(o) => objects.push(o),
                None => match snap.get(&id.key) {
                    Some(o) if o.rv == id.rv => objects.push(Object::clone(o)),
                    // Read at `rv` but gone: the upstream's answers disagree; list it all.
                    _ => return Ok(None),
                },
            }
        }
        tracing::debug!(resource = %r.plural, listed = listed.len(), read = changed.len(), rv, "relist by metadata");
        Ok(Some((objects, rv)))
    }

    /// One object as it was at exactly `rv`: a LIST of its name with resourceVersionMatch
    /// Exact (a GET would give its current state, which may be newer than the RV the cache
    /// resumes watching from).
    async fn object_at(&self, key: crate::cache::object::Key, rv: u64) -> Result<Vec<Object>, InformerError> {
        let r = &self.cache.resource;
        let (ns, name) = match key.split_once('/') {
            Some((ns, name)) => (Some(ns), name),
            None => (None, &*key),
        };
        let base = match (ns, r.group.is_empty()) {
            (Some(ns), true) => format!("/api/{}/namespaces/{ns}/{}", r.version, r.plural),
            (Some(ns), false) => format!("/apis/{}/{}/namespaces/{ns}/{}", r.group, r.version, r.plural),
            (None, _) => collection_path(r),
        };
        let path = format!("{base}?fieldSelector={}&resourceVersion={rv}&resourceVersionMatch=Exact", name_selector(name));
        let mut objects = Vec::new();
        match self.fmt {
            Format::Json => {
                let body = fetch(&self.upstream, &path, "application/json").await?;
                let list: ListJson<'_> = serde_json::from_slice(&body).map_err(|e| InformerError::Decode(e.to_string()))?;
                for item in &list.items {
                    objects.push(json_object(r, item.get().as_bytes(), None)?);
                }
            }
            Format::Protobuf => {
                let body = fetch(&self.upstream, &path, wire::PROTOBUF).await?;
                let (_, _, raw) = wire::open_envelope(&body).ok_or_else(|| InformerError::Decode("bad protobuf list envelope".into()))?;
                pb_list(r, raw, &mut objects)?;
            }
        }
        Ok(objects)
    }

    async fn list_pages(&self, page: Option<u64>, custom: Option<&Arc<CustomColumns>>) -> Result<(Vec<Object>, u64), InformerError> {
        let r = self.cache.resource.clone();
        let base = collection_path(&r);
        let mut objects = Vec::new();
        let mut cont = String::new();
        loop {
            let mut path = match page {
                Some(n) => format!("{base}?limit={n}"),
                None => base.clone(),
            };
            if !cont.is_empty() {
                path.push_str("&continue=");
                path.push_str(&cont);
            }
            if page.is_none() && !cont.is_empty() {
                return Err(InformerError::Decode("an unpaged list returned a continue token".into()));
            }
            let (rv, next) = match self.fmt {
                Format::Json => {
                    let body = fetch(&self.upstream, &path, "application/json").await?;
                    let list: ListJson<'_> = serde_json::from_slice(&body).map_err(|e| InformerError::Decode(e.to_string()))?;
                    for item in &list.items {
                        objects.push(json_object(&r, item.get().as_bytes(), custom)?);
                    }
                    (parse_rv(&list.metadata.resource_version)?, list.metadata.cont.unwrap_or_default())
                }
                Format::Protobuf => {
                    let body = fetch(&self.upstream, &path, wire::PROTOBUF).await?;
                    let (_, _, raw) =
                        wire::open_envelope(&body).ok_or_else(|| InformerError::Decode("bad protobuf list envelope".into()))?;
                    pb_list(&r, raw, &mut objects)?
                }
            };
            if next.is_empty() {
                return Ok((objects, rv));
            }
            cont = next;
        }
    }

    async fn watch(&self, rv: &mut u64) -> Result<(), InformerError> {
        self.watch_for(rv, 240 + rand::random::<u64>() % 120).await
    }

    /// Watch from `rv` for `timeout` seconds (bookmarks on), applying what arrives.
    async fn watch_for(&self, rv: &mut u64, timeout: u64) -> Result<(), InformerError> {
        let r = self.cache.resource.clone();
        let path = format!("{}?watch=1&allowWatchBookmarks=true&resourceVersion={}&timeoutSeconds={timeout}", collection_path(&r), *rv);
        let accept = match self.fmt {
            Format::Json => "application/json",
            Format::Protobuf => wire::PROTOBUF_WATCH,
        };
        let resp = self.upstream.get(&path, accept).await?;
        if !resp.status().is_success() {
            return Err(error_response(resp, self.upstream.timeouts().own).await);
        }
        // The upstream answers again: readiness need not wait for this watch to end.
        self.set_healthy(true);
        let mut body = resp.into_body();
        let mut buf = BytesMut::new();
        let idle = self.upstream.timeouts().watch_idle;
        while let Some(data) = next_data(&mut body, idle).await? {
            buf.extend_from_slice(&data);
            while let Some(ev) = self.next_event(&mut buf)? {
                self.ingest(ev, rv)?;
            }
        }
        Ok(())
    }

    /// Cut the next complete event off the buffer.
    fn next_event(&self, buf: &mut BytesMut) -> Result<Option<RawEvent>, InformerError> {
        match self.fmt {
            Format::Json => {
                let Some(nl) = buf.iter().position(|b| *b == b'\n') else { return Ok(None) };
                let line = buf.split_to(nl + 1).freeze();
                let ev: EventJson<'_> = serde_json::from_slice(&line).map_err(|e| InformerError::Decode(e.to_string()))?;
                Ok(Some(RawEvent { kind: ev.kind.to_string(), object: line.slice_ref(ev.object.get().as_bytes()) }))
            }
            Format::Protobuf => {
                if buf.len() < 4 {
                    return Ok(None);
                }
                let len = u32::from_be_bytes([buf[0], buf[1], buf[2], buf[3]]) as usize;
                if buf.len() < 4 + len {
                    return Ok(None);
                }
                buf.advance(4);
                let frame = buf.split_to(len).freeze();
                pb_event(&frame).map(Some).ok_or_else(|| InformerError::Decode("bad protobuf watch frame".into()))
            }
        }
    }

    fn ingest(&self, ev: RawEvent, rv: &mut u64) -> Result<(), InformerError> {
        let r = &self.cache.resource;
        let kind = match ev.kind.as_str() {
            "ADDED" => EventType::Added,
            "MODIFIED" => EventType::Modified,
            "DELETED" => EventType::Deleted,
            "BOOKMARK" => {
                let meta = match self.fmt {
                    Format::Json => serde_json::from_slice::<Value>(&ev.object).ok(),
                    Format::Protobuf => wire::object_meta_json(&ev.object),
                };
                let brv = meta.as_ref().and_then(|v| v["metadata"]["resourceVersion"].as_str()).and_then(|s| s.parse().ok());
                if let Some(brv) = brv.filter(|b| *b > *rv) {
                    *rv = brv;
                    self.cache.advance(brv, true);
                }
                return Ok(());
            }
            "ERROR" => return Err(watch_error(&ev.object, self.fmt)),
            other => return Err(InformerError::Decode(format!("unknown watch event type {other:?}"))),
        };
        let object = match self.fmt {
            Format::Json => json_object(r, &strip_type_meta(&ev.object, r), self.cache.snapshot().custom.as_ref())?,
            Format::Protobuf => pb_object(r, &ev.object)?,
        };
        // An event at or below what we hold was already applied (a resumed stream, or the
        // other of the informer's watch and a freshness probe).
        let orv = object.rv;
        if self.cache.apply_newer(kind, object).is_some() {
            metrics::counter!(telemetry::EVENTS_INGESTED, &self.labels()).increment(1);
        }
        *rv = (*rv).max(orv);
        Ok(())
    }
}

struct RawEvent {
    kind: String,
    object: Bytes,
}

#[derive(Deserialize)]
struct ListMetaJson {
    #[serde(rename = "resourceVersion", default)]
    resource_version: String,
    #[serde(rename = "continue", default)]
    cont: Option<String>,
}

#[derive(Deserialize)]
struct ListJson<'a> {
    metadata: ListMetaJson,
    #[serde(borrow, default)]
    items: Vec<&'a RawValue>,
}

#[derive(Deserialize)]
struct EventJson<'a> {
    #[serde(rename = "type")]
    kind: &'a str,
    #[serde(borrow)]
    object: &'a RawValue,
}

fn parse_rv(s: &str) -> Result<u64, InformerError> {
    s.parse().map_err(|_| InformerError::Decode(format!("bad resourceVersion {s:?}")))
}

/// A GET of one of kache's own calls, read whole: its headers within the `own` deadline
/// (see [`Upstream::get`]) and its body as long as bytes keep coming (no gap longer than
/// the same deadline), so a large LIST may take as long as it needs, a stalled one not.
pub(crate) async fn fetch(upstream: &Upstream, path: &str, accept: &str) -> Result<Bytes, InformerError> {
    let resp = upstream.get(path, accept).await?;
    let idle = upstream.timeouts().own;
    if resp.status().as_u16() != 200 {
        return Err(error_response(resp, idle).await);
    }
    let mut body = resp.into_body();
    let mut out = BytesMut::new();
    while let Some(data) = next_data(&mut body, idle).await? {
        out.extend_from_slice(&data);
    }
    Ok(out.freeze())
}

/// The next data of an upstream body (`None` at its end), or [`InformerError::Stalled`]
/// when nothing comes within `idle`.
pub(crate) async fn next_data(body: &mut Counted, idle: Duration) -> Result<Option<Bytes>, InformerError> {
    loop {
        match tokio::time::timeout(idle, body.frame()).await {
            Err(_) => return Err(InformerError::Stalled(idle)),
            Ok(None) => return Ok(None),
            Ok(Some(frame)) => {
                if let Ok(data) = frame.map_err(|e| InformerError::Transport(e.into()))?.into_data() {
                    return Ok(Some(data));
                }
            }
        }
    }
}

/// The error an unsuccessful upstream answer means: 410 is [`InformerError::Expired`], the
/// rest a [`InformerError::Status`] with the body as text (a protobuf Status decoded, never
/// raw bytes in a log line) and its `Retry-After`.
async fn error_response(resp: http::Response<Counted>, idle: Duration) -> InformerError {
    let code = resp.status().as_u16();
    if code == 410 {
        return InformerError::Expired;
    }
    let retry_after = resp.headers().get(http::header::RETRY_AFTER).and_then(|v| v.to_str().ok()).and_then(|v| v.trim().parse().ok());
    let mut body = resp.into_body();
    let mut bytes = BytesMut::new();
    while let Ok(Some(data)) = next_data(&mut body, idle).await {
        if bytes.len() < 64 * 1024 {
            bytes.extend_from_slice(&data);
        }
    }
    InformerError::Status { code, body: crate::api::status::describe_body(&bytes), retry_after }
}

/// A JSON watch event's object as a list item: without its leading `kind` and `apiVersion`
/// for built-in kinds; custom resources' list items are the whole object.
fn strip_type_meta(obj: &[u8], r: &Resource) -> Vec<u8> {
    if r.custom() {
        return obj.to_vec();
    }
    let prefix = format!("{{\"kind\":\"{}\",\"apiVersion\":\"{}\",", r.kind, r.api_version());
    match obj.strip_prefix(prefix.as_bytes()) {
        Some(rest) => {
            let mut out = Vec::with_capacity(rest.len() + 1);
            out.push(b'{');
            out.extend_from_slice(rest);
            out
        }
        // Not in the apiserver's key order: re-encode once at ingest.
        None => serde_json::from_slice::<Value>(obj).map(|v| crate::cache::object::item_json(&v)).unwrap_or_else(|_| obj.to_vec()),
    }
}

fn json_object(r: &Resource, item: &[u8], custom: Option<&Arc<CustomColumns>>) -> Result<Object, InformerError> {
    let v: Value = serde_json::from_slice(item).map_err(|e| InformerError::Decode(e.to_string()))?;
    Object::printed(r, &v, Some(item), None, custom).map_err(|e| InformerError::Decode(e.to_string()))
}

fn pb_object(r: &Resource, bare: &[u8]) -> Result<Object, InformerError> {
    let v = match MessageType::for_kind(&r.group, &r.version, &r.kind) {
        Some(ty) => pb_to_json(ty, bare).map_err(|e| InformerError::Decode(e.to_string()))?,
        None => wire::object_meta_json(bare).ok_or_else(|| InformerError::Decode("bad object metadata".into()))?,
    };
    Object::new(r, &v, None, Some(bare)).map_err(|e| InformerError::Decode(e.to_string()))
}

/// Objects of a protobuf list message, and its (RV, continue).
fn pb_list(r: &Resource, raw: &[u8], out: &mut Vec<Object>) -> Result<(u64, String), InformerError> {
    let bad = || InformerError::Decode("bad protobuf list".into());
    let (mut pos, mut rv, mut cont) = (0, 0, String::new());
    while pos < raw.len() {
        let (field, _, range) = wire::next_field(raw, &mut pos).ok_or_else(bad)?;
        match field {
            1 => {
                let m = &raw[range];
                let mut p = 0;
                while p < m.len() {
                    let (f, _, r2) = wire::next_field(m, &mut p).ok_or_else(bad)?;
                    let text = || std::str::from_utf8(&m[r2.clone()]).map_err(|_| bad());
                    match f {
                        2 => rv = parse_rv(text()?)?,
                        3 => cont = text()?.to_string(),
                        _ => {}
                    }
                }
            }
            2 => out.push(pb_object(r, &raw[range])?),
            _ => {}
        }
    }
    Ok((rv, cont))
}

/// What a metadata list says of an object: enough to tell whether the cache's copy is it.
#[derive(Debug, PartialEq, Eq)]
struct Identity {
    key: crate::cache::object::Key,
    rv: u64,
}

/// The identities of a protobuf PartialObjectMetadataList's items, and its (RV, continue).
fn pb_identities(raw: &[u8], out: &mut Vec<Identity>) -> Result<(u64, String), InformerError> {
    let bad = || InformerError::Decode("bad protobuf metadata list".into());
    let (mut pos, mut rv, mut cont) = (0, 0, String::new());
    while pos < raw.len() {
        let (field, _, range) = wire::next_field(raw, &mut pos).ok_or_else(bad)?;
        let m = &raw[range];
        match field {
            1 => {
                let mut p = 0;
                while p < m.len() {
                    let (f, _, r) = wire::next_field(m, &mut p).ok_or_else(bad)?;
                    let text = std::str::from_utf8(&m[r]).map_err(|_| bad());
                    match f {
                        2 => rv = parse_rv(text?)?,
                        3 => cont = text?.to_string(),
                        _ => {}
                    }
                }
            }
            2 => {
                // PartialObjectMetadata { metadata: ObjectMeta = 1 }
                let (mut p, mut meta) = (0, None);
                while p < m.len() {
                    let (f, _, r) = wire::next_field(m, &mut p).ok_or_else(bad)?;
                    if f == 1 {
                        meta = Some(&m[r]);
                    }
                }
                let meta = meta.ok_or_else(bad)?;
                let (mut p, mut name, mut ns, mut orv) = (0, "", "", "");
                while p < meta.len() {
                    let (f, _, r) = wire::next_field(meta, &mut p).ok_or_else(bad)?;
                    let text = || std::str::from_utf8(&meta[r.clone()]).map_err(|_| bad());
                    match f {
                        1 => name = text()?,
                        3 => ns = text()?,
                        6 => orv = text()?,
                        _ => {}
                    }
                }
                out.push(Identity { key: crate::cache::object::key(ns, name), rv: parse_rv(orv)? });
            }
            _ => {}
        }
    }
    Ok((rv, cont))
}

/// (type, bare object) of a protobuf WatchEvent.
fn pb_event(frame: &Bytes) -> Option<RawEvent> {
    let (mut pos, mut kind, mut object) = (0, String::new(), Bytes::new());
    while pos < frame.len() {
        let (field, _, range) = wire::next_field(frame, &mut pos)?;
        match field {
            1 => kind = String::from_utf8(frame[range].to_vec()).ok()?,
            2 => {
                let ext = &frame[range];
                let mut p = 0;
                while p < ext.len() {
                    let (f, _, r) = wire::next_field(ext, &mut p)?;
                    if f == 1 {
                        let (_, _, bare) = wire::open_envelope(&ext[r])?;
                        object = frame.slice_ref(bare);
                    }
                }
            }
            _ => {}
        }
    }
    Some(RawEvent { kind, object })
}

fn watch_error(obj: &[u8], fmt: Format) -> InformerError {
    let code = match fmt {
        Format::Json => serde_json::from_slice::<Value>(obj).ok().and_then(|v| v["code"].as_u64()),
        Format::Protobuf => status_code_pb(obj),
    };
    match code {
        Some(410) => InformerError::Expired,
        _ => InformerError::Status { code: code.unwrap_or(0) as u16, body: crate::api::status::describe_body(obj), retry_after: None },
    }
}

/// `code` (field 6) of a protobuf Status.
fn status_code_pb(obj: &[u8]) -> Option<u64> {
    let mut pos = 0;
    while pos < obj.len() {
        let (field, wt, range) = wire::next_field(obj, &mut pos)?;
        if field == 6 && wt == prost::encoding::WireType::Varint {
            return wire::get_varint(obj, &mut range.start.clone());
        }
    }
    None
}

/// How long to wait after `e` before the next attempt: a 429's `Retry-After` (1 s when it
/// has none, at most [`MAX_RETRY_AFTER`]) without growing the backoff, else the backoff.
fn wait_after(e: &InformerError, backoff: &mut Backoff) -> Duration {
    match e {
        InformerError::Status { code: 429, retry_after, .. } => Duration::from_secs(retry_after.unwrap_or(1).max(1)).min(MAX_RETRY_AFTER),
        _ => backoff.next(),
    }
}

/// Exponential backoff with full jitter, 200 ms to 30 s.
#[derive(Debug, Default)]
struct Backoff {
    attempt: u32,
}

impl Backoff {
    fn next(&mut self) -> Duration {
        let cap = (200u64 << self.attempt.min(8)).min(30_000);
        self.attempt += 1;
        Duration::from_millis(cap / 2 + rand::random::<u64>() % (cap / 2 + 1))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testdata::capture;

    #[test]
    fn an_objects_name_is_escaped_for_its_field_selector_and_the_url() {
        let name = "system:a b,c=d\\e\u{e9}";
        let q = name_selector(name);
        assert!(q.bytes().all(|b| b.is_ascii_alphanumeric() || b"%+-._*".contains(&b)), "{q}");
        // As the apiserver reads it: the query value decoded, then the selector parsed.
        let query = format!("fieldSelector={q}");
        let (_, decoded) = form_urlencoded::parse(query.as_bytes()).next().unwrap();
        let selector = crate::api::selector::FieldSelector::parse(&decoded).unwrap();
        assert_eq!(selector.exact("metadata.name"), Some(name));
    }

    #[test]
    fn a_custom_resources_watch_object_is_stored_as_its_list_item() {
        // The same Widget, as a real apiserver sent it in a LIST and in a watch event.
        let r = Resource { protobuf: false, ..crate::sim::catalog::simulated().into_iter().find(|r| r.plural == "widgets").unwrap() };
        let listed: Value = serde_json::from_slice(&capture("cr-list-widgets").body).unwrap();
        let item = crate::api::json::to_vec(&listed["items"][0]);
        let event = capture("cr-watch-widget-rv0");
        let ev: EventJson<'_> = serde_json::from_slice(event.body.trim_ascii_end()).unwrap();
        assert_eq!(strip_type_meta(ev.object.get().as_bytes(), &r), item);
        assert!(item.starts_with(b"{\"apiVersion\":\"fid.example.com/v1\",\"kind\":\"Widget\","));
    }

    #[test]
    fn identities_of_a_protobuf_metadata_list_are_its_items_names_and_rvs() {
        // The same PartialObjectMetadataList a real apiserver sent in protobuf and JSON.
        let pb = crate::testdata::golden("11e-list-pods-as-partialobjectmetadatalist.pb.body");
        let json: Value = serde_json::from_slice(&crate::testdata::golden("11e-list-pods-as-partialobjectmetadatalist.json.body")).unwrap();
        let (_, kind, raw) = wire::open_envelope(&pb).unwrap();
        assert_eq!(kind, "PartialObjectMetadataList");
        let mut got = Vec::new();
        let (rv, cont) = pb_identities(raw, &mut got).unwrap();
        let want: Vec<Identity> = json["items"]
            .as_array()
            .unwrap()
            .iter()
            .map(|i| {
                let m = &i["metadata"];
                Identity {
                    key: crate::cache::object::key(m["namespace"].as_str().unwrap(), m["name"].as_str().unwrap()),
                    rv: m["resourceVersion"].as_str().unwrap().parse().unwrap(),
                }
            })
            .collect();
        assert!(!want.is_empty());
        assert_eq!(got, want);
        assert_eq!(rv.to_string(), json["metadata"]["resourceVersion"].as_str().unwrap());
        assert_eq!(cont, json["metadata"]["continue"].as_str().unwrap_or(""));
    }

    #[test]
    fn a_protobuf_status_is_logged_as_text() {
        // A real apiserver's 406 to a protobuf-only LIST of a custom resource.
        let c = capture("cr-gadgets-pb-only");
        assert_eq!(c.code, 406);
        assert_eq!(
            crate::api::status::describe_body(&c.body),
            "NotAcceptable: only the following media types are accepted: application/json, application/yaml, application/vnd.kubernetes.protobuf"
        );
        assert_eq!(crate::api::status::describe_body(b"{\"kind\":\"Status\"}"), "{\"kind\":\"Status\"}");
    }

    #[test]
    fn a_429_is_retried_after_its_retry_after_and_the_backoff_does_not_grow() {
        let mut backoff = Backoff::default();
        let initializing = |retry_after| InformerError::Status { code: 429, body: "storage is (re)initializing".into(), retry_after };
        for _ in 0..10 {
            assert_eq!(wait_after(&initializing(Some(1)), &mut backoff), Duration::from_secs(1));
        }
        assert_eq!(backoff.attempt, 0, "429s leave the backoff where it was");
        assert_eq!(wait_after(&initializing(None), &mut backoff), Duration::from_secs(1));
        assert_eq!(wait_after(&initializing(Some(30)), &mut backoff), MAX_RETRY_AFTER, "a long hint is cut short");
        let broken = InformerError::Status { code: 500, body: String::new(), retry_after: Some(1) };
        wait_after(&broken, &mut backoff);
        assert_eq!(backoff.attempt, 1, "other failures back off");
    }

    #[tokio::test]
    async fn a_stalled_body_is_an_error_after_the_idle_bound_not_a_hang() {
        // An upstream that sends headers and then nothing: a paused one, a watch lost in a
        // partition.
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        tokio::spawn(async move {
            let (s, _) = listener.accept().await.unwrap();
            let svc = hyper::service::service_fn(|_req| async {
                let body =
                    http_body_util::StreamBody::new(futures_util::stream::pending::<Result<http_body::Frame<Bytes>, std::io::Error>>());
                Ok::<_, std::convert::Infallible>(hyper::Response::new(body))
            });
            let _ = hyper::server::conn::http1::Builder::new().serve_connection(hyper_util::rt::TokioIo::new(s), svc).await;
        });
        let upstream = crate::app::plain_upstream(&format!("http://{addr}")).unwrap();
        let resp = upstream.get("/api/v1/pods?watch=1", "application/json").await.unwrap();
        let mut body = resp.into_body();
        let idle = Duration::from_millis(200);
        let r = next_data(&mut body, idle).await;
        assert!(matches!(r, Err(InformerError::Stalled(d)) if d == idle), "{r:?}");
    }
}
