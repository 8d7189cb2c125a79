//! Who is asking and what they ask to do: the [`Identity`] of a client (from a client
//! certificate, a bearer token or neither) and the authorization [`Attributes`] of a request,
//! computed the way the apiserver's RequestInfo does, so kache and the simulator judge a
//! request exactly alike. Submodules: `tls` (serving certificates, client-certificate
//! identities), `authn` (TokenReview), `authz` (SubjectAccessReview), `impersonate`
//! (`Impersonate-*` headers), `ttl` (the bounded decision caches), `security` (the pipeline
//! step `kache serve` runs before answering a request).

pub(crate) mod authn;
pub(crate) mod authz;
pub mod impersonate;
mod review;
pub(crate) mod security;
pub(crate) mod tls;
pub(crate) mod ttl;

/// Default of `--max-token-review-rate-per-address`: reviews of never-judged tokens one
/// source address may cause a second.
pub const TOKEN_REVIEW_RATE: u32 = 20;
pub use review::LANE as REVIEW_LANE;
pub use security::{Caller, Passthrough, Security, SecuritySettings};

use crate::api::route::{ResourcePath, Target};
use crate::api::status::Status;
use http::Method;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// The group every authenticated user is in.
pub const AUTHENTICATED: &str = "system:authenticated";
/// The group of the anonymous user.
pub const UNAUTHENTICATED: &str = "system:unauthenticated";
/// The anonymous user's name.
pub const ANONYMOUS: &str = "system:anonymous";
/// Members of this group may do anything (the apiserver's superuser group).
pub const MASTERS: &str = "system:masters";

/// An authenticated user, as TokenReview's `UserInfo` has it.
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Identity {
    /// User name (`system:serviceaccount:ns:name` for service accounts).
    #[serde(default)]
    pub username: String,
    /// User uid, if the authenticator knows one.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub uid: String,
    /// Groups, including `system:authenticated` (or `system:unauthenticated`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub groups: Vec<String>,
    /// Extra attributes (e.g. a service-account token's pod name).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub extra: BTreeMap<String, Vec<String>>,
}

impl Identity {
    /// `system:anonymous` in `system:unauthenticated`.
    pub fn anonymous() -> Identity {
        Identity { username: ANONYMOUS.into(), groups: vec![UNAUTHENTICATED.into()], ..Identity::default() }
    }

    /// A user from a verified client certificate: user = CN, groups = O, plus
    /// `system:authenticated`.
    pub fn from_cert(cert: &tls::CertIdentity) -> Identity {
        let mut groups = cert.organizations.clone();
        groups.push(AUTHENTICATED.into());
        Identity { username: cert.common_name.clone(), groups, ..Identity::default() }
    }

    /// Whether the user is in `group`.
    pub fn in_group(&self, group: &str) -> bool {
        self.groups.iter().any(|g| g == group)
    }
}

/// The resource part of a request's authorization attributes.
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash)]
pub struct ResourceAttributes {
    /// Namespace (empty: cluster scope, or all namespaces).
    pub namespace: String,
    /// API group (empty for core).
    pub group: String,
    /// API version.
    pub version: String,
    /// Resource (plural).
    pub resource: String,
    /// Subresource, if any.
    pub subresource: String,
    /// Object name, if any.
    pub name: String,
    /// The raw `fieldSelector` of a list, watch or deletecollection.
    pub field_selector: String,
    /// The raw `labelSelector` of a list, watch or deletecollection.
    pub label_selector: String,
}

/// What a request asks to do: a verb on a resource, or on a non-resource path.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Attributes {
    /// `get`, `list`, `watch`, `create`, `update`, `patch`, `delete`, `deletecollection`,
    /// `impersonate`, ...
    pub verb: String,
    /// The resource, or `None` for a non-resource request (discovery, health, ...).
    pub resource: Option<ResourceAttributes>,
    /// The request path (what a non-resource request is judged on).
    pub path: String,
}

fn is_true(v: Option<&str>) -> bool {
    v.is_some_and(crate::api::query::boolean)
}

/// The value a field selector requires `metadata.name` to equal exactly, if it does.
fn exact_name(selector: &str) -> Option<String> {
    selector.split(',').find_map(|req| {
        let v = req.trim().strip_prefix("metadata.name")?.trim_start();
        let v = v.strip_prefix("==").or_else(|| v.strip_prefix('='))?.trim();
        (!v.is_empty() && !v.contains('/') && v != "." && v != "..").then(|| v.to_string())
    })
}

impl Attributes {
    /// The attributes of a request, as the apiserver's RequestInfo computes them, from its
    /// path as the caller classified it (`target`, `None` for a path that is not an API
    /// path): a request's path is classified once, where it is read.
    pub fn of(method: &Method, path: &str, target: Option<&Target>, query: Option<&str>) -> Attributes {
        match target {
            Some(Target::Resource(p)) => Attributes::of_resource(method, path, p, query),
            _ => Attributes::non_resource(method, path),
        }
    }

    fn non_resource(method: &Method, path: &str) -> Attributes {
        let verb = match *method {
            Method::GET | Method::HEAD => "get".to_string(),
            ref m => m.as_str().to_ascii_lowercase(),
        };
        Attributes { verb, resource: None, path: path.to_string() }
    }

    /// [`of`](Self::of) for a request whose path was classified as `p`.
    pub fn of_resource(method: &Method, path: &str, p: &ResourcePath, query: Option<&str>) -> Attributes {
        let (mut watch, mut field_selector, mut label_selector) = (None, None, None);
        for (k, v) in form_urlencoded::parse(query.unwrap_or("").as_bytes()) {
            let slot = match &*k {
                "watch" => &mut watch,
                "fieldSelector" => &mut field_selector,
                "labelSelector" => &mut label_selector,
                _ => continue,
            };
            slot.get_or_insert_with(|| v.into_owned());
        }
        let named = p.name.is_some();
        let verb = match *method {
            Method::GET | Method::HEAD if named => "get",
            Method::GET | Method::HEAD if is_true(watch.as_deref()) => "watch",
            Method::GET | Method::HEAD => "list",
            Method::POST => "create",
            Method::PUT => "update",
            Method::PATCH => "patch",
            Method::DELETE if named => "delete",
            Method::DELETE => "deletecollection",
            _ => return Attributes::non_resource(method, path),
        };
        // The namespace of a Namespace object is itself (RequestInfo's special case).
        let namespace = match (&p.namespace, p.group.is_empty() && p.plural == "namespaces") {
            (Some(ns), _) => ns.clone(),
            (None, true) => p.name.clone().unwrap_or_default(),
            (None, false) => String::new(),
        };
        let selectors = matches!(verb, "list" | "watch" | "deletecollection");
        let selector = |s: Option<String>| if selectors { s.unwrap_or_default() } else { String::new() };
        let (field_selector, label_selector) = (selector(field_selector), selector(label_selector));
        // A list or watch of one object by `metadata.name=` is judged as on that name.
        let by_name = (!named && selectors).then(|| exact_name(&field_selector)).flatten();
        let r = ResourceAttributes {
            namespace,
            field_selector,
            label_selector,
            group: p.group.clone(),
            version: p.version.clone(),
            resource: p.plural.clone(),
            subresource: p.subresource.clone().unwrap_or_default(),
            name: p.name.clone().or(by_name).unwrap_or_default(),
        };
        Attributes { verb: verb.to_string(), resource: Some(r), path: path.to_string() }
    }

    /// The 403 the apiserver sends when `user` may not do this; `reason` (the authorizer's,
    /// possibly empty) is appended after a colon.
    pub fn forbidden(&self, user: &str, reason: &str) -> Status {
        let mut msg = match &self.resource {
            None => format!("User {user:?} cannot {} path {:?}", self.verb, self.path),
            Some(r) => {
                let resource = if r.subresource.is_empty() { r.resource.clone() } else { format!("{}/{}", r.resource, r.subresource) };
                if r.namespace.is_empty() {
                    format!("User {user:?} cannot {} resource {resource:?} in API group {:?} at the cluster scope", self.verb, r.group)
                } else {
                    format!(
                        "User {user:?} cannot {} resource {resource:?} in API group {:?} in the namespace {:?}",
                        self.verb, r.group, r.namespace
                    )
                }
            }
        };
        if !reason.is_empty() {
            msg.push_str(": ");
            msg.push_str(reason);
        }
        match &self.resource {
            None => Status::forbidden("", "", "", &msg),
            Some(r) => Status::forbidden(&r.group, &r.resource, &r.name, &msg),
        }
    }
}

#[cfg(test)]
impl Attributes {
    /// [`Attributes::of`] for a path a test names, classified here.
    pub(crate) fn of_path(method: &Method, path: &str, query: Option<&str>) -> Attributes {
        Attributes::of(method, path, crate::api::route::classify(path).as_ref(), query)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn attributes_follow_request_info() {
        let a = Attributes::of_path(&Method::GET, "/api/v1/namespaces/golden/pods", Some("labelSelector=app%3Dweb"));
        let r = a.resource.clone().unwrap();
        assert_eq!(
            (a.verb.as_str(), r.namespace.as_str(), r.resource.as_str(), r.label_selector.as_str()),
            ("list", "golden", "pods", "app=web")
        );
        let a = Attributes::of_path(&Method::GET, "/api/v1/pods", Some("watch=1&fieldSelector=spec.nodeName%3Dn1"));
        assert_eq!((a.verb.as_str(), a.resource.unwrap().field_selector.as_str()), ("watch", "spec.nodeName=n1"));
        let a = Attributes::of_path(&Method::GET, "/api/v1/namespaces/kube-system", None);
        let r = a.resource.unwrap();
        assert_eq!((a.verb.as_str(), r.namespace.as_str(), r.name.as_str()), ("get", "kube-system", "kube-system"));
        let a = Attributes::of_path(&Method::DELETE, "/apis/apps/v1/namespaces/a/deployments", None);
        assert_eq!(a.verb, "deletecollection");
        let a = Attributes::of_path(&Method::GET, "/apis", None);
        assert!(a.resource.is_none());
        let a = Attributes::of_path(&Method::GET, "/api/v1/namespaces/a/pods/p/log", Some("fieldSelector=x"));
        let r = a.resource.unwrap();
        assert_eq!((r.subresource.as_str(), r.field_selector.as_str()), ("log", ""));
    }

    #[test]
    fn forbidden_messages_are_the_apiservers() {
        let a = Attributes::of_path(&Method::GET, "/api/v1/namespaces/golden/pods", None);
        assert_eq!(
            a.forbidden("anchor-nobody", "").message,
            "pods is forbidden: User \"anchor-nobody\" cannot list resource \"pods\" in API group \"\" in the namespace \"golden\""
        );
        let a = Attributes::of_path(&Method::GET, "/apis/apps/v1/deployments", None);
        let s = a.forbidden("u", "no");
        assert_eq!(
            s.message,
            "deployments.apps is forbidden: User \"u\" cannot list resource \"deployments\" in API group \"apps\" at the cluster scope: no"
        );
        let a = Attributes::of_path(&Method::GET, "/api/v1/nodes/n1", None);
        assert_eq!(
            a.forbidden("u", "").message,
            "nodes \"n1\" is forbidden: User \"u\" cannot get resource \"nodes\" in API group \"\" at the cluster scope"
        );
        let a = Attributes::of_path(&Method::GET, "/apis", None);
        assert_eq!(a.forbidden("u", "").message, "forbidden: User \"u\" cannot get path \"/apis\"");
    }
}
