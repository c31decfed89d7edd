//! mkfs and mount.
//!
//! `format` discards the whole logical space (as `mke2fs` does on a device that supports
//! discard), then writes the superblock, both bitmaps and the root inode. The rest of the inode
//! table is never written: its slots read as zeros (free) from the discarded space, as ext4's
//! lazily initialised inode tables do.
//!
//! `mount` reads the superblock, the bitmaps, the inode table blocks holding inodes in use,
//! their extent blocks and every directory block, into memory, where they stay (the metadata
//! cache never evicts). What it finds damaged or inconsistent goes to [`BlockFs::problems`]
//! and makes the mount read-only; only an unusable superblock fails the mount.

use std::collections::BTreeSet;

use flash::{Flash, Nanos};
use ftl::{Ftl, FtlError, ReadOut};
use rustc_hash::FxHashMap;
use vfs::{FileKind, FsError, ROOT};

use crate::alloc::Bitmap;
use crate::dir::{decode_block, Dir};
use crate::error::LoadError;
use crate::inode::{self, DiskInode, Extent, Inode};
use crate::layout::{DataMode, Layout, Superblock};
use crate::{device, BlockFs, BlockFsConfig, MetaOwner, Stats};

impl<F: Flash> BlockFs<F> {
    fn empty(ftl: Ftl<F>, cfg: BlockFsConfig, sb: Superblock, now: Nanos) -> Self {
        let l = sb.layout;
        BlockFs {
            unit_blocks: (ftl.unit_bytes() as u32 / l.block_bytes).max(1),
            ftl,
            cfg,
            sb,
            block_map: Bitmap::new(l.blocks),
            inode_map: Bitmap::new(l.inodes),
            inodes: FxHashMap::default(),
            dirs: FxHashMap::default(),
            owners: FxHashMap::default(),
            dirty: BTreeSet::new(),
            free_data: 0,
            free_meta: 0,
            free_inodes: 0,
            rotor_data: l.data_zone.start,
            rotor_meta: l.meta_zone.start,
            pending_discard: Vec::new(),
            windows: crate::prealloc::Windows::new(l.blocks),
            now,
            last_writeback: now,
            stats: Stats::default(),
            problems: Vec::new(),
            was_clean: true,
            fps: Vec::new(),
        }
    }

    /// Free counts from the bitmaps.
    pub(crate) fn recount(&mut self) {
        let l = self.sb.layout;
        let used = |z: crate::layout::Region| self.block_map.count_set(z.start, z.end()) as u32;
        self.free_data = l.data_zone.len - used(l.data_zone);
        self.free_meta = l.meta_zone.len - used(l.meta_zone);
        self.free_inodes = l.inodes - self.inode_map.count_set(0, l.inodes) as u32;
    }

    /// mkfs: a new, empty file system over the whole FTL, mounted.
    pub fn format(mut ftl: Ftl<F>, cfg: BlockFsConfig, at: Nanos) -> Result<Self, FsError> {
        let layout = Layout::plan(&cfg, ftl.capacity_bytes(), ftl.unit_bytes() as u64)
            .map_err(|e| FsError::Invalid(e.to_string()))?;
        let t = ftl.trim(at, 0, ftl.capacity_bytes()).map_err(device)?;
        let sb = Superblock {
            layout,
            data_mode: DataMode::Unset,
            clean: false,
        };
        let mut fs = Self::empty(ftl, cfg, sb, t);
        for b in 0..layout.meta_zone.start {
            fs.block_map.set(b, true);
        }
        fs.inode_map.set(0, true);
        fs.inode_map.set(ROOT as u32, true);
        let mut root = Inode::new(FileKind::Dir, ROOT as u32, t);
        root.new_entry = false;
        fs.inodes.insert(ROOT as u32, root);
        fs.dirs.insert(ROOT as u32, Dir::default());
        fs.recount();
        fs.dirty.insert(0);
        fs.dirty
            .extend(layout.block_bitmap.start..layout.block_bitmap.end());
        fs.dirty
            .extend(layout.inode_bitmap.start..layout.inode_bitmap.end());
        fs.dirty.insert(layout.inode_block(ROOT as u32));
        fs.now = fs.sync_all()?;
        fs.last_writeback = fs.now;
        Ok(fs)
    }

    /// Mounts the file system the FTL holds. Fails only if there is no usable superblock.
    pub fn mount(ftl: Ftl<F>, cfg: BlockFsConfig, at: Nanos) -> Result<Self, FsError> {
        Self::mount_or_return(ftl, cfg, at).map_err(|(e, _)| e)
    }

    /// [`BlockFs::mount`], handing the FTL back when it fails (a power cut while mount marks
    /// the image in use is retried on the same device by torture runs).
    #[allow(clippy::result_large_err)] // the FTL travels back by design, once per mount
    pub fn mount_or_return(
        mut ftl: Ftl<F>,
        cfg: BlockFsConfig,
        at: Nanos,
    ) -> Result<Self, (FsError, Box<Ftl<F>>)> {
        if let Err(e) = cfg.validate() {
            return Err((FsError::Invalid(e.to_string()), Box::new(ftl)));
        }
        let mut first = vec![0u8; 512];
        let t = match ftl.read(at, 0, 512, ReadOut::Bytes(&mut first)) {
            Ok(t) => t,
            Err(e) => {
                let what = format!("superblock unreadable: {e}");
                let e = match e.unit() {
                    Some(unit) => FsError::Damaged { what, unit },
                    None => FsError::Corrupted(what),
                };
                return Err((e, Box::new(ftl)));
            }
        };
        let sb = match Superblock::decode(&first, ftl.capacity_bytes()) {
            Ok(sb) => sb,
            Err(e) => return Err((e, Box::new(ftl))),
        };
        let mut fs = Self::empty(ftl, cfg, sb, t);
        fs.stats.super_blocks_read += 1;
        fs.was_clean = sb.clean;
        let t = fs.load(t);
        fs.recount();
        let found = fs.check_state();
        fs.problems.extend(found);
        fs.now = t;
        if fs.problems.is_empty() {
            // Mark the image in use, so that a mount after a crash knows it was not unmounted.
            fs.sb.clean = false;
            let marked = fs
                .write_back_super(t)
                .and_then(|d| fs.ftl.flush(d).map_err(device));
            match marked {
                Ok(done) => fs.now = done,
                Err(e) => return Err((e, Box::new(fs.ftl))),
            }
        }
        fs.last_writeback = fs.now;
        Ok(fs)
    }

    fn write_back_super(&mut self, at: Nanos) -> Result<Nanos, FsError> {
        self.dirty.insert(0);
        self.write_back(&[0], at)
    }

    /// Reads block `b` into `out`; returns when done.
    fn read_block(&mut self, at: Nanos, b: u32, out: &mut [u8]) -> Result<Nanos, FtlError> {
        let bs = self.bs();
        self.ftl.read(at, b as u64 * bs, bs, ReadOut::Bytes(out))
    }

    /// Loads every piece of metadata; what is wrong goes to `problems`.
    fn load(&mut self, at: Nanos) -> Nanos {
        let mut done = at;
        let l = self.sb.layout;
        let bits = l.bits_per_block();
        let mut buf = vec![0u8; l.block_bytes as usize];
        for (region, is_inode_map) in [(l.block_bitmap, false), (l.inode_bitmap, true)] {
            for k in 0..region.len {
                match self.read_block(at, region.start + k, &mut buf) {
                    Ok(d) => {
                        done = done.max(d);
                        let map = if is_inode_map {
                            &mut self.inode_map
                        } else {
                            &mut self.block_map
                        };
                        map.load(k * bits, bits, &buf);
                    }
                    Err(e) => self
                        .problems
                        .push(format!("bitmap block {}: {e}", region.start + k)),
                }
                self.stats.bitmap_blocks_read += 1;
            }
        }
        let disk = self.load_inode_table(at, &mut done, &mut buf);
        for (ino, d) in disk {
            match self.load_inode(at, &mut done, ino, d, &mut buf) {
                Ok(i) => {
                    for (index, &leaf) in i.leaves.iter().enumerate() {
                        let index = index as u32;
                        self.owners.insert(leaf, MetaOwner::Leaf { ino, index });
                    }
                    self.inodes.insert(ino, i);
                }
                Err(e) => self.problems.push(format!("inode {ino}: {e}")),
            }
        }
        let mut dirs: Vec<u32> = self
            .inodes
            .iter()
            .filter(|(_, i)| i.kind == FileKind::Dir)
            .map(|(&ino, _)| ino)
            .collect();
        dirs.sort_unstable();
        for d in dirs {
            let dir = self.load_dir(at, &mut done, d, &mut buf);
            self.dirs.insert(d, dir);
        }
        done
    }

    /// Reads the inode table blocks holding inodes in use; returns the decoded inodes.
    fn load_inode_table(
        &mut self,
        at: Nanos,
        done: &mut Nanos,
        buf: &mut [u8],
    ) -> Vec<(u32, DiskInode)> {
        let l = self.sb.layout;
        let ipb = l.inodes_per_block();
        let isz = l.inode_bytes as usize;
        let mut out = Vec::new();
        if !self.inode_map.get(0) {
            self.problems
                .push("inode 0 is not reserved in the inode bitmap".into());
        }
        for k in 0..l.inode_table.len {
            let first = k * ipb;
            if !(first..first + ipb).any(|i| i != 0 && i < l.inodes && self.inode_map.get(i)) {
                continue;
            }
            self.stats.inode_blocks_read += 1;
            match self.read_block(at, l.inode_table.start + k, buf) {
                Ok(d) => *done = (*done).max(d),
                Err(e) => {
                    self.problems.push(format!("inode table block {k}: {e}"));
                    continue;
                }
            }
            for s in 0..ipb {
                let ino = first + s;
                if ino == 0 || ino >= l.inodes {
                    continue;
                }
                let used = self.inode_map.get(ino);
                match (
                    inode::decode(&buf[s as usize * isz..(s as usize + 1) * isz]),
                    used,
                ) {
                    (Ok(Some(d)), true) => out.push((ino, d)),
                    (Ok(None), false) => {}
                    (Ok(None), true) => self.problems.push(format!(
                        "inode {ino} is in use in the inode bitmap but its slot is empty"
                    )),
                    (Ok(Some(_)), false) | (Err(_), false) => self.problems.push(format!(
                        "inode {ino} is in the inode table but free in the inode bitmap"
                    )),
                    (Err(e), true) => self.problems.push(format!("inode {ino}: {e}")),
                }
            }
        }
        out
    }

    /// Builds an inode from its slot and extent blocks, checking every block it names.
    fn load_inode(
        &mut self,
        at: Nanos,
        done: &mut Nanos,
        ino: u32,
        d: DiskInode,
        buf: &mut [u8],
    ) -> Result<Inode, LoadError> {
        let l = self.sb.layout;
        let mut extents = Vec::new();
        let mut leaves = Vec::new();
        if d.depth == 0 {
            extents = d.entries;
        } else {
            for (k, e) in d.entries.iter().enumerate() {
                if !l.meta_zone.contains(e.start) {
                    return Err(LoadError::LeafOutsideMeta {
                        index: k,
                        block: e.start,
                    });
                }
                self.stats.extent_blocks_read += 1;
                *done = (*done).max(self.read_block(at, e.start, buf)?);
                let got = inode::decode_leaf(ino, buf).map_err(|source| LoadError::Leaf {
                    block: e.start,
                    source,
                })?;
                if got.len() != e.len as usize {
                    return Err(LoadError::LeafCount {
                        block: e.start,
                        found: got.len(),
                        expected: e.len,
                    });
                }
                extents.extend(got);
                leaves.push(e.start);
            }
        }
        let zone = match d.kind {
            FileKind::File => l.data_zone,
            FileKind::Dir => l.meta_zone,
            FileKind::Symlink | FileKind::Special(_) => {
                unreachable!("blockfs makes no symbolic links or special files")
            }
        };
        check_extents(&extents, zone)?;
        let held = extents.iter().map(|e| e.len as u64).sum::<u64>() + leaves.len() as u64;
        if held != d.blocks as u64 {
            return Err(LoadError::BlockCount {
                counted: d.blocks,
                held,
            });
        }
        Ok(Inode {
            kind: d.kind,
            parent: d.parent,
            size: d.size,
            mtime: d.mtime,
            extents,
            leaves,
            datasync_dirty: false,
            new_entry: false,
            assoc: Vec::new(),
        })
    }

    /// Reads directory `d`'s blocks; damaged blocks are reported and read as empty.
    fn load_dir(&mut self, at: Nanos, done: &mut Nanos, d: u32, buf: &mut [u8]) -> Dir {
        let mut dir = Dir::default();
        let n = self.inodes[&d].mapped_end();
        for index in 0..n {
            let Some(phys) = self.inodes[&d].map(index) else {
                self.problems
                    .push(format!("directory {d}: logical block {index} is a hole"));
                dir.add_block();
                continue;
            };
            self.owners.insert(phys, MetaOwner::Dir { ino: d, index });
            let b = dir.add_block();
            self.stats.dir_blocks_read += 1;
            let entries = self
                .read_block(at, phys, buf)
                .map_err(LoadError::from)
                .and_then(|t| {
                    *done = (*done).max(t);
                    Ok(decode_block(d, buf)?)
                });
            match entries {
                Ok(list) => {
                    for e in list {
                        if dir.get(&e.name).is_some() || vfs::oracle::check_name(&e.name).is_err() {
                            self.problems
                                .push(format!("directory {d}: bad or repeated name {:?}", e.name));
                            continue;
                        }
                        dir.add(b, e);
                    }
                }
                Err(e) => self
                    .problems
                    .push(format!("directory {d} block {index} (at {phys}): {e}")),
            }
        }
        dir
    }
}

/// Extents sorted, not overlapping, not empty, inside `zone`.
fn check_extents(extents: &[Extent], zone: crate::layout::Region) -> Result<(), LoadError> {
    let mut end = 0u64;
    for e in extents {
        if e.len == 0
            || (e.logical as u64) < end
            || e.logical as u64 + e.len as u64 > u32::MAX as u64
        {
            return Err(LoadError::ExtentOrder { extent: *e });
        }
        if !zone.holds(e.start, e.len) {
            return Err(LoadError::ExtentZone {
                extent: *e,
                zone_start: zone.start,
                zone_end: zone.end(),
            });
        }
        end = e.logical as u64 + e.len as u64;
    }
    Ok(())
}
