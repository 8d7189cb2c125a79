//! Token buckets per key (a source address, a client): what one key may spend a second,
//! a second's worth at once unless said otherwise. Four bounds use them: reviews of tokens
//! kache has never judged, per source address (`--max-token-review-rate-per-address`), the
//! bytes of consistent reads a client has kache pass to the apiserver as the cheaper way
//! (`--max-cheaper-upstream-rate-per-client`), a client's watch starts that each need a
//! consistency proof (`--max-watch-starts-per-client`, ten seconds' worth at once, refused
//! past it), and a client's consistent reads that each need one
//! (`--max-consistent-reads-per-client`, ten seconds' worth at once, queued past it).
//!
//! Hand-written rather than `governor`'s keyed limiter, whose GCRA cannot do what two of
//! these need: a read's bytes larger than the burst are refused for ever by its `check_key_n`
//! (`InsufficientCapacity`) where here they go once and are repaid as a debt, and a check
//! it refuses reserves nothing, so it has no [`Buckets::queue`] that hands each waiting
//! read its turn in order. Its key store also grows until the caller prunes it.

use std::collections::HashMap;
use std::hash::Hash;
use std::sync::Mutex;
use std::time::Duration;
use tokio::time::Instant;

/// Keys remembered before idle ones (full buckets) are forgotten.
const KEYS: usize = 4096;

#[derive(Debug)]
struct Bucket {
    /// What the key may still spend now (below zero: a debt it repays first).
    left: f64,
    /// When `left` was last brought up to date.
    at: Instant,
}

/// A bucket per key: `per_second` a second, `burst` at once.
#[derive(Debug)]
pub struct Buckets<K> {
    per_second: f64,
    burst: f64,
    /// The `kache_limit_hits_total` label counted when a key is held back.
    limit: &'static str,
    keys: Mutex<HashMap<K, Bucket>>,
}

impl<K: Hash + Eq + Clone> Buckets<K> {
    /// At most `per_second` a second for each key (0: no bound); a hit counts as `limit`.
    pub fn new(per_second: u64, limit: &'static str) -> Buckets<K> {
        Self::with_burst(per_second, per_second, limit)
    }

    /// At most `per_second` a second for each key (0: no bound), `burst` at once.
    pub fn with_burst(per_second: u64, burst: u64, limit: &'static str) -> Buckets<K> {
        Buckets { per_second: per_second as f64, burst: burst as f64, limit, keys: Mutex::new(HashMap::new()) }
    }

    /// Whether `key` may spend `cost` now (counted when not). A cost larger than the
    /// burst goes once the bucket is full, and the debt is repaid before the key spends
    /// again.
    pub fn take(&self, key: &K, cost: f64) -> bool {
        if self.per_second == 0.0 {
            return true;
        }
        let burst = self.burst;
        let spent = self.with_bucket(key, |b| {
            let may = b.left >= cost.min(burst);
            if may {
                b.left -= cost;
            }
            may
        });
        if !spent {
            crate::telemetry::limit_hit(self.limit);
        }
        spent
    }

    /// How long `key` waits before it spends one: nothing while its bucket holds one; past
    /// that its spends queue, each reserved at once and due when the rate has paid for it
    /// (a wait is counted as a hit).
    pub fn queue(&self, key: &K) -> Duration {
        let rate = self.per_second;
        if rate == 0.0 {
            return Duration::ZERO;
        }
        let left = self.with_bucket(key, |b| {
            b.left -= 1.0;
            b.left
        });
        if left >= 0.0 {
            return Duration::ZERO;
        }
        crate::telemetry::limit_hit(self.limit);
        Duration::from_secs_f64(-left / rate)
    }

    /// `f` on `key`'s bucket, brought up to date.
    fn with_bucket<R>(&self, key: &K, f: impl FnOnce(&mut Bucket) -> R) -> R {
        let (rate, burst) = (self.per_second, self.burst);
        let now = Instant::now();
        let mut keys = self.keys.lock().unwrap_or_else(|e| e.into_inner());
        if keys.len() >= KEYS && !keys.contains_key(key) {
            // A bucket that has filled up again is the same as no bucket.
            keys.retain(|_, b| now.duration_since(b.at).as_secs_f64() * rate + b.left < burst);
        }
        let b = keys.entry(key.clone()).or_insert(Bucket { left: burst, at: now });
        b.left = (b.left + now.duration_since(b.at).as_secs_f64() * rate).min(burst);
        b.at = now;
        f(b)
    }

    /// Keys remembered now.
    #[cfg(test)]
    fn len(&self) -> usize {
        self.keys.lock().unwrap().len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::IpAddr;
    use std::time::Duration;

    const LIMIT: &str = "max-token-review-rate-per-address";

    #[tokio::test(start_paused = true)]
    async fn a_key_gets_its_rate_others_theirs() {
        let b = Buckets::new(20, LIMIT);
        let (x, y): (IpAddr, IpAddr) = ("10.0.0.7".parse().unwrap(), "10.0.0.8".parse().unwrap());
        assert_eq!((0..100).filter(|_| b.take(&x, 1.0)).count(), 20, "a second's worth at once");
        assert!(b.take(&y, 1.0), "another key is not held back");
        tokio::time::advance(Duration::from_millis(500)).await;
        assert_eq!((0..100).filter(|_| b.take(&x, 1.0)).count(), 10, "then 20 a second");
        tokio::time::advance(Duration::from_secs(60)).await;
        assert_eq!((0..100).filter(|_| b.take(&x, 1.0)).count(), 20, "never more than a second's worth saved up");
        let unbounded = Buckets::new(0, LIMIT);
        assert!((0..1000).all(|_| unbounded.take(&x, 1.0)));
    }

    #[tokio::test(start_paused = true)]
    async fn a_burst_apart_from_the_rate_goes_at_once_then_the_rate() {
        let b = Buckets::with_burst(2, 10, "max-watch-starts-per-client");
        assert_eq!((0..100).filter(|_| b.take(&"tenant", 1.0)).count(), 10, "the burst at once");
        tokio::time::advance(Duration::from_secs(1)).await;
        assert_eq!((0..100).filter(|_| b.take(&"tenant", 1.0)).count(), 2, "then the rate");
        tokio::time::advance(Duration::from_secs(60)).await;
        assert_eq!((0..100).filter(|_| b.take(&"tenant", 1.0)).count(), 10, "never more than the burst saved up");
    }

    #[tokio::test(start_paused = true)]
    async fn a_large_cost_goes_once_and_is_repaid_before_the_next() {
        let b = Buckets::new(1000, LIMIT);
        assert!(b.take(&"tenant", 5000.0), "more than a second's worth, once");
        assert!(!b.take(&"tenant", 1.0), "in debt");
        tokio::time::advance(Duration::from_secs(4)).await;
        assert!(!b.take(&"tenant", 1.0), "still 1,000 in debt");
        tokio::time::advance(Duration::from_millis(1001)).await;
        assert!(b.take(&"tenant", 1.0));
    }

    #[tokio::test(start_paused = true)]
    async fn past_the_burst_spends_queue_each_due_when_the_rate_has_paid_for_it() {
        let b = Buckets::with_burst(4, 8, "max-consistent-reads-per-client");
        let waits: Vec<_> = (0..12).map(|_| b.queue(&"tenant")).collect();
        assert!(waits[..8].iter().all(Duration::is_zero), "the burst at once: {waits:?}");
        let ms: Vec<_> = waits[8..].iter().map(Duration::as_millis).collect();
        assert_eq!(ms, [250, 500, 750, 1000], "then one every quarter second, in order");
        assert_eq!(b.queue(&"other"), Duration::ZERO, "another key does not wait");
        tokio::time::advance(Duration::from_secs(1)).await;
        assert_eq!(b.queue(&"tenant").as_millis(), 250, "the queue ahead was paid for, not skipped");
        tokio::time::advance(Duration::from_secs(60)).await;
        assert!((0..8).all(|_| b.queue(&"tenant").is_zero()), "never more than the burst saved up");
        assert!(!b.queue(&"tenant").is_zero());
        let unbounded = Buckets::<&str>::new(0, LIMIT);
        assert!((0..1000).all(|_| unbounded.queue(&"tenant").is_zero()));
    }

    #[tokio::test(start_paused = true)]
    async fn idle_keys_are_forgotten() {
        let b = Buckets::new(1, LIMIT);
        for i in 0..KEYS as u32 {
            assert!(b.take(&IpAddr::from(i.to_be_bytes()), 1.0));
        }
        tokio::time::advance(Duration::from_secs(1)).await;
        assert!(b.take(&"10.1.0.1".parse().unwrap(), 1.0));
        assert_eq!(b.len(), 1, "the filled-up buckets went");
    }
}
