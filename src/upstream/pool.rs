//! The upstream's connection pools: HTTP/2 connections of one kind (same credentials and
//! protocol), another opened when every open one carries its limit of concurrent streams
//! (Go's HTTP/2 transport does the same), up to a bound beyond which requests share the least
//! busy. A request counts against its connection until its response body is dropped.
//! The pools that send kache's own credentials say once when the upstream refuses them.

use super::health::Heard;
use super::{Class, ResponseFuture, Svc, TimedOut};
use crate::body::{Body, BoxError, Tap, Tapped};
use crate::telemetry;
use http::Request;
use hyper::body::Incoming;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tower::ServiceExt;

struct Pooled {
    svc: Svc,
    /// Requests on this connection whose response has not been dropped yet.
    active: Arc<AtomicUsize>,
}

/// Says, once, that the upstream refused kache's own credentials: shared by the pools that
/// send them. Nothing else would say it: a refused informer retries, a refused review is the
/// client's 401, and kache would answer 401 to everyone without a word.
#[derive(Debug, Default)]
pub(super) struct Refusals(AtomicBool);

impl Refusals {
    /// An answer with `status` came to a request of `class` sent with kache's credentials.
    fn answered(&self, status: http::StatusCode, class: Class) {
        if status == http::StatusCode::UNAUTHORIZED && !self.0.swap(true, Ordering::Relaxed) {
            tracing::warn!(
                class = class.label(),
                "the upstream refused kache's credentials (401 Unauthorized): the user of kache's kubeconfig context (or its \
                 service account) is unknown to the upstream or its token has expired; kache's own requests fail until it is \
                 accepted (logged once)"
            );
        }
    }
}

/// Upstream connections of one kind (same credentials and protocol), each its own client.
pub(super) struct Pool {
    make: Box<dyn Fn() -> Svc + Send + Sync>,
    slots: Mutex<Vec<Pooled>>,
    streams: usize,
    max_connections: usize,
    class: Class,
    /// Noted when an answer's headers arrive (shared by every pool of one upstream).
    heard: Arc<Heard>,
    /// Told of every answer when the pool sends kache's credentials.
    refusals: Option<Arc<Refusals>>,
}

impl Pool {
    /// A pool whose connections `make` opens (cheaply: see `Connector`).
    pub(super) fn new(
        class: Class,
        streams: usize,
        max_connections: usize,
        heard: Arc<Heard>,
        refusals: Option<Arc<Refusals>>,
        make: impl Fn() -> Svc + Send + Sync + 'static,
    ) -> Pool {
        let first = Pooled { svc: make(), active: Arc::default() };
        metrics::gauge!(telemetry::UPSTREAM_CONNECTIONS, "class" => class.label()).set(1.0);
        Pool { make: Box::new(make), slots: Mutex::new(vec![first]), streams, max_connections, class, heard, refusals }
    }

    /// A connection with room for one more stream (opening one if all are full and the
    /// bound allows), and the counter the request holds until its response is dropped.
    fn pick(&self) -> (Svc, Arc<AtomicUsize>) {
        let mut slots = self.slots.lock().unwrap_or_else(|e| e.into_inner());
        let free = slots.iter().position(|s| s.active.load(Ordering::Relaxed) < self.streams);
        let i = match free {
            Some(i) => i,
            None if slots.len() < self.max_connections => {
                slots.push(Pooled { svc: (self.make)(), active: Arc::default() });
                metrics::gauge!(telemetry::UPSTREAM_CONNECTIONS, "class" => self.class.label()).set(slots.len() as f64);
                tracing::debug!(class = self.class.label(), connections = slots.len(), "opened another upstream connection");
                slots.len() - 1
            }
            None => least_busy(&slots),
        };
        let slot = &slots[i];
        slot.active.fetch_add(1, Ordering::Relaxed);
        (slot.svc.clone(), slot.active.clone())
    }

    pub(super) fn send(&self, req: Request<Body>, deadline: Duration) -> ResponseFuture {
        let (svc, active) = self.pick();
        let guard = Active(active);
        let heard = self.heard.clone();
        let (refusals, class) = (self.refusals.clone(), self.class);
        let call = tokio::time::timeout(deadline, svc.oneshot(req));
        Box::pin(futures_util::FutureExt::map(call, move |r| match r {
            Ok(resp) => resp.map(|resp| {
                heard.now();
                if let Some(r) = &refusals {
                    r.answered(resp.status(), class);
                }
                resp.map(|b| Counted::new(b, guard))
            }),
            Err(_) => Err(Box::new(TimedOut(deadline)) as BoxError),
        }))
    }

    pub(super) fn connections(&self) -> usize {
        self.slots.lock().map_or(0, |s| s.len())
    }
}

fn least_busy(slots: &[Pooled]) -> usize {
    (0..slots.len()).min_by_key(|&i| slots[i].active.load(Ordering::Relaxed)).unwrap_or(0)
}

/// One stream in use on a connection, released when dropped.
pub struct Active(Arc<AtomicUsize>);

impl Drop for Active {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::Relaxed);
    }
}

/// A stream in use hears nothing of its body's polls: it is released when the body is dropped.
impl<D, E> Tap<D, E> for Active {}

/// An upstream response body; its stream counts against its connection until dropped.
pub type Counted = Tapped<Incoming, Active>;
