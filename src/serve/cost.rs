//! The cost rule of the request path's cached-read step: whether a consistent read (one that
//! needs the upstream's current state) is answered from cache after a freshness proof, or
//! passed through at once because the upstream answers it sooner.
//!
//! Both sides are estimated from measurements, never guessed per request:
//! - the upstream's time for a read: its round trip plus the answer's bytes over its encode
//!   rate, both learned from the reads kache passes through (an [`Observed`] body reports the
//!   time to its last byte against the bytes kache's index holds for that answer), seeded
//!   with a kube-apiserver's typical costs;
//! - kache's time: the expected wait for a freshness proof of that kind (learned from the
//!   proofs it waited for; the apiserver's bookmark timer ticks about once a second) plus its
//!   own time to send the answer.
//!
//! A read passes through when `upstream time <= factor x kache time`
//! (`--consistent-passthrough-factor`, default 1; 0 never passes through by cost). Small answers (a namespace's Services, one object) thus go to the upstream,
//! which answers them from its watch cache in milliseconds; large ones (every pod) wait for
//! the proof and spare the upstream the encoding. The break-even is a byte count
//! ([`Costs::break_even`]), so the request path stops summing an answer's bytes as soon as it
//! passes it.

use crate::body::{Body, BoxError, Chunk, Tap, Tapped};
use dashmap::DashMap;
use http_body::Frame;
use http_body_util::BodyExt;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Seconds of an upstream answer with no body to speak of, before any is measured: about
/// what a kube-apiserver near kache takes for a consistent LIST of one object.
const SEED_ROUND_TRIP: f64 = 0.005;
/// Index bytes per second the upstream encodes, before any is measured: about the rate a
/// kube-apiserver on a small machine answers a consistent protobuf LIST of a large kind at.
const SEED_RATE: f64 = 32e6;
/// Seconds a consistent read waits for a freshness proof, before any is measured: the
/// apiserver's bookmark timer ticks once a second.
const SEED_PROOF: f64 = 1.0;
/// Bytes per second kache sends a stitched answer at (it copies bytes it holds, far faster
/// than the upstream encodes): its own share of a cached answer's time.
const SERVE_RATE: f64 = 1e9;
/// Answers up to this many index bytes measure the round trip; larger ones the rate.
const SMALL_ANSWER: u64 = 64 * 1024;
/// Weight of a new measurement in the moving averages.
const WEIGHT: f64 = 0.2;
/// The rate is kept within these bounds (bytes per second) whatever is measured.
const RATE_BOUNDS: (f64, f64) = (1e6, 4e9);

/// An exponentially weighted moving average, updated without a lock.
#[derive(Debug)]
pub(crate) struct Ewma(AtomicU64);

impl Ewma {
    fn new(seed: f64) -> Ewma {
        Ewma(AtomicU64::new(seed.to_bits()))
    }

    /// The current average.
    pub(crate) fn get(&self) -> f64 {
        f64::from_bits(self.0.load(Ordering::Relaxed))
    }

    /// Move the average towards `x` by [`WEIGHT`].
    fn record(&self, x: f64) {
        if !x.is_finite() {
            return;
        }
        let _ = self.0.fetch_update(Ordering::Relaxed, Ordering::Relaxed, |bits| {
            let old = f64::from_bits(bits);
            Some((old + WEIGHT * (x - old)).to_bits())
        });
    }
}

/// What kache has measured of the upstream's and its own costs, shared by every request.
#[derive(Debug)]
pub struct Costs {
    /// The upstream's seconds for an answer with (almost) no body.
    round_trip: Ewma,
    /// Index bytes per second the upstream answers large reads at.
    rate: Ewma,
    /// Per kind (`plural.group`), the seconds a consistent read waited for its proof.
    proof: DashMap<String, Ewma>,
    /// `--consistent-passthrough-factor`.
    factor: f64,
}

/// A consistent read's decision, with the figures it was made on (for the pass-through's
/// measurement and for logs).
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) enum Decision {
    /// The upstream is expected to answer sooner: pass it through.
    Upstream,
    /// Wait for a freshness proof, at most this long (the upstream's expected time: past it
    /// the upstream would have answered already).
    Prove(Duration),
}

impl Costs {
    /// Costs with the seeds, weighing the upstream by `factor`.
    pub fn new(factor: f64) -> Costs {
        Costs { round_trip: Ewma::new(SEED_ROUND_TRIP), rate: Ewma::new(SEED_RATE), proof: DashMap::new(), factor: factor.max(0.0) }
    }

    /// The upstream answered a read whose answer kache's index holds as `bytes`, in `took`
    /// (request to last byte).
    pub(crate) fn observe_upstream(&self, bytes: u64, took: Duration) {
        let secs = took.as_secs_f64();
        if bytes <= SMALL_ANSWER {
            self.round_trip.record(secs);
        } else {
            let body = (secs - self.round_trip.get()).max(1e-3);
            self.rate.record((bytes as f64 / body).clamp(RATE_BOUNDS.0, RATE_BOUNDS.1));
        }
    }

    /// A consistent read of `kind` waited `waited` for its freshness proof (or gave up then).
    pub(crate) fn observe_proof(&self, kind: &str, waited: Duration) {
        match self.proof.get(kind) {
            Some(e) => e.record(waited.as_secs_f64()),
            None => {
                let e = Ewma::new(SEED_PROOF);
                e.record(waited.as_secs_f64());
                self.proof.insert(kind.to_string(), e);
            }
        }
    }

    /// The expected wait for a proof of `kind`, in seconds.
    pub(crate) fn proof_wait(&self, kind: &str) -> f64 {
        self.proof.get(kind).map_or(SEED_PROOF, |e| e.get())
    }

    /// The upstream's round trip (seconds) and rate (bytes per second) as measured.
    pub(crate) fn upstream(&self) -> (f64, f64) {
        (self.round_trip.get(), self.rate.get())
    }

    /// The upstream's expected seconds for an answer of `bytes` index bytes.
    pub(crate) fn upstream_secs(&self, bytes: u64) -> f64 {
        let (rtt, rate) = self.upstream();
        rtt + bytes as f64 / rate
    }

    /// The largest answer (index bytes) of `kind` the upstream is expected to give no later
    /// than kache could after a proof: `rtt + b/rate <= factor x (wait + b/serve)`. `None`
    /// when no answer is (factor 0, or a round trip slower than a proof); `u64::MAX` when
    /// every answer is.
    pub(crate) fn break_even(&self, kind: &str) -> Option<u64> {
        if self.factor <= 0.0 {
            return None;
        }
        let (rtt, rate) = self.upstream();
        let spare = self.factor * self.proof_wait(kind) - rtt;
        let per_byte = 1.0 / rate - self.factor / SERVE_RATE;
        if spare < 0.0 {
            None
        } else if per_byte <= 0.0 {
            Some(u64::MAX)
        } else {
            Some((spare / per_byte).min(u64::MAX as f64) as u64)
        }
    }

    /// Decide for an answer of `bytes` index bytes of `kind`, waiting at most `bound` for a
    /// proof.
    pub(crate) fn decide(&self, kind: &str, bytes: u64, bound: Duration) -> Decision {
        if self.break_even(kind).is_some_and(|b| bytes <= b) {
            return Decision::Upstream;
        }
        // The upstream would have answered after this long: waiting longer for a proof only
        // makes the client wait more than it would directly. With the factor 0 (the cache
        // preferred), the bound alone limits it.
        let upstream = Duration::try_from_secs_f64(self.upstream_secs(bytes)).unwrap_or(bound);
        Decision::Prove(if self.factor > 0.0 { bound.min(upstream.max(Duration::from_millis(1))) } else { bound })
    }
}

impl Costs {
    /// A read of the whole collection of a kind whose cache is still listing, expected to
    /// have synced in `eta` holding `bytes` (index bytes), the whole list taking `list` at
    /// the rate of its pages so far: how long to wait for it, or `None` to pass the read
    /// through now. It waits when the cache would answer sooner than the upstream (`eta`,
    /// plus a proof's expected wait for a `consistent` read, against the upstream's time for
    /// the answer, weighed by the factor), and no longer than the upstream would take. The
    /// upstream's time is the longer of what the list itself measures (the same answer from
    /// the same upstream, which kache's own lists are loading meanwhile) and the rule's
    /// estimate for `bytes`. With the factor 0 it never waits (as before the rule).
    pub(crate) fn wait_for_sync(&self, kind: &str, (eta, list): (Duration, Duration), bytes: u64, consistent: bool) -> Option<Duration> {
        if self.factor <= 0.0 {
            return None;
        }
        let upstream = self.upstream_secs(bytes).max(list.as_secs_f64());
        let kache = eta.as_secs_f64() + if consistent { self.proof_wait(kind) } else { 0.0 } + bytes as f64 / SERVE_RATE;
        (upstream > self.factor * kache).then(|| Duration::try_from_secs_f64(upstream).unwrap_or(Duration::MAX))
    }
}

/// What a passed-through answer's body reports to [`Costs`] when its last byte has gone:
/// how long the upstream took for an answer of `bytes` index bytes. A body the client
/// abandons reports nothing.
pub(crate) struct Observed {
    costs: Arc<Costs>,
    bytes: u64,
    started: Instant,
    reported: bool,
}

impl Observed {
    /// `inner`, reporting its time since `started` for `bytes` index bytes at its end.
    pub(crate) fn wrap(inner: Body, costs: Arc<Costs>, bytes: u64, started: Instant) -> Body {
        Tapped::new(inner, Observed { costs, bytes, started, reported: false }).boxed_unsync()
    }

    fn report(&mut self) {
        if !self.reported {
            self.reported = true;
            self.costs.observe_upstream(self.bytes, self.started.elapsed());
        }
    }
}

impl Tap<Chunk, BoxError> for Observed {
    fn polled(&mut self, frame: Option<&Result<Frame<Chunk>, BoxError>>, ended: bool) {
        match frame {
            None => self.report(),
            Some(Ok(_)) if ended => self.report(),
            _ => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn small_answers_go_upstream_and_large_ones_wait_for_the_proof() {
        let c = Costs::new(1.0);
        // Seeds: 5 ms + b / 32 MB/s against 1 s: break-even near 32 MB.
        let b = c.break_even("pods").unwrap();
        assert!((30_000_000..33_000_000).contains(&b), "{b}");
        assert_eq!(c.decide("pods", 40_000, Duration::from_secs(3)), Decision::Upstream);
        // 150 MB (every pod) takes the upstream ~4.7 s: wait for the proof, at most the bound.
        assert_eq!(c.decide("pods", 150_000_000, Duration::from_secs(3)), Decision::Prove(Duration::from_secs(3)));
        // 40 MB takes it ~1.26 s: wait no longer than that.
        let Decision::Prove(d) = c.decide("pods", 40_000_000, Duration::from_secs(3)) else { panic!("prove") };
        assert!((1.2..1.3).contains(&d.as_secs_f64()), "{d:?}");
    }

    #[test]
    fn a_cache_still_listing_is_waited_for_when_it_will_answer_sooner() {
        let c = Costs::new(1.0);
        // Every pod (150 MB, the upstream's ~4.7 s) with the list 2 s from its end: wait,
        // as long as the upstream would take; a consistent read adds the proof's 1 s.
        let secs = Duration::from_secs;
        let w = c.wait_for_sync("pods", (secs(2), secs(3)), 150_000_000, true).expect("waits");
        assert!((4.6..4.8).contains(&w.as_secs_f64()), "{w:?}");
        // The list 4 s from its end: with the proof kache would be later than the upstream.
        assert_eq!(c.wait_for_sync("pods", (secs(4), secs(4)), 150_000_000, true), None);
        assert!(c.wait_for_sync("pods", (secs(4), secs(4)), 150_000_000, false).is_some(), "RV=0 needs no proof");
        // The list itself shows the upstream slower than the estimate (it is busy): 20 s for
        // the whole, 12 s left, so waiting wins, for as long as the list says.
        assert_eq!(c.wait_for_sync("pods", (secs(12), secs(20)), 150_000_000, true), Some(secs(20)));
        // A small kind the upstream lists in milliseconds: through at once.
        assert_eq!(c.wait_for_sync("namespaces", (Duration::from_millis(100), Duration::from_millis(100)), 30_000, false), None);
        // The factor 0 keeps the cache's old rule: not synced passes through.
        assert_eq!(Costs::new(0.0).wait_for_sync("pods", (Duration::from_millis(1), secs(5)), 150_000_000, false), None);
    }

    #[test]
    fn the_factor_weighs_the_upstream() {
        assert_eq!(Costs::new(0.0).break_even("pods"), None, "0 never passes through by cost");
        assert_eq!(Costs::new(0.0).decide("pods", 1, Duration::from_secs(3)), Decision::Prove(Duration::from_secs(3)));
        // A larger factor favours the upstream.
        let less = Costs::new(0.5).break_even("pods").unwrap();
        let more = Costs::new(2.0).break_even("pods").unwrap();
        assert!(more > less, "{less} {more}");
        // A round trip slower than a proof (so weighted): nothing is cheaper upstream.
        assert_eq!(Costs::new(0.001).break_even("pods"), None);
        // One that weighs kache's own sending above the upstream's: everything is.
        assert_eq!(Costs::new(1e9).break_even("pods"), Some(u64::MAX));
    }

    #[test]
    fn measurements_move_the_break_even() {
        let c = Costs::new(1.0);
        let before = c.break_even("nodes").unwrap();
        // Proofs of this kind come quickly (a kind the writers move): less passes through.
        for _ in 0..50 {
            c.observe_proof("nodes", Duration::from_millis(50));
        }
        assert!((c.proof_wait("nodes") - 0.05).abs() < 0.01);
        let quick = c.break_even("nodes").unwrap();
        assert!(quick < before / 10, "{quick} {before}");
        // Another kind keeps the seed.
        assert_eq!(c.proof_wait("pods"), SEED_PROOF);
        // A slower upstream (10 MB in 1 s): its time per byte grows, so less passes through.
        for _ in 0..50 {
            c.observe_upstream(10_000_000, Duration::from_secs(1));
        }
        let (_, rate) = c.upstream();
        assert!((9e6..11e6).contains(&rate), "{rate}");
        assert!(c.break_even("pods").unwrap() < before / 2);
        // Small answers measure the round trip.
        for _ in 0..50 {
            c.observe_upstream(1_000, Duration::from_millis(40));
        }
        assert!((c.upstream().0 - 0.04).abs() < 0.005);
    }

    #[test]
    fn a_non_finite_measurement_is_ignored() {
        let e = Ewma::new(1.0);
        e.record(f64::NAN);
        e.record(f64::INFINITY);
        assert_eq!(e.get(), 1.0);
        e.record(2.0);
        assert!((e.get() - 1.2).abs() < 1e-9);
    }

    #[tokio::test]
    async fn an_observed_body_reports_at_its_end_and_not_when_abandoned() {
        use http_body_util::BodyExt;
        let costs = Arc::new(Costs::new(1.0));
        let body = crate::body::full(bytes::Bytes::from_static(b"{}"));
        let started = Instant::now() - Duration::from_millis(500);
        let observed = Observed::wrap(body, costs.clone(), 100, started);
        observed.collect().await.unwrap();
        assert!(costs.upstream().0 > SEED_ROUND_TRIP, "a 0.5 s answer moved the round trip up");
        let costs2 = Arc::new(Costs::new(1.0));
        drop(Observed::wrap(crate::body::full(bytes::Bytes::from_static(b"{}")), costs2.clone(), 100, started));
        assert_eq!(costs2.upstream().0, SEED_ROUND_TRIP);
    }
}
