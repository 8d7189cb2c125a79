use super::*;
use serde_json::json;

#[test]
fn durations_read_as_the_apiservers_printers_write_them() {
    let cases = [
        (-2.5, "<invalid>"),
        (-1.5, "0s"),
        (0.0, "0s"),
        (79.9, "79s"),
        (119.0, "119s"),
        (120.0, "2m"),
        (150.0, "2m30s"),
        (600.0, "10m"),
        (10_799.0, "179m"),
        (10_800.0, "3h"),
        (12_600.0, "3h30m"),
        (8.0 * 3600.0, "8h"),
        (47.0 * 3600.0, "47h"),
        (48.0 * 3600.0, "2d"),
        (50.0 * 3600.0, "2d2h"),
        (8.0 * 86_400.0, "8d"),
        (729.0 * 86_400.0, "729d"),
        (730.0 * 86_400.0, "2y"),
        (731.0 * 86_400.0, "2y1d"),
        (8.0 * 365.0 * 86_400.0, "8y"),
    ];
    for (secs, want) in cases {
        assert_eq!(human_duration(secs), want, "{secs} s");
    }
}

#[test]
fn a_template_fills_its_times_in_and_escapes_unknown() {
    let v = json!({"metadata": {"name": "a<b", "creationTimestamp": "2026-11-22T02:05:06Z"}, "data": {"x": "1"}, "binaryData": {"y": ""}});
    let c = Printer::ConfigMap.cells(&v);
    let t = crate::api::time::parse_rfc3339("2026-11-22T02:05:06Z").unwrap() as f64;
    assert_eq!(String::from_utf8(c.render(t + 80.5)).unwrap(), r#"["a\u003cb",2,"80s"]"#);
    let none = Printer::ServiceAccount.cells(&json!({"metadata": {"name": "sa"}}));
    assert_eq!(String::from_utf8(none.render(t)).unwrap(), r#"["sa","\u003cunknown\u003e"]"#);
}

fn pod(status: serde_json::Value, spec: serde_json::Value) -> Vec<Value> {
    let v = json!({"metadata": {"name": "p", "creationTimestamp": "2026-11-22T00:00:00Z"}, "spec": spec, "status": status});
    let now = crate::api::time::parse_rfc3339("2026-11-22T01:00:00Z").unwrap() as f64;
    let row: Value = serde_json::from_slice(&[b"{\"cells\":".as_slice(), &Printer::Pod.cells(&v).render(now), b"}"].concat()).unwrap();
    let mut cells = row["cells"].as_array().unwrap().clone();
    if let Some(c) = row.get("conditions") {
        cells.push(c.clone());
    }
    cells
}

#[test]
fn pod_status_follows_printpod() {
    let two = json!({"containers": [{"name": "a"}, {"name": "b"}]});
    // Running and ready, one container restarted 3 times, last 10 minutes ago.
    let cells = pod(
        json!({"phase": "Running", "podIPs": [{"ip": "10.0.0.1"}], "containerStatuses": [
            {"name": "a", "ready": true, "restartCount": 3, "state": {"running": {}}, "lastState": {"terminated": {"finishedAt": "2026-11-22T00:50:00Z"}}},
            {"name": "b", "ready": false, "restartCount": 0, "state": {"waiting": {"reason": "CrashLoopBackOff"}}}]}),
        two.clone(),
    );
    assert_eq!(cells[..6], [json!("p"), json!("1/2"), json!("CrashLoopBackOff"), json!("3 (10m ago)"), json!("60m"), json!("10.0.0.1")]);
    // An init container still waiting.
    let init = json!({"initContainers": [{"name": "i"}], "containers": [{"name": "a"}]});
    let cells = pod(
        json!({"phase": "Pending", "initContainerStatuses": [{"name": "i", "state": {"waiting": {"reason": "PodInitializing"}}}]}),
        init,
    );
    assert_eq!(cells[2], "Init:0/1");
    // A sidecar (restartable init container) counts as a container.
    let sidecar = json!({"initContainers": [{"name": "s", "restartPolicy": "Always"}], "containers": [{"name": "a"}]});
    let cells = pod(
        json!({"phase": "Running", "conditions": [{"type": "Initialized", "status": "True"}],
            "initContainerStatuses": [{"name": "s", "started": true, "ready": true, "state": {"running": {}}}],
            "containerStatuses": [{"name": "a", "ready": true, "state": {"running": {}}}]}),
        sidecar,
    );
    assert_eq!((&cells[1], &cells[2]), (&json!("2/2"), &json!("Running")));
    // Completed with a container still running and the pod Ready: Running.
    let cells = pod(
        json!({"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}], "containerStatuses": [
            {"name": "a", "ready": true, "state": {"running": {}}},
            {"name": "b", "state": {"terminated": {"reason": "Completed", "exitCode": 0}}}]}),
        two.clone(),
    );
    assert_eq!(cells[2], "Running");
    // Succeeded pods carry the Completed row condition; a signal without a reason.
    let cells = pod(
        json!({"phase": "Succeeded", "containerStatuses": [{"name": "a", "state": {"terminated": {"signal": 9, "exitCode": 137}}}]}),
        two,
    );
    assert_eq!(cells[2], "Signal:9");
    assert_eq!(cells[9][0]["reason"], "Succeeded");
}

#[test]
fn node_status_and_roles_follow_printnode() {
    let v = json!({"metadata": {"name": "n1", "creationTimestamp": "2026-11-22T00:00:00Z",
            "labels": {"node-role.kubernetes.io/worker": "", "node-role.kubernetes.io/control-plane": "", "kubernetes.io/role": "infra", "node-role.kubernetes.io/": "x"}},
        "spec": {"unschedulable": true},
        "status": {"conditions": [{"type": "Ready", "status": "False"}], "addresses": [{"type": "InternalIP", "address": "10.1.0.1"}],
            "nodeInfo": {"kubeletVersion": "v1.36.2", "kernelVersion": "6.1", "architecture": "amd64"}}});
    let now = crate::api::time::parse_rfc3339("2026-11-23T00:00:00Z").unwrap() as f64;
    let cells: Value = serde_json::from_slice(&Printer::Node.cells(&v).render(now)).unwrap();
    assert_eq!(
        cells,
        json!([
            "n1",
            "NotReady,SchedulingDisabled",
            "control-plane,infra,worker",
            "24h",
            "v1.36.2",
            "10.1.0.1",
            "<none>",
            "<unknown>",
            "6.1 (amd64)",
            "<unknown>"
        ])
    );
}

/// The captures of `tools/capture_table_fixtures.py`: per kind, the rows a real
/// kube-apiserver v1.36.2 printed for the objects of `tools/table_fixtures/` (each row with
/// its object) and when it answered.
fn captured() -> serde_json::Map<String, Value> {
    serde_json::from_str(include_str!(concat!(env!("CARGO_MANIFEST_DIR"), "/testdata/tables/tables.json"))).unwrap()
}

fn column_names(p: Printer) -> Vec<String> {
    let cols: Value = serde_json::from_slice(p.columns()).unwrap();
    cols.as_array().unwrap().iter().map(|c| c["name"].as_str().unwrap().to_string()).collect()
}

#[test]
fn every_printer_has_the_apiservers_columns() {
    for (group, plural) in Printer::all() {
        let p = Printer::of(group, plural).unwrap();
        let names = column_names(p);
        assert!(names.len() >= 2, "{group}/{plural}: columns captured");
        assert!(names.iter().any(|n| n == "Name"), "{group}/{plural}: a Name column");
    }
    assert_eq!(Printer::of("apps", "pods"), None);
    assert_eq!(Printer::of("", "deployments"), None);
}

#[test]
fn printed_kinds_print_what_the_apiserver_printed_for_the_same_objects() {
    let all = captured();
    let mut checked = 0;
    for (key, capture) in &all {
        let (group, plural) = key.split_once('/').unwrap();
        let p = Printer::of(group, plural).unwrap_or_else(|| panic!("{key}: a printer"));
        let names = column_names(p);
        // Relative times are rendered at the moment the apiserver answered; the objects'
        // other instants are years back, so only the Age (seconds old) may differ.
        let now = capture["answered"].as_f64().unwrap() + 0.5;
        let rows = capture["rows"].as_array().unwrap();
        assert!(!rows.is_empty(), "{key}: rows captured");
        for row in rows {
            let object = &row["object"];
            let got: Value = serde_json::from_slice(&p.cells(object).render(now)).unwrap();
            let (got, want) = (got.as_array().unwrap(), row["cells"].as_array().unwrap());
            let what = format!("{key} {}", object["metadata"]["name"]);
            assert_eq!(got.len(), want.len(), "{what}: cells\n{got:?}\n{want:?}");
            assert_eq!(got.len(), names.len(), "{what}: one cell per column");
            for (i, (g, w)) in got.iter().zip(want).enumerate() {
                if names[i] != "Age" {
                    assert_eq!(g, w, "{what}: column {}", names[i]);
                }
            }
            checked += 1;
        }
    }
    assert!(checked >= 50, "{checked} rows checked");
}

fn cells_at(p: Printer, v: &Value, now: &str) -> Vec<Value> {
    let now = crate::api::time::parse_rfc3339(now).unwrap() as f64;
    let cells: Value = serde_json::from_slice(&p.cells(v).render(now)).unwrap();
    cells.as_array().unwrap().clone()
}

#[test]
fn selectors_print_as_the_selector_they_convert_to() {
    let template = json!({"spec": {"containers": [{"name": "a", "image": "i:1"}, {"name": "b", "image": "j:2"}]}});
    let rs = |selector: Value| {
        let v = json!({"metadata": {"name": "rs"}, "spec": {"replicas": 1, "selector": selector, "template": template}});
        let deployment = cells_at(Printer::Deployment, &v, "2026-01-01T00:00:00Z")[7].clone();
        let rs = cells_at(Printer::ReplicaSet, &v, "2026-01-01T00:00:00Z");
        assert_eq!((&rs[5], &rs[6]), (&json!("a,b"), &json!("i:1,j:2")));
        (rs[7].clone(), deployment)
    };
    // Keys sorted across matchLabels and expressions, values sorted inside in/notin.
    let both = json!({"matchLabels": {"z": "1", "a": "2"}, "matchExpressions": [
        {"key": "m", "operator": "In", "values": ["y", "x"]}, {"key": "b", "operator": "DoesNotExist"}]});
    assert_eq!(rs(both), (json!("a=2,!b,m in (x,y),z=1"), json!("a=2,!b,m in (x,y),z=1")));
    // An empty selector (everything) and a missing one (nothing) both print as no requirement.
    assert_eq!(rs(json!({})), (json!("<none>"), json!("")));
    assert_eq!(rs(Value::Null), (json!("<none>"), json!("")));
    // An operator that does not convert.
    let bad = json!({"matchExpressions": [{"key": "k", "operator": "Gt", "values": ["1"]}]});
    assert_eq!(rs(bad), (json!("<error>"), json!("<invalid>")));
}

#[test]
fn services_endpoints_and_slices_format_their_addresses() {
    let now = "2026-01-01T00:00:00Z";
    let svc =
        |spec: Value, status: Value| cells_at(Printer::Service, &json!({"metadata": {"name": "s"}, "spec": spec, "status": status}), now);
    // A load balancer with only external IPs; ingress points sorted, deduplicated, IP before hostname.
    let c = svc(json!({"type": "LoadBalancer", "externalIPs": ["192.0.2.1"]}), json!({}));
    assert_eq!((&c[2], &c[3], &c[4]), (&json!("<none>"), &json!("192.0.2.1"), &json!("<none>")));
    let lb = json!({"loadBalancer": {"ingress": [{"hostname": "b", "ip": "10.0.0.2"}, {"hostname": "a"}, {"ip": "10.0.0.2"}, {}]}});
    assert_eq!(svc(json!({"type": "LoadBalancer"}), lb)[3], "10.0.0.2,a");
    assert_eq!(svc(json!({"type": "Other"}), json!({}))[3], "<unknown>");
    assert_eq!(svc(json!({"type": "NodePort", "ports": [{"port": 1, "nodePort": 0, "protocol": "SCTP"}]}), json!({}))[4], "1/SCTP");
    // Endpoints: every address for every port, three shown.
    let ep = json!({"metadata": {"name": "e"}, "subsets": [
        {"addresses": [{"ip": "::1"}, {"ip": "10.0.0.1"}], "ports": [{"port": 80}, {"port": 81}]}, {"addresses": [{"ip": "10.9.9.9"}]}]});
    assert_eq!(cells_at(Printer::Endpoints, &ep, now)[1], "[::1]:80,10.0.0.1:80,[::1]:81 + 2 more...");
    let three = json!({"metadata": {"name": "e"}, "subsets": [{"addresses": [{"ip": "a"}, {"ip": "b"}, {"ip": "c"}]}]});
    assert_eq!(cells_at(Printer::Endpoints, &three, now)[1], "a,b,c");
    let subsets_without_addresses = json!({"metadata": {"name": "e"}, "subsets": [{"notReadyAddresses": [{"ip": "a"}]}]});
    assert_eq!(cells_at(Printer::Endpoints, &subsets_without_addresses, now)[1], "");
    // Slices: a port without number or name is `*`.
    let slice = json!({"metadata": {"name": "x"}, "addressType": "FQDN", "ports": [{}], "endpoints": [{"addresses": ["a.example"]}]});
    assert_eq!(cells_at(Printer::EndpointSlice, &slice, now)[1..4], [json!("FQDN"), json!("*"), json!("a.example")]);
}

#[test]
fn job_status_and_duration_follow_printjob() {
    let job = |status: Value, deleting: bool| {
        let mut v = json!({"metadata": {"name": "j"}, "spec": {"completions": 2, "template": {}}, "status": status});
        if deleting {
            v["metadata"]["deletionTimestamp"] = json!("2026-01-01T00:00:00Z");
        }
        cells_at(Printer::Job, &v, "2026-01-01T01:00:00Z")
    };
    let cond = |t: &str| json!({"conditions": [{"type": t, "status": "True"}], "startTime": "2026-01-01T00:30:00Z"});
    // A running job's duration counts on; a finished one's is fixed.
    assert_eq!(job(cond("FailureTarget"), false)[1..4], [json!("FailureTarget"), json!("0/2"), json!("30m")]);
    assert_eq!(job(cond("SuccessCriteriaMet"), false)[1], "SuccessCriteriaMet");
    assert_eq!(job(cond("Suspended"), true)[1], "Terminating");
    assert_eq!(job(cond("Failed"), true)[1], "Failed");
    let done = json!({"conditions": [{"type": "Complete", "status": "True"}], "startTime": "2025-12-31T23:00:00Z",
        "completionTime": "2026-01-01T00:00:59Z", "succeeded": 2});
    assert_eq!(job(done, false)[1..4], [json!("Complete"), json!("2/2"), json!("60m")]);
    // A condition that is not True does not count.
    assert_eq!(
        job(json!({"conditions": [{"type": "Complete", "status": "False"}]}), false)[1..4],
        [json!("Running"), json!("0/2"), json!("")]
    );
}

#[test]
fn events_count_and_times_follow_printevent() {
    let now = "2026-01-01T00:00:00Z";
    // A series without its last observation prints an unknown last seen, and the series' count.
    let series = json!({"metadata": {"name": "e"}, "involvedObject": {"kind": "Pod", "name": "p"}, "series": {"count": 9},
        "eventTime": "2025-12-31T23:00:00.999999Z", "message": " x\n"});
    let c = cells_at(Printer::Event, &series, now);
    // (59 min 59.000001 s back: 59m.)
    assert_eq!(
        c,
        [json!("<unknown>"), json!(""), json!(""), json!("pod/p"), json!(""), json!(""), json!("x"), json!("59m"), json!(9), json!("e")]
    );
    // A MicroTime's fraction counts: 119.5 s back is 119 s, not 2 minutes.
    let micro = json!({"metadata": {"name": "e"}, "eventTime": "2025-12-31T23:58:00.500000Z", "count": 3, "source": {"host": "h"}});
    let c = cells_at(Printer::Event, &micro, now);
    assert_eq!((&c[0], &c[5], &c[7], &c[8]), (&json!("119s"), &json!(", h"), &json!("119s"), &json!(3)));
    // events.k8s.io: the deprecated fields and reportingController.
    let v1 = json!({"metadata": {"name": "n"}, "regarding": {"kind": "Node", "name": "n1"}, "note": "hi", "reportingController": "c",
        "deprecatedFirstTimestamp": "2025-12-31T00:00:00Z", "deprecatedLastTimestamp": "2025-12-31T23:00:00Z", "deprecatedCount": 5});
    let c = cells_at(Printer::EventsV1, &v1, now);
    assert_eq!(
        c,
        [json!("60m"), json!(""), json!(""), json!("node/n1"), json!(""), json!("c"), json!("hi"), json!("24h"), json!(5), json!("n")]
    );
}

#[test]
fn volumes_print_modes_classes_and_capacity() {
    let now = "2026-01-01T00:00:00Z";
    let pv = json!({"metadata": {"name": "pv", "annotations": {"volume.beta.kubernetes.io/storage-class": "beta"}},
        "spec": {"accessModes": ["ReadWriteOncePod", "ReadWriteOnce", "ReadWriteOnce"], "storageClassName": "spec", "volumeAttributesClassName": "gold"}});
    let c = cells_at(Printer::PersistentVolume, &pv, now);
    assert_eq!(c[1..8], [json!("0"), json!("RWO,RWOP"), json!(""), json!(""), json!(""), json!("beta"), json!("gold")]);
    // A claim bound to a volume without status capacity prints 0.
    let pvc = json!({"metadata": {"name": "c"}, "spec": {"volumeName": "pv"}, "status": {"phase": "Bound"}});
    let c = cells_at(Printer::PersistentVolumeClaim, &pvc, now);
    assert_eq!(c[1..7], [json!("Bound"), json!("pv"), json!("0"), json!(""), json!(""), json!("<unset>")]);
}

#[test]
fn kinds_without_a_printer_get_the_default_table() {
    let p = Printer::of("rbac.authorization.k8s.io", "roles").unwrap();
    assert_eq!(column_names(p), ["Name", "Created At"]);
    let v = json!({"metadata": {"name": "r", "creationTimestamp": "2026-01-02T03:04:05Z"}});
    assert_eq!(cells_at(p, &v, "2026-06-01T00:00:00Z"), [json!("r"), json!("2026-01-02T03:04:05Z")]);
    // An unset creation time is Go's zero time, formatted.
    assert_eq!(cells_at(p, &json!({"metadata": {"name": "r"}}), "2026-06-01T00:00:00Z")[1], "0001-01-01T00:00:00Z");
}
