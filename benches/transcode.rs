//! What serving protobuf by transcoding kache's JSON feed would cost, per pod,
//! against the second (protobuf) feed kache loads today. The pod is a real kube-apiserver
//! v1.36.2 answer (`testdata/golden/01-get-pod.json.body`). Measured: parsing the JSON
//! object, and parsing plus encoding it as the Pod message (what a transcoding feed does once
//! per object version, or a transcoding read once per object answered). And what the protobuf
//! feed pays per object version to key and index it: the Pod message decoded whole, against
//! only what the feed keys and selects it by (`pb_to_json_only`, as `cache::object::read_projection`).

use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use kache::api::transcode::{json_to_pb, pb_to_json, pb_to_json_only, MessageType, Projection};

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
    let pods = kache::sim::catalog::resource("pods");
    let meta = ["metadata.name", "metadata.namespace", "metadata.resourceVersion", "metadata.labels"];
    let read = Projection::of(meta.into_iter().chain(pods.fields.iter().map(String::as_str)));
    let mut g = c.benchmark_group("decode_pod_pb");
    g.throughput(Throughput::Elements(1));
    g.bench_function("whole", |b| b.iter(|| pb_to_json(ty, &pb).expect("decodes")));
    g.bench_function("metadata_and_selectable_fields", |b| b.iter(|| pb_to_json_only(ty, &pb, &read).expect("decodes")));
    g.finish();
}

criterion_group!(benches, transcode);
criterion_main!(benches);
