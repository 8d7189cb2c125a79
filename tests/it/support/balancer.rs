//! A TCP balancer: several servers behind one address, as replicas behind a Service. Each
//! accepted connection goes to the next backend in rotation that is in service, or to the
//! one after it when the connect fails (a replica stopped, its listener closed), and its
//! bytes are relayed both ways until either side closes. A backend is taken out of service
//! and put back as a Service's endpoints follow a pod's readiness; the backends' addresses
//! are fixed at creation (a replica restarts on its own address). [`Balancer::cut`] closes
//! the connections relayed to a backend, as its process's exit closes them.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use tokio::net::{TcpListener, TcpStream};
use tokio::task::JoinHandle;

/// The balancer; it stops accepting when dropped (relayed connections run on to their end).
pub struct Balancer {
    /// Where clients connect.
    pub addr: SocketAddr,
    shared: Arc<Shared>,
    accepting: JoinHandle<()>,
}

struct Backend {
    addr: SocketAddr,
    in_service: AtomicBool,
    /// Connections relayed to it in all.
    opened: AtomicUsize,
    /// Bumped to close the connections relayed to it.
    cuts: tokio::sync::watch::Sender<u64>,
}

struct Shared {
    backends: Vec<Backend>,
    /// Where the next connection's rotation begins.
    next: AtomicUsize,
}

impl Balancer {
    /// A balancer on a free loopback port in front of `backends`, every one in service.
    pub async fn start(backends: &[SocketAddr]) -> Balancer {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("the balancer binds");
        let addr = listener.local_addr().unwrap();
        let shared = Arc::new(Shared {
            backends: backends
                .iter()
                .map(|&addr| Backend {
                    addr,
                    in_service: AtomicBool::new(true),
                    opened: AtomicUsize::new(0),
                    cuts: tokio::sync::watch::Sender::new(0),
                })
                .collect(),
            next: AtomicUsize::new(0),
        });
        let relaying = shared.clone();
        let accepting = tokio::spawn(async move {
            while let Ok((client, _)) = listener.accept().await {
                let shared = relaying.clone();
                tokio::spawn(async move { shared.relay(client).await });
            }
        });
        Balancer { addr, shared, accepting }
    }

    /// Take backend `i` out of service (no new connection goes to it) or put it back.
    pub fn in_service(&self, i: usize, yes: bool) {
        self.shared.backends[i].in_service.store(yes, Ordering::SeqCst);
    }

    /// Close every connection relayed to backend `i` now (both sides: the client sees its
    /// connection closed, as when the server's process exits).
    pub fn cut(&self, i: usize) {
        self.shared.backends[i].cuts.send_modify(|n| *n += 1);
    }

    /// Connections relayed to backend `i` in all.
    pub fn opened(&self, i: usize) -> usize {
        self.shared.backends[i].opened.load(Ordering::SeqCst)
    }
}

impl Drop for Balancer {
    fn drop(&mut self) {
        self.accepting.abort();
    }
}

impl Shared {
    /// Relay `client` to the first backend in rotation that is in service and accepts; with
    /// none, the client's connection is closed.
    async fn relay(&self, mut client: TcpStream) {
        let n = self.backends.len();
        let first = self.next.fetch_add(1, Ordering::SeqCst);
        for k in 0..n {
            let b = &self.backends[(first + k) % n];
            if !b.in_service.load(Ordering::SeqCst) {
                continue;
            }
            let Ok(mut server) = TcpStream::connect(b.addr).await else { continue };
            let _ = server.set_nodelay(true);
            let _ = client.set_nodelay(true);
            let mut cut = b.cuts.subscribe();
            b.opened.fetch_add(1, Ordering::SeqCst);
            // Either side's close is passed on to the other; a reset ends both, as does a cut.
            tokio::select! {
                _ = tokio::io::copy_bidirectional(&mut client, &mut server) => {}
                _ = cut.changed() => {}
            }
            return;
        }
    }
}
