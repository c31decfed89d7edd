//! The FTL's OOB record, written with every unit (byte layout in docs/FORMAT.md).
//! Bytes read back from flash are untrusted: decoding checks the CRC and returns an error.

/// What a unit holds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    /// Host data of logical page `key`.
    Data,
    /// A DFTL translation page, number `key`.
    Map,
    /// Part `key` of a checkpoint.
    Checkpoint,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Record {
    pub kind: Kind,
    pub key: u32,
    /// Global write sequence number (48 bits); a checkpoint's parts all carry the checkpoint's.
    pub seq: u64,
}

pub const RECORD_BYTES: usize = 16;
/// Sequence numbers are 48 bits: 2.8 * 10^14 writes.
pub const SEQ_MAX: u64 = (1 << 48) - 1;
const VERSION: u8 = 1;

impl Record {
    pub fn encode(&self) -> [u8; RECORD_BYTES] {
        let mut b = [0u8; RECORD_BYTES];
        b[0] = match self.kind {
            Kind::Data => 1,
            Kind::Map => 2,
            Kind::Checkpoint => 3,
        };
        b[1] = VERSION;
        b[2..6].copy_from_slice(&self.key.to_le_bytes());
        assert!(self.seq <= SEQ_MAX, "sequence number space exhausted");
        b[6..12].copy_from_slice(&self.seq.to_le_bytes()[..6]);
        let crc = crc32c::crc32c(&b[..12]);
        b[12..16].copy_from_slice(&crc.to_le_bytes());
        b
    }

    /// `None` for an erased or foreign OOB area; an error string for a damaged record.
    pub fn decode(b: &[u8]) -> Result<Option<Record>, String> {
        if b.len() < RECORD_BYTES {
            return Err(format!(
                "OOB record is {} bytes, expected {RECORD_BYTES}",
                b.len()
            ));
        }
        if b[..RECORD_BYTES].iter().all(|&x| x == 0xFF) {
            return Ok(None);
        }
        let crc = u32::from_le_bytes(b[12..16].try_into().unwrap());
        if crc32c::crc32c(&b[..12]) != crc {
            return Err("OOB record checksum mismatch".into());
        }
        if b[1] != VERSION {
            return Err(format!(
                "OOB record version {} is not supported (expected {VERSION})",
                b[1]
            ));
        }
        let kind = match b[0] {
            1 => Kind::Data,
            2 => Kind::Map,
            3 => Kind::Checkpoint,
            k => return Err(format!("OOB record kind {k} is unknown")),
        };
        let mut seq = [0u8; 8];
        seq[..6].copy_from_slice(&b[6..12]);
        Ok(Some(Record {
            kind,
            key: u32::from_le_bytes(b[2..6].try_into().unwrap()),
            seq: u64::from_le_bytes(seq),
        }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip_and_damage() {
        let r = Record {
            kind: Kind::Map,
            key: 77,
            seq: 1 << 40,
        };
        let mut b = r.encode();
        assert_eq!(Record::decode(&b), Ok(Some(r)));
        assert_eq!(Record::decode(&[0xFF; 16]), Ok(None));
        b[5] ^= 1;
        assert!(Record::decode(&b).is_err());
        assert!(Record::decode(&b[..3]).is_err());
    }
}
