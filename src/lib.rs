//! kache: a watch cache and read proxy for the Kubernetes API.
//!
//! Layout (request path first, then state, then feeders):
//! - `server`: accept loop, per-connection task, TLS, HTTP/1.1 and HTTP/2, connection limits.
//! - `auth`: client identity (certificates, TokenReview), authorization (SubjectAccessReview),
//!   impersonation, TLS serving certificates.
//! - `limit`: in-flight caps on cached reads (429 beyond them).
//! - `route`: classify a request path and query into a cached read or something else.
//! - `query`: parse and validate list/watch options (resourceVersion modes, limit, selectors).
//! - `handler`: cached GET, LIST and WATCH answered from one snapshot with pre-encoded bytes.
//! - `body`: response bodies: stored bytes borrowed from a snapshot and written with `writev`.
//! - `status`: the one place that turns errors into Kubernetes `Status` responses.
//! - `cache`: one `KindCache` per resource: snapshot, progress, fan-out to watchers.
//! - `store`: immutable snapshots (persistent ordered maps) and the spec.nodeName index.
//! - `object`: an object as stored: its encoded bytes and the fields selectors need.
//! - `window`: the sliding window of recent events a watch resumes from.
//! - `selector`: label and field selector parsing and matching.
//! - `token`: continue tokens in the apiserver's format.
//! - `wire`: protobuf framing: the `k8s\0` envelope, lists, watch frames.
//! - `json`: JSON encoding the way the apiserver writes it.
//! - `transcode`: JSON <-> protobuf for built-in kinds (used by the simulator and at ingest).
//! - `resource`: the resource types kache knows and their discovery documents.
//! - `serve`: `kache serve`: routes each request to a cache or to the upstream.
//! - `informer`: the LIST+WATCH reflector feeding one cache from the upstream.
//! - `proxy`: pass-through of everything not served from cache, streamed, upgrades included.
//! - `upstream`: the HTTP/2 client to the upstream apiserver, configured by kube's `Config`.
//! - `sim`: the simulated kube-apiserver (the test upstream and `kache sim`).
//! - `synth`: deterministic synthetic cluster objects for the simulator.
//! - `demo`: `kache demo`, the simulator with kache in front of it.
//! - `admin`: the admin listener: metrics, liveness and readiness.
//! - `telemetry`: metric names and the Prometheus recorder.
//! - `config`: command-line configuration.

pub mod admin;
pub mod api;
pub mod app;
pub mod auth;
pub mod cache;
pub mod config;
pub mod serve;
#[cfg(feature = "sim")]
pub mod sim;
pub mod telemetry;
