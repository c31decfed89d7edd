//! Where OFS keeps things in the object store: object ids, the user attributes it sets, and the
//! small records (inode, directory size, superblock, directory entry object) with their
//! encodings. Every record carries a CRC: bytes read back from the store are untrusted, and a
//! damaged record is [`FsError::Corrupted`], never a panic.

use osd::id::FIRST_USER_ID;
use osd::{Attr, ObjectId, Oid, PartitionId};
use vfs::le;
use vfs::{FileKind, FsError, Ino, Owner, Special};

/// The one partition OFS formats and lives in.
pub const PARTITION: PartitionId = PartitionId(FIRST_USER_ID);

/// The data object of inode `ino` is `ino + OBJECT_OFFSET` (OSSD-13 V-B, as in EXOFS).
pub const OBJECT_OFFSET: u64 = FIRST_USER_ID;
/// Inode numbers stay below this, so the ranges below never meet the data objects.
pub const INO_LIMIT: u64 = 1 << 48;
/// The inode object of `ino` (option `inode_objects`, OSCM-11 IV) is `INODE_OBJECT_BASE + ino`.
pub const INODE_OBJECT_BASE: u64 = 1 << 49;
/// The directory entry object of `ino` (option `dirent_objects`, OSCM-11 III-A) is
/// `DIRENT_OBJECT_BASE + ino`: a file has exactly one name, so its entry can be named after it.
pub const DIRENT_OBJECT_BASE: u64 = 2 << 49;

/// The inode record of a file, on its data object (unless `inode_objects`).
pub const ATTR_INODE: Attr = Attr::User(0x1000);
/// A directory's entry count and entry bytes, on its data object.
pub const ATTR_DIR_SIZE: Attr = Attr::User(0x1001);
/// The superblock, on the root directory's data object.
pub const ATTR_SUPER: Attr = Attr::User(0x1002);
/// Extended attributes (`user.*`) of an inode, one per user attribute of its data object, in
/// consecutive ids from here (the first id not set ends the list).
pub const ATTR_XATTR_FIRST: u16 = 0x1100;
/// At most this many extended attributes per inode (the byte budget runs out first).
pub const XATTR_SLOTS: u16 = 64;

/// The bytes of an extended attribute's slot: name length (1), name, value.
pub fn xattr_slot_bytes(name: &str, value: &[u8]) -> Vec<u8> {
    let mut b = Vec::with_capacity(1 + name.len() + value.len());
    b.push(name.len() as u8);
    b.extend_from_slice(name.as_bytes());
    b.extend_from_slice(value);
    b
}
/// The onode bytes an inode's extended attributes may take, each `3 + 1 + name + value` (the
/// store's attribute header, the name length, the name and the value): what is left of the
/// 256-byte onode (162 bytes for attributes) after OFS's own worst case, a version 2 inode
/// record, a directory size and the superblock (35 + 23 + 27 bytes). So an extended attribute
/// can never crowd out the file system's own records.
pub const XATTR_BYTES_MAX: usize = 77;

/// Which of OFS's objects an object id is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ObjectRole {
    /// The data object of an inode.
    Data(Ino),
    /// The inode object of an inode (`inode_objects`).
    Inode(Ino),
    /// The directory entry object of an inode (`dirent_objects`).
    Dirent(Ino),
    /// None of OFS's objects.
    Unknown,
}

/// The data object of `ino`.
pub fn data_oid(ino: Ino) -> Oid {
    oid(OBJECT_OFFSET + ino)
}

/// The inode object of `ino`.
pub fn inode_oid(ino: Ino) -> Oid {
    oid(INODE_OBJECT_BASE + ino)
}

/// The directory entry object of `ino`.
pub fn dirent_oid(ino: Ino) -> Oid {
    oid(DIRENT_OBJECT_BASE + ino)
}

fn oid(object: u64) -> Oid {
    Oid {
        partition: PARTITION,
        object: ObjectId(object),
    }
}

/// What an object id of the partition stands for.
pub fn role(object: ObjectId) -> ObjectRole {
    let id = object.0;
    let ino_of = |base: u64| {
        id.checked_sub(base)
            .filter(|&i| i > 0 && i < INO_LIMIT)
            .map(|i| i as Ino)
    };
    if let Some(i) = ino_of(DIRENT_OBJECT_BASE) {
        ObjectRole::Dirent(i)
    } else if let Some(i) = ino_of(INODE_OBJECT_BASE) {
        ObjectRole::Inode(i)
    } else if let Some(i) = ino_of(OBJECT_OFFSET) {
        ObjectRole::Data(i)
    } else {
        ObjectRole::Unknown
    }
}

/// Whether `ino` can name an inode at all (callers hand arbitrary numbers in).
pub fn valid_ino(ino: Ino) -> bool {
    ino > 0 && ino < INO_LIMIT
}

fn corrupted(what: &str, ino: Ino, why: &str) -> FsError {
    FsError::Corrupted(format!("{what} of inode {ino}: {why}"))
}

fn with_crc(mut v: Vec<u8>) -> Vec<u8> {
    let c = crc32c::crc32c(&v);
    v.extend_from_slice(&c.to_le_bytes());
    v
}

/// The body of a record whose last four bytes are its CRC, if they match.
fn check_crc(b: &[u8]) -> Option<&[u8]> {
    let (body, crc) = b.split_at(b.len().checked_sub(4)?);
    (crc32c::crc32c(body).to_le_bytes() == crc).then_some(body)
}

/// The byte a record stores for a file kind: 1 file, 2 directory, 3 symbolic link.
pub fn kind_code(k: FileKind) -> u8 {
    match k {
        FileKind::File => 1,
        FileKind::Dir => 2,
        FileKind::Symlink => 3,
        FileKind::Special(Special::Fifo) => 4,
        FileKind::Special(Special::Socket) => 5,
        FileKind::Special(Special::CharDevice) => 6,
        FileKind::Special(Special::BlockDevice) => 7,
    }
}

/// The file kind of a record's byte; `None` for an unknown one.
pub fn kind_from_code(c: u8) -> Option<FileKind> {
    match c {
        1 => Some(FileKind::File),
        2 => Some(FileKind::Dir),
        3 => Some(FileKind::Symlink),
        4 => Some(FileKind::Special(Special::Fifo)),
        5 => Some(FileKind::Special(Special::Socket)),
        6 => Some(FileKind::Special(Special::CharDevice)),
        7 => Some(FileKind::Special(Special::BlockDevice)),
        _ => None,
    }
}

const INODE_MAGIC: &[u8; 4] = b"OFSI";
/// A version 1 inode record: kind and parent only.
pub const INODE_RECORD_V1_BYTES: usize = 20;
/// A version 2 inode record: also permissions, owner and link count.
pub const INODE_RECORD_V2_BYTES: usize = 32;

/// What OFS keeps per inode besides what the object store keeps anyway (length, times): the
/// kind, the parent directory, permissions, owner and link count.
///
/// `parent` is the directory that holds a directory (checked by the tree walk: it decides which
/// of two entries a crash during a rename leaves); for files and symbolic links, which may have
/// several names, it is the directory they were created in, and not checked.
///
/// Encoded as version 1 (20 bytes, as before POSIX attributes existed) when the attributes are
/// the defaults ([`vfs::Owner::default_for`], one link, not a symbolic link), so that the lab's
/// files, made without an owner, cost exactly what they did; as version 2 (32 bytes) otherwise.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct InodeRecord {
    /// File, directory or symbolic link.
    pub kind: FileKind,
    /// The parent directory (see above).
    pub parent: Ino,
    /// Permissions, user and group.
    pub owner: Owner,
    /// Link count (names of the inode).
    pub nlink: u32,
}

impl InodeRecord {
    /// A new inode's record: one link.
    pub fn new(kind: FileKind, parent: Ino, owner: Owner) -> InodeRecord {
        InodeRecord {
            kind,
            parent,
            owner,
            nlink: 1,
        }
    }

    /// Version 1: magic, version, kind, two reserved bytes, parent, CRC. Version 2: magic,
    /// version, kind, permissions (2), parent, uid, gid, link count, CRC.
    pub fn encode(&self) -> Vec<u8> {
        let plain = matches!(self.kind, FileKind::File | FileKind::Dir)
            && self.nlink == 1
            && self.owner == Owner::default_for(self.kind);
        let mut v = Vec::with_capacity(INODE_RECORD_V2_BYTES);
        v.extend_from_slice(INODE_MAGIC);
        if plain {
            v.extend_from_slice(&[1, kind_code(self.kind), 0, 0]);
            v.extend_from_slice(&self.parent.to_le_bytes());
        } else {
            v.extend_from_slice(&[2, kind_code(self.kind)]);
            v.extend_from_slice(&((self.owner.perm & 0o7777) as u16).to_le_bytes());
            v.extend_from_slice(&self.parent.to_le_bytes());
            v.extend_from_slice(&self.owner.uid.to_le_bytes());
            v.extend_from_slice(&self.owner.gid.to_le_bytes());
            v.extend_from_slice(&self.nlink.to_le_bytes());
        }
        with_crc(v)
    }

    /// Decodes either version; a damaged record of inode `ino` is [`FsError::Corrupted`].
    pub fn decode(b: &[u8], ino: Ino) -> Result<InodeRecord, FsError> {
        let bad = |why: &str| corrupted("inode record", ino, why);
        if b.len() != INODE_RECORD_V1_BYTES && b.len() != INODE_RECORD_V2_BYTES {
            return Err(bad(&format!("{} bytes", b.len())));
        }
        let body = check_crc(b).ok_or_else(|| bad("checksum mismatch"))?;
        let version = body[4];
        let v1 = b.len() == INODE_RECORD_V1_BYTES;
        if &body[..4] != INODE_MAGIC || version != if v1 { 1 } else { 2 } {
            return Err(bad("bad magic or version"));
        }
        let kind = kind_from_code(body[5]).ok_or_else(|| bad("bad kind"))?;
        let u32_at = |i: usize| le::u32_at(body, i);
        let parent = le::u64_at(body, 8)?;
        if v1 {
            if !matches!(kind, FileKind::File | FileKind::Dir) {
                return Err(bad("a version 1 record of a symbolic link or special file"));
            }
            return Ok(InodeRecord::new(kind, parent, Owner::default_for(kind)));
        }
        let perm = u16::from_le_bytes([body[6], body[7]]) as u32;
        let nlink = u32_at(24)?;
        if perm > 0o7777 || nlink == 0 {
            return Err(bad("bad permissions or link count"));
        }
        Ok(InodeRecord {
            kind,
            parent,
            owner: Owner {
                perm,
                uid: u32_at(16)?,
                gid: u32_at(20)?,
            },
            nlink,
        })
    }
}

/// A directory's entry count and the bytes its entries occupy (what `stat` reports as a
/// directory's size), kept beside the entries so `rmdir` and `stat` need not read them.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct DirSize {
    /// Entries in the directory.
    pub entries: u64,
    /// Bytes the entries occupy ([`crate::dir::logical_entry_bytes`] each).
    pub bytes: u64,
}

impl DirSize {
    /// Entry count, bytes, CRC (20 bytes).
    pub fn encode(&self) -> Vec<u8> {
        let mut v = Vec::with_capacity(20);
        v.extend_from_slice(&self.entries.to_le_bytes());
        v.extend_from_slice(&self.bytes.to_le_bytes());
        with_crc(v)
    }

    /// Decodes the record of directory `ino`; a damaged one is [`FsError::Corrupted`].
    pub fn decode(b: &[u8], ino: Ino) -> Result<DirSize, FsError> {
        let body = (b.len() == 20)
            .then(|| check_crc(b))
            .flatten()
            .ok_or_else(|| corrupted("directory size", ino, "bad record"))?;
        Ok(DirSize {
            entries: le::u64_at(body, 0)?,
            bytes: le::u64_at(body, 8)?,
        })
    }
}

const SUPER_MAGIC: &[u8; 4] = b"OFSB";
/// Version 2 added inode record version 2, symbolic links, hard links and extended
/// attributes; version 3 special files (kinds 4 to 7). An older file system mounts and is
/// marked version 3 (it holds only records version 3 reads).
const SUPER_VERSION: u16 = 3;
const FLAG_INODE_OBJECTS: u16 = 1;
const FLAG_EMBED_INODES: u16 = 2;
const FLAG_DIRENT_OBJECTS: u16 = 4;
const FLAG_CLEAN: u16 = 8;

/// The superblock: the layout OFS was formatted with, whether it was unmounted cleanly, and the
/// next inode number (valid only when clean; otherwise mount recomputes it).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Superblock {
    /// Formatted with `inode_objects`.
    pub inode_objects: bool,
    /// Formatted with `embed_inodes`.
    pub embed_inodes: bool,
    /// Formatted with `dirent_objects`.
    pub dirent_objects: bool,
    /// The directory bucket size in bytes, as formatted.
    pub dir_block_bytes: u32,
    /// Unmounted cleanly (cleared at mount, set at unmount).
    pub clean: bool,
    /// The next inode number to hand out (valid only when clean).
    pub next_ino: Ino,
}

impl Superblock {
    /// magic, version, flags, directory block bytes, next inode, CRC.
    pub fn encode(&self) -> Vec<u8> {
        let flags = [
            (self.inode_objects, FLAG_INODE_OBJECTS),
            (self.embed_inodes, FLAG_EMBED_INODES),
            (self.dirent_objects, FLAG_DIRENT_OBJECTS),
            (self.clean, FLAG_CLEAN),
        ]
        .iter()
        .filter(|(on, _)| *on)
        .fold(0u16, |f, (_, b)| f | b);
        let mut v = Vec::with_capacity(24);
        v.extend_from_slice(SUPER_MAGIC);
        v.extend_from_slice(&SUPER_VERSION.to_le_bytes());
        v.extend_from_slice(&flags.to_le_bytes());
        v.extend_from_slice(&self.dir_block_bytes.to_le_bytes());
        v.extend_from_slice(&self.next_ino.to_le_bytes());
        with_crc(v)
    }

    /// Decodes a superblock of version 1 or 2; anything else is [`FsError::Corrupted`].
    pub fn decode(b: &[u8]) -> Result<Superblock, FsError> {
        let bad = |why: String| FsError::Corrupted(format!("superblock: {why}"));
        let body = (b.len() == 24)
            .then(|| check_crc(b))
            .flatten()
            .ok_or_else(|| bad("bad record".into()))?;
        if &body[..4] != SUPER_MAGIC {
            return Err(bad("not an OFS superblock".into()));
        }
        let version = u16::from_le_bytes([body[4], body[5]]);
        if !(1..=SUPER_VERSION).contains(&version) {
            return Err(bad(format!(
                "version {version}; this OFS reads version {SUPER_VERSION}"
            )));
        }
        let flags = u16::from_le_bytes([body[6], body[7]]);
        Ok(Superblock {
            inode_objects: flags & FLAG_INODE_OBJECTS != 0,
            embed_inodes: flags & FLAG_EMBED_INODES != 0,
            dirent_objects: flags & FLAG_DIRENT_OBJECTS != 0,
            clean: flags & FLAG_CLEAN != 0,
            dir_block_bytes: le::u32_at(body, 8)?,
            next_ino: le::u64_at(body, 12)?,
        })
    }
}

/// A directory entry kept as an object of its own (option `dirent_objects`): the name and the
/// directory it is in. The directory's hashed buckets then hold only (hash, inode, kind).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DirentRecord {
    /// The directory holding the entry.
    pub parent: Ino,
    /// The inode's kind.
    pub kind: FileKind,
    /// The name.
    pub name: String,
}

impl DirentRecord {
    /// parent, kind, name length, name, CRC.
    pub fn encode(&self) -> Vec<u8> {
        let mut v = Vec::with_capacity(14 + self.name.len());
        v.extend_from_slice(&self.parent.to_le_bytes());
        v.push(kind_code(self.kind));
        v.push(self.name.len() as u8);
        v.extend_from_slice(self.name.as_bytes());
        with_crc(v)
    }

    /// Decodes the entry object of inode `ino`; a damaged one is [`FsError::Corrupted`].
    pub fn decode(b: &[u8], ino: Ino) -> Result<DirentRecord, FsError> {
        let bad = |why: &str| corrupted("directory entry object", ino, why);
        let body = check_crc(b).ok_or_else(|| bad("checksum mismatch"))?;
        if body.len() < 10 || body.len() != 10 + body[9] as usize {
            return Err(bad("bad length"));
        }
        let name = std::str::from_utf8(&body[10..])
            .map_err(|_| bad("name is not UTF-8"))?
            .to_string();
        vfs::oracle::check_name(&name).map_err(|_| bad("bad name"))?;
        Ok(DirentRecord {
            parent: le::u64_at(body, 0)?,
            kind: kind_from_code(body[8]).ok_or_else(|| bad("bad kind"))?,
            name,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn records_round_trip_and_refuse_damage() {
        let i = InodeRecord::new(FileKind::Dir, 7, Owner::default_for(FileKind::Dir));
        let mut b = i.encode();
        assert_eq!(
            b.len(),
            INODE_RECORD_V1_BYTES,
            "default attributes: version 1"
        );
        assert_eq!(InodeRecord::decode(&b, 3).unwrap(), i);
        b[9] ^= 1;
        assert!(matches!(
            InodeRecord::decode(&b, 3),
            Err(FsError::Corrupted(_))
        ));
        let owned = InodeRecord {
            kind: FileKind::Symlink,
            parent: 9,
            owner: Owner {
                perm: 0o4755,
                uid: 1000,
                gid: 100,
            },
            nlink: 3,
        };
        let b = owned.encode();
        assert_eq!(b.len(), INODE_RECORD_V2_BYTES);
        assert_eq!(InodeRecord::decode(&b, 3).unwrap(), owned);
        for i in 0..b.len() {
            let mut d = b.clone();
            d[i] ^= 0x10;
            assert!(InodeRecord::decode(&d, 3).is_err(), "flip at {i}");
        }
        for n in 0..b.len() {
            assert!(InodeRecord::decode(&b[..n], 3).is_err());
        }
        let s = Superblock {
            inode_objects: true,
            embed_inodes: false,
            dirent_objects: true,
            dir_block_bytes: 2048,
            clean: true,
            next_ino: 99,
        };
        assert_eq!(Superblock::decode(&s.encode()).unwrap(), s);
        let d = DirentRecord {
            parent: 1,
            kind: FileKind::File,
            name: "hello".into(),
        };
        assert_eq!(DirentRecord::decode(&d.encode(), 5).unwrap(), d);
        assert!(DirentRecord::decode(&[1, 2, 3], 5).is_err());
        let z = DirSize {
            entries: 3,
            bytes: 60,
        };
        assert_eq!(DirSize::decode(&z.encode(), 1).unwrap(), z);
    }

    #[test]
    fn object_roles_do_not_overlap() {
        assert_eq!(data_oid(vfs::ROOT).object.0, 0x10001);
        assert_eq!(role(data_oid(5).object), ObjectRole::Data(5));
        assert_eq!(role(inode_oid(5).object), ObjectRole::Inode(5));
        assert_eq!(role(dirent_oid(5).object), ObjectRole::Dirent(5));
        assert_eq!(
            role(data_oid(INO_LIMIT - 1).object),
            ObjectRole::Data(INO_LIMIT - 1)
        );
        assert_eq!(role(ObjectId(OBJECT_OFFSET)), ObjectRole::Unknown);
        assert!(!valid_ino(0) && !valid_ino(INO_LIMIT));
    }
}
