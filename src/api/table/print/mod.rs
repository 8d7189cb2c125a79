//! The cells of each printed kind, computed from an object's JSON as the apiserver's
//! printers compute them from the object (`pkg/printers/internalversion`, v1.36).

use super::{human_duration, time, Writer};
use serde_json::Value;

mod cluster;
mod core_group;
mod network;
mod pod;
mod workloads;

pub(super) use cluster::{lease, priority_class, role_binding, storage_class};
pub(super) use core_group::{
    config_map, default, endpoints, event, namespace, node, persistent_volume, persistent_volume_claim, secret, service, service_account,
    CoreEvent,
};
pub(super) use network::{endpoint_slice, ingress, ingress_class, network_policy};
pub(super) use pod::pod;
pub(super) use workloads::{
    controller_revision, cron_job, daemon_set, deployment, job, pod_disruption_budget, replica_set, replication_controller, stateful_set,
};

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

fn condition_true(status: &Value, kind: &str) -> bool {
    arr(&status["conditions"]).iter().any(|c| c["type"] == kind && c["status"] == "True")
}
