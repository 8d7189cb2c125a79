//! kache: a watch cache and read proxy for the Kubernetes API.
//!
//! # Rooms, lowest first
//! `src/` is a pipeline of rooms (top-level modules); a room uses only the rooms before it in
//! [`ROOMS`] (`tests/it/house_rooms.rs` derives the graph from the code and fails on any use
//! that looks up).
//! - `api/`: pure Kubernetes formats, safe to fuzz: a request's `route` (classify a path),
//!   `query` (list and watch options), `token` (continue tokens), `media` (content
//!   negotiation); `status`, `resource`, `json`, `time`, `quantity`, `quote`, `wire`
//!   (protobuf framing), `selector`, `table`, `transcode`.
//! - `telemetry`: every metric family (names, help, labels) and the request metrics.
//! - `body`: the one HTTP body type, both ways: buffers, stored bytes stitched, streams, and
//!   WatchList runs with their kept deflated form; `Tapped`, a body passed on as it is with a
//!   `Tap` told of its polls (places held, progress and costs observed).
//! - `rate`: keyed token buckets (per-client rates).
//! - `upstream/`: the one way to the upstream apiserver: its client, connection pools
//!   (`pool`), health as kache's monitor finds it (`health`), the discovery documents kept
//!   for its outages (`last_discovery`), and the revision `ledger` (which resource wrote each
//!   recent revision of its storage).
//! - `cache/`: one kind's state, with a single writer: `KindCache` (snapshot, progress,
//!   fan-out), `store` (persistent maps, index), `window` (recent events), `object` (stored
//!   bytes and selector fields), `rings` (per-node and per-namespace fan-out), `deflated`
//!   (WatchList runs kept deflated), `state` (a cache saved to disk as `SavedState` and read
//!   back, or `StateRefused`), and `feed/`, the reflector that fills a `KindCache`:
//!   `state` (its loop as a state machine), `reflector` (its LIST, WATCH and relist steps),
//!   `streamed` (an unpaged LIST's items cut as they arrive), `growing` (the initial list as
//!   it arrives), `initial` (the first list's turn and progress), `turns` (preloaded kinds
//!   listed one at a time), `freshness` (probes, and a page's metadata for `serve::check`),
//!   `account` (its part in the ledger), `decode` (JSON and protobuf), `fetch`.
//! - `auth/`: client identity (certificates, TokenReview), authorization
//!   (SubjectAccessReview), impersonation, serving certificates.
//! - `serve/`: everything one request touches, in order: `server` (accept, TLS, HTTP/1.1
//!   and HTTP/2, deadlines, stalled streams), `admission` (what one client may hold or start:
//!   places in flight, watches, large answers, rates), `read` (can the cache answer?
//!   authorization, freshness, or a typed `PassThrough` reason), `cost` (whether a
//!   consistent read waits for a proof or goes upstream at once), `check` (a consistent
//!   LIST checked against the upstream's metadata instead), `handler/` (`get`, `list`,
//!   `watch` from one snapshot), `respond` (the headers every answer carries), `compress`
//!   (gzip, indentation) on the `lane` (niced threads for one client's per-byte work), `proxy`
//!   (pass-through, upgrades), `discovery`, `tally` (its own answers counted).
//! - `config/`: the command line (clap), one module per subcommand's flags.
//! - `app/`: `kache serve`'s wiring, the `admin` listener (`/metrics`, `/readyz`,
//!   `/debug/cache`), `kache kubeconfig` and `kache status`.
//! - `sim/` (cargo feature `sim`, on by default): the simulated kube-apiserver, its
//!   catalogue, synthetic cluster, churn and launch (`kache sim`, `kache demo`).
//!
//! # Words
//! - **resource**, **kind**: a collection the upstream serves (group, version, plural:
//!   `api::resource::ResourceRef`).
//! - **cache**: one resource's objects in one encoding (`cache::KindCache`): a **snapshot**
//!   (a persistent map at one resourceVersion), the **window** (recent events, for watches
//!   that resume), and its watchers. Its **progress** is the newest RV it is proven at.
//! - **feed**: the reflector that fills one cache, its only writer (`cache::feed::Feed`; its
//!   loop `feed::state::Machine`, its failures `FeedError`).
//! - **proof**: the cache shown to have reached an RV: a bookmark or event, a freshness
//!   probe, or the **ledger** (every revision since the cache's progress another
//!   resource's write).
//! - **consistent read**: a read without a resourceVersion, which must show the upstream's
//!   current state: proven, **checked** (`serve::check`: the page compared with the
//!   upstream's metadata, its **stamps**), or passed through.
//! - **pass through**: the upstream answers, streamed through kache, for a
//!   [`serve::PassThrough`] reason; a **kept** discovery document is the upstream's last
//!   answer, sent through its outage.
//! - **stitch**: an answer written from the objects' stored bytes, not re-encoded.
//! - **flow**: whom admission counts a request against: the user, or every ServiceAccount of
//!   one namespace together. A **place** is one request's share of a bound (in flight, a
//!   watch, a pass-through, a large answer), held until its answer is sent.
//! - **limit**, **bound**: a cap a flag sets (`--max-...`) on what one request, object or
//!   client may cost; reaching one is counted in `kache_limit_hits_total`.
//! - **readiness check**: one line of `/readyz?verbose` (`app::admin::ReadyCheck`).
//!
//! # A LIST, followed through
//! 1. `serve::server::serve_with` accepts the connection (TLS, HTTP/1.1 or HTTP/2, within
//!    the handshake and header deadlines) and hands each request to `Serve::handle`
//!    (`Serve::call` does the same in-process).
//! 2. `serve::Asked::of` reads the request once: `api::route::classify` its path,
//!    `api::query::Options::parse` its query.
//! 3. `Serve::admit` checks the URI's length and authenticates the client
//!    (`auth::Security::caller`).
//! 4. `Serve::cached` (`serve/read.rs`): `Serve::plan` (method, resource, scope,
//!    `api::media::negotiate`), `Serve::authorize` (a cached SubjectAccessReview),
//!    `Serve::servable` (the feed, `Serve::feed`, synced), `Serve::within_stale_bound`, and
//!    `Serve::permit`, a place in flight (`serve::admission::limit`).
//! 5. `Serve::fresh_enough`; for a consistent LIST `Serve::consistent`: the client's turn
//!    when it has spent its rate of proofs (`Admission::queue_for_proof`), then the ledger
//!    (`Feed::ledger_proof`); else `serve::cost::Costs::decide` weighs the upstream's
//!    measured time for the answer's bytes against the proof's. Cheaper upstream,
//!    `Serve::checked` compares the page with the upstream's metadata
//!    (`Feed::page_stamps`) and, when they agree, answers at the upstream's RV
//!    (`handler::list_verified`); otherwise `Feed::upstream_rv` and `Feed::prove` wait for
//!    the cache to reach the upstream's current RV, no longer than the upstream would take.
//! 6. `Serve::answer` calls `serve::handler::list_in`: a snapshot (`KindCache::latest`, or
//!    `KindCache::at` for a past RV), its items selected (`handler::candidates`: the
//!    `spec.nodeName` index, selectors), stitched (`body::Stitch`: one vectored write of the
//!    stored bytes).
//! 7. A large answer waits for a place among its client's (`fair::Large::place`); its
//!    places are held until its body is sent (`admission::limit::Held`).
//! 8. `serve::shaped` indents or compresses it as asked (`serve::compress`).
//! 9. Whatever `Serve::cached` declines, `Serve::passed` sends through
//!    `serve::proxy::forward` and `upstream::Upstream`, streamed.
//!
//! # A WATCH, followed through
//! 1. Steps 1-4 as for a LIST, with a place among the client's watches
//!    (`Serve::watch_place`) instead of one in flight.
//! 2. `Serve::fresh_enough`: an RV newer than the cache's progress waits for its proof
//!    (`Serve::reached`). A WatchList of a kind still loading is sent the initial list as
//!    it arrives (`Serve::growing`, `handler::watch_growing`).
//! 3. `serve::handler::watch` subscribes to the `KindCache` (or a node's or
//!    namespace's ring, `cache::rings`) before it takes the snapshot, so no change falls
//!    between them.
//! 4. The backlog: the window's events since the RV (`cache::window::Window::since`), or
//!    the state as ADDED events and the initial-events-end bookmark; a whole collection's
//!    state goes in runs, whose deflated bytes are kept for the next gzipped WatchList
//!    (`cache::deflated`, `serve::compress::watch`).
//! 5. Live events: `KindCache::apply` (called by the feed) broadcasts each change; the
//!    watcher filters it by its selectors (`transition`) and encodes it into the client's
//!    chunks; bookmarks go every `--watch-bookmark-interval` and 2 s before the deadline.
//! 6. Bytes queued for a client are bounded per watch, per connection and per flow
//!    (`WatchBuffers`, `admission::limit::WatchFlows`); a watcher that falls behind by
//!    `--watcher-lag`, or whose stream takes nothing for the stall timeout
//!    (`serve::server::stall`), is ended, never skipped silently.
//! 7. Upstream side: `cache::feed::Feed::run` drives `feed::state::Machine` (LIST, WATCH
//!    from its RV, resume, relist on 410, back off on errors) through the steps of
//!    `feed/reflector.rs`: the LIST is one unpaged request over HTTP/1.1
//!    (`upstream::Class::Bulk`) whose items `feed::streamed` cuts as they arrive; objects are
//!    decoded as deep as the apiserver accepts (`api::json::with_value`), protobuf ones only
//!    as far as their key and selectable fields (`api::transcode::pb_to_json_only`).
//! 8. Shutdown: `Serve::end_watches` ends every watch so clients resume elsewhere.

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
