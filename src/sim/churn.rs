//! Steady pod churn: updates, creates and deletes at a fixed rate through the normal write
//! path, so watches see realistic traffic. Each update stamps the time of the change in the
//! object (`kache.dev/changed-at`) so delivery lag can be measured end to end.

use super::Sim;
use crate::api::media::Format;
use crate::cache::object;
use crate::cache::window::EventType;
use crate::sim::synth::{churn_op, ChurnOp};
use http::StatusCode;
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// Renew leases at `per_sec` writes per second until the task is dropped: the global
/// resourceVersion moves while the kinds kache caches stay quiet.
pub async fn leases(sim: Arc<Sim>, per_sec: f64) {
    if per_sec <= 0.0 {
        return;
    }
    let mut interval = tokio::time::interval(Duration::from_secs_f64(1.0 / per_sec));
    interval.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        interval.tick().await;
        sim.renew_lease();
    }
}

/// Run churn at `per_sec` operations per second until the task is dropped.
pub async fn churn(sim: Arc<Sim>, per_sec: f64, seed: u64) {
    if per_sec <= 0.0 {
        return;
    }
    // Work in ticks of at least 10 ms so high rates batch instead of spinning.
    let tick = Duration::from_secs_f64((1.0 / per_sec).max(0.01));
    let per_tick = (per_sec * tick.as_secs_f64()).max(1.0);
    let mut interval = tokio::time::interval(tick);
    interval.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let Some(pods) = sim.cache("", "pods").cloned() else { return };
    let mut next_index = pods.snapshot().objects.len() as u64;
    // Keys churn may touch; kept here because the ordered map has no O(1) random access.
    let mut live: Vec<object::Key> = pods.snapshot().objects.keys().cloned().collect();
    let (mut step, mut owed) = (0u64, 0.0f64);
    loop {
        interval.tick().await;
        owed += per_tick;
        while owed >= 1.0 {
            owed -= 1.0;
            step += 1;
            let op = churn_op(seed, step);
            if let Err(e) = apply(&sim, &pods, op, step, &mut live, &mut next_index) {
                tracing::debug!(?op, error = %e.message, "churn operation skipped");
            }
        }
    }
}

fn apply(
    sim: &Sim,
    pods: &crate::cache::KindCache,
    op: ChurnOp,
    step: u64,
    live: &mut Vec<object::Key>,
    next_index: &mut u64,
) -> Result<(), crate::api::status::Status> {
    let snap = pods.snapshot();
    let slot = (!live.is_empty()).then(|| (step.wrapping_mul(2_654_435_761) % live.len() as u64) as usize);
    let mut pick = || -> Option<Arc<object::Object>> {
        let i = slot?;
        let found = snap.get(&live[i]).cloned();
        if found.is_none() || op == ChurnOp::Delete {
            live.swap_remove(i);
        }
        found
    };
    let mut rv = sim.rv.lock().unwrap_or_else(|e| e.into_inner());
    match op {
        ChurnOp::Update => {
            let Some(o) = pick() else { return Ok(()) };
            let mut v: serde_json::Value = serde_json::from_slice(&o.json_item().unwrap_or_default())
                .map_err(|e| crate::api::status::Status::internal(e.to_string()))?;
            let now = SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_nanos()).unwrap_or(0);
            sim.synth.mutate_pod(&mut v, step, now);
            sim.commit(pods, &mut rv, EventType::Modified, v, StatusCode::OK, Format::Json, false)?;
        }
        ChurnOp::Create => {
            // Stamped now, as the apiserver stamps a pod it creates.
            let v = sim.synth.pod_created_at(*next_index, crate::api::time::unix_now());
            *next_index += 1;
            let ns = v["metadata"]["namespace"].as_str().unwrap_or("");
            live.push(object::key(ns, v["metadata"]["name"].as_str().unwrap_or("")));
            sim.commit(pods, &mut rv, EventType::Added, v, StatusCode::CREATED, Format::Json, false)?;
        }
        ChurnOp::Delete => {
            let Some(o) = pick() else { return Ok(()) };
            let v: serde_json::Value = serde_json::from_slice(&o.json_item().unwrap_or_default())
                .map_err(|e| crate::api::status::Status::internal(e.to_string()))?;
            sim.commit(pods, &mut rv, EventType::Deleted, v, StatusCode::OK, Format::Json, false)?;
        }
    }
    Ok(())
}
