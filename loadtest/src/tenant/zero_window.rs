//! Tenant probe, attack `zero-window`: watches of pods from resourceVersion 0 (so each must
//! carry the whole initial state) on HTTP/2 connections that advertise a zero stream window
//! and never open it, N at once from the tenant's token and M more every second from a
//! second token; beside them an honest writer, a watcher of what it writes, and WatchLists.

use super::honest::{self, Delivery, WatchListFigures, WriterFigures};
use super::net::{Holder, StreamFigures, Tracker};
use super::Ctx;
use serde::Serialize;
use std::time::{Duration, Instant};

/// What the attack did and what the honest clients saw.
#[derive(Debug, Clone, Serialize)]
pub struct ZeroWindow {
    /// The tenant's watch request.
    pub request: String,
    pub streams_per_connection: usize,
    /// Time to send the N initial streams (seconds since the attack began).
    pub initial_sent_s: f64,
    /// The N streams of the tenant's token.
    pub initial: StreamFigures,
    /// The M a second of the second token.
    pub extra: StreamFigures,
    /// Streams of both open each second (index 0 = second 1).
    pub open_per_second: Vec<usize>,
    /// The honest watcher: writes seen and their lag.
    pub delivery: Delivery,
    pub writer: WriterFigures,
    /// Deleting what the writer wrote, after the attack.
    pub cleanup: honest::Cleanup,
    pub watch_list: WatchListFigures,
}

/// Run the attack for --seconds with the honest clients beside it; delete what the writer
/// wrote afterwards.
pub async fn run(ctx: &Ctx<'_>) -> anyhow::Result<ZeroWindow> {
    let a = ctx.args;
    let seconds = a.seconds as f64;
    let start = Instant::now();
    let until = start + Duration::from_secs(a.seconds);
    let tracker = Tracker::new(start);
    let pods =
        if a.watch_namespace.is_empty() { "/api/v1/pods".to_string() } else { format!("/api/v1/namespaces/{}/pods", a.watch_namespace) };
    let request = format!("{pods}?watch=1&resourceVersion=0");

    // The honest watcher watches before anything else happens, so every write is after its
    // resourceVersion.
    let (ready_tx, ready_rx) = tokio::sync::oneshot::channel();
    let watcher = {
        let (http, ns) = (ctx.honest_client(), a.write_namespace.clone());
        tokio::spawn(async move { honest::watch(&http, &ns, start, until, ready_tx).await })
    };
    let _ = tokio::time::timeout(Duration::from_secs(30), ready_rx).await;

    let mut initial = Holder::new(ctx.ep, &tracker, "initial", ctx.tokens.tenant.as_deref(), &request, a.streams_per_connection);
    initial.open(a.watch_streams, until).await;
    let initial_sent_s = tracker.now();

    let extra = {
        let mut h = Holder::new(ctx.ep, &tracker, "extra", ctx.tokens.second.as_deref(), &request, a.streams_per_connection);
        let m = a.extra_streams_per_second;
        tokio::spawn(async move {
            let mut tick = tokio::time::interval(Duration::from_secs(1));
            tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            if m == 0 {
                return h;
            }
            loop {
                tick.tick().await;
                if Instant::now() >= until {
                    break;
                }
                let _ = tokio::time::timeout_at(until.into(), h.open(m, until)).await;
            }
            h
        })
    };
    let writer = {
        let (http, ns, run, n) = (ctx.honest_client(), a.write_namespace.clone(), ctx.run_id.clone(), a.writes);
        let (interval, limit) = (Duration::from_millis(a.write_interval_ms), ctx.limit);
        tokio::spawn(async move { honest::write(&http, &ns, (n, interval), &run, (start, until), limit).await })
    };
    let watch_list = {
        let http = ctx.honest_client();
        let pq = format!(
            "/api/v1/namespaces/{}/pods?watch=1&sendInitialEvents=true&resourceVersionMatch=NotOlderThan&allowWatchBookmarks=true",
            ctx.watchlist_namespace()
        );
        tokio::spawn(async move { honest::watch_lists(&http, &pq, until).await })
    };

    let writer = writer.await?;
    let watch_list = watch_list.await?;
    let log = watcher.await?;
    let extra_holder = extra.await?;
    tokio::time::sleep_until(until.into()).await;
    let (streams, conns) = tracker.snapshot();
    let figures = |group: &str, h: &Holder| {
        let mut f = StreamFigures::of(&streams, &conns, |g| g == group, seconds);
        f.connect_errors = h.connect_errors.clone();
        f.send_errors = h.send_errors.clone();
        f
    };
    let (initial_f, extra_f) = (figures("initial", &initial), figures("extra", &extra_holder));
    initial.close();
    extra_holder.close();
    let cleanup = honest::clean(&ctx.honest_client(), &a.write_namespace, a.writes, ctx.limit).await;
    let open_per_second = StreamFigures::of(&streams, &conns, |_| true, seconds).open_per_second;
    Ok(ZeroWindow {
        request,
        streams_per_connection: a.streams_per_connection,
        initial_sent_s: (initial_sent_s * 1000.0).round() / 1000.0,
        initial: initial_f,
        extra: extra_f,
        open_per_second,
        delivery: honest::delivery(&writer.writes, &log),
        writer,
        cleanup,
        watch_list,
    })
}
