//! Checkpoints and flushes: when they run, and what they write.

use super::*;

/// What a checkpoint writes before it commits the index.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum CheckpointScope {
    /// Everything buffered: the write buffer, small-object pages and every dirty onode.
    Whole,
    /// Asked for by GC, which waits on it to erase a block: only the onodes that need no
    /// buffered data ([`ObjectStore::write_ready_onodes`]).
    Gc,
}

impl<F: Flash> ObjectStore<F> {
    /// Flushes, commits the index, writes the checkpoint unit, then releases what the previous
    /// checkpoint still needed.
    pub fn checkpoint(&mut self) -> Result<Nanos, OsdError> {
        self.check_writable()?;
        // The write buffer first, and room, while GC may still run and checkpoint (once,
        // through `checkpoint_now`) for a block it must erase: inside the checkpoint GC cannot
        // erase such a block, so a full buffer flushed there could use up the free blocks.
        if !mutant_checkpoint_before_data() {
            self.flush_all()?;
        }
        self.make_room()?;
        self.checkpoint_now(CheckpointScope::Whole)
    }

    /// A checkpoint during which GC may not ask for another.
    pub(super) fn checkpoint_now(&mut self, scope: CheckpointScope) -> Result<Nanos, OsdError> {
        self.meta_busy += 1;
        let r = self.checkpoint_inner(scope);
        self.meta_busy -= 1;
        r
    }

    #[expect(
        clippy::unwrap_used,
        reason = "the pinned descriptor pages were collected from the descriptor map just above"
    )]
    fn checkpoint_inner(&mut self, scope: CheckpointScope) -> Result<Nanos, OsdError> {
        // No journal page outlives a checkpoint: recovery only looks for newer ones.
        self.merge_atimes()?;
        match scope {
            CheckpointScope::Whole if mutant_checkpoint_before_data() => {}
            CheckpointScope::Whole => self.flush_all()?,
            // GC cannot erase the block it waits on until this checkpoint is durable, so
            // programming a full write buffer here could use up the free blocks: only the onodes
            // whose data is on flash go now. The rest (buffered data, small-object pages, their
            // onodes) is newer than this checkpoint when it is written, and recovery rolls it
            // forward like any write after a checkpoint.
            CheckpointScope::Gc => self.write_ready_onodes()?,
        }
        // Parity reaches flash here, not at every FLUSH: recovery recomputes the parity of the
        // groups written since this checkpoint from their data (OSCM-11 V-E's overhead).
        self.flush_parity()?;
        self.make_room()?;
        // Moves recorded so far are in the tree this commit writes; any made while the
        // checkpoint unit is written are not, and must wait for the next checkpoint.
        let covered = std::mem::take(&mut self.unsafe_victims);
        // The unit map's edits go into this commit; the objects it holds stay held.
        self.sync_unit_map()?;
        let root = self.with_index_raw(|ix, io| ix.commit(io))?;
        if scope == CheckpointScope::Whole && mutant_checkpoint_before_data() {
            self.flush_all()?;
        }
        let mut page = vec![0u8; self.unit];
        page[..4].copy_from_slice(CKPT_MAGIC);
        page[4..8].copy_from_slice(&CKPT_VERSION.to_le_bytes());
        let (root_addr, height) = root.unwrap_or((u32::MAX, 0));
        page[8..12].copy_from_slice(&root_addr.to_le_bytes());
        page[12] = height;
        page[13] = match self.config.placement {
            // Code 0 is what `one` meant before OFS-ONE kept three update blocks: images
            // formatted then keep their behaviour.
            Placement::Combined => 0,
            Placement::Semantic => 1,
            Placement::Split => 2,
            Placement::SplitAtime => 3,
            Placement::One => 4,
        };
        page[14] = (self.config.index_mode == IndexMode::Page) as u8;
        page[16..24].copy_from_slice(&self.next_object.to_le_bytes());
        page[24..32].copy_from_slice(&self.next_partition.to_le_bytes());
        page[32..36].copy_from_slice(&(self.unit as u32).to_le_bytes());
        // Bit 0: encrypted units may be on flash (read whole records; skip sequence numbers
        // at open).
        page[36] = self.wide_records as u8;
        // Metadata units have a copy beside them (docs/FORMAT.md, "Metadata copies"): every
        // later open keeps writing them.
        page[37] = if self.copies { 2 } else { 0 };
        // 1: a whole checkpoint (the write buffer and every onode flushed first, between
        // commands): no object's extents are ahead of its onode, so recovery need not load
        // every onode to look (docs/FORMAT.md). 0 (and every older image): it must.
        page[38] = (scope == CheckpointScope::Whole && !mutant_checkpoint_before_data()) as u8;
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
        debug_assert_eq!(
            pinned.len(),
            self.pinned_desc_pages,
            "pinned descriptor pages"
        );
        self.pinned_desc_pages = 0;
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
        self.checkpoint_seq = logical;
        self.stats.checkpoints += 1;
        Ok(self.now())
    }

    /// Programs the buffered data, then the dirty onodes. Onodes are only ever written this
    /// way: an onode's length must not reach flash before the data it covers, or a crash would
    /// leave the object reading zeros it never held.
    ///
    /// Pending access times stay in RAM: no ordering depends on them, and a partly filled
    /// atime page per removal (every PostMark delete flushes here) cost OSCM-11's read-heavy
    /// PostMark as many atime pages as descriptor pages, more than the onode rewrites
    /// `split+atime` exists to save. A device-wide FLUSH writes them
    /// ([`Self::flush_access_times`]); a crash loses at most the entries since.
    pub(super) fn flush_all(&mut self) -> Result<(), OsdError> {
        while let Some(e) = self.buf.pop_oldest() {
            self.program_entry(e)?;
        }
        self.write_small_pages(true)?;
        self.flush_onodes()
    }

    /// A device-wide FLUSH makes pending access times durable too: the journal page, then
    /// everything [`Self::flush_all`] writes.
    pub(super) fn flush_access_times(&mut self) -> Result<(), OsdError> {
        self.write_atime_page()?;
        self.flush_all()
    }

    /// Between commands: writes back the onodes the cache evicts ([`Self::evict_onodes`]), and
    /// checkpoints every `checkpoint_units` data units, and before the index's dirty nodes
    /// outgrow what a checkpoint may write from the GC reserve: a checkpoint GC asks for (to
    /// erase a victim the durable one still needs) cannot wait for more free blocks, so its
    /// commit must fit in half the low watermark's blocks. Found on `nandsim-128m` (2 KiB
    /// nodes), where a commit of a whole dirty tree used up the last free block.
    pub(super) fn maybe_checkpoint(&mut self) -> Result<(), OsdError> {
        self.evict_onodes()?;
        if self.txns.installing {
            // A transaction's commit record must stay newer than the durable checkpoint until
            // its done record is on flash (docs/DESIGN.md "Transactions").
            return Ok(());
        }
        self.bound_unit_map(self.half_reserve_units(2))?;
        // Half the GC reserve less GC's destination block and one block of slack.
        if self.units_since_ckpt >= self.config.checkpoint_units
            || self.index.dirty_nodes() > self.half_reserve_units(2)
            || self.released.len() > self.write_back_limit()
            || self.released.len() + self.pinned_desc_pages > self.pinned_limit()
        {
            self.checkpoint()?;
        }
        Ok(())
    }

    /// Units only a checkpoint frees (released units, and descriptor pages pinned by the
    /// tombstones of removals) the store lets pile up: a sixteenth of the capacity. GC cannot
    /// reclaim them, and a workload of small creates and removes writes too few data units to
    /// reach `checkpoint_units`: OSCM-11's PostMark on 104 NANDsim blocks filled the device
    /// with tombstone pages between two checkpoints while holding 300 KiB of files
    /// (`crates/ofs/tests/space.rs`). A bound as tight as the GC reserve's would checkpoint
    /// every few hundred removals, each checkpoint flushing the write buffer: on OSCM-11 V-E's
    /// PostMark that added about half to the pages written (102,647 to 150,803 at 500 files).
    pub(super) fn pinned_limit(&self) -> usize {
        (self.fml.capacity_units() / 16).max(self.write_back_limit() as u64) as usize
    }

    /// Dirty index nodes a per-page index may hold before [`Self::bound_dirty_index`] writes
    /// them back: half the free blocks GC keeps for others (the low watermark less GC's own
    /// destination block). A commit programs every dirty node, and their new ancestors, with
    /// no GC step in between.
    pub(super) fn write_back_limit(&self) -> usize {
        self.half_reserve_units(1)
    }

    /// Half the units of the low watermark's free blocks less `kept` of them (at least 1).
    pub(super) fn half_reserve_units(&self, kept: u32) -> usize {
        let per_block = self.fml.layout().units_per_superblock as usize;
        let reserve = self.config.fml.low_watermark_blocks.saturating_sub(kept) as usize;
        (reserve * per_block / 2).max(1)
    }

    /// A per-page index dirties a leaf for nearly every unit a flush programs, more than any
    /// checkpoint could then commit (OSCM-11 V-C's 64 MiB file on NANDsim ran out of space
    /// in the commit with half its data units invalid). So under a per-page index the dirty
    /// nodes are written back, without a checkpoint, once they pass
    /// [`Self::write_back_limit`]. The nodes this replaces stay on flash until the next
    /// checkpoint (the durable checkpoint's tree still uses them;
    /// [`Self::maybe_checkpoint`] takes one before they pile up), and recovery ignores the
    /// newer nodes, which nothing durable references. Not a checkpoint itself: that would
    /// flush the whole buffer while GC may be waiting for the checkpoint to erase a block.
    ///
    /// Not done under the extent index: there it made GC-triggered checkpoints at the low
    /// watermark run out of space (OSSD-13 VI-E's aging on RawSSD, 2-block watermark of
    /// 8 MiB blocks), and extents grow few dirty leaves per flush.
    pub(super) fn bound_dirty_index(&mut self) -> Result<(), OsdError> {
        if self.config.index_mode != IndexMode::Page {
            return Ok(());
        }
        self.bound_unit_map(self.write_back_limit())?;
        if self.index.dirty_nodes() <= self.write_back_limit() {
            return Ok(());
        }
        self.make_room()?;
        self.with_index_raw(|ix, io| ix.commit(io))?;
        Ok(())
    }

    /// Brings the unit map's pending edits into the index once they are a batch
    /// ([`UNIT_MAP_BATCH`] units), or could dirty enough index nodes to pass `limit`: each
    /// edit dirties at most a leaf and the leaf a split adds (their ancestors are few beside
    /// them, and shared). The bounds on dirty index nodes then see them as if each edit had
    /// gone to the index at once, give or take one batch, as a command of a batch of units
    /// does without the map.
    fn bound_unit_map(&mut self, limit: usize) -> Result<(), OsdError> {
        let pending = self.units.pending();
        if pending >= UNIT_MAP_BATCH || self.index.dirty_nodes() + 2 * pending > limit {
            self.sync_unit_map()?;
        }
        Ok(())
    }
}

/// Pending unit-map edits the commands let wait for a sync between commands: a 1 MiB write's
/// worth of 4 KiB units (`bound_unit_map`).
const UNIT_MAP_BATCH: usize = 256;

/// Mutant [`fml::mutants::Mutant::CheckpointBeforeData`]: a whole checkpoint commits the index
/// before it flushes the write buffer and the dirty onodes (always false without the feature
/// `mutants`).
#[cfg(feature = "mutants")]
fn mutant_checkpoint_before_data() -> bool {
    fml::mutants::on(fml::mutants::Mutant::CheckpointBeforeData)
}

#[cfg(not(feature = "mutants"))]
#[inline(always)]
fn mutant_checkpoint_before_data() -> bool {
    false
}
