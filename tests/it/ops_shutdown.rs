//! Operations: graceful shutdown of the `kache serve` binary.
//! - SIGTERM while a client watches and another is in the middle of a large cached LIST
//!   (30,000 pods of about 4 kB, read slowly): the watch stream ends cleanly (chunked body
//!   terminated, no reset), new connections are refused while the LIST is still streaming,
//!   the LIST completes with every item and valid JSON, and kache exits (status 0) within
//!   `--shutdown-grace`.
//! - SIGINT with a client that stops reading its LIST: the grace period bounds the shutdown
//!   (kache exits although that response never finishes).
//!
//! Timing assertions are only deadlines at or beyond the grace period.

use crate::support::ops::KacheBin;
use crate::support::{cluster, deadline, eventually, list_rv, start, Api, Next, TestSim, WatchStream};
use bytes::Bytes;
use http_body_util::{BodyExt, Empty};
use hyper::body::Incoming;
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use serde_json::value::RawValue;
use std::time::Duration;
use tokio::time::Instant;

/// A streaming GET on its own connection: the response head, and the body to read at will.
async fn open_stream(addr: std::net::SocketAddr, path: &str) -> (http::response::Parts, Incoming) {
    let client: Client<_, Empty<Bytes>> = Client::builder(TokioExecutor::new()).build_http();
    let req = http::Request::get(format!("http://{addr}{path}")).header("accept", "application/json").body(Empty::new()).expect("request");
    let resp =
        tokio::time::timeout(Duration::from_secs(60), client.request(req)).await.expect("response head within 60 s").expect("response");
    resp.into_parts()
}

/// Read body frames until at least `n` bytes (or the end) are in `buf`; Err on a body error.
async fn read_at_least(body: &mut Incoming, buf: &mut Vec<u8>, n: usize, until: Instant) -> Result<bool, String> {
    while buf.len() < n {
        match tokio::time::timeout_at(until, body.frame()).await {
            Err(_) => return Err(format!("deadline passed after {} bytes", buf.len())),
            Ok(None) => return Ok(false),
            Ok(Some(Err(e))) => return Err(format!("body error after {} bytes: {e}", buf.len())),
            Ok(Some(Ok(f))) => {
                if let Ok(d) = f.into_data() {
                    buf.extend_from_slice(&d);
                }
            }
        }
    }
    Ok(true)
}

#[derive(serde::Deserialize)]
struct ListItems<'a> {
    #[serde(borrow)]
    items: Vec<&'a RawValue>,
    metadata: serde_json::Value,
}

/// Wait (deadline 60 s) until `/metrics` shows an open cached watch on pods, so the watch
/// under test is kache's own (pass-through watches are the upstream's to end).
async fn cached_watch_open(k: &KacheBin) {
    eventually(60, 100, || async {
        let open = k.scrape().await.sum(kache::telemetry::WATCHES_OPEN, &[("resource", "pods")]);
        if open >= 1.0 {
            Ok(())
        } else {
            Err("the watch is not served from kache's cache".to_string())
        }
    })
    .await;
}

async fn big_sim(pods: &str) -> TestSim {
    start(&cluster(&["--nodes", "100", "--pods", pods, "--namespaces", "10", "--pod-size", "4000", "--bookmark-interval", "1"])).await
}

/// A simulator of `pods` pods, the `kache` binary in front of it (ready, with `grace`
/// seconds of shutdown grace), and a pod watch from the cache's current RV, open.
async fn ready_with_a_watch(pods: &str, grace: u64) -> (TestSim, KacheBin, WatchStream) {
    let sim = big_sim(pods).await;
    let grace = grace.to_string();
    let k = KacheBin::spawn(
        &format!("http://{}", sim.addr),
        &["--preload", "pods", "--preload-encodings", "json", "--shutdown-grace", &grace],
        &[],
        300,
    )
    .await;
    k.readyz_becomes(200, 300).await;
    let rv = list_rv(&k.api.get_ok("/api/v1/pods?resourceVersion=0&limit=1").await);
    let w = k.api.watch(&format!("/api/v1/pods?watch=1&resourceVersion={rv}"), "application/json").await;
    assert_eq!(w.status, 200);
    cached_watch_open(&k).await;
    (sim, k, w)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_finishes_the_running_list_ends_the_watch_and_exits_within_grace() {
    const GRACE: u64 = 30;
    // A watch from the cache's current RV, shown live by a pod created through kache.
    let (sim, mut k, mut w) = ready_with_a_watch("30000", GRACE).await;
    let pod = serde_json::json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "ops-shutdown", "namespace": "default"}, "spec": {"containers": [{"name": "c", "image": "busybox"}]}});
    k.api.must("create pod through kache", k.api.post("/api/v1/namespaces/default/pods", &pod).await).await;
    let end = deadline(60);
    loop {
        let ev = w.next_json(end).await.item("watch event for the new pod");
        if ev["type"] == "ADDED" && ev["object"]["metadata"]["name"] == "ops-shutdown" {
            break;
        }
    }

    // A LIST of every pod (about 120 MB of JSON) from the cache, on its own connection;
    // read its first megabyte, then stop reading.
    let (head, mut body) = open_stream(k.addr, "/api/v1/pods?resourceVersion=0").await;
    assert_eq!(head.status, 200);
    let length: usize = head
        .headers
        .get("content-length")
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse().ok())
        .expect("cached LIST has a Content-Length");
    assert!(length > 100_000_000, "the LIST is large ({length} bytes)");
    let mut list = Vec::with_capacity(length);
    assert!(read_at_least(&mut body, &mut list, 1 << 20, deadline(60)).await.expect("first MB of the LIST"), "LIST ended early");
    assert!(list.len() < length, "the LIST is still in flight");

    let t0 = Instant::now();
    k.signal("TERM");

    // The watch ends cleanly (json_until_end panics on a body error or a torn line).
    w.json_until_end(deadline(GRACE)).await;
    // kache stops accepting while the LIST still streams (we have not read it) ...
    eventually(GRACE, 50, || async {
        match tokio::net::TcpStream::connect(k.addr).await {
            Ok(_) => Err("kache still accepts connections after SIGTERM".to_string()),
            Err(_) => Ok(()),
        }
    })
    .await;
    assert!(k.child.0.try_wait().expect("try_wait").is_none(), "kache exited with a LIST in flight:\n{}", k.stderr());

    // ... which completes: read the rest in 4 MB steps with a pause between them.
    loop {
        let want = (list.len() + (4 << 20)).min(length);
        let more = read_at_least(&mut body, &mut list, want, t0 + Duration::from_secs(GRACE))
            .await
            .unwrap_or_else(|e| panic!("LIST after SIGTERM: {e}"));
        if !more || list.len() >= length {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(body.frame().await.is_none(), "LIST body ends after Content-Length");
    assert_eq!(list.len(), length, "the whole LIST arrived");
    let parsed: ListItems<'_> = serde_json::from_slice(&list).unwrap_or_else(|e| panic!("LIST is not valid JSON after SIGTERM: {e}"));
    assert_eq!(parsed.items.len(), 30_001, "every pod, including the one created before SIGTERM");
    assert!(parsed.metadata["resourceVersion"].as_str().is_some_and(|v| !v.is_empty()), "list metadata");
    drop(parsed);

    let status = k
        .wait_exit(t0 + Duration::from_secs(GRACE))
        .await
        .unwrap_or_else(|| panic!("kache did not exit within the {GRACE} s grace period:\n{}", k.stderr()));
    assert!(status.success(), "kache exit status after SIGTERM: {status}\n{}", k.stderr());
    assert!(k.stderr().contains("shutting down"), "shutdown is logged:\n{}", k.stderr());
    // The simulator is still up: only kache went away.
    assert_eq!(Api::new(&sim.addr.to_string()).get("/api/v1/namespaces/default/pods/ops-shutdown").await.status, 200);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigint_with_a_stalled_list_reader_exits_once_the_grace_period_ends() {
    const GRACE: u64 = 3;
    let (_sim, mut k, mut w) = ready_with_a_watch("5000", GRACE).await;
    // About 20 MB: more than the sockets buffer, so the response cannot finish unread.
    let (head, mut body) = open_stream(k.addr, "/api/v1/pods?resourceVersion=0").await;
    assert_eq!(head.status, 200);
    let length: usize =
        head.headers.get("content-length").and_then(|v| v.to_str().ok()).and_then(|v| v.parse().ok()).expect("Content-Length");
    let mut list = Vec::new();
    read_at_least(&mut body, &mut list, 64 << 10, deadline(60)).await.expect("first bytes of the LIST");

    let t0 = Instant::now();
    k.signal("INT");
    match w.next_json(deadline(60)).await {
        Next::End => {}
        other => panic!("watch after SIGINT: expected a clean end, got {other:?}"),
    }
    // Generous: the grace period plus time for the process to go away.
    let status = k
        .wait_exit(t0 + Duration::from_secs(GRACE + 30))
        .await
        .unwrap_or_else(|| panic!("kache still running {} s after SIGINT with a stalled reader:\n{}", GRACE + 30, k.stderr()));
    assert!(status.success(), "exit status: {status}");
    assert!(k.stderr().contains("grace period"), "the cut-off is logged:\n{}", k.stderr());
    // The stalled response was cut at the end of the grace period, not completed.
    let rest = read_at_least(&mut body, &mut list, length, deadline(30)).await;
    assert!(rest.is_err() && list.len() < length, "the unread LIST cannot have completed ({} of {length} bytes, {rest:?})", list.len());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_ends_the_upstreams_watches_too_and_exits_without_waiting_for_the_grace_period() {
    // A grace period far beyond the test's bound: only the watches ending lets kache exit.
    let (_sim, mut k, mut cached) = ready_with_a_watch("200", 600).await;
    // A Table watch with the objects in it: kache builds no such view, so the upstream
    // answers it through kache.
    let rv = list_rv(&k.api.get_ok("/api/v1/pods?resourceVersion=0&limit=1").await);
    let mut passed = k
        .api
        .watch(&format!("/api/v1/pods?watch=1&resourceVersion={rv}&includeObject=Object"), "application/json;as=Table;g=meta.k8s.io;v=v1")
        .await;
    assert_eq!(passed.status, 200);
    assert!(passed.headers.get(kache::api::FROM_CACHE_HEADER).is_none(), "the Table watch is the upstream's");

    let t0 = Instant::now();
    k.signal("TERM");
    // Both end cleanly (json_until_end panics on a body error or a torn line).
    cached.json_until_end(t0 + Duration::from_secs(60)).await;
    passed.json_until_end(t0 + Duration::from_secs(60)).await;
    let status = k
        .wait_exit(t0 + Duration::from_secs(60))
        .await
        .unwrap_or_else(|| panic!("kache still running 60 s after SIGTERM with only watches open:\n{}", k.stderr()));
    assert!(status.success(), "exit status: {status}\n{}", k.stderr());
    assert!(!k.stderr().contains("grace period"), "nothing was left to cut at the end of the grace period:\n{}", k.stderr());
}
