//! `MemFs`: the obviously correct in-memory model that file system tests compare against.
//! Token writes only move the size (the oracle keeps no fingerprints); tests that check
//! contents write bytes.

use std::collections::BTreeMap;

use flash::Nanos;
use rustc_hash::FxHashMap;

use crate::{
    FileData, FileKind, FileStat, FileSystem, FsCounters, FsError, Ino, ReadInto, NAME_MAX, ROOT,
};

enum Node {
    File(Vec<u8>),
    Dir(BTreeMap<String, Ino>),
}

/// The in-memory model.
pub struct MemFs {
    nodes: FxHashMap<Ino, (Node, Nanos)>,
    next: Ino,
    now: Nanos,
}

impl Default for MemFs {
    fn default() -> Self {
        let mut nodes = FxHashMap::default();
        nodes.insert(ROOT, (Node::Dir(BTreeMap::new()), 0));
        MemFs {
            nodes,
            next: ROOT + 1,
            now: 0,
        }
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

impl MemFs {
    fn dir(&mut self, dir: Ino) -> Result<&mut BTreeMap<String, Ino>, FsError> {
        match self.nodes.get_mut(&dir) {
            Some((Node::Dir(d), _)) => Ok(d),
            Some(_) => Err(FsError::NotDir(format!("inode {dir}"))),
            None => Err(FsError::NotFound(format!("inode {dir}"))),
        }
    }

    fn file(&mut self, ino: Ino) -> Result<&mut Vec<u8>, FsError> {
        match self.nodes.get_mut(&ino) {
            Some((Node::File(f), _)) => Ok(f),
            Some(_) => Err(FsError::IsDir(format!("inode {ino}"))),
            None => Err(FsError::NotFound(format!("inode {ino}"))),
        }
    }

    fn make(&mut self, dir: Ino, name: &str, node: Node) -> Result<Ino, FsError> {
        check_name(name)?;
        let ino = self.next;
        let d = self.dir(dir)?;
        if d.contains_key(name) {
            return Err(FsError::Exists(name.into()));
        }
        d.insert(name.into(), ino);
        self.next += 1;
        let now = self.now;
        self.nodes.insert(ino, (node, now));
        Ok(ino)
    }

    /// The inode `name` in `dir`, or a not-found error naming it.
    fn entry(&mut self, dir: Ino, name: &str) -> Result<Ino, FsError> {
        self.dir(dir)?
            .get(name)
            .copied()
            .ok_or_else(|| FsError::NotFound(name.into()))
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
        self.make(dir, name, Node::File(Vec::new()))
    }

    fn mkdir(&mut self, dir: Ino, name: &str) -> Result<Ino, FsError> {
        self.make(dir, name, Node::Dir(BTreeMap::new()))
    }

    fn unlink(&mut self, dir: Ino, name: &str) -> Result<(), FsError> {
        let ino = self.entry(dir, name)?;
        self.file(ino)?;
        self.dir(dir)?.remove(name);
        self.nodes.remove(&ino);
        Ok(())
    }

    fn rmdir(&mut self, dir: Ino, name: &str) -> Result<(), FsError> {
        let ino = self.entry(dir, name)?;
        if !self.dir(ino)?.is_empty() {
            return Err(FsError::NotEmpty(name.into()));
        }
        self.dir(dir)?.remove(name);
        self.nodes.remove(&ino);
        Ok(())
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
        let now = self.now;
        let f = self.file(ino)?;
        let end = (offset + len) as usize;
        if f.len() < end {
            f.resize(end, 0);
        }
        if let FileData::Bytes(b) = data {
            f[offset as usize..end].copy_from_slice(b);
        }
        self.nodes.get_mut(&ino).unwrap().1 = now;
        Ok(())
    }

    fn read(&mut self, ino: Ino, offset: u64, into: ReadInto<'_>) -> Result<u64, FsError> {
        let f = self.file(ino)?;
        let start = (offset as usize).min(f.len());
        let n = (f.len() - start).min(into.len() as usize);
        if let ReadInto::Bytes(out) = into {
            out[..n].copy_from_slice(&f[start..start + n]);
        }
        Ok(n as u64)
    }

    fn truncate(&mut self, ino: Ino, size: u64) -> Result<(), FsError> {
        let now = self.now;
        self.file(ino)?.resize(size as usize, 0);
        self.nodes.get_mut(&ino).unwrap().1 = now;
        Ok(())
    }

    fn stat(&mut self, ino: Ino) -> Result<FileStat, FsError> {
        let (node, modified_ns) = self
            .nodes
            .get(&ino)
            .ok_or_else(|| FsError::NotFound(format!("inode {ino}")))?;
        let (kind, size) = match node {
            Node::File(f) => (FileKind::File, f.len() as u64),
            Node::Dir(d) => (FileKind::Dir, d.len() as u64),
        };
        Ok(FileStat {
            ino,
            kind,
            size,
            modified_ns: *modified_ns,
        })
    }

    fn fsync(&mut self, ino: Ino, _data_only: bool) -> Result<(), FsError> {
        self.nodes
            .get(&ino)
            .map(|_| ())
            .ok_or_else(|| FsError::NotFound(format!("inode {ino}")))
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
}
