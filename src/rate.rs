//! Token buckets per key (a source address, a client): what one key may spend a second,
//! a second's worth at once unless said otherwise. Three bounds use them: reviews of tokens
//! kache has never judged, per source address (`--max-token-review-rate-per-address`), the
//! bytes of consistent reads a client has kache pass to the apiserver as the cheaper way
//! (`--max-cheaper-upstream-bytes-per-client`), and a client's watch starts that each need a
//! consistency proof (`--max-watch-starts-per-client`, ten seconds' worth at once).

use std::collections::HashMap;
use std::hash::Hash;
use std::sync::Mutex;
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
        let (rate, burst) = (self.per_second, self.burst);
        if rate == 0.0 {
            return true;
        }
        let now = Instant::now();
        let mut keys = self.keys.lock().unwrap_or_else(|e| e.into_inner());
        if keys.len() >= KEYS && !keys.contains_key(key) {
            // A bucket that has filled up again is the same as no bucket.
            keys.retain(|_, b| now.duration_since(b.at).as_secs_f64() * rate + b.left < burst);
        }
        let b = keys.entry(key.clone()).or_insert(Bucket { left: burst, at: now });
        b.left = (b.left + now.duration_since(b.at).as_secs_f64() * rate).min(burst);
        b.at = now;
        if b.left >= cost.min(burst) {
            b.left -= cost;
            return true;
        }
        crate::telemetry::limit_hit(self.limit);
        false
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
