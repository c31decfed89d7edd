//! The extent: a run of a file's logical blocks at contiguous physical blocks, the unit the
//! inode's extent tree maps (docs/BLOCKFS.md).

/// A run of blocks: logical blocks `[logical, logical + len)` of a file at physical blocks
/// `[start, start + len)`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Extent {
    /// First logical block of the file the run covers.
    pub logical: u32,
    /// First physical block of the run.
    pub start: u32,
    /// Blocks in the run.
    pub len: u32,
}

impl Extent {
    /// One past the last logical block of the run.
    pub fn logical_end(&self) -> u32 {
        self.logical + self.len
    }
}
