//! Operations: the README's in-cluster quick start (between `<!-- incluster:begin -->` and
//! `<!-- incluster:end -->`), run offline with real kubectl, openssl and `kache`. Commands
//! that change a cluster become their offline forms: `kubectl apply -k D` renders with
//! `kubectl kustomize D`, `kubectl apply -f F` reads F, `kubectl create ...` gets
//! `--dry-run=client -o yaml`. Those that need running pods (`rollout status`,
//! `port-forward`, `curl` of the metrics) are not run here; deploy/README.md has a transcript
//! of all of them against a real apiserver without nodes. Checked: the Secret has the keys
//! the StatefulSet mounts, the Service is the address the kubeconfigs name, `kache
//! kubeconfig` copies the user's token, and the `sed`-edited controller kubeconfig points at
//! kache with the CA where the ConfigMap mounts it.

use crate::ops_quickstart::{readme_commands, sh};
use std::path::Path;

/// What a README command becomes offline; `None` for the ones that need a running kache.
fn offline(command: &str) -> Option<String> {
    if command.contains(" rollout status ") || command.contains(" port-forward ") || command.starts_with("curl ") {
        return None;
    }
    if let Some(dir) = command.strip_prefix("kubectl apply -k ") {
        return Some(format!("kubectl kustomize {dir}"));
    }
    if let Some(file) = command.strip_prefix("kubectl apply -f ") {
        return Some(format!("cat {file}"));
    }
    if command.starts_with("kubectl ") && command.contains(" create ") {
        return Some(format!("{command} --dry-run=client -o yaml"));
    }
    Some(command.to_string())
}

/// Copy the tree at `from` to `to`.
fn copy_tree(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for e in std::fs::read_dir(from).unwrap() {
        let e = e.unwrap();
        if e.file_type().unwrap().is_dir() {
            copy_tree(&e.path(), &to.join(e.file_name()));
        } else {
            std::fs::copy(e.path(), to.join(e.file_name())).unwrap();
        }
    }
}

/// The value at `jsonpath` of the kubeconfig at `path`, as kubectl reads it.
fn kubeconfig_field(path: &Path, jsonpath: &str) -> String {
    let out = std::process::Command::new("kubectl")
        .arg("--kubeconfig")
        .arg(path)
        .args(["config", "view", "--raw", "-o", &format!("jsonpath={jsonpath}")])
        .output()
        .unwrap();
    assert!(out.status.success(), "kubectl refused {}: {}", path.display(), String::from_utf8_lossy(&out.stderr));
    String::from_utf8(out.stdout).unwrap()
}

#[test]
fn readme_in_cluster_commands_render_and_write_kubeconfigs_that_point_at_kache() {
    let home = tempfile::tempdir().unwrap();
    let work = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(home.path().join(".kube")).unwrap();
    std::fs::write(
        home.path().join(".kube/config"),
        "apiVersion: v1\nkind: Config\nclusters:\n- name: c\n  cluster: {server: 'https://203.0.113.1:6443'}\nusers:\n- name: u\n  user: {token: the-users-token}\ncontexts:\n- name: x\n  context: {cluster: c, user: u}\ncurrent-context: x\n",
    )
    .unwrap();
    copy_tree(&Path::new(env!("CARGO_MANIFEST_DIR")).join("deploy"), &work.path().join("deploy"));
    let mut outputs = Vec::new();
    let mut skipped = Vec::new();
    for command in readme_commands("incluster") {
        let Some(run) = offline(&command) else {
            skipped.push(command);
            continue;
        };
        let out = sh(&run, home.path(), work.path()).output().unwrap();
        assert!(out.status.success(), "`{run}` failed: {}", String::from_utf8_lossy(&out.stderr));
        outputs.push((command, String::from_utf8(out.stdout).unwrap()));
    }
    assert_eq!(skipped.len(), 3, "only rollout status, port-forward and curl need a cluster: {skipped:?}");
    let output = |prefix: &str| -> &str {
        &outputs.iter().find(|(c, _)| c.starts_with(prefix)).unwrap_or_else(|| panic!("no README command `{prefix}...`")).1
    };

    assert!(output("kubectl apply -f").contains("kind: Namespace") && output("kubectl apply -f").contains("name: kache"));
    let secret = output("kubectl -n kache create secret");
    for key in ["tls.crt:", "tls.key:", "ca.crt:", "type: kubernetes.io/tls", "name: kache-serving-cert", "namespace: kache"] {
        assert!(secret.contains(key), "the Secret lacks {key}:\n{secret}");
    }
    // The rendered replicas: the Service the kubeconfigs name (kache.kache.svc, 443) and a
    // StatefulSet mounting that Secret, its state on a volume of each replica's own.
    let rendered = output("kubectl apply -k deploy/replicas");
    let docs: Vec<&str> = rendered.split("\n---\n").collect();
    let service = docs.iter().find(|d| d.contains("kind: Service\n") && d.contains("\n  name: kache\n")).expect("a Service kache");
    assert!(service.contains("namespace: kache") && service.contains("port: 443"), "{service}");
    let replicas = docs.iter().find(|d| d.contains("kind: StatefulSet\n")).expect("a StatefulSet");
    assert!(replicas.contains("secretName: kache-serving-cert"), "{replicas}");
    assert!(replicas.contains("volumeClaimTemplates:") && replicas.contains("mountPath: /var/lib/kache\n"), "{replicas}");
    let env = docs.iter().find(|d| d.contains("kind: ConfigMap\n") && d.contains("name: kache-env-")).expect("kache's environment");
    assert!(env.contains("KACHE_STATE_DIR: /var/lib/kache/state"), "{env}");

    // `kache kubeconfig`: kache's address and CA, the user's own token.
    let kache = work.path().join("kache.kubeconfig");
    assert_eq!(kubeconfig_field(&kache, "{.clusters[0].cluster.server}"), "https://kache.kache.svc");
    assert_eq!(kubeconfig_field(&kache, "{.users[0].user.token}"), "the-users-token");
    assert!(!kubeconfig_field(&kache, "{.clusters[0].cluster.certificate-authority-data}").is_empty());

    // The controller's kubeconfig: kache, with the CA the ConfigMap puts next to it.
    let kubeconfig = work.path().join("kubeconfig");
    assert_eq!(kubeconfig_field(&kubeconfig, "{.clusters[0].cluster.server}"), "https://kache.kache.svc");
    assert_eq!(kubeconfig_field(&kubeconfig, "{.clusters[0].cluster.certificate-authority}"), "/etc/kache-client/ca.crt");
    let configmap = output("kubectl -n my-app create configmap kache-client");
    assert!(configmap.contains("  kubeconfig: |") && configmap.contains("  ca.crt: |"), "{configmap}");
}
