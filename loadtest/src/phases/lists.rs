//! Closed-loop LIST load: `concurrency` workers, each with its own connection, repeat a
//! LIST (all pods, one node's pods, one app's pods) until the phase's time or request count
//! runs out. Latency is to the last byte of the body. Used by the list storm and selector
//! QPS scenarios, and (with another path) against the trivial reference server.

use super::Ctx;
use crate::bare::Bare;
use crate::client::{encode, Http, JSON, PROTOBUF};
use crate::env::Target;
use crate::progress::Bar;
use crate::scenario::{Encoding, Protocol, Query, ReadMode};
use crate::stats::{timed_request, Counters, ErrorSamples, Hist, PhaseResult};
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// One LIST workload at one concurrency.
#[derive(Debug, Clone)]
pub struct ListSpec {
    pub label: String,
    pub query: Query,
    pub read: ReadMode,
    pub encoding: Encoding,
    pub concurrency: usize,
    pub seconds: f64,
    pub max_requests: u64,
    pub protocol: Protocol,
}

impl ListSpec {
    /// The workload's name in reports, e.g. `list pb rv0 node`.
    pub fn workload(&self) -> String {
        let read = match self.read {
            ReadMode::Rv0 => "rv0",
            ReadMode::Consistent => "consistent",
        };
        let q = match self.query {
            Query::All => "all",
            Query::Node => "spec.nodeName",
            Query::Label => "label app",
        };
        format!("{}: list {} {read} {q}", self.label, self.encoding.label())
    }
}

/// The path and query of request `n`.
pub fn path(ctx: &Ctx, q: Query, read: ReadMode, n: u64) -> String {
    let mut p = String::from("/api/v1/pods");
    let mut sep = '?';
    match q {
        Query::All => {}
        Query::Node => {
            let node = &ctx.names.nodes[(n as usize) % ctx.names.nodes.len()];
            p.push_str(&format!("?fieldSelector={}", encode(&format!("spec.nodeName={node}"))));
            sep = '&';
        }
        Query::Label => {
            let apps = &ctx.names.apps;
            let app = if apps.is_empty() { "none" } else { &apps[(n as usize) % apps.len()] };
            p.push_str(&format!("?labelSelector={}", encode(&format!("app={app}"))));
            sep = '&';
        }
    }
    if read == ReadMode::Rv0 {
        p.push(sep);
        p.push_str("resourceVersion=0");
    }
    p
}

/// Run `spec` against `target`.
pub async fn run(ctx: &Ctx, target: &Target, spec: &ListSpec) -> anyhow::Result<PhaseResult> {
    let accept = if spec.encoding == Encoding::Protobuf { PROTOBUF } else { JSON };
    let paths: Vec<String> = (0..1024u64).map(|n| path(ctx, spec.query, spec.read, n)).collect();
    let label = format!("{} c={} {}", spec.workload(), spec.concurrency, target.name);
    let r =
        closed_loop(ctx.procs(), target, &label, &paths, accept, spec.concurrency, spec.seconds, spec.max_requests, spec.protocol).await?;
    let mut r = r;
    r.workload = spec.workload();
    Ok(r)
}

/// One worker's connection: the bare HTTP/1.1 client (see [`crate::bare`]) or, for HTTP/2,
/// hyper's.
enum Conn {
    Bare(Bare),
    Hyper(Box<Http>),
}

impl Conn {
    async fn new(protocol: Protocol, target: &Target, accept: &'static str) -> anyhow::Result<Conn> {
        Ok(match protocol {
            Protocol::Http1 => Conn::Bare(Bare::new(target, accept).await?),
            Protocol::Http2 => Conn::Hyper(Box::new(Http::new(target, protocol))),
        })
    }

    /// GET `pq`, failing on a non-200 status; the body's size.
    async fn get(&mut self, pq: &str, accept: &'static str) -> anyhow::Result<u64> {
        match self {
            Conn::Bare(b) => {
                let a = b.get(pq).await?;
                if a.status != 200 {
                    anyhow::bail!("status {}: {}", a.status, a.excerpt.escape_ascii());
                }
                Ok(a.body_bytes)
            }
            Conn::Hyper(h) => Ok(h.get_drain(pq, accept, 0).await?.bytes),
        }
    }
}

/// `concurrency` workers GET `paths` in turn (after one unmeasured warm-up request each).
#[allow(clippy::too_many_arguments)]
pub async fn closed_loop(
    procs: Vec<(String, u32)>,
    target: &Target,
    label: &str,
    paths: &[String],
    accept: &'static str,
    concurrency: usize,
    seconds: f64,
    max_requests: u64,
    protocol: Protocol,
) -> anyhow::Result<PhaseResult> {
    let paths = paths.to_vec();
    let counters = Arc::new(Counters::default());
    let conns = connect(protocol, target, &paths, accept, concurrency).await?;
    let bar = Bar::start(label, seconds, counters.clone());
    let sampler = crate::procs::Sampler::start(procs);
    let start = Instant::now();
    let shared = Arc::new(Shared {
        paths,
        accept,
        counters,
        hist: Hist::default(),
        errors: ErrorSamples::default(),
        tickets: AtomicU64::new(0),
        max_requests,
        deadline: start + Duration::from_secs_f64(seconds),
    });
    let tasks: Vec<_> = conns.into_iter().map(|conn| tokio::spawn(worker(shared.clone(), conn))).collect();
    for t in tasks {
        let _ = t.await;
    }
    let elapsed = start.elapsed();
    drop(bar);
    let mut r = PhaseResult::new(label, target.name.clone(), concurrency);
    r.procs = sampler.finish().await;
    r.counted(&shared.counters, elapsed);
    r.latency = shared.hist.percentiles();
    r.error_samples = shared.errors.take();
    if r.requests > 0 {
        r.extra.insert("response_bytes".into(), r.bytes as f64 / r.requests as f64);
    }
    Ok(r)
}

/// Warm up: `concurrency` connections, each opened and used for one request (unmeasured).
async fn connect(
    protocol: Protocol,
    target: &Target,
    paths: &[String],
    accept: &'static str,
    concurrency: usize,
) -> anyhow::Result<Vec<Conn>> {
    let mut conns = Vec::new();
    for i in 0..concurrency {
        let mut conn = Conn::new(protocol, target, accept).await?;
        let _ = tokio::time::timeout(Duration::from_secs(60), conn.get(&paths[i % paths.len()], accept)).await;
        conns.push(conn);
    }
    Ok(conns)
}

/// Shared by the workers of one closed loop.
struct Shared {
    paths: Vec<String>,
    accept: &'static str,
    counters: Arc<Counters>,
    hist: Hist,
    errors: ErrorSamples,
    /// Requests are numbered in turn; request `n` GETs path `n` (round the list).
    tickets: AtomicU64,
    max_requests: u64,
    deadline: Instant,
}

/// One worker: a request after another on its connection, until the deadline or the last
/// ticket; each bounded by the time left plus 30 s.
async fn worker(s: Arc<Shared>, mut conn: Conn) {
    loop {
        let n = s.tickets.fetch_add(1, Relaxed);
        if n >= s.max_requests || Instant::now() >= s.deadline {
            break;
        }
        let left = s.deadline.saturating_duration_since(Instant::now()) + Duration::from_secs(30);
        let request = conn.get(&s.paths[n as usize % s.paths.len()], s.accept);
        timed_request(&s.hist, &s.counters, &s.errors, left, request).await;
    }
}
