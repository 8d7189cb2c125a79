//! Starting kache's servers from their arguments: `kache sim` (the simulated cluster with
//! churn and periodic progress for bookmarks, optionally with TLS, users and RBAC),
//! `kache serve` (the cache in front of an upstream: TLS, authentication and authorization
//! unless told otherwise), and `kache demo` (both, with a kubeconfig and commands to try).

pub mod admin;
pub mod kubeconfig;
pub mod status;

use crate::auth::authn::AuthnSettings;
use crate::auth::authz::AuthzSettings;
use crate::auth::tls::{self, ServingCert, TlsError};
use crate::auth::{Security, SecuritySettings};
use crate::cache::Limits;
use crate::config::{CacheArgs, ConfigError, SecurityArgs, ServeArgs};
use crate::serve::admission::limit::InflightLimits;
use crate::serve::discovery::DiscoveryError;
use crate::serve::handler::{WatchBuffers, WatchSettings};
use crate::serve::server;
use crate::serve::server::ConnLimits;
use crate::serve::{Serve, ServeSettings};
use crate::upstream::{Upstream, UpstreamError};
use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

/// Why kache (or the simulator) could not start. Each variant's message says what failed;
/// its cause is the error's source (printed by `main` after it).
#[derive(Debug, thiserror::Error)]
pub enum StartError {
    /// A flag has an invalid value (a usage error: exit code 2).
    #[error(transparent)]
    Config(#[from] ConfigError),
    /// A listener could not be bound to the address `flag` gave (in use, not one of this
    /// host's, not permitted).
    #[error("{flag} {addr}")]
    Listen {
        /// The flag that gave the address (`--listen`, `--admin-listen`, ...).
        flag: &'static str,
        /// The address.
        addr: String,
        /// Why not.
        #[source]
        source: std::io::Error,
    },
    /// A file could not be written: an address file, a kubeconfig.
    #[error("cannot write {}", path.display())]
    Write {
        /// The file (or `standard output`).
        path: std::path::PathBuf,
        /// Why not.
        #[source]
        source: std::io::Error,
    },
    /// The simulator's cluster or its users and RBAC could not be built.
    #[error("cannot build the simulated cluster")]
    Sim(#[source] crate::api::status::Status),
    /// The upstream client could not be configured.
    #[error("cannot configure the upstream client")]
    Upstream(#[from] UpstreamError),
    /// The upstream's resources could not be discovered: it is unreachable, refuses kache,
    /// or answers what no apiserver would.
    #[error("cannot discover the resources of the upstream at {url}")]
    Discovery {
        /// The upstream's URL.
        url: String,
        /// What failed.
        #[source]
        source: DiscoveryError,
    },
    /// `kache kubeconfig` was given something it cannot use (a usage error: exit code 2).
    #[error("{0}")]
    Kubeconfig(String),
    /// `kache status` could not read a kache's `/debug/cache`.
    #[error("cannot read kache's status: {0}")]
    Status(String),
    /// The serving certificate, its key or a client CA could not be used.
    #[error("TLS setup failed")]
    Tls(#[from] TlsError),
    /// The low-priority lane's threads could not be started.
    #[error("cannot start the low-priority lane")]
    Lane(#[source] std::io::Error),
}

impl StartError {
    /// The error of binding the address `flag` gave.
    pub(crate) fn bind(flag: &'static str) -> impl FnOnce(server::BindError) -> StartError {
        move |e| match e {
            server::BindError::Listen { addr, source } => StartError::Listen { flag, addr, source },
            server::BindError::AddrFile { path, source } => StartError::Write { path, source },
        }
    }

    /// The error of writing `path`.
    pub(crate) fn write(path: &std::path::Path) -> impl FnOnce(std::io::Error) -> StartError + '_ {
        move |source| StartError::Write { path: path.to_path_buf(), source }
    }
}

/// An error and its causes on one line, each cause after a colon, as Go tools print wrapped
/// errors. A cause whose text the line already ends with is left out: many errors (kube's
/// among them) write their cause into their own message and return it as their source too.
pub fn describe(e: &dyn std::error::Error) -> String {
    let mut line = e.to_string();
    let mut cause = e.source();
    while let Some(c) = cause {
        let text = c.to_string();
        if !line.ends_with(&text) {
            line.push_str(": ");
            line.push_str(&text);
        }
        cause = c.source();
    }
    line
}

/// The serving certificate for `listen`: the given files, or generated (for `extra` names
/// too).
pub(crate) fn serving_cert(
    files: (&Option<std::path::PathBuf>, &Option<std::path::PathBuf>),
    listen: &str,
    extra: &[String],
    name: &str,
) -> Result<ServingCert, StartError> {
    Ok(match files {
        (Some(cert), Some(key)) => ServingCert::load(cert, key)?,
        _ => {
            let mut hosts = ServingCert::hosts_for(listen);
            hosts.extend(extra.iter().filter(|h| !h.is_empty()).cloned());
            ServingCert::self_signed(&hosts, name)?
        }
    })
}

pub(crate) async fn ctrl_c() {
    let _ = tokio::signal::ctrl_c().await;
}

/// A kubeconfig for a plain-HTTP server.
pub fn kubeconfig(server: &str, name: &str) -> String {
    kubeconfig::for_server(server, name, None)
}

/// A kubeconfig for `server`, trusting `ca_pem` if given; no user credentials.
pub fn kubeconfig_with_ca(server: &str, name: &str, ca_pem: Option<&str>) -> String {
    kubeconfig::for_server(server, name, ca_pem)
}

/// How often `kache serve` reads its TLS files to find them rotated.
pub const TLS_RELOAD_INTERVAL: Duration = Duration::from_secs(1);

fn serve_settings(c: &CacheArgs) -> ServeSettings {
    ServeSettings {
        limits: Limits {
            window_events: c.window_events,
            window_bytes: c.window_bytes,
            history: c.snapshot_history,
            watcher_lag: c.watcher_lag,
            table_cell_bytes: c.max_table_cell_bytes_per_object,
        },
        watch: WatchSettings { bookmark_interval: Duration::from_secs(c.bookmark_interval_seconds), ..WatchSettings::default() },
        consistent_wait: Duration::from_millis(c.consistent_wait_ms),
        preload: c.preload.clone(),
        preload_formats: c.preload_encodings.clone(),
        security: None,
        inflight: InflightLimits { global: 4000, per_user: 400 },
        passthrough_per_client: c.max_passthrough_per_client,
        watches_per_client: c.max_watches_per_client,
        serve_stale: Duration::from_secs(c.serve_stale_seconds),
        passthrough_factor: c.consistent_passthrough_factor,
        check_cheaper_reads: c.cheaper_upstream_reads == crate::config::CheaperReads::Check,
        revision_ledger: c.revision_ledger == crate::config::RevisionLedger::On,
        max_uri_bytes: 64 * 1024,
        encodes: crate::serve::compress::Encodes::new(crate::serve::compress::MAX_ENCODES),
        large_per_client: c.max_large_answers_per_client,
        cheaper_upstream_bytes_per_client: c.max_cheaper_upstream_bytes_per_client,
        watch_starts_per_client: c.max_watch_starts_per_client,
        consistent_reads_per_client: c.max_consistent_reads_per_client,
        access_log: false,
        watch_buffers_per_user: crate::serve::handler::WATCH_BUFFERS_PER_USER,
        state: c.state_dir.clone().map(|dir| crate::serve::StateSettings {
            dir,
            every: Duration::from_secs(c.state_interval_seconds),
            secrets: c.state_secrets,
        }),
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
    c.validate()?;
    crate::config::require_loopback(listen)?;
    let upstream = upstream.with_timeouts(c.timeouts());
    launch(upstream, listen, addr_file, serve_settings(c), None, ConnLimits::default(), shutdown, grace).await
}

/// The security settings of `kache serve`'s flags.
fn security_settings(s: &SecurityArgs, stale: Duration) -> SecuritySettings {
    SecuritySettings {
        authn: AuthnSettings {
            allow_anonymous: s.allow_anonymous,
            token_ttl: Duration::from_secs(s.token_cache_ttl_seconds),
            negative_ttl: Duration::from_secs(s.token_cache_negative_ttl_seconds),
            cache_entries: s.auth_cache_entries,
            stale,
            concurrent: s.max_concurrent_reviews,
            first_reviews_per_address: s.max_token_review_rate_per_address,
        },
        authz: AuthzSettings {
            allow_ttl: Duration::from_secs(s.authz_cache_allow_ttl_seconds),
            deny_ttl: Duration::from_secs(s.authz_cache_deny_ttl_seconds),
            cache_entries: s.auth_cache_entries,
            stale,
            concurrent: s.max_concurrent_reviews,
        },
        passthrough: s.passthrough_auth,
    }
}

/// Start `kache serve` as its flags say: TLS (given or generated certificate, client
/// certificates if `--client-ca-file`) unless `--insecure-http` (loopback only), clients
/// authenticated and cached reads authorized against `upstream`, the limits applied, and
/// `--client-kubeconfig-out` written. Serves until `shutdown` resolves (then as
/// [`start_serve`]).
pub async fn start_serve_args(
    upstream: Upstream,
    args: &ServeArgs,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> Result<Serving, StartError> {
    args.cache.validate()?;
    let upstream = upstream.with_timeouts(args.cache.timeouts());
    let s = &args.security;
    s.validate()?;
    if args.insecure_http {
        crate::config::require_loopback(&args.listen)?;
    }
    crate::upstream::install_crypto_provider();
    let tls = if args.insecure_http {
        None
    } else {
        let cert = serving_cert((&s.tls_cert_file, &s.tls_private_key_file), &args.listen, &s.tls_sans, "kache")?;
        let ca_pem = cert.ca_pem.clone();
        let files =
            tls::Files { cert_key: s.tls_cert_file.clone().zip(s.tls_private_key_file.clone()), client_ca: s.client_ca_file.clone() };
        let generated = files.cert_key.is_none().then_some(cert);
        let reloading = tls::Reloading::new(files, generated, s.tls_policy()?)?;
        // Rotated files apply to new connections within about a second.
        reloading.watch(TLS_RELOAD_INTERVAL);
        Some((reloading.config(), ca_pem))
    };
    let mut settings = serve_settings(&args.cache);
    settings.security =
        Some(Arc::new(Security::new(upstream.clone(), security_settings(s, Duration::from_secs(args.cache.serve_stale_seconds)))));
    settings.inflight = InflightLimits { global: s.max_inflight_reads, per_user: s.max_inflight_reads_per_user };
    settings.max_uri_bytes = s.max_uri_bytes;
    let lane = crate::serve::lane::Lane::new(s.low_priority_nice, 0).map_err(StartError::Lane)?;
    settings.encodes = crate::serve::compress::Encodes::new(s.max_concurrent_encodes).in_lane(lane);
    settings.watch.buffer_bytes = s.max_watch_buffer_bytes;
    settings.watch.buffers = WatchBuffers::new(s.max_watch_buffers_bytes);
    settings.watch_buffers_per_user = s.max_watch_buffers_bytes_per_user;
    if s.stall_timeout_seconds > 0 {
        settings.watch.stall_timeout = Duration::from_secs(s.stall_timeout_seconds);
    }
    settings.access_log = args.access_log;
    let limits = ConnLimits {
        max_header_bytes: s.max_header_bytes,
        header_read_timeout: Duration::from_secs(s.header_read_timeout_seconds),
        tls_handshake_timeout: Duration::from_secs(s.header_read_timeout_seconds),
        max_streams: s.http2_max_streams_per_connection,
        write_timeout: Duration::from_secs(s.write_timeout_seconds),
        stall_timeout: Duration::from_secs(s.stall_timeout_seconds),
        preface_timeout: Duration::from_secs(s.preface_timeout_seconds),
        max_connections: match s.max_connections {
            0 => crate::serve::server::descriptor_bound(),
            n => n,
        },
        max_connections_per_address: s.max_connections_per_address,
        watch_buffers_per_connection: s.max_watch_buffers_bytes_per_connection,
    };
    // The client kubeconfig's credentials are read before anything listens, so a kubeconfig
    // kache cannot copy stops it with a usage error rather than after start.
    let creds = args.client_kubeconfig_out.as_ref().map(|_| client_credentials(args)).transpose()?;
    let grace = Duration::from_secs(args.shutdown_grace_seconds);
    let serving = launch(upstream, &args.listen, args.addr_file.as_deref(), settings, tls, limits, shutdown, grace).await?;
    if let (Some(path), Some(creds)) = (&args.client_kubeconfig_out, &creds) {
        kubeconfig::write_private(path, &kubeconfig::for_client(&serving.url, "kache", serving.ca_pem.as_deref(), creds))
            .map_err(StartError::write(path))?;
        tracing::info!(path = %path.display(), server = %serving.url, "wrote the client kubeconfig");
    }
    Ok(serving)
}

/// The credentials `--client-kubeconfig-out` carries: those of the upstream context kache
/// itself uses (`--upstream-kubeconfig`, `--upstream-context`, else KUBECONFIG or
/// ~/.kube/config), or in a pod without a kubeconfig its service-account token file, as
/// kache's own in-cluster config. The client reaches kache as that identity: kache
/// authenticates it with the upstream (TokenReview), so a token, token file or exec plugin
/// works as it does against the apiserver; a client certificate needs `--client-ca-file`.
fn client_credentials(args: &ServeArgs) -> Result<kubeconfig::ClientUser, StartError> {
    let flags = ("--upstream-kubeconfig", "--upstream-context");
    let creds = match kubeconfig::ClientUser::from_kubeconfig(args.upstream_kubeconfig.as_deref(), args.upstream_context.as_deref(), flags)
    {
        Ok(c) => c,
        // kube's inference falls back to in-cluster config the same way.
        Err(_) if args.upstream_kubeconfig.is_none() && args.upstream_context.is_none() && in_cluster() => {
            kubeconfig::ClientUser::in_cluster()
        }
        // Started in-process with an upstream client built elsewhere (no kubeconfig named):
        // nothing to copy; the kubeconfig carries the server and CA only.
        Err(e) if args.upstream_kubeconfig.is_none() => {
            tracing::warn!(error = %e, "no upstream kubeconfig to copy credentials from: the client kubeconfig has no user");
            return Ok(kubeconfig::ClientUser::default());
        }
        Err(e) => return Err(e),
    };
    if creds.is_empty() {
        tracing::warn!("the upstream context has no user: clients of the written kubeconfig reach kache without credentials (401 unless --allow-anonymous)");
    } else if creds.certificate_only() && args.security.client_ca_file.is_none() {
        tracing::warn!(
            "the upstream context authenticates with a client certificate, which kache accepts only with --client-ca-file: \
             pass the cluster's client CA (kubectl -n kube-system get configmap extension-apiserver-authentication \
             -o jsonpath='{{.data.client-ca-file}}'), or clients of the written kubeconfig get 401"
        );
    }
    Ok(creds)
}

/// Whether this process runs in a pod with a service account (in-cluster config applies).
fn in_cluster() -> bool {
    std::env::var_os("KUBERNETES_SERVICE_HOST").is_some() && std::path::Path::new(kubeconfig::SERVICE_ACCOUNT_TOKEN).is_file()
}

#[allow(clippy::too_many_arguments)]
async fn launch(
    upstream: Upstream,
    listen: &str,
    addr_file: Option<&std::path::Path>,
    settings: ServeSettings,
    tls: Option<(tls::TlsConfig, String)>,
    limits: ConnLimits,
    shutdown: impl Future<Output = ()> + Send + 'static,
    grace: Duration,
) -> Result<Serving, StartError> {
    // Before anything is counted: series handles bind to the recorder present when made.
    crate::telemetry::install();
    let url = upstream.base.to_string();
    let serve = Serve::start(upstream, settings).await.map_err(|source| StartError::Discovery { url, source })?;
    let (listener, addr) = server::bind(listen, addr_file).await.map_err(StartError::bind("--listen"))?;
    let ending = serve.clone();
    let shutdown = async move {
        shutdown.await;
        tracing::info!("shutting down: no new connections, ending watches, finishing requests");
        ending.end_watches();
    };
    let (config, ca_pem) = tls.map_or((None, None), |(c, ca)| (Some(c), Some(ca)));
    let url = format!("{}://{addr}", if config.is_some() { "https" } else { "http" });
    let served = server::serve_with(listener, config, limits, serve.clone(), shutdown, grace);
    let saving = serve.clone();
    // The caches' states are written once no request is left (`--state-dir`).
    let done = tokio::spawn(async move {
        served.await;
        saving.save_state().await;
    });
    Ok(Serving { serve, addr, url, ca_pem, done })
}

/// Start the admin listener for `serve`.
pub async fn start_admin(serve: Arc<Serve>, listen: &str, addr_file: Option<&std::path::Path>) -> Result<SocketAddr, StartError> {
    let admin = Arc::new(crate::app::admin::Admin { serve, prometheus: crate::telemetry::install() });
    let (listener, addr) = server::bind(listen, addr_file).await.map_err(StartError::bind("--admin-listen"))?;
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
    args.security.validate()?;
    if args.insecure_http {
        crate::config::require_loopback(&args.listen)?;
    }
    if let Some(admin) = &args.admin_listen {
        admin.parse::<SocketAddr>().map_err(|e| ConfigError::new("--admin-listen", admin, e.to_string()))?;
    }
    if let Some(path) = args.upstream_kubeconfig.as_deref().filter(|p| !p.is_file()) {
        let why = if path.exists() { "not a file" } else { "no such file" };
        return Err(ConfigError::new("--upstream-kubeconfig", path.display(), why).into());
    }
    crate::telemetry::install();
    let upstream = Upstream::load(args.upstream_kubeconfig.as_deref(), args.upstream_context.as_deref()).await?;
    let serving = start_serve_args(upstream, &args, terminated()).await?;
    if let Some(admin) = &args.admin_listen {
        let addr = start_admin(serving.serve.clone(), admin, args.admin_addr_file.as_deref()).await?;
        tracing::info!(admin = %format!("http://{addr}"), "admin listener (/metrics, /readyz, /livez) ready");
    }
    tracing::info!(url = %serving.url, version = env!("CARGO_PKG_VERSION"), commit = crate::GIT_COMMIT, "kache serving");
    let _ = serving.done.await;
    Ok(())
}

/// An upstream client for a plain-HTTP server URL (the simulator).
pub fn plain_upstream(url: &str) -> Result<Upstream, StartError> {
    let uri = url.parse().map_err(|source| UpstreamError::Url { url: url.to_string(), source })?;
    Ok(Upstream::new(&kube::Config::new(uri))?)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::status::Status;

    #[test]
    fn start_errors_print_each_cause_once() {
        let sim = StartError::Sim(Status::internal("no CRD widgets.example.com"));
        assert_eq!(describe(&sim), "cannot build the simulated cluster: no CRD widgets.example.com");
        let url = plain_upstream("http://[::1").unwrap_err();
        let text = describe(&url);
        assert!(text.starts_with("cannot configure the upstream client: upstream URL http://[::1: "), "{text}");
        // kube writes the cause into its message and returns it as the source as well.
        let missing = std::env::temp_dir().join(format!("kache-no-such-kubeconfig-{}", std::process::id()));
        let runtime = tokio::runtime::Builder::new_current_thread().build().unwrap();
        let err = runtime.block_on(Upstream::load(Some(&missing), None)).unwrap_err();
        assert!(matches!(err, UpstreamError::Kubeconfig(_)), "{err:?}");
        let io = std::fs::read(&missing).unwrap_err().to_string();
        let text = describe(&StartError::from(err));
        assert_eq!(text, format!("cannot configure the upstream client: cannot read kubeconfig {}: {io}", missing.display()));
        // A YAML error is one line too (serde-saphyr adds a snippet of the file below it).
        let garbage = std::env::temp_dir().join(format!("kache-garbage-kubeconfig-{}", std::process::id()));
        std::fs::write(&garbage, "clusters: [\n").unwrap();
        let err = runtime.block_on(Upstream::load(Some(&garbage), None)).unwrap_err();
        let _ = std::fs::remove_file(&garbage);
        let text = describe(&StartError::from(err));
        assert!(
            text.starts_with(&format!("cannot configure the upstream client: kubeconfig {} is not valid YAML: ", garbage.display())),
            "{text}"
        );
        assert!(!text.contains('\n'), "{text}");
    }

    #[test]
    fn a_listener_error_names_the_flag_and_the_address() {
        let runtime = tokio::runtime::Builder::new_current_thread().enable_io().build().unwrap();
        let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = taken.local_addr().unwrap().to_string();
        let err = runtime.block_on(server::bind(&addr, None)).map(|_| ()).map_err(StartError::bind("--admin-listen")).unwrap_err();
        let io = std::io::Error::from(std::io::ErrorKind::AddrInUse);
        assert!(matches!(&err, StartError::Listen { source, .. } if source.kind() == io.kind()), "{err:?}");
        let text = describe(&err);
        assert!(text.starts_with(&format!("--admin-listen {addr}: ")), "{text}");
        assert_eq!(text.matches(&addr).count(), 1, "{text}");
        let dir = std::env::temp_dir().join(format!("kache-no-such-dir-{}", std::process::id()));
        let err = runtime.block_on(server::bind("127.0.0.1:0", Some(&dir.join("addr")))).map(|_| ()).map_err(StartError::bind("--listen"));
        let text = describe(&err.unwrap_err());
        assert!(text.starts_with(&format!("cannot write {}: ", dir.join("addr").display())), "{text}");
    }

    #[test]
    fn a_discovery_error_names_the_document_and_its_cause_once() {
        let source = crate::cache::feed::FeedError::Transport("connection refused".into());
        let err =
            StartError::Discovery { url: "https://10.0.0.1:6443/".into(), source: DiscoveryError::Fetch { path: "/apis".into(), source } };
        assert_eq!(
            describe(&err),
            "cannot discover the resources of the upstream at https://10.0.0.1:6443/: cannot fetch /apis: upstream request failed: connection refused"
        );
    }
}
