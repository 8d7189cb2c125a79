//! Kubernetes wire formats shared by every stage: pure functions and types with no I/O,
//! safe to fuzz. Nothing here knows about caches, connections or the simulator.
//! A request's grammar: its path (`route`), query (`query`, with continue tokens in
//! `token`), `Accept` (`media`); and what goes back: `status`, `json`, `wire` (protobuf
//! framing), `transcode`, `table`, `selector`, `time`, `quote`; `quantity` (resource quantities,
//! which kache's size flags take too).

pub(crate) mod json;
pub mod media;
pub(crate) mod quantity;
pub mod query;
pub(crate) mod quote;
pub(crate) mod resource;
pub mod route;
pub mod selector;
pub(crate) mod status;
pub(crate) mod table;
pub(crate) mod time;
pub mod token;
pub mod transcode;
pub(crate) mod wire;

/// The response header kache puts on every answer from its cache. A watch so marked may tell
/// a deletion at a resourceVersion kache chose (a relist's difference), not at the revision
/// that deleted the object, so a kache reading it (a tier) leaves such deletions out of its
/// revision ledger; the apiserver always tells a deletion at its own revision.
pub const FROM_CACHE_HEADER: &str = "kache-from-cache";
