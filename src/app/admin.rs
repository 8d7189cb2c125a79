//! The admin listener: `/metrics` (Prometheus text), `/debug/cache` (JSON: what each cache
//! holds, how fresh, who watches; `kache status` prints it), `/livez`, `/readyz` (ready when every
//! preloaded cache has synced and its informer reaches the upstream, or serves from memory
//! within `--serve-stale`; `?verbose` lists each check, failing ones as `[-]` even
//! when they do not make kache unready), `/healthz`. Kept off the main listener so probes and scrapes never queue behind
//! client traffic and never need client credentials.

use crate::body::RequestBody;
use crate::body::{self, Body};
use crate::cache::feed::{self, Loading};
use crate::serve::respond::respond;
use crate::serve::server::Handler;
use crate::serve::{PassThrough, Serve};
use crate::telemetry;
use crate::upstream::health;
use http::{Request, Response, StatusCode};
use metrics_exporter_prometheus::PrometheusHandle;
use std::sync::Arc;
use std::time::Duration;

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
        let checks = readiness(&self.serve);
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
                sample(&self.serve);
                crate::telemetry::record_allocator();
                let mut rendered = self.prometheus.as_ref().map(PrometheusHandle::render).unwrap_or_default();
                rendered.push_str(&crate::telemetry::process_metrics());
                respond(StatusCode::OK, "text/plain; version=0.0.4", body::full(rendered))
            }
            "/debug/cache" => {
                let mut out = serde_json::to_vec_pretty(&cache_report(&self.serve)).unwrap_or_default();
                out.push(b'\n');
                respond(StatusCode::OK, "application/json", body::full(out))
            }
            "/livez" | "/healthz" => text(StatusCode::OK, "ok\n".into()),
            "/readyz" => self.ready(verbose),
            _ => text(StatusCode::NOT_FOUND, "not found\n".into()),
        }
    }
}

/// One readiness check.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReadyCheck {
    /// What is checked (`upstream`, `cache pods json`).
    pub name: String,
    /// Whether it passes (`[+]`) or not (`[-]`).
    pub pass: bool,
    /// Whether a failure makes kache unready (not while it serves from memory within the
    /// staleness bound).
    pub counts: bool,
    /// The detail after the name.
    pub detail: String,
}

impl ReadyCheck {
    fn pass(name: String, detail: String) -> ReadyCheck {
        ReadyCheck { name, pass: true, counts: false, detail }
    }

    fn fail(name: String, detail: String, counts: bool) -> ReadyCheck {
        ReadyCheck { name, pass: false, counts, detail }
    }
}

/// A cache's readiness detail before its first sync: `not synced: listing, 41,200 objects
/// (176.8 MiB) so far`, or why it is not listing.
fn not_synced(loading: Loading) -> String {
    match loading {
        Loading::Listing { objects, bytes, .. } => format!("not synced: listing, {} so far", feed::amount(objects, bytes)),
        Loading::Waiting => "not synced: its list waits for its turn".into(),
        Loading::Synced | Loading::Idle => "not synced".into(),
    }
}

/// A cache's initial list in `/debug/cache`, while it is under way (`null` otherwise).
fn loading_report(loading: Loading) -> serde_json::Value {
    match loading {
        Loading::Listing { objects, bytes, elapsed } => {
            serde_json::json!({"state": "listing", "objects": objects, "bytes": bytes, "seconds": elapsed.as_secs_f64()})
        }
        Loading::Waiting => serde_json::json!({"state": "waiting"}),
        Loading::Synced | Loading::Idle => serde_json::Value::Null,
    }
}

/// A failure's detail, saying whether kache still serves from memory.
fn stale_detail(what: &str, stale: Duration, bound: Duration) -> String {
    if stale < bound {
        format!("{what}; serving from memory for up to {}s more", (bound - stale).as_secs())
    } else {
        format!("{what}; past --serve-stale ({}s)", bound.as_secs())
    }
}

/// Readiness checks for the upstream and every preloaded cache. A failing check counts
/// (makes kache unready) unless kache still serves from memory within
/// `--serve-stale`: a Service must keep sending it clients then.
pub fn readiness(serve: &Serve) -> Vec<ReadyCheck> {
    let bound = serve.settings.serve_stale;
    let mut out = vec![upstream_check(serve)];
    let mut caches = Vec::new();
    for (k, f) in serve.feeds().iter().filter(|(_, f)| f.is_preloaded()) {
        let name = format!("cache {}{}{} {:?}", k.plural, if k.group.is_empty() { "" } else { "." }, k.group, k.format).to_lowercase();
        let stale = f.staleness();
        let check = match (f.synced(), f.healthy()) {
            // Never fillable: its requests pass through, which is not a reason to be unready.
            _ if f.refused().is_some() => ReadyCheck::pass(name, "refused by the upstream; passed through".into()),
            // kache's identity may not list it (a preloaded kind its RBAC does not grant):
            // its reads pass through as they would without the preload.
            (false, _) if f.forbidden() => ReadyCheck::pass(name, "forbidden to kache's identity (403); passed through, retrying".into()),
            (true, true) => ReadyCheck::pass(name, "ok".into()),
            (false, _) => ReadyCheck::fail(name, not_synced(f.loading()), true),
            (true, false) if f.relisting() => {
                ReadyCheck::fail(name, stale_detail("relisting after 410 Gone", stale, bound), stale >= bound)
            }
            (true, false) => ReadyCheck::fail(name, stale_detail("upstream unreachable", stale, bound), stale >= bound),
        };
        caches.push(check);
    }
    caches.sort_by(|a, b| a.name.cmp(&b.name));
    out.extend(caches);
    out
}

/// The upstream's health as a readiness check.
fn upstream_check(serve: &Serve) -> ReadyCheck {
    let name = "upstream".to_string();
    match &*serve.upstream.health().borrow() {
        health::Health::Down { since, why, reason } => {
            let down = since.elapsed();
            let what = format!("{reason} for {}s: {why}", down.as_secs());
            let counts = down >= serve.settings.serve_stale;
            ReadyCheck::fail(name, stale_detail(&what, down, serve.settings.serve_stale), counts)
        }
        health::Health::Up => ReadyCheck::pass(name, "ok".into()),
        health::Health::Unknown => ReadyCheck::pass(name, "not probed yet".into()),
    }
}

/// Set the cache gauges (objects, bytes, window) from every running cache.
pub fn sample(serve: &Serve) {
    metrics::gauge!(telemetry::WATCH_BUFFERED_BYTES).set(serve.settings.watch.buffers.queued() as f64);
    serve.admission.watch_flows.forget_idle();
    for (k, f) in serve.feeds().iter() {
        let labels = [("resource", k.plural.clone()), ("group", k.group.clone()), ("encoding", format!("{:?}", k.format).to_lowercase())];
        let snap = f.cache.snapshot();
        metrics::gauge!(telemetry::OBJECTS, &labels).set(snap.objects.len() as f64);
        metrics::gauge!(telemetry::BYTES, &labels).set(snap.bytes as f64);
        metrics::gauge!(telemetry::WINDOW_EVENTS, &labels).set(snap.window.len() as f64);
        metrics::gauge!(telemetry::WINDOW_BYTES, &labels).set(snap.window.bytes() as f64);
        metrics::gauge!(telemetry::WINDOW_SECONDS, &labels).set(snap.window.span().as_secs_f64());
        metrics::gauge!(telemetry::WATCHES_OPEN, &labels).set(f.cache.watchers() as f64);
        metrics::gauge!(telemetry::STALE_SECONDS, &labels).set(f.staleness().as_secs_f64());
    }
}

/// What each cache holds, for `/debug/cache` (`kache status`): one entry per resource and
/// encoding, in resource order.
pub fn cache_report(serve: &Serve) -> serde_json::Value {
    let mut caches: Vec<serde_json::Value> = serve
        .feeds()
        .iter()
        .map(|(k, f)| {
            let snap = f.cache.snapshot();
            let age = snap.window.newest_at().map(|t| t.elapsed().as_secs_f64());
            serde_json::json!({
                "resource": k.plural,
                "group": k.group,
                "version": k.version,
                "encoding": format!("{:?}", k.format).to_lowercase(),
                "synced": f.synced(),
                "loading": loading_report(f.loading()),
                "refused": f.refused(),
                "objects": snap.objects.len(),
                "bytes": snap.bytes,
                "resourceVersion": snap.rv.to_string(),
                "lastEventAgeSeconds": age,
                "staleSeconds": f.staleness().as_secs_f64(),
                "window": {
                    "events": snap.window.len(),
                    "bytes": snap.window.bytes(),
                    "spanSeconds": snap.window.span().as_secs_f64(),
                    "oldestResourceVersion": snap.window.floor().to_string(),
                },
                "watches": f.cache.watchers(),
            })
        })
        .collect();
    let key = |v: &serde_json::Value| (v["group"].to_string(), v["resource"].to_string(), v["encoding"].to_string());
    caches.sort_by_key(key);
    let upstream = upstream_check(serve);
    let passed: serde_json::Map<String, serde_json::Value> =
        PassThrough::LABELS.iter().map(|r| (r.to_string(), serve.passed_through(r).into())).collect();
    let checked: serde_json::Map<String, serde_json::Value> =
        crate::telemetry::CONSISTENT_CHECK_OUTCOMES.iter().map(|o| (o.to_string(), serve.checks(o).into())).collect();
    serde_json::json!({
        "upstream": {"up": upstream.pass, "detail": upstream.detail},
        "inFlightReads": serve.in_flight(),
        "watchBufferedBytes": serve.settings.watch.buffers.queued(),
        "cacheHits": serve.cache_hits(),
        "passThrough": passed,
        "consistentChecks": checked,
        "caches": caches,
    })
}
