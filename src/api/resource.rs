//! The resource types kache knows: their names, scope, encodings and selectable fields.

use std::sync::Arc;

/// One resource type (a group/version/resource), as discovery describes it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Resource {
    /// API group; empty for the core group.
    pub group: String,
    /// API version, e.g. `v1`.
    pub version: String,
    /// Plural resource name used in paths, e.g. `pods`.
    pub plural: String,
    /// Singular name, e.g. `pod`.
    pub singular: String,
    /// Kind, e.g. `Pod`.
    pub kind: String,
    /// Whether objects live in namespaces.
    pub namespaced: bool,
    /// Whether the kind has a protobuf encoding (built-in kinds do, custom resources do not).
    pub protobuf: bool,
    /// kubectl short names.
    pub short_names: Vec<String>,
    /// Discovery categories (e.g. `all`).
    pub categories: Vec<String>,
    /// Field-selector fields beyond `metadata.name` and `metadata.namespace`.
    pub fields: std::sync::Arc<[String]>,
    /// The field with an index for O(result) equality selectors (`spec.nodeName` for pods).
    pub index: Option<String>,
}

/// Shared handle to a resource description.
pub type ResourceRef = Arc<Resource>;

impl Resource {
    /// `v1` for the core group, else `group/version`.
    pub fn api_version(&self) -> String {
        if self.group.is_empty() {
            self.version.clone()
        } else {
            format!("{}/{}", self.group, self.version)
        }
    }

    /// Whether this is a custom resource (a CRD's kind): served unstructured, so JSON only,
    /// with keys sorted at every level and `apiVersion`/`kind` kept on LIST items. Discovery
    /// tells custom resources by the upstream's CRD list, and they are exactly the kinds
    /// without protobuf.
    pub fn custom(&self) -> bool {
        !self.protobuf
    }

    /// Kind of the list type, e.g. `PodList`.
    pub fn list_kind(&self) -> String {
        format!("{}List", self.kind)
    }

    /// Whether `field` may be used in a field selector on this resource.
    pub fn supports_field(&self, field: &str) -> bool {
        field == "metadata.name" || (field == "metadata.namespace" && self.namespaced) || self.fields.iter().any(|f| f == field)
    }

    /// Every field a field selector may use.
    pub fn selectable_fields(&self) -> Vec<&str> {
        let mut all = vec!["metadata.name"];
        if self.namespaced {
            all.push("metadata.namespace");
        }
        all.extend(self.fields.iter().map(String::as_str));
        all
    }
}

/// The field-selector fields the apiserver supports for a built-in kind, beyond
/// `metadata.name`/`metadata.namespace` (k8s.io/kubernetes pkg/registry/*/strategy.go).
pub fn builtin_fields(group: &str, kind: &str) -> &'static [&'static str] {
    match (group, kind) {
        ("", "Pod") => &[
            "spec.nodeName",
            "spec.restartPolicy",
            "spec.schedulerName",
            "spec.serviceAccountName",
            "spec.hostNetwork",
            "status.phase",
            "status.podIP",
            "status.podIPs",
            "status.nominatedNodeName",
        ],
        ("", "Event") => &[
            "involvedObject.kind",
            "involvedObject.namespace",
            "involvedObject.name",
            "involvedObject.uid",
            "involvedObject.apiVersion",
            "involvedObject.resourceVersion",
            "involvedObject.fieldPath",
            "reason",
            "reportingComponent",
            "source",
            "type",
        ],
        ("", "Secret") => &["type"],
        ("", "Node") => &["spec.unschedulable"],
        ("", "Namespace") => &["status.phase"],
        ("", "ReplicationController") => &["status.replicas"],
        ("apps", "ReplicaSet") => &["status.replicas"],
        ("batch", "Job") => &["status.successful"],
        ("certificates.k8s.io", "CertificateSigningRequest") => &["spec.signerName"],
        _ => &[],
    }
}
