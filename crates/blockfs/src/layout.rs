//! Where everything lives in the FTL's byte space, and the superblock that records it.
//!
//! ```text
//! block 0            superblock
//! block bitmap       one bit per block (1 = in use; the fixed metadata is marked in use)
//! inode bitmap       one bit per inode slot (slot 0 is reserved, the root is inode 1)
//! inode table        fixed-size inodes, slot i holds inode i
//! meta zone          directory blocks and extent (leaf) blocks, starts on a write unit
//! data zone          file data, starts on a write unit
//! ```
//!
//! The superblock is little-endian, [`SUPER_BYTES`] long, checked by a CRC-32C over the bytes
//! before it. An image whose magic, version, checksum or geometry is wrong is refused with
//! `FsError::Corrupted`.

use vfs::le::{self, Le};
use vfs::FsError;

use crate::config::{BlockFsConfig, ConfigError};

/// The first 8 bytes of a blockfs image's block 0.
pub const MAGIC: &[u8; 8] = b"OSSDBLKF";
/// The on-disk format version this build writes and reads.
pub const VERSION: u32 = 1;
/// Bytes of the encoded superblock (the rest of block 0 is zero).
pub const SUPER_BYTES: usize = 72;

/// A range of blocks.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Region {
    /// First block.
    pub start: u32,
    /// Blocks in the range.
    pub len: u32,
}

impl Region {
    /// One past the last block.
    pub fn end(&self) -> u32 {
        self.start + self.len
    }
    /// Whether block `b` lies inside.
    pub fn contains(&self, b: u32) -> bool {
        b >= self.start && b < self.end()
    }
    /// True if `[start, start + len)` lies inside.
    pub fn holds(&self, start: u32, len: u32) -> bool {
        len > 0 && start >= self.start && (start as u64 + len as u64) <= self.end() as u64
    }
}

/// What file data holds: decided by the first data write, then fixed (a write unit of the FTL
/// cannot hold real bytes and fingerprints at once, and blocks of different files share units).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DataMode {
    /// No data written yet.
    Unset = 0,
    /// Data blocks hold real bytes.
    Bytes = 1,
    /// Fingerprint mode: data blocks hold tokens standing for the bytes.
    Tokens = 2,
}

/// The format's geometry.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Layout {
    /// Bytes per file system block.
    pub block_bytes: u32,
    /// Blocks on the device, superblock included.
    pub blocks: u32,
    /// Inode slots, slot 0 included.
    pub inodes: u32,
    /// Bytes per inode slot.
    pub inode_bytes: u32,
    /// The block allocation bitmap (one bit per block).
    pub block_bitmap: Region,
    /// The inode allocation bitmap (one bit per inode slot).
    pub inode_bitmap: Region,
    /// The inode table (the slots).
    pub inode_table: Region,
    /// Blocks for directory and extent blocks, kept apart from data.
    pub meta_zone: Region,
    /// Blocks for file data: the rest of the device.
    pub data_zone: Region,
}

impl Layout {
    /// The layout `mkfs` gives a logical space of `capacity_bytes` with write units of
    /// `unit_bytes`.
    pub fn plan(
        cfg: &BlockFsConfig,
        capacity_bytes: u64,
        unit_bytes: u64,
    ) -> Result<Self, PlanError> {
        cfg.validate()?;
        let bs = cfg.block_bytes as u64;
        let blocks = (capacity_bytes / bs).min(u32::MAX as u64 - 1) as u32;
        let bits = bs * 8;
        let ipb = (bs / cfg.inode_bytes as u64) as u32;
        let inodes = ((blocks as u64 * bs / cfg.bytes_per_inode).max(16) as u32)
            .div_ceil(ipb)
            .saturating_mul(ipb);
        let unit_blocks = (unit_bytes / bs).max(1) as u32;
        let block_bitmap = Region {
            start: 1,
            len: (blocks as u64).div_ceil(bits) as u32,
        };
        let inode_bitmap = Region {
            start: block_bitmap.end(),
            len: (inodes as u64).div_ceil(bits) as u32,
        };
        let inode_table = Region {
            start: inode_bitmap.end(),
            len: inodes / ipb,
        };
        let meta_start = inode_table.end().next_multiple_of(unit_blocks);
        let rest = blocks.saturating_sub(meta_start);
        let meta_len = ((rest as f64 * cfg.meta_zone_percent / 100.0) as u32)
            .max(8)
            .next_multiple_of(unit_blocks);
        let meta_zone = Region {
            start: meta_start,
            len: meta_len,
        };
        let data_zone = Region {
            start: meta_zone.end(),
            len: blocks.saturating_sub(meta_zone.end()),
        };
        if data_zone.len < 8 {
            return Err(PlanError::TooSmall {
                capacity_bytes,
                block_bytes: cfg.block_bytes,
                meta_blocks: meta_zone.end(),
            });
        }
        Ok(Layout {
            block_bytes: cfg.block_bytes,
            blocks,
            inodes,
            inode_bytes: cfg.inode_bytes,
            block_bitmap,
            inode_bitmap,
            inode_table,
            meta_zone,
            data_zone,
        })
    }

    /// Inode slots per block of the inode table.
    pub fn inodes_per_block(&self) -> u32 {
        self.block_bytes / self.inode_bytes
    }
    /// Bits (blocks or inodes) one bitmap block covers.
    pub fn bits_per_block(&self) -> u32 {
        self.block_bytes * 8
    }
    /// The inode table block holding inode `ino`.
    pub fn inode_block(&self, ino: u32) -> u32 {
        self.inode_table.start + ino / self.inodes_per_block()
    }
    /// Blocks before the meta zone: superblock, bitmaps, inode table.
    pub fn fixed_end(&self) -> u32 {
        self.inode_table.end()
    }
    /// Byte address on the device of block `block`.
    pub fn byte_offset(&self, block: u32) -> u64 {
        block as u64 * self.block_bytes as u64
    }
}

/// The superblock: the layout plus the state a mount needs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Superblock {
    /// Where everything is.
    pub layout: Layout,
    /// Whether file data are bytes or tokens (fixed by the first data write).
    pub data_mode: DataMode,
    /// False while mounted: a mount that finds it false follows a power cut or crash.
    pub clean: bool,
}

fn put(b: &mut [u8], at: usize, v: u32) {
    b[at..at + 4].copy_from_slice(&v.to_le_bytes());
}

impl Superblock {
    /// Writes the superblock into `out` (`SUPER_BYTES` used, the rest zeroed), with its checksum.
    pub fn encode(&self, out: &mut [u8]) {
        let l = &self.layout;
        out.fill(0);
        out[0..8].copy_from_slice(MAGIC);
        let words = [
            VERSION,
            l.block_bytes,
            l.blocks,
            l.inodes,
            l.inode_bytes,
            l.block_bitmap.start,
            l.block_bitmap.len,
            l.inode_bitmap.start,
            l.inode_bitmap.len,
            l.inode_table.start,
            l.inode_table.len,
            l.meta_zone.start,
            l.meta_zone.len,
            l.data_zone.start,
        ];
        for (i, w) in words.iter().enumerate() {
            put(out, 8 + 4 * i, *w);
        }
        out[64] = self.data_mode as u8;
        out[65] = self.clean as u8;
        let crc = crc32c::crc32c(&out[..68]);
        put(out, 68, crc);
    }

    /// Decodes and validates a superblock read from the first bytes of the device.
    pub fn decode(b: &[u8], capacity_bytes: u64) -> Result<Self, FsError> {
        let bad = |why: String| Err(FsError::Corrupted(format!("superblock: {why}")));
        if b.len() < SUPER_BYTES {
            return bad("short read".into());
        }
        if &b[0..8] != MAGIC {
            return bad("not a blockfs image (bad magic)".into());
        }
        // Words 0..14 from offset 8: the version, then the layout.
        let mut words = [0u32; 14];
        let mut r = Le::at(b, 8);
        for word in &mut words {
            *word = r.u32()?;
        }
        let version = words[0];
        if version != VERSION {
            return bad(format!(
                "format version {version}, this build reads {VERSION}"
            ));
        }
        if crc32c::crc32c(&b[..68]) != le::u32_at(b, 68)? {
            return bad("checksum mismatch".into());
        }
        let w = |i: usize| words[i];
        let region = |i: usize| Region {
            start: w(i),
            len: w(i + 1),
        };
        let layout = Layout {
            block_bytes: w(1),
            blocks: w(2),
            inodes: w(3),
            inode_bytes: w(4),
            block_bitmap: region(5),
            inode_bitmap: region(7),
            inode_table: region(9),
            meta_zone: region(11),
            data_zone: Region {
                start: w(13),
                len: w(2).saturating_sub(w(13)),
            },
        };
        let data_mode = match b[64] {
            0 => DataMode::Unset,
            1 => DataMode::Bytes,
            2 => DataMode::Tokens,
            m => return bad(format!("unknown data mode {m}")),
        };
        if b[65] > 1 {
            return bad(format!("unknown state {}", b[65]));
        }
        validate(&layout, capacity_bytes)
            .map_err(|why| FsError::Corrupted(format!("superblock: {why}")))?;
        Ok(Superblock {
            layout,
            data_mode,
            clean: b[65] == 1,
        })
    }
}

/// Checks a decoded layout: every region in order, in range, and big enough for what it maps.
fn validate(l: &Layout, capacity_bytes: u64) -> Result<(), LayoutError> {
    let bs = l.block_bytes;
    if !bs.is_power_of_two() || !(1024..=65536).contains(&bs) {
        return Err(LayoutError::BlockSize { bytes: bs });
    }
    if !l.inode_bytes.is_power_of_two() || l.inode_bytes < 128 || l.inode_bytes > bs {
        return Err(LayoutError::InodeSize {
            bytes: l.inode_bytes,
        });
    }
    if l.blocks as u64 * bs as u64 > capacity_bytes {
        return Err(LayoutError::Blocks {
            blocks: l.blocks,
            block_bytes: bs,
            capacity_bytes,
        });
    }
    let order = [
        ("block bitmap", l.block_bitmap),
        ("inode bitmap", l.inode_bitmap),
        ("inode table", l.inode_table),
        ("meta zone", l.meta_zone),
    ];
    let mut end = 1u64;
    for (name, r) in order {
        if (r.start as u64) < end || r.len == 0 || r.start as u64 + r.len as u64 > l.blocks as u64 {
            return Err(LayoutError::Region {
                name,
                start: r.start,
                len: r.len,
            });
        }
        end = r.start as u64 + r.len as u64;
    }
    if l.data_zone.start as u64 != end || l.data_zone.len == 0 {
        return Err(LayoutError::DataZone {
            start: l.data_zone.start,
        });
    }
    let bits = bs as u64 * 8;
    if (l.block_bitmap.len as u64) * bits < l.blocks as u64
        || (l.inode_bitmap.len as u64) * bits < l.inodes as u64
        || (l.inode_table.len as u64) * ((bs / l.inode_bytes) as u64) < l.inodes as u64
        || l.inodes < 2
    {
        return Err(LayoutError::Counts);
    }
    Ok(())
}

/// Why [`Layout::plan`] could not lay a file system out.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
pub enum PlanError {
    /// The settings are out of range.
    #[error(transparent)]
    Config(#[from] ConfigError),
    /// The logical space leaves fewer than 8 blocks of data after the metadata.
    #[error(
        "a logical space of {capacity_bytes} bytes is too small for a file system of \
         {block_bytes}-byte blocks ({meta_blocks} blocks of metadata)"
    )]
    TooSmall {
        /// Bytes of the logical space.
        capacity_bytes: u64,
        /// Block size in bytes.
        block_bytes: u32,
        /// Blocks before the data zone (superblock, bitmaps, inode table, meta zone).
        meta_blocks: u32,
    },
}

/// What is wrong with the layout a superblock describes (the superblock is untrusted).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
enum LayoutError {
    /// A block size that is not a power of two from 1024 to 65536.
    #[error("block size {bytes}")]
    BlockSize { bytes: u32 },
    /// An inode size that is not a power of two from 128 to the block size.
    #[error("inode size {bytes}")]
    InodeSize { bytes: u32 },
    /// More blocks than the device holds.
    #[error("{blocks} blocks of {block_bytes} bytes exceed the device's {capacity_bytes} bytes")]
    Blocks {
        blocks: u32,
        block_bytes: u32,
        capacity_bytes: u64,
    },
    /// A metadata region that is empty, overlaps the one before it, or runs past the end.
    #[error("{name} at {start} length {len} out of place")]
    Region {
        name: &'static str,
        start: u32,
        len: u32,
    },
    /// A data zone that does not follow the meta zone, or is empty.
    #[error("data zone starts at {start}")]
    DataZone { start: u32 },
    /// Bitmaps or inode table too small for the block and inode counts.
    #[error("bitmaps or inode table too small for the counts")]
    Counts,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn superblock_round_trips_and_refuses_damage() {
        let l = Layout::plan(&BlockFsConfig::default(), 64 << 20, 16384).unwrap();
        assert_eq!(l.meta_zone.start % 4, 0);
        assert_eq!(l.data_zone.start % 4, 0);
        let sb = Superblock {
            layout: l,
            data_mode: DataMode::Tokens,
            clean: true,
        };
        let mut b = vec![0u8; 4096];
        sb.encode(&mut b);
        assert_eq!(Superblock::decode(&b, 64 << 20).unwrap(), sb);
        assert!(
            Superblock::decode(&b, 32 << 20).is_err(),
            "bigger than the device"
        );
        b[20] ^= 1;
        assert!(matches!(
            Superblock::decode(&b, 64 << 20),
            Err(FsError::Corrupted(_))
        ));
    }
}
