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
