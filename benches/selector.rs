//! Label selector matching over 600 cached pods with 8 labels each, as a LIST filters them
//! (`&dyn LabelSource` on the stored object): selectors of thousands of `!=` or `!key` terms,
//! whose matching cost should not grow with the term count, and an ordinary one. Parsing
//! (once per request) is measured apart.

use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use kache::api::selector::{LabelSelector, LabelSource};
use serde_json::{json, Value};
use std::collections::BTreeMap;

const PODS: usize = 600;

fn pod_labels(i: usize) -> BTreeMap<String, String> {
    [
        ("app", format!("app-{}", i % 10)),
        ("tier", ["a", "b", "c", "d"][i % 4].to_owned()),
        ("env", ["prod", "staging"][i % 2].to_owned()),
        ("pod-template-hash", format!("{:010x}", i * 7919)),
        ("version", format!("v{}", i % 3)),
        ("team", format!("team-{}", i % 7)),
        ("topology.kubernetes.io/region", "eu-west-1".to_owned()),
        ("topology.kubernetes.io/zone", format!("eu-west-1{}", ["a", "b", "c"][i % 3])),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_owned(), v))
    .collect()
}

/// The cache's objects (`cache::Object`, not nameable outside the crate) for `labels`.
fn pods(labels: &[BTreeMap<String, String>]) -> Vec<impl LabelSource> {
    let r = kache::sim::catalog::resource("pods");
    labels
        .iter()
        .enumerate()
        .map(|(i, l)| {
            let v: Value = json!({
                "metadata": {"name": format!("pod-{i}"), "namespace": "default", "resourceVersion": (1000 + i).to_string(), "labels": l},
                "spec": {"nodeName": format!("node-{}", i % 20), "containers": [{"name": "c", "image": "busybox"}]},
                "status": {"phase": "Running"},
            });
            kache::sim::encode(&r, &v).expect("encode")
        })
        .collect()
}

fn terms(n: usize, term: impl Fn(usize) -> String) -> String {
    (0..n).map(term).collect::<Vec<_>>().join(",")
}

fn cases() -> Vec<(&'static str, String)> {
    let real_keys =
        ["app", "tier", "env", "pod-template-hash", "version", "team", "topology.kubernetes.io/region", "topology.kubernetes.io/zone"];
    let mut ne_1000: Vec<String> = real_keys.iter().map(|k| format!("{k}!=none")).collect();
    ne_1000.extend((real_keys.len()..1000).map(|i| format!("k{i}!=v")));
    vec![
        ("ne_5000_one_key", terms(5000, |i| format!("app!=v{i}"))),
        ("not_exists_8000_keys", terms(8000, |i| format!("!key-{i}"))),
        ("ne_1000_keys", ne_1000.join(",")),
        ("ordinary", "app=app-3,tier in (a,b)".to_owned()),
    ]
}

fn count(sel: &LabelSelector, objects: &[impl LabelSource]) -> usize {
    objects.iter().filter(|o| sel.matches(*o as &dyn LabelSource)).count()
}

fn bench_selector(c: &mut Criterion) {
    let maps: Vec<_> = (0..PODS).map(pod_labels).collect();
    let objects = pods(&maps);
    let cases = cases();
    let mut parse = c.benchmark_group("selector/parse");
    for (name, text) in &cases {
        parse.bench_function(*name, |b| b.iter(|| LabelSelector::parse(text).expect("parses")));
    }
    parse.finish();
    let mut group = c.benchmark_group("selector/match_600");
    group.throughput(Throughput::Elements(PODS as u64));
    for (name, text) in &cases {
        let sel = LabelSelector::parse(text).expect("parses");
        let n = count(&sel, &objects);
        assert_eq!(n, maps.iter().filter(|m| sel.matches(*m)).count(), "{name}: objects and maps disagree");
        eprintln!("{name}: {n} of {PODS} match");
        group.bench_function(*name, |b| b.iter(|| count(&sel, &objects)));
    }
    group.finish();
}

criterion_group! {
    name = benches;
    config = Criterion::default().sample_size(20);
    targets = bench_selector
}
criterion_main!(benches);
