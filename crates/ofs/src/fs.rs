//! OFS itself: the file operations turned into object operations on the store.

use flash::Nanos;
use osd::{Attr, AttrValue, FlushScope, Oid, OsdError};
use rustc_hash::{FxHashMap, FxHashSet};
use vfs::oracle::check_name;
use vfs::{
    le, FileAttr, FileData, FileKind, FileStat, FileSystem, FsCounters, FsError, Ino, Owner,
    ReadInto, SetAttr, SpaceInfo, Special, XattrMode, ROOT, SYMLINK_MAX, XATTR_NAME_MAX,
};

use crate::config::OfsConfig;
use crate::dir::{bucket_count, bucket_of, logical_entry_bytes, name_hash, split_source};
use crate::dir::{Bucket, Entry, MAX_BUCKETS};
use crate::layout::*;
use crate::store::Store;

/// Counters of OFS's own work, for reports (the store and the device count the rest).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct OfsCounters {
    /// Name lookups in a directory (lookup, and the existence checks of create and remove).
    pub dir_lookups: u64,
    /// Directory buckets read.
    pub dir_buckets_read: u64,
    /// Directory buckets written.
    pub dir_buckets_written: u64,
    /// Buckets added to a directory (each split one bucket into two).
    pub dir_splits: u64,
    /// Directory entry objects read and written (`dirent_objects`).
    pub dirent_objects_read: u64,
    /// Directory entry objects written (`dirent_objects`).
    pub dirent_objects_written: u64,
    /// Inode records read (kind and link) and written, in an attribute or an inode object.
    pub inode_reads: u64,
    /// Inode records written.
    pub inode_writes: u64,
    /// SET_ATTR commands OFS issued (inode records, directory sizes, the superblock).
    pub attr_updates: u64,
    /// Objects OFS created (data, inode and directory entry objects).
    pub objects_created: u64,
    /// Objects OFS removed.
    pub objects_removed: u64,
    /// FLUSH commands OFS issued (fsync, sync, directory splits, mount and unmount).
    pub flushes: u64,
    /// Mounts that found the file system not cleanly unmounted and repaired it.
    pub repairs: u64,
    /// Findings those repairs fixed (entries dropped or moved, orphans removed, sizes reset).
    pub repair_fixes: u64,
}

/// The object file system on an object store.
pub struct Ofs<S: Store> {
    pub(crate) store: S,
    /// The layout in effect (from the superblock) and, while mounted, `clean == false`.
    pub(crate) sb: Superblock,
    pub(crate) block: u64,
    pub(crate) next_ino: Ino,
    /// The kind of each inode seen since mount (the in-memory inode table of a VFS): spares an
    /// inode read per file operation.
    pub(crate) kinds: FxHashMap<Ino, FileKind>,
    /// The link count of every inode in `kinds` that has more than one name (absent: one), so
    /// that `unlink` needs no inode read to know whether to remove the inode.
    pub(crate) links: FxHashMap<Ino, u32>,
    /// Opens not yet released, per inode (a mount's open files).
    pub(crate) open: FxHashMap<Ino, u32>,
    /// Files and links whose last name was removed while they were open: their objects stay
    /// until the last release (or unmount). A crash leaves them as orphans, which the
    /// repair at mount removes.
    pub(crate) unlinked: FxHashSet<Ino>,
    /// Subdirectory counts of the directories `getattr` was asked about (a directory's link
    /// count is 2 plus its subdirectories), counted from the buckets once and then kept up
    /// to date by mkdir, rmdir and rename.
    pub(crate) subdirs: FxHashMap<Ino, u32>,
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
        // OFS encrypts nothing; an object encrypted behind its back is unusable to it.
        OsdError::KeyRequired(_) | OsdError::WrongKey(_) | OsdError::Transaction(_) => {
            FsError::Unsupported(e.to_string())
        }
        OsdError::Corrupted {
            unit: Some(unit), ..
        }
        | OsdError::Uncorrectable {
            unit: Some(unit), ..
        } => FsError::Damaged {
            what: e.to_string(),
            unit,
        },
        OsdError::Corrupted { .. } | OsdError::Uncorrectable { .. } => {
            FsError::Corrupted(e.to_string())
        }
        OsdError::Device(_)
        | OsdError::Poisoned(_)
        | OsdError::Internal(_)
        | OsdError::Remote(_) => FsError::Device(e.to_string()),
    }
}

/// The file system's name on a store with this placement policy (the papers' names: OFS with
/// semantic placement, OFS-ONE with one update block).
fn fs_name(placement: &str) -> String {
    match placement {
        "semantic" => "OFS".to_string(),
        "one" => "OFS-ONE".to_string(),
        p => format!("OFS-{p}"),
    }
}

impl<S: Store> Ofs<S> {
    fn new(store: S, sb: Superblock, name: String) -> Self {
        Ofs {
            store,
            block: sb.dir_block_bytes as u64,
            next_ino: sb.next_ino,
            sb,
            kinds: FxHashMap::default(),
            links: FxHashMap::default(),
            open: FxHashMap::default(),
            unlinked: FxHashSet::default(),
            subdirs: FxHashMap::default(),
            counters: OfsCounters::default(),
            name,
            fps: Vec::new(),
        }
    }

    /// Makes a new file system on a store: its partition, the root directory (inode
    /// [`vfs::ROOT`]) and the superblock, all flushed.
    pub fn format(mut store: S, config: OfsConfig) -> Result<Self, FsError> {
        let device = store.describe().map_err(osd_err)?;
        let block = config.resolve_dir_block(device.unit_bytes)?;
        match store.create_partition(Some(PARTITION)) {
            Ok(_) => {}
            // An empty partition holds no file system: `ossd format` makes the default
            // partition, which is OFS's, and a served store may have it without OFS.
            Err(OsdError::AlreadyExists(_))
                if store.list(PARTITION, 0, 1).map_err(osd_err)?.0.is_empty() => {}
            Err(OsdError::AlreadyExists(_)) => {
                return Err(FsError::Exists(
                    "the OFS partition, with objects in it (the store is formatted already)".into(),
                ))
            }
            Err(e) => return Err(osd_err(e)),
        }
        let sb = Superblock {
            inode_objects: config.inode_objects,
            embed_inodes: config.embed_inodes,
            dirent_objects: config.dirent_objects,
            dir_block_bytes: block,
            clean: false,
            next_ino: ROOT + 1,
        };
        let mut fs = Ofs::new(store, sb, fs_name(&device.placement));
        fs.make_inode(
            ROOT,
            InodeRecord::new(FileKind::Dir, ROOT, Owner::default_for(FileKind::Dir)),
        )?;
        fs.kinds.insert(ROOT, FileKind::Dir);
        fs.write_super(false)?;
        fs.flush(FlushScope::Device)?;
        Ok(fs)
    }

    /// Mounts the file system a store holds. After an unclean end (a crash, or a store closed
    /// without [`Ofs::unmount`]) the tree is repaired first: entries whose objects are missing
    /// are dropped, objects no entry reaches are removed, directory sizes recomputed.
    pub fn mount(store: S) -> Result<Self, FsError> {
        Self::mount_or_return(store).map_err(|(e, _)| e)
    }

    /// [`Ofs::mount`], handing the store back when it fails (a power cut during repair, in
    /// tests and torture runs, is retried on the same device).
    pub fn mount_or_return(mut store: S) -> Result<Self, (FsError, Box<S>)> {
        let sb = match store.get_attr(data_oid(ROOT), ATTR_SUPER) {
            Ok(AttrValue::Bytes(b)) => Superblock::decode(&b),
            Ok(_) | Err(OsdError::NotFound(_)) => Err(FsError::Invalid(
                "the store holds no OFS (no root directory with a superblock)".into(),
            )),
            Err(e) => Err(osd_err(e)),
        };
        let sb = sb.and_then(|sb| Ok((sb, store.describe().map_err(osd_err)?.placement)));
        let (sb, placement) = match sb {
            Ok(sb) => sb,
            Err(e) => return Err((e, Box::new(store))),
        };
        let mut fs = Ofs::new(store, sb, fs_name(&placement));
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
    pub fn unmount(self) -> Result<S, FsError> {
        self.unmount_or_return().map_err(|(e, _)| e)
    }

    /// [`Ofs::unmount`], handing the store back when it fails (a power cut during the
    /// unmount, in torture runs: the store is then taken as crashed).
    pub fn unmount_or_return(mut self) -> Result<S, (FsError, Box<S>)> {
        match self.close_files() {
            Ok(()) => Ok(self.store),
            Err(e) => Err((e, Box::new(self.store))),
        }
    }

    fn close_files(&mut self) -> Result<(), FsError> {
        // Files removed while open are closed now.
        let mut held: Vec<Ino> = self.unlinked.drain().collect();
        held.sort_unstable();
        for ino in held {
            self.remove_inode(ino)?;
        }
        self.open.clear();
        // Everything else is durable before the superblock says clean: the store may write
        // an onode (the root's, with the flag) before buffered units of other objects, and a
        // cut in between left a clean flag over an unrepaired tree (`ossd torture --stack ofs
        // --faults all --fill 80`, seed 15049910783010229579: an entry whose file's removal was
        // durable and its own was not, never repaired at mount).
        self.flush(FlushScope::Device)?;
        self.write_super(true)?;
        self.flush(FlushScope::Device)
    }

    /// Hands the store back as it is, not marked clean (what a crash leaves at this layer).
    pub fn abandon(self) -> S {
        self.store
    }

    /// The object store below.
    pub fn store(&self) -> &S {
        &self.store
    }

    /// The store, for tests and tools (writing to OFS's objects behind its back is the caller's
    /// responsibility).
    pub fn store_mut(&mut self) -> &mut S {
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

    /// Counters of OFS's own work since mount.
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

    /// Whether object `oid` exists.
    fn exists_object(&mut self, oid: Oid) -> Result<bool, FsError> {
        match self.store.get_attr(oid, Attr::LogicalLength) {
            Ok(_) => Ok(true),
            Err(OsdError::NotFound(_)) => Ok(false),
            Err(e) => Err(osd_err(e)),
        }
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
    fn make_inode(&mut self, ino: Ino, rec: InodeRecord) -> Result<(), FsError> {
        self.create_object(data_oid(ino))?;
        let rec = rec.encode();
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

    /// Rewrites inode `ino`'s record (permissions, owner, link count or parent changed).
    pub(crate) fn write_record(&mut self, ino: Ino, rec: InodeRecord) -> Result<(), FsError> {
        let bytes = rec.encode();
        self.counters.inode_writes += 1;
        if rec.nlink > 1 {
            self.links.insert(ino, rec.nlink);
        } else {
            self.links.remove(&ino);
        }
        if !self.sb.inode_objects {
            return self.set_attr(data_oid(ino), ATTR_INODE, bytes);
        }
        let oid = inode_oid(ino);
        self.store.write(oid, 0, &bytes).map_err(osd_err)?;
        if self.length(oid)? > bytes.len() as u64 {
            // A version 1 record over a version 2 one.
            self.store
                .truncate(oid, bytes.len() as u64)
                .map_err(osd_err)?;
        }
        // The change time is the data object's: the inode object's write does not move it.
        self.touch_ctime(ino)
    }

    /// Moves inode `ino`'s change time to now, for a change that sets no attribute of its data
    /// object: a SET_ATTR of the object's priority class to the value it has (the store stamps
    /// the change time of every SET_ATTR).
    fn touch_ctime(&mut self, ino: Ino) -> Result<(), FsError> {
        let p = self.object_priority(ino)?;
        self.set_object_priority(ino, p)
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
            // Created, its record not yet written: what a crash between the two leaves (the
            // store orders neither before a flush), so a creation that did not complete.
            if len == 0 {
                return Err(FsError::NotFound(format!(
                    "inode {ino} (its inode object holds no record yet)"
                )));
            }
            if len != INODE_RECORD_V1_BYTES as u64 && len != INODE_RECORD_V2_BYTES as u64 {
                return Err(FsError::Corrupted(format!(
                    "inode object of inode {ino} is {len} bytes long"
                )));
            }
            self.read_exact(oid, 0, len, &format!("inode object of inode {ino}"))?
        } else {
            self.attr(data_oid(ino), ATTR_INODE)
                .map_err(not_found)?
                // As above: the data object made, its record attribute not yet set.
                .ok_or_else(|| FsError::NotFound(format!("inode {ino} (no inode record yet)")))?
        };
        InodeRecord::decode(&bytes, ino)
    }

    pub(crate) fn kind_of(&mut self, ino: Ino) -> Result<FileKind, FsError> {
        if let Some(&k) = self.kinds.get(&ino) {
            return Ok(k);
        }
        let rec = self.inode_record(ino)?;
        self.kinds.insert(ino, rec.kind);
        if rec.nlink > 1 {
            self.links.insert(ino, rec.nlink);
        }
        Ok(rec.kind)
    }

    /// The link count of `ino` (whose kind is known).
    fn nlink(&self, ino: Ino) -> u32 {
        self.links.get(&ino).copied().unwrap_or(1)
    }

    /// The data object of file `ino`.
    pub(crate) fn file(&mut self, ino: Ino) -> Result<Oid, FsError> {
        match self.kind_of(ino)? {
            FileKind::File => Ok(data_oid(ino)),
            FileKind::Dir => Err(FsError::IsDir(format!("inode {ino}"))),
            FileKind::Symlink => Err(FsError::Invalid(format!("inode {ino} is a symbolic link"))),
            FileKind::Special(_) => Err(FsError::Invalid(format!("inode {ino} is a special file"))),
        }
    }

    /// Checks that `ino` is a directory.
    fn dir(&mut self, ino: Ino) -> Result<(), FsError> {
        match self.kind_of(ino)? {
            FileKind::Dir => Ok(()),
            FileKind::File | FileKind::Symlink | FileKind::Special(_) => {
                Err(FsError::NotDir(format!("inode {ino}")))
            }
        }
    }

    /// Removes every object of inode `ino`.
    pub(crate) fn remove_inode(&mut self, ino: Ino) -> Result<(), FsError> {
        self.kinds.remove(&ino);
        self.links.remove(&ino);
        self.subdirs.remove(&ino);
        self.unlinked.remove(&ino);
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
        if len == 0 {
            // Created, its record not yet written (see `inode_record`).
            return Err(FsError::NotFound(format!(
                "entry object of inode {ino} (no record yet)"
            )));
        }
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
        new_inode: bool,
    ) -> Result<(), FsError> {
        let hash = name_hash(name);
        if self.sb.dirent_objects && new_inode {
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

    /// Makes inode `name` in `dir`: a file, a directory, or a symbolic link to `target`.
    fn make(
        &mut self,
        dir: Ino,
        name: &str,
        kind: FileKind,
        owner: Owner,
        target: Option<&[u8]>,
    ) -> Result<Ino, FsError> {
        check_name(name)?;
        self.dir(dir)?;
        let (b, bucket, found) = self.find(dir, name)?;
        if found.is_some() {
            return Err(FsError::Exists(name.into()));
        }
        // The inode (and a link's target) before its entry: a crash in between leaves an
        // orphan object (removed at mount), never an entry pointing at nothing.
        let mut ino = self.alloc_ino()?;
        let mut skipped = 0;
        loop {
            match self.make_inode(ino, InodeRecord::new(kind, dir, owner)) {
                Ok(()) => break,
                // The number's data object exists already (it is created first, so nothing of
                // this creation is made yet): an allocator damage rolled back (a superblock
                // restored from an older copy) handed out a number in use. Skip it (found by
                // `ossd torture --stack ofs`, seed 789569683384016218).
                Err(FsError::Exists(_)) if skipped < 64 && self.exists_object(data_oid(ino))? => {
                    skipped += 1;
                    ino = self.alloc_ino()?;
                }
                Err(e) => return Err(e),
            }
        }
        if let Some(t) = target {
            self.store.write(data_oid(ino), 0, t).map_err(osd_err)?;
        }
        self.kinds.insert(ino, kind);
        self.insert_entry(dir, name, (ino, kind), Some((b, bucket)), true)?;
        if kind == FileKind::Dir {
            self.count_subdir(dir, 1);
        }
        Ok(ino)
    }

    /// Removes entry `name` of `dir`, which must be a directory (`rmdir`) or not (`unlink`),
    /// and the inode it names unless the inode has other names.
    fn remove(&mut self, dir: Ino, name: &str, rmdir: bool) -> Result<(), FsError> {
        self.dir(dir)?;
        let (b, mut bucket, i) = match self.find(dir, name)? {
            (b, bucket, Some(i)) => (b, bucket, i),
            _ => return Err(FsError::NotFound(name.into())),
        };
        let ino = bucket.entries[i].ino;
        let kind = self.kind_of(ino)?;
        match (rmdir, kind) {
            (false, FileKind::Dir) => return Err(FsError::IsDir(name.into())),
            (true, FileKind::File | FileKind::Symlink | FileKind::Special(_)) => {
                return Err(FsError::NotDir(name.into()))
            }
            (true, FileKind::Dir) if self.dir_size(ino)?.entries > 0 => {
                return Err(FsError::NotEmpty(name.into()))
            }
            _ => {}
        }
        bucket.entries.remove(i);
        let shape = self.dir_shape(dir)?;
        self.write_bucket(dir, b, shape, &bucket)?;
        self.shrink_dir_size(dir, name)?;
        if kind == FileKind::Dir {
            self.count_subdir(dir, -1);
        }
        self.drop_link(ino, kind)
    }

    /// A subdirectory came to (`+1`) or left (`-1`) `dir`: its kept count follows.
    fn count_subdir(&mut self, dir: Ino, delta: i32) {
        if let Some(n) = self.subdirs.get_mut(&dir) {
            *n = n.saturating_add_signed(delta);
        }
    }

    /// The subdirectories of `dir`: counted from its buckets (their entries carry the kind)
    /// the first time, then kept.
    fn subdir_count(&mut self, dir: Ino) -> Result<u32, FsError> {
        if let Some(&n) = self.subdirs.get(&dir) {
            return Ok(n);
        }
        let shape = self.dir_shape(dir)?;
        let mut n = 0u32;
        for b in 0..shape.0 {
            let bucket = self.read_bucket(dir, b, shape)?;
            n += bucket
                .entries
                .iter()
                .filter(|e| e.kind == FileKind::Dir)
                .count() as u32;
        }
        self.subdirs.insert(dir, n);
        Ok(n)
    }

    fn shrink_dir_size(&mut self, dir: Ino, name: &str) -> Result<(), FsError> {
        let mut s = self.dir_size(dir)?;
        s.entries = s.entries.saturating_sub(1);
        s.bytes = s.bytes.saturating_sub(logical_entry_bytes(name));
        self.set_dir_size(dir, s)
    }

    /// An entry naming `ino` (of `kind`) is gone: one link less, or the inode removed with its
    /// last name. (The entry goes first: a crash in between leaves a link count too high, which
    /// mount repairs, or an orphan, which mount removes.)
    fn drop_link(&mut self, ino: Ino, kind: FileKind) -> Result<(), FsError> {
        if kind != FileKind::Dir && self.nlink(ino) > 1 {
            let mut rec = self.inode_record(ino)?;
            rec.nlink = rec.nlink.saturating_sub(1).max(1);
            return self.write_record(ino, rec);
        }
        if kind != FileKind::Dir && self.open.contains_key(&ino) {
            // Open: its objects stay until the last release.
            self.unlinked.insert(ino);
            return Ok(());
        }
        self.remove_inode(ino)
    }

    /// Removes the entry for `ino` named `name` from `dir` (found by inode, not by name: with
    /// `dirent_objects` a renamed inode's entry object already names its new place).
    fn remove_entry_of(&mut self, dir: Ino, name: &str, ino: Ino) -> Result<(), FsError> {
        let hash = name_hash(name);
        let shape = self.dir_shape(dir)?;
        let b = bucket_of(hash, shape.0);
        let mut bucket = self.read_bucket(dir, b, shape)?;
        let named = !self.sb.dirent_objects;
        let Some(i) = bucket
            .entries
            .iter()
            .position(|e| e.ino == ino && e.hash == hash && (!named || e.name == name))
        else {
            return Err(FsError::Corrupted(format!(
                "directory {dir}: the entry {name:?} of inode {ino} vanished during a rename"
            )));
        };
        bucket.entries.remove(i);
        self.write_bucket(dir, b, shape, &bucket)?;
        self.shrink_dir_size(dir, name)
    }

    /// Whether directory `a` is `d` or one of its ancestors (following the parents in the
    /// inode records of directories, which the tree walk checks).
    fn is_ancestor(&mut self, a: Ino, mut d: Ino) -> Result<bool, FsError> {
        for _ in 0..1_000_000 {
            if d == a {
                return Ok(true);
            }
            if d == ROOT {
                return Ok(false);
            }
            d = self.inode_record(d)?.parent;
        }
        Err(FsError::Corrupted(format!(
            "directory {d}: its parents form a cycle"
        )))
    }

    /// Rewrites the entry object of `ino` (`dirent_objects`) to name `name` in `dir`.
    fn rewrite_dirent(
        &mut self,
        ino: Ino,
        dir: Ino,
        kind: FileKind,
        name: &str,
    ) -> Result<(), FsError> {
        let oid = dirent_oid(ino);
        let rec = DirentRecord {
            parent: dir,
            kind,
            name: name.into(),
        }
        .encode();
        self.counters.dirent_objects_written += 1;
        self.store.write(oid, 0, &rec).map_err(osd_err)?;
        if self.length(oid)? > rec.len() as u64 {
            self.store
                .truncate(oid, rec.len() as u64)
                .map_err(osd_err)?;
        }
        Ok(())
    }

    // ---------------------------------------------------------------- extended attributes

    /// The extended attributes of `ino` as (slot, name, value), in slot order.
    fn xattr_slots(&mut self, ino: Ino) -> Result<Vec<(u16, String, Vec<u8>)>, FsError> {
        let oid = data_oid(ino);
        let mut out = Vec::new();
        for slot in 0..XATTR_SLOTS {
            let Some(b) = self.attr(oid, Attr::User(ATTR_XATTR_FIRST + slot))? else {
                break;
            };
            let bad =
                || FsError::Corrupted(format!("extended attribute slot {slot} of inode {ino}"));
            let n = *b.first().ok_or_else(bad)? as usize;
            let name = b.get(1..1 + n).ok_or_else(bad)?;
            let name = std::str::from_utf8(name).map_err(|_| bad())?.to_string();
            if name.is_empty() {
                return Err(bad());
            }
            out.push((slot, name, b[1 + n..].to_vec()));
        }
        Ok(out)
    }

    /// The extended attributes of `ino` as [`Self::xattr_slots`] reads them, with every later
    /// slot holding a name an earlier slot holds removed first.
    ///
    /// Removing an attribute from the middle is two attribute writes: the last slot moves into
    /// the freed one, then the last slot is cleared. The onode can reach flash between them (a
    /// checkpoint GC takes, the cache's write-back), and a write can fail between them (out of
    /// space), so a crash or a refusal leaves the moved attribute in two slots. Both copies
    /// hold the same value then; but a later `setxattr` changed only the first, and a later
    /// removal moved the stale second copy in front of it, where reads find it first
    /// (docs/RELIABILITY.md, findings 40 and 41). Every change therefore settles the slots
    /// first; a reader takes the first copy, the one this keeps.
    fn settled_xattr_slots(&mut self, ino: Ino) -> Result<Vec<(u16, String, Vec<u8>)>, FsError> {
        loop {
            let slots = self.xattr_slots(ino)?;
            let repeat = slots
                .iter()
                .enumerate()
                .position(|(j, (_, n, _))| slots[..j].iter().any(|(_, m, _)| m == n));
            match repeat {
                None => return Ok(slots),
                Some(j) => self.remove_xattr_slot(ino, &slots, j)?,
            }
        }
    }

    /// Removes slot `i` of `slots` (the attributes of `ino` in slot order) and keeps the slots
    /// consecutive: the last slot moves into slot `i`, then the last slot is cleared.
    fn remove_xattr_slot(
        &mut self,
        ino: Ino,
        slots: &[(u16, String, Vec<u8>)],
        i: usize,
    ) -> Result<(), FsError> {
        let oid = data_oid(ino);
        let last = slots.len() - 1;
        if i != last {
            let (_, n, v) = &slots[last];
            let moved = xattr_slot_bytes(n, v);
            self.set_attr(oid, Attr::User(ATTR_XATTR_FIRST + slots[i].0), moved)?;
        }
        self.counters.attr_updates += 1;
        self.store
            .set_attr(
                oid,
                Attr::User(ATTR_XATTR_FIRST + slots[last].0),
                AttrValue::Absent,
            )
            .map_err(osd_err)
    }

    fn object_priority(&mut self, ino: Ino) -> Result<u64, FsError> {
        match self
            .store
            .get_attr(data_oid(ino), Attr::Priority)
            .map_err(osd_err)?
        {
            AttrValue::U64(p) => Ok(p),
            v => Err(FsError::Device(format!("priority reads {v:?}"))),
        }
    }

    fn set_object_priority(&mut self, ino: Ino, p: u64) -> Result<(), FsError> {
        self.counters.attr_updates += 1;
        self.store
            .set_attr(data_oid(ino), Attr::Priority, AttrValue::U64(p))
            .map_err(osd_err)
    }
}

/// The extended attribute that is the object's priority class rather than a stored value.
pub const PRIORITY_XATTR: &str = "ossd.priority";

/// Read-only extended attributes that show the store's own attributes of the inode's object
/// (decimal numbers): bytes its data occupies on flash, and its parity units per group
/// (OSCM-11 object-level reliability). Not listed, so that copying a file's attributes
/// (`cp -a`, `rsync -X`) does not try to set them.
pub const STORE_XATTRS: [(&str, Attr); 2] = [
    ("ossd.flash_bytes", Attr::UsedCapacity),
    ("ossd.reliability", Attr::Reliability),
];

fn store_xattr(name: &str) -> Option<Attr> {
    STORE_XATTRS
        .iter()
        .find(|(n, _)| *n == name)
        .map(|&(_, a)| a)
}

fn check_xattr_name(name: &str) -> Result<(), FsError> {
    if name.is_empty() || name.len() > XATTR_NAME_MAX || name.contains('\0') {
        return Err(FsError::Invalid(format!(
            "bad extended attribute name {name:?}"
        )));
    }
    Ok(())
}

/// The priority class an `ossd.priority` value names: a decimal number from 0 to 255.
pub fn parse_priority(value: &[u8]) -> Result<u64, FsError> {
    std::str::from_utf8(value)
        .ok()
        .and_then(|s| s.trim().parse::<u64>().ok())
        .filter(|&p| p <= u8::MAX as u64)
        .ok_or_else(|| {
            FsError::Invalid(format!(
                "{PRIORITY_XATTR} takes a number from 0 to 255, not {:?}",
                String::from_utf8_lossy(value)
            ))
        })
}

impl<S: Store> FileSystem for Ofs<S> {
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
        let owner = Owner::default_for(FileKind::File);
        self.make(dir, name, FileKind::File, owner, None)
    }

    fn mkdir(&mut self, dir: Ino, name: &str) -> Result<Ino, FsError> {
        let owner = Owner::default_for(FileKind::Dir);
        self.make(dir, name, FileKind::Dir, owner, None)
    }

    fn unlink(&mut self, dir: Ino, name: &str) -> Result<(), FsError> {
        self.remove(dir, name, false)
    }

    fn rmdir(&mut self, dir: Ino, name: &str) -> Result<(), FsError> {
        self.remove(dir, name, true)
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
            FileData::Token(t) => {
                Store::write_token(&mut self.store, oid, offset, len, t).map_err(osd_err)
            }
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
                        .read_discard(oid, offset, n, &mut self.fps)
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
            FileKind::File | FileKind::Symlink => self.length(oid)?,
            FileKind::Dir => self.dir_size(ino)?.bytes,
            // A device node's data object holds its device number: not a size.
            FileKind::Special(_) => 0,
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
        Store::set_time(&mut self.store, at);
    }

    fn now(&self) -> Nanos {
        Store::now(&self.store)
    }

    fn background(&mut self, from: Nanos, until: Nanos) -> Result<Nanos, FsError> {
        Store::background(&mut self.store, from, until).map_err(osd_err)
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
        let store = self.store.check_structure().map_err(osd_err)?;
        problems.extend(store.into_iter().map(|p| format!("store: {p}")));
        Ok(problems)
    }

    fn getattr(&mut self, ino: Ino) -> Result<FileAttr, FsError> {
        let st = self.stat(ino)?;
        let rec = self.inode_record(ino)?;
        let oid = data_oid(ino);
        let mut time = |a: Attr| match self.store.get_attr(oid, a).map_err(osd_err)? {
            AttrValue::U64(t) => Ok(t),
            v => Err(FsError::Device(format!("{a:?} reads {v:?}"))),
        };
        let atime_ns = time(Attr::AccessedTime)?;
        let ctime_ns = time(Attr::AttrChangedTime)?.max(st.modified_ns);
        let nlink = match st.kind {
            FileKind::Dir => 2 + self.subdir_count(ino)?,
            _ if self.unlinked.contains(&ino) => 0,
            _ => rec.nlink,
        };
        let rdev = match st.kind {
            FileKind::Special(Special::CharDevice | Special::BlockDevice) => {
                let b = self.read_exact(oid, 0, 8, &format!("device number of inode {ino}"))?;
                le::u64_at(&b, 0)?
            }
            _ => 0,
        };
        Ok(FileAttr {
            ino,
            kind: st.kind,
            size: st.size,
            perm: rec.owner.perm,
            uid: rec.owner.uid,
            gid: rec.owner.gid,
            nlink,
            atime_ns,
            mtime_ns: st.modified_ns,
            ctime_ns,
            rdev,
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
        self.make(dir, name, kind, owner, None)
    }

    fn symlink(
        &mut self,
        dir: Ino,
        name: &str,
        target: &[u8],
        owner: Owner,
    ) -> Result<Ino, FsError> {
        vfs::oracle::check_symlink_target(target)?;
        self.make(dir, name, FileKind::Symlink, owner, Some(target))
    }

    fn mknod(
        &mut self,
        dir: Ino,
        name: &str,
        kind: Special,
        rdev: u64,
        owner: Owner,
    ) -> Result<Ino, FsError> {
        // A device node's number is its data object's 8 bytes, written before its entry as a
        // symbolic link's target is.
        let number = rdev.to_le_bytes();
        let data =
            matches!(kind, Special::CharDevice | Special::BlockDevice).then_some(&number[..]);
        self.make(dir, name, FileKind::Special(kind), owner, data)
    }

    fn readlink(&mut self, ino: Ino) -> Result<Vec<u8>, FsError> {
        if self.kind_of(ino)? != FileKind::Symlink {
            return Err(FsError::Invalid(format!(
                "inode {ino} is not a symbolic link"
            )));
        }
        let oid = data_oid(ino);
        let len = self.length(oid)?;
        if len == 0 || len > SYMLINK_MAX as u64 {
            return Err(FsError::Corrupted(format!(
                "symbolic link {ino} is {len} bytes long"
            )));
        }
        self.read_exact(oid, 0, len, &format!("target of symbolic link {ino}"))
    }

    fn link(&mut self, ino: Ino, dir: Ino, name: &str) -> Result<(), FsError> {
        if self.sb.dirent_objects {
            // An entry object is named after its inode: one name per inode.
            return Err(FsError::Unsupported(
                "hard links on a file system formatted with dirent_objects".into(),
            ));
        }
        if self.kind_of(ino)? == FileKind::Dir {
            return Err(FsError::NotPermitted(format!(
                "inode {ino} is a directory: no hard links to directories"
            )));
        }
        if self.unlinked.contains(&ino) {
            // Its last name is gone (it is only open): it cannot get a new one.
            return Err(FsError::NotFound(format!("inode {ino}")));
        }
        check_name(name)?;
        self.dir(dir)?;
        let (b, bucket, found) = self.find(dir, name)?;
        if found.is_some() {
            return Err(FsError::Exists(name.into()));
        }
        let mut rec = self.inode_record(ino)?;
        if rec.nlink >= u32::MAX - 1 {
            return Err(FsError::NoSpace(format!("inode {ino} has too many links")));
        }
        // The count first: a crash before the entry leaves it too high, which mount repairs;
        // never an entry the count does not cover.
        rec.nlink += 1;
        let kind = rec.kind;
        self.write_record(ino, rec)?;
        self.insert_entry(dir, name, (ino, kind), Some((b, bucket)), false)
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
        let (_, sbucket, si) = self.find(dir, name)?;
        let Some(si) = si else {
            return Err(FsError::NotFound(name.into()));
        };
        let ino = sbucket.entries[si].ino;
        if dir == new_dir && name == new_name {
            return Ok(());
        }
        let kind = self.kind_of(ino)?;
        if kind == FileKind::Dir && self.is_ancestor(ino, new_dir)? {
            return Err(FsError::Invalid(format!(
                "cannot move directory {name:?} into itself"
            )));
        }
        let (tb, mut tbucket, ti) = self.find(new_dir, new_name)?;
        // 1. The new name: the target's entry rewritten in place (one bucket write, so the
        //    name never goes missing), or a new entry.
        let replaced = match ti {
            Some(ti) => {
                let t = tbucket.entries[ti].ino;
                if t == ino {
                    return Ok(());
                }
                let tkind = self.kind_of(t)?;
                match (kind, tkind) {
                    (FileKind::Dir, FileKind::Dir) if self.dir_size(t)?.entries > 0 => {
                        return Err(FsError::NotEmpty(new_name.into()));
                    }
                    (FileKind::Dir, FileKind::Dir) => {}
                    (FileKind::Dir, _) => return Err(FsError::NotDir(new_name.into())),
                    (_, FileKind::Dir) => return Err(FsError::IsDir(new_name.into())),
                    _ => {}
                }
                tbucket.entries[ti].ino = ino;
                tbucket.entries[ti].kind = kind;
                let shape = self.dir_shape(new_dir)?;
                self.write_bucket(new_dir, tb, shape, &tbucket)?;
                Some((t, tkind))
            }
            None => {
                self.insert_entry(new_dir, new_name, (ino, kind), Some((tb, tbucket)), false)?;
                None
            }
        };
        // 2. The moved inode's own records name its new place: from here the tree walk takes
        //    the new entry as the directory's (or, with entry objects, the inode's) one.
        if kind == FileKind::Dir && dir != new_dir {
            let mut rec = self.inode_record(ino)?;
            rec.parent = new_dir;
            self.write_record(ino, rec)?;
        } else {
            // A rename changes the moved inode's ctime, as Linux's file systems do.
            self.touch_ctime(ino)?;
        }
        if self.sb.dirent_objects {
            self.rewrite_dirent(ino, new_dir, kind, new_name)?;
        }
        // 3. The old name goes; 4. the replaced inode loses a link.
        self.remove_entry_of(dir, name, ino)?;
        if kind == FileKind::Dir {
            self.count_subdir(dir, -1);
            self.count_subdir(new_dir, 1);
        }
        if let Some((t, tkind)) = replaced {
            if tkind == FileKind::Dir {
                self.count_subdir(new_dir, -1);
            }
            self.drop_link(t, tkind)?;
        }
        Ok(())
    }

    fn setattr(&mut self, ino: Ino, set: SetAttr) -> Result<FileAttr, FsError> {
        let kind = self.kind_of(ino)?;
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
        if set.perm.is_some() || set.uid.is_some() || set.gid.is_some() {
            let mut rec = self.inode_record(ino)?;
            let before = rec;
            rec.owner.perm = set.perm.map_or(rec.owner.perm, |p| p & 0o7777);
            rec.owner.uid = set.uid.unwrap_or(rec.owner.uid);
            rec.owner.gid = set.gid.unwrap_or(rec.owner.gid);
            if rec != before {
                self.write_record(ino, rec)?;
            }
        }
        let oid = data_oid(ino);
        for (t, a) in [
            (set.atime_ns, Attr::AccessedTime),
            (set.mtime_ns, Attr::ModifiedTime),
        ] {
            if let Some(t) = t {
                self.counters.attr_updates += 1;
                self.store
                    .set_attr(oid, a, AttrValue::U64(t))
                    .map_err(osd_err)?;
            }
        }
        self.getattr(ino)
    }

    fn getxattr(&mut self, ino: Ino, name: &str) -> Result<Option<Vec<u8>>, FsError> {
        self.kind_of(ino)?;
        check_xattr_name(name)?;
        if name == PRIORITY_XATTR {
            let p = self.object_priority(ino)?;
            return Ok((p != 0).then(|| p.to_string().into_bytes()));
        }
        if let Some(attr) = store_xattr(name) {
            return match self.store.get_attr(data_oid(ino), attr).map_err(osd_err)? {
                AttrValue::U64(v) => Ok(Some(v.to_string().into_bytes())),
                v => Err(FsError::Device(format!("{name} reads {v:?}"))),
            };
        }
        Ok(self
            .xattr_slots(ino)?
            .into_iter()
            .find(|(_, n, _)| n == name)
            .map(|(_, _, v)| v))
    }

    fn setxattr(
        &mut self,
        ino: Ino,
        name: &str,
        value: &[u8],
        mode: XattrMode,
    ) -> Result<(), FsError> {
        self.kind_of(ino)?;
        check_xattr_name(name)?;
        if store_xattr(name).is_some() {
            return Err(FsError::NotPermitted(format!("{name} is read-only")));
        }
        let exists = if name == PRIORITY_XATTR {
            self.object_priority(ino)? != 0
        } else {
            self.xattr_slots(ino)?.iter().any(|(_, n, _)| n == name)
        };
        match (mode, exists) {
            (XattrMode::Create, true) => return Err(FsError::Exists(name.into())),
            (XattrMode::Replace, false) => return Err(FsError::NotFound(name.into())),
            _ => {}
        }
        if name == PRIORITY_XATTR {
            let p = parse_priority(value)?;
            return self.set_object_priority(ino, p);
        }
        let slots = self.settled_xattr_slots(ino)?;
        let slot = match slots.iter().find(|(_, n, _)| n == name) {
            Some((s, _, _)) => *s,
            None if slots.len() as u16 >= XATTR_SLOTS => {
                return Err(FsError::NoSpace(format!(
                    "inode {ino} has {XATTR_SLOTS} extended attributes"
                )))
            }
            None => slots.len() as u16,
        };
        let cost = |n: &str, v: &[u8]| 3 + 1 + n.len() + v.len();
        let others: usize = slots
            .iter()
            .filter(|(_, n, _)| n != name)
            .map(|(_, n, v)| cost(n, v))
            .sum();
        if others + cost(name, value) > XATTR_BYTES_MAX {
            return Err(FsError::NoSpace(format!(
                "extended attributes of inode {ino} would take {} bytes; {XATTR_BYTES_MAX} fit",
                others + cost(name, value)
            )));
        }
        self.counters.attr_updates += 1;
        match self.store.set_attr(
            data_oid(ino),
            Attr::User(ATTR_XATTR_FIRST + slot),
            AttrValue::Bytes(xattr_slot_bytes(name, value)),
        ) {
            Ok(()) => Ok(()),
            // The onode's 256 bytes (or one attribute's 128) are full.
            Err(OsdError::InvalidArgument(why)) => Err(FsError::NoSpace(format!(
                "extended attribute {name:?} of inode {ino}: {why}"
            ))),
            Err(e) => Err(osd_err(e)),
        }
    }

    fn listxattr(&mut self, ino: Ino) -> Result<Vec<String>, FsError> {
        self.kind_of(ino)?;
        let mut names: Vec<String> = self
            .xattr_slots(ino)?
            .into_iter()
            .map(|(_, n, _)| n)
            .collect();
        if self.object_priority(ino)? != 0 {
            names.push(PRIORITY_XATTR.into());
        }
        names.sort();
        names.dedup();
        Ok(names)
    }

    fn removexattr(&mut self, ino: Ino, name: &str) -> Result<(), FsError> {
        self.kind_of(ino)?;
        check_xattr_name(name)?;
        if store_xattr(name).is_some() {
            return Err(FsError::NotPermitted(format!("{name} is read-only")));
        }
        if name == PRIORITY_XATTR {
            if self.object_priority(ino)? == 0 {
                return Err(FsError::NotFound(name.into()));
            }
            return self.set_object_priority(ino, 0);
        }
        let slots = self.settled_xattr_slots(ino)?;
        let Some(i) = slots.iter().position(|(_, n, _)| n == name) else {
            return Err(FsError::NotFound(name.into()));
        };
        self.remove_xattr_slot(ino, &slots, i)
    }

    fn open(&mut self, ino: Ino) -> Result<(), FsError> {
        self.kind_of(ino)?;
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
            if self.unlinked.contains(&ino) {
                self.remove_inode(ino)?;
            }
        }
        Ok(())
    }

    fn statfs(&mut self) -> Result<SpaceInfo, FsError> {
        let device = self.store.describe().map_err(osd_err)?;
        let unit = device.unit_bytes as u64;
        Ok(SpaceInfo {
            total_bytes: device.capacity_bytes,
            free_bytes: device.capacity_bytes.saturating_sub(device.used_bytes),
            inodes_used: self.next_ino - 1,
            inodes_total: INO_LIMIT - 1,
            block_bytes: unit as u32,
        })
    }
}
