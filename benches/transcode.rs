//! Issue 22, item 3: what serving protobuf by transcoding kache's JSON feed would cost, per pod,
//! against the second (protobuf) feed kache loads today. The pod is a real kube-apiserver
//! v1.36.2 answer (`testdata/golden/01-get-pod.json.body`). Measured: parsing the JSON
//! object, and parsing plus encoding it as the Pod message (what a transcoding feed does once
//! per object version, or a transcoding read once per object answered).

use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use kache::api::transcode::{json_to_pb, MessageType};

fn pod_json() -> Vec<u8> {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/testdata/golden/01-get-pod.json.body");
    std::fs::read(path).expect("the golden pod")
}

fn transcode(c: &mut Criterion) {
    let json = pod_json();
    let ty = MessageType::for_kind("", "v1", "Pod").expect("Pod's schema");
    let v: serde_json::Value = serde_json::from_slice(&json).expect("a pod");
    let pb = json_to_pb(ty, &v).expect("transcodes");
    eprintln!("pod: {} bytes of JSON, {} bytes of protobuf (bare message)", json.len(), pb.len());
    let mut g = c.benchmark_group("transcode_pod");
    g.throughput(Throughput::Elements(1));
    g.bench_function("parse_json", |b| b.iter(|| serde_json::from_slice::<serde_json::Value>(&json).expect("a pod")));
    g.bench_function("parse_json_and_encode_pb", |b| {
        b.iter(|| {
            let v: serde_json::Value = serde_json::from_slice(&json).expect("a pod");
            json_to_pb(ty, &v).expect("transcodes")
        })
    });
    g.finish();
}

criterion_group!(benches, transcode);
criterion_main!(benches);
