//! Tests of the cached read path as a whole, against what a real kube-apiserver answered:
//! `views` (metadata and Table views), `fidelity` (byte-for-byte answers to captured reads),
//! `crd_views` (custom resources' Tables and metadata views).

mod crd_views;
mod fidelity;
mod hostile;
mod views;

use crate::api::media::{Format, View};
use crate::api::query::Options;
use crate::serve::handler::{WatchRequest, WatchSettings};

/// A WATCH of `opts` in `namespace` (`None`: every namespace), sent as `fmt` and `view`,
/// with the default timing and buffers.
fn watching(namespace: Option<&str>, opts: Options, fmt: Format, view: View) -> WatchRequest {
    WatchRequest { namespace: namespace.map(str::to_string), opts, fmt, view, settings: WatchSettings::default() }
}
