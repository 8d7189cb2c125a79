//! The reference limits kache is held to, measured in the same run on the same machine:
//! (a) bytes/s of a plain loopback TCP socket carrying a payload the size of a full LIST,
//! (b) requests/s of a trivial hyper server returning a static body the size of a
//! `spec.nodeName` LIST, driven by the same client loop as the LIST phases.

use super::{lists, Ctx};
use crate::client::{Http, PROTOBUF};
use crate::env::Target;
use crate::progress::Bar;
use crate::scenario::{Protocol, Sample};
use crate::stats::{Counters, Hist, PhaseResult};
use anyhow::{bail, Context};
use bytes::Bytes;
use http_body_util::Full;
use std::io::{Read, Write};
use std::sync::atomic::Ordering::Relaxed;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// The size of `sample`, read from the upstream.
pub async fn sample_bytes(ctx: &Ctx, sample: Sample) -> anyhow::Result<u64> {
    let path = match sample {
        Sample::FullListProtobuf => lists::path(ctx, crate::scenario::Query::All, crate::scenario::ReadMode::Rv0, 0),
        Sample::NodeListProtobuf => lists::path(ctx, crate::scenario::Query::Node, crate::scenario::ReadMode::Rv0, 7),
    };
    let http = Http::new(&ctx.upstream, Protocol::Http1);
    let d = http.get_drain(&path, PROTOBUF, 0).await?;
    Ok(d.bytes)
}

/// (a) Stream `sample`-sized transfers over one loopback TCP connection.
pub async fn loopback(ctx: &Ctx, sample: Sample, seconds: f64, max_transfers: u64) -> anyhow::Result<PhaseResult> {
    let size = sample_bytes(ctx, sample).await?;
    let counters = Arc::new(Counters::default());
    let hist = Arc::new(Hist::default());
    let bar = Bar::start(&format!("loopback TCP {size} B transfers"), seconds, counters.clone());
    let (c2, h2) = (counters.clone(), hist.clone());
    let elapsed = tokio::task::spawn_blocking(move || -> anyhow::Result<Duration> {
        let listener = std::net::TcpListener::bind("127.0.0.1:0")?;
        let addr = listener.local_addr()?;
        let receiver = std::thread::spawn(move || -> std::io::Result<u64> {
            let (mut s, _) = listener.accept()?;
            let mut buf = vec![0u8; 1 << 20];
            let mut n = 0u64;
            loop {
                match s.read(&mut buf)? {
                    0 => return Ok(n),
                    k => n += k as u64,
                }
            }
        });
        let payload = vec![0x5au8; size as usize];
        let mut s = std::net::TcpStream::connect(addr)?;
        s.set_nodelay(true)?;
        let start = Instant::now();
        let deadline = start + Duration::from_secs_f64(seconds);
        for _ in 0..max_transfers {
            if Instant::now() >= deadline {
                break;
            }
            let t0 = Instant::now();
            s.write_all(&payload)?;
            h2.record(t0.elapsed());
            c2.requests.fetch_add(1, Relaxed);
            c2.bytes.fetch_add(size, Relaxed);
        }
        drop(s);
        let got = receiver.join().map_err(|_| anyhow::anyhow!("receiver panicked"))??;
        let elapsed = start.elapsed();
        anyhow::ensure!(got == c2.bytes.load(Relaxed), "receiver got {got} bytes");
        Ok(elapsed)
    })
    .await??;
    drop(bar);
    let mut r = PhaseResult::new(format!("reference: loopback TCP, {size} B per transfer"), "reference", 1);
    r.counted(&counters, elapsed);
    r.latency = hist.percentiles();
    r.extra.insert("sample_bytes".into(), size as f64);
    Ok(r)
}

/// (b) Drive a trivial hyper server (this binary, `trivial-server`) at `concurrency`.
pub async fn trivial(
    ctx: &Ctx,
    sample: Sample,
    concurrency: usize,
    seconds: f64,
    max_requests: u64,
    protocol: Protocol,
) -> anyhow::Result<PhaseResult> {
    let size = sample_bytes(ctx, sample).await?;
    let addr_file = ctx.work_dir.join("trivial.addr");
    let _ = std::fs::remove_file(&addr_file);
    let mut child = crate::env::on_cpu(&ctx.self_exe, ctx.server_cpu)
        .args(["trivial-server", "--body-bytes", &size.to_string(), "--addr-file"])
        .arg(&addr_file)
        .stdout(std::process::Stdio::null())
        .spawn()
        .context("starting the trivial server")?;
    let start = Instant::now();
    let authority = loop {
        if let Ok(s) = std::fs::read_to_string(&addr_file) {
            if !s.trim().is_empty() {
                break s.trim().to_string();
            }
        }
        if start.elapsed() > Duration::from_secs(30) {
            let _ = child.kill();
            bail!("trivial server did not start");
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    let target = Target::plain("reference", &authority);
    let mut procs = ctx.procs();
    procs.push(("trivial-server".into(), child.id()));
    let label = format!("trivial hyper server {size} B c={concurrency}");
    let r = lists::closed_loop(procs, &target, &label, &["/".to_string()], PROTOBUF, concurrency, seconds, max_requests, protocol).await;
    let _ = child.kill();
    let _ = child.wait();
    let mut r = r?;
    r.workload = format!("reference: trivial hyper server, {size} B static body");
    r.extra.insert("sample_bytes".into(), size as f64);
    Ok(r)
}

/// The `trivial-server` subcommand: answer every request with the same static body.
pub fn serve_trivial(body_bytes: usize, addr_file: &std::path::Path) -> anyhow::Result<()> {
    let rt = tokio::runtime::Builder::new_multi_thread().enable_all().build()?;
    rt.block_on(async move {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
        let tmp = addr_file.with_extension("tmp");
        std::fs::write(&tmp, listener.local_addr()?.to_string())?;
        std::fs::rename(&tmp, addr_file)?;
        let body = Bytes::from(vec![0x5au8; body_bytes]);
        let builder = hyper_util::server::conn::auto::Builder::new(hyper_util::rt::TokioExecutor::new());
        // Bounded: the parent kills this process when its phase ends; exit after an hour regardless.
        let until = tokio::time::sleep(Duration::from_secs(3600));
        tokio::pin!(until);
        loop {
            let (stream, _) = tokio::select! {
                a = listener.accept() => a?,
                _ = &mut until => return Ok(()),
            };
            let _ = stream.set_nodelay(true);
            let body = body.clone();
            let svc = hyper::service::service_fn(move |_req| {
                let body = body.clone();
                async move { http::Response::builder().header(http::header::CONTENT_TYPE, PROTOBUF).body(Full::new(body)) }
            });
            let conn = builder.serve_connection(hyper_util::rt::TokioIo::new(stream), svc).into_owned();
            tokio::spawn(async move {
                let _ = conn.await;
            });
        }
    })
}
