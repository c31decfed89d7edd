//! Onodes: object descriptors of at most 256 bytes holding the predefined attributes and the
//! user attributes as (id, length, value) tuples (OSSD-13 V-D, OSCM-11 III-A). Several onodes
//! share one descriptor page on flash.

use crate::compress::CompressionState;
use crate::crypt::WRAPPED_KEY_BYTES;
use crate::id::Oid;
use codec::le;

/// An onode never exceeds this (OSSD-13 V-D).
pub const ONODE_MAX_BYTES: usize = 256;
/// User attribute ids start here; lower ids are the predefined attributes.
pub const FIRST_USER_ATTR: u16 = 0x1000;
/// A single user attribute value is at most this long.
pub const USER_ATTR_MAX_BYTES: usize = 128;

const MAGIC: u8 = 0xD5;
/// Version 2 added the object services (reliability, parity group). An onode without services
/// is still written as version 1 (so its size, and how many share a descriptor page, is
/// unchanged); version 1 onodes decode with none.
const VERSION: u8 = 2;
/// Version 3 adds, after version 2's services, the object's encryption: an algorithm byte and
/// its wrapped data key. Written only for encrypted objects.
const VERSION_CRYPT: u8 = 3;
/// Version 4 is version 2 followed by the sequence number of the object's creation, then
/// (flag bit 4) version 3's encryption bytes. Written for every object created by a build that
/// knows it; an onode without it (older objects, partition roots) keeps versions 1 to 3.
const VERSION_CREATED: u8 = 4;
/// Version 4's creation sequence number.
const CREATED_BYTES: usize = 8;
/// Encryption algorithm codes (byte 93 of a version 3 onode, 101 of a version 4 one).
const ALGO_XCHACHA20_POLY1305: u8 = 1;
/// Version 3's encryption bytes: the algorithm, the wrapped data key.
const CRYPT_BYTES: usize = 1 + WRAPPED_KEY_BYTES;
const FLAG_REMOVED: u8 = 1;
const FLAG_READ_ONLY: u8 = 2;
const FLAG_INODE: u8 = 4;
const FLAG_INLINE: u8 = 8;
/// Version 4 only: the encryption bytes follow the creation sequence number.
const FLAG_ENCRYPTED: u8 = 16;
/// Data of an inode object kept within its onode, at most (OSCM-11 V-D: inode embedding).
pub const INLINE_MAX_BYTES: usize = 128;
/// magic, version, flags, priority, access pattern, oid, length, used, 4 times, expected size,
/// write count, sequence number, attribute count; then (version 2) the services; then the
/// attributes; then the CRC.
const FIXED_BYTES_V1: usize = 1 + 1 + 1 + 1 + 1 + 16 + 8 + 8 + 4 * 8 + 8 + 4 + 8 + 1;
/// Version 2's services: parity units per group, data units per group, and the compression
/// byte ([`CompressionState`]; 0 for none, which is all that builds before compression wrote).
const SERVICES_BYTES: usize = 3;
const FIXED_BYTES: usize = FIXED_BYTES_V1 + SERVICES_BYTES;

/// How the host expects an object to be accessed (a placement hint).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum AccessPattern {
    /// No hint (the default).
    #[default]
    Unknown,
    /// Read and written in order.
    Sequential,
    /// Read and written at random offsets.
    Random,
    /// Written once, read many times.
    WriteOnce,
}

impl AccessPattern {
    fn code(self) -> u8 {
        match self {
            AccessPattern::Unknown => 0,
            AccessPattern::Sequential => 1,
            AccessPattern::Random => 2,
            AccessPattern::WriteOnce => 3,
        }
    }
    fn from_code(c: u8) -> Option<Self> {
        Some(match c {
            0 => AccessPattern::Unknown,
            1 => AccessPattern::Sequential,
            2 => AccessPattern::Random,
            3 => AccessPattern::WriteOnce,
            _ => return None,
        })
    }
}

/// An object descriptor.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Onode {
    /// The object.
    pub oid: Oid,
    /// A tombstone: the object was removed (kept on flash until recovery no longer needs it).
    pub removed: bool,
    /// Writes and truncation are refused ([`crate::Attr::ReadOnly`]).
    pub read_only: bool,
    /// The host marked the object as an inode (OSCM-11 V-D: inode embedding).
    pub inode: bool,
    /// Scheduling priority: 0 normal, above 0 real-time ([`crate::Attr::Priority`]).
    pub priority: u8,
    /// Placement hint: how the host will access the object.
    pub access: AccessPattern,
    /// The logical length in bytes.
    pub logical_length: u64,
    /// Bytes of flash the object's data occupies (whole write units).
    pub used_bytes: u64,
    /// Creation time, virtual ns.
    pub created_ns: u64,
    /// Last data or length change, virtual ns.
    pub modified_ns: u64,
    /// Last read, virtual ns (a newer time may wait in the atime journal).
    pub accessed_ns: u64,
    /// Last attribute change, virtual ns.
    pub attr_changed_ns: u64,
    /// Placement hint: the size the host expects the object to reach (0 = unknown).
    pub expected_size: u64,
    /// Writes counted in write units, for hot/cold placement (OSSD-13 V-F); GC copies of the
    /// object's units decrement it.
    pub write_count: u32,
    /// Sequence number of the write that produced this version; recovery applies an onode only
    /// over an older version of it.
    pub seq: u64,
    /// The store's sequence number when the object was created (0: not recorded, an object
    /// of an older build or a partition root). Every unit of this object was written after
    /// it, so recovery takes a unit of the same id with an older sequence number for an
    /// earlier incarnation's, one whose creation a crash discarded (docs/RELIABILITY.md,
    /// finding 34).
    pub created_seq: u64,
    /// Object-level reliability (OSCM-11 III): parity units per parity group, 0 for none.
    pub reliability: u8,
    /// Data units per parity group (fixed once the object has parity; 0 when `reliability` is).
    pub parity_group: u8,
    /// Per-object compression: the attribute and the codec in effect.
    pub compression: CompressionState,
    /// Encryption (XChaCha20-Poly1305, the only algorithm): the object's data key wrapped by
    /// the device master key ([`crate::crypt`]); `None` for a plain object.
    pub wrapped_key: Option<[u8; WRAPPED_KEY_BYTES]>,
    /// User attributes, sorted by id.
    pub attrs: Vec<(u16, Vec<u8>)>,
    /// The object's data, kept within the onode (an embedded inode); `None` when it lives in
    /// data units.
    pub inline: Option<Vec<u8>>,
}

impl From<le::Truncated> for OnodeError {
    fn from(t: le::Truncated) -> Self {
        OnodeError::Corrupted(t.to_string())
    }
}

/// Why [`Onode::set_user_attr`] refused an attribute (the onode is left as it was).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum AttrError {
    /// The id is one of the predefined attributes, not a user attribute.
    #[error("attribute id {id:#x} is predefined; user attributes start at {FIRST_USER_ATTR:#x}")]
    Predefined {
        /// The id.
        id: u16,
    },
    /// The value is longer than a user attribute may be.
    #[error("attribute value of {bytes} bytes exceeds {USER_ATTR_MAX_BYTES}")]
    ValueTooLong {
        /// Bytes in the value.
        bytes: usize,
    },
    /// With the value, the onode would outgrow its fixed size.
    #[error("attributes do not fit the {ONODE_MAX_BYTES}-byte onode ({over} bytes over)")]
    OnodeFull {
        /// Bytes over the onode's size.
        over: usize,
    },
}

/// Why an onode cannot be encoded or decoded.
#[derive(Debug, PartialEq, Eq)]
pub enum OnodeError {
    /// The onode would encode to more than [`ONODE_MAX_BYTES`].
    TooLarge {
        /// Its encoded length.
        bytes: usize,
    },
    /// Bytes that do not decode as an onode (says why).
    Corrupted(String),
}

impl Onode {
    /// A new object's onode, its four times set to `now_ns`.
    pub fn new(oid: Oid, now_ns: u64) -> Onode {
        Onode {
            oid,
            created_ns: now_ns,
            modified_ns: now_ns,
            accessed_ns: now_ns,
            attr_changed_ns: now_ns,
            ..Onode::default()
        }
    }

    /// Whether the onode needs version 2 (it has services).
    fn has_services(&self) -> bool {
        self.reliability != 0 || self.parity_group != 0 || self.compression.0 != 0
    }

    /// The version the onode is written as: 4 with its creation recorded, else 1 plain, 2
    /// with services, 3 encrypted.
    fn version(&self) -> u8 {
        if self.created_seq != 0 {
            VERSION_CREATED
        } else if self.wrapped_key.is_some() {
            VERSION_CRYPT
        } else if self.has_services() {
            VERSION
        } else {
            1
        }
    }

    /// Bytes the onode takes encoded in a descriptor page.
    pub fn encoded_len(&self) -> usize {
        let crypt = if self.wrapped_key.is_some() {
            CRYPT_BYTES
        } else {
            0
        };
        let fixed = match self.version() {
            1 => FIXED_BYTES_V1,
            VERSION => FIXED_BYTES,
            VERSION_CRYPT => FIXED_BYTES + CRYPT_BYTES,
            _ => FIXED_BYTES + CREATED_BYTES + crypt,
        };
        fixed
            + self.attrs.iter().map(|(_, v)| 3 + v.len()).sum::<usize>()
            + self.inline.as_ref().map_or(0, |d| 1 + d.len())
            + 4
    }

    /// Encodes into `out`; an onode over [`ONODE_MAX_BYTES`] is an error (the caller refuses
    /// the attribute that made it too large).
    pub fn encode(&self, out: &mut Vec<u8>) -> Result<(), OnodeError> {
        let len = self.encoded_len();
        if len > ONODE_MAX_BYTES {
            return Err(OnodeError::TooLarge { bytes: len });
        }
        let start = out.len();
        let flag = |on: bool, bit: u8| if on { bit } else { 0 };
        let version = self.version();
        let flags = flag(self.removed, FLAG_REMOVED)
            | flag(self.read_only, FLAG_READ_ONLY)
            | flag(self.inode, FLAG_INODE)
            | flag(self.inline.is_some(), FLAG_INLINE)
            | flag(
                version == VERSION_CREATED && self.wrapped_key.is_some(),
                FLAG_ENCRYPTED,
            );
        out.extend_from_slice(&[MAGIC, version, flags, self.priority, self.access.code()]);
        out.extend_from_slice(&self.oid.as_u128().to_le_bytes());
        for v in [
            self.logical_length,
            self.used_bytes,
            self.created_ns,
            self.modified_ns,
            self.accessed_ns,
            self.attr_changed_ns,
            self.expected_size,
        ] {
            out.extend_from_slice(&v.to_le_bytes());
        }
        out.extend_from_slice(&self.write_count.to_le_bytes());
        out.extend_from_slice(&self.seq.to_le_bytes());
        out.push(self.attrs.len() as u8);
        if version >= VERSION {
            out.extend_from_slice(&[self.reliability, self.parity_group, self.compression.0]);
        }
        if version == VERSION_CREATED {
            out.extend_from_slice(&self.created_seq.to_le_bytes());
        }
        if let Some(w) = &self.wrapped_key {
            out.push(ALGO_XCHACHA20_POLY1305);
            out.extend_from_slice(w);
        }
        for (id, v) in &self.attrs {
            out.extend_from_slice(&id.to_le_bytes());
            out.push(v.len() as u8);
            out.extend_from_slice(v);
        }
        if let Some(d) = &self.inline {
            out.push(d.len() as u8);
            out.extend_from_slice(d);
        }
        let crc = crc32c::crc32c(&out[start..]);
        out.extend_from_slice(&crc.to_le_bytes());
        debug_assert_eq!(out.len() - start, len);
        Ok(())
    }

    /// Decodes one onode from the front of `b`; returns it and the bytes it took.
    pub fn decode(b: &[u8]) -> Result<(Onode, usize), OnodeError> {
        let bad = |what: &str| OnodeError::Corrupted(what.to_string());
        if b.len() < FIXED_BYTES_V1 + 4 {
            return Err(bad("onode shorter than its fixed part"));
        }
        if b[0] != MAGIC {
            return Err(bad("bad onode magic"));
        }
        let encrypted = b[2] & FLAG_ENCRYPTED != 0;
        if encrypted && b[1] != VERSION_CREATED {
            return Err(bad("onode flag bit 4 set below version 4"));
        }
        // Where the encryption bytes start, if the onode has them; the fixed part's length.
        let (crypt_at, fixed) = match b[1] {
            1 => (None, FIXED_BYTES_V1),
            VERSION => (None, FIXED_BYTES),
            VERSION_CRYPT => (Some(FIXED_BYTES), FIXED_BYTES + CRYPT_BYTES),
            VERSION_CREATED if encrypted => (
                Some(FIXED_BYTES + CREATED_BYTES),
                FIXED_BYTES + CREATED_BYTES + CRYPT_BYTES,
            ),
            VERSION_CREATED => (None, FIXED_BYTES + CREATED_BYTES),
            v => {
                return Err(OnodeError::Corrupted(format!(
                    "onode version {v} is not supported (this build reads 1 to {VERSION_CREATED})"
                )))
            }
        };
        if b.len() < fixed + 4 {
            return Err(bad("onode shorter than its fixed part"));
        }
        let u64_at = |o: usize| le::u64_at(b, o);
        let mut at = fixed;
        let n = b[FIXED_BYTES_V1 - 1] as usize;
        let mut attrs = Vec::with_capacity(n);
        for _ in 0..n {
            if at + 3 > b.len() {
                return Err(bad("onode attribute runs past the end"));
            }
            let id = u16::from_le_bytes([b[at], b[at + 1]]);
            let len = b[at + 2] as usize;
            if at + 3 + len > b.len() {
                return Err(bad("onode attribute value runs past the end"));
            }
            attrs.push((id, b[at + 3..at + 3 + len].to_vec()));
            at += 3 + len;
        }
        let mut inline = None;
        if b[2] & FLAG_INLINE != 0 {
            let len = *b
                .get(at)
                .ok_or_else(|| bad("onode inline data runs past the end"))?
                as usize;
            if len > INLINE_MAX_BYTES || at + 1 + len > b.len() {
                return Err(bad("onode inline data runs past the end"));
            }
            inline = Some(b[at + 1..at + 1 + len].to_vec());
            at += 1 + len;
        }
        if at + 4 > b.len() || at + 4 > ONODE_MAX_BYTES {
            return Err(bad("onode checksum runs past the end"));
        }
        let crc = le::u32_at(b, at)?;
        if crc32c::crc32c(&b[..at]) != crc {
            return Err(bad("onode checksum mismatch"));
        }
        let flags = b[2];
        let (reliability, parity_group, compression) = if fixed >= FIXED_BYTES {
            let s = &b[FIXED_BYTES_V1..FIXED_BYTES];
            if !CompressionState(s[2]).is_valid()
                || (s[0] == 0) != (s[1] == 0)
                || s[0] as usize + s[1] as usize > 256
            {
                return Err(OnodeError::Corrupted(format!(
                    "onode services {s:?} are unknown or inconsistent"
                )));
            }
            (s[0], s[1], CompressionState(s[2]))
        } else {
            (0, 0, CompressionState(0))
        };
        let wrapped_key = match crypt_at {
            Some(c) if b[c] != ALGO_XCHACHA20_POLY1305 => {
                return Err(OnodeError::Corrupted(format!(
                    "onode encryption algorithm {} is unknown",
                    b[c]
                )));
            }
            Some(c) => Some(le::array_at(b, c + 1)?),
            None => None,
        };
        let created_seq = if b[1] == VERSION_CREATED {
            u64_at(FIXED_BYTES)?
        } else {
            0
        };
        if b[1] == VERSION_CREATED && created_seq == 0 {
            return Err(bad("version 4 onode without its creation sequence number"));
        }
        let onode = Onode {
            oid: Oid::from_u128(u128::from_le_bytes(le::array_at(b, 5)?)),
            removed: flags & FLAG_REMOVED != 0,
            read_only: flags & FLAG_READ_ONLY != 0,
            inode: flags & FLAG_INODE != 0,
            priority: b[3],
            access: AccessPattern::from_code(b[4]).ok_or_else(|| bad("unknown access pattern"))?,
            logical_length: u64_at(21)?,
            used_bytes: u64_at(29)?,
            created_ns: u64_at(37)?,
            modified_ns: u64_at(45)?,
            accessed_ns: u64_at(53)?,
            attr_changed_ns: u64_at(61)?,
            expected_size: u64_at(69)?,
            write_count: le::u32_at(b, 77)?,
            seq: u64_at(81)?,
            created_seq,
            reliability,
            parity_group,
            compression,
            wrapped_key,
            attrs,
            inline,
        };
        Ok((onode, at + 4))
    }

    /// The value of user attribute `id`, if set.
    pub fn user_attr(&self, id: u16) -> Option<&[u8]> {
        self.attrs
            .iter()
            .find(|(i, _)| *i == id)
            .map(|(_, v)| v.as_slice())
    }

    /// Sets (or with `None` removes) a user attribute, keeping the onode within its size.
    pub fn set_user_attr(&mut self, id: u16, value: Option<&[u8]>) -> Result<(), AttrError> {
        if id < FIRST_USER_ATTR {
            return Err(AttrError::Predefined { id });
        }
        let old = self.attrs.clone();
        self.attrs.retain(|(i, _)| *i != id);
        if let Some(v) = value {
            if v.len() > USER_ATTR_MAX_BYTES {
                self.attrs = old;
                return Err(AttrError::ValueTooLong { bytes: v.len() });
            }
            let pos = self.attrs.partition_point(|(i, _)| *i < id);
            self.attrs.insert(pos, (id, v.to_vec()));
        }
        if self.encoded_len() > ONODE_MAX_BYTES {
            let over = self.encoded_len() - ONODE_MAX_BYTES;
            self.attrs = old;
            return Err(AttrError::OnodeFull { over });
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A plain onode with one user attribute, and its encoding (version 1).
    fn named_onode() -> (Onode, Vec<u8>) {
        let mut o = Onode::new(Oid::new(0x10000, 0x10001), 5);
        o.set_user_attr(0x1000, Some(b"name")).unwrap();
        let mut plain = Vec::new();
        o.encode(&mut plain).unwrap();
        (o, plain)
    }

    /// Rewrites an encoded onode's CRC after a test changed its bytes, so that decoding judges
    /// the change itself.
    fn reseal(b: &mut [u8]) {
        let n = b.len();
        let crc = crc32c::crc32c(&b[..n - 4]);
        b[n - 4..].copy_from_slice(&crc.to_le_bytes());
    }

    #[test]
    fn round_trip_with_attributes() {
        let mut o = Onode::new(Oid::new(0x10000, 0x10001), 5);
        o.logical_length = 12345;
        o.priority = 3;
        o.access = AccessPattern::Sequential;
        o.inode = true;
        o.seq = 1 << 40;
        o.inline = Some(b"inode bytes".to_vec());
        o.set_user_attr(0x1001, Some(b"hello")).unwrap();
        o.set_user_attr(0x1000, Some(b"")).unwrap();
        let mut buf = Vec::new();
        o.encode(&mut buf).unwrap();
        buf.extend_from_slice(b"trailing");
        let (back, used) = Onode::decode(&buf).unwrap();
        assert_eq!(back, o);
        assert_eq!(used, o.encoded_len());
        assert_eq!(back.attrs[0].0, 0x1000, "attributes are sorted by id");
    }

    #[test]
    fn services_take_version_2_and_plain_onodes_stay_version_1() {
        let mut o = Onode::new(Oid::new(0x10000, 0x10001), 5);
        let mut plain = Vec::new();
        o.encode(&mut plain).unwrap();
        assert_eq!(plain[1], 1);
        o.reliability = 2;
        o.parity_group = 16;
        let mut buf = Vec::new();
        o.encode(&mut buf).unwrap();
        assert_eq!((buf[1], buf.len()), (2, plain.len() + SERVICES_BYTES));
        assert_eq!(Onode::decode(&buf).unwrap().0, o);
        // Inconsistent services (parity without a group size) are refused, not guessed.
        let mut bad = buf.clone();
        bad[FIXED_BYTES_V1 + 1] = 0;
        reseal(&mut bad);
        assert!(
            matches!(Onode::decode(&bad), Err(OnodeError::Corrupted(m)) if m.contains("services"))
        );
        // A future version is refused by name.
        let mut v5 = buf.clone();
        v5[1] = 5;
        assert!(
            matches!(Onode::decode(&v5), Err(OnodeError::Corrupted(m)) if m.contains("version 5"))
        );
    }

    #[test]
    fn encryption_takes_version_3_with_its_wrapped_key() {
        let (mut o, plain) = named_onode();
        o.wrapped_key = Some([0x5A; WRAPPED_KEY_BYTES]);
        for (m, k) in [(0, 0), (1, 16)] {
            o.reliability = m;
            o.parity_group = k;
            let mut buf = Vec::new();
            o.encode(&mut buf).unwrap();
            assert_eq!(buf[1], 3);
            assert_eq!(buf.len(), plain.len() + SERVICES_BYTES + CRYPT_BYTES);
            assert_eq!(buf[FIXED_BYTES], ALGO_XCHACHA20_POLY1305);
            assert_eq!(Onode::decode(&buf).unwrap().0, o);
            // An unknown algorithm is refused, not guessed.
            let mut bad = buf.clone();
            bad[FIXED_BYTES] = 2;
            reseal(&mut bad);
            assert!(
                matches!(Onode::decode(&bad), Err(OnodeError::Corrupted(m)) if m.contains("algorithm"))
            );
        }
    }

    #[test]
    fn size_limits_are_enforced() {
        let mut o = Onode::new(Oid::new(1, 2), 0);
        assert_eq!(
            o.set_user_attr(5, Some(b"x")),
            Err(AttrError::Predefined { id: 5 })
        );
        assert_eq!(
            o.set_user_attr(0x1000, Some(&[0; 129])),
            Err(AttrError::ValueTooLong { bytes: 129 })
        );
        o.set_user_attr(0x1000, Some(&[1; 128])).unwrap();
        let e = o.set_user_attr(0x1001, Some(&[1; 64])).unwrap_err();
        assert!(matches!(e, AttrError::OnodeFull { .. }), "{e}");
        assert_eq!(
            o.attrs.len(),
            1,
            "a refused attribute leaves the onode as it was"
        );
    }

    #[test]
    fn damage_is_detected_not_panicked_on() {
        let o = Onode::new(Oid::new(1, 2), 0);
        let mut buf = Vec::new();
        o.encode(&mut buf).unwrap();
        for i in 0..buf.len() {
            let mut b = buf.clone();
            b[i] ^= 0x40;
            assert!(
                Onode::decode(&b).is_err(),
                "flip at byte {i} went unnoticed"
            );
        }
        for n in 0..buf.len() {
            assert!(Onode::decode(&buf[..n]).is_err());
        }
    }

    #[test]
    fn a_recorded_creation_takes_version_4_with_or_without_encryption() {
        let (mut o, plain) = named_onode();
        o.created_seq = 0x0102_0304_0506;
        for key in [None, Some([0x5A; WRAPPED_KEY_BYTES])] {
            o.wrapped_key = key;
            let mut buf = Vec::new();
            o.encode(&mut buf).unwrap();
            assert_eq!(buf[1], 4);
            let crypt = if key.is_some() { CRYPT_BYTES } else { 0 };
            assert_eq!(
                buf.len(),
                plain.len() + SERVICES_BYTES + CREATED_BYTES + crypt
            );
            assert_eq!(buf.len(), o.encoded_len());
            let (back, used) = Onode::decode(&buf).unwrap();
            assert_eq!((back, used), (o.clone(), buf.len()));
            // The encryption flag below version 4, and version 4 without its number, are
            // damage.
            let mut zero = buf.clone();
            zero[FIXED_BYTES..FIXED_BYTES + CREATED_BYTES].fill(0);
            reseal(&mut zero);
            assert!(Onode::decode(&zero).is_err());
            let mut flagged = plain.clone();
            flagged[2] |= FLAG_ENCRYPTED;
            reseal(&mut flagged);
            assert!(Onode::decode(&flagged).is_err());
        }
    }
}
