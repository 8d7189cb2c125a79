//! In-flight limits on reads kache answers from cache: a global cap and a per-flow cap, each
//! request holding its slot until its response body has been sent (or dropped). Beyond a
//! cap the client gets 429 with `Retry-After`, as from the apiserver's max-in-flight filter.
//! Watches are long-running and, as in the apiserver, not counted among reads in flight;
//! they have a per-client bound of their own, as do requests passed through (an upgraded
//! session holding its place until it closes).
//!
//! # Flows and their shares
//! The apiserver's priority and fairness (APF) gives each flow a fair share of its seats: a
//! flow is a request's flow schema plus a distinguisher (the user, or the namespace), and
//! shuffle sharding spreads flows over queues so that no flow takes the seats of the others.
//! kache has one priority level (its reads from memory) and no queues: a read that has no
//! place now gets 429, as one APF could not seat. What it keeps from APF is the flow and the
//! share:
//! - the flow is the user, except that every ServiceAccount of a namespace is one flow
//!   (`system:serviceaccount:NS`, see [`flow`]): a tenant can mint ServiceAccounts in its
//!   namespace, not namespaces, so many accounts buy it no more than one;
//! - the first half of the global cap is first come, first served; past it, a flow gets a
//!   place only while it holds fewer than its share of the whole (the cap over twice the
//!   flows with reads in flight). Flows that hold many places cannot take the second half,
//!   so a flow that holds few (a new one holds none) finds a place until the cap itself
//!   is reached;
//! - each flow is bounded by the per-user cap as well.
//!
//! Places are held only while an answer moves: one whose client takes nothing for the stall
//! timeout is ended and its place freed (`server::stall`).
use crate::api::status::Status;
use crate::body::{Body, Tap, Tapped};
use dashmap::DashMap;
use http_body_util::BodyExt;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

/// The caps (0 = no cap).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct InflightLimits {
    /// Cached reads in flight at once, over all clients.
    pub global: usize,
    /// Cached reads in flight at once for one flow (a user, or the ServiceAccounts of one
    /// namespace).
    pub per_user: usize,
}

/// The flow a client's requests are counted in: its user name, or for a ServiceAccount
/// (`system:serviceaccount:NS:NAME`) its namespace's accounts together
/// (`system:serviceaccount:NS`).
pub fn flow(client: &str) -> &str {
    match client.strip_prefix("system:serviceaccount:").and_then(|rest| rest.find(':')) {
        Some(colon) => &client[.."system:serviceaccount:".len() + colon],
        None => client,
    }
}

#[derive(Debug)]
struct Counts {
    limits: InflightLimits,
    global: AtomicUsize,
    flows: DashMap<String, usize>,
}

/// Counts in-flight cached reads.
#[derive(Debug, Clone)]
pub struct Inflight(Arc<Counts>);

/// A slot: released when dropped.
#[derive(Debug)]
pub struct Permit {
    counts: Arc<Counts>,
    flow: Option<String>,
}

impl Drop for Permit {
    fn drop(&mut self) {
        self.counts.global.fetch_sub(1, Ordering::AcqRel);
        if let Some(flow) = self.flow.take() {
            // Remove the entry at zero, so the map holds only flows with requests in flight.
            self.counts.flows.remove_if_mut(&flow, |_, n| {
                *n = n.saturating_sub(1);
                *n == 0
            });
        }
    }
}

impl Inflight {
    /// A counter with these caps.
    pub fn new(limits: InflightLimits) -> Inflight {
        Inflight(Arc::new(Counts { limits, global: AtomicUsize::new(0), flows: DashMap::new() }))
    }

    /// Take a slot for the client `user` (`None`: count only globally) in its [`flow`], or
    /// the 429 to send.
    pub fn acquire(&self, user: Option<&str>) -> Result<Permit, Status> {
        let c = &self.0;
        let now = c.global.fetch_add(1, Ordering::AcqRel);
        let permit = Permit { counts: c.clone(), flow: None };
        if c.limits.global > 0 && now >= c.limits.global {
            return Err(too_many());
        }
        let Some(key) = user.map(flow) else { return Ok(permit) };
        // Past half of the global cap, a flow's share of the whole. The flows are counted
        // only then, and before the flow's entry is held (counting takes every shard's
        // lock): a new flow is one more.
        let past_half = c.limits.global > 0 && 2 * now >= c.limits.global;
        let flows = if past_half { c.flows.len() + usize::from(!c.flows.contains_key(key)) } else { 0 };
        let mut n = c.flows.entry(key.to_string()).or_insert(0);
        let capped = c.limits.per_user > 0 && *n >= c.limits.per_user;
        let over_share = past_half && *n * 2 * flows >= c.limits.global;
        if capped || over_share {
            let empty = *n == 0;
            drop(n);
            if empty {
                c.flows.remove_if(key, |_, n| *n == 0);
            }
            return Err(too_many());
        }
        *n += 1;
        drop(n);
        let mut permit = permit;
        permit.flow = Some(key.to_string());
        Ok(permit)
    }

    /// Cached reads in flight now.
    pub fn in_flight(&self) -> usize {
        self.0.global.load(Ordering::Acquire)
    }
}

/// Each flow's bound on the bytes its watches may have queued together.
#[derive(Debug)]
pub struct WatchFlows {
    bytes: usize,
    flows: DashMap<String, crate::serve::handler::WatchBuffers>,
}

impl WatchFlows {
    /// `bytes` per flow (0: no bound).
    pub fn new(bytes: usize) -> WatchFlows {
        WatchFlows { bytes, flows: DashMap::new() }
    }

    /// The bound of `client`'s flow.
    pub fn of(&self, client: &str) -> Option<crate::serve::handler::WatchBuffers> {
        if self.bytes == 0 {
            return None;
        }
        let key = flow(client);
        if let Some(b) = self.flows.get(key) {
            return Some(b.clone());
        }
        Some(self.flows.entry(key.to_string()).or_insert_with(|| crate::serve::handler::WatchBuffers::new(self.bytes)).clone())
    }

    /// Forget the flows whose watches hold nothing and that no watch refers to.
    pub fn forget_idle(&self) {
        self.flows.retain(|_, b| !(b.idle() && b.unshared()));
    }
}

fn too_many() -> Status {
    Status::too_many_requests("Too many requests, please try again later.", 1)
}

/// Places held together for the life of one answer (its body, or an upgraded session).
#[derive(Debug, Default)]
pub struct Held {
    _places: Vec<Permit>,
    _large: Option<crate::serve::admission::fair::Place>,
}

impl Held {
    /// The places given.
    pub fn new(places: impl IntoIterator<Item = Option<Permit>>) -> Held {
        Held { _places: places.into_iter().flatten().collect(), _large: None }
    }

    /// These places and a place among the client's large answers.
    pub fn with_large(self, large: Option<crate::serve::admission::fair::Place>) -> Held {
        Held { _large: large, ..self }
    }

    /// `body`, holding these places until it has been sent or dropped.
    pub fn until_sent(self, body: Body) -> Body {
        Tapped::new(body, self).boxed_unsync()
    }
}

/// Held places hear nothing of their body's polls: they are given back when it is dropped.
impl<D, E> Tap<D, E> for Held {}

/// `resp`, holding `place` (if any) until its body has been sent or dropped.
pub fn hold(resp: http::Response<Body>, place: Option<Permit>) -> http::Response<Body> {
    match place {
        Some(p) => resp.map(|b| Held::new([Some(p)]).until_sent(b)),
        None => resp,
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
        assert!(f.0.flows.get("b").is_none(), "idle flows are forgotten");
    }

    #[test]
    fn a_namespaces_service_accounts_are_one_flow() {
        assert_eq!(flow("system:serviceaccount:tenant:a"), "system:serviceaccount:tenant");
        assert_eq!(flow("system:serviceaccount:tenant:b"), "system:serviceaccount:tenant");
        assert_eq!(flow("alice"), "alice");
        assert_eq!(flow("system:serviceaccount:odd"), "system:serviceaccount:odd");
        assert_eq!(flow("system:anonymous@10.0.0.7"), "system:anonymous@10.0.0.7");

        let f = Inflight::new(InflightLimits { global: 100, per_user: 4 });
        let held: Vec<Permit> = (0..10)
            .flat_map(|i| (0..4).map(move |_| i))
            .filter_map(|i| f.acquire(Some(&format!("system:serviceaccount:tenant:sa{i}"))).ok())
            .collect();
        assert_eq!(held.len(), 4, "ten accounts of one namespace hold one flow's places");
        assert!(f.acquire(Some("alice")).is_ok());
    }

    /// Many flows that each hold a lot cannot take the second half of the cap from a flow
    /// that holds little: a newcomer is seated while the cap is not reached.
    #[test]
    fn past_half_the_cap_a_flow_holds_no_more_than_its_share() {
        let f = Inflight::new(InflightLimits { global: 4000, per_user: 400 });
        let mut held = Vec::new();
        for _ in 0..400 {
            for user in 0..10 {
                match f.acquire(Some(&format!("tenant-{user}"))) {
                    Ok(p) => held.push(p),
                    Err(s) => assert_eq!(s.code, 429),
                }
            }
        }
        assert_eq!(held.len(), 2000, "each of the ten holds its share, half the cap");
        assert_eq!(f.in_flight(), 2000);
        let honest = f.acquire(Some("honest")).expect("a flow holding nothing is seated");
        drop(honest);
    }
}
