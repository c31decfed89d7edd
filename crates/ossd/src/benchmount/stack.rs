//! The two stacks `ossd bench-mount` runs real programs on, each in this process so that the
//! device's counters can be read between phases:
//!
//! - OFS on an object store image, mounted with FUSE ([`mount::spawn`]) through [`SharedFs`], a
//!   [`mount::Backend`] that keeps the file system behind a mutex the harness can lock between
//!   calls;
//! - real ext4 on the page-mapping FTL of a block image: [`mount::blockdev::serve_shared`] on a
//!   thread, a loop device with direct I/O on its file (so the host does not cache the device
//!   twice), `mkfs.ext4` and `mount -o discard`.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::{Arc, Mutex, MutexGuard};
use std::thread::JoinHandle;

use flash::image::{ImageContent, ImageStore};
use flash::{DeviceConfig, Nand, Nanos};
use mount::blockdev::SharedFtl;
use mount::{Backend, MountError, MountOptions};
use ofs::Ofs;
use osd::{ObjectStore, Placement};
use stacks::Counters;
use vfs::{
    FileAttr, FileData, FileKind, FileStat, FileSystem, FsCounters, FsError, Ino, Owner, ReadInto,
    SetAttr, SpaceInfo, Special, XattrMode,
};

use super::BenchError;

type ImageOfs = mount::DirectOfs;
type Slot<B> = Arc<Mutex<Option<B>>>;

fn lock<B>(slot: &Mutex<Option<B>>) -> MutexGuard<'_, Option<B>> {
    slot.lock().unwrap_or_else(|p| p.into_inner())
}

/// A file system shared between the FUSE session (which calls it) and the harness (which reads
/// its counters between calls). Empty once shut down.
pub struct SharedFs<B> {
    slot: Slot<B>,
    name: String,
}

fn gone() -> FsError {
    FsError::Device("the file system was shut down".into())
}

impl<B: FileSystem> SharedFs<B> {
    fn with<T>(&self, f: impl FnOnce(&mut B) -> Result<T, FsError>) -> Result<T, FsError> {
        match lock(&self.slot).as_mut() {
            Some(b) => f(b),
            None => Err(gone()),
        }
    }
}

/// OFS called directly (as `ossd mount --direct`): the harness reads the store's counters
/// between phases through the same slot.
impl Backend for SharedFs<ImageOfs> {
    type Fs = Self;

    fn call<T>(&mut self, f: impl FnOnce(&mut Self) -> T) -> Result<T, FsError> {
        Ok(f(self))
    }

    fn shutdown(self) -> Result<(), FsError> {
        match lock(&self.slot).take() {
            Some(fs) => fs.shutdown(),
            None => Err(gone()),
        }
    }
}

impl<B: FileSystem> FileSystem for SharedFs<B> {
    fn name(&self) -> &str {
        &self.name
    }
    fn lookup(&mut self, dir: Ino, name: &str) -> Result<Option<Ino>, FsError> {
        self.with(|b| b.lookup(dir, name))
    }
    fn create(&mut self, dir: Ino, name: &str) -> Result<Ino, FsError> {
        self.with(|b| b.create(dir, name))
    }
    fn mkdir(&mut self, dir: Ino, name: &str) -> Result<Ino, FsError> {
        self.with(|b| b.mkdir(dir, name))
    }
    fn unlink(&mut self, dir: Ino, name: &str) -> Result<(), FsError> {
        self.with(|b| b.unlink(dir, name))
    }
    fn rmdir(&mut self, dir: Ino, name: &str) -> Result<(), FsError> {
        self.with(|b| b.rmdir(dir, name))
    }
    fn readdir(&mut self, dir: Ino) -> Result<Vec<(String, Ino)>, FsError> {
        self.with(|b| b.readdir(dir))
    }
    fn write(
        &mut self,
        ino: Ino,
        offset: u64,
        len: u64,
        data: FileData<'_>,
    ) -> Result<(), FsError> {
        self.with(|b| b.write(ino, offset, len, data))
    }
    fn read(&mut self, ino: Ino, offset: u64, into: ReadInto<'_>) -> Result<u64, FsError> {
        self.with(|b| b.read(ino, offset, into))
    }
    fn truncate(&mut self, ino: Ino, size: u64) -> Result<(), FsError> {
        self.with(|b| b.truncate(ino, size))
    }
    fn stat(&mut self, ino: Ino) -> Result<FileStat, FsError> {
        self.with(|b| b.stat(ino))
    }
    fn fsync(&mut self, ino: Ino, data_only: bool) -> Result<(), FsError> {
        self.with(|b| b.fsync(ino, data_only))
    }
    fn sync(&mut self) -> Result<(), FsError> {
        self.with(|b| b.sync())
    }
    fn set_time(&mut self, at: Nanos) {
        if let Some(b) = lock(&self.slot).as_mut() {
            b.set_time(at)
        }
    }
    fn now(&self) -> Nanos {
        lock(&self.slot).as_ref().map_or(0, |b| b.now())
    }
    fn background(&mut self, from: Nanos, until: Nanos) -> Result<Nanos, FsError> {
        self.with(|b| b.background(from, until))
    }
    fn counters(&self) -> FsCounters {
        lock(&self.slot)
            .as_ref()
            .map_or_else(Vec::new, |b| b.counters())
    }
    fn check(&mut self) -> Result<Vec<String>, FsError> {
        self.with(|b| b.check())
    }
    fn getattr(&mut self, ino: Ino) -> Result<FileAttr, FsError> {
        self.with(|b| b.getattr(ino))
    }
    fn create_as(
        &mut self,
        dir: Ino,
        name: &str,
        kind: FileKind,
        owner: Owner,
    ) -> Result<Ino, FsError> {
        self.with(|b| b.create_as(dir, name, kind, owner))
    }
    fn symlink(
        &mut self,
        dir: Ino,
        name: &str,
        target: &[u8],
        owner: Owner,
    ) -> Result<Ino, FsError> {
        self.with(|b| b.symlink(dir, name, target, owner))
    }
    fn mknod(
        &mut self,
        dir: Ino,
        name: &str,
        kind: Special,
        rdev: u64,
        owner: Owner,
    ) -> Result<Ino, FsError> {
        self.with(|b| b.mknod(dir, name, kind, rdev, owner))
    }
    fn readlink(&mut self, ino: Ino) -> Result<Vec<u8>, FsError> {
        self.with(|b| b.readlink(ino))
    }
    fn link(&mut self, ino: Ino, dir: Ino, name: &str) -> Result<(), FsError> {
        self.with(|b| b.link(ino, dir, name))
    }
    fn rename(
        &mut self,
        dir: Ino,
        name: &str,
        new_dir: Ino,
        new_name: &str,
    ) -> Result<(), FsError> {
        self.with(|b| b.rename(dir, name, new_dir, new_name))
    }
    fn setattr(&mut self, ino: Ino, set: SetAttr) -> Result<FileAttr, FsError> {
        self.with(|b| b.setattr(ino, set))
    }
    fn getxattr(&mut self, ino: Ino, name: &str) -> Result<Option<Vec<u8>>, FsError> {
        self.with(|b| b.getxattr(ino, name))
    }
    fn setxattr(
        &mut self,
        ino: Ino,
        name: &str,
        value: &[u8],
        mode: XattrMode,
    ) -> Result<(), FsError> {
        self.with(|b| b.setxattr(ino, name, value, mode))
    }
    fn listxattr(&mut self, ino: Ino) -> Result<Vec<String>, FsError> {
        self.with(|b| b.listxattr(ino))
    }
    fn removexattr(&mut self, ino: Ino, name: &str) -> Result<(), FsError> {
        self.with(|b| b.removexattr(ino, name))
    }
    fn statfs(&mut self) -> Result<SpaceInfo, FsError> {
        self.with(|b| b.statfs())
    }
    fn open(&mut self, ino: Ino) -> Result<(), FsError> {
        self.with(|b| b.open(ino))
    }
    fn release(&mut self, ino: Ino) -> Result<(), FsError> {
        self.with(|b| b.release(ino))
    }
}

/// Runs a command; its failure (or absence) is an error naming it, with its standard error.
pub fn run(cmd: &mut Command) -> Result<String, BenchError> {
    let name = format!("{cmd:?}");
    let out = cmd.output().map_err(|e| BenchError::Spawn {
        cmd: name.clone(),
        source: e,
    })?;
    if !out.status.success() {
        return Err(BenchError::Failed {
            cmd: name,
            status: out.status.to_string(),
            stderr: String::from_utf8_lossy(&out.stderr).trim().to_string(),
        });
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

/// A stack with real programs' files under [`Running::dir`].
pub struct Running {
    /// The variant's label in the report.
    pub label: String,
    /// Where the programs work.
    pub dir: PathBuf,
    kind: Kind,
}

enum Kind {
    Ofs {
        slot: Slot<ImageOfs>,
        mounted: Option<mount::Mounted>,
        _lock: mount::image::ImageLock,
    },
    Ext4 {
        slot: SharedFtl,
        fuse_dir: PathBuf,
        thread: Option<JoinHandle<Result<(), MountError>>>,
        loopdev: Option<String>,
        ext_mounted: bool,
        _lock: mount::image::ImageLock,
    },
}

/// What ages a file system before the measurements: called on its mount point, through a
/// mount with `--timing none` (host speed), which is then ended cleanly.
pub type Age<'a> = &'a dyn Fn(&Path) -> Result<(), BenchError>;

/// OFS with `placement` on a new image at `image`, mounted at `mnt` (aged first by `age`).
pub fn ofs(
    label: &str,
    image: &Path,
    mnt: &Path,
    device: DeviceConfig,
    placement: Placement,
    opts: &MountOptions,
    age: Option<Age>,
) -> Result<Running, BenchError> {
    mount::image::format(image, device, placement, ofs::OfsConfig::default())?;
    if let Some(age) = age {
        let fast = MountOptions {
            timing: mount::Timing::None,
            ..opts.clone()
        };
        let mut st = mount_ofs(label, image, mnt, placement, &fast)?;
        age(mnt)?;
        st.end()?;
    }
    mount_ofs(label, image, mnt, placement, opts)
}

fn mount_ofs(
    label: &str,
    image: &Path,
    mnt: &Path,
    placement: Placement,
    opts: &MountOptions,
) -> Result<Running, BenchError> {
    let lock = mount::image::lock(image)?;
    let (device, store) = ImageStore::open(image).map_err(mount::image::ImageError::from)?;
    mount::image::expect_content(image, &store, ImageContent::ObjectStore)?;
    let nand = Nand::open(device, store).map_err(mount::image::ImageError::from)?;
    // The placement is a setting of the open store, not of the image: open it as formatted.
    let store = ObjectStore::open(nand, mount::image::store_config(&device, placement))
        .map_err(|e| mount::image::ImageError::Store(image.to_owned(), e))?;
    let fs = Ofs::mount(store).map_err(|e| mount::image::ImageError::Fs(image.to_owned(), e))?;
    let slot: Slot<ImageOfs> = Arc::new(Mutex::new(Some(fs)));
    let backend = SharedFs {
        slot: slot.clone(),
        name: label.to_string(),
    };
    let mounted = mount::spawn(backend, mnt, opts)?;
    Ok(Running {
        label: label.to_string(),
        dir: mnt.to_owned(),
        kind: Kind::Ofs {
            slot,
            mounted: Some(mounted),
            _lock: lock,
        },
    })
}

/// Real ext4 on the page-mapping FTL of a new image at `image`: exported at `fuse_dir`, a loop
/// device with direct I/O on the file, `mkfs.ext4` (inode tables and journal written at mkfs,
/// not lazily in the background during the measurements) and `mount -o discard` at `ext_dir`.
pub fn ext4(
    label: &str,
    image: &Path,
    fuse_dir: &Path,
    ext_dir: &Path,
    device: DeviceConfig,
    opts: &MountOptions,
    age: Option<Age>,
) -> Result<Running, BenchError> {
    mount::blockdev::format(image, device)?;
    let mut mkfs = true;
    if let Some(age) = age {
        let fast = MountOptions {
            timing: mount::Timing::None,
            ..opts.clone()
        };
        let mut st = export_ext4(label, image, fuse_dir, ext_dir, &fast, true)?;
        age(ext_dir)?;
        st.end()?;
        drop(st);
        mkfs = false;
    }
    export_ext4(label, image, fuse_dir, ext_dir, opts, mkfs)
}

fn export_ext4(
    label: &str,
    image: &Path,
    fuse_dir: &Path,
    ext_dir: &Path,
    opts: &MountOptions,
    mkfs: bool,
) -> Result<Running, BenchError> {
    let (ftl, lock) = mount::blockdev::open(image)?;
    let slot: SharedFtl = Arc::new(Mutex::new(Some(ftl)));
    let (tx, rx) = std::sync::mpsc::channel();
    let thread = {
        let (slot, dir, opts) = (slot.clone(), fuse_dir.to_owned(), opts.clone());
        std::thread::spawn(move || {
            mount::blockdev::serve_shared(slot, &dir, &opts, false, || {
                let _ = tx.send(());
            })
        })
    };
    let mut r = Running {
        label: label.to_string(),
        dir: ext_dir.to_owned(),
        kind: Kind::Ext4 {
            slot,
            fuse_dir: fuse_dir.to_owned(),
            thread: Some(thread),
            loopdev: None,
            ext_mounted: false,
            _lock: lock,
        },
    };
    if rx.recv().is_err() {
        // The session thread ended before mounting: its error says why.
        return Err(r.end().err().unwrap_or(BenchError::ExportEnded));
    }
    let disk = mount::blockdev::disk_path(fuse_dir);
    let dev = run(Command::new("losetup")
        .args(["-f", "--show", "--direct-io=on"])
        .arg(&disk))?;
    let dev = dev.trim().to_string();
    if let Kind::Ext4 { loopdev, .. } = &mut r.kind {
        *loopdev = Some(dev.clone());
    }
    if mkfs {
        run(Command::new("mkfs.ext4")
            .args(["-q", "-F", "-E", "lazy_itable_init=0,lazy_journal_init=0"])
            .arg(&dev))?;
    }
    run(Command::new("mount")
        .args(["-o", "discard", &dev])
        .arg(ext_dir))?;
    if let Kind::Ext4 { ext_mounted, .. } = &mut r.kind {
        *ext_mounted = true;
    }
    Ok(r)
}

impl Running {
    /// The device's counters now (after `sync` of the file system, so that what the programs
    /// left in the host's page cache is counted where it was written).
    pub fn counters(&self) -> Counters {
        let _ = Command::new("sync").arg("-f").arg(&self.dir).status();
        match &self.kind {
            Kind::Ofs { slot, .. } => lock(slot)
                .as_ref()
                .map(|fs| stacks::osd_counters(fs.store()))
                .unwrap_or_default(),
            Kind::Ext4 { slot, .. } => lock(slot)
                .as_ref()
                .map(stacks::ftl_counters)
                .unwrap_or_default(),
        }
    }

    /// Why the stack is no longer mounted, if it is not: the FUSE session ended (unmounted or
    /// its connection aborted from outside), so programs would now write into the empty
    /// directory beneath and measure nothing of ossd.
    pub fn gone(&self) -> Option<String> {
        let ended = |mounted: bool, slot_empty: bool| -> Option<String> {
            if slot_empty || !mounted {
                Some(format!(
                    "the {} mount at {} ended during the run (unmounted or aborted from outside); \
                     this phase measured nothing of ossd",
                    self.label,
                    self.dir.display()
                ))
            } else {
                None
            }
        };
        match &self.kind {
            Kind::Ofs { slot, mounted, .. } => ended(
                mounted.is_some() && crate::mountcmd::is_mounted(&self.dir),
                lock(slot).is_none(),
            ),
            Kind::Ext4 {
                slot,
                fuse_dir,
                ext_mounted,
                ..
            } => ended(
                *ext_mounted && crate::mountcmd::is_mounted(fuse_dir),
                lock(slot).is_none(),
            ),
        }
    }

    /// Whether this is OFS (which takes `user.ossd.priority`).
    pub fn is_ofs(&self) -> bool {
        matches!(self.kind, Kind::Ofs { .. })
    }

    /// Unmounts everything in reverse order; the image is closed cleanly.
    pub fn end(&mut self) -> Result<(), BenchError> {
        match &mut self.kind {
            Kind::Ofs { mounted, .. } => match mounted.take() {
                Some(m) => m.unmount().map_err(BenchError::from),
                None => Ok(()),
            },
            Kind::Ext4 {
                fuse_dir,
                thread,
                loopdev,
                ext_mounted,
                ..
            } => {
                let mut first: Option<BenchError> = None;
                if std::mem::take(ext_mounted) {
                    if let Err(e) = run(Command::new("umount").arg(&self.dir)) {
                        first.get_or_insert(e);
                    }
                }
                if let Some(dev) = loopdev.take() {
                    if let Err(e) = run(Command::new("losetup").args(["-d", &dev])) {
                        first.get_or_insert(e);
                    }
                }
                if let Some(t) = thread.take() {
                    if !t.is_finished() {
                        if let Err(e) = mount::request_unmount(fuse_dir) {
                            first.get_or_insert(BenchError::Unmount(e));
                        }
                    }
                    match t.join() {
                        Ok(Ok(())) => {}
                        Ok(Err(e)) => {
                            first.get_or_insert(e.into());
                        }
                        Err(_) => {
                            first.get_or_insert(BenchError::Mount(MountError::Panicked));
                        }
                    }
                }
                first.map_or(Ok(()), Err)
            }
        }
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        if let Err(e) = self.end() {
            eprintln!("bench-mount: ending {}: {e}", self.label);
        }
    }
}
