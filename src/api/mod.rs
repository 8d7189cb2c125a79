//! Kubernetes wire formats shared by every stage: pure functions and types with no I/O,
//! safe to fuzz. Nothing here knows about caches, connections or the simulator.

pub mod json;
pub mod media;
pub mod resource;
pub mod selector;
pub mod status;
pub mod time;
pub mod transcode;
pub mod wire;
