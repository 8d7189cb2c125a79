//! One tenant cannot take the cache down: the per-client bounds hold through real
//! connections (watches, upgraded sessions, slow readers), and a hostile tenant's requests
//! cost what the bounds say.

use crate::support::{cluster, eventually, kache_in_front, start};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

const SIM: &[&str] = &["--nodes", "3", "--pods", "30", "--namespaces", "3"];

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn watches_count_against_their_clients_bound() {
    let sim = start(&cluster(SIM)).await;
    let kache = kache_in_front(&sim.addr.to_string(), &["--preload", "pods,configmaps", "--max-watches-per-client", "2"]).await;
    let w1 = kache.api.watch("/api/v1/pods?watch=1", "application/json").await;
    let w2 = kache.api.watch("/api/v1/configmaps?watch=1", "application/json").await;
    assert_eq!((w1.status, w2.status), (200, 200));
    let third = kache.api.watch("/api/v1/namespaces/ns-001/pods?watch=1", "application/json").await;
    assert_eq!(third.status, 429, "a third watch of the same client");
    assert_eq!(third.headers.get("retry-after").and_then(|v| v.to_str().ok()), Some("1"));
    // Reads are not watches.
    assert_eq!(kache.api.get("/api/v1/pods?resourceVersion=0&limit=1").await.status, 200);
    drop(w1);
    // The place comes back when kache sees the watch's client go.
    let api = &kache.api;
    eventually(30, 50, || async move {
        let w = api.watch("/api/v1/pods?watch=1", "application/json").await;
        if w.status == 200 {
            Ok(())
        } else {
            Err(format!("HTTP {}", w.status))
        }
    })
    .await;
    drop(w2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_clients_watch_starts_from_no_resource_version_past_its_rate_get_429() {
    let sim = start(&cluster(SIM)).await;
    // One start a second, ten at once.
    let kache = kache_in_front(&sim.addr.to_string(), &["--preload", "pods", "--max-watch-starts-per-client", "1"]).await;
    let addr = kache.serving.addr.to_string();
    // Twenty at once from one client, each of which would need a consistency proof.
    let starts: Vec<_> = (0..20)
        .map(|_| {
            let api = crate::support::Api::new(&addr);
            tokio::spawn(async move { api.watch("/api/v1/pods?watch=1", "application/json").await })
        })
        .collect();
    let mut watches = Vec::new();
    for s in starts {
        watches.push(s.await.unwrap());
    }
    let refused: Vec<_> = watches.iter().filter(|w| w.status == 429).collect();
    let started = watches.iter().filter(|w| w.status == 200).count();
    assert_eq!(started + refused.len(), 20, "{:?}", watches.iter().map(|w| w.status).collect::<Vec<_>>());
    assert!(started >= 10, "the ten at once start: {started}");
    assert!(!refused.is_empty(), "the rest are refused: {started} started");
    for w in refused {
        assert_eq!(w.headers.get("retry-after").and_then(|v| v.to_str().ok()), Some("1"));
    }
    // A watch from a resourceVersion needs no proof and is not counted.
    let rv = crate::support::list_rv(&kache.api.get_ok("/api/v1/pods?resourceVersion=0&limit=1").await);
    assert_eq!(kache.api.watch(&format!("/api/v1/pods?watch=1&resourceVersion={rv}"), "application/json").await.status, 200);
}

/// A relay in front of the simulator that answers an `exec` request on a fresh connection
/// with `101 Switching Protocols` and keeps the session open (the simulator has no exec),
/// and splices every other connection to the simulator.
async fn exec_relay(sim: std::net::SocketAddr) -> std::net::SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        loop {
            let Ok((mut client, _)) = listener.accept().await else { return };
            tokio::spawn(async move {
                let mut head = vec![0u8; 4096];
                let mut n = 0;
                // The first bytes; of an HTTP/1.1 GET, its whole request line.
                loop {
                    match client.read(&mut head[n..]).await {
                        Ok(0) | Err(_) => return,
                        Ok(k) => n += k,
                    }
                    let got = &head[..n];
                    if !got.starts_with(b"GET ") || got.contains(&b'\n') || n == head.len() {
                        break;
                    }
                }
                let line = String::from_utf8_lossy(&head[..n]).lines().next().unwrap_or("").to_string();
                if line.starts_with("GET ") && line.contains("/exec") {
                    let _ = client.write_all(b"HTTP/1.1 101 Switching Protocols\r\nConnection: Upgrade\r\nUpgrade: SPDY/3.1\r\n\r\n").await;
                    // The session: whatever comes, until the client closes.
                    let mut buf = [0u8; 1024];
                    while matches!(client.read(&mut buf).await, Ok(k) if k > 0) {}
                    return;
                }
                let Ok(mut upstream) = TcpStream::connect(sim).await else { return };
                if upstream.write_all(&head[..n]).await.is_err() {
                    return;
                }
                let _ = tokio::io::copy_bidirectional(&mut client, &mut upstream).await;
            });
        }
    });
    addr
}

/// Open an exec session through kache: the 101 and the upgraded stream.
async fn exec(kache: std::net::SocketAddr) -> (u16, TcpStream) {
    let mut s = TcpStream::connect(kache).await.unwrap();
    let req = "GET /api/v1/namespaces/ns-001/pods/p/exec?command=sh&stdin=true HTTP/1.1\r\nHost: kache\r\nConnection: Upgrade\r\nUpgrade: SPDY/3.1\r\n\r\n";
    s.write_all(req.as_bytes()).await.unwrap();
    let mut head = Vec::new();
    let mut b = [0u8; 1];
    while !head.ends_with(b"\r\n\r\n") {
        let k = tokio::time::timeout(crate::support::QUICK, s.read(&mut b)).await.expect("an answer in time").unwrap();
        assert!(k > 0, "closed before the answer: {}", String::from_utf8_lossy(&head));
        head.push(b[0]);
    }
    let code = String::from_utf8_lossy(&head).split_whitespace().nth(1).and_then(|c| c.parse().ok()).unwrap_or(0);
    (code, s)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_exec_session_holds_its_pass_through_place_while_it_lasts() {
    let sim = start(&cluster(SIM)).await;
    let relay = exec_relay(sim.addr).await;
    let kache = kache_in_front(&relay.to_string(), &["--preload", "pods", "--max-passthrough-per-client", "1"]).await;
    let (code, session) = exec(kache.serving.addr).await;
    assert_eq!(code, 101);
    // The session is open: the client's one pass-through place is taken (held for the
    // session's life, not given back when the 101 goes out, or sessions would be unbounded).
    let (code, _) = exec(kache.serving.addr).await;
    assert_eq!(code, 429, "a second session while the first lasts");
    let write = kache.client().post("/api/v1/namespaces/ns-001/configmaps", &serde_json::json!({"metadata": {"name": "x"}})).await;
    assert_eq!(write.status, 429, "{}", write.text());
    drop(session);
    let addr = kache.serving.addr;
    eventually(30, 50, || async move {
        match exec(addr).await {
            (101, _) => Ok(()),
            (code, _) => Err(format!("HTTP {code}")),
        }
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn front_proxy_identity_headers_never_reach_the_upstream() {
    let sim = start(&cluster(SIM)).await;
    let proxy = crate::support::ops::Proxy::start(&sim.addr, true).await;
    let kache = kache_in_front(&proxy.addr.to_string(), &["--preload", "pods"]).await;
    let r = kache
        .api
        .get_with(
            // A request that always passes through (not a resource: no cache can answer it).
            "/version?labelSelector=x%3Dy",
            &[("x-remote-user", "system:admin"), ("x-remote-group", "system:masters"), ("x-remote-extra-scopes", "all")],
        )
        .await;
    assert_eq!(r.status, 200, "{}", r.text());
    let seen = proxy.seen();
    let call = seen
        .iter()
        .find(|c| c.path.contains("labelSelector=x%3Dy"))
        .unwrap_or_else(|| panic!("passed through: {:?}", seen.iter().map(|c| &c.path).collect::<Vec<_>>()));
    assert_eq!(call.remote, vec![], "an upstream trusting kache as a front proxy would take them for the client");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_clients_large_lists_wait_for_its_own_while_its_small_reads_go() {
    // 2,000 pods of 16 KB: a LIST of all is 32 MB, more than the sockets hold for a client
    // that does not read.
    let sim = start(&cluster(&["--nodes", "3", "--pods", "2000", "--namespaces", "3", "--pod-size", "16000"])).await;
    let kache = kache_in_front(&sim.addr.to_string(), &["--preload", "pods", "--max-large-answers-per-client", "1"]).await;
    let all = "/api/v1/pods?resourceVersion=0";
    // A client that has its LIST's headers and reads no further holds its one place.
    let first = kache.api.watch(all, "application/json").await;
    assert_eq!(first.status, 200);
    let api = crate::support::Api::new(&kache.serving.addr.to_string());
    let second = tokio::spawn(async move { api.get(all).await });
    let serve = kache.serving.serve.clone();
    eventually(30, 50, || {
        let serve = serve.clone();
        async move {
            match serve.large_answers_waiting() {
                1 => Ok(()),
                n => Err(format!("{n} waiting")),
            }
        }
    })
    .await;
    // Its small reads are not large answers: they go at once.
    assert_eq!(kache.api.get("/api/v1/namespaces/ns-001/pods?resourceVersion=0&limit=1").await.status, 200);
    assert!(!second.is_finished(), "the second large LIST waits while the first is being sent");
    drop(first);
    let second = second.await.unwrap();
    assert_eq!(second.status, 200, "sent once the first ended");
    assert_eq!(kache.serving.serve.large_answers_waiting(), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_clients_consistent_reads_past_its_rate_queue_while_another_clients_go() {
    use crate::support::auth::{SecureKache, SecureSim, Who};
    use futures_util::stream::{FuturesUnordered, StreamExt};
    let sim = SecureSim::start().await;
    // One proof a second for each client, ten at once.
    let k = SecureKache::start(&sim, &["--max-consistent-reads-per-client", "1"]).await;
    let alice = std::sync::Arc::new(k.client(Who::Token("alice-token")));
    // Forty consistent LISTs at once: each would need a proof, a request to the upstream.
    let mut reads: FuturesUnordered<_> = (0..40)
        .map(|_| {
            let alice = alice.clone();
            tokio::spawn(async move { alice.get("/api/v1/namespaces/a/pods").await.status })
        })
        .collect();
    let serve = k.serving.serve.clone();
    eventually(30, 50, || {
        let serve = serve.clone();
        async move {
            match serve.consistent_reads_queued() {
                n if n >= 20 => Ok(()),
                n => Err(format!("{n} queued")),
            }
        }
    })
    .await;
    // Another client's reads are not held back by alice's queue, which still holds most of
    // hers (the last is due some thirty seconds after the first ten).
    let bob = k.client(Who::Token("bob-token"));
    for _ in 0..5 {
        assert_eq!(bob.get("/api/v1/namespaces/a/configmaps").await.status, 200);
    }
    assert!(k.serving.serve.consistent_reads_queued() >= 10, "alice's reads wait their turn");
    // Hers are answered, not refused: the ten at once and then one a second.
    for _ in 0..12 {
        assert_eq!(reads.next().await.unwrap().unwrap(), 200);
    }
    for r in reads.iter() {
        r.abort();
    }
}

/// Watches of `path` on HTTP/2 streams whose client grants no window (its SETTINGS say 0 and
/// it never sends WINDOW_UPDATE), `per_conn` to a connection: what they end with, each (its
/// h2 reason, or `None` for a clean end), once kache ends them.
pub(crate) async fn zero_window_watches(
    addr: &str,
    path: &str,
    conns: usize,
    per_conn: usize,
) -> Vec<tokio::task::JoinHandle<Option<h2::Reason>>> {
    let mut ends = Vec::new();
    for _ in 0..conns {
        let tcp = TcpStream::connect(addr).await.unwrap();
        let (send, conn) = h2::client::Builder::new().initial_window_size(0).handshake::<_, bytes::Bytes>(tcp).await.unwrap();
        tokio::spawn(conn);
        for _ in 0..per_conn {
            let mut send = send.clone().ready().await.unwrap();
            let req = http::Request::get(format!("http://{addr}{path}")).body(()).unwrap();
            let (resp, _) = send.send_request(req, true).unwrap();
            ends.push(tokio::spawn(async move {
                let resp = resp.await.ok()?;
                assert_eq!(resp.status(), 200);
                let mut body = resp.into_body();
                loop {
                    match body.data().await {
                        Some(Ok(_)) => {}
                        Some(Err(e)) => return e.reason(),
                        None => return None,
                    }
                }
            }));
        }
    }
    ends
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn watches_that_grant_no_window_are_reset_and_honest_watchers_get_every_event() {
    let sim = start(&cluster(SIM)).await;
    let kache = kache_in_front(&sim.addr.to_string(), &["--preload", "pods,configmaps"]).await;
    let addr = kache.serving.addr.to_string();
    // Every pod as ADDED events: more than a window of nothing can carry.
    let stalled = zero_window_watches(&addr, "/api/v1/pods?watch=1&resourceVersion=0", 2, 20).await;

    let honest = kache.client();
    let list = honest.get("/api/v1/namespaces/ns-001/configmaps").await;
    let rv = crate::support::list_rv(&list.json());
    let mut watch = honest.watch(&format!("/api/v1/namespaces/ns-001/configmaps?watch=1&resourceVersion={rv}"), "application/json").await;
    assert_eq!(watch.status, 200);
    let writer = kache.client();
    let mut written = Vec::new();
    for i in 0..5 {
        let cm = writer.create_cm("ns-001", &format!("honest-{i}"), serde_json::json!({"i": i.to_string()})).await;
        written.push(cm["metadata"]["name"].as_str().unwrap().to_string());
    }
    let mut seen = Vec::new();
    while seen.len() < written.len() {
        match watch.next_json(crate::support::deadline(60)).await {
            crate::support::Next::Item(e) => {
                if e["type"] == "ADDED" {
                    seen.push(e["object"]["metadata"]["name"].as_str().unwrap().to_string());
                }
            }
            other => panic!("the honest watch ended early: {other:?} after {seen:?}"),
        }
    }
    assert_eq!(seen, written, "every event, in order");

    // Each stalled stream is reset (RST_STREAM CANCEL) at the stall timeout: its watcher and
    // the bytes queued for it are released then, not when the client leaves.
    for end in stalled {
        let reason = tokio::time::timeout(std::time::Duration::from_secs(120), end).await.expect("reset in time").unwrap();
        assert_eq!(reason, Some(h2::Reason::CANCEL));
    }
    let serve = &kache.serving.serve;
    eventually(30, 50, || async move {
        match kache::app::admin::cache_report(serve)["watchBufferedBytes"].as_u64() {
            Some(0) => Ok(()),
            other => Err(format!("queued watch bytes: {other:?}")),
        }
    })
    .await;
}
