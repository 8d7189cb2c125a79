//! Operations: the ClusterRole in deploy/base/clusterrole.yaml covers exactly what kache
//! calls on the upstream with its own identity.
//!
//! How: the simulator authenticates tokens and enforces RBAC; kache's service account gets
//! exactly the rules of the ClusterRole (read from the YAML file), plus the `list`/`watch` of
//! one custom resource that deploy/README.md ("Caching more kinds") tells operators to add,
//! nothing else. kache (the binary, the default --preload plus that custom resource,
//! --passthrough-auth=impersonate) runs in front of it through a recording proxy, and clients
//! drive every path that makes kache call the upstream: start (discovery, LIST+WATCH of each
//! preloaded kind, the custom resource's CRD for its Table columns, consistency probes),
//! cached reads (token review, access review) and pass-through writes as a plain user and as
//! a service account with uid and extras (impersonation of users, groups, service accounts,
//! uids, extras). Then from the recorded requests made with kache's own token:
//! - covered: none of them was refused (no 401/403), and each is allowed by the ClusterRole
//!   (or the custom resource's added rule);
//! - exact: every (API group, resource, verb) the ClusterRole grants was used at least once.
//!
//! The list of calls is thus kept next to the code that makes them, by running that code.

use crate::support::ops::{request_as, request_as_accepting, AuthSim, Call, KacheBin, Proxy, Scrape};
use http::Method;
use serde_json::{json, Value};
use std::collections::BTreeSet;
use std::path::Path;

const KACHE_USER: &str = "system:serviceaccount:kache:kache";

/// The default --preload, plus a custom resource (cached with its CRD's printer columns).
const PRELOAD: &str = "pods,nodes,namespaces,services,configmaps,widgets.example.com";

/// The rule an operator adds to the ClusterRole to cache the custom resource in [`PRELOAD`]
/// (deploy/README.md, "Caching more kinds").
fn custom_resource_rule() -> Value {
    json!({"apiGroups": ["example.com"], "resources": ["widgets"], "verbs": ["list", "watch"]})
}

/// The extras a bound service-account token carries (what a pod's client presents).
const SA_EXTRAS: &[&str] = &[
    "authentication.kubernetes.io/credential-id",
    "authentication.kubernetes.io/node-name",
    "authentication.kubernetes.io/node-uid",
    "authentication.kubernetes.io/pod-name",
    "authentication.kubernetes.io/pod-uid",
];

fn users() -> String {
    let extras: Vec<String> = SA_EXTRAS.iter().map(|k| format!("\"{k}\": [\"v-{}\"]", k.rsplit('/').next().unwrap())).collect();
    format!(
        "tokens:\n  kache-token: {{username: \"{KACHE_USER}\", uid: uid-kache, groups: [\"system:serviceaccounts\", \"system:serviceaccounts:kache\"]}}\n  alice-token: {{username: alice, uid: uid-alice, groups: [devs]}}\n  worker-token: {{username: \"system:serviceaccount:apps:worker\", uid: uid-worker, groups: [\"system:serviceaccounts\", \"system:serviceaccounts:apps\"], extra: {{{}}}}}\n",
        extras.join(", ")
    )
}

/// The ClusterRole's rules, as JSON.
fn cluster_role_rules() -> Vec<Value> {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("deploy/base/clusterrole.yaml");
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let role: Value = serde_saphyr::from_str(&text).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    assert_eq!(role["kind"], "ClusterRole");
    role["rules"].as_array().expect("rules").clone()
}

fn strings(v: &Value) -> Vec<String> {
    v.as_array().into_iter().flatten().filter_map(Value::as_str).map(str::to_string).collect()
}

/// (group, resource, verb) triples a set of rules grants (no wildcards allowed here: a
/// least-privilege role names what it grants).
fn granted(rules: &[Value]) -> BTreeSet<(String, String, String)> {
    let mut out = BTreeSet::new();
    for r in rules {
        assert!(r.get("nonResourceURLs").is_none() && r.get("resourceNames").is_none(), "unexpected rule shape: {r}");
        for g in strings(&r["apiGroups"]) {
            for res in strings(&r["resources"]) {
                for v in strings(&r["verbs"]) {
                    assert!(g != "*" && res != "*" && v != "*", "wildcard in the ClusterRole: {r}");
                    out.insert((g.clone(), res.clone(), v));
                }
            }
        }
    }
    out
}

/// The simulator's RBAC file: kache gets the ClusterRole's rules; the clients get what the
/// test has them do.
fn rbac(rules: &[Value]) -> String {
    let mut out = vec![];
    for (i, r) in rules.iter().enumerate() {
        out.push(json!({"name": format!("kache-{i}"), "users": [KACHE_USER], "verbs": r["verbs"], "apiGroups": r["apiGroups"], "resources": r["resources"]}));
    }
    out.push(json!({"name": "alice", "users": ["alice"], "verbs": ["get", "list", "watch", "create"], "apiGroups": [""], "resources": ["pods", "configmaps"]}));
    out.push(json!({"name": "alice-widgets", "users": ["alice"], "verbs": ["get", "list", "watch"], "apiGroups": ["example.com"], "resources": ["widgets"]}));
    out.push(json!({"name": "worker", "users": ["system:serviceaccount:apps:worker"], "verbs": ["get", "list", "watch", "create"], "apiGroups": [""], "resources": ["pods", "configmaps"]}));
    json!({"rules": out}).to_string()
}

/// (group, version, namespace, resource, name) of a request path.
type ResourcePath = (String, String, Option<String>, String, Option<String>);

/// Split a request path into its [`ResourcePath`]; None for non-resource paths (discovery).
fn resource_of(path: &str) -> Option<ResourcePath> {
    let path = path.split('?').next().unwrap_or("");
    let segs: Vec<&str> = path.trim_matches('/').split('/').collect();
    let (group, version, rest) = match segs.as_slice() {
        ["api", v, rest @ ..] => (String::new(), v.to_string(), rest),
        ["apis", g, v, rest @ ..] => (g.to_string(), v.to_string(), rest),
        _ => return None,
    };
    let (ns, rest) = match rest {
        ["namespaces", ns, r, tail @ ..] => (Some(ns.to_string()), [&[*r][..], tail].concat()),
        other => (None, other.to_vec()),
    };
    match rest.as_slice() {
        [] => None,
        [r] => Some((group, version, ns, r.to_string(), None)),
        [r, n, ..] => Some((group, version, ns, r.to_string(), Some(n.to_string()))),
    }
}

/// The RBAC attributes kache's own identity needs for one recorded call.
fn needs(c: &Call) -> Vec<(String, String, String)> {
    let mut out = Vec::new();
    if c.impersonate.is_empty() {
        let Some((group, _, _, resource, name)) = resource_of(&c.path) else {
            assert_eq!(c.method, "GET", "a non-resource call other than discovery: {c:?}");
            return out;
        };
        let watch = c.path.contains("watch=1") || c.path.contains("watch=true");
        let verb = match (c.method.as_str(), name.is_some(), watch) {
            ("GET", _, true) => "watch",
            ("GET", true, false) => "get",
            ("GET", false, false) => "list",
            ("POST", _, _) => "create",
            (m, _, _) => panic!("kache called {m} {} with its own identity", c.path),
        };
        out.push((group, resource, verb.to_string()));
        return out;
    }
    // Impersonated: the request runs as the client; kache needs the impersonate rights.
    for (h, v) in &c.impersonate {
        let need = if h == "impersonate-user" {
            if v.starts_with("system:serviceaccount:") {
                ("", "serviceaccounts")
            } else {
                ("", "users")
            }
        } else if h == "impersonate-group" {
            ("", "groups")
        } else if h == "impersonate-uid" {
            ("authentication.k8s.io", "uids")
        } else if let Some(key) = h.strip_prefix("impersonate-extra-") {
            let key = percent_encoding::percent_decode_str(key).decode_utf8_lossy().to_string();
            out.push(("authentication.k8s.io".into(), format!("userextras/{key}"), "impersonate".into()));
            continue;
        } else {
            panic!("unknown impersonation header {h}");
        };
        out.push((need.0.into(), need.1.into(), "impersonate".into()));
    }
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_cluster_role_covers_exactly_what_kache_calls() {
    let rules = cluster_role_rules();
    let grants = granted(&rules);
    let with_custom: Vec<Value> = rules.iter().cloned().chain([custom_resource_rule()]).collect();
    let allowed = granted(&with_custom);
    let sim =
        AuthSim::start(&users(), &rbac(&with_custom), &["--nodes", "10", "--pods", "100", "--namespaces", "3", "--bookmark-interval", "1"])
            .await;
    let proxy = Proxy::start(&sim.addr, true).await;
    // Default --passthrough-auth and --preload (what deploy/replicas runs), plus a custom
    // resource.
    let k = KacheBin::spawn_with_token(&proxy.url(), "kache-token", &["--preload", PRELOAD], &[], 120).await;
    k.readyz_becomes(200, 120).await;

    // A custom resource's Table from cache: kache read the CRD's printer columns.
    let table = |views: &Scrape| views.sum(kache::telemetry::CACHED_VIEWS, &[("view", "table")]);
    let before = table(&k.scrape().await);
    let table_accept = "application/json;as=Table;v=v1;g=meta.k8s.io";
    let path = "/apis/example.com/v1/widgets?resourceVersion=0";
    let (code, body) = request_as_accepting(k.addr, "alice-token", Method::GET, path, None, table_accept).await;
    assert_eq!(code, 200, "a Table of widgets: {body}");
    let columns = serde_json::from_str::<Value>(&body).expect("a Table")["columnDefinitions"].as_array().map_or(0, Vec::len);
    assert_eq!(columns, 18, "Name and the CRD's 17 printer columns: {body}");
    assert_eq!(table(&k.scrape().await), before + 1.0, "answered from cache");

    for (token, ns) in [("alice-token", "default"), ("worker-token", "ns-0001")] {
        // Cached reads: token review, access review.
        let (code, body) = request_as(k.addr, token, Method::GET, "/api/v1/pods?resourceVersion=0", None).await;
        assert_eq!(code, 200, "{token}: cached LIST: {body}");
        let (code, body) =
            request_as(k.addr, token, Method::GET, &format!("/api/v1/namespaces/{ns}/configmaps?resourceVersion=0"), None).await;
        assert_eq!(code, 200, "{token}: cached LIST of configmaps: {body}");
        // Pass-through write: impersonation.
        let cm = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": format!("rbac-{}", token.trim_end_matches("-token")), "namespace": ns}});
        let (code, body) = request_as(k.addr, token, Method::POST, &format!("/api/v1/namespaces/{ns}/configmaps"), Some(cm)).await;
        assert_eq!(code, 201, "{token}: create through kache: {body}");
        // Consistent read: the consistency probe (a LIST with limit=1).
        let (code, body) = request_as(k.addr, token, Method::GET, "/api/v1/pods", None).await;
        assert_eq!(code, 200, "{token}: consistent LIST: {body}");
    }

    let calls: Vec<Call> = proxy.seen().into_iter().filter(|c| c.token.as_deref() == Some("kache-token")).collect();
    assert!(!calls.is_empty(), "no call with kache's token recorded");
    let refused: Vec<&Call> = calls.iter().filter(|c| c.status == 401 || c.status == 403).collect();
    assert!(refused.is_empty(), "calls kache made with its own identity that the ClusterRole's rules refused: {refused:#?}");
    let mut used = BTreeSet::new();
    for c in &calls {
        for n in needs(c) {
            assert!(
                allowed.contains(&n),
                "kache needs {n:?} for {} {} (impersonating {:?}), which deploy/base/clusterrole.yaml does not grant",
                c.method,
                c.path,
                c.impersonate
            );
            used.insert(n);
        }
    }
    let unused: Vec<_> = grants.difference(&used).collect();
    assert!(unused.is_empty(), "deploy/base/clusterrole.yaml grants what kache never used: {unused:?}\nused: {used:#?}");
}

/// A kind in `--preload` that the ClusterRole does not grant (an operator added it to
/// KACHE_PRELOAD but not to the role): kache becomes ready all the same, says why that cache
/// is empty, and its reads pass through as their client (who may read it: 200, or not: 403).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_preloaded_kind_kache_may_not_list_does_not_hold_readiness_back() {
    let mut role = serde_json::from_str::<Value>(&rbac(&cluster_role_rules())).unwrap();
    role["rules"]
        .as_array_mut()
        .unwrap()
        .push(json!({"name": "alice-secrets", "users": ["alice"], "verbs": ["list"], "apiGroups": [""], "resources": ["secrets"]}));
    let sim = AuthSim::start(&users(), &role.to_string(), &["--nodes", "5", "--pods", "20", "--namespaces", "2"]).await;
    let k = KacheBin::spawn_with_token(&format!("http://{}", sim.addr), "kache-token", &["--preload", "pods,secrets"], &[], 120).await;
    let body = k.readyz_becomes(200, 120).await;
    let line = body.lines().find(|l| l.contains("cache secrets")).unwrap_or_else(|| panic!("no check of the secrets cache:\n{body}"));
    assert!(line.contains("forbidden to kache's identity"), "{line}");
    assert!(body.lines().any(|l| l.contains("cache pods") && l.contains("ok")), "{body}");
    let path = "/api/v1/namespaces/default/secrets";
    for (token, want) in [("alice-token", 200), ("worker-token", 403)] {
        let (code, text) = request_as(k.addr, token, Method::GET, path, None).await;
        let (direct, _) = request_as(sim.addr, token, Method::GET, path, None).await;
        assert_eq!((code, direct), (want, want), "{token}: {text}");
    }
}
