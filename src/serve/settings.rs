//! What `kache serve` sets for the serving cache (`app` builds it from the flags).

use super::admission::limit::InflightLimits;
use super::compress;
use super::handler::WatchSettings;
use crate::api::media::Format;
use crate::auth::Security;
use crate::cache::Limits;
use std::sync::Arc;
use std::time::Duration;

/// Settings of the serving cache.
#[derive(Debug, Clone)]
pub struct ServeSettings {
    /// Buffer sizes of every cache.
    pub limits: Limits,
    /// Watch timing.
    pub watch: WatchSettings,
    /// How long a consistent read waits for the cache to reach the upstream's RV before it
    /// is passed through instead.
    pub consistent_wait: Duration,
    /// Resources (plural names, optionally `plural.group`) to load at start.
    pub preload: Vec<String>,
    /// Encodings to load preloaded resources in.
    pub preload_formats: Vec<Format>,
    /// Authentication and authorization of clients; `None` serves everyone with kache's own
    /// rights (tests and the demo on loopback only).
    pub security: Option<Arc<Security>>,
    /// Caps on cached reads in flight.
    pub inflight: InflightLimits,
    /// Longest request URI (path and query) accepted.
    pub max_uri_bytes: usize,
    /// Requests one client may have passed through at once (0: no bound).
    pub passthrough_per_client: usize,
    /// Watches one client may have open at once, cached or passed through (0: no bound).
    pub watches_per_client: usize,
    /// How long reads are served from a cache whose informer cannot reach the upstream.
    pub serve_stale: Duration,
    /// `--consistent-passthrough-factor`: how the cost rule weighs the upstream.
    pub passthrough_factor: f64,
    /// `--cheaper-upstream-reads check`: a consistent LIST the cost rule sends to the
    /// upstream is checked against its metadata first (see `check`).
    pub check_cheaper_reads: bool,
    /// `--revision-ledger on`: a consistent LIST is first proven by the revision ledger
    /// (`upstream::ledger`).
    pub revision_ledger: bool,
    /// The bound on answers being indented (`pretty`) or gzip-compressed at once (past it
    /// they go out as they are), and the lane their jobs run in.
    pub encodes: compress::Encodes,
    /// Large answers from memory one client may have being sent at once (0: no bound); past
    /// it they wait for one of the client's own (see [`fair`]).
    pub large_per_client: usize,
    /// Bytes a second of consistent reads one client may have passed to the upstream as the
    /// cheaper way (0: no bound); past them they are proven and answered from memory.
    pub cheaper_upstream_bytes_per_client: u64,
    /// Watches a second one client may start from no resourceVersion (0: no bound), ten
    /// seconds' worth at once; past it 429.
    pub watch_starts_per_client: u64,
    /// Consistent reads a second one client may have proven (0: no bound), ten seconds'
    /// worth at once; past it they queue.
    pub consistent_reads_per_client: u64,
    /// Log one line per request (target `kache::access`): who, what, answered by whom.
    pub access_log: bool,
    /// Bytes the watches of one flow (`limit::flow`) may have queued together (0: no bound).
    pub watch_buffers_per_user: usize,
    /// Where and how often the caches' states are saved (`--state-dir`), if they are.
    pub state: Option<super::StateSettings>,
}
