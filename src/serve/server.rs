//! The listener: bind (port 0 allowed, the bound address written to a file for tests and
//! scripts), accept, optionally terminate TLS, and serve each connection with HTTP/1.1 or
//! HTTP/2 on its own task, within per-connection limits (header size and read timeout, TLS
//! handshake timeout, HTTP/2 streams and header list size). Every request carries a [`Peer`]
//! extension: the client's address and its verified certificate identity, if any.

use crate::auth::tls::CertIdentity;
use crate::body::Body;
use crate::body::RequestBody;
use hyper::body::Incoming;
use hyper::{Request, Response};
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use hyper_util::server::graceful::{GracefulShutdown, Watcher};
use std::future::Future;
use std::net::SocketAddr;
use std::path::Path;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;
use tokio::io::{AsyncRead, AsyncWrite, AsyncWriteExt};
use tokio::net::TcpListener;
use tokio_rustls::TlsAcceptor;

/// HTTP/2 streams one client connection may have open at once. client-go multiplexes every
/// watch of a process over one connection, so hyper's default of 200 is far too low.
pub const MAX_STREAMS: u32 = 100_000;

/// Something that answers requests.
pub trait Handler: Send + Sync + 'static {
    /// Answer one request.
    fn handle<B: RequestBody>(self: Arc<Self>, req: Request<B>) -> impl Future<Output = Response<Body>> + Send;
}

/// The connection a request came on (a request extension).
#[derive(Debug, Clone)]
pub struct Peer {
    /// The client's address.
    pub addr: SocketAddr,
    /// The identity in the client certificate the TLS handshake verified, if any.
    pub cert: Option<Arc<CertIdentity>>,
}

/// Limits every connection is held to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ConnLimits {
    /// Largest request head (request line and headers) over HTTP/1.1, and header list over
    /// HTTP/2, in bytes.
    pub max_header_bytes: usize,
    /// Time a client has to send a request's headers over HTTP/1.1.
    pub header_read_timeout: Duration,
    /// Time a client has to complete the TLS handshake.
    pub tls_handshake_timeout: Duration,
    /// HTTP/2 streams one connection may have open at once.
    pub max_streams: u32,
    /// How long a write to the client may make no progress before the connection is
    /// closed (a client that stops reading holds no answer, snapshot or permit past it).
    pub write_timeout: Duration,
}

/// Default of [`ConnLimits::write_timeout`]: a client that has not read for a minute is gone
/// or hostile; one that reads slowly makes progress and is never cut.
pub const WRITE_TIMEOUT: Duration = Duration::from_secs(60);

impl Default for ConnLimits {
    fn default() -> Self {
        ConnLimits {
            max_header_bytes: 1 << 20,
            header_read_timeout: Duration::from_secs(32),
            tls_handshake_timeout: Duration::from_secs(10),
            max_streams: MAX_STREAMS,
            write_timeout: WRITE_TIMEOUT,
        }
    }
}

/// Bind `addr` and, if asked, write the bound address to `addr_file` (atomically, so a
/// reader never sees half of it).
pub async fn bind(addr: &str, addr_file: Option<&Path>) -> std::io::Result<(TcpListener, SocketAddr)> {
    let listener = TcpListener::bind(addr).await?;
    let local = listener.local_addr()?;
    if let Some(path) = addr_file {
        let tmp = path.with_extension("tmp");
        std::fs::write(&tmp, local.to_string())?;
        std::fs::rename(&tmp, path)?;
    }
    Ok((listener, local))
}

/// Serve plain HTTP connections from `listener` with default limits until `shutdown`
/// resolves; see [`serve_with`].
pub async fn serve<H: Handler>(listener: TcpListener, handler: Arc<H>, shutdown: impl Future<Output = ()>, grace: Duration) {
    serve_with(listener, None, ConnLimits::default(), handler, shutdown, grace).await
}

type Builder = hyper_util::server::conn::auto::Builder<TokioExecutor>;

fn builder(limits: ConnLimits) -> Builder {
    let mut builder = Builder::new(TokioExecutor::new());
    builder
        .http1()
        .timer(TokioTimer::new())
        .header_read_timeout(limits.header_read_timeout)
        .max_buf_size(limits.max_header_bytes.max(8192));
    builder
        .http2()
        .timer(TokioTimer::new())
        .max_concurrent_streams(limits.max_streams)
        .max_header_list_size(u32::try_from(limits.max_header_bytes).unwrap_or(u32::MAX))
        // Rapid-reset (CVE-2023-44487) and error-reset floods end the connection.
        .max_pending_accept_reset_streams(Some(200))
        .max_local_error_reset_streams(Some(1024));
    builder
}

/// Serve connections from `listener` (TLS when `tls` is set: each connection gets the
/// configuration `tls` holds when it is accepted, so certificates reloaded in it apply to new
/// connections) until `shutdown` resolves; then stop accepting, let connections finish their
/// requests (HTTP/2 gets GOAWAY), and return when they are done or `grace` has passed.
pub async fn serve_with<H: Handler>(
    listener: TcpListener,
    tls: Option<crate::auth::tls::TlsConfig>,
    limits: ConnLimits,
    handler: Arc<H>,
    shutdown: impl Future<Output = ()>,
    grace: Duration,
) {
    tokio::pin!(shutdown);
    let graceful = GracefulShutdown::new();
    let builder = Arc::new(builder(limits));
    loop {
        let (stream, addr) = tokio::select! {
            r = listener.accept() => match r {
                Ok(a) => a,
                Err(e) => {
                    tracing::warn!(error = %e, "accept failed");
                    continue;
                }
            },
            _ = &mut shutdown => break,
        };
        let _ = stream.set_nodelay(true);
        let acceptor = tls.as_ref().map(|t| TlsAcceptor::from(t.load_full()));
        tokio::spawn(accepted(stream, addr, acceptor, limits, builder.clone(), handler.clone(), graceful.watcher()));
    }
    drop(listener);
    if tokio::time::timeout(grace, graceful.shutdown()).await.is_err() {
        tracing::warn!(grace_seconds = grace.as_secs_f64(), "connections still open after the grace period");
    }
}

/// Serve one accepted connection (after the TLS handshake, when `acceptor` is set) until it
/// ends.
async fn accepted<H: Handler, S>(
    stream: S,
    addr: SocketAddr,
    acceptor: Option<TlsAcceptor>,
    limits: ConnLimits,
    builder: Arc<Builder>,
    handler: Arc<H>,
    watcher: Watcher,
) where
    S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let Some(acceptor) = acceptor else {
        let io = WriteDeadline::new(stream, limits.write_timeout);
        return connection(builder, io, Peer { addr, cert: None }, handler, watcher).await;
    };
    let tls = match tokio::time::timeout(limits.tls_handshake_timeout, acceptor.accept(stream)).await {
        Ok(Ok(s)) => s,
        Ok(Err(e)) => return tracing::debug!(client.addr = %addr, error = %e, "TLS handshake failed"),
        Err(_) => return tracing::debug!(client.addr = %addr, "TLS handshake timed out"),
    };
    let cert = tls.get_ref().1.peer_certificates().and_then(|c| c.first()).and_then(|c| CertIdentity::from_der(c)).map(Arc::new);
    connection(builder, WriteDeadline::new(tls, limits.write_timeout), Peer { addr, cert }, handler, watcher).await
}

/// A connection whose writes must make progress: one that has waited `timeout` for the
/// client to take any byte fails with `TimedOut`, which ends the connection (and every
/// answer on it). Reads are not bounded here: an idle connection (a client between
/// requests, a watch with nothing to say) is not a stalled one.
pub struct WriteDeadline<IO> {
    io: IO,
    timeout: Duration,
    /// Armed when a write or flush first has to wait; disarmed by any progress.
    stalled: Option<Pin<Box<tokio::time::Sleep>>>,
    /// The deadline passed: every write fails at once from then on (counted once).
    timed_out: bool,
}

impl<IO> WriteDeadline<IO> {
    /// `io` whose writes time out after `timeout` without progress.
    pub fn new(io: IO, timeout: Duration) -> Self {
        WriteDeadline { io, timeout, stalled: None, timed_out: false }
    }

    /// Whether a write waited past the deadline (the connection is then given up).
    pub fn timed_out(&self) -> bool {
        self.timed_out
    }

    /// After a write that had to wait: the deadline's verdict (arming it if need be).
    fn waiting(&mut self, cx: &mut Context<'_>) -> Poll<std::io::Error> {
        let timeout = self.timeout;
        let sleep = self.stalled.get_or_insert_with(|| Box::pin(tokio::time::sleep(timeout)));
        match sleep.as_mut().poll(cx) {
            Poll::Ready(()) => {
                crate::telemetry::limit_hit("write-timeout-seconds");
                self.timed_out = true;
                Poll::Ready(Self::expired())
            }
            Poll::Pending => Poll::Pending,
        }
    }

    fn expired() -> std::io::Error {
        std::io::Error::new(std::io::ErrorKind::TimedOut, "the client took no bytes within the write timeout")
    }

    /// `polled`, with the deadline applied to a wait.
    fn deadline<T>(&mut self, polled: Poll<std::io::Result<T>>, cx: &mut Context<'_>) -> Poll<std::io::Result<T>> {
        match polled {
            Poll::Pending => self.waiting(cx).map(Err),
            ready => {
                self.stalled = None;
                ready
            }
        }
    }
}

impl<IO: AsyncRead + Unpin> AsyncRead for WriteDeadline<IO> {
    fn poll_read(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut tokio::io::ReadBuf<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.io).poll_read(cx, buf)
    }
}

impl<IO: AsyncWrite + Unpin> AsyncWrite for WriteDeadline<IO> {
    fn poll_write(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &[u8]) -> Poll<std::io::Result<usize>> {
        if self.timed_out {
            return Poll::Ready(Err(Self::expired()));
        }
        let polled = Pin::new(&mut self.io).poll_write(cx, buf);
        self.deadline(polled, cx)
    }

    fn poll_write_vectored(mut self: Pin<&mut Self>, cx: &mut Context<'_>, bufs: &[std::io::IoSlice<'_>]) -> Poll<std::io::Result<usize>> {
        if self.timed_out {
            return Poll::Ready(Err(Self::expired()));
        }
        let polled = Pin::new(&mut self.io).poll_write_vectored(cx, bufs);
        self.deadline(polled, cx)
    }

    fn is_write_vectored(&self) -> bool {
        self.io.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        if self.timed_out {
            return Poll::Ready(Err(Self::expired()));
        }
        let polled = Pin::new(&mut self.io).poll_flush(cx);
        self.deadline(polled, cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        if self.timed_out {
            return Poll::Ready(Err(Self::expired()));
        }
        let polled = Pin::new(&mut self.io).poll_shutdown(cx);
        self.deadline(polled, cx)
    }
}

/// How long ending a connection may wait to write its TLS close_notify (Go's `tls.Conn.Close`
/// waits 5 s too).
pub const CLOSE_NOTIFY_TIMEOUT: Duration = Duration::from_secs(5);

/// Serve one connection until it ends (or the graceful shutdown it is watched by ends it),
/// then [`close`] it.
async fn connection<H: Handler, IO>(builder: Arc<Builder>, io: WriteDeadline<IO>, peer: Peer, handler: Arc<H>, watcher: Watcher)
where
    IO: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let (io, back) = HandBack::new(io);
    let addr = peer.addr;
    let svc = hyper::service::service_fn(move |mut req: Request<Incoming>| {
        let h = handler.clone();
        req.extensions_mut().insert(peer.clone());
        async move { Ok::<_, std::convert::Infallible>(h.handle(req).await) }
    });
    let conn = builder.serve_connection_with_upgrades(TokioIo::new(io), svc);
    if let Err(e) = watcher.watch(conn.into_owned()).await {
        tracing::debug!(client.addr = %addr, error = %e, "connection ended");
    }
    // hyper drops the connection without a word when it ends it on an error (the header read
    // timeout of an idle connection, a body that failed half way): back here, it is closed.
    if let Ok(io) = back.await {
        close(io, addr).await;
    }
}

/// End a connection as the apiserver does (Go's `tls.Conn.Close`): over TLS with a
/// close_notify, so that the client tells a closed connection from a cut one (an answer cut
/// short shows in its HTTP framing), waiting at most [`CLOSE_NOTIFY_TIMEOUT`]. A connection
/// given up at the write timeout gets nothing more: its client is not reading.
async fn close<IO: AsyncWrite + Unpin>(mut io: WriteDeadline<IO>, addr: SocketAddr) {
    if io.timed_out() {
        return tracing::warn!(
            client.addr = %addr,
            write_timeout_seconds = io.timeout.as_secs_f64(),
            "closed a connection whose client took no bytes within the write timeout"
        );
    }
    match tokio::time::timeout(CLOSE_NOTIFY_TIMEOUT, io.shutdown()).await {
        Ok(Ok(())) => {}
        Ok(Err(e)) => tracing::debug!(client.addr = %addr, error = %e, "closing the connection failed"),
        Err(_) => tracing::debug!(client.addr = %addr, "the connection's close_notify could not be written in time"),
    }
}

/// A connection's transport lent to hyper, handed back through a channel when hyper drops it
/// (when the connection ends, or an upgraded stream is dropped), so that it can be closed
/// properly; hyper only shuts a connection down itself when it ends without an error.
struct HandBack<IO> {
    io: Option<IO>,
    back: Option<tokio::sync::oneshot::Sender<IO>>,
}

impl<IO> HandBack<IO> {
    fn new(io: IO) -> (Self, tokio::sync::oneshot::Receiver<IO>) {
        let (tx, rx) = tokio::sync::oneshot::channel();
        (HandBack { io: Some(io), back: Some(tx) }, rx)
    }

    fn io(&mut self) -> Pin<&mut IO>
    where
        IO: Unpin,
    {
        Pin::new(self.io.as_mut().expect("the transport is handed back only on drop"))
    }
}

impl<IO> Drop for HandBack<IO> {
    fn drop(&mut self) {
        if let (Some(io), Some(back)) = (self.io.take(), self.back.take()) {
            // Nobody waiting (the connection task is gone): the transport is dropped.
            let _ = back.send(io);
        }
    }
}

impl<IO: AsyncRead + Unpin> AsyncRead for HandBack<IO> {
    fn poll_read(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut tokio::io::ReadBuf<'_>) -> Poll<std::io::Result<()>> {
        self.io().poll_read(cx, buf)
    }
}

impl<IO: AsyncWrite + Unpin> AsyncWrite for HandBack<IO> {
    fn poll_write(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &[u8]) -> Poll<std::io::Result<usize>> {
        self.io().poll_write(cx, buf)
    }

    fn poll_write_vectored(mut self: Pin<&mut Self>, cx: &mut Context<'_>, bufs: &[std::io::IoSlice<'_>]) -> Poll<std::io::Result<usize>> {
        self.io().poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.io.as_ref().is_some_and(|io| io.is_write_vectored())
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        self.io().poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        self.io().poll_shutdown(cx)
    }
}

#[cfg(test)]
mod tests;
