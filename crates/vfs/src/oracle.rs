//! `MemFs`: the obviously correct in-memory model that file system tests compare against.
//! Token writes only move the size (the oracle keeps no fingerprints); tests that check
//! contents write bytes.
//!
//! Besides the lab's calls it models the POSIX surface of a mount: owners and permissions,
//! hard links, symbolic links, rename, setattr and extended attributes (with `ossd.priority`
//! standing for the object's priority class: a number from 0 to 255, absent when 0).

use std::collections::BTreeMap;

use crate::Nanos;
use rustc_hash::{FxHashMap, FxHashSet};

use crate::{
    FileAttr, FileData, FileKind, FileStat, FileSystem, FsCounters, FsError, Ino, Owner, ReadInto,
    SetAttr, Special, XattrMode, NAME_MAX, ROOT, SYMLINK_MAX, XATTR_NAME_MAX,
};

/// The extended attribute that stands for the object's priority class.
pub const PRIORITY_XATTR: &str = "ossd.priority";

struct Inode {
    kind: FileKind,
    /// A file's bytes, or a symbolic link's target.
    data: Vec<u8>,
    /// A directory's entries.
    entries: BTreeMap<String, Ino>,
    owner: Owner,
    nlink: u32,
    /// A device node's device number.
    rdev: u64,
    atime: Nanos,
    mtime: Nanos,
    ctime: Nanos,
    xattrs: BTreeMap<String, Vec<u8>>,
}

/// The in-memory model.
pub struct MemFs {
    nodes: FxHashMap<Ino, Inode>,
    next: Ino,
    now: Nanos,
    /// Opens not yet released, per inode.
    open: FxHashMap<Ino, u32>,
    /// Inodes whose last name went while they were open: kept until the last release.
    unlinked: FxHashSet<Ino>,
}

impl Default for MemFs {
    fn default() -> Self {
        let mut fs = MemFs {
            nodes: FxHashMap::default(),
            next: ROOT + 1,
            now: 0,
            open: FxHashMap::default(),
            unlinked: FxHashSet::default(),
        };
        fs.nodes.insert(
            ROOT,
            fs.inode(FileKind::Dir, Owner::default_for(FileKind::Dir)),
        );
        fs
    }
}

/// A name a directory can hold: not empty, not `.` or `..`, no `/` or NUL, at most
/// [`NAME_MAX`] bytes.
pub fn check_name(name: &str) -> Result<(), FsError> {
    if name.is_empty()
        || name == "."
        || name == ".."
        || name.len() > NAME_MAX
        || name.contains(['/', '\0'])
    {
        return Err(FsError::Invalid(format!("bad file name {name:?}")));
    }
    Ok(())
}

/// Checks a symbolic link's target: 1 to [`SYMLINK_MAX`] bytes.
pub fn check_symlink_target(target: &[u8]) -> Result<(), FsError> {
    if target.is_empty() || target.len() > SYMLINK_MAX {
        return Err(FsError::Invalid(format!(
            "a symbolic link target of {} bytes",
            target.len()
        )));
    }
    Ok(())
}

fn not_found(ino: Ino) -> FsError {
    FsError::NotFound(format!("inode {ino}"))
}

impl MemFs {
    fn inode(&self, kind: FileKind, owner: Owner) -> Inode {
        Inode {
            kind,
            data: Vec::new(),
            entries: BTreeMap::new(),
            owner,
            nlink: 1,
            rdev: 0,
            atime: self.now,
            mtime: self.now,
            ctime: self.now,
            xattrs: BTreeMap::new(),
        }
    }

    fn node(&mut self, ino: Ino) -> Result<&mut Inode, FsError> {
        self.nodes.get_mut(&ino).ok_or_else(|| not_found(ino))
    }

    fn dir(&mut self, ino: Ino) -> Result<&mut BTreeMap<String, Ino>, FsError> {
        let n = self.node(ino)?;
        match n.kind {
            FileKind::Dir => Ok(&mut n.entries),
            _ => Err(FsError::NotDir(format!("inode {ino}"))),
        }
    }

    fn file(&mut self, ino: Ino) -> Result<&mut Inode, FsError> {
        let n = self.node(ino)?;
        match n.kind {
            FileKind::File => Ok(n),
            FileKind::Dir => Err(FsError::IsDir(format!("inode {ino}"))),
            FileKind::Symlink => Err(FsError::Invalid(format!("inode {ino} is a symbolic link"))),
            FileKind::Special(_) => Err(FsError::Invalid(format!("inode {ino} is a special file"))),
        }
    }

    fn touch(&mut self, ino: Ino) {
        let now = self.now;
        if let Some(n) = self.nodes.get_mut(&ino) {
            n.mtime = now;
            n.ctime = now;
        }
    }

    fn make(
        &mut self,
        dir: Ino,
        name: &str,
        kind: FileKind,
        owner: Owner,
        data: Vec<u8>,
    ) -> Result<Ino, FsError> {
        check_name(name)?;
        let ino = self.next;
        let d = self.dir(dir)?;
        if d.contains_key(name) {
            return Err(FsError::Exists(name.into()));
        }
        d.insert(name.into(), ino);
        self.next += 1;
        let mut node = self.inode(kind, owner);
        node.data = data;
        self.nodes.insert(ino, node);
        self.touch(dir);
        Ok(ino)
    }

    /// One name of `ino` is gone: the inode goes with its last.
    fn drop_link(&mut self, ino: Ino) -> Result<(), FsError> {
        let now = self.now;
        let Some(n) = self.nodes.get_mut(&ino) else {
            return Err(FsError::Corrupted(format!(
                "inode {ino} is named but missing"
            )));
        };
        if n.kind != FileKind::Dir && n.nlink > 1 {
            n.nlink -= 1;
            n.ctime = now;
        } else if n.kind != FileKind::Dir && self.open.contains_key(&ino) {
            // Open: it stays, nameless, until its last release.
            self.unlinked.insert(ino);
        } else {
            self.nodes.remove(&ino);
        }
        Ok(())
    }

    fn remove(&mut self, dir: Ino, name: &str, rmdir: bool) -> Result<(), FsError> {
        let ino = *self
            .dir(dir)?
            .get(name)
            .ok_or_else(|| FsError::NotFound(name.into()))?;
        let n = self.node(ino)?;
        match (rmdir, n.kind) {
            (false, FileKind::Dir) => return Err(FsError::IsDir(name.into())),
            (true, FileKind::File | FileKind::Symlink | FileKind::Special(_)) => {
                return Err(FsError::NotDir(name.into()))
            }
            (true, FileKind::Dir) if !n.entries.is_empty() => {
                return Err(FsError::NotEmpty(name.into()))
            }
            _ => {}
        }
        self.dir(dir)?.remove(name);
        self.touch(dir);
        self.drop_link(ino)
    }

    /// Whether `a` is `d` or one of its ancestors.
    fn is_ancestor(&self, a: Ino, d: Ino) -> bool {
        if a == d {
            return true;
        }
        let Some(n) = self.nodes.get(&a) else {
            return false;
        };
        n.entries.values().any(|&c| {
            self.nodes.get(&c).is_some_and(|n| n.kind == FileKind::Dir) && self.is_ancestor(c, d)
        })
    }
}

impl FileSystem for MemFs {
    fn name(&self) -> &str {
        "oracle"
    }

    fn lookup(&mut self, dir: Ino, name: &str) -> Result<Option<Ino>, FsError> {
        Ok(self.dir(dir)?.get(name).copied())
    }

    fn create(&mut self, dir: Ino, name: &str) -> Result<Ino, FsError> {
        let owner = Owner::default_for(FileKind::File);
        self.make(dir, name, FileKind::File, owner, Vec::new())
    }

    fn mkdir(&mut self, dir: Ino, name: &str) -> Result<Ino, FsError> {
        let owner = Owner::default_for(FileKind::Dir);
        self.make(dir, name, FileKind::Dir, owner, Vec::new())
    }

    fn unlink(&mut self, dir: Ino, name: &str) -> Result<(), FsError> {
        self.remove(dir, name, false)
    }

    fn rmdir(&mut self, dir: Ino, name: &str) -> Result<(), FsError> {
        self.remove(dir, name, true)
    }

    fn readdir(&mut self, dir: Ino) -> Result<Vec<(String, Ino)>, FsError> {
        Ok(self
            .dir(dir)?
            .iter()
            .map(|(n, i)| (n.clone(), *i))
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
        let f = &mut self.file(ino)?.data;
        let end = (offset + len) as usize;
        if f.len() < end {
            f.resize(end, 0);
        }
        if let FileData::Bytes(b) = data {
            f[offset as usize..end].copy_from_slice(b);
        }
        self.touch(ino);
        Ok(())
    }

    fn read(&mut self, ino: Ino, offset: u64, into: ReadInto<'_>) -> Result<u64, FsError> {
        let f = &self.file(ino)?.data;
        let start = (offset as usize).min(f.len());
        let n = (f.len() - start).min(into.len() as usize);
        if let ReadInto::Bytes(out) = into {
            out[..n].copy_from_slice(&f[start..start + n]);
        }
        Ok(n as u64)
    }

    fn truncate(&mut self, ino: Ino, size: u64) -> Result<(), FsError> {
        self.file(ino)?.data.resize(size as usize, 0);
        self.touch(ino);
        Ok(())
    }

    fn stat(&mut self, ino: Ino) -> Result<FileStat, FsError> {
        let n = self.node(ino)?;
        let size = match n.kind {
            FileKind::File | FileKind::Symlink | FileKind::Special(_) => n.data.len() as u64,
            FileKind::Dir => n.entries.len() as u64,
        };
        Ok(FileStat {
            ino,
            kind: n.kind,
            size,
            modified_ns: n.mtime,
        })
    }

    fn fsync(&mut self, ino: Ino, _data_only: bool) -> Result<(), FsError> {
        self.node(ino).map(|_| ())
    }

    fn sync(&mut self) -> Result<(), FsError> {
        Ok(())
    }

    fn set_time(&mut self, at: Nanos) {
        self.now = self.now.max(at);
    }

    fn now(&self) -> Nanos {
        self.now
    }

    fn background(&mut self, from: Nanos, _until: Nanos) -> Result<Nanos, FsError> {
        self.set_time(from);
        Ok(self.now)
    }

    fn counters(&self) -> FsCounters {
        vec![("files", self.nodes.len() as u64)]
    }

    fn check(&mut self) -> Result<Vec<String>, FsError> {
        Ok(Vec::new())
    }

    fn getattr(&mut self, ino: Ino) -> Result<FileAttr, FsError> {
        let size = self.stat(ino)?.size;
        let n = self.nodes.get(&ino).ok_or_else(|| not_found(ino))?;
        let subdirs = n
            .entries
            .values()
            .filter(|c| self.nodes.get(c).is_some_and(|n| n.kind == FileKind::Dir))
            .count() as u32;
        let unlinked = self.unlinked.contains(&ino);
        let n = self.node(ino)?;
        let nlink = match n.kind {
            FileKind::Dir => 2 + subdirs,
            _ if unlinked => 0,
            _ => n.nlink,
        };
        Ok(FileAttr {
            ino,
            kind: n.kind,
            size,
            perm: n.owner.perm,
            uid: n.owner.uid,
            gid: n.owner.gid,
            nlink,
            atime_ns: n.atime,
            mtime_ns: n.mtime,
            ctime_ns: n.ctime,
            rdev: n.rdev,
        })
    }

    fn create_as(
        &mut self,
        dir: Ino,
        name: &str,
        kind: FileKind,
        owner: Owner,
    ) -> Result<Ino, FsError> {
        match kind {
            FileKind::Symlink => {
                return Err(FsError::Invalid("a symbolic link needs a target".into()))
            }
            FileKind::Special(_) => {
                return Err(FsError::Invalid("special files are made by mknod".into()))
            }
            FileKind::File | FileKind::Dir => {}
        }
        self.make(dir, name, kind, owner, Vec::new())
    }

    fn symlink(
        &mut self,
        dir: Ino,
        name: &str,
        target: &[u8],
        owner: Owner,
    ) -> Result<Ino, FsError> {
        check_symlink_target(target)?;
        self.make(dir, name, FileKind::Symlink, owner, target.to_vec())
    }

    fn mknod(
        &mut self,
        dir: Ino,
        name: &str,
        kind: Special,
        rdev: u64,
        owner: Owner,
    ) -> Result<Ino, FsError> {
        let ino = self.make(dir, name, FileKind::Special(kind), owner, Vec::new())?;
        if matches!(kind, Special::CharDevice | Special::BlockDevice) {
            self.node(ino)?.rdev = rdev;
        }
        Ok(ino)
    }

    fn readlink(&mut self, ino: Ino) -> Result<Vec<u8>, FsError> {
        let n = self.node(ino)?;
        if n.kind != FileKind::Symlink {
            return Err(FsError::Invalid(format!(
                "inode {ino} is not a symbolic link"
            )));
        }
        Ok(n.data.clone())
    }

    fn link(&mut self, ino: Ino, dir: Ino, name: &str) -> Result<(), FsError> {
        if self.node(ino)?.kind == FileKind::Dir {
            return Err(FsError::NotPermitted(format!("inode {ino} is a directory")));
        }
        if self.unlinked.contains(&ino) {
            // Its last name is gone (it is only open): it cannot get a new one.
            return Err(not_found(ino));
        }
        check_name(name)?;
        let d = self.dir(dir)?;
        if d.contains_key(name) {
            return Err(FsError::Exists(name.into()));
        }
        d.insert(name.into(), ino);
        let now = self.now;
        let n = self.node(ino)?;
        n.nlink += 1;
        n.ctime = now;
        self.touch(dir);
        Ok(())
    }

    fn rename(
        &mut self,
        dir: Ino,
        name: &str,
        new_dir: Ino,
        new_name: &str,
    ) -> Result<(), FsError> {
        check_name(name)?;
        check_name(new_name)?;
        self.dir(dir)?;
        self.dir(new_dir)?;
        let ino = *self
            .dir(dir)?
            .get(name)
            .ok_or_else(|| FsError::NotFound(name.into()))?;
        if dir == new_dir && name == new_name {
            return Ok(());
        }
        let kind = self.node(ino)?.kind;
        if kind == FileKind::Dir && self.is_ancestor(ino, new_dir) {
            return Err(FsError::Invalid(format!(
                "cannot move directory {name:?} into itself"
            )));
        }
        let target = self.dir(new_dir)?.get(new_name).copied();
        if let Some(t) = target {
            if t == ino {
                return Ok(());
            }
            let tn = self.node(t)?;
            match (kind, tn.kind) {
                (FileKind::Dir, FileKind::Dir) if !tn.entries.is_empty() => {
                    return Err(FsError::NotEmpty(new_name.into()))
                }
                (FileKind::Dir, FileKind::Dir) => {}
                (FileKind::Dir, _) => return Err(FsError::NotDir(new_name.into())),
                (_, FileKind::Dir) => return Err(FsError::IsDir(new_name.into())),
                _ => {}
            }
        }
        self.dir(new_dir)?.insert(new_name.into(), ino);
        self.dir(dir)?.remove(name);
        if let Some(t) = target {
            self.drop_link(t)?;
        }
        let now = self.now;
        self.node(ino)?.ctime = now;
        self.touch(dir);
        self.touch(new_dir);
        Ok(())
    }

    fn setattr(&mut self, ino: Ino, set: SetAttr) -> Result<FileAttr, FsError> {
        let kind = self.node(ino)?.kind;
        if let Some(size) = set.size {
            match kind {
                FileKind::File => self.truncate(ino, size)?,
                FileKind::Dir => return Err(FsError::IsDir(format!("inode {ino}"))),
                FileKind::Symlink => {
                    return Err(FsError::Invalid(format!("inode {ino} is a symbolic link")))
                }
                FileKind::Special(_) => {
                    return Err(FsError::Invalid(format!("inode {ino} is a special file")))
                }
            }
        }
        let now = self.now;
        let n = self.node(ino)?;
        n.owner.perm = set.perm.map_or(n.owner.perm, |p| p & 0o7777);
        n.owner.uid = set.uid.unwrap_or(n.owner.uid);
        n.owner.gid = set.gid.unwrap_or(n.owner.gid);
        n.atime = set.atime_ns.unwrap_or(n.atime);
        n.mtime = set.mtime_ns.unwrap_or(n.mtime);
        n.ctime = now;
        self.getattr(ino)
    }

    fn getxattr(&mut self, ino: Ino, name: &str) -> Result<Option<Vec<u8>>, FsError> {
        let n = self.node(ino)?;
        check_xattr_name(name)?;
        Ok(n.xattrs.get(name).cloned())
    }

    fn setxattr(
        &mut self,
        ino: Ino,
        name: &str,
        value: &[u8],
        mode: XattrMode,
    ) -> Result<(), FsError> {
        let n = self.node(ino)?;
        check_xattr_name(name)?;
        match (mode, n.xattrs.contains_key(name)) {
            (XattrMode::Create, true) => return Err(FsError::Exists(name.into())),
            (XattrMode::Replace, false) => return Err(FsError::NotFound(name.into())),
            _ => {}
        }
        if name == PRIORITY_XATTR {
            let p = std::str::from_utf8(value)
                .ok()
                .and_then(|s| s.trim().parse::<u64>().ok())
                .filter(|&p| p <= u8::MAX as u64)
                .ok_or_else(|| FsError::Invalid(format!("{PRIORITY_XATTR} value {value:?}")))?;
            if p == 0 {
                n.xattrs.remove(name);
            } else {
                n.xattrs.insert(name.into(), p.to_string().into_bytes());
            }
            return Ok(());
        }
        n.xattrs.insert(name.into(), value.to_vec());
        Ok(())
    }

    fn listxattr(&mut self, ino: Ino) -> Result<Vec<String>, FsError> {
        Ok(self.node(ino)?.xattrs.keys().cloned().collect())
    }

    fn removexattr(&mut self, ino: Ino, name: &str) -> Result<(), FsError> {
        let n = self.node(ino)?;
        check_xattr_name(name)?;
        n.xattrs
            .remove(name)
            .map(|_| ())
            .ok_or_else(|| FsError::NotFound(name.into()))
    }

    fn open(&mut self, ino: Ino) -> Result<(), FsError> {
        self.node(ino)?;
        *self.open.entry(ino).or_insert(0) += 1;
        Ok(())
    }

    fn release(&mut self, ino: Ino) -> Result<(), FsError> {
        let Some(n) = self.open.get_mut(&ino) else {
            return Ok(());
        };
        *n -= 1;
        if *n == 0 {
            self.open.remove(&ino);
            if self.unlinked.remove(&ino) {
                self.nodes.remove(&ino);
            }
        }
        Ok(())
    }
}

/// An extended attribute name (without its namespace): not empty, no NUL, at most
/// [`XATTR_NAME_MAX`] bytes.
pub fn check_xattr_name(name: &str) -> Result<(), FsError> {
    if name.is_empty() || name.len() > XATTR_NAME_MAX || name.contains('\0') {
        return Err(FsError::Invalid(format!(
            "bad extended attribute name {name:?}"
        )));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn oracle_basics() {
        let mut fs = MemFs::default();
        let d = fs.mkdir(ROOT, "d").unwrap();
        let f = fs.create(d, "f").unwrap();
        assert_eq!(fs.create(d, "f"), Err(FsError::Exists("f".into())));
        fs.write(f, 3, 2, FileData::Bytes(b"hi")).unwrap();
        let mut b = [9u8; 8];
        assert_eq!(fs.read(f, 0, ReadInto::Bytes(&mut b)).unwrap(), 5);
        assert_eq!(&b[..5], b"\0\0\0hi");
        assert!(matches!(fs.rmdir(ROOT, "d"), Err(FsError::NotEmpty(_))));
        assert!(matches!(fs.unlink(ROOT, "d"), Err(FsError::IsDir(_))));
        fs.unlink(d, "f").unwrap();
        fs.rmdir(ROOT, "d").unwrap();
        assert_eq!(fs.readdir(ROOT).unwrap(), vec![]);
        assert!(check_name("a/b").is_err());
    }

    #[test]
    fn oracle_links_renames_and_attributes() {
        let mut fs = MemFs::default();
        let d = fs.mkdir(ROOT, "d").unwrap();
        let f = fs.create(ROOT, "f").unwrap();
        fs.write(f, 0, 2, FileData::Bytes(b"hi")).unwrap();
        fs.link(f, d, "g").unwrap();
        assert_eq!(fs.getattr(f).unwrap().nlink, 2);
        assert!(matches!(
            fs.link(d, ROOT, "x"),
            Err(FsError::NotPermitted(_))
        ));
        fs.unlink(ROOT, "f").unwrap();
        assert_eq!(fs.getattr(f).unwrap().nlink, 1);
        let s = fs
            .symlink(ROOT, "s", b"d/g", Owner::default_for(FileKind::Symlink))
            .unwrap();
        assert_eq!(fs.readlink(s).unwrap(), b"d/g");
        assert!(matches!(
            fs.rename(ROOT, "d", d, "e"),
            Err(FsError::Invalid(_))
        ));
        fs.rename(d, "g", ROOT, "s").unwrap();
        assert_eq!(fs.lookup(ROOT, "s").unwrap(), Some(f));
        assert!(fs.stat(s).is_err(), "the replaced link is gone");
        fs.setxattr(f, "k", b"v", XattrMode::Create).unwrap();
        assert!(matches!(
            fs.setxattr(f, "k", b"w", XattrMode::Create),
            Err(FsError::Exists(_))
        ));
        fs.setxattr(f, PRIORITY_XATTR, b"0", XattrMode::Any)
            .unwrap();
        assert_eq!(fs.listxattr(f).unwrap(), vec!["k".to_string()]);
        let a = fs
            .setattr(
                f,
                SetAttr {
                    perm: Some(0o100600),
                    size: Some(1),
                    ..SetAttr::default()
                },
            )
            .unwrap();
        assert_eq!((a.perm, a.size), (0o600, 1));
    }
}
