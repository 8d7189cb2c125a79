//! Responses as the apiserver sends them: the headers every response carries, and the HTTP
//! response of a Kubernetes [`Status`] (`api::status` only builds and encodes it).

use crate::api::status::Status;
use crate::api::wire;
use crate::body::{self, Body};
use http::{header, HeaderValue, Response, StatusCode};

/// A random (v4) UUID for the `Audit-Id` header, from the thread's RNG: `Uuid::new_v4` asks
/// the kernel for randomness on every call, a syscall per response.
fn audit_id() -> Option<HeaderValue> {
    let mut buf = [0u8; uuid::fmt::Hyphenated::LENGTH];
    let id = uuid::Builder::from_random_bytes(rand::random()).into_uuid();
    HeaderValue::from_bytes(id.hyphenated().encode_lower(&mut buf).as_bytes()).ok()
}

/// A response with the headers the apiserver puts on every response.
pub fn respond(code: StatusCode, content_type: &str, body: Body) -> Response<Body> {
    let mut resp = Response::new(body);
    *resp.status_mut() = code;
    let h = resp.headers_mut();
    if let Some(v) = audit_id() {
        h.insert("audit-id", v);
    }
    h.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache, private"));
    if let Ok(v) = HeaderValue::from_str(content_type) {
        h.insert(header::CONTENT_TYPE, v);
    }
    resp
}

/// A [`Status`] as the HTTP response the apiserver sends for it.
pub trait StatusResponse {
    /// The HTTP response for this status, in protobuf or JSON.
    fn into_response(self, protobuf: bool) -> Response<Body>;
}

impl StatusResponse for Status {
    fn into_response(self, protobuf: bool) -> Response<Body> {
        let http_code = StatusCode::from_u16(if self.success { 200 } else { self.code }).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
        let retry = self.details.as_ref().map(|d| d.retry_after_seconds).unwrap_or(0);
        let mut resp = if self.code == 406 && !self.success {
            // No encoder matched the Accept header, so the apiserver falls back to indented
            // JSON without a trailing newline, whatever was asked for (golden 11d).
            let b = serde_json::to_vec_pretty(&serde_json::from_slice::<serde_json::Value>(&self.to_json()).unwrap_or_default())
                .unwrap_or_default();
            respond(http_code, "application/json", body::full(b))
        } else {
            let ct = if protobuf { wire::PROTOBUF } else { "application/json" };
            respond(http_code, ct, body::full(self.encode(protobuf)))
        };
        if retry > 0 {
            resp.headers_mut().insert(http::header::RETRY_AFTER, HeaderValue::from(retry));
        }
        if self.code == 403 {
            resp.headers_mut().insert("x-content-type-options", HeaderValue::from_static("nosniff"));
        }
        resp
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testdata::golden;

    #[test]
    fn not_acceptable_is_indented_json_even_for_protobuf() {
        let s = Status::not_acceptable("application/json, application/yaml, application/vnd.kubernetes.protobuf");
        let resp = s.into_response(true);
        assert_eq!(resp.headers()[http::header::CONTENT_TYPE], "application/json");
        let body = futures_util::FutureExt::now_or_never(http_body_util::BodyExt::collect(resp.into_body())).unwrap().unwrap().to_bytes();
        assert_eq!(body.to_vec(), golden("11d-list-pods-as-table-protobuf-accept.pb.body"));
    }
}
