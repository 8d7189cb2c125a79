//! `kache serve`'s own flags: where it listens, its upstream, TLS, who clients are and
//! what they may send, and what it reports.

use super::value::{bytes_text, bytes_usize, seconds, seconds_text};
use super::{at_least, at_least_bytes, at_least_seconds, heading, CacheArgs, ConfigError, DEFAULT_LISTEN};
use crate::auth::Passthrough;
use clap::Args;
use std::path::PathBuf;

/// `kache serve`.
#[derive(Debug, Clone, Args)]
pub struct ServeArgs {
    /// Address to serve the Kubernetes API on (port 0 picks a free port).
    ///
    /// Port 7443 unless told: clear of the apiserver's 6443 and of the admin listener's 9090
    /// in the deploy manifests. Plain HTTP (--insecure-http) is served on loopback only.
    #[arg(long, env = "KACHE_LISTEN", default_value = DEFAULT_LISTEN, value_name = "ADDR", help_heading = heading::LISTEN)]
    pub listen: String,
    /// Write the bound address (`host:port`) to this file once listening.
    #[arg(long, env = "KACHE_ADDR_FILE", value_name = "FILE", help_heading = heading::LISTEN)]
    pub addr_file: Option<PathBuf>,
    /// Serve plain HTTP instead of TLS (loopback addresses only).
    ///
    /// Clients are still authenticated (bearer tokens) and authorized.
    #[arg(long, env = "KACHE_INSECURE_HTTP", help_heading = heading::LISTEN)]
    pub insecure_http: bool,
    /// Write a kubeconfig that points clients at this kache.
    ///
    /// It holds kache's address, the CA of its serving certificate and the user of the
    /// upstream context (mode 0600).
    #[arg(long, env = "KACHE_CLIENT_KUBECONFIG_OUT", value_name = "FILE", help_heading = heading::LISTEN)]
    pub client_kubeconfig_out: Option<PathBuf>,
    /// Kubeconfig of the upstream apiserver.
    ///
    /// Default: KUBECONFIG, ~/.kube/config, or the in-cluster service account.
    #[arg(long, env = "KACHE_UPSTREAM_KUBECONFIG", value_name = "FILE", help_heading = heading::UPSTREAM)]
    pub upstream_kubeconfig: Option<PathBuf>,
    /// Context in the upstream kubeconfig (default: its current context).
    #[arg(long, env = "KACHE_UPSTREAM_CONTEXT", value_name = "NAME", help_heading = heading::UPSTREAM)]
    pub upstream_context: Option<String>,
    /// Cache settings.
    #[command(flatten)]
    pub cache: CacheArgs,
    /// TLS, authentication, authorization and request limits.
    #[command(flatten)]
    pub security: SecurityArgs,
    /// Address of the admin listener (metrics, health); off when unset.
    ///
    /// It serves `/metrics`, `/livez`, `/readyz`, `/healthz` and `/debug/cache` in plain
    /// HTTP, without authentication, on its own port (e.g. `0.0.0.0:9090`), so probes and
    /// scrapes never queue behind clients.
    #[arg(long, env = "KACHE_ADMIN_LISTEN", value_name = "ADDR", help_heading = heading::OBSERVABILITY)]
    pub admin_listen: Option<String>,
    /// Write the admin listener's bound address to this file.
    #[arg(long, env = "KACHE_ADMIN_ADDR_FILE", value_name = "FILE", help_heading = heading::OBSERVABILITY)]
    pub admin_addr_file: Option<PathBuf>,
    /// Log one line per request (log target `kache::access`, at info).
    ///
    /// Each line: user, verb, group, resource, namespace, source (`cache`, `upstream`,
    /// `kache`), the pass-through reason of an upstream answer, status code, bytes of a
    /// cached answer, seconds to its headers. Reads answered from cache never reach the
    /// apiserver's audit log; this is their record.
    #[arg(long, env = "KACHE_ACCESS_LOG", help_heading = heading::OBSERVABILITY)]
    pub access_log: bool,
    /// How long in-flight requests may go on after SIGTERM or SIGINT before kache exits.
    #[arg(
        long = "shutdown-grace",
        alias = "shutdown-grace-seconds",
        env = "KACHE_SHUTDOWN_GRACE_SECONDS",
        value_parser = seconds,
        default_value = seconds_text(30),
        value_name = "DURATION",
        help_heading = heading::CONNECTIONS
    )]
    pub shutdown_grace_seconds: u64,
}

/// TLS, client authentication and authorization, and limits on what clients may send.
#[derive(Debug, Clone, Args)]
pub struct SecurityArgs {
    /// PEM certificate chain to serve (leaf first).
    ///
    /// Without it a CA and a serving certificate are generated at start and the CA is
    /// written into --client-kubeconfig-out. Read again when it changes, as is the key:
    /// new connections use the new files within a second.
    #[arg(long, env = "KACHE_TLS_CERT_FILE", requires = "tls_private_key_file", value_name = "FILE", help_heading = heading::LISTEN)]
    pub tls_cert_file: Option<PathBuf>,
    /// PEM private key of --tls-cert-file.
    #[arg(long, env = "KACHE_TLS_PRIVATE_KEY_FILE", requires = "tls_cert_file", value_name = "FILE", help_heading = heading::LISTEN)]
    pub tls_private_key_file: Option<PathBuf>,
    /// Extra DNS names or IP addresses of the generated serving certificate.
    ///
    /// Besides localhost, the loopback addresses and the listen address; e.g. a Service's
    /// name.
    #[arg(long, env = "KACHE_TLS_SANS", value_delimiter = ',', value_name = "NAMES", help_heading = heading::LISTEN)]
    pub tls_sans: Vec<String>,
    /// PEM CA bundle client certificates are verified against (user = CN, groups = O).
    ///
    /// Read again when it changes, as the serving certificate and key are: new connections
    /// use the new files within a second.
    #[arg(long, env = "KACHE_CLIENT_CA_FILE", value_name = "FILE", help_heading = heading::AUTH)]
    pub client_ca_file: Option<PathBuf>,
    /// Minimum TLS version served, by the apiserver's names: VersionTLS12 or VersionTLS13.
    #[arg(long, env = "KACHE_TLS_MIN_VERSION", default_value = "VersionTLS12", value_name = "VERSION", help_heading = heading::LISTEN)]
    pub tls_min_version: String,
    /// TLS 1.2 cipher suites served, by Go's (the apiserver's) names, comma-separated.
    ///
    /// Default: every suite kache implements (ECDHE with AES-GCM or ChaCha20-Poly1305). TLS
    /// 1.3 suites are not configurable, as in Go.
    #[arg(long, env = "KACHE_TLS_CIPHER_SUITES", value_delimiter = ',', value_name = "SUITES", help_heading = heading::LISTEN)]
    pub tls_cipher_suites: Vec<String>,
    /// Serve requests without credentials as `system:anonymous`; otherwise they get 401.
    ///
    /// Such a request is in the group `system:unauthenticated`, and still subject to
    /// authorization.
    #[arg(long, env = "KACHE_ALLOW_ANONYMOUS", help_heading = heading::AUTH)]
    pub allow_anonymous: bool,
    /// How passed-through requests carry the client's identity.
    ///
    /// `impersonate`: kache's credentials plus Impersonate-* headers; `forward`: the
    /// client's own bearer token (clients without one are impersonated).
    #[arg(
        long,
        env = "KACHE_PASSTHROUGH_AUTH",
        value_enum,
        default_value_t = Passthrough::Impersonate,
        value_name = "HOW",
        help_heading = heading::AUTH
    )]
    pub passthrough_auth: Passthrough,
    /// How long a token the upstream's TokenReview accepted is trusted without asking again.
    #[arg(
        long = "token-cache-ttl",
        alias = "token-cache-ttl-seconds",
        env = "KACHE_TOKEN_CACHE_TTL_SECONDS",
        value_parser = seconds,
        default_value = seconds_text(10),
        value_name = "DURATION",
        help_heading = heading::AUTH
    )]
    pub token_cache_ttl_seconds: u64,
    /// How long a token the upstream refused is refused without asking again.
    #[arg(
        long = "token-cache-negative-ttl",
        alias = "token-cache-negative-ttl-seconds",
        env = "KACHE_TOKEN_CACHE_NEGATIVE_TTL_SECONDS",
        value_parser = seconds,
        default_value = seconds_text(10),
        value_name = "DURATION",
        help_heading = heading::AUTH
    )]
    pub token_cache_negative_ttl_seconds: u64,
    /// How long an allowed SubjectAccessReview decision is reused.
    #[arg(
        long = "authz-cache-allow-ttl",
        alias = "authz-cache-allow-ttl-seconds",
        env = "KACHE_AUTHZ_CACHE_ALLOW_TTL_SECONDS",
        value_parser = seconds,
        default_value = seconds_text(10),
        value_name = "DURATION",
        help_heading = heading::AUTH
    )]
    pub authz_cache_allow_ttl_seconds: u64,
    /// How long a denied SubjectAccessReview decision is reused.
    #[arg(
        long = "authz-cache-deny-ttl",
        alias = "authz-cache-deny-ttl-seconds",
        env = "KACHE_AUTHZ_CACHE_DENY_TTL_SECONDS",
        value_parser = seconds,
        default_value = seconds_text(10),
        value_name = "DURATION",
        help_heading = heading::AUTH
    )]
    pub authz_cache_deny_ttl_seconds: u64,
    /// Entries each of the token and decision caches holds at most.
    ///
    /// Accepted and refused tokens are cached apart, so made-up tokens never push out a real
    /// one's identity. When full, expired entries go first, then those of the user holding
    /// the most (`kache_limit_hits_total{limit="auth-cache-entries"}`).
    #[arg(long, env = "KACHE_AUTH_CACHE_ENTRIES", default_value_t = 10_000, value_name = "N", help_heading = heading::AUTH)]
    pub auth_cache_entries: usize,
    /// TokenReviews, and apart SubjectAccessReviews, in flight at once in each lane.
    ///
    /// Two lanes: renewals of decisions kache has known, and first reviews (new clients,
    /// made-up tokens). Reviews ride connections of their own, apart from informers and
    /// health probes (`kache_limit_hits_total{limit="max-concurrent-reviews"}` counts waits).
    #[arg(long, env = "KACHE_MAX_CONCURRENT_REVIEWS", default_value_t = crate::auth::REVIEW_LANE, value_name = "N", help_heading = heading::AUTH)]
    pub max_concurrent_reviews: usize,
    /// TokenReviews a second that new bearer tokens from one address may cause (0: no bound).
    ///
    /// Tokens kache has never judged, sent from one source address; a second's worth at
    /// once. Known tokens, and renewals of known ones, are not counted; past it a new token
    /// gets 429 with Retry-After, as from the apiserver's max-in-flight filter, and costs the
    /// apiserver nothing (`kache_limit_hits_total{limit="max-token-review-rate-per-address"}`).
    /// Behind a proxy that hides clients' addresses they all share its one.
    #[arg(
        long,
        env = "KACHE_MAX_TOKEN_REVIEW_RATE_PER_ADDRESS",
        default_value_t = crate::auth::TOKEN_REVIEW_RATE,
        value_name = "N",
        help_heading = heading::AUTH
    )]
    pub max_token_review_rate_per_address: u32,
    /// Cached reads (GET and LIST) in flight at once over all clients (0: no bound).
    ///
    /// Watches are not counted; beyond it 429 with Retry-After.
    #[arg(long, env = "KACHE_MAX_INFLIGHT_READS", default_value_t = 4000, value_name = "N", help_heading = heading::LIMITS)]
    pub max_inflight_reads: usize,
    /// Cached reads in flight at once for one user (0: no bound).
    ///
    /// The ServiceAccounts of one namespace count as one user. Past half of
    /// `--max-inflight-reads`, a user gets a place only while it holds less than its share
    /// (the cap over twice the users with reads in flight), so no number of accounts locks
    /// the others out.
    #[arg(long, env = "KACHE_MAX_INFLIGHT_READS_PER_USER", default_value_t = 400, value_name = "N", help_heading = heading::LIMITS)]
    pub max_inflight_reads_per_user: usize,
    /// How long an answer may wait for its client to take more before it is ended (0: no bound).
    ///
    /// An HTTP/2 stream that grants no window, a socket that does not drain: the answer's
    /// HTTP/2 stream is reset (RST_STREAM), or its HTTP/1.1 connection closed. Its in-flight
    /// place and queued watch bytes are released then
    /// (`kache_limit_hits_total{limit="stall-timeout-seconds"}`). A watch with nothing to
    /// send is not stalled.
    #[arg(
        long = "stall-timeout",
        alias = "stall-timeout-seconds",
        env = "KACHE_STALL_TIMEOUT_SECONDS",
        value_parser = seconds,
        default_value = seconds_text(crate::serve::server::stall::STALL_TIMEOUT.as_secs()),
        value_name = "DURATION",
        help_heading = heading::CONNECTIONS
    )]
    pub stall_timeout_seconds: u64,
    /// How long from accept a connection has to send its first bytes after TLS.
    ///
    /// Its first 24 bytes: the HTTP/2 preface, or an HTTP/1.1 request line; else it is
    /// closed (`kache_limit_hits_total{limit="preface-timeout-seconds"}`). Its first
    /// request's headers must come within `--header-read-timeout` of accept.
    #[arg(
        long = "preface-timeout",
        alias = "preface-timeout-seconds",
        env = "KACHE_PREFACE_TIMEOUT_SECONDS",
        value_parser = seconds,
        default_value = seconds_text(crate::serve::server::PREFACE_TIMEOUT.as_secs()),
        value_name = "DURATION",
        help_heading = heading::CONNECTIONS
    )]
    pub preface_timeout_seconds: u64,
    /// Client connections open at once (0: the file descriptor limit less 1,024).
    ///
    /// Past it a new connection is closed at accept
    /// (`kache_limit_hits_total{limit="max-connections"}`, `kache_connections_open`). 0: the
    /// process's file descriptor limit less 1,024 (for the upstream and files), at least half
    /// of it.
    #[arg(long, env = "KACHE_MAX_CONNECTIONS", default_value_t = 0, value_name = "N", help_heading = heading::CONNECTIONS)]
    pub max_connections: usize,
    /// Client connections open at once from one source address (0: no bound).
    ///
    /// Behind a proxy that hides clients' addresses they all share its one.
    #[arg(long, env = "KACHE_MAX_CONNECTIONS_PER_ADDRESS", default_value_t = 0, value_name = "N", help_heading = heading::CONNECTIONS)]
    pub max_connections_per_address: usize,
    /// Largest request head (HTTP/1.1 request line and headers; HTTP/2 header list).
    #[arg(
        long = "max-header-size",
        alias = "max-header-bytes",
        env = "KACHE_MAX_HEADER_BYTES",
        value_parser = bytes_usize,
        default_value = bytes_text(1 << 20),
        value_name = "SIZE",
        help_heading = heading::CONNECTIONS
    )]
    pub max_header_bytes: usize,
    /// Longest request URI (path and query); longer ones get 414.
    #[arg(
        long = "max-uri-size",
        alias = "max-uri-bytes",
        env = "KACHE_MAX_URI_BYTES",
        value_parser = bytes_usize,
        default_value = bytes_text(64 * 1024),
        value_name = "SIZE",
        help_heading = heading::CONNECTIONS
    )]
    pub max_uri_bytes: usize,
    /// How long a client has to send a request's headers (HTTP/1.1) or finish the TLS handshake.
    ///
    /// The clock starts when an HTTP/1.1 connection goes idle, so an idle keep-alive
    /// connection is closed after it (over TLS with a close_notify; clients open a new one).
    #[arg(
        long = "header-read-timeout",
        alias = "header-read-timeout-seconds",
        env = "KACHE_HEADER_READ_TIMEOUT_SECONDS",
        value_parser = seconds,
        default_value = seconds_text(32),
        value_name = "DURATION",
        help_heading = heading::CONNECTIONS
    )]
    pub header_read_timeout_seconds: u64,
    /// HTTP/2 streams one client connection may have open at once.
    #[arg(
        long,
        env = "KACHE_HTTP2_MAX_STREAMS_PER_CONNECTION",
        default_value_t = crate::serve::server::MAX_STREAMS,
        value_name = "N",
        help_heading = heading::CONNECTIONS
    )]
    pub http2_max_streams_per_connection: u32,
    /// How long a write to a client may make no progress before its connection is closed.
    ///
    /// No progress: the client takes no byte. Every answer and watch on the connection ends
    /// with it (`kache_limit_hits_total{limit="write-timeout-seconds"}`, and a warning in
    /// the log with the client's address). A slow reader that takes bytes is never cut.
    #[arg(
        long = "write-timeout",
        alias = "write-timeout-seconds",
        env = "KACHE_WRITE_TIMEOUT_SECONDS",
        value_parser = seconds,
        default_value = seconds_text(crate::serve::server::WRITE_TIMEOUT.as_secs()),
        value_name = "DURATION",
        help_heading = heading::CONNECTIONS
    )]
    pub write_timeout_seconds: u64,
    /// Answers being indented or gzip-compressed at once (0: no bound).
    ///
    /// Indented: `pretty`, or a curl, Wget or browser user agent; gzip-compressed, a
    /// WatchList's too while its initial state is sent. Each is encoded a frame at a time as
    /// it is sent, never held whole. Past it an answer goes out compact or uncompressed
    /// (`kache_limit_hits_total{limit="max-concurrent-encodes"}`).
    #[arg(
        long,
        env = "KACHE_MAX_CONCURRENT_ENCODES",
        default_value_t = crate::serve::compress::MAX_ENCODES,
        value_name = "N",
        help_heading = heading::LIMITS
    )]
    pub max_concurrent_encodes: usize,
    /// Niceness of the threads that encode large answers, 0 to 19 (0: no such threads).
    ///
    /// The low-priority lane: threads of their own (`kache-lane`, one per core), niced this
    /// much above kache's own, that indent `pretty` answers and gzip-compress answers of more
    /// than 1 MiB, a frame per job, so one client's encodes of large answers take the cores
    /// only when kache's other threads, and processes beside it at its priority (an
    /// apiserver on the same machine), do not need them (Linux niceness is per thread;
    /// between processes it weighs when `kernel.sched_autogroup_enabled` is 0). 0: no lane,
    /// the encodes run on the shared blocking pool at kache's priority.
    #[arg(
        long,
        env = "KACHE_LOW_PRIORITY_NICE",
        default_value_t = crate::serve::lane::NICE,
        value_parser = clap::value_parser!(i32).range(0..=19),
        value_name = "NICE",
        help_heading = heading::LIMITS
    )]
    pub low_priority_nice: i32,
    /// Bytes of events queued for one watch's client that it has not taken yet.
    ///
    /// Past them the watch waits for the client, and ends it after 15 s without progress
    /// (it then resumes from its resourceVersion). A single event larger than this is queued
    /// alone (`kache_limit_hits_total{limit="max-watch-buffer-bytes"}` counts the waits).
    #[arg(
        long = "max-watch-buffer-size",
        alias = "max-watch-buffer-bytes",
        env = "KACHE_MAX_WATCH_BUFFER_BYTES",
        value_parser = bytes_usize,
        default_value = bytes_text(crate::serve::handler::WATCH_BUFFER_BYTES as u64),
        value_name = "SIZE",
        help_heading = heading::WATCH_BUFFERS
    )]
    pub max_watch_buffer_bytes: usize,
    /// Bytes of events all watches together may have queued for their clients.
    ///
    /// Past them watches wait for room as for a slow client
    /// (`kache_limit_hits_total{limit="max-watch-buffers-bytes"}`).
    #[arg(
        long = "max-watch-buffers-size",
        alias = "max-watch-buffers-bytes",
        env = "KACHE_MAX_WATCH_BUFFERS_BYTES",
        value_parser = bytes_usize,
        default_value = bytes_text(crate::serve::handler::WATCH_BUFFERS_BYTES as u64),
        value_name = "SIZE",
        help_heading = heading::WATCH_BUFFERS
    )]
    pub max_watch_buffers_bytes: usize,
    /// Bytes of events the watches of one connection may have queued together (0: no bound of its own).
    ///
    /// Past them its watches wait for room
    /// (`kache_limit_hits_total{limit="max-watch-buffers-bytes-per-connection"}`).
    #[arg(
        long = "max-watch-buffers-size-per-connection",
        alias = "max-watch-buffers-bytes-per-connection",
        env = "KACHE_MAX_WATCH_BUFFERS_BYTES_PER_CONNECTION",
        value_parser = bytes_usize,
        default_value = bytes_text(crate::serve::server::WATCH_BUFFERS_PER_CONNECTION as u64),
        value_name = "SIZE",
        help_heading = heading::WATCH_BUFFERS
    )]
    pub max_watch_buffers_bytes_per_connection: usize,
    /// Bytes of events the watches of one user may have queued together (0: no bound of its own).
    ///
    /// The ServiceAccounts of a namespace count as one user; past them the user's watches
    /// wait for room (`kache_limit_hits_total{limit="max-watch-buffers-bytes-per-user"}`).
    #[arg(
        long = "max-watch-buffers-size-per-user",
        alias = "max-watch-buffers-bytes-per-user",
        env = "KACHE_MAX_WATCH_BUFFERS_BYTES_PER_USER",
        value_parser = bytes_usize,
        default_value = bytes_text(crate::serve::handler::WATCH_BUFFERS_PER_USER as u64),
        value_name = "SIZE",
        help_heading = heading::WATCH_BUFFERS
    )]
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
        at_least_bytes("--max-header-size", self.max_header_bytes, 8192)?;
        at_least_bytes("--max-uri-size", self.max_uri_bytes, 256)?;
        at_least_seconds("--header-read-timeout", self.header_read_timeout_seconds, 1)?;
        at_least_seconds("--write-timeout", self.write_timeout_seconds, 1)?;
        at_least_bytes("--max-watch-buffer-size", self.max_watch_buffer_bytes, 64 * 1024)?;
        at_least_bytes("--max-watch-buffers-size", self.max_watch_buffers_bytes, self.max_watch_buffer_bytes)?;
        at_least("--http2-max-streams-per-connection", self.http2_max_streams_per_connection, 1)?;
        at_least_seconds("--preface-timeout", self.preface_timeout_seconds, 1)?;
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
