//! Operations: `kache kubeconfig` writes a client kubeconfig for a running kache: the server
//! URL, the CA (embedded) when given, and the user's credentials (and namespace) copied from
//! a context of another kubeconfig, relative paths made absolute, mode 0600. End to end:
//! kubectl with the written file reads through kache (TLS, verified with the embedded CA) as
//! the copied user (RBAC applies to that user; a bad token copied the same way gets 401
//! from kache), in front of a simulator that checks tokens and RBAC.
//! Bad input exits 2 naming the flag.

use crate::support::kubectl;
use crate::support::ops::{AuthSim, KacheBin};
use serde_json::Value;
use std::path::Path;
use std::process::{Command, Output, Stdio};

const USERS: &str = "tokens:\n  kache-token: {username: \"system:serviceaccount:kache:kache\", groups: [\"system:masters\"]}\n  alice-token: {username: alice, uid: uid-alice, groups: [devs]}\n";
const RBAC: &str =
    "rules:\n- name: alice-reads-pods\n  users: [alice]\n  verbs: [get, list, watch]\n  apiGroups: [\"\"]\n  resources: [pods]\n";

fn kache(args: &[&str], env: &[(&str, &str)]) -> Output {
    let mut c = Command::new(env!("CARGO_BIN_EXE_kache"));
    c.arg("kubeconfig").args(args).env_remove("KUBECONFIG").envs(env.iter().copied()).stdin(Stdio::null());
    for (k, _) in std::env::vars().filter(|(k, _)| k.starts_with("KACHE_")) {
        c.env_remove(k);
    }
    c.output().expect("run kache kubeconfig")
}

fn ok(args: &[&str], env: &[(&str, &str)]) -> Output {
    let out = kache(args, env);
    assert!(out.status.success(), "kache kubeconfig {args:?}: {}\n{}", out.status, String::from_utf8_lossy(&out.stderr));
    out
}

fn read_json(path: &Path) -> Value {
    serde_json::from_slice(&std::fs::read(path).unwrap()).unwrap_or_else(|e| panic!("{} is not JSON: {e}", path.display()))
}

/// A user's kubeconfig with three contexts: a token (current), a token kache's upstream does
/// not know, and client-certificate files given by relative paths.
fn source_kubeconfig(dir: &Path, upstream: &str) -> std::path::PathBuf {
    std::fs::create_dir_all(dir.join("certs")).unwrap();
    std::fs::write(dir.join("certs/b.crt"), "not used here").unwrap();
    std::fs::write(dir.join("certs/b.key"), "not used here").unwrap();
    let path = dir.join("source.kubeconfig");
    std::fs::write(
        &path,
        format!(
            "apiVersion: v1\nkind: Config\nclusters:\n- name: real\n  cluster:\n    server: {upstream}\ncontexts:\n- name: ctx-alice\n  context: {{cluster: real, user: alice, namespace: default}}\n- name: ctx-nobody\n  context: {{cluster: real, user: nobody}}\n- name: ctx-certs\n  context: {{cluster: real, user: bee, namespace: team-b}}\n- name: ctx-ghost\n  context: {{cluster: real, user: ghost}}\ncurrent-context: ctx-alice\nusers:\n- name: alice\n  user:\n    token: alice-token\n- name: nobody\n  user:\n    token: no-such-token\n- name: bee\n  user:\n    client-certificate: certs/b.crt\n    client-key: certs/b.key\n"
        ),
    )
    .unwrap();
    path
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubeconfig_for_a_running_kache_carries_the_users_credentials() {
    let sim = AuthSim::start(USERS, RBAC, &["--nodes", "5", "--pods", "50", "--namespaces", "3"]).await;
    // kache serves TLS (a generated certificate): client-go sends credentials only over TLS.
    let k = KacheBin::spawn_with_token(&format!("http://{}", sim.addr), "kache-token", &["--tls", "--preload", "pods"], &[], 120).await;
    k.readyz_becomes(200, 120).await;
    let dir = tempfile::tempdir().unwrap();
    let src = source_kubeconfig(dir.path(), &format!("http://{}", sim.addr));
    let server = format!("https://{}", k.addr);
    // kache's CA, from the kubeconfig its --client-kubeconfig-out wrote (server and CA, no user).
    let written: Value =
        serde_saphyr::from_str(&std::fs::read_to_string(k.client_kubeconfig()).expect("--client-kubeconfig-out written")).expect("YAML");
    let ca_b64 = written["clusters"][0]["cluster"]["certificate-authority-data"].as_str().expect("CA in the client kubeconfig");
    use base64::Engine;
    let ca = dir.path().join("kache-ca.pem");
    std::fs::write(&ca, base64::engine::general_purpose::STANDARD.decode(ca_b64).unwrap()).unwrap();

    // The current context's user: a token, and its namespace; kache's CA embedded.
    let out = dir.path().join("alice.kubeconfig");
    ok(
        &[
            "--server",
            &server,
            "--from-kubeconfig",
            src.to_str().unwrap(),
            "--certificate-authority",
            ca.to_str().unwrap(),
            "--out",
            out.to_str().unwrap(),
        ],
        &[],
    );
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        assert_eq!(std::fs::metadata(&out).unwrap().permissions().mode() & 0o777, 0o600, "the kubeconfig holds credentials");
    }
    let kc = read_json(&out);
    assert_eq!(kc["kind"], "Config");
    assert_eq!(kc["current-context"], "kache");
    assert_eq!(kc["clusters"][0]["cluster"]["server"], server.as_str());
    assert_eq!(kc["clusters"][0]["cluster"]["certificate-authority-data"], ca_b64, "kache's CA embedded");
    assert_eq!(kc["users"][0]["user"]["token"], "alice-token");
    assert_eq!(kc["contexts"][0]["context"]["namespace"], "default");

    // kubectl reads through kache as alice ...
    let cache = dir.path().join("kubectl-cache");
    let got = kubectl(&out, &cache, &["get", "pods", "--all-namespaces", "-o", "json"]);
    assert!(got.status.success(), "kubectl as alice through kache: {}", String::from_utf8_lossy(&got.stderr));
    let list: Value = serde_json::from_slice(&got.stdout).expect("kubectl JSON");
    assert_eq!(list["items"].as_array().map(Vec::len), Some(50), "every pod");
    let who = kubectl(&out, &cache, &["config", "view", "--raw", "-o", "jsonpath={.users[0].user.token}"]);
    assert_eq!(String::from_utf8_lossy(&who.stdout), "alice-token", "kubectl parses the written kubeconfig");
    // ... and only as alice: RBAC gives her pods, not nodes.
    let nodes = kubectl(&out, &cache, &["get", "nodes"]);
    assert!(
        !nodes.status.success() && String::from_utf8_lossy(&nodes.stderr).contains("forbidden"),
        "alice may not list nodes: {}",
        String::from_utf8_lossy(&nodes.stderr)
    );

    // A token the upstream does not know, copied the same way, is refused by kache.
    let bad = dir.path().join("nobody.kubeconfig");
    ok(
        &[
            "--server",
            &server,
            "--from-kubeconfig",
            src.to_str().unwrap(),
            "--context",
            "ctx-nobody",
            "--certificate-authority",
            ca.to_str().unwrap(),
            "--out",
            bad.to_str().unwrap(),
        ],
        &[],
    );
    let denied = kubectl(&bad, &cache, &["get", "pods", "-A"]);
    assert!(!denied.status.success(), "an unknown token must not read through kache");
    assert!(String::from_utf8_lossy(&denied.stderr).contains("Unauthorized"), "{}", String::from_utf8_lossy(&denied.stderr));
}

#[test]
fn relative_paths_ca_name_stdout_and_environment() {
    let dir = tempfile::tempdir().unwrap();
    let src = source_kubeconfig(dir.path(), "https://real.example:6443");
    let src = src.to_str().unwrap();
    // Client-certificate files given relative to the source become absolute.
    let out = dir.path().join("b.kubeconfig");
    ok(
        &[
            "--server",
            "http://127.0.0.1:6444",
            "--from-kubeconfig",
            src,
            "--context",
            "ctx-certs",
            "--name",
            "kache-b",
            "--out",
            out.to_str().unwrap(),
        ],
        &[],
    );
    let kc = read_json(&out);
    let user = &kc["users"][0]["user"];
    let base = dir.path().canonicalize().unwrap_or(dir.path().to_path_buf());
    for (field, file) in [("client-certificate", "certs/b.crt"), ("client-key", "certs/b.key")] {
        let p = Path::new(user[field].as_str().unwrap_or_else(|| panic!("{field} copied: {user}")));
        assert!(p.is_absolute(), "{field} made absolute: {}", p.display());
        assert_eq!(p.canonicalize().unwrap(), base.join(file).canonicalize().unwrap());
    }
    assert_eq!(kc["contexts"][0]["name"], "kache-b");
    assert_eq!(kc["contexts"][0]["context"]["namespace"], "team-b");
    assert_eq!(kc["current-context"], "kache-b");

    // An https server with its CA embedded; written to standard output.
    let ca_pem = "-----BEGIN CERTIFICATE-----\nMIIBfake\n-----END CERTIFICATE-----\n";
    std::fs::write(dir.path().join("ca.pem"), ca_pem).unwrap();
    let ca = dir.path().join("ca.pem");
    let out = ok(
        &[
            "--server",
            "https://kache.kache.svc:443",
            "--from-kubeconfig",
            src,
            "--certificate-authority",
            ca.to_str().unwrap(),
            "--out",
            "-",
        ],
        &[],
    );
    let kc: Value = serde_json::from_slice(&out.stdout).expect("stdout is the kubeconfig");
    use base64::Engine;
    let data = kc["clusters"][0]["cluster"]["certificate-authority-data"].as_str().expect("CA embedded");
    assert_eq!(base64::engine::general_purpose::STANDARD.decode(data).unwrap(), ca_pem.as_bytes());
    assert_eq!(kc["users"][0]["user"]["token"], "alice-token");

    // Every flag from the environment.
    let out = dir.path().join("env.kubeconfig");
    ok(
        &[],
        &[
            ("KACHE_KUBECONFIG_SERVER", "http://127.0.0.1:6444"),
            ("KACHE_KUBECONFIG_FROM", src),
            ("KACHE_KUBECONFIG_CONTEXT", "ctx-nobody"),
            ("KACHE_KUBECONFIG_OUT", out.to_str().unwrap()),
        ],
    );
    assert_eq!(read_json(&out)["users"][0]["user"]["token"], "no-such-token");
}

#[test]
fn bad_input_exits_2_naming_the_flag() {
    let dir = tempfile::tempdir().unwrap();
    let src = source_kubeconfig(dir.path(), "https://real.example:6443");
    let src = src.to_str().unwrap();
    let out = dir.path().join("out.kubeconfig");
    let out = out.to_str().unwrap();
    std::fs::write(dir.path().join("not-a-ca.pem"), "hello").unwrap();
    let not_ca = dir.path().join("not-a-ca.pem");
    for (args, flag) in [
        (vec!["--server", "ftp://kache:21", "--from-kubeconfig", src, "--out", out], "--server"),
        (vec!["--server", "kache.kache.svc", "--from-kubeconfig", src, "--out", out], "--server"),
        (vec!["--server", "http://127.0.0.1:6444", "--from-kubeconfig", "/nonexistent/kubeconfig", "--out", out], "--from-kubeconfig"),
        (vec!["--server", "http://127.0.0.1:6444", "--from-kubeconfig", src, "--context", "no-such", "--out", out], "--context"),
        (vec!["--server", "http://127.0.0.1:6444", "--from-kubeconfig", src, "--context", "ctx-ghost", "--out", out], "ghost"),
        (
            vec![
                "--server",
                "https://kache:443",
                "--from-kubeconfig",
                src,
                "--certificate-authority",
                not_ca.to_str().unwrap(),
                "--out",
                out,
            ],
            "--certificate-authority",
        ),
        (
            vec![
                "--server",
                "http://127.0.0.1:6444",
                "--from-kubeconfig",
                src,
                "--certificate-authority",
                not_ca.to_str().unwrap(),
                "--out",
                out,
            ],
            "--certificate-authority",
        ),
        (vec!["--from-kubeconfig", src, "--out", out], "--server"),
    ] {
        let o = kache(&args, &[]);
        let err = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(2), "kache kubeconfig {args:?}: {err}");
        assert!(err.contains(flag), "kache kubeconfig {args:?}: message does not name {flag}: {err}");
    }
    assert!(!Path::new(out).exists(), "nothing written on bad input");
}
