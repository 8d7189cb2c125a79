//! The low-priority lane: threads of their own, niced, for work per byte that kache does for
//! one client's large answer (the indentation of `pretty` answers and gzip of answers over
//! 1 MiB, a frame per job: `serve::compress`).
//!
//! On the shared blocking pool that work ran at kache's own priority, so a tenant's pretty
//! and gzip LISTs of every object competed for the cores as equals with the async workers
//! that answer everyone's small reads, and with the apiserver beside kache. In the lane the
//! kernel runs it when they do not need the cores: a thread at nice 10 has about a tenth of
//! the weight of one at 0 (Linux's niceness is per thread; with `sched_autogroup` off it
//! weighs between processes too). The lane's jobs still queue for its threads, one per
//! core, so no number of encodes takes more than the lane's cores.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use tokio::task::JoinHandle;

/// Default niceness of the lane's threads, above kache's own.
pub const NICE: i32 = 10;

/// Where heavy jobs run: the lane's niced threads, or (niceness 0) tokio's shared blocking
/// pool at kache's own priority.
#[derive(Debug, Clone, Default)]
pub struct Lane(Option<Arc<Threads>>);

/// The lane's threads: the blocking pool of a runtime of their own (never driven itself).
#[derive(Debug)]
struct Threads {
    /// Taken only when the lane is dropped.
    runtime: Option<tokio::runtime::Runtime>,
    /// Jobs handed to the lane so far.
    jobs: AtomicU64,
}

impl Drop for Threads {
    fn drop(&mut self) {
        // Dropping a runtime waits for its threads, which an async worker may not do.
        if let Some(rt) = self.runtime.take() {
            rt.shutdown_background();
        }
    }
}

impl Lane {
    /// A lane of `threads` threads (0: one per core) at `nice` above kache's niceness; 0 for
    /// none (jobs on the shared blocking pool).
    pub fn new(nice: i32, threads: usize) -> std::io::Result<Lane> {
        if nice == 0 {
            return Ok(Lane(None));
        }
        let threads = if threads == 0 { std::thread::available_parallelism().map_or(2, usize::from) } else { threads };
        // Only its blocking pool is used: a current-thread runtime has no worker of its own
        // to idle.
        let runtime = tokio::runtime::Builder::new_current_thread()
            .max_blocking_threads(threads)
            .thread_name("kache-lane")
            .on_thread_start(move || lower_priority(nice))
            .build()?;
        Ok(Lane(Some(Arc::new(Threads { runtime: Some(runtime), jobs: AtomicU64::new(0) }))))
    }

    /// Run `job` in the lane (or on the shared blocking pool when there is none).
    pub fn spawn<T: Send + 'static>(&self, job: impl FnOnce() -> T + Send + 'static) -> JoinHandle<T> {
        match self.0.as_deref() {
            Some(Threads { runtime: Some(rt), jobs }) => {
                jobs.fetch_add(1, Ordering::Relaxed);
                rt.spawn_blocking(job)
            }
            _ => tokio::task::spawn_blocking(job),
        }
    }

    /// Jobs run in the lane so far (0 when there is none).
    pub fn jobs(&self) -> u64 {
        self.0.as_ref().map_or(0, |t| t.jobs.load(Ordering::Relaxed))
    }
}

/// Raise the calling thread's niceness by `by` (Linux: niceness is per thread). A failure
/// (an unprivileged process lowering it) leaves the thread as it is.
fn lower_priority(by: i32) {
    let me = Some(rustix::thread::gettid());
    let Ok(now) = rustix::process::getpriority_process(me) else { return };
    if let Err(e) = rustix::process::setpriority_process(me, now.saturating_add(by).min(19)) {
        tracing::warn!(error = %e, "the low-priority lane's thread runs at kache's priority");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn niceness() -> i32 {
        rustix::process::getpriority_process(Some(rustix::thread::gettid())).unwrap()
    }

    #[tokio::test]
    async fn jobs_run_on_the_lanes_threads_niced_above_the_caller() {
        let caller = niceness();
        let lane = Lane::new(5, 1).unwrap();
        let (name, nice) = lane.spawn(|| (std::thread::current().name().map(str::to_string), niceness())).await.unwrap();
        assert_eq!(name.as_deref(), Some("kache-lane"));
        assert_eq!(nice, (caller + 5).min(19), "the lane's thread runs niced");
        assert_eq!(niceness(), caller, "the caller's own thread is as it was");
        assert_eq!(lane.jobs(), 1);
    }

    #[tokio::test]
    async fn with_niceness_0_there_is_no_lane_and_jobs_run_on_the_shared_blocking_pool() {
        let lane = Lane::new(0, 1).unwrap();
        let name = lane.spawn(|| std::thread::current().name().map(str::to_string)).await.unwrap();
        assert_ne!(name.as_deref(), Some("kache-lane"));
        assert_eq!(lane.jobs(), 0);
    }
}
