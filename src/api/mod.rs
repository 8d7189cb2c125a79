//! Kubernetes wire formats shared by every stage: pure functions and types with no I/O,
//! safe to fuzz. Nothing here knows about caches, connections or the simulator.
//! A request's grammar: its path (`route`), query (`query`, with continue tokens in
//! `token`), `Accept` (`media`); and what goes back: `status`, `json`, `wire` (protobuf
//! framing), `transcode`, `table`, `selector`, `time`, `quote`.

pub(crate) mod json;
pub mod media;
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
