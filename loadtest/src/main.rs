//! kache-loadtest: named, versioned load scenarios (`loadtest/scenarios/*.toml`) run against
//! an upstream apiserver directly and through kache in front of it, in one run, so every
//! figure comes with its ratio. Self-contained by default (starts `kache sim` and
//! `kache serve`); or point it at kubeconfigs (any server, TLS and credentials kube's client
//! supports). Writes Markdown, JSON and SVG reports; thresholds (`--max-p99`, `--min-rps`,
//! `--max-error-rate`, `--max-lag-p99`) set the exit status. `tenant` is a hostile-tenant
//! probe of any endpoint on this machine (what honest clients see while a tenant attacks).
//!
//! Modules: `scenario` (the files), `env` (the processes started), `endpoint` (targets read
//! from kubeconfigs by kube's `Config`), `client` (hyper client), `bare` (the closed loop's
//! HTTP/1.1 client), `thresholds`, `wire` (list RVs, watch frames, change stamps), `phases` (the
//! load drivers), `stats` and `procs` (figures), `progress` (bars), `report` (output),
//! `tenant` (the hostile-tenant probe).

mod bare;
mod client;
mod endpoint;
mod env;
mod phases;
mod procs;
mod progress;
mod report;
mod scenario;
mod stats;
mod tenant;
mod thresholds;
mod wire;

use anyhow::{bail, Context};
use clap::{Parser, Subcommand};
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// Load scenarios for kache and any Kubernetes API endpoint.
#[derive(Parser, Debug)]
#[command(name = "kache-loadtest", version)]
struct Cli {
    #[command(subcommand)]
    command: Cmd,
}

#[derive(Subcommand, Debug)]
#[allow(clippy::large_enum_variant, reason = "parsed once per process")]
enum Cmd {
    /// Run scenarios (names from the scenarios directory, or paths to files).
    Run(RunArgs),
    /// List the scenarios.
    List {
        #[arg(long, default_value_os_t = default_scenarios())]
        scenarios_dir: PathBuf,
    },
    /// Render the Markdown report and the plot again from a report's JSON.
    Render {
        /// `NAME-vVERSION.json` files written by `run`.
        #[arg(required = true)]
        json: Vec<PathBuf>,
    },
    /// Attack an endpoint as a hostile tenant (zero-window watches, held reads, silent
    /// connections, huge label selectors) and measure what honest clients see meanwhile.
    Tenant(tenant::TenantArgs),
    /// A trivial hyper server returning a static body (the reference limit; started by `run`).
    #[command(hide = true)]
    TrivialServer {
        #[arg(long)]
        body_bytes: usize,
        #[arg(long)]
        addr_file: PathBuf,
    },
}

#[derive(clap::Args, Debug)]
struct RunArgs {
    /// Scenario names (e.g. `kubelets`) or paths to scenario files.
    #[arg(required = true)]
    scenarios: Vec<String>,
    /// Directory of scenario files.
    #[arg(long, default_value_os_t = default_scenarios())]
    scenarios_dir: PathBuf,
    /// The kache binary, for self-contained runs.
    #[arg(long, default_value = "target/release/kache")]
    kache_bin: PathBuf,
    /// Where the reports go.
    #[arg(long, default_value = "loadtest/results")]
    out: PathBuf,
    /// Scratch directory (addresses, kubeconfigs, server logs).
    #[arg(long, default_value = "/tmp/kache-loadtest")]
    work_dir: PathBuf,
    /// The upstream's kubeconfig (instead of starting `kache sim` and `kache serve`): its
    /// server, TLS and credentials as kube's client reads them (tokens, token files, client
    /// certificates, exec plugins, impersonation).
    #[arg(long)]
    direct_kubeconfig: Option<PathBuf>,
    /// The context of --direct-kubeconfig (default: its current context).
    #[arg(long, requires = "direct_kubeconfig")]
    direct_context: Option<String>,
    /// kache's kubeconfig (e.g. the one `kache serve --client-kubeconfig-out` writes). With
    /// only one of the two kubeconfigs, the run measures that target alone.
    #[arg(long)]
    kache_kubeconfig: Option<PathBuf>,
    /// The context of --kache-kubeconfig (default: its current context).
    #[arg(long, requires = "kache_kubeconfig")]
    kache_context: Option<String>,
    /// Let phases that write (`writes`, a watch phase's `patch_rate`) PATCH pods of a cluster
    /// named by a kubeconfig (the self-contained simulator is always written to).
    #[arg(long)]
    allow_writes: bool,
    #[command(flatten)]
    thresholds: thresholds::Thresholds,
    /// PID of kache, to report its CPU and RSS (external runs).
    #[arg(long)]
    kache_pid: Option<u32>,
    /// PID of the upstream (external runs).
    #[arg(long)]
    upstream_pid: Option<u32>,
    /// kache's admin address `host:port` (external runs; the memory phase reads /metrics).
    #[arg(long)]
    kache_admin: Option<String>,
    /// Run only against this target (`direct` or `kache`).
    #[arg(long)]
    only: Option<String>,
    /// Run the servers (the simulator, kache, the trivial reference server) on CPU 1 and
    /// this load generator on CPU 0, as if they ran on separate machines (Linux, through
    /// `taskset`). Without it every process shares every CPU.
    #[arg(long)]
    split_cores: bool,
}

/// The CPUs this process may run on, as `/proc/self/status` lists them (`0-1`, `0`, ...).
fn allowed_cpus() -> String {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    status.lines().find_map(|l| l.strip_prefix("Cpus_allowed_list:")).map(|v| v.trim().to_string()).unwrap_or_default()
}

/// Whether the CPU list `list` (`0-3,6`) holds `cpu`.
fn holds(list: &str, cpu: &str) -> bool {
    let Ok(cpu) = cpu.parse::<u32>() else { return false };
    list.split(',').any(|r| match r.split_once('-') {
        Some((a, b)) => a.parse::<u32>().is_ok_and(|a| a <= cpu) && b.parse::<u32>().is_ok_and(|b| cpu <= b),
        None => r.parse::<u32>() == Ok(cpu),
    })
}

/// For `--split-cores`: run this command again on the load generator's CPU (before any
/// runtime thread exists, so the runtime sizes itself to the one CPU and every thread
/// stays there). Returns only when this process already runs there alone.
fn split_cores() -> anyhow::Result<()> {
    use std::os::unix::process::CommandExt;
    let allowed = allowed_cpus();
    if allowed == phases::LOADGEN_CPU {
        return Ok(());
    }
    if !holds(&allowed, phases::LOADGEN_CPU) || !holds(&allowed, phases::SERVER_CPU) {
        bail!("--split-cores needs CPUs {} and {}; this process may use {allowed:?}", phases::LOADGEN_CPU, phases::SERVER_CPU);
    }
    let nproc = std::thread::available_parallelism().map_or(1, |n| n.get());
    let err = std::process::Command::new("taskset")
        .args(["-c", phases::LOADGEN_CPU])
        .arg(std::env::current_exe()?)
        .args(std::env::args_os().skip(1))
        .env(report::NPROC_ENV, nproc.to_string())
        .exec();
    Err(anyhow::Error::from(err).context("running again under `taskset` for --split-cores"))
}

fn default_scenarios() -> PathBuf {
    let here = PathBuf::from("loadtest/scenarios");
    if here.is_dir() {
        here
    } else {
        Path::new(env!("CARGO_MANIFEST_DIR")).join("scenarios")
    }
}

fn resolve(dir: &Path, s: &str) -> PathBuf {
    let p = PathBuf::from(s);
    if p.is_file() {
        p
    } else {
        dir.join(format!("{s}.toml"))
    }
}

fn git_commit() -> String {
    let out = |args: &[&str]| {
        std::process::Command::new("git")
            .args(args)
            .output()
            .ok()
            .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
            .unwrap_or_default()
    };
    let rev = out(&["rev-parse", "--short", "HEAD"]);
    let dirty = !out(&["status", "--porcelain", "--untracked-files=no", "--", "src", "Cargo.toml", "Cargo.lock"]).is_empty();
    if dirty {
        format!("{rev} (src modified)")
    } else {
        rev
    }
}

/// Path, modification time (unix seconds) and size of a binary.
fn binary_identity(path: &Path) -> String {
    match std::fs::metadata(path) {
        Ok(m) => {
            let mtime = m.modified().ok().and_then(|t| t.duration_since(UNIX_EPOCH).ok()).map(|d| d.as_secs()).unwrap_or(0);
            format!("`{}` (modified unix {mtime}, {} bytes)", path.display(), m.len())
        }
        Err(e) => format!("`{}` ({e})", path.display()),
    }
}

fn main() -> anyhow::Result<()> {
    let cli = Cli::parse();
    endpoint::install_crypto_provider();
    match cli.command {
        Cmd::TrivialServer { body_bytes, addr_file } => phases::reference::serve_trivial(body_bytes, &addr_file),
        Cmd::Render { json } => render(&json),
        Cmd::List { scenarios_dir } => list(&scenarios_dir),
        Cmd::Run(args) => run(args),
        Cmd::Tenant(args) => tenant::run(args),
    }
}

/// `render`: the Markdown report and the plot again, next to each JSON report.
fn render(json: &[PathBuf]) -> anyhow::Result<()> {
    for f in json {
        let rep: report::RunReport = serde_json::from_slice(&std::fs::read(f)?).with_context(|| format!("reading {}", f.display()))?;
        let dir = f.parent().unwrap_or(Path::new("."));
        let stem = f.file_stem().and_then(|s| s.to_str()).context("file name")?;
        report::write(dir, stem, &rep)?;
        eprintln!("rendered {}/{stem}.{{md,svg}}", dir.display());
    }
    Ok(())
}

/// `list`: each scenario's name, version and first line of description.
fn list(scenarios_dir: &Path) -> anyhow::Result<()> {
    let mut files: Vec<_> = std::fs::read_dir(scenarios_dir)?
        .filter_map(|e| e.ok())
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|e| e == "toml"))
        .collect();
    files.sort();
    for f in files {
        let s = scenario::load(&f)?;
        println!("{:<14} v{}  {}", s.name, s.version, s.description.lines().next().unwrap_or(""));
    }
    Ok(())
}

/// `run`: the scenarios, then the thresholds' verdict (exit status 3 when one failed).
fn run(args: RunArgs) -> anyhow::Result<()> {
    // Placement is fixed before the runtime starts: every scenario of a run shares it.
    let scenarios = args.scenarios.iter().map(|s| scenario::load(&resolve(&args.scenarios_dir, s))).collect::<anyhow::Result<Vec<_>>>()?;
    let split = args.splits_cores(&scenarios)?;
    args.writes_allowed(&scenarios)?;
    if split {
        args.split_possible(&scenarios)?;
        split_cores()?;
    }
    let server_cpu = split.then_some(phases::SERVER_CPU);
    let rt = tokio::runtime::Builder::new_multi_thread().enable_all().build()?;
    let checks = rt.block_on(run_until_stopped(&args, scenarios, server_cpu))?;
    let failed: Vec<&thresholds::Check> = checks.iter().filter(|c| !c.met).collect();
    if !checks.is_empty() {
        eprintln!("thresholds: {} checked, {} failed", checks.len(), failed.len());
    }
    for c in &failed {
        eprintln!("  threshold failed: {c}");
    }
    if !failed.is_empty() {
        rt.shutdown_background();
        std::process::exit(thresholds::EXIT_FAILED);
    }
    Ok(())
}

/// [`run_all`], or an error on SIGINT or SIGTERM (returning, so the servers started are
/// stopped on drop).
async fn run_until_stopped(
    args: &RunArgs,
    scenarios: Vec<scenario::Scenario>,
    server_cpu: Option<&'static str>,
) -> anyhow::Result<Vec<thresholds::Check>> {
    let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())?;
    tokio::select! {
        r = run_all(args, scenarios, server_cpu) => r,
        _ = tokio::signal::ctrl_c() => bail!("interrupted"),
        _ = term.recv() => bail!("terminated"),
    }
}

impl RunArgs {
    /// Whether the targets come from kubeconfigs rather than processes this run starts.
    fn external(&self) -> bool {
        self.direct_kubeconfig.is_some() || self.kache_kubeconfig.is_some()
    }

    /// Whether the run splits the cores: `--split-cores`, or its scenarios' placement (all
    /// of them or none).
    fn splits_cores(&self, scenarios: &[scenario::Scenario]) -> anyhow::Result<bool> {
        let split: Vec<bool> = scenarios.iter().map(|s| s.placement.split_cores).collect();
        if !self.split_cores && split.contains(&true) && split.contains(&false) {
            bail!("scenarios with [placement] split_cores and without it cannot run in one invocation");
        }
        Ok(self.split_cores || split.contains(&true))
    }

    /// Refuses phases that PATCH pods of a cluster named by a kubeconfig without --allow-writes.
    fn writes_allowed(&self, scenarios: &[scenario::Scenario]) -> anyhow::Result<()> {
        if self.external() && !self.allow_writes {
            if let Some(s) = scenarios.iter().find(|s| s.phases.iter().any(scenario::Phase::writes)) {
                bail!("scenario {}: its phases PATCH pods, and the targets come from kubeconfigs: pass --allow-writes to write to that cluster", s.name);
            }
        }
        Ok(())
    }

    /// Refuses to split the cores where the run does not start the servers, or where a
    /// phase runs inside this process.
    fn split_possible(&self, scenarios: &[scenario::Scenario]) -> anyhow::Result<()> {
        if self.external() {
            bail!("--split-cores places the servers this run starts; it cannot place external endpoints");
        }
        if let Some(s) = scenarios.iter().find(|s| s.phases.iter().any(|p| matches!(p, scenario::Phase::LoopbackReference { .. }))) {
            bail!("scenario {}: the loopback reference runs inside this process and cannot be split across cores; run it without --split-cores", s.name);
        }
        Ok(())
    }

    /// The targets named by kubeconfigs: the upstream first.
    async fn kubeconfig_targets(&self) -> anyhow::Result<Vec<env::Target>> {
        let mut t = Vec::new();
        if let Some(d) = &self.direct_kubeconfig {
            t.push(env::Target::from_kubeconfig("direct", d, self.direct_context.as_deref()).await?);
        }
        if let Some(k) = &self.kache_kubeconfig {
            t.push(env::Target::from_kubeconfig("kache", k, self.kache_context.as_deref()).await?);
        }
        Ok(t)
    }
}

/// Run `scenarios` in order, the servers on `server_cpu` if given; the thresholds checked.
async fn run_all(
    args: &RunArgs,
    scenarios: Vec<scenario::Scenario>,
    server_cpu: Option<&'static str>,
) -> anyhow::Result<Vec<thresholds::Check>> {
    let mut checks = Vec::new();
    for s in scenarios {
        checks.extend(run_one(args, s, server_cpu).await?);
    }
    Ok(checks)
}

/// One scenario: its targets (from kubeconfigs, or servers started until it ends), its
/// phases, its report.
async fn run_one(args: &RunArgs, s: scenario::Scenario, server_cpu: Option<&'static str>) -> anyhow::Result<Vec<thresholds::Check>> {
    let machine = report::Machine::detect();
    let started_unix = SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_secs()).unwrap_or(0);
    eprintln!("== scenario {} v{}", s.name, s.version);
    let work_dir = args.work_dir.join(&s.name);
    std::fs::create_dir_all(&work_dir)?;
    let (targets, observed, _started) = start_targets(args, &s, &work_dir, server_cpu).await?;
    let upstream = targets[0].clone();
    let names = phases::names(&upstream).await.context("reading node and pod names from the upstream")?;
    eprintln!("cluster: {} nodes, {} apps, {} pods sampled", names.nodes.len(), names.apps.len(), names.pods.len());
    let ctx = phases::Ctx { upstream, observed, names, self_exe: std::env::current_exe()?, work_dir, server_cpu };
    let results = run_phases(args, &ctx, &s, &targets).await?;
    let rep = report::RunReport {
        targets: report::targets(&results),
        scenario: s.clone(),
        started_unix,
        commit: git_commit(),
        kache_binary: binary_identity(&args.kache_bin),
        command: std::env::args().collect::<Vec<_>>().join(" "),
        machine,
        placement: placement(server_cpu),
        self_contained: !args.external(),
        checks: args.thresholds.check(&results),
        thresholds: args.thresholds.any().then(|| args.thresholds.clone()),
        results,
    };
    let stem = format!("{}-v{}", s.name, s.version);
    report::write(&args.out, &stem, &rep)?;
    eprintln!("wrote {}/{stem}.{{md,json,svg}}", args.out.display());
    for t in &rep.targets {
        eprintln!("  target: {} -> {:?}: {}", t.target, t.met, t.figure);
    }
    for c in &rep.checks {
        eprintln!("  threshold: {c}");
    }
    Ok(rep.checks)
}

/// The targets named by kubeconfigs, or `kache sim` and `kache serve` started (stopped when
/// the [`env::Started`] returned is dropped).
async fn start_targets(
    args: &RunArgs,
    s: &scenario::Scenario,
    work_dir: &Path,
    server_cpu: Option<&'static str>,
) -> anyhow::Result<(Vec<env::Target>, env::Observed, Option<env::Started>)> {
    if args.external() {
        let t = args.kubeconfig_targets().await?;
        let observed = env::Observed { kache_pid: args.kache_pid, upstream_pid: args.upstream_pid, kache_admin: args.kache_admin.clone() };
        return Ok((t, observed, None));
    }
    let log = work_dir.join("servers.log");
    let (t, o, started) = env::start(&args.kache_bin, &s.cluster, &s.kache, work_dir, &log, server_cpu).await?;
    Ok((t, o, Some(started)))
}

/// Each phase of `s` against each target it runs on (a reference phase once, on the last
/// target; the others on every target `--only` leaves), a line printed per result.
async fn run_phases(
    args: &RunArgs,
    ctx: &phases::Ctx,
    s: &scenario::Scenario,
    targets: &[env::Target],
) -> anyhow::Result<Vec<stats::PhaseResult>> {
    let mut results = Vec::new();
    for phase in &s.phases {
        let runs: Vec<&env::Target> = if phase.is_reference() {
            targets.last().into_iter().collect()
        } else {
            targets.iter().filter(|t| args.only.as_ref().is_none_or(|o| *o == t.name)).collect()
        };
        for t in runs {
            for r in phases::run(ctx, phase, t).await? {
                print_result(&r);
                results.push(r);
            }
            // Let sockets in TIME_WAIT and the servers' buffers drain between runs.
            tokio::time::sleep(Duration::from_millis(500)).await;
        }
    }
    Ok(results)
}

/// One result's rates, errors, latency and lag, on stderr.
fn print_result(r: &stats::PhaseResult) {
    let lat =
        r.latency.as_ref().map(|p| format!("p50 {:.2} ms p99 {:.2} ms", p.p50_us as f64 / 1e3, p.p99_us as f64 / 1e3)).unwrap_or_default();
    let lag = r
        .lag
        .as_ref()
        .map(|p| {
            format!(" lag p50 {:.1} ms p99 {:.1} ms max {:.1} ms", p.p50_us as f64 / 1e3, p.p99_us as f64 / 1e3, p.max_us as f64 / 1e3)
        })
        .unwrap_or_default();
    // What a watch phase counted: watches refused, events of its PATCHes missed of those expected.
    let counted: String = [("refused", "watches_refused"), ("missed", "patch_events_missed"), ("of", "patch_events_expected")]
        .iter()
        .filter_map(|(name, key)| r.extra.get(*key).map(|v| format!(" {name} {v:.0}")))
        .collect();
    eprintln!(
        "  {} c={} [{}]: {:.1} req/s {:.1} MB/s err {} {lat}{lag}{counted}",
        r.workload,
        r.concurrency,
        r.target,
        r.requests_per_sec,
        r.bytes_per_sec / 1e6,
        r.errors
    );
}

/// Where the processes ran, in words, for the report.
fn placement(server_cpu: Option<&str>) -> String {
    match server_cpu {
        Some(cpu) => {
            let siblings =
                std::fs::read_to_string(format!("/sys/devices/system/cpu/cpu{cpu}/topology/thread_siblings_list")).unwrap_or_default();
            format!("split cores: the servers (simulator, kache, trivial reference server) on CPU {cpu}; the load generator on CPU {} (CPU {cpu}'s hardware thread siblings: {})", phases::LOADGEN_CPU, siblings.trim())
        }
        None => "shared: every process may run on every CPU".into(),
    }
}

#[cfg(test)]
mod tests {
    use super::holds;

    #[test]
    fn cpu_lists_are_read_like_the_kernel_writes_them() {
        assert!(holds("0-1", "0") && holds("0-1", "1"));
        assert!(holds("0,2-3", "3") && !holds("0,2-3", "1"));
        assert!(holds("1", "1") && !holds("1", "0"));
        assert!(!holds("", "0") && !holds("0-1", "x"));
    }
}
