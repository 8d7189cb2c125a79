//! HTTP client: hyper 1 through hyper-util's pooled client, HTTP/1.1 or HTTP/2 (prior
//! knowledge in plain HTTP, ALPN over TLS), with the endpoint's TLS configuration and
//! credentials (`endpoint`). Each `Http` has its own pool, so a worker or a kubelet that owns
//! one owns its connection(s), like a separate process would.

use crate::endpoint::Target;
use crate::scenario::Protocol;
use anyhow::{bail, Context};
use bytes::{Bytes, BytesMut};
use http::{header, Method, Request};
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper_rustls::{FixedServerNameResolver, HttpsConnector, HttpsConnectorBuilder};
use hyper_util::client::legacy::{connect::HttpConnector, Client};
use hyper_util::rt::TokioExecutor;
use std::time::Duration;

/// Accept header of protobuf reads.
pub const PROTOBUF: &str = "application/vnd.kubernetes.protobuf";
/// Accept header of protobuf watches.
pub const PROTOBUF_WATCH: &str = "application/vnd.kubernetes.protobuf;stream=watch";
/// Accept header of JSON.
pub const JSON: &str = "application/json";

/// A client of one endpoint with its own connection pool.
#[derive(Clone)]
pub struct Http {
    target: Target,
    client: Client<HttpsConnector<HttpConnector>, Full<Bytes>>,
}

/// A whole response.
pub struct Whole {
    pub status: u16,
    pub body: Bytes,
}

/// What draining a body found.
pub struct Drained {
    pub bytes: u64,
    /// The first bytes of the body (up to `prefix` asked for).
    pub prefix: Bytes,
}

impl Http {
    /// A client of `target`: over TLS with the target's configuration (ALPN offering only
    /// the protocol asked for) when it is `https://`.
    pub fn new(target: &Target, protocol: Protocol) -> Http {
        let mut conn = HttpConnector::new();
        conn.set_nodelay(true);
        conn.enforce_http(false);
        conn.set_connect_timeout(Some(Duration::from_secs(10)));
        let tls = match &target.tls {
            Some(t) => t.config.as_ref().clone(),
            // Never used for an http:// URL; the builder wants one.
            None => rustls::ClientConfig::builder().with_root_certificates(rustls::RootCertStore::empty()).with_no_client_auth(),
        };
        let builder = HttpsConnectorBuilder::new().with_tls_config(tls).https_or_http();
        let builder = match &target.tls {
            Some(t) => builder.with_server_name_resolver(FixedServerNameResolver::new(t.server_name.clone())),
            None => builder,
        };
        let https = match protocol {
            Protocol::Http1 => builder.enable_http1().wrap_connector(conn),
            Protocol::Http2 => builder.enable_http2().wrap_connector(conn),
        };
        let mut b = Client::builder(TokioExecutor::new());
        b.pool_idle_timeout(Duration::from_secs(90)).pool_max_idle_per_host(4096);
        if protocol == Protocol::Http2 {
            b.http2_only(true)
                .http2_initial_stream_window_size(4 << 20)
                .http2_initial_connection_window_size(8 << 20)
                .http2_max_frame_size(1 << 20);
        }
        Http { target: target.clone(), client: b.build(https) }
    }

    /// Send a request; return the response with its body still streaming.
    pub async fn send(
        &self,
        method: Method,
        pq: &str,
        accept: &str,
        body: Option<(&'static str, Bytes)>,
    ) -> anyhow::Result<http::Response<Incoming>> {
        let url = self.target.url(pq);
        let mut req =
            Request::builder().method(method).uri(&url).header(header::ACCEPT, accept).header(header::USER_AGENT, "kache-loadtest/0.1");
        let creds = self.target.credentials.headers().await?;
        if let Some(h) = req.headers_mut() {
            for (k, v) in creds.iter() {
                h.append(k, v.clone());
            }
        }
        let body = match body {
            Some((ct, b)) => {
                req = req.header(header::CONTENT_TYPE, ct);
                Full::new(b)
            }
            None => Full::new(Bytes::new()),
        };
        let resp = self.client.request(req.body(body)?).await.with_context(|| url.clone())?;
        Ok(resp)
    }

    /// GET and read the whole body.
    pub async fn get_full(&self, pq: &str, accept: &str) -> anyhow::Result<Whole> {
        let resp = self.send(Method::GET, pq, accept, None).await?;
        let status = resp.status().as_u16();
        let body = resp.into_body().collect().await?.to_bytes();
        Ok(Whole { status, body })
    }

    /// GET, failing on a non-200 status, and count the body without keeping it.
    pub async fn get_drain(&self, pq: &str, accept: &str, prefix: usize) -> anyhow::Result<Drained> {
        let resp = self.send(Method::GET, pq, accept, None).await?;
        let status = resp.status().as_u16();
        if status != 200 {
            let body = resp.into_body().collect().await.map(|b| b.to_bytes()).unwrap_or_default();
            bail!("status {status}: {}", body[..body.len().min(300)].escape_ascii());
        }
        drain(resp.into_body(), prefix).await
    }
}

/// Read a body to its end, counting bytes and keeping the first `prefix` of them.
pub async fn drain(mut body: Incoming, prefix: usize) -> anyhow::Result<Drained> {
    let mut keep = BytesMut::new();
    let mut n = 0u64;
    while let Some(frame) = body.frame().await {
        let frame = frame?;
        if let Some(d) = frame.data_ref() {
            n += d.len() as u64;
            if keep.len() < prefix {
                keep.extend_from_slice(&d[..d.len().min(prefix - keep.len())]);
            }
        }
    }
    Ok(Drained { bytes: n, prefix: keep.freeze() })
}

/// Percent-encode a query value (selectors hold `=`, `,`, `!`, parentheses).
pub fn encode(v: &str) -> String {
    let mut out = String::with_capacity(v.len() * 3);
    for b in v.bytes() {
        if b.is_ascii_alphanumeric() || b"-_.~".contains(&b) {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}
