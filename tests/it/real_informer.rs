//! The opt-in real tier (see `real_apiserver`): a client-go informer through kache.
//!
//! `informer-sync` (client-go 1.36's shared informer of every pod, built by
//! `loadtest/clientgo/build.sh` into `~/real-apiserver/bin`; `KACHE_REAL_INFORMER` names
//! another) starts with a WatchList, which kache answers from its cache, gzipped. The informer
//! syncs, and a change made after the sync reaches its handler while nothing else changes
//! pods. Go's inflater hands out a stored block's bytes only when the next block begins or
//! at an empty stored block (`serve::compress::watch`): before kache sent an empty one after
//! each stored event, such a change waited for the kind's next one, and a WatchList whose
//! end bookmark came after the state was sent did not sync at all.

use crate::real_apiserver::*;
use serde_json::json;
use std::io::BufRead;
use std::path::PathBuf;
use std::sync::mpsc;

/// The lines `child`'s stdout prints, as they come.
fn lines(child: &mut std::process::Child) -> mpsc::Receiver<String> {
    let out = child.stdout.take().expect("stdout piped");
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        for line in std::io::BufReader::new(out).lines().map_while(Result::ok) {
            if tx.send(line).is_err() {
                return;
            }
        }
    });
    rx
}

/// The next line of `rx` that starts with `prefix` (at most three minutes: the bound only
/// keeps a broken run from hanging).
fn line_starting(rx: &mpsc::Receiver<String>, prefix: &str) -> String {
    let end = std::time::Instant::now() + std::time::Duration::from_secs(180);
    loop {
        let left = end.saturating_duration_since(std::time::Instant::now());
        match rx.recv_timeout(left) {
            Ok(l) if l.starts_with(prefix) => return l,
            Ok(_) => {}
            Err(e) => panic!("no line starting with {prefix:?}: {e}"),
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn real_a_client_go_watch_list_informer_syncs_through_kache_and_gets_a_change_at_once() {
    let binary = std::env::var_os("KACHE_REAL_INFORMER")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(std::env::var("HOME").unwrap_or_default()).join("real-apiserver/bin/informer-sync"));
    if std::env::var_os("KACHE_REAL_KUBECONFIG").is_some() && !binary.exists() {
        eprintln!("real_informer: skipped, no informer-sync at {} (loadtest/clientgo/build.sh)", binary.display());
        return;
    }
    let Some(k) = real("real_informer", "pods").await else { return };
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
    let rx = lines(&mut informer);
    // The waits block: off the runtime's workers, which serve kache.
    let (rx, synced) = tokio::task::spawn_blocking(move || {
        let l = line_starting(&rx, "synced ");
        (rx, l)
    })
    .await
    .unwrap();
    assert!(synced.contains("watchlist=true"), "{synced}");
    assert!(k.serving.serve.cache_hits() > before, "the WatchList was answered from kache's cache");

    // One change, and none after it: the informer must get it without a next event.
    let path = format!("/api/v1/namespaces/{NS}/pods/{name}");
    assert_eq!(k.api.patch(&path, &json!({"metadata": {"labels": {"informed": "yes"}}})).await.status, 200);
    std::fs::write(&changed, b"").unwrap();
    let (events, _) = tokio::task::spawn_blocking(move || (line_starting(&rx, "events after sync:"), informer.wait())).await.unwrap();
    assert!(events.contains("updates=1 "), "the change reached the informer's handler: {events}");
    assert_eq!(k.api.delete(&path).await.status, 200);
}
