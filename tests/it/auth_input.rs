//! Hostile and malformed input: hundreds of generated malformed requests each get a 4xx
//! `Status` and kache stays healthy; oversized heads, slow clients and stalled TLS handshakes
//! are cut off; the per-user in-flight cap answers 429 with `Retry-After`.

use crate::support::auth::{SecureKache, SecureSim, Who};
use rand::{Rng, SeedableRng};
use std::sync::Arc;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// Query strings that are malformed for any list or watch (a real kube-apiserver v1.36.2
/// answers each with a 4xx; `watch=maybe`, `allowWatchBookmarks=2`, `timeoutSeconds=-5` and
/// `limit=-1` it accepts, and so does kache).
fn bad_queries(rng: &mut rand::rngs::SmallRng) -> Vec<String> {
    let mut out: Vec<String> = [
        "resourceVersion=abc",
        "resourceVersion=-1",
        "resourceVersion=1e3",
        "resourceVersion=99999999999999999999999",
        "limit=abc",
        "limit=1.5",
        "resourceVersionMatch=Exact",
        "resourceVersionMatch=Bogus&resourceVersion=1",
        "resourceVersionMatch=Exact&resourceVersion=0",
        "continue=garbage-token",
        "continue=%FF%FE",
        "continue=eyJ2IjoibWV0YS5rOHMuaW8vdjEiLCJydiI6MCwic3RhcnQiOiIifQ",
        "continue=eyJ2IjoieCIsInJ2IjoxLCJzdGFydCI6IiJ9",
        "continue=e30&resourceVersion=5",
        "labelSelector=a%20in%20(",
        "labelSelector=a%20notin",
        "labelSelector=%3D%3Db",
        "labelSelector=a%3Db%3Dc",
        "labelSelector=!",
        "labelSelector=a%20in%20(b%2Cc",
        "labelSelector=-a%3Db",
        "fieldSelector=spec.bogus%3Dx",
        "fieldSelector=%3Dx",
        "fieldSelector=metadata.name",
        "sendInitialEvents=true",
        "watch=1&sendInitialEvents=true",
        "timeoutSeconds=x",
        "watch=1&resourceVersionMatch=Exact&resourceVersion=5",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    // Generated: unterminated sets, bad operators and invalid keys around random names.
    let name = |rng: &mut rand::rngs::SmallRng| -> String {
        (0..rng.random_range(1..12)).map(|_| char::from(b'a' + rng.random_range(0..26u8))).collect()
    };
    for _ in 0..40 {
        let (k, v) = (name(rng), name(rng));
        let sel = match rng.random_range(0..6) {
            0 => format!("{k} in ({v}"),
            1 => format!("{k} notin ({v},"),
            2 => format!("{k}=({v}"),
            3 => format!("{k}!!{v}"),
            4 => format!("-{k}={v}"),
            _ => format!("{k} in {v}"),
        };
        out.push(format!("labelSelector={}", crate::support::q(&sel)));
        let f = match rng.random_range(0..3) {
            0 => format!("{k}.{v}={v}"),
            1 => format!("metadata.name=={v}=={k}"),
            _ => format!("={v}"),
        };
        out.push(format!("fieldSelector={}", crate::support::q(&f)));
        out.push(format!("resourceVersion={k}"));
        out.push(format!("limit={k}"));
        out.push(format!("continue={k}{v}!"));
    }
    out
}

fn assert_status(r: &crate::support::Resp, what: &str) {
    assert!((400..500).contains(&r.status), "{what}: HTTP {}: {}", r.status, r.text());
    let v = r.json();
    assert_eq!(v["kind"], "Status", "{what}: {}", r.text());
    assert_eq!(v["code"].as_u64(), Some(u64::from(r.status)), "{what}");
    assert!(!v["message"].as_str().unwrap_or("").is_empty(), "{what}: says what is wrong");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hundreds_of_malformed_requests_get_4xx_status_and_kache_stays_healthy() {
    let sim = SecureSim::start().await;
    let k = SecureKache::start(&sim, &["--max-uri-size", "4096"]).await;
    let admin = k.client(Who::Token("admin-token"));
    let mut rng = rand::rngs::SmallRng::seed_from_u64(4);
    let queries = bad_queries(&mut rng);
    let collections = [
        "/api/v1/pods",
        "/api/v1/namespaces/a/pods",
        "/api/v1/nodes",
        "/apis/apps/v1/deployments",
        "/apis/example.com/v1/namespaces/a/widgets",
    ];
    let mut sent = 0;
    for c in collections {
        for q in &queries {
            let path = format!("{c}?{q}");
            assert_status(&admin.get(&path).await, &path);
            sent += 1;
        }
    }
    let bad_paths = [
        "/api/v1/namespaces/%2e%2e/pods",
        "/api/v1/namespaces//pods",
        "/api/v1/pods/%ff",
        "/api/v1/nosuchkind",
        "/api/v1/namespaces/a/pods/x/y/z/w",
        "/apis/x/y/z",
        "/api/v2/pods",
        "/api/v1/namespaces/a/nodes",
        "/apis/apps/v1/namespaces/a/deployments/d/nosuchsub",
        "/api/v1/namespaces/a/pods/does-not-exist",
    ];
    for p in bad_paths {
        assert_status(&admin.get(p).await, p);
        sent += 1;
    }
    for accept in ["text/html", "application/xml", "text/plain;q=0.9, text/csv", "image/png"] {
        let r = admin.get_with("/api/v1/namespaces/a/pods", &[("accept", accept)]).await;
        assert_eq!(r.status, 406, "{accept}: {}", r.text());
        sent += 1;
    }
    let r = admin.get_with("/apis/example.com/v1/namespaces/a/widgets", &[("accept", crate::support::PROTOBUF)]).await;
    assert_eq!(r.status, 406, "custom resources have no protobuf");
    let long = format!("/api/v1/pods?labelSelector={}", "a".repeat(5000));
    let r = admin.get(&long).await;
    assert_status(&r, "long URI");
    assert_eq!(r.status, 414);
    sent += 2;
    assert!(sent >= 300, "{sent} malformed requests");
    // Healthy: nothing is held, and good requests are still answered from cache.
    let hits = k.hits();
    let l = admin.must(admin.get("/api/v1/namespaces/a/pods").await);
    assert_eq!(l["items"].as_array().unwrap().len(), 3);
    assert_eq!(k.hits(), hits + 1);
    assert_eq!(k.serving.serve.in_flight(), 0);
}

async fn read_to_end(mut s: impl tokio::io::AsyncRead + Unpin) -> Vec<u8> {
    let mut out = Vec::new();
    let _ = tokio::time::timeout(crate::support::QUICK, s.read_to_end(&mut out)).await.expect("the server closes the connection");
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn oversized_heads_slow_clients_and_stalled_handshakes_are_cut_off() {
    let sim = SecureSim::start().await;
    let plain = SecureKache::start(&sim, &["--insecure-http", "--max-header-size", "8192", "--header-read-timeout", "1"]).await;
    let addr = plain.serving.addr;
    // A head larger than the limit: 431, connection closed.
    let mut s = tokio::net::TcpStream::connect(addr).await.unwrap();
    let head = format!("GET /api/v1/pods HTTP/1.1\r\nHost: x\r\nX-Big: {}\r\n\r\n", "a".repeat(20_000));
    let _ = s.write_all(head.as_bytes()).await;
    let out = String::from_utf8_lossy(&read_to_end(s).await).into_owned();
    assert!(out.starts_with("HTTP/1.1 431"), "{out}");
    // A client that never finishes its headers is disconnected.
    let mut s = tokio::net::TcpStream::connect(addr).await.unwrap();
    s.write_all(b"GET /api/v1/pods HTTP/1.1\r\nHost: x\r\n").await.unwrap();
    let out = read_to_end(s).await;
    assert!(out.is_empty() || out.starts_with(b"HTTP/1.1 408"), "{}", String::from_utf8_lossy(&out));
    // A TLS client that never completes its handshake is disconnected too.
    let tls = SecureKache::start(&sim, &["--header-read-timeout", "1"]).await;
    let s = tokio::net::TcpStream::connect(tls.serving.addr).await.unwrap();
    let _ = read_to_end(s).await;
    // Both still serve.
    let r = plain.client(Who::Token("alice-token")).get("/api/v1/namespaces/a/pods").await;
    assert_eq!(r.status, 200);
    let r = tls.client(Who::Token("alice-token")).get("/api/v1/namespaces/a/pods").await;
    assert_eq!(r.status, 200);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reads_beyond_the_per_user_cap_get_429_with_retry_after() {
    let sim = SecureSim::start().await;
    let k = SecureKache::start(&sim, &["--max-inflight-reads-per-user", "1"]).await;
    // Hold one read in flight: an HTTP/2 client with a tiny stream window that does not read
    // its body keeps kache from finishing the response.
    let mut roots = rustls::RootCertStore::empty();
    for c in rustls::pki_types::pem::PemObject::pem_slice_iter(k.serving.ca_pem.as_deref().unwrap().as_bytes()) {
        roots.add(c.unwrap()).unwrap();
    }
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut cfg = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_root_certificates(roots)
        .with_no_client_auth();
    cfg.alpn_protocols = vec![b"h2".to_vec()];
    let tcp = tokio::net::TcpStream::connect(k.serving.addr).await.unwrap();
    let name = rustls::pki_types::ServerName::try_from("localhost").unwrap();
    let tls = tokio_rustls::TlsConnector::from(Arc::new(cfg)).connect(name, tcp).await.unwrap();
    let (mut send, conn) = hyper::client::conn::http2::Builder::new(hyper_util::rt::TokioExecutor::new())
        .initial_stream_window_size(1024)
        .handshake::<_, http_body_util::Empty<bytes::Bytes>>(hyper_util::rt::TokioIo::new(tls))
        .await
        .unwrap();
    tokio::spawn(conn);
    let req = http::Request::get(format!("{}/api/v1/pods", k.serving.url))
        .header("authorization", "Bearer admin-token")
        .body(http_body_util::Empty::new())
        .unwrap();
    let held = send.send_request(req).await.unwrap();
    assert_eq!(held.status(), 200);
    let admin = k.client(Who::Token("admin-token"));
    let r = admin.get("/api/v1/namespaces/a/pods").await;
    assert_eq!(r.status, 429, "{}", r.text());
    assert_eq!(r.header("retry-after"), Some("1"));
    let v = r.json();
    assert_eq!((v["reason"].as_str(), v["details"]["retryAfterSeconds"].as_u64()), (Some("TooManyRequests"), Some(1)));
    // Another user is not affected.
    assert_eq!(k.client(Who::Token("alice-token")).get("/api/v1/namespaces/a/pods").await.status, 200);
    // Dropping the held response gives the slot back.
    drop(held);
    let admin = &admin;
    crate::support::eventually(30, 50, || async move {
        let r = admin.get("/api/v1/namespaces/a/pods").await;
        if r.status == 200 {
            Ok(())
        } else {
            Err(format!("the slot never came back: {}", r.status))
        }
    })
    .await;
}
