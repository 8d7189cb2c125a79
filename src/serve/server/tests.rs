//! The listener's connection handling: write deadlines, and how connections end. The
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

/// `/`: a short answer; `/cut`: an answer whose body fails after 64 KiB; `/big`: 8 MiB.
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
