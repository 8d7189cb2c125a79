//! `KindCache`: the state of one resource type. One writer (the simulator's write path or an
//! informer) applies changes; readers load an immutable [`Snapshot`]. Watchers get every
//! change through a bounded broadcast ring, so a slow watcher falls behind and is ended
//! instead of delaying the writer or anyone else.

pub mod deflated;
pub mod feed;
mod intern;
pub(crate) mod object;
mod rings;
pub mod state;
pub(crate) mod store;
pub(crate) mod window;

use crate::api::resource::ResourceRef;
use crate::api::table::CustomColumns;
use crate::cache::object::Object;
use crate::cache::store::Snapshot;
use crate::cache::window::{Event, EventType};
use arc_swap::ArcSwap;
use rings::Rings;
use std::collections::VecDeque;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::sync::{broadcast, watch};

/// What watchers receive, in commit order.
#[derive(Debug, Clone)]
pub enum Message {
    /// A change. The ring holds it weakly: the window holds it (bounded by count and bytes),
    /// so a ring of thousands of slots does not keep large objects alive after the window
    /// dropped them; a watcher that finds it gone was too far behind and is ended.
    Event(std::sync::Weak<Event>),
    /// Every change up to this RV has been sent (basis of bookmarks).
    Progress(u64),
    /// A relist's differences up to this RV have all been sent: watchers that take
    /// bookmarks send one now, ending the catch-up.
    Caught(u64),
    /// The state was replaced wholesale (relist): watchers must end so clients resume.
    Reset,
}

/// How a relist was brought into a cache.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Relisted {
    /// The differences were applied as ordinary events, which open watchers received; they
    /// stay open.
    Diffed {
        /// Objects new to the cache (a name reused by a new object counts here and in
        /// `deleted`).
        added: usize,
        /// Objects at a new resourceVersion.
        modified: usize,
        /// Objects gone.
        deleted: usize,
    },
    /// The state was replaced and open watchers ended (their clients resume or relist),
    /// because the differences could not be told soundly as events: why.
    Replaced(&'static str),
}

/// One step of a relist's differences.
enum Diff {
    /// The listed object at this index, as an ADDED or MODIFIED event.
    Put(usize, EventType),
    /// A held object the list no longer has, as a DELETED event.
    Gone(Arc<Object>),
}

/// The events that take `cur` (complete up to `floor`) to the upstream's list `objects` at
/// `rv`, in resourceVersion order, or why they cannot be told soundly.
///
/// Each listed object that is new or at another RV is one event at its own RV, which lies
/// above `floor` (the cache has seen every change up to it) and at or below `rv`. A name
/// whose uid changed was deleted and created again: a DELETED then an ADDED. Objects gone
/// are DELETED, but the list does not say when: each is given an RV of its own that no
/// listed object holds, the highest free ones at or below `rv` (a recreated name's below its
/// new object's RV), so that a client holding a real RV of the span from the upstream, below
/// them all, still gets every deletion when it watches from there (see [`Gap`]). Every real
/// deletion took an RV of its own in that range, so there are enough; if not, the
/// upstream's history is not the one the cache followed (a restored etcd) and no events can
/// describe it.
fn relist_events(cur: &Snapshot, objects: &[Object], rv: u64, floor: u64) -> Result<Vec<(u64, Diff)>, &'static str> {
    if rv < floor {
        return Err("the new list is older than the cache");
    }
    let mut steps = Vec::new();
    let mut used = std::collections::HashSet::new();
    // (RV the deletion must precede, the object deleted)
    let mut gone: Vec<(u64, Arc<Object>)> = Vec::new();
    let mut listed = std::collections::HashSet::with_capacity(objects.len());
    for (i, o) in objects.iter().enumerate() {
        listed.insert(&*o.key);
        let kind = match cur.get(&o.key) {
            Some(old) if old.rv == o.rv => continue,
            Some(old) if old.uid() != o.uid() => {
                gone.push((o.rv, old.clone()));
                EventType::Added
            }
            Some(_) => EventType::Modified,
            None => EventType::Added,
        };
        if o.rv <= floor || o.rv > rv {
            return Err("an object changed at a resourceVersion outside the span the cache missed");
        }
        if !used.insert(o.rv) {
            return Err("two objects share a resourceVersion");
        }
        steps.push((o.rv, Diff::Put(i, kind)));
    }
    gone.extend(cur.objects.values().filter(|o| !listed.contains(&*o.key)).map(|o| (rv + 1, o.clone())));
    // From the top down: each takes the highest RV no listed object holds below its bound
    // and below the deletions placed before it.
    gone.sort_by(|a, b| (b.0, &b.1.key).cmp(&(a.0, &a.1.key)));
    let mut ceiling = rv + 1;
    for (before, old) in gone {
        let mut slot = before.min(ceiling) - 1;
        while slot > floor && used.contains(&slot) {
            slot -= 1;
        }
        if slot <= floor {
            return Err("more deletions than resourceVersions between the cache and the new list");
        }
        ceiling = slot;
        steps.push((slot, Diff::Gone(old)));
    }
    steps.sort_by_key(|(at, _)| *at);
    Ok(steps)
}

/// The span of resourceVersions a relist told as differences: the cache had followed the
/// upstream up to `floor`, and the list was at `rv`. Inside it the cache's states are not
/// the upstream's (its deletions sit at RVs of its choosing), so a client holding an RV of
/// the span that came from the upstream (a passed-through LIST) cannot be answered from the
/// cache as if it were the cache's: an exact-RV read in `(floor, rv)` is the upstream's, and
/// so is a watch from `[deletions, rv)`, where a deletion the client has not seen may lie
/// below its RV. A watch from below `deletions` gets every deletion (and maybe some the
/// client never saw the object of, which it ignores).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Gap {
    floor: u64,
    /// The lowest RV given to a deletion (`rv` when there were none).
    deletions: u64,
    rv: u64,
}

/// Relist spans remembered (relists are rare: an upstream restart or a long outage each).
const GAPS: usize = 16;

/// The default byte bound of each cache's window: 10,000 changes of objects of about 3 KB
/// (a typical pod in JSON) fit; larger objects changing fast keep fewer changes.
pub const DEFAULT_WINDOW_BYTES: usize = 32 << 20;

/// Sizes of a cache's buffers.
#[derive(Debug, Clone, Copy)]
pub struct Limits {
    /// Events kept in the window.
    pub window_events: usize,
    /// Bytes of object versions the window keeps at most (0: no byte bound); see
    /// [`window::Window`].
    pub window_bytes: usize,
    /// Past snapshots kept for continue tokens and exact-RV lists.
    pub history: usize,
    /// Messages a watcher may fall behind before it is ended.
    pub watcher_lag: usize,
    /// Bytes of Table cells one object may hold; larger cells are withheld (the kind's
    /// Tables then pass through while the object is held).
    pub table_cell_bytes: usize,
}

/// Default bound of one object's Table cells: a printer column of a built-in kind prints a
/// few hundred bytes; a CRD's columns a few KB at most unless they print whole parts of the
/// object (a `string` column of `.spec` is the spec's JSON again), which the apiserver
/// computes per answer and kache would hold for every version in its window.
pub const TABLE_CELL_BYTES: usize = 64 * 1024;

impl Default for Limits {
    fn default() -> Self {
        Limits {
            window_events: 10_000,
            window_bytes: DEFAULT_WINDOW_BYTES,
            history: 1024,
            watcher_lag: 8192,
            table_cell_bytes: TABLE_CELL_BYTES,
        }
    }
}

/// Why no snapshot exists for an RV.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Compacted;

/// The cache of one resource type.
pub struct KindCache {
    /// The resource type.
    pub resource: ResourceRef,
    limits: Limits,
    snap: ArcSwap<Snapshot>,
    progress: watch::Sender<u64>,
    tx: broadcast::Sender<Message>,
    history: Mutex<VecDeque<Arc<Snapshot>>>,
    writer: Mutex<()>,
    /// One ring per value of the indexed field and per namespace that has watchers, so a
    /// change reaches only the watchers it can concern instead of every watcher.
    rings: Mutex<Rings>,
    /// The spans recent relists told as differences, newest last.
    gaps: Mutex<VecDeque<Gap>>,
    /// WatchList events deflated, kept for the next WatchList of the whole collection.
    pub runs: Arc<deflated::Runs>,
}

impl std::fmt::Debug for KindCache {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("KindCache").field("resource", &self.resource.plural).field("rv", &self.snap.load().rv).finish()
    }
}

impl KindCache {
    /// An empty cache at `rv`.
    pub fn new(resource: ResourceRef, rv: u64, limits: Limits) -> Self {
        let (tx, _) = broadcast::channel(limits.watcher_lag.max(16));
        KindCache {
            resource,
            limits,
            snap: ArcSwap::from_pointee(Snapshot::empty(rv, limits.window_events).with_window_bytes(limits.window_bytes)),
            progress: watch::Sender::new(rv),
            tx,
            history: Mutex::new(VecDeque::new()),
            writer: Mutex::new(()),
            rings: Mutex::new(Rings::default()),
            gaps: Mutex::new(VecDeque::new()),
            runs: Arc::default(),
        }
    }

    /// Whether a watch from `rv` can be answered from the cache's events: not when `rv` lies
    /// where a relist's deletions may be below it (see [`Gap`]).
    pub fn resumable(&self, rv: u64) -> bool {
        !self.gaps.lock().unwrap_or_else(|e| e.into_inner()).iter().any(|g| g.deletions <= rv && rv < g.rv)
    }

    /// Whether the cache's state at exactly `rv` is the upstream's: not inside a span a
    /// relist told as differences (see [`Gap`]).
    pub fn vouches_for(&self, rv: u64) -> bool {
        !self.gaps.lock().unwrap_or_else(|e| e.into_inner()).iter().any(|g| g.floor < rv && rv < g.rv)
    }

    /// The current state.
    pub fn snapshot(&self) -> Arc<Snapshot> {
        self.snap.load_full()
    }

    /// The RV everything up to which is reflected, and the state as of then. Reading
    /// progress before the snapshot keeps the pair consistent: progress only moves after the
    /// change it covers is swapped in.
    pub fn latest(&self) -> (u64, Arc<Snapshot>) {
        let p = *self.progress.borrow();
        let s = self.snapshot();
        (p.max(s.rv), s)
    }

    /// The RV everything up to which is reflected.
    pub fn progress(&self) -> u64 {
        self.latest().0
    }

    /// Subscribe to changes committed from now on.
    pub fn subscribe(&self) -> broadcast::Receiver<Message> {
        self.tx.subscribe()
    }

    /// Subscribe to the changes that concern objects whose indexed field is (or was)
    /// `value`, plus progress and resets.
    pub fn subscribe_indexed(&self, value: &str) -> broadcast::Receiver<Message> {
        self.rings.lock().unwrap_or_else(|e| e.into_inner()).field(value, self.limits.watcher_lag)
    }

    /// Subscribe to the changes of objects in namespace `ns`, plus progress and resets.
    pub fn subscribe_namespace(&self, ns: &str) -> broadcast::Receiver<Message> {
        self.rings.lock().unwrap_or_else(|e| e.into_inner()).namespace(ns, self.limits.watcher_lag)
    }

    /// Number of open watchers.
    pub fn watchers(&self) -> usize {
        self.tx.receiver_count() + self.rings.lock().unwrap_or_else(|e| e.into_inner()).receivers()
    }

    /// Send to every ring (progress and resets concern every watcher).
    fn send_all(&self, msg: Message) {
        self.rings.lock().unwrap_or_else(|e| e.into_inner()).send_all(&msg);
        let _ = self.tx.send(msg);
    }

    /// Send an event to the narrower rings that concern it.
    fn send_indexed(&self, ev: &Arc<Event>) {
        self.rings.lock().unwrap_or_else(|e| e.into_inner()).send_event(ev, self.resource.index.as_deref());
    }

    /// Wait until progress reaches `rv`; false on timeout.
    pub async fn wait_for(&self, rv: u64, timeout: Duration) -> bool {
        let mut rx = self.progress.subscribe();
        tokio::time::timeout(timeout, rx.wait_for(|p| *p >= rv)).await.is_ok_and(|r| r.is_ok())
    }

    /// The state as of `rv`: the newest snapshot at or below it, if it is still kept.
    pub fn at(&self, rv: u64) -> Result<Arc<Snapshot>, Compacted> {
        let cur = self.snapshot();
        if cur.rv <= rv {
            return Ok(cur);
        }
        let hist = self.history.lock().unwrap_or_else(|e| e.into_inner());
        // history holds consecutive states, newest last; each is valid until the next one.
        let mut newer_rv = cur.rv;
        for s in hist.iter().rev() {
            if s.rv <= rv && rv < newer_rv {
                return Ok(s.clone());
            }
            newer_rv = s.rv;
        }
        Err(Compacted)
    }

    /// Apply one change. Its RV must exceed every RV applied before.
    pub fn apply(&self, kind: EventType, object: Object) -> Arc<Event> {
        let _w = self.writer.lock().unwrap_or_else(|e| e.into_inner());
        self.apply_locked(kind, object)
    }

    /// Apply a change from a stream of the upstream's events unless the cache already holds
    /// its RV (or a later one). Two complete, ordered streams (the informer's watch and a
    /// freshness probe) may both deliver it: the check and the change are one step under
    /// the writer lock, so each event is applied once, in order.
    pub fn apply_newer(&self, kind: EventType, object: Object) -> Option<Arc<Event>> {
        let _w = self.writer.lock().unwrap_or_else(|e| e.into_inner());
        if object.rv <= self.snap.load().rv || object.rv <= *self.progress.borrow() {
            return None;
        }
        Some(self.apply_locked(kind, object))
    }

    /// `o` within the cache's bounds: Table cells over `table_cell_bytes` withheld (and
    /// counted).
    fn bounded(&self, mut o: Object) -> Object {
        if o.withhold_cells_over(self.limits.table_cell_bytes) {
            crate::telemetry::limit_hit("max-table-cell-bytes-per-object");
            tracing::debug!(resource = %self.resource.plural, object = %o.key, "Table cells withheld for their size");
        }
        o
    }

    fn apply_locked(&self, kind: EventType, object: Object) -> Arc<Event> {
        let object = self.bounded(object);
        let cur = self.snap.load_full();
        let (next, ev) = cur.apply(kind, object, self.resource.index.as_deref());
        self.snap.store(Arc::new(next));
        self.remember(cur);
        let _ = self.tx.send(Message::Event(Arc::downgrade(&ev)));
        self.send_indexed(&ev);
        self.progress.send_if_modified(|p| (*p < ev.rv).then(|| *p = ev.rv).is_some());
        ev
    }

    fn remember(&self, old: Arc<Snapshot>) {
        let mut hist = self.history.lock().unwrap_or_else(|e| e.into_inner());
        hist.push_back(old);
        while hist.len() > self.limits.history {
            hist.pop_front();
        }
    }

    /// Note that everything up to `rv` is reflected (a bookmark or another kind's commit),
    /// and tell watchers when `notify` is set.
    pub fn advance(&self, rv: u64, notify: bool) {
        let _w = self.writer.lock().unwrap_or_else(|e| e.into_inner());
        self.progress.send_if_modified(|p| (*p < rv).then(|| *p = rv).is_some());
        if notify {
            let p = *self.progress.borrow();
            self.send_all(Message::Progress(p));
        }
    }

    /// End every open watch (shutdown); their clients resume elsewhere.
    pub fn end_watchers(&self) {
        self.send_all(Message::Reset);
    }

    /// Bring the cache to a new list of the upstream's (after its watch expired) at `rv`,
    /// telling open watchers the differences as events (see [`relist_events`]) instead of ending
    /// them, so their clients need not relist. All events are applied in one step (readers
    /// see the old state or the new one), each leaving its state in the history for exact-RV
    /// reads; then a [`Message::Caught`] at `rv`. When that cannot be done soundly (the
    /// printer columns changed, or the list is not a later state of what the cache
    /// followed), the state is replaced and watchers ended, as [`KindCache::replace`] does.
    pub fn relist(&self, objects: Vec<Object>, rv: u64, custom: Option<Arc<CustomColumns>>) -> Relisted {
        let _w = self.writer.lock().unwrap_or_else(|e| e.into_inner());
        let objects: Vec<Object> = objects.into_iter().map(|o| self.bounded(o)).collect();
        let cur = self.snap.load_full();
        let floor = (*self.progress.borrow()).max(cur.rv);
        let steps = if custom != cur.custom { Err("the printer columns changed") } else { relist_events(&cur, &objects, rv, floor) };
        let steps = match steps {
            Ok(steps) => steps,
            Err(why) => {
                self.replace_locked(objects, rv, custom);
                return Relisted::Replaced(why);
            }
        };
        let deletions = steps.iter().filter(|(_, step)| matches!(step, Diff::Gone(_))).map(|(at, _)| *at).min().unwrap_or(rv);
        {
            let mut gaps = self.gaps.lock().unwrap_or_else(|e| e.into_inner());
            if gaps.len() == GAPS {
                gaps.pop_front();
            }
            gaps.push_back(Gap { floor, deletions, rv });
        }
        let (mut added, mut modified, mut deleted) = (0, 0, 0);
        let mut objects: Vec<Option<Object>> = objects.into_iter().map(Some).collect();
        let mut snap = cur;
        let mut events = Vec::with_capacity(steps.len());
        for (at, step) in steps {
            let (kind, object) = match step {
                Diff::Put(i, kind) => match objects[i].take() {
                    Some(o) => (kind, o),
                    None => continue,
                },
                Diff::Gone(old) => (EventType::Deleted, old.at_rv(at)),
            };
            match kind {
                EventType::Added => added += 1,
                EventType::Modified => modified += 1,
                EventType::Deleted => deleted += 1,
            }
            let (next, ev) = snap.apply(kind, object, self.resource.index.as_deref());
            self.remember(std::mem::replace(&mut snap, Arc::new(next)));
            events.push(ev);
        }
        self.snap.store(snap);
        for ev in &events {
            let _ = self.tx.send(Message::Event(Arc::downgrade(ev)));
            self.send_indexed(ev);
        }
        self.progress.send_if_modified(|p| (*p < rv).then(|| *p = rv).is_some());
        self.send_all(Message::Caught(rv));
        Relisted::Diffed { added, modified, deleted }
    }

    /// The state of a restarted kache: `objects` at `floor`, then `changes` applied in order
    /// (the window a watch resumes from), the progress at `rv`.
    pub fn restore(&self, objects: impl IntoIterator<Item = Object>, floor: u64, changes: Vec<(EventType, Object)>, rv: u64) {
        let _w = self.writer.lock().unwrap_or_else(|e| e.into_inner());
        self.replace_locked(objects, floor, None);
        for (kind, o) in changes {
            self.apply_locked(kind, o);
        }
        self.progress.send_if_modified(|p| (*p < rv).then(|| *p = rv).is_some());
    }

    /// The resourceVersion below which no watch may resume: the last relist told as
    /// differences (0: none).
    pub fn resumable_above(&self) -> u64 {
        self.gaps.lock().unwrap_or_else(|e| e.into_inner()).iter().map(|g| g.rv).max().unwrap_or(0)
    }

    /// Replace the whole state (initial load or relist) at `rv`. Open watchers are ended.
    pub fn replace(&self, objects: impl IntoIterator<Item = Object>, rv: u64) {
        let custom = self.snapshot().custom.clone();
        self.replace_printed(objects, rv, custom);
    }

    /// Replace the whole state, its objects' cells computed with the custom resource's
    /// printer columns `custom`.
    pub fn replace_printed(&self, objects: impl IntoIterator<Item = Object>, rv: u64, custom: Option<Arc<CustomColumns>>) {
        let _w = self.writer.lock().unwrap_or_else(|e| e.into_inner());
        self.replace_locked(objects, rv, custom);
    }

    fn replace_locked(&self, objects: impl IntoIterator<Item = Object>, rv: u64, custom: Option<Arc<CustomColumns>>) {
        let objects = objects.into_iter().map(|o| self.bounded(o));
        let mut s = Snapshot::from_objects(objects, rv, self.limits.window_events, self.resource.index.as_deref())
            .with_window_bytes(self.limits.window_bytes);
        s.custom = custom;
        self.snap.store(Arc::new(s));
        self.history.lock().unwrap_or_else(|e| e.into_inner()).clear();
        // Nothing before `rv` is answered from the cache any more.
        self.gaps.lock().unwrap_or_else(|e| e.into_inner()).clear();
        self.send_all(Message::Reset);
        self.progress.send_replace(rv);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn res() -> ResourceRef {
        Arc::new(crate::sim::catalog::resource("pods"))
    }

    fn obj(name: &str, rv: u64) -> Object {
        let v = serde_json::json!({"metadata": {"name": name, "namespace": "ns", "resourceVersion": rv.to_string()}, "spec": {"nodeName": "n"}});
        Object::new(&res(), &v, Some(&crate::cache::object::item_json(&v)), None).unwrap()
    }

    #[test]
    fn history_answers_past_states_until_compacted() {
        let c = KindCache::new(res(), 10, Limits { window_events: 100, window_bytes: 0, history: 2, watcher_lag: 16, ..Limits::default() });
        c.apply(EventType::Added, obj("a", 11));
        c.apply(EventType::Added, obj("b", 12));
        c.apply(EventType::Added, obj("c", 13));
        assert_eq!(c.at(13).unwrap().objects.len(), 3);
        assert_eq!(c.at(12).unwrap().objects.len(), 2);
        assert_eq!(c.at(11).unwrap().objects.len(), 1);
        assert!(c.at(10).is_err(), "compacted");
        c.advance(20, false);
        assert_eq!(c.at(19).unwrap().rv, 13);
        assert_eq!(c.progress(), 20);
    }

    #[tokio::test]
    async fn indexed_watchers_get_only_their_values_changes_including_moves_away() {
        let c = KindCache::new(res(), 1, Limits::default());
        let on = |name: &str, node: &str, rv: u64| {
            let v = serde_json::json!({"metadata": {"name": name, "namespace": "ns", "resourceVersion": rv.to_string()}, "spec": {"nodeName": node}});
            Object::new(&res(), &v, Some(&crate::cache::object::item_json(&v)), None).unwrap()
        };
        let mut a = c.subscribe_indexed("node-a");
        let mut b = c.subscribe_indexed("node-b");
        c.apply(EventType::Added, on("p1", "node-a", 2));
        c.apply(EventType::Added, on("p2", "node-b", 3));
        c.apply(EventType::Modified, on("p1", "node-b", 4));
        c.advance(5, true);
        let rvs = |rx: &mut broadcast::Receiver<Message>| {
            let mut out = Vec::new();
            while let Ok(m) = rx.try_recv() {
                out.push(match m {
                    Message::Event(e) => e.upgrade().unwrap().rv,
                    Message::Progress(p) | Message::Caught(p) => 1000 + p,
                    Message::Reset => 0,
                });
            }
            out
        };
        assert_eq!(rvs(&mut a), vec![2, 4, 1005], "node-a sees p1 arrive and leave, then progress");
        assert_eq!(rvs(&mut b), vec![3, 4, 1005]);
        assert_eq!(c.watchers(), 2);
        drop(a);
        c.advance(6, true);
        assert_eq!(c.watchers(), 1, "rings without watchers are dropped");
    }

    #[tokio::test]
    async fn a_nodes_ring_holds_a_nodes_worth_of_changes_and_the_unscheduled_ring_the_kinds() {
        let c =
            KindCache::new(res(), 1, Limits { window_events: 1000, window_bytes: 0, history: 2, watcher_lag: 512, ..Limits::default() });
        let mut node = c.subscribe_indexed("node-a");
        let mut pending = c.subscribe_indexed("");
        let on = |name: String, node: &str, rv: u64| {
            let v = serde_json::json!({"metadata": {"name": name, "namespace": "ns", "resourceVersion": rv.to_string()}, "spec": {"nodeName": node}});
            Object::new(&res(), &v, Some(&crate::cache::object::item_json(&v)), None).unwrap()
        };
        // A change to each of 110 pods (the kubelet's default maxPods) fits the node's ring.
        for i in 0..110u64 {
            c.apply(EventType::Added, on(format!("p{i}"), "node-a", 2 + i));
        }
        for _ in 0..110 {
            assert!(matches!(node.try_recv(), Ok(Message::Event(_))));
        }
        // Falling INDEXED_RING behind ends the node's watcher (it resumes from the window).
        for i in 0..=rings::INDEXED_RING as u64 {
            c.apply(EventType::Modified, on(format!("p{}", i % 110), "node-a", 200 + i));
        }
        assert!(matches!(node.try_recv(), Err(broadcast::error::TryRecvError::Lagged(_))));
        // Pending pods arrive in bursts (a scaled-up Deployment): the "" ring is the kind's.
        for i in 0..400u64 {
            c.apply(EventType::Added, Object::bare(crate::cache::object::key("ns", &format!("pending-{i}")), 1000 + i).with_fields([]));
        }
        for i in 0..400u64 {
            assert!(matches!(pending.try_recv(), Ok(Message::Event(e)) if e.upgrade().unwrap().rv == 1000 + i));
        }
    }

    #[tokio::test]
    async fn objects_without_the_indexed_field_reach_the_empty_value_watchers() {
        // As the store indexes them: `spec.nodeName=` LISTs and watches see the same objects.
        let c = KindCache::new(res(), 1, Limits::default());
        let mut unscheduled = c.subscribe_indexed("");
        c.apply(EventType::Added, Object::bare(crate::cache::object::key("ns", "pending"), 2).with_fields([]));
        assert!(matches!(unscheduled.try_recv(), Ok(Message::Event(e)) if e.upgrade().unwrap().rv == 2));
        assert_eq!(c.snapshot().indexed("", None).count(), 1);
    }

    #[tokio::test]
    async fn a_stalled_watcher_never_blocks_the_writer_and_learns_it_lagged() {
        let c = KindCache::new(res(), 1, Limits { window_events: 10, window_bytes: 0, history: 4, watcher_lag: 16, ..Limits::default() });
        let mut stalled = c.subscribe();
        for rv in 2..200 {
            c.apply(EventType::Added, obj(&format!("p{rv}"), rv));
        }
        assert_eq!(c.snapshot().rv, 199, "every change applied without waiting for the reader");
        assert!(matches!(stalled.recv().await, Err(broadcast::error::RecvError::Lagged(_))), "the reader is told it fell behind");
    }

    #[tokio::test]
    async fn watchers_see_changes_in_order_and_a_reset_on_replace() {
        let c = KindCache::new(res(), 1, Limits::default());
        let mut rx = c.subscribe();
        c.apply(EventType::Added, obj("a", 2));
        c.advance(3, true);
        c.replace(vec![obj("z", 4)], 4);
        // The replaced window no longer holds the change: the ring's weak reference is dead,
        // and a watcher reaching it ends (as it would at the Reset behind it).
        assert!(matches!(rx.recv().await.unwrap(), Message::Event(e) if e.upgrade().is_none()));
        assert!(matches!(rx.recv().await.unwrap(), Message::Progress(3)));
        assert!(matches!(rx.recv().await.unwrap(), Message::Reset));
        assert!(c.wait_for(4, Duration::from_millis(1)).await);
        assert_eq!(c.snapshot().objects.len(), 1);
    }

    /// A pod with a uid, for relists.
    fn pod(name: &str, uid: &str, rv: u64) -> Object {
        let v = serde_json::json!({"metadata": {"name": name, "namespace": "ns", "uid": uid, "resourceVersion": rv.to_string()}, "spec": {"nodeName": "n"}});
        Object::new(&res(), &v, Some(&crate::cache::object::item_json(&v)), None).unwrap()
    }

    /// Messages waiting for a receiver, as (type, key, RV); progress as ("PROGRESS", "", rv).
    fn drain(rx: &mut broadcast::Receiver<Message>) -> Vec<(String, String, u64)> {
        let mut out = Vec::new();
        while let Ok(m) = rx.try_recv() {
            out.push(match m {
                Message::Event(e) => {
                    let e = e.upgrade().unwrap();
                    (e.kind.as_str().to_string(), e.object.key.to_string(), e.rv)
                }
                Message::Progress(p) => ("PROGRESS".into(), String::new(), p),
                Message::Caught(p) => ("CAUGHT".into(), String::new(), p),
                Message::Reset => ("RESET".into(), String::new(), 0),
            });
        }
        out
    }

    fn row(t: &str, key: &str, rv: u64) -> (String, String, u64) {
        (t.to_string(), key.to_string(), rv)
    }

    #[test]
    fn a_relist_tells_open_watchers_the_differences_and_leaves_them_open() {
        let c = KindCache::new(res(), 1, Limits::default());
        c.replace(vec![pod("a", "ua", 2), pod("b", "ub", 3), pod("c", "uc", 4), pod("e", "ue", 5)], 5);
        let mut all = c.subscribe();
        let mut node = c.subscribe_indexed("n");
        // Missed while the upstream was away: a modified at 9, d created at 8, c deleted,
        // e deleted and created again at 11 (a new uid), b untouched; the list is at 12.
        let listed = vec![pod("a", "ua", 9), pod("b", "ub", 3), pod("d", "ud", 8), pod("e", "ue2", 11)];
        let got = c.relist(listed, 12, None);
        assert_eq!(got, Relisted::Diffed { added: 2, modified: 1, deleted: 2 });
        // Deletions take the highest RVs up to the list's that no listed object holds; a
        // recreated name's, the highest below its new object's.
        let want = vec![
            row("ADDED", "ns/d", 8),
            row("MODIFIED", "ns/a", 9),
            row("DELETED", "ns/e", 10),
            row("ADDED", "ns/e", 11),
            row("DELETED", "ns/c", 12),
            row("CAUGHT", "", 12),
        ];
        assert_eq!(drain(&mut all), want);
        assert_eq!(drain(&mut node), want, "indexed watchers get the same");
        let s = c.snapshot();
        let state: Vec<(String, u64)> = s.range(None, None).map(|o| (o.key.to_string(), o.rv)).collect();
        assert_eq!(state, [("ns/a".to_string(), 9), ("ns/b".into(), 3), ("ns/d".into(), 8), ("ns/e".into(), 11)]);
        assert_eq!(c.progress(), 12);
        assert_eq!(s.get("ns/e").unwrap().uid().as_deref(), Some("ue2"));
        // A client that saw part of it resumes from the window; exact-RV reads see each step.
        let resumed: Vec<u64> = s.window.since(8).unwrap().map(|e| e.rv).collect();
        assert_eq!(resumed, [9, 10, 11, 12]);
        assert_eq!(c.at(8).unwrap().objects.len(), 5, "d added, nothing deleted yet");
        assert_eq!(c.at(10).unwrap().get("ns/a").unwrap().rv, 9);
        // The deleted object is its last state at the deletion's RV.
        let deleted = s.window.since(11).unwrap().next().unwrap();
        assert_eq!((deleted.kind, deleted.object.rv), (EventType::Deleted, 12));
        assert!(std::str::from_utf8(deleted.object.json_item_ref().unwrap()).unwrap().contains("\"resourceVersion\":\"12\""));
        // Inside the span (5, 12) the cache's states are its own: an exact read there is
        // the upstream's, and so is a watch from where a deletion may lie below the RV.
        let resumable: Vec<u64> = (4..=13).filter(|&n| c.resumable(n)).collect();
        assert_eq!(resumable, [4, 5, 6, 7, 8, 9, 12, 13]);
        let vouched: Vec<u64> = (4..=13).filter(|&n| c.vouches_for(n)).collect();
        assert_eq!(vouched, [4, 5, 12, 13]);
        // A new state forgets the spans.
        c.replace(vec![pod("a", "ua", 20)], 20);
        assert!(c.resumable(10) && c.vouches_for(10));
    }

    #[test]
    fn a_relist_that_no_events_can_describe_replaces_the_state_and_ends_watchers() {
        let fresh = || {
            let c = KindCache::new(res(), 1, Limits::default());
            c.replace(vec![pod("a", "ua", 2), pod("b", "ub", 3)], 3);
            c.advance(5, false);
            let rx = c.subscribe();
            (c, rx)
        };
        let cases: [(Vec<Object>, u64, &str); 4] = [
            (vec![pod("a", "ua", 2)], 4, "the new list is older than the cache"),
            (vec![pod("a", "ua", 4), pod("b", "ub", 3)], 9, "an object changed at a resourceVersion outside the span the cache missed"),
            (vec![pod("a", "ua", 6), pod("b", "ub", 6)], 7, "two objects share"),
            (vec![pod("x", "ux", 6)], 6, "more deletions than resourceVersions"),
        ];
        for (listed, rv, why) in cases {
            let (c, mut rx) = fresh();
            let n = listed.len();
            match c.relist(listed, rv, None) {
                Relisted::Replaced(got) => assert!(got.starts_with(why), "{got} / {why}"),
                other => panic!("{why}: {other:?}"),
            }
            assert_eq!(drain(&mut rx), [row("RESET", "", 0)], "{why}");
            assert_eq!((c.snapshot().objects.len(), c.progress()), (n, rv), "{why}");
        }
        // Other printer columns: the cells of every object change.
        let (c, mut rx) = fresh();
        let crd = serde_json::json!({"spec": {"versions": [{"name": "v1"}]}});
        let custom = Some(Arc::new(CustomColumns::of_crd(&crd, "v1").unwrap()));
        assert_eq!(c.relist(vec![pod("a", "ua", 2), pod("b", "ub", 3)], 6, custom), Relisted::Replaced("the printer columns changed"));
        assert_eq!(drain(&mut rx), [row("RESET", "", 0)]);
    }

    proptest::proptest! {
        /// Whatever happened upstream while the cache was away (creates, updates, deletes,
        /// names reused, other kinds' writes moving the RV), the relist's events, folded
        /// into what the cache held, give exactly the new list; they come in increasing RV
        /// order above the cache's progress, and the catch-up ends at the list's RV.
        #[test]
        fn relist_events_fold_into_the_new_list(
            before in proptest::collection::vec((0usize..8, 0u8..4), 0..30),
            missed in proptest::collection::vec((0usize..8, 0u8..5), 0..30),
        ) {
            use std::collections::BTreeMap;
            // name -> (uid, rv), driven by (name, op) with one RV per write.
            let mut rv = 1u64;
            let mut uids = 0;
            let mut model: BTreeMap<String, (String, u64)> = BTreeMap::new();
            let mut run = |model: &mut BTreeMap<String, (String, u64)>, ops: &[(usize, u8)], rv: &mut u64| {
                for &(n, op) in ops {
                    *rv += 1;
                    let name = format!("p{n}");
                    match (op, model.contains_key(&name)) {
                        (4, _) => {} // another kind's write
                        (3, true) => { model.remove(&name); }
                        (_, true) => { model.get_mut(&name).unwrap().1 = *rv; }
                        (_, false) => {
                            uids += 1;
                            model.insert(name, (format!("u{uids}"), *rv));
                        }
                    }
                }
            };
            run(&mut model, &before, &mut rv);
            let c = KindCache::new(res(), 1, Limits::default());
            c.replace(model.iter().map(|(n, (u, r))| pod(n, u, *r)), rv);
            let floor = rv;
            let mut rx = c.subscribe();
            let old = model.clone();
            run(&mut model, &missed, &mut rv);
            let listed: Vec<Object> = model.iter().map(|(n, (u, r))| pod(n, u, *r)).collect();
            let got = c.relist(listed, rv, None);
            proptest::prop_assert!(matches!(got, Relisted::Diffed { .. }), "{:?}", got);
            let msgs = drain(&mut rx);
            let (last, events) = msgs.split_last().unwrap();
            proptest::prop_assert_eq!(last, &row("CAUGHT", "", rv));
            let mut folded: BTreeMap<String, u64> = old.iter().map(|(n, (_, r))| (format!("ns/{n}"), *r)).collect();
            let mut prev = floor;
            for (t, key, at) in events {
                proptest::prop_assert!(*at > prev && *at <= rv, "RVs increase above the cache's: {:?}", msgs);
                prev = *at;
                match t.as_str() {
                    "DELETED" => proptest::prop_assert!(folded.remove(key).is_some(), "deleted what was there"),
                    "ADDED" => proptest::prop_assert!(folded.insert(key.clone(), *at).is_none(), "added what was not"),
                    _ => proptest::prop_assert!(folded.insert(key.clone(), *at).is_some(), "modified what was there"),
                }
            }
            let want: BTreeMap<String, u64> = model.iter().map(|(n, (_, r))| (format!("ns/{n}"), *r)).collect();
            proptest::prop_assert_eq!(folded, want);
        }
    }
}
