//! Tenant probe, attack `silent`: connections that hold a socket and say nothing: TLS
//! handshakes completed and then silence, TLS with 16 of the 24 bytes of the HTTP/2 client
//! preface, and TCP connections that never start TLS. Measures when the server closes each
//! (seconds after the TCP connect) and how many are still open at the end.

use super::net::{spread, Endpoint};
use super::Ctx;
use serde::Serialize;
use std::collections::BTreeMap;
use std::time::{Duration, Instant};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWriteExt};

/// The first 16 bytes of the 24-byte HTTP/2 client connection preface
/// (`PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n`).
const PARTIAL_PREFACE: &[u8] = b"PRI * HTTP/2.0\r\n";

/// One group of silent connections.
#[derive(Debug, Clone, Serialize, Default)]
pub struct Group {
    /// What its connections do.
    pub what: String,
    pub asked: usize,
    /// Connections that reached their silent state (connected, and handshaken where asked).
    pub opened: usize,
    /// Those that did not, by error.
    pub open_errors: BTreeMap<String, usize>,
    /// Closed by the server before the end, by how (`EOF`, `RST`, `TLS close_notify`, ...).
    pub closed: BTreeMap<String, usize>,
    /// Seconds from the TCP connect to the close: min, median, max; and every one, sorted.
    pub closed_after_s: Option<[f64; 3]>,
    pub closed_after_s_all: Vec<f64>,
    /// Still open when the attack's time ran out.
    pub open_at_end: usize,
    /// Bytes the server sent on them (its HTTP/2 SETTINGS, a GOAWAY, a TLS alert).
    pub bytes_received: u64,
    /// TLS handshake time: min, median, max.
    pub handshake_s: Option<[f64; 3]>,
}

/// What one connection did.
enum Outcome {
    Failed(String),
    Held { handshake_s: Option<f64>, closed: Option<(f64, String)>, bytes: u64 },
}

/// The three groups, against one endpoint.
#[derive(Debug, Clone, Serialize)]
pub struct Silent {
    pub seconds: u64,
    pub groups: Vec<Group>,
}

#[derive(Clone, Copy)]
enum Kind {
    /// TLS handshake (ALPN h2 and http/1.1), then nothing; plain TCP, nothing, on `http://`.
    Handshaken,
    /// TLS (ALPN h2), then 16 bytes of the preface; over plain TCP on `http://`.
    PartialPreface,
    /// TCP, and no TLS ClientHello.
    NoTls,
}

/// Open every group's connections at once and wait --seconds for the server to close them.
pub async fn run(ctx: &Ctx<'_>) -> anyhow::Result<Silent> {
    let a = ctx.args;
    let until = Instant::now() + Duration::from_secs(a.seconds);
    let tls = ctx.ep.tls.is_some();
    let mut plan = vec![
        (Kind::Handshaken, a.silent_tls, if tls { "TLS handshake done, then nothing" } else { "TCP connected, then nothing (plain http)" }),
        (
            Kind::PartialPreface,
            a.silent_preface,
            if tls { "TLS, then 16 of 24 preface bytes" } else { "16 of 24 preface bytes (plain http)" },
        ),
    ];
    // On plain http, a TCP connection that sends nothing is the first group already.
    if tls {
        plan.push((Kind::NoTls, a.silent_tcp, "TCP connected, no TLS handshake"));
    }
    let mut tasks = Vec::new();
    for (kind, n, _) in &plan {
        let mut group = Vec::new();
        for _ in 0..*n {
            let (ep, kind) = (ctx.ep.clone(), *kind);
            group.push(tokio::spawn(async move { hold(&ep, kind, until).await }));
        }
        tasks.push(group);
    }
    let mut groups = Vec::new();
    for ((_, n, what), handles) in plan.iter().zip(tasks) {
        let mut g = Group { what: (*what).into(), asked: *n, ..Default::default() };
        let (mut after, mut hs) = (Vec::new(), Vec::new());
        for h in handles {
            match h.await? {
                Outcome::Failed(e) => *g.open_errors.entry(e).or_default() += 1,
                Outcome::Held { handshake_s, closed, bytes } => {
                    g.opened += 1;
                    g.bytes_received += bytes;
                    hs.extend(handshake_s);
                    match closed {
                        Some((t, how)) => {
                            *g.closed.entry(how).or_default() += 1;
                            after.push(t);
                        }
                        None => g.open_at_end += 1,
                    }
                }
            }
        }
        g.closed_after_s = spread(&mut after);
        g.closed_after_s_all = after.iter().map(|t| (t * 1000.0).round() / 1000.0).collect();
        g.handshake_s = spread(&mut hs);
        groups.push(g);
    }
    Ok(Silent { seconds: a.seconds, groups })
}

/// Open one connection of `kind` and wait, reading, until the server closes it or `until`.
async fn hold(ep: &Endpoint, kind: Kind, until: Instant) -> Outcome {
    let tcp = match ep.tcp().await {
        Ok(s) => s,
        Err(e) => return Outcome::Failed(super::net::short(&e)),
    };
    let opened = Instant::now();
    if ep.tls.is_none() || matches!(kind, Kind::NoTls) {
        let mut tcp = tcp;
        if matches!(kind, Kind::PartialPreface) {
            if let Err(e) = tcp.write_all(PARTIAL_PREFACE).await {
                return Outcome::Failed(format!("writing the preface: {:?}", e.kind()));
            }
        }
        let (closed, bytes) = read_to_close(&mut tcp, opened, until, false).await;
        return Outcome::Held { handshake_s: None, closed, bytes };
    }
    let alpn: &[&[u8]] = match kind {
        Kind::PartialPreface => &[b"h2"],
        _ => &[b"h2", b"http/1.1"],
    };
    let mut tls = match ep.tls_over(tcp, alpn).await {
        Ok(s) => s,
        Err(e) => return Outcome::Failed(super::net::short(&e)),
    };
    let handshake_s = Some(opened.elapsed().as_secs_f64());
    if matches!(kind, Kind::PartialPreface) {
        if let Err(e) = async {
            tls.write_all(PARTIAL_PREFACE).await?;
            tls.flush().await
        }
        .await
        {
            return Outcome::Failed(format!("writing the preface: {:?}", e.kind()));
        }
    }
    let (closed, bytes) = read_to_close(&mut tls, opened, until, true).await;
    Outcome::Held { handshake_s, closed, bytes }
}

/// Read (and discard) until the server closes the connection or `until`: when it closed
/// (seconds since `opened`) and how, and the bytes it sent.
async fn read_to_close<S: AsyncRead + Unpin>(s: &mut S, opened: Instant, until: Instant, tls: bool) -> (Option<(f64, String)>, u64) {
    let mut buf = vec![0u8; 16 * 1024];
    let mut bytes = 0u64;
    loop {
        match tokio::time::timeout_at(until.into(), s.read(&mut buf)).await {
            Err(_) => return (None, bytes),
            Ok(Ok(0)) => {
                let how = if tls { "TLS close_notify" } else { "EOF" };
                return (Some((opened.elapsed().as_secs_f64(), how.into())), bytes);
            }
            Ok(Ok(n)) => bytes += n as u64,
            Ok(Err(e)) => {
                let how = match e.kind() {
                    std::io::ErrorKind::ConnectionReset => "RST".to_string(),
                    std::io::ErrorKind::UnexpectedEof if tls => "EOF (no close_notify)".to_string(),
                    k => format!("{k:?}: {e}").chars().take(100).collect(),
                };
                return (Some((opened.elapsed().as_secs_f64(), how)), bytes);
            }
        }
    }
}
