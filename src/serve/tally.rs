//! What the serving cache counts of its own answers, for `/debug/cache` and tests: reads
//! answered from cache, those answered as metadata, requests passed through by reason, and
//! consistent reads checked by outcome. The last two are also Prometheus series, counted
//! here in the same step.

use super::check::Outcome;
use super::read::PassThrough;
use crate::telemetry;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

#[derive(Default)]
pub(crate) struct Tally {
    hits: AtomicU64,
    metadata_hits: AtomicU64,
    passed: [AtomicU64; PassThrough::LABELS.len()],
    checked: [AtomicU64; telemetry::CONSISTENT_CHECK_OUTCOMES.len()],
}

impl Tally {
    /// Count a request answered from cache.
    pub(crate) fn hit(&self) {
        self.hits.fetch_add(1, Relaxed);
    }

    /// Count a read answered from cache as PartialObjectMetadata(List).
    pub(crate) fn metadata_hit(&self) {
        self.metadata_hits.fetch_add(1, Relaxed);
    }

    /// Count a request passed through for `reason`.
    pub(crate) fn passthrough(&self, reason: PassThrough) {
        self.passed[reason.index()].fetch_add(1, Relaxed);
        metrics::counter!(telemetry::PASSTHROUGH, "reason" => reason.label()).increment(1);
    }

    /// Count a consistent read checked with `outcome`.
    pub(crate) fn checked(&self, outcome: Outcome) {
        self.checked[outcome as usize].fetch_add(1, Relaxed);
        metrics::counter!(telemetry::CONSISTENT_CHECKS, "outcome" => outcome.label()).increment(1);
    }

    pub(crate) fn hits(&self) -> u64 {
        self.hits.load(Relaxed)
    }

    pub(crate) fn metadata_hits(&self) -> u64 {
        self.metadata_hits.load(Relaxed)
    }

    /// Requests passed through for `reason` (a [`PassThrough`] label).
    pub(crate) fn passed_through(&self, reason: &str) -> u64 {
        PassThrough::LABELS.iter().position(|l| *l == reason).map_or(0, |i| self.passed[i].load(Relaxed))
    }

    /// Consistent reads checked with `outcome` (a [`telemetry::CONSISTENT_CHECK_OUTCOMES`] label).
    pub(crate) fn checks(&self, outcome: &str) -> u64 {
        telemetry::CONSISTENT_CHECK_OUTCOMES.iter().position(|l| *l == outcome).map_or(0, |i| self.checked[i].load(Relaxed))
    }
}
