//! Freshness: the upstream's current resourceVersion (a shared `limit=1` LIST) and the
//! rolling probes (short watches whose bookmark proves the cache complete up to an RV) that
//! let a consistent read be answered from cache.

use super::decode::ListJson;
use super::fetch::{collection_path, fetch};
use super::{DecodeError, Feed, InformerError};
use crate::telemetry;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

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

impl Feed {
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
        let list: ListJson<'_> = serde_json::from_slice(&body).map_err(DecodeError::from)?;
        let rv = list.rv()?;
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
        self.want(rv);
        self.cache.wait_for(rv, wait).await
    }

    /// Ask for the cache to be proven up to `rv` without waiting for it: probes roll until
    /// it is (a consistent WatchList's end bookmark waits for it on the watcher's own
    /// stream).
    pub fn want(self: &Arc<Self>, rv: u64) {
        self.wanted.fetch_max(rv, Ordering::Relaxed);
        *self.demand.lock().unwrap_or_else(|e| e.into_inner()) = Instant::now();
        if !self.probing.swap(true, Ordering::AcqRel) {
            tokio::spawn(self.clone().roll());
        }
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
}
