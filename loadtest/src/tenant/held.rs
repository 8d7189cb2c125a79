//! Tenant probe, attack `held-reads`: T tokens each send R cached reads (a GET of one pod,
//! or a LIST of its namespace, at resourceVersion=0) on zero-window HTTP/2 streams and never
//! read the answers, so each response sits in the server waiting for a window that never
//! opens; an honest token polls the same read before (the baseline) and during the attack.

use super::honest::{self, ProbeFigures};
use super::net::{Holder, StreamFigures, Tracker};
use super::Ctx;
use serde::Serialize;
use std::time::{Duration, Instant};

/// What the attack did and what the honest reader saw.
#[derive(Debug, Clone, Serialize)]
pub struct HeldReads {
    /// The request held and polled.
    pub request: String,
    /// Tokens used, and how many of them are different.
    pub tokens: usize,
    pub distinct_tokens: usize,
    pub streams_per_token: usize,
    /// Time to send every stream (seconds since the attack began).
    pub all_sent_s: f64,
    pub tenant: StreamFigures,
    /// The honest reader with no attack, then during it.
    pub baseline: ProbeFigures,
    pub attack: ProbeFigures,
}

/// The honest reader's baseline, then the attack for --seconds with the reader beside it.
pub async fn run(ctx: &Ctx<'_>) -> anyhow::Result<HeldReads> {
    let a = ctx.args;
    let request = ctx.held_request();
    let interval = Duration::from_millis(a.probe_interval_ms);
    let baseline =
        honest::poll(&ctx.honest_client(), &request, interval, Instant::now() + Duration::from_secs(a.baseline_seconds), ctx.limit).await;

    let start = Instant::now();
    let until = start + Duration::from_secs(a.seconds);
    let tracker = Tracker::new(start);
    let probe = {
        let (http, pq, limit) = (ctx.honest_client(), request.clone(), ctx.limit);
        tokio::spawn(async move { honest::poll(&http, &pq, interval, until, limit).await })
    };
    let tokens = &ctx.tokens.held;
    // Each token opens its streams in a task of its own, as separate clients would.
    let mut openers = Vec::new();
    for (i, token) in tokens.iter().enumerate() {
        let mut h = Holder::new(ctx.ep, &tracker, &format!("token-{i}"), token.as_deref(), &request, a.streams_per_connection);
        let n = a.held_streams;
        openers.push(tokio::spawn(async move {
            h.open(n, until).await;
            h
        }));
    }
    let mut holders = Vec::new();
    for o in openers {
        holders.push(o.await?);
    }
    let all_sent_s = tracker.now();
    let attack = probe.await?;
    tokio::time::sleep_until(until.into()).await;
    let (streams, conns) = tracker.snapshot();
    let mut tenant = StreamFigures::of(&streams, &conns, |_| true, a.seconds as f64);
    for h in holders {
        for (k, v) in &h.connect_errors {
            *tenant.connect_errors.entry(k.clone()).or_default() += v;
        }
        for (k, v) in &h.send_errors {
            *tenant.send_errors.entry(k.clone()).or_default() += v;
        }
        h.close();
    }
    let distinct = tokens.iter().collect::<std::collections::BTreeSet<_>>().len();
    Ok(HeldReads {
        request,
        tokens: tokens.len(),
        distinct_tokens: distinct,
        streams_per_token: a.held_streams,
        all_sent_s: (all_sent_s * 1000.0).round() / 1000.0,
        tenant,
        baseline,
        attack,
    })
}
