//! The simulator against the official Python `kubernetes` client: `tests/python/sim_client.py`
//! lists (all namespaces, per namespace, with a field selector and a limit), patches a pod and
//! watches from the list's resourceVersion; it asserts and exits non-zero on failure.

use crate::support::*;
use std::process::Command;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn python_kubernetes_client_lists_and_watches() {
    let probe = tokio::task::spawn_blocking(|| Command::new("python3").args(["-c", "import kubernetes"]).output()).await.unwrap();
    match probe {
        Ok(out) if out.status.success() => {}
        Ok(out) => panic!(
            "the Python kubernetes client is not installed (`import kubernetes` failed): run `pip install kubernetes`\n{}",
            String::from_utf8_lossy(&out.stderr)
        ),
        Err(e) => panic!("python3 is not available ({e}); install Python 3 and `pip install kubernetes`"),
    }
    let (pods, nodes) = (600, 20);
    let s = start(&cluster(&["--nodes", &nodes.to_string(), "--pods", &pods.to_string()])).await;
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/python/sim_client.py");
    let server = s.base.clone();
    let out = tokio::task::spawn_blocking(move || {
        Command::new("python3").arg(script).arg(&server).arg(pods.to_string()).arg(nodes.to_string()).output()
    })
    .await
    .unwrap()
    .expect("run python3");
    println!("{}", String::from_utf8_lossy(&out.stdout));
    eprintln!("{}", String::from_utf8_lossy(&out.stderr));
    assert!(out.status.success(), "sim_client.py failed ({}):\n{}", out.status, String::from_utf8_lossy(&out.stderr));
    assert!(String::from_utf8_lossy(&out.stdout).contains("all checks passed"));
}
