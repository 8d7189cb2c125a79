//! Pass/fail thresholds for CI: given as flags, checked against every phase result of the
//! targets named, written into the report, and turned into the exit status (3 when one
//! fails, naming the phase, the figure and the bound).

use crate::stats::PhaseResult;
use serde::{Deserialize, Serialize};
use std::time::Duration;

/// The exit status of a run whose thresholds were not all met (a run that could not be
/// made exits 1, as any error).
pub const EXIT_FAILED: i32 = 3;

/// The bounds a run must keep.
#[derive(clap::Args, Debug, Clone, Default, Serialize, Deserialize)]
pub struct Thresholds {
    /// Fail if a LIST or write phase's p99 latency (to the body's last byte) is above this,
    /// a duration (`250ms`, `2s`).
    #[arg(long, value_parser = duration)]
    #[serde(default, with = "opt_secs")]
    pub max_p99: Option<Duration>,
    /// Fail if a kubelets or informers phase's p99 watch delivery lag is above this.
    #[arg(long, value_parser = duration)]
    #[serde(default, with = "opt_secs")]
    pub max_lag_p99: Option<Duration>,
    /// Fail if a LIST or write phase made fewer requests per second than this.
    #[arg(long)]
    #[serde(default)]
    pub min_rps: Option<f64>,
    /// Fail if more than this fraction of a phase's requests (or watch clients) failed
    /// (`0` allows none, `0.01` one in a hundred).
    #[arg(long)]
    #[serde(default)]
    pub max_error_rate: Option<f64>,
    /// The targets the thresholds apply to (`kache`, `direct`; repeat for both).
    #[arg(long = "check-target", default_value = "kache")]
    #[serde(default)]
    pub targets: Vec<String>,
}

/// One bound checked against one phase result.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Check {
    /// `list pb rv0 spec.nodeName c=64 [kache]`.
    pub phase: String,
    /// `p99 <= 250 ms`.
    pub bound: String,
    /// What was measured, with its unit.
    pub measured: String,
    pub met: bool,
}

impl std::fmt::Display for Check {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let verdict = if self.met { "met" } else { "FAILED" };
        write!(f, "{}: {} (measured {}): {verdict}", self.phase, self.bound, self.measured)
    }
}

impl Thresholds {
    /// Whether any bound is set.
    pub fn any(&self) -> bool {
        self.max_p99.is_some() || self.max_lag_p99.is_some() || self.min_rps.is_some() || self.max_error_rate.is_some()
    }

    /// Check every bound against every result of the targets named. A bound that no result
    /// could be checked against fails too (a CI run measuring nothing does not pass).
    pub fn check(&self, results: &[PhaseResult]) -> Vec<Check> {
        let mut out = Vec::new();
        let ours: Vec<&PhaseResult> = results.iter().filter(|r| self.targets.contains(&r.target)).collect();
        let closed_loop = |r: &&&PhaseResult| matches!(r.kind.as_str(), "list" | "writes");
        let watches = |r: &&&PhaseResult| matches!(r.kind.as_str(), "kubelets" | "informers");
        if let Some(max) = self.max_p99 {
            let bound = format!("p99 <= {}", ms(max.as_micros() as u64));
            let rs: Vec<_> = ours.iter().filter(closed_loop).collect();
            for r in &rs {
                let p99 = r.latency.as_ref().map(|p| p.p99_us);
                let measured = p99.map_or("no request completed".into(), |us| format!("p99 {}", ms(us)));
                out.push(Check { phase: name(r), bound: bound.clone(), measured, met: p99.is_some_and(|us| us <= max.as_micros() as u64) });
            }
            none_checked(&mut out, rs.is_empty(), &bound, "LIST or write");
        }
        if let Some(max) = self.max_lag_p99 {
            let bound = format!("lag p99 <= {}", ms(max.as_micros() as u64));
            let rs: Vec<_> = ours.iter().filter(watches).collect();
            for r in &rs {
                let p99 = r.lag.as_ref().map(|p| p.p99_us);
                let measured = p99.map_or("no event delivered".into(), |us| format!("lag p99 {}", ms(us)));
                out.push(Check { phase: name(r), bound: bound.clone(), measured, met: p99.is_some_and(|us| us <= max.as_micros() as u64) });
            }
            none_checked(&mut out, rs.is_empty(), &bound, "kubelets or informers");
        }
        if let Some(min) = self.min_rps {
            let bound = format!("req/s >= {min}");
            let rs: Vec<_> = ours.iter().filter(closed_loop).collect();
            for r in &rs {
                let measured = format!("{:.1} req/s", r.requests_per_sec);
                out.push(Check { phase: name(r), bound: bound.clone(), measured, met: r.requests_per_sec >= min });
            }
            none_checked(&mut out, rs.is_empty(), &bound, "LIST or write");
        }
        if let Some(max) = self.max_error_rate {
            let bound = format!("error rate <= {max}");
            let rs: Vec<_> = ours.iter().filter(|r| closed_loop(r) || watches(r)).collect();
            for r in &rs {
                let tried = r.requests + r.errors;
                let rate = if tried == 0 { 1.0 } else { r.errors as f64 / tried as f64 };
                let measured = format!("{} errors of {tried} ({rate:.4})", r.errors);
                out.push(Check { phase: name(r), bound: bound.clone(), measured, met: tried > 0 && rate <= max });
            }
            none_checked(&mut out, rs.is_empty(), &bound, "LIST, write or watch");
        }
        out
    }
}

/// A failed check saying that no phase of the kinds a bound applies to ran.
fn none_checked(out: &mut Vec<Check>, empty: bool, bound: &str, kinds: &str) {
    if empty {
        out.push(Check {
            phase: format!("(no {kinds} phase of the checked targets)"),
            bound: bound.to_string(),
            measured: "nothing".into(),
            met: false,
        });
    }
}

/// How a phase result is named in a check.
fn name(r: &PhaseResult) -> String {
    format!("{} c={} [{}]", r.workload, r.concurrency, r.target)
}

/// Microseconds as milliseconds.
fn ms(us: u64) -> String {
    format!("{} ms", us as f64 / 1000.0)
}

/// A duration as Go writes them (`250ms`, `1.5s`, `2m`) or a number of seconds.
fn duration(s: &str) -> Result<Duration, String> {
    let s = s.trim();
    if let Ok(secs) = s.parse::<f64>() {
        return if secs.is_finite() && secs >= 0.0 { Ok(Duration::from_secs_f64(secs)) } else { Err(format!("{s}: not a duration")) };
    }
    let mut total = 0.0f64;
    let mut rest = s;
    if rest.is_empty() {
        return Err("an empty duration".into());
    }
    while !rest.is_empty() {
        let digits = rest.find(|c: char| !(c.is_ascii_digit() || c == '.')).unwrap_or(rest.len());
        let value: f64 = rest[..digits].parse().map_err(|_| format!("{s}: not a duration (e.g. 250ms, 2s, 1m30s)"))?;
        rest = &rest[digits..];
        let unit_len = rest.find(|c: char| c.is_ascii_digit() || c == '.').unwrap_or(rest.len());
        let scale = match &rest[..unit_len] {
            "ns" => 1e-9,
            "us" | "µs" => 1e-6,
            "ms" => 1e-3,
            "s" => 1.0,
            "m" => 60.0,
            "h" => 3600.0,
            u => return Err(format!("{s}: unknown unit {u:?} (ns, us, ms, s, m, h)")),
        };
        rest = &rest[unit_len..];
        total += value * scale;
    }
    Ok(Duration::from_secs_f64(total))
}

/// `Option<Duration>` as seconds in the report's JSON.
mod opt_secs {
    use serde::{Deserialize, Deserializer, Serializer};
    use std::time::Duration;

    pub fn serialize<S: Serializer>(d: &Option<Duration>, s: S) -> Result<S::Ok, S::Error> {
        match d {
            Some(d) => s.serialize_some(&d.as_secs_f64()),
            None => s.serialize_none(),
        }
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Duration>, D::Error> {
        Ok(Option::<f64>::deserialize(d)?.map(Duration::from_secs_f64))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::stats::Percentiles;

    fn result(kind: &str, target: &str, requests: u64, errors: u64, rps: f64, p99_ms: Option<u64>, lag_ms: Option<u64>) -> PhaseResult {
        let pct = |ms: u64| Percentiles {
            count: 100,
            p50_us: ms * 500,
            p90_us: ms * 900,
            p99_us: ms * 1000,
            p999_us: ms * 1000,
            max_us: ms * 1000,
            mean_us: ms as f64 * 500.0,
        };
        let mut r = PhaseResult::new(format!("{kind} work"), target, 4);
        r.kind = kind.into();
        (r.requests, r.errors, r.requests_per_sec) = (requests, errors, rps);
        r.latency = p99_ms.map(pct);
        r.lag = lag_ms.map(pct);
        r
    }

    fn kache_only() -> Thresholds {
        Thresholds { targets: vec!["kache".into()], ..Thresholds::default() }
    }

    #[test]
    fn each_bound_is_checked_against_each_phase_of_its_kinds() {
        let results = vec![
            result("list", "kache", 1000, 0, 500.0, Some(20), None),
            result("list", "kache", 1000, 0, 90.0, Some(80), None),
            result("kubelets", "kache", 50, 0, 5.0, Some(900), Some(30)),
            result("memory", "kache", 0, 0, 0.0, None, None),
            // Another target: not checked unless named.
            result("list", "direct", 10, 10, 1.0, Some(5000), None),
        ];
        let t = Thresholds {
            max_p99: Some(Duration::from_millis(50)),
            min_rps: Some(100.0),
            max_error_rate: Some(0.0),
            max_lag_p99: Some(Duration::from_millis(100)),
            ..kache_only()
        };
        let checks = t.check(&results);
        let failed: Vec<String> = checks.iter().filter(|c| !c.met).map(|c| format!("{} / {}", c.phase, c.bound)).collect();
        // p99 and req/s: the second LIST only; lag: met; the watch phase's 900 ms setup is
        // no request latency; memory is no phase of any bound.
        assert_eq!(failed, ["list work c=4 [kache] / p99 <= 50 ms", "list work c=4 [kache] / req/s >= 100"]);
        assert_eq!(checks.len(), 2 + 1 + 2 + 3, "{checks:#?}");
        assert!(checks.iter().all(|c| !c.phase.contains("[direct]") && !c.phase.contains("memory")));
        // Both targets named: the direct LIST fails all three of its bounds.
        let both = Thresholds { targets: vec!["kache".into(), "direct".into()], ..t };
        let direct: Vec<Check> = both.check(&results).into_iter().filter(|c| c.phase.contains("[direct]")).collect();
        assert_eq!(direct.len(), 3);
        assert!(direct.iter().all(|c| !c.met), "{direct:#?}");
        let rate = direct.iter().find(|c| c.bound.starts_with("error rate")).unwrap();
        assert_eq!(rate.measured, "10 errors of 20 (0.5000)");
    }

    #[test]
    fn error_rate_bounds_allow_what_they_say() {
        let results = vec![result("writes", "kache", 99, 1, 100.0, Some(1), None)];
        let at = |max: f64| Thresholds { max_error_rate: Some(max), ..kache_only() }.check(&results)[0].met;
        assert!(at(0.01) && at(0.5));
        assert!(!at(0.0) && !at(0.009));
        // A phase that tried nothing has not shown it works.
        let idle = vec![result("list", "kache", 0, 0, 0.0, None, None)];
        let t = Thresholds { max_error_rate: Some(1.0), max_p99: Some(Duration::from_secs(1)), ..kache_only() };
        assert!(t.check(&idle).iter().all(|c| !c.met));
    }

    #[test]
    fn a_bound_with_nothing_to_check_fails_and_no_bound_checks_nothing() {
        let results = vec![result("list", "direct", 10, 0, 10.0, Some(1), None)];
        let checks = Thresholds { min_rps: Some(1.0), ..kache_only() }.check(&results);
        assert_eq!(checks.len(), 1);
        assert!(!checks[0].met && checks[0].phase.starts_with("(no LIST or write phase"), "{checks:?}");
        assert!(!kache_only().any() && kache_only().check(&results).is_empty());
    }

    #[test]
    fn durations_are_go_durations_or_seconds() {
        assert_eq!(duration("250ms"), Ok(Duration::from_millis(250)));
        assert_eq!(duration("1m30s"), Ok(Duration::from_secs(90)));
        assert_eq!(duration("1.5s"), Ok(Duration::from_millis(1500)));
        assert_eq!(duration("2"), Ok(Duration::from_secs(2)));
        assert_eq!(duration("0.05"), Ok(Duration::from_millis(50)));
        assert!(duration("10 parsecs").is_err() && duration("").is_err() && duration("-1").is_err() && duration("ms").is_err());
    }

    #[test]
    fn the_flags_parse_into_thresholds() {
        #[derive(clap::Parser)]
        struct Cli {
            #[command(flatten)]
            t: Thresholds,
        }
        let c = <Cli as clap::Parser>::try_parse_from([
            "x",
            "--max-p99",
            "20ms",
            "--min-rps",
            "1000",
            "--max-error-rate",
            "0",
            "--check-target",
            "kache",
            "--check-target",
            "direct",
        ])
        .unwrap();
        assert_eq!((c.t.max_p99, c.t.min_rps, c.t.max_error_rate), (Some(Duration::from_millis(20)), Some(1000.0), Some(0.0)));
        assert_eq!(c.t.targets, ["kache", "direct"]);
        assert!(<Cli as clap::Parser>::try_parse_from(["x", "--max-p99", "fast"]).is_err());
        let d = <Cli as clap::Parser>::try_parse_from(["x"]).unwrap();
        assert_eq!(d.t.targets, ["kache"]);
    }
}
