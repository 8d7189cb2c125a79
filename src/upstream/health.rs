//! The upstream's health (not kache's own readiness, which `serve` and `admin` answer):
//! `/readyz` of the upstream every [`INTERVAL`], and at once when a call has waited on the
//! upstream a while (at most one probe per [`MIN_GAP`]), on kache's own connections, bounded
//! by [`PROBE_TIMEOUT`]. A hung upstream (a paused process, a partition) is found within
//! `INTERVAL + PROBE_TIMEOUT` (and suspected by the calls waiting on it within two seconds); a
//! dead one at the next probe.
//! The finding is kept in the [`Upstream`] (awaitable), shown in kache's `/readyz?verbose`,
//! exported as metrics, and logged once per change, never once per request.

use super::{is_timeout, Upstream};
use crate::body::BoxError;
use crate::telemetry;
use http_body_util::BodyExt;
use std::time::Duration;

/// How often the upstream is probed.
pub const INTERVAL: Duration = Duration::from_secs(1);
/// A probe not answered within this marks the upstream hung. The apiserver answers
/// `/readyz` from memory, and its priority and fairness exempts probes, so an answer
/// slower than this is not a busy apiserver but a stuck one.
pub const PROBE_TIMEOUT: Duration = Duration::from_secs(3);
/// The least time between the starts of two probes, however often calls ask for one.
pub const MIN_GAP: Duration = Duration::from_millis(250);

/// A health probe unanswered this long, with no other answer from the upstream meanwhile,
/// makes calls waiting on the upstream give up (a Status for the client, the last known
/// decision for a review) before the monitor declares it hung: the apiserver answers
/// `/readyz` from memory, exempt from priority and fairness, in milliseconds, even while
/// busy (see docs/operations.md, "When the upstream fails"). But kache's own runtime can be
/// slow to read the answer (a debug build opening many TLS connections at once on a loaded
/// machine hears it late), so this leaves room for that, and is half the probe's deadline.
pub const SUSPECT_AFTER: Duration = Duration::from_millis(1500);
/// A call that has waited this long on the upstream with no probe in flight asks the
/// monitor for one at once, so that a hang that began just after the last probe is
/// suspected within `KICK_AFTER + SUSPECT_AFTER` of the call, not a probe interval later.
pub const KICK_AFTER: Duration = Duration::from_millis(200);
/// A call still waiting asks again this often (see [`Upstream::until_unavailable`]).
pub const KICK_AGAIN: Duration = Duration::from_millis(500);

/// Why a call gives up on an upstream whose probe has gone unanswered [`SUSPECT_AFTER`].
fn suspicion() -> String {
    format!("the upstream apiserver has answered nothing, /readyz included, for {SUSPECT_AFTER:?}")
}

/// When the upstream last answered anything (response headers on any of kache's
/// connections), as the time since a fixed start: read and written without a lock by every
/// request.
#[derive(Debug)]
pub(crate) struct Heard {
    start: tokio::time::Instant,
    /// Milliseconds after `start`, plus one (0: never).
    last: std::sync::atomic::AtomicU64,
}

impl Heard {
    pub(crate) fn new() -> Heard {
        Heard { start: tokio::time::Instant::now(), last: std::sync::atomic::AtomicU64::new(0) }
    }

    /// The upstream answered just now.
    pub(crate) fn now(&self) {
        let ms = u64::try_from(self.start.elapsed().as_millis()).unwrap_or(u64::MAX - 1) + 1;
        self.last.fetch_max(ms, std::sync::atomic::Ordering::Relaxed);
    }

    /// When the upstream last answered, if ever.
    fn last(&self) -> Option<tokio::time::Instant> {
        match self.last.load(std::sync::atomic::Ordering::Relaxed) {
            0 => None,
            ms => Some(self.start + Duration::from_millis(ms - 1)),
        }
    }

    /// Since when the upstream has been silent, counted from `since` (a probe's start) at
    /// the earliest: `since`, or the last answer after it.
    fn silent_since(&self, since: tokio::time::Instant) -> tokio::time::Instant {
        self.last().map_or(since, |last| last.max(since))
    }
}

/// The upstream's health as kache's monitor last saw it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Health {
    /// Not probed yet.
    Unknown,
    /// `/readyz` answered 200.
    Up,
    /// It did not: since when, and why.
    Down {
        /// When the first failed probe started.
        since: tokio::time::Instant,
        /// What went wrong, for `/readyz?verbose` and the log.
        why: String,
        /// Which kind of failure: `hung` (no answer in time), `unreachable` (connection
        /// refused or broken) or `unready` (an answer other than 200).
        reason: &'static str,
    },
}

impl Health {
    /// Whether the upstream is known to be down.
    pub fn is_down(&self) -> bool {
        matches!(self, Health::Down { .. })
    }

    /// Whether it is down in a way a call cannot wait out: hung or unreachable (an unready
    /// upstream may still answer, and its own Status is the better answer).
    pub fn is_outage(&self) -> bool {
        matches!(self, Health::Down { reason, .. } if *reason != "unready")
    }
}

impl Upstream {
    /// The upstream's health, as the monitor last found it; changes can be awaited.
    pub fn health(&self) -> tokio::sync::watch::Receiver<Health> {
        self.health.subscribe()
    }

    /// Whether the monitor last found the upstream down.
    pub fn is_down(&self) -> bool {
        self.health.borrow().is_down()
    }

    /// Why a call that needs an answer now should not wait for this upstream, if the
    /// monitor last found it hung or unreachable (not merely unready: an apiserver whose
    /// `/readyz` fails may still answer, and its own Status is the better answer).
    pub fn unavailable(&self) -> Option<String> {
        match &*self.health.borrow() {
            Health::Down { since, why, reason } if *reason != "unready" => {
                Some(format!("the upstream apiserver has been {reason} for {}s ({why})", since.elapsed().as_secs()))
            }
            _ => None,
        }
    }

    /// Resolves, with why, once the monitor finds the upstream hung or unreachable (at once
    /// if it already has): a call that would otherwise wait out its deadline races this.
    ///
    /// Also once the monitor's probe in flight has gone unanswered for [`SUSPECT_AFTER`],
    /// with no other answer from the upstream in that time:
    /// a hung upstream is declared only at the probe's deadline, and calls need not wait
    /// that long. A call still waiting after [`KICK_AFTER`] with no probe in flight asks
    /// for one, so it learns of a hang within `KICK_AFTER + SUSPECT_AFTER`.
    pub fn until_unavailable(&self) -> impl std::future::Future<Output = String> + Send + 'static {
        let mut rx = self.health.subscribe();
        let mut probing = self.probing.subscribe();
        let kick = self.kick.clone();
        // When this call next asks for a probe: after KICK_AFTER, then every KICK_AGAIN while
        // it waits (a call waiting on a slow but answering upstream has it probed that often,
        // not more; a hang that begins while it waits is suspected within
        // `KICK_AGAIN + SUSPECT_AFTER`).
        let mut next_kick = tokio::time::Instant::now() + KICK_AFTER;
        let this = self.clone();
        let heard = self.heard.clone();
        async move {
            loop {
                let unanswered = *probing.borrow_and_update();
                let heard = &heard;
                // Silent for SUSPECT_AFTER since the probe started: every answer on another
                // connection in the meantime (a busy upstream, slow to answer `/readyz`)
                // starts the count again.
                let suspect = async move {
                    let Some(since) = unanswered else { return std::future::pending().await };
                    loop {
                        let silent = heard.silent_since(since);
                        if silent.elapsed() >= SUSPECT_AFTER {
                            return;
                        }
                        tokio::time::sleep_until(silent + SUSPECT_AFTER).await;
                    }
                };
                let down = async { rx.wait_for(Health::is_outage).await.is_ok() };
                tokio::select! {
                    biased;
                    _ = down => break,
                    _ = suspect => return suspicion(),
                    _ = tokio::time::sleep_until(next_kick), if unanswered.is_none() => {
                        next_kick = tokio::time::Instant::now() + KICK_AGAIN;
                        kick.notify_one();
                    }
                    changed = probing.changed() => if changed.is_err() { std::future::pending::<()>().await },
                }
            }
            this.unavailable().unwrap_or_else(|| "the upstream apiserver is unavailable".into())
        }
    }

    /// Resolves, with why, once the monitor finds the upstream hung or unreachable (at once
    /// if it already has), on its finding alone: for a read passed through, which a slow
    /// upstream would answer directly too, and which costs nothing if it is carried out late.
    pub fn until_down(&self) -> impl std::future::Future<Output = String> + Send + 'static {
        let mut rx = self.health.subscribe();
        let this = self.clone();
        async move {
            if rx.wait_for(Health::is_outage).await.is_err() {
                std::future::pending::<()>().await;
            }
            this.unavailable().unwrap_or_else(|| "the upstream apiserver is unavailable".into())
        }
    }

    /// Resolves when a call waiting on the upstream asks for a probe now.
    pub(crate) async fn kicked(&self) {
        self.kick.notified().await
    }

    /// Why the upstream is taken for hung or unreachable now, if it is: the monitor found
    /// it so, or its probe in flight has gone unanswered for [`SUSPECT_AFTER`]. A request
    /// is not sent into it (it would wait, and a write might be carried out later).
    pub fn suspected(&self) -> Option<String> {
        if let Some(why) = self.unavailable() {
            return Some(why);
        }
        let since = (*self.probing.borrow())?;
        (self.heard.silent_since(since).elapsed() >= SUSPECT_AFTER).then(suspicion)
    }

    /// Note that a health probe is in flight since `since` (or none is).
    pub(crate) fn set_probing(&self, since: Option<tokio::time::Instant>) {
        self.probing.send_replace(since);
    }

    /// Record a change the monitor found.
    pub(crate) fn set_health(&self, h: Health) {
        self.health.send_replace(h);
    }
}

/// Probe the upstream once: `Up`, or `Down` with why.
pub async fn probe(upstream: &Upstream) -> Health {
    let since = tokio::time::Instant::now();
    upstream.set_probing(Some(since));
    let found = ask(upstream, since).await;
    upstream.set_probing(None);
    found
}

async fn ask(upstream: &Upstream, since: tokio::time::Instant) -> Health {
    let down = |reason, why: String| Health::Down { since, why, reason };
    let answer = tokio::time::timeout(PROBE_TIMEOUT, async {
        let resp = upstream.get_in("/readyz", "text/plain", super::Class::Probe).await?;
        let code = resp.status();
        let body = resp.into_body().collect().await.map(|b| b.to_bytes()).unwrap_or_default();
        Ok::<_, BoxError>((code, body))
    })
    .await;
    match answer {
        Err(_) => down("hung", format!("no answer to /readyz within {PROBE_TIMEOUT:?}")),
        Ok(Err(e)) if is_timeout(&e) => down("hung", e.to_string()),
        Ok(Err(e)) => down("unreachable", format!("unreachable: {e}")),
        Ok(Ok((code, _))) if code.is_success() => Health::Up,
        Ok(Ok((code, body))) => down("unready", format!("/readyz answered {}: {}", code.as_u16(), failed_checks(&body))),
    }
}

/// The failing checks of a verbose-style `/readyz` answer on one line (`[-]informer-sync
/// failed: reason withheld`), else the answer described as text.
fn failed_checks(body: &[u8]) -> String {
    let text = String::from_utf8_lossy(body);
    let failed: Vec<&str> = text.lines().filter(|l| l.starts_with("[-]")).collect();
    if failed.is_empty() {
        crate::api::status::describe_body(body).lines().next().unwrap_or("").trim().to_string()
    } else {
        failed.join("; ")
    }
}

/// Probe every [`INTERVAL`] while `owner` (what holds the upstream: kache's `Serve`) lives,
/// recording each change.
pub(crate) async fn monitor<T: Send + Sync + 'static>(owner: std::sync::Weak<T>, upstream_of: fn(&T) -> &Upstream) {
    // Every series from the start, so a rate or an alert sees the first fault.
    for reason in ["hung", "unreachable", "unready"] {
        metrics::counter!(telemetry::UPSTREAM_FAULTS, "reason" => reason).increment(0);
    }
    let mut every = tokio::time::interval(INTERVAL);
    every.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        let Some(upstream) = owner.upgrade().map(|o| upstream_of(&o).clone()) else { return };
        tokio::select! {
            _ = every.tick() => {}
            _ = upstream.kicked() => {}
        }
        let started = tokio::time::Instant::now();
        let found = probe(&upstream).await;
        record(&upstream, found);
        drop(upstream);
        tokio::time::sleep_until(started + MIN_GAP).await;
    }
}

/// Keep `found` unless it repeats the state held, with the metric and one log line per
/// change. An outage keeps the `since` of its first failed probe when its reason changes
/// (a paused upstream is first hung, then unreachable once its connections are closed), and
/// is counted once.
pub fn record(upstream: &Upstream, mut found: Health) {
    let before = upstream.health().borrow().clone();
    metrics::gauge!(telemetry::UPSTREAM_UP).set(if found.is_down() { 0.0 } else { 1.0 });
    match (&before, &mut found) {
        (Health::Down { reason: a, .. }, Health::Down { reason: b, .. }) if a == b => return,
        (Health::Up, Health::Up) => return,
        (Health::Down { since: first, .. }, Health::Down { since, why, reason }) => {
            *since = *first;
            tracing::info!(reason = *reason, why = %why, "upstream apiserver still down");
        }
        (_, Health::Down { why, reason, .. }) => {
            metrics::counter!(telemetry::UPSTREAM_FAULTS, "reason" => *reason).increment(1);
            tracing::warn!(reason = *reason, why = %why, "upstream apiserver is down");
        }
        (Health::Down { since, .. }, Health::Up) => {
            tracing::info!(down_seconds = since.elapsed().as_secs_f64(), "upstream apiserver answers again")
        }
        (_, Health::Up) => {}
        (_, Health::Unknown) => return,
    }
    upstream.set_health(found);
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An upstream that takes connections and answers nothing: a paused process.
    fn hung() -> (std::net::TcpListener, Upstream) {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let upstream = crate::app::plain_upstream(&format!("http://{}", listener.local_addr().unwrap())).unwrap();
        (listener, upstream)
    }

    #[tokio::test(start_paused = true)]
    async fn calls_waiting_on_the_upstream_give_up_once_a_probe_is_unanswered_a_while() {
        let (listener, upstream) = hung();
        let started = tokio::time::Instant::now();
        let waiting = tokio::spawn(upstream.until_unavailable());
        let monitor = tokio::spawn({
            let upstream = upstream.clone();
            async move { probe(&upstream).await }
        });
        tokio::task::yield_now().await;
        assert_eq!(upstream.suspected(), None, "a probe just sent");
        let why = waiting.await.unwrap();
        assert_eq!(why, "the upstream apiserver has answered nothing, /readyz included, for 1.5s");
        assert_eq!(started.elapsed(), SUSPECT_AFTER, "before the probe's deadline");
        // Nothing more is sent into it meanwhile.
        assert_eq!(upstream.suspected().as_deref(), Some(why.as_str()));
        // The probe itself declares the upstream hung only at its deadline.
        match monitor.await.unwrap() {
            Health::Down { reason, .. } => assert_eq!(reason, "hung"),
            h => panic!("{h:?}"),
        }
        assert_eq!(started.elapsed(), PROBE_TIMEOUT);
        // With no monitor to answer its call for a probe, a call waits for a finding.
        let quiet = tokio::time::timeout(std::time::Duration::from_secs(30), upstream.until_unavailable()).await;
        assert!(quiet.is_err(), "no probe in flight, no finding recorded: {quiet:?}");
        drop(listener);
    }

    #[tokio::test(start_paused = true)]
    async fn a_call_waiting_between_probes_asks_for_one_and_gives_up_before_the_probe_deadline() {
        let (listener, upstream) = hung();
        let started = tokio::time::Instant::now();
        let waiting = tokio::spawn(upstream.until_unavailable());
        // The monitor is between probes: it probes when asked.
        let monitor = tokio::spawn({
            let upstream = upstream.clone();
            async move {
                upstream.kicked().await;
                let asked = started.elapsed();
                (asked, probe(&upstream).await)
            }
        });
        let why = waiting.await.unwrap();
        assert_eq!(why, "the upstream apiserver has answered nothing, /readyz included, for 1.5s");
        assert_eq!(started.elapsed(), KICK_AFTER + SUSPECT_AFTER);
        assert!(KICK_AFTER + SUSPECT_AFTER < PROBE_TIMEOUT, "sooner than the monitor's finding");
        let (asked, found) = monitor.await.unwrap();
        assert_eq!(asked, KICK_AFTER, "asked for a probe once it had waited KICK_AFTER");
        assert!(found.is_down(), "{found:?}");
        drop(listener);
    }

    /// A busy upstream answers `/readyz` late but answers other calls meanwhile: that is not
    /// a hang, and nothing is refused for it (a 503 then would refuse calls the upstream is
    /// answering). Silence after the last answer is.
    #[tokio::test(start_paused = true)]
    async fn answers_on_other_connections_while_a_probe_waits_are_not_a_hang() {
        let (listener, upstream) = hung();
        let started = tokio::time::Instant::now();
        upstream.set_probing(Some(started));
        let waiting = tokio::spawn(upstream.until_unavailable());
        // Another call's answer every second, for five seconds.
        for _ in 0..5 {
            tokio::time::sleep(std::time::Duration::from_secs(1)).await;
            upstream.heard.now();
            assert_eq!(upstream.suspected(), None, "it just answered");
            assert!(!waiting.is_finished(), "a call gave up on an upstream that answers");
        }
        // Then silence: suspected SUSPECT_AFTER after the last answer.
        let last = tokio::time::Instant::now();
        let why = waiting.await.unwrap();
        assert_eq!(why, "the upstream apiserver has answered nothing, /readyz included, for 1.5s");
        assert_eq!(last.elapsed(), SUSPECT_AFTER);
        assert_eq!(upstream.suspected().as_deref(), Some(why.as_str()));
        drop(listener);
    }
}
