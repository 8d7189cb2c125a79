//! Pass-through: everything kache does not answer from cache goes to the upstream (with
//! kache's credentials or the client's own) and streams back (bodies are never buffered whole), including connection upgrades for
//! exec/attach/port-forward. An unreachable upstream is a 503 `Status`, one that does not
//! answer within `--passthrough-timeout` a 504, and a client's body that cannot be
//! read (bad chunked encoding, a connection cut mid-body) the client's 400, not an outage.

use crate::api::status::Status;
use crate::body::BoxError;
use crate::body::RequestBody;
use crate::body::{self, Body};
use crate::serve::limit::{Guarded, Held};
use crate::serve::respond::StatusResponse;
use crate::upstream::{is_timeout, Class, Credentials, Upstream};
use http::{header, HeaderMap, Request, Response};
use http_body::Frame;
use hyper_util::rt::TokioIo;
use std::pin::Pin;
use std::sync::{Arc, OnceLock};
use std::task::{Context, Poll};

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
/// places) until the answer's body ends or, for an upgraded session, until it closes.
pub async fn forward<B: RequestBody>(upstream: &Upstream, req: Request<B>, creds: Credentials, held: Held) -> Response<Body> {
    let upgrade = is_upgrade(req.headers());
    let mut held = Some(held);
    let resp = send(upstream, req, creds, upgrade.then_some(&mut held)).await;
    match held {
        Some(held) => resp.map(|b| Guarded::holding(b, held)),
        None => resp,
    }
}

/// Why a request should not be sent at all. The upstream is known hung or unreachable:
/// answer now, not after a deadline. A write (or a session) is not sent even into one merely
/// suspected (its probe long unanswered, nothing else heard): it might be carried out later.
/// A `read` is, and waits for the monitor's finding: a busy upstream is slow to answer
/// `/readyz` too, and the client going direct would have its answer (found with a thousand
/// watches opened at once).
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
    Response::from_parts(parts, body::streamed(incoming))
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
