//! Posting a review (TokenReview, SubjectAccessReview) to the upstream with kache's own
//! credentials and reading the answer, bounded in size.

use crate::serve::body;
use crate::serve::upstream::Upstream;
use http::{header, HeaderValue, Method, Request};
use http_body_util::{BodyExt, Limited};
use serde_json::Value;

/// Largest review response kache reads.
const MAX_REVIEW_BYTES: usize = 1 << 20;

/// Why a review could not be obtained (the request is then refused with 503 or 500, and
/// nothing is cached).
#[derive(Debug, thiserror::Error)]
pub enum ReviewError {
    /// The upstream could not be reached or the answer not read.
    #[error("the upstream apiserver is unavailable: {0}")]
    Transport(String),
    /// The upstream refused the review (kache lacks the RBAC for it, or the API is off).
    #[error("the upstream refused a {kind} with HTTP {code}: {body}")]
    Refused {
        /// TokenReview or SubjectAccessReview.
        kind: &'static str,
        /// HTTP status.
        code: u16,
        /// Start of the body.
        body: String,
    },
    /// The answer was not the expected JSON.
    #[error("the upstream's {kind} answer could not be decoded: {message}")]
    Decode {
        /// TokenReview or SubjectAccessReview.
        kind: &'static str,
        /// What is wrong.
        message: String,
    },
}

impl ReviewError {
    /// The Status a client gets when its request cannot be judged.
    pub fn status(&self) -> crate::api::status::Status {
        match self {
            ReviewError::Transport(_) => crate::api::status::Status::unavailable_retry(self.to_string(), 1),
            _ => crate::api::status::Status::internal(self.to_string()),
        }
    }
}

/// How long a request waits for a review when a last known decision exists (one expired
/// less than `--serve-stale-seconds` ago): past this it takes that decision. An upstream
/// that has just hung is found by the health monitor only after its probe deadline (a few
/// seconds); until then a review would wait for its own deadline, and every cached read
/// whose decision just expired with it. A healthy apiserver answers reviews in
/// milliseconds.
pub const PATIENCE: std::time::Duration = std::time::Duration::from_secs(1);

/// `review`, or, when a last known decision exists and the review takes longer than
/// [`PATIENCE`], a [`ReviewError::Transport`] saying so (the caller then uses that decision).
pub(crate) async fn patiently<T>(review: impl std::future::Future<Output = Result<T, ReviewError>>, known: bool) -> Result<T, ReviewError> {
    match known {
        false => review.await,
        true => tokio::time::timeout(PATIENCE, review)
            .await
            .unwrap_or_else(|_| Err(ReviewError::Transport(format!("no answer within {PATIENCE:?}; the last known decision holds")))),
    }
}

/// POST `review` to `path` and return the response's `status` object.
pub async fn post(upstream: &Upstream, path: &'static str, kind: &'static str, review: &Value) -> Result<Value, ReviewError> {
    // Fail fast while the upstream is known hung or unreachable: the caller then uses its
    // last known decision (within `--serve-stale-seconds`) or answers 503 at once.
    if let Some(why) = upstream.unavailable() {
        return Err(ReviewError::Transport(why));
    }
    let mut req = Request::new(body::full(serde_json::to_vec(review).unwrap_or_default()));
    *req.method_mut() = Method::POST;
    *req.uri_mut() = http::Uri::from_static(path);
    req.headers_mut().insert(header::CONTENT_TYPE, HeaderValue::from_static("application/json"));
    req.headers_mut().insert(header::ACCEPT, HeaderValue::from_static("application/json"));
    // Headers within the `own` deadline (see `Upstream::send`), the body within as long again.
    let sent = tokio::select! {
        sent = upstream.send(req, crate::serve::upstream::Class::Own) => sent,
        why = upstream.until_unavailable() => return Err(ReviewError::Transport(why)),
    };
    let resp = sent.map_err(|e| ReviewError::Transport(e.to_string()))?;
    let code = resp.status().as_u16();
    let deadline = upstream.timeouts().own;
    let bytes = tokio::time::timeout(deadline, Limited::new(resp.into_body(), MAX_REVIEW_BYTES).collect())
        .await
        .map_err(|_| ReviewError::Transport(format!("the {kind} answer did not arrive within {deadline:?}")))?
        .map_err(|e| ReviewError::Transport(e.to_string()))?
        .to_bytes();
    if !(200..300).contains(&code) {
        return Err(ReviewError::Refused { kind, code, body: crate::api::status::describe_body(&bytes) });
    }
    let mut v: Value = serde_json::from_slice(&bytes).map_err(|e| ReviewError::Decode { kind, message: e.to_string() })?;
    match v.get_mut("status").map(Value::take) {
        Some(s @ Value::Object(_)) => Ok(s),
        _ => Err(ReviewError::Decode { kind, message: "no status".into() }),
    }
}
