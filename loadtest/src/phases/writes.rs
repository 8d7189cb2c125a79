//! Writes: merge-PATCHes of pods stamping `kache.dev/changed-at` with the time of the
//! change. Paced at `rate` per second (churn through the upstream, so watches measure
//! delivery lag) or closed-loop at `concurrency` (pass-through write latency, direct vs
//! through kache).

use super::Ctx;
use crate::client::{Http, JSON};
use crate::env::Target;
use crate::progress::Bar;
use crate::scenario::Protocol;
use crate::stats::{timed_request, Counters, ErrorSamples, Hist, PhaseResult};
use bytes::Bytes;
use http::Method;
use http_body_util::BodyExt;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

/// The pass-through write phase: PATCHes against `target`.
pub async fn run(
    ctx: &Ctx,
    target: &Target,
    rate: f64,
    concurrency: usize,
    seconds: f64,
    max_requests: u64,
) -> anyhow::Result<PhaseResult> {
    let counters = Arc::new(Counters::default());
    let label = format!("patch pods c={concurrency} {}", target.name);
    let bar = Bar::start(&label, seconds, counters.clone());
    let sampler = ctx.sampler();
    let mut r = patch_load(target, &ctx.names.pods, rate, concurrency, seconds, max_requests, Some(counters)).await;
    drop(bar);
    r.procs = sampler.finish().await;
    r.workload = if rate > 0.0 { format!("patch pods at {rate}/s") } else { "patch pods (merge patch, closed loop)".into() };
    Ok(r)
}

async fn patch_one(http: &Http, pod: &(String, String)) -> anyhow::Result<u64> {
    let now = SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_nanos()).unwrap_or(0);
    let body = format!(r#"{{"metadata":{{"annotations":{{"kache.dev/changed-at":"{now}"}}}}}}"#);
    let pq = format!("/api/v1/namespaces/{}/pods/{}", pod.0, pod.1);
    let resp = http.send(Method::PATCH, &pq, JSON, Some(("application/merge-patch+json", Bytes::from(body)))).await?;
    let status = resp.status();
    let body = resp.into_body().collect().await?.to_bytes();
    if status != 200 {
        anyhow::bail!("PATCH {pq}: {status}: {}", body[..body.len().min(200)].escape_ascii());
    }
    Ok(body.len() as u64)
}

/// Shared by the requests of one load.
struct Shared {
    pods: Vec<(String, String)>,
    counters: Arc<Counters>,
    hist: Hist,
    errors: ErrorSamples,
    /// Requests are numbered in turn; request `n` patches pod `n` (round the list).
    tickets: AtomicU64,
    max_requests: u64,
    deadline: Instant,
}

impl Shared {
    /// The next request's number, unless `max_requests` are made.
    fn ticket(&self) -> Option<u64> {
        let n = self.tickets.fetch_add(1, Relaxed);
        (n < self.max_requests).then_some(n)
    }
}

/// Request `n` on `http`, counted; the connection back.
async fn one(s: Arc<Shared>, http: Http, n: u64) -> Http {
    let request = patch_one(&http, &s.pods[n as usize % s.pods.len()]);
    timed_request(&s.hist, &s.counters, &s.errors, Duration::from_secs(30), request).await;
    http
}

/// PATCH `pods` in turn against `target`: paced at `rate`/s with up to `concurrency` in
/// flight, or closed-loop with `concurrency` workers when `rate` is 0. Bounded by `seconds`
/// and `max_requests`.
#[allow(clippy::too_many_arguments)]
pub async fn patch_load(
    target: &Target,
    pods: &[(String, String)],
    rate: f64,
    concurrency: usize,
    seconds: f64,
    max_requests: u64,
    counters: Option<Arc<Counters>>,
) -> PhaseResult {
    let counters = counters.unwrap_or_default();
    let mut r = PhaseResult::new("patch", target.name.clone(), concurrency);
    if pods.is_empty() {
        r.error_samples.push("no pods to patch".into());
        return r;
    }
    let start = Instant::now();
    let deadline = start + Duration::from_secs_f64(seconds);
    let workers: Vec<Http> = (0..concurrency.max(1)).map(|_| Http::new(target, Protocol::Http1)).collect();
    warm(&workers, pods).await;
    let shared = Arc::new(Shared {
        pods: pods.to_vec(),
        counters: counters.clone(),
        hist: Hist::default(),
        errors: ErrorSamples::default(),
        tickets: AtomicU64::new(0),
        max_requests,
        deadline,
    });
    if rate > 0.0 {
        paced(&shared, workers, rate).await;
    } else {
        closed_loop(&shared, workers).await;
    }
    r.counted(&counters, start.elapsed());
    r.latency = shared.hist.percentiles();
    r.error_samples = shared.errors.take();
    r
}

/// GET a pod on each connection, so connection setup is not counted as write latency.
async fn warm(workers: &[Http], pods: &[(String, String)]) {
    for (i, w) in workers.iter().enumerate() {
        let _ = tokio::time::timeout(
            Duration::from_secs(10),
            w.get_full(&format!("/api/v1/namespaces/{}/pods/{}", pods[i % pods.len()].0, pods[i % pods.len()].1), JSON),
        )
        .await;
    }
}

/// Paced: `rate` requests a second, each on a free connection (waiting while all are busy);
/// then the requests in flight.
async fn paced(shared: &Arc<Shared>, workers: Vec<Http>, rate: f64) {
    let connections = workers.len();
    let (tx, mut rx) = tokio::sync::mpsc::channel::<Http>(connections);
    for w in workers {
        let _ = tx.send(w).await;
    }
    let tick = Duration::from_millis(10);
    let mut interval = tokio::time::interval(tick);
    interval.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut owed = 0.0;
    'outer: while Instant::now() < shared.deadline {
        interval.tick().await;
        owed += rate * tick.as_secs_f64();
        while owed >= 1.0 {
            owed -= 1.0;
            let Some(n) = shared.ticket() else { break 'outer };
            let Some(http) = rx.recv().await else { break 'outer };
            let tx = tx.clone();
            let fut = one(shared.clone(), http, n);
            tokio::spawn(async move {
                let _ = tx.send(fut.await).await;
            });
        }
    }
    // Wait for requests in flight (bounded by their own 30 s timeout).
    for _ in 0..connections {
        let _ = tokio::time::timeout(Duration::from_secs(31), rx.recv()).await;
    }
}

/// Closed loop: each connection's worker PATCHes, one request after another.
async fn closed_loop(shared: &Arc<Shared>, workers: Vec<Http>) {
    let mut tasks = Vec::new();
    for http in workers {
        let shared = shared.clone();
        tasks.push(tokio::spawn(async move {
            let mut http = http;
            while let Some(n) = shared.ticket().filter(|_| Instant::now() < shared.deadline) {
                http = one(shared.clone(), http, n).await;
            }
        }));
    }
    for t in tasks {
        let _ = t.await;
    }
}
