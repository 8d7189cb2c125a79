//! Opt-in: a kube-apiserver of the test's own, started on the etcd of the real cluster (the
//! `real-apiserver` scripts' cluster), killed (SIGKILL) and started again under kache while
//! the cluster changes: cached reads keep answering, writes get kache's 503, and a watch open
//! through kache sees, after the restart, exactly the changes it missed as ordinary events
//! followed by a bookmark, never a relist nor a 410. Runs when `KACHE_REAL_KUBECONFIG` is
//! set (its context, `KACHE_REAL_CONTEXT`, needs admin rights). The second apiserver's
//! binary, keys and token file come from `KACHE_REAL_APISERVER_DIR` (default
//! `~/real-apiserver`, as `start.sh` made it) and its etcd is `KACHE_REAL_ETCD` (default
//! `http://127.0.0.1:2379`). The populated apiserver itself is never stopped.
//!
//! ```sh
//! KACHE_REAL_KUBECONFIG=~/real-apiserver/kubeconfig KACHE_REAL_CONTEXT=admin \
//!   cargo test --test it real_restart -- --nocapture
//! ```

use crate::support::real::real_upstream;
use crate::support::{deadline, eventually, kache_over, list_rv, obj_rv, Next};
use kache::upstream::Upstream;
use serde_json::{json, Value};
use std::collections::BTreeMap;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};

const NS: &str = "kache-real-restart";

/// A kube-apiserver process of the test's own (killed when dropped).
struct Apiserver {
    child: Option<Child>,
    port: u16,
    home: PathBuf,
    work: tempfile::TempDir,
}

impl Apiserver {
    fn start(home: PathBuf) -> Apiserver {
        let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
        let mut a = Apiserver { child: None, port, home, work: tempfile::tempdir().unwrap() };
        a.spawn();
        a
    }

    fn spawn(&mut self) {
        let (h, w) = (self.home.display().to_string(), self.work.path().display().to_string());
        let etcd = std::env::var("KACHE_REAL_ETCD").unwrap_or_else(|_| "http://127.0.0.1:2379".into());
        let log = std::fs::OpenOptions::new().create(true).append(true).open(self.work.path().join("apiserver.log")).unwrap();
        let child = Command::new(format!("{h}/bin/kube-apiserver"))
            .args([
                format!("--etcd-servers={etcd}"),
                "--bind-address=127.0.0.1".into(),
                format!("--secure-port={}", self.port),
                "--advertise-address=127.0.0.1".into(),
                format!("--cert-dir={w}/pki"),
                format!("--service-account-key-file={h}/pki/sa.pub"),
                format!("--service-account-signing-key-file={h}/pki/sa.key"),
                "--service-account-issuer=https://kubernetes.default.svc.cluster.local".into(),
                "--authorization-mode=RBAC".into(),
                format!("--token-auth-file={h}/auth/tokens.csv"),
                "--service-cluster-ip-range=10.96.0.0/16".into(),
                "--endpoint-reconciler-type=none".into(),
                "--allow-privileged=true".into(),
                "--v=1".into(),
            ])
            .stdin(Stdio::null())
            .stdout(log.try_clone().unwrap())
            .stderr(log)
            .spawn()
            .expect("the second kube-apiserver starts");
        self.child = Some(child);
    }

    /// SIGKILL, as a crashed apiserver.
    fn kill(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

impl Drop for Apiserver {
    fn drop(&mut self) {
        self.kill();
    }
}

/// A request straight to an apiserver: its status and JSON body (status 0 when unsent).
async fn send(c: &kube::Client, method: http::Method, path: &str, body: Option<(&str, &Value)>) -> (u16, Value) {
    use http_body_util::BodyExt;
    let mut req = http::Request::builder().method(method).uri(path).header(http::header::ACCEPT, "application/json");
    let body = match body {
        Some((content_type, v)) => {
            req = req.header(http::header::CONTENT_TYPE, content_type);
            kube::client::Body::from(serde_json::to_vec(v).unwrap())
        }
        None => kube::client::Body::empty(),
    };
    match c.send(req.body(body).unwrap()).await {
        Ok(resp) => {
            let status = resp.status().as_u16();
            let bytes = resp.into_body().collect().await.map(|b| b.to_bytes()).unwrap_or_default();
            (status, serde_json::from_slice(&bytes).unwrap_or(Value::Null))
        }
        Err(e) => (0, Value::String(e.to_string())),
    }
}

/// Polls until the apiserver answers `/readyz` (a started process offers nothing to await).
async fn ready(c: &kube::Client) {
    eventually(120, 200, || async {
        match send(c, http::Method::GET, "/readyz", None).await {
            (200, _) => Ok(()),
            (code, why) => Err(format!("/readyz: {code} {why}")),
        }
    })
    .await
}

async fn create(c: &kube::Client, name: &str, v: &str) {
    let cm = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name, "namespace": NS}, "data": {"v": v}});
    let (code, body) = send(c, http::Method::POST, &format!("/api/v1/namespaces/{NS}/configmaps"), Some(("application/json", &cm))).await;
    assert_eq!(code, 201, "create {name}: {body}");
}

fn name(o: &Value) -> String {
    o["metadata"]["name"].as_str().unwrap_or_default().to_string()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn real_restart_an_apiserver_killed_and_started_again_costs_open_watches_only_the_changes() {
    let Some(real) = real_upstream("real_restart") else { return };
    let home = std::env::var_os("KACHE_REAL_APISERVER_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(std::env::var_os("HOME").unwrap_or_default()).join("real-apiserver"));
    if !home.join("bin/kube-apiserver").exists() {
        eprintln!("real_restart: skipped, no {}/bin/kube-apiserver (KACHE_REAL_APISERVER_DIR)", home.display());
        return;
    }
    kache::upstream::install_crypto_provider();
    let main_config = real.config().await;
    let main = kube::Client::try_from(main_config.clone()).expect("client");

    // The namespace's ConfigMaps from scratch, written at the populated apiserver.
    let ns = json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NS}});
    let (code, body) = send(&main, http::Method::POST, "/api/v1/namespaces", Some(("application/json", &ns))).await;
    assert!(code == 201 || code == 409, "namespace {NS}: {code} {body}");
    let cms = format!("/api/v1/namespaces/{NS}/configmaps");
    let (code, body) = send(&main, http::Method::DELETE, &cms, None).await;
    assert_eq!(code, 200, "emptying {NS}: {body}");
    for n in ["c0", "c1", "c2", "c3", "c4", "c5"] {
        create(&main, n, "0").await;
    }

    // kache in front of an apiserver of the test's own on the same etcd.
    let mut second = Apiserver::start(home);
    let mut config = main_config.clone();
    config.cluster_url = format!("https://127.0.0.1:{}", second.port).parse().unwrap();
    let second_client = kube::Client::try_from(config.clone()).expect("client");
    ready(&second_client).await;
    let k = kache_over(Upstream::new(&config).expect("upstream"), &["--preload", "configmaps"]).await;
    crate::support::upstream_becomes(&k.serving.serve, true).await;
    let listed = eventually(60, 100, || async {
        let l = k.api.get_ok(&format!("{cms}?resourceVersion=0")).await;
        match l["items"].as_array().map(Vec::len) {
            Some(6) => Ok(l),
            n => Err(format!("kache holds {n:?} of the 6 ConfigMaps")),
        }
    })
    .await;
    let from = list_rv(&listed);
    let mut watch =
        k.api.watch(&format!("{cms}?watch=1&resourceVersion={from}&allowWatchBookmarks=true&timeoutSeconds=600"), "application/json").await;
    assert_eq!(watch.status, 200);

    // Killed: cached reads answer, writes get kache's 503, while the cluster changes.
    second.kill();
    crate::support::upstream_becomes(&k.serving.serve, false).await;
    let served_before = k.serving.serve.cache_hits();
    let r = k.api.get(&format!("{cms}?resourceVersion=0")).await;
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(r.json()["items"].as_array().map(Vec::len), Some(6));
    assert!(k.serving.serve.cache_hits() > served_before, "the read during the outage came from cache");
    let w = k.api.patch(&format!("{cms}/c0"), &json!({"data": {"v": "through-kache"}})).await;
    assert_eq!(w.status, 503, "{}", w.text());
    assert_eq!(w.header("retry-after"), Some("1"));

    let mut want: Vec<(String, String)> = Vec::new();
    for n in ["c0", "c1", "c2"] {
        let patch = json!({"data": {"v": "1"}});
        let (code, body) = send(&main, http::Method::PATCH, &format!("{cms}/{n}"), Some(("application/merge-patch+json", &patch))).await;
        assert_eq!(code, 200, "{body}");
        want.push(("MODIFIED".into(), n.into()));
    }
    for n in ["c3", "c4", "c5"] {
        let (code, body) = send(&main, http::Method::DELETE, &format!("{cms}/{n}"), None).await;
        assert_eq!(code, 200, "{body}");
        want.push(("DELETED".into(), n.into()));
    }
    // c5 made again: a new object (a new uid) under an old name.
    for n in ["c5", "n0", "n1"] {
        create(&main, n, "again").await;
        want.push(("ADDED".into(), n.into()));
    }
    let (code, now) = send(&main, http::Method::GET, &cms, None).await;
    assert_eq!(code, 200);
    let objects: BTreeMap<String, Value> = now["items"].as_array().unwrap().iter().map(|o| (name(o), o.clone())).collect();

    // Started again: the new apiserver's watch cache begins past kache's RV (its resume is
    // refused, 410), and the watch through kache is told the differences.
    second.spawn();
    ready(&second_client).await;
    let mut seen: Vec<Value> = Vec::new();
    let mut last_rv = from;
    let until = deadline(120);
    loop {
        let ev = match watch.next_json(until).await {
            Next::Item(ev) => ev,
            other => panic!("the watch through kache ended or stalled after {} events: {other:?}: {seen:?}", seen.len()),
        };
        let kind = ev["type"].as_str().unwrap_or_default().to_string();
        assert_ne!(kind, "ERROR", "{ev}");
        let rv = obj_rv(&ev["object"]);
        if kind == "BOOKMARK" {
            assert!(rv >= last_rv, "a bookmark at {rv} after an event at {last_rv}");
            last_rv = rv;
            if seen.len() >= want.len() {
                break;
            }
            continue;
        }
        assert!(rv > last_rv, "{kind} at {rv} after {last_rv}: RVs go forward");
        last_rv = rv;
        seen.push(ev);
    }
    let got: Vec<(String, String)> = seen.iter().map(|e| (e["type"].as_str().unwrap().to_string(), name(&e["object"]))).collect();
    let (mut sorted_got, mut sorted_want) = (got.clone(), want.clone());
    sorted_got.sort();
    sorted_want.sort();
    assert_eq!(sorted_got, sorted_want, "exactly the changes missed, each once: {got:?}");
    let pos = |t: &str, n: &str| got.iter().position(|(a, b)| a == t && b == n).unwrap();
    assert!(pos("DELETED", "c5") < pos("ADDED", "c5"), "the old c5 goes before the new: {got:?}");
    for e in seen.iter().filter(|e| e["type"] != "DELETED") {
        let n = name(&e["object"]);
        let held = &objects[&n];
        assert_eq!(obj_rv(&e["object"]), obj_rv(held), "{n} at the RV the apiserver gave it");
        assert_eq!(e["object"]["data"], held["data"], "{n} as the apiserver holds it");
        assert_eq!(e["object"]["metadata"]["uid"], held["metadata"]["uid"], "{n}'s uid");
    }
    // And the cache holds what the apiserver holds.
    let l = k.api.get_ok(&format!("{cms}?resourceVersion=0")).await;
    let mut held: Vec<(String, u64)> = l["items"].as_array().unwrap().iter().map(|o| (name(o), obj_rv(o))).collect();
    held.sort();
    assert_eq!(held, objects.iter().map(|(n, o)| (n.clone(), obj_rv(o))).collect::<Vec<_>>());
    eprintln!("real_restart: the open watch got the {} changes it missed as events, then a bookmark: {got:?}", seen.len());
}
