//! Authorization of reads kache answers from cache, against the simulator's RBAC: a user
//! with no rights, a user allowed pods in one namespace (by token, by client certificate and
//! by impersonation), a node-like user limited by a field selector, and refused tokens; each
//! on a cold and then a warm decision cache, with nothing of a denied object in any body and
//! nothing denied passed through to the upstream.

use crate::support::auth::{SecureKache, SecureSim, Who, KINDS};
use serde_json::Value;

fn qualified(group: &str, plural: &str) -> String {
    if group.is_empty() {
        plural.to_string()
    } else {
        format!("{plural}.{group}")
    }
}

/// The apiserver's 403 message.
fn forbidden(user: &str, verb: &str, group: &str, plural: &str, ns: Option<&str>, name: Option<&str>) -> String {
    let q = qualified(group, plural);
    let subject = match name {
        Some(n) => format!("{q} \"{n}\""),
        None => q,
    };
    let scope = match ns {
        Some(ns) => format!("in the namespace \"{ns}\""),
        None => "at the cluster scope".to_string(),
    };
    format!("{subject} is forbidden: User \"{user}\" cannot {verb} resource \"{plural}\" in API group \"{group}\" {scope}")
}

fn prefix(group: &str, version: &str) -> String {
    if group.is_empty() {
        format!("/api/{version}")
    } else {
        format!("/apis/{group}/{version}")
    }
}

/// Strings that identify the objects in namespace `b` (uids, resourceVersions, contents).
async fn secrets_of_b(sim: &SecureSim) -> Vec<String> {
    let admin = sim.client(Who::Token("admin-token"));
    let mut out = Vec::new();
    for path in ["/api/v1/namespaces/b/pods", "/api/v1/namespaces/b/secrets"] {
        let l = admin.must(admin.get(path).await);
        for i in l["items"].as_array().unwrap() {
            out.push(i["metadata"]["uid"].as_str().unwrap().to_string());
        }
    }
    out.push("c2VjcmV0".into());
    out
}

/// The simulator with its users and RBAC, kache in front of it, and what must never show of
/// namespace `b`.
async fn secured() -> (SecureSim, SecureKache, Vec<String>) {
    let sim = SecureSim::start().await;
    let k = SecureKache::start(&sim, &[]).await;
    let hidden = secrets_of_b(&sim).await;
    (sim, k, hidden)
}

fn assert_denied(r: &crate::support::Resp, message: &str, hidden: &[String]) {
    assert_eq!(r.status, 403, "{message}: {}", r.text());
    let v = r.json();
    assert_eq!((v["kind"].as_str(), v["reason"].as_str(), v["code"].as_u64()), (Some("Status"), Some("Forbidden"), Some(403)));
    assert_eq!(v["message"].as_str(), Some(message));
    assert_eq!(r.header("x-content-type-options"), Some("nosniff"));
    for h in hidden {
        assert!(!r.text().contains(h.as_str()), "a denied body mentions {h}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_user_with_no_rights_gets_403_on_every_cached_read_cold_and_warm() {
    let (sim, k, hidden) = secured().await;
    let nobody = k.client(Who::Token("nobody-token"));
    for pass in ["cold", "warm"] {
        let (reviews, hits) = (sim.access_reviews(), k.hits());
        let mut asked = 0;
        for (group, version, plural, namespaced) in KINDS {
            let base = prefix(group, version);
            let mut cases: Vec<(String, &str, Option<&str>, Option<&str>)> = vec![
                (format!("{base}/{plural}"), "list", None, None),
                (format!("{base}/{plural}?watch=1"), "watch", None, None),
                (format!("{base}/{plural}?resourceVersion=0&limit=5"), "list", None, None),
            ];
            if *namespaced {
                cases.push((format!("{base}/namespaces/b/{plural}"), "list", Some("b"), None));
                cases.push((format!("{base}/namespaces/b/{plural}?watch=1&resourceVersion=0"), "watch", Some("b"), None));
                cases.push((format!("{base}/namespaces/b/{plural}/b-pod-0"), "get", Some("b"), Some("b-pod-0")));
            } else {
                // The namespace of a Namespace is itself.
                let ns = (*plural == "namespaces").then_some("b");
                cases.push((format!("{base}/{plural}/b"), "get", ns, Some("b")));
            }
            for (path, verb, ns, name) in cases {
                let r = nobody.get(&path).await;
                assert_denied(&r, &forbidden("anchor-nobody", verb, group, plural, ns, name), &hidden);
                asked += 1;
            }
        }
        // Protobuf clients get the Status in protobuf.
        let r = nobody.get_with("/api/v1/namespaces/b/pods", &[("accept", crate::support::PROTOBUF)]).await;
        assert_eq!(r.status, 403);
        let s: crate::support::PbStatus = crate::support::decode_envelope(&r.body, "Status");
        assert_eq!(s.message.as_deref(), Some(forbidden("anchor-nobody", "list", "", "pods", Some("b"), None).as_str()));
        asked += 1;
        assert_eq!(k.hits() - hits, asked, "{pass}: every denial came from kache");
        let new_reviews = sim.access_reviews() - reviews;
        if pass == "cold" {
            assert!(new_reviews > 0, "a cold cache asks the upstream");
        } else {
            assert_eq!(new_reviews, 0, "a warm cache answers every decision itself");
        }
    }
    assert!(sim.audit(|r| r.user.username == "anchor-nobody").is_empty(), "nothing of the denied user reached the upstream");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn golden_403_bodies_for_a_user_without_rights_and_for_anonymous() {
    let sim = SecureSim::start().await;
    let k = SecureKache::start(&sim, &["--allow-anonymous"]).await;
    let r = k.client(Who::Token("nobody-token")).get("/api/v1/namespaces/golden/pods").await;
    assert_eq!(r.body, crate::support::golden("10h-list-pods-nobody-403.json.body"));
    let r = k.client(Who::Token("nobody-token")).get_with("/api/v1/namespaces/golden/pods", &[("accept", crate::support::PROTOBUF)]).await;
    assert_eq!(r.body, crate::support::golden("10h-list-pods-nobody-403.pb.body"));
    let r = k.client(Who::Nobody).get("/api/v1/namespaces/golden/pods").await;
    assert_eq!(r.body, crate::support::golden("10i-list-pods-no-token-anonymous-403.json.body"));
    assert_eq!(r.header("x-content-type-options"), Some("nosniff"));
}

/// (names of the items, every namespace seen) of a list.
fn names_of(v: &Value) -> Vec<String> {
    crate::support::names(v["items"].as_array().unwrap())
}

async fn pods_in_a_only(k: &SecureKache, who: Who<'_>, user: &str, hidden: &[String]) {
    let c = k.client(who);
    let hits = k.hits();
    let l = c.must(c.get("/api/v1/namespaces/a/pods").await);
    assert_eq!(names_of(&l), vec!["a/a-pod-0", "a/a-pod-1", "a/a-pod-2"]);
    let one = c.must(c.get("/api/v1/namespaces/a/pods/a-pod-1").await);
    assert_eq!(one["metadata"]["name"], "a-pod-1");
    let (status, events, _) = c.watch_events("/api/v1/namespaces/a/pods?watch=1&resourceVersion=0", 3).await;
    assert_eq!(status, 200);
    assert!(events.iter().all(|e| e["type"] == "ADDED" && e["object"]["metadata"]["namespace"] == "a"), "{events:?}");
    assert_eq!(k.hits() - hits, 3, "served from cache");
    assert_denied(&c.get("/api/v1/namespaces/b/pods").await, &forbidden(user, "list", "", "pods", Some("b"), None), hidden);
    assert_denied(&c.get("/api/v1/pods").await, &forbidden(user, "list", "", "pods", None, None), hidden);
    assert_denied(&c.get("/api/v1/pods?resourceVersion=0").await, &forbidden(user, "list", "", "pods", None, None), hidden);
    assert_denied(
        &c.get("/api/v1/namespaces/b/pods/b-pod-0").await,
        &forbidden(user, "get", "", "pods", Some("b"), Some("b-pod-0")),
        hidden,
    );
    assert_denied(&c.get("/api/v1/namespaces/b/pods?watch=1").await, &forbidden(user, "watch", "", "pods", Some("b"), None), hidden);
    assert_denied(&c.get("/api/v1/pods?watch=1").await, &forbidden(user, "watch", "", "pods", None, None), hidden);
    assert_denied(&c.get("/api/v1/namespaces/a/secrets").await, &forbidden(user, "list", "", "secrets", Some("a"), None), hidden);
    assert_denied(
        &c.get("/api/v1/namespaces/a/configmaps?watch=1").await,
        &forbidden(user, "watch", "", "configmaps", Some("a"), None),
        hidden,
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_user_allowed_pods_in_one_namespace_sees_only_it_by_token_certificate_and_impersonation() {
    let (sim, k, hidden) = secured().await;
    let (cert, key) = sim.ca.issue("cert-alice", &["readers"]);
    for pass in ["cold", "warm"] {
        let reviews = sim.access_reviews();
        pods_in_a_only(&k, Who::Token("alice-token"), "alice", &hidden).await;
        pods_in_a_only(&k, Who::Cert(cert.clone(), key.clone()), "cert-alice", &hidden).await;
        let new_reviews = sim.access_reviews() - reviews;
        if pass == "cold" {
            assert!(new_reviews > 0);
        } else {
            assert_eq!(new_reviews, 0, "warm: decisions come from the cache");
        }
    }
    // carol may impersonate alice (and is then judged as alice), not bob.
    let carol = k.client(Who::Token("carol-token"));
    let l = carol.must(carol.get_with("/api/v1/namespaces/a/pods", &[("impersonate-user", "alice")]).await);
    assert_eq!(names_of(&l).len(), 3);
    let r = carol.get_with("/api/v1/namespaces/b/pods", &[("impersonate-user", "alice")]).await;
    assert_denied(&r, &forbidden("alice", "list", "", "pods", Some("b"), None), &hidden);
    let r = carol.get_with("/api/v1/namespaces/a/pods", &[("impersonate-user", "bob")]).await;
    assert_denied(
        &r,
        "users \"bob\" is forbidden: User \"carol\" cannot impersonate resource \"users\" in API group \"\" at the cluster scope",
        &hidden,
    );
    let r = carol.get_with("/api/v1/namespaces/a/pods", &[("impersonate-user", "alice"), ("impersonate-group", "system:masters")]).await;
    assert_denied(&r, "groups \"system:masters\" is forbidden: User \"carol\" cannot impersonate resource \"groups\" in API group \"\" at the cluster scope", &hidden);
    let nobody = k.client(Who::Token("nobody-token"));
    let r = nobody.get_with("/api/v1/namespaces/a/pods", &[("impersonate-user", "admin")]).await;
    assert_denied(
        &r,
        "users \"admin\" is forbidden: User \"anchor-nobody\" cannot impersonate resource \"users\" in API group \"\" at the cluster scope",
        &hidden,
    );
    assert!(
        sim.audit(|r| ["alice", "cert-alice", "carol", "anchor-nobody"].contains(&r.user.username.as_str())).is_empty(),
        "every read was kache's"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_user_lists_and_watches_only_what_it_may() {
    let (sim, k, hidden) = secured().await;
    let node = k.client(Who::Token("node-token"));
    let user = "system:node:node-0001";
    for pass in ["cold", "warm"] {
        let reviews = sim.access_reviews();
        let l = node.must(node.get("/api/v1/pods?fieldSelector=spec.nodeName%3Dnode-0001").await);
        let items = l["items"].as_array().unwrap();
        assert!(items.iter().any(|p| p["metadata"]["name"] == "b-pod-0"), "its own pods, in every namespace");
        assert!(items.iter().all(|p| p["spec"]["nodeName"] == "node-0001"));
        let (status, events, _) =
            node.watch_events("/api/v1/pods?watch=1&resourceVersion=0&fieldSelector=spec.nodeName%3Dnode-0001", items.len()).await;
        assert_eq!(status, 200);
        assert!(events.iter().all(|e| e["object"]["spec"]["nodeName"] == "node-0001"));
        node.must(node.get("/api/v1/nodes").await);
        node.must(node.get("/api/v1/nodes/node-0001").await);
        assert_denied(&node.get("/api/v1/pods").await, &forbidden(user, "list", "", "pods", None, None), &hidden);
        assert_denied(
            &node.get("/api/v1/pods?fieldSelector=spec.nodeName%3Dnode-0002").await,
            &forbidden(user, "list", "", "pods", None, None),
            &hidden,
        );
        assert_denied(
            &node.get("/api/v1/pods?watch=1&labelSelector=app%3Dweb").await,
            &forbidden(user, "watch", "", "pods", None, None),
            &hidden,
        );
        assert_denied(
            &node.get("/api/v1/namespaces/b/pods/b-pod-0").await,
            &forbidden(user, "get", "", "pods", Some("b"), Some("b-pod-0")),
            &hidden,
        );
        assert_denied(&node.get("/api/v1/secrets").await, &forbidden(user, "list", "", "secrets", None, None), &hidden);
        assert_denied(
            &node.get("/api/v1/namespaces/b/secrets?watch=1").await,
            &forbidden(user, "watch", "", "secrets", Some("b"), None),
            &hidden,
        );
        let new_reviews = sim.access_reviews() - reviews;
        assert!(if pass == "cold" { new_reviews > 0 } else { new_reviews == 0 }, "{pass}: {new_reviews} reviews");
    }
    assert!(sim.audit(|r| r.user.username == user).is_empty(), "every read was kache's");
}

/// A user allowed the whole collection is asked about once per verb, whatever selectors its
/// lists and watches carry; a node, denied the whole, is asked about its own selector, and
/// the whole is not asked again for each of its other selectors.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn selected_reads_share_the_decision_on_the_whole_collection() {
    let (sim, k, hidden) = secured().await;
    let alice = k.client(Who::Token("alice-token"));
    let reviews = sim.access_reviews();
    for selector in ["labelSelector=app%3Dweb", "labelSelector=app%3Ddb", "fieldSelector=spec.nodeName%3Dnode-0001", "labelSelector=x"] {
        alice.must(alice.get(&format!("/api/v1/namespaces/a/pods?{selector}")).await);
        let (status, _, _) = alice.watch_events(&format!("/api/v1/namespaces/a/pods?watch=1&resourceVersion=0&{selector}"), 0).await;
        assert_eq!(status, 200, "{selector}");
        assert_denied(
            &alice.get(&format!("/api/v1/namespaces/b/pods?{selector}")).await,
            &forbidden("alice", "list", "", "pods", Some("b"), None),
            &hidden,
        );
    }
    // Namespace a: the whole list, the whole watch. Namespace b: the whole list is denied,
    // then each selected list is asked as it is (denied), the whole not again.
    assert_eq!(sim.access_reviews() - reviews, 2 + 1 + 4);
    let node = k.client(Who::Token("node-token"));
    let reviews = sim.access_reviews();
    node.must(node.get("/api/v1/pods?fieldSelector=spec.nodeName%3Dnode-0001").await);
    assert_eq!(sim.access_reviews() - reviews, 2, "the whole (denied), then its own pods (allowed)");
    let l = node.must(node.get("/api/v1/pods?fieldSelector=spec.nodeName%3Dnode-0001,metadata.namespace%3Db").await);
    assert!(names_of(&l).iter().all(|n| n.starts_with("b/")));
    assert_denied(
        &node.get("/api/v1/pods?fieldSelector=spec.nodeName%3Dnode-0002").await,
        &forbidden("system:node:node-0001", "list", "", "pods", None, None),
        &hidden,
    );
    assert_eq!(sim.access_reviews() - reviews, 4, "one review for each other selector");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unknown_expired_and_missing_credentials_get_401_cold_and_warm() {
    let sim = SecureSim::start().await;
    let k = SecureKache::start(&sim, &[]).await;
    let golden = crate::support::golden("10j-list-pods-invalid-token-401.json.body");
    let golden_pb = crate::support::golden("10j-list-pods-invalid-token-401.pb.body");
    for token in ["not-a-valid-token", "expired-token"] {
        let c = k.client(Who::Token(token));
        for pass in ["cold", "warm"] {
            let reviews = sim.token_reviews();
            for path in [
                "/api/v1/namespaces/a/pods",
                "/api/v1/namespaces/a/pods?watch=1",
                "/api/v1/namespaces/a/pods/a-pod-0",
                "/api/v1/namespaces/a/configmaps",
                "/apis",
            ] {
                let r = c.get(path).await;
                assert_eq!((r.status, &r.body[..]), (401, &golden[..]), "{token} {pass} {path}");
                assert_eq!(r.header("x-content-type-options"), None);
            }
            let r = c.get_with("/api/v1/namespaces/a/pods", &[("accept", crate::support::PROTOBUF)]).await;
            assert_eq!(r.body, golden_pb);
            let new = sim.token_reviews() - reviews;
            assert_eq!(new, usize::from(pass == "cold"), "{token} {pass}: one review, then the negative cache");
        }
    }
    // No credentials and no --allow-anonymous: 401 too.
    let r = k.client(Who::Nobody).get("/api/v1/namespaces/a/pods").await;
    assert_eq!((r.status, r.body), (401, bytes::Bytes::from(golden)));
    assert!(sim.audit(|r| r.user.username == "alice").is_empty());
}
