//! A thin file layer over [`PoftlStore`], so the lab's file-level workloads can run on p-OFTL:
//! each file is one object (its inode number is the object id); directories live in host
//! memory. The paper keeps file metadata in object attributes (seed 002 III); this layer does
//! not write any metadata to flash, so only file data reaches the device. That favours p-OFTL
//! slightly against stacks that write metadata, and is why the p-OFTL experiments compare
//! p-OFTL variants with each other.

use std::collections::BTreeMap;

use flash::{Flash, Nanos};
use rustc_hash::FxHashMap;
use vfs::{FileData, FileKind, FileStat, FileSystem, FsCounters, FsError, Ino, ReadInto, ROOT};

use crate::store::{Data, PoftlError, PoftlStore, ReadOut};

enum Node {
    File,
    Dir(BTreeMap<String, Ino>),
}

pub struct PoftlFs<F: Flash> {
    store: PoftlStore<F>,
    nodes: FxHashMap<Ino, (Node, Nanos)>,
    next: Ino,
    name: String,
}

fn fs_err(e: PoftlError) -> FsError {
    match e {
        PoftlError::NoSpace { .. } => FsError::NoSpace(e.to_string()),
        PoftlError::Invalid(m) => FsError::Invalid(m),
        PoftlError::Corrupted { .. } => FsError::Corrupted(e.to_string()),
        PoftlError::NoObject(id) => FsError::NotFound(format!("object {id:#x}")),
        e => FsError::Device(e.to_string()),
    }
}

impl<F: Flash> PoftlFs<F> {
    pub fn new(store: PoftlStore<F>, name: &str) -> Self {
        let mut nodes = FxHashMap::default();
        nodes.insert(ROOT, (Node::Dir(BTreeMap::new()), 0));
        PoftlFs {
            store,
            nodes,
            next: ROOT + 1,
            name: name.to_string(),
        }
    }

    pub fn store(&self) -> &PoftlStore<F> {
        &self.store
    }

    fn dir(&mut self, dir: Ino) -> Result<&mut BTreeMap<String, Ino>, FsError> {
        match self.nodes.get_mut(&dir) {
            Some((Node::Dir(d), _)) => Ok(d),
            Some(_) => Err(FsError::NotDir(format!("inode {dir}"))),
            None => Err(FsError::NotFound(format!("inode {dir}"))),
        }
    }

    fn file(&self, ino: Ino) -> Result<(), FsError> {
        match self.nodes.get(&ino) {
            Some((Node::File, _)) => Ok(()),
            Some(_) => Err(FsError::IsDir(format!("inode {ino}"))),
            None => Err(FsError::NotFound(format!("inode {ino}"))),
        }
    }

    fn make(&mut self, dir: Ino, name: &str, node: Node) -> Result<Ino, FsError> {
        vfs::oracle::check_name(name)?;
        let ino = self.next;
        let d = self.dir(dir)?;
        if d.contains_key(name) {
            return Err(FsError::Exists(name.into()));
        }
        d.insert(name.into(), ino);
        self.next += 1;
        if matches!(node, Node::File) {
            self.store.create(ino).map_err(fs_err)?;
        }
        let now = self.store.now();
        self.nodes.insert(ino, (node, now));
        Ok(ino)
    }

    fn entry(&mut self, dir: Ino, name: &str) -> Result<Ino, FsError> {
        self.dir(dir)?
            .get(name)
            .copied()
            .ok_or_else(|| FsError::NotFound(name.into()))
    }

    fn touch(&mut self, ino: Ino) {
        let now = self.store.now();
        if let Some(n) = self.nodes.get_mut(&ino) {
            n.1 = now;
        }
    }
}

impl<F: Flash> FileSystem for PoftlFs<F> {
    fn name(&self) -> &str {
        &self.name
    }
    fn lookup(&mut self, dir: Ino, name: &str) -> Result<Option<Ino>, FsError> {
        Ok(self.dir(dir)?.get(name).copied())
    }
    fn create(&mut self, dir: Ino, name: &str) -> Result<Ino, FsError> {
        self.make(dir, name, Node::File)
    }
    fn mkdir(&mut self, dir: Ino, name: &str) -> Result<Ino, FsError> {
        self.make(dir, name, Node::Dir(BTreeMap::new()))
    }
    fn unlink(&mut self, dir: Ino, name: &str) -> Result<(), FsError> {
        let ino = self.entry(dir, name)?;
        self.file(ino)?;
        self.store.remove(ino).map_err(fs_err)?;
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
        self.file(ino)?;
        let d = match data {
            FileData::Bytes(b) => Data::Bytes(b),
            FileData::Token(token) => Data::Token { len, token },
        };
        self.store.write(ino, offset, d).map_err(fs_err)?;
        self.touch(ino);
        Ok(())
    }
    fn read(&mut self, ino: Ino, offset: u64, into: ReadInto<'_>) -> Result<u64, FsError> {
        self.file(ino)?;
        let out = match into {
            ReadInto::Bytes(b) => ReadOut::Bytes(b),
            ReadInto::Discard(n) => ReadOut::Discard(n),
        };
        self.store.read(ino, offset, out).map_err(fs_err)
    }
    fn truncate(&mut self, ino: Ino, size: u64) -> Result<(), FsError> {
        self.file(ino)?;
        self.store.truncate(ino, size).map_err(fs_err)?;
        self.touch(ino);
        Ok(())
    }
    fn stat(&mut self, ino: Ino) -> Result<FileStat, FsError> {
        let (node, modified_ns) = self
            .nodes
            .get(&ino)
            .ok_or_else(|| FsError::NotFound(format!("inode {ino}")))?;
        let (kind, size) = match node {
            Node::File => (FileKind::File, self.store.size(ino).map_err(fs_err)?),
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
        if !self.nodes.contains_key(&ino) {
            return Err(FsError::NotFound(format!("inode {ino}")));
        }
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
            ("files", self.nodes.len() as u64),
            ("flushes", s.flushes),
            ("groups", s.groups),
            ("host_pages_written", s.host_pages_written),
            ("rmw_reads", s.rmw_reads),
        ]
    }
    fn check(&mut self) -> Result<Vec<String>, FsError> {
        let mut problems = Vec::new();
        if let Err(e) = self.store.check() {
            problems.push(e);
        }
        for (ino, (node, _)) in &self.nodes {
            if matches!(node, Node::File) && !self.store.exists(*ino) {
                problems.push(format!("file {ino} has no object"));
            }
        }
        Ok(problems)
    }
}
