//! LIST assembly from a cache of 30,000 realistic pods on 1,000 nodes: full list, one
//! namespace, one node (`spec.nodeName`, through the index), a label selector; JSON and
//! protobuf. Measures building the response and walking every body piece (what a socket
//! write would send), not the network.

use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use http_body_util::BodyExt;
use kache::api::media::Format;
use kache::api::query::Options;
use kache::cache::{KindCache, Limits};
use kache::serve::handler;
use kache::sim::synth::{ClusterSpec, Synth};
use std::sync::Arc;

fn pods_cache(pods: usize, nodes: usize) -> Arc<KindCache> {
    let r = Arc::new(kache::sim::catalog::resource("pods"));
    let synth = Synth::new(ClusterSpec { nodes, pods, namespaces: 30, seed: 7, pod_bytes: None });
    let mut objects = Vec::with_capacity(pods);
    for (i, mut v) in synth.pods().enumerate() {
        v["metadata"]["resourceVersion"] = serde_json::Value::String((1000 + i).to_string());
        objects.push(kache::sim::encode(&r, &v).expect("encode"));
    }
    let cache = KindCache::new(r, 1000 + pods as u64, Limits::default());
    cache.replace(objects, 1000 + pods as u64);
    Arc::new(cache)
}

async fn list_bytes(cache: &KindCache, ns: Option<&str>, query: &str, fmt: Format) -> u64 {
    let opts = Options::parse(Some(query)).expect("query");
    let resp = handler::list(cache, ns, &opts, fmt, kache::api::media::View::Object).await.expect("list");
    let mut body = resp.into_body();
    let mut n = 0u64;
    while let Some(Ok(frame)) = body.frame().await {
        if let Ok(data) = frame.into_data() {
            n += bytes::Buf::remaining(&data) as u64;
        }
    }
    n
}

fn bench_list(c: &mut Criterion) {
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().expect("runtime");
    let cache = pods_cache(30_000, 1_000);
    let cases: &[(&str, Option<&str>, &str)] = &[
        ("full", None, "resourceVersion=0"),
        ("namespace", Some("ns-0007"), "resourceVersion=0"),
        ("node", None, "resourceVersion=0&fieldSelector=spec.nodeName%3Dnode-0042"),
        ("label", None, "resourceVersion=0&labelSelector=tier%3Dfrontend,env%3Dprod"),
    ];
    for (name, ns, query) in cases {
        let mut group = c.benchmark_group(format!("list/{name}"));
        for fmt in [Format::Json, Format::Protobuf] {
            let bytes = rt.block_on(list_bytes(&cache, *ns, query, fmt));
            group.throughput(Throughput::Bytes(bytes));
            group.bench_function(format!("{fmt:?}"), |b| b.iter(|| rt.block_on(list_bytes(&cache, *ns, query, fmt))));
        }
        group.finish();
    }
}

criterion_group! {
    name = benches;
    config = Criterion::default().sample_size(20);
    targets = bench_list
}
criterion_main!(benches);
