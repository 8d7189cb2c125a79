//! The opt-in real tier (see `real_apiserver`): a client-go informer through kache.
//!
//! `informer-sync` (client-go 1.36's shared informer of every pod, built by
//! `loadtest/clientgo/build.sh` into `~/real-apiserver/bin`; `KACHE_REAL_INFORMER` names
//! another) starts with a WatchList, which kache answers from its cache, gzipped. The informer
//! syncs, and a change made after the sync reaches its handler while nothing else changes
//! pods. Go's inflater hands out a stored block's bytes only when the next block begins or
//! at an empty stored block (`serve::compress::watch`), so kache sends an empty one after
//! each stored event: without it such a change would wait for the kind's next one, and a
//! WatchList whose end bookmark came after the state was sent would not sync at all.

use crate::real_apiserver::*;
use serde_json::json;
use std::path::PathBuf;

/// The next line of `rx` that starts with `prefix` (at most three minutes: the bound only
/// keeps a broken run from hanging).
async fn line_starting(rx: &mut tokio::sync::mpsc::UnboundedReceiver<String>, prefix: &str) -> String {
    let next = async {
        while let Some(l) = rx.recv().await {
            if l.starts_with(prefix) {
                return l;
            }
        }
        panic!("the informer ended before a line starting with {prefix:?}");
    };
    tokio::time::timeout(std::time::Duration::from_secs(180), next).await.unwrap_or_else(|_| panic!("no line starting with {prefix:?}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn real_a_client_go_watch_list_informer_syncs_through_kache_and_gets_a_change_at_once() {
    let binary = std::env::var_os("KACHE_REAL_INFORMER")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(std::env::var("HOME").unwrap_or_default()).join("real-apiserver/bin/informer-sync"));
    let Some(up) = real_upstream("real_informer") else { return };
    if !binary.exists() {
        eprintln!("real_informer: skipped, no informer-sync at {} (loadtest/clientgo/build.sh)", binary.display());
        return;
    }
    let k = over(&up, &["--preload", "pods"]).await;
    let sa = json!({"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": "default"}});
    k.api.post(&format!("/api/v1/namespaces/{NS}/serviceaccounts"), &sa).await;
    let name = format!("informed-{}", std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_millis());
    let pod = json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name},
        "spec": {"containers": [{"name": "c", "image": "registry.example/app:1"}]}});
    let r = k.api.post(&format!("/api/v1/namespaces/{NS}/pods"), &pod).await;
    assert_eq!(r.status, 201, "{}", r.text());

    let dir = tempfile::tempdir().unwrap();
    let kubeconfig = dir.path().join("kubeconfig");
    std::fs::write(&kubeconfig, kache::app::kubeconfig(&format!("http://{}", k.serving.addr), "informer")).unwrap();
    let changed = dir.path().join("changed");
    let before = k.serving.serve.cache_hits();
    let mut informer = std::process::Command::new(&binary)
        .arg(format!("-kubeconfig={}", kubeconfig.display()))
        .args(["-watchlist=true", "-follow=170s"])
        .arg(format!("-digest-at={}", changed.display()))
        .stdout(std::process::Stdio::piped())
        .stderr(std::fs::File::create(dir.path().join("informer.log")).unwrap())
        .spawn()
        .expect("informer-sync starts");
    let mut rx = crate::support::stdout_lines(&mut informer);
    let synced = line_starting(&mut rx, "synced ").await;
    assert!(synced.contains("watchlist=true"), "{synced}");
    assert!(k.serving.serve.cache_hits() > before, "the WatchList was answered from kache's cache");

    // One change, and none after it: the informer must get it without a next event.
    let path = format!("/api/v1/namespaces/{NS}/pods/{name}");
    assert_eq!(k.api.patch(&path, &json!({"metadata": {"labels": {"informed": "yes"}}})).await.status, 200);
    std::fs::write(&changed, b"").unwrap();
    let events = line_starting(&mut rx, "events after sync:").await;
    // Its exit is a moment away: waited for off the runtime's workers, which serve kache.
    let _ = tokio::task::spawn_blocking(move || informer.wait()).await;
    assert!(events.contains("updates=1 "), "the change reached the informer's handler: {events}");
    assert_eq!(k.api.delete(&path).await.status, 200);
}
