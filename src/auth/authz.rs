//! Authorization by the upstream's SubjectAccessReview API: the user (name, uid, groups,
//! extra) and the request's attributes (verb, group, resource, subresource, namespace, name,
//! and for list/watch the raw field and label selectors, which the node authorizer judges)
//! are sent as they are; answers are cached by the whole review for a short TTL, allowed
//! and denied answers each for their own. A selected list or watch is allowed without a
//! review of its own when the whole collection is ([`Authorizer::decide`]).

use super::review::{self, ReviewError};
use super::ttl::TtlCache;
use super::{Attributes, Identity};
use crate::api::status::Status;
use crate::upstream::Upstream;
use serde_json::{json, Map, Value};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

/// How access decisions are cached.
#[derive(Debug, Clone)]
pub struct AuthzSettings {
    /// How long an allowed decision is reused.
    pub allow_ttl: Duration,
    /// How long a denied decision is reused.
    pub deny_ttl: Duration,
    /// Decisions remembered at most.
    pub cache_entries: usize,
    /// How long past their TTL decisions are used when the upstream cannot be asked
    /// (`--serve-stale`).
    pub stale: Duration,
    /// SubjectAccessReviews in flight at once in each lane (see [`review::Lanes`]).
    pub concurrent: usize,
}

/// The upstream's answer to one access review.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Verdict {
    /// Whether the request may proceed.
    pub allowed: bool,
    /// The authorizer's reason (appended to a 403's message).
    pub reason: String,
}

/// Asks the upstream whether a user may do something.
pub struct Authorizer {
    upstream: Upstream,
    settings: AuthzSettings,
    /// Decisions by the user they are for: a user flooding it with decisions nobody asks
    /// for again evicts its own (see [`TtlCache`]).
    cache: Arc<TtlCache<Vec<u8>, Verdict>>,
    lanes: review::Lanes,
    reviews: AtomicU64,
    /// The review in flight for each cache key: requests asking the same while it is asked
    /// (two hundred node agents starting together) wait for it instead of each sending one.
    reviewing: review::Turns<Vec<u8>>,
}

/// The `spec` of a SubjectAccessReview of `a` by `id`.
pub fn review_spec(id: &Identity, a: &Attributes) -> Value {
    let mut spec = Map::new();
    match &a.resource {
        Some(r) => {
            let mut ra = Map::new();
            let mut put = |k: &str, v: &str| {
                if !v.is_empty() {
                    ra.insert(k.into(), Value::String(v.into()));
                }
            };
            put("namespace", &r.namespace);
            put("verb", &a.verb);
            put("group", &r.group);
            put("version", &r.version);
            put("resource", &r.resource);
            put("subresource", &r.subresource);
            put("name", &r.name);
            if !r.field_selector.is_empty() {
                ra.insert("fieldSelector".into(), json!({"rawSelector": r.field_selector}));
            }
            if !r.label_selector.is_empty() {
                ra.insert("labelSelector".into(), json!({"rawSelector": r.label_selector}));
            }
            spec.insert("resourceAttributes".into(), Value::Object(ra));
        }
        None => {
            spec.insert("nonResourceAttributes".into(), json!({"path": a.path, "verb": a.verb}));
        }
    }
    spec.insert("user".into(), Value::String(id.username.clone()));
    if !id.groups.is_empty() {
        spec.insert("groups".into(), json!(id.groups));
    }
    if !id.extra.is_empty() {
        spec.insert("extra".into(), json!(id.extra));
    }
    if !id.uid.is_empty() {
        spec.insert("uid".into(), Value::String(id.uid.clone()));
    }
    Value::Object(spec)
}

/// `a` without its selectors, when it is a list or watch of a whole collection (no name,
/// not even one a `metadata.name` selector gives) that has any.
fn unselected(a: &Attributes) -> Option<Attributes> {
    let r = a.resource.as_ref()?;
    let selected = !r.field_selector.is_empty() || !r.label_selector.is_empty();
    if !selected || !r.name.is_empty() || !matches!(a.verb.as_str(), "list" | "watch") {
        return None;
    }
    let mut whole = a.clone();
    if let Some(r) = whole.resource.as_mut() {
        r.field_selector.clear();
        r.label_selector.clear();
    }
    Some(whole)
}

/// Everything a review sends, each part written as its length and its bytes (so no two
/// reviews share a key): cheaper to build per request than the review's JSON.
fn cache_key(id: &Identity, a: &Attributes) -> Vec<u8> {
    let mut key = Vec::with_capacity(160);
    let mut put = |s: &[u8]| {
        key.extend_from_slice(&(s.len() as u64).to_le_bytes());
        key.extend_from_slice(s);
    };
    put(id.username.as_bytes());
    put(id.uid.as_bytes());
    put(&(id.groups.len() as u64).to_le_bytes());
    id.groups.iter().for_each(|g| put(g.as_bytes()));
    put(&(id.extra.len() as u64).to_le_bytes());
    for (k, vs) in &id.extra {
        put(k.as_bytes());
        put(&(vs.len() as u64).to_le_bytes());
        vs.iter().for_each(|v| put(v.as_bytes()));
    }
    put(a.verb.as_bytes());
    match &a.resource {
        Some(r) => {
            for part in [&r.namespace, &r.group, &r.version, &r.resource, &r.subresource, &r.name, &r.field_selector, &r.label_selector] {
                put(part.as_bytes());
            }
        }
        None => put(a.path.as_bytes()),
    }
    key
}

impl Authorizer {
    /// An authorizer asking `upstream`.
    pub fn new(upstream: Upstream, settings: AuthzSettings) -> Authorizer {
        let cache = Arc::new(TtlCache::new(settings.cache_entries).keeping(settings.stale));
        let lanes = review::Lanes::new(settings.concurrent);
        Authorizer { upstream, settings, cache, lanes, reviews: AtomicU64::new(0), reviewing: review::Turns::default() }
    }

    /// SubjectAccessReviews sent to the upstream so far.
    pub fn reviews(&self) -> u64 {
        self.reviews.load(Ordering::Relaxed)
    }

    /// Whether `id` may do `a` (from cache, or by asking the upstream).
    ///
    /// A list or watch with selectors is allowed when the same request without them is:
    /// its client may read every object they choose among. So a user with rights on the
    /// whole collection is asked about once, not once per selector (two hundred node agents
    /// of one account listing their own node's pods: one review instead of two hundred).
    /// Where the whole is denied (a node, whose rights depend on the selector), the
    /// request is asked as it is, and the whole is not asked again for the allow TTL.
    pub async fn decide(&self, id: &Identity, a: &Attributes) -> Result<Verdict, Status> {
        let key = cache_key(id, a);
        if let Some(d) = self.cache.get(&key) {
            return Ok(d);
        }
        if let Some(whole) = unselected(a) {
            if let Some(d) = self.whole_allowed(id, &whole).await {
                return Ok(d);
            }
        }
        self.ask(id, a, key).await
    }

    /// The decision on `whole` (a request stripped of its selectors) if it allows; `None`
    /// if it denies or cannot be had, or was denied within the allow TTL.
    async fn whole_allowed(&self, id: &Identity, whole: &Attributes) -> Option<Verdict> {
        let key = cache_key(id, whole);
        if let Some(d) = self.cache.get(&key) {
            return d.allowed.then_some(d);
        }
        let mut denied = u64::MAX.to_le_bytes().to_vec();
        denied.extend_from_slice(&key);
        if self.cache.get(&denied).is_some() {
            return None;
        }
        match self.ask(id, whole, key).await {
            Ok(d) if d.allowed => Some(d),
            Ok(d) => {
                self.cache.insert_for(super::ttl::owner(&id.username), denied, d, self.settings.allow_ttl);
                None
            }
            Err(_) => None,
        }
    }

    /// The decision cached under `key`, or the upstream's on whether `id` may do `a`; one
    /// review at a time per key, whose answer the requests waiting for it take from the cache.
    async fn ask(&self, id: &Identity, a: &Attributes, key: Vec<u8>) -> Result<Verdict, Status> {
        self.reviewing
            .one_at_a_time(&key, async {
                match self.cache.get(&key) {
                    Some(d) => Ok(d),
                    None => self.review_now(id, a, key.clone()).await,
                }
            })
            .await
    }

    /// Ask the upstream whether `id` may do `a` (cached under `key`).
    async fn review_now(&self, id: &Identity, a: &Attributes, key: Vec<u8>) -> Result<Verdict, Status> {
        let last = self.cache.get_stale(&key);
        self.reviews.fetch_add(1, Ordering::Relaxed);
        let (cache, allow, deny, owner) =
            (self.cache.clone(), self.settings.allow_ttl, self.settings.deny_ttl, super::ttl::owner(&id.username));
        let hold_key = key.clone();
        let keep = move |d: &Verdict| cache.insert_for(owner, key, d.clone(), if d.allowed { allow } else { deny });
        let review = Self::review(self.upstream.clone(), review_spec(id, a));
        match review::judged(&self.lanes, last.is_some(), review, keep).await {
            Ok(d) => Ok(d),
            // The upstream cannot be asked (or is slow to answer): its last answer, within
            // the staleness bound.
            Err(e @ ReviewError::Transport(_)) => match last {
                Some(known) => {
                    // Held as fresh a moment (see `review::judged`); the renewal replaces it.
                    self.cache.insert_for(owner, hold_key, known.clone(), super::review::STOOD_FOR);
                    Ok(known)
                }
                None => Err(super::authn::log_failure(&self.upstream, "access review failed", &e)),
            },
            Err(e) => Err(super::authn::log_failure(&self.upstream, "access review failed", &e)),
        }
    }

    /// `Ok(())` if `id` may do `a`, else the apiserver's 403 for it.
    pub async fn authorize(&self, id: &Identity, a: &Attributes) -> Result<(), Status> {
        let d = self.decide(id, a).await?;
        if d.allowed {
            Ok(())
        } else {
            Err(a.forbidden(&id.username, &d.reason))
        }
    }

    async fn review(upstream: Upstream, spec: Value) -> Result<Verdict, ReviewError> {
        let body = json!({"apiVersion": "authorization.k8s.io/v1", "kind": "SubjectAccessReview", "spec": spec});
        let status = review::post(&upstream, "/apis/authorization.k8s.io/v1/subjectaccessreviews", "SubjectAccessReview", &body).await?;
        let flag = |k: &str| status.get(k).and_then(Value::as_bool).unwrap_or(false);
        let allowed = flag("allowed") && !flag("denied");
        let reason = status.get("reason").and_then(Value::as_str).unwrap_or("").to_string();
        Ok(Verdict { allowed, reason })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use http::Method;

    #[test]
    fn cache_keys_differ_whenever_the_review_does() {
        let id = Identity { username: "u".into(), groups: vec!["g1".into(), "g2".into()], ..Identity::default() };
        let a = Attributes::of_path(&Method::GET, "/api/v1/namespaces/ns/pods", Some("labelSelector=a%3Db"));
        let base = cache_key(&id, &a);
        assert_eq!(base, cache_key(&id.clone(), &a.clone()), "deterministic");
        let shifted = Identity { groups: vec!["g1g2".into()], ..id.clone() };
        assert_ne!(base, cache_key(&shifted, &a), "group boundaries count");
        let other_user = Identity { username: "u2".into(), ..id.clone() };
        assert_ne!(base, cache_key(&other_user, &a));
        let extra = Identity { extra: [("k".to_string(), vec!["v".to_string()])].into(), ..id.clone() };
        assert_ne!(base, cache_key(&extra, &a));
        for (path, query) in [
            ("/api/v1/namespaces/ns2/pods", Some("labelSelector=a%3Db")),
            ("/api/v1/namespaces/ns/pods", Some("labelSelector=a%3Dc")),
            ("/api/v1/namespaces/ns/pods", Some("fieldSelector=a%3Db")),
            ("/api/v1/namespaces/ns/pods", Some("watch=1&labelSelector=a%3Db")),
            ("/api/v1/namespaces/ns/pods/p", None),
            ("/apis/apps/v1/namespaces/ns/pods", None),
        ] {
            assert_ne!(base, cache_key(&id, &Attributes::of_path(&Method::GET, path, query)), "{path}?{query:?}");
        }
        let non_resource = Attributes::of_path(&Method::GET, "/apis", None);
        assert_ne!(cache_key(&id, &non_resource), cache_key(&id, &Attributes::of_path(&Method::GET, "/api", None)));
    }

    #[tokio::test]
    async fn requests_asking_the_same_at_once_share_one_review() {
        // Fifty node agents of one account starting together, each listing its own node's
        // pods: one review of the whole collection, every agent allowed.
        let settings = AuthzSettings {
            allow_ttl: Duration::from_secs(10),
            deny_ttl: Duration::from_secs(10),
            cache_entries: 1000,
            stale: Duration::ZERO,
            concurrent: 64,
        };
        let authz = Arc::new(Authorizer::new(
            review::answering_upstream(Duration::from_millis(200), json!({"kind": "SubjectAccessReview", "status": {"allowed": true}}))
                .await,
            settings,
        ));
        let asks: Vec<_> = (0..50)
            .map(|i| {
                let authz = authz.clone();
                tokio::spawn(async move {
                    let id = Identity { username: "agent".into(), ..Identity::default() };
                    let query = format!("fieldSelector=spec.nodeName%3Dnode-{i}");
                    authz.decide(&id, &Attributes::of_path(&Method::GET, "/api/v1/pods", Some(&query))).await
                })
            })
            .collect();
        for ask in asks {
            assert!(ask.await.unwrap().unwrap().allowed);
        }
        assert_eq!(authz.reviews(), 1, "one review for all of them");
        assert!(authz.reviewing.is_empty(), "no turn is left behind");
    }

    #[test]
    fn review_spec_matches_the_golden_request() {
        let req = String::from_utf8(crate::testdata::golden("13b-subjectaccessreview-nobody-list-pods.json.req")).unwrap();
        let body: Value = serde_json::from_str(req.split("\n\n").nth(1).unwrap().trim()).unwrap();
        let id = Identity { username: "anchor-nobody".into(), ..Identity::default() };
        let a = Attributes::of_path(&Method::GET, "/api/v1/namespaces/golden/pods", None);
        let mut want = body["spec"].clone();
        want["resourceAttributes"].as_object_mut().unwrap().remove("group");
        assert_eq!(review_spec(&id, &a), want);
    }
}
