//! The whole-structure check of the FTL against the FML.

use flash::gang::Vpa;
use flash::Flash;

use crate::{Ftl, LOST, UNMAPPED};

impl<F: Flash> Ftl<F> {
    /// Whole-structure check (tests, debug builds, fsck): no two logical pages share a unit,
    /// and exactly the units the FTL references are valid in the FML.
    pub fn check(&self) -> Result<(), CheckError> {
        self.fml.check().map_err(CheckError::Fml)?;
        if self.map.slots > 1 {
            return self.check_packed();
        }
        let mut taken = vec![0u64; self.map.total_units.div_ceil(64)];
        let mut referenced = 0u64;
        for (lpn, &v) in self.map.l2p.iter().enumerate() {
            if v >= LOST {
                continue;
            }
            referenced += 1;
            let (word, bit) = (v as usize / 64, 1u64 << (v % 64));
            if taken[word] & bit != 0 {
                let first = self.map.l2p.iter().position(|&o| o == v).unwrap_or(lpn);
                return Err(CheckError::SharedUnit {
                    first: first as u32,
                    second: lpn as u32,
                    unit: v,
                });
            }
            taken[word] |= bit;
            if !self.fml.is_valid(Vpa(v)) {
                return Err(CheckError::InvalidUnit {
                    lpn: lpn as u32,
                    unit: v,
                });
            }
        }
        referenced += self.map.gtd.iter().filter(|&&g| g != UNMAPPED).count() as u64;
        referenced += self.map.ckpt.len() as u64;
        let valid: u64 = self.fml.blocks().iter().map(|b| b.valid as u64).sum();
        if valid != referenced {
            return Err(CheckError::ValidCount { valid, referenced });
        }
        Ok(())
    }
}

impl<F: Flash> Ftl<F> {
    /// [`Ftl::check`] under sub-page mapping: no two logical pages share a slot, each unit's
    /// live count is the number of its slots the map names, and a unit is valid exactly when
    /// that count is above 0.
    fn check_packed(&self) -> Result<(), CheckError> {
        let k = self.map.slots;
        let mut named = vec![0u8; self.map.total_units];
        let mut taken = vec![0u64; (self.map.total_units * k as usize).div_ceil(64)];
        for (lpn, &loc) in self.map.l2p.iter().enumerate() {
            if loc >= LOST {
                continue;
            }
            let (word, bit) = (loc as usize / 64, 1u64 << (loc % 64));
            if taken[word] & bit != 0 {
                let first = self.map.l2p.iter().position(|&o| o == loc).unwrap_or(lpn);
                return Err(CheckError::SharedUnit {
                    first: first as u32,
                    second: lpn as u32,
                    unit: loc,
                });
            }
            taken[word] |= bit;
            let v = loc / k;
            named[v as usize] += 1;
            if !self.fml.is_valid(Vpa(v)) {
                return Err(CheckError::InvalidUnit {
                    lpn: lpn as u32,
                    unit: v,
                });
            }
        }
        let mut referenced = 0u64;
        let ups = self.map.units_per_superblock as usize;
        let mut block = (0u32, 0u32);
        for (v, (&n, &live)) in named.iter().zip(&self.map.live).enumerate() {
            if n != live {
                return Err(CheckError::LiveSlots {
                    unit: v as u32,
                    live,
                    named: n,
                });
            }
            referenced += (n > 0) as u64;
            block.0 += n as u32;
            block.1 += (n > 0) as u32;
            if (v + 1) % ups == 0 {
                let b = v / ups;
                let kept = (self.map.block_slots[b], self.map.block_units[b]);
                if kept != block {
                    return Err(CheckError::BlockSlots {
                        block: b as u32,
                        kept,
                        counted: block,
                    });
                }
                block = (0, 0);
            }
        }
        referenced += self.map.gtd.iter().filter(|&&g| g != UNMAPPED).count() as u64;
        referenced += self.map.ckpt.len() as u64;
        let valid: u64 = self.fml.blocks().iter().map(|b| b.valid as u64).sum();
        if valid != referenced {
            return Err(CheckError::ValidCount { valid, referenced });
        }
        Ok(())
    }
}

/// The first inconsistency [`Ftl::check`] found. Units are write-unit addresses (`Vpa`), pages
/// logical page numbers.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum CheckError {
    /// The FML's own check failed.
    #[error(transparent)]
    Fml(#[from] fml::Inconsistency),
    /// Two logical pages map to one unit (under sub-page mapping: one slot location).
    #[error("lpns {first} and {second} both map to unit {unit}")]
    SharedUnit {
        /// The lower logical page.
        first: u32,
        /// The higher logical page.
        second: u32,
        /// The unit both map to.
        unit: u32,
    },
    /// A logical page maps to a unit the FML does not count as valid.
    #[error("lpn {lpn} maps to unit {unit}, which the FML holds invalid")]
    InvalidUnit {
        /// The logical page.
        lpn: u32,
        /// The unit it maps to.
        unit: u32,
    },
    /// Sub-page mapping: a unit's count of live slots is not the number the map names.
    #[error("unit {unit} counts {live} live slots, the map names {named}")]
    LiveSlots {
        /// The write unit.
        unit: u32,
        /// Its live count.
        live: u8,
        /// Logical pages the map has in it.
        named: u8,
    },
    /// Sub-page mapping: a super-block's kept totals (live slots, units with a live slot) are
    /// not those of its units.
    #[error("block {block} keeps (live slots, live units) {kept:?}, its units give {counted:?}")]
    BlockSlots {
        /// The super-block.
        block: u32,
        /// The totals kept.
        kept: (u32, u32),
        /// The totals of its units.
        counted: (u32, u32),
    },
    /// The FML's valid units are not exactly the ones the FTL references (data, translation
    /// pages, checkpoint parts).
    #[error("{valid} valid units in the FML, {referenced} referenced by the FTL")]
    ValidCount {
        /// Valid units the FML counts.
        valid: u64,
        /// Units the FTL references.
        referenced: u64,
    },
}
