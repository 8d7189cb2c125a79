//! Preloaded feeds take turns at their initial lists.
//!
//! A kube-apiserver encodes each list kache asks for, and each costs it CPU while a client
//! started at the same moment waits for its own answer. With every preloaded kind and
//! encoding listing at once, a client-go WatchList informer of 30,000 pods started with kache
//! synced 1.31x slower than directly; with only the pods in protobuf listing, 0.93x
//! (BENCHMARKS.md, issue 22). So at start the preloaded feeds list one after another, in
//! the order [`in_turn`] is given: a feed's list goes once the one before it has ended
//! (synced, or failed once, so an upstream that refuses or is down holds nothing up), or
//! after [`TURN_MAX`]. A WatchList that would be sent a feed's loading list does not wait
//! for its turn: [`Feed::release`] starts it at once. A feed started for a client's read is
//! never held.

use super::Feed;
use std::sync::Arc;
use std::time::Duration;

/// The longest one feed's turn lasts: past the upstream's own bound on a LIST (a
/// kube-apiserver's `--request-timeout`, 1 minute) and the longest a list yields to clients.
pub const TURN_MAX: Duration = Duration::from_secs(90);

/// Where a feed stands in the turns.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Turn {
    /// Its list waits for its turn.
    Waiting,
    /// Its list may go.
    Going,
    /// Its first list has ended: synced, or failed.
    Tried,
}

impl Feed {
    /// Keep this feed's list from starting until [`Feed::release`] (before it runs).
    pub fn hold(&self) {
        self.turn.send_replace(Turn::Waiting);
    }

    /// Let this feed's list go, if it was held.
    pub fn release(&self) {
        self.turn.send_if_modified(|t| {
            let held = *t == Turn::Waiting;
            if held {
                *t = Turn::Going;
            }
            held
        });
    }

    /// Wait until the feed may list.
    pub(super) async fn my_turn(&self) {
        let _ = self.turn.subscribe().wait_for(|t| *t != Turn::Waiting).await;
    }

    /// Its first list has ended, one way or the other.
    pub(super) fn tried(&self) {
        self.turn.send_replace(Turn::Tried);
    }
}

/// Release `feeds` one after another, each once the one before it has tried its list (or
/// [`TURN_MAX`] has passed).
pub async fn in_turn(feeds: Vec<Arc<Feed>>) {
    for f in feeds {
        f.release();
        let mut turn = f.turn.subscribe();
        if tokio::time::timeout(TURN_MAX, turn.wait_for(|t| *t == Turn::Tried)).await.is_err() {
            let r = &f.cache.resource;
            tracing::info!(resource = %r.plural, fmt = ?f.fmt, "a preloaded list took its longest turn; the next goes");
        }
    }
}
