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
use hyper::body::Incoming;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::Relaxed};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tokio::task::JoinHandle;

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

impl Shared {
    fn new() -> Shared {
        Shared {
            counters: Arc::new(Counters::default()),
            sync: Hist::default(),
            lag: Hist::default(),
            errors: ErrorSamples::default(),
            opened: AtomicU64::new(0),
            ended_early: AtomicU64::new(0),
            lag_from_ns: AtomicU64::new(u64::MAX),
            stop: AtomicBool::new(false),
            stop_notify: tokio::sync::Notify::new(),
        }
    }

    /// Whether all `clients` watch and hold their initial state (a WatchList's arrives on
    /// the watch), counting those that failed.
    fn ready(&self, clients: usize) -> bool {
        let errors = self.counters.errors.load(Relaxed);
        self.opened.load(Relaxed) + errors >= clients as u64 && self.counters.requests.load(Relaxed) + errors >= clients as u64
    }

    /// Tell every client to stop.
    fn stop(&self) {
        self.stop.store(true, Relaxed);
        self.stop_notify.notify_waiters();
    }

    /// The sync latency, lag, watch counts and error samples, into `r`.
    fn figures(&self, r: &mut PhaseResult) {
        r.latency = self.sync.percentiles();
        r.lag = self.lag.percentiles();
        r.watches_opened = self.opened.load(Relaxed);
        r.watches_ended_early = self.ended_early.load(Relaxed);
        r.error_samples = self.errors.take();
    }
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

/// Who watches.
#[derive(Clone, Copy)]
enum Watchers {
    /// LIST + WATCH of their node's pods.
    Kubelets,
    /// WatchList of all pods.
    WatchListInformers,
    /// LIST + WATCH of all pods.
    ListWatchInformers,
}

/// A kubelets or informers phase's parameters.
struct WatchPhase {
    watchers: Watchers,
    clients: usize,
    encoding: Encoding,
    watch_seconds: f64,
    protocol: Protocol,
    /// Clients starting at once.
    setup_concurrency: usize,
    patch_rate: f64,
    /// The workload's name in reports, e.g. `kubelets pb x10000`.
    workload: String,
}

impl WatchPhase {
    fn of(phase: &Phase) -> anyhow::Result<WatchPhase> {
        Ok(match phase {
            Phase::Kubelets { clients, encoding, watch_seconds, protocol, setup_concurrency, patch_rate } => WatchPhase {
                watchers: Watchers::Kubelets,
                clients: *clients,
                encoding: *encoding,
                watch_seconds: *watch_seconds,
                protocol: *protocol,
                setup_concurrency: *setup_concurrency,
                patch_rate: *patch_rate,
                workload: format!("kubelets {} x{clients}", encoding.label()),
            },
            Phase::Informers { clients, encoding, watch_seconds, mode, protocol, patch_rate } => {
                let (watchers, m) = match mode {
                    InformerMode::WatchList => (Watchers::WatchListInformers, "watchlist"),
                    InformerMode::ListWatch => (Watchers::ListWatchInformers, "list+watch"),
                };
                WatchPhase {
                    watchers,
                    clients: *clients,
                    encoding: *encoding,
                    watch_seconds: *watch_seconds,
                    protocol: *protocol,
                    setup_concurrency: 16,
                    patch_rate: *patch_rate,
                    workload: format!("informers {} {m} x{clients}", encoding.label()),
                }
            }
            _ => bail!("not a watch phase"),
        })
    }

    /// Client `i`'s requests (a kubelet watches node `i`, in turn).
    fn client(&self, ctx: &Ctx, i: usize) -> Client {
        let timeout = (self.watch_seconds as u64) + 600;
        let (list, watch) = match self.watchers {
            Watchers::Kubelets => {
                let sel = encode(&format!("spec.nodeName={}", ctx.names.nodes[i % ctx.names.nodes.len()]));
                (
                    Some(format!("/api/v1/pods?fieldSelector={sel}&limit=500&resourceVersion=0")),
                    format!("/api/v1/pods?allowWatchBookmarks=true&fieldSelector={sel}&resourceVersion={{RV}}&timeoutSeconds={timeout}&watch=true"),
                )
            }
            Watchers::WatchListInformers => (
                None,
                format!("/api/v1/pods?allowWatchBookmarks=true&resourceVersionMatch=NotOlderThan&sendInitialEvents=true&timeoutSeconds={timeout}&watch=true"),
            ),
            Watchers::ListWatchInformers => (
                Some("/api/v1/pods?resourceVersion=0".into()),
                format!("/api/v1/pods?allowWatchBookmarks=true&resourceVersion={{RV}}&timeoutSeconds={timeout}&watch=true"),
            ),
        };
        Client { list, watch, encoding: self.encoding, protocol: self.protocol }
    }
}

/// Run a kubelets or informers phase against `target`: setup (every client watching), the
/// steady phase, the figures.
pub async fn run(ctx: &Ctx, target: &Target, phase: &Phase) -> anyhow::Result<PhaseResult> {
    let p = WatchPhase::of(phase)?;
    let specs: Vec<Client> = (0..p.clients).map(|i| p.client(ctx, i)).collect();
    let shared = Arc::new(Shared::new());
    let label = format!("{} {}", p.workload, target.name);
    let sampler = ctx.sampler();
    let start = Instant::now();
    let (tasks, setup_complete) = setup(&shared, target, specs, p.setup_concurrency, &label).await;
    let setup_secs = start.elapsed().as_secs_f64();
    let steady = steady(ctx, &shared, &label, p.watch_seconds, p.patch_rate).await;
    for t in tasks {
        let _ = tokio::time::timeout(Duration::from_secs(30), t).await;
    }
    let mut r = PhaseResult::new(p.workload, target.name.clone(), p.clients);
    r.procs = sampler.finish().await;
    r.counted(&shared.counters, start.elapsed());
    shared.figures(&mut r);
    r.extra.insert("setup_seconds".into(), setup_secs);
    if !setup_complete {
        r.extra.insert("setup_incomplete".into(), 1.0);
    }
    steady.figures(&mut r);
    Ok(r)
}

/// Start every client, `concurrency` at a time, and wait (up to [`SETUP_LIMIT_SECS`]) until
/// all watch with their initial state. The clients' tasks, and whether they got there.
async fn setup(shared: &Arc<Shared>, target: &Target, specs: Vec<Client>, concurrency: usize, label: &str) -> (Vec<JoinHandle<()>>, bool) {
    let _bar = Bar::start(&format!("{label} setup"), 30.0, shared.counters.clone());
    let clients = specs.len();
    let gate = Arc::new(Semaphore::new(concurrency.max(1)));
    let tasks: Vec<JoinHandle<()>> = specs
        .into_iter()
        .map(|spec| {
            let (shared, gate, target) = (shared.clone(), gate.clone(), target.clone());
            tokio::spawn(async move {
                let permit = gate.acquire_owned().await.ok();
                if let Err(e) = client(&shared, &target, spec, permit).await {
                    shared.counters.errors.fetch_add(1, Relaxed);
                    shared.errors.add(format!("{e:#}"));
                }
            })
        })
        .collect();
    let setup_deadline = Instant::now() + Duration::from_secs(SETUP_LIMIT_SECS);
    while !shared.ready(clients) && Instant::now() < setup_deadline {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    if !shared.ready(clients) {
        // Measured anyway, but said: the steady phase runs with fewer watchers than asked.
        shared.errors.add(format!("setup not done after {SETUP_LIMIT_SECS} s: {} of {clients} watches open", shared.opened.load(Relaxed)));
        return (tasks, false);
    }
    (tasks, true)
}

/// The steady phase's length, the events received over it and the PATCHes made.
struct Steady {
    elapsed: Duration,
    events: u64,
    patches: Option<PhaseResult>,
}

impl Steady {
    fn figures(&self, r: &mut PhaseResult) {
        r.extra.insert("steady_seconds".into(), self.elapsed.as_secs_f64());
        r.extra.insert("steady_events_per_sec".into(), self.events as f64 / self.elapsed.as_secs_f64().max(1e-9));
        if let Some(p) = &self.patches {
            r.extra.insert("patches_per_sec".into(), p.requests_per_sec);
            r.extra.insert("patch_errors".into(), p.errors as f64);
        }
    }
}

/// Every client watching for `seconds`, with churn (the simulator's, and PATCHes at
/// `patch_rate` if asked); lag counted from its start. Then the clients are stopped.
async fn steady(ctx: &Ctx, shared: &Shared, label: &str, seconds: f64, patch_rate: f64) -> Steady {
    shared.lag_from_ns.store(now_ns() as u64, Relaxed);
    let bar = Bar::start(label, seconds, shared.counters.clone());
    let steady = Instant::now();
    let patcher = (patch_rate > 0.0).then(|| {
        let (up, names) = (ctx.upstream.clone(), ctx.names.pods.clone());
        tokio::spawn(async move { writes::patch_load(&up, &names, patch_rate, 64, seconds, u64::MAX, None).await })
    });
    let events_before = shared.counters.events.load(Relaxed);
    tokio::time::sleep(Duration::from_secs_f64(seconds)).await;
    let elapsed = steady.elapsed();
    let events = shared.counters.events.load(Relaxed) - events_before;
    shared.stop();
    drop(bar);
    let mut patches = None;
    if let Some(p) = patcher {
        patches = p.await.ok();
    }
    Steady { elapsed, events, patches }
}

/// One client: LIST (holding a setup permit), then WATCH until the phase stops.
async fn client(shared: &Shared, target: &Target, spec: Client, permit: Option<OwnedSemaphorePermit>) -> anyhow::Result<()> {
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
    // A LIST client has its initial state; a WatchList client keeps its permit until then.
    let mut watch = if spec.list.is_some() {
        drop(permit);
        Watch { shared, encoding: spec.encoding, t0, synced: true, permit: None }
    } else {
        Watch { shared, encoding: spec.encoding, t0, synced: false, permit }
    };
    watch.read(resp.into_body()).await
}

/// One client's open watch.
struct Watch<'a> {
    shared: &'a Shared,
    encoding: Encoding,
    /// When the client started (its sync latency runs from there).
    t0: Instant,
    /// Whether it holds its initial state.
    synced: bool,
    /// Its setup permit, held until it syncs.
    permit: Option<OwnedSemaphorePermit>,
}

impl Watch<'_> {
    /// Read events until the phase stops (Ok) or the watch ends or sends an ERROR (Err).
    async fn read(&mut self, mut body: Incoming) -> anyhow::Result<()> {
        let shared = self.shared;
        let mut frames = Frames::new(self.encoding);
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
                self.event(&f, now)?;
            }
        }
    }

    /// One event received at `now` (unix ns): lag from a MODIFIED's stamp, the initial
    /// state's end from a WatchList's bookmark; an ERROR ends the watch.
    fn event(&mut self, f: &[u8], now: u128) -> anyhow::Result<()> {
        let shared = self.shared;
        shared.counters.events.fetch_add(1, Relaxed);
        match wire::frame_type(f, self.encoding) {
            EventType::Modified => {
                if let Some(at) = wire::changed_at(f) {
                    if at >= u128::from(shared.lag_from_ns.load(Relaxed)) {
                        shared.lag.record_us((now.saturating_sub(at) / 1000) as u64);
                    }
                }
            }
            EventType::Bookmark if !self.synced && wire::find(f, wire::INITIAL_END).is_some() => {
                self.synced = true;
                self.permit = None;
                shared.sync.record(self.t0.elapsed());
                shared.counters.requests.fetch_add(1, Relaxed);
            }
            EventType::Error => {
                shared.ended_early.fetch_add(1, Relaxed);
                bail!("watch sent ERROR: {}", f[..f.len().min(200)].escape_ascii());
            }
            _ => {}
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::phases::Names;
    use std::path::PathBuf;

    fn ctx() -> Ctx {
        Ctx {
            upstream: Target::plain("direct", "127.0.0.1:1"),
            observed: Default::default(),
            names: Names { nodes: vec!["n0".into(), "n1".into()], ..Default::default() },
            self_exe: PathBuf::new(),
            work_dir: PathBuf::new(),
            server_cpu: None,
        }
    }

    /// The workload's name, the LIST and the watch of client `i` of `phase`.
    fn asks(phase: Phase, i: usize) -> (String, usize, Option<String>, String) {
        let p = WatchPhase::of(&phase).unwrap();
        let c = p.client(&ctx(), i);
        (p.workload, p.setup_concurrency, c.list, c.watch)
    }

    #[test]
    fn each_kind_of_watcher_asks_for_its_pods() {
        let kubelets = Phase::Kubelets {
            clients: 3,
            encoding: Encoding::Protobuf,
            watch_seconds: 30.5,
            protocol: Protocol::Http2,
            setup_concurrency: 64,
            patch_rate: 0.0,
        };
        assert_eq!(
            asks(kubelets, 3),
            (
                "kubelets pb x3".into(),
                64,
                Some("/api/v1/pods?fieldSelector=spec.nodeName%3Dn1&limit=500&resourceVersion=0".into()),
                "/api/v1/pods?allowWatchBookmarks=true&fieldSelector=spec.nodeName%3Dn1&resourceVersion={RV}&timeoutSeconds=630&watch=true"
                    .into()
            )
        );
        let informers = |mode| Phase::Informers {
            clients: 2,
            encoding: Encoding::Json,
            watch_seconds: 10.0,
            mode,
            protocol: Protocol::Http1,
            patch_rate: 5.0,
        };
        assert_eq!(
            asks(informers(InformerMode::ListWatch), 0),
            (
                "informers json list+watch x2".into(),
                16,
                Some("/api/v1/pods?resourceVersion=0".into()),
                "/api/v1/pods?allowWatchBookmarks=true&resourceVersion={RV}&timeoutSeconds=610&watch=true".into()
            )
        );
        assert_eq!(
            asks(informers(InformerMode::WatchList), 1),
            (
                "informers json watchlist x2".into(),
                16,
                None,
                "/api/v1/pods?allowWatchBookmarks=true&resourceVersionMatch=NotOlderThan&sendInitialEvents=true&timeoutSeconds=610&watch=true"
                    .into()
            )
        );
        assert!(WatchPhase::of(&Phase::Memory { settle_seconds: 1.0 }).is_err());
    }
}
