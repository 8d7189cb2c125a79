//! Freshness: the upstream's current resourceVersion (a shared LIST of one key) and the
//! rolling probes (short watches whose bookmark proves the cache complete up to an RV) that
//! let a consistent read be answered from cache; and a page's metadata from the upstream
//! ([`PageStamps`]), which `serve::check` compares with the cache's copy of that page.

use super::decode::{self, ListJson, Stamp};
use super::fetch::{collection_path, fetch, rv_probe_path};
use super::reflector::METADATA_LIST_PB;
use super::{DecodeError, Feed, FeedError};
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

/// A feed's freshness probes: the one under way, and what readers want of them.
pub(super) struct Probes {
    /// When the last probe of the upstream's resourceVersion started, and what it found.
    pub(super) probe: tokio::sync::Mutex<Option<(Instant, u64)>>,
    /// The upstream refused the one-name probe for this kind (400): probe with a `limit=1`
    /// LIST of the collection instead.
    pub(super) probe_whole: std::sync::atomic::AtomicBool,
    /// The newest RV a reader waits to see proven.
    pub(super) wanted: std::sync::atomic::AtomicU64,
    /// Whether the probe loop runs.
    pub(super) probing: std::sync::atomic::AtomicBool,
    /// When the last reader that needed a probe arrived.
    pub(super) demand: std::sync::Mutex<Instant>,
}

impl Default for Probes {
    fn default() -> Probes {
        Probes {
            probe: tokio::sync::Mutex::new(None),
            probe_whole: Default::default(),
            wanted: Default::default(),
            probing: Default::default(),
            demand: std::sync::Mutex::new(Instant::now()),
        }
    }
}

/// One page of the upstream's answer as metadata: which objects, at which versions, at which
/// resourceVersion.
#[derive(Debug, Default)]
pub struct PageStamps {
    /// The page's items, in the upstream's order.
    pub ids: Vec<Stamp>,
    /// The list's resourceVersion.
    pub rv: u64,
    /// Its continue token (empty on the last page).
    pub cont: String,
    /// Its `remainingItemCount`, when it gives one.
    pub remaining: Option<u64>,
}

impl Feed {
    /// The upstream's answer to `path` (a LIST of this kind, with the client's scope,
    /// selectors and paging) as a protobuf PartialObjectMetadataList: every object's key and
    /// resourceVersion, which the apiserver encodes at a fraction of the CPU of the objects
    /// or their Table. An upstream found hung or unreachable fails it at once.
    pub async fn page_stamps(&self, path: &str) -> Result<PageStamps, FeedError> {
        let body = self.while_up(fetch(&self.upstream, path, METADATA_LIST_PB)).await?;
        let mut ids = Vec::new();
        let page = decode::pb_identities(&body, &mut ids)?;
        Ok(PageStamps { ids, rv: page.rv, cont: page.cont, remaining: page.remaining })
    }

    /// The upstream's current resourceVersion, from a consistent LIST of one key
    /// ([`rv_probe_path`]) sent after this call started. Concurrent callers share these
    /// probes, one at a time per kind: a probe serves every caller that arrived before its
    /// request was sent (the one in flight, or the next, which starts as soon as it ends),
    /// never one that arrived after, so every answer is at least as new as its caller's
    /// arrival. However many callers come, a kind has at most one probe in flight.
    pub async fn upstream_rv(&self) -> Result<u64, FeedError> {
        let arrived = Instant::now();
        let mut last = self.probes.probe.lock().await;
        if let Some((started, rv)) = *last {
            if started >= arrived {
                return Ok(rv);
            }
        }
        let started = Instant::now();
        let rv = self.while_up(self.fetch_rv()).await?;
        *last = Some((started, rv));
        metrics::gauge!(telemetry::RV_LAG, &self.labels()).set(rv.saturating_sub(self.cache.progress()) as f64);
        Ok(rv)
    }

    /// `call` to the upstream, failed at once when the upstream is already found hung or
    /// unreachable, or when it is found so while `call` waits.
    pub(super) async fn while_up<T>(&self, call: impl std::future::Future<Output = Result<T, FeedError>>) -> Result<T, FeedError> {
        if let Some(why) = self.upstream.suspected() {
            return Err(FeedError::Transport(why.into()));
        }
        tokio::select! {
            result = call => result,
            why = self.upstream.until_unavailable() => Err(FeedError::Transport(why.into())),
        }
    }

    /// The upstream's resourceVersion from a probe: a LIST of one name ([`rv_probe_path`]),
    /// or where the upstream refuses that with 400 (a server with no `metadata.name` field
    /// selector for the kind) a `limit=1` LIST of the collection, from then on.
    async fn fetch_rv(&self) -> Result<u64, FeedError> {
        let whole = self.probes.probe_whole.load(Ordering::Relaxed);
        match self.list_rv(&self.probe_path()).await {
            Err(FeedError::Status { code: 400, body, .. }) if !whole => {
                tracing::info!(resource = %self.cache.resource.plural, %body, "the upstream refused a one-name probe; probing with limit=1");
                self.probes.probe_whole.store(true, Ordering::Relaxed);
                self.list_rv(&self.probe_path()).await
            }
            other => other,
        }
    }

    /// The LIST this feed learns the upstream's resourceVersion from (see [`Feed::fetch_rv`]).
    pub(super) fn probe_path(&self) -> String {
        match self.probes.probe_whole.load(Ordering::Relaxed) {
            true => format!("{}?limit=1", collection_path(&self.cache.resource)),
            false => rv_probe_path(&self.cache.resource),
        }
    }

    /// The resourceVersion of the upstream's answer to the LIST at `path`.
    pub(super) async fn list_rv(&self, path: &str) -> Result<u64, FeedError> {
        let body = fetch(&self.upstream, path, "application/json").await?;
        let list: ListJson<'_> = serde_json::from_slice(&body).map_err(DecodeError::from)?;
        Ok(list.rv()?)
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
        self.probes.wanted.fetch_max(rv, Ordering::Relaxed);
        *self.probes.demand.lock().unwrap_or_else(|e| e.into_inner()) = Instant::now();
        if !self.probes.probing.swap(true, Ordering::AcqRel) {
            tokio::spawn(self.clone().roll());
        }
    }

    /// Whether probes should keep rolling: a reader still waits, or one came recently.
    fn probes_wanted(&self) -> bool {
        let recent = self.probes.demand.lock().unwrap_or_else(|e| e.into_inner()).elapsed() < PROBE_LINGER;
        recent || self.probes.wanted.load(Ordering::Relaxed) > self.cache.progress()
    }

    /// Start a probe every [`PROBE_STAGGER`] while [`Feed::probes_wanted`].
    async fn roll(self: Arc<Self>) {
        loop {
            if !self.probes_wanted() {
                self.probes.probing.store(false, Ordering::Release);
                // A reader that arrived between the check and the store starts no loop of
                // its own (it saw one running): take it up again.
                if self.probes_wanted() && !self.probes.probing.swap(true, Ordering::AcqRel) {
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::media::Format;
    use crate::cache::KindCache;
    use bytes::Bytes;
    use futures_util::FutureExt;
    use std::sync::Mutex;
    use tokio::sync::{mpsc, Semaphore};

    /// An upstream whose answers each wait for a permit of the returned gate: the n-th
    /// request (from 1) gets an empty list at resourceVersion 10 n. Each path asked for is
    /// sent on the returned channel when the request arrives.
    async fn gated() -> (crate::upstream::Upstream, Arc<Semaphore>, mpsc::UnboundedReceiver<String>) {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let (gate, (tx, rx)) = (Arc::new(Semaphore::new(0)), mpsc::unbounded_channel());
        let (open, count) = (gate.clone(), Arc::new(Mutex::new(0u64)));
        tokio::spawn(async move {
            loop {
                let (s, _) = listener.accept().await.unwrap();
                let (open, count, tx) = (open.clone(), count.clone(), tx.clone());
                let svc = hyper::service::service_fn(move |req: hyper::Request<hyper::body::Incoming>| {
                    let (open, count, tx) = (open.clone(), count.clone(), tx.clone());
                    async move {
                        let n = {
                            let mut c = count.lock().unwrap();
                            *c += 1;
                            *c
                        };
                        tx.send(req.uri().to_string()).unwrap();
                        open.acquire().await.unwrap().forget();
                        let body = format!(
                            "{{\"kind\":\"PodList\",\"apiVersion\":\"v1\",\"metadata\":{{\"resourceVersion\":\"{}\"}},\"items\":[]}}",
                            n * 10
                        );
                        Ok::<_, std::convert::Infallible>(hyper::Response::new(http_body_util::Full::new(Bytes::from(body))))
                    }
                });
                tokio::spawn(async move {
                    let io = hyper_util::rt::TokioIo::new(s);
                    let _ = hyper::server::conn::http1::Builder::new().serve_connection(io, svc).await;
                });
            }
        });
        (crate::app::plain_upstream(&format!("http://{addr}")).unwrap(), gate, rx)
    }

    /// An upstream that refuses any field selector (400) and answers every other LIST at
    /// resourceVersion 7; the paths asked for go on the channel.
    async fn refusing_field_selectors() -> (crate::upstream::Upstream, mpsc::UnboundedReceiver<String>) {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let (tx, rx) = mpsc::unbounded_channel();
        tokio::spawn(async move {
            loop {
                let (s, _) = listener.accept().await.unwrap();
                let tx = tx.clone();
                let svc = hyper::service::service_fn(move |req: hyper::Request<hyper::body::Incoming>| {
                    let path = req.uri().to_string();
                    tx.send(path.clone()).unwrap();
                    let (code, body) = match path.contains("fieldSelector") {
                        true => (400, r#"{"kind":"Status","apiVersion":"v1","status":"Failure","reason":"BadRequest","code":400}"#),
                        false => (200, r#"{"kind":"PodList","apiVersion":"v1","metadata":{"resourceVersion":"7"},"items":[]}"#),
                    };
                    let resp = hyper::Response::builder().status(code).body(http_body_util::Full::new(Bytes::from(body))).unwrap();
                    std::future::ready(Ok::<_, std::convert::Infallible>(resp))
                });
                tokio::spawn(async move {
                    let io = hyper_util::rt::TokioIo::new(s);
                    let _ = hyper::server::conn::http1::Builder::new().serve_connection(io, svc).await;
                });
            }
        });
        (crate::app::plain_upstream(&format!("http://{addr}")).unwrap(), rx)
    }

    #[tokio::test]
    async fn an_upstream_that_refuses_the_one_name_probe_is_probed_with_limit_1() {
        let pods = crate::sim::catalog::resource("pods");
        let (up, mut asked) = refusing_field_selectors().await;
        let feed = Feed::new(Arc::new(KindCache::new(Arc::new(pods), 0, Default::default())), Format::Json, up);
        assert_eq!(feed.upstream_rv().await.unwrap(), 7);
        assert!(asked.recv().await.unwrap().contains("fieldSelector"));
        assert_eq!(asked.recv().await.unwrap(), "/api/v1/pods?limit=1");
        assert_eq!(feed.upstream_rv().await.unwrap(), 7);
        assert_eq!(asked.recv().await.unwrap(), "/api/v1/pods?limit=1", "refused once, not asked again");
    }

    #[tokio::test]
    async fn callers_share_a_probe_sent_after_they_arrived_and_never_one_sent_before() {
        let pods = crate::sim::catalog::resource("pods");
        let (up, gate, mut asked) = gated().await;
        let feed = Feed::new(Arc::new(KindCache::new(Arc::new(pods), 0, Default::default())), Format::Json, up);
        let first = tokio::spawn({
            let feed = feed.clone();
            async move { feed.upstream_rv().await.unwrap() }
        });
        let path = asked.recv().await.unwrap();
        assert_eq!(path, "/api/v1/namespaces/default/pods?fieldSelector=metadata.name%3Dkache-rv-probe-");
        // Ten callers arrive while the first probe is in flight (each polled once: it has
        // taken its arrival time and queued for the probe).
        let mut later: Vec<_> = (0..10).map(|_| Box::pin(feed.upstream_rv())).collect();
        for f in &mut later {
            assert!(f.as_mut().now_or_never().is_none(), "waits for a probe");
        }
        gate.add_permits(1);
        assert_eq!(first.await.unwrap(), 10);
        gate.add_permits(1);
        for f in later {
            assert_eq!(f.await.unwrap(), 20, "the probe in flight when it arrived cannot prove its read; the next one does");
        }
        assert_eq!(asked.recv().await.unwrap(), path);
        assert!(asked.try_recv().is_err(), "eleven callers, two probes");
        // A caller after those probes ended gets a probe of its own.
        gate.add_permits(1);
        assert_eq!(feed.upstream_rv().await.unwrap(), 30);
    }
}
