//! The simulator's own security, compared with the real apiserver's captures: TokenReview,
//! SubjectAccessReview and SelfSubjectReview answers (13a-c, 14), the 403 of an impersonated
//! user (15), 401 for a bad token (10j), client certificates over TLS, and RBAC on who may
//! ask for reviews.

use crate::support::auth::{SecureSim, Who};
use serde_json::{json, Value};

/// `v` with `metadata.managedFields[*].time` and `.manager`, and `creationTimestamp`, blanked.
fn timeless(mut v: Value) -> Value {
    if let Some(fields) = v["metadata"]["managedFields"].as_array_mut() {
        for f in fields {
            f["time"] = json!("T");
            f["manager"] = json!("M");
        }
    }
    if v["metadata"].get("creationTimestamp").is_some() {
        v["metadata"]["creationTimestamp"] = json!("T");
    }
    v
}

fn golden_json(name: &str) -> Value {
    serde_json::from_slice(&crate::support::golden(name)).unwrap()
}

fn golden_request(name: &str) -> Value {
    let text = String::from_utf8(crate::support::golden(name)).unwrap();
    serde_json::from_str(text.split("\n\n").nth(1).unwrap().trim()).unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reviews_answer_like_the_apiserver() {
    let sim = SecureSim::start().await;
    let kache = sim.client(Who::Token("kache-token"));
    // 13a: the nobody token (the users file maps it as the capture's cluster did).
    let r = kache
        .post(
            "/apis/authentication.k8s.io/v1/tokenreviews",
            &json!({"apiVersion": "authentication.k8s.io/v1", "kind": "TokenReview", "spec": {"token": "nobody-token"}}),
        )
        .await;
    assert_eq!(r.status, 201);
    let mut want = golden_json("13a-tokenreview-nobody-token.json.body");
    want["spec"]["token"] = json!("nobody-token");
    assert_eq!(timeless(r.json()), timeless(want));
    let r = kache.post("/apis/authentication.k8s.io/v1/tokenreviews", &json!({"spec": {"token": "expired-token"}})).await;
    assert_eq!(r.json()["status"]["authenticated"], Value::Null, "expired tokens are not authenticated");
    // 13b and 13c, byte for byte but for the time and manager.
    for name in ["13b-subjectaccessreview-nobody-list-pods.json", "13c-subjectaccessreview-admin-masters-list-pods.json"] {
        let r = kache.post("/apis/authorization.k8s.io/v1/subjectaccessreviews", &golden_request(&format!("{name}.req"))).await;
        assert_eq!(r.status, 201);
        assert_eq!(timeless(r.json()), timeless(golden_json(&format!("{name}.body"))), "{name}");
    }
    // 14: who am I.
    let nobody = sim.client(Who::Token("nobody-token"));
    let r = nobody
        .post(
            "/apis/authentication.k8s.io/v1/selfsubjectreviews",
            &json!({"apiVersion": "authentication.k8s.io/v1", "kind": "SelfSubjectReview"}),
        )
        .await;
    assert_eq!(r.status, 201);
    assert_eq!(timeless(r.json()), timeless(golden_json("14-selfsubjectreview-nobody.json.body")));
    // Only those allowed may ask for reviews.
    let r = nobody
        .post("/apis/authorization.k8s.io/v1/subjectaccessreviews", &golden_request("13b-subjectaccessreview-nobody-list-pods.json.req"))
        .await;
    assert_eq!(r.status, 403);
    assert_eq!(
        r.json()["message"],
        "subjectaccessreviews.authorization.k8s.io is forbidden: User \"anchor-nobody\" cannot create resource \"subjectaccessreviews\" in API group \"authorization.k8s.io\" at the cluster scope"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_simulator_authenticates_authorizes_and_impersonates_like_the_apiserver() {
    let sim = SecureSim::start().await;
    let admin = sim.client(Who::Token("admin-token"));
    // 15: admin impersonating the nobody user.
    let r = admin.get_with("/api/v1/namespaces/golden/pods", &[("impersonate-user", "anchor-nobody")]).await;
    assert_eq!(r.body, crate::support::golden("15-impersonate-nobody-list-pods-403.json.body"));
    assert_eq!(r.header("x-content-type-options"), Some("nosniff"));
    let r = admin
        .get_with("/api/v1/namespaces/golden/pods", &[("impersonate-user", "anchor-nobody"), ("accept", crate::support::PROTOBUF)])
        .await;
    assert_eq!(r.body, crate::support::golden("15-impersonate-nobody-list-pods-403.pb.body"));
    // 10h, 10i, 10j.
    let r = sim.client(Who::Token("nobody-token")).get("/api/v1/namespaces/golden/pods").await;
    assert_eq!(r.body, crate::support::golden("10h-list-pods-nobody-403.json.body"));
    let r = sim.client(Who::Nobody).get("/api/v1/namespaces/golden/pods").await;
    assert_eq!(r.body, crate::support::golden("10i-list-pods-no-token-anonymous-403.json.body"));
    let r = sim.client(Who::Token("not-a-valid-token")).get("/api/v1/namespaces/golden/pods").await;
    assert_eq!((r.status, r.body), (401, bytes::Bytes::from(crate::support::golden("10j-list-pods-invalid-token-401.json.body"))));
    // A client certificate: user = CN, groups = O.
    let (cert, key) = sim.ca.issue("cert-alice", &["readers"]);
    let c = sim.client(Who::Cert(cert, key));
    let l = c.must(c.get("/api/v1/namespaces/a/pods").await);
    assert_eq!(l["items"].as_array().unwrap().len(), 3);
    assert_eq!(c.get("/api/v1/namespaces/b/pods").await.status, 403);
    let me = c.must(c.post("/apis/authentication.k8s.io/v1/selfsubjectreviews", &json!({})).await);
    assert_eq!(me["status"]["userInfo"], json!({"username": "cert-alice", "groups": ["readers", "system:authenticated"]}));
    // Impersonating a service account gives its groups.
    let me = admin.must(
        admin
            .request(
                http::Method::POST,
                "/apis/authentication.k8s.io/v1/selfsubjectreviews",
                &[("impersonate-user", "system:serviceaccount:ns1:sa"), ("content-type", "application/json")],
                b"{}".to_vec(),
            )
            .await,
    );
    assert_eq!(me["status"]["userInfo"]["groups"], json!(["system:serviceaccounts", "system:serviceaccounts:ns1", "system:authenticated"]));
    // The audit log names who acted and who impersonated.
    let rec = sim.audit(|r| r.user.username == "anchor-nobody" && r.impersonator.as_deref() == Some("admin"));
    assert!(rec.iter().any(|r| r.code == 403 && r.attributes.verb == "list"));
}
