//! The simulator's review APIs, shaped like the real apiserver's answers (golden 13a-c, 14):
//! TokenReview (who a token belongs to), SubjectAccessReview (may a user do something) and
//! SelfSubjectReview (who am I). Each echoes its spec in the apiserver's field order, with
//! `managedFields` naming the caller's User-Agent.

use super::rbac::{now_rfc3339, SimAuth};
use crate::api::status::Status;
use crate::auth::{Attributes, Identity, ResourceAttributes};
use crate::body::RequestBody;
use crate::body::{self, Body};
use crate::serve::respond;
use http::{header, Request, Response, StatusCode};
use serde_json::{json, Map, Value};

/// The paths served here.
pub const TOKEN_REVIEWS: &str = "/apis/authentication.k8s.io/v1/tokenreviews";
/// SubjectAccessReview.
pub const ACCESS_REVIEWS: &str = "/apis/authorization.k8s.io/v1/subjectaccessreviews";
/// SelfSubjectReview.
pub const SELF_REVIEWS: &str = "/apis/authentication.k8s.io/v1/selfsubjectreviews";

const MAX_BODY_BYTES: usize = 1 << 20;

/// The managedFields manager the apiserver derives from a User-Agent.
fn manager<B: RequestBody>(req: &Request<B>) -> String {
    let ua = req.headers().get(header::USER_AGENT).and_then(|v| v.to_str().ok()).unwrap_or("");
    ua.split('/').next().unwrap_or("").to_string()
}

async fn read<B: RequestBody>(req: Request<B>) -> Result<Value, Status> {
    let bytes = super::read_body(req, MAX_BODY_BYTES).await?;
    serde_json::from_slice(&bytes).map_err(|e| Status::bad_request(format!("the body of the request could not be decoded: {e}")))
}

/// `fieldsV1` of a set of fields: sorted keys, objects marked with `"."` below the top.
fn fields(v: &Map<String, Value>, top: bool) -> Value {
    let mut out = Map::new();
    if !top {
        out.insert(".".into(), json!({}));
    }
    let mut keys: Vec<&String> = v.keys().collect();
    keys.sort();
    for k in keys {
        let f = match &v[k] {
            Value::Object(m) => fields(m, false),
            _ => json!({}),
        };
        out.insert(format!("f:{k}"), f);
    }
    Value::Object(out)
}

fn respond(kind: &str, api_version: &str, manager: String, spec: Map<String, Value>, status: Value) -> Response<Body> {
    let managed = json!([{
        "manager": manager,
        "operation": "Update",
        "apiVersion": api_version,
        "time": now_rfc3339(),
        "fieldsType": "FieldsV1",
        "fieldsV1": {"f:spec": fields(&spec, true)},
    }]);
    let v = json!({"kind": kind, "apiVersion": api_version, "metadata": {"managedFields": managed}, "spec": spec, "status": status});
    let mut out = crate::api::json::to_vec(&v);
    out.push(b'\n');
    respond::respond(StatusCode::CREATED, "application/json", body::full(out))
}

fn string(v: &Value, k: &str) -> String {
    v.get(k).and_then(Value::as_str).unwrap_or("").to_string()
}

/// POST tokenreviews.
pub async fn token<B: RequestBody>(auth: Option<&SimAuth>, req: Request<B>) -> Result<Response<Body>, Status> {
    let mgr = manager(&req);
    let v = read(req).await?;
    let token = string(&v["spec"], "token");
    let mut spec = Map::new();
    spec.insert("token".into(), Value::String(token.clone()));
    if let Some(a) = v["spec"].get("audiences").filter(|a| a.as_array().is_some_and(|a| !a.is_empty())) {
        spec.insert("audiences".into(), a.clone());
    }
    let status = match auth.and_then(|a| a.token_user(&token)) {
        Some(user) => json!({"authenticated": true, "user": user, "audiences": ["https://kubernetes.default.svc.cluster.local"]}),
        None => json!({"user": {}, "error": "invalid bearer token"}),
    };
    Ok(respond("TokenReview", "authentication.k8s.io/v1", mgr, spec, status))
}

/// The attributes and identity a SubjectAccessReview spec asks about.
fn access_request(spec: &Value) -> Result<(Identity, Attributes), Status> {
    let id = Identity {
        username: string(spec, "user"),
        uid: string(spec, "uid"),
        groups: serde_json::from_value(spec.get("groups").cloned().unwrap_or(json!([])))
            .map_err(|e| Status::bad_request(format!("spec.groups: {e}")))?,
        extra: serde_json::from_value(spec.get("extra").cloned().unwrap_or(json!({})))
            .map_err(|e| Status::bad_request(format!("spec.extra: {e}")))?,
    };
    if id.username.is_empty() && id.groups.is_empty() {
        return Err(Status::invalid(
            "SubjectAccessReview",
            "",
            "spec.user: Invalid value: \"\": at least one of user or group must be specified",
        ));
    }
    let a = match (spec.get("resourceAttributes"), spec.get("nonResourceAttributes")) {
        (Some(r), None) => Attributes {
            verb: string(r, "verb"),
            path: String::new(),
            resource: Some(ResourceAttributes {
                namespace: string(r, "namespace"),
                group: string(r, "group"),
                version: string(r, "version"),
                resource: string(r, "resource"),
                subresource: string(r, "subresource"),
                name: string(r, "name"),
                field_selector: r.get("fieldSelector").map(|f| string(f, "rawSelector")).unwrap_or_default(),
                label_selector: r.get("labelSelector").map(|f| string(f, "rawSelector")).unwrap_or_default(),
            }),
        },
        (None, Some(n)) => Attributes { verb: string(n, "verb"), path: string(n, "path"), resource: None },
        _ => {
            return Err(Status::invalid(
                "SubjectAccessReview",
                "",
                "spec.resourceAttributes: Invalid value: \"null\": exactly one of nonResourceAttributes or resourceAttributes must be specified",
            ))
        }
    };
    Ok((id, a))
}

/// The spec echoed in the apiserver's field order, empty fields left out.
fn echo(spec: &Value) -> Map<String, Value> {
    let mut out = Map::new();
    let pick = |src: &Value, keys: &[&str]| {
        let mut m = Map::new();
        for k in keys {
            match src.get(*k) {
                None | Some(Value::Null) => {}
                Some(Value::String(s)) if s.is_empty() => {}
                Some(v) => {
                    m.insert((*k).to_string(), v.clone());
                }
            }
        }
        m
    };
    if let Some(r) = spec.get("resourceAttributes") {
        out.insert(
            "resourceAttributes".into(),
            Value::Object(pick(
                r,
                &["namespace", "verb", "group", "version", "resource", "subresource", "name", "fieldSelector", "labelSelector"],
            )),
        );
    }
    if let Some(n) = spec.get("nonResourceAttributes") {
        out.insert("nonResourceAttributes".into(), Value::Object(pick(n, &["path", "verb"])));
    }
    out.extend(pick(spec, &["user", "groups", "extra", "uid"]));
    if out.get("groups").is_some_and(|g| g.as_array().is_some_and(Vec::is_empty)) {
        out.remove("groups");
    }
    out
}

/// POST subjectaccessreviews. An open simulator (no auth) allows everything.
pub async fn access<B: RequestBody>(auth: Option<&SimAuth>, req: Request<B>) -> Result<Response<Body>, Status> {
    let mgr = manager(&req);
    let v = read(req).await?;
    let spec = v.get("spec").cloned().unwrap_or(Value::Null);
    let (id, a) = access_request(&spec)?;
    let allowed = auth.is_none_or(|auth| auth.allows(&id, &a));
    Ok(respond("SubjectAccessReview", "authorization.k8s.io/v1", mgr, echo(&spec), json!({"allowed": allowed})))
}

/// POST selfsubjectreviews: the caller's own identity.
pub fn whoami(id: &Identity) -> Response<Body> {
    let v = json!({
        "kind": "SelfSubjectReview",
        "apiVersion": "authentication.k8s.io/v1",
        "metadata": {"creationTimestamp": now_rfc3339()},
        "status": {"userInfo": id},
    });
    let mut out = crate::api::json::to_vec(&v);
    out.push(b'\n');
    respond::respond(StatusCode::CREATED, "application/json", body::full(out))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn golden(name: &str) -> Value {
        serde_json::from_slice(&crate::testdata::golden(name)).unwrap()
    }

    fn request(name: &str) -> Value {
        let text = String::from_utf8(crate::testdata::golden(name)).unwrap();
        serde_json::from_str(text.split("\n\n").nth(1).unwrap().trim()).unwrap()
    }

    #[test]
    fn access_review_echo_and_fields_match_golden() {
        for name in ["13b-subjectaccessreview-nobody-list-pods.json", "13c-subjectaccessreview-admin-masters-list-pods.json"] {
            let req = request(&format!("{name}.req"));
            let want = golden(&format!("{name}.body"));
            let spec = echo(&req["spec"]);
            assert_eq!(crate::api::json::to_vec(&Value::Object(spec.clone())), crate::api::json::to_vec(&want["spec"]), "{name} spec");
            assert_eq!(fields(&spec, true), want["metadata"]["managedFields"][0]["fieldsV1"]["f:spec"], "{name} fieldsV1");
            access_request(&req["spec"]).unwrap();
        }
    }

    #[test]
    fn user_info_serializes_like_the_apiserver() {
        let want = golden("14-selfsubjectreview-nobody.json.body");
        let id = Identity {
            username: "anchor-nobody".into(),
            uid: "uid-nobody".into(),
            groups: vec!["anchors:unprivileged".into(), "system:authenticated".into()],
            ..Identity::default()
        };
        assert_eq!(crate::api::json::to_vec(&json!(id)), crate::api::json::to_vec(&want["status"]["userInfo"]));
    }
}
