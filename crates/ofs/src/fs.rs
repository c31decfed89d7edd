//! OFS itself: the file operations turned into object operations on the store.

use flash::{Flash, Nanos};
use osd::{Attr, AttrValue, FlushScope, ObjectStore, Oid, Osd, OsdError};
use rustc_hash::FxHashMap;
use vfs::oracle::check_name;
use vfs::{FileData, FileKind, FileStat, FileSystem, FsCounters, FsError, Ino, ReadInto, ROOT};

use crate::config::OfsConfig;
use crate::dir::{bucket_count, bucket_of, logical_entry_bytes, name_hash, split_source};
use crate::dir::{Bucket, Entry, MAX_BUCKETS};
use crate::layout::*;

/// Counters of OFS's own work, for reports (the store and the device count the rest).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct OfsCounters {
    /// Name lookups in a directory (lookup, and the existence checks of create and remove).
    pub dir_lookups: u64,
    pub dir_buckets_read: u64,
    pub dir_buckets_written: u64,
    /// Buckets added to a directory (each split one bucket into two).
    pub dir_splits: u64,
    /// Directory entry objects read and written (`dirent_objects`).
    pub dirent_objects_read: u64,
    pub dirent_objects_written: u64,
    /// Inode records read (kind and link) and written, in an attribute or an inode object.
    pub inode_reads: u64,
    pub inode_writes: u64,
    /// SET_ATTR commands OFS issued (inode records, directory sizes, the superblock).
    pub attr_updates: u64,
    pub objects_created: u64,
    pub objects_removed: u64,
    /// FLUSH commands OFS issued (fsync, sync, directory splits, mount and unmount).
    pub flushes: u64,
    /// Mounts that found the file system not cleanly unmounted and repaired it.
    pub repairs: u64,
    /// Findings those repairs fixed (entries dropped or moved, orphans removed, sizes reset).
    pub repair_fixes: u64,
}

/// The object file system on an object store.
pub struct Ofs<F: Flash> {
    pub(crate) store: ObjectStore<F>,
    /// The layout in effect (from the superblock) and, while mounted, `clean == false`.
    pub(crate) sb: Superblock,
    pub(crate) block: u64,
    pub(crate) next_ino: Ino,
    /// The kind of each inode seen since mount (the in-memory inode table of a VFS): spares an
    /// inode read per file operation.
    pub(crate) kinds: FxHashMap<Ino, FileKind>,
    pub(crate) counters: OfsCounters,
    name: String,
    fps: Vec<u64>,
}

pub(crate) fn osd_err(e: OsdError) -> FsError {
    match e {
        OsdError::NotFound(s) => FsError::NotFound(s),
        OsdError::AlreadyExists(s) => FsError::Exists(s),
        OsdError::NoSpace { .. } => FsError::NoSpace(e.to_string()),
        OsdError::InvalidArgument(s) => FsError::Invalid(s),
        OsdError::ReadOnly(_) => FsError::Invalid(e.to_string()),
        OsdError::Corrupted { .. } | OsdError::Uncorrectable { .. } => {
            FsError::Corrupted(e.to_string())
        }
        OsdError::Device(_)
        | OsdError::Poisoned(_)
        | OsdError::Internal(_)
        | OsdError::Remote(_) => FsError::Device(e.to_string()),
    }
}

impl<F: Flash> Ofs<F> {
    fn new(store: ObjectStore<F>, sb: Superblock) -> Self {
        let name = match store.config().placement {
            osd::Placement::Ossd => "OFS".to_string(),
            osd::Placement::One => "OFS-ONE".to_string(),
            p => format!("OFS-{p}"),
        };
        Ofs {
            store,
            block: sb.dir_block_bytes as u64,
            next_ino: sb.next_ino,
            sb,
            kinds: FxHashMap::default(),
            counters: OfsCounters::default(),
            name,
            fps: Vec::new(),
        }
    }

    /// Makes a new file system on a store: its partition, the root directory (inode
    /// [`vfs::ROOT`]) and the superblock, all flushed.
    pub fn format(mut store: ObjectStore<F>, config: OfsConfig) -> Result<Self, FsError> {
        let block = config.resolve_dir_block(store.unit_bytes() as u32)?;
        store
            .create_partition(Some(PARTITION))
            .map_err(|e| match e {
                OsdError::AlreadyExists(_) => {
                    FsError::Exists("the OFS partition (the store is formatted already)".into())
                }
                e => osd_err(e),
            })?;
        let sb = Superblock {
            inode_objects: config.inode_objects,
            embed_inodes: config.embed_inodes,
            dirent_objects: config.dirent_objects,
            dir_block_bytes: block,
            clean: false,
            next_ino: ROOT + 1,
        };
        let mut fs = Ofs::new(store, sb);
        fs.make_inode(ROOT, ROOT, FileKind::Dir)?;
        fs.kinds.insert(ROOT, FileKind::Dir);
        fs.write_super(false)?;
        fs.flush(FlushScope::Device)?;
        Ok(fs)
    }

    /// Mounts the file system a store holds. After an unclean end (a crash, or a store closed
    /// without [`Ofs::unmount`]) the tree is repaired first: entries whose objects are missing
    /// are dropped, objects no entry reaches are removed, directory sizes recomputed.
    pub fn mount(store: ObjectStore<F>) -> Result<Self, FsError> {
        Self::mount_or_return(store).map_err(|(e, _)| e)
    }

    /// [`Ofs::mount`], handing the store back when it fails (a power cut during repair, in
    /// tests and torture runs, is retried on the same device).
    pub fn mount_or_return(
        mut store: ObjectStore<F>,
    ) -> Result<Self, (FsError, Box<ObjectStore<F>>)> {
        let sb = match store.get_attr(data_oid(ROOT), ATTR_SUPER) {
            Ok(AttrValue::Bytes(b)) => Superblock::decode(&b),
            Ok(_) | Err(OsdError::NotFound(_)) => Err(FsError::Invalid(
                "the store holds no OFS (no root directory with a superblock)".into(),
            )),
            Err(e) => Err(osd_err(e)),
        };
        let sb = match sb {
            Ok(sb) => sb,
            Err(e) => return Err((e, Box::new(store))),
        };
        let mut fs = Ofs::new(store, sb);
        match fs.start(sb.clean) {
            Ok(()) => Ok(fs),
            Err(e) => Err((e, Box::new(fs.store))),
        }
    }

    /// Repairs after an unclean end, then marks the file system in use, durably, before
    /// anything else can reach the flash: a crash from here on must find it not clean.
    fn start(&mut self, clean: bool) -> Result<(), FsError> {
        if !clean {
            self.next_ino = self.repair()?;
            self.counters.repairs += 1;
        }
        self.write_super(false)?;
        self.flush(FlushScope::Device)
    }

    /// Marks the file system clean (keeping the inode allocator) and hands the store back,
    /// flushed; the caller closes it.
    pub fn unmount(mut self) -> Result<ObjectStore<F>, FsError> {
        self.write_super(true)?;
        self.flush(FlushScope::Device)?;
        Ok(self.store)
    }

    /// Hands the store back as it is, not marked clean (what a crash leaves at this layer).
    pub fn abandon(self) -> ObjectStore<F> {
        self.store
    }

    pub fn store(&self) -> &ObjectStore<F> {
        &self.store
    }

    /// The store, for tests and tools (writing to OFS's objects behind its back is the caller's
    /// responsibility).
    pub fn store_mut(&mut self) -> &mut ObjectStore<F> {
        &mut self.store
    }

    /// The layout in effect, as formatted.
    pub fn config(&self) -> OfsConfig {
        OfsConfig {
            inode_objects: self.sb.inode_objects,
            embed_inodes: self.sb.embed_inodes,
            dirent_objects: self.sb.dirent_objects,
            dir_block_bytes: self.sb.dir_block_bytes,
        }
    }

    pub fn ofs_counters(&self) -> OfsCounters {
        self.counters
    }

    /// The next inode number to hand out.
    pub fn next_ino(&self) -> Ino {
        self.next_ino
    }

    // ------------------------------------------------------------------ object store commands

    pub(crate) fn write_super(&mut self, clean: bool) -> Result<(), FsError> {
        self.sb.clean = clean;
        self.sb.next_ino = self.next_ino;
        let b = self.sb.encode();
        self.set_attr(data_oid(ROOT), ATTR_SUPER, b)
    }

    pub(crate) fn flush(&mut self, scope: FlushScope) -> Result<(), FsError> {
        self.counters.flushes += 1;
        self.store.flush(scope).map_err(osd_err)
    }

    pub(crate) fn set_attr(&mut self, oid: Oid, attr: Attr, v: Vec<u8>) -> Result<(), FsError> {
        self.counters.attr_updates += 1;
        self.store
            .set_attr(oid, attr, AttrValue::Bytes(v))
            .map_err(osd_err)
    }

    /// A user attribute's bytes, `None` when not set.
    pub(crate) fn attr(&mut self, oid: Oid, attr: Attr) -> Result<Option<Vec<u8>>, FsError> {
        match self.store.get_attr(oid, attr).map_err(osd_err)? {
            AttrValue::Bytes(b) => Ok(Some(b)),
            _ => Ok(None),
        }
    }

    pub(crate) fn length(&mut self, oid: Oid) -> Result<u64, FsError> {
        match self
            .store
            .get_attr(oid, Attr::LogicalLength)
            .map_err(osd_err)?
        {
            AttrValue::U64(l) => Ok(l),
            v => Err(FsError::Device(format!(
                "logical length of {oid} reads {v:?}"
            ))),
        }
    }

    fn create_object(&mut self, oid: Oid) -> Result<(), FsError> {
        self.counters.objects_created += 1;
        self.store
            .create(oid.partition, Some(oid.object))
            .map(|_| ())
            .map_err(osd_err)
    }

    pub(crate) fn remove_object(&mut self, oid: Oid) -> Result<(), FsError> {
        self.counters.objects_removed += 1;
        match self.store.remove(oid) {
            Ok(()) | Err(OsdError::NotFound(_)) => Ok(()),
            Err(e) => Err(osd_err(e)),
        }
    }

    /// Reads exactly `len` bytes at `offset`; a short read is corruption of `what`.
    fn read_exact(
        &mut self,
        oid: Oid,
        offset: u64,
        len: u64,
        what: &str,
    ) -> Result<Vec<u8>, FsError> {
        let mut buf = vec![0u8; len as usize];
        let n = self.store.read(oid, offset, &mut buf).map_err(osd_err)?;
        if n != buf.len() {
            return Err(FsError::Corrupted(format!(
                "{what}: {n} bytes where {len} were expected"
            )));
        }
        Ok(buf)
    }

    // ------------------------------------------------------------------------------ inodes

    /// Creates inode `ino`'s objects: its data object and its inode record (an attribute of the
    /// data object, or an inode object of its own).
    fn make_inode(&mut self, ino: Ino, parent: Ino, kind: FileKind) -> Result<(), FsError> {
        self.create_object(data_oid(ino))?;
        let rec = InodeRecord { kind, parent }.encode();
        self.counters.inode_writes += 1;
        if !self.sb.inode_objects {
            return self.set_attr(data_oid(ino), ATTR_INODE, rec);
        }
        let oid = inode_oid(ino);
        self.create_object(oid)?;
        if self.sb.embed_inodes {
            // The hint goes first: the store embeds data written while it is set.
            self.counters.attr_updates += 1;
            self.store
                .set_attr(oid, Attr::InodeEmbedded, AttrValue::Bool(true))
                .map_err(osd_err)?;
        }
        self.store.write(oid, 0, &rec).map_err(osd_err)
    }

    /// Inode `ino`'s record, read from where the layout keeps it.
    pub(crate) fn inode_record(&mut self, ino: Ino) -> Result<InodeRecord, FsError> {
        if !valid_ino(ino) {
            return Err(FsError::NotFound(format!("inode {ino}")));
        }
        self.counters.inode_reads += 1;
        let not_found = |e: FsError| match e {
            FsError::NotFound(_) => FsError::NotFound(format!("inode {ino}")),
            e => e,
        };
        let bytes = if self.sb.inode_objects {
            let oid = inode_oid(ino);
            let len = self.length(oid).map_err(not_found)?;
            if len != INODE_RECORD_BYTES as u64 {
                return Err(FsError::Corrupted(format!(
                    "inode object of inode {ino} is {len} bytes long"
                )));
            }
            self.read_exact(oid, 0, len, &format!("inode object of inode {ino}"))?
        } else {
            self.attr(data_oid(ino), ATTR_INODE)
                .map_err(not_found)?
                .ok_or_else(|| FsError::Corrupted(format!("inode {ino} has no inode record")))?
        };
        InodeRecord::decode(&bytes, ino)
    }

    pub(crate) fn kind_of(&mut self, ino: Ino) -> Result<FileKind, FsError> {
        if let Some(&k) = self.kinds.get(&ino) {
            return Ok(k);
        }
        let k = self.inode_record(ino)?.kind;
        self.kinds.insert(ino, k);
        Ok(k)
    }

    /// The data object of file `ino`.
    pub(crate) fn file(&mut self, ino: Ino) -> Result<Oid, FsError> {
        match self.kind_of(ino)? {
            FileKind::File => Ok(data_oid(ino)),
            FileKind::Dir => Err(FsError::IsDir(format!("inode {ino}"))),
        }
    }

    /// Checks that `ino` is a directory.
    fn dir(&mut self, ino: Ino) -> Result<(), FsError> {
        match self.kind_of(ino)? {
            FileKind::Dir => Ok(()),
            FileKind::File => Err(FsError::NotDir(format!("inode {ino}"))),
        }
    }

    /// Removes every object of inode `ino`.
    pub(crate) fn remove_inode(&mut self, ino: Ino) -> Result<(), FsError> {
        self.kinds.remove(&ino);
        self.remove_object(data_oid(ino))?;
        if self.sb.inode_objects {
            self.remove_object(inode_oid(ino))?;
        }
        if self.sb.dirent_objects {
            self.remove_object(dirent_oid(ino))?;
        }
        Ok(())
    }

    fn alloc_ino(&mut self) -> Result<Ino, FsError> {
        if self.next_ino >= INO_LIMIT {
            return Err(FsError::NoSpace("inode numbers exhausted".into()));
        }
        self.next_ino += 1;
        Ok(self.next_ino - 1)
    }

    // -------------------------------------------------------------------------- directories

    /// A directory's (bucket count, object length).
    pub(crate) fn dir_shape(&mut self, dir: Ino) -> Result<(u64, u64), FsError> {
        let len = self.length(data_oid(dir))?;
        Ok((bucket_count(len, self.block, dir)?, len))
    }

    pub(crate) fn read_bucket(
        &mut self,
        dir: Ino,
        b: u64,
        (n, len): (u64, u64),
    ) -> Result<Bucket, FsError> {
        let (offset, size) = if n == 1 {
            (0, len)
        } else {
            (b * self.block, self.block)
        };
        let what = format!("directory {dir} bucket {b}");
        let bytes = self.read_exact(data_oid(dir), offset, size, &what)?;
        self.counters.dir_buckets_read += 1;
        Bucket::decode(&bytes, !self.sb.dirent_objects, &|| what.clone())
    }

    /// Writes bucket `b` of a directory of `n` buckets and length `len`: the whole short object
    /// when there is one bucket, else the bucket's whole block.
    pub(crate) fn write_bucket(
        &mut self,
        dir: Ino,
        b: u64,
        (n, len): (u64, u64),
        bucket: &Bucket,
    ) -> Result<(), FsError> {
        let mut bytes = bucket.encode();
        debug_assert!(bytes.len() as u64 <= self.block);
        let offset = if n == 1 {
            // Cover the whole object: a write ending short of its end would make the store
            // read the rest back to merge it.
            bytes.resize(bytes.len().max(len as usize), 0);
            0
        } else {
            bytes.resize(self.block as usize, 0);
            b * self.block
        };
        self.counters.dir_buckets_written += 1;
        self.store
            .write(data_oid(dir), offset, &bytes)
            .map_err(osd_err)
    }

    /// Inode `ino`'s directory entry object.
    pub(crate) fn dirent(&mut self, ino: Ino) -> Result<DirentRecord, FsError> {
        let oid = dirent_oid(ino);
        let len = self.length(oid)?;
        if len > 512 {
            return Err(FsError::Corrupted(format!(
                "directory entry object of inode {ino} is {len} bytes long"
            )));
        }
        self.counters.dirent_objects_read += 1;
        let b = self.read_exact(oid, 0, len, &format!("entry object of inode {ino}"))?;
        DirentRecord::decode(&b, ino)
    }

    /// Whether bucket entry `e` of `dir` is the one named `name`.
    fn entry_is(&mut self, dir: Ino, e: &Entry, name: &str) -> Result<bool, FsError> {
        if e.hash != name_hash(name) {
            return Ok(false);
        }
        if !self.sb.dirent_objects {
            return Ok(e.name == name);
        }
        let d = self.dirent(e.ino)?;
        Ok(d.parent == dir && d.name == name)
    }

    /// Looks `name` up in `dir`: the bucket its hash addresses (number and contents) and the
    /// entry's position in it, if there. Reads one bucket (and, with `dirent_objects`, the
    /// entry objects whose hash matches).
    fn find(&mut self, dir: Ino, name: &str) -> Result<(u64, Bucket, Option<usize>), FsError> {
        self.counters.dir_lookups += 1;
        let shape = self.dir_shape(dir)?;
        let b = bucket_of(name_hash(name), shape.0);
        let bucket = self.read_bucket(dir, b, shape)?;
        for i in 0..bucket.entries.len() {
            if self.entry_is(dir, &bucket.entries[i], name)? {
                return Ok((b, bucket, Some(i)));
            }
        }
        Ok((b, bucket, None))
    }

    pub(crate) fn dir_size(&mut self, dir: Ino) -> Result<DirSize, FsError> {
        match self.attr(data_oid(dir), ATTR_DIR_SIZE)? {
            Some(b) => DirSize::decode(&b, dir),
            None => Ok(DirSize::default()),
        }
    }

    pub(crate) fn set_dir_size(&mut self, dir: Ino, s: DirSize) -> Result<(), FsError> {
        self.set_attr(data_oid(dir), ATTR_DIR_SIZE, s.encode())
    }

    /// Adds the entry `name -> ino` to `dir` (known not to hold `name`), splitting buckets until
    /// its bucket has room. `looked_up` is the bucket the lookup that found `name` absent read,
    /// reused rather than read again.
    fn insert_entry(
        &mut self,
        dir: Ino,
        name: &str,
        (ino, kind): (Ino, FileKind),
        mut looked_up: Option<(u64, Bucket)>,
    ) -> Result<(), FsError> {
        let hash = name_hash(name);
        if self.sb.dirent_objects {
            // The entry object first: a bucket entry must never point at a missing name.
            let oid = dirent_oid(ino);
            self.create_object(oid)?;
            let rec = DirentRecord {
                parent: dir,
                kind,
                name: name.into(),
            };
            self.counters.dirent_objects_written += 1;
            self.store.write(oid, 0, &rec.encode()).map_err(osd_err)?;
        }
        let entry = Entry {
            hash,
            ino,
            kind,
            name: if self.sb.dirent_objects {
                String::new()
            } else {
                name.into()
            },
        };
        loop {
            let shape = self.dir_shape(dir)?;
            let b = bucket_of(hash, shape.0);
            let mut bucket = match looked_up.take() {
                Some((lb, bucket)) if lb == b => bucket,
                _ => self.read_bucket(dir, b, shape)?,
            };
            if bucket.fits(entry.encoded_len(), self.block as usize) {
                bucket.entries.push(entry);
                self.write_bucket(dir, b, shape, &bucket)?;
                break;
            }
            if bucket.entries.iter().all(|e| e.hash == hash) {
                // No split can separate names of one hash.
                return Err(FsError::NoSpace(format!(
                    "directory {dir}: too many names with hash {hash:#x}"
                )));
            }
            self.split(dir, shape)?;
        }
        let mut s = self.dir_size(dir)?;
        s.entries += 1;
        s.bytes += logical_entry_bytes(name);
        self.set_dir_size(dir, s)
    }

    /// Grows a directory by one bucket (linear hashing), moving the split bucket's entries that
    /// now belong to the new one.
    fn split(&mut self, dir: Ino, (n, len): (u64, u64)) -> Result<(), FsError> {
        if n >= MAX_BUCKETS {
            return Err(FsError::NoSpace(format!(
                "directory {dir} has {MAX_BUCKETS} buckets"
            )));
        }
        self.counters.dir_splits += 1;
        let s = split_source(n);
        let source = self.read_bucket(dir, s, (n, len))?;
        let (moved, stay): (Vec<Entry>, Vec<Entry>) = source
            .entries
            .into_iter()
            .partition(|e| bucket_of(e.hash, n + 1) == n);
        let grown = (n + 1, (n + 1) * self.block);
        let any_moved = !moved.is_empty();
        self.write_bucket(dir, n, grown, &Bucket { entries: moved })?;
        if any_moved {
            // The moved entries are durable in their new bucket before the old one forgets
            // them, so a crash in between leaves duplicates (mount drops the misplaced copy),
            // never a lost entry.
            self.flush(FlushScope::Object(data_oid(dir)))?;
            self.write_bucket(dir, s, grown, &Bucket { entries: stay })?;
        }
        Ok(())
    }

    /// Every entry of `dir` with the bucket it is in, names resolved.
    pub(crate) fn all_entries(&mut self, dir: Ino) -> Result<Vec<(u64, Entry)>, FsError> {
        let shape = self.dir_shape(dir)?;
        let mut out = Vec::new();
        for b in 0..shape.0 {
            for mut e in self.read_bucket(dir, b, shape)?.entries {
                if self.sb.dirent_objects {
                    e.name = self.dirent(e.ino)?.name;
                }
                out.push((b, e));
            }
        }
        Ok(out)
    }

    fn make(&mut self, dir: Ino, name: &str, kind: FileKind) -> Result<Ino, FsError> {
        check_name(name)?;
        self.dir(dir)?;
        let (b, bucket, found) = self.find(dir, name)?;
        if found.is_some() {
            return Err(FsError::Exists(name.into()));
        }
        let ino = self.alloc_ino()?;
        // The inode before its entry: a crash in between leaves an orphan object (removed at
        // mount), never an entry pointing at nothing.
        self.make_inode(ino, dir, kind)?;
        self.kinds.insert(ino, kind);
        self.insert_entry(dir, name, (ino, kind), Some((b, bucket)))?;
        Ok(ino)
    }

    /// Removes entry `name` of `dir`, which must be of `kind`, and the inode it names.
    fn remove(&mut self, dir: Ino, name: &str, kind: FileKind) -> Result<(), FsError> {
        self.dir(dir)?;
        let (b, mut bucket, i) = match self.find(dir, name)? {
            (b, bucket, Some(i)) => (b, bucket, i),
            _ => return Err(FsError::NotFound(name.into())),
        };
        let ino = bucket.entries[i].ino;
        match (kind, self.kind_of(ino)?) {
            (FileKind::File, FileKind::Dir) => return Err(FsError::IsDir(name.into())),
            (FileKind::Dir, FileKind::File) => return Err(FsError::NotDir(name.into())),
            (FileKind::Dir, FileKind::Dir) if self.dir_size(ino)?.entries > 0 => {
                return Err(FsError::NotEmpty(name.into()))
            }
            _ => {}
        }
        bucket.entries.remove(i);
        let shape = self.dir_shape(dir)?;
        self.write_bucket(dir, b, shape, &bucket)?;
        let mut s = self.dir_size(dir)?;
        s.entries = s.entries.saturating_sub(1);
        s.bytes = s.bytes.saturating_sub(logical_entry_bytes(name));
        self.set_dir_size(dir, s)?;
        self.remove_inode(ino)
    }
}

impl<F: Flash> FileSystem for Ofs<F> {
    fn name(&self) -> &str {
        &self.name
    }

    fn lookup(&mut self, dir: Ino, name: &str) -> Result<Option<Ino>, FsError> {
        self.dir(dir)?;
        if check_name(name).is_err() {
            return Ok(None);
        }
        let (_, bucket, found) = self.find(dir, name)?;
        Ok(found.map(|i| bucket.entries[i].ino))
    }

    fn create(&mut self, dir: Ino, name: &str) -> Result<Ino, FsError> {
        self.make(dir, name, FileKind::File)
    }

    fn mkdir(&mut self, dir: Ino, name: &str) -> Result<Ino, FsError> {
        self.make(dir, name, FileKind::Dir)
    }

    fn unlink(&mut self, dir: Ino, name: &str) -> Result<(), FsError> {
        self.remove(dir, name, FileKind::File)
    }

    fn rmdir(&mut self, dir: Ino, name: &str) -> Result<(), FsError> {
        self.remove(dir, name, FileKind::Dir)
    }

    fn readdir(&mut self, dir: Ino) -> Result<Vec<(String, Ino)>, FsError> {
        self.dir(dir)?;
        let mut v: Vec<(String, Ino)> = self
            .all_entries(dir)?
            .into_iter()
            .map(|(_, e)| (e.name, e.ino))
            .collect();
        v.sort();
        Ok(v)
    }

    fn write(
        &mut self,
        ino: Ino,
        offset: u64,
        len: u64,
        data: FileData<'_>,
    ) -> Result<(), FsError> {
        let oid = self.file(ino)?;
        data.check_len(len)?;
        match data {
            _ if len == 0 => {
                // Nothing to write; like the oracle, a write past the end still extends.
                if offset > self.length(oid)? {
                    self.store.truncate(oid, offset).map_err(osd_err)?;
                }
                Ok(())
            }
            FileData::Bytes(b) => self.store.write(oid, offset, b).map_err(osd_err),
            FileData::Token(t) => self.store.write_token(oid, offset, len, t).map_err(osd_err),
        }
    }

    fn read(&mut self, ino: Ino, offset: u64, into: ReadInto<'_>) -> Result<u64, FsError> {
        let oid = self.file(ino)?;
        match into {
            ReadInto::Bytes(buf) => self
                .store
                .read(oid, offset, buf)
                .map(|n| n as u64)
                .map_err(osd_err),
            ReadInto::Discard(len) => {
                let n = len.min(self.length(oid)?.saturating_sub(offset));
                if n > 0 {
                    self.store
                        .read_fingerprints(oid, offset, n, &mut self.fps)
                        .map_err(osd_err)?;
                }
                Ok(n)
            }
        }
    }

    fn truncate(&mut self, ino: Ino, size: u64) -> Result<(), FsError> {
        let oid = self.file(ino)?;
        self.store.truncate(oid, size).map_err(osd_err)
    }

    fn stat(&mut self, ino: Ino) -> Result<FileStat, FsError> {
        let kind = self.kind_of(ino)?;
        let oid = data_oid(ino);
        let size = match kind {
            FileKind::File => self.length(oid)?,
            FileKind::Dir => self.dir_size(ino)?.bytes,
        };
        let modified_ns = match self
            .store
            .get_attr(oid, Attr::ModifiedTime)
            .map_err(osd_err)?
        {
            AttrValue::U64(t) => t,
            v => return Err(FsError::Device(format!("modified time reads {v:?}"))),
        };
        Ok(FileStat {
            ino,
            kind,
            size,
            modified_ns,
        })
    }

    fn fsync(&mut self, ino: Ino, _data_only: bool) -> Result<(), FsError> {
        // fdatasync and fsync are one FLUSH of the object: its attributes (size, times) live in
        // its onode, which the store writes with the data; the inode record never changes
        // after create. (The store flushes its whole buffer for any scope.)
        self.kind_of(ino)?;
        self.flush(FlushScope::Object(data_oid(ino)))
    }

    fn sync(&mut self) -> Result<(), FsError> {
        self.flush(FlushScope::Device)
    }

    fn set_time(&mut self, at: Nanos) {
        self.store.set_time(at);
    }

    fn now(&self) -> Nanos {
        self.store.now()
    }

    fn background(&mut self, from: Nanos, until: Nanos) -> Result<Nanos, FsError> {
        self.store.background(from, until).map_err(osd_err)
    }

    fn counters(&self) -> FsCounters {
        let c = self.counters;
        vec![
            ("dir_lookups", c.dir_lookups),
            ("dir_buckets_read", c.dir_buckets_read),
            ("dir_buckets_written", c.dir_buckets_written),
            ("dir_splits", c.dir_splits),
            ("dirent_objects_read", c.dirent_objects_read),
            ("dirent_objects_written", c.dirent_objects_written),
            ("inode_reads", c.inode_reads),
            ("inode_writes", c.inode_writes),
            ("attr_updates", c.attr_updates),
            ("objects_created", c.objects_created),
            ("objects_removed", c.objects_removed),
            ("flushes", c.flushes),
            ("repairs", c.repairs),
            ("repair_fixes", c.repair_fixes),
        ]
    }

    fn check(&mut self) -> Result<Vec<String>, FsError> {
        let mut problems: Vec<String> = self.walk(false)?.problems();
        // The structure only: the lab checks every run, and a media scan would add reads.
        let report = self.store.fsck_structure().map_err(osd_err)?;
        problems.extend(report.problems.into_iter().map(|p| format!("store: {p}")));
        Ok(problems)
    }
}
