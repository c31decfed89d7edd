//! A thin file layer over [`PoftlStore`], so the lab's file-level workloads can run on p-OFTL:
//! each file is one object (its inode number is the object id); directories live in host
//! memory. The paper keeps file metadata in object attributes (POFTL-14 III); this layer
//! writes none of its own (names, times, directories are lost at a remount), so what reaches
//! the device is file data and the store's log of creations, truncations and removals. That
//! favours p-OFTL slightly against stacks that write full metadata.

use std::collections::BTreeMap;

use flash::{Flash, Nanos};
use vfs::namespace::{Namespace, Node};
use vfs::{FileData, FileStat, FileSystem, FsCounters, FsError, Ino, ReadInto};

use crate::store::{Data, PoftlError, PoftlStore, ReadOut};

/// p-OFTL's thin file layer: each file is the store's object numbered by its inode; names and
/// directories live in host memory only (lost at a remount).
pub struct PoftlFs<F: Flash> {
    store: PoftlStore<F>,
    /// Files hold nothing in host memory: their data is object `ino` in the store.
    ns: Namespace<()>,
    name: String,
}

fn fs_err(e: PoftlError) -> FsError {
    match e {
        PoftlError::NoSpace { .. } => FsError::NoSpace(e.to_string()),
        PoftlError::Invalid(m) => FsError::Invalid(m),
        PoftlError::Corrupted { unit, .. } => FsError::Damaged {
            what: e.to_string(),
            unit,
        },
        PoftlError::NoObject(id) => FsError::NotFound(format!("object {id:#x}")),
        e => FsError::Device(e.to_string()),
    }
}

impl<F: Flash> PoftlFs<F> {
    /// A file layer over `store`, empty but for the root directory; `name` labels it in reports.
    pub fn new(store: PoftlStore<F>, name: &str) -> Self {
        PoftlFs {
            store,
            ns: Namespace::default(),
            name: name.to_string(),
        }
    }

    /// The object store below.
    pub fn store(&self) -> &PoftlStore<F> {
        &self.store
    }

    fn touch(&mut self, ino: Ino) {
        self.ns.touch(ino, self.store.now());
    }
}

impl<F: Flash> FileSystem for PoftlFs<F> {
    fn name(&self) -> &str {
        &self.name
    }
    fn lookup(&mut self, dir: Ino, name: &str) -> Result<Option<Ino>, FsError> {
        self.ns.lookup(dir, name)
    }
    fn create(&mut self, dir: Ino, name: &str) -> Result<Ino, FsError> {
        let ino = self.ns.make(dir, name, Node::File(()), self.store.now())?;
        if let Err(e) = self.store.create(ino) {
            // No object, no file: take the name back.
            self.ns.unlink(dir, name)?;
            return Err(fs_err(e));
        }
        Ok(ino)
    }
    fn mkdir(&mut self, dir: Ino, name: &str) -> Result<Ino, FsError> {
        self.ns
            .make(dir, name, Node::Dir(BTreeMap::new()), self.store.now())
    }
    fn unlink(&mut self, dir: Ino, name: &str) -> Result<(), FsError> {
        let ino = self.ns.entry(dir, name)?;
        self.ns.file(ino)?;
        self.store.remove(ino).map_err(fs_err)?;
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
        self.ns.file(ino)?;
        let d = match data {
            FileData::Bytes(b) => Data::Bytes(b),
            FileData::Token(token) => Data::Token { len, token },
        };
        self.store.write(ino, offset, d).map_err(fs_err)?;
        self.touch(ino);
        Ok(())
    }
    fn read(&mut self, ino: Ino, offset: u64, into: ReadInto<'_>) -> Result<u64, FsError> {
        self.ns.file(ino)?;
        let out = match into {
            ReadInto::Bytes(b) => ReadOut::Bytes(b),
            ReadInto::Discard(n) => ReadOut::Discard(n),
        };
        self.store.read(ino, offset, out).map_err(fs_err)
    }
    fn truncate(&mut self, ino: Ino, size: u64) -> Result<(), FsError> {
        self.ns.file(ino)?;
        self.store.truncate(ino, size).map_err(fs_err)?;
        self.touch(ino);
        Ok(())
    }
    fn stat(&mut self, ino: Ino) -> Result<FileStat, FsError> {
        let (node, modified_ns) = self.ns.node(ino)?;
        let (kind, dir_size) = match node {
            Node::File(()) => (node.kind(), None),
            Node::Dir(d) => (node.kind(), Some(d.len() as u64)),
        };
        let size = match dir_size {
            Some(n) => n,
            None => self.store.size(ino).map_err(fs_err)?,
        };
        Ok(FileStat {
            ino,
            kind,
            size,
            modified_ns,
        })
    }
    fn fsync(&mut self, ino: Ino, _data_only: bool) -> Result<(), FsError> {
        self.ns.node(ino)?;
        self.store.flush().map_err(fs_err)
    }
    fn sync(&mut self) -> Result<(), FsError> {
        self.store.flush().map_err(fs_err)
    }
    fn set_time(&mut self, at: Nanos) {
        self.store.set_time(at);
    }
    fn now(&self) -> Nanos {
        self.store.now()
    }
    fn background(&mut self, from: Nanos, until: Nanos) -> Result<Nanos, FsError> {
        self.store.background(from, until).map_err(fs_err)
    }
    fn counters(&self) -> FsCounters {
        let s = self.store.stats();
        vec![
            ("files", self.ns.len() as u64),
            ("flushes", s.flushes),
            ("groups", s.groups),
            ("host_pages_written", s.host_pages_written),
            ("rmw_reads", s.rmw_reads),
        ]
    }
    fn check(&mut self) -> Result<Vec<String>, FsError> {
        let mut problems = Vec::new();
        if let Err(e) = self.store.check() {
            problems.push(e.to_string());
        }
        for (ino, ()) in self.ns.files() {
            if !self.store.exists(ino) {
                problems.push(format!("file {ino} has no object"));
            }
        }
        Ok(problems)
    }
}
