//! Tenant probe, the honest clients beside an attack: a reader polling one request at a
//! fixed interval, a writer of ConfigMaps, a watcher of those ConfigMaps, and WatchLists
//! waiting for their initial-events-end bookmark. Every request is bounded in time; every
//! time is measured by this process (nothing taken from the server's clocks).

use crate::client::{Http, JSON};
use crate::scenario::Encoding;
use crate::stats::{Hist, Percentiles};
use crate::wire::{self, EventType, Frames, INITIAL_END};
use http::Method;
use http_body_util::BodyExt;
use serde::Serialize;
use std::collections::BTreeMap;
use std::time::{Duration, Instant};
use tokio::time::timeout_at;

/// A request's status for counting: the HTTP code, `timeout`, or `error` (no response).
fn status_label(r: &Result<Result<u16, anyhow::Error>, tokio::time::error::Elapsed>) -> String {
    match r {
        Ok(Ok(code)) => code.to_string(),
        Ok(Err(_)) => "error".into(),
        Err(_) => "timeout".into(),
    }
}

/// What a polling reader saw.
#[derive(Debug, Clone, Serialize, Default)]
pub struct ProbeFigures {
    /// The path and query read.
    pub request: String,
    pub interval_ms: u64,
    pub requests: u64,
    /// Responses by status code; `timeout` (no whole response within the limit) and
    /// `error` (the connection failed) too.
    pub statuses: BTreeMap<String, u64>,
    /// Time to the body's last byte of every request, whatever its status; a timeout
    /// counts at the limit.
    pub latency: Option<Percentiles>,
    /// The same, of 200 responses only.
    pub latency_ok: Option<Percentiles>,
    /// A few error messages.
    pub errors: Vec<String>,
}

/// GET `pq` every `interval` (or as soon as the previous one answered, when it took longer)
/// until `until`, each bounded by `limit`.
pub async fn poll(http: &Http, pq: &str, interval: Duration, until: Instant, limit: Duration) -> ProbeFigures {
    let (all, ok) = (Hist::default(), Hist::default());
    let mut f = ProbeFigures { request: pq.into(), interval_ms: interval.as_millis() as u64, ..Default::default() };
    let mut next = Instant::now();
    while next < until {
        tokio::time::sleep_until(next.into()).await;
        let t0 = Instant::now();
        let r = tokio::time::timeout(limit, async {
            let w = http.get_full(pq, JSON).await?;
            Ok::<_, anyhow::Error>(w.status)
        })
        .await;
        let took = t0.elapsed().min(limit);
        f.requests += 1;
        *f.statuses.entry(status_label(&r)).or_default() += 1;
        all.record(took);
        match r {
            Ok(Ok(200)) => ok.record(took),
            Ok(Err(e)) if f.errors.len() < 5 => f.errors.push(format!("{e:#}")),
            _ => {}
        }
        next = (next + interval).max(Instant::now());
    }
    f.latency = all.percentiles();
    f.latency_ok = ok.percentiles();
    f
}

/// One write: the object, the resourceVersion the server answered with, and when the
/// answer had been read (seconds since the attack began).
#[derive(Debug, Clone, Serialize)]
pub struct Write {
    pub name: String,
    pub rv: String,
    pub at_s: f64,
}

/// What the writer did.
#[derive(Debug, Clone, Serialize, Default)]
pub struct WriterFigures {
    pub asked: usize,
    /// Writes answered (those not started by the attack's end are neither here nor failed).
    pub writes: Vec<Write>,
    /// Failed writes, by status or error.
    pub failed: BTreeMap<String, usize>,
    /// Time of each write (to the response's last byte).
    pub latency: Option<Percentiles>,
}

/// The name of the `i`th ConfigMap the writer keeps.
pub fn configmap_name(i: usize) -> String {
    format!("kache-tenant-probe-{i}")
}

/// Create (or, when it exists, merge-patch) ConfigMap `i` of `count` in `ns`, one every
/// `interval` and none after `until`, stamping `run` into its data; times since `start`.
pub async fn write(
    http: &Http,
    ns: &str,
    (count, interval): (usize, Duration),
    run: &str,
    (start, until): (Instant, Instant),
    limit: Duration,
) -> WriterFigures {
    let hist = Hist::default();
    let mut f = WriterFigures { asked: count, ..Default::default() };
    let mut next = Instant::now();
    for i in 0..count {
        tokio::time::sleep_until(next.into()).await;
        if Instant::now() >= until {
            break;
        }
        next += interval;
        let name = configmap_name(i);
        let t0 = Instant::now();
        let r = tokio::time::timeout(limit, create_or_patch(http, ns, &name, &format!("{run}-{i}"))).await;
        match r {
            Ok(Ok(rv)) => {
                hist.record(t0.elapsed());
                f.writes.push(Write { name, rv, at_s: start.elapsed().as_secs_f64() });
            }
            Ok(Err(e)) => *f.failed.entry(format!("{e:#}").chars().take(120).collect()).or_default() += 1,
            Err(_) => *f.failed.entry("timeout".into()).or_default() += 1,
        }
    }
    f.latency = hist.percentiles();
    f
}

async fn create_or_patch(http: &Http, ns: &str, name: &str, seq: &str) -> anyhow::Result<String> {
    let cm = serde_json::json!({
        "apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": name, "labels": {"kache.dev/probe": "tenant"}},
        "data": {"seq": seq},
    });
    let pq = format!("/api/v1/namespaces/{ns}/configmaps");
    let resp = http.send(Method::POST, &pq, JSON, Some(("application/json", serde_json::to_vec(&cm)?.into()))).await?;
    let (mut status, mut body) = (resp.status().as_u16(), resp.into_body().collect().await?.to_bytes());
    if status == 409 {
        let patch = serde_json::json!({"data": {"seq": seq}});
        let resp = http
            .send(Method::PATCH, &format!("{pq}/{name}"), JSON, Some(("application/merge-patch+json", serde_json::to_vec(&patch)?.into())))
            .await?;
        status = resp.status().as_u16();
        body = resp.into_body().collect().await?.to_bytes();
    }
    if !(200..300).contains(&status) {
        anyhow::bail!("status {status}");
    }
    let v: serde_json::Value = serde_json::from_slice(&body)?;
    v["metadata"]["resourceVersion"].as_str().map(str::to_string).ok_or_else(|| anyhow::anyhow!("no resourceVersion in the answer"))
}

/// What deleting the writer's ConfigMaps took.
#[derive(Debug, Clone, Serialize, Default)]
pub struct Cleanup {
    /// Wall time of all the DELETEs (sent at once).
    pub seconds: f64,
    /// DELETEs answered, by status (`404`: the object was never written); `timeout`, `error`.
    pub statuses: BTreeMap<String, usize>,
}

/// Delete the writer's ConfigMaps, all at once, each within `limit` (the figures of the
/// attack do not depend on it; how long it took is itself a sign of the server's state).
pub async fn clean(http: &Http, ns: &str, count: usize, limit: Duration) -> Cleanup {
    let t0 = Instant::now();
    let deletes = (0..count).map(|i| {
        let pq = format!("/api/v1/namespaces/{ns}/configmaps/{}", configmap_name(i));
        let http = http.clone();
        tokio::spawn(async move {
            let r = tokio::time::timeout(limit, async {
                let r = http.send(Method::DELETE, &pq, JSON, None).await?;
                let code = r.status().as_u16();
                r.into_body().collect().await?;
                Ok::<_, anyhow::Error>(code)
            })
            .await;
            status_label(&r)
        })
    });
    let mut c = Cleanup::default();
    for d in deletes.collect::<Vec<_>>() {
        let label = d.await.unwrap_or_else(|_| "error".into());
        *c.statuses.entry(label).or_default() += 1;
    }
    c.seconds = t0.elapsed().as_secs_f64();
    c
}

/// An event the watcher read: object name, resourceVersion, seconds since the attack began.
#[derive(Debug, Clone)]
pub struct Seen {
    pub name: String,
    pub rv: String,
    pub at_s: f64,
}

/// What the watcher did.
#[derive(Debug, Default)]
pub struct WatchLog {
    pub events: Vec<Seen>,
    /// Watches opened (the first, then each resume after the server ended one).
    pub opened: usize,
    /// ERROR events (410 Gone and the like), each followed by a fresh LIST.
    pub error_events: usize,
    /// Requests that failed (status, timeout, connection), with a few messages.
    pub failures: usize,
    pub failure_samples: Vec<String>,
}

/// LIST then WATCH ConfigMaps of `ns` until `until`, resuming from the last
/// resourceVersion when the server ends the watch (as client-go's reflector does). `ready`
/// is sent once the first watch's response head arrived.
pub async fn watch(http: &Http, ns: &str, start: Instant, until: Instant, ready: tokio::sync::oneshot::Sender<()>) -> WatchLog {
    let mut log = WatchLog::default();
    let mut ready = Some(ready);
    let mut rv: Option<String> = None;
    while Instant::now() < until {
        let r = timeout_at(until.into(), watch_once(http, ns, start, &mut rv, &mut log, &mut ready)).await;
        match r {
            Err(_) => break,
            Ok(Ok(())) => {}
            Ok(Err(e)) => {
                log.failures += 1;
                if log.failure_samples.len() < 5 {
                    log.failure_samples.push(format!("{e:#}"));
                }
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
        }
    }
    log
}

/// One LIST (when there is no resourceVersion to resume from) and one watch, to its end.
async fn watch_once(
    http: &Http,
    ns: &str,
    start: Instant,
    rv: &mut Option<String>,
    log: &mut WatchLog,
    ready: &mut Option<tokio::sync::oneshot::Sender<()>>,
) -> anyhow::Result<()> {
    let base = format!("/api/v1/namespaces/{ns}/configmaps");
    let from = match rv.clone() {
        Some(v) => v,
        None => {
            let w = tokio::time::timeout(Duration::from_secs(30), http.get_full(&base, JSON)).await??;
            if w.status != 200 {
                anyhow::bail!("LIST: status {}", w.status);
            }
            let v = wire::list_rv(&w.body, Encoding::Json).ok_or_else(|| anyhow::anyhow!("LIST: no resourceVersion"))?;
            *rv = Some(v.clone());
            v
        }
    };
    let pq = format!("{base}?watch=1&allowWatchBookmarks=true&resourceVersion={from}&timeoutSeconds=600");
    let resp = tokio::time::timeout(Duration::from_secs(30), http.send(Method::GET, &pq, JSON, None)).await??;
    if resp.status() != 200 {
        anyhow::bail!("WATCH: status {}", resp.status());
    }
    log.opened += 1;
    if let Some(r) = ready.take() {
        let _ = r.send(());
    }
    let mut body = resp.into_body();
    let mut frames = Frames::new(Encoding::Json);
    while let Some(frame) = body.frame().await {
        let frame = frame?;
        let Some(data) = frame.data_ref() else { continue };
        let at_s = start.elapsed().as_secs_f64();
        frames.push(data);
        while let Some(f) = frames.next_frame() {
            let v: serde_json::Value = serde_json::from_slice(&f)?;
            let md = &v["object"]["metadata"];
            match v["type"].as_str() {
                Some("ERROR") => {
                    log.error_events += 1;
                    *rv = None;
                    return Ok(());
                }
                Some("BOOKMARK") => {}
                _ => log.events.push(Seen {
                    name: md["name"].as_str().unwrap_or_default().into(),
                    rv: md["resourceVersion"].as_str().unwrap_or_default().into(),
                    at_s,
                }),
            }
            if let Some(v) = md["resourceVersion"].as_str() {
                *rv = Some(v.into());
            }
        }
    }
    Ok(())
}

/// The writes the watcher saw and their lag.
#[derive(Debug, Clone, Serialize, Default)]
pub struct Delivery {
    pub written: usize,
    /// Writes whose event (same name and resourceVersion) the watcher read.
    pub received: usize,
    /// Event read minus the write's answer read, per write seen. An event read before the
    /// write's answer counts as 0 (`before_answer`).
    pub lag: Option<Percentiles>,
    pub before_answer: usize,
    pub watches_opened: usize,
    pub error_events: usize,
    pub watch_failures: usize,
    pub failure_samples: Vec<String>,
}

/// Match `writes` to the watcher's events.
pub fn delivery(writes: &[Write], log: &WatchLog) -> Delivery {
    let lag = Hist::default();
    let mut d = Delivery {
        written: writes.len(),
        watches_opened: log.opened,
        error_events: log.error_events,
        watch_failures: log.failures,
        failure_samples: log.failure_samples.clone(),
        ..Default::default()
    };
    for w in writes {
        if let Some(e) = log.events.iter().find(|e| e.name == w.name && e.rv == w.rv) {
            d.received += 1;
            let l = e.at_s - w.at_s;
            if l < 0.0 {
                d.before_answer += 1;
            }
            lag.record(Duration::from_secs_f64(l.max(0.0)));
        }
    }
    d.lag = lag.percentiles();
    d
}

/// What the WatchLists saw.
#[derive(Debug, Clone, Serialize, Default)]
pub struct WatchListFigures {
    pub request: String,
    /// WatchLists started (one after the other).
    pub started: usize,
    /// Those that read the initial-events-end bookmark.
    pub bookmarked: usize,
    /// Time from the request to that bookmark.
    pub time_to_bookmark: Option<Percentiles>,
    /// Events before the bookmark, of the first that got it.
    pub initial_events: Option<u64>,
    /// Those still waiting when the attack ended, and how long the longest had waited.
    pub unfinished: usize,
    pub unfinished_waited_s: Option<f64>,
    /// Failures by status or error (a non-200 answer, a watch ended before the bookmark).
    pub failed: BTreeMap<String, usize>,
}

/// WatchLists of `pq`, one after the other (1 s apart) until `until`.
pub async fn watch_lists(http: &Http, pq: &str, until: Instant) -> WatchListFigures {
    let hist = Hist::default();
    let mut f = WatchListFigures { request: pq.into(), ..Default::default() };
    while Instant::now() < until {
        f.started += 1;
        let t0 = Instant::now();
        match timeout_at(until.into(), watch_list_once(http, pq)).await {
            Err(_) => {
                f.unfinished += 1;
                f.unfinished_waited_s = Some(t0.elapsed().as_secs_f64());
            }
            Ok(Ok(events)) => {
                hist.record(t0.elapsed());
                f.bookmarked += 1;
                f.initial_events.get_or_insert(events);
            }
            Ok(Err(e)) => *f.failed.entry(format!("{e:#}").chars().take(120).collect()).or_default() += 1,
        }
        tokio::time::sleep_until((Instant::now() + Duration::from_secs(1)).min(until).into()).await;
    }
    f.time_to_bookmark = hist.percentiles();
    f
}

/// One WatchList to its initial-events-end bookmark: the events before it.
async fn watch_list_once(http: &Http, pq: &str) -> anyhow::Result<u64> {
    let resp = http.send(Method::GET, pq, JSON, None).await?;
    if resp.status() != 200 {
        anyhow::bail!("status {}", resp.status());
    }
    let mut body = resp.into_body();
    let mut frames = Frames::new(Encoding::Json);
    let mut events = 0u64;
    while let Some(frame) = body.frame().await {
        let frame = frame?;
        let Some(data) = frame.data_ref() else { continue };
        frames.push(data);
        while let Some(f) = frames.next_frame() {
            match wire::frame_type(&f, Encoding::Json) {
                EventType::Bookmark if wire::find(&f, INITIAL_END).is_some() => return Ok(events),
                EventType::Error => anyhow::bail!("ERROR event"),
                EventType::Bookmark => {}
                _ => events += 1,
            }
        }
    }
    anyhow::bail!("the watch ended before the initial-events-end bookmark")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn writes_are_matched_to_events_by_name_and_resource_version() {
        let w = |name: &str, rv: &str, at_s: f64| Write { name: name.into(), rv: rv.into(), at_s };
        let e = |name: &str, rv: &str, at_s: f64| Seen { name: name.into(), rv: rv.into(), at_s };
        let writes = vec![w("a", "10", 1.0), w("b", "11", 2.0), w("a", "12", 3.0)];
        let log = WatchLog { events: vec![e("a", "10", 1.5), e("b", "11", 1.99), e("a", "13", 4.0)], opened: 1, ..Default::default() };
        let d = delivery(&writes, &log);
        assert_eq!((d.written, d.received, d.before_answer), (3, 2, 1));
        let lag = d.lag.unwrap();
        assert_eq!(lag.count, 2);
        assert!((499_000..=501_000).contains(&lag.max_us), "{}", lag.max_us);
    }
}
