//! `kache sim` and `kache demo`: the simulated apiserver's cluster, TLS, users and RBAC.
//! Their flags follow the naming rule of [`super`].

use super::value::{bytes_usize, seconds, seconds_text};
use super::{at_least, at_least_seconds, CacheArgs, ConfigError};
use clap::Args;
use std::path::PathBuf;

/// Simulator TLS, users and RBAC. Without a users, RBAC or client CA file the simulator is
/// open: every request is allowed, as before.
#[derive(Debug, Clone, Args, Default)]
pub struct SimAuthArgs {
    /// Users: YAML or JSON `tokens: {TOKEN: {username, uid, groups, extra, expiresAt}}`.
    /// Client-certificate users are their CN, in the groups of their O.
    #[arg(long, env = "KACHE_SIM_USERS_FILE")]
    pub users_file: Option<PathBuf>,
    /// RBAC: YAML or JSON `rules: [{users, groups, verbs, apiGroups, resources,
    /// resourceNames, namespaces, nonResourceURLs, fieldSelector}]`; `system:masters` may do
    /// anything.
    #[arg(long, env = "KACHE_SIM_RBAC_FILE")]
    pub rbac_file: Option<PathBuf>,
    /// Serve TLS with a certificate generated at start (implied by the other TLS flags).
    #[arg(long, env = "KACHE_SIM_TLS")]
    pub tls: bool,
    /// PEM certificate chain to serve.
    #[arg(long, env = "KACHE_SIM_TLS_CERT_FILE", requires = "tls_private_key_file")]
    pub tls_cert_file: Option<PathBuf>,
    /// PEM private key of --tls-cert-file.
    #[arg(long, env = "KACHE_SIM_TLS_PRIVATE_KEY_FILE", requires = "tls_cert_file")]
    pub tls_private_key_file: Option<PathBuf>,
    /// PEM CA bundle client certificates are verified against (implies TLS).
    #[arg(long, env = "KACHE_SIM_CLIENT_CA_FILE")]
    pub client_ca_file: Option<PathBuf>,
    /// Write a kubeconfig for the simulator (server URL and CA; no user) to this file.
    #[arg(long, env = "KACHE_SIM_KUBECONFIG_OUT")]
    pub kubeconfig_out: Option<PathBuf>,
}

impl SimAuthArgs {
    /// Whether the simulator serves TLS.
    pub fn tls_enabled(&self) -> bool {
        self.tls || self.tls_cert_file.is_some() || self.client_ca_file.is_some()
    }

    /// Whether the simulator authenticates and authorizes requests.
    pub fn auth_enabled(&self) -> bool {
        self.users_file.is_some() || self.rbac_file.is_some() || self.client_ca_file.is_some()
    }
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
    /// Pad each pod's JSON to about this size.
    #[arg(long = "pod-size", alias = "pod-bytes", env = "KACHE_SIM_POD_BYTES", value_parser = bytes_usize, value_name = "SIZE")]
    pub pod_bytes: Option<usize>,
    /// Lease renewals per second: writes that move the global resourceVersion without
    /// touching any kind served, as a real cluster's node and controller leases do (0 = none).
    #[arg(long, env = "KACHE_SIM_LEASE_CHURN_PER_SEC", default_value_t = 10.0)]
    pub lease_churn_per_sec: f64,
    /// How often simulated etcd progress notifications move every kind's watch cache to the
    /// global resourceVersion.
    #[arg(
        long = "progress-notify-interval",
        alias = "progress-notify-seconds",
        env = "KACHE_SIM_PROGRESS_NOTIFY_SECONDS",
        value_parser = seconds,
        default_value = seconds_text(60),
        value_name = "DURATION"
    )]
    pub progress_notify_seconds: u64,
    /// Pod updates, creates and deletes per second (0 = none).
    #[arg(long, env = "KACHE_SIM_CHURN_PER_SEC", default_value_t = 0.0)]
    pub churn_per_sec: f64,
    /// Events each kind keeps for watches to resume from; older RVs get 410 Expired.
    #[arg(long, env = "KACHE_WINDOW_EVENTS", default_value_t = 10_000)]
    pub window_events: usize,
    /// How often watches get a bookmark.
    #[arg(
        long = "bookmark-interval",
        alias = "bookmark-interval-seconds",
        env = "KACHE_BOOKMARK_INTERVAL_SECONDS",
        value_parser = seconds,
        default_value = seconds_text(60),
        value_name = "DURATION"
    )]
    pub bookmark_interval_seconds: u64,
    /// Concurrent HTTP/2 streams one client connection may carry (the kube-apiserver's
    /// `--http2-max-streams-per-connection`, 100 by default).
    #[arg(
        id = "sim_http2_max_streams",
        long = "http2-max-streams-per-connection",
        env = "KACHE_SIM_HTTP2_MAX_STREAMS_PER_CONNECTION",
        default_value_t = 100
    )]
    pub http2_max_streams: u32,
}

impl ClusterArgs {
    /// Check values that clap's types do not.
    pub fn validate(&self) -> Result<(), ConfigError> {
        at_least("--nodes", self.nodes as u64, 1)?;
        if !(0.0..=100_000.0).contains(&self.churn_per_sec) || self.churn_per_sec.is_nan() {
            return Err(ConfigError::new("--churn-per-sec", self.churn_per_sec, "must be between 0 and 100000"));
        }
        at_least("--window-events", self.window_events as u64, 1)?;
        at_least_seconds("--progress-notify-interval", self.progress_notify_seconds, 1)?;
        if !(0.0..=100_000.0).contains(&self.lease_churn_per_sec) || self.lease_churn_per_sec.is_nan() {
            return Err(ConfigError::new("--lease-churn-per-sec", self.lease_churn_per_sec, "must be between 0 and 100000"));
        }
        at_least("--http2-max-streams-per-connection", self.http2_max_streams, 1)?;
        at_least_seconds("--bookmark-interval", self.bookmark_interval_seconds, 1)
    }
}

/// `kache sim`.
#[derive(Debug, Clone, Args)]
pub struct SimArgs {
    /// Address to listen on (loopback only; port 0 picks a free port).
    #[arg(long, env = "KACHE_SIM_LISTEN", default_value = "127.0.0.1:0")]
    pub listen: String,
    /// Write the bound address (`host:port`) to this file once listening.
    #[arg(long, env = "KACHE_SIM_ADDR_FILE")]
    pub addr_file: Option<PathBuf>,
    /// Serve fault switches on this address (loopback only): POST /pause, /resume, /drop,
    /// /down, /up, /restart?warmup_ms=N, /slow?ms=N[&health=1]. The simulator then sits behind a
    /// relay on --listen that the switches pause, cut and take down.
    #[arg(long, env = "KACHE_SIM_FAULT_LISTEN")]
    pub fault_listen: Option<String>,
    /// Write the fault endpoint's bound address to this file.
    #[arg(long, env = "KACHE_SIM_FAULT_ADDR_FILE")]
    pub fault_addr_file: Option<PathBuf>,
    /// The synthetic cluster.
    #[command(flatten)]
    pub cluster: ClusterArgs,
    /// TLS, users and RBAC.
    #[command(flatten)]
    pub auth: SimAuthArgs,
}

/// Pod changes per second of the demo's cluster unless `--churn-per-sec` says otherwise: a
/// watch through the demo shows a few changes a second.
pub const DEMO_CHURN_PER_SEC: &str = "3";

/// `kache demo`.
#[derive(Debug, Clone, Args)]
#[command(mut_arg("churn_per_sec", |a| a.default_value(DEMO_CHURN_PER_SEC)))]
pub struct DemoArgs {
    /// Address to listen on.
    #[arg(long, env = "KACHE_DEMO_LISTEN", default_value = "127.0.0.1:0")]
    pub listen: String,
    /// Write kache's bound address (`host:port`) to this file once it listens.
    #[arg(long, env = "KACHE_DEMO_ADDR_FILE")]
    pub addr_file: Option<PathBuf>,
    /// Where to write the kubeconfig for clients.
    #[arg(long, env = "KACHE_DEMO_KUBECONFIG", default_value = "kache-demo.kubeconfig")]
    pub kubeconfig: PathBuf,
    /// Exit after this long (0: run until interrupted).
    #[arg(
        long = "exit-after",
        alias = "seconds",
        env = "KACHE_DEMO_SECONDS",
        value_parser = seconds,
        default_value = seconds_text(0),
        value_name = "DURATION"
    )]
    pub seconds: u64,
    /// The synthetic cluster.
    #[command(flatten)]
    pub cluster: ClusterArgs,
    /// Cache settings of the kache in front of it.
    #[command(flatten)]
    pub cache: CacheArgs,
}
