//! The feed's HTTP: the paths it asks for, and kache's own GETs read whole or frame by frame
//! with an idle bound, so a stalled answer is an error and never a hang. An unsuccessful
//! answer becomes a [`FeedError`] (410 is [`FeedError::Expired`]).

use super::FeedError;
use crate::api::resource::Resource;
use crate::upstream::{Class, Counted, Upstream};
use bytes::{Bytes, BytesMut};
use http_body_util::BodyExt;
use std::time::Duration;

/// Collection path of a resource across all namespaces.
pub fn collection_path(r: &Resource) -> String {
    if r.group.is_empty() {
        format!("/api/{}/{}", r.version, r.plural)
    } else {
        format!("/apis/{}/{}/{}", r.group, r.version, r.plural)
    }
}

/// A LIST of the one object at `key` (`namespace/name` or `name`) as it was at exactly `rv`:
/// its collection (namespaced when it is), its name as a field selector,
/// `resourceVersionMatch=Exact`.
pub(super) fn object_at_path(r: &Resource, key: &str, rv: u64) -> String {
    let (ns, name) = match key.split_once('/') {
        Some((ns, name)) => (Some(ns), name),
        None => (None, key),
    };
    format!("{}?fieldSelector={}&resourceVersion={rv}&resourceVersionMatch=Exact", scoped_path(r, ns), name_selector(name))
}

/// The collection path of `r` in `namespace`, or across all namespaces.
pub(crate) fn scoped_path(r: &Resource, namespace: Option<&str>) -> String {
    match (namespace, r.group.is_empty()) {
        (Some(ns), true) => format!("/api/{}/namespaces/{ns}/{}", r.version, r.plural),
        (Some(ns), false) => format!("/apis/{}/{}/namespaces/{ns}/{}", r.group, r.version, r.plural),
        (None, _) => collection_path(r),
    }
}

/// The name [`rv_probe_path`] looks up: not a DNS-1123 name (it ends in `-`), so no object
/// of most kinds can have it, and one that did would only make the answer one object longer.
const RV_PROBE_NAME: &str = "kache-rv-probe-";

/// A consistent read of the upstream's current resourceVersion for `r` that costs it one
/// key: a LIST of a single name (a field selector `metadata.name`, in namespace `default`
/// for a namespaced kind). The apiserver's generic registry reads such a LIST as a
/// non-recursive GetList of that one key (`ListPredicate`, `MatchesSingle`), which its watch
/// cache answers after the same freshness wait as any consistent LIST (`getCurrentRV`, then
/// `WaitUntilFreshAndGet`), so the answer's resourceVersion is as new as the upstream was
/// when it was asked. A `limit=1` LIST of the whole collection proves the same but has the
/// watch cache list every object of the kind first, a cost that grows with the kind and is
/// paid again by every probe.
pub(super) fn rv_probe_path(r: &Resource) -> String {
    let name = name_selector(RV_PROBE_NAME);
    match (r.namespaced, r.group.is_empty()) {
        (true, true) => format!("/api/{}/namespaces/default/{}?fieldSelector={name}", r.version, r.plural),
        (true, false) => format!("/apis/{}/{}/namespaces/default/{}?fieldSelector={name}", r.group, r.version, r.plural),
        (false, _) => format!("{}?fieldSelector={name}", collection_path(r)),
    }
}

/// A page of a collection: `base` with `limit` (none: unpaged) and `continue`.
pub(super) fn page_path(base: &str, limit: Option<u64>, cont: &str) -> String {
    let mut path = match limit {
        Some(n) => format!("{base}?limit={n}"),
        None => base.to_string(),
    };
    if !cont.is_empty() {
        path.push_str(if limit.is_some() { "&continue=" } else { "?continue=" });
        path.push_str(cont);
    }
    path
}

/// The field selector `metadata.name=NAME` as a query value: the name escaped as field
/// selectors read values, then URL-encoded (RBAC object names may hold spaces, `,`, `=` and
/// any character but `/`).
fn name_selector(name: &str) -> String {
    let selector = format!("metadata.name={}", crate::api::selector::escape_value(name));
    form_urlencoded::byte_serialize(selector.as_bytes()).collect()
}

/// A GET of one of kache's own calls, read whole: its headers within the `own` deadline
/// (see [`Upstream::get`]) and its body as long as bytes keep coming (no gap longer than
/// the same deadline), so a large LIST may take as long as it needs, a stalled one not.
pub(crate) async fn fetch(upstream: &Upstream, path: &str, accept: &str) -> Result<Bytes, FeedError> {
    fetch_in(upstream, path, accept, Class::Own).await
}

/// [`fetch`] in `class`'s connections (a page of a whole collection: [`Class::Bulk`]).
pub(crate) async fn fetch_in(upstream: &Upstream, path: &str, accept: &str, class: Class) -> Result<Bytes, FeedError> {
    let resp = upstream.get_in(path, accept, class).await?;
    let idle = upstream.timeouts().own;
    if resp.status().as_u16() != 200 {
        return Err(error_response(resp, idle).await);
    }
    let mut body = resp.into_body();
    let mut out = BytesMut::new();
    while let Some(data) = next_data(&mut body, idle).await? {
        out.extend_from_slice(&data);
    }
    Ok(out.freeze())
}

/// The next data of an upstream body (`None` at its end), or [`FeedError::Stalled`]
/// when nothing comes within `idle`.
pub(crate) async fn next_data(body: &mut Counted, idle: Duration) -> Result<Option<Bytes>, FeedError> {
    loop {
        match tokio::time::timeout(idle, body.frame()).await {
            Err(_) => return Err(FeedError::Stalled(idle)),
            Ok(None) => return Ok(None),
            Ok(Some(frame)) => {
                if let Ok(data) = frame.map_err(|e| FeedError::Transport(e.into()))?.into_data() {
                    return Ok(Some(data));
                }
            }
        }
    }
}

/// The error an unsuccessful upstream answer means: 410 is [`FeedError::Expired`], the
/// rest a [`FeedError::Status`] with the body as text (a protobuf Status decoded, never
/// raw bytes in a log line) and its `Retry-After`.
pub(super) async fn error_response(resp: http::Response<Counted>, idle: Duration) -> FeedError {
    let code = resp.status().as_u16();
    if code == 410 {
        return FeedError::Expired;
    }
    let retry_after = resp.headers().get(http::header::RETRY_AFTER).and_then(|v| v.to_str().ok()).and_then(|v| v.trim().parse().ok());
    let mut body = resp.into_body();
    let mut bytes = BytesMut::new();
    while let Ok(Some(data)) = next_data(&mut body, idle).await {
        if bytes.len() < 64 * 1024 {
            bytes.extend_from_slice(&data);
        }
    }
    FeedError::Status { code, body: crate::api::status::describe_body(&bytes), retry_after }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_objects_name_is_escaped_for_its_field_selector_and_the_url() {
        let name = "system:a b,c=d\\e\u{e9}";
        let q = name_selector(name);
        assert!(q.bytes().all(|b| b.is_ascii_alphanumeric() || b"%+-._*".contains(&b)), "{q}");
        // As the apiserver reads it: the query value decoded, then the selector parsed.
        let query = format!("fieldSelector={q}");
        let (_, decoded) = form_urlencoded::parse(query.as_bytes()).next().unwrap();
        let selector = crate::api::selector::FieldSelector::parse(&decoded).unwrap();
        assert_eq!(selector.exact("metadata.name"), Some(name));
    }

    #[test]
    fn pages_and_single_objects_have_their_paths() {
        assert_eq!(page_path("/api/v1/pods", Some(500), ""), "/api/v1/pods?limit=500");
        assert_eq!(page_path("/api/v1/pods", Some(500), "abc"), "/api/v1/pods?limit=500&continue=abc");
        assert_eq!(page_path("/api/v1/pods", None, ""), "/api/v1/pods");
        let pods = crate::sim::catalog::resource("pods");
        assert_eq!(
            object_at_path(&pods, "default/web-1", 42),
            "/api/v1/namespaces/default/pods?fieldSelector=metadata.name%3Dweb-1&resourceVersion=42&resourceVersionMatch=Exact"
        );
    }

    #[test]
    fn the_rv_probe_asks_for_one_key_of_the_kind() {
        let kind = |plural: &str| crate::sim::catalog::resource(plural);
        assert_eq!(rv_probe_path(&kind("pods")), "/api/v1/namespaces/default/pods?fieldSelector=metadata.name%3Dkache-rv-probe-");
        assert_eq!(rv_probe_path(&kind("nodes")), "/api/v1/nodes?fieldSelector=metadata.name%3Dkache-rv-probe-");
        assert_eq!(
            rv_probe_path(&kind("widgets")),
            "/apis/example.com/v1/namespaces/default/widgets?fieldSelector=metadata.name%3Dkache-rv-probe-"
        );
    }

    #[tokio::test]
    async fn a_stalled_body_is_an_error_after_the_idle_bound_not_a_hang() {
        // An upstream that sends headers and then nothing: a paused one, a watch lost in a
        // partition.
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        tokio::spawn(async move {
            let (s, _) = listener.accept().await.unwrap();
            let svc = hyper::service::service_fn(|_req| async {
                let body =
                    http_body_util::StreamBody::new(futures_util::stream::pending::<Result<http_body::Frame<Bytes>, std::io::Error>>());
                Ok::<_, std::convert::Infallible>(hyper::Response::new(body))
            });
            let _ = hyper::server::conn::http1::Builder::new().serve_connection(hyper_util::rt::TokioIo::new(s), svc).await;
        });
        let upstream = crate::app::plain_upstream(&format!("http://{addr}")).unwrap();
        let resp = upstream.get("/api/v1/pods?watch=1", "application/json").await.unwrap();
        let mut body = resp.into_body();
        let idle = Duration::from_millis(200);
        let r = next_data(&mut body, idle).await;
        assert!(matches!(r, Err(FeedError::Stalled(d)) if d == idle), "{r:?}");
    }
}
