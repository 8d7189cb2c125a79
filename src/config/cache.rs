//! `kache serve`'s cache settings, shared with `kache demo`: what is cached, how fresh a
//! read must be, the upstream's deadlines and what one client may ask of it.

use super::value::{bytes, bytes_text, bytes_usize, millis, millis_text, non_negative, seconds, seconds_text};
use super::{at_least, at_least_seconds, heading, ConfigError};
use crate::api::media::Format;
use clap::Args;

/// `--cheaper-upstream-reads`: what becomes of a consistent LIST the upstream answers
/// sooner than a freshness proof would come.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum CheaperReads {
    /// Checked against the upstream's metadata, and answered from memory when current.
    Check,
    /// Passed through to the upstream.
    PassThrough,
}

/// `--revision-ledger`: whether consistent reads may be proven by other resources' writes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum RevisionLedger {
    /// Proven by the ledger when every revision since the cache's proof was another
    /// resource's write.
    On,
    /// Proven only by bookmarks and checks.
    Off,
}

/// Settings of the cache kache serves from.
#[derive(Debug, Clone, Args)]
pub struct CacheArgs {
    /// Resources to load at start (plural names, or `plural.group`).
    ///
    /// Others load on their first request. They are listed one at a time, in this order,
    /// each in protobuf before JSON; a WatchList of one still waiting starts its list at once.
    #[arg(
        long,
        env = "KACHE_PRELOAD",
        value_delimiter = ',',
        default_value = "pods,nodes,namespaces,services,configmaps",
        value_name = "RESOURCES",
        help_heading = heading::CACHING
    )]
    pub preload: Vec<String>,
    /// Encodings to load preloaded resources in (protobuf only where the kind has it).
    #[arg(
        long,
        env = "KACHE_PRELOAD_ENCODINGS",
        value_delimiter = ',',
        value_enum,
        default_value = "json,protobuf",
        value_name = "ENCODINGS",
        help_heading = heading::CACHING
    )]
    pub preload_encodings: Vec<Format>,
    /// Events each cache keeps for watches to resume from.
    #[arg(
        id = "cache_window_events",
        long = "cache-window-events",
        env = "KACHE_CACHE_WINDOW_EVENTS",
        default_value_t = 10_000,
        value_name = "N",
        help_heading = heading::CACHING
    )]
    pub window_events: usize,
    /// Bytes of past object versions each cache keeps for watches to resume from.
    ///
    /// The window holds the events' objects, which the current state no longer holds; the
    /// oldest events go first when this or --cache-window-events is reached. With 16 KB
    /// objects changing fast the window keeps about 2,000 changes at the default; 0 for no
    /// byte bound.
    #[arg(
        id = "cache_window_bytes",
        long = "cache-window-size",
        alias = "cache-window-bytes",
        env = "KACHE_CACHE_WINDOW_BYTES",
        value_parser = bytes_usize,
        default_value = bytes_text(crate::cache::DEFAULT_WINDOW_BYTES as u64),
        value_name = "SIZE",
        help_heading = heading::CACHING
    )]
    pub window_bytes: usize,
    /// Past snapshots each cache keeps for continue tokens and exact-RV lists.
    #[arg(long, env = "KACHE_SNAPSHOT_HISTORY", default_value_t = 1024, value_name = "N", help_heading = heading::CACHING)]
    pub snapshot_history: usize,
    /// Changes a watcher may fall behind before it is ended (its client then resumes).
    ///
    /// At most 128 for a watch of one node's pods and 1,024 for a watch of one namespace
    /// (each its own ring, woken only by its changes).
    #[arg(long, env = "KACHE_WATCHER_LAG", default_value_t = 8192, value_name = "N", help_heading = heading::CACHING)]
    pub watcher_lag: usize,
    /// Bytes of Table cells (`kubectl get` rows) kept per object version.
    ///
    /// A custom resource's printer columns can print whole parts of the object once per
    /// column; cells over this are not kept, and Tables of the kind pass through to the
    /// upstream while such an object is held
    /// (`kache_limit_hits_total{limit="max-table-cell-bytes-per-object"}`).
    #[arg(
        long = "max-table-cell-size-per-object",
        alias = "max-table-cell-bytes-per-object",
        env = "KACHE_MAX_TABLE_CELL_BYTES_PER_OBJECT",
        value_parser = bytes_usize,
        default_value = bytes_text(crate::cache::TABLE_CELL_BYTES as u64),
        value_name = "SIZE",
        help_heading = heading::CACHING
    )]
    pub max_table_cell_bytes_per_object: usize,
    /// How long a read that needs a newer state than the cache has proven waits for a proof.
    ///
    /// Such a read (a consistent read, or a resourceVersion ahead of the cache) waits this
    /// long for a freshness probe before it is passed through. Probes roll while a kind is
    /// read (a bookmark per tick of the apiserver's bookmark timer, about once a second): a
    /// read waits for the next tick, the first of a quiet kind for a whole probe; 0 passes
    /// every such read through. It is also the longest a watch waits for the cache it
    /// starts (a kind's first request) to sync before it is passed through.
    #[arg(
        long = "consistent-wait",
        alias = "consistent-wait-ms",
        env = "KACHE_CONSISTENT_WAIT_MS",
        value_parser = millis,
        default_value = millis_text(3000),
        value_name = "DURATION",
        help_heading = heading::FRESHNESS
    )]
    pub consistent_wait_ms: u64,
    /// How a consistent read weighs the upstream's expected time against a proof's.
    ///
    /// A consistent read (no resourceVersion) is passed through at once when the upstream's
    /// expected time for it (its measured round trip plus the answer's bytes in kache's index
    /// over its measured encode rate) is at most this factor times kache's (the expected wait
    /// for a proof of that kind, measured, plus its own time to send the answer); otherwise it
    /// waits for the proof, no longer than the upstream would take. 1 keeps every read as fast
    /// as going direct; 0 never passes through by cost (every consistent read waits for a
    /// proof, sparing the upstream most); above 1 favours the upstream, below it the cache.
    #[arg(
        long,
        env = "KACHE_CONSISTENT_PASSTHROUGH_FACTOR",
        default_value_t = 1.0,
        value_parser = non_negative,
        value_name = "FACTOR",
        help_heading = heading::FRESHNESS
    )]
    pub consistent_passthrough_factor: f64,
    /// What becomes of a consistent LIST the upstream would answer sooner than a proof.
    ///
    /// `check`: kache asks the upstream for the same page as metadata (protobuf
    /// PartialObjectMetadataList: which objects, at which resourceVersions) and, when its own
    /// page holds the same objects at the same versions, answers from memory at the
    /// upstream's resourceVersion (`kache_consistent_checks_total`); otherwise it passes the
    /// read through. The upstream encodes metadata at a fraction of the CPU of the objects
    /// or their Table. `pass-through`: the read goes to the upstream at once.
    #[arg(
        long,
        env = "KACHE_CHEAPER_UPSTREAM_READS",
        value_enum,
        default_value_t = CheaperReads::Check,
        value_name = "HOW",
        help_heading = heading::FRESHNESS
    )]
    pub cheaper_upstream_reads: CheaperReads,
    /// Prove a consistent LIST current by the revision ledger of other resources' writes.
    ///
    /// etcd gives every write a revision of its own, so when every revision between the
    /// cache's last proof and the upstream's current resourceVersion (a one-key LIST) was a
    /// write kache's watches saw to another resource, the cache is current, with no bookmark
    /// to wait for and no check to send (`kache_consistent_checks_total{outcome="accounted"}`).
    /// It pays off when kache caches the kinds that move the resourceVersion (leases,
    /// configmaps...: `--preload`). A resource joins the ledger once its resourceVersions are
    /// seen to interleave with the other resources' (one etcd); Events never do. `off`:
    /// bookmarks and checks only.
    #[arg(
        long,
        env = "KACHE_REVISION_LEDGER",
        value_enum,
        default_value_t = RevisionLedger::On,
        value_name = "ON_OFF",
        help_heading = heading::FRESHNESS
    )]
    pub revision_ledger: RevisionLedger,
    /// How often watches kache serves get a bookmark.
    #[arg(
        id = "watch_bookmark_interval_seconds",
        long = "watch-bookmark-interval",
        alias = "watch-bookmark-interval-seconds",
        env = "KACHE_WATCH_BOOKMARK_INTERVAL_SECONDS",
        value_parser = seconds,
        default_value = seconds_text(60),
        value_name = "DURATION",
        help_heading = heading::CACHING
    )]
    pub bookmark_interval_seconds: u64,
    /// How long kache's own upstream calls wait for an answer before they are retried.
    ///
    /// Its own calls: access and token reviews, discovery, LISTs, freshness probes, watches.
    /// Each waits this long for the response headers, and for the next bytes of the body;
    /// past it the call fails and is retried.
    #[arg(
        long = "upstream-timeout",
        alias = "upstream-timeout-seconds",
        env = "KACHE_UPSTREAM_TIMEOUT_SECONDS",
        value_parser = seconds,
        default_value = seconds_text(10),
        value_name = "DURATION",
        help_heading = heading::UPSTREAM
    )]
    pub upstream_timeout_seconds: u64,
    /// How long a passed-through request waits for the upstream's response headers.
    ///
    /// Past it the client gets a 504 Timeout Status (the apiserver's own request timeout is
    /// 60 s).
    #[arg(
        long = "passthrough-timeout",
        alias = "passthrough-timeout-seconds",
        env = "KACHE_PASSTHROUGH_TIMEOUT_SECONDS",
        value_parser = seconds,
        default_value = seconds_text(60),
        value_name = "DURATION",
        help_heading = heading::UPSTREAM
    )]
    pub passthrough_timeout_seconds: u64,
    /// How long an informer's upstream watch may be silent before kache reconnects it.
    ///
    /// Silent: bringing neither an event nor a bookmark. kache resumes it from its
    /// resourceVersion. The apiserver sends a bookmark about every 60 s.
    #[arg(
        long = "upstream-watch-idle",
        alias = "upstream-watch-idle-seconds",
        env = "KACHE_UPSTREAM_WATCH_IDLE_SECONDS",
        value_parser = seconds,
        default_value = seconds_text(90),
        value_name = "DURATION",
        help_heading = heading::UPSTREAM
    )]
    pub upstream_watch_idle_seconds: u64,
    /// Requests one client may have passed through to the upstream at once (0: no bound).
    ///
    /// A client is the user who authenticated, not whom it impersonates; an anonymous client
    /// is told by its address, as every client is when clients are not authenticated.
    /// Watches count, and exec, attach and port-forward sessions for as long as they last;
    /// beyond it the client gets 429 with Retry-After. Keeps one client from taking the
    /// upstream's streams from everyone (kache's own calls have connections of their own).
    #[arg(long, env = "KACHE_MAX_PASSTHROUGH_PER_CLIENT", default_value_t = 500, value_name = "N", help_heading = heading::LIMITS)]
    pub max_passthrough_per_client: usize,
    /// Watches one client may have open at once (0: no bound).
    ///
    /// A client as for --max-passthrough-per-client; watches answered from the cache and
    /// passed through alike. Beyond it 429 with Retry-After
    /// (`kache_limit_hits_total{limit="max-watches-per-client"}`). A kube-controller-manager
    /// opens about 100; a load generator or a node-agent fleet under one identity may open
    /// thousands, which the apiserver takes: the default holds 5,000 node agents' watches
    /// and 100 cluster-wide watchers twice over. What watches may buffer is bounded apart
    /// (--max-watch-buffers-size-per-user).
    #[arg(long, env = "KACHE_MAX_WATCHES_PER_CLIENT", default_value_t = 10_000, value_name = "N", help_heading = heading::LIMITS)]
    pub max_watches_per_client: usize,
    /// Answers over 1 MiB one client may have being sent from memory at once (0: no bound).
    ///
    /// A LIST of every pod, pretty, gzip or not; a client as for
    /// --max-passthrough-per-client. More wait, in the order they came, for one of the
    /// client's own to end, so one client's large LISTs cannot take kache's cores from
    /// everyone else's reads. A wait past 15 s is a 429 with Retry-After
    /// (`kache_limit_hits_total{limit="max-large-answers-per-client"}` counts the waits).
    #[arg(
        long,
        env = "KACHE_MAX_LARGE_ANSWERS_PER_CLIENT",
        default_value_t = crate::serve::admission::fair::PER_CLIENT,
        value_name = "N",
        help_heading = heading::LIMITS
    )]
    pub max_large_answers_per_client: usize,
    /// Bytes a second of consistent reads one client may have sent upstream as cheaper (0: no bound).
    ///
    /// Counted by the objects answered, a second's worth at once: reads kache passes to the
    /// apiserver because it answers them sooner than kache's freshness proof
    /// (`kache_passthrough_total{reason="cheaper_upstream"}`). Past them such a read waits
    /// for the proof and is answered from memory, so one client's loop of consistent reads
    /// costs the apiserver kache's proofs, not its own answers
    /// (`kache_limit_hits_total{limit="max-cheaper-upstream-bytes-per-client"}`).
    #[arg(
        long = "max-cheaper-upstream-rate-per-client",
        alias = "max-cheaper-upstream-bytes-per-client",
        env = "KACHE_MAX_CHEAPER_UPSTREAM_BYTES_PER_CLIENT",
        value_parser = bytes,
        default_value = bytes_text(8 << 20),
        value_name = "SIZE",
        help_heading = heading::LIMITS
    )]
    pub max_cheaper_upstream_bytes_per_client: u64,
    /// Watches a second one client may start from no resourceVersion (0: no bound).
    ///
    /// A WatchList, as client-go's informers start, or a legacy watch; ten seconds' worth at
    /// once; a client as for --max-passthrough-per-client. Each needs a consistency proof, a
    /// request to the apiserver (shared by the watches and consistent reads of a kind that
    /// arrive while one is on its way), so a client that starts watches in a loop would have
    /// kache ask the apiserver as often. A kube-controller-manager starts about 100 at once
    /// (each informer's first WatchList). Past it 429 with Retry-After, as from the
    /// apiserver's priority and fairness
    /// (`kache_limit_hits_total{limit="max-watch-starts-per-client"}`). A watch from a
    /// resourceVersion (an informer's every restart) is not counted.
    #[arg(long, env = "KACHE_MAX_WATCH_STARTS_PER_CLIENT", default_value_t = 20, value_name = "N", help_heading = heading::LIMITS)]
    pub max_watch_starts_per_client: u64,
    /// Consistent reads a second one client may have kache prove (0: no bound).
    ///
    /// LISTs, and GETs kache answers from memory; ten seconds' worth at once. Each proof
    /// costs the apiserver a request (its current resourceVersion, or a check of the page),
    /// shared only with the reads of the kind that arrive while it is on its way, so a client
    /// reading in a loop would have kache ask the apiserver as often. Past it the client's
    /// reads queue, each answered when the rate has paid for it, as the apiserver's priority
    /// and fairness queues (`kache_limit_hits_total{limit="max-consistent-reads-per-client"}`
    /// counts the waits); reads at a resourceVersion need no proof and are not counted.
    #[arg(long, env = "KACHE_MAX_CONSISTENT_READS_PER_CLIENT", default_value_t = 20, value_name = "N", help_heading = heading::LIMITS)]
    pub max_consistent_reads_per_client: u64,
    /// How long kache serves reads from memory while it cannot reach the upstream.
    ///
    /// Meanwhile clients are judged by their last known TokenReview and SubjectAccessReview
    /// decisions; past it cached reads get 503 and /readyz fails. A token revoked or a
    /// permission removed during an outage stays effective against cached reads this long.
    /// 0: no stale reads at all.
    #[arg(
        long = "serve-stale",
        alias = "serve-stale-seconds",
        env = "KACHE_SERVE_STALE_SECONDS",
        value_parser = seconds,
        default_value = seconds_text(300),
        value_name = "DURATION",
        help_heading = heading::FRESHNESS
    )]
    pub serve_stale_seconds: u64,
    /// Keep the caches across restarts in this directory (created 0700).
    ///
    /// Each synced cache is written there (the objects as the upstream sent them, its recent
    /// events and resourceVersion) every `--state-interval` and at shutdown; at start a
    /// preloaded kind with a state of this cluster resumes its watch from it instead of
    /// listing again, and its clients resume their watches. A state of another cluster, newer
    /// than the cluster, or damaged is refused (one log line,
    /// `kache_state_refused_total{reason}`) and the kind lists as without it.
    #[arg(long, env = "KACHE_STATE_DIR", value_name = "DIR", help_heading = heading::CACHING)]
    pub state_dir: Option<std::path::PathBuf>,
    /// How often the caches are written to `--state-dir` (0: only at shutdown).
    ///
    /// A kache that crashes resumes from the last write if the upstream still has the events
    /// since (a kube-apiserver keeps about 5 minutes of them: `--etcd-compaction-interval`),
    /// else it lists again.
    #[arg(
        long = "state-interval",
        env = "KACHE_STATE_INTERVAL",
        value_parser = seconds,
        default_value = seconds_text(60),
        value_name = "DURATION",
        help_heading = heading::CACHING
    )]
    pub state_interval_seconds: u64,
    /// Write Secrets to `--state-dir` too (they are left out otherwise).
    #[arg(long, env = "KACHE_STATE_SECRETS", help_heading = heading::CACHING)]
    pub state_secrets: bool,
}

impl CacheArgs {
    /// The upstream deadlines these flags set.
    pub fn timeouts(&self) -> crate::upstream::Timeouts {
        use std::time::Duration;
        crate::upstream::Timeouts {
            own: Duration::from_secs(self.upstream_timeout_seconds),
            passthrough: Duration::from_secs(self.passthrough_timeout_seconds),
            watch_idle: Duration::from_secs(self.upstream_watch_idle_seconds),
        }
    }

    /// Check values that clap's types do not.
    pub fn validate(&self) -> Result<(), ConfigError> {
        at_least_seconds("--upstream-timeout", self.upstream_timeout_seconds, 1)?;
        at_least_seconds("--passthrough-timeout", self.passthrough_timeout_seconds, 1)?;
        at_least_seconds("--upstream-watch-idle", self.upstream_watch_idle_seconds, 1)?;
        for (flag, v) in [
            ("--cache-window-events", self.window_events),
            ("--snapshot-history", self.snapshot_history),
            ("--watcher-lag", self.watcher_lag),
        ] {
            at_least(flag, v as u64, 1)?;
        }
        at_least_seconds("--watch-bookmark-interval", self.bookmark_interval_seconds, 1)
    }
}
