//! kache's own lists yield to the clients it passes through because it has not synced.
//!
//! When kache starts (or a kind's cache is first asked for), a client that reads a kind's
//! whole state before the cache has synced is passed through (`not_synced`): the upstream
//! answers it. Meanwhile kache lists that kind and others for itself, and the lists share
//! the upstream's encoders and the machine's cores with the client's, so an informer
//! started with kache would sync slower than directly. So while such a passed-through
//! answer streams a state (at least [`BUSY_BYTES`] within [`WINDOW`], 4 MiB/s: a list or a
//! WatchList's initial events, not a watch's trickle of changes), every list still loading
//! waits before its next page, at most [`MAX_YIELD`] per list: the client gets what it
//! would directly, and kache's lists go on once the client has its state.

use crate::body::Body;
use http_body_util::BodyExt;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;
use tokio::time::Instant;

/// Bytes a passed-through answer carries within [`WINDOW`] to count as streaming a state.
pub const BUSY_BYTES: u64 = 1 << 20;
/// The window [`BUSY_BYTES`] is counted in; one busy window holds the list for it and
/// [`DIGEST`] more.
pub const WINDOW: Duration = Duration::from_millis(250);
/// How much longer a list waits after a client's last busy window: the client still decodes
/// what its socket and HTTP/2 window hold (megabytes) and then stores the state, and a list
/// of kache's started sooner would share the cores with that work.
pub const DIGEST: Duration = Duration::from_secs(1);
/// The longest a list yields in all (many clients streaming in turn cannot keep a cache
/// from syncing).
pub const MAX_YIELD: Duration = Duration::from_secs(20);

/// Until when a feed's list yields: passed-through answers of its kind push it on.
#[derive(Debug)]
pub struct Yield {
    base: Instant,
    /// Milliseconds after `base` until which the list waits.
    busy_until: AtomicU64,
}

impl Default for Yield {
    fn default() -> Self {
        Yield { base: Instant::now(), busy_until: AtomicU64::new(0) }
    }
}

impl Yield {
    /// Keep the list waiting until at least `until`.
    pub fn hold_until(&self, until: Instant) {
        let ms = until.saturating_duration_since(self.base).as_millis() as u64;
        self.busy_until.fetch_max(ms, Ordering::Relaxed);
    }

    /// The instant the list may go on, if it is still ahead.
    fn until(&self) -> Option<Instant> {
        let until = self.base + Duration::from_millis(self.busy_until.load(Ordering::Relaxed));
        (until > Instant::now()).then_some(until)
    }

    /// Wait while a client streams, spending at most `budget` (what is left of it stays
    /// in `budget`); whether it waited at all.
    pub async fn wait(&self, budget: &mut Duration) -> bool {
        let mut waited = false;
        while let Some(until) = self.until() {
            if budget.is_zero() {
                break;
            }
            let now = Instant::now();
            let step = (until - now).min(*budget);
            tokio::time::sleep(step).await;
            *budget = budget.saturating_sub(step);
            waited = true;
        }
        waited
    }
}

/// `body` (a passed-through answer), holding the [`Yield`]s of the lists still loading while
/// it streams at least [`BUSY_BYTES`] per [`WINDOW`].
pub fn streaming(body: Body, yields: Vec<Arc<Yield>>) -> Body {
    let mut meter = Meter { yields, window: Instant::now(), bytes: 0 };
    body.map_frame(move |frame| {
        if let Some(data) = frame.data_ref() {
            meter.count(bytes::Buf::remaining(data));
        }
        frame
    })
    .boxed_unsync()
}

/// The bytes a body carried in its current [`WINDOW`].
struct Meter {
    yields: Vec<Arc<Yield>>,
    window: Instant,
    bytes: u64,
}

impl Meter {
    fn count(&mut self, n: usize) {
        let now = Instant::now();
        if now.duration_since(self.window) >= WINDOW {
            self.window = now;
            self.bytes = 0;
        }
        self.bytes += n as u64;
        if self.bytes >= BUSY_BYTES {
            for y in &self.yields {
                y.hold_until(now + WINDOW + DIGEST);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::body::{BoxError, Chunk};
    use http_body::Frame;

    fn body_of(frames: Vec<usize>) -> crate::body::Body {
        let frames = frames.into_iter().map(|n| Ok::<_, BoxError>(Frame::data(Chunk::One(bytes::Bytes::from(vec![b'x'; n])))));
        http_body_util::StreamBody::new(futures_util::stream::iter(frames)).boxed_unsync()
    }

    #[tokio::test(start_paused = true)]
    async fn a_streaming_state_holds_the_list_and_a_trickle_does_not() {
        let y = Arc::new(Yield::default());
        // 64 KiB frames: a state streaming; the list waits for a window after the last one,
        // and for the client to digest it.
        let mut b = streaming(body_of(vec![64 << 10; 20]), vec![y.clone()]);
        while b.frame().await.is_some() {}
        let start = Instant::now();
        let mut budget = MAX_YIELD;
        assert!(y.wait(&mut budget).await, "the list waited");
        assert_eq!(Instant::now() - start, WINDOW + DIGEST);
        assert_eq!(budget, MAX_YIELD - WINDOW - DIGEST);
        assert!(!y.wait(&mut budget).await, "nothing streams now");
        // A watch's changes, 8 KB at a time with time between them, hold nothing.
        let trickle = Arc::new(Yield::default());
        let mut b = streaming(body_of(vec![8 << 10; 10]), vec![trickle.clone()]);
        while b.frame().await.is_some() {
            tokio::time::advance(Duration::from_millis(100)).await;
        }
        assert!(!trickle.wait(&mut budget).await);
    }

    #[tokio::test(start_paused = true)]
    async fn a_list_yields_no_longer_than_its_budget() {
        let y = Yield::default();
        y.hold_until(Instant::now() + Duration::from_secs(3600));
        let start = Instant::now();
        let mut budget = MAX_YIELD;
        assert!(y.wait(&mut budget).await);
        assert_eq!(Instant::now() - start, MAX_YIELD, "the budget bounds it");
        assert!(budget.is_zero());
        assert!(!y.wait(&mut budget).await, "a spent budget waits no more");
    }
}
