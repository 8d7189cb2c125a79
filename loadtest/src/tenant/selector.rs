//! Tenant probe, attack `selector`: C concurrent LISTs of every pod with a label selector of
//! many `!=` terms on one key (each term is matched against every pod; pods without the
//! key match them all, so every pod is also encoded and sent), in a loop; an honest control
//! client polls a cached read before (the baseline) and during the attack.

use super::honest::{self, ProbeFigures};
use super::Ctx;
use crate::client::{drain, encode, Http, JSON};
use crate::stats::{Hist, Percentiles};
use http::Method;
use serde::Serialize;
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// What the attack did and what the control client saw.
#[derive(Debug, Clone, Serialize)]
pub struct Selector {
    /// The LIST's path and the length of its URL-encoded query.
    pub path: String,
    pub terms: usize,
    pub query_bytes: usize,
    pub concurrency: usize,
    /// LISTs answered (to the body's last byte), by status; `error` (no answer) and
    /// `unfinished` (still running when the attack's time ran out) too.
    pub statuses: BTreeMap<String, u64>,
    /// Time of each answered LIST, whatever its status.
    pub duration: Option<Percentiles>,
    /// Body bytes of the last 200 answer.
    pub body_bytes: Option<u64>,
    pub errors: Vec<String>,
    /// The control client with no attack, then during it.
    pub baseline: ProbeFigures,
    pub attack: ProbeFigures,
}

/// `k!=v0,k!=v1,...` with `terms` terms.
pub fn label_selector(terms: usize) -> String {
    (0..terms).map(|i| format!("k!=v{i}")).collect::<Vec<_>>().join(",")
}

/// The control client's baseline, then the selector LISTs for --seconds with it beside them.
pub async fn run(ctx: &Ctx<'_>) -> anyhow::Result<Selector> {
    let a = ctx.args;
    let control = ctx.control_request();
    let interval = Duration::from_millis(a.control_interval_ms);
    let baseline =
        honest::poll(&ctx.honest_client(), &control, interval, Instant::now() + Duration::from_secs(a.baseline_seconds), ctx.limit).await;

    let query = format!("labelSelector={}", encode(&label_selector(a.selector_terms)));
    let pq = Arc::new(format!("/api/v1/pods?{query}"));
    let until = Instant::now() + Duration::from_secs(a.seconds);
    let probe = {
        let (http, limit) = (ctx.honest_client(), ctx.limit);
        tokio::spawn(async move { honest::poll(&http, &control, interval, until, limit).await })
    };
    let hist = Arc::new(Hist::default());
    let mut workers = Vec::new();
    for _ in 0..a.selector_concurrency {
        let http = Http::new(&ctx.ep.target(ctx.tokens.tenant.as_deref())?, crate::scenario::Protocol::Http2);
        let (pq, hist) = (pq.clone(), hist.clone());
        workers.push(tokio::spawn(async move { list_loop(&http, &pq, &hist, until).await }));
    }
    let mut f = Selector {
        path: "/api/v1/pods?labelSelector=k!=v0,...".into(),
        terms: a.selector_terms,
        query_bytes: query.len(),
        concurrency: a.selector_concurrency,
        statuses: BTreeMap::new(),
        duration: None,
        body_bytes: None,
        errors: Vec::new(),
        baseline,
        attack: ProbeFigures::default(),
    };
    for w in workers {
        let (statuses, bytes, errors) = w.await?;
        for (k, v) in statuses {
            *f.statuses.entry(k).or_default() += v;
        }
        f.body_bytes = f.body_bytes.or(bytes);
        f.errors.extend(errors.into_iter().take(5usize.saturating_sub(f.errors.len())));
    }
    f.duration = hist.percentiles();
    f.attack = probe.await?;
    Ok(f)
}

type Outcome = (BTreeMap<String, u64>, Option<u64>, Vec<String>);

/// One worker's LISTs until `until` (a LIST still running then is abandoned).
async fn list_loop(http: &Http, pq: &str, hist: &Hist, until: Instant) -> Outcome {
    let (mut statuses, mut bytes, mut errors) = (BTreeMap::new(), None, Vec::new());
    while Instant::now() < until {
        let t0 = Instant::now();
        let r = tokio::time::timeout_at(until.into(), async {
            let resp = http.send(Method::GET, pq, JSON, None).await?;
            let status = resp.status().as_u16();
            let d = drain(resp.into_body(), 0).await?;
            Ok::<_, anyhow::Error>((status, d.bytes))
        })
        .await;
        let label = match r {
            Err(_) => "unfinished".to_string(),
            Ok(Ok((status, n))) => {
                hist.record(t0.elapsed());
                if status == 200 {
                    bytes = Some(n);
                }
                status.to_string()
            }
            Ok(Err(e)) => {
                if errors.len() < 5 {
                    errors.push(format!("{e:#}"));
                }
                // A refused connection fails at once: do not spin.
                tokio::time::sleep(Duration::from_millis(100)).await;
                "error".to_string()
            }
        };
        *statuses.entry(label).or_default() += 1;
    }
    (statuses, bytes, errors)
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_selector_has_one_term_per_value() {
        assert_eq!(super::label_selector(3), "k!=v0,k!=v1,k!=v2");
        assert_eq!(super::label_selector(1000).matches("!=").count(), 1000);
    }
}
