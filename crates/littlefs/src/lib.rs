//! LittleFS, a real flash file system, on ossd's NAND device model: the `littlefs2` crate
//! (littlefs's own C source through `littlefs2-sys`) over [`flash::Flash`], so that the lab can
//! run it beside OFS and the FTL + blockfs on the same device and workload (OSCM-11 Fig. 8
//! compares OBFS with YAFFS, JFFS2 and UBIFS, which need a kernel).
//!
//! The mapping onto the device:
//! - a LittleFS block is one NAND erase block, and its erase is the device's erase;
//! - the read and program sizes are one page, and every read and program goes to the device
//!   model at the file system's virtual time, so it costs the device's time and is counted like
//!   any other stack's pages programmed, pages read and blocks erased;
//! - the cache size is one page (littlefs's read cache, program cache and one per open file).
//!
//! `littlefs2`'s `Filesystem` borrows its allocation and its storage for its whole life, and its
//! block geometry is a set of constants of the storage type. So [`LittleFs`] owns the three in
//! one self-referencing value (`ouroboros`), behind a trait object over the two geometries, and
//! runs each call's command on the caller's thread. (A worker thread owning them, one command
//! per call over a channel, cost two thread wake-ups per call: about a third of a LittleFS
//! PostMark run's CPU time on a 2-core machine, docs/PERFORMANCE.md.) The device sits behind
//! a mutex the storage driver and [`LittleFs`] share, so that the clock and the device's
//! counters are read outside littlefs's calls. The file system is formatted on 4 blocks and grown
//! to the device's block count once mounted (`lfs_fs_grow`), since the scaled devices of the
//! lab differ in size.
//!
//! Names and inode numbers live in host memory ([`vfs::namespace::Namespace`]); every file and
//! directory is also a LittleFS file or directory at the same path, so directory updates are
//! LittleFS's own metadata commits. Each call opens its file, works and closes it (littlefs2
//! offers no safe way to keep a file open), and the close commits the file: LittleFS runs
//! write-through, as OSCM-11 Fig. 8's YAFFS, JFFS2, UBIFS_SYNC and OBFS did.

#![deny(clippy::unwrap_used, clippy::expect_used)]
#![warn(missing_docs)]

use std::collections::BTreeMap;
use std::marker::PhantomData;
use std::sync::{Arc, Mutex, MutexGuard};

use flash::{BlockAddr, Content, Flash, FlashError, FlashStats, Nanos, PayloadMode};
use flash::{ProgramOp, ReadOp};
use littlefs2::consts::{U16, U2048, U4096};
use littlefs2::driver::Storage;
use littlefs2::fs::{Allocation, Filesystem};
use littlefs2::io::{Error as LfsError, SeekFrom};
use littlefs2::path::PathBuf;
use vfs::namespace::{Namespace, Node};
use vfs::{FileData, FileStat, FileSystem, FsCounters, FsError, Ino, ReadInto, ROOT};

/// Blocks LittleFS is formatted on before it grows to the device (`lfs_fs_grow`).
pub const FORMAT_BLOCKS: u32 = 4;

/// Why a LittleFS stack could not be built.
#[derive(Debug, thiserror::Error)]
pub enum LittleFsError {
    /// The device's pages and blocks are not a geometry this crate has a storage type for.
    #[error("LittleFS runs on {supported}; the device has {page_bytes}-byte pages in {pages_per_block}-page blocks")]
    Geometry {
        /// The device's page size.
        page_bytes: u32,
        /// The device's pages per erase block.
        pages_per_block: u32,
        /// The geometries supported.
        supported: &'static str,
    },
    /// Too few erase blocks for LittleFS (its superblock pair and room to grow).
    #[error("LittleFS needs at least {needed} erase blocks; the device has {blocks}")]
    TooFewBlocks {
        /// The device's blocks.
        blocks: u32,
        /// The fewest LittleFS takes.
        needed: u32,
    },
    /// A device that keeps no page contents: LittleFS reads back what it wrote.
    #[error(
        "LittleFS needs a device that keeps page contents (payload = full); this one is {0:?}"
    )]
    Payload(PayloadMode),
    /// littlefs refused to format, mount or grow.
    #[error("littlefs {op}: {msg}")]
    Lfs {
        /// What it was doing.
        op: &'static str,
        /// littlefs's error (and the device's, if one failed).
        msg: String,
    },
}

/// The device and the file system's clock, shared by [`LittleFs`] and the storage driver that
/// littlefs calls back.
struct Dev<F> {
    flash: F,
    /// Virtual time: issue time of the next device command.
    now: Nanos,
    /// The last device error, which littlefs only sees as `LFS_ERR_IO`.
    fault: Option<FlashError>,
    /// Whether the command running is a write (its programs count as data pages).
    writing: bool,
    /// Pages programmed while a write ran: its data, the copy of its file's tail, and the
    /// commit of the file at its close.
    write_pages: u64,
    /// Pages programmed otherwise: format, creates, removals, truncations.
    other_pages: u64,
}

type Shared<F> = Arc<Mutex<Dev<F>>>;

fn lock<F>(d: &Shared<F>) -> MutexGuard<'_, Dev<F>> {
    // A poisoned lock means a call panicked while holding it; the device state is still what
    // it was.
    d.lock().unwrap_or_else(|e| e.into_inner())
}

/// A page geometry littlefs2 is built for: its sizes are constants of the storage type.
pub trait Shape: 'static {
    /// Page size in bytes (littlefs's read and program size).
    const PAGE: usize;
    /// Pages per erase block.
    const PAGES_PER_BLOCK: usize;
    /// The cache size as a type-level number: one page.
    #[allow(deprecated)]
    type Cache: generic_array::ArrayLength<u8>;
}

/// 2 KiB pages in 64-page (128 KiB) blocks: `nandsim-128m` (OSCM-11's NANDsim).
pub struct Pages2k64;
impl Shape for Pages2k64 {
    const PAGE: usize = 2048;
    const PAGES_PER_BLOCK: usize = 64;
    type Cache = U2048;
}

/// 4 KiB pages in 32-page (128 KiB) blocks: the `tiny` test device.
pub struct Pages4k32;
impl Shape for Pages4k32 {
    const PAGE: usize = 4096;
    const PAGES_PER_BLOCK: usize = 32;
    type Cache = U4096;
}

const SUPPORTED: &str =
    "2 KiB pages in 64-page blocks (nandsim-128m) or 4 KiB pages in 32-page blocks (tiny)";

/// littlefs2's storage driver over the device model.
struct NandStorage<S, F> {
    dev: Shared<F>,
    shape: PhantomData<fn() -> S>,
}

impl<S: Shape, F: Flash> NandStorage<S, F> {
    /// The block and first page of byte offset `off`, and the block's address.
    fn locate(&self, off: usize, dev: &Dev<F>) -> Result<(BlockAddr, u32), LfsError> {
        let block = off / (S::PAGE * S::PAGES_PER_BLOCK);
        let page = (off % (S::PAGE * S::PAGES_PER_BLOCK)) / S::PAGE;
        let g = &dev.flash.config().geometry;
        if block >= g.blocks() as usize {
            return Err(LfsError::IO);
        }
        Ok((g.block_at(block as u32), page as u32))
    }
}

impl<S: Shape, F: Flash> Storage for NandStorage<S, F> {
    const READ_SIZE: usize = S::PAGE;
    const WRITE_SIZE: usize = S::PAGE;
    const BLOCK_SIZE: usize = S::PAGE * S::PAGES_PER_BLOCK;
    const BLOCK_COUNT: usize = FORMAT_BLOCKS as usize;
    // littlefs's suggested range is 100-1000: evict a metadata pair after 500 erases, so that
    // its wear levelling moves hot metadata around.
    const BLOCK_CYCLES: isize = 500;
    type CACHE_SIZE = S::Cache;
    // 16 x 64 bits: one lookahead window covers 1,024 blocks, the whole nandsim-128m chip.
    type LOOKAHEAD_SIZE = U16;

    fn read(&mut self, off: usize, buf: &mut [u8]) -> Result<usize, LfsError> {
        let dev = &mut *lock(&self.dev);
        let (b, first) = self.locate(off, dev)?;
        let len = buf.len();
        // littlefs reads a page at a time through its one-page cache, hundreds of millions of
        // times in 001-fig8-flashfs: a one-page read allocates nothing.
        let (mut one, mut many): ([ReadOp<'_>; 1], Vec<ReadOp<'_>>);
        let ops: &mut [ReadOp<'_>] = if len == S::PAGE {
            one = [ReadOp::new(b.page(first), buf, &mut [])];
            &mut one
        } else {
            many = buf
                .chunks_mut(S::PAGE)
                .enumerate()
                .map(|(i, data)| ReadOp::new(b.page(first + i as u32), data, &mut []))
                .collect();
            &mut many
        };
        match dev.flash.read(dev.now, ops) {
            Ok(t) => dev.now = dev.now.max(t),
            Err(e) => {
                dev.fault = Some(e);
                return Err(LfsError::IO);
            }
        }
        if ops
            .iter()
            .any(|o| matches!(o.content, Content::Fingerprint(_)))
        {
            dev.fault = Some(FlashError::Uncorrectable {
                addr: b.page(first),
                bit_errors: 0,
            });
            return Err(LfsError::IO);
        }
        Ok(len)
    }

    fn write(&mut self, off: usize, data: &[u8]) -> Result<usize, LfsError> {
        let dev = &mut *lock(&self.dev);
        let (b, first) = self.locate(off, dev)?;
        let program = |i: usize, d| ProgramOp {
            addr: b.page(first + i as u32),
            payload: flash::Payload::Bytes(d),
            oob: &[],
        };
        let (one, many): ([ProgramOp<'_>; 1], Vec<ProgramOp<'_>>);
        let ops: &[ProgramOp<'_>] = if data.len() == S::PAGE {
            one = [program(0, data)];
            &one
        } else {
            many = data
                .chunks(S::PAGE)
                .enumerate()
                .map(|(i, d)| program(i, d))
                .collect();
            &many
        };
        match dev.flash.program(dev.now, ops) {
            Ok(t) => {
                dev.now = dev.now.max(t);
                if dev.writing {
                    dev.write_pages += ops.len() as u64;
                } else {
                    dev.other_pages += ops.len() as u64;
                }
            }
            Err(e) => {
                dev.fault = Some(e);
                return Err(LfsError::IO);
            }
        }
        Ok(data.len())
    }

    fn erase(&mut self, off: usize, len: usize) -> Result<usize, LfsError> {
        let dev = &mut *lock(&self.dev);
        let (b, _) = self.locate(off, dev)?;
        match dev.flash.erase(dev.now, &[b]) {
            Ok(t) => dev.now = dev.now.max(t),
            Err(e) => {
                dev.fault = Some(e);
                return Err(LfsError::IO);
            }
        }
        Ok(len)
    }
}

/// A command to the mounted file system; paths are absolute LittleFS paths.
enum Cmd {
    Create(String),
    Mkdir(String),
    Remove(String),
    Write {
        path: String,
        offset: u32,
        data: Vec<u8>,
    },
    Read {
        path: String,
        offset: u32,
        len: usize,
    },
    Truncate {
        path: String,
        size: u32,
    },
    /// Whether the path is a directory, and its size.
    Meta(String),
}

enum Reply {
    Done,
    Bytes(Vec<u8>),
    Meta { dir: bool, len: u64 },
}

/// What failed in a command: littlefs's error, or a path littlefs cannot name.
enum Failure {
    Lfs(LfsError),
    Path(String),
}

impl From<LfsError> for Failure {
    fn from(e: LfsError) -> Self {
        Failure::Lfs(e)
    }
}

fn lfs_path(p: &str) -> Result<PathBuf, Failure> {
    PathBuf::try_from(p).map_err(|e| Failure::Path(format!("{p}: {e:?}")))
}

fn exec<S: Storage>(fs: &Filesystem<'_, S>, cmd: Cmd) -> Result<Reply, Failure> {
    match cmd {
        Cmd::Create(p) => {
            let path = lfs_path(&p)?;
            fs.open_file_with_options_and_then(
                |o| o.write(true).create_new(true),
                &path,
                |_| Ok(()),
            )?;
            Ok(Reply::Done)
        }
        Cmd::Mkdir(p) => {
            fs.create_dir(&lfs_path(&p)?)?;
            Ok(Reply::Done)
        }
        Cmd::Remove(p) => {
            fs.remove(&lfs_path(&p)?)?;
            Ok(Reply::Done)
        }
        Cmd::Write { path, offset, data } => {
            let path = lfs_path(&path)?;
            fs.open_file_with_options_and_then(
                |o| o.write(true),
                &path,
                |f| {
                    f.seek(SeekFrom::Start(offset))?;
                    let mut done = 0;
                    while done < data.len() {
                        match f.write(&data[done..])? {
                            0 => return Err(LfsError::NO_SPACE),
                            n => done += n,
                        }
                    }
                    Ok(())
                },
            )?;
            Ok(Reply::Done)
        }
        Cmd::Read { path, offset, len } => {
            let path = lfs_path(&path)?;
            let out = fs.open_file_with_options_and_then(
                |o| o.read(true),
                &path,
                |f| {
                    let mut buf = vec![0u8; len];
                    let size = f.len()?;
                    if offset as usize >= size {
                        buf.clear();
                        return Ok(buf);
                    }
                    f.seek(SeekFrom::Start(offset))?;
                    let mut done = 0;
                    while done < len {
                        match f.read(&mut buf[done..])? {
                            0 => break,
                            n => done += n,
                        }
                    }
                    buf.truncate(done);
                    Ok(buf)
                },
            )?;
            Ok(Reply::Bytes(out))
        }
        Cmd::Truncate { path, size } => {
            let path = lfs_path(&path)?;
            fs.open_file_with_options_and_then(
                |o| o.write(true),
                &path,
                |f| f.set_len(size as usize),
            )?;
            Ok(Reply::Done)
        }
        Cmd::Meta(p) => {
            let m = fs.metadata(&lfs_path(&p)?)?;
            Ok(Reply::Meta {
                dir: m.is_dir(),
                len: m.len() as u64,
            })
        }
    }
}

/// LittleFS mounted on the device: the allocation and the storage driver it borrows for its
/// whole life, and the file system, in one value.
#[ouroboros::self_referencing]
struct Mounted<S: Shape, F: Flash + 'static> {
    alloc: Allocation<NandStorage<S, F>>,
    storage: NandStorage<S, F>,
    #[borrows(mut alloc, mut storage)]
    #[not_covariant]
    fs: Filesystem<'this, NandStorage<S, F>>,
}

/// A mounted LittleFS of either geometry, as [`LittleFs`] drives it.
trait Engine {
    /// Runs one command.
    fn exec(&mut self, cmd: Cmd) -> Result<Reply, Failure>;
}

impl<S: Shape, F: Flash + 'static> Engine for Mounted<S, F> {
    fn exec(&mut self, cmd: Cmd) -> Result<Reply, Failure> {
        self.with_fs(|fs| exec(fs, cmd))
    }
}

/// Formats, mounts and grows LittleFS on the device (`blocks` erase blocks).
fn mount<S: Shape, F: Flash + 'static>(
    dev: Shared<F>,
    blocks: u32,
) -> Result<Box<dyn Engine>, LittleFsError> {
    let fault = |op: &'static str, e: LfsError, dev: &Shared<F>| {
        let msg = match lock(dev).fault.take() {
            Some(f) => format!("{e:?} (device: {f})"),
            None => format!("{e:?}"),
        };
        LittleFsError::Lfs { op, msg }
    };
    let mut storage = NandStorage::<S, F> {
        dev: dev.clone(),
        shape: PhantomData,
    };
    Filesystem::format(&mut storage).map_err(|e| fault("format", e, &dev))?;
    let mounted = MountedTryBuilder {
        alloc: Filesystem::allocate(),
        storage,
        fs_builder: |alloc, storage| Filesystem::mount(alloc, storage),
    }
    .try_build()
    .map_err(|e| fault("mount", e, &dev))?;
    if blocks > FORMAT_BLOCKS {
        mounted
            .with_fs(|fs| fs.grow(blocks as usize))
            .map_err(|e| fault("grow", e, &dev))?;
    }
    Ok(Box::new(mounted))
}

/// Counters of the host's calls (the device's come from [`LittleFs::flash_stats`]).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct LittleFsStats {
    /// Bytes written through the file system.
    pub host_write_bytes: u64,
    /// Bytes read through the file system.
    pub host_read_bytes: u64,
    /// Commands run (each opens and closes its file).
    pub commands: u64,
    /// Pages programmed by writes: the data, the copy of the file's tail block, and the file's
    /// commit at its close (LittleFS does not tell its data and metadata pages apart).
    pub write_pages: u64,
    /// Pages programmed by every other call (creates, removals, truncations) and the format:
    /// metadata commits.
    pub other_pages: u64,
}

/// LittleFS over a device, driven through the lab's [`FileSystem`] interface.
pub struct LittleFs<F: Flash + Send + 'static> {
    dev: Shared<F>,
    fs: Box<dyn Engine>,
    /// Files hold their LittleFS path.
    ns: Namespace<String>,
    /// Directories' LittleFS paths ("" for the root).
    dirs: BTreeMap<Ino, String>,
    name: String,
    stats: LittleFsStats,
}

/// A name as one LittleFS path component: ASCII letters, digits, `.`, `_` and `-` as they are,
/// every other byte as `%XX` (LittleFS paths are ASCII).
fn component(name: &str) -> String {
    let mut s = String::with_capacity(name.len());
    for b in name.bytes() {
        if b.is_ascii_alphanumeric() || b == b'.' || b == b'_' || b == b'-' {
            s.push(b as char);
        } else {
            s.push_str(&format!("%{b:02X}"));
        }
    }
    s
}

impl<F: Flash + Send + 'static> LittleFs<F> {
    /// Formats LittleFS on the whole of `flash` (erase block = LittleFS block, page = read and
    /// program size); `name` labels it in reports.
    pub fn format(flash: F, name: &str) -> Result<Self, LittleFsError> {
        let cfg = flash.config();
        if cfg.payload != PayloadMode::Full {
            return Err(LittleFsError::Payload(cfg.payload));
        }
        let g = cfg.geometry;
        let blocks = g.blocks();
        if blocks < FORMAT_BLOCKS {
            return Err(LittleFsError::TooFewBlocks {
                blocks,
                needed: FORMAT_BLOCKS,
            });
        }
        let dev: Shared<F> = Arc::new(Mutex::new(Dev {
            flash,
            now: 0,
            fault: None,
            writing: false,
            write_pages: 0,
            other_pages: 0,
        }));
        let fs = match (g.page_size_bytes, g.pages_per_block) {
            (2048, 64) => mount::<Pages2k64, F>(dev.clone(), blocks)?,
            (4096, 32) => mount::<Pages4k32, F>(dev.clone(), blocks)?,
            (page_bytes, pages_per_block) => {
                return Err(LittleFsError::Geometry {
                    page_bytes,
                    pages_per_block,
                    supported: SUPPORTED,
                })
            }
        };
        let mut dirs = BTreeMap::new();
        dirs.insert(ROOT, String::new());
        Ok(LittleFs {
            dev,
            fs,
            ns: Namespace::default(),
            dirs,
            name: name.to_string(),
            stats: LittleFsStats::default(),
        })
    }

    /// The device's counters.
    pub fn flash_stats(&self) -> FlashStats {
        lock(&self.dev).flash.stats()
    }

    /// The host-side counters, with the pages programmed split by the call that programmed
    /// them.
    pub fn stats(&self) -> LittleFsStats {
        let d = lock(&self.dev);
        LittleFsStats {
            write_pages: d.write_pages,
            other_pages: d.other_pages,
            ..self.stats
        }
    }

    /// Erase counts of the device's blocks: (min, max, mean).
    pub fn erase_counts(&self) -> (u32, u32, f64) {
        let dev = lock(&self.dev);
        let g = dev.flash.config().geometry;
        let (mut lo, mut hi, mut sum) = (u32::MAX, 0u32, 0u64);
        for i in 0..g.blocks() {
            let n = dev.flash.block_info(g.block_at(i)).erase_count;
            lo = lo.min(n);
            hi = hi.max(n);
            sum += n as u64;
        }
        if g.blocks() == 0 {
            return (0, 0, 0.0);
        }
        (lo, hi, sum as f64 / g.blocks() as f64)
    }

    /// Runs one command; a LittleFS error becomes the [`FsError`] of its kind, naming the
    /// path, with the device's error when one caused it.
    fn run(&mut self, what: &str, path: &str, cmd: Cmd) -> Result<Reply, FsError> {
        lock(&self.dev).writing = matches!(cmd, Cmd::Write { .. });
        self.stats.commands += 1;
        match self.fs.exec(cmd) {
            Ok(r) => Ok(r),
            Err(Failure::Path(m)) => Err(FsError::Invalid(format!(
                "LittleFS cannot name {m} (paths are ASCII, at most 255 bytes)"
            ))),
            Err(Failure::Lfs(e)) => {
                if let Some(f) = lock(&self.dev).fault.take() {
                    return Err(FsError::Device(format!("LittleFS {what} {path}: {f}")));
                }
                let at = format!("LittleFS {what} {path}");
                let c = e.code();
                Err(if c == LfsError::NO_SPACE.code() {
                    FsError::NoSpace(format!("{at}: no free block left on the device"))
                } else if c == LfsError::NO_SUCH_ENTRY.code() {
                    FsError::NotFound(at)
                } else if c == LfsError::ENTRY_ALREADY_EXISTED.code() {
                    FsError::Exists(at)
                } else if c == LfsError::PATH_NOT_DIR.code() {
                    FsError::NotDir(at)
                } else if c == LfsError::PATH_IS_DIR.code() {
                    FsError::IsDir(at)
                } else if c == LfsError::DIR_NOT_EMPTY.code() {
                    FsError::NotEmpty(at)
                } else if c == LfsError::CORRUPTION.code() {
                    FsError::Corrupted(format!("{at}: littlefs found corruption"))
                } else if c == LfsError::FILE_TOO_BIG.code() {
                    FsError::NoSpace(format!("{at}: file larger than LittleFS allows"))
                } else if c == LfsError::INVALID.code() || c == LfsError::FILENAME_TOO_LONG.code() {
                    FsError::Invalid(format!("{at}: {e:?}"))
                } else {
                    FsError::Device(format!("{at}: {e:?}"))
                })
            }
        }
    }

    fn path_in(&self, dir: Ino, name: &str) -> Result<String, FsError> {
        let d = self
            .dirs
            .get(&dir)
            .ok_or_else(|| FsError::NotFound(format!("inode {dir}")))?;
        Ok(format!("{d}/{}", component(name)))
    }

    fn file_path(&mut self, ino: Ino) -> Result<String, FsError> {
        self.ns.file(ino).map(|p| p.clone())
    }

    fn now_(&self) -> Nanos {
        lock(&self.dev).now
    }
}

/// Offsets and sizes LittleFS takes: below 2 GiB (`LFS_FILE_MAX`).
fn lfs_off(v: u64, what: &str) -> Result<u32, FsError> {
    u32::try_from(v)
        .ok()
        .filter(|v| *v <= i32::MAX as u32)
        .ok_or_else(|| FsError::NoSpace(format!("{what} {v}: LittleFS files stop at 2 GiB")))
}

/// The bytes a fingerprint token stands for: its little-endian bytes, repeated.
fn token_bytes(token: u64, len: usize) -> Vec<u8> {
    token
        .to_le_bytes()
        .iter()
        .copied()
        .cycle()
        .take(len)
        .collect()
}

impl<F: Flash + Send + 'static> FileSystem for LittleFs<F> {
    fn name(&self) -> &str {
        &self.name
    }
    fn lookup(&mut self, dir: Ino, name: &str) -> Result<Option<Ino>, FsError> {
        self.ns.lookup(dir, name)
    }
    fn create(&mut self, dir: Ino, name: &str) -> Result<Ino, FsError> {
        self.ns.dir(dir)?;
        let path = self.path_in(dir, name)?;
        let now = self.now_();
        let ino = self.ns.make(dir, name, Node::File(path.clone()), now)?;
        if let Err(e) = self.run("create", &path, Cmd::Create(path.clone())) {
            self.ns.unlink(dir, name)?;
            return Err(e);
        }
        Ok(ino)
    }
    fn mkdir(&mut self, dir: Ino, name: &str) -> Result<Ino, FsError> {
        self.ns.dir(dir)?;
        let path = self.path_in(dir, name)?;
        let now = self.now_();
        let ino = self
            .ns
            .make(dir, name, Node::Dir(Default::default()), now)?;
        if let Err(e) = self.run("mkdir", &path, Cmd::Mkdir(path.clone())) {
            self.ns.rmdir(dir, name)?;
            return Err(e);
        }
        self.dirs.insert(ino, path);
        Ok(ino)
    }
    fn unlink(&mut self, dir: Ino, name: &str) -> Result<(), FsError> {
        let ino = self.ns.entry(dir, name)?;
        let path = self.file_path(ino)?;
        self.run("remove", &path, Cmd::Remove(path.clone()))?;
        self.ns.unlink(dir, name).map(|_| ())
    }
    fn rmdir(&mut self, dir: Ino, name: &str) -> Result<(), FsError> {
        let ino = self.ns.entry(dir, name)?;
        if !self.ns.dir(ino)?.is_empty() {
            return Err(FsError::NotEmpty(name.into()));
        }
        let path = self.dirs.get(&ino).cloned().unwrap_or_default();
        self.run("rmdir", &path, Cmd::Remove(path.clone()))?;
        self.ns.rmdir(dir, name)?;
        self.dirs.remove(&ino);
        Ok(())
    }
    fn readdir(&mut self, dir: Ino) -> Result<Vec<(String, Ino)>, FsError> {
        self.ns.readdir(dir)
    }
    fn write(
        &mut self,
        ino: Ino,
        offset: u64,
        len: u64,
        data: FileData<'_>,
    ) -> Result<(), FsError> {
        data.check_len(len)?;
        let path = self.file_path(ino)?;
        if len == 0 {
            return Ok(());
        }
        let off = lfs_off(offset, "offset")?;
        lfs_off(offset.saturating_add(len), "end")?;
        let bytes = match data {
            FileData::Bytes(b) => b.to_vec(),
            FileData::Token(t) => token_bytes(t, len as usize),
        };
        self.run(
            "write",
            &path,
            Cmd::Write {
                path: path.clone(),
                offset: off,
                data: bytes,
            },
        )?;
        self.stats.host_write_bytes += len;
        let now = self.now_();
        self.ns.touch(ino, now);
        Ok(())
    }
    fn read(&mut self, ino: Ino, offset: u64, into: ReadInto<'_>) -> Result<u64, FsError> {
        let path = self.file_path(ino)?;
        let len = into.len();
        if len == 0 {
            return Ok(0);
        }
        let Ok(off) = u32::try_from(offset) else {
            return Ok(0);
        };
        let Reply::Bytes(got) = self.run(
            "read",
            &path,
            Cmd::Read {
                path: path.clone(),
                offset: off,
                len: len as usize,
            },
        )?
        else {
            return Err(FsError::Device("LittleFS read: unexpected reply".into()));
        };
        if let ReadInto::Bytes(b) = into {
            b[..got.len()].copy_from_slice(&got);
        }
        self.stats.host_read_bytes += got.len() as u64;
        Ok(got.len() as u64)
    }
    fn truncate(&mut self, ino: Ino, size: u64) -> Result<(), FsError> {
        let path = self.file_path(ino)?;
        let size = lfs_off(size, "size")?;
        self.run(
            "truncate",
            &path,
            Cmd::Truncate {
                path: path.clone(),
                size,
            },
        )?;
        let now = self.now_();
        self.ns.touch(ino, now);
        Ok(())
    }
    fn stat(&mut self, ino: Ino) -> Result<FileStat, FsError> {
        let (node, modified_ns) = self.ns.node(ino)?;
        let kind = node.kind();
        let (path, dir_size) = match node {
            Node::File(p) => (p.clone(), None),
            Node::Dir(d) => (String::new(), Some(d.len() as u64)),
        };
        let size = match dir_size {
            Some(n) => n,
            None => match self.run("stat", &path, Cmd::Meta(path.clone()))? {
                Reply::Meta { len, .. } => len,
                _ => return Err(FsError::Device("LittleFS stat: unexpected reply".into())),
            },
        };
        Ok(FileStat {
            ino,
            kind,
            size,
            modified_ns,
        })
    }
    fn fsync(&mut self, ino: Ino, _data_only: bool) -> Result<(), FsError> {
        // Every call closed its file, which commits it: nothing is left to sync.
        self.ns.node(ino).map(|_| ())
    }
    fn sync(&mut self) -> Result<(), FsError> {
        Ok(())
    }
    fn set_time(&mut self, at: Nanos) {
        let mut d = lock(&self.dev);
        d.now = d.now.max(at);
    }
    fn now(&self) -> Nanos {
        self.now_()
    }
    fn background(&mut self, from: Nanos, _until: Nanos) -> Result<Nanos, FsError> {
        // LittleFS has no background work: it compacts and relocates inline.
        self.set_time(from);
        Ok(self.now_())
    }
    fn counters(&self) -> FsCounters {
        vec![
            ("files", self.ns.len() as u64),
            ("littlefs_commands", self.stats.commands),
        ]
    }
    fn check(&mut self) -> Result<Vec<String>, FsError> {
        let mut problems = Vec::new();
        let files: Vec<(Ino, String)> = self.ns.files().map(|(i, p)| (i, p.clone())).collect();
        let dirs: Vec<(Ino, String)> = self
            .dirs
            .iter()
            .filter(|(i, _)| **i != ROOT)
            .map(|(i, p)| (*i, p.clone()))
            .collect();
        for (ino, path, want_dir) in files
            .into_iter()
            .map(|(i, p)| (i, p, false))
            .chain(dirs.into_iter().map(|(i, p)| (i, p, true)))
        {
            match self.run("check", &path, Cmd::Meta(path.clone())) {
                Ok(Reply::Meta { dir, .. }) if dir == want_dir => {}
                Ok(_) => problems.push(format!("inode {ino} ({path}) has the wrong kind")),
                Err(e) => problems.push(format!("inode {ino} ({path}): {e}")),
            }
        }
        Ok(problems)
    }
}
