//! The transcoder's API and unit behaviour: the schema, special types, times and durations,
//! errors, the decoder's leniency, and properties (round trips; no input panics).

use super::*;

#[test]
fn for_kind_knows_the_roots() {
    for (g, k, name) in [
        ("", "Pod", "k8s.io.api.core.v1.Pod"),
        ("", "Node", "k8s.io.api.core.v1.Node"),
        ("", "Namespace", "k8s.io.api.core.v1.Namespace"),
        ("", "Service", "k8s.io.api.core.v1.Service"),
        ("", "ConfigMap", "k8s.io.api.core.v1.ConfigMap"),
        ("", "Secret", "k8s.io.api.core.v1.Secret"),
        ("", "Event", "k8s.io.api.core.v1.Event"),
        ("", "Endpoints", "k8s.io.api.core.v1.Endpoints"),
        ("apps", "Deployment", "k8s.io.api.apps.v1.Deployment"),
        ("", "Status", "k8s.io.apimachinery.pkg.apis.meta.v1.Status"),
        ("meta.k8s.io", "Status", "k8s.io.apimachinery.pkg.apis.meta.v1.Status"),
    ] {
        assert_eq!(MessageType::for_kind(g, "v1", k).unwrap().proto_name(), name);
    }
    assert_eq!(MessageType::for_kind("", "v1", "Deployment"), None);
    assert_eq!(MessageType::for_kind("apps", "v1beta1", "Deployment"), None);
    assert_eq!(MessageType::for_kind("", "v1", "PodList"), None);
}

#[test]
fn schema_is_consistent() {
    for (i, m) in schema::MESSAGES.iter().enumerate() {
        assert!(m.fields.windows(2).all(|w| w[0].tag < w[1].tag), "{}", m.name);
        for f in m.fields {
            assert_eq!(f.inline, f.json.is_empty(), "{}.{}", m.name, f.name);
            let ids = match f.kind {
                FieldKind::Message(id) | FieldKind::Map(MapValue::Message(id)) => Some(id),
                _ => None,
            };
            if let Some(id) = ids {
                assert!(usize::from(id) < schema::MESSAGES.len(), "{}.{}", m.name, f.name);
            }
        }
        let _ = i;
    }
}

#[test]
fn json_names_with_acronyms() {
    let pod = json!({"spec": {"hostIPC": true, "hostPID": true, "containers": [{"name": "c"}]},
                     "status": {"podIPs": [{"ip": "10.0.0.1"}], "hostIP": "1.2.3.4", "qosClass": "Burstable"}});
    let pb = json_to_pb(ty("Pod"), &pod).unwrap();
    assert_eq!(pb_to_json(ty("Pod"), &pb).unwrap(), pod);
    // Go's decoder is case-insensitive; so is ours (output uses the canonical name).
    let loose = json!({"spec": {"hostipc": true, "host_pid": true}});
    let back = pb_to_json(ty("Pod"), &json_to_pb(ty("Pod"), &loose).unwrap()).unwrap();
    assert_eq!(back, json!({"spec": {"hostIPC": true, "hostPID": true}}));
}

#[test]
fn kind_api_version_and_unknown_keys_are_ignored() {
    let cm = json!({"kind": "ConfigMap", "apiVersion": "v1", "metadata": {"name": "x", "futureField": 1}, "data": {"a": "b"}});
    let pb = json_to_pb(ty("ConfigMap"), &cm).unwrap();
    assert_eq!(pb_to_json(ty("ConfigMap"), &pb).unwrap(), json!({"metadata": {"name": "x"}, "data": {"a": "b"}}));
}

#[test]
fn empty_values_are_written_when_present() {
    let cm = json!({"metadata": {"name": "", "generation": 0, "labels": {}}, "immutable": false});
    let pb = json_to_pb(ty("ConfigMap"), &cm).unwrap();
    // metadata{1: "", 7: 0}, immutable(4) false; empty maps have no entries to write.
    assert_eq!(pb, [0x0a, 0x04, 0x0a, 0x00, 0x38, 0x00, 0x20, 0x00]);
    assert_eq!(pb_to_json(ty("ConfigMap"), &pb).unwrap(), json!({"metadata": {"name": "", "generation": 0}, "immutable": false}));
}

#[test]
fn map_entries_are_sorted_and_complete() {
    let cm = json!({"data": {"b": "2", "a": "", "é": "x"}});
    let pb = json_to_pb(ty("ConfigMap"), &cm).unwrap();
    let entries: Vec<_> = fields(&pb).into_iter().map(|f| fields(&f.2)).collect();
    let keys: Vec<_> = entries.iter().map(|e| String::from_utf8(e[0].2.clone()).unwrap()).collect();
    assert_eq!(keys, ["a", "b", "é"]);
    assert_eq!(entries[0].len(), 2, "empty value still written");
    // A map entry without value (or key) decodes to the empty value.
    let bare = [0x12, 0x03, 0x0a, 0x01, b'k'];
    assert_eq!(pb_to_json(ty("ConfigMap"), &bare).unwrap(), json!({"data": {"k": ""}}));
}

#[test]
fn special_types() {
    let pod = json!({
        "metadata": {"creationTimestamp": "2026-11-22T02:05:06Z",
                     "deletionTimestamp": "2026-11-22T04:05:06+02:00"},
        "spec": {"containers": [{
            "name": "c",
            "resources": {"requests": {"cpu": "10m", "memory": "16Mi"}, "limits": {"cpu": 2}},
            "ports": [{"containerPort": 80}],
            "livenessProbe": {"httpGet": {"port": 8080, "path": "/healthz"}, "periodSeconds": 5},
            "readinessProbe": {"tcpSocket": {"port": "http"}},
        }]}
    });
    let pb = json_to_pb(ty("Pod"), &pod).unwrap();
    use prost::Message as _;
    let p = k8s_pb::api::core::v1::Pod::decode(pb.as_slice()).unwrap();
    let meta = p.metadata.as_ref().unwrap();
    assert_eq!(meta.creation_timestamp.as_ref().unwrap().seconds, Some(1_795_313_106));
    assert_eq!(meta.deletion_timestamp.as_ref().unwrap().seconds, Some(1_795_313_106));
    let c = &p.spec.as_ref().unwrap().containers[0];
    let res = c.resources.as_ref().unwrap();
    assert_eq!(res.requests["cpu"].string.as_deref(), Some("10m"));
    assert_eq!(res.limits["cpu"].string.as_deref(), Some("2"));
    let http = c.liveness_probe.as_ref().unwrap().handler.as_ref().unwrap().http_get.as_ref().unwrap();
    let port = http.port.as_ref().unwrap();
    assert_eq!((port.r#type, port.int_val, port.str_val.as_deref()), (Some(0), Some(8080), Some("")));
    let tcp = c.readiness_probe.as_ref().unwrap().handler.as_ref().unwrap().tcp_socket.as_ref().unwrap();
    assert_eq!(tcp.port.as_ref().unwrap().str_val.as_deref(), Some("http"));

    let back = pb_to_json(ty("Pod"), &pb).unwrap();
    assert_eq!(back["metadata"]["deletionTimestamp"], "2026-11-22T02:05:06Z");
    assert_eq!(back["spec"]["containers"][0]["livenessProbe"], json!({"httpGet": {"path": "/healthz", "port": 8080}, "periodSeconds": 5}));
    assert_eq!(back["spec"]["containers"][0]["readinessProbe"], json!({"tcpSocket": {"port": "http"}}));
    assert_eq!(back["spec"]["containers"][0]["resources"]["limits"]["cpu"], "2");
}

#[test]
fn inline_structs_always_written() {
    // Probe.handler is an embedded Go struct: written even when empty (Go does too).
    let pod = json!({"spec": {"containers": [{"name": "c", "livenessProbe": {"periodSeconds": 5}}]}});
    let pb = json_to_pb(ty("Pod"), &pod).unwrap();
    use prost::Message as _;
    let p = k8s_pb::api::core::v1::Pod::decode(pb.as_slice()).unwrap();
    let probe = p.spec.unwrap().containers[0].liveness_probe.clone().unwrap();
    assert!(probe.handler.is_some());
    assert_eq!(probe.period_seconds, Some(5));
    // Volume.volumeSource and the LocalObjectReference in selectors are inline too.
    let pod = json!({"spec": {"volumes": [{"name": "v", "configMap": {"name": "cm", "optional": true}}],
        "containers": [{"name": "c", "env": [{"name": "E", "valueFrom": {"secretKeyRef": {"name": "s", "key": "k"}}}]}]}});
    let pb = json_to_pb(ty("Pod"), &pod).unwrap();
    assert_eq!(pb_to_json(ty("Pod"), &pb).unwrap(), pod);
    let p = k8s_pb::api::core::v1::Pod::decode(pb.as_slice()).unwrap();
    let vol = &p.spec.as_ref().unwrap().volumes[0];
    let cm = vol.volume_source.as_ref().unwrap().config_map.as_ref().unwrap();
    assert_eq!(cm.local_object_reference.as_ref().unwrap().name.as_deref(), Some("cm"));
}

#[test]
fn times() {
    assert_eq!(parse_timestamp("1970-01-01T00:00:00Z"), Some((0, 0)));
    assert_eq!(parse_timestamp("2026-11-22T02:05:06Z"), Some((1_795_313_106, 0)));
    assert_eq!(parse_timestamp("2026-11-22T02:05:06.123456Z"), Some((1_795_313_106, 123_456_000)));
    assert_eq!(parse_timestamp("2026-11-21T21:05:06-05:00"), Some((1_795_313_106, 0)));
    assert_eq!(parse_timestamp("0001-01-01T00:00:00Z"), Some((GO_ZERO_TIME_UNIX, 0)));
    assert_eq!(parse_timestamp("2024-02-29T00:00:00Z").map(|t| t.0), Some(1_709_164_800));
    for bad in [
        "",
        "2026-11-22",
        "2026-11-22T02:05:06",
        "2026-13-01T00:00:00Z",
        "2025-02-29T00:00:00Z",
        "2026-11-22T24:00:00Z",
        "2026-11-22T02:05:06.Z",
        "2026-11-22T02:05:06+0100",
        "２026-11-22T02:05:06Z",
    ] {
        assert_eq!(parse_timestamp(bad), None, "{bad}");
    }
    assert_eq!(format_timestamp(1_795_313_106, 0, false).unwrap(), "2026-11-22T02:05:06Z");
    assert_eq!(format_timestamp(1_795_313_106, 5_000, true).unwrap(), "2026-11-22T02:05:06.000005Z");
    assert_eq!(format_timestamp(-1, 0, false).unwrap(), "1969-12-31T23:59:59Z");
    assert_eq!(format_timestamp(i64::MAX, 0, false), None);
    // Event.eventTime is a MicroTime; the zero time is JSON null both ways.
    let ev = json!({"firstTimestamp": null, "eventTime": "2026-11-22T02:05:06.250000Z", "series": null});
    let pb = json_to_pb(ty("Event"), &ev).unwrap();
    assert_eq!(pb[..2], [0x32, 0x00], "null time: empty message, like Go's zero time");
    assert_eq!(pb_to_json(ty("Event"), &pb).unwrap(), json!({"firstTimestamp": null, "eventTime": "2026-11-22T02:05:06.250000Z"}));
    // The zero time spelled out in seconds also decodes to null.
    let zero = [0x32, 0x0d, 0x08, 0x80, 0x92, 0xb8, 0xc3, 0x98, 0xfe, 0xff, 0xff, 0xff, 0x01, 0x10, 0x00];
    assert_eq!(pb_to_json(ty("Event"), &zero).unwrap(), json!({"firstTimestamp": null}));
    let epoch = [0x32, 0x04, 0x08, 0x00, 0x10, 0x00];
    assert_eq!(pb_to_json(ty("Event"), &epoch).unwrap(), json!({"firstTimestamp": "1970-01-01T00:00:00Z"}));
}

#[test]
fn durations_like_go() {
    for (d, s) in [
        (0, "0s"),
        (1, "1ns"),
        (1_500, "1.5µs"),
        (1_100_000, "1.1ms"),
        (300_000_000_000, "5m0s"),
        (3_723_500_000_000, "1h2m3.5s"),
        (-90_000_000_000, "-1m30s"),
        (2_000_000_000, "2s"),
        (i64::MIN, "-2562047h47m16.854775808s"),
    ] {
        assert_eq!(format_go_duration(d), s);
        assert_eq!(parse_go_duration(s), Some(d), "{s}");
    }
    assert_eq!(parse_go_duration("1h30m"), Some(5_400_000_000_000));
    assert_eq!(parse_go_duration("1.5h"), Some(5_400_000_000_000));
    assert_eq!(parse_go_duration("10us"), Some(10_000));
    assert_eq!(parse_go_duration(".5s"), Some(500_000_000));
    for bad in ["", "5", "5x", "-", "s", "1.s.", "9999999999999999999h", "3000000h"] {
        assert_eq!(parse_go_duration(bad), None, "{bad}");
    }
    let mut buf = Vec::new();
    encode_special(Special::Duration, &json!("5m0s"), &mut buf).unwrap();
    assert_eq!(decode_special(Special::Duration, &buf).unwrap(), json!("5m0s"));
}

#[test]
fn raw_json_types() {
    let v = json!({"f:a": {".": {}}, "x": [1, "<&>"]});
    for special in [Special::FieldsV1, Special::RawExtension] {
        let mut buf = Vec::new();
        encode_special(special, &v, &mut buf).unwrap();
        let raw = &fields(&buf)[0].2;
        assert_eq!(raw.as_slice(), br#"{"f:a":{".":{}},"x":[1,"\u003c\u0026\u003e"]}"#);
        assert_eq!(decode_special(special, &buf).unwrap(), v);
        assert!(decode_special(special, &[0x0a, 0x01, b'{']).is_err());
    }
    assert_eq!(decode_special(Special::RawExtension, &[]).unwrap(), Value::Null);
}

#[test]
fn int_or_string_and_quantity_edges() {
    let mut buf = Vec::new();
    encode_special(Special::IntOrString, &json!(-3), &mut buf).unwrap();
    assert_eq!(decode_special(Special::IntOrString, &buf).unwrap(), json!(-3));
    assert!(encode_special(Special::IntOrString, &json!(1.5), &mut buf).is_err());
    assert!(encode_special(Special::IntOrString, &json!(1u64 << 40), &mut buf).is_err());
    assert!(decode_special(Special::IntOrString, &[0x08, 0x02]).is_err());
    assert_eq!(decode_special(Special::Quantity, &[]).unwrap(), json!("0"));
}

#[test]
fn errors_name_the_field() {
    let err = |kind: &str, v: Value| json_to_pb(ty(kind), &v).unwrap_err().to_string();
    assert_eq!(
        err("Pod", json!({"spec": {"containers": [{"name": "a"}, {"name": "b", "ports": [{"containerPort": "80"}]}]}})),
        "spec.containers[1].ports[0].containerPort: expected a 32-bit integer, found string \"80\""
    );
    assert_eq!(err("ConfigMap", json!({"metadata": {"labels": {"app": 1}}})), "metadata.labels[app]: expected a string, found number 1");
    assert_eq!(err("Secret", json!({"data": {"k": "not base64!"}})), "data[k]: expected a base64 string, found string \"not base64!\"");
    assert_eq!(
        err("Pod", json!({"metadata": {"creationTimestamp": "yesterday"}})),
        "metadata.creationTimestamp: expected an RFC 3339 time, found string \"yesterday\""
    );
    assert_eq!(
        err("Pod", json!({"spec": {"containers": [{"livenessProbe": {"httpGet": {"port": true}}}]}})),
        "spec.containers[0].livenessProbe.httpGet.port: expected a 32-bit integer or a string, found boolean true"
    );
    assert_eq!(err("Pod", json!([])), "(top level): expected an object, found an array");
    assert_eq!(err("Pod", json!({"spec": {"priority": 1u64 << 33}})), "spec.priority: expected a 32-bit integer, found number 8589934592");

    // Decoding: the path of the field being read.
    let e = pb_to_json(ty("ConfigMap"), &[0x0a, 0x03, 0x0a, 0x09, b'a']).unwrap_err();
    assert_eq!(e.to_string(), "metadata.name: protobuf input is truncated");
    let e = pb_to_json(ty("ConfigMap"), &[0x0a, 0x02, 0x08, 0x01]).unwrap_err();
    assert_eq!(e.to_string(), "metadata.name: wire type 0 does not fit a field of type string");
    let e = pb_to_json(ty("ConfigMap"), &[0x0a, 0x03, 0x0a, 0x01, 0xff]).unwrap_err();
    assert!(matches!(e, TranscodeError::InvalidUtf8 { ref path } if path == "metadata.name"), "{e}");
    let e = pb_to_json(ty("ConfigMap"), &[0x03]).unwrap_err();
    assert!(matches!(e, TranscodeError::BadKey { wire_type: 3, .. }), "{e}");
    let e = pb_to_json(ty("ConfigMap"), &[0x20, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01]).unwrap_err();
    assert!(matches!(e, TranscodeError::BadVarint { .. }), "{e}");
}

#[test]
fn decoder_accepts_packed_and_skips_unknown() {
    // ContainerPort? No: Capabilities has only strings. Use a repeated int64:
    // PodSecurityContext.supplementalGroups (tag 4), packed.
    let psc = [0x22, 0x03, 0x01, 0x02, 0x03];
    let spec = [&[0x72u8, psc.len() as u8][..], &psc].concat();
    let mut pod = vec![0x12, spec.len() as u8];
    pod.extend_from_slice(&spec);
    // Unknown fields of every wire type are skipped.
    pod.extend_from_slice(&[0xf8, 0x3f, 0x01, 0xf9, 0x3f, 1, 2, 3, 4, 5, 6, 7, 8, 0xfa, 0x3f, 0x00, 0xfd, 0x3f, 1, 2, 3, 4]);
    let json = pb_to_json(ty("Pod"), &pod).unwrap();
    assert_eq!(json, json!({"spec": {"securityContext": {"supplementalGroups": [1, 2, 3]}}}));
    // And we write them unpacked, like gogo for proto2.
    let ours = json_to_pb(ty("Pod"), &json).unwrap();
    assert_eq!(ours, [0x12, 0x08, 0x72, 0x06, 0x20, 0x01, 0x20, 0x02, 0x20, 0x03]);
}

#[test]
fn long_messages_get_multibyte_lengths() {
    for n in [0usize, 1, 126, 127, 128, 16_383, 16_384, 200_000] {
        let cm = json!({"metadata": {"name": "x".repeat(n)}});
        let pb = json_to_pb(ty("ConfigMap"), &cm).unwrap();
        use prost::Message as _;
        let decoded = k8s_pb::api::core::v1::ConfigMap::decode(pb.as_slice()).unwrap();
        assert_eq!(decoded.metadata.unwrap().name.unwrap().len(), n);
        assert_eq!(pb_to_json(ty("ConfigMap"), &pb).unwrap(), cm);
    }
}

#[test]
fn varint_len_matches_encoding() {
    for v in [0u64, 1, 127, 128, 300, 16_383, 16_384, u64::from(u32::MAX), u64::MAX] {
        let mut b = Vec::new();
        put_varint(&mut b, v);
        assert_eq!(b.len(), varint_len(v));
        assert_eq!(Reader::new(&b).varint().unwrap(), v);
    }
}

fn label_map() -> impl Strategy<Value = serde_json::Map<String, Value>> {
    proptest::collection::btree_map("[a-z0-9./-]{0,20}|\\PC{0,8}", "\\PC{0,30}", 0..12)
        .prop_map(|m| m.into_iter().map(|(k, v)| (k, Value::String(v))).collect())
}

proptest! {
    #[test]
    fn labels_and_annotations_round_trip(labels in label_map(), annotations in label_map()) {
        let cm = json!({"metadata": {"name": "x", "labels": labels, "annotations": annotations}});
        let pb = json_to_pb(ty("ConfigMap"), &cm).unwrap();
        // An empty map has no entries to write, so it comes back absent.
        let mut expected = json!({"metadata": {"name": "x"}});
        if !labels.is_empty() {
            expected["metadata"]["labels"] = Value::Object(labels.clone());
        }
        if !annotations.is_empty() {
            expected["metadata"]["annotations"] = Value::Object(annotations.clone());
        }
        prop_assert_eq!(pb_to_json(ty("ConfigMap"), &pb).unwrap(), expected);
        use prost::Message as _;
        let decoded = k8s_pb::api::core::v1::ConfigMap::decode(pb.as_slice()).unwrap();
        prop_assert_eq!(decoded.metadata.unwrap().labels.len(), labels.len());
    }

    #[test]
    fn arbitrary_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..300)) {
        for (_, _, _, id) in schema::ROOTS {
            let _ = pb_to_json(MessageType(*id), &bytes);
        }
    }

    #[test]
    fn mutated_golden_pod_never_panics(pos in 0usize..2000, byte in any::<u8>(), cut in 0usize..2000) {
        let (_, mut raw) = unwrap_unknown(&golden("01-get-pod.pb.body"));
        let pos = pos % raw.len();
        raw[pos] = byte;
        raw.truncate(cut.max(pos + 1));
        if let Ok(json) = pb_to_json(ty("Pod"), &raw) {
            // Whatever decodes, encodes.
            let _ = json_to_pb(ty("Pod"), &json);
        }
    }

    #[test]
    fn arbitrary_json_never_panics(v in arb_json()) {
        for (_, _, _, id) in schema::ROOTS {
            let _ = json_to_pb(MessageType(*id), &v);
            let _ = json_to_pb(MessageType(*id), &json!({"metadata": v.clone(), "spec": v.clone(), "data": v.clone()}));
        }
    }
}

fn arb_json() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::from),
        any::<i64>().prop_map(Value::from),
        any::<f64>().prop_filter("finite", |x| x.is_finite()).prop_map(Value::from),
        "[a-zA-Z:.0-9-]{0,12}".prop_map(Value::from),
    ];
    leaf.prop_recursive(4, 40, 6, |inner| {
        prop_oneof![
            proptest::collection::vec(inner.clone(), 0..4).prop_map(Value::from),
            proptest::collection::btree_map(
                prop_oneof![
                    Just("name".to_owned()),
                    Just("labels".to_owned()),
                    Just("containers".to_owned()),
                    Just("creationTimestamp".to_owned()),
                    Just("port".to_owned()),
                    "[a-z]{1,6}"
                ],
                inner,
                0..4
            )
            .prop_map(|m| Value::Object(m.into_iter().collect())),
        ]
    })
}
