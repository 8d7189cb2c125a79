//! Starting kache's servers from their arguments: `kache sim` (the simulated cluster with
//! churn and periodic progress for bookmarks, optionally with TLS, users and RBAC),
//! `kache serve` (the cache in front of an upstream: TLS, authentication and authorization
//! unless told otherwise), and `kache demo` (both, with a kubeconfig and commands to try).

use crate::auth::authn::AuthnSettings;
use crate::auth::authz::AuthzSettings;
use crate::auth::tls::{self, ServingCert, TlsError};
use crate::auth::{Passthrough, Security, SecuritySettings};
use crate::cache::Limits;
use crate::config::{CacheArgs, ClusterArgs, DemoArgs, SecurityArgs, ServeArgs, SimArgs, SimAuthArgs};
use crate::limit::InflightLimits;
use crate::server::ConnLimits;
use crate::query::Format;
use crate::serve::{Serve, ServeSettings};
use crate::upstream::Upstream;
use crate::handler::WatchSettings;
use crate::server;
use crate::sim::{churn, Sim, SimAuth, SimConfig};
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
    /// The serving certificate, its key or a client CA could not be used.
    #[error("TLS: {0}")]
    Tls(#[from] TlsError),
}

fn sim_config(c: &ClusterArgs, advertise: String) -> SimConfig {
    SimConfig {
        cluster: ClusterSpec { nodes: c.nodes, pods: c.pods, namespaces: c.namespaces, seed: c.seed, pod_bytes: c.pod_bytes },
        limits: Limits { window_events: c.window_events, history: c.window_events.max(1024), ..Limits::default() },
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

/// The serving certificate for `listen`: the given files, or generated (for `extra` names
/// too).
fn serving_cert(files: (&Option<std::path::PathBuf>, &Option<std::path::PathBuf>), listen: &str, extra: &[String], name: &str) -> Result<ServingCert, StartError> {
    Ok(match files {
        (Some(cert), Some(key)) => ServingCert::load(cert, key)?,
        _ => {
            let mut hosts = ServingCert::hosts_for(listen);
            hosts.extend(extra.iter().filter(|h| !h.is_empty()).cloned());
            ServingCert::self_signed(&hosts, name)?
        }
    })
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
    c.validate().map_err(StartError::Config)?;
    crate::config::require_loopback(listen).map_err(StartError::Config)?;
    crate::upstream::install_crypto_provider();
    let checks = if auth.auth_enabled() { Some(SimAuth::load(auth.users_file.as_deref(), auth.rbac_file.as_deref()).map_err(StartError::Config)?) } else { None };
    let tls = if auth.tls_enabled() {
        let cert = serving_cert((&auth.tls_cert_file, &auth.tls_private_key_file), listen, &[], "kache-sim")?;
        let client_ca = auth.client_ca_file.as_deref().map(tls::load_certs).transpose()?;
        Some((tls::server_config(&cert, client_ca.as_deref())?, cert.ca_pem))
    } else {
        None
    };
    let started = std::time::Instant::now();
    let mut sim = Sim::new(sim_config(c, listen.to_string())).map_err(|s| StartError::Sim(s.message))?;
    if let Some(checks) = checks {
        sim = sim.with_auth(checks);
    }
    let sim = Arc::new(sim);
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
    let (config, ca_pem) = tls.map_or((None, None), |(c, ca)| (Some(c), Some(ca)));
    let url = format!("{}://{addr}", if config.is_some() { "https" } else { "http" });
    tokio::spawn(server::serve_with(listener, config, ConnLimits::default(), sim.clone(), shutdown, Duration::from_secs(1)));
    if let Some(path) = &auth.kubeconfig_out {
        std::fs::write(path, kubeconfig_with_ca(&url, "kache-sim", ca_pem.as_deref()))?;
    }
    Ok(Running { sim, addr, url, ca_pem })
}

/// `kache sim`.
pub async fn run_sim(args: SimArgs) -> Result<(), StartError> {
    let running = start_sim_with(&args.listen, args.addr_file.as_deref(), &args.cluster, &args.auth, ctrl_c()).await?;
    println!("kache sim listening on {}", running.url);
    ctrl_c().await;
    Ok(())
}

async fn ctrl_c() {
    let _ = tokio::signal::ctrl_c().await;
}

/// A kubeconfig for a plain-HTTP server.
pub fn kubeconfig(server: &str, name: &str) -> String {
    kubeconfig_with_ca(server, name, None)
}

/// A kubeconfig for `server`, trusting `ca_pem` if given; no user credentials (clients add
/// a token or a client certificate).
pub fn kubeconfig_with_ca(server: &str, name: &str, ca_pem: Option<&str>) -> String {
    use base64::Engine;
    let ca = ca_pem.map(|p| format!("\n    certificate-authority-data: {}", base64::engine::general_purpose::STANDARD.encode(p))).unwrap_or_default();
    format!(
        "apiVersion: v1\nkind: Config\nclusters:\n- name: {name}\n  cluster:\n    server: {server}{ca}\ncontexts:\n- name: {name}\n  context:\n    cluster: {name}\n    user: {name}\ncurrent-context: {name}\nusers:\n- name: {name}\n  user: {{}}\n"
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
        security: None,
        inflight: InflightLimits { global: 4000, per_user: 400 },
        max_uri_bytes: 64 * 1024,
    }
}

/// A running `kache serve`.
pub struct Serving {
    /// The serving cache.
    pub serve: Arc<Serve>,
    /// Where it listens.
    pub addr: SocketAddr,
    /// `https://addr`, or `http://addr` with `--insecure-http`.
    pub url: String,
    /// The certificate clients should trust (the generated CA, or the top of the given chain).
    pub ca_pem: Option<String>,
    /// Ends when the server has shut down (after `shutdown` and the grace period).
    pub done: tokio::task::JoinHandle<()>,
}

/// Start kache in front of `upstream` over plain HTTP on loopback, with no authentication
/// or authorization (every client acts with kache's rights): for tests and the demo.
/// Discover, start preloaded informers, bind and serve (requests for caches still syncing
/// pass through meanwhile). When `shutdown` resolves, kache stops accepting, ends open
/// watches so clients resume elsewhere, and lets in-flight requests finish for up to `grace`.
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
    launch(upstream, listen, addr_file, serve_settings(c), None, ConnLimits::default(), shutdown, grace).await
}

/// The security settings of `kache serve`'s flags.
fn security_settings(s: &SecurityArgs) -> SecuritySettings {
    SecuritySettings {
        authn: AuthnSettings {
            allow_anonymous: s.allow_anonymous,
            token_ttl: Duration::from_secs(s.token_cache_ttl_seconds),
            negative_ttl: Duration::from_secs(s.token_cache_negative_ttl_seconds),
            cache_entries: s.auth_cache_entries,
        },
        authz: AuthzSettings {
            allow_ttl: Duration::from_secs(s.authz_cache_allow_ttl_seconds),
            deny_ttl: Duration::from_secs(s.authz_cache_deny_ttl_seconds),
            cache_entries: s.auth_cache_entries,
        },
        passthrough: if s.passthrough_auth == "forward" { Passthrough::Forward } else { Passthrough::Impersonate },
    }
}

/// Start `kache serve` as its flags say: TLS (given or generated certificate, client
/// certificates if `--client-ca-file`) unless `--insecure-http` (loopback only), clients
/// authenticated and cached reads authorized against `upstream`, the limits applied, and
/// `--client-kubeconfig-out` written. Serves until `shutdown` resolves (then as
/// [`start_serve`]).
pub async fn start_serve_args(upstream: Upstream, args: &ServeArgs, shutdown: impl Future<Output = ()> + Send + 'static) -> Result<Serving, StartError> {
    args.cache.validate().map_err(StartError::Config)?;
    let s = &args.security;
    s.validate().map_err(StartError::Config)?;
    if args.insecure_http {
        crate::config::require_loopback(&args.listen).map_err(StartError::Config)?;
    }
    crate::upstream::install_crypto_provider();
    let tls = if args.insecure_http {
        None
    } else {
        let cert = serving_cert((&s.tls_cert_file, &s.tls_private_key_file), &args.listen, &s.tls_sans, "kache")?;
        let client_ca = s.client_ca_file.as_deref().map(tls::load_certs).transpose()?;
        Some((tls::server_config(&cert, client_ca.as_deref())?, cert.ca_pem))
    };
    let mut settings = serve_settings(&args.cache);
    settings.security = Some(Arc::new(Security::new(upstream.clone(), security_settings(s))));
    settings.inflight = InflightLimits { global: s.max_inflight_reads, per_user: s.max_inflight_reads_per_user };
    settings.max_uri_bytes = s.max_uri_bytes;
    let limits = ConnLimits {
        max_header_bytes: s.max_header_bytes,
        header_read_timeout: Duration::from_secs(s.header_read_timeout_seconds),
        tls_handshake_timeout: Duration::from_secs(s.header_read_timeout_seconds),
        max_streams: s.http2_max_streams_per_connection,
    };
    let grace = Duration::from_secs(args.shutdown_grace_seconds);
    let serving = launch(upstream, &args.listen, args.addr_file.as_deref(), settings, tls, limits, shutdown, grace).await?;
    if let Some(path) = &args.client_kubeconfig_out {
        std::fs::write(path, kubeconfig_with_ca(&serving.url, "kache", serving.ca_pem.as_deref()))?;
    }
    Ok(serving)
}

#[allow(clippy::too_many_arguments)]
async fn launch(
    upstream: Upstream,
    listen: &str,
    addr_file: Option<&std::path::Path>,
    settings: ServeSettings,
    tls: Option<(Arc<rustls::ServerConfig>, String)>,
    limits: ConnLimits,
    shutdown: impl Future<Output = ()> + Send + 'static,
    grace: Duration,
) -> Result<Serving, StartError> {
    // Before anything is counted: series handles bind to the recorder present when made.
    crate::telemetry::install();
    let serve = Serve::start(upstream, settings).await.map_err(|e| StartError::Upstream(e.to_string()))?;
    let (listener, addr) = server::bind(listen, addr_file).await?;
    let ending = serve.clone();
    let shutdown = async move {
        shutdown.await;
        tracing::info!("shutting down: no new connections, ending watches, finishing requests");
        ending.end_watches();
    };
    let (config, ca_pem) = tls.map_or((None, None), |(c, ca)| (Some(c), Some(ca)));
    let url = format!("{}://{addr}", if config.is_some() { "https" } else { "http" });
    let done = tokio::spawn(server::serve_with(listener, config, limits, serve.clone(), shutdown, grace));
    Ok(Serving { serve, addr, url, ca_pem, done })
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
    args.security.validate().map_err(StartError::Config)?;
    if args.insecure_http {
        crate::config::require_loopback(&args.listen).map_err(StartError::Config)?;
    }
    if let Some(admin) = &args.admin_listen {
        admin.parse::<SocketAddr>().map_err(|e| StartError::Config(format!("--admin-listen {admin:?}: {e}")))?;
    }
    if let Some(path) = args.upstream_kubeconfig.as_deref().filter(|p| !p.is_file()) {
        return Err(StartError::Config(format!("--upstream-kubeconfig {}: no such file", path.display())));
    }
    crate::telemetry::install();
    let upstream = Upstream::load(args.upstream_kubeconfig.as_deref(), args.upstream_context.as_deref()).await.map_err(|e| StartError::Upstream(e.to_string()))?;
    let serving = start_serve_args(upstream, &args, terminated()).await?;
    if let Some(admin) = &args.admin_listen {
        let addr = start_admin(serving.serve.clone(), admin, args.admin_addr_file.as_deref()).await?;
        println!("kache admin on http://{addr}");
    }
    println!("kache serving on {}", serving.url);
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
