//! A bounded cache of decisions that expire: token reviews and access reviews are cached for
//! a short TTL (separately for positive and negative answers) so a busy client costs the
//! upstream one review per TTL, and the cache never holds more than its capacity, whatever
//! the clients send.

use std::collections::HashMap;
use std::hash::Hash;
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// A map from `K` to `V` whose entries expire, holding at most `capacity` entries.
#[derive(Debug)]
pub struct TtlCache<K, V> {
    /// aHash with a per-process random key: keys come from clients (selectors, paths), so
    /// the hasher must resist chosen collisions, and SipHash cost ~1% of a cached LIST.
    entries: Mutex<HashMap<K, (Instant, V), ahash::RandomState>>,
    capacity: usize,
    /// How long past its expiry an entry is kept for [`TtlCache::get_stale`].
    keep: Duration,
}

impl<K: Eq + Hash, V: Clone> TtlCache<K, V> {
    /// An empty cache of at most `capacity` entries (at least 1).
    pub fn new(capacity: usize) -> Self {
        TtlCache { entries: Mutex::new(HashMap::default()), capacity: capacity.max(1), keep: Duration::ZERO }
    }

    /// The same, keeping entries `keep` past their expiry for [`TtlCache::get_stale`].
    pub fn keeping(mut self, keep: Duration) -> Self {
        self.keep = keep;
        self
    }

    /// The value for `key` even if it has expired, as long as it expired less than `keep`
    /// ago: the last known decision, for when the upstream cannot be asked.
    pub fn get_stale(&self, key: &K) -> Option<V> {
        let entries = self.entries.lock().unwrap_or_else(|e| e.into_inner());
        entries.get(key).filter(|(until, _)| *until + self.keep > Instant::now()).map(|(_, v)| v.clone())
    }

    /// The value for `key` if it has not expired.
    pub fn get(&self, key: &K) -> Option<V> {
        let entries = self.entries.lock().unwrap_or_else(|e| e.into_inner());
        entries.get(key).filter(|(until, _)| *until > Instant::now()).map(|(_, v)| v.clone())
    }

    /// Remember `value` for `ttl` (a zero TTL remembers nothing). When full, expired entries
    /// are dropped first, then arbitrary ones, down to three quarters of the capacity.
    pub fn insert(&self, key: K, value: V, ttl: Duration) {
        if ttl.is_zero() {
            return;
        }
        let now = Instant::now();
        let mut entries = self.entries.lock().unwrap_or_else(|e| e.into_inner());
        if entries.len() >= self.capacity && !entries.contains_key(&key) {
            let keep = self.keep;
            entries.retain(|_, (until, _)| *until + keep > now);
            let excess = entries.len().saturating_sub(self.capacity * 3 / 4);
            if excess > 0 {
                // HashMap iteration order is random per process: the victims are arbitrary.
                let mut n = excess;
                entries.retain(|_, _| {
                    if n > 0 {
                        n -= 1;
                        false
                    } else {
                        true
                    }
                });
            }
        }
        entries.insert(key, (now + ttl, value));
    }

    /// Entries held (expired ones included until they are swept).
    #[cfg(test)]
    pub fn len(&self) -> usize {
        self.entries.lock().unwrap_or_else(|e| e.into_inner()).len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn entries_expire_and_capacity_holds() {
        let c = TtlCache::new(8);
        c.insert(1, "a", Duration::from_secs(60));
        assert_eq!(c.get(&1), Some("a"));
        c.insert(2, "b", Duration::ZERO);
        assert_eq!(c.get(&2), None);
        for i in 0..100 {
            c.insert(i, "x", Duration::from_secs(60));
            assert!(c.len() <= 8);
        }
        assert_eq!(c.get(&99), Some("x"));
    }

    #[test]
    fn expired_entries_are_kept_for_stale_use_only_as_long_as_asked() {
        let c = TtlCache::new(8).keeping(Duration::from_secs(3600));
        c.insert(1, "a", Duration::from_nanos(1));
        std::thread::sleep(Duration::from_millis(1));
        assert_eq!(c.get(&1), None, "expired");
        assert_eq!(c.get_stale(&1), Some("a"), "still the last known value");
        let strict = TtlCache::new(8);
        strict.insert(1, "a", Duration::from_nanos(1));
        std::thread::sleep(Duration::from_millis(1));
        assert_eq!(strict.get_stale(&1), None, "nothing kept past expiry by default");
    }
}
