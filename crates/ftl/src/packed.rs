//! Sub-page mapping (`ftl.mapping_unit_bytes` below the write unit): a logical page is a slot
//! of a write unit. The map names a *location*, `unit * slots + slot` (with one slot per unit a
//! location is the unit's address, so the default mapping is unchanged). The buffer gathers
//! as many logical pages as a unit has slots and programs them together (stock MQSim
//! does not: it maps one logical page per physical page with a sector bitmap,
//! docs/VALIDATION.md); the unit's OOB record ([`Kind::Packed`]) names each
//! slot's logical page, and in fingerprint mode holds each slot's fingerprint, since a page
//! stores only one. A unit stays valid in the FML while any of its slots is live
//! ([`Map::live`]). GC moves live slots, not units: when the victim's next valid unit is only
//! partly live, the FTL reads it and the following partly live units of the victim and programs
//! their live slots together into one unit of the GC stream ([`Ftl::gc_step`]); a wholly live
//! unit is copied by the FML as it is, and a copy's record names only the slots still live.

use flash::fingerprint::mix;
use flash::gang::Vpa;
use flash::{content_crc, Content, Flash, FlashError, Nanos, Payload};
use fml::buffer::{Entry, Fill};
use fml::{FmlError, GcStep, NextGc};

use crate::map::Map;
use crate::oob::{packed_record_bytes, payload_crc, Kind, Record, Slots, EMPTY_SLOT, MAX_SLOTS};
use crate::{fold, Ftl, FtlError, DATA_STREAM, LOST};

impl Map {
    /// Sets unit `v`'s count of live slots, keeping its super-block's totals.
    pub(crate) fn set_live(&mut self, v: Vpa, n: u8) {
        let old = std::mem::replace(&mut self.live[v.0 as usize], n);
        let b = (v.0 / self.units_per_superblock) as usize;
        self.block_slots[b] = self.block_slots[b] + n as u32 - old as u32;
        self.block_units[b] = self.block_units[b] + (n > 0) as u32 - (old > 0) as u32;
    }

    /// The write unit a location lies in.
    pub(crate) fn unit_of(&self, loc: u32) -> Vpa {
        Vpa(loc / self.slots)
    }
    /// The location of `slot` of unit `v`.
    pub(crate) fn loc(&self, v: Vpa, slot: u32) -> u32 {
        v.0 * self.slots + slot
    }

    /// A packed record with its dead slots emptied: slot `i` of unit `v` is live only while
    /// the map still names it for the slot's page.
    pub(crate) fn live_slots(&self, v: Vpa, mut r: Record) -> Record {
        for i in 0..r.slots.n as usize {
            let key = r.slots.keys[i];
            let here = self.loc(v, i as u32);
            if self.l2p.get(key as usize) != Some(&here) {
                r.slots.keys[i] = EMPTY_SLOT;
                r.slots.fps[i] = 0;
            }
        }
        r
    }

    /// GC copied packed unit `from` to `to`: its live slots move with it.
    pub(crate) fn relocate_slots(&mut self, from: Vpa, to: Vpa, r: &Record) {
        for i in 0..r.slots.n as u32 {
            let key = r.slots.keys[i as usize];
            let here = self.loc(from, i);
            if key == EMPTY_SLOT || self.l2p.get(key as usize) != Some(&here) {
                continue;
            }
            self.l2p[key as usize] = self.loc(to, i);
            if let Some(cmt) = self.cmt.as_mut() {
                if !cmt.mark_dirty_if_cached(key) {
                    self.moved.push(key);
                }
            }
        }
        let live = self.live[from.0 as usize];
        self.set_live(from, 0);
        self.set_live(to, live);
    }

    /// GC could not read packed unit `from`: every page it holds is lost.
    pub(crate) fn lose_slots(&mut self, from: Vpa) {
        self.set_live(from, 0);
        let slots = self.slots;
        for e in self.l2p.iter_mut() {
            if *e < LOST && *e / slots == from.0 {
                *e = LOST;
            }
        }
    }
}

/// The fingerprint a packed unit's page stores in fingerprint mode: one value standing for
/// every slot's fingerprint and page (the slots' own are in the OOB record).
fn unit_fingerprint(s: &Slots) -> u64 {
    (0..s.n as usize).fold(0, |x, i| {
        mix(x.rotate_left(7) ^ s.fps[i] ^ (s.keys[i] as u64).rotate_left(40))
    })
}

impl<F: Flash> Ftl<F> {
    /// Drops a logical page's reference to location `loc`; its unit becomes invalid once no
    /// slot of it is live.
    pub(crate) fn release(&mut self, loc: u32) {
        if self.map.slots == 1 {
            self.fml.invalidate(Vpa(loc));
            return;
        }
        let v = self.map.unit_of(loc);
        let live = self.map.live[v.0 as usize].saturating_sub(1);
        self.map.set_live(v, live);
        if live == 0 {
            self.fml.invalidate(v);
        }
    }

    /// Programs up to one unit's worth of the oldest buffered pages: one page per unit
    /// without sub-page mapping; with it, as many pages as a unit has slots (a page written in
    /// the other payload mode goes in a unit of its own). Returns when the last program
    /// completes and how many pages left the buffer; `None` if the buffer is empty.
    pub(crate) fn program_oldest(&mut self, at: Nanos) -> Result<Option<(Nanos, usize)>, FtlError> {
        let slots = self.map.slots as usize;
        let Some(first) = self.buf.pop_oldest() else {
            return Ok(None);
        };
        if slots == 1 {
            return Ok(Some((self.program_entry(at, first)?, 1)));
        }
        let bytes_mode = matches!(first.fill, Fill::Bytes(_));
        let mut group = vec![first];
        let mut other = None;
        while group.len() < slots {
            let Some(e) = self.buf.pop_oldest() else {
                break;
            };
            if matches!(e.fill, Fill::Bytes(_)) == bytes_mode {
                group.push(e);
            } else {
                other = Some(e);
                break;
            }
        }
        let n = group.len() + other.is_some() as usize;
        let mut done = self.program_group(at, group)?;
        if let Some(e) = other {
            done = done.max(self.program_group(at, vec![e])?);
        }
        Ok(Some((done, n)))
    }

    /// Programs buffered pages (at most one per slot, all of one payload mode) into one write
    /// unit, merging a partial page with its old contents first; unused slots are padding.
    pub(crate) fn program_group(
        &mut self,
        at: Nanos,
        group: Vec<Entry<u32>>,
    ) -> Result<Nanos, FtlError> {
        let mut t = self.foreground_gc(at)?;
        for e in &group {
            t = self.translate(t, e.key, true)?;
        }
        let k = self.map.slots as usize;
        let mu = self.unit_bytes;
        let full = self.full_mask();
        let bytes_mode = group
            .first()
            .is_some_and(|e| matches!(e.fill, Fill::Bytes(_)));
        let mut pack = std::mem::take(&mut self.pack);
        pack.resize(self.wu_bytes, 0);
        pack.fill(0);
        let mut slots = Slots::empty(k);
        let mut result = Ok(());
        for (i, e) in group.iter().enumerate() {
            match self.fill_slot(&mut t, e, full, &mut pack[i * mu..(i + 1) * mu]) {
                Ok(fp) => {
                    slots.keys[i] = e.key;
                    slots.fps[i] = fp;
                }
                Err(err) => {
                    result = Err(err);
                    break;
                }
            }
        }
        if let Err(err) = result {
            self.pack = pack;
            return Err(err);
        }
        let (payload, record) = packed_unit(self.map.take_seq(), bytes_mode, &pack, slots);
        let written = self.fml.write(t, DATA_STREAM, payload, &record.encode());
        self.pack = pack;
        let (vpa, done) = written?;
        self.map.wrote(vpa.0, &record);
        self.stats.data_units_written += 1;
        for (i, e) in group.into_iter().enumerate() {
            let old = self.map.l2p[e.key as usize];
            if old < LOST {
                self.release(old);
            }
            self.map.l2p[e.key as usize] = self.map.loc(vpa, i as u32);
            self.buf.recycle(e);
        }
        let live = slots.keys[..k]
            .iter()
            .filter(|&&key| key != EMPTY_SLOT)
            .count();
        self.map.set_live(vpa, live as u8);
        Ok(done)
    }

    /// One slot's contents: the buffered page, merged with its old contents if partial.
    /// Bytes go into `dst`; returns the slot's fingerprint (0 in bytes mode).
    fn fill_slot(
        &mut self,
        t: &mut Nanos,
        e: &Entry<u32>,
        full: u64,
        dst: &mut [u8],
    ) -> Result<u64, FtlError> {
        let old = self.map.l2p[e.key as usize];
        if e.mask != full && old == LOST {
            // The rest of the page is gone: merging would invent its bytes.
            return Err(FtlError::Lost { lpn: e.key });
        }
        match &e.fill {
            Fill::Bytes(b) => {
                dst.copy_from_slice(b);
                if e.mask != full && old < LOST {
                    self.stats.rmw_reads += 1;
                    let (done, content, base) = self.read_mapped(*t, e.key, old)?;
                    if !matches!(content, Content::Bytes) {
                        return Err(FtlError::PayloadMode { lpn: e.key });
                    }
                    *t = done;
                    Self::merge(dst, &self.scratch[base..base + dst.len()], e.mask);
                } else if e.mask != full {
                    Self::zero_missing(dst, e.mask);
                }
                Ok(0)
            }
            Fill::Token(fp) => {
                if e.mask == full {
                    return Ok(*fp);
                }
                let mut old_fp = 0;
                if old < LOST {
                    self.stats.rmw_reads += 1;
                    let (done, content, _) = self.read_mapped(*t, e.key, old)?;
                    *t = done;
                    if let Content::Fingerprint(f) = content {
                        old_fp = f;
                    }
                }
                Ok(fold(old_fp, *fp, e.mask))
            }
        }
    }
}

impl<F: Flash> Ftl<F> {
    /// One GC step. Under sub-page mapping the FML, which counts valid units, cannot see
    /// dead slots, so the FTL steers GC by live slots:
    /// - a victim's partly live data unit is not copied whole: its live slots are gathered with
    ///   those of the block's next partly live units and programmed together ([`Self::repack`]);
    /// - with no victim under way, the FTL picks the block that frees the most slots (greedy
    ///   over live slots, [`Self::choose_evacuee`]) and moves its units out itself, one per
    ///   step; the emptied block is then the FML's cheapest victim, erased with no copy.
    ///
    /// Everything else is the FML's step.
    pub(crate) fn gc_step(&mut self, at: Nanos) -> Result<GcStep, FtlError> {
        if self.map.slots == 1 {
            return Ok(self.fml.gc_step(at, &mut self.map)?);
        }
        match self.fml.next_gc_step() {
            NextGc::Copy { from } if self.partly_live(from) => {
                let done = self.repack(at, from)?;
                return Ok(GcStep::Copied { done_ns: done });
            }
            NextGc::Choose => {
                if self.evacuating.is_none() {
                    self.evacuating = self.choose_evacuee();
                }
                if let Some((block, off)) = self.evacuating {
                    let layout = *self.fml.layout();
                    let next = (off..layout.units_per_superblock)
                        .map(|o| layout.vpa(block, o))
                        .find(|&u| self.fml.is_valid(u));
                    match next {
                        Some(v) if self.map.live[v.0 as usize] > 0 => {
                            self.evacuating = Some((block, layout.offset_of(v) + 1));
                            let done = self.repack(at, v)?;
                            return Ok(GcStep::Copied { done_ns: done });
                        }
                        // Emptied (or it took another kind of unit since): the FML goes on.
                        _ => self.evacuating = None,
                    }
                }
            }
            _ => {}
        }
        Ok(self.fml.gc_step(at, &mut self.map)?)
    }

    /// The full block holding only data units whose GC frees the most slots, if it frees more
    /// than the FML's own choice could (which counts a valid unit as wholly live): `(block,
    /// first offset to move)`.
    fn choose_evacuee(&self) -> Option<(u32, u32)> {
        let k = self.map.slots;
        let units = self.fml.layout().units_per_superblock;
        let mut best: Option<(u32, u32)> = None; // (live slots, block)
        let mut fml_best = u32::MAX; // live slots of the FML's greedy pick, at most
        for (i, b) in self.fml.blocks().iter().enumerate() {
            if b.state != fml::BlockState::Full {
                continue;
            }
            if b.valid < units {
                fml_best = fml_best.min(b.valid * k);
            }
            let live = self.map.block_slots[i];
            if b.valid == self.map.block_units[i]
                && live < units * k
                && best.is_none_or(|(l, _)| live < l)
            {
                best = Some((live, i as u32));
            }
        }
        best.filter(|&(live, _)| live < fml_best)
            .map(|(_, block)| (block, 0))
    }

    fn partly_live(&self, v: Vpa) -> bool {
        let live = self.map.live.get(v.0 as usize).copied().unwrap_or(0) as u32;
        live > 0 && live < self.map.slots
    }

    /// Moves the live slots of data unit `first`, and (while they fit) of the next partly live
    /// units of its block, into one new unit of the GC data stream; then the sources are
    /// invalid. A source that cannot be read back loses its live pages (as the FML
    /// loses a unit it cannot copy). Returns when the program completes.
    fn repack(&mut self, at: Nanos, first: Vpa) -> Result<Nanos, FtlError> {
        let k = self.map.slots as usize;
        let mu = self.unit_bytes;
        let layout = *self.fml.layout();
        let (victim, end) = (layout.superblock_of(first), layout.units_per_superblock);
        let mut pack = std::mem::take(&mut self.pack);
        pack.resize(self.wu_bytes, 0);
        pack.fill(0);
        let mut slots = Slots::empty(k);
        let mut moved: Vec<(u32, u32)> = Vec::with_capacity(k); // (lpn, slot in the new unit)
        let mut sources: Vec<Vpa> = Vec::with_capacity(k);
        let mut bytes_mode = None;
        let mut ready = at;
        let mut next = Some(first);
        while let Some(v) = next.take() {
            let live = self.map.live[v.0 as usize] as usize;
            if moved.len() + live > k {
                break;
            }
            match self.read_packed(at, v) {
                Ok(Some((done, content, record))) => {
                    let is_bytes = content == Content::Bytes;
                    if *bytes_mode.get_or_insert(is_bytes) != is_bytes {
                        break;
                    }
                    ready = ready.max(done);
                    for i in 0..k {
                        let key = record.slots.keys[i];
                        if key == EMPTY_SLOT
                            || self.map.l2p.get(key as usize) != Some(&self.map.loc(v, i as u32))
                        {
                            continue;
                        }
                        let to = moved.len();
                        if is_bytes {
                            pack[to * mu..(to + 1) * mu]
                                .copy_from_slice(&self.scratch[i * mu..(i + 1) * mu]);
                        }
                        slots.keys[to] = key;
                        slots.fps[to] = record.slots.fps[i];
                        moved.push((key, to as u32));
                    }
                    sources.push(v);
                }
                Ok(None) => {
                    // Unreadable, erased or not the record the map expects: its pages are lost.
                    self.map.lost += 1;
                    self.map.forget(v.0);
                    self.map.lose_slots(v);
                    self.fml.invalidate(v);
                }
                Err(e) => {
                    self.pack = pack;
                    return Err(e);
                }
            }
            // The victim's next partly live unit, if any is left to pair with.
            if moved.len() < k {
                let start = layout.offset_of(v) + 1;
                next = (start..end)
                    .map(|off| layout.vpa(victim, off))
                    .find(|&u| self.fml.is_valid(u) && self.partly_live(u));
            }
        }
        if moved.is_empty() {
            self.pack = pack;
            return Ok(at);
        }
        let (payload, record) =
            packed_unit(self.map.take_seq(), bytes_mode == Some(true), &pack, slots);
        let stream = self.map.gc_data_stream.unwrap_or(self.fml.gc_stream());
        let written = self.fml.write(ready, stream, payload, &record.encode());
        self.pack = pack;
        let (to, done) = written?;
        self.map.wrote(to.0, &record);
        self.stats.gc_units_repacked += 1;
        for v in sources {
            self.map.set_live(v, 0);
            self.map.forget(v.0);
            self.fml.invalidate(v);
        }
        for &(lpn, slot) in &moved {
            self.map.l2p[lpn as usize] = self.map.loc(to, slot);
            if let Some(cmt) = self.map.cmt.as_mut() {
                if !cmt.mark_dirty_if_cached(lpn) {
                    self.map.moved.push(lpn);
                }
            }
        }
        self.map.set_live(to, moved.len() as u8);
        Ok(done)
    }

    /// Reads packed unit `v` whole for GC (bytes into the scratch buffer) with its record;
    /// `None` if it cannot be read back as the packed unit it should be. On a timing-only
    /// device the record comes from the FTL's own bookkeeping.
    fn read_packed(
        &mut self,
        at: Nanos,
        v: Vpa,
    ) -> Result<Option<(Nanos, Content, Record)>, FtlError> {
        let mut scratch = std::mem::take(&mut self.scratch);
        let mut oob = [0u8; packed_record_bytes(MAX_SLOTS)];
        let oob = &mut oob[..self.record_bytes];
        let r = self.fml.read(at, v, &mut scratch, oob);
        self.scratch = scratch;
        let (done, content) = match r {
            Ok(x) => x,
            Err(FmlError::Flash(FlashError::Uncorrectable { .. })) => return Ok(None),
            Err(e) => return Err(e.into()),
        };
        if content == Content::Erased {
            return Ok(None);
        }
        let record = match self.map.owners.as_ref() {
            Some(o) => o.record(v.0, self.map.slots),
            None => match Record::decode(oob) {
                Ok(Some(r))
                    if r.kind == Kind::Packed
                        && r.slots.n as u32 == self.map.slots
                        && content_crc(content, &self.scratch) == Some(r.payload_crc) =>
                {
                    Some(r)
                }
                _ => None,
            },
        };
        Ok(record.map(|r| (done, content, r)))
    }
}

/// A packed unit's payload (its bytes, or in fingerprint mode one fingerprint of its slots)
/// and OOB record, as both the write path and GC's repacking program it.
fn packed_unit(seq: u64, bytes_mode: bool, pack: &[u8], slots: Slots) -> (Payload<'_>, Record) {
    let payload = if bytes_mode {
        Payload::Bytes(pack)
    } else {
        Payload::Fingerprint(unit_fingerprint(&slots))
    };
    let record = Record {
        kind: Kind::Packed,
        key: 0,
        seq,
        payload_crc: payload_crc(payload),
        slots,
    };
    (payload, record)
}
