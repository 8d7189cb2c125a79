//! The upstream apiserver, the one place kache talks to it: the client (this module), its
//! connection pools (`pool`), its health as kache's monitor finds it (`health`), and the
//! discovery documents kept for when it is down (`last_discovery`). `serve/`, `cache/` and
//! `auth/` all reach the upstream through here.
//!
//! The client: kube's `Config` (kubeconfig, in-cluster, exec/OIDC auth, TLS) with our own
//! hyper client, HTTP/2 when the server offers it and HTTP/1.1 otherwise. HTTP/2 connections
//! come from a pool that opens another connection when every open one carries its limit of
//! concurrent streams (the apiserver allows 100 per connection by default; a stream beyond it
//! would wait), as Go's HTTP/2 transport does. kache's own calls (informers, discovery)
//! have a pool of their own (their lists of whole collections one more, over HTTP/1.1:
//! [`Class::Bulk`]), reviews another and health probes a third, so client
//! pass-through traffic can never queue them, nor a flood of reviews a probe or an informer. Each stream may hold at most [`STREAM_WINDOW_BYTES`] unread, and a connection
//! grants that to every stream it carries at once, so a stream whose reader stopped (a client
//! that no longer reads a passed-through watch) stalls alone instead of taking the
//! connection's window from the requests beside it.
//!
//! Nothing waits on the upstream without a deadline: connecting (TCP and TLS) is bounded
//! by [`CONNECT_TIMEOUT`], every request's response headers by [`Timeouts`] (kache's own
//! calls and clients' pass-through separately), and HTTP/2 connections are pinged (an
//! upstream that stops answering, as a paused or partitioned one does, has its
//! connections closed within [`KEEPALIVE_INTERVAL`] + [`KEEPALIVE_TIMEOUT`], ending the
//! streams on them). Bodies are bounded by their readers (see `cache::feed::fetch::next_data`).

pub mod health;
pub(crate) mod last_discovery;
pub mod ledger;
mod pool;

pub use pool::Counted;

use crate::body::{self, Body, BoxError};
use health::Health;
use http::{header, HeaderValue, Request, Response, Uri};
use hyper::body::Incoming;
use hyper_util::client::legacy::Client;
use hyper_util::rt::{TokioExecutor, TokioTimer};
use kube::client::ConfigExt;
use pool::Pool;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;
use tower::util::BoxCloneSyncService;
use tower::{ServiceBuilder, ServiceExt};

/// Why the upstream client could not be set up.
#[derive(Debug, thiserror::Error)]
pub enum UpstreamError {
    /// The kubeconfig given (else `KUBECONFIG`'s or `~/.kube/config`) could not be read or
    /// parsed, or has no usable context; with none given, no in-cluster service account
    /// either. What failed, naming the file, on one line (see [`kubeconfig_problem`]).
    #[error("{0}")]
    Kubeconfig(String),
    /// TLS or auth settings in the config are unusable.
    #[error("upstream client")]
    Client(#[source] kube::Error),
    /// An upstream URL given as text (the simulator's) does not parse.
    #[error("upstream URL {url}")]
    Url {
        /// The text given.
        url: String,
        /// Why it does not parse.
        #[source]
        source: http::uri::InvalidUri,
    },
}

/// The future of an upstream response.
pub type ResponseFuture = std::pin::Pin<Box<dyn std::future::Future<Output = Result<Response<Counted>, BoxError>> + Send + 'static>>;

/// The future of an upgrade response (HTTP/1.1, not pooled: the connection becomes the
/// upgraded stream).
pub type UpgradeFuture = std::pin::Pin<Box<dyn std::future::Future<Output = Result<Response<Incoming>, BoxError>> + Send + 'static>>;

type Svc = BoxCloneSyncService<Request<Body>, Response<Incoming>, BoxError>;

/// What every connection of one kind shares, prepared once from the config: its TLS settings
/// (parsing certificates costs milliseconds, tens of them in a debug build) and its
/// credentials. A pool opens another connection while requests wait on its lock, so opening
/// one must cost nothing but the connection itself: building the TLS settings anew for each
/// of several connections opened together holds the runtime's threads, and meanwhile the
/// upstream looks hung.
struct Connector {
    tls: rustls::ClientConfig,
    auth: Option<kube::client::middleware::AuthLayer>,
    base: kube::client::middleware::BaseUriLayer,
    /// Streams per HTTP/2 connection, or HTTP/1.1 only (`None`).
    http2: Option<usize>,
}

impl Connector {
    fn new(config: &kube::Config, http2: Option<usize>) -> Result<Connector, UpstreamError> {
        Ok(Connector {
            tls: config.rustls_client_config().map_err(UpstreamError::Client)?,
            auth: config.auth_layer().map_err(UpstreamError::Client)?,
            base: config.base_uri_layer(),
            http2,
        })
    }

    /// A new client (its own connection) with these settings.
    fn service(&self) -> Svc {
        let mut http = hyper_util::client::legacy::connect::HttpConnector::new();
        http.enforce_http(false);
        http.set_nodelay(true);
        http.set_connect_timeout(Some(CONNECT_TIMEOUT));
        let builder = hyper_rustls::HttpsConnectorBuilder::new().with_tls_config(self.tls.clone()).https_or_http();
        let https = if self.http2.is_some() {
            builder.enable_all_versions().wrap_connector(http)
        } else {
            builder.enable_http1().wrap_connector(http)
        };
        // The TLS handshake too: a paused upstream completes TCP handshakes (the kernel
        // does) but never the TLS one.
        let connector = tower::service_fn(move |uri: Uri| {
            let connect = https.clone().oneshot(uri);
            Box::pin(async move {
                match tokio::time::timeout(CONNECT_TIMEOUT, connect).await {
                    Ok(conn) => conn,
                    Err(_) => Err(BoxError::from(format!("connecting to the upstream took longer than {CONNECT_TIMEOUT:?}"))),
                }
            })
        });
        // Not hyper's adaptive window: it gives the connection and each stream one window, so
        // one stream left unread takes all of it and every other response on the connection
        // waits for that reader (a passed-through watch whose client stopped reading would
        // hang everything else passed through). As Go's transport does, a stream
        // gets its own window and the connection one for all of its streams at once.
        let streams = u32::try_from(self.http2.unwrap_or(1)).unwrap_or(u32::MAX);
        let connection_window = STREAM_WINDOW_BYTES.saturating_mul(streams).min(MAX_WINDOW);
        let client: Client<_, Body> = Client::builder(TokioExecutor::new())
            .timer(TokioTimer::new())
            .pool_timer(TokioTimer::new())
            .http2_initial_stream_window_size(STREAM_WINDOW_BYTES)
            .http2_initial_connection_window_size(connection_window)
            .http2_keep_alive_interval(KEEPALIVE_INTERVAL)
            .http2_keep_alive_timeout(KEEPALIVE_TIMEOUT)
            .http2_keep_alive_while_idle(true)
            .build(connector);
        let svc = ServiceBuilder::new()
            .layer(self.base.clone())
            .option_layer(self.auth.as_ref())
            .service(client.map_err(BoxError::from))
            .map_err(BoxError::from);
        BoxCloneSyncService::new(svc)
    }
}

/// Streams kache opens on one upstream HTTP/2 connection before it opens another: the
/// kube-apiserver's default `--http2-max-streams-per-connection`.
pub const STREAMS_PER_CONNECTION: usize = 100;
/// Upstream connections one pool opens at most; beyond them requests share the least busy.
pub const MAX_CONNECTIONS: usize = 64;
/// HTTP/1.1 connections of [`Class::Bulk`] kept at most (one list each; preloaded kinds
/// list in turns, so few run at once).
const BULK_CONNECTIONS: usize = 8;
/// HTTP/2 flow-control window of each upstream stream: the most of a response kache takes
/// before its reader has read it (a stream whose client stopped reading holds this much).
/// 1 MB per round trip streams a LIST at 100 MB/s over a 10 ms round trip, more in-cluster.
pub const STREAM_WINDOW_BYTES: u32 = 1 << 20;

/// The largest HTTP/2 flow-control window (2^31 - 1).
const MAX_WINDOW: u32 = i32::MAX as u32;

/// Time to open a connection to the upstream, TCP and TLS handshake together.
pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);
/// An HTTP/2 connection is pinged after this long without a frame from the upstream (Go's
/// client-go uses 30 s; kache wants a hung upstream found sooner, and a ping is cheap).
pub const KEEPALIVE_INTERVAL: Duration = Duration::from_secs(10);
/// A ping not answered within this closes the connection and fails its streams.
pub const KEEPALIVE_TIMEOUT: Duration = Duration::from_secs(10);

/// Deadlines for response headers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Timeouts {
    /// kache's own calls: reviews, discovery, LISTs, freshness and health probes,
    /// watches (whose headers a healthy apiserver sends at once).
    pub own: Duration,
    /// Clients' requests passed through.
    pub passthrough: Duration,
    /// An informer's watch that brings neither an event nor a bookmark for this long is
    /// reconnected (resumed from its RV). The apiserver's watch cache sends every watcher
    /// that allows bookmarks one about every minute (and 2 s before its deadline), so the
    /// default of 90 s leaves half a period of slack: a live but late stream costs at
    /// most a resume, never a relist; a stream lost without a reset (a half-open TCP
    /// connection, a proxy that dropped it) is found within 90 s.
    pub watch_idle: Duration,
}

impl Default for Timeouts {
    fn default() -> Self {
        Timeouts { own: Duration::from_secs(10), passthrough: Duration::from_secs(60), watch_idle: Duration::from_secs(90) }
    }
}

/// An upstream request whose response headers did not come within its deadline.
#[derive(Debug, thiserror::Error)]
#[error("no response from the upstream apiserver within {0:?}")]
pub struct TimedOut(pub Duration);

/// Whether an upstream error is a [`TimedOut`] (a hung upstream, not a refused one).
pub fn is_timeout(e: &BoxError) -> bool {
    e.downcast_ref::<TimedOut>().is_some()
}

/// Which pool a request rides: kache's own calls never wait behind clients', and reviews
/// and health probes never behind informers or each other (a flood of reviews for made-up
/// tokens does not delay the probe that tells whether the upstream is up, nor an
/// informer's LIST).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Class {
    /// Informers, discovery, freshness probes.
    Own,
    /// kache's own lists of a whole collection, over HTTP/1.1: a kube-apiserver spends less
    /// CPU sending a large list over HTTP/1.1 than over HTTP/2 (its HTTP/2 server hands each
    /// frame from the handler to the connection's writer). One list per connection.
    Bulk,
    /// A client's request passed through.
    Passthrough,
    /// Token and access reviews.
    Review,
    /// The health monitor's `/readyz` probes.
    Probe,
}

impl Class {
    fn label(self) -> &'static str {
        match self {
            Class::Own => "own",
            Class::Bulk => "bulk",
            Class::Passthrough => "passthrough",
            Class::Review => "review",
            Class::Probe => "probe",
        }
    }
}

/// Whose credentials a request is sent upstream with.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Credentials {
    /// kache's own (the client's `Authorization` header is dropped; any `Impersonate-*`
    /// headers the caller left on the request name whom kache acts for).
    Kache,
    /// The client's own `Authorization` header, and none of kache's.
    Client,
}

/// A client of the upstream apiserver.
#[derive(Clone)]
pub struct Upstream {
    /// kache's credentials, for clients' pass-through requests.
    svc: Arc<Pool>,
    /// kache's credentials, for its own calls.
    own: Arc<Pool>,
    /// kache's credentials, HTTP/1.1, for its own lists of whole collections.
    bulk: Arc<Pool>,
    /// kache's credentials, for token and access reviews.
    reviews: Arc<Pool>,
    /// kache's credentials, for health probes.
    probes: Arc<Pool>,
    /// HTTP/1.1 only: connection upgrades (exec, attach, port-forward) cannot ride HTTP/2.
    svc_h1: Svc,
    /// Without kache's credentials (no token, no client certificate): for requests that carry
    /// the client's own bearer token (`--passthrough-auth=forward`).
    bare: Arc<Pool>,
    /// The same over HTTP/1.1, for upgrades.
    bare_h1: Svc,
    /// The upstream's base URL.
    pub base: Uri,
    /// Deadlines for response headers.
    timeouts: Timeouts,
    /// What the health monitor last found (see [`health`]).
    health: Arc<tokio::sync::watch::Sender<Health>>,
    /// Since when the monitor's probe in flight has gone unanswered (`None` between probes).
    probing: Arc<tokio::sync::watch::Sender<Option<tokio::time::Instant>>>,
    /// Asks the monitor for a probe now: a call has waited [`health::KICK_AFTER`] with none
    /// in flight.
    kick: Arc<tokio::sync::Notify>,
    /// When response headers last came from the upstream on any connection: an upstream
    /// that answers is not hung, however slow its `/readyz` (see [`Upstream::suspected`]).
    heard: Arc<health::Heard>,
    /// Which resource wrote each recent revision of the upstream's storage, as kache's
    /// watches saw it ([`crate::upstream::ledger`]).
    ledger: Arc<crate::upstream::ledger::Ledger>,
}

impl std::fmt::Debug for Upstream {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Upstream").field("base", &self.base).finish()
    }
}

/// Install the one rustls crypto provider kache uses (ring). Idempotent.
pub fn install_crypto_provider() {
    let _ = rustls::crypto::ring::default_provider().install_default();
}

/// Where kube reads a kubeconfig when none is named: `KUBECONFIG`'s files, else
/// `~/.kube/config`.
pub(crate) fn default_kubeconfig() -> String {
    match std::env::var_os("KUBECONFIG").filter(|v| !v.is_empty()) {
        Some(files) => format!("{} (KUBECONFIG)", files.to_string_lossy()),
        None => std::env::home_dir().map_or_else(|| "~/.kube/config".into(), |h| h.join(".kube").join("config").display().to_string()),
    }
}

/// What is wrong with the kubeconfig `file`, on one line that names the file. kube's own
/// messages quote a path in its debug form, repeat their cause, and (YAML errors) add lines
/// with a snippet of the file.
pub(crate) fn kubeconfig_problem(file: &str, e: &kube::config::KubeconfigError) -> String {
    use kube::config::KubeconfigError as E;
    let first_line = |text: String| text.lines().next().unwrap_or_default().trim().to_string();
    match e {
        // The one file of several that could not be read.
        E::ReadConfig(io, path) => format!("cannot read kubeconfig {}: {io}", path.display()),
        E::Parse(yaml) => format!("kubeconfig {file} is not valid YAML: {}", first_line(yaml.to_string()).trim_start_matches("error: ")),
        other => format!("kubeconfig {file}: {}", first_line(other.to_string())),
    }
}

impl Upstream {
    /// Load the upstream config: the given kubeconfig (and context), else the usual
    /// inference (`KUBECONFIG`, `~/.kube/config`, in-cluster service account).
    pub async fn load(kubeconfig: Option<&Path>, context: Option<&str>) -> Result<Upstream, UpstreamError> {
        install_crypto_provider();
        let options = kube::config::KubeConfigOptions { context: context.map(str::to_string), ..Default::default() };
        let problem = |file: String| move |e: kube::config::KubeconfigError| UpstreamError::Kubeconfig(kubeconfig_problem(&file, &e));
        let config = match kubeconfig {
            Some(path) => {
                let kc = kube::config::Kubeconfig::read_from(path).map_err(problem(path.display().to_string()))?;
                kube::Config::from_custom_kubeconfig(kc, &options).await.map_err(problem(path.display().to_string()))?
            }
            None if context.is_some() => kube::Config::from_kubeconfig(&options).await.map_err(problem(default_kubeconfig()))?,
            None => kube::Config::infer().await.map_err(|e| {
                // kube says why the kubeconfig failed as the source; in-cluster config is the
                // fallback that was not there either.
                let kubeconfig = std::error::Error::source(&e).and_then(|s| s.downcast_ref::<kube::config::KubeconfigError>());
                let why = kubeconfig.map_or_else(|| e.to_string(), |k| kubeconfig_problem(&default_kubeconfig(), k));
                UpstreamError::Kubeconfig(format!("{why} (and no in-cluster service account to use instead)"))
            })?,
        };
        Self::new(&config)
    }

    /// A client for `config`.
    pub fn new(config: &kube::Config) -> Result<Upstream, UpstreamError> {
        Self::with_streams(config, STREAMS_PER_CONNECTION)
    }

    /// A client for `config` that opens another HTTP/2 connection once one carries `streams`
    /// concurrent requests.
    pub fn with_streams(config: &kube::Config, streams: usize) -> Result<Upstream, UpstreamError> {
        install_crypto_provider();
        let mut bare = config.clone();
        bare.auth_info = kube::config::AuthInfo::default();
        let heard = Arc::new(health::Heard::new());
        // Told of the answers to kache's own credentials (every pool but the bare one).
        let refusals = Some(Arc::new(pool::Refusals::default()));
        let pool = |class, c: &kube::Config, refusals: &Option<Arc<pool::Refusals>>| {
            let streams = streams.max(1);
            let connector = Connector::new(c, Some(streams))?;
            let refusals = refusals.clone();
            Ok::<_, UpstreamError>(Arc::new(Pool::new(class, streams, MAX_CONNECTIONS, heard.clone(), refusals, move || {
                connector.service()
            })))
        };
        Ok(Upstream {
            svc: pool(Class::Passthrough, config, &refusals)?,
            own: pool(Class::Own, config, &refusals)?,
            bulk: {
                let connector = Connector::new(config, None)?;
                Arc::new(Pool::new(Class::Bulk, 1, BULK_CONNECTIONS, heard.clone(), refusals.clone(), move || connector.service()))
            },
            reviews: pool(Class::Review, config, &refusals)?,
            probes: pool(Class::Probe, config, &refusals)?,
            svc_h1: Self::service(config, None)?,
            bare: pool(Class::Passthrough, &bare, &None)?,
            bare_h1: Self::service(&bare, None)?,
            base: config.cluster_url.clone(),
            timeouts: Timeouts::default(),
            health: Arc::new(tokio::sync::watch::Sender::new(Health::Unknown)),
            probing: Arc::new(tokio::sync::watch::Sender::new(None)),
            kick: Arc::new(tokio::sync::Notify::new()),
            heard,
            ledger: Arc::default(),
        })
    }

    /// The revisions of the upstream's storage kache's watches have seen, by resource.
    pub fn ledger(&self) -> &crate::upstream::ledger::Ledger {
        &self.ledger
    }

    /// The same upstream (sharing its connections) with other deadlines.
    pub fn with_timeouts(mut self, timeouts: Timeouts) -> Upstream {
        self.timeouts = timeouts;
        self
    }

    /// The deadlines in force.
    pub fn timeouts(&self) -> Timeouts {
        self.timeouts
    }

    /// Upstream connections open now for clients' pass-through (kache's and the clients'
    /// credentials) and for kache's own calls.
    pub fn connections(&self) -> (usize, usize) {
        (self.svc.connections() + self.bare.connections(), self.own.connections())
    }

    /// A client of the upstream: HTTP/2 (when the upstream offers it) carrying up to `http2`
    /// streams per connection, or HTTP/1.1 only (`None`).
    fn service(config: &kube::Config, http2: Option<usize>) -> Result<Svc, UpstreamError> {
        Ok(Connector::new(config, http2)?.service())
    }

    /// Send a connection-upgrade request over HTTP/1.1, with kache's credentials or
    /// (`as_client`) the client's own.
    pub fn send_upgrade(&self, req: Request<Body>, as_client: bool) -> UpgradeFuture {
        let svc = if as_client { &self.bare_h1 } else { &self.svc_h1 };
        let (call, deadline) = (svc.clone().oneshot(req), self.timeouts.passthrough);
        let call = tokio::time::timeout(deadline, call);
        Box::pin(futures_util::FutureExt::map(call, move |r| r.unwrap_or_else(|_| Err(Box::new(TimedOut(deadline)) as BoxError))))
    }

    /// Send a request whose URI is a path and query (the base URL is added), in `class`'s
    /// pool, with kache's credentials.
    pub fn send(&self, req: Request<Body>, class: Class) -> ResponseFuture {
        match class {
            Class::Own => self.own.send(req, self.timeouts.own),
            Class::Bulk => self.bulk.send(req, self.timeouts.own),
            Class::Review => self.reviews.send(req, self.timeouts.own),
            Class::Probe => self.probes.send(req, self.timeouts.own),
            Class::Passthrough => self.svc.send(req, self.timeouts.passthrough),
        }
    }

    /// Send a client's request with its own credentials (its `Authorization` header), none
    /// of kache's.
    pub fn send_as_client(&self, req: Request<Body>) -> ResponseFuture {
        self.bare.send(req, self.timeouts.passthrough)
    }

    /// A request with kache's credentials and the given headers and body, one of kache's
    /// own calls (tools and tests that talk to the upstream as kache does).
    pub async fn request(
        &self,
        method: http::Method,
        path_and_query: &str,
        headers: &[(&str, &str)],
        body: Vec<u8>,
    ) -> Result<Response<Counted>, BoxError> {
        let mut req = Request::new(body::full(body));
        *req.method_mut() = method;
        *req.uri_mut() = path_and_query.parse::<Uri>()?;
        for (k, v) in headers {
            req.headers_mut().insert(http::HeaderName::from_bytes(k.as_bytes())?, HeaderValue::from_str(v)?);
        }
        self.send(req, Class::Own).await
    }

    /// A GET of `path_and_query` with the given `Accept`, one of kache's own calls.
    pub async fn get(&self, path_and_query: &str, accept: &str) -> Result<Response<Counted>, BoxError> {
        self.get_in(path_and_query, accept, Class::Own).await
    }

    /// [`Upstream::get`] in `class`'s pool.
    pub async fn get_in(&self, path_and_query: &str, accept: &str, class: Class) -> Result<Response<Counted>, BoxError> {
        let mut req = Request::new(body::empty());
        *req.uri_mut() = path_and_query.parse::<Uri>()?;
        req.headers_mut().insert(header::ACCEPT, HeaderValue::from_str(accept)?);
        self.send(req, class).await
    }
}

#[cfg(test)]
mod tests;
