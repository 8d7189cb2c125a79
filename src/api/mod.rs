//! Kubernetes wire formats shared by every stage: pure functions and types with no I/O,
//! safe to fuzz. Nothing here knows about caches, connections or the simulator.

pub(crate) mod json;
pub(crate) mod media;
pub(crate) mod resource;
pub(crate) mod selector;
pub(crate) mod status;
pub(crate) mod table;
pub(crate) mod time;
pub(crate) mod transcode;
pub(crate) mod wire;
