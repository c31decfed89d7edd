//! Per-object compression in the store (issue 16 item 6; docs/DESIGN.md "Per-object
//! compression"): a compressed object's logical space is cut into chunks of C units; chunk c
//! is stored in k <= C units at physical unit indexes `c * 2C + h * C + j` (half h alternates
//! between generations, so the old generation stays mapped until the new one is whole), and an
//! index entry of kind 4 per chunk says which generation, half and k are current.

use super::*;
use crate::compress::{
    compress_chunk, decompress_chunk, looks_compressed, Codec, Compression, CompressionState,
    MAX_CHUNK_UNITS,
};
use crate::record::{ChunkTag, GENERATION_LIMIT};

pub(super) const KIND_CHUNK: u8 = 4;

/// The current stored form of one chunk (the value of its kind-4 index entry: generation
/// in bits 24..64, half in bit 16, raw in bit 8, units in bits 0..8).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct ChunkMap {
    pub(super) generation: u64,
    pub(super) half: u64,
    pub(super) units: u64,
    pub(super) raw: bool,
}

impl ChunkMap {
    fn pack(self) -> u64 {
        self.generation << 24 | self.half << 16 | (self.raw as u64) << 8 | self.units
    }
    fn unpack(v: u64) -> ChunkMap {
        ChunkMap {
            generation: v >> 24,
            half: (v >> 16) & 1,
            units: v & 0xFF,
            raw: (v >> 8) & 1 != 0,
        }
    }
}

pub(super) fn chunk_key(oid: Oid, c: u64) -> IndexKey {
    IndexKey {
        oid: oid.as_u128(),
        kind: KIND_CHUNK,
        offset: c,
    }
}

/// Physical unit index of unit `j` of half `h` of chunk `c` (chunks of `cu` units).
pub(super) fn physical(c: u64, h: u64, j: u64, cu: u64) -> u64 {
    c * 2 * cu + h * cu + j
}

/// The last chunk decompressed (or written), so that sequential reads decompress each chunk
/// once.
pub(super) struct ChunkCache {
    oid: Oid,
    chunk: u64,
    generation: u64,
    bytes: Vec<u8>,
}

/// A chunk unit found by recovery: where it is, and the sequence number that put it there.
#[derive(Clone, Copy)]
pub(super) struct FoundUnit {
    pub(super) seq: u64,
    pub(super) vpa: u32,
    pub(super) offset: u64,
    pub(super) tag: ChunkTag,
}

impl<F: Flash> ObjectStore<F> {
    /// The codec and chunk units of `oid` if its data is stored in compressed chunks.
    pub(super) fn chunked(&mut self, oid: Oid) -> Result<Option<(Codec, u64)>, OsdError> {
        let s = self.onode_mut(oid)?.onode.compression;
        Ok(s.codec().map(|c| (c, s.chunk_units())))
    }

    /// Sets the `compression` attribute; only while the object is empty (its data is laid out
    /// in chunks or in plain units, never both), and not with parity (a parity group over
    /// halves that switch is a different layout: refused like encryption with parity).
    pub(super) fn set_compression(&mut self, oid: Oid, code: u64) -> Result<(), OsdError> {
        let attr = Compression::from_code(code).ok_or_else(|| {
            OsdError::InvalidArgument(format!(
                "compression {code}: 0 (none), 1 (lz4), 2 (zstd) or 3 (auto)"
            ))
        })?;
        let cu = self.config.compression_chunk_units as u32;
        if !cu.is_power_of_two() || cu > MAX_CHUNK_UNITS {
            return Err(OsdError::InvalidArgument(format!(
                "osd.compression_chunk_units = {cu}: a power of two from 1 to {MAX_CHUNK_UNITS}"
            )));
        }
        let o = &self.onode_mut(oid)?.onode;
        if o.read_only {
            return Err(OsdError::ReadOnly(oid));
        }
        if o.compression.attr() == attr {
            return Ok(());
        }
        if o.logical_length != 0 || o.used_bytes != 0 || o.inline.is_some() {
            return Err(OsdError::InvalidArgument(format!(
                "object {oid} holds data: compression is set at creation or while the object \
                 is empty (truncate it to 0 first)"
            )));
        }
        if o.reliability != 0 && attr != Compression::None {
            return Err(OsdError::InvalidArgument(format!(
                "object {oid} has parity (reliability {}): compression and parity are not \
                 combined yet (docs/DESIGN.md)",
                o.reliability
            )));
        }
        if oid.is_partition_root() {
            return Err(OsdError::InvalidArgument(
                "a partition holds no data to compress".into(),
            ));
        }
        // An empty object has no small-object entry worth keeping: it lives in chunks now.
        self.drop_small(oid)?;
        let now = self.now;
        let c = self.onode_mut(oid)?;
        c.onode.compression = CompressionState::new(attr, cu);
        c.onode.attr_changed_ns = now;
        c.dirty = true;
        // As for encryption: the onode that says how units are laid out reaches flash before
        // any unit of the new layout, or recovery could read chunk units as plain ones.
        self.flush_all()
    }

    /// `auto`'s choice, made at the object's first write: content that starts like a
    /// compressed format (sniffed at offset 0) is stored as written, anything else in zstd
    /// chunks (a chunk that does not compress is then stored raw). Fingerprint writes carry
    /// no bytes to compress.
    pub(super) fn decide_auto(
        &mut self,
        oid: Oid,
        offset: u64,
        data: Option<&[u8]>,
    ) -> Result<(), OsdError> {
        let s = self.onode_mut(oid)?.onode.compression;
        if !s.undecided() {
            return Ok(());
        }
        let codec = match data {
            None => None,
            Some(d) if offset == 0 && looks_compressed(d) => None,
            Some(_) => Some(Codec::Zstd),
        };
        let c = self.onode_mut(oid)?;
        c.onode.compression = s.decide(codec);
        c.dirty = true;
        if codec.is_some() {
            self.stats.auto_compressed += 1;
        } else {
            self.stats.auto_skipped += 1;
        }
        // The layout is decided: its onode reaches flash before the first unit (see
        // `set_compression`).
        self.flush_all()
    }

    pub(super) fn chunk_entry(&mut self, oid: Oid, c: u64) -> Result<Option<ChunkMap>, OsdError> {
        let v = self.with_index_raw(|ix, io| ix.get(io, &chunk_key(oid, c)))?;
        Ok(v.map(ChunkMap::unpack))
    }

    /// Reads the stored form of chunk `c` (its units, in one batch issued together).
    fn read_stored(&mut self, oid: Oid, c: u64, m: ChunkMap, cu: u64) -> Result<Vec<u8>, OsdError> {
        let unit = self.unit;
        let mut stored = vec![0u8; m.units as usize * unit];
        for j in 0..m.units {
            let p = physical(c, m.half, j, cu);
            let Some(v) = self.lookup(oid, p)? else {
                return Err(OsdError::Corrupted {
                    what: format!(
                        "object {oid} chunk {c}: unit {j} of its {} is not mapped",
                        m.units
                    ),
                    location: "index".into(),
                    unit: None,
                });
            };
            self.stats.data_units_read += 1;
            if self.read_data_repairing(oid, p, v, false)? != Content::Bytes {
                return Err(OsdError::Corrupted {
                    what: format!("object {oid} chunk {c}: a unit holds a fingerprint"),
                    location: format!("unit {v}"),
                    unit: Some(v),
                });
            }
            stored[j as usize * unit..(j as usize + 1) * unit].copy_from_slice(&self.scratch);
        }
        Ok(stored)
    }

    /// The logical bytes of chunk `c` (whole units; shorter than C units when the chunk is),
    /// or `None` when the chunk was never written.
    fn chunk_bytes(&mut self, oid: Oid, c: u64) -> Result<Option<&[u8]>, OsdError> {
        let Some((_, cu)) = self.chunked(oid)? else {
            return Err(OsdError::Internal(format!(
                "object {oid} is not compressed"
            )));
        };
        let Some(m) = self.chunk_entry(oid, c)? else {
            return Ok(None);
        };
        let hit = self
            .chunk_cache
            .as_ref()
            .is_some_and(|k| k.oid == oid && k.chunk == c && k.generation == m.generation);
        if !hit {
            let stored = self.read_stored(oid, c, m, cu)?;
            // The chunk's units were issued together; what uses its bytes waits for them.
            self.now = self.now();
            let bytes = if m.raw {
                stored
            } else {
                self.stats.chunks_decompressed += 1;
                decompress_chunk(&stored, self.unit).map_err(|e| OsdError::Corrupted {
                    what: format!("object {oid} chunk {c} (generation {}): {e}", m.generation),
                    location: "data".into(),
                    unit: None,
                })?
            };
            self.chunk_cache = Some(ChunkCache {
                oid,
                chunk: c,
                generation: m.generation,
                bytes,
            });
        }
        Ok(self.chunk_cache.as_ref().map(|k| k.bytes.as_slice()))
    }

    /// Reads `dst.len()` bytes from byte `b0` of logical unit `u` of compressed object `oid`:
    /// a raw chunk reads that unit alone, a compressed one is read whole and decompressed
    /// (once, for sequential reads: the chunk cache).
    pub(super) fn read_chunk_unit_into(
        &mut self,
        oid: Oid,
        u: u64,
        b0: usize,
        dst: &mut [u8],
    ) -> Result<(), OsdError> {
        let Some((_, cu)) = self.chunked(oid)? else {
            return Err(OsdError::Internal(format!(
                "object {oid} is not compressed"
            )));
        };
        let (c, j) = (u / cu, u % cu);
        let unit = self.unit;
        match self.chunk_entry(oid, c)? {
            None => dst.fill(0),
            Some(m) if m.raw => {
                // No decompression: the unit asked for is read alone.
                if j >= m.units {
                    dst.fill(0);
                    return Ok(());
                }
                let p = physical(c, m.half, j, cu);
                let Some(v) = self.lookup(oid, p)? else {
                    return Err(OsdError::Corrupted {
                        what: format!("object {oid} chunk {c}: raw unit {j} is not mapped"),
                        location: "index".into(),
                        unit: None,
                    });
                };
                self.stats.data_units_read += 1;
                self.read_data_repairing(oid, p, v, false)?;
                dst.copy_from_slice(&self.scratch[b0..b0 + dst.len()]);
            }
            Some(_) => {
                let bytes = self.chunk_bytes(oid, c)?.unwrap_or(&[]);
                let at = j as usize * unit + b0;
                // Units past the chunk's stored length read as zeros.
                let src = bytes.get(at..).unwrap_or(&[]);
                let have = src.len().min(dst.len());
                dst[..have].copy_from_slice(&src[..have]);
                dst[have..].fill(0);
            }
        }
        Ok(())
    }

    /// Brings the old contents of the sectors `e` lacks in from its chunk.
    pub(super) fn merge_old_chunked(&mut self, e: &mut Entry<(Oid, u64)>) -> Result<(), OsdError> {
        let mut old = vec![0u8; self.unit];
        self.read_chunk_unit_into(e.key.0, e.key.1, 0, &mut old)?;
        // Past the object's end the old bytes read as zeros (see `merged_keep`).
        let keep = self.merged_keep(e.key.0, e.key.1 * self.unit as u64, self.unit)?;
        old[keep..].fill(0);
        let Fill::Bytes(b) = &mut e.fill else {
            return Err(OsdError::Internal(format!(
                "a fingerprint unit of compressed object {}",
                e.key.0
            )));
        };
        for s in 0..self.unit / SECTOR as usize {
            if e.mask & (1 << s) == 0 {
                let r = s * SECTOR as usize..(s + 1) * SECTOR as usize;
                b[r.clone()].copy_from_slice(&old[r]);
            }
        }
        Ok(())
    }

    /// Programs the chunk of buffered unit `first` with every buffered unit of that chunk: the
    /// chunk's new logical bytes (old ones merged where the buffer lacks them), compressed
    /// unless that saves no unit, into the half the current generation does not use; then the
    /// chunk's entry switches to the new generation and the old half is released.
    pub(super) fn program_chunk(&mut self, first: Entry<(Oid, u64)>) -> Result<(), OsdError> {
        let oid = first.key.0;
        let Some((codec, cu)) = self.chunked(oid)? else {
            return Err(OsdError::Internal(format!(
                "object {oid} is not compressed"
            )));
        };
        let unit = self.unit;
        let c = first.key.1 / cu;
        let mut entries = vec![first];
        for u in c * cu..(c + 1) * cu {
            if let Some(e) = self.buf.take((oid, u)) {
                entries.push(e);
            }
        }
        let length = self.onode_mut(oid)?.onode.logical_length;
        let in_length = length.div_ceil(unit as u64).saturating_sub(c * cu).min(cu);
        let in_buffer = entries
            .iter()
            .map(|e| e.key.1 - c * cu + 1)
            .max()
            .unwrap_or(0);
        let n = in_length.max(in_buffer) as usize;
        if let Some(m) = self.chunk_entry(oid, c)? {
            // A raw chunk that does not grow takes its units in place, one by one, as a plain
            // object's would: no chunk read-modify-write for incompressible data. Not when
            // sealed: a unit's nonce is its generation, never used twice under one key.
            if m.raw && n as u64 <= m.units && !self.is_encrypted(oid)? {
                return self.update_raw_in_place(oid, c, cu, m, entries);
            }
        }
        let full = self.full_mask();
        let covered = (0..n as u64).all(|j| {
            entries
                .iter()
                .any(|e| e.key.1 == c * cu + j && e.mask == full)
        });
        let mut logical = vec![0u8; n * unit];
        if !covered {
            // A read-modify-write of the chunk.
            let mut merged = false;
            // Past the object's end the old bytes read as zeros (see `merged_keep`).
            let keep = self.merged_keep(oid, c * cu * unit as u64, logical.len())?;
            if let Some(old) = self.chunk_bytes(oid, c)? {
                let m = old.len().min(keep);
                logical[..m].copy_from_slice(&old[..m]);
                merged = true;
            }
            self.stats.rmw_reads += merged as u64;
            self.now = self.now();
        }
        for e in &entries {
            let Fill::Bytes(b) = &e.fill else {
                return Err(OsdError::Internal(format!(
                    "a fingerprint unit of compressed object {oid}"
                )));
            };
            let at = (e.key.1 - c * cu) as usize * unit;
            for s in 0..unit / SECTOR as usize {
                if e.mask & (1 << s) != 0 {
                    let r = s * SECTOR as usize..(s + 1) * SECTOR as usize;
                    logical[at + r.start..at + r.end].copy_from_slice(&b[r]);
                }
            }
        }
        for e in entries {
            self.buf.recycle(e);
        }
        let (stored, raw) = match compress_chunk(codec, &logical, unit) {
            Some(s) => (s, false),
            None => (logical.clone(), true),
        };
        self.write_generation(oid, c, cu, &stored, raw)?;
        self.stats.chunks_written += 1;
        self.stats.chunks_stored_raw += raw as u64;
        self.stats.chunk_logical_bytes += logical.len() as u64;
        self.stats.chunk_stored_bytes += stored.len() as u64;
        if let Some(m) = self.chunk_entry(oid, c)? {
            self.chunk_cache = Some(ChunkCache {
                oid,
                chunk: c,
                generation: m.generation,
                bytes: logical,
            });
        }
        self.bound_dirty_index()
    }

    /// Programs the buffered units of raw chunk `c` (current stored form `m`) in place: each
    /// keeps its physical index, generation and unit count, so recovery takes the newest copy
    /// of each (as it does for GC copies) and the chunk stays whole at every moment.
    fn update_raw_in_place(
        &mut self,
        oid: Oid,
        c: u64,
        cu: u64,
        m: ChunkMap,
        entries: Vec<Entry<(Oid, u64)>>,
    ) -> Result<(), OsdError> {
        let full = self.full_mask();
        let tag = ChunkTag {
            generation: m.generation,
            units: m.units as u8,
            raw: true,
        };
        if self
            .chunk_cache
            .as_ref()
            .is_some_and(|k| k.oid == oid && k.chunk == c)
        {
            self.chunk_cache = None;
        }
        let priority = self.onode_mut(oid)?.onode.priority;
        for mut e in entries {
            if e.mask != full {
                self.stats.rmw_reads += 1;
                self.merge_old_chunked(&mut e)?;
                self.now = self.now();
            }
            self.make_room_at(priority)?;
            let p = physical(c, m.half, e.key.1 - c * cu, cu);
            let Fill::Bytes(b) = &e.fill else {
                return Err(OsdError::Internal(format!(
                    "a fingerprint unit of compressed object {oid}"
                )));
            };
            let stream = self.data_stream(oid)?;
            let rec = Record::Data {
                oid,
                offset: p,
                length: 0,
                seq: self.gc.take_seq(),
                moved: false,
                seal: None,
                chunk: Some(tag),
            };
            let payload = Payload::Bytes(b);
            let mut oob = [0u8; RECORD_MAX_BYTES];
            let n = rec.encode(payload_crc(payload), &mut oob);
            let (v, t) = match self.fml.write(self.now, stream, payload, &oob[..n]) {
                Ok(x) => x,
                Err(FmlError::NoSpace { .. }) => return Err(self.no_space(self.unit as u64)),
                Err(e) => return Err(fml_err(e)),
            };
            self.io_done = self.io_done.max(t);
            self.stats.data_units_written += 1;
            self.units_since_ckpt += 1;
            match self.unmap(oid, p)? {
                Some(old) if old != LOST => {
                    self.fml.invalidate(Vpa(old));
                }
                Some(_) => {}
                None => {
                    return Err(OsdError::Internal(format!(
                        "object {oid} chunk {c}: raw unit {p} was not mapped"
                    )))
                }
            }
            self.map(oid, p, v.0)?;
            self.buf.recycle(e);
        }
        self.stats.raw_units_in_place += 1;
        self.bound_dirty_index()
    }

    /// Unmaps (and invalidates) every unit of half `h` of chunk `c` from unit `from` on;
    /// returns how many were mapped.
    fn release_half(
        &mut self,
        oid: Oid,
        c: u64,
        h: u64,
        from: u64,
        cu: u64,
        invalidate: bool,
    ) -> Result<u64, OsdError> {
        let mut n = 0;
        for j in from..cu {
            if let Some(v) = self.unmap(oid, physical(c, h, j, cu))? {
                if invalidate && v != LOST {
                    self.fml.invalidate(Vpa(v));
                }
                n += 1;
            }
        }
        Ok(n)
    }

    /// Programs one generation of chunk `c`: `stored` (whole units) into the free half, each
    /// unit mapped as it is programmed (so GC relocates it like any unit), then the switch.
    fn write_generation(
        &mut self,
        oid: Oid,
        c: u64,
        cu: u64,
        stored: &[u8],
        raw: bool,
    ) -> Result<(), OsdError> {
        let unit = self.unit;
        let k = (stored.len() / unit) as u64;
        let old = self.chunk_entry(oid, c)?;
        let half = old.map_or(0, |m| 1 - m.half);
        // Units a generation torn by a crash left in that half (recovery keeps them only
        // when it cannot tell): released before the new generation goes there.
        let strays = self.release_half(oid, c, half, 0, cu, true)?;
        let generation = self.gc.take_seq();
        if generation >= GENERATION_LIMIT {
            return Err(OsdError::Internal(format!(
                "chunk generation {generation} does not fit 40 bits"
            )));
        }
        let tag = ChunkTag {
            generation,
            units: k as u8,
            raw,
        };
        let encrypted = self.is_encrypted(oid)?;
        let priority = self.onode_mut(oid)?.onode.priority;
        let mut buf = vec![0u8; unit];
        let mut added = 0u64;
        let result = (|| -> Result<(), OsdError> {
            for j in 0..k {
                self.make_room_at(priority)?;
                let p = physical(c, half, j, cu);
                buf.copy_from_slice(&stored[j as usize * unit..(j as usize + 1) * unit]);
                // Compress, then encrypt: each unit is sealed on its own, its nonce's input the
                // generation (unique per program of this (object, unit) under the key).
                let seal = if encrypted {
                    Some(self.seal_unit(oid, p, generation, &mut buf)?)
                } else {
                    None
                };
                let stream = self.data_stream(oid)?;
                let rec = Record::Data {
                    oid,
                    offset: p,
                    length: 0,
                    seq: self.gc.take_seq(),
                    moved: false,
                    seal,
                    chunk: Some(tag),
                };
                let payload = Payload::Bytes(&buf);
                let mut oob = [0u8; RECORD_MAX_BYTES];
                let n = rec.encode(payload_crc(payload), &mut oob);
                let (v, t) = match self.fml.write(self.now, stream, payload, &oob[..n]) {
                    Ok(x) => x,
                    Err(FmlError::NoSpace { .. }) => return Err(self.no_space(unit as u64)),
                    Err(e) => return Err(fml_err(e)),
                };
                self.io_done = self.io_done.max(t);
                self.stats.data_units_written += 1;
                self.units_since_ckpt += 1;
                self.map(oid, p, v.0)?;
                added += 1;
            }
            Ok(())
        })();
        // Used bytes follow the units mapped: the new ones in, the strays and (once the new
        // generation is whole) the old half out. On a failure the old generation stays
        // current and the units programmed stay mapped as strays, released by the next
        // generation written to this half.
        let mut gone = strays;
        let outcome = match result {
            Ok(()) => {
                let m = ChunkMap {
                    generation,
                    half,
                    units: k,
                    raw,
                };
                self.with_index_raw(|ix, io| ix.insert(io, chunk_key(oid, c), m.pack()))?;
                if let Some(o) = old {
                    gone += self.release_half(oid, c, o.half, 0, cu, true)?;
                }
                Ok(())
            }
            Err(e) => Err(e),
        };
        let unit = unit as u64;
        let cn = self.onode_mut(oid)?;
        cn.onode.used_bytes = (cn.onode.used_bytes + added * unit).saturating_sub(gone * unit);
        cn.dirty = true;
        outcome
    }

    /// The first physical unit index of the chunks that hold only logical units from
    /// `first` on (the chunk straddling `first` is kept whole), and the first such chunk.
    pub(super) fn chunks_from(
        &mut self,
        oid: Oid,
        first: u64,
    ) -> Result<Option<(u64, u64)>, OsdError> {
        Ok(match self.load_onode(oid)? {
            Some(c) if c.onode.compression.codec().is_some() => {
                let cu = c.onode.compression.chunk_units();
                let chunk = first.div_ceil(cu);
                Some((chunk * 2 * cu, chunk))
            }
            _ => None,
        })
    }

    /// The object grows past `length`: the rest of the chunk holding its end must read as
    /// zeros, whatever stale bytes an earlier truncate left there (the chunk is rewritten).
    pub(super) fn zero_chunk_gap(
        &mut self,
        oid: Oid,
        length: u64,
        cu: u64,
    ) -> Result<(), OsdError> {
        let span = cu * self.unit as u64;
        let tail = length % span;
        if tail == 0 {
            return Ok(());
        }
        let c = length / span;
        let buffered = (c * cu..(c + 1) * cu).any(|u| self.buf.get((oid, u)).is_some());
        if !buffered && self.chunk_entry(oid, c)?.is_none() {
            return Ok(());
        }
        let zeros = vec![0u8; (span - tail) as usize];
        self.write_inner(oid, length, span - tail, Some(&zeros), 0)?;
        // Zeroing is not writing: the length stays where it was (the caller sets the new one).
        self.onode_mut(oid)?.onode.logical_length = length;
        self.stats.host_write_bytes -= span - tail;
        Ok(())
    }

    /// Removes the chunk entries of `oid` from chunk `first` on.
    pub(super) fn drop_chunks_from(&mut self, oid: Oid, first: u64) -> Result<(), OsdError> {
        if self
            .chunk_cache
            .as_ref()
            .is_some_and(|k| k.oid == oid && k.chunk >= first)
        {
            self.chunk_cache = None;
        }
        self.with_index(|ix, io| {
            ix.remove_range(io, &chunk_key(oid, first), &chunk_key(oid, u64::MAX))
        })?;
        Ok(())
    }

    /// Recovery: settles chunk `c` of `oid` from the chunk units written since the checkpoint
    /// (`found`, in sequence order): the newest generation whose units are all present (rolled
    /// forward, or mapped already and carrying that generation in their records) becomes
    /// current; a generation a power cut tore is dropped, so the chunk comes back whole, old
    /// or new. Units of no current generation are unmapped (recovery then treats them as
    /// garbage).
    pub(super) fn settle_chunk(
        &mut self,
        oid: Oid,
        c: u64,
        cu: u64,
        found: &[FoundUnit],
    ) -> Result<(), OsdError> {
        let current = self.chunk_entry(oid, c)?;
        // Newest copy of each unit of each generation.
        let mut gens: std::collections::BTreeMap<u64, (ChunkTag, u64, FxHashMap<u64, u32>)> =
            std::collections::BTreeMap::new();
        let mut inconsistent: FxHashSet<u64> = FxHashSet::default();
        for f in found {
            let h = (f.offset / cu) % 2;
            let j = f.offset % cu;
            let g = gens
                .entry(f.tag.generation)
                .or_insert_with(|| (f.tag, h, FxHashMap::default()));
            if g.0 != f.tag || g.1 != h || j >= f.tag.units as u64 {
                inconsistent.insert(f.tag.generation);
            }
            g.2.insert(j, f.vpa);
        }
        let mut chosen: Option<(ChunkMap, Vec<u32>)> = None;
        for (&g, (tag, h, units)) in gens.iter().rev() {
            if inconsistent.contains(&g) || current.is_some_and(|m| m.generation >= g) {
                continue;
            }
            let mut vpas = Vec::with_capacity(tag.units as usize);
            for j in 0..tag.units as u64 {
                let v = match units.get(&j) {
                    Some(&v) => Some(v),
                    // Programmed before the checkpoint (which caught the generation half
                    // written): mapped, and its record says so.
                    None => match self.lookup(oid, physical(c, *h, j, cu))? {
                        Some(v) if v != LOST => match self.record_at(v) {
                            Some(Record::Data {
                                oid: o,
                                chunk: Some(t),
                                ..
                            }) if o == oid && t == *tag => Some(v),
                            _ => None,
                        },
                        _ => None,
                    },
                };
                match v {
                    Some(v) => vpas.push(v),
                    None => break,
                }
            }
            if vpas.len() == tag.units as usize {
                let m = ChunkMap {
                    generation: g,
                    half: *h,
                    units: tag.units as u64,
                    raw: tag.raw,
                };
                chosen = Some((m, vpas));
                break;
            }
        }
        let (m, vpas) = match chosen {
            Some(x) => x,
            None => {
                let Some(m) = current else {
                    // No generation is whole and none was current: the chunk was never
                    // durably written.
                    self.release_half(oid, c, 0, 0, cu, false)?;
                    self.release_half(oid, c, 1, 0, cu, false)?;
                    return Ok(());
                };
                // The current generation stays; GC copies of its units made since the
                // checkpoint are where its units are now.
                let mut vpas = Vec::new();
                for j in 0..m.units {
                    let copy = gens.get(&m.generation).and_then(|g| g.2.get(&j).copied());
                    match copy {
                        Some(v) => vpas.push(v),
                        None => match self.lookup(oid, physical(c, m.half, j, cu))? {
                            Some(v) => vpas.push(v),
                            None => {
                                return Err(OsdError::Corrupted {
                                    what: format!(
                                        "object {oid} chunk {c}: unit {j} of generation {} is \
                                         not mapped",
                                        m.generation
                                    ),
                                    location: "recovery".into(),
                                    unit: None,
                                })
                            }
                        },
                    }
                }
                (m, vpas)
            }
        };
        self.release_half(oid, c, 0, 0, cu, false)?;
        self.release_half(oid, c, 1, 0, cu, false)?;
        for (j, v) in vpas.into_iter().enumerate() {
            self.map(oid, physical(c, m.half, j as u64, cu), v)?;
        }
        self.with_index_raw(|ix, io| ix.insert(io, chunk_key(oid, c), m.pack()))?;
        Ok(())
    }

    /// Recovery, after roll-forward: settles every chunk a unit written since the checkpoint
    /// belongs to. `found` is in sequence order; `cut` lists, per object, the truncations and
    /// removals rolled forward (sequence number, first logical unit gone): units written
    /// before a truncation that dropped their chunk are not brought back.
    pub(super) fn settle_chunks(
        &mut self,
        found: Vec<(Oid, FoundUnit)>,
        cut: &FxHashMap<Oid, Vec<(u64, u64)>>,
        touched: &mut FxHashSet<Oid>,
    ) -> Result<(), OsdError> {
        let mut per_chunk: std::collections::BTreeMap<(Oid, u64), Vec<FoundUnit>> =
            std::collections::BTreeMap::new();
        for (oid, f) in found {
            touched.insert(oid);
            let Some(c) = self.load_onode(oid)? else {
                continue;
            };
            let s = c.onode.compression;
            if s.codec().is_none() {
                continue;
            }
            let cu = s.chunk_units();
            let chunk = f.offset / (2 * cu);
            // Cut off since, or an earlier incarnation's (older than the object's creation).
            let gone = f.seq <= c.onode.created_seq
                || cut.get(&oid).is_some_and(|cuts| {
                    cuts.iter()
                        .any(|&(seq, first)| seq > f.seq && chunk >= first.div_ceil(cu))
                });
            if !gone {
                per_chunk.entry((oid, chunk)).or_default().push(f);
            }
        }
        for ((oid, chunk), units) in per_chunk {
            let cu = self.onode_mut(oid)?.onode.compression.chunk_units();
            self.settle_chunk(oid, chunk, cu, &units)?;
        }
        Ok(())
    }

    /// fsck: every chunk entry belongs to a compressed object and every unit of its current
    /// generation is mapped.
    pub(super) fn check_chunks(
        &mut self,
        chunks: &[(Oid, u64, u64)],
        problems: &mut Vec<String>,
    ) -> Result<(), OsdError> {
        for &(oid, c, v) in chunks {
            let m = ChunkMap::unpack(v);
            let cu = match self.load_onode(oid) {
                Ok(Some(o)) if o.onode.compression.codec().is_some() => {
                    o.onode.compression.chunk_units()
                }
                Ok(_) => {
                    problems.push(format!(
                        "chunk {c} of object {oid}: the object is not compressed"
                    ));
                    continue;
                }
                Err(e @ OsdError::Device(_)) => return Err(e),
                Err(_) => continue,
            };
            if m.units == 0 || m.units > cu {
                problems.push(format!(
                    "chunk {c} of object {oid}: {} units in a chunk of {cu}",
                    m.units
                ));
                continue;
            }
            for j in 0..m.units {
                if self.lookup(oid, physical(c, m.half, j, cu))?.is_none() {
                    problems.push(format!(
                        "chunk {c} of object {oid}: unit {j} of generation {} is not mapped",
                        m.generation
                    ));
                }
            }
        }
        Ok(())
    }

    /// Logical and physical bytes over every object (`ossd info`): the logical lengths, and
    /// the flash the objects' data takes; and the same for compressed objects alone.
    pub fn space_totals(&mut self) -> Result<SpaceTotals, OsdError> {
        // Objects created since the last flush are not in the index yet.
        if self.onodes.values().any(|c| c.dirty && c.loc.is_none()) {
            self.flush_all()?;
        }
        let all =
            self.with_index(|ix, io| ix.range(io, &IndexKey::MIN, &IndexKey::MAX, usize::MAX))?;
        let mut t = SpaceTotals::default();
        for (k, _) in all {
            if k.kind != KIND_ONODE {
                continue;
            }
            let oid = Oid::from_u128(k.oid);
            if oid.is_partition_root() {
                continue;
            }
            let Some(c) = self.load_onode(oid)? else {
                continue;
            };
            let o = &c.onode;
            t.objects += 1;
            t.logical_bytes += o.logical_length;
            t.physical_bytes += o.used_bytes;
            if o.compression.codec().is_some() {
                t.compressed_objects += 1;
                t.compressed_logical_bytes += o.logical_length;
                t.compressed_physical_bytes += o.used_bytes;
            }
        }
        Ok(t)
    }

    /// The compression state of `oid`: the attribute and the codec in effect (`None`: stored
    /// as written, which `auto` chooses for content compressed already).
    pub fn compression_of(&mut self, oid: Oid) -> Result<(Compression, Option<Codec>), OsdError> {
        let s = self.onode_mut(oid)?.onode.compression;
        Ok((s.attr(), s.codec()))
    }
}

/// Space over the store (`ObjectStore::space_totals`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub struct SpaceTotals {
    /// Objects (partitions not counted).
    pub objects: u64,
    /// The sum of their logical lengths.
    pub logical_bytes: u64,
    /// Flash their data takes (whole units; small objects: their bytes).
    pub physical_bytes: u64,
    /// Objects stored in compressed chunks.
    pub compressed_objects: u64,
    /// Their logical lengths.
    pub compressed_logical_bytes: u64,
    /// The flash their chunks take.
    pub compressed_physical_bytes: u64,
}
