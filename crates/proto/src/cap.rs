//! Capabilities after T10 OSD's CAPKEY method.
//!
//! Key hierarchy: a 32-byte master key (known to the target and the security manager only)
//! derives one working key per (partition, key version); a capability's *capability key* is
//! HMAC-SHA256(working key, capability bytes). The security manager (`ossd cap`) hands a client
//! the capability and its capability key; the client proves possession of the key by sending,
//! with each request, HMAC-SHA256(capability key, header + body). The target recomputes the
//! capability key from the capability bytes it received, so it keeps no per-client state, and
//! any change to the capability or the request changes the integrity value. Bumping a
//! partition's key version revokes every capability issued under older versions.

use hmac::{Hmac, Mac};
use sha2::Sha256;

use crate::codec::{ProtoError, Reader};
use osd::{ObjectId, Oid, PartitionId};

type HmacSha256 = Hmac<Sha256>;

/// Bytes in an encoded capability.
pub const CAPABILITY_LEN: usize = 32;
/// Bytes in an integrity value (HMAC-SHA256).
pub const MAC_LEN: usize = 32;
/// Bytes in a master key.
pub const KEY_LEN: usize = 32;

/// Allowed operations, a bitmask.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct Ops(pub u16);

impl Ops {
    /// READ.
    pub const READ: Ops = Ops(1 << 0);
    /// WRITE, APPEND and TRUNCATE.
    pub const WRITE: Ops = Ops(1 << 1);
    /// CREATE.
    pub const CREATE: Ops = Ops(1 << 2);
    /// REMOVE.
    pub const REMOVE: Ops = Ops(1 << 3);
    /// GET ATTRIBUTES.
    pub const GET_ATTR: Ops = Ops(1 << 4);
    /// SET ATTRIBUTES.
    pub const SET_ATTR: Ops = Ops(1 << 5);
    /// LIST and LIST PARTITIONS.
    pub const LIST: Ops = Ops(1 << 6);
    /// FLUSH.
    pub const FLUSH: Ops = Ops(1 << 7);
    /// Create and remove partitions, bump key versions.
    pub const PARTITION_ADMIN: Ops = Ops(1 << 8);
    /// Every operation.
    pub const ALL: Ops = Ops((1 << 9) - 1);

    const NAMES: [(&'static str, Ops); 9] = [
        ("read", Ops::READ),
        ("write", Ops::WRITE),
        ("create", Ops::CREATE),
        ("remove", Ops::REMOVE),
        ("get-attr", Ops::GET_ATTR),
        ("set-attr", Ops::SET_ATTR),
        ("list", Ops::LIST),
        ("flush", Ops::FLUSH),
        ("partition-admin", Ops::PARTITION_ADMIN),
    ];

    /// Whether every operation of `other` is set here.
    pub fn contains(self, other: Ops) -> bool {
        self.0 & other.0 == other.0
    }

    /// The operations of both.
    pub fn union(self, other: Ops) -> Ops {
        Ops(self.0 | other.0)
    }

    /// Parses "read,write,flush" (names as in [`Ops::names`]) or "all".
    pub fn parse(s: &str) -> Result<Ops, CapError> {
        let mut ops = Ops(0);
        for word in s.split(',').map(str::trim).filter(|w| !w.is_empty()) {
            if word == "all" {
                ops = ops.union(Ops::ALL);
                continue;
            }
            match Ops::NAMES.iter().find(|(n, _)| *n == word) {
                Some((_, o)) => ops = ops.union(*o),
                None => {
                    return Err(CapError::UnknownOp {
                        word: word.to_string(),
                    })
                }
            }
        }
        if ops.0 == 0 {
            return Err(CapError::NoOps);
        }
        Ok(ops)
    }

    /// The names of the operations set, comma-separated.
    pub fn names(self) -> String {
        Ops::NAMES
            .iter()
            .filter(|(_, o)| self.contains(*o))
            .map(|(n, _)| *n)
            .collect::<Vec<_>>()
            .join(",")
    }
}

/// Which objects a capability covers.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum CapObject {
    /// Every object of the partition, and the partition itself.
    All,
    /// This object only.
    One(ObjectId),
}

/// A capability: partition (0 = the device: creating and listing partitions, device flush),
/// object or all objects, allowed operations, expiry in unix seconds, and the key version it was
/// issued under.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Capability {
    /// The partition it is for (`Capability::DEVICE`: the device).
    pub partition: PartitionId,
    /// One object or all of the partition.
    pub object: CapObject,
    /// Operations allowed.
    pub ops: Ops,
    /// The partition key version it was issued under (older than the current one: revoked).
    pub key_version: u32,
    /// Expiry, in seconds since the Unix epoch.
    pub expires_unix_s: u64,
}

impl Capability {
    /// The partition id that stands for the device in capabilities.
    pub const DEVICE: PartitionId = PartitionId(0);

    /// 32 bytes, big-endian: partition u64, object u64, scope u8 (0 one object, 1 all), reserved
    /// u8 (0), ops u16, key version u32, expiry u64.
    pub fn encode(&self) -> [u8; CAPABILITY_LEN] {
        let mut b = [0u8; CAPABILITY_LEN];
        let (object, scope) = match self.object {
            CapObject::All => (0, 1),
            CapObject::One(o) => (o.0, 0),
        };
        b[0..8].copy_from_slice(&self.partition.0.to_be_bytes());
        b[8..16].copy_from_slice(&object.to_be_bytes());
        b[16] = scope;
        b[17] = 0;
        b[18..20].copy_from_slice(&self.ops.0.to_be_bytes());
        b[20..24].copy_from_slice(&self.key_version.to_be_bytes());
        b[24..32].copy_from_slice(&self.expires_unix_s.to_be_bytes());
        b
    }

    /// Decodes the 32 bytes [`Capability::encode`] writes (no more, no fewer).
    pub fn decode(b: &[u8]) -> Result<Capability, ProtoError> {
        let mut r = Reader::new(b);
        let c = Capability::read(&mut r)?;
        r.finish("capability")?;
        Ok(c)
    }

    pub(crate) fn read(r: &mut Reader<'_>) -> Result<Capability, ProtoError> {
        let base = r.offset();
        let partition = PartitionId(r.u64("capability partition")?);
        let object = r.u64("capability object")?;
        let scope = r.u8("capability scope")?;
        let reserved = r.u8("capability reserved byte")?;
        let ops = r.u16("capability operations")?;
        let key_version = r.u32("capability key version")?;
        let expires_unix_s = r.u64("capability expiry")?;
        let object = match (scope, object) {
            (0, o) => CapObject::One(ObjectId(o)),
            (1, 0) => CapObject::All,
            (1, o) => {
                return Err(ProtoError::BadValue {
                    what: "capability object (must be 0 with scope all)",
                    value: o,
                    offset: base + 8,
                })
            }
            (s, _) => {
                return Err(ProtoError::BadValue {
                    what: "capability scope",
                    value: s as u64,
                    offset: base + 16,
                })
            }
        };
        if reserved != 0 {
            return Err(ProtoError::BadValue {
                what: "capability reserved byte",
                value: reserved as u64,
                offset: base + 17,
            });
        }
        if ops & !Ops::ALL.0 != 0 {
            return Err(ProtoError::BadValue {
                what: "capability operations",
                value: ops as u64,
                offset: base + 18,
            });
        }
        Ok(Capability {
            partition,
            object,
            ops: Ops(ops),
            key_version,
            expires_unix_s,
        })
    }

    /// Whether the capability covers `oid` (partition and object).
    pub fn covers(&self, oid: Oid) -> bool {
        self.partition == oid.partition
            && match self.object {
                CapObject::All => true,
                CapObject::One(o) => o == oid.object,
            }
    }
}

/// HMAC-SHA256 keyed with `key`.
#[expect(
    clippy::expect_used,
    reason = "HMAC takes keys of any length (RFC 2104): new_from_slice never fails for Hmac"
)]
fn keyed(key: &[u8]) -> HmacSha256 {
    HmacSha256::new_from_slice(key).expect("HMAC takes keys of any length")
}

fn hmac(key: &[u8], parts: &[&[u8]]) -> [u8; 32] {
    let mut m = keyed(key);
    for p in parts {
        m.update(p);
    }
    m.finalize().into_bytes().into()
}

/// The master key (32 bytes). Its `Debug` does not show the key.
#[derive(Clone)]
pub struct MasterKey([u8; KEY_LEN]);

impl std::fmt::Debug for MasterKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("MasterKey(..)")
    }
}

impl MasterKey {
    /// A master key from its 32 bytes.
    pub fn from_bytes(b: [u8; KEY_LEN]) -> MasterKey {
        MasterKey(b)
    }

    /// Parses a key file's contents: 64 hex digits (surrounding white space ignored), or exactly
    /// 32 raw bytes.
    pub fn parse(file: &[u8]) -> Result<MasterKey, CapError> {
        let wrong_length = CapError::KeyFileLength { len: file.len() };
        if let Ok(text) = std::str::from_utf8(file) {
            let t = text.trim();
            if t.len() == 2 * KEY_LEN {
                let v = hex_decode(t).map_err(CapError::KeyFileHex)?;
                // 64 hex digits are 32 bytes: the length error cannot happen.
                return <[u8; KEY_LEN]>::try_from(v)
                    .map(MasterKey)
                    .map_err(|_| wrong_length);
            }
        }
        if let Ok(raw) = <[u8; KEY_LEN]>::try_from(file) {
            return Ok(MasterKey(raw));
        }
        Err(wrong_length)
    }

    /// The key's 32 bytes (for the object store's data-key wrapping, which derives its own
    /// key from them).
    pub fn as_bytes(&self) -> &[u8; KEY_LEN] {
        &self.0
    }

    /// The key file text: 64 lowercase hex digits and a newline.
    pub fn to_file_text(&self) -> String {
        format!("{}\n", hex_encode(&self.0))
    }

    /// The working key of a partition at a key version:
    /// HMAC-SHA256(master, "ossd working key v1" || partition u64 BE || version u32 BE).
    pub fn working_key(&self, partition: PartitionId, key_version: u32) -> WorkingKey {
        WorkingKey(hmac(
            &self.0,
            &[
                b"ossd working key v1",
                &partition.0.to_be_bytes(),
                &key_version.to_be_bytes(),
            ],
        ))
    }

    /// The capability key of `cap`, derived through its partition's working key.
    pub fn capability_key(&self, cap: &Capability) -> CapKey {
        self.working_key(cap.partition, cap.key_version)
            .capability_key(cap)
    }
}

/// A per-partition, per-key-version working key.
#[derive(Clone)]
pub struct WorkingKey([u8; 32]);

impl std::fmt::Debug for WorkingKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("WorkingKey(..)")
    }
}

impl WorkingKey {
    /// HMAC-SHA256(working key, capability bytes).
    pub fn capability_key(&self, cap: &Capability) -> CapKey {
        CapKey(hmac(&self.0, &[&cap.encode()]))
    }
}

/// The secret that goes with one capability; keys the integrity values of requests and replies.
#[derive(Clone, PartialEq, Eq)]
pub struct CapKey(pub [u8; 32]);

impl std::fmt::Debug for CapKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("CapKey(..)")
    }
}

impl CapKey {
    /// HMAC-SHA256 over the concatenation of `parts`.
    pub fn integrity(&self, parts: &[&[u8]]) -> [u8; MAC_LEN] {
        hmac(&self.0, parts)
    }

    /// Checks an integrity value in constant time (`hmac`'s `verify_slice`).
    pub fn verify(&self, parts: &[&[u8]], mac: &[u8]) -> bool {
        let mut m = keyed(&self.0);
        for p in parts {
            m.update(p);
        }
        m.verify_slice(mac).is_ok()
    }

    /// The key as 64 hex digits (what `ossd cap` hands a client).
    pub fn to_hex(&self) -> String {
        hex_encode(&self.0)
    }

    /// Parses 64 hex digits (surrounding white space ignored).
    pub fn from_hex(s: &str) -> Result<CapKey, CapError> {
        let v = hex_decode(s.trim()).map_err(CapError::CapKeyHex)?;
        let a: [u8; 32] = v
            .try_into()
            .map_err(|v: Vec<u8>| CapError::CapKeyLength { len: v.len() })?;
        Ok(CapKey(a))
    }
}

/// Why a string of hex digits did not decode ([`hex_decode`]).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum HexError {
    /// An odd number of digits: the last byte is incomplete.
    #[error("odd number of hex digits ({len})")]
    OddLength {
        /// Characters in the string.
        len: usize,
    },
    /// A pair of characters that is not two hex digits.
    #[error("not a hex digit pair at character {at}")]
    NotHex {
        /// Offset of the pair's first character.
        at: usize,
    },
}

/// Why an operation list, a master key file or a capability key did not parse.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CapError {
    /// A word of an operation list that names no operation ([`Ops::parse`]).
    #[error("unknown operation '{word}'; known: all, {}", Ops::NAMES.map(|(n, _)| n).join(", "))]
    UnknownOp {
        /// The word.
        word: String,
    },
    /// An operation list with no operation in it ([`Ops::parse`]).
    #[error("no operations given")]
    NoOps,
    /// A key file of 64 characters that are not 64 hex digits ([`MasterKey::parse`]).
    #[error("key file: {0}")]
    KeyFileHex(#[source] HexError),
    /// A key file that is neither 64 hex digits nor 32 raw bytes ([`MasterKey::parse`]).
    #[error("key file: expected 64 hex digits or 32 raw bytes, found {len} bytes")]
    KeyFileLength {
        /// Bytes in the file.
        len: usize,
    },
    /// A capability key that is not hex digits ([`CapKey::from_hex`]).
    #[error("capability key: {0}")]
    CapKeyHex(#[source] HexError),
    /// A capability key of the wrong length ([`CapKey::from_hex`]).
    #[error("capability key: {len} bytes, expected 32")]
    CapKeyLength {
        /// Bytes the hex digits decode to.
        len: usize,
    },
}

/// Lower-case hex digits of `b`, two per byte.
pub fn hex_encode(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

/// The bytes of an even number of hex digits (either case).
pub fn hex_decode(s: &str) -> Result<Vec<u8>, HexError> {
    if !s.len().is_multiple_of(2) {
        return Err(HexError::OddLength { len: s.len() });
    }
    s.as_bytes()
        .chunks(2)
        .enumerate()
        .map(|(i, p)| {
            std::str::from_utf8(p)
                .ok()
                .and_then(|p| u8::from_str_radix(p, 16).ok())
                .ok_or(HexError::NotHex { at: 2 * i })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cap() -> Capability {
        Capability {
            partition: PartitionId(0x10000),
            object: CapObject::One(ObjectId(0x20001)),
            ops: Ops::READ.union(Ops::WRITE),
            key_version: 3,
            expires_unix_s: 1_900_000_000,
        }
    }

    #[test]
    fn capability_round_trips_and_rejects_bad_fields() {
        let c = cap();
        assert_eq!(Capability::decode(&c.encode()), Ok(c));
        let all = Capability {
            object: CapObject::All,
            ..c
        };
        assert_eq!(Capability::decode(&all.encode()), Ok(all));
        let mut b = c.encode();
        b[16] = 7;
        assert!(matches!(
            Capability::decode(&b),
            Err(ProtoError::BadValue {
                what: "capability scope",
                offset: 16,
                ..
            })
        ));
        let mut b = c.encode();
        b[17] = 1;
        assert!(Capability::decode(&b).is_err());
        let mut b = c.encode();
        b[18] = 0xff;
        assert!(Capability::decode(&b).is_err());
        assert!(matches!(
            Capability::decode(&b[..31]),
            Err(ProtoError::Truncated { .. })
        ));
    }

    #[test]
    fn ops_parse_and_name() {
        assert_eq!(
            Ops::parse("read, write").unwrap(),
            Ops::READ.union(Ops::WRITE)
        );
        assert_eq!(Ops::parse("all").unwrap(), Ops::ALL);
        assert_eq!(Ops::ALL.names().split(',').count(), 9);
        let e = Ops::parse("read,fly").unwrap_err();
        assert_eq!(e, CapError::UnknownOp { word: "fly".into() });
        assert!(e.to_string().contains("known: all, read, write"), "{e}");
        assert_eq!(Ops::parse(""), Err(CapError::NoOps));
    }

    #[test]
    fn keys_separate_partitions_versions_and_capabilities() {
        let m = MasterKey::from_bytes([7; 32]);
        let c = cap();
        let k = m.capability_key(&c);
        assert_ne!(
            k,
            m.capability_key(&Capability {
                key_version: 4,
                ..c
            })
        );
        assert_ne!(
            k,
            m.capability_key(&Capability {
                partition: PartitionId(0x10001),
                ..c
            })
        );
        assert_ne!(k, m.capability_key(&Capability { ops: Ops::ALL, ..c }));
        assert_ne!(k, MasterKey::from_bytes([8; 32]).capability_key(&c));
        let mac = k.integrity(&[b"head", b"body"]);
        assert!(k.verify(&[b"headbody"], &mac));
        let mut bad = mac;
        bad[31] ^= 1;
        assert!(!k.verify(&[b"headbody"], &bad));
        assert!(!k.verify(&[b"headbody"], &mac[..31]));
    }

    #[test]
    fn key_file_parsing() {
        let m = MasterKey::from_bytes([0xab; 32]);
        let text = m.to_file_text();
        let back = MasterKey::parse(text.as_bytes()).unwrap();
        assert_eq!(back.0, m.0);
        assert_eq!(MasterKey::parse(&[1u8; 32]).unwrap().0, [1u8; 32]);
        assert_eq!(
            MasterKey::parse(b"abc").unwrap_err(),
            CapError::KeyFileLength { len: 3 }
        );
        let mut bad = text.clone().into_bytes();
        bad[5] = b'z';
        assert_eq!(
            MasterKey::parse(&bad).unwrap_err(),
            CapError::KeyFileHex(HexError::NotHex { at: 4 })
        );
        assert_eq!(
            CapKey::from_hex("00ff"),
            Err(CapError::CapKeyLength { len: 2 })
        );
        assert_eq!(
            CapKey::from_hex("0f0"),
            Err(CapError::CapKeyHex(HexError::OddLength { len: 3 }))
        );
    }
}
