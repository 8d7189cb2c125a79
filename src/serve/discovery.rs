//! Discovery: which resources the upstream serves (legacy discovery of `/api/v1` and every
//! group's preferred version), found at start and again every `REDISCOVERY`, so kinds
//! that appear later (new CRDs, new API versions) are cached too.

use crate::api::resource::{builtin_fields, Resource, ResourceRef};
use crate::cache::informer::{fetch, InformerError};
use crate::serve::upstream::Upstream;
use crate::serve::Serve;
use serde_json::Value;
use std::sync::Arc;
use std::time::Duration;

/// Whether a group is one of Kubernetes' own (served in protobuf), not a custom resource's.
fn builtin_group(group: &str) -> bool {
    group.is_empty() || !group.contains('.') || group.ends_with(".k8s.io")
}

fn resources_of(list: &Value, group: &str, version: &str) -> Vec<Resource> {
    let mut out = Vec::new();
    for e in list["resources"].as_array().into_iter().flatten() {
        let name = e["name"].as_str().unwrap_or("");
        let verbs: Vec<&str> = e["verbs"].as_array().into_iter().flatten().filter_map(Value::as_str).collect();
        if name.is_empty() || name.contains('/') || !verbs.contains(&"list") || !verbs.contains(&"watch") {
            continue;
        }
        let kind = e["kind"].as_str().unwrap_or("").to_string();
        let strings = |k: &str| e[k].as_array().into_iter().flatten().filter_map(Value::as_str).map(str::to_string).collect::<Vec<_>>();
        out.push(Resource {
            group: group.to_string(),
            version: version.to_string(),
            plural: name.to_string(),
            singular: e["singularName"].as_str().unwrap_or("").to_string(),
            namespaced: e["namespaced"].as_bool().unwrap_or(false),
            protobuf: builtin_group(group),
            short_names: strings("shortNames"),
            categories: strings("categories"),
            fields: builtin_fields(group, &kind).iter().map(|s| s.to_string()).collect(),
            index: (group.is_empty() && kind == "Pod").then(|| "spec.nodeName".to_string()),
            kind,
        });
    }
    out
}

async fn get_json(upstream: &Upstream, path: &str) -> Result<Value, InformerError> {
    let body = fetch(upstream, path, "application/json").await?;
    serde_json::from_slice(&body).map_err(|e| InformerError::Decode(e.to_string()))
}

/// Every listable and watchable resource the upstream serves (preferred versions).
pub async fn discover(upstream: &Upstream) -> Result<Vec<Resource>, InformerError> {
    let mut out = resources_of(&get_json(upstream, "/api/v1").await?, "", "v1");
    let groups = get_json(upstream, "/apis").await?;
    for g in groups["groups"].as_array().into_iter().flatten() {
        let (Some(name), Some(version)) = (g["name"].as_str(), g["preferredVersion"]["version"].as_str()) else { continue };
        match get_json(upstream, &format!("/apis/{name}/{version}")).await {
            Ok(list) => out.extend(resources_of(&list, name, version)),
            Err(e) => tracing::warn!(group = name, error = %e, "discovery of a group failed"),
        }
    }
    Ok(out)
}

/// How often the upstream's resources are discovered again, so kinds that appear later
/// (new CRDs, new API versions) are cached too.
const REDISCOVERY: Duration = Duration::from_secs(30);

/// Rediscover the upstream's resources every [`REDISCOVERY`] while `serve` lives. Caches of
/// kinds that disappear stay until their informers fail; requests for them pass through.
pub(crate) async fn rediscover(serve: std::sync::Weak<Serve>) {
    loop {
        tokio::time::sleep(REDISCOVERY).await;
        let Some(serve) = serve.upgrade() else { return };
        match discover(&serve.upstream).await {
            Ok(found) => {
                let found: Vec<ResourceRef> = found.into_iter().map(Arc::new).collect();
                if **serve.resources.load() != found {
                    tracing::info!(resources = found.len(), "upstream resources changed");
                    serve.resources.store(Arc::new(found));
                }
            }
            Err(e) => tracing::debug!(error = %e, "rediscovery failed; keeping the known resources"),
        }
    }
}
