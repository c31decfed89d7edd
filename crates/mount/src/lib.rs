#![deny(clippy::unwrap_used, clippy::expect_used)]
#![warn(missing_docs)]
//! OFS mounted with FUSE: real programs on ossd.
//!
//! ```text
//!   write(2) -> kernel FUSE -> OssdFuse (fuse.rs) -> Backend (the seam)
//!       ScheduledOfs (the default): reads/writes -> OAQ -> device-side controller -> Ofs
//!                                   other calls  -> (OAQ drained) -> Ofs
//!       DirectOfs (--direct):       every call   -> Ofs
//!                                               Ofs -> ObjectStore -> Nand<ImageStore>
//! ```
//!
//! - [`Backend`] is the one seam every file system call of the mount goes through:
//!   [`Backend::call`] runs a [`vfs::FileSystem`] call, [`Backend::io_queue`] (when the backend
//!   has one) takes file reads and writes asynchronously, and [`Backend::shutdown`] ends it.
//!   [`ScheduledOfs`] (module [`scheduled`]) is OSSD-13's host path: each read and write is an
//!   object I/O instance for OAQ, and a device thread, the device-side controller, orders OAQ's
//!   object requests against GC steps by priority (`controller::policy::decide`). The program's
//!   `user.ossd.priority` on a file is the class its requests queue at. [`DirectOfs`] calls OFS
//!   directly, one call at a time, as a reference.
//! - The adapter ([`fuse::OssdFuse`]) runs the FUSE session loop on one thread. It maps
//!   [`vfs::FsError`] to errno values and never panics: a panic inside the backend is caught,
//!   answered with EIO, and the backend refuses every later call (the store's state is
//!   unknown), until the image is mounted again. Reads and writes the host path queued are
//!   answered from the controller's thread, so several can be in flight and merge in OAQ.
//! - Time: before each call the backend's clock is set to the wall clock (ns since the Unix
//!   epoch), so the times the store keeps (modified, accessed, attributes changed) are real
//!   times. With [`Timing::Emulate`] each reply is held until the device model's completion
//!   time of the call, so programs see the simulated device's latency.
//! - Statistics ([`stats`]): `.ossd-stats.json` at the mount's root is a read-only file of the
//!   device's counters, OAQ's and the controller's work and the latency per priority class,
//!   made afresh at each open; the same document is written on unmount
//!   ([`MountOptions::stats_out`]).
//! - Unmount (Ctrl-C, SIGTERM, `fusermount3 -u`, or [`Mounted::unmount`]) ends the session,
//!   then [`Backend::shutdown`] marks OFS clean, flushes and closes the store (its checkpoint).
//!   After a crash (kill -9) the next mount finds OFS not clean and repairs it.

pub mod blockdev;
pub mod blockfs_mount;
pub mod fuse;
pub mod image;
pub mod remote;
pub mod scheduled;
pub mod stats;

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard};
use std::thread::JoinHandle;

use flash::image::ImageStore;
use flash::Nand;
use nix::sys::signal::{SigSet, Signal};
use ofs::Ofs;
use osd::ObjectStore;
use vfs::{FileSystem, FsError};

pub use fuse::OssdFuse;
pub use scheduled::{FileIo, HostStore, IoDone, IoOp, IoQueue, ScheduledOfs};

/// The one seam between the FUSE adapter and the file system below: every call the mount makes
/// goes through this trait.
pub trait Backend: Send + 'static {
    /// The file system the calls reach.
    type Fs: FileSystem;

    /// Runs one file system call. A backend that queues reads and writes first waits until
    /// they have all run, so the call sees every write the kernel was answered for. Fails
    /// only when the backend itself can serve no call any more.
    fn call<T>(&mut self, f: impl FnOnce(&mut Self::Fs) -> T) -> Result<T, FsError>;

    /// Where reads and writes of whole sectors go asynchronously; `None` (the default): they
    /// are ordinary calls.
    fn io_queue(&self) -> Option<IoQueue> {
        None
    }

    /// The statistics document of [`stats`]; [`FsError::Unsupported`] (the default) when the
    /// backend keeps none.
    fn stats(&mut self) -> Result<serde_json::Value, FsError> {
        Err(FsError::Unsupported("statistics".into()))
    }

    /// Ends the file system cleanly: marks it clean, makes everything durable and closes the
    /// device.
    fn shutdown(self) -> Result<(), FsError>;
}

/// OFS on an image-backed object store, called directly, one call at a time (no OAQ, no
/// device-side controller): `ossd mount --direct`, and what [`ScheduledOfs`] runs on.
pub type DirectOfs = Ofs<ImageObjectStore>;

/// The object store on a device image.
pub type ImageObjectStore = ObjectStore<Nand<ImageStore>>;

impl Backend for DirectOfs {
    type Fs = Self;

    fn call<T>(&mut self, f: impl FnOnce(&mut Self) -> T) -> Result<T, FsError> {
        Ok(f(self))
    }

    fn stats(&mut self) -> Result<serde_json::Value, FsError> {
        Ok(stats::mount_json(
            "OFS (direct calls)",
            Timing::None,
            stats::ofs_json(self),
            None,
            serde_json::json!({}),
        ))
    }

    fn shutdown(self) -> Result<(), FsError> {
        let store = self.unmount()?;
        store
            .close()
            .map_err(|e| FsError::Device(format!("closing the store: {e}")))?;
        Ok(())
    }
}

/// How replies relate to the device model's time.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Timing {
    /// Reply as soon as the call is done (the device model's latency is not felt).
    #[default]
    None,
    /// Hold each reply until the device model's completion time of the call (virtual ns from
    /// the call's issue at the wall clock), so programs feel the simulated device.
    Emulate,
}

impl std::str::FromStr for Timing {
    type Err = UnknownTiming;
    fn from_str(s: &str) -> Result<Self, UnknownTiming> {
        match s {
            "none" => Ok(Timing::None),
            "emulate" => Ok(Timing::Emulate),
            _ => Err(UnknownTiming { name: s.into() }),
        }
    }
}

/// A timing name [`Timing`]'s `FromStr` does not know.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("timing '{name}': use none or emulate")]
pub struct UnknownTiming {
    /// The name given.
    pub name: String,
}

/// Mount settings.
#[derive(Clone, Debug, Default)]
pub struct MountOptions {
    /// Whether replies wait for the device model's completion time (default: no).
    pub timing: Timing,
    /// Let users other than the one mounting use the mount (FUSE's `allow_other`).
    pub allow_other: bool,
    /// Where the statistics document is written on unmount (none: not written).
    pub stats_out: Option<PathBuf>,
}

/// Errors of mounting.
#[derive(Debug, thiserror::Error)]
pub enum MountError {
    /// Opening the image failed.
    #[error("{0}")]
    Image(#[from] image::ImageError),
    /// FUSE could not mount at the path.
    #[error("mounting at {0}: {1} (is /dev/fuse there, and fusermount3 from the fuse3 package installed?)")]
    Fuse(PathBuf, std::io::Error),
    /// The mount point is not a directory.
    #[error("{0} is not a directory")]
    NotADirectory(PathBuf),
    /// The backend's clean shutdown (OFS marked clean, store flushed and closed) failed.
    #[error("unmounting: {0}")]
    Shutdown(FsError),
    /// Checkpointing the exported FTL and closing its image failed.
    #[error("closing the FTL: {0}")]
    Ftl(ftl::FtlError),
    /// The FUSE session loop failed.
    #[error("the FUSE session failed: {0}")]
    Session(std::io::Error),
    /// The thread serving the mount panicked.
    #[error("the session thread panicked")]
    Panicked,
    /// The signals that unmount could not be blocked for `sigwait`.
    #[error("blocking SIGINT, SIGTERM and SIGHUP: {0}")]
    Signals(std::io::Error),
}

fn fuse_options(opts: &MountOptions) -> Vec<fuser::MountOption> {
    let mut o = vec![
        fuser::MountOption::FSName("ossd".into()),
        fuser::MountOption::Subtype("ofs".into()),
        // The kernel checks permissions against the mode bits OFS keeps.
        fuser::MountOption::DefaultPermissions,
    ];
    if opts.allow_other {
        o.push(fuser::MountOption::AllowOther);
    }
    o
}

type Shared<B> = Arc<Mutex<Option<B>>>;

fn session<B: Backend>(
    backend: B,
    mountpoint: &Path,
    opts: &MountOptions,
) -> Result<(fuser::Session<OssdFuse<B>>, Shared<B>), MountError> {
    if !mountpoint.is_dir() {
        return Err(MountError::NotADirectory(mountpoint.to_owned()));
    }
    let shared: Shared<B> = Arc::new(Mutex::new(Some(backend)));
    let fs = OssdFuse::new(shared.clone(), opts.timing);
    let s = fuser::Session::new(fs, mountpoint, &fuse_options(opts))
        .map_err(|e| MountError::Fuse(mountpoint.to_owned(), e))?;
    Ok((s, shared))
}

/// The guard of a slot shared with the session thread, whether or not a panicking holder
/// poisoned the mutex: the slot itself says, by being empty, that what it held is unusable.
pub(crate) fn lock_slot<T>(slot: &Mutex<Option<T>>) -> MutexGuard<'_, Option<T>> {
    slot.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// Empties a shared slot (see [`lock_slot`]).
pub(crate) fn take_slot<T>(slot: &Mutex<Option<T>>) -> Option<T> {
    lock_slot(slot).take()
}

/// After the session ended: write the statistics, and shut the backend down (unless a panic
/// poisoned it).
fn finish<B: Backend>(shared: &Shared<B>, stats_out: Option<&Path>) -> Result<(), MountError> {
    match take_slot(shared) {
        Some(mut b) => {
            if let Some(path) = stats_out {
                write_stats(&mut b, path);
            }
            b.shutdown().map_err(MountError::Shutdown)
        }
        None => Err(MountError::Shutdown(FsError::Device(
            "the file system was poisoned by an earlier failure; it was not marked clean, \
             the next mount repairs it"
                .into(),
        ))),
    }
}

/// Writes the backend's statistics document to `path`; a failure is reported, not fatal (the
/// data is what matters at unmount).
fn write_stats<B: Backend>(b: &mut B, path: &Path) {
    let r = b
        .stats()
        .map_err(|e| e.to_string())
        .and_then(|v| serde_json::to_string_pretty(&v).map_err(|e| e.to_string()))
        .and_then(|text| std::fs::write(path, text + "\n").map_err(|e| e.to_string()));
    if let Err(e) = r {
        eprintln!(
            "ossd mount: statistics not written to {}: {e}",
            path.display()
        );
    }
}

/// Unmounts `mountpoint` (as root directly, else through `fusermount3 -u`). If it is busy
/// (files open on it), detaches it lazily: it disappears from the tree at once and the session
/// loop ends once the last open file is closed. A mount point with nothing mounted is fine.
pub fn request_unmount(mountpoint: &Path) -> std::io::Result<()> {
    use nix::errno::Errno;
    use nix::mount::{umount2, MntFlags};
    for flags in [MntFlags::empty(), MntFlags::MNT_DETACH] {
        match umount2(mountpoint, flags) {
            Ok(()) => return Ok(()),
            // Not a mount point (any more): nothing to do.
            Err(Errno::EINVAL) => return Ok(()),
            Err(Errno::EBUSY) => {
                eprintln!(
                    "{} is busy (open files): detached; the mount ends when they are closed",
                    mountpoint.display()
                );
            }
            // Not root: fusermount3 does it.
            Err(Errno::EPERM) => break,
            Err(_) => {}
        }
    }
    for args in [&["-u"][..], &["-u", "-z"][..]] {
        let status = std::process::Command::new("fusermount3")
            .args(args)
            .arg(mountpoint)
            .stderr(std::process::Stdio::null())
            .status()?;
        if status.success() {
            return Ok(());
        }
    }
    Err(std::io::Error::other(format!(
        "could not unmount {}",
        mountpoint.display()
    )))
}

/// Mounts `backend` at `mountpoint` and serves it on this thread until it is unmounted
/// (`fusermount3 -u`, or SIGINT / SIGTERM when `handle_signals`), then shuts the backend
/// down cleanly. `ready` is called once the mount is in place.
pub fn mount<B: Backend>(
    backend: B,
    mountpoint: &Path,
    opts: &MountOptions,
    handle_signals: bool,
    ready: impl FnOnce(),
) -> Result<(), MountError> {
    if !mountpoint.is_dir() {
        return Err(MountError::NotADirectory(mountpoint.to_owned()));
    }
    let shared: Shared<B> = Arc::new(Mutex::new(Some(backend)));
    let fs = OssdFuse::new(shared.clone(), opts.timing);
    let run = serve_until_unmounted(fs, mountpoint, &fuse_options(opts), handle_signals, ready);
    let done = finish(&shared, opts.stats_out.as_deref());
    run?;
    done
}

/// Mounts any FUSE file system `fs` at `mountpoint` and serves it on this thread until it is
/// unmounted (`fusermount3 -u`, or SIGINT / SIGTERM / SIGHUP when `handle_signals`). `ready`
/// is called once the mount is in place. What is behind `fs` is the caller's to close.
pub(crate) fn serve_until_unmounted<F: fuser::Filesystem>(
    fs: F,
    mountpoint: &Path,
    options: &[fuser::MountOption],
    handle_signals: bool,
    ready: impl FnOnce(),
) -> Result<(), MountError> {
    if handle_signals {
        block_signals().map_err(|e| MountError::Signals(e.into()))?;
    }
    let mut s = fuser::Session::new(fs, mountpoint, options)
        .map_err(|e| MountError::Fuse(mountpoint.to_owned(), e))?;
    if handle_signals {
        let mp = mountpoint.to_owned();
        std::thread::spawn(move || loop {
            let sig = match wait_signal() {
                Ok(sig) => sig,
                Err(e) => {
                    eprintln!("ossd mount: waiting for signals failed: {e}");
                    return;
                }
            };
            eprintln!("ossd mount: signal {sig}: unmounting {}", mp.display());
            if let Err(e) = request_unmount(&mp) {
                eprintln!("ossd mount: unmount of {} failed: {e}", mp.display());
            }
        });
    }
    ready();
    let run = s.run();
    drop(s);
    run.map_err(MountError::Session)
}

/// A mount served by a thread of this process (tests, and programs embedding ossd).
pub struct Mounted {
    mountpoint: PathBuf,
    thread: Option<JoinHandle<Result<(), MountError>>>,
}

/// Mounts `backend` at `mountpoint`, served on a new thread; [`Mounted::unmount`] ends it.
pub fn spawn<B: Backend>(
    backend: B,
    mountpoint: &Path,
    opts: &MountOptions,
) -> Result<Mounted, MountError> {
    let (mut s, shared) = session(backend, mountpoint, opts)?;
    let stats_out = opts.stats_out.clone();
    let thread = std::thread::spawn(move || {
        let run = s.run();
        drop(s);
        let done = finish(&shared, stats_out.as_deref());
        run.map_err(MountError::Session)?;
        done
    });
    Ok(Mounted {
        mountpoint: mountpoint.to_owned(),
        thread: Some(thread),
    })
}

impl Mounted {
    /// Where it is mounted.
    pub fn mountpoint(&self) -> &Path {
        &self.mountpoint
    }

    /// Unmounts and waits for the backend's clean shutdown.
    pub fn unmount(mut self) -> Result<(), MountError> {
        self.end()
    }

    fn end(&mut self) -> Result<(), MountError> {
        let Some(t) = self.thread.take() else {
            return Ok(());
        };
        if !t.is_finished() {
            request_unmount(&self.mountpoint)
                .map_err(|e| MountError::Fuse(self.mountpoint.clone(), e))?;
        }
        t.join().map_err(|_| MountError::Panicked)?
    }
}

impl Drop for Mounted {
    fn drop(&mut self) {
        if let Err(e) = self.end() {
            eprintln!("unmounting {}: {e}", self.mountpoint.display());
        }
    }
}

/// SIGINT, SIGTERM and SIGHUP: the signals that unmount.
fn signal_set() -> SigSet {
    let mut set = SigSet::empty();
    for sig in [Signal::SIGINT, Signal::SIGTERM, Signal::SIGHUP] {
        set.add(sig);
    }
    set
}

/// Blocks SIGINT, SIGTERM and SIGHUP in this thread and the threads it starts, so that only
/// the mount's signal thread receives them. Call it before starting a backend's threads
/// ([`ScheduledOfs::start`]) when the mount is to handle these signals.
pub fn block_signals() -> nix::Result<()> {
    signal_set().thread_block()
}

/// Waits (sigwait) for one of the blocked signals; returns its number.
fn wait_signal() -> nix::Result<i32> {
    signal_set().wait().map(|sig| sig as i32)
}
