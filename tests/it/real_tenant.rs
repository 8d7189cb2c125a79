//! The opt-in tier (see `real_apiserver`): a tenant's HTTP/2 watches that grant no window,
//! beside an honest watcher, and its reads held by ten accounts, beside an honest reader,
//! against kache in front of the real apiserver.

use crate::real_apiserver::{real_upstream, real_with, NS};
use crate::real_authz::{context_tokens, send, Token};
use crate::support::auth::{serve_args, tls_config, TlsClient, Who};
use crate::support::{deadline, list_rv, Next};
use crate::tenant::zero_window_watches;
use http::Method;
use kache::upstream::Upstream;
use serde_json::json;

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

/// How a held read ended.
#[derive(Debug, PartialEq)]
enum Held {
    /// Answered 200, then reset by kache (RST_STREAM CANCEL) once it made no progress.
    Reset,
    /// Refused at once with 429: no place for it.
    Refused,
}

/// `per_conn` GETs of `path` on each of `conns` HTTP/2 connections over TLS that grant no
/// window, bearing `token`: how each ends.
async fn held_reads(
    addr: std::net::SocketAddr,
    ca: &str,
    token: &str,
    path: &str,
    conns: usize,
    per_conn: usize,
) -> Vec<tokio::task::JoinHandle<Held>> {
    let mut cfg = tls_config(ca, &Who::Nobody);
    cfg.alpn_protocols = vec![b"h2".to_vec()];
    let connector = tokio_rustls::TlsConnector::from(std::sync::Arc::new(cfg));
    let mut ends = Vec::new();
    for _ in 0..conns {
        let tcp = tokio::net::TcpStream::connect(addr).await.unwrap();
        let name = rustls::pki_types::ServerName::from(addr.ip());
        let tls = connector.connect(name, tcp).await.expect("TLS to kache");
        let (send, conn) = h2::client::Builder::new().initial_window_size(0).handshake::<_, bytes::Bytes>(tls).await.unwrap();
        tokio::spawn(conn);
        for _ in 0..per_conn {
            let mut send = send.clone().ready().await.unwrap();
            let req = http::Request::get(format!("https://{addr}{path}"))
                .header(http::header::AUTHORIZATION, format!("Bearer {token}"))
                .body(())
                .unwrap();
            let (resp, _) = send.send_request(req, true).unwrap();
            ends.push(tokio::spawn(async move {
                let resp = resp.await.expect("a response head");
                match resp.status().as_u16() {
                    429 => Held::Refused,
                    200 => {
                        let mut body = resp.into_body();
                        loop {
                            match body.data().await {
                                Some(Ok(_)) => {}
                                Some(Err(e)) if e.reason() == Some(h2::Reason::CANCEL) => return Held::Reset,
                                other => panic!("a held read ended otherwise: {other:?}"),
                            }
                        }
                    }
                    code => panic!("a held read was answered {code}"),
                }
            }));
        }
    }
    ends
}

/// A token of each of `n` ServiceAccounts of namespace `ns`, which may read pods.
async fn tenant_tokens(up: &Upstream, ns: &str, n: usize) -> Vec<String> {
    let created = |code: u16| code == 201 || code == 409;
    let (code, v) = send(up, Method::POST, "/api/v1/namespaces", Some(&json!({"metadata": {"name": ns}}))).await;
    assert!(created(code), "namespace {ns}: {code} {v}");
    // A role of its own: the aggregated `view` is empty without a controller-manager.
    let role = json!({
        "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole", "metadata": {"name": format!("{ns}-read-pods")},
        "rules": [{"apiGroups": [""], "resources": ["pods"], "verbs": ["get", "list", "watch"]}],
    });
    let (code, v) = send(up, Method::POST, "/apis/rbac.authorization.k8s.io/v1/clusterroles", Some(&role)).await;
    assert!(created(code), "role: {code} {v}");
    let binding = json!({
        "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding", "metadata": {"name": format!("{ns}-read-pods")},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": format!("{ns}-read-pods")},
        "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "Group", "name": format!("system:serviceaccounts:{ns}")}],
    });
    let (code, v) = send(up, Method::POST, "/apis/rbac.authorization.k8s.io/v1/clusterrolebindings", Some(&binding)).await;
    assert!(created(code), "binding: {code} {v}");
    let mut tokens = Vec::new();
    for i in 0..n {
        let sa = format!("tenant-{i}");
        let (code, v) =
            send(up, Method::POST, &format!("/api/v1/namespaces/{ns}/serviceaccounts"), Some(&json!({"metadata": {"name": sa}}))).await;
        assert!(created(code), "{sa}: {code} {v}");
        let request = json!({"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest", "spec": {"expirationSeconds": 3600}});
        let (code, v) = send(up, Method::POST, &format!("/api/v1/namespaces/{ns}/serviceaccounts/{sa}/token"), Some(&request)).await;
        assert_eq!(code, 201, "token of {sa}: {v}");
        tokens.push(v["status"]["token"].as_str().expect("a token").to_string());
    }
    tokens
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn real_held_reads_of_ten_accounts_leave_an_honest_read_answered_and_are_reset() {
    let Some(real) = real_upstream("real_held_reads") else { return };
    kache::upstream::install_crypto_provider();
    let up = real.upstream().await;
    let tokens = tenant_tokens(&up, "kache-held-reads", 10).await;
    let pods = send(&up, Method::GET, "/api/v1/pods?limit=1", None).await.1;
    let md = &pods["items"][0]["metadata"];
    let pod = format!("/api/v1/namespaces/{}/pods/{}?resourceVersion=0", md["namespace"].as_str().unwrap(), md["name"].as_str().unwrap());

    let flags = ["--listen", "127.0.0.1:0", "--preload", "pods", "--shutdown-grace-seconds", "1"];
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let serving = kache::app::start_serve_args(real.upstream().await, &serve_args(&flags), async move {
        let _ = stopped.await;
    })
    .await
    .expect("kache starts");
    assert!(serving.serve.wait_synced(std::time::Duration::from_secs(600)).await, "the pods' cache syncs");
    let ca = serving.ca_pem.clone().expect("kache's CA");
    // The tenant: 400 reads each of ten accounts, none of whose answers it takes.
    let mut held = Vec::new();
    for t in &tokens {
        held.extend(held_reads(serving.addr, &ca, t, &pod, 4, 100).await);
    }
    // Meanwhile another user's cached reads are answered.
    let admin =
        context_tokens(&real.kubeconfig).into_iter().find_map(|(t, v)| (t == Token::Admin).then_some(v)).flatten().expect("admin's token");
    let honest = TlsClient::new(&serving.url, &ca, Who::Token(&admin));
    for _ in 0..20 {
        let r = honest.get(&pod).await;
        assert_eq!(r.status, 200, "the honest read: {}", r.text());
    }
    // Each held read that got a place is reset once it makes no progress; none is held on.
    let (mut reset, mut refused) = (0, 0);
    for end in held {
        match tokio::time::timeout(std::time::Duration::from_secs(120), end).await.expect("every held read ends").unwrap() {
            Held::Reset => reset += 1,
            Held::Refused => refused += 1,
        }
    }
    eprintln!("held reads: {reset} answered and reset, {refused} refused (429)");
    assert!(reset > 0, "some held reads got a place");
    assert_eq!(reset + refused, 4000);
    let _ = stop.send(());
}
