//! Opening an FTL: sizing the logical space, then rebuilding the map from the newest complete
//! checkpoint and rolling forward what was written after it (docs/FORMAT.md, "Recovery").

use flash::gang::Vpa;
use flash::{Content, Flash, Nanos};
use fml::buffer::WriteBuffer;
use fml::Fml;
use serde::Serialize;

use crate::checkpoint::decode_ckpt;
use crate::dftl::Cmt;
use crate::map::Map;
use crate::oob::{content_crc, Kind, Record, RECORD_BYTES};
use crate::{
    Ftl, FtlConfig, FtlConfigError, FtlError, FtlStats, Mapping, DATA_STREAM, SECTOR_BYTES,
    UNMAPPED,
};

/// What recovery found and did.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub struct Recovery {
    /// Programmed units (in blocks not bad) whose OOB records the first pass read.
    pub units_scanned: u64,
    /// Of those, units without a record this build reads: unreadable, damaged, or foreign.
    pub units_unreadable: u64,
    /// The sequence number of the checkpoint loaded as the base map; `None` without one.
    pub checkpoint_seq: Option<u64>,
    /// Logical pages whose newest unit was written after that checkpoint and rolled forward.
    pub rolled_forward: u64,
    /// Virtual time at which the last pass over the OOB records completed.
    pub scan_done_ns: Nanos,
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
        config.validate()?;
        let unit_bytes = flash.config().write_unit_bytes() as usize;
        let sectors_per_unit = (unit_bytes as u64 / SECTOR_BYTES) as u32;
        if sectors_per_unit > 64 {
            return Err(FtlConfigError::UnitTooLarge { unit_bytes }.into());
        }
        let fml = Fml::open(flash, config.fml, 2, RECORD_BYTES)?;
        // The logical space is fixed by the device as it left the factory, not by the blocks
        // good today: a grown bad block must not shrink it, or a checkpoint (which records its
        // size) would no longer load and pages at its top would be dropped at recovery.
        let physical = fml.factory_good_units();
        let logical = ((physical as f64 * (1.0 - config.overprovision_percent / 100.0)) as u64)
            .min(fml.capacity_units_as_built());
        if logical == 0 {
            return Err(FtlConfigError::NoLogicalSpace.into());
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
                self.fml
                    .mark_valid(Vpa(v))
                    .map_err(|e| FtlError::Corrupted(e.to_string()))?;
            }
        }
        for (tp, &(_, loc)) in map_best.iter().enumerate() {
            if loc != UNMAPPED {
                self.map.gtd[tp] = loc;
                self.fml
                    .mark_valid(Vpa(loc))
                    .map_err(|e| FtlError::Corrupted(e.to_string()))?;
            }
        }
        if let Some((seq, units)) = base {
            for &u in &units {
                self.fml
                    .mark_valid(Vpa(u))
                    .map_err(|e| FtlError::Corrupted(e.to_string()))?;
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
}
