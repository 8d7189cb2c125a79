//! Workloads: replication controllers, deployments, replica and stateful sets, daemon sets,
//! controller revisions, jobs, cron jobs, and pod disruption budgets.

use super::*;

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

pub(crate) fn replication_controller(w: &mut Writer, v: &Value) {
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

pub(crate) fn deployment(w: &mut Writer, v: &Value) {
    let (spec, status) = (&v["spec"], &v["status"]);
    w.str(name(v));
    w.str(&format!("{}/{}", int(&status["readyReplicas"]), int(&spec["replicas"])));
    w.int(int(&status["updatedReplicas"]));
    w.int(int(&status["availableReplicas"]));
    w.since("", created(v), "");
    let selector = selector_string(&spec["selector"]).unwrap_or_else(|()| "<invalid>".into());
    containers_and_selector(w, &spec["template"], &selector);
}

pub(crate) fn replica_set(w: &mut Writer, v: &Value) {
    replicas(w, v, &format_label_selector(&v["spec"]["selector"]));
}

pub(crate) fn stateful_set(w: &mut Writer, v: &Value) {
    let (spec, status) = (&v["spec"], &v["status"]);
    w.str(name(v));
    w.str(&format!("{}/{}", int(&status["readyReplicas"]), int(&spec["replicas"])));
    w.since("", created(v), "");
    let (names, images) = containers(&spec["template"]);
    w.str(&names);
    w.str(&images);
}

pub(crate) fn daemon_set(w: &mut Writer, v: &Value) {
    let (spec, status) = (&v["spec"], &v["status"]);
    w.str(name(v));
    for f in ["desiredNumberScheduled", "currentNumberScheduled", "numberReady", "updatedNumberScheduled", "numberAvailable"] {
        w.int(int(&status[f]));
    }
    w.str(&format_labels(&spec["template"]["spec"]["nodeSelector"]));
    w.since("", created(v), "");
    containers_and_selector(w, &spec["template"], &format_label_selector(&spec["selector"]));
}

pub(crate) fn controller_revision(w: &mut Writer, v: &Value) {
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

pub(crate) fn job(w: &mut Writer, v: &Value) {
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
        (Some(start), Some(end)) => w.str(&human_duration((end - start) as f64 / 1e6)),
    }
    w.since("", created(v), "");
    containers_and_selector(w, &spec["template"], &format_label_selector(&spec["selector"]));
}

pub(crate) fn cron_job(w: &mut Writer, v: &Value) {
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

/// An IntOrString as it prints: the number, or the string.
fn int_or_string(v: &Value) -> String {
    match v {
        Value::Number(n) => n.to_string(),
        other => s(other).to_string(),
    }
}

pub(crate) fn pod_disruption_budget(w: &mut Writer, v: &Value) {
    let spec = &v["spec"];
    let or_na = |f: &Value| if f.is_null() { "N/A".to_string() } else { int_or_string(f) };
    w.str(name(v));
    w.str(&or_na(&spec["minAvailable"]));
    w.str(&or_na(&spec["maxUnavailable"]));
    w.int(int(&v["status"]["disruptionsAllowed"]));
    w.since("", created(v), "");
}
