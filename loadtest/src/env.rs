//! The endpoints under test: read from kubeconfigs, or started here (`kache sim` as the
//! upstream and `kache serve` in front of it) and stopped when the run ends.

use crate::scenario::{Cluster, KacheSettings};
use anyhow::{bail, Context};
use serde::Deserialize;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// One endpoint clients talk to.
#[derive(Debug, Clone)]
pub struct Target {
    /// `direct` (the upstream) or `kache`.
    pub name: String,
    /// `host:port` on loopback.
    pub authority: String,
    /// Bearer token from the kubeconfig, if any.
    pub token: Option<String>,
}

/// The processes measured (RSS and CPU) and where kache's metrics are.
#[derive(Debug, Clone, Default)]
pub struct Observed {
    pub kache_pid: Option<u32>,
    pub upstream_pid: Option<u32>,
    pub kache_admin: Option<String>,
}

#[derive(Deserialize)]
struct Kubeconfig {
    #[serde(rename = "current-context", default)]
    current_context: String,
    #[serde(default)]
    clusters: Vec<Named<ClusterEntry>>,
    #[serde(default)]
    contexts: Vec<Named<ContextEntry>>,
    #[serde(default)]
    users: Vec<Named<UserEntry>>,
}
#[derive(Deserialize)]
struct Named<T> {
    name: String,
    #[serde(alias = "cluster", alias = "context", alias = "user")]
    value: T,
}
#[derive(Deserialize)]
struct ClusterEntry {
    server: String,
}
#[derive(Deserialize)]
struct ContextEntry {
    cluster: String,
    #[serde(default)]
    user: String,
}
#[derive(Deserialize, Default)]
struct UserEntry {
    #[serde(default)]
    token: Option<String>,
}

/// The endpoint of a kubeconfig's current context; plain HTTP on loopback only.
pub fn target_from_kubeconfig(name: &str, path: &Path) -> anyhow::Result<Target> {
    let text = std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
    let kc: Kubeconfig = serde_saphyr::from_str(&text).with_context(|| format!("parsing {}", path.display()))?;
    let ctx = kc.contexts.iter().find(|c| c.name == kc.current_context).or(kc.contexts.first()).context("kubeconfig has no context")?;
    let cluster = kc.clusters.iter().find(|c| c.name == ctx.value.cluster).context("context names no known cluster")?;
    let token = kc.users.iter().find(|u| u.name == ctx.value.user).and_then(|u| u.value.token.clone());
    let server = cluster.value.server.trim_end_matches('/');
    let Some(authority) = server.strip_prefix("http://") else {
        bail!("{}: server {server} is not plain http:// (the harness targets loopback only)", path.display());
    };
    let addr: std::net::SocketAddr = authority.parse().with_context(|| format!("server {server} is not an IP:port"))?;
    if !addr.ip().is_loopback() {
        bail!("server {server} is not a loopback address");
    }
    Ok(Target { name: name.into(), authority: authority.into(), token })
}

/// Processes started for a self-contained run; killed on drop.
pub struct Started {
    children: Vec<(String, Child)>,
}

impl Drop for Started {
    fn drop(&mut self) {
        for (_, child) in self.children.iter_mut().rev() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

fn wait_file(path: &Path, child: &mut Child, what: &str, limit: Duration) -> anyhow::Result<String> {
    let start = Instant::now();
    while start.elapsed() < limit {
        if let Ok(s) = std::fs::read_to_string(path) {
            if !s.trim().is_empty() {
                return Ok(s.trim().to_string());
            }
        }
        if let Some(status) = child.try_wait()? {
            bail!("{what} exited early: {status}");
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    bail!("{what} did not write {} within {limit:?}", path.display())
}

/// Start `kache sim` and `kache serve` in front of it; return the two targets once kache's
/// preloaded caches have synced.
pub async fn start(
    kache_bin: &Path,
    cluster: &Cluster,
    kache: &KacheSettings,
    dir: &Path,
    log: &Path,
    server_cpu: Option<&str>,
) -> anyhow::Result<(Vec<Target>, Observed, Started)> {
    std::fs::create_dir_all(dir)?;
    if !kache_bin.exists() {
        bail!("{} not found: build it with `cargo build --release` or pass --kache-bin", kache_bin.display());
    }
    let mut started = Started { children: Vec::new() };
    let logf = || -> anyhow::Result<Stdio> { Ok(std::fs::OpenOptions::new().create(true).append(true).open(log)?.into()) };
    let sim_addr = dir.join("sim.addr");
    let _ = std::fs::remove_file(&sim_addr);
    let mut cmd = on_cpu(kache_bin, server_cpu);
    cmd.args(["sim", "--listen", "127.0.0.1:0", "--log-level", "warn"])
        .arg("--addr-file")
        .arg(&sim_addr)
        .args(["--nodes", &cluster.nodes.to_string(), "--pods", &cluster.pods.to_string()])
        .args(["--namespaces", &cluster.namespaces.to_string(), "--seed", &cluster.seed.to_string()])
        .args(["--churn-per-sec", &cluster.churn_per_sec.to_string()])
        .args(["--window-events", &cluster.window_events.to_string()])
        .args(["--bookmark-interval-seconds", &cluster.bookmark_interval_seconds.to_string()]);
    if let Some(b) = cluster.pod_bytes {
        cmd.args(["--pod-bytes", &b.to_string()]);
    }
    eprintln!("starting: {cmd:?}");
    let child = cmd.stdout(logf()?).stderr(logf()?).spawn().context("starting kache sim")?;
    started.children.push(("sim".into(), child));
    let sim = wait_file(&sim_addr, &mut started.children[0].1, "kache sim", Duration::from_secs(600))?;
    let upstream_kc = dir.join("upstream.kubeconfig");
    std::fs::write(&upstream_kc, kubeconfig(&format!("http://{sim}"), "sim"))?;

    let (addr, admin) = (dir.join("kache.addr"), dir.join("kache-admin.addr"));
    let _ = std::fs::remove_file(&addr);
    let _ = std::fs::remove_file(&admin);
    let mut cmd = on_cpu(kache_bin, server_cpu);
    if kache.anonymous && supports(kache_bin, "--allow-anonymous") {
        // The harness's clients carry no credentials, as against the open simulator.
        cmd.arg("serve").arg("--allow-anonymous");
    } else {
        cmd.arg("serve");
    }
    cmd.args(["--insecure-http", "--listen", "127.0.0.1:0", "--admin-listen", "127.0.0.1:0", "--log-level", "warn"])
        .arg("--upstream-kubeconfig")
        .arg(&upstream_kc)
        .arg("--addr-file")
        .arg(&addr)
        .arg("--admin-addr-file")
        .arg(&admin)
        .args(["--preload", &kache.preload, "--preload-encodings", &kache.preload_encodings])
        .args(&kache.extra_args);
    eprintln!("starting: {cmd:?}");
    let child = cmd.stdout(logf()?).stderr(logf()?).spawn().context("starting kache serve")?;
    started.children.push(("kache".into(), child));
    let kache_addr = wait_file(&addr, &mut started.children[1].1, "kache serve", Duration::from_secs(600))?;
    let admin_addr = wait_file(&admin, &mut started.children[1].1, "kache admin", Duration::from_secs(60))?;
    wait_ready(&admin_addr, Duration::from_secs(600)).await?;
    std::fs::write(dir.join("kache.kubeconfig"), kubeconfig(&format!("http://{kache_addr}"), "kache"))?;
    let observed = Observed {
        upstream_pid: Some(started.children[0].1.id()),
        kache_pid: Some(started.children[1].1.id()),
        kache_admin: Some(admin_addr),
    };
    let targets = vec![
        Target { name: "direct".into(), authority: sim, token: None },
        Target { name: "kache".into(), authority: kache_addr, token: None },
    ];
    Ok((targets, observed, started))
}

/// A command running `program`, on `cpu` only (through `taskset`, which keeps the PID) when
/// given.
pub fn on_cpu(program: &Path, cpu: Option<&str>) -> Command {
    match cpu {
        Some(cpu) => {
            let mut cmd = Command::new("taskset");
            cmd.args(["-c", cpu]).arg(program);
            cmd
        }
        None => Command::new(program),
    }
}

/// Whether `kache serve --help` lists `flag`.
fn supports(kache_bin: &Path, flag: &str) -> bool {
    Command::new(kache_bin).args(["serve", "--help"]).output().map(|o| String::from_utf8_lossy(&o.stdout).contains(flag)).unwrap_or(false)
}

/// A kubeconfig for a plain-HTTP server (the same shape as `kache::app::kubeconfig`).
pub fn kubeconfig(server: &str, name: &str) -> String {
    format!(
        "apiVersion: v1\nkind: Config\nclusters:\n- name: {name}\n  cluster:\n    server: {server}\ncontexts:\n- name: {name}\n  context:\n    cluster: {name}\n    user: {name}\ncurrent-context: {name}\nusers:\n- name: {name}\n  user: {{}}\n"
    )
}

/// Poll kache's `/readyz` until it answers 200.
pub async fn wait_ready(admin: &str, limit: Duration) -> anyhow::Result<()> {
    let start = Instant::now();
    let client = crate::client::Http::new(crate::scenario::Protocol::Http1);
    while start.elapsed() < limit {
        if let Ok(r) = client.get_full(admin, "/readyz", "text/plain", None).await {
            if r.status == 200 {
                eprintln!("kache ready after {:.1}s", start.elapsed().as_secs_f64());
                return Ok(());
            }
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    bail!("kache not ready within {limit:?}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_kubeconfigs_current_context_names_the_target() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("config");
        let yaml = "apiVersion: v1\nkind: Config\ncurrent-context: b\nclusters:\n- name: one\n  cluster: {server: 'http://127.0.0.1:1/'}\n- name: two\n  cluster:\n    server: http://127.0.0.1:6444\n    insecure-skip-tls-verify: true\ncontexts:\n- name: a\n  context: {cluster: one}\n- name: b\n  context: {cluster: two, user: u}\nusers:\n- name: u\n  user: {token: secret}\n";
        std::fs::write(&path, yaml).unwrap();
        let t = target_from_kubeconfig("kache", &path).unwrap();
        assert_eq!((t.authority.as_str(), t.token.as_deref()), ("127.0.0.1:6444", Some("secret")));
        // kache writes its kubeconfigs as JSON, which is YAML too.
        let json = r#"{"clusters":[{"name":"c","cluster":{"server":"http://127.0.0.1:7"}}],"contexts":[{"name":"x","context":{"cluster":"c"}}],"current-context":"x"}"#;
        std::fs::write(&path, json).unwrap();
        let t = target_from_kubeconfig("direct", &path).unwrap();
        assert_eq!((t.authority.as_str(), t.token), ("127.0.0.1:7", None));
        std::fs::write(&path, "clusters: [").unwrap();
        assert!(target_from_kubeconfig("direct", &path).is_err());
    }
}
