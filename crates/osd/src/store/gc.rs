//! Garbage collection as the store sees it: GC steps, the relocations GC reports (applied to the
//! index after each step), lost units.

use super::*;

/// Relocations GC reports, applied after each GC step (the index needs the FML, which GC holds).
#[derive(Default)]
pub(super) struct GcLog {
    pub(super) seq: u64,
    pub(super) moves: Vec<(u32, u32, Record)>,
    pub(super) lost: Vec<u32>,
    /// Metadata units GC moves get a copy beside them ([`OsdConfig::metadata_copies`]).
    pub(super) copies: bool,
    /// Metadata units GC moved from their copy, the unit itself unreadable.
    pub(super) moved_from_copy: u64,
}

impl GcLog {
    pub(super) fn take_seq(&mut self) -> u64 {
        self.seq += 1;
        self.seq
    }
}

/// Whether the valid unit at `from` is a copy standing in for the unit before it (docs/FORMAT.md,
/// "Metadata copies").
fn stands_in(from: Vpa, oob: &[u8]) -> bool {
    from.0
        .checked_sub(1)
        .is_some_and(|of| matches!(Record::decode_copy(oob, of), Ok(Some(_))))
}

impl Owner for GcLog {
    fn recognizes(&mut self, from: Vpa, oob: &[u8]) -> bool {
        matches!(Record::decode(oob), Ok(Some(_))) || stands_in(from, oob)
    }

    fn before_copy(&mut self, from: Vpa, oob: &mut [u8]) -> Option<StreamId> {
        // A copy recovery took as its unit (that unit's page held another): moved as the unit.
        if stands_in(from, oob) {
            self.record_of_copy(Vpa(from.0 - 1), oob);
            self.moved_from_copy -= 1;
        }
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
                    seal,
                    chunk,
                    ..
                } => Record::Data {
                    oid,
                    offset,
                    length,
                    seq: 0,
                    moved: true,
                    // An encrypted unit's copy keeps its nonce's input and its tag (the store
                    // reads whole encrypted records once it holds any: `widen_records`).
                    seal,
                    // A chunk unit keeps its generation and unit count.
                    chunk,
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

    fn keeps_copies(&self) -> bool {
        // Copies may be on flash even when this open writes none (an image written with them).
        true
    }

    fn keeps_copy(&mut self, oob: &[u8]) -> bool {
        self.copies && matches!(Record::decode(oob), Ok(Some(r)) if r.has_copy())
    }

    fn copy_record(&mut self, primary: Vpa, oob: &[u8], out: &mut [u8]) -> usize {
        let Ok(Some(sealed)) = Record::decode_sealed(oob) else {
            return 0;
        };
        let mut b = [0u8; RECORD_MAX_BYTES];
        let n = sealed.record.encode(sealed.payload_crc, &mut b);
        let mut c = [0u8; RECORD_MAX_BYTES];
        let m = Record::encode_copy(&b[..n], primary.0, &mut c);
        out[..m].copy_from_slice(&c[..m]);
        m
    }

    fn record_of_copy(&mut self, from: Vpa, oob: &mut [u8]) -> bool {
        let Ok(Some(sealed)) = Record::decode_copy(oob, from.0) else {
            return false;
        };
        let mut b = [0u8; RECORD_MAX_BYTES];
        let n = sealed.record.encode(sealed.payload_crc, &mut b);
        oob.fill(0);
        let n = n.min(oob.len());
        oob[..n].copy_from_slice(&b[..n]);
        self.moved_from_copy += 1;
        true
    }

    #[expect(
        clippy::expect_used,
        reason = "the FML relocates only units whose record this store recognized (Owner::recognizes) before the copy"
    )]
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

/// The most streams a placement gives metadata (descriptor pages and the checkpoint, index
/// nodes, parity units): each may need a fresh update block of its own.
const META_STREAMS: u64 = 3;

impl<F: Flash> ObjectStore<F> {
    /// Runs GC until free blocks are back above the low watermark, applying relocations after
    /// each step and checkpointing before a block whose index nodes or descriptor pages moved
    /// is erased.
    pub(super) fn make_room(&mut self) -> Result<(), OsdError> {
        self.collect_while(|fml| fml.must_collect())
    }

    /// Runs GC steps while `short` holds and GC has something it may collect.
    fn collect_while(&mut self, short: impl Fn(&Fml<F>) -> bool) -> Result<(), OsdError> {
        while short(&self.fml) {
            if !self.step_gc()? {
                break;
            }
        }
        Ok(())
    }

    /// Room for the checkpoint that ends recovery: GC runs until the free blocks cover the low
    /// watermark and the blocks that checkpoint's metadata may open. A reboot leaves no update
    /// block open, so each metadata stream opens a fresh one, and the index nodes, descriptor
    /// pages and parity units recovery dirtied (with their copies) fill more: at the low
    /// watermark alone they could take the last free block, and then GC had nowhere to copy to,
    /// with blocks of nothing but superseded units on the device (`ossd torture --reliability
    /// 1 --fill 80 --seed 58`, seeds 6474921634399134546 and 15471918177718565920: "recovery
    /// failed: no space" with a quarter of the device live). Best effort: GC stops when it
    /// has nothing it may collect.
    pub(super) fn make_room_for_recovery_checkpoint(&mut self) -> Result<(), OsdError> {
        // A pending unit-map edit dirties at most a leaf and a split's new leaf.
        let units = self.index.dirty_nodes() as u64
            + 2 * self.units.pending() as u64
            + self.onodes.values().filter(|c| c.dirty).count() as u64
            + self.parity.values().filter(|p| p.is_dirty()).count() as u64
            + 1;
        let per_block = u64::from(self.fml.layout().units_per_superblock);
        let factor = if self.copies { 2 } else { 1 };
        // One block more for each metadata stream's fresh update block.
        let blocks = (units * factor).div_ceil(per_block.max(1)) + META_STREAMS;
        let target = u64::from(self.fml.config().low_watermark_blocks) + blocks;
        self.collect_while(|fml| fml.must_collect() || u64::from(fml.free_blocks()) < target)
    }

    /// Room for one data unit of an object at `priority`: a real-time object's unit may use the
    /// free blocks held back for it (OSSD-13 IV-C), so GC runs only below that reserve.
    ///
    /// A data unit never takes the low watermark's free blocks: when GC has nothing left to
    /// collect below it, the device is full of live data, and the write is refused. Those
    /// blocks stay for metadata, so that a checkpoint, a removal's tombstone (which frees
    /// room) and the checkpoint that ends recovery always find some: before, data could take
    /// all but GC's last block, and a full store could no longer be opened (`ossd torture
    /// --reliability 1 --fill 80`, seed 6246907515431523210: "recovery failed: no space").
    /// Inside a checkpoint (which flushes the write buffer) GC may be waiting for it, so the
    /// buffered units go on as before.
    pub(super) fn make_room_at(&mut self, priority: u8) -> Result<(), OsdError> {
        let short = |fml: &Fml<F>| {
            if priority == 0 {
                fml.must_collect()
            } else {
                fml.must_collect_realtime()
            }
        };
        self.collect_while(short)?;
        if short(&self.fml) && self.meta_busy == 0 {
            return Err(self.no_space(self.unit as u64));
        }
        Ok(())
    }

    /// One GC step; false when there is nothing to collect.
    pub(super) fn step_gc(&mut self) -> Result<bool, OsdError> {
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
                // The victim is empty: its erase needs only this checkpoint, which may take
                // the last free block (GC's copy reserve) if its streams have no room, or GC
                // deadlocks with free space on the device.
                let emptied = self.fml.blocks()[v as usize].valid == 0;
                self.fml.with_last_free_block(emptied);
                let r = self.checkpoint_now(super::checkpoint::CheckpointScope::Gc);
                self.fml.with_last_free_block(false);
                r?;
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

    pub(super) fn apply_gc_log(&mut self) -> Result<(), OsdError> {
        let mut moves = std::mem::take(&mut self.gc.moves);
        let per_block = self.fml.layout().units_per_superblock;
        let mut astray = Vec::new();
        for (from, to, rec) in moves.drain(..) {
            if self.claimed_as_other_metadata(from, &rec)
                || self.stray_descriptor_page(from, to, &rec)?
            {
                // A misdirected program landed this unit on the page another metadata unit's
                // own program left erased; that unit counts as valid there, read from its copy
                // beside it. The stray unit's copy is garbage; the unit it stood in for is
                // written again from its copy below, as for a stray data unit.
                self.fml.invalidate(Vpa(to));
                astray.push(from);
                continue;
            }
            match rec {
                Record::Data {
                    oid, offset, chunk, ..
                } => {
                    // A chunk unit is relocated only while the index still maps it there
                    // (every valid one is; the check costs one lookup and guards the layout).
                    if chunk.is_some() && self.lookup(oid, offset)? != Some(from) {
                        // Nothing references the copy: it is garbage like its original.
                        self.fml.invalidate(Vpa(to));
                        continue;
                    }
                    // The moved unit is the current one (GC moves only valid units), unless
                    // it landed astray on a metadata unit's page.
                    if !self.remap(oid, offset, from, to)? {
                        self.fml.invalidate(Vpa(to));
                        astray.push(from);
                        continue;
                    }
                    if let Ok(c) = self.onode_mut(oid) {
                        // OSSD-13 V-F: a page GC copies is cold; lower the object's count.
                        c.onode.write_count = c.onode.write_count.saturating_sub(1);
                    }
                }
                Record::Descriptor { .. } => {
                    self.unsafe_victims.insert(from / per_block);
                    if let Some(d) = self.desc.remove(&from) {
                        for (slot, oid) in d.live.iter().enumerate() {
                            if let Some(oid) = oid {
                                let loc = slot_loc(to, slot as u16);
                                self.with_index_raw(|ix, io| ix.insert(io, onode_key(*oid), loc))?;
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
                    self.with_index_raw(|ix, io| ix.relocate(io, from, to, level, &first_key))?;
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
                Record::Parity {
                    oid, group, row, ..
                } => {
                    let key = parity_key(oid, group, row);
                    if self.with_index_raw(|ix, io| ix.get(io, &key))? == Some(from as u64) {
                        self.with_index_raw(|ix, io| ix.insert(io, key, to as u64))?;
                    }
                }
                Record::TxnLog { .. } | Record::TxnDone { .. } => {
                    // Nothing references a transaction's units: they wait for release at the
                    // next checkpoint, and recovery finds them by their records.
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
        // The emptied list goes back, so the next step's moves need no allocation.
        if self.gc.moves.is_empty() {
            self.gc.moves = moves;
        }
        for from in std::mem::take(&mut self.gc.lost) {
            self.stats.units_lost += 1;
            self.lose_metadata(from)?;
            self.mark_lost(from)?;
        }
        for from in astray {
            self.move_from_copy(from)?;
        }
        Ok(())
    }

    /// The valid unit GC moved from `from` held a data unit the index maps elsewhere: a
    /// misdirected program landed it on the page a metadata unit's own program then left
    /// erased, and the metadata unit counts as valid there, read from its copy beside it
    /// (docs/FORMAT.md, "Metadata copies"). GC moved the stray unit in its place; the
    /// metadata unit is written again from its copy, before the block (and the copy with it)
    /// is erased, and moved there as GC moves a unit (`ossd torture --stack osd --faults all
    /// --fill 80 --reliability 1 --seed 56`, seed 12398043566932172609: a descriptor page
    /// lost, then "unit 121 was never programmed" refused the image).
    fn move_from_copy(&mut self, from: u32) -> Result<(), OsdError> {
        let mut page = vec![0u8; self.unit];
        let Some((t, _, rec)) =
            super::unit_io::read_copy(&mut self.fml, self.now, from, &mut page, SCAN_RECORD_BYTES)
        else {
            // The copy is unreadable too: the unit is lost, as if GC could read neither.
            return self.lose_metadata(from);
        };
        self.now = self.now.max(t);
        let kind = match rec {
            Record::Descriptor { .. } => PageKind::Descriptor,
            Record::Index { .. } => PageKind::Index,
            Record::Small { .. } => PageKind::SmallObjects,
            Record::Atime { .. } => PageKind::Atime,
            Record::Checkpoint { .. } => PageKind::Checkpoint,
            Record::TxnLog { .. } | Record::TxnDone { .. } => PageKind::Descriptor,
            Record::Data { .. } | Record::Parity { .. } => return Ok(()),
        };
        self.stats.metadata_read_from_copy += 1;
        let to = self.write_meta_unit(kind, &page, rec)?;
        self.gc.moves.push((from, to, rec));
        self.apply_gc_log()
    }

    /// GC could read neither the unit at `from` nor its copy. Whatever metadata it held stops
    /// being referenced before GC erases its block (docs/RELIABILITY.md, finding 28: GC erased
    /// a descriptor page both of whose copies were lost, the page was programmed again, and
    /// recovery found it "referenced twice", refusing the whole image):
    /// - the onodes of a descriptor page and the entries of a small-object page are written
    ///   again from the cache when it holds them, and otherwise point at [`LOST`], so that
    ///   their reads fail as they did, and the checkpoint written before the erase says so;
    /// - an index node is written again from the index cache, or, when it is not cached, its
    ///   block is retired rather than erased: the tree still points at it, and a page
    ///   programmed again there could read as a node of the tree;
    /// - a checkpoint, an atime page or a released unit needs only that checkpoint.
    fn lose_metadata(&mut self, from: u32) -> Result<(), OsdError> {
        // The durable checkpoint may still name the unit: the one that records the loss is
        // written before GC erases the block.
        let per_block = self.fml.layout().units_per_superblock;
        self.unsafe_victims.insert(from / per_block);
        if let Some(d) = self.desc.remove(&from) {
            self.pinned_desc_pages -= d.pinned as usize;
            for (slot, oid) in d.live.iter().enumerate() {
                if let Some(oid) = oid {
                    self.lose_onode(*oid, (from, slot as u16))?;
                }
            }
        }
        if let Some(d) = self.packs.remove(&from) {
            for (slot, oid) in d.live.iter().enumerate() {
                if let Some(oid) = oid {
                    self.lose_small_entry(*oid, (from, slot as u16))?;
                }
            }
        }
        let gone = match self.with_index(|ix, io| ix.lost(io, from)) {
            Ok(loss) => loss == NodeLoss::Gone,
            Err(e @ (OsdError::Device(_) | OsdError::Internal(_))) => return Err(e),
            // Another node on the way is unreadable: whether the tree references this unit
            // cannot be told, so its page is kept from being programmed again.
            Err(_) => true,
        };
        if gone {
            self.stats.index_nodes_lost += 1;
            self.fml
                .retire_victim_when_empty(from / self.fml.layout().units_per_superblock);
        }
        Ok(())
    }

    /// The onode of `oid` at `loc` was in a descriptor page GC lost.
    fn lose_onode(&mut self, oid: Oid, loc: (u32, u16)) -> Result<(), OsdError> {
        match self.onodes.get_mut(&oid) {
            Some(c) if c.loc.is_none() || c.loc == Some(loc) => {
                // The cache holds it: the next flush writes it elsewhere.
                c.loc = None;
                c.dirty = true;
            }
            _ => {
                self.stats.metadata_entries_lost += 1;
                let lost = slot_loc(LOST, loc.1);
                self.with_index_raw(|ix, io| ix.insert(io, onode_key(oid), lost))?;
            }
        }
        Ok(())
    }

    /// Whether GC moved from `from` a metadata unit of one kind (`rec`) where the store keeps a
    /// metadata unit of another: a descriptor page where a small-object page, the checkpoint
    /// or an atime page is, or the other way round (`ossd torture --stack ofs --faults all
    /// --fill 80 --seed 58`, seed 13154051207879840994: a descriptor page's misdirected
    /// program landed on a small-object page left erased by its own misdirected program; GC
    /// moved it as a descriptor page, erased the block, and recovery found the small-object
    /// page "referenced twice"). Data units are told apart by the index (`remap`).
    fn claimed_as_other_metadata(&self, from: u32, rec: &Record) -> bool {
        if matches!(
            rec,
            Record::Data { .. }
                | Record::Parity { .. }
                | Record::TxnLog { .. }
                | Record::TxnDone { .. }
        ) {
            // Not metadata that another unit's place could be claimed for (and GC's most
            // frequent case: no look-ups).
            return false;
        }
        let desc = self.desc.contains_key(&from);
        let small = self.packs.contains_key(&from);
        let ckpt = self.ckpt_unit == Some(from);
        let atime = self.atime_pages.contains(&from);
        match rec {
            Record::Descriptor { .. } => !desc && (small || ckpt || atime),
            Record::Small { .. } => !small && (desc || ckpt || atime),
            Record::Checkpoint { .. } => !ckpt && (desc || small || atime),
            Record::Atime { .. } => !atime && (desc || small || ckpt),
            Record::Index { .. } => desc || small || ckpt || atime,
            Record::Data { .. }
            | Record::Parity { .. }
            | Record::TxnLog { .. }
            | Record::TxnDone { .. } => false,
        }
    }

    /// Whether GC moved, as the descriptor page at `from`, a stray one: with metadata copies a
    /// descriptor page whose own program went astray counts as valid at home, read from its
    /// copy; a later misdirected program of another descriptor page can land on that erased
    /// page, and GC then finds a readable descriptor page there with other onodes in its
    /// slots (`ossd torture --stack ofs --faults all --fill 80 --seed 58`, seed
    /// 12922602234101241117: the index pointed at a slot the moved page did not have, and
    /// recovery refused the image; docs/RELIABILITY.md, finding 36). Told by the onodes in the
    /// page's live slots, read back from `to`; only with copies (a read GC did not make
    /// before), since without them such a page reads erased and is lost as it is.
    fn stray_descriptor_page(
        &mut self,
        from: u32,
        to: u32,
        rec: &Record,
    ) -> Result<bool, OsdError> {
        if !self.copies || !matches!(rec, Record::Descriptor { .. }) {
            return Ok(false);
        }
        let Some(live) = self.desc.get(&from).map(|d| d.live.clone()) else {
            return Ok(false);
        };
        let mut page = std::mem::take(&mut self.scratch);
        let onodes = self.read_desc_page(to, &mut page, None);
        self.scratch = page;
        let Ok(onodes) = onodes else {
            return Ok(false);
        };
        Ok(live
            .iter()
            .enumerate()
            .any(|(slot, oid)| oid.is_some_and(|o| onodes.get(slot).map(|x| x.oid) != Some(o))))
    }

    /// A unit waiting to be released after the next checkpoint was moved by GC: release the copy.
    pub(super) fn retarget_released(&mut self, from: u32, to: u32) {
        for r in self.released.iter_mut() {
            if *r == from {
                *r = to;
            }
        }
    }

    /// A unit GC could not read: reads of the data it held fail from now on.
    pub(super) fn mark_lost(&mut self, from: u32) -> Result<(), OsdError> {
        // Find the extent holding it (a rare event: a scan of the data entries).
        let all =
            self.with_index(|ix, io| ix.range(io, &IndexKey::MIN, &IndexKey::MAX, usize::MAX))?;
        let found = all
            .iter()
            .flat_map(|(k, v)| recovery::unit_refs(k, *v))
            .find(|&(w, _)| w == from);
        match found {
            Some((_, r)) => self.map_lost(r),
            None => Ok(()),
        }
    }

    /// Background work in idle time, for steps starting before `until`: GC up to the high
    /// watermark first, then, in what idle time GC leaves, the background scrub (when its
    /// policy turns it on: [`Self::set_background_scrub`]).
    pub fn background(&mut self, from: Nanos, until: Nanos) -> Result<Nanos, OsdError> {
        self.set_time(from);
        let idle = self.buf.is_empty();
        while self.now < until && self.fml.wants_collect(idle) {
            if !self.step_gc()? {
                break;
            }
        }
        // GC's needs come first: the scrub runs only in time GC left, once it wants no more
        // or has nothing it can collect.
        if self.now < until {
            self.background_scrub_idle(until)?;
        }
        Ok(self.now())
    }
}
