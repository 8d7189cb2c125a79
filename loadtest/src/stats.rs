//! Figures of one phase: counters shared by the workers while it runs, latency and lag
//! histograms (hdrhistogram, microseconds), and the serializable result.

use hdrhistogram::Histogram;
use serde::Serialize;
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::Mutex;
use std::time::Duration;

/// Live counters (also read by the progress bar).
#[derive(Default)]
pub struct Counters {
    pub requests: AtomicU64,
    pub errors: AtomicU64,
    pub bytes: AtomicU64,
    pub events: AtomicU64,
}

impl Counters {
    pub fn get(&self) -> (u64, u64, u64, u64) {
        (self.requests.load(Relaxed), self.errors.load(Relaxed), self.bytes.load(Relaxed), self.events.load(Relaxed))
    }
}

/// A histogram of microseconds, 1 µs to 1 hour, 3 significant digits, shared by workers.
pub struct Hist(Mutex<Histogram<u64>>);

impl Default for Hist {
    fn default() -> Self {
        Hist(Mutex::new(Histogram::new_with_bounds(1, 3_600_000_000, 3).expect("valid bounds")))
    }
}

impl Hist {
    pub fn record(&self, d: Duration) {
        self.record_us(d.as_micros() as u64);
    }
    pub fn record_us(&self, us: u64) {
        let mut h = self.0.lock().unwrap_or_else(|e| e.into_inner());
        h.saturating_record(us.clamp(1, 3_600_000_000));
    }
    pub fn percentiles(&self) -> Option<Percentiles> {
        let h = self.0.lock().unwrap_or_else(|e| e.into_inner());
        (!h.is_empty()).then(|| Percentiles {
            count: h.len(),
            p50_us: h.value_at_quantile(0.5),
            p90_us: h.value_at_quantile(0.9),
            p99_us: h.value_at_quantile(0.99),
            p999_us: h.value_at_quantile(0.999),
            max_us: h.max(),
            mean_us: h.mean(),
        })
    }
}

/// Latency percentiles in microseconds.
#[derive(Debug, Clone, Serialize, serde::Deserialize)]
pub struct Percentiles {
    pub count: u64,
    pub p50_us: u64,
    pub p90_us: u64,
    pub p99_us: u64,
    pub p999_us: u64,
    pub max_us: u64,
    pub mean_us: f64,
}

/// CPU and memory of one process over a phase.
#[derive(Debug, Clone, Serialize, serde::Deserialize)]
pub struct ProcFigures {
    /// `kache`, `upstream`, `loadtest` or `trivial-server`.
    pub role: String,
    pub pid: u32,
    /// CPU time over wall time, in percent of one core.
    pub cpu_percent: f64,
    pub rss_mb_end: f64,
    pub rss_mb_peak: f64,
}

/// The result of one phase against one target.
#[derive(Debug, Clone, Serialize, serde::Deserialize)]
pub struct PhaseResult {
    /// What ran, e.g. `list pb rv0 all`.
    pub workload: String,
    /// The scenario's phase kind (`list`, `kubelets`, `informers`, `writes`, `memory`,
    /// `loopback_reference`, `trivial_server_reference`); empty in reports from before it.
    #[serde(default)]
    pub kind: String,
    /// `direct`, `kache` or `reference`.
    pub target: String,
    pub concurrency: usize,
    pub seconds: f64,
    pub requests: u64,
    pub errors: u64,
    pub bytes: u64,
    pub requests_per_sec: f64,
    pub bytes_per_sec: f64,
    /// Time of each request (whole response) or, for watches, to the initial state.
    pub latency: Option<Percentiles>,
    /// Watch delivery lag: receive time minus the `kache.dev/changed-at` stamp.
    pub lag: Option<Percentiles>,
    pub watch_events: u64,
    pub watches_opened: u64,
    /// Watches that ended (or sent an ERROR event) before the phase did.
    pub watches_ended_early: u64,
    pub procs: Vec<ProcFigures>,
    /// Anything else worth keeping (sample sizes, memory figures).
    pub extra: BTreeMap<String, f64>,
    /// A few error messages.
    pub error_samples: Vec<String>,
}

impl PhaseResult {
    pub fn new(workload: impl Into<String>, target: impl Into<String>, concurrency: usize) -> PhaseResult {
        PhaseResult {
            workload: workload.into(),
            kind: String::new(),
            target: target.into(),
            concurrency,
            seconds: 0.0,
            requests: 0,
            errors: 0,
            bytes: 0,
            requests_per_sec: 0.0,
            bytes_per_sec: 0.0,
            latency: None,
            lag: None,
            watch_events: 0,
            watches_opened: 0,
            watches_ended_early: 0,
            procs: Vec::new(),
            extra: BTreeMap::new(),
            error_samples: Vec::new(),
        }
    }

    /// Fill the counters and rates from `c` over `elapsed`.
    pub fn counted(&mut self, c: &Counters, elapsed: Duration) {
        let (r, e, b, ev) = c.get();
        self.seconds = elapsed.as_secs_f64();
        self.requests = r;
        self.errors = e;
        self.bytes = b;
        self.watch_events = ev;
        let s = self.seconds.max(1e-9);
        self.requests_per_sec = r as f64 / s;
        self.bytes_per_sec = b as f64 / s;
    }
}

/// Keeps the first few error messages.
#[derive(Default)]
pub struct ErrorSamples(Mutex<Vec<String>>);

/// Run one request bounded by `limit` and count its outcome: its time and bytes when it
/// answered, else an error (with a sample of why).
pub async fn timed_request(
    hist: &Hist,
    counters: &Counters,
    errors: &ErrorSamples,
    limit: Duration,
    request: impl std::future::Future<Output = anyhow::Result<u64>>,
) {
    let t0 = std::time::Instant::now();
    match tokio::time::timeout(limit, request).await {
        Ok(Ok(bytes)) => {
            hist.record(t0.elapsed());
            counters.requests.fetch_add(1, Relaxed);
            counters.bytes.fetch_add(bytes, Relaxed);
        }
        Ok(Err(e)) => {
            counters.errors.fetch_add(1, Relaxed);
            errors.add(format!("{e:#}"));
        }
        Err(_) => {
            counters.errors.fetch_add(1, Relaxed);
            errors.add("timed out");
        }
    }
}

impl ErrorSamples {
    pub fn add(&self, e: impl std::fmt::Display) {
        let mut v = self.0.lock().unwrap_or_else(|e| e.into_inner());
        if v.len() < 5 {
            v.push(e.to_string());
        }
    }
    pub fn take(&self) -> Vec<String> {
        std::mem::take(&mut *self.0.lock().unwrap_or_else(|e| e.into_inner()))
    }
}
