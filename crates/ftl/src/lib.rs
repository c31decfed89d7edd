//! The block-interface baselines (the papers' sFTL / PFTL, and DFTL) over the shared FML.
//!
//! A logical page (`lpn`) is one write unit. Host I/O is in 512-byte sectors; a write that
//! covers part of a unit is gathered in the write buffer and, if still partial when it leaves,
//! merged with the unit's old contents (read-modify-write, OSSD-13 VI-F).
//!
//! Durability: a write is durable once a [`Ftl::flush`] that followed it completed. Recovery
//! rebuilds the map from the newest complete checkpoint (written by [`Ftl::checkpoint`] and at
//! close) and rolls forward every data unit written after it, by sequence number. A TRIM is
//! durable at the next checkpoint: after a power cut, a range trimmed since the last
//! checkpoint may read back any data written to it since that checkpoint (as non-deterministic
//! TRIM allows), until data written there after the trim is flushed. It never reads back bytes
//! that were not written to it.

#![deny(clippy::unwrap_used, clippy::expect_used)]

pub mod dftl;
pub mod oob;

use codec::le;
use flash::gang::Vpa;
use flash::{Content, Flash, FlashError, Nanos, Payload};
use fml::{Fml, FmlConfig, FmlError, GcStep, Owner, StreamId};
use serde::{Deserialize, Serialize};

use dftl::Cmt;
use fml::buffer::{Entry, Fill, WriteBuffer};
use oob::{content_crc, payload_crc, Kind, Record, RECORD_BYTES};

pub const SECTOR_BYTES: u64 = 512;
const DATA_STREAM: StreamId = StreamId(0);
const META_STREAM: StreamId = StreamId(1);
const UNMAPPED: u32 = u32::MAX;
/// A logical page whose unit GC found unreadable: its contents are lost, and reads of it fail
/// until it is written again (returning zeros would pass lost data off as good data).
const LOST: u32 = u32::MAX - 1;

/// Which mapping table.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Mapping {
    /// The whole page map in device RAM (sFTL / PFTL).
    #[default]
    Page,
    /// DFTL: translation pages on flash behind a bounded cache.
    Dftl,
}

/// How the write buffer acknowledges a write.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum BufferPolicy {
    /// A write into a full buffer programs the oldest buffered unit first and completes when
    /// that program does (the seed papers' devices, OSSD-13 V-E).
    #[default]
    Evict,
    /// A device-level write-back data cache (MQSim's, Tavakkol et al., FAST'18): a write
    /// completes when it is in the buffer; units beyond `flush_percent` of the buffer are
    /// programmed in the background, oldest first, and a write waits only when buffered and
    /// in-flight units fill the whole buffer (then for the earliest flush to complete). A
    /// `flush` waits for every flush in flight.
    WriteBack,
}

/// FTL settings.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct FtlConfig {
    /// Chosen by the stack (`ftl` or `dftl`), not a setting of its own.
    #[serde(skip)]
    pub mapping: Mapping,
    /// Write buffer size (default 2 MiB, OSSD-13 V-E); 0 writes through.
    pub buffer_bytes: u64,
    /// What a write waits for when the buffer is full (default `evict`).
    pub buffer_policy: BufferPolicy,
    /// `write-back` only: buffered units beyond this share of the buffer, in percent, are
    /// flushed in the background as writes arrive (default 50).
    pub flush_percent: f64,
    /// DFTL cache size; 8 bytes per cached entry (default 256 KiB).
    pub dftl_cache_bytes: u64,
    /// DFTL only: hold the mapping cache's hit rate at this percentage instead of letting the
    /// LRU decide (POFTL-14 IV-C sets it "artificially" to 100..80%); 0 (the default) = off.
    pub dftl_hit_percent: f64,
    /// Share of the usable flash held back from the logical space, in percent (default 7).
    pub overprovision_percent: f64,
    /// GC copies go to an update block of their own (default true); false appends them to the
    /// host data stream, one log as in the LRW model.
    pub separate_gc_stream: bool,
    /// The FML's settings (a run sets them once for whichever stack it builds).
    #[serde(skip)]
    pub fml: FmlConfig,
}

impl Default for FtlConfig {
    fn default() -> Self {
        FtlConfig {
            mapping: Mapping::Page,
            buffer_bytes: 2 << 20,
            buffer_policy: BufferPolicy::Evict,
            flush_percent: 50.0,
            dftl_cache_bytes: 256 << 10,
            dftl_hit_percent: 0.0,
            overprovision_percent: 7.0,
            separate_gc_stream: true,
            fml: FmlConfig::default(),
        }
    }
}

impl FtlConfig {
    pub fn validate(&self) -> Result<(), String> {
        if !(0.0..=90.0).contains(&self.overprovision_percent) {
            return Err(format!(
                "ftl.overprovision_percent = {} must lie in 0..=90",
                self.overprovision_percent
            ));
        }
        if !(0.0..=100.0).contains(&self.dftl_hit_percent) {
            return Err(format!(
                "ftl.dftl_hit_percent = {} must lie in 0..=100 (0 = the LRU decides)",
                self.dftl_hit_percent
            ));
        }
        if !(self.flush_percent > 0.0 && self.flush_percent <= 100.0) {
            return Err(format!(
                "ftl.flush_percent = {} must lie in (0, 100]",
                self.flush_percent
            ));
        }
        if self.buffer_policy == BufferPolicy::WriteBack && self.buffer_bytes == 0 {
            return Err(
                "ftl.buffer_policy = write-back needs a buffer: ftl.buffer_bytes = 0".into(),
            );
        }
        if self.mapping == Mapping::Dftl && self.dftl_cache_bytes < 8 {
            return Err("ftl.dftl_cache_bytes must hold at least one 8-byte entry".into());
        }
        Ok(())
    }
}

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
    Bytes(&'a mut [u8]),
    /// One fingerprint per unit touched (0 for a unit never written).
    Fingerprints(&'a mut Vec<u64>),
}

#[derive(Debug, thiserror::Error)]
pub enum FtlError {
    #[error(transparent)]
    Fml(#[from] FmlError),
    #[error("{what}: offset {offset} length {len}: {why}")]
    BadRequest {
        what: &'static str,
        offset: u64,
        len: u64,
        why: String,
    },
    #[error("logical page {lpn} holds a fingerprint, but bytes were asked for (written in fingerprint mode)")]
    PayloadMode { lpn: u32 },
    #[error("logical page {lpn} could not be read: {source}")]
    Unreadable { lpn: u32, source: FlashError },
    #[error("FTL configuration: {0}")]
    Config(String),
    #[error("corrupted on flash: {0}")]
    Corrupted(String),
    #[error("logical page {lpn} was lost: its unit was unreadable when GC moved it")]
    Lost { lpn: u32 },
    /// The unit read back does not match the checksum written with it: its contents are lost
    /// and are never returned.
    #[error("logical page {lpn}: uncorrectable read of unit {unit}: its contents do not match their checksum")]
    Checksum { lpn: u32, unit: u32 },
}

impl From<FlashError> for FtlError {
    fn from(e: FlashError) -> Self {
        FtlError::Fml(FmlError::Flash(e))
    }
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
    pub host_write_bytes: u64,
    pub host_read_bytes: u64,
    pub host_writes: u64,
    pub host_reads: u64,
    /// Data units programmed for the host (GC copies not counted).
    pub data_units_written: u64,
    pub trims: u64,
    pub flushes: u64,
    pub buffer_read_hits: u64,
    pub rmw_reads: u64,
    pub map_pages_read: u64,
    pub map_pages_written: u64,
    pub checkpoint_units_written: u64,
    pub units_lost: u64,
}

/// The mapping state; GC reports relocations to it.
struct Map {
    l2p: Vec<u32>,
    /// Write units on the device (the range of unit addresses).
    total_units: usize,
    next_seq: u64,
    cmt: Option<Cmt>,
    /// GTD: location of each translation page (DFTL).
    gtd: Vec<u32>,
    ckpt: Vec<u32>,
    ckpt_seq: u64,
    /// Parts of a checkpoint being written, and its sequence number.
    ckpt_new: Vec<u32>,
    ckpt_new_seq: u64,
    /// Logical pages GC moved whose cached translation must be updated (DFTL).
    moved: Vec<u32>,
    lost: u64,
    /// Stream for GC copies of data (`None`: the FML's GC stream).
    gc_data_stream: Option<StreamId>,
    /// The record of the unit GC is copying, decoded in `before_copy` for `relocated`.
    copying: Option<Record>,
}

impl Map {
    fn take_seq(&mut self) -> u64 {
        let s = self.next_seq;
        self.next_seq += 1;
        s
    }
}

impl Owner for Map {
    fn recognizes(&mut self, _from: Vpa, oob: &[u8]) -> bool {
        matches!(Record::decode(oob), Ok(Some(_)))
    }

    fn before_copy(&mut self, _from: Vpa, oob: &mut [u8]) -> Option<StreamId> {
        // A copy gets a fresh sequence number so it wins over the checkpoint at recovery.
        self.copying = None;
        if let Ok(Some(mut r)) = Record::decode(oob) {
            self.copying = Some(r);
            if r.kind != Kind::Checkpoint {
                r.seq = self.take_seq();
                oob[..RECORD_BYTES].copy_from_slice(&r.encode());
                if r.kind == Kind::Data {
                    return self.gc_data_stream;
                }
            }
        }
        None
    }

    #[expect(
        clippy::expect_used,
        reason = "the FML relocates only units whose record this owner recognized (Owner::recognizes) before the copy"
    )]
    fn relocated(&mut self, from: Vpa, to: Vpa, oob: &[u8]) {
        let r = Record::decode(oob)
            .ok()
            .flatten()
            .expect("GC copied a unit whose record the FTL wrote");
        match r.kind {
            Kind::Data => {
                let lpn = r.key;
                assert_eq!(
                    self.l2p[lpn as usize], from.0,
                    "GC moved lpn {lpn} from a unit the map does not point to"
                );
                self.l2p[lpn as usize] = to.0;
                if let Some(cmt) = self.cmt.as_mut() {
                    if !cmt.mark_dirty_if_cached(lpn) {
                        self.moved.push(lpn);
                    }
                }
            }
            Kind::Map => self.gtd[r.key as usize] = to.0,
            Kind::Checkpoint => {
                let set = if r.seq == self.ckpt_new_seq {
                    &mut self.ckpt_new
                } else {
                    &mut self.ckpt
                };
                if let Some(slot) = set.iter_mut().find(|v| **v == from.0) {
                    *slot = to.0;
                }
            }
        }
    }

    fn lost(&mut self, from: Vpa, _error: &FlashError) {
        // A rare event: find the owner by search rather than keep a reverse map (4 bytes per
        // unit) for it.
        self.lost += 1;
        if let Some(lpn) = self.l2p.iter().position(|&v| v == from.0) {
            self.l2p[lpn] = LOST;
        } else if let Some(g) = self.gtd.iter_mut().find(|g| **g == from.0) {
            *g = UNMAPPED; // rewritten from the in-memory table at the next write-back
        } else {
            for set in [&mut self.ckpt, &mut self.ckpt_new] {
                set.retain(|v| *v != from.0);
            }
        }
    }
}

/// What recovery found and did.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub struct Recovery {
    pub units_scanned: u64,
    pub units_unreadable: u64,
    pub checkpoint_seq: Option<u64>,
    pub rolled_forward: u64,
    pub scan_done_ns: Nanos,
}

pub struct Ftl<F: Flash> {
    fml: Fml<F>,
    map: Map,
    buf: WriteBuffer<u32>,
    config: FtlConfig,
    unit_bytes: usize,
    sectors_per_unit: u32,
    logical_units: u32,
    stats: FtlStats,
    scratch: Vec<u8>,
    recovery: Recovery,
    /// Completion times of background flushes still in flight (write-back buffer only).
    inflight: std::collections::BinaryHeap<std::cmp::Reverse<Nanos>>,
}

impl<F: Flash> Ftl<F> {
    /// Opens the FTL over a device: blank, or holding an earlier FTL's data (recovered).
    pub fn open(flash: F, config: FtlConfig) -> Result<Self, FtlError> {
        Self::open_inner(flash, config, true)
    }

    /// A deliberately broken recovery that loads the checkpoint but skips the roll-forward, so
    /// everything written after the checkpoint is lost. Only for proving that a torture harness
    /// catches a broken recovery; never use it to open a real device.
    #[doc(hidden)]
    pub fn open_broken_without_roll_forward(flash: F, config: FtlConfig) -> Result<Self, FtlError> {
        Self::open_inner(flash, config, false)
    }

    fn open_inner(flash: F, config: FtlConfig, roll_forward: bool) -> Result<Self, FtlError> {
        config.validate().map_err(FtlError::Config)?;
        let unit_bytes = flash.config().write_unit_bytes() as usize;
        let sectors_per_unit = (unit_bytes as u64 / SECTOR_BYTES) as u32;
        if sectors_per_unit > 64 {
            return Err(FtlError::Config(format!(
                "write units over 32 KiB ({unit_bytes} bytes) are not supported"
            )));
        }
        let fml = Fml::open(flash, config.fml, 2, RECORD_BYTES)?;
        // The logical space is fixed by the device as it left the factory, not by the blocks
        // good today: a grown bad block must not shrink it, or a checkpoint (which records its
        // size) would no longer load and pages at its top would be dropped at recovery.
        let physical = fml.factory_good_units();
        let logical = ((physical as f64 * (1.0 - config.overprovision_percent / 100.0)) as u64)
            .min(fml.capacity_units_as_built());
        if logical == 0 {
            return Err(FtlError::Config(
                "no logical space left after over-provisioning and reserves".into(),
            ));
        }
        let logical_units = logical as u32;
        let entries_per_tpage = (unit_bytes / 4) as u32;
        let tpages = logical_units.div_ceil(entries_per_tpage);
        let cmt = (config.mapping == Mapping::Dftl).then(|| {
            if config.dftl_hit_percent > 0.0 {
                Cmt::with_hit_rate(config.dftl_hit_percent / 100.0, entries_per_tpage)
            } else {
                Cmt::new((config.dftl_cache_bytes / 8) as usize, entries_per_tpage)
            }
        });
        let total_units =
            fml.layout().superblocks as usize * fml.layout().units_per_superblock as usize;
        let mut ftl = Ftl {
            map: Map {
                l2p: vec![UNMAPPED; logical_units as usize],
                total_units,
                next_seq: 1,
                cmt,
                gtd: vec![UNMAPPED; tpages as usize],
                ckpt: Vec::new(),
                ckpt_seq: 0,
                ckpt_new: Vec::new(),
                ckpt_new_seq: u64::MAX,
                moved: Vec::new(),
                lost: 0,
                gc_data_stream: (!config.separate_gc_stream).then_some(DATA_STREAM),
                copying: None,
            },
            buf: WriteBuffer::new((config.buffer_bytes / unit_bytes as u64) as usize),
            fml,
            config,
            unit_bytes,
            sectors_per_unit,
            logical_units,
            stats: FtlStats::default(),
            scratch: vec![0; unit_bytes],
            recovery: Recovery::default(),
            inflight: std::collections::BinaryHeap::new(),
        };
        ftl.recover(roll_forward)?;
        Ok(ftl)
    }

    pub fn capacity_bytes(&self) -> u64 {
        self.logical_units as u64 * self.unit_bytes as u64
    }
    pub fn unit_bytes(&self) -> usize {
        self.unit_bytes
    }
    pub fn stats(&self) -> FtlStats {
        FtlStats {
            units_lost: self.map.lost,
            ..self.stats
        }
    }
    pub fn fml(&self) -> &Fml<F> {
        &self.fml
    }
    /// The device, for fault injection in tests and torture runs.
    pub fn device_mut(&mut self) -> &mut F {
        self.fml.flash_mut()
    }
    pub fn config(&self) -> &FtlConfig {
        &self.config
    }
    pub fn recovery(&self) -> Recovery {
        self.recovery
    }
    /// DFTL cache (hits, misses), if DFTL.
    pub fn cmt_hits_misses(&self) -> Option<(u64, u64)> {
        self.map.cmt.as_ref().map(|c| (c.hits, c.misses))
    }
    pub fn buffered_units(&self) -> usize {
        self.buf.len()
    }

    /// The write units a request would touch if issued now, for a die scheduler (BLOCKMGMT-09
    /// 3.2): a read touches the units holding its logical pages; a write touches the unit the
    /// data stream programs next (when its update block is open) and, where it covers a unit
    /// only in part, the unit read to merge. Unmapped pages and an out-of-range request touch
    /// nothing. Appends to `out`.
    pub fn units_touched(&self, offset: u64, len: u64, write: bool, out: &mut Vec<Vpa>) {
        if len == 0 || self.check_range("locate", offset, len).is_err() {
            return;
        }
        let unit = self.unit_bytes as u64;
        let (first, last) = (offset / unit, (offset + len - 1) / unit);
        let mapped = |lpn: u64| {
            let v = self.map.l2p[lpn as usize];
            (v < LOST).then_some(Vpa(v))
        };
        if write {
            out.extend(self.fml.next_unit(DATA_STREAM));
            let partial = |lpn: u64| offset > lpn * unit || offset + len < (lpn + 1) * unit;
            for lpn in [first, last] {
                if partial(lpn) {
                    out.extend(mapped(lpn));
                }
            }
        } else {
            out.extend((first..=last).filter_map(mapped));
        }
    }

    /// Where GC's next copy of a data unit lands, if that stream's update block is open.
    pub fn next_gc_destination(&self) -> Option<Vpa> {
        let stream = self.map.gc_data_stream.unwrap_or(self.fml.gc_stream());
        self.fml.next_unit(stream)
    }

    fn check_range(&self, what: &'static str, offset: u64, len: u64) -> Result<(), FtlError> {
        let bad = |why: String| {
            Err(FtlError::BadRequest {
                what,
                offset,
                len,
                why,
            })
        };
        if !offset.is_multiple_of(SECTOR_BYTES) || !len.is_multiple_of(SECTOR_BYTES) {
            return bad("not aligned to 512-byte sectors".into());
        }
        if len == 0 {
            return bad("empty request".into());
        }
        if offset
            .checked_add(len)
            .is_none_or(|end| end > self.capacity_bytes())
        {
            return bad(format!(
                "beyond the logical capacity of {} bytes",
                self.capacity_bytes()
            ));
        }
        Ok(())
    }

    /// Splits a byte range into (lpn, first sector, end sector) pieces.
    fn pieces(&self, offset: u64, len: u64) -> Pieces {
        let spu = self.sectors_per_unit as u64;
        let first = offset / SECTOR_BYTES;
        let end = (offset + len) / SECTOR_BYTES;
        Pieces {
            spu,
            first,
            end,
            lpn: first / spu,
            last: (end - 1) / spu,
        }
    }

    fn full_mask(&self) -> u64 {
        if self.sectors_per_unit == 64 {
            u64::MAX
        } else {
            (1u64 << self.sectors_per_unit) - 1
        }
    }

    fn mask(s0: u32, s1: u32) -> u64 {
        let n = s1 - s0;
        let bits = if n == 64 { u64::MAX } else { (1u64 << n) - 1 };
        bits << s0
    }

    /// Host write. Returns when the write is accepted (in the buffer, or programmed when the
    /// buffer is off or had to make room).
    #[expect(
        clippy::expect_used,
        reason = "each buffer entry taken was found in the buffer just above, with no change in between"
    )]
    pub fn write(
        &mut self,
        at: Nanos,
        offset: u64,
        len: u64,
        data: Data<'_>,
    ) -> Result<Nanos, FtlError> {
        self.check_range("write", offset, len)?;
        if let Data::Bytes(b) = data {
            if b.len() as u64 != len {
                return Err(FtlError::BadRequest {
                    what: "write",
                    offset,
                    len,
                    why: format!("{} data bytes given", b.len()),
                });
            }
        }
        self.stats.host_writes += 1;
        self.stats.host_write_bytes += len;
        let mut done = at;
        let unit = self.unit_bytes;
        let full = self.full_mask();
        let bytes_mode = matches!(data, Data::Bytes(_));
        let pieces = self.pieces(offset, len);
        let mut consumed = 0usize;
        for (lpn, s0, s1) in pieces {
            let mask = Self::mask(s0, s1);
            let n = ((s1 - s0) as u64 * SECTOR_BYTES) as usize;
            // A unit buffered in the other payload mode is written out first.
            if self
                .buf
                .get(lpn)
                .is_some_and(|e| matches!(e.fill, Fill::Bytes(_)) != bytes_mode)
            {
                let old = self.buf.take(lpn).expect("entry exists");
                done = done.max(self.program_entry(at, old)?);
            }
            if self.buf.capacity() > 0 && self.buf.get(lpn).is_none() {
                if self.config.buffer_policy == BufferPolicy::WriteBack {
                    done = done.max(self.admit_write_back(at)?);
                } else if self.buf.is_full() {
                    done = done.max(self.evict_one(at)?);
                }
            }
            let e = self.buf.entry(lpn, bytes_mode, unit);
            match (&mut e.fill, data) {
                (Fill::Bytes(b), Data::Bytes(src)) => {
                    let o = s0 as usize * SECTOR_BYTES as usize;
                    b[o..o + n].copy_from_slice(&src[consumed..consumed + n]);
                }
                (Fill::Token(fp), Data::Token(t)) => {
                    *fp = if mask == full {
                        fingerprint(lpn, t)
                    } else {
                        fold(*fp, t, mask)
                    };
                }
                _ => unreachable!("entries of the other mode were written out above"),
            }
            e.mask |= mask;
            consumed += n;
            if self.buf.capacity() == 0 {
                let e = self.buf.take(lpn).expect("entry exists");
                done = done.max(self.program_entry(at, e)?);
            }
        }
        Ok(done)
    }

    /// Write-back buffer: makes room for one more unit; returns when the unit may enter.
    /// Flushes started by earlier writes that completed by `at` free their slots; units beyond
    /// the flush threshold start flushing now; if buffered and in-flight units still fill the
    /// buffer, the write waits for the earliest flush to complete.
    fn admit_write_back(&mut self, at: Nanos) -> Result<Nanos, FtlError> {
        let cap = self.buf.capacity();
        let threshold = ((cap as f64 * self.config.flush_percent / 100.0) as usize).clamp(1, cap);
        let mut ready = at;
        loop {
            while self.inflight.peek().is_some_and(|r| r.0 <= ready) {
                self.inflight.pop();
            }
            // Background flushes: the oldest units beyond the threshold, issued now.
            while self.buf.len() >= threshold {
                let Some(e) = self.buf.pop_oldest() else {
                    break;
                };
                let d = self.program_entry(at, e)?;
                self.inflight.push(std::cmp::Reverse(d));
            }
            if self.buf.len() + self.inflight.len() < cap {
                return Ok(ready);
            }
            match self.inflight.pop() {
                Some(r) => ready = ready.max(r.0),
                None => return Ok(ready),
            }
        }
    }

    /// Writes the oldest buffered unit to flash.
    fn evict_one(&mut self, at: Nanos) -> Result<Nanos, FtlError> {
        match self.buf.pop_oldest() {
            Some(e) => self.program_entry(at, e),
            None => Ok(at),
        }
    }

    /// Programs one buffered unit, merging in its old contents when the buffer holds only part.
    fn program_entry(&mut self, at: Nanos, mut e: Entry<u32>) -> Result<Nanos, FtlError> {
        let mut t = self.foreground_gc(at)?;
        t = self.translate(t, e.key, true)?;
        let full = self.full_mask();
        let old = self.map.l2p[e.key as usize];
        if e.mask != full && old == LOST {
            // The rest of the unit is gone: merging would invent its bytes.
            return Err(FtlError::Lost { lpn: e.key });
        }
        if e.mask != full {
            match &mut e.fill {
                Fill::Bytes(b) => {
                    if old < LOST {
                        self.stats.rmw_reads += 1;
                        let (done, content) = self.read_mapped(t, e.key, old)?;
                        if !matches!(content, Content::Bytes) {
                            return Err(FtlError::PayloadMode { lpn: e.key });
                        }
                        t = done;
                        Self::merge(b, &self.scratch, e.mask);
                    } else {
                        Self::zero_missing(b, e.mask);
                    }
                }
                Fill::Token(fp) => {
                    let mut old_fp = 0;
                    if old < LOST {
                        self.stats.rmw_reads += 1;
                        let (done, content) = self.read_mapped(t, e.key, old)?;
                        t = done;
                        if let Content::Fingerprint(f) = content {
                            old_fp = f;
                        }
                    }
                    *fp = fold(old_fp, *fp, e.mask);
                }
            }
        }
        let seq = self.map.take_seq();
        let payload = match &e.fill {
            Fill::Bytes(b) => Payload::Bytes(b),
            Fill::Token(fp) => Payload::Fingerprint(*fp),
        };
        let rec = Record {
            kind: Kind::Data,
            key: e.key,
            seq,
            payload_crc: payload_crc(payload),
        }
        .encode();
        let (vpa, done) = self.fml.write(t, DATA_STREAM, payload, &rec)?;
        self.stats.data_units_written += 1;
        if old < LOST {
            self.fml.invalidate(Vpa(old));
        }
        self.map.l2p[e.key as usize] = vpa.0;
        self.buf.recycle(e);
        Ok(done)
    }

    /// Reads the unit `loc` that the map says holds logical page `lpn` (bytes into the scratch
    /// buffer) and checks its OOB record names that page: a unit that reads erased, or holds
    /// another page (a misdirected write landed there), is unreadable, never data.
    fn read_mapped(&mut self, at: Nanos, lpn: u32, loc: u32) -> Result<(Nanos, Content), FtlError> {
        let mut scratch = std::mem::take(&mut self.scratch);
        let mut oob = [0u8; RECORD_BYTES];
        let r = self.fml.read(at, Vpa(loc), &mut scratch, &mut oob);
        self.scratch = scratch;
        let unreadable = |fml: &Fml<F>| FtlError::Unreadable {
            lpn,
            source: FlashError::Uncorrectable {
                addr: fml.layout().page(Vpa(loc), 0),
                bit_errors: 0,
            },
        };
        let (done, content) = match r {
            Ok(x) => x,
            Err(FmlError::Flash(source)) => return Err(FtlError::Unreadable { lpn, source }),
            Err(e) => return Err(e.into()),
        };
        match Record::decode(&oob) {
            Ok(Some(Record {
                kind: Kind::Data,
                key,
                payload_crc,
                ..
            })) if key == lpn && content != Content::Erased => {
                if content_crc(content, &self.scratch) != Some(payload_crc) {
                    return Err(FtlError::Checksum { lpn, unit: loc });
                }
                Ok((done, content))
            }
            _ => Err(unreadable(&self.fml)),
        }
    }

    /// Reads a whole unit (its bytes cross the bus even when it holds a fingerprint, so the
    /// timing is the same in both payload modes); the bytes land in the scratch buffer. Used
    /// for translation pages only, whose contents stand for entries the FTL keeps in host
    /// memory and are never used: their checksum is written but there is nothing to check it
    /// for (docs/FORMAT.md, section 2).
    fn read_unit(&mut self, at: Nanos, v: Vpa) -> Result<(Nanos, Content), FmlError> {
        let mut scratch = std::mem::take(&mut self.scratch);
        let r = self.fml.read(at, v, &mut scratch, &mut []);
        self.scratch = scratch;
        r
    }

    fn merge(dst: &mut [u8], old: &[u8], mask: u64) {
        let s = SECTOR_BYTES as usize;
        for i in 0..dst.len() / s {
            if mask & (1 << i) == 0 {
                dst[i * s..(i + 1) * s].copy_from_slice(&old[i * s..(i + 1) * s]);
            }
        }
    }

    fn zero_missing(dst: &mut [u8], mask: u64) {
        let s = SECTOR_BYTES as usize;
        for i in 0..dst.len() / s {
            if mask & (1 << i) == 0 {
                dst[i * s..(i + 1) * s].fill(0);
            }
        }
    }

    /// Runs GC until free blocks are back at the low watermark; returns when it is done. Every
    /// write to a host stream (data, translation pages, checkpoints) makes room this way first.
    fn make_room(&mut self, at: Nanos) -> Result<Nanos, FtlError> {
        let mut t = at;
        while self.fml.must_collect() {
            match self.fml.gc_step(t, &mut self.map)? {
                GcStep::Idle => break,
                GcStep::Copied { done_ns } | GcStep::Erased { done_ns } => t = done_ns,
                GcStep::Chose { .. } | GcStep::Retired => {}
            }
        }
        Ok(t)
    }

    /// [`Self::make_room`], then the translation updates for units GC moved (DFTL).
    fn foreground_gc(&mut self, at: Nanos) -> Result<Nanos, FtlError> {
        let t = self.make_room(at)?;
        self.update_moved(t)
    }

    /// Background GC in idle time: steps while the FML wants them and they start before
    /// `until`. Returns when the last step completes.
    pub fn background(&mut self, from: Nanos, until: Nanos) -> Result<Nanos, FtlError> {
        let idle = self.buf.is_empty();
        let mut t = from;
        while t < until && self.fml.wants_collect(idle) {
            match self.fml.gc_step(t, &mut self.map)? {
                GcStep::Idle => break,
                GcStep::Copied { done_ns } | GcStep::Erased { done_ns } => t = done_ns,
                GcStep::Chose { .. } | GcStep::Retired => {}
            }
        }
        // Translation updates for moved units are written once GC has freed space: they go to
        // a host stream, which may not take GC's last free block.
        self.update_moved(t)
    }

    /// DFTL: brings the translations of units GC moved into the cache, dirty.
    fn update_moved(&mut self, at: Nanos) -> Result<Nanos, FtlError> {
        let mut t = at;
        while let Some(lpn) = self.map.moved.pop() {
            t = self.translate(t, lpn, true)?;
        }
        Ok(t)
    }

    /// DFTL address translation: a cache miss reads the translation page; evicting a dirty
    /// entry writes its translation page back first. A no-op for the page-mapping FTL.
    fn translate(&mut self, at: Nanos, lpn: u32, dirty: bool) -> Result<Nanos, FtlError> {
        let Some(cmt) = self.map.cmt.as_mut() else {
            return Ok(at);
        };
        let io = cmt.access(lpn, dirty);
        let mut t = at;
        if let Some(tp) = io.writeback {
            t = self.write_tpage(t, tp)?;
        }
        if let Some(tp) = io.fetch {
            let loc = self.map.gtd[tp as usize];
            if loc != UNMAPPED {
                let (done, _) = self.read_unit(t, Vpa(loc))?;
                self.stats.map_pages_read += 1;
                t = done;
            }
        }
        Ok(t)
    }

    /// Writes a translation page back: read the old copy (the cache holds only part of it),
    /// write the new one.
    fn write_tpage(&mut self, at: Nanos, tp: u32) -> Result<Nanos, FtlError> {
        let mut t = self.make_room(at)?;
        let old = self.map.gtd[tp as usize];
        if old != UNMAPPED {
            let (done, _) = self.read_unit(t, Vpa(old))?;
            self.stats.map_pages_read += 1;
            t = done;
        }
        let seq = self.map.take_seq();
        // The page's entries live in the host-side table; the flash copy stands for them.
        let payload = Payload::Fingerprint(fingerprint(tp, seq));
        let rec = Record {
            kind: Kind::Map,
            key: tp,
            seq,
            payload_crc: payload_crc(payload),
        }
        .encode();
        let (vpa, done) = self.fml.write(t, META_STREAM, payload, &rec)?;
        if old != UNMAPPED {
            self.fml.invalidate(Vpa(old));
        }
        self.map.gtd[tp as usize] = vpa.0;
        self.stats.map_pages_written += 1;
        Ok(done)
    }

    /// Host read.
    #[expect(
        clippy::expect_used,
        clippy::unwrap_used,
        reason = "each buffer entry read or taken was found in the buffer just above, with no change in between"
    )]
    pub fn read(
        &mut self,
        at: Nanos,
        offset: u64,
        len: u64,
        out: ReadOut<'_>,
    ) -> Result<Nanos, FtlError> {
        self.check_range("read", offset, len)?;
        self.stats.host_reads += 1;
        self.stats.host_read_bytes += len;
        let mut done = at;
        let pieces = self.pieces(offset, len);
        let mut out = out;
        let mut produced = 0usize;
        for (lpn, s0, s1) in pieces {
            let want = Self::mask(s0, s1);
            let n = ((s1 - s0) as u64 * SECTOR_BYTES) as usize;
            let buffered = self
                .buf
                .get(lpn)
                .map(|e| e.mask & want == want)
                .unwrap_or(false);
            if buffered {
                self.stats.buffer_read_hits += 1;
                let e = self.buf.get(lpn).unwrap();
                match (&mut out, &e.fill) {
                    (ReadOut::Bytes(dst), Fill::Bytes(b)) => {
                        let o = s0 as usize * SECTOR_BYTES as usize;
                        dst[produced..produced + n].copy_from_slice(&b[o..o + n]);
                    }
                    (ReadOut::Fingerprints(v), Fill::Token(fp)) => v.push(*fp),
                    (ReadOut::Fingerprints(v), Fill::Bytes(_)) => v.push(0),
                    (ReadOut::Bytes(_), Fill::Token(_)) => {
                        return Err(FtlError::PayloadMode { lpn })
                    }
                }
                produced += n;
                continue;
            }
            // Partly buffered units are written out first so the flash copy is current.
            if self.buf.get(lpn).is_some() {
                let e = self.buf.take(lpn).expect("entry exists");
                done = done.max(self.program_entry(at, e)?);
            }
            let t = self.translate(at, lpn, false)?;
            let loc = self.map.l2p[lpn as usize];
            match &mut out {
                ReadOut::Bytes(dst) => {
                    let dst = &mut dst[produced..produced + n];
                    if loc == LOST {
                        return Err(FtlError::Lost { lpn });
                    } else if loc == UNMAPPED {
                        dst.fill(0);
                    } else {
                        let (d, content) = self.read_mapped(t, lpn, loc)?;
                        if !matches!(content, Content::Bytes) {
                            return Err(FtlError::PayloadMode { lpn });
                        }
                        done = done.max(d);
                        let o = s0 as usize * SECTOR_BYTES as usize;
                        dst.copy_from_slice(&self.scratch[o..o + n]);
                    }
                }
                ReadOut::Fingerprints(v) => {
                    if loc == LOST {
                        return Err(FtlError::Lost { lpn });
                    } else if loc == UNMAPPED {
                        v.push(0);
                    } else {
                        let (d, content) = self.read_mapped(t, lpn, loc)?;
                        done = done.max(d);
                        v.push(match content {
                            Content::Fingerprint(f) => f,
                            _ => 0,
                        });
                    }
                }
            }
            produced += n;
        }
        Ok(done)
    }

    /// Discards whole units of a range (a partial unit at either end is left as it is).
    pub fn trim(&mut self, at: Nanos, offset: u64, len: u64) -> Result<Nanos, FtlError> {
        self.check_range("trim", offset, len)?;
        self.stats.trims += 1;
        let full = self.full_mask();
        let mut t = at;
        let pieces = self.pieces(offset, len);
        for (lpn, s0, s1) in pieces {
            if Self::mask(s0, s1) != full {
                continue;
            }
            self.buf.drop_where(|&k| k == lpn);
            if self.map.l2p[lpn as usize] != UNMAPPED {
                // Translation may run GC, which may move this very unit: read the map after it.
                t = self.translate(t, lpn, true)?;
                let old = std::mem::replace(&mut self.map.l2p[lpn as usize], UNMAPPED);
                if old < LOST {
                    self.fml.invalidate(Vpa(old));
                }
            }
        }
        Ok(t)
    }

    /// Writes every buffered unit to flash and syncs the device; returns when all are durable.
    pub fn flush(&mut self, at: Nanos) -> Result<Nanos, FtlError> {
        self.stats.flushes += 1;
        let mut done = at;
        while let Some(e) = self.buf.pop_oldest() {
            done = done.max(self.program_entry(at, e)?);
        }
        while let Some(r) = self.inflight.pop() {
            done = done.max(r.0);
        }
        self.fml.flash_mut().sync()?;
        Ok(done)
    }

    /// Flushes, then writes the whole map as a checkpoint (and DFTL's dirty translation pages),
    /// so that TRIMs become durable and recovery has a base. Returns when it is durable.
    #[expect(
        clippy::unwrap_used,
        reason = "only DFTL has dirty translation pages, and DFTL always has its cached mapping table"
    )]
    pub fn checkpoint(&mut self, at: Nanos) -> Result<Nanos, FtlError> {
        let mut t = self.flush(at)?;
        if let Some(cmt) = self.map.cmt.as_mut() {
            let dirty = cmt.dirty_tpages();
            for tp in dirty {
                t = self.write_tpage(t, tp)?;
                self.map.cmt.as_mut().unwrap().clean_tpage(tp);
            }
        }
        let seq = self.map.take_seq();
        self.map.ckpt_new_seq = seq;
        self.map.ckpt_new.clear();
        let per_part = (self.unit_bytes - CKPT_HEADER - 4) / 4;
        let parts = (self.logical_units as usize).div_ceil(per_part);
        let mut page = vec![0u8; self.unit_bytes];
        for part in 0..parts {
            let first = part * per_part;
            let count = per_part.min(self.logical_units as usize - first);
            encode_ckpt(
                &mut page,
                seq,
                part as u32,
                parts as u32,
                self.logical_units,
                first as u32,
                &self.map.l2p[first..first + count],
            );
            t = self.foreground_gc(t)?;
            let rec = Record {
                kind: Kind::Checkpoint,
                key: part as u32,
                seq,
                payload_crc: payload_crc(Payload::Bytes(&page)),
            }
            .encode();
            let (vpa, done) = self
                .fml
                .write(t, META_STREAM, Payload::Bytes(&page), &rec)?;
            t = done;
            self.map.ckpt_new.push(vpa.0);
            self.stats.checkpoint_units_written += 1;
        }
        for old in std::mem::take(&mut self.map.ckpt) {
            self.fml.invalidate(Vpa(old));
        }
        self.map.ckpt = std::mem::take(&mut self.map.ckpt_new);
        self.map.ckpt_seq = seq;
        self.map.ckpt_new_seq = u64::MAX;
        self.fml.flash_mut().sync()?;
        Ok(t)
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

    /// Rebuilds the map from the flash, in two passes over the OOB records so memory stays at
    /// one bit per logical page beyond the map itself:
    /// 1. find the newest complete checkpoint and load it as the base map;
    /// 2. keep each base entry whose unit still holds that page with a sequence number no newer
    ///    than the checkpoint (a unit erased and reused since belongs to another page, and the
    ///    page was trimmed), and roll forward every data unit written after the checkpoint,
    ///    the newest per page winning.
    #[expect(
        clippy::expect_used,
        reason = "debug builds assert the recovered FTL's invariants (docs/DESIGN.md: expensive checks in debug builds)"
    )]
    fn recover(&mut self, roll_forward: bool) -> Result<(), FtlError> {
        let mut rec = Recovery::default();
        let mut ckpts: Vec<(u64, u32, u32)> = Vec::new();
        let mut max_seq = 0u64;
        let (mut current, mut old) = (0u64, 0u64);
        let done = self.fml.scan(0, |v, r| {
            rec.units_scanned += 1;
            if let Ok((_, oob)) = &r {
                old += Record::is_version_1(oob) as u64;
            }
            match r.ok().map(|(_, oob)| Record::decode(oob)) {
                Some(Ok(Some(r))) => {
                    current += 1;
                    max_seq = max_seq.max(r.seq);
                    if r.kind == Kind::Checkpoint {
                        ckpts.push((r.seq, r.key, v.0));
                    }
                }
                _ => rec.units_unreadable += 1,
            }
        })?;
        rec.scan_done_ns = done;
        if current == 0 && old > 0 {
            return Err(FtlError::Corrupted(format!(
                "{old} OOB records of version 1 and none this build reads: the image was \
                 written before payload checksums (record version 2); format it again"
            )));
        }
        if rec.units_scanned == 0 {
            self.recovery = rec;
            return Ok(());
        }
        // Pass 1 result: the newest checkpoint whose parts are all present and readable.
        ckpts.sort_unstable_by(|a, b| b.cmp(a));
        let mut base: Option<(u64, Vec<u32>)> = None;
        let mut i = 0;
        while i < ckpts.len() && base.is_none() {
            let seq = ckpts[i].0;
            let group: Vec<(u64, u32, u32)> =
                ckpts.iter().filter(|c| c.0 == seq).copied().collect();
            i += group.len();
            if self.load_checkpoint(seq, &group)? {
                base = Some((seq, group.iter().map(|g| g.2).collect()));
            } else {
                self.map.l2p.fill(UNMAPPED);
            }
        }
        let ckpt_seq = base.as_ref().map_or(0, |b| b.0);
        // Pass 2: confirm base entries, collect newer units and translation pages.
        let logical = self.logical_units;
        let mut confirmed = vec![0u64; (logical as usize).div_ceil(64)];
        let mut newer: rustc_hash::FxHashMap<u32, (u64, u32)> = Default::default();
        let mut map_best: Vec<(u64, u32)> = vec![(0, UNMAPPED); self.map.gtd.len()];
        let l2p = &self.map.l2p;
        let done = self.fml.scan(done, |v, r| {
            let Some(Ok(Some(r))) = r.ok().map(|(_, oob)| Record::decode(oob)) else {
                return;
            };
            match r.kind {
                Kind::Data if r.key < logical => {
                    if r.seq > ckpt_seq {
                        let e = newer.entry(r.key).or_insert((0, UNMAPPED));
                        if r.seq > e.0 {
                            *e = (r.seq, v.0);
                        }
                    } else if l2p[r.key as usize] == v.0 {
                        confirmed[r.key as usize / 64] |= 1 << (r.key % 64);
                    }
                }
                Kind::Map
                    if (r.key as usize) < map_best.len() && r.seq > map_best[r.key as usize].0 =>
                {
                    map_best[r.key as usize] = (r.seq, v.0);
                }
                _ => {}
            }
        })?;
        rec.scan_done_ns = done;
        for lpn in 0..logical as usize {
            if confirmed[lpn / 64] & (1 << (lpn % 64)) == 0 {
                self.map.l2p[lpn] = UNMAPPED;
            }
        }
        if !roll_forward {
            newer.clear();
        }
        rec.rolled_forward = newer.len() as u64;
        for (lpn, (_, unit)) in newer {
            self.map.l2p[lpn as usize] = unit;
        }
        for &v in &self.map.l2p {
            if v != UNMAPPED {
                self.fml.mark_valid(Vpa(v)).map_err(FtlError::Corrupted)?;
            }
        }
        for (tp, &(_, loc)) in map_best.iter().enumerate() {
            if loc != UNMAPPED {
                self.map.gtd[tp] = loc;
                self.fml.mark_valid(Vpa(loc)).map_err(FtlError::Corrupted)?;
            }
        }
        if let Some((seq, units)) = base {
            for &u in &units {
                self.fml.mark_valid(Vpa(u)).map_err(FtlError::Corrupted)?;
            }
            self.map.ckpt = units;
            self.map.ckpt_seq = seq;
            rec.checkpoint_seq = Some(seq);
        }
        self.map.next_seq = max_seq + 1;
        self.recovery = rec;
        #[cfg(debug_assertions)]
        self.check().expect("recovered FTL is consistent");
        Ok(())
    }

    /// Reads a checkpoint's parts into the map; false if it is incomplete or a part is damaged.
    fn load_checkpoint(&mut self, seq: u64, group: &[(u64, u32, u32)]) -> Result<bool, FtlError> {
        let mut page = vec![0u8; self.unit_bytes];
        // A part GC copied may be on flash twice (the copy and its not yet erased source): both
        // hold the same bytes, and either readable one will do.
        let mut seen = std::collections::BTreeSet::new();
        let mut parts_total = None;
        for &(_, part, loc) in group {
            if seen.contains(&part) {
                continue;
            }
            // A part whose payload fails its checksum is passed over like an unreadable one.
            let mut oob = [0u8; RECORD_BYTES];
            match self.fml.read(0, Vpa(loc), &mut page, &mut oob) {
                Ok((_, Content::Bytes)) => {}
                _ => continue,
            }
            match Record::decode(&oob) {
                Ok(Some(r)) if content_crc(Content::Bytes, &page) == Some(r.payload_crc) => {}
                _ => continue,
            }
            let Some(h) = decode_ckpt(&page, seq, part, self.logical_units) else {
                continue;
            };
            if *parts_total.get_or_insert(h.parts) != h.parts {
                return Ok(false);
            }
            self.map.l2p[h.first as usize..h.first as usize + h.entries.len()]
                .copy_from_slice(&h.entries);
            seen.insert(part);
        }
        Ok(Some(seen.len() as u32) == parts_total)
    }

    /// Whole-structure check (tests, debug builds, fsck): no two logical pages share a unit,
    /// and exactly the units the FTL references are valid in the FML.
    pub fn check(&self) -> Result<(), String> {
        self.fml.check()?;
        let mut taken = vec![0u64; self.map.total_units.div_ceil(64)];
        let mut referenced = 0u64;
        for (lpn, &v) in self.map.l2p.iter().enumerate() {
            if v >= LOST {
                continue;
            }
            referenced += 1;
            let (word, bit) = (v as usize / 64, 1u64 << (v % 64));
            if taken[word] & bit != 0 {
                let first = self.map.l2p.iter().position(|&o| o == v).unwrap_or(lpn);
                return Err(format!("lpns {first} and {lpn} both map to unit {v}"));
            }
            taken[word] |= bit;
            if !self.fml.is_valid(Vpa(v)) {
                return Err(format!(
                    "lpn {lpn} maps to unit {v}, which the FML holds invalid"
                ));
            }
        }
        referenced += self.map.gtd.iter().filter(|&&g| g != UNMAPPED).count() as u64;
        referenced += self.map.ckpt.len() as u64;
        let valid: u64 = self.fml.blocks().iter().map(|b| b.valid as u64).sum();
        if valid != referenced {
            return Err(format!(
                "{valid} valid units in the FML, {referenced} referenced by the FTL"
            ));
        }
        Ok(())
    }
}

/// Checkpoint part header: magic, version, seq, part, parts, logical units, first lpn, count.
const CKPT_HEADER: usize = 4 + 4 + 8 + 4 + 4 + 4 + 4 + 4;
const CKPT_MAGIC: &[u8; 4] = b"FTLC";
const CKPT_VERSION: u32 = 1;

fn encode_ckpt(
    page: &mut [u8],
    seq: u64,
    part: u32,
    parts: u32,
    logical: u32,
    first: u32,
    entries: &[u32],
) {
    page.fill(0);
    page[0..4].copy_from_slice(CKPT_MAGIC);
    page[4..8].copy_from_slice(&CKPT_VERSION.to_le_bytes());
    page[8..16].copy_from_slice(&seq.to_le_bytes());
    page[16..20].copy_from_slice(&part.to_le_bytes());
    page[20..24].copy_from_slice(&parts.to_le_bytes());
    page[24..28].copy_from_slice(&logical.to_le_bytes());
    page[28..32].copy_from_slice(&first.to_le_bytes());
    page[32..36].copy_from_slice(&(entries.len() as u32).to_le_bytes());
    for (i, e) in entries.iter().enumerate() {
        page[CKPT_HEADER + 4 * i..CKPT_HEADER + 4 * i + 4].copy_from_slice(&e.to_le_bytes());
    }
    let end = CKPT_HEADER + 4 * entries.len();
    let crc = crc32c::crc32c(&page[..end]);
    page[end..end + 4].copy_from_slice(&crc.to_le_bytes());
}

struct CkptPart {
    parts: u32,
    first: u32,
    entries: Vec<u32>,
}

fn decode_ckpt(page: &[u8], seq: u64, part: u32, logical: u32) -> Option<CkptPart> {
    let u32_at = |o: usize| le::u32_at(page, o).ok();
    if page.get(0..4) != Some(CKPT_MAGIC.as_slice()) || u32_at(4)? != CKPT_VERSION {
        return None;
    }
    let count = u32_at(32)? as usize;
    let end = CKPT_HEADER + 4 * count;
    if end + 4 > page.len() || crc32c::crc32c(&page[..end]) != u32_at(end)? {
        return None;
    }
    let (s, p, parts, l, first) = (
        le::u64_at(page, 8).ok()?,
        u32_at(16)?,
        u32_at(20)?,
        u32_at(24)?,
        u32_at(28)?,
    );
    if s != seq || p != part || l != logical || first as usize + count > logical as usize {
        return None;
    }
    Some(CkptPart {
        parts,
        first,
        entries: (0..count)
            .map(|i| u32_at(CKPT_HEADER + 4 * i))
            .collect::<Option<Vec<u32>>>()?,
    })
}

/// The (lpn, first sector, end sector) pieces of a byte range, one per unit it touches.
struct Pieces {
    spu: u64,
    first: u64,
    end: u64,
    lpn: u64,
    last: u64,
}

impl Iterator for Pieces {
    type Item = (u32, u32, u32);
    fn next(&mut self) -> Option<(u32, u32, u32)> {
        if self.lpn > self.last {
            return None;
        }
        let lpn = self.lpn;
        self.lpn += 1;
        let base = lpn * self.spu;
        let s0 = self.first.max(base) - base;
        let s1 = self.end.min(base + self.spu) - base;
        Some((lpn as u32, s0 as u32, s1 as u32))
    }
}
