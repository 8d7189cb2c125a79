//! The Markdown page, section by section: the run, its thresholds and targets, requests and
//! watches (direct and kache side by side), reference limits and memory, processes, error
//! samples.

use super::{ms, num, pcts, ratio, RunReport, TargetCheck};
use crate::stats::PhaseResult;
use crate::thresholds::{Check, EXIT_FAILED};
use std::fmt::Write;

/// The Markdown report.
pub fn render(stem: &str, rep: &RunReport) -> String {
    let mut md = String::new();
    run(&mut md, rep);
    thresholds(&mut md, &rep.checks);
    targets(&mut md, &rep.targets);
    let rows = paired(&rep.results);
    requests(&mut md, &rows);
    watches(&mut md, &rows);
    references(&mut md, &rep.results);
    processes(&mut md, &rep.results);
    error_samples(&mut md, &rep.results);
    let _ = writeln!(md, "\nRaw figures: `{stem}.json`; plot: `{stem}.svg`.\n\n![plot]({stem}.svg)");
    md
}

/// The title, the scenario's description and how the run was made.
fn run(md: &mut String, rep: &RunReport) {
    let s = &rep.scenario;
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
}

/// Each threshold checked, and the verdict (none when no threshold was given).
fn thresholds(md: &mut String, checks: &[Check]) {
    if checks.is_empty() {
        return;
    }
    let failed = checks.iter().filter(|c| !c.met).count();
    let verdict = if failed == 0 { "all met".to_string() } else { format!("**{failed} failed** (exit status {EXIT_FAILED})") };
    let _ = writeln!(md, "## Thresholds: {verdict}\n\n| phase | bound | measured | met |\n|---|---|---|---|");
    for c in checks {
        let _ = writeln!(md, "| {} | {} | {} | {} |", c.phase, c.bound, c.measured, if c.met { "met" } else { "**failed**" });
    }
    md.push('\n');
}

/// The performance targets this run measured.
fn targets(md: &mut String, targets: &[TargetCheck]) {
    if targets.is_empty() {
        return;
    }
    let _ = writeln!(md, "## Targets\n\n| target | met | figure |\n|---|---|---|");
    for t in targets {
        let met = match t.met {
            Some(true) => "met",
            Some(false) => "**not met**",
            None => "not at scale",
        };
        let _ = writeln!(md, "| {} | {met} | {} |", t.target, t.figure);
    }
    md.push('\n');
}

/// The direct and kache results of one workload at one concurrency.
struct Row<'a> {
    workload: &'a str,
    concurrency: usize,
    direct: Option<&'a PhaseResult>,
    kache: Option<&'a PhaseResult>,
}

impl Row<'_> {
    /// `f` of the direct and of the kache result (0 for one missing).
    fn both(&self, f: impl Fn(&PhaseResult) -> f64) -> (f64, f64) {
        (self.direct.map(&f).unwrap_or(0.0), self.kache.map(&f).unwrap_or(0.0))
    }

    /// An extra figure of the direct and of the kache result (0 for one missing).
    fn extra(&self, key: &str) -> (f64, f64) {
        self.both(|r| r.extra.get(key).copied().unwrap_or(0.0))
    }

    /// A count kept in `extra`, direct / kache, `-` for a result without it (a report from
    /// before it was counted, or a phase that did not count it).
    fn counted(&self, key: &str) -> String {
        let one = |r: Option<&PhaseResult>| r.and_then(|r| r.extra.get(key)).map_or("-".into(), |v| format!("{v:.0}"));
        format!("{} / {}", one(self.direct), one(self.kache))
    }
}

/// Direct and kache results paired by workload and concurrency, in the order first run
/// (memory phases and references apart; a later result of the same pair replaces one before).
fn paired(results: &[PhaseResult]) -> Vec<Row<'_>> {
    let mut rows: Vec<Row<'_>> = Vec::new();
    for r in results.iter().filter(|r| (r.target == "direct" || r.target == "kache") && !r.workload.starts_with("memory")) {
        let i = rows.iter().position(|row| row.workload == r.workload && row.concurrency == r.concurrency).unwrap_or_else(|| {
            rows.push(Row { workload: &r.workload, concurrency: r.concurrency, direct: None, kache: None });
            rows.len() - 1
        });
        if r.target == "direct" {
            rows[i].direct = Some(r);
        } else {
            rows[i].kache = Some(r);
        }
    }
    rows
}

fn requests(md: &mut String, rows: &[Row<'_>]) {
    let _ = writeln!(md, "## Requests\n\n| workload | c | req/s direct | req/s kache | ratio | MB/s direct | MB/s kache | latency direct | latency kache | errors d / k |\n|---|---|---|---|---|---|---|---|---|---|");
    for row in rows {
        let (rps_d, rps_k) = row.both(|r| r.requests_per_sec);
        let (bps_d, bps_k) = row.both(|r| r.bytes_per_sec);
        let (err_d, err_k) = row.both(|r| r.errors as f64);
        let _ = writeln!(
            md,
            "| {} | {} | {} | {} | {} | {} | {} | {} | {} | {err_d} / {err_k} |",
            row.workload,
            row.concurrency,
            num(rps_d),
            num(rps_k),
            ratio(rps_k, rps_d),
            num(bps_d / 1e6),
            num(bps_k / 1e6),
            row.direct.map(|r| pcts(&r.latency)).unwrap_or("-".into()),
            row.kache.map(|r| pcts(&r.latency)).unwrap_or("-".into()),
        );
    }
}

/// The pairs that watched (judged by the direct result when there is one).
fn watches(md: &mut String, rows: &[Row<'_>]) {
    let watched: Vec<&Row<'_>> =
        rows.iter().filter(|row| row.direct.or(row.kache).is_some_and(|r| r.watches_opened > 0 || r.lag.is_some())).collect();
    if watched.is_empty() {
        return;
    }
    let _ = writeln!(md, "\n## Watches\n\nLatency above is the time to the initial state (LIST, or WatchList's initial-events-end bookmark). Lag, over the steady phase: in a phase that PATCHes pods (`patch_rate`), each event of its PATCHes from that PATCH's answer to the event's first arrival (0 when it came first); otherwise receive time minus the pod's `kache.dev/changed-at` (the simulator's churn). Refused: watches answered other than 200 at their start. Missed: events of the phase's PATCHes a watcher should have received (a watcher of every pod: all of them; a kubelet: its node's pods') and did not; duplicated: received again.\n\n| workload | clients | lag direct | lag kache | lag max d / k | events/s d / k | opened d / k | refused d / k | ended early d / k | missed d / k | duplicated d / k | setup s d / k |\n|---|---|---|---|---|---|---|---|---|---|---|---|");
    for row in watched {
        let (events_d, events_k) = row.extra("steady_events_per_sec");
        let (setup_d, setup_k) = row.extra("setup_seconds");
        let count = |r: Option<&PhaseResult>, f: fn(&PhaseResult) -> u64| r.map(f).unwrap_or(0);
        let max = |r: Option<&PhaseResult>| r.and_then(|r| r.lag.as_ref()).map_or("-".into(), |p| ms(p.max_us));
        let _ = writeln!(
            md,
            "| {} | {} | {} | {} | {} / {} | {} / {} | {} / {} | {} | {} / {} | {} | {} | {} / {} |",
            row.workload,
            row.concurrency,
            row.direct.map(|r| pcts(&r.lag)).unwrap_or("-".into()),
            row.kache.map(|r| pcts(&r.lag)).unwrap_or("-".into()),
            max(row.direct),
            max(row.kache),
            num(events_d),
            num(events_k),
            count(row.direct, |r| r.watches_opened),
            count(row.kache, |r| r.watches_opened),
            row.counted("watches_refused"),
            count(row.direct, |r| r.watches_ended_early),
            count(row.kache, |r| r.watches_ended_early),
            row.counted("patch_events_missed"),
            row.counted("patch_events_duplicated"),
            num(setup_d),
            num(setup_k),
        );
    }
}

/// The reference phases and the memory phases, with all their figures.
fn references(md: &mut String, results: &[PhaseResult]) {
    let refs: Vec<_> = results.iter().filter(|r| r.target == "reference" || r.workload.starts_with("memory")).collect();
    if refs.is_empty() {
        return;
    }
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

/// CPU and RSS of each process over each phase.
fn processes(md: &mut String, results: &[PhaseResult]) {
    let _ = writeln!(md, "\n## Processes (CPU % of one core over the phase, RSS MB end / peak)\n\n| workload | c | target | kache CPU | kache RSS | upstream CPU | upstream RSS | loadtest CPU | other |\n|---|---|---|---|---|---|---|---|---|");
    for r in results {
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
}

/// The first error messages of each phase that had errors, 300 characters at most.
fn error_samples(md: &mut String, results: &[PhaseResult]) {
    let errs: Vec<_> = results.iter().filter(|r| !r.error_samples.is_empty()).collect();
    if errs.is_empty() {
        return;
    }
    let _ = writeln!(md, "\n## Error samples\n");
    for r in errs {
        for e in &r.error_samples {
            let _ = writeln!(md, "- {} ({}): `{}`", r.workload, r.target, e.replace('`', "'").chars().take(300).collect::<String>());
        }
    }
}
