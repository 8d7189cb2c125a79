//! The plot, as hand-written SVG: latency (p50 solid, p99 dashed; log scale, ms) against
//! concurrency (log scale), one colour per workload and target (direct and kache side by
//! side). Watch phases plot delivery lag against the number of watching clients.
//!
//! Hand-written rather than drawn with `plotters` (its SVG backend): its drawing code would
//! be shorter, but it writes every dash of a p99 line as a `<polyline>` of its own, so its
//! SVG is several times larger, and it labels log axes `1.0`, `10.0`, `1000.0` by decade
//! only, where this one ticks each doubling of clients; matching that needs its label
//! formatters and key points, for three more crates.

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

/// One plotted point: concurrency (clients), p50 and p99 in ms.
type Point = (f64, f64, f64);

/// Render the plot for one run's results.
pub fn plot(title: &str, results: &[PhaseResult]) -> String {
    let series = series(results);
    let mut svg = String::new();
    let _ = write!(
        svg,
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{W}" height="{H}" font-family="sans-serif" font-size="11"><rect width="100%" height="100%" fill="white"/>"#
    );
    let _ = write!(svg, r#"<text x="{}" y="22" font-size="14" text-anchor="middle">{}</text>"#, (LEFT + W - RIGHT) / 2.0, esc(title));
    let Some(axes) = Axes::fit(series.values().flatten()) else {
        svg.push_str("<text x=\"100\" y=\"100\">no latency figures</text></svg>\n");
        return svg;
    };
    axes.draw(&mut svg);
    for (i, (name, mut points)) in series.into_iter().enumerate() {
        points.sort_by(|a, b| a.0.total_cmp(&b.0));
        let colour = COLOURS[i % COLOURS.len()];
        axes.lines(&mut svg, &points, colour);
        legend(&mut svg, i, &name, colour);
    }
    svg.push_str("</svg>\n");
    svg
}

/// The points of each series (`<workload> [lag|latency] <target>`): lag where a phase
/// measured it, else latency; phases with neither are left out.
fn series(results: &[PhaseResult]) -> BTreeMap<String, Vec<Point>> {
    let mut series: BTreeMap<String, Vec<Point>> = BTreeMap::new();
    for r in results {
        let (p, what) = match (&r.lag, &r.latency) {
            (Some(lag), _) => (lag, "lag"),
            (None, Some(l)) => (l, "latency"),
            _ => continue,
        };
        let name = format!("{} [{what}] {}", r.workload, r.target);
        series.entry(name).or_default().push((r.concurrency.max(1) as f64, p.p50_us as f64 / 1000.0, p.p99_us as f64 / 1000.0));
    }
    series
}

/// The plot area and its two log scales, in whole decades.
struct Axes {
    /// log10 of the first and last concurrency shown.
    lx0: f64,
    lx1: f64,
    /// log10 of the first and last milliseconds shown.
    ly0: f64,
    ly1: f64,
    /// The plot area's width and height.
    pw: f64,
    ph: f64,
}

impl Axes {
    /// Axes holding every point; None without points.
    fn fit<'a>(points: impl Iterator<Item = &'a Point>) -> Option<Axes> {
        let pts: Vec<&Point> = points.collect();
        if pts.is_empty() {
            return None;
        }
        let (xmin, xmax) = pts.iter().fold((f64::MAX, f64::MIN), |(a, b), p| (a.min(p.0), b.max(p.0)));
        let (ymin, ymax) = pts.iter().fold((f64::MAX, f64::MIN), |(a, b), p| (a.min(p.1.min(p.2)), b.max(p.1.max(p.2))));
        let (lx0, lx1) = (xmin.log10().floor(), (xmax.log10().ceil()).max(xmin.log10().floor() + 1.0));
        let (ly0, ly1) = (ymin.max(1e-3).log10().floor(), ymax.max(1e-3).log10().ceil().max(ymin.max(1e-3).log10().floor() + 1.0));
        Some(Axes { lx0, lx1, ly0, ly1, pw: W - LEFT - RIGHT, ph: H - TOP - BOTTOM })
    }

    fn x(&self, v: f64) -> f64 {
        LEFT + (v.log10() - self.lx0) / (self.lx1 - self.lx0) * self.pw
    }

    fn y(&self, v: f64) -> f64 {
        TOP + self.ph - (v.max(1e-3).log10() - self.ly0) / (self.ly1 - self.ly0) * self.ph
    }

    /// The frame, a grid line per decade of ms, a tick per doubling of clients, the labels.
    fn draw(&self, svg: &mut String) {
        let (pw, ph) = (self.pw, self.ph);
        let _ = write!(svg, r##"<rect x="{LEFT}" y="{TOP}" width="{pw}" height="{ph}" fill="none" stroke="#333"/>"##);
        for e in (self.ly0 as i32)..=(self.ly1 as i32) {
            let v = 10f64.powi(e);
            let _ = write!(
                svg,
                r##"<line x1="{LEFT}" x2="{}" y1="{y:.1}" y2="{y:.1}" stroke="#ddd"/><text x="{}" y="{:.1}" text-anchor="end">{}</text>"##,
                LEFT + pw,
                LEFT - 6.0,
                self.y(v) + 4.0,
                fmt_ms(v),
                y = self.y(v)
            );
        }
        let mut xt = 10f64.powf(self.lx0);
        for _ in 0..40 {
            if xt > 10f64.powf(self.lx1) * 1.0001 {
                break;
            }
            let _ = write!(
                svg,
                r##"<line x1="{xx:.1}" x2="{xx:.1}" y1="{TOP}" y2="{}" stroke="#eee"/><text x="{xx:.1}" y="{}" text-anchor="middle">{}</text>"##,
                TOP + ph,
                TOP + ph + 16.0,
                xt,
                xx = self.x(xt)
            );
            xt *= if xt < 10f64.powf(self.lx1) { 2.0 } else { 10.0 };
        }
        let _ = write!(svg, r#"<text x="{}" y="{}" text-anchor="middle">concurrency (clients)</text>"#, LEFT + pw / 2.0, H - 12.0);
        let _ = write!(
            svg,
            r#"<text x="16" y="{}" transform="rotate(-90 16 {})" text-anchor="middle">ms (p50 solid, p99 dashed)</text>"#,
            TOP + ph / 2.0,
            TOP + ph / 2.0
        );
    }

    /// One series: p50 solid and p99 dashed, each a line through its points.
    fn lines(&self, svg: &mut String, points: &[Point], colour: &str) {
        for (p99, dash) in [(false, ""), (true, r#" stroke-dasharray="5,3""#)] {
            let ms = |p: &Point| if p99 { p.2 } else { p.1 };
            let path: Vec<String> = points.iter().map(|p| format!("{:.1},{:.1}", self.x(p.0), self.y(ms(p)))).collect();
            let _ = write!(svg, r#"<polyline fill="none" stroke="{colour}" stroke-width="2"{dash} points="{}"/>"#, path.join(" "));
            for p in points {
                let _ = write!(svg, r#"<circle cx="{:.1}" cy="{:.1}" r="3" fill="{colour}"/>"#, self.x(p.0), self.y(ms(p)));
            }
        }
    }
}

/// Series `i`'s entry in the legend, right of the plot.
fn legend(svg: &mut String, i: usize, name: &str, colour: &str) {
    let ly = TOP + 10.0 + i as f64 * 16.0;
    let _ = write!(
        svg,
        r#"<line x1="{}" x2="{}" y1="{ly}" y2="{ly}" stroke="{colour}" stroke-width="3"/><text x="{}" y="{}" font-size="10">{}</text>"#,
        W - RIGHT + 12.0,
        W - RIGHT + 30.0,
        W - RIGHT + 34.0,
        ly + 4.0,
        esc(name)
    );
}

fn fmt_ms(v: f64) -> String {
    if v >= 1.0 {
        format!("{v:.0}")
    } else {
        format!("{v}")
    }
}
