//! `kache kubeconfig`: write a kubeconfig that points a client at a running kache. The
//! cluster is kache's URL (with its CA embedded when given); the user is copied from a
//! context of another kubeconfig (token, token file, client certificate, exec plugin, ...),
//! so the client keeps its identity and kache authenticates it as the apiserver would; the
//! context's default namespace is kept. Relative file paths in the source are made absolute.
//! The output is JSON (a valid kubeconfig for kubectl and every client library), written
//! with mode 0600 because it holds credentials.

use crate::app::StartError;
use crate::config::KubeconfigArgs;
use base64::Engine;
use kube::config::{AuthInfo, Cluster, Context, Kubeconfig, NamedAuthInfo, NamedCluster, NamedContext};
use std::io::Write;
use std::path::Path;

fn bad(msg: String) -> StartError {
    StartError::Kubeconfig(msg)
}

/// Check `--server`: an absolute http(s) URL with a host.
fn server_url(server: &str) -> Result<String, StartError> {
    let uri: http::Uri = server.parse().map_err(|e| bad(format!("--server {server:?}: not a URL: {e}")))?;
    match uri.scheme_str() {
        Some("https") | Some("http") => {}
        _ => return Err(bad(format!("--server {server:?}: must start with https:// (or http:// for a loopback kache)"))),
    }
    if uri.host().is_none_or(str::is_empty) {
        return Err(bad(format!("--server {server:?}: no host")));
    }
    Ok(server.trim_end_matches('/').to_string())
}

/// The PEM CA bundle at `path`, base64-encoded for `certificate-authority-data`.
fn ca_data(path: &Path) -> Result<String, StartError> {
    let pem = std::fs::read(path).map_err(|e| bad(format!("--certificate-authority {}: {e}", path.display())))?;
    if !String::from_utf8_lossy(&pem).contains("-----BEGIN CERTIFICATE-----") {
        return Err(bad(format!("--certificate-authority {}: no PEM certificate in it", path.display())));
    }
    Ok(base64::engine::general_purpose::STANDARD.encode(pem))
}

/// The user (credentials) and default namespace of one context of a kubeconfig: what a
/// client kubeconfig for kache copies so its client keeps its identity.
#[derive(Debug, Clone, Default)]
pub struct ClientUser {
    /// The context's user; `None` when it names none.
    pub auth_info: Option<AuthInfo>,
    /// The context's namespace.
    pub namespace: Option<String>,
}

/// Where a pod's service-account token is mounted (what in-cluster config reads).
pub const SERVICE_ACCOUNT_TOKEN: &str = "/var/run/secrets/kubernetes.io/serviceaccount/token";

impl ClientUser {
    /// The credentials of `context` (default: the current context) in the kubeconfig at
    /// `from` (default: KUBECONFIG or ~/.kube/config). `flags` name the two flags that chose
    /// them, for messages (`("--from-kubeconfig", "--context")`).
    pub fn from_kubeconfig(from: Option<&Path>, context: Option<&str>, flags: (&str, &str)) -> Result<ClientUser, StartError> {
        let (source, file, what) = match from {
            Some(p) => (Kubeconfig::read_from(p), p.display().to_string(), format!("{} {}", flags.0, p.display())),
            None => {
                (Kubeconfig::read(), crate::upstream::default_kubeconfig(), format!("{} (default: KUBECONFIG or ~/.kube/config)", flags.0))
            }
        };
        let source = source.map_err(|e| bad(format!("{}: {}", flags.0, crate::upstream::kubeconfig_problem(&file, &e))))?;
        let context_name = match (context, &source.current_context) {
            (Some(c), _) => c.to_string(),
            (None, Some(c)) if !c.is_empty() => c.clone(),
            _ => return Err(bad(format!("{what} has no current-context: pass {}", flags.1))),
        };
        let context = source
            .contexts
            .iter()
            .find(|c| c.name == context_name)
            .and_then(|c| c.context.clone())
            .ok_or_else(|| bad(format!("{} {context_name:?}: no such context in {what}", flags.1)))?;
        let auth_info = match context.user.as_deref().filter(|u| !u.is_empty()) {
            Some(user) => {
                let found = source
                    .auth_infos
                    .iter()
                    .find(|u| u.name == user)
                    .ok_or_else(|| bad(format!("context {context_name:?} names user {user:?}, which {what} does not define")))?;
                found.auth_info.clone()
            }
            None => None,
        };
        Ok(ClientUser { auth_info, namespace: context.namespace.clone() })
    }

    /// A pod's own identity: its service-account token file, read again by the client
    /// whenever the kubelet rotates it.
    pub fn in_cluster() -> ClientUser {
        ClientUser { auth_info: Some(AuthInfo { token_file: Some(SERVICE_ACCOUNT_TOKEN.into()), ..Default::default() }), namespace: None }
    }

    /// Whether the user presents nothing but a client certificate (no token, token file,
    /// exec or auth provider plugin): kache can authenticate it only with `--client-ca-file`.
    pub fn certificate_only(&self) -> bool {
        self.auth_info.as_ref().is_some_and(|a| {
            (a.client_certificate.is_some() || a.client_certificate_data.is_some())
                && a.token.is_none()
                && a.token_file.is_none()
                && a.exec.is_none()
                && a.auth_provider.is_none()
        })
    }

    /// Whether there is no user at all (kubectl would prompt for a user name).
    pub fn is_empty(&self) -> bool {
        self.auth_info.as_ref().is_none_or(|a| {
            a.username.is_none()
                && a.token.is_none()
                && a.token_file.is_none()
                && a.client_certificate.is_none()
                && a.client_certificate_data.is_none()
                && a.exec.is_none()
                && a.auth_provider.is_none()
        })
    }
}

/// Build the client kubeconfig `args` describe.
pub fn build(args: &KubeconfigArgs) -> Result<Kubeconfig, StartError> {
    let server = server_url(&args.server)?;
    if args.name.trim().is_empty() {
        return Err(bad("--name must not be empty".into()));
    }
    let ca = args.certificate_authority.as_deref().map(ca_data).transpose()?;
    if ca.is_some() && server.starts_with("http://") {
        return Err(bad(format!("--certificate-authority is for an https:// --server, got {server}")));
    }
    let creds = ClientUser::from_kubeconfig(args.from_kubeconfig.as_deref(), args.context.as_deref(), ("--from-kubeconfig", "--context"))?;
    Ok(single(&args.name, server, ca, creds.auth_info, creds.namespace))
}

/// A client kubeconfig (JSON) for the kache at `server`, trusting `ca_pem` if given, with
/// `creds`: what `kache serve --client-kubeconfig-out` writes.
pub fn for_client(server: &str, name: &str, ca_pem: Option<&str>, creds: &ClientUser) -> String {
    let ca = ca_pem.map(|p| base64::engine::general_purpose::STANDARD.encode(p));
    let config = single(name, server.to_string(), ca, creds.auth_info.clone(), creds.namespace.clone());
    // A Kubeconfig of strings always serializes.
    serde_json::to_string_pretty(&config).unwrap_or_default() + "\n"
}

/// A kubeconfig with one cluster, user and context, all called `name`.
fn single(name: &str, server: String, ca_data: Option<String>, auth_info: Option<AuthInfo>, namespace: Option<String>) -> Kubeconfig {
    let name = name.to_string();
    let cluster = Cluster { server: Some(server), certificate_authority_data: ca_data, ..Default::default() };
    let context = Context { cluster: name.clone(), user: Some(name.clone()), namespace, ..Default::default() };
    Kubeconfig {
        api_version: Some("v1".into()),
        kind: Some("Config".into()),
        clusters: vec![NamedCluster { name: name.clone(), cluster: Some(cluster), ..Default::default() }],
        auth_infos: vec![NamedAuthInfo { name: name.clone(), auth_info, ..Default::default() }],
        contexts: vec![NamedContext { name: name.clone(), context: Some(context), ..Default::default() }],
        current_context: Some(name),
        ..Default::default()
    }
}

/// A kubeconfig (JSON) for `server`, trusting `ca_pem` if given, with no credentials
/// (clients add a token or a client certificate): what `kache sim` and `kache serve` write
/// for their clients.
pub fn for_server(server: &str, name: &str, ca_pem: Option<&str>) -> String {
    let ca = ca_pem.map(|p| base64::engine::general_purpose::STANDARD.encode(p));
    let config = single(name, server.to_string(), ca, Some(AuthInfo::default()), None);
    // A Kubeconfig of strings always serializes.
    serde_json::to_string_pretty(&config).unwrap_or_default() + "\n"
}

/// Write `text` to `out` with mode 0600 (it may hold credentials), atomically: a reader
/// (a client polling for the file) never sees half of it.
pub fn write_private(out: &Path, text: &str) -> std::io::Result<()> {
    let tmp = out.with_extension("tmp");
    {
        let mut opts = std::fs::OpenOptions::new();
        opts.write(true).create(true).truncate(true);
        #[cfg(unix)]
        std::os::unix::fs::OpenOptionsExt::mode(&mut opts, 0o600);
        let mut f = opts.open(&tmp)?;
        f.write_all(text.as_bytes())?;
        f.sync_all()?;
    }
    std::fs::rename(&tmp, out)
}

/// `kache kubeconfig`.
pub fn run(args: &KubeconfigArgs) -> Result<(), StartError> {
    let config = build(args)?;
    let mut text =
        serde_json::to_string_pretty(&config).map_err(|e| StartError::Kubeconfig(format!("cannot encode the kubeconfig: {e}")))?;
    text.push('\n');
    if args.out.as_os_str() == "-" {
        std::io::stdout().write_all(text.as_bytes()).map_err(StartError::write(Path::new("standard output")))?;
        return Ok(());
    }
    write_private(&args.out, &text).map_err(StartError::write(&args.out))?;
    eprintln!("kache: wrote {} (server {}, context {:?})", args.out.display(), args.server, args.name);
    Ok(())
}
