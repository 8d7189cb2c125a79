//! Opt-in: the real kube-controller-manager through kache, its garbage collector and
//! namespace controller on, their informers (typed and metadata) answered from kache's cache.
//!
//! The garbage collector deletes every object whose owner does not exist, so this runs only
//! against a cluster of its own (`KACHE_REAL_KCM_KUBECONFIG`, e.g. a second apiserver from
//! the `real-apiserver` scripts' `start.sh` with `REAL_APISERVER=~/real-apiserver-kcm
//! APISERVER_PORT=6445 ETCD_PORT=2389 ETCD_PEER_PORT=2390`), never the populated one whose
//! pods name ReplicaSets that do not exist; the test checks first that every owner in the
//! cluster exists and is skipped otherwise. `KACHE_REAL_KCM` names the binary (default
//! `~/real-apiserver/bin/kube-controller-manager`, built by `build.sh`).
//!
//! ```sh
//! KACHE_REAL_KCM_KUBECONFIG=~/real-apiserver-kcm/kubeconfig KACHE_REAL_CONTEXT=admin \
//!   cargo test --test it real_kcm -- --nocapture
//! ```

use crate::support::real::real_upstream_named;
use crate::support::{kache_over, Api};
use serde_json::{json, Value};
use std::collections::HashSet;
use std::path::PathBuf;

/// Kinds whose objects the check of owners looks at (owners and dependents alike).
const KINDS: &[&str] = &[
    "/api/v1/pods",
    "/api/v1/configmaps",
    "/api/v1/secrets",
    "/api/v1/services",
    "/api/v1/serviceaccounts",
    "/api/v1/namespaces",
    "/api/v1/nodes",
    "/api/v1/endpoints",
    "/apis/apps/v1/replicasets",
    "/apis/apps/v1/deployments",
    "/apis/apps/v1/statefulsets",
    "/apis/apps/v1/daemonsets",
    "/apis/apps/v1/controllerrevisions",
    "/apis/batch/v1/jobs",
    "/apis/batch/v1/cronjobs",
    "/apis/discovery.k8s.io/v1/endpointslices",
    "/apis/coordination.k8s.io/v1/leases",
];

/// Owners named by objects of [`KINDS`] that are not among them: what the garbage
/// collector would delete the dependents of.
async fn dangling_owners(api: &Api) -> Vec<String> {
    let mut uids = HashSet::new();
    let mut refs = Vec::new();
    for path in KINDS {
        let l = api.get_ok(path).await;
        for o in l["items"].as_array().into_iter().flatten() {
            let m = &o["metadata"];
            uids.insert(m["uid"].as_str().unwrap_or_default().to_string());
            for r in m["ownerReferences"].as_array().into_iter().flatten() {
                let who = format!("{}/{} {} (owner of {}/{})", r["kind"], r["name"], r["uid"], m["namespace"], m["name"]);
                refs.push((r["uid"].as_str().unwrap_or_default().to_string(), who));
            }
        }
    }
    refs.into_iter().filter(|(uid, _)| !uids.contains(uid)).map(|(_, who)| who).collect()
}

/// Poll `check` every 200 ms for up to two minutes (a controller's work, not a timing
/// assertion: the bound only keeps a broken run from hanging).
async fn eventually<F: std::future::Future<Output = bool>>(what: &str, mut check: impl FnMut() -> F) {
    for _ in 0..600 {
        if check().await {
            return;
        }
        tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    }
    panic!("{what}: not within two minutes");
}

fn items(v: &Value) -> Vec<String> {
    v["items"].as_array().into_iter().flatten().map(|o| o["metadata"]["name"].as_str().unwrap_or_default().to_string()).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn real_kcm_garbage_collector_and_namespace_controller_work_through_kache_from_cache() {
    let Some(real) = real_upstream_named("real_kcm", "KACHE_REAL_KCM_KUBECONFIG") else { return };
    let binary = std::env::var_os("KACHE_REAL_KCM")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(std::env::var("HOME").unwrap_or_default()).join("real-apiserver/bin/kube-controller-manager"));
    if !binary.exists() {
        eprintln!("real_kcm: skipped, no kube-controller-manager at {} (KACHE_REAL_KCM)", binary.display());
        return;
    }
    let k = kache_over(real.upstream().await, &[]).await;
    let dangling = dangling_owners(&k.api).await;
    if !dangling.is_empty() {
        eprintln!(
            "real_kcm: skipped, the garbage collector would delete the dependents of {} owners that do not exist, e.g. {:?}",
            dangling.len(),
            &dangling[..dangling.len().min(3)]
        );
        return;
    }

    // Owners with dependents, a bystander, and a namespace to delete with content of
    // several kinds.
    let run = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_secs();
    let (gc, doomed) = (format!("kcm-gc-{run}"), format!("kcm-doomed-{run}"));
    for ns in [&gc, &doomed] {
        assert_eq!(
            k.api.post("/api/v1/namespaces", &json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}})).await.status,
            201
        );
        let sa = json!({"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": "default"}});
        assert_eq!(k.api.post(&format!("/api/v1/namespaces/{ns}/serviceaccounts"), &sa).await.status, 201);
    }
    let container = json!([{"name": "c", "image": "registry.example/app:1"}]);
    let rs = json!({"apiVersion": "apps/v1", "kind": "ReplicaSet", "metadata": {"name": "owner"}, "spec": {"replicas": 0,
        "selector": {"matchLabels": {"app": "owned"}}, "template": {"metadata": {"labels": {"app": "owned"}}, "spec": {"containers": container}}}});
    let rs = k.api.post(&format!("/apis/apps/v1/namespaces/{gc}/replicasets"), &rs).await.json();
    let cm_owner = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "owner"}});
    let cm_owner = k.api.post(&format!("/api/v1/namespaces/{gc}/configmaps"), &cm_owner).await.json();
    let bystander = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "bystander"}});
    assert_eq!(k.api.post(&format!("/api/v1/namespaces/{gc}/configmaps"), &bystander).await.status, 201);
    let owned_by = |o: &Value, kind: &str, api_version: &str| json!([{"apiVersion": api_version, "kind": kind, "name": "owner", "uid": o["metadata"]["uid"], "controller": true, "blockOwnerDeletion": true}]);
    for i in 0..20 {
        let pod = json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": format!("owned-{i}"), "labels": {"app": "owned"},
            "ownerReferences": owned_by(&rs, "ReplicaSet", "apps/v1")}, "spec": {"containers": container}});
        assert_eq!(k.api.post(&format!("/api/v1/namespaces/{gc}/pods"), &pod).await.status, 201);
        let cm = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": format!("owned-{i}"),
            "ownerReferences": owned_by(&cm_owner, "ConfigMap", "v1")}});
        assert_eq!(k.api.post(&format!("/api/v1/namespaces/{gc}/configmaps"), &cm).await.status, 201);
    }
    for i in 0..20 {
        let cm = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": format!("cm-{i}")}, "data": {"i": i.to_string()}});
        assert_eq!(k.api.post(&format!("/api/v1/namespaces/{doomed}/configmaps"), &cm).await.status, 201);
    }
    for i in 0..5 {
        let pod = json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": format!("pod-{i}")}, "spec": {"containers": container}});
        assert_eq!(k.api.post(&format!("/api/v1/namespaces/{doomed}/pods"), &pod).await.status, 201);
        let secret = json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": format!("s-{i}")}, "data": {"a": "eA=="}});
        assert_eq!(k.api.post(&format!("/api/v1/namespaces/{doomed}/secrets"), &secret).await.status, 201);
    }

    // The controller-manager, pointed at kache (plain HTTP, as the test kache serves).
    let dir = tempfile::tempdir().unwrap();
    let kubeconfig = dir.path().join("kubeconfig");
    std::fs::write(&kubeconfig, kache::app::kubeconfig(&format!("http://{}", k.serving.addr), "kcm")).unwrap();
    let (hits, metadata) = (k.serving.serve.cache_hits(), k.serving.serve.metadata_hits());
    let log = std::fs::File::create(dir.path().join("kcm.log")).unwrap();
    let mut kcm = std::process::Command::new(&binary)
        .arg(format!("--kubeconfig={}", kubeconfig.display()))
        .args(["--controllers=garbage-collector-controller,namespace-controller", "--leader-elect=false", "--secure-port=0", "--v=1"])
        .stdout(log.try_clone().unwrap())
        .stderr(log)
        .spawn()
        .expect("kube-controller-manager starts");

    // Owners deleted through kache: their dependents are collected, the bystander stays.
    assert_eq!(k.api.delete(&format!("/apis/apps/v1/namespaces/{gc}/replicasets/owner?propagationPolicy=Background")).await.status, 200);
    assert_eq!(k.api.delete(&format!("/api/v1/namespaces/{gc}/configmaps/owner")).await.status, 200);
    // A namespace deleted through kache: emptied, then removed.
    assert_eq!(k.api.delete(&format!("/api/v1/namespaces/{doomed}")).await.status, 200);
    let api = &k.api;
    eventually("the dependents are collected", || async {
        items(&api.get_ok(&format!("/api/v1/namespaces/{gc}/pods")).await).is_empty()
            && items(&api.get_ok(&format!("/api/v1/namespaces/{gc}/configmaps")).await) == ["bystander"]
    })
    .await;
    eventually("the namespace is emptied and removed", || async { api.get(&format!("/api/v1/namespaces/{doomed}")).await.status == 404 })
        .await;
    let (hits, metadata) = (k.serving.serve.cache_hits() - hits, k.serving.serve.metadata_hits() - metadata);
    assert_eq!(k.api.delete(&format!("/api/v1/namespaces/{gc}")).await.status, 200);
    eventually("the test's other namespace is removed", || async { api.get(&format!("/api/v1/namespaces/{gc}")).await.status == 404 })
        .await;
    let _ = (kcm.kill(), kcm.wait());
    eprintln!(
        "real_kcm: 20 pods and 20 ConfigMaps collected after their owners' deletion, namespace {doomed} emptied and removed; \
         {hits} requests answered from cache while the controller-manager ran, {metadata} of them as PartialObjectMetadata"
    );
    assert!(hits > 0 && metadata > 0, "the controller-manager's informers and metadata reads were answered from cache");
}
