//! Pass-through: everything kache does not answer from cache goes to the upstream (with
//! kache's credentials or the client's own) and streams back (bodies are never buffered whole), including connection upgrades for
//! exec/attach/port-forward. An unreachable upstream is a 503 `Status`, one that does not
//! answer within `--passthrough-timeout` a 504, and a client's body that cannot be
//! read (bad chunked encoding, a connection cut mid-body) the client's 400, not an outage.
//! A watch passed through ends, between two of its events, once kache shuts down.

use crate::api::status::Status;
use crate::body::BoxError;
use crate::body::RequestBody;
use crate::body::{self, Body};
use crate::serve::admission::limit::Held;
use crate::serve::respond::StatusResponse;
use crate::upstream::{is_timeout, Class, Credentials, Upstream};
use http::{header, HeaderMap, Request, Response};
use http_body::Frame;
use hyper_util::rt::TokioIo;
use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, OnceLock};
use std::task::{Context, Poll};
use tokio::sync::watch;

/// A client's request body on its way upstream, remembering why it broke, if it did.
struct Watched<B> {
    inner: B,
    broke: Arc<OnceLock<String>>,
}

impl<B: RequestBody> http_body::Body for Watched<B> {
    type Data = bytes::Bytes;
    type Error = BoxError;

    fn poll_frame(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Result<Frame<bytes::Bytes>, BoxError>>> {
        match Pin::new(&mut self.inner).poll_frame(cx) {
            Poll::Ready(Some(Err(e))) => {
                let e: BoxError = e.into();
                let _ = self.broke.set(e.to_string());
                Poll::Ready(Some(Err(e)))
            }
            other => other.map_err(Into::into),
        }
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> http_body::SizeHint {
        self.inner.size_hint()
    }
}

/// The Status for a failed upstream call: the client's 400 when its own body broke, 504
/// when the upstream did not answer in time, else 503; logged at most once a second-ish
/// per kind by the health monitor, so here only at debug when the upstream is known down.
fn failed(upstream: &Upstream, e: &BoxError, broke: Option<&str>) -> Status {
    if let Some(why) = broke {
        tracing::debug!(error = %why, "client request body unreadable");
        return Status::bad_request(format!("the request body could not be read: {why}"));
    }
    if upstream.is_down() {
        tracing::debug!(error = %e, "upstream unreachable");
    } else {
        tracing::warn!(error = %e, "upstream unreachable");
    }
    if is_timeout(e) {
        Status::timeout(format!("the upstream apiserver did not answer in time: {e}"), 1)
    } else {
        Status::unavailable_retry(format!("the upstream apiserver is unavailable: {e}"), 1)
    }
}

/// Whether `e` says the request was never sent: no connection could be made.
fn never_sent(e: &BoxError) -> bool {
    let mut source: Option<&(dyn std::error::Error + 'static)> = Some(e.as_ref());
    while let Some(err) = source {
        if err.downcast_ref::<hyper_util::client::legacy::Error>().is_some_and(|h| h.is_connect()) {
            return true;
        }
        source = err.source();
    }
    false
}

/// The Status for a request kache sent upstream and gave up waiting on (`status`, as for any
/// request), when it is not `safe` (a read): the upstream may still carry it out (a stopped
/// process reads it when it resumes; a slow one was only slow), so it is the apiserver's
/// 504 "may still be processing", without `Retry-After`, which would have client-go send it
/// again by itself (a second object for a `generateName` create, an `AlreadyExists` for
/// one that succeeded). Other Statuses (an unreadable body's 400) stay.
fn abandoned(status: Status, safe: bool) -> Status {
    if safe || !matches!(status.code, 503 | 504) {
        return status;
    }
    Status::timeout(format!("{}; the upstream apiserver may still be processing the request", status.message), 0)
}

/// Hop-by-hop headers (RFC 9110 7.6.1).
const DROP: &[&str] = &["connection", "keep-alive", "proxy-connection", "te", "trailer", "transfer-encoding", "upgrade", "host"];

fn clean(headers: &mut HeaderMap, upgrade: bool) {
    for name in DROP {
        if upgrade && (*name == "connection" || *name == "upgrade") {
            continue;
        }
        headers.remove(*name);
    }
}

/// Remove the front-proxy identity headers (`X-Remote-User`, `X-Remote-Group`,
/// `X-Remote-Extra-*`, the apiserver's default request-header names) a client sent: an
/// upstream that trusts kache's credentials as a front proxy would take them for the
/// client's identity.
fn strip_remote_identity(headers: &mut HeaderMap) {
    let names: Vec<header::HeaderName> = headers.keys().filter(|n| n.as_str().starts_with("x-remote-")).cloned().collect();
    for n in names {
        headers.remove(n);
    }
}

/// Whether a request asks for a protocol upgrade (SPDY or WebSocket).
fn is_upgrade(headers: &HeaderMap) -> bool {
    headers.contains_key(header::UPGRADE)
}

/// Forward `req` to the upstream and stream the answer back, holding `held` (the client's
/// places) until the answer's body ends or, for an upgraded session, until it closes. A
/// watch's answer given `ending` ends once `ending` holds true (see [`Ending`]).
pub async fn forward<B: RequestBody>(
    upstream: &Upstream,
    req: Request<B>,
    creds: Credentials,
    held: Held,
    ending: Option<watch::Receiver<bool>>,
) -> Response<Body> {
    let upgrade = is_upgrade(req.headers());
    let mut held = Some(held);
    let resp = send(upstream, req, creds, upgrade.then_some(&mut held), ending).await;
    match held {
        Some(held) => resp.map(|b| held.until_sent(b)),
        None => resp,
    }
}

/// Why a request should not be sent at all. The upstream is known hung or unreachable:
/// answer now, not after a deadline. A write (or a session) is not sent even into one merely
/// suspected (its probe long unanswered, nothing else heard): it might be carried out later.
/// A `read` is, and waits for the monitor's finding: a busy upstream is slow to answer
/// `/readyz` too, and the client going direct would have its answer.
fn refused(upstream: &Upstream, read: bool) -> Option<String> {
    if read {
        upstream.unavailable()
    } else {
        upstream.suspected()
    }
}

/// Resolves with why once a request sent upstream should stop waiting for its answer: a
/// read on the monitor's finding, anything else on suspicion too (see [`refused`]).
async fn given_up(upstream: &Upstream, read: bool) -> String {
    if read {
        upstream.until_down().await
    } else {
        upstream.until_unavailable().await
    }
}

/// [`forward`]'s work; an upgrade that succeeds takes `session` (the places) into the task
/// that joins the two streams.
async fn send<B: RequestBody>(
    upstream: &Upstream,
    mut req: Request<B>,
    creds: Credentials,
    session: Option<&mut Option<Held>>,
    ending: Option<watch::Receiver<bool>>,
) -> Response<Body> {
    let upgrade = is_upgrade(req.headers());
    let client_upgrade = upgrade.then(|| hyper::upgrade::on(&mut req));
    let (mut parts, incoming) = req.into_parts();
    clean(&mut parts.headers, upgrade);
    strip_remote_identity(&mut parts.headers);
    if creds == Credentials::Kache {
        parts.headers.remove(header::AUTHORIZATION);
    }
    let path = parts.uri.path_and_query().map_or("/", |p| p.as_str());
    parts.uri = match path.parse() {
        Ok(u) => u,
        Err(_) => return Status::bad_request("malformed request path").into_response(false),
    };
    // The client's HTTP version says nothing about the upstream's: let the upstream client
    // negotiate its own (HTTP/2 over TLS when offered, HTTP/1.1 otherwise).
    parts.version = http::Version::default();
    let safe = matches!(parts.method, http::Method::GET | http::Method::HEAD | http::Method::OPTIONS);
    if let Some(why) = refused(upstream, safe && session.is_none()) {
        return Status::unavailable_retry(why, 1).into_response(false);
    }
    let broke = Arc::new(OnceLock::new());
    let out = Request::from_parts(parts, body::streamed(Watched { inner: incoming, broke: broke.clone() }));
    if let Some(session) = session {
        return forward_upgrade(upstream, out, creds, client_upgrade, session).await;
    }
    let sent = match creds {
        Credentials::Client => upstream.send_as_client(out),
        Credentials::Kache => upstream.send(out, Class::Passthrough),
    };
    // Found hung or unreachable while this request waits: answer now, not at the deadline.
    let sent = tokio::select! {
        sent = sent => sent,
        why = given_up(upstream, safe) => return abandoned(Status::unavailable_retry(why, 1), safe).into_response(false),
    };
    let resp = match sent {
        Ok(r) => r,
        // A request that never reached the upstream (no connection) may be sent again.
        Err(e) if never_sent(&e) => return failed(upstream, &e, broke.get().map(String::as_str)).into_response(false),
        Err(e) => return abandoned(failed(upstream, &e, broke.get().map(String::as_str)), safe).into_response(false),
    };
    let (mut parts, incoming) = resp.into_parts();
    clean(&mut parts.headers, false);
    let body = match ending.filter(|_| parts.status.is_success()) {
        Some(ending) => body::streamed(Ending::new(incoming, Framing::of(&parts.headers), ending)),
        None => body::streamed(incoming),
    };
    Response::from_parts(parts, body)
}

/// How a watch's events follow each other in its body: where it can end without tearing one.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Framing {
    /// One JSON document a line (`application/json`, Tables and metadata views too).
    Lines,
    /// Each event after its length, 4 bytes big-endian
    /// (`application/vnd.kubernetes.protobuf;stream=watch`).
    Lengths,
    /// Anything else (a compressed body, CBOR): no boundary kache can see.
    Opaque,
}

impl Framing {
    /// The framing of an answer with these headers.
    fn of(headers: &HeaderMap) -> Framing {
        let encoded = headers.get(header::CONTENT_ENCODING).is_some_and(|e| e.as_bytes() != b"identity");
        let media = headers.get(header::CONTENT_TYPE).and_then(|v| v.to_str().ok()).unwrap_or("");
        let media = media.split(';').next().unwrap_or("").trim();
        match media {
            _ if encoded => Framing::Opaque,
            m if m.eq_ignore_ascii_case("application/json") => Framing::Lines,
            m if m.eq_ignore_ascii_case(crate::api::wire::PROTOBUF) => Framing::Lengths,
            _ => Framing::Opaque,
        }
    }
}

/// Where the bytes of a watch passed so far end: between two events, or inside one.
#[derive(Debug)]
struct Events {
    framing: Framing,
    /// [`Framing::Lines`]: the last byte passed was a newline (or none was passed).
    line_ended: bool,
    /// [`Framing::Lengths`]: the length prefix read so far of the next event, and the
    /// bytes still to come of the current one.
    prefix: [u8; 4],
    prefix_read: usize,
    left: usize,
}

impl Events {
    fn new(framing: Framing) -> Events {
        Events { framing, line_ended: true, prefix: [0; 4], prefix_read: 0, left: 0 }
    }

    /// Count `bytes` as passed.
    fn pass(&mut self, mut bytes: &[u8]) {
        match self.framing {
            Framing::Lines => {
                if let Some(last) = bytes.last() {
                    self.line_ended = *last == b'\n';
                }
            }
            Framing::Lengths => {
                while !bytes.is_empty() {
                    if self.left > 0 {
                        let n = self.left.min(bytes.len());
                        self.left -= n;
                        bytes = &bytes[n..];
                        continue;
                    }
                    self.prefix[self.prefix_read] = bytes[0];
                    self.prefix_read += 1;
                    bytes = &bytes[1..];
                    if self.prefix_read == 4 {
                        self.left = u32::from_be_bytes(self.prefix) as usize;
                        self.prefix_read = 0;
                    }
                }
            }
            Framing::Opaque => {}
        }
    }

    /// Whether the bytes passed end between two events.
    fn between(&self) -> bool {
        match self.framing {
            Framing::Lines => self.line_ended,
            Framing::Lengths => self.prefix_read == 0 && self.left == 0,
            Framing::Opaque => true,
        }
    }
}

/// A watch's body from the upstream that ends (the chunked body's last chunk, HTTP/2's
/// END_STREAM) once kache shuts down, at the first point between two events: its client
/// resumes from its last event elsewhere, as when an apiserver shuts down. Ending it drops
/// the upstream's stream too. Without it the shutdown would wait the whole grace period for
/// a watch that never ends by itself.
struct Ending<B> {
    inner: B,
    /// Resolves when kache shuts down.
    shutdown: Pin<Box<dyn Future<Output = ()> + Send + Sync>>,
    shutting_down: bool,
    events: Events,
}

impl<B> Ending<B> {
    fn new(inner: B, framing: Framing, mut ending: watch::Receiver<bool>) -> Ending<B> {
        let shutdown = Box::pin(async move {
            // A sender gone is a server gone: end as well.
            let _ = ending.wait_for(|ending| *ending).await;
        });
        Ending { inner, shutdown, shutting_down: false, events: Events::new(framing) }
    }
}

impl<B> http_body::Body for Ending<B>
where
    B: http_body::Body<Data = bytes::Bytes> + Unpin,
{
    type Data = bytes::Bytes;
    type Error = B::Error;

    fn poll_frame(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Result<Frame<bytes::Bytes>, B::Error>>> {
        if !self.shutting_down && self.shutdown.as_mut().poll(cx).is_ready() {
            self.shutting_down = true;
        }
        if self.shutting_down && self.events.between() {
            return Poll::Ready(None);
        }
        let frame = std::task::ready!(Pin::new(&mut self.inner).poll_frame(cx));
        if let Some(data) = frame.as_ref().and_then(|f| f.as_ref().ok()).and_then(Frame::data_ref) {
            self.events.pass(data);
        }
        Poll::Ready(frame)
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }
}

/// Forward a connection upgrade (exec, attach, port-forward) over HTTP/1.1 and join the two
/// upgraded streams.
async fn forward_upgrade(
    upstream: &Upstream,
    out: Request<Body>,
    creds: Credentials,
    client_upgrade: Option<hyper::upgrade::OnUpgrade>,
    session: &mut Option<Held>,
) -> Response<Body> {
    let sent = upstream.send_upgrade(out, creds == Credentials::Client).await;
    let mut resp = match sent {
        Ok(r) => r,
        Err(e) => return failed(upstream, &e, None).into_response(false),
    };
    if let (Some(client), true) = (client_upgrade, resp.status() == http::StatusCode::SWITCHING_PROTOCOLS) {
        let server = hyper::upgrade::on(&mut resp);
        let held = session.take();
        tokio::spawn(async move {
            // The client's places stay taken while the session lasts.
            let _held = held;
            match (client.await, server.await) {
                (Ok(c), Ok(s)) => {
                    let (mut c, mut s) = (TokioIo::new(c), TokioIo::new(s));
                    let _ = tokio::io::copy_bidirectional(&mut c, &mut s).await;
                }
                (c, s) => tracing::debug!(client_ok = c.is_ok(), upstream_ok = s.is_ok(), "upgrade failed"),
            }
        });
        let (mut parts, _) = resp.into_parts();
        clean(&mut parts.headers, true);
        return Response::from_parts(parts, body::empty());
    }
    let (mut parts, incoming) = resp.into_parts();
    clean(&mut parts.headers, false);
    Response::from_parts(parts, body::streamed(incoming))
}

#[cfg(test)]
mod tests {
    use super::*;
    use bytes::Bytes;
    use http_body_util::{BodyExt, StreamBody};

    /// A body whose frames the test sends, and the sender.
    fn fed(
    ) -> (tokio::sync::mpsc::UnboundedSender<&'static str>, impl http_body::Body<Data = Bytes, Error = std::convert::Infallible> + Unpin)
    {
        let (tx, rx) = tokio::sync::mpsc::unbounded_channel::<&'static str>();
        let frames = futures_util::stream::unfold(rx, |mut rx| async move {
            rx.recv().await.map(|s| (Ok::<_, std::convert::Infallible>(Frame::data(Bytes::from_static(s.as_bytes()))), rx))
        });
        (tx, StreamBody::new(Box::pin(frames)))
    }

    async fn next<B: http_body::Body<Data = Bytes> + Unpin>(body: &mut B) -> Option<Bytes>
    where
        B::Error: std::fmt::Debug,
    {
        body.frame().await.map(|f| f.expect("frame").into_data().expect("data"))
    }

    #[tokio::test]
    async fn a_watch_passed_through_ends_between_two_events_once_kache_shuts_down() {
        let (tx, inner) = fed();
        let (stop, ending) = watch::channel(false);
        let mut body = Ending::new(inner, Framing::Lines, ending);
        tx.send("{\"type\":\"ADDED\"}\n{\"type\":").unwrap();
        assert_eq!(next(&mut body).await.unwrap(), "{\"type\":\"ADDED\"}\n{\"type\":");
        stop.send_replace(true);
        // The event begun still comes whole; the next does not.
        tx.send("\"MODIFIED\"}\n").unwrap();
        tx.send("{\"type\":\"DELETED\"}\n").unwrap();
        assert_eq!(next(&mut body).await.unwrap(), "\"MODIFIED\"}\n");
        assert_eq!(next(&mut body).await, None);

        // Waiting between two events, it ends at once.
        let (_tx, inner) = fed();
        let (stop, ending) = watch::channel(false);
        let mut body = Ending::new(inner, Framing::Lines, ending);
        let waiting = tokio::spawn(async move { next(&mut body).await });
        tokio::task::yield_now().await;
        stop.send_replace(true);
        assert_eq!(waiting.await.unwrap(), None);
        // Started after the shutdown: ended before its first event.
        let (tx, inner) = fed();
        let mut body = Ending::new(inner, Framing::Lines, stop.subscribe());
        tx.send("{}\n").unwrap();
        assert_eq!(next(&mut body).await, None);
    }

    #[test]
    fn protobuf_events_are_counted_by_their_length_prefix_across_frames() {
        let mut e = Events::new(Framing::Lengths);
        assert!(e.between());
        e.pass(&[0, 0]);
        assert!(!e.between(), "half a length prefix");
        e.pass(&[0, 3, b'a']);
        assert!(!e.between(), "two of three bytes to come");
        e.pass(&[b'b', b'c', 0, 0, 0, 1]);
        assert!(!e.between(), "the next event's prefix");
        e.pass(b"d");
        assert!(e.between());
        e.pass(&[0, 0, 0, 0]);
        assert!(e.between(), "an empty event");
        let mut e = Events::new(Framing::Lines);
        e.pass(b"{}\n{");
        assert!(!e.between());
        e.pass(b"}\n");
        assert!(e.between());
    }

    #[test]
    fn framing_is_read_from_the_answers_headers() {
        let framing = |pairs: &[(header::HeaderName, &'static str)]| {
            let mut h = HeaderMap::new();
            for (k, v) in pairs {
                h.insert(k.clone(), http::HeaderValue::from_static(v));
            }
            Framing::of(&h)
        };
        assert_eq!(framing(&[(header::CONTENT_TYPE, "application/json")]), Framing::Lines);
        assert_eq!(framing(&[(header::CONTENT_TYPE, "application/json;as=Table;g=meta.k8s.io;v=v1")]), Framing::Lines);
        assert_eq!(framing(&[(header::CONTENT_TYPE, "application/vnd.kubernetes.protobuf;stream=watch")]), Framing::Lengths);
        assert_eq!(framing(&[(header::CONTENT_TYPE, "application/json"), (header::CONTENT_ENCODING, "gzip")]), Framing::Opaque);
        assert_eq!(framing(&[(header::CONTENT_TYPE, "application/cbor-seq")]), Framing::Opaque);
        assert_eq!(framing(&[]), Framing::Opaque);
    }
}
