//! Operations: the README's quick start, run as written. The commands between
//! `<!-- quickstart:begin -->` and `<!-- quickstart:end -->` are run through `sh` in a fresh
//! directory, with `kache` (the built binary) on PATH and a HOME whose `~/.kube/config`
//! points at a simulator that checks tokens (as a real cluster's kubeconfig points at its
//! apiserver), and real kubectl. The only change made to them: the fixed ports become port
//! 0 (tests bind no fixed ports) and later commands use the ports actually bound. The first
//! command (`kache serve`) runs in the background, as in its own terminal; the others run
//! once its client kubeconfig exists and it is ready, and each must succeed.

use crate::support::ops::{read_addr_file, AuthSim, Scrape};
use crate::support::{eventually, Api, ChildGuard};
use std::path::Path;
use std::process::{Command, Stdio};

const USERS: &str = "tokens:\n  admin-token: {username: admin, groups: [\"system:masters\"]}\n";
const RBAC: &str = "rules: []\n";

/// The shell commands of the README's quick start: continuation lines joined, comments and
/// blank lines dropped.
fn quickstart_commands() -> Vec<String> {
    readme_commands("quickstart")
}

/// The shell commands in the code blocks of README.md between `<!-- {marker}:begin -->` and
/// `<!-- {marker}:end -->`: continuation lines joined, comments and blank lines dropped.
pub(crate) fn readme_commands(marker: &str) -> Vec<String> {
    let readme = std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("README.md")).expect("README.md");
    let (_, rest) = readme.split_once(&format!("<!-- {marker}:begin -->")).expect("README has the begin marker");
    let (block, _) = rest.split_once(&format!("<!-- {marker}:end -->")).expect("README has the end marker");
    let mut commands = Vec::new();
    let mut current = String::new();
    let mut in_code = false;
    for line in block.lines() {
        if line.trim_start().starts_with("```") {
            in_code = !in_code;
            continue;
        }
        let line = line.trim();
        if !in_code || line.is_empty() || line.starts_with('#') {
            continue;
        }
        // A trailing comment is for the reader.
        let line = line.split(" # ").next().unwrap_or(line).trim_end();
        match line.strip_suffix('\\') {
            Some(head) => current.push_str(head),
            None => {
                current.push_str(line);
                commands.push(current.split_whitespace().collect::<Vec<_>>().join(" "));
                current.clear();
            }
        }
    }
    assert!(current.is_empty(), "the {marker} commands end inside a continued line");
    commands
}

pub(crate) fn sh(command: &str, home: &Path, cwd: &Path) -> Command {
    let bin = Path::new(env!("CARGO_BIN_EXE_kache")).parent().expect("binary directory");
    let path = format!("{}:{}", bin.display(), std::env::var("PATH").unwrap_or_default());
    let mut c = Command::new("sh");
    c.arg("-c").arg(command).current_dir(cwd).env("HOME", home).env("PATH", path).env_remove("KUBECONFIG").stdin(Stdio::null());
    for (k, _) in std::env::vars().filter(|(k, _)| k.starts_with("KACHE_")) {
        c.env_remove(k);
    }
    c
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn readme_quick_start_runs_as_written() {
    let commands = quickstart_commands();
    assert!(commands.len() >= 2, "quick start commands: {commands:?}");
    let serve = &commands[0];
    assert!(serve.starts_with("kache serve "), "the quick start starts kache: {serve}");

    let sim = AuthSim::start(USERS, RBAC, &["--nodes", "5", "--pods", "40", "--namespaces", "3"]).await;
    let (home, work) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    std::fs::create_dir_all(home.path().join(".kube")).unwrap();
    std::fs::write(
        home.path().join(".kube/config"),
        format!(
            "apiVersion: v1\nkind: Config\nclusters:\n- name: sim\n  cluster:\n    server: http://{}\ncontexts:\n- name: admin@sim\n  context: {{cluster: sim, user: admin, namespace: default}}\ncurrent-context: admin@sim\nusers:\n- name: admin\n  user:\n    token: admin-token\n",
            sim.addr
        ),
    )
    .unwrap();

    // Fixed ports become port 0, their bound addresses read from files.
    let (addr_file, admin_file, log) = (work.path().join(".addr"), work.path().join(".admin-addr"), work.path().join(".kache.log"));
    let mut run = serve.clone();
    for (flag, file) in [("--listen", &addr_file), ("--admin-listen", &admin_file)] {
        let fixed = serve
            .split_whitespace()
            .skip_while(|w| *w != flag)
            .nth(1)
            .unwrap_or_else(|| panic!("the quick start's kache serve has no {flag}: {serve}"))
            .to_string();
        run = run.replace(
            &format!("{flag} {fixed}"),
            &format!(
                "{flag} 127.0.0.1:0 {flag_file} {}",
                file.display(),
                flag_file = match flag {
                    "--listen" => "--addr-file",
                    _ => "--admin-addr-file",
                }
            ),
        );
    }
    let admin_fixed = serve.split_whitespace().skip_while(|w| *w != "--admin-listen").nth(1).unwrap().to_string();
    let mut child = ChildGuard(
        sh(&format!("exec {run}"), home.path(), work.path())
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&log).unwrap())
            .spawn()
            .expect("sh"),
    );
    read_addr_file(&addr_file, &mut child, &log, 120).await;
    let admin = read_addr_file(&admin_file, &mut child, &log, 120).await;
    let admin_api = Api::new(&admin.to_string());
    let kubeconfig = work.path().join("kache.kubeconfig");
    eventually(120, 100, || async {
        let code = admin_api.get("/readyz").await.status;
        if code == 200 && kubeconfig.is_file() {
            Ok(())
        } else {
            Err(format!("kache not ready ({code}) or no kubeconfig yet: {}", std::fs::read_to_string(&log).unwrap_or_default()))
        }
    })
    .await;
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(&kubeconfig).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o600, "the client kubeconfig holds credentials");
    }

    let mut transcript = format!("$ {serve}\n");
    let mut outputs = Vec::new();
    for command in &commands[1..] {
        let run = command.replace(&admin_fixed, &admin.to_string());
        let out = tokio::task::spawn_blocking({
            let (home, work) = (home.path().to_path_buf(), work.path().to_path_buf());
            move || sh(&run, &home, &work).output().expect("sh")
        })
        .await
        .unwrap();
        let (stdout, stderr) = (String::from_utf8_lossy(&out.stdout).into_owned(), String::from_utf8_lossy(&out.stderr).into_owned());
        transcript.push_str(&format!("$ {command}\n{stdout}{stderr}"));
        assert!(
            out.status.success(),
            "`{command}` failed ({}):\n{stderr}\n--- transcript ---\n{transcript}\n--- kache ---\n{}",
            out.status,
            std::fs::read_to_string(&log).unwrap_or_default()
        );
        outputs.push((command.clone(), stdout));
    }
    eprintln!("{transcript}");

    // kubectl listed every pod, through kache, as the kubeconfig's user.
    let (_, pods) = outputs.iter().find(|(c, _)| c.starts_with("kubectl ") && c.contains("get pods")).expect("a kubectl get pods");
    assert!(pods.starts_with("NAMESPACE"), "kubectl's table:\n{pods}");
    assert_eq!(pods.lines().skip(1).filter(|l| !l.trim().is_empty()).count(), 40, "every pod listed:\n{pods}");
    let metrics = admin_api.get("/metrics").await;
    assert_eq!(metrics.status, 200);
    let scrape = Scrape::parse(&metrics.text());
    // The informer's LIST (resourceVersion=0) came from memory, as the README says; kubectl's
    // consistent LIST of 40 pods, which the simulator answers sooner than a bookmark would
    // prove it, was proven by the revision ledger or checked against the upstream's
    // metadata, and answered from memory too.
    assert!(scrape.sum("kache_requests_total", &[("source", "cache"), ("verb", "list")]) >= 2.0, "both LISTs were answered from cache");
    let proven: f64 = ["same", "proven", "accounted"].iter().map(|o| scrape.sum("kache_consistent_checks_total", &[("outcome", o)])).sum();
    assert!(proven >= 1.0, "kubectl's small consistent LIST was proven without a bookmark");
    let (_, shown) = outputs.iter().find(|(c, _)| c.starts_with("curl ")).expect("the metrics command");
    assert!(
        shown.contains("kache_passthrough_total{") && shown.contains("source=\"cache\""),
        "the README's grep shows both families:\n{shown}"
    );
}
