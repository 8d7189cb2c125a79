//! The simulator's catalogue: the resource types it serves and their discovery documents
//! (`/api`, `/apis`, group and resource lists) as a v1.36 apiserver writes them.

use crate::api::resource::{builtin_fields, Resource, ResourceRef};
use serde_json::{json, Value};

/// The API group of CustomResourceDefinitions.
pub const CRD_GROUP: &str = "apiextensions.k8s.io";
/// Their resource.
pub const CRD_PLURAL: &str = "customresourcedefinitions";

/// Whether `r` is the CustomResourceDefinitions resource itself (the simulator serves one
/// CRD per custom resource of its catalogue, see `sim::crd`).
pub fn is_crd(r: &Resource) -> bool {
    r.group == CRD_GROUP && r.plural == CRD_PLURAL
}

#[allow(clippy::too_many_arguments)]
fn builtin(group: &str, plural: &str, singular: &str, kind: &str, namespaced: bool, protobuf: bool, short: &[&str], all: bool) -> Resource {
    let index = (group.is_empty() && kind == "Pod").then(|| "spec.nodeName".to_string());
    Resource {
        group: group.to_string(),
        version: "v1".to_string(),
        plural: plural.to_string(),
        singular: singular.to_string(),
        kind: kind.to_string(),
        namespaced,
        protobuf,
        short_names: short.iter().map(|s| s.to_string()).collect(),
        categories: if all { vec!["all".to_string()] } else { vec![] },
        fields: builtin_fields(group, kind).iter().map(|s| s.to_string()).collect(),
        index,
    }
}

/// The catalogue's resource with this plural (tests and benchmarks name their kinds so).
///
/// # Panics
/// When the catalogue has no such resource.
pub fn resource(plural: &str) -> Resource {
    simulated().into_iter().find(|r| r.plural == plural).unwrap_or_else(|| panic!("no {plural} in the simulated catalogue"))
}

/// The resource types the simulator serves.
pub fn simulated() -> Vec<Resource> {
    vec![
        builtin("", "namespaces", "namespace", "Namespace", false, true, &["ns"], false),
        builtin("", "nodes", "node", "Node", false, true, &["no"], false),
        builtin("", "pods", "pod", "Pod", true, true, &["po"], true),
        builtin("", "services", "service", "Service", true, true, &["svc"], true),
        builtin("", "configmaps", "configmap", "ConfigMap", true, true, &["cm"], false),
        builtin("", "secrets", "secret", "Secret", true, true, &[], false),
        builtin("", "events", "event", "Event", true, true, &["ev"], false),
        builtin("", "endpoints", "endpoints", "Endpoints", true, true, &["ep"], false),
        builtin("apps", "deployments", "deployment", "Deployment", true, true, &["deploy"], true),
        Resource {
            categories: vec!["api-extensions".to_string()],
            ..builtin(CRD_GROUP, CRD_PLURAL, "customresourcedefinition", "CustomResourceDefinition", false, true, &["crd", "crds"], false)
        },
        // Custom resources (each with its CRD above, `sim::crd`) last, as an apiserver lists
        // the groups of CRDs after its own.
        builtin("example.com", "widgets", "widget", "Widget", true, false, &["wd"], false),
    ]
}

/// Whether the simulator serves the kind in protobuf: every built-in kind except
/// CustomResourceDefinitions. kache's protobuf schema lacks their JSONSchemaProps (whose
/// fields are either-or types), so the simulator serves them as JSON only, where a real
/// apiserver serves protobuf too: a client asking only for protobuf gets 406.
pub fn serves_protobuf(r: &Resource) -> bool {
    r.protobuf && !is_crd(r)
}

/// Whether the simulator refuses writes to the kind (405): its CRDs, which follow from the
/// catalogue (a new or changed CRD would not change what it serves), are only read.
pub fn read_only(r: &Resource) -> bool {
    is_crd(r)
}

/// Subresources the simulator serves for a resource (`status` for kinds that have one).
fn subresources(r: &Resource) -> &'static [&'static str] {
    match r.kind.as_str() {
        "Pod" | "Node" | "Namespace" | "Service" | "Deployment" | "Widget" => &["status"],
        _ => &[],
    }
}

/// Whether the kind has a `/status` subresource (its main resource then ignores status).
pub fn has_status(r: &Resource) -> bool {
    subresources(r).contains(&"status")
}

/// Whether DELETE of the collection is allowed (the apiserver refuses it for namespaces).
pub fn allows_delete_collection(r: &Resource) -> bool {
    !(r.group.is_empty() && r.kind == "Namespace")
}

fn resource_entry(r: &Resource) -> Value {
    let verbs: Vec<&str> = ["create", "delete", "deletecollection", "get", "list", "patch", "update", "watch"]
        .into_iter()
        .filter(|v| *v != "deletecollection" || allows_delete_collection(r))
        .filter(|v| !read_only(r) || matches!(*v, "get" | "list" | "watch"))
        .collect();
    let mut e = json!({
        "name": r.plural, "singularName": r.singular, "namespaced": r.namespaced, "kind": r.kind, "verbs": verbs,
    });
    if !r.short_names.is_empty() {
        e["shortNames"] = json!(r.short_names);
    }
    if !r.categories.is_empty() {
        e["categories"] = json!(r.categories);
    }
    e
}

/// `APIResourceList` for one group/version.
pub fn resource_list(resources: &[ResourceRef], group: &str, version: &str) -> Value {
    let mut entries = Vec::new();
    for r in resources.iter().filter(|r| r.group == group && r.version == version) {
        entries.push(resource_entry(r));
        for sub in subresources(r) {
            entries.push(json!({
                "name": format!("{}/{sub}", r.plural), "singularName": "", "namespaced": r.namespaced,
                "kind": r.kind, "verbs": ["get", "patch", "update"],
            }));
        }
    }
    if group.is_empty() {
        json!({"kind": "APIResourceList", "groupVersion": version, "resources": entries})
    } else {
        json!({"kind": "APIResourceList", "apiVersion": "v1", "groupVersion": format!("{group}/{version}"), "resources": entries})
    }
}

/// `APIVersions` for `/api`.
pub fn api_versions(server_address: &str) -> Value {
    json!({"kind": "APIVersions", "versions": ["v1"],
           "serverAddressByClientCIDRs": [{"clientCIDR": "0.0.0.0/0", "serverAddress": server_address}]})
}

/// `APIGroupList` for `/apis`.
pub fn group_list(resources: &[ResourceRef]) -> Value {
    let mut groups: Vec<Value> = Vec::new();
    let mut seen: Vec<(&str, &str)> = Vec::new();
    for r in resources.iter().filter(|r| !r.group.is_empty()) {
        if seen.contains(&(r.group.as_str(), r.version.as_str())) {
            continue;
        }
        seen.push((&r.group, &r.version));
        let gv = json!({"groupVersion": r.api_version(), "version": r.version});
        groups.push(json!({"name": r.group, "versions": [gv.clone()], "preferredVersion": gv}));
    }
    json!({"kind": "APIGroupList", "apiVersion": "v1", "groups": groups})
}

/// `APIGroup` for `/apis/{group}`.
pub fn group(resources: &[ResourceRef], group: &str) -> Option<Value> {
    let r = resources.iter().find(|r| r.group == group)?;
    let gv = json!({"groupVersion": r.api_version(), "version": r.version});
    Some(json!({"kind": "APIGroup", "apiVersion": "v1", "name": group, "versions": [gv.clone()], "preferredVersion": gv}))
}

/// The `/version` document.
pub fn version() -> Value {
    json!({
        "major": "1", "minor": "36", "emulationMajor": "1", "emulationMinor": "36",
        "minCompatibilityMajor": "1", "minCompatibilityMinor": "35",
        "gitVersion": "v1.36.2-kache", "gitCommit": env!("CARGO_PKG_VERSION"), "gitTreeState": "clean",
        "buildDate": "2026-11-22T00:00:00Z", "goVersion": "rust", "compiler": "rustc",
        "platform": format!("{}/{}", std::env::consts::OS, std::env::consts::ARCH),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    fn golden(name: &str) -> Value {
        serde_json::from_slice(&crate::testdata::golden(name)).unwrap()
    }

    fn arcs() -> Vec<ResourceRef> {
        simulated().into_iter().map(Arc::new).collect()
    }

    #[test]
    fn core_resource_entries_match_the_apiserver() {
        let real = golden("12c-api-v1.json.body");
        let ours = resource_list(&arcs(), "", "v1");
        assert_eq!(ours["kind"], real["kind"]);
        assert!(ours.get("apiVersion").is_none() && real.get("apiVersion").is_none());
        for name in ["pods", "configmaps", "namespaces", "nodes", "secrets", "events", "services", "pods/status"] {
            let find = |v: &Value| v["resources"].as_array().unwrap().iter().find(|e| e["name"] == name).cloned().unwrap();
            let (mut a, b) = (find(&ours), find(&real));
            for k in ["name", "singularName", "namespaced", "kind", "shortNames", "categories"] {
                assert_eq!(a.get(k), b.get(k), "{name}.{k}");
            }
            if !name.contains('/') {
                a["verbs"].as_array_mut().unwrap().sort_by_key(|v| v.to_string());
                let mut bv = b["verbs"].clone();
                bv.as_array_mut().unwrap().sort_by_key(|v| v.to_string());
                assert_eq!(a["verbs"], bv, "{name} verbs");
            }
        }
    }

    #[test]
    fn apps_group_list_entry_matches_the_apiserver() {
        let real = golden("12d-apis.json.body");
        let ours = group_list(&arcs());
        let pick = |v: &Value| v["groups"].as_array().unwrap().iter().find(|g| g["name"] == "apps").cloned().unwrap();
        assert_eq!(pick(&ours), pick(&real));
        assert_eq!(ours["kind"], real["kind"]);
        assert_eq!(ours["apiVersion"], real["apiVersion"]);
    }

    #[test]
    fn pods_support_the_node_name_field() {
        let pods = resource("pods");
        assert!(pods.supports_field("spec.nodeName"));
        assert!(!pods.supports_field("spec.bogus"));
        assert_eq!(pods.index.as_deref(), Some("spec.nodeName"));
    }
}
