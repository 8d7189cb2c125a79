//! Memory held per cached pod: live heap bytes (counted by a wrapping global allocator) and
//! RSS growth after loading N realistic pods into a cache with both JSON and protobuf
//! encodings held, against the encoded bytes held. Run with
//! `cargo bench --bench memory -- [pods] [both|json|protobuf]` (default 100,000, both).
//! Prints one line of figures.
#![allow(unsafe_code)]

use kache::cache::{KindCache, Limits};
use kache::sim::synth::{ClusterSpec, Synth};
use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

struct Counting;
static LIVE: AtomicUsize = AtomicUsize::new(0);

// SAFETY: forwards every call to the system allocator unchanged; only counts bytes.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, l: Layout) -> *mut u8 {
        LIVE.fetch_add(l.size(), Ordering::Relaxed);
        // SAFETY: same layout contract as the caller's.
        unsafe { System.alloc(l) }
    }
    unsafe fn dealloc(&self, p: *mut u8, l: Layout) {
        LIVE.fetch_sub(l.size(), Ordering::Relaxed);
        // SAFETY: p was allocated by System with layout l.
        unsafe { System.dealloc(p, l) }
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

fn rss_bytes() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
        .map_or(0, |kb| kb * 1024)
}

fn main() {
    let pods: usize = std::env::args().skip(1).find_map(|a| a.parse().ok()).unwrap_or(100_000);
    let held = std::env::args().skip(1).find(|a| matches!(a.as_str(), "both" | "json" | "protobuf")).unwrap_or_else(|| "both".into());
    let r = Arc::new(kache::sim::catalog::resource("pods"));
    let synth = Synth::new(ClusterSpec { nodes: pods.div_ceil(30), pods, namespaces: 50, seed: 7, pod_bytes: None });
    let cache = KindCache::new(r.clone(), 0, Limits::default());
    let (rss_before, heap_before) = (rss_bytes(), LIVE.load(Ordering::Relaxed));
    let mut objects = Vec::with_capacity(pods);
    for (i, mut v) in synth.pods().enumerate() {
        v["metadata"]["resourceVersion"] = serde_json::Value::String((i + 1).to_string());
        let mut o = kache::sim::encode(&r, &v).expect("encode");
        match held.as_str() {
            "json" => o.pb = None,
            "protobuf" => o.json = None,
            _ => {}
        }
        objects.push(o);
    }
    cache.replace(objects, pods as u64);
    let (rss_after, heap_after) = (rss_bytes(), LIVE.load(Ordering::Relaxed));
    let encoded = cache.snapshot().bytes as f64;
    let heap = heap_after.saturating_sub(heap_before) as f64;
    let rss = rss_after.saturating_sub(rss_before) as f64;
    let n = pods as f64;
    println!(
        "pods={pods} held={held} encoded={:.0}B/pod heap={:.0}B/pod ({:.2}x encoded) rss_growth={:.0}B/pod ({:.2}x encoded)",
        encoded / n,
        heap / n,
        heap / encoded,
        rss / n,
        rss / encoded
    );
}
