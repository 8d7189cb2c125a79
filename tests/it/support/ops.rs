//! Helpers of the operations tests (`ops_*`), beside the shared ones in `support`:
//! - [`KacheBin`]: `kache serve` run as the built binary with its main and admin listeners on
//!   free ports (addresses read from `--addr-file` / `--admin-addr-file`), signalled with `kill`;
//! - [`Proxy`]: a small HTTP proxy in front of an upstream that records every request kache
//!   makes, can hold resource requests until a gate opens (so "before sync" is a state the
//!   test controls, not a race), and can take the upstream "down" (cut every open stream and
//!   answer 503);
//! - [`Scrape`]: a parser of the Prometheus text format.

use crate::support::{eventually, Api, ChildGuard};
use bytes::Bytes;
use http::{Request, Response, StatusCode};
use http_body::Frame;
use http_body_util::{combinators::UnsyncBoxBody, BodyExt, Full};
use hyper::body::Incoming;
use hyper_util::client::legacy::{connect::HttpConnector, Client};
use hyper_util::rt::{TokioExecutor, TokioIo};
use std::collections::{BTreeMap, BTreeSet};
use std::future::Future;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::pin::Pin;
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::Duration;
use tokio::sync::watch;
use tokio::time::Instant;

type BoxError = Box<dyn std::error::Error + Send + Sync>;

// ---- kache serve as a binary ----

/// `kache serve` run as the built binary; killed when dropped (unless it already exited).
pub struct KacheBin {
    pub child: ChildGuard,
    /// The main listener.
    pub addr: SocketAddr,
    pub api: Api,
    pub admin_api: Api,
    dir: tempfile::TempDir,
}

/// A kubeconfig for a plain-HTTP upstream at `url`, written into `dir`.
pub fn upstream_kubeconfig(dir: &Path, url: &str) -> PathBuf {
    let path = dir.join("upstream.kubeconfig");
    std::fs::write(&path, kache::app::kubeconfig(url, "upstream")).expect("write upstream kubeconfig");
    path
}

/// Poll `path` until it holds a socket address, failing early if `child` exits.
pub async fn read_addr_file(path: &Path, child: &mut ChildGuard, log: &Path, secs: u64) -> SocketAddr {
    eventually(secs, 50, || {
        let got = std::fs::read_to_string(path).ok().and_then(|s| s.trim().parse::<SocketAddr>().ok());
        if got.is_none() {
            if let Some(status) = child.0.try_wait().expect("try_wait") {
                panic!(
                    "kache exited with {status} before writing {}: {}",
                    path.display(),
                    std::fs::read_to_string(log).unwrap_or_default()
                );
            }
        }
        let r = got
            .ok_or_else(|| format!("kache wrote no address to {}: {}", path.display(), std::fs::read_to_string(log).unwrap_or_default()));
        std::future::ready(r)
    })
    .await
}

impl KacheBin {
    /// Spawn `kache serve --upstream-kubeconfig K --insecure-http --listen 127.0.0.1:0
    /// --addr-file A --admin-listen 127.0.0.1:0 --admin-addr-file B <args>` against the
    /// plain-HTTP upstream at `upstream_url`, with extra environment `env`, and wait (up to
    /// `secs`) until both listeners are bound.
    pub async fn spawn(upstream_url: &str, args: &[&str], env: &[(&str, &str)], secs: u64) -> KacheBin {
        let dir = tempfile::tempdir().expect("tempdir");
        let kubeconfig = upstream_kubeconfig(dir.path(), upstream_url);
        Self::spawn_in(dir, &kubeconfig, args, env, secs).await
    }

    /// As [`KacheBin::spawn`], with kache's own credentials: a bearer token for the upstream.
    pub async fn spawn_with_token(upstream_url: &str, token: &str, args: &[&str], env: &[(&str, &str)], secs: u64) -> KacheBin {
        let dir = tempfile::tempdir().expect("tempdir");
        let kubeconfig = dir.path().join("upstream.kubeconfig");
        let text = format!(
            "apiVersion: v1\nkind: Config\nclusters:\n- name: up\n  cluster:\n    server: {upstream_url}\ncontexts:\n- name: up\n  context:\n    cluster: up\n    user: kache\ncurrent-context: up\nusers:\n- name: kache\n  user:\n    token: {token}\n"
        );
        std::fs::write(&kubeconfig, text).expect("write upstream kubeconfig");
        Self::spawn_in(dir, &kubeconfig, args, env, secs).await
    }

    /// Where `--client-kubeconfig-out` is written when `args` ask for it via [`KacheBin::client_kubeconfig`].
    pub fn client_kubeconfig(&self) -> PathBuf {
        self.dir.path().join("client.kubeconfig")
    }

    async fn spawn_in(dir: tempfile::TempDir, kubeconfig: &Path, args: &[&str], env: &[(&str, &str)], secs: u64) -> KacheBin {
        let (addr_file, admin_file, log) = (dir.path().join("addr"), dir.path().join("admin-addr"), dir.path().join("stderr"));
        let mut c = Command::new(env!("CARGO_BIN_EXE_kache"));
        // Plain HTTP on loopback; clients without credentials are served as system:anonymous
        // (the simulator without an RBAC file authorizes everyone) unless `--no-anonymous` (a
        // test-only marker, not a kache flag) says otherwise.
        c.arg("serve").arg("--upstream-kubeconfig").arg(kubeconfig);
        if !args.contains(&"--no-anonymous") {
            c.arg("--allow-anonymous");
        }
        // `--tls` (a test-only marker, not a kache flag): serve TLS with a generated
        // certificate and write the client kubeconfig (with its CA) into the temp dir.
        let tls = args.contains(&"--tls");
        let args: Vec<&str> = args.iter().copied().filter(|a| !matches!(*a, "--tls" | "--no-anonymous")).collect();
        if tls {
            c.arg("--client-kubeconfig-out").arg(dir.path().join("client.kubeconfig"));
        } else {
            c.arg("--insecure-http");
        }
        c.args(["--listen", "127.0.0.1:0", "--addr-file"]).arg(&addr_file);
        c.args(["--admin-listen", "127.0.0.1:0", "--admin-addr-file"]).arg(&admin_file);
        c.args(crate::support::cache_test_defaults(&args));
        c.args(&args);
        c.env_remove("KUBECONFIG").env("KACHE_LOG_LEVEL", "info");
        for (k, v) in env {
            c.env(k, v);
        }
        c.stdin(Stdio::null()).stdout(Stdio::null()).stderr(std::fs::File::create(&log).expect("log file"));
        let mut child = ChildGuard(c.spawn().expect("spawn kache serve"));
        let addr = read_addr_file(&addr_file, &mut child, &log, secs).await;
        let admin = read_addr_file(&admin_file, &mut child, &log, secs).await;
        KacheBin { child, addr, api: Api::new(&addr.to_string()), admin_api: Api::new(&admin.to_string()), dir }
    }

    pub fn pid(&self) -> u32 {
        self.child.0.id()
    }

    /// Send a signal (`TERM`, `INT`, ...) with the `kill` command.
    pub fn signal(&self, sig: &str) {
        let status = Command::new("kill").arg(format!("-{sig}")).arg(self.pid().to_string()).status().expect("run kill");
        assert!(status.success(), "kill -{sig} {}: {status}", self.pid());
    }

    /// What kache wrote to stderr so far.
    pub fn stderr(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("stderr")).unwrap_or_default()
    }

    /// Wait until the process exits (or the deadline passes: None).
    pub async fn wait_exit(&mut self, until: Instant) -> Option<std::process::ExitStatus> {
        loop {
            if let Some(s) = self.child.0.try_wait().expect("try_wait") {
                return Some(s);
            }
            if Instant::now() >= until {
                return None;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// GET an admin path; (status, body text).
    pub async fn admin_get(&self, path: &str) -> (u16, String) {
        let r = self.admin_api.request(http::Method::GET, path, None, None, Vec::new()).await;
        (r.status, r.text())
    }

    /// Scrape `/metrics`.
    pub async fn scrape(&self) -> Scrape {
        let (code, text) = self.admin_get("/metrics").await;
        assert_eq!(code, 200, "/metrics: {text}");
        Scrape::parse(&text)
    }

    /// Poll `/readyz` until it answers `code` (deadline `secs`); returns the verbose body.
    pub async fn readyz_becomes(&self, code: u16, secs: u64) -> String {
        eventually(secs, 100, || async {
            let (c, body) = self.admin_get("/readyz?verbose").await;
            if c == code {
                Ok(body)
            } else {
                Err(format!("/readyz did not become {code}; last {c}:\n{body}\nkache stderr:\n{}", self.stderr()))
            }
        })
        .await
    }
}

// ---- Prometheus text format ----

/// One sample line.
#[derive(Debug, Clone)]
pub struct Sample {
    pub name: String,
    pub labels: BTreeMap<String, String>,
    pub value: f64,
}

/// A parsed `/metrics` page.
#[derive(Debug, Clone, Default)]
pub struct Scrape {
    /// `# TYPE` of each family.
    pub types: BTreeMap<String, String>,
    /// `# HELP` of each family.
    pub helps: BTreeMap<String, String>,
    pub samples: Vec<Sample>,
}

fn parse_labels(s: &str) -> BTreeMap<String, String> {
    let mut out = BTreeMap::new();
    let mut chars = s.chars().peekable();
    loop {
        while chars.peek().is_some_and(|c| *c == ',' || c.is_whitespace()) {
            chars.next();
        }
        let key: String = std::iter::from_fn(|| chars.next_if(|c| *c != '=')).collect();
        if key.is_empty() {
            return out;
        }
        assert_eq!(chars.next(), Some('='), "label {key}: no '='");
        assert_eq!(chars.next(), Some('"'), "label {key}: value not quoted");
        let mut value = String::new();
        loop {
            match chars.next().expect("unterminated label value") {
                '\\' => match chars.next().expect("escape") {
                    'n' => value.push('\n'),
                    c => value.push(c),
                },
                '"' => break,
                c => value.push(c),
            }
        }
        out.insert(key.trim().to_string(), value);
    }
}

impl Scrape {
    pub fn parse(text: &str) -> Scrape {
        let mut s = Scrape::default();
        for line in text.lines().map(str::trim).filter(|l| !l.is_empty()) {
            if let Some(rest) = line.strip_prefix("# TYPE ") {
                let mut it = rest.split_whitespace();
                if let (Some(n), Some(t)) = (it.next(), it.next()) {
                    s.types.insert(n.to_string(), t.to_string());
                }
                continue;
            }
            if let Some((n, help)) = line.strip_prefix("# HELP ").and_then(|rest| rest.split_once(' ')) {
                s.helps.insert(n.to_string(), help.to_string());
                continue;
            }
            if line.starts_with('#') {
                continue;
            }
            let (series, value) = line.rsplit_once(' ').unwrap_or_else(|| panic!("bad sample line {line:?}"));
            let value: f64 = match value {
                "+Inf" => f64::INFINITY,
                "-Inf" => f64::NEG_INFINITY,
                v => v.parse().unwrap_or_else(|_| panic!("bad sample value in {line:?}")),
            };
            let (name, labels) = match series.split_once('{') {
                Some((n, l)) => (n.to_string(), parse_labels(l.strip_suffix('}').unwrap_or_else(|| panic!("bad labels in {line:?}")))),
                None => (series.to_string(), BTreeMap::new()),
            };
            s.samples.push(Sample { name, labels, value });
        }
        s
    }

    /// The family a sample name belongs to (histogram and summary series folded in).
    pub fn family_of(&self, sample: &str) -> String {
        for suffix in ["_bucket", "_sum", "_count"] {
            if let Some(base) = sample.strip_suffix(suffix) {
                if self.types.contains_key(base) {
                    return base.to_string();
                }
            }
        }
        sample.to_string()
    }

    /// Every family with at least one sample.
    pub fn families(&self) -> BTreeSet<String> {
        self.samples.iter().map(|s| self.family_of(&s.name)).collect()
    }

    /// Samples named `name` whose labels include all of `want`.
    pub fn find(&self, name: &str, want: &[(&str, &str)]) -> Vec<&Sample> {
        self.samples
            .iter()
            .filter(|s| s.name == name && want.iter().all(|(k, v)| s.labels.get(*k).map(String::as_str) == Some(*v)))
            .collect()
    }

    /// Sum of the samples `find` returns (0 when there are none).
    pub fn sum(&self, name: &str, want: &[(&str, &str)]) -> f64 {
        self.find(name, want).iter().map(|s| s.value).sum()
    }

    /// Every (sample name + labels) -> value, to compare two scrapes.
    pub fn series(&self) -> BTreeMap<String, f64> {
        self.samples.iter().map(|s| (format!("{}{:?}", s.name, s.labels), s.value)).collect()
    }
}

// ---- a recording, gating proxy ----

/// One request the proxy saw.
#[derive(Debug, Clone)]
pub struct Call {
    pub method: String,
    /// Path and query.
    pub path: String,
    /// The bearer token it carried, if any.
    pub token: Option<String>,
    /// Its `Impersonate-*` headers (lower-case names), in order.
    pub impersonate: Vec<(String, String)>,
    /// Its front-proxy identity headers (`X-Remote-*`, lower-case names).
    pub remote: Vec<(String, String)>,
    /// The upstream's status code (0 if none came back).
    pub status: u16,
}

/// What the proxy saw, in order of arrival.
pub type Seen = Vec<Call>;

struct ProxyState {
    upstream: String,
    client: Client<HttpConnector, Incoming>,
    /// Resource requests (not discovery) wait while this is false.
    gate: watch::Sender<bool>,
    /// While true every request gets 503.
    down: AtomicBool,
    /// Bumped to cut every response body in flight.
    cut: watch::Sender<u64>,
    seen: Mutex<Seen>,
    /// Paths starting with one of these get 403 Forbidden.
    refused: Mutex<Vec<String>>,
    /// The answer to this exact path and query stops after this many bytes while it is set.
    body_hold: watch::Sender<Option<(String, usize)>>,
    /// A body held by `body_hold` has reached its hold.
    body_held: AtomicBool,
}

/// An HTTP proxy in front of a plain-HTTP upstream; stops when dropped.
pub struct Proxy {
    pub addr: SocketAddr,
    state: Arc<ProxyState>,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for Proxy {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// Whether a path is API discovery (`/api`, `/apis`, `/api/v1`, `/apis/G/V`, `/version`,
/// `/openapi/...`, and the CRD list kache reads to tell custom resources from built-in kinds)
/// rather than a request on a resource.
pub fn is_discovery(path: &str) -> bool {
    if path == "/apis/apiextensions.k8s.io/v1/customresourcedefinitions" {
        return true;
    }
    let segs: Vec<&str> = path.trim_matches('/').split('/').filter(|s| !s.is_empty()).collect();
    match segs.first() {
        Some(&"api") => segs.len() <= 2,
        Some(&"apis") => segs.len() <= 3,
        _ => true,
    }
}

/// A response body that fails (so the connection is reset) when the proxy cuts it, and
/// stops after its first bytes while [`Proxy::hold_body`] holds it.
struct Cut {
    inner: Incoming,
    cut: Pin<Box<dyn Future<Output = ()> + Send>>,
    hold: Option<BodyHold>,
}

/// A body held after `pass` more bytes until the proxy's release; `stash` is the rest of the
/// frame that reached the hold.
struct BodyHold {
    pass: usize,
    stash: Option<Bytes>,
    state: Arc<ProxyState>,
    release: Pin<Box<dyn Future<Output = ()> + Send>>,
}

impl http_body::Body for Cut {
    type Data = Bytes;
    type Error = BoxError;

    fn poll_frame(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        if self.cut.as_mut().poll(cx).is_ready() {
            return Poll::Ready(Some(Err("cut by the test proxy".into())));
        }
        if let Some(h) = self.hold.as_mut().filter(|h| h.pass == 0) {
            h.state.body_held.store(true, Ordering::SeqCst);
            if h.release.as_mut().poll(cx).is_pending() {
                return Poll::Pending;
            }
            let stash = h.stash.take();
            self.hold = None;
            if let Some(rest) = stash {
                return Poll::Ready(Some(Ok(Frame::data(rest))));
            }
        }
        let frame = match std::task::ready!(Pin::new(&mut self.inner).poll_frame(cx)) {
            Some(Ok(frame)) => frame,
            other => return Poll::Ready(other.map(|r| r.map_err(Into::into))),
        };
        let Some(h) = self.hold.as_mut() else { return Poll::Ready(Some(Ok(frame))) };
        let mut data = match frame.into_data() {
            Ok(data) => data,
            Err(frame) => return Poll::Ready(Some(Ok(frame))),
        };
        if data.len() > h.pass {
            h.stash = Some(data.split_off(h.pass));
            h.pass = 0;
        } else {
            h.pass -= data.len();
        }
        Poll::Ready(Some(Ok(Frame::data(data))))
    }

    fn is_end_stream(&self) -> bool {
        self.hold.as_ref().is_none_or(|h| h.stash.is_none()) && self.inner.is_end_stream()
    }
}

fn status_body(code: StatusCode, msg: &str) -> Response<UnsyncBoxBody<Bytes, BoxError>> {
    let body = serde_json::json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure", "message": msg, "code": code.as_u16()}).to_string();
    let mut r = Response::new(Full::new(Bytes::from(body)).map_err(|never| match never {}).boxed_unsync());
    *r.status_mut() = code;
    r.headers_mut().insert(http::header::CONTENT_TYPE, http::HeaderValue::from_static("application/json"));
    r
}

async fn proxy_one(state: Arc<ProxyState>, req: Request<Incoming>) -> Response<UnsyncBoxBody<Bytes, BoxError>> {
    let pq = req.uri().path_and_query().map(|p| p.as_str().to_string()).unwrap_or_else(|| "/".into());
    let token = req
        .headers()
        .get(http::header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "))
        .map(str::to_string);
    let named = |prefix: &str| -> Vec<(String, String)> {
        req.headers()
            .iter()
            .filter(|(n, _)| n.as_str().starts_with(prefix))
            .map(|(n, v)| (n.as_str().to_string(), v.to_str().unwrap_or("").to_string()))
            .collect()
    };
    let (impersonate, remote) = (named("impersonate-"), named("x-remote-"));
    let index = {
        let mut seen = state.seen.lock().unwrap();
        seen.push(Call { method: req.method().to_string(), path: pq.clone(), token, impersonate, remote, status: 0 });
        seen.len() - 1
    };
    if !is_discovery(req.uri().path()) {
        let mut gate = state.gate.subscribe();
        let _ = gate.wait_for(|open| *open).await;
    }
    if state.refused.lock().unwrap().iter().any(|p| req.uri().path().starts_with(p.as_str())) {
        state.seen.lock().unwrap()[index].status = 403;
        return status_body(StatusCode::FORBIDDEN, "refused (test proxy)");
    }
    if state.down.load(Ordering::SeqCst) {
        state.seen.lock().unwrap()[index].status = 503;
        return status_body(StatusCode::SERVICE_UNAVAILABLE, "upstream down (test proxy)");
    }
    let (mut parts, body) = req.into_parts();
    parts.uri = format!("{}{pq}", state.upstream).parse().expect("upstream uri");
    parts.headers.remove(http::header::HOST);
    let mut cut_rx = state.cut.subscribe();
    let resp = match state.client.request(Request::from_parts(parts, body)).await {
        Ok(r) => r,
        Err(e) => return status_body(StatusCode::BAD_GATEWAY, &format!("test proxy: {e}")),
    };
    state.seen.lock().unwrap()[index].status = resp.status().as_u16();
    let cut = Box::pin(async move {
        if cut_rx.changed().await.is_err() {
            std::future::pending::<()>().await;
        }
    });
    let hold = state.body_hold.borrow().as_ref().filter(|(held, _)| *held == pq).map(|(_, pass)| *pass);
    let hold = hold.map(|pass| {
        let mut release = state.body_hold.subscribe();
        let release = Box::pin(async move {
            let _ = release.wait_for(Option::is_none).await;
        });
        BodyHold { pass, stash: None, state: state.clone(), release }
    });
    resp.map(|inner| Cut { inner, cut, hold }.boxed_unsync())
}

impl Proxy {
    /// Start a proxy to `upstream` (`host:port`), with the gate open or closed.
    pub async fn start(upstream: &SocketAddr, gate_open: bool) -> Proxy {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind proxy");
        let addr = listener.local_addr().expect("proxy addr");
        let state = Arc::new(ProxyState {
            upstream: format!("http://{upstream}"),
            client: Client::builder(TokioExecutor::new()).build_http(),
            gate: watch::Sender::new(gate_open),
            down: AtomicBool::new(false),
            cut: watch::Sender::new(0),
            seen: Mutex::new(Vec::new()),
            refused: Mutex::new(Vec::new()),
            body_hold: watch::Sender::new(None),
            body_held: AtomicBool::new(false),
        });
        let s = state.clone();
        let task = tokio::spawn(async move {
            let mut conns = tokio::task::JoinSet::new();
            loop {
                let Ok((stream, _)) = listener.accept().await else { continue };
                let s = s.clone();
                let svc = hyper::service::service_fn(move |req| {
                    let s = s.clone();
                    async move { Ok::<_, std::convert::Infallible>(proxy_one(s, req).await) }
                });
                conns.spawn(async move {
                    let builder = hyper_util::server::conn::auto::Builder::new(TokioExecutor::new());
                    let _ = builder.serve_connection(TokioIo::new(stream), svc).await;
                });
            }
        });
        Proxy { addr, state, task }
    }

    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// Answer every request whose path starts with `prefix` with 403 from now on.
    pub fn refuse(&self, prefix: &str) {
        self.state.refused.lock().unwrap().push(prefix.to_string());
    }

    /// Pass the first `pass` bytes of the answer to exactly `path_and_query` and hold the
    /// rest until [`Proxy::release`].
    pub fn hold_body(&self, path_and_query: &str, pass: usize) {
        self.state.body_hold.send_replace(Some((path_and_query.to_string(), pass)));
    }

    /// Whether an answer [`Proxy::hold_body`] holds has reached its hold.
    pub fn body_held(&self) -> bool {
        self.state.body_held.load(Ordering::SeqCst)
    }

    /// Let the bodies [`Proxy::hold_body`] holds (and later ones) through.
    pub fn release(&self) {
        self.state.body_hold.send_replace(None);
    }

    /// Let held resource requests (and later ones) through.
    pub fn open_gate(&self) {
        self.state.gate.send_replace(true);
    }

    /// Take the upstream down (cut every stream, answer 503) or bring it back.
    pub fn set_down(&self, down: bool) {
        self.state.down.store(down, Ordering::SeqCst);
        if down {
            self.cut_streams();
        }
    }

    /// Reset every response body in flight (the upstream's connections drop).
    pub fn cut_streams(&self) {
        self.state.cut.send_modify(|n| *n += 1);
    }

    /// Every request seen so far.
    pub fn seen(&self) -> Seen {
        self.state.seen.lock().unwrap().clone()
    }
}

// ---- a simulator with users and RBAC ----

/// A plain-HTTP simulator that authenticates bearer tokens from a users file and authorizes
/// with an RBAC file; stops when dropped.
pub struct AuthSim {
    pub addr: SocketAddr,
    pub _dir: tempfile::TempDir,
    _stop: tokio::sync::oneshot::Sender<()>,
}

impl AuthSim {
    /// `users` and `rbac` in the simulator's file formats (`kache sim --help`).
    pub async fn start(users: &str, rbac: &str, cluster_flags: &[&str]) -> AuthSim {
        let dir = tempfile::tempdir().expect("tempdir");
        std::fs::write(dir.path().join("users.yaml"), users).expect("users file");
        std::fs::write(dir.path().join("rbac.yaml"), rbac).expect("rbac file");
        let auth = kache::config::SimAuthArgs {
            users_file: Some(dir.path().join("users.yaml")),
            rbac_file: Some(dir.path().join("rbac.yaml")),
            ..Default::default()
        };
        let (running, stop) = crate::support::start_sim(&crate::support::cluster(cluster_flags), &auth).await;
        AuthSim { addr: running.addr, _dir: dir, _stop: stop }
    }
}

/// A request to `addr` with a bearer token; (status, body).
pub async fn request_as(addr: SocketAddr, token: &str, method: http::Method, path: &str, body: Option<serde_json::Value>) -> (u16, String) {
    request_as_accepting(addr, token, method, path, body, "application/json").await
}

/// [`request_as`] asking for `accept` (a Table, a metadata view).
pub async fn request_as_accepting(
    addr: SocketAddr,
    token: &str,
    method: http::Method,
    path: &str,
    body: Option<serde_json::Value>,
    accept: &str,
) -> (u16, String) {
    let client: Client<HttpConnector, Full<Bytes>> = Client::builder(TokioExecutor::new()).build_http();
    let mut b = Request::builder()
        .method(method)
        .uri(format!("http://{addr}{path}"))
        .header("authorization", format!("Bearer {token}"))
        .header("accept", accept);
    if body.is_some() {
        b = b.header("content-type", "application/json");
    }
    let req = b.body(Full::new(Bytes::from(body.map(|v| v.to_string()).unwrap_or_default()))).expect("request");
    let resp = tokio::time::timeout(Duration::from_secs(30), client.request(req)).await.expect("response within 30 s").expect("response");
    let status = resp.status().as_u16();
    let bytes = resp.into_body().collect().await.expect("body").to_bytes();
    (status, String::from_utf8_lossy(&bytes).into_owned())
}
