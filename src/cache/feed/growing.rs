//! The initial list's objects as they arrive, so that a WatchList that comes while the
//! cache is still loading is sent the state as kache reads it, instead of being passed
//! through: the upstream then encodes the kind's state once, for kache, not twice (once for
//! kache's list and once for the client's WatchList), and the client takes in the first
//! objects while the rest are on their way (`serve::handler::watch_growing`).
//!
//! Each attempt at the initial list has its own [`Growing`]: objects are appended as the
//! list brings them, and it ends [`End::Installed`] once the cache holds the whole list (the cache then
//! follows the upstream from the list's RV), or [`End::Failed`] when the attempt failed or
//! another replaced it (a reader then ends its stream without the initial-events-end
//! bookmark, and its client starts its WatchList again).

use crate::cache::object::Object;
use std::sync::{Arc, Mutex};
use std::time::Instant;
use tokio::sync::watch;

/// How an attempt at the initial list ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum End {
    /// The cache holds the list, at this resourceVersion.
    Installed(u64),
    /// The attempt failed, or another replaced it.
    Failed,
}

/// What a reader gets next.
#[derive(Debug)]
pub enum Next {
    /// Objects it has not read yet, in the list's order.
    Objects(Vec<Arc<Object>>),
    /// The list ended (every object has been read).
    End(End),
}

/// One attempt at a kind's initial list, as its objects arrive.
#[derive(Debug)]
pub struct Growing {
    /// When the attempt asked for the list: a reader that arrived before it needs
    /// no other proof that the list's state is at least as new as its arrival.
    pub started: Instant,
    grown: Mutex<Grown>,
    /// Bumped on every change, for readers waiting for one.
    changed: watch::Sender<u64>,
}

#[derive(Debug, Default)]
struct Grown {
    objects: Vec<Arc<Object>>,
    end: Option<End>,
}

impl Growing {
    /// An attempt starting now, with no object yet.
    pub fn new() -> Growing {
        Growing { started: Instant::now(), grown: Mutex::default(), changed: watch::Sender::new(0) }
    }

    fn grown(&self) -> std::sync::MutexGuard<'_, Grown> {
        self.grown.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Append objects the list brought (nothing once the attempt has ended).
    pub fn push(&self, page: impl IntoIterator<Item = Object>) {
        let mut g = self.grown();
        if g.end.is_none() {
            g.objects.extend(page.into_iter().map(Arc::new));
            drop(g);
            self.changed.send_modify(|n| *n += 1);
        }
    }

    /// End the attempt (the first end stands).
    pub fn finish(&self, end: End) {
        let mut g = self.grown();
        if g.end.is_none() {
            g.end = Some(end);
            drop(g);
            self.changed.send_modify(|n| *n += 1);
        }
    }

    /// Whether the attempt has ended.
    pub fn ended(&self) -> bool {
        self.grown().end.is_some()
    }

    /// The objects from the `from`th on, waiting for some when there are none yet; the end
    /// once they have all been read.
    pub async fn next(&self, from: usize) -> Next {
        let mut rx = self.changed.subscribe();
        loop {
            {
                let g = self.grown();
                if g.objects.len() > from {
                    return Next::Objects(g.objects[from..].to_vec());
                }
                if let Some(end) = g.end {
                    return Next::End(end);
                }
            }
            // The sender lives as long as `self`.
            let _ = rx.changed().await;
        }
    }
}

impl Default for Growing {
    fn default() -> Self {
        Growing::new()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cache::object::Object;

    fn obj(name: &str) -> Object {
        let pods = crate::sim::catalog::resource("pods");
        let v = serde_json::json!({"metadata": {"name": name, "namespace": "ns", "resourceVersion": "1"}});
        Object::new(&pods, &v, Some(&crate::cache::object::item_json(&v)), None).unwrap()
    }

    fn names(n: Next) -> Vec<String> {
        match n {
            Next::Objects(v) => v.iter().map(|o| o.name().to_string()).collect(),
            Next::End(e) => panic!("ended: {e:?}"),
        }
    }

    #[tokio::test]
    async fn a_reader_gets_each_page_once_in_order_then_the_end() {
        let g = Arc::new(Growing::new());
        g.push([obj("a"), obj("b")]);
        assert_eq!(names(g.next(0).await), ["a", "b"]);
        // Nothing new yet: the reader waits for the next page.
        let reader = {
            let g = g.clone();
            tokio::spawn(async move { names(g.next(2).await) })
        };
        g.push([obj("c")]);
        assert_eq!(reader.await.unwrap(), ["c"]);
        g.finish(End::Installed(7));
        assert!(matches!(g.next(3).await, Next::End(End::Installed(7))));
        // Objects not read yet come before the end.
        assert_eq!(names(g.next(1).await), ["b", "c"]);
    }

    #[tokio::test]
    async fn the_first_end_stands_and_nothing_is_appended_after_it() {
        let g = Growing::new();
        g.push([obj("a")]);
        g.finish(End::Failed);
        g.finish(End::Installed(9));
        g.push([obj("b")]);
        assert!(g.ended());
        assert_eq!(names(g.next(0).await), ["a"]);
        assert!(matches!(g.next(1).await, Next::End(End::Failed)));
    }
}
