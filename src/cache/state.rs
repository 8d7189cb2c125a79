//! One kind's cache saved to disk, so a restarted kache resumes its upstream watch from the
//! saved resourceVersion instead of relisting: the objects' bytes as the upstream sent them
//! (a JSON LIST item, or a bare protobuf message: what the feed builds an [`Object`] from),
//! the window's events, and the cache's resourceVersion, under a header that says whose
//! state it is.
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
//!   1 protobuf), the cache's resourceVersion and the window's floor (varints);
//! - the object count (varint), each object's `bytes`;
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
pub const VERSION: u32 = 1;

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
    /// The window's events, oldest first, resourceVersions increasing above `floor`.
    pub events: Vec<SavedEvent>,
}

/// Why a cache could not be saved.
#[derive(Debug, thiserror::Error)]
pub enum StateWriteError {
    /// The file name is empty, hidden, or not a plain name.
    #[error("state file name {0:?} is not a plain file name")]
    Name(String),
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
        }
    }
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
        let r = &cache.resource;
        let key = StateKey { cluster: cluster.to_string(), group: r.group.clone(), version: r.version.clone(), plural: r.plural.clone(), format };
        let objects = snap
            .objects
            .values()
            .map(|o| received(o, format).ok_or_else(|| StateWriteError::Unencoded(o.key.to_string())))
            .collect::<Result<Vec<Bytes>, _>>()?;
        let mut floor = snap.window.floor();
        let mut events: Vec<SavedEvent> = Vec::new();
        // The index of the saved event of each object version, by its address: a change's
        // `prev` is the object of the change before it, when that one is saved.
        let mut saved_at: HashMap<*const Object, usize> = HashMap::new();
        for e in snap.window.since(floor).into_iter().flatten() {
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
        Ok(SavedState { key, rv, floor, objects, events })
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
        put_varint(out, self.rv);
        put_varint(out, self.floor);
        put_varint(out, self.objects.len() as u64);
        for o in &self.objects {
            put_bytes(out, o);
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
            + varint(self.rv)
            + varint(self.floor);
        let objects = varint(self.objects.len() as u64) + self.objects.iter().map(|o| bytes(o)).sum::<usize>();
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

impl<W: Write> Sink for Summed<W> {
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

/// Write `state` to `dir/name` atomically: to `dir/.name.tmp` (created 0600), synced, renamed
/// over `dir/name`, the directory synced. The directory is created 0700 if missing. Returns
/// the bytes written.
pub fn write(dir: &Path, name: &str, state: &SavedState) -> Result<u64, StateWriteError> {
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
        let mut out = Summed { inner: std::io::BufWriter::new(file), crc: 0, err: None };
        state.encode(&mut out);
        let crc = out.crc;
        out.put(&crc.to_le_bytes());
        if let Some(e) = out.err {
            return Err(e);
        }
        let file = out.inner.into_inner().map_err(|e| e.into_error())?;
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
    let mut r = Reader { data: data.slice(PREAMBLE..data.len() - TRAILER) };
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
    let rv = r.varint()?;
    let floor = r.varint()?;
    if floor > rv {
        return Err(StateRefused::Corrupt("a window floor above the state's resourceVersion"));
    }
    let n = r.count()?;
    let mut objects = Vec::with_capacity(n);
    for _ in 0..n {
        objects.push(r.bytes()?);
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
    Ok(SavedState { key, rv, floor, objects, events })
}

/// The checked body, read front to back; running out is corruption (the length and
/// checksum matched, so the writer wrote it so).
struct Reader {
    data: Bytes,
}

impl Reader {
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
