//! The simulator's authentication and authorization: a users file (bearer tokens mapped to
//! users, some of them expired), client certificates (user = CN, groups = O), anonymous
//! requests, a small RBAC model (rules on verbs, API groups, resources, names, namespaces,
//! non-resource URLs and required field selectors, bound to users and groups), the built-in
//! grants every apiserver has (discovery, health, self reviews, `system:masters`), and an
//! audit log of every request judged, so tests can see who the upstream thinks did what.

use crate::api::status::Status;
use crate::api::time::{parse_rfc3339, unix_now};
use crate::auth::tls::CertIdentity;
use crate::auth::{authn, Attributes, Identity, AUTHENTICATED, MASTERS, UNAUTHENTICATED};
use http::HeaderMap;
use serde::Deserialize;
use std::collections::{BTreeMap, HashMap, VecDeque};
use std::path::Path;
use std::sync::Mutex;

/// Audit records kept (the oldest are dropped beyond this).
const AUDIT_RECORDS: usize = 20_000;

/// A token's user in the users file.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct TokenUser {
    /// User name.
    pub username: String,
    /// User uid.
    #[serde(default)]
    pub uid: String,
    /// Groups (`system:authenticated` is added).
    #[serde(default)]
    pub groups: Vec<String>,
    /// Extra attributes.
    #[serde(default)]
    pub extra: BTreeMap<String, Vec<String>>,
    /// When the token stops working (RFC 3339, UTC `Z`); never when unset.
    #[serde(default)]
    pub expires_at: Option<String>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct UsersFile {
    #[serde(default)]
    tokens: BTreeMap<String, TokenUser>,
}

/// One RBAC rule with its subjects (a role and its binding in one).
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct Rule {
    /// A name, for people reading the file (read by nothing else).
    #[serde(default, rename = "name")]
    pub _name: String,
    /// Users the rule applies to.
    #[serde(default)]
    pub users: Vec<String>,
    /// Groups the rule applies to.
    #[serde(default)]
    pub groups: Vec<String>,
    /// Verbs allowed (`*` for all).
    pub verbs: Vec<String>,
    /// API groups (`""` for core, `*` for all).
    #[serde(default)]
    pub api_groups: Vec<String>,
    /// Resources (`pods`, `pods/log`, `pods/*`, `*/scale`, `*`).
    #[serde(default)]
    pub resources: Vec<String>,
    /// Object names the rule is limited to (none: all).
    #[serde(default)]
    pub resource_names: Vec<String>,
    /// Namespaces the rule is limited to (a RoleBinding); unset: every namespace and the
    /// cluster scope (a ClusterRoleBinding).
    #[serde(default)]
    pub namespaces: Option<Vec<String>>,
    /// Non-resource paths (`/metrics`, `/apis/*`); a rule with these matches only them.
    #[serde(default, rename = "nonResourceURLs")]
    pub non_resource_urls: Vec<String>,
    /// A field-selector requirement (`spec.nodeName=node-1`) list and watch requests must
    /// carry, as the node authorizer demands of kubelets.
    #[serde(default)]
    pub field_selector: Option<String>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct RbacFile {
    #[serde(default)]
    rules: Vec<Rule>,
}

/// One judged request.
#[derive(Debug, Clone)]
pub struct AuditRecord {
    /// Who the request acted as.
    pub user: Identity,
    /// Who sent it, when that was someone impersonating `user`.
    pub impersonator: Option<String>,
    /// What it asked to do.
    pub attributes: Attributes,
    /// The HTTP status it got.
    pub code: u16,
}

/// Users, rules and the audit log of a simulator that checks requests.
#[derive(Debug)]
pub struct SimAuth {
    tokens: HashMap<String, TokenUser>,
    rules: Vec<Rule>,
    audit: Mutex<VecDeque<AuditRecord>>,
}

fn parse_file<T: serde::de::DeserializeOwned + Default>(path: Option<&Path>) -> Result<T, String> {
    let Some(path) = path else { return Ok(T::default()) };
    let text = std::fs::read_to_string(path).map_err(|e| format!("{}: {e}", path.display()))?;
    let parsed = if text.trim_start().starts_with('{') {
        serde_json::from_str(&text).map_err(|e| e.to_string())
    } else {
        serde_saphyr::from_str(&text).map_err(|e| e.to_string())
    };
    parsed.map_err(|e| format!("{}: {e}", path.display()))
}

/// Now as RFC 3339 UTC seconds.
pub fn now_rfc3339() -> String {
    crate::api::time::rfc3339(unix_now())
}

fn has(list: &[String], v: &str) -> bool {
    list.iter().any(|x| x == "*" || x == v)
}

/// Requirements of a field selector, normalized (`a==b` as `a=b`, spaces removed).
fn requirements(selector: &str) -> Vec<String> {
    selector.split(',').map(|r| r.replace(' ', "").replace("==", "=")).filter(|r| !r.is_empty()).collect()
}

fn path_matches(patterns: &[String], path: &str) -> bool {
    patterns.iter().any(|p| p == "*" || p == path || p.strip_suffix('*').is_some_and(|prefix| path.starts_with(prefix)))
}

impl Rule {
    fn applies_to(&self, id: &Identity) -> bool {
        self.users.contains(&id.username) || self.groups.iter().any(|g| id.in_group(g))
    }

    fn allows(&self, id: &Identity, a: &Attributes) -> bool {
        if !self.applies_to(id) || !has(&self.verbs, &a.verb) {
            return false;
        }
        let Some(r) = &a.resource else {
            return path_matches(&self.non_resource_urls, &a.path);
        };
        if !self.non_resource_urls.is_empty() || !has(&self.api_groups, &r.group) {
            return false;
        }
        let resource_ok = self.resources.iter().any(|x| {
            x == "*"
                || (r.subresource.is_empty() && *x == r.resource)
                || (!r.subresource.is_empty()
                    && (*x == format!("{}/{}", r.resource, r.subresource)
                        || *x == format!("{}/*", r.resource)
                        || *x == format!("*/{}", r.subresource)))
        });
        let name_ok = self.resource_names.is_empty() || (!r.name.is_empty() && self.resource_names.contains(&r.name));
        let ns_ok = self.namespaces.as_ref().is_none_or(|nss| !r.namespace.is_empty() && has(nss, &r.namespace));
        let selector_ok = match (&self.field_selector, a.verb.as_str()) {
            (Some(want), "list" | "watch" | "deletecollection") => {
                let have = requirements(&r.field_selector);
                requirements(want).iter().all(|w| have.contains(w))
            }
            _ => true,
        };
        resource_ok && name_ok && ns_ok && selector_ok
    }
}

/// What every apiserver grants without RBAC objects of the user's own: health and version to
/// everyone, discovery and self reviews to authenticated users.
fn builtin(id: &Identity, a: &Attributes) -> bool {
    if id.in_group(MASTERS) {
        return true;
    }
    let authenticated = id.in_group(AUTHENTICATED);
    match &a.resource {
        None => {
            let public = ["/version", "/healthz", "/livez", "/readyz", "/healthz/*", "/livez/*", "/readyz/*"].map(String::from);
            let discovery = ["/api", "/api/*", "/apis", "/apis/*", "/openapi", "/openapi/*"].map(String::from);
            a.verb == "get" && (path_matches(&public, &a.path) || (authenticated && path_matches(&discovery, &a.path)))
        }
        Some(r) => {
            authenticated
                && a.verb == "create"
                && matches!(
                    (r.group.as_str(), r.resource.as_str()),
                    ("authentication.k8s.io", "selfsubjectreviews")
                        | ("authorization.k8s.io", "selfsubjectaccessreviews" | "selfsubjectrulesreviews")
                )
        }
    }
}

impl SimAuth {
    /// Load the users and RBAC files (either may be absent: no tokens, or only the built-in
    /// grants).
    pub fn load(users: Option<&Path>, rbac: Option<&Path>) -> Result<SimAuth, String> {
        let u: UsersFile = parse_file(users)?;
        let r: RbacFile = parse_file(rbac)?;
        for (token, user) in &u.tokens {
            if token.is_empty() || user.username.is_empty() {
                return Err("users file: every token needs a non-empty token and username".into());
            }
            if let Some(t) = user.expires_at.as_deref().filter(|t| parse_rfc3339(t).is_none()) {
                return Err(format!(
                    "users file: expiresAt {t:?} of {:?} is not an RFC 3339 UTC time like 2024-01-02T03:04:05Z",
                    user.username
                ));
            }
        }
        Ok(SimAuth { tokens: u.tokens.into_iter().collect(), rules: r.rules, audit: Mutex::new(VecDeque::new()) })
    }

    /// The user of a token, unless it is unknown or expired (what TokenReview answers).
    pub fn token_user(&self, token: &str) -> Option<Identity> {
        let u = self.tokens.get(token)?;
        if u.expires_at.as_deref().and_then(parse_rfc3339).is_some_and(|t| t <= unix_now()) {
            return None;
        }
        let mut groups = u.groups.clone();
        if !groups.iter().any(|g| g == AUTHENTICATED) {
            groups.push(AUTHENTICATED.into());
        }
        Some(Identity { username: u.username.clone(), uid: u.uid.clone(), groups, extra: u.extra.clone() })
    }

    /// Who sent a request: its client certificate, else its bearer token (401 if refused),
    /// else anonymous (the apiserver's default: anonymous requests are then authorized).
    pub fn authenticate(&self, cert: Option<&CertIdentity>, headers: &HeaderMap) -> Result<Identity, Status> {
        if let Some(c) = cert {
            return Ok(Identity::from_cert(c));
        }
        match authn::bearer(headers) {
            Some(token) => self.token_user(token).ok_or_else(Status::unauthorized),
            None => Ok(Identity { groups: vec![UNAUTHENTICATED.into()], ..Identity::anonymous() }),
        }
    }

    /// Whether `id` may do `a`.
    pub fn allows(&self, id: &Identity, a: &Attributes) -> bool {
        builtin(id, a) || self.rules.iter().any(|r| r.allows(id, a))
    }

    /// Record a judged request.
    pub fn record(&self, r: AuditRecord) {
        let mut audit = self.audit.lock().unwrap_or_else(|e| e.into_inner());
        if audit.len() >= AUDIT_RECORDS {
            audit.pop_front();
        }
        audit.push_back(r);
    }

    /// Every recorded request, oldest first.
    pub fn audit(&self) -> Vec<AuditRecord> {
        self.audit.lock().unwrap_or_else(|e| e.into_inner()).iter().cloned().collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use http::Method;

    fn auth() -> SimAuth {
        let dir = tempfile::tempdir().unwrap();
        let users = dir.path().join("users.yaml");
        std::fs::write(
            &users,
            "tokens:\n  t-alice: {username: alice, uid: u1, groups: [devs]}\n  t-old: {username: old, expiresAt: \"2001-01-01T00:00:00Z\"}\n",
        )
        .unwrap();
        let rbac = dir.path().join("rbac.json");
        std::fs::write(
            &rbac,
            r#"{"rules":[
              {"users":["alice"],"verbs":["get","list","watch"],"apiGroups":[""],"resources":["pods"],"namespaces":["a"]},
              {"groups":["system:nodes"],"verbs":["list","watch"],"apiGroups":[""],"resources":["pods"],"fieldSelector":"spec.nodeName=n1"},
              {"users":["ops"],"verbs":["get"],"nonResourceURLs":["/metrics"]}
            ]}"#,
        )
        .unwrap();
        SimAuth::load(Some(&users), Some(&rbac)).unwrap()
    }

    fn attrs(method: Method, path_query: &str) -> Attributes {
        let (p, q) = path_query.split_once('?').map_or((path_query, None), |(p, q)| (p, Some(q)));
        Attributes::of_path(&method, p, q)
    }

    #[test]
    fn tokens_rules_and_builtins() {
        let a = auth();
        let alice = a.token_user("t-alice").unwrap();
        assert_eq!(alice.groups, vec!["devs", AUTHENTICATED]);
        assert!(a.token_user("t-old").is_none(), "expired");
        assert!(a.token_user("nope").is_none());
        assert!(a.allows(&alice, &attrs(Method::GET, "/api/v1/namespaces/a/pods")));
        assert!(!a.allows(&alice, &attrs(Method::GET, "/api/v1/namespaces/b/pods")));
        assert!(!a.allows(&alice, &attrs(Method::GET, "/api/v1/pods")));
        assert!(!a.allows(&alice, &attrs(Method::POST, "/api/v1/namespaces/a/pods")));
        assert!(a.allows(&alice, &attrs(Method::GET, "/apis")));
        let node = Identity {
            username: "system:node:n1".into(),
            groups: vec!["system:nodes".into(), AUTHENTICATED.into()],
            ..Identity::default()
        };
        assert!(a.allows(&node, &attrs(Method::GET, "/api/v1/pods?fieldSelector=spec.nodeName%3Dn1")));
        assert!(a.allows(&node, &attrs(Method::GET, "/api/v1/pods?watch=1&fieldSelector=spec.nodeName%3D%3Dn1")));
        assert!(!a.allows(&node, &attrs(Method::GET, "/api/v1/pods?fieldSelector=spec.nodeName%3Dn2")));
        assert!(!a.allows(&node, &attrs(Method::GET, "/api/v1/pods")));
        let anon = Identity::anonymous();
        assert!(a.allows(&anon, &attrs(Method::GET, "/version")));
        assert!(!a.allows(&anon, &attrs(Method::GET, "/apis")));
        let ops = Identity { username: "ops".into(), ..Identity::default() };
        assert!(a.allows(&ops, &attrs(Method::GET, "/metrics")));
        let root = Identity { username: "root".into(), groups: vec![MASTERS.into()], ..Identity::default() };
        assert!(a.allows(&root, &attrs(Method::DELETE, "/api/v1/namespaces/x")));
    }

    #[test]
    fn times_parse_and_print() {
        assert_eq!(parse_rfc3339("1970-01-01T00:00:00Z"), Some(0));
        assert_eq!(parse_rfc3339("2026-11-22T02:06:27Z"), Some(1_795_313_187));
        assert_eq!(parse_rfc3339("2026-11-22 02:06:27"), None);
        let now = now_rfc3339();
        assert!((parse_rfc3339(&now).unwrap() - unix_now()).abs() <= 1);
    }
}
