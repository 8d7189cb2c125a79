//! LIST: pick the snapshot the resourceVersion parameters ask for, walk it in key order
//! (through the field index when the selector allows: O(result)), cut a page, and stitch the
//! stored item bytes into a JSON or protobuf list.

use super::table::{self, Include};
use super::{candidates, get::content_type, get::metadata, RV_WAIT};
use crate::api::media::{Format, View};
use crate::api::query::{ListMode, Options};
use crate::api::status::Status;
use crate::api::token::Continue;
use crate::api::wire;
use crate::body::{try_stitched, Body, Piece, Stitch};
use crate::cache::object::Object;
use crate::cache::store::Snapshot;
use crate::cache::KindCache;
use crate::serve::lane::Lane;
use crate::serve::respond::respond;
use bytes::Bytes;
use http::{Response, StatusCode};
use std::sync::Arc;

const EXPIRED_CONTINUE: &str = "The provided continue parameter is too old to display a consistent list result. You can start a new list without the continue parameter, or use the continue token in this response to retrieve the remainder of the results. Continuing with the provided token results in an inconsistent list - objects that were created, modified, or deleted between the time the first chunk was returned and now may show up in the list.";

/// One page of a LIST: owned items (`Arc<Object>`), or items borrowed from the snapshot
/// while a response is stitched.
#[derive(Debug)]
pub struct Page<I = Arc<Object>> {
    /// The RV the page is consistent at.
    pub rv: u64,
    /// The page's items, in key order.
    pub items: Vec<I>,
    /// The continue token, when `limit` cut the list.
    pub cont: Option<String>,
    /// Items after this page (unfiltered lists only).
    pub remaining: Option<u64>,
}

/// A page borrowing its objects from a snapshot.
type Selected<'s> = Page<&'s Arc<Object>>;

impl Selected<'_> {
    fn owned(self) -> Page {
        Page { rv: self.rv, items: self.items.into_iter().cloned().collect(), cont: self.cont, remaining: self.remaining }
    }
}

/// Answer a LIST (in `namespace`, or across all), as the objects or their metadata
/// (`PartialObjectMetadataList`).
pub async fn list(cache: &KindCache, namespace: Option<&str>, opts: &Options, fmt: Format, view: View) -> Result<Response<Body>, Status> {
    let (rv, snap) = snapshot(cache, opts).await?;
    answer(cache, Verified { snap, rv, remaining: None }, namespace, opts, (fmt, view))
}

/// [`list`], a heavy one (see [`heavy`]) selected and stitched in `lane`, off the threads
/// that answer everyone else.
pub async fn list_in(
    lane: &Lane,
    cache: &Arc<KindCache>,
    namespace: Option<&str>,
    opts: &Options,
    fmt: Format,
    view: View,
) -> Result<Response<Body>, Status> {
    let (rv, snap) = snapshot(cache, opts).await?;
    let v = Verified { snap, rv, remaining: None };
    if !heavy(&v.snap, opts, view) {
        return answer(cache, v, namespace, opts, (fmt, view));
    }
    let (cache, ns, opts) = (cache.clone(), namespace.map(str::to_owned), opts.clone());
    let job = lane.spawn(move || answer(&cache, v, ns.as_deref(), &opts, (fmt, view)));
    job.await.unwrap_or_else(|e| Err(Status::internal(format!("the list was not answered: {e}"))))
}

/// Collections past this many objects are heavy to filter or print.
pub const HEAVY_OBJECTS: usize = 2_000;

/// Whether a LIST costs enough of a core to leave the shared threads: one that walks a
/// large collection testing selectors on every object (a label selector, or a field
/// selector no index answers), or prints it as a Table. An unfiltered list of objects is
/// stitched from stored bytes at a small cost per item.
fn heavy(snap: &Snapshot, opts: &Options, view: View) -> bool {
    snap.objects.len() > HEAVY_OBJECTS && (opts.filtered() || matches!(view, View::Table { .. }))
}

/// A LIST's page found current by the upstream's metadata (`serve::check`): the snapshot
/// whose page matched the upstream's, item for item, and what the upstream said of it.
pub struct Verified {
    /// The snapshot the page is read from.
    pub snap: Arc<Snapshot>,
    /// The resourceVersion the page is reported at, and its continue token carries.
    pub rv: u64,
    /// The upstream's `remainingItemCount`, reported in place of the snapshot's (the items
    /// after the page were not compared). `None`: the snapshot's own.
    pub remaining: Option<Option<u64>>,
}

/// Answer a LIST from a snapshot checked against the upstream's metadata ([`Verified`]).
pub fn list_verified(
    cache: &KindCache,
    v: Verified,
    namespace: Option<&str>,
    opts: &Options,
    shape: (Format, View),
) -> Result<Response<Body>, Status> {
    validate_fields(cache, opts)?;
    answer(cache, v, namespace, opts, shape)
}

/// The items a LIST's page holds in `snap`, and whether `limit` cut it: what a check
/// compares with the upstream's page.
pub fn page_items<'s>(cache: &KindCache, snap: &'s Snapshot, namespace: Option<&str>, opts: &Options) -> (Vec<&'s Arc<Object>>, bool) {
    let page = collect(snap, 0, namespace, opts, cache.resource.index.as_deref());
    (page.items, page.cont.is_some())
}

fn answer(
    cache: &KindCache,
    v: Verified,
    namespace: Option<&str>,
    opts: &Options,
    (fmt, view): (Format, View),
) -> Result<Response<Body>, Status> {
    let index = cache.resource.index.as_deref();
    let Verified { snap, rv, remaining } = v;
    // The body holds the snapshot and borrows the items' stored bytes from it.
    let body = try_stitched(snap, |snap| {
        let mut page = collect(snap, rv, namespace, opts, index);
        if let (Some(n), true) = (remaining, page.cont.is_some()) {
            page.remaining = n;
        }
        match view {
            View::Metadata { beta, .. } => stitch_metadata(cache, &page, fmt, beta),
            View::Table { beta } => stitch_table(cache, snap, &page, beta, opts),
            View::Object => stitch(cache, &page, fmt),
        }
    })?;
    Ok(respond(StatusCode::OK, content_type(fmt), body))
}

/// The page a LIST with `opts` returns: the snapshot its resourceVersion parameters ask for
/// (waiting for the cache, or 410/504), filtered and cut by `limit`/`continue`. Every view of
/// a LIST (encodings, the simulator's Table) is cut the same way.
pub async fn page(cache: &KindCache, namespace: Option<&str>, opts: &Options) -> Result<Page, Status> {
    let (rv, snap) = snapshot(cache, opts).await?;
    Ok(collect(&snap, rv, namespace, opts, cache.resource.index.as_deref()).owned())
}

/// Check the field selector, then pick the snapshot the request reads.
async fn snapshot(cache: &KindCache, opts: &Options) -> Result<(u64, Arc<Snapshot>), Status> {
    validate_fields(cache, opts)?;
    pick(cache, opts).await
}

/// The apiserver's 400 for a field selector on a field the kind does not select on.
fn validate_fields(cache: &KindCache, opts: &Options) -> Result<(), Status> {
    opts.fields.validate(&cache.resource.selectable_fields()).map_err(|e| Status::bad_request(e.to_string()))
}

/// Wait until the cache reaches `rv`, or fail with the apiserver's 504.
pub(crate) async fn reach(cache: &KindCache, rv: u64) -> Result<(), Status> {
    if cache.progress() >= rv || cache.wait_for(rv, RV_WAIT).await {
        Ok(())
    } else {
        Err(Status::too_large_rv(rv, cache.progress()))
    }
}

/// The snapshot a LIST reads and the RV it reports.
async fn pick(cache: &KindCache, opts: &Options) -> Result<(u64, Arc<Snapshot>), Status> {
    match opts.list_mode() {
        ListMode::Consistent | ListMode::Any => Ok(cache.latest()),
        ListMode::NotOlderThan(n) => {
            reach(cache, n).await?;
            Ok(cache.latest())
        }
        ListMode::Exact(n) => {
            reach(cache, n).await?;
            let snap = cache.at(n).map_err(|_| Status::expired("The resourceVersion for the provided list is too old."))?;
            Ok((n, snap))
        }
        ListMode::Continue => {
            let c = opts.cont.as_ref().ok_or_else(|| Status::internal("continue mode without a token"))?;
            let Ok(rv) = u64::try_from(c.rv) else {
                return Ok(cache.latest());
            };
            cache.at(rv).map(|s| (rv, s)).map_err(|_| {
                let mut s = Status::expired(EXPIRED_CONTINUE);
                s.continue_token = Some(Continue { rv: -1, ..c.clone() }.encode_bare());
                s
            })
        }
    }
}

fn collect<'s>(snap: &'s Snapshot, rv: u64, namespace: Option<&str>, opts: &Options, index: Option<&str>) -> Selected<'s> {
    let after = opts.cont.as_ref().map(|c| match namespace {
        Some(ns) => format!("{ns}/{}", c.after),
        None => c.after.clone(),
    });
    let after = after.as_deref();
    let limit = match opts.list_mode() {
        ListMode::Any => usize::MAX,
        _ if opts.limit == 0 => usize::MAX,
        _ => usize::try_from(opts.limit).unwrap_or(usize::MAX),
    };
    // A start key to start at (a hand-made token's): its object, if selected, then the rest.
    let at =
        opts.cont.as_ref().filter(|c| c.inclusive).and(after).and_then(|k| snap.get(k)).filter(|o| super::selected(o, namespace, opts));
    let mut matching = at.into_iter().chain(candidates(snap, namespace, opts, index, after));
    // Room for a node's pods without regrowing; larger lists grow from there.
    let mut items = Vec::with_capacity(limit.min(64));
    items.extend(matching.by_ref().take(limit));
    let mut page = Selected { rv, items, cont: None, remaining: None };
    if items_cut(&mut matching) {
        let last = page.items.last().map(|o| relative(&o.key, namespace)).unwrap_or_default();
        page.cont = Some(Continue { rv: i64::try_from(rv).unwrap_or(i64::MAX), after: last, inclusive: false }.encode());
        // The apiserver counts what is left only for unfiltered lists.
        if !opts.filtered() {
            page.remaining = Some(1 + matching.count() as u64);
        }
    }
    page
}

fn items_cut<'a>(rest: &mut impl Iterator<Item = &'a Arc<Object>>) -> bool {
    rest.next().is_some()
}

/// A key relative to the collection a request lists.
fn relative(key: &str, namespace: Option<&str>) -> String {
    match namespace {
        Some(ns) => key.strip_prefix(ns).and_then(|k| k.strip_prefix('/')).unwrap_or(key).to_string(),
        None => key.to_string(),
    }
}

/// A page's stored item bytes between a list head and tail, written to the socket without
/// being copied together.
fn stitch<'s>(cache: &KindCache, page: &Selected<'s>, fmt: Format) -> Result<Stitch<'s>, Status> {
    let r = &cache.resource;
    let missing = || Status::internal(format!("{} are not held in this encoding", r.plural));
    // Stored JSON items start with their `,` separator; the first item is sent without it.
    let skip = |i: usize| usize::from(i == 0 && fmt == Format::Json);
    let items = page
        .items
        .iter()
        .enumerate()
        .map(|(i, o)| stored(o, fmt).map(|b| Piece::Stored(&b[skip(i)..])).ok_or_else(missing))
        .collect::<Result<Vec<Piece<'s>>, Status>>()?;
    if fmt == Format::Json && r.custom() {
        // Custom resources' lists are unstructured: keys in byte order, so the items come
        // before `kind` and `metadata`, and `continue` is always written.
        let head = format!("{{\"apiVersion\":\"{}\",\"items\":[", r.api_version()).into_bytes();
        let mut tail = format!("],\"kind\":\"{}\",\"metadata\":{{\"continue\":\"{}\"", r.list_kind(), page.cont.as_deref().unwrap_or(""));
        if let Some(n) = page.remaining {
            tail.push_str(&format!(",\"remainingItemCount\":{n}"));
        }
        tail.push_str(&format!(",\"resourceVersion\":\"{}\"}}}}\n", page.rv));
        return Ok(Stitch { head, items, tail: tail.into_bytes().into() });
    }
    let head = list_head(&r.api_version(), &r.list_kind(), page, fmt, &items);
    let tail: &'static [u8] = if fmt == Format::Json { b"]}\n" } else { wire::UNKNOWN_SUFFIX };
    Ok(Stitch { head, items, tail: tail.into() })
}

/// A page as a `PartialObjectMetadataList`: each item's metadata sliced from its stored
/// bytes (JSON: between a constant item head and `}`; protobuf: a field-2 header, then the
/// stored message's field 1, which is a whole PartialObjectMetadata message).
fn stitch_metadata<'s>(cache: &KindCache, page: &Selected<'s>, fmt: Format, beta: bool) -> Result<Stitch<'s>, Status> {
    let r = &cache.resource;
    let missing = || Status::internal(format!("{} are not held in this encoding", r.plural));
    let mut items = Vec::with_capacity(page.items.len() * if fmt == Format::Json { 3 } else { 2 });
    for (i, o) in page.items.iter().enumerate() {
        let m = metadata(o, fmt).ok_or_else(missing)?;
        match fmt {
            Format::Json => {
                let head: &'static [u8] = match (beta, i) {
                    (false, 0) => b"{\"kind\":\"PartialObjectMetadata\",\"apiVersion\":\"meta.k8s.io/v1\",\"metadata\":",
                    (false, _) => b",{\"kind\":\"PartialObjectMetadata\",\"apiVersion\":\"meta.k8s.io/v1\",\"metadata\":",
                    (true, 0) => b"{\"kind\":\"PartialObjectMetadata\",\"apiVersion\":\"meta.k8s.io/v1beta1\",\"metadata\":",
                    (true, _) => b",{\"kind\":\"PartialObjectMetadata\",\"apiVersion\":\"meta.k8s.io/v1beta1\",\"metadata\":",
                };
                items.extend([Piece::Stored(head), Piece::Stored(m), Piece::Stored(b"}")]);
            }
            Format::Protobuf => items.extend([Piece::inline(&wire::item_header(m.len())), Piece::Stored(m)]),
        }
    }
    let api_version = View::meta_api_version(beta);
    let mut head = list_head(api_version, "PartialObjectMetadataList", page, fmt, &items);
    let tail: &'static [u8] = match fmt {
        // The apiserver writes an empty metadata list's items as null.
        Format::Json if items.is_empty() => {
            head.truncate(head.len() - 1);
            b"null}\n"
        }
        Format::Json => b"]}\n",
        Format::Protobuf => wire::UNKNOWN_SUFFIX,
    };
    Ok(Stitch { head, items, tail: tail.into() })
}

/// A page as a Table: the kind's columns, then a row per item from its stored cells and
/// metadata.
fn stitch_table<'s>(cache: &KindCache, snap: &Snapshot, page: &Selected<'s>, beta: bool, opts: &Options) -> Result<Stitch<'s>, Status> {
    let r = &cache.resource;
    let missing = || Status::internal(format!("{} are not printed", r.plural));
    let printer = snap.printer(&r.group, &r.plural).ok_or_else(missing)?;
    let include = Include::parse(opts.include_object.as_deref()).ok_or_else(missing)?;
    let now = table::now();
    let mut items = Vec::with_capacity(page.items.len() * 8);
    for (i, o) in page.items.iter().enumerate() {
        table::row(o, i, beta, include, now, &mut items).ok_or_else(missing)?;
    }
    Ok(Stitch { head: table::head(&printer, beta, &json_list_meta(page)), items, tail: b"]}\n".as_slice().into() })
}

/// The members of a JSON list's (or Table's) `metadata`: resourceVersion, then continue
/// and remainingItemCount when the page has them.
fn json_list_meta(page: &Selected<'_>) -> String {
    let mut meta = format!("\"resourceVersion\":\"{}\"", page.rv);
    if let Some(c) = &page.cont {
        meta.push_str(&format!(",\"continue\":\"{c}\""));
    }
    if let Some(n) = page.remaining {
        meta.push_str(&format!(",\"remainingItemCount\":{n}"));
    }
    meta
}

/// A list's head: JSON up to the items' `[`, or the protobuf envelope and ListMeta (sized
/// for `items`).
fn list_head(api_version: &str, list_kind: &str, page: &Selected<'_>, fmt: Format, items: &[Piece<'_>]) -> Vec<u8> {
    match fmt {
        Format::Json => {
            format!("{{\"kind\":\"{list_kind}\",\"apiVersion\":\"{api_version}\",\"metadata\":{{{}}},\"items\":[", json_list_meta(page))
                .into_bytes()
        }
        Format::Protobuf => {
            let meta = wire::list_meta(page.rv, page.cont.as_deref(), page.remaining);
            let raw_len = wire::len_field_size(1, meta.len()) + items.iter().map(|p| p.bytes().len()).sum::<usize>();
            let mut head = wire::envelope_prefix(api_version, list_kind, raw_len);
            wire::put_bytes(&mut head, 1, &meta);
            head
        }
    }
}

/// An object's stored bytes in `fmt`, if held.
fn stored(o: &Object, fmt: Format) -> Option<&Bytes> {
    match fmt {
        Format::Json => o.json.as_ref(),
        Format::Protobuf => o.pb.as_ref(),
    }
}
