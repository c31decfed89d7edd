//! A directory tree kept in host memory: the namespace of the in-memory oracle and of file
//! layers that keep only file data on the device (p-OFTL's). `T` is what a file node holds.

use std::collections::BTreeMap;

use crate::Nanos;
use rustc_hash::FxHashMap;

use crate::oracle::check_name;
use crate::{FileKind, FsError, Ino, ROOT};

/// An inode of the namespace: a file holding a `T`, or a directory of names.
pub enum Node<T> {
    /// A file and what the file layer keeps for it.
    File(T),
    /// A directory: its entries, by name.
    Dir(BTreeMap<String, Ino>),
}

/// Inodes by number, each with its node and modification time; the root directory exists.
pub struct Namespace<T> {
    nodes: FxHashMap<Ino, (Node<T>, Nanos)>,
    next: Ino,
}

impl<T> Default for Namespace<T> {
    fn default() -> Self {
        let mut nodes = FxHashMap::default();
        nodes.insert(ROOT, (Node::Dir(BTreeMap::new()), 0));
        Namespace {
            nodes,
            next: ROOT + 1,
        }
    }
}

fn not_found(ino: Ino) -> FsError {
    FsError::NotFound(format!("inode {ino}"))
}

impl<T> Namespace<T> {
    /// The entries of directory `dir`; [`FsError::NotDir`] for a file, [`FsError::NotFound`] if
    /// absent.
    pub fn dir(&mut self, dir: Ino) -> Result<&mut BTreeMap<String, Ino>, FsError> {
        match self.nodes.get_mut(&dir) {
            Some((Node::Dir(d), _)) => Ok(d),
            Some(_) => Err(FsError::NotDir(format!("inode {dir}"))),
            None => Err(not_found(dir)),
        }
    }

    /// What file `ino` holds; [`FsError::IsDir`] for a directory, [`FsError::NotFound`] if absent.
    pub fn file(&mut self, ino: Ino) -> Result<&mut T, FsError> {
        match self.nodes.get_mut(&ino) {
            Some((Node::File(f), _)) => Ok(f),
            Some(_) => Err(FsError::IsDir(format!("inode {ino}"))),
            None => Err(not_found(ino)),
        }
    }

    /// The node of `ino` and its modification time.
    pub fn node(&self, ino: Ino) -> Result<(&Node<T>, Nanos), FsError> {
        self.nodes
            .get(&ino)
            .map(|(n, t)| (n, *t))
            .ok_or_else(|| not_found(ino))
    }

    /// A new node named `name` in `dir`, modified at `now`; returns its inode number.
    pub fn make(
        &mut self,
        dir: Ino,
        name: &str,
        node: Node<T>,
        now: Nanos,
    ) -> Result<Ino, FsError> {
        check_name(name)?;
        let ino = self.next;
        let d = self.dir(dir)?;
        if d.contains_key(name) {
            return Err(FsError::Exists(name.into()));
        }
        d.insert(name.into(), ino);
        self.next += 1;
        self.nodes.insert(ino, (node, now));
        Ok(ino)
    }

    /// The inode `name` in `dir`, or a not-found error naming it.
    pub fn entry(&mut self, dir: Ino, name: &str) -> Result<Ino, FsError> {
        self.dir(dir)?
            .get(name)
            .copied()
            .ok_or_else(|| FsError::NotFound(name.into()))
    }

    /// The inode `name` in `dir` names, if any.
    pub fn lookup(&mut self, dir: Ino, name: &str) -> Result<Option<Ino>, FsError> {
        Ok(self.dir(dir)?.get(name).copied())
    }

    /// Removes the file `name` from `dir`; returns its inode number and contents.
    pub fn unlink(&mut self, dir: Ino, name: &str) -> Result<(Ino, T), FsError> {
        let ino = self.entry(dir, name)?;
        self.file(ino)?;
        self.dir(dir)?.remove(name);
        match self.nodes.remove(&ino) {
            Some((Node::File(f), _)) => Ok((ino, f)),
            _ => unreachable!("checked to be a file above"),
        }
    }

    /// Removes the empty directory `name` from `dir`.
    pub fn rmdir(&mut self, dir: Ino, name: &str) -> Result<Ino, FsError> {
        let ino = self.entry(dir, name)?;
        if !self.dir(ino)?.is_empty() {
            return Err(FsError::NotEmpty(name.into()));
        }
        self.dir(dir)?.remove(name);
        self.nodes.remove(&ino);
        Ok(ino)
    }

    /// The entries of `dir`, sorted by name.
    pub fn readdir(&mut self, dir: Ino) -> Result<Vec<(String, Ino)>, FsError> {
        Ok(self
            .dir(dir)?
            .iter()
            .map(|(n, i)| (n.clone(), *i))
            .collect())
    }

    /// Sets the modification time of `ino` (if it exists).
    pub fn touch(&mut self, ino: Ino, now: Nanos) {
        if let Some(n) = self.nodes.get_mut(&ino) {
            n.1 = now;
        }
    }

    /// Inodes, the root included.
    pub fn len(&self) -> usize {
        self.nodes.len()
    }

    /// Whether there are no inodes (never: the root always exists).
    pub fn is_empty(&self) -> bool {
        self.nodes.is_empty()
    }

    /// Every file's inode number and contents.
    pub fn files(&self) -> impl Iterator<Item = (Ino, &T)> {
        self.nodes.iter().filter_map(|(i, (n, _))| match n {
            Node::File(f) => Some((*i, f)),
            Node::Dir(_) => None,
        })
    }
}

impl<T> Node<T> {
    /// File or directory.
    pub fn kind(&self) -> FileKind {
        match self {
            Node::File(_) => FileKind::File,
            Node::Dir(_) => FileKind::Dir,
        }
    }
}
