//! The whole state as a WatchList: one streamed answer from the apiserver's watch cache
//! (`sendInitialEvents=true`), read up to its initial-events-end bookmark, instead of a
//! paged LIST.
//!
//! Why: a kube-apiserver answers a LIST's pages after the first (those with a `continue`
//! token) from etcd, not from its watch cache. A paged LIST of 30,000 pods cost a
//! kube-apiserver v1.36.2 11.2-12.3 s of CPU and etcd 1.5 s; the same state unpaged cost
//! it 6.3 s and etcd 0.05 s, and a WatchList of it 5.0 s (BENCHMARKS.md). A WatchList is
//! also read as it comes, with no whole answer held in memory, as pages are.
//!
//! The stream carries the state as ADDED events, then (before its end bookmark, which waits
//! for the apiserver's bookmark timer) any change made after the state was taken: those
//! are applied in order, so the list is the state at the bookmark's resourceVersion. An
//! upstream that refuses the request, or ends the stream without that bookmark (a server
//! without WatchList), is listed with pages from then on.

use super::decode::{self, Listed, RawEvent};
use super::fetch::{collection_path, error_response, next_data};
use super::growing;
use super::{DecodeError, Feed, InformerError};
use crate::api::media::Format;
use crate::api::resource::Resource;
use crate::api::table::CustomColumns;
use crate::api::wire;
use crate::cache::object::{Key, Object};
use crate::cache::window::{Event, EventType};
use bytes::BytesMut;
use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

/// `timeoutSeconds` of the stream: ample for any state (30,000 pods take 5-10 s).
const STREAM_TIMEOUT_SECONDS: u64 = 1800;

/// How long the stream may go without an event before its end bookmark: the apiserver
/// sends that bookmark on its next bookmark tick (about a second) after the state; a server
/// without WatchList takes the request for a plain watch and never sends it.
const QUIET: Duration = Duration::from_secs(10);

impl Feed {
    /// The whole state at the resourceVersion of the stream's initial-events-end bookmark;
    /// its events also go to the WatchLists sent the initial list as it loads (`growing`).
    pub(super) async fn list_streamed(&self, custom: Option<&Arc<CustomColumns>>) -> Result<(Listed, u64), InformerError> {
        let r = &self.cache.resource;
        let path = format!(
            "{}?watch=1&sendInitialEvents=true&resourceVersionMatch=NotOlderThan&allowWatchBookmarks=true&timeoutSeconds={STREAM_TIMEOUT_SECONDS}",
            collection_path(r)
        );
        let accept = match self.fmt {
            Format::Json => "application/json",
            Format::Protobuf => wire::PROTOBUF_WATCH,
        };
        let growing = (!self.synced()).then(|| self.start_growing());
        self.listed_page(0, 0, None);
        let resp = self.upstream.get(&path, accept).await?;
        if !resp.status().is_success() {
            return Err(error_response(resp, self.upstream.timeouts().own).await);
        }
        let mut body = resp.into_body();
        let (mut buf, mut state, mut bytes) = (BytesMut::new(), Streamed::default(), 0);
        let idle = self.upstream.timeouts().watch_idle;
        loop {
            let data = match tokio::time::timeout(QUIET, next_data(&mut body, idle)).await {
                Ok(data) => data?,
                Err(_) => return Err(InformerError::NoWatchList),
            };
            let Some(data) = data else { break };
            bytes += data.len() as u64;
            buf.extend_from_slice(&data);
            let mut events = Vec::new();
            let mut end = None;
            while let Some(ev) = decode::cut_event(self.fmt, &mut buf)? {
                end = state.take(r, self.fmt, ev, custom, &mut events)?;
                if end.is_some() {
                    break;
                }
            }
            if let Some(g) = &growing {
                g.push(events);
            }
            if let Some(rv) = end {
                return Ok((state.into_listed(), rv));
            }
            self.listed_page(state.len() as u64, bytes, None);
        }
        Err(InformerError::NoWatchList)
    }
}

/// A streamed list so far: the objects in the order they came (a deleted one leaves a
/// hole), where each key is, and the items that could not be decoded.
#[derive(Default)]
struct Streamed {
    objects: Vec<Option<Object>>,
    at: HashMap<Key, usize>,
    skipped: Vec<DecodeError>,
}

impl Streamed {
    /// Take one event; for readers of the growing list, the event it is (with the object's
    /// previous state); the state's resourceVersion at the initial-events-end bookmark.
    fn take(
        &mut self,
        r: &Resource,
        fmt: Format,
        ev: RawEvent,
        custom: Option<&Arc<CustomColumns>>,
        out: &mut Vec<Arc<Event>>,
    ) -> Result<Option<u64>, InformerError> {
        let kind = match ev.kind.as_str() {
            "ADDED" => EventType::Added,
            "MODIFIED" => EventType::Modified,
            "DELETED" => EventType::Deleted,
            "BOOKMARK" if decode::ends_initial_events(&ev.object) => {
                return decode::object_rv(fmt, &ev.object)
                    .map(Some)
                    .ok_or(DecodeError::Protobuf("bookmark without a resourceVersion").into())
            }
            "BOOKMARK" => return Ok(None),
            "ERROR" => return Err(decode::watch_error(&ev.object, fmt)),
            other => return Err(DecodeError::EventType(other.to_string()).into()),
        };
        match decode::event_object(r, fmt, &ev.object, custom) {
            Ok(o) => {
                let prev = self.put(kind, o.clone());
                out.push(match prev {
                    None if kind == EventType::Added => growing::added(o),
                    prev => {
                        let (object, prev) = (Arc::new(o), prev.map(Arc::new));
                        Arc::new(Event { rv: object.rv, kind, object, prev, prev_at_rv: None, at: std::time::Instant::now() })
                    }
                });
            }
            Err(e) => self.skipped.push(e),
        }
        Ok(None)
    }

    /// Apply a change; the object's previous state.
    fn put(&mut self, kind: EventType, o: Object) -> Option<Object> {
        match (self.at.get(&o.key).copied(), kind) {
            (Some(i), EventType::Deleted) => {
                self.at.remove(&o.key);
                self.objects[i].take()
            }
            (Some(i), _) => self.objects[i].replace(o),
            (None, EventType::Deleted) => None,
            (None, _) => {
                self.at.insert(o.key.clone(), self.objects.len());
                self.objects.push(Some(o));
                None
            }
        }
    }

    fn len(&self) -> usize {
        self.at.len()
    }

    fn into_listed(self) -> Listed {
        Listed { objects: self.objects.into_iter().flatten().collect(), skipped: self.skipped }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use bytes::Bytes;

    fn pods() -> Resource {
        crate::sim::catalog::simulated().into_iter().find(|r| r.plural == "pods").unwrap()
    }

    fn event(kind: &str, name: &str, rv: u64) -> RawEvent {
        let o = serde_json::json!({"kind": "Pod", "apiVersion": "v1", "metadata": {"name": name, "namespace": "ns", "resourceVersion": rv.to_string()}});
        RawEvent { kind: kind.to_string(), object: Bytes::from(o.to_string()) }
    }

    fn bookmark(rv: u64, end: bool) -> RawEvent {
        let ann = if end { serde_json::json!({"k8s.io/initial-events-end": "true"}) } else { serde_json::json!({}) };
        let o = serde_json::json!({"kind": "Pod", "apiVersion": "v1", "metadata": {"resourceVersion": rv.to_string(), "annotations": ann}});
        RawEvent { kind: "BOOKMARK".to_string(), object: Bytes::from(o.to_string()) }
    }

    #[test]
    fn changes_before_the_end_bookmark_are_applied_in_order_and_told_with_their_previous_state() {
        let (r, mut state, mut out) = (pods(), Streamed::default(), Vec::new());
        let stream = [
            event("ADDED", "a", 5),
            event("ADDED", "b", 6),
            event("ADDED", "c", 7),
            event("MODIFIED", "a", 8),
            event("DELETED", "b", 9),
            bookmark(9, false),
        ];
        for ev in stream {
            assert_eq!(state.take(&r, Format::Json, ev, None, &mut out).unwrap(), None);
        }
        assert_eq!(state.take(&r, Format::Json, bookmark(10, true), None, &mut out).unwrap(), Some(10), "the end bookmark's RV");
        let told: Vec<(EventType, &str, u64, Option<u64>)> =
            out.iter().map(|e| (e.kind, e.object.name(), e.object.rv, e.prev.as_ref().map(|p| p.rv))).collect();
        use EventType::*;
        assert_eq!(
            told,
            [(Added, "a", 5, None), (Added, "b", 6, None), (Added, "c", 7, None), (Modified, "a", 8, Some(5)), (Deleted, "b", 9, Some(6))]
        );
        let listed: Vec<(&str, u64)> = state.objects.iter().flatten().map(|o| (o.name(), o.rv)).collect();
        assert_eq!(listed, [("a", 8), ("c", 7)], "the state at the bookmark, in the order the objects came");
        assert_eq!(state.len(), 2);
    }

    #[test]
    fn an_error_event_is_the_lists_failure_and_an_undecodable_object_is_skipped() {
        let (r, mut state, mut out) = (pods(), Streamed::default(), Vec::new());
        let bad = RawEvent { kind: "ADDED".to_string(), object: Bytes::from_static(b"{\"metadata\":[]}") };
        assert_eq!(state.take(&r, Format::Json, bad, None, &mut out).unwrap(), None);
        assert_eq!((state.skipped.len(), out.len()), (1, 0));
        let gone = RawEvent { kind: "ERROR".to_string(), object: Bytes::from_static(b"{\"kind\":\"Status\",\"code\":410}") };
        assert!(matches!(state.take(&r, Format::Json, gone, None, &mut out), Err(InformerError::Expired)));
    }

    #[test]
    fn a_captured_protobuf_watch_list_ends_at_its_annotated_bookmark_with_every_added_object() {
        // The real apiserver's WatchList of labelled pods: ADDED events, the initial-events-end
        // bookmark at 61591, then a plain bookmark at 61592.
        let body = crate::testdata::golden("06b-watch-pods-sendinitialevents-labelselector.pb.body");
        let (r, mut state, mut out) = (pods(), Streamed::default(), Vec::new());
        let mut buf = BytesMut::from(&body[..]);
        let (mut added, mut end) = (0, None);
        while let Some(ev) = decode::cut_event(Format::Protobuf, &mut buf).unwrap() {
            added += usize::from(ev.kind == "ADDED");
            if let Some(rv) = state.take(&r, Format::Protobuf, ev, None, &mut out).unwrap() {
                end = Some(rv);
                break;
            }
        }
        assert_eq!(end, Some(61591));
        assert!(added > 0);
        assert_eq!((state.len(), out.len(), state.skipped.len()), (added, added, 0));
        assert!(!buf.is_empty(), "the plain bookmark after it is not read as the end");
        let rest = decode::cut_event(Format::Protobuf, &mut buf).unwrap().unwrap();
        assert_eq!(rest.kind, "BOOKMARK");
        assert!(!decode::ends_initial_events(&rest.object));
    }
}
