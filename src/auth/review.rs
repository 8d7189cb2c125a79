//! Posting a review (TokenReview, SubjectAccessReview) to the upstream with kache's own
//! credentials and reading the answer, bounded in size.

use crate::body;
use crate::upstream::Upstream;
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

/// `review`, whose answer is given to `keep` (to cache it), or, when a last known decision
/// exists and the review takes longer than [`PATIENCE`], a [`ReviewError::Transport`] saying
/// so (the caller then uses that decision). The review goes on meanwhile, within its own
/// deadlines, and its answer is still kept: an upstream that is slow but answering keeps
/// deciding, instead of the last decision standing until the staleness bound.
pub(crate) async fn patiently<T: Send + 'static>(
    review: impl std::future::Future<Output = Result<T, ReviewError>> + Send + 'static,
    known: bool,
    keep: impl FnOnce(&T) + Send + 'static,
) -> Result<T, ReviewError> {
    let review = async move {
        let answer = review.await;
        if let Ok(a) = &answer {
            keep(a);
        }
        answer
    };
    if !known {
        return review.await;
    }
    match tokio::time::timeout(PATIENCE, tokio::spawn(review)).await {
        Ok(Ok(answer)) => answer,
        Ok(Err(e)) => Err(ReviewError::Transport(e.to_string())),
        Err(_) => Err(ReviewError::Transport(format!("no answer within {PATIENCE:?}; the last known decision holds"))),
    }
}

/// POST `review` to `path` and return the response's `status` object.
pub async fn post(upstream: &Upstream, path: &'static str, kind: &'static str, review: &Value) -> Result<Value, ReviewError> {
    // Fail fast while the upstream is known hung or unreachable: the caller then uses its
    // last known decision (within `--serve-stale-seconds`) or answers 503 at once.
    if let Some(why) = upstream.suspected() {
        return Err(ReviewError::Transport(why));
    }
    let mut req = Request::new(body::full(serde_json::to_vec(review).unwrap_or_default()));
    *req.method_mut() = Method::POST;
    *req.uri_mut() = http::Uri::from_static(path);
    req.headers_mut().insert(header::CONTENT_TYPE, HeaderValue::from_static("application/json"));
    req.headers_mut().insert(header::ACCEPT, HeaderValue::from_static("application/json"));
    // Headers within the `own` deadline (see `Upstream::send`), the body within as long again.
    let sent = tokio::select! {
        sent = upstream.send(req, crate::upstream::Class::Own) => sent,
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

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::{Arc, Mutex};
    use std::time::Duration;

    #[tokio::test(start_paused = true)]
    async fn a_review_slower_than_the_patience_still_keeps_its_answer() {
        let kept = Arc::new(Mutex::new(Vec::new()));
        let slow = async {
            tokio::time::sleep(Duration::from_secs(2)).await;
            Ok::<_, ReviewError>("allowed")
        };
        let keep = {
            let kept = kept.clone();
            move |a: &&str| kept.lock().unwrap().push(a.to_string())
        };
        let started = tokio::time::Instant::now();
        // A last known decision exists: the caller takes it after the patience...
        let got = patiently(slow, true, keep).await;
        assert!(matches!(got, Err(ReviewError::Transport(_))), "{got:?}");
        assert_eq!(started.elapsed(), PATIENCE);
        assert!(kept.lock().unwrap().is_empty());
        // ...and the review's answer, when it comes, is kept for the next request.
        tokio::time::sleep(Duration::from_secs(2)).await;
        assert_eq!(*kept.lock().unwrap(), ["allowed"]);
        // With nothing known the caller waits for the answer, which is kept too.
        let kept2 = kept.clone();
        let got =
            patiently(async { Ok::<_, ReviewError>("denied") }, false, move |a: &&str| kept2.lock().unwrap().push(a.to_string())).await;
        assert_eq!(got.unwrap(), "denied");
        assert_eq!(*kept.lock().unwrap(), ["allowed", "denied"]);
    }
}
