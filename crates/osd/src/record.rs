//! The object store's OOB record, written with every unit (docs/FORMAT.md, "Object store").
//! Bytes read back are untrusted: decoding checks the CRC and the lengths.

use crate::id::Oid;
use crate::index::IndexKey;

/// The longest record (an encrypted data unit's, kinds 9 and 10), in bytes: exactly the
/// 64-byte spare area of the unit's first page.
pub const RECORD_MAX_BYTES: usize = ENCRYPTED_RECORD_BYTES;
/// What scans read of every record (recovery, the quick scrub, GC of a store without encrypted
/// objects): every record but an encrypted data unit's is whole in it, and an encrypted data
/// unit's first 44 bytes decode on their own (all but its AEAD tag).
pub const SCAN_RECORD_BYTES: usize = 44;
/// An encrypted data unit's record (kinds 9 and 10): a data record, then the AEAD tag of its
/// payload (16 bytes) and a CRC-32C of the 60 bytes before it.
pub const ENCRYPTED_RECORD_BYTES: usize = 64;
/// The AEAD tag of an encrypted unit, in bytes.
pub const TAG_BYTES: usize = 16;
/// Record version 2 added the payload checksum (bytes 8..12) and narrowed a data record's unit
/// index and length to 48 bits, so the largest record still takes 44 bytes (the OOB bytes every
/// data read and GC copy transfers, hence their device time, are unchanged).
const VERSION: u8 = 2;
/// Set in the version byte of a metadata copy's record (docs/FORMAT.md, "Metadata copies").
const COPY_FLAG: u8 = 0x80;
/// Record lengths by kind: data, index node, and every other kind.
pub const DATA_RECORD_BYTES: usize = 44;
/// An index node's record, in bytes.
pub const INDEX_RECORD_BYTES: usize = 13 + IndexKey::ENCODED_BYTES + 4;
/// Every other kind's record (descriptor, checkpoint, atime, small-object), in bytes.
pub const META_RECORD_BYTES: usize = 16;
/// A parity unit's record is as long as a data unit's.
pub const PARITY_RECORD_BYTES: usize = 44;
/// Object lengths and unit indexes are stored in 48 bits in data records.
pub const LENGTH_LIMIT_BYTES: u64 = 1 << 48;

/// Why an OOB record was refused.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum RecordError {
    /// Damaged or foreign bytes (bad length, kind or checksum).
    #[error("{0}")]
    Damaged(String),
    /// A whole record of another version (version 1 images have no payload checksums).
    #[error("OOB record version {0} is not supported (this build writes and reads version {VERSION}; images of version 1 must be reformatted)")]
    Version(u8),
    /// The record of a metadata copy ([`Record::encode_copy`]), or a record whose version byte
    /// says so: it decodes only against the unit it copies ([`Record::decode_copy`]), which a
    /// scan must try (the unit before) before taking it for a copy rather than damage.
    #[error("the OOB record of a metadata copy")]
    Copy,
}

/// What an encrypted data unit's record (kinds 9 and 10) adds to a data record.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Seal {
    /// The sequence number of the program that encrypted the payload, the input of its nonce:
    /// the record's own sequence number in kind 9; kept by every GC copy (kind 10, in the
    /// bytes that hold the stale length of a plain copy).
    pub nonce_seq: u64,
    /// The payload's AEAD tag, when the record was read whole ([`ENCRYPTED_RECORD_BYTES`]);
    /// `None` from a scan's 44-byte read, or a record written without one.
    pub tag: Option<[u8; TAG_BYTES]>,
}

/// What a unit of a compressed object's chunk (kinds 11 to 14) says about the chunk
/// generation it belongs to (docs/DESIGN.md "Per-object compression"): recovery takes, per
/// chunk, the newest generation whose `units` units are all present.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ChunkTag {
    /// The generation: the sequence number taken when the chunk's new stored form was made
    /// (40 bits), unique across the device; also the nonce's input of its sealed units.
    pub generation: u64,
    /// Units the generation's stored form takes (1 to 127).
    pub units: u8,
    /// The chunk is stored raw (it did not compress by a unit): its units are its bytes.
    pub raw: bool,
}

/// Chunk generations are stored in 40 bits.
pub const GENERATION_LIMIT: u64 = 1 << 40;

/// The payload checksums live with the payload types (shared with the other mapping layer).
pub use flash::{content_crc, payload_crc};

/// The record of one unit: what it holds, and the store's write sequence number (48 bits)
/// that orders it at recovery.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Record {
    /// Object data: unit `offset` (in write units) of `oid`, written when the object's logical
    /// length was `length`. `moved` marks a copy GC made: its length is stale.
    Data {
        /// The object.
        oid: Oid,
        /// The unit index within the object, in write units (48 bits).
        offset: u64,
        /// The object's logical length in bytes when the unit was written (48 bits).
        length: u64,
        /// Sequence number.
        seq: u64,
        /// A copy GC made: `length` is stale.
        moved: bool,
        /// For a unit of an encrypted object: its nonce's input and its tag.
        seal: Option<Seal>,
        /// For a unit of a compressed object's chunk: `offset` is its physical unit index
        /// (chunk c, half h, unit j at `c * 2C + h * C + j`) and `length` is not kept (0).
        chunk: Option<ChunkTag>,
    },
    /// A descriptor page of onodes.
    Descriptor {
        /// Sequence number.
        seq: u64,
    },
    /// An index node: its level and first key (so GC can tell the index which node it moved).
    Index {
        /// Levels above the leaves (0 for a leaf).
        level: u8,
        /// The node's first key.
        first_key: IndexKey,
        /// Sequence number.
        seq: u64,
    },
    /// The checkpoint record.
    Checkpoint {
        /// Sequence number.
        seq: u64,
    },
    /// A page of access-time journal entries (OSCM-11 IV).
    Atime {
        /// Sequence number.
        seq: u64,
    },
    /// A small-object page: the whole data of several small objects (OSCM-11 III-B).
    Small {
        /// Sequence number.
        seq: u64,
    },
    /// Parity unit `row` of parity group `group` of `oid` (OSCM-11 III, "Object-level
    /// reliability"): Reed-Solomon parity over the object's data units `group * data_units ..
    /// (group + 1) * data_units`. `covers` is the signature of the data it was computed from
    /// (the XOR of a hash of each present data unit's index and payload checksum,
    /// [`crate::store::covers_term`]): a parity unit that is stale for the data on flash is
    /// recognised as such and never used to rebuild a unit.
    Parity {
        /// The object.
        oid: Oid,
        /// The parity group (48 bits).
        group: u64,
        /// Which of the group's parity units.
        row: u8,
        /// Data units per group.
        data_units: u8,
        /// Signature of the data the parity was computed from.
        covers: u32,
        /// Sequence number.
        seq: u64,
    },
    /// Part `part` of `parts` of a transaction's log (docs/DESIGN.md "Transactions"): kind 15,
    /// or kind 16 for the last part, which is the **commit record**: once it is on flash the
    /// transaction is committed and recovery finishes applying it.
    TxnLog {
        /// The transaction's on-flash id (the sequence number its COMMIT took).
        txn: u64,
        /// Which part (0 to parts - 1).
        part: u32,
        /// Parts of the log, the commit record included.
        parts: u32,
        /// Sequence number.
        seq: u64,
    },
    /// Kind 17: transaction `txn` is installed (every effect of it is on flash through the
    /// ordinary records), so recovery must not apply its log again.
    TxnDone {
        /// The transaction's on-flash id.
        txn: u64,
        /// Sequence number.
        seq: u64,
    },
}

/// A transaction record's body (kinds 15 to 17), before its CRC.
pub const TXN_RECORD_BYTES: usize = 32;

/// A decoded record and the payload checksum it carries.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Sealed {
    /// The record.
    pub record: Record,
    /// CRC-32C of the unit's payload ([`payload_crc`]).
    pub payload_crc: u32,
}

fn u48(b: &[u8]) -> u64 {
    let mut s = [0u8; 8];
    s[..6].copy_from_slice(&b[..6]);
    u64::from_le_bytes(s)
}

fn u32_at(b: &[u8], o: usize) -> u32 {
    let mut s = [0u8; 4];
    s.copy_from_slice(&b[o..o + 4]);
    u32::from_le_bytes(s)
}

/// The AEAD tag of an encrypted record and its CRC, when the read took them and they were
/// written.
fn read_tag(b: &[u8]) -> Result<Option<[u8; TAG_BYTES]>, RecordError> {
    Ok(match b.get(44..ENCRYPTED_RECORD_BYTES) {
        Some(t) if t.iter().all(|&x| x == 0xFF) => None,
        Some(_) => {
            if crc32c::crc32c(&b[..60]) != u32_at(b, 60) {
                return Err(RecordError::Damaged(
                    "OOB record tag checksum mismatch".into(),
                ));
            }
            let mut tag = [0u8; TAG_BYTES];
            tag.copy_from_slice(&b[44..60]);
            Some(tag)
        }
        None => None,
    })
}

impl Record {
    /// The sequence number.
    pub fn seq(&self) -> u64 {
        match *self {
            Record::Data { seq, .. }
            | Record::Descriptor { seq }
            | Record::Index { seq, .. }
            | Record::Checkpoint { seq }
            | Record::Atime { seq }
            | Record::Small { seq }
            | Record::Parity { seq, .. }
            | Record::TxnLog { seq, .. }
            | Record::TxnDone { seq, .. } => seq,
        }
    }

    /// The same record with sequence number `new` (a GC copy gets a fresh one).
    pub fn with_seq(mut self, new: u64) -> Record {
        match &mut self {
            Record::Data { seq, .. }
            | Record::Descriptor { seq }
            | Record::Index { seq, .. }
            | Record::Checkpoint { seq }
            | Record::Atime { seq }
            | Record::Small { seq }
            | Record::Parity { seq, .. }
            | Record::TxnLog { seq, .. }
            | Record::TxnDone { seq, .. } => *seq = new,
        }
        self
    }

    /// Whether units of this kind are metadata, written with a copy beside them when the store
    /// keeps two copies (docs/FORMAT.md, "Metadata copies"): all but data and parity units.
    pub fn has_copy(&self) -> bool {
        !matches!(self, Record::Data { .. } | Record::Parity { .. })
    }

    /// What the record says the unit is, for error messages.
    pub fn kind_name(&self) -> &'static str {
        match self {
            Record::Data { .. } => "data unit",
            Record::Descriptor { .. } => "descriptor page",
            Record::Index { .. } => "index node",
            Record::Checkpoint { .. } => "checkpoint",
            Record::Atime { .. } => "atime page",
            Record::Small { .. } => "small-object page",
            Record::Parity { .. } => "parity unit",
            Record::TxnLog { part, parts, .. } if *part + 1 == *parts => {
                "transaction commit record"
            }
            Record::TxnLog { .. } => "transaction log unit",
            Record::TxnDone { .. } => "transaction installed record",
        }
    }

    /// Encodes into `out` with the checksum of the unit's payload, returning the length used.
    /// A data record's unit index and length must be below [`LENGTH_LIMIT_BYTES`] (the store
    /// refuses longer objects).
    pub fn encode(&self, payload_crc: u32, out: &mut [u8; RECORD_MAX_BYTES]) -> usize {
        out.fill(0);
        out[1] = VERSION;
        out[2..8].copy_from_slice(&self.seq().to_le_bytes()[..6]);
        out[8..12].copy_from_slice(&payload_crc.to_le_bytes());
        let body = match *self {
            Record::Data {
                oid,
                offset,
                length,
                moved,
                seal,
                chunk,
                ..
            } => {
                debug_assert!(offset < LENGTH_LIMIT_BYTES && length < LENGTH_LIMIT_BYTES);
                out[0] = match (moved, seal.is_some(), chunk.is_some()) {
                    (false, false, false) => 1,
                    (true, false, false) => 5,
                    (false, true, false) => 9,
                    (true, true, false) => 10,
                    (false, false, true) => 11,
                    (true, false, true) => 12,
                    (false, true, true) => 13,
                    (true, true, true) => 14,
                };
                out[12..28].copy_from_slice(&oid.as_u128().to_le_bytes());
                out[28..34].copy_from_slice(&offset.to_le_bytes()[..6]);
                if let Some(c) = chunk {
                    // A chunk unit keeps its generation (also its nonce's input when sealed)
                    // and its generation's unit count where a data unit keeps its length.
                    debug_assert!(c.generation < GENERATION_LIMIT && c.units < 0x80);
                    out[34..39].copy_from_slice(&c.generation.to_le_bytes()[..5]);
                    out[39] = c.units | if c.raw { 0x80 } else { 0 };
                } else {
                    // A GC copy of an encrypted unit keeps its nonce's input where a plain
                    // copy keeps its stale length.
                    let at_34 = match seal {
                        Some(s) if moved => s.nonce_seq,
                        _ => length,
                    };
                    debug_assert!(at_34 < LENGTH_LIMIT_BYTES);
                    out[34..40].copy_from_slice(&at_34.to_le_bytes()[..6]);
                }
                if let Some(Seal { tag: Some(tag), .. }) = seal {
                    let crc = crc32c::crc32c(&out[..40]);
                    out[40..44].copy_from_slice(&crc.to_le_bytes());
                    out[44..60].copy_from_slice(&tag);
                    let crc = crc32c::crc32c(&out[..60]);
                    out[60..64].copy_from_slice(&crc.to_le_bytes());
                    return ENCRYPTED_RECORD_BYTES;
                }
                40
            }
            Record::Descriptor { .. } => {
                out[0] = 2;
                12
            }
            Record::Index {
                level, first_key, ..
            } => {
                out[0] = 3;
                out[12] = level;
                first_key.encode(&mut out[13..13 + IndexKey::ENCODED_BYTES]);
                13 + IndexKey::ENCODED_BYTES
            }
            Record::Checkpoint { .. } => {
                out[0] = 4;
                12
            }
            Record::Atime { .. } => {
                out[0] = 6;
                12
            }
            Record::Small { .. } => {
                out[0] = 7;
                12
            }
            Record::Parity {
                oid,
                group,
                row,
                data_units,
                covers,
                ..
            } => {
                debug_assert!(group < LENGTH_LIMIT_BYTES);
                out[0] = 8;
                out[12..28].copy_from_slice(&oid.as_u128().to_le_bytes());
                out[28..34].copy_from_slice(&group.to_le_bytes()[..6]);
                out[34] = row;
                out[35] = data_units;
                out[36..40].copy_from_slice(&covers.to_le_bytes());
                40
            }
            Record::TxnLog {
                txn, part, parts, ..
            } => {
                out[0] = if part + 1 == parts { 16 } else { 15 };
                out[12..20].copy_from_slice(&txn.to_le_bytes());
                out[20..24].copy_from_slice(&part.to_le_bytes());
                out[24..28].copy_from_slice(&parts.to_le_bytes());
                28
            }
            Record::TxnDone { txn, .. } => {
                out[0] = 17;
                out[12..20].copy_from_slice(&txn.to_le_bytes());
                28
            }
        };
        let crc = crc32c::crc32c(&out[..body]);
        out[body..body + 4].copy_from_slice(&crc.to_le_bytes());
        body + 4
    }

    /// `Ok(None)` for an erased (all 0xFF) area.
    pub fn decode(b: &[u8]) -> Result<Option<Record>, RecordError> {
        Ok(Self::decode_sealed(b)?.map(|s| s.record))
    }

    /// The record and its payload checksum; `Ok(None)` for an erased (all 0xFF) area.
    pub fn decode_sealed(b: &[u8]) -> Result<Option<Sealed>, RecordError> {
        let damaged = |m: String| Err(RecordError::Damaged(m));
        if b.len() >= 8 && b[..8].iter().all(|&x| x == 0xFF) {
            return Ok(None);
        }
        if b.len() < 12 {
            return damaged(format!("OOB record of {} bytes is too short", b.len()));
        }
        if b[1] == VERSION | COPY_FLAG {
            return Err(RecordError::Copy);
        }
        if b[1] != VERSION {
            // A whole record of version 1 (checksum right after its body) is an old image,
            // anything else damage.
            let v1_body = match b[0] {
                1 | 5 => 40,
                2 | 4 | 6 | 7 => 8,
                3 => 9 + IndexKey::ENCODED_BYTES,
                _ => usize::MAX,
            };
            if b[1] == 1
                && b.len() >= v1_body.saturating_add(4)
                && crc32c::crc32c(&b[..v1_body]) == u32_at(b, v1_body)
            {
                return Err(RecordError::Version(1));
            }
            return damaged(format!("OOB record version {} is unknown or damaged", b[1]));
        }
        let body = match b[0] {
            1 | 5 | 8..=14 => 40,
            2 | 4 | 6 | 7 => 12,
            3 => 13 + IndexKey::ENCODED_BYTES,
            15..=17 => TXN_RECORD_BYTES - 4,
            k => return damaged(format!("OOB record kind {k} is unknown")),
        };
        if b.len() < body + 4 {
            return damaged("OOB record is truncated".into());
        }
        if crc32c::crc32c(&b[..body]) != u32_at(b, body) {
            return damaged("OOB record checksum mismatch".into());
        }
        let seq = u48(&b[2..8]);
        let mut oid = [0u8; 16];
        let record = match b[0] {
            1 | 5 => {
                oid.copy_from_slice(&b[12..28]);
                Record::Data {
                    oid: Oid::from_u128(u128::from_le_bytes(oid)),
                    offset: u48(&b[28..34]),
                    length: u48(&b[34..40]),
                    seq,
                    moved: b[0] == 5,
                    seal: None,
                    chunk: None,
                }
            }
            11..=14 => {
                oid.copy_from_slice(&b[12..28]);
                let mut g = [0u8; 8];
                g[..5].copy_from_slice(&b[34..39]);
                let chunk = ChunkTag {
                    generation: u64::from_le_bytes(g),
                    units: b[39] & 0x7F,
                    raw: b[39] & 0x80 != 0,
                };
                if chunk.units == 0 {
                    return damaged(
                        "OOB record of a chunk unit says its chunk has no units".into(),
                    );
                }
                let seal = if b[0] >= 13 {
                    Some(Seal {
                        nonce_seq: chunk.generation,
                        tag: read_tag(b)?,
                    })
                } else {
                    None
                };
                Record::Data {
                    oid: Oid::from_u128(u128::from_le_bytes(oid)),
                    offset: u48(&b[28..34]),
                    length: 0,
                    seq,
                    moved: b[0] == 12 || b[0] == 14,
                    seal,
                    chunk: Some(chunk),
                }
            }
            9 | 10 => {
                oid.copy_from_slice(&b[12..28]);
                let moved = b[0] == 10;
                let at_34 = u48(&b[34..40]);
                let tag = read_tag(b)?;
                Record::Data {
                    oid: Oid::from_u128(u128::from_le_bytes(oid)),
                    offset: u48(&b[28..34]),
                    // A copy's length is stale: its bytes hold the nonce's input instead.
                    length: if moved { 0 } else { at_34 },
                    seq,
                    moved,
                    seal: Some(Seal {
                        nonce_seq: if moved { at_34 } else { seq },
                        tag,
                    }),
                    chunk: None,
                }
            }
            2 => Record::Descriptor { seq },
            3 => Record::Index {
                level: b[12],
                first_key: IndexKey::decode(&b[13..13 + IndexKey::ENCODED_BYTES]),
                seq,
            },
            6 => Record::Atime { seq },
            7 => Record::Small { seq },
            8 => {
                oid.copy_from_slice(&b[12..28]);
                Record::Parity {
                    oid: Oid::from_u128(u128::from_le_bytes(oid)),
                    group: u48(&b[28..34]),
                    row: b[34],
                    data_units: b[35],
                    covers: u32_at(b, 36),
                    seq,
                }
            }
            15 | 16 => {
                let mut t = [0u8; 8];
                t.copy_from_slice(&b[12..20]);
                let (part, parts) = (u32_at(b, 20), u32_at(b, 24));
                // Kind 16, and only kind 16, is the last part.
                if part >= parts || (part + 1 == parts) != (b[0] == 16) {
                    return damaged(format!(
                        "OOB record of transaction log part {part} of {parts} (kind {})",
                        b[0]
                    ));
                }
                Record::TxnLog {
                    txn: u64::from_le_bytes(t),
                    part,
                    parts,
                    seq,
                }
            }
            17 => {
                let mut t = [0u8; 8];
                t.copy_from_slice(&b[12..20]);
                Record::TxnDone {
                    txn: u64::from_le_bytes(t),
                    seq,
                }
            }
            _ => Record::Checkpoint { seq },
        };
        Ok(Some(Sealed {
            record,
            payload_crc: u32_at(b, 8),
        }))
    }

    /// The record of the copy of a metadata unit whose record is `primary_oob` (an encoded
    /// record, [`Record::encode`]) and which was programmed at write unit `primary` (docs/FORMAT.md,
    /// "Metadata copies"): the same bytes with the copy flag (0x80) in the version byte, and a CRC that
    /// also covers `primary`, so a copy decodes only as the copy of the unit right before it.
    pub fn encode_copy(
        primary_oob: &[u8],
        primary: u32,
        out: &mut [u8; RECORD_MAX_BYTES],
    ) -> usize {
        let n = primary_oob.len();
        debug_assert!((16..=RECORD_MAX_BYTES).contains(&n));
        out.fill(0);
        out[..n].copy_from_slice(primary_oob);
        out[1] = VERSION | COPY_FLAG;
        let crc = copy_crc(&out[..n - 4], primary);
        out[n - 4..n].copy_from_slice(&crc.to_le_bytes());
        n
    }

    /// The record a copy's OOB bytes `b` carry for the unit it copies, if it is the copy of the
    /// unit programmed at `primary`. `Ok(None)` for an erased area; an error for anything but a
    /// whole copy record of `primary`.
    pub fn decode_copy(b: &[u8], primary: u32) -> Result<Option<Sealed>, RecordError> {
        if b.len() >= 8 && b[..8].iter().all(|&x| x == 0xFF) {
            return Ok(None);
        }
        if b.len() < 16 || b[1] != VERSION | COPY_FLAG {
            return Err(RecordError::Damaged("not a metadata copy's record".into()));
        }
        // The kinds that have copies, and the length of their record before its CRC.
        let body = match b[0] {
            2 | 4 | 6 | 7 => 12,
            3 => 13 + IndexKey::ENCODED_BYTES,
            15..=17 => TXN_RECORD_BYTES - 4,
            k => {
                return Err(RecordError::Damaged(format!(
                    "a metadata copy's record of kind {k}, which has no copies"
                )))
            }
        };
        if b.len() < body + 4 {
            return Err(RecordError::Damaged(
                "a metadata copy's record is truncated".into(),
            ));
        }
        if copy_crc(&b[..body], primary) != u32_at(b, body) {
            return Err(RecordError::Damaged(format!(
                "not the copy of unit {primary} (or its record is damaged)"
            )));
        }
        let mut plain = [0u8; RECORD_MAX_BYTES];
        plain[..body].copy_from_slice(&b[..body]);
        plain[1] = VERSION;
        let crc = crc32c::crc32c(&plain[..body]);
        plain[body..body + 4].copy_from_slice(&crc.to_le_bytes());
        Self::decode_sealed(&plain[..body + 4])
    }
}

/// A copy record's CRC: CRC-32C of its bytes, then of the copied unit's address (u32 LE).
fn copy_crc(body: &[u8], primary: u32) -> u32 {
    crc32c::crc32c_append(crc32c::crc32c(body), &primary.to_le_bytes())
}

#[cfg(test)]
mod tests {
    use super::*;
    use flash::{Content, Payload};

    fn samples() -> Vec<Record> {
        let key = IndexKey {
            oid: 77,
            kind: 1,
            offset: 9,
        };
        vec![
            Record::Data {
                oid: Oid::new(0x10000, 0x10005),
                offset: 3,
                length: LENGTH_LIMIT_BYTES - 1,
                seq: 99,
                moved: true,
                seal: None,
                chunk: None,
            },
            Record::Data {
                oid: Oid::new(0x10000, 0x10007),
                offset: 2 * 16 + 16 + 3,
                length: 0,
                seq: 102,
                moved: false,
                seal: None,
                chunk: Some(ChunkTag {
                    generation: GENERATION_LIMIT - 1,
                    units: 5,
                    raw: false,
                }),
            },
            Record::Data {
                oid: Oid::new(0x10000, 0x10008),
                offset: 7,
                length: 0,
                seq: 103,
                moved: true,
                seal: Some(Seal {
                    nonce_seq: 77,
                    tag: Some([3; TAG_BYTES]),
                }),
                chunk: Some(ChunkTag {
                    generation: 77,
                    units: 16,
                    raw: true,
                }),
            },
            Record::Data {
                oid: Oid::new(0x10000, 0x10006),
                offset: 4,
                length: 12345,
                seq: 100,
                moved: false,
                seal: Some(Seal {
                    nonce_seq: 100,
                    tag: Some([0xA5; TAG_BYTES]),
                }),
                chunk: None,
            },
            Record::Data {
                oid: Oid::new(0x10000, 0x10006),
                offset: LENGTH_LIMIT_BYTES - 1,
                length: 0,
                seq: 101,
                moved: true,
                seal: Some(Seal {
                    nonce_seq: LENGTH_LIMIT_BYTES - 2,
                    tag: Some([7; TAG_BYTES]),
                }),
                chunk: None,
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
            Record::Parity {
                oid: Oid::new(0x10000, 0x10009),
                group: LENGTH_LIMIT_BYTES - 1,
                row: 3,
                data_units: 16,
                covers: 0xFEED_F00D,
                seq: 8,
            },
            Record::TxnLog {
                txn: u64::MAX - 3,
                part: 0,
                parts: 3,
                seq: 9,
            },
            Record::TxnLog {
                txn: 12,
                part: 2,
                parts: 3,
                seq: 10,
            },
            Record::TxnDone { txn: 12, seq: 11 },
        ]
    }

    #[test]
    fn a_copy_record_decodes_only_as_the_copy_of_its_unit() {
        for r in samples() {
            let mut b = [0u8; RECORD_MAX_BYTES];
            let n = r.encode(0x1234_5678, &mut b);
            let mut c = [0u8; RECORD_MAX_BYTES];
            if matches!(r, Record::Data { .. } | Record::Parity { .. }) {
                // Data and parity have no copies: such a copy record is refused.
                Record::encode_copy(&b[..n], 7, &mut c);
                assert!(Record::decode_copy(&c, 7).is_err(), "{r:?}");
                continue;
            }
            let m = Record::encode_copy(&b[..n], 41, &mut c);
            assert_eq!(m, n);
            // Read alone, a copy is not a record of its own (recovery must not see it twice).
            assert_eq!(Record::decode_sealed(&c[..m]), Err(RecordError::Copy));
            let got = Record::decode_copy(&c[..m], 41).unwrap().unwrap();
            assert_eq!(got.record, r);
            assert_eq!(got.payload_crc, 0x1234_5678);
            // The copy of another unit (a misdirected program's) is refused.
            assert!(Record::decode_copy(&c[..m], 40).is_err());
            for i in 0..m {
                let mut d = c;
                d[i] ^= 0x10;
                assert!(Record::decode_copy(&d[..m], 41).is_err(), "{r:?} byte {i}");
            }
            // A primary's own record is no copy.
            assert!(Record::decode_copy(&b[..n], 41).is_err());
        }
    }

    #[test]
    fn a_transaction_record_whose_kind_disagrees_with_its_part_is_refused() {
        // Only the last part is the commit record (kind 16): a kind 15 claiming to be last,
        // or a part past the count, would let a torn log look committed.
        let mut b = [0u8; RECORD_MAX_BYTES];
        let n = Record::TxnLog {
            txn: 1,
            part: 1,
            parts: 2,
            seq: 5,
        }
        .encode(0, &mut b);
        assert_eq!(b[0], 16);
        b[0] = 15;
        let crc = crc32c::crc32c(&b[..n - 4]);
        b[n - 4..n].copy_from_slice(&crc.to_le_bytes());
        assert!(matches!(
            Record::decode(&b[..n]),
            Err(RecordError::Damaged(_))
        ));
        b[20..24].copy_from_slice(&2u32.to_le_bytes());
        let crc = crc32c::crc32c(&b[..n - 4]);
        b[n - 4..n].copy_from_slice(&crc.to_le_bytes());
        assert!(matches!(
            Record::decode(&b[..n]),
            Err(RecordError::Damaged(_))
        ));
    }

    #[test]
    fn round_trips_and_rejects_damage() {
        for r in samples() {
            let mut b = [0u8; RECORD_MAX_BYTES];
            let n = r.encode(0xDEAD_BEEF, &mut b);
            let expected = match r {
                Record::Data { seal: Some(_), .. } => ENCRYPTED_RECORD_BYTES,
                Record::Data { .. } => DATA_RECORD_BYTES,
                Record::Parity { .. } => PARITY_RECORD_BYTES,
                Record::Index { .. } => INDEX_RECORD_BYTES,
                Record::TxnLog { .. } | Record::TxnDone { .. } => TXN_RECORD_BYTES,
                _ => META_RECORD_BYTES,
            };
            assert_eq!(n, expected);
            assert_eq!(
                Record::decode_sealed(&b[..n]),
                Ok(Some(Sealed {
                    record: r,
                    payload_crc: 0xDEAD_BEEF
                }))
            );
            // Every single-bit flip of the record, the stored payload checksum included, is
            // refused.
            for i in 0..n {
                for bit in 0..8 {
                    let mut d = b;
                    d[i] ^= 1 << bit;
                    // The copy flag's bit makes a record claim to be a copy, which is
                    // checked only against the address it copies (`decode_copy`).
                    let refused = match Record::decode(&d[..n]) {
                        Err(RecordError::Damaged(_)) => true,
                        Err(RecordError::Copy) => (i, bit) == (1, 7),
                        _ => false,
                    };
                    assert!(refused, "flip of bit {bit} of byte {i} in {r:?}");
                    if (i, bit) == (1, 7) {
                        assert!(Record::decode_copy(&d[..n], 5).is_err());
                    }
                }
            }
        }
        assert_eq!(Record::decode(&[0xFF; 64]), Ok(None));
    }

    #[test]
    fn an_encrypted_record_decodes_from_its_first_44_bytes_without_its_tag() {
        let r = Record::Data {
            oid: Oid::new(0x10000, 0x10006),
            offset: 4,
            length: 0,
            seq: 300,
            moved: true,
            seal: Some(Seal {
                nonce_seq: 200,
                tag: Some([3; TAG_BYTES]),
            }),
            chunk: None,
        };
        let mut b = [0xFFu8; RECORD_MAX_BYTES];
        assert_eq!(r.encode(1, &mut b), ENCRYPTED_RECORD_BYTES);
        let head = Record::decode(&b[..SCAN_RECORD_BYTES]);
        let Ok(Some(Record::Data { seal: Some(s), .. })) = head else {
            panic!("{head:?}")
        };
        assert_eq!((s.nonce_seq, s.tag), (200, None));
        // Written without a tag, a whole read sees erased bytes there: no tag, never zeros.
        let r = Record::Data {
            oid: Oid::new(0x10000, 0x10006),
            offset: 4,
            length: 0,
            seq: 300,
            moved: true,
            seal: Some(Seal {
                nonce_seq: 200,
                tag: None,
            }),
            chunk: None,
        };
        let mut b = [0u8; RECORD_MAX_BYTES];
        let n = r.encode(1, &mut b);
        assert_eq!(n, SCAN_RECORD_BYTES);
        b[n..].fill(0xFF);
        assert_eq!(Record::decode(&b), Ok(Some(r)));
    }

    #[test]
    fn a_flipped_payload_bit_changes_the_checksum() {
        let mut page = vec![0u8; 2048];
        for (i, b) in page.iter_mut().enumerate() {
            *b = (i * 7 + 3) as u8;
        }
        let stored = payload_crc(Payload::Bytes(&page));
        assert_eq!(content_crc(Content::Bytes, &page), Some(stored));
        for bit in [0, 1, 7, 8 * 1000 + 3, 8 * 2048 - 1] {
            let mut d = page.clone();
            d[bit / 8] ^= 1 << (bit % 8);
            assert_ne!(content_crc(Content::Bytes, &d), Some(stored), "bit {bit}");
        }
        // Fingerprint mode: the checksum covers the token.
        let fp = 0x0123_4567_89AB_CDEF_u64;
        let stored = payload_crc(Payload::Fingerprint(fp));
        assert_eq!(content_crc(Content::Fingerprint(fp), &[]), Some(stored));
        for bit in 0..64 {
            assert_ne!(
                content_crc(Content::Fingerprint(fp ^ (1 << bit)), &[]),
                Some(stored)
            );
        }
        assert_eq!(content_crc(Content::Erased, &[]), None);
    }

    #[test]
    fn version_1_records_are_named_not_mistaken_for_damage() {
        // A version 1 descriptor record: kind 2, version 1, sequence 9, CRC at 8.
        let mut b = [0u8; 12];
        b[0] = 2;
        b[1] = 1;
        b[2] = 9;
        let crc = crc32c::crc32c(&b[..8]);
        b[8..12].copy_from_slice(&crc.to_le_bytes());
        assert_eq!(Record::decode(&b), Err(RecordError::Version(1)));
        b[3] ^= 1;
        assert!(matches!(Record::decode(&b), Err(RecordError::Damaged(_))));
    }
}
