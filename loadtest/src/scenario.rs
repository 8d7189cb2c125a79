//! Scenario files (`loadtest/scenarios/*.toml`): a named, versioned list of phases, plus
//! the simulated cluster and kache settings used when the harness starts its own servers.

use anyhow::{bail, Context};
use serde::{Deserialize, Serialize};
use std::path::Path;

/// One scenario file.
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct Scenario {
    /// Short name; also the stem of the report files.
    pub name: String,
    /// Bumped whenever the phases or their parameters change, so figures stay comparable.
    pub version: u32,
    /// What the scenario models.
    #[serde(default)]
    pub description: String,
    /// The simulated cluster (self-contained runs only).
    #[serde(default)]
    pub cluster: Cluster,
    /// kache's settings (self-contained runs only).
    #[serde(default)]
    pub kache: KacheSettings,
    /// Which CPUs the processes run on.
    #[serde(default)]
    pub placement: Placement,
    /// Phases, run in order; each against `direct` and then `kache`.
    #[serde(rename = "phase")]
    pub phases: Vec<Phase>,
}

/// Which CPUs the processes run on.
#[derive(Debug, Clone, Default, Deserialize, Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct Placement {
    /// The servers (simulator, kache, trivial reference server) on one CPU, the load
    /// generator on the other (as `kache-loadtest run --split-cores`).
    pub split_cores: bool,
}

/// `kache sim` flags.
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct Cluster {
    pub nodes: usize,
    pub pods: usize,
    pub namespaces: usize,
    pub seed: u64,
    pub pod_bytes: Option<usize>,
    /// The simulator's own churn (updates/creates/deletes 80/10/10), stamped with
    /// `kache.dev/changed-at`.
    pub churn_per_sec: f64,
    pub window_events: usize,
    pub bookmark_interval_seconds: u64,
}

impl Default for Cluster {
    fn default() -> Self {
        Cluster {
            nodes: 1000,
            pods: 30_000,
            namespaces: 10,
            seed: 1,
            pod_bytes: None,
            churn_per_sec: 0.0,
            window_events: 10_000,
            bookmark_interval_seconds: 60,
        }
    }
}

/// `kache serve` flags.
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct KacheSettings {
    pub preload: String,
    pub preload_encodings: String,
    /// Serve clients without credentials (`--allow-anonymous`, where kache has it); the
    /// harness's clients send none, as against the open simulator.
    pub anonymous: bool,
    /// Further flags passed as they are.
    pub extra_args: Vec<String>,
}

impl Default for KacheSettings {
    fn default() -> Self {
        KacheSettings { preload: "pods".into(), preload_encodings: "json,protobuf".into(), anonymous: true, extra_args: Vec::new() }
    }
}

/// Wire encoding a client asks for.
#[derive(Debug, Clone, Copy, Deserialize, Serialize, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum Encoding {
    Json,
    Protobuf,
}

impl Encoding {
    pub fn label(self) -> &'static str {
        match self {
            Encoding::Json => "json",
            Encoding::Protobuf => "pb",
        }
    }
}

/// HTTP version of the client connections.
#[derive(Debug, Clone, Copy, Deserialize, Serialize, PartialEq, Eq, Default)]
#[serde(rename_all = "lowercase")]
pub enum Protocol {
    #[default]
    Http1,
    Http2,
}

/// What a LIST asks for.
#[derive(Debug, Clone, Copy, Deserialize, Serialize, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum Query {
    /// Every pod.
    All,
    /// `fieldSelector=spec.nodeName=<node>`, a different node each request.
    Node,
    /// `labelSelector=app=<app>`, apps taken from the cluster.
    Label,
}

/// Read mode of a LIST.
#[derive(Debug, Clone, Copy, Deserialize, Serialize, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum ReadMode {
    /// `resourceVersion=0`: any, served from cache at once.
    Rv0,
    /// No resourceVersion: most recent, consistent.
    Consistent,
}

/// How informers start.
#[derive(Debug, Clone, Copy, Deserialize, Serialize, PartialEq, Eq, Default)]
#[serde(rename_all = "snake_case")]
pub enum InformerMode {
    #[default]
    ListWatch,
    /// `sendInitialEvents=true` (client-go 1.35+ default).
    WatchList,
}

/// A payload size taken from a sample response, for the reference limits.
#[derive(Debug, Clone, Copy, Deserialize, Serialize, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum Sample {
    /// A full protobuf LIST of pods.
    FullListProtobuf,
    /// A protobuf `spec.nodeName` LIST of one node's pods.
    NodeListProtobuf,
}

fn one() -> Vec<usize> {
    vec![1]
}
fn sixty_four() -> usize {
    64
}

/// One phase. Time (`seconds`) and count (`max_requests`, `clients`) bound every loop.
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(tag = "kind", rename_all = "snake_case", deny_unknown_fields)]
pub enum Phase {
    /// Repeated LISTs by `concurrency` workers (list storm, selector QPS).
    List {
        label: String,
        query: Query,
        read: ReadMode,
        encoding: Encoding,
        #[serde(default = "one")]
        concurrency: Vec<usize>,
        seconds: f64,
        max_requests: u64,
        #[serde(default)]
        protocol: Protocol,
    },
    /// `clients` kubelets: LIST + WATCH of `spec.nodeName=<own node>`, one connection each.
    Kubelets {
        clients: usize,
        encoding: Encoding,
        watch_seconds: f64,
        #[serde(default)]
        protocol: Protocol,
        /// Kubelets starting at once.
        #[serde(default = "sixty_four")]
        setup_concurrency: usize,
        /// Pod updates per second PATCHed through the upstream during the watch (0: none;
        /// the simulator's churn still applies).
        #[serde(default)]
        patch_rate: f64,
        /// Further clients that each WATCH every pod from the current resourceVersion (read
        /// by a `limit=1` LIST), one connection each, started once the kubelets watch and
        /// before the PATCHes begin; measured apart from the kubelets.
        #[serde(default)]
        cluster_watchers: usize,
    },
    /// `clients` informers on all pods: LIST + WATCH or WatchList.
    Informers {
        clients: usize,
        encoding: Encoding,
        watch_seconds: f64,
        #[serde(default)]
        mode: InformerMode,
        #[serde(default)]
        protocol: Protocol,
        #[serde(default)]
        patch_rate: f64,
    },
    /// PATCH pods at `rate`/s (or as fast as `concurrency` allows when 0), timing each write.
    Writes { rate: f64, concurrency: usize, seconds: f64, max_requests: u64 },
    /// Bytes/s over a loopback TCP socket for a payload the size of `sample`.
    LoopbackReference { sample: Sample, seconds: f64, max_transfers: u64 },
    /// Requests/s of a trivial hyper server returning a static body the size of `sample`.
    TrivialServerReference {
        sample: Sample,
        concurrency: usize,
        seconds: f64,
        max_requests: u64,
        #[serde(default)]
        protocol: Protocol,
    },
    /// kache's RSS against the encoded size of what it caches, after `settle_seconds`.
    Memory { settle_seconds: f64 },
}

impl Phase {
    /// Whether the phase PATCHes pods (through the upstream or the target).
    pub fn writes(&self) -> bool {
        match self {
            Phase::Writes { .. } => true,
            Phase::Kubelets { patch_rate, .. } | Phase::Informers { patch_rate, .. } => *patch_rate > 0.0,
            _ => false,
        }
    }

    /// The phase's `kind`, as the scenario file names it.
    pub fn kind(&self) -> &'static str {
        match self {
            Phase::List { .. } => "list",
            Phase::Kubelets { .. } => "kubelets",
            Phase::Informers { .. } => "informers",
            Phase::Writes { .. } => "writes",
            Phase::LoopbackReference { .. } => "loopback_reference",
            Phase::TrivialServerReference { .. } => "trivial_server_reference",
            Phase::Memory { .. } => "memory",
        }
    }

    /// Whether the phase runs once (not per target).
    pub fn is_reference(&self) -> bool {
        matches!(self, Phase::LoopbackReference { .. } | Phase::TrivialServerReference { .. } | Phase::Memory { .. })
    }
}

/// Read and check a scenario file.
pub fn load(path: &Path) -> anyhow::Result<Scenario> {
    let text = std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
    let s: Scenario = toml::from_str(&text).with_context(|| format!("parsing {}", path.display()))?;
    if s.name.is_empty() || !s.name.chars().all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_') {
        bail!("{}: name must be non-empty [A-Za-z0-9_-]", path.display());
    }
    if s.phases.is_empty() {
        bail!("{}: no [[phase]]", path.display());
    }
    for p in &s.phases {
        let (secs, count) = match p {
            Phase::List { seconds, max_requests, concurrency, .. } => {
                if concurrency.is_empty() || concurrency.iter().any(|&c| c == 0 || c > 4096) {
                    bail!("{}: concurrency must be 1..=4096", path.display());
                }
                (*seconds, *max_requests)
            }
            Phase::Kubelets { clients, watch_seconds, .. } | Phase::Informers { clients, watch_seconds, .. } => {
                (*watch_seconds, *clients as u64)
            }
            Phase::Writes { seconds, max_requests, .. } => (*seconds, *max_requests),
            Phase::LoopbackReference { seconds, max_transfers, .. } => (*seconds, *max_transfers),
            Phase::TrivialServerReference { seconds, max_requests, .. } => (*seconds, *max_requests),
            Phase::Memory { settle_seconds } => (*settle_seconds, 1),
        };
        if !(secs > 0.0 && secs <= 3600.0) || count == 0 {
            bail!("{}: every phase needs 0 < seconds <= 3600 and a non-zero count bound", path.display());
        }
    }
    Ok(s)
}

#[cfg(test)]
mod tests {
    #[test]
    fn every_scenario_file_loads() {
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("scenarios");
        let mut n = 0;
        for e in std::fs::read_dir(&dir).unwrap() {
            let p = e.unwrap().path();
            if p.extension().is_some_and(|x| x == "toml") {
                let s = super::load(&p).unwrap_or_else(|e| panic!("{}: {e:#}", p.display()));
                assert_eq!(p.file_stem().unwrap().to_str().unwrap(), s.name, "file name = scenario name");
                n += 1;
            }
        }
        assert!(n >= 6, "scenarios found: {n}");
    }
}
