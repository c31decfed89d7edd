//! The FUSE adapter: each kernel request becomes calls of the [`Backend`] (the seam), its
//! result a reply or an errno. Nothing here keeps file system state beyond open directory
//! listings (so `readdir` offsets stay valid while a directory is read in pieces).

use std::collections::HashMap;
use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use fuser::{
    FileType, Filesystem, KernelConfig, ReplyAttr, ReplyCreate, ReplyData, ReplyDirectory,
    ReplyEmpty, ReplyEntry, ReplyOpen, ReplyStatfs, ReplyWrite, ReplyXattr, Request, TimeOrNow,
};
use libc::c_int;
use vfs::{
    FileAttr, FileData, FileKind, FileSystem, FsError, Ino, Owner, ReadInto, SetAttr, Special,
    XattrMode,
};

use crate::scheduled::{FileIo, IoOp, IoQueue};
use crate::stats::STATS_FILE;
use crate::{lock_slot, Backend, Timing};

/// The inode number of the statistics file at the root (outside OFS's numbers).
const STATS_INO: u64 = u64::MAX - 1;

/// How long the kernel may cache attributes and entries. Every change goes through this
/// mount, so the kernel's cache cannot go stale behind its back.
const TTL: Duration = Duration::from_secs(1);

/// The namespace of extended attributes OFS stores (others: not supported).
const USER: &str = "user.";

/// The errno for a file system error.
pub fn errno(e: &FsError) -> c_int {
    match e {
        FsError::NotFound(_) => libc::ENOENT,
        FsError::Exists(_) => libc::EEXIST,
        FsError::NotDir(_) => libc::ENOTDIR,
        FsError::IsDir(_) => libc::EISDIR,
        FsError::NotEmpty(_) => libc::ENOTEMPTY,
        FsError::NoSpace(_) => libc::ENOSPC,
        FsError::Invalid(_) => libc::EINVAL,
        FsError::Corrupted(_) | FsError::Damaged { .. } | FsError::Device(_) => libc::EIO,
        FsError::Unsupported(_) => libc::EOPNOTSUPP,
        FsError::NotPermitted(_) => libc::EPERM,
    }
}

/// Nanoseconds since the Unix epoch, now.
pub fn wall_ns() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64)
}

/// With [`Timing::Emulate`], returns only at `done`, the device model's completion time of a
/// call (ns since the Unix epoch), waiting 10 s at most; with [`Timing::None`] at once.
pub fn hold_reply(timing: Timing, done: u64) {
    if timing == Timing::Emulate {
        let now = wall_ns();
        if done > now {
            std::thread::sleep(Duration::from_nanos((done - now).min(10_000_000_000)));
        }
    }
}

fn time_ns(t: SystemTime) -> u64 {
    t.duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64)
}

fn file_type(k: FileKind) -> FileType {
    match k {
        FileKind::File => FileType::RegularFile,
        FileKind::Dir => FileType::Directory,
        FileKind::Symlink => FileType::Symlink,
        FileKind::Special(Special::Fifo) => FileType::NamedPipe,
        FileKind::Special(Special::Socket) => FileType::Socket,
        FileKind::Special(Special::CharDevice) => FileType::CharDevice,
        FileKind::Special(Special::BlockDevice) => FileType::BlockDevice,
    }
}

/// A name from the kernel: at most 255 bytes (ENAMETOOLONG), UTF-8 (EINVAL: OFS keeps
/// names as UTF-8).
fn name_of(name: &OsStr) -> Result<&str, c_int> {
    if name.len() > vfs::NAME_MAX {
        return Err(libc::ENAMETOOLONG);
    }
    name.to_str().ok_or(libc::EINVAL)
}

/// The FUSE file system over a [`Backend`].
pub struct OssdFuse<B: Backend> {
    backend: Arc<Mutex<Option<B>>>,
    timing: Timing,
    block_bytes: u32,
    /// Listings of open directories, by handle: (name, inode, type).
    dirs: HashMap<u64, Vec<(Vec<u8>, Ino, FileType)>>,
    /// Open statistics files, by handle: the document as it was at open.
    stats_files: HashMap<u64, Vec<u8>>,
    next_fh: u64,
}

impl<B: Backend> OssdFuse<B> {
    /// The FUSE adapter over a shared backend slot (emptied when the backend shuts down), replying
    /// with `timing`.
    pub fn new(backend: Arc<Mutex<Option<B>>>, timing: Timing) -> Self {
        OssdFuse {
            backend,
            timing,
            block_bytes: 4096,
            dirs: HashMap::new(),
            stats_files: HashMap::new(),
            next_fh: 1,
        }
    }

    /// Runs `f` on the backend's file system at the wall clock's time: errors become errno
    /// values, a panic EIO and a poisoned backend (dropped without being marked clean; every
    /// later call is EIO). With [`Timing::Emulate`] returns only at the device model's
    /// completion time.
    fn call<T>(&mut self, f: impl FnOnce(&mut B::Fs) -> Result<T, FsError>) -> Result<T, c_int> {
        let mut guard = lock_slot(&self.backend);
        let Some(b) = guard.as_mut() else {
            return Err(libc::EIO);
        };
        let r = catch_unwind(AssertUnwindSafe(|| {
            b.call(|fs| {
                // The wall clock, but at least 1 ns after the previous call's completion: the
                // store stamps times with its own clock, which the device model's latency can
                // move ahead of the wall clock, and two calls must never stamp the same time
                // (make, rsync and POSIX tests compare them).
                let issued = wall_ns().max(fs.now().saturating_add(1));
                fs.set_time(issued);
                let r = f(fs);
                (r, fs.now())
            })
        }));
        match r {
            Ok(Ok((r, done))) => {
                hold_reply(self.timing, done);
                r.map_err(|e| errno(&e))
            }
            Ok(Err(e)) => Err(errno(&e)),
            Err(_) => {
                eprintln!(
                    "ossd mount: a file system call panicked; every later call fails with EIO \
                     (unmount, and the next mount repairs the file system)"
                );
                // Not shut down: its state is unknown. Dropping it closes nothing cleanly,
                // as a crash would.
                guard.take();
                Err(libc::EIO)
            }
        }
    }

    /// The backend's queue for reads and writes, if it has one and is still serving.
    fn io_queue(&self) -> Option<IoQueue> {
        lock_slot(&self.backend).as_ref().and_then(|b| b.io_queue())
    }

    /// A fresh statistics document, as the file's bytes.
    fn stats_bytes(&mut self) -> Result<Vec<u8>, c_int> {
        let mut guard = lock_slot(&self.backend);
        let b = guard.as_mut().ok_or(libc::EIO)?;
        let v = b.stats().map_err(|e| errno(&e))?;
        let mut text = serde_json::to_vec_pretty(&v).map_err(|_| libc::EIO)?;
        text.push(b'\n');
        Ok(text)
    }

    /// The statistics file's attributes (read-only, owned by root, its size that of a fresh
    /// document).
    fn stats_attr(&mut self) -> Result<fuser::FileAttr, c_int> {
        let len = self.stats_bytes()?.len() as u64;
        let now = SystemTime::now();
        Ok(fuser::FileAttr {
            ino: STATS_INO,
            size: len,
            blocks: len.div_ceil(512),
            atime: now,
            mtime: now,
            ctime: now,
            crtime: now,
            kind: FileType::RegularFile,
            perm: 0o444,
            nlink: 1,
            uid: 0,
            gid: 0,
            rdev: 0,
            blksize: self.block_bytes,
            flags: 0,
        })
    }

    fn attr(&mut self, ino: Ino) -> Result<fuser::FileAttr, c_int> {
        let a = self.call(|b| b.getattr(ino))?;
        Ok(self.to_fuse(&a))
    }

    fn to_fuse(&self, a: &FileAttr) -> fuser::FileAttr {
        let t = |ns: u64| UNIX_EPOCH + Duration::from_nanos(ns);
        fuser::FileAttr {
            ino: a.ino,
            size: a.size,
            blocks: a.size.div_ceil(512),
            atime: t(a.atime_ns),
            mtime: t(a.mtime_ns),
            ctime: t(a.ctime_ns),
            crtime: t(a.ctime_ns),
            kind: file_type(a.kind),
            perm: (a.perm & 0o7777) as u16,
            nlink: a.nlink,
            uid: a.uid,
            gid: a.gid,
            // The kernel's 32-bit encoding, as mknod handed it in.
            rdev: a.rdev as u32,
            blksize: self.block_bytes,
            flags: 0,
        }
    }

    fn entry(&mut self, r: Result<Ino, c_int>, reply: ReplyEntry) {
        match r.and_then(|ino| self.attr(ino)) {
            Ok(a) => reply.entry(&TTL, &a, 0),
            Err(e) => reply.error(e),
        }
    }

    fn make(
        &mut self,
        req: &Request<'_>,
        parent: u64,
        name: &OsStr,
        kind: FileKind,
        mode: u32,
        umask: u32,
    ) -> Result<Ino, c_int> {
        let name = name_of(name)?;
        if is_stats_file(parent, name) {
            return Err(libc::EEXIST);
        }
        let owner = Owner {
            perm: mode & !umask & 0o7777,
            uid: req.uid(),
            gid: req.gid(),
        };
        self.call(|b| b.create_as(parent, name, kind, owner))
    }
}

fn done(r: Result<(), c_int>, reply: ReplyEmpty) {
    match r {
        Ok(()) => reply.ok(),
        Err(e) => reply.error(e),
    }
}

/// Whether `name` in `parent` is the statistics file (which OFS's own files cannot be named).
fn is_stats_file(parent: u64, name: &str) -> bool {
    parent == vfs::ROOT && name == STATS_FILE
}

/// A user extended attribute's name without its namespace; `None` for other namespaces.
fn user_name(name: &OsStr) -> Result<Option<&str>, c_int> {
    let s = name.to_str().ok_or(libc::EINVAL)?;
    Ok(s.strip_prefix(USER))
}

/// Replies with `data`, or its size when `size` is 0, or ERANGE when it does not fit.
fn xattr_reply(data: &[u8], size: u32, reply: ReplyXattr) {
    if size == 0 {
        reply.size(data.len() as u32);
    } else if data.len() > size as usize {
        reply.error(libc::ERANGE);
    } else {
        reply.data(data);
    }
}

impl<B: Backend> Filesystem for OssdFuse<B> {
    fn init(&mut self, _req: &Request<'_>, _config: &mut KernelConfig) -> Result<(), c_int> {
        if let Ok(s) = self.call(|b| b.statfs()) {
            self.block_bytes = s.block_bytes.max(512);
        }
        Ok(())
    }

    fn lookup(&mut self, _req: &Request<'_>, parent: u64, name: &OsStr, reply: ReplyEntry) {
        if name_of(name).is_ok_and(|n| is_stats_file(parent, n)) {
            // Never cached: its size changes with every look. A backend that keeps no
            // statistics has no such file.
            match self.stats_attr() {
                Ok(a) => return reply.entry(&Duration::ZERO, &a, 0),
                Err(libc::EOPNOTSUPP) => {}
                Err(e) => return reply.error(e),
            }
        }
        let r = name_of(name).and_then(|n| self.call(|b| b.lookup(parent, n))?.ok_or(libc::ENOENT));
        self.entry(r, reply);
    }

    fn getattr(&mut self, _req: &Request<'_>, ino: u64, _fh: Option<u64>, reply: ReplyAttr) {
        if ino == STATS_INO {
            match self.stats_attr() {
                Ok(a) => reply.attr(&Duration::ZERO, &a),
                Err(e) => reply.error(e),
            }
            return;
        }
        match self.attr(ino) {
            Ok(a) => reply.attr(&TTL, &a),
            Err(e) => reply.error(e),
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
        atime: Option<TimeOrNow>,
        mtime: Option<TimeOrNow>,
        _ctime: Option<SystemTime>,
        _fh: Option<u64>,
        _crtime: Option<SystemTime>,
        _chgtime: Option<SystemTime>,
        _bkuptime: Option<SystemTime>,
        _flags: Option<u32>,
        reply: ReplyAttr,
    ) {
        if ino == STATS_INO {
            reply.error(libc::EPERM);
            return;
        }
        let r = self.call(|b| {
            // UTIME_NOW is the call's issue time: the clock the store stamps changes with,
            // which may run ahead of the wall clock (see `call`).
            let now = b.now();
            let ns = |t: TimeOrNow| match t {
                TimeOrNow::Now => now,
                TimeOrNow::SpecificTime(t) => time_ns(t),
            };
            let set = SetAttr {
                perm: mode.map(|m| m & 0o7777),
                uid,
                gid,
                size,
                atime_ns: atime.map(ns),
                mtime_ns: mtime.map(ns),
            };
            b.setattr(ino, set)
        });
        match r {
            Ok(a) => reply.attr(&TTL, &self.to_fuse(&a)),
            Err(e) => reply.error(e),
        }
    }

    fn readlink(&mut self, _req: &Request<'_>, ino: u64, reply: ReplyData) {
        match self.call(|b| b.readlink(ino)) {
            Ok(t) => reply.data(&t),
            Err(e) => reply.error(e),
        }
    }

    fn mknod(
        &mut self,
        req: &Request<'_>,
        parent: u64,
        name: &OsStr,
        mode: u32,
        umask: u32,
        rdev: u32,
        reply: ReplyEntry,
    ) {
        let special = match mode & libc::S_IFMT {
            0 | libc::S_IFREG => None,
            libc::S_IFIFO => Some(Special::Fifo),
            libc::S_IFSOCK => Some(Special::Socket),
            libc::S_IFCHR => Some(Special::CharDevice),
            libc::S_IFBLK => Some(Special::BlockDevice),
            _ => {
                reply.error(libc::EINVAL);
                return;
            }
        };
        let r = match special {
            None => self.make(req, parent, name, FileKind::File, mode, umask),
            Some(kind) => name_of(name).and_then(|n| {
                let owner = Owner {
                    perm: mode & !umask & 0o7777,
                    uid: req.uid(),
                    gid: req.gid(),
                };
                self.call(|b| b.mknod(parent, n, kind, rdev as u64, owner))
            }),
        };
        self.entry(r, reply);
    }

    fn mkdir(
        &mut self,
        req: &Request<'_>,
        parent: u64,
        name: &OsStr,
        mode: u32,
        umask: u32,
        reply: ReplyEntry,
    ) {
        let r = self.make(req, parent, name, FileKind::Dir, mode, umask);
        self.entry(r, reply);
    }

    fn unlink(&mut self, _req: &Request<'_>, parent: u64, name: &OsStr, reply: ReplyEmpty) {
        let r = name_of(name).and_then(|n| self.call(|b| b.unlink(parent, n)));
        done(r, reply);
    }

    fn rmdir(&mut self, _req: &Request<'_>, parent: u64, name: &OsStr, reply: ReplyEmpty) {
        let r = name_of(name).and_then(|n| self.call(|b| b.rmdir(parent, n)));
        done(r, reply);
    }

    fn symlink(
        &mut self,
        req: &Request<'_>,
        parent: u64,
        link_name: &OsStr,
        target: &std::path::Path,
        reply: ReplyEntry,
    ) {
        let owner = Owner {
            perm: 0o777,
            uid: req.uid(),
            gid: req.gid(),
        };
        let t = target.as_os_str().as_bytes();
        let r = if t.len() > vfs::SYMLINK_MAX {
            Err(libc::ENAMETOOLONG)
        } else if name_of(link_name).is_ok_and(|n| is_stats_file(parent, n)) {
            Err(libc::EEXIST)
        } else {
            name_of(link_name).and_then(|n| self.call(|b| b.symlink(parent, n, t, owner)))
        };
        self.entry(r, reply);
    }

    fn rename(
        &mut self,
        _req: &Request<'_>,
        parent: u64,
        name: &OsStr,
        newparent: u64,
        newname: &OsStr,
        flags: u32,
        reply: ReplyEmpty,
    ) {
        let r = (|| {
            let (n, nn) = (name_of(name)?, name_of(newname)?);
            if is_stats_file(newparent, nn) || is_stats_file(parent, n) {
                return Err(libc::EPERM);
            }
            if flags & !libc::RENAME_NOREPLACE != 0 {
                // RENAME_EXCHANGE and RENAME_WHITEOUT are not built.
                return Err(libc::EINVAL);
            }
            if flags & libc::RENAME_NOREPLACE != 0
                && self.call(|b| b.lookup(newparent, nn))?.is_some()
            {
                return Err(libc::EEXIST);
            }
            self.call(|b| b.rename(parent, n, newparent, nn))
        })();
        done(r, reply);
    }

    fn link(
        &mut self,
        _req: &Request<'_>,
        ino: u64,
        newparent: u64,
        newname: &OsStr,
        reply: ReplyEntry,
    ) {
        let r = name_of(newname)
            .and_then(|n| {
                if is_stats_file(newparent, n) || ino == STATS_INO {
                    return Err(libc::EPERM);
                }
                self.call(|b| b.link(ino, newparent, n))
            })
            .map(|()| ino);
        self.entry(r, reply);
    }

    fn open(&mut self, _req: &Request<'_>, ino: u64, flags: i32, reply: ReplyOpen) {
        if ino == STATS_INO {
            if flags & libc::O_ACCMODE != libc::O_RDONLY {
                reply.error(libc::EACCES);
                return;
            }
            match self.stats_bytes() {
                Ok(doc) => {
                    let fh = self.next_fh;
                    self.next_fh += 1;
                    self.stats_files.insert(fh, doc);
                    // Direct I/O: reads are not cut at a size the kernel cached.
                    reply.opened(fh, fuser::consts::FOPEN_DIRECT_IO);
                }
                Err(e) => reply.error(e),
            }
            return;
        }
        // Counted, so that a file removed while open keeps its data until its release.
        match self.call(|b| b.open(ino)) {
            Ok(()) => reply.opened(0, 0),
            Err(e) => reply.error(e),
        }
    }

    fn release(
        &mut self,
        _req: &Request<'_>,
        ino: u64,
        fh: u64,
        _flags: i32,
        _lock_owner: Option<u64>,
        _flush: bool,
        reply: ReplyEmpty,
    ) {
        if ino == STATS_INO {
            self.stats_files.remove(&fh);
            reply.ok();
            return;
        }
        done(self.call(|b| b.release(ino)), reply);
    }

    fn read(
        &mut self,
        _req: &Request<'_>,
        ino: u64,
        fh: u64,
        offset: i64,
        size: u32,
        _flags: i32,
        _lock_owner: Option<u64>,
        reply: ReplyData,
    ) {
        let Ok(offset) = u64::try_from(offset) else {
            reply.error(libc::EINVAL);
            return;
        };
        if ino == STATS_INO {
            match self.stats_files.get(&fh) {
                Some(doc) => {
                    let from = (offset as usize).min(doc.len());
                    let to = from.saturating_add(size as usize).min(doc.len());
                    reply.data(&doc[from..to]);
                }
                None => reply.error(libc::EBADF),
            }
            return;
        }
        if FileIo::schedulable(offset, size as u64) {
            if let Some(q) = self.io_queue() {
                let io = FileIo {
                    ino,
                    offset,
                    op: IoOp::Read { len: size },
                };
                q.submit(
                    io,
                    Box::new(move |r| match r {
                        Ok(bytes) => reply.data(&bytes),
                        Err(e) => reply.error(errno(&e)),
                    }),
                );
                return;
            }
        }
        let mut buf = vec![0u8; size as usize];
        match self.call(|b| b.read(ino, offset, ReadInto::Bytes(&mut buf))) {
            Ok(n) => reply.data(&buf[..n as usize]),
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
        flags: i32,
        _lock_owner: Option<u64>,
        reply: ReplyWrite,
    ) {
        let Ok(offset) = u64::try_from(offset) else {
            reply.error(libc::EINVAL);
            return;
        };
        let append = flags & libc::O_APPEND != 0;
        let len = data.len() as u64;
        let in_range = offset
            .checked_add(len)
            .is_some_and(|end| end <= i64::MAX as u64);
        if !append && in_range && FileIo::schedulable(offset, len) {
            if let Some(q) = self.io_queue() {
                let io = FileIo {
                    ino,
                    offset,
                    op: IoOp::Write {
                        data: data.to_vec(),
                    },
                };
                let n = data.len() as u32;
                q.submit(
                    io,
                    Box::new(move |r| match r {
                        Ok(_) => reply.written(n),
                        Err(e) => reply.error(errno(&e)),
                    }),
                );
                return;
            }
        }
        let r = self.call(|b| {
            // O_APPEND: at the end as the file system sees it, whatever the kernel thought.
            let at = if append { b.stat(ino)?.size } else { offset };
            if at.checked_add(len).is_none_or(|end| end > i64::MAX as u64) {
                return Err(FsError::Invalid("write past the largest offset".into()));
            }
            b.write(ino, at, len, FileData::Bytes(data))
        });
        match r {
            Ok(()) => reply.written(data.len() as u32),
            Err(e) => reply.error(e),
        }
    }

    fn flush(
        &mut self,
        _req: &Request<'_>,
        _ino: u64,
        _fh: u64,
        _lock_owner: u64,
        reply: ReplyEmpty,
    ) {
        // close(2) promises no durability; fsync does.
        reply.ok();
    }

    fn fsync(&mut self, _req: &Request<'_>, ino: u64, _fh: u64, datasync: bool, reply: ReplyEmpty) {
        done(self.call(|b| b.fsync(ino, datasync)), reply);
    }

    fn opendir(&mut self, _req: &Request<'_>, ino: u64, _flags: i32, reply: ReplyOpen) {
        // The listing is read once per open, so offsets stay stable while it is read in
        // pieces (large directories), whatever changes meanwhile.
        let r = self.call(|b| {
            let entries = b.readdir(ino)?;
            let mut list = vec![
                (b".".to_vec(), ino, FileType::Directory),
                (b"..".to_vec(), ino, FileType::Directory),
            ];
            for (name, child) in entries {
                let kind = b
                    .stat(child)
                    .map_or(FileType::RegularFile, |s| file_type(s.kind));
                list.push((name.into_bytes(), child, kind));
            }
            Ok(list)
        });
        match r {
            Ok(list) => {
                let fh = self.next_fh;
                self.next_fh += 1;
                self.dirs.insert(fh, list);
                reply.opened(fh, 0);
            }
            Err(e) => reply.error(e),
        }
    }

    fn readdir(
        &mut self,
        _req: &Request<'_>,
        _ino: u64,
        fh: u64,
        offset: i64,
        mut reply: ReplyDirectory,
    ) {
        let Some(list) = self.dirs.get(&fh) else {
            reply.error(libc::EBADF);
            return;
        };
        let start = usize::try_from(offset).unwrap_or(0);
        for (i, (name, ino, kind)) in list.iter().enumerate().skip(start) {
            if reply.add(*ino, (i + 1) as i64, *kind, OsStr::from_bytes(name)) {
                break;
            }
        }
        reply.ok();
    }

    fn releasedir(
        &mut self,
        _req: &Request<'_>,
        _ino: u64,
        fh: u64,
        _flags: i32,
        reply: ReplyEmpty,
    ) {
        self.dirs.remove(&fh);
        reply.ok();
    }

    fn fsyncdir(
        &mut self,
        _req: &Request<'_>,
        ino: u64,
        _fh: u64,
        datasync: bool,
        reply: ReplyEmpty,
    ) {
        done(self.call(|b| b.fsync(ino, datasync)), reply);
    }

    fn statfs(&mut self, _req: &Request<'_>, _ino: u64, reply: ReplyStatfs) {
        match self.call(|b| b.statfs()) {
            Ok(s) => {
                let bs = s.block_bytes.max(512) as u64;
                let free = s.free_bytes / bs;
                reply.statfs(
                    s.total_bytes / bs,
                    free,
                    free,
                    s.inodes_total,
                    s.inodes_total.saturating_sub(s.inodes_used),
                    bs as u32,
                    vfs::NAME_MAX as u32,
                    bs as u32,
                )
            }
            Err(e) => reply.error(e),
        }
    }

    fn setxattr(
        &mut self,
        _req: &Request<'_>,
        ino: u64,
        name: &OsStr,
        value: &[u8],
        flags: i32,
        _position: u32,
        reply: ReplyEmpty,
    ) {
        let r = (|| {
            let Some(n) = user_name(name)? else {
                return Err(libc::EOPNOTSUPP);
            };
            let mode = match flags {
                0 => XattrMode::Any,
                libc::XATTR_CREATE => XattrMode::Create,
                libc::XATTR_REPLACE => XattrMode::Replace,
                _ => return Err(libc::EINVAL),
            };
            self.call(|b| b.setxattr(ino, n, value, mode)).map_err(|e| {
                if e == libc::ENOENT {
                    libc::ENODATA
                } else {
                    e
                }
            })
        })();
        done(r, reply);
    }

    fn getxattr(
        &mut self,
        _req: &Request<'_>,
        ino: u64,
        name: &OsStr,
        size: u32,
        reply: ReplyXattr,
    ) {
        let r = (|| {
            // Other namespaces (security.*, system.*): never set, so absent.
            let Some(n) = user_name(name)? else {
                return Err(libc::ENODATA);
            };
            self.call(|b| b.getxattr(ino, n))?.ok_or(libc::ENODATA)
        })();
        match r {
            Ok(v) => xattr_reply(&v, size, reply),
            Err(e) => reply.error(e),
        }
    }

    fn listxattr(&mut self, _req: &Request<'_>, ino: u64, size: u32, reply: ReplyXattr) {
        match self.call(|b| b.listxattr(ino)) {
            Ok(names) => {
                let mut out = Vec::new();
                for n in names {
                    out.extend_from_slice(USER.as_bytes());
                    out.extend_from_slice(n.as_bytes());
                    out.push(0);
                }
                xattr_reply(&out, size, reply)
            }
            Err(e) => reply.error(e),
        }
    }

    fn removexattr(&mut self, _req: &Request<'_>, ino: u64, name: &OsStr, reply: ReplyEmpty) {
        let r = (|| {
            let Some(n) = user_name(name)? else {
                return Err(libc::ENODATA);
            };
            self.call(|b| b.removexattr(ino, n)).map_err(|e| {
                if e == libc::ENOENT {
                    libc::ENODATA
                } else {
                    e
                }
            })
        })();
        done(r, reply);
    }

    fn access(&mut self, _req: &Request<'_>, _ino: u64, _mask: i32, reply: ReplyEmpty) {
        // The kernel checks permissions (default_permissions).
        reply.ok();
    }

    fn create(
        &mut self,
        req: &Request<'_>,
        parent: u64,
        name: &OsStr,
        mode: u32,
        umask: u32,
        _flags: i32,
        reply: ReplyCreate,
    ) {
        let r = self
            .make(req, parent, name, FileKind::File, mode, umask)
            .and_then(|ino| {
                self.call(|b| b.open(ino))?;
                self.attr(ino)
            });
        match r {
            Ok(a) => reply.created(&TTL, &a, 0, 0, 0),
            Err(e) => reply.error(e),
        }
    }
}
