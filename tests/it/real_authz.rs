//! The authorization differential (opt-in, like `real_apiserver.rs`): a seeded generator
//! makes 1,000+ read requests, each made by some identity (the tier's `admin`, `reader` and
//! `nobody` tokens, no token, a made-up token, and many users and groups reached by
//! `Impersonate-*` headers, some of them by a client without the right to impersonate them)
//! and each asked of kache (serving, with authentication and authorization, in front of the
//! real apiserver) and of the apiserver directly. For each:
//! the same HTTP status, and for a success the same set of object names, nothing more.
//! Prints the count of cases and every mismatch; fails if any.
//!
//! ```sh
//! KACHE_REAL_KUBECONFIG=~/real-apiserver/kubeconfig KACHE_REAL_CONTEXT=admin \
//!   cargo test --test it real_authz -- --test-threads 1 --nocapture
//! ```
//!
//! `KACHE_AUTHZ_SEED` picks another seed (default 23). The kubeconfig must hold the
//! contexts `admin` (system:masters), `reader` and `nobody` (the tier's static tokens).
//!
//! Rights (all objects named `authz-*`, removed at the end; namespaces `authz-a`, `authz-b`,
//! plus a RoleBinding `authz-pods` in the populated namespace `ns-001`):
//! - `authz-cluster`: get/list/watch pods, configmaps, secrets, nodes, namespaces everywhere;
//! - `authz-ns`: the same in `authz-a`, pods in `ns-001`; also the service account
//!   `authz-a:authz-sa`;
//! - `authz-names`: configmaps `cm-1` and `cm-3` of `authz-a` only (`resourceNames`: a list
//!   or watch is allowed with `fieldSelector=metadata.name=` one of them);
//! - group `authz-group-nodes`: nodes; group `authz-group-b`: configmaps in `authz-b`;
//! - `authz-none`: nothing;
//! - the `reader` token may impersonate the users `authz-ns` and `authz-none` and the group
//!   `authz-group-b`, nothing else (`nobody` may impersonate nothing).
//!
//! Views: JSON, protobuf, Table and PartialObjectMetadata(List); watches in JSON, Table and
//! metadata. Selectors, paging with each server's continue tokens, a token of another list,
//! forged tokens (another namespace, `..`, junk), and `X-Remote-*` headers a client made up.

use crate::real_differential::fields;
use crate::support::auth::{serve_args, TlsClient, Who};
use crate::support::real::real_upstream;
use bytes::Bytes;
use futures_util::StreamExt;
use http::{Method, Request};
use http_body_util::BodyExt;
use kache::upstream::Upstream;
use serde_json::{json, Value};
use std::collections::BTreeSet;
use std::time::Duration;

const JSON: &str = "application/json";
const PB: &str = "application/vnd.kubernetes.protobuf";
const TABLE: &str = "application/json;as=Table;v=v1;g=meta.k8s.io";
const META_LIST: &str = "application/json;as=PartialObjectMetadataList;v=v1;g=meta.k8s.io";
const META: &str = "application/json;as=PartialObjectMetadata;v=v1;g=meta.k8s.io";
const POPULATED: &str = "ns-001";

/// Which credentials a request carries.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Token {
    Admin,
    Reader,
    Nobody,
    Anonymous,
    Junk,
}

/// Who asks: credentials and the headers that change who they act as.
#[derive(Clone, Debug)]
struct Identity {
    token: Token,
    headers: Vec<(&'static str, String)>,
}

fn who(token: Token, headers: &[(&'static str, &str)]) -> Identity {
    Identity { token, headers: headers.iter().map(|(k, v)| (*k, v.to_string())).collect() }
}

const USER: &str = "impersonate-user";
const GROUP: &str = "impersonate-group";
const UID: &str = "impersonate-uid";
const EXTRA: &str = "impersonate-extra-scopes";

/// Every identity the cases are made by.
fn identities() -> Vec<Identity> {
    use Token::*;
    vec![
        who(Admin, &[]),
        who(Reader, &[]),
        who(Nobody, &[]),
        who(Anonymous, &[]),
        who(Junk, &[]),
        who(Admin, &[(USER, "authz-cluster")]),
        who(Admin, &[(USER, "authz-ns")]),
        who(Admin, &[(USER, "authz-names")]),
        who(Admin, &[(USER, "authz-none")]),
        who(Admin, &[(USER, "authz-grp-user"), (GROUP, "authz-group-nodes")]),
        who(Admin, &[(USER, "authz-grp-user"), (GROUP, "authz-group-b")]),
        who(Admin, &[(USER, "authz-none"), (GROUP, "authz-group-b"), (GROUP, "authz-group-nodes")]),
        who(Admin, &[(USER, "authz-ns"), (UID, "u-1"), (EXTRA, "view")]),
        who(Admin, &[(USER, "system:serviceaccount:authz-a:authz-sa")]),
        who(Admin, &[(USER, "system:serviceaccount:authz-b:authz-sa")]),
        who(Admin, &[(GROUP, "authz-group-b")]),
        who(Admin, &[(UID, "u-1")]),
        who(Admin, &[(USER, "authz-ns"), (GROUP, "system:masters")]),
        who(Admin, &[(USER, "system:anonymous")]),
        who(Admin, &[(USER, "system:anonymous"), (GROUP, "system:unauthenticated")]),
        who(Reader, &[(USER, "authz-ns")]),
        who(Reader, &[(USER, "authz-none")]),
        who(Reader, &[(USER, "authz-cluster")]),
        who(Reader, &[(USER, "authz-ns"), (GROUP, "authz-group-b")]),
        who(Reader, &[(USER, "authz-none"), (GROUP, "authz-group-b")]),
        who(Reader, &[(USER, "authz-ns"), (GROUP, "system:masters")]),
        who(Reader, &[(USER, "authz-ns"), (UID, "u-1")]),
        who(Reader, &[(USER, "authz-ns"), (EXTRA, "view")]),
        who(Reader, &[(USER, "reader")]),
        who(Reader, &[(GROUP, "authz-group-b")]),
        who(Reader, &[("x-remote-user", "admin"), ("x-remote-group", "system:masters")]),
        who(Nobody, &[(USER, "authz-cluster")]),
        who(Nobody, &[(USER, "admin"), (GROUP, "system:masters")]),
        who(Nobody, &[("x-remote-user", "authz-cluster")]),
        who(Anonymous, &[(USER, "authz-cluster")]),
        who(Junk, &[(USER, "authz-ns")]),
    ]
}

/// What is asked.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Shape {
    Get,
    List,
    Watch,
}

#[derive(Clone, Debug)]
struct Ask {
    shape: Shape,
    path: String,
}

fn get(path: impl Into<String>) -> Ask {
    Ask { shape: Shape::Get, path: path.into() }
}

fn list(path: impl Into<String>) -> Ask {
    Ask { shape: Shape::List, path: path.into() }
}

fn watch(path: impl Into<String>) -> Ask {
    Ask { shape: Shape::Watch, path: path.into() }
}

/// Continue tokens the cases use: each server's own, another list's, forged ones.
struct Tokens {
    pods_up: String,
    pods_kache: String,
    cm_a_up: String,
    cm_a_kache: String,
    cm_all_up: String,
    pods_all_up: String,
    forged: Vec<String>,
}

fn b64(s: &str) -> String {
    use base64::Engine;
    base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(s)
}

/// Every request the cases are made of (before the view and the resourceVersion).
fn requests(node: &str, pod: &str, t: &Tokens) -> Vec<Ask> {
    let cm = |ns: &str, q: &str| format!("/api/v1/namespaces/{ns}/configmaps{q}");
    let pods = |q: &str| format!("/api/v1/namespaces/{POPULATED}/pods{q}");
    let mut r = vec![
        list(cm("authz-a", "")),
        list(cm("authz-b", "")),
        list(format!("/api/v1/configmaps?labelSelector={}", q("authz-case"))),
        get(cm("authz-a", "/cm-1")),
        get(cm("authz-a", "/cm-2")),
        get(cm("authz-a", "/missing")),
        get(cm("authz-b", "/cm-0")),
        list(cm("authz-a", "?fieldSelector=metadata.name%3Dcm-1")),
        list(cm("authz-a", "?fieldSelector=metadata.name%3Dcm-2")),
        list(cm("authz-a", "?labelSelector=tier%3Dfront")),
        list(cm("authz-a", "?labelSelector=tier%3Dback&fieldSelector=metadata.name%3Dcm-3")),
        list(cm("authz-b", "?labelSelector=tier%20in%20(front,back)")),
        list("/api/v1/configmaps?fieldSelector=metadata.namespace%3Dauthz-b"),
        get("/api/v1/namespaces/authz-a/secrets/s-0"),
        list("/api/v1/namespaces/authz-a/secrets"),
        list(pods("?limit=20")),
        list(pods("?labelSelector=app%3Danalytics&limit=10")),
        list(pods("?fieldSelector=status.phase%3DRunning&limit=10")),
        list(format!("/api/v1/pods?fieldSelector=spec.nodeName%3D{node}")),
        list("/api/v1/pods?limit=10"),
        get(pods(&format!("/{pod}"))),
        list("/api/v1/nodes?limit=10"),
        get(format!("/api/v1/nodes/{node}")),
        list(format!("/api/v1/nodes?fieldSelector=metadata.name%3D{node}")),
        list("/api/v1/namespaces?fieldSelector=metadata.name%3Dauthz-a"),
        get("/api/v1/namespaces/authz-a"),
        list(pods(&format!("?limit=5&continue={}", t.pods_up))),
        list(pods(&format!("?limit=5&continue={}", t.pods_kache))),
        list(cm("authz-a", &format!("?limit=2&continue={}", t.cm_a_up))),
        list(cm("authz-a", &format!("?limit=2&continue={}", t.cm_a_kache))),
        list(cm("authz-a", &format!("?limit=2&continue={}", t.cm_all_up))),
        list(cm("authz-b", &format!("?limit=2&continue={}", t.cm_a_up))),
        list(format!("/api/v1/configmaps?limit=2&continue={}", t.cm_a_up)),
        list(format!("/api/v1/pods?limit=5&continue={}", t.pods_up)),
        list(pods(&format!("?limit=5&continue={}", t.pods_all_up))),
        watch(cm("authz-a", "?watch=1")),
        watch(cm("authz-a", "?watch=1&fieldSelector=metadata.name%3Dcm-1")),
        watch(cm("authz-a", "?watch=1&fieldSelector=metadata.name%3Dcm-2")),
        watch(cm("authz-b", "?watch=1&labelSelector=tier%3Dfront")),
        watch(format!("/api/v1/configmaps?watch=1&labelSelector={}", q("authz-case"))),
        watch(format!("/api/v1/pods?watch=1&fieldSelector=spec.nodeName%3D{node}")),
        watch(format!("/api/v1/nodes?watch=1&fieldSelector=metadata.name%3D{node}")),
        watch(pods("?watch=1&labelSelector=app%3Danalytics,shard%3D10")),
    ];
    for f in &t.forged {
        r.push(list(cm("authz-a", &format!("?limit=2&continue={f}"))));
        r.push(list(format!("/api/v1/configmaps?limit=2&continue={f}")));
    }
    r
}

fn q(s: &str) -> String {
    crate::support::q(s)
}

/// One case: who asks what, in which view.
#[derive(Clone, Debug)]
struct Case {
    who: Identity,
    path: String,
    accept: &'static str,
    shape: Shape,
}

impl Case {
    fn describe(&self) -> String {
        let h: Vec<String> = self.who.headers.iter().map(|(k, v)| format!("{k}: {v}")).collect();
        format!("{:?} {} GET {} [{}]", self.who.token, h.join(", "), self.path, self.accept)
    }
}

/// splitmix64: the generator is the seed's alone.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    fn pick<T: Copy>(&mut self, from: &[T]) -> T {
        from[(self.next() % from.len() as u64) as usize]
    }
}

/// Every identity with every request, each in a view the generator picks (and a second
/// view for a third of them), half of the unpaged lists at `resourceVersion=0`.
fn cases(seed: u64, requests: &[Ask]) -> Vec<Case> {
    let mut rng = Rng(seed);
    let mut out = Vec::new();
    for who in identities() {
        for r in requests {
            let views: &[&'static str] = match r.shape {
                Shape::Get => &[JSON, PB, TABLE, META],
                Shape::List => &[JSON, PB, TABLE, META_LIST],
                Shape::Watch => &[JSON, TABLE, META],
            };
            let n = if rng.next().is_multiple_of(3) { 2 } else { 1 };
            for _ in 0..n {
                let mut path = r.path.clone();
                let sep = if path.contains('?') { '&' } else { '?' };
                match r.shape {
                    Shape::Watch => path.push_str(&format!("{sep}timeoutSeconds=1")),
                    // Not with a limit: the apiserver answers `resourceVersion=0` whole from its
                    // watch cache (30,000 pods), which only costs time here.
                    Shape::List if !path.contains("limit=") && rng.next().is_multiple_of(2) => {
                        path.push_str(&format!("{sep}resourceVersion=0"))
                    }
                    _ => {}
                }
                out.push(Case { who: who.clone(), path, accept: rng.pick(views), shape: r.shape });
            }
        }
    }
    // A seeded shuffle, so a user's decisions are not all asked in a row.
    for i in (1..out.len()).rev() {
        out.swap(i, (rng.next() % (i as u64 + 1)) as usize);
    }
    out
}

/// What an answer shows: its status, and the names of the objects it carries (for a
/// watch, of its events' objects, and `ERROR <code>` for an error event).
#[derive(Debug, Clone, PartialEq, Eq)]
struct Seen {
    status: u16,
    names: BTreeSet<String>,
}

fn name_of(o: &Value) -> Option<String> {
    o["metadata"]["name"].as_str().map(str::to_string)
}

/// Names in a JSON list, Table or object (a Table's rows carry the object's metadata).
fn json_names(v: &Value) -> BTreeSet<String> {
    if let Some(rows) = v["rows"].as_array() {
        return rows.iter().filter_map(|r| name_of(&r["object"])).collect();
    }
    if let Some(items) = v["items"].as_array() {
        return items.iter().filter_map(name_of).collect();
    }
    if v["kind"] == "Status" {
        return BTreeSet::new();
    }
    name_of(v).into_iter().collect()
}

/// Names in a protobuf list or object: items are field 2 of a list, metadata field 1 of an
/// object, the name field 1 of metadata.
fn pb_names(body: &[u8]) -> BTreeSet<String> {
    let u = crate::support::unknown(body);
    let (_, kind) = crate::support::type_of(&u);
    let raw = u.raw.unwrap_or_default();
    let name = |obj: &[u8]| -> Option<String> {
        let meta = fields(obj)?.into_iter().find(|f| f.0 == 1)?.2;
        let n = fields(&meta)?.into_iter().find(|f| f.0 == 1)?.2;
        String::from_utf8(n).ok()
    };
    if kind == "Status" {
        BTreeSet::new()
    } else if kind.ends_with("List") {
        fields(&raw).unwrap_or_default().into_iter().filter(|f| f.0 == 2).filter_map(|f| name(&f.2)).collect()
    } else {
        name(&raw).into_iter().collect()
    }
}

fn seen(c: &Case, status: u16, body: &[u8]) -> Seen {
    let names = if !(200..300).contains(&status) {
        BTreeSet::new()
    } else if c.shape == Shape::Watch {
        let mut names = BTreeSet::new();
        for line in body.split(|b| *b == b'\n').filter(|l| !l.is_empty()) {
            let e: Value = serde_json::from_slice(line).unwrap_or(Value::Null);
            match e["type"].as_str() {
                Some("ERROR") => {
                    names.insert(format!("ERROR {}", e["object"]["code"]));
                }
                Some(_) => names.extend(json_names(&e["object"])),
                None => {
                    names.insert(format!("undecodable event {}", String::from_utf8_lossy(line)));
                }
            }
        }
        names
    } else if c.accept == PB {
        pb_names(body)
    } else {
        json_names(&serde_json::from_slice(body).unwrap_or(Value::Null))
    };
    Seen { status, names }
}

/// The two servers and the credentials behind each token.
struct Sides {
    up: Upstream,
    kache: Vec<(Token, TlsClient)>,
    tokens: Vec<(Token, Option<String>)>,
}

impl Sides {
    fn bearer(&self, t: Token) -> Option<&str> {
        self.tokens.iter().find(|(k, _)| *k == t).and_then(|(_, v)| v.as_deref())
    }

    /// The apiserver's answer; a connection that broke is tried again (twice), as a client
    /// would.
    async fn upstream(&self, c: &Case) -> Seen {
        let mut last = String::new();
        for _ in 0..3 {
            match self.upstream_once(c).await {
                Ok(seen) => return seen,
                Err(e) => last = e,
            }
        }
        panic!("{}: {last}", c.describe())
    }

    async fn upstream_once(&self, c: &Case) -> Result<Seen, String> {
        let mut req = Request::new(kache::body::empty());
        *req.uri_mut() = c.path.parse().expect("a path");
        let h = req.headers_mut();
        h.insert("accept", c.accept.parse().unwrap());
        if let Some(t) = self.bearer(c.who.token) {
            h.insert("authorization", format!("Bearer {t}").parse().unwrap());
        }
        for (k, v) in &c.who.headers {
            h.append(*k, v.parse().unwrap());
        }
        let resp = self.up.send_as_client(req).await.map_err(|e| format!("{e:?}"))?;
        let status = resp.status().as_u16();
        let body = resp.into_body().collect().await.map_err(|e| format!("{e:?}"))?.to_bytes();
        Ok(seen(c, status, &body))
    }

    async fn kache(&self, c: &Case) -> Seen {
        let client = &self.kache.iter().find(|(t, _)| *t == c.who.token).expect("a client per token").1;
        let mut headers: Vec<(&str, &str)> = vec![("accept", c.accept)];
        headers.extend(c.who.headers.iter().map(|(k, v)| (*k, v.as_str())));
        let r = client.request(Method::GET, &c.path, &headers, Vec::new()).await;
        seen(c, r.status, &r.body)
    }
}

/// The bearer token of each of the kubeconfig's contexts `admin`, `reader` and `nobody`.
pub(crate) fn context_tokens(path: &std::path::Path) -> Vec<(Token, Option<String>)> {
    let kc = kube::config::Kubeconfig::read_from(path).expect("the kubeconfig reads");
    let token = |ctx: &str| -> String {
        let user = kc.contexts.iter().find(|c| c.name == ctx).and_then(|c| c.context.as_ref()).map(|c| c.user.clone().unwrap_or_default());
        let user = user.unwrap_or_else(|| panic!("the kubeconfig has no context {ctx}"));
        let auth = kc.auth_infos.iter().find(|a| a.name == user).and_then(|a| a.auth_info.as_ref()).expect("the context's user");
        // kube serialises a SecretString as its value.
        serde_json::to_value(auth).ok().and_then(|v| v["token"].as_str().map(str::to_string)).unwrap_or_else(|| panic!("{ctx} has a token"))
    };
    vec![
        (Token::Admin, Some(token("admin"))),
        (Token::Reader, Some(token("reader"))),
        (Token::Nobody, Some(token("nobody"))),
        (Token::Anonymous, None),
        (Token::Junk, Some("authz-made-up-token-0123456789".into())),
    ]
}

pub(crate) async fn send(up: &Upstream, method: Method, path: &str, v: Option<&Value>) -> (u16, Value) {
    let body = v.map(|v| v.to_string().into_bytes()).unwrap_or_default();
    let resp = up.request(method, path, &[("content-type", JSON), ("accept", JSON)], body).await.unwrap_or_else(|e| panic!("{path}: {e}"));
    let status = resp.status().as_u16();
    let body: Bytes = resp.into_body().collect().await.map(|b| b.to_bytes()).unwrap_or_default();
    (status, serde_json::from_slice(&body).unwrap_or(Value::Null))
}

async fn create(up: &Upstream, path: &str, v: Value) {
    let (code, body) = send(up, Method::POST, path, Some(&v)).await;
    assert!(code == 201 || code == 409, "POST {path}: {code} {body}");
}

const TIER_NAMESPACES: [&str; 2] = ["authz-a", "authz-b"];
const CLUSTER_ROLES: [&str; 4] = ["authz-read-all", "authz-read-cm", "authz-read-nodes", "authz-impersonate-some"];
const CLUSTER_BINDINGS: [&str; 3] = ["authz-cluster", "authz-group-nodes", "authz-reader-impersonates"];

fn rule(resources: &[&str], names: &[&str]) -> Value {
    let mut r = json!({"apiGroups": [""], "resources": resources, "verbs": ["get", "list", "watch"]});
    if !names.is_empty() {
        r["resourceNames"] = json!(names);
    }
    r
}

fn binding(kind: &str, name: &str, ns: Option<&str>, role: (&str, &str), subjects: Value) -> Value {
    let mut meta = json!({"name": name});
    if let Some(ns) = ns {
        meta["namespace"] = json!(ns);
    }
    json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": kind, "metadata": meta,
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": role.0, "name": role.1}, "subjects": subjects})
}

fn user(name: &str) -> Value {
    json!({"kind": "User", "apiGroup": "rbac.authorization.k8s.io", "name": name})
}

fn group(name: &str) -> Value {
    json!({"kind": "Group", "apiGroup": "rbac.authorization.k8s.io", "name": name})
}

/// Make the tier's namespaces, ConfigMaps, a Secret and the RBAC above.
async fn objects(up: &Upstream) {
    remove(up).await;
    for ns in TIER_NAMESPACES {
        create(up, "/api/v1/namespaces", json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}})).await;
    }
    for (ns, n) in [("authz-a", 5), ("authz-b", 3)] {
        for i in 0..n {
            let tier = if i % 2 == 0 { "front" } else { "back" };
            let cm = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": format!("cm-{i}"), "namespace": ns,
                "labels": {"tier": tier, "authz-case": "1"}}, "data": {"i": i.to_string()}});
            create(up, &format!("/api/v1/namespaces/{ns}/configmaps"), cm).await;
        }
    }
    let secret =
        json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "s-0", "namespace": "authz-a"}, "data": {"k": "c2VjcmV0"}});
    create(up, "/api/v1/namespaces/authz-a/secrets", secret).await;
    let cr = |name: &str, rules: Value| json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole", "metadata": {"name": name}, "rules": rules});
    let role = |ns: &str, name: &str, rules: Value| json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role", "metadata": {"name": name, "namespace": ns}, "rules": rules});
    let rbac = "/apis/rbac.authorization.k8s.io/v1";
    create(
        up,
        &format!("{rbac}/clusterroles"),
        cr("authz-read-all", json!([rule(&["pods", "configmaps", "secrets", "nodes", "namespaces"], &[])])),
    )
    .await;
    create(up, &format!("{rbac}/clusterroles"), cr("authz-read-cm", json!([rule(&["configmaps"], &[])]))).await;
    create(up, &format!("{rbac}/clusterroles"), cr("authz-read-nodes", json!([rule(&["nodes"], &[])]))).await;
    let impersonate = json!([
        {"apiGroups": [""], "resources": ["users"], "verbs": ["impersonate"], "resourceNames": ["authz-ns", "authz-none"]},
        {"apiGroups": [""], "resources": ["groups"], "verbs": ["impersonate"], "resourceNames": ["authz-group-b"]},
    ]);
    create(up, &format!("{rbac}/clusterroles"), cr("authz-impersonate-some", impersonate)).await;
    create(
        up,
        &format!("{rbac}/namespaces/authz-a/roles"),
        role("authz-a", "authz-read", json!([rule(&["pods", "configmaps", "secrets"], &[])])),
    )
    .await;
    create(
        up,
        &format!("{rbac}/namespaces/authz-a/roles"),
        role("authz-a", "authz-names", json!([rule(&["configmaps"], &["cm-1", "cm-3"])])),
    )
    .await;
    let crb = format!("{rbac}/clusterrolebindings");
    create(
        up,
        &crb,
        binding("ClusterRoleBinding", "authz-cluster", None, ("ClusterRole", "authz-read-all"), json!([user("authz-cluster")])),
    )
    .await;
    create(
        up,
        &crb,
        binding("ClusterRoleBinding", "authz-group-nodes", None, ("ClusterRole", "authz-read-nodes"), json!([group("authz-group-nodes")])),
    )
    .await;
    create(
        up,
        &crb,
        binding(
            "ClusterRoleBinding",
            "authz-reader-impersonates",
            None,
            ("ClusterRole", "authz-impersonate-some"),
            json!([user("reader")]),
        ),
    )
    .await;
    let sa = json!({"kind": "ServiceAccount", "name": "authz-sa", "namespace": "authz-a"});
    let rb = |ns: &str| format!("{rbac}/namespaces/{ns}/rolebindings");
    create(up, &rb("authz-a"), binding("RoleBinding", "authz-ns", Some("authz-a"), ("Role", "authz-read"), json!([user("authz-ns"), sa])))
        .await;
    create(
        up,
        &rb("authz-a"),
        binding("RoleBinding", "authz-names", Some("authz-a"), ("Role", "authz-names"), json!([user("authz-names")])),
    )
    .await;
    create(
        up,
        &rb("authz-b"),
        binding("RoleBinding", "authz-group-b", Some("authz-b"), ("ClusterRole", "authz-read-cm"), json!([group("authz-group-b")])),
    )
    .await;
    create(
        up,
        &rb(POPULATED),
        binding("RoleBinding", "authz-pods", Some(POPULATED), ("ClusterRole", "authz-read-all"), json!([user("authz-ns")])),
    )
    .await;
}

/// Remove everything [`objects`] makes. With no namespace controller in the tier, a deleted
/// namespace is emptied here and then finalized.
async fn remove(up: &Upstream) {
    let rbac = "/apis/rbac.authorization.k8s.io/v1";
    let mut paths: Vec<String> = CLUSTER_BINDINGS.iter().map(|n| format!("{rbac}/clusterrolebindings/{n}")).collect();
    paths.extend(CLUSTER_ROLES.iter().map(|n| format!("{rbac}/clusterroles/{n}")));
    paths.push(format!("{rbac}/namespaces/{POPULATED}/rolebindings/authz-pods"));
    for ns in TIER_NAMESPACES {
        for kind in ["configmaps", "secrets"] {
            paths.push(format!("/api/v1/namespaces/{ns}/{kind}"));
        }
        for kind in ["roles", "rolebindings"] {
            paths.push(format!("{rbac}/namespaces/{ns}/{kind}"));
        }
    }
    for p in &paths {
        send(up, Method::DELETE, p, None).await;
    }
    for ns in TIER_NAMESPACES {
        let (code, _) = send(up, Method::DELETE, &format!("/api/v1/namespaces/{ns}"), None).await;
        if code == 404 {
            continue;
        }
        let (_, mut obj) = send(up, Method::GET, &format!("/api/v1/namespaces/{ns}"), None).await;
        if obj["kind"] == "Namespace" {
            obj["spec"]["finalizers"] = json!([]);
            let (code, body) = send(up, Method::PUT, &format!("/api/v1/namespaces/{ns}/finalize"), Some(&obj)).await;
            assert!(code == 200 || code == 404, "finalize {ns}: {code} {body}");
        }
        crate::support::eventually(60, 100, || async {
            let (code, _) = send(up, Method::GET, &format!("/api/v1/namespaces/{ns}"), None).await;
            if code == 404 {
                Ok(())
            } else {
                Err(format!("namespace {ns} still there ({code})"))
            }
        })
        .await;
    }
}

/// A list's continue token, asked with admin's credentials.
async fn continue_of(seen_by: &Sides, from_kache: bool, path: &str) -> String {
    let c = Case { who: who(Token::Admin, &[]), path: path.into(), accept: JSON, shape: Shape::List };
    let v: Value = if from_kache {
        let client = &seen_by.kache.iter().find(|(t, _)| *t == Token::Admin).unwrap().1;
        client.must(client.get(path).await)
    } else {
        send(&seen_by.up, Method::GET, &c.path, None).await.1
    };
    v["metadata"]["continue"].as_str().unwrap_or_else(|| panic!("{path} continues: {v}")).to_string()
}

async fn tokens(s: &Sides) -> Tokens {
    let pods = format!("/api/v1/namespaces/{POPULATED}/pods?limit=5");
    let cm_a = "/api/v1/namespaces/authz-a/configmaps?limit=2";
    let rv = send(&s.up, Method::GET, "/api/v1/namespaces/authz-a/configmaps?limit=1", None).await.1["metadata"]["resourceVersion"]
        .as_str()
        .unwrap_or("1")
        .to_string();
    let forge = |start: &str| q(&b64(&format!(r#"{{"v":"meta.k8s.io/v1","rv":{rv},"start":"{start}"}}"#)));
    Tokens {
        pods_up: q(&continue_of(s, false, &pods).await),
        pods_kache: q(&continue_of(s, true, &pods).await),
        cm_a_up: q(&continue_of(s, false, cm_a).await),
        cm_a_kache: q(&continue_of(s, true, cm_a).await),
        cm_all_up: q(&continue_of(s, false, &format!("/api/v1/configmaps?limit=2&labelSelector={}", q("authz-case"))).await),
        pods_all_up: q(&continue_of(s, false, "/api/v1/pods?limit=5").await),
        forged: vec![
            forge("authz-b/\u{0}"),
            forge("../authz-b/cm-0"),
            forge("/authz-b/"),
            forge("cm-0\u{0}"),
            forge("cm-1"),
            forge("/"),
            forge("authz-a/cm-3"),
            q(&b64(r#"{"v":"meta.k8s.io/v2","rv":1,"start":"cm-0"}"#)),
            "bm90LWEtdG9rZW4".into(),
            q(&b64(r#"{"v":"meta.k8s.io/v1","rv":1,"start":"cm-0\u0000"}"#)),
        ],
    }
}

/// Ask one case of both; a difference is asked again (twice) before it counts, so an
/// object that changed between the two answers is not taken for a mismatch.
async fn differ(s: &Sides, c: &Case) -> (Option<String>, Seen) {
    let mut last = String::new();
    let mut answer = Seen { status: 0, names: BTreeSet::new() };
    for _ in 0..3 {
        let (k, a) = tokio::join!(s.kache(c), s.upstream(c));
        if k == a {
            return (None, a);
        }
        answer = a.clone();
        let extra: Vec<_> = k.names.difference(&a.names).collect();
        let missing: Vec<_> = a.names.difference(&k.names).collect();
        last = format!(
            "{}\n    kache {} / apiserver {}; kache's extra {:?}; missing {:?}",
            c.describe(),
            k.status,
            a.status,
            extra.iter().take(8).collect::<Vec<_>>(),
            missing.iter().take(8).collect::<Vec<_>>()
        );
    }
    (Some(last), answer)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn real_authz_kache_allows_and_shows_exactly_what_the_apiserver_does() {
    let Some(real) = real_upstream("real_authz") else { return };
    kache::upstream::install_crypto_provider();
    let up = real.upstream().await;
    objects(&up).await;
    let seed = std::env::var("KACHE_AUTHZ_SEED").ok().and_then(|s| s.parse().ok()).unwrap_or(23u64);

    let flags = ["--listen", "127.0.0.1:0", "--preload", "pods,configmaps,nodes,namespaces", "--allow-anonymous", "--shutdown-grace", "1"];
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let serving = kache::app::start_serve_args(real.upstream().await, &serve_args(&flags), async move {
        let _ = stopped.await;
    })
    .await
    .expect("kache starts");
    assert!(serving.serve.wait_synced(Duration::from_secs(600)).await, "the preloaded caches sync");
    let tokens_ = context_tokens(&real.kubeconfig);
    let ca = serving.ca_pem.clone().expect("kache's CA");
    let kache = tokens_
        .iter()
        .map(|(t, v)| {
            let w = match v {
                Some(v) => Who::Token(v),
                None => Who::Nobody,
            };
            (*t, TlsClient::new(&serving.url, &ca, w))
        })
        .collect();
    let sides = Sides { up, kache, tokens: tokens_ };

    let nodes = send(&sides.up, Method::GET, "/api/v1/nodes?limit=1", None).await.1;
    let node = nodes["items"][0]["metadata"]["name"].as_str().expect("a node").to_string();
    let pods = send(&sides.up, Method::GET, &format!("/api/v1/namespaces/{POPULATED}/pods?limit=1"), None).await.1;
    let pod = pods["items"][0]["metadata"]["name"].as_str().expect("a pod").to_string();
    let t = tokens(&sides).await;
    let all = cases(seed, &requests(&node, &pod, &t));
    let started = std::time::Instant::now();
    let answers: Vec<(Option<String>, Seen)> =
        futures_util::stream::iter(all.iter()).map(|c| differ(&sides, c)).buffer_unordered(8).collect().await;
    let mut by_status = std::collections::BTreeMap::<u16, (usize, usize)>::new();
    for (_, a) in &answers {
        let e = by_status.entry(a.status).or_default();
        e.0 += 1;
        e.1 += usize::from(!a.names.is_empty());
    }
    let mismatches: Vec<String> = answers.into_iter().filter_map(|(m, _)| m).collect();
    eprintln!(
        "real_authz: seed {seed}, {} cases ({} identities), {} mismatches, in {:?}",
        all.len(),
        identities().len(),
        mismatches.len(),
        started.elapsed()
    );
    for (status, (n, named)) in &by_status {
        eprintln!("  the apiserver answered {status} to {n} cases ({named} of them with objects)");
    }
    for m in &mismatches {
        eprintln!("  MISMATCH {m}");
    }
    drop(stop);
    remove(&sides.up).await;
    assert!(all.len() >= 1000, "{} cases", all.len());
    assert!(mismatches.is_empty(), "{} of {} cases differ", mismatches.len(), all.len());
}
