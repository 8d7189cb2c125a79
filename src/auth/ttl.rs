//! A bounded cache of decisions that expire: token reviews and access reviews are cached for
//! a short TTL (separately for positive and negative answers) so a busy client costs the
//! upstream one review per TTL, and the cache never holds more than its capacity, whatever
//! the clients send.
//!
//! Each entry belongs to an owner (the user it decides for). When the cache is full, expired
//! entries go first, then entries of the owner holding the most: a client that floods the
//! cache with decisions nobody asks for again (made-up selectors, say) evicts its own, never
//! the decisions other clients rely on.
//!
//! Hand-written rather than `moka` or `quick_cache`: they choose what to evict by recency and
//! frequency over all entries (moka's TinyLFU, quick_cache's Clock-PRO), never by whose entries
//! they are, so one flooding client can push out the others' decisions; neither hands out an
//! entry past its expiry, as [`TtlCache::get_stale`] does; and quick_cache has no expiry.

use std::collections::HashMap;
use std::hash::Hash;
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// The owner of entries inserted without one.
pub const NOBODY: u64 = 0;

/// A map from `K` to `V` whose entries expire, holding at most `capacity` entries.
#[derive(Debug)]
pub struct TtlCache<K, V> {
    /// aHash with a per-process random key: keys come from clients (selectors, paths), so
    /// the hasher must resist chosen collisions, and SipHash cost ~1% of a cached LIST.
    entries: Mutex<Entries<K, V>>,
    capacity: usize,
    /// How long past its expiry an entry is kept for [`TtlCache::get_stale`].
    keep: Duration,
}

#[derive(Debug)]
struct Entries<K, V> {
    /// Each value with its expiry and owner.
    map: HashMap<K, (Instant, V, u64), ahash::RandomState>,
    /// Entries held per owner.
    owners: HashMap<u64, usize, ahash::RandomState>,
}

impl<K: Eq + Hash, V> Entries<K, V> {
    fn remove(&mut self, key: &K) {
        if let Some((_, _, owner)) = self.map.remove(key) {
            self.disown(owner, 1);
        }
    }

    fn disown(&mut self, owner: u64, n: usize) {
        if let Some(c) = self.owners.get_mut(&owner) {
            *c = c.saturating_sub(n);
            if *c == 0 {
                self.owners.remove(&owner);
            }
        }
    }

    /// Drop entries expired more than `keep` ago.
    fn sweep(&mut self, now: Instant, keep: Duration) {
        let owners = &mut self.owners;
        self.map.retain(|_, (until, _, owner)| {
            let live = *until + keep > now;
            if !live {
                if let Some(c) = owners.get_mut(owner) {
                    *c = c.saturating_sub(1);
                }
            }
            live
        });
        self.owners.retain(|_, c| *c > 0);
    }

    /// Drop `n` entries of the owners holding the most, the largest first.
    fn evict(&mut self, mut n: usize) {
        while n > 0 {
            let Some((&top, &held)) = self.owners.iter().max_by_key(|(_, c)| **c) else { return };
            let take = n.min(held);
            let mut left = take;
            self.map.retain(|_, (_, _, owner)| {
                if left > 0 && *owner == top {
                    left -= 1;
                    false
                } else {
                    true
                }
            });
            self.disown(top, take - left);
            n -= take - left;
            if take == left {
                return;
            }
        }
    }
}

impl<K: Eq + Hash, V: Clone> TtlCache<K, V> {
    /// An empty cache of at most `capacity` entries (at least 1).
    pub fn new(capacity: usize) -> Self {
        let entries = Entries { map: HashMap::default(), owners: HashMap::default() };
        TtlCache { entries: Mutex::new(entries), capacity: capacity.max(1), keep: Duration::ZERO }
    }

    /// The same, keeping entries `keep` past their expiry for [`TtlCache::get_stale`].
    pub fn keeping(mut self, keep: Duration) -> Self {
        self.keep = keep;
        self
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Entries<K, V>> {
        self.entries.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The value for `key` even if it has expired, as long as it expired less than `keep`
    /// ago: the last known decision, for when the upstream cannot be asked.
    pub fn get_stale(&self, key: &K) -> Option<V> {
        self.lock().map.get(key).filter(|(until, ..)| *until + self.keep > Instant::now()).map(|(_, v, _)| v.clone())
    }

    /// The value for `key` if it has not expired.
    pub fn get(&self, key: &K) -> Option<V> {
        self.lock().map.get(key).filter(|(until, ..)| *until > Instant::now()).map(|(_, v, _)| v.clone())
    }

    /// Forget `key`.
    pub fn remove(&self, key: &K) {
        self.lock().remove(key);
    }

    /// Remember `value` for `ttl` (a zero TTL remembers nothing), owned by nobody.
    pub fn insert(&self, key: K, value: V, ttl: Duration) {
        self.insert_for(NOBODY, key, value, ttl)
    }

    /// Remember `value` for `ttl` as `owner`'s (a zero TTL remembers nothing). When full,
    /// expired entries are dropped first, then the entries of the owners holding the most,
    /// down to three quarters of the capacity.
    pub fn insert_for(&self, owner: u64, key: K, value: V, ttl: Duration) {
        if ttl.is_zero() {
            return;
        }
        let now = Instant::now();
        let mut entries = self.lock();
        entries.remove(&key);
        if entries.map.len() >= self.capacity {
            entries.sweep(now, self.keep);
            let excess = entries.map.len().saturating_sub(self.capacity * 3 / 4);
            if excess > 0 {
                crate::telemetry::limit_hit("auth-cache-entries");
                entries.evict(excess);
            }
        }
        entries.map.insert(key, (now + ttl, value, owner));
        *entries.owners.entry(owner).or_insert(0) += 1;
    }

    /// Entries held (expired ones included until they are swept).
    #[cfg(test)]
    pub fn len(&self) -> usize {
        self.lock().map.len()
    }
}

/// The owner number of a user name (entries are counted per owner).
pub fn owner(user: &str) -> u64 {
    static SEED: std::sync::OnceLock<ahash::RandomState> = std::sync::OnceLock::new();
    SEED.get_or_init(ahash::RandomState::new).hash_one(user).max(1)
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
    fn a_flooding_owner_evicts_its_own_entries_never_others() {
        let c = TtlCache::new(100);
        let (alice, bob, mallory) = (owner("alice"), owner("bob"), owner("mallory"));
        for i in 0..20 {
            c.insert_for(alice, format!("alice-{i}"), i, Duration::from_secs(60));
            c.insert_for(bob, format!("bob-{i}"), i, Duration::from_secs(60));
        }
        for i in 0..10_000 {
            c.insert_for(mallory, format!("junk-{i}"), i, Duration::from_secs(60));
            assert!(c.len() <= 100);
        }
        for i in 0..20 {
            assert_eq!(c.get(&format!("alice-{i}")), Some(i), "alice's decisions stay");
            assert_eq!(c.get(&format!("bob-{i}")), Some(i), "bob's decisions stay");
        }
        assert_eq!(c.get(&"junk-9999".to_string()), Some(9999), "the newest junk is there until more comes");
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
