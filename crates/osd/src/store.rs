//! The object management layer (OML): objects as onodes plus data units located through the
//! on-flash index, over the shared FML.
//!
//! # On flash
//! - **Data units**: one write unit of one object, OOB record `Data { oid, offset, length, seq }`.
//! - **Descriptor pages**: onodes packed into a unit, OOB record `Descriptor`.
//! - **Index nodes**: the copy-on-write B+tree keyed `(oid, kind, offset)`: kind 0 maps an
//!   object to its onode's location (descriptor page, slot); kind 1 maps a run of the object's
//!   units to a run of consecutive write units (an extent: first unit, length).
//! - **Checkpoint**: a unit holding the committed index root and the id allocators.
//!
//! # Durability
//! FLUSH writes the data buffer, then the dirty onodes: everything written before it is
//! durable, found again by rolling forward the data units and descriptor pages written since the
//! last checkpoint, in sequence order. A checkpoint commits the index (dirty nodes written
//! children first) and then the checkpoint unit; the index nodes it replaced, descriptor pages
//! holding only tombstones, and the previous checkpoint unit are released only once the new
//! checkpoint is durable. Checkpoints run every `checkpoint_units` units written, at close, and
//! before GC erases a block from which it moved index nodes or descriptor pages (the durable
//! checkpoint still points at their old places, as in LFS).

use flash::fingerprint::{fold, mix};
use flash::gang::Vpa;
use flash::{Content, Flash, FlashError, Nanos, Payload};
use fml::{Fml, FmlConfig, FmlError, GcJob, GcStep, Owner, StreamId};
use rustc_hash::{FxHashMap, FxHashSet};
use serde::{Deserialize, Serialize};

use crate::api::{Attr, AttrValue, FlushScope, Osd, OsdError};
use crate::id::{ObjectId, Oid, PartitionId, FIRST_USER_ID};
use crate::index::{Index, IndexError, IndexKey, NodeAddr, NodeIo};
use crate::onode::{Onode, FIRST_USER_ATTR, INLINE_MAX_BYTES, ONODE_MAX_BYTES};
use crate::placement::{Hint, PageKind, Placement, Placer};
use crate::record::{
    content_crc, payload_crc, Record, RecordError, DATA_RECORD_BYTES, INDEX_RECORD_BYTES,
    LENGTH_LIMIT_BYTES, META_RECORD_BYTES, RECORD_MAX_BYTES,
};
use fml::buffer::{Entry, Fill, WriteBuffer};

mod small;
use small::{release_slot_in, SmallObject, KIND_SMALL};

const KIND_ONODE: u8 = 0;
const KIND_DATA: u8 = 1;
const SECTOR: u64 = 512;
const DESC_MAGIC: &[u8; 4] = b"ODSC";
const CKPT_MAGIC: &[u8; 4] = b"OSDC";
/// Version 2 added small-object pages; version 1 images (which have none) open unchanged.
const CKPT_VERSION: u32 = 2;
const ATIME_MAGIC: &[u8; 4] = b"OATM";
const ATIME_ENTRY_BYTES: usize = 24;
/// A data unit whose contents were lost (unreadable when GC moved it): reads fail.
const LOST: u32 = u32::MAX - 1;

/// How data units are mapped.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum IndexMode {
    /// Runs of consecutive units as one entry (seed 001 III-C).
    Extent,
    /// One entry per unit, for comparison (seed 001 V-C).
    Page,
}

/// Object store settings.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct OsdConfig {
    /// Placement policy (a run sets it from its `placement`).
    #[serde(skip)]
    pub placement: Placement,
    pub index_mode: IndexMode,
    /// Object data buffer (default 2 MiB, seed 000 V-E); 0 writes through.
    pub buffer_bytes: u64,
    /// Index node cache (default 8 MiB, seed 000 V-E).
    pub index_cache_bytes: u64,
    /// Onodes kept in memory (clean ones beyond this are dropped; default 32768).
    pub onode_cache_entries: usize,
    /// A checkpoint after this many units written since the last (default 4096); bounds
    /// recovery work.
    pub checkpoint_units: u64,
    /// Reads update objects' access times (default true). Under `split+atime` the times are
    /// journaled in atime pages; otherwise the onode is rewritten.
    pub atime: bool,
    /// Atime pages on flash before their entries are merged into the onodes (default 4).
    pub atime_merge_pages: usize,
    /// The small-object buffer (default true, seed 001 III-B and V-D): objects shorter than a
    /// write unit (less 36 bytes of headers), written with bytes, share small-object pages.
    pub small_objects: bool,
    /// Update blocks dedicated to real-time objects (priority attribute above 0) under the
    /// `ossd` placement (seed 000 IV-C), at most 8; default 0: their data is placed as any
    /// other object's. Combine with `fml.realtime_reserve_blocks` so that a real-time write
    /// also finds a free block without waiting for a collection.
    pub realtime_update_blocks: u8,
    /// The FML's settings (a run sets them once for whichever stack it builds).
    #[serde(skip)]
    pub fml: FmlConfig,
}

impl Default for OsdConfig {
    fn default() -> Self {
        OsdConfig {
            placement: Placement::Ossd,
            index_mode: IndexMode::Extent,
            buffer_bytes: 2 << 20,
            index_cache_bytes: 8 << 20,
            onode_cache_entries: 32768,
            checkpoint_units: 4096,
            atime: true,
            atime_merge_pages: 4,
            small_objects: true,
            realtime_update_blocks: 0,
            fml: FmlConfig::default(),
        }
    }
}

/// Counters of object store work.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub struct OsdStats {
    pub host_write_bytes: u64,
    pub host_read_bytes: u64,
    pub data_units_written: u64,
    pub data_units_read: u64,
    pub descriptor_pages_written: u64,
    pub descriptor_pages_read: u64,
    pub index_nodes_written: u64,
    pub index_nodes_read: u64,
    pub checkpoints: u64,
    pub rmw_reads: u64,
    pub units_lost: u64,
    pub small_pages_written: u64,
    pub small_pages_read: u64,
    pub atime_pages_written: u64,
}

/// What recovery did.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub struct Recovery {
    pub units_scanned: u64,
    pub checkpoint_seq: u64,
    pub records_rolled_forward: u64,
    /// Units recovery read whose payload failed its checksum (or the flash could not read):
    /// passed over as not written, like torn programs.
    pub units_damaged: u64,
    pub done_ns: Nanos,
}

struct CachedOnode {
    onode: Onode,
    dirty: bool,
    /// Where the durable version lives: (descriptor page, slot).
    loc: Option<(u32, u16)>,
}

struct DescPage {
    /// Object of each slot whose onode there is the current one.
    live: Vec<Option<Oid>>,
    /// Kept valid until the next checkpoint (it holds tombstones or is referenced by the
    /// durable checkpoint's roll-forward).
    pinned: bool,
}

/// Relocations GC reports, applied after each GC step (the index needs the FML, which GC holds).
#[derive(Default)]
struct GcLog {
    seq: u64,
    moves: Vec<(u32, u32, Record)>,
    lost: Vec<u32>,
}

impl GcLog {
    fn take_seq(&mut self) -> u64 {
        self.seq += 1;
        self.seq
    }
}

impl Owner for GcLog {
    fn recognizes(&mut self, _from: Vpa, oob: &[u8]) -> bool {
        matches!(Record::decode(oob), Ok(Some(_)))
    }

    fn before_copy(&mut self, _from: Vpa, oob: &mut [u8]) -> Option<StreamId> {
        // Every copy gets a fresh sequence number: recovery's roll-forward finds moved data, and
        // sequence numbers keep rising within each block, which lets recovery read only the
        // blocks written since the checkpoint. (A checkpoint keeps its own number in its page.)
        // The payload is copied unchanged, and so is its checksum.
        if let Ok(Some(sealed)) = Record::decode_sealed(oob) {
            let r = match sealed.record {
                Record::Data {
                    oid,
                    offset,
                    length,
                    ..
                } => Record::Data {
                    oid,
                    offset,
                    length,
                    seq: 0,
                    moved: true,
                },
                other => other,
            };
            let mut b = [0u8; RECORD_MAX_BYTES];
            let n = r
                .with_seq(self.take_seq())
                .encode(sealed.payload_crc, &mut b);
            oob[..n].copy_from_slice(&b[..n]);
        }
        None
    }

    fn relocated(&mut self, from: Vpa, to: Vpa, oob: &[u8]) {
        let r = Record::decode(oob)
            .ok()
            .flatten()
            .expect("GC moved a unit the store wrote");
        self.moves.push((from.0, to.0, r));
    }

    fn lost(&mut self, from: Vpa, _error: &FlashError) {
        self.lost.push(from.0);
    }
}

/// The index's view of the flash.
struct NodeFlash<'a, F: Flash> {
    fml: &'a mut Fml<F>,
    placer: &'a mut Placer,
    gc: &'a mut GcLog,
    stats: &'a mut OsdStats,
    released: &'a mut Vec<u32>,
    at: Nanos,
    done: Nanos,
}

impl<F: Flash> NodeIo for NodeFlash<'_, F> {
    fn read_node(&mut self, addr: NodeAddr, buf: &mut [u8]) -> Result<(), IndexError> {
        self.stats.index_nodes_read += 1;
        match read_checked(self.fml, self.at, addr, buf, INDEX_RECORD_BYTES) {
            Ok((t, Content::Bytes, Record::Index { .. })) => {
                self.done = self.done.max(t);
                Ok(())
            }
            Ok((_, c, r)) => Err(IndexError::Corrupted {
                addr,
                what: format!("unit holds a {} ({c:?}), not an index node", r.kind_name()),
            }),
            Err(BadUnit::Uncorrectable(_)) => Err(IndexError::Uncorrectable { addr }),
            Err(BadUnit::Corrupted(what)) => Err(IndexError::Corrupted { addr, what }),
            Err(BadUnit::Device(e)) => Err(IndexError::Device(e)),
        }
    }

    fn write_node(
        &mut self,
        buf: &[u8],
        level: u8,
        first_key: &IndexKey,
    ) -> Result<NodeAddr, IndexError> {
        let stream = self.placer.choose(&Hint {
            kind: PageKind::Index,
            oid: Oid::default(),
            object_bytes: 0,
            write_count: 0,
            priority: 0,
        });
        let rec = Record::Index {
            level,
            first_key: *first_key,
            seq: self.gc.take_seq(),
        };
        let mut oob = [0u8; RECORD_MAX_BYTES];
        let n = rec.encode(payload_crc(Payload::Bytes(buf)), &mut oob);
        let (v, t) = self
            .fml
            .write(self.at, stream, Payload::Bytes(buf), &oob[..n])?;
        self.done = self.done.max(t);
        self.stats.index_nodes_written += 1;
        Ok(v.0)
    }

    fn free_node(&mut self, addr: NodeAddr) {
        // The durable checkpoint may still reference it: released after the next one.
        self.released.push(addr);
    }
}

fn fml_err(e: FmlError) -> OsdError {
    OsdError::Device(e)
}

fn index_err(e: IndexError) -> OsdError {
    match e {
        IndexError::Corrupted { addr, what } => OsdError::Corrupted {
            what: format!("index node ({what})"),
            location: format!("unit {addr}"),
        },
        IndexError::Uncorrectable { addr } => OsdError::Uncorrectable {
            what: "index node".into(),
            location: format!("unit {addr}"),
        },
        IndexError::Device(e) => OsdError::Device(e),
        IndexError::Io(m) => OsdError::Internal(m),
    }
}

/// Why a checked read of a unit failed.
#[derive(Debug)]
enum BadUnit {
    /// The device failed (a power cut, ...): nothing is known about the unit.
    Device(FmlError),
    /// The flash could not read the unit (ECC failure, torn program), or its payload does not
    /// match the checksum in its OOB record: its contents are lost.
    Uncorrectable(String),
    /// The unit reads erased, or its OOB record is missing, damaged or foreign.
    Corrupted(String),
}

impl BadUnit {
    /// The store's error for a unit described by `what` at write unit `v`.
    fn into_osd(self, what: impl std::fmt::Display, v: u32) -> OsdError {
        match self {
            BadUnit::Device(e) => OsdError::Device(e),
            BadUnit::Uncorrectable(why) => OsdError::Uncorrectable {
                what: format!("{what} ({why})"),
                location: format!("unit {v}"),
            },
            BadUnit::Corrupted(why) => OsdError::Corrupted {
                what: format!("{what} ({why})"),
                location: format!("unit {v}"),
            },
        }
    }
}

/// Reads unit `v` whole (`data` one write unit) with the first `oob_len` bytes of its OOB area
/// (the record length of the kind the caller expects: the device time of the read depends on
/// it), and checks the payload against the checksum in the record (docs/FORMAT.md, section 3).
/// Every read of a whole unit goes through here, so no byte reaches a caller unchecked.
fn read_checked<F: Flash>(
    fml: &mut Fml<F>,
    at: Nanos,
    v: u32,
    data: &mut [u8],
    oob_len: usize,
) -> Result<(Nanos, Content, Record), BadUnit> {
    let mut oob = [0u8; RECORD_MAX_BYTES];
    let oob = &mut oob[..oob_len];
    let (t, content) = match fml.read(at, Vpa(v), data, oob) {
        Ok(x) => x,
        Err(FmlError::Flash(e @ FlashError::Uncorrectable { .. })) => {
            return Err(BadUnit::Uncorrectable(e.to_string()))
        }
        Err(e) => return Err(BadUnit::Device(e)),
    };
    if content == Content::Erased {
        return Err(BadUnit::Corrupted(
            "reads erased: its program never reached flash".into(),
        ));
    }
    let sealed = match Record::decode_sealed(oob) {
        Ok(Some(s)) => s,
        Ok(None) => return Err(BadUnit::Corrupted("no OOB record".into())),
        Err(e) => return Err(BadUnit::Corrupted(format!("OOB record: {e}"))),
    };
    if content_crc(content, data) != Some(sealed.payload_crc) {
        return Err(BadUnit::Uncorrectable(format!(
            "{} payload checksum mismatch",
            sealed.record.kind_name()
        )));
    }
    Ok((t, content, sealed.record))
}

/// Objects end below 2^48 bytes (256 TiB): data records store lengths in 48 bits.
fn too_long(end: u64) -> OsdError {
    OsdError::InvalidArgument(format!(
        "an object would end at byte {end}; objects end below 2^48 bytes (256 TiB)"
    ))
}

fn extent(v: u64) -> (u32, u32) {
    ((v >> 32) as u32, v as u32)
}

fn pack(start: u32, len: u32) -> u64 {
    (start as u64) << 32 | len as u64
}

fn onode_key(oid: Oid) -> IndexKey {
    IndexKey {
        oid: oid.as_u128(),
        kind: KIND_ONODE,
        offset: 0,
    }
}

fn data_key(oid: Oid, unit: u64) -> IndexKey {
    IndexKey {
        oid: oid.as_u128(),
        kind: KIND_DATA,
        offset: unit,
    }
}

pub struct ObjectStore<F: Flash> {
    fml: Fml<F>,
    config: OsdConfig,
    unit: usize,
    index: Index,
    gc: GcLog,
    placer: Placer,
    onodes: FxHashMap<Oid, CachedOnode>,
    desc: FxHashMap<u32, DescPage>,
    buf: WriteBuffer<(Oid, u64)>,
    /// Small objects in memory: every buffered one, and clean ones as a cache.
    smalls: FxHashMap<Oid, SmallObject>,
    /// Small-object pages with live entries, like `desc` for descriptor pages.
    packs: FxHashMap<u32, DescPage>,
    /// Bytes the buffered small objects' entries take.
    small_dirty_bytes: usize,
    /// Units to invalidate once the next checkpoint is durable.
    released: Vec<u32>,
    /// Blocks GC moved index nodes or descriptor pages out of: a checkpoint must precede their
    /// erase.
    unsafe_victims: FxHashSet<u32>,
    ckpt_unit: Option<u32>,
    /// Access times read since their last journal page, not yet on flash.
    atime_pending: Vec<(Oid, u64)>,
    /// Journaled access times (on flash or pending) not yet merged into onodes.
    atime_journal: FxHashMap<Oid, u64>,
    /// Atime pages on flash holding unmerged entries.
    atime_pages: Vec<u32>,
    /// Writing descriptor pages or a checkpoint: GC may not trigger a checkpoint now.
    meta_busy: u32,
    units_since_ckpt: u64,
    next_object: u64,
    next_partition: u64,
    now: Nanos,
    /// When the independent data I/O issued so far completes. Buffered units leave in batches
    /// whose programs do not depend on each other, and the units of one read do not either, so
    /// they are all issued at `now` and overlap on the device's dies, as the FTL's do. What
    /// depends on them waits: metadata for the data programs (see `write_meta_unit`), a
    /// read-modify-write's program for its read.
    io_done: Nanos,
    stats: OsdStats,
    scratch: Vec<u8>,
    recovery: Recovery,
    poisoned: Option<String>,
    /// A whole OOB record of another version seen by recovery's scan.
    foreign_version: Option<u8>,
}

impl<F: Flash> ObjectStore<F> {
    fn new(flash: F, config: OsdConfig) -> Result<Self, OsdError> {
        // As many streams as any policy uses, so a store opens whatever it was formatted with.
        let realtime = config.realtime_update_blocks;
        if realtime > 8 {
            return Err(OsdError::InvalidArgument(format!(
                "realtime_update_blocks = {realtime}: at most 8"
            )));
        }
        let streams = Placer::streams(Placement::Ossd, realtime);
        let fml = Fml::open(flash, config.fml, streams, RECORD_MAX_BYTES).map_err(fml_err)?;
        let layout = *fml.layout();
        let unit = layout.write_unit_bytes as usize;
        if unit as u64 / SECTOR > 64 {
            return Err(OsdError::InvalidArgument(format!(
                "write units over 32 KiB ({unit} bytes) are not supported"
            )));
        }
        let erase_block = layout.write_unit_bytes as u64 * layout.units_per_superblock as u64;
        let mut fml = fml;
        for (stream, class) in Placer::stream_classes(config.placement, realtime) {
            fml.set_stream_class(stream, class);
        }
        Ok(ObjectStore {
            index: Index::new(unit, config.index_cache_bytes as usize),
            placer: Placer::new(config.placement, unit as u64, erase_block, realtime),
            buf: WriteBuffer::new((config.buffer_bytes / unit as u64) as usize),
            fml,
            config,
            unit,
            gc: GcLog::default(),
            onodes: FxHashMap::default(),
            desc: FxHashMap::default(),
            smalls: FxHashMap::default(),
            packs: FxHashMap::default(),
            small_dirty_bytes: 0,
            released: Vec::new(),
            unsafe_victims: FxHashSet::default(),
            ckpt_unit: None,
            atime_pending: Vec::new(),
            atime_journal: FxHashMap::default(),
            atime_pages: Vec::new(),
            meta_busy: 0,
            units_since_ckpt: 0,
            next_object: FIRST_USER_ID,
            next_partition: FIRST_USER_ID,
            now: 0,
            io_done: 0,
            stats: OsdStats::default(),
            scratch: vec![0; unit],
            recovery: Recovery::default(),
            poisoned: None,
            foreign_version: None,
        })
    }

    /// Formats the device as an empty store (whatever it held becomes garbage for GC).
    pub fn format(flash: F, config: OsdConfig) -> Result<Self, OsdError> {
        let mut s = Self::new(flash, config)?;
        // Sequence numbers continue above anything on the device, so old records never look new.
        let mut max_seq = 0;
        let done = s
            .fml
            .scan(0, |_, r| {
                if let Ok((_, oob)) = r {
                    if let Ok(Some(rec)) = Record::decode(oob) {
                        max_seq = max_seq.max(rec.seq());
                    }
                }
            })
            .map_err(fml_err)?;
        s.gc.seq = max_seq;
        s.now = done;
        s.checkpoint()?;
        Ok(s)
    }

    pub fn config(&self) -> &OsdConfig {
        &self.config
    }
    pub fn fml(&self) -> &Fml<F> {
        &self.fml
    }
    pub fn device_mut(&mut self) -> &mut F {
        self.fml.flash_mut()
    }
    pub fn stats(&self) -> OsdStats {
        self.stats
    }
    pub fn recovery(&self) -> Recovery {
        self.recovery
    }
    pub fn unit_bytes(&self) -> usize {
        self.unit
    }
    /// Issue time of the next command (virtual ns).
    pub fn set_time(&mut self, at: Nanos) {
        self.now = self.now.max(at);
    }
    /// Completion time of the last command (its data programs included).
    pub fn now(&self) -> Nanos {
        self.now.max(self.io_done)
    }

    fn io(&mut self) -> NodeFlash<'_, F> {
        NodeFlash {
            fml: &mut self.fml,
            placer: &mut self.placer,
            gc: &mut self.gc,
            stats: &mut self.stats,
            released: &mut self.released,
            at: self.now,
            done: self.now,
        }
    }

    /// Runs an index operation with the flash as its node store, advancing time.
    fn with_index<T>(
        &mut self,
        f: impl FnOnce(&mut Index, &mut dyn NodeIo) -> Result<T, IndexError>,
    ) -> Result<T, OsdError> {
        let mut index = std::mem::replace(&mut self.index, Index::new(self.unit, 0));
        let mut io = self.io();
        let r = f(&mut index, &mut io);
        let done = io.done;
        self.index = index;
        self.now = self.now.max(done);
        r.map_err(index_err)
    }

    fn check_writable(&self) -> Result<(), OsdError> {
        match &self.poisoned {
            Some(why) => Err(OsdError::Poisoned(why.clone())),
            None => Ok(()),
        }
    }

    // ---------------------------------------------------------------- onodes

    /// The current onode of `oid`, loaded into the cache; `None` if the object does not exist.
    fn load_onode(&mut self, oid: Oid) -> Result<Option<&mut CachedOnode>, OsdError> {
        if !self.onodes.contains_key(&oid) {
            let Some(loc) = self.with_index(|ix, io| ix.get(io, &onode_key(oid)))? else {
                return Ok(None);
            };
            let (vpa, slot) = ((loc >> 16) as u32, loc as u16);
            let onode = self.read_onode(vpa, slot)?;
            self.trim_onode_cache();
            self.onodes.insert(
                oid,
                CachedOnode {
                    onode,
                    dirty: false,
                    loc: Some((vpa, slot)),
                },
            );
        }
        let c = self.onodes.get_mut(&oid).unwrap();
        Ok((!c.onode.removed).then_some(c))
    }

    fn onode_mut(&mut self, oid: Oid) -> Result<&mut CachedOnode, OsdError> {
        self.load_onode(oid)?
            .ok_or_else(|| OsdError::NotFound(format!("object {oid}")))
    }

    fn read_onode(&mut self, vpa: u32, slot: u16) -> Result<Onode, OsdError> {
        let mut page = std::mem::take(&mut self.scratch);
        let r = self.read_desc_page(vpa, &mut page).and_then(|onodes| {
            onodes
                .into_iter()
                .nth(slot as usize)
                .ok_or_else(|| OsdError::Corrupted {
                    what: format!("descriptor page has no slot {slot}"),
                    location: format!("unit {vpa}"),
                })
        });
        self.scratch = page;
        r
    }

    fn read_desc_page(&mut self, vpa: u32, page: &mut [u8]) -> Result<Vec<Onode>, OsdError> {
        self.stats.descriptor_pages_read += 1;
        let (t, content, rec) = read_checked(&mut self.fml, self.now, vpa, page, META_RECORD_BYTES)
            .map_err(|e| e.into_osd("descriptor page", vpa))?;
        self.now = self.now.max(t);
        let bad = |what: String| OsdError::Corrupted {
            what,
            location: format!("descriptor page at unit {vpa}"),
        };
        if content != Content::Bytes
            || !matches!(rec, Record::Descriptor { .. })
            || &page[..4] != DESC_MAGIC
        {
            return Err(bad("not a descriptor page".into()));
        }
        let count = u16::from_le_bytes([page[4], page[5]]) as usize;
        let mut at = 6;
        let mut out = Vec::with_capacity(count);
        for _ in 0..count {
            let rest = page.get(at..).unwrap_or(&[]);
            let (o, used) = Onode::decode(rest).map_err(|e| bad(format!("{e:?}")))?;
            out.push(o);
            at += used;
        }
        Ok(out)
    }

    fn trim_onode_cache(&mut self) {
        if self.onodes.len() < self.config.onode_cache_entries {
            return;
        }
        // Drop a quarter of the clean entries (any quarter: an approximate LRU by sweeping).
        let target = self.config.onode_cache_entries * 3 / 4;
        let clean: Vec<Oid> = self
            .onodes
            .iter()
            .filter(|(_, c)| !c.dirty)
            .map(|(o, _)| *o)
            .take(self.onodes.len().saturating_sub(target))
            .collect();
        for o in clean {
            self.onodes.remove(&o);
        }
    }

    /// Writes every dirty onode into descriptor pages and points the index at them.
    fn flush_onodes(&mut self) -> Result<(), OsdError> {
        if !self.onodes.values().any(|c| c.dirty) {
            return Ok(());
        }
        // Room for the pages first (GC, and a checkpoint GC may need, run now), then the pages
        // are written without GC in between.
        self.make_room()?;
        let mut dirty: Vec<Oid> = self
            .onodes
            .iter()
            .filter(|(_, c)| c.dirty)
            .map(|(o, _)| *o)
            .collect();
        dirty.sort_unstable();
        let mut page = vec![0u8; self.unit];
        let mut i = 0;
        while i < dirty.len() {
            // Pack as many as fit.
            let mut bytes = Vec::with_capacity(self.unit);
            let mut members = Vec::new();
            while i < dirty.len() {
                let c = self.onodes.get_mut(&dirty[i]).unwrap();
                c.onode.seq = self.gc.take_seq();
                let mut enc = Vec::new();
                c.onode
                    .encode(&mut enc)
                    .map_err(|e| OsdError::InvalidArgument(format!("{e:?}")))?;
                if 6 + bytes.len() + enc.len() > self.unit {
                    break;
                }
                bytes.extend_from_slice(&enc);
                members.push(dirty[i]);
                i += 1;
            }
            page.fill(0);
            page[..4].copy_from_slice(DESC_MAGIC);
            page[4..6].copy_from_slice(&(members.len() as u16).to_le_bytes());
            page[6..6 + bytes.len()].copy_from_slice(&bytes);
            let vpa = self.write_meta_unit(
                PageKind::Descriptor,
                &page,
                Record::Descriptor {
                    seq: self.gc.seq + 1,
                },
            )?;
            self.stats.descriptor_pages_written += 1;
            let mut live = Vec::with_capacity(members.len());
            let mut has_tombstone = false;
            for (slot, oid) in members.iter().enumerate() {
                let c = self.onodes.get_mut(oid).unwrap();
                c.dirty = false;
                let old = c.loc.take();
                if c.onode.removed {
                    has_tombstone = true;
                    live.push(None);
                    self.onodes.remove(oid);
                    self.with_index(|ix, io| ix.remove(io, &onode_key(*oid)))?;
                } else {
                    c.loc = Some((vpa, slot as u16));
                    live.push(Some(*oid));
                    let loc = (vpa as u64) << 16 | slot as u64;
                    self.with_index(|ix, io| ix.insert(io, onode_key(*oid), loc))?;
                }
                if let Some((ov, os)) = old {
                    self.release_slot(ov, os);
                }
            }
            self.desc.insert(
                vpa,
                DescPage {
                    live,
                    pinned: has_tombstone,
                },
            );
        }
        Ok(())
    }

    /// A descriptor slot no longer holds a current onode.
    fn release_slot(&mut self, vpa: u32, slot: u16) {
        release_slot_in(&mut self.desc, &mut self.released, vpa, slot);
    }

    /// Writes a metadata unit (descriptor page or checkpoint) into its stream; the caller made
    /// room first.
    fn write_meta_unit(
        &mut self,
        kind: PageKind,
        page: &[u8],
        rec: Record,
    ) -> Result<u32, OsdError> {
        let stream = self.placer.choose(&Hint {
            kind,
            oid: Oid::default(),
            object_bytes: 0,
            write_count: 0,
            priority: 0,
        });
        let rec = rec.with_seq(self.gc.take_seq());
        let mut oob = [0u8; RECORD_MAX_BYTES];
        let n = rec.encode(payload_crc(Payload::Bytes(page)), &mut oob);
        // Metadata describes data already on flash: it waits for the data programs.
        self.now = self.now();
        let (v, t) = match self
            .fml
            .write(self.now, stream, Payload::Bytes(page), &oob[..n])
        {
            Ok(x) => x,
            Err(FmlError::NoSpace { .. }) => return Err(self.no_space(self.unit as u64)),
            Err(e) => return Err(fml_err(e)),
        };
        self.now = self.now.max(t);
        Ok(v.0)
    }

    /// A no-space error saying how much is left: the units the FML can still hold valid.
    fn no_space(&self, needed_bytes: u64) -> OsdError {
        let valid: u64 = self.fml.blocks().iter().map(|b| b.valid as u64).sum();
        let free_units = self.fml.capacity_units().saturating_sub(valid);
        OsdError::NoSpace {
            needed_bytes,
            free_bytes: free_units * self.unit as u64,
        }
    }

    // ---------------------------------------------------------------- data units

    /// The write unit holding unit `u` of `oid`, if mapped.
    fn lookup(&mut self, oid: Oid, u: u64) -> Result<Option<u32>, OsdError> {
        let key = data_key(oid, u);
        let hit = self.with_index(|ix, io| ix.floor(io, &key))?;
        Ok(match hit {
            Some((k, v)) if k.oid == key.oid && k.kind == KIND_DATA => {
                let (start, len) = extent(v);
                (u < k.offset + len as u64).then(|| {
                    if start == LOST {
                        LOST
                    } else {
                        start + (u - k.offset) as u32
                    }
                })
            }
            _ => None,
        })
    }

    /// Removes unit `u` from its extent (splitting it); returns the unit it was mapped to.
    fn unmap(&mut self, oid: Oid, u: u64) -> Result<Option<u32>, OsdError> {
        let key = data_key(oid, u);
        let hit = self.with_index(|ix, io| ix.floor(io, &key))?;
        let Some((k, v)) = hit else { return Ok(None) };
        if k.oid != key.oid || k.kind != KIND_DATA {
            return Ok(None);
        }
        let (start, len) = extent(v);
        let end = k.offset + len as u64;
        if u >= end {
            return Ok(None);
        }
        let at = (u - k.offset) as u32;
        self.with_index(|ix, io| {
            ix.remove(io, &k)?;
            if at > 0 {
                ix.insert(io, k, pack(start, at))?;
            }
            if u + 1 < end {
                let rest_start = if start == LOST { LOST } else { start + at + 1 };
                ix.insert(io, data_key(oid, u + 1), pack(rest_start, len - at - 1))?;
            }
            Ok(())
        })?;
        Ok(Some(if start == LOST { LOST } else { start + at }))
    }

    /// Maps unit `u` of `oid` to write unit `vpa`, merging with a neighbouring extent when the
    /// write units are consecutive (extent mode).
    fn map(&mut self, oid: Oid, u: u64, vpa: u32) -> Result<(), OsdError> {
        let extents = self.config.index_mode == IndexMode::Extent;
        self.with_index(|ix, io| {
            let mut start_key = data_key(oid, u);
            let mut start = vpa;
            let mut len = 1u32;
            if extents && u > 0 {
                if let Some((k, v)) = ix.floor(io, &data_key(oid, u - 1))? {
                    let (s, l) = extent(v);
                    if k.oid == start_key.oid
                        && k.kind == KIND_DATA
                        && k.offset + l as u64 == u
                        && s != LOST
                        && s + l == vpa
                        && l < u32::MAX / 2
                    {
                        ix.remove(io, &k)?;
                        start_key = k;
                        start = s;
                        len = l + 1;
                    }
                }
            }
            if extents {
                if let Some(v) = ix.get(io, &data_key(oid, u + 1))? {
                    let (s, l) = extent(v);
                    if s == vpa + 1 && s != LOST {
                        ix.remove(io, &data_key(oid, u + 1))?;
                        len += l;
                    }
                }
            }
            ix.insert(io, start_key, pack(start, len))?;
            Ok(())
        })
    }

    fn hint(&mut self, oid: Oid) -> Result<Hint, OsdError> {
        let c = self.onode_mut(oid)?;
        Ok(Hint {
            kind: PageKind::Data,
            oid,
            object_bytes: c.onode.logical_length.max(c.onode.expected_size),
            write_count: c.onode.write_count,
            priority: c.onode.priority,
        })
    }

    /// Reads data unit `v`, which the index says holds unit `u` of `oid`, into the scratch
    /// buffer (issued at `now`, completing by `io_done`), and checks that the unit's OOB record
    /// names that object and unit: a unit that reads erased or holds another unit (a
    /// misdirected write) is corruption, never data.
    fn read_data_unit(&mut self, oid: Oid, u: u64, v: u32) -> Result<Content, OsdError> {
        let mut scratch = std::mem::take(&mut self.scratch);
        let r = read_checked(&mut self.fml, self.now, v, &mut scratch, DATA_RECORD_BYTES);
        self.scratch = scratch;
        let unit = self.unit as u64;
        let what = format_args!(
            "object {oid} bytes {}..{} (unit {u})",
            u * unit,
            (u + 1) * unit
        );
        match r {
            Ok((t, content, Record::Data { oid: o, offset, .. })) if o == oid && offset == u => {
                self.io_done = self.io_done.max(t);
                Ok(content)
            }
            Ok(_) => Err(OsdError::Corrupted {
                what: format!("{what}: the unit holds another (its OOB record disagrees)"),
                location: format!("unit {v}"),
            }),
            Err(e) => Err(e.into_osd(what, v)),
        }
    }

    /// Programs one buffered unit, merging in its old contents when the buffer has only part.
    fn program_entry(&mut self, mut e: Entry<(Oid, u64)>) -> Result<(), OsdError> {
        // A real-time object's unit may use the free blocks held back for it (seed 000 IV-C).
        if self.onode_mut(e.key.0)?.onode.priority > 0 {
            while self.fml.must_collect_realtime() {
                if !self.step_gc()? {
                    break;
                }
            }
        } else {
            self.make_room()?;
        }
        let full = self.full_mask();
        let old = self.unmap(e.key.0, e.key.1)?;
        if e.mask != full {
            self.merge_old(&mut e, old)?;
        }
        let hint = self.hint(e.key.0)?;
        let stream = self.placer.choose(&hint);
        let length = self.onode_mut(e.key.0)?.onode.logical_length;
        let rec = Record::Data {
            oid: e.key.0,
            offset: e.key.1,
            length,
            seq: self.gc.take_seq(),
            moved: false,
        };
        let payload = match &e.fill {
            Fill::Bytes(b) => Payload::Bytes(b),
            Fill::Token(fp) => Payload::Fingerprint(*fp),
        };
        let mut oob = [0u8; RECORD_MAX_BYTES];
        let n = rec.encode(payload_crc(payload), &mut oob);
        let (v, t) = match self.fml.write(self.now, stream, payload, &oob[..n]) {
            Ok(x) => x,
            Err(FmlError::NoSpace { .. }) => return Err(self.no_space(self.unit as u64)),
            Err(e) => return Err(fml_err(e)),
        };
        self.io_done = self.io_done.max(t);
        self.stats.data_units_written += 1;
        self.units_since_ckpt += 1;
        match old {
            Some(o) if o != LOST => {
                self.fml.invalidate(Vpa(o));
            }
            Some(_) => {}
            None => {
                let unit = self.unit as u64;
                let c = self.onode_mut(e.key.0)?;
                c.onode.used_bytes += unit;
                c.dirty = true;
            }
        }
        self.map(e.key.0, e.key.1, v.0)?;
        self.buf.recycle(e);
        self.bound_dirty_index()
    }

    fn merge_old(&mut self, e: &mut Entry<(Oid, u64)>, old: Option<u32>) -> Result<(), OsdError> {
        let Some(o) = old else {
            if let Fill::Bytes(b) = &mut e.fill {
                for s in 0..self.unit / SECTOR as usize {
                    if e.mask & (1 << s) == 0 {
                        b[s * SECTOR as usize..(s + 1) * SECTOR as usize].fill(0);
                    }
                }
            }
            return Ok(());
        };
        if o == LOST {
            return Err(OsdError::Corrupted {
                what: format!("unit {} of object {} (lost)", e.key.1, e.key.0),
                location: "GC".into(),
            });
        }
        self.stats.rmw_reads += 1;
        let content = self.read_data_unit(e.key.0, e.key.1, o)?;
        // The merged unit's program needs this read's bytes.
        self.now = self.now();
        match (&mut e.fill, content) {
            (Fill::Bytes(b), Content::Bytes) => {
                for s in 0..self.unit / SECTOR as usize {
                    if e.mask & (1 << s) == 0 {
                        let r = s * SECTOR as usize..(s + 1) * SECTOR as usize;
                        b[r.clone()].copy_from_slice(&self.scratch[r]);
                    }
                }
                Ok(())
            }
            (Fill::Token(fp), Content::Fingerprint(old)) => {
                *fp = fold(old, *fp, e.mask);
                Ok(())
            }
            _ => Err(OsdError::InvalidArgument(
                "bytes and fingerprint writes mixed in one unit".into(),
            )),
        }
    }

    fn full_mask(&self) -> u64 {
        let n = self.unit as u64 / SECTOR;
        if n == 64 {
            u64::MAX
        } else {
            (1 << n) - 1
        }
    }

    fn evict_one(&mut self) -> Result<(), OsdError> {
        match self.buf.pop_oldest() {
            Some(e) => self.program_entry(e),
            None => Ok(()),
        }
    }

    /// Buffers a write of `len` bytes at `offset` (bytes or a fingerprint token).
    fn write_inner(
        &mut self,
        oid: Oid,
        offset: u64,
        len: u64,
        data: Option<&[u8]>,
        token: u64,
    ) -> Result<(), OsdError> {
        self.check_writable()?;
        // The onode is rewritten anyway: take its journaled access time along (seed 001 IV).
        if let Some(t) = self.atime_journal.remove(&oid) {
            self.merge_atime_into(oid, t)?;
        }
        if self.onode_mut(oid)?.onode.read_only {
            return Err(OsdError::ReadOnly(oid));
        }
        if self.write_inline(oid, offset, len, data)? {
            return Ok(());
        }
        let c = self.onode_mut(oid)?;
        if c.onode.read_only {
            return Err(OsdError::ReadOnly(oid));
        }
        let end = offset
            .checked_add(len)
            .filter(|&e| e < LENGTH_LIMIT_BYTES)
            .ok_or_else(|| too_long(offset.saturating_add(len)))?;
        if len == 0 {
            return Ok(());
        }
        if self.write_small(oid, offset, data)? {
            return Ok(());
        }
        let length = self.onode_mut(oid)?.onode.logical_length;
        if offset > length {
            self.zero_gap(oid, length)?;
        }
        let unit = self.unit as u64;
        let mut u = offset / unit;
        let mut consumed = 0usize;
        while u * unit < end {
            let b0 = offset.max(u * unit) - u * unit;
            let b1 = end.min((u + 1) * unit) - u * unit;
            if self.buf.capacity() > 0 && self.buf.get((oid, u)).is_none() && self.buf.is_full() {
                self.evict_one()?;
            }
            let aligned = b0.is_multiple_of(SECTOR) && b1.is_multiple_of(SECTOR);
            let mut e = match self.buf.take((oid, u)) {
                Some(e) => e,
                None => self.buf.fresh((oid, u), data.is_some(), self.unit),
            };
            if matches!(e.fill, Fill::Bytes(_)) != data.is_some() {
                return Err(OsdError::InvalidArgument(
                    "bytes and fingerprint writes mixed in one object unit".into(),
                ));
            }
            let s0 = b0 / SECTOR;
            let s1 = b1.div_ceil(SECTOR);
            let mask = (((1u128 << (s1 - s0)) - 1) as u64) << s0;
            if !aligned && e.mask & mask != mask {
                // A write of part of a sector: bring the unit's old contents in first.
                let old = self.lookup(oid, u)?;
                self.merge_old(&mut e, old)?;
                e.mask = self.full_mask();
            }
            match (&mut e.fill, data) {
                (Fill::Bytes(b), Some(src)) => {
                    let n = (b1 - b0) as usize;
                    b[b0 as usize..b1 as usize].copy_from_slice(&src[consumed..consumed + n]);
                    consumed += n;
                }
                (Fill::Token(fp), None) => {
                    *fp = if mask == self.full_mask() {
                        unit_fingerprint(oid, u, token)
                    } else {
                        fold(*fp, token, mask)
                    };
                }
                _ => unreachable!("checked above"),
            }
            e.mask |= mask;
            if self.buf.capacity() == 0 {
                self.program_entry(e)?;
            } else {
                self.buf.put_back(e);
            }
            u += 1;
        }
        let now = self.now;
        let units = (end - 1) / unit - offset / unit + 1;
        let c = self.onode_mut(oid)?;
        c.onode.logical_length = c.onode.logical_length.max(end);
        c.onode.modified_ns = now;
        c.onode.write_count = c.onode.write_count.saturating_add(units as u32);
        c.dirty = true;
        self.stats.host_write_bytes += len;
        Ok(())
    }

    /// The object grows past `length`: the rest of the unit holding its end must read as zeros,
    /// whatever stale bytes an earlier truncate (or a crash) left there.
    fn zero_gap(&mut self, oid: Oid, length: u64) -> Result<(), OsdError> {
        let unit = self.unit as u64;
        let u = length / unit;
        let tail = length % unit;
        if tail == 0 {
            return Ok(());
        }
        let buffered = self
            .buf
            .get((oid, u))
            .map(|e| matches!(e.fill, Fill::Bytes(_)));
        if buffered == Some(false) || (buffered.is_none() && self.lookup(oid, u)?.is_none()) {
            // Fingerprint units, and units never written (they read as zeros), need nothing.
            return Ok(());
        }
        let zeros = vec![0u8; (unit - tail) as usize];
        self.write_inner(oid, length, unit - tail, Some(&zeros), 0)?;
        // Zeroing is not writing: the length stays where it was (the caller sets the new one).
        self.onode_mut(oid)?.onode.logical_length = length;
        self.stats.host_write_bytes -= unit - tail;
        Ok(())
    }

    /// Inode embedding (seed 001 V-D): an object hinted as an inode keeps up to
    /// [`INLINE_MAX_BYTES`] of data within its onode, saving a page read per inode operation.
    /// Returns whether the write was absorbed there; a write that outgrows the onode spills the
    /// embedded bytes into a data unit first.
    fn write_inline(
        &mut self,
        oid: Oid,
        offset: u64,
        len: u64,
        data: Option<&[u8]>,
    ) -> Result<bool, OsdError> {
        let now = self.now;
        let c = self.onode_mut(oid)?;
        let end = offset + len;
        let empty =
            c.onode.inline.is_none() && c.onode.logical_length == 0 && c.onode.used_bytes == 0;
        let candidate = c.onode.inode
            && data.is_some()
            && end as usize <= INLINE_MAX_BYTES
            && (c.onode.inline.is_some() || empty);
        if candidate {
            let before = c.onode.inline.clone();
            let d = c.onode.inline.get_or_insert_with(Vec::new);
            if d.len() < end as usize {
                d.resize(end as usize, 0);
            }
            d[offset as usize..end as usize].copy_from_slice(data.unwrap());
            if c.onode.encoded_len() <= ONODE_MAX_BYTES {
                c.onode.logical_length = c.onode.logical_length.max(end);
                c.onode.modified_ns = now;
                c.onode.write_count = c.onode.write_count.saturating_add(1);
                c.dirty = true;
                self.stats.host_write_bytes += len;
                return Ok(true);
            }
            // The user attributes leave no room: data units after all.
            c.onode.inline = before;
        }
        self.spill_inline(oid)?;
        Ok(false)
    }

    /// Moves embedded data out of the onode into a data unit.
    fn spill_inline(&mut self, oid: Oid) -> Result<(), OsdError> {
        let c = self.onode_mut(oid)?;
        let Some(d) = c.onode.inline.take() else {
            return Ok(());
        };
        c.dirty = true;
        if !d.is_empty() {
            self.write_inner(oid, 0, d.len() as u64, Some(&d), 0)?;
            self.stats.host_write_bytes -= d.len() as u64;
        }
        Ok(())
    }

    /// Fingerprint-mode write (the lab's workloads): `token` stands for the bytes.
    pub fn write_token(
        &mut self,
        oid: Oid,
        offset: u64,
        len: u64,
        token: u64,
    ) -> Result<(), OsdError> {
        self.write_inner(oid, offset, len, None, token)
    }

    /// Fingerprint-mode read: the fingerprint of each unit the range touches (0 if unwritten).
    pub fn read_fingerprints(
        &mut self,
        oid: Oid,
        offset: u64,
        len: u64,
        out: &mut Vec<u64>,
    ) -> Result<(), OsdError> {
        self.onode_mut(oid)?;
        let unit = self.unit as u64;
        out.clear();
        if len == 0 {
            return Ok(());
        }
        for u in offset / unit..=(offset + len - 1) / unit {
            if let Some(e) = self.buf.get((oid, u)) {
                if let Fill::Token(fp) = e.fill {
                    if e.mask == self.full_mask() {
                        out.push(fp);
                        continue;
                    }
                }
                let e = self.buf.take((oid, u)).unwrap();
                self.program_entry(e)?;
            }
            match self.lookup(oid, u)? {
                None => out.push(0),
                Some(LOST) => {
                    return Err(OsdError::Corrupted {
                        what: format!("unit {u} of object {oid} (lost)"),
                        location: "GC".into(),
                    })
                }
                Some(v) => {
                    self.stats.data_units_read += 1;
                    let content = self.read_data_unit(oid, u, v)?;
                    out.push(if let Content::Fingerprint(f) = content {
                        f
                    } else {
                        0
                    });
                }
            }
        }
        self.stats.host_read_bytes += len;
        self.touch(oid)
    }

    /// The write units a fingerprint read of `len` bytes at `offset` of `oid` would read from
    /// flash, answered from memory only (nothing read, no time spent): a device-side
    /// scheduler's look-ahead (seed 004 3.2). False when the store cannot tell without a flash
    /// read (the onode or an index node is not cached, or the object keeps its data in
    /// small-object pages); units in the data buffer read no flash and are left out.
    pub fn peek_read_units(&self, oid: Oid, offset: u64, len: u64, out: &mut Vec<Vpa>) -> bool {
        if !self.onodes.contains_key(&oid) || self.smalls.contains_key(&oid) {
            return false;
        }
        let unit = self.unit as u64;
        if len == 0 {
            return true;
        }
        for u in offset / unit..=(offset + len - 1) / unit {
            if self.buf.get((oid, u)).is_some() {
                continue;
            }
            let key = data_key(oid, u);
            match self.index.floor_cached(&key) {
                None => return false,
                Some(Some((k, v))) if k.oid == key.oid && k.kind == KIND_DATA => {
                    let (start, n) = extent(v);
                    if u < k.offset + n as u64 && start != LOST {
                        out.push(Vpa(start + (u - k.offset) as u32));
                    }
                }
                Some(_) => {}
            }
        }
        true
    }

    // ---------------------------------------------------------------- GC

    /// Runs GC until free blocks are back above the low watermark, applying relocations after
    /// each step and checkpointing before a block whose index nodes or descriptor pages moved
    /// is erased.
    fn make_room(&mut self) -> Result<(), OsdError> {
        while self.fml.must_collect() {
            if !self.step_gc()? {
                break;
            }
        }
        Ok(())
    }

    /// One GC step; false when there is nothing to collect.
    fn step_gc(&mut self) -> Result<bool, OsdError> {
        let about_to_erase = match self.fml.job() {
            GcJob::Erasing { victim } => Some(victim),
            GcJob::Copying { victim, .. } if self.fml.blocks()[victim as usize].valid == 0 => {
                Some(victim)
            }
            _ => None,
        };
        if let Some(v) = about_to_erase {
            if self.unsafe_victims.contains(&v) {
                if self.meta_busy > 0 {
                    // The durable checkpoint still needs this block and a new one is being
                    // written: wait for it.
                    return Ok(false);
                }
                self.checkpoint_now()?;
            }
        }
        let step = self.fml.gc_step(self.now, &mut self.gc).map_err(fml_err)?;
        match step {
            GcStep::Idle => return Ok(false),
            GcStep::Copied { done_ns } | GcStep::Erased { done_ns } => {
                self.now = self.now.max(done_ns)
            }
            GcStep::Chose { .. } | GcStep::Retired => {}
        }
        self.apply_gc_log()?;
        Ok(true)
    }

    fn apply_gc_log(&mut self) -> Result<(), OsdError> {
        let moves = std::mem::take(&mut self.gc.moves);
        let per_block = self.fml.layout().units_per_superblock;
        for (from, to, rec) in moves {
            match rec {
                Record::Data { oid, offset, .. } => {
                    // The moved unit is the current one (GC moves only valid units).
                    self.unmap(oid, offset)?;
                    self.map(oid, offset, to)?;
                    if let Ok(c) = self.onode_mut(oid) {
                        // Seed 000 V-F: a page GC copies is cold; lower the object's count.
                        c.onode.write_count = c.onode.write_count.saturating_sub(1);
                    }
                }
                Record::Descriptor { .. } => {
                    self.unsafe_victims.insert(from / per_block);
                    if let Some(d) = self.desc.remove(&from) {
                        for (slot, oid) in d.live.iter().enumerate() {
                            if let Some(oid) = oid {
                                let loc = (to as u64) << 16 | slot as u64;
                                self.with_index(|ix, io| ix.insert(io, onode_key(*oid), loc))?;
                                if let Some(c) = self.onodes.get_mut(oid) {
                                    c.loc = Some((to, slot as u16));
                                }
                            }
                        }
                        self.desc.insert(to, d);
                    }
                    self.retarget_released(from, to);
                }
                Record::Index {
                    level, first_key, ..
                } => {
                    self.unsafe_victims.insert(from / per_block);
                    self.with_index(|ix, io| ix.relocate(io, from, to, level, &first_key))?;
                    self.retarget_released(from, to);
                }
                Record::Checkpoint { .. } => {
                    self.unsafe_victims.insert(from / per_block);
                    if self.ckpt_unit == Some(from) {
                        self.ckpt_unit = Some(to);
                    }
                    self.retarget_released(from, to);
                }
                Record::Small { .. } => {
                    // The durable checkpoint's index points into the old page, as for
                    // descriptor pages.
                    self.unsafe_victims.insert(from / per_block);
                    self.relocate_small_page(from, to)?;
                    self.retarget_released(from, to);
                }
                Record::Atime { .. } => {
                    for p in self.atime_pages.iter_mut().filter(|p| **p == from) {
                        *p = to;
                    }
                    self.retarget_released(from, to);
                }
            }
        }
        for from in std::mem::take(&mut self.gc.lost) {
            self.stats.units_lost += 1;
            self.mark_lost(from)?;
        }
        Ok(())
    }

    /// A unit waiting to be released after the next checkpoint was moved by GC: release the copy.
    fn retarget_released(&mut self, from: u32, to: u32) {
        for r in self.released.iter_mut() {
            if *r == from {
                *r = to;
            }
        }
    }

    /// A unit GC could not read: reads of the data it held fail from now on.
    fn mark_lost(&mut self, from: u32) -> Result<(), OsdError> {
        // Find the extent holding it (a rare event: a scan of the data entries).
        let all =
            self.with_index(|ix, io| ix.range(io, &IndexKey::MIN, &IndexKey::MAX, usize::MAX))?;
        for (k, v) in all {
            if k.kind != KIND_DATA {
                continue;
            }
            let (s, l) = extent(v);
            if s != LOST && from >= s && from < s + l {
                let oid = Oid::from_u128(k.oid);
                let u = k.offset + (from - s) as u64;
                self.unmap(oid, u)?;
                self.with_index(|ix, io| ix.insert(io, data_key(oid, u), pack(LOST, 1)))?;
                return Ok(());
            }
        }
        Ok(())
    }

    /// Background GC in idle time, up to the high watermark, for steps starting before `until`.
    pub fn background(&mut self, from: Nanos, until: Nanos) -> Result<Nanos, OsdError> {
        self.set_time(from);
        let idle = self.buf.is_empty();
        while self.now < until && self.fml.wants_collect(idle) {
            if !self.step_gc()? {
                break;
            }
        }
        Ok(self.now())
    }

    // ---------------------------------------------------------------- checkpoint and recovery

    /// Flushes, commits the index, writes the checkpoint unit, then releases what the previous
    /// checkpoint still needed.
    pub fn checkpoint(&mut self) -> Result<Nanos, OsdError> {
        self.check_writable()?;
        // Room first, while GC may still checkpoint (once, through `checkpoint_now`) for a block
        // it must erase.
        self.make_room()?;
        self.checkpoint_now()
    }

    /// A checkpoint during which GC may not ask for another.
    fn checkpoint_now(&mut self) -> Result<Nanos, OsdError> {
        self.meta_busy += 1;
        let r = self.checkpoint_inner();
        self.meta_busy -= 1;
        r
    }

    fn checkpoint_inner(&mut self) -> Result<Nanos, OsdError> {
        // No journal page outlives a checkpoint: recovery only looks for newer ones.
        self.merge_atimes()?;
        self.flush_all()?;
        self.make_room()?;
        // Moves recorded so far are in the tree this commit writes; any made while the
        // checkpoint unit is written are not, and must wait for the next checkpoint.
        let covered = std::mem::take(&mut self.unsafe_victims);
        let root = self.with_index(|ix, io| ix.commit(io))?;
        let mut page = vec![0u8; self.unit];
        page[..4].copy_from_slice(CKPT_MAGIC);
        page[4..8].copy_from_slice(&CKPT_VERSION.to_le_bytes());
        let (root_addr, height) = root.unwrap_or((u32::MAX, 0));
        page[8..12].copy_from_slice(&root_addr.to_le_bytes());
        page[12] = height;
        page[13] = match self.config.placement {
            Placement::One => 0,
            Placement::Ossd => 1,
            Placement::Split => 2,
            Placement::SplitAtime => 3,
        };
        page[14] = (self.config.index_mode == IndexMode::Page) as u8;
        page[16..24].copy_from_slice(&self.next_object.to_le_bytes());
        page[24..32].copy_from_slice(&self.next_partition.to_le_bytes());
        page[32..36].copy_from_slice(&(self.unit as u32).to_le_bytes());
        // Everything written before this number is in the checkpoint.
        let logical = self.gc.take_seq();
        page[40..48].copy_from_slice(&logical.to_le_bytes());
        let crc = crc32c::crc32c(&page[..48]);
        page[48..52].copy_from_slice(&crc.to_le_bytes());
        let v = self.write_meta_unit(PageKind::Checkpoint, &page, Record::Checkpoint { seq: 0 })?;
        self.fml
            .flash_mut()
            .sync()
            .map_err(|e| OsdError::Device(e.into()))?;
        // The new checkpoint is durable: release what only the previous one needed.
        if let Some(old) = self.ckpt_unit.replace(v) {
            self.released.push(old);
        }
        for r in std::mem::take(&mut self.released) {
            self.fml.invalidate(Vpa(r));
        }
        let pinned: Vec<u32> = self
            .desc
            .iter()
            .filter(|(_, d)| d.pinned)
            .map(|(v, _)| *v)
            .collect();
        for vpa in pinned {
            let d = self.desc.get_mut(&vpa).unwrap();
            d.pinned = false;
            if d.live.iter().all(|s| s.is_none()) {
                self.desc.remove(&vpa);
                self.fml.invalidate(Vpa(vpa));
            }
        }
        drop(covered);
        self.units_since_ckpt = 0;
        self.stats.checkpoints += 1;
        Ok(self.now())
    }

    /// Programs the buffered data, then the dirty onodes. Onodes are only ever written this
    /// way: an onode's length must not reach flash before the data it covers, or a crash would
    /// leave the object reading zeros it never held.
    ///
    /// Pending access times stay in RAM: no ordering depends on them, and a partly filled
    /// atime page per removal (every PostMark delete flushes here) cost seed 001's read-heavy
    /// PostMark as many atime pages as descriptor pages, more than the onode rewrites
    /// `split+atime` exists to save. A device-wide FLUSH writes them
    /// ([`Self::flush_access_times`]); a crash loses at most the entries since.
    fn flush_all(&mut self) -> Result<(), OsdError> {
        while let Some(e) = self.buf.pop_oldest() {
            self.program_entry(e)?;
        }
        self.write_small_pages(true)?;
        self.flush_onodes()
    }

    /// A device-wide FLUSH makes pending access times durable too: the journal page, then
    /// everything [`Self::flush_all`] writes.
    fn flush_access_times(&mut self) -> Result<(), OsdError> {
        self.write_atime_page()?;
        self.flush_all()
    }

    // ---------------------------------------------------------------- access times

    /// A read of `oid`: its access time becomes now, journaled under `split+atime`, in the
    /// onode otherwise.
    fn touch(&mut self, oid: Oid) -> Result<(), OsdError> {
        if !self.config.atime {
            return Ok(());
        }
        let now = self.now;
        if self.config.placement == Placement::SplitAtime {
            self.atime_pending.push((oid, now));
            self.atime_journal.insert(oid, now);
            if self.atime_pending.len() >= self.unit / ATIME_ENTRY_BYTES - 1 {
                self.write_atime_page()?;
            }
            return Ok(());
        }
        let c = self.onode_mut(oid)?;
        c.onode.accessed_ns = now;
        c.dirty = true;
        Ok(())
    }

    /// Writes the pending journal entries as one atime page (24-byte entries: object id and
    /// time), and merges the journal into the onodes once enough pages are on flash.
    fn write_atime_page(&mut self) -> Result<(), OsdError> {
        if self.atime_pending.is_empty() {
            return Ok(());
        }
        self.make_room()?;
        let mut page = vec![0u8; self.unit];
        page[..4].copy_from_slice(ATIME_MAGIC);
        let n = self
            .atime_pending
            .len()
            .min(self.unit / ATIME_ENTRY_BYTES - 1);
        page[4..8].copy_from_slice(&(n as u32).to_le_bytes());
        for (i, (oid, t)) in self.atime_pending.drain(..n).enumerate() {
            let at = ATIME_ENTRY_BYTES * (i + 1);
            page[at..at + 16].copy_from_slice(&oid.as_u128().to_le_bytes());
            page[at + 16..at + 24].copy_from_slice(&t.to_le_bytes());
        }
        let v = self.write_meta_unit(PageKind::Atime, &page, Record::Atime { seq: 0 })?;
        self.stats.atime_pages_written += 1;
        self.atime_pages.push(v);
        if self.atime_pages.len() >= self.config.atime_merge_pages {
            self.merge_atimes()?;
        }
        Ok(())
    }

    /// Merges every journaled access time into its onode; the atime pages are released once
    /// the onodes are durable (at the next checkpoint).
    fn merge_atimes(&mut self) -> Result<(), OsdError> {
        let journal = std::mem::take(&mut self.atime_journal);
        for (oid, t) in journal {
            self.merge_atime_into(oid, t)?;
        }
        self.atime_pending.clear();
        let pages = std::mem::take(&mut self.atime_pages);
        self.released.extend(pages);
        Ok(())
    }

    fn merge_atime_into(&mut self, oid: Oid, t: u64) -> Result<(), OsdError> {
        if let Some(c) = self.load_onode(oid)? {
            if t > c.onode.accessed_ns {
                c.onode.accessed_ns = t;
                c.dirty = true;
            }
        }
        Ok(())
    }

    /// The entries of an atime page.
    fn read_atime_page(&mut self, vpa: u32) -> Result<Vec<(Oid, u64)>, OsdError> {
        let mut page = vec![0u8; self.unit];
        let (t, content, rec) =
            read_checked(&mut self.fml, self.now, vpa, &mut page, META_RECORD_BYTES)
                .map_err(|e| e.into_osd("atime page", vpa))?;
        self.now = self.now.max(t);
        let n = u32::from_le_bytes([page[4], page[5], page[6], page[7]]) as usize;
        if content != Content::Bytes
            || !matches!(rec, Record::Atime { .. })
            || &page[..4] != ATIME_MAGIC
            || n.saturating_add(1).saturating_mul(ATIME_ENTRY_BYTES) > self.unit
        {
            return Err(OsdError::Corrupted {
                what: "atime page".into(),
                location: format!("unit {vpa}"),
            });
        }
        Ok((1..=n)
            .map(|i| {
                let at = ATIME_ENTRY_BYTES * i;
                let mut oid = [0u8; 16];
                oid.copy_from_slice(&page[at..at + 16]);
                let mut t = [0u8; 8];
                t.copy_from_slice(&page[at + 16..at + 24]);
                (
                    Oid::from_u128(u128::from_le_bytes(oid)),
                    u64::from_le_bytes(t),
                )
            })
            .collect())
    }

    /// Checkpoints every `checkpoint_units` data units, and before the index's dirty nodes
    /// outgrow what a checkpoint may write from the GC reserve: a checkpoint GC asks for (to
    /// erase a victim the durable one still needs) cannot wait for more free blocks, so its
    /// commit must fit in half the low watermark's blocks. Found on `nandsim-128m` (2 KiB
    /// nodes), where a commit of a whole dirty tree used up the last free block.
    fn maybe_checkpoint(&mut self) -> Result<(), OsdError> {
        // Half the GC reserve less GC's destination block and one block of slack.
        if self.units_since_ckpt >= self.config.checkpoint_units
            || self.index.dirty_nodes() > self.half_reserve_units(2)
            || self.released.len() > self.write_back_limit()
        {
            self.checkpoint()?;
        }
        Ok(())
    }

    /// Dirty index nodes a per-page index may hold before [`Self::bound_dirty_index`] writes
    /// them back: half the free blocks GC keeps for others (the low watermark less GC's own
    /// destination block). A commit programs every dirty node, and their new ancestors, with
    /// no GC step in between.
    fn write_back_limit(&self) -> usize {
        self.half_reserve_units(1)
    }

    /// Half the units of the low watermark's free blocks less `kept` of them (at least 1).
    fn half_reserve_units(&self, kept: u32) -> usize {
        let per_block = self.fml.layout().units_per_superblock as usize;
        let reserve = self.config.fml.low_watermark_blocks.saturating_sub(kept) as usize;
        (reserve * per_block / 2).max(1)
    }

    /// A per-page index dirties a leaf for nearly every unit a flush programs, more than any
    /// checkpoint could then commit (seed 001 V-C's 64 MiB file on NANDsim ran out of space
    /// in the commit with half its data units invalid). So under a per-page index the dirty
    /// nodes are written back, without a checkpoint, once they pass
    /// [`Self::write_back_limit`]. The nodes this replaces stay on flash until the next
    /// checkpoint (the durable checkpoint's tree still uses them;
    /// [`Self::maybe_checkpoint`] takes one before they pile up), and recovery ignores the
    /// newer nodes, which nothing durable references. Not a checkpoint itself: that would
    /// flush the whole buffer while GC may be waiting for the checkpoint to erase a block.
    ///
    /// Not done under the extent index: there it made GC-triggered checkpoints at the low
    /// watermark run out of space (seed 000 VI-E's aging on RawSSD, 2-block watermark of
    /// 8 MiB blocks), and extents grow few dirty leaves per flush.
    fn bound_dirty_index(&mut self) -> Result<(), OsdError> {
        if self.config.index_mode != IndexMode::Page
            || self.index.dirty_nodes() <= self.write_back_limit()
        {
            return Ok(());
        }
        self.make_room()?;
        self.with_index(|ix, io| ix.commit(io))?;
        Ok(())
    }

    /// Opens a formatted store: the newest checkpoint, then everything written after it.
    pub fn open(flash: F, config: OsdConfig) -> Result<Self, OsdError> {
        Self::open_or_return(flash, config).map_err(|(e, _)| e)
    }

    /// [`Self::open`], handing the device back when recovery fails after the FML opened (a
    /// power cut during recovery, in tests and torture runs, is retried on the same device).
    pub fn open_or_return(flash: F, config: OsdConfig) -> Result<Self, (OsdError, Option<F>)> {
        let mut s = Self::new(flash, config).map_err(|e| (e, None))?;
        match s.recover() {
            Ok(()) => Ok(s),
            Err(e) => Err((e, Some(s.crash()))),
        }
    }

    /// The OOB record of a unit, if it reads back whole.
    fn record_at(&mut self, v: u32) -> Option<Record> {
        let mut oob = [0u8; RECORD_MAX_BYTES];
        let (t, _) = self.fml.read(self.now, Vpa(v), &mut [], &mut oob).ok()?;
        self.now = self.now.max(t);
        match Record::decode(&oob) {
            Ok(r) => r,
            Err(RecordError::Version(old)) => {
                self.foreign_version = Some(old);
                None
            }
            Err(RecordError::Damaged(_)) => None,
        }
    }

    /// A checkpoint unit's page, if it reads back whole and checks out.
    /// A unit whose payload fails its checksum is passed over like a torn one.
    fn checkpoint_page(&mut self, v: u32) -> Option<Vec<u8>> {
        let mut page = vec![0u8; self.unit];
        let r = read_checked(&mut self.fml, self.now, v, &mut page, META_RECORD_BYTES);
        let (t, content, rec) = match r {
            Ok(x) => x,
            Err(BadUnit::Device(_)) => return None,
            Err(_) => {
                self.recovery.units_damaged += 1;
                return None;
            }
        };
        self.now = self.now.max(t);
        let crc = u32::from_le_bytes([page[48], page[49], page[50], page[51]]);
        (content == Content::Bytes
            && matches!(rec, Record::Checkpoint { .. })
            && &page[..4] == CKPT_MAGIC
            && crc32c::crc32c(&page[..48]) == crc)
            .then_some(page)
    }

    /// Finds the newest readable checkpoint and every data unit, descriptor page and atime
    /// page written after it, reading as little as it can: units of a block are programmed in
    /// sequence order, so after one read of each block's last record, only blocks written since
    /// the checkpoint are read, from their end back to the checkpoint.
    #[allow(clippy::type_complexity)]
    fn discover(&mut self) -> Result<(u64, u32, Vec<u8>, Vec<(u64, u32, Record)>, u64), OsdError> {
        let layout = *self.fml.layout();
        let mut spans: Vec<(u32, u32, u64)> = Vec::new();
        let mut max_seq = 0;
        for id in 0..layout.superblocks {
            let b = self.fml.blocks()[id as usize];
            if b.state == fml::BlockState::Bad || b.next == 0 {
                continue;
            }
            // An unreadable last unit (a torn program) makes the block count as newest.
            let last = self
                .record_at(layout.vpa(id, b.next - 1).0)
                .map_or(u64::MAX, |r| r.seq());
            if last != u64::MAX {
                max_seq = max_seq.max(last);
            }
            spans.push((id, b.next, last));
        }
        let mut scanned = spans.len() as u64;
        spans.sort_unstable_by_key(|s| std::cmp::Reverse(s.2));
        // The newest checkpoint: blocks newest first, each from its end back.
        let mut best: Option<(u64, u32, Vec<u8>)> = None;
        for &(id, next, last) in &spans {
            if best.as_ref().is_some_and(|b| last <= b.0) {
                break;
            }
            for off in (0..next).rev() {
                let v = layout.vpa(id, off).0;
                scanned += 1;
                let Some(r) = self.record_at(v) else { continue };
                max_seq = max_seq.max(r.seq());
                if best.as_ref().is_some_and(|b| r.seq() <= b.0) {
                    break;
                }
                if let Record::Checkpoint { .. } = r {
                    if let Some(page) = self.checkpoint_page(v) {
                        // A checkpoint GC moved carries a newer record than its own number.
                        let logical = u64::from_le_bytes(page[40..48].try_into().unwrap());
                        if best.as_ref().is_none_or(|b| logical > b.0) {
                            best = Some((logical, v, page));
                        }
                        break;
                    }
                }
            }
        }
        let Some((ckpt_seq, ckpt_vpa, page)) = best else {
            if let Some(old) = self.foreign_version {
                return Err(OsdError::Corrupted {
                    what: format!(
                        "records of version {old} and no checkpoint this build reads: the image \
                         was formatted before payload checksums (record version 2); format it \
                         again"
                    ),
                    location: "device".into(),
                });
            }
            return Err(OsdError::Corrupted {
                what: "no readable checkpoint: the device is not an ossd object store (format it first)".into(),
                location: "device".into(),
            });
        };
        // Everything newer than the checkpoint, block by block from the end back.
        let mut later = Vec::new();
        for &(id, next, last) in &spans {
            if last <= ckpt_seq {
                continue;
            }
            for off in (0..next).rev() {
                let v = layout.vpa(id, off).0;
                scanned += 1;
                let Some(r) = self.record_at(v) else { continue };
                max_seq = max_seq.max(r.seq());
                if r.seq() <= ckpt_seq {
                    break;
                }
                if matches!(
                    r,
                    Record::Data { .. }
                        | Record::Descriptor { .. }
                        | Record::Atime { .. }
                        | Record::Small { .. }
                ) {
                    later.push((r.seq(), v, r));
                }
            }
        }
        self.gc.seq = max_seq;
        Ok((ckpt_seq, ckpt_vpa, page, later, scanned))
    }

    fn recover(&mut self) -> Result<(), OsdError> {
        let (ckpt_seq, ckpt_vpa, page, mut later, scanned) = self.discover()?;
        let version = u32::from_le_bytes(page[4..8].try_into().unwrap());
        if version != CKPT_VERSION && version != 1 {
            return Err(OsdError::Corrupted { what: format!("checkpoint version {version} is not supported (this build reads {CKPT_VERSION})"), location: format!("unit {ckpt_vpa}") });
        }
        let unit = u32::from_le_bytes(page[32..36].try_into().unwrap());
        if unit as usize != self.unit {
            return Err(OsdError::Corrupted {
                what: format!(
                    "checkpoint made for {unit}-byte units, the device has {}",
                    self.unit
                ),
                location: format!("unit {ckpt_vpa}"),
            });
        }
        let root = u32::from_le_bytes(page[8..12].try_into().unwrap());
        let height = page[12];
        // The store keeps the placement and index mode it was formatted with.
        self.config.placement = match page[13] {
            0 => Placement::One,
            1 => Placement::Ossd,
            2 => Placement::Split,
            3 => Placement::SplitAtime,
            p => {
                return Err(OsdError::Corrupted {
                    what: format!("unknown placement code {p} in the checkpoint"),
                    location: format!("unit {ckpt_vpa}"),
                })
            }
        };
        self.config.index_mode = if page[14] == 1 {
            IndexMode::Page
        } else {
            IndexMode::Extent
        };
        let layout = *self.fml.layout();
        self.placer = Placer::new(
            self.config.placement,
            self.unit as u64,
            layout.write_unit_bytes as u64 * layout.units_per_superblock as u64,
            self.config.realtime_update_blocks,
        );
        self.next_object = u64::from_le_bytes(page[16..24].try_into().unwrap());
        self.next_partition = u64::from_le_bytes(page[24..32].try_into().unwrap());
        self.index = if root == u32::MAX {
            Index::new(self.unit, self.config.index_cache_bytes as usize)
        } else {
            Index::open(
                root,
                height,
                self.unit,
                self.config.index_cache_bytes as usize,
            )
        };
        self.ckpt_unit = Some(ckpt_vpa);
        // The committed tree's nodes stay valid until a checkpoint replaces them.
        let mut idx = std::mem::replace(&mut self.index, Index::new(self.unit, 0));
        let checked = {
            let mut io = self.io();
            idx.check(&mut io)
        };
        self.index = idx;
        let (_, nodes) = checked.map_err(|e| OsdError::Corrupted {
            what: format!("index: {e}"),
            location: format!("checkpoint {ckpt_seq}"),
        })?;
        later.sort_unstable_by_key(|l| l.0);
        self.recovery = Recovery {
            units_scanned: scanned,
            checkpoint_seq: ckpt_seq,
            records_rolled_forward: later.len() as u64,
            units_damaged: self.recovery.units_damaged,
            done_ns: 0,
        };
        // Descriptor pages already referenced by the committed index.
        self.rebuild_desc_map()?;
        let mut onode_seq: FxHashMap<Oid, u64> = FxHashMap::default();
        let mut small_seq: FxHashMap<Oid, u64> = FxHashMap::default();
        // The length each object's newest durable onode states, before data records extend it.
        let mut stored_len: FxHashMap<Oid, u64> = FxHashMap::default();
        let mut touched: FxHashSet<Oid> = FxHashSet::default();
        for (_, v, rec) in later {
            match rec {
                Record::Data {
                    oid,
                    offset,
                    length,
                    moved,
                    ..
                } => {
                    // Unit 0 written after a small-object entry: the object outgrew it and
                    // the entry's bytes (all within unit 0) are in that unit. A later unit
                    // alone does not say so: the spill may not have reached flash.
                    if offset == 0 {
                        self.drop_small(oid)?;
                    }
                    self.unmap(oid, offset)?;
                    self.map(oid, offset, v)?;
                    touched.insert(oid);
                    if moved {
                        continue;
                    }
                    // The object reaches at least the end of this unit's data, no further: the
                    // units after it may not have reached flash.
                    let end = length.min((offset + 1) * self.unit as u64);
                    if let Some(c) = self.load_onode(oid)? {
                        stored_len.entry(oid).or_insert(c.onode.logical_length);
                        if c.onode.inline.is_none() && end > c.onode.logical_length {
                            c.onode.logical_length = end;
                            c.dirty = true;
                        }
                    }
                }
                Record::Descriptor { .. } => {
                    self.roll_descriptor(v, &mut onode_seq, &mut stored_len, &mut touched)?
                }
                Record::Small { .. } => {
                    self.roll_small_page(v, ckpt_seq, &mut small_seq, &mut touched)?
                }
                Record::Atime { .. } => {
                    // Applied now; the page stays valid until the checkpoint that ends recovery.
                    // A damaged page is passed over like a torn one.
                    if let Some(entries) = self.damaged_as_absent(|s| s.read_atime_page(v))? {
                        for (oid, t) in entries {
                            self.merge_atime_into(oid, t)?;
                        }
                    }
                    self.released.push(v);
                }
                _ => {}
            }
        }
        // Data of objects that do not exist (created after the checkpoint, never flushed) is
        // garbage; lengths and used bytes follow the data.
        for oid in touched {
            self.settle_object(oid, stored_len.get(&oid).copied())?;
        }
        // Rebuild the FML's valid units from what the store references.
        for n in nodes {
            self.mark_valid(n)?;
        }
        self.mark_valid(ckpt_vpa)?;
        let all =
            self.with_index(|ix, io| ix.range(io, &IndexKey::MIN, &IndexKey::MAX, usize::MAX))?;
        for (k, v) in all {
            if k.kind == KIND_DATA {
                let (s, l) = extent(v);
                if s != LOST {
                    for i in 0..l {
                        self.mark_valid(s + i)?;
                    }
                }
            }
        }
        let pages: Vec<u32> = self.desc.keys().chain(self.packs.keys()).copied().collect();
        for p in pages {
            self.mark_valid(p)?;
        }
        // Descriptor pages roll-forward emptied are still referenced by the durable checkpoint:
        // valid until the next one, like every unit awaiting release.
        for r in self.released.clone() {
            if !self.fml.is_valid(Vpa(r)) {
                self.mark_valid(r)?;
            }
        }
        // Make what was rolled forward part of a new checkpoint, so the next recovery starts
        // here and everything pinned for this one can go.
        self.recovery.done_ns = self.now();
        self.checkpoint()?;
        Ok(())
    }

    /// Recovery's reading of a unit written after the checkpoint: a unit that is unreadable,
    /// fails its checksum or does not decode is passed over as not written (`None`), as torn
    /// programs always were; a device failure (a power cut during recovery) is an error.
    fn damaged_as_absent<T>(
        &mut self,
        read: impl FnOnce(&mut Self) -> Result<T, OsdError>,
    ) -> Result<Option<T>, OsdError> {
        match read(self) {
            Ok(x) => Ok(Some(x)),
            Err(e @ (OsdError::Device(_) | OsdError::Internal(_))) => Err(e),
            Err(_) => {
                self.recovery.units_damaged += 1;
                Ok(None)
            }
        }
    }

    /// Recovery marks a unit it found referenced as valid; a reference the flash cannot back
    /// (never programmed, in a bad block, or twice) means the image is corrupted.
    fn mark_valid(&mut self, v: u32) -> Result<(), OsdError> {
        self.fml
            .mark_valid(Vpa(v))
            .map_err(|what| OsdError::Corrupted {
                what,
                location: "recovery".into(),
            })
    }

    /// Every descriptor page and small-object page the index points to, with its live slots.
    fn rebuild_desc_map(&mut self) -> Result<(), OsdError> {
        let all =
            self.with_index(|ix, io| ix.range(io, &IndexKey::MIN, &IndexKey::MAX, usize::MAX))?;
        for (k, v) in all {
            let pages = match k.kind {
                KIND_ONODE => &mut self.desc,
                KIND_SMALL => &mut self.packs,
                _ => continue,
            };
            let (vpa, slot) = ((v >> 16) as u32, (v & 0xFFFF) as usize);
            let d = pages.entry(vpa).or_insert_with(|| DescPage {
                live: Vec::new(),
                pinned: false,
            });
            if d.live.len() <= slot {
                d.live.resize(slot + 1, None);
            }
            d.live[slot] = Some(Oid::from_u128(k.oid));
        }
        Ok(())
    }

    /// Applies the onodes of a descriptor page written after the checkpoint, each only over an
    /// older version of itself.
    fn roll_descriptor(
        &mut self,
        vpa: u32,
        seen: &mut FxHashMap<Oid, u64>,
        stored_len: &mut FxHashMap<Oid, u64>,
        touched: &mut FxHashSet<Oid>,
    ) -> Result<(), OsdError> {
        let mut page = vec![0u8; self.unit];
        // Torn (never part of a completed FLUSH) or damaged: passed over.
        let Some(onodes) = self.damaged_as_absent(|s| s.read_desc_page(vpa, &mut page))? else {
            return Ok(());
        };
        let mut live = vec![None; onodes.len()];
        let mut pinned = false;
        for (slot, onode) in onodes.into_iter().enumerate() {
            let oid = onode.oid;
            let current = match seen.get(&oid) {
                Some(&s) => s,
                None => self.load_onode(oid)?.map_or(0, |c| c.onode.seq),
            };
            if onode.seq <= current {
                continue;
            }
            seen.insert(oid, onode.seq);
            stored_len.insert(oid, onode.logical_length);
            touched.insert(oid);
            if let Some(old) = self.onodes.get(&oid).and_then(|c| c.loc) {
                self.release_slot(old.0, old.1);
            }
            if onode.removed {
                pinned = true;
                self.onodes.remove(&oid);
                self.onodes.insert(
                    oid,
                    CachedOnode {
                        onode,
                        dirty: false,
                        loc: None,
                    },
                );
                self.with_index(|ix, io| ix.remove(io, &onode_key(oid)))?;
                self.drop_units_from(oid, 0)?;
                self.drop_small(oid)?;
            } else {
                let len = onode.logical_length;
                self.onodes.insert(
                    oid,
                    CachedOnode {
                        onode,
                        dirty: false,
                        loc: Some((vpa, slot as u16)),
                    },
                );
                live[slot] = Some(oid);
                let loc = (vpa as u64) << 16 | slot as u64;
                self.with_index(|ix, io| ix.insert(io, onode_key(oid), loc))?;
                // Units past a truncated length are gone.
                // Nothing is valid in the FML yet: this only edits the index.
                self.drop_units_from(oid, len.div_ceil(self.unit as u64))?;
            }
        }
        if pinned || live.iter().any(|s| s.is_some()) {
            self.desc.insert(vpa, DescPage { live, pinned });
        }
        Ok(())
    }

    /// After roll-forward: drop data of objects without an onode, and recompute used bytes.
    /// `stored_len` is the length the object's newest onode on flash states, if roll-forward
    /// extended it from data records.
    fn settle_object(&mut self, oid: Oid, stored_len: Option<u64>) -> Result<(), OsdError> {
        let exists = self.load_onode(oid)?.is_some();
        if !exists {
            self.drop_small(oid)?;
        } else if self.settle_small(oid, stored_len)? {
            return Ok(());
        }
        let extents = self.with_index(|ix, io| {
            ix.range(io, &data_key(oid, 0), &data_key(oid, u64::MAX), usize::MAX)
        })?;
        if !exists {
            self.onodes.remove(&oid);
            self.with_index(|ix, io| {
                ix.remove_range(io, &data_key(oid, 0), &data_key(oid, u64::MAX))
            })?;
            return Ok(());
        }
        // Units past the recovered length belong to writes that were not durable, and so do
        // units of an object whose durable onode embeds its data (a spill that did not finish).
        let unit = self.unit as u64;
        let c = self.onode_mut(oid)?;
        let keep_units = if c.onode.inline.is_some() {
            0
        } else {
            c.onode.logical_length.div_ceil(unit)
        };
        let dropped = self.drop_units_from(oid, keep_units)?;
        let units: u64 = extents
            .iter()
            .map(|(_, v)| extent(*v).1 as u64)
            .sum::<u64>()
            - dropped;
        let c = self.onode_mut(oid)?;
        if c.onode.used_bytes != units * unit {
            c.onode.used_bytes = units * unit;
            c.dirty = true;
        }
        Ok(())
    }

    /// Whole-store check: [`Self::fsck_structure`], then every live unit is read back and
    /// checked against its checksum ([`FsckReport::damaged`] names each damaged one: the object
    /// and byte range of a data unit, the kind and unit of metadata). Reading every unit costs
    /// device time and flash reads, which is why the lab checks structure only.
    pub fn fsck(&mut self) -> Result<FsckReport, OsdError> {
        let mut report = self.fsck_structure()?;
        if self.recovery.units_damaged > 0 {
            report.damaged.push(format!(
                "recovery passed over {} damaged units (checkpoints, or descriptor, \
                 small-object or atime pages written since; their contents are lost)",
                self.recovery.units_damaged
            ));
        }
        self.scan_media(&mut report)?;
        Ok(report)
    }

    /// Reads every unit the store references (data extents, descriptor, small-object and atime
    /// pages, the checkpoint; index nodes were read by the structure check) and records each
    /// one that fails its checksum or does not decode. A device failure is an error.
    fn scan_media(&mut self, report: &mut FsckReport) -> Result<(), OsdError> {
        let keep = |e: OsdError, report: &mut FsckReport| match e {
            OsdError::Device(_) => Err(e),
            e => {
                report.damaged.push(e.to_string());
                Ok(())
            }
        };
        let all = match self
            .with_index(|ix, io| ix.range(io, &IndexKey::MIN, &IndexKey::MAX, usize::MAX))
        {
            Ok(all) => all,
            Err(e) => return keep(e, report),
        };
        let unit = self.unit as u64;
        for (k, v) in &all {
            if k.kind != KIND_DATA {
                continue;
            }
            let oid = Oid::from_u128(k.oid);
            let (s, l) = extent(*v);
            for i in 0..l {
                let u = k.offset + i as u64;
                if s == LOST {
                    report.damaged.push(format!(
                        "object {oid} bytes {}..{} (unit {u}): lost (unreadable when GC moved it)",
                        u * unit,
                        (u + 1) * unit
                    ));
                } else if let Err(e) = self.read_data_unit(oid, u, s + i) {
                    keep(e, report)?;
                }
            }
        }
        let mut page = vec![0u8; self.unit];
        let mut descs: Vec<u32> = self.desc.keys().copied().collect();
        descs.sort_unstable();
        for v in descs {
            if let Err(e) = self.read_desc_page(v, &mut page) {
                keep(e, report)?;
            }
        }
        let mut packs: Vec<u32> = self.packs.keys().copied().collect();
        packs.sort_unstable();
        for v in packs {
            if let Err(e) = self.read_small_page(v) {
                keep(e, report)?;
            }
        }
        for v in self.atime_pages.clone() {
            if let Err(e) = self.read_atime_page(v) {
                keep(e, report)?;
            }
        }
        if let Some(v) = self.ckpt_unit {
            match read_checked(&mut self.fml, self.now, v, &mut page, META_RECORD_BYTES) {
                Ok((t, _, Record::Checkpoint { .. })) => self.now = self.now.max(t),
                Ok((_, _, r)) => report.damaged.push(format!(
                    "the checkpoint at unit {v} holds a {}",
                    r.kind_name()
                )),
                Err(e) => keep(e.into_osd("checkpoint", v), report)?,
            }
        }
        self.now = self.now();
        Ok(())
    }

    /// The structure check: the index is well formed, every valid unit in the FML is referenced
    /// exactly once (data extents, descriptor pages, index nodes, the checkpoint) and every
    /// referenced unit is valid, and each object's used bytes agree with its extents. Reads
    /// only what the structure needs (index nodes, onodes).
    pub fn fsck_structure(&mut self) -> Result<FsckReport, OsdError> {
        // Check a checkpointed state: every reference then is on flash.
        if self.index.is_dirty()
            || !self.buf.is_empty()
            || self.small_dirty_bytes > 0
            || self.onodes.values().any(|c| c.dirty)
        {
            self.checkpoint()?;
        }
        let mut problems = Vec::new();
        self.fml
            .check()
            .unwrap_or_else(|e| problems.push(format!("FML: {e}")));
        let mut idx = std::mem::replace(&mut self.index, Index::new(self.unit, 0));
        let checked = {
            let mut io = self.io();
            idx.check(&mut io)
        };
        self.index = idx;
        let (entries, nodes) = match checked {
            Ok(x) => x,
            Err(e) => {
                problems.push(format!("index: {e}"));
                (0, Vec::new())
            }
        };
        let mut refs: FxHashMap<u32, &'static str> = FxHashMap::default();
        let mut add = |v: u32, what: &'static str, problems: &mut Vec<String>| {
            if let Some(prev) = refs.insert(v, what) {
                problems.push(format!("unit {v} referenced as {prev} and as {what}"));
            }
        };
        for n in nodes {
            add(n, "index node", &mut problems);
        }
        if let Some(c) = self.ckpt_unit {
            add(c, "checkpoint", &mut problems);
        }
        let all = match self
            .with_index(|ix, io| ix.range(io, &IndexKey::MIN, &IndexKey::MAX, usize::MAX))
        {
            Ok(all) => all,
            Err(e @ OsdError::Device(_)) => return Err(e),
            Err(e) => {
                // A damaged index node: nothing past it can be checked.
                problems.push(format!("index: {e}"));
                return Ok(FsckReport {
                    objects: 0,
                    index_entries: entries,
                    problems,
                    damaged: Vec::new(),
                });
            }
        };
        let mut objects = 0u64;
        let mut used: FxHashMap<u128, u64> = FxHashMap::default();
        let mut small_pages: FxHashMap<u32, Vec<(u16, Oid)>> = FxHashMap::default();
        for (k, v) in &all {
            match k.kind {
                KIND_DATA => {
                    let (s, l) = extent(*v);
                    *used.entry(k.oid).or_default() += l as u64;
                    if s != LOST {
                        for i in 0..l {
                            add(s + i, "data", &mut problems);
                        }
                    }
                }
                KIND_ONODE => objects += 1,
                KIND_SMALL => small_pages
                    .entry((*v >> 16) as u32)
                    .or_default()
                    .push((*v as u16, Oid::from_u128(k.oid))),
                _ => problems.push(format!("index key of unknown kind {}", k.kind)),
            }
        }
        for v in self.desc.keys() {
            add(*v, "descriptor page", &mut problems);
        }
        for (v, slots) in &small_pages {
            add(*v, "small-object page", &mut problems);
            for (slot, oid) in slots {
                let tracked = self.packs.get(v).and_then(|d| d.live.get(*slot as usize));
                if tracked != Some(&Some(*oid)) {
                    problems.push(format!(
                        "small-object page {v} slot {slot}: the index says object {oid}, the \
                         store tracks {tracked:?}"
                    ));
                }
            }
        }
        for v in self.packs.keys() {
            if !small_pages.contains_key(v) {
                problems.push(format!(
                    "small-object page {v} is tracked but the index points nowhere into it"
                ));
            }
        }
        for v in &self.atime_pages {
            add(*v, "atime page", &mut problems);
        }
        let pending: FxHashSet<u32> = self
            .released
            .iter()
            .chain(self.index.pending_frees())
            .copied()
            .collect();
        for (v, what) in &refs {
            if !self.fml.is_valid(Vpa(*v)) {
                problems.push(format!("{what} at unit {v} is not valid in the FML"));
            }
        }
        let valid: u64 = self.fml.blocks().iter().map(|b| b.valid as u64).sum();
        let expected =
            refs.len() as u64 + pending.iter().filter(|v| !refs.contains_key(v)).count() as u64;
        if valid != expected {
            problems.push(format!(
                "{valid} valid units in the FML, {expected} referenced or awaiting release"
            ));
            let total = self.fml.layout().superblocks * self.fml.layout().units_per_superblock;
            let mut oob = [0u8; RECORD_MAX_BYTES];
            let leaked: Vec<u32> = (0..total)
                .filter(|&v| {
                    self.fml.is_valid(Vpa(v)) && !refs.contains_key(&v) && !pending.contains(&v)
                })
                .take(5)
                .collect();
            for v in leaked {
                let rec = self
                    .fml
                    .read(self.now, Vpa(v), &mut [], &mut oob)
                    .ok()
                    .and_then(|_| Record::decode(&oob).ok().flatten());
                problems.push(format!(
                    "unit {v} is valid but nothing references it ({rec:?})"
                ));
            }
        }
        let unit = self.unit as u64;
        let onodes: Vec<(Oid, u64)> = all
            .iter()
            .filter(|(k, _)| k.kind == KIND_ONODE)
            .map(|(k, _)| (Oid::from_u128(k.oid), 0))
            .collect();
        for (oid, _) in onodes {
            // An onode that cannot be read is the media scan's to report.
            let inline = match self.load_onode(oid) {
                Ok(c) => c.is_some_and(|c| c.onode.inline.is_some()),
                Err(e @ OsdError::Device(_)) => return Err(e),
                Err(e) => {
                    problems.push(format!("object {oid}: onode unreadable: {e}"));
                    continue;
                }
            };
            if inline && used.get(&oid.as_u128()).is_some_and(|&u| u > 0) {
                problems.push(format!(
                    "object {oid} embeds its data in the onode but also owns data units"
                ));
            }
            let flushed_or_cached = self
                .load_onode(oid)?
                .map(|c| (c.onode.used_bytes, c.onode.logical_length));
            let units = used.get(&oid.as_u128()).copied().unwrap_or(0);
            let small = match self.load_small(oid) {
                Ok(s) => s.map(|s| s.bytes.len() as u64),
                Err(e @ OsdError::Device(_)) => return Err(e),
                Err(e) => {
                    problems.push(format!("small object {oid}: unreadable: {e}"));
                    continue;
                }
            };
            if let (Some(bytes), Some((u, length))) = (small, flushed_or_cached) {
                if inline || units > 0 || u != bytes || length != bytes {
                    problems.push(format!(
                        "small object {oid}: {bytes} bytes packed, length {length}, used \
                         bytes {u}, {units} data units, inline {inline}"
                    ));
                }
                continue;
            }
            if let Some((u, _)) = flushed_or_cached {
                if u != units * unit {
                    problems.push(format!(
                        "object {oid}: used bytes {u}, extents hold {} units",
                        units
                    ));
                }
            }
        }
        Ok(FsckReport {
            objects,
            index_entries: entries,
            problems,
            damaged: Vec::new(),
        })
    }
}

/// What fsck found.
#[derive(Clone, Debug, Default, Serialize)]
pub struct FsckReport {
    pub objects: u64,
    pub index_entries: u64,
    pub problems: Vec<String>,
    /// Units that failed their checksum or could not be read ([`ObjectStore::fsck`] only).
    pub damaged: Vec<String>,
}

/// The fingerprint of a whole unit written by a request with `token`.
pub fn unit_fingerprint(oid: Oid, unit: u64, token: u64) -> u64 {
    mix(token ^ mix(oid.as_u128() as u64 ^ (oid.as_u128() >> 64) as u64 ^ unit.rotate_left(29)))
}

impl<F: Flash> Osd for ObjectStore<F> {
    fn create_partition(&mut self, id: Option<PartitionId>) -> Result<PartitionId, OsdError> {
        self.check_writable()?;
        let pid = match id {
            Some(p) if p.0 < FIRST_USER_ID => {
                return Err(OsdError::InvalidArgument(format!(
                    "partition ids below {FIRST_USER_ID:#x} are reserved"
                )))
            }
            Some(p) => p,
            None => {
                let p = PartitionId(self.next_partition);
                self.next_partition += 1;
                p
            }
        };
        self.next_partition = self.next_partition.max(pid.0 + 1);
        let root = Oid::partition_root(pid);
        if self.load_onode(root)?.is_some() {
            return Err(OsdError::AlreadyExists(format!("partition {:#x}", pid.0)));
        }
        let now = self.now;
        self.onodes.insert(
            root,
            CachedOnode {
                onode: Onode::new(root, now),
                dirty: true,
                loc: None,
            },
        );
        Ok(pid)
    }

    fn remove_partition(&mut self, id: PartitionId) -> Result<(), OsdError> {
        let (objects, _) = self.list(id, 0, 1)?;
        if !objects.is_empty() {
            return Err(OsdError::InvalidArgument(format!(
                "partition {:#x} is not empty",
                id.0
            )));
        }
        self.remove_object(Oid::partition_root(id))
    }

    fn create(
        &mut self,
        partition: PartitionId,
        id: Option<ObjectId>,
    ) -> Result<ObjectId, OsdError> {
        self.check_writable()?;
        if self.load_onode(Oid::partition_root(partition))?.is_none() {
            return Err(OsdError::NotFound(format!("partition {:#x}", partition.0)));
        }
        let object = match id {
            Some(o) if o.0 < FIRST_USER_ID => {
                return Err(OsdError::InvalidArgument(format!(
                    "object ids below {FIRST_USER_ID:#x} are reserved"
                )))
            }
            Some(o) => o,
            None => ObjectId(self.next_object),
        };
        self.next_object = self.next_object.max(object.0 + 1);
        let oid = Oid { partition, object };
        if self.load_onode(oid)?.is_some() {
            return Err(OsdError::AlreadyExists(format!("object {oid}")));
        }
        if self.onodes.get(&oid).is_some_and(|c| c.dirty) {
            // A removal not yet on flash: write its tombstone first, so recovery cannot mix the
            // old object's data into the new one.
            self.flush_all()?;
        }
        let now = self.now;
        self.trim_onode_cache();
        self.onodes.insert(
            oid,
            CachedOnode {
                onode: Onode::new(oid, now),
                dirty: true,
                loc: None,
            },
        );
        Ok(object)
    }

    fn remove(&mut self, oid: Oid) -> Result<(), OsdError> {
        if oid.is_partition_root() {
            return Err(OsdError::InvalidArgument(
                "object id 0 is the partition; use remove_partition".into(),
            ));
        }
        self.remove_object(oid)?;
        self.maybe_checkpoint()
    }

    fn read(&mut self, oid: Oid, offset: u64, out: &mut [u8]) -> Result<usize, OsdError> {
        let c = self.onode_mut(oid)?;
        let len = c.onode.logical_length;
        if let Some(d) = &c.onode.inline {
            // An embedded inode: its data came with the onode.
            let start = (offset as usize).min(d.len());
            let n = (d.len() - start).min(out.len());
            out[..n].copy_from_slice(&d[start..start + n]);
            self.stats.host_read_bytes += n as u64;
            self.touch(oid)?;
            return Ok(n);
        }
        if offset >= len {
            return Ok(0);
        }
        if self.is_small(oid, len)? {
            let d = &self.smalls[&oid].bytes;
            let start = offset as usize;
            let n = (d.len() - start).min(out.len());
            out[..n].copy_from_slice(&d[start..start + n]);
            self.stats.host_read_bytes += n as u64;
            self.touch(oid)?;
            return Ok(n);
        }
        let end = len.min(offset + out.len() as u64);
        let unit = self.unit as u64;
        let mut u = offset / unit;
        let mut produced = 0usize;
        while u * unit < end {
            let b0 = (offset.max(u * unit) - u * unit) as usize;
            let b1 = (end.min((u + 1) * unit) - u * unit) as usize;
            let n = b1 - b0;
            let dst = &mut out[produced..produced + n];
            let buffered = self
                .buf
                .get((oid, u))
                .map(|e| (e.mask, matches!(e.fill, Fill::Bytes(_))));
            match buffered {
                Some((mask, true)) if mask == self.full_mask() => {
                    if let Some(Entry {
                        fill: Fill::Bytes(b),
                        ..
                    }) = self.buf.get((oid, u))
                    {
                        dst.copy_from_slice(&b[b0..b1]);
                    }
                }
                Some(_) => {
                    let e = self.buf.take((oid, u)).unwrap();
                    self.program_entry(e)?;
                    self.read_unit_into(oid, u, b0, dst)?;
                }
                None => self.read_unit_into(oid, u, b0, dst)?,
            }
            produced += n;
            u += 1;
        }
        self.stats.host_read_bytes += produced as u64;
        self.touch(oid)?;
        Ok(produced)
    }

    fn write(&mut self, oid: Oid, offset: u64, data: &[u8]) -> Result<(), OsdError> {
        self.write_inner(oid, offset, data.len() as u64, Some(data), 0)?;
        self.maybe_checkpoint()
    }

    fn append(&mut self, oid: Oid, data: &[u8]) -> Result<u64, OsdError> {
        let at = self.onode_mut(oid)?.onode.logical_length;
        self.write(oid, at, data)?;
        Ok(at)
    }

    fn truncate(&mut self, oid: Oid, length: u64) -> Result<(), OsdError> {
        self.check_writable()?;
        if length >= LENGTH_LIMIT_BYTES {
            return Err(too_long(length));
        }
        let c = self.onode_mut(oid)?;
        if c.onode.read_only {
            return Err(OsdError::ReadOnly(oid));
        }
        let old = c.onode.logical_length;
        if let Some(d) = c.onode.inline.as_mut() {
            if length as usize <= INLINE_MAX_BYTES {
                d.resize(length as usize, 0);
                c.onode.logical_length = length;
                c.dirty = true;
                return Ok(());
            }
            self.spill_inline(oid)?;
        }
        if self.truncate_small(oid, length)? {
            return Ok(());
        }
        let unit = self.unit as u64;
        if length > old {
            self.zero_gap(oid, old)?;
        }
        let now = self.now;
        let c = self.onode_mut(oid)?;
        c.onode.logical_length = length;
        c.onode.modified_ns = now;
        c.dirty = true;
        if length < old {
            // The shorter onode reaches flash before the dropped units are released: recovery
            // replays it in order, and until it is durable GC cannot erase data a crash would
            // bring back.
            self.flush_all()?;
            let first_gone = length.div_ceil(unit);
            self.buf.drop_where(|&(o, u)| o == oid && u >= first_gone);
            let freed = self.drop_units_from(oid, first_gone)?;
            let c = self.onode_mut(oid)?;
            c.onode.used_bytes = c.onode.used_bytes.saturating_sub(freed * unit);
            c.dirty = true;
        }
        self.maybe_checkpoint()
    }

    fn get_attr(&mut self, oid: Oid, attr: Attr) -> Result<AttrValue, OsdError> {
        let journaled = self.atime_journal.get(&oid).copied().unwrap_or(0);
        let o = &self.onode_mut(oid)?.onode;
        Ok(match attr {
            Attr::LogicalLength => AttrValue::U64(o.logical_length),
            Attr::UsedCapacity => AttrValue::U64(o.used_bytes),
            Attr::CreatedTime => AttrValue::U64(o.created_ns),
            Attr::ModifiedTime => AttrValue::U64(o.modified_ns),
            Attr::AccessedTime => AttrValue::U64(o.accessed_ns.max(journaled)),
            Attr::AttrChangedTime => AttrValue::U64(o.attr_changed_ns),
            Attr::Priority => AttrValue::U64(o.priority as u64),
            Attr::ExpectedSize => AttrValue::U64(o.expected_size),
            Attr::AccessPattern => AttrValue::Pattern(o.access),
            Attr::ReadOnly => AttrValue::Bool(o.read_only),
            Attr::InodeEmbedded => AttrValue::Bool(o.inode),
            Attr::User(id) => o
                .user_attr(id)
                .map_or(AttrValue::Absent, |v| AttrValue::Bytes(v.to_vec())),
        })
    }

    fn set_attr(&mut self, oid: Oid, attr: Attr, value: AttrValue) -> Result<(), OsdError> {
        self.check_writable()?;
        if attr == Attr::LogicalLength {
            let AttrValue::U64(l) = value else {
                return Err(OsdError::InvalidArgument(
                    "logical length takes a number".into(),
                ));
            };
            return self.truncate(oid, l);
        }
        let now = self.now;
        let c = self.onode_mut(oid)?;
        let o = &mut c.onode;
        let bad = |what: &str| OsdError::InvalidArgument(format!("{attr:?} takes {what}"));
        match (attr, value) {
            (Attr::Priority, AttrValue::U64(p)) if p <= u8::MAX as u64 => o.priority = p as u8,
            (Attr::Priority, _) => return Err(bad("a number from 0 to 255")),
            (Attr::ExpectedSize, AttrValue::U64(s)) => o.expected_size = s,
            (Attr::AccessPattern, AttrValue::Pattern(p)) => o.access = p,
            (Attr::ReadOnly, AttrValue::Bool(b)) => o.read_only = b,
            (Attr::InodeEmbedded, AttrValue::Bool(b)) => {
                o.inode = b;
                if !b {
                    c.dirty = true;
                    return self.spill_inline(oid);
                }
            }
            (Attr::AccessedTime, AttrValue::U64(t)) => o.accessed_ns = t,
            (Attr::ModifiedTime, AttrValue::U64(t)) => o.modified_ns = t,
            (Attr::User(id), AttrValue::Bytes(v)) => o
                .set_user_attr(id, Some(&v))
                .map_err(OsdError::InvalidArgument)?,
            (Attr::User(id), AttrValue::Absent) => o
                .set_user_attr(id, None)
                .map_err(OsdError::InvalidArgument)?,
            (Attr::User(id), _) if id < FIRST_USER_ATTR => {
                return Err(bad("a user attribute id of at least 0x1000"))
            }
            (a, _) => {
                return Err(OsdError::InvalidArgument(format!(
                    "{a:?} cannot be set to that value (or is read-only)"
                )))
            }
        }
        o.attr_changed_ns = now;
        c.dirty = true;
        Ok(())
    }

    fn list_partitions(
        &mut self,
        token: u64,
        max: usize,
    ) -> Result<(Vec<PartitionId>, Option<u64>), OsdError> {
        // Partitions created since the last flush are not in the index yet: flush them first.
        if self.onodes.values().any(|c| c.dirty && c.loc.is_none()) {
            self.flush_all()?;
        }
        let mut out = Vec::new();
        let mut p = token;
        while out.len() < max.max(1) {
            let from = onode_key(Oid::partition_root(PartitionId(p)));
            let hit = self.with_index(|ix, io| ix.range(io, &from, &IndexKey::MAX, 1))?;
            let Some((k, _)) = hit.into_iter().next() else {
                return Ok((out, None));
            };
            let oid = Oid::from_u128(k.oid);
            if oid.is_partition_root() && k.kind == KIND_ONODE && self.load_onode(oid)?.is_some() {
                out.push(oid.partition);
            }
            match oid.partition.0.checked_add(1) {
                Some(n) => p = n,
                None => return Ok((out, None)),
            }
        }
        Ok((out, Some(p)))
    }

    fn list(
        &mut self,
        partition: PartitionId,
        token: u64,
        max: usize,
    ) -> Result<(Vec<ObjectId>, Option<u64>), OsdError> {
        if self.load_onode(Oid::partition_root(partition))?.is_none() {
            return Err(OsdError::NotFound(format!("partition {:#x}", partition.0)));
        }
        // Onodes created since the last flush are not in the index yet: flush them first.
        if self.onodes.values().any(|c| c.dirty && c.loc.is_none()) {
            self.flush_all()?;
        }
        let from = onode_key(Oid::new(partition.0, token.max(1)));
        let to = onode_key(Oid::new(partition.0, u64::MAX));
        let max = max.max(1);
        let hits = self.with_index(|ix, io| ix.range(io, &from, &to, usize::MAX))?;
        let mut out = Vec::new();
        for (k, _) in hits {
            if k.kind != KIND_ONODE
                || self
                    .onodes
                    .get(&Oid::from_u128(k.oid))
                    .is_some_and(|c| c.onode.removed)
            {
                continue;
            }
            if out.len() == max {
                return Ok((out, Some(Oid::from_u128(k.oid).object.0)));
            }
            out.push(Oid::from_u128(k.oid).object);
        }
        Ok((out, None))
    }

    fn flush(&mut self, scope: FlushScope) -> Result<(), OsdError> {
        // Every scope flushes the whole write buffer (it is shared and small); access times,
        // which no object's data depends on, only at a device-wide FLUSH.
        self.check_writable()?;
        match scope {
            FlushScope::Device => self.flush_access_times()?,
            _ => self.flush_all()?,
        }
        self.fml
            .flash_mut()
            .sync()
            .map_err(|e| OsdError::Device(e.into()))?;
        self.maybe_checkpoint()
    }
}

impl<F: Flash> ObjectStore<F> {
    fn read_unit_into(
        &mut self,
        oid: Oid,
        u: u64,
        b0: usize,
        dst: &mut [u8],
    ) -> Result<(), OsdError> {
        match self.lookup(oid, u)? {
            None => dst.fill(0),
            Some(LOST) => {
                return Err(OsdError::Corrupted {
                    what: format!("unit {u} of object {oid} (unreadable when GC moved it)"),
                    location: "data".into(),
                })
            }
            Some(v) => {
                self.stats.data_units_read += 1;
                if self.read_data_unit(oid, u, v)? != Content::Bytes {
                    return Err(OsdError::InvalidArgument(format!(
                        "unit {u} of {oid} was written in fingerprint mode"
                    )));
                }
                dst.copy_from_slice(&self.scratch[b0..b0 + dst.len()]);
            }
        }
        Ok(())
    }

    /// Drops every unit of `oid` from `first` on: invalidated in the FML and gone from the
    /// index, an extent straddling `first` keeping its head. Returns the units dropped.
    fn drop_units_from(&mut self, oid: Oid, first: u64) -> Result<u64, OsdError> {
        let mut dropped = 0u64;
        let mut invalidate = |fml: &mut Fml<F>, s: u32, from: u32, to: u32| {
            for i in from..to {
                if s != LOST {
                    fml.invalidate(Vpa(s + i));
                }
                dropped += 1;
            }
        };
        if first > 0 {
            if let Some((k, v)) =
                self.with_index(|ix, io| ix.floor(io, &data_key(oid, first - 1)))?
            {
                let (s, l) = extent(v);
                if k.oid == oid.as_u128() && k.kind == KIND_DATA && k.offset + l as u64 > first {
                    let keep = (first - k.offset) as u32;
                    invalidate(&mut self.fml, s, keep, l);
                    let head = if s == LOST { LOST } else { s };
                    self.with_index(|ix, io| ix.insert(io, k, pack(head, keep)))?;
                }
            }
        }
        let extents = self.with_index(|ix, io| {
            ix.range(
                io,
                &data_key(oid, first),
                &data_key(oid, u64::MAX),
                usize::MAX,
            )
        })?;
        for (_, v) in extents {
            let (s, l) = extent(v);
            invalidate(&mut self.fml, s, 0, l);
        }
        self.with_index(|ix, io| {
            ix.remove_range(io, &data_key(oid, first), &data_key(oid, u64::MAX))
        })?;
        Ok(dropped)
    }

    fn remove_object(&mut self, oid: Oid) -> Result<(), OsdError> {
        self.check_writable()?;
        self.onode_mut(oid)?;
        // Its buffered data need never reach flash.
        self.buf.drop_where(|&(o, _)| o == oid);
        self.drop_small(oid)?;
        self.atime_journal.remove(&oid);
        let c = self.onode_mut(oid)?;
        c.onode.removed = true;
        c.onode.logical_length = 0;
        c.onode.used_bytes = 0;
        c.onode.inline = None;
        c.dirty = true;
        // The tombstone reaches flash before the object's units are released (see truncate).
        self.flush_all()?;
        self.drop_units_from(oid, 0)?;
        self.placer.forget(oid);
        Ok(())
    }

    /// Checkpoints and hands the device back.
    pub fn close(mut self) -> Result<F, OsdError> {
        self.checkpoint()?;
        Ok(self.fml.into_flash())
    }

    /// Hands the device back without writing anything (what a power cut leaves).
    pub fn crash(self) -> F {
        self.fml.into_flash()
    }

    /// Marks the store unusable for writes after a failure it cannot reason about.
    pub fn poison(&mut self, why: String) {
        self.poisoned.get_or_insert(why);
    }
}
