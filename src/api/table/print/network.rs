//! Networking: endpoint slices, ingresses, ingress classes, network policies.

use super::*;

pub(crate) fn endpoint_slice(w: &mut Writer, v: &Value) {
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

pub(crate) fn ingress(w: &mut Writer, v: &Value) {
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

pub(crate) fn ingress_class(w: &mut Writer, v: &Value) {
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

pub(crate) fn network_policy(w: &mut Writer, v: &Value) {
    // The pod selector is a value, never missing: an absent one is the empty selector.
    let sel = &v["spec"]["podSelector"];
    let text = if sel.is_object() { format_label_selector(sel) } else { "<none>".to_string() };
    w.str(name(v));
    w.str(&text);
    w.since("", created(v), "");
}
