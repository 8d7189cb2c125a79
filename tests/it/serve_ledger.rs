//! The revision ledger: a consistent LIST proven current because every revision since the
//! cache's last proof was a write kache's watches saw to another resource, against kache in
//! front of the simulator (one revision per write, as etcd). A revision no watch saw
//! (`Sim::renew_lease`, as the apiserver's own keys) leaves the proof to a check; a write
//! of the listed kind itself is never skipped over.

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

/// The upstream's current revision, read at the simulator.
async fn sim_rv(sim: &TestSim) -> u64 {
    list_rv(&sim.api.get("/api/v1/namespaces/default/configmaps").await.json())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn another_resources_deletion_proves_a_read_unless_a_kache_told_it() {
    let (sim, k1) = setup(&[]).await;
    let ns = sim.api.get("/api/v1/pods").await.json()["items"][0]["metadata"]["namespace"].as_str().unwrap().to_string();
    let path = format!("/api/v1/namespaces/{ns}/pods");
    let mut k2 = None;
    for (n, tier) in [false, true].into_iter().enumerate() {
        // Then a second kache in front of the first (a tier): the first tells it deletions
        // from its cache, at resourceVersions a relist of its may have chosen. Started only
        // now, so that its own consistent reads of the first are not among the first's counts.
        if tier {
            let flags = ["--preload", "pods,configmaps", "--consistent-passthrough-factor", "0.01"];
            k2 = Some(kache_in_front(&k1.serving.addr.to_string(), &flags).await);
        }
        let k = if tier { k2.as_ref().expect("started above") } else { &k1 };
        let serve = &k.serving.serve;
        assert!(serve.wait_ledger(QUICK).await, "tier {tier}: pods and configmaps share the upstream's revisions");
        let cms = serve.cache("", "configmaps", kache::api::media::Format::Json).expect("the configmaps cache");
        // A ConfigMap written and read back: the pods' cache is proven up to its revision.
        let name = format!("gone-{n}");
        let cm = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name, "namespace": "default"}});
        assert_eq!(sim.api.post("/api/v1/namespaces/default/configmaps", &cm).await.status, 201);
        assert!(cms.wait_for(sim_rv(&sim).await, QUICK).await, "tier {tier}: the creation reached kache");
        assert_eq!(k.api.get(&path).await.status, 200);
        // Then deleted: the only revision since.
        let deleted = sim.api.delete(&format!("/api/v1/namespaces/default/configmaps/{name}")).await;
        assert_eq!(deleted.status, 200, "{}", deleted.text());
        let rv = sim_rv(&sim).await;
        assert!(cms.wait_for(rv, QUICK).await, "tier {tier}: the deletion reached kache");
        assert!(cms.snapshot().get(&format!("default/{name}")).is_none());
        let (accounted, checked) = (serve.checks("accounted"), serve.checks("same") + serve.checks("proven"));
        let r = k.api.get(&path).await;
        assert_eq!(r.status, 200, "{}", r.text());
        assert!(list_rv(&r.json()) >= rv, "tier {tier}: at or after the deletion");
        assert_eq!(serve.checks("accounted") - accounted, u64::from(!tier), "tier {tier}: proven by the deletion's revision");
        assert_eq!(serve.checks("same") + serve.checks("proven") - checked, u64::from(tier), "tier {tier}: checked instead");
    }
}
