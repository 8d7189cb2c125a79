//! The opt-in real tier (see `real_apiserver`): the parity benchmark's kubectl commands
//! (`loadtest/real/parity.py`) print through kache what they print against the real
//! apiserver. The benchmark measures their times; this checks their output: an object's YAML
//! and JSON and `describe` byte for byte, tables with their ages taken out (`get all` is one
//! table per kind), `kubectl get pods -A` whole, its pages answered from cache.

use crate::real_apiserver::*;
use crate::real_kubectl::ageless_table;
use crate::support::TestKache;

/// Each table of kubectl's output (tables are separated by an empty line), ages taken out.
fn ageless_tables(out: &[u8]) -> Vec<Vec<Vec<String>>> {
    String::from_utf8_lossy(out).split("\n\n").filter(|t| !t.trim().is_empty()).map(|t| ageless_table(t.as_bytes())).collect()
}

/// `kubectl ARGS` run directly against the real apiserver (its kubeconfig and context).
pub(crate) fn direct_kubectl(cache: &std::path::Path, args: &[&str]) -> std::process::Command {
    RealUpstream::on().kubectl(cache, args)
}

/// `kubectl ARGS` through kache and directly; both succeed. Returns what each printed and
/// the requests kache answered from cache meanwhile.
pub(crate) async fn through_kache_and_directly(
    k: &TestKache,
    via: &crate::support::Kubectl,
    cache: &std::path::Path,
    args: &[&str],
) -> (Vec<u8>, Vec<u8>, u64) {
    let before = k.serving.serve.cache_hits();
    let got = via.run(args).await;
    let hits = k.serving.serve.cache_hits() - before;
    let mut direct = direct_kubectl(cache, args);
    let want = tokio::task::spawn_blocking(move || direct.output()).await.unwrap().expect("kubectl direct");
    let what = format!("kubectl {}", args.join(" "));
    assert!(got.status.success(), "{what} through kache: {}", String::from_utf8_lossy(&got.stderr));
    assert!(want.status.success(), "{what} directly: {}", String::from_utf8_lossy(&want.stderr));
    (got.stdout, want.stdout, hits)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn real_the_parity_benchmarks_kubectl_commands_print_what_the_apiserver_prints() {
    let preload = "pods,nodes,namespaces,services,configmaps,leases.coordination.k8s.io";
    let Some(k) = real("real_parity", preload).await else { return };
    let one = k.api.get_ok(POPULATED_POD).await;
    let ns = one["items"][0]["metadata"]["namespace"].as_str().expect("the apiserver holds pods").to_string();
    let name = one["items"][0]["metadata"]["name"].as_str().unwrap().to_string();
    let via = crate::support::Kubectl::new(&format!("http://{}", k.serving.addr));
    let cache = tempfile::tempdir().unwrap();

    // One object, whole: the same bytes.
    for args in [
        vec!["get", "pod", &name, "-n", &ns, "-o", "yaml"],
        vec!["get", "pod", &name, "-n", &ns, "-o", "json"],
        vec!["describe", "pod", &name, "-n", &ns],
    ] {
        let (got, want, _) = through_kache_and_directly(&k, &via, cache.path(), &args).await;
        assert!(!want.is_empty());
        assert!(
            got == want,
            "kubectl {}: printed differently\nthrough kache:\n{}\ndirect:\n{}",
            args.join(" "),
            String::from_utf8_lossy(&got),
            String::from_utf8_lossy(&want)
        );
    }

    // Tables, ages aside.
    for args in [
        vec!["get", "ns"],
        vec!["get", "svc", "-A"],
        vec!["get", "cm", "-n", &ns],
        vec!["get", "cm", "-A"],
        vec!["get", "all", "-n", &ns],
        vec!["get", "pods", "-A"],
    ] {
        let (got, want, hits) = through_kache_and_directly(&k, &via, cache.path(), &args).await;
        let what = format!("kubectl {}", args.join(" "));
        let (got_tables, want_tables) = (ageless_tables(&got), ageless_tables(&want));
        // A populated namespace holds no ConfigMap without a controller-manager to write its
        // root CA: both print nothing then (kubectl says so on stderr).
        if args[1] != "cm" {
            assert!(want_tables.iter().any(|t| t.len() > 1), "{what}: the apiserver printed rows");
        }
        assert!(got_tables == want_tables, "{what}: printed differently (ages aside)");
        if args == ["get", "pods", "-A"] {
            // Every pod the apiserver holds, in pages of 500: the pages come from cache.
            let rows = want_tables[0].len() - 1;
            assert!(hits as usize >= rows / 500, "{what}: {hits} answers from cache for {rows} pods");
            eprintln!("kubectl get pods -A: {rows} pods printed alike, {hits} pages from cache");
        }
    }
}
