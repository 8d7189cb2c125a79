//! Deterministic synthetic Kubernetes cluster for the simulator and load tests.
//!
//! [`Synth`] turns a [`ClusterSpec`] (counts plus a `u64` seed) into realistic
//! Namespaces, Nodes, Deployments, Pods, Services, ConfigMaps, Secrets, Events
//! and the CustomResourceDefinitions of the simulated custom resources as
//! `serde_json::Value`s whose keys follow the order the real apiserver writes
//! them (struct fields in Go declaration order, map-typed fields such as labels
//! sorted). Objects carry no `resourceVersion`; the store assigns it.
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
use objects::*;
use serde_json::{json, Map, Value};

/// Build a JSON `Map`, moving each value in with `Value::from`, keys in the
/// order written. (`json!` deep-copies embedded `Value`s through serde, a copy at
/// every level of nested construction.)
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

// After the macros, which the submodules use.
mod objects;
#[cfg(test)]
mod tests;

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
    let mut rng = Prng::new(seed, RandomStream::Churn, step / 10);
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
/// Every time the generated catalogue carries lies in `[BASE, BASE + CATALOGUE_SPAN)`.
const CATALOGUE_SPAN: u64 = 24 * DAY;
/// The end of the generated catalogue's times (2026-11-25T10:00:00Z): every creation,
/// transition and heartbeat time of the objects generated at start (and of a pod built with
/// [`Synth::pod`] for a churn index) is before it, so a cluster generated on a later day
/// shows only ages. Pods churn creates carry the time they were made
/// ([`Synth::pod_created_at`]).
pub const CATALOGUE_END_UNIX: i64 = BASE_UNIX + CATALOGUE_SPAN as i64;
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
enum RandomStream {
    Namespace = 1, Node, Deploy, Pod, PodTime, Mutate, Churn, Service, ConfigMap, Secret, Event, Crd,
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
    fn new(seed: u64, stream: RandomStream, index: u64) -> Self {
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

/// Seconds after the base time at which namespace `k` was created: a minute apart, the
/// 10,080th and later all in the week's last minute.
fn namespace_created(k: u64) -> u64 {
    k.min(7 * DAY / 60) * 60
}

/// Seconds after the base time at which node `n` joined: 7 s apart from an hour in, the
/// 86,400th and later in the same second eight days later.
fn node_created(n: u64) -> u64 {
    3600 + n.min(DAY) * 7
}

fn node_ip(n: u64) -> String {
    ipv4((172 << 24 | 16 << 16) + 10 + n % 1_000_000)
}

/// Namespaced object metadata up to `labels` (callers append annotations etc.); `created` is
/// an RFC 3339 time.
fn meta(name: &str, namespace: &str, uid: String, created: String, labels: Option<Value>) -> Value {
    let mut m = obj! { "name": name, "namespace": namespace, "uid": uid, "creationTimestamp": created };
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
        meta(name, &self.namespace, uid, ts(self.created), Some(app_label(&self.name)))
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
    /// Unix seconds of the pod's creation.
    created: i64,
    /// Seconds between its status's steps (scheduled, started, ready): 1 for a pod of the
    /// catalogue, 0 for one created now, whose times must not be in the future.
    pace: i64,
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

    fn rng(&self, stream: RandomStream, index: u64) -> Prng {
        Prng::new(self.spec.seed, stream, index)
    }

    /// Namespaces: `default`, `kube-system`, then `ns-0000`, … (`max(1, namespaces)` in all).
    pub fn namespaces(&self) -> impl Iterator<Item = Value> + '_ {
        self.ns_names.iter().zip(0u64..).map(move |(name, k)| {
            let mut rng = self.rng(RandomStream::Namespace, k);
            obj! {
                "kind": "Namespace", "apiVersion": "v1",
                "metadata": obj! {
                    "name": name.as_str(), "uid": rng.uid(), "creationTimestamp": ts(namespace_created(k)),
                    "labels": obj! { "kubernetes.io/metadata.name": name.as_str() },
                },
                "spec": obj! { "finalizers": vec!["kubernetes"] },
                "status": obj! { "phase": "Active" },
            }
        })
    }

    /// The CustomResourceDefinitions of the custom resources among `resources`, in their
    /// order, created with the cluster (see [`crate::sim::crd::definition`]).
    pub fn crds<'a>(&'a self, resources: &'a [crate::api::resource::ResourceRef]) -> impl Iterator<Item = Value> + 'a {
        resources
            .iter()
            .filter(|r| r.custom())
            .zip(0u64..)
            .map(move |(r, k)| crate::sim::crd::definition(r, &self.rng(RandomStream::Crd, k).uid(), &ts(0)))
    }

    /// Nodes `node-0000`, … (`max(1, spec.nodes)` of them).
    pub fn nodes(&self) -> impl Iterator<Item = Value> + '_ {
        (0..self.nodes).map(move |n| self.node(n))
    }

    fn node(&self, n: u64) -> Value {
        let mut rng = self.rng(RandomStream::Node, n);
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
                "name": name.as_str(), "uid": rng.uid(), "creationTimestamp": ts(node_created(n)),
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
        let mut rng = self.rng(RandomStream::Deploy, d);
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
    /// use index >= spec.pods (and [`Synth::pod_created_at`], for their creation time).
    ///
    /// Pod `i` belongs to deployment `i % D`, runs on `node-{i % nodes:04}` and is
    /// named `<deployment>-<hash10>-<hash5>`: names are unique within a namespace for every
    /// index below `27^5 × D` (about 14 million per deployment). Its times are the
    /// catalogue's, before [`CATALOGUE_END_UNIX`].
    pub fn pod(&self, index: u64) -> Value {
        let w = self.workload(index % self.deployments);
        let created = BASE_UNIX + self.pod_created(&w, index) as i64;
        self.build_pod(&w, index, created, 1)
    }

    /// Pod `index` (as [`Synth::pod`]) created at `created_unix` (Unix seconds, UTC), as churn
    /// creates one: its `creationTimestamp` and every time in its status (scheduled, started,
    /// ready) are that second, as a real apiserver stamps a pod at its creation.
    pub fn pod_created_at(&self, index: u64, created_unix: i64) -> Value {
        let w = self.workload(index % self.deployments);
        self.build_pod(&w, index, created_unix, 0)
    }

    fn build_pod(&self, w: &Workload, index: u64, created: i64, pace: i64) -> Value {
        let node = index % self.nodes;
        let mut rng = self.rng(RandomStream::Pod, index);
        let ctx = PodCtx {
            name: format!("{}-{}", w.rs_name(), w.pod_suffix(index / self.deployments)),
            node,
            created,
            pace,
            ip: ipv4(pod_cidr_base(node) + 2 + (index / self.nodes) % 250),
            host_ip: node_ip(node),
            token_volume: format!("kube-api-access-{}", rng.alnum(5)),
        };
        let mut pod = obj! {
            "kind": "Pod", "apiVersion": "v1",
            "metadata": pod_meta(w, &ctx, &mut rng),
            "spec": pod_spec(w, Some(&ctx)),
            "status": pod_status(w, &ctx, &mut rng),
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
            None => w.created + 60 + self.rng(RandomStream::PodTime, index).below(14 * DAY),
            // Churn's pods carry their own time (`pod_created_at`); built from the index
            // alone, one is the catalogue's last pod, its status's steps before its end.
            Some(_) => CATALOGUE_SPAN - 60,
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
        let mut metadata = meta(&w.name, &w.namespace, w.uid.clone(), ts(w.created), Some(w.template_labels().into()));
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
            let mut rng = self.rng(RandomStream::Service, d);
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
            let mut rng = self.rng(RandomStream::ConfigMap, k);
            let body = base64(rng.hex(96).as_bytes());
            let pem = format!("-----BEGIN CERTIFICATE-----\n{body}\n-----END CERTIFICATE-----\n");
            let mut metadata = meta("kube-root-ca.crt", ns, rng.uid(), ts(namespace_created(k) + 1), None);
            metadata["annotations"] = json!({ "kubernetes.io/description": ROOT_CA_DESCRIPTION });
            obj! {
                "kind": "ConfigMap", "apiVersion": "v1", "metadata": metadata,
                "data": obj! { "ca.crt": pem },
            }
        });
        let apps = (0..self.deployments).map(move |d| {
            let w = self.workload(d);
            let mut rng = self.rng(RandomStream::ConfigMap, (1 << 40) + d);
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
            let mut rng = self.rng(RandomStream::Secret, d);
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
        let mut rng = self.rng(RandomStream::Event, k * 4 + which);
        let at = self.pod_created(&self.workload(k), k) + which;
        let metadata = meta(&format!("{name}.{}", rng.hex(16)), ns, rng.uid(), ts(at), None);
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
        let mut rng = self.rng(RandomStream::Mutate, step);
        let when = match i64::try_from(changed_at_unix_nanos / 1_000_000_000) {
            Ok(secs) if secs > 0 => rfc3339(secs),
            _ => ts(CATALOGUE_SPAN.saturating_add(step)),
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
