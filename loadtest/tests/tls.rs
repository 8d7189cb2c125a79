//! kache-loadtest against a TLS kache, as an operator runs it: a simulator that checks
//! tokens, kache in front of it serving TLS with the certificate it generates, and the
//! kubeconfig `kache serve --client-kubeconfig-out` writes (kache's address, its CA, the
//! upstream context's token). The binary is run with that kubeconfig and the simulator's;
//! its exit status follows the thresholds given.

use clap::Parser;
use kache::config::{Cli, Command};
use std::path::Path;
use std::process::Output;

const USERS: &str = "tokens:\n  admin-token: {username: admin, groups: [\"system:masters\"]}\n";

/// A scenario of every client path: the bare HTTP/1.1 client (TLS, ALPN http/1.1), hyper's
/// over HTTP/2 (ALPN h2), and a watch (hyper over HTTP/1.1).
const SCENARIO: &str = r#"
name = "tls-check"
version = 1
description = "LISTs and a watch over TLS (a test's scenario)."

[[phase]]
kind = "list"
label = "tls"
query = "node"
read = "rv0"
encoding = "protobuf"
concurrency = [2]
seconds = 1
max_requests = 200

[[phase]]
kind = "list"
label = "tls h2"
query = "all"
read = "rv0"
encoding = "json"
protocol = "http2"
concurrency = [1]
seconds = 1
max_requests = 20

[[phase]]
kind = "informers"
clients = 1
encoding = "json"
watch_seconds = 1
"#;

struct Running {
    dir: tempfile::TempDir,
    _stop: Vec<tokio::sync::oneshot::Sender<()>>,
}

/// The simulator (plain HTTP, tokens checked) and a TLS kache in front of it, in this
/// process; the kubeconfigs of both in `dir`.
async fn start() -> Running {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    std::fs::write(d.join("users.yaml"), USERS).unwrap();
    std::fs::write(d.join("rbac.yaml"), "rules: []\n").unwrap();
    let users = d.join("users.yaml").display().to_string();
    let rbac = d.join("rbac.yaml").display().to_string();
    let Command::Sim(sim) = Cli::try_parse_from([
        "kache",
        "sim",
        "--nodes",
        "4",
        "--pods",
        "40",
        "--namespaces",
        "2",
        "--lease-churn-per-sec",
        "0",
        "--users-file",
        &users,
        "--rbac-file",
        &rbac,
    ])
    .unwrap()
    .command
    else {
        unreachable!()
    };
    let (stop_sim, stopped) = tokio::sync::oneshot::channel::<()>();
    let running = kache::sim::launch::start_sim_with("127.0.0.1:0", None, &sim.cluster, &sim.auth, async move {
        let _ = stopped.await;
    })
    .await
    .expect("simulator starts");
    let upstream = d.join("sim.kubeconfig");
    std::fs::write(
        &upstream,
        format!(
            "apiVersion: v1\nkind: Config\nclusters:\n- name: sim\n  cluster: {{server: '{}'}}\ncontexts:\n- name: admin\n  context: {{cluster: sim, user: admin}}\ncurrent-context: admin\nusers:\n- name: admin\n  user: {{token: admin-token}}\n",
            running.url
        ),
    )
    .unwrap();

    let out = d.join("kache.kubeconfig");
    let (u, o) = (upstream.display().to_string(), out.display().to_string());
    let Command::Serve(serve) = Cli::try_parse_from([
        "kache",
        "serve",
        "--listen",
        "127.0.0.1:0",
        "--upstream-kubeconfig",
        &u,
        "--client-kubeconfig-out",
        &o,
        "--preload",
        "pods,nodes",
    ])
    .unwrap()
    .command
    else {
        unreachable!()
    };
    let upstream_client = kache::upstream::Upstream::load(Some(&upstream), None).await.expect("upstream kubeconfig");
    let (stop_kache, stopped) = tokio::sync::oneshot::channel::<()>();
    let serving = kache::app::start_serve_args(upstream_client, &serve, async move {
        let _ = stopped.await;
    })
    .await
    .expect("kache starts");
    assert!(serving.url.starts_with("https://"), "{}", serving.url);
    Running { dir, _stop: vec![stop_sim, stop_kache] }
}

/// Run the binary with `args` (after `run SCENARIO` and the two kubeconfigs).
async fn loadtest(dir: &Path, args: &[&str]) -> Output {
    std::fs::write(dir.join("tls-check.toml"), SCENARIO).unwrap();
    let mut cmd = std::process::Command::new(env!("CARGO_BIN_EXE_kache-loadtest"));
    cmd.arg("run")
        .arg(dir.join("tls-check.toml"))
        .arg("--direct-kubeconfig")
        .arg(dir.join("sim.kubeconfig"))
        .arg("--kache-kubeconfig")
        .arg(dir.join("kache.kubeconfig"))
        .arg("--out")
        .arg(dir.join("results"))
        .arg("--work-dir")
        .arg(dir.join("work"))
        .args(args)
        .env_remove("KUBECONFIG");
    tokio::task::spawn_blocking(move || cmd.output().expect("kache-loadtest runs")).await.unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tls_kache_is_measured_through_its_client_kubeconfig_and_thresholds_set_the_exit_status() {
    let r = start().await;
    let d = r.dir.path();
    let kubeconfig = std::fs::read_to_string(d.join("kache.kubeconfig")).unwrap();
    assert!(kubeconfig.contains("https://127.0.0.1:") && kubeconfig.contains("admin-token"), "{kubeconfig}");

    // Thresholds every run that works meets.
    let out = loadtest(
        d,
        &["--max-error-rate", "0", "--min-rps", "0.001", "--max-p99", "60s", "--check-target", "kache", "--check-target", "direct"],
    )
    .await;
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    let report: serde_json::Value = serde_json::from_slice(&std::fs::read(d.join("results/tls-check-v1.json")).unwrap()).unwrap();
    let results = report["results"].as_array().unwrap();
    for target in ["kache", "direct"] {
        let ours: Vec<&serde_json::Value> = results.iter().filter(|r| r["target"] == target).collect();
        assert_eq!(ours.len(), 3, "{target}: {ours:?}");
        for r in &ours {
            assert!(r["requests"].as_u64() > Some(0) && r["errors"] == 0, "{target}: {r}");
        }
        let watch = ours.iter().find(|r| r["kind"] == "informers").unwrap();
        assert_eq!(watch["watches_opened"], 1, "{watch}");
    }
    let checks = report["checks"].as_array().unwrap();
    // Three bounds on two LIST phases and an error rate on all three, for each target.
    assert_eq!(checks.len(), 2 * (2 + 2 + 3), "{checks:?}");
    assert!(checks.iter().all(|c| c["met"] == true), "{checks:?}");
    assert!(std::fs::read_to_string(d.join("results/tls-check-v1.md")).unwrap().contains("## Thresholds: all met"));

    // A bound no run can meet: exit status 3, naming each phase that failed it.
    let out = loadtest(d, &["--min-rps", "1e12", "--only", "kache"]).await;
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(3), "{stderr}");
    let failed: Vec<&str> = stderr.lines().filter(|l| l.contains("threshold failed:")).collect();
    assert_eq!(failed.len(), 2, "{stderr}");
    assert!(failed.iter().all(|l| l.contains("[kache]") && l.contains("req/s >= 1000000000000")), "{failed:?}");

    // A kubeconfig whose credentials kache refuses: every request fails (401), and so does
    // the error-rate bound.
    std::fs::write(d.join("kache.kubeconfig"), kubeconfig.replace("admin-token", "wrong-token")).unwrap();
    let out = loadtest(d, &["--only", "kache", "--max-error-rate", "0"]).await;
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(3), "{stderr}");
    let report = std::fs::read_to_string(d.join("results/tls-check-v1.json")).unwrap();
    assert!(report.contains("status 401"), "{report}");
    assert_eq!(stderr.lines().filter(|l| l.contains("threshold failed:") && l.contains("error rate <= 0")).count(), 3, "{stderr}");
}
