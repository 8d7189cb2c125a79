//! Admission: what one client may have of kache at once, decided before the work is done.
//! `limit` holds the places of reads in flight, of requests passed through and of watches
//! (per flow and over all) and bounds a flow's queued watch bytes; `fair` queues a client's
//! large answers behind its own; and per-client rates ([`crate::rate`]) pace consistent
//! reads that need a proof, watch starts that need one, and the bytes of consistent reads
//! passed to the upstream as the cheaper way.

pub mod fair;
pub mod limit;

use super::ServeSettings;
use crate::rate::Buckets;
use limit::{Inflight, InflightLimits, WatchFlows};
use std::sync::atomic::{AtomicUsize, Ordering};

/// Every bound on what one client may hold or start, as [`ServeSettings`] sets them.
pub(crate) struct Admission {
    /// Cached reads in flight, per flow and over all.
    pub(crate) inflight: Inflight,
    /// Pass-through requests in flight, per client.
    pub(crate) passthrough: Inflight,
    /// Watches open (cached or passed through), per client.
    pub(crate) watches: Inflight,
    /// Every client's large answers being sent.
    pub(crate) large: fair::Large,
    /// Each flow's bound on its watches' queued bytes.
    pub(crate) watch_flows: WatchFlows,
    /// Each client's budget of consistent reads passed to the upstream as the cheaper way.
    pub(crate) cheaper_upstream: Buckets<String>,
    /// Each client's budget of watch starts that need a consistency proof.
    pub(crate) watch_starts: Buckets<String>,
    /// Each client's budget of consistent reads that need a proof.
    consistent_reads: Buckets<String>,
    /// Consistent reads waiting for their client's turn now.
    consistent_queued: AtomicUsize,
}

impl Admission {
    pub(crate) fn new(settings: &ServeSettings) -> Admission {
        let starts = settings.watch_starts_per_client;
        let reads = settings.consistent_reads_per_client;
        Admission {
            inflight: Inflight::new(settings.inflight),
            passthrough: Inflight::new(InflightLimits { global: 0, per_user: settings.passthrough_per_client }),
            watches: Inflight::new(InflightLimits { global: 0, per_user: settings.watches_per_client }),
            large: fair::Large::new(settings.large_per_client),
            watch_flows: WatchFlows::new(settings.watch_buffers_per_user),
            cheaper_upstream: Buckets::new(settings.cheaper_upstream_bytes_per_client, "max-cheaper-upstream-bytes-per-client"),
            watch_starts: Buckets::with_burst(starts, starts.saturating_mul(10), "max-watch-starts-per-client"),
            consistent_reads: Buckets::with_burst(reads, reads.saturating_mul(10), "max-consistent-reads-per-client"),
            consistent_queued: AtomicUsize::new(0),
        }
    }

    /// Wait for `client`'s turn to have a consistent read proven: at once within its budget
    /// (`--max-consistent-reads-per-client`), past it when the rate has paid for the read.
    /// Each proof is a request to the apiserver (`Feed::upstream_rv`, or a check) that
    /// concurrent readers of a kind share but a loop of reads does not.
    pub(crate) async fn queue_for_proof(&self, client: &str) {
        let wait = self.consistent_reads.queue(&client.to_string());
        if !wait.is_zero() {
            self.consistent_queued.fetch_add(1, Ordering::Relaxed);
            let _counted = WaitingRead(&self.consistent_queued);
            tokio::time::sleep(wait).await;
        }
    }

    /// Consistent reads queued now for their client's turn.
    pub(crate) fn consistent_reads_queued(&self) -> usize {
        self.consistent_queued.load(Ordering::Relaxed)
    }
}

/// One read counted among the queued until it is dropped (its wait over or cancelled).
struct WaitingRead<'a>(&'a AtomicUsize);

impl Drop for WaitingRead<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::Relaxed);
    }
}
