//! Checkpoints: the whole map written in parts (byte layout in docs/FORMAT.md, section 2).

use codec::le;
use flash::gang::Vpa;
use flash::{Flash, Nanos, Payload};

use crate::oob::{payload_crc, Kind, Record, Slots};
use crate::{Ftl, FtlError, META_STREAM};

impl<F: Flash> Ftl<F> {
    /// Flushes, then writes the whole map as a checkpoint (and DFTL's dirty translation pages),
    /// so that TRIMs become durable and recovery has a base. Returns when it is durable. The
    /// checkpoint holds the logical pages' entries and, after them, the translation directory
    /// (where each DFTL translation page is), so recovery needs nothing written before it.
    #[expect(
        clippy::unwrap_used,
        reason = "only DFTL has dirty translation pages, and DFTL always has its cached mapping table"
    )]
    pub fn checkpoint(&mut self, at: Nanos) -> Result<Nanos, FtlError> {
        let mut t = self.flush(at)?;
        if let Some(cmt) = self.map.cmt.as_mut() {
            let dirty = cmt.dirty_tpages();
            for tp in dirty {
                t = self.write_tpage(t, tp)?;
                self.map.cmt.as_mut().unwrap().clean_tpage(tp);
            }
        }
        let seq = self.map.take_seq();
        self.map.ckpt_new_seq = seq;
        self.map.ckpt_new.clear();
        let per_part = (self.wu_bytes - CKPT_HEADER - 4) / 4;
        let total = self.ckpt_entries() as usize;
        let parts = total.div_ceil(per_part);
        let mut page = vec![0u8; self.wu_bytes];
        let mut entries = Vec::with_capacity(per_part);
        for part in 0..parts {
            let first = part * per_part;
            let count = per_part.min(total - first);
            entries.clear();
            let logical = self.logical_units as usize;
            entries.extend((first..first + count).map(|i| {
                self.map
                    .l2p
                    .get(i)
                    .copied()
                    .unwrap_or_else(|| self.map.gtd[i - logical])
            }));
            encode_ckpt(
                &mut page,
                seq,
                part as u32,
                parts as u32,
                self.logical_units,
                first as u32,
                &entries,
            );
            t = self.foreground_gc(t)?;
            let record = Record {
                kind: Kind::Checkpoint,
                key: part as u32,
                seq,
                payload_crc: payload_crc(Payload::Bytes(&page)),
                slots: Slots::NONE,
            };
            let (vpa, done) =
                self.fml
                    .write(t, META_STREAM, Payload::Bytes(&page), &record.encode())?;
            self.map.wrote(vpa.0, &record);
            t = done;
            self.map.ckpt_new.push(vpa.0);
            self.stats.checkpoint_units_written += 1;
        }
        for old in std::mem::take(&mut self.map.ckpt) {
            self.fml.invalidate(Vpa(old));
            self.map.forget(old);
        }
        self.map.ckpt = std::mem::take(&mut self.map.ckpt_new);
        self.map.ckpt_seq = seq;
        self.map.ckpt_new_seq = u64::MAX;
        self.fml.flash_mut().sync()?;
        Ok(t)
    }

    /// Entries a checkpoint holds: one per logical page, then one per translation page.
    pub(crate) fn ckpt_entries(&self) -> u32 {
        self.logical_units + self.map.gtd.len() as u32
    }
}

/// Checkpoint part header: magic, version, seq, part, parts, logical units, first lpn, count.
const CKPT_HEADER: usize = 4 + 4 + 8 + 4 + 4 + 4 + 4 + 4;
const CKPT_MAGIC: &[u8; 4] = b"FTLC";
/// Version 2 appended the translation directory to the logical pages' entries.
const CKPT_VERSION: u32 = 2;

pub(crate) fn encode_ckpt(
    page: &mut [u8],
    seq: u64,
    part: u32,
    parts: u32,
    logical: u32,
    first: u32,
    entries: &[u32],
) {
    page.fill(0);
    page[0..4].copy_from_slice(CKPT_MAGIC);
    page[4..8].copy_from_slice(&CKPT_VERSION.to_le_bytes());
    page[8..16].copy_from_slice(&seq.to_le_bytes());
    page[16..20].copy_from_slice(&part.to_le_bytes());
    page[20..24].copy_from_slice(&parts.to_le_bytes());
    page[24..28].copy_from_slice(&logical.to_le_bytes());
    page[28..32].copy_from_slice(&first.to_le_bytes());
    page[32..36].copy_from_slice(&(entries.len() as u32).to_le_bytes());
    for (i, e) in entries.iter().enumerate() {
        page[CKPT_HEADER + 4 * i..CKPT_HEADER + 4 * i + 4].copy_from_slice(&e.to_le_bytes());
    }
    let end = CKPT_HEADER + 4 * entries.len();
    let crc = crc32c::crc32c(&page[..end]);
    page[end..end + 4].copy_from_slice(&crc.to_le_bytes());
}

/// One decoded checkpoint part.
pub(crate) struct CkptPart {
    /// The checkpoint's number (its parts' records carry it, unless GC copied them).
    pub(crate) seq: u64,
    pub(crate) part: u32,
    pub(crate) parts: u32,
    pub(crate) first: u32,
    pub(crate) entries: Vec<u32>,
}

/// Whether `page` starts a checkpoint part of version 1 (before the translation directory),
/// which this build refuses by name rather than passing over.
pub(crate) fn is_version_1(page: &[u8]) -> bool {
    page.get(0..4) == Some(CKPT_MAGIC.as_slice()) && le::u32_at(page, 4).ok() == Some(1)
}

/// Decodes a checkpoint part of an FTL with `logical` pages and `total` checkpoint entries;
/// `None` if it is damaged or made for another logical space.
pub(crate) fn decode_ckpt(page: &[u8], logical: u32, total: u32) -> Option<CkptPart> {
    let u32_at = |o: usize| le::u32_at(page, o).ok();
    if page.get(0..4) != Some(CKPT_MAGIC.as_slice()) || u32_at(4)? != CKPT_VERSION {
        return None;
    }
    let count = u32_at(32)? as usize;
    let end = CKPT_HEADER.checked_add(count.checked_mul(4)?)?;
    if end.checked_add(4)? > page.len() || crc32c::crc32c(&page[..end]) != u32_at(end)? {
        return None;
    }
    let (seq, part, parts, l, first) = (
        le::u64_at(page, 8).ok()?,
        u32_at(16)?,
        u32_at(20)?,
        u32_at(24)?,
        u32_at(28)?,
    );
    if l != logical || part >= parts || first as u64 + count as u64 > total as u64 {
        return None;
    }
    Some(CkptPart {
        seq,
        part,
        parts,
        first,
        entries: (0..count)
            .map(|i| u32_at(CKPT_HEADER + 4 * i))
            .collect::<Option<Vec<u32>>>()?,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parts_round_trip_and_damage_or_old_versions_are_refused() {
        let mut page = vec![0u8; 4096];
        encode_ckpt(&mut page, 77, 1, 3, 1000, 1014, &[5, 6, UNMAPPED_ENTRY]);
        let p = decode_ckpt(&page, 1000, 1017).unwrap();
        assert_eq!((p.seq, p.part, p.parts, p.first), (77, 1, 3, 1014));
        assert_eq!(p.entries, vec![5, 6, UNMAPPED_ENTRY]);
        assert!(!is_version_1(&page));
        // Entries past the map and the directory, another logical space, a flipped bit.
        assert!(decode_ckpt(&page, 1000, 1016).is_none());
        assert!(decode_ckpt(&page, 999, 1017).is_none());
        let mut bad = page.clone();
        bad[40] ^= 1;
        assert!(decode_ckpt(&bad, 1000, 1017).is_none());
        // A count pointing past the page is refused, never a panic.
        let mut huge = page.clone();
        huge[32..36].copy_from_slice(&u32::MAX.to_le_bytes());
        assert!(decode_ckpt(&huge, 1000, 1017).is_none());
        assert!(decode_ckpt(&page[..20], 1000, 1017).is_none());
        // Version 1 is recognized, so recovery can refuse it by name.
        let mut old = page.clone();
        old[4..8].copy_from_slice(&1u32.to_le_bytes());
        assert!(is_version_1(&old));
        assert!(decode_ckpt(&old, 1000, 1017).is_none());
    }

    const UNMAPPED_ENTRY: u32 = u32::MAX;
}
