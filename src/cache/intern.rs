//! Equal immutable strings held once. The JSON and protobuf caches of a kind decode the same
//! object versions, and each version's key and selectable fields and labels (a few hundred
//! bytes per pod: fourteen labels are common) came out twice; interned, both objects point at
//! one copy, and so do an object's successive versions while their labels stay the same.
//!
//! The table holds its strings strongly, so a string is freed once no object uses it and the
//! next sweep of its shard drops the table's reference. A shard sweeps when the strings added
//! since its last sweep reach an eighth of what it kept then (and at least 1,024), so the
//! strings it holds for no object stay a small share of the live ones, and a sweep's cost is
//! spread over the additions that made it due.

use std::collections::HashSet;
use std::hash::BuildHasher;
use std::sync::{Arc, Mutex};

const SHARDS: usize = 16;

/// A set of shared strings: [`Interner::intern`] returns the held copy of an equal string.
pub(crate) struct Interner {
    shards: [Mutex<Shard>; SHARDS],
    hasher: std::collections::hash_map::RandomState,
}

#[derive(Default)]
struct Shard {
    held: HashSet<Arc<str>>,
    /// Strings added since the last sweep, and how many that sweep kept.
    added: usize,
    kept: usize,
}

impl Interner {
    pub(crate) fn new() -> Interner {
        Interner { shards: std::array::from_fn(|_| Mutex::default()), hasher: Default::default() }
    }

    /// The held string equal to `s`, held from now on if none was.
    pub(crate) fn intern(&self, s: &str) -> Arc<str> {
        let mut shard = self.shards[self.hasher.hash_one(s) as usize % SHARDS].lock().unwrap_or_else(|e| e.into_inner());
        if let Some(held) = shard.held.get(s) {
            return held.clone();
        }
        if shard.added >= (shard.kept / 8).max(1024) {
            shard.held.retain(|a| Arc::strong_count(a) > 1);
            (shard.added, shard.kept) = (0, shard.held.len());
        }
        let held: Arc<str> = Arc::from(s);
        shard.held.insert(held.clone());
        shard.added += 1;
        held
    }

    /// Strings held, whether or not an object still uses them.
    #[cfg(test)]
    fn len(&self) -> usize {
        self.shards.iter().map(|s| s.lock().unwrap().held.len()).sum()
    }
}

/// The selectable fields and labels of every cached object, packed ([`super::object`]).
pub(crate) fn selectables() -> &'static Interner {
    static SELECTABLES: std::sync::OnceLock<Interner> = std::sync::OnceLock::new();
    SELECTABLES.get_or_init(Interner::new)
}

/// The store keys of every cached object.
pub(crate) fn keys() -> &'static Interner {
    static KEYS: std::sync::OnceLock<Interner> = std::sync::OnceLock::new();
    KEYS.get_or_init(Interner::new)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn equal_strings_are_one_allocation() {
        let i = Interner::new();
        let (a, b) = (i.intern("app=web"), i.intern(&String::from("app=web")));
        assert!(Arc::ptr_eq(&a, &b));
        assert!(!Arc::ptr_eq(&a, &i.intern("app=db")));
        assert_eq!(&*a, "app=web");
    }

    #[test]
    fn strings_no_one_uses_are_swept_and_the_table_stays_near_the_live_ones() {
        let i = Interner::new();
        let live: Vec<Arc<str>> = (0..2_000).map(|n| i.intern(&format!("live-{n}"))).collect();
        // Churn: each string used once and dropped at once, far more than are live.
        for n in 0..200_000 {
            drop(i.intern(&format!("gone-{n}")));
        }
        // Each shard holds what it kept at its last sweep (at most the live ones and the
        // unswept) plus at most max(kept/8, 1,024) added since.
        assert!(i.len() <= live.len() + SHARDS * 1_024 + live.len() / 8 + SHARDS, "{} held", i.len());
        // The live ones are still shared.
        for (n, a) in live.iter().enumerate() {
            assert!(Arc::ptr_eq(a, &i.intern(&format!("live-{n}"))));
        }
    }
}
