//! The block-interface baselines (the papers' sFTL / PFTL, and DFTL) over the shared FML.
//!
//! A logical page (`lpn`) is one write unit by default. Host I/O is in 512-byte sectors; a
//! write that covers part of a logical page is gathered in the write buffer and, if still
//! partial when it leaves, merged with the page's old contents (read-modify-write, OSSD-13
//! VI-F).
//!
//! Sub-page mapping (`ftl.mapping_unit_bytes` below the write unit, e.g. 4 KiB in 8 KiB
//! pages): a logical page is then a *slot* of a write unit, the map names (unit, slot), and the
//! buffer gathers as many logical pages as a unit has slots before programming it; the unit's
//! OOB record names each slot's page (`packed`).
//!
//! Durability: a write is durable once a [`Ftl::flush`] that followed it completed. Recovery
//! rebuilds the map from the newest complete checkpoint (written by [`Ftl::checkpoint`] and at
//! close) and rolls forward every data unit written after it, by sequence number. A TRIM is
//! durable at the next checkpoint: after a power cut, a range trimmed since the last
//! checkpoint may read back any data written to it since that checkpoint (as non-deterministic
//! TRIM allows), until data written there after the trim is flushed. It never reads back bytes
//! that were not written to it.
//!
//! # Modules
//! `config` (settings), `error`, `map` (the mapping table and DFTL's translation I/O), `gc`
//! (GC steps and the relocations they report to the map), `range` (host ranges split into
//! per-unit pieces), `write` (the write buffer, read-modify-write and flush), `read`, `trim`,
//! `checkpoint`, `recovery` (open: checkpoint and roll-forward), `check` (the whole-structure
//! check), `packed` (sub-page mapping: slot locations, gathering slots into a unit); `dftl` (the cached mapping table) and `oob` (the OOB record) are public.

#![deny(clippy::unwrap_used, clippy::expect_used)]
#![warn(missing_docs)]

mod check;
mod checkpoint;
mod config;
pub mod dftl;
mod error;
mod gc;
mod map;
pub mod oob;
mod packed;
mod range;
mod read;
mod recovery;
mod trim;
mod write;

pub use check::CheckError;
pub use config::{BufferPolicy, FtlConfig, FtlConfigError, Mapping};
pub use error::FtlError;
pub use recovery::Recovery;

use flash::gang::Vpa;
use flash::{Flash, Nanos};
use fml::buffer::WriteBuffer;
use fml::{Fml, StreamId};
use serde::Serialize;

use map::Map;

/// Bytes of a host sector: every request's offset and length are multiples of it.
pub const SECTOR_BYTES: u64 = 512;
const DATA_STREAM: StreamId = StreamId(0);
const META_STREAM: StreamId = StreamId(1);
const UNMAPPED: u32 = u32::MAX;
/// A logical page whose unit GC found unreadable: its contents are lost, and reads of it fail
/// until it is written again (returning zeros would pass lost data off as good data).
const LOST: u32 = u32::MAX - 1;

/// Data of a host write.
#[derive(Clone, Copy, Debug)]
pub enum Data<'a> {
    /// Real bytes, as long as the write.
    Bytes(&'a [u8]),
    /// Fingerprint mode: a token standing for the request's bytes. Units store a fingerprint
    /// derived from it ([`fingerprint`]), so reads can be checked without storing data.
    Token(u64),
}

/// Where a host read puts what it finds.
pub enum ReadOut<'a> {
    /// Bytes, as long as the read; an unmapped unit reads as zeros.
    Bytes(&'a mut [u8]),
    /// One fingerprint per unit touched (0 for a unit never written).
    Fingerprints(&'a mut Vec<u64>),
}

/// The fingerprint of a whole unit written by a request with `token`.
pub fn fingerprint(lpn: u32, token: u64) -> u64 {
    mix(token ^ (lpn as u64).rotate_left(32))
}

pub use flash::fingerprint::fold;
use flash::fingerprint::mix;

/// Counters of FTL work.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub struct FtlStats {
    /// Bytes of host writes accepted.
    pub host_write_bytes: u64,
    /// Bytes of host reads accepted.
    pub host_read_bytes: u64,
    /// Host write requests accepted.
    pub host_writes: u64,
    /// Host read requests accepted.
    pub host_reads: u64,
    /// Data units programmed for the host (GC copies not counted).
    pub data_units_written: u64,
    /// TRIM requests accepted.
    pub trims: u64,
    /// Flushes, the one each checkpoint starts with included.
    pub flushes: u64,
    /// Logical pages a read found whole in the write buffer (per page, not per request).
    pub buffer_read_hits: u64,
    /// Reads of a unit's old contents to merge a partial unit into (read-modify-write).
    pub rmw_reads: u64,
    /// DFTL translation pages read (cache misses, and the old copy read before a write-back).
    pub map_pages_read: u64,
    /// DFTL translation pages written back.
    pub map_pages_written: u64,
    /// Checkpoint parts written (one write unit each).
    pub checkpoint_units_written: u64,
    /// Sub-page mapping: units GC programmed with the live slots of partly live units (the
    /// FML's own copies of wholly live units are in its `gc_units_copied`).
    pub gc_units_repacked: u64,
    /// Units GC found unreadable when it came to move them (data, translation pages or
    /// checkpoint parts).
    pub units_lost: u64,
}

/// A block device over the FML: the page-mapping FTL (sFTL / PFTL) or DFTL, as
/// [`FtlConfig::mapping`] says, addressed in 512-byte sectors.
#[derive(Clone)]
pub struct Ftl<F: Flash> {
    fml: Fml<F>,
    map: Map,
    buf: WriteBuffer<u32>,
    config: FtlConfig,
    /// Bytes of a logical page (the mapping unit).
    unit_bytes: usize,
    /// Bytes of the device's write unit (`unit_bytes` times the slots per unit).
    wu_bytes: usize,
    /// Bytes of the OOB record of a data unit (longer for packed units).
    record_bytes: usize,
    /// Sectors of a logical page.
    sectors_per_unit: u32,
    logical_units: u32,
    stats: FtlStats,
    scratch: Vec<u8>,
    /// A write unit's bytes being gathered from several logical pages (sub-page mapping).
    pack: Vec<u8>,
    recovery: Recovery,
    /// Sub-page mapping: the block GC is emptying slot by slot, and the next offset to move.
    evacuating: Option<(u32, u32)>,
    /// Completion times of background flushes still in flight (write-back buffer only).
    inflight: std::collections::BinaryHeap<std::cmp::Reverse<Nanos>>,
    /// When the buffer's memory channel is next free (`ftl.cache_mb_s`).
    cache_free: Nanos,
    /// `destage`: the pages written in the current hot window, and when it ends.
    hot: rustc_hash::FxHashSet<u32>,
    hot_window_end: Nanos,
    /// `destage`: cold pages buffered and waiting to be written back (with others, to fill a
    /// write unit under sub-page mapping).
    cold: std::collections::VecDeque<u32>,
    /// `destage`: logical pages written back and in flight before a write waits.
    destage_depth: usize,
}

impl<F: Flash> Ftl<F> {
    /// The logical capacity in bytes: logical pages times their size, sized from the device's
    /// factory-good units less over-provisioning.
    pub fn capacity_bytes(&self) -> u64 {
        self.logical_units as u64 * self.unit_bytes as u64
    }
    /// Bytes of a logical page: the write unit, or the mapping unit under sub-page mapping.
    pub fn unit_bytes(&self) -> usize {
        self.unit_bytes
    }
    /// Logical pages per write unit (1 unless sub-page mapping is on).
    pub fn slots_per_unit(&self) -> u32 {
        self.map.slots
    }
    /// Counters of the work done since open.
    pub fn stats(&self) -> FtlStats {
        FtlStats {
            units_lost: self.map.lost,
            ..self.stats
        }
    }
    /// The FML below (its counters, blocks and GC state).
    pub fn fml(&self) -> &Fml<F> {
        &self.fml
    }
    /// The device, for fault injection in tests and torture runs.
    pub fn device_mut(&mut self) -> &mut F {
        self.fml.flash_mut()
    }
    /// The settings the FTL was opened with.
    pub fn config(&self) -> &FtlConfig {
        &self.config
    }
    /// What recovery found and did when the FTL was opened.
    pub fn recovery(&self) -> Recovery {
        self.recovery
    }
    /// DFTL cache (hits, misses), if DFTL.
    pub fn cmt_hits_misses(&self) -> Option<(u64, u64)> {
        self.map.cmt.as_ref().map(|c| (c.hits, c.misses))
    }
    /// Units now held in the write buffer.
    pub fn buffered_units(&self) -> usize {
        self.buf.len()
    }

    /// Whether recovery after a crash now could need unit `v`, whose OOB record is `oob` (read
    /// by the caller without a flash command, e.g. by a fault harness asking what a fault
    /// struck). A valid unit is needed. An invalid one is not when every logical page it holds
    /// is mapped to a unit programmed after it: recovery replays that unit in its place. It is
    /// when one of them is unmapped (a TRIM is durable only at the next checkpoint, so recovery
    /// may map the page to this unit again) or lost. An invalid translation page or checkpoint
    /// part is taken as needed too (no harness relies on telling). `None` when `oob` holds no
    /// record.
    pub fn unit_needed(&self, v: Vpa, oob: &[u8]) -> Option<bool> {
        if self.fml.is_valid(v) {
            return Some(true);
        }
        let rec = oob::Record::decode(oob).ok()??;
        let unmapped = |lpn: u32| {
            self.map
                .l2p
                .get(lpn as usize)
                .is_none_or(|&l| l == UNMAPPED || l == LOST)
        };
        Some(match rec.kind {
            oob::Kind::Data => unmapped(rec.key),
            oob::Kind::Packed => rec.slots.keys[..rec.slots.n as usize]
                .iter()
                .any(|&k| k != oob::EMPTY_SLOT && unmapped(k)),
            oob::Kind::Map | oob::Kind::Checkpoint => true,
        })
    }

    /// Checkpoints and hands the device back.
    pub fn close(mut self, at: Nanos) -> Result<F, FtlError> {
        self.checkpoint(at)?;
        Ok(self.fml.into_flash())
    }

    /// Hands the device back without writing anything (what a power cut leaves).
    pub fn crash(self) -> F {
        self.fml.into_flash()
    }
}
