//! The directory format: a directory object is a linear-hashing table (Litwin) of fixed-size
//! bucket blocks holding its entries, so a lookup reads one bucket, whatever the directory's
//! size (OSCM-11 IV: "a hashed directory ... helps to reduce lookup time when there are many
//! subdirectories or files under one directory").
//!
//! The number of buckets is the only state of the table, and it is the object's logical length
//! divided by the block size: no header to keep in step. A directory of one bucket is stored
//! short (the object is as long as its entries), so small directories stay small objects that
//! the store can pack; from two buckets on, every bucket is a whole block, so a bucket write is
//! one aligned write of its own.
//!
//! Growing by one bucket splits bucket `split_source(n)` (round robin, as linear hashing does)
//! into itself and the new bucket `n`. Directories never shrink (as in ext4): removals leave
//! buckets emptier.
//!
//! Pure functions only; the directory operations on the store are in `fs.rs`.

use vfs::le;
use vfs::{FileKind, FsError, Ino};

use crate::layout::{kind_code, kind_from_code, valid_ino};

/// magic (2), entry count (2), entry bytes (2), reserved (2), CRC of the rest (4).
pub const BUCKET_HEADER_BYTES: usize = 12;
/// hash (4), inode (8), kind (1), name length (1); then the name.
pub const ENTRY_FIXED_BYTES: usize = 14;
/// A directory stops growing here (a runaway split is reported as no space, not looped on).
pub const MAX_BUCKETS: u64 = 1 << 20;
const BUCKET_MAGIC: &[u8; 2] = b"OD";

/// The hash of a name that places it in a bucket: FNV-1a, then a 64-bit finalizer so that the
/// low bits linear hashing uses are well mixed. Fixed forever: it is part of the format.
pub fn name_hash(name: &str) -> u32 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for &b in name.as_bytes() {
        h ^= b as u64;
        h = h.wrapping_mul(0x100_0000_01b3);
    }
    h ^= h >> 33;
    h = h.wrapping_mul(0xff51_afd7_ed55_8ccd);
    h ^= h >> 33;
    h = h.wrapping_mul(0xc4ce_b9fe_1a85_ec53);
    h ^= h >> 33;
    h as u32
}

/// 2^floor(log2 n), for n >= 1.
fn level_low(buckets: u64) -> u64 {
    1 << (63 - buckets.leading_zeros())
}

/// The bucket a hash lives in, in a table of `buckets` buckets (linear hashing: the hash modulo
/// 2^level, or modulo 2^(level+1) for buckets already split in this round).
pub fn bucket_of(hash: u32, buckets: u64) -> u64 {
    if buckets <= 1 {
        return 0;
    }
    let low = level_low(buckets);
    let b = hash as u64 & (low - 1);
    if b < buckets - low {
        hash as u64 & (2 * low - 1)
    } else {
        b
    }
}

/// The bucket whose entries are shared with the new bucket `buckets` when the table grows.
pub fn split_source(buckets: u64) -> u64 {
    buckets - level_low(buckets)
}

/// The number of buckets of a directory object `length` bytes long.
pub fn bucket_count(length: u64, block: u64, dir: Ino) -> Result<u64, FsError> {
    if length <= block {
        Ok(1)
    } else if length.is_multiple_of(block) && length / block <= MAX_BUCKETS {
        Ok(length / block)
    } else {
        Err(FsError::Corrupted(format!(
            "directory {dir}: length {length} is not a whole number of {block}-byte buckets"
        )))
    }
}

/// A directory entry as a bucket holds it. With `dirent_objects` the name is in the entry's
/// own object and `name` is empty here.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Entry {
    /// The name's hash ([`name_hash`]), which places it in its bucket.
    pub hash: u32,
    /// The inode it names.
    pub ino: Ino,
    /// The inode's kind.
    pub kind: FileKind,
    /// The name (empty with `dirent_objects`).
    pub name: String,
}

impl Entry {
    /// Bytes the entry takes in a bucket.
    pub fn encoded_len(&self) -> usize {
        ENTRY_FIXED_BYTES + self.name.len()
    }
}

/// What an entry named `name` adds to its directory's size, in either mode (the size `stat`
/// reports does not depend on where the names are kept).
pub fn logical_entry_bytes(name: &str) -> u64 {
    (ENTRY_FIXED_BYTES + name.len()) as u64
}

/// One bucket's entries.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Bucket {
    /// The entries, in the order the bucket keeps them.
    pub entries: Vec<Entry>,
}

impl Bucket {
    /// Bytes the bucket takes encoded, header included.
    pub fn encoded_len(&self) -> usize {
        BUCKET_HEADER_BYTES + self.entries.iter().map(Entry::encoded_len).sum::<usize>()
    }

    /// Whether `extra` more entry bytes fit in a block of `block` bytes.
    pub fn fits(&self, extra: usize, block: usize) -> bool {
        self.encoded_len() + extra <= block
    }

    /// The bucket's bytes: header (with the CRC of the entries) and entries; not padded to the
    /// block.
    pub fn encode(&self) -> Vec<u8> {
        let mut v = Vec::with_capacity(self.encoded_len());
        let used = self.encoded_len() - BUCKET_HEADER_BYTES;
        v.extend_from_slice(BUCKET_MAGIC);
        v.extend_from_slice(&(self.entries.len() as u16).to_le_bytes());
        v.extend_from_slice(&(used as u16).to_le_bytes());
        v.extend_from_slice(&[0, 0, 0, 0, 0, 0]);
        for e in &self.entries {
            v.extend_from_slice(&e.hash.to_le_bytes());
            v.extend_from_slice(&e.ino.to_le_bytes());
            v.push(kind_code(e.kind));
            v.push(e.name.len() as u8);
            v.extend_from_slice(e.name.as_bytes());
        }
        let crc = bucket_crc(&v[..8], &v[BUCKET_HEADER_BYTES..]);
        v[8..12].copy_from_slice(&crc.to_le_bytes());
        v
    }

    /// Decodes a bucket block (bytes after the entries are ignored; an empty block is an empty
    /// bucket: a directory that was never written). `names` says whether entries carry names.
    pub fn decode(b: &[u8], names: bool, at: &dyn Fn() -> String) -> Result<Bucket, FsError> {
        let bad = |why: BucketError| FsError::Corrupted(format!("{}: {why}", at()));
        if b.is_empty() {
            return Ok(Bucket::default());
        }
        if b.len() < BUCKET_HEADER_BYTES || &b[..2] != BUCKET_MAGIC {
            return Err(bad(BucketError::NotBucket));
        }
        let count = u16::from_le_bytes([b[2], b[3]]) as usize;
        let used = u16::from_le_bytes([b[4], b[5]]) as usize;
        let Some(body) = b.get(BUCKET_HEADER_BYTES..BUCKET_HEADER_BYTES + used) else {
            return Err(bad(BucketError::Overrun { used }));
        };
        if bucket_crc(&b[..8], body).to_le_bytes() != b[8..12] {
            return Err(bad(BucketError::Checksum));
        }
        let mut entries = Vec::with_capacity(count);
        let mut rest = body;
        while !rest.is_empty() {
            let (e, n) = decode_entry(rest, names).map_err(&bad)?;
            entries.push(e);
            rest = &rest[n..];
        }
        if entries.len() != count {
            return Err(bad(BucketError::Count {
                found: entries.len(),
                header: count,
            }));
        }
        Ok(Bucket { entries })
    }
}

fn bucket_crc(header: &[u8], body: &[u8]) -> u32 {
    crc32c::crc32c_append(crc32c::crc32c(header), body)
}

/// Why a bucket block did not decode (the block is untrusted); [`Bucket::decode`] reports it
/// as corruption, prefixed with where the block was read.
#[derive(Debug, thiserror::Error)]
pub enum BucketError {
    /// The block does not start with the bucket magic, or is shorter than a header.
    #[error("not a directory bucket")]
    NotBucket,
    /// The header's entry bytes run past the block.
    #[error("{used} entry bytes overrun the block")]
    Overrun {
        /// Entry bytes the header claims.
        used: usize,
    },
    /// The CRC does not match the header and the entries.
    #[error("checksum mismatch")]
    Checksum,
    /// The entries found are not as many as the header says.
    #[error("{found} entries, header says {header}")]
    Count {
        /// Entries decoded.
        found: usize,
        /// The header's count.
        header: usize,
    },
    /// Fewer bytes left than an entry's fixed part.
    #[error("truncated entry")]
    TruncatedEntry,
    /// A field read past the end of the entry bytes.
    #[error(transparent)]
    Truncated(#[from] le::Truncated),
    /// An entry kind code that names no file kind.
    #[error("bad entry kind {code}")]
    Kind {
        /// The code.
        code: u8,
    },
    /// An entry's name runs past the entry bytes.
    #[error("truncated name")]
    TruncatedName,
    /// An entry's name is not UTF-8.
    #[error("name is not UTF-8")]
    NameNotUtf8,
    /// An entry points to an inode number no inode can have.
    #[error("entry points to inode {ino}")]
    Inode {
        /// The inode number.
        ino: u64,
    },
    /// An entry's name is not a valid file name.
    #[error(transparent)]
    Name(FsError),
    /// An entry's stored hash is not its name's.
    #[error("entry {name:?} has the wrong hash")]
    Hash {
        /// The name.
        name: String,
    },
    /// A named entry in a directory whose entries carry no names.
    #[error("a named entry in a directory of entry objects")]
    Named,
}

/// One entry and the bytes it took.
fn decode_entry(b: &[u8], names: bool) -> Result<(Entry, usize), BucketError> {
    if b.len() < ENTRY_FIXED_BYTES {
        return Err(BucketError::TruncatedEntry);
    }
    let hash = le::u32_at(b, 0)?;
    let ino = le::u64_at(b, 4)?;
    let kind = kind_from_code(b[12]).ok_or(BucketError::Kind { code: b[12] })?;
    let n = ENTRY_FIXED_BYTES + b[13] as usize;
    let raw = b
        .get(ENTRY_FIXED_BYTES..n)
        .ok_or(BucketError::TruncatedName)?;
    let name = std::str::from_utf8(raw)
        .map_err(|_| BucketError::NameNotUtf8)?
        .to_string();
    if !valid_ino(ino) {
        return Err(BucketError::Inode { ino });
    }
    if names {
        vfs::oracle::check_name(&name).map_err(BucketError::Name)?;
        if name_hash(&name) != hash {
            return Err(BucketError::Hash { name });
        }
    } else if !name.is_empty() {
        return Err(BucketError::Named);
    }
    Ok((
        Entry {
            hash,
            ino,
            kind,
            name,
        },
        n,
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(name: &str, ino: Ino) -> Entry {
        Entry {
            hash: name_hash(name),
            ino,
            kind: FileKind::File,
            name: name.into(),
        }
    }

    #[test]
    fn linear_hashing_splits_one_bucket_at_a_time() {
        // Growing from n to n + 1 buckets moves entries only between the split source and the
        // new bucket.
        for n in 1..200u64 {
            let s = split_source(n);
            for h in (0..5000u32).map(|i| name_hash(&i.to_string())) {
                let before = bucket_of(h, n);
                let after = bucket_of(h, n + 1);
                assert!(before < n && after <= n);
                if before != after {
                    assert_eq!((before, after), (s, n), "n={n} h={h:#x}");
                }
            }
        }
    }

    #[test]
    fn bucket_round_trip_and_damage() {
        let b = Bucket {
            entries: vec![entry("a", 2), entry("hello.txt", 3)],
        };
        let bytes = b.encode();
        assert_eq!(bytes.len(), b.encoded_len());
        let at = || "test bucket".to_string();
        let mut padded = bytes.clone();
        padded.resize(512, 0);
        assert_eq!(Bucket::decode(&padded, true, &at).unwrap(), b);
        assert_eq!(Bucket::decode(&[], true, &at).unwrap(), Bucket::default());
        for i in 0..bytes.len() {
            let mut d = bytes.clone();
            d[i] ^= 0x40;
            assert!(
                matches!(Bucket::decode(&d, true, &at), Err(FsError::Corrupted(_))),
                "flip at {i}"
            );
        }
        assert!(Bucket::decode(&bytes[..5], true, &at).is_err());
        assert!(Bucket::decode(&bytes, false, &at).is_err());
    }

    #[test]
    fn bucket_count_follows_length() {
        assert_eq!(bucket_count(0, 4096, 1).unwrap(), 1);
        assert_eq!(bucket_count(100, 4096, 1).unwrap(), 1);
        assert_eq!(bucket_count(4096, 4096, 1).unwrap(), 1);
        assert_eq!(bucket_count(3 * 4096, 4096, 1).unwrap(), 3);
        assert!(bucket_count(4097, 4096, 1).is_err());
    }
}
