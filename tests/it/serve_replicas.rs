//! Two kache replicas behind one address (a TCP balancer standing for the Service of
//! deploy/replicas), each keeping its caches in its own `--state-dir`, restarted one after
//! the other as a rolling update does, while pods are written. kube-rs informers watching
//! through the address follow every change, those made while a replica was down included,
//! without listing again: the watches the stopping replica ends resume at the other one from
//! their resourceVersion, and a restarted replica resumes its own upstream watch from its
//! saved state without listing the pods. The upstream is the simulator with an audit log,
//! which counts kache's LISTs.

use crate::serve_restart::{kache, patch, pod_lists, sim_pods, sim_pods_where, Informer};
use crate::support::auth::{SecureSim, Who};
use crate::support::balancer::Balancer;
use crate::support::{keys_rvs, TestKache};
use http::Method;
use kache::upstream::Upstream;
use kube::runtime::watcher::Config;
use serde_json::json;
use std::collections::BTreeMap;
use std::net::SocketAddr;

/// The node whose pods one informer watches, as its kubelet does (the simulator's seeded
/// pods `a-pod-0` and `b-pod-0` run there).
const NODE: &str = "node-0001";

/// An informer and the pods it should hold: every pod, or those of `NODE`.
struct Watching {
    name: &'static str,
    informer: Informer,
    on_node: bool,
}

/// Every informer follows the simulator's pods (those its selector picks) until its store
/// equals them, and has listed once in all.
async fn all_follow(sim: &SecureSim, informers: &mut [Watching], when: &str) {
    let every = sim_pods(sim).await;
    let on_node = sim_pods_where(sim, &format!("?fieldSelector=spec.nodeName%3D{NODE}")).await;
    for w in informers.iter_mut() {
        let want = if w.on_node { &on_node } else { &every };
        w.informer.follow(want).await;
        assert_eq!(w.informer.inits, 1, "{when}: the {} informer began one list in all", w.name);
    }
}

/// The pods changed while replica `i` is down: a patch, a creation and a deletion, on the
/// watched node and off it.
async fn write_while_down(sim: &SecureSim, i: usize) {
    if i == 0 {
        patch(sim, "a", "a-pod-0", "while-a-down").await;
        create(sim, "a", "born-while-a-down", NODE).await;
        delete(sim, "b", "b-pod-1").await;
    } else {
        patch(sim, "b", "b-pod-0", "while-b-down").await;
        create(sim, "b", "born-while-b-down", "node-0002").await;
        delete(sim, "a", "a-pod-0").await;
    }
}

async fn create(sim: &SecureSim, ns: &str, name: &str, node: &str) {
    let admin = sim.client(Who::Token("admin-token"));
    let pod = json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": ns},
        "spec": {"nodeName": node, "containers": [{"name": "c", "image": "busybox"}]}});
    admin.must(admin.post(&format!("/api/v1/namespaces/{ns}/pods"), &pod).await);
}

async fn delete(sim: &SecureSim, ns: &str, name: &str) {
    let admin = sim.client(Who::Token("admin-token"));
    admin.must(admin.request(Method::DELETE, &format!("/api/v1/namespaces/{ns}/pods/{name}"), &[], vec![]).await);
}

/// A consistent read of the pods from one replica: (namespace/name, RV).
async fn replica_pods(k: &TestKache) -> BTreeMap<String, String> {
    let list = k.api.get_ok("/api/v1/pods").await;
    keys_rvs(list["items"].as_array().unwrap()).into_iter().collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rolling_restart_of_two_replicas_behind_one_address_leaves_their_informers_watching_without_a_list() {
    let sim = SecureSim::start().await;
    let up = Upstream::load(Some(&sim.upstream_kubeconfig()), None).await.unwrap();
    let dirs = [tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap()];
    let mut replicas = [Some(kache(&up, "127.0.0.1:0", dirs[0].path()).await), Some(kache(&up, "127.0.0.1:0", dirs[1].path()).await)];
    let addrs: Vec<SocketAddr> = replicas.iter().map(|k| k.as_ref().unwrap().serving.addr).collect();
    let lb = Balancer::start(&addrs).await;

    // Three informers through the balancer, each with its own connections: every pod by
    // LIST then WATCH, every pod by a WatchList, and one node's pods. Replica B joins the
    // rotation once they have synced through A, so every informer's watch is on A when A
    // stops.
    lb.in_service(1, false);
    let client = || kube::Client::try_from(kube::Config::new(format!("http://{}", lb.addr).parse().unwrap())).unwrap();
    let mut informers = [
        Watching { name: "list", informer: Informer::start(client(), Config::default()), on_node: false },
        Watching { name: "watchlist", informer: Informer::start(client(), Config::default().streaming_lists()), on_node: false },
        Watching {
            name: "kubelet",
            informer: Informer::start(client(), Config::default().fields(&format!("spec.nodeName={NODE}"))),
            on_node: true,
        },
    ];
    all_follow(&sim, &mut informers, "synced").await;
    lb.in_service(1, true);
    patch(&sim, "a", "a-pod-1", "both-up").await;
    all_follow(&sim, &mut informers, "both replicas up").await;
    assert_eq!(lb.opened(1), 0, "every informer is on replica A");
    let listed = pod_lists(&sim);
    assert!(listed > 0, "the replicas listed the pods when they first started");

    // The rolling update: each replica in turn stops (its caches written), the pods change
    // while it is down, and it starts again on its address from its state. Its informers'
    // watches end with it and resume through the balancer at the other replica; the writes
    // made meanwhile reach them there, the one replica up.
    for (i, name) in [(0, "A"), (1, "B")] {
        let other = 1 - i;
        let moved_before = lb.opened(other);
        replicas[i].take().unwrap().stop().await;
        // The replica's process would have exited: its connections close. (In this process a
        // stopped kache serves on any connection still open, such as one whose client sent
        // its next watch before the shutdown closed it: that watch is not ended.)
        lb.cut(i);
        write_while_down(&sim, i).await;
        all_follow(&sim, &mut informers, &format!("replica {name} down")).await;
        assert!(
            lb.opened(other) >= moved_before + informers.len(),
            "every informer reconnected to the other replica while {name} was down: {} connections",
            lb.opened(other) - moved_before
        );

        replicas[i] = Some(kache(&up, &addrs[i].to_string(), dirs[i].path()).await);
        assert_eq!(pod_lists(&sim), listed, "replica {name} resumed its watch of the pods from its state: no LIST");
        patch(&sim, "a", "a-pod-2", &format!("{name}-back")).await;
        all_follow(&sim, &mut informers, &format!("replica {name} back")).await;
    }
    assert_eq!(pod_lists(&sim), listed, "neither replica listed the pods after its restart");
    let every = &informers[0].informer.store;
    assert!(every.contains_key("a/born-while-a-down") && every.contains_key("b/born-while-b-down"), "{every:?}");
    assert!(!every.contains_key("b/b-pod-1") && !every.contains_key("a/a-pod-0"), "{every:?}");
    let on_node = &informers[2].informer.store;
    assert!(on_node.contains_key("a/born-while-a-down") && on_node.contains_key("b/b-pod-0"), "{on_node:?}");
    assert!(!on_node.contains_key("b/born-while-b-down") && !on_node.contains_key("a/a-pod-0"), "{on_node:?}");

    // Both replicas answer as the simulator does.
    let want = sim_pods(&sim).await;
    for (k, name) in replicas.iter().zip(["A", "B"]) {
        assert_eq!(replica_pods(k.as_ref().unwrap()).await, want, "replica {name}'s pods");
    }
}
