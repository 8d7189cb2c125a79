//! Cached reads: GET, LIST and WATCH answered from one [`KindCache`] snapshot by stitching
//! stored bytes. Shared by the simulator and `kache serve`; neither decodes objects here.
//!
//! [`KindCache`]: crate::cache::KindCache

mod get;
mod list;
pub(crate) mod table;
mod watch;

pub use get::get;
pub use list::{list, list_in, list_verified, page, page_items, Page, Verified};
pub use watch::{
    watch, watch_growing, EndAfter, WatchBuffers, WatchRequest, WatchSettings, WATCH_BUFFERS_BYTES, WATCH_BUFFERS_PER_USER,
    WATCH_BUFFER_BYTES,
};

use crate::api::query::Options;
use crate::api::selector::{FieldSource, LabelSource};
use crate::cache::object::Object;
use crate::cache::store::Snapshot;
use std::sync::Arc;

/// How long a request waits for the cache to reach a requested resourceVersion.
pub const RV_WAIT: std::time::Duration = std::time::Duration::from_secs(3);

/// The objects a request selects from `snap`, in key order, after `after`: through the
/// index when the field selector pins the indexed field (O(result)), else the namespace's
/// key range.
pub(crate) fn candidates<'s: 'q, 'q>(
    snap: &'s Snapshot,
    namespace: Option<&'q str>,
    opts: &'q Options,
    index: Option<&'q str>,
    after: Option<&str>,
) -> impl Iterator<Item = &'s Arc<Object>> + Send + 'q {
    let pinned = index.and_then(|f| Some((f, opts.fields.exact(f)?)));
    let source: Box<dyn Iterator<Item = &'s Arc<Object>> + Send + 'q> = match pinned {
        Some((_, v)) => Box::new(snap.indexed(v, after)),
        None => Box::new(snap.range(namespace, after)),
    };
    // Objects from the index hold the pinned value: that term is not checked again.
    source.filter(move |o| selected_besides(o, namespace, opts, pinned))
}

/// Whether an object passes a request's namespace, label and field filters.
fn selected(o: &Object, namespace: Option<&str>, opts: &Options) -> bool {
    selected_besides(o, namespace, opts, None)
}

/// [`selected`] for an object known to hold `pinned.1` in field `pinned.0`.
fn selected_besides(o: &Object, namespace: Option<&str>, opts: &Options, pinned: Option<(&str, &str)>) -> bool {
    namespace.is_none_or(|ns| o.namespace() == ns)
        && opts.labels.matches(o as &dyn LabelSource)
        && opts.fields.matches_besides(o as &dyn FieldSource, pinned)
}

#[cfg(test)]
mod tests;
