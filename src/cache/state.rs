//! One kind's cache saved to disk, so a restarted kache resumes its upstream watch from the
//! saved resourceVersion instead of relisting: the objects' bytes as the upstream sent them
//! (a JSON LIST item, or a bare protobuf message: what the feed builds an [`Object`] from),
//! the window's events, and the cache's resourceVersion, under a header that says whose
//! state it is. Beside each object's bytes, what ingest derived from them
//! ([`Object::derived`]): the same build of kache restores an object from that without
//! decoding its bytes again (most of a large kind's restart); another build decodes them.
//!
//! A file is written whole or not at all (a temporary file, synced, renamed over the old
//! one, the directory synced), readable by kache's user only. Reading refuses, with the
//! reason, anything that is not a complete state of this format written for this cluster
//! and resource: a refused state is never partly used.
//!
//! The layout, integers little-endian, `varint` as protobuf writes it (`prost::encoding`),
//! `bytes` a varint length then the bytes:
//! - [`MAGIC`] (8 bytes), the format [`VERSION`] (u32), the whole file's length (u64);
//! - the cluster, group, version and plural (`bytes` each), the encoding (one byte: 0 JSON,
//!   1 protobuf), the build of kache that wrote the derived parts (`bytes`, [`crate::VERSION`]),
//!   the cache's resourceVersion and the window's floor (varints);
//! - the object count (varint), each object's `bytes` then its derived parts' `bytes` (empty
//!   when not written);
//! - the event count (varint), each event: its type (one byte, as [`EventType`]), its
//!   resourceVersion (varint), its object's `bytes`, then the object before the change: 0
//!   (none), 1 and the index of the earlier event whose object it is (varint), or 2 and its
//!   `bytes`;
//! - the CRC-32 (IEEE) of every byte before it (u32).

use crate::api::media::Format;
use crate::cache::object::Object;
use crate::cache::window::EventType;
use crate::cache::KindCache;
use bytes::{Buf, Bytes};
use std::collections::HashMap;
use std::io::Write;
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
use std::path::Path;
use std::sync::Arc;

/// The first bytes of every state file.
pub const MAGIC: &[u8; 8] = b"kachest\n";

/// The format written; a file of any other is refused.
pub const VERSION: u32 = 2;

/// Magic, version and file length.
const PREAMBLE: usize = MAGIC.len() + 4 + 8;

/// The checksum's size.
const TRAILER: usize = 4;

/// Whose state a file holds: the cluster (as the caller identifies it), the resource and the
/// encoding its objects' bytes are in.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StateKey {
    /// The upstream cluster's identity, as the caller names it.
    pub cluster: String,
    /// The resource's API group ("" for the core group).
    pub group: String,
    /// The resource's API version.
    pub version: String,
    /// The resource's plural name.
    pub plural: String,
    /// The encoding of the objects' bytes.
    pub format: Format,
}

/// One change in the saved window.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SavedEvent {
    /// What happened.
    pub kind: EventType,
    /// The change's resourceVersion.
    pub rv: u64,
    /// The object after the change (for a deletion, its last state), as received.
    pub object: Bytes,
    /// The object before the change.
    pub prev: SavedPrev,
}

/// The object before a saved change, which filtered watches need to tell an object entering
/// or leaving their selector.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SavedPrev {
    /// The object did not exist.
    None,
    /// The object of the earlier saved event at this index (saved once, not again).
    Event(usize),
    /// A state from before the window, as received.
    Bytes(Bytes),
}

/// One kind's saved cache.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SavedState {
    /// Whose state this is.
    pub key: StateKey,
    /// The resourceVersion everything up to which the state reflects (the cache's progress):
    /// where the watch resumes.
    pub rv: u64,
    /// The oldest resourceVersion a watch can resume from the saved window.
    pub floor: u64,
    /// Every object, in key order, as received: a JSON LIST item (a built-in kind's without
    /// `kind` and `apiVersion`) or a bare protobuf message.
    pub objects: Vec<Bytes>,
    /// What ingest derived from each of `objects`, at the same index ([`Object::derived`];
    /// empty: not saved, the object is decoded from its bytes).
    pub derived: Vec<Bytes>,
    /// The build of kache that wrote `derived` ([`crate::VERSION`]): another build decodes the
    /// objects instead, as its ingest may derive otherwise.
    pub build: String,
    /// The window's events, oldest first, resourceVersions increasing above `floor`.
    pub events: Vec<SavedEvent>,
}

/// Why a cache could not be saved.
#[derive(Debug, thiserror::Error)]
pub enum StateWriteError {
    /// The file name is empty, hidden, or not a plain name.
    #[error("state file name {0:?} is not a plain file name")]
    Name(String),
    /// A custom resource whose Table cells come from its CRD's printer columns: the columns
    /// are read from the upstream when its feed lists, and are not saved.
    #[error("a resource with custom printer columns is not saved")]
    CustomColumns,
    /// An object of the state holds no bytes in the state's encoding.
    #[error("object {0} holds no bytes in the cache's encoding")]
    Unencoded(String),
    /// The file or directory could not be written.
    #[error("state not written: {0}")]
    Io(#[from] std::io::Error),
}

/// Why a saved state was not used.
#[derive(Debug, thiserror::Error)]
pub enum StateRefused {
    /// No state file.
    #[error("no saved state")]
    Missing,
    /// The file could not be read.
    #[error("saved state unreadable: {0}")]
    Unreadable(std::io::Error),
    /// The file is shorter than what it says it holds.
    #[error("saved state truncated: {len} bytes of {want}")]
    Truncated {
        /// The file's length.
        len: u64,
        /// The length its header gives (what a file of the format holds at least, when the
        /// header itself is cut).
        want: u64,
    },
    /// The file is not a state, or its bytes do not match their checksum.
    #[error("saved state corrupt: {0}")]
    Corrupt(&'static str),
    /// The file is of another format version.
    #[error("saved state of format version {0}, not {VERSION}")]
    ForeignVersion(u32),
    /// The state is another cluster's.
    #[error("saved state of another cluster ({0:?})")]
    OtherCluster(String),
    /// The state is another resource's.
    #[error("saved state of another resource ({0})")]
    OtherResource(String),
    /// The state's objects are in another encoding.
    #[error("saved state in another encoding ({0:?})")]
    OtherEncoding(Format),
    /// The state is newer than the cluster: its resourceVersion lies above the upstream's
    /// current one (the cluster's storage was restored from a backup, or started afresh).
    #[error("saved state at resourceVersion {rv}, above the cluster's {current}")]
    Ahead {
        /// The state's resourceVersion.
        rv: u64,
        /// The upstream's current resourceVersion.
        current: u64,
    },
    /// The state's objects cannot be built, or its window does not lead to its objects.
    #[error("saved state inconsistent: {0}")]
    Inconsistent(String),
}

impl StateRefused {
    /// A short bounded name of the reason (a metric's label).
    pub fn reason(&self) -> &'static str {
        match self {
            StateRefused::Missing => "missing",
            StateRefused::Unreadable(_) => "unreadable",
            StateRefused::Truncated { .. } => "truncated",
            StateRefused::Corrupt(_) => "corrupt",
            StateRefused::ForeignVersion(_) => "foreign_version",
            StateRefused::OtherCluster(_) => "other_cluster",
            StateRefused::OtherResource(_) => "other_resource",
            StateRefused::OtherEncoding(_) => "other_encoding",
            StateRefused::Ahead { .. } => "ahead",
            StateRefused::Inconsistent(_) => "inconsistent",
        }
    }
}

/// The upstream cluster as a saved state names it, and where it stands now.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Cluster {
    /// The UID of its `kube-system` namespace: the same across the apiserver's restarts and
    /// upgrades, new when its storage starts afresh.
    pub uid: String,
    /// Its current resourceVersion: no saved state may be newer.
    pub rv: u64,
}

/// Read the upstream's [`Cluster`] without a LIST of a kind kache may cache: a WatchList of
/// the namespace `kube-system` (its ADDED event names the UID; the initial-events-end
/// bookmark, sent once the apiserver's watch cache is fresh, the current resourceVersion).
/// An apiserver that does not serve WatchList is asked by one consistent LIST of that
/// namespace instead.
pub async fn cluster(upstream: &crate::upstream::Upstream) -> Result<Cluster, String> {
    const WATCH: &str = "/api/v1/namespaces?fieldSelector=metadata.name%3Dkube-system&watch=true&sendInitialEvents=true\
                         &resourceVersionMatch=NotOlderThan&allowWatchBookmarks=true&timeoutSeconds=30";
    match cluster_watched(upstream, WATCH).await {
        Ok(Some(c)) => Ok(c),
        Ok(None) => cluster_listed(upstream).await,
        Err(e) => Err(e),
    }
}

/// The [`Cluster`] a WatchList of `kube-system` names, or `None` when the upstream does not
/// answer it as one (refused, or ended without the initial-events-end bookmark).
async fn cluster_watched(upstream: &crate::upstream::Upstream, path: &str) -> Result<Option<Cluster>, String> {
    use crate::cache::feed::{decode::cut_event, fetch::next_data};
    let resp = upstream.get(path, "application/json").await.map_err(|e| e.to_string())?;
    if resp.status() != http::StatusCode::OK {
        return Ok(None);
    }
    let idle = upstream.timeouts().own;
    let (mut body, mut buf, mut uid) = (resp.into_body(), bytes::BytesMut::new(), None::<String>);
    while let Some(data) = next_data(&mut body, idle).await.map_err(|e| e.to_string())? {
        buf.extend_from_slice(&data);
        while let Some(event) = cut_event(Format::Json, &mut buf).map_err(|e| e.to_string())? {
            let object: serde_json::Value = serde_json::from_slice(&event.object).map_err(|e| e.to_string())?;
            let meta = &object["metadata"];
            match event.kind.as_str() {
                "ADDED" => uid = meta["uid"].as_str().map(str::to_string),
                "BOOKMARK" if meta["annotations"]["k8s.io/initial-events-end"] == "true" => {
                    let rv = meta["resourceVersion"].as_str().and_then(|v| v.parse().ok()).ok_or("the bookmark has no resourceVersion")?;
                    let uid = uid.filter(|u| !u.is_empty()).ok_or("the upstream has no kube-system namespace")?;
                    return Ok(Some(Cluster { uid, rv }));
                }
                "ERROR" => return Ok(None),
                _ => {}
            }
        }
        if buf.len() > 1 << 20 {
            return Err("the kube-system watch sent an event over 1 MiB".into());
        }
    }
    Ok(None)
}

/// The [`Cluster`] one consistent LIST of the namespace `kube-system` names.
async fn cluster_listed(upstream: &crate::upstream::Upstream) -> Result<Cluster, String> {
    const PATH: &str = "/api/v1/namespaces?fieldSelector=metadata.name%3Dkube-system";
    let body = crate::cache::feed::fetch(upstream, PATH, "application/json").await.map_err(|e| e.to_string())?;
    let list: serde_json::Value = serde_json::from_slice(&body).map_err(|e| format!("the namespace list does not parse: {e}"))?;
    let rv =
        list["metadata"]["resourceVersion"].as_str().and_then(|v| v.parse().ok()).ok_or("the namespace list has no resourceVersion")?;
    let uid = list["items"][0]["metadata"]["uid"].as_str().filter(|u| !u.is_empty()).ok_or("the upstream has no kube-system namespace")?;
    Ok(Cluster { uid: uid.to_string(), rv })
}

/// The file a resource's state is saved in: `core.v1.pods.json`, `apps.v1.deployments.pb`.
pub fn file_name(group: &str, version: &str, plural: &str, format: Format) -> String {
    let group = if group.is_empty() { "core" } else { group };
    let ext = match format {
        Format::Json => "json",
        Format::Protobuf => "pb",
    };
    format!("{group}.{version}.{plural}.{ext}")
}

/// An object's bytes in `format` as the feed received them.
fn received(o: &Object, format: Format) -> Option<Bytes> {
    match format {
        Format::Json => o.json_item(),
        Format::Protobuf => {
            let bare = o.pb_message_ref()?;
            let pb = o.pb.as_ref()?;
            Some(pb.slice_ref(bare))
        }
    }
}

impl SavedState {
    /// The state of `cache`, whose objects are held in `format`, for `cluster`: one snapshot's
    /// objects and window, and the progress read with it. An event whose object (or the one
    /// before it) holds no bytes in `format` is left out with every event before it: the
    /// saved window starts after it.
    pub fn of(cluster: &str, cache: &KindCache, format: Format) -> Result<SavedState, StateWriteError> {
        let (rv, snap) = cache.latest();
        if snap.custom.is_some() {
            return Err(StateWriteError::CustomColumns);
        }
        let r = &cache.resource;
        let key =
            StateKey { cluster: cluster.to_string(), group: r.group.clone(), version: r.version.clone(), plural: r.plural.clone(), format };
        let objects = snap
            .objects
            .values()
            .map(|o| received(o, format).ok_or_else(|| StateWriteError::Unencoded(o.key.to_string())))
            .collect::<Result<Vec<Bytes>, _>>()?;
        let derived = snap.objects.values().map(|o| Bytes::from(o.derived())).collect();
        // A watch may not resume below a relist told as differences (its deletions may lie
        // under it): the saved window starts above the last.
        let mut floor = snap.window.floor().max(cache.resumable_above());
        let mut events: Vec<SavedEvent> = Vec::new();
        // The index of the saved event of each object version, by its address: a change's
        // `prev` is the object of the change before it, when that one is saved.
        let mut saved_at: HashMap<*const Object, usize> = HashMap::new();
        let above = floor;
        for e in snap.window.since(snap.window.floor()).into_iter().flatten().filter(|e| e.rv > above) {
            let prev = match &e.prev {
                None => Some(SavedPrev::None),
                Some(p) => match saved_at.get(&Arc::as_ptr(p)) {
                    Some(&i) => Some(SavedPrev::Event(i)),
                    None => received(p, format).map(SavedPrev::Bytes),
                },
            };
            match (received(&e.object, format), prev) {
                (Some(object), Some(prev)) => {
                    saved_at.insert(Arc::as_ptr(&e.object), events.len());
                    events.push(SavedEvent { kind: e.kind, rv: e.rv, object, prev });
                }
                // A version that could not be rewritten at another resourceVersion: the
                // saved window starts after it.
                _ => {
                    events.clear();
                    saved_at.clear();
                    floor = e.rv;
                }
            }
        }
        Ok(SavedState { key, rv, floor, objects, derived, build: crate::VERSION.to_string(), events })
    }

    /// Fill `cache` (new, empty) with this state: the objects as they were at the window's
    /// floor (the saved objects with the window's changes undone, newest first), then the
    /// window's changes applied in order, so each event, its object before and the indexes
    /// are what the feed would have built; then the cache's progress at the state's
    /// resourceVersion. Refused, the cache untouched, when an object cannot be built or the
    /// changes do not lead to the saved objects.
    pub fn restore(&self, cache: &KindCache) -> Result<(), StateRefused> {
        let r = &cache.resource;
        // What a protobuf object's transcoding reads: the same for every object of the kind.
        let reads = crate::cache::object::read_projection(r);
        let build = |b: &Bytes| -> Result<Object, StateRefused> {
            let built = match self.key.format {
                Format::Json => crate::cache::feed::decode::json_object(r, b, None),
                Format::Protobuf => crate::cache::feed::decode::pb_object_reading(r, b, &reads),
            };
            built.map_err(|e| StateRefused::Inconsistent(format!("an object cannot be built: {e}")))
        };
        // Written by this build: each object from its derived parts, the bytes not decoded.
        let ours = self.build == crate::VERSION && self.derived.len() == self.objects.len();
        let object = |i: usize| -> Result<Object, StateRefused> {
            let b = &self.objects[i];
            if !ours {
                return build(b);
            }
            let derived = self.derived[i].as_ref();
            let from_parts = match self.key.format {
                Format::Json => Object::from_derived(r, derived, Some(b), None),
                Format::Protobuf => Object::from_derived(r, derived, None, Some(b)),
            };
            from_parts.ok_or_else(|| StateRefused::Inconsistent(format!("object {i}'s derived parts do not fit its bytes")))
        };
        let objects = build_all(self.objects.len(), &object)?;
        let mut state: HashMap<crate::cache::object::Key, Object> = HashMap::with_capacity(self.objects.len());
        for o in objects {
            if o.rv > self.rv {
                return Err(StateRefused::Inconsistent(format!("object {} above the state's resourceVersion", o.key)));
            }
            state.insert(o.key.clone(), o);
        }
        let changes = self.events.iter().map(|e| Ok((e.kind, build(&e.object)?))).collect::<Result<Vec<_>, StateRefused>>()?;
        let unled = |key: &str| StateRefused::Inconsistent(format!("the window does not lead to object {key}"));
        for (i, (kind, o)) in changes.iter().enumerate().rev() {
            let now = state.remove(&o.key);
            match (kind, &now) {
                (EventType::Deleted, None) => {}
                (EventType::Added | EventType::Modified, Some(n)) if n.rv == o.rv => {}
                _ => return Err(unled(&o.key)),
            }
            let before = match &self.events[i].prev {
                SavedPrev::None => None,
                SavedPrev::Event(j) => Some(changes[*j].1.clone()),
                SavedPrev::Bytes(b) => Some(build(b)?),
            };
            match (kind, before) {
                (EventType::Added, None) => {}
                (EventType::Modified | EventType::Deleted, Some(b)) if b.key == o.key => {
                    state.insert(b.key.clone(), b);
                }
                _ => return Err(unled(&o.key)),
            }
        }
        // Each change was undone from the state it led to: applied again, they lead back to it.
        cache.restore(state.into_values(), self.floor, changes, self.rv);
        Ok(())
    }

    /// The object before the change of event `i`, as received.
    pub fn prev_of(&self, i: usize) -> Option<&Bytes> {
        match &self.events.get(i)?.prev {
            SavedPrev::None => None,
            SavedPrev::Event(j) => self.events.get(*j).map(|e| &e.object),
            SavedPrev::Bytes(b) => Some(b),
        }
    }

    /// Write the state's bytes to `out`.
    fn encode(&self, out: &mut impl Sink) {
        out.put(MAGIC);
        out.put(&VERSION.to_le_bytes());
        out.put(&(self.encoded_len() as u64).to_le_bytes());
        for s in [&self.key.cluster, &self.key.group, &self.key.version, &self.key.plural] {
            put_bytes(out, s.as_bytes());
        }
        out.put(&[format_byte(self.key.format)]);
        put_bytes(out, self.build.as_bytes());
        put_varint(out, self.rv);
        put_varint(out, self.floor);
        put_varint(out, self.objects.len() as u64);
        for (i, o) in self.objects.iter().enumerate() {
            put_bytes(out, o);
            put_bytes(out, self.derived.get(i).map_or(&[][..], |d| d));
        }
        put_varint(out, self.events.len() as u64);
        for e in &self.events {
            out.put(&[e.kind as u8]);
            put_varint(out, e.rv);
            put_bytes(out, &e.object);
            match &e.prev {
                SavedPrev::None => out.put(&[0]),
                SavedPrev::Event(i) => {
                    out.put(&[1]);
                    put_varint(out, *i as u64);
                }
                SavedPrev::Bytes(b) => {
                    out.put(&[2]);
                    put_bytes(out, b);
                }
            }
        }
    }

    /// The file's length: everything [`SavedState::encode`] writes and the checksum.
    pub fn encoded_len(&self) -> usize {
        let varint = prost::encoding::encoded_len_varint;
        let bytes = |b: &[u8]| varint(b.len() as u64) + b.len();
        let key = &self.key;
        let header = [&key.cluster, &key.group, &key.version, &key.plural].iter().map(|s| bytes(s.as_bytes())).sum::<usize>()
            + 1
            + bytes(self.build.as_bytes())
            + varint(self.rv)
            + varint(self.floor);
        let derived = |i: usize| self.derived.get(i).map_or(&[][..], |d| d);
        let objects =
            varint(self.objects.len() as u64) + self.objects.iter().enumerate().map(|(i, o)| bytes(o) + bytes(derived(i))).sum::<usize>();
        let events = varint(self.events.len() as u64)
            + self
                .events
                .iter()
                .map(|e| {
                    1 + varint(e.rv)
                        + bytes(&e.object)
                        + 1
                        + match &e.prev {
                            SavedPrev::None => 0,
                            SavedPrev::Event(i) => varint(*i as u64),
                            SavedPrev::Bytes(b) => bytes(b),
                        }
                })
                .sum::<usize>();
        PREAMBLE + header + objects + events + TRAILER
    }
}

/// `build` of each index below `n`, in order, on every core: a large kind's objects are most of
/// a restart's time.
fn build_all<T, E>(n: usize, build: &(impl Fn(usize) -> Result<T, E> + Sync)) -> Result<Vec<T>, E>
where
    T: Send,
    E: Send,
{
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    let chunk = n.div_ceil(cores).max(1024);
    if n <= chunk {
        return (0..n).map(build).collect();
    }
    std::thread::scope(|s| {
        let parts: Vec<_> = (0..n)
            .step_by(chunk)
            .map(|start| s.spawn(move || (start..(start + chunk).min(n)).map(build).collect::<Result<Vec<T>, E>>()))
            .collect();
        let mut out = Vec::with_capacity(n);
        for p in parts {
            out.extend(p.join().unwrap_or_else(|e| std::panic::resume_unwind(e))?);
        }
        Ok(out)
    })
}

fn format_byte(f: Format) -> u8 {
    match f {
        Format::Json => 0,
        Format::Protobuf => 1,
    }
}

/// Where encoded bytes go: the file, through the checksum.
trait Sink {
    fn put(&mut self, b: &[u8]);
}

fn put_varint(out: &mut impl Sink, n: u64) {
    let mut buf = Vec::with_capacity(10);
    prost::encoding::encode_varint(n, &mut buf);
    out.put(&buf);
}

fn put_bytes(out: &mut impl Sink, b: &[u8]) {
    put_varint(out, b.len() as u64);
    out.put(b);
}

/// A writer that keeps the CRC-32 of what passed through and the first error met.
struct Summed<W> {
    inner: W,
    crc: u32,
    err: Option<std::io::Error>,
}

impl<W: Write> Sink for Summed<&mut W> {
    fn put(&mut self, b: &[u8]) {
        if self.err.is_none() {
            self.crc = zlib_rs::crc32::crc32(self.crc, b);
            if let Err(e) = self.inner.write_all(b) {
                self.err = Some(e);
            }
        }
    }
}

/// Whether `name` is a plain, visible file name (the temporary file is `.name.tmp`).
fn plain(name: &str) -> bool {
    !name.is_empty() && !name.starts_with('.') && !name.contains(['/', '\0'])
}

/// Write `state` to `dir/name` atomically ([`write_file`]), under its checksum. Returns the
/// bytes written.
pub fn write(dir: &Path, name: &str, state: &SavedState) -> Result<u64, StateWriteError> {
    write_file(dir, name, |file| {
        let mut out = Summed { inner: file, crc: 0, err: None };
        state.encode(&mut out);
        let crc = out.crc;
        out.put(&crc.to_le_bytes());
        out.err.map_or(Ok(()), Err)
    })
}

/// Write `dir/name` atomically with what `fill` writes: to `dir/.name.tmp` (created 0600),
/// synced, renamed over `dir/name`, the directory synced. The directory is created 0700 if
/// missing. Returns the bytes written.
pub fn write_file(
    dir: &Path,
    name: &str,
    fill: impl FnOnce(&mut std::io::BufWriter<std::fs::File>) -> std::io::Result<()>,
) -> Result<u64, StateWriteError> {
    if !plain(name) {
        return Err(StateWriteError::Name(name.to_string()));
    }
    std::fs::DirBuilder::new().recursive(true).mode(0o700).create(dir)?;
    let tmp = dir.join(format!(".{name}.tmp"));
    // A temporary file left by a crash keeps its mode if opened again: start afresh.
    match std::fs::remove_file(&tmp) {
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => return Err(e.into()),
        _ => {}
    }
    let file = std::fs::OpenOptions::new().write(true).create_new(true).mode(0o600).open(&tmp)?;
    let written = (|| {
        let mut out = std::io::BufWriter::new(file);
        fill(&mut out)?;
        let file = out.into_inner().map_err(|e| e.into_error())?;
        file.sync_all()?;
        file.metadata().map(|m| m.len())
    })();
    let len = match written {
        Ok(len) => len,
        Err(e) => {
            let _ = std::fs::remove_file(&tmp);
            return Err(e.into());
        }
    };
    std::fs::rename(&tmp, dir.join(name))?;
    std::fs::File::open(dir)?.sync_all()?;
    Ok(len)
}

/// Read `dir/name`, the state of `want` (its cluster, resource and encoding), or why it is
/// refused. Nothing of a refused file is used.
pub fn read(dir: &Path, name: &str, want: &StateKey) -> Result<SavedState, StateRefused> {
    let data = match std::fs::read(dir.join(name)) {
        Ok(d) => d,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Err(StateRefused::Missing),
        Err(e) => return Err(StateRefused::Unreadable(e)),
    };
    decode(Bytes::from(data), want)
}

/// A state from a file's bytes, checked in order: the magic, the version, the length, the
/// checksum, whose state it is, then the body.
fn decode(data: Bytes, want: &StateKey) -> Result<SavedState, StateRefused> {
    let len = data.len() as u64;
    let cut = || StateRefused::Truncated { len, want: (PREAMBLE + TRAILER) as u64 };
    let magic = data.get(..MAGIC.len()).unwrap_or(&data);
    if !MAGIC.starts_with(magic) {
        return Err(StateRefused::Corrupt("not a kache state file"));
    }
    let version = data.get(MAGIC.len()..MAGIC.len() + 4).ok_or_else(cut)?;
    let version = u32::from_le_bytes(version.try_into().map_err(|_| StateRefused::Corrupt("version"))?);
    if version != VERSION {
        return Err(StateRefused::ForeignVersion(version));
    }
    let stated = data.get(MAGIC.len() + 4..PREAMBLE).ok_or_else(cut)?;
    let stated = u64::from_le_bytes(stated.try_into().map_err(|_| StateRefused::Corrupt("length"))?);
    if stated < (PREAMBLE + TRAILER) as u64 {
        return Err(StateRefused::Corrupt("a stated length shorter than the header"));
    }
    if len < stated {
        return Err(StateRefused::Truncated { len, want: stated });
    }
    if len > stated {
        return Err(StateRefused::Corrupt("bytes after the stated length"));
    }
    let (body, sum) = data.split_at(data.len() - TRAILER);
    let sum = u32::from_le_bytes(sum.try_into().map_err(|_| StateRefused::Corrupt("checksum"))?);
    if zlib_rs::crc32::crc32(0, body) != sum {
        return Err(StateRefused::Corrupt("checksum mismatch"));
    }
    let mut r = StateBody { data: data.slice(PREAMBLE..data.len() - TRAILER) };
    let cluster = r.string()?;
    let (group, version, plural) = (r.string()?, r.string()?, r.string()?);
    let format = match r.byte()? {
        0 => Format::Json,
        1 => Format::Protobuf,
        _ => return Err(StateRefused::Corrupt("unknown encoding")),
    };
    if cluster != want.cluster {
        return Err(StateRefused::OtherCluster(cluster));
    }
    if (&group, &version, &plural) != (&want.group, &want.version, &want.plural) {
        return Err(StateRefused::OtherResource(format!("{group}/{version}/{plural}")));
    }
    if format != want.format {
        return Err(StateRefused::OtherEncoding(format));
    }
    let key = StateKey { cluster, group, version, plural, format };
    let build = r.string()?;
    let rv = r.varint()?;
    let floor = r.varint()?;
    if floor > rv {
        return Err(StateRefused::Corrupt("a window floor above the state's resourceVersion"));
    }
    let n = r.count()?;
    let (mut objects, mut derived) = (Vec::with_capacity(n), Vec::with_capacity(n));
    for _ in 0..n {
        objects.push(r.bytes()?);
        derived.push(r.bytes()?);
    }
    let n = r.count()?;
    let mut events: Vec<SavedEvent> = Vec::with_capacity(n);
    for i in 0..n {
        let kind = match r.byte()? {
            0 => EventType::Added,
            1 => EventType::Modified,
            2 => EventType::Deleted,
            _ => return Err(StateRefused::Corrupt("unknown event type")),
        };
        let at = r.varint()?;
        if at <= events.last().map_or(floor, |e| e.rv) || at > rv {
            return Err(StateRefused::Corrupt("event resourceVersions out of order"));
        }
        let object = r.bytes()?;
        let prev = match r.byte()? {
            0 => SavedPrev::None,
            1 => match usize::try_from(r.varint()?) {
                Ok(j) if j < i => SavedPrev::Event(j),
                _ => return Err(StateRefused::Corrupt("an event's previous object refers forward")),
            },
            2 => SavedPrev::Bytes(r.bytes()?),
            _ => return Err(StateRefused::Corrupt("unknown previous-object tag")),
        };
        events.push(SavedEvent { kind, rv: at, object, prev });
    }
    if r.data.has_remaining() {
        return Err(StateRefused::Corrupt("bytes after the last event"));
    }
    Ok(SavedState { key, rv, floor, objects, derived, build, events })
}

/// The checked body, read front to back; running out is corruption (the length and
/// checksum matched, so the writer wrote it so).
struct StateBody {
    data: Bytes,
}

impl StateBody {
    fn byte(&mut self) -> Result<u8, StateRefused> {
        if self.data.is_empty() {
            return Err(StateRefused::Corrupt("a body cut short"));
        }
        Ok(self.data.get_u8())
    }

    fn varint(&mut self) -> Result<u64, StateRefused> {
        prost::encoding::decode_varint(&mut self.data).map_err(|_| StateRefused::Corrupt("a malformed varint"))
    }

    /// A count of items of at least one byte each (so no count can ask for more room than
    /// the body has).
    fn count(&mut self) -> Result<usize, StateRefused> {
        match usize::try_from(self.varint()?) {
            Ok(n) if n <= self.data.len() => Ok(n),
            _ => Err(StateRefused::Corrupt("a count beyond the body")),
        }
    }

    fn bytes(&mut self) -> Result<Bytes, StateRefused> {
        match usize::try_from(self.varint()?) {
            Ok(n) if n <= self.data.len() => Ok(self.data.split_to(n)),
            _ => Err(StateRefused::Corrupt("a length beyond the body")),
        }
    }

    fn string(&mut self) -> Result<String, StateRefused> {
        String::from_utf8(self.bytes()?.to_vec()).map_err(|_| StateRefused::Corrupt("a name that is not UTF-8"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::resource::ResourceRef;
    use crate::cache::feed::decode;
    use crate::cache::Limits;
    use serde_json::Value;
    use std::os::unix::fs::PermissionsExt;

    fn pods() -> ResourceRef {
        Arc::new(crate::sim::catalog::resource("pods"))
    }

    fn want(format: Format) -> StateKey {
        StateKey { cluster: "cluster-a".into(), group: String::new(), version: "v1".into(), plural: "pods".into(), format }
    }

    /// The golden list's pods, decoded.
    fn golden_pods() -> Vec<Value> {
        let list: Value = serde_json::from_slice(&crate::testdata::golden("02a-list-pods.json.body")).unwrap();
        list["items"].as_array().unwrap().clone()
    }

    /// `v` at `rv` with `labels` merged in, as the feed builds it from the received item.
    fn received_pod(v: &Value, rv: u64, labels: &[(&str, &str)]) -> Object {
        let mut v = v.clone();
        v["metadata"]["resourceVersion"] = Value::from(rv.to_string());
        for (k, val) in labels {
            v["metadata"]["labels"][*k] = Value::from(*val);
        }
        decode::json_object(&pods(), &crate::cache::object::item_json(&v), None).unwrap()
    }

    /// A cache of the golden pods listed at 61509, then: web-1 relabelled, db-1 deleted, a
    /// new pod created and changed; progress at 61520.
    fn cache() -> KindCache {
        let items = golden_pods();
        let c = KindCache::new(pods(), 1, Limits::default());
        c.replace(items.iter().map(|v| received_pod(v, v["metadata"]["resourceVersion"].as_str().unwrap().parse().unwrap(), &[])), 61509);
        let web1 = items.iter().find(|v| v["metadata"]["name"] == "web-1").unwrap();
        let db1 = items.iter().find(|v| v["metadata"]["name"] == "db-1").unwrap();
        let mut web3 = web1.clone();
        web3["metadata"]["name"] = Value::from("web-3");
        c.apply(EventType::Modified, received_pod(web1, 61510, &[("tier", "front")]));
        c.apply(EventType::Deleted, received_pod(db1, 61511, &[]));
        c.apply(EventType::Added, received_pod(&web3, 61512, &[]));
        c.apply(EventType::Modified, received_pod(&web3, 61513, &[("tier", "back")]));
        c.advance(61520, false);
        c
    }

    /// A state written to a fresh directory: (its directory's guard, the directory, the
    /// state, the file's bytes).
    fn saved() -> (tempfile::TempDir, std::path::PathBuf, SavedState, Vec<u8>) {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().join("state");
        let state = SavedState::of("cluster-a", &cache(), Format::Json).unwrap();
        write(&dir, "pods", &state).unwrap();
        let bytes = std::fs::read(dir.join("pods")).unwrap();
        (tmp, dir, state, bytes)
    }

    /// `bytes` written as the state file, then read as `want`'s.
    fn reread(dir: &Path, bytes: &[u8], want: &StateKey) -> Result<SavedState, StateRefused> {
        std::fs::write(dir.join("pods"), bytes).unwrap();
        read(dir, "pods", want)
    }

    /// An event as (type, key, rv, key and rv of the object before).
    type Seen = (EventType, String, u64, Option<(String, u64)>);

    /// Each event of `c`'s window.
    fn window_of(c: &KindCache) -> Vec<Seen> {
        let snap = c.snapshot();
        let events = snap.window.since(snap.window.floor()).unwrap();
        events.map(|e| (e.kind, e.object.key.to_string(), e.rv, e.prev.as_ref().map(|p| (p.key.to_string(), p.rv)))).collect()
    }

    #[test]
    fn a_restored_cache_holds_the_objects_window_and_progress_it_was_saved_with() {
        let c = cache();
        let state = SavedState::of("cluster-a", &c, Format::Json).unwrap();
        let back = KindCache::new(pods(), 0, Limits::default());
        state.restore(&back).unwrap();
        assert_eq!(back.progress(), 61520);
        let (a, b) = (c.snapshot(), back.snapshot());
        assert_eq!(a.objects.len(), b.objects.len());
        for (k, o) in a.objects.iter() {
            assert_eq!(&**b.objects.get(k).unwrap(), &**o, "{k}");
        }
        assert_eq!(window_of(&back), window_of(&c));
        assert_eq!(b.window.floor(), a.window.floor());
        // A filtered watch tells a pod leaving its selector by the state before: kept.
        let relabelled = b.window.since(61509).unwrap().next().unwrap();
        assert!(relabelled.prev_at_rv.is_some(), "web-1's labels changed: the prior state at the change's RV is kept");
    }

    #[test]
    fn every_refusal_but_a_missing_file_has_its_series_from_the_start() {
        let io = || std::io::Error::other("x");
        let all = [
            StateRefused::Unreadable(io()),
            StateRefused::Truncated { len: 0, want: 1 },
            StateRefused::Corrupt("x"),
            StateRefused::ForeignVersion(0),
            StateRefused::OtherCluster(String::new()),
            StateRefused::OtherResource(String::new()),
            StateRefused::OtherEncoding(Format::Json),
            StateRefused::Ahead { rv: 2, current: 1 },
            StateRefused::Inconsistent(String::new()),
        ];
        let reasons: Vec<&str> = all.iter().map(StateRefused::reason).collect();
        assert_eq!(reasons, crate::telemetry::STATE_REFUSALS);
    }

    #[test]
    fn a_window_that_does_not_lead_to_the_saved_objects_is_refused_and_nothing_restored() {
        let c = cache();
        let mut state = SavedState::of("cluster-a", &c, Format::Json).unwrap();
        // The deletion's pod is still among the objects.
        let deleted = state.events.iter().find(|e| e.kind == EventType::Deleted).unwrap().object.clone();
        state.objects.push(deleted);
        let back = KindCache::new(pods(), 0, Limits::default());
        assert!(matches!(state.restore(&back), Err(StateRefused::Inconsistent(_))));
        assert_eq!((back.snapshot().objects.len(), back.progress()), (0, 0), "the cache is untouched");
        // An object the encoding cannot build (decoded: the state of another build).
        let mut state = SavedState::of("cluster-a", &c, Format::Json).unwrap();
        state.build = "0.0.0 (commit other)".into();
        state.objects[0] = Bytes::from_static(b"{not json");
        assert!(matches!(state.restore(&back), Err(StateRefused::Inconsistent(_))));
        assert_eq!(back.snapshot().objects.len(), 0);
    }

    #[test]
    fn a_caches_objects_window_and_rv_read_back_as_saved_and_rebuild_the_same_objects() {
        let c = cache();
        let (progress, snap) = c.latest();
        let state = SavedState::of("cluster-a", &c, Format::Json).unwrap();
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().join("state");
        let len = write(&dir, "pods", &state).unwrap();
        assert_eq!(len, state.encoded_len() as u64);
        let back = read(&dir, "pods", &want(Format::Json)).unwrap();
        assert_eq!(back, state);
        assert_eq!((back.rv, back.floor), (progress, 61509));
        assert_eq!((back.rv, snap.rv), (61520, 61513), "the watch resumes from the progress, not the last change");
        // The objects: the bytes received, in key order; each rebuilds the object held.
        let held: Vec<&Arc<Object>> = snap.objects.values().collect();
        assert_eq!(back.objects.len(), 3);
        for (bytes, o) in back.objects.iter().zip(&held) {
            assert_eq!(Some(bytes.clone()), o.json_item());
            assert_eq!(&decode::json_object(&pods(), bytes, None).unwrap(), &***o);
        }
        // The window: type, RV, object, and the object before each change.
        let window: Vec<_> = snap.window.since(61509).unwrap().collect();
        let got: Vec<(EventType, u64)> = back.events.iter().map(|e| (e.kind, e.rv)).collect();
        assert_eq!(
            got,
            [(EventType::Modified, 61510), (EventType::Deleted, 61511), (EventType::Added, 61512), (EventType::Modified, 61513)]
        );
        for (i, (saved, e)) in back.events.iter().zip(&window).enumerate() {
            assert_eq!(&decode::json_object(&pods(), &saved.object, None).unwrap(), &*e.object);
            assert_eq!(back.prev_of(i).cloned(), e.prev.as_ref().and_then(|p| p.json_item()), "event {i}");
        }
        assert!(matches!(back.events[0].prev, SavedPrev::Bytes(_)), "web-1's listed state, from before the window");
        assert_eq!(back.events[2].prev, SavedPrev::None, "web-3 is new");
        assert_eq!(back.events[3].prev, SavedPrev::Event(2), "web-3's earlier version is saved once");
        // Readable by kache's user only; no temporary file left.
        let mode = |p: &Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
        assert_eq!((mode(&dir.join("pods")), mode(&dir)), (0o600, 0o700));
        assert_eq!(std::fs::read_dir(&dir).unwrap().count(), 1);
        // Written again over itself, and over a temporary file a crash left open to all.
        std::fs::write(dir.join(".pods.tmp"), b"left").unwrap();
        std::fs::set_permissions(dir.join(".pods.tmp"), std::fs::Permissions::from_mode(0o666)).unwrap();
        write(&dir, "pods", &state).unwrap();
        assert_eq!(mode(&dir.join("pods")), 0o600);
        assert_eq!(read(&dir, "pods", &want(Format::Json)).unwrap(), state);
    }

    /// A window's event: type, object, object before.
    type Change = (EventType, Object, Option<Object>);

    /// The objects (in key order) and window of a cache.
    fn contents(c: &KindCache) -> (Vec<Object>, Vec<Change>) {
        let snap = c.snapshot();
        let objects = snap.objects.values().map(|o| (**o).clone()).collect();
        let window =
            snap.window.since(snap.window.floor()).unwrap().map(|e| (e.kind, (*e.object).clone(), e.prev.as_deref().cloned())).collect();
        (objects, window)
    }

    #[test]
    fn objects_restored_from_their_derived_parts_equal_those_decoded_from_their_bytes() {
        for format in [Format::Json, Format::Protobuf] {
            let c = match format {
                Format::Json => cache(),
                Format::Protobuf => {
                    let body = crate::testdata::golden("02a-list-pods.pb.body");
                    let (_, _, raw) = crate::api::wire::open_envelope(&body).unwrap();
                    let mut listed = Vec::new();
                    let mut pos = 0;
                    while pos < raw.len() {
                        let (field, _, range) = crate::api::wire::next_field(raw, &mut pos).unwrap();
                        if field == 2 {
                            listed.push(decode::pb_object(&pods(), &raw[range]).unwrap());
                        }
                    }
                    assert!(listed.len() > 1);
                    let c = KindCache::new(pods(), 1, Limits::default());
                    let top = listed.iter().map(|o| o.rv).max().unwrap();
                    c.replace(listed.iter().cloned(), top);
                    c.apply(EventType::Modified, listed[0].at_rv(top + 1));
                    c
                }
            };
            let ours = SavedState::of("cluster-a", &c, format).unwrap();
            assert!(ours.derived.iter().all(|d| !d.is_empty()), "{format:?}");
            let by_parts = KindCache::new(pods(), 0, Limits::default());
            ours.restore(&by_parts).unwrap();
            // Another build's state: the same bytes decoded.
            let theirs = SavedState { build: "0.0.0 (commit other)".into(), ..ours.clone() };
            let decoded = KindCache::new(pods(), 0, Limits::default());
            theirs.restore(&decoded).unwrap();
            assert_eq!(contents(&by_parts), contents(&decoded), "{format:?}");
            assert_eq!(contents(&by_parts), contents(&c), "{format:?}");
            // Derived parts that do not fit their bytes are refused, nothing restored.
            let mut bad = ours.clone();
            let d = &bad.derived[0];
            bad.derived[0] = d.slice(..d.len() - 1);
            let back = KindCache::new(pods(), 0, Limits::default());
            assert!(matches!(bad.restore(&back), Err(StateRefused::Inconsistent(_))), "{format:?}");
            assert_eq!(back.snapshot().objects.len(), 0);
        }
    }

    #[test]
    fn a_protobuf_cache_saves_the_bare_messages() {
        let body = crate::testdata::golden("01-get-pod.pb.body");
        let (_, _, bare) = crate::api::wire::open_envelope(&body).unwrap();
        let o = decode::pb_object(&pods(), bare).unwrap();
        let c = KindCache::new(pods(), 1, Limits::default());
        c.replace([o.clone()], o.rv);
        c.apply(EventType::Modified, o.at_rv(o.rv + 1));
        let state = SavedState::of("cluster-a", &c, Format::Protobuf).unwrap();
        let tmp = tempfile::tempdir().unwrap();
        write(tmp.path(), "pods", &state).unwrap();
        let back = read(tmp.path(), "pods", &want(Format::Protobuf)).unwrap();
        let held = c.snapshot().get(&o.key).unwrap().clone();
        assert_eq!(back.objects, [Bytes::copy_from_slice(held.pb_message_ref().unwrap())]);
        assert_eq!(decode::pb_object(&pods(), &back.objects[0]).unwrap(), *held);
        assert_eq!(back.prev_of(0).map(|b| &b[..]), Some(bare), "the listed message before the change");
        assert!(matches!(SavedState::of("cluster-a", &c, Format::Json), Err(StateWriteError::Unencoded(_))), "no JSON held");
    }

    #[test]
    fn an_event_without_the_encodings_bytes_starts_the_saved_window_after_it() {
        let c = KindCache::new(pods(), 1, Limits::default());
        let gone = Object::bare(crate::cache::object::key("ns", "gone"), 2);
        c.apply(EventType::Added, gone.clone());
        c.apply(EventType::Deleted, gone.at_rv(3));
        c.apply(EventType::Added, received_pod(&golden_pods()[0], 4, &[]));
        let state = SavedState::of("cluster-a", &c, Format::Json).unwrap();
        assert_eq!(state.floor, 3, "a watch from before the unsaved change cannot resume");
        assert_eq!(state.events.iter().map(|e| e.rv).collect::<Vec<_>>(), [4]);
    }

    #[test]
    fn a_missing_file_is_refused_as_missing() {
        let tmp = tempfile::tempdir().unwrap();
        assert!(matches!(read(tmp.path(), "pods", &want(Format::Json)), Err(StateRefused::Missing)));
    }

    #[test]
    fn a_changed_byte_is_refused_as_corrupt() {
        let (_tmp, dir, _, mut bytes) = saved();
        // A letter of web-2's name in its stored bytes: the file still parses, to other bytes.
        let at = bytes.windows(5).position(|w| w == b"web-2").unwrap();
        bytes[at] = b'x';
        let r = reread(&dir, &bytes, &want(Format::Json));
        assert!(matches!(r, Err(StateRefused::Corrupt("checksum mismatch"))), "{r:?}");
    }

    #[test]
    fn a_cut_file_is_refused_as_truncated_wherever_it_is_cut() {
        let (_tmp, dir, _, bytes) = saved();
        for cut in [bytes.len() - 1, bytes.len() / 2, PREAMBLE, 10, 3, 0] {
            let r = reread(&dir, &bytes[..cut], &want(Format::Json));
            assert!(matches!(r, Err(StateRefused::Truncated { .. })), "cut at {cut}: {r:?}");
        }
        for cut in 0..bytes.len() {
            assert!(matches!(decode(Bytes::copy_from_slice(&bytes[..cut]), &want(Format::Json)), Err(StateRefused::Truncated { .. })));
        }
    }

    #[test]
    fn another_format_version_is_refused_as_foreign() {
        let (_tmp, dir, _, mut bytes) = saved();
        // The format before derived parts were saved.
        bytes[MAGIC.len()..MAGIC.len() + 4].copy_from_slice(&1u32.to_le_bytes());
        let r = reread(&dir, &bytes, &want(Format::Json));
        assert!(matches!(r, Err(StateRefused::ForeignVersion(1))), "{r:?}");
    }

    #[test]
    fn another_clusters_resources_or_encodings_state_is_refused() {
        let (_tmp, dir, _, _) = saved();
        let other = StateKey { cluster: "cluster-b".into(), ..want(Format::Json) };
        assert!(matches!(read(&dir, "pods", &other), Err(StateRefused::OtherCluster(c)) if c == "cluster-a"));
        let other = StateKey { plural: "nodes".into(), ..want(Format::Json) };
        assert!(matches!(read(&dir, "pods", &other), Err(StateRefused::OtherResource(r)) if r == "/v1/pods"));
        let other = StateKey { version: "v2".into(), ..want(Format::Json) };
        assert!(matches!(read(&dir, "pods", &other), Err(StateRefused::OtherResource(_))));
        assert!(matches!(read(&dir, "pods", &want(Format::Protobuf)), Err(StateRefused::OtherEncoding(Format::Json))));
    }

    #[test]
    fn a_file_name_that_is_not_plain_is_an_error() {
        let tmp = tempfile::tempdir().unwrap();
        let state = SavedState::of("cluster-a", &cache(), Format::Json).unwrap();
        for name in ["", ".pods", "a/b", "../pods", "p\0"] {
            assert!(matches!(write(tmp.path(), name, &state), Err(StateWriteError::Name(_))), "{name:?}");
        }
    }

    /// The bytes of a file holding `body` after a valid preamble, with a matching checksum:
    /// what reaches the body's parser.
    fn sealed(body: &[u8]) -> Bytes {
        let mut out = MAGIC.to_vec();
        out.extend_from_slice(&VERSION.to_le_bytes());
        out.extend_from_slice(&((PREAMBLE + body.len() + TRAILER) as u64).to_le_bytes());
        out.extend_from_slice(body);
        out.extend_from_slice(&zlib_rs::crc32::crc32(0, &out).to_le_bytes());
        Bytes::from(out)
    }

    proptest::proptest! {
        #[test]
        fn random_bytes_are_refused(data in proptest::collection::vec(proptest::num::u8::ANY, 0..300)) {
            proptest::prop_assert!(decode(Bytes::from(data), &want(Format::Json)).is_err());
        }

        #[test]
        fn a_changed_byte_anywhere_is_refused(at in proptest::num::usize::ANY, flip in 1u8..=255) {
            let (_tmp, _, _, mut bytes) = saved();
            let at = at % bytes.len();
            bytes[at] ^= flip;
            proptest::prop_assert!(decode(Bytes::from(bytes), &want(Format::Json)).is_err());
        }

        /// Derived parts not written by `Object::derived` are refused or fit, never panic.
        #[test]
        fn any_derived_parts_are_read_or_refused_without_panicking(
            data in proptest::collection::vec(proptest::num::u8::ANY, 0..200),
        ) {
            let item = br#"{"metadata":{"name":"a","resourceVersion":"1"}}"#;
            let _ = Object::from_derived(&pods(), &data, Some(item), None);
            let _ = Object::from_derived(&pods(), &data, None, Some(b"\x0a\x00"));
        }

        /// Bodies that pass the checksum but were not written by `encode` never panic the
        /// parser.
        #[test]
        fn any_checksummed_body_is_read_or_refused_without_panicking(
            body in proptest::collection::vec(proptest::num::u8::ANY, 0..300),
            prefix in proptest::bool::ANY,
        ) {
            // Half of them after a valid key, so the parser reaches the objects and events.
            let mut b = Vec::new();
            if prefix {
                b.extend_from_slice(b"\x09cluster-a\x00\x02v1\x04pods\x00");
            }
            b.extend_from_slice(&body);
            let _ = decode(sealed(&b), &want(Format::Json));
        }
    }
}
