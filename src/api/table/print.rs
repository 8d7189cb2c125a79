//! The cells of each printed kind, computed from an object's JSON as the apiserver's
//! printers compute them from the object (`pkg/printers/internalversion`, v1.36).

use super::{time, Writer};
use serde_json::Value;

fn s(v: &Value) -> &str {
    v.as_str().unwrap_or("")
}

fn arr(v: &Value) -> &[Value] {
    v.as_array().map_or(&[], Vec::as_slice)
}

fn count(v: &Value) -> i64 {
    v.as_object().map_or(0, |m| m.len() as i64)
}

fn or_none(v: &str) -> &str {
    if v.is_empty() {
        "<none>"
    } else {
        v
    }
}

fn created(v: &Value) -> Option<i64> {
    time(&v["metadata"]["creationTimestamp"])
}

pub(super) fn namespace(w: &mut Writer, v: &Value) {
    w.str(s(&v["metadata"]["name"]));
    w.str(s(&v["status"]["phase"]));
    w.since("", created(v), "");
}

pub(super) fn config_map(w: &mut Writer, v: &Value) {
    w.str(s(&v["metadata"]["name"]));
    w.int(count(&v["data"]) + count(&v["binaryData"]));
    w.since("", created(v), "");
}

pub(super) fn secret(w: &mut Writer, v: &Value) {
    w.str(s(&v["metadata"]["name"]));
    w.str(s(&v["type"]));
    w.int(count(&v["data"]));
    w.since("", created(v), "");
}

pub(super) fn service_account(w: &mut Writer, v: &Value) {
    w.str(s(&v["metadata"]["name"]));
    w.since("", created(v), "");
}

pub(super) fn node(w: &mut Writer, v: &Value) {
    let status = &v["status"];
    // The last Ready condition decides; nodes without one are Unknown.
    let ready = arr(&status["conditions"]).iter().rev().find(|c| c["type"] == "Ready");
    let mut state = match ready {
        Some(c) if c["status"] == "True" => "Ready".to_string(),
        Some(_) => "NotReady".to_string(),
        None => "Unknown".to_string(),
    };
    if v["spec"]["unschedulable"] == true {
        state.push_str(",SchedulingDisabled");
    }
    let mut roles: Vec<&str> = v["metadata"]["labels"]
        .as_object()
        .into_iter()
        .flatten()
        .filter_map(|(k, val)| match k.strip_prefix("node-role.kubernetes.io/") {
            Some(role) if !role.is_empty() => Some(role),
            Some(_) => None,
            None if k == "kubernetes.io/role" && !s(val).is_empty() => Some(s(val)),
            None => None,
        })
        .collect();
    roles.sort_unstable();
    roles.dedup();
    let info = &status["nodeInfo"];
    w.str(s(&v["metadata"]["name"]));
    w.str(&state);
    w.str(or_none(&roles.join(",")));
    w.since("", created(v), "");
    w.str(s(&info["kubeletVersion"]));
    let address = |kind: &str| arr(&status["addresses"]).iter().find(|a| a["type"] == kind).map_or("<none>", |a| s(&a["address"]));
    w.str(address("InternalIP"));
    w.str(address("ExternalIP"));
    let unknown = |v: &str| if v.is_empty() { "<unknown>".to_string() } else { v.to_string() };
    w.str(&unknown(s(&info["osImage"])));
    let mut kernel = unknown(s(&info["kernelVersion"]));
    if !s(&info["architecture"]).is_empty() {
        kernel = format!("{kernel} ({})", s(&info["architecture"]));
    }
    w.str(&kernel);
    w.str(&unknown(s(&info["containerRuntimeVersion"])));
}

const POD_SUCCEEDED: &str =
    r#"[{"type":"Completed","status":"True","reason":"Succeeded","message":"The pod has completed successfully."}]"#;
const POD_FAILED: &str = r#"[{"type":"Completed","status":"True","reason":"Failed","message":"The pod failed."}]"#;

/// The later of two optional instants (an unset one is the zero time).
fn later(a: Option<i64>, b: Option<i64>) -> Option<i64> {
    match (a, b) {
        (Some(x), Some(y)) => Some(x.max(y)),
        (x, None) => x,
        (None, y) => y,
    }
}

fn condition_true(status: &Value, kind: &str) -> bool {
    arr(&status["conditions"]).iter().any(|c| c["type"] == kind && c["status"] == "True")
}

/// How a terminated container's state reads: its reason, else its signal or exit code.
fn terminated_reason(t: &Value, prefix: &str) -> String {
    let reason = s(&t["reason"]);
    if !reason.is_empty() {
        return format!("{prefix}{reason}");
    }
    match t["signal"].as_i64().unwrap_or(0) {
        0 => format!("{prefix}ExitCode:{}", t["exitCode"].as_i64().unwrap_or(0)),
        n => format!("{prefix}Signal:{n}"),
    }
}

/// Ready, Status and Restarts of a pod, as `printPod` works them out.
struct PodState {
    ready: usize,
    total: usize,
    reason: String,
    restarts: i64,
    last_restart: Option<i64>,
}

fn pod_state(v: &Value) -> PodState {
    let (spec, status) = (&v["spec"], &v["status"]);
    let phase = s(&status["phase"]);
    let mut reason = if s(&status["reason"]).is_empty() { phase.to_string() } else { s(&status["reason"]).to_string() };
    if arr(&status["conditions"]).iter().any(|c| c["type"] == "PodScheduled" && c["reason"] == "SchedulingGated") {
        reason = "SchedulingGated".into();
    }
    let init_specs = arr(&spec["initContainers"]);
    let restartable = |name: &Value| init_specs.iter().any(|c| c["name"] == *name && c["restartPolicy"] == "Always");
    let total = arr(&spec["containers"]).len() + init_specs.iter().filter(|c| c["restartPolicy"] == "Always").count();
    let (mut ready, mut restarts, mut last_restart) = (0usize, 0i64, None);
    let (mut sidecar_restarts, mut sidecar_last) = (0i64, None);
    let mut initializing = false;
    for (i, c) in arr(&status["initContainerStatuses"]).iter().enumerate() {
        let count = c["restartCount"].as_i64().unwrap_or(0);
        let finished = time(&c["lastState"]["terminated"]["finishedAt"]);
        restarts += count;
        last_restart = later(last_restart, finished);
        let sidecar = restartable(&c["name"]);
        if sidecar {
            sidecar_restarts += count;
            sidecar_last = later(sidecar_last, finished);
        }
        let terminated = &c["state"]["terminated"];
        let waiting = s(&c["state"]["waiting"]["reason"]);
        if terminated.is_object() && terminated["exitCode"].as_i64().unwrap_or(0) == 0 {
            continue;
        }
        if sidecar && c["started"] == true {
            if c["ready"] == true {
                ready += 1;
            }
            continue;
        }
        reason = if terminated.is_object() {
            terminated_reason(terminated, "Init:")
        } else if !waiting.is_empty() && waiting != "PodInitializing" {
            format!("Init:{waiting}")
        } else {
            format!("Init:{i}/{}", init_specs.len())
        };
        initializing = true;
        break;
    }
    if !initializing || condition_true(status, "Initialized") {
        restarts = sidecar_restarts;
        last_restart = sidecar_last;
        let (mut running, mut error_reason) = (false, String::new());
        for c in arr(&status["containerStatuses"]).iter().rev() {
            restarts += c["restartCount"].as_i64().unwrap_or(0);
            last_restart = later(last_restart, time(&c["lastState"]["terminated"]["finishedAt"]));
            let state = &c["state"];
            if !s(&state["waiting"]["reason"]).is_empty() {
                reason = s(&state["waiting"]["reason"]).to_string();
            } else if state["terminated"].is_object() {
                reason = terminated_reason(&state["terminated"], "");
                if state["terminated"]["exitCode"].as_i64().unwrap_or(0) != 0 {
                    error_reason = reason.clone();
                }
            } else if c["ready"] == true && state["running"].is_object() {
                running = true;
                ready += 1;
            }
        }
        if reason == "Completed" {
            if running && condition_true(status, "Ready") {
                reason = "Running".into();
            } else if !error_reason.is_empty() {
                reason = error_reason;
            } else if running {
                reason = "NotReady".into();
            }
        }
    }
    let deleting = v["metadata"]["deletionTimestamp"].is_string();
    if deleting && s(&status["reason"]) == "NodeLost" {
        reason = "Unknown".into();
    } else if deleting && phase != "Failed" && phase != "Succeeded" {
        reason = "Terminating".into();
    }
    PodState { ready, total, reason, restarts, last_restart }
}

pub(super) fn pod(w: &mut Writer, v: &Value) {
    let p = pod_state(v);
    let (spec, status) = (&v["spec"], &v["status"]);
    match s(&status["phase"]) {
        "Succeeded" => w.conditions(POD_SUCCEEDED),
        "Failed" => w.conditions(POD_FAILED),
        _ => {}
    }
    w.str(s(&v["metadata"]["name"]));
    w.str(&format!("{}/{}", p.ready, p.total));
    w.str(&p.reason);
    match p.last_restart {
        Some(t) if p.restarts != 0 => w.since(&format!("{} (", p.restarts), Some(t), " ago)"),
        _ => w.str(&p.restarts.to_string()),
    }
    w.since("", created(v), "");
    w.str(or_none(arr(&status["podIPs"]).first().map_or("", |ip| s(&ip["ip"]))));
    w.str(or_none(s(&spec["nodeName"])));
    w.str(or_none(s(&status["nominatedNodeName"])));
    let gates = arr(&spec["readinessGates"]);
    if gates.is_empty() {
        w.str("<none>");
    } else {
        let conditions = arr(&status["conditions"]);
        let met = gates
            .iter()
            .filter(|g| conditions.iter().find(|c| c["type"] == g["conditionType"]).is_some_and(|c| c["status"] == "True"))
            .count();
        w.str(&format!("{met}/{}", gates.len()));
    }
}

fn name(v: &Value) -> &str {
    s(&v["metadata"]["name"])
}

fn int(v: &Value) -> i64 {
    v.as_i64().unwrap_or(0)
}

fn annotation<'a>(v: &'a Value, key: &str) -> Option<&'a str> {
    v["metadata"]["annotations"][key].as_str()
}

/// A label map as `labels.FormatLabels` writes it: `k=v` pairs sorted, comma-joined, or
/// `<none>`.
fn format_labels(m: &Value) -> String {
    let mut pairs: Vec<String> = m.as_object().into_iter().flatten().map(|(k, v)| format!("{k}={}", s(v))).collect();
    pairs.sort_unstable();
    if pairs.is_empty() {
        "<none>".into()
    } else {
        pairs.join(",")
    }
}

/// A `LabelSelector` as the selector it converts to prints (requirements sorted by key,
/// `in`/`notin` values sorted): empty for a missing selector (matches nothing) and for an
/// empty one (matches everything); `Err` for an operator that does not convert.
fn selector_string(sel: &Value) -> Result<String, ()> {
    let mut reqs: Vec<(&str, String)> = Vec::new();
    for (k, v) in sel["matchLabels"].as_object().into_iter().flatten() {
        reqs.push((k, format!("{k}={}", s(v))));
    }
    for e in arr(&sel["matchExpressions"]) {
        let key = s(&e["key"]);
        let mut values: Vec<&str> = arr(&e["values"]).iter().map(s).collect();
        values.sort_unstable();
        let values = values.join(",");
        let text = match s(&e["operator"]) {
            "In" => format!("{key} in ({values})"),
            "NotIn" => format!("{key} notin ({values})"),
            "Exists" => key.to_string(),
            "DoesNotExist" => format!("!{key}"),
            _ => return Err(()),
        };
        reqs.push((key, text));
    }
    // matchLabels come from a map; the sort by key (stable) orders them.
    reqs.sort_by(|a, b| a.0.cmp(b.0));
    Ok(reqs.into_iter().map(|(_, t)| t).collect::<Vec<_>>().join(","))
}

/// `metav1.FormatLabelSelector`: the selector, `<none>` when empty, `<error>` when invalid.
fn format_label_selector(sel: &Value) -> String {
    match selector_string(sel) {
        Err(()) => "<error>".into(),
        Ok(t) if t.is_empty() => "<none>".into(),
        Ok(t) => t,
    }
}

/// The names and the images of a pod template's containers, each comma-joined.
fn containers(template: &Value) -> (String, String) {
    let cs = arr(&template["spec"]["containers"]);
    let names: Vec<&str> = cs.iter().map(|c| s(&c["name"])).collect();
    let images: Vec<&str> = cs.iter().map(|c| s(&c["image"])).collect();
    (names.join(","), images.join(","))
}

fn containers_and_selector(w: &mut Writer, template: &Value, selector: &str) {
    let (names, images) = containers(template);
    w.str(&names);
    w.str(&images);
    w.str(selector);
}

/// At most three items comma-joined, then ` + N more...`.
fn three_and_more(list: &[String], total: usize) -> String {
    let shown = list.iter().take(3).cloned().collect::<Vec<_>>().join(",");
    if total > 3 {
        format!("{shown} + {} more...", total - 3)
    } else {
        shown
    }
}

/// Load-balancer ingress points (IP, else hostname), sorted and deduplicated. The
/// apiserver's printers print wide, so the list is never clipped.
fn load_balancer(status: &Value) -> Vec<String> {
    let mut out: Vec<String> = arr(&status["ingress"])
        .iter()
        .filter_map(|i| match (s(&i["ip"]), s(&i["hostname"])) {
            ("", "") => None,
            ("", h) => Some(h.to_string()),
            (ip, _) => Some(ip.to_string()),
        })
        .collect();
    out.sort_unstable();
    out.dedup();
    out
}

pub(super) fn service(w: &mut Writer, v: &Value) {
    let spec = &v["spec"];
    let external: Vec<&str> = arr(&spec["externalIPs"]).iter().map(s).collect();
    let kind = s(&spec["type"]);
    let external_ip = match kind {
        "ClusterIP" | "NodePort" if !external.is_empty() => external.join(","),
        "ClusterIP" | "NodePort" => "<none>".into(),
        "LoadBalancer" => {
            let mut all = load_balancer(&v["status"]["loadBalancer"]);
            all.extend(external.iter().map(|e| e.to_string()));
            if all.is_empty() {
                "<pending>".into()
            } else {
                all.join(",")
            }
        }
        "ExternalName" => s(&spec["externalName"]).to_string(),
        _ => "<unknown>".into(),
    };
    let ports: Vec<String> = arr(&spec["ports"])
        .iter()
        .map(|p| {
            let (port, proto) = (int(&p["port"]), s(&p["protocol"]));
            match int(&p["nodePort"]) {
                n if n > 0 => format!("{port}:{n}/{proto}"),
                _ => format!("{port}/{proto}"),
            }
        })
        .collect();
    w.str(name(v));
    w.str(kind);
    w.str(arr(&spec["clusterIPs"]).first().map_or("<none>", s));
    w.str(&external_ip);
    w.str(or_none(&ports.join(",")));
    w.since("", created(v), "");
    w.str(&format_labels(&spec["selector"]));
}

/// `host:port` as Go's `net.JoinHostPort` writes it (IPv6 in brackets).
fn host_port(ip: &str, port: i64) -> String {
    if ip.contains(':') {
        format!("[{ip}]:{port}")
    } else {
        format!("{ip}:{port}")
    }
}

pub(super) fn endpoints(w: &mut Writer, v: &Value) {
    let subsets = arr(&v["subsets"]);
    let text = if subsets.is_empty() {
        "<none>".to_string()
    } else {
        let (mut list, mut total) = (Vec::new(), 0usize);
        for ss in subsets {
            let addresses = arr(&ss["addresses"]);
            let ports = arr(&ss["ports"]);
            if ports.is_empty() {
                total += addresses.len();
                list.extend(addresses.iter().map(|a| s(&a["ip"]).to_string()));
            } else {
                for p in ports {
                    total += addresses.len();
                    list.extend(addresses.iter().map(|a| host_port(s(&a["ip"]), int(&p["port"]))));
                }
            }
        }
        three_and_more(&list, total)
    };
    w.str(name(v));
    w.str(&text);
    w.since("", created(v), "");
}

pub(super) fn endpoint_slice(w: &mut Writer, v: &Value) {
    let unset = |list: &[String], total: usize| match three_and_more(list, total) {
        t if t.is_empty() => "<unset>".to_string(),
        t => t,
    };
    let ports: Vec<String> = arr(&v["ports"])
        .iter()
        .map(|p| match (p["port"].as_i64(), p["name"].as_str()) {
            (Some(n), _) => n.to_string(),
            (None, Some(name)) => name.to_string(),
            (None, None) => "*".to_string(),
        })
        .collect();
    let addresses: Vec<String> = arr(&v["endpoints"]).iter().flat_map(|e| arr(&e["addresses"]).iter().map(|a| s(a).to_string())).collect();
    w.str(name(v));
    w.str(s(&v["addressType"]));
    w.str(&unset(&ports, ports.len()));
    w.str(&unset(&addresses, addresses.len()));
    w.since("", created(v), "");
}

/// The fields of a core/v1 Event the printer reads; events.k8s.io/v1 Events convert to
/// the same (`note` is the message, `regarding` the involved object, the `deprecated*`
/// fields the source, first and last timestamps and count, `reportingController` core's
/// `reportingComponent`).
pub(super) struct CoreEvent<'a> {
    v: &'a Value,
    involved: &'a Value,
    source: &'a Value,
    message: &'a str,
    first: &'a Value,
    last: &'a Value,
    count: &'a Value,
    controller: &'a str,
}

impl<'a> CoreEvent<'a> {
    pub(super) fn of(v: &'a Value) -> CoreEvent<'a> {
        CoreEvent {
            v,
            involved: &v["involvedObject"],
            source: &v["source"],
            message: s(&v["message"]),
            first: &v["firstTimestamp"],
            last: &v["lastTimestamp"],
            count: &v["count"],
            // core/v1 names the reporting controller `reportingComponent`.
            controller: s(&v["reportingComponent"]),
        }
    }

    pub(super) fn of_events_v1(v: &'a Value) -> CoreEvent<'a> {
        CoreEvent {
            v,
            involved: &v["regarding"],
            source: &v["deprecatedSource"],
            message: s(&v["note"]),
            first: &v["deprecatedFirstTimestamp"],
            last: &v["deprecatedLastTimestamp"],
            count: &v["deprecatedCount"],
            controller: s(&v["reportingController"]),
        }
    }
}

fn first_non_empty<'a>(a: &'a str, b: &'a str) -> &'a str {
    if a.is_empty() {
        b
    } else {
        a
    }
}

pub(super) fn event(w: &mut Writer, e: &CoreEvent<'_>) {
    let v = e.v;
    // First seen: firstTimestamp, else eventTime; last seen: lastTimestamp, else the first;
    // a series' last observation and count win.
    let first = time(e.first).or_else(|| time(&v["eventTime"]));
    let mut last = time(e.last).or(first);
    let mut count = int(e.count);
    if v["series"].is_object() {
        last = time(&v["series"]["lastObservedTime"]);
        count = int(&v["series"]["count"]);
    } else if count == 0 {
        count = 1;
    }
    let kind = s(&e.involved["kind"]).to_lowercase();
    let target = match s(&e.involved["name"]) {
        "" => kind,
        n => format!("{kind}/{n}"),
    };
    let component = first_non_empty(s(&e.source["component"]), e.controller);
    let instance = first_non_empty(s(&e.source["host"]), s(&v["reportingInstance"]));
    let source = if instance.is_empty() { component.to_string() } else { format!("{component}, {instance}") };
    w.since("", last, "");
    w.str(s(&v["type"]));
    w.str(s(&v["reason"]));
    w.str(&target);
    w.str(s(&e.involved["fieldPath"]));
    w.str(&source);
    w.str(e.message.trim());
    w.since("", first, "");
    w.int(count);
    w.str(name(v));
}

/// Access modes as `RWO,ROX,RWX,RWOP` (in that order, each once).
fn access_modes(modes: &Value) -> String {
    let modes = arr(modes);
    let has = |m: &str| modes.iter().any(|x| x == m);
    [("ReadWriteOnce", "RWO"), ("ReadOnlyMany", "ROX"), ("ReadWriteMany", "RWX"), ("ReadWriteOncePod", "RWOP")]
        .iter()
        .filter(|(m, _)| has(m))
        .map(|(_, short)| *short)
        .collect::<Vec<_>>()
        .join(",")
}

/// A quantity as the printers write it: the stored (canonical) form, `0` when missing.
fn quantity(q: &Value) -> &str {
    q.as_str().unwrap_or("0")
}

const BETA_STORAGE_CLASS: &str = "volume.beta.kubernetes.io/storage-class";

pub(super) fn persistent_volume_claim(w: &mut Writer, v: &Value) {
    let (spec, status) = (&v["spec"], &v["status"]);
    let phase = if v["metadata"]["deletionTimestamp"].is_string() { "Terminating" } else { s(&status["phase"]) };
    let volume = s(&spec["volumeName"]);
    let (capacity, modes) = if volume.is_empty() {
        (String::new(), String::new())
    } else {
        (quantity(&status["capacity"]["storage"]).to_string(), access_modes(&status["accessModes"]))
    };
    let class = annotation(v, BETA_STORAGE_CLASS).unwrap_or_else(|| s(&spec["storageClassName"]));
    w.str(name(v));
    w.str(phase);
    w.str(volume);
    w.str(&capacity);
    w.str(&modes);
    w.str(class);
    w.str(spec["volumeAttributesClassName"].as_str().unwrap_or("<unset>"));
    w.since("", created(v), "");
    w.str(spec["volumeMode"].as_str().unwrap_or("<unset>"));
}

pub(super) fn persistent_volume(w: &mut Writer, v: &Value) {
    let (spec, status) = (&v["spec"], &v["status"]);
    let claim = if spec["claimRef"].is_object() {
        format!("{}/{}", s(&spec["claimRef"]["namespace"]), s(&spec["claimRef"]["name"]))
    } else {
        String::new()
    };
    let phase = if v["metadata"]["deletionTimestamp"].is_string() { "Terminating" } else { s(&status["phase"]) };
    w.str(name(v));
    w.str(quantity(&spec["capacity"]["storage"]));
    w.str(&access_modes(&spec["accessModes"]));
    w.str(s(&spec["persistentVolumeReclaimPolicy"]));
    w.str(phase);
    w.str(&claim);
    w.str(annotation(v, BETA_STORAGE_CLASS).unwrap_or_else(|| s(&spec["storageClassName"])));
    w.str(spec["volumeAttributesClassName"].as_str().unwrap_or("<unset>"));
    w.str(s(&status["reason"]));
    w.since("", created(v), "");
    w.str(spec["volumeMode"].as_str().unwrap_or("<unset>"));
}

pub(super) fn replication_controller(w: &mut Writer, v: &Value) {
    replicas(w, v, &format_labels(&v["spec"]["selector"]));
}

/// A ReplicationController's or ReplicaSet's row (they differ in how the selector prints):
/// desired, current and ready replicas, age, then containers, images and the selector.
fn replicas(w: &mut Writer, v: &Value, selector: &str) {
    let (spec, status) = (&v["spec"], &v["status"]);
    w.str(name(v));
    w.int(int(&spec["replicas"]));
    w.int(int(&status["replicas"]));
    w.int(int(&status["readyReplicas"]));
    w.since("", created(v), "");
    containers_and_selector(w, &spec["template"], selector);
}

pub(super) fn deployment(w: &mut Writer, v: &Value) {
    let (spec, status) = (&v["spec"], &v["status"]);
    w.str(name(v));
    w.str(&format!("{}/{}", int(&status["readyReplicas"]), int(&spec["replicas"])));
    w.int(int(&status["updatedReplicas"]));
    w.int(int(&status["availableReplicas"]));
    w.since("", created(v), "");
    let selector = selector_string(&spec["selector"]).unwrap_or_else(|()| "<invalid>".into());
    containers_and_selector(w, &spec["template"], &selector);
}

pub(super) fn replica_set(w: &mut Writer, v: &Value) {
    replicas(w, v, &format_label_selector(&v["spec"]["selector"]));
}

pub(super) fn stateful_set(w: &mut Writer, v: &Value) {
    let (spec, status) = (&v["spec"], &v["status"]);
    w.str(name(v));
    w.str(&format!("{}/{}", int(&status["readyReplicas"]), int(&spec["replicas"])));
    w.since("", created(v), "");
    let (names, images) = containers(&spec["template"]);
    w.str(&names);
    w.str(&images);
}

pub(super) fn daemon_set(w: &mut Writer, v: &Value) {
    let (spec, status) = (&v["spec"], &v["status"]);
    w.str(name(v));
    for f in ["desiredNumberScheduled", "currentNumberScheduled", "numberReady", "updatedNumberScheduled", "numberAvailable"] {
        w.int(int(&status[f]));
    }
    w.str(&format_labels(&spec["template"]["spec"]["nodeSelector"]));
    w.since("", created(v), "");
    containers_and_selector(w, &spec["template"], &format_label_selector(&spec["selector"]));
}

pub(super) fn controller_revision(w: &mut Writer, v: &Value) {
    let controller = arr(&v["metadata"]["ownerReferences"]).iter().find(|r| r["controller"] == true).map_or_else(
        || "<none>".to_string(),
        |r| {
            // The group of `apiVersion` (none for the core group), then `kind.group`.
            let group = s(&r["apiVersion"]).rsplit_once('/').map_or("", |(g, _)| g);
            let kind = s(&r["kind"]);
            match (kind, group) {
                ("", "") => s(&r["name"]).to_string(),
                (k, "") => format!("{}/{}", k.to_lowercase(), s(&r["name"])),
                (k, g) => format!("{}/{}", format!("{k}.{g}").to_lowercase(), s(&r["name"])),
            }
        },
    );
    w.str(name(v));
    w.str(&controller);
    w.int(int(&v["revision"]));
    w.since("", created(v), "");
}

fn has_condition(status: &Value, kind: &str) -> bool {
    condition_true(status, kind)
}

pub(super) fn job(w: &mut Writer, v: &Value) {
    let (spec, status) = (&v["spec"], &v["status"]);
    let succeeded = int(&status["succeeded"]);
    let completions = match spec["completions"].as_i64() {
        Some(c) => format!("{succeeded}/{c}"),
        None => match int(&spec["parallelism"]) {
            p if p > 1 => format!("{succeeded}/1 of {p}"),
            _ => format!("{succeeded}/1"),
        },
    };
    let state = if has_condition(status, "Complete") {
        "Complete"
    } else if has_condition(status, "Failed") {
        "Failed"
    } else if v["metadata"]["deletionTimestamp"].is_string() {
        "Terminating"
    } else if has_condition(status, "Suspended") {
        "Suspended"
    } else if has_condition(status, "FailureTarget") {
        "FailureTarget"
    } else if has_condition(status, "SuccessCriteriaMet") {
        "SuccessCriteriaMet"
    } else {
        "Running"
    };
    w.str(name(v));
    w.str(state);
    w.str(&completions);
    // A running job's duration counts on (a relative time); a finished one's is fixed.
    match (time(&status["startTime"]), time(&status["completionTime"])) {
        (None, _) => w.str(""),
        (Some(start), None) => w.since("", Some(start), ""),
        (Some(start), Some(end)) => w.str(&super::human_duration((end - start) as f64 / 1e6)),
    }
    w.since("", created(v), "");
    containers_and_selector(w, &spec["template"], &format_label_selector(&spec["selector"]));
}

pub(super) fn cron_job(w: &mut Writer, v: &Value) {
    let (spec, status) = (&v["spec"], &v["status"]);
    w.str(name(v));
    w.str(s(&spec["schedule"]));
    w.str(spec["timeZone"].as_str().unwrap_or("<none>"));
    w.str(match spec["suspend"].as_bool() {
        Some(true) => "True",
        Some(false) => "False",
        None => "<unset>",
    });
    w.int(arr(&status["active"]).len() as i64);
    match &status["lastScheduleTime"] {
        t if t.is_string() => w.since("", time(t), ""),
        _ => w.str("<none>"),
    }
    w.since("", created(v), "");
    let job = &spec["jobTemplate"]["spec"];
    containers_and_selector(w, &job["template"], &format_label_selector(&job["selector"]));
}

pub(super) fn lease(w: &mut Writer, v: &Value) {
    w.str(name(v));
    w.str(s(&v["spec"]["holderIdentity"]));
    w.since("", created(v), "");
}

pub(super) fn ingress(w: &mut Writer, v: &Value) {
    let spec = &v["spec"];
    let rules = arr(&spec["rules"]);
    // Hosts of the first three rules that have one; `*` when none does.
    let mut hosts: Vec<String> = Vec::new();
    let mut more = false;
    for r in rules {
        if hosts.len() == 3 {
            more = true;
        }
        if !more && !s(&r["host"]).is_empty() {
            hosts.push(s(&r["host"]).to_string());
        }
    }
    let hosts = match (hosts.is_empty(), more) {
        (true, _) => "*".to_string(),
        (false, true) => format!("{} + {} more...", hosts.join(","), rules.len() - 3),
        (false, false) => hosts.join(","),
    };
    w.str(name(v));
    w.str(spec["ingressClassName"].as_str().unwrap_or("<none>"));
    w.str(&hosts);
    w.str(&load_balancer(&v["status"]["loadBalancer"]).join(","));
    w.str(if arr(&spec["tls"]).is_empty() { "80" } else { "80, 443" });
    w.since("", created(v), "");
}

pub(super) fn ingress_class(w: &mut Writer, v: &Value) {
    let mut n = name(v).to_string();
    if annotation(v, "ingressclass.kubernetes.io/is-default-class") == Some("true") {
        n.push_str(" (default)");
    }
    let p = &v["spec"]["parameters"];
    let parameters = if p.is_object() {
        match p["apiGroup"].as_str() {
            Some(g) => format!("{}.{g}/{}", s(&p["kind"]), s(&p["name"])),
            None => format!("{}/{}", s(&p["kind"]), s(&p["name"])),
        }
    } else {
        "<none>".to_string()
    };
    w.str(&n);
    w.str(s(&v["spec"]["controller"]));
    w.str(&parameters);
    w.since("", created(v), "");
}

pub(super) fn network_policy(w: &mut Writer, v: &Value) {
    // The pod selector is a value, never missing: an absent one is the empty selector.
    let sel = &v["spec"]["podSelector"];
    let text = if sel.is_object() { format_label_selector(sel) } else { "<none>".to_string() };
    w.str(name(v));
    w.str(&text);
    w.since("", created(v), "");
}

pub(super) fn storage_class(w: &mut Writer, v: &Value) {
    let mut n = name(v).to_string();
    if annotation(v, "storageclass.kubernetes.io/is-default-class") == Some("true")
        || annotation(v, "storageclass.beta.kubernetes.io/is-default-class") == Some("true")
    {
        n.push_str(" (default)");
    }
    w.str(&n);
    w.str(s(&v["provisioner"]));
    w.str(v["reclaimPolicy"].as_str().unwrap_or("Delete"));
    w.str(v["volumeBindingMode"].as_str().unwrap_or("Immediate"));
    w.bool(v["allowVolumeExpansion"].as_bool().unwrap_or(false));
    w.since("", created(v), "");
}

pub(super) fn priority_class(w: &mut Writer, v: &Value) {
    w.str(name(v));
    w.int(int(&v["value"]));
    w.bool(v["globalDefault"].as_bool().unwrap_or(false));
    w.since("", created(v), "");
    w.str(s(&v["preemptionPolicy"]));
}

pub(super) fn role_binding(w: &mut Writer, v: &Value) {
    let (mut users, mut groups, mut sas) = (Vec::new(), Vec::new(), Vec::new());
    for sub in arr(&v["subjects"]) {
        match s(&sub["kind"]) {
            "ServiceAccount" => sas.push(format!("{}/{}", s(&sub["namespace"]), s(&sub["name"]))),
            "User" => users.push(s(&sub["name"]).to_string()),
            "Group" => groups.push(s(&sub["name"]).to_string()),
            _ => {}
        }
    }
    w.str(name(v));
    w.str(&format!("{}/{}", s(&v["roleRef"]["kind"]), s(&v["roleRef"]["name"])));
    w.since("", created(v), "");
    w.str(&users.join(", "));
    w.str(&groups.join(", "));
    w.str(&sas.join(", "));
}

/// An IntOrString as it prints: the number, or the string.
fn int_or_string(v: &Value) -> String {
    match v {
        Value::Number(n) => n.to_string(),
        other => s(other).to_string(),
    }
}

pub(super) fn pod_disruption_budget(w: &mut Writer, v: &Value) {
    let spec = &v["spec"];
    let or_na = |f: &Value| if f.is_null() { "N/A".to_string() } else { int_or_string(f) };
    w.str(name(v));
    w.str(&or_na(&spec["minAvailable"]));
    w.str(&or_na(&spec["maxUnavailable"]));
    w.int(int(&v["status"]["disruptionsAllowed"]));
    w.since("", created(v), "");
}

/// The default table's row: the name and the creation time in RFC 3339 (UTC, seconds; Go's
/// zero time when unset).
pub(super) fn default(w: &mut Writer, v: &Value) {
    let secs = time(&v["metadata"]["creationTimestamp"]).map_or(crate::api::time::GO_ZERO_TIME_UNIX, |t| t.div_euclid(1_000_000));
    w.str(name(v));
    w.str(&crate::api::time::rfc3339(secs));
}
