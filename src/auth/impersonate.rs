//! `Impersonate-*` headers, the apiserver's way: what a client asks to act as (and the
//! `impersonate` permissions that takes), the identity that results, and writing an identity
//! as headers for a request kache passes through with its own credentials.

use super::{Attributes, Identity, ResourceAttributes, ANONYMOUS, AUTHENTICATED, UNAUTHENTICATED};
use crate::api::status::Status;
use http::{HeaderMap, HeaderName, HeaderValue};
use percent_encoding::{percent_decode_str, utf8_percent_encode, AsciiSet, NON_ALPHANUMERIC};
use std::collections::BTreeMap;

/// `Impersonate-User`.
pub const USER: &str = "impersonate-user";
/// `Impersonate-Group` (repeated).
pub const GROUP: &str = "impersonate-group";
/// `Impersonate-Uid`.
pub const UID: &str = "impersonate-uid";
/// Prefix of `Impersonate-Extra-{key}` (repeated per value; the key percent-encoded).
pub const EXTRA_PREFIX: &str = "impersonate-extra-";

/// Characters of an extra key that must be escaped to form a header name.
const EXTRA_KEY: &AsciiSet = &NON_ALPHANUMERIC.remove(b'-').remove(b'.').remove(b'_').remove(b'~');

/// What a client asked to act as.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Requested {
    /// The user (a `system:serviceaccount:ns:name` user is checked as that service account).
    pub user: String,
    /// The groups, as sent.
    pub groups: Vec<String>,
    /// The uid, if sent.
    pub uid: Option<String>,
    /// Extra attributes (keys lowercased, unescaped).
    pub extra: BTreeMap<String, Vec<String>>,
}

fn is_impersonation(name: &str) -> bool {
    name == USER || name == GROUP || name == UID || name.starts_with(EXTRA_PREFIX)
}

/// Remove every `Impersonate-*` header.
pub fn strip(headers: &mut HeaderMap) {
    let names: Vec<HeaderName> = headers.keys().filter(|n| is_impersonation(n.as_str())).cloned().collect();
    for n in names {
        headers.remove(n);
    }
}

fn value(v: &HeaderValue) -> Result<String, Status> {
    v.to_str().map(str::to_string).map_err(|_| Status::bad_request("impersonation header values must be visible ASCII"))
}

/// The impersonation a request asks for, if any. Groups, uid or extra without a user is an
/// error (the apiserver answers it with 500; kache with 400, since it is the client's).
pub fn requested(headers: &HeaderMap) -> Result<Option<Requested>, Status> {
    if !headers.keys().any(|n| is_impersonation(n.as_str())) {
        return Ok(None);
    }
    let user = headers.get(USER).map(value).transpose()?.unwrap_or_default();
    let groups = headers.get_all(GROUP).iter().map(value).collect::<Result<Vec<_>, _>>()?;
    let uid = headers.get(UID).map(value).transpose()?;
    let mut extra: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for (name, v) in headers.iter() {
        if let Some(key) = name.as_str().strip_prefix(EXTRA_PREFIX) {
            let key = percent_decode_str(key)
                .decode_utf8()
                .map_err(|_| Status::bad_request("impersonation extra keys must be UTF-8"))?
                .to_lowercase();
            extra.entry(key).or_default().push(value(v)?);
        }
    }
    if user.is_empty() {
        return Err(Status::bad_request("requested impersonation of groups, uid or extra without impersonating a user"));
    }
    Ok(Some(Requested { user, groups, uid, extra }))
}

fn check(resource: &str, group: &str, namespace: &str, name: &str, subresource: &str) -> Attributes {
    let r = ResourceAttributes {
        namespace: namespace.into(),
        group: group.into(),
        resource: resource.into(),
        subresource: subresource.into(),
        name: name.into(),
        ..ResourceAttributes::default()
    };
    Attributes { verb: "impersonate".into(), resource: Some(r), path: String::new() }
}

/// The namespace and name of a service-account user name.
fn service_account(user: &str) -> Option<(&str, &str)> {
    let rest = user.strip_prefix("system:serviceaccount:")?;
    let (ns, name) = rest.split_once(':')?;
    (!ns.is_empty() && !name.is_empty() && !name.contains(':')).then_some((ns, name))
}

impl Requested {
    /// The `impersonate` permissions the requester needs, in the apiserver's order.
    pub fn checks(&self) -> Vec<Attributes> {
        let mut out = Vec::new();
        match service_account(&self.user) {
            Some((ns, name)) => out.push(check("serviceaccounts", "", ns, name, "")),
            None => out.push(check("users", "", "", &self.user, "")),
        }
        for g in &self.groups {
            out.push(check("groups", "", "", g, ""));
        }
        if let Some(uid) = &self.uid {
            out.push(check("uids", "authentication.k8s.io", "", uid, ""));
        }
        for (k, vs) in &self.extra {
            for v in vs {
                out.push(check("userextras", "authentication.k8s.io", "", v, k));
            }
        }
        out
    }

    /// The identity the request then acts as (`system:authenticated` or
    /// `system:unauthenticated` added as the apiserver adds them).
    pub fn identity(&self) -> Identity {
        let mut groups = self.groups.clone();
        if let (Some((ns, _)), true) = (service_account(&self.user), groups.is_empty()) {
            groups = vec!["system:serviceaccounts".into(), format!("system:serviceaccounts:{ns}")];
        }
        if self.user == ANONYMOUS {
            if !groups.iter().any(|g| g == UNAUTHENTICATED) {
                groups.push(UNAUTHENTICATED.into());
            }
        } else if !groups.iter().any(|g| g == AUTHENTICATED || g == UNAUTHENTICATED) {
            groups.push(AUTHENTICATED.into());
        }
        Identity { username: self.user.clone(), uid: self.uid.clone().unwrap_or_default(), groups, extra: self.extra.clone() }
    }
}

/// Write `id` as impersonation headers (replacing any the request had).
pub fn write(headers: &mut HeaderMap, id: &Identity) -> Result<(), Status> {
    strip(headers);
    let bad = |_| Status::bad_request("the identity cannot be written as impersonation headers");
    headers.insert(USER, HeaderValue::from_str(&id.username).map_err(bad)?);
    for g in &id.groups {
        headers.append(GROUP, HeaderValue::from_str(g).map_err(bad)?);
    }
    if !id.uid.is_empty() {
        headers.insert(UID, HeaderValue::from_str(&id.uid).map_err(bad)?);
    }
    for (k, vs) in &id.extra {
        let name = format!("{EXTRA_PREFIX}{}", utf8_percent_encode(k, EXTRA_KEY));
        let name = HeaderName::from_bytes(name.to_ascii_lowercase().as_bytes()).map_err(|_| Status::bad_request("bad extra key"))?;
        for v in vs {
            headers.append(name.clone(), HeaderValue::from_str(v).map_err(bad)?);
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip_and_checks() {
        let id = Identity {
            username: "alice".into(),
            uid: "u1".into(),
            groups: vec!["devs".into(), AUTHENTICATED.into()],
            extra: BTreeMap::from([("authentication.kubernetes.io/pod-name".to_string(), vec!["p1".to_string()])]),
        };
        let mut h = HeaderMap::new();
        h.insert("impersonate-user", HeaderValue::from_static("mallory"));
        write(&mut h, &id).unwrap();
        let r = requested(&h).unwrap().unwrap();
        assert_eq!(r.identity(), id);
        let checks = r.checks();
        assert_eq!(checks.len(), 5);
        assert_eq!(checks[0].resource.as_ref().unwrap().resource, "users");
        assert_eq!(checks[4].resource.as_ref().unwrap().subresource, "authentication.kubernetes.io/pod-name");
        strip(&mut h);
        assert_eq!(requested(&h).unwrap(), None);
    }

    #[test]
    fn service_accounts_and_anonymous_get_the_apiservers_groups() {
        let r = Requested { user: "system:serviceaccount:ns1:sa".into(), groups: vec![], uid: None, extra: BTreeMap::new() };
        assert_eq!(r.identity().groups, vec!["system:serviceaccounts", "system:serviceaccounts:ns1", AUTHENTICATED]);
        let c = &r.checks()[0];
        let ra = c.resource.as_ref().unwrap();
        assert_eq!((ra.resource.as_str(), ra.namespace.as_str(), ra.name.as_str()), ("serviceaccounts", "ns1", "sa"));
        let r = Requested { user: ANONYMOUS.into(), groups: vec![], uid: None, extra: BTreeMap::new() };
        assert_eq!(r.identity().groups, vec![UNAUTHENTICATED]);
        let mut h = HeaderMap::new();
        h.insert("impersonate-group", HeaderValue::from_static("g"));
        assert_eq!(requested(&h).unwrap_err().code, 400);
    }
}
