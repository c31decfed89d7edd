//! fsck: the structure check and the media scan (every live unit read and checked against its
//! checksum).

use super::*;

/// What fsck found.
#[derive(Clone, Debug, Default, Serialize)]
pub struct FsckReport {
    /// Objects with an onode in the index, partition roots included.
    pub objects: u64,
    /// Entries in the index.
    pub index_entries: u64,
    /// Inconsistencies of the structure, one sentence each; empty when it is sound.
    pub problems: Vec<String>,
    /// Units that failed their checksum or could not be read ([`ObjectStore::fsck`] only).
    pub damaged: Vec<String>,
    /// Metadata units or their copies damaged while the other is whole
    /// ([`OsdConfig::metadata_copies`]): nothing is lost, but that unit has one copy left
    /// until GC moves it or the metadata is written again ([`ObjectStore::fsck`] only).
    pub masked: Vec<String>,
}

impl<F: Flash> ObjectStore<F> {
    /// Whole-store check: [`Self::fsck_structure`], then every live unit is read back and
    /// checked against its checksum ([`FsckReport::damaged`] names each damaged one: the object
    /// and byte range of a data unit, the kind and unit of metadata). Reading every unit costs
    /// device time and flash reads, which is why the lab checks structure only.
    pub fn fsck(&mut self) -> Result<FsckReport, OsdError> {
        let mut report = self.fsck_structure()?;
        if self.recovery.units_damaged > 0 {
            report.damaged.push(format!(
                "recovery passed over {} damaged units (checkpoints, or descriptor, \
                 small-object or atime pages written since; their contents are lost)",
                self.recovery.units_damaged
            ));
        }
        self.scan_media(&mut report)?;
        self.scan_copies(&mut report)?;
        Ok(report)
    }

    /// Reads every valid metadata unit and its copy on their own (reads elsewhere take the copy
    /// silently) and lists in [`FsckReport::masked`] each pair of which one is damaged. A unit
    /// whose record cannot be read at all is checked as metadata (data units are read by
    /// [`Self::scan_media`]).
    fn scan_copies(&mut self, report: &mut FsckReport) -> Result<(), OsdError> {
        if !self.copies {
            // A store that never kept copies: the unit after a metadata unit is another unit.
            return Ok(());
        }
        let layout = *self.fml.layout();
        let mut page = vec![0u8; self.unit];
        for id in 0..layout.superblocks {
            let b = self.fml.blocks()[id as usize];
            for off in 0..b.next {
                let v = layout.vpa(id, off).0;
                if !self.fml.is_valid(Vpa(v)) {
                    continue;
                }
                let kind = match self.sealed_at(v) {
                    Some(s) if !s.record.has_copy() => continue,
                    Some(s) => s.record.kind_name(),
                    None => "unit",
                };
                let Some(c) = copy_address(&self.fml, v) else {
                    continue;
                };
                let own = read_checked(&mut self.fml, self.now, v, &mut page, SCAN_RECORD_BYTES);
                let copy = read_meta_checked(
                    &mut self.fml,
                    &mut self.stats,
                    (self.now, v),
                    &mut page,
                    SCAN_RECORD_BYTES,
                    |r, _| r.has_copy(),
                );
                // `read_meta_checked` took the copy only if the unit itself failed; the copy
                // alone is checked with the record it must carry.
                let copy_ok = match own {
                    Ok(_) => self.copy_whole(c, v, &mut page),
                    Err(BadUnit::Device(e)) => return Err(OsdError::Device(e)),
                    Err(_) => copy.is_ok(),
                };
                match (own.is_ok(), copy_ok) {
                    (true, true) => {}
                    // The next unit is a unit of its own, whole: this one was written without
                    // a copy (before the store kept copies, or its pair did not fit).
                    (true, false) if self.sealed_at(c).is_some() => {}
                    (true, false) => report.masked.push(format!(
                        "the copy (unit {c}) of the {kind} at unit {v} is damaged: one copy left"
                    )),
                    (false, true) => report.masked.push(format!(
                        "the {kind} at unit {v} is damaged; its copy (unit {c}) is whole: one \
                         copy left"
                    )),
                    // Not a unit with a copy: damage the media scan reports (or a unit of
                    // a store written without copies).
                    (false, false) => {}
                }
            }
        }
        self.now = self.now();
        Ok(())
    }

    /// Whether unit `c` is a whole copy of metadata unit `of`.
    fn copy_whole(&mut self, c: u32, of: u32, page: &mut [u8]) -> bool {
        let mut oob = [0u8; SCAN_RECORD_BYTES];
        let Ok((t, content)) = self.fml.read(self.now, Vpa(c), page, &mut oob) else {
            return false;
        };
        self.now = self.now.max(t);
        matches!(Record::decode_copy(&oob, of), Ok(Some(s))
            if content_crc(content, page) == Some(s.payload_crc))
    }

    /// Reads every unit the store references (data extents, descriptor, small-object and atime
    /// pages, the checkpoint; index nodes were read by the structure check) and records each
    /// one that fails its checksum or does not decode. A device failure is an error.
    pub(super) fn scan_media(&mut self, report: &mut FsckReport) -> Result<(), OsdError> {
        let keep = |e: OsdError, report: &mut FsckReport| match e {
            OsdError::Device(_) => Err(e),
            e => {
                report.damaged.push(e.to_string());
                Ok(())
            }
        };
        let all = match self
            .with_index(|ix, io| ix.range(io, &IndexKey::MIN, &IndexKey::MAX, usize::MAX))
        {
            Ok(all) => all,
            Err(e) => return keep(e, report),
        };
        let unit = self.unit as u64;
        for (k, v) in &all {
            if k.kind == KIND_PARITY {
                let oid = Oid::from_u128(k.oid);
                let (g, row) = (k.offset >> 8, k.offset & 0xFF);
                let mut page = vec![0u8; self.unit];
                if let Err(e) = read_checked(
                    &mut self.fml,
                    self.now,
                    *v as u32,
                    &mut page,
                    PARITY_RECORD_BYTES,
                ) {
                    keep(
                        e.into_osd(
                            format_args!("object {oid} parity group {g} row {row}"),
                            *v as u32,
                        ),
                        report,
                    )?;
                }
                continue;
            }
            if k.kind != KIND_DATA {
                continue;
            }
            let oid = Oid::from_u128(k.oid);
            let (s, l) = extent(*v);
            for i in 0..l {
                let u = k.offset + i as u64;
                if s == LOST {
                    report.damaged.push(format!(
                        "object {oid} bytes {}..{} (unit {u}): lost (unreadable when GC moved it)",
                        u * unit,
                        (u + 1) * unit
                    ));
                } else if let Err(e) = self.read_data_unit(oid, u, s + i) {
                    keep(e, report)?;
                }
            }
        }
        let mut page = vec![0u8; self.unit];
        let mut descs: Vec<u32> = self.desc.keys().copied().collect();
        descs.sort_unstable();
        for v in descs {
            if let Err(e) = self.read_desc_page(v, &mut page, None) {
                keep(e, report)?;
            }
        }
        let mut packs: Vec<u32> = self.packs.keys().copied().collect();
        packs.sort_unstable();
        for v in packs {
            if let Err(e) = self.read_small_page(v, None) {
                keep(e, report)?;
            }
        }
        for v in self.atime_pages.clone() {
            if let Err(e) = self.read_atime_page(v) {
                keep(e, report)?;
            }
        }
        if let Some(v) = self.ckpt_unit {
            match read_checked(&mut self.fml, self.now, v, &mut page, META_RECORD_BYTES) {
                Ok((t, _, Record::Checkpoint { .. })) => self.now = self.now.max(t),
                Ok((_, _, r)) => report.damaged.push(format!(
                    "the checkpoint at unit {v} holds a {}",
                    r.kind_name()
                )),
                Err(e) => keep(e.into_osd("checkpoint", v), report)?,
            }
        }
        self.now = self.now();
        Ok(())
    }

    /// The structure check: the index is well formed, every valid unit in the FML is referenced
    /// exactly once (data extents, descriptor pages, index nodes, the checkpoint) and every
    /// referenced unit is valid, and each object's used bytes agree with its extents. Reads
    /// only what the structure needs (index nodes, onodes).
    pub fn fsck_structure(&mut self) -> Result<FsckReport, OsdError> {
        // The buffer's per-object counts, before the checkpoint below empties it.
        let buffer_counts_agree = self.buf.counts_agree();
        // Check a checkpointed state: every reference then is on flash.
        if self.index.is_dirty()
            || self.units.pending() > 0
            || !self.buf.is_empty()
            || self.small_dirty_bytes > 0
            || self.onodes.values().any(|c| c.dirty)
        {
            self.checkpoint()?;
        }
        let mut problems = Vec::new();
        if !buffer_counts_agree {
            problems.push(
                "write buffer: an object's count of buffered units disagrees with the buffer"
                    .into(),
            );
        }
        self.fml
            .check()
            .unwrap_or_else(|e| problems.push(format!("FML: {e}")));
        let mut idx = std::mem::replace(&mut self.index, Index::new(self.unit, 0));
        let checked = {
            let mut io = self.io();
            idx.check(&mut io)
        };
        self.index = idx;
        let (entries, nodes) = match checked {
            Ok(x) => x,
            Err(e) => {
                problems.push(format!("index: {e}"));
                (0, Vec::new())
            }
        };
        let mut refs: FxHashMap<u32, &'static str> = FxHashMap::default();
        let mut add = |v: u32, what: &'static str, problems: &mut Vec<String>| {
            if let Some(prev) = refs.insert(v, what) {
                problems.push(format!("unit {v} referenced as {prev} and as {what}"));
            }
        };
        for n in nodes {
            add(n, "index node", &mut problems);
        }
        if let Some(c) = self.ckpt_unit {
            add(c, "checkpoint", &mut problems);
        }
        // Before the range below lets the unit map go of its objects.
        problems.extend(self.unit_map_disagreements()?);
        let all = match self
            .with_index(|ix, io| ix.range(io, &IndexKey::MIN, &IndexKey::MAX, usize::MAX))
        {
            Ok(all) => all,
            Err(e @ OsdError::Device(_)) => return Err(e),
            Err(e) => {
                // A damaged index node: nothing past it can be checked.
                problems.push(format!("index: {e}"));
                return Ok(FsckReport {
                    objects: 0,
                    index_entries: entries,
                    problems,
                    damaged: Vec::new(),
                    masked: Vec::new(),
                });
            }
        };
        let mut objects = 0u64;
        let mut used: FxHashMap<u128, u64> = FxHashMap::default();
        let mut small_pages: FxHashMap<u32, Vec<(u16, Oid)>> = FxHashMap::default();
        let mut chunks: Vec<(Oid, u64, u64)> = Vec::new();
        for (k, v) in &all {
            match k.kind {
                KIND_DATA => {
                    let (s, l) = extent(*v);
                    *used.entry(k.oid).or_default() += l as u64;
                    if s != LOST {
                        for i in 0..l {
                            add(s + i, "data", &mut problems);
                        }
                    }
                }
                KIND_PARITY => add(*v as u32, "parity", &mut problems),
                KIND_CHUNK => chunks.push((Oid::from_u128(k.oid), k.offset, *v)),
                KIND_ONODE => objects += 1,
                KIND_SMALL => match split_loc(*v) {
                    (LOST, _) => problems.push(format!(
                        "object {}: small object lost with a page GC could read neither copy of",
                        Oid::from_u128(k.oid)
                    )),
                    (page, slot) => small_pages
                        .entry(page)
                        .or_default()
                        .push((slot, Oid::from_u128(k.oid))),
                },
                _ => problems.push(format!("index key of unknown kind {}", k.kind)),
            }
        }
        for v in self.desc.keys() {
            add(*v, "descriptor page", &mut problems);
        }
        for (v, slots) in &small_pages {
            add(*v, "small-object page", &mut problems);
            for (slot, oid) in slots {
                let tracked = self.packs.get(v).and_then(|d| d.live.get(*slot as usize));
                if tracked != Some(&Some(*oid)) {
                    problems.push(format!(
                        "small-object page {v} slot {slot}: the index says object {oid}, the \
                         store tracks {tracked:?}"
                    ));
                }
            }
        }
        for v in self.packs.keys() {
            if !small_pages.contains_key(v) {
                problems.push(format!(
                    "small-object page {v} is tracked but the index points nowhere into it"
                ));
            }
        }
        for v in &self.atime_pages {
            add(*v, "atime page", &mut problems);
        }
        self.check_chunks(&chunks, &mut problems)?;
        let pending: FxHashSet<u32> = self
            .released
            .iter()
            .chain(self.index.pending_frees())
            .copied()
            .collect();
        for (v, what) in &refs {
            if !self.fml.is_valid(Vpa(*v)) {
                problems.push(format!("{what} at unit {v} is not valid in the FML"));
            }
        }
        let valid: u64 = self.fml.blocks().iter().map(|b| b.valid as u64).sum();
        let expected =
            refs.len() as u64 + pending.iter().filter(|v| !refs.contains_key(v)).count() as u64;
        if valid != expected {
            problems.push(format!(
                "{valid} valid units in the FML, {expected} referenced or awaiting release"
            ));
            let total = self.fml.layout().superblocks * self.fml.layout().units_per_superblock;
            let mut oob = [0u8; RECORD_MAX_BYTES];
            let leaked: Vec<u32> = (0..total)
                .filter(|&v| {
                    self.fml.is_valid(Vpa(v)) && !refs.contains_key(&v) && !pending.contains(&v)
                })
                .take(5)
                .collect();
            for v in leaked {
                let rec = self
                    .fml
                    .read(self.now, Vpa(v), &mut [], &mut oob)
                    .ok()
                    .and_then(|_| Record::decode(&oob).ok().flatten());
                problems.push(format!(
                    "unit {v} is valid but nothing references it ({rec:?})"
                ));
            }
        }
        let unit = self.unit as u64;
        let onodes: Vec<(Oid, u64)> = all
            .iter()
            .filter(|(k, _)| k.kind == KIND_ONODE)
            .map(|(k, _)| (Oid::from_u128(k.oid), 0))
            .collect();
        for (oid, _) in onodes {
            // An onode that cannot be read is the media scan's to report.
            let inline = match self.load_onode(oid) {
                Ok(c) => c.is_some_and(|c| c.onode.inline.is_some()),
                Err(e @ OsdError::Device(_)) => return Err(e),
                Err(e) => {
                    problems.push(format!("object {oid}: onode unreadable: {e}"));
                    continue;
                }
            };
            if inline && used.get(&oid.as_u128()).is_some_and(|&u| u > 0) {
                problems.push(format!(
                    "object {oid} embeds its data in the onode but also owns data units"
                ));
            }
            let flushed_or_cached = self
                .load_onode(oid)?
                .map(|c| (c.onode.used_bytes, c.onode.logical_length));
            let units = used.get(&oid.as_u128()).copied().unwrap_or(0);
            let small = match self.load_small(oid) {
                Ok(s) => s.map(|s| s.bytes.len() as u64),
                Err(e @ OsdError::Device(_)) => return Err(e),
                Err(e) => {
                    problems.push(format!("small object {oid}: unreadable: {e}"));
                    continue;
                }
            };
            if let (Some(bytes), Some((u, length))) = (small, flushed_or_cached) {
                if inline || units > 0 || u != bytes || length != bytes {
                    problems.push(format!(
                        "small object {oid}: {bytes} bytes packed, length {length}, used \
                         bytes {u}, {units} data units, inline {inline}"
                    ));
                }
                continue;
            }
            if let Some((u, _)) = flushed_or_cached {
                if u != units * unit {
                    problems.push(format!(
                        "object {oid}: used bytes {u}, extents hold {} units",
                        units
                    ));
                }
            }
        }
        Ok(FsckReport {
            objects,
            index_entries: entries,
            problems,
            damaged: Vec::new(),
            masked: Vec::new(),
        })
    }
}
