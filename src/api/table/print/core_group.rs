//! The core group's kinds (namespaces, config maps, secrets, service accounts, nodes,
//! services, endpoints, events, volumes and claims) and the default row.

use super::*;

pub(crate) fn namespace(w: &mut Writer, v: &Value) {
    w.str(s(&v["metadata"]["name"]));
    w.str(s(&v["status"]["phase"]));
    w.since("", created(v), "");
}

pub(crate) fn config_map(w: &mut Writer, v: &Value) {
    w.str(s(&v["metadata"]["name"]));
    w.int(count(&v["data"]) + count(&v["binaryData"]));
    w.since("", created(v), "");
}

pub(crate) fn secret(w: &mut Writer, v: &Value) {
    w.str(s(&v["metadata"]["name"]));
    w.str(s(&v["type"]));
    w.int(count(&v["data"]));
    w.since("", created(v), "");
}

pub(crate) fn service_account(w: &mut Writer, v: &Value) {
    w.str(s(&v["metadata"]["name"]));
    w.since("", created(v), "");
}

pub(crate) fn node(w: &mut Writer, v: &Value) {
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

pub(crate) fn service(w: &mut Writer, v: &Value) {
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

pub(crate) fn endpoints(w: &mut Writer, v: &Value) {
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

/// The fields of a core/v1 Event the printer reads; events.k8s.io/v1 Events convert to
/// the same (`note` is the message, `regarding` the involved object, the `deprecated*`
/// fields the source, first and last timestamps and count, `reportingController` core's
/// `reportingComponent`).
pub(crate) struct CoreEvent<'a> {
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
    pub(crate) fn of(v: &'a Value) -> CoreEvent<'a> {
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

    pub(crate) fn of_events_v1(v: &'a Value) -> CoreEvent<'a> {
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

pub(crate) fn event(w: &mut Writer, e: &CoreEvent<'_>) {
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

pub(crate) fn persistent_volume_claim(w: &mut Writer, v: &Value) {
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

pub(crate) fn persistent_volume(w: &mut Writer, v: &Value) {
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

/// The default table's row: the name and the creation time in RFC 3339 (UTC, seconds; Go's
/// zero time when unset).
pub(crate) fn default(w: &mut Writer, v: &Value) {
    let secs = time(&v["metadata"]["creationTimestamp"]).map_or(crate::api::time::GO_ZERO_TIME_UNIX, |t| t.div_euclid(1_000_000));
    w.str(name(v));
    w.str(&crate::api::time::rfc3339(secs));
}
