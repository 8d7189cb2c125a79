//! Reports: the raw figures as JSON, a Markdown page (direct and kache side by side with
//! their ratio, processes, reference limits, kache's performance targets met or not), and
//! the SVG plot.

mod markdown;
pub mod svg;

use crate::scenario::Scenario;
use crate::stats::{Percentiles, PhaseResult};
use serde::Serialize;
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

/// One of kache's performance targets, checked against this run's figures.
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

/// Check kache's performance targets against what this run measured.
pub fn targets(results: &[PhaseResult]) -> Vec<TargetCheck> {
    [full_list_vs_loopback, node_list_vs_trivial_server, kubelet_watches, seed_watches, memory_per_pod, write_pass_through]
        .iter()
        .filter_map(|target| target(results))
        .collect()
}

fn kache(r: &PhaseResult) -> bool {
    r.target == "kache"
}

/// The fastest full protobuf LIST through kache against the loopback reference.
fn full_list_vs_loopback(results: &[PhaseResult]) -> Option<TargetCheck> {
    let lb = find(results, |r| r.workload.starts_with("reference: loopback"))?;
    let f = results
        .iter()
        .filter(|r| kache(r) && r.workload.contains("list pb rv0 all"))
        .max_by(|a, b| a.bytes_per_sec.total_cmp(&b.bytes_per_sec))?;
    let q = f.bytes_per_sec / lb.bytes_per_sec.max(1.0);
    Some(TargetCheck {
        target: "full protobuf LIST of 30k pods >= 0.5x loopback bytes/s".into(),
        met: Some(q >= 0.5),
        figure: format!(
            "kache {:.0} MB/s at c={} vs loopback {:.0} MB/s = {q:.2}x",
            f.bytes_per_sec / 1e6,
            f.concurrency,
            lb.bytes_per_sec / 1e6
        ),
    })
}

/// `spec.nodeName` LISTs through kache at c=64 against the trivial server.
fn node_list_vs_trivial_server(results: &[PhaseResult]) -> Option<TargetCheck> {
    let t = find(results, |r| r.workload.starts_with("reference: trivial"))?;
    let n = find(results, |r| kache(r) && r.workload.contains("list pb") && r.workload.contains("spec.nodeName") && r.concurrency == 64)?;
    let q = n.requests_per_sec / t.requests_per_sec.max(1e-9);
    let p99 = n.latency.as_ref().map(|p| p.p99_us).unwrap_or(u64::MAX);
    Some(TargetCheck {
        target: "spec.nodeName LIST at c=64 >= 0.5x trivial server req/s, p99 < 5 ms".into(),
        met: Some(q >= 0.5 && p99 < 5000),
        figure: format!("kache {:.0} req/s vs trivial {:.0} req/s = {q:.2}x; p99 {} ms", n.requests_per_sec, t.requests_per_sec, ms(p99)),
    })
}

/// Kubelet watches through kache: lag and watches dropped (judged at 10,000 only).
fn kubelet_watches(results: &[PhaseResult]) -> Option<TargetCheck> {
    let k = find(results, |r| kache(r) && r.workload.starts_with("kubelets"))?;
    let p99 = k.lag.as_ref().map(|p| p.p99_us).unwrap_or(u64::MAX);
    let ok = p99 < 100_000 && k.watches_ended_early == 0 && k.watches_opened as usize == k.concurrency;
    let at_scale = k.concurrency >= 10_000;
    Some(TargetCheck {
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
    })
}

/// A phase's kubelets and its cluster watchers against `target` (a cluster watchers result
/// follows its phase's kubelets result).
fn watcher_classes<'a>(results: &'a [PhaseResult], target: &str) -> Option<[&'a PhaseResult; 2]> {
    let i = results.iter().position(|r| r.target == target && r.workload.starts_with("cluster watchers"))?;
    let kubelets = results[..i].iter().rev().find(|r| r.target == target)?;
    kubelets.workload.starts_with("kubelets").then_some([kubelets, &results[i]])
}

/// The seed's scale: kubelet watches and cluster watchers under PATCHes, each class through
/// kache against the same class on the apiserver directly in the same run (judged at 5,000
/// kubelets and 100 cluster watchers only).
fn seed_watches(results: &[PhaseResult]) -> Option<TargetCheck> {
    let (direct, through) = (watcher_classes(results, "direct")?, watcher_classes(results, "kache")?);
    let mut met = true;
    let mut figures = Vec::new();
    for (d, k) in direct.iter().zip(&through) {
        let p99 = |r: &PhaseResult| r.lag.as_ref().map(|p| p.p99_us);
        let count = |key: &str| k.extra.get(key).copied();
        let (missed, duplicated) = (count("patch_events_missed"), count("patch_events_duplicated"));
        met &= matches!((p99(d), p99(k)), (Some(d), Some(k)) if k <= d + 5000)
            && count("patch_events_expected").is_some_and(|n| n > 0.0)
            && missed == Some(0.0)
            && duplicated == Some(0.0)
            && k.watches_ended_early == 0
            && k.watches_opened >= d.watches_opened;
        let shown = |v: Option<f64>| v.map_or("-".into(), |v| format!("{v:.0}"));
        let lag = |r: &PhaseResult| p99(r).map_or("-".into(), ms);
        figures.push(format!(
            "{}: lag p99 direct {} ms, kache {} ms; missed {}, duplicated {}; opened {} (direct {}) of {}, ended early {}",
            k.workload,
            lag(d),
            lag(k),
            shown(missed),
            shown(duplicated),
            k.watches_opened,
            d.watches_opened,
            k.concurrency,
            k.watches_ended_early
        ));
    }
    let at_scale = through[0].concurrency >= 5_000 && through[1].concurrency >= 100;
    let rate = through[0].extra.get("patches_per_sec").copied().unwrap_or(0.0);
    Some(TargetCheck {
        target: "5,000 kubelet watches + 100 cluster watchers, 100 PATCHes/s: per class, lag p99 through kache <= direct p99 + 5 ms, no event missed, no watch refused that direct opened".into(),
        met: at_scale.then_some(met),
        figure: format!("{}; {rate:.0} PATCHes/s{}", figures.join("; "), if at_scale { "" } else { " (below the target's scale)" }),
    })
}

/// kache's RSS per cached pod against the pod's encoded size (judged at 100k pods only).
fn memory_per_pod(results: &[PhaseResult]) -> Option<TargetCheck> {
    let m = find(results, |r| r.workload.starts_with("memory"))?;
    let q = m.extra.get("rss_over_encoded").copied().unwrap_or(f64::MAX);
    let pods = m.extra.iter().filter(|(k, _)| k.starts_with("pods_")).map(|(_, v)| *v).fold(0.0, f64::max);
    Some(TargetCheck {
        target: "RSS per cached pod <= 1.5x encoded size (per encoding held) at 100k pods".into(),
        met: (pods >= 95_000.0).then_some(q <= 1.5),
        figure: format!(
            "{:.0} pods: RSS {:.0} B/pod vs {:.0} B/pod encoded (all encodings) = {q:.2}x",
            pods,
            m.extra.get("rss_bytes_per_pod").copied().unwrap_or(0.0),
            m.extra.get("encoded_bytes_per_pod_all_encodings").copied().unwrap_or(0.0)
        ),
    })
}

/// The p50 a PATCH gains through kache.
fn write_pass_through(results: &[PhaseResult]) -> Option<TargetCheck> {
    let d = find(results, |r| r.target == "direct" && r.workload.starts_with("patch pods"))?;
    let k = find(results, |r| kache(r) && r.workload.starts_with("patch pods"))?;
    let (dl, kl) = (d.latency.as_ref()?, k.latency.as_ref()?);
    let added = kl.p50_us as f64 - dl.p50_us as f64;
    Some(TargetCheck {
        target: "pass-through adds < 1 ms p50 to a write".into(),
        met: Some(added < 1000.0),
        figure: format!("PATCH p50 direct {} ms, through kache {} ms: +{:.3} ms", ms(dl.p50_us), ms(kl.p50_us), added / 1000.0),
    })
}

/// Write `<stem>.json`, `<stem>.md` and `<stem>.svg` into `dir`.
pub fn write(dir: &Path, stem: &str, rep: &RunReport) -> anyhow::Result<()> {
    std::fs::create_dir_all(dir)?;
    std::fs::write(dir.join(format!("{stem}.json")), serde_json::to_string_pretty(rep)?)?;
    let title = format!("{} v{}: latency vs concurrency, direct vs kache", rep.scenario.name, rep.scenario.version);
    std::fs::write(dir.join(format!("{stem}.svg")), svg::plot(&title, &rep.results))?;
    std::fs::write(dir.join(format!("{stem}.md")), markdown::render(stem, rep))?;
    Ok(())
}

#[cfg(test)]
mod tests;
