//! Opening an FTL: sizing the logical space, then rebuilding the map from the newest complete
//! checkpoint and rolling forward what was written after it (docs/FORMAT.md, "Recovery").

use flash::gang::Vpa;
use flash::{Content, Flash, Nanos};
use fml::buffer::WriteBuffer;
use fml::Fml;
use serde::Serialize;

use std::collections::{BTreeMap, BinaryHeap};

use flash::{DeviceConfigError, FlashError, PayloadMode};
use fml::FmlError;
use rustc_hash::FxHashMap;

use crate::checkpoint::{decode_ckpt, is_version_1, CkptPart};
use crate::dftl::Cmt;
use crate::map::{Map, Owners};
use crate::oob::{content_crc, packed_record_bytes, Kind, Record, MAX_SLOTS, RECORD_BYTES};
use crate::{
    Ftl, FtlConfig, FtlConfigError, FtlError, FtlStats, Mapping, DATA_STREAM, LOST, SECTOR_BYTES,
    UNMAPPED,
};

/// Logical pages per write unit that `ftl.mapping_unit_bytes` asks for (1 when it is 0 or the
/// write unit), checked against the write unit and the OOB area their record must fit.
fn slots_per_unit(config: &FtlConfig, wu_bytes: usize, oob_bytes: u32) -> Result<u32, FtlError> {
    let m = config.mapping_unit_bytes;
    if m == 0 || m == wu_bytes as u64 {
        return Ok(1);
    }
    let bad = |why| FtlConfigError::MappingUnit {
        mapping_unit_bytes: m,
        write_unit_bytes: wu_bytes,
        why,
    };
    if !m.is_multiple_of(SECTOR_BYTES) {
        return Err(bad("not a multiple of 512-byte sectors").into());
    }
    if m > wu_bytes as u64 || !(wu_bytes as u64).is_multiple_of(m) {
        return Err(bad("it must divide the write unit").into());
    }
    let slots = (wu_bytes as u64 / m) as usize;
    if slots > MAX_SLOTS {
        return Err(bad("more than 8 logical pages per write unit").into());
    }
    let record_bytes = packed_record_bytes(slots);
    if record_bytes > oob_bytes as usize {
        return Err(FtlConfigError::SlotsOverOob {
            mapping_unit_bytes: m,
            slots,
            record_bytes,
            oob_bytes: oob_bytes as usize,
        }
        .into());
    }
    Ok(slots as u32)
}

/// What recovery found and did.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub struct Recovery {
    /// OOB records read: each programmed block's last one, then those of the units written
    /// since the checkpoint (and one more per block reached, where the walk stopped).
    pub units_scanned: u64,
    /// Of those, units without a record this build reads: unreadable, damaged, or foreign.
    pub units_unreadable: u64,
    /// Checkpoint units read whole (each part once, unless a newer checkpoint cut short by a
    /// power cut covered its range first).
    pub checkpoint_parts_read: u64,
    /// The sequence number of the checkpoint loaded as the base map; `None` without one.
    pub checkpoint_seq: Option<u64>,
    /// Logical pages whose newest unit was written after that checkpoint and rolled forward.
    pub rolled_forward: u64,
    /// Virtual time at which recovery's last read completed (every read is issued at time 0;
    /// the device queues them per die).
    pub scan_done_ns: Nanos,
    /// Whether the device's newest unit, a data unit or translation page whose record reads
    /// back whole, failed its payload checksum and was passed over as the program a power cut
    /// tore (docs/FORMAT.md, "Recovery"); a checkpoint then made that durable.
    pub newest_unit_torn: bool,
}

impl<F: Flash> Ftl<F> {
    /// Opens the FTL over a device: blank, or holding an earlier FTL's data (recovered).
    pub fn open(flash: F, config: FtlConfig) -> Result<Self, FtlError> {
        Self::open_or_return(flash, config).map_err(|(e, _)| e)
    }

    /// As [`Ftl::open`], giving the device back when recovery fails once it has been read
    /// (a power cut during the checkpoint an open may write: the caller restores power and
    /// opens again). `None` when the failure came before (a bad configuration).
    pub fn open_or_return(flash: F, config: FtlConfig) -> Result<Self, (FtlError, Option<F>)> {
        Self::open_inner(flash, config, true)
    }

    /// A deliberately broken recovery that loads the checkpoint but skips the roll-forward, so
    /// everything written after the checkpoint is lost. Only for proving that a torture harness
    /// catches a broken recovery; never use it to open a real device.
    #[doc(hidden)]
    pub fn open_broken_without_roll_forward(flash: F, config: FtlConfig) -> Result<Self, FtlError> {
        Self::open_inner(flash, config, false).map_err(|(e, _)| e)
    }

    fn open_inner(
        flash: F,
        config: FtlConfig,
        roll_forward: bool,
    ) -> Result<Self, (FtlError, Option<F>)> {
        let mut ftl = Self::build(flash, config).map_err(|e| (e, None))?;
        if let Err(e) = ftl.recover(roll_forward) {
            return Err((e, Some(ftl.crash())));
        }
        if ftl.recovery.newest_unit_torn {
            // The unit passed over must stay passed over once newer units are written (it
            // would no longer be the newest, and its record would win): a checkpoint puts it
            // behind the walk of every later recovery.
            let t = ftl.recovery.scan_done_ns;
            if let Err(e) = ftl.checkpoint(t) {
                return Err((e, Some(ftl.crash())));
            }
        }
        Ok(ftl)
    }

    /// The FTL over a device whose FML is open, before recovery.
    fn build(flash: F, config: FtlConfig) -> Result<Self, FtlError> {
        config.validate()?;
        let wu_bytes = flash.config().write_unit_bytes() as usize;
        let slots = slots_per_unit(&config, wu_bytes, flash.config().geometry.oob_size_bytes)?;
        let unit_bytes = wu_bytes / slots as usize;
        let destage_depth = {
            let g = &flash.config().geometry;
            let bytes = match config.backpressure_bytes {
                0 => {
                    g.channels as u64
                        * g.dies_per_channel as u64
                        * g.planes_per_die as u64
                        * g.page_size_bytes as u64
                }
                b => b,
            };
            ((bytes / unit_bytes as u64) as usize).max(1)
        };
        let sectors_per_unit = (unit_bytes as u64 / SECTOR_BYTES) as u32;
        if sectors_per_unit > 64 {
            return Err(FtlConfigError::UnitTooLarge { unit_bytes }.into());
        }
        let record_bytes = if slots == 1 {
            RECORD_BYTES
        } else {
            packed_record_bytes(slots as usize)
        };
        let timing = flash.config().payload == PayloadMode::Timing;
        let fml = Fml::open(flash, config.fml, 2, record_bytes)?;
        if timing && fml.blocks().iter().any(|b| b.next > 0) {
            return Err(FlashError::Config(DeviceConfigError::TimingOnly {
                what: "this device holds data, and without OOB records it cannot be recovered"
                    .into(),
            })
            .into());
        }
        // The logical space is fixed by the device as it left the factory, not by the blocks
        // good today: a grown bad block must not shrink it, or a checkpoint (which records its
        // size) would no longer load and pages at its top would be dropped at recovery.
        let physical = fml.factory_good_units();
        let logical = ((physical as f64 * (1.0 - config.overprovision_percent / 100.0)) as u64)
            .min(fml.capacity_units_as_built())
            * slots as u64;
        if logical == 0 {
            return Err(FtlConfigError::NoLogicalSpace.into());
        }
        let superblocks = fml.layout().superblocks as usize;
        let total_units = superblocks * fml.layout().units_per_superblock as usize;
        if (total_units as u64 * slots as u64) >= LOST as u64 {
            return Err(FtlConfigError::MappingUnit {
                mapping_unit_bytes: config.mapping_unit_bytes,
                write_unit_bytes: wu_bytes,
                why: "the device has too many slots for 32-bit locations",
            }
            .into());
        }
        let logical_units = logical as u32;
        let entries_per_tpage = (wu_bytes / 4) as u32;
        let tpages = logical_units.div_ceil(entries_per_tpage);
        let cmt = (config.mapping == Mapping::Dftl).then(|| {
            if config.dftl_hit_percent > 0.0 {
                Cmt::with_hit_rate(config.dftl_hit_percent / 100.0, entries_per_tpage)
            } else {
                Cmt::new((config.dftl_cache_bytes / 8) as usize, entries_per_tpage)
            }
        });
        let ftl = Ftl {
            map: Map {
                l2p: vec![UNMAPPED; logical_units as usize],
                slots,
                live: if slots > 1 {
                    vec![0; total_units]
                } else {
                    Vec::new()
                },
                block_slots: vec![0; if slots > 1 { superblocks } else { 0 }],
                block_units: vec![0; if slots > 1 { superblocks } else { 0 }],
                units_per_superblock: fml.layout().units_per_superblock,
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
                owners: timing.then(|| Owners::new(total_units, slots)),
            },
            buf: WriteBuffer::new((config.buffer_bytes / unit_bytes as u64) as usize),
            fml,
            config,
            unit_bytes,
            wu_bytes,
            record_bytes,
            sectors_per_unit,
            logical_units,
            stats: FtlStats::default(),
            scratch: vec![0; wu_bytes],
            pack: Vec::new(),
            recovery: Recovery::default(),
            evacuating: None,
            inflight: std::collections::BinaryHeap::new(),
            cache_free: 0,
            hot: Default::default(),
            hot_window_end: 0,
            cold: Default::default(),
            destage_depth,
        };
        Ok(ftl)
    }

    /// Rebuilds the map from the flash, reading only what was written since the newest
    /// complete checkpoint (docs/FORMAT.md, "Recovery"). Every unit's record carries a sequence
    /// number that rises with the unit's offset in its block (GC copies take fresh ones), so
    /// recovery walks the device newest unit first, block heads merged in sequence order:
    /// 1. read each programmed block's last record (one read per block);
    /// 2. take units newest first, noting data units and translation pages (the newest per key
    ///    wins) and checkpoint parts (loaded into the map as they are read), until every unit
    ///    at or after some checkpoint has been seen and that checkpoint is complete;
    /// 3. keep a base entry only if its unit lies in the part of its block the walk did not
    ///    reach (written before the checkpoint, so the block was not erased since), then roll
    ///    forward what the walk found.
    ///
    /// The work is one read per block plus the units written since the checkpoint and the
    /// checkpoint's own parts, not the data on the device.
    #[cfg_attr(
        debug_assertions,
        expect(
            clippy::expect_used,
            reason = "debug builds assert the recovered FTL's invariants (docs/DESIGN.md: expensive checks in debug builds)"
        )
    )]
    fn recover(&mut self, roll_forward: bool) -> Result<(), FtlError> {
        let mut w = Walk::new(self.fml.layout().superblocks as usize);
        for id in 0..self.fml.layout().superblocks {
            let b = self.fml.blocks()[id as usize];
            if b.state != fml::BlockState::Bad && b.next > 0 {
                self.push_head(&mut w, id, b.next)?;
            }
        }
        if w.current == 0 && w.old > 0 {
            return Err(FtlError::Corrupted(format!(
                "{} OOB records of version 1 and none this build reads: the image was \
                 written before payload checksums (record version 2); format it again",
                w.old
            )));
        }
        if w.rec.units_scanned == 0 {
            self.recovery = w.rec;
            return Ok(());
        }
        let chosen = self.walk_to_checkpoint(&mut w)?;
        #[cfg(feature = "mutants")]
        if chosen.is_some() && fml::mutants::on(fml::mutants::Mutant::FtlForgetsTrim) {
            self.mutant_walk_past_checkpoint(&mut w)?;
        }
        if let Some((seq, c)) = &chosen {
            self.reload_parts(&mut w, *seq, c)?;
        } else {
            self.map.l2p.fill(UNMAPPED);
            self.map.gtd.fill(UNMAPPED);
        }
        w.rec.rolled_forward = self.settle(&w, roll_forward)?;
        if let Some((seq, c)) = chosen {
            for &u in c.locs.values() {
                self.fml
                    .mark_valid(Vpa(u))
                    .map_err(|e| FtlError::Corrupted(e.to_string()))?;
            }
            self.map.ckpt = c.locs.into_values().collect();
            self.map.ckpt_seq = seq;
            w.rec.checkpoint_seq = Some(seq);
        }
        self.map.next_seq = w.max_seq + 1;
        w.rec.scan_done_ns = w.done;
        self.recovery = w.rec;
        #[cfg(debug_assertions)]
        self.check().expect("recovered FTL is consistent");
        Ok(())
    }

    /// The record of a unit, `None` if it holds none this build reads (erased, torn, damaged,
    /// foreign). Only a device failure other than an unreadable page is an error.
    fn unit_record(&mut self, w: &mut Walk, v: Vpa) -> Result<Option<Record>, FtlError> {
        let mut oob = [0u8; packed_record_bytes(MAX_SLOTS)];
        let oob = &mut oob[..self.record_bytes];
        w.rec.units_scanned += 1;
        // The whole unit, not only the page holding the record: a multi-page program torn
        // part-way leaves the record whole and a later page unreadable or erased.
        match self.fml.read_record_whole(0, v, oob) {
            Ok((t, _)) => w.done = w.done.max(t),
            Err(FmlError::Flash(FlashError::Uncorrectable { .. })) => {
                w.rec.units_unreadable += 1;
                return Ok(None);
            }
            Err(e) => return Err(e.into()),
        }
        w.old += Record::is_version_1(oob) as u64;
        if self.map.slots == 1 && Record::is_packed(oob) {
            // Only the record's start was read (a whole-unit FTL reads 20 bytes): enough to
            // refuse an image written with sub-page mapping rather than pass its data over.
            return Err(FtlError::Corrupted(format!(
                "unit {} holds data mapped in several logical pages per write unit; this FTL \
                 maps whole units (ftl.mapping_unit_bytes must be what the image was written \
                 with)",
                v.0
            )));
        }
        match Record::decode(oob) {
            Ok(Some(r)) => {
                w.current += 1;
                w.max_seq = w.max_seq.max(r.seq);
                Ok(Some(r))
            }
            _ => {
                w.rec.units_unreadable += 1;
                Ok(None)
            }
        }
    }

    /// Finds block `id`'s newest readable unit below offset `below` and makes it the block's
    /// head in the walk; units passed over (unreadable) count as visited.
    fn push_head(&mut self, w: &mut Walk, id: u32, below: u32) -> Result<(), FtlError> {
        for off in (0..below).rev() {
            let v = self.fml.layout().vpa(id, off);
            if let Some(r) = self.unit_record(w, v)? {
                w.heads[id as usize] = Some(r);
                w.frontier[id as usize] = off + 1;
                w.heap.push((r.seq, id, off));
                return Ok(());
            }
        }
        w.frontier[id as usize] = 0;
        Ok(())
    }

    /// Takes units newest first until the newest complete checkpoint is behind the walk;
    /// `None` if there is none (then every unit was taken).
    fn walk_to_checkpoint(&mut self, w: &mut Walk) -> Result<Option<(u64, Candidate)>, FtlError> {
        let logical = self.logical_units;
        loop {
            // A checkpoint is judged once every unit at or after its sequence number is taken.
            let top = w.heap.peek().map(|h| h.0);
            while let Some((&seq, _)) = w.candidates.last_key_value() {
                if top.is_some_and(|t| t >= seq) {
                    break;
                }
                if let Some((seq, c)) = w.candidates.pop_last() {
                    if c.complete() {
                        return Ok(Some((seq, c)));
                    }
                }
            }
            let Some((_, id, off)) = w.heap.pop() else {
                return Ok(None);
            };
            let Some(r) = w.heads[id as usize].take() else {
                continue;
            };
            w.frontier[id as usize] = off;
            let v = self.fml.layout().vpa(id, off).0;
            if !w.whole_taken && self.torn_on_top(w, v, &r)? {
                w.rec.newest_unit_torn = true;
                self.push_head(w, id, off)?;
                continue;
            }
            let slots = self.map.slots;
            match r.kind {
                Kind::Data | Kind::Packed
                    if (r.kind == Kind::Packed) != (slots > 1)
                        || (slots > 1 && r.slots.n as u32 != slots) =>
                {
                    return Err(FtlError::Corrupted(format!(
                        "unit {v} holds data mapped in {} logical pages per write unit; this \
                         FTL maps {slots} (ftl.mapping_unit_bytes must be what the image was \
                         written with)",
                        r.slots.n.max(1)
                    )));
                }
                Kind::Data if r.key < logical => {
                    w.newer.entry(r.key).or_insert(v);
                }
                Kind::Packed => {
                    for (i, &key) in r.slots.keys[..slots as usize].iter().enumerate() {
                        if key < logical {
                            w.newer.entry(key).or_insert(v * slots + i as u32);
                        }
                    }
                }
                Kind::Map if (r.key as usize) < self.map.gtd.len() => {
                    w.map_newer.entry(r.key).or_insert(v);
                }
                Kind::Checkpoint => self.take_part(w, v, &r)?,
                _ => {}
            }
            self.push_head(w, id, off)?;
        }
    }

    /// Mutant [`fml::mutants::Mutant::FtlForgetsTrim`]: the walk goes on past the checkpoint
    /// and takes the older data units and translation pages too (the newest per key wins), so
    /// they are rolled forward over the checkpoint's map.
    #[cfg(feature = "mutants")]
    fn mutant_walk_past_checkpoint(&mut self, w: &mut Walk) -> Result<(), FtlError> {
        let logical = self.logical_units;
        while let Some((_, id, off)) = w.heap.pop() {
            let Some(r) = w.heads[id as usize].take() else {
                continue;
            };
            w.frontier[id as usize] = off;
            let v = self.fml.layout().vpa(id, off).0;
            match r.kind {
                Kind::Data if r.key < logical && self.map.slots == 1 => {
                    w.newer.entry(r.key).or_insert(v);
                }
                Kind::Map if (r.key as usize) < self.map.gtd.len() => {
                    w.map_newer.entry(r.key).or_insert(v);
                }
                _ => {}
            }
            self.push_head(w, id, off)?;
        }
        Ok(())
    }

    /// Whether a data unit or translation page the walk takes before any whole one is a torn
    /// program: its payload fails the checksum its record holds. A torn program may leave its
    /// record whole over a wrong payload (docs/RELIABILITY.md, finding 38), and rolled forward
    /// it would fail every read. Only the newest such unit can be one: every unit is
    /// programmed in the order of its sequence number, taken just before its program (GC's
    /// copies too), and what an open writes after passing one over (a checkpoint) holds no
    /// data unit unless the open completes, whose checkpoint then ends every later walk before
    /// it. So the walk checks units from the top until the first whole one; a checkpoint part
    /// is checked when it is read. Any other payload that fails its checksum is damage, which
    /// the read reports.
    fn torn_on_top(&mut self, w: &mut Walk, v: u32, r: &Record) -> Result<bool, FtlError> {
        if !matches!(r.kind, Kind::Data | Kind::Packed | Kind::Map) {
            return Ok(false);
        }
        let whole = match self.read_whole(v, r)? {
            Some((t, _, whole)) => {
                w.done = w.done.max(t);
                whole
            }
            None => false,
        };
        w.whole_taken = whole;
        Ok(!whole)
    }

    /// Reads unit `v` whole into the scratch buffer: when it completed, what it holds, and
    /// whether its payload matches the checksum in its record `r`; `None` when it reads as
    /// uncorrectable. Any other device failure is an error.
    fn read_whole(
        &mut self,
        v: u32,
        r: &Record,
    ) -> Result<Option<(Nanos, Content, bool)>, FtlError> {
        let mut oob = [0u8; packed_record_bytes(MAX_SLOTS)];
        let oob = &mut oob[..self.record_bytes];
        match self.fml.read(0, Vpa(v), &mut self.scratch, oob) {
            Ok((t, content)) => {
                let whole = content_crc(content, &self.scratch) == Some(r.payload_crc);
                Ok(Some((t, content, whole)))
            }
            Err(FmlError::Flash(FlashError::Uncorrectable { .. })) => Ok(None),
            Err(e) => Err(e.into()),
        }
    }

    /// Reads a checkpoint part the walk came to: notes where it is, and loads its entries into
    /// the map unless a part of a newer checkpoint already covers them. A part whose payload
    /// fails its checksum is passed over like an unreadable one.
    fn take_part(&mut self, w: &mut Walk, v: u32, r: &Record) -> Result<(), FtlError> {
        w.rec.checkpoint_parts_read += 1;
        let Some(h) = self.read_part(w, v, r)? else {
            return Ok(());
        };
        let c = w.candidates.entry(h.seq).or_default();
        if *c.parts.get_or_insert(h.parts) != h.parts {
            c.inconsistent = true;
        }
        // A part GC copied may be on flash twice (the copy and its not yet erased source):
        // both hold the same bytes, and the first one found (the newer) serves.
        c.locs.entry(h.part).or_insert(v);
        let applied = w.applied.entry(h.part).or_insert(0);
        if *applied < h.seq {
            *applied = h.seq;
            self.apply_part(&h);
        }
        Ok(())
    }

    /// A checkpoint part's decoded contents, if the unit reads back whole and checks out.
    fn read_part(
        &mut self,
        w: &mut Walk,
        v: u32,
        r: &Record,
    ) -> Result<Option<CkptPart>, FtlError> {
        let Some((t, Content::Bytes, true)) = self.read_whole(v, r)? else {
            return Ok(None);
        };
        w.done = w.done.max(t);
        if is_version_1(&self.scratch) {
            return Err(FtlError::Corrupted(format!(
                "unit {v} holds a checkpoint of format version 1, written before bounded \
                 recovery (version 2 adds the translation directory); format the image again"
            )));
        }
        Ok(decode_ckpt(
            &self.scratch,
            self.logical_units,
            self.ckpt_entries(),
        ))
    }

    /// Puts a checkpoint part's entries into the map: logical pages, then (past them) the
    /// translation directory.
    fn apply_part(&mut self, h: &CkptPart) {
        let logical = self.logical_units as usize;
        for (i, &e) in h.entries.iter().enumerate() {
            let at = h.first as usize + i;
            if at < logical {
                self.map.l2p[at] = e;
            } else {
                self.map.gtd[at - logical] = e;
            }
        }
    }

    /// Loads again the parts of the chosen checkpoint whose ranges a newer, incomplete one
    /// (a checkpoint cut short by a power cut) overwrote during the walk.
    fn reload_parts(&mut self, w: &mut Walk, seq: u64, c: &Candidate) -> Result<(), FtlError> {
        for (&part, &v) in &c.locs {
            if w.applied.get(&part) == Some(&seq) {
                continue;
            }
            w.rec.checkpoint_parts_read += 1;
            let mut page = std::mem::take(&mut self.scratch);
            let mut oob = [0u8; packed_record_bytes(MAX_SLOTS)];
            let oob = &mut oob[..self.record_bytes];
            let read = self.fml.read(0, Vpa(v), &mut page, oob);
            let h = match read {
                Ok((t, Content::Bytes)) => {
                    w.done = w.done.max(t);
                    decode_ckpt(&page, self.logical_units, self.ckpt_entries())
                }
                _ => None,
            };
            self.scratch = page;
            match h {
                Some(h) if h.seq == seq && h.part == part => self.apply_part(&h),
                _ => {
                    return Err(FtlError::Corrupted(format!(
                        "checkpoint {seq} part {part} at unit {v} read back differently the \
                         second time"
                    )))
                }
            }
        }
        Ok(())
    }

    /// Keeps the base entries whose units the walk did not reach (written before the
    /// checkpoint into blocks not erased since), rolls forward what the walk found, and marks
    /// every referenced unit valid.
    fn settle(&mut self, w: &Walk, roll_forward: bool) -> Result<u64, FtlError> {
        let layout = *self.fml.layout();
        let slots = self.map.slots;
        let older = |v: u32| {
            let b = layout.superblock_of(Vpa(v)) as usize;
            w.frontier
                .get(b)
                .is_some_and(|&f| layout.offset_of(Vpa(v)) < f)
        };
        for e in self.map.l2p.iter_mut() {
            if *e != UNMAPPED && !older(*e / slots) {
                *e = UNMAPPED;
            }
        }
        for e in self.map.gtd.iter_mut() {
            if *e != UNMAPPED && !older(*e) {
                *e = UNMAPPED;
            }
        }
        let mut rolled = 0;
        if roll_forward {
            for (&lpn, &v) in &w.newer {
                self.map.l2p[lpn as usize] = v;
            }
            for (&tp, &v) in &w.map_newer {
                self.map.gtd[tp as usize] = v;
            }
            rolled = w.newer.len() as u64;
        }
        let corrupted = |e: fml::MarkValidError| FtlError::Corrupted(e.to_string());
        if slots == 1 {
            for &v in self.map.l2p.iter().chain(self.map.gtd.iter()) {
                if v != UNMAPPED {
                    self.fml.mark_valid(Vpa(v)).map_err(corrupted)?;
                }
            }
            return Ok(rolled);
        }
        // Sub-page mapping: a unit is valid once, however many of its slots are live.
        for lpn in 0..self.map.l2p.len() {
            let loc = self.map.l2p[lpn];
            if loc == UNMAPPED {
                continue;
            }
            let v = Vpa(loc / slots);
            let Some(&live) = self.map.live.get(v.0 as usize) else {
                return Err(FtlError::Corrupted(format!(
                    "a logical page maps to location {loc}, beyond the device"
                )));
            };
            if live == 0 {
                self.fml.mark_valid(v).map_err(corrupted)?;
            }
            self.map.set_live(v, live + 1);
            if live as u32 + 1 > slots {
                return Err(FtlError::Corrupted(format!(
                    "unit {} is named by more logical pages than it has slots",
                    loc / slots
                )));
            }
        }
        for &v in &self.map.gtd {
            if v != UNMAPPED {
                self.fml.mark_valid(Vpa(v)).map_err(corrupted)?;
            }
        }
        Ok(rolled)
    }
}

/// Recovery's walk over the device, newest unit first.
struct Walk {
    rec: Recovery,
    /// Block heads: (sequence number, block, offset), the newest on top.
    heap: BinaryHeap<(u64, u32, u32)>,
    /// Each block's head record.
    heads: Vec<Option<Record>>,
    /// Per block: the units below this offset were not reached by the walk (all older than
    /// where it stopped).
    frontier: Vec<u32>,
    /// Checkpoints seen, by number.
    candidates: BTreeMap<u64, Candidate>,
    /// Per checkpoint part: the checkpoint whose entries are in the map now.
    applied: FxHashMap<u32, u64>,
    /// The newest data unit of each logical page taken, and of each translation page.
    newer: FxHashMap<u32, u32>,
    map_newer: FxHashMap<u32, u32>,
    max_seq: u64,
    /// Whether the walk has taken a data unit or translation page whose payload is whole:
    /// nothing older can be a torn program.
    whole_taken: bool,
    /// Records this build reads, and whole records of version 1.
    current: u64,
    old: u64,
    done: Nanos,
}

impl Walk {
    fn new(blocks: usize) -> Self {
        Walk {
            rec: Recovery::default(),
            heap: BinaryHeap::new(),
            heads: vec![None; blocks],
            frontier: vec![0; blocks],
            candidates: BTreeMap::new(),
            applied: FxHashMap::default(),
            newer: FxHashMap::default(),
            map_newer: FxHashMap::default(),
            max_seq: 0,
            whole_taken: false,
            current: 0,
            old: 0,
            done: 0,
        }
    }
}

/// A checkpoint the walk found parts of.
#[derive(Default)]
struct Candidate {
    /// Parts it has, as its parts say.
    parts: Option<u32>,
    /// Where each part found is.
    locs: BTreeMap<u32, u32>,
    /// Its parts disagree on how many there are.
    inconsistent: bool,
}

impl Candidate {
    fn complete(&self) -> bool {
        !self.inconsistent && self.parts == Some(self.locs.len() as u32)
    }
}
