//! Object-level reliability (OSCM-11 III, "Object-level reliability"; V-E): Reed-Solomon parity
//! per object over parity groups of `k` data units (`m` parity units each, the object's
//! `reliability`), kept current by delta on every data-unit program, used to rebuild a unit that
//! fails its checksum, reads erased, holds another unit, or could not be read, and checked by the
//! scrub (`scrub.rs`).
//!
//! Mechanism only: which objects are protected, and how many units a group has, is the onode's
//! (the policy: the `reliability` attribute, [`OsdConfig::default_reliability`],
//! [`OsdConfig::parity_group_units`]).
//!
//! # Invariant
//! A group's parity (in the parity cache, or on flash when not cached) is the Reed-Solomon
//! parity of the group's data units *as programmed to flash* (units still in the write buffer
//! are not in it), an absent unit counting as zeros. Its `covers` signature is the XOR of
//! [`covers_term`] over the present units: a rebuilt unit is returned only when the rebuilt
//! group's signature equals the parity's, so parity that is stale (a crash between a data
//! program and the parity write) is never used to produce bytes.

use std::sync::Arc;

use reed_solomon_erasure::galois_8::ReedSolomon;

use super::*;

/// Index key kind of a parity unit: offset `group << 8 | row`.
pub(super) const KIND_PARITY: u8 = 3;
/// The most parity units a group may have (the `reliability` attribute's largest value).
pub const MAX_RELIABILITY: u8 = 4;
/// Bytes of parity kept in memory (at least 16 groups); past this the least recently used
/// group is written and dropped.
const PARITY_CACHE_BYTES: usize = 2 << 20;
/// Bytes of recently programmed units kept for the delta update (at least 16 units).
const RECENT_BYTES: usize = 2 << 20;

/// The index key of parity unit `row` of group `group` of `oid`.
pub(super) fn parity_key(oid: Oid, group: u64, row: u8) -> IndexKey {
    IndexKey {
        oid: oid.as_u128(),
        kind: KIND_PARITY,
        offset: group << 8 | row as u64,
    }
}

/// The term data unit `i` of a group (payload checksum `crc`) adds to the group's covers
/// signature.
pub fn covers_term(i: u64, crc: u32) -> u32 {
    let h = mix(i << 32 | crc as u64);
    (h ^ (h >> 32)) as u32
}

/// Row `row`'s term for a fingerprint-mode unit (the lab's workloads, which carry no bytes):
/// row 0 is the XOR of the fingerprints, so one lost unit is rebuilt from it; other rows only
/// keep the I/O pattern of a real code.
fn token_term(fp: u64, row: usize) -> u64 {
    if row == 0 {
        fp
    } else {
        mix(fp ^ row as u64)
    }
}

/// The contents of one unit, for parity arithmetic.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) enum UnitFill {
    /// A bytes-mode unit.
    Bytes(Vec<u8>),
    /// A fingerprint-mode unit.
    Token(u64),
}

impl UnitFill {
    fn payload(&self) -> Payload<'_> {
        match self {
            UnitFill::Bytes(b) => Payload::Bytes(b),
            UnitFill::Token(fp) => Payload::Fingerprint(*fp),
        }
    }
}

/// One parity group's parity, as the data units on flash make it.
pub(super) struct ParityGroup {
    /// Parity rows of byte units (allocated at the first byte unit).
    rows: Option<Vec<Vec<u8>>>,
    /// Parity rows of fingerprint units.
    tokens: Vec<u64>,
    /// The covers signature of the data the parity was computed from.
    covers: u32,
    /// Newer than the parity units on flash.
    dirty: bool,
    /// A unit of the group could not be read back when the parity was computed, or bytes and
    /// fingerprints were mixed: this parity protects nothing and is not written.
    broken: bool,
    /// The old contents of a reprogrammed unit could not be read: rebuild from the data once
    /// the new unit is on flash.
    needs_rebuild: bool,
    /// Units of the group (bit i: unit g·k + i) whose contents on flash are *not* in this
    /// parity: the group is being rewritten whole from the write buffer (each bit clears when
    /// the unit's new contents are programmed). Parity with bits left is not used or written
    /// as it is: it is recomputed from the data.
    pending: u128,
    /// Last use, for eviction.
    used: u64,
}

impl ParityGroup {
    fn empty(m: u8) -> ParityGroup {
        ParityGroup {
            rows: None,
            tokens: vec![0; m as usize],
            covers: 0,
            dirty: false,
            broken: false,
            needs_rebuild: false,
            pending: 0,
            used: 0,
        }
    }

    /// Adds (or, GF(2^8) addition being XOR, removes) data unit `i`'s contribution.
    fn toggle(
        &mut self,
        rs: &ReedSolomon,
        i: usize,
        fill: Payload<'_>,
        unit: usize,
    ) -> Result<(), OsdError> {
        self.covers ^= covers_term(i as u64, payload_crc(fill));
        match fill {
            Payload::Bytes(data) => {
                let m = self.tokens.len();
                let rows = self.rows.get_or_insert_with(|| vec![vec![0; unit]; m]);
                // encode_single_sep overwrites its outputs for shard 0 and adds for the others:
                // computing into zeroed rows gives the contribution either way.
                let mut delta = vec![vec![0u8; unit]; m];
                rs.encode_single_sep(i, data, &mut delta)
                    .map_err(|e| OsdError::Internal(format!("parity encode: {e:?}")))?;
                for (row, d) in rows.iter_mut().zip(&delta) {
                    for (p, x) in row.iter_mut().zip(d) {
                        *p ^= x;
                    }
                }
            }
            Payload::Fingerprint(fp) => {
                for (row, t) in self.tokens.iter_mut().enumerate() {
                    *t ^= token_term(fp, row);
                }
            }
        }
        if self.rows.is_some() && self.tokens.iter().any(|&t| t != 0) {
            self.broken = true;
        }
        Ok(())
    }

    /// Whether the cache holds parity newer than flash's.
    pub(super) fn is_dirty(&self) -> bool {
        self.dirty
    }

    /// Whether this parity was kept current and computed from data with signature `sig`.
    pub(super) fn usable_for(&self, sig: u32) -> bool {
        !self.broken && !self.needs_rebuild && self.pending == 0 && self.covers == sig
    }

    /// Parity row `row` as a payload.
    fn row_payload(&self, row: usize) -> Payload<'_> {
        match &self.rows {
            Some(r) => Payload::Bytes(&r[row]),
            None => Payload::Fingerprint(self.tokens[row]),
        }
    }
}

/// What [`ObjectStore::reconstruct_group`] found.
pub(super) enum Rebuilt {
    /// The damaged units of the group, rebuilt and checked against the parity's signature.
    Units(Vec<(u64, UnitFill)>),
    /// Parity cannot rebuild the group: why.
    Not(String),
}

impl<F: Flash> ObjectStore<F> {
    /// `(data units per group, parity units per group)` of a protected object.
    pub(super) fn protection(&mut self, oid: Oid) -> Result<Option<(u8, u8)>, OsdError> {
        let o = &self.onode_mut(oid)?.onode;
        Ok((o.reliability > 0 && o.parity_group > 0 && !o.removed)
            .then_some((o.parity_group, o.reliability)))
    }

    /// The Reed-Solomon code for groups of `k` data and `m` parity units.
    fn codec(&mut self, k: u8, m: u8) -> Result<Arc<ReedSolomon>, OsdError> {
        if let Some(c) = self.codecs.get(&(k, m)) {
            return Ok(c.clone());
        }
        let c = Arc::new(ReedSolomon::new(k as usize, m as usize).map_err(|e| {
            OsdError::InvalidArgument(format!("parity groups of {k}+{m} units: {e:?}"))
        })?);
        self.codecs.insert((k, m), c.clone());
        Ok(c)
    }

    /// The mapped units `first..end` of `oid` and their write units ([`LOST`] for lost ones).
    pub(super) fn mapped_units(
        &mut self,
        oid: Oid,
        first: u64,
        end: u64,
    ) -> Result<Vec<(u64, u32)>, OsdError> {
        let mut out = Vec::new();
        let add = |k: &IndexKey, v: u64, out: &mut Vec<(u64, u32)>| {
            if k.oid != oid.as_u128() || k.kind != KIND_DATA {
                return;
            }
            let (s, l) = extent(v);
            for u in k.offset.max(first)..(k.offset + l as u64).min(end) {
                out.push((
                    u,
                    if s == LOST {
                        LOST
                    } else {
                        s + (u - k.offset) as u32
                    },
                ));
            }
        };
        if let Some((k, v)) = self.with_index(|ix, io| ix.floor(io, &data_key(oid, first)))? {
            add(&k, v, &mut out);
        }
        if first + 1 < end {
            let later = self.with_index(|ix, io| {
                ix.range(
                    io,
                    &data_key(oid, first + 1),
                    &data_key(oid, end),
                    usize::MAX,
                )
            })?;
            for (k, v) in later {
                add(&k, v, &mut out);
            }
        }
        Ok(out)
    }

    /// Reads data unit `u` of `oid` at `v` for parity work: `None` when it is lost or damaged
    /// (a device failure is an error).
    fn read_for_parity(&mut self, oid: Oid, u: u64, v: u32) -> Result<Option<UnitFill>, OsdError> {
        if v == LOST {
            return Ok(None);
        }
        self.stats.parity_data_reads += 1;
        match self.read_data_unit(oid, u, v) {
            Ok(Content::Bytes) => Ok(Some(UnitFill::Bytes(self.scratch.clone()))),
            Ok(Content::Fingerprint(fp)) => Ok(Some(UnitFill::Token(fp))),
            Ok(Content::Erased) => Ok(None),
            Err(e @ (OsdError::Device(_) | OsdError::Internal(_))) => Err(e),
            Err(_) => Ok(None),
        }
    }

    /// The parity of group `g` computed from its data units on flash (every one read).
    pub(super) fn rebuild_group(
        &mut self,
        oid: Oid,
        g: u64,
        k: u8,
        m: u8,
    ) -> Result<ParityGroup, OsdError> {
        let rs = self.codec(k, m)?;
        let first = g * k as u64;
        let mut grp = ParityGroup::empty(m);
        for (u, v) in self.mapped_units(oid, first, first + k as u64)? {
            match self.read_for_parity(oid, u, v)? {
                Some(fill) => grp.toggle(&rs, (u - first) as usize, fill.payload(), self.unit)?,
                None => grp.broken = true,
            }
        }
        grp.dirty = true;
        Ok(grp)
    }

    /// Group `g`'s parity units from flash, if every one reads back whole and names the group.
    pub(super) fn read_parity_units(
        &mut self,
        oid: Oid,
        g: u64,
        k: u8,
        m: u8,
    ) -> Result<Option<ParityGroup>, OsdError> {
        let mut grp = ParityGroup::empty(m);
        let mut covers = None;
        for row in 0..m {
            let Some(v) = self.with_index_raw(|ix, io| ix.get(io, &parity_key(oid, g, row)))?
            else {
                return Ok(None);
            };
            self.stats.parity_units_read += 1;
            let mut page = vec![0u8; self.unit];
            let r = read_checked(
                &mut self.fml,
                self.now,
                v as u32,
                &mut page,
                PARITY_RECORD_BYTES,
            );
            let (t, content, rec) = match r {
                Ok(x) => x,
                Err(BadUnit::Device(e)) => return Err(OsdError::Device(e)),
                Err(_) => return Ok(None),
            };
            self.io_done = self.io_done.max(t);
            match rec {
                Record::Parity {
                    oid: o,
                    group,
                    row: r,
                    data_units,
                    covers: c,
                    ..
                } if o == oid
                    && group == g
                    && r == row
                    && data_units == k
                    && covers.is_none_or(|x| x == c) =>
                {
                    covers = Some(c)
                }
                _ => return Ok(None),
            }
            match content {
                Content::Bytes => {
                    grp.rows.get_or_insert_with(|| vec![Vec::new(); m as usize])[row as usize] =
                        page
                }
                Content::Fingerprint(fp) => grp.tokens[row as usize] = fp,
                Content::Erased => return Ok(None),
            }
        }
        if grp
            .rows
            .as_ref()
            .is_some_and(|r| r.iter().any(|x| x.len() != self.unit))
        {
            return Ok(None);
        }
        grp.covers = covers.unwrap_or(0);
        Ok(Some(grp))
    }

    /// Brings group `g` into the parity cache, from its parity units or (when it has none
    /// whole) from its data units. Returns whether it was computed from the data.
    fn parity_load(&mut self, oid: Oid, g: u64, k: u8, m: u8) -> Result<bool, OsdError> {
        self.parity_tick += 1;
        let tick = self.parity_tick;
        if let Some(p) = self.parity.get_mut(&(oid, g)) {
            p.used = tick;
            return Ok(false);
        }
        let (mut grp, from_data) = match self.read_parity_units(oid, g, k, m)? {
            Some(p) => (p, false),
            None => (self.rebuild_group(oid, g, k, m)?, true),
        };
        grp.used = tick;
        self.parity.insert((oid, g), grp);
        Ok(from_data)
    }

    /// Before unit `u` of a protected object is reprogrammed (its index entry already removed,
    /// `old` its previous write unit): takes the old contents out of the group's parity, the
    /// first half of the delta update (new parity = old parity + code(new data - old data)).
    pub(super) fn parity_before_program(
        &mut self,
        oid: Oid,
        u: u64,
        old: Option<u32>,
        old_fill: Option<UnitFill>,
        (k, m): (u8, u8),
    ) -> Result<(), OsdError> {
        let g = u / k as u64;
        let i = u % k as u64;
        let pending = self.parity.get(&(oid, g)).map_or(0, |p| p.pending);
        if i < 128 && pending & 1 << i != 0 {
            // The group is being rewritten whole: the old contents are not in its parity.
            if let Some(p) = self.parity.get_mut(&(oid, g)) {
                p.pending &= !(1 << i);
            }
            self.recent.remove(&(oid, u));
            return Ok(());
        }
        let recent = self.recent.remove(&(oid, u)).map(|(f, _)| f);
        let old_fill = old_fill.or(recent);
        if old.is_some() && old_fill.is_none() && pending == 0 {
            if let Some(rest) = self.whole_group_buffered(oid, g, u, k)? {
                // Every other unit of the group on flash is about to be replaced from the
                // buffer: start the group's parity afresh instead of reading old contents.
                let mut grp = ParityGroup::empty(m);
                grp.pending = rest;
                grp.dirty = true;
                self.parity_tick += 1;
                grp.used = self.parity_tick;
                self.parity.insert((oid, g), grp);
                return Ok(());
            }
        }
        if self.parity_load(oid, g, k, m)? {
            // Computed from the data without unit `u`.
            return Ok(());
        }
        let Some(v) = old else { return Ok(()) };
        let rs = self.codec(k, m)?;
        // The old contents, unless the read-modify-write just read them or they were
        // programmed recently.
        let fill = match old_fill {
            Some(f) => Some(f),
            None => self.read_for_parity(oid, u, v)?,
        };
        let unit = self.unit;
        let Some(grp) = self.parity.get_mut(&(oid, g)) else {
            return Err(OsdError::Internal("parity group left the cache".into()));
        };
        match fill {
            Some(f) => grp.toggle(&rs, (u % k as u64) as usize, f.payload(), unit)?,
            None => grp.needs_rebuild = true,
        }
        grp.dirty = true;
        Ok(())
    }

    /// When every other mapped unit of group `g` (unit `u` being programmed) is in the write
    /// buffer whole, the units (as a bit set of the group) that will be replaced; else `None`.
    fn whole_group_buffered(
        &mut self,
        oid: Oid,
        g: u64,
        u: u64,
        k: u8,
    ) -> Result<Option<u128>, OsdError> {
        if k > 128 {
            return Ok(None);
        }
        let first = g * k as u64;
        let full = self.full_mask();
        let mut rest = 0u128;
        for (x, _) in self.mapped_units(oid, first, first + k as u64)? {
            if x == u {
                continue;
            }
            match self.buf.get((oid, x)) {
                Some(e) if e.mask == full => rest |= 1 << (x - first),
                _ => return Ok(None),
            }
        }
        Ok(Some(rest))
    }

    /// After unit `u` of a protected object was programmed with `fill` and mapped: adds its
    /// contents to the group's parity, the second half of the delta update.
    pub(super) fn parity_after_program(
        &mut self,
        oid: Oid,
        u: u64,
        fill: Payload<'_>,
        (k, m): (u8, u8),
    ) -> Result<(), OsdError> {
        let g = u / k as u64;
        self.remember(oid, u, &fill);
        self.parity_load(oid, g, k, m)?;
        let rebuild = self.parity.get(&(oid, g)).is_some_and(|p| p.needs_rebuild);
        if rebuild {
            let mut grp = self.rebuild_group(oid, g, k, m)?;
            grp.used = self.parity_tick;
            self.parity.insert((oid, g), grp);
        } else {
            let rs = self.codec(k, m)?;
            let unit = self.unit;
            let Some(grp) = self.parity.get_mut(&(oid, g)) else {
                return Err(OsdError::Internal("parity group left the cache".into()));
            };
            grp.toggle(&rs, (u % k as u64) as usize, fill, unit)?;
            grp.dirty = true;
        }
        self.trim_parity_cache()
    }

    /// Group `g` of `oid` no longer matches its data: it is not used, and its parity units are
    /// dropped at the next write-back (then recomputed from the data when next needed).
    pub(super) fn parity_broken(&mut self, oid: Oid, g: u64) {
        if let Some(p) = self.parity.get_mut(&(oid, g)) {
            p.broken = true;
            p.dirty = true;
        }
    }

    /// Keeps the contents just programmed as unit `u` of `oid` for its next delta update.
    fn remember(&mut self, oid: Oid, u: u64, fill: &Payload<'_>) {
        self.parity_tick += 1;
        let tick = self.parity_tick;
        let f = match fill {
            Payload::Bytes(b) => UnitFill::Bytes(b.to_vec()),
            Payload::Fingerprint(fp) => UnitFill::Token(*fp),
        };
        self.recent.insert((oid, u), (f, tick));
        self.recent_order.push_back(((oid, u), tick));
        let cap = (RECENT_BYTES / self.unit).max(16);
        while self.recent.len() > cap {
            let Some((key, t)) = self.recent_order.pop_front() else {
                break;
            };
            if self.recent.get(&key).is_some_and(|(_, x)| *x == t) {
                self.recent.remove(&key);
            }
        }
        if self.recent_order.len() > 4 * cap {
            let recent = &self.recent;
            self.recent_order
                .retain(|(key, t)| recent.get(key).is_some_and(|(_, x)| x == t));
        }
    }

    /// Writes and drops the least recently used groups past the cache's bound.
    fn trim_parity_cache(&mut self) -> Result<(), OsdError> {
        while self.parity.len() > (PARITY_CACHE_BYTES / self.unit).max(16) {
            let Some(key) = self
                .parity
                .iter()
                .min_by_key(|(k, p)| (p.used, **k))
                .map(|(k, _)| *k)
            else {
                break;
            };
            self.write_parity_group(key)?;
            self.parity.remove(&key);
        }
        Ok(())
    }

    /// Writes every dirty parity group (at a checkpoint, before the index is committed).
    pub(super) fn flush_parity(&mut self) -> Result<(), OsdError> {
        let mut dirty: Vec<(Oid, u64)> = self
            .parity
            .iter()
            .filter(|(_, p)| p.dirty)
            .map(|(k, _)| *k)
            .collect();
        dirty.sort_unstable();
        for key in dirty {
            self.write_parity_group(key)?;
        }
        Ok(())
    }

    /// Writes group `key`'s parity units if the cache holds newer ones than flash; a group with
    /// no data left, or whose parity is broken, loses its parity units instead.
    fn write_parity_group(&mut self, key: (Oid, u64)) -> Result<(), OsdError> {
        let (oid, g) = key;
        if !self.parity.get(&key).is_some_and(|p| p.dirty) {
            return Ok(());
        }
        let prot = match self.load_onode(oid)? {
            Some(_) => self.protection(oid)?,
            None => None,
        };
        let Some((k, m)) = prot else {
            self.parity.remove(&key);
            return Ok(());
        };
        let first = g * k as u64;
        if self
            .parity
            .get(&key)
            .is_some_and(|p| p.pending != 0 || p.needs_rebuild)
        {
            // Buffered units it counted on were dropped: recompute from what is on flash.
            let mut grp = self.rebuild_group(oid, g, k, m)?;
            grp.used = self.parity_tick;
            self.parity.insert(key, grp);
        }
        let empty = self.mapped_units(oid, first, first + k as u64)?.is_empty();
        if empty || self.parity.get(&key).is_some_and(|p| p.broken) {
            self.parity.remove(&key);
            return self.drop_group_parity(oid, g, m);
        }
        for row in 0..m {
            // GC may run (and flush, writing this very group): check again after it.
            self.make_room()?;
            let Some(grp) = self.parity.get(&key).filter(|p| p.dirty) else {
                return Ok(());
            };
            let rec = Record::Parity {
                oid,
                group: g,
                row,
                data_units: k,
                covers: grp.covers,
                seq: self.gc.take_seq(),
            };
            let payload = grp.row_payload(row as usize);
            let mut oob = [0u8; RECORD_MAX_BYTES];
            let n = rec.encode(payload_crc(payload), &mut oob);
            let stream = self.placer.choose(&Hint {
                kind: PageKind::Parity,
                oid,
                object_bytes: 0,
                write_count: 0,
                priority: 0,
            });
            // Written by checkpoints, that of recovery included: like metadata, into another
            // stream's update block when a new one would take the last free block.
            let now = self.now;
            let written = super::unit_io::write_meta_stream(&mut self.fml, stream, 1, |fml, s| {
                fml.write(now, s, payload, &oob[..n])
            });
            let (v, t) = match written {
                Ok(x) => x,
                Err(FmlError::NoSpace { .. }) => return Err(self.no_space(self.unit as u64)),
                Err(e) => return Err(fml_err(e)),
            };
            self.io_done = self.io_done.max(t);
            self.stats.parity_units_written += 1;
            self.units_since_ckpt += 1;
            let pk = parity_key(oid, g, row);
            if let Some(old) = self.with_index_raw(|ix, io| ix.insert(io, pk, v.0 as u64))? {
                self.fml.invalidate(Vpa(old as u32));
            }
        }
        if let Some(p) = self.parity.get_mut(&key) {
            p.dirty = false;
        }
        Ok(())
    }

    /// Removes group `g`'s parity units from the index and the flash.
    fn drop_group_parity(&mut self, oid: Oid, g: u64, m: u8) -> Result<(), OsdError> {
        for row in 0..m.max(MAX_RELIABILITY) {
            if let Some(v) =
                self.with_index_raw(|ix, io| ix.remove(io, &parity_key(oid, g, row)))?
            {
                self.fml.invalidate(Vpa(v as u32));
            }
        }
        Ok(())
    }

    /// Drops the parity of every group of `oid` from unit `first` on, whole groups from the
    /// flash and the cache; the group straddling `first` leaves the cache only (its parity on
    /// flash is stale: [`Self::parity_after_truncate`] or recovery recomputes it). Objects
    /// without parity (or no longer existing) lose all of theirs when `first` is 0.
    pub(super) fn drop_parity_from(&mut self, oid: Oid, first: u64) -> Result<(), OsdError> {
        let k = match self.load_onode(oid)? {
            Some(c) if c.onode.reliability > 0 && c.onode.parity_group > 0 => {
                c.onode.parity_group as u64
            }
            _ => 1,
        };
        let from_group = first.div_ceil(k);
        self.parity.retain(|&(o, g), _| o != oid || g < first / k);
        self.recent.retain(|&(o, u), _| o != oid || u < first);
        if !first.is_multiple_of(k) {
            self.parity_suspect.insert((oid, first / k));
        }
        let stale = self.with_index(|ix, io| {
            ix.range(
                io,
                &parity_key(oid, from_group, 0),
                &parity_key(oid, u64::MAX >> 8, u8::MAX),
                usize::MAX,
            )
        })?;
        for (key, v) in stale {
            self.with_index(|ix, io| ix.remove(io, &key))?;
            self.fml.invalidate(Vpa(v as u32));
        }
        Ok(())
    }

    /// Before a truncate to `first` units drops the rest of the group holding the new end:
    /// rebuilds and rewrites that group's damaged units while its parity still covers them, as
    /// [`Self::parity_after_truncate`] recomputes the parity from what the group keeps and a
    /// damaged unit would leave it unusable (the unit lost for good).
    ///
    /// Called before the truncated onode is written, so that no record of a rewrite is newer
    /// than it. Only the units the truncate keeps are rewritten: a rewrite's record newer
    /// than the onode mapped a unit it cut off again in recovery's roll-forward (`ossd
    /// torture --reliability 1 --fill 80`, seed 4165530700685967975, when this ran after the
    /// onode: a growing write later brought the cut-off bytes back).
    pub(super) fn parity_before_truncate(&mut self, oid: Oid, first: u64) -> Result<(), OsdError> {
        let Some((k, _)) = self.protection(oid)? else {
            return Ok(());
        };
        if first.is_multiple_of(k as u64) {
            return Ok(());
        }
        if let Rebuilt::Units(units) = self.reconstruct_group(oid, first / k as u64)? {
            for (u, fill) in units.iter().filter(|(u, _)| *u < first) {
                self.stats.units_corrected += 1;
                self.rewrite_rebuilt(oid, *u, fill)?;
            }
        }
        Ok(())
    }

    /// Recovery's [`Self::parity_before_truncate`]: before recovery drops the units of a write
    /// that was not durable past `first` (the object's recovered length), the group holding
    /// the new end has its damaged units rebuilt while its parity still covers the units
    /// dropped. Parity recomputed from the data the group keeps could not rebuild them
    /// (`ossd torture --reliability 1 --fill 80`, seed 14365765103622577079: a misdirected
    /// program had left a kept unit erased). Only read here: the rebuilt units are held in
    /// `rebuilt_in_recovery` and written by [`Self::rewrite_held_rebuilt`], once the FML knows
    /// which units are valid.
    pub(super) fn rebuild_before_cut(&mut self, oid: Oid, first: u64) -> Result<(), OsdError> {
        let Some((k, _)) = self.protection(oid)? else {
            return Ok(());
        };
        let k = k as u64;
        if first.is_multiple_of(k) {
            return Ok(());
        }
        let g = first / k;
        if self.mapped_units(oid, first, (g + 1) * k)?.is_empty()
            || !self.group_has_unreadable_record(oid, g, k as u8)?
        {
            return Ok(());
        }
        if let Rebuilt::Units(units) = self.reconstruct_group(oid, g)? {
            let kept = units.into_iter().filter(|(u, _)| *u < first);
            self.rebuilt_in_recovery
                .extend(kept.map(|(u, fill)| (oid, u, fill)));
        }
        Ok(())
    }

    /// Writes the units [`Self::rebuild_before_cut`] rebuilt, of objects that still exist.
    pub(super) fn rewrite_held_rebuilt(&mut self) -> Result<(), OsdError> {
        for (oid, u, fill) in std::mem::take(&mut self.rebuilt_in_recovery) {
            if self.load_onode(oid)?.is_some() {
                self.stats.units_corrected += 1;
                self.rewrite_rebuilt(oid, u, &fill)?;
            }
        }
        Ok(())
    }

    /// After a truncate to `first` units: the group holding the new end gets its parity
    /// recomputed from the data it keeps.
    pub(super) fn parity_after_truncate(&mut self, oid: Oid, first: u64) -> Result<(), OsdError> {
        let Some((k, m)) = self.protection(oid)? else {
            return Ok(());
        };
        if first.is_multiple_of(k as u64) {
            return Ok(());
        }
        let g = first / k as u64;
        self.parity_suspect.remove(&(oid, g));
        let mut grp = self.rebuild_group(oid, g, k, m)?;
        self.parity_tick += 1;
        grp.used = self.parity_tick;
        self.parity.insert((oid, g), grp);
        self.trim_parity_cache()
    }

    /// After GC lost a parity unit of group `g` of `oid`: the group's parity is made again now
    /// (from the cache, or from its data) and written at the next checkpoint. Left until a
    /// damaged data unit needed it, it could not be made then: the group would have lost its
    /// protection while looking whole (found by the torture campaign with metadata copies,
    /// seed 3780049206966479456: a strike on a parity unit GC then lost, and one later on a
    /// data unit of the same group).
    pub(super) fn parity_after_loss(&mut self, oid: Oid, g: u64) -> Result<(), OsdError> {
        let Some((k, m)) = self.protection(oid)? else {
            return Ok(());
        };
        if let Some(p) = self.parity.get_mut(&(oid, g)) {
            p.dirty = true;
            return Ok(());
        }
        let mut grp = self.rebuild_group(oid, g, k, m)?;
        self.parity_tick += 1;
        grp.used = self.parity_tick;
        self.parity.insert((oid, g), grp);
        self.trim_parity_cache()
    }

    /// Rebuilds the damaged data units of group `g` of `oid` from its parity (OSCM-11 III):
    /// every other unit of the group is read, the ones that fail are erasures, and the result
    /// is accepted only if the group's covers signature then equals the parity's.
    pub(super) fn reconstruct_group(&mut self, oid: Oid, g: u64) -> Result<Rebuilt, OsdError> {
        let Some((k, m)) = self.protection(oid)? else {
            return Ok(Rebuilt::Not("the object has no parity".into()));
        };
        let cached = self.parity.get(&(oid, g)).map(|p| {
            (
                p.broken || p.needs_rebuild || p.pending != 0,
                p.rows.clone(),
                p.tokens.clone(),
                p.covers,
            )
        });
        let (rows, tokens, covers) = match cached {
            Some((true, ..)) => {
                return Ok(Rebuilt::Not(
                    "the group's parity could not be kept current".into(),
                ))
            }
            Some((false, r, t, c)) => (r, t, c),
            None => match self.read_parity_units(oid, g, k, m)? {
                Some(p) => (p.rows, p.tokens, p.covers),
                None => {
                    return Ok(Rebuilt::Not(
                        "the group's parity units are missing or damaged".into(),
                    ))
                }
            },
        };
        let first = g * k as u64;
        let mapped = self.mapped_units(oid, first, first + k as u64)?;
        let mut shards: Vec<Option<Vec<u8>>> = vec![Some(vec![0; self.unit]); k as usize];
        let mut fps: Vec<Option<u64>> = vec![Some(0); k as usize];
        let mut bad = Vec::new();
        let mut have_bytes = false;
        let mut have_tokens = false;
        let mut sig = 0u32;
        for (u, v) in mapped {
            let i = (u - first) as usize;
            match self.read_for_parity(oid, u, v)? {
                Some(f) => {
                    sig ^= covers_term(i as u64, payload_crc(f.payload()));
                    match f {
                        UnitFill::Bytes(b) => {
                            have_bytes = true;
                            shards[i] = Some(b);
                        }
                        UnitFill::Token(fp) => {
                            have_tokens = true;
                            fps[i] = Some(fp);
                        }
                    }
                }
                None => {
                    shards[i] = None;
                    fps[i] = None;
                    bad.push(i);
                }
            }
        }
        if bad.is_empty() {
            return Ok(Rebuilt::Units(Vec::new()));
        }
        if bad.len() > m as usize {
            return Ok(Rebuilt::Not(format!(
                "{} units of the group are damaged and it has {m} parity units",
                bad.len()
            )));
        }
        let mut out = Vec::new();
        match rows {
            Some(rows) if !have_tokens => {
                let rs = self.codec(k, m)?;
                shards.extend(rows.into_iter().map(Some));
                if let Err(e) = rs.reconstruct_data(&mut shards) {
                    return Ok(Rebuilt::Not(format!("Reed-Solomon: {e:?}")));
                }
                for &i in &bad {
                    let Some(b) = shards[i].take() else {
                        return Err(OsdError::Internal("reconstruct left a hole".into()));
                    };
                    sig ^= covers_term(i as u64, payload_crc(Payload::Bytes(&b)));
                    out.push((first + i as u64, UnitFill::Bytes(b)));
                }
            }
            None if !have_bytes && bad.len() == 1 => {
                let i = bad[0];
                let fp = fps.iter().flatten().fold(tokens[0], |acc, &f| acc ^ f);
                sig ^= covers_term(i as u64, payload_crc(Payload::Fingerprint(fp)));
                out.push((first + i as u64, UnitFill::Token(fp)));
            }
            _ => {
                return Ok(Rebuilt::Not(
                    "fingerprint-mode groups rebuild one unit, from bytes-mode parity only bytes"
                        .into(),
                ))
            }
        }
        if sig != covers {
            return Ok(Rebuilt::Not(
                "the group's parity is stale (its signature does not match the data)".into(),
            ));
        }
        Ok(Rebuilt::Units(out))
    }

    /// Programs a rebuilt unit `u` of `oid` in place of its damaged copy (as GC moves a unit:
    /// the parity is unchanged). Without room it leaves the damaged copy (parity still rebuilds
    /// it on the next read).
    pub(super) fn rewrite_rebuilt(
        &mut self,
        oid: Oid,
        u: u64,
        fill: &UnitFill,
    ) -> Result<(), OsdError> {
        if self.check_writable().is_err() {
            return Ok(());
        }
        self.make_room()?;
        let Some(old) = self.lookup(oid, u)? else {
            return Ok(());
        };
        let stream = self.data_stream(oid)?;
        let length = self.onode_mut(oid)?.onode.logical_length;
        let rec = Record::Data {
            oid,
            offset: u,
            length,
            seq: self.gc.take_seq(),
            moved: true,
            seal: None,
            chunk: None,
        };
        let payload = fill.payload();
        let mut oob = [0u8; RECORD_MAX_BYTES];
        let n = rec.encode(payload_crc(payload), &mut oob);
        let (v, t) = match self.fml.write(self.now, stream, payload, &oob[..n]) {
            Ok(x) => x,
            Err(FmlError::NoSpace { .. }) => return Ok(()),
            Err(e) => return Err(fml_err(e)),
        };
        self.io_done = self.io_done.max(t);
        self.units_since_ckpt += 1;
        self.stats.units_rewritten += 1;
        self.unmap(oid, u)?;
        self.map(oid, u, v.0)?;
        if old != LOST {
            self.fml.invalidate(Vpa(old));
        }
        Ok(())
    }

    /// Reads data unit `u` of `oid` (at write unit `v`, or [`LOST`]) into the scratch buffer,
    /// rebuilding it from the object's parity when it is damaged (`rewrite`: and programming the
    /// rebuilt units in place of the damaged ones). The error of the damaged read is returned
    /// when parity cannot help, with the reason.
    pub(super) fn read_data_repairing(
        &mut self,
        oid: Oid,
        u: u64,
        v: u32,
        rewrite: bool,
    ) -> Result<Content, OsdError> {
        let first = if v == LOST {
            Err(OsdError::Corrupted {
                what: format!("unit {u} of object {oid} (unreadable when GC moved it)"),
                location: "data".into(),
                unit: None,
            })
        } else {
            self.read_data_unit(oid, u, v)
        };
        let e = match first {
            Ok(c) => {
                if let Some(seal) = self.scratch_seal.take() {
                    // Encrypted objects have no parity: only this path opens their units.
                    self.open_scratch(oid, u, v, seal)?;
                }
                return Ok(c);
            }
            Err(e @ (OsdError::Uncorrectable { .. } | OsdError::Corrupted { .. })) => e,
            Err(e) => return Err(e),
        };
        let Some((k, _)) = self.protection(oid)? else {
            return Err(e);
        };
        let units = match self.reconstruct_group(oid, u / k as u64)? {
            Rebuilt::Units(units) => units,
            Rebuilt::Not(why) => return Err(not_rebuilt(e, &why)),
        };
        let Some(fill) = units.iter().find(|(x, _)| *x == u).map(|(_, f)| f.clone()) else {
            return Err(not_rebuilt(
                e,
                "the unit reads back whole when its group is read",
            ));
        };
        self.stats.units_corrected += 1;
        if rewrite {
            for (x, f) in &units {
                if let Err(e) = self.rewrite_rebuilt(oid, *x, f) {
                    if matches!(e, OsdError::Device(FmlError::Flash(FlashError::PowerLoss))) {
                        // The command ends with the device: the caller reopens it, and the
                        // unit is rebuilt again from the parity on flash.
                        return Err(e);
                    }
                    // The bytes are right; the device is not: no more writes until a reopen.
                    self.poison(format!(
                        "rewriting unit {x} of {oid} rebuilt from parity: {e}"
                    ));
                    break;
                }
            }
        }
        Ok(match fill {
            UnitFill::Bytes(b) => {
                self.scratch.copy_from_slice(&b);
                Content::Bytes
            }
            UnitFill::Token(fp) => Content::Fingerprint(fp),
        })
    }

    /// Sets `oid`'s reliability to `m` parity units per group of the store's
    /// [`OsdConfig::parity_group_units`] (0: none): its parity is dropped and, when `m` > 0,
    /// recomputed from its data (every data unit read once).
    pub(super) fn set_reliability(&mut self, oid: Oid, m: u64) -> Result<(), OsdError> {
        if m > MAX_RELIABILITY as u64 {
            return Err(OsdError::InvalidArgument(format!(
                "reliability {m}: at most {MAX_RELIABILITY} parity units per group"
            )));
        }
        let k = self.config.parity_group_units;
        if m > 0 && (k == 0 || k as u64 + m > 256) {
            return Err(OsdError::InvalidArgument(format!(
                "parity groups of {k} data units and {m} parity units: 1 to {} data units",
                256 - m
            )));
        }
        let m = m as u8;
        if m > 0 && self.is_encrypted(oid)? {
            // A rebuilt unit needs the nonce and tag of its lost record, which parity does not
            // keep (docs/DESIGN.md "Per-object encryption").
            return Err(OsdError::InvalidArgument(format!(
                "object {oid} is encrypted: encryption and parity are not combined yet"
            )));
        }
        let s = self.onode_mut(oid)?.onode.compression;
        if m > 0 && (s.codec().is_some() || s.undecided()) {
            // Parity groups over chunk halves that switch are a different layout
            // (docs/DESIGN.md "Per-object compression").
            return Err(OsdError::InvalidArgument(format!(
                "object {oid} is compressed: compression and parity are not combined yet"
            )));
        }
        let c = self.onode_mut(oid)?;
        if c.onode.reliability == m && (m == 0 || c.onode.parity_group == k) {
            return Ok(());
        }
        // Buffered units join the parity as they are programmed: program them first.
        self.flush_all()?;
        self.drop_parity_from(oid, 0)?;
        let now = self.now;
        let c = self.onode_mut(oid)?;
        c.onode.reliability = m;
        c.onode.parity_group = if m > 0 { k } else { 0 };
        c.onode.attr_changed_ns = now;
        c.dirty = true;
        if m == 0 {
            return Ok(());
        }
        let len = c.onode.logical_length;
        let groups = len.div_ceil(self.unit as u64).div_ceil(k as u64);
        for g in 0..groups {
            let mut grp = self.rebuild_group(oid, g, k, m)?;
            self.parity_tick += 1;
            grp.used = self.parity_tick;
            self.parity.insert((oid, g), grp);
            self.trim_parity_cache()?;
        }
        Ok(())
    }

    /// After roll-forward: every group of a protected object that data written since the
    /// checkpoint touched (or that holds the object's end, or that a replayed truncate cut
    /// into, or whose parity units were rolled forward) gets its parity checked against the
    /// data's checksums (OOB records only) and recomputed when it is missing or stale: a crash
    /// between a data program and its parity's leaves parity that could not rebuild the group.
    pub(super) fn settle_parity(&mut self, groups: FxHashSet<(Oid, u64)>) -> Result<(), OsdError> {
        let suspect = std::mem::take(&mut self.parity_suspect);
        let mut groups: Vec<(Oid, u64)> = groups.into_iter().chain(suspect).collect();
        groups.sort_unstable();
        groups.dedup();
        for (oid, g) in groups {
            if self.load_onode(oid)?.is_none() {
                continue;
            }
            let Some((k, m)) = self.protection(oid)? else {
                continue;
            };
            if self.parity_current_by_oob(oid, g, k, m)? {
                continue;
            }
            // A damaged data unit fails the OOB check too, and parity recomputed from the data
            // would lose it for good: parity on flash that rebuilds it (the rebuilt group's
            // signature matching the parity's) is current and kept.
            if self.group_has_unreadable_record(oid, g, k)?
                && matches!(self.reconstruct_group(oid, g)?, Rebuilt::Units(u) if !u.is_empty())
            {
                continue;
            }
            self.stats.parity_groups_recomputed += 1;
            let mut grp = self.rebuild_group(oid, g, k, m)?;
            self.parity_tick += 1;
            grp.used = self.parity_tick;
            self.parity.insert((oid, g), grp);
            self.trim_parity_cache()?;
        }
        Ok(())
    }

    /// Whether a mapped data unit of group `g` is lost or its OOB record cannot be read.
    fn group_has_unreadable_record(&mut self, oid: Oid, g: u64, k: u8) -> Result<bool, OsdError> {
        let first = g * k as u64;
        for (_, v) in self.mapped_units(oid, first, first + k as u64)? {
            if v == LOST || self.sealed_at(v).is_none() {
                return Ok(true);
            }
        }
        Ok(false)
    }

    /// Whether group `g`'s parity units on flash carry the signature of its data units' OOB
    /// records (a quick check: no payload is read).
    pub(super) fn parity_current_by_oob(
        &mut self,
        oid: Oid,
        g: u64,
        k: u8,
        m: u8,
    ) -> Result<bool, OsdError> {
        let first = g * k as u64;
        let mut sig = 0u32;
        for (u, v) in self.mapped_units(oid, first, first + k as u64)? {
            match (v != LOST).then(|| self.sealed_at(v)).flatten() {
                Some(s) => sig ^= covers_term(u - first, s.payload_crc),
                None => return Ok(false),
            }
        }
        for row in 0..m {
            let Some(v) = self.with_index_raw(|ix, io| ix.get(io, &parity_key(oid, g, row)))?
            else {
                return Ok(false);
            };
            match self.sealed_at(v as u32).map(|s| s.record) {
                Some(Record::Parity { covers, .. }) if covers == sig => {}
                _ => return Ok(false),
            }
        }
        Ok(true)
    }
}

/// What a write unit holds, as a fault-injection harness needs to know it to tell which damage
/// parity must mask ([`ObjectStore::unit_role`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum UnitRole {
    /// Nothing needs it: superseded, released, or never mapped.
    Stale,
    /// A unit of parity group `group` of `oid`, an object with parity: data unit `unit`, or
    /// one of the group's parity units (`unit: None`), programmed with sequence number `seq`.
    Protected {
        /// The object.
        oid: Oid,
        /// The parity group.
        group: u64,
        /// The data unit's index in the object; `None` for a parity unit.
        unit: Option<u64>,
        /// The sequence number its record carries.
        seq: u64,
    },
    /// A metadata unit with a copy beside it ([`OsdConfig::metadata_copies`]): the unit written
    /// at `unit` (`copy: false`) or its copy at `unit + 1` (`copy: true`), programmed with
    /// sequence number `seq`. Either one damaged is masked, as long as the other is not.
    Copied {
        /// The metadata unit's address (its copy's less one).
        unit: u32,
        /// Whether this is the copy.
        copy: bool,
        /// The sequence number its record carries.
        seq: u64,
    },
    /// Anything else still needed: onodes, index nodes, the checkpoint, small objects, units
    /// of objects without parity (metadata without a copy).
    Unprotected,
}

impl<F: Flash> ObjectStore<F> {
    /// What write unit `v` holds (read from its record, so ask before damaging it).
    pub fn unit_role(&mut self, v: u32) -> Result<UnitRole, OsdError> {
        if !self.fml.is_valid(Vpa(v)) {
            // A copy is never valid itself: it guards the unit before it while that is.
            let mut oob = [0u8; SCAN_RECORD_BYTES];
            let read = self.fml.read(self.now, Vpa(v), &mut [], &mut oob).is_ok();
            return Ok(if read {
                self.copy_role(v, &oob)
            } else {
                UnitRole::Stale
            });
        }
        let sealed = self.sealed_at(v);
        self.role_of(v, sealed)
    }

    /// The role of a unit that is not valid and whose record is `oob`: the copy of the valid
    /// metadata unit before it, or stale.
    fn copy_role(&self, v: u32, oob: &[u8]) -> UnitRole {
        let Some(of) = v.checked_sub(1) else {
            return UnitRole::Stale;
        };
        if copy_address(&self.fml, of).is_none() || !self.fml.is_valid(Vpa(of)) {
            return UnitRole::Stale;
        }
        match Record::decode_copy(oob, of) {
            Ok(Some(s)) => UnitRole::Copied {
                unit: of,
                copy: true,
                seq: s.record.seq(),
            },
            _ => UnitRole::Stale,
        }
    }

    /// What write unit `v` holds, from the OOB bytes its program carried (a program the device
    /// sent elsewhere, so that `v` reads erased).
    pub fn unit_role_from_oob(&mut self, v: u32, oob: &[u8]) -> Result<UnitRole, OsdError> {
        let sealed = Record::decode_sealed(oob).ok().flatten();
        if !self.fml.is_valid(Vpa(v)) {
            // GC may have read the page erased since, and mapped the unit as lost: then the
            // program's own unit was struck, not a stale one (`ossd torture --fill 80`, seed
            // 14377800186829715603: GC chose the block the astray unit had just been written to;
            // 2192072673253898977: GC's own move of a compressed chunk's unit). A chunk's unit
            // is keyed by its stored unit, as its record's offset says.
            if let Some(Record::Data { oid, offset, .. }) = sealed.as_ref().map(|s| s.record) {
                if self.load_onode(oid)?.is_some() && self.lookup(oid, offset)? == Some(LOST) {
                    return self.role_of(LOST, sealed);
                }
            }
            return Ok(self.copy_role(v, oob));
        }
        self.role_of(v, sealed)
    }

    fn role_of(&mut self, v: u32, sealed: Option<Sealed>) -> Result<UnitRole, OsdError> {
        let Some(sealed) = sealed else {
            return Ok(UnitRole::Unprotected);
        };
        let seq = sealed.record.seq();
        let (oid, group, unit) = match sealed.record {
            Record::Data {
                oid,
                offset,
                chunk: None,
                ..
            } => {
                if self.load_onode(oid)?.is_none() || self.lookup(oid, offset)? != Some(v) {
                    return Ok(UnitRole::Unprotected);
                }
                let Some((k, _)) = self.protection(oid)? else {
                    return Ok(UnitRole::Unprotected);
                };
                (oid, offset / k as u64, Some(offset))
            }
            Record::Parity {
                oid, group, row, ..
            } => {
                let key = parity_key(oid, group, row);
                let at = self.with_index(|ix, io| ix.get(io, &key))?;
                if at != Some(v as u64) || self.load_onode(oid)?.is_none() {
                    return Ok(UnitRole::Unprotected);
                }
                if self.protection(oid)?.is_none() {
                    return Ok(UnitRole::Unprotected);
                }
                (oid, group, None)
            }
            r if r.has_copy() => {
                // Guarded if the next unit is its copy.
                let mut oob = [0u8; SCAN_RECORD_BYTES];
                let copied = copy_address(&self.fml, v).is_some_and(|c| {
                    self.fml.read(self.now, Vpa(c), &mut [], &mut oob).is_ok()
                        && matches!(Record::decode_copy(&oob, v), Ok(Some(_)))
                });
                return Ok(if copied {
                    UnitRole::Copied {
                        unit: v,
                        copy: false,
                        seq,
                    }
                } else {
                    UnitRole::Unprotected
                });
            }
            _ => return Ok(UnitRole::Unprotected),
        };
        Ok(UnitRole::Protected {
            oid,
            group,
            unit,
            seq,
        })
    }

    /// Whether one damaged unit of group `group` of `oid`, programmed with sequence number
    /// `seq`, would still be rebuilt after a crash now. It must be reached through the
    /// checkpointed index (a unit written since is found only by its record, which the damage
    /// made unreadable), and the group's parity on flash must be current: a crash loses parity
    /// that only the cache holds (docs/RELIABILITY.md, "Objects with parity").
    pub fn parity_survives_crash(&self, oid: Oid, group: u64, seq: u64) -> bool {
        seq < self.checkpoint_seq
            && !self
                .parity
                .get(&(oid, group))
                .is_some_and(|p| p.dirty || p.broken || p.needs_rebuild || p.pending != 0)
    }

    /// Whether data unit `u` of `oid` is mapped as lost (GC could not read it): it stays
    /// damaged until parity rebuilds it.
    pub fn unit_lost(&mut self, oid: Oid, u: u64) -> Result<bool, OsdError> {
        if self.load_onode(oid)?.is_none() {
            return Ok(false);
        }
        Ok(self.lookup(oid, u)? == Some(LOST))
    }
}

/// The damaged read's error, saying why parity did not rebuild the unit.
fn not_rebuilt(e: OsdError, why: &str) -> OsdError {
    match e {
        // After the location, so the reason is not read as the damaged unit's own.
        OsdError::Uncorrectable {
            what,
            location,
            unit,
        } => OsdError::Uncorrectable {
            what,
            location: format!("{location} (parity did not rebuild it: {why})"),
            unit,
        },
        OsdError::Corrupted {
            what,
            location,
            unit,
        } => OsdError::Corrupted {
            what,
            location: format!("{location} (parity did not rebuild it: {why})"),
            unit,
        },
        e => e,
    }
}

impl<F: Flash> ObjectStore<F> {
    /// The OOB record of unit `v` and the payload checksum it carries, if it reads back whole
    /// (the OOB area only: no payload is transferred).
    pub(super) fn sealed_at(&mut self, v: u32) -> Option<Sealed> {
        let mut oob = [0u8; SCAN_RECORD_BYTES];
        let (t, _) = self.fml.read(self.now, Vpa(v), &mut [], &mut oob).ok()?;
        self.now = self.now.max(t);
        Record::decode_sealed(&oob).ok().flatten()
    }
}
