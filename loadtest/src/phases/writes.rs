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
use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::{Arc, Mutex};
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
    let mut r = patch_load(target, &ctx.names.pods, rate, concurrency, seconds, max_requests, Some(counters), None).await;
    drop(bar);
    r.procs = sampler.finish().await;
    r.workload = if rate > 0.0 { format!("patch pods at {rate}/s") } else { "patch pods (merge patch, closed loop)".into() };
    Ok(r)
}

/// The unix time in nanoseconds.
pub fn unix_ns() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_nanos() as u64).unwrap_or(0)
}

/// A `kache.dev/changed-at` stamp: the time now, made later than every stamp this process
/// gave before, so that a stamp names one PATCH.
fn unique_stamp() -> u64 {
    static LAST: AtomicU64 = AtomicU64::new(0);
    let now = unix_ns();
    let before = LAST.fetch_update(Relaxed, Relaxed, |last| Some(now.max(last + 1))).unwrap_or(0);
    now.max(before + 1)
}

/// One PATCH of a load that logs them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Patched {
    /// The pod's index in the pods patched.
    pub pod: usize,
    /// Its `kache.dev/changed-at` stamp.
    pub stamp: u64,
    /// When its answer (200, body read) arrived, in unix ns; None if it failed or timed out.
    pub answered_ns: Option<u64>,
}

/// The PATCHes a load made, in the order they were sent, each found again by its stamp (as
/// watchers receive them).
#[derive(Default)]
pub struct PatchLog(Mutex<LogInner>);

#[derive(Default)]
struct LogInner {
    patches: Vec<Patched>,
    by_stamp: HashMap<u64, u32>,
}

impl PatchLog {
    fn inner(&self) -> std::sync::MutexGuard<'_, LogInner> {
        self.0.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// A PATCH of pod `pod` about to be sent: its number in the log and its stamp.
    fn begin(&self, pod: usize) -> (u32, u64) {
        let mut log = self.inner();
        let stamp = unique_stamp();
        let id = log.patches.len() as u32;
        log.patches.push(Patched { pod, stamp, answered_ns: None });
        log.by_stamp.insert(stamp, id);
        (id, stamp)
    }

    /// PATCH `id` answered 200 at `at` (unix ns).
    fn answered(&self, id: u32, at: u64) {
        if let Some(p) = self.inner().patches.get_mut(id as usize) {
            p.answered_ns = Some(at);
        }
    }

    /// The number of the PATCH that stamped `stamp`, if this log's load made it.
    pub fn lookup(&self, stamp: u64) -> Option<u32> {
        self.inner().by_stamp.get(&stamp).copied()
    }

    /// Every PATCH so far, by number.
    pub fn patches(&self) -> Vec<Patched> {
        self.inner().patches.clone()
    }
}

async fn patch_one(http: &Http, pod: &(String, String), stamp: u64) -> anyhow::Result<u64> {
    let body = format!(r#"{{"metadata":{{"annotations":{{"kache.dev/changed-at":"{stamp}"}}}}}}"#);
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
    /// Where each PATCH and its answer are logged, if anywhere.
    log: Option<Arc<PatchLog>>,
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
    let pod = n as usize % s.pods.len();
    let (id, stamp) = match &s.log {
        Some(log) => {
            let (id, stamp) = log.begin(pod);
            (Some(id), stamp)
        }
        None => (None, unique_stamp()),
    };
    let request = async {
        let bytes = patch_one(&http, &s.pods[pod], stamp).await?;
        if let (Some(log), Some(id)) = (&s.log, id) {
            log.answered(id, unix_ns());
        }
        Ok(bytes)
    };
    timed_request(&s.hist, &s.counters, &s.errors, Duration::from_secs(30), request).await;
    http
}

/// PATCH `pods` in turn against `target`: paced at `rate`/s with up to `concurrency` in
/// flight, or closed-loop with `concurrency` workers when `rate` is 0. Bounded by `seconds`
/// and `max_requests`. Each PATCH is logged in `log` if given.
#[allow(clippy::too_many_arguments)]
pub async fn patch_load(
    target: &Target,
    pods: &[(String, String)],
    rate: f64,
    concurrency: usize,
    seconds: f64,
    max_requests: u64,
    counters: Option<Arc<Counters>>,
    log: Option<Arc<PatchLog>>,
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
        log,
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_patch_gets_its_own_stamp_and_is_found_by_it() {
        let stamps: Vec<u64> = (0..1000).map(|_| unique_stamp()).collect();
        assert!(stamps.windows(2).all(|w| w[0] < w[1]), "stamps increase strictly");
        let log = PatchLog::default();
        let (a, sa) = log.begin(7);
        let (b, sb) = log.begin(3);
        log.answered(b, 42);
        assert_eq!((a, b), (0, 1));
        assert_eq!((log.lookup(sa), log.lookup(sb), log.lookup(sb + 1)), (Some(0), Some(1), None));
        assert_eq!(log.patches(), [Patched { pod: 7, stamp: sa, answered_ns: None }, Patched { pod: 3, stamp: sb, answered_ns: Some(42) }]);
    }
}
