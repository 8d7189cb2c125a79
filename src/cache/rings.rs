//! The narrower broadcast rings of a kind's cache: one per value of its indexed field that
//! has watchers (a kubelet's node) and one per namespace that has watchers, so a change wakes
//! only the watchers it can concern. Without them every watcher of a kind would wake for
//! every change of it: a tenant holding a thousand watches of its own namespace's pods would
//! make each pod written anywhere wake a thousand tasks, and the other clients' events would
//! wait behind them on kache's threads.

use crate::cache::window::Event;
use crate::cache::Message;
use std::collections::HashMap;
use std::sync::Arc;
use tokio::sync::broadcast;

/// Largest ring per index value: one node's pods change far less often than all pods, and
/// every value watched holds a ring (~48 bytes a slot: at 1,024 slots, ~48 KB per watched
/// node, half a GB for 10,000 kubelets). 128 lets every pod a node may run (the kubelet's
/// default maxPods is 110) change once before its watchers must have caught up; a watcher
/// that falls further behind is ended and its client resumes from the window. Objects
/// without the field (`spec.nodeName=`, the scheduler's watch of pending pods) share one
/// value that can see bursts: its ring is as large as the kind's.
pub(super) const INDEXED_RING: usize = 128;

/// Largest ring per namespace: a namespace sees bursts (a Job's thousand pods), but every
/// namespace watched holds a ring, ~48 KB at 1,024 slots (the kind's own ring is 8,192 by
/// default, `--watcher-lag`). A watcher further behind is ended and resumes from the window.
pub(super) const NAMESPACE_RING: usize = 1024;

/// The rings by index value and by namespace; a ring nobody listens to is dropped at the
/// next progress message.
#[derive(Debug, Default)]
pub(super) struct Rings {
    field: HashMap<Arc<str>, broadcast::Sender<Message>>,
    namespace: HashMap<Arc<str>, broadcast::Sender<Message>>,
}

impl Rings {
    /// Subscribe to the ring of the indexed field's `value` (`lag`: the kind's ring size).
    pub(super) fn field(&mut self, value: &str, lag: usize) -> broadcast::Receiver<Message> {
        let cap = if value.is_empty() { lag.max(16) } else { lag.clamp(16, INDEXED_RING) };
        subscribe(&mut self.field, value, cap)
    }

    /// Subscribe to the ring of namespace `ns`.
    pub(super) fn namespace(&mut self, ns: &str, lag: usize) -> broadcast::Receiver<Message> {
        subscribe(&mut self.namespace, ns, lag.clamp(16, NAMESPACE_RING))
    }

    /// Watchers subscribed to a ring.
    pub(super) fn receivers(&self) -> usize {
        self.field.values().chain(self.namespace.values()).map(broadcast::Sender::receiver_count).sum()
    }

    /// Send to every ring (progress and resets concern every watcher), dropping those nobody
    /// listens to any more.
    pub(super) fn send_all(&mut self, msg: &Message) {
        for rings in [&mut self.field, &mut self.namespace] {
            rings.retain(|_, tx| tx.receiver_count() > 0);
            for tx in rings.values() {
                let _ = tx.send(msg.clone());
            }
        }
    }

    /// Send an event to the rings of its object's namespace and of the values of `index`
    /// (the kind's indexed field) its object had before and has now.
    pub(super) fn send_event(&self, ev: &Arc<Event>, index: Option<&str>) {
        if self.field.is_empty() && self.namespace.is_empty() {
            return;
        }
        if let Some(tx) = self.namespace.get(ev.object.namespace()) {
            let _ = tx.send(Message::Event(Arc::downgrade(ev)));
        }
        let Some(field) = index.filter(|_| !self.field.is_empty()) else { return };
        // The values the store indexes them under, so a watch finds the events of exactly the
        // objects a LIST of the same value finds.
        let now = crate::cache::store::indexed_value(&ev.object, field);
        let before = ev.prev.as_ref().map(|p| crate::cache::store::indexed_value(p, field));
        for value in [Some(now), before.filter(|b| *b != now)].into_iter().flatten() {
            if let Some(tx) = self.field.get(value) {
                let _ = tx.send(Message::Event(Arc::downgrade(ev)));
            }
        }
    }
}

/// Subscribe to the ring of `key` in `rings`, made with `cap` slots if nobody watches it yet.
fn subscribe(rings: &mut HashMap<Arc<str>, broadcast::Sender<Message>>, key: &str, cap: usize) -> broadcast::Receiver<Message> {
    rings.entry(Arc::from(key)).or_insert_with(|| broadcast::channel(cap).0).subscribe()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cache::object::Object;
    use crate::cache::window::EventType;
    use crate::cache::{KindCache, Limits};

    fn pods() -> crate::api::resource::ResourceRef {
        Arc::new(crate::sim::catalog::resource("pods"))
    }

    fn pod(ns: &str, name: &str, rv: u64) -> Object {
        let r = pods();
        let v =
            serde_json::json!({"metadata": {"name": name, "namespace": ns, "resourceVersion": rv.to_string()}, "spec": {"nodeName": "n"}});
        Object::new(&r, &v, Some(&crate::cache::object::item_json(&v)), None).unwrap()
    }

    /// What a receiver holds: an event's RV, or 1000 + a progress RV.
    fn drain(rx: &mut broadcast::Receiver<Message>) -> Vec<u64> {
        std::iter::from_fn(|| rx.try_recv().ok())
            .map(|m| match m {
                Message::Event(e) => e.upgrade().unwrap().rv,
                Message::Progress(p) | Message::Caught(p) => 1000 + p,
                Message::Reset => 0,
            })
            .collect()
    }

    #[tokio::test]
    async fn a_namespaces_watchers_get_its_changes_and_everyones_progress_and_the_kinds_get_all() {
        let c = KindCache::new(pods(), 1, Limits::default());
        let (mut a, mut b, mut all) = (c.subscribe_namespace("a"), c.subscribe_namespace("b"), c.subscribe());
        c.apply(EventType::Added, pod("a", "p1", 2));
        c.apply(EventType::Added, pod("b", "p2", 3));
        c.apply(EventType::Added, pod("c", "p3", 4));
        c.apply(EventType::Deleted, pod("a", "p1", 5));
        c.advance(6, true);
        assert_eq!(drain(&mut a), [2, 5, 1006]);
        assert_eq!(drain(&mut b), [3, 1006]);
        assert_eq!(drain(&mut all), [2, 3, 4, 5, 1006]);
        assert_eq!(c.watchers(), 3);
        drop(b);
        c.advance(7, true);
        assert_eq!(c.watchers(), 2, "a namespace's ring without watchers is dropped");
        assert_eq!(drain(&mut a), [1007]);
    }

    #[tokio::test]
    async fn a_namespace_watcher_further_behind_than_its_ring_learns_it_lagged() {
        let c = KindCache::new(pods(), 1, Limits::default());
        let mut a = c.subscribe_namespace("a");
        for i in 0..=NAMESPACE_RING as u64 {
            c.apply(EventType::Added, pod("a", &format!("p{i}"), 2 + i));
        }
        assert!(matches!(a.try_recv(), Err(broadcast::error::TryRecvError::Lagged(_))));
    }
}
