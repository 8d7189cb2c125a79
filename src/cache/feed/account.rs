//! A feed's part in the upstream's revision ledger ([`crate::upstream::ledger`]): it records the
//! revisions its watches bring, earns the ledger's trust once synced, and proves its cache
//! current by the writes of other resources.

use super::{Feed, FeedError};
use crate::cache::window::EventType;
use crate::upstream::ledger::interleaved;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

/// How long a reader waits for the last writes of the gap to arrive on kache's watches once it
/// knows the upstream's resourceVersion: they are on their way as the probe's answer is (the
/// apiserver's watch caches send an event as soon as etcd tells them of it).
pub const LEDGER_GRACE: Duration = Duration::from_millis(20);
/// Comparisons with the reference resource before a resource is trusted, a second apart so
/// that both sequences move between them.
const TRUST_ROUNDS: u32 = 3;

/// What the ledger did for a consistent read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LedgerProof {
    /// The cache is proven current: every revision since its progress was another
    /// resource's write, up to the upstream's resourceVersion of when the read arrived.
    Proven,
    /// The upstream's resourceVersion when the read arrived, a gap the ledger could not close.
    Open(u64),
    /// Not tried: the resource is not trusted, or a revision nobody recorded lies above the
    /// cache's progress (until a bookmark passes it, or a write of it is recorded late).
    Unused,
}

/// A feed's place in the ledger.
pub(super) struct Account {
    /// Its resource's number in the upstream's revision ledger (`None`: never recorded).
    pub(super) writer: Option<crate::upstream::ledger::WriterId>,
    /// The first revision the ledger could not account for in this kind's last proof by it
    /// (0: none).
    pub(super) ledger_block: std::sync::atomic::AtomicU64,
}

impl Account {
    pub(super) fn new(writer: Option<crate::upstream::ledger::WriterId>) -> Account {
        Account { writer, ledger_block: Default::default() }
    }
}

impl Feed {
    /// Note a revision a watch of this feed's brought. A deletion only when `deletions`: the
    /// apiserver tells one at the revision that deleted the object, a kache upstream may tell
    /// it at a resourceVersion of its own choosing ([`crate::api::FROM_CACHE_HEADER`]).
    pub(super) fn record(&self, kind: EventType, rv: u64, deletions: bool) {
        if let (Some(w), true) = (self.account.writer, deletions || kind != EventType::Deleted) {
            self.upstream.ledger().record(w, rv);
        }
    }

    /// Once synced, earn the ledger's trust: the first resource becomes the reference; another
    /// is trusted once its resourceVersion, read between two of the reference's, has fallen
    /// between them [`TRUST_ROUNDS`] times (it shares the reference's etcd).
    pub(super) async fn join_ledger(&self) {
        let Some(own) = self.account.writer else { return };
        let _ = self.synced.subscribe().wait_for(|s| *s).await;
        let ledger = self.upstream.ledger();
        if ledger.trusted(own) || self.upstream_rv().await.is_err() {
            return;
        }
        let reference = match ledger.claim_reference(own, &self.probe_path()) {
            Ok(()) => return,
            Err(path) => path,
        };
        for round in 0..TRUST_ROUNDS {
            if round > 0 {
                tokio::time::sleep(Duration::from_secs(1)).await;
            }
            let (a, b, c) = match (self.rv_at(&reference).await, self.rv_at(&self.probe_path()).await, self.rv_at(&reference).await) {
                (Ok(a), Ok(b), Ok(c)) => (a, b, c),
                _ => return,
            };
            if !interleaved(a, b, c) {
                tracing::info!(resource = %self.cache.resource.plural, a, b, c, "resourceVersions not of the reference's sequence (another etcd?): not proven by the revision ledger");
                return;
            }
        }
        ledger.trust(own);
    }

    /// Wait at most `timeout` for this feed's resource to be trusted by the ledger (`false`:
    /// it was not in time, or it never records: Events).
    pub async fn wait_in_ledger(&self, timeout: Duration) -> bool {
        match self.account.writer {
            Some(w) => self.upstream.ledger().wait_trusted(w, timeout).await,
            None => false,
        }
    }

    async fn rv_at(&self, path: &str) -> Result<u64, FeedError> {
        self.while_up(self.list_rv(path)).await
    }

    /// Whether the cache is complete up to `rv` by the ledger: every revision between its
    /// progress and `rv` was another resource's write (waiting at most [`LEDGER_GRACE`] for
    /// the last of them). If so its progress moves to `rv`, as a bookmark's would.
    pub async fn account_for(&self, rv: u64) -> bool {
        self.accounting(rv).await.is_ok()
    }

    /// [`Feed::account_for`], or the first revision of the gap nobody recorded.
    async fn accounting(&self, rv: u64) -> Result<(), u64> {
        if self.cache.progress() >= rv {
            return Ok(());
        }
        let Some(own) = self.account.writer.filter(|w| self.upstream.ledger().trusted(*w)) else { return Err(self.cache.progress() + 1) };
        if let Some(blocked) = self.blocked(own).filter(|b| *b <= rv) {
            return Err(blocked);
        }
        self.upstream.ledger().wait_accounted(own, || self.cache.progress(), rv, LEDGER_GRACE).await.inspect_err(|missing| {
            self.account.ledger_block.store(*missing, Ordering::Relaxed);
        })?;
        self.cache.advance(rv, true);
        Ok(())
    }

    /// The revision nobody recorded that the last failed proof met, while it still lies above
    /// the cache's progress and nobody has recorded it since.
    fn blocked(&self, own: crate::upstream::ledger::WriterId) -> Option<u64> {
        let b = self.account.ledger_block.load(Ordering::Relaxed);
        (b > self.cache.progress() && !self.upstream.ledger().accounted(own, b - 1, b)).then_some(b)
    }

    /// A consistent read's proof by the ledger: the upstream's current resourceVersion (the
    /// kind's shared one-key probe), then [`Feed::account_for`] it. A revision nobody
    /// recorded blocks the ledger for this kind until the cache's progress passes it (probes
    /// are started for that) or its write is recorded after all: meanwhile reads are not
    /// made to pay for a probe and a wait that cannot succeed.
    pub async fn ledger_proof(self: &Arc<Self>) -> LedgerProof {
        let Some(own) = self.account.writer else { return LedgerProof::Unused };
        if !self.upstream.ledger().trusted(own) || self.blocked(own).is_some() {
            return LedgerProof::Unused;
        }
        let Ok(rv) = self.upstream_rv().await else { return LedgerProof::Unused };
        match self.accounting(rv).await {
            Ok(()) => LedgerProof::Proven,
            Err(_) => {
                self.want(rv);
                LedgerProof::Open(rv)
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::media::Format;
    use crate::cache::KindCache;
    use bytes::Bytes;
    use std::sync::atomic::AtomicU64;

    /// An upstream that answers every LIST with no items, at the next revision of one of two
    /// counters: pods' always from the first; configmaps' from the first too when `shared`,
    /// else from a second one (another etcd) far below it.
    async fn storages(shared: bool) -> crate::upstream::Upstream {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let counters = Arc::new([AtomicU64::new(5_000), AtomicU64::new(70)]);
        tokio::spawn(async move {
            loop {
                let (s, _) = listener.accept().await.unwrap();
                let counters = counters.clone();
                let svc = hyper::service::service_fn(move |req: hyper::Request<hyper::body::Incoming>| {
                    let other = !shared && req.uri().path().contains("configmaps");
                    let rv = counters[other as usize].fetch_add(1, Ordering::Relaxed);
                    let body = format!(r#"{{"kind":"List","apiVersion":"v1","metadata":{{"resourceVersion":"{rv}"}},"items":[]}}"#);
                    std::future::ready(Ok::<_, std::convert::Infallible>(hyper::Response::new(http_body_util::Full::new(Bytes::from(
                        body,
                    )))))
                });
                tokio::spawn(async move {
                    let io = hyper_util::rt::TokioIo::new(s);
                    let _ = hyper::server::conn::http1::Builder::new().serve_connection(io, svc).await;
                });
            }
        });
        crate::app::plain_upstream(&format!("http://{addr}")).unwrap()
    }

    fn synced_feed(plural: &str, up: &crate::upstream::Upstream) -> Arc<Feed> {
        let r = crate::sim::catalog::resource(plural);
        let feed = Feed::new(Arc::new(KindCache::new(Arc::new(r), 0, Default::default())), Format::Json, up.clone());
        feed.synced.send_replace(true);
        feed
    }

    #[tokio::test(start_paused = true)]
    async fn a_resource_is_trusted_only_once_its_revisions_interleave_with_the_references() {
        for shared in [true, false] {
            let up = storages(shared).await;
            let (pods, cms) = (synced_feed("pods", &up), synced_feed("configmaps", &up));
            pods.join_ledger().await;
            assert!(pods.wait_in_ledger(Duration::ZERO).await, "the first resource is the reference");
            cms.join_ledger().await;
            assert_eq!(cms.wait_in_ledger(Duration::ZERO).await, shared, "shared storage: {shared}");
            // An untrusted resource's writes prove nothing, and it is proven by nothing.
            up.ledger().record(cms.account.writer.unwrap(), 5_500);
            pods.cache.advance(5_499, false);
            assert_eq!(up.ledger().accounted(pods.account.writer.unwrap(), 5_499, 5_500), shared);
            assert_eq!(cms.ledger_proof().await == LedgerProof::Unused, !shared);
        }
    }
}
