//! Reports: the raw figures as JSON, a Markdown page (direct and kache side by side with
//! their ratio, processes, reference limits, the targets met or not), and the SVG
//! plot.

pub mod svg;

use crate::scenario::Scenario;
use crate::stats::{Percentiles, PhaseResult};
use serde::Serialize;
use std::collections::BTreeMap;
use std::fmt::Write;
use std::path::Path;

/// Set by `--split-cores` for the run it starts again on one CPU: the CPUs it had before.
pub const NPROC_ENV: &str = "KACHE_LOADTEST_NPROC";

/// The machine a run was on.
#[derive(Debug, Clone, Serialize, serde::Deserialize)]
pub struct Machine {
    pub nproc: usize,
    pub cpu_model: String,
    pub fd_limit: String,
    /// `/proc/loadavg` when the scenario started (other work on the machine skews figures).
    #[serde(default)]
    pub load_average: String,
}

impl Machine {
    pub fn detect() -> Machine {
        let cpu = std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
        let cpu_model = cpu
            .lines()
            .find_map(|l| l.strip_prefix("model name").map(|v| v.trim_start_matches([' ', '\t', ':']).to_string()))
            .unwrap_or_default();
        let limits = std::fs::read_to_string("/proc/self/limits").unwrap_or_default();
        let fd_limit = limits
            .lines()
            .find(|l| l.starts_with("Max open files"))
            .map(|l| l.split_whitespace().skip(3).take(2).collect::<Vec<_>>().join("/"))
            .unwrap_or_default();
        let load_average =
            std::fs::read_to_string("/proc/loadavg").unwrap_or_default().split_whitespace().take(3).collect::<Vec<_>>().join(" ");
        // The CPUs the run had: a --split-cores run holds itself to one after counting them.
        let nproc = std::env::var(NPROC_ENV)
            .ok()
            .and_then(|n| n.parse().ok())
            .unwrap_or_else(|| std::thread::available_parallelism().map_or(1, |n| n.get()));
        Machine { nproc, cpu_model, fd_limit, load_average }
    }
}

/// One issue-5 target, checked against this run's figures.
#[derive(Debug, Clone, Serialize, serde::Deserialize)]
pub struct TargetCheck {
    pub target: String,
    /// None when this run did not measure it at the target's scale.
    pub met: Option<bool>,
    pub figure: String,
}

/// Everything one scenario run produced.
#[derive(Debug, Clone, Serialize, serde::Deserialize)]
pub struct RunReport {
    pub scenario: Scenario,
    pub started_unix: u64,
    /// `git rev-parse --short HEAD` of the working tree when the run started.
    pub commit: String,
    /// The kache binary run (path, modification time, size): the commit may have moved
    /// since it was built.
    #[serde(default)]
    pub kache_binary: String,
    pub command: String,
    pub machine: Machine,
    /// Which CPUs the processes ran on (`--split-cores`), in words.
    #[serde(default)]
    pub placement: String,
    pub self_contained: bool,
    pub results: Vec<PhaseResult>,
    pub targets: Vec<TargetCheck>,
    /// The run's thresholds (`--max-p99`, ...), if any were given.
    #[serde(default)]
    pub thresholds: Option<crate::thresholds::Thresholds>,
    /// Each threshold checked against each phase result it applies to.
    #[serde(default)]
    pub checks: Vec<crate::thresholds::Check>,
}

fn ms(us: u64) -> String {
    let v = us as f64 / 1000.0;
    if v >= 100.0 {
        format!("{v:.0}")
    } else if v >= 10.0 {
        format!("{v:.1}")
    } else {
        format!("{v:.2}")
    }
}

fn num(v: f64) -> String {
    if v >= 100.0 {
        format!("{v:.0}")
    } else if v >= 10.0 {
        format!("{v:.1}")
    } else {
        format!("{v:.2}")
    }
}

fn pcts(p: &Option<Percentiles>) -> String {
    match p {
        Some(p) => format!("{} / {} / {} / {}", ms(p.p50_us), ms(p.p90_us), ms(p.p99_us), ms(p.p999_us)),
        None => "-".into(),
    }
}

fn ratio(k: f64, d: f64) -> String {
    if d > 0.0 {
        format!("{:.2}x", k / d)
    } else {
        "-".into()
    }
}

fn find(results: &[PhaseResult], f: impl Fn(&PhaseResult) -> bool) -> Option<&PhaseResult> {
    results.iter().find(|r| f(r))
}

/// Check the targets against what this run measured.
pub fn targets(results: &[PhaseResult]) -> Vec<TargetCheck> {
    let mut out = Vec::new();
    let kache = |r: &PhaseResult| r.target == "kache";
    let loopback = find(results, |r| r.workload.starts_with("reference: loopback"));
    let full = results
        .iter()
        .filter(|r| kache(r) && r.workload.contains("list pb rv0 all"))
        .max_by(|a, b| a.bytes_per_sec.total_cmp(&b.bytes_per_sec));
    if let (Some(lb), Some(f)) = (loopback, full) {
        let q = f.bytes_per_sec / lb.bytes_per_sec.max(1.0);
        out.push(TargetCheck {
            target: "full protobuf LIST of 30k pods >= 0.5x loopback bytes/s".into(),
            met: Some(q >= 0.5),
            figure: format!(
                "kache {:.0} MB/s at c={} vs loopback {:.0} MB/s = {q:.2}x",
                f.bytes_per_sec / 1e6,
                f.concurrency,
                lb.bytes_per_sec / 1e6
            ),
        });
    }
    let trivial = find(results, |r| r.workload.starts_with("reference: trivial"));
    let node = find(results, |r| kache(r) && r.workload.contains("list pb") && r.workload.contains("spec.nodeName") && r.concurrency == 64);
    if let (Some(t), Some(n)) = (trivial, node) {
        let q = n.requests_per_sec / t.requests_per_sec.max(1e-9);
        let p99 = n.latency.as_ref().map(|p| p.p99_us).unwrap_or(u64::MAX);
        out.push(TargetCheck {
            target: "spec.nodeName LIST at c=64 >= 0.5x trivial server req/s, p99 < 5 ms".into(),
            met: Some(q >= 0.5 && p99 < 5000),
            figure: format!(
                "kache {:.0} req/s vs trivial {:.0} req/s = {q:.2}x; p99 {} ms",
                n.requests_per_sec,
                t.requests_per_sec,
                ms(p99)
            ),
        });
    }
    if let Some(k) = find(results, |r| kache(r) && r.workload.starts_with("kubelets")) {
        let p99 = k.lag.as_ref().map(|p| p.p99_us).unwrap_or(u64::MAX);
        let ok = p99 < 100_000 && k.watches_ended_early == 0 && k.watches_opened as usize == k.concurrency;
        let at_scale = k.concurrency >= 10_000;
        out.push(TargetCheck {
            target: "10,000 kubelet watches, 500 changes/s: p99 lag < 100 ms, none dropped".into(),
            met: at_scale.then_some(ok),
            figure: format!(
                "{} watches opened of {}, {} ended early, lag p99 {} ms over {:.0} events/s{}",
                k.watches_opened,
                k.concurrency,
                k.watches_ended_early,
                ms(p99),
                k.extra.get("steady_events_per_sec").copied().unwrap_or(0.0),
                if at_scale { "" } else { " (below the target's scale)" }
            ),
        });
    }
    if let Some(m) = find(results, |r| r.workload.starts_with("memory")) {
        let q = m.extra.get("rss_over_encoded").copied().unwrap_or(f64::MAX);
        let pods = m.extra.iter().filter(|(k, _)| k.starts_with("pods_")).map(|(_, v)| *v).fold(0.0, f64::max);
        out.push(TargetCheck {
            target: "RSS per cached pod <= 1.5x encoded size (per encoding held) at 100k pods".into(),
            met: (pods >= 95_000.0).then_some(q <= 1.5),
            figure: format!(
                "{:.0} pods: RSS {:.0} B/pod vs {:.0} B/pod encoded (all encodings) = {q:.2}x",
                pods,
                m.extra.get("rss_bytes_per_pod").copied().unwrap_or(0.0),
                m.extra.get("encoded_bytes_per_pod_all_encodings").copied().unwrap_or(0.0)
            ),
        });
    }
    let wd = find(results, |r| r.target == "direct" && r.workload.starts_with("patch pods"));
    let wk = find(results, |r| kache(r) && r.workload.starts_with("patch pods"));
    if let (Some(d), Some(k)) = (wd, wk) {
        if let (Some(dl), Some(kl)) = (&d.latency, &k.latency) {
            let added = kl.p50_us as f64 - dl.p50_us as f64;
            out.push(TargetCheck {
                target: "pass-through adds < 1 ms p50 to a write".into(),
                met: Some(added < 1000.0),
                figure: format!("PATCH p50 direct {} ms, through kache {} ms: +{:.3} ms", ms(dl.p50_us), ms(kl.p50_us), added / 1000.0),
            });
        }
    }
    out
}

/// Write `<stem>.json`, `<stem>.md` and `<stem>.svg` into `dir`.
pub fn write(dir: &Path, stem: &str, rep: &RunReport) -> anyhow::Result<()> {
    std::fs::create_dir_all(dir)?;
    std::fs::write(dir.join(format!("{stem}.json")), serde_json::to_string_pretty(rep)?)?;
    let title = format!("{} v{}: latency vs concurrency, direct vs kache", rep.scenario.name, rep.scenario.version);
    std::fs::write(dir.join(format!("{stem}.svg")), svg::plot(&title, &rep.results))?;
    std::fs::write(dir.join(format!("{stem}.md")), markdown(stem, rep))?;
    Ok(())
}

/// The Markdown report.
pub fn markdown(stem: &str, rep: &RunReport) -> String {
    let s = &rep.scenario;
    let mut md = String::new();
    let _ = writeln!(md, "# Load test `{}` v{}\n\n{}\n", s.name, s.version, s.description.trim());
    let _ = writeln!(
        md,
        "- commit `{}`, {} x {} (fd limit {}), load average at start {}, unix time {}",
        rep.commit, rep.machine.nproc, rep.machine.cpu_model, rep.machine.fd_limit, rep.machine.load_average, rep.started_unix
    );
    let _ = writeln!(md, "- command: `{}`", rep.command);
    if !rep.placement.is_empty() {
        let _ = writeln!(md, "- placement: {}", rep.placement);
    }
    if rep.self_contained {
        let _ = writeln!(md, "- kache binary: {}", rep.kache_binary);
    }
    if rep.self_contained {
        let c = &s.cluster;
        let _ = writeln!(
            md,
            "- upstream: `kache sim` with {} nodes, {} pods, {} namespaces, pod bytes {}, churn {}/s; kache: preload `{}` in `{}` {}",
            c.nodes,
            c.pods,
            c.namespaces,
            c.pod_bytes.map(|b| b.to_string()).unwrap_or("default".into()),
            c.churn_per_sec,
            s.kache.preload,
            s.kache.preload_encodings,
            s.kache.extra_args.join(" ")
        );
    }
    let _ = writeln!(md, "- latencies in ms as p50 / p90 / p99 / p99.9; ratios are kache / direct\n");
    if !rep.checks.is_empty() {
        let failed = rep.checks.iter().filter(|c| !c.met).count();
        let verdict = if failed == 0 {
            "all met".to_string()
        } else {
            format!("**{failed} failed** (exit status {})", crate::thresholds::EXIT_FAILED)
        };
        let _ = writeln!(md, "## Thresholds: {verdict}\n\n| phase | bound | measured | met |\n|---|---|---|---|");
        for c in &rep.checks {
            let _ = writeln!(md, "| {} | {} | {} | {} |", c.phase, c.bound, c.measured, if c.met { "met" } else { "**failed**" });
        }
        md.push('\n');
    }
    if !rep.targets.is_empty() {
        let _ = writeln!(md, "## Targets (issue 5)\n\n| target | met | figure |\n|---|---|---|");
        for t in &rep.targets {
            let met = match t.met {
                Some(true) => "met",
                Some(false) => "**not met**",
                None => "not at scale",
            };
            let _ = writeln!(md, "| {} | {met} | {} |", t.target, t.figure);
        }
        md.push('\n');
    }
    // Pair direct and kache results by workload and concurrency.
    type Pair<'a> = (Option<&'a PhaseResult>, Option<&'a PhaseResult>);
    let mut pairs: BTreeMap<(usize, String, usize), Pair<'_>> = BTreeMap::new();
    let mut order = Vec::new();
    for r in rep.results.iter().filter(|r| (r.target == "direct" || r.target == "kache") && !r.workload.starts_with("memory")) {
        let key = (r.workload.clone(), r.concurrency);
        let idx = order.iter().position(|k| *k == key).unwrap_or_else(|| {
            order.push(key.clone());
            order.len() - 1
        });
        let e = pairs.entry((idx, key.0, key.1)).or_default();
        if r.target == "direct" {
            e.0 = Some(r);
        } else {
            e.1 = Some(r);
        }
    }
    let _ = writeln!(md, "## Requests\n\n| workload | c | req/s direct | req/s kache | ratio | MB/s direct | MB/s kache | latency direct | latency kache | errors d / k |\n|---|---|---|---|---|---|---|---|---|---|");
    for ((_, w, c), (d, k)) in &pairs {
        let f = |r: &Option<&PhaseResult>, g: fn(&PhaseResult) -> f64| r.map(g).unwrap_or(0.0);
        let _ = writeln!(
            md,
            "| {w} | {c} | {} | {} | {} | {} | {} | {} | {} | {} / {} |",
            num(f(d, |r| r.requests_per_sec)),
            num(f(k, |r| r.requests_per_sec)),
            ratio(f(k, |r| r.requests_per_sec), f(d, |r| r.requests_per_sec)),
            num(f(d, |r| r.bytes_per_sec) / 1e6),
            num(f(k, |r| r.bytes_per_sec) / 1e6),
            d.map(|r| pcts(&r.latency)).unwrap_or("-".into()),
            k.map(|r| pcts(&r.latency)).unwrap_or("-".into()),
            f(d, |r| r.errors as f64),
            f(k, |r| r.errors as f64),
        );
    }
    let watches: Vec<_> = pairs.iter().filter(|(_, (d, k))| d.or(*k).is_some_and(|r| r.watches_opened > 0 || r.lag.is_some())).collect();
    if !watches.is_empty() {
        let _ = writeln!(md, "\n## Watches\n\nLatency above is the time to the initial state (LIST, or WatchList's initial-events-end bookmark). Lag = receive time minus the pod's `kache.dev/changed-at`, over the steady phase.\n\n| workload | clients | lag direct | lag kache | events/s d / k | opened d / k | ended early d / k | setup s d / k |\n|---|---|---|---|---|---|---|---|");
        for ((_, w, c), (d, k)) in watches {
            let x = |r: &Option<&PhaseResult>, key: &str| r.and_then(|r| r.extra.get(key).copied()).unwrap_or(0.0);
            let _ = writeln!(
                md,
                "| {w} | {c} | {} | {} | {} / {} | {} / {} | {} / {} | {} / {} |",
                d.map(|r| pcts(&r.lag)).unwrap_or("-".into()),
                k.map(|r| pcts(&r.lag)).unwrap_or("-".into()),
                num(x(d, "steady_events_per_sec")),
                num(x(k, "steady_events_per_sec")),
                d.map(|r| r.watches_opened).unwrap_or(0),
                k.map(|r| r.watches_opened).unwrap_or(0),
                d.map(|r| r.watches_ended_early).unwrap_or(0),
                k.map(|r| r.watches_ended_early).unwrap_or(0),
                num(x(d, "setup_seconds")),
                num(x(k, "setup_seconds")),
            );
        }
    }
    let refs: Vec<_> = rep.results.iter().filter(|r| r.target == "reference" || r.workload.starts_with("memory")).collect();
    if !refs.is_empty() {
        let _ = writeln!(
            md,
            "\n## Reference limits and memory\n\n| measurement | c | req/s | MB/s | latency | figures |\n|---|---|---|---|---|---|"
        );
        for r in refs {
            let extra: Vec<String> = r.extra.iter().map(|(k, v)| format!("{k} {}", num(*v))).collect();
            let _ = writeln!(
                md,
                "| {} | {} | {} | {} | {} | {} |",
                r.workload,
                r.concurrency,
                num(r.requests_per_sec),
                num(r.bytes_per_sec / 1e6),
                pcts(&r.latency),
                extra.join(", ")
            );
        }
    }
    let _ = writeln!(md, "\n## Processes (CPU % of one core over the phase, RSS MB end / peak)\n\n| workload | c | target | kache CPU | kache RSS | upstream CPU | upstream RSS | loadtest CPU | other |\n|---|---|---|---|---|---|---|---|---|");
    for r in &rep.results {
        let p = |role: &str| r.procs.iter().find(|p| p.role == role);
        let cpu = |role: &str| p(role).map(|p| format!("{:.0}%", p.cpu_percent)).unwrap_or("-".into());
        let rss = |role: &str| p(role).map(|p| format!("{:.0} / {:.0}", p.rss_mb_end, p.rss_mb_peak)).unwrap_or("-".into());
        let other = p("trivial-server").map(|p| format!("trivial server {:.0}%", p.cpu_percent)).unwrap_or_default();
        let _ = writeln!(
            md,
            "| {} | {} | {} | {} | {} | {} | {} | {} | {other} |",
            r.workload,
            r.concurrency,
            r.target,
            cpu("kache"),
            rss("kache"),
            cpu("upstream"),
            rss("upstream"),
            cpu("loadtest")
        );
    }
    let errs: Vec<_> = rep.results.iter().filter(|r| !r.error_samples.is_empty()).collect();
    if !errs.is_empty() {
        let _ = writeln!(md, "\n## Error samples\n");
        for r in errs {
            for e in &r.error_samples {
                let _ = writeln!(md, "- {} ({}): `{}`", r.workload, r.target, e.replace('`', "'").chars().take(300).collect::<String>());
            }
        }
    }
    let _ = writeln!(md, "\nRaw figures: `{stem}.json`; plot: `{stem}.svg`.\n\n![plot]({stem}.svg)");
    md
}

#[cfg(test)]
mod tests;
