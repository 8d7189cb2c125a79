//! Cached reads: GET, LIST and WATCH answered from one [`KindCache`] snapshot by stitching
//! stored bytes. Shared by the simulator and `kache serve`; neither decodes objects here.
//!
//! [`KindCache`]: crate::cache::KindCache

mod get;
mod list;
mod watch;

pub use get::get;
pub use list::{list, page, Page};
pub use watch::{watch, WatchSettings};

use crate::object::Object;
use crate::query::Options;
use crate::selector::{FieldSource, LabelSource};

/// How long a request waits for the cache to reach a requested resourceVersion.
pub const RV_WAIT: std::time::Duration = std::time::Duration::from_secs(3);

/// Whether an object passes a request's namespace, label and field filters.
fn selected(o: &Object, namespace: Option<&str>, opts: &Options) -> bool {
    namespace.is_none_or(|ns| *o.namespace == *ns) && opts.labels.matches(o as &dyn LabelSource) && opts.fields.matches(o as &dyn FieldSource)
}
