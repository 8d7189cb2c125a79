//! The upstream's last discovery answers (`/api`, `/apis`, group and group-version
//! documents, `/version`, `/openapi/...`), kept as they streamed through to clients, so a
//! client that starts while the upstream is hung or unreachable (a controller restarting, a
//! kubectl without a discovery cache) still finds the resources kache answers from memory.
//!
//! Each document is kept per (path and query, `Accept`, whether gzip is accepted), as the
//! upstream answered it (its `Content-Type` and `Content-Encoding` with it), and answered
//! only while the health monitor finds the upstream hung or unreachable, within
//! `--serve-stale` of its going down, and only to an authenticated caller (the
//! apiserver grants discovery to `system:authenticated`), byte for byte as the upstream sent
//! it. Bounded: documents up to [`MAX_DOC`] bytes, at most [`MAX_DOCS`] of them and
//! [`BUDGET`] bytes in all; the least recently kept or answered make room for new ones (the
//! OpenAPI v3 `?hash=` of a group changes with each of its CRDs' updates, so old URLs are
//! never asked for again).

use crate::api::media::accepts_gzip;
use crate::api::route::{classify, Target};
use crate::body::{Body, BoxError, Chunk, Tap, Tapped};
use bytes::{Bytes, BytesMut};
use http::{header, HeaderMap, Method, Request, Response, StatusCode};
use http_body::Frame;
use http_body_util::BodyExt;
use lru::LruCache;
use std::sync::{Arc, Mutex};

/// Largest document kept (the aggregated `/apis` of a large cluster is a few hundred KB;
/// OpenAPI v3 group documents up to a few MB).
pub const MAX_DOC: usize = 8 << 20;
/// Documents kept at most (distinct paths and Accept headers).
pub const MAX_DOCS: usize = 1024;
/// Bytes all kept documents may take together (bodies, keys and headers): eight documents
/// of [`MAX_DOC`]. What a large cluster's clients ask for, the aggregated `/api` and `/apis`
/// (a few hundred KB), the group-version documents (a few KB each), `/openapi/v2` and the
/// OpenAPI v3 documents (a few MB each, a fifth to a tenth of that gzipped, as Go clients
/// ask for them), in the one or two (`Accept`, gzip) variants they use, fits in a few tens of
/// MB; a larger budget would only be more memory any authenticated caller could pin with
/// made-up query strings.
pub const BUDGET: usize = 64 << 20;
const _: () = assert!(MAX_DOC <= BUDGET);

/// Which answer a request would get: its path, what in its query changes the answer (an
/// OpenAPI v3 document's `hash`), whether the upstream indents it (`pretty`, or a curl or
/// browser user agent), its `Accept` and whether it accepts gzip.
///
/// A query is part of the key only as far as it changes the answer: `timeout=` (client-go
/// sends `?timeout=32s` with its discovery) is left out, and a request with any other
/// parameter is neither kept nor answered from what is kept, so made-up query strings are
/// one key (or none) and cannot push the documents real clients ask for out of the budget.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct DocKey {
    path: String,
    /// `hash=` of an OpenAPI v3 document.
    hash: Option<String>,
    pretty: bool,
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
        let query = req.uri().query();
        let mut hash = None;
        for (k, v) in form_urlencoded::parse(query.unwrap_or("").as_bytes()) {
            match &*k {
                "timeout" | "pretty" => {}
                "hash" if path.starts_with("/openapi/v3/") && hash.is_none() => hash = Some(v.into_owned()),
                _ => return None,
            }
        }
        let header = |h| req.headers().get(h).and_then(|v| v.to_str().ok()).unwrap_or("").to_string();
        Some(DocKey {
            path: path.to_string(),
            hash,
            pretty: crate::api::media::wants_pretty(query, req.headers()),
            accept: header(header::ACCEPT),
            gzip: accepts_gzip(req.headers()),
        })
    }
}

#[derive(Debug, Clone)]
struct Doc {
    headers: HeaderMap,
    body: Bytes,
}

impl Doc {
    /// Bytes `key` and this document take from the [`BUDGET`].
    fn cost(&self, key: &DocKey) -> usize {
        let headers: usize = self.headers.iter().map(|(n, v)| n.as_str().len() + v.len()).sum();
        key.path.len() + key.hash.as_ref().map_or(0, String::len) + key.accept.len() + headers + self.body.len()
    }
}

/// The upstream's discovery documents as they last streamed through, kept for its outages.
#[derive(Debug)]
pub struct LastDiscovery {
    /// Bytes the documents may take together.
    budget: usize,
    /// Documents kept at most.
    max_docs: usize,
    store: Mutex<Store>,
}

impl Default for LastDiscovery {
    fn default() -> Self {
        LastDiscovery::bounded(BUDGET, MAX_DOCS)
    }
}

/// The documents, in the order they were last kept or answered in. Unbounded in count by
/// itself: [`LastDiscovery::insert`] evicts for both bounds, so the bytes stay counted.
#[derive(Debug)]
struct Store {
    /// Hashed by std's SipHash with a random key: the keys come from clients.
    docs: LruCache<DocKey, Doc>,
    /// What the documents take, by [`Doc::cost`].
    bytes: usize,
}

impl Default for Store {
    fn default() -> Self {
        Store { docs: LruCache::unbounded(), bytes: 0 }
    }
}

impl Store {
    fn remove(&mut self, key: &DocKey) {
        if let Some(doc) = self.docs.pop(key) {
            self.bytes -= doc.cost(key);
        }
    }

    /// Drop the least recently used document; false when there is none.
    fn evict(&mut self) -> bool {
        let Some((key, doc)) = self.docs.pop_lru() else { return false };
        self.bytes -= doc.cost(&key);
        true
    }
}

impl LastDiscovery {
    /// Keep documents of up to `budget` bytes in all, at most `max_docs` of them.
    fn bounded(budget: usize, max_docs: usize) -> LastDiscovery {
        LastDiscovery { budget, max_docs, store: Mutex::default() }
    }

    fn store(&self) -> std::sync::MutexGuard<'_, Store> {
        self.store.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The kept answer to `key`, if any: the upstream's headers and bytes as it sent them.
    /// A request the upstream would indent (`pretty`, a curl user agent) that finds no
    /// indented copy gets the compact one, as sent: the same document, never re-encoded
    /// (a kept answer may be gzip-encoded).
    pub fn answer(&self, key: &DocKey) -> Option<Response<Body>> {
        self.answer_exact(key).or_else(|| key.pretty.then(|| self.answer_exact(&DocKey { pretty: false, ..key.clone() })).flatten())
    }

    fn answer_exact(&self, key: &DocKey) -> Option<Response<Body>> {
        let doc = self.store().docs.get(key)?.clone();
        let mut resp = Response::new(crate::body::full(doc.body));
        *resp.headers_mut() = doc.headers;
        Some(resp)
    }

    /// Keep `doc` as the answer to `key`, in place of the one before, evicting the least
    /// recently used others as the bounds require.
    fn insert(&self, key: DocKey, doc: Doc) {
        let cost = doc.cost(&key);
        let mut store = self.store();
        store.remove(&key);
        if cost > self.budget {
            return;
        }
        while store.bytes + cost > self.budget || store.docs.len() >= self.max_docs {
            if !store.evict() {
                break;
            }
        }
        store.bytes += cost;
        store.docs.put(key, doc);
    }

    /// Pass `resp` (the upstream's answer to `key`) on, keeping a copy once it has streamed
    /// through whole, if it is a 200 of at most [`MAX_DOC`] bytes. While its bytes are those
    /// already kept for `key` they are compared, not copied.
    pub fn keep(self: &Arc<Self>, key: DocKey, resp: Response<Body>) -> Response<Body> {
        if resp.status() != StatusCode::OK {
            return resp;
        }
        let mut headers = HeaderMap::new();
        for h in [header::CONTENT_TYPE, header::CONTENT_ENCODING, header::VARY, header::CACHE_CONTROL] {
            if let Some(v) = resp.headers().get(&h) {
                headers.insert(h, v.clone());
            }
        }
        let seen = match self.store().docs.peek(&key) {
            Some(doc) if doc.headers == headers => Seen::Same { kept: doc.body.clone(), upto: 0 },
            _ => Seen::New(BytesMut::new()),
        };
        let (parts, body) = resp.into_parts();
        let tee = Tee { seen: Some(seen), done: Some((self.clone(), key, headers)) };
        Response::from_parts(parts, Tapped::new(body, tee).boxed_unsync())
    }
}

/// What a [`Tee`] holds of the body so far.
enum Seen {
    /// The first `upto` bytes of the document kept for the key: nothing copied yet.
    Same { kept: Bytes, upto: usize },
    /// A different document, copied.
    New(BytesMut),
}

impl Seen {
    /// Take the next piece of the body; false once it is larger than [`MAX_DOC`].
    fn add(&mut self, piece: &[u8]) -> bool {
        if let Seen::Same { kept, upto } = self {
            if kept.get(*upto..*upto + piece.len()) == Some(piece) {
                *upto += piece.len();
                return true;
            }
            let mut buf = BytesMut::with_capacity(*upto + piece.len());
            buf.extend_from_slice(&kept[..*upto]);
            *self = Seen::New(buf);
        }
        match self {
            Seen::New(buf) if buf.len() + piece.len() <= MAX_DOC => {
                buf.extend_from_slice(piece);
                true
            }
            _ => false,
        }
    }

    /// The whole body.
    fn body(self) -> Bytes {
        match self {
            Seen::Same { kept, upto } if upto == kept.len() => kept,
            Seen::Same { kept, upto } => Bytes::copy_from_slice(&kept[..upto]),
            Seen::New(buf) => buf.freeze(),
        }
    }
}

/// A body's copy as it is passed on (or its comparison with the document kept for its key);
/// stored when the body ends whole.
struct Tee {
    seen: Option<Seen>,
    done: Option<(Arc<LastDiscovery>, DocKey, HeaderMap)>,
}

impl Tee {
    /// Keep the copy (once).
    fn store(&mut self) {
        if let (Some(seen), Some((kept, key, headers))) = (self.seen.take(), self.done.take()) {
            kept.insert(key, Doc { headers, body: seen.body() });
        }
    }
}

impl Tap<Chunk, BoxError> for Tee {
    fn polled(&mut self, frame: Option<&Result<Frame<Chunk>, BoxError>>, ended: bool) {
        match frame {
            Some(Ok(frame)) => {
                let piece = match frame.data_ref() {
                    Some(Chunk::One(b)) => Some(b.clone()),
                    Some(_) => None,
                    None => Some(Bytes::new()),
                };
                let taken = match (self.seen.as_mut(), piece) {
                    (Some(seen), Some(piece)) => seen.add(&piece),
                    _ => false,
                };
                if !taken {
                    // Too large, or pieces kache cannot copy here: not kept.
                    self.seen = None;
                }
                // A server that knows the length stops polling once it has it all.
                if ended {
                    self.store();
                }
            }
            Some(Err(_)) => self.seen = None,
            None => self.store(),
        }
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
    async fn made_up_query_strings_cannot_push_out_the_documents_clients_use() {
        // client-go's `?timeout=32s` is the same document as none.
        assert_eq!(DocKey::of(&get("/apis?timeout=32s", "application/json")), DocKey::of(&get("/apis", "application/json")));
        // Any other parameter: not kept, nor answered from what is kept.
        for junk in ["/apis?x=1", "/api/v1?limit=5", "/openapi/v2?hash=1", "/version?timeout=1s&a=b"] {
            assert_eq!(DocKey::of(&get(junk, "application/json")), None, "{junk}");
        }
        // What changes the answer stays in the key: an OpenAPI v3 hash, indentation.
        assert_ne!(key("/openapi/v3/apis/apps/v1?hash=A"), key("/openapi/v3/apis/apps/v1?hash=B"));
        assert_ne!(key("/apis?pretty=true"), key("/apis"));
        let mut curl = get("/apis", "application/json");
        curl.headers_mut().insert(header::USER_AGENT, HeaderValue::from_static("curl/8.5.0"));
        assert_eq!(DocKey::of(&curl), Some(key("/apis?pretty=1")), "the upstream indents for curl too");

        // The attack bounded here: a client asks for /apis with thousands of made-up queries.
        let kept = Arc::new(LastDiscovery::default());
        pass(&kept, &key("/apis"), Bytes::from(vec![b'a'; MAX_DOC / 2])).await;
        for i in 0..(2 * MAX_DOCS) {
            let junk = format!("/apis?junk={i}&timeout=32s");
            if let Some(k) = DocKey::of(&get(&junk, "application/json")) {
                pass(&kept, &k, Bytes::from(vec![b'x'; MAX_DOC / 2])).await;
            }
        }
        assert!(kept.answer(&key("/apis?timeout=32s")).is_some(), "the real document is still kept");
    }

    #[tokio::test]
    async fn a_document_is_kept_once_it_has_streamed_through_whole() {
        let kept = Arc::new(LastDiscovery::default());
        let key = DocKey::of(&get("/apis", "application/json")).unwrap();
        let mut resp = Response::new(crate::body::full(Bytes::from_static(b"{\"kind\":\"APIGroupList\"}")));
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
        let mut failed = Response::new(crate::body::full(Bytes::from_static(b"{}")));
        *failed.status_mut() = StatusCode::NOT_FOUND;
        let _ = kept.keep(other.clone(), failed).into_body().collect().await;
        assert!(kept.answer(&other).is_none());
    }

    fn key(path: &str) -> DocKey {
        DocKey::of(&get(path, "application/json")).unwrap()
    }

    /// `body` passed through as the upstream's answer to `key`, to its end.
    async fn pass(kept: &Arc<LastDiscovery>, key: &DocKey, body: Bytes) {
        let mut resp = Response::new(crate::body::full(body));
        resp.headers_mut().insert(header::CONTENT_TYPE, HeaderValue::from_static("application/json"));
        let _ = kept.keep(key.clone(), resp).into_body().collect().await.unwrap();
    }

    async fn kept_body(kept: &LastDiscovery, key: &DocKey) -> Option<Bytes> {
        Some(kept.answer(key)?.into_body().collect().await.unwrap().to_bytes())
    }

    fn bytes(kept: &LastDiscovery) -> usize {
        kept.store().bytes
    }

    /// The largest documents fill the budget; the first kept make room for later ones.
    #[tokio::test]
    async fn kept_documents_stay_within_the_byte_budget() {
        let kept = Arc::new(LastDiscovery::default());
        let n = BUDGET / MAX_DOC + 2;
        for i in 0..n {
            pass(&kept, &key(&format!("/openapi/v3/apis/g{i}/v1")), Bytes::from(vec![b'x'; MAX_DOC])).await;
        }
        let held: Vec<usize> = (0..n).filter(|i| kept.answer(&key(&format!("/openapi/v3/apis/g{i}/v1"))).is_some()).collect();
        assert!(held.len() * MAX_DOC <= BUDGET, "{} documents of {MAX_DOC} bytes held", held.len());
        assert!(held.contains(&(n - 1)), "the last one is kept: {held:?}");
        assert!(!held.contains(&0), "the first one made room: {held:?}");
        assert!(bytes(&kept) <= BUDGET);
    }

    /// With [`MAX_DOCS`] documents kept, a new one (an OpenAPI v3 document under its new
    /// `?hash=`) is kept in place of the least recently kept or answered.
    #[tokio::test]
    async fn a_new_document_takes_the_place_of_the_least_recently_used() {
        let kept = Arc::new(LastDiscovery::default());
        let k = |i: usize| key(&format!("/openapi/v3/apis/example.com/v1?hash={i}"));
        for i in 0..MAX_DOCS {
            pass(&kept, &k(i), Bytes::from(format!("{{\"n\":{i}}}"))).await;
        }
        assert!(kept.answer(&k(0)).is_some(), "answered: the most recently used now");
        pass(&kept, &k(MAX_DOCS), Bytes::from_static(b"{}")).await;
        assert!(kept.answer(&k(MAX_DOCS)).is_some(), "the new document is kept");
        assert!(kept.answer(&k(0)).is_some(), "the one just answered stays");
        assert!(kept.answer(&k(1)).is_none(), "the least recently used made room");
        assert!(kept.answer(&k(2)).is_some());
    }

    /// A document kept again in place of the one before frees that one's bytes; eviction
    /// goes by last use, and a document larger than the whole budget is not kept.
    #[tokio::test]
    async fn a_replaced_document_frees_its_bytes() {
        let kept = Arc::new(LastDiscovery::bounded(1000, MAX_DOCS));
        let (a, b, c) = (key("/apis/a"), key("/apis/b"), key("/apis/c"));
        pass(&kept, &a, Bytes::from(vec![b'a'; 600])).await;
        let one = bytes(&kept);
        pass(&kept, &a, Bytes::from(vec![b'A'; 300])).await;
        assert_eq!(bytes(&kept), one - 300, "the old bytes freed");
        pass(&kept, &b, Bytes::from(vec![b'b'; 300])).await;
        assert!(kept.answer(&a).is_some());
        // a, b and c do not fit together: b, the least recently used, makes room.
        pass(&kept, &c, Bytes::from(vec![b'c'; 300])).await;
        assert_eq!(kept_body(&kept, &a).await.unwrap(), vec![b'A'; 300]);
        assert!(kept.answer(&b).is_none());
        assert_eq!(kept_body(&kept, &c).await.unwrap(), vec![b'c'; 300]);
        assert!(bytes(&kept) <= 1000);
        // Too large for the budget: not kept, and nothing else evicted for it.
        pass(&kept, &b, Bytes::from(vec![b'b'; 1001])).await;
        assert!(kept.answer(&b).is_none());
        assert!(kept.answer(&a).is_some() && kept.answer(&c).is_some());
        // Emptied: nothing is left counted.
        let kept = Arc::new(LastDiscovery::bounded(1000, 1));
        pass(&kept, &a, Bytes::from(vec![b'a'; 600])).await;
        pass(&kept, &b, Bytes::from(vec![b'b'; 100])).await;
        assert!(kept.answer(&a).is_none());
        assert_eq!(bytes(&kept), kept.store().docs.peek(&b).map(|d| d.cost(&b)).unwrap());
    }

    /// A document that streams through again with the bytes already kept is compared, not
    /// copied again; one that differs (longer, shorter, changed) replaces it.
    #[tokio::test]
    async fn the_same_document_again_is_not_copied() {
        let kept = Arc::new(LastDiscovery::default());
        let a = key("/apis");
        pass(&kept, &a, Bytes::from_static(b"{\"kind\":\"APIGroupList\"}")).await;
        let first = kept_body(&kept, &a).await.unwrap();
        pass(&kept, &a, Bytes::from(b"{\"kind\":\"APIGroupList\"}".to_vec())).await;
        let again = kept_body(&kept, &a).await.unwrap();
        assert_eq!(again, first);
        assert_eq!(again.as_ptr(), first.as_ptr(), "the kept bytes, not a copy");
        for other in [&b"{\"kind\":\"APIGroupList\"}\n"[..], b"{\"kind\":", b"{\"kind\":\"APIGroupLisT\"}", b""] {
            pass(&kept, &a, Bytes::copy_from_slice(other)).await;
            assert_eq!(kept_body(&kept, &a).await.unwrap(), other);
        }
    }
}
