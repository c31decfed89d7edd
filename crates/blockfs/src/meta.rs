//! Metadata write-back: which block is what, how it is rendered from the in-memory state, and
//! what fsync, fdatasync and sync write.
//!
//! The in-memory bitmaps, inodes and directories are the metadata cache: a change marks the
//! block that holds it dirty, and nothing reaches the FTL until a write-back. Adjacent dirty
//! blocks go to the FTL as one request, as the block layer would merge them.

use flash::{Flash, Nanos};
use ftl::Data;
use vfs::{FsError, ROOT};

use crate::inode::{self, leaf_capacity};
use crate::{device, live, BlockFs, MetaOwner};

/// What a metadata block holds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum MetaKind {
    Super,
    Bitmap,
    Inode,
    Dir,
    Extent,
}

impl<F: Flash> BlockFs<F> {
    /// Renders metadata block `b` from memory; `None` if it holds nothing now.
    fn render(&self, b: u32, out: &mut [u8]) -> Option<MetaKind> {
        let l = &self.sb.layout;
        out.fill(0);
        if b == 0 {
            self.sb.encode(out);
            return Some(MetaKind::Super);
        }
        let bits = l.bits_per_block();
        if l.block_bitmap.contains(b) {
            self.block_map
                .bytes((b - l.block_bitmap.start) * bits, bits, out);
            return Some(MetaKind::Bitmap);
        }
        if l.inode_bitmap.contains(b) {
            self.inode_map
                .bytes((b - l.inode_bitmap.start) * bits, bits, out);
            return Some(MetaKind::Bitmap);
        }
        if l.inode_table.contains(b) {
            let ipb = l.inodes_per_block();
            let isz = l.inode_bytes as usize;
            let cap = leaf_capacity(l.block_bytes);
            let first = (b - l.inode_table.start) * ipb;
            for k in 0..ipb {
                if let Some(i) = self.inodes.get(&(first + k)) {
                    inode::encode(i, &mut out[k as usize * isz..(k as usize + 1) * isz], cap);
                }
            }
            return Some(MetaKind::Inode);
        }
        match *self.owners.get(&b)? {
            MetaOwner::Dir { ino, index } => {
                self.dirs.get(&ino)?.encode_block(index, ino, out);
                Some(MetaKind::Dir)
            }
            MetaOwner::Leaf { ino, index } => {
                let exts = &self.inodes.get(&ino)?.extents;
                let cap = leaf_capacity(l.block_bytes);
                let from = (index as usize * cap).min(exts.len());
                let to = ((index as usize + 1) * cap).min(exts.len());
                inode::encode_leaf(ino, &exts[from..to], out);
                Some(MetaKind::Extent)
            }
        }
    }

    /// Writes those of `blocks` that are dirty to the FTL (no flush). Returns when the FTL has
    /// accepted them.
    pub(crate) fn write_back(&mut self, blocks: &[u32], at: Nanos) -> Result<Nanos, FsError> {
        let mut blocks: Vec<u32> = blocks
            .iter()
            .copied()
            .filter(|b| self.dirty.contains(b))
            .collect();
        blocks.sort_unstable();
        blocks.dedup();
        let bs = self.bs() as usize;
        let ipb = self.sb.layout.inodes_per_block();
        let mut block = vec![0u8; bs];
        let mut runs: Vec<(u32, Vec<u8>)> = Vec::new();
        for b in blocks {
            self.dirty.remove(&b);
            let Some(kind) = self.render(b, &mut block) else {
                continue;
            };
            let s = &mut self.stats;
            match kind {
                MetaKind::Super => s.super_blocks_written += 1,
                MetaKind::Bitmap => s.bitmap_blocks_written += 1,
                MetaKind::Inode => {
                    s.inode_blocks_written += 1;
                    let first = (b - self.sb.layout.inode_table.start) * ipb;
                    for ino in first..first + ipb {
                        if let Some(i) = self.inodes.get_mut(&ino) {
                            i.datasync_dirty = false;
                        }
                    }
                }
                MetaKind::Dir => s.dir_blocks_written += 1,
                MetaKind::Extent => s.extent_blocks_written += 1,
            }
            match runs.last_mut() {
                Some((first, bytes)) if *first as usize + bytes.len() / bs == b as usize => {
                    bytes.extend_from_slice(&block)
                }
                _ => runs.push((b, block.clone())),
            }
        }
        let mut done = at;
        for (first, bytes) in runs {
            let d = self
                .ftl
                .write(
                    at,
                    self.sb.layout.byte_offset(first),
                    bytes.len() as u64,
                    Data::Bytes(&bytes),
                )
                .map_err(device)?;
            done = done.max(d);
        }
        Ok(done)
    }

    /// fsync / fdatasync: the file's data (already with the FTL), the metadata needed to read
    /// it back, and for a new entry its directory's entry and inode, up the tree as far as the
    /// entries are new; then a flush.
    pub(crate) fn fsync_inode(&mut self, ino: u32, data_only: bool) -> Result<Nanos, FsError> {
        self.stats.fsyncs += 1;
        let at = self.now;
        let mut want = Vec::new();
        let mut cur = ino;
        loop {
            let tb = self.sb.layout.inode_block(cur);
            let i = live(&mut self.inodes, cur, "inode")?;
            let inode_needed = cur != ino
                || !data_only
                || i.new_entry
                || (i.datasync_dirty && self.cfg.fdatasync_writes_inode);
            if inode_needed {
                want.push(tb);
            }
            want.append(&mut i.assoc);
            let (new, parent) = (i.new_entry, i.parent);
            i.new_entry = false;
            if !new || cur == ROOT as u32 || !self.inodes.contains_key(&parent) {
                break;
            }
            cur = parent;
        }
        let t = self.write_back(&want, at)?;
        self.ftl.flush(t).map_err(device)
    }

    /// sync: every dirty metadata block, then a flush.
    pub(crate) fn sync_all(&mut self) -> Result<Nanos, FsError> {
        self.stats.syncs += 1;
        let all: Vec<u32> = self.dirty.iter().copied().collect();
        let t = self.write_back(&all, self.now)?;
        for i in self.inodes.values_mut() {
            i.assoc.clear();
            i.new_entry = false;
        }
        self.ftl.flush(t).map_err(device)
    }
}
