//! The upstream's metadata of one page of a read: what `serve::check` compares the cache's
//! copy of that page with, to answer a consistent read from memory without a freshness
//! proof.

use super::decode::{self, Stamp};
use super::fetch::fetch;
use super::reflector::METADATA_LIST_PB;
use super::{Feed, FeedError};

/// One page of the upstream's answer as metadata: which objects, at which versions, at which
/// resourceVersion.
#[derive(Debug, Default)]
pub struct PageStamps {
    /// The page's items, in the upstream's order.
    pub ids: Vec<Stamp>,
    /// The list's resourceVersion.
    pub rv: u64,
    /// Its continue token (empty on the last page).
    pub cont: String,
    /// Its `remainingItemCount`, when it gives one.
    pub remaining: Option<u64>,
}

impl Feed {
    /// The upstream's answer to `path` (a LIST of this kind, with the client's scope,
    /// selectors and paging) as a protobuf PartialObjectMetadataList: every object's key and
    /// resourceVersion, which the apiserver encodes at a fraction of the CPU of the objects
    /// or their Table. An upstream found hung or unreachable fails it at once.
    pub async fn page_stamps(&self, path: &str) -> Result<PageStamps, FeedError> {
        let body = self.while_up(fetch(&self.upstream, path, METADATA_LIST_PB)).await?;
        let mut ids = Vec::new();
        let page = decode::pb_identities(&body, &mut ids)?;
        Ok(PageStamps { ids, rv: page.rv, cont: page.cont, remaining: page.remaining })
    }
}
