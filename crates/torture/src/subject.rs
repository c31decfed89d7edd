//! The one interface every stack under torture implements: a few numbered *slots* of bytes.
//! On the object store a slot is an object; on the block FTL it is a fixed range of sectors.
//! A later stack (a file system, DFTL variants, a network client) plugs in by implementing
//! [`Subject`] and adding a [`StackKind`] variant.

use blockfs::BlockFsConfig;
use fml::FmlConfig;
use ftl::{Data, Ftl, FtlConfig, FtlError, Mapping, ReadOut};
use ofs::OfsConfig;
use osd::store::UnitRole;
use osd::{
    Attr, AttrValue, FlushScope, IndexMode, ObjectId, ObjectStore, Oid, Osd, OsdConfig, OsdError,
    PartitionId, Placement,
};
use poftl::PoftlConfig;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

use crate::device::Device;
use crate::oracle::{ATTRS, FIRST_ATTR};
use crate::sim::SLOTS;

/// How a stack operation failed, as the contract cares about it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Fail {
    /// Power is off: the device must be rebooted and the stack recovered.
    PowerLoss,
    /// Out of space: a refusal, not a fault.
    NoSpace,
    /// The stack reports data or metadata it cannot read back (acceptable only after a
    /// destructive fault).
    Corrupt {
        /// The stack's message.
        what: String,
        /// The write unit the stack names as damaged, when it names one (typed: the object
        /// store's errors carry it). A recovery that refuses an image naming a unit no fault
        /// struck is a violation.
        unit: Option<u32>,
    },
    /// The device refused a command (acceptable only after a destructive fault).
    Device(String),
    /// An object or partition the harness knows exists is not found (acceptable only after a
    /// destructive fault, which may destroy the only record of it).
    Missing(String),
    /// Anything else: always a contract violation (a harness or stack bug).
    Other(String),
}

impl Fail {
    /// Damage reported without naming a unit.
    pub fn corrupt(what: String) -> Fail {
        Fail::Corrupt { what, unit: None }
    }
}

impl std::error::Error for Fail {}

impl std::fmt::Display for Fail {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Fail::PowerLoss => f.write_str("power loss"),
            Fail::NoSpace => f.write_str("no space"),
            Fail::Corrupt { what, .. } => write!(f, "corruption reported: {what}"),
            Fail::Device(m) => write!(f, "device error: {m}"),
            Fail::Missing(m) => write!(f, "not found: {m}"),
            Fail::Other(m) => write!(f, "error: {m}"),
        }
    }
}

/// Coverage counters of a run: whether it reached GC, erases and checkpoints (issue 15 item 3).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Coverage {
    /// Blocks erased (by GC, or to reuse a block).
    pub blocks_erased: u64,
    /// GC victims collected.
    pub gc_victims: u64,
    /// Units GC copied out of its victims.
    pub gc_units_copied: u64,
    /// Checkpoints written (object store: every checkpoint; FTL: units of checkpoints).
    pub checkpoints: u64,
    /// Power cuts by what they struck, indexed by [`CutKind`] (issue 15 item 3: a campaign
    /// shows that its cuts reached index pages, checkpoints and erases, not only data).
    pub cuts: [u64; CutKind::ALL.len()],
}

impl std::ops::AddAssign for Coverage {
    fn add_assign(&mut self, o: Coverage) {
        self.blocks_erased += o.blocks_erased;
        self.gc_victims += o.gc_victims;
        self.gc_units_copied += o.gc_units_copied;
        self.checkpoints += o.checkpoints;
        for (a, b) in self.cuts.iter_mut().zip(o.cuts) {
            *a += b;
        }
    }
}

impl Coverage {
    /// The power cuts by what they struck, for reports: "data 120, index/map 14, ...", kinds
    /// never struck left out.
    pub fn cuts_by_kind(&self) -> String {
        let parts: Vec<String> = CutKind::ALL
            .iter()
            .zip(self.cuts)
            .filter(|&(_, n)| n > 0)
            .map(|(k, n)| format!("{} {n}", k.name()))
            .collect();
        if parts.is_empty() {
            "none".into()
        } else {
            parts.join(", ")
        }
    }
}

/// What a power cut struck: the kind of unit the program it refused or tore was writing (told
/// from the OOB record the program carried), or an erase.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CutKind {
    /// Host data: an object's data unit, an FTL data unit, a p-OFTL data page.
    Data,
    /// A parity unit of the object store.
    Parity,
    /// A mapping page: an index node of the object store, a DFTL translation page.
    Index,
    /// A descriptor page of the object store (onodes).
    Onode,
    /// A checkpoint (the object store's, or a part of the FTL's).
    Checkpoint,
    /// Other metadata: atime and small-object pages, transaction records, p-OFTL record pages.
    OtherMetadata,
    /// The copy written beside a metadata unit (`osd.metadata_copies = 2`).
    Copy,
    /// An erase.
    Erase,
    /// A program whose OOB bytes name no unit this stack writes.
    Unknown,
}

impl CutKind {
    /// Every kind, in the order reports list them.
    pub const ALL: [CutKind; 9] = [
        CutKind::Data,
        CutKind::Parity,
        CutKind::Index,
        CutKind::Onode,
        CutKind::Checkpoint,
        CutKind::OtherMetadata,
        CutKind::Copy,
        CutKind::Erase,
        CutKind::Unknown,
    ];

    /// Its name in reports.
    pub fn name(self) -> &'static str {
        match self {
            CutKind::Data => "data",
            CutKind::Parity => "parity",
            CutKind::Index => "index/map",
            CutKind::Onode => "onode",
            CutKind::Checkpoint => "checkpoint",
            CutKind::OtherMetadata => "other metadata",
            CutKind::Copy => "metadata copy",
            CutKind::Erase => "erase",
            CutKind::Unknown => "unknown",
        }
    }

    /// What the command a cut struck on `stack` was writing.
    pub fn of(stack: StackKind, cut: &flash::fault::CutCommand) -> CutKind {
        let flash::fault::CutCommand::Program { oob } = cut else {
            return CutKind::Erase;
        };
        match stack {
            StackKind::Osd | StackKind::Ofs => osd_record_kind(oob),
            StackKind::Ftl | StackKind::Dftl | StackKind::Blockfs => {
                match ftl::oob::Record::decode(oob) {
                    Ok(Some(r)) => match r.kind {
                        ftl::oob::Kind::Data | ftl::oob::Kind::Packed => CutKind::Data,
                        ftl::oob::Kind::Map => CutKind::Index,
                        ftl::oob::Kind::Checkpoint => CutKind::Checkpoint,
                    },
                    _ => CutKind::Unknown,
                }
            }
            StackKind::Poftl => {
                if poftl::store::record::decode(oob).is_some() {
                    CutKind::Data
                } else if poftl::store::record::decode_log(oob).is_some() {
                    CutKind::OtherMetadata
                } else {
                    CutKind::Unknown
                }
            }
            StackKind::Littlefs => CutKind::Unknown,
        }
    }
}

fn osd_record_kind(oob: &[u8]) -> CutKind {
    use osd::record::{Record, RecordError};
    match Record::decode(oob) {
        Ok(Some(r)) => match r {
            Record::Data { .. } => CutKind::Data,
            Record::Parity { .. } => CutKind::Parity,
            Record::Index { .. } => CutKind::Index,
            Record::Descriptor { .. } => CutKind::Onode,
            Record::Checkpoint { .. } => CutKind::Checkpoint,
            _ => CutKind::OtherMetadata,
        },
        Err(RecordError::Copy) => CutKind::Copy,
        _ => CutKind::Unknown,
    }
}

pub(crate) fn fml_coverage(s: fml::FmlStats) -> Coverage {
    Coverage {
        blocks_erased: s.blocks_erased,
        gc_victims: s.gc_victims,
        gc_units_copied: s.gc_units_copied,
        checkpoints: 0,
        cuts: [0; CutKind::ALL.len()],
    }
}

/// What a stack promises about the slots across a power cut.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Contract {
    /// Every sector, and every object's existence, length and attributes, holds a value it had
    /// at the last flush or took since (the object store, the FTL, OFS, p-OFTL).
    Versions,
    /// Only slots unchanged since the last flush are promised back whole; a slot changed since
    /// may hold anything (another slot's bytes included) and the structure may need repair (a
    /// file system without a journal: blockfs, docs/BLOCKFS.md "Crash consistency").
    Synced,
}

/// A stack under torture, over slots `0..slots`.
pub trait Subject {
    /// Writes `data` at `offset` into a slot, creating it if needed (whole 512-byte sectors on
    /// a block range; any bytes on objects).
    fn write(&mut self, slot: u32, offset: u64, data: &[u8]) -> Result<(), Fail>;
    /// Reads into `buf` from `offset`; returns how many bytes the slot holds there (an object
    /// ends at its length; a missing object holds none).
    fn read(&mut self, slot: u32, offset: u64, buf: &mut [u8]) -> Result<usize, Fail>;
    /// Removes the slot (object REMOVE, or TRIM of the slot's range).
    fn discard(&mut self, slot: u32) -> Result<(), Fail>;
    /// Makes every write before it durable.
    fn flush(&mut self) -> Result<(), Fail>;
    /// Lets background work (GC) run for a while.
    fn idle(&mut self) -> Result<(), Fail>;
    /// Whether the slot exists (always true on a block device).
    fn exists(&mut self, slot: u32) -> Result<bool, Fail>;
    /// Whole-structure check; the problems found.
    fn fsck(&mut self) -> Result<Vec<String>, Fail>;
    /// The device under the stack (to arm faults and cut power).
    fn device(&mut self) -> &mut Device;
    /// Drops all RAM state without writing anything: what a power cut leaves.
    fn crash(self: Box<Self>) -> Device;
    /// A clean shutdown (checkpoint, then hand the device back, on failure too).
    #[allow(clippy::result_large_err)] // the device travels back by design, once per reboot
    fn close(self: Box<Self>) -> Result<Device, (Fail, Device)>;
    /// Tells a fixed-range stack how many bytes a slot spans (the object store needs nothing).
    fn set_slot_bytes(&mut self, _slot_bytes: u64) {}
    /// What the stack's flash management and checkpoints did since it was opened (the
    /// harness sums it over a run's openings).
    fn coverage(&self) -> Coverage {
        Coverage::default()
    }
    /// Whether a physical page holds a write unit the stack may still need: one its flash
    /// management layer counts valid (live data or metadata, or a unit kept until the next
    /// checkpoint because the durable one refers to it). `None`: the stack cannot tell.
    /// A stale unit was superseded by a newer one already programmed, which recovery replays
    /// in its place, so damage to it cannot change what the stack returns.
    fn page_live(&mut self, _page: flash::PageAddr) -> Option<bool> {
        None
    }
    /// What a page holds, asked before a destructive fault strikes it: whether the stack's
    /// redundancy must mask the damage (issue 16 item 4). By default, [`Subject::page_live`]'s
    /// answer.
    fn page_role(&mut self, page: flash::PageAddr) -> PageRole {
        PageRole::of_live(self.page_live(page))
    }
    /// The slot whose data alone a live page holds (`None`: metadata, data shared by several
    /// slots, or the stack cannot tell). Asked without a flash command, before or after a
    /// fault strikes, so the run's schedule is not moved.
    fn page_owner(&mut self, _page: flash::PageAddr) -> Option<u32> {
        None
    }
    /// The slots whose data or metadata a live page of no one slot holds (metadata shared by
    /// a few objects: a descriptor page's onodes, a small-object page's entries), as a bit set;
    /// `None` when that cannot be told from the page alone or the page holds metadata of
    /// anything but slots (a partition's onode). Asked as [`Subject::page_owner`] is: without a flash command.
    fn page_cover(&mut self, _page: flash::PageAddr) -> Option<u64> {
        None
    }
    /// The slot whose data a record names, from OOB bytes a misdirected program carried.
    fn record_owner(&mut self, _oob: &[u8]) -> Option<u32> {
        None
    }
    /// The slots a unit of shared metadata covers, from the record and payload a misdirected
    /// program carried (as [`Subject::page_cover`] tells from a page on flash); `None` when
    /// they do not say.
    fn record_cover(&mut self, _oob: &[u8], _data: &[u8]) -> Option<u64> {
        None
    }
    /// Whether a unit with OOB record `oob` holds data of some slot, when the stack cannot say
    /// whose ([`Subject::record_owner`]): a misdirected program of it that was lost relaxes
    /// the whole run.
    fn record_is_data(&mut self, _oob: &[u8]) -> bool {
        false
    }
    /// What a page held that a misdirected program left erased, from the OOB bytes the
    /// program carried, asked after the program.
    fn record_role(&mut self, _page: flash::PageAddr, _oob: &[u8]) -> PageRole {
        PageRole::Unknown
    }
    /// Whether damage to the guarded unit `g` would still be rebuilt after a crash now (its
    /// redundancy is on flash, and recovery reaches the unit without reading its record).
    fn guard_survives_crash(&mut self, _g: &Guarded) -> bool {
        false
    }
    /// Whether the guarded unit `g` is mapped as lost: damaged still, although the page that
    /// held it was erased.
    fn guard_lost(&mut self, _g: &Guarded) -> Result<bool, Fail> {
        Ok(false)
    }

    // Object metadata: only stacks of objects (see [`Subject::objects`]) implement these.

    /// Whether the stack holds objects with lengths and a listing (the calls below); a block
    /// range does not.
    fn objects(&self) -> bool {
        false
    }
    /// Whether the objects keep the tracked attributes ([`Subject::set_attr`],
    /// [`Subject::attrs`]); by default, whether the stack holds objects.
    fn attributes(&self) -> bool {
        self.objects()
    }
    /// Whether the stack has the second partition ([`Subject::set_partition`]); by default,
    /// whether it holds objects.
    fn partitions(&self) -> bool {
        self.objects()
    }
    /// What the stack promises across a power cut.
    fn contract(&self) -> Contract {
        Contract::Versions
    }
    /// Whether the stack promises room for everything its slots may hold: a block device
    /// exports its logical capacity, so any out-of-space refusal of the FTL is a violation.
    /// A store of objects or files spends room on metadata as well, and may refuse.
    fn space_promised(&self) -> bool {
        false
    }
    /// The object's length in bytes, `None` if it does not exist.
    fn length(&mut self, _slot: u32) -> Result<Option<u64>, Fail> {
        Err(not_objects())
    }
    /// Sets the object's length (an existing object): shrinking drops data, growing adds zeros.
    fn truncate(&mut self, _slot: u32, _len: u64) -> Result<(), Fail> {
        Err(not_objects())
    }
    /// Creates the object, empty (nothing happens if it exists).
    fn create(&mut self, _slot: u32) -> Result<(), Fail> {
        Err(not_objects())
    }
    /// Sets (`Some`) or clears tracked attribute `attr` (below [`crate::oracle::ATTRS`]) of an
    /// existing object.
    fn set_attr(&mut self, _slot: u32, _attr: usize, _value: Option<&[u8]>) -> Result<(), Fail> {
        Err(not_objects())
    }
    /// The tracked attributes of the object, `None` if it does not exist.
    fn attrs(&mut self, _slot: u32) -> Result<Option<Vec<Option<Vec<u8>>>>, Fail> {
        Err(not_objects())
    }
    /// The slots of the objects that exist, as the stack lists them (paged).
    fn list(&mut self) -> Result<Vec<u32>, Fail> {
        Err(not_objects())
    }
    /// Creates (`true`) or removes the second, always empty partition.
    fn set_partition(&mut self, _present: bool) -> Result<(), Fail> {
        Err(not_objects())
    }
    /// Whether the second partition is listed (the first must be).
    fn partition(&mut self) -> Result<bool, Fail> {
        Err(not_objects())
    }
}

/// A whole-structure check that stops at its first problem, as a list of problems.
pub(crate) fn problems<E: std::fmt::Display>(check: Result<(), E>) -> Vec<String> {
    check.err().map(|e| e.to_string()).into_iter().collect()
}

fn not_objects() -> Fail {
    Fail::Other("harness: an object command on a stack without objects".into())
}

pub use stacks::StackKind;

/// The stacks torture covers: `osd` (the object store), `ftl` (the block FTL, page mapping or
/// DFTL drawn per run), `dftl` (DFTL in every run), and the file-level stacks `ofs`, `blockfs`
/// and `poftl` (the `files` module). LittleFS, a foreign library, has crash tests of its own.
pub const COVERED: [StackKind; 6] = [
    StackKind::Osd,
    StackKind::Ftl,
    StackKind::Dftl,
    StackKind::Ofs,
    StackKind::Blockfs,
    StackKind::Poftl,
];

/// `kind` if torture covers it; else an error naming the stacks it does.
pub fn covered(kind: StackKind) -> Result<StackKind, NotCovered> {
    if COVERED.contains(&kind) {
        Ok(kind)
    } else {
        Err(NotCovered { kind })
    }
}

/// A stack torture does not cover ([`covered`]); the message lists the ones it does.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
#[error("torture does not cover stack '{kind}'; it covers {}", COVERED.map(StackKind::name).join(", "))]
pub struct NotCovered {
    /// The stack asked for.
    pub kind: StackKind,
}

/// Whether a discard is durable at the next flush (object REMOVE) or only at the next
/// checkpoint (FTL TRIM, see the `ftl` crate's durability note).
pub fn discard_durable_at_flush(kind: StackKind) -> bool {
    !matches!(kind, StackKind::Ftl | StackKind::Dftl)
}

/// What a page holds, as the harness needs to know it before damaging it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PageRole {
    /// Nothing the stack needs: damage to it changes nothing the stack may return.
    Stale,
    /// A unit with a second copy (a data or parity unit of an object with parity): one such
    /// unit damaged per group must be masked.
    Guarded(Guarded),
    /// Live data of one slot alone, with no second copy: damage to it relaxes the contract
    /// for that slot only (issue 15 item 1).
    Slot(u32),
    /// Metadata with no second copy of these slots alone (bit i: slot i; [`Subject::page_cover`]):
    /// damage to it relaxes the contract for those slots only (issue 15 item 1).
    Slots(u64),
    /// Live data or metadata with no second copy, of no one slot (or the stack cannot say
    /// whose): damage to it relaxes the contract for every slot.
    Live,
    /// The stack cannot tell.
    Unknown,
}

impl PageRole {
    /// The role [`Subject::page_live`]'s answer gives: stale, live, or unknown.
    pub fn of_live(live: Option<bool>) -> PageRole {
        match live {
            Some(false) => PageRole::Stale,
            Some(true) => PageRole::Live,
            None => PageRole::Unknown,
        }
    }
}

/// [`Guarded::oid`] of a metadata unit with a copy beside it (the group is the unit's address,
/// `unit: Some(0)` the unit itself and `None` its copy): no object has this id.
pub const METADATA: u128 = u128::MAX;

/// A unit the stack can rebuild from the rest of its group ([`PageRole::Guarded`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Guarded {
    /// The object (its 128-bit id).
    pub oid: u128,
    /// The redundancy group: one damaged unit per group is masked.
    pub group: u64,
    /// The data unit's index in the object (`None`: a parity unit).
    pub unit: Option<u64>,
    /// The sequence number of the program that wrote it.
    pub seq: u64,
    /// The slot the object stands for.
    pub slot: Option<u32>,
}

/// The object services every object of an object-store run is made with (issue 16).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Services {
    /// Encrypted (the master key given at every open).
    pub encrypt: bool,
    /// Compressed with this codec (`None`: stored as written).
    pub compression: osd::compress::Compression,
}

impl Services {
    /// Encryption alone.
    pub fn encrypted() -> Services {
        Services {
            encrypt: true,
            ..Services::default()
        }
    }
}

/// The settings a run drew for its stack (so the run covers every policy and mode).
#[derive(Clone, Copy, Debug)]
pub enum Variant {
    /// The object store, with the placement, index mode, buffer and checkpoint settings drawn;
    /// and the services every object is made with.
    Osd(OsdConfig, Services),
    /// The block FTL (page mapping or DFTL), with the buffer size drawn.
    Ftl(FtlConfig),
    /// OFS on the object store, with the store's settings and OFS's layout drawn.
    Ofs(OsdConfig, OfsConfig),
    /// blockfs on the FTL, with both drawn.
    BlockFs(FtlConfig, BlockFsConfig),
    /// p-OFTL, with its grouping and buffer drawn.
    Poftl(PoftlConfig),
}

impl Variant {
    /// Draws settings for `stack` on `device` from the run's random stream (`ftl` and `dftl`
    /// consume the same draws, so a seed's runs on the two differ only where `dftl` forces DFTL).
    pub fn draw(stack: StackKind, device: &flash::DeviceConfig, rng: &mut ChaCha8Rng) -> Variant {
        let blocks = device.gang.superblocks(&device.geometry);
        let fml = FmlConfig::for_blocks(blocks);
        let unit = device.write_unit_bytes() as u64;
        match stack {
            StackKind::Ofs => {
                let Variant::Osd(osd, _) = Variant::draw(StackKind::Osd, device, rng) else {
                    unreachable!("the object store's draw is an object store")
                };
                let ofs = OfsConfig {
                    inode_objects: rng.gen_bool(0.3),
                    dirent_objects: rng.gen_bool(0.3),
                    ..OfsConfig::default()
                };
                Variant::Ofs(osd, ofs)
            }
            StackKind::Blockfs => {
                let Variant::Ftl(ftl) = Variant::draw(StackKind::Ftl, device, rng) else {
                    unreachable!("the FTL's draw is an FTL")
                };
                let fs = BlockFsConfig {
                    block_bytes: [1024, 4096][rng.gen_range(0..2)],
                    discard: rng.gen_bool(0.5),
                    // Metadata written back in idle time now and then, as the kernel's
                    // flusher does, so crashes find it part-written.
                    writeback_interval_ns: [0, 30_000_000][rng.gen_range(0..2)],
                    meta_zone_percent: 5.0,
                    ..BlockFsConfig::default()
                };
                Variant::BlockFs(ftl, fs)
            }
            StackKind::Poftl => {
                let mut cfg = PoftlConfig {
                    parallelism_degree: 2,
                    grouping: [
                        poftl::GroupingPolicy::SemanticAware,
                        poftl::GroupingPolicy::Sfs,
                        poftl::GroupingPolicy::None,
                    ][rng.gen_range(0..3)],
                    buffer_pages: [1, 4, 16][rng.gen_range(0..3)],
                    write_regions: rng.gen_range(1..=4),
                    ..PoftlConfig::default()
                };
                let blocks = cfg
                    .device(*device)
                    .map(|d| d.gang.superblocks(&d.geometry))
                    .unwrap_or(blocks);
                cfg.fml = FmlConfig::for_blocks(blocks);
                Variant::Poftl(cfg)
            }
            StackKind::Ftl | StackKind::Dftl => {
                // Drawn for `ftl` and `dftl` alike, so a seed draws the same run on either.
                let dftl = rng.gen_bool(0.5) || stack == StackKind::Dftl;
                // Checkpoints during the run (issue 15 item 3) in two runs of three, drawn
                // from a stream of their own so that every other draw of a seed stays as it was.
                let mut own = ChaCha8Rng::seed_from_u64(rng.clone().gen::<u64>() ^ 0x636b_7074);
                let checkpoint_every_units = [0, 16, 48][own.gen_range(0..3)];
                Variant::Ftl(FtlConfig {
                    checkpoint_every_units,
                    mapping: if dftl { Mapping::Dftl } else { Mapping::Page },
                    buffer_bytes: [0, 4][rng.gen_range(0..2)] * unit,
                    dftl_cache_bytes: 8 * 64,
                    overprovision_percent: 10.0,
                    fml,
                    ..FtlConfig::default()
                })
            }
            _ => {
                let placement = [
                    Placement::One,
                    Placement::Semantic,
                    Placement::Split,
                    Placement::SplitAtime,
                ][rng.gen_range(0..4)];
                let checkpoint_units = rng.gen_range(16..64);
                // Encrypted objects in a third of the runs, decided by the checkpoint interval
                // already drawn, so that no draw is added and every seed's run stays as it was
                // apart from the encryption.
                let encrypt = checkpoint_units % 3 == 0;
                // Compressed objects in another third (lz4 or zstd; chunks of 4 units so that a
                // cut can tear a generation), combined with encryption in a sixth of all runs.
                let compression = match checkpoint_units % 6 {
                    1 | 3 => osd::compress::Compression::Lz4,
                    4 => osd::compress::Compression::Zstd,
                    _ => osd::compress::Compression::None,
                };
                let compressed = compression != osd::compress::Compression::None;
                // Two copies of every metadata unit in about half the runs (issue 16 item 2
                // under every fault kind: one destroyed unit of a pair is masked, so those
                // runs stay strict through damage to metadata), again from the interval drawn.
                let metadata_copies = if (checkpoint_units / 6) % 2 == 1 {
                    2
                } else {
                    1
                };
                // The unit map in two fifths of the runs, again from the interval drawn: a
                // budget of 24 units in half of those, so that objects are let go of (synced)
                // mid-run as well as at commits.
                let unit_map_bytes = match checkpoint_units % 5 {
                    0 => 24 * 5,
                    1 => 1 << 20,
                    _ => 0,
                };
                let cfg = OsdConfig {
                    placement,
                    unit_map_bytes,
                    index_mode: if rng.gen_bool(0.2) {
                        IndexMode::Page
                    } else {
                        IndexMode::Extent
                    },
                    buffer_bytes: [0, 4, 8][rng.gen_range(0..3)] * unit,
                    index_cache_bytes: 8 * unit,
                    onode_cache_entries: 4,
                    checkpoint_units,
                    atime: rng.gen_bool(0.5),
                    atime_merge_pages: 2,
                    small_objects: rng.gen_bool(0.5),
                    // Drawn sequences stay as they were; real-time placement has its own tests.
                    realtime_update_blocks: 0,
                    fresh_update_block_per_object: false,
                    default_reliability: 0,
                    parity_group_units: 16,
                    compression_chunk_units: if compressed { 4 } else { 16 },
                    metadata_copies,
                    fml,
                };
                Variant::Osd(
                    cfg,
                    Services {
                        encrypt,
                        compression,
                    },
                )
            }
        }
    }

    /// Every object made with `m` parity units per group of 4 data units (issue 16 item 4),
    /// and without encryption or compression, which the store does not combine with parity.
    /// Small groups, so that a slot spans many of them.
    pub fn with_reliability(self, m: u8) -> Variant {
        match self {
            Variant::Osd(mut c, _) if m > 0 => {
                c.default_reliability = m;
                c.parity_group_units = 4;
                // Metadata guarded too: a copy of every metadata unit (issue 16 item 2).
                c.metadata_copies = 2;
                Variant::Osd(c, Services::default())
            }
            v => v,
        }
    }

    /// The variant with its FTL's checkpoints while writing kept (`on`) or turned off.
    pub fn with_ftl_checkpoints(self, on: bool) -> Variant {
        match self {
            Variant::Ftl(mut c) if !on => {
                c.checkpoint_every_units = 0;
                Variant::Ftl(c)
            }
            Variant::BlockFs(mut c, b) if !on => {
                c.checkpoint_every_units = 0;
                Variant::BlockFs(c, b)
            }
            v => v,
        }
    }

    /// Whether the stack keeps redundancy a destructive fault must be masked by: parity, or a
    /// copy of every metadata unit.
    pub fn redundant(&self) -> bool {
        // OFS's store may keep metadata copies, but its subject cannot yet say which slots a
        // unit belongs to: damage there relaxes as unknown.
        matches!(self, Variant::Osd(c, _) if c.default_reliability > 0 || c.metadata_copies > 1)
    }

    /// The drawn settings on one line, for reports and replays.
    pub fn describe(&self) -> String {
        match self {
            Variant::Osd(c, services) => format!(
                "osd placement={} index={:?} buffer={} checkpoint_units={} atime={} small_objects={} encrypted={} compression={}",
                c.placement,
                c.index_mode,
                c.buffer_bytes,
                c.checkpoint_units,
                c.atime,
                c.small_objects,
                services.encrypt,
                services.compression.name()
            ) + if c.metadata_copies > 1 { " metadata_copies=2" } else { "" }
                + &if c.default_reliability > 0 {
                format!(" reliability={}+{}", c.parity_group_units, c.default_reliability)
            } else {
                String::new()
            },
            Variant::Ftl(c) => format!(
                "ftl mapping={:?} buffer={} checkpoint_every_units={}",
                c.mapping, c.buffer_bytes, c.checkpoint_every_units
            ),
            Variant::Ofs(c, o) => format!(
                "ofs inode_objects={} dirent_objects={} on {}",
                o.inode_objects,
                o.dirent_objects,
                Variant::Osd(*c, Services::default()).describe()
            ),
            Variant::BlockFs(f, b) => format!(
                "blockfs block={} discard={} writeback={}ns on {}",
                b.block_bytes,
                b.discard,
                b.writeback_interval_ns,
                Variant::Ftl(*f).describe()
            ),
            Variant::Poftl(c) => format!(
                "poftl degree={} grouping={:?} buffer_pages={} write_regions={}",
                c.parallelism_degree, c.grouping, c.buffer_pages, c.write_regions
            ),
        }
    }

    /// The device this variant runs on: `base`, ganged as p-OFTL needs.
    pub fn device(&self, base: flash::DeviceConfig) -> Result<flash::DeviceConfig, Fail> {
        match self {
            Variant::Poftl(c) => crate::files::poftl_device(c, base),
            _ => Ok(base),
        }
    }

    /// Formats a fresh device; returns the subject and the bytes it can hold.
    pub fn format(&self, dev: Device) -> Result<(Box<dyn Subject>, u64), Fail> {
        match *self {
            Variant::Osd(cfg, services) => {
                let mut s = ObjectStore::format(dev, cfg).map_err(osd_fail)?;
                s.set_master_key(Some(torture_key()));
                s.create_partition(Some(PartitionId(PARTITION)))
                    .map_err(osd_fail)?;
                s.flush(FlushScope::Device).map_err(osd_fail)?;
                // Objects with parity hold `k` data units in every `k + m` the device gives
                // them: what the slots may span is the data's share, so that `--fill` is how
                // full the device is (at `--reliability 1 --fill 80` the slots and their parity
                // spanned all of it).
                let (k, m) = (
                    cfg.parity_group_units as u64,
                    cfg.default_reliability as u64,
                );
                let capacity = s.fml().capacity_units() * s.unit_bytes() as u64 * k / (k + m);
                Ok((Box::new(OsdSubject { store: s, services }), capacity))
            }
            Variant::Ftl(cfg) => {
                let f = Ftl::open(dev, cfg).map_err(ftl_fail)?;
                let capacity = f.capacity_bytes();
                Ok((
                    Box::new(FtlSubject {
                        ftl: f,
                        t: 0,
                        slot_bytes: 0,
                    }),
                    capacity,
                ))
            }
            Variant::Ofs(osd, ofs) => crate::files::format_ofs(dev, osd, ofs),
            Variant::BlockFs(ftl, fs) => crate::files::format_blockfs(dev, ftl, fs),
            Variant::Poftl(cfg) => crate::files::format_poftl(dev, cfg),
        }
    }

    /// Recovers a stack from a device; hands the device back when recovery fails after it was
    /// taken, so a power cut during recovery can be retried. `broken` opens the FTL with its
    /// test-only recovery that skips the roll-forward (to prove the harness catches it).
    #[allow(clippy::result_large_err)] // the device travels back by design, once per reboot
    pub fn open(
        &self,
        dev: Device,
        slot_bytes: u64,
        broken: bool,
    ) -> Result<Box<dyn Subject>, (Fail, Option<Device>)> {
        match *self {
            Variant::Osd(cfg, services) => match ObjectStore::open_or_return(dev, cfg) {
                Ok(mut store) => {
                    store.set_master_key(Some(torture_key()));
                    Ok(Box::new(OsdSubject { store, services }))
                }
                Err((e, d)) => Err((osd_fail(e), d)),
            },
            Variant::Ftl(cfg) => {
                // The FTL's recovery only reads, unless it passes a torn unit over: then it
                // writes a checkpoint, which a power cut may strike (the device comes back).
                let r = if broken {
                    Ftl::open_broken_without_roll_forward(dev, cfg).map_err(|e| (e, None))
                } else {
                    Ftl::open_or_return(dev, cfg)
                };
                match r {
                    Ok(ftl) => Ok(Box::new(FtlSubject {
                        ftl,
                        t: 0,
                        slot_bytes,
                    })),
                    Err((e, d)) => Err((ftl_fail(e), d)),
                }
            }
            Variant::Ofs(osd, _) => crate::files::open_ofs(dev, osd),
            Variant::BlockFs(ftl, fs) => crate::files::open_blockfs(dev, ftl, fs),
            Variant::Poftl(cfg) => crate::files::open_poftl(dev, cfg),
        }
    }
}

/// The device master key of every torture run (runs of encrypted objects need one).
fn torture_key() -> osd::MasterKey {
    osd::MasterKey::from_bytes([0x5E; 32])
}

/// The partition every torture object lives in.
const PARTITION: u64 = 0x10000;
/// The second partition, created and removed empty (objects live in [`PARTITION`] only).
const PARTITION2: u64 = 0x20000;

fn oid(slot: u32) -> Oid {
    Oid::new(PARTITION, PARTITION + 1 + slot as u64)
}

/// The slot whose data alone a record names, from OOB bytes a program carried, told from the
/// bytes alone (no stack to ask: a misdirected program of a shutdown). Only the object store's
/// data records name one slot.
pub fn record_slot(stack: StackKind, oob: &[u8]) -> Option<u32> {
    if stack == StackKind::Poftl {
        return crate::files::poftl_record_slot(oob);
    }
    if stack != StackKind::Osd {
        return None;
    }
    // Data units hold one object's bytes (compressed chunks and encrypted units too);
    // small-object pages hold several objects', descriptor pages several onodes.
    match osd::record::Record::decode_sealed(oob).ok()??.record {
        osd::record::Record::Data { oid, .. } => slot_of(oid),
        _ => None,
    }
}

/// The FTL unit holding `page` and its OOB record (on the unit's first page), read without a
/// flash command.
fn ftl_unit_record(
    ftl: &mut Ftl<Device>,
    page: flash::PageAddr,
) -> Option<(flash::gang::Vpa, Vec<u8>)> {
    let layout = *ftl.fml().layout();
    let v = layout.vpa_of(page)?;
    let mut oob = vec![0u8; ftl::oob::packed_record_bytes(ftl::oob::MAX_SLOTS)];
    ftl.device_mut()
        .inner_mut()
        .inner_mut()
        .peek_oob(layout.page(v, 0), &mut oob)?;
    Some((v, oob))
}

/// [`Subject::page_live`] of a stack on the FTL: whether recovery could need the unit holding
/// `page` ([`Ftl::unit_needed`]).
pub(crate) fn ftl_page_live(ftl: &mut Ftl<Device>, page: flash::PageAddr) -> Option<bool> {
    let (v, oob) = ftl_unit_record(ftl, page)?;
    ftl.unit_needed(v, &oob)
}

/// The slot whose sectors an FTL data unit (OOB record `oob`) holds, when all of them are one
/// slot's: logical pages of `unit_bytes` each, slots of `slot_bytes` from logical address 0.
pub(crate) fn ftl_record_slot(oob: &[u8], unit_bytes: u64, slot_bytes: u64) -> Option<u32> {
    use ftl::oob::{Kind, Record, EMPTY_SLOT};
    let rec = Record::decode(oob).ok()??;
    let slot_of = |lpn: u32| {
        let first = lpn as u64 * unit_bytes / slot_bytes;
        let last = ((lpn as u64 + 1) * unit_bytes - 1) / slot_bytes;
        (first == last && first < SLOTS as u64).then_some(first as u32)
    };
    match rec.kind {
        Kind::Data => slot_of(rec.key),
        Kind::Packed => {
            let mut slots = rec.slots.keys[..rec.slots.n as usize]
                .iter()
                .filter(|&&k| k != EMPTY_SLOT)
                .map(|&k| slot_of(k));
            let first = slots.next()??;
            slots.all(|s| s == Some(first)).then_some(first)
        }
        Kind::Map | Kind::Checkpoint => None,
    }
}

/// The slots a unit of shared metadata covers, from the record and payload of its program, as
/// [`record_slot`] tells a data unit's slot: p-OFTL's record pages name their objects.
pub fn record_slots(stack: StackKind, oob: &[u8], data: &[u8]) -> Option<u64> {
    match stack {
        StackKind::Poftl => crate::files::poftl_record_cover(oob, data),
        _ => None,
    }
}

/// The objects whose data or metadata the object-store unit holding `page` holds (from its
/// record and payload, read without a flash command); `None` when that cannot be told.
pub(crate) fn objects_on_page(
    store: &mut ObjectStore<Device>,
    page: flash::PageAddr,
) -> Option<Vec<Oid>> {
    let layout = *store.fml().layout();
    let v = layout.vpa_of(page)?;
    let page_bytes = flash::Flash::config(store.device_mut())
        .geometry
        .page_size_bytes as usize;
    let pages = layout.pages_per_unit() as usize;
    let mut data = vec![0u8; page_bytes * pages];
    let mut oob = [0u8; osd::record::RECORD_MAX_BYTES];
    let mut no_oob = [0u8; 0];
    let nand = store.device_mut().inner_mut().inner_mut();
    for (i, chunk) in data.chunks_mut(page_bytes).enumerate() {
        let o: &mut [u8] = if i == 0 { &mut oob } else { &mut no_oob };
        nand.peek_page(layout.page(v, i as u32), chunk, o)?;
    }
    osd::store::objects_in_unit(&oob, &data)
}

/// The slot object `o` stands for, if any.
fn slot_of(o: Oid) -> Option<u32> {
    (0..64).find(|&s| oid(s) == o)
}

/// Classifies by the error's type, never its text.
pub(crate) fn osd_fail(e: OsdError) -> Fail {
    use fml::FmlError;
    match e {
        OsdError::Device(FmlError::Flash(flash::FlashError::PowerLoss)) => Fail::PowerLoss,
        OsdError::NoSpace { .. } | OsdError::Device(FmlError::NoSpace { .. }) => Fail::NoSpace,
        OsdError::Corrupted { unit, .. } | OsdError::Uncorrectable { unit, .. } => Fail::Corrupt {
            unit,
            what: e.to_string(),
        },
        OsdError::Device(_) | OsdError::Poisoned(_) => Fail::Device(e.to_string()),
        _ => Fail::Other(e.to_string()),
    }
}

pub(crate) fn ftl_fail(e: FtlError) -> Fail {
    use fml::FmlError;
    match e {
        FtlError::Fml(FmlError::Flash(flash::FlashError::PowerLoss)) => Fail::PowerLoss,
        FtlError::Fml(FmlError::NoSpace { .. }) => Fail::NoSpace,
        FtlError::Unreadable { .. }
        | FtlError::Corrupted(_)
        | FtlError::Lost { .. }
        | FtlError::Checksum { .. } => Fail::Corrupt {
            unit: e.unit(),
            what: e.to_string(),
        },
        FtlError::Fml(FmlError::Flash(_)) => Fail::Device(e.to_string()),
        _ => Fail::Other(e.to_string()),
    }
}

/// The harness's view of the store's answer (an error: it cannot tell).
fn page_role_of(r: Result<UnitRole, OsdError>) -> PageRole {
    match r {
        Ok(UnitRole::Stale) => PageRole::Stale,
        Ok(UnitRole::Protected {
            oid,
            group,
            unit,
            seq,
        }) => PageRole::Guarded(Guarded {
            oid: oid.as_u128(),
            group,
            unit,
            seq,
            slot: slot_of(oid),
        }),
        Ok(UnitRole::Copied { unit, copy, seq }) => PageRole::Guarded(Guarded {
            oid: METADATA,
            group: unit as u64,
            unit: (!copy).then_some(0),
            seq,
            slot: None,
        }),
        Ok(UnitRole::Unprotected) => PageRole::Live,
        Err(_) => PageRole::Unknown,
    }
}

struct OsdSubject {
    store: ObjectStore<Device>,
    /// What every object is made with.
    services: Services,
}

impl OsdSubject {
    /// Creates the object with the run's services; `Ok(false)` if it existed.
    fn make(&mut self, slot: u32) -> Result<bool, Fail> {
        match self.store.create(
            PartitionId(PARTITION),
            Some(ObjectId(PARTITION + 1 + slot as u64)),
        ) {
            Ok(_) => {}
            Err(OsdError::AlreadyExists(_)) => return Ok(false),
            // Formatting made the partition: only lost metadata loses it.
            Err(OsdError::NotFound(what)) => {
                return Err(Fail::Missing(format!("{what} vanished from the store")))
            }
            Err(e) => return Err(osd_fail(e)),
        }
        if self.services.encrypt {
            self.store
                .set_attr(oid(slot), Attr::Encryption, AttrValue::U64(1))
                .map_err(osd_fail)?;
        }
        let c = self.services.compression;
        if c != osd::compress::Compression::None {
            self.store
                .set_attr(oid(slot), Attr::Compression, AttrValue::U64(c.code()))
                .map_err(osd_fail)?;
        }
        Ok(true)
    }
}

/// An object command on an object the harness knows exists failed with `NotFound`.
fn missing(e: OsdError, what: &str) -> Fail {
    match e {
        OsdError::NotFound(m) => Fail::Missing(format!("{what}: {m}")),
        e => osd_fail(e),
    }
}

impl Subject for OsdSubject {
    fn write(&mut self, slot: u32, offset: u64, data: &[u8]) -> Result<(), Fail> {
        match self.store.write(oid(slot), offset, data) {
            Err(OsdError::NotFound(_)) => {
                self.make(slot)?;
                self.store.write(oid(slot), offset, data).map_err(osd_fail)
            }
            r => r.map_err(osd_fail),
        }
    }
    fn read(&mut self, slot: u32, offset: u64, buf: &mut [u8]) -> Result<usize, Fail> {
        match self.store.read(oid(slot), offset, buf) {
            Err(OsdError::NotFound(_)) => Ok(0),
            r => r.map_err(osd_fail),
        }
    }
    fn discard(&mut self, slot: u32) -> Result<(), Fail> {
        match self.store.remove(oid(slot)) {
            Err(OsdError::NotFound(_)) => Ok(()),
            r => r.map_err(osd_fail),
        }
    }
    fn flush(&mut self) -> Result<(), Fail> {
        self.store.flush(FlushScope::Device).map_err(osd_fail)
    }
    fn idle(&mut self) -> Result<(), Fail> {
        let now = self.store.now();
        self.store
            .background(now, now + 20_000_000)
            .map(|_| ())
            .map_err(osd_fail)
    }
    fn exists(&mut self, slot: u32) -> Result<bool, Fail> {
        self.length(slot).map(|l| l.is_some())
    }
    fn objects(&self) -> bool {
        true
    }
    fn length(&mut self, slot: u32) -> Result<Option<u64>, Fail> {
        match self.store.get_attr(oid(slot), Attr::LogicalLength) {
            Ok(AttrValue::U64(len)) => Ok(Some(len)),
            Ok(other) => Err(Fail::Other(format!("logical length reads as {other:?}"))),
            Err(OsdError::NotFound(_)) => Ok(None),
            Err(e) => Err(osd_fail(e)),
        }
    }
    fn truncate(&mut self, slot: u32, len: u64) -> Result<(), Fail> {
        self.store
            .truncate(oid(slot), len)
            .map_err(|e| missing(e, "truncate"))
    }
    fn create(&mut self, slot: u32) -> Result<(), Fail> {
        self.make(slot).map(|_| ())
    }
    fn set_attr(&mut self, slot: u32, attr: usize, value: Option<&[u8]>) -> Result<(), Fail> {
        let v = value.map_or(AttrValue::Absent, |v| AttrValue::Bytes(v.to_vec()));
        self.store
            .set_attr(oid(slot), Attr::User(FIRST_ATTR + attr as u16), v)
            .map_err(|e| missing(e, "set attribute"))
    }
    fn attrs(&mut self, slot: u32) -> Result<Option<Vec<Option<Vec<u8>>>>, Fail> {
        let mut out = Vec::with_capacity(ATTRS);
        for i in 0..ATTRS {
            match self
                .store
                .get_attr(oid(slot), Attr::User(FIRST_ATTR + i as u16))
            {
                Ok(AttrValue::Bytes(v)) => out.push(Some(v)),
                Ok(AttrValue::Absent) => out.push(None),
                Ok(other) => return Err(Fail::Other(format!("user attribute reads as {other:?}"))),
                Err(OsdError::NotFound(_)) if i == 0 => return Ok(None),
                Err(e) => return Err(osd_fail(e)),
            }
        }
        Ok(Some(out))
    }
    fn list(&mut self) -> Result<Vec<u32>, Fail> {
        let mut out = Vec::new();
        let mut token = 0;
        // Pages of 4, so that continuation tokens are followed too.
        for _ in 0..1000 {
            let (ids, next) = self
                .store
                .list(PartitionId(PARTITION), token, 4)
                .map_err(|e| missing(e, "list"))?;
            if ids.len() > 4 {
                return Err(Fail::Other(format!(
                    "list returned {} ids for 4",
                    ids.len()
                )));
            }
            for id in ids {
                match id.0.checked_sub(PARTITION + 1) {
                    Some(s) if s < u32::MAX as u64 => out.push(s as u32),
                    _ => {
                        return Err(Fail::Other(format!(
                            "list returned a foreign object {id:?}"
                        )))
                    }
                }
            }
            match next {
                Some(t) => token = t,
                None => return Ok(out),
            }
        }
        Err(Fail::Other("list: continuation tokens never end".into()))
    }
    fn set_partition(&mut self, present: bool) -> Result<(), Fail> {
        let p = PartitionId(PARTITION2);
        if present {
            self.store
                .create_partition(Some(p))
                .map(|_| ())
                .map_err(|e| match e {
                    // Out of step with the oracle: only damage that hid it from the listing
                    // after recovery can do that (tolerated then, like a missing object).
                    OsdError::AlreadyExists(m) => {
                        Fail::Missing(format!("create partition: {m} already exists"))
                    }
                    e => osd_fail(e),
                })
        } else {
            self.store
                .remove_partition(p)
                .map_err(|e| missing(e, "remove partition"))
        }
    }
    fn partition(&mut self) -> Result<bool, Fail> {
        let (parts, next) = self.store.list_partitions(0, 16).map_err(osd_fail)?;
        if next.is_some() || !parts.contains(&PartitionId(PARTITION)) {
            return Err(Fail::Missing(format!("partitions listed: {parts:?}")));
        }
        let mut extra = false;
        for p in parts {
            match p.0 {
                PARTITION => {}
                PARTITION2 => extra = true,
                _ => return Err(Fail::Other(format!("a foreign partition {p:?} is listed"))),
            }
        }
        Ok(extra)
    }
    fn fsck(&mut self) -> Result<Vec<String>, Fail> {
        self.store
            .fsck_structure()
            .map(|r| r.problems)
            .map_err(osd_fail)
    }
    fn device(&mut self) -> &mut Device {
        self.store.device_mut()
    }
    // The object store releases a unit only once nothing durable refers to it (a removal's or
    // truncation's onode reaches flash before its units are released; an overwritten unit is
    // released when its successor is programmed): the invariant that lets GC erase it.
    fn coverage(&self) -> Coverage {
        Coverage {
            checkpoints: self.store.stats().checkpoints,
            ..fml_coverage(self.store.fml().stats())
        }
    }
    fn page_live(&mut self, page: flash::PageAddr) -> Option<bool> {
        let fml = self.store.fml();
        fml.layout().vpa_of(page).map(|v| fml.is_valid(v))
    }
    fn page_role(&mut self, page: flash::PageAddr) -> PageRole {
        let Some(v) = self.store.fml().layout().vpa_of(page) else {
            return PageRole::Unknown;
        };
        page_role_of(self.store.unit_role(v.0))
    }
    fn page_owner(&mut self, page: flash::PageAddr) -> Option<u32> {
        let mut oob = [0u8; osd::record::RECORD_MAX_BYTES];
        self.store
            .device_mut()
            .inner_mut()
            .inner_mut()
            .peek_oob(page, &mut oob)?;
        self.record_owner(&oob)
    }
    fn page_cover(&mut self, page: flash::PageAddr) -> Option<u64> {
        let objects = objects_on_page(&mut self.store, page)?;
        let mut mask = 0u64;
        for o in objects {
            mask |= 1 << slot_of(o)?;
        }
        (mask != 0).then_some(mask)
    }
    fn record_owner(&mut self, oob: &[u8]) -> Option<u32> {
        record_slot(StackKind::Osd, oob)
    }
    fn record_role(&mut self, page: flash::PageAddr, oob: &[u8]) -> PageRole {
        let Some(v) = self.store.fml().layout().vpa_of(page) else {
            return PageRole::Unknown;
        };
        page_role_of(self.store.unit_role_from_oob(v.0, oob))
    }
    fn guard_survives_crash(&mut self, g: &Guarded) -> bool {
        // A metadata unit's copy is on flash with it: recovery reads the copy of a unit
        // whose record or payload it cannot read.
        g.oid == METADATA
            || self
                .store
                .parity_survives_crash(Oid::from_u128(g.oid), g.group, g.seq)
    }
    fn guard_lost(&mut self, g: &Guarded) -> Result<bool, Fail> {
        if g.oid == METADATA {
            // Lives and dies with its block (GC moves it from its copy when it cannot read it).
            return Ok(false);
        }
        match g.unit {
            Some(u) => self
                .store
                .unit_lost(Oid::from_u128(g.oid), u)
                .map_err(osd_fail),
            None => Ok(false),
        }
    }
    fn crash(self: Box<Self>) -> Device {
        self.store.crash()
    }
    fn close(self: Box<Self>) -> Result<Device, (Fail, Device)> {
        let mut store = self.store;
        match store.checkpoint() {
            Ok(_) => Ok(store.crash()),
            Err(e) => Err((osd_fail(e), store.crash())),
        }
    }
}

struct FtlSubject {
    ftl: Ftl<Device>,
    /// Virtual time: the FTL takes it with each call.
    t: u64,
    /// Bytes per slot (set by the harness once it chose the slot size).
    slot_bytes: u64,
}

impl FtlSubject {
    fn advance(&mut self, r: Result<u64, FtlError>) -> Result<(), Fail> {
        let done = r.map_err(ftl_fail)?;
        self.t = self.t.max(done);
        Ok(())
    }
}

impl Subject for FtlSubject {
    fn write(&mut self, slot: u32, offset: u64, data: &[u8]) -> Result<(), Fail> {
        let at = slot as u64 * self.slot_bytes + offset;
        let r = self
            .ftl
            .write(self.t, at, data.len() as u64, Data::Bytes(data));
        self.advance(r)
    }
    fn read(&mut self, slot: u32, offset: u64, buf: &mut [u8]) -> Result<usize, Fail> {
        let at = slot as u64 * self.slot_bytes + offset;
        let n = buf.len();
        let r = self.ftl.read(self.t, at, n as u64, ReadOut::Bytes(buf));
        self.advance(r)?;
        Ok(n)
    }
    fn discard(&mut self, slot: u32) -> Result<(), Fail> {
        let r = self
            .ftl
            .trim(self.t, slot as u64 * self.slot_bytes, self.slot_bytes);
        self.advance(r)
    }
    fn flush(&mut self) -> Result<(), Fail> {
        let r = self.ftl.flush(self.t);
        self.advance(r)
    }
    fn idle(&mut self) -> Result<(), Fail> {
        let r = self.ftl.background(self.t, self.t + 20_000_000);
        self.advance(r)
    }
    fn exists(&mut self, _slot: u32) -> Result<bool, Fail> {
        Ok(true)
    }
    fn set_slot_bytes(&mut self, slot_bytes: u64) {
        self.slot_bytes = slot_bytes;
    }
    fn fsck(&mut self) -> Result<Vec<String>, Fail> {
        Ok(problems(self.ftl.check()))
    }
    fn device(&mut self) -> &mut Device {
        self.ftl.device_mut()
    }
    fn coverage(&self) -> Coverage {
        Coverage {
            checkpoints: self.ftl.stats().checkpoint_units_written,
            ..fml_coverage(self.ftl.fml().stats())
        }
    }
    // A TRIM invalidates the trimmed pages in the FML at once but is durable only at the next
    // checkpoint, so a crash can bring back a mapping to a page the FML calls stale (found by
    // `ftl_survives_every_fault_kind`, seed 10527209363850832854): the FTL counts such a unit
    // needed (`Ftl::unit_needed`).
    fn page_live(&mut self, page: flash::PageAddr) -> Option<bool> {
        ftl_page_live(&mut self.ftl, page)
    }
    fn page_owner(&mut self, page: flash::PageAddr) -> Option<u32> {
        let (_, oob) = ftl_unit_record(&mut self.ftl, page)?;
        self.record_owner(&oob)
    }
    fn record_owner(&mut self, oob: &[u8]) -> Option<u32> {
        ftl_record_slot(oob, self.ftl.unit_bytes() as u64, self.slot_bytes)
    }
    fn space_promised(&self) -> bool {
        true
    }
    fn crash(self: Box<Self>) -> Device {
        self.ftl.crash()
    }
    fn close(self: Box<Self>) -> Result<Device, (Fail, Device)> {
        let mut ftl = self.ftl;
        match ftl.checkpoint(self.t) {
            Ok(_) => Ok(ftl.crash()),
            Err(e) => Err((ftl_fail(e), ftl.crash())),
        }
    }
}
