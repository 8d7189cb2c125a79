//! kache's integration tests, one binary (one link of kube, k8s-openapi and k8s-pb).
//!
//! Modules by area, each starting the simulator and kache in-process on ephemeral ports
//! (or the `kache` binary where the process itself is under test); `support` holds every
//! helper once: simulator and kache starters, an HTTP client, kubectl, TLS material, a
//! metrics scraper and a recording proxy.
//!
//! Run one area with `cargo test --test it sim_`; a single test by name as usual.

// The simulator as an apiserver (its API, watches, kubectl and the Python client against it).
mod sim_api;
mod sim_kubectl;
mod sim_python;
mod sim_watch;

// kache in front of the simulator, through real clients.
mod serve_clients;
// Why a read is passed through, and the cost rule of consistent reads.
mod serve_cost;
// Consistent reads proven by the revision ledger.
mod serve_ledger;
// Restarts: one kache from its saved state, and a rolling update of two replicas.
mod serve_replicas;
mod serve_restart;

// kache through upstream faults (the simulator's fault switches).
mod faults;

// Authentication, authorization, impersonation and hostile input.
mod auth_identity;
mod auth_input;
mod auth_reads;
mod auth_sim;

// One tenant's cost bounded: per-client watches and sessions, slow readers.
mod tenant;

// Running kache: flags, docs, kubeconfigs, metrics, RBAC of its own, shutdown.
mod ops_config;
mod ops_demo;
mod ops_docs;
mod ops_incluster;
mod ops_kubeconfig;
mod ops_metrics;
mod ops_quickstart;
mod ops_rbac;
mod ops_shutdown;
mod ops_tls;

// The house: src/'s rooms only look down (kache::ROOMS).
mod house_rooms;

// Opt-in: kache in front of a real kube-apiserver (KACHE_REAL_KUBECONFIG).
mod real_apiserver;
mod real_authz;
mod real_differential;
mod real_informer;
mod real_kcm;
mod real_kubectl;
mod real_parity;
mod real_restart;
mod real_state;
mod real_tenant;
mod real_views;

mod support;
