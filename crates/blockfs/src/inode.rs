//! Inodes and their extent maps.
//!
//! On disk an inode is `inode_bytes` long, little-endian:
//!
//! ```text
//!  0 kind u8 (0 free, 1 file, 2 directory)   1 depth u8 (0 or 1)   2 entries u16
//!  4 parent inode u32                         8 size u64            16 mtime ns u64
//! 24 blocks u32 (data + extent blocks)       28 CRC-32C of the inode with this field zero
//! 32 entries, 12 bytes each: (logical block u32, physical block u32, length u32)
//! ```
//!
//! At depth 0 the entries are the extents themselves. When a file has more extents than the
//! inode holds, depth is 1 and each entry points to an extent (leaf) block in the meta zone
//! holding up to [`leaf_capacity`] extents: (first logical block, leaf block, extents in it),
//! as in ext4's extent tree of depth one.
//!
//! A leaf block: magic `b"XL"`, count u16, owner inode u32, CRC-32C u32 (over the used bytes with
//! this field zero), a zero u32, then the extents.

use flash::Nanos;
use vfs::le::{self, Le};
use vfs::FileKind;

use crate::error::DecodeError;
pub use crate::extent::Extent;

const HEADER: usize = 32;
const ENTRY: usize = 12;
const LEAF_HEADER: usize = 16;
const LEAF_MAGIC: &[u8; 2] = b"XL";

/// A piece of a logical range: mapped to `phys` or a hole.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Segment {
    /// First logical block of the piece.
    pub logical: u32,
    /// Blocks in the piece.
    pub len: u32,
    /// Physical block of its first logical block, or `None` for a hole.
    pub phys: Option<u32>,
}

/// An inode in memory: what is on disk plus the bookkeeping of what a sync must write.
#[derive(Clone, Debug)]
pub struct Inode {
    /// File or directory.
    pub kind: FileKind,
    /// Inode number of the directory holding its entry.
    pub parent: u32,
    /// Size in bytes.
    pub size: u64,
    /// Last modification time (virtual ns).
    pub mtime: Nanos,
    /// Sorted by logical block, not overlapping; neighbours that touch in both spaces merged.
    pub extents: Vec<Extent>,
    /// Extent blocks, when the extents do not fit in the inode.
    pub leaves: Vec<u32>,
    /// Size or block map changed since the inode was last written: fdatasync must write it.
    pub datasync_dirty: bool,
    /// Created since its directory entry was last written: an fsync writes the parent too
    /// (what ext4 without a journal does for a new entry).
    pub new_entry: bool,
    /// Metadata blocks dirtied on this inode's behalf (bitmaps, its directory blocks, its
    /// extent blocks): an fsync writes those still dirty.
    pub assoc: Vec<u32>,
}

impl Inode {
    /// A new, empty inode of `kind` in directory `parent`, dirty for fdatasync and with a new
    /// entry.
    pub fn new(kind: FileKind, parent: u32, mtime: Nanos) -> Self {
        Inode {
            kind,
            parent,
            size: 0,
            mtime,
            extents: Vec::new(),
            leaves: Vec::new(),
            datasync_dirty: true,
            new_entry: true,
            assoc: Vec::new(),
        }
    }

    /// Adds a metadata block dirtied on this inode's behalf (once), for its next fsync.
    pub fn associate(&mut self, block: u32) {
        if !self.assoc.contains(&block) {
            self.assoc.push(block);
        }
    }

    /// Data blocks mapped (holes and extent blocks not counted).
    pub fn data_blocks(&self) -> u64 {
        self.extents.iter().map(|e| e.len as u64).sum()
    }

    /// Logical blocks mapped (one past the last).
    pub fn mapped_end(&self) -> u32 {
        self.extents.last().map_or(0, |e| e.logical_end())
    }

    /// Index of the first extent ending after `logical`.
    fn first_ending_after(&self, logical: u32) -> usize {
        self.extents.partition_point(|e| e.logical_end() <= logical)
    }

    /// The physical block of `logical`, if mapped.
    pub fn map(&self, logical: u32) -> Option<u32> {
        let i = self.first_ending_after(logical);
        let e = self.extents.get(i)?;
        (e.logical <= logical).then(|| e.start + (logical - e.logical))
    }

    /// Where logical block `l` would best go: in line with the nearest extent before it (as
    /// ext4's `ext4_ext_find_goal`), if there is one.
    pub fn goal_for(&self, l: u32) -> Option<u32> {
        let i = self.first_ending_after(l);
        let e = self.extents.get(i.checked_sub(1)?)?;
        e.start.checked_add(l - e.logical)
    }

    /// Mapped runs and holes covering `[from, to)`, in order.
    pub fn segments(&self, from: u32, to: u32) -> Vec<Segment> {
        let mut out = Vec::new();
        let mut at = from;
        let mut i = self.first_ending_after(from);
        while at < to {
            match self.extents.get(i) {
                Some(e) if e.logical <= at => {
                    let len = e.logical_end().min(to) - at;
                    out.push(Segment {
                        logical: at,
                        len,
                        phys: Some(e.start + (at - e.logical)),
                    });
                    at += len;
                    i += 1;
                }
                next => {
                    let end = next.map_or(to, |e| e.logical.min(to));
                    out.push(Segment {
                        logical: at,
                        len: end - at,
                        phys: None,
                    });
                    at = end;
                }
            }
        }
        out
    }

    /// Maps the hole `[logical, logical + len)` to `[start, start + len)`, merging with the
    /// neighbours when they touch in both spaces. Returns the index of the first extent changed.
    pub fn insert(&mut self, logical: u32, start: u32, len: u32) -> usize {
        let i = self.first_ending_after(logical);
        debug_assert!(self
            .extents
            .get(i)
            .is_none_or(|e| e.logical >= logical + len));
        let joins_prev = i > 0 && {
            let p = &self.extents[i - 1];
            p.logical_end() == logical && p.start + p.len == start
        };
        let joins_next = self
            .extents
            .get(i)
            .is_some_and(|n| n.logical == logical + len && n.start == start + len);
        match (joins_prev, joins_next) {
            (true, true) => {
                let n = self.extents.remove(i);
                self.extents[i - 1].len += len + n.len;
                i - 1
            }
            (true, false) => {
                self.extents[i - 1].len += len;
                i - 1
            }
            (false, true) => {
                let n = &mut self.extents[i];
                n.logical = logical;
                n.start = start;
                n.len += len;
                i
            }
            (false, false) => {
                self.extents.insert(
                    i,
                    Extent {
                        logical,
                        start,
                        len,
                    },
                );
                i
            }
        }
    }

    /// Unmaps logical blocks `[from, to)`; returns the freed physical runs and the index of
    /// the first extent changed.
    pub fn unmap(&mut self, from: u32, to: u32) -> (Vec<(u32, u32)>, usize) {
        let i = self.first_ending_after(from);
        let mut j = i;
        let mut freed = Vec::new();
        let mut keep = Vec::new();
        while j < self.extents.len() && self.extents[j].logical < to {
            let e = self.extents[j];
            if e.logical < from {
                keep.push(Extent {
                    len: from - e.logical,
                    ..e
                });
            }
            let (s, end) = (e.logical.max(from), e.logical_end().min(to));
            freed.push((e.start + (s - e.logical), end - s));
            if e.logical_end() > to {
                keep.push(Extent {
                    logical: to,
                    start: e.start + (to - e.logical),
                    len: e.logical_end() - to,
                });
            }
            j += 1;
        }
        self.extents.splice(i..j, keep);
        (freed, i)
    }
}

/// Extents a leaf block holds.
pub fn leaf_capacity(block_bytes: u32) -> usize {
    (block_bytes as usize - LEAF_HEADER) / ENTRY
}

/// Entries an inode holds.
pub fn inline_capacity(inode_bytes: u32) -> usize {
    (inode_bytes as usize - HEADER) / ENTRY
}

/// Leaf blocks a map of `extents` extents needs (0 when they fit in the inode), or `None` if
/// it is too fragmented for a tree of depth one.
pub fn leaves_needed(extents: usize, inode_bytes: u32, block_bytes: u32) -> Option<usize> {
    let inline = inline_capacity(inode_bytes);
    if extents <= inline {
        return Some(0);
    }
    let n = extents.div_ceil(leaf_capacity(block_bytes));
    (n <= inline).then_some(n)
}

fn put32(b: &mut [u8], at: usize, v: u32) {
    b[at..at + 4].copy_from_slice(&v.to_le_bytes());
}

/// Writes `inode` into its slot (`slot.len()` = inode size); `leaf_cap` extents per leaf.
pub fn encode(inode: &Inode, slot: &mut [u8], leaf_cap: usize) {
    slot.fill(0);
    slot[0] = match inode.kind {
        FileKind::File => 1,
        FileKind::Dir => 2,
        FileKind::Symlink | FileKind::Special(_) => {
            unreachable!("blockfs makes no symbolic links or special files")
        }
    };
    let entries: Vec<Extent> = if inode.leaves.is_empty() {
        inode.extents.clone()
    } else {
        inode
            .leaves
            .iter()
            .enumerate()
            .map(|(k, &leaf)| {
                let chunk = &inode.extents[(k * leaf_cap).min(inode.extents.len())
                    ..((k + 1) * leaf_cap).min(inode.extents.len())];
                Extent {
                    logical: chunk.first().map_or(0, |e| e.logical),
                    start: leaf,
                    len: chunk.len() as u32,
                }
            })
            .collect()
    };
    slot[1] = (!inode.leaves.is_empty()) as u8;
    slot[2..4].copy_from_slice(&(entries.len() as u16).to_le_bytes());
    put32(slot, 4, inode.parent);
    slot[8..16].copy_from_slice(&inode.size.to_le_bytes());
    slot[16..24].copy_from_slice(&inode.mtime.to_le_bytes());
    put32(
        slot,
        24,
        (inode.data_blocks() + inode.leaves.len() as u64) as u32,
    );
    for (k, e) in entries.iter().enumerate() {
        let o = HEADER + k * ENTRY;
        put32(slot, o, e.logical);
        put32(slot, o + 4, e.start);
        put32(slot, o + 8, e.len);
    }
    let crc = crc32c::crc32c(slot);
    put32(slot, 28, crc);
}

/// An inode as decoded from its slot, before its extent blocks are read.
#[derive(Debug)]
pub struct DiskInode {
    /// File or directory.
    pub kind: FileKind,
    /// 0: the extents are in the slot; 1: the slot points at extent (leaf) blocks.
    pub depth: u8,
    /// Inode number of the directory holding its entry.
    pub parent: u32,
    /// Size in bytes.
    pub size: u64,
    /// Last modification time (virtual ns).
    pub mtime: Nanos,
    /// Blocks the inode uses: data blocks plus extent blocks.
    pub blocks: u32,
    /// Extents (depth 0) or (first logical, leaf block, count) entries (depth 1).
    pub entries: Vec<Extent>,
}

/// Decodes a slot: `Ok(None)` for a free slot, `Err` for one that is damaged.
pub fn decode(slot: &[u8]) -> Result<Option<DiskInode>, DecodeError> {
    if slot.iter().all(|&b| b == 0) {
        return Ok(None);
    }
    let mut copy = slot.to_vec();
    put32(&mut copy, 28, 0);
    if crc32c::crc32c(&copy) != le::u32_at(slot, 28)? {
        return Err(DecodeError::Checksum);
    }
    let kind = match slot[0] {
        1 => FileKind::File,
        2 => FileKind::Dir,
        kind => return Err(DecodeError::InodeKind { kind }),
    };
    let depth = slot[1];
    let count = le::u16_at(slot, 2)? as usize;
    if depth > 1 || count > slot.len().saturating_sub(HEADER) / ENTRY {
        return Err(DecodeError::Depth { depth, count });
    }
    let entries = extents(slot, HEADER, count)?;
    Ok(Some(DiskInode {
        kind,
        depth,
        parent: le::u32_at(slot, 4)?,
        size: le::u64_at(slot, 8)?,
        mtime: le::u64_at(slot, 16)?,
        blocks: le::u32_at(slot, 24)?,
        entries,
    }))
}

/// `count` extents stored from offset `at` of `b`, `ENTRY` bytes each.
fn extents(b: &[u8], at: usize, count: usize) -> Result<Vec<Extent>, DecodeError> {
    let mut r = Le::at(b, at);
    (0..count)
        .map(|_| {
            Ok(Extent {
                logical: r.u32()?,
                start: r.u32()?,
                len: r.u32()?,
            })
        })
        .collect()
}

/// Writes a leaf block holding `extents` for inode `owner`.
pub fn encode_leaf(owner: u32, extents: &[Extent], out: &mut [u8]) {
    out.fill(0);
    out[0..2].copy_from_slice(LEAF_MAGIC);
    out[2..4].copy_from_slice(&(extents.len() as u16).to_le_bytes());
    put32(out, 4, owner);
    for (k, e) in extents.iter().enumerate() {
        let o = LEAF_HEADER + k * ENTRY;
        put32(out, o, e.logical);
        put32(out, o + 4, e.start);
        put32(out, o + 8, e.len);
    }
    let used = LEAF_HEADER + extents.len() * ENTRY;
    let crc = crc32c::crc32c(&out[..used]);
    put32(out, 8, crc);
}

/// Decodes a leaf block that should belong to inode `owner`.
pub fn decode_leaf(owner: u32, b: &[u8]) -> Result<Vec<Extent>, DecodeError> {
    if b.get(0..2) != Some(&LEAF_MAGIC[..]) {
        return Err(DecodeError::NotExtentBlock);
    }
    let count = le::u16_at(b, 2)? as usize;
    let used = LEAF_HEADER + count * ENTRY;
    if used > b.len() {
        return Err(DecodeError::ExtentCount { count });
    }
    let mut copy = b[..used].to_vec();
    put32(&mut copy, 8, 0);
    if crc32c::crc32c(&copy) != le::u32_at(b, 8)? {
        return Err(DecodeError::Checksum);
    }
    let found_owner = le::u32_at(b, 4)?;
    if found_owner != owner {
        return Err(DecodeError::Owner { owner: found_owner });
    }
    extents(b, LEAF_HEADER, count)
}
