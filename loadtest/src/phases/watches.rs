//! Watching clients: kubelets (LIST + WATCH of their node's pods) and informers (LIST +
//! WATCH, or WatchList, of all pods). Each client owns its connection. Once every client is
//! watching, the steady phase runs for `watch_seconds`; delivery lag is measured on every
//! MODIFIED event stamped (`kache.dev/changed-at`) after the steady phase began.

use super::{writes, Ctx};
use crate::client::{encode, Http, JSON, PROTOBUF, PROTOBUF_WATCH};
use crate::env::Target;
use crate::progress::Bar;
use crate::scenario::{Encoding, InformerMode, Phase, Protocol};
use crate::stats::{Counters, ErrorSamples, Hist, PhaseResult};
use crate::wire::{self, EventType, Frames};
use anyhow::{bail, Context};
use http::Method;
use http_body_util::BodyExt;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::Relaxed};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};
use tokio::sync::Semaphore;

fn now_ns() -> u128 {
    SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_nanos()).unwrap_or(0)
}

/// Shared by the clients of one phase.
struct Shared {
    counters: Arc<Counters>,
    /// Time to the initial state (LIST, or the WatchList's initial-events-end bookmark).
    sync: Hist,
    lag: Hist,
    errors: ErrorSamples,
    opened: AtomicU64,
    ended_early: AtomicU64,
    /// Stamps older than this (unix ns) are not counted as lag (set when steady begins).
    lag_from_ns: AtomicU64,
    stop: AtomicBool,
    stop_notify: tokio::sync::Notify,
}

/// What one client does.
#[derive(Clone)]
struct Client {
    /// The LIST (None for WatchList).
    list: Option<String>,
    /// The watch, with `{RV}` to replace by the list's resourceVersion.
    watch: String,
    encoding: Encoding,
    protocol: Protocol,
}

/// How long all clients have to LIST and start watching.
const SETUP_LIMIT_SECS: u64 = 600;

/// Run a kubelets or informers phase against `target`.
pub async fn run(ctx: &Ctx, target: &Target, phase: &Phase) -> anyhow::Result<PhaseResult> {
    let (clients, encoding, watch_seconds, protocol, setup, patch_rate, workload) = match phase {
        Phase::Kubelets { clients, encoding, watch_seconds, protocol, setup_concurrency, patch_rate } => (
            *clients,
            *encoding,
            *watch_seconds,
            *protocol,
            *setup_concurrency,
            *patch_rate,
            format!("kubelets {} x{clients}", encoding.label()),
        ),
        Phase::Informers { clients, encoding, watch_seconds, mode, protocol, patch_rate } => {
            let m = if *mode == InformerMode::WatchList { "watchlist" } else { "list+watch" };
            (*clients, *encoding, *watch_seconds, *protocol, 16, *patch_rate, format!("informers {} {m} x{clients}", encoding.label()))
        }
        _ => bail!("not a watch phase"),
    };
    let timeout = (watch_seconds as u64) + 600;
    let specs: Vec<Client> = (0..clients)
        .map(|i| match phase {
            Phase::Kubelets { .. } => {
                let sel = encode(&format!("spec.nodeName={}", ctx.names.nodes[i % ctx.names.nodes.len()]));
                Client {
                    list: Some(format!("/api/v1/pods?fieldSelector={sel}&limit=500&resourceVersion=0")),
                    watch: format!("/api/v1/pods?allowWatchBookmarks=true&fieldSelector={sel}&resourceVersion={{RV}}&timeoutSeconds={timeout}&watch=true"),
                    encoding,
                    protocol,
                }
            }
            Phase::Informers { mode: InformerMode::WatchList, .. } => Client {
                list: None,
                watch: format!("/api/v1/pods?allowWatchBookmarks=true&resourceVersionMatch=NotOlderThan&sendInitialEvents=true&timeoutSeconds={timeout}&watch=true"),
                encoding,
                protocol,
            },
            _ => Client {
                list: Some("/api/v1/pods?resourceVersion=0".into()),
                watch: format!("/api/v1/pods?allowWatchBookmarks=true&resourceVersion={{RV}}&timeoutSeconds={timeout}&watch=true"),
                encoding,
                protocol,
            },
        })
        .collect();
    let shared = Arc::new(Shared {
        counters: Arc::new(Counters::default()),
        sync: Hist::default(),
        lag: Hist::default(),
        errors: ErrorSamples::default(),
        opened: AtomicU64::new(0),
        ended_early: AtomicU64::new(0),
        lag_from_ns: AtomicU64::new(u64::MAX),
        stop: AtomicBool::new(false),
        stop_notify: tokio::sync::Notify::new(),
    });
    let label = format!("{workload} {}", target.name);
    let sampler = ctx.sampler();
    let start = Instant::now();
    // Setup: start every client, `setup` at a time (bounded to 10 minutes).
    let gate = Arc::new(Semaphore::new(setup.max(1)));
    let started = Arc::new(AtomicU64::new(0));
    let mut tasks = Vec::with_capacity(clients);
    let mut setup_incomplete = false;
    {
        let _bar = Bar::start(&format!("{label} setup"), 30.0, shared.counters.clone());
        for spec in specs {
            let (shared, gate, target, started) = (shared.clone(), gate.clone(), target.clone(), started.clone());
            tasks.push(tokio::spawn(async move {
                let permit = gate.acquire_owned().await.ok();
                let r = client(&shared, &target, spec, permit).await;
                started.fetch_add(1, Relaxed);
                if let Err(e) = r {
                    shared.counters.errors.fetch_add(1, Relaxed);
                    shared.errors.add(format!("{e:#}"));
                }
            }));
        }
        let setup_deadline = Instant::now() + Duration::from_secs(SETUP_LIMIT_SECS);
        // Every client watching and holding its initial state (a WatchList's arrives on the watch).
        let ready = |s: &Shared| {
            let errors = s.counters.errors.load(Relaxed);
            s.opened.load(Relaxed) + errors >= clients as u64 && s.counters.requests.load(Relaxed) + errors >= clients as u64
        };
        while !ready(&shared) && Instant::now() < setup_deadline {
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        if !ready(&shared) {
            // Measured anyway, but said: the steady phase runs with fewer watchers than asked.
            shared
                .errors
                .add(format!("setup not done after {SETUP_LIMIT_SECS} s: {} of {clients} watches open", shared.opened.load(Relaxed)));
            setup_incomplete = true;
        }
    }
    let setup_secs = start.elapsed().as_secs_f64();
    // Steady: every client watching; churn (the simulator's, and PATCHes if asked).
    shared.lag_from_ns.store(now_ns() as u64, Relaxed);
    let bar = Bar::start(&label, watch_seconds, shared.counters.clone());
    let steady = Instant::now();
    let patcher = (patch_rate > 0.0).then(|| {
        let (up, names) = (ctx.upstream.clone(), ctx.names.pods.clone());
        tokio::spawn(async move { writes::patch_load(&up, &names, patch_rate, 64, watch_seconds, u64::MAX, None).await })
    });
    let events_before = shared.counters.events.load(Relaxed);
    tokio::time::sleep(Duration::from_secs_f64(watch_seconds)).await;
    let steady_elapsed = steady.elapsed();
    let steady_events = shared.counters.events.load(Relaxed) - events_before;
    shared.stop.store(true, Relaxed);
    shared.stop_notify.notify_waiters();
    drop(bar);
    let mut patches = None;
    if let Some(p) = patcher {
        patches = p.await.ok();
    }
    for t in tasks {
        let _ = tokio::time::timeout(Duration::from_secs(30), t).await;
    }
    let mut r = PhaseResult::new(workload, target.name.clone(), clients);
    r.procs = sampler.finish().await;
    r.counted(&shared.counters, start.elapsed());
    r.latency = shared.sync.percentiles();
    r.lag = shared.lag.percentiles();
    r.watches_opened = shared.opened.load(Relaxed);
    r.watches_ended_early = shared.ended_early.load(Relaxed);
    r.error_samples = shared.errors.take();
    r.extra.insert("setup_seconds".into(), setup_secs);
    if setup_incomplete {
        r.extra.insert("setup_incomplete".into(), 1.0);
    }
    r.extra.insert("steady_seconds".into(), steady_elapsed.as_secs_f64());
    r.extra.insert("steady_events_per_sec".into(), steady_events as f64 / steady_elapsed.as_secs_f64().max(1e-9));
    if let Some(p) = patches {
        r.extra.insert("patches_per_sec".into(), p.requests_per_sec);
        r.extra.insert("patch_errors".into(), p.errors as f64);
    }
    Ok(r)
}

/// One client: LIST (holding a setup permit), then WATCH until the phase stops.
async fn client(shared: &Shared, target: &Target, spec: Client, permit: Option<tokio::sync::OwnedSemaphorePermit>) -> anyhow::Result<()> {
    let http = Http::new(target, spec.protocol);
    let (accept, watch_accept) = match spec.encoding {
        Encoding::Protobuf => (PROTOBUF, PROTOBUF_WATCH),
        Encoding::Json => (JSON, JSON),
    };
    let t0 = Instant::now();
    let watch_path = match &spec.list {
        Some(list) => {
            let d = http.get_drain(list, accept, 4096).await?;
            shared.sync.record(t0.elapsed());
            shared.counters.requests.fetch_add(1, Relaxed);
            shared.counters.bytes.fetch_add(d.bytes, Relaxed);
            let rv = wire::list_rv(&d.prefix, spec.encoding).context("no resourceVersion in the list")?;
            spec.watch.replace("{RV}", &rv)
        }
        None => spec.watch.clone(),
    };
    let resp = http.send(Method::GET, &watch_path, watch_accept, None).await?;
    if resp.status() != 200 {
        let status = resp.status();
        let body = resp.into_body().collect().await.map(|b| b.to_bytes()).unwrap_or_default();
        bail!("watch status {status}: {}", body[..body.len().min(200)].escape_ascii());
    }
    shared.opened.fetch_add(1, Relaxed);
    let mut synced = spec.list.is_some();
    // A LIST client has its initial state; a WatchList client keeps its permit until then.
    // (Shadowing would not drop it: release it explicitly.)
    let mut permit = if synced {
        drop(permit);
        None
    } else {
        permit
    };
    let mut body = resp.into_body();
    let mut frames = Frames::new(spec.encoding);
    loop {
        let stopped = shared.stop_notify.notified();
        if shared.stop.load(Relaxed) {
            return Ok(());
        }
        let frame = tokio::select! {
            f = body.frame() => f,
            _ = stopped => return Ok(()),
        };
        let data = match frame {
            Some(Ok(f)) => match f.into_data() {
                Ok(d) => d,
                Err(_) => continue,
            },
            Some(Err(e)) => {
                shared.ended_early.fetch_add(1, Relaxed);
                bail!("watch broke: {e}");
            }
            None => {
                shared.ended_early.fetch_add(1, Relaxed);
                bail!("watch ended by the server");
            }
        };
        let now = now_ns();
        shared.counters.bytes.fetch_add(data.len() as u64, Relaxed);
        frames.push(&data);
        while let Some(f) = frames.next_frame() {
            shared.counters.events.fetch_add(1, Relaxed);
            match wire::frame_type(&f, spec.encoding) {
                EventType::Modified => {
                    if let Some(at) = wire::changed_at(&f) {
                        if at >= u128::from(shared.lag_from_ns.load(Relaxed)) {
                            shared.lag.record_us((now.saturating_sub(at) / 1000) as u64);
                        }
                    }
                }
                EventType::Bookmark if !synced && wire::find(&f, wire::INITIAL_END).is_some() => {
                    synced = true;
                    permit = None;
                    shared.sync.record(t0.elapsed());
                    shared.counters.requests.fetch_add(1, Relaxed);
                }
                EventType::Error => {
                    shared.ended_early.fetch_add(1, Relaxed);
                    bail!("watch sent ERROR: {}", f[..f.len().min(200)].escape_ascii());
                }
                _ => {}
            }
        }
        let _ = &permit;
    }
}
