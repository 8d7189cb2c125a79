//! The feed of one resource in one encoding: the reflector that fills its [`KindCache`] from
//! the upstream (LIST, then WATCH from the list's RV with bookmarks, resuming from the last
//! RV, relisting on 410, backing off on errors), and what readers ask of it: synced,
//! healthy, stale, proven fresh. Objects are kept as the upstream's bytes; each is decoded
//! once, only to extract its key and fields, and one that cannot be is skipped and counted.
//!
//! - `state`: the retry loop as a state machine (phases, transitions, backoff).
//! - `reflector`: the LIST and WATCH steps it drives, relists by metadata.
//! - `freshness`: the upstream's current RV, the probes that prove the cache reached it,
//!   and a page's metadata ([`PageStamps`]).
//! - `account`: the feed's part in the upstream's revision ledger.
//! - `decode`: lists, events and objects from JSON or protobuf bytes.
//! - `streamed`: an unpaged LIST's items cut from its body as they arrive.
//! - `fetch`: paths and kache's own GETs.
//! - `yielding`: lists wait while a client passed through for want of them streams a state.
//! - `growing`: the initial list's objects as its pages arrive, for a WatchList that comes
//!   while the cache loads.
//! - `initial`: the initial list's turn, progress and the attempt under way.
//! - `turns`: preloaded feeds list one after another at start.

mod account;
pub(crate) mod decode;
pub(crate) mod fetch;
mod freshness;
pub mod growing;
mod initial;
mod reflector;
mod state;
mod streamed;
pub mod turns;
pub mod yielding;

pub use account::LedgerProof;
pub use decode::{DecodeError, Stamp};
pub use fetch::collection_path;
pub(crate) use fetch::fetch;
pub use freshness::PageStamps;
pub use initial::{amount, thousands, Loading, SyncEstimate, PROGRESS_EVERY};

use crate::api::media::Format;
use crate::body::BoxError;
use crate::cache::state::{SavedState, StateRefused};
use crate::cache::KindCache;
use crate::telemetry;
use crate::upstream::Upstream;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::sync::watch;

/// Why a feed's step failed.
#[derive(Debug, thiserror::Error)]
pub enum FeedError {
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
    /// The upstream sent something that does not parse (a list, a watch frame; an object
    /// that does not is skipped instead).
    #[error("cannot decode upstream data: {0}")]
    Decode(#[from] DecodeError),
    /// The watch's resourceVersion left the upstream's window: relist.
    #[error("resourceVersion expired")]
    Expired,
}

/// A cache fed from the upstream, and whether it has synced.
///
/// What readers ask of it is here; the steps its loop drives are in `reflector` (LIST,
/// WATCH, relist), its proofs of freshness in `freshness` (probes) and `account` (the
/// revision ledger). Its parts own their state and methods: `Condition`, `Initial`
/// (`initial`), `Probes` (`freshness`), `Account` (`account`).
pub struct Feed {
    /// The cache.
    pub cache: Arc<KindCache>,
    /// The encoding it holds.
    pub fmt: Format,
    upstream: Upstream,
    synced: watch::Sender<bool>,
    /// Whether it reaches the upstream, and how it stands with it.
    condition: Condition,
    preloaded: AtomicBool,
    /// Why the upstream will never fill this cache (it refused the encoding), once known.
    refused: std::sync::OnceLock<String>,
    /// The newest RV of a watch event skipped (the feed's watch and a freshness probe may
    /// both meet it: it is counted once).
    skipped_rv: AtomicU64,
    /// Held while a client passed through for want of a synced cache streams a state.
    yields: Arc<yielding::Yield>,
    /// Its initial list: its turn, its progress, the attempt under way.
    initial: initial::Initial,
    /// Its freshness probes ([`freshness`]).
    probes: freshness::Probes,
    /// Its part in the upstream's revision ledger ([`account`]).
    account: account::Account,
}

/// How a feed stands with the upstream.
#[derive(Default)]
struct Condition {
    /// Whether the last LIST or WATCH request reached the upstream.
    healthy: AtomicBool,
    /// Since when the informer has not reached the upstream (its first failure since the
    /// last LIST or WATCH that did).
    broken_since: std::sync::Mutex<Option<tokio::time::Instant>>,
    /// Relisting after 410: the previous list is served meanwhile, but it gets no events.
    relisting: AtomicBool,
    /// The upstream's last answer to this feed's LIST was 403: kache's own identity may not
    /// list the kind (a preloaded kind its RBAC does not grant). The feed keeps retrying on
    /// its backoff, so a later grant takes effect.
    forbidden: AtomicBool,
}

impl Condition {
    fn set_healthy(&self, ok: bool) {
        self.healthy.store(ok, Ordering::Relaxed);
        let mut since = self.broken_since.lock().unwrap_or_else(|e| e.into_inner());
        match (ok, *since) {
            (true, _) => *since = None,
            (false, None) => *since = Some(tokio::time::Instant::now()),
            (false, Some(_)) => {}
        }
    }

    /// How long since the feed last failed to reach the upstream, while it has not since.
    fn broken_for(&self) -> Option<Duration> {
        self.broken_since.lock().unwrap_or_else(|e| e.into_inner()).map(|t| t.elapsed())
    }
}

impl Feed {
    /// A feed for `cache` (not yet started).
    pub fn new(cache: Arc<KindCache>, fmt: Format, upstream: Upstream) -> Arc<Feed> {
        let writer = upstream.ledger().writer(&cache.resource.group, &cache.resource.plural);
        Arc::new(Feed {
            cache,
            fmt,
            upstream,
            synced: watch::Sender::new(false),
            condition: Condition::default(),
            preloaded: AtomicBool::new(false),
            refused: std::sync::OnceLock::new(),
            skipped_rv: AtomicU64::new(0),
            yields: Arc::default(),
            initial: initial::Initial::default(),
            probes: freshness::Probes::default(),
            account: account::Account::new(writer),
        })
    }

    /// Run the reflector until the task is dropped (or the upstream refuses the kind in
    /// this encoding: see [`Feed::refused`]).
    pub async fn run(self: Arc<Self>) {
        self.initial.my_turn().await;
        // The feed joins the revision ledger once synced, while it runs; `run` ends with it.
        let joining = async {
            self.join_ledger().await;
            std::future::pending::<()>().await
        };
        let start = self.initial.restored().map_or_else(state::Machine::default, state::Machine::resuming);
        tokio::select! {
            () = state::drive(&*self, start) => {}
            () = joining => {}
        }
    }

    /// Fill the cache from `saved`, before the feed runs: it is synced at once, and its watch
    /// resumes from the state's resourceVersion (it lists only if the upstream answers 410).
    /// Refused, nothing changes.
    pub fn restore(&self, saved: &SavedState) -> Result<(), StateRefused> {
        if self.synced() {
            return Err(StateRefused::Inconsistent("the feed has synced already".into()));
        }
        let started = Instant::now();
        saved.restore(&self.cache)?;
        self.initial.restored_at(saved.rv);
        let (r, objects) = (&self.cache.resource.plural, saved.objects.len());
        let (events, seconds) = (saved.events.len(), (started.elapsed().as_secs_f64() * 10.0).round() / 10.0);
        tracing::info!(resource = %r, objects, events, seconds, rv = saved.rv, fmt = ?self.fmt, "informer restored from saved state");
        metrics::counter!(telemetry::STATE_RESTORED, &self.labels()).increment(1);
        self.synced.send_replace(true);
        Ok(())
    }

    /// Whether the last LIST or WATCH request reached the upstream.
    pub fn healthy(&self) -> bool {
        self.condition.healthy.load(Ordering::Relaxed)
    }

    /// Why the upstream refused to fill this cache, if it did (the feed has stopped).
    pub fn refused(&self) -> Option<&str> {
        self.refused.get().map(String::as_str)
    }

    /// Whether the upstream's last answer to this feed's LIST was 403 (kache's identity may
    /// not list the kind; requests of it pass through, with their client's identity).
    pub fn forbidden(&self) -> bool {
        self.condition.forbidden.load(Ordering::Relaxed)
    }

    /// Whether the informer is relisting after its watch expired (410): the cache still
    /// answers from the previous list, which no longer gets events.
    pub fn relisting(&self) -> bool {
        self.condition.relisting.load(Ordering::Relaxed)
    }

    /// Record whether the last LIST or WATCH reached the upstream.
    fn set_healthy(&self, ok: bool) {
        self.condition.set_healthy(ok);
    }

    /// How long this cache may have missed upstream changes: zero while its informer is
    /// connected to an upstream the health monitor finds up; else since the informer last
    /// failed or since the upstream was found down, whichever is longer ago (a hung upstream
    /// stalls an open watch before it fails).
    pub fn staleness(&self) -> Duration {
        let broken = self.condition.broken_for();
        let down = match &*self.upstream.health().borrow() {
            crate::upstream::health::Health::Down { since, .. } => Some(since.elapsed()),
            _ => None,
        };
        broken.into_iter().chain(down).max().unwrap_or_default()
    }

    /// Count this feed in readiness.
    pub fn mark_preloaded(&self) {
        self.preloaded.store(true, Ordering::Relaxed);
    }

    /// What a client passed through for want of a synced cache holds to make the list wait
    /// ([`yielding`]).
    pub fn yields(&self) -> Arc<yielding::Yield> {
        self.yields.clone()
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

    /// The initial list as its pages arrive, while an attempt at it is under way (`None`
    /// once synced, or between attempts).
    pub fn growing(&self) -> Option<Arc<growing::Growing>> {
        self.initial.growing().filter(|_| !self.synced())
    }

    /// Keep this feed's list from starting until [`Feed::release`] (before it runs).
    pub fn hold(&self) {
        self.initial.hold();
    }

    /// Let this feed's list go, if it was held ([`turns`]).
    pub fn release(&self) {
        self.initial.release();
    }

    /// Whether the initial list has been loaded.
    pub fn synced(&self) -> bool {
        *self.synced.borrow()
    }

    /// When this feed will have synced, judged from its initial list's pages so far.
    pub fn sync_estimate(&self) -> SyncEstimate {
        if self.synced() {
            return SyncEstimate::Synced;
        }
        self.initial.estimate()
    }

    /// The initial list has started (`items` = 0) or brought a page: its items and bytes so
    /// far, and what the upstream says remains. Nothing once synced (relists are not timed).
    pub(super) fn listed_page(&self, items: u64, bytes: u64, remaining: Option<u64>) {
        if !self.synced() {
            self.initial.listed_page(items, bytes, remaining);
        }
    }

    /// The initial list has brought `items` items in `bytes` bytes so far (between its
    /// pages: what [`Feed::loading`] shows).
    pub(super) fn received(&self, items: u64, bytes: u64) {
        if !self.synced() {
            self.initial.received(items, bytes);
        }
    }

    /// Where the feed stands on its way to its first sync.
    pub fn loading(&self) -> Loading {
        if self.synced() {
            return Loading::Synced;
        }
        self.initial.loading()
    }

    /// Run `list`, the initial list, saying so in the log: one line when it starts, then
    /// every [`PROGRESS_EVERY`] while it runs one with the objects and bytes it has brought
    /// so far. (Its end is told by `install`, or by the failure's line.)
    async fn reporting<T>(&self, list: impl std::future::Future<Output = T>) -> T {
        let (r, fmt) = (self.cache.resource.plural.clone(), self.fmt);
        self.initial
            .telling(list, move |told| match told {
                initial::Told::Started => tracing::info!(resource = %r, ?fmt, "initial list started"),
                initial::Told::Progress { objects, bytes, seconds } => {
                    let so_far = amount(objects, bytes);
                    tracing::info!(resource = %r, ?fmt, objects, bytes, seconds, "still listing: {so_far} so far");
                }
            })
            .await
    }

    /// Wait for the initial list's next page, or its end, at most `timeout`.
    pub async fn next_page(&self, timeout: Duration) {
        let page = self.initial.paged();
        tokio::pin!(page);
        page.as_mut().enable();
        if self.synced() {
            return;
        }
        let _ = tokio::time::timeout(timeout, async {
            tokio::select! {
                _ = page => {}
                _ = self.wait_synced(timeout) => {}
            }
        })
        .await;
    }

    /// Wait until synced or `timeout` passes.
    pub async fn wait_synced(&self, timeout: Duration) -> bool {
        let mut rx = self.synced.subscribe();
        tokio::time::timeout(timeout, rx.wait_for(|s| *s)).await.is_ok_and(|r| r.is_ok())
    }

    /// Count objects left out of the cache because they cannot be decoded, and say so in
    /// one line: a list's all together, a watch event's alone (`rv`: its resourceVersion,
    /// when that much could be read; an event already reported is not again).
    ///
    /// The kind stays cached without them rather than not at all: refusing the list, or
    /// the watch that brought the event, would only meet the same object again on every
    /// retry.
    fn skipped(&self, errors: &[DecodeError], rv: Option<u64>) {
        let Some(first) = errors.first() else { return };
        if rv.is_some_and(|rv| self.skipped_rv.fetch_max(rv, Ordering::Relaxed) >= rv) {
            return;
        }
        for e in errors {
            let labels = [("resource", self.cache.resource.plural.clone()), ("reason", e.reason().to_string())];
            metrics::counter!(telemetry::OBJECTS_SKIPPED, &labels).increment(1);
        }
        let r = &self.cache.resource.plural;
        tracing::warn!(resource = %r, fmt = ?self.fmt, skipped = errors.len(), rv, error = %first, "objects left out of the cache: kache cannot decode them");
    }

    /// Log a failed LIST or WATCH: a warning, unless the health monitor already reported
    /// the upstream down (then one line says so for every request, not one per retry).
    fn log_failure(&self, what: &str, rv: Option<u64>, e: &FeedError) {
        let r = &self.cache.resource.plural;
        if self.upstream.is_down() {
            tracing::debug!(resource = %r, rv, error = %e, "{what}");
        } else {
            tracing::warn!(resource = %r, rv, error = %e, "{what}");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::initial::Told;
    use super::*;

    fn pods_feed() -> Arc<Feed> {
        let r = crate::sim::catalog::simulated().into_iter().find(|r| r.plural == "pods").unwrap();
        let up = crate::app::plain_upstream("http://127.0.0.1:9").unwrap();
        Feed::new(Arc::new(KindCache::new(Arc::new(r), 0, Default::default())), Format::Json, up)
    }

    #[tokio::test(start_paused = true)]
    async fn an_initial_list_under_way_says_every_five_seconds_how_far_it_has_come() {
        let feed = pods_feed();
        feed.hold();
        assert_eq!(feed.loading(), Loading::Waiting, "a preloaded kind waiting for its turn");
        feed.release();
        assert_eq!(feed.loading(), Loading::Idle, "not listing yet");
        // The list: its attempt starts and brings 1,200 objects, then nothing until it ends.
        let (end, ended) = tokio::sync::oneshot::channel::<()>();
        let list = {
            let feed = feed.clone();
            async move {
                let _attempt = feed.initial.start_growing();
                feed.listed_page(0, 0, None);
                feed.received(1_200, 5_400_000);
                let _ = ended.await;
                "listed"
            }
        };
        let told = Arc::new(std::sync::Mutex::new(Vec::new()));
        let task = {
            let (feed, told) = (feed.clone(), told.clone());
            tokio::spawn(async move { feed.initial.telling(list, move |t| told.lock().unwrap().push(t)).await })
        };
        let told = move || told.lock().unwrap().clone();
        tokio::time::sleep(Duration::from_secs(4)).await;
        assert!(matches!(feed.loading(), Loading::Listing { objects: 1_200, bytes: 5_400_000, .. }), "{:?}", feed.loading());
        assert_eq!(told(), [Told::Started], "the start at once, nothing more before 5 s");
        tokio::time::sleep(Duration::from_secs(2)).await;
        let first = Told::Progress { objects: 1_200, bytes: 5_400_000, seconds: 5 };
        assert_eq!(told(), [Told::Started, first]);
        // More comes; the next line, 5 s after the first, says so.
        feed.received(41_200, 185_400_000);
        tokio::time::sleep(Duration::from_secs(5)).await;
        let second = Told::Progress { objects: 41_200, bytes: 185_400_000, seconds: 10 };
        assert_eq!(told(), [Told::Started, first, second]);
        // The list ends: nothing is told after it.
        end.send(()).unwrap();
        assert_eq!(task.await.unwrap(), "listed");
        tokio::time::sleep(Duration::from_secs(30)).await;
        assert_eq!(told().len(), 3);
    }

    #[test]
    fn amounts_read_as_a_person_writes_them() {
        assert_eq!(amount(41_200, 185_400_000), "41,200 objects (176.8 MiB)");
        let n = [0, 7, 999, 1_000, 12_345, 100_000, 1_234_567].map(thousands);
        assert_eq!(n, ["0", "7", "999", "1,000", "12,345", "100,000", "1,234,567"]);
    }
}
