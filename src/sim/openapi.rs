//! A minimal OpenAPI v3 discovery for the simulator: per group/version, one document whose
//! operations carry the `x-kubernetes-group-version-kind` extension and the `fieldValidation`
//! parameter. That is what kubectl checks to use server-side field validation (and so skip
//! downloading schemas) in `kubectl apply`/`create`.

use crate::api::resource::ResourceRef;
use serde_json::{json, Map, Value};

fn gv_path(r: &ResourceRef) -> String {
    if r.group.is_empty() {
        format!("api/{}", r.version)
    } else {
        format!("apis/{}/{}", r.group, r.version)
    }
}

/// `/openapi/v3`: the index of group/version documents.
pub fn index(resources: &[ResourceRef]) -> Value {
    let mut paths = Map::new();
    for r in resources.iter().filter(|r| !crate::sim::catalog::read_only(r)) {
        let p = gv_path(r);
        paths.insert(p.clone(), json!({"serverRelativeURL": format!("/openapi/v3/{p}?hash=kache")}));
    }
    json!({"paths": paths})
}

/// `/openapi/v3/{api/v1 | apis/g/v}`: operations of every resource in that group/version.
pub fn group_version(resources: &[ResourceRef], gv: &str) -> Option<Value> {
    let mut paths = Map::new();
    // Read-only kinds (the simulator's CRDs) have no write operations to validate.
    for r in resources.iter().filter(|r| gv_path(r) == gv && !crate::sim::catalog::read_only(r)) {
        let gvk = json!({"group": r.group, "version": r.version, "kind": r.kind});
        let param = json!({"name": "fieldValidation", "in": "query", "schema": {"type": "string", "uniqueItems": true}});
        let op = |verb: &str| json!({"operationId": format!("{verb}{}", r.kind), "parameters": [param.clone()], "x-kubernetes-action": verb, "x-kubernetes-group-version-kind": gvk.clone(), "responses": {}});
        let prefix = if r.namespaced { format!("/{gv}/namespaces/{{namespace}}/{}", r.plural) } else { format!("/{gv}/{}", r.plural) };
        paths.insert(prefix.clone(), json!({"post": op("post")}));
        paths.insert(format!("{prefix}/{{name}}"), json!({"put": op("put"), "patch": op("patch")}));
    }
    if paths.is_empty() {
        return None;
    }
    Some(json!({"openapi": "3.0.0", "info": {"title": "Kubernetes", "version": "v1.36.2"}, "paths": paths, "components": {"schemas": {}}}))
}
