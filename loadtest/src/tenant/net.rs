//! Tenant probe, connections: the endpoint under test (a loopback `https://` or `http://`
//! URL, TLS verified against a CA file or not at all), raw TCP and TLS sockets, and HTTP/2
//! connections that advertise a zero receive window and never release capacity, each stream
//! and connection recorded from open to its end.

use crate::endpoint::{Credentials, Target, Tls};
use anyhow::{bail, Context};
use bytes::Bytes;
use http::{HeaderMap, HeaderValue};
use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
use rustls::{DigitallySignedStruct, SignatureScheme};
use serde::Serialize;
use std::collections::BTreeMap;
use std::net::{IpAddr, SocketAddr};
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::TcpStream;
use tokio_rustls::client::TlsStream;
use tokio_rustls::TlsConnector;

/// How long a TCP connect or a TLS or HTTP/2 handshake may take.
pub const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);

/// The connection window the zero-window connections keep. HTTP/2 starts every connection
/// at 65,535 bytes and SETTINGS cannot lower it (only WINDOW_UPDATE moves it, upwards), so
/// this is the least a client can offer; never releasing capacity keeps it there.
pub const CONNECTION_WINDOW: u32 = 65_535;

/// One endpoint the probe measures.
#[derive(Clone)]
pub struct Endpoint {
    /// The name the report uses (`direct`, `kache`).
    pub name: String,
    /// `https://127.0.0.1:6443`, as given.
    pub url: String,
    pub addr: SocketAddr,
    /// `host:port`, for the `:authority` of requests.
    pub authority: String,
    /// TLS (no ALPN set) and the name the certificate is checked against; `None` for `http://`.
    pub tls: Option<(Arc<rustls::ClientConfig>, ServerName<'static>)>,
}

impl std::fmt::Debug for Endpoint {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Endpoint").field("name", &self.name).field("url", &self.url).finish_non_exhaustive()
    }
}

/// Either socket the probe speaks HTTP/2 over.
pub trait Io: AsyncRead + AsyncWrite + Unpin + Send + 'static {}
impl<T: AsyncRead + AsyncWrite + Unpin + Send + 'static> Io for T {}

impl Endpoint {
    /// The endpoint `NAME=URL` (or a bare URL, named `target`). The host must be a loopback
    /// address or `localhost`: the probe attacks only this machine.
    pub fn parse(spec: &str, tls: &TlsChoice) -> anyhow::Result<Endpoint> {
        let (name, url) = match spec.split_once('=') {
            Some((n, u)) if !n.contains("://") => (n.to_string(), u.to_string()),
            _ => ("target".to_string(), spec.to_string()),
        };
        let uri: http::Uri = url.parse().with_context(|| format!("--target {spec}: not a URL"))?;
        let https = match uri.scheme_str() {
            Some("https") => true,
            Some("http") => false,
            other => bail!("--target {spec}: scheme {other:?} is neither http nor https"),
        };
        if !uri.path().trim_end_matches('/').is_empty() {
            bail!("--target {spec}: a path prefix is not supported");
        }
        let host = uri.host().context("the URL has no host")?.trim_start_matches('[').trim_end_matches(']').to_string();
        let port = uri.port_u16().unwrap_or(if https { 443 } else { 80 });
        let ip: IpAddr = if host == "localhost" { IpAddr::from([127, 0, 0, 1]) } else { host.parse().context("host is not an IP")? };
        if !ip.is_loopback() {
            bail!("--target {spec}: {ip} is not a loopback address (the probe attacks only this machine)");
        }
        let tls = if https {
            let server = ServerName::try_from(host.clone()).with_context(|| format!("TLS server name {host:?}"))?;
            Some((tls.config()?, server))
        } else {
            None
        };
        let authority = uri.authority().map(|a| a.to_string()).unwrap_or_else(|| format!("{host}:{port}"));
        Ok(Endpoint { name, url: url.trim_end_matches('/').to_string(), addr: SocketAddr::new(ip, port), authority, tls })
    }

    /// `http` or `https`.
    pub fn scheme(&self) -> &'static str {
        if self.tls.is_some() {
            "https"
        } else {
            "http"
        }
    }

    /// A hyper-client target of this endpoint carrying `token` (none: no credentials).
    pub fn target(&self, token: Option<&str>) -> anyhow::Result<Target> {
        let mut headers = HeaderMap::new();
        if let Some(t) = token {
            let mut v = HeaderValue::from_str(&format!("Bearer {t}")).context("a token holds characters a header cannot")?;
            v.set_sensitive(true);
            headers.insert(http::header::AUTHORIZATION, v);
        }
        let tls = self.tls.as_ref().map(|(config, server_name)| Tls { config: config.clone(), server_name: server_name.clone() });
        Ok(Target { name: self.name.clone(), authority: self.authority.clone(), tls, credentials: Credentials::fixed(headers) })
    }

    /// A connected TCP socket (no delay), within [`HANDSHAKE_TIMEOUT`].
    pub async fn tcp(&self) -> anyhow::Result<TcpStream> {
        let s = tokio::time::timeout(HANDSHAKE_TIMEOUT, TcpStream::connect(self.addr)).await.context("TCP connect timed out")??;
        s.set_nodelay(true)?;
        Ok(s)
    }

    /// TLS over `tcp`, offering `alpn`, within [`HANDSHAKE_TIMEOUT`].
    pub async fn tls_over(&self, tcp: TcpStream, alpn: &[&[u8]]) -> anyhow::Result<TlsStream<TcpStream>> {
        let Some((config, server)) = &self.tls else { bail!("{} is not https", self.url) };
        let mut config = config.as_ref().clone();
        config.alpn_protocols = alpn.iter().map(|p| p.to_vec()).collect();
        let connector = TlsConnector::from(Arc::new(config));
        let tls =
            tokio::time::timeout(HANDSHAKE_TIMEOUT, connector.connect(server.clone(), tcp)).await.context("TLS handshake timed out")??;
        Ok(tls)
    }

    /// A socket ready for HTTP/2: TLS with ALPN `h2` (refused if the server picks anything
    /// else), or plain TCP (prior knowledge).
    async fn h2_io(&self) -> anyhow::Result<Box<dyn Io>> {
        let tcp = self.tcp().await?;
        if self.tls.is_none() {
            return Ok(Box::new(tcp));
        }
        let tls = self.tls_over(tcp, &[b"h2"]).await?;
        if tls.get_ref().1.alpn_protocol() != Some(b"h2") {
            bail!("the server did not choose ALPN h2");
        }
        Ok(Box::new(tls))
    }

    /// An HTTP/2 connection whose SETTINGS advertise INITIAL_WINDOW_SIZE 0 and whose
    /// connection window stays at [`CONNECTION_WINDOW`]: the server may send response heads
    /// but no body byte, and capacity is never released. Its driver is spawned; its end
    /// (closed by the server, or an error) is recorded in `tracker` under the returned id.
    pub async fn zero_window(&self, tracker: &Arc<Tracker>, group: &str) -> anyhow::Result<(h2::client::SendRequest<Bytes>, usize)> {
        let io = self.h2_io().await?;
        let handshake =
            h2::client::Builder::new().initial_window_size(0).initial_connection_window_size(CONNECTION_WINDOW).handshake::<_, Bytes>(io);
        let (send, conn) = tokio::time::timeout(HANDSHAKE_TIMEOUT, handshake).await.context("HTTP/2 handshake timed out")??;
        let id = tracker.conn_opened(group);
        let t = tracker.clone();
        tokio::spawn(async move {
            let how = match conn.await {
                Ok(()) => "closed cleanly".to_string(),
                Err(e) => classify(&e),
            };
            t.conn_ended(id, how);
        });
        Ok((send, id))
    }
}

/// How TLS certificates are checked.
#[derive(Debug, Clone)]
pub enum TlsChoice {
    /// Against the PEM CA bundle in this file.
    Ca(std::path::PathBuf),
    /// Not at all (`--insecure`, as kubeconfig's `insecure-skip-tls-verify`).
    Insecure,
    /// Neither given: an `https://` target is refused.
    Unset,
}

impl TlsChoice {
    /// The client configuration (ring, no client certificate, no ALPN).
    fn config(&self) -> anyhow::Result<Arc<rustls::ClientConfig>> {
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let builder = rustls::ClientConfig::builder_with_provider(provider.clone()).with_safe_default_protocol_versions()?;
        let config = match self {
            TlsChoice::Insecure => {
                builder.dangerous().with_custom_certificate_verifier(Arc::new(NoVerification(provider))).with_no_client_auth()
            }
            TlsChoice::Ca(path) => builder.with_root_certificates(roots(path)?).with_no_client_auth(),
            TlsChoice::Unset => bail!("an https:// target needs --ca-file or --insecure"),
        };
        Ok(Arc::new(config))
    }
}

fn roots(path: &Path) -> anyhow::Result<rustls::RootCertStore> {
    use rustls::pki_types::pem::PemObject;
    let mut store = rustls::RootCertStore::empty();
    for cert in CertificateDer::pem_file_iter(path).with_context(|| format!("reading {}", path.display()))? {
        store.add(cert.with_context(|| format!("a certificate in {}", path.display()))?)?;
    }
    if store.is_empty() {
        bail!("{}: no certificate", path.display());
    }
    Ok(store)
}

/// Accepts any server certificate (`--insecure`); handshake signatures are still checked,
/// so the session is encrypted to whoever holds the presented key.
#[derive(Debug)]
struct NoVerification(Arc<rustls::crypto::CryptoProvider>);

impl ServerCertVerifier for NoVerification {
    fn verify_server_cert(
        &self,
        _end_entity: &CertificateDer<'_>,
        _intermediates: &[CertificateDer<'_>],
        _server_name: &ServerName<'_>,
        _ocsp: &[u8],
        _now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        Ok(ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(message, cert, dss, &self.0.signature_verification_algorithms)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(message, cert, dss, &self.0.signature_verification_algorithms)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.0.signature_verification_algorithms.supported_schemes()
    }
}

/// What ended a stream or a connection, from h2's error: the server's RST_STREAM or
/// GOAWAY (with its reason), or the socket closing under it.
pub fn classify(e: &h2::Error) -> String {
    let reason = e.reason().map(|r| format!("{r:?}")).unwrap_or_default();
    if e.is_reset() {
        if e.is_remote() {
            format!("RST_STREAM {reason}")
        } else {
            format!("reset here {reason}")
        }
    } else if e.is_go_away() {
        if e.is_remote() {
            format!("GOAWAY {reason}")
        } else {
            format!("GOAWAY sent here {reason}")
        }
    } else if let Some(io) = e.get_io() {
        format!("connection closed ({:?})", io.kind())
    } else if !reason.is_empty() {
        format!("protocol error {reason}")
    } else {
        format!("error: {e}")
    }
}

/// One tenant stream: seconds since the phase began.
#[derive(Debug, Clone, Serialize)]
pub struct StreamRecord {
    /// Which part of the attack opened it (`initial`, `extra`, a token's index).
    pub group: String,
    /// The connection it rides on (an index into the tracker's connections).
    pub conn: usize,
    pub opened_s: f64,
    /// When the response head arrived, and its status.
    pub head: Option<(f64, u16)>,
    /// When it ended, and how (`RST_STREAM CANCEL`, `END_STREAM`, `connection closed (...)`).
    pub end: Option<(f64, String)>,
}

/// One tenant connection.
#[derive(Debug, Clone, Serialize)]
pub struct ConnRecord {
    pub group: String,
    pub opened_s: f64,
    pub end: Option<(f64, String)>,
}

/// Every stream and connection of one attack, timed from its start.
pub struct Tracker {
    pub start: Instant,
    streams: Mutex<Vec<StreamRecord>>,
    conns: Mutex<Vec<ConnRecord>>,
}

impl Tracker {
    pub fn new(start: Instant) -> Arc<Tracker> {
        Arc::new(Tracker { start, streams: Mutex::new(Vec::new()), conns: Mutex::new(Vec::new()) })
    }

    /// Seconds since the start.
    pub fn now(&self) -> f64 {
        self.start.elapsed().as_secs_f64()
    }

    fn conn_opened(&self, group: &str) -> usize {
        let mut c = self.conns.lock().unwrap_or_else(|e| e.into_inner());
        c.push(ConnRecord { group: group.into(), opened_s: self.now(), end: None });
        c.len() - 1
    }

    fn conn_ended(&self, id: usize, how: String) {
        let now = self.now();
        if let Some(c) = self.conns.lock().unwrap_or_else(|e| e.into_inner()).get_mut(id) {
            c.end.get_or_insert((now, how));
        }
    }

    /// Send `req` on `send` and hold the stream: record its head and its end, never
    /// reading a body byte. The task ends with the stream (or when aborted, leaving the
    /// stream open in the record).
    pub fn hold(
        self: &Arc<Self>,
        send: &mut h2::client::SendRequest<Bytes>,
        conn: usize,
        group: &str,
        req: http::Request<()>,
    ) -> anyhow::Result<tokio::task::JoinHandle<()>> {
        let (resp, _) = send.send_request(req, true)?;
        let id = {
            let mut s = self.streams.lock().unwrap_or_else(|e| e.into_inner());
            s.push(StreamRecord { group: group.into(), conn, opened_s: self.now(), head: None, end: None });
            s.len() - 1
        };
        let t = self.clone();
        Ok(tokio::spawn(async move {
            let end = match resp.await {
                Ok(r) => {
                    t.update(id, |s| s.head = Some((t.now(), r.status().as_u16())));
                    let mut body = r.into_body();
                    // Polling takes frames the server managed to send (none, with a zero
                    // window, but a zero-length DATA with END_STREAM) and surfaces a reset;
                    // capacity is never released, so the window stays shut.
                    loop {
                        match body.data().await {
                            Some(Ok(_)) => continue,
                            Some(Err(e)) => break classify(&e),
                            None => break "END_STREAM".to_string(),
                        }
                    }
                }
                Err(e) => classify(&e),
            };
            let now = t.now();
            t.update(id, |s| {
                s.end.get_or_insert((now, end));
            });
        }))
    }

    fn update(&self, id: usize, f: impl FnOnce(&mut StreamRecord)) {
        if let Some(s) = self.streams.lock().unwrap_or_else(|e| e.into_inner()).get_mut(id) {
            f(s);
        }
    }

    /// The records so far.
    pub fn snapshot(&self) -> (Vec<StreamRecord>, Vec<ConnRecord>) {
        let s = self.streams.lock().unwrap_or_else(|e| e.into_inner()).clone();
        let c = self.conns.lock().unwrap_or_else(|e| e.into_inner()).clone();
        (s, c)
    }
}

/// Figures of a set of tenant streams and their connections.
#[derive(Debug, Clone, Serialize, Default)]
pub struct StreamFigures {
    /// Streams sent.
    pub sent: usize,
    /// Response heads received, by status code.
    pub heads: BTreeMap<u16, usize>,
    /// Streams that ended, by how (`RST_STREAM CANCEL`, `END_STREAM`, ...).
    pub ended: BTreeMap<String, usize>,
    /// Still open when the attack stopped (neither reset nor ended nor its connection closed).
    pub open_at_end: usize,
    /// Seconds since the attack began at which streams ended: first, median, last.
    pub ended_at_s: Option<[f64; 3]>,
    /// Seconds each ended stream lived (end minus open): min, median, max.
    pub lifetime_s: Option<[f64; 3]>,
    /// Response heads: seconds after the stream was sent, min, median, max.
    pub head_after_s: Option<[f64; 3]>,
    /// Each second since the attack began (index 0 = second 1): streams sent so far, and
    /// streams open (sent, not ended).
    pub sent_per_second: Vec<usize>,
    pub open_per_second: Vec<usize>,
    /// Connections opened, and those the server closed or that failed, by how, with the
    /// first and last time (seconds since the attack began).
    pub connections: usize,
    pub connections_ended: BTreeMap<String, usize>,
    pub connections_ended_at_s: Option<[f64; 2]>,
    /// Connections that could not be opened (connect, TLS or HTTP/2 handshake), by error.
    pub connect_errors: BTreeMap<String, usize>,
    /// Streams that could not be sent on an open connection (h2 refused them), by error.
    pub send_errors: BTreeMap<String, usize>,
}

/// Min, median and max of `v`.
pub fn spread(v: &mut [f64]) -> Option<[f64; 3]> {
    if v.is_empty() {
        return None;
    }
    v.sort_by(f64::total_cmp);
    let r = |x: f64| (x * 1000.0).round() / 1000.0;
    Some([r(v[0]), r(v[v.len() / 2]), r(v[v.len() - 1])])
}

impl StreamFigures {
    /// The figures of the streams and connections `keep` selects, over `seconds`.
    pub fn of(streams: &[StreamRecord], conns: &[ConnRecord], keep: impl Fn(&str) -> bool, seconds: f64) -> StreamFigures {
        let streams: Vec<&StreamRecord> = streams.iter().filter(|s| keep(&s.group)).collect();
        let conns: Vec<&ConnRecord> = conns.iter().filter(|c| keep(&c.group)).collect();
        let mut f = StreamFigures { sent: streams.len(), connections: conns.len(), ..Default::default() };
        let (mut at, mut life, mut head) = (Vec::new(), Vec::new(), Vec::new());
        for s in &streams {
            if let Some((t, code)) = s.head {
                *f.heads.entry(code).or_default() += 1;
                head.push(t - s.opened_s);
            }
            match &s.end {
                Some((t, how)) => {
                    *f.ended.entry(how.clone()).or_default() += 1;
                    at.push(*t);
                    life.push(t - s.opened_s);
                }
                None => f.open_at_end += 1,
            }
        }
        f.ended_at_s = spread(&mut at);
        f.lifetime_s = spread(&mut life);
        f.head_after_s = spread(&mut head);
        for sec in 1..=seconds.ceil() as usize {
            let t = sec as f64;
            f.sent_per_second.push(streams.iter().filter(|s| s.opened_s <= t).count());
            f.open_per_second.push(streams.iter().filter(|s| s.opened_s <= t && s.end.as_ref().is_none_or(|(e, _)| *e > t)).count());
        }
        let mut ends = Vec::new();
        for c in &conns {
            if let Some((t, how)) = &c.end {
                *f.connections_ended.entry(how.clone()).or_default() += 1;
                ends.push(*t);
            }
        }
        f.connections_ended_at_s = spread(&mut ends).map(|[a, _, b]| [a, b]);
        f
    }
}

/// An error's first line, short enough to count by.
pub fn short(e: &anyhow::Error) -> String {
    let s = format!("{e:#}");
    s.chars().take(120).collect()
}

/// Opens held streams of one request on zero-window connections, `per_conn` streams to a
/// connection, and keeps every handle until dropped (the streams stay open until then, or
/// until the server ends them).
pub struct Holder {
    ep: Endpoint,
    tracker: Arc<Tracker>,
    group: String,
    token: Option<String>,
    pq: String,
    per_conn: usize,
    current: Option<(h2::client::SendRequest<Bytes>, usize, usize)>,
    senders: Vec<h2::client::SendRequest<Bytes>>,
    tasks: Vec<tokio::task::JoinHandle<()>>,
    /// Connections that could not be opened, by error.
    pub connect_errors: BTreeMap<String, usize>,
    /// Streams that could not be sent, by error.
    pub send_errors: BTreeMap<String, usize>,
}

/// How long a connection may keep a new stream waiting (the server's concurrent-stream
/// limit reached) before the next streams go to a new connection.
const STREAM_SLOT_TIMEOUT: Duration = Duration::from_secs(5);

impl Holder {
    pub fn new(ep: &Endpoint, tracker: &Arc<Tracker>, group: &str, token: Option<&str>, pq: &str, per_conn: usize) -> Holder {
        Holder {
            ep: ep.clone(),
            tracker: tracker.clone(),
            group: group.into(),
            token: token.map(str::to_string),
            pq: pq.into(),
            per_conn: per_conn.max(1),
            current: None,
            senders: Vec::new(),
            tasks: Vec::new(),
            connect_errors: BTreeMap::new(),
            send_errors: BTreeMap::new(),
        }
    }

    /// Open `n` more streams, giving up on those left at `until`.
    pub async fn open(&mut self, n: usize, until: Instant) {
        for _ in 0..n {
            if Instant::now() >= until {
                *self.send_errors.entry("the attack's time ran out".into()).or_default() += 1;
                continue;
            }
            if let Err(e) = self.open_one(until).await {
                *self.send_errors.entry(short(&e)).or_default() += 1;
            }
        }
    }

    async fn open_one(&mut self, until: Instant) -> anyhow::Result<()> {
        if self.current.as_ref().is_none_or(|(_, _, used)| *used >= self.per_conn) {
            match self.ep.zero_window(&self.tracker, &self.group).await {
                Ok((send, id)) => {
                    self.senders.push(send.clone());
                    self.current = Some((send, id, 0));
                }
                Err(e) => {
                    *self.connect_errors.entry(short(&e)).or_default() += 1;
                    anyhow::bail!("no connection");
                }
            }
        }
        let Some((send, conn, used)) = self.current.as_mut() else { anyhow::bail!("no connection") };
        let limit = (Instant::now() + STREAM_SLOT_TIMEOUT).min(until);
        let mut ready = match tokio::time::timeout_at(limit.into(), send.clone().ready()).await {
            Ok(Ok(s)) => s,
            Ok(Err(e)) => {
                self.current = None;
                anyhow::bail!("{}", classify(&e));
            }
            Err(_) => {
                // The server holds the previous stream back (its concurrent-stream limit):
                // this connection is full.
                self.current = None;
                anyhow::bail!("no stream slot on the connection within {STREAM_SLOT_TIMEOUT:?}");
            }
        };
        let mut req = http::Request::get(format!("{}://{}{}", self.ep.scheme(), self.ep.authority, self.pq))
            .header(http::header::ACCEPT, "application/json")
            .header(http::header::USER_AGENT, "kache-loadtest-tenant/0.1");
        if let Some(t) = &self.token {
            req = req.header(http::header::AUTHORIZATION, format!("Bearer {t}"));
        }
        let task = self.tracker.hold(&mut ready, *conn, &self.group, req.body(())?)?;
        *used += 1;
        self.tasks.push(task);
        Ok(())
    }

    /// Stop holding: abort the stream tasks and drop the connections' handles.
    pub fn close(self) {
        for t in &self.tasks {
            t.abort();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn targets_are_loopback_urls_with_a_tls_choice() {
        crate::endpoint::install_crypto_provider();
        let e = Endpoint::parse("kache=https://127.0.0.1:6444/", &TlsChoice::Insecure).unwrap();
        assert_eq!((e.name.as_str(), e.authority.as_str(), e.scheme()), ("kache", "127.0.0.1:6444", "https"));
        let e = Endpoint::parse("http://localhost:8080", &TlsChoice::Unset).unwrap();
        assert_eq!((e.name.as_str(), e.addr.to_string().as_str(), e.tls.is_none()), ("target", "127.0.0.1:8080", true));
        assert!(Endpoint::parse("x=https://10.0.0.1:6443", &TlsChoice::Insecure).is_err(), "not loopback");
        assert!(Endpoint::parse("x=https://127.0.0.1:6443", &TlsChoice::Unset).is_err(), "https needs --insecure or --ca-file");
        assert!(Endpoint::parse("x=https://127.0.0.1:6443/prefix", &TlsChoice::Insecure).is_err());
    }

    #[test]
    fn stream_figures_count_open_streams_each_second() {
        let s = |group: &str, opened_s: f64, head: Option<(f64, u16)>, end: Option<(f64, &str)>| StreamRecord {
            group: group.into(),
            conn: 0,
            opened_s,
            head,
            end: end.map(|(t, h)| (t, h.to_string())),
        };
        let streams = vec![
            s("a", 0.1, Some((0.2, 200)), None),
            s("a", 0.5, Some((0.6, 200)), Some((2.5, "RST_STREAM CANCEL"))),
            s("a", 1.5, None, Some((1.7, "connection closed (BrokenPipe)"))),
            s("b", 0.1, Some((0.1, 429)), Some((0.2, "END_STREAM"))),
        ];
        let conns = vec![ConnRecord { group: "a".into(), opened_s: 0.0, end: Some((2.5, "GOAWAY NO_ERROR".into())) }];
        let f = StreamFigures::of(&streams, &conns, |g| g == "a", 3.0);
        assert_eq!((f.sent, f.open_at_end, f.heads.get(&200)), (3, 1, Some(&2)));
        assert_eq!(f.sent_per_second, vec![2, 3, 3]);
        assert_eq!(f.open_per_second, vec![2, 2, 1]);
        assert_eq!(f.ended.get("RST_STREAM CANCEL"), Some(&1));
        assert_eq!(f.ended_at_s, Some([1.7, 2.5, 2.5]));
        assert_eq!((f.connections, f.connections_ended_at_s), (1, Some([2.5, 2.5])));
    }
}
