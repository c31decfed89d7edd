//! Opening a store: find the newest checkpoint, roll forward what was written after it
//! (docs/FORMAT.md, "Recovery").

use super::*;
use codec::le;

/// What [`ObjectStore::discover`] found: the newest readable checkpoint and what was written
/// after it.
pub(super) struct Discovered {
    /// The checkpoint's sequence number.
    ckpt_seq: u64,
    /// Where it is.
    ckpt_vpa: u32,
    /// Its page.
    page: Vec<u8>,
    /// Records written after it: (sequence number, unit, record).
    later: Vec<(u64, u32, Record)>,
    /// Units whose page holds a program that landed there astray (their own unit stands in
    /// at its copy's address).
    landed: FxHashSet<u32>,
    /// Units whose records were read to find them.
    scanned: u64,
}

impl<F: Flash> ObjectStore<F> {
    /// Opens a formatted store: the newest checkpoint, then everything written after it.
    pub fn open(flash: F, config: OsdConfig) -> Result<Self, OsdError> {
        Self::open_or_return(flash, config).map_err(|(e, _)| e)
    }

    /// [`Self::open`], handing the device back when recovery fails after the FML opened (a
    /// power cut during recovery, in tests and torture runs, is retried on the same device).
    pub fn open_or_return(flash: F, config: OsdConfig) -> Result<Self, (OsdError, Option<F>)> {
        let mut s = Self::new(flash, config).map_err(|e| (e, None))?;
        match s.recover() {
            Ok(()) => Ok(s),
            Err(e) => Err((e, Some(s.crash()))),
        }
    }

    /// The OOB record of a unit, if it reads back whole, or else if its copy does (docs/FORMAT.md,
    /// "Metadata copies"). Every record recovery reads is of a unit every page of which was
    /// programmed ([`fml::Fml::read_record_whole`]): a multi-page program a power cut tore
    /// part-way leaves its record whole on the first page. A copy is never a record of its own: it is read only for the unit
    /// before it.
    pub(super) fn record_at(&mut self, v: u32) -> Option<Record> {
        let mut oob = [0u8; SCAN_RECORD_BYTES];
        match self.fml.read_record_whole(self.now, Vpa(v), &mut oob) {
            Ok((t, _)) => {
                self.now = self.now.max(t);
                match Record::decode(&oob) {
                    Ok(Some(r)) => return Some(r),
                    Err(RecordError::Version(old)) => {
                        self.foreign_version = Some(old);
                        return None;
                    }
                    Err(RecordError::Copy)
                        if v.checked_sub(1).is_some_and(|of| {
                            matches!(Record::decode_copy(&oob, of), Ok(Some(_)))
                        }) =>
                    {
                        return None
                    }
                    // Erased (its program may have gone astray) or damaged (a flipped copy flag
                    // included): its copy may say.
                    Ok(None) | Err(RecordError::Damaged(_) | RecordError::Copy) => {}
                }
            }
            Err(FmlError::Flash(FlashError::Uncorrectable { .. })) => {}
            Err(_) => return None,
        }
        let c = copy_address(&self.fml, v)?;
        self.copy_record(c, v)
    }

    /// For recovery's scan down a block: unit `v`'s own record, if it reads whole (never a
    /// copy's), and, if `v` holds the copy of the unit before it, that unit's record.
    fn scan_record(&mut self, v: u32) -> (Option<Record>, Option<Record>) {
        let mut oob = [0u8; SCAN_RECORD_BYTES];
        let Ok((t, _)) = self.fml.read_record_whole(self.now, Vpa(v), &mut oob) else {
            return (None, None);
        };
        self.now = self.now.max(t);
        match Record::decode(&oob) {
            Ok(r) => (r, None),
            Err(RecordError::Version(old)) => {
                self.foreign_version = Some(old);
                (None, None)
            }
            Err(RecordError::Copy) => {
                let of = v
                    .checked_sub(1)
                    .filter(|&of| copy_address(&self.fml, of) == Some(v));
                let c = of.and_then(|of| Record::decode_copy(&oob, of).ok().flatten());
                (None, c.map(|s| s.record))
            }
            Err(RecordError::Damaged(_)) => (None, None),
        }
    }

    /// The record unit `of` was written with, from the copy of it at unit `c`, if that is one.
    fn copy_record(&mut self, c: u32, of: u32) -> Option<Record> {
        let mut oob = [0u8; SCAN_RECORD_BYTES];
        let (t, _) = self
            .fml
            .read_record_whole(self.now, Vpa(c), &mut oob)
            .ok()?;
        self.now = self.now.max(t);
        Record::decode_copy(&oob, of)
            .ok()
            .flatten()
            .map(|s| s.record)
    }

    /// A checkpoint unit's page, if it reads back whole and checks out.
    /// A unit whose payload fails its checksum is passed over like a torn one.
    pub(super) fn checkpoint_page(&mut self, v: u32) -> Option<Vec<u8>> {
        let mut page = vec![0u8; self.unit];
        let r = read_meta_checked(
            &mut self.fml,
            &mut self.stats,
            (self.now, v),
            &mut page,
            META_RECORD_BYTES,
            |r, _| matches!(r, Record::Checkpoint { .. }),
        );
        let (t, content, rec) = match r {
            Ok(x) => x,
            Err(BadUnit::Device(_)) => return None,
            Err(_) => {
                self.recovery.units_damaged += 1;
                return None;
            }
        };
        self.now = self.now.max(t);
        let crc = u32::from_le_bytes([page[48], page[49], page[50], page[51]]);
        (content == Content::Bytes
            && matches!(rec, Record::Checkpoint { .. })
            && &page[..4] == CKPT_MAGIC
            && crc32c::crc32c(&page[..48]) == crc)
            .then_some(page)
    }

    /// Finds the newest readable checkpoint and every data unit, descriptor page and atime
    /// page written after it, reading as little as it can: units of a block are programmed in
    /// sequence order, so after one read of each block's last record, only blocks written since
    /// the checkpoint are read, from their end back to the checkpoint.
    pub(super) fn discover(&mut self) -> Result<Discovered, OsdError> {
        let layout = *self.fml.layout();
        let mut spans: Vec<(u32, u32, u64)> = Vec::new();
        let mut max_seq = 0;
        let width = self.fml.flash().config().gang.units_per_superblock.max(1);
        for id in 0..layout.superblocks {
            let b = self.fml.blocks()[id as usize];
            if b.state == fml::BlockState::Bad || b.next == 0 {
                continue;
            }
            // The block's newest record: units rotate over the super-block's parallel units,
            // and each of those is programmed in order, so it is among the last unit of each.
            // A misdirected program may have landed an older unit on a page the block's owner
            // then skipped, after it had programmed newer units on the other parallel units
            // (found with metadata copies, seed 9911286623645150948: a block whose last unit
            // was such an older unit was passed over, and a flushed data unit in it lost). An
            // unreadable unit (a torn program) makes the block count as newest. A metadata copy
            // has its unit's number.
            let mut last = 0;
            for off in b.next.saturating_sub(width)..b.next {
                let v = layout.vpa(id, off).0;
                let r = match self.record_at(v) {
                    Some(r) => Some(r),
                    None if off >= 1 => self.copy_record(v, v - 1),
                    None => None,
                };
                last = last.max(r.map_or(u64::MAX, |r| r.seq()));
            }
            if last != u64::MAX {
                max_seq = max_seq.max(last);
            }
            spans.push((id, b.next, last));
        }
        let mut scanned = spans.iter().map(|s| (s.1).min(width) as u64).sum::<u64>();
        spans.sort_unstable_by_key(|s| std::cmp::Reverse(s.2));
        // The newest checkpoint: blocks newest first, each from its end back.
        let mut best: Option<(u64, u32, Vec<u8>)> = None;
        for &(id, next, last) in &spans {
            if best.as_ref().is_some_and(|b| last <= b.0) {
                break;
            }
            for off in (0..next).rev() {
                let v = layout.vpa(id, off).0;
                scanned += 1;
                let Some(r) = self.record_at(v) else {
                    self.note_scan_damage(v);
                    continue;
                };
                max_seq = max_seq.max(r.seq());
                if best.as_ref().is_some_and(|b| r.seq() <= b.0) {
                    break;
                }
                if let Record::Checkpoint { .. } = r {
                    let page = self.checkpoint_page(v);
                    if page.is_none() {
                        self.scan_damage.get_or_insert(v);
                    }
                    if let Some(page) = page {
                        // A checkpoint GC moved carries a newer record than its own number.
                        // A page too short to carry its number is no candidate.
                        let Ok(logical) = le::u64_at(&page, 40) else {
                            continue;
                        };
                        if best.as_ref().is_none_or(|b| logical > b.0) {
                            best = Some((logical, v, page));
                        }
                        break;
                    }
                }
            }
        }
        let Some((ckpt_seq, ckpt_vpa, page)) = best else {
            if let Some(old) = self.foreign_version {
                return Err(OsdError::Corrupted {
                    what: format!(
                        "records of version {old} and no checkpoint this build reads: the image \
                         was formatted before payload checksums (record version 2); format it \
                         again"
                    ),
                    location: "device".into(),
                    unit: None,
                });
            }
            // Naming the newest damaged unit: on a formatted store, the checkpoint it held.
            return Err(OsdError::Corrupted {
                what: "no readable checkpoint: the device is not an ossd object store (format it first)".into(),
                location: "device".into(),
                unit: self.scan_damage,
            });
        };
        // Everything newer than the checkpoint, block by block from the end back.
        let mut later = Vec::new();
        let mut landed = FxHashSet::default();
        for &(id, next, last) in &spans {
            if last <= ckpt_seq {
                continue;
            }
            // The copy read just above this unit, if it is the copy of this unit.
            let mut above: Option<Record> = None;
            for off in (0..next).rev() {
                let v = layout.vpa(id, off).0;
                scanned += 1;
                let copy = above.take();
                let (own, copy_of_below) = self.scan_record(v);
                above = copy_of_below;
                // A unit whose copy is right above it holds what the copy says. Its page may
                // hold another unit: a misdirected program landed on the page its own program
                // left erased. Then both are rolled forward, the metadata unit from its copy,
                // which stands in for it at the copy's address (docs/FORMAT.md, "Metadata
                // copies").
                let r = match (own, copy) {
                    (Some(r), Some(c)) if r != c => {
                        if c.seq() > ckpt_seq {
                            later.push((c.seq(), v + 1, c));
                        }
                        landed.insert(v);
                        Some(r)
                    }
                    (Some(r), _) => Some(r),
                    (None, c) => c,
                };
                let Some(r) = r else { continue };
                max_seq = max_seq.max(r.seq());
                // Not a break: sequence numbers rise within a block except where a misdirected
                // write landed an older unit on a page the block's owner had not reached yet;
                // the pages before it may still be newer than the checkpoint. The whole of a
                // block written to since the checkpoint is read (at most one block's worth more
                // per such block).
                if r.seq() <= ckpt_seq {
                    continue;
                }
                if matches!(
                    r,
                    Record::Data { .. }
                        | Record::Descriptor { .. }
                        | Record::Atime { .. }
                        | Record::Small { .. }
                        | Record::Parity { .. }
                        | Record::TxnLog { .. }
                        | Record::TxnDone { .. }
                ) {
                    later.push((r.seq(), v, r));
                }
            }
        }
        self.gc.seq = max_seq;
        Ok(Discovered {
            ckpt_seq,
            ckpt_vpa,
            page,
            later,
            landed,
            scanned,
        })
    }

    pub(super) fn recover(&mut self) -> Result<(), OsdError> {
        let found = self.discover()?;
        let checkpoint = (found.ckpt_vpa, found.ckpt_seq);
        match self.recover_from(found) {
            Ok(()) => Ok(()),
            Err(e) => {
                // A descriptor or small-object page the checkpoint references, unreadable
                // because its block was erased and written again since: a newer checkpoint
                // was lost (finding 31; `ossd torture --stack ofs --faults all --fill 80
                // --seed 58`, seed 6243182998577395557, a read of the page during roll-forward).
                let unit = match &e {
                    OsdError::Corrupted { unit, .. } | OsdError::Uncorrectable { unit, .. } => {
                        unit.filter(|u| self.desc.contains_key(u) || self.packs.contains_key(u))
                    }
                    _ => None,
                };
                Err(self.stale_checkpoint_or(e, unit, checkpoint))
            }
        }
    }

    fn recover_from(&mut self, found: Discovered) -> Result<(), OsdError> {
        let Discovered {
            ckpt_seq,
            ckpt_vpa,
            page,
            mut later,
            landed,
            scanned,
        } = found;
        self.checkpoint_seq = ckpt_seq;
        #[cfg(feature = "mutants")]
        if fml::mutants::on(fml::mutants::Mutant::OsdNoRollForward) {
            later.clear();
        }
        // A checkpoint page shorter than its fields is damage, never a panic.
        let short = |e: le::Truncated| OsdError::Corrupted {
            what: format!("checkpoint: {e}"),
            location: format!("unit {ckpt_vpa}"),
            unit: Some(ckpt_vpa),
        };
        let version = le::u32_at(&page, 4).map_err(short)?;
        if version != CKPT_VERSION && version != 1 {
            return Err(OsdError::Corrupted { what: format!("checkpoint version {version} is not supported (this build reads {CKPT_VERSION})"), location: format!("unit {ckpt_vpa}"), unit: Some(ckpt_vpa) });
        }
        let unit = le::u32_at(&page, 32).map_err(short)?;
        if unit as usize != self.unit {
            return Err(OsdError::Corrupted {
                what: format!(
                    "checkpoint made for {unit}-byte units, the device has {}",
                    self.unit
                ),
                location: format!("unit {ckpt_vpa}"),
                unit: Some(ckpt_vpa),
            });
        }
        let root = le::u32_at(&page, 8).map_err(short)?;
        let height = page[12];
        // The store keeps the placement and index mode it was formatted with.
        self.config.placement = match page[13] {
            0 => Placement::Combined,
            1 => Placement::Semantic,
            2 => Placement::Split,
            3 => Placement::SplitAtime,
            4 => Placement::One,
            p => {
                return Err(OsdError::Corrupted {
                    what: format!("unknown placement code {p} in the checkpoint"),
                    location: format!("unit {ckpt_vpa}"),
                    unit: Some(ckpt_vpa),
                })
            }
        };
        self.config.index_mode = if page[14] == 1 {
            IndexMode::Page
        } else {
            IndexMode::Extent
        };
        let layout = *self.fml.layout();
        self.placer = Placer::new(
            self.config.placement,
            self.unit as u64,
            layout.write_unit_bytes as u64 * layout.units_per_superblock as u64,
            self.config.realtime_update_blocks,
        );
        // The segment classes follow the policy formatted, not the one asked for at open.
        for (stream, class) in
            Placer::stream_classes(self.config.placement, self.config.realtime_update_blocks)
        {
            self.fml.set_stream_class(stream, class);
        }
        self.next_object = le::u64_at(&page, 16).map_err(short)?;
        self.next_partition = le::u64_at(&page, 24).map_err(short)?;
        if page[37] == 2 {
            self.copies = true;
            self.gc.copies = true;
        }
        // Encrypted units may be on flash: the checkpoint says so, or a unit written since.
        if page[36] & 1 != 0
            || later
                .iter()
                .any(|(_, _, r)| matches!(r, Record::Data { seal: Some(_), .. }))
        {
            self.widen_records();
            // No nonce's sequence number is used twice (see SEQ_GAP_AT_OPEN).
            self.gc.seq = self.gc.seq.saturating_add(encryption::SEQ_GAP_AT_OPEN);
        }
        self.index = if root == u32::MAX {
            Index::new(self.unit, self.config.index_cache_bytes as usize)
        } else {
            Index::open(
                root,
                height,
                self.unit,
                self.config.index_cache_bytes as usize,
            )
        };
        self.ckpt_unit = Some(ckpt_vpa);
        // The committed tree's nodes stay valid until a checkpoint replaces them.
        let mut idx = std::mem::replace(&mut self.index, Index::new(self.unit, 0));
        let checked = {
            let mut io = self.io();
            idx.check(&mut io)
        };
        self.index = idx;
        let (_, nodes) = match checked {
            Ok(x) => x,
            Err(e) => {
                let unit = e.node_addr();
                let refused = OsdError::Corrupted {
                    what: format!("index: {e}"),
                    location: format!("checkpoint {ckpt_seq}"),
                    unit,
                };
                return Err(self.stale_checkpoint_or(refused, unit, (ckpt_vpa, ckpt_seq)));
            }
        };
        // A metadata unit whose program went astray is found twice: at home, where its copy
        // stands in for the page its program left erased, and on the page it landed on. The
        // home one comes first, so that the stray one supersedes nothing; otherwise a
        // descriptor page could be rolled forward on a page another unit owns (an index node
        // read from its copy), which then counted as referenced twice (`ossd torture --stack
        // osd --faults all --fill 80 --reliability 1 --seed 53`, seed 15262410890083533327).
        later.sort_unstable_by_key(|l| (l.0, landed.contains(&l.1)));
        let torn = self.pass_over_torn(&mut later)?;
        self.recovery = Recovery {
            units_scanned: scanned,
            checkpoint_seq: ckpt_seq,
            records_rolled_forward: later.len() as u64,
            units_damaged: self.recovery.units_damaged,
            torn_units: torn,
            txns_finished: 0,
            extensions_undone: 0,
            earlier_incarnation_units: 0,
            done_ns: 0,
        };
        // Transactions' log, commit and done records, by transaction.
        let mut txns: std::collections::BTreeMap<u64, txn::FoundTxn> = Default::default();
        // Descriptor pages already referenced by the committed index.
        let orphans = self.rebuild_desc_map()?;
        let mut onode_seq: FxHashMap<Oid, u64> = FxHashMap::default();
        let mut small_seq: FxHashMap<Oid, u64> = FxHashMap::default();
        // The length each object's newest durable onode states, before data records extend it.
        let mut stored_len: FxHashMap<Oid, u64> = FxHashMap::default();
        let mut touched: FxHashSet<Oid> = FxHashSet::default();
        // The newest data record rolled forward at each (object, unit): (its unit, its number).
        // Their parity groups are checked once the onodes settle.
        let mut rolled_at: FxHashMap<(Oid, u64), (u32, u64)> = FxHashMap::default();
        // Parity groups whose parity units were rolled forward, checked likewise.
        let mut rolled_parity: Vec<(Oid, u64)> = Vec::new();
        // Units of compressed objects' chunks, settled per chunk once the onodes are known,
        // and the truncations and removals they must not outlive.
        let mut chunk_units: Vec<(Oid, FoundUnit)> = Vec::new();
        let mut cuts: FxHashMap<Oid, Vec<(u64, u64)>> = FxHashMap::default();
        // Extensions over a unit that may still hold bytes a truncation cut off past the old
        // end: (object, unit) -> the length the data record extended it from, undone after
        // the loop. Only a unit older than the onode that set that length can hold such
        // bytes; so each unit's newest host write and each object's newest onode rolled
        // forward are kept (by sequence number).
        let mut stale_tails: FxHashMap<(Oid, u64), u64> = FxHashMap::default();
        let mut written_at: FxHashMap<(Oid, u64), u64> = FxHashMap::default();
        let mut onode_at: FxHashMap<Oid, u64> = FxHashMap::default();
        let mut applied: Vec<Oid> = Vec::new();
        for (seq, v, rec) in later {
            match rec {
                Record::Data {
                    oid,
                    offset,
                    chunk: Some(tag),
                    ..
                } => chunk_units.push((
                    oid,
                    FoundUnit {
                        seq,
                        vpa: v,
                        offset,
                        tag,
                    },
                )),
                Record::Data {
                    oid,
                    offset,
                    length,
                    moved,
                    ..
                } => {
                    // Unit 0 written after a small-object entry: the object outgrew it and
                    // the entry's bytes (all within unit 0) are in that unit. A later unit
                    // alone does not say so: the spill may not have reached flash.
                    if offset == 0 {
                        self.drop_small(oid)?;
                    }
                    self.unmap(oid, offset)?;
                    self.map(oid, offset, v)?;
                    touched.insert(oid);
                    rolled_at.insert((oid, offset), (v, seq));
                    if moved {
                        continue;
                    }
                    // The host wrote this unit whole from its buffer, zeros past the length
                    // included: its tail is not stale.
                    stale_tails.remove(&(oid, offset));
                    written_at.insert((oid, offset), seq);
                    // The object reaches at least the end of this unit's data, no further: the
                    // units after it may not have reached flash.
                    let unit = self.unit as u64;
                    let end = length.min((offset + 1) * unit);
                    if let Some(c) = self.onode_unless_lost(oid)? {
                        stored_len.entry(oid).or_insert(c.onode.logical_length);
                        let from = c.onode.logical_length;
                        if c.onode.inline.is_none() && end > from {
                            c.onode.logical_length = end;
                            c.dirty = true;
                            // The unit holding the old end may keep bytes a truncation cut off
                            // (the store zeroed them in its buffer when the write grew the
                            // object, but that copy may not have reached flash).
                            let u = from / unit;
                            let newer = written_at
                                .get(&(oid, u))
                                .is_some_and(|&w| onode_at.get(&oid).is_none_or(|&d| w > d));
                            if !from.is_multiple_of(unit) && u != offset && !newer {
                                stale_tails.entry((oid, u)).or_insert(from);
                            }
                        }
                    }
                }
                Record::Descriptor { .. } => {
                    self.roll_descriptor(
                        v,
                        &mut onode_seq,
                        &mut stored_len,
                        &mut touched,
                        &mut cuts,
                        &mut applied,
                    )?;
                    // An onode reaches flash after the units buffered before it: a unit its
                    // object's extension left stale was rewritten by then.
                    for oid in applied.drain(..) {
                        onode_at.insert(oid, seq);
                        stale_tails.retain(|k, _| k.0 != oid);
                    }
                }
                Record::Parity {
                    oid, group, row, ..
                } => {
                    // Newer than what the checkpoint's index holds (records are in sequence
                    // order); settle_parity checks it against the data, which may have lost a
                    // unit the parity covers (a program gone astray leaves no record to roll).
                    self.with_index(|ix, io| ix.insert(io, parity_key(oid, group, row), v as u64))?;
                    touched.insert(oid);
                    rolled_parity.push((oid, group));
                }
                Record::Small { .. } => {
                    self.roll_small_page(v, ckpt_seq, &mut small_seq, &mut touched)?
                }
                Record::Atime { .. } => {
                    // Applied now; the page stays valid until the checkpoint that ends recovery.
                    // A damaged page is passed over like a torn one.
                    if let Some(entries) = self.damaged_as_absent(|s| s.read_atime_page(v))? {
                        for (oid, t) in entries {
                            self.merge_atime_into(oid, t)?;
                        }
                    }
                    self.released.push(v);
                }
                Record::TxnLog { txn, .. } | Record::TxnDone { txn, .. } => {
                    txns.entry(txn).or_default().add(seq, v, &rec)
                }
                _ => {}
            }
        }
        self.drop_earlier_incarnations(&touched, &rolled_at)?;
        // An extension over a unit that may still hold truncated bytes past the old end is
        // undone: the write was not flushed (its onode would have followed its units), so
        // the object may keep the length it had before it, and its units past that go.
        let mut undo: FxHashMap<Oid, u64> = FxHashMap::default();
        for ((oid, _), from) in stale_tails {
            let e = undo.entry(oid).or_insert(from);
            *e = (*e).min(from);
        }
        for (oid, from) in undo {
            if let Some(c) = self.onode_unless_lost(oid)? {
                if c.onode.logical_length > from {
                    c.onode.logical_length = from;
                    c.dirty = true;
                    self.recovery.extensions_undone += 1;
                }
            }
        }
        // Data of objects that do not exist (created after the checkpoint, never flushed) is
        // garbage; lengths and used bytes follow the data.
        // A chunk comes back whole: its newest complete generation.
        self.settle_chunks(chunk_units, &cuts, &mut touched)?;
        let mut groups: FxHashSet<(Oid, u64)> = FxHashSet::default();
        // Entries of objects the checkpoint holds no onode of (a checkpoint committed in the
        // middle of a removal left them; found with metadata copies, seed 540809612015953366:
        // a removed object's old units came back when it was written again) go too, unless
        // roll-forward brought the onode back.
        for oid in orphans {
            if !touched.contains(&oid) && self.onode_unless_lost(oid)?.is_none() {
                self.settle_object(oid, None)?;
            }
        }
        for &oid in &touched {
            self.settle_object(oid, stored_len.get(&oid).copied())?;
            if self.onode_unless_lost(oid)?.is_some() {
                if let Some((k, _)) = self.protection(oid)? {
                    let units = self
                        .onode_mut(oid)?
                        .onode
                        .logical_length
                        .div_ceil(self.unit as u64);
                    groups.insert((oid, units.saturating_sub(1) / k as u64));
                }
            }
        }
        for &(oid, u) in rolled_at.keys() {
            if self.onode_unless_lost(oid)?.is_some() {
                if let Some((k, _)) = self.protection(oid)? {
                    groups.insert((oid, u / k as u64));
                }
            }
        }
        for (oid, g) in rolled_parity {
            if self.onode_unless_lost(oid)?.is_some() && self.protection(oid)?.is_some() {
                groups.insert((oid, g));
            }
        }
        // Extents a checkpoint committed ahead of their object's onode: a GC-requested
        // checkpoint writes the index (with the extents of the units already programmed) but
        // only the onodes whose data is all on flash, so an object whose flush a power cut
        // interrupted may have extents its durable onode does not account for (used bytes 0,
        // units past its length, which a later extension would expose). Roll-forward does not
        // see them (they are older than the checkpoint): settle every object whose extents
        // disagree with its onode's used bytes.
        let mut all =
            self.with_index(|ix, io| ix.range(io, &IndexKey::MIN, &IndexKey::MAX, usize::MAX))?;
        // Likewise every object with extents past its length: a shrinking truncate writes its
        // onode before it drops the units past the new length, and a checkpoint GC asks for
        // during that write commits the index with them still in it (and the onode's used
        // bytes still counting them), so after a crash before the next checkpoint they would
        // stay mapped past the length, and a later growing write would read their stale bytes
        // back into the object (found by the model test's exact check after a clean reopen).
        let mut units_of: FxHashMap<u128, (u64, u64)> = FxHashMap::default();
        for (k, v) in &all {
            if k.kind == KIND_DATA {
                let l = extent(*v).1 as u64;
                let e = units_of.entry(k.oid).or_default();
                e.0 += l;
                e.1 = e.1.max(k.offset + l);
            }
        }
        let mut ahead = false;
        let unit = self.unit as u64;
        // Only a checkpoint GC asked for can be ahead of onodes: after a whole one (byte 38),
        // the objects written since are the touched ones, settled above. Loading every onode
        // made a clean reopen of 100,000 objects read every descriptor page (docs/PERFORMANCE.md,
        // "Recovery": 32.8 s virtual instead of 0.17 s).
        if page.get(38) == Some(&1) {
            units_of.clear();
        }
        for (o, (units, end)) in units_of {
            let oid = Oid::from_u128(o);
            if touched.contains(&oid) {
                continue;
            }
            let Some(c) = self.onode_unless_lost(oid)? else {
                continue;
            };
            let past_length = end > c.onode.logical_length.div_ceil(unit);
            if c.onode.used_bytes != units * unit || past_length {
                self.settle_object(oid, None)?;
                ahead = true;
            }
        }
        if ahead {
            all =
                self.with_index(|ix, io| ix.range(io, &IndexKey::MIN, &IndexKey::MAX, usize::MAX))?;
        }
        // Rebuild the FML's valid units from what the store references.
        let meta: FxHashSet<u32> = nodes.iter().copied().chain([ckpt_vpa]).collect();
        for n in nodes {
            if let Err(e) = self.fml.mark_valid(Vpa(n)) {
                return Err(self.stale_checkpoint_or(refused(e), Some(n), (ckpt_vpa, ckpt_seq)));
            }
        }
        self.mark_valid(ckpt_vpa)?;
        // A data or parity unit past its block's write pointer was programmed astray (a
        // misdirected write left its page erased): lost like a unit GC could not read, so its
        // reads fail (or parity rebuilds it), rather than the whole image refused. So is one in
        // a block the device now calls bad: when that block's first program went astray and
        // its next one failed, nothing in it was programmed and it opens as bad (`ossd torture
        // --reliability 1 --fill 80`, seed 6581080886212412037).
        let mut astray = Vec::new();
        let mut stale = Vec::new();
        let mut resolved: FxHashSet<u32> = FxHashSet::default();
        for (k, v) in &all {
            for (w, _) in unit_refs(k, *v) {
                if resolved.contains(&w) {
                    continue;
                }
                match self.fml.mark_valid(Vpa(w)) {
                    Ok(()) => {}
                    Err(
                        fml::MarkValidError::NeverProgrammed { .. }
                        | fml::MarkValidError::InBadBlock { .. },
                    ) => astray.push(w),
                    Err(fml::MarkValidError::ReferencedTwice { .. }) => {
                        self.resolve_twice(w, &all, meta.contains(&w), &mut stale)?;
                        resolved.insert(w);
                    }
                    Err(e) => return Err(refused(e)),
                }
            }
        }
        for v in astray {
            self.recovery.units_damaged += 1;
            self.mark_lost(v)?;
        }
        let pages: Vec<u32> = self.desc.keys().chain(self.packs.keys()).copied().collect();
        for p in pages {
            match self.fml.mark_valid(Vpa(p)) {
                Err(fml::MarkValidError::ReferencedTwice { .. }) if !resolved.contains(&p) => {
                    // A data or parity reference to a page rewritten since as this one.
                    let refs = refs_to(&all, p);
                    if refs.is_empty() {
                        let e =
                            recovery_corrupted(format!("unit {p} is referenced twice"), Some(p));
                        return Err(self.stale_checkpoint_or(e, Some(p), (ckpt_vpa, ckpt_seq)));
                    }
                    stale.extend(refs);
                }
                Err(e) => {
                    return Err(self.stale_checkpoint_or(refused(e), Some(p), (ckpt_vpa, ckpt_seq)))
                }
                Ok(()) => {}
            }
        }
        for r in stale {
            self.recovery.units_damaged += 1;
            self.map_lost(r)?;
        }
        // Descriptor pages roll-forward emptied are still referenced by the durable checkpoint:
        // valid until the next one, like every unit awaiting release.
        for r in self.released.clone() {
            if !self.fml.is_valid(Vpa(r)) {
                self.mark_valid(r)?;
            }
        }
        // Units rebuilt before their group was cut are written now that the FML knows which
        // units are valid, so the parity recomputed next covers them.
        self.rewrite_held_rebuilt()?;
        // Parity a crash left behind its data is recomputed (written by the checkpoint's flush).
        self.settle_parity(groups)?;
        // A committed transaction a power cut interrupted is installed again from its log
        // (docs/DESIGN.md "Transactions"), before the checkpoint that makes the log unneeded.
        self.finish_committed(txns)?;
        // Make what was rolled forward part of a new checkpoint, so the next recovery starts
        // here and everything pinned for this one can go.
        self.recovery.done_ns = self.now();
        self.flush_all()?;
        self.make_room_for_recovery_checkpoint()?;
        self.checkpoint()?;
        Ok(())
    }

    /// Drops from `later` a data or parity unit whose payload reads back without a device
    /// error but fails the checksum in its record: a torn program whose record came out whole
    /// (docs/RELIABILITY.md, finding 38). It was in flight at the cut, never part of a
    /// completed FLUSH, and its older version is the durable one; rolled forward, every read
    /// of it would fail. Roll-forward maps data and parity units from their records alone;
    /// the other kinds' pages are read whole and checked as they are applied.
    ///
    /// Units are programmed in sequence order, so the torn one is the host's newest. The walk
    /// goes down from the top of `later` and stops at the first whole data unit the host wrote
    /// (not a GC copy): above the torn unit there can be only what a recovery cut short before
    /// its checkpoint wrote (GC copies, parity, metadata). Below it, a payload that fails its
    /// checksum is rot, not a torn program: it is kept, and reads of it fail. Returns how many
    /// were dropped.
    fn pass_over_torn(&mut self, later: &mut Vec<(u64, u32, Record)>) -> Result<u64, OsdError> {
        let mut page = vec![0u8; self.unit];
        let mut torn = FxHashSet::default();
        for &(_, v, ref r) in later.iter().rev() {
            let host_data = matches!(r, Record::Data { moved: false, .. });
            if !matches!(r, Record::Data { .. } | Record::Parity { .. }) {
                continue;
            }
            if self.torn_with_whole_record(v, &mut page)? {
                torn.insert(v);
            } else if host_data {
                break;
            }
        }
        later.retain(|l| !torn.contains(&l.1));
        Ok(torn.len() as u64)
    }

    /// Whether unit `v` reads back without a device error, its record whole and its payload
    /// failing the record's checksum (see [`Self::pass_over_torn`]).
    fn torn_with_whole_record(&mut self, v: u32, page: &mut [u8]) -> Result<bool, OsdError> {
        let mut oob = [0u8; RECORD_MAX_BYTES];
        let (t, content) = match self.fml.read(self.now, Vpa(v), page, &mut oob) {
            Ok(x) => x,
            Err(e @ FmlError::Flash(FlashError::PowerLoss)) => return Err(OsdError::Device(e)),
            Err(_) => return Ok(false),
        };
        self.now = self.now.max(t);
        Ok(match Record::decode_sealed(&oob) {
            Ok(Some(s)) => {
                content != Content::Erased && content_crc(content, page) != Some(s.payload_crc)
            }
            _ => false,
        })
    }

    /// Notes `v`, below its block's write pointer, as damaged when neither its own record nor
    /// (for a unit holding the copy of the one before) its copy's reads whole: a page a
    /// program never finished, or a fault destroyed. Only the newest such unit is kept.
    fn note_scan_damage(&mut self, v: u32) {
        if self.scan_damage.is_none() && matches!(self.scan_record(v), (None, None)) {
            self.scan_damage = Some(v);
        }
    }

    /// Recovery's reading of a unit written after the checkpoint: a unit that is unreadable,
    /// fails its checksum or does not decode is passed over as not written (`None`), as torn
    /// programs always were; a device failure (a power cut during recovery) is an error.
    pub(super) fn damaged_as_absent<T>(
        &mut self,
        read: impl FnOnce(&mut Self) -> Result<T, OsdError>,
    ) -> Result<Option<T>, OsdError> {
        match read(self) {
            Ok(x) => Ok(Some(x)),
            Err(e @ (OsdError::Device(_) | OsdError::Internal(_))) => Err(e),
            Err(_) => {
                self.recovery.units_damaged += 1;
                Ok(None)
            }
        }
    }

    /// The refusal `e` of a metadata unit (`unit`: an index node, a descriptor or small-object
    /// page) the checkpoint recovery started from references, unless that unit's block was
    /// erased and written again after that checkpoint. GC erases no block holding metadata the
    /// durable checkpoint references before a newer checkpoint is written, so then the
    /// checkpoint found is not the newest: the newest was lost (a page failure or flips past
    /// the ECC on a checkpoint without a copy), and recovering from an older one would bring
    /// back a state whose units are gone (`ossd torture --stack ofs --faults all --fill 80
    /// --seed 58`, seeds 6172477060083096476 and 7892539934858586374: "unit 386 was never
    /// programmed"). The image is refused as such, naming the newest unit the scan for the
    /// checkpoint found damaged (the lost checkpoint's, unless a newer unit is damaged too), or
    /// none when it found none.
    fn stale_checkpoint_or(
        &mut self,
        e: OsdError,
        unit: Option<u32>,
        (ckpt_vpa, ckpt_seq): (u32, u64),
    ) -> OsdError {
        let Some(u) = unit else { return e };
        if !self.written_since(u, ckpt_seq) {
            return e;
        }
        recovery_corrupted(
            format!(
                "the newest checkpoint is lost: the one found (unit {ckpt_vpa}, sequence \
                 {ckpt_seq}) references unit {u}, whose block was erased and written again since"
            ),
            self.scan_damage,
        )
    }

    /// Whether the block holding unit `u` was erased after the record numbered `seq` was
    /// written: it is empty, or its first readable record is newer (units of a block are
    /// programmed in sequence order).
    fn written_since(&mut self, u: u32, seq: u64) -> bool {
        let layout = *self.fml.layout();
        let id = layout.superblock_of(Vpa(u));
        let Some(b) = self.fml.blocks().get(id as usize).copied() else {
            return false;
        };
        if b.state == fml::BlockState::Bad {
            return false;
        }
        if b.next == 0 {
            return true;
        }
        (0..b.next)
            .find_map(|off| self.record_at(layout.vpa(id, off).0))
            .is_some_and(|r| r.seq() > seq)
    }

    /// Recovery marks a unit it found referenced as valid; a reference the flash cannot back
    /// (never programmed, in a bad block, or twice) means the image is corrupted.
    pub(super) fn mark_valid(&mut self, v: u32) -> Result<(), OsdError> {
        self.fml.mark_valid(Vpa(v)).map_err(refused)
    }

    /// Unit `w` is referenced twice (`meta`: once by the checkpoint or an index node). The
    /// checkpoint's index may name a unit whose page was erased and programmed again since:
    /// the newer record that moved the unit away is what roll-forward would have applied, and
    /// a destructive fault made it unreadable (`ossd torture --stack osd --faults all --fill 80
    /// --reliability 1 --seed 53`, seed 9883896752192196473: a data unit the checkpoint mapped
    /// to unit 82, moved, its block erased and unit 82 written again by another object). The
    /// page's own record says whose it is: every other data or parity reference to it is
    /// stale and goes to `stale`, to be dropped as lost (parity rebuilds it, if the object has
    /// any), where before the whole image was refused. A page whose record cannot be read
    /// cannot be told: refused, as before.
    fn resolve_twice(
        &mut self,
        w: u32,
        all: &[(IndexKey, u64)],
        meta: bool,
        stale: &mut Vec<UnitRef>,
    ) -> Result<(), OsdError> {
        let refs = refs_to(all, w);
        let owner = if meta {
            None
        } else {
            let (Some(rec), _) = self.scan_record(w) else {
                return Err(recovery_corrupted(
                    format!("unit {w} is referenced twice and its record cannot be read"),
                    Some(w),
                ));
            };
            refs.iter().position(|r| r.named_by(&rec))
        };
        if owner.is_none() && !meta {
            // No reference is its owner's: the page is some other unit's, valid only if a
            // descriptor page reference marks it again below.
            self.fml.invalidate(Vpa(w));
        }
        stale.extend(
            refs.into_iter()
                .enumerate()
                .filter(|&(i, _)| Some(i) != owner)
                .map(|(_, r)| r),
        );
        Ok(())
    }

    /// Drops reference `r` as lost: the data unit is mapped as lost (its reads fail, or parity
    /// rebuilds it), the parity unit's entry removed (its group has one parity unit fewer).
    pub(super) fn map_lost(&mut self, r: UnitRef) -> Result<(), OsdError> {
        match r {
            UnitRef::Data(oid, u) => {
                self.unmap(oid, u)?;
                self.with_index(|ix, io| ix.insert(io, data_key(oid, u), pack(LOST, 1)))?;
            }
            UnitRef::Parity(k) => {
                self.with_index(|ix, io| ix.remove(io, &k))?;
                self.parity_after_loss(Oid::from_u128(k.oid), k.offset >> 8)?;
            }
        }
        Ok(())
    }

    /// Every descriptor page and small-object page the index points to, with its live slots.
    /// Returns the objects the index holds entries of but no onode entry: their data is
    /// garbage unless roll-forward brings an onode back.
    pub(super) fn rebuild_desc_map(&mut self) -> Result<Vec<Oid>, OsdError> {
        let all =
            self.with_index(|ix, io| ix.range(io, &IndexKey::MIN, &IndexKey::MAX, usize::MAX))?;
        let mut orphans = Vec::new();
        // Keys sort by object, then kind: an object's onode entry (kind 0) comes first.
        let mut with_onode = None;
        for (k, _) in &all {
            if k.kind == KIND_ONODE {
                with_onode = Some(k.oid);
            } else if with_onode != Some(k.oid) && orphans.last() != Some(&Oid::from_u128(k.oid)) {
                orphans.push(Oid::from_u128(k.oid));
            }
        }
        for (k, v) in all {
            let pages = match k.kind {
                KIND_ONODE => &mut self.desc,
                KIND_SMALL => &mut self.packs,
                _ => continue,
            };
            let (vpa, slot) = split_loc(v);
            if vpa == LOST {
                // Lost with a page GC could not read (finding 28): its reads fail.
                continue;
            }
            let slot = slot as usize;
            let d = pages.entry(vpa).or_insert_with(|| DescPage {
                live: Vec::new(),
                pinned: false,
            });
            if d.live.len() <= slot {
                d.live.resize(slot + 1, None);
            }
            d.live[slot] = Some(Oid::from_u128(k.oid));
        }
        Ok(orphans)
    }

    /// Applies the onodes of a descriptor page written after the checkpoint, each only over an
    /// older version of itself.
    pub(super) fn roll_descriptor(
        &mut self,
        vpa: u32,
        seen: &mut FxHashMap<Oid, u64>,
        stored_len: &mut FxHashMap<Oid, u64>,
        touched: &mut FxHashSet<Oid>,
        cuts: &mut FxHashMap<Oid, Vec<(u64, u64)>>,
        applied: &mut Vec<Oid>,
    ) -> Result<(), OsdError> {
        let mut page = vec![0u8; self.unit];
        // Torn (never part of a completed FLUSH) or damaged: passed over.
        let Some(onodes) = self.damaged_as_absent(|s| s.read_desc_page(vpa, &mut page, None))?
        else {
            return Ok(());
        };
        let mut live = vec![None; onodes.len()];
        let mut pinned = false;
        for (slot, onode) in onodes.into_iter().enumerate() {
            let oid = onode.oid;
            // An onode written before the checkpoint is in it, or was superseded before it (a
            // removal whose tombstone the checkpoint then dropped): only a copy GC made of its
            // page, dead slots included, can bring it here, and it must not bring the object
            // back.
            if onode.seq <= self.checkpoint_seq {
                continue;
            }
            #[cfg(feature = "mutants")]
            if onode.removed && fml::mutants::on(fml::mutants::Mutant::RemoveNotDurable) {
                continue;
            }
            let current = match seen.get(&oid) {
                Some(&s) => s,
                None => self.onode_unless_lost(oid)?.map_or(0, |c| c.onode.seq),
            };
            if onode.seq <= current {
                continue;
            }
            seen.insert(oid, onode.seq);
            applied.push(oid);
            stored_len.insert(oid, onode.logical_length);
            touched.insert(oid);
            // The slot this onode supersedes: from the cache, or from the index when the
            // cache has evicted the object since an earlier onode of it was rolled forward (a
            // slot left live would point the index back at that older onode when GC moves
            // its page).
            let old = match self.onodes.get(&oid).and_then(|c| c.loc) {
                Some(l) => Some(l),
                None => self
                    .with_index(|ix, io| ix.get(io, &onode_key(oid)))?
                    .map(split_loc),
            };
            if let Some(old) = old {
                self.release_slot(old.0, old.1);
            }
            // Chunk units written before this onode beyond its length are gone.
            let first_gone = if onode.removed {
                0
            } else {
                onode.logical_length.div_ceil(self.unit as u64)
            };
            cuts.entry(oid).or_default().push((onode.seq, first_gone));
            if onode.removed {
                pinned = true;
                self.onodes.remove(&oid);
                self.onodes.insert(
                    oid,
                    CachedOnode {
                        onode,
                        dirty: false,
                        loc: None,
                    },
                );
                self.with_index(|ix, io| ix.remove(io, &onode_key(oid)))?;
                self.drop_units_from(oid, 0)?;
                self.drop_small(oid)?;
            } else {
                let len = onode.logical_length;
                self.onodes.insert(
                    oid,
                    CachedOnode {
                        onode,
                        dirty: false,
                        loc: Some((vpa, slot as u16)),
                    },
                );
                live[slot] = Some(oid);
                let loc = slot_loc(vpa, slot as u16);
                self.with_index(|ix, io| ix.insert(io, onode_key(oid), loc))?;
                // Units past a truncated length are gone.
                // Nothing is valid in the FML yet: this only edits the index.
                self.drop_units_from(oid, len.div_ceil(self.unit as u64))?;
            }
        }
        if pinned || live.iter().any(|s| s.is_some()) {
            self.pinned_desc_pages += pinned as usize;
            self.desc.insert(vpa, DescPage { live, pinned });
        }
        Ok(())
    }

    /// After roll-forward: units of an object created since the checkpoint that are older than
    /// its creation belong to an earlier incarnation of its id, one whose creation a crash
    /// discarded before its onode reached flash. The recovery after that crash took them for
    /// garbage, but when its checkpoint is lost, roll-forward from an older one finds them
    /// again (docs/RELIABILITY.md, finding 34). Every unit the checkpoint's index holds of such
    /// an object is older than it too. A lost extent is kept: unreadable, never zeros.
    fn drop_earlier_incarnations(
        &mut self,
        touched: &FxHashSet<Oid>,
        rolled_at: &FxHashMap<(Oid, u64), (u32, u64)>,
    ) -> Result<(), OsdError> {
        let mut oids: Vec<Oid> = touched.iter().copied().collect();
        oids.sort_unstable();
        for oid in oids {
            let created = match self.onode_unless_lost(oid)? {
                Some(c) => c.onode.created_seq,
                None => continue,
            };
            if created <= self.checkpoint_seq {
                continue;
            }
            let extents = self.with_index(|ix, io| {
                ix.range(io, &data_key(oid, 0), &data_key(oid, u64::MAX), usize::MAX)
            })?;
            let mut older = Vec::new();
            for (k, v) in extents {
                let (start, len) = extent(v);
                if start == LOST {
                    continue;
                }
                for i in 0..len {
                    let u = k.offset + i as u64;
                    let since = rolled_at
                        .get(&(oid, u))
                        .is_some_and(|&(at, seq)| at == start + i && seq > created);
                    if !since {
                        older.push(u);
                    }
                }
            }
            for u in older {
                self.unmap(oid, u)?;
                self.recovery.earlier_incarnation_units += 1;
            }
        }
        Ok(())
    }

    /// After roll-forward: drop data of objects without an onode, and recompute used bytes.
    /// `stored_len` is the length the object's newest onode on flash states, if roll-forward
    /// extended it from data records.
    pub(super) fn settle_object(
        &mut self,
        oid: Oid,
        stored_len: Option<u64>,
    ) -> Result<(), OsdError> {
        // An object whose onode GC lost stays as it is: its reads fail, and nothing says
        // which of its units are durable.
        if self.onode_lost(oid)? {
            return Ok(());
        }
        let exists = self.load_onode(oid)?.is_some();
        if !exists || self.protection(oid)?.is_none() {
            // Parity of objects that are gone, or no longer protected.
            self.drop_parity_from(oid, 0)?;
        }
        if !exists {
            self.drop_small(oid)?;
        } else if self.settle_small(oid, stored_len)? {
            return Ok(());
        }
        let extents = self.with_index(|ix, io| {
            ix.range(io, &data_key(oid, 0), &data_key(oid, u64::MAX), usize::MAX)
        })?;
        if !exists {
            self.onodes.remove(&oid);
            self.with_index(|ix, io| {
                ix.remove_range(io, &data_key(oid, 0), &data_key(oid, u64::MAX))
            })?;
            return Ok(());
        }
        // Units past the recovered length belong to writes that were not durable, and so do
        // units of an object whose durable onode embeds its data (a spill that did not finish).
        let unit = self.unit as u64;
        let c = self.onode_mut(oid)?;
        let keep_units = if c.onode.inline.is_some() {
            0
        } else {
            c.onode.logical_length.div_ceil(unit)
        };
        self.rebuild_before_cut(oid, keep_units)?;
        let dropped = self.drop_units_from(oid, keep_units)?;
        let units: u64 = extents
            .iter()
            .map(|(_, v)| extent(*v).1 as u64)
            .sum::<u64>()
            - dropped;
        let c = self.onode_mut(oid)?;
        if c.onode.used_bytes != units * unit {
            c.onode.used_bytes = units * unit;
            c.dirty = true;
        }
        Ok(())
    }
}

/// A reference of the index to one write unit: a data unit of an object, or a parity unit
/// (its entry's key).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum UnitRef {
    Data(Oid, u64),
    Parity(IndexKey),
}

impl UnitRef {
    /// Whether `rec`, a unit's own record, names this reference's unit.
    fn named_by(&self, rec: &Record) -> bool {
        match (*self, rec) {
            (UnitRef::Data(oid, u), Record::Data { oid: o, offset, .. }) => {
                oid == *o && u == *offset
            }
            (
                UnitRef::Parity(k),
                Record::Parity {
                    oid, group, row, ..
                },
            ) => k == parity_key(*oid, *group, *row),
            _ => false,
        }
    }
}

/// The write units an index entry references, each with the reference: every unit of a data
/// extent (none of a lost one), a parity unit; nothing for other kinds.
pub(super) fn unit_refs(k: &IndexKey, v: u64) -> impl Iterator<Item = (u32, UnitRef)> + '_ {
    let (units, data) = match k.kind {
        KIND_DATA => {
            let (s, l) = extent(v);
            (if s == LOST { 0..0 } else { s..s + l }, true)
        }
        KIND_PARITY => (v as u32..v as u32 + 1, false),
        _ => (0..0, false),
    };
    units.map(move |w| {
        let r = if data {
            let (s, _) = extent(v);
            UnitRef::Data(Oid::from_u128(k.oid), k.offset + (w - s) as u64)
        } else {
            UnitRef::Parity(*k)
        };
        (w, r)
    })
}

/// Every data and parity reference in `all` to unit `w`.
fn refs_to(all: &[(IndexKey, u64)], w: u32) -> Vec<UnitRef> {
    all.iter()
        .flat_map(|(k, v)| unit_refs(k, *v))
        .filter(|&(x, _)| x == w)
        .map(|(_, r)| r)
        .collect()
}

fn recovery_corrupted(what: String, unit: Option<u32>) -> OsdError {
    OsdError::Corrupted {
        what,
        location: "recovery".into(),
        unit,
    }
}

/// A reference the flash cannot back refuses the image, naming the unit.
fn refused(e: fml::MarkValidError) -> OsdError {
    recovery_corrupted(e.to_string(), Some(e.unit()))
}
