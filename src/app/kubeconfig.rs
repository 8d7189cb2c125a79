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
    let (source, what) = match &args.from_kubeconfig {
        Some(p) => (Kubeconfig::read_from(p), format!("--from-kubeconfig {}", p.display())),
        None => (Kubeconfig::read(), "--from-kubeconfig (default: KUBECONFIG or ~/.kube/config)".to_string()),
    };
    let source = source.map_err(|e| bad(format!("{what}: {e}")))?;
    let context_name = match (&args.context, &source.current_context) {
        (Some(c), _) => c.clone(),
        (None, Some(c)) if !c.is_empty() => c.clone(),
        _ => return Err(bad(format!("{what} has no current-context: pass --context"))),
    };
    let context = source
        .contexts
        .iter()
        .find(|c| c.name == context_name)
        .and_then(|c| c.context.clone())
        .ok_or_else(|| bad(format!("--context {context_name:?}: no such context in {what}")))?;
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

    Ok(single(&args.name, server, ca, auth_info, context.namespace.clone()))
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

/// `kache kubeconfig`.
pub fn run(args: &KubeconfigArgs) -> Result<(), StartError> {
    let config = build(args)?;
    let mut text =
        serde_json::to_string_pretty(&config).map_err(|e| StartError::Kubeconfig(format!("cannot encode the kubeconfig: {e}")))?;
    text.push('\n');
    if args.out.as_os_str() == "-" {
        std::io::stdout().write_all(text.as_bytes())?;
        return Ok(());
    }
    let out = &args.out;
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
    std::fs::rename(&tmp, out)?;
    eprintln!("kache: wrote {} (server {}, context {:?})", out.display(), args.server, args.name);
    Ok(())
}
