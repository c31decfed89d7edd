//! Fingerprints stand in for page contents in fingerprint mode ([`crate::Payload::Fingerprint`]):
//! a mapping layer derives a unit's fingerprint from what was written to it, so reads can be
//! checked without storing bytes.

/// A 64-bit mix (SplitMix64's finalizer): distinct inputs give unrelated outputs.
pub fn mix(mut z: u64) -> u64 {
    z = z.wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// Folds a write of part of a unit (the 512-byte sectors in `mask`, by a request standing for
/// `token`) into the unit's running fingerprint.
pub fn fold(old: u64, token: u64, mask: u64) -> u64 {
    mix(old ^ mix(token) ^ mask.rotate_left(17))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn distinct_inputs_differ() {
        assert_ne!(mix(1), mix(2));
        assert_ne!(fold(0, 1, 1), fold(0, 1, 2));
        assert_ne!(fold(0, 1, 1), fold(0, 2, 1));
        assert_eq!(fold(5, 6, 7), fold(5, 6, 7));
    }
}
