//! The whole-structure check of the FTL against the FML.

use flash::gang::Vpa;
use flash::Flash;

use crate::{Ftl, LOST, UNMAPPED};

impl<F: Flash> Ftl<F> {
    /// Whole-structure check (tests, debug builds, fsck): no two logical pages share a unit,
    /// and exactly the units the FTL references are valid in the FML.
    pub fn check(&self) -> Result<(), String> {
        self.fml.check()?;
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
                return Err(format!("lpns {first} and {lpn} both map to unit {v}"));
            }
            taken[word] |= bit;
            if !self.fml.is_valid(Vpa(v)) {
                return Err(format!(
                    "lpn {lpn} maps to unit {v}, which the FML holds invalid"
                ));
            }
        }
        referenced += self.map.gtd.iter().filter(|&&g| g != UNMAPPED).count() as u64;
        referenced += self.map.ckpt.len() as u64;
        let valid: u64 = self.fml.blocks().iter().map(|b| b.valid as u64).sum();
        if valid != referenced {
            return Err(format!(
                "{valid} valid units in the FML, {referenced} referenced by the FTL"
            ));
        }
        Ok(())
    }
}
