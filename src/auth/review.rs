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

/// Default of the reviews in flight at once in each lane ([`Lanes`]).
pub const LANE: usize = 64;

/// Reviews in flight at once, in two lanes: renewals of a decision kache has known (a
/// client it has judged before, whose decision expired) and first reviews (new clients, and
/// every made-up token or request). A flood of first reviews waits in its own lane; clients
/// kache knows are judged meanwhile.
#[derive(Debug)]
pub struct Lanes {
    renew: std::sync::Arc<tokio::sync::Semaphore>,
    first: std::sync::Arc<tokio::sync::Semaphore>,
}

impl Lanes {
    /// Two lanes of `n` reviews each (0: no bound).
    pub fn new(n: usize) -> Lanes {
        let n = if n == 0 { tokio::sync::Semaphore::MAX_PERMITS } else { n };
        let lane = || std::sync::Arc::new(tokio::sync::Semaphore::new(n));
        Lanes { renew: lane(), first: lane() }
    }

    /// A place in the lane of a review with (`known`) or without a last known decision.
    async fn enter(&self, known: bool) -> Option<tokio::sync::OwnedSemaphorePermit> {
        let lane = if known { &self.renew } else { &self.first };
        match lane.clone().try_acquire_owned() {
            Ok(p) => Some(p),
            Err(_) => {
                crate::telemetry::limit_hit("max-concurrent-reviews");
                lane.clone().acquire_owned().await.ok()
            }
        }
    }
}

/// One review at a time per key: requests needing the review of the same key while it is
/// asked (a controller starting its watches with one token, two hundred node agents listing
/// together) wait for that one and then take its answer from the cache, instead of each
/// sending their own.
#[derive(Debug)]
pub(crate) struct Turns<K: Eq + std::hash::Hash>(dashmap::DashMap<K, std::sync::Arc<tokio::sync::Mutex<()>>>);

impl<K: Eq + std::hash::Hash + Clone> Default for Turns<K> {
    fn default() -> Self {
        Turns(dashmap::DashMap::new())
    }
}

impl<K: Eq + std::hash::Hash + Clone> Turns<K> {
    /// `work` (which looks in the cache again, then reviews), once the turn of `key` is ours.
    pub(crate) async fn one_at_a_time<T>(&self, key: &K, work: impl std::future::Future<Output = T>) -> T {
        let turn = self.0.entry(key.clone()).or_default().clone();
        let answer = {
            let _turn = turn.lock().await;
            work.await
        };
        self.0.remove_if(key, |_, t| std::sync::Arc::ptr_eq(t, &turn) && std::sync::Arc::strong_count(t) <= 2);
        answer
    }

    /// Whether no turn is held or waited for.
    #[cfg(test)]
    pub(crate) fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

/// How long a review may keep a request waiting when kache knows the last decision (within
/// `--serve-stale`): about what a cached read takes. Past it the last decision
/// stands for the request (see [`judged`]).
pub(crate) const REVIEW_GRACE: std::time::Duration = std::time::Duration::from_millis(100);

/// How long a last known decision that stood for a request ([`REVIEW_GRACE`]) is held as
/// fresh: the renewal still under way replaces it when it answers, and meanwhile the
/// requests of the same client are not each kept waiting for the grace.
pub(crate) const STOOD_FOR: std::time::Duration = std::time::Duration::from_secs(1);

/// `review`, in its lane, whose answer is given to `keep` (to cache it). A first review
/// (no decision `known`) is waited for: nothing else can decide. A renewal is waited for at
/// most [`REVIEW_GRACE`]; past it the caller gets [`ReviewError::Transport`] and uses its
/// last known decision, so that a read kache answers from memory does not wait on a slow or
/// hung upstream (one found hung fails at once, see [`post`]). The review runs on its own
/// task, holding its place in the lane: a client that goes away, or a renewal that outlasts
/// the grace, does not waste it, its answer is still kept.
pub(crate) async fn judged<T: Send + 'static>(
    lanes: &Lanes,
    known: bool,
    review: impl std::future::Future<Output = Result<T, ReviewError>> + Send + 'static,
    keep: impl FnOnce(&T) + Send + 'static,
) -> Result<T, ReviewError> {
    let judged = async {
        let place = lanes.enter(known).await;
        let review = async move {
            let _place = place;
            let answer = review.await;
            if let Ok(a) = &answer {
                keep(a);
            }
            answer
        };
        match tokio::spawn(review).await {
            Ok(answer) => answer,
            Err(e) => Err(ReviewError::Transport(e.to_string())),
        }
    };
    if !known {
        return judged.await;
    }
    match tokio::time::timeout(REVIEW_GRACE, judged).await {
        Ok(answer) => answer,
        Err(_) => Err(ReviewError::Transport(format!("no answer within {REVIEW_GRACE:?}"))),
    }
}

/// POST `review` to `path` and return the response's `status` object.
pub async fn post(upstream: &Upstream, path: &'static str, kind: &'static str, review: &Value) -> Result<Value, ReviewError> {
    // Fail fast while the upstream is known hung or unreachable: the caller then uses its
    // last known decision (within `--serve-stale`) or answers 503 at once.
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
        sent = upstream.send(req, crate::upstream::Class::Review) => sent,
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

/// An upstream, up, that answers every review with `body` `after` it arrives (for tests).
#[cfg(test)]
pub(crate) async fn answering_upstream(after: std::time::Duration, body: Value) -> Upstream {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let body = bytes::Bytes::from(body.to_string());
    tokio::spawn(async move {
        loop {
            let Ok((conn, _)) = listener.accept().await else { return };
            let body = body.clone();
            tokio::spawn(async move {
                let svc = hyper::service::service_fn(move |_req| {
                    let body = body.clone();
                    async move {
                        tokio::time::sleep(after).await;
                        Ok::<_, std::convert::Infallible>(http::Response::new(http_body_util::Full::new(body)))
                    }
                });
                let _ = hyper::server::conn::http1::Builder::new().serve_connection(hyper_util::rt::TokioIo::new(conn), svc).await;
            });
        }
    });
    let upstream = crate::app::plain_upstream(&format!("http://{addr}")).unwrap();
    upstream.set_health(crate::upstream::health::Health::Up);
    upstream
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::{Arc, Mutex};
    use std::time::Duration;

    #[tokio::test(start_paused = true)]
    async fn a_first_review_is_waited_for_a_renewal_only_for_the_grace_and_both_answers_kept() {
        let kept = Arc::new(Mutex::new(Vec::new()));
        let slow = || async {
            tokio::time::sleep(Duration::from_secs(2)).await;
            Ok::<_, ReviewError>("allowed")
        };
        let keep = || {
            let kept = kept.clone();
            move |a: &&str| kept.lock().unwrap().push(a.to_string())
        };
        let lanes = Lanes::new(4);
        let started = tokio::time::Instant::now();
        // No decision known: nothing else can decide, however slow the upstream.
        let got = judged(&lanes, false, slow(), keep()).await;
        assert_eq!(got.unwrap(), "allowed");
        assert_eq!(started.elapsed(), Duration::from_secs(2));
        // A renewal: the caller is let go at the grace (to use its last decision) ...
        let started = tokio::time::Instant::now();
        let got = judged(&lanes, true, slow(), keep()).await;
        assert!(matches!(got, Err(ReviewError::Transport(_))), "{got:?}");
        assert_eq!(started.elapsed(), REVIEW_GRACE);
        assert_eq!(kept.lock().unwrap().len(), 1);
        // ... and the review, still running in its lane, keeps its answer when it comes.
        assert_eq!(lanes.renew.available_permits(), 3, "the renewal holds its place");
        tokio::time::sleep(Duration::from_secs(2)).await;
        assert_eq!(*kept.lock().unwrap(), ["allowed", "allowed"]);
        assert_eq!(lanes.renew.available_permits(), 4);
    }

    #[tokio::test(start_paused = true)]
    async fn first_reviews_wait_in_their_own_lane_renewals_pass() {
        let lanes = Arc::new(Lanes::new(2));
        // Two first reviews (made-up tokens) that take their time fill the first lane.
        for _ in 0..2 {
            let lanes = lanes.clone();
            tokio::spawn(async move {
                let slow = async {
                    tokio::time::sleep(Duration::from_secs(10)).await;
                    Ok::<_, ReviewError>(())
                };
                let _ = judged(&lanes, false, slow, |_| {}).await;
            });
        }
        tokio::task::yield_now().await;
        let started = tokio::time::Instant::now();
        let renewal = judged(&lanes, true, async { Ok::<_, ReviewError>("known") }, |_| {}).await;
        assert_eq!(renewal.unwrap(), "known");
        assert_eq!(started.elapsed(), Duration::ZERO, "a renewal does not wait behind them");
        let first = judged(&lanes, false, async { Ok::<_, ReviewError>("new") }, |_| {}).await;
        assert_eq!(first.unwrap(), "new");
        assert_eq!(started.elapsed(), Duration::from_secs(10), "another first review waits its turn");
    }
}
