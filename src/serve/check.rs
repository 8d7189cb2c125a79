//! A consistent LIST checked against the upstream's metadata, the cost rule's third way
//! between waiting for a freshness proof and passing the read through.
//!
//! A proof costs the upstream nothing per read but arrives on its bookmark timer (about a
//! second); a small consistent read passed through is answered in milliseconds but costs the
//! upstream its whole answer. A check asks the upstream for the same page (the client's
//! scope, selectors, `limit` and `continue`) as a protobuf PartialObjectMetadataList: which
//! objects, at which resourceVersions. An object's resourceVersion names one version of it,
//! so when the cache's page holds the same objects at the same versions, in order, it *is*
//! the upstream's page at the list's resourceVersion, and kache answers it from memory,
//! reported at that resourceVersion. The upstream encodes metadata at a fraction of the CPU
//! of the objects or their Table; the client waits for the check's round trip, not for a
//! proof.
//!
//! When the pages differ (an event of the page not applied yet), the check compares again
//! each time the cache moves, for as long as the check itself took; then the read passes
//! through. A page the check verified carries the upstream's resourceVersion in its continue
//! token, so the next page needs that state too: a later page whose resourceVersion the
//! cache has not proven is checked the same way.

use crate::api::query::Options;
use crate::api::resource::Resource;
use crate::cache::feed::{Feed, PageStamps};
use crate::cache::object::Object;
use crate::cache::KindCache;
use crate::serve::handler::{self, Verified};
use std::sync::Arc;
use std::time::Duration;
use tokio::time::Instant;

/// How a check ended: the `outcome` label of `kache_consistent_checks_total`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Outcome {
    /// The cache's page was the upstream's: answered from memory.
    Same,
    /// The cache caught up with the upstream's resourceVersion meanwhile: answered from
    /// memory as a proven read.
    Proven,
    /// The pages still differed when the check's time was up: passed through.
    Differed,
    /// The upstream did not answer the check (an error, or found down): passed through.
    Failed,
    /// No check was needed: the revision ledger proved the cache current (every revision
    /// since its last proof was another resource's write; `upstream::ledger`).
    Accounted,
}

impl Outcome {
    /// The metric label ([`crate::telemetry::CONSISTENT_CHECK_OUTCOMES`] lists them in
    /// declaration order).
    pub(crate) fn label(self) -> &'static str {
        crate::telemetry::CONSISTENT_CHECK_OUTCOMES[self as usize]
    }
}

/// The upstream path of a check: the read's collection (in its namespace) with the client's
/// `labelSelector`, `fieldSelector`, `limit` and `continue`, and nothing else (no
/// resourceVersion: the upstream's current state, or the continue token's).
pub(crate) fn check_path(r: &Resource, namespace: Option<&str>, query: Option<&str>) -> String {
    let mut path = crate::cache::feed::fetch::scoped_path(r, namespace);
    let kept: Vec<(String, String)> = form_urlencoded::parse(query.unwrap_or("").as_bytes())
        .filter(|(k, _)| matches!(k.as_ref(), "labelSelector" | "fieldSelector" | "limit" | "continue"))
        .map(|(k, v)| (k.into_owned(), v.into_owned()))
        .collect();
    if !kept.is_empty() {
        path.push('?');
        path.push_str(&form_urlencoded::Serializer::new(String::new()).extend_pairs(kept).finish());
    }
    path
}

/// Whether the cache's page (`items`, and whether `limit` cut it) is the upstream's `up`:
/// the same objects at the same resourceVersions, in the same order.
pub(crate) fn same(items: &[&Arc<Object>], cut: bool, up: &PageStamps) -> bool {
    items.len() == up.ids.len() && cut != up.cont.is_empty() && items.iter().zip(&up.ids).all(|(o, id)| o.key == id.key && o.rv == id.rv)
}

/// Compare the cache's page for `opts` with the upstream's `up`, again each time the cache
/// moves, until `until`: the verified page, `Ok(None)` when the cache has proven the
/// upstream's resourceVersion meanwhile (its latest state answers), or the outcome to count
/// when time ran out.
pub(crate) async fn compare(
    cache: &KindCache,
    namespace: Option<&str>,
    opts: &Options,
    up: &PageStamps,
    until: Instant,
) -> Result<Option<Verified>, Outcome> {
    loop {
        let (progress, snap) = cache.latest();
        if progress >= up.rv {
            return Ok(None);
        }
        let (items, cut) = handler::page_items(cache, &snap, namespace, opts);
        if same(&items, cut, up) {
            drop(items);
            return Ok(Some(Verified { snap, rv: up.rv, remaining: Some(up.remaining) }));
        }
        let left = until.saturating_duration_since(Instant::now());
        if left.is_zero() || !cache.wait_for(snap.rv + 1, left).await {
            return Err(Outcome::Differed);
        }
    }
}

/// Verify a LIST's page against the upstream's metadata (see the module's documentation):
/// the verified page, `Ok(None)` for the cache's latest state (proven meanwhile), or why
/// the read should pass through.
pub(crate) async fn verify(
    feed: &Arc<Feed>,
    namespace: Option<&str>,
    query: Option<&str>,
    opts: &Options,
) -> Result<Option<Verified>, Outcome> {
    let started = Instant::now();
    let up = feed.page_stamps(&check_path(&feed.cache.resource, namespace, query)).await.map_err(|e| {
        tracing::debug!(resource = %feed.cache.resource.plural, error = %e, "consistency check failed; passing through");
        Outcome::Failed
    })?;
    // An event the upstream's page holds reaches the cache within milliseconds of the
    // upstream's own watch cache; waiting for it longer than the check took would make the
    // client wait longer than passing through at once.
    let until = Instant::now() + started.elapsed().max(Duration::from_millis(1));
    compare(&feed.cache, namespace, opts, &up, until).await
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cache::feed::Stamp;
    use crate::cache::object::item_json;
    use crate::cache::window::EventType;
    use crate::cache::Limits;
    use serde_json::json;

    fn pods() -> Arc<Resource> {
        Arc::new(crate::sim::catalog::resource("pods"))
    }

    fn pod(r: &Resource, ns: &str, name: &str, rv: u64) -> Object {
        let v = json!({"metadata": {"name": name, "namespace": ns, "resourceVersion": rv.to_string(), "labels": {"app": "web"}}});
        Object::new(r, &v, Some(&item_json(&v)), None).unwrap()
    }

    /// Pods a-1 (RV 11), a-2 (12), b-1 (13), the cache at RV 20.
    fn cache() -> Arc<KindCache> {
        let r = pods();
        let cache = Arc::new(KindCache::new(r.clone(), 20, Limits::default()));
        cache.replace(vec![pod(&r, "a", "p1", 11), pod(&r, "a", "p2", 12), pod(&r, "b", "p1", 13)], 20);
        cache
    }

    fn up(rv: u64, ids: &[(&str, u64)], cont: &str, remaining: Option<u64>) -> PageStamps {
        let ids = ids.iter().map(|(k, v)| Stamp { key: k.to_string().into(), rv: *v }).collect();
        PageStamps { ids, rv, cont: cont.to_string(), remaining }
    }

    fn opts(q: &str) -> Options {
        Options::parse(Some(q)).unwrap()
    }

    #[test]
    fn a_check_asks_for_the_clients_page_and_nothing_else() {
        let r = pods();
        let q =
            "labelSelector=app%3Dweb&fieldSelector=spec.nodeName%3Dn1&limit=500&continue=abc&resourceVersion=&timeoutSeconds=5&pretty=1";
        assert_eq!(
            check_path(&r, Some("a"), Some(q)),
            "/api/v1/namespaces/a/pods?labelSelector=app%3Dweb&fieldSelector=spec.nodeName%3Dn1&limit=500&continue=abc"
        );
        assert_eq!(check_path(&r, None, None), "/api/v1/pods");
        assert_eq!(check_path(&r, None, Some("resourceVersion=")), "/api/v1/pods");
    }

    #[tokio::test]
    async fn the_same_objects_at_the_same_versions_are_answered_at_the_upstreams_rv() {
        let c = cache();
        let now = Instant::now();
        let v = compare(&c, Some("a"), &opts(""), &up(90, &[("a/p1", 11), ("a/p2", 12)], "", None), now).await.unwrap().expect("same");
        assert_eq!(v.rv, 90);
        // Paged: the first page of every pod, with the upstream's count of the rest.
        let v = compare(&c, None, &opts("limit=2"), &up(90, &[("a/p1", 11), ("a/p2", 12)], "tok", Some(1)), now).await.unwrap();
        assert_eq!(v.expect("same").remaining, Some(Some(1)));
        // One pod at another version, one missing, one more, or the page cut differently: not the same.
        for other in [
            up(90, &[("a/p1", 11), ("a/p2", 15)], "", None),
            up(90, &[("a/p1", 11)], "", None),
            up(90, &[("a/p1", 11), ("a/p2", 12), ("a/p3", 14)], "", None),
            up(90, &[("a/p1", 11), ("a/p2", 12)], "tok", Some(1)),
        ] {
            assert_eq!(compare(&c, Some("a"), &opts(""), &other, now).await.err(), Some(Outcome::Differed));
        }
        // The cache proven at the upstream's RV: its latest state answers.
        assert!(compare(&c, Some("a"), &opts(""), &up(20, &[], "", None), now).await.unwrap().is_none());
    }

    #[tokio::test(start_paused = true)]
    async fn a_page_that_differs_is_compared_again_when_the_cache_moves() {
        let c = cache();
        let r = pods();
        let upstream = up(90, &[("a/p1", 11), ("a/p2", 30)], "", None);
        let writer = {
            let (c, r) = (c.clone(), r.clone());
            tokio::spawn(async move {
                tokio::time::sleep(Duration::from_millis(5)).await;
                // Another namespace's pod first: still not the same page.
                c.apply(EventType::Modified, pod(&r, "b", "p1", 29));
                tokio::time::sleep(Duration::from_millis(5)).await;
                c.apply(EventType::Modified, pod(&r, "a", "p2", 30));
            })
        };
        let v = compare(&c, Some("a"), &opts(""), &upstream, Instant::now() + Duration::from_millis(50)).await.unwrap().expect("same");
        writer.await.unwrap();
        assert_eq!((v.rv, v.snap.rv), (90, 30), "the snapshot that matched, reported at the upstream's RV");
        // An event that never comes: the check gives up when its time is up.
        let gone = up(90, &[("a/p1", 11)], "", None);
        assert_eq!(
            compare(&c, Some("a"), &opts(""), &gone, Instant::now() + Duration::from_millis(50)).await.err(),
            Some(Outcome::Differed)
        );
    }
}
