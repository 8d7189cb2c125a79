//! The upstream's last discovery answers (`/api`, `/apis`, group and group-version
//! documents, `/version`, `/openapi/...`), kept as they streamed through to clients, so a
//! client that starts while the upstream is hung or unreachable (a controller restarting, a
//! kubectl without a discovery cache) still finds the resources kache answers from memory.
//!
//! Each document is kept per (path and query, `Accept`, whether gzip is accepted), as the
//! upstream answered it (its `Content-Type` and `Content-Encoding` with it), and answered
//! only while the health monitor finds the upstream hung or unreachable, within
//! `--serve-stale-seconds` of its going down, and only to an authenticated caller (the
//! apiserver grants discovery to `system:authenticated`). Bounded: documents up to
//! [`MAX_DOC`] bytes, at most [`MAX_DOCS`] of them.

use crate::serve::body::{Body, BoxError, Chunk};
use crate::serve::route::{classify, Target};
use bytes::{Bytes, BytesMut};
use dashmap::DashMap;
use http::{header, HeaderMap, Method, Request, Response, StatusCode};
use http_body::Frame;
use http_body_util::BodyExt;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

/// Largest document kept (the aggregated `/apis` of a large cluster is a few hundred KB;
/// OpenAPI v3 group documents up to a few MB).
pub const MAX_DOC: usize = 8 << 20;
/// Documents kept at most (distinct paths and Accept headers).
pub const MAX_DOCS: usize = 1024;

/// Which answer a request would get.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct DocKey {
    path: String,
    accept: String,
    gzip: bool,
}

impl DocKey {
    /// The key of a GET of a discovery document, else `None`.
    pub fn of<B>(req: &Request<B>) -> Option<DocKey> {
        if req.method() != Method::GET {
            return None;
        }
        let path = req.uri().path();
        let doc = path.starts_with("/openapi/")
            || matches!(classify(path), Some(Target::Version | Target::Api | Target::Apis | Target::Group(_) | Target::GroupVersion(..)));
        if !doc {
            return None;
        }
        let header = |h| req.headers().get(h).and_then(|v| v.to_str().ok()).unwrap_or("").to_string();
        Some(DocKey {
            path: req.uri().path_and_query().map_or(path, |p| p.as_str()).to_string(),
            accept: header(header::ACCEPT),
            gzip: crate::serve::compress::accepts_gzip(req.headers()),
        })
    }
}

#[derive(Debug, Clone)]
struct Doc {
    headers: HeaderMap,
    body: Bytes,
}

/// The kept documents.
#[derive(Debug, Default)]
pub struct Kept {
    docs: DashMap<DocKey, Doc>,
}

impl Kept {
    /// The kept answer to `key`, if any.
    pub fn answer(&self, key: &DocKey) -> Option<Response<Body>> {
        let doc = self.docs.get(key)?.clone();
        let mut resp = Response::new(crate::serve::body::full(doc.body));
        *resp.headers_mut() = doc.headers;
        Some(resp)
    }

    /// Pass `resp` (the upstream's answer to `key`) on, keeping a copy once it has streamed
    /// through whole, if it is a 200 of at most [`MAX_DOC`] bytes.
    pub fn keep(self: &Arc<Self>, key: DocKey, resp: Response<Body>) -> Response<Body> {
        if resp.status() != StatusCode::OK || (self.docs.len() >= MAX_DOCS && !self.docs.contains_key(&key)) {
            return resp;
        }
        let mut headers = HeaderMap::new();
        for h in [header::CONTENT_TYPE, header::CONTENT_ENCODING, header::VARY, header::CACHE_CONTROL] {
            if let Some(v) = resp.headers().get(&h) {
                headers.insert(h, v.clone());
            }
        }
        let (parts, body) = resp.into_parts();
        let tee = Tee { inner: body, buf: Some(BytesMut::new()), done: Some((self.clone(), key, headers)) };
        Response::from_parts(parts, tee.boxed_unsync())
    }
}

/// A body passed on while a copy is collected; stored when it ends whole.
struct Tee {
    inner: Body,
    buf: Option<BytesMut>,
    done: Option<(Arc<Kept>, DocKey, HeaderMap)>,
}

impl Tee {
    /// Keep the copy (once).
    fn store(&mut self) {
        if let (Some(buf), Some((kept, key, headers))) = (self.buf.take(), self.done.take()) {
            kept.docs.insert(key, Doc { headers, body: buf.freeze() });
        }
    }
}

impl http_body::Body for Tee {
    type Data = Chunk;
    type Error = BoxError;

    fn poll_frame(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Result<Frame<Chunk>, BoxError>>> {
        let polled = Pin::new(&mut self.inner).poll_frame(cx);
        match &polled {
            Poll::Ready(Some(Ok(frame))) => {
                let piece = match frame.data_ref() {
                    Some(Chunk::One(b)) => Some(b.clone()),
                    Some(_) => None,
                    None => Some(Bytes::new()),
                };
                let fits = |buf: &BytesMut, piece: &Bytes| buf.len() + piece.len() <= MAX_DOC;
                match (self.buf.as_mut(), piece) {
                    (Some(buf), Some(piece)) if fits(buf, &piece) => buf.extend_from_slice(&piece),
                    // Too large, or pieces kache cannot copy here: not kept.
                    _ => self.buf = None,
                }
                // A server that knows the length stops polling once it has it all.
                if self.inner.is_end_stream() {
                    self.store();
                }
            }
            Poll::Ready(Some(Err(_))) => self.buf = None,
            Poll::Ready(None) => self.store(),
            Poll::Pending => {}
        }
        polled
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> http_body::SizeHint {
        self.inner.size_hint()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use http::HeaderValue;

    fn get(path: &str, accept: &str) -> Request<()> {
        let mut r = Request::get(path).body(()).unwrap();
        r.headers_mut().insert(header::ACCEPT, HeaderValue::from_str(accept).unwrap());
        r
    }

    #[test]
    fn only_gets_of_discovery_documents_are_kept() {
        assert!(DocKey::of(&get("/apis", "application/json")).is_some());
        assert!(DocKey::of(&get("/api/v1", "application/json")).is_some());
        assert!(DocKey::of(&get("/apis/apps/v1", "application/json")).is_some());
        assert!(DocKey::of(&get("/openapi/v3/apis/apps/v1?hash=x", "application/json")).is_some());
        assert!(DocKey::of(&get("/version", "application/json")).is_some());
        assert!(DocKey::of(&get("/api/v1/pods", "application/json")).is_none());
        assert!(DocKey::of(&get("/healthz", "application/json")).is_none());
        let mut post = get("/apis", "application/json");
        *post.method_mut() = Method::POST;
        assert!(DocKey::of(&post).is_none());
        assert_ne!(
            DocKey::of(&get("/apis", "application/json")),
            DocKey::of(&get("/apis", "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList"))
        );
        let mut gz = get("/apis", "application/json");
        gz.headers_mut().insert(header::ACCEPT_ENCODING, HeaderValue::from_static("gzip"));
        assert_ne!(DocKey::of(&gz), DocKey::of(&get("/apis", "application/json")));
    }

    #[tokio::test]
    async fn a_document_is_kept_once_it_has_streamed_through_whole() {
        let kept = Arc::new(Kept::default());
        let key = DocKey::of(&get("/apis", "application/json")).unwrap();
        let mut resp = Response::new(crate::serve::body::full(Bytes::from_static(b"{\"kind\":\"APIGroupList\"}")));
        resp.headers_mut().insert(header::CONTENT_TYPE, HeaderValue::from_static("application/json"));
        resp.headers_mut().insert(header::DATE, HeaderValue::from_static("today"));
        let passed = kept.keep(key.clone(), resp);
        assert!(kept.answer(&key).is_none(), "not before it has been sent");
        let sent = passed.into_body().collect().await.unwrap().to_bytes();
        let again = kept.answer(&key).expect("kept");
        assert_eq!(again.headers().get(header::CONTENT_TYPE).unwrap(), "application/json");
        assert!(again.headers().get(header::DATE).is_none(), "only the headers that describe the body");
        assert_eq!(again.into_body().collect().await.unwrap().to_bytes(), sent);
        // Errors are not kept.
        let other = DocKey::of(&get("/apis/x", "application/json")).unwrap();
        let mut failed = Response::new(crate::serve::body::full(Bytes::from_static(b"{}")));
        *failed.status_mut() = StatusCode::NOT_FOUND;
        let _ = kept.keep(other.clone(), failed).into_body().collect().await;
        assert!(kept.answer(&other).is_none());
    }
}
