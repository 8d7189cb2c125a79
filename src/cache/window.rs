//! The sliding window of recent events of one kind. A watch resumes from it; an RV older
//! than the window's floor gets 410 Expired. Each event keeps the previous object state so
//! filtered watches can turn selector transitions into ADDED/DELETED.

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

/// Events after `floor`, oldest first, at most `cap` of them.
#[derive(Debug, Clone, Default)]
pub struct Window {
    events: imbl::Vector<Arc<Event>>,
    floor: u64,
    cap: usize,
}

impl Window {
    /// An empty window whose history starts after `floor`.
    pub fn new(floor: u64, cap: usize) -> Self {
        Window { events: imbl::Vector::new(), floor, cap: cap.max(1) }
    }

    /// Append an event (its RV must exceed every held one), dropping the oldest beyond `cap`.
    pub fn push(&mut self, ev: Arc<Event>) {
        self.events.push_back(ev);
        while self.events.len() > self.cap {
            if let Some(old) = self.events.pop_front() {
                self.floor = old.rv;
            }
        }
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
}
