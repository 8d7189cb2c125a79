//! The connection to the upstream apiserver: kube's `Config` (kubeconfig, in-cluster,
//! exec/OIDC auth, TLS) with our own hyper client, HTTP/2 when the server offers it
//! (one connection multiplexes every informer's watch) and HTTP/1.1 otherwise.

use crate::serve::body::{self, Body, BoxError};
use http::{header, HeaderValue, Request, Response, Uri};
use hyper::body::Incoming;
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use kube::client::ConfigExt;
use std::path::Path;
use tower::util::BoxCloneSyncService;
use tower::{ServiceBuilder, ServiceExt};

/// Why the upstream client could not be set up.
#[derive(Debug, thiserror::Error)]
pub enum UpstreamError {
    /// The kubeconfig could not be read or has no usable context.
    #[error("upstream kubeconfig: {0}")]
    Kubeconfig(String),
    /// TLS or auth settings in the config are unusable.
    #[error("upstream client: {0}")]
    Client(String),
}

/// The future of an upstream response.
pub type ResponseFuture = std::pin::Pin<Box<dyn std::future::Future<Output = Result<Response<Incoming>, BoxError>> + Send + 'static>>;

type Svc = BoxCloneSyncService<Request<Body>, Response<Incoming>, BoxError>;

/// A client of the upstream apiserver.
#[derive(Clone)]
pub struct Upstream {
    svc: Svc,
    /// HTTP/1.1 only: connection upgrades (exec, attach, port-forward) cannot ride HTTP/2.
    svc_h1: Svc,
    /// Without kache's credentials (no token, no client certificate): for requests that carry
    /// the client's own bearer token (`--passthrough-auth=forward`).
    bare: Svc,
    /// The same over HTTP/1.1, for upgrades.
    bare_h1: Svc,
    /// The upstream's base URL.
    pub base: Uri,
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

impl Upstream {
    /// Load the upstream config: the given kubeconfig (and context), else the usual
    /// inference (`KUBECONFIG`, `~/.kube/config`, in-cluster service account).
    pub async fn load(kubeconfig: Option<&Path>, context: Option<&str>) -> Result<Upstream, UpstreamError> {
        install_crypto_provider();
        let options = kube::config::KubeConfigOptions { context: context.map(str::to_string), ..Default::default() };
        let config = match kubeconfig {
            Some(path) => {
                let kc = kube::config::Kubeconfig::read_from(path).map_err(|e| UpstreamError::Kubeconfig(e.to_string()))?;
                kube::Config::from_custom_kubeconfig(kc, &options).await.map_err(|e| UpstreamError::Kubeconfig(e.to_string()))?
            }
            None if context.is_some() => kube::Config::from_kubeconfig(&options).await.map_err(|e| UpstreamError::Kubeconfig(e.to_string()))?,
            None => kube::Config::infer().await.map_err(|e| UpstreamError::Kubeconfig(e.to_string()))?,
        };
        Self::new(&config)
    }

    /// A client for `config`.
    pub fn new(config: &kube::Config) -> Result<Upstream, UpstreamError> {
        install_crypto_provider();
        let mut bare = config.clone();
        bare.auth_info = kube::config::AuthInfo::default();
        Ok(Upstream {
            svc: Self::service(config, true)?,
            svc_h1: Self::service(config, false)?,
            bare: Self::service(&bare, true)?,
            bare_h1: Self::service(&bare, false)?,
            base: config.cluster_url.clone(),
        })
    }

    fn service(config: &kube::Config, http2: bool) -> Result<Svc, UpstreamError> {
        let tls = config.rustls_client_config().map_err(|e| UpstreamError::Client(e.to_string()))?;
        let mut http = hyper_util::client::legacy::connect::HttpConnector::new();
        http.enforce_http(false);
        http.set_nodelay(true);
        let builder = hyper_rustls::HttpsConnectorBuilder::new().with_tls_config(tls).https_or_http();
        let connector = if http2 { builder.enable_all_versions().wrap_connector(http) } else { builder.enable_http1().wrap_connector(http) };
        let client: Client<_, Body> = Client::builder(TokioExecutor::new()).http2_adaptive_window(true).build(connector);
        let auth = config.auth_layer().map_err(|e| UpstreamError::Client(e.to_string()))?;
        let svc = ServiceBuilder::new()
            .layer(config.base_uri_layer())
            .option_layer(auth)
            .service(client.map_err(BoxError::from))
            .map_err(BoxError::from);
        Ok(BoxCloneSyncService::new(svc))
    }

    /// Send a connection-upgrade request over HTTP/1.1.
    pub fn send_upgrade(&self, req: Request<Body>) -> ResponseFuture {
        Box::pin(self.svc_h1.clone().oneshot(req))
    }

    /// Send a request whose URI is a path and query (the base URL is added).
    pub fn send(&self, req: Request<Body>) -> ResponseFuture {
        Box::pin(self.svc.clone().oneshot(req))
    }

    /// Send a request with the client's own credentials (its `Authorization` header), none
    /// of kache's; `upgrade` for connection upgrades (HTTP/1.1).
    pub fn send_as_client(&self, req: Request<Body>, upgrade: bool) -> ResponseFuture {
        let svc = if upgrade { &self.bare_h1 } else { &self.bare };
        Box::pin(svc.clone().oneshot(req))
    }

    /// A GET of `path_and_query` with the given `Accept`.
    pub async fn get(&self, path_and_query: &str, accept: &str) -> Result<Response<Incoming>, BoxError> {
        let mut req = Request::new(body::empty());
        *req.uri_mut() = path_and_query.parse::<Uri>()?;
        req.headers_mut().insert(header::ACCEPT, HeaderValue::from_str(accept)?);
        self.send(req).await
    }
}
