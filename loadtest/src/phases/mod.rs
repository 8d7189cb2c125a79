//! Running phases: the context they share (targets, processes observed, names taken from
//! the cluster) and the dispatch from a scenario's phase to its driver.

pub mod lists;
pub mod memory;
pub mod reference;
pub mod watches;
pub mod writes;

use crate::client::{Http, JSON};
use crate::env::{Observed, Target};
use crate::procs::Sampler;
use crate::scenario::{Phase, Protocol};
use crate::stats::PhaseResult;
use anyhow::Context;
use serde::Deserialize;
use std::path::PathBuf;

/// Names taken from the cluster once per scenario.
#[derive(Debug, Default)]
pub struct Names {
    /// Node names (kubelets and `spec.nodeName` selectors), in order.
    pub nodes: Vec<String>,
    /// Distinct `app` label values (label selectors).
    pub apps: Vec<String>,
    /// (namespace, name) of pods to PATCH.
    pub pods: Vec<(String, String)>,
    /// The node of each pod of `pods` (empty where it has none), so a PATCH's event can be
    /// expected at that node's kubelets.
    pub pod_nodes: Vec<String>,
}

/// What every phase may use.
pub struct Ctx {
    /// The upstream (churn PATCHes go there).
    pub upstream: Target,
    pub observed: Observed,
    pub names: Names,
    /// This executable (started again as the trivial reference server).
    pub self_exe: PathBuf,
    /// Where helper files go.
    pub work_dir: PathBuf,
    /// The CPU servers started for a phase run on (`--split-cores`), if any.
    pub server_cpu: Option<&'static str>,
}

/// The CPU the load generator keeps under `--split-cores`.
pub const LOADGEN_CPU: &str = "0";
/// The CPU the servers (simulator, kache, trivial server) get under `--split-cores`.
pub const SERVER_CPU: &str = "1";

impl Ctx {
    /// Start sampling kache, the upstream and this process.
    pub fn sampler(&self) -> Sampler {
        Sampler::start(self.procs())
    }

    /// kache, the upstream and this process, by role.
    pub fn procs(&self) -> Vec<(String, u32)> {
        let mut procs = Vec::new();
        if let Some(p) = self.observed.kache_pid {
            procs.push(("kache".to_string(), p));
        }
        if let Some(p) = self.observed.upstream_pid {
            procs.push(("upstream".to_string(), p));
        }
        procs.push(("loadtest".to_string(), std::process::id()));
        procs
    }
}

#[derive(Deserialize)]
struct List<T> {
    items: Vec<T>,
}
#[derive(Deserialize)]
struct Item {
    metadata: Meta,
    #[serde(default)]
    spec: Spec,
}
#[derive(Deserialize, Default)]
struct Spec {
    #[serde(default, rename = "nodeName")]
    node_name: String,
}
#[derive(Deserialize)]
struct Meta {
    name: String,
    #[serde(default)]
    namespace: String,
    #[serde(default)]
    labels: std::collections::BTreeMap<String, String>,
}

/// Read node names, app labels and some pods from `t`.
pub async fn names(t: &Target) -> anyhow::Result<Names> {
    let http = Http::new(t, Protocol::Http1);
    let nodes = http.get_full("/api/v1/nodes?resourceVersion=0", JSON).await?;
    anyhow::ensure!(nodes.status == 200, "GET nodes: {}: {}", nodes.status, nodes.body[..nodes.body.len().min(300)].escape_ascii());
    let nodes: List<Item> = serde_json::from_slice(&nodes.body).context("node list")?;
    let pods = http.get_full("/api/v1/pods?limit=10000", JSON).await?;
    anyhow::ensure!(pods.status == 200, "GET pods: {}: {}", pods.status, pods.body[..pods.body.len().min(300)].escape_ascii());
    let pods: List<Item> = serde_json::from_slice(&pods.body).context("pod list")?;
    let mut apps: Vec<String> = pods.items.iter().filter_map(|p| p.metadata.labels.get("app").cloned()).collect();
    apps.sort();
    apps.dedup();
    let mut nodes: Vec<String> = nodes.items.into_iter().map(|n| n.metadata.name).collect();
    nodes.sort();
    let (pods, pod_nodes) = pods.items.into_iter().map(|p| ((p.metadata.namespace, p.metadata.name), p.spec.node_name)).unzip();
    anyhow::ensure!(!nodes.is_empty(), "the cluster has no nodes");
    Ok(Names { nodes, apps, pods, pod_nodes })
}

/// Run one phase against `target` (reference phases ignore it).
pub async fn run(ctx: &Ctx, phase: &Phase, target: &Target) -> anyhow::Result<Vec<PhaseResult>> {
    let mut results = dispatch(ctx, phase, target).await?;
    for r in &mut results {
        r.kind = phase.kind().to_string();
    }
    Ok(results)
}

async fn dispatch(ctx: &Ctx, phase: &Phase, target: &Target) -> anyhow::Result<Vec<PhaseResult>> {
    Ok(match phase {
        Phase::List { label, query, read, encoding, concurrency, seconds, max_requests, protocol } => {
            let mut out = Vec::new();
            for &c in concurrency {
                let spec = lists::ListSpec {
                    label: label.clone(),
                    query: *query,
                    read: *read,
                    encoding: *encoding,
                    concurrency: c,
                    seconds: *seconds,
                    max_requests: *max_requests,
                    protocol: *protocol,
                };
                out.push(lists::run(ctx, target, &spec).await?);
            }
            out
        }
        Phase::Kubelets { .. } | Phase::Informers { .. } => watches::run(ctx, target, phase).await?,
        Phase::Writes { rate, concurrency, seconds, max_requests } => {
            vec![writes::run(ctx, target, *rate, *concurrency, *seconds, *max_requests).await?]
        }
        Phase::LoopbackReference { sample, seconds, max_transfers } => {
            vec![reference::loopback(ctx, *sample, *seconds, *max_transfers).await?]
        }
        Phase::TrivialServerReference { sample, concurrency, seconds, max_requests, protocol } => {
            vec![reference::trivial(ctx, *sample, *concurrency, *seconds, *max_requests, *protocol).await?]
        }
        Phase::Memory { settle_seconds } => vec![memory::run(ctx, *settle_seconds).await?],
    })
}
