#![deny(clippy::unwrap_used, clippy::expect_used)]
#![warn(missing_docs)]
//! `blockfs`: an ext4-like block file system (no journal) on the page-mapping FTL, the block baseline the
//! lab compares with the object file system (OSSD-13 VI-A: ext4 on sFTL, discard on, no
//! journal traffic on the device).
//!
//! The file system lays a superblock, a block bitmap, an inode bitmap, an inode table,
//! directory blocks, extent blocks and data blocks over the FTL's logical byte space
//! ([`layout`]), and makes the writes a block file system really makes: file data goes to the
//! FTL as it is written (the FTL's write buffer plays the page cache's part); metadata is kept
//! in memory and written back, block by block, when dirty at fsync, fdatasync, sync, unmount
//! and every `writeback_interval_ns`. Freed write units are discarded (TRIM). There is no
//! journal: see `docs/BLOCKFS.md` for what survives a power cut.
//!
//! Everything the file system reads from the device is untrusted: a foreign or damaged
//! superblock is `FsError::Corrupted`; damaged or inconsistent inodes, directories, extent
//! blocks or bitmaps are reported by [`BlockFs::problems`] and [`FileSystem::check`], and such a
//! file system is mounted read-only.

mod alloc;
mod check;
pub mod config;
mod data;
mod dir;
pub mod error;
mod extent;
pub mod inode;
pub mod layout;
mod meta;
mod mount;
mod prealloc;

use std::collections::BTreeSet;

use flash::{Flash, Nanos};
use ftl::{Ftl, FtlError};
use rustc_hash::FxHashMap;
use serde::Serialize;
use vfs::oracle::check_name;
use vfs::{FileData, FileKind, FileStat, FileSystem, FsCounters, FsError, Ino, ReadInto};

use alloc::Bitmap;
pub use config::{BlockFsConfig, ConfigError};
use dir::{Dir, Entry};
pub use error::DecodeError;
use inode::Inode;
use layout::{Region, Superblock};
pub use prealloc::STREAM_BLOCKS;

/// What a block of the meta zone holds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum MetaOwner {
    /// Logical block `index` of directory `ino`.
    Dir { ino: u32, index: u32 },
    /// Extent block `index` of inode `ino`.
    Leaf { ino: u32, index: u32 },
}

/// The two zones blocks are allocated from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Zone {
    /// Directory and extent blocks (always real bytes).
    Meta,
    /// File data.
    Data,
}

/// Counters of the file system's own I/O, in blocks of the file system.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub struct Stats {
    /// Superblock writes.
    pub super_blocks_written: u64,
    /// Bitmap block writes (blocks and inodes).
    pub bitmap_blocks_written: u64,
    /// Inode table block writes.
    pub inode_blocks_written: u64,
    /// Directory block writes.
    pub dir_blocks_written: u64,
    /// Extent (leaf) block writes.
    pub extent_blocks_written: u64,
    /// Superblock reads.
    pub super_blocks_read: u64,
    /// Bitmap block reads.
    pub bitmap_blocks_read: u64,
    /// Inode table block reads.
    pub inode_blocks_read: u64,
    /// Directory block reads.
    pub dir_blocks_read: u64,
    /// Extent (leaf) block reads.
    pub extent_blocks_read: u64,
    /// File data blocks written.
    pub data_blocks_written: u64,
    /// File data blocks read.
    pub data_blocks_read: u64,
    /// Data blocks read to merge a partial-block write (or zero a truncated tail).
    pub data_rmw_reads: u64,
    /// TRIM requests sent to the FTL, and the blocks they covered.
    pub discards: u64,
    /// Blocks the TRIM requests covered.
    pub discarded_blocks: u64,
    /// fsync and fdatasync calls.
    pub fsyncs: u64,
    /// sync calls (every dirty metadata block written, then a flush).
    pub syncs: u64,
    /// Periodic write-backs of dirty metadata (the flusher).
    pub writebacks: u64,
}

impl Stats {
    /// Metadata blocks written: superblock, bitmaps, inode table, directory and extent blocks.
    pub fn metadata_blocks_written(&self) -> u64 {
        self.super_blocks_written
            + self.bitmap_blocks_written
            + self.inode_blocks_written
            + self.dir_blocks_written
            + self.extent_blocks_written
    }
}

/// The block file system over an FTL.
pub struct BlockFs<F: Flash> {
    pub(crate) ftl: Ftl<F>,
    pub(crate) cfg: BlockFsConfig,
    pub(crate) sb: Superblock,
    /// File system blocks per FTL write unit (1 when a block covers whole units).
    pub(crate) unit_blocks: u32,
    pub(crate) block_map: Bitmap,
    pub(crate) inode_map: Bitmap,
    pub(crate) inodes: FxHashMap<u32, Inode>,
    pub(crate) dirs: FxHashMap<u32, Dir>,
    pub(crate) owners: FxHashMap<u32, MetaOwner>,
    /// Metadata blocks changed in memory and not yet written.
    pub(crate) dirty: BTreeSet<u32>,
    pub(crate) free_data: u32,
    pub(crate) free_meta: u32,
    pub(crate) free_inodes: u32,
    pub(crate) rotor_data: u32,
    pub(crate) rotor_meta: u32,
    /// Runs freed by the current operation, discarded at its end.
    pub(crate) pending_discard: Vec<(u32, u32)>,
    /// Preallocation: blocks set aside in memory for files' next appends.
    pub(crate) windows: prealloc::Windows,
    pub(crate) now: Nanos,
    pub(crate) last_writeback: Nanos,
    pub(crate) stats: Stats,
    /// What mount found wrong; not empty means read-only.
    pub(crate) problems: Vec<String>,
    pub(crate) was_clean: bool,
    pub(crate) fps: Vec<u64>,
}

pub(crate) fn device(e: FtlError) -> FsError {
    match (e.unit(), e) {
        (Some(unit), e) => FsError::Damaged {
            what: e.to_string(),
            unit,
        },
        (None, FtlError::Corrupted(s)) => FsError::Corrupted(s),
        (None, e) => FsError::Device(e.to_string()),
    }
}

/// `what` `key` is missing from the in-memory tables although another table names it: the
/// tables disagree (a bug), reported as corruption rather than a panic.
pub(crate) fn missing(what: &str, key: u32) -> FsError {
    FsError::Corrupted(format!("{what} {key} is missing from the in-memory tables"))
}

/// The entry of `key` in one of the in-memory tables (inodes, directories), or [`missing`].
pub(crate) fn live<'a, V>(
    table: &'a mut FxHashMap<u32, V>,
    key: u32,
    what: &str,
) -> Result<&'a mut V, FsError> {
    table.get_mut(&key).ok_or_else(|| missing(what, key))
}

impl<F: Flash> BlockFs<F> {
    /// The FTL below, for its counters.
    pub fn ftl(&self) -> &Ftl<F> {
        &self.ftl
    }
    /// The FTL below, for fault injection.
    pub fn ftl_mut(&mut self) -> &mut Ftl<F> {
        &mut self.ftl
    }
    /// Counters of the file system's own I/O so far.
    pub fn stats(&self) -> Stats {
        self.stats
    }
    /// The settings the file system was formatted or mounted with.
    pub fn config(&self) -> &BlockFsConfig {
        &self.cfg
    }
    /// The on-disk geometry.
    pub fn layout(&self) -> &layout::Layout {
        &self.sb.layout
    }
    /// What mount found damaged or inconsistent (the file system is read-only if any).
    pub fn problems(&self) -> &[String] {
        &self.problems
    }
    /// False if the last mount found the file system not cleanly unmounted.
    pub fn was_clean(&self) -> bool {
        self.was_clean
    }
    /// Free blocks of the data zone.
    pub fn free_data_blocks(&self) -> u32 {
        self.free_data
    }
    /// Free inode slots.
    pub fn free_inodes(&self) -> u32 {
        self.free_inodes
    }
    /// The physical extents of a file or directory (tests, reports).
    pub fn extents(&self, ino: Ino) -> Option<Vec<inode::Extent>> {
        self.inodes.get(&(ino as u32)).map(|i| i.extents.clone())
    }

    /// Writes everything back and hands the FTL back (close it to checkpoint its map).
    pub fn unmount(self) -> Result<(Ftl<F>, Nanos), FsError> {
        self.unmount_or_return().map_err(|(e, _)| e)
    }

    /// [`BlockFs::unmount`], handing the file system back when the write-back fails (a power
    /// cut during the unmount, in torture runs).
    #[allow(clippy::result_large_err)] // the file system travels back by design, once
    pub fn unmount_or_return(mut self) -> Result<(Ftl<F>, Nanos), (FsError, Box<Self>)> {
        if self.problems.is_empty() {
            self.sb.clean = true;
            self.dirty.insert(0);
            if let Err(e) = self.sync() {
                return Err((e, Box::new(self)));
            }
        }
        Ok((self.ftl, self.now))
    }

    /// Drops every change not yet written, as a crash does; the FTL keeps what it was given.
    pub fn crash(self) -> Ftl<F> {
        self.ftl
    }

    pub(crate) fn bs(&self) -> u64 {
        self.sb.layout.block_bytes as u64
    }

    pub(crate) fn writable(&self) -> Result<(), FsError> {
        match self.problems.first() {
            None => Ok(()),
            Some(p) => Err(FsError::Corrupted(format!(
                "mounted read-only, {} problem(s) found at mount, the first: {p}",
                self.problems.len()
            ))),
        }
    }

    pub(crate) fn zone(&self, z: Zone) -> Region {
        match z {
            Zone::Meta => self.sb.layout.meta_zone,
            Zone::Data => self.sb.layout.data_zone,
        }
    }

    /// Marks a metadata block dirty, on behalf of inode `owner` (an fsync of it writes it).
    pub(crate) fn touch(&mut self, block: u32, owner: Option<u32>) {
        self.dirty.insert(block);
        if let Some(i) = owner.and_then(|o| self.inodes.get_mut(&o)) {
            i.associate(block);
        }
    }

    /// Marks an inode changed; `datasync` if its size or block map changed.
    pub(crate) fn touch_inode(&mut self, ino: u32, datasync: bool) {
        let b = self.sb.layout.inode_block(ino);
        self.dirty.insert(b);
        if let Some(i) = self.inodes.get_mut(&ino) {
            i.datasync_dirty |= datasync;
        }
    }

    fn block_bitmap_block(&self, b: u32) -> u32 {
        self.sb.layout.block_bitmap.start + b / self.sb.layout.bits_per_block()
    }

    fn inode_bitmap_block(&self, ino: u32) -> u32 {
        self.sb.layout.inode_bitmap.start + ino / self.sb.layout.bits_per_block()
    }

    /// Takes a free run of at most `want` blocks in zone `z`, as close after `goal` as there
    /// is one (`None`: the zone's rotor), preferring one with `prefer` free blocks.
    pub(crate) fn alloc_run(
        &mut self,
        z: Zone,
        goal: Option<u32>,
        want: u32,
        prefer: u32,
        owner: u32,
    ) -> Option<(u32, u32)> {
        let zone = self.zone(z);
        let rotor = match z {
            Zone::Meta => self.rotor_meta,
            Zone::Data => self.rotor_data,
        };
        let (start, len) = alloc::find_run(
            &self.block_map,
            &self.windows.reserved,
            zone,
            goal.unwrap_or(rotor),
            want,
            prefer,
        )?;
        self.claim_run(start, len, owner);
        if goal.is_none() {
            let next = if start + len >= zone.end() {
                zone.start
            } else {
                start + len
            };
            match z {
                Zone::Meta => self.rotor_meta = next,
                Zone::Data => self.rotor_data = next,
            }
        }
        Some((start, len))
    }

    /// Marks a free run in use, on behalf of `owner`.
    pub(crate) fn claim_run(&mut self, start: u32, len: u32, owner: u32) {
        for b in start..start + len {
            debug_assert!(!self.block_map.get(b), "claiming used block {b}");
            self.block_map.set(b, true);
        }
        for bb in self.block_bitmap_block(start)..=self.block_bitmap_block(start + len - 1) {
            self.touch(bb, Some(owner));
        }
        if self.sb.layout.meta_zone.contains(start) {
            self.free_meta -= len;
        } else {
            self.free_data -= len;
        }
    }

    /// Gives runs back to the bitmap (dirtied on behalf of `owner`) and queues their discard.
    pub(crate) fn free_runs(&mut self, runs: &[(u32, u32)], owner: u32) {
        let meta = self.sb.layout.meta_zone;
        for &(start, len) in runs {
            for b in start..start + len {
                debug_assert!(self.block_map.get(b), "freeing free block {b}");
                self.block_map.set(b, false);
                if meta.contains(b) {
                    self.owners.remove(&b);
                    self.dirty.remove(&b);
                    self.free_meta += 1;
                } else {
                    self.free_data += 1;
                }
            }
            for bb in self.block_bitmap_block(start)..=self.block_bitmap_block(start + len - 1) {
                self.touch(bb, Some(owner));
            }
            self.pending_discard.push((start, len));
        }
    }

    /// Discards the write units the freed runs left entirely free (a TRIM of part of a unit
    /// frees nothing in the FTL). Returns when the TRIMs complete.
    pub(crate) fn issue_discards(&mut self, at: Nanos) -> Result<Nanos, FsError> {
        let runs = std::mem::take(&mut self.pending_discard);
        if !self.cfg.discard || runs.is_empty() {
            return Ok(at);
        }
        let ub = self.unit_blocks;
        let mut units: Vec<u32> = Vec::new();
        for (start, len) in runs {
            for u in start / ub..=(start + len - 1) / ub {
                let first = u * ub;
                let whole = (first..first + ub)
                    .all(|b| b >= self.sb.layout.blocks || !self.block_map.get(b));
                if whole && first + ub <= self.sb.layout.blocks {
                    units.push(u);
                }
            }
        }
        units.sort_unstable();
        units.dedup();
        let mut t = at;
        let mut k = 0;
        while k < units.len() {
            let mut n = 1;
            while k + n < units.len() && units[k + n] == units[k] + n as u32 {
                n += 1;
            }
            let first = units[k] * ub;
            let blocks = n as u32 * ub;
            let done = self
                .ftl
                .trim(
                    at,
                    self.sb.layout.byte_offset(first),
                    blocks as u64 * self.bs(),
                )
                .map_err(device)?;
            t = t.max(done);
            self.stats.discards += 1;
            self.stats.discarded_blocks += blocks as u64;
            k += n;
        }
        Ok(t)
    }

    /// Takes the lowest free inode number.
    fn alloc_inode(&mut self, owner: u32) -> Option<u32> {
        let ino = self.inode_map.next_clear(1, self.sb.layout.inodes)?;
        self.inode_map.set(ino, true);
        self.free_inodes -= 1;
        let b = self.inode_bitmap_block(ino);
        self.touch(b, Some(owner));
        Some(ino)
    }

    /// Brings inode `ino`'s extent blocks to the number its map needs and marks those holding
    /// extents from index `changed` on dirty.
    pub(crate) fn fit_leaves(&mut self, ino: u32, changed: usize) -> Result<(), FsError> {
        let (isz, bs) = (self.sb.layout.inode_bytes, self.sb.layout.block_bytes);
        let n = self.inodes[&ino].extents.len();
        let needed = inode::leaves_needed(n, isz, bs)
            .ok_or_else(|| FsError::NoSpace(format!("inode {ino}: {n} extents, too fragmented")))?;
        loop {
            let have = self.inodes[&ino].leaves.len();
            if have >= needed {
                break;
            }
            let goal = self.inodes[&ino].leaves.last().map(|&l| l + 1);
            let (leaf, _) = self
                .alloc_run(Zone::Meta, goal, 1, 1, ino)
                .ok_or_else(|| FsError::NoSpace("no room for an extent block".into()))?;
            self.owners.insert(
                leaf,
                MetaOwner::Leaf {
                    ino,
                    index: have as u32,
                },
            );
            live(&mut self.inodes, ino, "inode")?.leaves.push(leaf);
        }
        while self.inodes[&ino].leaves.len() > needed {
            let Some(leaf) = live(&mut self.inodes, ino, "inode")?.leaves.pop() else {
                break;
            };
            self.free_runs(&[(leaf, 1)], ino);
        }
        let cap = inode::leaf_capacity(bs);
        let leaves = self.inodes[&ino].leaves.clone();
        for &leaf in leaves.iter().skip(changed / cap) {
            self.touch(leaf, Some(ino));
        }
        Ok(())
    }

    /// The directory inode `dir`, or the error the interface prescribes.
    fn dir_ino(&self, dir: Ino) -> Result<u32, FsError> {
        let d = u32::try_from(dir).map_err(|_| FsError::NotFound(format!("inode {dir}")))?;
        match self.inodes.get(&d) {
            Some(i) if i.kind == FileKind::Dir && self.dirs.contains_key(&d) => Ok(d),
            Some(_) => Err(FsError::NotDir(format!("inode {dir}"))),
            None => Err(FsError::NotFound(format!("inode {dir}"))),
        }
    }

    /// The file inode `ino`, or the error the interface prescribes.
    pub(crate) fn file_ino(&self, ino: Ino) -> Result<u32, FsError> {
        let f = u32::try_from(ino).map_err(|_| FsError::NotFound(format!("inode {ino}")))?;
        match self.inodes.get(&f) {
            Some(i) if i.kind == FileKind::File => Ok(f),
            Some(_) => Err(FsError::IsDir(format!("inode {ino}"))),
            None => Err(FsError::NotFound(format!("inode {ino}"))),
        }
    }

    /// Adds a directory block to `d`; returns its logical index.
    fn grow_dir(&mut self, d: u32) -> Result<u32, FsError> {
        let index = self.dirs[&d].blocks.len() as u32;
        let goal = index
            .checked_sub(1)
            .and_then(|last| self.inodes[&d].map(last))
            .map(|p| p + 1);
        let (phys, _) = self
            .alloc_run(Zone::Meta, goal, 1, 1, d)
            .ok_or_else(|| FsError::NoSpace("no room for a directory block".into()))?;
        let changed = live(&mut self.inodes, d, "directory inode")?.insert(index, phys, 1);
        if let Err(e) = self.fit_leaves(d, changed) {
            let i = live(&mut self.inodes, d, "directory inode")?;
            i.unmap(index, index + 1);
            self.free_runs(&[(phys, 1)], d);
            // Give back any extent block taken before the failure (shrinking cannot fail).
            self.fit_leaves(d, 0)?;
            self.pending_discard.clear();
            return Err(e);
        }
        let bs = self.bs();
        live(&mut self.inodes, d, "directory inode")?.size += bs;
        live(&mut self.dirs, d, "directory")?.add_block();
        self.owners.insert(phys, MetaOwner::Dir { ino: d, index });
        self.touch_inode(d, true);
        Ok(index)
    }

    /// The physical block of directory `d`'s logical block `index`.
    pub(crate) fn dir_block(&self, d: u32, index: u32) -> Result<u32, FsError> {
        self.inodes[&d].map(index).ok_or_else(|| {
            FsError::Corrupted(format!(
                "directory {d}: block {index} is not mapped (every directory block is)"
            ))
        })
    }

    fn make(&mut self, dir: Ino, name: &str, kind: FileKind) -> Result<Ino, FsError> {
        self.writable()?;
        check_name(name)?;
        let d = self.dir_ino(dir)?;
        if self.dirs[&d].get(name).is_some() {
            return Err(FsError::Exists(name.into()));
        }
        if self.free_inodes == 0 {
            return Err(FsError::NoSpace("no free inode".into()));
        }
        let at = self.now;
        let bs = self.bs() as usize;
        let index = match self.dirs[&d].block_with_room(name, bs) {
            Some(b) => b,
            None => self.grow_dir(d)?,
        };
        let ino = self.alloc_inode(d).ok_or_else(|| {
            FsError::Corrupted("the inode bitmap has no free inode but one was counted".into())
        })?;
        live(&mut self.dirs, d, "directory")?.add(
            index,
            Entry {
                name: name.into(),
                ino,
                kind,
            },
        );
        let phys = self.dir_block(d, index)?;
        self.touch(phys, Some(d));
        self.inodes.insert(ino, Inode::new(kind, d, at));
        if kind == FileKind::Dir {
            self.dirs.insert(ino, Dir::default());
        }
        self.touch_inode(ino, true);
        live(&mut self.inodes, d, "directory inode")?.mtime = at;
        self.touch_inode(d, false);
        Ok(ino as Ino)
    }

    /// Removes entry `name` of `d` (which exists) and frees its inode and blocks.
    fn remove(&mut self, d: u32, name: &str, ino: u32) -> Result<(), FsError> {
        let at = self.now;
        let index = live(&mut self.dirs, d, "directory")?
            .remove(name)
            .ok_or_else(|| FsError::Corrupted(format!("directory {d}: no entry {name}")))?;
        let phys = self.dir_block(d, index)?;
        self.touch(phys, Some(d));
        self.release_window(ino);
        let gone = self
            .inodes
            .remove(&ino)
            .ok_or_else(|| missing("inode", ino))?;
        self.dirs.remove(&ino);
        let mut runs: Vec<(u32, u32)> = gone.extents.iter().map(|e| (e.start, e.len)).collect();
        runs.extend(gone.leaves.iter().map(|&l| (l, 1)));
        self.free_runs(&runs, d);
        self.inode_map.set(ino, false);
        self.free_inodes += 1;
        let (ib, tb) = (
            self.inode_bitmap_block(ino),
            self.sb.layout.inode_block(ino),
        );
        self.touch(ib, Some(d));
        self.touch(tb, Some(d));
        live(&mut self.inodes, d, "directory inode")?.mtime = at;
        self.touch_inode(d, false);
        let done = self.issue_discards(at)?;
        self.now = self.now.max(done);
        Ok(())
    }

    /// Runs the flusher if its interval has passed.
    fn tick(&mut self) -> Result<(), FsError> {
        let every = self.cfg.writeback_interval_ns;
        if every == 0 || self.now < self.last_writeback.saturating_add(every) {
            return Ok(());
        }
        self.last_writeback = self.now;
        if self.problems.is_empty() && !self.dirty.is_empty() {
            self.stats.writebacks += 1;
            let all: Vec<u32> = self.dirty.iter().copied().collect();
            let done = self.write_back(&all, self.now)?;
            self.now = self.now.max(done);
            // Everything is written: no fsync owes any of it any more.
            for i in self.inodes.values_mut() {
                i.assoc.clear();
            }
        }
        Ok(())
    }
}

impl<F: Flash> FileSystem for BlockFs<F> {
    fn name(&self) -> &str {
        "ext4-like"
    }

    fn lookup(&mut self, dir: Ino, name: &str) -> Result<Option<Ino>, FsError> {
        let d = self.dir_ino(dir)?;
        Ok(self.dirs[&d].get(name).map(|i| i as Ino))
    }

    fn create(&mut self, dir: Ino, name: &str) -> Result<Ino, FsError> {
        self.tick()?;
        self.make(dir, name, FileKind::File)
    }

    fn mkdir(&mut self, dir: Ino, name: &str) -> Result<Ino, FsError> {
        self.tick()?;
        self.make(dir, name, FileKind::Dir)
    }

    fn unlink(&mut self, dir: Ino, name: &str) -> Result<(), FsError> {
        self.tick()?;
        self.writable()?;
        let d = self.dir_ino(dir)?;
        let ino = self.dirs[&d]
            .get(name)
            .ok_or_else(|| FsError::NotFound(name.into()))?;
        if self.inodes[&ino].kind == FileKind::Dir {
            return Err(FsError::IsDir(name.into()));
        }
        self.remove(d, name, ino)
    }

    fn rmdir(&mut self, dir: Ino, name: &str) -> Result<(), FsError> {
        self.tick()?;
        self.writable()?;
        let d = self.dir_ino(dir)?;
        let ino = self.dirs[&d]
            .get(name)
            .ok_or_else(|| FsError::NotFound(name.into()))?;
        match self.dirs.get(&ino) {
            None => return Err(FsError::NotDir(name.into())),
            Some(sub) if !sub.is_empty() => return Err(FsError::NotEmpty(name.into())),
            Some(_) => {}
        }
        self.remove(d, name, ino)
    }

    fn readdir(&mut self, dir: Ino) -> Result<Vec<(String, Ino)>, FsError> {
        let d = self.dir_ino(dir)?;
        Ok(self.dirs[&d]
            .sorted()
            .into_iter()
            .map(|(n, i)| (n, i as Ino))
            .collect())
    }

    fn write(
        &mut self,
        ino: Ino,
        offset: u64,
        len: u64,
        data: FileData<'_>,
    ) -> Result<(), FsError> {
        data.check_len(len)?;
        self.tick()?;
        self.writable()?;
        let f = self.file_ino(ino)?;
        let done = self.write_file(f, offset, len, data)?;
        self.now = self.now.max(done);
        Ok(())
    }

    fn read(&mut self, ino: Ino, offset: u64, into: ReadInto<'_>) -> Result<u64, FsError> {
        self.tick()?;
        let f = self.file_ino(ino)?;
        let (n, done) = self.read_file(f, offset, into)?;
        self.now = self.now.max(done);
        Ok(n)
    }

    fn truncate(&mut self, ino: Ino, size: u64) -> Result<(), FsError> {
        self.tick()?;
        self.writable()?;
        let f = self.file_ino(ino)?;
        let done = self.truncate_file(f, size)?;
        self.now = self.now.max(done);
        Ok(())
    }

    fn stat(&mut self, ino: Ino) -> Result<FileStat, FsError> {
        let i = u32::try_from(ino)
            .ok()
            .and_then(|i| self.inodes.get(&i))
            .ok_or_else(|| FsError::NotFound(format!("inode {ino}")))?;
        Ok(FileStat {
            ino,
            kind: i.kind,
            size: i.size,
            modified_ns: i.mtime,
        })
    }

    fn fsync(&mut self, ino: Ino, data_only: bool) -> Result<(), FsError> {
        self.tick()?;
        let i = u32::try_from(ino)
            .ok()
            .filter(|i| self.inodes.contains_key(i))
            .ok_or_else(|| FsError::NotFound(format!("inode {ino}")))?;
        let done = self.fsync_inode(i, data_only)?;
        self.now = self.now.max(done);
        Ok(())
    }

    fn sync(&mut self) -> Result<(), FsError> {
        let done = self.sync_all()?;
        self.now = self.now.max(done);
        Ok(())
    }

    fn set_time(&mut self, at: Nanos) {
        self.now = self.now.max(at);
    }

    fn now(&self) -> Nanos {
        self.now
    }

    fn background(&mut self, from: Nanos, until: Nanos) -> Result<Nanos, FsError> {
        self.set_time(from);
        self.tick()?;
        let done = self
            .ftl
            .background(self.now, until.max(self.now))
            .map_err(device)?;
        self.now = self.now.max(done);
        Ok(self.now)
    }

    fn counters(&self) -> FsCounters {
        let s = self.stats;
        vec![
            ("metadata_blocks_written", s.metadata_blocks_written()),
            ("super_blocks_written", s.super_blocks_written),
            ("bitmap_blocks_written", s.bitmap_blocks_written),
            ("inode_blocks_written", s.inode_blocks_written),
            ("dir_blocks_written", s.dir_blocks_written),
            ("extent_blocks_written", s.extent_blocks_written),
            ("super_blocks_read", s.super_blocks_read),
            ("bitmap_blocks_read", s.bitmap_blocks_read),
            ("inode_blocks_read", s.inode_blocks_read),
            ("dir_blocks_read", s.dir_blocks_read),
            ("extent_blocks_read", s.extent_blocks_read),
            ("data_blocks_written", s.data_blocks_written),
            ("data_blocks_read", s.data_blocks_read),
            ("data_rmw_reads", s.data_rmw_reads),
            ("discards", s.discards),
            ("discarded_blocks", s.discarded_blocks),
            ("fsyncs", s.fsyncs),
            ("syncs", s.syncs),
            ("writebacks", s.writebacks),
        ]
    }

    fn check(&mut self) -> Result<Vec<String>, FsError> {
        let mut found = self.problems.clone();
        found.extend(self.check_state());
        if let Err(e) = self.ftl.check() {
            found.push(format!("FTL: {e}"));
        }
        Ok(found)
    }
}
