//! The object store's OOB record, written with every unit (docs/FORMAT.md, "Object store").
//! Bytes read back are untrusted: decoding checks the CRC and the lengths.

use crate::id::Oid;
use crate::index::IndexKey;

pub const RECORD_MAX_BYTES: usize = 44;
const VERSION: u8 = 1;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Record {
    /// Object data: unit `offset` (in write units) of `oid`, written when the object's logical
    /// length was `length`. `moved` marks a copy GC made: its length is stale.
    Data {
        oid: Oid,
        offset: u64,
        length: u64,
        seq: u64,
        moved: bool,
    },
    /// A descriptor page of onodes.
    Descriptor { seq: u64 },
    /// An index node: its level and first key (so GC can tell the index which node it moved).
    Index {
        level: u8,
        first_key: IndexKey,
        seq: u64,
    },
    /// The checkpoint record.
    Checkpoint { seq: u64 },
    /// A page of access-time journal entries (seed 001 IV).
    Atime { seq: u64 },
    /// A small-object page: the whole data of several small objects (seed 001 III-B).
    Small { seq: u64 },
}

impl Record {
    pub fn seq(&self) -> u64 {
        match *self {
            Record::Data { seq, .. }
            | Record::Descriptor { seq }
            | Record::Index { seq, .. }
            | Record::Checkpoint { seq }
            | Record::Atime { seq }
            | Record::Small { seq } => seq,
        }
    }

    pub fn with_seq(mut self, new: u64) -> Record {
        match &mut self {
            Record::Data { seq, .. }
            | Record::Descriptor { seq }
            | Record::Index { seq, .. }
            | Record::Checkpoint { seq }
            | Record::Atime { seq }
            | Record::Small { seq } => *seq = new,
        }
        self
    }

    /// Encodes into `out`, returning the length used.
    pub fn encode(&self, out: &mut [u8; RECORD_MAX_BYTES]) -> usize {
        out.fill(0);
        out[1] = VERSION;
        out[2..8].copy_from_slice(&self.seq().to_le_bytes()[..6]);
        let body = match *self {
            Record::Data {
                oid,
                offset,
                length,
                moved,
                ..
            } => {
                out[0] = if moved { 5 } else { 1 };
                out[8..24].copy_from_slice(&oid.as_u128().to_le_bytes());
                out[24..32].copy_from_slice(&offset.to_le_bytes());
                out[32..40].copy_from_slice(&length.to_le_bytes());
                40
            }
            Record::Descriptor { .. } => {
                out[0] = 2;
                8
            }
            Record::Index {
                level, first_key, ..
            } => {
                out[0] = 3;
                out[8] = level;
                first_key.encode(&mut out[9..9 + IndexKey::ENCODED_BYTES]);
                9 + IndexKey::ENCODED_BYTES
            }
            Record::Checkpoint { .. } => {
                out[0] = 4;
                8
            }
            Record::Atime { .. } => {
                out[0] = 6;
                8
            }
            Record::Small { .. } => {
                out[0] = 7;
                8
            }
        };
        let crc = crc32c::crc32c(&out[..body]);
        out[body..body + 4].copy_from_slice(&crc.to_le_bytes());
        body + 4
    }

    /// `Ok(None)` for an erased (all 0xFF) area.
    pub fn decode(b: &[u8]) -> Result<Option<Record>, String> {
        if b.len() >= 8 && b[..8].iter().all(|&x| x == 0xFF) {
            return Ok(None);
        }
        if b.len() < 12 {
            return Err(format!("OOB record of {} bytes is too short", b.len()));
        }
        let body = match b[0] {
            1 | 5 => 40,
            2 | 4 | 6 | 7 => 8,
            3 => 9 + IndexKey::ENCODED_BYTES,
            k => return Err(format!("OOB record kind {k} is unknown")),
        };
        if b.len() < body + 4 {
            return Err("OOB record is truncated".into());
        }
        let crc = u32::from_le_bytes(b[body..body + 4].try_into().unwrap());
        if crc32c::crc32c(&b[..body]) != crc {
            return Err("OOB record checksum mismatch".into());
        }
        if b[1] != VERSION {
            return Err(format!("OOB record version {} is not supported", b[1]));
        }
        let mut s = [0u8; 8];
        s[..6].copy_from_slice(&b[2..8]);
        let seq = u64::from_le_bytes(s);
        let u64_at = |o: usize| u64::from_le_bytes(b[o..o + 8].try_into().unwrap());
        Ok(Some(match b[0] {
            1 | 5 => Record::Data {
                oid: Oid::from_u128(u128::from_le_bytes(b[8..24].try_into().unwrap())),
                offset: u64_at(24),
                length: u64_at(32),
                seq,
                moved: b[0] == 5,
            },
            2 => Record::Descriptor { seq },
            3 => Record::Index {
                level: b[8],
                first_key: IndexKey::decode(&b[9..9 + IndexKey::ENCODED_BYTES]),
                seq,
            },
            6 => Record::Atime { seq },
            7 => Record::Small { seq },
            _ => Record::Checkpoint { seq },
        }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trips_and_rejects_damage() {
        let key = IndexKey {
            oid: 77,
            kind: 1,
            offset: 9,
        };
        for r in [
            Record::Data {
                oid: Oid::new(0x10000, 0x10005),
                offset: 3,
                length: 70_000,
                seq: 99,
                moved: true,
            },
            Record::Descriptor { seq: 1 },
            Record::Index {
                level: 2,
                first_key: key,
                seq: (1 << 48) - 1,
            },
            Record::Checkpoint { seq: 5 },
            Record::Atime { seq: 6 },
            Record::Small { seq: 7 },
        ] {
            let mut b = [0u8; RECORD_MAX_BYTES];
            let n = r.encode(&mut b);
            assert_eq!(Record::decode(&b[..n]), Ok(Some(r)));
            for i in 0..n {
                let mut d = b;
                d[i] ^= 4;
                assert!(
                    Record::decode(&d[..n]).is_err() || Record::decode(&d[..n]) == Ok(None),
                    "flip at {i}"
                );
            }
        }
        assert_eq!(Record::decode(&[0xFF; 64]), Ok(None));
    }
}
