//! The p-OFTL object store (POFTL-14 III): objects located by their own extents only, written
//! through a data buffer whose contents are grouped (III-B) into write regions, over super-blocks
//! of `2^k` banks (III-A) managed by the shared FML.
//!
//! ## Write path
//! 1. `write` puts whole pages into the data buffer (a partial page is merged with its old
//!    contents: read-modify-write). The call completes at once unless the buffer is full.
//! 2. `create`, `truncate` and `remove` take effect in memory at once and queue a log entry.
//! 3. When the buffer holds `buffer_pages` pages, or at `flush`, the queued entries are
//!    programmed first, into record pages (docs/FORMAT.md section 4). Then the buffer's `L`
//!    pages are taken in
//!    logical order (object, page); each gets its hotness `h_p` (III-B-1); the grouping policy
//!    splits them into groups and picks each group's write region (III-B-2).
//! 4. Each page is programmed into its region's update super-block, all pages issued at the same
//!    virtual time so that consecutive pages of a super-block run on `2^k` banks at once (III-A).
//!    Foreground GC runs first whenever free super-blocks are below the low watermark.
//! 5. The page's extent is updated and its old location invalidated. When `flush` returns, all
//!    of it is durable.
//!
//! The paper says little about p-OFTL's recovery. This store's: [`PoftlStore::mount`] rebuilds
//! the extents and sizes from the data pages' OOB records and the log entries; page histories
//! restart from zero.

use std::collections::BTreeMap;

use flash::gang::Vpa;
use flash::{Content, Flash, FlashError, Nanos, Payload};
use fml::{Fml, FmlConfig, FmlError, Owner, StreamId};
use rustc_hash::FxHashMap;
use serde::{Deserialize, Serialize};

use crate::grouping::{self, GroupingPolicy, Regions};
use crate::remap::{Remap, RemapError};

/// Settings of a p-OFTL store. Defaults are the paper's where it gives them.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct PoftlConfig {
    /// `2^k` banks a super-block spans (POFTL-14 III-A; 16 in IV-B). One of 1, 2, 4, 8, 16.
    pub parallelism_degree: u32,
    /// Data grouping policy (default semantic-aware, III-B).
    pub grouping: GroupingPolicy,
    /// `lambda`, the weight of the group count in `W` (III-B-1). The paper gives no value. The
    /// store divides each write's hotness by its mean before grouping, which makes `lambda`
    /// dimensionless. Merging goes on while `lambda (2k - 1)` exceeds the deviation a merge
    /// adds; with 0.0005 and a 512-page write, single pages within about the mean hotness of
    /// each other merge at first, while tens of groups (files) stay apart unless nearly equal.
    /// (A first default of 0.02 forced a write down to about 25 groups, merging hot and cold
    /// files: on the hot/cold file workload it lost all of SFS's separation; docs/DESIGN.md.)
    pub lambda: f64,
    /// Write regions (update super-blocks) groups are written to (III-B-2: "four").
    pub write_regions: u32,
    /// Pages the data buffer gathers before they are grouped and written (default 512: 2 MiB of
    /// 4 KiB pages, the buffer size of the other ossd stacks).
    pub buffer_pages: u32,
    /// Where GC's copies of live pages go (default their own stream, as the paper's GC
    /// separates survivors; `coldest-region` is the ablation that mixes them into the coldest
    /// write region with new cold data).
    pub gc_copies: GcCopies,
    /// The FML below (watermarks, victim policy, wear leveling).
    pub fml: FmlConfig,
}

/// Where GC's copies of live data pages are written.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum GcCopies {
    /// GC's own stream, apart from every write region: survivors (old, cold data) never share
    /// a super-block with new writes.
    #[default]
    OwnStream,
    /// The coldest write region's update super-block (region 0: the regions' centres ascend),
    /// beside the coldest new writes. Record pages still go to GC's stream.
    ColdestRegion,
}

impl Default for PoftlConfig {
    fn default() -> Self {
        PoftlConfig {
            parallelism_degree: 16,
            grouping: GroupingPolicy::SemanticAware,
            lambda: 0.0005,
            write_regions: 4,
            buffer_pages: 512,
            gc_copies: GcCopies::OwnStream,
            fml: FmlConfig::default(),
        }
    }
}

impl PoftlConfig {
    /// Checks the settings (parallelism degree, write regions from 1 to 8, and the rest);
    /// [`PoftlError::Config`] or [`PoftlError::Remap`] names what is wrong.
    pub fn validate(&self) -> Result<(), PoftlError> {
        Remap::check_degree(self.parallelism_degree)?;
        if !(1..=8).contains(&self.write_regions) {
            return Err(PoftlError::Config(format!(
                "write_regions = {} must be in 1..=8",
                self.write_regions
            )));
        }
        if !(self.lambda.is_finite() && self.lambda >= 0.0) {
            return Err(PoftlError::Config(format!(
                "lambda = {} must be a finite number >= 0",
                self.lambda
            )));
        }
        if self.buffer_pages == 0 {
            return Err(PoftlError::Config("buffer_pages must be at least 1".into()));
        }
        Ok(())
    }

    /// `base` with its ganging set to this parallelism degree: one page per bank per write
    /// unit, `2^k` banks per super-block. Banks are dies; devices with several planes per die
    /// are refused (the paper's simulator has single-plane banks).
    pub fn device(&self, mut base: flash::DeviceConfig) -> Result<flash::DeviceConfig, PoftlError> {
        self.validate()?;
        if base.geometry.planes_per_die != 1 {
            return Err(PoftlError::Config(format!(
                "p-OFTL banks are single-plane dies; the device has {} planes per die",
                base.geometry.planes_per_die
            )));
        }
        base.gang = flash::Gang {
            planes_per_unit: 1,
            dies_per_unit: 1,
            units_per_superblock: self.parallelism_degree,
        };
        base.validate()?;
        Ok(base)
    }
}

/// Why a p-OFTL operation failed.
#[derive(Debug, thiserror::Error)]
pub enum PoftlError {
    /// The FML below failed (no space, a device error).
    #[error(transparent)]
    Fml(#[from] FmlError),
    /// The device failed.
    #[error(transparent)]
    Flash(#[from] FlashError),
    /// The static remapping does not fit the device.
    #[error("static remapping: {0}")]
    Remap(#[from] RemapError),
    /// A setting is out of range (says which).
    #[error("p-OFTL configuration: {0}")]
    Config(String),
    /// The device configuration with p-OFTL's ganging does not validate.
    #[error("p-OFTL configuration: {0}")]
    Device(#[from] flash::DeviceConfigError),
    /// No object with this id.
    #[error("object {0:#x} does not exist")]
    NoObject(u64),
    /// An object with this id exists already.
    #[error("object {0:#x} already exists")]
    Exists(u64),
    /// The store is full: live pages at its capacity.
    #[error("no space: {live} pages live, capacity {capacity}")]
    NoSpace {
        /// Live pages.
        live: u64,
        /// Pages the store can hold.
        capacity: u64,
    },
    /// An argument the call cannot take (says why).
    #[error("invalid argument: {0}")]
    Invalid(String),
    /// A record read back from flash does not decode or check.
    #[error("corrupted: {what} at unit {unit}")]
    Corrupted {
        /// What did not check.
        what: &'static str,
        /// The write unit (VPA) it was read from.
        unit: u32,
    },
    /// An earlier write failed; every later write is refused (the reason of the first failure).
    #[error("an earlier write failed ({0}); the store refuses writes (its state is unknown)")]
    Poisoned(String),
    /// The page's contents were lost: GC could not read it back to move it. Reads and partial
    /// writes of it fail until it is written whole, truncated away or its object removed (a
    /// remount forgets it: p-OFTL keeps no record of lost pages on flash).
    #[error("page {page} of object {object:#x} was lost (unreadable when GC moved it)")]
    Lost {
        /// The object.
        object: u64,
        /// The page.
        page: u64,
    },
}

/// What a write carries.
#[derive(Clone, Copy, Debug)]
pub enum Data<'a> {
    /// Real bytes, as long as the write.
    Bytes(&'a [u8]),
    /// Fingerprint mode: `len` bytes stood for by a token.
    Token {
        /// Bytes the write stands for.
        len: u64,
        /// The token standing for them.
        token: u64,
    },
}

/// Where a read puts the bytes.
pub enum ReadOut<'a> {
    /// Into this buffer, as long as the read.
    Bytes(&'a mut [u8]),
    /// Only the time and the I/O are wanted.
    Discard(u64),
}

/// Counters of p-OFTL's own work.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub struct PoftlStats {
    /// Bytes the host asked to write.
    pub host_write_bytes: u64,
    /// Bytes the host asked to read.
    pub host_read_bytes: u64,
    /// Pages the host's writes programmed (GC copies not counted).
    pub host_pages_written: u64,
    /// Reads of old contents to complete a partial page.
    pub rmw_reads: u64,
    /// Buffer flushes (grouped writes).
    pub flushes: u64,
    /// Groups the grouping policy formed, over all flushes.
    pub groups: u64,
    /// Pages GC could not read back.
    pub units_lost: u64,
    /// Record pages programmed (the log of creations, truncations and removals), snapshots
    /// included.
    pub log_pages_written: u64,
    /// Snapshots of the log written (each frees the record pages before it).
    pub log_snapshots: u64,
    /// Newest versions of pages a mount passed over because their payload failed their
    /// record's checksum (torn programs).
    pub torn_pages_passed_over: u64,
}

/// Where the writes of one write region (or of GC) went and what reclaiming them cost.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub struct RegionStats {
    /// Pages programmed into the region's update super-blocks.
    pub pages_written: u64,
    /// Super-blocks of the region GC chose as victims.
    pub victims: u64,
    /// Valid pages GC moved out of them.
    pub pages_moved: u64,
}

/// A page's write history: `W_p` and `T_p^m` (POFTL-14 III-B-1).
#[derive(Clone, Copy, Debug, Default)]
struct Heat {
    writes: u32,
    modified_ns: Nanos,
}

/// An object's page locations as extents: runs of consecutive logical pages stored at
/// consecutive write units, keyed by first logical page. This is p-OFTL's only mapping.
#[derive(Default, Debug)]
struct Extents(BTreeMap<u64, (u32, u32)>);

impl Extents {
    fn get(&self, p: u64) -> Option<Vpa> {
        let (&s, &(v, n)) = self.0.range(..=p).next_back()?;
        (p < s + n as u64).then(|| Vpa(v + (p - s) as u32))
    }

    fn remove(&mut self, p: u64) -> Option<Vpa> {
        let (&s, &(v, n)) = self.0.range(..=p).next_back()?;
        if p >= s + n as u64 {
            return None;
        }
        let off = (p - s) as u32;
        self.0.remove(&s);
        if off > 0 {
            self.0.insert(s, (v, off));
        }
        if off + 1 < n {
            self.0.insert(p + 1, (v + off + 1, n - off - 1));
        }
        Some(Vpa(v + off))
    }

    /// Maps page `p` to `vpa`, merging with the neighbouring extents; returns the old location.
    fn insert(&mut self, p: u64, vpa: Vpa) -> Option<Vpa> {
        let old = self.remove(p);
        let (mut start, mut first, mut len) = (p, vpa.0, 1u32);
        if let Some((&ls, &(lv, ln))) = self.0.range(..p).next_back() {
            if ls + ln as u64 == p && lv.checked_add(ln) == Some(vpa.0) {
                self.0.remove(&ls);
                (start, first, len) = (ls, lv, ln + 1);
            }
        }
        if let Some(&(rv, rn)) = self.0.get(&(p + 1)) {
            if vpa.0.checked_add(1) == Some(rv) {
                self.0.remove(&(p + 1));
                len += rn;
            }
        }
        self.0.insert(start, (first, len));
        old
    }

    /// Removes every page from `from` on; returns their locations.
    fn cut(&mut self, from: u64) -> Vec<Vpa> {
        let mut out = Vec::new();
        if let Some((&s, &(v, n))) = self.0.range(..from).next_back() {
            if s + n as u64 > from {
                let keep = (from - s) as u32;
                out.extend((keep..n).map(|i| Vpa(v + i)));
                self.0.insert(s, (v, keep));
            }
        }
        for (_, (v, n)) in self.0.split_off(&from) {
            out.extend((0..n).map(|i| Vpa(v + i)));
        }
        out
    }

    fn pages(&self) -> impl Iterator<Item = (u64, Vpa)> + '_ {
        self.0
            .iter()
            .flat_map(|(&s, &(v, n))| (0..n).map(move |i| (s + i as u64, Vpa(v + i))))
    }
}

#[derive(Default, Debug)]
struct Object {
    size: u64,
    extents: Extents,
    heat: Vec<Heat>,
}

/// The objects, as GC sees them (the FML's [`Owner`]).
#[derive(Default)]
struct Objects {
    map: FxHashMap<u64, Object>,
    lost: u64,
    /// Pages GC could not read back, by (object, page): an error to read, never zeros.
    lost_pages: rustc_hash::FxHashSet<(u64, u64)>,
    /// Pages mapped on flash or buffered: what the capacity limits.
    live: u64,
    /// Record pages on flash, with the log epoch each belongs to (see [`PoftlStore::mount`]).
    log_pages: FxHashMap<Vpa, u64>,
    /// Data pages a truncation or removal cut whose entry is not on flash yet. They stay valid,
    /// and GC copies them, until the entry is: erased before it, such a page (the newest of
    /// its object and page) would let a crash bring back an older version of the page still
    /// on flash (docs/RELIABILITY.md, finding 39).
    doomed: rustc_hash::FxHashSet<Vpa>,
    /// The stream GC's copies of data pages go to; `None` for GC's own.
    copies_to: Option<StreamId>,
}

/// On-flash records (docs/FORMAT.md section 4, "p-OFTL records"): the OOB record of a data
/// page, and the record pages that log creations, truncations and removals.
pub mod record {
    /// Bytes of an OOB record: a data page's (version 3); a record page's uses the first 32.
    pub const BYTES: usize = 36;
    /// `kind` of the OOB record of a data page.
    pub const KIND_DATA: u8 = 1;
    /// `kind` of the OOB record of a record page (logged creations, truncations, removals).
    pub const KIND_LOG: u8 = 2;
    /// Format version of a data page's OOB record (3: a checksum of the payload; version 2
    /// records, 32 bytes without it, still decode).
    pub const VERSION: u8 = 3;
    /// Format version of a record page's OOB record (3: the log's epoch and snapshot fields;
    /// version 2 pages, without them, read as epoch 0 appended pages).
    pub const LOG_VERSION: u8 = 3;
    /// Bytes of one entry in a record page.
    pub const ENTRY_BYTES: usize = 32;

    /// What a logged entry did to its object.
    #[derive(Clone, Copy, Debug, PartialEq, Eq)]
    pub enum Op {
        /// The object was created (empty): everything older of it is gone.
        Create = 1,
        /// The object's size was set: pages at and past the new size are gone.
        Truncate = 2,
        /// The object was removed.
        Remove = 3,
    }

    /// A logged entry: `(op, object, size_bytes, seq)`.
    pub type Entry = (Op, u64, u64, u64);

    fn seal(r: &mut [u8; BYTES]) {
        let crc = crc32c::crc32c(&r[..28]);
        r[28..32].copy_from_slice(&crc.to_le_bytes());
    }

    /// A data record's version if it is well formed: 3 (checksum of bytes 0..32 at 32..36) or
    /// 2 (of bytes 0..28 at 28..32).
    fn data_version(r: &[u8]) -> Option<u8> {
        if r.len() < BYTES || r[0] != KIND_DATA {
            return None;
        }
        let sealed = match r[1] {
            VERSION => crc32c::crc32c(&r[..32]).to_le_bytes() == r[32..36],
            2 => crc32c::crc32c(&r[..28]).to_le_bytes() == r[28..32],
            _ => false,
        };
        sealed.then_some(r[1])
    }

    fn seq48(r: &[u8]) -> u64 {
        u48(&r[14..20])
    }

    fn sealed(r: &[u8], kind: u8, versions: &[u8]) -> bool {
        r.len() >= 32
            && r[0] == kind
            && versions.contains(&r[1])
            && crc32c::crc32c(&r[..28]).to_le_bytes() == r[28..32]
    }

    /// A data page's record: its object, page, sequence number, the object's size in bytes
    /// when the page was programmed, and the CRC-32C of the page's payload
    /// ([`flash::payload_crc`]).
    pub fn encode(object: u64, page: u32, seq: u64, size: u64, payload_crc: u32) -> [u8; BYTES] {
        let mut r = [0u8; BYTES];
        r[0] = KIND_DATA;
        r[1] = VERSION;
        r[2..10].copy_from_slice(&object.to_le_bytes());
        r[10..14].copy_from_slice(&page.to_le_bytes());
        r[14..20].copy_from_slice(&seq.to_le_bytes()[..6]);
        r[20..28].copy_from_slice(&size.to_le_bytes());
        r[28..32].copy_from_slice(&payload_crc.to_le_bytes());
        let crc = crc32c::crc32c(&r[..32]);
        r[32..36].copy_from_slice(&crc.to_le_bytes());
        r
    }

    /// The payload checksum a well-formed data record carries (`None` for a version 2 record,
    /// which has none, or anything else).
    pub fn payload_crc(r: &[u8]) -> Option<u32> {
        (data_version(r)? == VERSION).then(|| u32::from_le_bytes([r[28], r[29], r[30], r[31]]))
    }

    /// (object, page, sequence number, size), or `None` for anything but a well-formed data
    /// record.
    pub fn decode(r: &[u8]) -> Option<(u64, u32, u64, u64)> {
        data_version(r)?;
        let object = u64::from_le_bytes(r[2..10].try_into().ok()?);
        let page = u32::from_le_bytes(r[10..14].try_into().ok()?);
        let size = u64::from_le_bytes(r[20..28].try_into().ok()?);
        Some((object, page, seq48(r), size))
    }

    /// What a record page's OOB record says of it.
    #[derive(Clone, Copy, Debug, PartialEq, Eq)]
    pub struct LogPage {
        /// Entries in the page.
        pub count: u16,
        /// CRC-32C of the page's first `count * ENTRY_BYTES` bytes.
        pub payload_crc: u32,
        /// The page's sequence number.
        pub seq: u64,
        /// The log's epoch the page belongs to: the sequence number of the first page of the
        /// snapshot that began it (0 before any snapshot).
        pub epoch: u64,
        /// `(index, pages)` of a snapshot's page; `None` for a page appended after it.
        pub snapshot: Option<(u16, u16)>,
    }

    fn u48(b: &[u8]) -> u64 {
        let mut x = [0u8; 8];
        x[..6].copy_from_slice(&b[..6]);
        u64::from_le_bytes(x)
    }

    /// The OOB record of a record page.
    pub fn encode_log(page: LogPage) -> [u8; BYTES] {
        let mut r = [0u8; BYTES];
        r[0] = KIND_LOG;
        r[1] = LOG_VERSION;
        r[2..4].copy_from_slice(&page.count.to_le_bytes());
        r[4..10].copy_from_slice(&page.epoch.to_le_bytes()[..6]);
        if let Some((index, pages)) = page.snapshot {
            r[10..12].copy_from_slice(&index.to_le_bytes());
            r[12..14].copy_from_slice(&pages.to_le_bytes());
        }
        r[14..20].copy_from_slice(&page.seq.to_le_bytes()[..6]);
        r[20..24].copy_from_slice(&page.payload_crc.to_le_bytes());
        seal(&mut r);
        r
    }

    /// A record page's OOB record, or `None` for anything but a well-formed one.
    pub fn decode_log(r: &[u8]) -> Option<LogPage> {
        if !sealed(r, KIND_LOG, &[2, LOG_VERSION]) {
            return None;
        }
        let pages = u16::from_le_bytes(r[12..14].try_into().ok()?);
        let index = u16::from_le_bytes(r[10..12].try_into().ok()?);
        Some(LogPage {
            count: u16::from_le_bytes(r[2..4].try_into().ok()?),
            payload_crc: u32::from_le_bytes(r[20..24].try_into().ok()?),
            seq: u48(&r[14..20]),
            epoch: u48(&r[4..10]),
            snapshot: (pages > 0).then_some((index, pages)),
        })
    }

    /// Writes entry `e` into the first `ENTRY_BYTES` of `out`.
    pub fn encode_entry(e: Entry, out: &mut [u8]) {
        let (op, object, size, seq) = e;
        out[..ENTRY_BYTES].fill(0);
        out[0] = op as u8;
        out[8..16].copy_from_slice(&object.to_le_bytes());
        out[16..24].copy_from_slice(&size.to_le_bytes());
        out[24..32].copy_from_slice(&seq.to_le_bytes());
    }

    /// Decodes an entry from the first `ENTRY_BYTES` of `b`; `None` if it is short or its op is
    /// unknown.
    pub fn decode_entry(b: &[u8]) -> Option<Entry> {
        let op = match *b.first()? {
            1 => Op::Create,
            2 => Op::Truncate,
            3 => Op::Remove,
            _ => return None,
        };
        let object = u64::from_le_bytes(b.get(8..16)?.try_into().ok()?);
        let size = u64::from_le_bytes(b.get(16..24)?.try_into().ok()?);
        let seq = u64::from_le_bytes(b.get(24..32)?.try_into().ok()?);
        Some((op, object, size, seq))
    }
}

impl Owner for Objects {
    fn before_copy(&mut self, _from: Vpa, oob: &mut [u8]) -> Option<StreamId> {
        if record::decode_log(oob).is_some() {
            return None;
        }
        self.copies_to
    }
    fn recognizes(&mut self, from: Vpa, oob: &[u8]) -> bool {
        if record::decode_log(oob).is_some() {
            return self.log_pages.contains_key(&from);
        }
        if self.doomed.contains(&from) {
            return true;
        }
        record::decode(oob).is_some_and(|(o, p, _, _)| {
            self.map.get(&o).and_then(|obj| obj.extents.get(p as u64)) == Some(from)
        })
    }
    fn relocated(&mut self, from: Vpa, to: Vpa, oob: &[u8]) {
        // `recognizes` vouched for the record and the mapping just before the copy.
        if record::decode_log(oob).is_some() {
            if let Some(epoch) = self.log_pages.remove(&from) {
                self.log_pages.insert(to, epoch);
            }
            return;
        }
        if self.doomed.remove(&from) {
            self.doomed.insert(to);
            return;
        }
        if let Some((o, p, _, _)) = record::decode(oob) {
            if let Some(obj) = self.map.get_mut(&o) {
                let old = obj.extents.insert(p as u64, to);
                debug_assert_eq!(old, Some(from));
            }
        }
    }
    fn lost(&mut self, from: Vpa, _error: &FlashError) {
        self.lost += 1;
        if self.log_pages.remove(&from).is_some() || self.doomed.remove(&from) {
            return;
        }
        // The page is unmapped; reading it is an error from now on (`lost_pages`), never the
        // zeros of a hole.
        for (o, obj) in self.map.iter_mut() {
            let hit = obj
                .extents
                .pages()
                .find(|&(_, v)| v == from)
                .map(|(p, _)| p);
            if let Some(p) = hit {
                obj.extents.remove(p);
                self.live -= 1;
                self.lost_pages.insert((*o, p));
                return;
            }
        }
    }
}

/// Record pages a log may hold beyond twice its snapshot's before a new snapshot is written.
pub const SNAPSHOT_SLACK: usize = 8;

/// Records `found` (sequence number, size, unit) for `page` if it is newer than the version
/// kept so far (a GC copy ties with its original: the first found stays).
fn keep_newest(
    data: &mut FxHashMap<(u64, u32), (u64, u64, Vpa)>,
    page: (u64, u32),
    found: (u64, u64, Vpa),
) {
    let e = data.entry(page).or_insert(found);
    if found.0 > e.0 {
        *e = found;
    }
}

/// Whether a page read back without a device error holds a payload other than the one its
/// record's checksum names: a program a power cut tore that left the record whole (never
/// true of a version 2 record, which names none).
fn payload_torn(oob: &[u8], content: Content, data: &[u8]) -> bool {
    record::payload_crc(oob).is_some_and(|c| flash::content_crc(content, data) != Some(c))
}

/// A buffered page.
#[derive(Clone, Debug)]
enum PageData {
    Bytes(Box<[u8]>),
    Fingerprint(u64),
}

/// The fingerprint of a whole page written with `token` (fingerprint mode).
pub fn page_fingerprint(object: u64, page: u64, token: u64) -> u64 {
    flash::fingerprint::mix(object.rotate_left(40) ^ page ^ flash::fingerprint::mix(token)) | 1
}

/// p-OFTL's object store: objects as extents of pages (no device mapping table), a write buffer
/// grouped into write regions by hotness, whole-super-block GC over the shared FML.
pub struct PoftlStore<F: Flash> {
    fml: Fml<F>,
    config: PoftlConfig,
    remap: Remap,
    objects: Objects,
    buffer: BTreeMap<(u64, u64), PageData>,
    regions: Regions,
    now: Nanos,
    seq: u64,
    stats: PoftlStats,
    page_bytes: u64,
    capacity_pages: u64,
    scratch: Vec<u8>,
    /// The region whose pages each super-block holds (`write_regions` = GC's copies).
    block_region: Vec<u8>,
    /// Per region, then GC's stream last.
    region_stats: Vec<RegionStats>,
    /// Creations, truncations and removals not yet logged on flash (written at the next flush,
    /// before its data pages).
    log: Vec<record::Entry>,
    /// The entries on flash a mount still needs, by object ([`crate::log::keep_needed`]):
    /// what the next snapshot writes.
    logged: BTreeMap<u64, Vec<record::Entry>>,
    /// The entries in `logged`, all objects together (kept as they change: summing them at
    /// every flush walked every object's list).
    logged_entries: usize,
    /// The log's current epoch ([`crate::log::current_epoch`]).
    epoch: u64,
    /// Set when a flush failed part-way: pages may have left the buffer without reaching
    /// flash, so further writes are refused (STYLE: never carry on from an unknown state).
    poisoned: Option<String>,
}

impl<F: Flash> PoftlStore<F> {
    /// A fresh store on an erased device whose ganging is `config.device(..)`'s.
    pub fn format(flash: F, config: PoftlConfig) -> Result<Self, PoftlError> {
        config.validate()?;
        let dc = *flash.config();
        let want = config.device(dc)?;
        if dc.gang != want.gang {
            return Err(PoftlError::Config(format!(
                "the device is ganged {:?}; parallelism degree {} needs {:?} (PoftlConfig::device)",
                dc.gang, config.parallelism_degree, want.gang
            )));
        }
        let g = dc.geometry;
        let remap = Remap::new(
            g.dies(),
            g.blocks_per_plane,
            g.pages_per_block,
            config.parallelism_degree,
        )?;
        // One stream per write region, then the record pages' (GC's is the FML's own, last).
        let fml = Fml::open(
            flash,
            config.fml,
            config.write_regions as u8 + 1,
            record::BYTES,
        )?;
        let page_bytes = fml.layout().write_unit_bytes as u64;
        let capacity_pages = fml.capacity_units();
        Ok(PoftlStore {
            config,
            remap,
            objects: Objects {
                copies_to: (config.gc_copies == GcCopies::ColdestRegion).then_some(StreamId(0)),
                ..Objects::default()
            },
            buffer: BTreeMap::new(),
            regions: Regions::new(config.write_regions as usize),
            now: 0,
            seq: 0,
            stats: PoftlStats::default(),
            page_bytes,
            capacity_pages,
            scratch: vec![0; page_bytes as usize],
            block_region: vec![config.write_regions as u8; fml.layout().superblocks as usize],
            region_stats: vec![RegionStats::default(); config.write_regions as usize + 1],
            fml,
            log: Vec::new(),
            logged: BTreeMap::new(),
            logged_entries: 0,
            epoch: 0,
            poisoned: None,
        })
    }

    /// Opens a store on a device holding one (after a remount or a power cut) and rebuilds it
    /// from flash: the OOB records of every programmed page and the record pages' entries.
    ///
    /// A data record is live when it has the highest sequence number of its (object, page)
    /// (a GC copy ties with its original: either will do) and no entry of its object newer
    /// than it cuts the page (a creation or removal cuts everything, a truncation what lies
    /// past the new size). An object exists when its newest entry is not a removal; its size
    /// is that of its newest record or entry. The entries are those of the log's current epoch
    /// ([`crate::log`]: a snapshot of the entries still needed, and the pages appended since).
    /// Pages past a size found are cut by a truncation the mount logs. What a flush had not
    /// completed may be partly there. Page histories (W_p, T_p^m) start afresh.
    pub fn mount(flash: F, config: PoftlConfig) -> Result<Self, PoftlError> {
        Self::mount_or_return(flash, config).map_err(|(e, _)| e)
    }

    /// [`Self::mount`], handing the device back when the mount fails after the FML opened: a
    /// mount programs (the cuts it logs), so a power cut can strike it, and tests and torture
    /// runs retry on the same device.
    #[allow(clippy::result_large_err)]
    pub fn mount_or_return(flash: F, config: PoftlConfig) -> Result<Self, (PoftlError, Option<F>)> {
        let mut s = Self::format(flash, config).map_err(|e| (e, None))?;
        match s.rebuild() {
            Ok(()) => Ok(s),
            Err(e) => Err((e, Some(s.into_flash()))),
        }
    }

    /// The body of [`Self::mount`] on a store `format` opened.
    fn rebuild(&mut self) -> Result<(), PoftlError> {
        let s = self;
        // (object, page) -> (sequence, size, where) of its newest data record.
        type Newest = FxHashMap<(u64, u32), (u64, u64, Vpa)>;
        let mut data: Newest = FxHashMap::default();
        let mut log_pages = Vec::new();
        let mut seq_max = 0u64;
        let mut unreadable = 0u64;
        let scanned = s.fml.scan(0, |v, r| match r {
            Ok((Content::Erased, _)) => {}
            Ok((_, oob)) => {
                if let Some((o, p, seq, size)) = record::decode(oob) {
                    seq_max = seq_max.max(seq);
                    keep_newest(&mut data, (o, p), (seq, size, v));
                } else if let Some(l) = record::decode_log(oob) {
                    seq_max = seq_max.max(l.seq);
                    log_pages.push((v, l));
                }
                // Anything else (a torn program, a foreign page) is not ours: garbage.
            }
            Err(_) => unreadable += 1,
        })?;
        // The scan and the record pages' reads take device time: the store starts after them.
        s.now = scanned;
        // Every record page that reads back whole, then those of the log's current epoch.
        let mut whole: Vec<(Vpa, record::LogPage, Vec<record::Entry>)> = Vec::new();
        let mut page = vec![0u8; s.page_bytes as usize];
        for &(v, l) in &log_pages {
            let used = l.count as usize * record::ENTRY_BYTES;
            let readable = match s.fml.read(s.now, v, &mut page, &mut []) {
                Ok((t, _)) => {
                    s.now = s.now.max(t);
                    true
                }
                Err(_) => false,
            };
            if !readable || used > page.len() || crc32c::crc32c(&page[..used]) != l.payload_crc {
                unreadable += 1;
                continue;
            }
            let mut entries = Vec::with_capacity(l.count as usize);
            for b in page[..used].chunks(record::ENTRY_BYTES) {
                let e = record::decode_entry(b).ok_or(PoftlError::Corrupted {
                    what: "log entry with a valid checksum but an unknown operation",
                    unit: v.0,
                })?;
                seq_max = seq_max.max(e.3);
                entries.push(e);
            }
            whole.push((v, l, entries));
        }
        let pages: Vec<record::LogPage> = whole.iter().map(|w| w.1).collect();
        s.epoch = crate::log::current_epoch(&pages);
        let mut entries: Vec<record::Entry> = Vec::new();
        // Pages of other epochs (before a snapshot, or of one cut short) are garbage.
        for (v, l, e) in whole {
            if l.epoch == s.epoch {
                s.fml
                    .mark_valid(v)
                    .map_err(|e| PoftlError::Invalid(e.to_string()))?;
                s.objects.log_pages.insert(v, l.epoch);
                entries.extend(e);
            }
        }
        s.pass_over_torn(&mut data)?;
        // Per object, entries by sequence number, with the smallest cut (in pages) of all
        // entries from each one on.
        entries.sort_by_key(|e| (e.1, e.3));
        let pb = s.page_bytes;
        let mut by_object: FxHashMap<u64, Vec<(u64, u64)>> = FxHashMap::default();
        for &(op, o, size, seq) in &entries {
            let cut = crate::log::cut_from(op, size, pb);
            by_object.entry(o).or_default().push((seq, cut));
        }
        // What the next snapshot writes.
        for &e in &entries {
            s.logged.entry(e.1).or_default().push(e);
        }
        for list in s.logged.values_mut() {
            crate::log::keep_needed(list, pb);
        }
        s.logged_entries = s.logged.values().map(Vec::len).sum();
        for list in by_object.values_mut() {
            for i in (0..list.len().saturating_sub(1)).rev() {
                list[i].1 = list[i].1.min(list[i + 1].1);
            }
        }
        // The newest entry of each object: whether it exists, and its size then.
        let mut newest: FxHashMap<u64, (u64, bool, u64)> = FxHashMap::default();
        for &(op, o, size, seq) in &entries {
            newest.insert(o, (seq, op != record::Op::Remove, size));
        }
        let mut objects: FxHashMap<u64, Object> = FxHashMap::default();
        for (&o, &(_, exists, size)) in &newest {
            if exists {
                objects.insert(
                    o,
                    Object {
                        size,
                        ..Object::default()
                    },
                );
            }
        }
        let mut sizes: FxHashMap<u64, u64> = FxHashMap::default();
        let mut live: Vec<_> = data.into_iter().collect();
        live.sort_unstable_by_key(|&(k, _)| k);
        for ((o, p), (seq, size, v)) in live {
            let cut = by_object.get(&o).and_then(|l| {
                let i = l.partition_point(|&(s, _)| s <= seq);
                l.get(i).map(|&(_, c)| c)
            });
            if cut.is_some_and(|c| p as u64 >= c) {
                continue;
            }
            // An object with data but no entry was created before any entry survived: it
            // exists (its creation's record page was lost only if unreadable).
            let newest_entry = newest.get(&o).map(|n| n.0);
            let obj = match objects.get_mut(&o) {
                Some(obj) => obj,
                None if newest_entry.is_none() => objects.entry(o).or_default(),
                None => continue, // removed after this page was written
            };
            if newest_entry.is_none_or(|n| seq > n) {
                let best = sizes.entry(o).or_insert(0);
                if seq >= *best {
                    *best = seq;
                    obj.size = size;
                }
            }
            s.fml
                .mark_valid(v)
                .map_err(|e| PoftlError::Invalid(e.to_string()))?;
            obj.extents.insert(p as u64, v);
            s.objects.live += 1;
        }
        // Pages past an object's size belong to no durable state (a truncation whose zeroed
        // pages were lost, or a record naming the cut damaged): kept mapped, a later growth
        // would expose their stale bytes in what must read as a hole (found by `ossd torture
        // --stack poftl`, seed 1888904493531488767).
        // The cut is logged before its pages are freed: a later mount, seeing the object grown
        // past them by newer pages, would otherwise bring them back (finding 39, seed
        // 16190025427372874405).
        s.seq = seq_max + 1;
        let mut cuts: Vec<(u64, u64)> = Vec::new();
        for (&o, obj) in objects.iter_mut() {
            let freed = obj.extents.cut(obj.size.div_ceil(s.page_bytes));
            if !freed.is_empty() {
                s.objects.live -= freed.len() as u64;
                s.objects.doomed.extend(freed);
                cuts.push((o, obj.size));
            }
        }
        cuts.sort_unstable();
        for (o, size) in cuts {
            s.log_entry(record::Op::Truncate, o, size);
        }
        s.objects.map = objects;
        s.objects.lost = unreadable;
        s.commit_log()
    }

    /// Pages that hold room: live (mapped or buffered), record pages, and pages cut whose cut is
    /// not on flash yet.
    fn used_pages(&self) -> u64 {
        self.objects.live + self.objects.log_pages.len() as u64 + self.objects.doomed.len() as u64
    }

    /// Checks the payload of the newest version of every page a mount found against its
    /// record's checksum (reading each whole), and replaces one that fails by the next newest
    /// version found by another scan, which is checked in turn. A power cut can tear a program
    /// so that its record reads back whole over a garbled payload (docs/RELIABILITY.md, finding
    /// 38); such a page was never flushed, and the version before it is what the flush before
    /// left. The torn page stays on flash until its block is erased, and every mount passes it
    /// over again; any later write of the page has a newer sequence number. A page whose read
    /// fails is kept: that is damage, which its reads report.
    fn pass_over_torn(
        &mut self,
        data: &mut FxHashMap<(u64, u32), (u64, u64, Vpa)>,
    ) -> Result<(), PoftlError> {
        let mut torn = rustc_hash::FxHashSet::default();
        let mut page = vec![0u8; self.page_bytes as usize];
        let mut unchecked: Vec<(u64, u32)> = data.keys().copied().collect();
        while !unchecked.is_empty() {
            unchecked.sort_unstable();
            let mut failed = rustc_hash::FxHashSet::default();
            for key in unchecked.drain(..) {
                let v = data[&key].2;
                let mut oob = [0u8; record::BYTES];
                if let Ok((t, content)) = self.fml.read(self.now, v, &mut page, &mut oob) {
                    self.now = self.now.max(t);
                    if payload_torn(&oob, content, &page) {
                        torn.insert(v);
                        failed.insert(key);
                        data.remove(&key);
                    }
                }
            }
            if failed.is_empty() {
                break;
            }
            self.stats.torn_pages_passed_over += failed.len() as u64;
            let t = self.fml.scan(self.now, |v, r| {
                let Ok((content, oob)) = r else { return };
                if content == Content::Erased || torn.contains(&v) {
                    return;
                }
                if let Some((o, p, seq, size)) = record::decode(oob) {
                    if failed.contains(&(o, p)) {
                        keep_newest(data, (o, p), (seq, size, v));
                    }
                }
            })?;
            self.now = self.now.max(t);
            unchecked = failed
                .into_iter()
                .filter(|k| data.contains_key(k))
                .collect();
        }
        Ok(())
    }

    /// The stream record pages are written to.
    fn log_stream(&self) -> StreamId {
        StreamId(self.config.write_regions as u8)
    }

    /// The settings the store was made with.
    pub fn config(&self) -> &PoftlConfig {
        &self.config
    }
    /// The device, for a remount ([`PoftlStore::mount`]); anything buffered is dropped.
    pub fn into_flash(self) -> F {
        self.fml.into_flash()
    }
    /// The FML below.
    pub fn fml(&self) -> &Fml<F> {
        &self.fml
    }
    /// The device, to arm faults on (torture); commands sent to it behind the store's back
    /// are the caller's responsibility.
    pub fn flash_mut(&mut self) -> &mut F {
        self.fml.flash_mut()
    }
    /// The ids of the objects that exist, ascending.
    pub fn object_ids(&self) -> Vec<u64> {
        let mut ids: Vec<u64> = self.objects.map.keys().copied().collect();
        ids.sort_unstable();
        ids
    }
    /// The static remapping in use.
    pub fn remap(&self) -> &Remap {
        &self.remap
    }
    /// Counters of the store's work so far.
    pub fn stats(&self) -> PoftlStats {
        PoftlStats {
            units_lost: self.objects.lost,
            ..self.stats
        }
    }
    /// What each write region (and GC's stream, last) wrote and what GC moved out of it:
    /// where the pages moved per erased block come from.
    pub fn region_stats(&self) -> &[RegionStats] {
        &self.region_stats
    }
    /// Bytes per page (the FML's write unit).
    pub fn page_bytes(&self) -> u64 {
        self.page_bytes
    }
    /// Bytes the store can hold in live pages.
    pub fn capacity_bytes(&self) -> u64 {
        self.capacity_pages * self.page_bytes
    }
    /// The store's clock (virtual ns): the issue time of the next call.
    pub fn now(&self) -> Nanos {
        self.now
    }
    /// Issue time of the next call; never moves time back.
    pub fn set_time(&mut self, at: Nanos) {
        self.now = self.now.max(at);
    }
    /// Whether object `id` exists.
    pub fn exists(&self, id: u64) -> bool {
        self.objects.map.contains_key(&id)
    }
    /// Size in bytes of object `id`.
    pub fn size(&self, id: u64) -> Result<u64, PoftlError> {
        Ok(self.object(id)?.size)
    }
    /// Extents of an object (for tests and reports: p-OFTL keeps continuity when few).
    pub fn extent_count(&self, id: u64) -> Result<usize, PoftlError> {
        Ok(self.object(id)?.extents.0.len())
    }

    fn object(&self, id: u64) -> Result<&Object, PoftlError> {
        self.objects.map.get(&id).ok_or(PoftlError::NoObject(id))
    }

    /// Creates object `id`, empty; [`PoftlError::Exists`] if it exists.
    pub fn create(&mut self, id: u64) -> Result<(), PoftlError> {
        if self.objects.map.contains_key(&id) {
            return Err(PoftlError::Exists(id));
        }
        self.refuse_if_poisoned()?;
        self.objects.map.insert(id, Object::default());
        self.log_entry(record::Op::Create, id, 0);
        Ok(())
    }

    fn refuse_if_poisoned(&self) -> Result<(), PoftlError> {
        match &self.poisoned {
            Some(why) => Err(PoftlError::Poisoned(why.clone())),
            None => Ok(()),
        }
    }

    fn log_entry(&mut self, op: record::Op, id: u64, size: u64) {
        self.log.push((op, id, size, self.seq));
        self.seq += 1;
    }

    /// Removes an object and frees its pages.
    pub fn remove(&mut self, id: u64) -> Result<(), PoftlError> {
        self.refuse_if_poisoned()?;
        self.cut(id, 0)?;
        self.objects.map.remove(&id);
        self.log_entry(record::Op::Remove, id, 0);
        Ok(())
    }

    /// Sets an object's size; pages past it are freed, the rest of a partial last page zeroed.
    pub fn truncate(&mut self, id: u64, size: u64) -> Result<(), PoftlError> {
        self.refuse_if_poisoned()?;
        self.cut(id, size)?;
        self.log_entry(record::Op::Truncate, id, size);
        Ok(())
    }

    fn cut(&mut self, id: u64, size: u64) -> Result<(), PoftlError> {
        let old = self.object(id)?.size;
        let pb = self.page_bytes;
        if size < old && !size.is_multiple_of(pb) {
            // Zero the tail of the new last page so that growing the object reads zeros.
            let p = size / pb;
            let keep = (size % pb) as usize;
            if let Some(mut page) = self.page_for_update(id, p)? {
                if let PageData::Bytes(b) = &mut page {
                    b[keep..].fill(0);
                }
                self.buffer.insert((id, p), page);
            }
        } else if size > old {
            // Growing: the old last page may hold stale bytes past the old size.
            self.zero_tail(id, old)?;
        }
        let first_gone = size.div_ceil(pb);
        let obj = self
            .objects
            .map
            .get_mut(&id)
            .ok_or(PoftlError::NoObject(id))?;
        // Live pages past the end: those on flash, and those only in the buffer.
        let buffered: Vec<(u64, u64)> = self
            .buffer
            .range((id, first_gone)..=(id, u64::MAX))
            .map(|(k, _)| *k)
            .collect();
        let only_buffered = buffered
            .iter()
            .filter(|k| obj.extents.get(k.1).is_none())
            .count() as u64;
        for k in &buffered {
            self.buffer.remove(k);
        }
        let freed = obj.extents.cut(first_gone);
        self.objects
            .lost_pages
            .retain(|&(o, p)| o != id || p < first_gone);
        self.objects.live -= freed.len() as u64 + only_buffered;
        // Invalidated once the entry that cuts them is on flash (`commit_log`).
        self.objects.doomed.extend(freed);
        // The pages cut keep their write history under object semantics: the same page of the
        // same object written again is an update of it (a rotated log, a rewritten file). A
        // block-level grouping (SFS) sees the freed logical blocks reused for other data
        // instead, so their history is gone (POFTL-14 III-B).
        if self.config.grouping == GroupingPolicy::Sfs {
            obj.heat.truncate(first_gone as usize);
        }
        obj.size = size;
        Ok(())
    }

    /// Zeroes page `size / page` of `id` past `size` (nothing if `size` is page-aligned or the
    /// page holds nothing), so that the object growing past `size` reads zeros there. A
    /// truncation zeroes its new last page too, but a crash may lose that page while its size
    /// survives, and a mount cannot tell stale bytes past the size from live ones (found by
    /// `ossd torture --stack poftl`, seeds 3402165191353373922 and 3314970054734010398).
    fn zero_tail(&mut self, id: u64, size: u64) -> Result<(), PoftlError> {
        let pb = self.page_bytes;
        if size.is_multiple_of(pb) {
            return Ok(());
        }
        let p = size / pb;
        let keep = (size % pb) as usize;
        // Fingerprint pages carry no bytes to go stale.
        if let Some(PageData::Bytes(mut b)) = self.page_for_update(id, p)? {
            if b[keep..].iter().any(|&x| x != 0) {
                b[keep..].fill(0);
                self.buffer.insert((id, p), PageData::Bytes(b));
                // On flash before anything that grows the object: a buffer written later in
                // one batch may be cut between its pages, and a page past the size names the
                // larger size that would expose the stale tail.
                self.flush()?;
            }
        }
        Ok(())
    }

    /// The current contents of page `p` of `id` for a partial update: the buffered page, the
    /// flash page (a timed read), or `None` if the page holds nothing.
    fn page_for_update(&mut self, id: u64, p: u64) -> Result<Option<PageData>, PoftlError> {
        if let Some(b) = self.buffer.get(&(id, p)) {
            return Ok(Some(b.clone()));
        }
        let Some(v) = self.object(id)?.extents.get(p) else {
            if self.objects.lost_pages.contains(&(id, p)) {
                return Err(PoftlError::Lost {
                    object: id,
                    page: p,
                });
            }
            return Ok(None);
        };
        let mut data = std::mem::take(&mut self.scratch);
        let r = self.read_mapped(self.now, (id, p), v, &mut data);
        let out = r.map(|(done, content)| {
            self.now = self.now.max(done);
            self.stats.rmw_reads += 1;
            match content {
                Content::Fingerprint(fp) => Some(PageData::Fingerprint(fp)),
                _ => Some(PageData::Bytes(data.clone().into())),
            }
        });
        self.scratch = data;
        out
    }

    /// Reads page `page` = (object, page index) from `v`, where the map puts it. The page's
    /// record comes over the bus with it (32 bytes more) and must name that page: a program
    /// that went astray leaves another page's record there, a torn one a record that does
    /// not check, and p-OFTL keeps no payload checksum that would catch either otherwise.
    fn read_mapped(
        &mut self,
        at: Nanos,
        page: (u64, u64),
        v: Vpa,
        data: &mut [u8],
    ) -> Result<(Nanos, Content), PoftlError> {
        let mut oob = [0u8; record::BYTES];
        let (t, content) = self.fml.read(at, v, data, &mut oob)?;
        let what = match content {
            Content::Erased => "mapped page reads erased",
            _ => match record::decode(&oob) {
                Some((o, q, _, _)) if (o, u64::from(q)) != page => {
                    "mapped page holds another page's record"
                }
                Some(_) if payload_torn(&oob, content, data) => {
                    "mapped page's payload does not match its record's checksum"
                }
                Some(_) => return Ok((t, content)),
                None => "mapped page's record does not check",
            },
        };
        Err(PoftlError::Corrupted { what, unit: v.0 })
    }

    /// Writes into the data buffer; programs it when full. Completes at [`PoftlStore::now`].
    pub fn write(&mut self, id: u64, offset: u64, data: Data<'_>) -> Result<(), PoftlError> {
        if let Some(why) = &self.poisoned {
            return Err(PoftlError::Poisoned(why.clone()));
        }
        let len = match data {
            Data::Bytes(b) => b.len() as u64,
            Data::Token { len, .. } => len,
        };
        self.object(id)?;
        if len == 0 {
            return Ok(());
        }
        let end = offset
            .checked_add(len)
            .filter(|e| e / self.page_bytes < u32::MAX as u64)
            .ok_or_else(|| PoftlError::Invalid(format!("write of {len} bytes at {offset}")))?;
        let pb = self.page_bytes;
        let size = self.object(id)?.size;
        if end > size && matches!(data, Data::Bytes(_)) {
            self.zero_tail(id, size)?;
        }
        for p in offset / pb..end.div_ceil(pb) {
            let (s, e) = (offset.max(p * pb) - p * pb, end.min((p + 1) * pb) - p * pb);
            let whole = s == 0 && e == pb;
            let page = match data {
                Data::Token { token, .. } => {
                    if !whole {
                        // The old contents are read as a real p-OFTL would, for the time it
                        // costs; a fingerprint cannot be merged, so the page's new one stands.
                        self.page_for_update(id, p)?;
                    }
                    PageData::Fingerprint(page_fingerprint(id, p, token))
                }
                Data::Bytes(b) => {
                    let src = &b[(p * pb + s - offset) as usize..(p * pb + e - offset) as usize];
                    let mut buf: Box<[u8]> = if whole {
                        vec![0u8; pb as usize].into()
                    } else {
                        match self.page_for_update(id, p)? {
                            Some(PageData::Bytes(b)) => b,
                            _ => vec![0u8; pb as usize].into(),
                        }
                    };
                    buf[s as usize..e as usize].copy_from_slice(src);
                    PageData::Bytes(buf)
                }
            };
            let fresh =
                !self.buffer.contains_key(&(id, p)) && self.object(id)?.extents.get(p).is_none();
            if fresh {
                if self.used_pages() >= self.capacity_pages && !self.objects.doomed.is_empty() {
                    // Pages cut but not yet freed: log the cut to free them.
                    self.commit_log()
                        .inspect_err(|e| self.poisoned = Some(e.to_string()))?;
                }
                if self.used_pages() >= self.capacity_pages {
                    return Err(PoftlError::NoSpace {
                        live: self.objects.live,
                        capacity: self.capacity_pages,
                    });
                }
                self.objects.live += 1;
            }
            self.buffer.insert((id, p), page);
            self.objects.lost_pages.remove(&(id, p));
            // The size grows page by page, so that a flush in the middle of this write records
            // (docs/FORMAT.md) a size covering every page it programs.
            let obj = self
                .objects
                .map
                .get_mut(&id)
                .ok_or(PoftlError::NoObject(id))?;
            obj.size = obj.size.max(end.min((p + 1) * pb));
            if self.buffer.len() >= self.config.buffer_pages as usize {
                self.flush()?;
            }
        }
        self.stats.host_write_bytes += len;
        Ok(())
    }

    /// Reads from `offset`; returns the bytes read (fewer at the end of the object). Pages on
    /// flash are read all at once, so a read spread over `2^k` banks takes about `1/2^k` of the
    /// time of one bank.
    pub fn read(&mut self, id: u64, offset: u64, out: ReadOut<'_>) -> Result<u64, PoftlError> {
        let size = self.object(id)?.size;
        let want = match &out {
            ReadOut::Bytes(b) => b.len() as u64,
            ReadOut::Discard(n) => *n,
        };
        let n = want.min(size.saturating_sub(offset));
        let mut out = out;
        if let ReadOut::Bytes(b) = &mut out {
            b[..n as usize].fill(0);
        }
        if n == 0 {
            return Ok(0);
        }
        let pb = self.page_bytes;
        let end = offset + n;
        let start = self.now;
        let mut done = start;
        let mut data = std::mem::take(&mut self.scratch);
        for p in offset / pb..end.div_ceil(pb) {
            let (s, e) = (offset.max(p * pb) - p * pb, end.min((p + 1) * pb) - p * pb);
            let dst = (p * pb + s - offset) as usize..(p * pb + e - offset) as usize;
            if let Some(b) = self.buffer.get(&(id, p)) {
                if let (ReadOut::Bytes(o), PageData::Bytes(b)) = (&mut out, b) {
                    o[dst].copy_from_slice(&b[s as usize..e as usize]);
                }
                continue;
            }
            let Some(v) = self.objects.map[&id].extents.get(p) else {
                if self.objects.lost_pages.contains(&(id, p)) {
                    self.scratch = data;
                    return Err(PoftlError::Lost {
                        object: id,
                        page: p,
                    });
                }
                continue; // a hole reads as zeros
            };
            let (t, content) = match self.read_mapped(start, (id, p), v, &mut data) {
                Ok(r) => r,
                Err(e) => {
                    self.scratch = data;
                    return Err(e);
                }
            };
            done = done.max(t);
            if let (Content::Bytes, ReadOut::Bytes(o)) = (content, &mut out) {
                o[dst].copy_from_slice(&data[s as usize..e as usize]);
            }
        }
        self.scratch = data;
        self.now = done;
        self.stats.host_read_bytes += n;
        Ok(n)
    }

    /// Programs everything buffered (grouped, III-B) and returns when it is on flash.
    pub fn flush(&mut self) -> Result<(), PoftlError> {
        if let Some(why) = &self.poisoned {
            return Err(PoftlError::Poisoned(why.clone()));
        }
        if self.buffer.is_empty() && self.log.is_empty() {
            return Ok(());
        }
        let r = self.commit_log().and_then(|()| self.program_buffer());
        if let Err(e) = &r {
            self.poisoned = Some(e.to_string());
        }
        r
    }

    /// Programs the pending log entries, then frees the pages they cut: only now can GC erase
    /// them.
    fn commit_log(&mut self) -> Result<(), PoftlError> {
        self.program_log()?;
        for v in std::mem::take(&mut self.objects.doomed) {
            self.fml.invalidate(v);
        }
        Ok(())
    }

    /// Programs the pending log entries into record pages (as many entries as fit a page each),
    /// before the flush's data pages: a data page never reaches flash before the creation or
    /// truncation that preceded it. Then writes a snapshot of the log if its pages have grown
    /// to more than twice a snapshot's and [`SNAPSHOT_SLACK`] pages.
    fn program_log(&mut self) -> Result<(), PoftlError> {
        let per_page = self.page_bytes as usize / record::ENTRY_BYTES;
        let log = std::mem::take(&mut self.log);
        let start = self.now;
        let mut done = start;
        for chunk in log.chunks(per_page) {
            done = done.max(self.program_record_page(chunk, self.epoch, None)?);
        }
        for &e in &log {
            let list = self.logged.entry(e.1).or_default();
            let before = list.len();
            list.push(e);
            crate::log::keep_needed(list, self.page_bytes);
            self.logged_entries = self.logged_entries + list.len() - before;
        }
        let needed = self.logged_entries.div_ceil(per_page);
        if self.objects.log_pages.len() > 2 * needed.max(1) + SNAPSHOT_SLACK {
            done = done.max(self.write_snapshot()?);
        }
        self.now = done;
        Ok(())
    }

    /// Writes every entry a mount still needs into fresh record pages, a new epoch of the log,
    /// then frees the record pages of the epochs before (docs/FORMAT.md section 4). A power cut
    /// part-way leaves the epoch before whole, and a mount reads that.
    fn write_snapshot(&mut self) -> Result<Nanos, PoftlError> {
        let per_page = self.page_bytes as usize / record::ENTRY_BYTES;
        let entries: Vec<record::Entry> = self.logged.values().flatten().copied().collect();
        let mut chunks: Vec<&[record::Entry]> = entries.chunks(per_page).collect();
        if chunks.is_empty() {
            chunks.push(&[]);
        }
        let Ok(pages) = u16::try_from(chunks.len()) else {
            return Ok(self.now); // beyond what one snapshot can say: the log keeps its pages
        };
        let epoch = self.seq;
        let mut done = self.now;
        for (i, chunk) in (0u16..).zip(chunks) {
            done = done.max(self.program_record_page(chunk, epoch, Some((i, pages)))?);
        }
        let old: Vec<Vpa> = self
            .objects
            .log_pages
            .iter()
            .filter(|&(_, &e)| e != epoch)
            .map(|(&v, _)| v)
            .collect();
        for v in old {
            self.objects.log_pages.remove(&v);
            self.fml.invalidate(v);
        }
        self.epoch = epoch;
        self.stats.log_snapshots += 1;
        Ok(done)
    }

    /// Programs one record page holding `entries` (foreground GC first if needed); returns
    /// when it completes.
    fn program_record_page(
        &mut self,
        entries: &[record::Entry],
        epoch: u64,
        snapshot: Option<(u16, u16)>,
    ) -> Result<Nanos, PoftlError> {
        while self.fml.must_collect() {
            match self.collect_victim(self.now)? {
                Some(t) => self.now = self.now.max(t),
                None => break,
            }
        }
        let mut page = vec![0u8; self.page_bytes as usize];
        for (e, out) in entries.iter().zip(page.chunks_mut(record::ENTRY_BYTES)) {
            record::encode_entry(*e, out);
        }
        let used = entries.len() * record::ENTRY_BYTES;
        let oob = record::encode_log(record::LogPage {
            count: entries.len() as u16,
            payload_crc: crc32c::crc32c(&page[..used]),
            seq: self.seq,
            epoch,
            snapshot,
        });
        self.seq += 1;
        let (vpa, t) = self
            .fml
            .write(self.now, self.log_stream(), Payload::Bytes(&page), &oob)?;
        self.objects.log_pages.insert(vpa, epoch);
        self.stats.log_pages_written += 1;
        Ok(t)
    }

    fn program_buffer(&mut self) -> Result<(), PoftlError> {
        if self.buffer.is_empty() {
            return Ok(());
        }
        let pages: Vec<((u64, u64), PageData)> =
            std::mem::take(&mut self.buffer).into_iter().collect();
        let regions = self.place(&pages);
        let mut issue = self.now;
        let mut done = issue;
        for (((id, p), data), region) in pages.into_iter().zip(regions) {
            // Foreground GC: whole super-blocks, before the write that needs the space.
            while self.fml.must_collect() {
                match self.collect_victim(issue)? {
                    Some(t) => issue = issue.max(t),
                    None => break,
                }
            }
            let page_index = u32::try_from(p).map_err(|_| {
                PoftlError::Invalid(format!("page {p} of object {id:#x} is beyond 2^32 pages"))
            })?;
            let size = self.objects.map.get(&id).map_or(0, |o| o.size);
            let payload = match &data {
                PageData::Bytes(b) => Payload::Bytes(b),
                PageData::Fingerprint(fp) => Payload::Fingerprint(*fp),
            };
            let oob = record::encode(id, page_index, self.seq, size, flash::payload_crc(payload));
            self.seq += 1;
            let (vpa, t) = self
                .fml
                .write(issue, StreamId(region as u8), payload, &oob)?;
            done = done.max(t);
            let sb = self.fml.layout().superblock_of(vpa) as usize;
            self.block_region[sb] = region as u8;
            self.region_stats[region].pages_written += 1;
            let now = self.now;
            // Buffered pages belong to existing objects.
            let obj = self
                .objects
                .map
                .get_mut(&id)
                .ok_or(PoftlError::NoObject(id))?;
            if let Some(old) = obj.extents.insert(p, vpa) {
                self.fml.invalidate(old);
            }
            let i = p as usize;
            if obj.heat.len() <= i {
                obj.heat.resize(i + 1, Heat::default());
            }
            obj.heat[i].writes = obj.heat[i].writes.saturating_add(1);
            obj.heat[i].modified_ns = now;
            self.stats.host_pages_written += 1;
        }
        self.now = done.max(issue);
        self.stats.flushes += 1;
        Ok(())
    }

    /// `h_p` of every page of a write, in order (III-B-1). Pages with a history use it; the
    /// others (appends, and pages of new objects) take `h_0`, the mean of up to 5 adjacent pages
    /// of the same object: the nearest preceding ones (from their history or as computed just
    /// before in this write), or failing those the nearest following ones with a history.
    /// Without object semantics (SFS) a page has only its own history, and none counts as 0.
    fn hotness(&self, keys: &[(u64, u64)], semantic: bool) -> Vec<f64> {
        let now = self.now;
        let own = |id: u64, p: u64| -> Option<f64> {
            let h = self.objects.map.get(&id)?.heat.get(p as usize)?;
            grouping::hotness(h.writes, h.modified_ns, now)
        };
        let mut this_write: FxHashMap<(u64, u64), f64> = FxHashMap::default();
        let mut out = Vec::with_capacity(keys.len());
        for &(id, p) in keys {
            let h = match own(id, p) {
                Some(h) => h,
                None if !semantic => 0.0,
                None => {
                    let mut adj = Vec::with_capacity(grouping::ADJACENT_PAGES);
                    for d in 1..=grouping::ADJACENT_PAGES as u64 {
                        let Some(q) = p.checked_sub(d) else { break };
                        if let Some(h) = this_write.get(&(id, q)).copied().or_else(|| own(id, q)) {
                            adj.push(h);
                        }
                    }
                    if adj.is_empty() {
                        for d in 1..=grouping::ADJACENT_PAGES as u64 {
                            if let Some(h) = own(id, p + d) {
                                adj.push(h);
                            }
                        }
                    }
                    grouping::appended_hotness(&adj)
                }
            };
            this_write.insert((id, p), h);
            out.push(h);
        }
        out
    }

    /// The write region of every page of a write, by the grouping policy.
    fn place(&mut self, pages: &[((u64, u64), PageData)]) -> Vec<usize> {
        let keys: Vec<(u64, u64)> = pages.iter().map(|(k, _)| *k).collect();
        match self.config.grouping {
            GroupingPolicy::None => {
                self.stats.groups += 1;
                vec![0; keys.len()]
            }
            GroupingPolicy::Sfs => {
                let h = self.hotness(&keys, false);
                self.regions.observe(h.iter().copied());
                self.stats.groups += keys.len() as u64;
                h.iter().map(|&x| self.regions.closest(x)).collect()
            }
            GroupingPolicy::SemanticAware => {
                let h = self.hotness(&keys, true);
                self.regions.observe(h.iter().copied());
                // Normalized to the write's mean so that lambda is dimensionless (PoftlConfig).
                let m = grouping::mean(&h);
                let norm: Vec<f64> = if m > 0.0 {
                    h.iter().map(|x| x / m).collect()
                } else {
                    h.clone()
                };
                let groups = grouping::group(&norm, self.config.lambda);
                self.stats.groups += groups.len() as u64;
                let mut out = vec![0; keys.len()];
                for g in groups {
                    let r = self.regions.closest(grouping::mean(&h[g.clone()]));
                    out[g].fill(r);
                }
                out
            }
        }
    }

    /// Reclaims one super-block: every valid page's copy is issued at `start`, so copies from
    /// and to different banks overlap as the host's pages do (the device still serializes what
    /// shares a bank or a bus), then the whole super-block is erased (III-A). Returns when the
    /// last of it completes, or `None` if there was nothing to collect.
    fn collect_victim(&mut self, start: Nanos) -> Result<Option<Nanos>, PoftlError> {
        let mut end = start;
        let mut chose = false;
        let gc = self.config.write_regions as usize;
        // The victim's region (a victim taken over from before is GC's).
        let mut from = match self.fml.job() {
            fml::GcJob::Copying { victim, .. } | fml::GcJob::Erasing { victim } => {
                self.block_region[victim as usize] as usize
            }
            fml::GcJob::Idle => gc,
        };
        loop {
            match self.fml.gc_step(start, &mut self.objects)? {
                fml::GcStep::Idle => return Ok(chose.then_some(end)),
                fml::GcStep::Chose { victim } => {
                    chose = true;
                    from = self.block_region[victim as usize] as usize;
                    self.region_stats[from].victims += 1;
                    // Its next life is GC's unless a host write opens it.
                    self.block_region[victim as usize] = gc as u8;
                }
                fml::GcStep::Copied { done_ns } => {
                    end = end.max(done_ns);
                    self.region_stats[from].pages_moved += 1;
                    // Counted where data copies go (a rare record page copy is GC's either way).
                    let to = match self.config.gc_copies {
                        GcCopies::OwnStream => gc,
                        GcCopies::ColdestRegion => 0,
                    };
                    self.region_stats[to].pages_written += 1;
                }
                fml::GcStep::Erased { done_ns } => return Ok(Some(end.max(done_ns))),
                fml::GcStep::Retired => return Ok(Some(end)),
            }
        }
    }

    /// Background GC between `from` and `until`, a whole super-block at a time; returns when
    /// the last one completes.
    pub fn background(&mut self, from: Nanos, until: Nanos) -> Result<Nanos, PoftlError> {
        let idle = self.buffer.is_empty();
        let mut t = from.max(self.now);
        while t < until && self.fml.wants_collect(idle) {
            match self.collect_victim(t)? {
                Some(done) => t = t.max(done),
                None => break,
            }
        }
        self.now = self.now.max(t);
        Ok(t)
    }

    /// Whole-structure check: the FML's own; every mapped page valid in the FML and mapped
    /// once; the FML's valid pages exactly the mapped ones; the live count; and every mapped
    /// page where the static remapping (III-A) says its write unit is.
    pub fn check(&self) -> Result<(), CheckError> {
        self.fml.check()?;
        let layout = self.fml.layout();
        let mut seen = rustc_hash::FxHashSet::default();
        let mut live = 0u64;
        for (&id, obj) in &self.objects.map {
            for (p, v) in obj.extents.pages() {
                if !self.fml.is_valid(v) {
                    return Err(CheckError::InvalidUnit {
                        object: id,
                        page: p,
                        unit: v.0,
                    });
                }
                if !seen.insert(v) {
                    return Err(CheckError::MappedTwice { unit: v.0 });
                }
                if p * self.page_bytes >= obj.size.max(1).next_multiple_of(self.page_bytes) {
                    return Err(CheckError::PastSize {
                        object: id,
                        page: p,
                        size: obj.size,
                    });
                }
                let phys = layout.page(v, 0);
                let remapped = self.remap.to_physical(v.0)?;
                if (remapped.bank, remapped.block, remapped.page)
                    != (phys.die.0, phys.block, phys.page)
                {
                    return Err(CheckError::Misplaced {
                        unit: v.0,
                        phys,
                        remapped,
                    });
                }
                live += !self.buffer.contains_key(&(id, p)) as u64;
            }
        }
        for (id, _) in self.buffer.keys() {
            if !self.objects.map.contains_key(id) {
                return Err(CheckError::BufferedOrphan { object: *id });
            }
        }
        live += self.buffer.len() as u64;
        if live != self.objects.live {
            return Err(CheckError::LiveCount {
                live,
                counted: self.objects.live,
            });
        }
        for &v in self.objects.log_pages.keys() {
            if !self.fml.is_valid(v) || !seen.insert(v) {
                return Err(CheckError::RecordPage { unit: v.0 });
            }
        }
        for &v in &self.objects.doomed {
            if !self.fml.is_valid(v) || !seen.insert(v) {
                return Err(CheckError::CutPage { unit: v.0 });
            }
        }
        let logged: usize = self.logged.values().map(Vec::len).sum();
        if logged != self.logged_entries {
            return Err(CheckError::LoggedCount {
                logged,
                counted: self.logged_entries,
            });
        }
        let valid: u64 = self.fml.blocks().iter().map(|b| b.valid as u64).sum();
        if valid != seen.len() as u64 {
            return Err(CheckError::ValidCount {
                valid,
                mapped: seen.len() as u64,
            });
        }
        Ok(())
    }
}

/// What [`PoftlStore::check`] found wrong: the first inconsistency, naming the object, page
/// and write unit (VPA) involved.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CheckError {
    /// The FML's own check failed.
    #[error(transparent)]
    Fml(#[from] fml::Inconsistency),
    /// A mapped page whose unit the FML does not hold valid.
    #[error("object {object:#x} page {page} maps to invalid unit {unit}")]
    InvalidUnit {
        /// The object.
        object: u64,
        /// The page within it.
        page: u64,
        /// The unit it maps to.
        unit: u32,
    },
    /// A unit two pages map to.
    #[error("unit {unit} is mapped twice")]
    MappedTwice {
        /// The unit.
        unit: u32,
    },
    /// A page mapped past the end of its object.
    #[error("object {object:#x} maps page {page} past its size {size}")]
    PastSize {
        /// The object.
        object: u64,
        /// The page.
        page: u64,
        /// The object's size in bytes.
        size: u64,
    },
    /// A mapped unit the static remapping cannot place.
    #[error("static remapping: {0}")]
    Remap(#[from] RemapError),
    /// A mapped unit that is not where the static remapping (POFTL-14 III-A) puts it.
    #[error("unit {unit} is at {phys} but static remapping says {remapped:?}")]
    Misplaced {
        /// The unit.
        unit: u32,
        /// Its first physical page, as the FML's ganging places it.
        phys: flash::PageAddr,
        /// Where the static remapping puts it.
        remapped: crate::remap::BankPage,
    },
    /// A buffered page of an object that does not exist.
    #[error("buffered page of missing object {object:#x}")]
    BufferedOrphan {
        /// The object.
        object: u64,
    },
    /// Live pages counted do not match the store's count.
    #[error("{live} pages live, the store counts {counted}")]
    LiveCount {
        /// Pages mapped or buffered.
        live: u64,
        /// The store's count.
        counted: u64,
    },
    /// A record (log) page whose unit is not valid, or is also mapped elsewhere.
    #[error("record page at unit {unit} invalid or mapped twice")]
    RecordPage {
        /// The unit.
        unit: u32,
    },
    /// A page cut but not yet freed whose unit is not valid, or is also mapped elsewhere.
    #[error("page cut at unit {unit} invalid or mapped twice")]
    CutPage {
        /// The unit.
        unit: u32,
    },
    /// The log entries kept for the next snapshot do not match the store's count of them.
    #[error("{logged} log entries kept for the next snapshot, the store counts {counted}")]
    LoggedCount {
        /// Entries kept.
        logged: usize,
        /// The store's count.
        counted: usize,
    },
    /// The FML's valid units are not exactly the ones the objects and the log map.
    #[error("the FML holds {valid} valid units, the objects and the log map {mapped}")]
    ValidCount {
        /// Valid units in the FML.
        valid: u64,
        /// Units mapped by objects and the log.
        mapped: u64,
    },
}

#[cfg(test)]
mod tests {
    use super::*;
    use flash::{preset, Nand};

    fn store(grouping: GroupingPolicy, buffer_pages: u32) -> PoftlStore<Nand> {
        let mut c = PoftlConfig {
            parallelism_degree: 1,
            grouping,
            buffer_pages,
            ..PoftlConfig::default()
        };
        let device = c.device(preset("tiny").unwrap()).unwrap();
        c.fml = FmlConfig::for_blocks(flash::gang::Layout::new(&device).superblocks);
        PoftlStore::format(Nand::in_memory(device).unwrap(), c).unwrap()
    }

    fn page(s: &mut PoftlStore<Nand>, id: u64, p: u64, token: u64) {
        let len = s.page_bytes();
        s.write(id, p * len, Data::Token { len, token }).unwrap();
    }

    /// W_p counts every program of the page and T_p^m is the time of the last one (the flush
    /// that programmed it), for every policy; h_p is computed from them at the next write.
    #[test]
    fn write_history_counts_programs_and_keeps_the_last_time() {
        for g in [
            GroupingPolicy::SemanticAware,
            GroupingPolicy::Sfs,
            GroupingPolicy::None,
        ] {
            let mut s = store(g, 4);
            s.create(1).unwrap();
            let mut times = Vec::new();
            for round in 0..3 {
                s.set_time(1_000_000_000 * (round + 1));
                times.push(s.now());
                page(&mut s, 1, 0, round + 1);
                s.flush().unwrap();
            }
            let h = s.objects.map[&1].heat[0];
            assert_eq!(h.writes, 3, "{g:?}");
            assert_eq!(h.modified_ns, times[2], "{g:?}");
            s.set_time(times[2] + 2_000_000_000);
            // 3 writes, the last 2 s ago: 1.5 per second.
            let got = s.hotness(&[(1, 0)], g == GroupingPolicy::SemanticAware);
            assert!((got[0] - 1.5).abs() < 1e-9, "{g:?}: {got:?}");
        }
    }

    /// An appended page (no history) takes the mean of the nearest 5 preceding pages of its
    /// object under semantic-aware grouping, chaining through pages of the same write; SFS,
    /// without object semantics, counts it as 0.
    #[test]
    fn appended_pages_take_the_mean_of_up_to_five_adjacent_pages() {
        let mut s = store(GroupingPolicy::SemanticAware, 1024);
        s.create(1).unwrap();
        s.create(2).unwrap();
        // Pages 0..6 of object 1 with 1..=6 writes, all last modified at 1 s; now is 2 s, so
        // their hotness is their write count.
        let heat = &mut s.objects.map.get_mut(&1).unwrap().heat;
        *heat = (1..=6)
            .map(|w| Heat {
                writes: w,
                modified_ns: 1_000_000_000,
            })
            .collect();
        s.set_time(2_000_000_000);
        let h = s.hotness(&[(1, 6), (1, 7), (2, 0)], true);
        // Page 6: pages 1..=5 (2..=6 writes): 4. Page 7: page 6 (4, this write) and pages
        // 2..=5 (3..=6): 4.4. Object 2 has no history anywhere: 0.
        assert!((h[0] - 4.0).abs() < 1e-9, "{h:?}");
        assert!((h[1] - 4.4).abs() < 1e-9, "{h:?}");
        assert_eq!(h[2], 0.0);
        // A page before any history takes the following pages': page 0 of a fresh run.
        s.objects.map.get_mut(&2).unwrap().heat = vec![
            Heat::default(),
            Heat {
                writes: 2,
                modified_ns: 1_000_000_000,
            },
        ];
        assert_eq!(s.hotness(&[(2, 0)], true), vec![2.0]);
        assert_eq!(s.hotness(&[(1, 6), (2, 0)], false), vec![0.0, 0.0]);
    }

    /// Each write region has its own update super-block, GC's copies another: no super-block
    /// ever holds pages of two regions, so a group's pages die beside their own kind only. A
    /// skewed rewrite load spreads over every region under semantic-aware and SFS grouping and
    /// stays in region 0 without grouping.
    #[test]
    fn regions_write_to_separate_super_blocks() {
        for g in [
            GroupingPolicy::SemanticAware,
            GroupingPolicy::Sfs,
            GroupingPolicy::None,
        ] {
            let mut s = store(g, 64);
            let n = 40u64;
            for id in 1..=n {
                s.create(id).unwrap();
            }
            let mut x = 7u64;
            let mut owner: FxHashMap<(u32, u32), usize> = FxHashMap::default();
            for step in 0..20_000u64 {
                x = x
                    .wrapping_mul(6364136223846793005)
                    .wrapping_add(1442695040888963407);
                // Objects 1..=4 take about 70% of the writes.
                let id = if (x >> 33) % 10 < 7 {
                    1 + (x >> 40) % 4
                } else {
                    1 + (x >> 40) % n
                };
                s.set_time(step * 100_000);
                page(&mut s, id, (x >> 20) % 32, x | 1);
                for r in 0..=s.config.write_regions as usize {
                    if let Some(v) = s.fml.next_unit(StreamId(r as u8)) {
                        let sb = s.fml.layout().superblock_of(v);
                        // A super-block is one region's from one erase to the next.
                        let life = (sb, s.fml.blocks()[sb as usize].erase_count);
                        let prev = owner.insert(life, r);
                        assert!(
                            prev.is_none() || prev == Some(r),
                            "{g:?}: super-block {sb} shared by regions {prev:?} and {r}"
                        );
                    }
                }
            }
            s.check().unwrap();
            let used: Vec<u64> = s.region_stats()[..4]
                .iter()
                .map(|r| r.pages_written)
                .collect();
            match g {
                GroupingPolicy::None => assert!(used[1..].iter().all(|&n| n == 0), "{used:?}"),
                _ => assert!(used.iter().all(|&n| n > 0), "{g:?}: {used:?}"),
            }
            let victims: u64 = s.region_stats().iter().map(|r| r.victims).sum();
            assert!(victims > 0, "{g:?}: GC never ran");
            assert_eq!(victims, s.fml.stats().gc_victims, "{g:?}");
        }
    }

    /// The `coldest-region` ablation: GC's data copies go into region 0's update super-blocks,
    /// none into GC's own stream, and the store stays consistent.
    #[test]
    fn gc_copies_can_join_the_coldest_region() {
        for copies in [GcCopies::OwnStream, GcCopies::ColdestRegion] {
            let mut s = store(GroupingPolicy::SemanticAware, 64);
            s.config.gc_copies = copies;
            s.objects.copies_to = (copies == GcCopies::ColdestRegion).then_some(StreamId(0));
            for id in 1..=40 {
                s.create(id).unwrap();
            }
            let mut x = 11u64;
            for step in 0..20_000u64 {
                x = x
                    .wrapping_mul(6364136223846793005)
                    .wrapping_add(1442695040888963407);
                s.set_time(step * 100_000);
                page(&mut s, 1 + (x >> 40) % 40, (x >> 20) % 32, x | 1);
            }
            s.check().unwrap();
            let moved: u64 = s.region_stats().iter().map(|r| r.pages_moved).sum();
            assert!(moved > 0, "{copies:?}: GC copied nothing");
            let gc = s.config.write_regions as usize;
            let to_gc = s.region_stats()[gc].pages_written;
            match copies {
                GcCopies::OwnStream => assert_eq!(to_gc, moved),
                GcCopies::ColdestRegion => {
                    assert_eq!(to_gc, 0);
                    assert!(s.fml.next_unit(s.fml.gc_stream()).is_none());
                }
            }
        }
    }

    /// Thousands of flushes that each log a truncation: snapshots keep the record pages
    /// within twice a snapshot's and the slack (they grew one a flush, until the device was
    /// full: finding 39), and a remount after them rebuilds every size, removal and page.
    #[test]
    fn snapshots_bound_the_log_and_a_remount_reads_them() {
        let mut s = store(GroupingPolicy::SemanticAware, 64);
        for id in 1..=6 {
            s.create(id).unwrap();
        }
        let pb = s.page_bytes();
        for step in 0..3_000u64 {
            let id = 1 + step % 6;
            page(&mut s, id, step % 5, step);
            s.truncate(id, (step % 4 + 1) * pb - 7).unwrap();
            if step % 97 == 0 {
                s.remove(id).unwrap();
                s.create(id).unwrap();
            }
            s.flush().unwrap();
            assert!(s.objects.log_pages.len() <= 2 + SNAPSHOT_SLACK + 1);
        }
        s.check().unwrap();
        assert!(s.stats().log_snapshots > 100, "{:?}", s.stats());
        s.remove(3).unwrap();
        s.flush().unwrap();
        let sizes: Vec<Option<u64>> = (1..=6).map(|id| s.size(id).ok()).collect();
        let mut before = Vec::new();
        for id in [1, 2, 4, 5, 6] {
            let mut b = vec![0u8; sizes[id as usize - 1].unwrap() as usize];
            s.read(id, 0, ReadOut::Bytes(&mut b)).unwrap();
            before.push(b);
        }
        let config = s.config;
        let mut m = PoftlStore::mount(s.into_flash(), config).unwrap();
        m.check().unwrap();
        let after: Vec<Option<u64>> = (1..=6).map(|id| m.size(id).ok()).collect();
        assert_eq!(after, sizes);
        assert!(!m.exists(3));
        for (id, b) in [1, 2, 4, 5, 6].into_iter().zip(before) {
            let mut a = vec![0u8; b.len()];
            m.read(id, 0, ReadOut::Bytes(&mut a)).unwrap();
            assert_eq!(a, b, "object {id}");
        }
    }

    #[test]
    fn extents_split_and_merge() {
        let mut e = Extents::default();
        for p in 0..4 {
            assert_eq!(e.insert(p, Vpa(100 + p as u32)), None);
        }
        assert_eq!(e.0.len(), 1);
        assert_eq!(e.get(2), Some(Vpa(102)));
        // Relocating the middle splits the extent in three.
        assert_eq!(e.insert(1, Vpa(7)), Some(Vpa(101)));
        assert_eq!(e.0.len(), 3);
        assert_eq!(e.get(1), Some(Vpa(7)));
        // Putting it back merges them again.
        assert_eq!(e.insert(1, Vpa(101)), Some(Vpa(7)));
        assert_eq!(e.0.len(), 1);
        assert_eq!(e.cut(2), vec![Vpa(102), Vpa(103)]);
        assert_eq!(e.get(2), None);
        assert_eq!(e.get(1), Some(Vpa(101)));
        assert_eq!(e.remove(0), Some(Vpa(100)));
        assert_eq!(e.pages().collect::<Vec<_>>(), vec![(1, Vpa(101))]);
    }

    #[test]
    fn records_round_trip_and_refuse_damage() {
        let r = record::encode(0xABCD, 77, (1 << 40) + 5, 12345, 0xFEED);
        assert_eq!(record::decode(&r), Some((0xABCD, 77, (1 << 40) + 5, 12345)));
        assert_eq!(record::payload_crc(&r), Some(0xFEED));
        // A version 2 record (32 bytes sealed at 28, no payload checksum) still decodes.
        let mut v2 = r;
        v2[1] = 2;
        let sealed = crc32c::crc32c(&v2[..28]).to_le_bytes();
        v2[28..32].copy_from_slice(&sealed);
        v2[32..36].fill(0);
        assert_eq!(
            record::decode(&v2),
            Some((0xABCD, 77, (1 << 40) + 5, 12345))
        );
        assert_eq!(record::payload_crc(&v2), None);
        // A payload checksum changed under the record's seal fails the seal.
        let mut bad_payload = r;
        bad_payload[29] ^= 1;
        assert_eq!(record::decode(&bad_payload), None);
        assert_eq!(record::decode_log(&r), None);
        let page = record::LogPage {
            count: 3,
            payload_crc: 0xDEAD,
            seq: 9,
            epoch: 7,
            snapshot: Some((1, 2)),
        };
        let l = record::encode_log(page);
        assert_eq!(record::decode_log(&l), Some(page));
        let appended = record::LogPage {
            snapshot: None,
            ..page
        };
        assert_eq!(
            record::decode_log(&record::encode_log(appended)),
            Some(appended)
        );
        assert_eq!(record::decode(&l), None);
        let mut e = [0u8; record::ENTRY_BYTES];
        record::encode_entry((record::Op::Truncate, 5, 4097, 77), &mut e);
        assert_eq!(
            record::decode_entry(&e),
            Some((record::Op::Truncate, 5, 4097, 77))
        );
        e[0] = 9;
        assert_eq!(record::decode_entry(&e), None);
        let mut bad = r;
        bad[11] ^= 1;
        assert_eq!(record::decode(&bad), None);
        assert_eq!(record::decode(&[0xFF; record::BYTES]), None);
        assert_eq!(record::decode(&r[..10]), None);
    }
}
