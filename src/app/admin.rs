//! The admin listener: `/metrics` (Prometheus text), `/debug/cache` (JSON: what each cache
//! holds, how fresh, who watches; `kache status` prints it), `/livez`, `/readyz` (ready when every
//! preloaded cache has synced and its informer reaches the upstream, or serves from memory
//! within `--serve-stale`; `?verbose` lists each check, failing ones as `[-]` even
//! when they do not make kache unready), `/healthz`. Kept off the main listener so probes and scrapes never queue behind
//! client traffic and never need client credentials.

use crate::body::RequestBody;
use crate::body::{self, Body};
use crate::serve::respond::respond;
use crate::serve::server::Handler;
use crate::serve::Serve;
use http::{Request, Response, StatusCode};
use metrics_exporter_prometheus::PrometheusHandle;
use std::sync::Arc;

/// Admin endpoints of one kache.
pub struct Admin {
    /// The serving cache whose readiness is reported.
    pub serve: Arc<Serve>,
    /// Where metrics are rendered from.
    pub prometheus: Option<PrometheusHandle>,
}

fn text(code: StatusCode, s: String) -> Response<Body> {
    respond(code, "text/plain; charset=utf-8", body::full(s))
}

impl Admin {
    fn ready(&self, verbose: bool) -> Response<Body> {
        let checks = self.serve.readiness();
        let ok = checks.iter().all(|c| c.pass || !c.counts);
        let mut out = String::new();
        if verbose {
            for c in &checks {
                out.push_str(&format!("[{}]{} {}\n", if c.pass { '+' } else { '-' }, c.name, c.detail));
            }
        }
        out.push_str(if ok { "readyz check passed\n" } else { "readyz check failed\n" });
        text(if ok { StatusCode::OK } else { StatusCode::SERVICE_UNAVAILABLE }, out)
    }
}

impl Handler for Admin {
    async fn handle<B: RequestBody>(self: Arc<Self>, req: Request<B>) -> Response<Body> {
        let verbose = req.uri().query().is_some_and(|q| q.split('&').any(|p| p == "verbose" || p.starts_with("verbose=")));
        match req.uri().path() {
            "/metrics" => {
                self.serve.sample();
                let mut rendered = self.prometheus.as_ref().map(PrometheusHandle::render).unwrap_or_default();
                rendered.push_str(&crate::telemetry::process_metrics());
                respond(StatusCode::OK, "text/plain; version=0.0.4", body::full(rendered))
            }
            "/debug/cache" => {
                let mut out = serde_json::to_vec_pretty(&self.serve.cache_report()).unwrap_or_default();
                out.push(b'\n');
                respond(StatusCode::OK, "application/json", body::full(out))
            }
            "/livez" | "/healthz" => text(StatusCode::OK, "ok\n".into()),
            "/readyz" => self.ready(verbose),
            _ => text(StatusCode::NOT_FOUND, "not found\n".into()),
        }
    }
}
