//! The FTL's OOB record, written with every unit (byte layout in docs/FORMAT.md).
//! Bytes read back from flash are untrusted: decoding checks the CRC and returns an error.
//! Every record carries the CRC-32C of its unit's payload, which reads check.

/// What a unit holds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    /// Host data of logical page `key`.
    Data,
    /// A DFTL translation page, number `key`.
    Map,
    /// Part `key` of a checkpoint.
    Checkpoint,
    /// Sub-page mapping (`ftl.mapping_unit_bytes` below the write unit): host data of several
    /// logical pages, one per slot ([`Record::slots`]); `key` is unused (0).
    Packed,
}

/// Most slots a [`Kind::Packed`] record names (its length is `18 + 12 * slots` bytes, and it
/// must fit the first page's OOB area: 3 slots in the presets' 64 bytes).
pub const MAX_SLOTS: usize = 8;
/// A slot of a packed unit that holds no logical page (padding, or a page since overwritten
/// when GC copied the unit).
pub const EMPTY_SLOT: u32 = u32::MAX;

/// The slots of a [`Kind::Packed`] unit: slot `i` holds logical page `keys[i]` in bytes
/// `i * mapping_unit .. (i + 1) * mapping_unit` of the unit, and in fingerprint mode the
/// fingerprint `fps[i]` (the page itself stores one fingerprint for the whole unit).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Slots {
    /// Slots used: the mapping units per write unit (0 for the other kinds).
    pub n: u8,
    /// Logical page of each slot, or [`EMPTY_SLOT`].
    pub keys: [u32; MAX_SLOTS],
    /// Fingerprint of each slot's contents (fingerprint mode); 0 in bytes mode.
    pub fps: [u64; MAX_SLOTS],
}

impl Slots {
    /// No slots (the record of a whole-unit kind).
    pub const NONE: Slots = Slots {
        n: 0,
        keys: [EMPTY_SLOT; MAX_SLOTS],
        fps: [0; MAX_SLOTS],
    };
    /// `n` empty slots.
    pub fn empty(n: usize) -> Slots {
        Slots {
            n: n as u8,
            ..Slots::NONE
        }
    }
}

/// Bytes of a packed record with `n` slots.
pub const fn packed_record_bytes(n: usize) -> usize {
    18 + 12 * n
}

/// An encoded record: its bytes, as long as its kind needs.
#[derive(Clone, Copy, Debug)]
pub struct Encoded {
    buf: [u8; packed_record_bytes(MAX_SLOTS)],
    len: usize,
}

impl std::ops::Deref for Encoded {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        &self.buf[..self.len]
    }
}

/// The OOB record of one unit (20 bytes, or `18 + 12 * slots` for [`Kind::Packed`];
/// docs/FORMAT.md, section 2).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Record {
    /// What the unit holds.
    pub kind: Kind,
    /// By kind: the logical page, the translation page number, or the checkpoint part.
    pub key: u32,
    /// Global write sequence number (48 bits); a checkpoint's parts all carry the checkpoint's.
    pub seq: u64,
    /// CRC-32C of the unit's payload ([`payload_crc`]); a GC copy keeps it.
    pub payload_crc: u32,
    /// [`Kind::Packed`] only: what each slot holds ([`Slots::NONE`] for the other kinds).
    pub slots: Slots,
}

/// The payload checksums live with the payload types (shared with the other mapping layer).
pub use flash::{content_crc, payload_crc};

/// Version 2 added the payload checksum (bytes 12..16).
pub const RECORD_BYTES: usize = 20;
/// Sequence numbers are 48 bits: 2.8 * 10^14 writes.
pub const SEQ_MAX: u64 = (1 << 48) - 1;
const VERSION: u8 = 2;

impl Record {
    /// The record's bytes, with its own CRC-32C; panics if `seq` needs more than 48 bits.
    pub fn encode(&self) -> Encoded {
        let mut e = Encoded {
            buf: [0u8; packed_record_bytes(MAX_SLOTS)],
            len: RECORD_BYTES,
        };
        assert!(self.seq <= SEQ_MAX, "sequence number space exhausted");
        let b = &mut e.buf;
        if self.kind == Kind::Packed {
            let n = self.slots.n as usize;
            b[0] = 4;
            b[1] = VERSION;
            b[2] = self.slots.n;
            b[4..10].copy_from_slice(&self.seq.to_le_bytes()[..6]);
            b[10..14].copy_from_slice(&self.payload_crc.to_le_bytes());
            for i in 0..n {
                let o = 14 + 12 * i;
                b[o..o + 4].copy_from_slice(&self.slots.keys[i].to_le_bytes());
                b[o + 4..o + 12].copy_from_slice(&self.slots.fps[i].to_le_bytes());
            }
            let end = 14 + 12 * n;
            let crc = crc32c::crc32c(&b[..end]);
            b[end..end + 4].copy_from_slice(&crc.to_le_bytes());
            e.len = packed_record_bytes(n);
            return e;
        }
        b[0] = match self.kind {
            Kind::Data => 1,
            Kind::Map => 2,
            Kind::Checkpoint => 3,
            Kind::Packed => unreachable!("encoded above"),
        };
        b[1] = VERSION;
        b[2..6].copy_from_slice(&self.key.to_le_bytes());
        b[6..12].copy_from_slice(&self.seq.to_le_bytes()[..6]);
        b[12..16].copy_from_slice(&self.payload_crc.to_le_bytes());
        let crc = crc32c::crc32c(&b[..16]);
        b[16..20].copy_from_slice(&crc.to_le_bytes());
        e
    }

    /// Whether `b` holds a whole record of version 1 (before payload checksums).
    pub fn is_version_1(b: &[u8]) -> bool {
        b.len() >= 16
            && b[1] == 1
            && crc32c::crc32c(&b[..12]) == u32::from_le_bytes([b[12], b[13], b[14], b[15]])
    }

    /// Whether `b` starts a [`Kind::Packed`] record (kind byte 4, this version), whole or not.
    pub fn is_packed(b: &[u8]) -> bool {
        b.len() >= 2 && b[0] == 4 && b[1] == VERSION
    }

    /// `None` for an erased or foreign OOB area; an error for a damaged record.
    pub fn decode(b: &[u8]) -> Result<Option<Record>, RecordError> {
        if b.len() < RECORD_BYTES {
            return Err(RecordError::Short { len: b.len() });
        }
        if b[..RECORD_BYTES].iter().all(|&x| x == 0xFF) {
            return Ok(None);
        }
        let u32_at = |o: usize| u32::from_le_bytes([b[o], b[o + 1], b[o + 2], b[o + 3]]);
        if Self::is_version_1(b) {
            return Err(RecordError::Version1);
        }
        if Self::is_packed(b) {
            return Self::decode_packed(b);
        }
        if crc32c::crc32c(&b[..16]) != u32_at(16) {
            return Err(RecordError::Checksum);
        }
        if b[1] != VERSION {
            return Err(RecordError::Version { version: b[1] });
        }
        let kind = match b[0] {
            1 => Kind::Data,
            2 => Kind::Map,
            3 => Kind::Checkpoint,
            k => return Err(RecordError::Kind { kind: k }),
        };
        let mut seq = [0u8; 8];
        seq[..6].copy_from_slice(&b[6..12]);
        Ok(Some(Record {
            kind,
            key: u32_at(2),
            seq: u64::from_le_bytes(seq),
            payload_crc: u32_at(12),
            slots: Slots::NONE,
        }))
    }

    /// Decodes a [`Kind::Packed`] record (kind byte 4).
    fn decode_packed(b: &[u8]) -> Result<Option<Record>, RecordError> {
        let n = b[2] as usize;
        if n == 0 || n > MAX_SLOTS {
            return Err(RecordError::Slots { slots: b[2] });
        }
        let len = packed_record_bytes(n);
        if b.len() < len {
            return Err(RecordError::Short { len: b.len() });
        }
        let u32_at = |o: usize| u32::from_le_bytes([b[o], b[o + 1], b[o + 2], b[o + 3]]);
        let end = len - 4;
        if crc32c::crc32c(&b[..end]) != u32_at(end) {
            return Err(RecordError::Checksum);
        }
        let mut seq = [0u8; 8];
        seq[..6].copy_from_slice(&b[4..10]);
        let mut slots = Slots::empty(n);
        for i in 0..n {
            let o = 14 + 12 * i;
            slots.keys[i] = u32_at(o);
            let mut fp = [0u8; 8];
            fp.copy_from_slice(&b[o + 4..o + 12]);
            slots.fps[i] = u64::from_le_bytes(fp);
        }
        Ok(Some(Record {
            kind: Kind::Packed,
            key: 0,
            seq: u64::from_le_bytes(seq),
            payload_crc: u32_at(10),
            slots,
        }))
    }
}

/// Why an OOB area does not hold a record this build reads ([`Record::decode`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum RecordError {
    /// The OOB area is shorter than a record.
    #[error("OOB record is {len} bytes, expected {RECORD_BYTES}")]
    Short {
        /// Bytes given.
        len: usize,
    },
    /// A whole record of version 1, written before payload checksums.
    #[error(
        "OOB record version 1 is not supported (this build reads version {VERSION}, \
         which adds payload checksums): the image must be formatted again"
    )]
    Version1,
    /// The record's own CRC-32C does not match: a damaged record.
    #[error("OOB record checksum mismatch")]
    Checksum,
    /// A record of a version other than 2 (and not a whole version 1 record).
    #[error("OOB record version {version} is not supported (expected {VERSION})")]
    Version {
        /// The version byte found.
        version: u8,
    },
    /// A packed record naming 0 or more than [`MAX_SLOTS`] slots.
    #[error("OOB record of a packed unit names {slots} slots (1..={MAX_SLOTS})")]
    Slots {
        /// The slot count found.
        slots: u8,
    },
    /// A kind byte other than 1 (data), 2 (translation page), 3 (checkpoint part) or 4 (packed
    /// data).
    #[error("OOB record kind {kind} is unknown")]
    Kind {
        /// The kind byte found.
        kind: u8,
    },
}

#[cfg(test)]
mod tests {
    use super::*;
    use flash::{Content, Payload};

    #[test]
    fn round_trip_and_damage() {
        let r = Record {
            kind: Kind::Map,
            key: 77,
            seq: 1 << 40,
            payload_crc: 0xC0FF_EE00,
            slots: Slots::NONE,
        };
        let b = r.encode();
        assert_eq!(b.len(), RECORD_BYTES);
        let b: [u8; RECORD_BYTES] = (*b).try_into().unwrap();
        assert_eq!(Record::decode(&b), Ok(Some(r)));
        assert_eq!(Record::decode(&[0xFF; RECORD_BYTES]), Ok(None));
        // Every single-bit flip, the payload checksum included, is refused.
        for i in 0..RECORD_BYTES {
            for bit in 0..8 {
                let mut d = b;
                d[i] ^= 1 << bit;
                assert!(Record::decode(&d).is_err(), "bit {bit} of byte {i}");
            }
        }
        assert!(Record::decode(&b[..3]).is_err());
    }

    #[test]
    fn packed_records_round_trip_and_damage_is_refused() {
        let mut slots = Slots::empty(2);
        slots.keys[0] = 9;
        slots.fps[0] = 0xDEAD_BEEF_0123;
        let r = Record {
            kind: Kind::Packed,
            key: 0,
            seq: (1 << 47) + 5,
            payload_crc: 7,
            slots,
        };
        let b = r.encode();
        assert_eq!(b.len(), packed_record_bytes(2));
        assert_eq!(Record::decode(&b), Ok(Some(r)));
        for i in 0..b.len() {
            for bit in 0..8 {
                let mut d = b.to_vec();
                d[i] ^= 1 << bit;
                assert!(Record::decode(&d).is_err(), "bit {bit} of byte {i}");
            }
        }
        // Cut short, or naming impossible slot counts: refused, never a panic.
        assert!(Record::decode(&b[..b.len() - 1]).is_err());
        let mut d = b.to_vec();
        d[2] = 200;
        assert!(Record::decode(&d).is_err());
    }

    #[test]
    fn a_flipped_payload_bit_changes_the_checksum() {
        let page: Vec<u8> = (0..4096u32).map(|i| (i * 13 + 1) as u8).collect();
        let stored = payload_crc(Payload::Bytes(&page));
        for bit in [0usize, 9, 4096 * 8 - 1] {
            let mut d = page.clone();
            d[bit / 8] ^= 1 << (bit % 8);
            assert_ne!(content_crc(Content::Bytes, &d), Some(stored));
        }
        let stored = payload_crc(Payload::Fingerprint(42));
        assert_eq!(content_crc(Content::Fingerprint(42), &[]), Some(stored));
        assert_ne!(content_crc(Content::Fingerprint(43), &[]), Some(stored));
    }

    #[test]
    fn version_1_records_are_refused_by_name() {
        let mut b = [0u8; RECORD_BYTES];
        b[0] = 1;
        b[1] = 1;
        let crc = crc32c::crc32c(&b[..12]);
        b[12..16].copy_from_slice(&crc.to_le_bytes());
        let e = Record::decode(&b).unwrap_err();
        assert_eq!(e, RecordError::Version1);
        assert!(e.to_string().contains("version 1"), "{e}");
    }
}
