//! Watching clients: kubelets (LIST + WATCH of their node's pods, joined if asked by
//! cluster watchers, each a WATCH of every pod) and informers (LIST + WATCH, or WatchList, of
//! all pods). Each client owns its connection. Once every client is watching, the steady
//! phase runs for `watch_seconds`. When the phase PATCHes pods, each event of one of its
//! PATCHes is timed from that PATCH's answer, and each watcher's events are checked against
//! the PATCHes it should have seen (every one, or its node's pods'), exactly once. Without
//! PATCHes, lag is measured on every MODIFIED event stamped (`kache.dev/changed-at`) after
//! the steady phase began, from the stamp.

use super::writes::{self, unix_ns, PatchLog, Patched};
use super::Ctx;
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
use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::Relaxed};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tokio::task::JoinHandle;

/// Shared by the clients of one class of watchers (kubelets, cluster watchers, informers).
struct Shared {
    counters: Arc<Counters>,
    /// Time to the initial state (LIST, or the WatchList's initial-events-end bookmark).
    sync: Hist,
    lag: Hist,
    errors: ErrorSamples,
    opened: AtomicU64,
    ended_early: AtomicU64,
    /// Watches answered with a status other than 200 at their start, and of those, 429s.
    refused: AtomicU64,
    refused_429: AtomicU64,
    /// The phase's PATCHes, when it makes any: their events are told by their stamps.
    log: Option<Arc<PatchLog>>,
    /// Events of the phase's PATCHes received, duplicates included.
    patch_events: AtomicU64,
    /// What each watcher that opened received of the phase's PATCHes, once it stopped.
    received: Mutex<Vec<Received>>,
    /// Stamps older than this (unix ns) are not counted as lag (set when steady begins).
    lag_from_ns: AtomicU64,
    stop: AtomicBool,
    stop_notify: tokio::sync::Notify,
}

/// The events of the phase's PATCHes one watcher received.
#[derive(Debug, Clone)]
struct Received {
    /// The node whose pods it watched (None: every pod).
    node: Option<String>,
    /// (the PATCH's number in the log, unix ns of the event's arrival), in arrival order.
    events: Vec<(u32, u64)>,
}

impl Shared {
    fn new(log: Option<Arc<PatchLog>>) -> Shared {
        Shared {
            counters: Arc::new(Counters::default()),
            sync: Hist::default(),
            lag: Hist::default(),
            errors: ErrorSamples::default(),
            opened: AtomicU64::new(0),
            ended_early: AtomicU64::new(0),
            refused: AtomicU64::new(0),
            refused_429: AtomicU64::new(0),
            log,
            patch_events: AtomicU64::new(0),
            received: Mutex::new(Vec::new()),
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

    fn received(&self) -> std::sync::MutexGuard<'_, Vec<Received>> {
        self.received.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The sync latency, lag, watch counts and error samples, into `r`.
    fn figures(&self, r: &mut PhaseResult) {
        r.latency = self.sync.percentiles();
        r.lag = self.lag.percentiles();
        r.watches_opened = self.opened.load(Relaxed);
        r.watches_ended_early = self.ended_early.load(Relaxed);
        r.extra.insert("watches_refused".into(), self.refused.load(Relaxed) as f64);
        r.extra.insert("watches_refused_429".into(), self.refused_429.load(Relaxed) as f64);
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
    /// The node whose pods it watches (None: every pod).
    node: Option<String>,
    encoding: Encoding,
    protocol: Protocol,
}

/// How long all clients of a class have to LIST and start watching.
const SETUP_LIMIT_SECS: u64 = 600;
/// After the last PATCH's answer, how long the watchers may take to receive what they miss
/// at most, and how long none of them receiving anything ends that wait.
const DRAIN_LIMIT: Duration = Duration::from_secs(15);
const DRAIN_QUIET: Duration = Duration::from_secs(2);

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
    /// Cluster watchers beside the kubelets.
    cluster_watchers: usize,
    encoding: Encoding,
    watch_seconds: f64,
    protocol: Protocol,
    /// Clients starting at once.
    setup_concurrency: usize,
    patch_rate: f64,
    /// The workload's name in reports, e.g. `kubelets pb x10000`.
    workload: String,
}

/// One class of a phase's watchers: its name in reports, its clients, their figures.
struct Class {
    workload: String,
    specs: Vec<Client>,
    shared: Arc<Shared>,
}

impl WatchPhase {
    fn of(phase: &Phase) -> anyhow::Result<WatchPhase> {
        Ok(match phase {
            Phase::Kubelets { clients, encoding, watch_seconds, protocol, setup_concurrency, patch_rate, cluster_watchers } => WatchPhase {
                watchers: Watchers::Kubelets,
                clients: *clients,
                cluster_watchers: *cluster_watchers,
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
                    cluster_watchers: 0,
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

    /// The `timeoutSeconds` of every watch: past the phase's end.
    fn timeout(&self) -> u64 {
        (self.watch_seconds as u64) + 600
    }

    /// Client `i`'s requests (a kubelet watches node `i`, in turn).
    fn client(&self, ctx: &Ctx, i: usize) -> Client {
        let timeout = self.timeout();
        let (list, watch, node) = match self.watchers {
            Watchers::Kubelets => {
                let node = &ctx.names.nodes[i % ctx.names.nodes.len()];
                let sel = encode(&format!("spec.nodeName={node}"));
                (
                    Some(format!("/api/v1/pods?fieldSelector={sel}&limit=500&resourceVersion=0")),
                    format!("/api/v1/pods?allowWatchBookmarks=true&fieldSelector={sel}&resourceVersion={{RV}}&timeoutSeconds={timeout}&watch=true"),
                    Some(node.clone()),
                )
            }
            Watchers::WatchListInformers => (
                None,
                format!("/api/v1/pods?allowWatchBookmarks=true&resourceVersionMatch=NotOlderThan&sendInitialEvents=true&timeoutSeconds={timeout}&watch=true"),
                None,
            ),
            Watchers::ListWatchInformers => (
                Some("/api/v1/pods?resourceVersion=0".into()),
                format!("/api/v1/pods?allowWatchBookmarks=true&resourceVersion={{RV}}&timeoutSeconds={timeout}&watch=true"),
                None,
            ),
        };
        Client { list, watch, node, encoding: self.encoding, protocol: self.protocol }
    }

    /// A cluster watcher's requests: the current resourceVersion from a consistent LIST of
    /// one pod (not every pod: at 100,000 pods that LIST would outweigh the watch), then a
    /// WATCH of every pod from it.
    fn cluster_watcher(&self) -> Client {
        Client {
            list: Some("/api/v1/pods?limit=1".into()),
            watch: format!("/api/v1/pods?allowWatchBookmarks=true&resourceVersion={{RV}}&timeoutSeconds={}&watch=true", self.timeout()),
            node: None,
            encoding: self.encoding,
            protocol: self.protocol,
        }
    }

    /// The classes of watchers, in the order they start: the phase's clients, then its
    /// cluster watchers if any.
    fn classes(&self, ctx: &Ctx, log: Option<Arc<PatchLog>>) -> Vec<Class> {
        let mut classes = vec![Class {
            workload: self.workload.clone(),
            specs: (0..self.clients).map(|i| self.client(ctx, i)).collect(),
            shared: Arc::new(Shared::new(log.clone())),
        }];
        if self.cluster_watchers > 0 {
            classes.push(Class {
                workload: format!("cluster watchers {} x{}", self.encoding.label(), self.cluster_watchers),
                specs: (0..self.cluster_watchers).map(|_| self.cluster_watcher()).collect(),
                shared: Arc::new(Shared::new(log)),
            });
        }
        classes
    }
}

/// Run a kubelets or informers phase against `target`: setup (every client of each class
/// watching, one class after the other), the steady phase, the figures of each class.
pub async fn run(ctx: &Ctx, target: &Target, phase: &Phase) -> anyhow::Result<Vec<PhaseResult>> {
    let p = WatchPhase::of(phase)?;
    let log = (p.patch_rate > 0.0).then(|| Arc::new(PatchLog::default()));
    let classes = p.classes(ctx, log.clone());
    let sampler = ctx.sampler();
    let start = Instant::now();
    let mut tasks = Vec::new();
    let mut setups = Vec::new();
    for c in &classes {
        let t0 = Instant::now();
        let (t, complete) =
            setup(&c.shared, target, c.specs.clone(), p.setup_concurrency, &format!("{} {}", c.workload, target.name)).await;
        tasks.extend(t);
        setups.push((t0.elapsed().as_secs_f64(), complete));
    }
    let label = format!("{} {}", p.workload, target.name);
    let steady = match &log {
        Some(log) => steady_patched(ctx, &classes, &label, p.watch_seconds, p.patch_rate, log).await,
        None => steady(&classes, &label, p.watch_seconds).await,
    };
    // Every client was told to stop; its task ends at once (a bound all of them share).
    let joined = tokio::time::Instant::now() + Duration::from_secs(30);
    for t in tasks {
        let _ = tokio::time::timeout_at(joined, t).await;
    }
    let procs = sampler.finish().await;
    let elapsed = start.elapsed();
    let patches = log.map(|l| l.patches());
    let mut results = Vec::new();
    for (i, (c, (setup_secs, complete))) in classes.iter().zip(setups).enumerate() {
        let mut r = PhaseResult::new(c.workload.clone(), target.name.clone(), c.specs.len());
        // The processes are the phase's, given with its first class only.
        if i == 0 {
            r.procs = procs.clone();
        }
        r.counted(&c.shared.counters, elapsed);
        if let Some(patches) = &patches {
            let received = c.shared.received();
            tally(&received, patches, &ctx.names.pod_nodes, &c.shared.lag).figures(&mut r);
            if (received.len() as u64) < c.shared.opened.load(Relaxed) {
                c.shared.errors.add(format!(
                    "{} of {} watchers that opened did not stop in time to be counted",
                    c.shared.opened.load(Relaxed) - received.len() as u64,
                    c.shared.opened.load(Relaxed)
                ));
            }
        }
        c.shared.figures(&mut r);
        r.extra.insert("setup_seconds".into(), setup_secs);
        if !complete {
            r.extra.insert("setup_incomplete".into(), 1.0);
        }
        steady.figures(&mut r, i);
        results.push(r);
    }
    Ok(results)
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

/// The steady phase's length, the events each class received over it and the PATCHes made.
struct Steady {
    elapsed: Duration,
    /// Per class, in the order of the classes.
    events: Vec<u64>,
    patches: Option<PhaseResult>,
    /// How long the watchers were given after the last PATCH's answer.
    drain: Option<Duration>,
}

impl Steady {
    fn figures(&self, r: &mut PhaseResult, class: usize) {
        r.extra.insert("steady_seconds".into(), self.elapsed.as_secs_f64());
        let events = self.events.get(class).copied().unwrap_or(0);
        r.extra.insert("steady_events_per_sec".into(), events as f64 / self.elapsed.as_secs_f64().max(1e-9));
        if let Some(p) = &self.patches {
            r.extra.insert("patches_per_sec".into(), p.requests_per_sec);
            r.extra.insert("patch_errors".into(), p.errors as f64);
        }
        if let Some(d) = self.drain {
            r.extra.insert("drain_seconds".into(), d.as_secs_f64());
        }
    }
}

/// The events received so far by each class.
fn events(classes: &[Class]) -> Vec<u64> {
    classes.iter().map(|c| c.shared.counters.events.load(Relaxed)).collect()
}

/// Every client watching for `seconds` with the simulator's churn only; lag counted from
/// its start. Then the clients are stopped.
async fn steady(classes: &[Class], label: &str, seconds: f64) -> Steady {
    let from = unix_ns();
    for c in classes {
        c.shared.lag_from_ns.store(from, Relaxed);
    }
    let bar = Bar::start(label, seconds, classes[0].shared.counters.clone());
    let t0 = Instant::now();
    let before = events(classes);
    tokio::time::sleep(Duration::from_secs_f64(seconds)).await;
    let elapsed = t0.elapsed();
    let events = events(classes).iter().zip(before).map(|(a, b)| a - b).collect();
    for c in classes {
        c.shared.stop();
    }
    drop(bar);
    Steady { elapsed, events, patches: None, drain: None }
}

/// Every client watching while PATCHes at `patch_rate` go through the upstream for
/// `seconds`, each logged in `log`; then, once the last PATCH is answered, until the
/// watchers have what they should (see [`drain`]). Then the clients are stopped.
async fn steady_patched(ctx: &Ctx, classes: &[Class], label: &str, seconds: f64, patch_rate: f64, log: &Arc<PatchLog>) -> Steady {
    let bar = Bar::start(label, seconds, classes[0].shared.counters.clone());
    let t0 = Instant::now();
    let before = events(classes);
    let patches = writes::patch_load(&ctx.upstream, &ctx.names.pods, patch_rate, 64, seconds, u64::MAX, None, Some(log.clone())).await;
    let made = log.patches();
    let drained = drain(classes, expected_events(classes, &made, &ctx.names.pod_nodes)).await;
    let elapsed = t0.elapsed();
    let events = events(classes).iter().zip(before).map(|(a, b)| a - b).collect();
    for c in classes {
        c.shared.stop();
    }
    drop(bar);
    Steady { elapsed, events, patches: Some(patches), drain: Some(drained) }
}

/// How many events of the answered PATCHes `made` the watchers of `classes` should receive
/// together, were every one of them watching.
fn expected_events(classes: &[Class], made: &[Patched], pod_nodes: &[String]) -> u64 {
    let mut per_node: HashMap<&str, u64> = HashMap::new();
    let mut all = 0;
    for p in made.iter().filter(|p| p.answered_ns.is_some()) {
        all += 1;
        if let Some(node) = pod_nodes.get(p.pod) {
            *per_node.entry(node.as_str()).or_default() += 1;
        }
    }
    let specs = classes.iter().flat_map(|c| &c.specs);
    specs.map(|s| s.node.as_ref().map_or(all, |n| per_node.get(n.as_str()).copied().unwrap_or(0))).sum()
}

/// Wait until the watchers of `classes` have received `expected` events of the phase's
/// PATCHes, or none arrived for [`DRAIN_QUIET`], or [`DRAIN_LIMIT`] passed; how long it
/// took.
async fn drain(classes: &[Class], expected: u64) -> Duration {
    let received = || classes.iter().map(|c| c.shared.patch_events.load(Relaxed)).sum::<u64>();
    let t0 = Instant::now();
    let (mut last, mut changed) = (received(), Instant::now());
    while t0.elapsed() < DRAIN_LIMIT {
        let n = received();
        if n >= expected {
            break;
        }
        if n != last {
            (last, changed) = (n, Instant::now());
        } else if changed.elapsed() >= DRAIN_QUIET {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    t0.elapsed()
}

/// The events of the phase's PATCHes the watchers of a class received, against those each
/// should have: every answered PATCH for a watcher of every pod, those of its node's pods
/// for a kubelet.
#[derive(Debug, Default, PartialEq, Eq)]
struct Tally {
    expected: u64,
    /// Expected events that never arrived (a drop).
    missed: u64,
    /// Events that arrived again after their first.
    duplicated: u64,
    /// Events of PATCHes the watcher had no reason to expect: one that failed or timed out
    /// at the harness but was applied, a pod not on its node.
    unexpected: u64,
    /// Events that arrived before their PATCH's answer did (their lag is counted as 0).
    before_answer: u64,
}

impl Tally {
    fn figures(&self, r: &mut PhaseResult) {
        r.extra.insert("patch_events_expected".into(), self.expected as f64);
        r.extra.insert("patch_events_missed".into(), self.missed as f64);
        r.extra.insert("patch_events_duplicated".into(), self.duplicated as f64);
        r.extra.insert("patch_events_unexpected".into(), self.unexpected as f64);
        r.extra.insert("patch_events_before_answer".into(), self.before_answer as f64);
    }
}

/// Count what `received` holds against `patches` (a pod's node from `pod_nodes`), and
/// record into `lag` each expected event's first arrival less its PATCH's answer.
fn tally(received: &[Received], patches: &[Patched], pod_nodes: &[String], lag: &Hist) -> Tally {
    let answered: Vec<u32> = (0..patches.len() as u32).filter(|&i| patches[i as usize].answered_ns.is_some()).collect();
    let mut by_node: HashMap<&str, Vec<u32>> = HashMap::new();
    for &i in &answered {
        if let Some(node) = pod_nodes.get(patches[i as usize].pod) {
            by_node.entry(node.as_str()).or_default().push(i);
        }
    }
    let mut t = Tally::default();
    for r in received {
        let expected: &[u32] = match &r.node {
            None => &answered,
            Some(n) => by_node.get(n.as_str()).map_or(&[], Vec::as_slice),
        };
        // By PATCH, then by arrival: each PATCH's first arrival comes first.
        let mut events = r.events.clone();
        events.sort_unstable();
        let (mut found, mut previous) = (0u64, None);
        for &(id, at) in &events {
            if previous == Some(id) {
                t.duplicated += 1;
                continue;
            }
            previous = Some(id);
            let Some(answer) = expected.binary_search(&id).ok().and_then(|_| patches[id as usize].answered_ns) else {
                t.unexpected += 1;
                continue;
            };
            found += 1;
            if at < answer {
                t.before_answer += 1;
            }
            lag.record_us(at.saturating_sub(answer) / 1000);
        }
        t.expected += expected.len() as u64;
        t.missed += expected.len() as u64 - found;
    }
    t
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
        shared.refused.fetch_add(1, Relaxed);
        if status == http::StatusCode::TOO_MANY_REQUESTS {
            shared.refused_429.fetch_add(1, Relaxed);
        }
        let body = resp.into_body().collect().await.map(|b| b.to_bytes()).unwrap_or_default();
        bail!("watch status {status}: {}", body[..body.len().min(200)].escape_ascii());
    }
    shared.opened.fetch_add(1, Relaxed);
    // A LIST client has its initial state; a WatchList client keeps its permit until then.
    let (synced, permit) = match &spec.list {
        Some(_) => {
            drop(permit);
            (true, None)
        }
        None => (false, permit),
    };
    let mut watch = Watch { shared, encoding: spec.encoding, t0, synced, permit, seen: Vec::new() };
    let read = watch.read(resp.into_body()).await;
    if shared.log.is_some() {
        shared.received().push(Received { node: spec.node, events: watch.seen });
    }
    read
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
    /// The events of the phase's PATCHes received: (the PATCH's number, unix ns).
    seen: Vec<(u32, u64)>,
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
            let now = unix_ns();
            shared.counters.bytes.fetch_add(data.len() as u64, Relaxed);
            frames.push(&data);
            while let Some(f) = frames.next_frame() {
                self.event(&f, now)?;
            }
        }
    }

    /// One event received at `now` (unix ns): a MODIFIED's stamp (one of the phase's PATCHes
    /// kept for the tally, else lag from the stamp), the initial state's end from a
    /// WatchList's bookmark; an ERROR ends the watch.
    fn event(&mut self, f: &[u8], now: u64) -> anyhow::Result<()> {
        let shared = self.shared;
        shared.counters.events.fetch_add(1, Relaxed);
        match wire::frame_type(f, self.encoding) {
            EventType::Modified => match (wire::changed_at(f), &shared.log) {
                (Some(at), Some(log)) => {
                    if let Some(id) = u64::try_from(at).ok().and_then(|at| log.lookup(at)) {
                        self.seen.push((id, now));
                        shared.patch_events.fetch_add(1, Relaxed);
                    }
                }
                (Some(at), None) => {
                    if at >= u128::from(shared.lag_from_ns.load(Relaxed)) {
                        shared.lag.record_us((u128::from(now).saturating_sub(at) / 1000) as u64);
                    }
                }
                (None, _) => {}
            },
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
            cluster_watchers: 2,
        };
        let classes = WatchPhase::of(&kubelets).unwrap().classes(&ctx(), None);
        let names: Vec<_> = classes.iter().map(|c| (c.workload.as_str(), c.specs.len())).collect();
        assert_eq!(names, [("kubelets pb x3", 3), ("cluster watchers pb x2", 2)]);
        let cluster = &classes[1].specs[1];
        assert_eq!(
            (cluster.list.as_deref(), cluster.watch.as_str(), &cluster.node, cluster.protocol),
            (
                Some("/api/v1/pods?limit=1"),
                "/api/v1/pods?allowWatchBookmarks=true&resourceVersion={RV}&timeoutSeconds=630&watch=true",
                &None,
                Protocol::Http2
            )
        );
        assert_eq!(classes[0].specs[2].node.as_deref(), Some("n0"));
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

    /// Three PATCHes (the second never answered) of pods on n0, n1, n0, and what three
    /// watchers received of them.
    #[test]
    fn each_watcher_is_held_to_the_patches_it_should_see() {
        let patched = |pod, stamp, answered_ns| Patched { pod, stamp, answered_ns };
        let patches = [patched(0, 100, Some(1_000_000)), patched(1, 101, None), patched(2, 102, Some(2_000_000))];
        let pod_nodes: Vec<String> = ["n0", "n1", "n0"].map(String::from).to_vec();
        let watcher = |node: Option<&str>, events: &[(u32, u64)]| Received { node: node.map(String::from), events: events.to_vec() };
        let received = [
            // Every pod: PATCH 0 twice (the later arrival first), 1 (never answered), 2 never.
            watcher(None, &[(0, 4_000_000), (1, 1_500_000), (0, 3_000_000)]),
            // n0's kubelet: both of its PATCHes, the second before its answer.
            watcher(Some("n0"), &[(0, 1_500_000), (2, 1_900_000)]),
            // n1's kubelet: its only PATCH was not answered, so nothing is expected.
            watcher(Some("n1"), &[]),
        ];
        let lag = Hist::default();
        let t = tally(&received, &patches, &pod_nodes, &lag);
        assert_eq!(t, Tally { expected: 4, missed: 1, duplicated: 1, unexpected: 1, before_answer: 1 });
        let lag = lag.percentiles().unwrap();
        // 2 ms (the first of the duplicated arrivals), 0.5 ms, and 0 (counted as 1 µs).
        assert_eq!((lag.count, lag.max_us), (3, 2000));
        assert_eq!(lag.p50_us, 500);
    }
}
