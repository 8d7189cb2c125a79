//! Deterministic synthetic Kubernetes cluster for the simulator and load tests.
//!
//! [`Synth`] turns a [`ClusterSpec`] (counts plus a `u64` seed) into realistic
//! Namespaces, Nodes, Deployments, Pods, Services, ConfigMaps, Secrets and
//! Events as `serde_json::Value`s whose keys follow the order the real
//! apiserver writes them (struct fields in Go declaration order, map-typed
//! fields such as labels sorted). Objects carry no `resourceVersion`; the store
//! assigns it.
//!
//! Output depends only on the spec: randomness comes from a splitmix64
//! generator defined here (not `rand`), so bytes are identical across runs,
//! platforms and dependency upgrades.
//!
//! Layout (so tests can compute expectations):
//! * namespaces: `default`, `kube-system`, then `ns-0000`, … (`N = max(1, namespaces)`);
//! * `D = max(1, ceil(pods / 5))` deployments; deployment `d` lives in namespace `d % N`;
//! * pod `i` belongs to deployment `i % D` and runs on node `node-{i % nodes:04}`
//!   (`nodes` is clamped to at least 1); indices `>= spec.pods` are churn-created pods;
//! * per deployment one Service, one `<deployment>-config` ConfigMap and one
//!   `<deployment>-credentials` Secret; a `kube-root-ca.crt` ConfigMap per namespace;
//!   four Events about pod `k` for each namespace `k < min(N, D)`.
//!
//! Pods are about 4.5 KB of compact JSON (two containers with probes, projected token,
//! five conditions, two container statuses) unless [`ClusterSpec::pod_bytes`] pads them.

use crate::api::time::rfc3339;
use base64::Engine as _;
use serde_json::{json, Map, Value};

/// Build a JSON `Map`, moving each value in with `Value::from`, keys in the
/// order written. (`json!` deep-copies embedded `Value`s through serde, which
/// made nested construction several times slower.)
macro_rules! map {
    ($($k:literal: $v:expr),* $(,)?) => {{
        #[allow(unused_mut)]
        let mut m = Map::with_capacity(<[&str]>::len(&[$($k),*]));
        $(m.insert($k.to_owned(), Value::from($v));)*
        m
    }};
}

/// [`map!`] wrapped in `Value::Object`.
macro_rules! obj {
    ($($t:tt)*) => { Value::Object(map!($($t)*)) };
}

/// Shape of the generated cluster.
#[derive(Debug, Clone)]
pub struct ClusterSpec {
    /// Number of nodes (`node-0000`, …); treated as at least 1.
    pub nodes: usize,
    /// Number of pods present at start.
    pub pods: usize,
    /// Total namespaces including `default` and `kube-system`; treated as at least 1.
    pub namespaces: usize,
    /// Seed for every generated value.
    pub seed: u64,
    /// pad each pod's JSON to about this many bytes (annotation padding), if set
    ///
    /// Padding goes into annotation `kache.dev/padding`; pods already larger
    /// than the target are left as they are.
    pub pod_bytes: Option<usize>,
}

/// A churn operation the simulator applies.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ChurnOp {
    /// Mutate an existing pod (see [`Synth::mutate_pod`]).
    Update,
    /// Create a new pod (use [`Synth::pod`] with a fresh index `>= spec.pods`).
    Create,
    /// Delete an existing pod.
    Delete,
}

/// Pick the next churn operation deterministically: mostly updates (~80%), creates and
/// deletes balanced so the pod count stays near its start.
///
/// Steps come in blocks of ten holding exactly one `Create` and one `Delete`
/// at seeded positions: the mix is exactly 80/10/10 per block and the pod
/// count never drifts more than one from its start.
pub fn churn_op(seed: u64, step: u64) -> ChurnOp {
    let mut rng = Prng::new(seed, Stream::Churn, step / 10);
    let create = rng.below(10);
    let delete = (create + 1 + rng.below(9)) % 10;
    match step % 10 {
        s if s == create => ChurnOp::Create,
        s if s == delete => ChurnOp::Delete,
        _ => ChurnOp::Update,
    }
}

const BASE_UNIX: i64 = 1_793_527_200; // 2026-11-01T10:00:00Z
const DAY: u64 = 86_400;
const REGION: &str = "us-east-1";
const REGISTRY: &str = "registry.example.com";
const SIDECAR_IMAGE: &str = "registry.example.com/platform/log-agent:v0.9.1";
const K8S_VERSION: &str = "v1.33.2";
/// Alphabet Kubernetes uses for generated name suffixes.
const NAME_ALPHABET: &[u8] = b"bcdfghjklmnpqrstvwxz2456789";
const SUFFIX_SPACE: u64 = 27 * 27 * 27 * 27 * 27;
const SUFFIX_MULT: u64 = 7_654_321; // not divisible by 3 => bijection mod 27^5
const PAD_KEY: &str = "kache.dev/padding";
const CHANGED_AT_KEY: &str = "kache.dev/changed-at";
const CANARY_KEY: &str = "kache.dev/canary";
const HEARTBEAT_KEY: &str = "example.com/heartbeat";
const ROOT_CA_DESCRIPTION: &str = "Contains a CA bundle that can be used to verify the \
    kube-apiserver when using internal endpoints such as the internal service IP or \
    kubernetes.default.svc. No other usage is guaranteed across distributions of \
    Kubernetes clusters.";
const SA_MOUNT: &str = "/var/run/secrets/kubernetes.io/serviceaccount";
#[rustfmt::skip]
const SERVICES: [&str; 16] = [
    "checkout", "payments", "cart", "orders", "search", "catalog", "reviews", "media",
    "auth", "profile", "notify", "gateway", "inventory", "shipping", "billing", "ledger",
];
const TEAMS: [&str; 4] = ["commerce", "discovery", "identity", "fulfillment"];
const ROLES: [&str; 8] = ["api", "web", "worker", "consumer", "cron", "proxy", "cache", "indexer"];
const TIERS: [&str; 8] = ["backend", "frontend", "backend", "backend", "batch", "edge", "data", "data"];
const ENVS: [&str; 3] = ["prod", "staging", "dev"];
const CPU: [(&str, &str); 3] = [("100m", "200m"), ("250m", "500m"), ("500m", "1")];
const MEM: [(&str, &str); 3] = [("128Mi", "256Mi"), ("256Mi", "512Mi"), ("512Mi", "1Gi")];
/// (instance type, cpu cores, memory KiB)
#[rustfmt::skip]
const INSTANCES: [(&str, u64, u64); 4] = [
    ("m5.2xlarge", 8, 32_386_544), ("m5.4xlarge", 16, 65_843_400),
    ("c5.4xlarge", 16, 32_386_544), ("r5.2xlarge", 8, 65_843_400),
];

/// Independent random streams, so adding a field to one kind never shifts another.
#[derive(Clone, Copy)]
#[rustfmt::skip]
enum Stream {
    Namespace = 1, Node, Deploy, Pod, PodTime, Mutate, Churn, Service, ConfigMap, Secret, Event,
}

/// splitmix64 finaliser.
fn mix(x: u64) -> u64 {
    let mut z = x.wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// Tiny splitmix64 PRNG; one stream per (seed, stream, index).
struct Prng(u64);

impl Prng {
    fn new(seed: u64, stream: Stream, index: u64) -> Self {
        Prng(mix(seed ^ mix((stream as u64).wrapping_mul(0xD1B5_4A32_D192_ED03) ^ mix(index))))
    }
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        mix(self.0)
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n.max(1)
    }
    fn pick<T: Copy>(&mut self, items: &[T]) -> T {
        items[self.below(items.len() as u64) as usize]
    }
    fn hex(&mut self, len: usize) -> String {
        const HEX: &[u8; 16] = b"0123456789abcdef";
        let mut s = String::with_capacity(len);
        let mut bits = 0;
        for _ in 0..len {
            if bits < 16 {
                bits = self.next() | (1 << 63);
            }
            s.push(char::from(HEX[(bits & 15) as usize]));
            bits >>= 4;
        }
        s
    }
    fn alnum(&mut self, len: usize) -> String {
        (0..len).map(|_| char::from(self.pick(NAME_ALPHABET))).collect()
    }
    /// A random (version 4) UUID string.
    fn uid(&mut self) -> String {
        let bytes = (u128::from(self.next()) << 64 | u128::from(self.next())).to_be_bytes();
        uuid::Builder::from_random_bytes(bytes).into_uuid().to_string()
    }
}

/// RFC 3339 UTC timestamp (seconds) `offset` seconds after 2026-11-01T10:00:00Z.
fn ts(offset: u64) -> String {
    rfc3339(BASE_UNIX.saturating_add(i64::try_from(offset).unwrap_or(i64::MAX / 2)))
}

/// Standard padded base64, as Secret `data` carries it.
fn base64(bytes: &[u8]) -> String {
    base64::engine::general_purpose::STANDARD.encode(bytes)
}

fn ipv4(a: u64) -> String {
    std::net::Ipv4Addr::from(a as u32).to_string()
}

fn node_name(n: u64) -> String {
    format!("node-{n:04}")
}

fn node_zone(n: u64) -> String {
    format!("{REGION}{}", ['a', 'b', 'c'][(n % 3) as usize])
}

/// Node `n` owns pod CIDR `10.(128 + n/256 % 128).(n % 256).0/24`.
fn pod_cidr_base(n: u64) -> u64 {
    (10 << 24) | ((128 + (n >> 8) % 128) << 16) | ((n & 255) << 8)
}

fn node_ip(n: u64) -> String {
    ipv4((172 << 24 | 16 << 16) + 10 + n % 1_000_000)
}

/// Namespaced object metadata up to `labels` (callers append annotations etc.).
fn meta(name: &str, namespace: &str, uid: String, created: u64, labels: Option<Value>) -> Value {
    let mut m = obj! { "name": name, "namespace": namespace, "uid": uid, "creationTimestamp": ts(created) };
    if let Some(labels) = labels {
        m["labels"] = labels;
    }
    m
}

fn app_label(app: &str) -> Value {
    obj! { "app": app }
}

/// Everything a deployment's objects (and its pods) share.
struct Workload {
    index: u64,
    name: String,
    namespace: String,
    service: &'static str,
    team: &'static str,
    role: &'static str,
    tier: &'static str,
    env: &'static str,
    version: String,
    hash: String,
    uid: String,
    rs_uid: String,
    created: u64,
    port: u64,
    cpu: (&'static str, &'static str),
    mem: (&'static str, &'static str),
    suffix_offset: u64,
}

impl Workload {
    fn image(&self) -> String {
        format!("{REGISTRY}/{}/{}-{}:{}", self.team, self.service, self.role, self.version)
    }
    /// Metadata of a namespaced object belonging to this app (labelled `app=<name>`).
    fn app_meta(&self, name: &str, uid: String) -> Value {
        meta(name, &self.namespace, uid, self.created, Some(app_label(&self.name)))
    }
    fn rs_name(&self) -> String {
        format!("{}-{}", self.name, self.hash)
    }
    /// Labels of the pod template, keys sorted (pods add `pod-template-hash` and topology).
    fn template_labels(&self) -> Map<String, Value> {
        map! {
            "app": self.name.as_str(), "app.kubernetes.io/part-of": self.service, "env": self.env,
            "team": self.team, "tier": self.tier, "track": "stable",
            "version": self.version.as_str(),
        }
    }
    /// Replica suffix: a bijection of the ordinal modulo 27^5, so unique per deployment.
    fn pod_suffix(&self, ordinal: u64) -> String {
        let mut v = ((ordinal % SUFFIX_SPACE) * SUFFIX_MULT + self.suffix_offset) % SUFFIX_SPACE;
        let mut out = String::with_capacity(5);
        for _ in 0..5 {
            out.push(char::from(NAME_ALPHABET[(v % 27) as usize]));
            v /= 27;
        }
        out
    }
}

/// Per-pod values shared by the metadata, spec and status builders.
struct PodCtx {
    name: String,
    node: u64,
    created: u64,
    ip: String,
    host_ip: String,
    token_volume: String,
}

/// Deterministic generator of a synthetic cluster.
#[derive(Debug, Clone)]
pub struct Synth {
    spec: ClusterSpec,
    nodes: u64,
    deployments: u64,
    ns_names: Vec<String>,
}

impl Synth {
    /// Build a generator; cheap (only namespace names are precomputed).
    pub fn new(spec: ClusterSpec) -> Self {
        let ns_names = (0..spec.namespaces.max(1))
            .map(|k| match k {
                0 => "default".to_owned(),
                1 => "kube-system".to_owned(),
                _ => format!("ns-{:04}", k - 2),
            })
            .collect();
        let nodes = spec.nodes.max(1) as u64;
        let deployments = (spec.pods as u64).div_ceil(5).max(1);
        Synth { spec, nodes, deployments, ns_names }
    }

    /// Number of deployments `D = max(1, ceil(pods / 5))` (also services, app ConfigMaps, Secrets).
    pub fn deployment_count(&self) -> u64 {
        self.deployments
    }

    fn rng(&self, stream: Stream, index: u64) -> Prng {
        Prng::new(self.spec.seed, stream, index)
    }

    /// Namespaces: `default`, `kube-system`, then `ns-0000`, … (`max(1, namespaces)` in all).
    pub fn namespaces(&self) -> impl Iterator<Item = Value> + '_ {
        self.ns_names.iter().zip(0u64..).map(move |(name, k)| {
            let mut rng = self.rng(Stream::Namespace, k);
            obj! {
                "kind": "Namespace", "apiVersion": "v1",
                "metadata": obj! {
                    "name": name.as_str(), "uid": rng.uid(), "creationTimestamp": ts(k * 60),
                    "labels": obj! { "kubernetes.io/metadata.name": name.as_str() },
                },
                "spec": obj! { "finalizers": vec!["kubernetes"] },
                "status": obj! { "phase": "Active" },
            }
        })
    }

    /// Nodes `node-0000`, … (`max(1, spec.nodes)` of them).
    pub fn nodes(&self) -> impl Iterator<Item = Value> + '_ {
        (0..self.nodes).map(move |n| self.node(n))
    }

    fn node(&self, n: u64) -> Value {
        let mut rng = self.rng(Stream::Node, n);
        let (name, zone) = (node_name(n), node_zone(n));
        let (itype, cores, mem_ki) = rng.pick(&INSTANCES);
        let labels = obj! { // keys sorted, as Go writes maps
            "beta.kubernetes.io/arch": "amd64", "beta.kubernetes.io/os": "linux",
            "kubernetes.io/arch": "amd64",
            "kubernetes.io/hostname": name.as_str(), "kubernetes.io/os": "linux",
            "node.kubernetes.io/instance-type": itype, "topology.kubernetes.io/region": REGION,
            "topology.kubernetes.io/zone": zone.as_str(),
        };
        let annotations = json!({
            "node.alpha.kubernetes.io/ttl": "0",
            "volumes.kubernetes.io/controller-managed-attach-detach": "true",
        });
        let cidr = format!("{}/24", ipv4(pod_cidr_base(n)));
        let provider = format!("aws:///{zone}/i-0{}", rng.hex(16));
        obj! {
            "kind": "Node", "apiVersion": "v1",
            "metadata": obj! {
                "name": name.as_str(), "uid": rng.uid(), "creationTimestamp": ts(3600 + n * 7),
                "labels": labels, "annotations": annotations,
            },
            "spec": obj! {
                "podCIDR": cidr.as_str(), "podCIDRs": vec![cidr.as_str()], "providerID": provider,
            },
            "status": node_status(n, &mut rng, (cores, mem_ki), &name),
        }
    }

    fn workload(&self, d: u64) -> Workload {
        let n_ns = self.ns_names.len() as u64;
        let (k, j) = (d % n_ns, d / n_ns); // namespace, ordinal within it
        let combo = ((j + k * 3) % 128) as usize;
        let (service, role) = (SERVICES[combo % 16], ROLES[combo / 16]);
        let name = match j / 128 {
            0 => format!("{service}-{role}"),
            g => format!("{service}-{role}-{g}"),
        };
        let mut rng = self.rng(Stream::Deploy, d);
        Workload {
            index: d,
            name,
            namespace: self.ns_names[k as usize].clone(),
            service,
            team: TEAMS[combo % 16 / 4],
            role,
            tier: TIERS[combo / 16],
            env: ENVS[(k % 3) as usize],
            version: format!("v1.{}.{}", rng.below(20), rng.below(10)),
            hash: rng.alnum(10),
            uid: rng.uid(),
            rs_uid: rng.uid(),
            created: DAY + rng.below(7 * DAY),
            port: rng.pick(&[8080, 8000, 9000, 3000]),
            cpu: rng.pick(&CPU),
            mem: rng.pick(&MEM),
            suffix_offset: rng.below(SUFFIX_SPACE),
        }
    }

    /// Pods `pod(0)`, …, `pod(spec.pods - 1)`, generated lazily one at a time.
    pub fn pods(&self) -> impl Iterator<Item = Value> + '_ {
        (0..self.spec.pods as u64).map(move |i| self.pod(i))
    }

    /// The pod with this index (`pods()` yields `pod(0..pods)`); new pods created by churn
    /// use index >= spec.pods.
    ///
    /// Pod `i` belongs to deployment `i % D`, runs on `node-{i % nodes:04}` and is
    /// named `<deployment>-<hash10>-<hash5>`: names are unique within a namespace for every
    /// index below `27^5 × D` (about 14 million per deployment).
    pub fn pod(&self, index: u64) -> Value {
        let w = self.workload(index % self.deployments);
        let node = index % self.nodes;
        let mut rng = self.rng(Stream::Pod, index);
        let ctx = PodCtx {
            name: format!("{}-{}", w.rs_name(), w.pod_suffix(index / self.deployments)),
            node,
            created: self.pod_created(&w, index),
            ip: ipv4(pod_cidr_base(node) + 2 + (index / self.nodes) % 250),
            host_ip: node_ip(node),
            token_volume: format!("kube-api-access-{}", rng.alnum(5)),
        };
        let mut pod = obj! {
            "kind": "Pod", "apiVersion": "v1",
            "metadata": pod_meta(&w, &ctx, &mut rng),
            "spec": pod_spec(&w, Some(&ctx)),
            "status": pod_status(&w, &ctx, &mut rng),
        };
        if let Some(target) = self.spec.pod_bytes {
            pad_to(&mut pod, target, &mut rng);
        }
        pod
    }

    /// Seconds after the base time at which pod `index` was created.
    fn pod_created(&self, w: &Workload, index: u64) -> u64 {
        let pods = self.spec.pods as u64;
        match index.checked_sub(pods) {
            None => w.created + 60 + self.rng(Stream::PodTime, index).below(14 * DAY),
            Some(new) => 30 * DAY + new % (3650 * DAY), // one per second, kept < year 10000
        }
    }

    /// Deployments (apps/v1); `spec.replicas` equals the number of pods generated for each.
    pub fn deployments(&self) -> impl Iterator<Item = Value> + '_ {
        (0..self.deployments).map(move |d| self.deployment(d))
    }

    fn deployment(&self, d: u64) -> Value {
        let w = self.workload(d);
        let pods = self.spec.pods as u64;
        let replicas = pods / self.deployments + u64::from(d < pods % self.deployments);
        let at = ts(w.created + 40);
        let cond = |t: &str, reason: &str, msg: String| {
            obj! {
                "type": t, "status": "True", "lastUpdateTime": at.as_str(),
                "lastTransitionTime": at.as_str(), "reason": reason, "message": msg,
            }
        };
        let available = "Deployment has minimum availability.";
        let progressed = format!("ReplicaSet \"{}\" has successfully progressed.", w.rs_name());
        let mut metadata = meta(&w.name, &w.namespace, w.uid.clone(), w.created, Some(w.template_labels().into()));
        if let Some(m) = metadata.as_object_mut() {
            m.shift_insert(3, "generation".into(), json!(1)); // before creationTimestamp
        }
        metadata["annotations"] = json!({ "deployment.kubernetes.io/revision": "1" });
        obj! {
            "kind": "Deployment", "apiVersion": "apps/v1",
            "metadata": metadata,
            "spec": obj! {
                "replicas": replicas,
                "selector": obj! { "matchLabels": app_label(&w.name) },
                "template": obj! {
                    "metadata": obj! { "labels": w.template_labels() },
                    "spec": pod_spec(&w, None),
                },
                "strategy": json!({
                    "type": "RollingUpdate",
                    "rollingUpdate": { "maxUnavailable": "25%", "maxSurge": "25%" },
                }),
                "revisionHistoryLimit": 10, "progressDeadlineSeconds": 600,
            },
            "status": obj! {
                "observedGeneration": 1, "replicas": replicas, "updatedReplicas": replicas,
                "readyReplicas": replicas, "availableReplicas": replicas,
                "conditions": vec![
                    cond("Available", "MinimumReplicasAvailable", available.to_owned()),
                    cond("Progressing", "NewReplicaSetAvailable", progressed),
                ],
            },
        }
    }

    /// ClusterIP Services, one per deployment, selecting its pods by `app`.
    pub fn services(&self) -> impl Iterator<Item = Value> + '_ {
        (0..self.deployments).map(move |d| {
            let w = self.workload(d);
            let mut rng = self.rng(Stream::Service, d);
            let ip = ipv4((10 << 24 | 96 << 16) + 10 + d % 1_000_000);
            let port = |name: &str, port: u64, target: Value| {
                obj! { "name": name, "protocol": "TCP", "port": port, "targetPort": target }
            };
            obj! {
                "kind": "Service", "apiVersion": "v1",
                "metadata": w.app_meta(&w.name, rng.uid()),
                "spec": obj! {
                    "ports": vec![
                        port("http", 80, json!("http")),
                        port("metrics", 9090, json!(9090)),
                    ],
                    "selector": app_label(&w.name),
                    "clusterIP": ip.as_str(), "clusterIPs": vec![ip.as_str()], "type": "ClusterIP",
                    "sessionAffinity": "None", "ipFamilies": vec!["IPv4"],
                    "ipFamilyPolicy": "SingleStack",
                    "internalTrafficPolicy": "Cluster",
                },
                "status": obj! { "loadBalancer": obj! {} },
            }
        })
    }

    /// ConfigMaps: `kube-root-ca.crt` in every namespace, then `<deployment>-config` for
    /// every deployment.
    pub fn configmaps(&self) -> impl Iterator<Item = Value> + '_ {
        let roots = self.ns_names.iter().zip(0u64..).map(move |(ns, k)| {
            let mut rng = self.rng(Stream::ConfigMap, k);
            let body = base64(rng.hex(96).as_bytes());
            let pem = format!("-----BEGIN CERTIFICATE-----\n{body}\n-----END CERTIFICATE-----\n");
            let mut metadata = meta("kube-root-ca.crt", ns, rng.uid(), k * 60 + 1, None);
            metadata["annotations"] = json!({ "kubernetes.io/description": ROOT_CA_DESCRIPTION });
            obj! {
                "kind": "ConfigMap", "apiVersion": "v1", "metadata": metadata,
                "data": obj! { "ca.crt": pem },
            }
        });
        let apps = (0..self.deployments).map(move |d| {
            let w = self.workload(d);
            let mut rng = self.rng(Stream::ConfigMap, (1 << 40) + d);
            let yaml = format!("server:\n  port: {}\nlogging:\n  level: info\nfeatures:\n  {}: true\n", w.port, w.role);
            let data = obj! { "ENVIRONMENT": w.env, "LOG_LEVEL": "info", "app.yaml": yaml };
            let name = format!("{}-config", w.name);
            let metadata = w.app_meta(&name, rng.uid());
            obj! { "kind": "ConfigMap", "apiVersion": "v1", "metadata": metadata, "data": data }
        });
        roots.chain(apps)
    }

    /// Opaque Secrets `<deployment>-credentials`, `data` base64-encoded.
    pub fn secrets(&self) -> impl Iterator<Item = Value> + '_ {
        (0..self.deployments).map(move |d| {
            let w = self.workload(d);
            let mut rng = self.rng(Stream::Secret, d);
            let name = format!("{}-credentials", w.name);
            let metadata = w.app_meta(&name, rng.uid());
            let data = obj! {
                "password": base64(rng.alnum(24).as_bytes()),
                "username": base64(format!("{}-{}", w.service, w.role).as_bytes()),
            };
            obj! {
                "kind": "Secret", "apiVersion": "v1", "metadata": metadata, "data": data,
                "type": "Opaque",
            }
        })
    }

    /// core/v1 Events Scheduled, Pulled, Created and Started about pod `k`, for every
    /// namespace `k < min(N, D)` (pod `k` belongs to deployment `k`, in namespace `k`).
    pub fn events(&self) -> impl Iterator<Item = Value> + '_ {
        let n = (self.ns_names.len() as u64).min(self.deployments);
        (0..n * 4).map(move |e| self.event(e / 4, e % 4))
    }

    fn event(&self, k: u64, which: u64) -> Value {
        let pod = self.pod(k);
        let field = |ptr: &str| pod.pointer(ptr).and_then(Value::as_str).unwrap_or_default();
        let (name, ns, node) = (field("/metadata/name"), field("/metadata/namespace"), field("/spec/nodeName"));
        let (reason, message) = match which {
            0 => ("Scheduled", format!("Successfully assigned {ns}/{name} to {node}")),
            1 => ("Pulled", format!("Container image \"{}\" already present on machine", field("/spec/containers/0/image"))),
            2 => ("Created", "Created container: app".to_owned()),
            _ => ("Started", "Started container app".to_owned()),
        };
        let (component, host) = if which == 0 { ("default-scheduler", "") } else { ("kubelet", node) };
        let mut involved = obj! {
            "kind": "Pod", "namespace": ns, "name": name, "uid": field("/metadata/uid"),
            "apiVersion": "v1",
        };
        let mut source = obj! { "component": component };
        if which > 0 {
            involved["fieldPath"] = json!("spec.containers{app}");
            source["host"] = json!(host);
        }
        let mut rng = self.rng(Stream::Event, k * 4 + which);
        let at = self.pod_created(&self.workload(k), k) + which;
        let metadata = meta(&format!("{name}.{}", rng.hex(16)), ns, rng.uid(), at, None);
        obj! {
            "kind": "Event", "apiVersion": "v1", "metadata": metadata,
            "involvedObject": involved, "reason": reason, "message": message, "source": source,
            "firstTimestamp": ts(at), "lastTimestamp": ts(at), "count": 1, "type": "Normal",
            "reportingComponent": component, "reportingInstance": host,
        }
    }

    /// Apply one realistic status/metadata update to a pod in place (e.g. flip a condition,
    /// bump restartCount, change an annotation, sometimes add/remove a label), and stamp
    /// annotation `kache.dev/changed-at` with `changed_at_unix_nanos` so load tests can
    /// measure delivery lag.
    ///
    /// The update is chosen from `(seed, step)`: ~35% Ready/ContainersReady flip,
    /// ~25% container restart, ~25% `example.com/heartbeat` annotation bump, ~15%
    /// `kache.dev/canary` label toggle. Transition times use `changed_at_unix_nanos`
    /// (or base time + `step` when it is 0). Name, namespace, uid and nodeName never
    /// change; missing fields fall back to the annotation bump; never panics.
    pub fn mutate_pod(&self, pod: &mut Value, step: u64, changed_at_unix_nanos: u128) {
        let mut rng = self.rng(Stream::Mutate, step);
        let when = match i64::try_from(changed_at_unix_nanos / 1_000_000_000) {
            Ok(secs) if secs > 0 => rfc3339(secs),
            _ => ts((30 * DAY).saturating_add(step)),
        };
        let done = match rng.below(100) {
            0..35 => flip_readiness(pod, &when),
            35..60 => restart_container(pod, &when, &mut rng),
            60..85 => false,
            _ => toggle_canary(pod),
        };
        if !done {
            bump_heartbeat(pod);
        }
        if let Some(ann) = annotations_mut(pod) {
            ann.insert(CHANGED_AT_KEY.into(), Value::String(changed_at_unix_nanos.to_string()));
            ann.sort_keys();
        }
    }
}

fn node_status(n: u64, rng: &mut Prng, (cores, mem_ki): (u64, u64), name: &str) -> Value {
    let (heartbeat, since) = (ts(30 * DAY + rng.below(40)), ts(3600 + n * 7 + 20));
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

fn pod_meta(w: &Workload, ctx: &PodCtx, rng: &mut Prng) -> Value {
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
    let mut m = meta(&ctx.name, &w.namespace, rng.uid(), ctx.created, Some(labels.into()));
    m["annotations"] = annotations;
    m["ownerReferences"] = Value::from(vec![owner]);
    m
}

fn field_ref(path: &str) -> Value {
    obj! { "apiVersion": "v1", "fieldPath": path }
}

fn volume_mounts(token: Option<&str>, config: bool) -> Vec<Value> {
    let mount = |name: &str, path: &str| obj! { "name": name, "readOnly": true, "mountPath": path };
    let mut mounts = Vec::with_capacity(2);
    if config {
        mounts.push(mount("config", "/etc/app"));
    }
    mounts.extend(token.map(|t| mount(t, SA_MOUNT)));
    mounts
}

fn resources((cpu_req, cpu_lim): (&str, &str), (mem_req, mem_lim): (&str, &str)) -> Value {
    obj! {
        "limits": obj! { "cpu": cpu_lim, "memory": mem_lim },
        "requests": obj! { "cpu": cpu_req, "memory": mem_req },
    }
}

fn container(w: &Workload, token: Option<&str>) -> Value {
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

fn sidecar(token: Option<&str>) -> Value {
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
fn pod_spec(w: &Workload, ctx: Option<&PodCtx>) -> Value {
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

fn pod_status(w: &Workload, ctx: &PodCtx, rng: &mut Prng) -> Value {
    let t = ctx.created;
    let cond = |ty: &str, at: u64| obj! { "type": ty, "status": "True", "lastTransitionTime": ts(at) };
    let status = |name: &str, image: String, started: u64, rng: &mut Prng| {
        obj! {
            "name": name, "state": obj! { "running": obj! { "startedAt": ts(started) } },
            "ready": true, "restartCount": 0, "image": image,
            "imageID": format!("sha256:{}", rng.hex(64)),
            "containerID": format!("containerd://{}", rng.hex(64)), "started": true,
        }
    };
    let conditions = vec![
        cond("PodReadyToStartContainers", t + 3),
        cond("Initialized", t + 1),
        cond("Ready", t + 8),
        cond("ContainersReady", t + 8),
        cond("PodScheduled", t),
    ];
    obj! {
        "phase": "Running", "conditions": conditions,
        "hostIP": ctx.host_ip.as_str(), "hostIPs": vec![obj! { "ip": ctx.host_ip.as_str() }],
        "podIP": ctx.ip.as_str(), "podIPs": vec![obj! { "ip": ctx.ip.as_str() }],
        "startTime": ts(t + 1),
        "containerStatuses": vec![
            status("app", w.image(), t + 4, rng),
            status("log-shipper", SIDECAR_IMAGE.to_owned(), t + 5, rng),
        ],
        "qosClass": "Burstable",
    }
}

/// Grow the pod to `target` bytes of compact JSON with a padding annotation.
fn pad_to(pod: &mut Value, target: usize, rng: &mut Prng) {
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

fn annotations_mut(pod: &mut Value) -> Option<&mut Map<String, Value>> {
    let meta = pod.get_mut("metadata")?.as_object_mut()?;
    meta.entry("annotations").or_insert_with(|| json!({})).as_object_mut()
}

/// Toggle Ready/ContainersReady and the app container's `ready`.
fn flip_readiness(pod: &mut Value, when: &str) -> bool {
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
fn restart_container(pod: &mut Value, when: &str, rng: &mut Prng) -> bool {
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
fn toggle_canary(pod: &mut Value) -> bool {
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
fn bump_heartbeat(pod: &mut Value) {
    if let Some(ann) = annotations_mut(pod) {
        let n = ann.get(HEARTBEAT_KEY).and_then(Value::as_str).and_then(|s| s.parse::<u64>().ok()).unwrap_or(0);
        ann.insert(HEARTBEAT_KEY.into(), Value::String((n + 1).to_string()));
        ann.sort_keys();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use std::collections::{BTreeMap, HashSet};

    fn synth(nodes: usize, pods: usize, namespaces: usize, seed: u64) -> Synth {
        let pod_bytes = None;
        Synth::new(ClusterSpec { nodes, pods, namespaces, seed, pod_bytes })
    }

    fn all(s: &Synth) -> Vec<Value> {
        let mut v: Vec<Value> = s.namespaces().chain(s.nodes()).chain(s.pods()).collect();
        v.extend(s.deployments().chain(s.services()).chain(s.configmaps()));
        v.extend(s.secrets().chain(s.events()));
        v
    }

    fn keys(v: &Value) -> Vec<&str> {
        v.as_object().map_or(vec![], |m| m.keys().map(String::as_str).collect())
    }

    /// String at a JSON pointer (`~1` escapes `/`); panics if missing.
    fn at<'a>(v: &'a Value, ptr: &str) -> &'a str {
        let found = v.pointer(ptr).and_then(Value::as_str);
        found.unwrap_or_else(|| panic!("{ptr} missing in {v}"))
    }

    fn dns1123(s: &str) -> bool {
        let ok = |b: &u8| b.is_ascii_lowercase() || b.is_ascii_digit();
        let b = s.as_bytes();
        b.first().is_some_and(ok) && b.last().is_some_and(ok) && b.len() <= 253 && b.iter().all(|c| ok(c) || *c == b'-' || *c == b'.')
    }

    fn quantity(s: &str) -> bool {
        let num = s.trim_end_matches(|c: char| c.is_ascii_alphabetic());
        !num.is_empty() && num.bytes().all(|b| b.is_ascii_digit()) && ["", "m", "Ki", "Mi", "Gi"].contains(&&s[num.len()..])
    }

    fn size(v: &Value) -> usize {
        serde_json::to_vec(v).unwrap().len()
    }

    #[test]
    fn deterministic_and_seed_sensitive() {
        let bytes = |seed| serde_json::to_string(&all(&synth(7, 60, 5, seed))).unwrap();
        assert_eq!(bytes(42), bytes(42));
        assert_ne!(bytes(42), bytes(43));
        // Pinned so output cannot silently depend on platform or dependency versions;
        // update deliberately when the generator changes.
        let p = synth(3, 10, 3, 1).pod(0);
        assert_eq!(at(&p, "/metadata/name"), "checkout-api-dg9mql5tj6-jqb5f");
        assert_eq!(at(&p, "/metadata/uid"), "519e1789-a2ad-4dd7-8740-4ba9ca476646");
        let fnv =
            serde_json::to_vec(&p).unwrap().iter().fold(0xcbf2_9ce4_8422_2325u64, |h, &x| (h ^ u64::from(x)).wrapping_mul(0x100_0000_01b3));
        assert_eq!(fnv, 10_944_317_521_138_096_771);
    }

    #[test]
    fn counts() {
        let s = synth(7, 103, 5, 9);
        let d = 103usize.div_ceil(5);
        assert_eq!(s.deployment_count(), d as u64);
        let n = [s.namespaces().count(), s.nodes().count(), s.pods().count()];
        assert_eq!(n, [5, 7, 103]);
        let n = [s.deployments().count(), s.services().count(), s.secrets().count()];
        assert_eq!(n, [d; 3]);
        assert_eq!((s.configmaps().count(), s.events().count()), (5 + d, 5 * 4));
        let names: Vec<Value> = s.namespaces().map(|n| n["metadata"]["name"].clone()).collect();
        assert_eq!(names, ["default", "kube-system", "ns-0000", "ns-0001", "ns-0002"]);
        let empty = synth(0, 0, 0, 1);
        let n = [empty.namespaces().count(), empty.nodes().count(), empty.pods().count()];
        assert_eq!(n, [1, 1, 0]);
        assert_eq!(at(&empty.pod(5), "/spec/nodeName"), "node-0000");
    }

    #[test]
    fn pods_follow_documented_layout() {
        let s = synth(7, 103, 5, 9);
        let mut per_app: BTreeMap<(String, String), u64> = BTreeMap::new();
        for (i, p) in s.pods().enumerate() {
            assert_eq!(at(&p, "/spec/nodeName"), format!("node-{:04}", i % 7));
            let app = at(&p, "/metadata/labels/app");
            *per_app.entry((at(&p, "/metadata/namespace").into(), app.into())).or_default() += 1;
            let rs = format!("{app}-{}", at(&p, "/metadata/labels/pod-template-hash"));
            assert_eq!(at(&p, "/metadata/ownerReferences/0/name"), rs);
            assert!(at(&p, "/metadata/name").starts_with(&format!("{rs}-")));
            assert_eq!(p["metadata"]["labels"].as_object().map(Map::len), Some(10));
        }
        for (d, dep) in s.deployments().enumerate() {
            let key = (at(&dep, "/metadata/namespace").into(), at(&dep, "/metadata/name").into());
            assert_eq!(dep["spec"]["replicas"].as_u64(), per_app.get(&key).copied());
            let pod = s.pod(d as u64); // pod d is the first replica of deployment d
            for (k, v) in dep["spec"]["template"]["metadata"]["labels"].as_object().unwrap() {
                assert_eq!(&pod["metadata"]["labels"][k], v);
            }
        }
        let churned = s.pod(103);
        assert_eq!(at(&churned, "/spec/nodeName"), format!("node-{:04}", 103 % 7));
        assert!(s.pods().all(|p| p["metadata"]["name"] != churned["metadata"]["name"]));
    }

    #[test]
    fn keys_follow_apiserver_order() {
        let s = synth(3, 20, 4, 5);
        let p = s.pod(7);
        assert_eq!(keys(&p), ["kind", "apiVersion", "metadata", "spec", "status"]);
        let meta = "name namespace uid creationTimestamp labels annotations ownerReferences";
        assert_eq!(keys(&p["metadata"]).join(" "), meta);
        let spec = "volumes containers restartPolicy terminationGracePeriodSeconds dnsPolicy \
            serviceAccountName serviceAccount nodeName securityContext schedulerName tolerations \
            priority enableServiceLinks preemptionPolicy";
        assert_eq!(keys(&p["spec"]).join(" "), spec);
        let status = "phase conditions hostIP hostIPs podIP podIPs startTime containerStatuses qosClass";
        assert_eq!(keys(&p["status"]).join(" "), status);
        for obj in all(&s) {
            assert_eq!(keys(&obj)[..3], ["kind", "apiVersion", "metadata"]);
            assert!(obj["metadata"].get("resourceVersion").is_none());
            for map in ["labels", "annotations"] {
                let k = keys(&obj["metadata"][map]);
                assert!(k.windows(2).all(|w| w[0] < w[1]), "{map} unsorted: {k:?}");
            }
        }
    }

    #[test]
    fn pod_size_default_and_padded() {
        for seed in 0..5 {
            let s = synth(50, 1000, 12, seed);
            for i in (0..1000).step_by(37) {
                // All the listed content (two containers with probes, projected
                // token, five conditions, two statuses) needs about 4.5 KB.
                let n = size(&s.pod(i));
                assert!((3_072..=5_120).contains(&n), "pod {i} is {n} bytes");
            }
        }
        for target in [6_000, 8_192, 65_536] {
            let spec = ClusterSpec { nodes: 5, pods: 50, namespaces: 3, seed: 1, pod_bytes: Some(target) };
            assert!(Synth::new(spec).pods().all(|p| size(&p).abs_diff(target) <= 8));
        }
        let spec = ClusterSpec { nodes: 5, pods: 50, namespaces: 3, seed: 1, pod_bytes: Some(100) };
        assert_eq!(Synth::new(spec).pod(3), synth(5, 50, 3, 1).pod(3));
    }

    #[test]
    fn names_unique_and_valid() {
        let s = synth(30, 2000, 20, 77);
        let (mut seen, mut uids) = (HashSet::new(), HashSet::new());
        for obj in all(&s) {
            let (kind, name) = (at(&obj, "/kind"), at(&obj, "/metadata/name"));
            let ns = obj["metadata"]["namespace"].as_str().unwrap_or("");
            assert!(dns1123(name), "{kind} {name}");
            assert!(seen.insert(format!("{kind}/{ns}/{name}")), "duplicate {kind} {ns}/{name}");
            let uid = at(&obj, "/metadata/uid");
            assert!(uids.insert(uid.to_owned()), "duplicate uid {uid}");
            assert_eq!((uid.len(), &uid[14..15], uid.matches('-').count()), (36, "4", 4));
            for v in obj["metadata"]["labels"].as_object().into_iter().flat_map(|m| m.values()) {
                assert!(v.as_str().is_some_and(|v| v.len() <= 63), "label {v}");
            }
        }
        let mut churned = HashSet::new();
        assert!((2000..2500).all(|i| churned.insert(s.pod(i)["metadata"]["name"].clone())));
    }

    #[test]
    fn field_values_are_valid_kubernetes() {
        let s = synth(4, 40, 3, 8);
        for p in s.pods() {
            for c in p["spec"]["containers"].as_array().unwrap() {
                for q in c["resources"].as_object().unwrap().values().flat_map(|r| r.as_object()) {
                    assert!(q.values().all(|q| quantity(q.as_str().unwrap())), "{q:?}");
                }
            }
            let probe = |kind: &str| p["spec"]["containers"][0][kind]["httpGet"]["port"].clone();
            assert!(probe("livenessProbe").is_string() && probe("readinessProbe").is_u64());
            assert_eq!(at(&p, "/status/qosClass"), "Burstable");
        }
        for n in s.nodes() {
            for q in ["capacity", "allocatable"].map(|m| n["status"][m].as_object().unwrap()) {
                assert!(q.values().all(|q| quantity(q.as_str().unwrap())), "{q:?}");
            }
        }
        for sec in s.secrets() {
            let mut data = sec["data"].as_object().unwrap().values();
            assert!(data.all(|v| v.as_str().unwrap().len() % 4 == 0));
        }
        assert_eq!(base64(b"demo"), "ZGVtbw==");
        assert_eq!(base64(b"not-a-real-secret"), "bm90LWEtcmVhbC1zZWNyZXQ=");
        assert_eq!([ts(0), rfc3339(0)], ["2026-11-01T10:00:00Z", "1970-01-01T00:00:00Z"]);
        assert_eq!(rfc3339(1_709_210_096), "2024-02-29T12:34:56Z");
    }

    #[test]
    fn mutate_pod_keeps_identity_and_changes_something() {
        let s = synth(5, 50, 3, 4);
        let ident = |p: &Value| ["/metadata/name", "/metadata/namespace", "/metadata/uid", "/spec/nodeName"].map(|k| at(p, k).to_owned());
        for step in 0..400u64 {
            let (orig, nanos) = (s.pod(step % 50), 1_800_000_000_123_456_789 + u128::from(step));
            let mut p = orig.clone();
            s.mutate_pod(&mut p, step, nanos);
            assert_eq!(ident(&p), ident(&orig));
            assert_eq!(at(&p, "/metadata/annotations/kache.dev~1changed-at"), nanos.to_string());
            p["metadata"]["annotations"].as_object_mut().unwrap().shift_remove(CHANGED_AT_KEY);
            assert_ne!(p, orig, "step {step} changed nothing");
        }
        let mut p = s.pod(1);
        for step in 0..200 {
            let before = p.clone();
            s.mutate_pod(&mut p, step, 0);
            assert_ne!(p, before);
        }
        let restarts = p["status"]["containerStatuses"].as_array().unwrap().iter();
        assert!(restarts.map(|c| c["restartCount"].as_u64().unwrap()).sum::<u64>() > 0);
        let mut odd = json!({ "metadata": {} });
        s.mutate_pod(&mut odd, 3, 5);
        assert_eq!(odd["metadata"]["annotations"][CHANGED_AT_KEY], "5");
        s.mutate_pod(&mut json!(null), 3, 5);
    }

    #[test]
    fn churn_ratio_and_balance() {
        let (mut counts, mut balance, mut worst) = (BTreeMap::new(), 0i64, 0i64);
        for step in 0..10_000 {
            let op = churn_op(11, step);
            *counts.entry(format!("{op:?}")).or_insert(0) += 1;
            balance += match op {
                ChurnOp::Create => 1,
                ChurnOp::Delete => -1,
                ChurnOp::Update => 0,
            };
            worst = worst.max(balance.abs());
        }
        assert!((7_500..=8_500).contains(&counts["Update"]), "{counts:?}");
        assert!((900..=1_100).contains(&counts["Create"]), "{counts:?}");
        assert!((900..=1_100).contains(&counts["Delete"]), "{counts:?}");
        assert!(worst <= 1);
        let seq = |seed| (0..100).map(|i| churn_op(seed, i)).collect::<Vec<_>>();
        assert_eq!(seq(11), seq(11));
        assert_ne!(seq(11), seq(12));
    }

    #[test]
    fn pod_cost_is_independent_of_index() {
        // Pod `i` is computed directly from `i`: no per-cluster state, no O(n^2).
        let s = synth(1000, 100_000, 50, 3);
        // Best of three runs of 200 pods each, so scheduler noise cannot fail the test.
        let time = |from: u64| {
            let run = || {
                let start = std::time::Instant::now();
                (from..from + 200).for_each(|i| drop(s.pod(i)));
                start.elapsed()
            };
            (0..3).map(|_| run()).min().unwrap_or_default()
        };
        let (early, late) = (time(0), time(99_800));
        let limit = early * 5 + std::time::Duration::from_millis(50);
        assert!(late < limit, "{early:?} vs {late:?}");
    }

    #[test]
    #[cfg_attr(debug_assertions, ignore = "slow unoptimised; run with --release")]
    fn hundred_thousand_pods_lazily() {
        let s = synth(1000, 100_000, 50, 3);
        let start = std::time::Instant::now();
        let mut per_node = vec![0u32; 1000];
        for p in s.pods() {
            per_node[at(&p, "/spec/nodeName")[5..].parse::<usize>().unwrap()] += 1;
        }
        assert!(per_node.iter().all(|&c| c == 100));
        assert!(start.elapsed() < std::time::Duration::from_secs(60), "{:?}", start.elapsed());
    }

    proptest! {
        #[test]
        fn any_pod_is_consistent(seed: u64, index in 0u64..1 << 40, nodes in 1usize..5000,
                                 pods in 0usize..200_000) {
            let s = synth(nodes, pods, 30, seed);
            let p = s.pod(index);
            prop_assert_eq!(at(&p, "/spec/nodeName"), format!("node-{:04}", index % nodes as u64));
            prop_assert!(dns1123(at(&p, "/metadata/name")));
            prop_assert!(at(&p, "/metadata/creationTimestamp").ends_with('Z'));
            prop_assert_eq!(&p, &s.pod(index));
        }
    }
}
