//! The simulator's CustomResourceDefinitions (`apiextensions.k8s.io/v1`): one for each custom
//! resource in its catalogue, as a v1.36 apiserver returns an established CRD. They are the one
//! source of those kinds' printer columns: the simulator prints their Tables with the
//! [`CustomColumns`] of the CRD it serves, as kache does once it has read that CRD.

use crate::api::resource::Resource;
use crate::api::status::Status;
use crate::api::table::CustomColumns;
use crate::sim::catalog::{self, CRD_GROUP};
use serde_json::{json, Value};
use std::sync::Arc;

/// The CRD of custom resource `r`, named `<plural>.<group>`, with `uid`, created (and its
/// conditions reached) at `created` (RFC 3339). Its `resourceVersion` is empty, in its place
/// for the store to fill. Fields are in the order the apiserver writes them (Go's struct order).
pub fn definition(r: &Resource, uid: &str, created: &str) -> Value {
    let mut names = json!({"plural": r.plural, "singular": r.singular});
    if !r.short_names.is_empty() {
        names["shortNames"] = json!(r.short_names);
    }
    names["kind"] = json!(r.kind);
    names["listKind"] = json!(r.list_kind());
    if !r.categories.is_empty() {
        names["categories"] = json!(r.categories);
    }
    let open = json!({"type": "object", "x-kubernetes-preserve-unknown-fields": true});
    let mut version = json!({
        "name": r.version, "served": true, "storage": true,
        "schema": {"openAPIV3Schema": {"type": "object", "properties": {"spec": open.clone(), "status": open}}},
    });
    if catalog::has_status(r) {
        version["subresources"] = json!({"status": {}});
    }
    if let Some(columns) = printer_columns(r) {
        version["additionalPrinterColumns"] = columns;
    }
    let condition = |ty: &str, reason: &str, message: &str| json!({"type": ty, "status": "True", "lastTransitionTime": created, "reason": reason, "message": message});
    json!({
        "kind": "CustomResourceDefinition",
        "apiVersion": format!("{CRD_GROUP}/v1"),
        "metadata": {"name": format!("{}.{}", r.plural, r.group), "uid": uid, "resourceVersion": "", "generation": 1, "creationTimestamp": created},
        "spec": {
            "group": r.group, "names": names.clone(), "scope": if r.namespaced { "Namespaced" } else { "Cluster" },
            "versions": [version], "conversion": {"strategy": "None"},
        },
        "status": {
            "conditions": [
                condition("NamesAccepted", "NoConflicts", "no conflicts found"),
                condition("Established", "InitialNamesAccepted", "the initial names have been accepted"),
            ],
            "acceptedNames": names,
            "storedVersions": [r.version],
        },
    })
}

/// The `additionalPrinterColumns` of a custom resource's CRD (none: the apiserver's default
/// `Age` column). Widgets have those of the CRD in `testdata/crd/crd-widgets.json`, which
/// a real apiserver's Tables were captured with: every column type, priorities 0 to 2, and
/// paths with indexes, wildcards and filters.
fn printer_columns(r: &Resource) -> Option<Value> {
    match (r.group.as_str(), r.plural.as_str()) {
        ("example.com", "widgets") => Some(json!([
            {"name": "Phase", "type": "string", "jsonPath": ".status.phase"},
            {"name": "Replicas", "type": "integer", "format": "int32", "description": "Desired replicas", "jsonPath": ".spec.replicas"},
            {"name": "Ratio", "type": "number", "jsonPath": ".spec.ratio"},
            {"name": "Ready", "type": "boolean", "jsonPath": ".status.ready"},
            {"name": "Started", "type": "date", "jsonPath": ".status.startedAt"},
            {"name": "Owner", "type": "string", "jsonPath": ".spec.owner.name"},
            {"name": "Tags", "type": "string", "jsonPath": ".spec.tags"},
            {"name": "Count", "type": "string", "jsonPath": ".spec.replicas"},
            {"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"},
            {"name": "Limits", "type": "string", "priority": 1, "jsonPath": ".spec.limits"},
            {"name": "First", "type": "string", "priority": 1, "jsonPath": ".spec.tags[0]"},
            {"name": "Cond", "type": "string", "priority": 1, "jsonPath": ".status.conditions[?(@.type==\"Ready\")].status"},
            {"name": "Flag", "type": "string", "priority": 1, "jsonPath": ".status.ready"},
            {"name": "Label", "type": "string", "priority": 2, "jsonPath": ".metadata.labels.app"},
            {"name": "Nil", "type": "string", "priority": 1, "jsonPath": ".spec.limits.nested.x[3]"},
            {"name": "Half", "type": "integer", "priority": 1, "jsonPath": ".spec.limits.nested.x[1]"},
            {"name": "Any", "type": "string", "priority": 1, "jsonPath": ".status.conditions[*].type"},
        ])),
        _ => None,
    }
}

/// The printer columns of custom resource `r`, from its CRD among `crds`.
pub fn columns(crds: &[Value], r: &Resource) -> Result<Arc<CustomColumns>, Status> {
    let name = format!("{}.{}", r.plural, r.group);
    let crd = crds.iter().find(|c| c["metadata"]["name"] == name.as_str()).ok_or_else(|| Status::internal(format!("no CRD {name}")))?;
    CustomColumns::of_crd(crd, &r.version).map(Arc::new).map_err(|e| Status::internal(format!("CRD {name}: {e}")))
}

#[cfg(test)]
mod tests;
