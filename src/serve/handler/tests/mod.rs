//! Tests of the cached read path as a whole, against what a real kube-apiserver answered:
//! `views` (metadata and Table views), `fidelity` (byte-for-byte answers to captured reads),
//! `crd_views` (custom resources' Tables and metadata views).

mod crd_views;
mod fidelity;
mod hostile;
mod views;
