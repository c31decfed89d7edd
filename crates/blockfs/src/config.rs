//! Settings of the block file system: the format's geometry (fixed at `mkfs`, recorded in the
//! superblock) and the mount options (read at every mount).

use serde::{Deserialize, Serialize};

/// Block file system settings, with ext4's defaults where ext4 has one.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct BlockFsConfig {
    /// mkfs: block size in bytes, a power of two from 1 KiB to 64 KiB (default 4 KiB, ext4's).
    pub block_bytes: u32,
    /// mkfs: on-disk inode size in bytes, a power of two from 128 up to the block size
    /// (default 256, ext4's).
    pub inode_bytes: u32,
    /// mkfs: one inode per this many bytes of space (default 16 KiB, ext4's `inode_ratio`).
    pub bytes_per_inode: u64,
    /// mkfs: share of the blocks after the fixed metadata set apart for directory blocks and
    /// extent blocks, in percent (default 1). Keeping them apart from file data means a write
    /// unit of the FTL never holds both metadata (always real bytes) and fingerprint-mode data.
    pub meta_zone_percent: f64,
    /// mount: discard (TRIM) the write units a delete or truncate leaves entirely free
    /// (default true: OSSD-13 VI-A mounts ext4 with discard; BLOCKMGMT-09 Table 5 compares both).
    pub discard: bool,
    /// mount: fdatasync writes the inode when the file's size or block map changed (default
    /// true, what a file system without a journal must do for the data to be readable after a
    /// power cut). false mimics OSSD-13 VI-B, where ext4's inode went to a journal on a RAM
    /// drive and only the block bitmap reached the device.
    pub fdatasync_writes_inode: bool,
    /// mount: every this many virtual nanoseconds, dirty metadata is written back without a
    /// flush, as the kernel's flusher threads do (default 30 s, Linux's
    /// `dirty_expire_centisecs`); 0 writes metadata only at fsync, sync and unmount.
    pub writeback_interval_ns: u64,
    /// mount: largest preallocation window in bytes (default 8 MiB; 0 turns preallocation
    /// off). A file that grows past [`crate::STREAM_BLOCKS`] blocks gets blocks after its end
    /// set aside in memory (not in the bitmap), twice its size up to this, so that files
    /// written at the same time stay contiguous, as with ext4's per-inode preallocation.
    pub prealloc_max_bytes: u64,
    /// mount: files holding a preallocation window at once (default 32); the oldest window is
    /// given back first.
    pub prealloc_windows: u32,
}

impl Default for BlockFsConfig {
    fn default() -> Self {
        BlockFsConfig {
            block_bytes: 4096,
            inode_bytes: 256,
            bytes_per_inode: 16384,
            meta_zone_percent: 1.0,
            discard: true,
            fdatasync_writes_inode: true,
            writeback_interval_ns: 30_000_000_000,
            prealloc_max_bytes: 8 << 20,
            prealloc_windows: 32,
        }
    }
}

impl BlockFsConfig {
    /// Checks the settings: block size a power of two from 1024 to 65536, inode size a power of two
    /// from 128 to the block size, and the other bounds; the error names the offending `blockfs.*`
    /// setting.
    pub fn validate(&self) -> Result<(), ConfigError> {
        let b = self.block_bytes;
        if !b.is_power_of_two() || !(1024..=65536).contains(&b) {
            return Err(ConfigError::BlockBytes { bytes: b });
        }
        let i = self.inode_bytes;
        if !i.is_power_of_two() || i < 128 || i > b {
            return Err(ConfigError::InodeBytes { bytes: i });
        }
        if self.bytes_per_inode < b as u64 {
            return Err(ConfigError::BytesPerInode {
                bytes: self.bytes_per_inode,
            });
        }
        if !(self.meta_zone_percent > 0.0 && self.meta_zone_percent <= 50.0) {
            return Err(ConfigError::MetaZonePercent {
                percent: self.meta_zone_percent,
            });
        }
        Ok(())
    }
}

/// Why [`BlockFsConfig::validate`] refused the settings; each variant names the `blockfs.*`
/// setting and its value.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
pub enum ConfigError {
    /// `block_bytes` is not a power of two from 1024 to 65536.
    #[error("blockfs.block_bytes = {bytes} must be a power of two from 1024 to 65536")]
    BlockBytes {
        /// The value.
        bytes: u32,
    },
    /// `inode_bytes` is not a power of two from 128 to the block size.
    #[error("blockfs.inode_bytes = {bytes} must be a power of two from 128 to the block size")]
    InodeBytes {
        /// The value.
        bytes: u32,
    },
    /// `bytes_per_inode` is below the block size.
    #[error("blockfs.bytes_per_inode = {bytes} must be at least the block size")]
    BytesPerInode {
        /// The value.
        bytes: u64,
    },
    /// `meta_zone_percent` is outside (0, 50].
    #[error("blockfs.meta_zone_percent = {percent} must lie in (0, 50]")]
    MetaZonePercent {
        /// The value.
        percent: f64,
    },
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_are_valid_and_come_from_toml() {
        BlockFsConfig::default().validate().unwrap();
        let c: BlockFsConfig = toml::from_str("block_bytes = 1024\ndiscard = false").unwrap();
        assert_eq!(c.block_bytes, 1024);
        assert!(!c.discard);
        assert_eq!(c.inode_bytes, 256);
        c.validate().unwrap();
        let bad = BlockFsConfig {
            block_bytes: 3000,
            ..BlockFsConfig::default()
        };
        assert_eq!(bad.validate(), Err(ConfigError::BlockBytes { bytes: 3000 }));
    }
}
