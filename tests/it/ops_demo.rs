//! Operations: the `kache demo` binary.
//! - SIGINT with `--seconds 600` and watches open through it (one from kache's cache, one the
//!   upstream answers): both watches end cleanly and the process exits with success, long
//!   before the 600 s are up.
//! - SIGTERM without `--seconds` exits as well.
//! - By default the simulated cluster changes: a watch through the demo receives events.
//!
//! Timing assertions are only liveness bounds far above what each step takes.

use crate::support::ops::read_addr_file;
use crate::support::{deadline, list_rv, Api, ChildGuard, Next, WatchStream};
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::Duration;
use tokio::time::Instant;

/// A Table watch with the objects in it: kache builds no such view, so the upstream answers.
const TABLE_WITH_OBJECTS: &str = "application/json;as=Table;g=meta.k8s.io;v=v1";

/// `kache demo` run as the built binary, its kache listener's address read from
/// `--addr-file`; killed when dropped (unless it already exited).
struct DemoBin {
    child: ChildGuard,
    api: Api,
    dir: tempfile::TempDir,
}

impl DemoBin {
    /// Spawn `kache demo` with a small cluster and `args`, and wait (up to 120 s) until kache
    /// listens.
    async fn spawn(args: &[&str]) -> DemoBin {
        let dir = tempfile::tempdir().expect("tempdir");
        let (addr_file, log) = (dir.path().join("addr"), dir.path().join("stderr"));
        let mut c = Command::new(env!("CARGO_BIN_EXE_kache"));
        c.arg("demo").arg("--addr-file").arg(&addr_file).arg("--kubeconfig").arg(dir.path().join("demo.kubeconfig"));
        c.args(["--nodes", "5", "--pods", "200", "--namespaces", "3"]);
        c.args(args);
        c.env_remove("KUBECONFIG").env("KACHE_LOG_LEVEL", "info");
        for (k, _) in std::env::vars().filter(|(k, _)| k.starts_with("KACHE_") && k != "KACHE_LOG_LEVEL") {
            c.env_remove(k);
        }
        c.stdin(Stdio::null()).stdout(Stdio::null()).stderr(std::fs::File::create(&log).expect("log file"));
        let mut child = ChildGuard(c.spawn().expect("spawn kache demo"));
        let addr = read_addr_file(&addr_file, &mut child, &log, 120).await;
        DemoBin { child, api: Api::new(&addr.to_string()), dir }
    }

    fn kubeconfig(&self) -> PathBuf {
        self.dir.path().join("demo.kubeconfig")
    }

    /// Send a signal (`TERM`, `INT`) with the `kill` command.
    fn signal(&self, sig: &str) {
        let pid = self.child.0.id();
        let status = Command::new("kill").arg(format!("-{sig}")).arg(pid.to_string()).status().expect("run kill");
        assert!(status.success(), "kill -{sig} {pid}: {status}");
    }

    fn stderr(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("stderr")).unwrap_or_default()
    }

    /// Wait until the process exits; fail if it is still running at `until`.
    async fn exits_by(&mut self, until: Instant, what: &str) -> std::process::ExitStatus {
        loop {
            if let Some(s) = self.child.0.try_wait().expect("try_wait") {
                return s;
            }
            assert!(Instant::now() < until, "kache demo still running {what}:\n{}", self.stderr());
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// A JSON watch of every pod from the current state (`?watch=1` after a LIST), open.
    async fn pod_watch(&self, accept: &str) -> WatchStream {
        let rv = list_rv(&self.api.get_ok("/api/v1/pods?limit=1").await);
        let w = self.api.watch(&format!("/api/v1/pods?watch=1&resourceVersion={rv}&allowWatchBookmarks=true"), accept).await;
        assert_eq!(w.status, 200, "watch through the demo");
        w
    }
}

/// Read `w` until it ends cleanly (a torn line or a body error panics); fail at `until`.
async fn ends(w: &mut WatchStream, until: Instant, what: &str) {
    loop {
        match w.next_json(until).await {
            Next::Item(_) => {}
            Next::End => return,
            Next::TimedOut => panic!("{what} still open after the signal"),
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigint_ends_the_demo_and_its_watches_long_before_its_seconds() {
    let mut demo = DemoBin::spawn(&["--seconds", "600"]).await;
    // The kubeconfig is written once every preloaded cache has synced.
    crate::support::eventually(120, 50, || async {
        if demo.kubeconfig().is_file() {
            Ok(())
        } else {
            Err(format!("the demo wrote no kubeconfig:\n{}", demo.stderr()))
        }
    })
    .await;
    let mut cached = demo.pod_watch("application/json").await;
    assert_eq!(cached.headers.get(kache::api::FROM_CACHE_HEADER).map(|v| v.as_bytes()), Some(&b"true"[..]));
    let rv = list_rv(&demo.api.get_ok("/api/v1/pods?limit=1").await);
    let mut passed = demo.api.watch(&format!("/api/v1/pods?watch=1&resourceVersion={rv}&includeObject=Object"), TABLE_WITH_OBJECTS).await;
    assert_eq!(passed.status, 200);
    assert!(passed.headers.get(kache::api::FROM_CACHE_HEADER).is_none(), "the Table watch is the upstream's");

    demo.signal("INT");
    let until = deadline(60);
    ends(&mut cached, until, "the watch from kache's cache").await;
    ends(&mut passed, until, "the watch the upstream answers").await;
    let status = demo.exits_by(until, "60 s after SIGINT (it was to run 600 s)").await;
    assert!(status.success(), "exit status after SIGINT: {status}\n{}", demo.stderr());
    assert!(demo.stderr().contains("shutting down"), "shutdown is logged:\n{}", demo.stderr());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_demo_watch_shows_changes_by_default_and_sigterm_ends_it() {
    let mut demo = DemoBin::spawn(&[]).await;
    let mut w = demo.pod_watch("application/json").await;
    let until = deadline(60);
    loop {
        let ev = w.next_json(until).await.item("a pod event through the demo");
        if matches!(ev["type"].as_str(), Some("ADDED" | "MODIFIED" | "DELETED")) {
            break;
        }
    }
    demo.signal("TERM");
    let until = deadline(60);
    ends(&mut w, until, "the pod watch").await;
    let status = demo.exits_by(until, "60 s after SIGTERM").await;
    assert!(status.success(), "exit status after SIGTERM: {status}\n{}", demo.stderr());
}
