//! The revision ledger: which resource wrote each recent revision of the upstream's storage,
//! as kache's watches saw it, so that a consistent read can be proven without a round of
//! bookmarks or a check.
//!
//! etcd gives every write its own revision, one after the other, and the apiserver writes one
//! key per transaction: an object's resourceVersion in a watch event names the one write of
//! that revision. So if every revision between a cache's proven progress `P` and the
//! upstream's current resourceVersion `R` was written by some *other* resource, nothing of the
//! cached kind changed in between, and the cache as of `P` is its state at `R`: the proof a
//! bookmark at `R` would give, at the cost of the one-key LIST that learns `R`. A revision no
//! watch of kache's saw (a kind it does not cache, the apiserver's own keys, a write still in
//! flight) leaves the gap open, and the read is proven as before.
//!
//! What the argument needs, and how it is kept:
//! - *One revision, one key.* True of every apiserver write but the expiry of a TTL lease,
//!   which deletes all the keys attached to it at one revision: only Events carry such leases,
//!   so Events (both groups) are never recorded and never proven this way.
//! - *One storage.* `--etcd-servers-overrides` can keep a resource in another etcd, whose
//!   revisions are numbers of another sequence. A resource is trusted only once its
//!   resourceVersions have been seen interleaved with the first trusted resource's
//!   ([`Ledger::trust`]): consistent reads of one etcd return its current revision, so `a` then
//!   `b` then `c` read one after the other give `a <= b <= c`, which two independent
//!   counters satisfy only by coincidence, and never three times over with the counters moving.
//! - *Two names, one key.* A resource is recorded under its group and resource (its versions
//!   share keys); a kind is never proven by a write recorded under its own name, which it may
//!   not have applied yet.

use std::collections::{HashMap, HashSet};
use std::sync::Mutex;
use std::time::Duration;
use tokio::sync::watch;

/// How many recent revisions the ledger remembers: a gap wider than this is never accounted.
pub const SPAN: usize = 1 << 16;

/// The ledger's trust by name: the reference resource (group, plural) with the path of its
/// probe, and every trusted resource.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct TrustBook {
    /// The resource the others were compared with, and its probe's path.
    pub reference: Option<((String, String), String)>,
    /// The resources trusted to share the reference's storage (the reference among them).
    pub trusted: Vec<(String, String)>,
}

/// A resource as the ledger knows it: a small number per group and resource.
pub type WriterId = u16;

/// Which resource wrote each of the last [`SPAN`] revisions seen, and which resources are
/// trusted to share the upstream's storage.
pub struct Ledger {
    inner: Mutex<Book>,
    /// Moves on every record: a reader waiting for the gap to close looks again.
    recorded: watch::Sender<u64>,
    /// Moves each time a resource is trusted.
    trusts: watch::Sender<u64>,
}

struct Book {
    /// The lowest revision the slots answer for; slot `r % SPAN` holds revision `r` for
    /// `low <= r < low + SPAN`.
    low: u64,
    slots: Vec<WriterId>,
    writers: HashMap<(String, String), WriterId>,
    trusted: HashSet<WriterId>,
    /// The first resource trusted, and the path of its one-key LIST (its resourceVersion
    /// probe): the others are compared with it.
    reference: Option<(WriterId, String)>,
}

/// The ledger's name for a resource, or `None` for one it never records (Events: a TTL
/// lease's expiry deletes many of them at one revision).
fn writer_key(group: &str, plural: &str) -> Option<(String, String)> {
    if plural == "events" && (group.is_empty() || group == "events.k8s.io") {
        return None;
    }
    Some((group.to_string(), plural.to_string()))
}

impl Default for Ledger {
    fn default() -> Self {
        Ledger {
            inner: Mutex::new(Book { low: 0, slots: vec![0; SPAN], writers: HashMap::new(), trusted: HashSet::new(), reference: None }),
            recorded: watch::Sender::new(0),
            trusts: watch::Sender::new(0),
        }
    }
}

impl Ledger {
    /// The ledger's number for a resource (`None` for Events).
    pub fn writer(&self, group: &str, plural: &str) -> Option<WriterId> {
        let key = writer_key(group, plural)?;
        let mut inner = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        let next = WriterId::try_from(inner.writers.len() + 1).ok()?;
        Some(*inner.writers.entry(key).or_insert(next))
    }

    /// Note that the upstream's revision `rv` was a write of `writer`'s: an object's
    /// resourceVersion as the upstream sent it, never one kache made up.
    pub fn record(&self, writer: WriterId, rv: u64) {
        let mut inner = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        if rv < inner.low {
            return;
        }
        let top = rv.saturating_sub(SPAN as u64 - 1);
        if top > inner.low {
            // Forget the revisions that slide out, the whole ring if it moved that far.
            let forget = (top - inner.low).min(SPAN as u64);
            for r in inner.low..inner.low + forget {
                inner.slots[(r % SPAN as u64) as usize] = 0;
            }
            inner.low = top;
        }
        inner.slots[(rv % SPAN as u64) as usize] = writer;
        drop(inner);
        self.recorded.send_modify(|n| *n = n.wrapping_add(1));
    }

    /// Whether `writer` is trusted to share the upstream's storage.
    pub fn trusted(&self, writer: WriterId) -> bool {
        self.inner.lock().unwrap_or_else(|e| e.into_inner()).trusted.contains(&writer)
    }

    /// Make `writer` (whose resourceVersion probe is the LIST at `probe`) the resource the
    /// others are compared with, and trust it, unless another already is: then the path of
    /// that one's probe, to compare with ([`interleaved`]).
    pub fn claim_reference(&self, writer: WriterId, probe: &str) -> Result<(), String> {
        let mut inner = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        match &inner.reference {
            Some((w, _)) if *w == writer => Ok(()),
            Some((_, path)) => Err(path.clone()),
            None => {
                inner.reference = Some((writer, probe.to_string()));
                inner.trusted.insert(writer);
                drop(inner);
                self.trusts.send_modify(|n| *n += 1);
                Ok(())
            }
        }
    }

    /// Trust `writer` to share the upstream's storage: its resourceVersions were seen
    /// interleaved with the reference's ([`interleaved`]).
    pub fn trust(&self, writer: WriterId) {
        self.inner.lock().unwrap_or_else(|e| e.into_inner()).trusted.insert(writer);
        self.trusts.send_modify(|n| *n += 1);
    }

    /// Which resources are trusted and which is the reference, by name: what a restarted
    /// kache takes back ([`Ledger::restore_trust`]) instead of comparing them again.
    pub fn trust_book(&self) -> TrustBook {
        let inner = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        let name = |w: &WriterId| inner.writers.iter().find(|(_, id)| *id == w).map(|(k, _)| k.clone());
        let reference = inner.reference.as_ref().and_then(|(w, probe)| Some((name(w)?, probe.clone())));
        let mut trusted: Vec<(String, String)> = inner.trusted.iter().filter_map(name).collect();
        trusted.sort();
        TrustBook { reference, trusted }
    }

    /// Take back a [`TrustBook`] of the same cluster: its reference claimed (unless another
    /// already is) and its resources trusted, without the comparisons that earned it. The
    /// trust is the cluster's storage layout, which outlives kache's restarts.
    pub fn restore_trust(&self, book: &TrustBook) {
        if let Some(((group, plural), probe)) = &book.reference {
            if let Some(w) = self.writer(group, plural) {
                let _ = self.claim_reference(w, probe);
            }
        }
        for (group, plural) in &book.trusted {
            if let Some(w) = self.writer(group, plural) {
                self.trust(w);
            }
        }
    }

    /// Wait at most `timeout` for `writer` to be trusted.
    pub async fn wait_trusted(&self, writer: WriterId, timeout: Duration) -> bool {
        let mut trusts = self.trusts.subscribe();
        tokio::time::timeout(timeout, trusts.wait_for(|_| self.trusted(writer))).await.is_ok_and(|r| r.is_ok())
    }

    /// Whether every revision in `(from, to]` was recorded as a write of a trusted resource
    /// other than `own` (which must be trusted itself).
    pub fn accounted(&self, own: WriterId, from: u64, to: u64) -> bool {
        self.unaccounted(own, from, to).is_none()
    }

    /// The first revision in `(from, to]` not recorded as a write of a trusted resource other
    /// than `own` (the first of the span when `own` is not trusted, or the gap is wider than
    /// the ledger remembers).
    pub fn unaccounted(&self, own: WriterId, from: u64, to: u64) -> Option<u64> {
        let inner = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        if !inner.trusted.contains(&own) || to.saturating_sub(from) > SPAN as u64 {
            return (to > from).then_some(from + 1);
        }
        (from + 1..=to).find(|&r| {
            let w = inner.slots[(r % SPAN as u64) as usize];
            r < inner.low || w == 0 || w == own || !inner.trusted.contains(&w)
        })
    }

    /// Wait at most `grace` for every revision in `(from(), to]` to be accounted for (see
    /// [`Ledger::accounted`]), or the first one that was not; `from` is read again each time,
    /// as the cache moves too.
    pub async fn wait_accounted(&self, own: WriterId, from: impl Fn() -> u64, to: u64, grace: Duration) -> Result<(), u64> {
        let mut seen = self.recorded.subscribe();
        let deadline = tokio::time::Instant::now() + grace;
        loop {
            let Some(missing) = self.unaccounted(own, from(), to) else { return Ok(()) };
            match tokio::time::timeout_at(deadline, seen.changed()).await {
                Ok(Ok(())) => {}
                _ => return Err(missing),
            }
        }
    }
}

/// Whether three resourceVersions read one after the other, the first and last of one
/// resource and the middle of another, could come from one sequence of revisions.
pub fn interleaved(a: u64, b: u64, c: u64) -> bool {
    a <= b && b <= c
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_trust_book_taken_back_trusts_the_same_resources_under_the_same_reference() {
        let l = Ledger::default();
        let (pods, nodes, cms) = (l.writer("", "pods").unwrap(), l.writer("", "nodes").unwrap(), l.writer("", "configmaps").unwrap());
        l.claim_reference(nodes, "/api/v1/nodes?probe").unwrap();
        l.trust(pods);
        let book = l.trust_book();
        assert_eq!(book.reference, Some((("".into(), "nodes".into()), "/api/v1/nodes?probe".into())));
        // Another kache, whose writers are numbered in another order.
        let back = Ledger::default();
        let cms2 = back.writer("", "configmaps").unwrap();
        back.restore_trust(&book);
        let (pods2, nodes2) = (back.writer("", "pods").unwrap(), back.writer("", "nodes").unwrap());
        assert!(back.trusted(pods2) && back.trusted(nodes2) && !back.trusted(cms2));
        assert_eq!(back.claim_reference(pods2, "x"), Err("/api/v1/nodes?probe".to_string()));
        assert_eq!(back.trust_book(), book);
        assert!(!l.trusted(cms));
    }

    fn ledger() -> (Ledger, WriterId, WriterId, WriterId) {
        let l = Ledger::default();
        let (pods, cms, nodes) = (l.writer("", "pods").unwrap(), l.writer("", "configmaps").unwrap(), l.writer("", "nodes").unwrap());
        for w in [pods, cms, nodes] {
            l.trust(w);
        }
        (l, pods, cms, nodes)
    }

    #[test]
    fn a_gap_written_only_by_other_resources_is_accounted_for() {
        let (l, pods, cms, nodes) = ledger();
        for rv in 101..=105 {
            l.record(if rv % 2 == 0 { cms } else { nodes }, rv);
        }
        assert!(l.accounted(pods, 100, 105));
        assert!(l.accounted(pods, 103, 105));
        assert!(l.accounted(pods, 105, 105), "an empty gap");
        // The cache's own resource wrote one of them: it may not have applied it yet.
        l.record(pods, 106);
        l.record(cms, 107);
        assert!(!l.accounted(pods, 100, 107));
        assert!(l.accounted(pods, 106, 107), "once the cache is past its own write");
        // A revision nobody recorded (a kind kache does not cache, the apiserver's own keys).
        l.record(cms, 109);
        assert!(!l.accounted(pods, 107, 109));
        assert!(!l.accounted(cms, 100, 105), "configmaps wrote some of those");
        assert!(!l.accounted(nodes, 100, 101), "nodes wrote 101");
    }

    #[test]
    fn only_trusted_resources_account_and_events_are_never_recorded() {
        let l = Ledger::default();
        let pods = l.writer("", "pods").unwrap();
        let far = l.writer("", "widgets").unwrap();
        assert_eq!(l.writer("", "pods"), Some(pods), "one number per resource");
        assert_eq!(l.writer("apps", "pods").map(|w| w == pods), Some(false), "groups apart");
        assert_eq!(l.writer("", "events"), None);
        assert_eq!(l.writer("events.k8s.io", "events"), None);
        l.record(far, 11);
        assert!(!l.accounted(pods, 10, 11), "pods is not trusted");
        assert_eq!(l.claim_reference(pods, "/pods-probe"), Ok(()));
        assert_eq!(l.claim_reference(pods, "/pods-probe"), Ok(()), "claimed again by its other encoding");
        assert!(!l.accounted(pods, 10, 11), "widgets (another storage, maybe) is not trusted");
        assert_eq!(l.claim_reference(far, "/widgets-probe"), Err("/pods-probe".to_string()), "compare with pods");
        assert!(!l.trusted(far));
        l.trust(far);
        assert!(l.accounted(pods, 10, 11));
    }

    #[test]
    fn the_ledger_forgets_revisions_that_slide_out_of_its_span() {
        let (l, pods, cms, nodes) = ledger();
        l.record(cms, 1_000_001);
        assert!(l.accounted(pods, 1_000_000, 1_000_001));
        let far = 1_000_001 + SPAN as u64;
        l.record(cms, far);
        assert!(!l.accounted(pods, 1_000_000, 1_000_001), "slid out");
        assert!(l.accounted(pods, far - 1, far));
        assert!(!l.accounted(pods, far - 2, far), "never recorded");
        assert!(!l.accounted(pods, 0, far), "wider than the span");
        // A revision below the span is ignored rather than wrapping onto the newer one's slot.
        l.record(nodes, 1_000_001);
        assert!(l.accounted(nodes, far - 1, far), "configmaps wrote `far`, whose slot 1,000,001 shares");
    }

    #[tokio::test(start_paused = true)]
    async fn a_reader_waits_for_the_gaps_last_write_and_gives_up_after_its_grace() {
        let (l, pods, cms, _) = ledger();
        let l = std::sync::Arc::new(l);
        l.record(cms, 51);
        let writer = {
            let l = l.clone();
            tokio::spawn(async move {
                tokio::time::sleep(Duration::from_millis(5)).await;
                l.record(cms, 52);
            })
        };
        assert_eq!(l.wait_accounted(pods, || 50, 52, Duration::from_millis(20)).await, Ok(()));
        writer.await.unwrap();
        let started = tokio::time::Instant::now();
        assert_eq!(l.wait_accounted(pods, || 50, 54, Duration::from_millis(20)).await, Err(53), "the first one missing");
        assert_eq!(started.elapsed(), Duration::from_millis(20));
        assert_eq!(l.wait_accounted(pods, || 54, 54, Duration::ZERO).await, Ok(()), "nothing to account for");
    }

    #[test]
    fn resource_versions_of_one_sequence_interleave() {
        assert!(interleaved(10, 10, 10));
        assert!(interleaved(10, 12, 13));
        assert!(!interleaved(10, 9, 13));
        assert!(!interleaved(10, 14, 13));
    }
}
