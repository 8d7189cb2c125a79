//! The pieces of synthetic objects: node status, a pod's metadata, spec and status, padding,
//! and the small mutations churn applies to a pod.

use super::*;

pub(super) fn node_status(n: u64, rng: &mut Prng, (cores, mem_ki): (u64, u64), name: &str) -> Value {
    // The last heartbeat a day before the catalogue's end (kubelets beat every 40 s or so).
    let (heartbeat, since) = (ts(CATALOGUE_SPAN - DAY + rng.below(40)), ts(node_created(n) + 20));
    let cond = |t: &str, s: &str, reason: &str, msg: &str| {
        obj! {
            "type": t, "status": s, "lastHeartbeatTime": heartbeat.as_str(),
            "lastTransitionTime": since.as_str(), "reason": reason, "message": msg,
        }
    };
    let image = |rng: &mut Prng, img: &str, tag: &str, size: u64| {
        let names = vec![format!("{REGISTRY}/{img}@sha256:{}", rng.hex(64)), format!("{REGISTRY}/{img}:{tag}")];
        obj! { "names": names, "sizeBytes": size }
    };
    let quantities = |cpu: String, storage: &str, mem: u64| {
        obj! {
            "cpu": cpu, "ephemeral-storage": storage, "hugepages-1Gi": "0", "hugepages-2Mi": "0",
            "memory": format!("{mem}Ki"), "pods": "110",
        }
    };
    let sufficient = |what: &str| format!("kubelet has sufficient {what} available");
    let no_disk_pressure = "kubelet has no disk pressure";
    let allocatable_cpu = format!("{}m", cores * 1000 - 90);
    let node_info = obj! {
        "machineID": rng.hex(32), "systemUUID": rng.uid(), "bootID": rng.uid(),
        "kernelVersion": "6.1.132-147.221.amzn2023.x86_64",
        "osImage": "Amazon Linux 2023.7.20250414",
        "containerRuntimeVersion": "containerd://1.7.27", "kubeletVersion": K8S_VERSION,
        "kubeProxyVersion": K8S_VERSION, "operatingSystem": "linux", "architecture": "amd64",
    };
    obj! {
        "capacity": quantities(cores.to_string(), "104845292Ki", mem_ki),
        "allocatable": quantities(allocatable_cpu, "95551679124", mem_ki - 563_200),
        "conditions": vec![
            cond("MemoryPressure", "False", "KubeletHasSufficientMemory", &sufficient("memory")),
            cond("DiskPressure", "False", "KubeletHasNoDiskPressure", no_disk_pressure),
            cond("PIDPressure", "False", "KubeletHasSufficientPID", &sufficient("PID")),
            cond("Ready", "True", "KubeletReady", "kubelet is posting ready status"),
        ],
        "addresses": vec![
            obj! { "type": "InternalIP", "address": node_ip(n) },
            obj! { "type": "Hostname", "address": name },
        ],
        "daemonEndpoints": json!({ "kubeletEndpoint": { "Port": 10250 } }),
        "nodeInfo": node_info,
        "images": vec![
            image(rng, "platform/log-agent", "v0.9.1", 48_211_337),
            image(rng, "kube-proxy", K8S_VERSION, 30_385_622),
            image(rng, "pause", "3.10", 320_368),
        ],
    }
}

pub(super) fn pod_meta(w: &Workload, ctx: &PodCtx, rng: &mut Prng) -> Value {
    let mut labels = w.template_labels();
    labels.insert("pod-template-hash".into(), Value::from(w.hash.as_str()));
    labels.insert("topology.kubernetes.io/region".into(), Value::from(REGION));
    labels.insert("topology.kubernetes.io/zone".into(), Value::from(node_zone(ctx.node)));
    labels.sort_keys();
    let annotations = obj! {
        "example.com/build-id": rng.hex(12), "prometheus.io/port": w.port.to_string(),
        "prometheus.io/scrape": "true",
    };
    let owner = obj! {
        "apiVersion": "apps/v1", "kind": "ReplicaSet", "name": w.rs_name(),
        "uid": w.rs_uid.as_str(),
        "controller": true, "blockOwnerDeletion": true,
    };
    let mut m = meta(&ctx.name, &w.namespace, rng.uid(), rfc3339(ctx.created), Some(labels.into()));
    m["annotations"] = annotations;
    m["ownerReferences"] = Value::from(vec![owner]);
    m
}

pub(super) fn field_ref(path: &str) -> Value {
    obj! { "apiVersion": "v1", "fieldPath": path }
}

pub(super) fn volume_mounts(token: Option<&str>, config: bool) -> Vec<Value> {
    let mount = |name: &str, path: &str| obj! { "name": name, "readOnly": true, "mountPath": path };
    let mut mounts = Vec::with_capacity(2);
    if config {
        mounts.push(mount("config", "/etc/app"));
    }
    mounts.extend(token.map(|t| mount(t, SA_MOUNT)));
    mounts
}

pub(super) fn resources((cpu_req, cpu_lim): (&str, &str), (mem_req, mem_lim): (&str, &str)) -> Value {
    obj! {
        "limits": obj! { "cpu": cpu_lim, "memory": mem_lim },
        "requests": obj! { "cpu": cpu_req, "memory": mem_req },
    }
}

pub(super) fn container(w: &Workload, token: Option<&str>) -> Value {
    let var = |name: &str, value: &str| obj! { "name": name, "value": value };
    let mut env = vec![
        var("ENV", w.env),
        var("LOG_LEVEL", "info"),
        var("PORT", &w.port.to_string()),
        var("SERVICE_NAME", w.service),
        json!({ "name": "POD_IP", "valueFrom": { "fieldRef": field_ref("status.podIP") } }),
    ];
    if w.index % 2 == 1 {
        env.push(var("GOMAXPROCS", "2"));
    }
    let probe = |port: Value, path: &str, delay: u64| {
        obj! {
            "httpGet": obj! { "path": path, "port": port, "scheme": "HTTP" },
            "initialDelaySeconds": delay, "timeoutSeconds": 1, "periodSeconds": 10,
            "successThreshold": 1, "failureThreshold": 3,
        }
    };
    obj! {
        "name": "app", "image": w.image(),
        "ports": vec![obj! { "name": "http", "containerPort": w.port, "protocol": "TCP" }],
        "env": env,
        "resources": resources(w.cpu, w.mem),
        "volumeMounts": volume_mounts(token, true),
        "livenessProbe": probe(json!("http"), "/healthz", 10),
        "readinessProbe": probe(json!(w.port), "/readyz", 5),
        "terminationMessagePath": "/dev/termination-log", "terminationMessagePolicy": "File",
        "imagePullPolicy": "IfNotPresent",
    }
}

pub(super) fn sidecar(token: Option<&str>) -> Value {
    let mut c = obj! {
        "name": "log-shipper", "image": SIDECAR_IMAGE,
        "resources": resources(("50m", "200m"), ("64Mi", "128Mi")),
        "volumeMounts": volume_mounts(token, false),
        "terminationMessagePath": "/dev/termination-log", "terminationMessagePolicy": "File",
        "imagePullPolicy": "IfNotPresent",
    };
    if let (None, Some(m)) = (token, c.as_object_mut()) {
        m.shift_remove("volumeMounts");
    }
    c
}

/// A pod spec; with `ctx == None` the Deployment template form (no admission/scheduler fields).
pub(super) fn pod_spec(w: &Workload, ctx: Option<&PodCtx>) -> Value {
    let token = ctx.map(|c| c.token_volume.as_str());
    let config_map = obj! { "name": format!("{}-config", w.name), "defaultMode": 420 };
    let config = obj! { "name": "config", "configMap": config_map };
    let mut volumes = vec![config];
    if let Some(t) = token {
        volumes.push(obj! { "name": t, "projected": json!({ "sources": [
            { "serviceAccountToken": { "expirationSeconds": 3607, "path": "token" } },
            { "configMap": {
                "name": "kube-root-ca.crt", "items": [{ "key": "ca.crt", "path": "ca.crt" }],
            } },
            { "downwardAPI": {
                "items": [{ "path": "namespace", "fieldRef": field_ref("metadata.namespace") }],
            } },
        ], "defaultMode": 420 }) });
    }
    let toleration = |key: &str| {
        let key = format!("node.kubernetes.io/{key}");
        obj! { "key": key, "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 300 }
    };
    let mut spec = obj! {
        "volumes": volumes,
        "containers": vec![container(w, token), sidecar(token)],
        "restartPolicy": "Always", "terminationGracePeriodSeconds": 30, "dnsPolicy": "ClusterFirst",
        "serviceAccountName": w.service, "serviceAccount": w.service,
        "nodeName": ctx.map(|c| node_name(c.node)),
        "securityContext": obj! {}, "schedulerName": "default-scheduler",
        "tolerations": vec![toleration("not-ready"), toleration("unreachable")],
        "priority": 0, "enableServiceLinks": true, "preemptionPolicy": "PreemptLowerPriority",
    };
    if let (None, Some(m)) = (ctx, spec.as_object_mut()) {
        for key in ["nodeName", "tolerations", "priority", "enableServiceLinks", "preemptionPolicy"] {
            m.shift_remove(key);
        }
    }
    spec
}

pub(super) fn pod_status(w: &Workload, ctx: &PodCtx, rng: &mut Prng) -> Value {
    // Step `k` of the pod's start, `k` seconds after its creation (or at it, for a new pod).
    let t = |k: i64| rfc3339(ctx.created + k * ctx.pace);
    let cond = |ty: &str, at: String| obj! { "type": ty, "status": "True", "lastTransitionTime": at };
    let status = |name: &str, image: String, started: String, rng: &mut Prng| {
        obj! {
            "name": name, "state": obj! { "running": obj! { "startedAt": started } },
            "ready": true, "restartCount": 0, "image": image,
            "imageID": format!("sha256:{}", rng.hex(64)),
            "containerID": format!("containerd://{}", rng.hex(64)), "started": true,
        }
    };
    let conditions = vec![
        cond("PodReadyToStartContainers", t(3)),
        cond("Initialized", t(1)),
        cond("Ready", t(8)),
        cond("ContainersReady", t(8)),
        cond("PodScheduled", t(0)),
    ];
    obj! {
        "phase": "Running", "conditions": conditions,
        "hostIP": ctx.host_ip.as_str(), "hostIPs": vec![obj! { "ip": ctx.host_ip.as_str() }],
        "podIP": ctx.ip.as_str(), "podIPs": vec![obj! { "ip": ctx.ip.as_str() }],
        "startTime": t(1),
        "containerStatuses": vec![
            status("app", w.image(), t(4), rng),
            status("log-shipper", SIDECAR_IMAGE.to_owned(), t(5), rng),
        ],
        "qosClass": "Burstable",
    }
}

/// Grow the pod to `target` bytes of compact JSON with a padding annotation.
pub(super) fn pad_to(pod: &mut Value, target: usize, rng: &mut Prng) {
    let size = serde_json::to_vec(pod).map_or(usize::MAX, |b| b.len());
    let overhead = PAD_KEY.len() + 6; // `,"<key>":""`
    let Some(len) = target.checked_sub(size.saturating_add(overhead)).filter(|&l| l > 0) else {
        return;
    };
    let fill: String = (0..len).map(|i| if i % 64 == 63 { '-' } else { char::from(rng.pick(NAME_ALPHABET)) }).collect();
    if let Some(ann) = annotations_mut(pod) {
        ann.insert(PAD_KEY.into(), Value::String(fill));
        ann.sort_keys();
    }
}

pub(super) fn annotations_mut(pod: &mut Value) -> Option<&mut Map<String, Value>> {
    let meta = pod.get_mut("metadata")?.as_object_mut()?;
    meta.entry("annotations").or_insert_with(|| json!({})).as_object_mut()
}

/// Toggle Ready/ContainersReady and the app container's `ready`.
pub(super) fn flip_readiness(pod: &mut Value, when: &str) -> bool {
    let Some(conds) = pod.pointer_mut("/status/conditions").and_then(Value::as_array_mut) else {
        return false;
    };
    let mut now_ready = None;
    for c in conds.iter_mut().filter_map(Value::as_object_mut) {
        if !matches!(c.get("type").and_then(Value::as_str), Some("Ready" | "ContainersReady")) {
            continue;
        }
        let ready = c.get("status").and_then(Value::as_str) != Some("True");
        c.insert("status".into(), json!(if ready { "True" } else { "False" }));
        c.insert("lastTransitionTime".into(), json!(when));
        if ready {
            c.shift_remove("reason");
            c.shift_remove("message");
        } else {
            c.insert("reason".into(), json!("ContainersNotReady"));
            c.insert("message".into(), json!("containers with unready status: [app]"));
        }
        now_ready = Some(ready);
    }
    let Some(ready) = now_ready else { return false };
    if let Some(cs) = pod.pointer_mut("/status/containerStatuses/0") {
        cs["ready"] = json!(ready);
    }
    true
}

/// Record a container restart: bump restartCount, move the previous run to lastState.
pub(super) fn restart_container(pod: &mut Value, when: &str, rng: &mut Prng) -> bool {
    let ptr = format!("/status/containerStatuses/{}", rng.below(2));
    let Some(cs) = pod.pointer_mut(&ptr).and_then(Value::as_object_mut) else {
        return false;
    };
    let count = cs.get("restartCount").and_then(Value::as_u64).unwrap_or(0);
    let old_id = cs.get("containerID").cloned().unwrap_or(Value::Null);
    let old_start = cs.get("state").and_then(|s| s.pointer("/running/startedAt")).cloned().unwrap_or_else(|| json!(when));
    let (code, reason) = if rng.below(2) == 0 { (137, "OOMKilled") } else { (1, "Error") };
    let last = json!({ "terminated": {
        "exitCode": code, "reason": reason, "startedAt": old_start, "finishedAt": when,
        "containerID": old_id,
    } });
    cs.insert("state".into(), json!({ "running": { "startedAt": when } }));
    let at = cs.keys().position(|k| k == "state").map_or(cs.len(), |i| i + 1);
    cs.shift_insert(at, "lastState".into(), last);
    cs.insert("restartCount".into(), json!(count + 1));
    cs.insert("containerID".into(), json!(format!("containerd://{}", rng.hex(64))));
    true
}

/// Add `kache.dev/canary=true` if absent, remove it if present.
pub(super) fn toggle_canary(pod: &mut Value) -> bool {
    let Some(labels) = pod.pointer_mut("/metadata/labels").and_then(Value::as_object_mut) else {
        return false;
    };
    if labels.shift_remove(CANARY_KEY).is_none() {
        labels.insert(CANARY_KEY.into(), json!("true"));
        labels.sort_keys();
    }
    true
}

/// Increment the numeric `example.com/heartbeat` annotation.
pub(super) fn bump_heartbeat(pod: &mut Value) {
    if let Some(ann) = annotations_mut(pod) {
        let n = ann.get(HEARTBEAT_KEY).and_then(Value::as_str).and_then(|s| s.parse::<u64>().ok()).unwrap_or(0);
        ann.insert(HEARTBEAT_KEY.into(), Value::String((n + 1).to_string()));
        ann.sort_keys();
    }
}
