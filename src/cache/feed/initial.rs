//! A feed's initial list: its turn among the preloaded feeds ([`turns`]), how far it has
//! come (for the log, `/readyz?verbose` and `kache status`), the attempt under way (for a
//! WatchList that comes while it loads) and when it will end.

use super::{growing, turns};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::sync::watch;

/// A feed's initial list.
pub(super) struct Initial {
    /// Whether it may go ([`turns`]).
    turn: watch::Sender<turns::Turn>,
    /// How far it has come, while the feed has not synced.
    listing: Arc<std::sync::Mutex<Option<Listing>>>,
    /// Told of each of its pages.
    paged: tokio::sync::Notify,
    /// The attempt under way, while the feed has not synced.
    growing: std::sync::Mutex<Option<Arc<growing::Growing>>>,
    /// An unpaged LIST broke off midway: this feed lists in pages from then on.
    pub(super) pages_only: AtomicBool,
    /// The resourceVersion of the saved state the cache was restored from (0: none): the
    /// feed watches from there instead of listing.
    restored: AtomicU64,
}

/// The initial list's progress: when it started, what its pages brought so far and what
/// the upstream says remains (`remainingItemCount`), and what has come of it so far (items
/// and bytes as they arrive, between pages too).
#[derive(Debug, Clone, Copy)]
struct Listing {
    started: Instant,
    items: u64,
    bytes: u64,
    remaining: Option<u64>,
    received: (u64, u64),
}

/// How often a feed's initial list that is still under way says how far it has come.
pub const PROGRESS_EVERY: Duration = Duration::from_secs(5);

/// Where a feed stands on its way to its first sync: what `/readyz?verbose` and
/// `kache status` show for a kind still loading.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Loading {
    /// It has synced.
    Synced,
    /// A preloaded kind whose list waits for its turn ([`turns`]).
    Waiting,
    /// Its initial list is under way.
    Listing {
        /// Objects received so far (those it cannot decode too).
        objects: u64,
        /// Bytes of the list received so far.
        bytes: u64,
        /// Since the list was asked for.
        elapsed: Duration,
    },
    /// No list under way: not started yet, or between a failed attempt and the next.
    Idle,
}

/// What an initial list says of itself as it goes ([`Initial::telling`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Told {
    /// It has started.
    Started,
    /// It is still under way, `seconds` after it started, having brought this much.
    Progress { objects: u64, bytes: u64, seconds: u64 },
}

/// `41,200 objects (176.8 MiB)`: how much of a list has come, for a person (in the
/// units of `kache status`, whose `176.8M` is the same).
pub fn amount(objects: u64, bytes: u64) -> String {
    format!("{} objects ({:.1} MiB)", thousands(objects), bytes as f64 / 1_048_576.0)
}

/// `41200` as `41,200`.
pub fn thousands(n: u64) -> String {
    let digits = n.to_string();
    let mut out = String::with_capacity(digits.len() + digits.len() / 3);
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    out
}

/// When a feed that has not synced will have: what [`super::Feed::sync_estimate`] says.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum SyncEstimate {
    /// It has synced.
    Synced,
    /// It expects to in `eta`, holding then about `bytes` bytes (its pages' rate so far).
    Within {
        /// The time left, at the rate the pages have come so far.
        eta: Duration,
        /// The whole list's time at that rate: what the same list would take the upstream
        /// now, as it is measured on this very list.
        whole: Duration,
        /// The bytes of the whole list, from the pages' mean item size.
        bytes: u64,
    },
    /// No page has come yet, or the upstream does not say how many items remain.
    Unknown,
}

impl Default for Initial {
    fn default() -> Initial {
        Initial {
            turn: watch::Sender::new(turns::Turn::Going),
            listing: Arc::default(),
            paged: tokio::sync::Notify::new(),
            growing: std::sync::Mutex::new(None),
            pages_only: AtomicBool::new(false),
            restored: AtomicU64::new(0),
        }
    }
}

impl Initial {
    /// Keep the list from starting until [`Initial::release`].
    pub(super) fn hold(&self) {
        self.turn.send_replace(turns::Turn::Waiting);
    }

    /// Let the list go, if it was held.
    pub(super) fn release(&self) {
        self.turn.send_if_modified(|t| {
            let held = *t == turns::Turn::Waiting;
            if held {
                *t = turns::Turn::Going;
            }
            held
        });
    }

    /// Where it stands in the turns.
    pub(super) fn turn(&self) -> turns::Turn {
        *self.turn.borrow()
    }

    /// Told of each change of its turn.
    pub(super) fn turns(&self) -> watch::Receiver<turns::Turn> {
        self.turn.subscribe()
    }

    /// Wait until the list may go.
    pub(super) async fn my_turn(&self) {
        let _ = self.turn.subscribe().wait_for(|t| *t != turns::Turn::Waiting).await;
    }

    /// The first list has ended, one way or the other.
    pub(super) fn tried(&self) {
        self.turn.send_replace(turns::Turn::Tried);
    }

    /// The cache was restored at `rv`: no list, and no turn to wait for.
    pub(super) fn restored_at(&self, rv: u64) {
        self.restored.store(rv, Ordering::Relaxed);
        self.tried();
    }

    /// The resourceVersion the cache was restored at, if it was.
    pub(super) fn restored(&self) -> Option<u64> {
        Some(self.restored.load(Ordering::Relaxed)).filter(|rv| *rv > 0)
    }

    /// The attempt under way, if one is and it has not ended.
    pub(super) fn growing(&self) -> Option<Arc<growing::Growing>> {
        let g = self.growing.lock().unwrap_or_else(|e| e.into_inner());
        g.as_ref().filter(|g| !g.ended()).cloned()
    }

    /// A new attempt: one still open is ended as failed (its readers' clients start again).
    pub(super) fn start_growing(&self) -> Arc<growing::Growing> {
        let g = Arc::new(growing::Growing::new());
        if let Some(old) = self.growing.lock().unwrap_or_else(|e| e.into_inner()).replace(g.clone()) {
            old.finish(growing::End::Failed);
        }
        g
    }

    /// The attempt ended (installed, or failed).
    pub(super) fn end_growing(&self, end: growing::End) {
        if let Some(g) = self.growing.lock().unwrap_or_else(|e| e.into_inner()).take() {
            g.finish(end);
        }
    }

    /// The list has started (`items` = 0) or brought a page: its items and bytes so far,
    /// and what the upstream says remains.
    pub(super) fn listed_page(&self, items: u64, bytes: u64, remaining: Option<u64>) {
        let mut l = self.listing.lock().unwrap_or_else(|e| e.into_inner());
        match (&mut *l, items) {
            (_, 0) => *l = Some(Listing { started: Instant::now(), items: 0, bytes: 0, remaining: None, received: (0, 0) }),
            (Some(l), _) => (l.items, l.bytes, l.remaining, l.received) = (items, bytes, remaining, (items, bytes)),
            (None, _) => {}
        }
        drop(l);
        self.paged.notify_waiters();
    }

    /// The list has brought `items` items in `bytes` bytes so far (between its pages).
    pub(super) fn received(&self, items: u64, bytes: u64) {
        if let Some(l) = self.listing.lock().unwrap_or_else(|e| e.into_inner()).as_mut() {
            l.received = (items, bytes);
        }
    }

    /// Its bytes and time so far: (bytes, seconds).
    pub(super) fn listed(&self) -> (u64, f64) {
        let l = *self.listing.lock().unwrap_or_else(|e| e.into_inner());
        l.map_or((0, 0.0), |l| (l.received.1, l.started.elapsed().as_secs_f64()))
    }

    /// When it will end, judged from its pages so far.
    pub(super) fn estimate(&self) -> SyncEstimate {
        let listing = *self.listing.lock().unwrap_or_else(|e| e.into_inner());
        match listing {
            Some(Listing { started, items, bytes, remaining: Some(left), .. }) if items > 0 => {
                let per_item = started.elapsed().as_secs_f64() / items as f64;
                let eta = Duration::try_from_secs_f64(per_item * left as f64).unwrap_or(Duration::MAX);
                let whole = Duration::try_from_secs_f64(per_item * (items + left) as f64).unwrap_or(Duration::MAX);
                SyncEstimate::Within { eta, whole, bytes: bytes.saturating_add(bytes / items * left) }
            }
            _ => SyncEstimate::Unknown,
        }
    }

    /// Where it stands, for a feed that has not synced.
    pub(super) fn loading(&self) -> Loading {
        if self.turn() == turns::Turn::Waiting {
            return Loading::Waiting;
        }
        // An attempt is under way while its growing state is open.
        if self.growing().is_none() {
            return Loading::Idle;
        }
        match *self.listing.lock().unwrap_or_else(|e| e.into_inner()) {
            Some(Listing { started, received: (objects, bytes), .. }) => Loading::Listing { objects, bytes, elapsed: started.elapsed() },
            None => Loading::Idle,
        }
    }

    /// Told of its next page.
    pub(super) fn paged(&self) -> tokio::sync::futures::Notified<'_> {
        self.paged.notified()
    }

    /// Run `list`, telling `tell` that it started, then every [`PROGRESS_EVERY`] while it
    /// runs what it has brought so far. The progress is told by a task of its own: a list
    /// whose bytes keep coming may not yield to the runtime between its chunks.
    pub(super) async fn telling<T>(&self, list: impl std::future::Future<Output = T>, mut tell: impl FnMut(Told) + Send + 'static) -> T {
        tell(Told::Started);
        let (started, listing) = (tokio::time::Instant::now(), self.listing.clone());
        // Ends (aborted) with the list.
        let mut progress = tokio::task::JoinSet::new();
        progress.spawn(async move {
            let mut every = tokio::time::interval_at(started + PROGRESS_EVERY, PROGRESS_EVERY);
            every.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            loop {
                every.tick().await;
                let received = listing.lock().unwrap_or_else(|e| e.into_inner()).map(|l| l.received);
                if let Some((objects, bytes)) = received {
                    tell(Told::Progress { objects, bytes, seconds: started.elapsed().as_secs() });
                }
            }
        });
        list.await
    }
}
