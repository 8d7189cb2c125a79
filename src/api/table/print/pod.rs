//! Pods: Ready, Status and Restarts as `printPod` works them out from the containers' states.

use super::*;

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
    let total = arr(&spec["containers"]).len() + init_specs.iter().filter(|c| c["restartPolicy"] == "Always").count();
    let mut p = PodState { ready: 0, total, reason, restarts: 0, last_restart: None };
    let (initializing, sidecars) = p.init_containers(init_specs, status);
    if !initializing || condition_true(status, "Initialized") {
        (p.restarts, p.last_restart) = sidecars;
        p.containers(status);
    }
    let deleting = v["metadata"]["deletionTimestamp"].is_string();
    if deleting && s(&status["reason"]) == "NodeLost" {
        p.reason = "Unknown".into();
    } else if deleting && phase != "Failed" && phase != "Succeeded" {
        p.reason = "Terminating".into();
    }
    p
}

impl PodState {
    /// The init containers' statuses in order: every one's restarts count, a started
    /// restartable (sidecar) one's readiness too, and the first that has not completed gives
    /// the reason (`Init:...`). Whether the pod is still initializing, and the restarts (count
    /// and last) of its sidecars alone.
    fn init_containers(&mut self, specs: &[Value], status: &Value) -> (bool, (i64, Option<i64>)) {
        let restartable = |name: &Value| specs.iter().any(|c| c["name"] == *name && c["restartPolicy"] == "Always");
        let mut sidecars = (0i64, None);
        for (i, c) in arr(&status["initContainerStatuses"]).iter().enumerate() {
            let count = c["restartCount"].as_i64().unwrap_or(0);
            let finished = time(&c["lastState"]["terminated"]["finishedAt"]);
            self.restarts += count;
            self.last_restart = later(self.last_restart, finished);
            let sidecar = restartable(&c["name"]);
            if sidecar {
                sidecars = (sidecars.0 + count, later(sidecars.1, finished));
            }
            let terminated = &c["state"]["terminated"];
            let waiting = s(&c["state"]["waiting"]["reason"]);
            if terminated.is_object() && terminated["exitCode"].as_i64().unwrap_or(0) == 0 {
                continue;
            }
            if sidecar && c["started"] == true {
                if c["ready"] == true {
                    self.ready += 1;
                }
                continue;
            }
            self.reason = if terminated.is_object() {
                terminated_reason(terminated, "Init:")
            } else if !waiting.is_empty() && waiting != "PodInitializing" {
                format!("Init:{waiting}")
            } else {
                format!("Init:{i}/{}", specs.len())
            };
            return (true, sidecars);
        }
        (false, sidecars)
    }

    /// The app containers' statuses, last first as `printPod` reads them: restarts, ready
    /// and running ones, and the reason of a waiting or terminated one; a `Completed` pod
    /// with a container still running reads `Running` (ready) or `NotReady`, one with a
    /// failed container that container's reason.
    fn containers(&mut self, status: &Value) {
        let (mut running, mut error_reason) = (false, String::new());
        for c in arr(&status["containerStatuses"]).iter().rev() {
            self.restarts += c["restartCount"].as_i64().unwrap_or(0);
            self.last_restart = later(self.last_restart, time(&c["lastState"]["terminated"]["finishedAt"]));
            let state = &c["state"];
            if !s(&state["waiting"]["reason"]).is_empty() {
                self.reason = s(&state["waiting"]["reason"]).to_string();
            } else if state["terminated"].is_object() {
                self.reason = terminated_reason(&state["terminated"], "");
                if state["terminated"]["exitCode"].as_i64().unwrap_or(0) != 0 {
                    error_reason = self.reason.clone();
                }
            } else if c["ready"] == true && state["running"].is_object() {
                running = true;
                self.ready += 1;
            }
        }
        if self.reason == "Completed" {
            if running && condition_true(status, "Ready") {
                self.reason = "Running".into();
            } else if !error_reason.is_empty() {
                self.reason = error_reason;
            } else if running {
                self.reason = "NotReady".into();
            }
        }
    }
}

pub(crate) fn pod(w: &mut Writer, v: &Value) {
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
