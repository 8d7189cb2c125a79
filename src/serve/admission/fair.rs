//! Large answers from memory, a few per client at a time. Sending a LIST of every pod is
//! seconds of a core (copying, TLS, the indentation of a `pretty` one); a client that asks
//! for many at once (`pretty=true` LISTs of all pods in loops) would have kache's threads
//! wait for a CPU and every other client's reads slow down many times. Past
//! `--max-large-answers-per-client` a client's further large answers wait, in the order
//! they came, for one of its own to end: it gets its share of kache's work, and the others
//! theirs. A wait longer than [`QUEUE_WAIT`] ends in the apiserver's own 429 with
//! `Retry-After`, as a request its priority-and-fairness queues could not seat.

use crate::api::status::Status;
use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

/// Answers larger than this (the body kache writes before any indentation or compression)
/// are large.
pub const LARGE: u64 = 1 << 20;

/// Default of the large answers one client may have being sent at once.
pub const PER_CLIENT: usize = 2;

/// Longest a large answer waits for a place among its client's (the apiserver's
/// priority-and-fairness queue wait is a quarter of its 60 s request timeout).
pub const QUEUE_WAIT: Duration = Duration::from_secs(15);

#[derive(Debug)]
struct Clients {
    per_client: usize,
    /// Large answers waiting for a place now.
    waiting: AtomicUsize,
    /// One queue per client with large answers being sent or waiting; removed when idle.
    clients: Mutex<HashMap<String, Arc<Semaphore>>>,
}

/// The places of every client's large answers.
#[derive(Debug, Clone)]
pub struct Large(Arc<Clients>);

/// A place among a client's large answers (or its place in the queue for one), held until
/// the answer's body has been sent or dropped.
#[derive(Debug)]
pub struct Place {
    inner: Arc<Clients>,
    client: String,
    queue: Option<Arc<Semaphore>>,
    permit: Option<OwnedSemaphorePermit>,
}

impl Drop for Place {
    fn drop(&mut self) {
        self.permit.take();
        self.queue.take();
        // Forget the client's queue once nothing holds or waits for a place in it (the
        // map's own reference is the last).
        let mut clients = self.inner.clients.lock().unwrap_or_else(|e| e.into_inner());
        if clients.get(&self.client).is_some_and(|q| Arc::strong_count(q) == 1) {
            clients.remove(&self.client);
        }
    }
}

impl Large {
    /// At most `per_client` large answers per client at once (0: no bound).
    pub fn new(per_client: usize) -> Large {
        Large(Arc::new(Clients { per_client, waiting: AtomicUsize::new(0), clients: Mutex::new(HashMap::new()) }))
    }

    /// A place for an answer of `bytes` to `client`: `None` for an answer that is not large
    /// (or with no bound), else once one of the client's places is free, or the 429 to send
    /// when none came within [`QUEUE_WAIT`].
    pub async fn place(&self, client: &str, bytes: u64) -> Result<Option<Place>, Status> {
        if self.0.per_client == 0 || bytes <= LARGE {
            return Ok(None);
        }
        let queue = {
            let mut clients = self.0.clients.lock().unwrap_or_else(|e| e.into_inner());
            clients.entry(client.to_string()).or_insert_with(|| Arc::new(Semaphore::new(self.0.per_client))).clone()
        };
        let mut place = Place { inner: self.0.clone(), client: client.to_string(), queue: Some(queue.clone()), permit: None };
        let permit = match queue.clone().try_acquire_owned() {
            Ok(p) => p,
            Err(_) => {
                crate::telemetry::limit_hit("max-large-answers-per-client");
                self.0.waiting.fetch_add(1, Ordering::Relaxed);
                let got = tokio::time::timeout(QUEUE_WAIT, queue.acquire_owned()).await;
                self.0.waiting.fetch_sub(1, Ordering::Relaxed);
                match got {
                    Ok(Ok(p)) => p,
                    _ => return Err(Status::too_many_requests("Too many requests, please try again later.", 1)),
                }
            }
        };
        place.permit = Some(permit);
        Ok(Some(place))
    }

    /// Large answers waiting for a place now.
    pub fn waiting(&self) -> usize {
        self.0.waiting.load(Ordering::Relaxed)
    }

    /// Clients with large answers being sent or waiting.
    #[cfg(test)]
    fn clients(&self) -> usize {
        self.0.clients.lock().unwrap().len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn a_clients_large_answers_wait_for_its_own_others_go_at_once() {
        let large = Large::new(2);
        assert!(large.place("tenant", LARGE).await.unwrap().is_none(), "1 MiB is not large");
        let a = large.place("tenant", LARGE + 1).await.unwrap().expect("a place");
        let b = large.place("tenant", 500 << 20).await.unwrap().expect("a place");
        // The tenant's third waits; another client's goes at once.
        let third = tokio::spawn({
            let large = large.clone();
            async move { large.place("tenant", 500 << 20).await.map(|p| p.is_some()) }
        });
        let other = large.place("honest", 500 << 20).await.unwrap();
        assert!(other.is_some());
        tokio::task::yield_now().await;
        assert!(!third.is_finished(), "waits while the tenant's two are being sent");
        drop(a);
        assert!(third.await.unwrap().unwrap(), "the place that came free");
        drop((b, other));
        assert_eq!(large.clients(), 0, "idle clients are forgotten");
    }

    #[tokio::test(start_paused = true)]
    async fn a_wait_longer_than_the_queue_wait_is_the_apiservers_429() {
        let large = Large::new(1);
        let held = large.place("tenant", 500 << 20).await.unwrap();
        let started = tokio::time::Instant::now();
        let e = large.place("tenant", 500 << 20).await.unwrap_err();
        assert_eq!(started.elapsed(), QUEUE_WAIT);
        assert_eq!((e.code, e.reason.as_str()), (429, "TooManyRequests"));
        assert_eq!(e.details.as_ref().unwrap().retry_after_seconds, 1);
        drop(held);
        assert_eq!(large.clients(), 0);
        // No bound: never waits.
        let unbounded = Large::new(0);
        let _x = unbounded.place("tenant", 500 << 20).await.unwrap();
        assert!(unbounded.place("tenant", 500 << 20).await.unwrap().is_none());
    }
}
