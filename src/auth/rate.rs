//! Reviews of tokens kache has never judged, bounded per source address. Each such token
//! costs a TokenReview on the apiserver: one client sending made-up tokens as fast as a
//! connection goes (225 a second) doubled the apiserver's CPU (0.24 -> 0.54 cores). Known
//! tokens are answered from the cache and renewals of known ones are not counted, so an
//! address's honest clients are untouched; past the rate its new tokens get the apiserver's
//! own 429 with `Retry-After`.

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::Mutex;
use tokio::time::Instant;

/// Default of the reviews of never-judged tokens one address may cause per second.
pub const PER_ADDRESS: u32 = 20;

/// Addresses remembered before idle ones (full buckets) are forgotten.
const ADDRESSES: usize = 4096;

#[derive(Debug)]
struct Bucket {
    /// Reviews the address may still cause now.
    left: f64,
    /// When `left` was last brought up to date.
    at: Instant,
}

/// A token bucket per address: `per_second` reviews a second, as many at once.
#[derive(Debug)]
pub struct FirstReviews {
    per_second: u32,
    addrs: Mutex<HashMap<IpAddr, Bucket>>,
}

impl FirstReviews {
    /// At most `per_second` reviews of new tokens a second from one address (0: no bound).
    pub fn new(per_second: u32) -> FirstReviews {
        FirstReviews { per_second, addrs: Mutex::new(HashMap::new()) }
    }

    /// Whether a review of a never-judged token from `ip` may go to the upstream now
    /// (counted when not).
    pub fn allow(&self, ip: Option<IpAddr>) -> bool {
        let (Some(ip), rate) = (ip, f64::from(self.per_second)) else { return true };
        if self.per_second == 0 {
            return true;
        }
        let now = Instant::now();
        let mut addrs = self.addrs.lock().unwrap_or_else(|e| e.into_inner());
        if addrs.len() >= ADDRESSES && !addrs.contains_key(&ip) {
            // A bucket a second old has filled up again: the same as no bucket.
            addrs.retain(|_, b| now.duration_since(b.at).as_secs_f64() * rate + b.left < rate);
        }
        let b = addrs.entry(ip).or_insert(Bucket { left: rate, at: now });
        b.left = (b.left + now.duration_since(b.at).as_secs_f64() * rate).min(rate);
        b.at = now;
        if b.left >= 1.0 {
            b.left -= 1.0;
            return true;
        }
        crate::telemetry::limit_hit("max-token-review-rate-per-address");
        false
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[tokio::test(start_paused = true)]
    async fn an_address_gets_its_rate_of_new_token_reviews_others_theirs() {
        let reviews = FirstReviews::new(20);
        let a = Some("10.0.0.7".parse().unwrap());
        let b = Some("10.0.0.8".parse().unwrap());
        assert_eq!((0..100).filter(|_| reviews.allow(a)).count(), 20, "a second's worth at once");
        assert!(reviews.allow(b), "another address is not held back");
        tokio::time::advance(Duration::from_millis(500)).await;
        assert_eq!((0..100).filter(|_| reviews.allow(a)).count(), 10, "then 20 a second");
        tokio::time::advance(Duration::from_secs(60)).await;
        assert_eq!((0..100).filter(|_| reviews.allow(a)).count(), 20, "never more than a second's worth saved up");
        assert!(reviews.allow(None), "no address (in-process callers): no bound");
        let unbounded = FirstReviews::new(0);
        assert!((0..1000).all(|_| unbounded.allow(a)));
    }

    #[tokio::test(start_paused = true)]
    async fn idle_addresses_are_forgotten() {
        let reviews = FirstReviews::new(1);
        for i in 0..ADDRESSES as u32 {
            assert!(reviews.allow(Some(IpAddr::from(i.to_be_bytes()))));
        }
        tokio::time::advance(Duration::from_secs(1)).await;
        assert!(reviews.allow(Some("10.1.0.1".parse().unwrap())));
        assert_eq!(reviews.addrs.lock().unwrap().len(), 1, "the filled-up buckets went");
    }
}
