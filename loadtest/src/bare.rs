//! A bare HTTP/1.1 keep-alive connection for the closed-loop LIST phases.
//!
//! At tens of thousands of requests per second the load generator shares the machine's two
//! cores with the server it measures, so every microsecond it spends per request is taken
//! from the server (and shows up in the server's tail latency). hyper's pooled client costs
//! a pool checkout, a task hop to the connection task and a body channel per response; this
//! client is one task per connection that writes a prepared request and reads the response
//! into one reused buffer, parsing the head with `httparse` (the parser hyper uses). It
//! handles `Content-Length` and chunked bodies and reconnects after `Connection: close` or
//! any error. Over TLS (an `https://` endpoint) it is the same loop on a tokio-rustls stream
//! with the endpoint's configuration, ALPN `http/1.1`. Other phases keep the hyper client.

use crate::endpoint::{Credentials, Target, Tls};
use anyhow::{bail, Context};
use std::sync::Arc;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::TcpStream;

/// A connection: plain TCP or TLS over it.
trait Io: AsyncRead + AsyncWrite + Unpin + Send + Sync {}
impl<T: AsyncRead + AsyncWrite + Unpin + Send + Sync> Io for T {}
type Stream = Box<dyn Io>;

/// Room for a response head and the first body bytes; larger bodies stream through it.
const BUF: usize = 256 * 1024;
/// The most header lines a response may carry.
const MAX_HEADERS: usize = 32;

/// One connection to one authority, opened on first use and reopened after a failure.
pub struct Bare {
    authority: String,
    /// TLS to the server (its configuration with ALPN `http/1.1`), if `https://`.
    tls: Option<(tokio_rustls::TlsConnector, rustls::pki_types::ServerName<'static>)>,
    /// Request headers after the request line, ending with the blank line (with the
    /// credentials' headers when they are fixed).
    tail: Vec<u8>,
    /// Credentials whose headers change (a token file, an exec plugin): asked per request.
    refreshed: Option<Credentials>,
    stream: Option<Stream>,
    buf: Vec<u8>,
    req: Vec<u8>,
}

/// A response's status and body size; the body itself is read and dropped.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Answer {
    pub status: u16,
    pub body_bytes: u64,
    /// The first bytes of the body (up to [`EXCERPT`]) when the status is not 200, for the
    /// error report.
    pub excerpt: Vec<u8>,
}

/// Body bytes kept from a response that is not a 200.
pub const EXCERPT: usize = 300;

/// How the response body is framed.
enum Framing {
    Length(u64),
    Chunked,
    /// Until the server closes the connection.
    Close,
}

/// What a response head says.
struct Head {
    status: u16,
    framing: Framing,
    keep_alive: bool,
    len: usize,
}

impl Bare {
    /// A connection to `target` sending `accept`; its credentials' headers are read now
    /// when fixed, else for each request.
    pub async fn new(target: &Target, accept: &str) -> anyhow::Result<Bare> {
        let mut tail = format!("Host: {}\r\nAccept: {accept}\r\nUser-Agent: kache-loadtest/0.1\r\n", target.authority).into_bytes();
        let refreshed = if target.credentials.is_fixed() {
            render(&mut tail, &*target.credentials.headers().await?);
            None
        } else {
            Some(target.credentials.clone())
        };
        let tls = target.tls.as_ref().map(|Tls { config, server_name }| {
            let mut c = config.as_ref().clone();
            c.alpn_protocols = vec![b"http/1.1".to_vec()];
            (tokio_rustls::TlsConnector::from(Arc::new(c)), server_name.clone())
        });
        Ok(Bare {
            authority: target.authority.clone(),
            tls,
            tail,
            refreshed,
            stream: None,
            buf: Vec::with_capacity(BUF),
            req: Vec::with_capacity(512),
        })
    }

    /// Open a connection (and TLS over it).
    async fn connect(&self) -> anyhow::Result<Stream> {
        let connect = async {
            let s = TcpStream::connect(&self.authority).await.with_context(|| format!("connecting to {}", self.authority))?;
            s.set_nodelay(true)?;
            Ok::<Stream, anyhow::Error>(match &self.tls {
                Some((c, name)) => Box::new(c.connect(name.clone(), s).await.with_context(|| format!("TLS with {}", self.authority))?),
                None => Box::new(s),
            })
        };
        tokio::time::timeout(CONNECT_TIMEOUT, connect).await.map_err(|_| anyhow::anyhow!("connecting to {}: timed out", self.authority))?
    }

    /// GET `pq` and read the whole response. The connection is kept only after a whole
    /// keep-alive exchange: after an error, or if this future is dropped half way (a
    /// timeout), the next call opens a new connection instead of reading a stale answer.
    pub async fn get(&mut self, pq: &str) -> anyhow::Result<Answer> {
        let mut stream = match self.stream.take() {
            Some(s) => s,
            None => self.connect().await?,
        };
        self.buf.clear();
        self.req.clear();
        self.req.extend_from_slice(b"GET ");
        self.req.extend_from_slice(pq.as_bytes());
        self.req.extend_from_slice(b" HTTP/1.1\r\n");
        self.req.extend_from_slice(&self.tail);
        if let Some(c) = &self.refreshed {
            render(&mut self.req, &*c.headers().await?);
        }
        self.req.extend_from_slice(b"\r\n");
        stream.write_all(&self.req).await.context("sending the request")?;
        // Over TLS a write can return with the request still in rustls's buffer (the socket
        // took part of it, or tokio's budget ran out after reading a large answer): only a
        // flush sends it all. Without one the request waits forever, and the server ends the
        // idle connection at its header read timeout.
        stream.flush().await.context("sending the request")?;
        let head = loop {
            let head = read_head(&mut stream, &mut self.buf).await?;
            self.buf.drain(..head.len);
            // Interim responses (100 Continue, 103 Early Hints) precede the real one.
            if !(100..200).contains(&head.status) || head.status == 101 {
                break head;
            }
        };
        let keep = if head.status == 200 { 0 } else { EXCERPT };
        let mut excerpt = Vec::new();
        let body_bytes = match head.framing {
            Framing::Length(n) => read_length(&mut stream, &mut self.buf, n, &mut excerpt, keep).await?,
            Framing::Chunked => read_chunked(&mut stream, &mut self.buf, &mut excerpt, keep).await?,
            Framing::Close => {
                return Ok(Answer {
                    status: head.status,
                    body_bytes: read_to_close(&mut stream, &mut self.buf, &mut excerpt, keep).await?,
                    excerpt,
                })
            }
        };
        if head.keep_alive {
            self.stream = Some(stream);
        }
        Ok(Answer { status: head.status, body_bytes, excerpt })
    }
}

/// Append `headers` as request header lines.
fn render(out: &mut Vec<u8>, headers: &http::HeaderMap) {
    for (k, v) in headers {
        out.extend_from_slice(k.as_str().as_bytes());
        out.extend_from_slice(b": ");
        out.extend_from_slice(v.as_bytes());
        out.extend_from_slice(b"\r\n");
    }
}

/// How long opening a connection may take.
const CONNECT_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(10);

/// Append the first of `data` to `excerpt`, up to `keep` bytes in all.
fn keep_excerpt(excerpt: &mut Vec<u8>, data: &[u8], keep: usize) {
    let room = keep.saturating_sub(excerpt.len());
    excerpt.extend_from_slice(&data[..data.len().min(room)]);
}

/// Read into `buf`'s spare room (growing it if it is full); 0 means the peer closed.
async fn fill(stream: &mut Stream, buf: &mut Vec<u8>) -> anyhow::Result<usize> {
    if buf.capacity() - buf.len() < 4096 {
        buf.reserve(BUF);
    }
    Ok(stream.read_buf(buf).await?)
}

/// The comma-separated tokens of a header value, trimmed.
fn tokens(v: &[u8]) -> impl Iterator<Item = &[u8]> {
    v.split(|b| *b == b',').map(<[u8]>::trim_ascii).filter(|t| !t.is_empty())
}

/// Read until a whole response head is in `buf`; return what it says and its length.
async fn read_head(stream: &mut Stream, buf: &mut Vec<u8>) -> anyhow::Result<Head> {
    loop {
        let mut headers = [httparse::EMPTY_HEADER; MAX_HEADERS];
        let mut resp = httparse::Response::new(&mut headers);
        if let httparse::Status::Complete(len) = resp.parse(buf).context("parsing the response head")? {
            let status = resp.code.unwrap_or(0);
            let (mut length, mut coding) = (None, None::<&[u8]>);
            let mut keep_alive = resp.version == Some(1) && status != 101;
            for h in resp.headers.iter() {
                if h.name.eq_ignore_ascii_case("content-length") {
                    length =
                        Some(std::str::from_utf8(h.value).ok().and_then(|v| v.trim().parse::<u64>().ok()).context("a bad Content-Length")?);
                } else if h.name.eq_ignore_ascii_case("transfer-encoding") {
                    // What matters is the last coding applied.
                    coding = tokens(h.value).last().or(coding);
                } else if h.name.eq_ignore_ascii_case("connection") && tokens(h.value).any(|t| t.eq_ignore_ascii_case(b"close")) {
                    keep_alive = false;
                }
            }
            // RFC 9112, 6.3: 1xx, 204 and 304 have no body; Transfer-Encoding overrides
            // Content-Length, and a body whose last coding is not chunked runs to the close.
            let framing = match (coding, length) {
                _ if status < 200 || status == 204 || status == 304 => Framing::Length(0),
                (Some(c), _) if c.eq_ignore_ascii_case(b"chunked") => Framing::Chunked,
                (None, Some(n)) => Framing::Length(n),
                _ => {
                    keep_alive = false;
                    Framing::Close
                }
            };
            return Ok(Head { status, framing, keep_alive, len });
        }
        if buf.len() >= BUF {
            bail!("response head larger than {BUF} bytes");
        }
        if fill(stream, buf).await? == 0 {
            bail!("connection closed before the response head");
        }
    }
}

/// Consume a body of `n` bytes, part of which may already be in `buf`.
async fn read_length(stream: &mut Stream, buf: &mut Vec<u8>, n: u64, excerpt: &mut Vec<u8>, keep: usize) -> anyhow::Result<u64> {
    let mut left = n;
    loop {
        let take = (buf.len() as u64).min(left) as usize;
        keep_excerpt(excerpt, &buf[..take], keep);
        buf.drain(..take);
        left -= take as u64;
        if left == 0 {
            return Ok(n);
        }
        if fill(stream, buf).await? == 0 {
            bail!("connection closed with {left} of {n} body bytes unread");
        }
    }
}

/// Read until `buf` holds at least `n` bytes.
async fn fill_to(stream: &mut Stream, buf: &mut Vec<u8>, n: usize, what: &str) -> anyhow::Result<()> {
    while buf.len() < n {
        if fill(stream, buf).await? == 0 {
            bail!("connection closed {what}");
        }
    }
    Ok(())
}

/// Consume a chunked body; return the size of its data.
async fn read_chunked(stream: &mut Stream, buf: &mut Vec<u8>, excerpt: &mut Vec<u8>, keep: usize) -> anyhow::Result<u64> {
    let mut total = 0u64;
    loop {
        let (start, size) = loop {
            match httparse::parse_chunk_size(buf).map_err(|_| anyhow::anyhow!("a bad chunk size line"))? {
                httparse::Status::Complete(x) => break x,
                httparse::Status::Partial => {
                    let more = buf.len() + 1;
                    fill_to(stream, buf, more, "inside a chunk size line").await?
                }
            }
        };
        buf.drain(..start);
        if size > 0 {
            read_length(stream, buf, size, excerpt, keep).await?;
            total += size;
        }
        // After a chunk's data, and after the last chunk (no trailers expected): CRLF.
        fill_to(stream, buf, 2, "before the end of a chunk").await?;
        if &buf[..2] != b"\r\n" {
            bail!("a chunk is not followed by CRLF (trailers are not supported)");
        }
        buf.drain(..2);
        if size == 0 {
            return Ok(total);
        }
    }
}

/// Consume everything until the peer closes, starting with what `buf` holds.
async fn read_to_close(stream: &mut Stream, buf: &mut Vec<u8>, excerpt: &mut Vec<u8>, keep: usize) -> anyhow::Result<u64> {
    let mut n = 0u64;
    loop {
        keep_excerpt(excerpt, buf, keep);
        n += buf.len() as u64;
        buf.clear();
        if fill(stream, buf).await? == 0 {
            return Ok(n);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::net::TcpListener;

    /// A server that answers each request read from a connection with the next of `answers`.
    async fn serve(answers: Vec<Vec<u8>>) -> String {
        let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = l.local_addr().unwrap().to_string();
        tokio::spawn(async move {
            let mut answers = answers.into_iter();
            'conns: loop {
                let (mut s, _) = l.accept().await.unwrap();
                let mut req = Vec::new();
                loop {
                    let mut b = [0u8; 1024];
                    let n = s.read(&mut b).await.unwrap();
                    if n == 0 {
                        continue 'conns;
                    }
                    req.extend_from_slice(&b[..n]);
                    if req.windows(4).any(|w| w == b"\r\n\r\n") {
                        req.clear();
                        let Some(a) = answers.next() else { return };
                        // Write small answers in small pieces so the client must read across them.
                        let piece = if a.len() < 1024 { 7 } else { 64 * 1024 };
                        for piece in a.chunks(piece) {
                            s.write_all(piece).await.unwrap();
                            s.flush().await.unwrap();
                        }
                        // Answers that end by closing: `close`, HTTP/1.0, or a body whose last coding is gzip.
                        let head = &a[..a.windows(4).position(|w| w == b"\r\n\r\n").map_or(a.len(), |p| p + 4)];
                        if head.windows(5).any(|w| w.eq_ignore_ascii_case(b"close"))
                            || head.starts_with(b"HTTP/1.0")
                            || head.windows(6).any(|w| w == b"gzip\r\n")
                        {
                            continue 'conns;
                        }
                    }
                }
            }
        });
        addr
    }

    /// A client of the plain-HTTP server at `addr`, with a bearer token if given.
    async fn bare(addr: &str, accept: &str, token: Option<&str>) -> Bare {
        let mut t = Target::plain("test", addr);
        if let Some(token) = token {
            let mut h = http::HeaderMap::new();
            h.insert(http::header::AUTHORIZATION, format!("Bearer {token}").parse().unwrap());
            t.credentials = Credentials::fixed(h);
        }
        Bare::new(&t, accept).await.unwrap()
    }

    fn ok(status: u16, body_bytes: u64) -> Answer {
        Answer { status, body_bytes, excerpt: Vec::new() }
    }

    #[tokio::test]
    async fn reads_length_chunked_and_close_framed_bodies_on_one_client() {
        let addr = serve(vec![
            b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nhello".to_vec(),
            b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\nA\r\n0123456789\r\n0\r\n\r\n".to_vec(),
            b"HTTP/1.1 404 Not Found\r\nContent-Length: 2\r\nConnection: close\r\n\r\nno".to_vec(),
            b"HTTP/1.1 204 No Content\r\n\r\n".to_vec(),
            b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n".to_vec(),
        ])
        .await;
        let mut c = bare(&addr, "application/json", Some("t")).await;
        assert_eq!(c.get("/a").await.unwrap(), ok(200, 5));
        assert_eq!(c.get("/b").await.unwrap(), ok(200, 13));
        assert_eq!(c.get("/c").await.unwrap(), Answer { status: 404, body_bytes: 2, excerpt: b"no".to_vec() });
        assert!(c.stream.is_none(), "Connection: close drops the connection");
        // The next request opens a new connection.
        assert_eq!(c.get("/d").await.unwrap(), ok(204, 0));
        assert_eq!(c.get("/e").await.unwrap(), ok(200, 0));
    }

    #[tokio::test]
    async fn interim_responses_are_skipped_and_chunked_overrides_content_length() {
        let addr = serve(vec![
            b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 103 Early Hints\r\nLink: </a>\r\n\r\nHTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok"
                .to_vec(),
            b"HTTP/1.1 200 OK\r\nContent-Length: 99\r\nTransfer-Encoding: gzip, chunked\r\n\r\n4\r\nabcd\r\n0\r\n\r\n".to_vec(),
            b"HTTP/1.1 200 OK\r\nContent-Length: 1\r\n\r\n!".to_vec(),
        ])
        .await;
        let mut c = bare(&addr, "*/*", None).await;
        assert_eq!(c.get("/a").await.unwrap(), ok(200, 2));
        assert_eq!(c.get("/b").await.unwrap(), ok(200, 4));
        assert!(c.stream.is_some(), "the connection is kept");
        // Still in step on the same connection.
        assert_eq!(c.get("/c").await.unwrap(), ok(200, 1));
    }

    #[tokio::test]
    async fn a_request_dropped_half_way_does_not_leave_its_answer_for_the_next() {
        let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = l.local_addr().unwrap().to_string();
        let (half_tx, half_rx) = tokio::sync::oneshot::channel::<()>();
        let (cut_tx, cut_rx) = tokio::sync::oneshot::channel::<()>();
        tokio::spawn(async move {
            // First connection: half an answer, then the rest only after the client gave up.
            let (mut s1, _) = l.accept().await.unwrap();
            let mut b = [0u8; 1024];
            let _ = s1.read(&mut b).await.unwrap();
            s1.write_all(b"HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nfirst").await.unwrap();
            half_tx.send(()).unwrap();
            let _ = cut_rx.await;
            let _ = s1.write_all(b"-rest").await;
            // Second connection: the answer to the second request.
            let (mut s2, _) = l.accept().await.unwrap();
            let _ = s2.read(&mut b).await.unwrap();
            s2.write_all(b"HTTP/1.1 200 OK\r\nContent-Length: 3\r\n\r\nnew").await.unwrap();
            let _ = s2.read(&mut b).await;
        });
        let mut c = bare(&addr, "*/*", None).await;
        // The request is dropped once half its answer was sent (as a timeout would drop it).
        tokio::select! {
            r = c.get("/first") => panic!("the first answer cannot complete: {r:?}"),
            _ = half_rx => {}
        }
        cut_tx.send(()).unwrap();
        assert_eq!(c.get("/second").await.unwrap(), ok(200, 3), "a new connection, not the rest of the first answer");
    }

    #[tokio::test]
    async fn bodies_without_a_length_run_to_the_close() {
        let addr = serve(vec![
            b"HTTP/1.1 200 OK\r\nConnection: keep-alive, close\r\n\r\nuntil the end".to_vec(),
            b"HTTP/1.0 200 OK\r\n\r\nold".to_vec(),
            b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nTransfer-Encoding: gzip\r\n\r\nabcdef".to_vec(),
            b"HTTP/1.1 200 OK\r\nContent-Length: 1\r\n\r\n!".to_vec(),
        ])
        .await;
        let mut c = bare(&addr, "*/*", None).await;
        assert_eq!(c.get("/a").await.unwrap(), ok(200, 13));
        assert!(c.stream.is_none());
        assert_eq!(c.get("/b").await.unwrap(), ok(200, 3));
        assert!(c.stream.is_none());
        assert_eq!(c.get("/c").await.unwrap(), ok(200, 6), "a non-chunked coding overrides Content-Length");
        assert_eq!(c.get("/d").await.unwrap(), ok(200, 1));
        assert!(c.stream.is_some(), "kept after a framed keep-alive answer");
    }

    #[tokio::test]
    async fn a_body_cut_short_is_an_error_and_the_next_request_reconnects() {
        let addr = serve(vec![
            b"HTTP/1.1 200 OK\r\nContent-Length: 10\r\nConnection: close\r\n\r\nshort".to_vec(),
            b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok".to_vec(),
        ])
        .await;
        let mut c = bare(&addr, "application/json", None).await;
        let e = c.get("/a").await.unwrap_err();
        assert!(format!("{e:#}").contains("5 of 10"), "{e:#}");
        assert_eq!(c.get("/b").await.unwrap(), ok(200, 2));
    }

    #[tokio::test]
    async fn a_large_body_streams_through_the_buffer() {
        let n = 3 * BUF + 17;
        let mut a = format!("HTTP/1.1 200 OK\r\nContent-Length: {n}\r\n\r\n").into_bytes();
        a.extend(std::iter::repeat_n(b'x', n));
        let addr = serve(vec![a, b"HTTP/1.1 200 OK\r\nContent-Length: 1\r\n\r\n!".to_vec()]).await;
        let mut c = bare(&addr, "*/*", None).await;
        assert_eq!(c.get("/").await.unwrap(), ok(200, n as u64));
        // The connection stayed in step: the next answer is read whole.
        assert_eq!(c.get("/").await.unwrap(), ok(200, 1));
        assert!(c.buf.is_empty());
    }

    /// A transport that writes at most 16 bytes at a time and is not ready for every other
    /// write (it wakes its task at once, as tokio does when a task's budget runs out).
    struct Stingy<IO> {
        io: IO,
        ready: bool,
    }

    impl<IO: AsyncRead + Unpin> AsyncRead for Stingy<IO> {
        fn poll_read(
            mut self: std::pin::Pin<&mut Self>,
            cx: &mut std::task::Context<'_>,
            buf: &mut tokio::io::ReadBuf<'_>,
        ) -> std::task::Poll<std::io::Result<()>> {
            std::pin::Pin::new(&mut self.io).poll_read(cx, buf)
        }
    }

    impl<IO: AsyncWrite + Unpin> AsyncWrite for Stingy<IO> {
        fn poll_write(
            mut self: std::pin::Pin<&mut Self>,
            cx: &mut std::task::Context<'_>,
            buf: &[u8],
        ) -> std::task::Poll<std::io::Result<usize>> {
            self.ready = !self.ready;
            if !self.ready {
                cx.waker().wake_by_ref();
                return std::task::Poll::Pending;
            }
            let n = buf.len().min(16);
            std::pin::Pin::new(&mut self.io).poll_write(cx, &buf[..n])
        }

        fn poll_flush(mut self: std::pin::Pin<&mut Self>, cx: &mut std::task::Context<'_>) -> std::task::Poll<std::io::Result<()>> {
            std::pin::Pin::new(&mut self.io).poll_flush(cx)
        }

        fn poll_shutdown(mut self: std::pin::Pin<&mut Self>, cx: &mut std::task::Context<'_>) -> std::task::Poll<std::io::Result<()>> {
            std::pin::Pin::new(&mut self.io).poll_shutdown(cx)
        }
    }

    #[tokio::test(start_paused = true)]
    async fn a_request_over_tls_is_sent_whole_when_the_transport_takes_part_of_it() {
        // A transport that takes a TLS record a piece at a time: tokio-rustls's write returns
        // once the record is queued, the rest waits for a flush.
        let (client, server_end) = tokio::io::duplex(64 * 1024);
        let client = Stingy { io: client, ready: false };
        let cert = rcgen::generate_simple_self_signed(vec!["localhost".to_string()]).unwrap();
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let key = rustls::pki_types::PrivateKeyDer::Pkcs8(cert.signing_key.serialize_der().into());
        let server = rustls::ServerConfig::builder_with_provider(provider.clone())
            .with_safe_default_protocol_versions()
            .unwrap()
            .with_no_client_auth()
            .with_single_cert(vec![cert.cert.der().clone()], key)
            .unwrap();
        let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(server));
        tokio::spawn(async move {
            let mut s = acceptor.accept(server_end).await.unwrap();
            let mut req = Vec::new();
            while !req.ends_with(b"\r\n\r\n") {
                let mut b = [0u8; 256];
                let n = s.read(&mut b).await.unwrap();
                assert_ne!(n, 0, "the client closed");
                req.extend_from_slice(&b[..n]);
            }
            s.write_all(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok").await.unwrap();
            s.flush().await.unwrap();
            let _ = s.read(&mut [0u8; 16]).await;
        });
        let mut roots = rustls::RootCertStore::empty();
        roots.add(cert.cert.der().clone()).unwrap();
        let config = rustls::ClientConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .unwrap()
            .with_root_certificates(roots)
            .with_no_client_auth();
        let name = rustls::pki_types::ServerName::try_from("localhost").unwrap();
        let tls = tokio_rustls::TlsConnector::from(Arc::new(config)).connect(name, client).await.unwrap();
        let mut c = bare("127.0.0.1:9", "*/*", Some("a-token-long-enough-to-need-several-pieces")).await;
        c.stream = Some(Box::new(tls));
        // Paused time: a request that never arrives is seen at once, not after a minute.
        let answer = tokio::time::timeout(std::time::Duration::from_secs(60), c.get("/api/v1/pods")).await;
        assert_eq!(answer.expect("the request reached the server").unwrap(), ok(200, 2));
    }
}
