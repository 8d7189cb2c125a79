//! Command-line configuration. Every flag can also be set by a `KACHE_...` environment
//! variable; everything is validated before a port is bound.
//!
//! Flag names carry no unit; the value carries it:
//! - a duration flag is named for what it times (`--stall-timeout`, `--serve-stale`,
//!   `--token-cache-ttl`) and takes a Go duration (`90s`, `1m30s`, `500ms`, `2h`);
//! - a size flag is named `-size` (`--cache-window-size`, `--max-header-size`; a byte rate
//!   `-rate`) and takes a Kubernetes quantity of bytes (`1024`, `64Ki`, `32Mi`, `1.5Gi`,
//!   `500M`); `--help` shows defaults in the same forms.
//!
//! The names these flags had before, with their unit (`--stall-timeout-seconds`,
//! `--consistent-wait-ms`, `--cache-window-bytes`), stay as hidden aliases, and the
//! environment variables keep theirs (`KACHE_STALL_TIMEOUT_SECONDS`): a bare number is read
//! in that unit (seconds, milliseconds, bytes), so an old setting keeps its meaning.
//!
//! A setting kept in whole seconds refuses `1.5s`; the sizes take whole bytes.
//!
//! `kache serve --help` groups its flags under the headings of [`heading`]; each flag's doc
//! opens with a one-line summary (what `-h` shows), then paragraphs `--help` adds.
//!
//! Files: `serve` (`kache serve`'s own flags), `cache` (its cache settings, shared with
//! `kache demo`), `sim` (`kache sim` and `kache demo`), `value` (the value forms),
//! `manual` (`kache completion`, `kache man`).

use clap::{Args, Parser, Subcommand};
use std::path::PathBuf;

mod cache;
pub mod manual;
mod serve;
mod sim;
mod value;

pub use cache::{CacheArgs, CheaperReads, RevisionLedger};
pub use serve::{SecurityArgs, ServeArgs};
pub use sim::{ClusterArgs, DemoArgs, SimArgs, SimAuthArgs, DEMO_CHURN_PER_SEC};
pub use value::{bytes, millis, parse_go_duration, seconds};
use value::{bytes_text, seconds_text};

/// The address `kache serve` listens on unless told: clear of the apiserver's 6443 and of
/// 9090, where the deploy manifests put the admin listener.
pub const DEFAULT_LISTEN: &str = "127.0.0.1:7443";

/// The headings `kache serve --help` groups its flags under, in the order it shows them.
pub mod heading {
    /// Where and how clients connect.
    pub const LISTEN: &str = "Listening and TLS";
    /// The apiserver kache caches and passes requests to.
    pub const UPSTREAM: &str = "Upstream";
    /// What is cached and for how long.
    pub const CACHING: &str = "Caching";
    /// When a read is answered from memory, and how fresh it must be.
    pub const FRESHNESS: &str = "Freshness";
    /// What one client, or all together, may ask at once.
    pub const LIMITS: &str = "Limits";
    /// Who a client is and what it may read.
    pub const AUTH: &str = "Authentication and authorization";
    /// Client connections: how many, how large, how slow.
    pub const CONNECTIONS: &str = "Connections";
    /// Bytes of events queued for watches' clients.
    pub const WATCH_BUFFERS: &str = "Watch buffers";
    /// Logs, metrics and health.
    pub const OBSERVABILITY: &str = "Observability";
}

/// How the value forms are explained under `kache serve --help`.
const VALUE_FORMS: &str =
    "DURATION: a Go duration (90s, 1m30s, 500ms, 2h). SIZE: a Kubernetes quantity of bytes (1024, 64Ki, 32Mi, 1.5Gi, 500M).
Every flag can also be set by the KACHE_... environment variable shown; there a bare number is in the unit the variable's name ends with.";

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
fn at_least(flag: &str, value: impl Into<u64> + Copy, min: u64) -> Result<(), ConfigError> {
    let v: u64 = value.into();
    if v < min {
        return Err(ConfigError::new(flag, v, format!("must be at least {min}")));
    }
    Ok(())
}

/// Duration flag `flag` (in seconds) must be at least `min` seconds.
fn at_least_seconds(flag: &str, secs: u64, min: u64) -> Result<(), ConfigError> {
    if secs < min {
        return Err(ConfigError::new(flag, seconds_text(secs), format!("must be at least {}", seconds_text(min))));
    }
    Ok(())
}

/// Size flag `flag` must be at least `min` bytes.
fn at_least_bytes(flag: &str, n: usize, min: usize) -> Result<(), ConfigError> {
    if n < min {
        return Err(ConfigError::new(flag, bytes_text(n as u64), format!("must be at least {}", bytes_text(min as u64))));
    }
    Ok(())
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
// `term_width = 0`: no wrapping, so `-h` keeps each flag on one line, whatever the terminal.
#[derive(Debug, Parser)]
#[command(name = "kache", version = crate::VERSION, about, term_width = 0)]
pub struct Cli {
    /// What to run.
    #[command(subcommand)]
    pub command: Command,
    /// Log filter (tracing env-filter syntax, e.g. `info` or `kache=debug`).
    #[arg(long, global = true, env = "KACHE_LOG_LEVEL", default_value = "info", value_name = "FILTER", help_heading = heading::OBSERVABILITY)]
    pub log_level: String,
    /// Log format.
    #[arg(long, global = true, env = "KACHE_LOG_FORMAT", value_enum, default_value_t = LogFormat::Text, value_name = "FORMAT", help_heading = heading::OBSERVABILITY)]
    pub log_format: LogFormat,
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
    #[command(after_help = VALUE_FORMS)]
    Serve(ServeArgs),
    /// Write a kubeconfig that points a client at a running kache, with the user's
    /// credentials copied from another kubeconfig.
    Kubeconfig(KubeconfigArgs),
    /// Print what a running kache's caches hold (its admin listener's `/debug/cache`).
    Status(StatusArgs),
    /// Print a shell completion script (e.g. `source <(kache completion bash)`).
    Completion(manual::CompletionArgs),
    /// Print a man page in roff (e.g. `kache man serve | man -l -`).
    Man(manual::ManArgs),
}

/// `kache status`.
#[derive(Debug, Clone, Args)]
pub struct StatusArgs {
    /// The admin listener of the kache to ask (`host:port` or `http://host:port`), e.g. a
    /// `kubectl port-forward` to its port 9090.
    #[arg(long, env = "KACHE_STATUS_ADMIN", default_value = "127.0.0.1:9090", value_name = "ADDR")]
    pub admin: String,
    /// Print the `/debug/cache` JSON instead of a table.
    #[arg(long, env = "KACHE_STATUS_JSON")]
    pub json: bool,
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
    /// URL of the running kache, e.g. `https://kache.kache.svc:443` or `http://127.0.0.1:7443`.
    #[arg(long, env = "KACHE_KUBECONFIG_SERVER", value_name = "URL")]
    pub server: String,
    /// Kubeconfig whose user credentials are copied (default: KUBECONFIG or ~/.kube/config).
    #[arg(long, env = "KACHE_KUBECONFIG_FROM", value_name = "FILE")]
    pub from_kubeconfig: Option<PathBuf>,
    /// Context of --from-kubeconfig whose user (and namespace) is copied (default: its current context).
    #[arg(long, env = "KACHE_KUBECONFIG_CONTEXT", value_name = "NAME")]
    pub context: Option<String>,
    /// PEM CA bundle that verifies kache's serving certificate; embedded in the kubeconfig.
    #[arg(long, env = "KACHE_KUBECONFIG_CERTIFICATE_AUTHORITY", value_name = "FILE")]
    pub certificate_authority: Option<PathBuf>,
    /// Name of the cluster, user and context written.
    #[arg(long, env = "KACHE_KUBECONFIG_NAME", default_value = "kache")]
    pub name: String,
    /// Where to write the kubeconfig (mode 0600; `-` for standard output).
    #[arg(long, env = "KACHE_KUBECONFIG_OUT", value_name = "FILE")]
    pub out: PathBuf,
}

#[cfg(test)]
mod tests;
