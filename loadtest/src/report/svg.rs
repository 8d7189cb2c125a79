//! The plot, as hand-written SVG: latency (p50 solid, p99 dashed; log scale, ms) against
//! concurrency (log scale), one colour per workload and target (direct and kache side by
//! side). Watch phases plot delivery lag against the number of watching clients.

use crate::stats::PhaseResult;
use std::collections::BTreeMap;
use std::fmt::Write;

const W: f64 = 1100.0;
const H: f64 = 540.0;
const LEFT: f64 = 70.0;
const RIGHT: f64 = 450.0;
const TOP: f64 = 40.0;
const BOTTOM: f64 = 50.0;
const COLOURS: [&str; 10] = ["#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b", "#e377c2", "#17becf", "#7f7f7f", "#bcbd22"];

fn esc(s: &str) -> String {
    s.replace('&', "&amp;").replace('<', "&lt;").replace('>', "&gt;")
}

/// Render the plot for one run's results.
pub fn plot(title: &str, results: &[PhaseResult]) -> String {
    // (series name) -> [(x, p50 ms, p99 ms)]
    let mut series: BTreeMap<String, Vec<(f64, f64, f64)>> = BTreeMap::new();
    for r in results {
        let (p, what) = match (&r.lag, &r.latency) {
            (Some(lag), _) => (lag, "lag"),
            (None, Some(l)) => (l, "latency"),
            _ => continue,
        };
        let name = format!("{} [{what}] {}", r.workload, r.target);
        series.entry(name).or_default().push((r.concurrency.max(1) as f64, p.p50_us as f64 / 1000.0, p.p99_us as f64 / 1000.0));
    }
    let pts: Vec<&(f64, f64, f64)> = series.values().flatten().collect();
    let mut svg = String::new();
    let _ = write!(
        svg,
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{W}" height="{H}" font-family="sans-serif" font-size="11"><rect width="100%" height="100%" fill="white"/>"#
    );
    let _ = write!(svg, r#"<text x="{}" y="22" font-size="14" text-anchor="middle">{}</text>"#, (LEFT + W - RIGHT) / 2.0, esc(title));
    if pts.is_empty() {
        svg.push_str("<text x=\"100\" y=\"100\">no latency figures</text></svg>\n");
        return svg;
    }
    let (xmin, xmax) = pts.iter().fold((f64::MAX, f64::MIN), |(a, b), p| (a.min(p.0), b.max(p.0)));
    let (ymin, ymax) = pts.iter().fold((f64::MAX, f64::MIN), |(a, b), p| (a.min(p.1.min(p.2)), b.max(p.1.max(p.2))));
    let (lx0, lx1) = (xmin.log10().floor(), (xmax.log10().ceil()).max(xmin.log10().floor() + 1.0));
    let (ly0, ly1) = (ymin.max(1e-3).log10().floor(), ymax.max(1e-3).log10().ceil().max(ymin.max(1e-3).log10().floor() + 1.0));
    let (pw, ph) = (W - LEFT - RIGHT, H - TOP - BOTTOM);
    let x = |v: f64| LEFT + (v.log10() - lx0) / (lx1 - lx0) * pw;
    let y = |v: f64| TOP + ph - (v.max(1e-3).log10() - ly0) / (ly1 - ly0) * ph;
    let _ = write!(svg, r##"<rect x="{LEFT}" y="{TOP}" width="{pw}" height="{ph}" fill="none" stroke="#333"/>"##);
    for e in (ly0 as i32)..=(ly1 as i32) {
        let v = 10f64.powi(e);
        let _ = write!(
            svg,
            r##"<line x1="{LEFT}" x2="{}" y1="{y:.1}" y2="{y:.1}" stroke="#ddd"/><text x="{}" y="{:.1}" text-anchor="end">{}</text>"##,
            LEFT + pw,
            LEFT - 6.0,
            y(v) + 4.0,
            fmt_ms(v),
            y = y(v)
        );
    }
    let mut xt = 10f64.powf(lx0);
    for _ in 0..40 {
        if xt > 10f64.powf(lx1) * 1.0001 {
            break;
        }
        let _ = write!(
            svg,
            r##"<line x1="{xx:.1}" x2="{xx:.1}" y1="{TOP}" y2="{}" stroke="#eee"/><text x="{xx:.1}" y="{}" text-anchor="middle">{}</text>"##,
            TOP + ph,
            TOP + ph + 16.0,
            xt,
            xx = x(xt)
        );
        xt *= if xt < 10f64.powf(lx1) { 2.0 } else { 10.0 };
    }
    let _ = write!(svg, r#"<text x="{}" y="{}" text-anchor="middle">concurrency (clients)</text>"#, LEFT + pw / 2.0, H - 12.0);
    let _ = write!(
        svg,
        r#"<text x="16" y="{}" transform="rotate(-90 16 {})" text-anchor="middle">ms (p50 solid, p99 dashed)</text>"#,
        TOP + ph / 2.0,
        TOP + ph / 2.0
    );
    for (i, (name, mut v)) in series.into_iter().enumerate() {
        v.sort_by(|a, b| a.0.total_cmp(&b.0));
        let c = COLOURS[i % COLOURS.len()];
        for (k, dash) in [(1usize, ""), (2usize, r#" stroke-dasharray="5,3""#)] {
            let path: Vec<String> = v.iter().map(|p| format!("{:.1},{:.1}", x(p.0), y(if k == 1 { p.1 } else { p.2 }))).collect();
            let _ = write!(svg, r#"<polyline fill="none" stroke="{c}" stroke-width="2"{dash} points="{}"/>"#, path.join(" "));
            for p in &v {
                let _ = write!(svg, r#"<circle cx="{:.1}" cy="{:.1}" r="3" fill="{c}"/>"#, x(p.0), y(if k == 1 { p.1 } else { p.2 }));
            }
        }
        let ly = TOP + 10.0 + i as f64 * 16.0;
        let _ = write!(
            svg,
            r#"<line x1="{}" x2="{}" y1="{ly}" y2="{ly}" stroke="{c}" stroke-width="3"/><text x="{}" y="{}" font-size="10">{}</text>"#,
            W - RIGHT + 12.0,
            W - RIGHT + 30.0,
            W - RIGHT + 34.0,
            ly + 4.0,
            esc(&name)
        );
    }
    svg.push_str("</svg>\n");
    svg
}

fn fmt_ms(v: f64) -> String {
    if v >= 1.0 {
        format!("{v:.0}")
    } else {
        format!("{v}")
    }
}
