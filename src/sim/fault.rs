//! Fault switches for the simulator, to drive kache (or any client) through an upstream
//! that misbehaves:
//!
//! - a [`FaultProxy`], a TCP relay in front of an apiserver (the simulator, or a real one)
//!   that can **pause** (connections are accepted and bytes are taken in, but nothing is
//!   relayed: what a stopped process or a black-holed network looks like, keepalive pings
//!   included), **drop** every connection, and go **down** (new connections are closed at
//!   once, as a dead process's port refuses them);
//! - switches on the [`Sim`](crate::sim::Sim) itself: **restart** (every watch ended, the
//!   event history forgotten so old resourceVersions get 410, and reads answered with the
//!   apiserver's 429 "storage is (re)initializing" for a warm-up while `/readyz` already
//!   says ok, as a restarted kube-apiserver does) and **slow** responses (every API answer
//!   delayed, as priority and fairness queues them, while `/readyz`, `/livez` and
//!   `/healthz`, which it exempts, answer at once; or those too, as an apiserver stuck on
//!   its storage is);
//! - [`control`], an HTTP endpoint that flips them (`kache sim --fault-listen`).

use crate::body::{self, Body, RequestBody};
use crate::serve::respond::respond;
use crate::serve::server::{BindError, Handler};
use crate::sim::Sim;
use http::{Method, Request, Response, StatusCode};
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;

/// What the relay does now.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Relay {
    /// Relay nothing (connections stay open).
    pub paused: bool,
    /// Close new connections at once.
    pub down: bool,
    /// Bumped to close every open connection.
    pub generation: u64,
}

/// A TCP relay in front of an apiserver with fault switches.
pub struct FaultProxy {
    /// Where clients connect.
    pub addr: SocketAddr,
    state: watch::Sender<Relay>,
}

impl FaultProxy {
    /// Relay `listen` (port 0 picks one) to `target` until the proxy is dropped.
    pub async fn start(listen: &str, target: SocketAddr) -> Result<Arc<FaultProxy>, BindError> {
        let (listener, addr) = crate::serve::server::bind(listen, None).await?;
        let proxy = Arc::new(FaultProxy { addr, state: watch::Sender::new(Relay::default()) });
        tokio::spawn(accept(listener, target, Arc::downgrade(&proxy)));
        Ok(proxy)
    }

    /// Stop relaying (or resume): connections and their unsent bytes wait.
    pub fn pause(&self, paused: bool) {
        self.state.send_modify(|s| s.paused = paused);
    }

    /// Close every open connection.
    pub fn drop_connections(&self) {
        self.state.send_modify(|s| s.generation += 1);
    }

    /// Go down (every connection closed, new ones closed at once) or come back up.
    pub fn down(&self, down: bool) {
        self.state.send_modify(|s| {
            s.down = down;
            s.generation += u64::from(down);
        });
    }

    /// The switches as they are.
    pub fn relay(&self) -> Relay {
        *self.state.borrow()
    }
}

async fn accept(listener: TcpListener, target: SocketAddr, proxy: std::sync::Weak<FaultProxy>) {
    loop {
        let Ok((client, _)) = listener.accept().await else { continue };
        let Some(p) = proxy.upgrade() else { return };
        let state = p.state.subscribe();
        drop(p);
        if state.borrow().down {
            drop(client);
            continue;
        }
        tokio::spawn(async move {
            let Ok(server) = TcpStream::connect(target).await else { return };
            let _ = (client.set_nodelay(true), server.set_nodelay(true));
            let generation = state.borrow().generation;
            let (cr, cw) = client.into_split();
            let (sr, sw) = server.into_split();
            let up = tokio::spawn(pump(cr, sw, state.clone(), generation));
            let down = tokio::spawn(pump(sr, cw, state, generation));
            let _ = tokio::join!(up, down);
        });
    }
}

/// Relay one direction until EOF or the connection's generation ends, holding bytes while
/// paused.
async fn pump(
    mut from: tokio::net::tcp::OwnedReadHalf,
    mut to: tokio::net::tcp::OwnedWriteHalf,
    mut state: watch::Receiver<Relay>,
    generation: u64,
) {
    let mut buf = vec![0u8; 64 * 1024];
    let ended = |s: &Relay| s.generation != generation;
    loop {
        let n = tokio::select! {
            n = from.read(&mut buf) => match n { Ok(0) | Err(_) => break, Ok(n) => n },
            _ = state.wait_for(ended) => return,
        };
        // Held while paused; dropped with the connection if it ends meanwhile.
        match state.wait_for(|s| ended(s) || !s.paused).await {
            Ok(s) if !ended(&s) => {}
            _ => return,
        }
        tokio::select! {
            w = to.write_all(&buf[..n]) => if w.is_err() { return },
            _ = state.wait_for(ended) => return,
        }
    }
    let _ = to.shutdown().await;
}

/// The simulator's own switches (see the module documentation).
#[derive(Debug, Default)]
pub struct SimFaults {
    /// Answers wait this long first (health endpoints too when `.1`).
    pub(crate) delay: std::sync::Mutex<(Duration, bool)>,
    /// Reads are refused with 429 until then.
    pub(crate) initializing_until: std::sync::Mutex<Option<tokio::time::Instant>>,
}

impl SimFaults {
    /// How long the answer to a request for `path` waits first.
    pub(crate) fn delay(&self, path: &str) -> Duration {
        let (delay, health_too) = *self.delay.lock().unwrap_or_else(|e| e.into_inner());
        let health = ["/readyz", "/livez", "/healthz"]
            .iter()
            .any(|h| path.strip_prefix(h).is_some_and(|rest| rest.is_empty() || rest.starts_with('/')));
        if health && !health_too {
            Duration::ZERO
        } else {
            delay
        }
    }

    pub(crate) fn initializing(&self) -> bool {
        self.initializing_until.lock().unwrap_or_else(|e| e.into_inner()).is_some_and(|t| tokio::time::Instant::now() < t)
    }
}

impl Sim {
    /// Delay every API answer by `delay` (zero: answer at once), and the health endpoints'
    /// too when `health_too` (else they answer at once, as the apiserver's priority and
    /// fairness exempts them).
    pub fn set_delay(&self, delay: Duration, health_too: bool) {
        *self.faults.delay.lock().unwrap_or_else(|e| e.into_inner()) = (delay, health_too);
    }

    /// Restart, as a kube-apiserver restart looks to a client that reconnects: every watch
    /// ended, the history forgotten (watches and lists from an earlier resourceVersion get
    /// 410 Expired), and for `warmup` every read answered with 429 "storage is
    /// (re)initializing" and `Retry-After: 1` while `/readyz` says ok.
    pub fn restart(&self, warmup: Duration) {
        *self.faults.initializing_until.lock().unwrap_or_else(|e| e.into_inner()) = Some(tokio::time::Instant::now() + warmup);
        self.compact();
        self.disconnect_watchers();
    }
}

/// The fault switches over HTTP: `POST /pause`, `/resume`, `/drop`, `/down`, `/up`
/// (the relay, when there is one), `/restart?warmup_ms=N`, `/slow?ms=N[&health=1]` (the simulator);
/// `GET /` shows the relay's state.
pub struct Control {
    /// The simulator.
    pub sim: Arc<Sim>,
    /// The relay in front of it.
    pub proxy: Option<Arc<FaultProxy>>,
}

/// Serve [`Control`] for `sim` (and `proxy`) on `listen` (port 0 picks one) until the
/// process ends; the bound address.
pub async fn serve_control(
    listen: &str,
    addr_file: Option<&std::path::Path>,
    sim: Arc<Sim>,
    proxy: Option<Arc<FaultProxy>>,
) -> Result<SocketAddr, BindError> {
    let (listener, addr) = crate::serve::server::bind(listen, addr_file).await?;
    let control = Arc::new(Control { sim, proxy });
    tokio::spawn(crate::serve::server::serve(listener, control, std::future::pending::<()>(), Duration::ZERO));
    Ok(addr)
}

/// A number query parameter.
fn param(query: Option<&str>, name: &str) -> Option<u64> {
    query?.split('&').find_map(|kv| kv.strip_prefix(name)?.strip_prefix('=')?.parse().ok())
}

impl Handler for Control {
    async fn handle<B: RequestBody>(self: Arc<Self>, req: Request<B>) -> Response<Body> {
        let text = |code, s: String| respond(code, "text/plain; charset=utf-8", body::full(s));
        let q = req.uri().query();
        let proxy = self.proxy.as_deref();
        match (req.method(), req.uri().path(), proxy) {
            (&Method::GET, "/", p) => text(StatusCode::OK, format!("{:?}\n", p.map(FaultProxy::relay))),
            (&Method::POST, "/restart", _) => {
                self.sim.restart(Duration::from_millis(param(q, "warmup_ms").unwrap_or(0)));
                text(StatusCode::OK, "restarted\n".into())
            }
            (&Method::POST, "/slow", _) => {
                self.sim.set_delay(Duration::from_millis(param(q, "ms").unwrap_or(0)), param(q, "health").unwrap_or(0) != 0);
                text(StatusCode::OK, "ok\n".into())
            }
            (&Method::POST, path, Some(p)) => {
                match path {
                    "/pause" => p.pause(true),
                    "/resume" => p.pause(false),
                    "/drop" => p.drop_connections(),
                    "/down" => p.down(true),
                    "/up" => p.down(false),
                    _ => return text(StatusCode::NOT_FOUND, "no such switch\n".into()),
                }
                text(StatusCode::OK, format!("{:?}\n", p.relay()))
            }
            (&Method::POST, _, None) => text(StatusCode::CONFLICT, "no relay: start kache sim with --fault-listen\n".into()),
            _ => text(StatusCode::NOT_FOUND, "no such switch\n".into()),
        }
    }
}
