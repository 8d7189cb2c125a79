//! Starting kache's servers from their arguments: `kache sim` (the simulated cluster with
//! churn and periodic progress for bookmarks), `kache serve` (the cache in front of an
//! upstream), and `kache demo` (both, with a kubeconfig and commands to try).

use crate::cache::Limits;
use crate::config::{CacheArgs, ClusterArgs, DemoArgs, ServeArgs, SimArgs};
use crate::query::Format;
use crate::serve::{Serve, ServeSettings};
use crate::upstream::Upstream;
use crate::handler::WatchSettings;
use crate::server;
use crate::sim::{churn, Sim, SimConfig};
use crate::synth::ClusterSpec;
use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

/// Errors starting the simulator.
#[derive(Debug, thiserror::Error)]
pub enum StartError {
    /// A flag has an invalid value.
    #[error("{0}")]
    Config(String),
    /// The listener could not be bound or the address file written.
    #[error("cannot listen: {0}")]
    Io(#[from] std::io::Error),
    /// The synthetic cluster could not be encoded.
    #[error("cannot build the simulated cluster: {0}")]
    Sim(String),
    /// The upstream could not be configured or discovered.
    #[error("upstream: {0}")]
    Upstream(String),
}

fn sim_config(c: &ClusterArgs, advertise: String) -> SimConfig {
    SimConfig {
        cluster: ClusterSpec { nodes: c.nodes, pods: c.pods, namespaces: c.namespaces, seed: c.seed, pod_bytes: c.pod_bytes },
        limits: Limits { window_events: c.window_events, ..Limits::default() },
        watch: WatchSettings { bookmark_interval: Duration::from_secs(c.bookmark_interval_seconds), ..WatchSettings::default() },
        advertise,
    }
}

/// A running simulator.
pub struct Running {
    /// The simulator.
    pub sim: Arc<Sim>,
    /// Where it listens.
    pub addr: SocketAddr,
}

/// Build the simulator, bind, and serve until `shutdown` resolves.
pub async fn start_sim(
    listen: &str,
    addr_file: Option<&std::path::Path>,
    c: &ClusterArgs,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> Result<Running, StartError> {
    c.validate().map_err(StartError::Config)?;
    crate::config::require_loopback(listen).map_err(StartError::Config)?;
    let started = std::time::Instant::now();
    let sim = Arc::new(Sim::new(sim_config(c, listen.to_string())).map_err(|s| StartError::Sim(s.message))?);
    tracing::info!(pods = c.pods, nodes = c.nodes, rv = sim.resource_version(), seconds = started.elapsed().as_secs_f64(), "simulated cluster generated");
    let (listener, addr) = server::bind(listen, addr_file).await?;
    let ticker = sim.clone();
    tokio::spawn(async move {
        let mut every = tokio::time::interval(Duration::from_secs(1));
        loop {
            every.tick().await;
            ticker.tick();
        }
    });
    tokio::spawn(churn(sim.clone(), c.churn_per_sec, c.seed));
    tokio::spawn(server::serve(listener, sim.clone(), shutdown, Duration::from_secs(1)));
    Ok(Running { sim, addr })
}

/// `kache sim`.
pub async fn run_sim(args: SimArgs) -> Result<(), StartError> {
    let running = start_sim(&args.listen, args.addr_file.as_deref(), &args.cluster, ctrl_c()).await?;
    println!("kache sim listening on http://{}", running.addr);
    ctrl_c().await;
    Ok(())
}

async fn ctrl_c() {
    let _ = tokio::signal::ctrl_c().await;
}

/// A kubeconfig for a plain-HTTP server.
pub fn kubeconfig(server: &str, name: &str) -> String {
    format!(
        "apiVersion: v1\nkind: Config\nclusters:\n- name: {name}\n  cluster:\n    server: {server}\ncontexts:\n- name: {name}\n  context:\n    cluster: {name}\n    user: {name}\ncurrent-context: {name}\nusers:\n- name: {name}\n  user: {{}}\n"
    )
}

fn serve_settings(c: &CacheArgs) -> ServeSettings {
    let fmt = |s: &String| if s == "protobuf" { Format::Protobuf } else { Format::Json };
    ServeSettings {
        limits: Limits { window_events: c.window_events, history: c.snapshot_history, watcher_lag: c.watcher_lag },
        watch: WatchSettings { bookmark_interval: Duration::from_secs(c.bookmark_interval_seconds), ..WatchSettings::default() },
        consistent_wait: Duration::from_millis(c.consistent_wait_ms),
        preload: c.preload.clone(),
        preload_formats: c.preload_encodings.iter().map(fmt).collect(),
    }
}

/// A running `kache serve`.
pub struct Serving {
    /// The serving cache.
    pub serve: Arc<Serve>,
    /// Where it listens.
    pub addr: SocketAddr,
    /// Ends when the server has shut down (after `shutdown` and the grace period).
    pub done: tokio::task::JoinHandle<()>,
}

/// Start kache in front of `upstream`: discover, start preloaded informers, bind and serve
/// (requests for caches still syncing pass through meanwhile). When `shutdown` resolves,
/// kache stops accepting, ends open watches so clients resume elsewhere, and lets in-flight
/// requests finish for up to `grace`.
pub async fn start_serve(
    upstream: Upstream,
    listen: &str,
    addr_file: Option<&std::path::Path>,
    c: &CacheArgs,
    shutdown: impl Future<Output = ()> + Send + 'static,
    grace: Duration,
) -> Result<Serving, StartError> {
    c.validate().map_err(StartError::Config)?;
    crate::config::require_loopback(listen).map_err(StartError::Config)?;
    let serve = Serve::start(upstream, serve_settings(c)).await.map_err(|e| StartError::Upstream(e.to_string()))?;
    let (listener, addr) = server::bind(listen, addr_file).await?;
    let ending = serve.clone();
    let shutdown = async move {
        shutdown.await;
        tracing::info!("shutting down: no new connections, ending watches, finishing requests");
        ending.end_watches();
    };
    let done = tokio::spawn(server::serve(listener, serve.clone(), shutdown, grace));
    Ok(Serving { serve, addr, done })
}

/// Start the admin listener for `serve`.
pub async fn start_admin(serve: Arc<Serve>, listen: &str, addr_file: Option<&std::path::Path>) -> Result<SocketAddr, StartError> {
    let admin = Arc::new(crate::admin::Admin { serve, prometheus: crate::telemetry::install() });
    let (listener, addr) = server::bind(listen, addr_file).await?;
    tokio::spawn(server::serve(listener, admin, std::future::pending::<()>(), Duration::ZERO));
    Ok(addr)
}

/// Resolves on SIGTERM or SIGINT.
pub async fn terminated() {
    #[cfg(unix)]
    {
        if let Ok(mut term) = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            tokio::select! {
                _ = term.recv() => {}
                _ = ctrl_c() => {}
            }
            return;
        }
    }
    ctrl_c().await;
}

/// `kache serve`.
pub async fn run_serve(args: ServeArgs) -> Result<(), StartError> {
    if !args.insecure_http {
        return Err(StartError::Config("TLS serving is not available yet: pass --insecure-http to serve plain HTTP on a loopback address".into()));
    }
    crate::telemetry::install();
    let upstream = Upstream::load(args.upstream_kubeconfig.as_deref(), args.upstream_context.as_deref()).await.map_err(|e| StartError::Upstream(e.to_string()))?;
    let grace = Duration::from_secs(args.shutdown_grace_seconds);
    let serving = start_serve(upstream, &args.listen, args.addr_file.as_deref(), &args.cache, terminated(), grace).await?;
    if let Some(admin) = &args.admin_listen {
        let addr = start_admin(serving.serve.clone(), admin, args.admin_addr_file.as_deref()).await?;
        println!("kache admin on http://{addr}");
    }
    let server = format!("http://{}", serving.addr);
    if let Some(path) = &args.client_kubeconfig_out {
        std::fs::write(path, kubeconfig(&server, "kache"))?;
    }
    println!("kache serving on {server}");
    let _ = serving.done.await;
    Ok(())
}

/// An upstream client for a plain-HTTP server URL (the simulator).
pub fn plain_upstream(url: &str) -> Result<Upstream, StartError> {
    let uri = url.parse().map_err(|e| StartError::Upstream(format!("{url}: {e}")))?;
    Upstream::new(&kube::Config::new(uri)).map_err(|e| StartError::Upstream(e.to_string()))
}

/// `kache demo`.
pub async fn run_demo(args: DemoArgs) -> Result<(), StartError> {
    let sim = start_sim("127.0.0.1:0", None, &args.cluster, ctrl_c()).await?;
    let upstream = plain_upstream(&format!("http://{}", sim.addr))?;
    crate::telemetry::install();
    let serving = start_serve(upstream, &args.listen, None, &args.cache, ctrl_c(), Duration::from_secs(5)).await?;
    let admin = start_admin(serving.serve.clone(), "127.0.0.1:0", None).await?;
    serving.serve.wait_synced(Duration::from_secs(120)).await;
    let server = format!("http://{}", serving.addr);
    std::fs::write(&args.kubeconfig, kubeconfig(&server, "kache-demo"))?;
    let kc = args.kubeconfig.display();
    let node = "node-0003";
    println!("kache demo: simulated cluster with {} nodes and {} pods at http://{}", args.cluster.nodes, args.cluster.pods, sim.addr);
    println!("kache serving it from memory at {server}; kubeconfig written to {kc}. Try:");
    println!("  kubectl --kubeconfig {kc} get pods -A --field-selector spec.nodeName={node}");
    println!("  kubectl --kubeconfig {kc} get pods -A -w -o json");
    println!("  kubectl --kubeconfig {kc} get pods -A --chunk-size=500 -o name | wc -l");
    println!("metrics: curl http://{admin}/metrics   readiness: curl 'http://{admin}/readyz?verbose'");
    if args.seconds > 0 {
        tokio::time::sleep(Duration::from_secs(args.seconds)).await;
    } else {
        ctrl_c().await;
    }
    Ok(())
}
