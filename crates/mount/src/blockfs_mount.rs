//! The ext4-like block file system (`blockfs`) on the page-mapping FTL of a device image,
//! mounted through the same FUSE adapter as OFS (`ossd mount --fs blockfs`):
//!
//! ```text
//!   write(2) -> kernel FUSE -> OssdFuse -> BlockFsMount (a Backend) -> BlockFs -> Ftl
//!                                                                     -> Nand<ImageStore>
//! ```
//!
//! - The image's content word is [`ImageContent::BlockFs`], apart from a raw FTL export
//!   ([`ImageContent::BlockFtl`], `ossd blockdev`): a real ext4 made over the export would
//!   overwrite blockfs's metadata, and blockfs would read ext4's superblock as damage.
//! - The POSIX surface is what `blockfs` keeps: files and directories, read, write, truncate,
//!   fsync / fdatasync, statfs. It keeps no owners, permissions, links, renames or extended
//!   attributes: every inode is reported as owned by the user running the mount with the
//!   default modes (0644 files, 0755 directories); `chmod`, `chown`, `rename`, `link`,
//!   `symlink` and `setxattr` fail with `EOPNOTSUPP`; `utimens` is accepted and ignored (the
//!   modification time is the one blockfs stamps at each change), so `touch` works.
//! - Unmount writes every dirty metadata block back, marks the superblock clean and
//!   checkpoints the FTL. There is no journal: after `kill -9` the FTL recovers its map from
//!   the OOB records, and blockfs finds its superblock not clean; what survives is what
//!   docs/BLOCKFS.md "Crash consistency" lists (every file fsync'ed before the kill, the rest
//!   as of the last write-back). A mount that finds the bitmaps, inodes and directories
//!   inconsistent is read-only (writes fail with EIO) and says why.

use std::path::Path;

use blockfs::{BlockFs, BlockFsConfig};
use flash::image::{ImageContent, ImageStore};
use flash::{DeviceConfig, Nand, Nanos};
use ftl::Ftl;
use vfs::{
    FileAttr, FileData, FileKind, FileStat, FileSystem, FsCounters, FsError, Ino, Owner, ReadInto,
    SetAttr, SpaceInfo,
};

use crate::blockdev::ftl_config;
use crate::fuse::wall_ns;
use crate::image::{expect_content, lock, ImageError, ImageLock};
use crate::Backend;

/// The block file system on an image file.
pub type ImageBlockFs = BlockFs<Nand<ImageStore>>;

/// `blockfs` as a mount [`Backend`]: its own calls, plus the POSIX calls a mount needs that it
/// can answer (see the module's documentation for those it cannot).
pub struct BlockFsMount {
    fs: ImageBlockFs,
    uid: u32,
    gid: u32,
}

/// Creates `path` as a new device image holding the page-mapping FTL with an empty block file
/// system on it (`config`'s mkfs settings), unmounted cleanly and checkpointed. Returns the
/// bytes of the file system's data zone.
pub fn format(path: &Path, device: DeviceConfig, config: BlockFsConfig) -> Result<u64, ImageError> {
    let image = ImageStore::create_for(path, &device, ImageContent::BlockFs)?;
    let nand = Nand::open(device, image)?;
    let ftl = Ftl::open(nand, ftl_config(&device)).map_err(|e| ImageError::Ftl(path.into(), e))?;
    let fs = BlockFs::format(ftl, config, wall_ns()).map_err(|e| ImageError::Fs(path.into(), e))?;
    let l = *fs.layout();
    let (ftl, now) = fs.unmount().map_err(|e| ImageError::Fs(path.into(), e))?;
    ftl.close(now)
        .map_err(|e| ImageError::Ftl(path.to_owned(), e))?;
    Ok(l.data_zone.len as u64 * l.block_bytes as u64)
}

/// Locks the image, opens the FTL (recovering its map after a crash) and mounts the block file
/// system on it. An image formatted for anything else is refused before any record is read.
pub fn open(path: &Path) -> Result<(BlockFsMount, ImageLock), ImageError> {
    let lock = lock(path)?;
    let (device, image) = ImageStore::open(path)?;
    expect_content(path, &image, ImageContent::BlockFs)?;
    let nand = Nand::open(device, image)?;
    let ftl = Ftl::open(nand, ftl_config(&device)).map_err(|e| ImageError::Ftl(path.into(), e))?;
    let fs = BlockFs::mount(ftl, BlockFsConfig::default(), wall_ns())
        .map_err(|e| ImageError::Fs(path.into(), e))?;
    Ok((BlockFsMount::new(fs), lock))
}

impl BlockFsMount {
    /// Wraps a mounted block file system; inodes are reported as owned by this process's user.
    pub fn new(fs: ImageBlockFs) -> Self {
        BlockFsMount {
            fs,
            uid: rustix::process::getuid().as_raw(),
            gid: rustix::process::getgid().as_raw(),
        }
    }

    /// The file system, for its counters and what its mount found.
    pub fn inner(&self) -> &ImageBlockFs {
        &self.fs
    }
}

impl Backend for BlockFsMount {
    type Fs = Self;

    fn call<T>(&mut self, f: impl FnOnce(&mut Self) -> T) -> Result<T, FsError> {
        Ok(f(self))
    }

    fn shutdown(self) -> Result<(), FsError> {
        let (ftl, now) = self.fs.unmount()?;
        ftl.close(now)
            .map_err(|e| FsError::Device(format!("checkpointing the FTL: {e}")))?;
        Ok(())
    }
}

impl FileSystem for BlockFsMount {
    fn name(&self) -> &str {
        self.fs.name()
    }
    fn lookup(&mut self, dir: Ino, name: &str) -> Result<Option<Ino>, FsError> {
        self.fs.lookup(dir, name)
    }
    fn create(&mut self, dir: Ino, name: &str) -> Result<Ino, FsError> {
        self.fs.create(dir, name)
    }
    fn mkdir(&mut self, dir: Ino, name: &str) -> Result<Ino, FsError> {
        self.fs.mkdir(dir, name)
    }
    fn unlink(&mut self, dir: Ino, name: &str) -> Result<(), FsError> {
        self.fs.unlink(dir, name)
    }
    fn rmdir(&mut self, dir: Ino, name: &str) -> Result<(), FsError> {
        self.fs.rmdir(dir, name)
    }
    fn readdir(&mut self, dir: Ino) -> Result<Vec<(String, Ino)>, FsError> {
        self.fs.readdir(dir)
    }
    fn write(
        &mut self,
        ino: Ino,
        offset: u64,
        len: u64,
        data: FileData<'_>,
    ) -> Result<(), FsError> {
        self.fs.write(ino, offset, len, data)
    }
    fn read(&mut self, ino: Ino, offset: u64, into: ReadInto<'_>) -> Result<u64, FsError> {
        self.fs.read(ino, offset, into)
    }
    fn truncate(&mut self, ino: Ino, size: u64) -> Result<(), FsError> {
        self.fs.truncate(ino, size)
    }
    fn stat(&mut self, ino: Ino) -> Result<FileStat, FsError> {
        self.fs.stat(ino)
    }
    fn fsync(&mut self, ino: Ino, data_only: bool) -> Result<(), FsError> {
        self.fs.fsync(ino, data_only)
    }
    fn sync(&mut self) -> Result<(), FsError> {
        self.fs.sync()
    }
    fn set_time(&mut self, at: Nanos) {
        self.fs.set_time(at)
    }
    fn now(&self) -> Nanos {
        self.fs.now()
    }
    fn background(&mut self, from: Nanos, until: Nanos) -> Result<Nanos, FsError> {
        self.fs.background(from, until)
    }
    fn counters(&self) -> FsCounters {
        self.fs.counters()
    }
    fn check(&mut self) -> Result<Vec<String>, FsError> {
        self.fs.check()
    }

    fn getattr(&mut self, ino: Ino) -> Result<FileAttr, FsError> {
        let s = self.fs.stat(ino)?;
        let perm = Owner::default_for(s.kind).perm;
        Ok(FileAttr {
            ino,
            kind: s.kind,
            size: s.size,
            perm,
            uid: self.uid,
            gid: self.gid,
            // Directories: 2 (blockfs keeps no link counts; find(1) accepts 2 as "unknown").
            nlink: if s.kind == FileKind::Dir { 2 } else { 1 },
            atime_ns: s.modified_ns,
            mtime_ns: s.modified_ns,
            ctime_ns: s.modified_ns,
            rdev: 0,
        })
    }

    fn create_as(
        &mut self,
        dir: Ino,
        name: &str,
        kind: FileKind,
        _owner: Owner,
    ) -> Result<Ino, FsError> {
        match kind {
            FileKind::File => self.fs.create(dir, name),
            FileKind::Dir => self.fs.mkdir(dir, name),
            _ => Err(FsError::Unsupported(
                "blockfs keeps only files and directories".into(),
            )),
        }
    }

    fn setattr(&mut self, ino: Ino, set: SetAttr) -> Result<FileAttr, FsError> {
        if set.perm.is_some() || set.uid.is_some() || set.gid.is_some() {
            // Asking for what is already reported (cp -p as the same user) is not a change.
            let now = self.getattr(ino)?;
            let same = set.perm.is_none_or(|p| p == now.perm)
                && set.uid.is_none_or(|u| u == now.uid)
                && set.gid.is_none_or(|g| g == now.gid);
            if !same {
                return Err(FsError::Unsupported(
                    "blockfs keeps no owners or permissions".into(),
                ));
            }
        }
        if let Some(size) = set.size {
            self.fs.truncate(ino, size)?;
        }
        // Times: accepted and not kept (blockfs stamps the modification time itself).
        self.getattr(ino)
    }

    fn statfs(&mut self) -> Result<SpaceInfo, FsError> {
        let l = *self.fs.layout();
        let bs = l.block_bytes as u64;
        Ok(SpaceInfo {
            total_bytes: l.data_zone.len as u64 * bs,
            free_bytes: self.fs.free_data_blocks() as u64 * bs,
            inodes_used: (l.inodes - self.fs.free_inodes()) as u64,
            inodes_total: l.inodes as u64,
            block_bytes: l.block_bytes,
        })
    }
}
