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
