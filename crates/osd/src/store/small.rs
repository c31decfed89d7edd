//! The small-object buffer (OSCM-11 III-B and V-D): an object shorter than a write unit,
//! written with real bytes, keeps its whole data as one entry of a small-object page shared with
//! other small objects, located through the global index (key kind 2 -> page and slot), instead
//! of each object taking a write unit and an extent of its own.
//!
//! Entries are buffered in memory (one page's worth: a page is written when the dirty entries
//! fill it, and at every FLUSH, before the onodes). Each entry carries its object's whole data,
//! its length and its own sequence number, so recovery can tell a current entry from a stale
//! one in a page GC copied. An object leaves the buffer ("spills" into data units) when a write
//! takes it past [`ObjectStore::small_max`]; objects hinted as inodes use inode embedding
//! instead, and fingerprint-mode writes never pack.

use super::*;
use codec::le;

pub(super) const KIND_SMALL: u8 = 2;
const SMALL_MAGIC: &[u8; 4] = b"OSML";
/// Magic, entry count (u16), two reserved bytes.
const PAGE_HEADER: usize = 8;
/// Object id (u128), sequence number (u64), length (u32).
const ENTRY_HEADER: usize = 28;

/// A small object's data as the store holds it.
pub(super) struct SmallObject {
    pub bytes: Vec<u8>,
    /// Sequence number of the entry holding this version on flash (0 before the first).
    pub seq: u64,
    /// Changed since that entry was written.
    pub dirty: bool,
    /// The durable entry: (small-object page, slot).
    pub loc: Option<(u32, u16)>,
}

pub(super) fn small_key(oid: Oid) -> IndexKey {
    IndexKey {
        oid: oid.as_u128(),
        kind: KIND_SMALL,
        offset: 0,
    }
}

/// Packs entries into a page image of `unit` bytes.
fn encode_page(entries: &[(Oid, u64, &[u8])], unit: usize) -> Vec<u8> {
    let mut page = vec![0u8; unit];
    page[..4].copy_from_slice(SMALL_MAGIC);
    page[4..6].copy_from_slice(&(entries.len() as u16).to_le_bytes());
    let mut at = PAGE_HEADER;
    for (oid, seq, bytes) in entries {
        page[at..at + 16].copy_from_slice(&oid.as_u128().to_le_bytes());
        page[at + 16..at + 24].copy_from_slice(&seq.to_le_bytes());
        page[at + 24..at + 28].copy_from_slice(&(bytes.len() as u32).to_le_bytes());
        at += ENTRY_HEADER;
        page[at..at + bytes.len()].copy_from_slice(bytes);
        at += bytes.len();
    }
    page
}

/// Why a small-object page image did not decode.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub(super) enum SmallPageError {
    /// The page is shorter than its header or lacks the magic.
    #[error("not a small-object page")]
    NotSmallPage,
    /// An entry's header runs past the end of the page.
    #[error("entry {entry} runs past the page")]
    HeaderPastPage {
        /// The entry's position in the page.
        entry: usize,
    },
    /// An entry's bytes run past the end of the page.
    #[error("entry {entry} of {len} bytes runs past the page")]
    BytesPastPage {
        /// The entry's position in the page.
        entry: usize,
        /// Its length in bytes.
        len: usize,
    },
    /// A field read past the end of the page.
    #[error(transparent)]
    Truncated(#[from] le::Truncated),
    /// The unit holds another kind of record.
    #[error("unit holds a {kind} ({content:?})")]
    OtherRecord {
        /// The record's kind.
        kind: &'static str,
        /// What the unit holds.
        content: Content,
    },
}

/// The entries of a page image; an error says what is wrong (the bytes are untrusted).
pub(super) fn decode_page(page: &[u8]) -> Result<Vec<(Oid, u64, Vec<u8>)>, SmallPageError> {
    if page.len() < PAGE_HEADER || &page[..4] != SMALL_MAGIC {
        return Err(SmallPageError::NotSmallPage);
    }
    let count = u16::from_le_bytes([page[4], page[5]]) as usize;
    let mut at = PAGE_HEADER;
    let mut out = Vec::with_capacity(count);
    for i in 0..count {
        if at + ENTRY_HEADER > page.len() {
            return Err(SmallPageError::HeaderPastPage { entry: i });
        }
        let oid = Oid::from_u128(u128::from_le_bytes(le::array_at(page, at)?));
        let seq = le::u64_at(page, at + 16)?;
        let len = le::u32_at(page, at + 24)? as usize;
        at += ENTRY_HEADER;
        if len > page.len() - at {
            return Err(SmallPageError::BytesPastPage { entry: i, len });
        }
        out.push((oid, seq, page[at..at + len].to_vec()));
        at += len;
    }
    Ok(out)
}

impl<F: Flash> ObjectStore<F> {
    /// The longest object the buffer packs: one entry alone in a page.
    pub(super) fn small_max(&self) -> u64 {
        (self.unit - PAGE_HEADER - ENTRY_HEADER) as u64
    }

    /// The small object `oid`, loaded from its page if it is not cached; `None` if the object
    /// is not small (or does not exist).
    pub(super) fn load_small(&mut self, oid: Oid) -> Result<Option<&mut SmallObject>, OsdError> {
        if !self.smalls.contains_key(&oid) {
            if self.spilling.contains(&oid) {
                // Spilled: the entry still in the index is only the durable state's.
                return Ok(None);
            }
            let Some(loc) = self.with_index_raw(|ix, io| ix.get(io, &small_key(oid)))? else {
                return Ok(None);
            };
            let (vpa, slot) = split_loc(loc);
            if vpa == LOST {
                return Err(lost_page_error("small object", oid));
            }
            let entries = self.read_small_page(vpa, Some((slot, oid)))?;
            let Some((found, seq, bytes)) = entries.into_iter().nth(slot as usize) else {
                return Err(OsdError::Corrupted {
                    what: format!("small-object page has no slot {slot}"),
                    location: format!("unit {vpa}"),
                    unit: Some(vpa),
                });
            };
            if found != oid {
                return Err(OsdError::Corrupted {
                    what: format!("slot {slot} holds object {found}, the index says {oid}"),
                    location: format!("small-object page at unit {vpa}"),
                    unit: Some(vpa),
                });
            }
            self.trim_small_cache();
            self.smalls.insert(
                oid,
                SmallObject {
                    bytes,
                    seq,
                    dirty: false,
                    loc: Some((vpa, slot)),
                },
            );
        }
        Ok(self.smalls.get_mut(&oid))
    }

    /// Whether `oid` (with logical length `length`) is a small object; objects longer than
    /// [`Self::small_max`] never are, which spares them the index lookup.
    pub(super) fn is_small(&mut self, oid: Oid, length: u64) -> Result<bool, OsdError> {
        Ok(length <= self.small_max() && self.load_small(oid)?.is_some())
    }

    /// The entries of the small-object page at `vpa`. With `owner` (slot, object), a page whose
    /// slot holds another object is not the one written there, and its copy is tried.
    pub(super) fn read_small_page(
        &mut self,
        vpa: u32,
        owner: Option<(u16, Oid)>,
    ) -> Result<Vec<(Oid, u64, Vec<u8>)>, OsdError> {
        let mut page = std::mem::take(&mut self.scratch);
        self.stats.small_pages_read += 1;
        let r = read_meta_checked(
            &mut self.fml,
            &mut self.stats,
            (self.now, vpa),
            &mut page,
            META_RECORD_BYTES,
            |r, page| {
                matches!(r, Record::Small { .. })
                    && slot_holds(owner, |i| decode_page(page).ok()?.get(i).map(|e| e.0))
            },
        );
        let r = match r {
            Ok((t, Content::Bytes, Record::Small { .. })) => {
                self.now = self.now.max(t);
                decode_page(&page)
            }
            Ok((_, content, rec)) => Err(SmallPageError::OtherRecord {
                kind: rec.kind_name(),
                content,
            }),
            Err(e) => {
                self.scratch = page;
                return Err(e.into_osd("small-object page", vpa));
            }
        };
        self.scratch = page;
        r.map_err(|e| OsdError::Corrupted {
            what: e.to_string(),
            location: format!("small-object page at unit {vpa}"),
            unit: Some(vpa),
        })
    }

    fn trim_small_cache(&mut self) {
        if self.smalls.len() < self.config.onode_cache_entries {
            return;
        }
        let target = self.config.onode_cache_entries * 3 / 4;
        let clean: Vec<Oid> = self
            .smalls
            .iter()
            .filter(|(_, s)| !s.dirty)
            .map(|(o, _)| *o)
            .take(self.smalls.len().saturating_sub(target))
            .collect();
        for o in clean {
            self.smalls.remove(&o);
        }
    }

    /// Changes a cached small object's bytes, keeping the count of buffered bytes.
    #[expect(
        clippy::expect_used,
        reason = "callers edit only small objects they have just loaded into the cache"
    )]
    fn edit_small(&mut self, oid: Oid, edit: impl FnOnce(&mut Vec<u8>)) {
        let s = self
            .smalls
            .get_mut(&oid)
            .expect("edited small objects are cached");
        if s.dirty {
            self.small_dirty_bytes -= ENTRY_HEADER + s.bytes.len();
        }
        edit(&mut s.bytes);
        s.dirty = true;
        self.small_dirty_bytes += ENTRY_HEADER + s.bytes.len();
    }

    /// Absorbs a write into the small-object buffer if the object is (or, being empty, can
    /// become) small and stays small; otherwise spills a small object into data units and
    /// returns false for the write to go there too.
    #[expect(
        clippy::unwrap_used,
        reason = "the small path is taken only with bytes (data.is_some() is part of `fits`)"
    )]
    pub(super) fn write_small(
        &mut self,
        oid: Oid,
        offset: u64,
        data: Option<&[u8]>,
    ) -> Result<bool, OsdError> {
        let c = &self.onode_mut(oid)?.onode;
        // An encrypted object's data lives only in sealed data units, never in shared pages.
        let (inode, length, used) = (
            // A compressed object's data lives in its chunks.
            c.inode
                || c.wrapped_key.is_some()
                || c.compression.codec().is_some()
                || c.compression.undecided(),
            c.logical_length,
            c.used_bytes,
        );
        let small = self.is_small(oid, length)?;
        let end = offset + data.map_or(0, |d| d.len() as u64);
        let fits = end <= self.small_max() && !inode && data.is_some();
        if !(fits && (small || (self.config.small_objects && length == 0 && used == 0))) {
            if small {
                self.spill_small(oid)?;
            }
            return Ok(false);
        }
        let data = data.unwrap();
        if !small {
            // An object emptied since it spilled takes over the entry the durable state still
            // has: the entry goes when its new one is written, not before.
            let loc = if self.spilling.remove(&oid) {
                self.with_index_raw(|ix, io| ix.get(io, &small_key(oid)))?
                    .map(split_loc)
            } else {
                None
            };
            self.trim_small_cache();
            self.smalls.insert(
                oid,
                SmallObject {
                    bytes: Vec::new(),
                    seq: 0,
                    dirty: false,
                    loc,
                },
            );
        }
        self.edit_small(oid, |b| {
            if b.len() < end as usize {
                b.resize(end as usize, 0);
            }
            b[offset as usize..end as usize].copy_from_slice(data);
        });
        let len = self.smalls[&oid].bytes.len() as u64;
        let now = self.now;
        let c = self.onode_mut(oid)?;
        c.onode.logical_length = len;
        c.onode.used_bytes = len;
        c.onode.modified_ns = now;
        c.onode.write_count = c.onode.write_count.saturating_add(1);
        c.dirty = true;
        self.stats.host_write_bytes += data.len() as u64;
        self.write_small_pages(false)?;
        Ok(true)
    }

    /// Moves a small object's data into data units (it outgrew the buffer).
    ///
    /// The durable entry stays in the index, its page slot live, until the object's unit 0 (which
    /// takes the entry's bytes) is programmed or its onode is written ([`Self::end_spill`]):
    /// dropped now, a checkpoint GC asks for before either (it writes only the onodes whose data
    /// is on flash) would commit an index without the entry under the durable onode that counts
    /// on it, and the object's flushed bytes would be lost.
    pub(super) fn spill_small(&mut self, oid: Oid) -> Result<(), OsdError> {
        let Some(s) = self.take_small(oid)? else {
            return Ok(());
        };
        if s.loc.is_some() {
            self.spilling.insert(oid);
        }
        let c = self.onode_mut(oid)?;
        c.onode.used_bytes = 0;
        c.dirty = true;
        if !s.bytes.is_empty() {
            // The object is no longer small and not empty: this goes to data units.
            self.write_inner(oid, 0, s.bytes.len() as u64, Some(&s.bytes), 0)?;
            self.stats.host_write_bytes -= s.bytes.len() as u64;
        }
        Ok(())
    }

    /// Truncates a small object; false if `oid` is not small or no longer will be (it is
    /// spilled, and the caller truncates its units).
    pub(super) fn truncate_small(&mut self, oid: Oid, length: u64) -> Result<bool, OsdError> {
        let old = self.onode_mut(oid)?.onode.logical_length;
        if !self.is_small(oid, old)? {
            return Ok(false);
        }
        if length > self.small_max() {
            self.spill_small(oid)?;
            return Ok(false);
        }
        if length == 0 {
            // An empty object is not small: it may become an inode or take units next.
            self.drop_small(oid)?;
        } else {
            self.edit_small(oid, |b| b.resize(length as usize, 0));
        }
        let now = self.now;
        let c = self.onode_mut(oid)?;
        c.onode.logical_length = length;
        c.onode.used_bytes = length;
        c.onode.modified_ns = now;
        c.dirty = true;
        Ok(true)
    }

    /// Removes `oid`'s small-object entry (cache, index, page slot); returns what it held.
    pub(super) fn drop_small(&mut self, oid: Oid) -> Result<Option<SmallObject>, OsdError> {
        self.end_spill(oid)?;
        let Some(s) = self.take_small(oid)? else {
            return Ok(None);
        };
        if let Some(loc) = s.loc {
            self.forget_entry(oid, loc)?;
        }
        Ok(Some(s))
    }

    /// Drops `oid`'s small-object entry, if it has one, without reading its page (a removal
    /// needs none of its bytes, and the page may be damaged or lost).
    pub(super) fn forget_small(&mut self, oid: Oid) -> Result<(), OsdError> {
        self.end_spill(oid)?;
        let loc = match self.smalls.remove(&oid) {
            Some(s) => {
                if s.dirty {
                    self.small_dirty_bytes -= ENTRY_HEADER + s.bytes.len();
                }
                s.loc
            }
            None => self
                .with_index(|ix, io| ix.get(io, &small_key(oid)))?
                .map(split_loc),
        };
        if let Some(loc) = loc {
            self.forget_entry(oid, loc)?;
        }
        Ok(())
    }

    /// Takes `oid`'s small-object entry out of the cache (its index entry and page slot stay).
    fn take_small(&mut self, oid: Oid) -> Result<Option<SmallObject>, OsdError> {
        self.load_small(oid)?;
        let Some(s) = self.smalls.remove(&oid) else {
            return Ok(None);
        };
        if s.dirty {
            self.small_dirty_bytes -= ENTRY_HEADER + s.bytes.len();
        }
        Ok(Some(s))
    }

    /// Removes `oid`'s entry from the index and releases its page slot `(vpa, slot)`.
    fn forget_entry(&mut self, oid: Oid, (vpa, slot): (u32, u16)) -> Result<(), OsdError> {
        self.with_index_raw(|ix, io| ix.remove(io, &small_key(oid)))?;
        release_slot_in(&mut self.packs, &mut self.released, vpa, slot);
        Ok(())
    }

    /// A spill of `oid` no longer needs the entry the durable state had: it leaves the index
    /// and its page slot is released.
    pub(super) fn end_spill(&mut self, oid: Oid) -> Result<(), OsdError> {
        if !self.spilling.remove(&oid) {
            return Ok(());
        }
        if let Some(l) = self.with_index_raw(|ix, io| ix.get(io, &small_key(oid)))? {
            self.forget_entry(oid, split_loc(l))?;
        }
        Ok(())
    }

    /// Writes the buffered small objects into small-object pages: every page they fill, and
    /// with `all` the last, partly filled one too (at FLUSH, before the onodes).
    pub(super) fn write_small_pages(&mut self, all: bool) -> Result<(), OsdError> {
        if self.small_dirty_bytes == 0
            || (!all && PAGE_HEADER + self.small_dirty_bytes <= self.unit)
        {
            return Ok(());
        }
        self.make_room()?;
        let mut dirty: Vec<Oid> = self
            .smalls
            .iter()
            .filter(|(_, s)| s.dirty)
            .map(|(o, _)| *o)
            .collect();
        dirty.sort_unstable();
        let mut i = 0;
        while i < dirty.len() {
            let mut members = Vec::new();
            let mut size = PAGE_HEADER;
            while i < dirty.len() {
                let n = ENTRY_HEADER + self.smalls[&dirty[i]].bytes.len();
                if size + n > self.unit {
                    break;
                }
                size += n;
                members.push(dirty[i]);
                i += 1;
            }
            if !all && i == dirty.len() {
                // The last page is not full: it waits in the buffer.
                break;
            }
            self.write_small_page(&members)?;
        }
        Ok(())
    }

    #[expect(
        clippy::unwrap_used,
        reason = "the members are cached small objects, which nothing evicts while their page is written"
    )]
    fn write_small_page(&mut self, members: &[Oid]) -> Result<(), OsdError> {
        let seqs: Vec<u64> = members.iter().map(|_| self.gc.take_seq()).collect();
        let entries: Vec<(Oid, u64, &[u8])> = members
            .iter()
            .zip(&seqs)
            .map(|(o, s)| (*o, *s, self.smalls[o].bytes.as_slice()))
            .collect();
        let page = encode_page(&entries, self.unit);
        let vpa = self.write_meta_unit(PageKind::SmallObjects, &page, Record::Small { seq: 0 })?;
        self.stats.small_pages_written += 1;
        self.units_since_ckpt += 1;
        for (slot, (oid, seq)) in members.iter().zip(seqs).enumerate() {
            let s = self.smalls.get_mut(oid).unwrap();
            s.dirty = false;
            s.seq = seq;
            self.small_dirty_bytes -= ENTRY_HEADER + s.bytes.len();
            let old = s.loc.replace((vpa, slot as u16));
            let loc = slot_loc(vpa, slot as u16);
            self.with_index_raw(|ix, io| ix.insert(io, small_key(*oid), loc))?;
            if let Some((ov, os)) = old {
                release_slot_in(&mut self.packs, &mut self.released, ov, os);
            }
        }
        self.packs.insert(
            vpa,
            DescPage {
                live: members.iter().map(|o| Some(*o)).collect(),
                pinned: false,
            },
        );
        Ok(())
    }

    /// GC moved a small-object page: its live entries are found at the copy.
    pub(super) fn relocate_small_page(&mut self, from: u32, to: u32) -> Result<(), OsdError> {
        let Some(d) = self.packs.remove(&from) else {
            return Ok(());
        };
        for (slot, oid) in d.live.iter().enumerate() {
            if let Some(oid) = oid {
                let loc = slot_loc(to, slot as u16);
                self.with_index_raw(|ix, io| ix.insert(io, small_key(*oid), loc))?;
                if let Some(s) = self.smalls.get_mut(oid) {
                    s.loc = Some((to, slot as u16));
                }
            }
        }
        self.packs.insert(to, d);
        Ok(())
    }

    /// The entry of `oid` at `loc` was in a small-object page GC could read neither copy of
    /// (finding 28): written again from the cache when it holds it, otherwise pointed at
    /// [`LOST`], so that the object's reads fail and no checkpoint names the page again.
    pub(super) fn lose_small_entry(&mut self, oid: Oid, loc: (u32, u16)) -> Result<(), OsdError> {
        match self.smalls.get_mut(&oid) {
            Some(s) if s.loc.is_none() || s.loc == Some(loc) => {
                s.loc = None;
                self.edit_small(oid, |_| {});
            }
            _ => {
                self.stats.metadata_entries_lost += 1;
                let lost = slot_loc(LOST, loc.1);
                self.with_index_raw(|ix, io| ix.insert(io, small_key(oid), lost))?;
            }
        }
        Ok(())
    }

    /// Recovery: applies the entries of a small-object page written after the checkpoint, each
    /// only over an older version of its object (pages come in sequence order; a page GC copied
    /// carries entries the checkpoint or an earlier page already has).
    pub(super) fn roll_small_page(
        &mut self,
        vpa: u32,
        ckpt_seq: u64,
        seen: &mut FxHashMap<Oid, u64>,
        touched: &mut FxHashSet<Oid>,
    ) -> Result<(), OsdError> {
        // Torn (never part of a completed FLUSH) or damaged: passed over.
        let Some(entries) = self.damaged_as_absent(|s| s.read_small_page(vpa, None))? else {
            return Ok(());
        };
        let mut live = vec![None; entries.len()];
        for (slot, (oid, seq, bytes)) in entries.into_iter().enumerate() {
            if seq <= ckpt_seq || seen.get(&oid).is_some_and(|&s| s >= seq) {
                continue;
            }
            seen.insert(oid, seq);
            touched.insert(oid);
            self.drop_small(oid)?;
            self.drop_units_from(oid, 0)?;
            self.smalls.insert(
                oid,
                SmallObject {
                    bytes,
                    seq,
                    dirty: false,
                    loc: Some((vpa, slot as u16)),
                },
            );
            let loc = slot_loc(vpa, slot as u16);
            self.with_index_raw(|ix, io| ix.insert(io, small_key(oid), loc))?;
            live[slot] = Some(oid);
        }
        if live.iter().any(|s| s.is_some()) {
            self.packs.insert(
                vpa,
                DescPage {
                    live,
                    pinned: false,
                },
            );
        }
        Ok(())
    }

    /// Recovery, per touched object: a small-object entry is the object's data unless the
    /// onode written after it disagrees (the object was truncated to nothing or spilled since)
    /// or embeds the data. Returns whether the object is small.
    ///
    /// The onode's length that counts is the one it was written with (`stored_len` when data
    /// records extended it): a data unit past unit 0 whose spill's unit 0 never reached flash
    /// belongs to a write no FLUSH completed, and it is dropped, not the entry.
    pub(super) fn settle_small(
        &mut self,
        oid: Oid,
        stored_len: Option<u64>,
    ) -> Result<bool, OsdError> {
        let Some(s) = self.load_small(oid)? else {
            return Ok(false);
        };
        let (len, seq) = (s.bytes.len() as u64, s.seq);
        let c = self.onode_mut(oid)?;
        let stored = stored_len.unwrap_or(c.onode.logical_length);
        // An entry older than the object's creation is an earlier incarnation's (finding 34).
        if c.onode.inline.is_some()
            || (c.onode.seq > seq && stored != len)
            || seq <= c.onode.created_seq
        {
            self.drop_small(oid)?;
            return Ok(false);
        }
        self.drop_units_from(oid, 0)?;
        let c = self.onode_mut(oid)?;
        if c.onode.logical_length != len || c.onode.used_bytes != len {
            c.onode.logical_length = len;
            c.onode.used_bytes = len;
            c.dirty = true;
        }
        Ok(true)
    }
}

/// A slot of a shared page (descriptor or small-object page) no longer holds a current entry;
/// a page left with none is released after the next checkpoint (the durable one may still
/// point into it), unless it is pinned until then anyway.
pub(super) fn release_slot_in(
    pages: &mut FxHashMap<u32, DescPage>,
    released: &mut Vec<u32>,
    vpa: u32,
    slot: u16,
) {
    if let Some(d) = pages.get_mut(&vpa) {
        if let Some(s) = d.live.get_mut(slot as usize) {
            *s = None;
        }
        if !d.pinned && d.live.iter().all(|s| s.is_none()) {
            pages.remove(&vpa);
            released.push(vpa);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pages_round_trip_and_reject_damage() {
        let a = Oid::new(0x10000, 0x10001);
        let b = Oid::new(0x10000, 0x10002);
        let page = encode_page(&[(a, 5, b"hello"), (b, 6, b"")], 2048);
        assert_eq!(
            decode_page(&page).unwrap(),
            vec![(a, 5, b"hello".to_vec()), (b, 6, Vec::new())]
        );
        let mut bad = page.clone();
        bad[8 + 24] = 0xFF; // a length past the page
        bad[8 + 25] = 0xFF;
        assert_eq!(
            decode_page(&bad),
            Err(SmallPageError::BytesPastPage {
                entry: 0,
                len: 0xFFFF
            })
        );
        let mut bad = page;
        bad[4] = 0xFF; // more entries than the page holds
        bad[5] = 0xFF;
        assert!(decode_page(&bad).is_err());
        assert_eq!(decode_page(&[0u8; 16]), Err(SmallPageError::NotSmallPage));
    }

    /// A checkpoint GC asks for between a spill and the FLUSH after it writes only the onodes
    /// whose data is on flash: it must not commit an index without the small-object entry under
    /// the durable onode that still counts on it (the flushed bytes were lost, and fsck found
    /// "used bytes 990, extents hold 0 units": `ossd torture --faults all`, seed
    /// 807013244984872231).
    #[test]
    fn a_checkpoint_between_a_spill_and_its_flush_keeps_the_flushed_bytes() {
        let old: Vec<u8> = (0..990u32).map(|i| (i * 7 + 1) as u8).collect();
        let (mut s, config, a) = small_object_flushed(&old);
        assert!(s.smalls.contains_key(&a));
        // Past the small-object limit: the object spills, its unit 0 waits in the buffer.
        s.write(a, 3 * s.unit as u64, &[9u8; 512]).unwrap();
        assert!(!s.smalls.contains_key(&a) && !s.buf.is_empty());
        s.checkpoint_now(super::super::checkpoint::CheckpointScope::Gc)
            .unwrap();
        reads_back_after_a_crash(s, config, a, &old);
    }

    /// GC may checkpoint while a spill's own write makes room, after the entry left the cache
    /// and before unit 0 is in the buffer: the spilling object's onode (used bytes 0) must wait
    /// for its data, or the checkpoint ends the spill and drops the entry with the flushed
    /// bytes (`ossd torture --stack ofs --faults power-cut`, seed 10123143229783127317).
    #[test]
    fn a_checkpoint_inside_a_spill_keeps_the_flushed_bytes() {
        let old: Vec<u8> = (0..2027u32).map(|i| (i * 13 + 5) as u8).collect();
        let (mut s, config, a) = small_object_flushed(&old);
        // The spill's state inside its write, as `spill_small` leaves it before `write_inner`
        // buffers unit 0.
        assert!(s.take_small(a).unwrap().is_some());
        s.spilling.insert(a);
        let c = s.onode_mut(a).unwrap();
        c.onode.used_bytes = 0;
        c.dirty = true;
        assert!(!s.ready_onodes().contains(&a));
        s.checkpoint_now(super::super::checkpoint::CheckpointScope::Gc)
            .unwrap();
        reads_back_after_a_crash(s, config, a, &old);
    }

    /// A store on the `tiny` preset holding one small object, `bytes`, flushed.
    fn small_object_flushed(bytes: &[u8]) -> (ObjectStore<flash::Nand>, OsdConfig, Oid) {
        let dev = flash::preset("tiny").unwrap();
        let config = OsdConfig {
            fml: FmlConfig::for_blocks(dev.gang.superblocks(&dev.geometry)),
            ..OsdConfig::default()
        };
        let flash = flash::Nand::in_memory(dev).unwrap();
        let mut s = ObjectStore::format(flash, config).unwrap();
        let p = 0x10000;
        s.create_partition(Some(PartitionId(p))).unwrap();
        let a = Oid::new(p, p + 1);
        s.create(PartitionId(p), Some(ObjectId(p + 1))).unwrap();
        s.write(a, 0, bytes).unwrap();
        s.flush(FlushScope::Device).unwrap();
        (s, config, a)
    }

    /// After a crash, `a` holds `old` (its length included) and fsck finds nothing.
    fn reads_back_after_a_crash(
        s: ObjectStore<flash::Nand>,
        config: OsdConfig,
        a: Oid,
        old: &[u8],
    ) {
        let mut s = ObjectStore::open(s.crash(), config).unwrap();
        assert_eq!(
            s.get_attr(a, Attr::LogicalLength).unwrap(),
            AttrValue::U64(old.len() as u64)
        );
        let mut back = vec![0u8; old.len()];
        assert_eq!(s.read(a, 0, &mut back).unwrap(), old.len());
        assert_eq!(back, old);
        let report = s.fsck_structure().unwrap();
        assert!(report.problems.is_empty(), "{:?}", report.problems);
    }
}
