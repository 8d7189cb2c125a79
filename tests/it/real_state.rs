//! The opt-in real tier (see `real_apiserver`): kache's restart with `--state-dir` in front of
//! the real apiserver. The first kache lists the pods and nodes and writes its caches when it
//! stops; the second resumes from them, and the apiserver's own metrics show that none of its
//! LISTs of those kinds returned an object meanwhile, while the restarted kache answers as the
//! apiserver does.

use crate::real_apiserver::*;
use crate::support::{kache_over, keys_rvs, TestKache};
use std::collections::BTreeMap;

async fn kache(up: &kache::upstream::Upstream, dir: &std::path::Path) -> TestKache {
    kache_over(up.clone(), &["--preload", "pods,nodes", "--state-dir", dir.to_str().unwrap(), "--state-interval", "0"]).await
}

/// Objects the apiserver's LISTs of pods and nodes have returned (from its watch cache or
/// etcd), from its /metrics.
async fn objects_listed(client: &kube::Client) -> u64 {
    let (code, body) = direct_get(client, "/metrics", "text/plain").await;
    assert_eq!(code, 200);
    let text = String::from_utf8_lossy(&body);
    text.lines()
        .filter(|l| {
            l.starts_with("apiserver_cache_list_returned_objects_total{") || l.starts_with("apiserver_storage_list_returned_objects_total{")
        })
        .filter(|l| l.contains("resource=\"pods\"") || l.contains("resource=\"nodes\""))
        .filter_map(|l| l.rsplit_once(' ')?.1.parse::<f64>().ok())
        .sum::<f64>() as u64
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn real_a_restarted_kache_resumes_from_its_saved_state_without_listing() {
    let Some(real) = real_upstream("real_state") else { return };
    let (up, client) = (real.upstream().await, real.client().await);
    let dir = tempfile::tempdir().unwrap();
    let cold = objects_listed(&client).await;
    let k1 = kache(&up, dir.path()).await;
    let listed = objects_listed(&client).await - cold;
    assert!(listed > 0, "the first kache lists the pods and nodes");
    k1.stop().await;

    let warm = objects_listed(&client).await;
    let k2 = kache(&up, dir.path()).await;
    assert_eq!(objects_listed(&client).await - warm, 0, "the restarted kache listed nothing (the first listed {listed} objects)");

    // It answers a consistent LIST as the apiserver does (proven current first).
    let through: BTreeMap<String, String> =
        keys_rvs(k2.api.get_ok("/api/v1/nodes").await["items"].as_array().unwrap()).into_iter().collect();
    let (code, body) = direct_get(&client, "/api/v1/nodes", "application/json").await;
    assert_eq!(code, 200);
    let direct: serde_json::Value = serde_json::from_slice(&body).unwrap();
    let direct: BTreeMap<String, String> = keys_rvs(direct["items"].as_array().unwrap()).into_iter().collect();
    assert_eq!(through, direct);
    assert!(through.len() > 1);
}
