//! kache: a watch cache and read proxy for the Kubernetes API.
//!
//! # Layout: folders in pipeline order
//! - `serve/`: everything one request touches, in order: `server` (accept, TLS, HTTP/1.1
//!   and HTTP/2, drain), `limit` (in-flight caps), `read` (can the cache answer?
//!   authorization, freshness, or a typed `PassThrough` reason), `cost` (whether a
//!   consistent read waits for a proof or goes upstream at once), `check` (a small
//!   consistent LIST checked against the upstream's metadata instead), `handler/` (`get`, `list`, `watch` from one snapshot; in
//!   `handler/tests/` the read path against a real apiserver's answers), `respond` (the
//!   headers every answer carries, a `Status` as a response), `compress` (gzip, `pretty`), `proxy`
//!   (pass-through, upgrades), `discovery` (which resources the upstream serves).
//! - `cache/`: the single-writer state per kind and its feeder: `KindCache` (snapshot,
//!   progress, fan-out), `store` (persistent maps, index), `window` (recent events), `object`
//!   (stored bytes and selector fields), `deflated` (WatchList runs kept deflated), `ledger`
//!   (which resource wrote each recent revision of the upstream's storage), `feed/` (the reflector that fills a `KindCache`:
//!   `state`, its retry loop as a state machine; `reflector`, LIST + WATCH + relist;
//!   `streamed`, an unpaged LIST's items cut as they arrive; `growing`, the initial list
//!   as it arrives; `turns`, preloaded kinds listed one at a time; `freshness`, probes;
//!   `account`, its part in the ledger; `check`, a page's metadata for `serve::check`;
//!   `decode`, JSON and protobuf; `fetch`).
//! - `upstream/`: the upstream apiserver, the one way to it: the client, its connection
//!   pools (`pool`), its health as kache's monitor finds it (`health`; kache's own readiness
//!   is `serve`'s and `admin`'s), the discovery documents kept for its outages
//!   (`last_discovery`).
//! - `api/`: pure Kubernetes formats shared by all, safe to fuzz: a request's `route`
//!   (classify a path), `query` (list and watch options), `token` (continue tokens) and
//!   `media` (`Accept`: content negotiation); `status`, `resource`, `json`, `time`, `quote`,
//!   `wire` (protobuf framing), `selector`, `table`, `transcode`.
//! - `body`: the one HTTP body type, both ways: buffers, stored bytes stitched, streams.
//! - `lane`: the low-priority lane, niced threads of their own for the per-byte work of
//!   encoding one client's large answer (`pretty` indentation, gzip).
//! - `auth/`: client identity (certificates, TokenReview), authorization
//!   (SubjectAccessReview), impersonation, serving certificates.
//! - `sim/` (cargo feature `sim`, on by default): the simulated kube-apiserver, its catalogue,
//!   synthetic cluster, churn and launch (`kache sim`, `kache demo`).
//! - `app/`: `kache serve`'s wiring, `kache kubeconfig` and `kache status`; `config`, `telemetry`,
//!   `admin` (`/metrics`, `/readyz`, `/debug/cache`).
//!
//! Layers only look down: `api` <- `body` <- `upstream` <- `cache`, `auth` <- `serve` <-
//! `app`, `sim`, `admin`.
//!
//! # A LIST, followed through
//! 1. `serve::server::serve_with` accepts the connection; hyper calls [`serve::Serve`]'s
//!    `Handler::handle`.
//! 2. `Serve::admit` checks the URI's length and authenticates (`auth::Security::caller`).
//! 3. `api::route::classify` turns the path into a `ResourcePath`.
//! 4. `Serve::cached` (`serve/read.rs`): `plan` (resource, scope, `api::media::negotiate`,
//!    `api::query::Options::parse`), `authorize` (cached SubjectAccessReview), the feed
//!    (`Serve::feed`).
//! 5. `permit` takes an in-flight place (`serve::limit`).
//! 6. `fresh_enough`: a consistent LIST first waits for its client's turn when the client
//!    has spent its rate of proofs (`Serve::queue_for_proof`, `rate::Buckets::queue`), then
//!    is proven by the revision ledger when it can be (`Feed::ledger_proof`: the upstream's
//!    current RV from `Feed::upstream_rv`, and every revision since the cache's progress
//!    another resource's write, `upstream::ledger`). If not,
//!    it is weighed by `serve::cost::Costs::decide` (the
//!    upstream's measured time for the answer's bytes against the expected proof wait).
//!    Cheaper upstream, `serve::check` asks the upstream for the same page as metadata
//!    (`cache::feed::Feed::page_identities`) and, when the cache's page holds the same
//!    objects at the same versions, answers it at the upstream's RV
//!    (`handler::list_verified`); else it passes through. Otherwise `Serve::consistent` asks
//!    `Feed::upstream_rv` and `Feed::prove` waits for the cache to be proven at that RV (a
//!    freshness probe), no longer than the upstream would take.
//! 7. `serve::handler::list` picks a snapshot (`KindCache::latest`, `KindCache::at` for past
//!    RVs) and selects items (`handler::candidates`, the `spec.nodeName` index, selectors).
//! 8. `list::stitch` writes the list head and borrows each item's stored bytes.
//! 9. `body::Stitch` goes out as one vectored write; nothing is re-encoded.
//! 10. Anything `cached` declines goes to `serve::proxy::forward`, streamed through
//!     `upstream::Upstream`.
//!
//! # A WATCH, followed through
//! 1. Steps 1-4 as for a LIST; `Options::parse` sees `watch=1`; no in-flight permit.
//! 2. `fresh_enough`: an RV newer than the cache has proven waits on `Feed::prove`. A
//!    WatchList of a kind still loading is sent the initial list as it arrives instead
//!    (`Serve::growing`, `handler::watch_growing`), then goes on from step 5.
//! 3. `serve::handler::watch` subscribes to the `KindCache` (or a node's or namespace's
//!    ring, `cache::rings`) first, then takes the snapshot, so no change falls between them.
//! 4. The backlog: the window's events since the RV (`cache::window::EventWindow::since`),
//!    or the state as ADDED events (RV 0, WatchList) and the initial-events-end bookmark.
//!    A whole collection's state goes in runs its keys cut; gzipped, each run's deflated
//!    bytes are kept for the next WatchList (`cache::deflated`, `serve::compress::watch`).
//! 5. Live events: `cache::KindCache::apply` (called by the feed, the one writer)
//!    broadcasts each change; the watcher filters it (`transition`) by selectors.
//! 6. Frames are encoded straight into the client's chunks (JSON lines or protobuf frames).
//! 7. Bookmarks: every `--watch-bookmark-interval` and 2 s before the deadline.
//! 8. A watcher that falls behind by `--watcher-lag` is ended, never skipped silently.
//! 9. Upstream side: `cache::feed::Feed::run` drives `feed::state::Reflector` (LIST ->
//!    WATCH from its RV -> resume, relist on 410, back off on errors) through the steps of
//!    `feed/reflector.rs` (the LIST is one unpaged request, over HTTP/1.1
//!    (`upstream::Class::Bulk`), whose items `feed::streamed` cuts from the body as they
//!    arrive; a preloaded kind's waits for its turn, `feed::turns`); objects are decoded at any depth the apiserver accepts
//!    (`api::json::with_value`, for built-in kinds without their managedFields), protobuf
//!    ones only as far as their key and selectable fields (`api::transcode::pb_to_json_only`),
//!    and one that cannot be is skipped and counted.
//! 10. Shutdown: `Serve::end_watches` ends every watch so clients resume elsewhere.

/// The git commit kache was built from (`git rev-parse --short HEAD`, or `KACHE_GIT_COMMIT`
/// when the build's environment sets it; "unknown" when built outside a repository).
pub const GIT_COMMIT: &str = env!("KACHE_GIT_COMMIT");

/// What `kache --version` prints after the name: the crate's version and [`GIT_COMMIT`].
pub const VERSION: &str = concat!(env!("CARGO_PKG_VERSION"), " (commit ", env!("KACHE_GIT_COMMIT"), ")");

/// The rooms of `src/` (its top-level modules), lowest first: a room uses only rooms before it.
/// `tests/it/house_rooms.rs` derives the graph from the code and fails on any use that looks up.
pub const ROOMS: &[&str] = &["api", "telemetry", "body", "rate", "upstream", "cache", "auth", "serve", "config", "app", "sim"];

pub mod api;
pub mod app;
pub mod auth;
pub mod body;
pub mod cache;
pub mod config;
pub(crate) mod rate;
pub mod serve;
#[cfg(feature = "sim")]
pub mod sim;
pub mod telemetry;
#[cfg(test)]
pub(crate) mod testdata;
pub mod upstream;
