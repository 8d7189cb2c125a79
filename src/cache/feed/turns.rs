//! Preloaded feeds take turns at their initial lists.
//!
//! A kube-apiserver encodes each list kache asks for, and each costs it CPU while a client
//! started at the same moment waits for its own answer. With every preloaded kind and
//! encoding listing at once, a client-go informer started with kache syncs slower than
//! directly; with one list at a time, about as fast. So at start the preloaded feeds list
//! one after another, in the order [`in_turn`] is given: a feed's list goes once the one
//! before it has ended (synced, or failed once, so an upstream that refuses or is down
//! holds nothing up), or after [`TURN_MAX`], and no client passed through or sent a list as
//! it loads is still streaming its state (at most [`yielding::MAX_YIELD`]: see
//! [`yielding`]). A WatchList that would be sent a feed's loading list does not wait for
//! its turn: [`Feed::release`] starts it at once. A feed started for a client's read is
//! never held.

use super::{yielding, Feed};
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

/// Release `feeds` one after another, each once the one before it has tried its list (or
/// [`TURN_MAX`] has passed) and the clients streaming a state have it.
pub async fn in_turn(feeds: Vec<Arc<Feed>>) {
    for f in feeds {
        let mut budget = yielding::MAX_YIELD;
        let waited = f.yields.wait(&mut budget).await;
        tracing::debug!(resource = %f.cache.resource.plural, fmt = ?f.fmt, waited, "a preloaded list's turn");
        f.release();
        let mut turn = f.initial.turns();
        if tokio::time::timeout(TURN_MAX, turn.wait_for(|t| *t == Turn::Tried)).await.is_err() {
            let r = &f.cache.resource;
            tracing::info!(resource = %r.plural, fmt = ?f.fmt, "a preloaded list took its longest turn; the next goes");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::media::Format;
    use crate::cache::KindCache;
    use tokio::time::Instant;

    fn held(plural: &str) -> Arc<Feed> {
        let r = crate::sim::catalog::resource(plural);
        let up = crate::app::plain_upstream("http://127.0.0.1:9").unwrap();
        let feed = Feed::new(Arc::new(KindCache::new(Arc::new(r), 0, Default::default())), Format::Json, up);
        feed.hold();
        feed
    }

    fn turn(f: &Feed) -> Turn {
        f.initial.turn()
    }

    #[tokio::test(start_paused = true)]
    async fn each_list_goes_when_the_one_before_has_tried_and_no_client_streams_a_state() {
        let (pods, nodes, services) = (held("pods"), held("nodes"), held("services"));
        tokio::spawn(in_turn(vec![pods.clone(), nodes.clone(), services.clone()]));
        tokio::task::yield_now().await;
        assert_eq!((turn(&pods), turn(&nodes), turn(&services)), (Turn::Going, Turn::Waiting, Turn::Waiting));
        // A client streams a state until 3 s from now: the nodes wait for it too.
        let start = Instant::now();
        nodes.yields().hold_until(start + Duration::from_secs(3));
        pods.initial.tried();
        tokio::time::sleep(Duration::from_secs(2)).await;
        assert_eq!(turn(&nodes), Turn::Waiting, "a client still streams");
        let mut going = nodes.initial.turns();
        going.wait_for(|t| *t == Turn::Going).await.unwrap();
        assert_eq!(Instant::now() - start, Duration::from_secs(3));
        // A client's WatchList releases the services out of turn; a release does not undo a try.
        services.release();
        assert_eq!(turn(&services), Turn::Going);
        services.initial.tried();
        services.release();
        assert_eq!(turn(&services), Turn::Tried);
        // A list that never ends holds the next no longer than its longest turn.
        let after = held("namespaces");
        tokio::spawn(in_turn(vec![held("configmaps"), after.clone()]));
        tokio::time::sleep(TURN_MAX - Duration::from_millis(1)).await;
        assert_eq!(turn(&after), Turn::Waiting);
        tokio::time::sleep(Duration::from_millis(2)).await;
        assert_eq!(turn(&after), Turn::Going);
    }
}
