//! Tenant probe, the human report: one row per figure, one column per endpoint, then the
//! tenant's open streams second by second.

use super::honest::ProbeFigures;
use super::net::StreamFigures;
use super::TargetReport;
use crate::stats::Percentiles;
use std::collections::BTreeMap;
use std::fmt::Write;

fn ms(us: u64) -> String {
    if us >= 10_000 {
        format!("{:.0}", us as f64 / 1e3)
    } else {
        format!("{:.1}", us as f64 / 1e3)
    }
}

/// `p50 / p99 / max` in ms, with the count.
fn pcts(p: &Option<Percentiles>) -> String {
    match p {
        Some(p) => format!("{} / {} / {} ms (n={})", ms(p.p50_us), ms(p.p99_us), ms(p.max_us), p.count),
        None => "-".into(),
    }
}

fn counts<K: std::fmt::Display, V: std::fmt::Display>(m: &BTreeMap<K, V>) -> String {
    if m.is_empty() {
        return "none".into();
    }
    m.iter().map(|(k, v)| format!("{k}: {v}")).collect::<Vec<_>>().join(", ")
}

fn spread3(s: &Option<[f64; 3]>) -> String {
    match s {
        Some([a, b, c]) => format!("{a:.1} / {b:.1} / {c:.1} s"),
        None => "-".into(),
    }
}

/// The rows of a set of tenant streams.
fn stream_rows(rows: &mut Vec<Row>, prefix: &str, f: fn(&TargetReport) -> Option<&StreamFigures>) {
    let row = |label: &str, g: fn(&StreamFigures) -> String| Row::new(&format!("{prefix}{label}"), move |t| f(t).map(g));
    rows.push(row("streams sent", |s| {
        let unsent: usize = s.send_errors.values().sum();
        if unsent > 0 {
            format!("{} (not sent: {})", s.sent, counts(&s.send_errors))
        } else {
            s.sent.to_string()
        }
    }));
    rows.push(row("response heads", |s| {
        format!("{} ({}), after {}", s.heads.values().sum::<usize>(), counts(&s.heads), spread3(&s.head_after_s))
    }));
    rows.push(row("streams ended", |s| counts(&s.ended)));
    rows.push(row("  ended at (first/median/last)", |s| spread3(&s.ended_at_s)));
    rows.push(row("  lived (min/median/max)", |s| spread3(&s.lifetime_s)));
    // Open: neither ended nor reset, a head (a 429's too) perhaps read but its body stuck.
    rows.push(row("open at the end", |s| s.open_at_end.to_string()));
    rows.push(row("connections (ended by server)", |s| {
        let at = s.connections_ended_at_s.map(|[a, b]| format!(" at {a:.1}-{b:.1} s")).unwrap_or_default();
        let errs = if s.connect_errors.is_empty() { String::new() } else { format!("; failed to open: {}", counts(&s.connect_errors)) };
        format!("{} ({}{at}){errs}", s.connections, counts(&s.connections_ended))
    }));
}

fn probe_rows(rows: &mut Vec<Row>, label: &str, f: fn(&TargetReport) -> Option<&ProbeFigures>) {
    rows.push(Row::new(&format!("{label}: statuses"), move |t| f(t).map(|p| counts(&p.statuses))));
    rows.push(Row::new(&format!("{label}: p50 / p99 / max"), move |t| f(t).map(|p| pcts(&p.latency))));
}

/// A row's figure for one endpoint (`None` when the attack did not run there).
type Cell = Box<dyn Fn(&TargetReport) -> Option<String>>;

struct Row {
    label: String,
    value: Cell,
}

impl Row {
    fn new(label: &str, value: impl Fn(&TargetReport) -> Option<String> + 'static) -> Row {
        Row { label: label.into(), value: Box::new(value) }
    }
}

/// The report as text.
pub fn render(targets: &[TargetReport]) -> String {
    let mut sections: Vec<(&str, Vec<Row>)> = Vec::new();

    let mut z = Vec::new();
    stream_rows(&mut z, "tenant N: ", |t| t.zero_window.as_ref().map(|z| &z.initial));
    z.push(Row::new("tenant N: all sent after", |t| t.zero_window.as_ref().map(|z| format!("{:.1} s", z.initial_sent_s))));
    stream_rows(&mut z, "tenant M/s: ", |t| t.zero_window.as_ref().map(|z| &z.extra));
    z.push(Row::new("honest watch: events of writes", |t| {
        t.zero_window.as_ref().map(|z| format!("{} of {} written ({} asked)", z.delivery.received, z.delivery.written, z.writer.asked))
    }));
    z.push(Row::new("honest watch: lag p50 / p99 / max", |t| t.zero_window.as_ref().map(|z| pcts(&z.delivery.lag))));
    z.push(Row::new("honest watch: opened, failures", |t| {
        t.zero_window.as_ref().map(|z| {
            format!("{} opened, {} failed, {} ERROR events", z.delivery.watches_opened, z.delivery.watch_failures, z.delivery.error_events)
        })
    }));
    z.push(Row::new("honest writes: p50 / p99 / max", |t| {
        t.zero_window.as_ref().map(|z| {
            let failed = if z.writer.failed.is_empty() { String::new() } else { format!("; failed: {}", counts(&z.writer.failed)) };
            format!("{}{failed}", pcts(&z.writer.latency))
        })
    }));
    z.push(Row::new("honest cleanup: DELETEs after", |t| {
        t.zero_window.as_ref().map(|z| format!("{:.1} s ({})", z.cleanup.seconds, counts(&z.cleanup.statuses)))
    }));
    z.push(Row::new("honest WatchList: bookmark", |t| {
        t.zero_window.as_ref().map(|z| {
            let w = &z.watch_list;
            let unfinished = w.unfinished_waited_s.map(|s| format!(", {} waiting ({s:.1} s)", w.unfinished)).unwrap_or_default();
            let failed = if w.failed.is_empty() { String::new() } else { format!(", failed: {}", counts(&w.failed)) };
            format!("{} of {} started{unfinished}{failed}", w.bookmarked, w.started)
        })
    }));
    z.push(Row::new("honest WatchList: time to bookmark", |t| t.zero_window.as_ref().map(|z| pcts(&z.watch_list.time_to_bookmark))));
    sections.push(("zero-window", z));

    let mut h = Vec::new();
    h.push(Row::new("request", |t| t.held_reads.as_ref().map(|h| h.request.clone())));
    h.push(Row::new("tokens (distinct) x streams", |t| {
        t.held_reads
            .as_ref()
            .map(|h| format!("{} ({}) x {}, all sent after {:.1} s", h.tokens, h.distinct_tokens, h.streams_per_token, h.all_sent_s))
    }));
    stream_rows(&mut h, "tenant: ", |t| t.held_reads.as_ref().map(|h| &h.tenant));
    probe_rows(&mut h, "honest GET, baseline", |t| t.held_reads.as_ref().map(|h| &h.baseline));
    probe_rows(&mut h, "honest GET, attack", |t| t.held_reads.as_ref().map(|h| &h.attack));
    sections.push(("held-reads", h));

    let mut s = Vec::new();
    for i in 0..3 {
        let group = move |t: &TargetReport| t.silent.as_ref().and_then(|s| s.groups.get(i)).cloned();
        s.push(Row::new(&format!("group {}: what", i + 1), move |t| group(t).map(|g| g.what)));
        s.push(Row::new(&format!("group {}: opened of asked", i + 1), move |t| {
            group(t).map(|g| {
                let errs = if g.open_errors.is_empty() { String::new() } else { format!(" (failed: {})", counts(&g.open_errors)) };
                format!("{} of {}{errs}", g.opened, g.asked)
            })
        }));
        s.push(Row::new(&format!("group {}: closed by server", i + 1), move |t| {
            group(t).map(|g| format!("{} ({}) after {}", g.closed.values().sum::<usize>(), counts(&g.closed), spread3(&g.closed_after_s)))
        }));
        s.push(Row::new(&format!("group {}: open at the end", i + 1), move |t| {
            group(t).map(|g| format!("{} (server sent {} bytes in all)", g.open_at_end, g.bytes_received))
        }));
    }
    sections.push(("silent", s));

    let mut c = Vec::new();
    c.push(Row::new("selector LIST (terms, query bytes)", |t| {
        t.selector.as_ref().map(|s| format!("{} x {} terms, {} bytes", s.concurrency, s.terms, s.query_bytes))
    }));
    c.push(Row::new("selector LIST: statuses", |t| t.selector.as_ref().map(|s| counts(&s.statuses))));
    c.push(Row::new("selector LIST: p50 / p99 / max", |t| {
        t.selector
            .as_ref()
            .map(|s| format!("{}{}", pcts(&s.duration), s.body_bytes.map(|b| format!(", {:.1} MB", b as f64 / 1e6)).unwrap_or_default()))
    }));
    probe_rows(&mut c, "control, baseline", |t| t.selector.as_ref().map(|s| &s.baseline));
    probe_rows(&mut c, "control, attack", |t| t.selector.as_ref().map(|s| &s.attack));
    sections.push(("selector", c));

    let names: Vec<&str> = targets.iter().map(|t| t.name.as_str()).collect();
    let label_w = sections.iter().flat_map(|(_, rows)| rows.iter().map(|r| r.label.len())).max().unwrap_or(0);
    let mut out = String::new();
    for t in targets {
        let _ = writeln!(out, "{}: {} (pod {})", t.name, t.url, t.pod);
        for (attack, why) in &t.failed {
            let _ = writeln!(out, "  {attack} failed: {why}");
        }
        for (attack, s) in &t.settle {
            if !s.ok {
                let _ = writeln!(
                    out,
                    "  before {attack}: the honest GET did not answer 200 within {:.0} s (last: {})",
                    s.waited_s, s.last_status
                );
            }
        }
    }
    for (name, rows) in &sections {
        let cells: Vec<Vec<String>> =
            rows.iter().map(|r| targets.iter().map(|t| (r.value)(t).unwrap_or_else(|| "-".into())).collect()).collect();
        if cells.iter().all(|c| c.iter().all(|v| v == "-")) {
            continue;
        }
        let widths: Vec<usize> =
            (0..targets.len()).map(|i| cells.iter().map(|c| c[i].len()).max().unwrap_or(0).max(names[i].len())).collect();
        let _ = writeln!(out, "\n== {name}");
        let _ = write!(out, "{:label_w$}", "");
        for (n, w) in names.iter().zip(&widths) {
            let _ = write!(out, " | {n:w$}");
        }
        out.push('\n');
        for (r, c) in rows.iter().zip(&cells) {
            let _ = write!(out, "{:label_w$}", r.label);
            for (v, w) in c.iter().zip(&widths) {
                let _ = write!(out, " | {v:w$}");
            }
            out.push('\n');
        }
    }
    for t in targets {
        if let Some(z) = &t.zero_window {
            let _ = writeln!(out, "\nzero-window [{}]: tenant streams open at each second (sent so far in brackets)", t.name);
            let sent: Vec<usize> = z.initial.sent_per_second.iter().zip(&z.extra.sent_per_second).map(|(a, b)| a + b).collect();
            per_second(&mut out, &z.open_per_second, &sent);
        }
        if let Some(h) = &t.held_reads {
            let _ = writeln!(out, "\nheld-reads [{}]: tenant streams open at each second (sent so far in brackets)", t.name);
            per_second(&mut out, &h.tenant.open_per_second, &h.tenant.sent_per_second);
        }
    }
    out
}

/// `open(sent)` for each second, 15 to a line.
fn per_second(out: &mut String, open: &[usize], sent: &[usize]) {
    for (i, (o, s)) in open.chunks(15).zip(sent.chunks(15)).enumerate() {
        let cells: Vec<String> = o.iter().zip(s).map(|(o, s)| format!("{o}({s})")).collect();
        let _ = writeln!(out, "  {:>3}s: {}", i * 15 + 1, cells.join(" "));
    }
}
