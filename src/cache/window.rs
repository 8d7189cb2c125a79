//! The sliding window of recent events of one kind. A watch resumes from it; an RV older
//! than the window's floor gets 410 Expired. Each event keeps the previous object state so
//! filtered watches can turn selector transitions into ADDED/DELETED. The window is bounded
//! by a count of events and by the bytes of the object versions they hold, whichever is
//! reached first (always keeping the newest event), so large objects changing fast cannot
//! make it hold gigabytes.

use crate::cache::object::Object;
use std::sync::Arc;

/// Watch event type.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EventType {
    /// Object created (or entered a selector).
    Added = 0,
    /// Object changed.
    Modified,
    /// Object deleted (or left a selector).
    Deleted,
}

impl EventType {
    /// The wire name (`ADDED`, ...).
    pub fn as_str(self) -> &'static str {
        match self {
            EventType::Added => "ADDED",
            EventType::Modified => "MODIFIED",
            EventType::Deleted => "DELETED",
        }
    }
}

/// One change of one object.
#[derive(Debug, Clone)]
pub struct Event {
    /// The RV of the change (the object's RV; for deletes, the delete's RV).
    pub rv: u64,
    /// What happened.
    pub kind: EventType,
    /// The object after the change (for a delete: its last state at the delete's RV).
    pub object: Arc<Object>,
    /// The object before the change, if it existed.
    pub prev: Option<Arc<Object>>,
    /// `prev` at this event's RV, present when the change altered labels or selectable
    /// fields: what a filtered watch sends as DELETED when the object leaves its selector.
    pub prev_at_rv: Option<Arc<Object>>,
    /// When the change was applied here.
    pub at: std::time::Instant,
}

/// Why a window cannot serve a resume point.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TooOld {
    /// The oldest RV a watch can resume from.
    pub oldest: u64,
}

impl Event {
    /// The bytes this event keeps alive beyond the current state: the object version it
    /// carries (superseded by the next change of the object), and the previous state at this
    /// RV when it has one. `prev` is not counted: it is the object of an earlier event (or
    /// of the state the cache listed) and counted there.
    pub fn held_bytes(&self) -> usize {
        self.object.encoded_len() + self.prev_at_rv.as_ref().map_or(0, |p| p.encoded_len())
    }
}

/// Events after `floor`, oldest first, at most `cap` of them and at most `max_bytes` of
/// their [`Event::held_bytes`] (the newest event is kept whatever its size).
#[derive(Debug, Clone, Default)]
pub struct Window {
    events: imbl::Vector<Arc<Event>>,
    floor: u64,
    cap: usize,
    bytes: usize,
    max_bytes: usize,
}

impl Window {
    /// An empty window whose history starts after `floor`, bounded by `cap` events only.
    pub fn new(floor: u64, cap: usize) -> Self {
        Window { events: imbl::Vector::new(), floor, cap: cap.max(1), bytes: 0, max_bytes: usize::MAX }
    }

    /// Bound the window by `max_bytes` of held object bytes as well (0: no byte bound).
    pub fn set_max_bytes(&mut self, max_bytes: usize) {
        self.max_bytes = if max_bytes == 0 { usize::MAX } else { max_bytes };
        self.trim();
    }

    /// Append an event (its RV must exceed every held one), dropping the oldest beyond `cap`
    /// events or `max_bytes`.
    pub fn push(&mut self, ev: Arc<Event>) {
        self.bytes += ev.held_bytes();
        self.events.push_back(ev);
        self.trim();
    }

    fn trim(&mut self) {
        while self.events.len() > self.cap || (self.bytes > self.max_bytes && self.events.len() > 1) {
            match self.events.pop_front() {
                Some(old) => {
                    self.floor = old.rv;
                    self.bytes -= old.held_bytes();
                }
                None => break,
            }
        }
    }

    /// When the newest event held was applied.
    pub fn newest_at(&self) -> Option<std::time::Instant> {
        self.events.back().map(|e| e.at)
    }

    /// The [`Event::held_bytes`] of the events held.
    pub fn bytes(&self) -> usize {
        self.bytes
    }

    /// The oldest RV a watch can resume from.
    pub fn floor(&self) -> u64 {
        self.floor
    }

    /// Time between the oldest and the newest event held.
    pub fn span(&self) -> std::time::Duration {
        match (self.events.front(), self.events.back()) {
            (Some(a), Some(b)) => b.at.saturating_duration_since(a.at),
            _ => std::time::Duration::ZERO,
        }
    }

    /// Number of events held.
    pub fn len(&self) -> usize {
        self.events.len()
    }

    /// Whether no event is held.
    pub fn is_empty(&self) -> bool {
        self.events.is_empty()
    }

    /// Every held event with an RV above `rv`, or [`TooOld`] if events after `rv` were dropped.
    pub fn since(&self, rv: u64) -> Result<impl Iterator<Item = &Arc<Event>> + '_, TooOld> {
        if rv < self.floor {
            return Err(TooOld { oldest: self.floor });
        }
        // Binary search for the first event above rv.
        let (mut lo, mut hi) = (0, self.events.len());
        while lo < hi {
            let mid = (lo + hi) / 2;
            if self.events[mid].rv <= rv {
                lo = mid + 1;
            } else {
                hi = mid;
            }
        }
        Ok(self.events.iter().skip(lo))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn ev(rv: u64) -> Arc<Event> {
        let o = Object::bare("k".into(), rv);
        Arc::new(Event { rv, kind: EventType::Modified, object: Arc::new(o), prev: None, prev_at_rv: None, at: std::time::Instant::now() })
    }

    proptest! {
        #[test]
        fn since_returns_exactly_the_later_events_or_too_old(
            gaps in proptest::collection::vec(1u64..5, 0..60), cap in 1usize..20, start in 0u64..20, ask in 0u64..300
        ) {
            let mut w = Window::new(start, cap);
            let mut all = Vec::new();
            let mut rv = start;
            for g in gaps {
                rv += g;
                all.push(rv);
                w.push(ev(rv));
            }
            let kept: Vec<u64> = all.iter().rev().take(cap).rev().copied().collect();
            let floor = if all.len() > cap { all[all.len() - cap - 1] } else { start };
            let result = w.since(ask).map(|it| it.map(|e| e.rv).collect::<Vec<u64>>());
            match result {
                Ok(got) => {
                    prop_assert!(ask >= floor);
                    let want: Vec<u64> = kept.iter().copied().filter(|r| *r > ask).collect();
                    prop_assert_eq!(got, want);
                }
                Err(TooOld { oldest }) => {
                    prop_assert!(ask < floor);
                    prop_assert_eq!(oldest, floor);
                }
            }
        }
    }

    #[test]
    fn bounded_by_bytes_as_well_as_count() {
        let sized = |rv: u64, len: usize| {
            let mut o = Object::bare("k".into(), rv);
            o.json = Some(bytes::Bytes::from(vec![b' '; len]));
            Arc::new(Event {
                rv,
                kind: EventType::Modified,
                object: Arc::new(o),
                prev: None,
                prev_at_rv: None,
                at: std::time::Instant::now(),
            })
        };
        let mut w = Window::new(0, 100);
        w.set_max_bytes(10_000);
        for rv in 1..=50 {
            w.push(sized(rv, 1_000));
        }
        // 10 events of 1,000 bytes fit; the count bound (100) is not what limits it.
        assert_eq!(w.len(), 10);
        assert!(w.bytes() <= 10_000, "{}", w.bytes());
        assert_eq!(w.floor(), 40);
        assert!(w.since(39).is_err(), "older resume points are too old");
        assert_eq!(w.since(40).unwrap().map(|e| e.rv).collect::<Vec<_>>(), (41..=50).collect::<Vec<_>>());
        // An event larger than the bound is kept alone: a watch can still resume before it.
        w.push(sized(51, 50_000));
        assert_eq!((w.len(), w.floor()), (1, 50));
        // The count bound still applies under the byte bound.
        let mut c = Window::new(0, 3);
        c.set_max_bytes(1 << 30);
        for rv in 1..=10 {
            c.push(sized(rv, 10));
        }
        assert_eq!((c.len(), c.bytes()), (3, 3 * c.since(7).unwrap().next().unwrap().held_bytes()));
    }
}
