//! The reports pinned byte for byte: a fixed run (`testdata/run.json`, assembled from the
//! runs in `loadtest/results` and a small `seed`-shaped run on the simulator, so that every
//! section and branch is reached) rendered and compared with the files next to it.
//! `KACHE_LOADTEST_BLESS=1` writes them again.

use super::*;
use std::path::PathBuf;

fn testdata(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("src/report/testdata").join(name)
}

fn fixture() -> RunReport {
    serde_json::from_slice(&std::fs::read(testdata("run.json")).unwrap()).unwrap()
}

/// `got` against `testdata/<name>`, showing where they first differ.
fn pinned(name: &str, got: &str) {
    let path = testdata(name);
    if std::env::var_os("KACHE_LOADTEST_BLESS").is_some() {
        std::fs::write(&path, got).unwrap();
        return;
    }
    let want = std::fs::read_to_string(&path).unwrap();
    if got != want {
        let at = got.bytes().zip(want.bytes()).position(|(g, w)| g != w).unwrap_or(got.len().min(want.len()));
        let around = |s: &str| String::from_utf8_lossy(&s.as_bytes()[at.saturating_sub(80)..(at + 80).min(s.len())]).into_owned();
        panic!("{name} differs from {} at byte {at}:\n got: {:?}\nwant: {:?}", path.display(), around(got), around(&want));
    }
}

/// A run with nothing measured: no sections but the fixed ones, no plot.
fn empty() -> RunReport {
    let mut rep = fixture();
    rep.results.clear();
    rep.targets.clear();
    rep.checks.clear();
    rep.thresholds = None;
    rep.placement.clear();
    rep.self_contained = false;
    rep
}

#[test]
fn the_markdown_report_is_unchanged() {
    pinned("run.md", &markdown::render("run", &fixture()));
    pinned("empty.md", &markdown::render("empty", &empty()));
    let mut met = empty();
    met.checks = fixture().checks.into_iter().filter(|c| c.met).collect();
    pinned("met.md", &markdown::render("met", &met));
}

#[test]
fn the_plot_is_unchanged() {
    let rep = fixture();
    pinned("run.svg", &svg::plot("a <title> & more", &rep.results));
    pinned("empty.svg", &svg::plot("empty", &[]));
}

#[test]
fn the_targets_checked_are_unchanged() {
    let full = fixture().results;
    // The kubelets and memory phases below their targets' scale, a kubelet watch dropped.
    let mut small = full.clone();
    for r in &mut small {
        if r.workload.starts_with("kubelets") {
            r.concurrency = 1000;
            r.watches_ended_early = 1;
        }
        if r.workload.starts_with("memory") {
            for (k, v) in r.extra.iter_mut() {
                if k.starts_with("pods_") {
                    *v = 1000.0;
                }
            }
        }
    }
    // The seed's two classes of watchers at its scale (judged), then one event missed
    // through kache.
    let mut seed = full.clone();
    for r in &mut seed {
        if r.workload == "kubelets pb x200" {
            r.concurrency = 5000;
        }
        if r.workload.starts_with("cluster watchers") {
            r.concurrency = 100;
        }
    }
    let mut missed = seed.clone();
    for r in missed.iter_mut().filter(|r| r.target == "kache" && r.workload.starts_with("cluster watchers")) {
        r.extra.insert("patch_events_missed".into(), 1.0);
    }
    let all = [
        ("run", targets(&full)),
        ("below scale", targets(&small)),
        ("seed at scale", targets(&seed)),
        ("seed, an event missed", targets(&missed)),
        ("nothing measured", targets(&[])),
    ];
    pinned("targets.json", &(serde_json::to_string_pretty(&all).unwrap() + "\n"));
}
