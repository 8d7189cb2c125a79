//! In-flight limits on reads kache answers from cache: a global cap and a per-user cap, each
//! request holding its slot until its response body has been sent (or dropped). Beyond a
//! cap the client gets 429 with `Retry-After`, as from the apiserver's max-in-flight filter.
//! Watches are long-running and, as in the apiserver, not counted among reads in flight;
//! they have a per-client bound of their own, as do requests passed through (an upgraded
//! session holding its place until it closes).

use crate::api::status::Status;
use crate::body::{Body, BoxError, Chunk};
use dashmap::DashMap;
use http_body::{Frame, SizeHint};
use http_body_util::BodyExt;
use std::pin::Pin;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};

/// The caps (0 = no cap).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct InflightLimits {
    /// Cached reads in flight at once, over all clients.
    pub global: usize,
    /// Cached reads in flight at once for one user.
    pub per_user: usize,
}

#[derive(Debug)]
struct Counts {
    limits: InflightLimits,
    global: AtomicUsize,
    users: DashMap<String, usize>,
}

/// Counts in-flight cached reads.
#[derive(Debug, Clone)]
pub struct Inflight(Arc<Counts>);

/// A slot: released when dropped.
#[derive(Debug)]
pub struct Permit {
    counts: Arc<Counts>,
    user: Option<String>,
}

impl Drop for Permit {
    fn drop(&mut self) {
        self.counts.global.fetch_sub(1, Ordering::AcqRel);
        if let Some(user) = self.user.take() {
            // Remove the entry at zero, so the map holds only users with requests in flight.
            self.counts.users.remove_if_mut(&user, |_, n| {
                *n = n.saturating_sub(1);
                *n == 0
            });
        }
    }
}

impl Inflight {
    /// A counter with these caps.
    pub fn new(limits: InflightLimits) -> Inflight {
        Inflight(Arc::new(Counts { limits, global: AtomicUsize::new(0), users: DashMap::new() }))
    }

    /// Take a slot for `user` (`None`: count only globally), or the 429 to send.
    pub fn acquire(&self, user: Option<&str>) -> Result<Permit, Status> {
        let c = &self.0;
        let now = c.global.fetch_add(1, Ordering::AcqRel);
        let permit = Permit { counts: c.clone(), user: None };
        if c.limits.global > 0 && now >= c.limits.global {
            return Err(too_many());
        }
        let Some(user) = user.filter(|_| c.limits.per_user > 0) else { return Ok(permit) };
        let mut n = c.users.entry(user.to_string()).or_insert(0);
        if *n >= c.limits.per_user {
            return Err(too_many());
        }
        *n += 1;
        drop(n);
        let mut permit = permit;
        permit.user = Some(user.to_string());
        Ok(permit)
    }

    /// Cached reads in flight now.
    pub fn in_flight(&self) -> usize {
        self.0.global.load(Ordering::Acquire)
    }
}

fn too_many() -> Status {
    Status::too_many_requests("Too many requests, please try again later.", 1)
}

/// Places held together for the life of one answer (its body, or an upgraded session).
#[derive(Debug, Default)]
pub struct Held {
    _places: Vec<Permit>,
    _large: Option<crate::serve::fair::Place>,
}

impl Held {
    /// The places given.
    pub fn new(places: impl IntoIterator<Item = Option<Permit>>) -> Held {
        Held { _places: places.into_iter().flatten().collect(), _large: None }
    }

    /// These places and a place among the client's large answers.
    pub fn with_large(self, large: Option<crate::serve::fair::Place>) -> Held {
        Held { _large: large, ..self }
    }
}

/// `resp`, holding `place` (if any) until its body has been sent or dropped.
pub fn hold(resp: http::Response<Body>, place: Option<Permit>) -> http::Response<Body> {
    match place {
        Some(p) => resp.map(|b| Guarded::wrap(b, p)),
        None => resp,
    }
}

/// A body that holds places until it has been sent or dropped.
pub struct Guarded {
    inner: Body,
    _held: Held,
}

impl Guarded {
    /// `inner`, holding `permit` until it ends.
    pub fn wrap(inner: Body, permit: Permit) -> Body {
        Self::holding(inner, Held::new([Some(permit)]))
    }

    /// `inner`, holding `held` until it ends.
    pub fn holding(inner: Body, held: Held) -> Body {
        Guarded { inner, _held: held }.boxed_unsync()
    }
}

impl http_body::Body for Guarded {
    type Data = Chunk;
    type Error = BoxError;

    fn poll_frame(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Result<Frame<Chunk>, BoxError>>> {
        Pin::new(&mut self.inner).poll_frame(cx)
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn caps_hold_and_slots_come_back() {
        let f = Inflight::new(InflightLimits { global: 3, per_user: 2 });
        let a1 = f.acquire(Some("a")).unwrap();
        let _a2 = f.acquire(Some("a")).unwrap();
        let e = f.acquire(Some("a")).unwrap_err();
        assert_eq!((e.code, e.details.as_ref().unwrap().retry_after_seconds), (429, 1));
        let b1 = f.acquire(Some("b")).unwrap();
        assert_eq!(f.acquire(Some("c")).unwrap_err().code, 429);
        drop(a1);
        drop(b1);
        let _c = f.acquire(Some("c")).unwrap();
        assert_eq!(f.in_flight(), 2);
        assert!(f.0.users.get("b").is_none(), "idle users are forgotten");
    }
}
