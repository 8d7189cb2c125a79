//! The reflector's retry loop as an explicit state machine: what a feed does next (LIST,
//! WATCH from an RV, wait, or stop for good) is [`Machine::next`] of what its last step
//! brought, a pure function; [`drive`] performs each phase through [`Steps`] and feeds the
//! outcome back. The transitions, the backoff and its resets live here and nowhere else.

use super::FeedError;
use std::future::Future;
use std::time::Duration;

/// The longest `Retry-After` of a 429 a feed honours as given; a longer one is cut to
/// this. The apiserver's "storage is (re)initializing" asks 1 s after a short downtime
/// (growing with it, up to 30 s), and its cache is usually ready well before a long hint
/// has passed.
pub(super) const MAX_RETRY_AFTER: Duration = Duration::from_secs(5);

/// The first backoff's ceiling; each consecutive failure doubles it, up to [`BACKOFF_MAX`].
const BACKOFF_MIN: Duration = Duration::from_millis(200);
/// The backoff's greatest ceiling.
const BACKOFF_MAX: Duration = Duration::from_secs(30);

/// What a feed does now.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Phase {
    /// LIST the kind for the first time; the cache is not synced yet.
    List,
    /// LIST again (the watch's RV expired, or the CRD's printer columns changed): the
    /// previous state is served meanwhile, and swapped for the new one.
    Relist,
    /// WATCH from `rv`, resuming there whenever the stream ends.
    Watch {
        /// The RV the cache has reached: the list's, then the last event's or bookmark's.
        rv: u64,
    },
    /// Wait, then go on where the failure happened.
    Backoff {
        /// How long.
        wait: Wait,
        /// What comes after.
        then: Resume,
    },
    /// The upstream refuses this kind in this encoding (406): no retry can work, the feed
    /// stops and requests pass through.
    Refused {
        /// The upstream's Status, as text.
        reason: String,
    },
}

/// Where a feed goes on after a [`Phase::Backoff`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Resume {
    /// [`Phase::List`].
    List,
    /// [`Phase::Relist`].
    Relist,
    /// [`Phase::Watch`] from `rv`.
    Watch {
        /// The RV to resume from.
        rv: u64,
    },
}

impl From<Resume> for Phase {
    fn from(r: Resume) -> Phase {
        match r {
            Resume::List => Phase::List,
            Resume::Relist => Phase::Relist,
            Resume::Watch { rv } => Phase::Watch { rv },
        }
    }
}

/// How long a [`Phase::Backoff`] waits.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Wait {
    /// A 429's `Retry-After` (1 s when it has none, at most [`MAX_RETRY_AFTER`]), as given.
    Exactly(Duration),
    /// Exponential backoff with full jitter: at random between half the ceiling and it.
    Jittered {
        /// The longest wait.
        ceiling: Duration,
    },
}

impl Wait {
    /// The wait's length (random for [`Wait::Jittered`]).
    pub(crate) fn duration(self) -> Duration {
        match self {
            Wait::Exactly(d) => d,
            Wait::Jittered { ceiling } => {
                let ms = ceiling.as_millis() as u64;
                Duration::from_millis(ms / 2 + rand::random::<u64>() % (ms / 2 + 1))
            }
        }
    }
}

/// What a step brought.
#[derive(Debug)]
pub(crate) enum Input {
    /// A LIST succeeded at `rv` (its state is in the cache).
    Listed {
        /// The list's resourceVersion.
        rv: u64,
    },
    /// A LIST failed.
    ListFailed(FeedError),
    /// A watch's stream ended at its deadline, having reached `rv`.
    WatchEnded {
        /// The RV reached.
        rv: u64,
    },
    /// A watch failed (410 included), having reached `rv`.
    WatchFailed {
        /// The RV reached before it failed.
        rv: u64,
        /// Why.
        error: FeedError,
    },
    /// The CRD's printer columns changed since the cells were computed.
    ColumnsChanged,
    /// A backoff's wait ended: `recovered` when it ended early because the health monitor
    /// found the upstream back.
    Waited {
        /// Whether the upstream recovered.
        recovered: bool,
    },
}

/// The state of one feed's retry loop: the phase and the consecutive failures the backoff
/// has counted.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Machine {
    /// What the feed does now.
    pub(crate) phase: Phase,
    /// Failures since the last success (a LIST, a watch that ran to its deadline) or the
    /// upstream's recovery; 429s do not count.
    pub(crate) failures: u32,
}

impl Default for Machine {
    fn default() -> Self {
        Machine { phase: Phase::List, failures: 0 }
    }
}

impl Machine {
    /// A feed whose cache was restored at `rv`: it watches from there.
    pub(crate) fn resuming(rv: u64) -> Machine {
        Machine { phase: Phase::Watch { rv }, failures: 0 }
    }

    /// The state after `event` (an event that does not belong to the phase leaves it as is).
    pub(crate) fn next(self, input: Input) -> Machine {
        let Machine { phase, failures } = self;
        match (phase, input) {
            (Phase::List | Phase::Relist, Input::Listed { rv }) => Machine { phase: Phase::Watch { rv }, failures: 0 },
            (Phase::List | Phase::Relist, Input::ListFailed(FeedError::Status { code: 406, body, .. })) => {
                Machine { phase: Phase::Refused { reason: body }, failures }
            }
            (phase @ (Phase::List | Phase::Relist), Input::ListFailed(e)) => Machine { phase, failures }.retry(&e),
            (Phase::Watch { .. }, Input::WatchEnded { rv }) => Machine { phase: Phase::Watch { rv }, failures: 0 },
            (Phase::Watch { .. }, Input::WatchFailed { error: FeedError::Expired, .. } | Input::ColumnsChanged) => {
                Machine { phase: Phase::Relist, failures }
            }
            // A watch's refusal is not the kind's: only a LIST's 406 stops the feed.
            (Phase::Watch { .. }, Input::WatchFailed { rv, error }) => Machine { phase: Phase::Watch { rv }, failures }.retry(&error),
            (Phase::Backoff { then, .. }, Input::Waited { recovered }) => {
                Machine { phase: then.into(), failures: if recovered { 0 } else { failures } }
            }
            (phase, _) => Machine { phase, failures },
        }
    }

    /// Wait, then go on where the phase is: a 429's `Retry-After` without counting a
    /// failure, else the backoff of one more failure.
    fn retry(self, e: &FeedError) -> Machine {
        let then = match self.phase {
            Phase::List => Resume::List,
            Phase::Watch { rv } => Resume::Watch { rv },
            _ => Resume::Relist,
        };
        match e {
            FeedError::Status { code: 429, retry_after, .. } => {
                let wait = Wait::Exactly(Duration::from_secs(retry_after.unwrap_or(1).max(1)).min(MAX_RETRY_AFTER));
                Machine { phase: Phase::Backoff { wait, then }, failures: self.failures }
            }
            _ => Machine { phase: Phase::Backoff { wait: backoff(self.failures), then }, failures: self.failures + 1 },
        }
    }
}

/// The backoff after `failures` consecutive failures: a ceiling of 200 ms doubled per
/// failure, at most 30 s.
pub(crate) fn backoff(failures: u32) -> Wait {
    Wait::Jittered { ceiling: (BACKOFF_MIN * (1 << failures.min(8))).min(BACKOFF_MAX) }
}

/// The I/O of each phase, which [`drive`] performs; a feed's reflector implements it.
pub(crate) trait Steps {
    /// LIST the kind (a relist when `relist`) and put the state in the cache; its RV.
    fn list(&self, relist: bool) -> impl Future<Output = Result<u64, FeedError>> + Send;
    /// WATCH from `rv`, applying what arrives, until the stream ends: the RV it reached and
    /// how it ended.
    fn watch(&self, rv: u64) -> impl Future<Output = (u64, Result<(), FeedError>)> + Send;
    /// Whether the CRD's printer columns changed since the cells were computed.
    fn columns_changed(&self) -> impl Future<Output = bool> + Send;
    /// Ready when the upstream, found down, is back; never while it is not found down.
    fn recovered(&self) -> impl Future<Output = ()> + Send;
    /// The feed stops: the upstream refused it.
    fn refuse(&self, reason: &str);
}

/// Run the retry loop from `state` until the upstream refuses the feed (else for ever).
pub(crate) async fn drive(steps: &impl Steps, mut state: Machine) {
    loop {
        let event = match &state.phase {
            Phase::List | Phase::Relist => match steps.list(state.phase == Phase::Relist).await {
                Ok(rv) => Input::Listed { rv },
                Err(e) => Input::ListFailed(e),
            },
            Phase::Watch { rv } => {
                let (rv, watched) = steps.watch(*rv).await;
                // The apiserver ends a custom resource's watches when its CRD changes: its
                // printer columns are read again then, and the cells computed again if they
                // changed.
                if !matches!(watched, Err(FeedError::Expired)) && steps.columns_changed().await {
                    Input::ColumnsChanged
                } else {
                    match watched {
                        Ok(()) => Input::WatchEnded { rv },
                        Err(error) => Input::WatchFailed { rv, error },
                    }
                }
            }
            // While the upstream is down the wait ends as soon as the health monitor finds
            // it back, so every cache resumes or relists within a probe interval of the
            // upstream's recovery rather than at the end of a long backoff.
            Phase::Backoff { wait, .. } => tokio::select! {
                _ = tokio::time::sleep(wait.duration()) => Input::Waited { recovered: false },
                _ = steps.recovered() => Input::Waited { recovered: true },
            },
            Phase::Refused { reason } => return steps.refuse(reason),
        };
        state = state.next(event);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::VecDeque;
    use std::sync::Mutex;
    use tokio::time::Instant;

    /// A request the driver made, and when (since the test started).
    #[derive(Debug, Clone, PartialEq, Eq)]
    enum Call {
        List,
        Relist,
        Watch(u64),
        Refused(String),
    }

    /// Scripted steps: each LIST and WATCH takes the next answer; when none is left the
    /// step never ends, so the driver is parked at the end of the script.
    #[derive(Default)]
    struct Script {
        lists: Mutex<VecDeque<Result<u64, FeedError>>>,
        watches: Mutex<VecDeque<(u64, Result<(), FeedError>)>>,
        columns_changed: Mutex<VecDeque<bool>>,
        /// The upstream is found down at this LIST (its count) and comes back 1 s later,
        /// if ever; until then it is up, never found down.
        recovery_after: Option<usize>,
        /// When it comes back, once known.
        back: Mutex<Option<Instant>>,
        calls: Mutex<Vec<(Duration, Call)>>,
        start: Option<Instant>,
    }

    impl Script {
        fn new() -> Script {
            Script { start: Some(Instant::now()), ..Script::default() }
        }

        fn list(self, answer: Result<u64, FeedError>) -> Script {
            self.lists.lock().unwrap().push_back(answer);
            self
        }

        fn watch(self, rv: u64, answer: Result<(), FeedError>) -> Script {
            self.watches.lock().unwrap().push_back((rv, answer));
            self
        }

        fn record(&self, call: Call) {
            let at = self.start.unwrap().elapsed();
            self.calls.lock().unwrap().push((at, call));
        }

        fn calls(&self) -> Vec<(Duration, Call)> {
            self.calls.lock().unwrap().clone()
        }

        /// Drive the script until it is exhausted (an hour of paused time at most).
        async fn run(&self) -> Vec<(Duration, Call)> {
            let _ = tokio::time::timeout(Duration::from_secs(3600), drive(self, Machine::default())).await;
            self.calls()
        }
    }

    impl Steps for Script {
        async fn list(&self, relist: bool) -> Result<u64, FeedError> {
            self.record(if relist { Call::Relist } else { Call::List });
            if self.recovery_after == Some(self.calls().len()) {
                *self.back.lock().unwrap() = Some(Instant::now() + Duration::from_secs(1));
            }
            let next = self.lists.lock().unwrap().pop_front();
            match next {
                Some(answer) => answer,
                None => std::future::pending().await,
            }
        }

        async fn watch(&self, rv: u64) -> (u64, Result<(), FeedError>) {
            self.record(Call::Watch(rv));
            let next = self.watches.lock().unwrap().pop_front();
            match next {
                Some(answer) => answer,
                None => std::future::pending().await,
            }
        }

        async fn columns_changed(&self) -> bool {
            self.columns_changed.lock().unwrap().pop_front().unwrap_or(false)
        }

        async fn recovered(&self) {
            // Down until `back`, up (never found down again) after.
            let back = *self.back.lock().unwrap();
            match back {
                Some(back) if Instant::now() < back => tokio::time::sleep_until(back).await,
                _ => std::future::pending().await,
            }
        }

        fn refuse(&self, reason: &str) {
            self.record(Call::Refused(reason.to_string()));
        }
    }

    fn transport() -> FeedError {
        FeedError::Transport("connection refused".into())
    }

    fn status(code: u16, retry_after: Option<u64>) -> FeedError {
        FeedError::Status { code, body: format!("{code}"), retry_after }
    }

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    #[tokio::test(start_paused = true)]
    async fn a_list_leads_to_a_watch_from_its_rv_and_a_watch_that_ends_resumes_at_once() {
        let s = Script::new().list(Ok(5)).watch(9, Ok(())).watch(12, Ok(()));
        let calls = s.run().await;
        let zero = Duration::ZERO;
        assert_eq!(calls, [(zero, Call::List), (zero, Call::Watch(5)), (zero, Call::Watch(9)), (zero, Call::Watch(12))]);
    }

    #[tokio::test(start_paused = true)]
    async fn a_watch_that_expires_relists_at_once_then_watches_from_the_new_list() {
        let s = Script::new().list(Ok(5)).watch(7, Err(FeedError::Expired)).list(Ok(20));
        let calls: Vec<Call> = s.run().await.into_iter().map(|(at, c)| (at == Duration::ZERO).then_some(c).unwrap()).collect();
        assert_eq!(calls, [Call::List, Call::Watch(5), Call::Relist, Call::Watch(20)]);
    }

    #[tokio::test(start_paused = true)]
    async fn transport_errors_back_off_growing_to_a_cap_with_jitter() {
        let mut s = Script::new();
        for _ in 0..12 {
            s = s.list(Err(transport()));
        }
        let calls = s.list(Ok(3)).run().await;
        assert_eq!(calls.len(), 14, "{calls:?}");
        assert!(calls[..13].iter().all(|(_, c)| *c == Call::List));
        assert_eq!(calls[13].1, Call::Watch(3));
        for (i, pair) in calls[..13].windows(2).enumerate() {
            let gap = pair[1].0 - pair[0].0;
            let ceiling = (ms(200) * (1 << i.min(8))).min(Duration::from_secs(30));
            assert!(gap >= ceiling / 2 && gap <= ceiling, "wait {i}: {gap:?} not within [{:?}, {ceiling:?}]", ceiling / 2);
        }
        assert_eq!(calls[13].0, calls[12].0, "a list that succeeds is watched at once");
    }

    #[tokio::test(start_paused = true)]
    async fn a_429_waits_its_retry_after_and_does_not_grow_the_backoff() {
        let s = Script::new()
            .list(Err(status(429, Some(3))))
            .list(Err(status(429, Some(3))))
            .list(Err(status(429, None)))
            .list(Err(status(429, Some(30))))
            .list(Err(status(500, Some(1))))
            .list(Ok(8));
        let at: Vec<Duration> = s.run().await.into_iter().map(|(at, _)| at).collect();
        let secs = Duration::from_secs;
        assert_eq!(
            at[..5],
            [secs(0), secs(3), secs(6), secs(7), secs(7) + MAX_RETRY_AFTER],
            "Retry-After as given, 1 s without one, a long one cut"
        );
        let gap = at[5] - at[4];
        assert!(gap >= ms(100) && gap <= ms(200), "the 500 after four 429s is the first failure: {gap:?}");
    }

    #[tokio::test(start_paused = true)]
    async fn a_406_to_a_list_stops_the_feed_for_good() {
        let s = Script::new().list(Err(status(406, None)));
        // The driver returns by itself: no timeout needed.
        drive(&s, Machine::default()).await;
        assert_eq!(s.calls(), [(Duration::ZERO, Call::List), (Duration::ZERO, Call::Refused("406".into()))]);
        // A watch's 406 is retried like any other failure.
        let s = Script::new().list(Ok(1)).watch(4, Err(status(406, None)));
        let calls: Vec<Call> = s.run().await.into_iter().map(|(_, c)| c).collect();
        assert_eq!(calls, [Call::List, Call::Watch(1), Call::Watch(4)]);
    }

    #[tokio::test(start_paused = true)]
    async fn a_relist_that_fails_is_retried_as_a_relist() {
        let s =
            Script::new().list(Ok(5)).watch(6, Err(FeedError::Expired)).list(Err(transport())).list(Err(status(500, None))).list(Ok(30));
        let calls: Vec<Call> = s.run().await.into_iter().map(|(_, c)| c).collect();
        assert_eq!(calls, [Call::List, Call::Watch(5), Call::Relist, Call::Relist, Call::Relist, Call::Watch(30)]);
    }

    #[tokio::test(start_paused = true)]
    async fn an_idle_or_broken_watch_resumes_from_the_last_rv_it_reached() {
        let s = Script::new()
            .list(Ok(5))
            .watch(11, Err(FeedError::Stalled(Duration::from_secs(90))))
            .watch(14, Err(transport()))
            .watch(15, Ok(()));
        let calls = s.run().await;
        let rvs: Vec<Call> = calls.iter().map(|(_, c)| c.clone()).collect();
        assert_eq!(rvs, [Call::List, Call::Watch(5), Call::Watch(11), Call::Watch(14), Call::Watch(15)]);
        let (first, second) = (calls[2].0 - calls[1].0, calls[3].0 - calls[2].0);
        assert!(first >= ms(100) && first <= ms(200), "{first:?}");
        assert!(second >= ms(200) && second <= ms(400), "the backoff grows over the watch's failures: {second:?}");
        assert_eq!(calls[4].0, calls[3].0, "a watch that ran to its end resumes at once");
    }

    #[tokio::test(start_paused = true)]
    async fn a_wait_ends_when_the_upstream_recovers_and_the_backoff_starts_over() {
        let mut s = Script::new();
        for _ in 0..14 {
            s = s.list(Err(transport()));
        }
        // The tenth failure waits 15-30 s; the upstream is back 1 s into that wait.
        let s = Script { recovery_after: Some(10), ..s };
        let calls: Vec<Duration> = s.run().await.into_iter().map(|(at, _)| at).collect();
        assert_eq!(calls[10] - calls[9], Duration::from_secs(1), "the wait ends as the upstream is back: {calls:?}");
        let (a, b) = (calls[11] - calls[10], calls[12] - calls[11]);
        assert!(a >= ms(100) && a <= ms(200) && b >= ms(200) && b <= ms(400), "the backoff started over: {a:?}, {b:?}");
    }

    #[tokio::test(start_paused = true)]
    async fn changed_printer_columns_relist_after_the_watch_ends() {
        let s = Script::new().list(Ok(5)).watch(8, Ok(())).list(Ok(9));
        s.columns_changed.lock().unwrap().push_back(true);
        let calls: Vec<Call> = s.run().await.into_iter().map(|(_, c)| c).collect();
        assert_eq!(calls, [Call::List, Call::Watch(5), Call::Relist, Call::Watch(9)]);
    }

    #[test]
    fn transitions() {
        let at = |phase, failures| Machine { phase, failures };
        let watch = |rv| Phase::Watch { rv };
        assert_eq!(Machine::default().next(Input::Listed { rv: 4 }), at(watch(4), 0));
        assert_eq!(at(Phase::Relist, 3).next(Input::Listed { rv: 4 }), at(watch(4), 0));
        assert_eq!(
            at(watch(4), 2).next(Input::WatchFailed { rv: 6, error: transport() }),
            at(Phase::Backoff { wait: backoff(2), then: Resume::Watch { rv: 6 } }, 3)
        );
        assert_eq!(at(watch(4), 2).next(Input::WatchFailed { rv: 6, error: FeedError::Expired }), at(Phase::Relist, 2));
        assert_eq!(at(watch(4), 2).next(Input::WatchEnded { rv: 9 }), at(watch(9), 0));
        let waiting = at(Phase::Backoff { wait: backoff(0), then: Resume::Relist }, 5);
        assert_eq!(waiting.clone().next(Input::Waited { recovered: false }), at(Phase::Relist, 5));
        assert_eq!(waiting.clone().next(Input::Waited { recovered: true }), at(Phase::Relist, 0));
        assert_eq!(waiting.clone().next(Input::Listed { rv: 1 }), waiting, "an event of another phase changes nothing");
        assert_eq!(at(Phase::Relist, 1).next(Input::ListFailed(status(406, None))), at(Phase::Refused { reason: "406".into() }, 1));
        assert_eq!(backoff(0), Wait::Jittered { ceiling: ms(200) });
        assert_eq!(backoff(7), Wait::Jittered { ceiling: ms(25_600) });
        assert_eq!(backoff(8), Wait::Jittered { ceiling: Duration::from_secs(30) });
        assert_eq!(backoff(u32::MAX), Wait::Jittered { ceiling: Duration::from_secs(30) });
    }
}
