//! Answers that stop moving. A stream (an HTTP/2 stream, or an HTTP/1.1 connection, whose
//! answers go one at a time) whose body handed the connection a chunk that the client has
//! not taken within the stall timeout is ended: an HTTP/2 stream is reset (hyper drops its
//! task, and h2 sends RST_STREAM with CANCEL for a stream dropped before its end), an
//! HTTP/1.1 connection is closed. What the answer held (a watch's queued bytes, an in-flight
//! place, a snapshot) is released at that moment, not when the client leaves.
//!
//! A client that grants no HTTP/2 window stops hyper from asking the body for more, so a
//! stalled body is never polled and cannot time itself out; the task that runs the stream
//! can. Each stream's task is wrapped by [`StallGuard`]; the body, wrapped by [`Progress`],
//! tells it when a chunk was handed out and not yet followed by a request for the next.
//! A body waiting for something to say (an idle watch) is not stalled.

use futures_util::task::AtomicWaker;
use http_body::Frame;
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::Duration;
use tokio::time::{Instant, Sleep};

use crate::body::{Body, BoxError, Chunk, Tap, Tapped};

/// Default of the stall timeout: the watch's own (a watcher that cannot queue for this long
/// is ended too).
pub const STALL_TIMEOUT: Duration = Duration::from_secs(15);

tokio::task_local! {
    /// The stream the running task serves.
    static CURRENT: Arc<Stream>;
}

/// One stream's progress, shared by its task ([`StallGuard`]) and its answer's body
/// ([`Progress`]).
#[derive(Debug, Default)]
pub struct Stream {
    ended: AtomicBool,
    waker: AtomicWaker,
    /// When the body handed out a chunk not yet followed by a poll for the next one.
    handed: Mutex<Option<Instant>>,
}

impl Stream {
    /// The stream the calling task serves, if it runs in a [`StallGuard`] task.
    pub fn current() -> Option<Arc<Stream>> {
        CURRENT.try_with(Arc::clone).ok()
    }

    /// End the stream now (its task is dropped at its next poll).
    pub fn end(&self) {
        self.ended.store(true, Ordering::Release);
        self.waker.wake();
    }

    /// Whether the stream was ended.
    pub fn ended(&self) -> bool {
        self.ended.load(Ordering::Acquire)
    }

    fn handed(&self) -> Option<Instant> {
        *self.handed.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn set_handed(&self, at: Option<Instant>) {
        *self.handed.lock().unwrap_or_else(|e| e.into_inner()) = at;
    }
}

/// A stream's task: `inner` run with its [`Stream`] as the task's current one, ended (its
/// output `None`) when the stream is ended or its body stalls past `stall`.
pub struct StallGuard<F: Future> {
    inner: Pin<Box<tokio::task::futures::TaskLocalFuture<Arc<Stream>, F>>>,
    stream: Arc<Stream>,
    stall: Duration,
    timer: Option<(Instant, Pin<Box<Sleep>>)>,
}

impl<F: Future> StallGuard<F> {
    /// `inner` as the task of a new stream.
    pub fn new(inner: F, stall: Duration) -> Self {
        Self::with(inner, Arc::new(Stream::default()), stall)
    }

    /// `inner` as the task of `stream`.
    pub fn with(inner: F, stream: Arc<Stream>, stall: Duration) -> Self {
        StallGuard { inner: Box::pin(CURRENT.scope(stream.clone(), inner)), stream, stall, timer: None }
    }

    /// Whether the body has been stalled for the timeout (arming the timer for when it will
    /// have been, if it is stalled at all).
    fn stalled(&mut self, cx: &mut Context<'_>) -> bool {
        let Some(since) = self.stream.handed() else {
            self.timer = None;
            return false;
        };
        let deadline = since + self.stall;
        match &mut self.timer {
            Some((at, sleep)) if *at == deadline => sleep.as_mut().poll(cx).is_ready(),
            _ => {
                let mut sleep = Box::pin(tokio::time::sleep_until(deadline));
                let ready = sleep.as_mut().poll(cx).is_ready();
                self.timer = Some((deadline, sleep));
                ready
            }
        }
    }
}

impl<F: Future> Future for StallGuard<F> {
    type Output = Option<F::Output>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        self.stream.waker.register(cx.waker());
        if self.stream.ended() {
            return Poll::Ready(None);
        }
        // Judged before the task runs: running it because the timer woke it may let the
        // connection ask the body for more (room in its own buffers), which is no sign that
        // the client took anything.
        if !self.stall.is_zero() && self.stalled(cx) {
            crate::telemetry::limit_hit("stall-timeout-seconds");
            tracing::debug!(stall_seconds = self.stall.as_secs_f64(), "ending a stream whose client took nothing within the stall timeout");
            self.stream.end();
            return Poll::Ready(None);
        }
        if let Poll::Ready(out) = self.inner.as_mut().poll(cx) {
            return Poll::Ready(Some(out));
        }
        if self.stream.ended() {
            return Poll::Ready(None);
        }
        // Arm the timer for a chunk handed out just now.
        if !self.stall.is_zero() {
            let _ = self.stalled(cx);
        }
        Poll::Pending
    }
}

/// The executor hyper runs each HTTP/2 stream's task on: tokio's, with each task
/// [`StallGuard`].
#[derive(Debug, Clone, Copy)]
pub struct StreamExec {
    /// The stall timeout (zero: none).
    pub stall: Duration,
}

impl<F> hyper::rt::Executor<F> for StreamExec
where
    F: Future + Send + 'static,
    F::Output: Send + 'static,
{
    fn execute(&self, fut: F) {
        tokio::spawn(StallGuard::new(fut, self.stall));
    }
}

/// What an answer's body tells its stream: when it handed out a chunk, and when it was asked
/// for the next (or dropped: the answer is over).
pub struct Progress(Arc<Stream>);

impl Progress {
    /// `inner`, reporting to `stream`.
    pub fn wrap(inner: Body, stream: Arc<Stream>) -> Body {
        http_body_util::BodyExt::boxed_unsync(Tapped::new(inner, Progress(stream)))
    }
}

impl Drop for Progress {
    fn drop(&mut self) {
        self.0.set_handed(None);
    }
}

impl Tap<Chunk, BoxError> for Progress {
    fn polling(&mut self) {
        self.0.set_handed(None);
    }

    fn polled(&mut self, frame: Option<&Result<Frame<Chunk>, BoxError>>, _: bool) {
        if let Some(Ok(_)) = frame {
            self.0.set_handed(Some(Instant::now()));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A body of one chunk, then silence: the chunk handed out arms the timer; a stream
    /// whose chunk is never taken is ended at the timeout, not before.
    #[tokio::test(start_paused = true)]
    async fn a_chunk_not_taken_ends_the_stream_at_the_timeout() {
        let stream = Arc::new(Stream::default());
        let s = stream.clone();
        let started = Instant::now();
        let task = StallGuard::with(
            async move {
                let mut body = Progress::wrap(crate::body::full("x"), s);
                // Take one frame and then never ask again (as hyper does without window).
                let _ = http_body_util::BodyExt::frame(&mut body).await;
                std::future::pending::<()>().await
            },
            stream.clone(),
            Duration::from_secs(15),
        );
        assert_eq!(task.await, None, "ended");
        assert!(stream.ended());
        assert_eq!(started.elapsed(), Duration::from_secs(15));
    }

    /// A body with nothing to say (an idle watch) is not stalled however long it waits.
    #[tokio::test(start_paused = true)]
    async fn a_body_waiting_for_data_is_not_stalled() {
        let stream = Arc::new(Stream::default());
        let s = stream.clone();
        let (tx, rx) = tokio::sync::mpsc::channel::<Result<Frame<Chunk>, BoxError>>(1);
        let task = StallGuard::with(
            async move {
                let mut body =
                    Progress::wrap(http_body_util::BodyExt::boxed_unsync(http_body_util::StreamBody::new(tokio_stream_of(rx))), s);
                let mut n = 0;
                while let Some(Ok(_)) = http_body_util::BodyExt::frame(&mut body).await {
                    n += 1;
                }
                n
            },
            stream.clone(),
            Duration::from_secs(15),
        );
        let writer = async move {
            tokio::time::sleep(Duration::from_secs(3600)).await;
            tx.send(Ok(Frame::data(Chunk::One(bytes::Bytes::from_static(b"late"))))).await.unwrap();
        };
        let (n, ()) = tokio::join!(task, writer);
        assert_eq!(n, Some(1), "the late frame was read and the body ended");
        assert!(!stream.ended());
    }

    fn tokio_stream_of<T: Send + 'static>(mut rx: tokio::sync::mpsc::Receiver<T>) -> impl futures_util::Stream<Item = T> {
        futures_util::stream::poll_fn(move |cx| rx.poll_recv(cx))
    }

    /// `Stream::current` is the stream of the task that asks, and `end` ends that task.
    #[tokio::test]
    async fn a_task_can_end_its_own_stream() {
        let task = StallGuard::new(
            async {
                Stream::current().expect("inside a guarded task").end();
                std::future::pending::<()>().await
            },
            Duration::ZERO,
        );
        assert_eq!(task.await, None);
        assert!(Stream::current().is_none(), "no stream outside");
    }
}
