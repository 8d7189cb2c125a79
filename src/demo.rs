//! `kache sim` and `kache demo`: start the simulated cluster on a listener, with churn and
//! periodic progress for bookmarks; the demo also writes a kubeconfig and prints commands.

use crate::cache::Limits;
use crate::config::{ClusterArgs, DemoArgs, SimArgs};
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
    tokio::spawn(server::serve(listener, sim.clone(), shutdown));
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

/// `kache demo`.
pub async fn run_demo(args: DemoArgs) -> Result<(), StartError> {
    let running = start_sim(&args.listen, None, &args.cluster, ctrl_c()).await?;
    let server = format!("http://{}", running.addr);
    std::fs::write(&args.kubeconfig, kubeconfig(&server, "kache-demo"))?;
    let kc = args.kubeconfig.display();
    let node = "node-0003";
    println!("kache demo: simulated cluster with {} nodes and {} pods at {server}", args.cluster.nodes, args.cluster.pods);
    println!("note: kache's cache is not in front yet (it lands with `kache serve`); clients talk to the simulator directly.");
    println!("kubeconfig written to {kc}. Try:");
    println!("  kubectl --kubeconfig {kc} get pods -A --field-selector spec.nodeName={node}");
    println!("  kubectl --kubeconfig {kc} get pods -A -w -o json");
    println!("  kubectl --kubeconfig {kc} get pods -A --chunk-size=500 -o name | wc -l");
    if args.seconds > 0 {
        tokio::time::sleep(Duration::from_secs(args.seconds)).await;
    } else {
        ctrl_c().await;
    }
    Ok(())
}
