//! kache's own restart with `--state-dir`: the caches written at shutdown are read back, each
//! preloaded kind resumes its upstream watch from the saved resourceVersion instead of
//! listing, and an informer watching through kache resumes too, with the changes made while
//! kache was down. A state of another cluster is refused and the kind listed. The upstream is
//! the simulator with RBAC and an audit log, which counts kache's LISTs.

use crate::support::auth::{SecureSim, Who, KACHE_SA};
use crate::support::{deadline, kache_over_at, keys_rvs, obj_rv, TestKache};
use http::Method;
use k8s_openapi::api::core::v1::Pod;
use kache::upstream::Upstream;
use serde_json::json;
use std::collections::BTreeMap;
use std::path::Path;

/// A kache in front of `up` on `listen`, keeping its caches in `dir`, its pods and nodes
/// preloaded.
pub(crate) async fn kache(up: &Upstream, listen: &str, dir: &Path) -> TestKache {
    kache_over_at(up.clone(), listen, &["--preload", "pods,nodes", "--state-dir", dir.to_str().unwrap(), "--state-interval", "0"]).await
}

/// LISTs of the pods collection kache sent the simulator so far (its one-name probes of the
/// upstream's resourceVersion are not lists of the collection).
pub(crate) fn pod_lists(sim: &SecureSim) -> usize {
    sim.audit(|r| {
        r.user.username == KACHE_SA
            && r.attributes.verb == "list"
            && r.attributes.resource.as_ref().is_some_and(|a| a.resource == "pods" && !a.field_selector.contains("metadata.name"))
    })
    .len()
}

/// LISTs kache sent the simulator so far of anything but CRDs (which it lists at discovery):
/// the pods, its one-name probes, and the identity of the cluster if it listed it.
pub(crate) fn cached_kind_lists(sim: &SecureSim) -> usize {
    sim.audit(|r| {
        r.user.username == KACHE_SA
            && r.attributes.verb == "list"
            && r.attributes.resource.as_ref().is_some_and(|a| a.resource != "customresourcedefinitions")
    })
    .len()
}

/// Watches kache sent of the namespace `kube-system` alone.
fn kube_system_watches(sim: &SecureSim) -> usize {
    sim.audit(|r| {
        r.user.username == KACHE_SA
            && r.attributes.verb == "watch"
            && r.attributes.resource.as_ref().is_some_and(|a| a.resource == "namespaces" && a.field_selector.contains("kube-system"))
    })
    .len()
}

/// The simulator's pods: (namespace/name, RV).
pub(crate) async fn sim_pods(sim: &SecureSim) -> BTreeMap<String, String> {
    sim_pods_where(sim, "").await
}

/// The simulator's pods a list's `query` (`?fieldSelector=...`) picks: (namespace/name, RV).
pub(crate) async fn sim_pods_where(sim: &SecureSim, query: &str) -> BTreeMap<String, String> {
    let admin = sim.client(Who::Token("admin-token"));
    let list = admin.must(admin.get(&format!("/api/v1/pods{query}")).await);
    keys_rvs(list["items"].as_array().unwrap()).into_iter().collect()
}

pub(crate) async fn patch(sim: &SecureSim, ns: &str, name: &str, label: &str) -> u64 {
    let admin = sim.client(Who::Token("admin-token"));
    let body = serde_json::to_vec(&json!({"metadata": {"labels": {"restart": label}}})).unwrap();
    let path = format!("/api/v1/namespaces/{ns}/pods/{name}");
    obj_rv(&admin.must(admin.request(Method::PATCH, &path, &[("content-type", "application/merge-patch+json")], body).await))
}

/// A kube-rs watcher of pods, its store kept from its events.
pub(crate) struct Informer {
    events: tokio::sync::mpsc::UnboundedReceiver<Result<kube::runtime::watcher::Event<Pod>, kube::runtime::watcher::Error>>,
    /// (namespace/name, RV) of every pod.
    pub(crate) store: BTreeMap<String, String>,
    listing: BTreeMap<String, String>,
    /// Its (re)lists begun.
    pub(crate) inits: usize,
}

impl Informer {
    /// Watch the pods `config` picks (every pod with the default config).
    pub(crate) fn start(client: kube::Client, config: kube::runtime::watcher::Config) -> Informer {
        use futures_util::StreamExt;
        let (tx, events) = tokio::sync::mpsc::unbounded_channel();
        tokio::spawn(async move {
            let stream = kube::runtime::watcher(kube::Api::<Pod>::all(client), config);
            tokio::pin!(stream);
            while let Some(ev) = stream.next().await {
                if tx.send(ev).is_err() {
                    return;
                }
            }
        });
        Informer { events, store: BTreeMap::new(), listing: BTreeMap::new(), inits: 0 }
    }

    /// Apply its events until its store equals `want`.
    pub(crate) async fn follow(&mut self, want: &BTreeMap<String, String>) {
        use kube::runtime::watcher::Event;
        let key = |p: &Pod| format!("{}/{}", p.metadata.namespace.as_deref().unwrap(), p.metadata.name.as_deref().unwrap());
        let rv = |p: &Pod| p.metadata.resource_version.clone().unwrap();
        let end = deadline(60);
        while &self.store != want {
            let next = tokio::time::timeout_at(end, self.events.recv()).await;
            let ev =
                next.unwrap_or_else(|_| panic!("the informer's store reaches the simulator's: {:?} of {:?}", self.store.len(), want.len()));
            match ev.expect("the watcher runs") {
                Ok(Event::Init) => {
                    self.inits += 1;
                    self.listing.clear();
                }
                Ok(Event::InitApply(p)) => {
                    self.listing.insert(key(&p), rv(&p));
                }
                Ok(Event::InitDone) => self.store = std::mem::take(&mut self.listing),
                Ok(Event::Apply(p)) => {
                    self.store.insert(key(&p), rv(&p));
                }
                Ok(Event::Delete(p)) => {
                    self.store.remove(&key(&p));
                }
                // Kache is down for a moment: the watcher retries.
                Err(_) => {}
            }
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restarted_kache_resumes_from_its_saved_state_and_so_do_its_informers_without_a_list() {
    let sim = SecureSim::start().await;
    let up = Upstream::load(Some(&sim.upstream_kubeconfig()), None).await.unwrap();
    let dir = tempfile::tempdir().unwrap();
    let k1 = kache(&up, "127.0.0.1:0", dir.path()).await;
    let addr = k1.serving.addr;
    let listed = pod_lists(&sim);
    assert!(listed > 0, "the first kache lists the pods");

    // A kube-rs informer (LIST, then WATCH) through kache.
    let client = kube::Client::try_from(kube::Config::new(format!("http://{addr}").parse().unwrap())).unwrap();
    let mut informer = Informer::start(client, kube::runtime::watcher::Config::default());
    informer.follow(&sim_pods(&sim).await).await;
    patch(&sim, "a", "a-pod-0", "before").await;
    informer.follow(&sim_pods(&sim).await).await;

    // Kache stops (its caches are written once it has), the cluster changes meanwhile, and a
    // new kache starts on the same address from the saved state.
    let nodes = up.ledger().writer("", "nodes").unwrap();
    assert!(up.ledger().wait_trusted(nodes, std::time::Duration::from_secs(60)).await, "the ledger trusts the nodes in time");
    k1.stop().await;
    let files: Vec<String> = std::fs::read_dir(dir.path()).unwrap().map(|e| e.unwrap().file_name().into_string().unwrap()).collect();
    assert!(files.contains(&"core.v1.pods.json".to_string()) && files.contains(&"core.v1.pods.pb".to_string()), "{files:?}");
    patch(&sim, "a", "a-pod-1", "while-down").await;
    let admin = sim.client(Who::Token("admin-token"));
    admin.must(admin.request(Method::DELETE, "/api/v1/namespaces/b/pods/b-pod-2", &[], vec![]).await);
    let born = json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "born-while-down", "namespace": "b"},
        "spec": {"nodeName": "node-0001", "containers": [{"name": "c", "image": "busybox"}]}});
    admin.must(admin.post("/api/v1/namespaces/b/pods", &born).await);
    // A new process's upstream: nothing of the first kache's ledger.
    let trust = up.ledger().trust_book();
    assert_eq!(trust.trusted.len(), 2, "pods and nodes share the simulator's storage: {trust:?}");
    let up = Upstream::load(Some(&sim.upstream_kubeconfig()), None).await.unwrap();
    let (lists_before, identities) = (cached_kind_lists(&sim), kube_system_watches(&sim));
    let k2 = kache(&up, &addr.to_string(), dir.path()).await;
    assert_eq!(pod_lists(&sim), listed, "the restarted kache resumed its watches: no LIST of the pods");
    // The cluster's identity is read by a WatchList of kube-system, not a LIST.
    assert_eq!(cached_kind_lists(&sim), lists_before, "the restarted kache listed nothing");
    assert_eq!(kube_system_watches(&sim), identities + 1, "one watch of kube-system read the cluster's identity");
    // The ledger's trust is taken back, not earned again (that compares resourceVersions a
    // second apart, three times: not done by the time kache is ready).
    assert_eq!(up.ledger().trust_book(), trust, "the revision ledger trusts what it trusted before");

    // The informer resumes from its resourceVersion: the changes missed arrive as events, and
    // it never lists again.
    let want = sim_pods(&sim).await;
    informer.follow(&want).await;
    assert_eq!(informer.inits, 1, "one LIST of the informer's in all");
    assert!(informer.store.contains_key("b/born-while-down") && !informer.store.contains_key("b/b-pod-2"));
    // Kache's cache answers as the simulator does.
    assert_eq!(cached_pods(&k2).await, want);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_state_saved_for_another_cluster_is_refused_and_the_kind_listed() {
    let first = SecureSim::start().await;
    let up = Upstream::load(Some(&first.upstream_kubeconfig()), None).await.unwrap();
    let dir = tempfile::tempdir().unwrap();
    kache(&up, "127.0.0.1:0", dir.path()).await.stop().await;
    assert!(dir.path().join("core.v1.pods.json").is_file());

    // Another cluster: its pods differ from the first's, and its kube-system is another.
    let other = SecureSim::start().await;
    let admin = other.client(Who::Token("admin-token"));
    admin.must(admin.request(Method::DELETE, "/api/v1/namespaces/a/pods/a-pod-0", &[], vec![]).await);
    let up = Upstream::load(Some(&other.upstream_kubeconfig()), None).await.unwrap();
    let k2 = kache(&up, "127.0.0.1:0", dir.path()).await;
    assert!(pod_lists(&other) > 0, "the state was refused and the pods listed");
    assert_eq!(cached_pods(&k2).await, sim_pods(&other).await, "kache serves the cluster it is in front of");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn secrets_are_written_only_with_state_secrets() {
    let sim = SecureSim::start().await;
    let up = Upstream::load(Some(&sim.upstream_kubeconfig()), None).await.unwrap();
    let files = |dir: &Path| -> Vec<String> {
        let mut f: Vec<String> = std::fs::read_dir(dir).unwrap().map(|e| e.unwrap().file_name().into_string().unwrap()).collect();
        f.sort();
        f
    };
    for (extra, secrets) in [(None, false), (Some("--state-secrets"), true)] {
        let dir = tempfile::tempdir().unwrap();
        let mut flags = vec!["--preload", "pods,secrets", "--state-dir", dir.path().to_str().unwrap(), "--state-interval", "0"];
        flags.extend(extra);
        kache_over_at(up.clone(), "127.0.0.1:0", &flags).await.stop().await;
        let written = files(dir.path());
        assert!(written.contains(&"core.v1.pods.json".to_string()), "{written:?}");
        assert_eq!(written.iter().any(|f| f.starts_with("core.v1.secrets.")), secrets, "{extra:?}: {written:?}");
    }
}

/// kache's pods at resourceVersion 0: (namespace/name, RV).
pub(crate) async fn cached_pods(k: &TestKache) -> BTreeMap<String, String> {
    let list = k.api.get_ok("/api/v1/pods?resourceVersion=0").await;
    keys_rvs(list["items"].as_array().unwrap()).into_iter().collect()
}
