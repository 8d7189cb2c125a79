//! Classify a request path: discovery documents, or a resource path split into group,
//! version, resource, namespace, name and subresource. No state is consulted here.

use percent_encoding::percent_decode_str;

/// What a path addresses.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Target {
    /// `/version`.
    Version,
    /// `/api`.
    Api,
    /// `/apis`.
    Apis,
    /// `/apis/{group}`.
    Group(String),
    /// `/api/v1` or `/apis/{group}/{version}`.
    GroupVersion(String, String),
    /// A resource collection, object or subresource.
    Resource(ResourcePath),
    /// Health checks (`/healthz`, `/livez`, `/readyz`).
    Health,
}

/// A path under a group/version that names a resource.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ResourcePath {
    /// API group (empty for core).
    pub group: String,
    /// Version.
    pub version: String,
    /// Plural resource name.
    pub plural: String,
    /// Namespace segment, if any.
    pub namespace: Option<String>,
    /// Object name, if any.
    pub name: Option<String>,
    /// Subresource (`status`, `log`, `exec`, ...), if any.
    pub subresource: Option<String>,
}

impl ResourcePath {
    /// Whether the path's scope fits a resource of this scope: a namespaced kind's object is
    /// addressed within a namespace (its collection may be listed across all of them); a
    /// cluster-scoped kind's never is.
    pub fn in_scope(&self, namespaced: bool) -> bool {
        if namespaced {
            self.namespace.is_some() || self.name.is_none()
        } else {
            self.namespace.is_none()
        }
    }
}

fn decode(seg: &str) -> Option<String> {
    let s = percent_decode_str(seg).decode_utf8().ok()?.into_owned();
    (!s.is_empty() && s != "." && s != ".." && !s.contains('/')).then_some(s)
}

/// Classify a path (without query). `None` for paths that are not API paths.
pub fn classify(path: &str) -> Option<Target> {
    let segs: Vec<&str> = path.trim_start_matches('/').split('/').collect();
    match segs.as_slice() {
        ["version"] => Some(Target::Version),
        ["healthz" | "livez" | "readyz", ..] => Some(Target::Health),
        ["api"] => Some(Target::Api),
        ["apis"] => Some(Target::Apis),
        ["apis", g] => Some(Target::Group(decode(g)?)),
        ["api", v] => Some(Target::GroupVersion(String::new(), decode(v)?)),
        ["apis", g, v] => Some(Target::GroupVersion(decode(g)?, decode(v)?)),
        ["api", v, rest @ ..] => resource(String::new(), decode(v)?, rest),
        ["apis", g, v, rest @ ..] => resource(decode(g)?, decode(v)?, rest),
        _ => None,
    }
}

fn resource(group: String, version: String, rest: &[&str]) -> Option<Target> {
    let mut p = ResourcePath { group, version, ..ResourcePath::default() };
    let rest = match rest {
        // `namespaces/{ns}` and its own subresources address a Namespace object.
        ["namespaces", ns] | ["namespaces", ns, "status" | "finalize"] if p.group.is_empty() => {
            p.plural = "namespaces".into();
            p.name = Some(decode(ns)?);
            p.subresource = rest.get(2).map(|s| s.to_string());
            return Some(Target::Resource(p));
        }
        ["namespaces", ns, more @ ..] if !more.is_empty() => {
            p.namespace = Some(decode(ns)?);
            more
        }
        other => other,
    };
    match rest {
        [plural] => p.plural = decode(plural)?,
        [plural, name] => {
            p.plural = decode(plural)?;
            p.name = Some(decode(name)?);
        }
        [plural, name, sub @ ..] if !sub.is_empty() => {
            p.plural = decode(plural)?;
            p.name = Some(decode(name)?);
            p.subresource = Some(sub.join("/"));
        }
        _ => return None,
    }
    Some(Target::Resource(p))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn res(path: &str) -> ResourcePath {
        match classify(path) {
            Some(Target::Resource(r)) => r,
            other => panic!("{path}: {other:?}"),
        }
    }

    #[test]
    fn paths_split_like_the_apiserver() {
        let r = res("/api/v1/namespaces/golden/pods/web-1");
        assert_eq!(
            (r.group.as_str(), r.plural.as_str(), r.namespace.as_deref(), r.name.as_deref()),
            ("", "pods", Some("golden"), Some("web-1"))
        );
        let r = res("/api/v1/pods");
        assert_eq!((r.plural.as_str(), r.namespace, r.name), ("pods", None, None));
        let r = res("/apis/apps/v1/namespaces/a/deployments/d/scale");
        assert_eq!((r.group.as_str(), r.subresource.as_deref()), ("apps", Some("scale")));
        let r = res("/api/v1/namespaces/kube-system");
        assert_eq!((r.plural.as_str(), r.name.as_deref(), r.namespace), ("namespaces", Some("kube-system"), None));
        let r = res("/api/v1/namespaces/a/status");
        assert_eq!((r.plural.as_str(), r.subresource.as_deref()), ("namespaces", Some("status")));
        let r = res("/api/v1/namespaces/a/pods/p/log");
        assert_eq!(r.subresource.as_deref(), Some("log"));
        let r = res("/api/v1/nodes/n1");
        assert_eq!((r.plural.as_str(), r.name.as_deref()), ("nodes", Some("n1")));
        assert_eq!(classify("/apis/apps/v1"), Some(Target::GroupVersion("apps".into(), "v1".into())));
        assert_eq!(classify("/version"), Some(Target::Version));
        assert_eq!(classify("/api/v1/namespaces/%2e%2e/pods"), None);
        assert_eq!(classify("/nope"), None);
    }
}
