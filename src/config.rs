//! Command-line configuration. Every flag can also be set by a `KACHE_...` environment
//! variable; everything is validated before a port is bound.

use clap::{Args, Parser, Subcommand};
use std::path::PathBuf;

/// kache: a watch cache and read proxy for the Kubernetes API.
#[derive(Debug, Parser)]
#[command(name = "kache", version, about)]
pub struct Cli {
    /// What to run.
    #[command(subcommand)]
    pub command: Command,
    /// Log filter (tracing env-filter syntax, e.g. `info` or `kache=debug`).
    #[arg(long, global = true, env = "KACHE_LOG_LEVEL", default_value = "info")]
    pub log_level: String,
    /// Log format.
    #[arg(long, global = true, env = "KACHE_LOG_FORMAT", value_parser = ["text", "json"], default_value = "text")]
    pub log_format: String,
}

/// Subcommands.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Run a simulated kube-apiserver holding a synthetic cluster.
    Sim(SimArgs),
    /// Run the simulated cluster and print commands to try against it.
    Demo(DemoArgs),
}

/// The synthetic cluster and simulator settings.
#[derive(Debug, Clone, Args)]
pub struct ClusterArgs {
    /// Number of nodes.
    #[arg(long, env = "KACHE_SIM_NODES", default_value_t = 100)]
    pub nodes: usize,
    /// Number of pods at start.
    #[arg(long, env = "KACHE_SIM_PODS", default_value_t = 3000)]
    pub pods: usize,
    /// Number of namespaces (including default and kube-system).
    #[arg(long, env = "KACHE_SIM_NAMESPACES", default_value_t = 10)]
    pub namespaces: usize,
    /// Seed of the generated cluster.
    #[arg(long, env = "KACHE_SIM_SEED", default_value_t = 1)]
    pub seed: u64,
    /// Pad each pod's JSON to about this many bytes.
    #[arg(long, env = "KACHE_SIM_POD_BYTES")]
    pub pod_bytes: Option<usize>,
    /// Pod updates, creates and deletes per second (0 = none).
    #[arg(long, env = "KACHE_SIM_CHURN_PER_SEC", default_value_t = 0.0)]
    pub churn_per_sec: f64,
    /// Events each kind keeps for watches to resume from; older RVs get 410 Expired.
    #[arg(long, env = "KACHE_WINDOW_EVENTS", default_value_t = 10_000)]
    pub window_events: usize,
    /// Seconds between periodic watch bookmarks.
    #[arg(long, env = "KACHE_BOOKMARK_INTERVAL_SECONDS", default_value_t = 60)]
    pub bookmark_interval_seconds: u64,
}

impl ClusterArgs {
    /// Check values that clap's types do not.
    pub fn validate(&self) -> Result<(), String> {
        if self.nodes == 0 {
            return Err("--nodes must be at least 1".into());
        }
        if !(0.0..=100_000.0).contains(&self.churn_per_sec) || self.churn_per_sec.is_nan() {
            return Err(format!("--churn-per-sec must be between 0 and 100000, got {}", self.churn_per_sec));
        }
        if self.window_events == 0 {
            return Err("--window-events must be at least 1".into());
        }
        if self.bookmark_interval_seconds == 0 {
            return Err("--bookmark-interval-seconds must be at least 1".into());
        }
        Ok(())
    }
}

/// `kache sim`.
#[derive(Debug, Clone, Args)]
pub struct SimArgs {
    /// Address to listen on (plain HTTP; port 0 picks a free port).
    #[arg(long, env = "KACHE_SIM_LISTEN", default_value = "127.0.0.1:0")]
    pub listen: String,
    /// Write the bound address (`host:port`) to this file once listening.
    #[arg(long, env = "KACHE_SIM_ADDR_FILE")]
    pub addr_file: Option<PathBuf>,
    /// The synthetic cluster.
    #[command(flatten)]
    pub cluster: ClusterArgs,
}

/// `kache demo`.
#[derive(Debug, Clone, Args)]
pub struct DemoArgs {
    /// Address to listen on.
    #[arg(long, env = "KACHE_DEMO_LISTEN", default_value = "127.0.0.1:0")]
    pub listen: String,
    /// Where to write the kubeconfig for clients.
    #[arg(long, env = "KACHE_DEMO_KUBECONFIG", default_value = "kache-demo.kubeconfig")]
    pub kubeconfig: PathBuf,
    /// Exit after this many seconds (0 = run until interrupted).
    #[arg(long, env = "KACHE_DEMO_SECONDS", default_value_t = 0)]
    pub seconds: u64,
    /// The synthetic cluster.
    #[command(flatten)]
    pub cluster: ClusterArgs,
}

/// Reject a listen address that is not loopback: kache serves plain HTTP only there.
pub fn require_loopback(listen: &str) -> Result<(), String> {
    let addr: std::net::SocketAddr = listen.parse().map_err(|e| format!("--listen {listen:?}: {e}"))?;
    if addr.ip().is_loopback() {
        Ok(())
    } else {
        Err(format!("--listen {listen}: plain HTTP is only served on a loopback address"))
    }
}
