//! Server-side printing: the `Table` rows the apiserver's printers write for `kubectl get`
//! (`Accept: application/json;as=Table;v=v1;g=meta.k8s.io`), for the kinds below. A row's
//! cells are computed once per object version, when the object is stored, as a template:
//! the cells' JSON with the places where a relative time ("5d", "3 (2m ago)") goes, filled
//! at answer time. Column definitions are the apiserver's own (`columns.json`, captured from
//! a real kube-apiserver v1.36.2 by `tools/gen_table_columns.py`).
//!
//! The apiserver's printers always print the wide columns (priority 1): `-o wide` is the
//! same Table. Custom resources are printed by their CRD's columns ([`CustomColumns`]).
//! Kinds without a printer here are passed through to the upstream.

mod custom;
mod print;

pub use custom::CustomColumns;

use serde_json::Value;
use std::collections::HashMap;
use std::sync::{Arc, OnceLock};

/// What prints a kind's Table: a built-in kind's printer, or a CRD's columns.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TablePrinter {
    /// A built-in kind.
    Builtin(Printer),
    /// A custom resource, by its CRD's columns for the served version.
    Custom(Arc<CustomColumns>),
}

impl TablePrinter {
    /// The printer of a resource: its built-in printer, else the CRD's columns `custom`.
    pub fn of(group: &str, plural: &str, custom: Option<&Arc<CustomColumns>>) -> Option<TablePrinter> {
        Printer::of(group, plural).map(TablePrinter::Builtin).or_else(|| custom.cloned().map(TablePrinter::Custom))
    }

    /// The `columnDefinitions` (compact JSON array).
    pub fn columns(&self) -> &[u8] {
        match self {
            TablePrinter::Builtin(p) => p.columns(),
            TablePrinter::Custom(c) => c.definitions(),
        }
    }

    /// The row template of an object (its decoded JSON).
    pub fn cells(&self, v: &Value) -> Cells {
        match self {
            TablePrinter::Builtin(p) => p.cells(v),
            TablePrinter::Custom(c) => c.cells(v),
        }
    }
}

/// A kind kache prints.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Printer {
    Pod,
    Node,
    Namespace,
    ConfigMap,
    Secret,
    ServiceAccount,
    Service,
    Endpoints,
    Event,
    PersistentVolumeClaim,
    PersistentVolume,
    ReplicationController,
    Deployment,
    ReplicaSet,
    StatefulSet,
    DaemonSet,
    ControllerRevision,
    Job,
    CronJob,
    EndpointSlice,
    /// events.k8s.io/v1 Events, printed as the core Event they convert to.
    EventsV1,
    Lease,
    Ingress,
    IngressClass,
    NetworkPolicy,
    StorageClass,
    PriorityClass,
    RoleBinding,
    ClusterRoleBinding,
    PodDisruptionBudget,
    /// The apiserver's default table of built-in kinds without a printer: Name and
    /// Created At (the creation time as RFC 3339, not a relative time).
    Default,
}

/// Every printer with its resource (API group, plural).
const PRINTERS: &[(&str, &str, Printer)] = &[
    ("", "pods", Printer::Pod),
    ("", "nodes", Printer::Node),
    ("", "namespaces", Printer::Namespace),
    ("", "configmaps", Printer::ConfigMap),
    ("", "secrets", Printer::Secret),
    ("", "serviceaccounts", Printer::ServiceAccount),
    ("", "services", Printer::Service),
    ("", "endpoints", Printer::Endpoints),
    ("", "events", Printer::Event),
    ("", "persistentvolumeclaims", Printer::PersistentVolumeClaim),
    ("", "persistentvolumes", Printer::PersistentVolume),
    ("", "replicationcontrollers", Printer::ReplicationController),
    ("apps", "deployments", Printer::Deployment),
    ("apps", "replicasets", Printer::ReplicaSet),
    ("apps", "statefulsets", Printer::StatefulSet),
    ("apps", "daemonsets", Printer::DaemonSet),
    ("apps", "controllerrevisions", Printer::ControllerRevision),
    ("batch", "jobs", Printer::Job),
    ("batch", "cronjobs", Printer::CronJob),
    ("discovery.k8s.io", "endpointslices", Printer::EndpointSlice),
    ("events.k8s.io", "events", Printer::EventsV1),
    ("coordination.k8s.io", "leases", Printer::Lease),
    ("networking.k8s.io", "ingresses", Printer::Ingress),
    ("networking.k8s.io", "ingressclasses", Printer::IngressClass),
    ("networking.k8s.io", "networkpolicies", Printer::NetworkPolicy),
    ("storage.k8s.io", "storageclasses", Printer::StorageClass),
    ("scheduling.k8s.io", "priorityclasses", Printer::PriorityClass),
    ("rbac.authorization.k8s.io", "rolebindings", Printer::RoleBinding),
    ("rbac.authorization.k8s.io", "clusterrolebindings", Printer::ClusterRoleBinding),
    ("policy", "poddisruptionbudgets", Printer::PodDisruptionBudget),
    // Built-in kinds the apiserver v1.36 prints with its default table (found by asking it
    // for every built-in resource's Table).
    ("", "limitranges", Printer::Default),
    ("rbac.authorization.k8s.io", "roles", Printer::Default),
    ("rbac.authorization.k8s.io", "clusterroles", Printer::Default),
    ("apiextensions.k8s.io", "customresourcedefinitions", Printer::Default),
    ("storage.k8s.io", "csistoragecapacities", Printer::Default),
];

impl Printer {
    /// The printer of a resource (API group and plural), if kache has one.
    pub fn of(group: &str, plural: &str) -> Option<Printer> {
        PRINTERS.iter().find(|(g, p, _)| *g == group && *p == plural).map(|&(_, _, printer)| printer)
    }

    /// Every resource (API group, plural) kache prints.
    #[cfg(test)]
    pub(crate) fn all() -> impl Iterator<Item = (&'static str, &'static str)> {
        PRINTERS.iter().map(|&(g, p, _)| (g, p))
    }

    /// The key of the kind's columns in `columns.json`: `group/plural`.
    fn key(self) -> String {
        PRINTERS.iter().find(|(_, _, p)| *p == self).map_or_else(String::new, |(g, p, _)| format!("{g}/{p}"))
    }

    /// The kind's `columnDefinitions` as compact JSON (an array), as the apiserver writes it.
    pub fn columns(self) -> &'static [u8] {
        static COLUMNS: OnceLock<HashMap<String, Vec<u8>>> = OnceLock::new();
        let all = COLUMNS.get_or_init(|| {
            let v: serde_json::Map<String, Value> = serde_json::from_str(include_str!("columns.json")).unwrap_or_default();
            v.into_iter().map(|(k, cols)| (k, crate::api::json::to_vec(&cols))).collect()
        });
        all.get(&self.key()).map_or(b"[]", Vec::as_slice)
    }

    /// The row template of an object (its decoded JSON).
    pub fn cells(self, v: &Value) -> Cells {
        let mut w = Writer::default();
        match self {
            Printer::Pod => print::pod(&mut w, v),
            Printer::Node => print::node(&mut w, v),
            Printer::Namespace => print::namespace(&mut w, v),
            Printer::ConfigMap => print::config_map(&mut w, v),
            Printer::Secret => print::secret(&mut w, v),
            Printer::ServiceAccount => print::service_account(&mut w, v),
            Printer::Service => print::service(&mut w, v),
            Printer::Endpoints => print::endpoints(&mut w, v),
            Printer::Event => print::event(&mut w, &print::CoreEvent::of(v)),
            Printer::EventsV1 => print::event(&mut w, &print::CoreEvent::of_events_v1(v)),
            Printer::PersistentVolumeClaim => print::persistent_volume_claim(&mut w, v),
            Printer::PersistentVolume => print::persistent_volume(&mut w, v),
            Printer::ReplicationController => print::replication_controller(&mut w, v),
            Printer::Deployment => print::deployment(&mut w, v),
            Printer::ReplicaSet => print::replica_set(&mut w, v),
            Printer::StatefulSet => print::stateful_set(&mut w, v),
            Printer::DaemonSet => print::daemon_set(&mut w, v),
            Printer::ControllerRevision => print::controller_revision(&mut w, v),
            Printer::Job => print::job(&mut w, v),
            Printer::CronJob => print::cron_job(&mut w, v),
            Printer::EndpointSlice => print::endpoint_slice(&mut w, v),
            Printer::Lease => print::lease(&mut w, v),
            Printer::Ingress => print::ingress(&mut w, v),
            Printer::IngressClass => print::ingress_class(&mut w, v),
            Printer::NetworkPolicy => print::network_policy(&mut w, v),
            Printer::StorageClass => print::storage_class(&mut w, v),
            Printer::PriorityClass => print::priority_class(&mut w, v),
            Printer::RoleBinding | Printer::ClusterRoleBinding => print::role_binding(&mut w, v),
            Printer::PodDisruptionBudget => print::pod_disruption_budget(&mut w, v),
            Printer::Default => print::default(&mut w, v),
        }
        w.finish()
    }
}

/// A row's cells (and conditions) as a template: JSON with relative times to fill in. One
/// allocation per object version held: the count of relative times (u32), each one's place
/// in the template (u32), a flag (1: an instant follows in 8 bytes as i64 unix microseconds,
/// as MicroTime keeps them; 0: none, printed `<unknown>`), then the template: `[cell,...]`
/// and, for finished pods, `,"conditions":[...]`: what follows `"cells":` in a row, up to
/// its `"object"`, relative times left out. All integers little-endian.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Cells {
    data: Box<[u8]>,
}

/// One piece of a rendered row: template bytes or a relative time.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Segment<'a> {
    /// Template bytes.
    Bytes(&'a [u8]),
    /// The time since this instant (unix microseconds), as the apiserver's printers write it.
    Since(Option<i64>),
}

impl Cells {
    /// The marker of cells withheld (larger than the cache's bound): no template at all.
    pub fn withheld() -> Cells {
        Cells::default()
    }

    /// Whether these are [`Cells::withheld`] (a real row always has its `[` and `]`).
    pub fn is_withheld(&self) -> bool {
        self.data.is_empty()
    }

    /// Bytes the template holds.
    pub fn len(&self) -> usize {
        self.data.len()
    }

    /// The template's JSON, without its relative times.
    fn json(&self) -> &[u8] {
        let mut at = 4;
        for _ in 0..self.time_count() {
            at += if self.data.get(at + 4) == Some(&1) { 13 } else { 5 };
        }
        self.data.get(at..).unwrap_or_default()
    }

    fn time_count(&self) -> usize {
        self.data.get(..4).map_or(0, |b| u32::from_le_bytes(b.try_into().unwrap_or_default()) as usize)
    }

    /// The relative times: where each goes in [`Cells::json`], and its instant.
    fn times(&self) -> impl Iterator<Item = (u32, Option<i64>)> + '_ {
        let mut at = 4;
        (0..self.time_count()).map_while(move |_| {
            let pos = u32::from_le_bytes(self.data.get(at..at + 4)?.try_into().ok()?);
            let t = match self.data.get(at + 4)? {
                1 => Some(i64::from_le_bytes(self.data.get(at + 5..at + 13)?.try_into().ok()?)),
                _ => None,
            };
            at += if t.is_some() { 13 } else { 5 };
            Some((pos, t))
        })
    }

    /// The template's pieces in order.
    pub fn segments(&self) -> impl Iterator<Item = Segment<'_>> {
        let json = self.json();
        let mut at = 0usize;
        let mut times = self.times();
        let mut pending: Option<Segment<'_>> = None;
        std::iter::from_fn(move || {
            if let Some(s) = pending.take() {
                return Some(s);
            }
            match times.next() {
                Some((pos, t)) => {
                    let bytes = json.get(at..pos as usize).unwrap_or_default();
                    at = pos as usize;
                    pending = Some(Segment::Since(t));
                    Some(Segment::Bytes(bytes))
                }
                None if at <= json.len() => {
                    let rest = &json[at..];
                    at = json.len() + 1;
                    Some(Segment::Bytes(rest))
                }
                None => None,
            }
        })
    }

    /// The template's bytes and its relative times (where each goes in them, and its
    /// instant), as [`Cells::from_parts`] takes them back.
    pub fn parts(&self) -> (&[u8], Vec<(u32, Option<i64>)>) {
        (self.json(), self.times().collect())
    }

    /// Cells from [`Cells::parts`], or `None` when a time's place lies outside the template
    /// or before the one ahead of it.
    pub fn from_parts(json: &[u8], times: Vec<(u32, Option<i64>)>) -> Option<Cells> {
        let in_order = times.windows(2).all(|w| w[0].0 <= w[1].0);
        let inside = times.last().is_none_or(|t| t.0 as usize <= json.len());
        (in_order && inside).then(|| Cells::of(json, &times))
    }

    fn of(json: &[u8], times: &[(u32, Option<i64>)]) -> Cells {
        let mut data = Vec::with_capacity(4 + times.len() * 13 + json.len());
        data.extend_from_slice(&(times.len() as u32).to_le_bytes());
        for (pos, t) in times {
            data.extend_from_slice(&pos.to_le_bytes());
            match t {
                Some(t) => {
                    data.push(1);
                    data.extend_from_slice(&t.to_le_bytes());
                }
                None => data.push(0),
            }
        }
        data.extend_from_slice(json);
        Cells { data: data.into_boxed_slice() }
    }

    /// The template filled in at `now` (unix seconds, fractional): the row's JSON from
    /// `"cells":`'s value on.
    pub fn render(&self, now: f64) -> Vec<u8> {
        let mut out = Vec::with_capacity(self.data.len() + 8);
        for s in self.segments() {
            match s {
                Segment::Bytes(b) => out.extend_from_slice(b),
                Segment::Since(t) => out.extend_from_slice(since(t, now).as_bytes()),
            }
        }
        out
    }
}

/// The time since `t` (unix microseconds) at `now` (unix seconds) as it goes inside a JSON
/// string (`<` and `>` escaped as Go escapes them), or `<unknown>` without a time.
pub fn since(t: Option<i64>, now: f64) -> String {
    let text = match t {
        Some(t) => human_duration(now - t as f64 / 1e6),
        None => "<unknown>".to_string(),
    };
    text.replace('<', "\\u003c").replace('>', "\\u003e")
}

/// A duration as the apiserver's printers write it (apimachinery's `HumanDuration`):
/// seconds up to 2 minutes, then minutes (with seconds under 10 minutes), hours (with
/// minutes under 8 hours), days (with hours under 8 days), years (with days under 8 years).
pub fn human_duration(secs: f64) -> String {
    let seconds = secs.trunc() as i64;
    if seconds < -1 {
        return "<invalid>".into();
    }
    if seconds < 0 {
        return "0s".into();
    }
    if seconds < 120 {
        return format!("{seconds}s");
    }
    let minutes = seconds / 60;
    if minutes < 10 {
        let s = seconds % 60;
        return if s == 0 { format!("{minutes}m") } else { format!("{minutes}m{s}s") };
    }
    if minutes < 180 {
        return format!("{minutes}m");
    }
    let hours = seconds / 3600;
    if hours < 8 {
        let m = minutes % 60;
        return if m == 0 { format!("{hours}h") } else { format!("{hours}h{m}m") };
    }
    if hours < 48 {
        return format!("{hours}h");
    }
    if hours < 24 * 8 {
        let h = hours % 24;
        return if h == 0 { format!("{}d", hours / 24) } else { format!("{}d{h}h", hours / 24) };
    }
    if hours < 24 * 365 * 2 {
        return format!("{}d", hours / 24);
    }
    if hours < 24 * 365 * 8 {
        let dy = (hours / 24) % 365;
        return if dy == 0 { format!("{}y", hours / 24 / 365) } else { format!("{}y{dy}d", hours / 24 / 365) };
    }
    format!("{}y", hours / 24 / 365)
}

/// Builds a [`Cells`] template.
#[derive(Default)]
pub(crate) struct Writer {
    json: Vec<u8>,
    times: Vec<(u32, Option<i64>)>,
    cells: usize,
    conditions: Option<&'static str>,
}

impl Writer {
    fn sep(&mut self) {
        self.json.push(if self.cells == 0 { b'[' } else { b',' });
        self.cells += 1;
    }

    /// A string cell.
    pub(crate) fn str(&mut self, s: &str) {
        self.sep();
        crate::api::json::write_str(&mut self.json, s);
    }

    /// An integer cell.
    pub(crate) fn int(&mut self, n: i64) {
        self.sep();
        self.json.extend_from_slice(n.to_string().as_bytes());
    }

    /// A `null` cell.
    pub(crate) fn null(&mut self) {
        self.sep();
        self.json.extend_from_slice(b"null");
    }

    /// A cell of raw JSON (a number).
    pub(crate) fn raw(&mut self, json: &[u8]) {
        self.sep();
        self.json.extend_from_slice(json);
    }

    /// A boolean cell.
    pub(crate) fn bool(&mut self, b: bool) {
        self.sep();
        self.json.extend_from_slice(if b { b"true" } else { b"false" });
    }

    /// A string cell of `before`, the time since `t` (unix microseconds), then `after`.
    pub(crate) fn since(&mut self, before: &str, t: Option<i64>, after: &str) {
        self.sep();
        self.json.push(b'"');
        self.json.extend_from_slice(before.as_bytes());
        self.times.push((self.json.len() as u32, t));
        self.json.extend_from_slice(after.as_bytes());
        self.json.push(b'"');
    }

    /// The row's conditions (JSON, written after the cells).
    pub(crate) fn conditions(&mut self, json: &'static str) {
        self.conditions = Some(json);
    }

    fn finish(mut self) -> Cells {
        if self.cells == 0 {
            self.json.push(b'[');
        }
        self.json.push(b']');
        if let Some(c) = self.conditions {
            self.json.extend_from_slice(b",\"conditions\":");
            self.json.extend_from_slice(c.as_bytes());
        }
        Cells::of(&self.json, &self.times)
    }
}

/// Parse an RFC 3339 time (Time or MicroTime) as the printers read it, in unix
/// microseconds (`None` when missing or zero).
pub(crate) fn time(v: &Value) -> Option<i64> {
    let (secs, nanos) = v.as_str().and_then(crate::api::time::parse_timestamp)?;
    (secs != crate::api::time::GO_ZERO_TIME_UNIX || nanos != 0).then(|| secs * 1_000_000 + i64::from(nanos) / 1000)
}

#[cfg(test)]
mod tests;
