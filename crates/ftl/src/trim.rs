//! TRIM: unmapping whole logical pages of a range (under sub-page mapping, single slots).

use flash::{Flash, Nanos};

use crate::{Ftl, FtlError, LOST, UNMAPPED};

impl<F: Flash> Ftl<F> {
    /// Discards whole logical pages of a range (a partial page at either end is left as it is).
    pub fn trim(&mut self, at: Nanos, offset: u64, len: u64) -> Result<Nanos, FtlError> {
        self.check_range("trim", offset, len)?;
        self.stats.trims += 1;
        let full = self.full_mask();
        let mut t = at;
        let pieces = self.pieces(offset, len);
        for (lpn, s0, s1) in pieces {
            if Self::mask(s0, s1) != full {
                continue;
            }
            self.buf.drop_where(|&k| k == lpn);
            if self.map.l2p[lpn as usize] != UNMAPPED {
                // Translation may run GC, which may move this very unit: read the map after it.
                t = self.translate(t, lpn, true)?;
                let old = std::mem::replace(&mut self.map.l2p[lpn as usize], UNMAPPED);
                if old < LOST {
                    self.release(old);
                }
            }
        }
        Ok(t)
    }
}
