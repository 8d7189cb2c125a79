//! The endpoints under test: read from kubeconfigs, or started here (`kache sim` as the
//! upstream and `kache serve` in front of it) and stopped when the run ends.

use crate::scenario::{Cluster, KacheSettings};
use anyhow::{bail, Context};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

pub use crate::endpoint::Target;

/// The processes measured (RSS and CPU) and where kache's metrics are.
#[derive(Debug, Clone, Default)]
pub struct Observed {
    pub kache_pid: Option<u32>,
    pub upstream_pid: Option<u32>,
    pub kache_admin: Option<String>,
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
    let launcher = Launcher { kache_bin, dir, log, server_cpu };
    let mut started = Started { children: Vec::new() };
    let sim = launcher.sim(&mut started, cluster)?;
    let upstream_kc = dir.join("upstream.kubeconfig");
    std::fs::write(&upstream_kc, kubeconfig(&format!("http://{sim}"), "sim"))?;
    let (kache_addr, admin_addr) = launcher.kache(&mut started, kache, &upstream_kc)?;
    wait_ready(&admin_addr, Duration::from_secs(600)).await?;
    std::fs::write(dir.join("kache.kubeconfig"), kubeconfig(&format!("http://{kache_addr}"), "kache"))?;
    let observed = Observed {
        upstream_pid: Some(started.children[0].1.id()),
        kache_pid: Some(started.children[1].1.id()),
        kache_admin: Some(admin_addr),
    };
    let targets = vec![Target::plain("direct", &sim), Target::plain("kache", &kache_addr)];
    Ok((targets, observed, started))
}

/// Starts the servers: the kache binary, on `server_cpu` if given, writing its addresses
/// into `dir` and its output to `log`.
struct Launcher<'a> {
    kache_bin: &'a Path,
    dir: &'a Path,
    log: &'a Path,
    server_cpu: Option<&'a str>,
}

impl Launcher<'_> {
    /// `kache sim` serving `cluster`; its address.
    fn sim(&self, started: &mut Started, cluster: &Cluster) -> anyhow::Result<String> {
        let sim_addr = self.dir.join("sim.addr");
        let _ = std::fs::remove_file(&sim_addr);
        let mut cmd = on_cpu(self.kache_bin, self.server_cpu);
        cmd.args(["sim", "--listen", "127.0.0.1:0", "--log-level", "warn"])
            .arg("--addr-file")
            .arg(&sim_addr)
            .args(["--nodes", &cluster.nodes.to_string(), "--pods", &cluster.pods.to_string()])
            .args(["--namespaces", &cluster.namespaces.to_string(), "--seed", &cluster.seed.to_string()])
            .args(["--churn-per-sec", &cluster.churn_per_sec.to_string()])
            .args(["--window-events", &cluster.window_events.to_string()])
            .args(["--bookmark-interval", &cluster.bookmark_interval_seconds.to_string()]);
        if let Some(b) = cluster.pod_bytes {
            cmd.args(["--pod-size", &b.to_string()]);
        }
        let child = self.spawn(started, "sim", cmd, "kache sim")?;
        wait_file(&sim_addr, child, "kache sim", Duration::from_secs(600))
    }

    /// `kache serve` in front of the upstream `upstream_kc` names; its address and its
    /// admin address.
    fn kache(&self, started: &mut Started, kache: &KacheSettings, upstream_kc: &Path) -> anyhow::Result<(String, String)> {
        let (addr, admin) = (self.dir.join("kache.addr"), self.dir.join("kache-admin.addr"));
        let _ = std::fs::remove_file(&addr);
        let _ = std::fs::remove_file(&admin);
        let mut cmd = on_cpu(self.kache_bin, self.server_cpu);
        if kache.anonymous && supports(self.kache_bin, "--allow-anonymous") {
            // The harness's clients carry no credentials, as against the open simulator.
            cmd.arg("serve").arg("--allow-anonymous");
        } else {
            cmd.arg("serve");
        }
        cmd.args(["--insecure-http", "--listen", "127.0.0.1:0", "--admin-listen", "127.0.0.1:0", "--log-level", "warn"])
            .arg("--upstream-kubeconfig")
            .arg(upstream_kc)
            .arg("--addr-file")
            .arg(&addr)
            .arg("--admin-addr-file")
            .arg(&admin)
            .args(["--preload", &kache.preload, "--preload-encodings", &kache.preload_encodings])
            .args(&kache.extra_args);
        let child = self.spawn(started, "kache", cmd, "kache serve")?;
        let kache_addr = wait_file(&addr, child, "kache serve", Duration::from_secs(600))?;
        let admin_addr = wait_file(&admin, child, "kache admin", Duration::from_secs(60))?;
        Ok((kache_addr, admin_addr))
    }

    /// Spawn `cmd` (`what`, for messages) as `role`, its output appended to the log; the
    /// child, kept in `started`.
    fn spawn<'s>(&self, started: &'s mut Started, role: &str, mut cmd: Command, what: &str) -> anyhow::Result<&'s mut Child> {
        eprintln!("starting: {cmd:?}");
        let child = cmd.stdout(self.log_file()?).stderr(self.log_file()?).spawn().with_context(|| format!("starting {what}"))?;
        started.children.push((role.into(), child));
        Ok(&mut started.children.last_mut().expect("just pushed").1)
    }

    fn log_file(&self) -> anyhow::Result<Stdio> {
        Ok(std::fs::OpenOptions::new().create(true).append(true).open(self.log)?.into())
    }
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
    let admin = Target::plain("admin", admin);
    let client = crate::client::Http::new(&admin, crate::scenario::Protocol::Http1);
    while start.elapsed() < limit {
        if let Ok(r) = client.get_full("/readyz", "text/plain").await {
            if r.status == 200 {
                eprintln!("kache ready after {:.1}s", start.elapsed().as_secs_f64());
                return Ok(());
            }
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    bail!("kache not ready within {limit:?}")
}
