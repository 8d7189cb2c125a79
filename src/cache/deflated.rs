//! Deflated runs of a kind's WatchList events, kept between WatchLists.
//!
//! A WatchList of a whole collection sends every object as an ADDED event, and a client
//! that accepts gzip gets them deflated (`serve::compress::watch`). Informers of the same
//! kind start their WatchLists in bursts (a controller's replicas, every client after an
//! outage), and each would deflate the same events again, though deflating is much of what
//! kache spends on such a stream.
//!
//! So the watcher cuts such a stream into runs of consecutive objects, where the objects
//! themselves say (a run ends after an object whose key hashes to a cut, once it holds
//! [`MIN_RUN`] bytes, or at [`MAX_RUN`]), so a changed, added or removed object changes
//! only its own run and the next cut puts the runs back in step. Each run is deflated on
//! its own (a fresh deflater, ended with a sync flush, so its blocks end on a byte and refer
//! to nothing before them) and kept here, found by its first object, with weak references to
//! the exact versions it holds. The next WatchList sends a run whose objects are the same
//! versions as its deflated bytes, with their CRC combined into its gzip member's; any other
//! run is deflated again.
//!
//! Bounded: a run is kept only when it deflates to at most half its size, and the runs of a
//! kind together hold at most a quarter of the bytes its snapshot holds (a compressed copy
//! of pods is about a tenth). Each whole WatchList that completes drops the runs of its
//! encoding it did not send.

use crate::body::{Deflated, KeepsDeflated};
use crate::cache::object::Object;
use bytes::Bytes;
use flate2::Crc;
use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, OnceLock, Weak};

/// A run is not cut before it holds this many bytes of frames. Each run is deflated without
/// the window of the one before, so runs cost compression, the more the shorter they are:
/// at 128 KiB the deflated stream is a little larger than deflated whole, and longer runs
/// gain little more.
pub const MIN_RUN: usize = 128 * 1024;
/// A run is cut once it holds this many bytes of frames.
pub const MAX_RUN: usize = 1024 * 1024;
/// After [`MIN_RUN`], one key in this many ends a run (pods: about 38 objects, 220 KB).
const CUT: u64 = 16;

/// The deflated runs of one kind, in each encoding.
#[derive(Debug, Default)]
pub struct Runs {
    by_first: Mutex<HashMap<(u8, usize), Arc<Run>>>,
    /// Deflated bytes the kept runs hold, and how many they may hold.
    held: Arc<RunBytes>,
    /// Whole WatchLists begun, numbering their passes over the runs.
    passes: AtomicU64,
}

#[derive(Debug, Default)]
struct RunBytes {
    bytes: AtomicUsize,
    cap: AtomicUsize,
}

/// A run of consecutive objects' events, and once deflated, its deflated form.
#[derive(Debug)]
pub struct Run {
    /// The object versions it holds, in order (weak: a run keeps no object's bytes alive).
    objects: Box<[Weak<Object>]>,
    deflated: OnceLock<Deflated>,
    /// The last pass that sent it.
    pass: AtomicU64,
    held: Arc<RunBytes>,
}

/// Whether a run ends after an object with `key`, the run holding `len` bytes of frames.
pub fn cut_after(key: &str, len: usize) -> bool {
    // Fixed seeds: the same keys cut the same runs in every WatchList.
    const SEEDS: ahash::RandomState = ahash::RandomState::with_seeds(0x6b61, 0x6368, 0x6521, 0x7275);
    len >= MAX_RUN || (len >= MIN_RUN && SEEDS.hash_one(key).is_multiple_of(CUT))
}

impl Runs {
    /// A new whole WatchList's pass over the runs; the runs may hold up to `cap` bytes.
    pub fn begin(&self, cap: usize) -> u64 {
        self.held.cap.store(cap, Ordering::Relaxed);
        self.passes.fetch_add(1, Ordering::Relaxed) + 1
    }

    /// The run of `objects` in encoding `enc`: the one kept if it holds exactly these object
    /// versions, else a new one (kept in its place, to be deflated by the stream).
    pub fn run(&self, enc: u8, objects: &[&Arc<Object>], pass: u64) -> Arc<Run> {
        let Some(first) = objects.first() else { return self.fresh(objects, pass) };
        let key = (enc, Arc::as_ptr(first) as usize);
        let mut by_first = self.by_first.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(run) = by_first.get(&key).filter(|r| r.holds(objects)) {
            run.pass.fetch_max(pass, Ordering::Relaxed);
            return run.clone();
        }
        let run = self.fresh(objects, pass);
        by_first.insert(key, run.clone());
        run
    }

    fn fresh(&self, objects: &[&Arc<Object>], pass: u64) -> Arc<Run> {
        Arc::new(Run {
            objects: objects.iter().map(|o| Arc::downgrade(o)).collect(),
            deflated: OnceLock::new(),
            pass: AtomicU64::new(pass),
            held: self.held.clone(),
        })
    }

    /// A whole WatchList's pass in encoding `enc` is complete: the runs of that encoding it
    /// did not send are dropped.
    pub fn end(&self, enc: u8, pass: u64) {
        let mut by_first = self.by_first.lock().unwrap_or_else(|e| e.into_inner());
        by_first.retain(|(e, _), r| *e != enc || r.pass.load(Ordering::Relaxed) >= pass);
    }

    /// Runs kept, and their deflated bytes.
    pub fn held(&self) -> (usize, usize) {
        let n = self.by_first.lock().unwrap_or_else(|e| e.into_inner()).len();
        (n, self.held.bytes.load(Ordering::Relaxed))
    }
}

impl Run {
    /// Whether this run holds exactly these object versions. A weak reference keeps its
    /// object's allocation, so no other object can have its address while it lives.
    fn holds(&self, objects: &[&Arc<Object>]) -> bool {
        self.objects.len() == objects.len() && self.objects.iter().zip(objects).all(|(w, o)| std::ptr::eq(w.as_ptr(), Arc::as_ptr(o)))
    }
}

impl KeepsDeflated for Run {
    fn deflated(&self) -> Option<&Deflated> {
        self.deflated.get()
    }

    /// Kept if they are at most half the events and the kind's runs have room.
    fn keep(&self, bytes: Bytes, crc: Crc, len: usize) {
        let n = bytes.len();
        if n > len / 2 || self.deflated.get().is_some() {
            return;
        }
        let held = &self.held;
        let room = held.bytes.fetch_add(n, Ordering::Relaxed) + n <= held.cap.load(Ordering::Relaxed);
        if !room || self.deflated.set(Deflated { bytes, crc }).is_err() {
            held.bytes.fetch_sub(n, Ordering::Relaxed);
        }
    }
}

impl Drop for Run {
    fn drop(&mut self) {
        if let Some(d) = self.deflated.get() {
            self.held.bytes.fetch_sub(d.bytes.len(), Ordering::Relaxed);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pod(name: &str, rv: u64) -> Object {
        let r = crate::sim::catalog::resource("pods");
        let v = serde_json::json!({"metadata": {"name": name, "namespace": "ns", "resourceVersion": rv.to_string()}});
        Object::new(&r, &v, Some(&crate::cache::object::item_json(&v)), None).unwrap()
    }

    fn crc(data: &[u8]) -> Crc {
        let mut c = Crc::new();
        c.update(data);
        c
    }

    #[test]
    fn a_run_is_found_again_only_for_the_same_object_versions() {
        let runs = Runs::default();
        let (a, b, b2) = (Arc::new(pod("a", 1)), Arc::new(pod("b", 2)), Arc::new(pod("b", 3)));
        let pass = runs.begin(1 << 20);
        let first = runs.run(1, &[&a, &b], pass);
        first.keep(Bytes::from_static(&[0; 10]), crc(b"x"), 100);
        assert!(Arc::ptr_eq(&runs.run(1, &[&a, &b], pass), &first), "same versions: the kept run");
        assert!(runs.run(1, &[&a, &b], pass).deflated().is_some());
        assert!(!Arc::ptr_eq(&runs.run(0, &[&a, &b], pass), &first), "another encoding's run is its own");
        let changed = runs.run(1, &[&a, &b2], pass);
        assert!(changed.deflated().is_none(), "a new version of b: deflated again");
        assert!(runs.run(1, &[&a], pass).deflated().is_none(), "fewer objects: another run");
        assert_eq!(runs.held(), (2, 10), "the replaced runs are gone; the first's bytes held while a stream holds it");
        drop(first);
        assert_eq!(runs.held(), (2, 0), "and given back once none does");
    }

    #[test]
    fn runs_keep_only_what_compresses_within_their_cap_and_a_pass_drops_what_it_did_not_send() {
        let runs = Runs::default();
        let objects: Vec<_> = (0..4).map(|i| Arc::new(pod(&format!("p{i}"), i + 1))).collect();
        let pass = runs.begin(25);
        let r0 = runs.run(1, &[&objects[0]], pass);
        r0.keep(Bytes::from_static(&[0; 60]), crc(b"x"), 100);
        assert!(r0.deflated().is_none(), "more than half its size: not kept");
        r0.keep(Bytes::from_static(&[0; 20]), crc(b"x"), 100);
        let r1 = runs.run(1, &[&objects[1]], pass);
        r1.keep(Bytes::from_static(&[0; 20]), crc(b"x"), 100);
        assert!(r1.deflated().is_none(), "past the cap: not kept");
        assert_eq!(runs.held(), (2, 20));

        let other = runs.run(0, &[&objects[2]], pass);
        let next = runs.begin(1000);
        let _ = runs.run(1, &[&objects[1]], next);
        runs.end(1, next);
        assert_eq!(runs.held().0, 2, "the run the pass did not send is dropped, another encoding's kept");
        drop(r0);
        assert_eq!(runs.held(), (2, 0), "and its bytes given back once no stream holds it");
        runs.end(0, next);
        assert_eq!(runs.held().0, 1, "a pass in the other encoding drops that one");
        drop(other);
    }

    #[test]
    fn runs_are_cut_where_their_last_key_says_and_at_the_most_bytes() {
        assert!(!cut_after("any", MIN_RUN - 1));
        assert!(cut_after("any", MAX_RUN));
        let cuts = (0..1600).filter(|i| cut_after(&format!("ns/pod-{i}"), MIN_RUN)).count();
        assert!((50..200).contains(&cuts), "about one key in {CUT} cuts a run: {cuts} of 1600");
        let key = (0..).map(|i| format!("ns/pod-{i}")).find(|k| cut_after(k, MIN_RUN)).unwrap();
        assert!(cut_after(&key, MIN_RUN) && cut_after(&key, MIN_RUN + 1), "the same key cuts every time");
    }
}
