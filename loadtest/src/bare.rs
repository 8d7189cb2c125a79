//! A bare HTTP/1.1 keep-alive connection for the closed-loop LIST phases.
//!
//! At tens of thousands of requests per second the load generator shares the machine's two
//! cores with the server it measures, so every microsecond it spends per request is taken
//! from the server (and shows up in the server's tail latency). hyper's pooled client costs
//! a pool checkout, a task hop to the connection task and a body channel per response; this
//! client is one task per connection that writes a prepared request and reads the response
//! into one reused buffer, parsing the head with `httparse` (the parser hyper uses). It
//! handles `Content-Length` and chunked bodies and reconnects after `Connection: close` or
//! any error. Other phases keep the hyper client.

use anyhow::{bail, Context};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// Room for a response head and the first body bytes; larger bodies stream through it.
const BUF: usize = 256 * 1024;
/// The most header lines a response may carry.
const MAX_HEADERS: usize = 32;

/// One connection to one authority, opened on first use and reopened after a failure.
pub struct Bare {
    authority: String,
    /// Request headers after the request line, ending with the blank line.
    tail: Vec<u8>,
    stream: Option<TcpStream>,
    buf: Vec<u8>,
    req: Vec<u8>,
}

/// A response's status and body size; the body itself is read and dropped.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Answer {
    pub status: u16,
    pub body_bytes: u64,
}

/// How the response body is framed.
enum Framing {
    Length(u64),
    Chunked,
    /// Until the server closes the connection.
    Close,
}

impl Bare {
    pub fn new(authority: &str, accept: &str, token: Option<&str>) -> Bare {
        let mut tail = format!("Host: {authority}\r\nAccept: {accept}\r\nUser-Agent: kache-loadtest/0.1\r\n");
        if let Some(t) = token {
            tail.push_str(&format!("Authorization: Bearer {t}\r\n"));
        }
        tail.push_str("\r\n");
        Bare { authority: authority.to_string(), tail: tail.into_bytes(), stream: None, buf: Vec::with_capacity(BUF), req: Vec::with_capacity(512) }
    }

    /// GET `pq` and read the whole response. After an error the connection is dropped and
    /// the next call opens a new one.
    pub async fn get(&mut self, pq: &str) -> anyhow::Result<Answer> {
        let r = self.exchange(pq).await;
        if r.is_err() {
            self.stream = None;
        }
        r
    }

    async fn exchange(&mut self, pq: &str) -> anyhow::Result<Answer> {
        if self.stream.is_none() {
            let s = TcpStream::connect(&self.authority).await.with_context(|| format!("connecting to {}", self.authority))?;
            s.set_nodelay(true)?;
            self.stream = Some(s);
            self.buf.clear();
        }
        let stream = self.stream.as_mut().expect("connected above");
        self.req.clear();
        self.req.extend_from_slice(b"GET ");
        self.req.extend_from_slice(pq.as_bytes());
        self.req.extend_from_slice(b" HTTP/1.1\r\n");
        self.req.extend_from_slice(&self.tail);
        stream.write_all(&self.req).await.context("sending the request")?;
        let (status, framing, keep_alive, head_len) = read_head(stream, &mut self.buf).await?;
        self.buf.drain(..head_len);
        let body_bytes = match framing {
            Framing::Length(n) => read_length(stream, &mut self.buf, n).await?,
            Framing::Chunked => read_chunked(stream, &mut self.buf).await?,
            Framing::Close => {
                let mut n = self.buf.len() as u64;
                self.buf.clear();
                n += read_to_close(stream, &mut self.buf).await?;
                self.stream = None;
                return Ok(Answer { status, body_bytes: n });
            }
        };
        if !keep_alive {
            self.stream = None;
        }
        Ok(Answer { status, body_bytes })
    }
}

/// Read into `buf`'s spare room (growing it if it is full); 0 means the peer closed.
async fn fill(stream: &mut TcpStream, buf: &mut Vec<u8>) -> anyhow::Result<usize> {
    if buf.capacity() - buf.len() < 4096 {
        buf.reserve(BUF);
    }
    Ok(stream.read_buf(buf).await?)
}

/// Read until a whole response head is in `buf`; return what it says and its length.
async fn read_head(stream: &mut TcpStream, buf: &mut Vec<u8>) -> anyhow::Result<(u16, Framing, bool, usize)> {
    loop {
        let mut headers = [httparse::EMPTY_HEADER; MAX_HEADERS];
        let mut resp = httparse::Response::new(&mut headers);
        if let httparse::Status::Complete(len) = resp.parse(buf).context("parsing the response head")? {
            let status = resp.code.unwrap_or(0);
            let mut framing = Framing::Close;
            let mut keep_alive = resp.version == Some(1);
            for h in resp.headers.iter() {
                if h.name.eq_ignore_ascii_case("content-length") {
                    let n = std::str::from_utf8(h.value).ok().and_then(|v| v.trim().parse().ok()).context("a bad Content-Length")?;
                    framing = Framing::Length(n);
                } else if h.name.eq_ignore_ascii_case("transfer-encoding") && h.value.eq_ignore_ascii_case(b"chunked") {
                    framing = Framing::Chunked;
                } else if h.name.eq_ignore_ascii_case("connection") && h.value.eq_ignore_ascii_case(b"close") {
                    keep_alive = false;
                }
            }
            // 1xx, 204 and 304 have no body.
            if status < 200 || status == 204 || status == 304 {
                framing = Framing::Length(0);
            }
            return Ok((status, framing, keep_alive, len));
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
async fn read_length(stream: &mut TcpStream, buf: &mut Vec<u8>, n: u64) -> anyhow::Result<u64> {
    let mut left = n;
    loop {
        let take = (buf.len() as u64).min(left) as usize;
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

/// Consume a chunked body; return the size of its data.
async fn read_chunked(stream: &mut TcpStream, buf: &mut Vec<u8>) -> anyhow::Result<u64> {
    let mut total = 0u64;
    loop {
        let (start, size) = loop {
            match httparse::parse_chunk_size(buf).map_err(|_| anyhow::anyhow!("a bad chunk size line"))? {
                httparse::Status::Complete(x) => break x,
                httparse::Status::Partial => {
                    if fill(stream, buf).await? == 0 {
                        bail!("connection closed inside a chunk size line");
                    }
                }
            }
        };
        buf.drain(..start);
        if size == 0 {
            // No trailers are expected: the last chunk is followed by the blank line.
            while buf.len() < 2 {
                if fill(stream, buf).await? == 0 {
                    bail!("connection closed before the end of a chunked body");
                }
            }
            if &buf[..2] != b"\r\n" {
                bail!("trailers after a chunked body are not supported");
            }
            buf.drain(..2);
            return Ok(total);
        }
        read_length(stream, buf, size).await?;
        total += size;
        while buf.len() < 2 {
            if fill(stream, buf).await? == 0 {
                bail!("connection closed after a chunk's data");
            }
        }
        if &buf[..2] != b"\r\n" {
            bail!("a chunk's data is not followed by CRLF");
        }
        buf.drain(..2);
    }
}

/// Consume everything until the peer closes.
async fn read_to_close(stream: &mut TcpStream, buf: &mut Vec<u8>) -> anyhow::Result<u64> {
    let mut n = 0u64;
    loop {
        let got = fill(stream, buf).await?;
        if got == 0 {
            return Ok(n);
        }
        n += got as u64;
        buf.clear();
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
                        if a.windows(17).any(|w| w.eq_ignore_ascii_case(b"connection: close")) {
                            continue 'conns;
                        }
                    }
                }
            }
        });
        addr
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
        let mut c = Bare::new(&addr, "application/json", Some("t"));
        assert_eq!(c.get("/a").await.unwrap(), Answer { status: 200, body_bytes: 5 });
        assert_eq!(c.get("/b").await.unwrap(), Answer { status: 200, body_bytes: 13 });
        assert_eq!(c.get("/c").await.unwrap(), Answer { status: 404, body_bytes: 2 });
        assert!(c.stream.is_none(), "Connection: close drops the connection");
        // The next request opens a new connection.
        assert_eq!(c.get("/d").await.unwrap(), Answer { status: 204, body_bytes: 0 });
        assert_eq!(c.get("/e").await.unwrap(), Answer { status: 200, body_bytes: 0 });
    }

    #[tokio::test]
    async fn a_body_cut_short_is_an_error_and_the_next_request_reconnects() {
        let addr = serve(vec![b"HTTP/1.1 200 OK\r\nContent-Length: 10\r\nConnection: close\r\n\r\nshort".to_vec(), b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok".to_vec()]).await;
        let mut c = Bare::new(&addr, "application/json", None);
        let e = c.get("/a").await.unwrap_err();
        assert!(format!("{e:#}").contains("5 of 10"), "{e:#}");
        assert_eq!(c.get("/b").await.unwrap(), Answer { status: 200, body_bytes: 2 });
    }

    #[tokio::test]
    async fn a_large_body_streams_through_the_buffer() {
        let n = 3 * BUF + 17;
        let mut a = format!("HTTP/1.1 200 OK\r\nContent-Length: {n}\r\n\r\n").into_bytes();
        a.extend(std::iter::repeat_n(b'x', n));
        let addr = serve(vec![a, b"HTTP/1.1 200 OK\r\nContent-Length: 1\r\n\r\n!".to_vec()]).await;
        let mut c = Bare::new(&addr, "*/*", None);
        assert_eq!(c.get("/").await.unwrap(), Answer { status: 200, body_bytes: n as u64 });
        // The connection stayed in step: the next answer is read whole.
        assert_eq!(c.get("/").await.unwrap(), Answer { status: 200, body_bytes: 1 });
        assert!(c.buf.is_empty());
    }
}
