//! The upstream health monitor: `/readyz` of the upstream every [`INTERVAL`], and at once
//! when a call has waited on the upstream a while (at most one probe per [`MIN_GAP`]), on
//! kache's own connections, bounded by [`PROBE_TIMEOUT`]. A hung upstream (a paused
//! process, a partition) is found within `INTERVAL + PROBE_TIMEOUT` (and suspected by the
//! calls waiting on it within a second); a dead one at the next probe.
//! The finding is kept in the [`Upstream`] (awaitable), shown in kache's `/readyz?verbose`,
//! exported as metrics, and logged once per change, never once per request.

use crate::serve::upstream::{is_timeout, Health, Upstream};
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
        let resp = upstream.get_in("/readyz", "text/plain", crate::serve::upstream::Class::Probe).await?;
        let code = resp.status();
        let body = resp.into_body().collect().await.map(|b| b.to_bytes()).unwrap_or_default();
        Ok::<_, crate::serve::body::BoxError>((code, body))
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

/// Probe every [`INTERVAL`] while `serve` lives, recording each change.
pub(crate) async fn monitor(serve: std::sync::Weak<crate::serve::Serve>) {
    // Every series from the start, so a rate or an alert sees the first fault.
    for reason in ["hung", "unreachable", "unready"] {
        metrics::counter!(telemetry::UPSTREAM_FAULTS, "reason" => reason).increment(0);
    }
    let mut every = tokio::time::interval(INTERVAL);
    every.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        let Some(upstream) = serve.upgrade().map(|s| s.upstream.clone()) else { return };
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
        assert_eq!(why, "the upstream apiserver has not answered /readyz for 600ms");
        assert_eq!(started.elapsed(), crate::serve::upstream::SUSPECT_AFTER, "before the probe's deadline");
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
    async fn a_call_waiting_between_probes_asks_for_one_and_gives_up_within_a_second() {
        use crate::serve::upstream::{KICK_AFTER, SUSPECT_AFTER};
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
        assert_eq!(why, "the upstream apiserver has not answered /readyz for 600ms");
        assert_eq!(started.elapsed(), KICK_AFTER + SUSPECT_AFTER);
        assert!(KICK_AFTER + SUSPECT_AFTER < std::time::Duration::from_secs(1));
        let (asked, found) = monitor.await.unwrap();
        assert_eq!(asked, KICK_AFTER, "asked for a probe once it had waited KICK_AFTER");
        assert!(found.is_down(), "{found:?}");
        drop(listener);
    }
}
