//! Authentication of kache's clients, in the apiserver's order: a verified client certificate
//! (user = CN, groups = O), else a bearer token judged by the upstream's TokenReview API,
//! else anonymous (`system:anonymous`) if allowed, else 401. Token reviews are cached by a
//! SHA-256 of the token (tokens themselves are never kept), positive and negative answers
//! each for their own TTL.

use super::review::{self, ReviewError};
use super::tls::CertIdentity;
use super::ttl::TtlCache;
use super::{Identity, AUTHENTICATED};
use crate::api::status::Status;
use crate::rate::Buckets;
use crate::upstream::Upstream;
use http::{header, HeaderMap};
use serde_json::json;
use std::net::IpAddr;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

/// How client credentials are judged.
#[derive(Debug, Clone)]
pub struct AuthnSettings {
    /// Serve requests without credentials as `system:anonymous`.
    pub allow_anonymous: bool,
    /// How long a token the upstream accepted is trusted without asking again.
    pub token_ttl: Duration,
    /// How long a token the upstream refused is refused without asking again.
    pub negative_ttl: Duration,
    /// Token reviews remembered at most.
    pub cache_entries: usize,
    /// How long past their TTL decisions are used when the upstream cannot be asked
    /// (`--serve-stale`).
    pub stale: Duration,
    /// TokenReviews in flight at once in each lane (see [`review::Lanes`]).
    pub concurrent: usize,
    /// Reviews of never-judged tokens one source address may cause per second (0: no
    /// bound). Each costs the apiserver a TokenReview, so one client sending made-up tokens
    /// as fast as a connection goes would add greatly to its CPU. Known tokens, and renewals
    /// of known ones, are not counted.
    pub first_reviews_per_address: u32,
}

/// Judges clients' credentials.
pub struct Authenticator {
    upstream: Upstream,
    settings: AuthnSettings,
    /// Tokens the upstream accepted, by owner: no refused token can push one out.
    cache: Arc<TtlCache<[u8; 32], Option<Identity>>>,
    /// Tokens the upstream refused (made-up ones among them), apart.
    refused: Arc<TtlCache<[u8; 32], Option<Identity>>>,
    lanes: review::Lanes,
    /// Reviews of never-judged tokens, per source address.
    firsts: Buckets<IpAddr>,
    /// Per token being reviewed, the turn its concurrent requests take: the first reviews,
    /// the others then find its answer (one review, one unit of the address's rate).
    reviewing: review::Turns<[u8; 32]>,
    reviews: AtomicU64,
    /// Whether a refusal was logged: the first token the upstream refused, the first request
    /// without credentials refused (see [`Authenticator::say_once`]).
    said: Arc<[AtomicBool; 2]>,
}

/// What [`Authenticator::say_once`] says.
#[derive(Debug, Clone, Copy)]
enum Refusal {
    /// A TokenReview did not authenticate a client's token.
    Token = 0,
    /// A request came without credentials and anonymous requests are not allowed.
    NoCredentials = 1,
}

/// The bearer token of an `Authorization` header, if it carries one.
pub fn bearer(headers: &HeaderMap) -> Option<&str> {
    let v = headers.get(header::AUTHORIZATION)?.to_str().ok()?.trim();
    let (scheme, token) = v.split_once(' ')?;
    let token = token.trim();
    (scheme.eq_ignore_ascii_case("bearer") && !token.is_empty()).then_some(token)
}

impl Authenticator {
    /// An authenticator asking `upstream`.
    pub fn new(upstream: Upstream, settings: AuthnSettings) -> Authenticator {
        let cache = Arc::new(TtlCache::new(settings.cache_entries).keeping(settings.stale));
        let refused = Arc::new(TtlCache::new(settings.cache_entries).keeping(settings.stale));
        let lanes = review::Lanes::new(settings.concurrent);
        let firsts = Buckets::new(settings.first_reviews_per_address.into(), "max-token-review-rate-per-address");
        let said = Arc::default();
        Authenticator { upstream, settings, cache, refused, lanes, firsts, reviewing: Default::default(), reviews: AtomicU64::new(0), said }
    }

    /// Log, the first time only, why kache answers 401: clients of an upstream that knows
    /// none of their tokens (a cluster without those users, a simulator without a users
    /// file) get nothing but 401, and would otherwise not learn why from kache's log.
    fn say_once(said: &[AtomicBool; 2], refusal: Refusal, why: &str) {
        if said[refusal as usize].swap(true, Ordering::Relaxed) {
            return;
        }
        match refusal {
            Refusal::Token => tracing::info!(
                error = why,
                "the upstream's TokenReview did not authenticate a client's token: kache authenticates clients with the \
                 upstream, so a token the upstream does not know (a user it does not have) gets 401 (logged once)"
            ),
            Refusal::NoCredentials => tracing::info!(
                "a request without credentials got 401: pass --allow-anonymous to serve such requests as system:anonymous, \
                 as the apiserver's --anonymous-auth does (logged once)"
            ),
        }
    }

    /// TokenReviews sent to the upstream so far.
    pub fn reviews(&self) -> u64 {
        self.reviews.load(Ordering::Relaxed)
    }

    /// The identity behind a request's credentials: its verified client certificate, its
    /// bearer token, or anonymous. A refused token is a 401 even when anonymous access is on,
    /// as in the apiserver. `ip`: the client's address, which bounds its reviews of new tokens.
    pub async fn authenticate(&self, cert: Option<&CertIdentity>, headers: &HeaderMap, ip: Option<IpAddr>) -> Result<Identity, Status> {
        if let Some(c) = cert {
            return Ok(Identity::from_cert(c));
        }
        match bearer(headers) {
            Some(token) => self.token(token, ip).await?.ok_or_else(Status::unauthorized),
            None if self.settings.allow_anonymous => Ok(Identity::anonymous()),
            None => {
                Self::say_once(&self.said, Refusal::NoCredentials, "");
                Err(Status::unauthorized())
            }
        }
    }

    async fn token(&self, token: &str, ip: Option<IpAddr>) -> Result<Option<Identity>, Status> {
        let digest = ring::digest::digest(&ring::digest::SHA256, token.as_bytes());
        let mut key = [0u8; 32];
        key.copy_from_slice(digest.as_ref());
        if let Some(known) = self.known(&key) {
            return Ok(known);
        }
        // Requests bearing the same token while it is reviewed (a controller starting its
        // watches together) wait for that one review instead of each sending their own.
        self.reviewing
            .one_at_a_time(&key, async {
                match self.known(&key) {
                    Some(known) => Ok(known),
                    None => self.review_token(token, key, ip).await,
                }
            })
            .await
    }

    /// A decision on the token with digest `key` still fresh, if any.
    fn known(&self, key: &[u8; 32]) -> Option<Option<Identity>> {
        self.cache.get(key).or_else(|| self.refused.get(key))
    }

    /// Ask the upstream about a token with no fresh decision.
    async fn review_token(&self, token: &str, key: [u8; 32], ip: Option<IpAddr>) -> Result<Option<Identity>, Status> {
        let last = self.cache.get_stale(&key).or_else(|| self.refused.get_stale(&key));
        // A token never judged: one more review the address causes.
        if last.is_none() && ip.is_some_and(|ip| !self.firsts.take(&ip, 1.0)) {
            return Err(Status::too_many_requests("Too many requests, please try again later.", 1));
        }
        self.reviews.fetch_add(1, Ordering::Relaxed);
        let (cache, refused, positive, negative) =
            (self.cache.clone(), self.refused.clone(), self.settings.token_ttl, self.settings.negative_ttl);
        // The newest answer is the one kept (and the last known one for an outage).
        let keep = move |answer: &Option<Identity>| match answer {
            Some(id) => {
                refused.remove(&key);
                cache.insert_for(super::ttl::owner(&id.username), key, answer.clone(), positive)
            }
            None => {
                cache.remove(&key);
                refused.insert(key, None, negative)
            }
        };
        let review = Self::review(self.upstream.clone(), token.to_string(), self.said.clone());
        match review::judged(&self.lanes, last.is_some(), review, keep).await {
            Ok(answer) => Ok(answer),
            // The upstream cannot be asked (or is slow to answer): its last answer, within
            // the staleness bound.
            Err(e @ ReviewError::Transport(_)) => match last {
                Some(known) => {
                    self.stood_for(key, &known);
                    Ok(known)
                }
                None => Err(log_failure(&self.upstream, "token review failed", &e)),
            },
            Err(e) => Err(log_failure(&self.upstream, "token review failed", &e)),
        }
    }

    /// Hold the last known decision on a token as fresh for [`review::STOOD_FOR`] (see
    /// [`review::judged`]).
    fn stood_for(&self, key: [u8; 32], known: &Option<Identity>) {
        match known {
            Some(id) => self.cache.insert_for(super::ttl::owner(&id.username), key, known.clone(), review::STOOD_FOR),
            None => self.refused.insert(key, None, review::STOOD_FOR),
        }
    }

    async fn review(upstream: Upstream, token: String, said: Arc<[AtomicBool; 2]>) -> Result<Option<Identity>, ReviewError> {
        let body = json!({"apiVersion": "authentication.k8s.io/v1", "kind": "TokenReview", "spec": {"token": token}});
        let status = review::post(&upstream, "/apis/authentication.k8s.io/v1/tokenreviews", "TokenReview", &body).await?;
        if status.get("authenticated").and_then(serde_json::Value::as_bool) != Some(true) {
            let why = status.get("error").and_then(serde_json::Value::as_str).unwrap_or("not authenticated");
            Self::say_once(&said, Refusal::Token, why);
            return Ok(None);
        }
        let mut id: Identity = serde_json::from_value(status.get("user").cloned().unwrap_or_default())
            .map_err(|e| ReviewError::Decode { kind: "TokenReview", message: e.to_string() })?;
        if id.username.is_empty() {
            return Ok(None);
        }
        if !id.in_group(AUTHENTICATED) {
            id.groups.push(AUTHENTICATED.into());
        }
        Ok(Some(id))
    }
}

/// Log a failed review (at debug while the upstream is known down: the health monitor has
/// said so once) and give the Status for the client.
pub(crate) fn log_failure(upstream: &Upstream, what: &str, e: &ReviewError) -> Status {
    if upstream.unavailable().is_some() {
        tracing::debug!(error = %e, "{what}");
    } else {
        tracing::warn!(error = %e, "{what}");
    }
    e.status()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bearer_tokens_are_found_case_insensitively() {
        let mut h = HeaderMap::new();
        assert_eq!(bearer(&h), None);
        h.insert(header::AUTHORIZATION, "Bearer abc".parse().unwrap());
        assert_eq!(bearer(&h), Some("abc"));
        h.insert(header::AUTHORIZATION, "bearer  xyz ".parse().unwrap());
        assert_eq!(bearer(&h), Some("xyz"));
        h.insert(header::AUTHORIZATION, "Basic Zm9vOmJhcg==".parse().unwrap());
        assert_eq!(bearer(&h), None);
        h.insert(header::AUTHORIZATION, "Bearer ".parse().unwrap());
        assert_eq!(bearer(&h), None);
    }

    fn settings() -> AuthnSettings {
        AuthnSettings {
            allow_anonymous: false,
            token_ttl: Duration::from_secs(10),
            negative_ttl: Duration::from_secs(10),
            cache_entries: 10,
            stale: Duration::from_secs(300),
            concurrent: 4,
            first_reviews_per_address: 0,
        }
    }

    /// An authenticator that knew `alice-token` as alice (the decision just expired).
    fn knowing_alice(upstream: Upstream) -> Authenticator {
        let authn = Authenticator::new(upstream, settings());
        let alice: Identity = serde_json::from_value(json!({"username": "alice", "groups": ["devs"]})).unwrap();
        let digest = ring::digest::digest(&ring::digest::SHA256, b"alice-token");
        let key: [u8; 32] = digest.as_ref().try_into().unwrap();
        authn.cache.insert(key, Some(alice), Duration::from_nanos(1));
        authn
    }

    #[tokio::test(start_paused = true)]
    async fn a_review_gives_way_to_the_last_known_decision_when_the_upstream_is_hung() {
        // An upstream that takes connections and answers nothing (just hung), found so by
        // the health monitor 3 s in.
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        let upstream = crate::app::plain_upstream(&format!("http://{addr}")).unwrap();
        upstream.set_health(crate::upstream::health::Health::Up);
        let authn = knowing_alice(upstream.clone());
        tokio::spawn(async move {
            tokio::time::sleep(Duration::from_secs(3)).await;
            let since = tokio::time::Instant::now();
            upstream.set_health(crate::upstream::health::Health::Down { since, why: "no answer".into(), reason: "hung" });
        });
        let started = tokio::time::Instant::now();
        let got = authn.token("alice-token", None).await.unwrap();
        assert_eq!(got.map(|i| i.username), Some("alice".to_string()), "the last known identity");
        assert_eq!(started.elapsed(), review::REVIEW_GRACE, "at the grace, not when the upstream is found hung");
        assert_eq!(authn.reviews(), 1, "the upstream was asked first");
        // A token never judged has nothing to fall back on: a 503.
        let never = authn.token("bob-token", None).await.unwrap_err();
        assert_eq!(never.code, 503);
        drop(listener);
    }

    #[tokio::test(start_paused = true)]
    async fn a_slow_renewal_lets_the_last_decision_stand_until_its_answer_comes() {
        // An upstream that answers TokenReviews in 2 s, now refusing alice's token.
        let authn = knowing_alice(refusing_upstream(Duration::from_secs(2)).await);
        let started = tokio::time::Instant::now();
        let got = authn.token("alice-token", None).await.unwrap();
        assert_eq!(got.map(|i| i.username), Some("alice".into()), "the last decision, at the grace");
        assert_eq!(started.elapsed(), review::REVIEW_GRACE);
        // Meanwhile the same token is not kept waiting again, nor reviewed again.
        let again = tokio::time::Instant::now();
        assert!(authn.token("alice-token", None).await.unwrap().is_some());
        assert_eq!((again.elapsed(), authn.reviews()), (Duration::ZERO, 1));
        // Once the renewal answers, its answer is the decision.
        tokio::time::sleep(Duration::from_secs(2)).await;
        assert_eq!(authn.token("alice-token", None).await.unwrap(), None, "the upstream's answer: refused");
        assert_eq!(authn.reviews(), 1);
    }

    /// An upstream, up, that refuses every token `after` each review arrives.
    async fn refusing_upstream(after: Duration) -> Upstream {
        review::answering_upstream(after, json!({"kind": "TokenReview", "status": {"authenticated": false}})).await
    }

    #[tokio::test]
    async fn new_tokens_from_one_address_past_its_rate_get_429_without_a_review() {
        // One review a second per address: the second new token, sooner than a second after
        // the first, is refused without a review.
        let mut s = settings();
        s.first_reviews_per_address = 1;
        let authn = Authenticator::new(refusing_upstream(Duration::ZERO).await, s);
        let alice: Identity = serde_json::from_value(json!({"username": "alice"})).unwrap();
        let key: [u8; 32] = ring::digest::digest(&ring::digest::SHA256, b"alice-token").as_ref().try_into().unwrap();
        authn.cache.insert_for(crate::auth::ttl::owner("alice"), key, Some(alice), Duration::from_secs(10));
        let (tenant, other) = (Some("10.0.0.7".parse().unwrap()), Some("10.0.0.8".parse().unwrap()));
        assert_eq!(authn.token("junk-1", tenant).await.unwrap(), None, "reviewed: refused (401)");
        let e = authn.token("junk-2", tenant).await.unwrap_err();
        assert_eq!((e.code, e.reason.as_str(), e.details.unwrap().retry_after_seconds), (429, "TooManyRequests", 1));
        assert_eq!(authn.reviews(), 1, "the second never reached the upstream");
        assert_eq!(authn.token("junk-1", tenant).await.unwrap(), None, "a refusal already known is no new review");
        let known = authn.token("alice-token", tenant).await.unwrap();
        assert_eq!(known.map(|i| i.username), Some("alice".into()), "a known token from the same address");
        assert_eq!(authn.token("junk-3", other).await.unwrap(), None, "another address has its own rate");
        assert_eq!(authn.reviews(), 2);
    }

    #[tokio::test]
    async fn requests_with_one_new_token_at_once_share_one_review() {
        // Fifty requests bearing the same never-judged token at once (a controller starting
        // its watches), from one address allowed one new review a second: one review, and
        // every request gets its answer (here the upstream's refusal), none a 429.
        let mut s = settings();
        s.first_reviews_per_address = 1;
        let authn = Arc::new(Authenticator::new(refusing_upstream(Duration::from_millis(200)).await, s));
        let ip = Some("10.0.0.9".parse().unwrap());
        let asks: Vec<_> = (0..50)
            .map(|_| {
                let authn = authn.clone();
                tokio::spawn(async move { authn.token("controller-token", ip).await })
            })
            .collect();
        for ask in asks {
            assert_eq!(ask.await.unwrap(), Ok(None), "the review's answer");
        }
        assert_eq!(authn.reviews(), 1, "one review for all of them");
        assert!(authn.reviewing.is_empty(), "no turn is left behind");
    }

    #[tokio::test(start_paused = true)]
    async fn refused_tokens_never_push_out_accepted_ones() {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let upstream = crate::app::plain_upstream(&format!("http://{}", listener.local_addr().unwrap())).unwrap();
        let authn = Authenticator::new(upstream, settings());
        let alice: Identity = serde_json::from_value(json!({"username": "alice"})).unwrap();
        let key = |t: &str| -> [u8; 32] { ring::digest::digest(&ring::digest::SHA256, t.as_bytes()).as_ref().try_into().unwrap() };
        authn.cache.insert_for(crate::auth::ttl::owner("alice"), key("alice-token"), Some(alice), Duration::from_secs(10));
        for i in 0..1000 {
            authn.refused.insert(key(&format!("junk-{i}")), None, Duration::from_secs(10));
        }
        assert_eq!(authn.token("alice-token", None).await.unwrap().map(|i| i.username), Some("alice".into()));
        assert_eq!(authn.reviews(), 0, "still known: no review");
        assert_eq!(authn.token("junk-999", None).await.unwrap(), None, "junk is remembered too, apart");
        drop(listener);
    }
}
