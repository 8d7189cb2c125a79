//! Every test helper, written once: start `kache sim` in-process (or the binary), plain HTTP
//! requests returning (status, headers, body), a streaming watch reader that yields JSON
//! events or protobuf frames against a deadline, a kubectl runner, and protobuf envelope
//! decoding with `k8s-pb`. `gzip` inflates a compressed stream a frame at a time; `auth` adds
//! TLS material, users and a secured simulator and kache; `balancer` several servers behind
//! one address; `ops` the `kache` binary, a metrics scraper and a recording proxy; `real`
//! the opt-in real tier's switch (`KACHE_REAL_KUBECONFIG`).

pub mod auth;
pub mod balancer;
pub mod gzip;
pub mod ops;
pub mod real;
/// The repository's one fixture loader (`testdata/`), shared with the unit tests.
#[path = "../../../src/testdata.rs"]
pub mod testdata;

use bytes::Bytes;
use clap::Parser;
use http::{HeaderMap, Method, Request};
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper_util::client::legacy::{connect::HttpConnector, Client};
use hyper_util::rt::TokioExecutor;
use kache::app::{plain_upstream, start_serve, Serving};
use kache::config::{CacheArgs, ClusterArgs, SimAuthArgs};
use kache::sim::launch::Running;
use prost::Message;
use serde_json::Value;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::oneshot;
use tokio::time::Instant;

pub const PROTOBUF: &str = "application/vnd.kubernetes.protobuf";
pub const MERGE_PATCH: &str = "application/merge-patch+json";
/// Upper bound for any single request or wait that should be quick.
pub const QUICK: Duration = Duration::from_secs(30);

#[derive(Parser)]
struct ClusterFlags {
    #[command(flatten)]
    cluster: ClusterArgs,
}

/// Cluster settings parsed from `kache sim` flags, so every field has the binary's default.
/// Lease churn is off unless a test asks for it: tests that compare exact resourceVersions
/// need the global RV to move only with their own writes.
pub fn cluster(flags: &[&str]) -> ClusterArgs {
    let mut argv = vec!["kache-sim"];
    if !flags.contains(&"--lease-churn-per-sec") {
        argv.extend_from_slice(&["--lease-churn-per-sec", "0"]);
    }
    argv.extend_from_slice(flags);
    ClusterFlags::try_parse_from(argv).expect("valid cluster flags").cluster
}

/// A simulator running in this process; shut down when dropped. Derefs to its [`Api`].
pub struct TestSim {
    pub sim: Arc<kache::sim::Sim>,
    pub addr: SocketAddr,
    pub api: Api,
    _stop: oneshot::Sender<()>,
}

impl std::ops::Deref for TestSim {
    type Target = Api;
    fn deref(&self) -> &Api {
        &self.api
    }
}

/// A plain-HTTP client for one server, or a caller of a kache's `Serve` in-process.
pub struct Api {
    pub base: String,
    pub client: Client<HttpConnector, Full<Bytes>>,
    /// Requests go to this `Serve` directly, not over a socket ([`Api::in_process`]).
    local: Option<Arc<kache::serve::Serve>>,
}

impl Api {
    pub fn new(addr: &str) -> Api {
        Api { base: format!("http://{addr}"), client: Client::builder(TokioExecutor::new()).build_http(), local: None }
    }

    /// Requests answered by `serve` in-process (`Serve::call`): no socket, no HTTP framing.
    /// Watches still go over the socket at `addr`.
    pub fn in_process(serve: Arc<kache::serve::Serve>, addr: &str) -> Api {
        Api { local: Some(serve), ..Api::new(addr) }
    }
}

/// Start a simulator on a free loopback port.
pub async fn start(c: &ClusterArgs) -> TestSim {
    let (running, stop) = start_sim(c, &SimAuthArgs::default()).await;
    TestSim { sim: running.sim, addr: running.addr, api: Api::new(&running.addr.to_string()), _stop: stop }
}

/// The one way tests start a simulator in-process: on a free loopback port, with `auth`
/// (users, RBAC, TLS); it stops when the returned sender is dropped.
pub async fn start_sim(c: &ClusterArgs, auth: &SimAuthArgs) -> (Running, oneshot::Sender<()>) {
    let (stop, stopped) = oneshot::channel::<()>();
    let running = kache::sim::launch::start_sim_with("127.0.0.1:0", None, c, auth, async move {
        let _ = stopped.await;
    })
    .await
    .expect("simulator starts");
    (running, stop)
}

/// Flags every test kache gets unless the test sets them: the cost rule's factor 0, so a
/// consistent read is answered from cache after its proof whatever its size (the tests of
/// the cache's read path need it there; `serve_cost` tests the rule with its default).
pub fn cache_test_defaults(flags: &[&str]) -> Vec<&'static str> {
    let given = flags.iter().any(|f| f.starts_with("--consistent-passthrough-factor"));
    if given {
        vec![]
    } else {
        vec!["--consistent-passthrough-factor", "0"]
    }
}

#[derive(clap::Parser)]
struct CacheFlags {
    #[command(flatten)]
    cache: CacheArgs,
}

/// Cache settings from `kache serve` flags (every field has the binary's default).
pub fn cache_args(flags: &[&str]) -> CacheArgs {
    let mut argv = vec!["kache-serve"];
    argv.extend_from_slice(&cache_test_defaults(flags));
    argv.extend_from_slice(flags);
    <CacheFlags as clap::Parser>::try_parse_from(argv).expect("valid cache flags").cache
}

/// A kache (plain HTTP, no authentication: as `kache demo` runs it) serving `upstream` on a
/// free port; shut down when dropped. [`auth::SecureKache`] is kache as `kache serve` runs,
/// [`ops::KacheBin`] the binary itself.
pub struct TestKache {
    pub serving: Serving,
    pub api: Api,
    _stop: oneshot::Sender<()>,
}

impl TestKache {
    /// Another client of this kache (its own connections).
    pub fn client(&self) -> Api {
        Api::new(&self.serving.addr.to_string())
    }

    /// Shut it down and wait until it has (its caches' states written, with `--state-dir`).
    pub async fn stop(self) {
        let TestKache { serving, _stop, .. } = self;
        drop(_stop);
        serving.done.await.expect("kache shuts down");
    }
}

pub async fn kache_in_front(upstream_addr: &str, flags: &[&str]) -> TestKache {
    kache_over(plain_upstream(&format!("http://{upstream_addr}")).expect("upstream"), flags).await
}

/// [`kache_in_front`] of any upstream (a kubeconfig's, say).
pub async fn kache_over(up: kache::upstream::Upstream, flags: &[&str]) -> TestKache {
    let k = kache_loading(up, flags).await;
    // A debug build lists a large real apiserver's pods in both encodings slowly: a bound
    // well past that.
    assert!(k.serving.serve.wait_synced(Duration::from_secs(300)).await, "preloaded caches sync");
    k
}

/// [`kache_over`] listening on `listen` (the address of a kache stopped before it, say).
pub async fn kache_over_at(up: kache::upstream::Upstream, listen: &str, flags: &[&str]) -> TestKache {
    let k = kache_loading_at(up, listen, flags).await;
    assert!(k.serving.serve.wait_synced(Duration::from_secs(300)).await, "preloaded caches sync");
    k
}

/// [`kache_over`] without waiting for its preloaded caches to sync.
pub async fn kache_loading(up: kache::upstream::Upstream, flags: &[&str]) -> TestKache {
    kache_loading_at(up, "127.0.0.1:0", flags).await
}

async fn kache_loading_at(up: kache::upstream::Upstream, listen: &str, flags: &[&str]) -> TestKache {
    let (stop, stopped) = oneshot::channel::<()>();
    let serving = start_serve(
        up,
        listen,
        None,
        &cache_args(flags),
        async move {
            let _ = stopped.await;
        },
        Duration::from_secs(1),
    )
    .await
    .expect("kache starts");
    // Requests in-process (`Serve::call`); `client()` goes over the socket.
    let api = Api::in_process(serving.serve.clone(), &serving.addr.to_string());
    TestKache { serving, api, _stop: stop }
}

/// A simulator behind a fault relay ([`kache::sim::fault::FaultProxy`]), kache in front of
/// the relay, and kache's admin listener.
pub struct Faulty {
    pub sim: TestSim,
    pub relay: Arc<kache::sim::fault::FaultProxy>,
    pub kache: TestKache,
    pub admin: Api,
}

/// Start a [`Faulty`] setup from simulator and kache flags.
pub async fn faulty(sim_flags: &[&str], kache_flags: &[&str]) -> Faulty {
    let sim = start(&cluster(sim_flags)).await;
    let relay = kache::sim::fault::FaultProxy::start("127.0.0.1:0", sim.addr).await.expect("relay starts");
    let kache = kache_in_front(&relay.addr.to_string(), kache_flags).await;
    let admin = kache::app::start_admin(kache.serving.serve.clone(), "127.0.0.1:0", None).await.expect("admin starts");
    Faulty { sim, relay, kache, admin: Api::new(&admin.to_string()) }
}

impl Faulty {
    /// Wait until kache's health monitor finds the upstream up (or down); see
    /// [`upstream_becomes`].
    pub async fn upstream_becomes(&self, up: bool) -> kache::upstream::health::Health {
        upstream_becomes(&self.kache.serving.serve, up).await
    }

    /// kache's `/readyz?verbose`: (code, body).
    pub async fn readyz(&self) -> (u16, String) {
        let r = self.admin.get("/readyz?verbose").await;
        (r.status, r.text())
    }
}

/// Wait (at most [`QUICK`]) until `serve`'s health monitor finds its upstream up (`/readyz`
/// answered 200) or down; the state found.
pub async fn upstream_becomes(serve: &kache::serve::Serve, up: bool) -> kache::upstream::health::Health {
    use kache::upstream::health::Health;
    let mut rx = serve.upstream().health();
    let found = tokio::time::timeout(QUICK, rx.wait_for(|h| if up { *h == Health::Up } else { h.is_down() }))
        .await
        .unwrap_or_else(|_| panic!("the upstream was not found {} within {QUICK:?}", if up { "up" } else { "down" }))
        .expect("health channel open")
        .clone();
    found
}

/// A response read to the end.
#[derive(Debug)]
pub struct Resp {
    pub status: u16,
    pub headers: HeaderMap,
    pub body: Bytes,
}

impl Resp {
    /// The body as JSON (panics with the body text if it is not).
    pub fn json(&self) -> Value {
        serde_json::from_slice(&self.body).unwrap_or_else(|e| panic!("body is not JSON ({e}): {}", String::from_utf8_lossy(&self.body)))
    }

    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.body).into_owned()
    }

    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers.get(name).and_then(|v| v.to_str().ok())
    }
}

impl Api {
    fn build(&self, method: Method, path: &str, accept: Option<&str>, content_type: Option<&str>, body: Vec<u8>) -> Request<Full<Bytes>> {
        let mut b = Request::builder().method(method).uri(format!("{}{path}", self.base));
        if let Some(a) = accept {
            b = b.header(http::header::ACCEPT, a);
        }
        if let Some(ct) = content_type {
            b = b.header(http::header::CONTENT_TYPE, ct);
        }
        b.body(Full::new(Bytes::from(body))).expect("request")
    }

    async fn send(&self, req: Request<Full<Bytes>>) -> http::Response<Incoming> {
        let what = format!("{} {}", req.method(), req.uri());
        tokio::time::timeout(QUICK, self.client.request(req))
            .await
            .unwrap_or_else(|_| panic!("{what}: no response headers within {QUICK:?}"))
            .unwrap_or_else(|e| panic!("{what}: {e}"))
    }

    /// Send a request and read the whole response.
    pub async fn request(&self, method: Method, path: &str, accept: Option<&str>, content_type: Option<&str>, body: Vec<u8>) -> Resp {
        self.read(path, self.build(method, path, accept, content_type, body)).await
    }

    /// A JSON GET with these headers besides, read whole.
    pub async fn get_with(&self, path: &str, headers: &[(&'static str, &str)]) -> Resp {
        let mut req = self.build(Method::GET, path, Some("application/json"), None, Vec::new());
        for (name, value) in headers {
            req.headers_mut().insert(*name, http::HeaderValue::from_str(value).expect("header value"));
        }
        self.read(path, req).await
    }

    /// Send `req` (to `path`) and read the whole response.
    async fn read(&self, path: &str, req: Request<Full<Bytes>>) -> Resp {
        match &self.local {
            Some(serve) => {
                let what = format!("{} {}", req.method(), req.uri());
                // As a server hands it on: origin-form, the authority in `Host`.
                let mut req = req;
                let host = req.uri().authority().map(|a| a.to_string()).unwrap_or_default();
                let origin = req.uri().path_and_query().map_or("/", |p| p.as_str()).parse().expect("origin-form");
                *req.uri_mut() = origin;
                req.headers_mut().insert(http::header::HOST, http::HeaderValue::from_str(&host).expect("host"));
                let resp = tokio::time::timeout(QUICK, serve.call(req))
                    .await
                    .unwrap_or_else(|_| panic!("{what}: no response headers within {QUICK:?}"));
                read_whole(path, resp).await
            }
            None => read_whole(path, self.send(req).await).await,
        }
    }
}

/// A response read whole, within [`QUICK`].
async fn read_whole<B>(path: &str, resp: http::Response<B>) -> Resp
where
    B: http_body::Body,
    B::Error: std::fmt::Debug,
{
    let status = resp.status().as_u16();
    let headers = resp.headers().clone();
    let body = tokio::time::timeout(QUICK, resp.into_body().collect())
        .await
        .unwrap_or_else(|_| panic!("{path}: body not complete within {QUICK:?}"))
        .expect("body")
        .to_bytes();
    Resp { status, headers, body }
}

impl Api {
    pub async fn get(&self, path: &str) -> Resp {
        self.request(Method::GET, path, Some("application/json"), None, Vec::new()).await
    }

    pub async fn get_pb(&self, path: &str) -> Resp {
        self.request(Method::GET, path, Some(PROTOBUF), None, Vec::new()).await
    }

    pub async fn post(&self, path: &str, v: &Value) -> Resp {
        self.request(Method::POST, path, Some("application/json"), Some("application/json"), v.to_string().into_bytes()).await
    }

    pub async fn put(&self, path: &str, v: &Value) -> Resp {
        self.request(Method::PUT, path, Some("application/json"), Some("application/json"), v.to_string().into_bytes()).await
    }

    pub async fn patch(&self, path: &str, v: &Value) -> Resp {
        self.request(Method::PATCH, path, Some("application/json"), Some(MERGE_PATCH), v.to_string().into_bytes()).await
    }

    pub async fn delete(&self, path: &str) -> Resp {
        self.request(Method::DELETE, path, Some("application/json"), None, Vec::new()).await
    }

    /// GET that must succeed; returns the JSON body.
    pub async fn get_ok(&self, path: &str) -> Value {
        let r = self.get(path).await;
        assert_eq!(r.status, 200, "GET {path}: {}", r.text());
        r.json()
    }

    /// Send a write that must succeed (2xx); returns the JSON body.
    pub async fn must(&self, what: &str, r: Resp) -> Value {
        assert!((200..300).contains(&r.status), "{what}: HTTP {}: {}", r.status, r.text());
        r.json()
    }

    /// Open a watch (or any streaming GET); waits for the response headers.
    pub async fn watch(&self, path: &str, accept: &str) -> WatchStream {
        let resp = self.send(self.build(Method::GET, path, Some(accept), None, Vec::new())).await;
        WatchStream {
            status: resp.status().as_u16(),
            headers: resp.headers().clone(),
            body: resp.into_body(),
            buf: Vec::new(),
            ended: false,
        }
    }

    /// Create a ConfigMap in `ns` and return it.
    pub async fn create_cm(&self, ns: &str, name: &str, data: Value) -> Value {
        let v = serde_json::json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name, "namespace": ns}, "data": data});
        let r = self.post(&format!("/api/v1/namespaces/{ns}/configmaps"), &v).await;
        self.must(&format!("create configmap {ns}/{name}"), r).await
    }

    /// Every pod as JSON (one unpaginated LIST), and the list's RV.
    pub async fn all_pods(&self) -> (u64, Vec<Value>) {
        let l = self.get_ok("/api/v1/pods").await;
        (list_rv(&l), l["items"].as_array().unwrap().clone())
    }
}

/// What reading a stream produced.
#[derive(Debug)]
pub enum Next<T> {
    Item(T),
    /// The server ended the stream.
    End,
    /// The deadline passed first.
    TimedOut,
}

impl<T: std::fmt::Debug> Next<T> {
    pub fn item(self, what: &str) -> T {
        match self {
            Next::Item(t) => t,
            other => panic!("{what}: expected an item, got {other:?}"),
        }
    }
}

/// A streaming response body read incrementally.
pub struct WatchStream {
    pub status: u16,
    pub headers: HeaderMap,
    body: Incoming,
    buf: Vec<u8>,
    ended: bool,
}

impl WatchStream {
    /// Read more bytes; false at the end of the stream, Err on the deadline.
    async fn fill(&mut self, deadline: Instant) -> Result<bool, ()> {
        if self.ended {
            return Ok(false);
        }
        loop {
            match tokio::time::timeout_at(deadline, self.body.frame()).await {
                Err(_) => return Err(()),
                Ok(None) => {
                    self.ended = true;
                    return Ok(false);
                }
                Ok(Some(Err(e))) => panic!("watch body error: {e}"),
                Ok(Some(Ok(f))) => {
                    if let Ok(d) = f.into_data() {
                        self.buf.extend_from_slice(&d);
                        return Ok(true);
                    }
                }
            }
        }
    }

    /// The next newline-terminated JSON value.
    pub async fn next_json(&mut self, deadline: Instant) -> Next<Value> {
        loop {
            if let Some(i) = self.buf.iter().position(|b| *b == b'\n') {
                let line: Vec<u8> = self.buf.drain(..=i).collect();
                let v = serde_json::from_slice(&line)
                    .unwrap_or_else(|e| panic!("watch line is not JSON ({e}): {}", String::from_utf8_lossy(&line)));
                return Next::Item(v);
            }
            match self.fill(deadline).await {
                Ok(true) => {}
                Ok(false) => {
                    assert!(self.buf.is_empty(), "stream ended mid-line: {}", String::from_utf8_lossy(&self.buf));
                    return Next::End;
                }
                Err(()) => return Next::TimedOut,
            }
        }
    }

    /// The next length-prefixed protobuf frame (without its 4-byte length).
    pub async fn next_frame(&mut self, deadline: Instant) -> Next<Vec<u8>> {
        loop {
            if self.buf.len() >= 4 {
                let n = u32::from_be_bytes(self.buf[..4].try_into().unwrap()) as usize;
                if self.buf.len() >= 4 + n {
                    let frame = self.buf[4..4 + n].to_vec();
                    self.buf.drain(..4 + n);
                    return Next::Item(frame);
                }
            }
            match self.fill(deadline).await {
                Ok(true) => {}
                Ok(false) => {
                    assert!(self.buf.is_empty(), "stream ended mid-frame ({} bytes left)", self.buf.len());
                    return Next::End;
                }
                Err(()) => return Next::TimedOut,
            }
        }
    }

    /// Every JSON event until the stream ends (panics if it has not ended by `deadline`).
    pub async fn json_until_end(&mut self, deadline: Instant) -> Vec<Value> {
        let mut out = Vec::new();
        loop {
            match self.next_json(deadline).await {
                Next::Item(v) => out.push(v),
                Next::End => return out,
                Next::TimedOut => panic!("watch did not end by the deadline; got {} events", out.len()),
            }
        }
    }
}

/// `now + secs`.
pub fn deadline(secs: u64) -> Instant {
    Instant::now() + Duration::from_secs(secs)
}

/// Poll `check` every `every_ms` until it gives `Ok(value)`; fail with the last `Err`'s
/// message if `secs` pass first. For conditions the test cannot wait on directly.
pub async fn eventually<T, F, Fut>(secs: u64, every_ms: u64, mut check: F) -> T
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<T, String>>,
{
    let end = deadline(secs);
    loop {
        match check().await {
            Ok(v) => return v,
            Err(why) => assert!(Instant::now() < end, "not within {secs} s: {why}"),
        }
        tokio::time::sleep(Duration::from_millis(every_ms)).await;
    }
}

/// `metadata.resourceVersion` of a list or object, as a number.
pub fn list_rv(v: &Value) -> u64 {
    v["metadata"]["resourceVersion"].as_str().expect("metadata.resourceVersion").parse().expect("numeric RV")
}

pub fn obj_rv(v: &Value) -> u64 {
    list_rv(v)
}

/// (namespace/name, RV) of every item of a JSON list.
pub fn keys_rvs(items: &[Value]) -> Vec<(String, String)> {
    items
        .iter()
        .map(|i| {
            let m = &i["metadata"];
            let ns = m["namespace"].as_str().unwrap_or("");
            (format!("{ns}/{}", m["name"].as_str().unwrap()), m["resourceVersion"].as_str().unwrap().to_string())
        })
        .collect()
}

/// Percent-encode a query value.
pub fn q(v: &str) -> String {
    form_urlencoded::byte_serialize(v.as_bytes()).collect()
}

/// Decode a continue token to the JSON text it carries.
pub fn decode_token(t: &str) -> String {
    use base64::Engine;
    let raw = base64::engine::general_purpose::URL_SAFE_NO_PAD.decode(t).expect("continue token is unpadded base64url");
    String::from_utf8(raw).expect("continue token is UTF-8 JSON")
}

/// Encode a continue token from its JSON text.
pub fn encode_token(json: &str) -> String {
    use base64::Engine;
    base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(json)
}

/// A capture body of a real apiserver (`testdata/golden`).
pub fn golden(name: &str) -> Vec<u8> {
    testdata::golden(name)
}

/// A capture of testdata/crd (a real apiserver's CRDs, their custom resources and
/// Tables), as JSON.
pub fn crd_golden(name: &str) -> Value {
    serde_json::from_slice(&testdata::crd_golden(name)).unwrap_or_else(|e| panic!("crd/{name}: {e}"))
}

/// The captured Widget `name` (testdata/crd/widgets.objects.json) as its author wrote it,
/// for the simulator's `example.com` group and namespace `ns`: what the apiserver set dropped.
pub fn captured_widget(name: &str, ns: &str) -> Value {
    let list = crd_golden("widgets.objects.json");
    let item = list["items"].as_array().unwrap().iter().find(|i| i["metadata"]["name"] == name).expect("a captured widget").clone();
    let mut w = serde_json::json!({"apiVersion": "example.com/v1", "kind": "Widget", "metadata": {"name": name, "namespace": ns},
                                   "spec": item["spec"], "status": item["status"]});
    if let Some(labels) = item["metadata"].get("labels") {
        w["metadata"]["labels"] = labels.clone();
    }
    w
}

// ---- protobuf ----

pub use k8s_pb::apimachinery::pkg::runtime::Unknown;

/// Open `k8s\0` + `runtime.Unknown`.
pub fn unknown(body: &[u8]) -> Unknown {
    assert!(body.len() >= 4 && &body[..4] == b"k8s\0", "no k8s\\0 magic: {:02x?}", &body[..body.len().min(16)]);
    Unknown::decode(&body[4..]).expect("runtime.Unknown")
}

/// The (apiVersion, kind) of an Unknown.
pub fn type_of(u: &Unknown) -> (String, String) {
    let tm = u.type_meta.clone().unwrap_or_default();
    (tm.api_version.unwrap_or_default(), tm.kind.unwrap_or_default())
}

/// Decode the raw message of a `k8s\0` envelope as `M`, checking its kind.
pub fn decode_envelope<M: Message + Default>(body: &[u8], kind: &str) -> M {
    let u = unknown(body);
    assert_eq!(type_of(&u).1, kind, "envelope kind");
    M::decode(u.raw.as_deref().unwrap_or_default()).unwrap_or_else(|e| panic!("{kind}: {e}"))
}

#[allow(unused_imports)]
pub use k8s_pb::apimachinery::pkg::apis::meta::v1::{Status as PbStatus, WatchEvent as PbWatchEvent};

/// Decode a protobuf watch frame into (type, inner envelope Unknown).
pub fn watch_event(frame: &[u8]) -> (String, Unknown) {
    let ev = PbWatchEvent::decode(frame).expect("WatchEvent");
    let raw = ev.object.and_then(|o| o.raw).expect("WatchEvent.object.raw");
    (ev.r#type.unwrap_or_default(), unknown(&raw))
}

// ---- processes ----

/// A child process killed (and reaped) when dropped.
pub struct ChildGuard(pub Child);

impl Drop for ChildGuard {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// The lines `child` prints on its (piped) stdout, as they come.
pub fn stdout_lines(child: &mut Child) -> tokio::sync::mpsc::UnboundedReceiver<String> {
    use std::io::BufRead as _;
    let out = child.stdout.take().expect("piped stdout");
    let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
    std::thread::spawn(move || {
        for line in std::io::BufReader::new(out).lines().map_while(Result::ok) {
            if tx.send(line).is_err() {
                return;
            }
        }
    });
    rx
}

/// kubectl with `kubeconfig`, its discovery cache in `cache`, a request timeout, and nothing
/// from the environment's KUBECONFIG or stdin.
pub fn kubectl_command(kubeconfig: &Path, cache: &Path, args: &[&str]) -> Command {
    let mut c = Command::new(KUBECTL);
    c.arg("--kubeconfig").arg(kubeconfig);
    c.arg("--cache-dir").arg(cache);
    c.arg("--request-timeout=30s");
    c.args(args);
    c.env_remove("KUBECONFIG");
    c.stdin(Stdio::null());
    c
}

/// Run [`kubectl_command`] to completion (blocking).
pub fn kubectl(kubeconfig: &Path, cache: &Path, args: &[&str]) -> std::process::Output {
    kubectl_command(kubeconfig, cache, args).output().unwrap_or_else(|e| panic!("kubectl {}: {e}", args.join(" ")))
}

/// `kubectl` with a temporary kubeconfig and discovery cache for one server.
pub struct Kubectl {
    dir: tempfile::TempDir,
    kubeconfig: PathBuf,
}

pub const KUBECTL: &str = "/usr/bin/kubectl";

impl Kubectl {
    pub fn new(server: &str) -> Kubectl {
        let dir = tempfile::tempdir().expect("tempdir");
        let kubeconfig = dir.path().join("kubeconfig");
        std::fs::write(&kubeconfig, kache::app::kubeconfig(server, "kache-test")).expect("write kubeconfig");
        Kubectl { dir, kubeconfig }
    }

    pub fn dir(&self) -> &Path {
        self.dir.path()
    }

    /// A command with the kubeconfig, cache dir and a request timeout set.
    pub fn command(&self, args: &[&str]) -> Command {
        kubectl_command(&self.kubeconfig, &self.dir.path().join("cache"), args)
    }

    /// Run to completion (off the async runtime's worker threads).
    pub async fn run(&self, args: &[&str]) -> std::process::Output {
        let mut c = self.command(args);
        let what = format!("kubectl {}", args.join(" "));
        tokio::task::spawn_blocking(move || c.output()).await.expect("join").unwrap_or_else(|e| panic!("{what}: {e}"))
    }

    /// Run, require success, and parse stdout as JSON.
    pub async fn json(&self, args: &[&str]) -> Value {
        let out = self.run(args).await;
        assert!(out.status.success(), "kubectl {}: {}\n{}", args.join(" "), out.status, String::from_utf8_lossy(&out.stderr));
        serde_json::from_slice(&out.stdout).unwrap_or_else(|e| panic!("kubectl {} output is not JSON: {e}", args.join(" ")))
    }
}

/// Names (`namespace/name`) of a JSON list's items, in order.
pub fn names(items: &[Value]) -> Vec<String> {
    keys_rvs(items).into_iter().map(|(k, _)| k).collect()
}

/// `kache sim` run as the built binary; killed when dropped.
pub struct BinarySim {
    pub addr: SocketAddr,
    pub api: Api,
    pub _child: ChildGuard,
    dir: tempfile::TempDir,
}

impl BinarySim {
    /// Spawn `kache sim --listen 127.0.0.1:0 --addr-file F <args>` and poll F (deadline 60 s)
    /// until it holds the bound address.
    pub async fn spawn(args: &[&str]) -> BinarySim {
        let dir = tempfile::tempdir().expect("tempdir");
        let addr_file = dir.path().join("addr");
        let log = std::fs::File::create(dir.path().join("stderr")).expect("log file");
        let child = Command::new(env!("CARGO_BIN_EXE_kache"))
            .arg("sim")
            .args(["--listen", "127.0.0.1:0", "--addr-file"])
            .arg(&addr_file)
            .args(args)
            .env("KACHE_LOG_LEVEL", "warn")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .expect("spawn kache sim");
        let mut child = ChildGuard(child);
        let end = deadline(60);
        let addr = loop {
            if let Some(a) = std::fs::read_to_string(&addr_file).ok().and_then(|s| s.trim().parse::<SocketAddr>().ok()) {
                break a;
            }
            if let Some(status) = child.0.try_wait().expect("try_wait") {
                panic!(
                    "kache sim exited with {status} before writing its address: {}",
                    std::fs::read_to_string(dir.path().join("stderr")).unwrap_or_default()
                );
            }
            assert!(Instant::now() < end, "kache sim wrote no address to {} within 60 s", addr_file.display());
            tokio::time::sleep(Duration::from_millis(50)).await;
        };
        BinarySim { addr, api: Api::new(&addr.to_string()), _child: child, dir }
    }

    /// What the child wrote to stderr so far.
    pub fn stderr(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("stderr")).unwrap_or_default()
    }
}
