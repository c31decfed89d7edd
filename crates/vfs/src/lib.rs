//! The file-level interface of the host file systems the lab drives: OFS on the object store
//! (seed 000 V-B, seed 001 III-A) and the EXT4-like block file system on the page-mapping FTL.
//! Both run in-process on the same device model, in virtual time.
//!
//! Files hold either real bytes or, in fingerprint mode, a token per write that stands for the
//! bytes (so multi-gigabyte experiments stay small in memory). Directories always hold real
//! bytes: their entries are file system metadata.
//!
//! [`oracle::MemFs`] is the simple in-memory model every implementation is tested against.

pub mod namespace;
pub mod oracle;

use flash::Nanos;

/// An inode number.
pub type Ino = u64;

/// The root directory's inode number, in every implementation.
pub const ROOT: Ino = 1;

/// Longest name in a directory, in bytes.
pub const NAME_MAX: usize = 255;

/// What a write carries.
#[derive(Clone, Copy, Debug)]
pub enum FileData<'a> {
    /// Real bytes, as long as the write.
    Bytes(&'a [u8]),
    /// Fingerprint mode: a token standing for the write's bytes.
    Token(u64),
}

impl FileData<'_> {
    /// A write of `len` bytes must carry `len` bytes (tokens stand for any length).
    pub fn check_len(&self, len: u64) -> Result<(), FsError> {
        match self {
            FileData::Bytes(b) if b.len() as u64 != len => Err(FsError::Invalid(format!(
                "write of {len} bytes given {} bytes",
                b.len()
            ))),
            _ => Ok(()),
        }
    }
}

/// Where a read puts what it finds.
pub enum ReadInto<'a> {
    /// The bytes (the buffer's length is the read's length).
    Bytes(&'a mut [u8]),
    /// Fingerprint mode: only the time and the I/O are wanted.
    Discard(u64),
}

impl ReadInto<'_> {
    pub fn len(&self) -> u64 {
        match self {
            ReadInto::Bytes(b) => b.len() as u64,
            ReadInto::Discard(n) => *n,
        }
    }
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// A file or a directory.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FileKind {
    File,
    Dir,
}

/// What `stat` reports.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FileStat {
    pub ino: Ino,
    pub kind: FileKind,
    /// Logical size in bytes (for a directory, what its entries occupy).
    pub size: u64,
    pub modified_ns: Nanos,
}

/// File system errors, each saying what it is about.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum FsError {
    #[error("{0}: no such file or directory")]
    NotFound(String),
    #[error("{0}: already exists")]
    Exists(String),
    #[error("{0}: not a directory")]
    NotDir(String),
    #[error("{0}: is a directory")]
    IsDir(String),
    #[error("{0}: directory not empty")]
    NotEmpty(String),
    #[error("no space left: {0}")]
    NoSpace(String),
    #[error("invalid argument: {0}")]
    Invalid(String),
    #[error("corrupted: {0}")]
    Corrupted(String),
    #[error("device: {0}")]
    Device(String),
}

/// Named counters of a file system's own work (metadata writes, directory lookups, ...), for
/// reports; the device and FML counters come from the stack below.
pub type FsCounters = Vec<(&'static str, u64)>;

/// The file-level interface. Every call is issued at the file system's current virtual time
/// ([`FileSystem::set_time`]) and advances it to the call's completion.
pub trait FileSystem {
    /// A short name for reports ("OFS", "OFS-ONE", "ext4-like").
    fn name(&self) -> &str;

    /// The entry `name` of directory `dir`.
    fn lookup(&mut self, dir: Ino, name: &str) -> Result<Option<Ino>, FsError>;
    /// Creates an empty file `name` in `dir`.
    fn create(&mut self, dir: Ino, name: &str) -> Result<Ino, FsError>;
    /// Creates an empty directory `name` in `dir`.
    fn mkdir(&mut self, dir: Ino, name: &str) -> Result<Ino, FsError>;
    /// Removes file `name` from `dir` and frees its data (discard on a block device).
    fn unlink(&mut self, dir: Ino, name: &str) -> Result<(), FsError>;
    /// Removes the empty directory `name` from `dir`.
    fn rmdir(&mut self, dir: Ino, name: &str) -> Result<(), FsError>;
    /// The entries of `dir`, sorted by name.
    fn readdir(&mut self, dir: Ino) -> Result<Vec<(String, Ino)>, FsError>;

    /// Writes `len` bytes at `offset` (`data`'s length must be `len` for bytes).
    fn write(&mut self, ino: Ino, offset: u64, len: u64, data: FileData<'_>)
        -> Result<(), FsError>;
    /// Reads from `offset`; returns the bytes read (fewer at the end of the file).
    fn read(&mut self, ino: Ino, offset: u64, into: ReadInto<'_>) -> Result<u64, FsError>;
    /// Sets the file's size (shrinking frees data; growing reads as zeros).
    fn truncate(&mut self, ino: Ino, size: u64) -> Result<(), FsError>;
    fn stat(&mut self, ino: Ino) -> Result<FileStat, FsError>;
    /// Makes the file's data durable (`data_only`: fdatasync) or its data and metadata (fsync).
    fn fsync(&mut self, ino: Ino, data_only: bool) -> Result<(), FsError>;
    /// Makes everything durable.
    fn sync(&mut self) -> Result<(), FsError>;

    /// Issue time of the next call (virtual ns); never moves time back.
    fn set_time(&mut self, at: Nanos);
    /// Completion time of the last call.
    fn now(&self) -> Nanos;
    /// Lets the device work in idle time (background GC) from `from` until `until`; returns
    /// when that work ends.
    fn background(&mut self, from: Nanos, until: Nanos) -> Result<Nanos, FsError>;
    /// The file system's own counters.
    fn counters(&self) -> FsCounters;
    /// Checks every invariant of the file system and the store below (an fsck); the problems
    /// found, empty when clean.
    fn check(&mut self) -> Result<Vec<String>, FsError>;
}
