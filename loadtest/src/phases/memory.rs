//! Memory: kache's RSS per cached pod against the encoded size of a pod in each encoding it
//! holds (from its own `kache_cache_objects` and `kache_cache_bytes` gauges), after letting
//! the caches settle.

use super::Ctx;
use crate::client::Http;
use crate::progress::Bar;
use crate::scenario::Protocol;
use crate::stats::{Counters, PhaseResult};
use anyhow::Context;
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Values of `metric{resource="pods",encoding=E}` by encoding.
fn gauge(text: &str, metric: &str) -> BTreeMap<String, f64> {
    let mut out = BTreeMap::new();
    for line in text.lines().filter(|l| l.starts_with(metric) && l[metric.len()..].starts_with('{')) {
        let Some((labels, value)) = line[metric.len() + 1..].split_once("} ") else { continue };
        if !labels.contains("resource=\"pods\"") {
            continue;
        }
        let enc = labels.split(',').find_map(|kv| kv.strip_prefix("encoding=\"")).map(|v| v.trim_end_matches('"').to_string());
        if let (Some(enc), Ok(v)) = (enc, value.trim().parse::<f64>()) {
            out.insert(enc, v);
        }
    }
    out
}

/// Wait `settle_seconds`, then compare kache's RSS with what it caches.
pub async fn run(ctx: &Ctx, settle_seconds: f64) -> anyhow::Result<PhaseResult> {
    let admin =
        ctx.observed.kache_admin.clone().context("the memory phase needs kache's admin address (self-contained run or --kache-admin)")?;
    let pid = ctx.observed.kache_pid.context("the memory phase needs kache's pid (self-contained run or --kache-pid)")?;
    let counters = Arc::new(Counters::default());
    let bar = Bar::start("memory: settling", settle_seconds, counters);
    let sampler = ctx.sampler();
    let start = Instant::now();
    tokio::time::sleep(Duration::from_secs_f64(settle_seconds)).await;
    drop(bar);
    let http = Http::new(&crate::env::Target::plain("admin", &admin), Protocol::Http1);
    let metrics = http.get_full("/metrics", "text/plain").await?;
    let text = String::from_utf8_lossy(&metrics.body);
    let objects = gauge(&text, "kache_cache_objects");
    let bytes = gauge(&text, "kache_cache_bytes");
    let rss = crate::procs::rss_bytes(pid).unwrap_or(0) as f64;
    let mut r = PhaseResult::new("memory: kache RSS per cached pod", "kache", 1);
    r.seconds = start.elapsed().as_secs_f64();
    r.procs = sampler.finish().await;
    let pods = objects.values().cloned().fold(0.0, f64::max);
    let mut encoded_per_pod = 0.0;
    for (enc, n) in &objects {
        let b = bytes.get(enc).copied().unwrap_or(0.0);
        r.extra.insert(format!("pods_{enc}"), *n);
        r.extra.insert(format!("encoded_bytes_{enc}"), b);
        if *n > 0.0 {
            r.extra.insert(format!("encoded_bytes_per_pod_{enc}"), b / n);
            encoded_per_pod += b / n;
        }
    }
    r.extra.insert("rss_bytes".into(), rss);
    if pods > 0.0 {
        r.extra.insert("rss_bytes_per_pod".into(), rss / pods);
        r.extra.insert("encoded_bytes_per_pod_all_encodings".into(), encoded_per_pod);
        if encoded_per_pod > 0.0 {
            r.extra.insert("rss_over_encoded".into(), rss / pods / encoded_per_pod);
        }
    }
    if let Some(up) = ctx.observed.upstream_pid {
        r.extra.insert("upstream_rss_bytes".into(), crate::procs::rss_bytes(up).unwrap_or(0) as f64);
    }
    Ok(r)
}
