//! Host ranges: checking a request's byte range, splitting it into per-unit sector pieces, and
//! the units a request would touch.

use flash::gang::Vpa;
use flash::Flash;

use crate::{Ftl, FtlError, DATA_STREAM, LOST, SECTOR_BYTES};

impl<F: Flash> Ftl<F> {
    /// The write units a request would touch if issued now, for a die scheduler (BLOCKMGMT-09
    /// 3.2): a read touches the units holding its logical pages; a write touches the unit the
    /// data stream programs next (when its update block is open) and, where it covers a unit
    /// only in part, the unit read to merge. Unmapped pages and an out-of-range request touch
    /// nothing. Appends to `out`.
    pub fn units_touched(&self, offset: u64, len: u64, write: bool, out: &mut Vec<Vpa>) {
        if len == 0 || self.check_range("locate", offset, len).is_err() {
            return;
        }
        let unit = self.unit_bytes as u64;
        let (first, last) = (offset / unit, (offset + len - 1) / unit);
        let mapped = |lpn: u64| {
            let v = self.map.l2p[lpn as usize];
            (v < LOST).then(|| self.map.unit_of(v))
        };
        if write {
            out.extend(self.fml.next_unit(DATA_STREAM));
            let partial = |lpn: u64| offset > lpn * unit || offset + len < (lpn + 1) * unit;
            for lpn in [first, last] {
                if partial(lpn) {
                    out.extend(mapped(lpn));
                }
            }
        } else {
            out.extend((first..=last).filter_map(mapped));
        }
    }

    pub(crate) fn check_range(
        &self,
        what: &'static str,
        offset: u64,
        len: u64,
    ) -> Result<(), FtlError> {
        let bad = |why: String| {
            Err(FtlError::BadRequest {
                what,
                offset,
                len,
                why,
            })
        };
        if !offset.is_multiple_of(SECTOR_BYTES) || !len.is_multiple_of(SECTOR_BYTES) {
            return bad("not aligned to 512-byte sectors".into());
        }
        if len == 0 {
            return bad("empty request".into());
        }
        if offset
            .checked_add(len)
            .is_none_or(|end| end > self.capacity_bytes())
        {
            return bad(format!(
                "beyond the logical capacity of {} bytes",
                self.capacity_bytes()
            ));
        }
        Ok(())
    }

    /// Splits a byte range into (lpn, first sector, end sector) pieces.
    pub(crate) fn pieces(&self, offset: u64, len: u64) -> Pieces {
        let spu = self.sectors_per_unit as u64;
        let first = offset / SECTOR_BYTES;
        let end = (offset + len) / SECTOR_BYTES;
        Pieces {
            spu,
            first,
            end,
            lpn: first / spu,
            last: (end - 1) / spu,
        }
    }

    pub(crate) fn full_mask(&self) -> u64 {
        if self.sectors_per_unit == 64 {
            u64::MAX
        } else {
            (1u64 << self.sectors_per_unit) - 1
        }
    }

    pub(crate) fn mask(s0: u32, s1: u32) -> u64 {
        let n = s1 - s0;
        let bits = if n == 64 { u64::MAX } else { (1u64 << n) - 1 };
        bits << s0
    }
}

/// The (lpn, first sector, end sector) pieces of a byte range, one per unit it touches.
pub(crate) struct Pieces {
    spu: u64,
    first: u64,
    end: u64,
    lpn: u64,
    last: u64,
}

impl Iterator for Pieces {
    type Item = (u32, u32, u32);
    fn next(&mut self) -> Option<(u32, u32, u32)> {
        if self.lpn > self.last {
            return None;
        }
        let lpn = self.lpn;
        self.lpn += 1;
        let base = lpn * self.spu;
        let s0 = self.first.max(base) - base;
        let s1 = self.end.min(base + self.spu) - base;
        Some((lpn as u32, s0 as u32, s1 as u32))
    }
}
