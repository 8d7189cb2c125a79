//! The opt-in tier (see `real_apiserver`): a tenant's HTTP/2 watches that grant no window,
//! beside an honest watcher, against kache in front of the real apiserver.

use crate::real_apiserver::{real_with, NS};
use crate::support::{deadline, list_rv, Next};
use crate::tenant::zero_window_watches;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn real_zero_window_watches_are_reset_and_an_honest_watcher_gets_every_event() {
    let Some(k) = real_with("real_zero_window_watches", &["--preload", "pods,configmaps"]).await else { return };
    let addr = k.serving.addr.to_string();
    // Every pod of the cluster as ADDED events, on streams that may carry none of them.
    let stalled = zero_window_watches(&addr, "/api/v1/pods?watch=1&resourceVersion=0", 2, 50).await;

    let honest = k.client();
    let rv = list_rv(&honest.get(&format!("/api/v1/namespaces/{NS}/configmaps")).await.json());
    let mut watch = honest.watch(&format!("/api/v1/namespaces/{NS}/configmaps?watch=1&resourceVersion={rv}"), "application/json").await;
    assert_eq!(watch.status, 200);
    let mut written = Vec::new();
    for i in 0..10 {
        let name = format!("zero-window-honest-{i}-{rv}");
        let cm = k.client().create_cm(NS, &name, serde_json::json!({"i": i.to_string()})).await;
        written.push(cm["metadata"]["name"].as_str().unwrap().to_string());
    }
    let mut seen = Vec::new();
    while seen.len() < written.len() {
        match watch.next_json(deadline(60)).await {
            Next::Item(e) if e["type"] == "ADDED" => seen.push(e["object"]["metadata"]["name"].as_str().unwrap().to_string()),
            Next::Item(_) => {}
            other => panic!("the honest watch ended early: {other:?} after {seen:?}"),
        }
    }
    assert_eq!(seen, written, "every event, in order");
    for end in stalled {
        let reason = tokio::time::timeout(std::time::Duration::from_secs(120), end).await.expect("reset in time").unwrap();
        assert_eq!(reason, Some(h2::Reason::CANCEL));
    }
    for name in written {
        k.client().delete(&format!("/api/v1/namespaces/{NS}/configmaps/{name}")).await;
    }
}
