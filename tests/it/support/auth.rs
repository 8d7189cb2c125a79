//! Shared fixture of the security tests: a simulator with TLS, client certificates, users and
//! RBAC (namespaces `a` and `b` holding pods, configmaps and secrets), a kache in front of it
//! started from `kache serve` flags with its own service-account token, and a TLS client that
//! speaks as a given token or client certificate.

use bytes::Bytes;
use clap::Parser;
use http::{HeaderMap, Method, Request};
use http_body_util::{BodyExt, Full};
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use kache::app::{start_serve_args, Serving};
use kache::config::{ServeArgs, SimAuthArgs};
use kache::sim::launch::Running;
use kache::sim::AuditRecord;
use rcgen::{BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, Issuer, KeyPair, KeyUsagePurpose};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use serde_json::{json, Value};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::oneshot;

pub const KACHE_SA: &str = "system:serviceaccount:kache-system:kache";

/// Every kind the simulator serves: (group, version, plural, namespaced).
pub const KINDS: &[(&str, &str, &str, bool)] = &[
    ("", "v1", "namespaces", false),
    ("", "v1", "nodes", false),
    ("", "v1", "pods", true),
    ("", "v1", "services", true),
    ("", "v1", "configmaps", true),
    ("", "v1", "secrets", true),
    ("", "v1", "events", true),
    ("", "v1", "endpoints", true),
    ("apps", "v1", "deployments", true),
    ("example.com", "v1", "widgets", true),
];

pub const PRELOAD: &str = "namespaces,nodes,pods,services,configmaps,secrets,events,endpoints,deployments,widgets.example.com";

const USERS: &str = r#"
tokens:
  admin-token: {username: admin, uid: uid-admin, groups: ["system:masters"]}
  kache-token: {username: "system:serviceaccount:kache-system:kache", uid: uid-kache, groups: ["system:serviceaccounts", "system:serviceaccounts:kache-system"]}
  nobody-token: {username: anchor-nobody, uid: uid-nobody, groups: ["anchors:unprivileged"]}
  alice-token: {username: alice, uid: uid-alice, groups: [devs]}
  node-token: {username: "system:node:node-0001", groups: ["system:nodes"]}
  bob-token: {username: bob, uid: uid-bob, groups: [writers]}
  carol-token: {username: carol, groups: [impersonators]}
  expired-token: {username: alice, uid: uid-alice, groups: [devs], expiresAt: "2001-01-01T00:00:00Z"}
"#;

const RBAC: &str = r#"
rules:
- name: kache-auth-delegator
  users: ["system:serviceaccount:kache-system:kache"]
  verbs: [create]
  apiGroups: [authentication.k8s.io, authorization.k8s.io]
  resources: [tokenreviews, subjectaccessreviews]
- name: kache-impersonator
  users: ["system:serviceaccount:kache-system:kache"]
  verbs: [impersonate]
  apiGroups: ["", authentication.k8s.io]
  resources: [users, groups, serviceaccounts, uids, "userextras/*"]
- name: kache-reader
  users: ["system:serviceaccount:kache-system:kache"]
  verbs: [get, list, watch]
  apiGroups: ["*"]
  resources: ["*"]
- name: alice-pods-in-a
  users: [alice]
  verbs: [get, list, watch]
  apiGroups: [""]
  resources: [pods]
  namespaces: [a]
- name: readers-pods-in-a
  groups: [readers]
  verbs: [get, list, watch]
  apiGroups: [""]
  resources: [pods]
  namespaces: [a]
- name: nodes-read-nodes
  groups: ["system:nodes"]
  verbs: [get, list, watch]
  apiGroups: [""]
  resources: [nodes]
- name: node-0001-pods
  users: ["system:node:node-0001"]
  verbs: [list, watch]
  apiGroups: [""]
  resources: [pods]
  fieldSelector: spec.nodeName=node-0001
- name: bob-configmaps-in-a
  users: [bob]
  verbs: [create, get, list, watch, update, patch, delete]
  apiGroups: [""]
  resources: [configmaps]
  namespaces: [a]
- name: carol-may-be-alice
  users: [carol]
  verbs: [impersonate]
  apiGroups: [""]
  resources: [users]
  resourceNames: [alice]
"#;

/// A CA for client certificates, and certificates it signs.
pub struct ClientCa {
    pub pem: String,
    issuer: Issuer<'static, KeyPair>,
}

impl ClientCa {
    pub fn new() -> ClientCa {
        let key = KeyPair::generate().unwrap();
        let mut p = CertificateParams::new(Vec::<String>::new()).unwrap();
        p.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        p.distinguished_name.push(DnType::CommonName, "test-client-ca");
        p.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::DigitalSignature];
        let cert = p.self_signed(&key).unwrap();
        ClientCa { pem: cert.pem(), issuer: Issuer::new(p, key) }
    }

    /// (certificate PEM, key PEM) for user `cn` in groups `orgs`.
    pub fn issue(&self, cn: &str, orgs: &[&str]) -> (String, String) {
        let key = KeyPair::generate().unwrap();
        let mut p = CertificateParams::new(Vec::<String>::new()).unwrap();
        p.distinguished_name.push(DnType::CommonName, cn);
        for o in orgs {
            p.distinguished_name.push(DnType::OrganizationName, *o);
        }
        p.extended_key_usages = vec![ExtendedKeyUsagePurpose::ClientAuth];
        let cert = p.signed_by(&key, &self.issuer).unwrap();
        (cert.pem(), key.serialize_pem())
    }
}

/// A secured simulator with namespaces `a` and `b`.
pub struct SecureSim {
    pub running: Running,
    pub dir: tempfile::TempDir,
    pub ca: ClientCa,
    _stop: oneshot::Sender<()>,
}

#[derive(Parser)]
struct ServeFlags {
    #[command(flatten)]
    serve: ServeArgs,
}

/// `kache serve` arguments from flags (every other field has the binary's default).
pub fn serve_args(flags: &[&str]) -> ServeArgs {
    let mut argv = vec!["kache-serve"];
    argv.extend_from_slice(&crate::support::cache_test_defaults(flags));
    argv.extend_from_slice(flags);
    ServeFlags::try_parse_from(argv).expect("valid serve flags").serve
}

impl SecureSim {
    pub async fn start() -> SecureSim {
        kache::upstream::install_crypto_provider();
        let dir = tempfile::tempdir().unwrap();
        let ca = ClientCa::new();
        std::fs::write(dir.path().join("users.yaml"), USERS).unwrap();
        std::fs::write(dir.path().join("rbac.yaml"), RBAC).unwrap();
        std::fs::write(dir.path().join("client-ca.pem"), &ca.pem).unwrap();
        let auth = SimAuthArgs {
            users_file: Some(dir.path().join("users.yaml")),
            rbac_file: Some(dir.path().join("rbac.yaml")),
            client_ca_file: Some(dir.path().join("client-ca.pem")),
            tls: true,
            ..SimAuthArgs::default()
        };
        let c = crate::support::cluster(&["--nodes", "20", "--pods", "200", "--namespaces", "4", "--bookmark-interval", "1"]);
        let (running, stop) = crate::support::start_sim(&c, &auth).await;
        let sim = SecureSim { running, dir, ca, _stop: stop };
        sim.seed().await;
        sim
    }

    /// A client of the simulator itself.
    pub fn client(&self, who: Who<'_>) -> TlsClient {
        TlsClient::new(&self.running.url, self.running.ca_pem.as_deref().unwrap(), who)
    }

    async fn seed(&self) {
        let admin = self.client(Who::Token("admin-token"));
        for ns in ["a", "b"] {
            admin.must(admin.post("/api/v1/namespaces", &json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}})).await);
            for i in 0..3 {
                let node = if i == 0 { "node-0001" } else { "node-0002" };
                let pod = json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": format!("{ns}-pod-{i}"), "namespace": ns, "labels": {"app": "web"}},
                    "spec": {"nodeName": node, "containers": [{"name": "c", "image": "busybox"}]}});
                admin.must(admin.post(&format!("/api/v1/namespaces/{ns}/pods"), &pod).await);
            }
            let secret = json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": format!("{ns}-secret"), "namespace": ns}, "data": {"k": "c2VjcmV0"}});
            admin.must(admin.post(&format!("/api/v1/namespaces/{ns}/secrets"), &secret).await);
        }
    }

    /// A kubeconfig for kache's own upstream access (its service-account token).
    pub fn upstream_kubeconfig(&self) -> PathBuf {
        self.upstream_kubeconfig_at(&self.running.url)
    }

    /// The same for reaching the simulator at `url` (a relay in front of it).
    pub fn upstream_kubeconfig_at(&self, url: &str) -> PathBuf {
        let path = self.dir.path().join(format!("kache-upstream-{}.kubeconfig", uuid::Uuid::new_v4().simple()));
        let kc = kache::app::kubeconfig_with_ca(url, "sim", self.running.ca_pem.as_deref());
        let mut kc: serde_json::Value = serde_json::from_str(&kc).unwrap();
        kc["users"][0]["user"] = serde_json::json!({ "token": "kache-token" });
        std::fs::write(&path, serde_json::to_string(&kc).unwrap()).unwrap();
        path
    }

    /// Audit records matching `f`.
    pub fn audit(&self, f: impl Fn(&AuditRecord) -> bool) -> Vec<AuditRecord> {
        self.running.sim.audit().into_iter().filter(|r| f(r)).collect()
    }

    /// SubjectAccessReviews kache has sent so far.
    pub fn access_reviews(&self) -> usize {
        self.audit(|r| r.user.username == KACHE_SA && r.attributes.resource.as_ref().is_some_and(|a| a.resource == "subjectaccessreviews"))
            .len()
    }

    /// TokenReviews kache has sent so far.
    pub fn token_reviews(&self) -> usize {
        self.audit(|r| r.user.username == KACHE_SA && r.attributes.resource.as_ref().is_some_and(|a| a.resource == "tokenreviews")).len()
    }

    /// Write a client certificate for `cn`/`orgs`; returns (cert path, key path).
    pub fn client_cert_files(&self, cn: &str, orgs: &[&str]) -> (PathBuf, PathBuf) {
        let (cert, key) = self.ca.issue(cn, orgs);
        let (c, k) = (self.dir.path().join(format!("{cn}.crt")), self.dir.path().join(format!("{cn}.key")));
        std::fs::write(&c, cert).unwrap();
        std::fs::write(&k, key).unwrap();
        (c, k)
    }
}

/// A kache in front of a [`SecureSim`], started from serve flags; shut down when dropped.
pub struct SecureKache {
    pub serving: Serving,
    pub kubeconfig: PathBuf,
    _stop: oneshot::Sender<()>,
}

impl SecureKache {
    /// Start with `--client-ca-file` (the sim's client CA), `--client-kubeconfig-out` and
    /// long decision-cache TTLs, plus `extra` flags; waits for the preloaded caches to sync.
    pub async fn start(sim: &SecureSim, extra: &[&str]) -> SecureKache {
        Self::start_at(sim, &sim.upstream_kubeconfig(), extra).await
    }

    /// [`SecureKache::start`] reaching the simulator through `upstream_kubeconfig`.
    pub async fn start_at(sim: &SecureSim, upstream_kubeconfig: &Path, extra: &[&str]) -> SecureKache {
        let upstream = kache::upstream::Upstream::load(Some(upstream_kubeconfig), None).await.expect("upstream");
        let kubeconfig = sim.dir.path().join(format!("kache-{}.kubeconfig", uuid::Uuid::new_v4().simple()));
        let ca = sim.dir.path().join("client-ca.pem");
        let mut flags: Vec<String> = vec![
            "--listen",
            "127.0.0.1:0",
            "--preload",
            PRELOAD,
            "--client-ca-file",
            ca.to_str().unwrap(),
            "--client-kubeconfig-out",
            kubeconfig.to_str().unwrap(),
            "--token-cache-ttl",
            "600",
            "--token-cache-negative-ttl",
            "600",
            "--authz-cache-allow-ttl",
            "600",
            "--authz-cache-deny-ttl",
            "600",
            "--shutdown-grace",
            "1",
        ]
        .into_iter()
        .map(String::from)
        .collect();
        // A default that `extra` sets again is dropped (clap refuses a flag given twice).
        let mut i = 0;
        while i < flags.len() {
            if flags[i].starts_with("--") && extra.contains(&flags[i].as_str()) && i + 1 < flags.len() {
                flags.drain(i..i + 2);
            } else {
                i += 1;
            }
        }
        flags.extend(extra.iter().map(|s| s.to_string()));
        let refs: Vec<&str> = flags.iter().map(String::as_str).collect();
        let (stop, stopped) = oneshot::channel::<()>();
        let serving = start_serve_args(upstream, &serve_args(&refs), async move {
            let _ = stopped.await;
        })
        .await
        .expect("kache starts");
        assert!(serving.serve.wait_synced(Duration::from_secs(60)).await, "preloaded caches sync");
        SecureKache { serving, kubeconfig, _stop: stop }
    }

    pub fn client(&self, who: Who<'_>) -> TlsClient {
        match &self.serving.ca_pem {
            Some(ca) => TlsClient::new(&self.serving.url, ca, who),
            None => TlsClient::plain(&self.serving.url, who),
        }
    }

    /// Requests kache answered itself (from cache, or denied before the cache).
    pub fn hits(&self) -> u64 {
        self.serving.serve.cache_hits()
    }
}

/// Whose credentials a client presents.
#[derive(Clone)]
pub enum Who<'a> {
    Nobody,
    Token(&'a str),
    Cert(String, String),
}

/// An HTTPS client (HTTP/1.1 or HTTP/2 as negotiated).
pub struct TlsClient {
    pub base: String,
    token: Option<String>,
    client: Client<hyper_rustls::HttpsConnector<hyper_util::client::legacy::connect::HttpConnector>, Full<Bytes>>,
}

pub fn tls_config(ca_pem: &str, who: &Who<'_>) -> rustls::ClientConfig {
    let mut roots = rustls::RootCertStore::empty();
    for c in CertificateDer::pem_slice_iter(ca_pem.as_bytes()) {
        roots.add(c.unwrap()).unwrap();
    }
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let b =
        rustls::ClientConfig::builder_with_provider(provider).with_safe_default_protocol_versions().unwrap().with_root_certificates(roots);
    let cfg = match who {
        Who::Cert(cert, key) => {
            let chain = CertificateDer::pem_slice_iter(cert.as_bytes()).collect::<Result<Vec<_>, _>>().unwrap();
            b.with_client_auth_cert(chain, PrivateKeyDer::from_pem_slice(key.as_bytes()).unwrap()).unwrap()
        }
        _ => b.with_no_client_auth(),
    };
    cfg
}

impl TlsClient {
    pub fn new(base: &str, ca_pem: &str, who: Who<'_>) -> TlsClient {
        let https = hyper_rustls::HttpsConnectorBuilder::new()
            .with_tls_config(tls_config(ca_pem, &who))
            .https_or_http()
            .enable_all_versions()
            .build();
        let token = match who {
            Who::Token(t) => Some(t.to_string()),
            _ => None,
        };
        TlsClient { base: base.to_string(), token, client: Client::builder(TokioExecutor::new()).build(https) }
    }

    /// A client of a plain-HTTP server (no certificates possible).
    pub fn plain(base: &str, who: Who<'_>) -> TlsClient {
        let mut roots = rustls::RootCertStore::empty();
        roots.extend(std::iter::empty());
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let cfg = rustls::ClientConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .unwrap()
            .with_root_certificates(roots)
            .with_no_client_auth();
        let http = hyper_rustls::HttpsConnectorBuilder::new().with_tls_config(cfg).https_or_http().enable_all_versions().build();
        let token = match who {
            Who::Token(t) => Some(t.to_string()),
            _ => None,
        };
        TlsClient { base: base.to_string(), token, client: Client::builder(TokioExecutor::new()).build(http) }
    }

    fn build(&self, method: Method, path: &str, headers: &[(&str, &str)], body: Vec<u8>) -> Request<Full<Bytes>> {
        let mut b = Request::builder().method(method).uri(format!("{}{path}", self.base));
        if let Some(t) = &self.token {
            b = b.header("authorization", format!("Bearer {t}"));
        }
        let mut accept = false;
        for (k, v) in headers {
            accept |= k.eq_ignore_ascii_case("accept");
            b = b.header(*k, *v);
        }
        if !accept {
            b = b.header("accept", "application/json");
        }
        b.body(Full::new(Bytes::from(body))).unwrap()
    }

    /// Send a GET and return the response with its body unread (a watch to hold open).
    pub async fn open(&self, path: &str, headers: &[(&str, &str)]) -> http::Response<hyper::body::Incoming> {
        tokio::time::timeout(crate::support::QUICK, self.client.request(self.build(Method::GET, path, headers, Vec::new())))
            .await
            .unwrap_or_else(|_| panic!("GET {path}: no response headers in time"))
            .unwrap_or_else(|e| panic!("GET {path}: {e:?}"))
    }

    /// Send and read the whole response.
    pub async fn request(&self, method: Method, path: &str, headers: &[(&str, &str)], body: Vec<u8>) -> crate::support::Resp {
        let what = format!("{method} {path}");
        let resp = tokio::time::timeout(crate::support::QUICK, self.client.request(self.build(method, path, headers, body)))
            .await
            .unwrap_or_else(|_| panic!("{what}: no response headers in time"))
            .unwrap_or_else(|e| panic!("{what}: {e:?}"));
        let status = resp.status().as_u16();
        let headers: HeaderMap = resp.headers().clone();
        let body =
            tokio::time::timeout(crate::support::QUICK, resp.into_body().collect()).await.expect("body in time").expect("body").to_bytes();
        crate::support::Resp { status, headers, body }
    }

    pub async fn get(&self, path: &str) -> crate::support::Resp {
        self.request(Method::GET, path, &[], Vec::new()).await
    }

    pub async fn get_with(&self, path: &str, headers: &[(&str, &str)]) -> crate::support::Resp {
        self.request(Method::GET, path, headers, Vec::new()).await
    }

    pub async fn post(&self, path: &str, v: &Value) -> crate::support::Resp {
        self.request(Method::POST, path, &[("content-type", "application/json")], v.to_string().into_bytes()).await
    }

    pub fn must(&self, r: crate::support::Resp) -> Value {
        assert!((200..300).contains(&r.status), "HTTP {}: {}", r.status, r.text());
        r.json()
    }

    /// Open a watch; returns the status and, for a 200, the JSON events read until `n` have
    /// arrived (a deadline guards against a hang, it is not what is tested).
    pub async fn watch_events(&self, path: &str, n: usize) -> (u16, Vec<Value>, Bytes) {
        let resp = tokio::time::timeout(crate::support::QUICK, self.client.request(self.build(Method::GET, path, &[], Vec::new())))
            .await
            .expect("watch headers in time")
            .expect("watch");
        let status = resp.status().as_u16();
        let mut body = resp.into_body();
        let mut buf = Vec::new();
        let mut events = Vec::new();
        let end = tokio::time::Instant::now() + crate::support::QUICK;
        while events.len() < n || status != 200 {
            match tokio::time::timeout_at(end, body.frame()).await {
                Ok(Some(Ok(f))) => {
                    if let Ok(d) = f.into_data() {
                        buf.extend_from_slice(&d);
                    }
                }
                Ok(_) => break,
                Err(_) => panic!("{path}: {} of {n} events before the deadline", events.len()),
            }
            while let Some(i) = buf.iter().position(|b| *b == b'\n').filter(|_| status == 200) {
                let line: Vec<u8> = buf.drain(..=i).collect();
                events.push(serde_json::from_slice(&line).unwrap());
            }
        }
        (status, events, Bytes::from(buf))
    }
}
