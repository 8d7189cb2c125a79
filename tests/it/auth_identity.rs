//! Pass-through identity and real clients over TLS: writes through kache are performed as the
//! client (impersonated with kache's credentials, or with the client's own token under
//! `--passthrough-auth=forward`), the upstream's audit log names the client, and kubectl with
//! the kubeconfig `--client-kubeconfig-out` wrote works with a token and with a client
//! certificate.

use crate::support::auth::{SecureKache, SecureSim, Who, KACHE_SA};
use crate::support::kubectl;
use serde_json::json;

fn configmap(ns: &str, name: &str) -> serde_json::Value {
    json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name, "namespace": ns}, "data": {"k": "v"}})
}

/// The audit records of configmap creates, oldest first.
fn creates(sim: &SecureSim) -> Vec<kache::sim::AuditRecord> {
    sim.audit(|r| r.attributes.verb == "create" && r.attributes.resource.as_ref().is_some_and(|a| a.resource == "configmaps"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn writes_are_performed_as_the_client() {
    let sim = SecureSim::start().await;
    let k = SecureKache::start(&sim, &[]).await;
    let bob = k.client(Who::Token("bob-token"));
    let created = bob.must(bob.post("/api/v1/namespaces/a/configmaps", &configmap("a", "by-bob")).await);
    assert_eq!(created["metadata"]["name"], "by-bob");
    let last = creates(&sim).pop().expect("the upstream saw the create");
    assert_eq!((last.user.username.as_str(), last.impersonator.as_deref(), last.code), ("bob", Some(KACHE_SA), 201));
    assert!(last.user.groups.contains(&"writers".to_string()) && last.user.uid == "uid-bob", "groups and uid carried: {:?}", last.user);

    let nobody = k.client(Who::Token("nobody-token"));
    let r = nobody.post("/api/v1/namespaces/a/configmaps", &configmap("a", "by-nobody")).await;
    assert_eq!(r.status, 403, "{}", r.text());
    assert_eq!(
        r.json()["message"],
        "configmaps is forbidden: User \"anchor-nobody\" cannot create resource \"configmaps\" in API group \"\" in the namespace \"a\""
    );
    let last = creates(&sim).pop().unwrap();
    assert_eq!((last.user.username.as_str(), last.code), ("anchor-nobody", 403), "refused by the upstream, as the client");
    let r = bob.post("/api/v1/namespaces/b/configmaps", &configmap("b", "by-bob")).await;
    assert_eq!(r.status, 403);

    // A client certificate user is impersonated too.
    let (cert, key) = sim.ca.issue("cert-bob", &["writers"]);
    let c = k.client(Who::Cert(cert, key));
    let r = c.post("/api/v1/namespaces/a/configmaps", &configmap("a", "by-cert-bob")).await;
    assert_eq!(r.status, 403, "cert-bob has no rights of bob's: {}", r.text());
    let last = creates(&sim).pop().unwrap();
    assert_eq!(
        (last.user.username.as_str(), last.user.groups.clone()),
        ("cert-bob", vec!["writers".to_string(), "system:authenticated".to_string()])
    );

    // Discovery and other pass-through reads also carry the client's identity.
    let r = nobody.get("/apis").await;
    assert_eq!(r.status, 200);
    assert!(!sim.audit(|r| r.user.username == "anchor-nobody" && r.attributes.path == "/apis").is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn forward_mode_sends_the_clients_own_token() {
    let sim = SecureSim::start().await;
    let k = SecureKache::start(&sim, &["--passthrough-auth", "forward"]).await;
    let bob = k.client(Who::Token("bob-token"));
    bob.must(bob.post("/api/v1/namespaces/a/configmaps", &configmap("a", "fwd-bob")).await);
    let last = creates(&sim).pop().unwrap();
    assert_eq!(
        (last.user.username.as_str(), last.impersonator.as_deref(), last.code),
        ("bob", None, 201),
        "the upstream authenticated bob's token"
    );
    // Impersonation a client asks for is judged by kache first, then by the upstream.
    let carol = k.client(Who::Token("carol-token"));
    let r = carol.get_with("/api/v1/namespaces/a/configmaps", &[("impersonate-user", "alice")]).await;
    assert_eq!(r.status, 403, "alice may not list configmaps: {}", r.text());
    let r = carol.post("/api/v1/namespaces/a/configmaps", &configmap("a", "x")).await;
    assert_eq!(r.status, 403);
    let last = creates(&sim).pop().unwrap();
    assert_eq!((last.user.username.as_str(), last.impersonator.as_deref()), ("carol", None));
    // Cached reads are still authorized by kache.
    let alice = k.client(Who::Token("alice-token"));
    assert_eq!(alice.get("/api/v1/namespaces/b/pods").await.status, 403);
    assert_eq!(alice.get("/api/v1/namespaces/a/pods").await.status, 200);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_over_tls_with_a_token_and_with_a_client_certificate() {
    let sim = SecureSim::start().await;
    let k = SecureKache::start(&sim, &[]).await;
    let kc = k.kubeconfig.clone();
    let text = std::fs::read_to_string(&kc).unwrap();
    let parsed: serde_json::Value = serde_json::from_str(&text).unwrap_or_else(|e| panic!("{e}: {text}"));
    let cluster = &parsed["clusters"][0]["cluster"];
    assert!(cluster["server"].as_str().is_some_and(|s| s.starts_with("https://127.0.0.1:")), "{text}");
    assert!(cluster["certificate-authority-data"].as_str().is_some_and(|s| !s.is_empty()), "{text}");
    let (cert, key) = sim.client_cert_files("cert-alice", &["readers"]);
    let cache = sim.dir.path().join("kubectl-cache");
    let (kc2, cache2) = (kc.clone(), cache.clone());
    let run = move |args: Vec<String>| {
        let (kc, cache) = (kc2.clone(), cache2.clone());
        async move {
            tokio::task::spawn_blocking(move || kubectl(&kc, &cache, &args.iter().map(String::as_str).collect::<Vec<_>>())).await.unwrap()
        }
    };
    let s = |v: &[&str]| v.iter().map(|x| x.to_string()).collect::<Vec<_>>();
    let cert_flags = vec![format!("--client-certificate={}", cert.display()), format!("--client-key={}", key.display())];
    let hits = k.hits();
    for creds in [s(&["--token", "alice-token"]), cert_flags.clone()] {
        let mut args = creds.clone();
        args.extend(s(&["get", "pods", "-n", "a", "-o", "json"]));
        let out = run(args).await;
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        assert_eq!(crate::support::names(v["items"].as_array().unwrap()), vec!["a/a-pod-0", "a/a-pod-1", "a/a-pod-2"]);
        let mut args = creds.clone();
        args.extend(s(&["get", "pods", "-n", "b"]));
        let out = run(args).await;
        assert!(!out.status.success());
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(
            err.contains("pods is forbidden: User \"")
                && err.contains("cannot list resource \"pods\" in API group \"\" in the namespace \"b\""),
            "{err}"
        );
    }
    assert!(k.hits() > hits, "kubectl's reads were answered by kache");
    let out = run(s(&["--token", "bob-token", "create", "configmap", "from-kubectl", "-n", "a", "--from-literal=k=v"])).await;
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(!sim.audit(|r| r.user.username == "bob" && r.code == 201 && r.attributes.verb == "create").is_empty());
    let out = run(s(&["--token", "not-a-valid-token", "get", "pods", "-n", "a"])).await;
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("Unauthorized"), "{}", String::from_utf8_lossy(&out.stderr));
}
