//! The simulator against real kubectl (/usr/bin/kubectl) and as the `kache sim` binary:
//! listing all pods, field and label selectors, chunked lists, a streaming `get -w`, a custom
//! resource's Table in its CRD's columns, and `apply`/`delete` of a ConfigMap and of a custom
//! resource.

use crate::support::*;
use serde_json::Value;
use std::collections::BTreeSet;
use std::io::BufReader;
use std::process::Stdio;

const FULL: &[&str] = &["--nodes", "100", "--pods", "3000"];

fn item_names(list: &Value) -> Vec<String> {
    names(list["items"].as_array().expect("items"))
}

fn pod_key(p: &Value) -> String {
    format!("{}/{}", p["metadata"]["namespace"].as_str().unwrap(), p["metadata"]["name"].as_str().unwrap())
}

fn sorted(mut v: Vec<String>) -> Vec<String> {
    v.sort();
    v
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn binary_sim_writes_its_address_and_churns() {
    let b = BinarySim::spawn(&["--nodes", "100", "--pods", "3000", "--churn-per-sec", "20"]).await;
    assert!(b.addr.ip().is_loopback());
    assert_ne!(b.addr.port(), 0, "the address file holds the bound port");
    let v = b.api.get_ok("/version").await;
    assert!(v["gitVersion"].as_str().is_some_and(|g| g.starts_with('v')), "{v}");
    let k = Kubectl::new(&b.api.base);
    let nodes = k.json(&["get", "nodes", "-o", "json"]).await;
    assert_eq!(nodes["items"].as_array().unwrap().len(), 100);
    let pods = b.api.get_ok("/api/v1/pods").await;
    let n = pods["items"].as_array().unwrap().len();
    assert!((2900..=3100).contains(&n), "{n} pods");
    // Churn moves the resourceVersion: poll until it does.
    let rv0 = list_rv(&pods);
    let b = &b;
    eventually(60, 100, || async move {
        let rv = list_rv(&b.api.get_ok("/api/v1/pods?limit=1").await);
        if rv > rv0 {
            Ok(())
        } else {
            Err(format!("no churn; stderr: {}", b.stderr()))
        }
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_lists_all_3000_pods() {
    let s = start(&cluster(FULL)).await;
    let k = Kubectl::new(&s.base);
    let out = k.json(&["get", "pods", "-A", "-o", "json"]).await;
    assert_eq!(out["items"].as_array().unwrap().len(), 3000);
    let (_, all) = s.all_pods().await;
    assert_eq!(sorted(item_names(&out)), sorted(names(&all)));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_field_selector_on_node_name() {
    let s = start(&cluster(FULL)).await;
    let (_, all) = s.all_pods().await;
    let want: Vec<String> = sorted(names(&all.iter().filter(|p| p["spec"]["nodeName"] == "node-0007").cloned().collect::<Vec<_>>()));
    assert_eq!(want.len(), 30, "pod i runs on node i % 100");
    let k = Kubectl::new(&s.base);
    let out = k.json(&["get", "pods", "-A", "--field-selector", "spec.nodeName=node-0007", "-o", "json"]).await;
    assert_eq!(sorted(item_names(&out)), want);
    // Combined with a namespace and another field.
    let ns = all.iter().find(|p| p["spec"]["nodeName"] == "node-0007").unwrap()["metadata"]["namespace"].as_str().unwrap().to_string();
    let out = k.json(&["get", "pods", "-n", &ns, "--field-selector", "spec.nodeName=node-0007,status.phase!=Bogus", "-o", "json"]).await;
    let in_ns: Vec<String> = want.iter().filter(|n| n.starts_with(&format!("{ns}/"))).cloned().collect();
    assert_eq!(sorted(item_names(&out)), in_ns);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_label_selectors_match_client_side_filtering() {
    let s = start(&cluster(FULL)).await;
    let (_, all) = s.all_pods().await;
    let app = all[123]["metadata"]["labels"]["app"].as_str().unwrap().to_string();
    let k = Kubectl::new(&s.base);
    let label = |p: &Value, key: &str| p["metadata"]["labels"][key].as_str().map(str::to_string);
    type Case = (String, Box<dyn Fn(&Value) -> bool>);
    let cases: Vec<Case> = vec![
        (format!("app={app}"), Box::new(move |p: &Value| label(p, "app").as_deref() == Some(app.as_str()))),
        (
            "tier in (frontend,edge),env!=prod".into(),
            Box::new(move |p: &Value| {
                matches!(label(p, "tier").as_deref(), Some("frontend" | "edge")) && label(p, "env").as_deref() != Some("prod")
            }),
        ),
        ("!nonexistent,team=identity".into(), Box::new(move |p: &Value| label(p, "team").as_deref() == Some("identity"))),
    ];
    for (sel, keep) in cases {
        let want = sorted(names(&all.iter().filter(|p| keep(p)).cloned().collect::<Vec<_>>()));
        assert!(!want.is_empty(), "{sel} selects something");
        let out = k.json(&["get", "pods", "-A", "-l", &sel, "-o", "json"]).await;
        assert_eq!(sorted(item_names(&out)), want, "-l {sel}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_chunked_list_equals_unpaginated() {
    let s = start(&cluster(FULL)).await;
    let k = Kubectl::new(&s.base);
    let whole = k.json(&["get", "pods", "-A", "--chunk-size=0", "-o", "json"]).await;
    let out = k.run(&["get", "pods", "-A", "--chunk-size=500", "-o", "json", "-v=6"]).await;
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let log = String::from_utf8_lossy(&out.stderr);
    let pages = log.lines().filter(|l| l.contains("/api/v1/pods?") && l.contains("limit=500")).count();
    assert_eq!(pages, 6, "3000 pods in pages of 500:\n{log}");
    assert!(log.contains("continue="), "later pages carry the continue token");
    let chunked: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(item_names(&chunked), item_names(&whole), "same names in the same order");
    assert_eq!(whole["items"].as_array().unwrap().len(), 3000);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_watch_streams_added_then_modified() {
    let mut c = cluster(FULL);
    c.churn_per_sec = 20.0;
    let s = start(&c).await;
    let k = Kubectl::new(&s.base);
    let mut cmd = k.command(&["get", "pods", "-A", "-w", "-o", "json", "--output-watch-events"]);
    cmd.stdout(Stdio::piped()).stderr(Stdio::piped());
    let mut child = ChildGuard(cmd.spawn().expect("spawn kubectl"));
    let stdout = child.0.stdout.take().unwrap();
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel::<Value>();
    std::thread::spawn(move || {
        for v in serde_json::Deserializer::from_reader(BufReader::new(stdout)).into_iter::<Value>() {
            match v {
                Ok(v) => {
                    if tx.send(v).is_err() {
                        return;
                    }
                }
                Err(_) => return,
            }
        }
    });
    let end = deadline(90);
    let mut initial = BTreeSet::new();
    let mut listing = true;
    let mut added_later = BTreeSet::new();
    let modified = loop {
        let ev = match tokio::time::timeout_at(end, rx.recv()).await {
            Ok(Some(ev)) => ev,
            Ok(None) => {
                let mut err = String::new();
                let _ = std::io::Read::read_to_string(child.0.stderr.as_mut().unwrap(), &mut err);
                panic!("kubectl -w ended after {} events: {err}", initial.len());
            }
            Err(_) => panic!("no MODIFIED within 90 s ({} ADDED so far)", initial.len()),
        };
        let obj = &ev["object"];
        let ty = ev["type"].as_str().unwrap();
        // kubectl prints each page of its chunked initial list as one ADDED event holding the
        // PodList (it wraps whatever `get` would print), then the watch events one per pod.
        if obj["kind"] == "PodList" {
            assert!(listing && ty == "ADDED", "a list page after the watch started: {ty}");
            for p in obj["items"].as_array().unwrap() {
                assert_eq!(p["kind"], "Pod");
                let key = pod_key(p);
                assert!(initial.insert(key.clone()), "duplicate pod {key} in the initial list");
            }
            continue;
        }
        assert_eq!(obj["kind"], "Pod", "event of type {ty}");
        let key = pod_key(obj);
        listing = false;
        match ty {
            "MODIFIED" => break obj.clone(),
            "ADDED" => {
                added_later.insert(key);
            }
            _ => {}
        }
    };
    // The list came first: an ADDED for every pod (churn may have deleted a few by then).
    assert!((2950..=3050).contains(&initial.len()), "the initial list holds every pod: {}", initial.len());
    let key = pod_key(&modified);
    assert!(initial.contains(&key) || added_later.contains(&key), "MODIFIED {key} is a pod seen before");
    assert!(modified["metadata"]["annotations"]["kache.dev/changed-at"].is_string(), "a churn update of {key}");
    drop(child);
}

/// `kubectl get` of a custom resource prints the printer columns of the CRD the simulator
/// serves: those a real apiserver printed for the same CRD (testdata/crd), `-o wide` the
/// ones of priority above 0 too.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_get_widgets_prints_the_crds_columns() {
    let s = start(&cluster(&["--nodes", "2", "--pods", "10"])).await;
    s.must("create widget", s.post("/apis/example.com/v1/namespaces/default/widgets", &captured_widget("w1", "default")).await).await;
    let real = crd_golden("widgets.table.json");
    let columns = real["columnDefinitions"].as_array().unwrap();
    let k = Kubectl::new(&s.base);
    for wide in [false, true] {
        let mut args = vec!["get", "widgets", "-n", "default"];
        if wide {
            args.extend(["-o", "wide"]);
        }
        let out = k.run(&args).await;
        assert!(out.status.success(), "kubectl {}: {}", args.join(" "), String::from_utf8_lossy(&out.stderr));
        let stdout = String::from_utf8_lossy(&out.stdout);
        let mut lines = stdout.lines();
        let header: Vec<&str> = lines.next().unwrap_or("").split_whitespace().collect();
        let want: Vec<String> =
            columns.iter().filter(|c| wide || c["priority"] == 0).map(|c| c["name"].as_str().unwrap().to_uppercase()).collect();
        assert_eq!(header, want, "kubectl {}", args.join(" "));
        let row: Vec<&str> = lines.next().unwrap_or("").split_whitespace().collect();
        assert_eq!(row[..5], ["w1", "Running", "3", "0.5", "true"], "{stdout}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_apply_and_delete_configmap_and_custom_resource() {
    let s = start(&cluster(&["--nodes", "5", "--pods", "50"])).await;
    let k = Kubectl::new(&s.base);
    let cm = |color: &str, extra: &str| {
        format!("apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: applied-cm\n  namespace: default\n  labels:\n    origin: apply\ndata:\n  color: {color}\n{extra}")
    };
    let widget = |size: u32, color: &str| {
        format!("apiVersion: example.com/v1\nkind: Widget\nmetadata:\n  name: applied-widget\n  namespace: default\nspec:\n  size: {size}\n  color: {color}\n")
    };
    let file = k.dir().join("obj.yaml");
    for (what, get, first, second) in [
        ("configmap", ["configmap", "applied-cm"], cm("blue", ""), cm("green", "  shape: round\n")),
        ("widget", ["widgets.example.com", "applied-widget"], widget(3, "red"), widget(5, "red")),
    ] {
        let get_args = ["get", get[0], get[1], "-n", "default", "-o", "json"];
        std::fs::write(&file, &first).unwrap();
        let out = k.run(&["apply", "-f", file.to_str().unwrap()]).await;
        assert!(out.status.success(), "{what}: apply: {}", String::from_utf8_lossy(&out.stderr));
        assert!(String::from_utf8_lossy(&out.stdout).contains("created"), "{what}: {}", String::from_utf8_lossy(&out.stdout));
        let got = k.json(&get_args).await;
        assert!(got["metadata"]["annotations"]["kubectl.kubernetes.io/last-applied-configuration"].is_string(), "{what}: {got}");
        let rv1 = obj_rv(&got);
        if what == "configmap" {
            assert_eq!(got["data"], serde_json::json!({"color": "blue"}));
            assert_eq!(got["metadata"]["labels"]["origin"], "apply");
        } else {
            assert_eq!(got["kind"], "Widget");
            assert_eq!(got["spec"], serde_json::json!({"size": 3, "color": "red"}));
        }

        std::fs::write(&file, &second).unwrap();
        let out = k.run(&["apply", "-f", file.to_str().unwrap()]).await;
        assert!(out.status.success(), "{what}: re-apply: {}", String::from_utf8_lossy(&out.stderr));
        assert!(String::from_utf8_lossy(&out.stdout).contains("configured"), "{what}: {}", String::from_utf8_lossy(&out.stdout));
        let got = k.json(&get_args).await;
        assert!(obj_rv(&got) > rv1);
        if what == "configmap" {
            assert_eq!(got["data"], serde_json::json!({"color": "green", "shape": "round"}));
        } else {
            assert_eq!(got["spec"], serde_json::json!({"size": 5, "color": "red"}));
        }
        // Applying the same file again changes nothing.
        let out = k.run(&["apply", "-f", file.to_str().unwrap()]).await;
        assert!(String::from_utf8_lossy(&out.stdout).contains("unchanged"), "{what}: {}", String::from_utf8_lossy(&out.stdout));

        let out = k.run(&["delete", "-f", file.to_str().unwrap()]).await;
        assert!(out.status.success(), "{what}: delete: {}", String::from_utf8_lossy(&out.stderr));
        let out = k.run(&get_args).await;
        assert!(!out.status.success());
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains("(NotFound)") && err.contains("not found"), "{what}: {err}");
    }
}

/// Lines of a child's stdout, sent as they arrive.
fn stdout_lines(child: &mut ChildGuard) -> tokio::sync::mpsc::UnboundedReceiver<String> {
    let stdout = child.0.stdout.take().expect("piped stdout");
    let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
    std::thread::spawn(move || {
        for line in std::io::BufRead::lines(BufReader::new(stdout)) {
            let Ok(line) = line else { return };
            if tx.send(line).is_err() {
                return;
            }
        }
    });
    rx
}

async fn next_line(lines: &mut tokio::sync::mpsc::UnboundedReceiver<String>, end: tokio::time::Instant) -> String {
    match tokio::time::timeout_at(end, lines.recv()).await {
        Ok(Some(l)) => l,
        Ok(None) => panic!("kubectl ended"),
        Err(_) => panic!("kubectl printed nothing more before the deadline"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_get_watch_prints_table_rows() {
    let s = start(&cluster(&["--nodes", "10", "--pods", "300"])).await;
    let (_, pods) = s.all_pods().await;
    let ns = pods[0]["metadata"]["namespace"].as_str().unwrap().to_string();
    let in_ns: Vec<&Value> = pods.iter().filter(|p| p["metadata"]["namespace"] == ns.as_str()).collect();
    let k = Kubectl::new(&s.base);
    // The default output: kubectl asks for Tables, for the list and for the watch.
    let mut cmd = k.command(&["get", "pods", "-n", &ns, "-w"]);
    cmd.stdout(Stdio::piped()).stderr(Stdio::piped());
    let mut child = ChildGuard(cmd.spawn().expect("spawn kubectl"));
    let mut lines = stdout_lines(&mut child);
    let end = deadline(60);
    let header = next_line(&mut lines, end).await;
    assert!(header.split_whitespace().eq(["NAME", "READY", "STATUS", "RESTARTS", "AGE"]), "{header}");
    for p in &in_ns {
        let row = next_line(&mut lines, end).await;
        assert!(row.starts_with(p["metadata"]["name"].as_str().unwrap()), "row {row:?}");
        assert!(row.contains("Running") || row.contains("Pending"), "{row}");
    }
    // A change arrives as a Table watch event: one more row for that pod.
    let target = in_ns[3]["metadata"]["name"].as_str().unwrap();
    let p =
        s.patch(&format!("/api/v1/namespaces/{ns}/pods/{target}"), &serde_json::json!({"metadata": {"labels": {"watched": "yes"}}})).await;
    s.must("patch", p).await;
    let row = next_line(&mut lines, end).await;
    assert!(row.starts_with(target), "watch row {row:?}");
    assert_eq!(row.split_whitespace().count(), 5, "same columns, no second header: {row}");
    let stderr = child.0.stderr.take().unwrap();
    drop(child);
    let mut err = String::new();
    let _ = std::io::Read::read_to_string(&mut BufReader::new(stderr), &mut err);
    assert!(!err.contains("NotAcceptable"), "{err}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_table_output_is_paged_and_has_wide_columns() {
    let s = start(&cluster(FULL)).await;
    let k = Kubectl::new(&s.base);
    let out = k.run(&["get", "pods", "-A", "-o", "wide", "--chunk-size=500", "-v=6"]).await;
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let text = String::from_utf8_lossy(&out.stdout);
    let mut lines = text.lines();
    let header: Vec<&str> = lines.next().unwrap().split_whitespace().collect();
    assert_eq!(
        header,
        ["NAMESPACE", "NAME", "READY", "STATUS", "RESTARTS", "AGE", "IP", "NODE", "NOMINATED", "NODE", "READINESS", "GATES"]
    );
    let rows: Vec<&str> = lines.collect();
    assert_eq!(rows.len(), 3000);
    let (_, all) = s.all_pods().await;
    let first = &all[0];
    let cells: Vec<&str> = rows[0].split_whitespace().collect();
    assert_eq!(cells[1], first["metadata"]["name"].as_str().unwrap());
    assert_eq!(cells[6], first["status"]["podIP"].as_str().unwrap());
    assert_eq!(cells[7], first["spec"]["nodeName"].as_str().unwrap());
    let log = String::from_utf8_lossy(&out.stderr);
    let pages: Vec<&str> = log.lines().filter(|l| l.contains("/api/v1/pods?") && l.contains("limit=500")).collect();
    assert_eq!(pages.len(), 6, "Tables are paged like any LIST:\n{}", pages.join("\n"));
    assert_eq!(pages.iter().filter(|l| l.contains("continue=")).count(), 5);

    let out = k.run(&["get", "configmaps", "-n", "kube-system"]).await;
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.lines().next().unwrap().split_whitespace().eq(["NAME", "DATA", "AGE"]), "{text}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_create_set_image_and_json_patch() {
    let s = start(&cluster(&["--nodes", "5", "--pods", "50"])).await;
    let k = Kubectl::new(&s.base);
    // `kubectl create` sends protobuf bodies for built-in kinds.
    let out = k.run(&["create", "configmap", "made-by-create", "-n", "default", "--from-literal=a=b"]).await;
    assert!(out.status.success(), "create: {}", String::from_utf8_lossy(&out.stderr));
    let cm = k.json(&["get", "configmap", "made-by-create", "-n", "default", "-o", "json"]).await;
    assert_eq!(cm["data"], serde_json::json!({"a": "b"}));

    let out = k
        .run(&[
            "patch",
            "configmap",
            "made-by-create",
            "-n",
            "default",
            "--type=json",
            "-p",
            r#"[{"op":"replace","path":"/data/a","value":"c"},{"op":"add","path":"/data/d","value":"e"}]"#,
        ])
        .await;
    assert!(out.status.success(), "json patch: {}", String::from_utf8_lossy(&out.stderr));
    let cm = k.json(&["get", "configmap", "made-by-create", "-n", "default", "-o", "json"]).await;
    assert_eq!(cm["data"], serde_json::json!({"a": "c", "d": "e"}));
    let out = k.run(&["delete", "configmap", "made-by-create", "-n", "default", "--dry-run=server"]).await;
    assert!(String::from_utf8_lossy(&out.stdout).contains("server dry run"), "{}", String::from_utf8_lossy(&out.stderr));
    k.json(&["get", "configmap", "made-by-create", "-n", "default", "-o", "json"]).await;

    let deploys = s.get_ok("/apis/apps/v1/deployments?limit=1").await;
    let d = &deploys["items"][0];
    let (ns, name) = (d["metadata"]["namespace"].as_str().unwrap(), d["metadata"]["name"].as_str().unwrap());
    let before = d["spec"]["template"]["spec"]["containers"].as_array().unwrap().clone();
    let first = before[0]["name"].as_str().unwrap();
    let out = k.run(&["set", "image", &format!("deployment/{name}"), "-n", ns, &format!("{first}=registry.example.com/new:v2")]).await;
    assert!(out.status.success(), "set image: {}", String::from_utf8_lossy(&out.stderr));
    let after = k.json(&["get", "deployment", name, "-n", ns, "-o", "json"]).await;
    let after = after["spec"]["template"]["spec"]["containers"].as_array().unwrap().clone();
    assert_eq!(after.len(), before.len(), "no container dropped");
    assert_eq!(after[0]["image"], "registry.example.com/new:v2");
    assert_eq!(after[0]["ports"], before[0]["ports"], "the container's other fields are kept");
    assert_eq!(after[1..], before[1..]);
}
