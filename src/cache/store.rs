//! Immutable snapshots of one kind's objects: a persistent ordered map by key (cheap to clone,
//! so every LIST page and every watch start reads one consistent state), an index on the
//! kind's indexed field (`spec.nodeName` for pods), and the event window, kept together so a
//! reader never sees them torn.

use crate::api::table::{CustomColumns, TablePrinter};
use crate::cache::object::{Key, Object};
use crate::cache::window::{Event, EventType, Window};
use imbl::OrdMap;
use std::ops::Bound;
use std::sync::Arc;

/// One consistent state of a kind.
#[derive(Debug, Clone, Default)]
pub struct Snapshot {
    /// RV of the last change this state includes.
    pub rv: u64,
    /// Objects by key.
    pub objects: OrdMap<Key, Arc<Object>>,
    /// Objects by indexed field value, then key: a LIST of one node's pods finds its small
    /// map with one lookup and walks only it.
    pub index: OrdMap<Arc<str>, OrdMap<Key, Arc<Object>>>,
    /// Recent events, up to `rv`.
    pub window: Window,
    /// Bytes of encodings held.
    pub bytes: usize,
    /// Objects whose Table cells were withheld for their size ([`Object::unprinted`]): while
    /// any is held, this kind's Tables are the upstream's.
    pub unprinted: usize,
    /// A custom resource's printer columns, which its objects' cells were computed with
    /// (kept with them so a Table's columns and rows always agree).
    pub custom: Option<Arc<CustomColumns>>,
}

/// The key range of a namespace, or every key.
fn ns_bounds(namespace: Option<&str>, after: Option<&str>) -> (Bound<String>, Bound<String>) {
    let lower = match (namespace, after) {
        (_, Some(k)) => Bound::Excluded(k.to_string()),
        (Some(ns), None) => Bound::Included(format!("{ns}/")),
        (None, None) => Bound::Unbounded,
    };
    // '0' follows '/', so "ns0" bounds every "ns/..." key.
    let upper = namespace.map_or(Bound::Unbounded, |ns| Bound::Excluded(format!("{ns}0")));
    (lower, upper)
}

impl Snapshot {
    /// What prints this state's objects as Table rows, if anything does.
    pub fn printer(&self, group: &str, plural: &str) -> Option<TablePrinter> {
        TablePrinter::of(group, plural, self.custom.as_ref())
    }

    /// Whether this state's Tables are printed from memory: the kind has a printer and no
    /// object's cells were withheld ([`Snapshot::unprinted`]).
    pub fn prints(&self, group: &str, plural: &str) -> bool {
        self.unprinted == 0 && self.printer(group, plural).is_some()
    }

    /// The same snapshot with its window bounded by `bytes` as well (0: no byte bound).
    pub fn with_window_bytes(mut self, bytes: usize) -> Self {
        self.window.set_max_bytes(bytes);
        self
    }

    /// An empty snapshot at `rv` with an empty window holding up to `window_cap` events.
    pub fn empty(rv: u64, window_cap: usize) -> Self {
        Snapshot { rv, window: Window::new(rv, window_cap), ..Snapshot::default() }
    }

    /// A snapshot holding `objects` at `rv`, with an empty window starting there.
    pub fn from_objects(objects: impl IntoIterator<Item = Object>, rv: u64, window_cap: usize, index: Option<&str>) -> Self {
        let mut s = Snapshot::empty(rv, window_cap);
        for o in objects {
            s.insert(Arc::new(o), index);
        }
        s
    }

    fn insert(&mut self, o: Arc<Object>, index: Option<&str>) {
        // Unindex the old version first: its indexed value may equal the new one.
        if let Some(old) = self.objects.get(&o.key).cloned() {
            self.unindex(&old, index);
        }
        self.bytes += o.encoded_len();
        self.unprinted += usize::from(o.unprinted());
        if let Some(v) = index.map(|f| indexed_value(&o, f)) {
            match self.index.get_mut(v) {
                Some(objects) => {
                    objects.insert(o.key.clone(), o.clone());
                }
                None => {
                    self.index.insert(Arc::from(v), OrdMap::unit(o.key.clone(), o.clone()));
                }
            }
        }
        self.objects.insert(o.key.clone(), o);
    }

    fn unindex(&mut self, old: &Object, index: Option<&str>) {
        self.bytes -= old.encoded_len();
        self.unprinted -= usize::from(old.unprinted());
        if let Some(v) = index.map(|f| indexed_value(old, f)) {
            let emptied = self.index.get_mut(v).is_some_and(|objects| {
                objects.remove(&old.key);
                objects.is_empty()
            });
            if emptied {
                self.index.remove(v);
            }
        }
    }

    /// The object with `key`.
    pub fn get(&self, key: &str) -> Option<&Arc<Object>> {
        self.objects.get(key)
    }

    /// A new snapshot with one change applied, and the event that describes it.
    pub fn apply(&self, kind: EventType, object: Object, index: Option<&str>) -> (Snapshot, Arc<Event>) {
        let mut next = self.clone();
        let prev = self.objects.get(&object.key).cloned();
        let object = Arc::new(object);
        let prev_at_rv =
            prev.as_ref().filter(|p| kind == EventType::Modified && !p.same_selectables(&object)).map(|p| Arc::new(p.at_rv(object.rv)));
        if kind == EventType::Deleted {
            if let Some(old) = next.objects.remove(&object.key) {
                next.unindex(&old, index);
            }
        } else {
            next.insert(object.clone(), index);
        }
        let ev = Arc::new(Event { rv: object.rv, kind, object, prev, prev_at_rv, at: std::time::Instant::now() });
        next.rv = ev.rv;
        next.window.push(ev.clone());
        (next, ev)
    }

    /// Objects in key order, optionally in one namespace, optionally after a key.
    pub fn range<'a>(&'a self, namespace: Option<&str>, after: Option<&str>) -> impl Iterator<Item = &'a Arc<Object>> + 'a {
        let (lo, hi) = ns_bounds(namespace, after);
        self.objects.range::<_, str>((as_str(&lo), as_str(&hi))).map(|(_, o)| o)
    }

    /// Objects whose indexed field equals `value`, in key order, optionally after a key.
    pub fn indexed<'a>(&'a self, value: &str, after: Option<&str>) -> impl Iterator<Item = &'a Arc<Object>> + 'a {
        let lo = after.map_or(Bound::Unbounded, |k| Bound::Excluded(k.to_string()));
        self.index.get(value).into_iter().flat_map(move |objects| objects.range::<_, str>((as_str(&lo), Bound::Unbounded)).map(|(_, o)| o))
    }
}

/// The value an object is indexed under: an unset field is `""`, as selectors compare it, so
/// `spec.nodeName=` (unscheduled pods, the scheduler's query) is answered from the index too.
pub(crate) fn indexed_value<'a>(o: &'a Object, field: &str) -> &'a str {
    crate::api::selector::FieldSource::field(o, field).unwrap_or("")
}

fn as_str(b: &Bound<String>) -> Bound<&str> {
    match b {
        Bound::Included(s) => Bound::Included(s.as_str()),
        Bound::Excluded(s) => Bound::Excluded(s.as_str()),
        Bound::Unbounded => Bound::Unbounded,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use std::collections::BTreeMap;

    fn obj(ns: &str, name: &str, node: &str, rv: u64) -> Object {
        let mut o = Object::bare(crate::cache::object::key(ns, name), rv).with_fields([("spec.nodeName", node)]);
        o.json = Some(bytes::Bytes::from(format!(",{{\"n\":\"{name}\"}}")));
        o
    }

    #[test]
    fn namespace_range_does_not_leak_into_prefixed_namespaces() {
        let s = Snapshot::from_objects(
            vec![obj("a", "x", "n1", 1), obj("a-b", "y", "n1", 2), obj("ab", "z", "n1", 3), obj("a", "w", "n2", 4)],
            4,
            10,
            Some("spec.nodeName"),
        );
        let names: Vec<&str> = s.range(Some("a"), None).map(|o| o.name()).collect();
        assert_eq!(names, ["w", "x"]);
        let all: Vec<&str> = s.range(None, None).map(|o| &*o.key).collect();
        assert_eq!(all, ["a-b/y", "a/w", "a/x", "ab/z"], "etcd key order");
        let on_n1: Vec<&str> = s.indexed("n1", None).map(|o| &*o.key).collect();
        assert_eq!(on_n1, ["a-b/y", "a/x", "ab/z"]);
        let after: Vec<&str> = s.indexed("n1", Some("a-b/y")).map(|o| &*o.key).collect();
        assert_eq!(after, ["a/x", "ab/z"]);
    }

    #[test]
    fn objects_without_the_indexed_field_are_found_under_the_empty_value() {
        let unscheduled = obj("a", "pending", "", 2).with_fields([]);
        let s = Snapshot::from_objects(vec![obj("a", "x", "n1", 1), unscheduled], 2, 10, Some("spec.nodeName"));
        let found: Vec<&str> = s.indexed("", None).map(|o| &*o.key).collect();
        assert_eq!(found, ["a/pending"]);
        let (next, _) = s.apply(EventType::Deleted, obj("a", "pending", "", 3), Some("spec.nodeName"));
        assert_eq!(next.indexed("", None).count(), 0, "unindexed on delete");
    }

    proptest! {
        #[test]
        fn applying_events_equals_folding_into_a_btreemap(
            ops in proptest::collection::vec((0u8..3, 0usize..6, 0usize..3), 1..80)
        ) {
            let mut s = Snapshot::empty(0, 1000);
            let mut model: BTreeMap<String, (String, u64)> = BTreeMap::new();
            let mut rv = 0;
            for (op, name, node) in ops {
                rv += 1;
                let name = format!("p{name}");
                let node = format!("n{node}");
                let exists = model.contains_key(&format!("ns/{name}"));
                let kind = match (op, exists) {
                    (0, _) | (_, false) => if exists { EventType::Modified } else { EventType::Added },
                    (1, true) => EventType::Modified,
                    _ => EventType::Deleted,
                };
                let (next, ev) = s.apply(kind, obj("ns", &name, &node, rv), Some("spec.nodeName"));
                prop_assert_eq!(ev.prev.is_some(), exists);
                s = next;
                if kind == EventType::Deleted { model.remove(&format!("ns/{name}")); } else { model.insert(format!("ns/{name}"), (node, rv)); }
            }
            let got: Vec<(String, u64)> = s.range(None, None).map(|o| (o.key.to_string(), o.rv)).collect();
            let want: Vec<(String, u64)> = model.iter().map(|(k, (_, rv))| (k.clone(), *rv)).collect();
            prop_assert_eq!(got, want);
            for n in 0..3 {
                let node = format!("n{n}");
                let got: Vec<String> = s.indexed(&node, None).map(|o| o.key.to_string()).collect();
                let want: Vec<String> = model.iter().filter(|(_, (nd, _))| *nd == node).map(|(k, _)| k.clone()).collect();
                prop_assert_eq!(got, want);
            }
            let bytes: usize = s.objects.values().map(|o| o.encoded_len()).sum();
            prop_assert_eq!(s.bytes, bytes);
            prop_assert!(s.index.values().all(|objects| !objects.is_empty()), "no empty index entries are kept");
            prop_assert_eq!(s.index.values().map(|objects| objects.len()).sum::<usize>(), s.objects.len());
        }
    }
}
