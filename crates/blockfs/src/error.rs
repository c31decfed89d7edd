//! Why a record read from the device did not decode, and why mount could not load an inode.
//! Mount reports both among [`crate::BlockFs::problems`] (prefixed with where the record was);
//! they are never returned from a file system call.

use ftl::FtlError;

use crate::extent::Extent;

/// Why an inode slot, an extent block or a directory block did not decode (the bytes are
/// untrusted).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum DecodeError {
    /// A field read past the end of the record.
    #[error(transparent)]
    Truncated(#[from] vfs::le::Truncated),
    /// The record's CRC does not match its bytes.
    #[error("checksum mismatch")]
    Checksum,
    /// An inode slot with a kind code that is neither a file (1) nor a directory (2).
    #[error("unknown kind {kind}")]
    InodeKind {
        /// The code.
        kind: u8,
    },
    /// An inode slot whose extent tree is deeper than one level, or whose entry count does not
    /// fit the slot.
    #[error("depth {depth} with {count} entries")]
    Depth {
        /// The tree depth.
        depth: u8,
        /// The entry count.
        count: usize,
    },
    /// A block that should be an extent block lacks its magic.
    #[error("not an extent block")]
    NotExtentBlock,
    /// An extent block whose count of extents does not fit the block.
    #[error("{count} extents do not fit")]
    ExtentCount {
        /// Extents the block's header claims.
        count: usize,
    },
    /// A block that should be a directory block lacks its magic, or is shorter than a header.
    #[error("not a directory block")]
    NotDirBlock,
    /// Directory entries that run past the end of the block.
    #[error("entries run past the block")]
    EntriesPastBlock,
    /// A directory entry with a kind code that is neither a file (1) nor a directory (2).
    #[error("entry of unknown kind {kind}")]
    EntryKind {
        /// The code.
        kind: u8,
    },
    /// A directory entry whose name is not UTF-8.
    #[error("a name that is not UTF-8")]
    NameNotUtf8,
    /// An extent or directory block of another inode.
    #[error("belongs to inode {owner}")]
    Owner {
        /// The inode the block names.
        owner: u32,
    },
}

/// Why mount could not build an inode from its slot and its extent blocks.
#[derive(Debug, thiserror::Error)]
pub(crate) enum LoadError {
    /// A block could not be read from the FTL.
    #[error(transparent)]
    Read(#[from] FtlError),
    /// A directory block did not decode.
    #[error(transparent)]
    Decode(#[from] DecodeError),
    /// The slot points at an extent block outside the meta zone.
    #[error("extent block {index} at {block} outside the meta zone")]
    LeafOutsideMeta {
        /// The entry of the slot.
        index: usize,
        /// The block it points at.
        block: u32,
    },
    /// An extent block that did not decode.
    #[error("extent block {block}: {source}")]
    Leaf {
        /// The block.
        block: u32,
        /// What is wrong with it.
        source: DecodeError,
    },
    /// An extent block holding another number of extents than the slot says.
    #[error("extent block {block} holds {found} extents, the inode says {expected}")]
    LeafCount {
        /// The block.
        block: u32,
        /// Extents it holds.
        found: usize,
        /// Extents the slot says it holds.
        expected: u32,
    },
    /// An empty extent, or one that overlaps or precedes the one before it.
    #[error("extent {extent:?} out of order")]
    ExtentOrder {
        /// The extent.
        extent: Extent,
    },
    /// An extent outside the zone its file kind lives in.
    #[error("extent {extent:?} outside its zone [{zone_start}, {zone_end})")]
    ExtentZone {
        /// The extent.
        extent: Extent,
        /// First block of the zone.
        zone_start: u32,
        /// Block past the end of the zone.
        zone_end: u32,
    },
    /// The slot's block count is not what its extents and extent blocks hold.
    #[error("block count {counted} but its map holds {held} blocks")]
    BlockCount {
        /// The slot's count.
        counted: u32,
        /// Blocks the map holds.
        held: u64,
    },
}
