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
    serde_json::from_str(include_str!("testdata/tables.json")).unwrap()
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
