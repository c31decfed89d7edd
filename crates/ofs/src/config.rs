//! OFS settings. They fix the on-flash layout, so they are chosen at format and kept in the
//! superblock; mount takes them from there. Placement is the object store's business
//! (`OsdConfig::placement`): OFS on `semantic` is the papers' "OFS", on `one` "OFS-ONE".

use serde::{Deserialize, Serialize};
use vfs::FsError;

/// OFS settings: how files, inodes and directories map onto objects (fixed at format).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct OfsConfig {
    /// Keep each file's inode record in a small inode object of its own (OSCM-11 IV, Figure
    /// 4: "two objects per file; one for file data and one for inode") instead of in an
    /// attribute of its data object. Default false.
    pub inode_objects: bool,
    /// Hint inode objects as inodes (`Attr::InodeEmbedded`), so the store keeps them inside
    /// their onodes (OSCM-11 V-D "inode embedding"). Only matters with `inode_objects`.
    /// Default true.
    pub embed_inodes: bool,
    /// Keep each directory entry's name in an object of its own, the directory's buckets then
    /// holding (hash, inode) only (OSCM-11 III-A: "assign an object for each directory entry",
    /// the small objects of V-D). Default false: entries packed in the directory object.
    pub dirent_objects: bool,
    /// Size of a directory bucket block in bytes; 0 (the default) means the store's write unit
    /// (at most 32 KiB), so a bucket write is one aligned unit. Otherwise a power of two from
    /// 512 up to the write unit and 32 KiB (a bucket must stay within one unit: a unit write is
    /// what the store makes atomic).
    pub dir_block_bytes: u32,
}

impl Default for OfsConfig {
    fn default() -> Self {
        OfsConfig {
            inode_objects: false,
            embed_inodes: true,
            dirent_objects: false,
            dir_block_bytes: 0,
        }
    }
}

/// Smallest bucket block: must hold one entry with the longest name.
pub const DIR_BLOCK_MIN_BYTES: u32 = 512;
/// Largest bucket block: a bucket header counts its entry bytes in 16 bits.
pub const DIR_BLOCK_MAX_BYTES: u32 = 32 << 10;

impl OfsConfig {
    /// The bucket block size for a store whose write unit is `unit_bytes`.
    pub fn resolve_dir_block(&self, unit_bytes: u32) -> Result<u32, FsError> {
        let b = if self.dir_block_bytes == 0 {
            unit_bytes.min(DIR_BLOCK_MAX_BYTES)
        } else {
            self.dir_block_bytes
        };
        if !b.is_power_of_two()
            || !(DIR_BLOCK_MIN_BYTES..=DIR_BLOCK_MAX_BYTES).contains(&b)
            || b > unit_bytes
            || !unit_bytes.is_multiple_of(b)
        {
            return Err(FsError::Invalid(format!(
                "dir_block_bytes {b}: must be a power of two from {DIR_BLOCK_MIN_BYTES} to the \
                 write unit ({unit_bytes} bytes) and {DIR_BLOCK_MAX_BYTES}"
            )));
        }
        Ok(b)
    }
}
