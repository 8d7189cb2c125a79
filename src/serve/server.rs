//! The listener: bind (port 0 allowed, the bound address written to a file for tests and
//! scripts), accept, optionally terminate TLS, and serve each connection with HTTP/1.1 or
//! HTTP/2 on its own task, within per-connection limits (header size and read timeout, TLS
//! handshake timeout, HTTP/2 streams and header list size). Every request carries a [`Peer`]
//! extension: the client's address and its verified certificate identity, if any.

use crate::auth::tls::CertIdentity;
use crate::body::Body;
use crate::body::RequestBody;
use crate::serve::handler::WatchBuffers;
use dashmap::DashMap;
use hyper::body::Incoming;
use hyper::{Request, Response};
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::server::graceful::{GracefulShutdown, Watcher};
use std::future::Future;
use std::net::{IpAddr, SocketAddr};
use std::path::Path;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;
use tokio::io::{AsyncRead, AsyncWrite, AsyncWriteExt};
use tokio::net::TcpListener;
use tokio_rustls::TlsAcceptor;

pub mod stall;
use stall::{Progress, StallGuard, Stream, StreamExec};

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
    /// The bytes this connection's watches together may have queued (`None`: no bound of
    /// the connection's own).
    pub watch_buffers: Option<WatchBuffers>,
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
    /// How long an answer's body may wait for the client to take a chunk before its stream
    /// is ended (HTTP/2: reset; HTTP/1.1: the connection closed). See [`stall`].
    pub stall_timeout: Duration,
    /// Time from accept for a connection to send the first [`PREFACE_BYTES`] bytes (after
    /// TLS): the HTTP/2 preface, or the start of an HTTP/1.1 request. The time for its
    /// first request's headers is `header_read_timeout`, also from accept.
    pub preface_timeout: Duration,
    /// Connections open at once (0: no bound); past it new ones are closed at accept.
    pub max_connections: usize,
    /// Connections open at once from one source address (0: no bound).
    pub max_connections_per_address: usize,
    /// Bytes all watches of one connection may have queued (0: no bound of its own).
    pub watch_buffers_per_connection: usize,
}

/// Bytes of the HTTP/2 client preface (`PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n`).
pub const PREFACE_BYTES: usize = 24;

/// Default of [`ConnLimits::preface_timeout`]: Go's HTTP/2 server, the apiserver's, allows a
/// connection 10 s for the preface.
pub const PREFACE_TIMEOUT: Duration = Duration::from_secs(10);

/// The default bound on connections: the process's file descriptor limit less 1,024 (for
/// the upstream's connections and files), at least half of it; 0 (no bound) where the
/// limit is unknown or unlimited.
pub fn descriptor_bound() -> usize {
    match rustix::process::getrlimit(rustix::process::Resource::Nofile).current {
        Some(n) => {
            let n = usize::try_from(n).unwrap_or(usize::MAX);
            n.saturating_sub(1024).max(n / 2)
        }
        None => 0,
    }
}

/// Default of [`ConnLimits::watch_buffers_per_connection`].
pub const WATCH_BUFFERS_PER_CONNECTION: usize = 64 << 20;

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
            stall_timeout: stall::STALL_TIMEOUT,
            preface_timeout: PREFACE_TIMEOUT,
            max_connections: 0,
            max_connections_per_address: 0,
            watch_buffers_per_connection: WATCH_BUFFERS_PER_CONNECTION,
        }
    }
}

/// Why [`bind`] failed.
#[derive(Debug, thiserror::Error)]
pub enum BindError {
    /// The address could not be bound: in use, not one of this host's, not permitted.
    #[error("cannot listen on {addr}")]
    Listen {
        /// The address asked for.
        addr: String,
        /// Why not.
        #[source]
        source: std::io::Error,
    },
    /// The bound address could not be written to the address file.
    #[error("cannot write the bound address to {}", path.display())]
    AddrFile {
        /// The address file.
        path: std::path::PathBuf,
        /// Why not.
        #[source]
        source: std::io::Error,
    },
}

/// Bind `addr` and, if asked, write the bound address to `addr_file` (atomically, so a
/// reader never sees half of it).
pub async fn bind(addr: &str, addr_file: Option<&Path>) -> Result<(TcpListener, SocketAddr), BindError> {
    let listen = |source| BindError::Listen { addr: addr.to_string(), source };
    let listener = TcpListener::bind(addr).await.map_err(listen)?;
    let local = listener.local_addr().map_err(listen)?;
    if let Some(path) = addr_file {
        let tmp = path.with_extension("tmp");
        std::fs::write(&tmp, local.to_string())
            .and_then(|()| std::fs::rename(&tmp, path))
            .map_err(|source| BindError::AddrFile { path: path.to_path_buf(), source })?;
    }
    Ok((listener, local))
}

/// Serve plain HTTP connections from `listener` with default limits until `shutdown`
/// resolves; see [`serve_with`].
pub async fn serve<H: Handler>(listener: TcpListener, handler: Arc<H>, shutdown: impl Future<Output = ()>, grace: Duration) {
    serve_with(listener, None, ConnLimits::default(), handler, shutdown, grace).await
}

type Builder = hyper_util::server::conn::auto::Builder<StreamExec>;

fn builder(limits: ConnLimits) -> Builder {
    // Each HTTP/2 stream's task is guarded against stalls (see `stall`).
    let mut builder = Builder::new(StreamExec { stall: limits.stall_timeout });
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
    let open = Arc::new(Connections::new(limits));
    let mut failures = AcceptFailures::default();
    loop {
        let (stream, addr) = tokio::select! {
            r = listener.accept() => match r {
                Ok(a) => {
                    failures.ok();
                    a
                }
                Err(e) => {
                    // Out of descriptors the pending connection stays in the backlog and
                    // accept fails again at once: wait before trying (the clients already
                    // served free descriptors as they end).
                    tokio::select! {
                        _ = tokio::time::sleep(failures.failed(&e)) => {}
                        _ = &mut shutdown => break,
                    }
                    continue;
                }
            },
            _ = &mut shutdown => break,
        };
        let Some(place) = open.admit(addr.ip()) else { continue };
        let _ = stream.set_nodelay(true);
        let acceptor = tls.as_ref().map(|t| TlsAcceptor::from(t.load_full()));
        let conn = accepted(stream, addr, acceptor, limits, builder.clone(), handler.clone(), graceful.watcher());
        tokio::spawn(async move {
            conn.await;
            drop(place);
        });
    }
    drop(listener);
    if tokio::time::timeout(grace, graceful.shutdown()).await.is_err() {
        tracing::warn!(grace_seconds = grace.as_secs_f64(), "connections still open after the grace period");
    }
}

/// Failed accepts: how long to wait before the next, and a log line at most every
/// [`AcceptFailures::LOG_EVERY`] (a process out of descriptors fails every accept).
#[derive(Debug, Default)]
struct AcceptFailures {
    /// The wait after the last failure (doubling while they go on).
    backoff: Duration,
    /// Failures not logged yet, and when the last line was logged.
    unlogged: u64,
    logged: Option<tokio::time::Instant>,
}

impl AcceptFailures {
    const FIRST: Duration = Duration::from_millis(5);
    const MOST: Duration = Duration::from_secs(1);
    const LOG_EVERY: Duration = Duration::from_secs(10);

    fn ok(&mut self) {
        self.backoff = Duration::ZERO;
    }

    /// Count `e`; the time to wait before accepting again.
    fn failed(&mut self, e: &std::io::Error) -> Duration {
        let kind = match e.raw_os_error() {
            Some(c) if c == rustix::io::Errno::MFILE.raw_os_error() || c == rustix::io::Errno::NFILE.raw_os_error() => "descriptors",
            Some(c) if c == rustix::io::Errno::NOBUFS.raw_os_error() || c == rustix::io::Errno::NOMEM.raw_os_error() => "memory",
            _ => "other",
        };
        metrics::counter!(crate::telemetry::ACCEPT_ERRORS, "kind" => kind).increment(1);
        self.unlogged += 1;
        let now = tokio::time::Instant::now();
        if self.logged.is_none_or(|at| now.duration_since(at) >= Self::LOG_EVERY) {
            tracing::warn!(error = %e, kind, failures = self.unlogged, "accept failed (logged at most every 10 s)");
            self.unlogged = 0;
            self.logged = Some(now);
        }
        self.backoff = (self.backoff * 2).clamp(Self::FIRST, Self::MOST);
        self.backoff
    }
}

/// The connections open, against `--max-connections` and `--max-connections-per-address`.
#[derive(Debug)]
struct Connections {
    limits: ConnLimits,
    open: AtomicUsize,
    by_address: DashMap<IpAddr, usize>,
}

/// A connection's place among the open ones, given back when dropped.
struct ConnPlace {
    conns: Arc<Connections>,
    ip: IpAddr,
}

impl Drop for ConnPlace {
    fn drop(&mut self) {
        let n = self.conns.open.fetch_sub(1, Ordering::AcqRel) - 1;
        metrics::gauge!(crate::telemetry::CONNECTIONS_OPEN).set(n as f64);
        if self.conns.limits.max_connections_per_address > 0 {
            self.conns.by_address.remove_if_mut(&self.ip, |_, n| {
                *n = n.saturating_sub(1);
                *n == 0
            });
        }
    }
}

impl Connections {
    fn new(limits: ConnLimits) -> Connections {
        Connections { limits, open: AtomicUsize::new(0), by_address: DashMap::new() }
    }

    /// A place for a connection from `ip`, or `None` (counted, and the connection closed by
    /// dropping it) when a bound is reached.
    fn admit(self: &Arc<Self>, ip: IpAddr) -> Option<ConnPlace> {
        let per = self.limits.max_connections_per_address;
        if per > 0 {
            let mut from = self.by_address.entry(ip).or_insert(0);
            // At the bound the entry holds at least one: nothing to clean up.
            if *from >= per {
                drop(from);
                crate::telemetry::limit_hit("max-connections-per-address");
                return None;
            }
            *from += 1;
        }
        let n = self.open.fetch_add(1, Ordering::AcqRel) + 1;
        let place = ConnPlace { conns: self.clone(), ip };
        if self.limits.max_connections > 0 && n > self.limits.max_connections {
            crate::telemetry::limit_hit("max-connections");
            return None;
        }
        metrics::gauge!(crate::telemetry::CONNECTIONS_OPEN).set(n as f64);
        Some(place)
    }
}

/// Serve one accepted connection (after the TLS handshake, when `acceptor` is set) until it
/// ends, closing it if it does not start in time (see [`ConnLimits::preface_timeout`]).
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
    let start = Start::new();
    let watch_buffers = (limits.watch_buffers_per_connection > 0).then(|| WatchBuffers::new(limits.watch_buffers_per_connection));
    let Some(acceptor) = acceptor else {
        let io = WriteDeadline::new(stream, limits.write_timeout);
        return connection(builder, io, Peer { addr, cert: None, watch_buffers }, handler, watcher, start, limits).await;
    };
    let tls = match tokio::time::timeout(limits.tls_handshake_timeout, acceptor.accept(stream)).await {
        Ok(Ok(s)) => s,
        Ok(Err(e)) => return tracing::debug!(client.addr = %addr, error = %e, "TLS handshake failed"),
        Err(_) => {
            crate::telemetry::limit_hit("header-read-timeout-seconds");
            return tracing::debug!(client.addr = %addr, "TLS handshake timed out");
        }
    };
    let cert = tls.get_ref().1.peer_certificates().and_then(|c| c.first()).and_then(|c| CertIdentity::from_der(c)).map(Arc::new);
    connection(builder, WriteDeadline::new(tls, limits.write_timeout), Peer { addr, cert, watch_buffers }, handler, watcher, start, limits)
        .await
}

/// How far a connection has got since it was accepted: the bytes it sent (after TLS) and
/// whether a request has come.
#[derive(Debug)]
struct Start {
    at: tokio::time::Instant,
    read: Arc<AtomicUsize>,
    requested: Arc<AtomicBool>,
}

impl Start {
    fn new() -> Start {
        Start { at: tokio::time::Instant::now(), read: Default::default(), requested: Default::default() }
    }

    /// Resolves when the connection has not started in time: fewer than [`PREFACE_BYTES`]
    /// bytes by the preface timeout, or no request by the header timeout (both from accept).
    async fn late(self, limits: ConnLimits) -> &'static str {
        tokio::time::sleep_until(self.at + limits.preface_timeout).await;
        if !self.requested.load(Ordering::Acquire) && self.read.load(Ordering::Acquire) < PREFACE_BYTES {
            return "preface-timeout-seconds";
        }
        tokio::time::sleep_until(self.at + limits.header_read_timeout).await;
        if !self.requested.load(Ordering::Acquire) {
            return "header-read-timeout-seconds";
        }
        std::future::pending().await
    }
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
    /// Bytes read so far, when counted (see [`Start`]).
    read: Option<Arc<AtomicUsize>>,
}

impl<IO> WriteDeadline<IO> {
    /// `io` whose writes time out after `timeout` without progress.
    pub fn new(io: IO, timeout: Duration) -> Self {
        WriteDeadline { io, timeout, stalled: None, timed_out: false, read: None }
    }

    /// Add the bytes read to `read`.
    fn counting(self, read: Arc<AtomicUsize>) -> Self {
        WriteDeadline { read: Some(read), ..self }
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
        let before = buf.filled().len();
        let polled = Pin::new(&mut self.io).poll_read(cx, buf);
        if let (Some(read), Poll::Ready(Ok(()))) = (&self.read, &polled) {
            read.fetch_add(buf.filled().len() - before, Ordering::AcqRel);
        }
        polled
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
async fn connection<H: Handler, IO>(
    builder: Arc<Builder>,
    io: WriteDeadline<IO>,
    peer: Peer,
    handler: Arc<H>,
    watcher: Watcher,
    start: Start,
    limits: ConnLimits,
) where
    IO: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let (io, back) = HandBack::new(io.counting(start.read.clone()));
    let addr = peer.addr;
    let requested = start.requested.clone();
    let svc = hyper::service::service_fn(move |mut req: Request<Incoming>| {
        let h = handler.clone();
        requested.store(true, Ordering::Release);
        req.extensions_mut().insert(peer.clone());
        async move {
            // Run in the stream's task (HTTP/2) or the connection's (HTTP/1.1).
            let stream = Stream::current();
            let resp = h.handle(req).await;
            Ok::<_, std::convert::Infallible>(match stream {
                Some(s) => resp.map(|b| Progress::wrap(b, s)),
                None => resp,
            })
        }
    });
    let conn = builder.serve_connection_with_upgrades(TokioIo::new(io), svc);
    // HTTP/1.1 answers go one at a time: the connection is their stream. The start's
    // deadlines are watched from a task of their own: a timer of the connection's own task
    // would run hyper when it fires, and hyper then asks the body for more while its
    // buffers have room, which would look like progress.
    let stream = Arc::new(Stream::default());
    let late = {
        let stream = stream.clone();
        tokio::spawn(async move {
            let limit = start.late(limits).await;
            crate::telemetry::limit_hit(limit);
            tracing::debug!(client.addr = %addr, limit, "closed a connection that did not start in time");
            stream.end();
        })
    };
    let served = StallGuard::with(watcher.watch(conn.into_owned()), stream, limits.stall_timeout).await;
    let stalled = match served {
        Some(Err(e)) => {
            tracing::debug!(client.addr = %addr, error = %e, "connection ended");
            false
        }
        Some(Ok(())) => false,
        None if late.is_finished() => false,
        None => {
            tracing::debug!(client.addr = %addr, "closed a connection whose client took nothing within the stall timeout");
            true
        }
    };
    late.abort();
    // hyper drops the connection without a word when it ends it on an error (the header read
    // timeout of an idle connection, a body that failed half way): back here, it is closed.
    // One whose client stopped reading gets nothing more.
    if let (Ok(io), false) = (back.await, stalled) {
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
