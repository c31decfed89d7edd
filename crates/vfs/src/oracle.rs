//! `MemFs`: the obviously correct in-memory model that file system tests compare against.
//! Token writes only move the size (the oracle keeps no fingerprints); tests that check
//! contents write bytes.

use std::collections::BTreeMap;

use flash::Nanos;

use crate::namespace::{Namespace, Node};
use crate::{FileData, FileStat, FileSystem, FsCounters, FsError, Ino, ReadInto, NAME_MAX};

/// The in-memory model.
#[derive(Default)]
pub struct MemFs {
    ns: Namespace<Vec<u8>>,
    now: Nanos,
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

impl FileSystem for MemFs {
    fn name(&self) -> &str {
        "oracle"
    }

    fn lookup(&mut self, dir: Ino, name: &str) -> Result<Option<Ino>, FsError> {
        self.ns.lookup(dir, name)
    }

    fn create(&mut self, dir: Ino, name: &str) -> Result<Ino, FsError> {
        self.ns.make(dir, name, Node::File(Vec::new()), self.now)
    }

    fn mkdir(&mut self, dir: Ino, name: &str) -> Result<Ino, FsError> {
        self.ns
            .make(dir, name, Node::Dir(BTreeMap::new()), self.now)
    }

    fn unlink(&mut self, dir: Ino, name: &str) -> Result<(), FsError> {
        self.ns.unlink(dir, name).map(|_| ())
    }

    fn rmdir(&mut self, dir: Ino, name: &str) -> Result<(), FsError> {
        self.ns.rmdir(dir, name).map(|_| ())
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
        let f = self.ns.file(ino)?;
        let end = (offset + len) as usize;
        if f.len() < end {
            f.resize(end, 0);
        }
        if let FileData::Bytes(b) = data {
            f[offset as usize..end].copy_from_slice(b);
        }
        self.ns.touch(ino, self.now);
        Ok(())
    }

    fn read(&mut self, ino: Ino, offset: u64, into: ReadInto<'_>) -> Result<u64, FsError> {
        let f = self.ns.file(ino)?;
        let start = (offset as usize).min(f.len());
        let n = (f.len() - start).min(into.len() as usize);
        if let ReadInto::Bytes(out) = into {
            out[..n].copy_from_slice(&f[start..start + n]);
        }
        Ok(n as u64)
    }

    fn truncate(&mut self, ino: Ino, size: u64) -> Result<(), FsError> {
        self.ns.file(ino)?.resize(size as usize, 0);
        self.ns.touch(ino, self.now);
        Ok(())
    }

    fn stat(&mut self, ino: Ino) -> Result<FileStat, FsError> {
        let (node, modified_ns) = self.ns.node(ino)?;
        let size = match node {
            Node::File(f) => f.len() as u64,
            Node::Dir(d) => d.len() as u64,
        };
        Ok(FileStat {
            ino,
            kind: node.kind(),
            size,
            modified_ns,
        })
    }

    fn fsync(&mut self, ino: Ino, _data_only: bool) -> Result<(), FsError> {
        self.ns.node(ino).map(|_| ())
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
        vec![("files", self.ns.len() as u64)]
    }

    fn check(&mut self) -> Result<Vec<String>, FsError> {
        Ok(Vec::new())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ROOT;

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
