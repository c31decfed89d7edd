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
//!
//! # Modules
//! `onodes` (the onode cache and descriptor pages), `data` (the data path: extent map, buffer,
//! data units), `gc` (GC steps and the relocations they report), `checkpoint` (checkpoints and
//! flushes), `atime` (the access-time journal), `recovery` (open: checkpoint and roll-forward),
//! `fsck`, `commands` (the OSD command set), `unit_io` (checked unit reads, the index's view of
//! the flash), `small` (the small-object buffer), `scrub` (the scrub command and the per-group
//! check it shares with `bgscrub`, the background scrub in idle time).

use flash::fingerprint::{fold, mix};
use flash::gang::Vpa;
use flash::{Content, Flash, FlashError, Nanos, Payload};
use fml::{Fml, FmlConfig, FmlError, GcJob, GcStep, Owner, StreamId};
use rustc_hash::{FxHashMap, FxHashSet};
use serde::{Deserialize, Serialize};

use crate::api::{Attr, AttrValue, DeviceInfo, FlushScope, Osd, OsdError};
use crate::id::{ObjectId, Oid, PartitionId, FIRST_USER_ID};
use crate::index::{
    Index, IndexError, IndexKey, LeafView, Neighbour, NodeAddr, NodeIo, NodeLoss, Splice,
};
use crate::onode::{Onode, FIRST_USER_ATTR, INLINE_MAX_BYTES, ONODE_MAX_BYTES};
use crate::placement::{Hint, PageKind, Placement, Placer};
use crate::record::{
    content_crc, payload_crc, Record, RecordError, Seal, Sealed, DATA_RECORD_BYTES,
    ENCRYPTED_RECORD_BYTES, INDEX_RECORD_BYTES, LENGTH_LIMIT_BYTES, META_RECORD_BYTES,
    PARITY_RECORD_BYTES, RECORD_MAX_BYTES, SCAN_RECORD_BYTES, TXN_RECORD_BYTES,
};
use fml::buffer::{Entry, Fill};

mod atime;
mod bgscrub;
mod buffer;
mod checkpoint;
mod commands;
mod compression;
mod cover;
mod data;
mod encryption;
mod fsck;
mod gc;
mod onodes;
mod parity;
mod recovery;
mod scrub;
mod small;
mod txn;
mod unit_io;
mod unit_map;

pub use bgscrub::{BackgroundScrubConfig, ScrubStep};
use buffer::ObjectBuffer;
pub use compression::SpaceTotals;
use compression::{ChunkCache, FoundUnit, KIND_CHUNK};
pub use cover::objects_in_unit;
pub use encryption::SEQ_GAP_AT_OPEN;
pub use fsck::FsckReport;
use gc::GcLog;
pub use parity::{covers_term, UnitRole, MAX_RELIABILITY};
use parity::{parity_key, ParityGroup, UnitFill, KIND_PARITY};
pub use scrub::{ScrubFinding, ScrubOutcome, ScrubReport};
use small::{release_slot_in, SmallObject, KIND_SMALL};
pub use txn::{TXN_LOG_MAX_UNITS, TXN_OPEN_MAX};
use unit_io::{
    copy_address, fml_err, index_err, program_meta, read_checked, read_meta_checked, slot_holds,
    BadUnit, NodeFlash,
};
use unit_map::UnitMap;

const KIND_ONODE: u8 = 0;
const KIND_DATA: u8 = 1;
const SECTOR: u64 = 512;
const DESC_MAGIC: &[u8; 4] = b"ODSC";
const CKPT_MAGIC: &[u8; 4] = b"OSDC";
/// Version 2 added small-object pages; version 1 images (which have none) open unchanged.
const CKPT_VERSION: u32 = 2;
const ATIME_MAGIC: &[u8; 4] = b"OATM";
const ATIME_ENTRY_BYTES: usize = 24;
/// A data unit whose contents were lost (unreadable when GC moved it): reads fail. As the unit
/// of an onode's or a small object's slot location, the page holding it was lost.
const LOST: u32 = u32::MAX - 1;

/// The index value of slot `slot` of the descriptor or small-object page at `unit`.
fn slot_loc(unit: u32, slot: u16) -> u64 {
    (unit as u64) << 16 | slot as u64
}

/// The page and slot of an index value [`slot_loc`] made.
fn split_loc(v: u64) -> (u32, u16) {
    ((v >> 16) as u32, v as u16)
}

/// The error a read of `what` (an onode, a small object) of `oid` gives once GC lost the page
/// holding it ([`LOST`]).
fn lost_page_error(what: &str, oid: Oid) -> OsdError {
    OsdError::Uncorrectable {
        what: format!("{what} of object {oid}"),
        location: "a page GC could read neither copy of".into(),
        unit: None,
    }
}

/// How data units are mapped.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum IndexMode {
    /// Runs of consecutive units as one entry (OSCM-11 III-C).
    Extent,
    /// One entry per unit, for comparison (OSCM-11 V-C).
    Page,
}

/// Object store settings.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct OsdConfig {
    /// Placement policy (a run sets it from its `placement`).
    #[serde(skip)]
    pub placement: Placement,
    /// How data units are mapped in the index (default `extent`).
    pub index_mode: IndexMode,
    /// Object data buffer (default 2 MiB, OSSD-13 V-E); 0 writes through.
    pub buffer_bytes: u64,
    /// Index node cache (default 8 MiB, OSSD-13 V-E).
    pub index_cache_bytes: u64,
    /// Memory for the unit map (default 0: off): a complete map of the units of the objects
    /// being written, 5 bytes per unit, kept ahead of the index and brought into it in sorted
    /// batches (docs/DESIGN.md "The unit map"). Trades the bounded index cache of OSSD-13 V-E
    /// for speed where objects are edited many times (random writes: 2.8 times the index's
    /// rate, about half the FTL's); what reaches flash is the same index.
    pub unit_map_bytes: u64,
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
    /// The small-object buffer (default true, OSCM-11 III-B and V-D): objects shorter than a
    /// write unit (less 36 bytes of headers), written with bytes, share small-object pages.
    pub small_objects: bool,
    /// Update blocks dedicated to real-time objects (priority attribute above 0) under the
    /// `semantic` placement (OSSD-13 IV-C), at most 8; default 0: their data is placed as any
    /// other object's. Combine with `fml.realtime_reserve_blocks` so that a real-time write
    /// also finds a free block without waiting for a collection.
    pub realtime_update_blocks: u8,
    /// Under `semantic` placement, an object taking a dedicated update block from another live
    /// object starts a fresh block, the old one closed unfilled (OSSD-13 VI-C: no block mixes
    /// two large objects). Default false: measured at paper scale (000-vi-c-multistream, 25 MiB
    /// files, 4 threads) it copies more, not fewer, units in GC (122,242 against 75,916), since
    /// the unfilled tails (7/8 of a block per 25 MiB file) are lost to writes until GC.
    pub fresh_update_block_per_object: bool,
    /// Object-level reliability given to every object at creation (OSCM-11 III: parity units
    /// per parity group; default 0, none). An object's `reliability` attribute overrides it.
    pub default_reliability: u8,
    /// Data units per parity group (default 16) for objects given parity from now on; an
    /// object keeps the group size it got.
    pub parity_group_units: u8,
    /// Units per compressed chunk (default 16: 64 KiB with 4 KiB units), a power of two up
    /// to 32, for objects given compression from now on; an object keeps the chunk size it
    /// got (docs/DESIGN.md "Per-object compression").
    pub compression_chunk_units: u8,
    /// Copies of every metadata unit (index nodes, descriptor pages, checkpoints, small-object
    /// and atime pages, transaction records): 1 (default) or 2, the second programmed in the
    /// next unit of the same block and read when the first fails (docs/FORMAT.md "Metadata
    /// copies"; a ditto block, as ZFS keeps for its metadata). Once a store has written
    /// copies, its checkpoint says so and it keeps writing them.
    pub metadata_copies: u8,
    /// The FML's settings (a run sets them once for whichever stack it builds).
    #[serde(skip)]
    pub fml: FmlConfig,
}

impl Default for OsdConfig {
    fn default() -> Self {
        OsdConfig {
            placement: Placement::Semantic,
            index_mode: IndexMode::Extent,
            buffer_bytes: 2 << 20,
            index_cache_bytes: 8 << 20,
            unit_map_bytes: 0,
            onode_cache_entries: 32768,
            checkpoint_units: 4096,
            atime: true,
            atime_merge_pages: 4,
            small_objects: true,
            realtime_update_blocks: 0,
            fresh_update_block_per_object: false,
            default_reliability: 0,
            parity_group_units: 16,
            compression_chunk_units: 16,
            metadata_copies: 1,
            fml: FmlConfig::default(),
        }
    }
}

/// Counters of object store work.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub struct OsdStats {
    /// Bytes the host wrote (the store's own rewrites, such as zeros filling a gap or a small
    /// object moving to data units, not counted).
    pub host_write_bytes: u64,
    /// Bytes the host read.
    pub host_read_bytes: u64,
    /// Data units programmed (GC copies not counted).
    pub data_units_written: u64,
    /// Data units read from flash for host reads.
    pub data_units_read: u64,
    /// Descriptor pages (packed onodes) programmed.
    pub descriptor_pages_written: u64,
    /// Descriptor pages read.
    pub descriptor_pages_read: u64,
    /// Index nodes programmed.
    pub index_nodes_written: u64,
    /// Index nodes read.
    pub index_nodes_read: u64,
    /// Checkpoints written.
    pub checkpoints: u64,
    /// Reads of a unit's old contents to merge a partial unit into (read-modify-write).
    pub rmw_reads: u64,
    /// Units GC found unreadable when it came to move them.
    pub units_lost: u64,
    /// Small-object pages programmed.
    pub small_pages_written: u64,
    /// Small-object pages read.
    pub small_pages_read: u64,
    /// Access-time journal pages programmed (`split+atime`).
    pub atime_pages_written: u64,
    /// Parity units programmed (OSCM-11 V-E's "parity write").
    pub parity_units_written: u64,
    /// Parity units read back (to update or rebuild a group; OSCM-11 V-E's "parity read").
    pub parity_units_read: u64,
    /// Data units read for parity work: the old contents of a reprogrammed unit (the delta
    /// update), and the units of a group being recomputed or rebuilt.
    pub parity_data_reads: u64,
    /// Reads of damaged data units answered with bytes rebuilt from parity.
    pub units_corrected: u64,
    /// Rebuilt units programmed in place of their damaged copies.
    pub units_rewritten: u64,
    /// Groups whose parity recovery found stale or missing and recomputed.
    pub parity_groups_recomputed: u64,
    /// Chunks of compressed objects programmed (each a new generation).
    pub chunks_written: u64,
    /// Of those, chunks stored raw (compressing them saved no unit).
    pub chunks_stored_raw: u64,
    /// Logical bytes of the chunks programmed (whole units).
    pub chunk_logical_bytes: u64,
    /// Bytes those chunks took on flash (whole units).
    pub chunk_stored_bytes: u64,
    /// Updates of raw chunks whose units were programmed in place (no chunk rewrite).
    pub raw_units_in_place: u64,
    /// Chunks read and decompressed (a chunk cache hit not counted).
    pub chunks_decompressed: u64,
    /// Objects whose `auto` compression chose zstd at their first write.
    pub auto_compressed: u64,
    /// Objects whose `auto` compression found compressed content and stored it as written.
    pub auto_skipped: u64,
    /// Transactions committed (their done record on flash).
    pub txns_committed: u64,
    /// Transaction log units programmed (the commit records included).
    pub txn_log_units_written: u64,
    /// Data units the background scrub read and checked.
    pub bg_scrub_units_checked: u64,
    /// Parity groups the background scrub checked against their data (all units readable).
    pub bg_scrub_groups_checked: u64,
    /// Damaged units and mismatched parity groups the background scrub found (one found again
    /// by a later pass counts again).
    pub bg_scrub_damage_found: u64,
    /// Of those, repaired (a unit rebuilt from parity and rewritten, parity recomputed).
    pub bg_scrub_repaired: u64,
    /// Of those, lost: no parity, or too much of the group damaged (the newest are listed by
    /// `ObjectStore::background_scrub_findings`).
    pub bg_scrub_unrepairable: u64,
    /// Full passes of the background scrub over every object's data units.
    pub bg_scrub_passes: u64,
    /// Copies of metadata units programmed ([`OsdConfig::metadata_copies`]; GC's moves
    /// counted by the FML).
    pub metadata_copies_written: u64,
    /// Reads of metadata units answered by their copy (the unit itself damaged).
    pub metadata_read_from_copy: u64,
    /// Metadata units GC could not read and moved from their copy.
    pub metadata_moved_from_copy: u64,
    /// Onodes and small-object entries lost with a page GC could read neither copy of, and
    /// not cached: their objects' reads fail from then on.
    pub metadata_entries_lost: u64,
    /// Index nodes lost the same way, and not cached: their blocks are retired, not erased.
    pub index_nodes_lost: u64,
}

/// What recovery did.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub struct Recovery {
    /// OOB records read: the last unit of each written block, then units back from the ends of
    /// the newest blocks to find the checkpoint and what was written after it.
    pub units_scanned: u64,
    /// The sequence number of the checkpoint recovery started from.
    pub checkpoint_seq: u64,
    /// Records newer than that checkpoint (data, descriptor, atime, small-object and parity
    /// units) that recovery replayed.
    pub records_rolled_forward: u64,
    /// Units recovery read whose payload failed its checksum (or the flash could not read):
    /// passed over as not written, like torn programs.
    pub units_damaged: u64,
    /// Data or parity units at the top of roll-forward whose record read back whole over a
    /// payload failing its checksum: torn programs, passed over as not written (finding 38).
    /// Not damage: the unit was in flight at the cut, never durable.
    pub torn_units: u64,
    /// Committed transactions whose installation a power cut interrupted, installed again
    /// from their logs.
    pub txns_finished: u64,
    /// Objects whose extension by a write that was not flushed recovery undid, because the
    /// unit holding their old end had not been rewritten and may hold bytes a truncation cut
    /// off (the write's zeroing of them was still in the buffer).
    pub extensions_undone: u64,
    /// Units of an object created since the checkpoint, older than its creation, that recovery
    /// dropped: an earlier incarnation's, whose creation a crash discarded (finding 34).
    pub earlier_incarnation_units: u64,
    /// Virtual time at which recovery finished, before the checkpoint it ends with.
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

/// The object store: the OSD command set ([`Osd`]) over onodes and data units located
/// through the on-flash index, on the shared FML (module documentation).
pub struct ObjectStore<F: Flash> {
    fml: Fml<F>,
    config: OsdConfig,
    unit: usize,
    index: Index,
    /// The data units of the objects being written, ahead of the index (`unit_map`).
    units: UnitMap,
    gc: GcLog,
    placer: Placer,
    onodes: FxHashMap<Oid, CachedOnode>,
    desc: FxHashMap<u32, DescPage>,
    buf: ObjectBuffer,
    /// Small objects in memory: every buffered one, and clean ones as a cache.
    smalls: FxHashMap<Oid, SmallObject>,
    /// Small-object pages with live entries, like `desc` for descriptor pages.
    packs: FxHashMap<u32, DescPage>,
    /// Bytes the buffered small objects' entries take.
    small_dirty_bytes: usize,
    /// Objects spilled out of the small-object buffer whose durable entry still stands (in the
    /// index, its page slot live) until their unit 0 is programmed or their onode is written:
    /// until then the durable onode may still count on the entry's bytes.
    spilling: FxHashSet<Oid>,
    /// The object whose unit `program_entry` has taken out of the buffer and not yet mapped:
    /// its onode must not reach flash meanwhile (see `ready_onodes`).
    in_flight: Option<Oid>,
    /// Units to invalidate once the next checkpoint is durable.
    released: Vec<u32>,
    /// Descriptor pages in `desc` pinned until the next checkpoint (they hold tombstones): with
    /// `released`, what a checkpoint would free, which bounds the time between checkpoints.
    pinned_desc_pages: usize,
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
    /// The sequence number the last checkpoint covers up to: a unit programmed before it is
    /// found through the checkpointed index after a crash, a later one only by its record.
    checkpoint_seq: u64,
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
    /// The newest unit recovery's scan for the checkpoint found damaged (neither its own
    /// record nor a copy's reads whole): the unit a refusal for a lost checkpoint names.
    scan_damage: Option<u32>,
    /// Metadata units are written with a copy beside them ([`OsdConfig::metadata_copies`],
    /// or the checkpoint says an earlier open did).
    copies: bool,
    /// Parity groups in memory (the parity cache), by object and group.
    parity: FxHashMap<(Oid, u64), ParityGroup>,
    /// Use counter for the parity cache's LRU.
    parity_tick: u64,
    /// The contents of recently programmed units of protected objects, so that the delta
    /// update of a unit reprogrammed soon after (a directory block, say) need not read its
    /// old contents back: first in, first out.
    recent: FxHashMap<(Oid, u64), (UnitFill, u64)>,
    recent_order: std::collections::VecDeque<((Oid, u64), u64)>,
    /// Groups a drop of units cut into, whose parity on flash is stale until recomputed (by
    /// the truncate, or at the end of recovery).
    parity_suspect: FxHashSet<(Oid, u64)>,
    /// Damaged units recovery rebuilt from parity before it cut off the rest of their group
    /// ([`ObjectStore::rebuild_before_cut`]), rewritten once the FML knows which units are
    /// valid.
    rebuilt_in_recovery: Vec<(Oid, u64, UnitFill)>,
    /// Reed-Solomon codes by (data, parity) units per group.
    codecs: FxHashMap<(u8, u8), std::sync::Arc<reed_solomon_erasure::galois_8::ReedSolomon>>,
    /// The device master key, if given ([`ObjectStore::set_master_key`]); never on flash.
    master: Option<crate::crypt::MasterKey>,
    /// Data keys of encrypted objects unwrapped so far.
    data_keys: FxHashMap<Oid, crate::crypt::DataKey>,
    /// Encrypted units may be on flash: GC copies and scans read whole 64-byte records (their
    /// tags), and every open skips [`encryption::SEQ_GAP_AT_OPEN`] sequence numbers.
    wide_records: bool,
    /// The seal of the encrypted unit whose bytes `read_data_unit` left in the scratch buffer.
    scratch_seal: Option<Seal>,
    /// The compressed chunk decompressed (or programmed) last.
    chunk_cache: Option<ChunkCache>,
    /// The object a write is filling and how far its bytes reach so far (the end of the last
    /// unit it filled, at most the write's end), while it programs or buffers its units: the
    /// bytes it put there may lie past the object's length until it returns, and a merge keeps
    /// them (see [`ObjectStore::merged_keep`]). Not the write's end: a unit the buffer evicts
    /// before the write reaches it holds none of its bytes, and its old bytes past the length
    /// are ones a truncate cut off (`ossd torture --reliability 1 --fill 80`, seed
    /// 10541582998186301944).
    writing: Option<(Oid, u64)>,
    /// A write of zeros over the tail of the unit holding an object's end is under way
    /// (`zero_gap`): its units keep the object's length in their records.
    zeroing_gap: bool,
    /// The object a write that continues it without a gap is filling: a unit it programs
    /// before returning (no buffer, or evicted) records as the object's length how far the
    /// write's bytes reach (`writing`), so roll-forward brings the write's bytes back with a
    /// length that covers them.
    growing: Option<Oid>,
    /// Open transactions, and whether one is being installed.
    txns: txn::Txns,
    /// The background scrub's policy, cursor and unrepairable findings.
    bg_scrub: bgscrub::BgScrub,
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
        let streams = Placer::streams(Placement::Semantic, realtime);
        // Every record but an encrypted unit's fits the scan length; GC reads whole encrypted
        // records once the store holds any (`widen_records`).
        let fml = Fml::open(flash, config.fml, streams, SCAN_RECORD_BYTES).map_err(fml_err)?;
        let layout = *fml.layout();
        let unit = layout.write_unit_bytes as usize;
        if unit as u64 / SECTOR > 64 {
            return Err(OsdError::InvalidArgument(format!(
                "write units over 32 KiB ({unit} bytes) are not supported"
            )));
        }
        let units = u64::from(layout.units_per_superblock) * u64::from(layout.superblocks);
        if config.unit_map_bytes > 0 && units >= unit_map::UNITS_MAX {
            return Err(OsdError::InvalidArgument(format!(
                "unit_map_bytes: the unit map holds locations of devices of fewer than {} write \
                 units; this one has {units}",
                unit_map::UNITS_MAX,
            )));
        }
        let erase_block = layout.write_unit_bytes as u64 * layout.units_per_superblock as u64;
        let copies = match config.metadata_copies {
            1 => false,
            2 if layout.units_per_superblock >= 2 => true,
            2 => {
                return Err(OsdError::InvalidArgument(
                    "metadata_copies = 2 needs at least two write units per block (a unit's \
                     copy goes in the next unit of the same block)"
                        .into(),
                ))
            }
            n => {
                return Err(OsdError::InvalidArgument(format!(
                    "metadata_copies = {n}: 1 (one copy of each metadata unit) or 2"
                )))
            }
        };
        let mut fml = fml;
        for (stream, class) in Placer::stream_classes(config.placement, realtime) {
            fml.set_stream_class(stream, class);
        }
        Ok(ObjectStore {
            index: Index::new(unit, config.index_cache_bytes as usize),
            units: UnitMap::new(config.unit_map_bytes),
            placer: Placer::new(config.placement, unit as u64, erase_block, realtime),
            buf: ObjectBuffer::new((config.buffer_bytes / unit as u64) as usize),
            fml,
            config,
            unit,
            gc: GcLog {
                copies,
                ..GcLog::default()
            },
            onodes: FxHashMap::default(),
            desc: FxHashMap::default(),
            smalls: FxHashMap::default(),
            packs: FxHashMap::default(),
            small_dirty_bytes: 0,
            spilling: FxHashSet::default(),
            in_flight: None,
            released: Vec::new(),
            pinned_desc_pages: 0,
            unsafe_victims: FxHashSet::default(),
            ckpt_unit: None,
            atime_pending: Vec::new(),
            atime_journal: FxHashMap::default(),
            atime_pages: Vec::new(),
            meta_busy: 0,
            units_since_ckpt: 0,
            checkpoint_seq: 0,
            next_object: FIRST_USER_ID,
            next_partition: FIRST_USER_ID,
            now: 0,
            io_done: 0,
            stats: OsdStats::default(),
            scratch: vec![0; unit],
            recovery: Recovery::default(),
            poisoned: None,
            foreign_version: None,
            scan_damage: None,
            copies,
            parity: FxHashMap::default(),
            parity_tick: 0,
            recent: FxHashMap::default(),
            recent_order: std::collections::VecDeque::new(),
            parity_suspect: FxHashSet::default(),
            rebuilt_in_recovery: Vec::new(),
            codecs: FxHashMap::default(),
            master: None,
            data_keys: FxHashMap::default(),
            wide_records: false,
            scratch_seal: None,
            chunk_cache: None,
            writing: None,
            zeroing_gap: false,
            growing: None,
            txns: txn::Txns::default(),
            bg_scrub: bgscrub::BgScrub::default(),
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

    /// The settings the store was opened with.
    pub fn config(&self) -> &OsdConfig {
        &self.config
    }
    /// The FML below (its counters, blocks and GC state).
    pub fn fml(&self) -> &Fml<F> {
        &self.fml
    }
    /// The device, for fault injection in tests and torture runs.
    pub fn device_mut(&mut self) -> &mut F {
        self.fml.flash_mut()
    }
    /// Counters of the work done since open.
    pub fn stats(&self) -> OsdStats {
        OsdStats {
            metadata_moved_from_copy: self.gc.moved_from_copy,
            ..self.stats
        }
    }
    /// What recovery did when the store was opened.
    pub fn recovery(&self) -> Recovery {
        self.recovery
    }
    /// Bytes of a write unit, the unit of data placement.
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
            copies: self.copies,
            at: self.now,
            done: self.now,
        }
    }

    /// Runs an index operation with the flash as its node store, advancing time.
    /// Runs `f` on the index, which may read or edit any key: the unit map's pending edits are
    /// brought into the index first and its objects let go of, since `f` may change their
    /// extents behind it. Where `f` touches no data extent, [`Self::with_index_raw`] keeps them.
    fn with_index<T>(
        &mut self,
        f: impl FnOnce(&mut Index, &mut dyn NodeIo) -> Result<T, IndexError>,
    ) -> Result<T, OsdError> {
        if !self.units.is_empty() {
            self.sync_unit_map()?;
            self.units.clear();
        }
        self.with_index_raw(f)
    }

    /// Runs `f` on the index as it is, with the unit map's edits still pending: `f` must not
    /// read or edit a data extent (kind 1) of an object the unit map holds (`unit_map`).
    fn with_index_raw<T>(
        &mut self,
        f: impl FnOnce(&mut Index, &mut dyn NodeIo) -> Result<T, IndexError>,
    ) -> Result<T, OsdError> {
        // Borrowed field by field: swapping a placeholder index in allocated a node buffer
        // on every call, twice or more per unit written.
        let mut io = NodeFlash {
            fml: &mut self.fml,
            placer: &mut self.placer,
            gc: &mut self.gc,
            stats: &mut self.stats,
            released: &mut self.released,
            copies: self.copies,
            at: self.now,
            done: self.now,
        };
        let r = f(&mut self.index, &mut io);
        let done = io.done;
        self.now = self.now.max(done);
        r.map_err(index_err)
    }

    fn check_writable(&self) -> Result<(), OsdError> {
        match &self.poisoned {
            Some(why) => Err(OsdError::Poisoned(why.clone())),
            None => Ok(()),
        }
    }
}

/// The fingerprint of a whole unit written by a request with `token`.
pub fn unit_fingerprint(oid: Oid, unit: u64, token: u64) -> u64 {
    mix(token ^ mix(oid.as_u128() as u64 ^ (oid.as_u128() >> 64) as u64 ^ unit.rotate_left(29)))
}
