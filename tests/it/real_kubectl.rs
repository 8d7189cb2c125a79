//! The opt-in real tier (see `real_apiserver`): `kubectl get` (tables, `--watch`, custom
//! resources' printer columns) through kache prints what it prints against the real apiserver,
//! from cache.

use crate::real_apiserver::*;
use crate::real_parity::{direct_kubectl, through_kache_and_directly};
use crate::real_views::*;
use crate::support::*;
use serde_json::{json, Value};
use std::sync::Arc;

/// kubectl's table output with the values of its relative-time columns (AGE, LAST SEEN,
/// FIRST SEEN, a running job's DURATION, which count from the moment of each answer) taken
/// out. Cells are cut at the offsets where the header's columns start (kubectl pads every
/// column to the widest cell, header included, with at least three spaces between).
pub(crate) fn ageless_table(out: &[u8]) -> Vec<Vec<String>> {
    const TIMES: [&str; 4] = ["AGE", "LAST SEEN", "FIRST SEEN", "DURATION"];
    let text = String::from_utf8_lossy(out);
    let mut lines = text.lines();
    let Some(header) = lines.next() else { return Vec::new() };
    // Column starts: the header's first character and each one after two or more spaces.
    let mut starts = vec![0usize];
    let b = header.as_bytes();
    for i in 2..b.len() {
        if b[i] != b' ' && b[i - 1] == b' ' && b[i - 2] == b' ' {
            starts.push(i);
        }
    }
    let cut = |l: &str| -> Vec<String> {
        (0..starts.len())
            .map(|c| {
                let end = starts.get(c + 1).copied().unwrap_or(l.len()).min(l.len());
                l.get(starts[c].min(l.len())..end).unwrap_or("").trim().to_string()
            })
            .collect()
    };
    let header = cut(header);
    let mut rows = vec![header.clone()];
    for l in lines {
        let mut cells = cut(l);
        for (i, h) in header.iter().enumerate() {
            if TIMES.contains(&h.as_str()) && !cells[i].is_empty() {
                cells[i] = h.clone();
            }
        }
        rows.push(cells);
    }
    rows
}

/// Objects of the kinds kache prints beyond pods and nodes, in the tier's namespace, with a
/// status set as their controllers would (none runs beside the test apiserver).
async fn printed_objects(k: &TestKache) {
    let labels = json!({"kache-print": "tier"});
    let template = |app: &str| {
        json!({"metadata": {"labels": {"app": app}}, "spec": {"restartPolicy": "Always", "containers": [
            {"name": "main", "image": format!("{app}:1")}, {"name": "side", "image": "side:2"}]}})
    };
    let job_template = json!({"spec": {"restartPolicy": "Never", "containers": [{"name": "work", "image": "busybox"}, {"name": "helper", "image": "helper:1"}]}});
    let objects: Vec<(&str, Value, Option<Value>)> = vec![
        (
            "/api/v1/namespaces/{NS}/services",
            json!({"apiVersion": "v1", "kind": "Service", "metadata": {"name": "printed-web", "labels": labels},
            "spec": {"selector": {"app": "web", "tier": "front"}, "ports": [{"name": "http", "port": 80}, {"name": "dns", "port": 53, "protocol": "UDP"}]}}),
            None,
        ),
        (
            "/api/v1/namespaces/{NS}/services",
            json!({"apiVersion": "v1", "kind": "Service", "metadata": {"name": "printed-lb", "labels": labels},
            "spec": {"type": "LoadBalancer", "selector": {"app": "lb"}, "ports": [{"name": "a", "port": 443}]}}),
            Some(json!({"status": {"loadBalancer": {"ingress": [{"ip": "203.0.113.9"}, {"hostname": "lb.example.com"}]}}})),
        ),
        (
            "/api/v1/namespaces/{NS}/services",
            json!({"apiVersion": "v1", "kind": "Service", "metadata": {"name": "printed-ext", "labels": labels},
            "spec": {"type": "ExternalName", "externalName": "db.example.com"}}),
            None,
        ),
        (
            "/apis/apps/v1/namespaces/{NS}/deployments",
            json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "printed", "labels": labels},
            "spec": {"replicas": 3, "selector": {"matchLabels": {"app": "web"}, "matchExpressions": [{"key": "env", "operator": "NotIn", "values": ["z", "a"]}]},
                "template": template("web")}}),
            Some(json!({"status": {"replicas": 3, "readyReplicas": 2, "updatedReplicas": 1, "availableReplicas": 2}})),
        ),
        (
            "/apis/apps/v1/namespaces/{NS}/replicasets",
            json!({"apiVersion": "apps/v1", "kind": "ReplicaSet", "metadata": {"name": "printed", "labels": labels},
            "spec": {"replicas": 2, "selector": {"matchLabels": {"app": "rs"}}, "template": template("rs")}}),
            Some(json!({"status": {"replicas": 2, "readyReplicas": 1}})),
        ),
        (
            "/apis/apps/v1/namespaces/{NS}/statefulsets",
            json!({"apiVersion": "apps/v1", "kind": "StatefulSet", "metadata": {"name": "printed", "labels": labels},
            "spec": {"replicas": 3, "serviceName": "printed-web", "selector": {"matchLabels": {"app": "sts"}}, "template": template("sts")}}),
            Some(json!({"status": {"replicas": 3, "readyReplicas": 2}})),
        ),
        (
            "/apis/apps/v1/namespaces/{NS}/daemonsets",
            json!({"apiVersion": "apps/v1", "kind": "DaemonSet", "metadata": {"name": "printed", "labels": labels},
            "spec": {"selector": {"matchLabels": {"app": "ds"}}, "template": {"metadata": {"labels": {"app": "ds"}},
                "spec": {"nodeSelector": {"disk": "ssd"}, "containers": [{"name": "agent", "image": "agent:1"}]}}}}),
            Some(
                json!({"status": {"desiredNumberScheduled": 5, "currentNumberScheduled": 4, "numberReady": 3, "updatedNumberScheduled": 2, "numberAvailable": 1, "numberMisscheduled": 0}}),
            ),
        ),
        (
            "/apis/batch/v1/namespaces/{NS}/jobs",
            json!({"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "printed-running", "labels": labels},
            "spec": {"completions": 3, "parallelism": 2, "template": job_template}}),
            Some(json!({"status": {"startTime": "2021-01-01T00:00:00Z", "succeeded": 1}})),
        ),
        (
            "/apis/batch/v1/namespaces/{NS}/jobs",
            json!({"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "printed-done", "labels": labels},
            "spec": {"template": job_template}}),
            Some(
                json!({"status": {"startTime": "2024-01-01T10:00:00Z", "completionTime": "2024-01-01T10:03:25Z", "succeeded": 1, "conditions": [
                {"type": "SuccessCriteriaMet", "status": "True", "lastTransitionTime": "2024-01-01T10:03:25Z"},
                {"type": "Complete", "status": "True", "lastTransitionTime": "2024-01-01T10:03:25Z"}]}}),
            ),
        ),
        (
            "/api/v1/namespaces/{NS}/events",
            json!({"apiVersion": "v1", "kind": "Event", "metadata": {"name": "printed.1", "labels": labels},
            "involvedObject": {"kind": "Pod", "name": "web-0", "namespace": NS, "fieldPath": "spec.containers{web}"}, "reason": "BackOff",
            "message": "Back-off restarting", "type": "Warning", "count": 7, "firstTimestamp": "2021-03-04T05:06:07Z", "lastTimestamp": "2024-01-02T03:04:05Z",
            "source": {"component": "kubelet", "host": "node-0001"}}),
            None,
        ),
        (
            "/api/v1/namespaces/{NS}/events",
            json!({"apiVersion": "v1", "kind": "Event", "metadata": {"name": "printed.2", "labels": labels},
            "involvedObject": {"kind": "Deployment", "name": "printed", "namespace": NS}, "reason": "ScalingReplicaSet", "message": "Scaled up", "type": "Normal",
            "eventTime": "2022-05-06T07:08:09.123456Z", "series": {"count": 4, "lastObservedTime": "2023-06-07T08:09:10.654321Z"},
            "reportingComponent": "deployment-controller", "reportingInstance": "cm-1", "action": "Scale"}),
            None,
        ),
        (
            "/apis/discovery.k8s.io/v1/namespaces/{NS}/endpointslices",
            json!({"apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice",
            "metadata": {"name": "printed", "labels": {"kache-print": "tier", "kubernetes.io/service-name": "printed-web"}}, "addressType": "IPv4",
            "ports": [{"name": "http", "port": 80}, {"name": "named"}],
            "endpoints": [{"addresses": ["10.0.0.1"]}, {"addresses": ["10.0.0.2"]}, {"addresses": ["10.0.0.3"]}, {"addresses": ["10.0.0.4"]}]}),
            None,
        ),
        (
            "/api/v1/namespaces/{NS}/persistentvolumeclaims",
            json!({"apiVersion": "v1", "kind": "PersistentVolumeClaim", "metadata": {"name": "printed-bound", "labels": labels},
            "spec": {"accessModes": ["ReadWriteOnce", "ReadWriteMany"], "resources": {"requests": {"storage": "1Gi"}}, "volumeName": "pv-printed", "storageClassName": "fast"}}),
            Some(json!({"status": {"phase": "Bound", "capacity": {"storage": "2Gi"}, "accessModes": ["ReadWriteMany", "ReadOnlyMany"]}})),
        ),
        (
            "/api/v1/namespaces/{NS}/persistentvolumeclaims",
            json!({"apiVersion": "v1", "kind": "PersistentVolumeClaim", "metadata": {"name": "printed-pending", "labels": labels},
            "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Gi"}}, "storageClassName": "slow", "volumeMode": "Block"}}),
            None,
        ),
    ];
    for (path, v, status) in objects {
        let path = path.replace("{NS}", NS);
        let name = v["metadata"]["name"].as_str().unwrap().to_string();
        if path.ends_with("/events") {
            // An Event lives for the apiserver's --event-ttl (1 h) from its last write: one
            // kept from an hour ago could expire between this and the kubectl that prints it.
            k.api.delete(&format!("{path}/{name}")).await;
        }
        let r = k.api.post(&path, &v).await;
        assert!(r.status == 201 || r.status == 409, "{path} {name}: {}", r.text());
        if let Some(status) = status {
            let r = k.api.patch(&format!("{path}/{name}/status"), &status).await;
            k.api.must(&format!("status of {path} {name}"), r).await;
        }
    }
}

/// Run `kubectl ARGS` through kache and directly; both succeed and print the same table
/// (ages aside), with rows. Returns the requests kache answered from cache meanwhile, and
/// the lines printed.
async fn prints_the_same(k: &TestKache, via: &crate::support::Kubectl, cache: &std::path::Path, args: &[&str]) -> (u64, usize) {
    let (got, want, hits) = through_kache_and_directly(k, via, cache, args).await;
    let what = format!("kubectl {}", args.join(" "));
    let (got_rows, want_rows) = (ageless_table(&got), ageless_table(&want));
    assert!(want_rows.len() > 1, "{what}: the apiserver printed rows");
    assert!(
        got_rows == want_rows,
        "{what}: printed differently\nthrough kache:\n{}\ndirect:\n{}",
        String::from_utf8_lossy(&got),
        String::from_utf8_lossy(&want)
    );
    (hits, want_rows.len())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn real_kubectl_get_prints_what_the_apiserver_prints_from_cache() {
    let preload = "pods,nodes,namespaces,configmaps,secrets,serviceaccounts,services,deployments,replicasets,statefulsets,daemonsets,jobs,events,events.events.k8s.io,endpointslices,persistentvolumeclaims,roles,clusterroles";
    let Some(k) = real("real_kubectl_get", preload).await else { return };
    let one = k.api.get_ok(POPULATED_POD).await;
    let ns = one["items"][0]["metadata"]["namespace"].as_str().expect("the apiserver holds pods").to_string();
    let name = one["items"][0]["metadata"]["name"].as_str().unwrap().to_string();
    let node = one["items"][0]["spec"]["nodeName"].as_str().unwrap_or("node-0000").to_string();
    // A Secret and a ServiceAccount to print (a cluster without a controller-manager has none).
    let secret = json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "printed"}, "type": "Opaque", "data": {"a": "eA==", "b": "eQ=="}});
    let sa = json!({"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": "printed"}});
    for (path, v) in [("secrets", secret), ("serviceaccounts", sa)] {
        let r = k.api.post(&format!("/api/v1/namespaces/{NS}/{path}"), &v).await;
        assert!(r.status == 201 || r.status == 409, "{path}: {}", r.text());
    }
    printed_objects(&k).await;
    let via = crate::support::Kubectl::new(&format!("http://{}", k.serving.addr));
    let cache = tempfile::tempdir().unwrap();
    let field = format!("spec.nodeName={node}");
    let mut commands: Vec<Vec<&str>> = vec![
        vec!["get", "pods", "-n", &ns],
        vec!["get", "pods", "-n", &ns, "-o", "wide"],
        vec!["get", "pods", "-n", &ns, "--chunk-size=50"],
        vec!["get", "pods", "-A", "--field-selector", &field, "-o", "wide"],
        vec!["get", "pods", "-n", &ns, "-l", "app=analytics"],
        vec!["get", "pod", "-n", &ns, &name],
        vec!["get", "pod", "-n", &ns, &name, "-o", "wide"],
        vec!["get", "nodes"],
        vec!["get", "nodes", "-o", "wide"],
        vec!["get", "node", &node],
        vec!["get", "namespaces"],
        vec!["get", "configmaps", "-A"],
        vec!["get", "secrets", "-A"],
        vec!["get", "serviceaccounts", "-A"],
    ];
    for kind in [
        "services",
        "deployments",
        "replicasets",
        "statefulsets",
        "daemonsets",
        "jobs",
        "events",
        "endpointslices",
        "persistentvolumeclaims",
    ] {
        commands.push(vec!["get", kind, "-n", NS]);
        commands.push(vec!["get", kind, "-n", NS, "-o", "wide"]);
        commands.push(vec!["get", kind, "-A", "-l", "kache-print=tier"]);
        commands.push(vec!["get", kind, "-A", "-o", "wide"]);
    }
    commands.push(vec!["get", "deployment", "printed", "-n", NS, "-o", "wide"]);
    commands.push(vec!["get", "service", "printed-lb", "-n", NS]);
    // Kinds without a printer: the apiserver's default table (Name, Created At).
    commands.push(vec!["get", "clusterroles"]);
    commands.push(vec!["get", "roles", "-A"]);
    let mut served = 0;
    for args in &commands {
        let (hits, _) = prints_the_same(&k, &via, cache.path(), args).await;
        let what = format!("kubectl {}", args.join(" "));
        // A consistent read of events is the upstream's: kache cannot show its events cache
        // current (see the README); the Tables of events at resourceVersion=0 are checked below.
        if args[1] != "events" {
            assert!(hits >= 1, "{what}: answered from cache");
            served += 1;
        }
    }
    eprintln!("{served} of {} kubectl get commands printed what the apiserver prints, answered from cache", commands.len());
    // Events (core and events.k8s.io) as Tables from cache, at resourceVersion=0.
    let direct = direct_client().await;
    let table = "application/json;as=Table;v=v1;g=meta.k8s.io";
    for base in ["/api/v1", "/apis/events.k8s.io/v1"] {
        let path = format!("{base}/namespaces/{NS}/events?labelSelector=kache-print%3Dtier&resourceVersion=0");
        let before = k.serving.serve.cache_hits();
        let via = k.api.request(http::Method::GET, &path, Some(table), None, Vec::new()).await;
        assert_eq!(k.serving.serve.cache_hits() - before, 1, "{path}: answered from cache");
        let (code, want) = direct_get(&direct, &path, table).await;
        assert_eq!((via.status, code), (200, 200), "{path}: {}", via.text());
        let cells = |v: &Value| v["rows"].as_array().unwrap().iter().map(|r| r["cells"].clone()).collect::<Vec<_>>();
        let (got, want) = (cells(&via.json()), cells(&serde_json::from_slice(&want).unwrap()));
        assert_eq!(got.len(), 2, "{path}: the tier's events");
        // Their times are years back: the relative times print the same at either answer.
        assert_eq!(got, want, "{path}: the apiserver's cells");
    }
    eprintln!("2 of 2 event Tables at resourceVersion=0 printed what the apiserver prints, answered from cache");
}

/// Lines a running command prints, collected as they come.
fn collect_lines(mut child: std::process::Child) -> (std::process::Child, Arc<std::sync::Mutex<Vec<String>>>) {
    use std::io::BufRead as _;
    let lines = Arc::new(std::sync::Mutex::new(Vec::new()));
    let out = child.stdout.take().expect("piped stdout");
    let sink = lines.clone();
    std::thread::spawn(move || {
        for l in std::io::BufReader::new(out).lines().map_while(Result::ok) {
            sink.lock().unwrap().push(l);
        }
    });
    (child, lines)
}

/// Wait (up to a minute, so a broken watch fails rather than hangs) until `lines` holds `n`.
async fn until_lines(lines: &std::sync::Mutex<Vec<String>>, n: usize, what: &str) {
    for _ in 0..600 {
        if lines.lock().unwrap().len() >= n {
            return;
        }
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    let got = lines.lock().unwrap().clone();
    panic!("{what}: {} lines, waited for {n}: {got:?}", got.len());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn real_kubectl_get_watch_prints_what_the_apiserver_prints_from_cache() {
    let Some(k) = real("real_kubectl_get_watch", "pods,configmaps").await else { return };
    // No controller-manager: the namespace may lack the default ServiceAccount a pod needs.
    let sa = json!({"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": "default"}});
    k.api.post(&format!("/api/v1/namespaces/{NS}/serviceaccounts"), &sa).await;
    let via = crate::support::Kubectl::new(&format!("http://{}", k.serving.addr));
    let cache = tempfile::tempdir().unwrap();
    let suffix = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_millis();
    // One pod at least, so that both kubectls print their initial rows before the changes.
    let resident = json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": format!("resident-{suffix}")},
        "spec": {"containers": [{"name": "c", "image": "registry.example/app:1"}]}});
    assert_eq!(k.api.post(&format!("/api/v1/namespaces/{NS}/pods"), &resident).await.status, 201);
    for kind in ["configmaps", "pods"] {
        let args = ["get", kind, "-n", NS, "-w", "--output-watch-events"];
        let listed = k.api.get_ok(&format!("/api/v1/namespaces/{NS}/{kind}")).await["items"].as_array().unwrap().len();
        let before = k.serving.serve.cache_hits();
        let mut through = via.command(&args);
        let mut direct = direct_kubectl(cache.path(), &args);
        let (mut a, got) = collect_lines(through.stdout(std::process::Stdio::piped()).spawn().expect("kubectl through kache"));
        let (mut b, want) = collect_lines(direct.stdout(std::process::Stdio::piped()).spawn().expect("kubectl direct"));
        // The header and the initial rows: both watches are open from their list's RV.
        until_lines(&got, 1 + listed, "through kache").await;
        until_lines(&want, 1 + listed, "direct").await;
        let name = format!("watched-{suffix}");
        let changes = match kind {
            "configmaps" => {
                let cm = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name}, "data": {"a": "1", "b": "2"}});
                assert_eq!(k.api.post(&format!("/api/v1/namespaces/{NS}/configmaps"), &cm).await.status, 201);
                let path = format!("/api/v1/namespaces/{NS}/configmaps/{name}");
                assert_eq!(k.api.patch(&path, &json!({"data": {"c": "3"}})).await.status, 200);
                assert_eq!(k.api.delete(&path).await.status, 200);
                3
            }
            _ => {
                let pod = json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name},
                    "spec": {"containers": [{"name": "c", "image": "registry.example/app:1"}]}});
                let r = k.api.post(&format!("/api/v1/namespaces/{NS}/pods"), &pod).await;
                assert_eq!(r.status, 201, "{}", r.text());
                let path = format!("/api/v1/namespaces/{NS}/pods/{name}");
                let status = json!({"status": {"phase": "Running", "podIP": "10.9.8.7", "containerStatuses": [{"name": "c",
                    "image": "registry.example/app:1", "imageID": "", "ready": true, "restartCount": 1, "started": true,
                    "state": {"running": {"startedAt": "2026-01-01T00:00:00Z"}}}]}});
                assert_eq!(k.api.patch(&format!("{path}/status"), &status).await.status, 200);
                assert_eq!(k.api.delete(&format!("{path}?gracePeriodSeconds=0")).await.status, 200);
                // ADDED, MODIFIED (Running), MODIFIED (Terminating), DELETED.
                4
            }
        };
        until_lines(&got, 1 + listed + changes, "through kache").await;
        until_lines(&want, 1 + listed + changes, "direct").await;
        let _ = (a.kill(), b.kill(), a.wait(), b.wait());
        let (got, want) = (got.lock().unwrap().join("\n"), want.lock().unwrap().join("\n"));
        let (got_rows, want_rows) = (ageless_table(got.as_bytes()), ageless_table(want.as_bytes()));
        assert!(got_rows == want_rows, "kubectl {}: printed differently\nthrough kache:\n{got}\ndirect:\n{want}", args.join(" "));
        let hits = k.serving.serve.cache_hits() - before;
        assert!(hits >= 2, "kubectl {}: the LIST and the watch answered from cache ({hits})", args.join(" "));
        eprintln!("kubectl {}: {} lines equal, {hits} requests from cache", args.join(" "), want_rows.len());
    }
    k.api.delete(&format!("/api/v1/namespaces/{NS}/pods/resident-{suffix}?gracePeriodSeconds=0")).await;
}

/// The namespace of the custom resources the CRD test makes (its objects are deleted one by
/// one; the namespace stays, as none is emptied without a controller-manager).
const CRD_NS: &str = "kache-crd-real";

/// The CRDs of `tools/crd_fixtures/crds.yaml` (as captured in `testdata/crd`), created
/// in the real apiserver if it lacks them, and established.
async fn crds(direct: &kube::Client) {
    use http_body_util::BodyExt;
    for plural in ["widgets", "plains"] {
        let captured = crate::support::crd_golden(&format!("crd-{plural}.json"));
        let name = captured["metadata"]["name"].as_str().unwrap().to_string();
        let crd = json!({"apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
            "metadata": {"name": name}, "spec": captured["spec"]});
        let req = http::Request::post("/apis/apiextensions.k8s.io/v1/customresourcedefinitions")
            .header(http::header::CONTENT_TYPE, "application/json")
            .body(kube::client::Body::from(crd.to_string().into_bytes()))
            .unwrap();
        let resp = direct.send(req).await.expect("create the CRD");
        let code = resp.status().as_u16();
        let body = resp.into_body().collect().await.unwrap().to_bytes();
        assert!(code == 201 || code == 409, "CRD {name}: {code} {}", String::from_utf8_lossy(&body));
        // Established within a minute (at once when it existed).
        let mut established = false;
        for _ in 0..600 {
            let (_, body) =
                direct_get(direct, &format!("/apis/apiextensions.k8s.io/v1/customresourcedefinitions/{name}"), "application/json").await;
            let v: Value = serde_json::from_slice(&body).unwrap();
            let conditions = v["status"]["conditions"].as_array().cloned().unwrap_or_default();
            if conditions.iter().any(|c| c["type"] == "Established" && c["status"] == "True") {
                established = true;
                break;
            }
            tokio::time::sleep(std::time::Duration::from_millis(100)).await;
        }
        assert!(established, "CRD {name} established");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn real_kubectl_get_of_custom_resources_prints_their_printer_columns_and_metadata_from_cache() {
    let Some(up) = real_upstream("real_kubectl_get_crd") else { return };
    let direct = up.client().await;
    crds(&direct).await;
    let k = over(&up, &["--preload", "widgets.crd.example.com,plains.crd.example.com"]).await;
    let ns = json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": CRD_NS}});
    let r = k.api.post("/api/v1/namespaces", &ns).await;
    assert!(r.status == 201 || r.status == 409, "namespace {CRD_NS}: {}", r.text());
    let widgets = format!("/apis/crd.example.com/v1/namespaces/{CRD_NS}/widgets");
    let suffix = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_millis();
    // Values of every column type, wrong types, missing and nested values, a finalizer and
    // labels and annotations out of ObjectMeta's order.
    let objects = [
        json!({"metadata": {"labels": {"app": "w", "kache-crd": "real"}, "annotations": {"note": "<a> & b"}, "name": format!("w1-{suffix}")},
            "spec": {"replicas": 3, "ratio": 0.5, "owner": {"name": "alice"}, "tags": ["a", "b<c>"], "limits": {"mem": "2Gi", "cpu": "1", "nested": {"x": [1, 2.5, true, null]}}},
            "status": {"phase": "Running", "ready": true, "startedAt": "2026-01-01T00:00:00Z",
                "conditions": [{"type": "Synced", "status": "False"}, {"type": "Ready", "status": "True"}]}}),
        json!({"metadata": {"name": format!("w2-{suffix}"), "labels": {"app": "v", "kache-crd": "real"}},
            "spec": {"replicas": "three", "ratio": 7, "tags": [], "limits": {}, "owner": {}},
            "status": {"ready": "yes", "startedAt": "not-a-date"}}),
        json!({"metadata": {"name": format!("w3-{suffix}"), "labels": {"kache-crd": "real"}},
            "spec": {"replicas": 2.7, "ratio": 1e21, "owner": {"name": "<b>&amp;\u{e9}"}, "tags": [{"k": "v"}]},
            "status": {"phase": 42, "ready": false, "startedAt": "", "conditions": [{"type": "Ready"}]}}),
        json!({"metadata": {"name": format!("w4-{suffix}"), "labels": {"kache-crd": "real"}},
            "spec": {"replicas": 9007199254740993u64, "ratio": 0.000001234, "owner": {"name": 12.5}, "tags": "not-a-list"},
            "status": {"phase": ["x", true], "startedAt": "2026-03-04T05:06:07+02:00"}}),
    ];
    let mut names = Vec::new();
    for mut o in objects {
        o["apiVersion"] = json!("crd.example.com/v1");
        o["kind"] = json!("Widget");
        names.push(o["metadata"]["name"].as_str().unwrap().to_string());
        let r = k.api.post(&widgets, &o).await;
        assert_eq!(r.status, 201, "{}", r.text());
    }
    let plain = json!({"apiVersion": "crd.example.com/v1", "kind": "Plain", "metadata": {"name": format!("kache-crd-real-{suffix}"), "labels": {"kache-crd": "real"}}});
    assert_eq!(k.api.post("/apis/crd.example.com/v1/plains", &plain).await.status, 201);

    let via = crate::support::Kubectl::new(&format!("http://{}", k.serving.addr));
    let cache = tempfile::tempdir().unwrap();
    let commands: Vec<Vec<&str>> = vec![
        vec!["get", "widgets", "-n", CRD_NS],
        vec!["get", "widgets", "-n", CRD_NS, "-o", "wide"],
        vec!["get", "widgets.crd.example.com", "-A"],
        vec!["get", "widgets", "-A", "-o", "wide", "-l", "kache-crd=real"],
        vec!["get", "widgets", "-n", CRD_NS, "-l", "app in (v,w)"],
        vec!["get", "widget", "-n", CRD_NS, &names[0], "-o", "wide"],
        vec!["get", "plains", "-l", "kache-crd=real"],
        vec!["get", "plains", "-o", "wide"],
    ];
    for args in &commands {
        let (hits, rows) = prints_the_same(&k, &via, cache.path(), args).await;
        let what = format!("kubectl {}", args.join(" "));
        assert!(hits >= 1, "{what}: answered from cache");
        eprintln!("{what}: {} rows equal, {hits} from cache", rows - 1);
    }

    // Metadata LIST and GET: byte for byte (the list's resourceVersion aside), from cache.
    for (path, accept) in [
        (widgets.clone(), META_LIST_JSON),
        (format!("{widgets}?labelSelector=app%3Dw"), META_LIST_JSON),
        ("/apis/crd.example.com/v1/widgets?limit=2".to_string(), META_LIST_JSON),
        ("/apis/crd.example.com/v1/plains".to_string(), META_LIST_JSON),
        (format!("{widgets}/{}", names[0]), META_JSON),
        (format!("{widgets}/{}", names[2]), META_JSON),
    ] {
        let before = k.serving.serve.cache_hits();
        let got = k.api.request(http::Method::GET, &path, Some(accept), None, Vec::new()).await;
        assert_eq!(k.serving.serve.cache_hits() - before, 1, "{path}: answered from cache");
        let (code, want) = direct_get(&direct, &path, accept).await;
        assert_eq!((got.status, code), (200, 200), "{path}: {}", got.text());
        if accept == META_JSON {
            assert_eq!(got.text(), String::from_utf8_lossy(&want), "{path}");
        } else {
            assert_eq!(
                String::from_utf8(normalized_list(&got.body)).unwrap(),
                String::from_utf8(normalized_list(&want)).unwrap(),
                "{path}"
            );
        }
        eprintln!("{path} as {}: equal, from cache", accept.split(';').nth(1).unwrap_or(""));
    }
    // The protobuf metadata view of custom resources is the upstream's (kache holds them in
    // JSON only), and equal to it.
    let before = k.serving.serve.cache_hits();
    let got = k.api.request(http::Method::GET, &widgets, Some(META_LIST_PB), None, Vec::new()).await;
    assert_eq!(k.serving.serve.cache_hits(), before, "a protobuf metadata LIST of custom resources passes through");
    let (_, want) = direct_get(&direct, &widgets, META_LIST_PB).await;
    assert_eq!(normalized_list(&got.body), normalized_list(&want));

    // kubectl get -w: the LIST and the watch from cache, the changes printed as directly.
    let args = ["get", "widgets", "-n", CRD_NS, "-w", "--output-watch-events", "-o", "wide"];
    let listed = names.len();
    let before = k.serving.serve.cache_hits();
    let mut through = via.command(&args);
    let mut direct_cmd = direct_kubectl(cache.path(), &args);
    let (mut a, got) = collect_lines(through.stdout(std::process::Stdio::piped()).spawn().expect("kubectl through kache"));
    let (mut b, want) = collect_lines(direct_cmd.stdout(std::process::Stdio::piped()).spawn().expect("kubectl direct"));
    until_lines(&got, 1 + listed, "through kache").await;
    until_lines(&want, 1 + listed, "direct").await;
    let name = format!("watched-{suffix}");
    let w = json!({"apiVersion": "crd.example.com/v1", "kind": "Widget", "metadata": {"name": name, "labels": {"app": "w"}},
        "spec": {"replicas": 1, "tags": ["x"]}, "status": {"phase": "Pending", "startedAt": "2026-02-02T02:02:02Z"}});
    assert_eq!(k.api.post(&widgets, &w).await.status, 201);
    let path = format!("{widgets}/{name}");
    assert_eq!(k.api.patch(&path, &json!({"spec": {"replicas": 5}, "status": {"phase": "Running", "ready": true}})).await.status, 200);
    assert_eq!(k.api.delete(&path).await.status, 200);
    until_lines(&got, 1 + listed + 3, "through kache").await;
    until_lines(&want, 1 + listed + 3, "direct").await;
    let _ = (a.kill(), b.kill(), a.wait(), b.wait());
    let (got, want) = (got.lock().unwrap().join("\n"), want.lock().unwrap().join("\n"));
    let (got_rows, want_rows) = (ageless_table(got.as_bytes()), ageless_table(want.as_bytes()));
    assert!(got_rows == want_rows, "kubectl {}: printed differently\nthrough kache:\n{got}\ndirect:\n{want}", args.join(" "));
    let hits = k.serving.serve.cache_hits() - before;
    assert!(hits >= 2, "kubectl {}: the LIST and the watch answered from cache ({hits})", args.join(" "));
    eprintln!("kubectl {}: {} lines equal, {hits} requests from cache", args.join(" "), want_rows.len());

    for n in &names {
        k.api.delete(&format!("{widgets}/{n}")).await;
    }
    k.api.delete(&format!("/apis/crd.example.com/v1/plains/kache-crd-real-{suffix}")).await;
}

/// The CRD `gizmos.crd.example.com` with `columns` as its version's printer columns (none
/// when empty), created or updated through `direct`.
async fn gizmos_crd(direct: &kube::Client, columns: Value) {
    use http_body_util::BodyExt;
    let mut version = json!({"name": "v1", "served": true, "storage": true,
        "schema": {"openAPIV3Schema": {"type": "object", "x-kubernetes-preserve-unknown-fields": true}}});
    if columns.as_array().is_some_and(|c| !c.is_empty()) {
        version["additionalPrinterColumns"] = columns;
    }
    let crd = json!({"apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition", "metadata": {"name": "gizmos.crd.example.com"},
        "spec": {"group": "crd.example.com", "scope": "Cluster", "names": {"plural": "gizmos", "singular": "gizmo", "kind": "Gizmo"}, "versions": [version]}});
    let base = "/apis/apiextensions.k8s.io/v1/customresourcedefinitions";
    let send = |req: http::Request<kube::client::Body>| async move {
        let resp = direct.send(req).await.expect("CRD request");
        (resp.status().as_u16(), resp.into_body().collect().await.unwrap().to_bytes())
    };
    let post = http::Request::post(base)
        .header(http::header::CONTENT_TYPE, "application/json")
        .body(kube::client::Body::from(crd.to_string().into_bytes()))
        .unwrap();
    let (mut code, mut body) = send(post).await;
    if code == 409 {
        let patch = json!({"spec": {"versions": crd["spec"]["versions"]}});
        let req = http::Request::patch(format!("{base}/gizmos.crd.example.com"))
            .header(http::header::CONTENT_TYPE, "application/merge-patch+json")
            .body(kube::client::Body::from(patch.to_string().into_bytes()))
            .unwrap();
        (code, body) = send(req).await;
    }
    assert!(code == 200 || code == 201, "CRD gizmos: {code} {}", String::from_utf8_lossy(&body));
    for _ in 0..600 {
        let (_, body) = direct_get(direct, &format!("{base}/gizmos.crd.example.com"), "application/json").await;
        let v: Value = serde_json::from_slice(&body).unwrap();
        if v["status"]["conditions"].as_array().into_iter().flatten().any(|c| c["type"] == "Established" && c["status"] == "True") {
            return;
        }
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    panic!("CRD gizmos not established");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn real_a_crds_changed_printer_columns_are_printed_from_cache_once_its_watch_ends() {
    let Some(up) = real_upstream("real_crd_columns_change") else { return };
    let direct = up.client().await;
    gizmos_crd(&direct, json!([])).await;
    let k = over(&up, &["--preload", "gizmos.crd.example.com"]).await;
    let suffix = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_millis();
    let name = format!("kache-crd-gizmo-{suffix}");
    let g = json!({"apiVersion": "crd.example.com/v1", "kind": "Gizmo", "metadata": {"name": name}, "spec": {"size": 7, "color": "red"}});
    assert_eq!(k.api.post("/apis/crd.example.com/v1/gizmos", &g).await.status, 201);
    let table = "application/json;as=Table;v=v1;g=meta.k8s.io";
    let path = "/apis/crd.example.com/v1/gizmos";
    let names =
        |v: &Value| v["columnDefinitions"].as_array().unwrap().iter().map(|c| c["name"].as_str().unwrap().to_string()).collect::<Vec<_>>();
    let before = k.serving.serve.cache_hits();
    let got = k.api.request(http::Method::GET, path, Some(table), None, Vec::new()).await;
    assert_eq!(k.serving.serve.cache_hits() - before, 1, "the default table from cache");
    assert_eq!(names(&got.json()), ["Name", "Age"]);
    // New columns: the apiserver ends the gizmos' watches, kache reads the CRD again and
    // relists; until then its Tables keep the old columns (or pass through while it lists).
    gizmos_crd(&direct, json!([{"name": "Size", "type": "integer", "jsonPath": ".spec.size"}, {"name": "Color", "type": "string", "jsonPath": ".spec.color", "priority": 1}])).await;
    // Once the apiserver prints them, a consistent Table through kache has them too, at
    // once: its proof covers the CRD that decides the columns, not only the objects.
    for _ in 0..600 {
        let (_, direct_table) = direct_get(&direct, path, table).await;
        if names(&serde_json::from_slice(&direct_table).unwrap()) == ["Name", "Size", "Color"] {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    let got = k.api.request(http::Method::GET, path, Some(table), None, Vec::new()).await;
    assert_eq!(names(&got.json()), ["Name", "Size", "Color"], "the CRD's columns as they stand");
    let mut seen = false;
    for _ in 0..600 {
        let before = k.serving.serve.cache_hits();
        let got = k.api.request(http::Method::GET, path, Some(table), None, Vec::new()).await;
        if k.serving.serve.cache_hits() - before == 1 && names(&got.json()) == ["Name", "Size", "Color"] {
            let (_, want) = direct_get(&direct, path, table).await;
            let cells =
                |v: &Value| v["rows"].as_array().unwrap().iter().map(|r| r["cells"].as_array().unwrap().clone()).collect::<Vec<_>>();
            let (got, want): (Value, Value) = (got.json(), serde_json::from_slice(&want).unwrap());
            assert_eq!(got["columnDefinitions"], want["columnDefinitions"]);
            let without_age = |rows: Vec<Vec<Value>>| {
                rows.into_iter()
                    .map(|mut r| {
                        r.truncate(3);
                        r
                    })
                    .collect::<Vec<_>>()
            };
            assert_eq!(without_age(cells(&got)), without_age(cells(&want)));
            assert!(cells(&got).iter().any(|r| r[0] == json!(name) && r[1] == json!(7) && r[2] == json!("red")), "{got}");
            seen = true;
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    assert!(seen, "kache printed the CRD's new columns from cache within a minute");
    eprintln!("a CRD's new printer columns printed from cache, as the apiserver prints them");
    gizmos_crd(&direct, json!([])).await;
    k.api.delete(&format!("{path}/{name}")).await;
}

/// Merge-patch `path` directly at the apiserver (not through kache).
async fn direct_merge_patch(direct: &kube::Client, path: &str, patch: &Value) {
    use http_body_util::BodyExt;
    let req = http::Request::patch(path)
        .header(http::header::CONTENT_TYPE, "application/merge-patch+json")
        .body(kube::client::Body::from(patch.to_string().into_bytes()))
        .unwrap();
    let resp = direct.send(req).await.expect("patch");
    let code = resp.status().as_u16();
    let body = resp.into_body().collect().await.unwrap().to_bytes();
    assert_eq!(code, 200, "{path}: {}", String::from_utf8_lossy(&body));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn real_small_consistent_lists_are_checked_against_the_apiservers_metadata_and_printed_from_cache() {
    // The default cost rule (factor 1): these reads are ones the apiserver answers sooner than
    // a freshness proof, so kache checks them against its metadata.
    let flags = ["--preload", "pods,nodes,namespaces", "--consistent-passthrough-factor", "1", "--revision-ledger", "off"];
    let Some(k) = real_with("real_small_consistent_lists_checked", &flags).await else { return };
    let serve = &k.serving.serve;
    let one = k.api.get_ok(POPULATED_POD).await;
    let (ns, name) = (
        one["items"][0]["metadata"]["namespace"].as_str().unwrap().to_string(),
        one["items"][0]["metadata"]["name"].as_str().unwrap().to_string(),
    );
    let _w = Writer::start(&k, "rv-mover-checks");
    let via = crate::support::Kubectl::new(&format!("http://{}", k.serving.addr));
    let cache = tempfile::tempdir().unwrap();
    let checked = || serve.checks("same") + serve.checks("proven");
    for args in [
        vec!["get", "pods", "-n", &ns],
        vec!["get", "pods", "-n", &ns, "--chunk-size=100"],
        vec!["get", "nodes"],
        vec!["get", "namespaces"],
    ] {
        let (c0, passed) = (checked(), serve.passed_through("cheaper_upstream"));
        let (hits, _) = prints_the_same(&k, &via, cache.path(), &args).await;
        let what = format!("kubectl {}", args.join(" "));
        assert!(hits >= 1 && checked() > c0, "{what}: checked and answered from cache ({hits} hits)");
        assert_eq!(serve.passed_through("cheaper_upstream"), passed, "{what}: nothing passed through");
    }
    // Read your own write: a pod labelled directly at the apiserver is in the next consistent
    // LIST through kache, whose check sees the pod's new version.
    labelled_pod_is_read_back(&k, &ns, &name, "kache-check", 5).await;
    eprintln!("checks: {}", consistent_counts(serve));
}

/// Read your own write, `rounds` times: a pod labelled `label` (a new value each round)
/// directly at the apiserver is the one pod the next consistent LIST by that label through
/// kache returns.
async fn labelled_pod_is_read_back(k: &TestKache, ns: &str, name: &str, label: &str, rounds: u32) {
    let direct = direct_client().await;
    let mark = format!("m{}", std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_nanos());
    for round in 0..rounds {
        let value = format!("{mark}-{round}");
        direct_merge_patch(&direct, &format!("/api/v1/namespaces/{ns}/pods/{name}"), &json!({"metadata": {"labels": {label: value}}}))
            .await;
        let list = k.api.get_ok(&format!("/api/v1/namespaces/{ns}/pods?labelSelector={label}%3D{value}")).await;
        let names: Vec<&str> = list["items"].as_array().unwrap().iter().map(|i| i["metadata"]["name"].as_str().unwrap()).collect();
        assert_eq!(names, vec![name], "round {round}: the write is read back");
    }
}

/// How kache's consistent LISTs were proven, by outcome.
fn consistent_counts(serve: &kache::serve::Serve) -> String {
    ["accounted", "same", "proven", "differed", "failed"].iter().map(|o| format!("{o} {}", serve.checks(o))).collect::<Vec<_>>().join(", ")
}

/// The revision ledger against the real apiserver: with ConfigMaps cached, the
/// writer's kind, kubectl's consistent LISTs of a namespace's pods are proven current by the
/// ledger (every revision since the cache's last proof a ConfigMap's write) and print what
/// they print directly; a pod labelled directly at the apiserver is still read back at once.
/// The apiserver's own writes (its identity lease, its endpoint lease, compaction) leave some
/// gaps open: those reads are checked, so only some need be accounted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn real_consistent_lists_are_proven_by_the_revision_ledger_while_configmaps_move_the_rv() {
    let flags = ["--preload", "pods,configmaps", "--consistent-passthrough-factor", "1"];
    let Some(k) = real_with("real_revision_ledger", &flags).await else { return };
    let serve = &k.serving.serve;
    assert!(serve.wait_ledger(QUICK).await, "pods and configmaps share the apiserver's etcd");
    let one = k.api.get_ok(POPULATED_POD).await;
    let (ns, name) = (
        one["items"][0]["metadata"]["namespace"].as_str().unwrap().to_string(),
        one["items"][0]["metadata"]["name"].as_str().unwrap().to_string(),
    );
    let _w = Writer::start(&k, "rv-mover-ledger");
    let via = crate::support::Kubectl::new(&format!("http://{}", k.serving.addr));
    let cache = tempfile::tempdir().unwrap();
    let (accounted, passed) = (serve.checks("accounted"), serve.passed_through("cheaper_upstream"));
    for _ in 0..5 {
        let (hits, _) = prints_the_same(&k, &via, cache.path(), &["get", "pods", "-n", &ns]).await;
        assert!(hits >= 1, "kubectl get pods -n {ns}: answered from cache");
    }
    assert!(serve.checks("accounted") > accounted, "some of them proven by the ledger");
    assert_eq!(serve.passed_through("cheaper_upstream"), passed, "nothing passed through");
    labelled_pod_is_read_back(&k, &ns, &name, "kache-ledger", 10).await;
    eprintln!("consistent reads: {}", consistent_counts(serve));
}

/// A pod or ConfigMap `name` created in the tier's namespace and deleted at once.
async fn created_and_deleted(k: &TestKache, kind: &str, name: &str) {
    let body = match kind {
        "pods" => json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name},
            "spec": {"containers": [{"name": "c", "image": "registry.example/app:1"}]}}),
        _ => json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name}}),
    };
    let path = format!("/api/v1/namespaces/{NS}/{kind}");
    let r = k.api.post(&path, &body).await;
    assert_eq!(r.status, 201, "{}", r.text());
    assert_eq!(k.api.delete(&format!("{path}/{name}?gracePeriodSeconds=0")).await.status, 200);
}

/// Deletions in the revision ledger against the real apiserver, which tells a
/// deletion at the revision that deleted the object. Each round creates and deletes a pod and
/// then a ConfigMap before a consistent LIST of the namespace's pods, and a ConfigMap and then
/// a pod before a consistent LIST of its ConfigMaps: the last revisions before each read are
/// the other kind's, a deletion last. Reads are proven by the ledger across them (none could
/// be before: a deletion left the gap open), and what was deleted is never read back.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn real_deletions_prove_other_reads_and_what_was_deleted_is_never_read_back() {
    let flags = ["--preload", "pods,configmaps", "--consistent-passthrough-factor", "1"];
    let Some(k) = real_with("real_ledger_deletions", &flags).await else { return };
    let serve = &k.serving.serve;
    assert!(serve.wait_ledger(QUICK).await, "pods and configmaps share the apiserver's etcd");
    let sa = json!({"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": "default"}});
    k.api.post(&format!("/api/v1/namespaces/{NS}/serviceaccounts"), &sa).await;
    let (pods, cms) = (format!("/api/v1/namespaces/{NS}/pods"), format!("/api/v1/namespaces/{NS}/configmaps"));
    let names = |list: Value| -> Vec<String> {
        list["items"].as_array().unwrap().iter().map(|i| i["metadata"]["name"].as_str().unwrap().to_string()).collect()
    };
    let accounted = serve.checks("accounted");
    for round in 0..10 {
        let name = format!("ledger-gone-{round}");
        created_and_deleted(&k, "pods", &name).await;
        created_and_deleted(&k, "configmaps", &name).await;
        let listed = names(k.api.get_ok(&pods).await);
        assert!(!listed.contains(&name), "round {round}: the pod deleted before the read is not in it: {listed:?}");
        let name = format!("ledger-gone-{round}-b");
        created_and_deleted(&k, "configmaps", &name).await;
        created_and_deleted(&k, "pods", &name).await;
        let listed = names(k.api.get_ok(&cms).await);
        assert!(!listed.contains(&name), "round {round}: the ConfigMap deleted before the read is not in it: {listed:?}");
    }
    let proven = serve.checks("accounted") - accounted;
    eprintln!("consistent reads: {}; proven by the ledger in this test: {proven} of 20", consistent_counts(serve));
    assert!(proven > 0, "reads proven by the ledger across the other kind's deletions");
}
