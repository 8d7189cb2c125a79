//! `kache-loadtest tenant`: a hostile-tenant probe of any Kubernetes API endpoint on this
//! machine (the apiserver itself, kache in front of it), measuring what honest clients see
//! while a tenant attacks, with the same figures for every endpoint so they read side by side.
//! Every attack is bounded in count and in time; every figure is measured here.
//!
//! Modules: `net` (endpoints, TLS, zero-window HTTP/2 streams and their records), `honest`
//! (the clients beside an attack), one module per attack (`zero_window`, `held`, `silent`,
//! `selector`), `table` (the human report).

mod held;
mod honest;
mod net;
mod selector;
mod silent;
mod table;
mod zero_window;

use crate::client::{Http, JSON};
use crate::scenario::Protocol;
use anyhow::{bail, Context};
use net::{Endpoint, TlsChoice};
use serde::Serialize;
use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

/// The attacks, in the order they run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, clap::ValueEnum, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Attack {
    ZeroWindow,
    HeldReads,
    Silent,
    Selector,
}

/// The honest clients' HTTP version.
#[derive(Debug, Clone, Copy, clap::ValueEnum, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum HonestProtocol {
    Http1,
    Http2,
}

/// What `held-reads` holds.
#[derive(Debug, Clone, Copy, clap::ValueEnum, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Read {
    /// `GET` of one pod at resourceVersion=0.
    Get,
    /// `LIST` of that pod's namespace at resourceVersion=0 (limit=10 for the control read).
    List,
}

/// `kache-loadtest tenant`.
#[derive(clap::Args, Debug, Serialize)]
pub struct TenantArgs {
    /// An endpoint to measure, `NAME=URL` (`direct=https://127.0.0.1:6443`); repeat it to
    /// measure several, one after the other, side by side in the report. Loopback only.
    #[arg(long = "target", required = true)]
    pub targets: Vec<String>,
    /// Do not verify the servers' certificates (kubeconfig's `insecure-skip-tls-verify`).
    #[arg(long)]
    pub insecure: bool,
    /// PEM CA bundle the servers' certificates are verified against.
    #[arg(long, conflicts_with = "insecure")]
    pub ca_file: Option<PathBuf>,
    /// Bearer token of the honest clients (none: anonymous). It must read pods and write
    /// ConfigMaps in --write-namespace.
    #[arg(long, conflicts_with = "token_file")]
    #[serde(skip)]
    pub token: Option<String>,
    /// File holding the honest clients' token.
    #[arg(long)]
    pub token_file: Option<PathBuf>,
    /// The tenant's token (default: the honest one).
    #[arg(long, conflicts_with = "tenant_token_file")]
    #[serde(skip)]
    pub tenant_token: Option<String>,
    /// File holding the tenant's token.
    #[arg(long)]
    pub tenant_token_file: Option<PathBuf>,
    /// The second token of `zero-window`, opening its streams each second (default: the
    /// tenant's).
    #[arg(long, conflicts_with = "second_token_file")]
    #[serde(skip)]
    pub second_token: Option<String>,
    /// File holding the second token.
    #[arg(long)]
    pub second_token_file: Option<PathBuf>,
    /// The tokens of `held-reads`, one a line (the first --held-tokens are used; default: the
    /// tenant's token, --held-tokens times).
    #[arg(long)]
    pub held_tokens_file: Option<PathBuf>,
    /// The attacks to run, in this order.
    #[arg(long, value_enum, value_delimiter = ',', default_value = "zero-window,held-reads,silent,selector")]
    pub attack: Vec<Attack>,
    /// Length of each attack, in seconds.
    #[arg(long, default_value_t = 45)]
    pub seconds: u64,
    /// Length of the quiet baselines of `held-reads` and `selector`, in seconds.
    #[arg(long, default_value_t = 10)]
    pub baseline_seconds: u64,
    /// Limit of each honest request, in seconds (a timeout counts as such).
    #[arg(long, default_value_t = 10)]
    pub request_timeout_seconds: u64,
    /// Between attacks and between endpoints, wait this long (a server tears down what the
    /// previous attack left; kache's upstream is the endpoint measured before it), then up
    /// to --settle-seconds for the honest GET to answer 200.
    #[arg(long, default_value_t = 10)]
    pub pause_seconds: u64,
    /// Before each attack, wait up to this long for the honest GET to answer 200 again.
    #[arg(long, default_value_t = 30)]
    pub settle_seconds: u64,
    /// HTTP version of the honest clients.
    #[arg(long, value_enum, default_value = "http2")]
    pub honest_protocol: HonestProtocol,
    /// The pod the reads name, `NAMESPACE/NAME` (default: the first pod a LIST returns).
    #[arg(long)]
    pub pod: Option<String>,
    /// `zero-window`: the tenant's watches at once.
    #[arg(long, default_value_t = 300)]
    pub watch_streams: usize,
    /// `zero-window` and `held-reads`: streams per tenant connection.
    #[arg(long, default_value_t = 100)]
    pub streams_per_connection: usize,
    /// `zero-window`: more watches each second, from the second token.
    #[arg(long, default_value_t = 10)]
    pub extra_streams_per_second: usize,
    /// `zero-window`: the namespace the tenant watches (empty: every namespace).
    #[arg(long, default_value = "")]
    pub watch_namespace: String,
    /// `zero-window`: ConfigMaps the honest writer creates or patches.
    #[arg(long, default_value_t = 10)]
    pub writes: usize,
    /// `zero-window`: time between writes, in milliseconds.
    #[arg(long, default_value_t = 1000)]
    pub write_interval_ms: u64,
    /// `zero-window`: the namespace written to and watched by the honest clients.
    #[arg(long, default_value = "default")]
    pub write_namespace: String,
    /// `zero-window`: the namespace of the honest WatchList (default: the pod's).
    #[arg(long)]
    pub watchlist_namespace: Option<String>,
    /// `held-reads`: tokens used.
    #[arg(long, default_value_t = 10)]
    pub held_tokens: usize,
    /// `held-reads`: held streams per token.
    #[arg(long, default_value_t = 400)]
    pub held_streams: usize,
    /// `held-reads`: the read held (and polled by the honest token).
    #[arg(long, value_enum, default_value = "get")]
    pub held_read: Read,
    /// `held-reads`: time between the honest reads, in milliseconds.
    #[arg(long, default_value_t = 100)]
    pub probe_interval_ms: u64,
    /// `silent`: TLS connections that complete the handshake and send nothing.
    #[arg(long, default_value_t = 100)]
    pub silent_tls: usize,
    /// `silent`: TLS connections that send 16 of the 24 bytes of the HTTP/2 preface.
    #[arg(long, default_value_t = 50)]
    pub silent_preface: usize,
    /// `silent`: TCP connections that never start TLS.
    #[arg(long, default_value_t = 50)]
    pub silent_tcp: usize,
    /// `selector`: concurrent LISTs.
    #[arg(long, default_value_t = 4)]
    pub selector_concurrency: usize,
    /// `selector`: `!=` terms in the label selector.
    #[arg(long, default_value_t = 1000)]
    pub selector_terms: usize,
    /// `selector`: the control client's read.
    #[arg(long, value_enum, default_value = "list")]
    pub control_read: Read,
    /// `selector`: time between the control client's reads, in milliseconds.
    #[arg(long, default_value_t = 50)]
    pub control_interval_ms: u64,
    /// Run the attacks at once rather than one after another: each with its own honest
    /// clients, which then see every attack together.
    #[arg(long)]
    pub together: bool,
    /// Write every figure to this JSON file.
    #[arg(long)]
    pub json: Option<PathBuf>,
}

/// The tokens, read once.
pub struct Tokens {
    honest: Option<String>,
    tenant: Option<String>,
    second: Option<String>,
    held: Vec<Option<String>>,
}

fn read_token(flag: &Option<String>, file: &Option<PathBuf>) -> anyhow::Result<Option<String>> {
    if let Some(t) = flag {
        return Ok(Some(t.trim().to_string()));
    }
    match file {
        Some(f) => {
            let t = std::fs::read_to_string(f).with_context(|| format!("reading {}", f.display()))?.trim().to_string();
            if t.is_empty() {
                bail!("{}: empty", f.display());
            }
            Ok(Some(t))
        }
        None => Ok(None),
    }
}

impl Tokens {
    fn read(a: &TenantArgs) -> anyhow::Result<Tokens> {
        let honest = read_token(&a.token, &a.token_file)?;
        let tenant = read_token(&a.tenant_token, &a.tenant_token_file)?.or_else(|| honest.clone());
        let second = read_token(&a.second_token, &a.second_token_file)?.or_else(|| tenant.clone());
        let held = match &a.held_tokens_file {
            Some(f) => {
                let text = std::fs::read_to_string(f).with_context(|| format!("reading {}", f.display()))?;
                let v: Vec<Option<String>> = text
                    .lines()
                    .map(str::trim)
                    .filter(|l| !l.is_empty() && !l.starts_with('#'))
                    .take(a.held_tokens)
                    .map(|l| Some(l.to_string()))
                    .collect();
                if v.is_empty() {
                    bail!("{}: no token", f.display());
                }
                v
            }
            None => vec![tenant.clone(); a.held_tokens],
        };
        Ok(Tokens { honest, tenant, second, held })
    }
}

/// What one attack needs to know about its endpoint.
pub struct Ctx<'a> {
    pub ep: &'a Endpoint,
    pub args: &'a TenantArgs,
    pub tokens: &'a Tokens,
    honest: crate::endpoint::Target,
    protocol: Protocol,
    /// The pod the reads name.
    pub pod: (String, String),
    /// Limit of each honest request.
    pub limit: Duration,
    /// Stamped into what the writer writes.
    pub run_id: String,
}

impl Ctx<'_> {
    /// A new honest client (its own connection).
    pub fn honest_client(&self) -> Http {
        Http::new(&self.honest, self.protocol)
    }

    /// The read `held-reads` holds and polls.
    pub fn held_request(&self) -> String {
        let (ns, name) = &self.pod;
        match self.args.held_read {
            Read::Get => format!("/api/v1/namespaces/{ns}/pods/{name}?resourceVersion=0"),
            Read::List => format!("/api/v1/namespaces/{ns}/pods?resourceVersion=0"),
        }
    }

    /// The control client's read during `selector`.
    pub fn control_request(&self) -> String {
        let (ns, name) = &self.pod;
        match self.args.control_read {
            Read::Get => format!("/api/v1/namespaces/{ns}/pods/{name}?resourceVersion=0"),
            Read::List => format!("/api/v1/namespaces/{ns}/pods?resourceVersion=0&limit=10"),
        }
    }

    pub fn watchlist_namespace(&self) -> &str {
        self.args.watchlist_namespace.as_deref().unwrap_or(&self.pod.0)
    }
}

/// Before an attack: how long until the honest GET answered 200.
#[derive(Debug, Clone, Serialize)]
pub struct Settle {
    pub waited_s: f64,
    /// Whether it did within --settle-seconds.
    pub ok: bool,
    pub last_status: String,
}

/// Everything measured against one endpoint.
#[derive(Debug, Clone, Serialize)]
pub struct TargetReport {
    pub name: String,
    pub url: String,
    /// The pod read, `namespace/name`.
    pub pod: String,
    pub settle: BTreeMap<String, Settle>,
    pub zero_window: Option<zero_window::ZeroWindow>,
    pub held_reads: Option<held::HeldReads>,
    pub silent: Option<silent::Silent>,
    pub selector: Option<selector::Selector>,
    /// Attacks that could not run, and why.
    pub failed: BTreeMap<String, String>,
}

impl TargetReport {
    fn new(ep: &Endpoint, pod: String, failed: BTreeMap<String, String>) -> TargetReport {
        TargetReport {
            name: ep.name.clone(),
            url: ep.url.clone(),
            pod,
            settle: BTreeMap::new(),
            zero_window: None,
            held_reads: None,
            silent: None,
            selector: None,
            failed,
        }
    }
}

/// The JSON report.
#[derive(Debug, Serialize)]
pub struct Report<'a> {
    pub started_unix: u64,
    pub command: String,
    pub settings: &'a TenantArgs,
    pub targets: Vec<TargetReport>,
}

/// `tenant`: every attack against every target, the table printed, the JSON written.
pub fn run(args: TenantArgs) -> anyhow::Result<()> {
    let tls = if args.insecure {
        TlsChoice::Insecure
    } else if let Some(ca) = &args.ca_file {
        TlsChoice::Ca(ca.clone())
    } else {
        TlsChoice::Unset
    };
    let endpoints = args.targets.iter().map(|t| Endpoint::parse(t, &tls)).collect::<anyhow::Result<Vec<_>>>()?;
    let tokens = Tokens::read(&args)?;
    let mut attacks = args.attack.clone();
    attacks.dedup();
    let started_unix = SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_secs()).unwrap_or(0);
    let rt = tokio::runtime::Builder::new_multi_thread().enable_all().build()?;
    let mut pod = match &args.pod {
        Some(p) => {
            let (ns, name) = p.split_once('/').context("--pod is NAMESPACE/NAME")?;
            Some((ns.to_string(), name.to_string()))
        }
        None => None,
    };
    let mut reports = Vec::new();
    for (i, ep) in endpoints.iter().enumerate() {
        eprintln!("== {} ({})", ep.name, ep.url);
        if i > 0 {
            // kache's upstream may be the endpoint just attacked: let it recover first.
            rt.block_on(async { tokio::time::sleep(Duration::from_secs(args.pause_seconds)).await });
        }
        let r = rt.block_on(probe(ep, &args, &tokens, &attacks, started_unix, &mut pod));
        reports.push(r.unwrap_or_else(|e| {
            eprintln!("   failed: {e:#}");
            TargetReport::new(ep, String::new(), BTreeMap::from([("setup".to_string(), format!("{e:#}"))]))
        }));
    }
    rt.shutdown_timeout(Duration::from_secs(2));
    println!("{}", table::render(&reports));
    let report = Report { started_unix, command: std::env::args().collect::<Vec<_>>().join(" "), settings: &args, targets: reports };
    if let Some(path) = &args.json {
        std::fs::write(path, serde_json::to_vec_pretty(&report)?).with_context(|| format!("writing {}", path.display()))?;
        eprintln!("wrote {}", path.display());
    }
    Ok(())
}

/// Every attack against one endpoint. The pod read is `pod`, else the first pod the
/// endpoint lists (kept in `pod`, so the next endpoints read the same object).
async fn probe(
    ep: &Endpoint,
    args: &TenantArgs,
    tokens: &Tokens,
    attacks: &[Attack],
    run: u64,
    pod: &mut Option<(String, String)>,
) -> anyhow::Result<TargetReport> {
    let honest = ep.target(tokens.honest.as_deref())?;
    let protocol = match args.honest_protocol {
        HonestProtocol::Http1 => Protocol::Http1,
        HonestProtocol::Http2 => Protocol::Http2,
    };
    let limit = Duration::from_secs(args.request_timeout_seconds);
    let pod = match pod {
        Some(p) => p.clone(),
        None => {
            let until = Instant::now() + Duration::from_secs(args.settle_seconds);
            let found = first_pod(&Http::new(&honest, protocol), limit, until)
                .await
                .with_context(|| format!("{}: finding a pod to read", ep.url))?;
            pod.insert(found).clone()
        }
    };
    eprintln!("reading pod {}/{}", pod.0, pod.1);
    let ctx = Ctx { ep, args, tokens, honest, protocol, pod, limit, run_id: run.to_string() };
    let mut r = TargetReport::new(ep, format!("{}/{}", ctx.pod.0, ctx.pod.1), BTreeMap::new());
    if args.together {
        together(&ctx, attacks, &mut r).await;
        return Ok(r);
    }
    for (i, &attack) in attacks.iter().enumerate() {
        let name = serde_json::to_value(attack)?.as_str().unwrap_or_default().to_string();
        if i > 0 {
            tokio::time::sleep(Duration::from_secs(args.pause_seconds)).await;
        }
        let s = settle(&ctx).await;
        eprintln!("-- {name} (settled in {:.1} s, ok {})", s.waited_s, s.ok);
        r.settle.insert(name.clone(), s);
        let t0 = Instant::now();
        let outcome = match attack {
            Attack::ZeroWindow => zero_window::run(&ctx).await.map(|f| r.zero_window = Some(f)),
            Attack::HeldReads => held::run(&ctx).await.map(|f| r.held_reads = Some(f)),
            Attack::Silent => silent::run(&ctx).await.map(|f| r.silent = Some(f)),
            Attack::Selector => selector::run(&ctx).await.map(|f| r.selector = Some(f)),
        };
        if let Err(e) = outcome {
            eprintln!("   failed: {e:#}");
            r.failed.insert(name, format!("{e:#}"));
        }
        eprintln!("   done in {:.1} s", t0.elapsed().as_secs_f64());
    }
    Ok(r)
}

/// Every attack at once (`--together`), each measured by its own honest clients.
async fn together(ctx: &Ctx<'_>, attacks: &[Attack], r: &mut TargetReport) {
    async fn when<T>(on: bool, f: impl std::future::Future<Output = anyhow::Result<T>>) -> Option<anyhow::Result<T>> {
        if on {
            Some(f.await)
        } else {
            None
        }
    }
    let s = settle(ctx).await;
    eprintln!("-- {attacks:?} together (settled in {:.1} s, ok {})", s.waited_s, s.ok);
    r.settle.insert("together".into(), s);
    let t0 = Instant::now();
    let on = |a: Attack| attacks.contains(&a);
    let (zw, held, silent, sel) = tokio::join!(
        when(on(Attack::ZeroWindow), zero_window::run(ctx)),
        when(on(Attack::HeldReads), held::run(ctx)),
        when(on(Attack::Silent), silent::run(ctx)),
        when(on(Attack::Selector), selector::run(ctx)),
    );
    let mut errors: Vec<(&str, anyhow::Error)> = Vec::new();
    match zw {
        Some(Ok(f)) => r.zero_window = Some(f),
        Some(Err(e)) => errors.push(("zero-window", e)),
        None => {}
    }
    match held {
        Some(Ok(f)) => r.held_reads = Some(f),
        Some(Err(e)) => errors.push(("held-reads", e)),
        None => {}
    }
    match silent {
        Some(Ok(f)) => r.silent = Some(f),
        Some(Err(e)) => errors.push(("silent", e)),
        None => {}
    }
    match sel {
        Some(Ok(f)) => r.selector = Some(f),
        Some(Err(e)) => errors.push(("selector", e)),
        None => {}
    }
    for (name, e) in errors {
        eprintln!("   {name} failed: {e:#}");
        r.failed.insert(name.into(), format!("{e:#}"));
    }
    eprintln!("   done in {:.1} s", t0.elapsed().as_secs_f64());
}

/// The namespace and name of the first pod a LIST returns, asked until `until` while the
/// endpoint does not answer 200 (it may still be recovering from the previous endpoint's
/// attacks).
async fn first_pod(http: &Http, limit: Duration, until: Instant) -> anyhow::Result<(String, String)> {
    loop {
        let w = match tokio::time::timeout(limit, http.get_full("/api/v1/pods?limit=1", JSON)).await {
            Ok(Ok(w)) if w.status == 200 => w,
            Ok(Ok(w)) if Instant::now() >= until => {
                bail!("LIST /api/v1/pods?limit=1: status {}: {}", w.status, String::from_utf8_lossy(&w.body[..w.body.len().min(200)]))
            }
            Ok(Err(e)) if Instant::now() >= until => return Err(e),
            Err(_) if Instant::now() >= until => bail!("LIST /api/v1/pods?limit=1: timed out"),
            _ => {
                tokio::time::sleep(Duration::from_millis(250)).await;
                continue;
            }
        };
        let v: serde_json::Value = serde_json::from_slice(&w.body)?;
        let md = &v["items"][0]["metadata"];
        return match (md["namespace"].as_str(), md["name"].as_str()) {
            (Some(ns), Some(name)) => Ok((ns.into(), name.into())),
            _ => bail!("the LIST returned no pod; name one with --pod"),
        };
    }
}

/// Poll the honest GET until it answers 200 (or --settle-seconds pass), so an attack does
/// not start while the previous one still weighs on the server.
async fn settle(ctx: &Ctx<'_>) -> Settle {
    let t0 = Instant::now();
    let until = t0 + Duration::from_secs(ctx.args.settle_seconds);
    let http = ctx.honest_client();
    let pq = format!("/api/v1/namespaces/{}/pods/{}?resourceVersion=0", ctx.pod.0, ctx.pod.1);
    let mut last = String::new();
    while Instant::now() < until {
        match tokio::time::timeout(ctx.limit, http.get_full(&pq, JSON)).await {
            Ok(Ok(w)) if w.status == 200 => return Settle { waited_s: t0.elapsed().as_secs_f64(), ok: true, last_status: "200".into() },
            Ok(Ok(w)) => last = w.status.to_string(),
            Ok(Err(e)) => last = format!("{e:#}"),
            Err(_) => last = "timeout".into(),
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    Settle { waited_s: t0.elapsed().as_secs_f64(), ok: false, last_status: last }
}
