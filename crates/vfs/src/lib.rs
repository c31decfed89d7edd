#![deny(clippy::unwrap_used, clippy::expect_used)]
#![warn(missing_docs)]
//! The file-level interface of the host file systems the lab drives: OFS on the object store
//! (OSSD-13 V-B, OSCM-11 III-A) and the ext4-like block file system (no journal) on the page-mapping FTL.
//! Both run in-process on the same device model, in virtual time.
//!
//! Files hold either real bytes or, in fingerprint mode, a token per write that stands for the
//! bytes (so multi-gigabyte experiments stay small in memory). Directories always hold real
//! bytes: their entries are file system metadata.
//!
//! [`oracle::MemFs`] is the simple in-memory model every implementation is tested against.

pub use codec::le;

impl From<le::Truncated> for FsError {
    fn from(t: le::Truncated) -> Self {
        FsError::Corrupted(t.to_string())
    }
}
pub mod namespace;
pub mod oracle;

/// Virtual time in nanoseconds: the same integer the device model's clock counts
/// (`flash::Nanos`), named here so that the file-level interface does not depend on the device
/// model for one type.
pub type Nanos = u64;

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
    /// Bytes wanted: the buffer's length, or the count to discard.
    pub fn len(&self) -> u64 {
        match self {
            ReadInto::Bytes(b) => b.len() as u64,
            ReadInto::Discard(n) => *n,
        }
    }
    /// Whether the read wants no bytes.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// A file, a directory, a symbolic link or a special file.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FileKind {
    /// A regular file.
    File,
    /// A directory.
    Dir,
    /// A symbolic link: its target is its contents ([`FileSystem::readlink`]). Only file
    /// systems that implement [`FileSystem::symlink`] make them.
    Symlink,
    /// A FIFO, socket or device node: a name and attributes only (the kernel serves its I/O).
    /// Only file systems that implement [`FileSystem::mknod`] make them.
    Special(Special),
}

/// The kinds of special file ([`FileKind::Special`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Special {
    /// A named pipe (`mkfifo`).
    Fifo,
    /// A Unix domain socket's name (`bind`).
    Socket,
    /// A character device node; its device number is [`FileAttr::rdev`].
    CharDevice,
    /// A block device node; its device number is [`FileAttr::rdev`].
    BlockDevice,
}

/// What `stat` reports.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FileStat {
    /// Inode number.
    pub ino: Ino,
    /// File, directory or symbolic link.
    pub kind: FileKind,
    /// Logical size in bytes (for a directory, what its entries occupy).
    pub size: u64,
    /// Last modification time, in the file system's clock (ns).
    pub modified_ns: Nanos,
}

/// Who owns a new inode and its permission bits (the low 12 bits of `st_mode`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Owner {
    /// Permission bits (`0o7777` at most).
    pub perm: u32,
    /// Owning user id.
    pub uid: u32,
    /// Owning group id.
    pub gid: u32,
}

impl Owner {
    /// What an inode made without an owner reports: root's, `0644` for files, `0755` for
    /// directories, `0777` for symbolic links.
    pub fn default_for(kind: FileKind) -> Owner {
        let perm = match kind {
            FileKind::File => 0o644,
            FileKind::Dir => 0o755,
            FileKind::Symlink => 0o777,
            FileKind::Special(_) => 0o644,
        };
        Owner {
            perm,
            uid: 0,
            gid: 0,
        }
    }
}

/// What `getattr` reports: [`FileStat`] plus the POSIX attributes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FileAttr {
    /// Inode number.
    pub ino: Ino,
    /// File, directory or symbolic link.
    pub kind: FileKind,
    /// Logical size in bytes (for a directory, what its entries occupy).
    pub size: u64,
    /// Permission bits (`0o7777` at most).
    pub perm: u32,
    /// Owning user id.
    pub uid: u32,
    /// Owning group id.
    pub gid: u32,
    /// Names the inode has: for a file or link its names (0 once the last is removed while the
    /// file is open), for a directory 2 plus its subdirectories (its name, its `.`, and each
    /// subdirectory's `..`).
    pub nlink: u32,
    /// Times in the file system's clock (virtual ns in the lab; ns since the Unix epoch
    /// through a mount).
    pub atime_ns: Nanos,
    /// Last modification of the contents.
    pub mtime_ns: Nanos,
    /// Last change of the inode (attributes, links, contents).
    pub ctime_ns: Nanos,
    /// A device node's device number (`st_rdev`); 0 for every other kind.
    pub rdev: u64,
}

/// What `setattr` changes; `None` leaves a field as it is.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SetAttr {
    /// New permission bits.
    pub perm: Option<u32>,
    /// New owning user id.
    pub uid: Option<u32>,
    /// New owning group id.
    pub gid: Option<u32>,
    /// Truncates or extends a file.
    pub size: Option<u64>,
    /// New access time (ns, the file system's clock).
    pub atime_ns: Option<Nanos>,
    /// New modification time (ns, the file system's clock).
    pub mtime_ns: Option<Nanos>,
}

/// How `setxattr` treats an existing attribute (`XATTR_CREATE`, `XATTR_REPLACE`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum XattrMode {
    /// Create or replace.
    Any,
    /// Fail with [`FsError::Exists`] if it exists.
    Create,
    /// Fail with [`FsError::NotFound`] if it does not.
    Replace,
}

/// Space on the device below a file system, for `statfs`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SpaceInfo {
    /// Bytes the file system can hold in all.
    pub total_bytes: u64,
    /// Bytes still free.
    pub free_bytes: u64,
    /// Inode numbers handed out so far (at least the inodes in use).
    pub inodes_used: u64,
    /// Inode numbers the file system can hand out in all.
    pub inodes_total: u64,
    /// The block size reported to programs (the device's write unit).
    pub block_bytes: u32,
}

/// Longest symbolic link target, in bytes (`PATH_MAX` less its NUL).
pub const SYMLINK_MAX: usize = 4095;

/// Longest extended attribute name, in bytes (Linux's `XATTR_NAME_MAX`).
pub const XATTR_NAME_MAX: usize = 255;

/// File system errors, each saying what it is about.
#[derive(Debug, Clone, thiserror::Error, PartialEq, Eq)]
pub enum FsError {
    /// No such name or inode (`ENOENT`); says which.
    #[error("{0}: no such file or directory")]
    NotFound(String),
    /// The name is taken (`EEXIST`).
    #[error("{0}: already exists")]
    Exists(String),
    /// A directory was expected (`ENOTDIR`).
    #[error("{0}: not a directory")]
    NotDir(String),
    /// A non-directory was expected (`EISDIR`).
    #[error("{0}: is a directory")]
    IsDir(String),
    /// The directory still has entries (`ENOTEMPTY`).
    #[error("{0}: directory not empty")]
    NotEmpty(String),
    /// The device or the inode table is full (`ENOSPC`).
    #[error("no space left: {0}")]
    NoSpace(String),
    /// An argument the call cannot take (`EINVAL`), e.g. a bad name or a rename into itself.
    #[error("invalid argument: {0}")]
    Invalid(String),
    /// What the file system read from its device does not decode or check (`EIO`).
    #[error("corrupted: {0}")]
    Corrupted(String),
    /// The layer below could not read a write unit back whole, and names it (`EIO`): a unit
    /// the device destroyed, or whose contents fail their checksum. Distinct from
    /// [`FsError::Corrupted`] so that a harness can ask the device whether that unit was
    /// struck (a refusal naming a unit no fault touched is a bug).
    #[error("corrupted: {what}")]
    Damaged {
        /// The layer below's message.
        what: String,
        /// The write unit (`fml::Vpa`) it names.
        unit: u32,
    },
    /// The device below failed (`EIO`), e.g. its power is off.
    #[error("device: {0}")]
    Device(String),
    /// The file system does not implement the call (`EOPNOTSUPP`).
    #[error("not supported: {0}")]
    Unsupported(String),
    /// The operation is not allowed on this inode (`EPERM`), e.g. a hard link to a directory.
    #[error("not permitted: {0}")]
    NotPermitted(String),
}

impl FsError {
    /// Whether the error says stored data or metadata is damaged ([`FsError::Corrupted`] or
    /// [`FsError::Damaged`]).
    pub fn is_damage(&self) -> bool {
        matches!(self, FsError::Corrupted(_) | FsError::Damaged { .. })
    }
}

fn unsupported<T>(what: &str) -> Result<T, FsError> {
    Err(FsError::Unsupported(what.into()))
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
    /// Size, kind and modification time of an inode.
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

    // The POSIX surface a mount needs. Each has a default, so file systems that only serve the
    // lab (the block file system, p-OFTL's file layer) need not implement them: the defaults
    // report `Unsupported`, except `getattr`, which derives what it can from `stat`.

    /// [`FileSystem::stat`] with owner, permissions, link count and times.
    fn getattr(&mut self, ino: Ino) -> Result<FileAttr, FsError> {
        let s = self.stat(ino)?;
        let o = Owner::default_for(s.kind);
        Ok(FileAttr {
            ino,
            kind: s.kind,
            size: s.size,
            perm: o.perm,
            uid: o.uid,
            gid: o.gid,
            nlink: 1,
            atime_ns: s.modified_ns,
            mtime_ns: s.modified_ns,
            ctime_ns: s.modified_ns,
            rdev: 0,
        })
    }
    /// Creates an empty file or directory `name` in `dir` owned by `owner`.
    fn create_as(
        &mut self,
        _dir: Ino,
        _name: &str,
        _kind: FileKind,
        _owner: Owner,
    ) -> Result<Ino, FsError> {
        unsupported("create with an owner")
    }
    /// Creates a symbolic link `name` in `dir` pointing at `target` (at most [`SYMLINK_MAX`]
    /// bytes, not empty).
    fn symlink(
        &mut self,
        _dir: Ino,
        _name: &str,
        _target: &[u8],
        _owner: Owner,
    ) -> Result<Ino, FsError> {
        unsupported("symbolic links")
    }
    /// Creates a special file `name` in `dir`: a FIFO, a socket's name, or a device node with
    /// device number `rdev` (ignored for the others).
    fn mknod(
        &mut self,
        _dir: Ino,
        _name: &str,
        _kind: Special,
        _rdev: u64,
        _owner: Owner,
    ) -> Result<Ino, FsError> {
        unsupported("special files")
    }
    /// The target of a symbolic link.
    fn readlink(&mut self, _ino: Ino) -> Result<Vec<u8>, FsError> {
        unsupported("symbolic links")
    }
    /// Gives file `ino` one more name, `name` in `dir` (a hard link; not for directories).
    fn link(&mut self, _ino: Ino, _dir: Ino, _name: &str) -> Result<(), FsError> {
        unsupported("hard links")
    }
    /// Renames `name` in `dir` to `new_name` in `new_dir`, replacing what that names (a file
    /// replaces a file or link, a directory an empty directory). Renaming a directory into its
    /// own subtree is [`FsError::Invalid`]. Two names of one inode: nothing happens.
    fn rename(
        &mut self,
        _dir: Ino,
        _name: &str,
        _new_dir: Ino,
        _new_name: &str,
    ) -> Result<(), FsError> {
        unsupported("rename")
    }
    /// Changes permissions, owner, size or times; returns the attributes after.
    fn setattr(&mut self, _ino: Ino, _set: SetAttr) -> Result<FileAttr, FsError> {
        unsupported("setattr")
    }
    /// An extended attribute's value (`name` without its `user.` namespace), `None` if unset.
    fn getxattr(&mut self, _ino: Ino, _name: &str) -> Result<Option<Vec<u8>>, FsError> {
        unsupported("extended attributes")
    }
    /// Sets an extended attribute (`name` without its `user.` namespace); `mode` says whether it
    /// may or must exist already.
    fn setxattr(
        &mut self,
        _ino: Ino,
        _name: &str,
        _value: &[u8],
        _mode: XattrMode,
    ) -> Result<(), FsError> {
        unsupported("extended attributes")
    }
    /// Names of the extended attributes set, sorted (without the `user.` namespace).
    fn listxattr(&mut self, _ino: Ino) -> Result<Vec<String>, FsError> {
        unsupported("extended attributes")
    }
    /// Removes an extended attribute; [`FsError::NotFound`] if it is not set.
    fn removexattr(&mut self, _ino: Ino, _name: &str) -> Result<(), FsError> {
        unsupported("extended attributes")
    }
    /// Space on the device.
    fn statfs(&mut self) -> Result<SpaceInfo, FsError> {
        unsupported("statfs")
    }
    /// A program opened file `ino` (an open file of a mount). Until the matching
    /// [`FileSystem::release`], removing the file's last name keeps its data (`getattr` then
    /// reports no links), as POSIX asks of an open file. The default keeps nothing: file
    /// systems that serve only the lab remove a file with its last name.
    fn open(&mut self, _ino: Ino) -> Result<(), FsError> {
        Ok(())
    }
    /// Closes one [`FileSystem::open`] of `ino`; the last close of a file with no name left
    /// removes it. A close without an open is ignored.
    fn release(&mut self, _ino: Ino) -> Result<(), FsError> {
        Ok(())
    }
}
