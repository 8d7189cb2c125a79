//! The revision ledger (issue #22): a consistent LIST proven current because every revision
//! since the cache's last proof was a write kache's watches saw to another resource, against
//! kache in front of the simulator (one revision per write, as etcd). A revision no watch saw
//! (`Sim::renew_lease`, as the apiserver's own keys) leaves the proof to a check; a write of
//! the listed kind itself is never skipped over.

use crate::support::{cluster, kache_in_front, list_rv, start, TestKache, TestSim, QUICK};
use kache::serve::PassThrough;
use serde_json::{json, Value};

const SIM: &[&str] = &["--nodes", "3", "--pods", "30", "--namespaces", "3"];

async fn setup(flags: &[&str]) -> (TestSim, TestKache) {
    let sim = start(&cluster(SIM)).await;
    // A small consistent read the ledger cannot prove is checked (`serve::check`) rather than
    // left to wait for a bookmark.
    let mut f = vec!["--preload", "pods,configmaps", "--consistent-passthrough-factor", "0.01"];
    f.extend_from_slice(flags);
    let k = kache_in_front(&sim.addr.to_string(), &f).await;
    assert!(k.serving.serve.wait_synced(QUICK).await, "preloaded caches sync");
    (sim, k)
}

fn passed(k: &TestKache) -> u64 {
    PassThrough::LABELS.iter().map(|l| k.serving.serve.passed_through(l)).sum()
}

fn names(v: &Value) -> Vec<String> {
    v["items"].as_array().unwrap().iter().map(|i| i["metadata"]["name"].as_str().unwrap().to_string()).collect()
}

/// Write the ConfigMap `c` in `default` directly at the simulator: a revision of a resource
/// kache watches. Returns its resourceVersion.
async fn write_configmap(sim: &TestSim, n: u64) -> u64 {
    let cm =
        json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c", "namespace": "default"}, "data": {"n": n.to_string()}});
    let r = match n {
        0 => sim.api.post("/api/v1/namespaces/default/configmaps", &cm).await,
        _ => sim.api.put("/api/v1/namespaces/default/configmaps/c", &cm).await,
    };
    assert!(r.status == 200 || r.status == 201, "{}", r.text());
    list_rv(&r.json())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_consistent_list_is_proven_by_other_resources_writes_and_never_past_its_own() {
    let (sim, k) = setup(&[]).await;
    let serve = &k.serving.serve;
    assert!(serve.wait_ledger(QUICK).await, "pods and configmaps share the simulator's revisions");
    let ns = sim.api.get("/api/v1/pods").await.json()["items"][0]["metadata"]["namespace"].as_str().unwrap().to_string();
    let path = format!("/api/v1/namespaces/{ns}/pods");
    // Only ConfigMaps move the resourceVersion: each read is proven by the ledger, with no
    // check and nothing passed through, at least as new as the writes before it.
    let (accounted, checked, through, hits) = (serve.checks("accounted"), serve.checks("same"), passed(&k), serve.cache_hits());
    for n in 0..3 {
        let rv = write_configmap(&sim, n).await;
        let r = k.api.get(&path).await;
        assert_eq!(r.status, 200, "{}", r.text());
        assert!(list_rv(&r.json()) >= rv, "read {n}: at or after the write the client saw answered");
    }
    assert_eq!(serve.checks("accounted"), accounted + 3, "proven by the ledger");
    assert_eq!((serve.checks("same"), passed(&k), serve.cache_hits()), (checked, through, hits + 3), "no check, all from cache");
    // A revision no watch of kache's saw: the ledger cannot close the gap; a check proves it.
    sim.sim.renew_lease();
    let (accounted, checked) = (serve.checks("accounted"), serve.checks("same") + serve.checks("proven"));
    let r = k.api.get(&path).await;
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(serve.checks("accounted"), accounted, "the lease's revision is nobody's kache knows");
    assert_eq!(serve.checks("same") + serve.checks("proven"), checked + 1, "checked instead");
    // The listed kind's own write is never skipped over: a pod created directly at the
    // simulator, then ConfigMaps written, is in the next consistent read however it is proven.
    for n in 0..5 {
        let name = format!("ledger-{n}");
        let pod = json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": ns}, "spec": {"containers": [{"name": "c", "image": "x"}]}});
        let created = sim.api.post(&path, &pod).await;
        assert_eq!(created.status, 201, "{}", created.text());
        write_configmap(&sim, 10 + n).await;
        let r = k.api.get(&path).await;
        assert_eq!(r.status, 200, "{}", r.text());
        assert!(names(&r.json()).contains(&name), "round {n}: the pod written before the read");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_the_ledger_off_other_resources_writes_prove_nothing() {
    let (sim, k) = setup(&["--revision-ledger", "off"]).await;
    let serve = &k.serving.serve;
    let ns = sim.api.get("/api/v1/pods").await.json()["items"][0]["metadata"]["namespace"].as_str().unwrap().to_string();
    write_configmap(&sim, 0).await;
    let checked = serve.checks("same") + serve.checks("proven");
    let r = k.api.get(&format!("/api/v1/namespaces/{ns}/pods")).await;
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(serve.checks("accounted"), 0);
    assert_eq!(serve.checks("same") + serve.checks("proven"), checked + 1, "checked, as before the ledger");
}
