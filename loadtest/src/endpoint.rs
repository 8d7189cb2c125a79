//! The endpoints under test as kube's client reaches them: a kubeconfig and context read
//! by `kube::Config` (the same code `kubectl`-compatible Rust clients use), so TLS (the
//! cluster's CA, `insecure-skip-tls-verify`, `tls-server-name`) and every credential kube
//! supports (tokens, token files, basic auth, client certificates, exec plugins, including
//! ones that return a client certificate, and impersonation) work as they do against the
//! apiserver. The load generator's own clients (`client::Http`, `bare::Bare`) take the TLS
//! configuration and the headers from here.

use anyhow::{bail, Context};
use bytes::Bytes;
use http::{HeaderMap, Request, Response};
use http_body_util::Empty;
use kube::client::ConfigExt;
use rustls::pki_types::ServerName;
use std::path::Path;
use std::sync::Arc;
use tower::util::BoxCloneSyncService;
use tower::{BoxError, ServiceBuilder, ServiceExt};

/// One endpoint clients talk to.
#[derive(Clone)]
pub struct Target {
    /// `direct` (the upstream) or `kache` (or `admin`, kache's admin listener).
    pub name: String,
    /// `host:port`.
    pub authority: String,
    /// TLS, when the server is `https://`.
    pub tls: Option<Tls>,
    /// The headers kube's client adds to each request (authentication, impersonation).
    pub credentials: Credentials,
}

impl std::fmt::Debug for Target {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Target").field("name", &self.name).field("url", &self.url("")).finish_non_exhaustive()
    }
}

/// A TLS client configuration and the name the server's certificate is checked against.
#[derive(Clone)]
pub struct Tls {
    /// kube's rustls configuration for the context (its CA, client certificate), no ALPN.
    pub config: Arc<rustls::ClientConfig>,
    /// `tls-server-name`, else the server's host.
    pub server_name: ServerName<'static>,
}

type HeaderService = BoxCloneSyncService<Request<Empty<Bytes>>, HeaderMap, BoxError>;

/// The headers kube's auth and extra-header layers add to a request: computed once when
/// they cannot change (a token, basic auth, impersonation), else for each request (a token
/// file, an exec plugin or auth provider, whose token kube refreshes).
#[derive(Clone, Default)]
pub struct Credentials {
    fixed: Option<Arc<HeaderMap>>,
    refreshed: Option<HeaderService>,
}

impl Credentials {
    /// No headers.
    pub fn none() -> Credentials {
        Credentials { fixed: Some(Arc::new(HeaderMap::new())), refreshed: None }
    }

    /// Fixed headers (tests, and a bearer token given directly).
    pub fn fixed(headers: HeaderMap) -> Credentials {
        Credentials { fixed: Some(Arc::new(headers)), refreshed: None }
    }

    /// The headers to add to the next request.
    pub async fn headers(&self) -> anyhow::Result<Arc<HeaderMap>> {
        if let Some(h) = &self.fixed {
            return Ok(h.clone());
        }
        match &self.refreshed {
            Some(svc) => {
                let h = svc.clone().oneshot(Request::new(Empty::new())).await.map_err(|e| anyhow::anyhow!("credentials: {e}"))?;
                Ok(Arc::new(h))
            }
            None => Ok(Arc::new(HeaderMap::new())),
        }
    }

    /// Whether the headers are the same for every request.
    pub fn is_fixed(&self) -> bool {
        self.fixed.is_some() || self.refreshed.is_none()
    }

    /// The headers kube's layers for `config` add, through those layers.
    async fn of(config: &kube::Config) -> anyhow::Result<Credentials> {
        let capture =
            tower::service_fn(|req: Request<Empty<Bytes>>| async move { Ok::<_, BoxError>(Response::new(req.headers().clone())) });
        let svc = ServiceBuilder::new()
            .layer(config.extra_headers_layer().context("the context's impersonation headers")?)
            .option_layer(config.auth_layer().context("the context's credentials")?)
            .service(capture)
            .map_response(Response::into_body)
            .map_err(BoxError::from);
        let svc = BoxCloneSyncService::new(svc);
        let a = &config.auth_info;
        // kube refreshes these (RefreshableToken); everything else it sets once.
        let refreshed = a.exec.is_some() || a.auth_provider.is_some() || a.token_file.is_some();
        if refreshed {
            let c = Credentials { fixed: None, refreshed: Some(svc) };
            // Fail now, not in the middle of a phase, if the plugin or file does not work.
            c.headers().await?;
            Ok(c)
        } else {
            let h = svc.oneshot(Request::new(Empty::new())).await.map_err(|e| anyhow::anyhow!("credentials: {e}"))?;
            Ok(Credentials::fixed(h))
        }
    }
}

impl Target {
    /// A plain-HTTP endpoint without credentials (the simulator and kache started here,
    /// kache's admin listener).
    pub fn plain(name: &str, authority: &str) -> Target {
        Target { name: name.into(), authority: authority.into(), tls: None, credentials: Credentials::none() }
    }

    /// `http` or `https`.
    pub fn scheme(&self) -> &'static str {
        if self.tls.is_some() {
            "https"
        } else {
            "http"
        }
    }

    /// The URL of `path_and_query` on this endpoint.
    pub fn url(&self, pq: &str) -> String {
        format!("{}://{}{pq}", self.scheme(), self.authority)
    }

    /// The endpoint of a kubeconfig's `context` (its current context if `None`), as
    /// `kube::Config` reads it.
    pub async fn from_kubeconfig(name: &str, path: &Path, context: Option<&str>) -> anyhow::Result<Target> {
        let kc = kube::config::Kubeconfig::read_from(path).with_context(|| format!("reading {}", path.display()))?;
        let options = kube::config::KubeConfigOptions { context: context.map(str::to_string), ..Default::default() };
        let config = kube::Config::from_custom_kubeconfig(kc, &options)
            .await
            .with_context(|| format!("{}: context {}", path.display(), context.unwrap_or("(current)")))?;
        Target::from_config(name, &config).await.with_context(|| format!("{}: context {}", path.display(), context.unwrap_or("(current)")))
    }

    /// The endpoint of a kube `Config`.
    pub async fn from_config(name: &str, config: &kube::Config) -> anyhow::Result<Target> {
        let url = &config.cluster_url;
        let https = match url.scheme_str() {
            Some("https") => true,
            Some("http") => false,
            other => bail!("server {url}: scheme {other:?} is neither http nor https"),
        };
        if !url.path().trim_end_matches('/').is_empty() {
            bail!("server {url}: a path prefix is not supported (the scenarios' paths start at /api)");
        }
        let host = url.host().context("server has no host")?;
        let port = url.port_u16().unwrap_or(if https { 443 } else { 80 });
        let authority = format!("{host}:{port}");
        let tls = if https {
            let config_tls = config.rustls_client_config().context("the context's TLS settings")?;
            let name = config.tls_server_name.clone().unwrap_or_else(|| host.trim_start_matches('[').trim_end_matches(']').to_string());
            let server_name = ServerName::try_from(name.clone()).with_context(|| format!("TLS server name {name:?}"))?;
            Some(Tls { config: Arc::new(config_tls), server_name })
        } else {
            None
        };
        let credentials = Credentials::of(config).await?;
        Ok(Target { name: name.into(), authority, tls, credentials })
    }
}

/// Install ring as the process's rustls provider (the one kache uses), once.
pub fn install_crypto_provider() {
    let _ = rustls::crypto::ring::default_provider().install_default();
}

#[cfg(test)]
mod tests {
    use super::*;

    async fn target(yaml: &str, context: Option<&str>) -> anyhow::Result<Target> {
        install_crypto_provider();
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("config");
        std::fs::write(&path, yaml).unwrap();
        Target::from_kubeconfig("t", &path, context).await
    }

    #[tokio::test]
    async fn a_kubeconfig_context_gives_the_server_tls_and_headers_kube_would_send() {
        let yaml = "apiVersion: v1\nkind: Config\ncurrent-context: b\nclusters:\n- name: one\n  cluster: {server: 'http://127.0.0.1:1/'}\n- name: two\n  cluster:\n    server: https://127.0.0.1:6444\n    insecure-skip-tls-verify: true\n    tls-server-name: kache.kache.svc\ncontexts:\n- name: a\n  context: {cluster: one, user: basic}\n- name: b\n  context: {cluster: two, user: u}\nusers:\n- name: u\n  user:\n    token: secret\n    as: jane\n    as-groups: [devs]\n- name: basic\n  user: {username: ada, password: pw}\n";
        let t = target(yaml, None).await.unwrap();
        assert_eq!((t.authority.as_str(), t.scheme()), ("127.0.0.1:6444", "https"));
        let tls = t.tls.as_ref().unwrap();
        assert_eq!(tls.server_name, ServerName::try_from("kache.kache.svc").unwrap());
        let h = t.credentials.headers().await.unwrap();
        assert_eq!(h.get("authorization").unwrap(), "Bearer secret");
        assert_eq!(
            (h.get("impersonate-user").unwrap(), h.get("impersonate-group").unwrap()),
            (&"jane".parse().unwrap(), &"devs".parse().unwrap())
        );
        assert!(t.credentials.is_fixed());
        // Another context of the same file: plain HTTP, basic auth.
        let t = target(yaml, Some("a")).await.unwrap();
        assert_eq!((t.url("/api"), t.tls.is_none()), ("http://127.0.0.1:1/api".to_string(), true));
        assert!(t.credentials.headers().await.unwrap().get("authorization").unwrap().to_str().unwrap().starts_with("Basic "));
        assert!(target(yaml, Some("missing")).await.is_err());
    }

    #[tokio::test]
    async fn a_token_file_goes_through_kubes_refreshing_token() {
        let dir = tempfile::tempdir().unwrap();
        let token = dir.path().join("token");
        std::fs::write(&token, "one").unwrap();
        let yaml = format!(
            "apiVersion: v1\nkind: Config\ncurrent-context: c\nclusters:\n- name: c\n  cluster: {{server: 'http://127.0.0.1:2'}}\ncontexts:\n- name: c\n  context: {{cluster: c, user: u}}\nusers:\n- name: u\n  user: {{tokenFile: {}}}\n",
            token.display()
        );
        let t = target(&yaml, None).await.unwrap();
        assert!(!t.credentials.is_fixed());
        assert_eq!(t.credentials.headers().await.unwrap().get("authorization").unwrap(), "Bearer one");
    }

    #[tokio::test]
    async fn an_exec_plugin_supplies_the_token() {
        let dir = tempfile::tempdir().unwrap();
        let plugin = dir.path().join("plugin.sh");
        std::fs::write(
            &plugin,
            "#!/bin/sh\necho '{\"apiVersion\":\"client.authentication.k8s.io/v1\",\"kind\":\"ExecCredential\",\"status\":{\"token\":\"from-exec\"}}'\n",
        )
        .unwrap();
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            std::fs::set_permissions(&plugin, std::fs::Permissions::from_mode(0o755)).unwrap();
        }
        let yaml = format!(
            "apiVersion: v1\nkind: Config\ncurrent-context: c\nclusters:\n- name: c\n  cluster: {{server: 'https://localhost:3', insecure-skip-tls-verify: true}}\ncontexts:\n- name: c\n  context: {{cluster: c, user: u}}\nusers:\n- name: u\n  user:\n    exec:\n      apiVersion: client.authentication.k8s.io/v1\n      command: {}\n      interactiveMode: Never\n",
            plugin.display()
        );
        let t = target(&yaml, None).await.unwrap();
        assert_eq!(t.tls.as_ref().unwrap().server_name, ServerName::try_from("localhost").unwrap());
        assert_eq!(t.credentials.headers().await.unwrap().get("authorization").unwrap(), "Bearer from-exec");
    }
}
