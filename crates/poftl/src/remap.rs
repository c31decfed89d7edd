//! Static address remapping (POFTL-14 III-A).
//!
//! A physical page address is `(A, B, C)` = (bank, block in the bank, page in the block). The
//! bank address `A` is split into high bits `A1` and low bits `A2`, where `A2` has `k` bits and
//! `2^k` is the parallelism degree. p-OFTL addresses flash through the *linear* address
//! `(B, A1, C, A2)` (most significant field first): consecutive linear addresses differ first in
//! `A2`, so they rotate over `2^k` banks; the blocks with the same `B` in the banks sharing `A1`
//! form a *super-block* of `2^k` blocks, and a super-block's pages are the linear addresses
//! with the same `(B, A1)`. No table is involved: the remapping is a shift of bit fields.
//!
//! `B` is the most significant field of the linear address, so the number of blocks per bank
//! need not be a power of two; banks and pages per block must be (their fields sit below it).

/// Errors of a remapping configuration.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RemapError {
    /// The parallelism degree is not 1, 2, 4, 8 or 16.
    #[error("parallelism degree {0} is not one of 1, 2, 4, 8, 16")]
    Degree(u32),
    /// The parallelism degree is larger than the device's bank count.
    #[error("parallelism degree {degree} exceeds the {banks} banks of the device")]
    DegreeAboveBanks {
        /// The degree asked for.
        degree: u32,
        /// Banks the device has.
        banks: u32,
    },
    /// A geometry field that must be a power of two is not.
    #[error("{what} = {value} is not a power of two; static remapping shifts bit fields")]
    NotPowerOfTwo {
        /// The field: `banks` or `pages_per_block`.
        what: &'static str,
        /// Its value.
        value: u32,
    },
    /// The device has no blocks per bank.
    #[error("blocks_per_bank must be at least 1")]
    NoBlocks,
    /// The device has 2^32 pages or more.
    #[error("the device has 2^32 pages or more; addresses are 32-bit (POFTL-14 III-A)")]
    TooLarge,
    /// A linear page address past the device's last page.
    #[error("linear address {0} lies beyond the device")]
    OutOfRange(u32),
}

/// A physical page: (bank, block in the bank, page in the block).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct BankPage {
    /// Bank (parallel unit) number.
    pub bank: u32,
    /// Block within the bank.
    pub block: u32,
    /// Page within the block.
    pub page: u32,
}

/// The static remapping of one device at one parallelism degree.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Remap {
    /// `k`: bits of `A2`; the parallelism degree is `2^k`.
    k: u32,
    /// Bits of the whole bank address `A`.
    bank_bits: u32,
    /// Bits of the page address `C`.
    page_bits: u32,
    blocks_per_bank: u32,
}

impl Remap {
    /// Largest parallelism degree (POFTL-14 IV-B: the simulator's 16).
    pub const MAX_DEGREE: u32 = 16;

    /// A parallelism degree p-OFTL supports: 1, 2, 4, 8 or 16.
    pub fn check_degree(degree: u32) -> Result<(), RemapError> {
        if (1..=Self::MAX_DEGREE).contains(&degree) && degree.is_power_of_two() {
            Ok(())
        } else {
            Err(RemapError::Degree(degree))
        }
    }

    /// The remapping of a device of `banks` banks (a power of two), `blocks_per_bank` blocks each,
    /// `pages_per_block` pages per block (a power of two), at parallelism degree `degree`.
    pub fn new(
        banks: u32,
        blocks_per_bank: u32,
        pages_per_block: u32,
        degree: u32,
    ) -> Result<Remap, RemapError> {
        Self::check_degree(degree)?;
        for (what, value) in [("banks", banks), ("pages_per_block", pages_per_block)] {
            if !value.is_power_of_two() {
                return Err(RemapError::NotPowerOfTwo { what, value });
            }
        }
        if degree > banks {
            return Err(RemapError::DegreeAboveBanks { degree, banks });
        }
        if blocks_per_bank == 0 {
            return Err(RemapError::NoBlocks);
        }
        if banks as u64 * blocks_per_bank as u64 * pages_per_block as u64 > u32::MAX as u64 {
            return Err(RemapError::TooLarge);
        }
        Ok(Remap {
            k: degree.trailing_zeros(),
            bank_bits: banks.trailing_zeros(),
            page_bits: pages_per_block.trailing_zeros(),
            blocks_per_bank,
        })
    }

    /// The parallelism degree, `2^k`: banks one super-block spans.
    pub fn degree(&self) -> u32 {
        1 << self.k
    }
    /// Pages in the device (every linear address below this is valid).
    pub fn pages(&self) -> u32 {
        (self.blocks_per_bank << self.bank_bits) << self.page_bits
    }
    /// Pages in one super-block: `2^k` blocks.
    pub fn pages_per_superblock(&self) -> u32 {
        1 << (self.k + self.page_bits)
    }
    /// Super-blocks in the device: `(B, A1)` pairs.
    pub fn superblocks(&self) -> u32 {
        self.blocks_per_bank << (self.bank_bits - self.k)
    }

    /// The physical page of linear address `(B, A1, C, A2)`.
    pub fn to_physical(&self, linear: u32) -> Result<BankPage, RemapError> {
        if linear >= self.pages() {
            return Err(RemapError::OutOfRange(linear));
        }
        let a2 = linear & ((1 << self.k) - 1);
        let rest = linear >> self.k;
        let c = rest & ((1 << self.page_bits) - 1);
        let rest = rest >> self.page_bits;
        let a1_bits = self.bank_bits - self.k;
        let a1 = rest & ((1 << a1_bits) - 1);
        let b = rest >> a1_bits;
        Ok(BankPage {
            bank: (a1 << self.k) | a2,
            block: b,
            page: c,
        })
    }

    /// The linear address of a physical page (the inverse of [`Remap::to_physical`]).
    pub fn to_linear(&self, p: BankPage) -> Result<u32, RemapError> {
        let bad = || RemapError::OutOfRange(u32::MAX);
        if p.bank >> self.bank_bits != 0
            || p.block >= self.blocks_per_bank
            || p.page >> self.page_bits != 0
        {
            return Err(bad());
        }
        let a2 = p.bank & ((1 << self.k) - 1);
        let a1 = p.bank >> self.k;
        let a1_bits = self.bank_bits - self.k;
        Ok((((((p.block << a1_bits) | a1) << self.page_bits) | p.page) << self.k) | a2)
    }

    /// The super-block `(B, A1)` of a linear address, and the page's offset `(C, A2)` in it.
    pub fn split(&self, linear: u32) -> (u32, u32) {
        let per = self.k + self.page_bits;
        (linear >> per, linear & ((1 << per) - 1))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// 16 banks, 8 blocks per bank, 64 pages per block, degree 4 (the paper's example):
    /// A2 = 2 low bank bits, A1 = 2 high bank bits.
    fn example() -> Remap {
        Remap::new(16, 8, 64, 4).unwrap()
    }

    #[test]
    fn consecutive_pages_rotate_over_four_banks() {
        let r = example();
        // Linear 0..4: B=0, A1=0, C=0, A2=0..3: banks 0, 1, 2, 3, page 0 of block 0.
        for i in 0..4 {
            assert_eq!(
                r.to_physical(i).unwrap(),
                BankPage {
                    bank: i,
                    block: 0,
                    page: 0
                }
            );
        }
        // Linear 4: C=1, A2=0: bank 0, page 1.
        assert_eq!(
            r.to_physical(4).unwrap(),
            BankPage {
                bank: 0,
                block: 0,
                page: 1
            }
        );
        // Linear 255 = C 63, A2 3: the last page of super-block (B 0, A1 0), on bank 3.
        assert_eq!(
            r.to_physical(255).unwrap(),
            BankPage {
                bank: 3,
                block: 0,
                page: 63
            }
        );
        // Linear 256: A1 = 1: banks 4..7 with block 0.
        assert_eq!(
            r.to_physical(256).unwrap(),
            BankPage {
                bank: 4,
                block: 0,
                page: 0
            }
        );
        // Linear 1024 = 4 super-blocks of 256 pages: A1 wraps, B = 1.
        assert_eq!(
            r.to_physical(1024).unwrap(),
            BankPage {
                bank: 0,
                block: 1,
                page: 0
            }
        );
        // A hand-built address: B=5, A1=2, C=17, A2=1 -> bank 2*4+1 = 9.
        let linear = (((5 << 2 | 2) << 6 | 17) << 2) | 1;
        assert_eq!(
            r.to_physical(linear).unwrap(),
            BankPage {
                bank: 9,
                block: 5,
                page: 17
            }
        );
        assert_eq!(r.split(linear), (5 << 2 | 2, 17 << 2 | 1));
        assert_eq!(r.pages_per_superblock(), 256);
        assert_eq!(r.superblocks(), 32);
    }

    #[test]
    fn degree_one_keeps_a_block_in_one_bank_and_sixteen_spreads_over_all() {
        let one = Remap::new(16, 8, 64, 1).unwrap();
        for i in 0..64 {
            assert_eq!(one.to_physical(i).unwrap().bank, 0);
        }
        assert_eq!(one.to_physical(64).unwrap().bank, 1);
        let all = Remap::new(16, 8, 64, 16).unwrap();
        let banks: Vec<u32> = (0..16).map(|i| all.to_physical(i).unwrap().bank).collect();
        assert_eq!(banks, (0..16).collect::<Vec<_>>());
        assert_eq!(all.to_physical(16).unwrap().page, 1);
        assert_eq!(all.superblocks(), 8);
    }

    #[test]
    fn remapping_is_a_bijection() {
        for degree in [1, 2, 4, 8, 16] {
            let r = Remap::new(16, 5, 8, degree).unwrap();
            let mut seen = std::collections::HashSet::new();
            for l in 0..r.pages() {
                let p = r.to_physical(l).unwrap();
                assert!(seen.insert(p), "degree {degree}: {p:?} twice");
                assert_eq!(r.to_linear(p).unwrap(), l);
            }
            assert_eq!(seen.len(), 16 * 5 * 8);
            assert!(r.to_physical(r.pages()).is_err());
        }
    }

    #[test]
    fn bad_configurations_are_typed_errors() {
        assert_eq!(Remap::new(16, 8, 64, 0), Err(RemapError::Degree(0)));
        assert_eq!(Remap::new(16, 8, 64, 3), Err(RemapError::Degree(3)));
        assert_eq!(Remap::new(16, 8, 64, 32), Err(RemapError::Degree(32)));
        assert_eq!(
            Remap::new(4, 8, 64, 8),
            Err(RemapError::DegreeAboveBanks {
                degree: 8,
                banks: 4
            })
        );
        assert!(matches!(
            Remap::new(12, 8, 64, 4),
            Err(RemapError::NotPowerOfTwo { what: "banks", .. })
        ));
        assert!(matches!(
            Remap::new(16, 8, 48, 4),
            Err(RemapError::NotPowerOfTwo {
                what: "pages_per_block",
                ..
            })
        ));
        assert_eq!(Remap::new(16, 0, 64, 4), Err(RemapError::NoBlocks));
        assert_eq!(Remap::new(16, 1 << 24, 64, 4), Err(RemapError::TooLarge));
        // Blocks per bank need not be a power of two (the poftl preset has 931).
        assert!(Remap::new(16, 931, 64, 16).is_ok());
    }
}
