//! Discovery: which resources the upstream serves (legacy discovery of `/api/v1` and every
//! group's preferred version), and which of them are custom resources (the upstream's CRDs:
//! JSON only), found at start and again every `REDISCOVERY`, so kinds that appear later
//! (new CRDs, new API versions) are cached too.

use crate::api::resource::{builtin_fields, Resource, ResourceRef};
use crate::cache::feed::{fetch, FeedError};
use crate::serve::Serve;
use crate::upstream::Upstream;
use serde_json::Value;
use std::sync::Arc;
use std::time::Duration;

/// Why the upstream's resources could not be discovered.
#[derive(Debug, thiserror::Error)]
pub enum DiscoveryError {
    /// A discovery document (or the CRD list) could not be fetched: the upstream could not be
    /// reached, answered with an error status, or stopped sending.
    #[error("cannot fetch {path}")]
    Fetch {
        /// The path asked for.
        path: String,
        /// What went wrong.
        #[source]
        source: FeedError,
    },
    /// A document that came is not the JSON it should be.
    #[error("{path} is not JSON")]
    Decode {
        /// The path asked for.
        path: String,
        /// What the parser found.
        #[source]
        source: serde_json::Error,
    },
}

/// A discovery document (or another of kache's GETs of JSON) as JSON.
async fn get_json(upstream: &Upstream, path: &str, accept: &str) -> Result<Value, DiscoveryError> {
    let body = fetch(upstream, path, accept).await.map_err(|source| DiscoveryError::Fetch { path: path.into(), source })?;
    serde_json::from_slice(&body).map_err(|source| DiscoveryError::Decode { path: path.into(), source })
}

/// The custom resources: every CRD is named `<plural>.<group>`.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub(crate) struct Crds(std::collections::HashSet<String>);

impl Crds {
    /// The upstream's CRDs (their names, listed as metadata, so their schemas are not sent).
    async fn fetch(upstream: &Upstream) -> Result<Crds, DiscoveryError> {
        const ACCEPT: &str = "application/json;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1,application/json";
        let list = get_json(upstream, "/apis/apiextensions.k8s.io/v1/customresourcedefinitions", ACCEPT).await?;
        let names = list["items"].as_array().into_iter().flatten().filter_map(|i| i["metadata"]["name"].as_str()).map(str::to_string);
        Ok(Crds(names.collect()))
    }

    /// Whether `plural` in `group` is a custom resource.
    fn contains(&self, group: &str, plural: &str) -> bool {
        !group.is_empty() && self.0.contains(&format!("{plural}.{group}"))
    }
}

/// Which kinds are custom resources, when the upstream's CRDs cannot be listed (no right to,
/// or no apiextensions API): by the group's name, Kubernetes' own groups being the core
/// group, groups without a dot and `*.k8s.io`. A CRD in a `*.k8s.io` group is then taken for
/// built in until its protobuf feed's 406 says otherwise.
fn custom_by_name(group: &str) -> bool {
    !(group.is_empty() || !group.contains('.') || group.ends_with(".k8s.io"))
}

fn resources_of(list: &Value, group: &str, version: &str, crds: Option<&Crds>) -> Vec<Resource> {
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
            protobuf: !crds.map_or_else(|| custom_by_name(group), |c| c.contains(group, name)),
            short_names: strings("shortNames"),
            categories: strings("categories"),
            fields: builtin_fields(group, &kind).iter().map(|s| s.to_string()).collect(),
            index: (group.is_empty() && kind == "Pod").then(|| "spec.nodeName".to_string()),
            kind,
        });
    }
    out
}

/// The `Accept` of discovery documents.
const JSON: &str = "application/json";

/// Every listable and watchable resource the upstream serves (preferred versions).
pub async fn discover(upstream: &Upstream) -> Result<Vec<Resource>, DiscoveryError> {
    let crds = match Crds::fetch(upstream).await {
        Ok(c) => Some(c),
        Err(e) => {
            static SAID: std::sync::Once = std::sync::Once::new();
            SAID.call_once(|| {
                tracing::warn!(
                    error = &e as &dyn std::error::Error,
                    "the upstream's CRDs cannot be listed; custom resources told by their group's name"
                )
            });
            None
        }
    };
    let crds = crds.as_ref();
    let mut out = resources_of(&get_json(upstream, "/api/v1", JSON).await?, "", "v1", crds);
    let groups = get_json(upstream, "/apis", JSON).await?;
    for g in groups["groups"].as_array().into_iter().flatten() {
        let (Some(name), Some(version)) = (g["name"].as_str(), g["preferredVersion"]["version"].as_str()) else { continue };
        match get_json(upstream, &format!("/apis/{name}/{version}"), JSON).await {
            Ok(list) => out.extend(resources_of(&list, name, version, crds)),
            Err(e) => tracing::warn!(group = name, error = &e as &dyn std::error::Error, "discovery of a group failed"),
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
            Err(e) => tracing::debug!(error = &e as &dyn std::error::Error, "rediscovery failed; keeping the known resources"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn custom_resources_come_from_the_crd_list_not_the_group_name() {
        let list = serde_json::json!({"resources": [
            {"name": "gadgets", "kind": "Gadget", "namespaced": false, "verbs": ["get", "list", "watch"]},
            {"name": "leases", "kind": "Lease", "namespaced": true, "verbs": ["get", "list", "watch"]},
        ]});
        let crds = Crds(["gadgets.fid.k8s.io".to_string()].into());
        let found = resources_of(&list, "fid.k8s.io", "v1", Some(&crds));
        assert!(found[0].custom() && !found[0].protobuf, "a CRD in a *.k8s.io group is a custom resource");
        assert!(found[1].protobuf, "a kind no CRD defines is built in");
        // Without the CRD list, the group's name is all there is.
        assert!(resources_of(&list, "fid.k8s.io", "v1", None)[0].protobuf);
        assert!(resources_of(&list, "fid.example.com", "v1", None)[0].custom());
        assert!(resources_of(&list, "fid.example.com", "v1", Some(&Crds::default()))[0].protobuf, "the CRD list is believed");
    }
}
