//! The data path: the extent map in the index, the data buffer, programming and reading data units.

use super::*;

impl<F: Flash> ObjectStore<F> {
    /// The write unit holding unit `u` of `oid`, if mapped.
    pub(super) fn lookup(&mut self, oid: Oid, u: u64) -> Result<Option<u32>, OsdError> {
        match self.units.get(oid, u) {
            Some(at) => Ok(at),
            None => self.index_lookup(oid, u),
        }
    }

    /// Removes unit `u` from its extent (splitting it); returns the unit it was mapped to.
    pub(super) fn unmap(&mut self, oid: Oid, u: u64) -> Result<Option<u32>, OsdError> {
        match self.in_unit_map(oid, u, |m| m.try_set(oid, u, None))? {
            Some(old) => Ok(old),
            None => self.index_unmap(oid, u),
        }
    }

    /// Maps unit `u` of `oid` to write unit `vpa`, merging with a neighbouring extent when the
    /// write units are consecutive (extent mode).
    pub(super) fn map(&mut self, oid: Oid, u: u64, vpa: u32) -> Result<(), OsdError> {
        if u == 0 {
            // The unit holding a spilled small object's bytes is on flash: its entry can go.
            self.end_spill(oid)?;
        }
        match self.in_unit_map(oid, u, |m| m.try_set(oid, u, Some(vpa)))? {
            Some(_) => Ok(()),
            None => self.index_map(oid, u, vpa),
        }
    }

    /// GC moved unit `u` of `oid` from `from` to `to`: maps it there. False, and nothing
    /// changes, if the object does not map the unit at `from`: the page held a unit that landed
    /// there astray, and counted as valid for the unit whose own program it took the place of
    /// (see [`Self::move_from_copy`]).
    pub(super) fn remap(&mut self, oid: Oid, u: u64, from: u32, to: u32) -> Result<bool, OsdError> {
        match self.in_unit_map(oid, u, |m| m.try_remap(oid, u, from, to))? {
            Some(moved) => Ok(moved),
            None => self.index_remap(oid, u, from, to),
        }
    }

    /// Runs `edit` (an edit of unit `u` of `oid`) on the unit map, holding the object first if
    /// it was not held. `None` when the map is off or cannot hold the object with unit `u`:
    /// the object is then not held (its pending edits brought into the index), and the caller
    /// edits the index.
    fn in_unit_map<T>(
        &mut self,
        oid: Oid,
        u: u64,
        edit: impl Fn(&mut UnitMap) -> Option<T>,
    ) -> Result<Option<T>, OsdError> {
        if let Some(done) = edit(&mut self.units) {
            return Ok(Some(done));
        }
        if !self.units.enabled() {
            return Ok(None);
        }
        if !self.units.holds(oid) && self.units.edited_before(oid) && self.hold_units(oid, u)? {
            if let Some(done) = edit(&mut self.units) {
                return Ok(Some(done));
            }
        }
        // Its first edit, too large, or no room for unit `u`: the object goes through the
        // index (let go of, if it was held).
        self.release_units(oid)?;
        Ok(None)
    }

    /// The index's extents of `oid`, ascending: (first unit, first write unit, units).
    fn object_extents(&mut self, oid: Oid) -> Result<Vec<(u64, u32, u32)>, OsdError> {
        let (first, end) = data_range(oid);
        let entries = self.with_index_raw(|ix, io| ix.range(io, &first, &end, usize::MAX))?;
        Ok(entries
            .iter()
            .map(|(k, v)| {
                let (start, len) = extent(*v);
                (k.offset, start, len)
            })
            .collect())
    }

    /// Holds `oid`, which the unit map does not, loading its extents from the index; false
    /// when the object, up to unit `u`, does not fit the map's budget.
    fn hold_units(&mut self, oid: Oid, u: u64) -> Result<bool, OsdError> {
        // Not held: the index maps the object exactly (the unit map's invariant). Its last
        // extent first, in one descent, so an object too large for the map costs no more than
        // an edit of the index would.
        let (_, end) = data_range(oid);
        let last = self.with_index_raw(|ix, io| ix.floor(io, &end))?;
        let units = match last {
            Some((k, v)) if k.oid == end.oid && k.kind == KIND_DATA => {
                k.offset + u64::from(extent(v).1)
            }
            _ => 0,
        }
        .max(u + 1);
        if !self.units.fits(units, true) {
            return Ok(false);
        }
        let runs = self.object_extents(oid)?;
        if !self.units.fits(units, false) {
            // The budget is full: everything held goes back to the index.
            self.sync_unit_map()?;
            self.units.clear();
        }
        self.units.hold(oid, &runs);
        Ok(true)
    }

    /// Brings the unit map's pending edits into the index, object by object in order, each
    /// object's units ascending (so consecutive edits mostly meet the same leaf). A failure
    /// part way leaves the index behind the map: the store is poisoned, as no commit may then
    /// write the index.
    pub(super) fn sync_unit_map(&mut self) -> Result<(), OsdError> {
        if self.units.pending() == 0 {
            return Ok(());
        }
        for (oid, units) in self.units.take_dirty() {
            self.sync_units(oid, units)?;
        }
        Ok(())
    }

    /// Brings the pending edits of `oid` into the index and lets the unit map go of it (if it
    /// held it).
    fn release_units(&mut self, oid: Oid) -> Result<(), OsdError> {
        let units = self.units.take_object_dirty(oid);
        self.sync_units(oid, units)?;
        self.units.release(oid);
        Ok(())
    }

    /// Sets each of `units` of `oid` in the index to where the unit map has it: unit by unit,
    /// or, once they are a quarter of the object's slots, by rewriting all of the object's
    /// extents in one ascending run ([`Index::replace_range`]), which packs their leaves.
    fn sync_units(&mut self, oid: Oid, units: Vec<(u64, Option<u32>)>) -> Result<(), OsdError> {
        let synced = self.sync_units_inner(oid, units);
        if let Err(e) = &synced {
            self.poison(format!("the index fell behind the unit map at {oid}: {e}"));
        }
        synced
    }

    /// [`Self::sync_units`] before its failure poisons the store.
    fn sync_units_inner(
        &mut self,
        oid: Oid,
        units: Vec<(u64, Option<u32>)>,
    ) -> Result<(), OsdError> {
        if units.is_empty() {
            return Ok(());
        }
        if units.len() as u64 * 4 >= self.units.slots(oid) {
            let extents = self.config.index_mode == IndexMode::Extent;
            let entries: Vec<(IndexKey, u64)> = (self.units.runs(oid, extents).into_iter())
                .map(|(u, start, len)| (data_key(oid, u), pack(start, len)))
                .collect();
            let (first, end) = data_range(oid);
            return self.with_index_raw(|ix, io| ix.replace_range(io, &first, &end, &entries));
        }
        for (u, to) in units {
            self.index_unmap(oid, u)?;
            if let Some(v) = to {
                self.index_map(oid, u, v)?;
            }
        }
        Ok(())
    }

    /// Each object the unit map holds whose units differ from its extents in the index, as an
    /// fsck problem; called with no edit pending, when the two must agree.
    pub(super) fn unit_map_disagreements(&mut self) -> Result<Vec<String>, OsdError> {
        let mut problems = Vec::new();
        for (oid, held) in self.units.held() {
            let indexed: Vec<(u64, u32)> = (self.object_extents(oid)?.into_iter())
                .flat_map(|(first, start, len)| {
                    (0..len).map(move |i| {
                        let at = if start == LOST { LOST } else { start + i };
                        (first + u64::from(i), at)
                    })
                })
                .collect();
            if indexed != held {
                let at = held.iter().zip(&indexed).position(|(a, b)| a != b);
                let at = at.unwrap_or(held.len().min(indexed.len()));
                problems.push(format!(
                    "unit map: object {oid} maps {} units and the index {}, first apart at \
                     mapped unit number {at}",
                    held.len(),
                    indexed.len()
                ));
            }
        }
        Ok(problems)
    }

    /// [`Self::lookup`] in the index.
    fn index_lookup(&mut self, oid: Oid, u: u64) -> Result<Option<u32>, OsdError> {
        let key = data_key(oid, u);
        let hit = self.with_index_raw(|ix, io| ix.floor(io, &key))?;
        Ok(match hit {
            Some((k, v)) if k.oid == key.oid && k.kind == KIND_DATA => {
                let (start, len) = extent(v);
                (u < k.offset + len as u64).then(|| {
                    if start == LOST {
                        LOST
                    } else {
                        start + (u - k.offset) as u32
                    }
                })
            }
            _ => None,
        })
    }

    /// [`Self::unmap`] in the index.
    fn index_unmap(&mut self, oid: Oid, u: u64) -> Result<Option<u32>, OsdError> {
        let key = data_key(oid, u);
        let hit = self.with_index_raw(|ix, io| ix.floor(io, &key))?;
        self.unmap_hit(oid, u, hit)
    }

    /// As [`Self::unmap`], given the floor entry of unit `u`'s key.
    fn unmap_hit(
        &mut self,
        oid: Oid,
        u: u64,
        hit: Option<(IndexKey, u64)>,
    ) -> Result<Option<u32>, OsdError> {
        let key = data_key(oid, u);
        let Some((k, v)) = hit else { return Ok(None) };
        if k.oid != key.oid || k.kind != KIND_DATA {
            return Ok(None);
        }
        let (start, len) = extent(v);
        let end = k.offset + len as u64;
        if u >= end {
            return Ok(None);
        }
        let at = (u - k.offset) as u32;
        // What replaces the extent: its head before unit `u`, its rest after it.
        let mut with = [(k, 0); 2];
        let mut n = 0;
        if at > 0 {
            with[n] = (k, pack(start, at));
            n += 1;
        }
        if u + 1 < end {
            let rest_start = if start == LOST { LOST } else { start + at + 1 };
            with[n] = (data_key(oid, u + 1), pack(rest_start, len - at - 1));
            n += 1;
        }
        // In one descent where the leaf allows it, else the removal and the insertions.
        let edited = self.with_index_raw(|ix, io| {
            ix.splice_in_place(io, &k, &[], |leaf| {
                let i = leaf.find(&k).ok()?;
                Some(Splice {
                    start: i,
                    end: i + 1,
                    with,
                    n,
                })
            })
        })?;
        if !edited {
            self.with_index_raw(|ix, io| {
                ix.remove_found(io, &k)?;
                for &(key, v) in &with[..n] {
                    ix.insert(io, key, v)?;
                }
                Ok(())
            })?;
        }
        Ok(Some(if start == LOST { LOST } else { start + at }))
    }

    /// [`Self::map`] in the index.
    fn index_map(&mut self, oid: Oid, u: u64, vpa: u32) -> Result<(), OsdError> {
        let extents = self.config.index_mode == IndexMode::Extent;
        let (probes, n) = map_probes(oid, u, extents);
        // In one descent where the leaf allows it: the unit alone, or joined to the extent
        // before it, after it, or both (the look-ups, removals and insertion below, in one).
        let key = data_key(oid, u);
        let plan = |leaf: LeafView<'_>| {
            let i = leaf.find(&key).err()?;
            let prev = i.checked_sub(1).and_then(|j| leaf.get(j));
            let next = leaf.get(i);
            let left = extents && joins_left(oid, u, vpa, prev);
            let right = extents && joins_right(oid, u, vpa, next);
            let next_len = next.map_or(0, |(_, v)| extent(v).1);
            let (start, end, entry) = match (left.then_some(prev).flatten(), right) {
                (Some((pk, pv)), right) => {
                    let (s, l) = extent(pv);
                    let len = if right { l + 1 + next_len } else { l + 1 };
                    (i - 1, i + usize::from(right), (pk, pack(s, len)))
                }
                (None, true) => (i, i + 1, (key, pack(vpa, 1 + next_len))),
                (None, false) => (i, i, (key, pack(vpa, 1))),
            };
            Some(Splice {
                start,
                end,
                with: [entry; 2],
                n: 1,
            })
        };
        if self.with_index_raw(|ix, io| ix.splice_in_place(io, &key, &probes[..n], plan))? {
            return Ok(());
        }
        self.with_index_raw(|ix, io| {
            let mut start_key = data_key(oid, u);
            let mut start = vpa;
            let mut len = 1u32;
            if extents && u > 0 {
                if let Some((k, v)) = ix.floor(io, &data_key(oid, u - 1))? {
                    let (s, l) = extent(v);
                    if k.oid == start_key.oid
                        && k.kind == KIND_DATA
                        && k.offset + l as u64 == u
                        && s != LOST
                        && s + l == vpa
                        && l < u32::MAX / 2
                    {
                        ix.remove(io, &k)?;
                        start_key = k;
                        start = s;
                        len = l + 1;
                    }
                }
            }
            if extents {
                if let Some(v) = ix.get(io, &data_key(oid, u + 1))? {
                    let (s, l) = extent(v);
                    if s == vpa + 1 && s != LOST {
                        ix.remove(io, &data_key(oid, u + 1))?;
                        len += l;
                    }
                }
            }
            ix.insert(io, start_key, pack(start, len))?;
            Ok(())
        })
    }

    /// [`Self::remap`] in the index: as [`Self::index_unmap`] then [`Self::index_map`], in
    /// one index edit when the unit is an extent of its own that joins neither neighbour (the
    /// index makes sure the tree ends up exactly as the two would leave it).
    fn index_remap(&mut self, oid: Oid, u: u64, from: u32, to: u32) -> Result<bool, OsdError> {
        let key = data_key(oid, u);
        let hit = self.with_index_raw(|ix, io| ix.floor(io, &key))?;
        let current = hit.and_then(|(k, v)| {
            let (start, len) = extent(v);
            let covers = k.oid == key.oid
                && k.kind == key.kind
                && (k.offset..k.offset + len as u64).contains(&u);
            (covers && start != LOST).then(|| start + (u - k.offset) as u32)
        });
        if current != Some(from) {
            return Ok(false);
        }
        if let Some((k, v)) = hit {
            let (start, len) = extent(v);
            if k == key && len == 1 && start != LOST {
                let extents = self.config.index_mode == IndexMode::Extent;
                let (probes, n) = map_probes(oid, u, extents);
                let alone = |prev: Neighbour, _old: u64, next: Neighbour| {
                    let joins =
                        extents && (joins_left(oid, u, to, prev) || joins_right(oid, u, to, next));
                    (!joins).then_some(pack(to, 1))
                };
                let edited = self
                    .with_index_raw(|ix, io| ix.replace_in_place(io, &key, &probes[..n], alone))?;
                if edited.is_some() {
                    return Ok(true);
                }
            }
        }
        self.unmap_hit(oid, u, hit)?;
        self.index_map(oid, u, to)?;
        Ok(true)
    }

    pub(super) fn hint(&mut self, oid: Oid) -> Result<Hint, OsdError> {
        Ok(hint_of(oid, &self.onode_mut(oid)?.onode))
    }

    /// The update block (stream) the next data unit of `oid` goes to; when placement gives the
    /// object a stream another live object was filling, and `fresh_update_block_per_object` is
    /// on, that stream's update block is closed first, so the object starts a fresh one
    /// (OSSD-13 VI-C).
    pub(super) fn data_stream(&mut self, oid: Oid) -> Result<StreamId, OsdError> {
        let hint = self.hint(oid)?;
        Ok(self.stream_for(&hint))
    }

    /// As [`Self::data_stream`], given the object's placement hint.
    fn stream_for(&mut self, hint: &Hint) -> StreamId {
        let stream = self.placer.choose(hint);
        if let Some(s) = self.placer.take_sealed() {
            if self.config.fresh_update_block_per_object {
                self.fml.seal(s);
            }
        }
        stream
    }

    /// Reads data unit `v`, which the index says holds unit `u` of `oid`, into the scratch
    /// buffer (issued at `now`, completing by `io_done`), and checks that the unit's OOB record
    /// names that object and unit: a unit that reads erased or holds another unit (a
    /// misdirected write) is corruption, never data.
    pub(super) fn read_data_unit(&mut self, oid: Oid, u: u64, v: u32) -> Result<Content, OsdError> {
        let encrypted = self.is_encrypted(oid)?;
        let oob_len = if encrypted {
            ENCRYPTED_RECORD_BYTES
        } else {
            DATA_RECORD_BYTES
        };
        self.scratch_seal = None;
        let mut scratch = std::mem::take(&mut self.scratch);
        let r = read_checked(&mut self.fml, self.now, v, &mut scratch, oob_len);
        self.scratch = scratch;
        let unit = self.unit as u64;
        let what = match self.chunked(oid)? {
            // A chunk unit: name the chunk's logical bytes it is part of.
            Some((_, cu)) => format!(
                "object {oid} bytes {}..{} (compressed chunk {}, stored unit {} of half {})",
                u / (2 * cu) * cu * unit,
                (u / (2 * cu) + 1) * cu * unit,
                u / (2 * cu),
                u % cu,
                (u / cu) % 2
            ),
            None => format!(
                "object {oid} bytes {}..{} (unit {u})",
                u * unit,
                (u + 1) * unit
            ),
        };
        match r {
            Ok((
                t,
                content,
                Record::Data {
                    oid: o,
                    offset,
                    seal,
                    ..
                },
            )) if (o == oid && offset == u) || mutant_misdirected() => {
                self.io_done = self.io_done.max(t);
                if encrypted != seal.is_some() {
                    return Err(OsdError::Corrupted {
                        what: format!(
                            "{what}: the object is {}encrypted and the unit is {}",
                            if encrypted { "" } else { "not " },
                            if seal.is_some() { "sealed" } else { "plain" }
                        ),
                        location: format!("unit {v}"),
                        unit: Some(v),
                    });
                }
                self.scratch_seal = seal;
                Ok(content)
            }
            Ok(_) => Err(OsdError::Corrupted {
                what: format!("{what}: the unit holds another (its OOB record disagrees)"),
                location: format!("unit {v}"),
                unit: Some(v),
            }),
            #[cfg(feature = "mutants")]
            Err(BadUnit::Uncorrectable(_))
                if fml::mutants::on(fml::mutants::Mutant::ZeroFillUnreadable) =>
            {
                self.scratch.fill(0);
                Ok(Content::Bytes)
            }
            // A unit that reads erased or has no record of its own is returned as read.
            #[cfg(feature = "mutants")]
            Err(BadUnit::Corrupted(_)) if mutant_misdirected() => Ok(Content::Bytes),
            Err(e) => Err(e.into_osd(what, v)),
        }
    }

    /// Programs one buffered unit, merging in its old contents when the buffer has only part.
    /// Until it is mapped its object counts as waiting for data ([`Self::ready_onodes`]).
    pub(super) fn program_entry(&mut self, e: Entry<(Oid, u64)>) -> Result<(), OsdError> {
        let outer = self.in_flight.replace(e.key.0);
        let r = self.program_taken(e);
        self.in_flight = outer;
        r
    }

    fn program_taken(&mut self, mut e: Entry<(Oid, u64)>) -> Result<(), OsdError> {
        // One onode look-up for what is read of it before GC may run (and evict it).
        let o = &self.onode_mut(e.key.0)?.onode;
        let (chunked, priority) = (o.compression.codec().is_some(), o.priority);
        if chunked {
            // Every buffered unit of its chunk leaves with it, as one new generation.
            return self.program_chunk(e);
        }
        self.make_room_at(priority)?;
        let full = self.full_mask();
        let protection = self.protection(e.key.0)?;
        let mut old_fill = None;
        if e.mask != full {
            // Before the unit leaves the index: a damaged old copy is rebuilt from its group.
            let old = self.lookup(e.key.0, e.key.1)?;
            let content = self.merge_old(&mut e, old, false)?;
            if protection.is_some() {
                // The delta update needs the old contents the merge just read.
                old_fill = match content {
                    Some(Content::Bytes) => Some(UnitFill::Bytes(self.scratch.clone())),
                    Some(Content::Fingerprint(fp)) => Some(UnitFill::Token(fp)),
                    _ => None,
                };
            }
        }
        let old = self.unmap(e.key.0, e.key.1)?;
        if let Some(p) = protection {
            self.parity_before_program(e.key.0, e.key.1, old, old_fill, p)?;
        }
        // One onode look-up for the placement hint, the length and the encryption (nothing
        // between them loads an onode).
        let (hint, length, encrypted) = {
            let o = &self.onode_mut(e.key.0)?.onode;
            (
                hint_of(e.key.0, o),
                o.logical_length,
                o.wrapped_key.is_some(),
            )
        };
        // A unit programmed while its write is still filling (no buffer) records the length
        // that write leaves: the onode's is set only once every unit is in, and a record with
        // the old one would let roll-forward bring the new bytes back with the old length (an
        // OFS directory bucket then overran its object: found by `ossd torture --stack ofs`).
        let length = match (self.growing, self.writing) {
            (Some(g), Some((o, reached))) if g == e.key.0 && o == g => length.max(reached),
            _ => length,
        };
        let stream = self.stream_for(&hint);
        let seq = self.gc.take_seq();
        let seal = if encrypted {
            // Sealed as it leaves: its nonce is this program's sequence number.
            let Fill::Bytes(b) = &mut e.fill else {
                return Err(OsdError::Internal(format!(
                    "a fingerprint unit of encrypted object {}",
                    e.key.0
                )));
            };
            Some(self.seal_unit(e.key.0, e.key.1, seq, b)?)
        } else {
            None
        };
        let rec = Record::Data {
            oid: e.key.0,
            offset: e.key.1,
            length,
            seq,
            moved: false,
            seal,
            chunk: None,
        };
        let payload = match &e.fill {
            Fill::Bytes(b) => Payload::Bytes(b),
            Fill::Token(fp) => Payload::Fingerprint(*fp),
        };
        let mut oob = [0u8; RECORD_MAX_BYTES];
        let n = rec.encode(payload_crc(payload), &mut oob);
        let written = self.fml.write(self.now, stream, payload, &oob[..n]);
        if written.is_err() {
            if let Some((k, _)) = protection {
                // The old contents already left the group's parity: it no longer matches.
                self.parity_broken(e.key.0, e.key.1 / k as u64);
            }
        }
        let (v, t) = match written {
            Ok(x) => x,
            Err(FmlError::NoSpace { .. }) => return Err(self.no_space(self.unit as u64)),
            Err(e) => return Err(fml_err(e)),
        };
        self.io_done = self.io_done.max(t);
        self.stats.data_units_written += 1;
        self.units_since_ckpt += 1;
        match old {
            Some(o) if o != LOST => {
                self.fml.invalidate(Vpa(o));
            }
            Some(_) => {}
            None => {
                let unit = self.unit as u64;
                let c = self.onode_mut(e.key.0)?;
                c.onode.used_bytes += unit;
                c.dirty = true;
            }
        }
        self.map(e.key.0, e.key.1, v.0)?;
        if let Some(p) = protection {
            let payload = match &e.fill {
                Fill::Bytes(b) => Payload::Bytes(b),
                Fill::Token(fp) => Payload::Fingerprint(*fp),
            };
            self.parity_after_program(e.key.0, e.key.1, payload, p)?;
        }
        self.buf.recycle(e);
        self.bound_dirty_index()
    }

    /// Brings the old contents of the sectors `e` lacks in from `old`, the unit's current write
    /// unit, which is still mapped (a damaged one is rebuilt from parity; `rewrite`: and the
    /// rebuilt copy programmed in its place). Returns what the old unit held when it was read
    /// (its bytes are then in the scratch buffer).
    pub(super) fn merge_old(
        &mut self,
        e: &mut Entry<(Oid, u64)>,
        old: Option<u32>,
        rewrite: bool,
    ) -> Result<Option<Content>, OsdError> {
        let Some(o) = old else {
            if let Fill::Bytes(b) = &mut e.fill {
                for s in 0..self.unit / SECTOR as usize {
                    if e.mask & (1 << s) == 0 {
                        b[s * SECTOR as usize..(s + 1) * SECTOR as usize].fill(0);
                    }
                }
            }
            return Ok(None);
        };
        if o == LOST && self.protection(e.key.0)?.is_none() {
            return Err(OsdError::Corrupted {
                what: format!("unit {} of object {} (lost)", e.key.1, e.key.0),
                location: "GC".into(),
                unit: None,
            });
        }
        self.stats.rmw_reads += 1;
        let content = self.read_data_repairing(e.key.0, e.key.1, o, rewrite)?;
        // The merged unit's program needs this read's bytes.
        self.now = self.now();
        let keep = self.merged_keep(e.key.0, e.key.1 * self.unit as u64, self.unit)?;
        match (&mut e.fill, content) {
            (Fill::Bytes(b), Content::Bytes) => {
                for s in 0..self.unit / SECTOR as usize {
                    if e.mask & (1 << s) == 0 {
                        let r = s * SECTOR as usize..(s + 1) * SECTOR as usize;
                        b[r.clone()].copy_from_slice(&self.scratch[r.clone()]);
                        b[r.start.max(keep)..r.end.max(keep)].fill(0);
                    }
                }
                Ok(Some(content))
            }
            (Fill::Token(fp), Content::Fingerprint(old)) => {
                *fp = fold(old, *fp, e.mask);
                Ok(Some(content))
            }
            _ => Err(OsdError::InvalidArgument(
                "bytes and fingerprint writes mixed in one unit".into(),
            )),
        }
    }

    /// How many of the `n` old bytes a merge brings in from byte `at` of `oid` it keeps: those
    /// before the object's end (or as far as the write filling it reaches); the rest read as
    /// zeros.
    /// On flash they may still hold bytes a shrinking truncate cut off (or a crash's shorter
    /// length left past the end): a copy programmed with them next to new bytes would hold a
    /// sector no write ever made, which a recovery falling back to that copy after a
    /// destructive fault would bring back (docs/RELIABILITY.md).
    pub(super) fn merged_keep(&mut self, oid: Oid, at: u64, n: usize) -> Result<usize, OsdError> {
        let length = self.onode_mut(oid)?.onode.logical_length;
        let end = match self.writing {
            Some((o, end)) if o == oid => length.max(end),
            _ => length,
        };
        Ok(end.saturating_sub(at).min(n as u64) as usize)
    }

    pub(super) fn full_mask(&self) -> u64 {
        let n = self.unit as u64 / SECTOR;
        if n == 64 {
            u64::MAX
        } else {
            (1 << n) - 1
        }
    }

    pub(super) fn evict_one(&mut self) -> Result<(), OsdError> {
        match self.buf.pop_oldest() {
            Some(e) => self.program_entry(e),
            None => Ok(()),
        }
    }

    /// Buffers a write of `len` bytes at `offset` (bytes or a fingerprint token).
    pub(super) fn write_inner(
        &mut self,
        oid: Oid,
        offset: u64,
        len: u64,
        data: Option<&[u8]>,
        token: u64,
    ) -> Result<(), OsdError> {
        self.check_writable()?;
        // The onode is rewritten anyway: take its journaled access time along (OSCM-11 IV).
        if let Some(t) = self.atime_journal.remove(&oid) {
            self.merge_atime_into(oid, t)?;
        }
        if self.onode_mut(oid)?.onode.read_only {
            return Err(OsdError::ReadOnly(oid));
        }
        if self.is_encrypted(oid)? {
            if data.is_none() {
                return Err(OsdError::InvalidArgument(format!(
                    "object {oid} is encrypted: fingerprint-mode writes carry no bytes to encrypt"
                )));
            }
            // Refused before anything is buffered: a unit is sealed when it is programmed.
            self.data_key(oid)?;
        }
        if self.write_inline(oid, offset, len, data)? {
            return Ok(());
        }
        let c = self.onode_mut(oid)?;
        if c.onode.read_only {
            return Err(OsdError::ReadOnly(oid));
        }
        let end = offset
            .checked_add(len)
            .filter(|&e| e < LENGTH_LIMIT_BYTES)
            .ok_or_else(|| too_long(offset.saturating_add(len)))?;
        if len == 0 {
            return Ok(());
        }
        self.decide_auto(oid, offset, data)?;
        let chunked = self.chunked(oid)?.is_some();
        if chunked && data.is_none() {
            return Err(OsdError::InvalidArgument(format!(
                "object {oid} is compressed: fingerprint-mode writes carry no bytes to compress"
            )));
        }
        if self.write_small(oid, offset, data)? {
            return Ok(());
        }
        let length = self.onode_mut(oid)?.onode.logical_length;
        if offset > length {
            self.zero_gap(oid, length, data.is_none())?;
        }
        // Nothing of this write is in its units yet: fill_units advances how far it reaches.
        let writing = self.writing.replace((oid, offset));
        // Only a write that continues the object without a gap records how far it reaches:
        // every byte up to there is then this write's or the object's (a write past the end
        // leaves a gap whose units a crash may bring back stale, found at 80% fill by torture).
        let growing = std::mem::replace(
            &mut self.growing,
            (offset <= length && !self.zeroing_gap).then_some(oid),
        );
        let filled = self.fill_units(oid, offset, end, data, token, chunked);
        self.writing = writing;
        self.growing = growing;
        filled?;
        let unit = self.unit as u64;
        let now = self.now;
        let units = (end - 1) / unit - offset / unit + 1;
        let c = self.onode_mut(oid)?;
        c.onode.logical_length = c.onode.logical_length.max(end);
        c.onode.modified_ns = now;
        c.onode.write_count = c.onode.write_count.saturating_add(units as u32);
        c.dirty = true;
        self.stats.host_write_bytes += len;
        Ok(())
    }

    /// [`Self::write_inner`]'s loop over the units of bytes `offset..end`: each is buffered, or
    /// programmed at once without a buffer.
    fn fill_units(
        &mut self,
        oid: Oid,
        offset: u64,
        end: u64,
        data: Option<&[u8]>,
        token: u64,
        chunked: bool,
    ) -> Result<(), OsdError> {
        let unit = self.unit as u64;
        let mut u = offset / unit;
        let mut consumed = 0usize;
        while u * unit < end {
            let b0 = offset.max(u * unit) - u * unit;
            let b1 = end.min((u + 1) * unit) - u * unit;
            if self.buf.capacity() > 0 && self.buf.get((oid, u)).is_none() && self.buf.is_full() {
                self.evict_one()?;
            }
            let aligned = b0.is_multiple_of(SECTOR) && b1.is_multiple_of(SECTOR);
            let mut e = match self.buf.take((oid, u)) {
                Some(e) => e,
                None => self.buf.fresh((oid, u), data.is_some(), self.unit),
            };
            if matches!(e.fill, Fill::Bytes(_)) != data.is_some() {
                return Err(OsdError::InvalidArgument(
                    "bytes and fingerprint writes mixed in one object unit".into(),
                ));
            }
            let s0 = b0 / SECTOR;
            let s1 = b1.div_ceil(SECTOR);
            let mask = (((1u128 << (s1 - s0)) - 1) as u64) << s0;
            if !aligned && e.mask & mask != mask {
                // A write of part of a sector: bring the unit's old contents in first.
                if chunked {
                    self.merge_old_chunked(&mut e)?;
                } else {
                    let old = self.lookup(oid, u)?;
                    self.merge_old(&mut e, old, true)?;
                }
                e.mask = self.full_mask();
            }
            match (&mut e.fill, data) {
                (Fill::Bytes(b), Some(src)) => {
                    let n = (b1 - b0) as usize;
                    b[b0 as usize..b1 as usize].copy_from_slice(&src[consumed..consumed + n]);
                    consumed += n;
                }
                (Fill::Token(fp), None) => {
                    *fp = if mask == self.full_mask() {
                        unit_fingerprint(oid, u, token)
                    } else {
                        fold(*fp, token, mask)
                    };
                }
                _ => unreachable!("checked above"),
            }
            e.mask |= mask;
            self.writing = Some((oid, end.min((u + 1) * unit)));
            if self.buf.capacity() == 0 {
                self.program_entry(e)?;
            } else {
                self.buf.put_back(e);
            }
            u += 1;
        }
        Ok(())
    }

    /// The object grows past `length`: the rest of the unit holding its end must read as zeros,
    /// whatever stale bytes an earlier truncate (or a crash) left there. Not for a fingerprint
    /// write (`fingerprint`, the lab's): a fingerprint stands for a unit's contents and holds no
    /// bytes to go stale, and zeros written as bytes into the unit would make the merge of a
    /// fingerprint unit refuse it as bytes and fingerprints mixed (`ossd run --stack ossd
    /// --device rawssd --workload zipf --set workload.read_fraction=0.5 --set utilisation=0.8`
    /// failed so at request 202,459, a write past the end of the last, partial object).
    pub(super) fn zero_gap(
        &mut self,
        oid: Oid,
        length: u64,
        fingerprint: bool,
    ) -> Result<(), OsdError> {
        if fingerprint {
            return Ok(());
        }
        if let Some((_, cu)) = self.chunked(oid)? {
            return self.zero_chunk_gap(oid, length, cu);
        }
        let unit = self.unit as u64;
        let u = length / unit;
        let tail = length % unit;
        if tail == 0 {
            return Ok(());
        }
        let buffered = self
            .buf
            .get((oid, u))
            .map(|e| matches!(e.fill, Fill::Bytes(_)));
        if buffered == Some(false) || (buffered.is_none() && self.lookup(oid, u)?.is_none()) {
            // Fingerprint units, and units never written (they read as zeros), need nothing.
            return Ok(());
        }
        let zeros = vec![0u8; (unit - tail) as usize];
        // The zeros do not grow the object: a unit they program records its length as it is.
        self.zeroing_gap = true;
        let zeroed = self.write_inner(oid, length, unit - tail, Some(&zeros), 0);
        self.zeroing_gap = false;
        zeroed?;
        // Zeroing is not writing: the length stays where it was (the caller sets the new one).
        self.onode_mut(oid)?.onode.logical_length = length;
        self.stats.host_write_bytes -= unit - tail;
        Ok(())
    }

    /// Inode embedding (OSCM-11 V-D): an object hinted as an inode keeps up to
    /// [`INLINE_MAX_BYTES`] of data within its onode, saving a page read per inode operation.
    /// Returns whether the write was absorbed there; a write that outgrows the onode spills the
    /// embedded bytes into a data unit first.
    #[expect(
        clippy::unwrap_used,
        reason = "an inline write is a candidate only with its bytes (data.is_some() is part of the condition)"
    )]
    pub(super) fn write_inline(
        &mut self,
        oid: Oid,
        offset: u64,
        len: u64,
        data: Option<&[u8]>,
    ) -> Result<bool, OsdError> {
        let now = self.now;
        let c = self.onode_mut(oid)?;
        let end = offset + len;
        let empty =
            c.onode.inline.is_none() && c.onode.logical_length == 0 && c.onode.used_bytes == 0;
        let candidate = c.onode.inode
            && c.onode.wrapped_key.is_none()
            && c.onode.compression.codec().is_none()
            && !c.onode.compression.undecided()
            && data.is_some()
            && end as usize <= INLINE_MAX_BYTES
            && (c.onode.inline.is_some() || empty);
        if candidate {
            let before = c.onode.inline.clone();
            let d = c.onode.inline.get_or_insert_with(Vec::new);
            if d.len() < end as usize {
                d.resize(end as usize, 0);
            }
            d[offset as usize..end as usize].copy_from_slice(data.unwrap());
            if c.onode.encoded_len() <= ONODE_MAX_BYTES {
                c.onode.logical_length = c.onode.logical_length.max(end);
                c.onode.modified_ns = now;
                c.onode.write_count = c.onode.write_count.saturating_add(1);
                c.dirty = true;
                self.stats.host_write_bytes += len;
                return Ok(true);
            }
            // The user attributes leave no room: data units after all.
            c.onode.inline = before;
        }
        self.spill_inline(oid)?;
        Ok(false)
    }

    /// Moves embedded data out of the onode into a data unit.
    pub(super) fn spill_inline(&mut self, oid: Oid) -> Result<(), OsdError> {
        let c = self.onode_mut(oid)?;
        let Some(d) = c.onode.inline.take() else {
            return Ok(());
        };
        c.dirty = true;
        if !d.is_empty() {
            self.write_inner(oid, 0, d.len() as u64, Some(&d), 0)?;
            self.stats.host_write_bytes -= d.len() as u64;
        }
        Ok(())
    }

    /// Fingerprint-mode write (the lab's workloads): `token` stands for the bytes.
    pub fn write_token(
        &mut self,
        oid: Oid,
        offset: u64,
        len: u64,
        token: u64,
    ) -> Result<(), OsdError> {
        self.write_inner(oid, offset, len, None, token)
    }

    /// Fingerprint-mode read: the fingerprint of each unit the range touches (0 if unwritten).
    #[expect(
        clippy::unwrap_used,
        reason = "the buffered unit taken was found in the buffer just above"
    )]
    pub fn read_fingerprints(
        &mut self,
        oid: Oid,
        offset: u64,
        len: u64,
        out: &mut Vec<u64>,
    ) -> Result<(), OsdError> {
        if self.chunked(oid)?.is_some() {
            return Err(OsdError::InvalidArgument(format!(
                "object {oid} is compressed: it holds bytes, not fingerprints"
            )));
        }
        let unit = self.unit as u64;
        out.clear();
        if len == 0 {
            return Ok(());
        }
        for u in offset / unit..=(offset + len - 1) / unit {
            if let Some(e) = self.buf.get((oid, u)) {
                if let Fill::Token(fp) = e.fill {
                    if e.mask == self.full_mask() {
                        out.push(fp);
                        continue;
                    }
                }
                let e = self.buf.take((oid, u)).unwrap();
                self.program_entry(e)?;
            }
            match self.lookup(oid, u)? {
                None => out.push(0),
                Some(v) => {
                    self.stats.data_units_read += 1;
                    let content = self.read_data_repairing(oid, u, v, true)?;
                    out.push(if let Content::Fingerprint(f) = content {
                        f
                    } else {
                        0
                    });
                }
            }
        }
        self.stats.host_read_bytes += len;
        self.touch(oid)
    }

    /// The write units a fingerprint read of `len` bytes at `offset` of `oid` would read from
    /// flash, answered from memory only (nothing read, no time spent): a device-side
    /// scheduler's look-ahead (BLOCKMGMT-09 3.2). False when the store cannot tell without a flash
    /// read (the onode or an index node is not cached, or the object keeps its data in
    /// small-object pages); units in the data buffer read no flash and are left out.
    pub fn peek_read_units(&self, oid: Oid, offset: u64, len: u64, out: &mut Vec<Vpa>) -> bool {
        match self.onodes.get(&oid) {
            Some(c) if c.onode.compression.codec().is_none() => {}
            _ => return false,
        }
        if self.smalls.contains_key(&oid) {
            return false;
        }
        let unit = self.unit as u64;
        if len == 0 {
            return true;
        }
        for u in offset / unit..=(offset + len - 1) / unit {
            if self.buf.get((oid, u)).is_some() {
                continue;
            }
            if let Some(at) = self.units.get(oid, u) {
                out.extend(at.filter(|&v| v != LOST).map(Vpa));
                continue;
            }
            let key = data_key(oid, u);
            match self.index.floor_cached(&key) {
                None => return false,
                Some(Some((k, v))) if k.oid == key.oid && k.kind == KIND_DATA => {
                    let (start, n) = extent(v);
                    if u < k.offset + n as u64 && start != LOST {
                        out.push(Vpa(start + (u - k.offset) as u32));
                    }
                }
                Some(_) => {}
            }
        }
        true
    }

    pub(super) fn read_unit_into(
        &mut self,
        oid: Oid,
        u: u64,
        b0: usize,
        dst: &mut [u8],
    ) -> Result<(), OsdError> {
        if self.chunked(oid)?.is_some() {
            return self.read_chunk_unit_into(oid, u, b0, dst);
        }
        match self.lookup(oid, u)? {
            None => dst.fill(0),
            Some(v) => {
                self.stats.data_units_read += 1;
                if self.read_data_repairing(oid, u, v, true)? != Content::Bytes {
                    return Err(OsdError::InvalidArgument(format!(
                        "unit {u} of {oid} was written in fingerprint mode"
                    )));
                }
                dst.copy_from_slice(&self.scratch[b0..b0 + dst.len()]);
            }
        }
        Ok(())
    }

    /// Drops every unit of `oid` from `first` on: invalidated in the FML and gone from the
    /// index, an extent straddling `first` keeping its head. Returns the units dropped.
    pub(super) fn drop_units_from(&mut self, oid: Oid, first: u64) -> Result<u64, OsdError> {
        // A compressed object drops whole chunks: `first` becomes the first physical unit of
        // the first chunk wholly past it.
        let first = match self.chunks_from(oid, first)? {
            Some((physical_first, chunk)) => {
                self.drop_chunks_from(oid, chunk)?;
                physical_first
            }
            None => {
                if first == 0 {
                    // A removal: whatever chunk entries the object had go too.
                    self.drop_chunks_from(oid, 0)?;
                }
                first
            }
        };
        let mut dropped = 0u64;
        let mut invalidate = |fml: &mut Fml<F>, s: u32, from: u32, to: u32| {
            for i in from..to {
                if s != LOST {
                    fml.invalidate(Vpa(s + i));
                }
                dropped += 1;
            }
        };
        if first > 0 {
            if let Some((k, v)) =
                self.with_index(|ix, io| ix.floor(io, &data_key(oid, first - 1)))?
            {
                let (s, l) = extent(v);
                if k.oid == oid.as_u128() && k.kind == KIND_DATA && k.offset + l as u64 > first {
                    let keep = (first - k.offset) as u32;
                    invalidate(&mut self.fml, s, keep, l);
                    let head = if s == LOST { LOST } else { s };
                    self.with_index(|ix, io| ix.insert(io, k, pack(head, keep)))?;
                }
            }
        }
        let extents = self.with_index(|ix, io| {
            ix.range(
                io,
                &data_key(oid, first),
                &data_key(oid, u64::MAX),
                usize::MAX,
            )
        })?;
        for (_, v) in extents {
            let (s, l) = extent(v);
            invalidate(&mut self.fml, s, 0, l);
        }
        self.with_index(|ix, io| {
            ix.remove_range(io, &data_key(oid, first), &data_key(oid, u64::MAX))
        })?;
        self.drop_parity_from(oid, first)?;
        Ok(dropped)
    }
}

/// The keys of `oid`'s data extents: from its unit 0 to (excluding) the last unit's key.
fn data_range(oid: Oid) -> (IndexKey, IndexKey) {
    (data_key(oid, 0), data_key(oid, u64::MAX))
}

/// The placement hint of a data unit of object `oid`.
fn hint_of(oid: Oid, o: &Onode) -> Hint {
    Hint {
        kind: PageKind::Data,
        oid,
        object_bytes: o.logical_length.max(o.expected_size),
        write_count: o.write_count,
        priority: o.priority,
    }
}

/// The keys [`ObjectStore::map`] looks up around unit `u` before it inserts (the extent
/// before, the extent after), and how many there are.
fn map_probes(oid: Oid, u: u64, extents: bool) -> ([IndexKey; 2], usize) {
    let after = data_key(oid, u + 1);
    match (extents, u.checked_sub(1)) {
        (false, _) => ([after; 2], 0),
        (true, Some(b)) => ([data_key(oid, b), after], 2),
        (true, None) => ([after; 2], 1),
    }
}

/// Whether unit `u`, going to write unit `vpa`, extends the extent `prev` (the floor entry of
/// unit `u - 1`).
fn joins_left(oid: Oid, u: u64, vpa: u32, prev: Neighbour) -> bool {
    let Some((k, v)) = prev else { return false };
    let (s, l) = extent(v);
    u > 0
        && k.oid == oid.as_u128()
        && k.kind == KIND_DATA
        && k.offset + l as u64 == u
        && s != LOST
        && s + l == vpa
        && l < u32::MAX / 2
}

/// Whether unit `u`, going to write unit `vpa`, joins the extent `next` if it starts at unit
/// `u + 1`.
fn joins_right(oid: Oid, u: u64, vpa: u32, next: Neighbour) -> bool {
    let Some((k, v)) = next else { return false };
    let (s, _) = extent(v);
    k == data_key(oid, u + 1) && s == vpa + 1 && s != LOST
}

/// Mutant [`fml::mutants::Mutant::MisdirectedUncaught`]: a unit's OOB record is not checked
/// against the object and unit read (always false without the feature `mutants`).
#[cfg(feature = "mutants")]
fn mutant_misdirected() -> bool {
    fml::mutants::on(fml::mutants::Mutant::MisdirectedUncaught)
}

#[cfg(not(feature = "mutants"))]
#[inline(always)]
fn mutant_misdirected() -> bool {
    false
}
