//! The listener's connection handling: write deadlines, stalls, connections that never
//! start, the bounds on connections, and how connections end. The
//! connections here run over in-memory pipes with paused time, so every timeout fires only
//! once nothing else can happen, and always the same way.

use super::*;
use crate::auth::tls::{server_config, ServingCert};
use crate::body::{BoxError, Chunk};
use bytes::Bytes;
use futures_util::StreamExt;
use http_body::Frame;
use http_body_util::BodyExt;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::CertificateDer;
use tokio::io::{AsyncReadExt, AsyncWriteExt, DuplexStream};
use tokio_rustls::client::TlsStream;

/// `/`: a short answer; `/cut`: an answer whose body fails after 64 KiB; `/big`: 8 MiB in
/// one frame; `/endless`: frames for ever (a busy watch).
struct Answers;

impl Handler for Answers {
    #[allow(clippy::manual_async_fn)]
    fn handle<B: RequestBody>(self: Arc<Self>, req: Request<B>) -> impl Future<Output = Response<Body>> + Send {
        async move {
            match req.uri().path() {
                "/cut" => {
                    // The first 64 KiB, then (a second later, so they are sent) an error.
                    let first = Ok(Frame::data(Chunk::One(Bytes::from(vec![b'x'; 64 * 1024]))));
                    let fail = async {
                        tokio::time::sleep(Duration::from_secs(1)).await;
                        Err::<Frame<Chunk>, BoxError>("the answer failed half way".into())
                    };
                    let frames = futures_util::stream::iter([first]).chain(futures_util::stream::once(fail));
                    Response::new(http_body_util::StreamBody::new(frames).boxed_unsync())
                }
                "/big" => Response::new(crate::body::full(vec![b'x'; 8 << 20])),
                "/endless" => {
                    let frames = futures_util::stream::repeat_with(|| {
                        Ok::<_, BoxError>(Frame::data(Chunk::One(Bytes::from(vec![b'x'; 16 * 1024]))))
                    });
                    Response::new(http_body_util::StreamBody::new(frames).boxed_unsync())
                }
                _ => Response::new(crate::body::full("ok")),
            }
        }
    }
}

/// A TLS connection to a server of [`Answers`] with default limits over an in-memory pipe;
/// the server's connection is watched by the `GracefulShutdown` returned (dropping it would
/// end the connection).
async fn connect() -> (TlsStream<DuplexStream>, GracefulShutdown) {
    let cert = ServingCert::self_signed(&["localhost".to_string()], "kache").unwrap();
    let acceptor = TlsAcceptor::from(server_config(&cert, None).unwrap());
    let (client, server) = tokio::io::duplex(64 * 1024);
    let limits = ConnLimits::default();
    let addr: SocketAddr = "192.0.2.1:40000".parse().unwrap();
    let graceful = GracefulShutdown::new();
    tokio::spawn(accepted(server, addr, Some(acceptor), limits, Arc::new(builder(limits)), Arc::new(Answers), graceful.watcher()));
    let mut roots = rustls::RootCertStore::empty();
    roots.add(CertificateDer::from_pem_slice(cert.ca_pem.as_bytes()).unwrap()).unwrap();
    let mut config = rustls::ClientConfig::builder_with_provider(Arc::new(rustls::crypto::ring::default_provider()))
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_root_certificates(roots)
        .with_no_client_auth();
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    let name = rustls::pki_types::ServerName::try_from("localhost").unwrap();
    (tokio_rustls::TlsConnector::from(Arc::new(config)).connect(name, client).await.unwrap(), graceful)
}

/// Send `GET path` (flushed, so it is all on the wire).
async fn get(c: &mut TlsStream<DuplexStream>, path: &str) {
    c.write_all(format!("GET {path} HTTP/1.1\r\nHost: kache\r\n\r\n").as_bytes()).await.unwrap();
    c.flush().await.unwrap();
}

#[tokio::test(start_paused = true)]
async fn an_idle_connection_closed_at_the_header_timeout_ends_with_a_close_notify() {
    let (mut c, _graceful) = connect().await;
    get(&mut c, "/").await;
    let mut got = Vec::new();
    while !got.ends_with(b"\r\n\r\nok") {
        let mut b = [0u8; 4096];
        let n = c.read(&mut b).await.unwrap();
        assert_ne!(n, 0, "the answer ended early: {}", got.escape_ascii());
        got.extend_from_slice(&b[..n]);
    }
    // Idle: at the header read timeout kache closes the connection, and says so in TLS (as
    // Go's tls.Conn.Close does), so the client sees a clean end, not a cut.
    let mut b = [0u8; 64];
    let end = c.read(&mut b).await;
    assert_eq!(end.map_err(|e| e.to_string()).unwrap(), 0, "a clean TLS end");
}

#[tokio::test(start_paused = true)]
async fn an_answer_whose_body_fails_is_cut_short_then_closed_with_a_close_notify() {
    let (mut c, _graceful) = connect().await;
    get(&mut c, "/cut").await;
    let mut got = Vec::new();
    // The whole connection reads to a clean TLS end: the cut shows in the HTTP framing
    // (no last chunk), as from the apiserver when a handler aborts.
    c.read_to_end(&mut got).await.expect("a clean TLS end after the cut answer");
    let head_end = got.windows(4).position(|w| w == b"\r\n\r\n").unwrap() + 4;
    assert!(got[..head_end].starts_with(b"HTTP/1.1 200"), "{}", got[..head_end].escape_ascii());
    assert!(got[..head_end].to_ascii_lowercase().windows(7).any(|w| w == b"chunked"));
    assert!(got.len() - head_end >= 64 * 1024, "the first frame went out");
    assert!(!got.ends_with(b"\r\n0\r\n\r\n"), "no last chunk: the client knows the answer is cut");
}

#[tokio::test(start_paused = true)]
async fn a_connection_cut_at_the_write_timeout_is_not_held_for_a_close_notify() {
    let (mut c, _graceful) = connect().await;
    get(&mut c, "/big").await;
    tokio::time::sleep(Duration::from_secs(120)).await;
    // The client read nothing for two minutes; after the write timeout kache drops the connection without
    // waiting to write anything more (the client is not reading). Reading now finds what was
    // in the pipe, then an end without close_notify: a cut, never a clean end.
    let mut got = Vec::new();
    let err = c.read_to_end(&mut got).await.unwrap_err();
    assert_eq!(err.kind(), std::io::ErrorKind::UnexpectedEof, "{err}");
    assert!(got.len() < 8 << 20);
}

#[tokio::test(start_paused = true)]
async fn a_client_that_stops_reading_is_cut_at_the_write_timeout_a_slow_one_never() {
    // A client that reads nothing: the write waits the timeout, then fails.
    let (server, _client) = tokio::io::duplex(1024);
    let mut io = WriteDeadline::new(server, Duration::from_secs(60));
    let started = tokio::time::Instant::now();
    let err = io.write_all(&vec![b'x'; 64 * 1024]).await.unwrap_err();
    assert_eq!(err.kind(), std::io::ErrorKind::TimedOut);
    assert_eq!(started.elapsed(), Duration::from_secs(60));

    // One that takes a little every 50 s makes progress: never cut.
    let (server, mut client) = tokio::io::duplex(1024);
    let reader = tokio::spawn(async move {
        let mut buf = [0u8; 1024];
        let mut got = 0;
        while got < 16 * 1024 {
            tokio::time::sleep(Duration::from_secs(50)).await;
            got += client.read(&mut buf).await.unwrap();
        }
        got
    });
    let mut io = WriteDeadline::new(server, Duration::from_secs(60));
    io.write_all(&vec![b'x'; 16 * 1024]).await.expect("a slow reader is still reading");
    assert_eq!(reader.await.unwrap(), 16 * 1024);
}

#[tokio::test(start_paused = true)]
async fn after_the_write_timeout_every_write_fails_at_once() {
    let (server, _client) = tokio::io::duplex(1024);
    let mut io = WriteDeadline::new(server, Duration::from_secs(60));
    assert!(!io.timed_out());
    io.write_all(&vec![b'x'; 64 * 1024]).await.unwrap_err();
    assert!(io.timed_out());
    let at = tokio::time::Instant::now();
    assert_eq!(io.write(b"x").await.unwrap_err().kind(), std::io::ErrorKind::TimedOut);
    assert_eq!(io.shutdown().await.unwrap_err().kind(), std::io::ErrorKind::TimedOut);
    assert_eq!(at.elapsed(), Duration::ZERO, "no second wait");
}

/// `/endless`: a body that always has more (a busy watch), which says when it is dropped.
struct Endless(Arc<AtomicBool>);

impl Handler for Endless {
    #[allow(clippy::manual_async_fn)]
    fn handle<B: RequestBody>(self: Arc<Self>, req: Request<B>) -> impl Future<Output = Response<Body>> + Send {
        async move {
            if req.uri().path() != "/endless" {
                return Response::new(crate::body::full("ok"));
            }
            struct Dropped(Arc<AtomicBool>);
            impl Drop for Dropped {
                fn drop(&mut self) {
                    self.0.store(true, Ordering::SeqCst);
                }
            }
            let dropped = Dropped(self.0.clone());
            let frames = futures_util::stream::repeat_with(move || {
                let _held = &dropped;
                Ok::<_, BoxError>(Frame::data(Chunk::One(Bytes::from(vec![b'x'; 16 * 1024]))))
            });
            Response::new(http_body_util::StreamBody::new(frames).boxed_unsync())
        }
    }
}

/// A plain connection to a server of `handler` with `limits` over an in-memory pipe.
fn plain<H: Handler>(handler: H, limits: ConnLimits) -> (DuplexStream, GracefulShutdown) {
    let (client, server) = tokio::io::duplex(64 * 1024);
    let addr: SocketAddr = "192.0.2.1:40000".parse().unwrap();
    let graceful = GracefulShutdown::new();
    tokio::spawn(accepted(server, addr, None, limits, Arc::new(builder(limits)), Arc::new(handler), graceful.watcher()));
    (client, graceful)
}

/// An HTTP/2 client whose streams grant no window: the server may send it nothing.
async fn zero_window(io: DuplexStream) -> h2::client::SendRequest<Bytes> {
    let (send, conn) = h2::client::Builder::new().initial_window_size(0).handshake::<_, Bytes>(io).await.unwrap();
    tokio::spawn(conn);
    send
}

#[tokio::test(start_paused = true)]
async fn a_stream_that_grants_no_window_is_reset_at_the_stall_timeout_and_its_body_dropped() {
    let dropped = Arc::new(AtomicBool::new(false));
    let (io, _graceful) = plain(Endless(dropped.clone()), ConnLimits::default());
    let mut send = zero_window(io).await;
    let started = tokio::time::Instant::now();
    let (resp, _) = send.send_request(Request::get("http://kache/endless").body(()).unwrap(), true).unwrap();
    let resp = resp.await.expect("the answer's head needs no window");
    assert_eq!(resp.status(), 200);
    let mut body = resp.into_body();
    let err = body.data().await.expect("the stream ends in an error").expect_err("no data: no window");
    assert_eq!(err.reason(), Some(h2::Reason::CANCEL), "{err}");
    assert_eq!(started.elapsed(), ConnLimits::default().stall_timeout, "reset at the stall timeout");
    assert!(dropped.load(Ordering::SeqCst), "the body, and what it held, dropped when the stream was reset");
    // The connection goes on: a stream that needs no window is answered.
    let (resp, _) = send.send_request(Request::get("http://kache/").body(()).unwrap(), true).unwrap();
    assert_eq!(resp.await.unwrap().status(), 200);
}

#[tokio::test(start_paused = true)]
async fn an_http1_stream_the_client_does_not_read_is_closed_at_the_stall_timeout() {
    let (mut c, _graceful) = connect().await;
    get(&mut c, "/endless").await;
    // Past the stall timeout, well before the write timeout.
    tokio::time::sleep(ConnLimits::default().stall_timeout + Duration::from_secs(5)).await;
    let mut got = Vec::new();
    let err = c.read_to_end(&mut got).await.unwrap_err();
    assert_eq!(err.kind(), std::io::ErrorKind::UnexpectedEof, "cut, with no close_notify: {err}");
    assert!(got.len() < 8 << 20, "what was in the pipe: {}", got.len());
}

#[tokio::test(start_paused = true)]
async fn a_connection_silent_after_the_tls_handshake_is_closed_at_the_preface_timeout() {
    let started = tokio::time::Instant::now();
    let (mut c, _graceful) = connect().await;
    let mut b = [0u8; 64];
    let n = c.read(&mut b).await.expect("a clean TLS end");
    assert_eq!(n, 0);
    assert_eq!(started.elapsed(), PREFACE_TIMEOUT);
}

#[tokio::test(start_paused = true)]
async fn half_an_http2_preface_is_closed_at_the_preface_timeout() {
    let (mut io, _graceful) = plain(Answers, ConnLimits::default());
    let started = tokio::time::Instant::now();
    io.write_all(&b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"[..16]).await.unwrap();
    let mut got = Vec::new();
    io.read_to_end(&mut got).await.unwrap();
    assert!(got.is_empty(), "{}", got.escape_ascii());
    assert_eq!(started.elapsed(), PREFACE_TIMEOUT);
}

#[tokio::test(start_paused = true)]
async fn an_http2_connection_that_asks_nothing_is_closed_at_the_header_timeout() {
    let limits = ConnLimits::default();
    let (io, _graceful) = plain(Answers, limits);
    let started = tokio::time::Instant::now();
    let (_send, conn) = h2::client::handshake(io).await.unwrap();
    // The preface and SETTINGS went out; no request follows.
    conn.await.expect("the server ends the connection with GOAWAY or a close");
    assert_eq!(started.elapsed(), limits.header_read_timeout);
}

#[tokio::test(start_paused = true)]
async fn an_http2_connection_that_asks_in_time_is_served() {
    let (io, _graceful) = plain(Answers, ConnLimits::default());
    tokio::time::sleep(PREFACE_TIMEOUT - Duration::from_secs(1)).await;
    let (mut send, conn) = h2::client::handshake(io).await.unwrap();
    tokio::spawn(conn);
    tokio::time::sleep(Duration::from_secs(10)).await;
    let (resp, _) = send.send_request(Request::get("http://kache/").body(()).unwrap(), true).unwrap();
    let resp = resp.await.unwrap();
    assert_eq!(resp.status(), 200);
    // Past the header timeout, a connection that has asked is not closed for it.
    tokio::time::sleep(Duration::from_secs(60)).await;
    let (resp, _) = send.send_request(Request::get("http://kache/").body(()).unwrap(), true).unwrap();
    assert_eq!(resp.await.unwrap().status(), 200);
}

#[test]
fn connections_past_a_bound_are_refused_and_places_come_back() {
    let limits = ConnLimits { max_connections: 3, max_connections_per_address: 2, ..ConnLimits::default() };
    let conns = Arc::new(Connections::new(limits));
    let a: IpAddr = "192.0.2.1".parse().unwrap();
    let b: IpAddr = "192.0.2.2".parse().unwrap();
    let a1 = conns.admit(a).expect("first");
    let _a2 = conns.admit(a).expect("second from a");
    assert!(conns.admit(a).is_none(), "a third from one address");
    let _b1 = conns.admit(b).expect("another address");
    assert!(conns.admit(b).is_none(), "past the total");
    drop(a1);
    let _b2 = conns.admit(b).expect("a place came back");
    assert_eq!(conns.open.load(Ordering::SeqCst), 3);
    assert_eq!(conns.by_address.get(&a).map(|n| *n), Some(1));
}

#[tokio::test(start_paused = true)]
async fn failed_accepts_back_off_and_are_logged_at_most_every_interval() {
    let mut f = AcceptFailures::default();
    let emfile = std::io::Error::from_raw_os_error(rustix::io::Errno::MFILE.raw_os_error());
    let waits: Vec<Duration> = (0..10).map(|_| f.failed(&emfile)).collect();
    assert_eq!(waits[0], AcceptFailures::FIRST);
    assert_eq!(waits[1], AcceptFailures::FIRST * 2);
    assert_eq!(*waits.last().unwrap(), AcceptFailures::MOST, "{waits:?}");
    assert_eq!(f.unlogged, 9, "one line for ten failures within the interval");
    tokio::time::advance(AcceptFailures::LOG_EVERY).await;
    f.failed(&emfile);
    assert_eq!(f.unlogged, 0, "logged again after the interval");
    f.ok();
    assert_eq!(f.failed(&emfile), AcceptFailures::FIRST, "a success resets the wait");
}
