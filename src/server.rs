//! The listener: bind (port 0 allowed, the bound address written to a file for tests and
//! scripts), accept, and serve each connection with HTTP/1.1 or HTTP/2 on its own task.

use crate::body::Body;
use hyper::body::Incoming;
use hyper::{Request, Response};
use hyper_util::rt::{TokioExecutor, TokioIo};
use hyper_util::server::graceful::GracefulShutdown;
use std::time::Duration;
use std::future::Future;
use std::net::SocketAddr;
use std::path::Path;
use std::sync::Arc;
use tokio::net::TcpListener;

/// HTTP/2 streams one client connection may have open at once. client-go multiplexes every
/// watch of a process over one connection, so hyper's default of 200 is far too low.
pub const MAX_STREAMS: u32 = 100_000;

/// Something that answers requests.
pub trait Handler: Send + Sync + 'static {
    /// Answer one request.
    fn handle(self: Arc<Self>, req: Request<Incoming>) -> impl Future<Output = Response<Body>> + Send;
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

/// Serve connections from `listener` until `shutdown` resolves; then stop accepting, let
/// connections finish their requests (HTTP/2 gets GOAWAY), and return when they are done
/// or `grace` has passed.
pub async fn serve<H: Handler>(listener: TcpListener, handler: Arc<H>, shutdown: impl Future<Output = ()>, grace: Duration) {
    tokio::pin!(shutdown);
    let graceful = GracefulShutdown::new();
    let mut builder = hyper_util::server::conn::auto::Builder::new(TokioExecutor::new());
    builder.http2().max_concurrent_streams(MAX_STREAMS);
    loop {
        let (stream, peer) = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok(a) => a,
                Err(e) => {
                    tracing::warn!(error = %e, "accept failed");
                    continue;
                }
            },
            _ = &mut shutdown => break,
        };
        let _ = stream.set_nodelay(true);
        let handler = handler.clone();
        let svc = hyper::service::service_fn(move |req| {
            let h = handler.clone();
            async move { Ok::<_, std::convert::Infallible>(h.handle(req).await) }
        });
        let conn = builder.serve_connection_with_upgrades(TokioIo::new(stream), svc).into_owned();
        let conn = graceful.watch(conn);
        tokio::spawn(async move {
            if let Err(e) = conn.await {
                tracing::debug!(client.addr = %peer, error = %e, "connection ended");
            }
        });
    }
    drop(listener);
    if tokio::time::timeout(grace, graceful.shutdown()).await.is_err() {
        tracing::warn!(grace_seconds = grace.as_secs_f64(), "connections still open after the grace period");
    }
}
