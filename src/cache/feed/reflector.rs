//! The reflector's steps, which the state machine in `state` drives: LIST (paged, or a
//! relist by metadata that reads whole only the objects that changed) put into the cache,
//! and WATCH from an RV applying events and bookmarks as they arrive.

use super::decode::{self, ListJson, Listed, RawEvent, Stamp};
use super::fetch::{collection_path, error_response, fetch, fetch_in, next_data, object_at_path, page_path};
use super::state::Steps;
use super::{growing, streamed, yielding};
use super::{DecodeError, Feed, FeedError};
use crate::api::media::Format;
use crate::api::table::CustomColumns;
use crate::api::wire;
use crate::cache::object::{read_projection, Key, Object};
use crate::cache::window::EventType;
use crate::cache::Relisted;
use crate::telemetry;
use crate::upstream::Class;
use bytes::BytesMut;
use std::collections::HashMap;
use std::sync::atomic::Ordering;
use std::sync::Arc;

/// Items per page of a LIST.
const PAGE: u64 = 500;

/// Changed objects a relist reads one by one at most; beyond that it lists them all.
const FETCH_AT_MOST: usize = 1000;

/// A metadata LIST in protobuf.
pub(super) const METADATA_LIST_PB: &str = "application/vnd.kubernetes.protobuf;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1";

impl Steps for Feed {
    async fn list(&self, relist: bool) -> Result<u64, FeedError> {
        if relist && !self.condition.relisting.swap(true, Ordering::Relaxed) {
            tracing::info!(resource = %self.cache.resource.plural, fmt = ?self.fmt, "relisting");
            // Stale from now until the new list is in (see `staleness`).
            self.set_healthy(false);
        }
        let custom = self.custom_columns().await;
        let listed = if self.synced() {
            self.state(relist, custom.as_ref()).await
        } else {
            // The initial list: a large kind's takes a while, and a person waits for it.
            self.reporting(self.state(relist, custom.as_ref())).await
        };
        self.initial.tried();
        self.set_healthy(listed.is_ok());
        self.condition.forbidden.store(matches!(listed, Err(FeedError::Status { code: 403, .. })), Ordering::Relaxed);
        match listed {
            Ok((listed, rv)) => {
                self.install(listed, rv, custom);
                // Its readers go on from the cache, which now holds the list at `rv`.
                self.initial.end_growing(growing::End::Installed(rv));
                Ok(rv)
            }
            // A refusal is told once, by `refuse`.
            Err(e @ FeedError::Status { code: 406, .. }) => {
                self.initial.end_growing(growing::End::Failed);
                Err(e)
            }
            Err(e) => {
                self.initial.end_growing(growing::End::Failed);
                metrics::counter!(telemetry::RELISTS, &self.outcome_labels("failed")).increment(1);
                self.log_failure("list failed", None, &e);
                Err(e)
            }
        }
    }

    async fn watch(&self, mut rv: u64) -> (u64, Result<(), FeedError>) {
        let watched = self.watch_for(&mut rv, 240 + rand::random::<u64>() % 120).await;
        self.set_healthy(!matches!(watched, Err(FeedError::Transport(_) | FeedError::Status { .. } | FeedError::Stalled(_))));
        metrics::counter!(telemetry::WATCH_RESTARTS, &self.labels()).increment(1);
        match &watched {
            Ok(()) | Err(FeedError::Expired) => {}
            Err(e) => self.log_failure("watch failed; resuming", Some(rv), e),
        }
        (rv, watched)
    }

    /// Whether the CRD's printer columns differ from those the cache's cells were computed
    /// with (checked when a watch ends).
    async fn columns_changed(&self) -> bool {
        if self.cache.resource.protobuf {
            return false;
        }
        self.custom_columns().await != self.cache.snapshot().custom
    }

    async fn recovered(&self) {
        let mut health = self.upstream.health();
        if health.borrow_and_update().is_down() {
            let _ = health.wait_for(|h| !h.is_down()).await;
        } else {
            std::future::pending::<()>().await;
        }
    }

    // The upstream does not serve this kind in this encoding (a custom resource asked for
    // in protobuf): no retry can work. Requests pass through.
    fn refuse(&self, reason: &str) {
        let r = &self.cache.resource.plural;
        let why = format!("the upstream refuses {r} in {:?} (406 {reason}); this cache stays off", self.fmt);
        tracing::warn!(resource = %r, fmt = ?self.fmt, "{why}");
        let _ = self.refused.set(why);
    }
}

impl Feed {
    /// The upstream's state: on a relist of a protobuf kind, only the objects that changed
    /// are read whole, when few did.
    async fn state(&self, relist: bool, custom: Option<&Arc<CustomColumns>>) -> Result<(Listed, u64), FeedError> {
        if !(relist && self.cache.resource.protobuf) {
            return self.list_all(custom).await;
        }
        match self.list_changes().await {
            Ok(Some(listed)) => Ok(listed),
            Ok(None) => self.list_all(custom).await,
            Err(e @ FeedError::Transport(_)) => Err(e),
            // Anything else the metadata relist met (a refusal, an answer it could not
            // read) is no reason not to list the objects whole.
            Err(e) => {
                tracing::info!(resource = %self.cache.resource.plural, error = %e, "relist by metadata failed; listing every object");
                self.list_all(custom).await
            }
        }
    }

    /// Put a listed state into the cache: the initial one, or a relist's (open watchers get
    /// the differences, or are ended when that cannot be).
    fn install(&self, listed: Listed, rv: u64, custom: Option<Arc<CustomColumns>>) {
        let r = &self.cache.resource;
        self.skipped(&listed.skipped, None);
        let n = listed.objects.len();
        let outcome = if self.synced() {
            // A relist after the watch expired (an upstream restart, a long outage): open
            // watchers get the differences, not an end.
            match self.cache.relist(listed.objects, rv, custom) {
                Relisted::Diffed { added, modified, deleted } => {
                    tracing::info!(resource = %r.plural, objects = n, rv, fmt = ?self.fmt, added, modified, deleted, "relisted; watchers were sent the differences");
                    "diffed"
                }
                Relisted::Replaced(why) => {
                    tracing::warn!(resource = %r.plural, objects = n, rv, fmt = ?self.fmt, "relisted; state replaced and watchers ended: {why}");
                    "replaced"
                }
            }
        } else {
            // What the list brought and how long it took (the line scripts wait for).
            let (bytes, seconds) = self.initial.listed();
            let seconds = (seconds * 10.0).round() / 10.0;
            tracing::info!(resource = %r.plural, objects = n, bytes, seconds, rv, fmt = ?self.fmt, "informer synced");
            self.cache.replace_printed(listed.objects, rv, custom);
            "initial"
        };
        metrics::counter!(telemetry::RELISTS, &self.outcome_labels(outcome)).increment(1);
        self.condition.relisting.store(false, Ordering::Relaxed);
        self.synced.send_replace(true);
    }

    /// The whole state: one unpaged LIST read as it arrives ([`streamed`]), which a
    /// kube-apiserver answers from its watch cache. Once one broke off midway (a kube-apiserver
    /// ends any LIST at its `--request-timeout`, 1 minute by default, and kache's own lists
    /// pause while clients passed through stream), this feed pages from then on; if a paged
    /// list's snapshot expires before its last page (heavy churn, short history), that one
    /// list is unpaged.
    async fn list_all(&self, custom: Option<&Arc<CustomColumns>>) -> Result<(Listed, u64), FeedError> {
        if !self.initial.pages_only.load(Ordering::Relaxed) {
            let listed = self.list_streamed(custom).await;
            if let Err(e @ (FeedError::Transport(_) | FeedError::Stalled(_) | FeedError::Decode(DecodeError::Truncated))) = &listed {
                tracing::info!(resource = %self.cache.resource.plural, error = %e, "the unpaged list broke off; this kind is paged from now on");
                self.initial.pages_only.store(true, Ordering::Relaxed);
            }
            return listed;
        }
        match self.list_pages(custom).await {
            Err(FeedError::Expired) => {
                tracing::info!(resource = %self.cache.resource.plural, "paged list expired mid-way; listing unpaged");
                self.list_streamed(custom).await
            }
            other => other,
        }
    }

    /// The whole state as one unpaged LIST, each item decoded as soon as it has come (and
    /// sent to the WatchLists reading the initial list). Every [`PAGE`] items count as a
    /// page: the list's progress is told (`listed_page`, with what remains from a `limit=1`
    /// LIST asked alongside) and it yields to clients passed through (see `list_pages`).
    async fn list_streamed(&self, custom: Option<&Arc<CustomColumns>>) -> Result<(Listed, u64), FeedError> {
        let r = &self.cache.resource;
        let growing = (!self.synced()).then(|| self.initial.start_growing());
        self.listed_page(0, 0, None);
        let accept = match self.fmt {
            Format::Json => "application/json",
            Format::Protobuf => wire::PROTOBUF,
        };
        let path = collection_path(r);
        // The count is cheap (milliseconds); the list does not wait long for it.
        let count = async { tokio::time::timeout(std::time::Duration::from_secs(1), self.count()).await.ok().flatten() };
        let (total, resp) = tokio::join!(count, self.upstream.get_in(&path, accept, Class::Bulk));
        let (resp, idle) = (resp?, self.upstream.timeouts().own);
        if resp.status().as_u16() != 200 {
            return Err(error_response(resp, idle).await);
        }
        let (mut body, mut stream) = (resp.into_body(), streamed::StreamedList::new(self.fmt));
        let proj = read_projection(r);
        let (mut listed, mut bytes, mut told, mut budget) = (Listed::default(), 0, 0, yielding::MAX_YIELD);
        while let Some(data) = next_data(&mut body, idle).await? {
            bytes += data.len() as u64;
            let before = listed.objects.len();
            stream.push(&data, &mut |item| match self.fmt {
                Format::Json => listed.push(decode::json_object(r, item, custom)),
                Format::Protobuf => listed.push(decode::pb_object_reading(r, item, &proj)),
            })?;
            if let Some(g) = growing.as_ref().filter(|_| listed.objects.len() > before) {
                g.push(listed.objects[before..].iter().cloned());
            }
            let n = (listed.objects.len() + listed.skipped.len()) as u64;
            self.received(n, bytes);
            if n >= told + PAGE {
                told = n;
                self.listed_page(n, bytes, total.map(|t| t.saturating_sub(n)));
                self.yield_to_clients(growing.as_ref(), &mut budget).await;
            }
        }
        let meta = stream.finish()?;
        self.listed_page((listed.objects.len() + listed.skipped.len()) as u64, bytes, Some(0));
        Ok((listed, meta.rv))
    }

    /// How many objects the kind has, from a `limit=1` LIST (its `remainingItemCount`, which
    /// the apiserver gives when there is no selector); `None` when it cannot tell.
    async fn count(&self) -> Option<u64> {
        let path = page_path(&collection_path(&self.cache.resource), Some(1), "");
        let body = fetch(&self.upstream, &path, "application/json").await.ok()?;
        // The page's item is counted, not decoded.
        let page: ListJson<'_> = serde_json::from_slice(&body).ok()?;
        Some(page.remaining()? + page.items.len() as u64)
    }

    /// Between pages of a list kache is loading: wait while a client passed through for
    /// want of it streams a state (at most `budget` in all), unless a WatchList is being
    /// sent this very list (it waits for it; besides this one and the feed's, each of them
    /// holds a reference).
    async fn yield_to_clients(&self, growing: Option<&Arc<growing::Growing>>, budget: &mut std::time::Duration) {
        let before = *budget;
        if growing.is_some_and(|g| Arc::strong_count(g) > 2) || !self.yields.wait(budget).await {
            return;
        }
        let (r, waited) = (&self.cache.resource, (before - *budget).as_secs_f64());
        tracing::debug!(resource = %r.plural, fmt = ?self.fmt, waited, "the list yielded to a client passed through");
        if budget.is_zero() {
            tracing::info!(resource = %r.plural, "the list yielded its longest to clients' passed-through reads; it goes on");
        }
    }

    /// The whole state in pages of [`PAGE`] objects.
    async fn list_pages(&self, custom: Option<&Arc<CustomColumns>>) -> Result<(Listed, u64), FeedError> {
        let r = &self.cache.resource;
        let base = collection_path(r);
        let mut listed = Listed::default();
        let mut cont = String::new();
        let mut bytes = 0;
        // The initial list's objects go to WatchLists sent it as it loads, page by page.
        let growing = (!self.synced()).then(|| self.initial.start_growing());
        self.listed_page(0, 0, None);
        let mut budget = yielding::MAX_YIELD;
        loop {
            self.yield_to_clients(growing.as_ref(), &mut budget).await;
            let path = page_path(&base, Some(PAGE), &cont);
            let got = match self.fmt {
                Format::Json => fetch_in(&self.upstream, &path, "application/json", Class::Bulk).await?,
                Format::Protobuf => fetch_in(&self.upstream, &path, wire::PROTOBUF, Class::Bulk).await?,
            };
            bytes += got.len() as u64;
            let before = listed.objects.len();
            let next = match self.fmt {
                Format::Json => decode::json_page(r, &got, custom, &mut listed)?,
                Format::Protobuf => decode::pb_page(r, &got, &mut listed)?,
            };
            if let Some(g) = &growing {
                g.push(listed.objects[before..].iter().cloned());
            }
            self.listed_page((listed.objects.len() + listed.skipped.len()) as u64, bytes, next.remaining);
            if next.cont.is_empty() {
                return Ok((listed, next.rv));
            }
            cont = next.cont;
        }
    }

    /// Whether the cache's cells were computed with the printer columns the CRD has now (a
    /// consistent read of it): a CRD change decides a custom resource's columns without an
    /// event of the kind, so a Table proven at the upstream's state needs this as well.
    /// Built-in kinds: always.
    pub(crate) async fn columns_current(&self) -> bool {
        let cached = self.cache.snapshot().custom.clone();
        cached.is_none() || self.custom_columns().await == cached
    }

    /// A custom resource's printer columns for the cached version, read from its CRD
    /// (`None` for built-in kinds, and when the CRD cannot be read or has columns kache does
    /// not evaluate: then its Tables pass through).
    async fn custom_columns(&self) -> Option<Arc<CustomColumns>> {
        let r = &self.cache.resource;
        if r.protobuf {
            return None;
        }
        let path = format!("/apis/apiextensions.k8s.io/v1/customresourcedefinitions/{}.{}", r.plural, r.group);
        let body = match fetch(&self.upstream, &path, "application/json").await {
            Ok(body) => body,
            Err(e) => {
                tracing::info!(resource = %r.plural, error = %e, "the CRD could not be read; its Tables pass through");
                return None;
            }
        };
        // A CRD's schema may nest as deep as the objects it describes.
        match crate::api::json::with_value(&body, |crd| CustomColumns::of_crd(crd, &r.version)).ok()? {
            Ok(c) => Some(Arc::new(c)),
            Err(e) => {
                tracing::info!(resource = %r.plural, error = %e, "the CRD's Tables pass through");
                None
            }
        }
    }

    /// The upstream's state for a relist, reading whole only the objects that changed: a
    /// metadata LIST (protobuf PartialObjectMetadataList: name, namespace and RV of each
    /// object, a fraction of the objects' bytes) at some RV `L`, compared with the cache;
    /// each object that is new or at another RV is read at exactly `L`; the
    /// others are the cache's own. `None` when more than [`FETCH_AT_MOST`] (or a quarter of
    /// the objects) changed: a full LIST costs less then.
    ///
    /// After an upstream restart this is the difference between re-reading every object in
    /// every encoding (all of it for the restarted apiserver to encode) and a metadata list,
    /// a fraction of those bytes, plus the few objects that changed.
    async fn list_changes(&self) -> Result<Option<(Listed, u64)>, FeedError> {
        let r = &self.cache.resource;
        let (ids, rv) = self.identities().await?;
        let snap = self.cache.snapshot();
        let changed: Vec<Key> = ids
            .iter()
            // The same RV is the same write of the same object (a new uid came with its own
            // RV; `KindCache::relist` tells the two apart).
            .filter(|id| snap.get(&id.key).is_none_or(|o| o.rv != id.rv))
            .map(|id| id.key.clone())
            .collect();
        if changed.len() > FETCH_AT_MOST || changed.len() > ids.len() / 4 + 1 {
            tracing::info!(resource = %r.plural, changed = changed.len(), "many objects changed; listing them all");
            return Ok(None);
        }
        let (mut fresh, skipped) = self.objects_at(&changed, rv).await?;
        let mut listed = Listed { objects: Vec::with_capacity(ids.len()), skipped: Vec::new() };
        for id in &ids {
            match fresh.remove(&id.key) {
                Some(o) => listed.objects.push(o),
                None => match snap.get(&id.key) {
                    Some(o) if o.rv == id.rv => listed.objects.push(Object::clone(o)),
                    _ if skipped.contains_key(&id.key) => {}
                    // Read at `rv` but gone: the upstream's answers disagree; list it all.
                    _ => return Ok(None),
                },
            }
        }
        listed.skipped = skipped.into_values().flatten().collect();
        tracing::debug!(resource = %r.plural, listed = ids.len(), read = changed.len(), rv, "relist by metadata");
        Ok(Some((listed, rv)))
    }

    /// Every object's identity, from a paged metadata LIST, and the list's RV.
    async fn identities(&self) -> Result<(Vec<Stamp>, u64), FeedError> {
        let base = collection_path(&self.cache.resource);
        let mut ids = Vec::new();
        let mut cont = String::new();
        loop {
            let body = fetch_in(&self.upstream, &page_path(&base, Some(PAGE), &cont), METADATA_LIST_PB, Class::Bulk).await?;
            let page = decode::pb_identities(&body, &mut ids)?;
            if page.cont.is_empty() {
                return Ok((ids, page.rv));
            }
            cont = page.cont;
        }
    }

    /// The objects at `keys` as they were at exactly `rv`, eight at a time; those that
    /// cannot be decoded by key, with why.
    async fn objects_at(&self, keys: &[Key], rv: u64) -> Result<(HashMap<Key, Object>, HashMap<Key, Vec<DecodeError>>), FeedError> {
        use futures_util::StreamExt;
        let fetched: Vec<(Key, Result<Listed, FeedError>)> = futures_util::stream::iter(keys.iter().cloned())
            .map(|key| async move {
                let listed = self.object_at(&key, rv).await;
                (key, listed)
            })
            .buffer_unordered(8)
            .collect()
            .await;
        let (mut fresh, mut skipped) = (HashMap::new(), HashMap::new());
        for (key, listed) in fetched {
            let listed = listed?;
            for o in listed.objects {
                fresh.insert(o.key.clone(), o);
            }
            if !listed.skipped.is_empty() {
                skipped.insert(key, listed.skipped);
            }
        }
        Ok((fresh, skipped))
    }

    /// One object as it was at exactly `rv`: a LIST of its name with resourceVersionMatch
    /// Exact (a GET would give its current state, which may be newer than the RV the cache
    /// resumes watching from).
    async fn object_at(&self, key: &str, rv: u64) -> Result<Listed, FeedError> {
        let r = &self.cache.resource;
        let path = object_at_path(r, key, rv);
        let mut listed = Listed::default();
        match self.fmt {
            Format::Json => {
                let body = fetch(&self.upstream, &path, "application/json").await?;
                let list: ListJson<'_> = serde_json::from_slice(&body).map_err(DecodeError::from)?;
                for item in &list.items {
                    match decode::json_object(r, item.get().as_bytes(), None) {
                        Ok(o) => listed.objects.push(o),
                        Err(e) => listed.skipped.push(e),
                    }
                }
            }
            Format::Protobuf => {
                decode::pb_page(r, &fetch(&self.upstream, &path, wire::PROTOBUF).await?, &mut listed)?;
            }
        }
        Ok(listed)
    }

    /// Watch from `rv` for `timeout` seconds (bookmarks on), applying what arrives.
    pub(super) async fn watch_for(&self, rv: &mut u64, timeout: u64) -> Result<(), FeedError> {
        let r = &self.cache.resource;
        let path = format!("{}?watch=1&allowWatchBookmarks=true&resourceVersion={}&timeoutSeconds={timeout}", collection_path(r), *rv);
        let accept = match self.fmt {
            Format::Json => "application/json",
            Format::Protobuf => wire::PROTOBUF_WATCH,
        };
        let resp = self.upstream.get(&path, accept).await?;
        if !resp.status().is_success() {
            return Err(error_response(resp, self.upstream.timeouts().own).await);
        }
        // The upstream answers again: readiness need not wait for this watch to end.
        self.set_healthy(true);
        // A kache upstream may tell a deletion at a revision of its own choosing.
        let deletions = !resp.headers().contains_key(crate::api::FROM_CACHE_HEADER);
        let mut body = resp.into_body();
        let mut buf = BytesMut::new();
        let idle = self.upstream.timeouts().watch_idle;
        while let Some(data) = next_data(&mut body, idle).await? {
            buf.extend_from_slice(&data);
            while let Some(ev) = decode::cut_event(self.fmt, &mut buf)? {
                self.ingest(ev, rv, deletions)?;
            }
        }
        Ok(())
    }

    /// Apply one watch event: a change to the cache, a bookmark's progress, an ERROR's
    /// failure. An object that cannot be decoded is skipped (the watch goes on past it).
    /// `deletions`: whether a deletion's resourceVersion is the revision that deleted it
    /// (the apiserver's watch), so that the ledger may record it.
    fn ingest(&self, ev: RawEvent, rv: &mut u64, deletions: bool) -> Result<(), FeedError> {
        let kind = match ev.kind.as_str() {
            "ADDED" => EventType::Added,
            "MODIFIED" => EventType::Modified,
            "DELETED" => EventType::Deleted,
            "BOOKMARK" => {
                if let Some(brv) = decode::object_rv(self.fmt, &ev.object).filter(|b| *b > *rv) {
                    *rv = brv;
                    self.cache.advance(brv, true);
                }
                return Ok(());
            }
            "ERROR" => return Err(decode::watch_error(&ev.object, self.fmt)),
            other => return Err(DecodeError::EventType(other.to_string()).into()),
        };
        let custom = self.cache.snapshot().custom.clone();
        let object = match decode::event_object(&self.cache.resource, self.fmt, &ev.object, custom.as_ref()) {
            Ok(o) => o,
            Err(e) => {
                let orv = decode::object_rv(self.fmt, &ev.object);
                if let Some(orv) = orv {
                    self.record(kind, orv, deletions);
                }
                self.skipped(&[e], orv);
                *rv = (*rv).max(orv.unwrap_or(0));
                return Ok(());
            }
        };
        // An event at or below what we hold was already applied (a resumed stream, or the
        // other of the informer's watch and a freshness probe).
        let orv = object.rv;
        if self.cache.apply_newer(kind, object).is_some() {
            metrics::counter!(telemetry::EVENTS_INGESTED, &self.labels()).increment(1);
        }
        // Recorded once applied: the ledger never proves a kind by its own writes.
        self.record(kind, orv, deletions);
        *rv = (*rv).max(orv);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::json::MAX_DEPTH;
    use crate::api::resource::Resource;
    use crate::cache::feed::decode::tests::nested_widget;
    use crate::cache::KindCache;
    use bytes::Bytes;
    use std::sync::Mutex;
    use std::time::Duration;

    /// An upstream that answers a Widget LIST with `list(path)` and the first watch with
    /// `events` (one JSON line each) and then holds it open; later watches stay silent.
    /// Every path asked for is recorded.
    async fn upstream(
        list: impl Fn(&str) -> Vec<u8> + Send + Sync + 'static,
        events: Vec<Vec<u8>>,
    ) -> (crate::upstream::Upstream, Arc<Mutex<Vec<String>>>) {
        upstream_marked(list, events, false).await
    }

    /// [`upstream`], its watches marked as a kache's answers from its cache when `kache`.
    async fn upstream_marked(
        list: impl Fn(&str) -> Vec<u8> + Send + Sync + 'static,
        events: Vec<Vec<u8>>,
        kache: bool,
    ) -> (crate::upstream::Upstream, Arc<Mutex<Vec<String>>>) {
        type Body =
            http_body_util::StreamBody<futures_util::stream::BoxStream<'static, Result<http_body::Frame<Bytes>, std::convert::Infallible>>>;
        use futures_util::StreamExt;
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let asked = Arc::new(Mutex::new(Vec::new()));
        let (list, events) = (Arc::new(list), Arc::new(Mutex::new(Some(events))));
        let record = asked.clone();
        tokio::spawn(async move {
            loop {
                let (s, _) = listener.accept().await.unwrap();
                let (list, events, record) = (list.clone(), events.clone(), record.clone());
                let svc = hyper::service::service_fn(move |req: hyper::Request<hyper::body::Incoming>| {
                    let path = req.uri().to_string();
                    record.lock().unwrap().push(path.clone());
                    let watch = path.contains("watch=1");
                    let frames: Vec<Bytes> = match path {
                        p if p.contains("customresourcedefinitions") => {
                            let body = futures_util::stream::empty().boxed();
                            let resp = hyper::Response::builder().status(404).body(Body::new(body)).unwrap();
                            return std::future::ready(Ok::<_, std::convert::Infallible>(resp));
                        }
                        p if p.contains("watch=1") => {
                            events.lock().unwrap().take().unwrap_or_default().into_iter().map(Bytes::from).collect()
                        }
                        p => vec![Bytes::from(list(&p))],
                    };
                    let frames = futures_util::stream::iter(frames.into_iter().map(|b| Ok(http_body::Frame::data(b))));
                    let body = if watch { frames.chain(futures_util::stream::pending()).boxed() } else { frames.boxed() };
                    let mut resp = hyper::Response::new(Body::new(body));
                    if kache && watch {
                        resp.headers_mut().insert(crate::api::FROM_CACHE_HEADER, hyper::header::HeaderValue::from_static("true"));
                    }
                    std::future::ready(Ok(resp))
                });
                tokio::spawn(async move {
                    let io = hyper_util::rt::TokioIo::new(s);
                    let _ =
                        hyper_util::server::conn::auto::Builder::new(hyper_util::rt::TokioExecutor::new()).serve_connection(io, svc).await;
                });
            }
        });
        (crate::app::plain_upstream(&format!("http://{addr}")).unwrap(), asked)
    }

    /// The simulator's Widget custom resource, in JSON.
    fn widgets() -> Resource {
        Resource { protobuf: false, ..crate::sim::catalog::resource("widgets") }
    }

    /// A WidgetList at RV 9 of `a` (RV 5) and `b` (RV 6).
    fn two_widgets() -> Vec<u8> {
        let items = [nested_widget("a", 5, 3), nested_widget("b", 6, 3)].join(&b","[..]);
        [&b"{\"apiVersion\":\"v1\",\"kind\":\"WidgetList\",\"metadata\":{\"resourceVersion\":\"9\"},\"items\":["[..], &items, b"]}"]
            .concat()
    }

    fn event(kind: &str, object: &[u8]) -> Vec<u8> {
        [format!("{{\"type\":\"{kind}\",\"object\":").as_bytes(), object, b"}\n"].concat()
    }

    fn skipped_count(reason: &str) -> u64 {
        let text = telemetry::install().expect("the recorder").render();
        let series = format!("{}{{resource=\"widgets\",reason=\"{reason}\"}} ", telemetry::OBJECTS_SKIPPED);
        text.lines().find_map(|l| l.strip_prefix(&series)).map_or(0, |v| v.trim().parse().unwrap())
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn deep_objects_are_cached_by_list_and_watch_and_one_that_cannot_be_decoded_is_skipped() {
        telemetry::install();
        let (too_deep, no_name) = (skipped_count("too_deep"), skipped_count("metadata"));
        let r = Resource { protobuf: false, ..crate::sim::catalog::resource("widgets") };
        let nameless = b"{\"apiVersion\":\"fid.example.com/v1\",\"kind\":\"Widget\",\"metadata\":{\"resourceVersion\":\"4\"}}".to_vec();
        let items = [
            nested_widget("deepest", 5, MAX_DEPTH),
            nested_widget("deep", 6, 500),
            nested_widget("deeper-than-go", 7, MAX_DEPTH + 1),
            nameless,
            nested_widget("plain", 8, 3),
        ];
        let list = [
            &b"{\"apiVersion\":\"v1\",\"kind\":\"WidgetList\",\"metadata\":{\"resourceVersion\":\"9\"},\"items\":["[..],
            &items.join(&b","[..]),
            b"]}",
        ]
        .concat();
        let events = vec![
            event("ADDED", &nested_widget("deepest-too", 11, MAX_DEPTH)),
            event("MODIFIED", &nested_widget("deep", 12, 500)),
            event("ADDED", &nested_widget("deeper-than-go-too", 13, MAX_DEPTH + 1)),
            event("MODIFIED", &nested_widget("plain", 14, 4)),
        ];
        let (up, asked) = upstream(move |_| list.clone(), events).await;
        let cache = Arc::new(KindCache::new(Arc::new(r), 0, Default::default()));
        let feed = Feed::new(cache.clone(), Format::Json, up);
        let task = tokio::spawn(feed.clone().run());
        assert!(feed.wait_synced(Duration::from_secs(60)).await, "the feed syncs despite the objects it cannot decode");
        assert!(cache.wait_for(14, Duration::from_secs(60)).await, "the watch goes on past the object it skipped");
        let snap = cache.snapshot();
        let held: Vec<(&str, u64)> = snap.objects.values().map(|o| (&*o.key, o.rv)).collect();
        assert_eq!(held, [("default/deep", 12), ("default/deepest", 5), ("default/deepest-too", 11), ("default/plain", 14)]);
        assert_eq!(snap.get("default/deepest").unwrap().json_item_ref(), Some(&items[0][..]), "stored as sent");
        assert_eq!(skipped_count("too_deep") - too_deep, 2, "the list's and the watch's");
        assert_eq!(skipped_count("metadata") - no_name, 1);
        assert!(feed.healthy() && !feed.relisting());
        let asked = asked.lock().unwrap().clone();
        let watches: Vec<&String> = asked.iter().filter(|p| p.contains("watch=1")).collect();
        assert_eq!(watches.len(), 1, "one watch, never resumed: {asked:?}");
        assert!(watches[0].contains("resourceVersion=9&"), "{asked:?}");
        let lists = asked.iter().filter(|p| p.ends_with("/widgets")).count();
        assert_eq!(lists, 1, "one list, unpaged: {asked:?}");
        task.abort();
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn the_ledger_records_deletions_the_apiserver_told_and_not_those_a_kache_told() {
        for kache in [false, true] {
            let (r, list) = (widgets(), two_widgets());
            let events = vec![event("DELETED", &nested_widget("a", 11, 3)), event("MODIFIED", &nested_widget("b", 12, 3))];
            let (up, _) = upstream_marked(move |_| list.clone(), events, kache).await;
            let cache = Arc::new(KindCache::new(Arc::new(r), 0, Default::default()));
            let feed = Feed::new(cache.clone(), Format::Json, up.clone());
            let task = tokio::spawn(feed.clone().run());
            assert!(cache.wait_for(12, Duration::from_secs(60)).await, "both events applied");
            assert_eq!(cache.snapshot().objects.len(), 1, "a deleted");
            // Another resource of the same storage asks whether revisions 11 and 12 were
            // writes of others than its own.
            let ledger = up.ledger();
            let other = ledger.writer("", "configmaps").unwrap();
            ledger.trust(feed.account.writer.unwrap());
            ledger.trust(other);
            // A revision is recorded once its event is applied: wait for the last one's.
            let modified = ledger.wait_accounted(other, || 11, 12, Duration::from_secs(60)).await;
            assert_eq!(modified, Ok(()), "a modification is recorded whoever tells it");
            assert_eq!(ledger.accounted(other, 10, 11), !kache, "the deletion at 11, told by a kache: {kache}");
            task.abort();
        }
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_kind_whose_unpaged_list_breaks_off_is_listed_in_pages() {
        let (r, list) = (widgets(), two_widgets());
        // The unpaged answer ends after its first item, as a LIST cut at the apiserver's
        // request timeout does; pages come whole.
        let cut = list[..list.len() / 2].to_vec();
        let (up, asked) = upstream(move |path| if path.contains("limit=500") { list.clone() } else { cut.clone() }, Vec::new()).await;
        let cache = Arc::new(KindCache::new(Arc::new(r), 0, Default::default()));
        let feed = Feed::new(cache.clone(), Format::Json, up);
        let task = tokio::spawn(feed.clone().run());
        assert!(feed.wait_synced(Duration::from_secs(60)).await, "the feed syncs from pages");
        assert_eq!(cache.snapshot().objects.len(), 2);
        let asked = asked.lock().unwrap().clone();
        let lists: Vec<&String> = asked.iter().filter(|p| p.ends_with("/widgets") || p.contains("limit=500")).collect();
        assert_eq!(lists.len(), 2, "{asked:?}");
        assert!(lists[0].ends_with("/widgets") && lists[1].contains("limit=500"), "unpaged, then paged: {asked:?}");
        task.abort();
    }
}
