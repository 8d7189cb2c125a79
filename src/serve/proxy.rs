//! Pass-through: everything kache does not answer from cache goes to the upstream (with
//! kache's credentials or the client's own) and streams back (bodies are never buffered whole), including connection upgrades for
//! exec/attach/port-forward. An unreachable upstream is a 503 `Status`.

use crate::api::status::Status;
use crate::serve::body::RequestBody;
use crate::serve::body::{self, Body};
use crate::serve::upstream::{Class, Upstream};
use http::{header, HeaderMap, Request, Response};
use hyper_util::rt::TokioIo;

/// Hop-by-hop headers (RFC 9110 7.6.1).
const DROP: &[&str] = &["connection", "keep-alive", "proxy-connection", "te", "trailer", "transfer-encoding", "upgrade", "host"];

/// Whose credentials a passed-through request is sent with.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Credentials {
    /// kache's own (the client's `Authorization` header is dropped; any `Impersonate-*`
    /// headers the caller left on the request name whom kache acts for).
    Kache,
    /// The client's own `Authorization` header, and none of kache's.
    Client,
}

fn clean(headers: &mut HeaderMap, upgrade: bool) {
    for name in DROP {
        if upgrade && (*name == "connection" || *name == "upgrade") {
            continue;
        }
        headers.remove(*name);
    }
}

/// Whether a request asks for a protocol upgrade (SPDY or WebSocket).
fn is_upgrade(headers: &HeaderMap) -> bool {
    headers.contains_key(header::UPGRADE)
}

/// Forward `req` to the upstream and stream the answer back.
pub async fn forward<B: RequestBody>(upstream: &Upstream, mut req: Request<B>, creds: Credentials) -> Response<Body> {
    let upgrade = is_upgrade(req.headers());
    let client_upgrade = upgrade.then(|| hyper::upgrade::on(&mut req));
    let (mut parts, incoming) = req.into_parts();
    clean(&mut parts.headers, upgrade);
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
    let out = Request::from_parts(parts, body::streamed(incoming));
    if upgrade {
        return forward_upgrade(upstream, out, creds, client_upgrade).await;
    }
    let sent = match creds {
        Credentials::Client => upstream.send_as_client(out).await,
        Credentials::Kache => upstream.send(out, Class::Passthrough).await,
    };
    let resp = match sent {
        Ok(r) => r,
        Err(e) => {
            tracing::warn!(error = %e, "upstream unreachable");
            return Status::unavailable(format!("the upstream apiserver is unavailable: {e}")).into_response(false);
        }
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
) -> Response<Body> {
    let sent = upstream.send_upgrade(out, creds == Credentials::Client).await;
    let mut resp = match sent {
        Ok(r) => r,
        Err(e) => {
            tracing::warn!(error = %e, "upstream unreachable");
            return Status::unavailable(format!("the upstream apiserver is unavailable: {e}")).into_response(false);
        }
    };
    if let (Some(client), true) = (client_upgrade, resp.status() == http::StatusCode::SWITCHING_PROTOCOLS) {
        let server = hyper::upgrade::on(&mut resp);
        tokio::spawn(async move {
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
