//! Command-line configuration. Every flag can also be set by a `KACHE_...` environment
//! variable; everything is validated before a port is bound.

use crate::api::media::Format;
use crate::auth::Passthrough;
use clap::{Args, Parser, Subcommand};
use std::path::PathBuf;

/// A flag whose value kache cannot use. Printed as `--flag value: problem`; `kache`
/// exits with a usage error (2) before binding any port.
#[derive(Debug, thiserror::Error)]
#[error("{flag} {value}: {problem}")]
pub struct ConfigError {
    /// The flag, as typed on the command line (`--listen`).
    pub flag: String,
    /// The value given.
    pub value: String,
    /// What is wrong with it.
    pub problem: String,
}

impl ConfigError {
    /// `flag value: problem`.
    pub fn new(flag: impl Into<String>, value: impl std::fmt::Display, problem: impl Into<String>) -> ConfigError {
        ConfigError { flag: flag.into(), value: value.to_string(), problem: problem.into() }
    }
}

/// `flag` must be at least `min`.
/// A finite number at least 0 (a factor).
fn non_negative(v: &str) -> Result<f64, String> {
    match v.parse::<f64>() {
        Ok(f) if f.is_finite() && f >= 0.0 => Ok(f),
        Ok(_) => Err(format!("{v} is not a finite number at least 0")),
        Err(e) => Err(e.to_string()),
    }
}

fn at_least(flag: &str, value: impl Into<u64> + Copy, min: u64) -> Result<(), ConfigError> {
    let v: u64 = value.into();
    if v < min {
        return Err(ConfigError::new(flag, v, format!("must be at least {min}")));
    }
    Ok(())
}

/// A Go duration (`time.ParseDuration`: `90s`, `1m30s`, `1.5h`, `300ms`; `0` alone), read
/// by the same parser as the apiserver's duration fields ([`crate::api::time::parse_go_duration`]).
/// Negative durations are refused: no kache setting takes one.
pub fn parse_go_duration(s: &str) -> Result<std::time::Duration, String> {
    let nanos = crate::api::time::parse_go_duration(s.trim()).ok_or_else(|| format!("{s:?}: not a duration (e.g. 90s, 1m30s)"))?;
    let nanos = u64::try_from(nanos).map_err(|_| format!("{s:?}: a duration must not be negative"))?;
    Ok(std::time::Duration::from_nanos(nanos))
}

/// A `--*-seconds` value: a whole number of seconds (`90`), or a Go duration of whole
/// seconds (`90s`, `1m30s`, `2h`).
pub fn seconds(s: &str) -> Result<u64, String> {
    if let Ok(n) = s.trim().parse::<u64>() {
        return Ok(n);
    }
    let d = parse_go_duration(s)?;
    if d.subsec_nanos() != 0 {
        return Err(format!("{s:?}: this setting takes whole seconds"));
    }
    Ok(d.as_secs())
}

/// A `--*-ms` value: a whole number of milliseconds (`3000`), or a Go duration of whole
/// milliseconds (`3s`, `1500ms`).
pub fn millis(s: &str) -> Result<u64, String> {
    if let Ok(n) = s.trim().parse::<u64>() {
        return Ok(n);
    }
    let d = parse_go_duration(s)?;
    if d.subsec_nanos() % 1_000_000 != 0 {
        return Err(format!("{s:?}: this setting takes whole milliseconds"));
    }
    u64::try_from(d.as_millis()).map_err(|_| format!("{s:?}: duration out of range"))
}

/// Check a `--log-level`: comma-separated directives, each a level (`trace`, `debug`,
/// `info`, `warn`, `error`, `off`) or `target=level` (tracing's env-filter syntax). A bare
/// word that is not a level is refused: env-filter would take it for a target name and log
/// nothing a user expects (`--log-level verbose`).
pub fn validate_log_level(filter: &str) -> Result<(), ConfigError> {
    let bad = |why: String| ConfigError::new("--log-level", filter, why);
    let level = |l: &str| l.trim().parse::<tracing_subscriber::filter::LevelFilter>().is_ok();
    if filter.trim().is_empty() {
        return Err(bad("empty: give a level (trace, debug, info, warn, error, off) or target=level directives".into()));
    }
    for d in filter.split(',').map(str::trim).filter(|d| !d.is_empty()) {
        let ok = match d.rsplit_once('=') {
            Some((target, l)) => !target.trim().is_empty() && level(l),
            None => level(d),
        };
        if !ok {
            return Err(bad(format!(
                "{d:?} is not a level (trace, debug, info, warn, error, off) nor a target=level directive (e.g. kache=debug,hyper=warn)"
            )));
        }
    }
    tracing_subscriber::EnvFilter::try_new(filter).map(|_| ()).map_err(|e| bad(e.to_string()))
}

/// Whether text log lines carry ANSI colours: only on a terminal (a file or a log
/// collector would keep the escape codes), and not when `NO_COLOR` is set to anything but
/// the empty string (<https://no-color.org>).
pub fn log_colours(terminal: bool, no_color: Option<&std::ffi::OsStr>) -> bool {
    terminal && no_color.is_none_or(|v| v.is_empty())
}

/// kache: a watch cache and read proxy for the Kubernetes API.
#[derive(Debug, Parser)]
#[command(name = "kache", version, about)]
pub struct Cli {
    /// What to run.
    #[command(subcommand)]
    pub command: Command,
    /// Log filter (tracing env-filter syntax, e.g. `info` or `kache=debug`).
    #[arg(long, global = true, env = "KACHE_LOG_LEVEL", default_value = "info")]
    pub log_level: String,
    /// Log format.
    #[arg(long, global = true, env = "KACHE_LOG_FORMAT", value_enum, default_value_t = LogFormat::Text)]
    pub log_format: LogFormat,
}

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

/// How log lines are written.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum LogFormat {
    /// Human-readable lines.
    Text,
    /// One JSON object per line.
    Json,
}

/// Subcommands.
// Parsed once at start-up: the size difference between variants costs nothing.
#[allow(clippy::large_enum_variant)]
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Run a simulated kube-apiserver holding a synthetic cluster.
    #[cfg(feature = "sim")]
    Sim(SimArgs),
    /// Run the simulated cluster with kache in front of it and print commands to try.
    #[cfg(feature = "sim")]
    Demo(DemoArgs),
    /// Serve reads from an in-memory cache of an upstream apiserver; pass everything else through.
    Serve(ServeArgs),
    /// Write a kubeconfig that points a client at a running kache, with the user's
    /// credentials copied from another kubeconfig.
    Kubeconfig(KubeconfigArgs),
    /// Print what a running kache's caches hold (its admin listener's `/debug/cache`).
    Status(StatusArgs),
}

/// `kache status`.
#[derive(Debug, Clone, Args)]
pub struct StatusArgs {
    /// The admin listener of the kache to ask (`host:port` or `http://host:port`), e.g. a
    /// `kubectl port-forward` to its port 9090.
    #[arg(long, env = "KACHE_STATUS_ADMIN", default_value = "127.0.0.1:9090")]
    pub admin: String,
    /// Print the `/debug/cache` JSON instead of a table.
    #[arg(long, env = "KACHE_STATUS_JSON")]
    pub json: bool,
}

/// Settings of the cache kache serves from.
#[derive(Debug, Clone, Args)]
pub struct CacheArgs {
    /// Resources to load at start (plural names, or `plural.group`); others load on first request.
    /// They are listed one at a time, in this order, each in protobuf before JSON; a WatchList
    /// of one still waiting starts its list at once.
    #[arg(long, env = "KACHE_PRELOAD", value_delimiter = ',', default_value = "pods,nodes,namespaces,services,configmaps")]
    pub preload: Vec<String>,
    /// Encodings to load preloaded resources in (protobuf only where the kind has it).
    #[arg(long, env = "KACHE_PRELOAD_ENCODINGS", value_delimiter = ',', value_enum, default_value = "json,protobuf")]
    pub preload_encodings: Vec<Format>,
    /// Events each cache keeps for watches to resume from.
    #[arg(id = "cache_window_events", long = "cache-window-events", env = "KACHE_CACHE_WINDOW_EVENTS", default_value_t = 10_000)]
    pub window_events: usize,
    /// Bytes of object versions each cache's window keeps at most for watches to resume
    /// from (the events' objects, which the current state no longer holds); the oldest
    /// events go first when either bound is reached. With 16 KB objects changing fast the
    /// window keeps about 2,000 changes at the default; 0 for no byte bound.
    #[arg(id = "cache_window_bytes", long = "cache-window-bytes", env = "KACHE_CACHE_WINDOW_BYTES", default_value_t = crate::cache::DEFAULT_WINDOW_BYTES)]
    pub window_bytes: usize,
    /// Past snapshots each cache keeps for continue tokens and exact-RV lists.
    #[arg(long, env = "KACHE_SNAPSHOT_HISTORY", default_value_t = 1024)]
    pub snapshot_history: usize,
    /// Changes a watcher may fall behind before it is ended (its client then resumes); at most 128 for a watch of one node's pods and 1,024 for a watch of one namespace (each its own ring, woken only by its changes).
    #[arg(long, env = "KACHE_WATCHER_LAG", default_value_t = 8192)]
    pub watcher_lag: usize,
    /// Bytes of Table cells (`kubectl get` rows) kept per object version. A custom
    /// resource's printer columns can print whole parts of the object once per column;
    /// cells over this are not kept, and Tables of the kind pass through to the upstream
    /// while such an object is held (`kache_limit_hits_total{limit="max-table-cell-bytes-per-object"}`).
    #[arg(long, env = "KACHE_MAX_TABLE_CELL_BYTES_PER_OBJECT", default_value_t = crate::cache::TABLE_CELL_BYTES)]
    pub max_table_cell_bytes_per_object: usize,
    /// Milliseconds a read that needs a newer state than the cache has proven (a consistent
    /// read, or a resourceVersion ahead of it) waits for a freshness probe before it is
    /// passed through. Probes roll while a kind is read (a bookmark per tick of the
    /// apiserver's bookmark timer): a read waits 0.5-1.2 s against a kube-apiserver, the
    /// first of a quiet kind up to 2.3 s; 0 passes every such read through. It is also the
    /// longest a watch waits for the cache it starts (a kind's first request) to sync before
    /// it is passed through.
    /// A number of milliseconds or a duration (`3s`, `1500ms`).
    #[arg(value_parser = millis, long, env = "KACHE_CONSISTENT_WAIT_MS", default_value_t = 3000)]
    pub consistent_wait_ms: u64,
    /// How a consistent read (no resourceVersion) weighs the upstream against a freshness
    /// proof. It is passed through at once when the upstream's expected time for it (its
    /// measured round trip plus the answer's bytes in kache's index over its measured encode
    /// rate) is at most this factor times kache's (the expected wait for a proof of that
    /// kind, measured, plus its own time to send the answer); otherwise it waits for the
    /// proof, no longer than the upstream would take. 1 keeps every read as fast as going
    /// direct; 0 never passes through by cost (every consistent read waits for a proof,
    /// sparing the upstream most); above 1 favours the upstream, below it the cache.
    #[arg(long, env = "KACHE_CONSISTENT_PASSTHROUGH_FACTOR", default_value_t = 1.0, value_parser = non_negative)]
    pub consistent_passthrough_factor: f64,
    /// What becomes of a consistent LIST the cost rule finds the upstream answers sooner.
    /// `check`: kache asks the upstream for the same page as metadata (protobuf
    /// PartialObjectMetadataList: which objects, at which resourceVersions) and, when its
    /// own page holds the same objects at the same versions, answers from memory at the
    /// upstream's resourceVersion (`kache_consistent_checks_total`); otherwise it passes the
    /// read through. The upstream encodes metadata at a third to a half of the CPU of the
    /// objects or their Table. `pass-through`: the read goes to the upstream at once.
    #[arg(long, env = "KACHE_CHEAPER_UPSTREAM_READS", value_enum, default_value_t = CheaperReads::Check)]
    pub cheaper_upstream_reads: CheaperReads,
    /// Prove a consistent LIST current by the revision ledger: etcd gives every write a
    /// revision of its own, so when every revision between the cache's last proof and the
    /// upstream's current resourceVersion (a one-key LIST) was a write kache's watches saw to
    /// another resource, the cache is current, with no bookmark to wait for and no check to
    /// send (`kache_consistent_checks_total{outcome="accounted"}`). It pays off when kache
    /// caches the kinds that move the resourceVersion (leases, configmaps...: `--preload`).
    /// A resource joins the ledger once its resourceVersions are seen to interleave with the
    /// other resources' (one etcd); Events never do. `off`: bookmarks and checks only.
    #[arg(long, env = "KACHE_REVISION_LEDGER", value_enum, default_value_t = RevisionLedger::On)]
    pub revision_ledger: RevisionLedger,
    /// Seconds between periodic bookmarks on watches kache serves.
    /// A number of seconds or a duration (`90s`, `1m30s`).
    #[arg(
        value_parser = seconds,
        id = "watch_bookmark_interval_seconds",
        long = "watch-bookmark-interval-seconds",
        env = "KACHE_WATCH_BOOKMARK_INTERVAL_SECONDS",
        default_value_t = 60
    )]
    pub bookmark_interval_seconds: u64,
    /// Seconds kache waits for the response headers of its own upstream calls (access and
    /// token reviews, discovery, LISTs, freshness probes, watches), and for the next
    /// bytes of their bodies; past it the call fails and is retried.
    /// A number of seconds or a duration (`90s`, `1m30s`).
    #[arg(value_parser = seconds, long, env = "KACHE_UPSTREAM_TIMEOUT_SECONDS", default_value_t = 10)]
    pub upstream_timeout_seconds: u64,
    /// Seconds a client's passed-through request waits for the upstream's response headers
    /// before it gets a 504 Timeout Status (the apiserver's own request timeout is 60 s).
    /// A number of seconds or a duration (`90s`, `1m30s`).
    #[arg(value_parser = seconds, long, env = "KACHE_PASSTHROUGH_TIMEOUT_SECONDS", default_value_t = 60)]
    pub passthrough_timeout_seconds: u64,
    /// Seconds an informer's upstream watch may bring neither an event nor a bookmark
    /// before kache reconnects it (resuming from its resourceVersion). The apiserver sends
    /// a bookmark about every 60 s.
    /// A number of seconds or a duration (`90s`, `1m30s`).
    #[arg(value_parser = seconds, long, env = "KACHE_UPSTREAM_WATCH_IDLE_SECONDS", default_value_t = 90)]
    pub upstream_watch_idle_seconds: u64,
    /// Requests one client (the user who authenticated, not whom it impersonates; an
    /// anonymous client by its address, as every client when clients are not
    /// authenticated) may have passed through to the upstream at once, watches included,
    /// and exec, attach and port-forward sessions for as long as they last; beyond it the
    /// client gets 429 with Retry-After. Keeps one client from taking the
    /// upstream's streams from everyone (kache's own calls have connections of their
    /// own); 0 for no bound.
    #[arg(long, env = "KACHE_MAX_PASSTHROUGH_PER_CLIENT", default_value_t = 500)]
    pub max_passthrough_per_client: usize,
    /// Watches one client (as for --max-passthrough-per-client; an anonymous client by its
    /// address) may have open at once, answered from the cache or passed through; beyond it
    /// 429 with Retry-After (`kache_limit_hits_total{limit="max-watches-per-client"}`). A
    /// kube-controller-manager opens about 100; 0 for no bound.
    #[arg(long, env = "KACHE_MAX_WATCHES_PER_CLIENT", default_value_t = 1000)]
    pub max_watches_per_client: usize,
    /// Answers from memory larger than 1 MiB (a LIST of every pod, pretty, gzip or not) one
    /// client (as for --max-passthrough-per-client) may have being sent at once; more wait,
    /// in the order they came, for one of the client's own to end, so one client's large
    /// LISTs cannot take kache's cores from everyone else's reads. A wait past 15 s is a 429
    /// with Retry-After (`kache_limit_hits_total{limit="max-large-answers-per-client"}`
    /// counts the waits); 0 for no bound.
    #[arg(long, env = "KACHE_MAX_LARGE_ANSWERS_PER_CLIENT", default_value_t = crate::serve::fair::PER_CLIENT)]
    pub max_large_answers_per_client: usize,
    /// Bytes a second (of the objects answered) of consistent reads one client may have kache
    /// pass to the apiserver because the apiserver answers them sooner than kache's
    /// freshness proof (`kache_passthrough_total{reason="cheaper_upstream"}`), a second's
    /// worth at once. Past them such a read waits for the proof and is answered from memory,
    /// so one client's loop of consistent reads costs the apiserver kache's proofs, not its
    /// own answers (`kache_limit_hits_total{limit="max-cheaper-upstream-bytes-per-client"}`);
    /// 0 for no bound.
    #[arg(long, env = "KACHE_MAX_CHEAPER_UPSTREAM_BYTES_PER_CLIENT", default_value_t = 8 << 20)]
    pub max_cheaper_upstream_bytes_per_client: u64,
    /// Watches a second one client (as for --max-passthrough-per-client) may start from no
    /// resourceVersion (a WatchList, as client-go's informers start, or a legacy watch), ten
    /// seconds' worth at once. Each needs a consistency proof, a request to the apiserver
    /// (shared by the watches and consistent reads of a kind that arrive while one is on its
    /// way), so a client that starts watches in a loop would have kache ask the apiserver as
    /// often. A kube-controller-manager starts about 100 at once (each informer's first
    /// WatchList). Past it 429 with Retry-After, as from the apiserver's priority and
    /// fairness (`kache_limit_hits_total{limit="max-watch-starts-per-client"}`). A watch from
    /// a resourceVersion (an informer's every restart) is not counted; 0 for no bound.
    #[arg(long, env = "KACHE_MAX_WATCH_STARTS_PER_CLIENT", default_value_t = 20)]
    pub max_watch_starts_per_client: u64,
    /// Consistent reads a second (LISTs, and GETs kache answers from memory) one client may
    /// have kache prove, ten seconds' worth at once. Each proof costs the apiserver a request
    /// (its current resourceVersion, or a check of the page), shared only with the reads of
    /// the kind that arrive while it is on its way, so a client reading in a loop would have
    /// kache ask the apiserver as often. Past it the client's reads queue, each answered when
    /// the rate has paid for it, as the apiserver's priority and fairness queues
    /// (`kache_limit_hits_total{limit="max-consistent-reads-per-client"}` counts the waits);
    /// reads at a resourceVersion need no proof and are not counted; 0 for no bound.
    #[arg(long, env = "KACHE_MAX_CONSISTENT_READS_PER_CLIENT", default_value_t = 20)]
    pub max_consistent_reads_per_client: u64,
    /// Seconds kache keeps serving reads from memory, and judging clients by their last
    /// known TokenReview and SubjectAccessReview decisions, while its informers cannot
    /// reach the upstream; past it cached reads get 503 and /readyz fails. A token revoked
    /// or a permission removed during an outage stays effective against cached reads this
    /// long. 0: no stale reads at all.
    /// A number of seconds or a duration (`90s`, `1m30s`).
    #[arg(value_parser = seconds, long, env = "KACHE_SERVE_STALE_SECONDS", default_value_t = 300)]
    pub serve_stale_seconds: u64,
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
        at_least("--upstream-timeout-seconds", self.upstream_timeout_seconds, 1)?;
        at_least("--passthrough-timeout-seconds", self.passthrough_timeout_seconds, 1)?;
        at_least("--upstream-watch-idle-seconds", self.upstream_watch_idle_seconds, 1)?;
        for (flag, v) in [
            ("--cache-window-events", self.window_events),
            ("--snapshot-history", self.snapshot_history),
            ("--watcher-lag", self.watcher_lag),
        ] {
            at_least(flag, v as u64, 1)?;
        }
        at_least("--watch-bookmark-interval-seconds", self.bookmark_interval_seconds, 1)
    }
}

/// `kache serve`.
#[derive(Debug, Clone, Args)]
pub struct ServeArgs {
    /// Kubeconfig of the upstream apiserver (default: KUBECONFIG, ~/.kube/config, or in-cluster).
    #[arg(long, env = "KACHE_UPSTREAM_KUBECONFIG")]
    pub upstream_kubeconfig: Option<PathBuf>,
    /// Context in the upstream kubeconfig.
    #[arg(long, env = "KACHE_UPSTREAM_CONTEXT")]
    pub upstream_context: Option<String>,
    /// Address to listen on (port 0 picks a free port).
    #[arg(long, env = "KACHE_LISTEN", default_value = "127.0.0.1:0")]
    pub listen: String,
    /// Write the bound address (`host:port`) to this file once listening.
    #[arg(long, env = "KACHE_ADDR_FILE")]
    pub addr_file: Option<PathBuf>,
    /// Serve plain HTTP instead of TLS (loopback addresses only). Clients are still
    /// authenticated (bearer tokens) and authorized.
    #[arg(long, env = "KACHE_INSECURE_HTTP")]
    pub insecure_http: bool,
    /// Write a kubeconfig that points clients at this kache.
    #[arg(long, env = "KACHE_CLIENT_KUBECONFIG_OUT")]
    pub client_kubeconfig_out: Option<PathBuf>,
    /// Admin listener (`/metrics`, `/livez`, `/readyz`, `/healthz`); off when unset.
    #[arg(long, env = "KACHE_ADMIN_LISTEN")]
    pub admin_listen: Option<String>,
    /// Write the admin listener's bound address to this file.
    #[arg(long, env = "KACHE_ADMIN_ADDR_FILE")]
    pub admin_addr_file: Option<PathBuf>,
    /// Log one line per request (log target `kache::access`, at info): user, verb, group,
    /// resource, namespace, source (`cache`, `upstream`, `kache`), the pass-through reason of
    /// an upstream answer, status code, bytes of a cached answer, seconds to its headers.
    /// Reads answered from cache never reach the apiserver's audit log; this is their record.
    #[arg(long, env = "KACHE_ACCESS_LOG")]
    pub access_log: bool,
    /// Seconds to let in-flight requests finish after SIGTERM/SIGINT before exiting.
    /// A number of seconds or a duration (`90s`, `1m30s`).
    #[arg(value_parser = seconds, long = "shutdown-grace-seconds", env = "KACHE_SHUTDOWN_GRACE_SECONDS", default_value_t = 30)]
    pub shutdown_grace_seconds: u64,
    /// Cache settings.
    #[command(flatten)]
    pub cache: CacheArgs,
    /// TLS, authentication, authorization and request limits.
    #[command(flatten)]
    pub security: SecurityArgs,
}

/// TLS, client authentication and authorization, and limits on what clients may send.
#[derive(Debug, Clone, Args)]
pub struct SecurityArgs {
    /// PEM certificate chain to serve (leaf first); without it a CA and a serving
    /// certificate are generated at start and the CA is written into --client-kubeconfig-out.
    #[arg(long, env = "KACHE_TLS_CERT_FILE", requires = "tls_private_key_file")]
    pub tls_cert_file: Option<PathBuf>,
    /// PEM private key of --tls-cert-file.
    #[arg(long, env = "KACHE_TLS_PRIVATE_KEY_FILE", requires = "tls_cert_file")]
    pub tls_private_key_file: Option<PathBuf>,
    /// Extra DNS names or IP addresses of the generated serving certificate (besides
    /// localhost, the loopback addresses and the listen address), e.g. a Service's name.
    #[arg(long, env = "KACHE_TLS_SANS", value_delimiter = ',')]
    pub tls_sans: Vec<String>,
    /// PEM CA bundle client certificates are verified against (user = CN, groups = O).
    /// Read again when it changes, as the serving certificate and key are: new connections
    /// use the new files within a second.
    #[arg(long, env = "KACHE_CLIENT_CA_FILE")]
    pub client_ca_file: Option<PathBuf>,
    /// Minimum TLS version served, as the apiserver names it: VersionTLS12 or VersionTLS13.
    #[arg(long, env = "KACHE_TLS_MIN_VERSION", default_value = "VersionTLS12")]
    pub tls_min_version: String,
    /// TLS 1.2 cipher suites served, by Go's (the apiserver's) names, comma-separated;
    /// default: every suite kache implements (ECDHE with AES-GCM or ChaCha20-Poly1305). TLS
    /// 1.3 suites are not configurable, as in Go.
    #[arg(long, env = "KACHE_TLS_CIPHER_SUITES", value_delimiter = ',')]
    pub tls_cipher_suites: Vec<String>,
    /// Serve requests without credentials as `system:anonymous` (group
    /// `system:unauthenticated`), still subject to authorization; otherwise they get 401.
    #[arg(long, env = "KACHE_ALLOW_ANONYMOUS")]
    pub allow_anonymous: bool,
    /// How passed-through requests carry the client's identity: `impersonate` (kache's
    /// credentials plus Impersonate-* headers) or `forward` (the client's own bearer token;
    /// clients without one are impersonated).
    #[arg(long, env = "KACHE_PASSTHROUGH_AUTH", value_enum, default_value_t = Passthrough::Impersonate)]
    pub passthrough_auth: Passthrough,
    /// Seconds a token the upstream's TokenReview accepted is trusted without asking again.
    /// A number of seconds or a duration (`90s`, `1m30s`).
    #[arg(value_parser = seconds, long, env = "KACHE_TOKEN_CACHE_TTL_SECONDS", default_value_t = 10)]
    pub token_cache_ttl_seconds: u64,
    /// Seconds a token the upstream refused is refused without asking again.
    /// A number of seconds or a duration (`90s`, `1m30s`).
    #[arg(value_parser = seconds, long, env = "KACHE_TOKEN_CACHE_NEGATIVE_TTL_SECONDS", default_value_t = 10)]
    pub token_cache_negative_ttl_seconds: u64,
    /// Seconds an allowed SubjectAccessReview decision is reused.
    /// A number of seconds or a duration (`90s`, `1m30s`).
    #[arg(value_parser = seconds, long, env = "KACHE_AUTHZ_CACHE_ALLOW_TTL_SECONDS", default_value_t = 10)]
    pub authz_cache_allow_ttl_seconds: u64,
    /// Seconds a denied SubjectAccessReview decision is reused.
    /// A number of seconds or a duration (`90s`, `1m30s`).
    #[arg(value_parser = seconds, long, env = "KACHE_AUTHZ_CACHE_DENY_TTL_SECONDS", default_value_t = 10)]
    pub authz_cache_deny_ttl_seconds: u64,
    /// Entries each of the token and decision caches holds at most (accepted and refused
    /// tokens are cached apart, so made-up tokens never push out a real one's identity).
    /// When full, expired entries go first, then those of the user holding the most
    /// (`kache_limit_hits_total{limit="auth-cache-entries"}`).
    #[arg(long, env = "KACHE_AUTH_CACHE_ENTRIES", default_value_t = 10_000)]
    pub auth_cache_entries: usize,
    /// TokenReviews, and apart SubjectAccessReviews, in flight at once in each of two
    /// lanes: renewals of decisions kache has known, and first reviews (new clients, made-up
    /// tokens). Reviews ride connections of their own, apart from informers and health
    /// probes (`kache_limit_hits_total{limit="max-concurrent-reviews"}` counts waits).
    #[arg(long, env = "KACHE_MAX_CONCURRENT_REVIEWS", default_value_t = crate::auth::REVIEW_LANE)]
    pub max_concurrent_reviews: usize,
    /// TokenReviews a second that bearer tokens kache has never judged, sent from one source
    /// address, may cause (a second's worth at once). Known tokens, and renewals of known
    /// ones, are not counted; past it a new token gets 429 with Retry-After, as from the
    /// apiserver's max-in-flight filter, and costs the apiserver nothing
    /// (`kache_limit_hits_total{limit="max-token-review-rate-per-address"}`). Behind a proxy
    /// that hides clients' addresses they all share its one; 0 for no bound.
    #[arg(long, env = "KACHE_MAX_TOKEN_REVIEW_RATE_PER_ADDRESS", default_value_t = crate::auth::TOKEN_REVIEW_RATE)]
    pub max_token_review_rate_per_address: u32,
    /// Cached reads (GET and LIST; watches are not counted) in flight at once over all
    /// clients; beyond it 429 with Retry-After (0 = no cap).
    #[arg(long, env = "KACHE_MAX_INFLIGHT_READS", default_value_t = 4000)]
    pub max_inflight_reads: usize,
    /// Cached reads in flight at once for one user; the ServiceAccounts of one namespace
    /// count as one user. Past half of `--max-inflight-reads`, a user gets a place only
    /// while it holds less than its share (the cap over twice the users with reads in
    /// flight), so no number of accounts locks the others out (0 = no cap).
    #[arg(long, env = "KACHE_MAX_INFLIGHT_READS_PER_USER", default_value_t = 400)]
    pub max_inflight_reads_per_user: usize,
    /// Seconds an answer may wait for its client to take the next part (an HTTP/2 stream
    /// that grants no window, a socket that does not drain) before it is ended: its HTTP/2
    /// stream reset (RST_STREAM), or its HTTP/1.1 connection closed. Its in-flight place
    /// and queued watch bytes are released then (`kache_limit_hits_total{limit="stall-timeout-seconds"}`).
    /// A watch with nothing to send is not stalled. 0: no bound.
    #[arg(value_parser = seconds, long, env = "KACHE_STALL_TIMEOUT_SECONDS", default_value_t = crate::serve::server::stall::STALL_TIMEOUT.as_secs())]
    pub stall_timeout_seconds: u64,
    /// Seconds from accept for a connection to send its first 24 bytes after TLS (the
    /// HTTP/2 preface, or an HTTP/1.1 request line); else it is closed
    /// (`kache_limit_hits_total{limit="preface-timeout-seconds"}`). Its first request's
    /// headers must come within `--header-read-timeout-seconds` of accept.
    #[arg(value_parser = seconds, long, env = "KACHE_PREFACE_TIMEOUT_SECONDS", default_value_t = crate::serve::server::PREFACE_TIMEOUT.as_secs())]
    pub preface_timeout_seconds: u64,
    /// Client connections open at once; past it a new connection is closed at accept
    /// (`kache_limit_hits_total{limit="max-connections"}`, `kache_connections_open`). 0: the
    /// process's file descriptor limit less 1,024 (for the upstream and files), at least
    /// half of it.
    #[arg(long, env = "KACHE_MAX_CONNECTIONS", default_value_t = 0)]
    pub max_connections: usize,
    /// Client connections open at once from one source address (0: no bound; behind a
    /// proxy that hides clients' addresses they all share its one).
    #[arg(long, env = "KACHE_MAX_CONNECTIONS_PER_ADDRESS", default_value_t = 0)]
    pub max_connections_per_address: usize,
    /// Largest request head (HTTP/1.1 request line and headers; HTTP/2 header list) in bytes.
    #[arg(long, env = "KACHE_MAX_HEADER_BYTES", default_value_t = 1 << 20)]
    pub max_header_bytes: usize,
    /// Longest request URI (path and query) in bytes; longer ones get 414.
    #[arg(long, env = "KACHE_MAX_URI_BYTES", default_value_t = 64 * 1024)]
    pub max_uri_bytes: usize,
    /// Seconds a client has to send a request's headers (HTTP/1.1) or finish the TLS handshake.
    /// The clock starts when an HTTP/1.1 connection goes idle, so an idle keep-alive
    /// connection is closed after it (over TLS with a close_notify; clients open a new one).
    /// A number of seconds or a duration (`90s`, `1m30s`).
    #[arg(value_parser = seconds, long, env = "KACHE_HEADER_READ_TIMEOUT_SECONDS", default_value_t = 32)]
    pub header_read_timeout_seconds: u64,
    /// HTTP/2 streams one client connection may have open at once.
    #[arg(long, env = "KACHE_HTTP2_MAX_STREAMS_PER_CONNECTION", default_value_t = crate::serve::server::MAX_STREAMS)]
    pub http2_max_streams_per_connection: u32,
    /// Seconds a write to a client may make no progress (the client takes no byte) before
    /// its connection is closed, with every answer and watch on it
    /// (`kache_limit_hits_total{limit="write-timeout-seconds"}`, and a warning in the log with
    /// the client's address). A slow reader that takes bytes is never cut.
    #[arg(long, env = "KACHE_WRITE_TIMEOUT_SECONDS", default_value_t = crate::serve::server::WRITE_TIMEOUT.as_secs())]
    pub write_timeout_seconds: u64,
    /// Answers being indented (`pretty`, or a curl, Wget or browser user agent) or
    /// gzip-compressed at once (a WatchList's while its initial state is sent); each is encoded a frame at a time as it is sent, never held
    /// whole. Past it an answer goes out compact or uncompressed
    /// (`kache_limit_hits_total{limit="max-concurrent-encodes"}`); 0 for no bound.
    #[arg(long, env = "KACHE_MAX_CONCURRENT_ENCODES", default_value_t = crate::serve::compress::MAX_ENCODES)]
    pub max_concurrent_encodes: usize,
    /// Niceness, above kache's own, of the low-priority lane: threads of their own
    /// (`kache-lane`, one per core) that indent `pretty` answers and gzip-compress answers of
    /// more than 1 MiB, a frame per job, so one client's encodes of large answers take the
    /// cores only when
    /// kache's other threads, and processes beside it at its priority (an apiserver on the same
    /// machine), do not need them (Linux niceness is per thread; between processes it weighs
    /// when `kernel.sched_autogroup_enabled` is 0). 0 to 19; 0 for no lane: the encodes run
    /// on the shared blocking pool at kache's priority.
    #[arg(long, env = "KACHE_LOW_PRIORITY_NICE", default_value_t = crate::lane::NICE, value_parser = clap::value_parser!(i32).range(0..=19))]
    pub low_priority_nice: i32,
    /// Bytes of events queued for one watch's client that it has not taken yet; past them
    /// the watch waits for the client, and ends it after 15 s without progress (it then
    /// resumes from its resourceVersion). A single event larger than this is queued alone
    /// (`kache_limit_hits_total{limit="max-watch-buffer-bytes"}` counts the waits).
    #[arg(long, env = "KACHE_MAX_WATCH_BUFFER_BYTES", default_value_t = crate::serve::handler::WATCH_BUFFER_BYTES)]
    pub max_watch_buffer_bytes: usize,
    /// Bytes of events all watches together may have queued for their clients; past them
    /// watches wait for room as for a slow client
    /// (`kache_limit_hits_total{limit="max-watch-buffers-bytes"}`).
    #[arg(long, env = "KACHE_MAX_WATCH_BUFFERS_BYTES", default_value_t = crate::serve::handler::WATCH_BUFFERS_BYTES)]
    pub max_watch_buffers_bytes: usize,
    /// Bytes of events the watches of one connection may have queued together
    /// (`kache_limit_hits_total{limit="max-watch-buffers-bytes-per-connection"}`); 0: no
    /// bound of its own.
    #[arg(long, env = "KACHE_MAX_WATCH_BUFFERS_BYTES_PER_CONNECTION", default_value_t = crate::serve::server::WATCH_BUFFERS_PER_CONNECTION)]
    pub max_watch_buffers_bytes_per_connection: usize,
    /// Bytes of events the watches of one user (the ServiceAccounts of a namespace count as
    /// one) may have queued together
    /// (`kache_limit_hits_total{limit="max-watch-buffers-bytes-per-user"}`); 0: no bound of
    /// its own.
    #[arg(long, env = "KACHE_MAX_WATCH_BUFFERS_BYTES_PER_USER", default_value_t = crate::serve::handler::WATCH_BUFFERS_PER_USER)]
    pub max_watch_buffers_bytes_per_user: usize,
}

impl SecurityArgs {
    /// The TLS versions and cipher suites of `--tls-min-version` and `--tls-cipher-suites`.
    pub fn tls_policy(&self) -> Result<crate::auth::tls::Policy, ConfigError> {
        crate::auth::tls::Policy::parse(&self.tls_min_version, &self.tls_cipher_suites).map_err(|(flag, problem)| {
            let value = if flag == "--tls-min-version" { self.tls_min_version.clone() } else { self.tls_cipher_suites.join(",") };
            ConfigError::new(flag, value, problem)
        })
    }

    /// Check values that clap's types do not.
    pub fn validate(&self) -> Result<(), ConfigError> {
        self.tls_policy()?;
        at_least("--max-header-bytes", self.max_header_bytes as u64, 8192)?;
        at_least("--max-uri-bytes", self.max_uri_bytes as u64, 256)?;
        at_least("--header-read-timeout-seconds", self.header_read_timeout_seconds, 1)?;
        at_least("--write-timeout-seconds", self.write_timeout_seconds, 1)?;
        at_least("--max-watch-buffer-bytes", self.max_watch_buffer_bytes as u64, 64 * 1024)?;
        at_least("--max-watch-buffers-bytes", self.max_watch_buffers_bytes as u64, self.max_watch_buffer_bytes as u64)?;
        at_least("--http2-max-streams-per-connection", self.http2_max_streams_per_connection, 1)?;
        at_least("--preface-timeout-seconds", self.preface_timeout_seconds, 1)?;
        for (flag, f) in [
            ("--tls-cert-file", &self.tls_cert_file),
            ("--tls-private-key-file", &self.tls_private_key_file),
            ("--client-ca-file", &self.client_ca_file),
        ] {
            if let Some(p) = f.as_ref().filter(|p| !p.is_file()) {
                return Err(ConfigError::new(flag, p.display(), "no such file"));
            }
        }
        Ok(())
    }
}

/// Simulator TLS, users and RBAC. Without a users, RBAC or client CA file the simulator is
/// open: every request is allowed, as before.
#[derive(Debug, Clone, Args, Default)]
pub struct SimAuthArgs {
    /// Users: YAML or JSON `tokens: {TOKEN: {username, uid, groups, extra, expiresAt}}`.
    /// Client-certificate users are their CN, in the groups of their O.
    #[arg(long, env = "KACHE_SIM_USERS_FILE")]
    pub users_file: Option<PathBuf>,
    /// RBAC: YAML or JSON `rules: [{users, groups, verbs, apiGroups, resources,
    /// resourceNames, namespaces, nonResourceURLs, fieldSelector}]`; `system:masters` may do
    /// anything.
    #[arg(long, env = "KACHE_SIM_RBAC_FILE")]
    pub rbac_file: Option<PathBuf>,
    /// Serve TLS with a certificate generated at start (implied by the other TLS flags).
    #[arg(long, env = "KACHE_SIM_TLS")]
    pub tls: bool,
    /// PEM certificate chain to serve.
    #[arg(long, env = "KACHE_SIM_TLS_CERT_FILE", requires = "tls_private_key_file")]
    pub tls_cert_file: Option<PathBuf>,
    /// PEM private key of --tls-cert-file.
    #[arg(long, env = "KACHE_SIM_TLS_PRIVATE_KEY_FILE", requires = "tls_cert_file")]
    pub tls_private_key_file: Option<PathBuf>,
    /// PEM CA bundle client certificates are verified against (implies TLS).
    #[arg(long, env = "KACHE_SIM_CLIENT_CA_FILE")]
    pub client_ca_file: Option<PathBuf>,
    /// Write a kubeconfig for the simulator (server URL and CA; no user) to this file.
    #[arg(long, env = "KACHE_SIM_KUBECONFIG_OUT")]
    pub kubeconfig_out: Option<PathBuf>,
}

impl SimAuthArgs {
    /// Whether the simulator serves TLS.
    pub fn tls_enabled(&self) -> bool {
        self.tls || self.tls_cert_file.is_some() || self.client_ca_file.is_some()
    }

    /// Whether the simulator authenticates and authorizes requests.
    pub fn auth_enabled(&self) -> bool {
        self.users_file.is_some() || self.rbac_file.is_some() || self.client_ca_file.is_some()
    }
}

/// The synthetic cluster and simulator settings.
#[derive(Debug, Clone, Args)]
pub struct ClusterArgs {
    /// Number of nodes.
    #[arg(long, env = "KACHE_SIM_NODES", default_value_t = 100)]
    pub nodes: usize,
    /// Number of pods at start.
    #[arg(long, env = "KACHE_SIM_PODS", default_value_t = 3000)]
    pub pods: usize,
    /// Number of namespaces (including default and kube-system).
    #[arg(long, env = "KACHE_SIM_NAMESPACES", default_value_t = 10)]
    pub namespaces: usize,
    /// Seed of the generated cluster.
    #[arg(long, env = "KACHE_SIM_SEED", default_value_t = 1)]
    pub seed: u64,
    /// Pad each pod's JSON to about this many bytes.
    #[arg(long, env = "KACHE_SIM_POD_BYTES")]
    pub pod_bytes: Option<usize>,
    /// Lease renewals per second: writes that move the global resourceVersion without
    /// touching any kind served, as a real cluster's node and controller leases do (0 = none).
    #[arg(long, env = "KACHE_SIM_LEASE_CHURN_PER_SEC", default_value_t = 10.0)]
    pub lease_churn_per_sec: f64,
    /// Seconds between the simulated etcd progress notifications that move every kind's
    /// watch cache to the global resourceVersion.
    /// A number of seconds or a duration (`90s`, `1m30s`).
    #[arg(value_parser = seconds, long, env = "KACHE_SIM_PROGRESS_NOTIFY_SECONDS", default_value_t = 60)]
    pub progress_notify_seconds: u64,
    /// Pod updates, creates and deletes per second (0 = none).
    #[arg(long, env = "KACHE_SIM_CHURN_PER_SEC", default_value_t = 0.0)]
    pub churn_per_sec: f64,
    /// Events each kind keeps for watches to resume from; older RVs get 410 Expired.
    #[arg(long, env = "KACHE_WINDOW_EVENTS", default_value_t = 10_000)]
    pub window_events: usize,
    /// Seconds between periodic watch bookmarks.
    /// A number of seconds or a duration (`90s`, `1m30s`).
    #[arg(value_parser = seconds, long, env = "KACHE_BOOKMARK_INTERVAL_SECONDS", default_value_t = 60)]
    pub bookmark_interval_seconds: u64,
    /// Concurrent HTTP/2 streams one client connection may carry (the kube-apiserver's
    /// `--http2-max-streams-per-connection`, 100 by default).
    #[arg(
        id = "sim_http2_max_streams",
        long = "http2-max-streams-per-connection",
        env = "KACHE_SIM_HTTP2_MAX_STREAMS_PER_CONNECTION",
        default_value_t = 100
    )]
    pub http2_max_streams: u32,
}

impl ClusterArgs {
    /// Check values that clap's types do not.
    pub fn validate(&self) -> Result<(), ConfigError> {
        at_least("--nodes", self.nodes as u64, 1)?;
        if !(0.0..=100_000.0).contains(&self.churn_per_sec) || self.churn_per_sec.is_nan() {
            return Err(ConfigError::new("--churn-per-sec", self.churn_per_sec, "must be between 0 and 100000"));
        }
        at_least("--window-events", self.window_events as u64, 1)?;
        at_least("--progress-notify-seconds", self.progress_notify_seconds, 1)?;
        if !(0.0..=100_000.0).contains(&self.lease_churn_per_sec) || self.lease_churn_per_sec.is_nan() {
            return Err(ConfigError::new("--lease-churn-per-sec", self.lease_churn_per_sec, "must be between 0 and 100000"));
        }
        at_least("--http2-max-streams-per-connection", self.http2_max_streams, 1)?;
        at_least("--bookmark-interval-seconds", self.bookmark_interval_seconds, 1)
    }
}

/// `kache sim`.
#[derive(Debug, Clone, Args)]
pub struct SimArgs {
    /// Address to listen on (loopback only; port 0 picks a free port).
    #[arg(long, env = "KACHE_SIM_LISTEN", default_value = "127.0.0.1:0")]
    pub listen: String,
    /// Write the bound address (`host:port`) to this file once listening.
    #[arg(long, env = "KACHE_SIM_ADDR_FILE")]
    pub addr_file: Option<PathBuf>,
    /// Serve fault switches on this address (loopback only): POST /pause, /resume, /drop,
    /// /down, /up, /restart?warmup_ms=N, /slow?ms=N[&health=1]. The simulator then sits behind a
    /// relay on --listen that the switches pause, cut and take down.
    #[arg(long, env = "KACHE_SIM_FAULT_LISTEN")]
    pub fault_listen: Option<String>,
    /// Write the fault endpoint's bound address to this file.
    #[arg(long, env = "KACHE_SIM_FAULT_ADDR_FILE")]
    pub fault_addr_file: Option<PathBuf>,
    /// The synthetic cluster.
    #[command(flatten)]
    pub cluster: ClusterArgs,
    /// TLS, users and RBAC.
    #[command(flatten)]
    pub auth: SimAuthArgs,
}

/// Pod changes per second of the demo's cluster unless `--churn-per-sec` says otherwise: a
/// watch through the demo shows a few changes a second.
pub const DEMO_CHURN_PER_SEC: &str = "3";

/// `kache demo`.
#[derive(Debug, Clone, Args)]
#[command(mut_arg("churn_per_sec", |a| a.default_value(DEMO_CHURN_PER_SEC)))]
pub struct DemoArgs {
    /// Address to listen on.
    #[arg(long, env = "KACHE_DEMO_LISTEN", default_value = "127.0.0.1:0")]
    pub listen: String,
    /// Write kache's bound address (`host:port`) to this file once it listens.
    #[arg(long, env = "KACHE_DEMO_ADDR_FILE")]
    pub addr_file: Option<PathBuf>,
    /// Where to write the kubeconfig for clients.
    #[arg(long, env = "KACHE_DEMO_KUBECONFIG", default_value = "kache-demo.kubeconfig")]
    pub kubeconfig: PathBuf,
    /// Exit after this many seconds (0 = run until interrupted).
    /// A number of seconds or a duration (`90s`, `1m30s`).
    #[arg(value_parser = seconds, long, env = "KACHE_DEMO_SECONDS", default_value_t = 0)]
    pub seconds: u64,
    /// The synthetic cluster.
    #[command(flatten)]
    pub cluster: ClusterArgs,
    /// Cache settings of the kache in front of it.
    #[command(flatten)]
    pub cache: CacheArgs,
}

/// Reject a listen address that is not loopback: kache serves plain HTTP only there.
pub fn require_loopback(listen: &str) -> Result<(), ConfigError> {
    let addr: std::net::SocketAddr =
        listen.parse().map_err(|e: std::net::AddrParseError| ConfigError::new("--listen", listen, e.to_string()))?;
    if addr.ip().is_loopback() {
        Ok(())
    } else {
        Err(ConfigError::new("--listen", listen, "plain HTTP is only served on a loopback address"))
    }
}

/// `kache kubeconfig`.
#[derive(Debug, Clone, Args)]
pub struct KubeconfigArgs {
    /// URL of the running kache, e.g. `https://kache.kache.svc:443` or `http://127.0.0.1:6444`.
    #[arg(long, env = "KACHE_KUBECONFIG_SERVER")]
    pub server: String,
    /// Kubeconfig whose user credentials are copied (default: KUBECONFIG or ~/.kube/config).
    #[arg(long, env = "KACHE_KUBECONFIG_FROM")]
    pub from_kubeconfig: Option<PathBuf>,
    /// Context of --from-kubeconfig whose user (and namespace) is copied (default: its current context).
    #[arg(long, env = "KACHE_KUBECONFIG_CONTEXT")]
    pub context: Option<String>,
    /// PEM CA bundle that verifies kache's serving certificate; embedded in the kubeconfig.
    #[arg(long, env = "KACHE_KUBECONFIG_CERTIFICATE_AUTHORITY")]
    pub certificate_authority: Option<PathBuf>,
    /// Name of the cluster, user and context written.
    #[arg(long, env = "KACHE_KUBECONFIG_NAME", default_value = "kache")]
    pub name: String,
    /// Where to write the kubeconfig (mode 0600; `-` for standard output).
    #[arg(long, env = "KACHE_KUBECONFIG_OUT")]
    pub out: PathBuf,
}

#[cfg(test)]
mod tests;
