//! The one place errors become Kubernetes `Status` objects, encoded as JSON or protobuf the
//! way the apiserver writes them (key order, empty fields left out in JSON, written in pb).

use crate::api::{json, wire};
use serde::Serialize;

/// A `StatusCause`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Cause {
    /// Machine-readable reason, e.g. `ResourceVersionTooLarge`.
    pub reason: String,
    /// Human-readable message.
    pub message: String,
    /// The field the cause is about (`resourceVersionMatch`), if any.
    #[serde(skip_serializing_if = "String::is_empty")]
    pub field: String,
}

/// `StatusDetails`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Details {
    /// Object name.
    #[serde(skip_serializing_if = "String::is_empty")]
    pub name: String,
    /// API group.
    #[serde(skip_serializing_if = "String::is_empty")]
    pub group: String,
    /// Resource (plural), as the apiserver puts it in `kind`.
    #[serde(skip_serializing_if = "String::is_empty")]
    pub kind: String,
    /// Object uid.
    #[serde(skip_serializing_if = "String::is_empty")]
    pub uid: String,
    /// Causes.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub causes: Vec<Cause>,
    /// Seconds a client should wait before retrying.
    #[serde(skip_serializing_if = "is_zero")]
    pub retry_after_seconds: u32,
}

fn is_zero(v: &u32) -> bool {
    *v == 0
}

/// A Kubernetes `Status` (error or success).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Status {
    /// HTTP code; 0 for a Success status (written as code 0 in pb, left out in JSON).
    pub code: u16,
    /// `Failure` or `Success`.
    pub success: bool,
    /// Reason, e.g. `NotFound`; empty for Success.
    pub reason: String,
    /// Message; empty for Success.
    pub message: String,
    /// Details, if any (boxed: most errors have none, and `Status` travels in `Result`s).
    pub details: Option<Box<Details>>,
    /// `metadata.continue` (set on an expired continue token).
    pub continue_token: Option<String>,
}

/// A Status's message, as clients print an apiserver error (client-go's `StatusError`).
impl std::fmt::Display for Status {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.message)
    }
}

/// A Status is the error kache's own steps (the simulator's included) fail with.
impl std::error::Error for Status {}

#[derive(Serialize)]
struct StatusMeta<'a> {
    #[serde(rename = "continue", skip_serializing_if = "Option::is_none")]
    cont: Option<&'a str>,
}

#[derive(Serialize)]
struct JsonStatus<'a> {
    kind: &'static str,
    #[serde(rename = "apiVersion")]
    api_version: &'static str,
    metadata: StatusMeta<'a>,
    status: &'static str,
    #[serde(skip_serializing_if = "str::is_empty")]
    message: &'a str,
    #[serde(skip_serializing_if = "str::is_empty")]
    reason: &'a str,
    #[serde(skip_serializing_if = "Option::is_none")]
    details: Option<&'a Details>,
    #[serde(skip_serializing_if = "Option::is_none")]
    code: Option<u16>,
}

impl Status {
    /// A Failure status.
    pub fn failure(code: u16, reason: &str, message: impl Into<String>) -> Self {
        Status { code, success: false, reason: reason.to_string(), message: message.into(), details: None, continue_token: None }
    }

    /// The Success status a DELETE of most kinds returns.
    pub fn success(details: Details) -> Self {
        Status {
            code: 0,
            success: true,
            reason: String::new(),
            message: String::new(),
            details: Some(Box::new(details)),
            continue_token: None,
        }
    }

    /// 400 BadRequest.
    pub fn bad_request(message: impl Into<String>) -> Self {
        Self::failure(400, "BadRequest", message)
    }

    /// 404 NotFound for `resource` (plural, `pods` or `deployments.apps`) named `name`.
    pub fn not_found(group: &str, plural: &str, name: &str) -> Self {
        let qualified = qualify(group, plural);
        let mut s = Self::failure(404, "NotFound", format!("{qualified} \"{name}\" not found"));
        s.details = Some(Box::new(Details { name: name.into(), group: group.into(), kind: plural.into(), ..Details::default() }));
        s
    }

    /// 404 for a path that names no resource.
    pub fn no_route() -> Self {
        Self::failure(404, "NotFound", "the server could not find the requested resource")
    }

    /// 409 AlreadyExists.
    pub fn already_exists(group: &str, plural: &str, name: &str) -> Self {
        let mut s = Self::failure(409, "AlreadyExists", format!("{} \"{name}\" already exists", qualify(group, plural)));
        s.details = Some(Box::new(Details { name: name.into(), group: group.into(), kind: plural.into(), ..Details::default() }));
        s
    }

    /// 409 Conflict on a stale resourceVersion.
    pub fn conflict(group: &str, plural: &str, name: &str) -> Self {
        let msg = format!(
            "Operation cannot be fulfilled on {} \"{name}\": the object has been modified; please apply your changes to the latest version and try again",
            qualify(group, plural)
        );
        let mut s = Self::failure(409, "Conflict", msg);
        s.details = Some(Box::new(Details { name: name.into(), group: group.into(), kind: plural.into(), ..Details::default() }));
        s
    }

    /// 410 Expired.
    pub fn expired(message: impl Into<String>) -> Self {
        Self::failure(410, "Expired", message)
    }

    /// 410 for a watch from an RV older than the window (`oldest` is the oldest RV held).
    pub fn too_old(rv: u64, oldest: u64) -> Self {
        Self::expired(format!("too old resource version: {rv} ({oldest})"))
    }

    /// 504 Timeout for an RV the cache has not reached.
    pub fn too_large_rv(rv: u64, current: u64) -> Self {
        let mut s = Self::failure(504, "Timeout", format!("Timeout: Too large resource version: {rv}, current: {current}"));
        s.details = Some(Box::new(Details {
            causes: vec![Cause {
                reason: "ResourceVersionTooLarge".into(),
                message: "Too large resource version".into(),
                field: String::new(),
            }],
            retry_after_seconds: 1,
            ..Details::default()
        }));
        s
    }

    /// 401 Unauthorized: the credentials were missing (anonymous access off) or refused.
    pub fn unauthorized() -> Self {
        Self::failure(401, "Unauthorized", "Unauthorized")
    }

    /// 403 Forbidden, as the apiserver's authorizer writes it: `message` is the part after
    /// `is forbidden: ` (`User "u" cannot ...`); `plural` and `name` may be empty (a
    /// non-resource request).
    pub fn forbidden(group: &str, plural: &str, name: &str, message: &str) -> Self {
        let text = match (plural.is_empty(), name.is_empty()) {
            (true, _) => format!("forbidden: {message}"),
            (false, true) => format!("{} is forbidden: {message}", qualify(group, plural)),
            (false, false) => format!("{} \"{name}\" is forbidden: {message}", qualify(group, plural)),
        };
        let mut s = Self::failure(403, "Forbidden", text);
        s.details = Some(Box::new(Details { name: name.into(), group: group.into(), kind: plural.into(), ..Details::default() }));
        s
    }

    /// 429 TooManyRequests with a retry hint (sent as `Retry-After` too).
    pub fn too_many_requests(message: impl Into<String>, retry_after_seconds: u32) -> Self {
        let mut s = Self::failure(429, "TooManyRequests", message);
        s.details = Some(Box::new(Details { retry_after_seconds, ..Details::default() }));
        s
    }

    /// 414 RequestURITooLong.
    pub fn uri_too_long(limit: usize) -> Self {
        Self::failure(414, "RequestURITooLong", format!("the request URI is longer than {limit} bytes"))
    }

    /// 405 MethodNotAllowed.
    pub fn method_not_allowed() -> Self {
        Self::failure(405, "MethodNotAllowed", "the server does not allow this method on the requested resource")
    }

    /// 406 NotAcceptable.
    pub fn not_acceptable(accepted: &str) -> Self {
        Self::failure(406, "NotAcceptable", format!("only the following media types are accepted: {accepted}"))
    }

    /// 406 NotAcceptable with its own message (a view that does not fit the request).
    pub fn not_acceptable_message(message: String) -> Self {
        Self::failure(406, "NotAcceptable", message)
    }

    /// 415 UnsupportedMediaType.
    pub fn unsupported_media_type(content_type: &str) -> Self {
        Self::failure(415, "UnsupportedMediaType", format!("the body of the request was in an unknown format - accepted media types include: application/json, application/merge-patch+json ({content_type})"))
    }

    /// 422 Invalid.
    pub fn invalid(kind: &str, name: &str, message: &str) -> Self {
        Self::failure(422, "Invalid", format!("{kind} \"{name}\" is invalid: {message}"))
    }

    /// 500 InternalError.
    pub fn internal(message: impl Into<String>) -> Self {
        Self::failure(500, "InternalError", message)
    }

    /// 503 ServiceUnavailable.
    pub fn unavailable(message: impl Into<String>) -> Self {
        Self::failure(503, "ServiceUnavailable", message)
    }

    /// 503 ServiceUnavailable with a retry hint (sent as `Retry-After` too).
    pub fn unavailable_retry(message: impl Into<String>, retry_after_seconds: u32) -> Self {
        let mut s = Self::unavailable(message);
        s.details = Some(Box::new(Details { retry_after_seconds, ..Details::default() }));
        s
    }

    /// 504 Timeout with a retry hint, as the apiserver answers a request that did not
    /// complete in time.
    pub fn timeout(message: impl Into<String>, retry_after_seconds: u32) -> Self {
        let mut s = Self::failure(504, "Timeout", message);
        s.details = Some(Box::new(Details { retry_after_seconds, ..Details::default() }));
        s
    }

    /// Compact JSON, without the trailing newline.
    pub fn to_json(&self) -> Vec<u8> {
        json::to_vec(&JsonStatus {
            kind: "Status",
            api_version: "v1",
            metadata: StatusMeta { cont: self.continue_token.as_deref() },
            status: if self.success { "Success" } else { "Failure" },
            message: &self.message,
            reason: &self.reason,
            details: self.details.as_deref(),
            code: (!self.success).then_some(self.code),
        })
    }

    /// The bare protobuf `Status` message (no envelope).
    pub fn to_pb(&self) -> Vec<u8> {
        let mut m = Vec::with_capacity(128 + self.message.len());
        let cont = self.continue_token.as_deref();
        wire::put_bytes(&mut m, 1, &wire_list_meta(cont));
        wire::put_bytes(&mut m, 2, if self.success { b"Success" } else { b"Failure" });
        wire::put_bytes(&mut m, 3, self.message.as_bytes());
        wire::put_bytes(&mut m, 4, self.reason.as_bytes());
        if let Some(d) = &self.details {
            wire::put_bytes(&mut m, 5, &details_pb(d));
        }
        wire::put_uint(&mut m, 6, u64::from(self.code));
        m
    }

    /// The full body in the requested encoding (JSON ends with a newline).
    pub fn encode(&self, protobuf: bool) -> Vec<u8> {
        if protobuf {
            wire::envelope("v1", "Status", &self.to_pb())
        } else {
            let mut j = self.to_json();
            j.push(b'\n');
            j
        }
    }
}

fn qualify(group: &str, plural: &str) -> String {
    if group.is_empty() {
        plural.to_string()
    } else {
        format!("{plural}.{group}")
    }
}

fn wire_list_meta(cont: Option<&str>) -> Vec<u8> {
    let mut m = Vec::new();
    wire::put_bytes(&mut m, 1, b"");
    wire::put_bytes(&mut m, 2, b"");
    wire::put_bytes(&mut m, 3, cont.unwrap_or("").as_bytes());
    m
}

fn details_pb(d: &Details) -> Vec<u8> {
    let mut m = Vec::new();
    wire::put_bytes(&mut m, 1, d.name.as_bytes());
    wire::put_bytes(&mut m, 2, d.group.as_bytes());
    wire::put_bytes(&mut m, 3, d.kind.as_bytes());
    for c in &d.causes {
        let mut cm = Vec::new();
        wire::put_bytes(&mut cm, 1, c.reason.as_bytes());
        wire::put_bytes(&mut cm, 2, c.message.as_bytes());
        wire::put_bytes(&mut cm, 3, c.field.as_bytes());
        wire::put_bytes(&mut m, 4, &cm);
    }
    wire::put_uint(&mut m, 5, u64::from(d.retry_after_seconds));
    wire::put_bytes(&mut m, 6, d.uid.as_bytes());
    m
}

#[cfg(test)]
mod tests {
    use super::*;

    fn golden(name: &str) -> Vec<u8> {
        crate::testdata::golden(name)
    }

    #[test]
    fn not_found_matches_golden_json_and_pb() {
        let s = Status::not_found("", "pods", "does-not-exist");
        assert_eq!(s.encode(false), golden("10a-get-missing-pod-404.json.body"));
        assert_eq!(s.encode(true), golden("10a-get-missing-pod-404.pb.body"));
    }

    #[test]
    fn bad_selector_matches_golden() {
        let s = Status::bad_request("unable to parse requirement: found '', expected: ',', ')' or identifier");
        assert_eq!(s.encode(false), golden("10b-list-bad-labelselector-400.json.body"));
        assert_eq!(s.encode(true), golden("10b-list-bad-labelselector-400.pb.body"));
    }

    #[test]
    fn auth_errors_match_golden() {
        let msg = "User \"anchor-nobody\" cannot list resource \"pods\" in API group \"\" in the namespace \"golden\"";
        let s = Status::forbidden("", "pods", "", msg);
        assert_eq!(s.encode(false), golden("10h-list-pods-nobody-403.json.body"));
        assert_eq!(s.encode(true), golden("10h-list-pods-nobody-403.pb.body"));
        assert_eq!(Status::unauthorized().encode(false), golden("10j-list-pods-invalid-token-401.json.body"));
        assert_eq!(Status::unauthorized().encode(true), golden("10j-list-pods-invalid-token-401.pb.body"));
    }

    #[test]
    fn too_large_matches_golden() {
        let s = Status::too_large_rv(10061515, 61515);
        assert_eq!(s.encode(false), golden("10d-list-rv-too-large-notolderthan-504.json.body"));
    }

    #[test]
    fn conflict_and_expired_match_golden() {
        assert_eq!(
            Status::conflict("", "configmaps", "conflict-demo").encode(false),
            golden("10k-conflict-step3-stale-update-409.json.body")
        );
        assert_eq!(Status::conflict("", "configmaps", "conflict-demo").encode(true), golden("10k-conflict-step3-stale-update-409.pb.body"));
        assert_eq!(
            Status::expired("The resourceVersion for the provided list is too old.").encode(false),
            golden("10e-list-exact-rv1-limit5-410.json.body")
        );
    }

    #[test]
    fn success_delete_status_matches_golden_json() {
        let body = golden("05e-delete-configmap-200.json.body");
        let v: serde_json::Value = serde_json::from_slice(&body).unwrap();
        let d = &v["details"];
        let s = Status::success(Details {
            name: d["name"].as_str().unwrap().into(),
            kind: d["kind"].as_str().unwrap().into(),
            uid: d["uid"].as_str().unwrap().into(),
            ..Details::default()
        });
        assert_eq!(s.encode(false), body);
        let pb = golden("05e-delete-configmap-200.pb.body");
        let (_, _, raw) = wire::open_envelope(&pb).unwrap();
        assert!(raw.ends_with(&[0x30, 0x00]), "success writes code 0 in pb");
    }
}

/// A readable one-line summary of an upstream error body for logs and error messages: the
/// `message` (and `reason`) of a `Status` in JSON, in a protobuf envelope or as a bare
/// protobuf message (a watch's ERROR event), else the start of the text; never raw bytes.
pub fn describe_body(body: &[u8]) -> String {
    const MAX: usize = 300;
    let clip = |s: &str| s.chars().take(MAX).collect::<String>();
    if let Ok(v) = serde_json::from_slice::<serde_json::Value>(body) {
        if let Some(m) = v["message"].as_str() {
            return match v["reason"].as_str().filter(|r| !r.is_empty()) {
                Some(r) => clip(&format!("{r}: {m}")),
                None => clip(m),
            };
        }
    }
    let pb = match wire::open_envelope(body) {
        Some((_, kind, raw)) if kind == "Status" => Some(raw),
        Some((_, kind, _)) => return format!("a protobuf {kind} ({} bytes)", body.len()),
        None if std::str::from_utf8(body).is_err() => Some(body),
        None => None,
    };
    match pb.and_then(pb_status_text) {
        Some(text) => clip(&text),
        None if pb.is_some() => format!("{} bytes of undecodable binary data", body.len()),
        None => clip(&String::from_utf8_lossy(body)),
    }
}

/// `reason: message` of a bare protobuf `Status` message (fields 4 and 3).
fn pb_status_text(raw: &[u8]) -> Option<String> {
    let (mut pos, mut message, mut reason) = (0, None, None);
    while pos < raw.len() {
        let (field, wt, range) = wire::next_field(raw, &mut pos)?;
        if wt != prost::encoding::WireType::LengthDelimited {
            continue;
        }
        match field {
            3 => message = Some(std::str::from_utf8(&raw[range]).ok()?.to_string()),
            4 => reason = Some(std::str::from_utf8(&raw[range]).ok()?.to_string()),
            _ => {}
        }
    }
    let message = message?;
    Some(match reason.filter(|r| !r.is_empty()) {
        Some(r) => format!("{r}: {message}"),
        None => message,
    })
}

#[cfg(test)]
mod describe_tests {
    use super::*;

    #[test]
    fn protobuf_status_bodies_read_as_text() {
        let s = Status::too_many_requests("storage is (re)initializing", 1);
        assert_eq!(describe_body(&s.encode(true)), "TooManyRequests: storage is (re)initializing");
        assert_eq!(describe_body(&s.to_pb()), "TooManyRequests: storage is (re)initializing");
        assert_eq!(describe_body(&s.encode(false)), "TooManyRequests: storage is (re)initializing");
        assert_eq!(describe_body(b"plain words"), "plain words");
        let garbage = [0xffu8, 0xfe, 0x00, 0x81];
        let text = describe_body(&garbage);
        assert!(text.contains("4 bytes") && !text.contains('\u{fffd}'), "{text}");
    }
}
