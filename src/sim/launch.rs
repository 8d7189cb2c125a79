//! Starting the simulator: `kache sim` (the simulated cluster with churn and periodic
//! progress for bookmarks, optionally with TLS, users and RBAC) and `kache demo` (the
//! simulator with kache in front of it, a kubeconfig and commands to try).

use crate::app::{ctrl_c, kubeconfig, kubeconfig_with_ca, plain_upstream, serving_cert, start_admin, start_serve, terminated, StartError};
use crate::auth::tls;
use crate::cache::Limits;
use crate::config::{ClusterArgs, ConfigError, DemoArgs, SimArgs, SimAuthArgs};
use crate::serve::handler::WatchSettings;
use crate::serve::server::{self, ConnLimits};
use crate::sim::fault::{serve_control, FaultProxy};
use crate::sim::synth::ClusterSpec;
use crate::sim::{churn, leases, Sim, SimAuth, SimConfig};
use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

fn sim_config(c: &ClusterArgs, advertise: String) -> SimConfig {
    SimConfig {
        cluster: ClusterSpec { nodes: c.nodes, pods: c.pods, namespaces: c.namespaces, seed: c.seed, pod_bytes: c.pod_bytes },
        // The apiserver's watch cache is bounded by count (and time), not bytes: so is the
        // simulator's window.
        limits: Limits { window_events: c.window_events, window_bytes: 0, history: c.window_events.max(1024), ..Limits::default() },
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
    /// `http://addr` or `https://addr`.
    pub url: String,
    /// The certificate clients should trust, when it serves TLS.
    pub ca_pem: Option<String>,
}

/// Build the (open, plain-HTTP) simulator, bind, and serve until `shutdown` resolves.
pub async fn start_sim(
    listen: &str,
    addr_file: Option<&std::path::Path>,
    c: &ClusterArgs,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> Result<Running, StartError> {
    start_sim_with(listen, addr_file, c, &SimAuthArgs::default(), shutdown).await
}

/// Build the simulator with TLS, users and RBAC as `auth` says, bind, and serve until
/// `shutdown` resolves.
pub async fn start_sim_with(
    listen: &str,
    addr_file: Option<&std::path::Path>,
    c: &ClusterArgs,
    auth: &SimAuthArgs,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> Result<Running, StartError> {
    c.validate()?;
    crate::config::require_loopback(listen)?;
    crate::upstream::install_crypto_provider();
    let checks = if auth.auth_enabled() {
        Some(SimAuth::load(auth.users_file.as_deref(), auth.rbac_file.as_deref()).map_err(|e| {
            let files = [&auth.users_file, &auth.rbac_file].into_iter().flatten().map(|p| p.display().to_string()).collect::<Vec<_>>();
            ConfigError::new("--users-file/--rbac-file", files.join(","), e)
        })?)
    } else {
        None
    };
    let tls = if auth.tls_enabled() {
        let cert = serving_cert((&auth.tls_cert_file, &auth.tls_private_key_file), listen, &[], "kache-sim")?;
        let client_ca = auth.client_ca_file.as_deref().map(tls::load_certs).transpose()?;
        Some((Arc::new(arc_swap::ArcSwap::new(tls::server_config(&cert, client_ca.as_deref())?)), cert.ca_pem))
    } else {
        None
    };
    let started = std::time::Instant::now();
    let mut sim = Sim::new(sim_config(c, listen.to_string())).map_err(StartError::Sim)?;
    if let Some(checks) = checks {
        sim = sim.with_auth(checks);
    }
    let sim = Arc::new(sim);
    tracing::info!(
        pods = c.pods,
        nodes = c.nodes,
        rv = sim.resource_version(),
        seconds = started.elapsed().as_secs_f64(),
        "simulated cluster generated"
    );
    let (listener, addr) = server::bind(listen, addr_file).await.map_err(StartError::bind("--listen"))?;
    let ticker = sim.clone();
    let progress_notify = c.progress_notify_seconds;
    tokio::spawn(async move {
        let mut every = tokio::time::interval(Duration::from_secs(progress_notify));
        loop {
            every.tick().await;
            ticker.tick();
        }
    });
    tokio::spawn(churn(sim.clone(), c.churn_per_sec, c.seed));
    tokio::spawn(leases(sim.clone(), c.lease_churn_per_sec));
    let (config, ca_pem) = tls.map_or((None, None), |(c, ca)| (Some(c), Some(ca)));
    let url = format!("{}://{addr}", if config.is_some() { "https" } else { "http" });
    let limits = ConnLimits { max_streams: c.http2_max_streams, ..ConnLimits::default() };
    tokio::spawn(server::serve_with(listener, config, limits, sim.clone(), shutdown, Duration::from_secs(1)));
    if let Some(path) = &auth.kubeconfig_out {
        std::fs::write(path, kubeconfig_with_ca(&url, "kache-sim", ca_pem.as_deref())).map_err(StartError::write(path))?;
    }
    Ok(Running { sim, addr, url, ca_pem })
}

/// `kache sim`.
pub async fn run_sim(args: SimArgs) -> Result<(), StartError> {
    let Some(fault_listen) = &args.fault_listen else {
        let running = start_sim_with(&args.listen, args.addr_file.as_deref(), &args.cluster, &args.auth, ctrl_c()).await?;
        tracing::info!(url = %running.url, "kache sim listening");
        ctrl_c().await;
        return Ok(());
    };
    crate::config::require_loopback(fault_listen)?;
    crate::config::require_loopback(&args.listen)?;
    // The simulator on a port of its own, the relay where clients were told to connect.
    let mut auth = args.auth.clone();
    let kubeconfig_out = auth.kubeconfig_out.take();
    let running = start_sim_with("127.0.0.1:0", None, &args.cluster, &auth, ctrl_c()).await?;
    let proxy = FaultProxy::start(&args.listen, running.addr).await.map_err(StartError::bind("--listen"))?;
    if let Some(path) = &args.addr_file {
        std::fs::write(path, proxy.addr.to_string()).map_err(StartError::write(path))?;
    }
    let url = format!("{}://{}", if running.ca_pem.is_some() { "https" } else { "http" }, proxy.addr);
    if let Some(path) = &kubeconfig_out {
        std::fs::write(path, kubeconfig_with_ca(&url, "kache-sim", running.ca_pem.as_deref())).map_err(StartError::write(path))?;
    }
    let faults = serve_control(fault_listen, args.fault_addr_file.as_deref(), running.sim.clone(), Some(proxy))
        .await
        .map_err(StartError::bind("--fault-listen"))?;
    tracing::info!(url = %url, faults = %format!("http://{faults}"), "kache sim listening; fault switches ready");
    ctrl_c().await;
    Ok(())
}

/// `kache demo`: until SIGINT or SIGTERM, or for `--seconds` once it serves. Then kache
/// stops accepting, ends its watches (its clients' and those passed through) and lets other
/// requests finish; the simulator goes with the process.
pub async fn run_demo(args: DemoArgs) -> Result<(), StartError> {
    // Every flag checked before the simulated cluster is built and anything listens.
    args.cluster.validate()?;
    args.cache.validate()?;
    // Generating the cluster holds the thread; until it is done a signal's default action
    // ends the process (the handler below is installed only when first polled).
    let sim = start_sim("127.0.0.1:0", None, &args.cluster, std::future::pending()).await?;
    let signal = terminated();
    tokio::pin!(signal);
    let (stop, stopped) = tokio::sync::watch::channel(false);
    let shutdown = async move {
        let mut stopped = stopped;
        let _ = stopped.wait_for(|s| *s).await;
    };
    let (serving, admin) = tokio::select! {
        started = start_demo(&args, &sim, shutdown) => started?,
        // Nothing listens yet: there is nothing to drain.
        () = &mut signal => return Ok(()),
    };
    // kache serves from here on, its caches still syncing: a signal drains it.
    let ran = async {
        ready_demo(&args, &sim, &serving, admin).await?;
        match args.seconds {
            0 => std::future::pending().await,
            n => tokio::time::sleep(Duration::from_secs(n)).await,
        }
        Ok(())
    };
    let result = tokio::select! {
        r = ran => r,
        () = &mut signal => Ok(()),
    };
    stop.send_replace(true);
    let _ = serving.done.await;
    result
}

/// Start kache in front of `sim`, serving until `shutdown` resolves, and its admin listener
/// (its address). The simulator serves until the process ends, after kache has ended its
/// watches on it.
async fn start_demo(
    args: &DemoArgs,
    sim: &Running,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> Result<(crate::app::Serving, SocketAddr), StartError> {
    let upstream = plain_upstream(&format!("http://{}", sim.addr))?;
    crate::telemetry::install();
    let serving = start_serve(upstream, &args.listen, args.addr_file.as_deref(), &args.cache, shutdown, Duration::from_secs(5)).await?;
    let admin = start_admin(serving.serve.clone(), "127.0.0.1:0", None).await?;
    Ok((serving, admin))
}

/// Wait for kache's caches, write the kubeconfig and print what to try.
async fn ready_demo(args: &DemoArgs, sim: &Running, serving: &crate::app::Serving, admin: SocketAddr) -> Result<(), StartError> {
    serving.serve.wait_synced(Duration::from_secs(120)).await;
    let server = format!("http://{}", serving.addr);
    std::fs::write(&args.kubeconfig, kubeconfig(&server, "kache-demo")).map_err(StartError::write(&args.kubeconfig))?;
    let kc = args.kubeconfig.display();
    let node = "node-0003";
    println!("kache demo: simulated cluster with {} nodes and {} pods at http://{}", args.cluster.nodes, args.cluster.pods, sim.addr);
    println!("kache serving it from memory at {server}; kubeconfig written to {kc}. Try:");
    println!("  kubectl --kubeconfig {kc} get pods -A --field-selector spec.nodeName={node}");
    println!("  kubectl --kubeconfig {kc} get pods -A -w -o json");
    println!("  kubectl --kubeconfig {kc} get pods -A --chunk-size=500 -o name | wc -l");
    println!("metrics: curl http://{admin}/metrics   readiness: curl 'http://{admin}/readyz?verbose'");
    Ok(())
}

#[cfg(test)]
mod tests {
    //! The app driven without a socket: a `Request` in, a `Response` out, as axum's
    //! `oneshot` does (the handler is generic over the request body).
    use super::*;
    use crate::serve::server::Handler;
    use bytes::Bytes;
    use http::{Request, StatusCode};
    use http_body_util::{BodyExt, Full};

    fn sim() -> Arc<Sim> {
        let cluster = ClusterSpec { nodes: 2, pods: 6, namespaces: 2, seed: 7, pod_bytes: None };
        let cfg = SimConfig { cluster, limits: Limits::default(), watch: WatchSettings::default(), advertise: "127.0.0.1:1".into() };
        Arc::new(Sim::new(cfg).expect("simulator builds"))
    }

    async fn call(sim: &Arc<Sim>, method: &str, path: &str, body: &str) -> (StatusCode, serde_json::Value) {
        let req = Request::builder()
            .method(method)
            .uri(path)
            .header("content-type", "application/json")
            .body(Full::new(Bytes::from(body.to_string())))
            .expect("request");
        let resp = sim.clone().handle(req).await;
        let status = resp.status();
        let bytes = resp.into_body().collect().await.expect("body").to_bytes();
        (status, serde_json::from_slice(&bytes).expect("JSON"))
    }

    #[tokio::test]
    async fn a_request_in_a_response_out_create_then_read_and_bad_input_is_a_status() {
        let sim = sim();
        let cm = r#"{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"c1","namespace":"default"},"data":{"k":"v"}}"#;
        let (code, created) = call(&sim, "POST", "/api/v1/namespaces/default/configmaps", cm).await;
        assert_eq!(code, StatusCode::CREATED);
        let (code, got) = call(&sim, "GET", "/api/v1/namespaces/default/configmaps/c1", "").await;
        assert_eq!(code, StatusCode::OK);
        assert_eq!(got["metadata"]["resourceVersion"], created["metadata"]["resourceVersion"]);
        let (code, list) = call(&sim, "GET", "/api/v1/configmaps?labelSelector=a%20in%20(", "").await;
        assert_eq!(code, StatusCode::BAD_REQUEST, "{list}");
        assert_eq!(list["kind"], "Status");
        let (code, missing) = call(&sim, "GET", "/api/v1/namespaces/default/configmaps/nope", "").await;
        assert_eq!(code, StatusCode::NOT_FOUND);
        assert_eq!(missing["message"], r#"configmaps "nope" not found"#);
    }
}
