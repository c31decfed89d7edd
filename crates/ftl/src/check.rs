//! The whole-structure check of the FTL against the FML.

use flash::gang::Vpa;
use flash::Flash;

use crate::{Ftl, LOST, UNMAPPED};

impl<F: Flash> Ftl<F> {
    /// Whole-structure check (tests, debug builds, fsck): no two logical pages share a unit,
    /// and exactly the units the FTL references are valid in the FML.
    pub fn check(&self) -> Result<(), CheckError> {
        self.fml.check().map_err(CheckError::Fml)?;
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

/// The first inconsistency [`Ftl::check`] found. Units are write-unit addresses (`Vpa`), pages
/// logical page numbers.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum CheckError {
    /// The FML's own check failed.
    #[error(transparent)]
    Fml(#[from] fml::Inconsistency),
    /// Two logical pages map to one unit.
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
