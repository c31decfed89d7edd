//! The block baseline for real programs: the page-mapping FTL on a device image, exported
//! through FUSE as one file, `disk`, the size of the FTL's logical space (OSSD-13 VI ran real
//! ext4 on such an FTL). A loop device on that file carries a real `mkfs.ext4` and
//! `mount -o discard`:
//!
//! ```text
//!   ext4 -> loop -> MNT/disk -> kernel FUSE -> BlockDevFuse -> Ftl -> Nand<ImageStore>
//! ```
//!
//! - Reads and writes map to the FTL's 512-byte sectors; a write that covers a sector in part
//!   reads the sector first (the FTL takes whole sectors).
//! - `fallocate(PUNCH_HOLE | KEEP_SIZE)`, which the loop driver issues for a discard, is TRIM of
//!   the whole write units inside the range; the parts of units at its ends are written with
//!   zeros, so the hole reads as zeros either way. (The FTL makes TRIMs durable at its
//!   checkpoint: after a crash a trimmed unit may hold its old data again, which a discard
//!   allows.)
//! - `fsync` / `fdatasync` is FLUSH: every buffered unit programmed and the device synced.
//!   Unmounting checkpoints the FTL and closes the image; after a crash (`kill -9`) the next
//!   export recovers the map from the checkpoint and the OOB records (docs/FORMAT.md, section 2).
//! - Time is as on the OFS mount: each call is issued at the wall clock, and with
//!   [`Timing::Emulate`] its reply waits for the device model's completion time.

use std::ffi::OsStr;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use flash::image::{ImageContent, ImageStore};
use flash::{DeviceConfig, Nand, Nanos};
use fml::FmlConfig;
use ftl::{Data, Ftl, FtlConfig, FtlError, ReadOut, SECTOR_BYTES};
use fuser::{
    FileAttr, FileType, Filesystem, ReplyAttr, ReplyData, ReplyDirectory, ReplyEmpty, ReplyEntry,
    ReplyOpen, ReplyStatfs, ReplyWrite, Request, TimeOrNow,
};
use libc::c_int;

use crate::fuse::{hold_reply, wall_ns};
use crate::image::{expect_content, lock, ImageError, ImageLock};
use crate::{lock_slot, take_slot, MountError, MountOptions, Timing};

/// The exported file's name in the mount's root directory.
pub const DISK: &str = "disk";
const ROOT_INO: u64 = 1;
const DISK_INO: u64 = 2;
const TTL: Duration = Duration::from_secs(1);

/// The FTL on an image file.
pub type ImageFtl = Ftl<Nand<ImageStore>>;

/// The FTL settings for a device: the defaults (write buffer on, greedy GC), the FML sized to
/// the device. Formatting and every later export use the same ones.
pub fn ftl_config(device: &DeviceConfig) -> FtlConfig {
    FtlConfig {
        fml: FmlConfig::for_blocks(device.gang.superblocks(&device.geometry)),
        ..FtlConfig::default()
    }
}

/// Creates `path` as a new device image recorded as holding the page-mapping FTL, with an
/// empty logical space, checkpointed and closed. Returns the logical capacity in bytes.
pub fn format(path: &Path, device: DeviceConfig) -> Result<u64, ImageError> {
    let image = ImageStore::create_for(path, &device, ImageContent::BlockFtl)?;
    let nand = Nand::open(device, image)?;
    let ftl = Ftl::open(nand, ftl_config(&device)).map_err(|e| ImageError::Ftl(path.into(), e))?;
    let capacity = ftl.capacity_bytes();
    ftl.close(0)
        .map_err(|e| ImageError::Ftl(path.to_owned(), e))?;
    Ok(capacity)
}

/// Locks the image and opens the FTL on it (recovering its map after a crash). An image
/// formatted for the object store is refused before any of its records is read.
pub fn open(path: &Path) -> Result<(ImageFtl, ImageLock), ImageError> {
    let lock = lock(path)?;
    let (device, image) = ImageStore::open(path)?;
    expect_content(path, &image, ImageContent::BlockFtl)?;
    let nand = Nand::open(device, image)?;
    let ftl = Ftl::open(nand, ftl_config(&device)).map_err(|e| ImageError::Ftl(path.into(), e))?;
    Ok((ftl, lock))
}

/// The errno for an FTL error: a request outside the device is EINVAL, anything the device
/// could not do EIO.
pub fn errno(e: &FtlError) -> c_int {
    match e {
        FtlError::BadRequest { .. } => libc::EINVAL,
        _ => libc::EIO,
    }
}

/// An exported FTL, shared with the FUSE session (empty once the export has ended).
pub type SharedFtl = Arc<Mutex<Option<ImageFtl>>>;

/// The FUSE file system of one file over the FTL.
pub struct BlockDevFuse {
    ftl: SharedFtl,
    timing: Timing,
    capacity: u64,
    /// When the export started: the times of the root and the file.
    mounted: SystemTime,
    uid: u32,
    gid: u32,
}

/// The sector-aligned range covering `[offset, offset + len)`.
fn sectors(offset: u64, len: u64) -> (u64, u64) {
    let start = offset / SECTOR_BYTES * SECTOR_BYTES;
    let end = (offset + len).div_ceil(SECTOR_BYTES) * SECTOR_BYTES;
    (start, end)
}

/// Reads `buf.len()` bytes at `offset` (inside the device), whole sectors from the FTL.
fn read_at(ftl: &mut ImageFtl, at: Nanos, offset: u64, buf: &mut [u8]) -> Result<Nanos, FtlError> {
    let len = buf.len() as u64;
    let (start, end) = sectors(offset, len);
    if start == offset && end == offset + len {
        return ftl.read(at, offset, len, ReadOut::Bytes(buf));
    }
    let mut whole = vec![0u8; (end - start) as usize];
    let done = ftl.read(at, start, end - start, ReadOut::Bytes(&mut whole))?;
    let from = (offset - start) as usize;
    buf.copy_from_slice(&whole[from..from + buf.len()]);
    Ok(done)
}

/// Writes `data` at `offset` (inside the device); a sector covered in part is read first.
fn write_at(ftl: &mut ImageFtl, at: Nanos, offset: u64, data: &[u8]) -> Result<Nanos, FtlError> {
    let len = data.len() as u64;
    let (start, end) = sectors(offset, len);
    if start == offset && end == offset + len {
        return ftl.write(at, offset, len, Data::Bytes(data));
    }
    let mut whole = vec![0u8; (end - start) as usize];
    let t = ftl.read(at, start, end - start, ReadOut::Bytes(&mut whole))?;
    let from = (offset - start) as usize;
    whole[from..from + data.len()].copy_from_slice(data);
    ftl.write(t, start, end - start, Data::Bytes(&whole))
}

/// Makes `[offset, offset + len)` read as zeros: TRIM of the whole write units inside it,
/// zeros written over the rest.
fn punch(ftl: &mut ImageFtl, at: Nanos, offset: u64, len: u64) -> Result<Nanos, FtlError> {
    let unit = ftl.unit_bytes() as u64;
    let end = offset + len;
    let (a, b) = (offset.div_ceil(unit) * unit, end / unit * unit);
    if a >= b {
        return write_at(ftl, at, offset, &vec![0u8; len as usize]);
    }
    let mut t = at;
    if offset < a {
        t = write_at(ftl, t, offset, &vec![0u8; (a - offset) as usize])?;
    }
    t = ftl.trim(t, a, b - a)?;
    if b < end {
        t = write_at(ftl, t, b, &vec![0u8; (end - b) as usize])?;
    }
    Ok(t)
}

impl BlockDevFuse {
    fn new(ftl: SharedFtl, capacity: u64, timing: Timing) -> Self {
        BlockDevFuse {
            ftl,
            timing,
            capacity,
            mounted: SystemTime::now(),
            uid: rustix::process::getuid().as_raw(),
            gid: rustix::process::getgid().as_raw(),
        }
    }

    /// Runs `f` on the FTL at the wall clock's time; with [`Timing::Emulate`] returns only at
    /// the device model's completion time. A failed FTL call is logged: the kernel sees only
    /// its errno.
    fn call<T>(
        &mut self,
        f: impl FnOnce(&mut ImageFtl, Nanos) -> Result<(T, Nanos), FtlError>,
    ) -> Result<T, c_int> {
        let mut guard = lock_slot(&self.ftl);
        let Some(ftl) = guard.as_mut() else {
            return Err(libc::EIO);
        };
        let issued = wall_ns();
        match f(ftl, issued) {
            Ok((v, done)) => {
                hold_reply(self.timing, done);
                Ok(v)
            }
            Err(e) => {
                eprintln!("ossd blockdev: {e}");
                Err(errno(&e))
            }
        }
    }

    fn attr(&self, ino: u64) -> Option<FileAttr> {
        let (kind, perm, size, nlink) = match ino {
            ROOT_INO => (FileType::Directory, 0o755, 0, 2),
            DISK_INO => (FileType::RegularFile, 0o600, self.capacity, 1),
            _ => return None,
        };
        Some(FileAttr {
            ino,
            size,
            blocks: size.div_ceil(512),
            atime: self.mounted,
            mtime: self.mounted,
            ctime: self.mounted,
            crtime: self.mounted,
            kind,
            perm,
            nlink,
            uid: self.uid,
            gid: self.gid,
            rdev: 0,
            blksize: SECTOR_BYTES as u32,
            flags: 0,
        })
    }

    /// The part of `[offset, offset + len)` inside the device, as (offset, length).
    fn clamp(&self, offset: i64, len: u64) -> Result<(u64, u64), c_int> {
        let offset = u64::try_from(offset).map_err(|_| libc::EINVAL)?;
        Ok((offset, len.min(self.capacity.saturating_sub(offset))))
    }
}

impl Filesystem for BlockDevFuse {
    fn lookup(&mut self, _req: &Request<'_>, parent: u64, name: &OsStr, reply: ReplyEntry) {
        match (parent, self.attr(DISK_INO)) {
            (ROOT_INO, Some(a)) if name == DISK => reply.entry(&TTL, &a, 0),
            _ => reply.error(libc::ENOENT),
        }
    }

    fn getattr(&mut self, _req: &Request<'_>, ino: u64, _fh: Option<u64>, reply: ReplyAttr) {
        match self.attr(ino) {
            Some(a) => reply.attr(&TTL, &a),
            None => reply.error(libc::ENOENT),
        }
    }

    fn setattr(
        &mut self,
        _req: &Request<'_>,
        ino: u64,
        mode: Option<u32>,
        uid: Option<u32>,
        gid: Option<u32>,
        size: Option<u64>,
        _atime: Option<TimeOrNow>,
        _mtime: Option<TimeOrNow>,
        _ctime: Option<SystemTime>,
        _fh: Option<u64>,
        _crtime: Option<SystemTime>,
        _chgtime: Option<SystemTime>,
        _bkuptime: Option<SystemTime>,
        _flags: Option<u32>,
        reply: ReplyAttr,
    ) {
        // A device has the size it has, and its owner and mode are the mount's; times are
        // accepted and not kept (O_TRUNC to the same size and touch must work).
        if mode.is_some() || uid.is_some() || gid.is_some() {
            reply.error(libc::EPERM);
            return;
        }
        if size.is_some_and(|s| s != self.capacity) || ino != DISK_INO {
            reply.error(if ino == DISK_INO {
                libc::EINVAL
            } else {
                libc::EPERM
            });
            return;
        }
        match self.attr(ino) {
            Some(a) => reply.attr(&TTL, &a),
            None => reply.error(libc::ENOENT),
        }
    }

    fn open(&mut self, _req: &Request<'_>, ino: u64, _flags: i32, reply: ReplyOpen) {
        if ino == DISK_INO {
            reply.opened(0, 0);
        } else {
            reply.error(libc::EISDIR);
        }
    }

    fn read(
        &mut self,
        _req: &Request<'_>,
        ino: u64,
        _fh: u64,
        offset: i64,
        size: u32,
        _flags: i32,
        _lock_owner: Option<u64>,
        reply: ReplyData,
    ) {
        if ino != DISK_INO {
            reply.error(libc::EISDIR);
            return;
        }
        let (offset, len) = match self.clamp(offset, size as u64) {
            Ok(r) => r,
            Err(e) => return reply.error(e),
        };
        let mut buf = vec![0u8; len as usize];
        if len == 0 {
            return reply.data(&buf);
        }
        match self.call(|f, at| Ok(((), read_at(f, at, offset, &mut buf)?))) {
            Ok(()) => reply.data(&buf),
            Err(e) => reply.error(e),
        }
    }

    fn write(
        &mut self,
        _req: &Request<'_>,
        ino: u64,
        _fh: u64,
        offset: i64,
        data: &[u8],
        _write_flags: u32,
        _flags: i32,
        _lock_owner: Option<u64>,
        reply: ReplyWrite,
    ) {
        if ino != DISK_INO {
            reply.error(libc::EISDIR);
            return;
        }
        let (offset, len) = match self.clamp(offset, data.len() as u64) {
            Ok(r) => r,
            Err(e) => return reply.error(e),
        };
        if len == 0 && !data.is_empty() {
            // At or past the end of the device.
            return reply.error(libc::ENOSPC);
        }
        let data = &data[..len as usize];
        match self.call(|f, at| Ok(((), write_at(f, at, offset, data)?))) {
            Ok(()) => reply.written(len as u32),
            Err(e) => reply.error(e),
        }
    }

    fn fsync(
        &mut self,
        _req: &Request<'_>,
        _ino: u64,
        _fh: u64,
        _datasync: bool,
        reply: ReplyEmpty,
    ) {
        match self.call(|f, at| Ok(((), f.flush(at)?))) {
            Ok(()) => reply.ok(),
            Err(e) => reply.error(e),
        }
    }

    fn fallocate(
        &mut self,
        _req: &Request<'_>,
        ino: u64,
        _fh: u64,
        offset: i64,
        length: i64,
        mode: i32,
        reply: ReplyEmpty,
    ) {
        if ino != DISK_INO {
            return reply.error(libc::EISDIR);
        }
        let Ok(length) = u64::try_from(length) else {
            return reply.error(libc::EINVAL);
        };
        let (offset, len) = match self.clamp(offset, length) {
            Ok(r) => r,
            Err(e) => return reply.error(e),
        };
        let punch_hole = libc::FALLOC_FL_PUNCH_HOLE | libc::FALLOC_FL_KEEP_SIZE;
        let zero_range = mode & !libc::FALLOC_FL_KEEP_SIZE == libc::FALLOC_FL_ZERO_RANGE;
        let r = if mode == punch_hole || zero_range {
            // The loop driver punches for a discard and zeroes a range for WRITE_ZEROES
            // (mkfs.ext4 zeroes its tables that way).
            self.call(|f, at| Ok(((), punch(f, at, offset, len)?)))
        } else if mode == 0 || mode == libc::FALLOC_FL_KEEP_SIZE {
            // Every byte of the device exists already: nothing to allocate.
            Ok(())
        } else {
            eprintln!("ossd blockdev: fallocate mode {mode:#x} is not supported");
            Err(libc::EOPNOTSUPP)
        };
        match r {
            Ok(()) => reply.ok(),
            Err(e) => reply.error(e),
        }
    }

    fn readdir(
        &mut self,
        _req: &Request<'_>,
        ino: u64,
        _fh: u64,
        offset: i64,
        mut reply: ReplyDirectory,
    ) {
        if ino != ROOT_INO {
            return reply.error(libc::ENOTDIR);
        }
        let entries = [
            (ROOT_INO, FileType::Directory, "."),
            (ROOT_INO, FileType::Directory, ".."),
            (DISK_INO, FileType::RegularFile, DISK),
        ];
        for (i, (ino, kind, name)) in entries.iter().enumerate().skip(offset.max(0) as usize) {
            if reply.add(*ino, i as i64 + 1, *kind, name) {
                break;
            }
        }
        reply.ok();
    }

    fn statfs(&mut self, _req: &Request<'_>, _ino: u64, reply: ReplyStatfs) {
        let blocks = self.capacity / SECTOR_BYTES;
        reply.statfs(
            blocks,
            0,
            0,
            2,
            0,
            SECTOR_BYTES as u32,
            255,
            SECTOR_BYTES as u32,
        );
    }
}

/// Exports `ftl` at `mountpoint` as the file `disk` and serves it on this thread until it is
/// unmounted (`fusermount3 -u`, or SIGINT / SIGTERM / SIGHUP when `handle_signals`), then
/// checkpoints the FTL and closes the image. `ready` is called once the mount is in place.
pub fn serve(
    ftl: ImageFtl,
    mountpoint: &Path,
    opts: &MountOptions,
    handle_signals: bool,
    ready: impl FnOnce(),
) -> Result<(), MountError> {
    serve_shared(
        Arc::new(Mutex::new(Some(ftl))),
        mountpoint,
        opts,
        handle_signals,
        ready,
    )
}

/// [`serve`] of an FTL the caller keeps a handle on, to read its counters while it is exported
/// (`ossd bench-mount`): lock the slot between calls, never across one. The slot is empty once
/// the export has ended (the FTL checkpointed and closed).
pub fn serve_shared(
    shared: SharedFtl,
    mountpoint: &Path,
    opts: &MountOptions,
    handle_signals: bool,
    ready: impl FnOnce(),
) -> Result<(), MountError> {
    if !mountpoint.is_dir() {
        return Err(MountError::NotADirectory(mountpoint.to_owned()));
    }
    let capacity = lock_slot(&shared)
        .as_ref()
        .map_or(0, |f| f.capacity_bytes());
    let fs = BlockDevFuse::new(shared.clone(), capacity, opts.timing);
    let mut options = vec![
        fuser::MountOption::FSName("ossd-blockdev".into()),
        fuser::MountOption::Subtype("ftl".into()),
    ];
    if opts.allow_other {
        options.push(fuser::MountOption::AllowOther);
    }
    crate::serve_until_unmounted(fs, mountpoint, &options, handle_signals, ready)?;
    match take_slot(&shared) {
        Some(f) => f.close(wall_ns()).map(drop).map_err(MountError::Ftl),
        None => Ok(()),
    }
}

/// The path of the exported file under a mount point.
pub fn disk_path(mountpoint: &Path) -> PathBuf {
    mountpoint.join(DISK)
}
