//! The tree walk behind `check` (an fsck that reports) and mount-time repair (after an unclean
//! end, the same walk's findings are fixed).
//!
//! What must hold: every entry points to an existing inode of the entry's kind whose record
//! names the entry's directory as parent (and, with `dirent_objects`, whose entry object holds
//! the entry's name and hash); every entry sits in the bucket its hash addresses; names are
//! unique within a directory; every inode is reached exactly once from the root; every object of
//! the partition belongs to a reached inode; each directory's size record agrees with its
//! entries; the in-memory inode table and allocator agree with the tree.
//!
//! What a crash can leave, given the write orders of `fs.rs`: orphan objects (an inode created
//! or an entry removed, the other half lost), entries whose objects are gone, misplaced copies
//! of entries after a split cut short, and stale directory sizes. Repair fixes all of these. A
//! directory that cannot be read at all (damage, not a crash) is left as it is, and then no
//! object is removed as an orphan: what it held cannot be told from what nothing holds.

use std::collections::BTreeMap;

use crate::store::Store;
use osd::ObjectId;
use rustc_hash::{FxHashMap, FxHashSet};
use vfs::{FileKind, FsError, Ino, ROOT};

use crate::dir::{bucket_of, logical_entry_bytes, Bucket, Entry};
use crate::fs::{osd_err, Ofs};
use crate::layout::*;

/// What the walk makes of one entry.
enum Verdict {
    Good,
    /// Its target is missing or disagrees: the entry goes.
    Bad(String),
    /// Its target cannot be read: left alone.
    Damaged(String),
}

/// One finding of the walk.
enum Fault {
    /// An entry that must go: its inode is missing or disagrees, or it is a duplicate.
    BadEntry { dir: Ino, ino: Ino, why: String },
    /// An entry in a bucket its hash does not address (a split cut short by a crash).
    Misplaced { dir: Ino, ino: Ino },
    /// A directory, or an inode an entry names, that could not be read (damage; repair
    /// leaves it alone and then removes no orphans).
    Unreadable { ino: Ino, why: String },
    /// A directory's size record disagrees with its entries.
    DirSize {
        dir: Ino,
        recorded: Option<DirSize>,
        actual: DirSize,
    },
    /// An object of the partition no entry reaches.
    Orphan { object: ObjectId, why: &'static str },
    /// A file's link count disagrees with the entries naming it (a crash during link,
    /// unlink or rename; repair sets the count found).
    Links { ino: Ino, recorded: u32, found: u32 },
    /// In-memory state disagreeing with the tree (reported only).
    Memory(String),
}

pub(crate) struct Walk {
    faults: Vec<Fault>,
    /// Directories to rewrite, with the entries they keep.
    rewrite: BTreeMap<Ino, Vec<Entry>>,
    /// Directories with their actual sizes, for repair.
    sizes: Vec<(Ino, DirSize)>,
    /// The largest inode number of any data object.
    max_ino: Ino,
    /// Files and symbolic links reached: (link count recorded, entries found).
    links: FxHashMap<Ino, (u32, u32)>,
    /// The link count of the file `entry_target` last judged good.
    last_nlink: Option<u32>,
}

impl Walk {
    pub(crate) fn problems(&self) -> Vec<String> {
        self.faults
            .iter()
            .map(|f| match f {
                Fault::BadEntry { dir, ino, why } => {
                    format!("directory {dir}: entry for inode {ino}: {why}")
                }
                Fault::Misplaced { dir, ino } => {
                    format!("directory {dir}: entry for inode {ino} is in the wrong bucket")
                }
                Fault::Unreadable { ino, why } => format!("inode {ino} unreadable: {why}"),
                Fault::DirSize {
                    dir,
                    recorded,
                    actual,
                } => format!("directory {dir}: size record {recorded:?}, entries say {actual:?}"),
                Fault::Orphan { object, why } => {
                    format!("object {:#x} is an orphan: {why}", object.0)
                }
                Fault::Links {
                    ino,
                    recorded,
                    found,
                } => format!("inode {ino}: link count {recorded}, {found} entries name it"),
                Fault::Memory(m) => m.clone(),
            })
            .collect()
    }
}

impl<S: Store> Ofs<S> {
    /// Walks the tree from the root and then the partition's objects. `repairing`: the
    /// in-memory state is about to be rebuilt, so it is not checked.
    pub(crate) fn walk(&mut self, repairing: bool) -> Result<Walk, FsError> {
        let root = self.inode_record(ROOT)?;
        if root.kind != FileKind::Dir {
            return Err(FsError::Corrupted("the root is not a directory".into()));
        }
        let mut w = Walk {
            faults: Vec::new(),
            rewrite: BTreeMap::new(),
            sizes: Vec::new(),
            max_ino: ROOT,
            links: FxHashMap::default(),
            last_nlink: None,
        };
        let mut reached: FxHashMap<Ino, FileKind> = FxHashMap::default();
        reached.insert(ROOT, FileKind::Dir);
        let mut queue = vec![ROOT];
        while let Some(dir) = queue.pop() {
            let entries = match self.all_bucket_entries(dir) {
                Ok(e) => e,
                Err(e) if e.is_damage() => {
                    w.faults.push(Fault::Unreadable {
                        ino: dir,
                        why: e.to_string(),
                    });
                    continue;
                }
                Err(e) => return Err(e),
            };
            self.walk_dir(dir, entries, &mut w, &mut reached, &mut queue)?;
        }
        let mut links: Vec<_> = w.links.iter().map(|(&i, &l)| (i, l)).collect();
        links.sort();
        for (ino, (recorded, found)) in links {
            if recorded != found {
                w.faults.push(Fault::Links {
                    ino,
                    recorded,
                    found,
                });
            }
        }
        if !repairing {
            // Files removed while open keep their objects until closed: not orphans.
            for &ino in &self.unlinked {
                if let Some(&k) = self.kinds.get(&ino) {
                    reached.entry(ino).or_insert(k);
                }
            }
        }
        self.walk_objects(&reached, &mut w)?;
        for (&ino, &k) in &self.kinds {
            if reached.get(&ino) != Some(&k) {
                w.faults.push(Fault::Memory(format!(
                    "inode table says inode {ino} is a {k:?}; the tree says {:?}",
                    reached.get(&ino)
                )));
            }
        }
        if !repairing && self.next_ino <= w.max_ino {
            w.faults.push(Fault::Memory(format!(
                "next inode {} is not above inode {} in use",
                self.next_ino, w.max_ino
            )));
        }
        Ok(w)
    }

    /// Every bucket entry of `dir` with its bucket number and whether the bucket is the one its
    /// hash addresses; names not resolved.
    fn all_bucket_entries(&mut self, dir: Ino) -> Result<Vec<(bool, Entry)>, FsError> {
        let shape = self.dir_shape(dir)?;
        let mut out = Vec::new();
        for b in 0..shape.0 {
            for e in self.read_bucket(dir, b, shape)?.entries {
                out.push((bucket_of(e.hash, shape.0) == b, e));
            }
        }
        // Entries in their right buckets first: of two copies, the misplaced one is the extra.
        out.sort_by_key(|(placed, _)| !placed);
        Ok(out)
    }

    fn walk_dir(
        &mut self,
        dir: Ino,
        entries: Vec<(bool, Entry)>,
        w: &mut Walk,
        reached: &mut FxHashMap<Ino, FileKind>,
        queue: &mut Vec<Ino>,
    ) -> Result<(), FsError> {
        let mut keep = Vec::new();
        let mut names = FxHashSet::default();
        let mut dirty = false;
        let mut actual = DirSize::default();
        for (placed, mut e) in entries {
            let again = reached.contains_key(&e.ino);
            w.last_nlink = None;
            let verdict = match reached.get(&e.ino) {
                // A file or link may have several names: each is counted, and repair sets
                // the link count to what is found (so a crash during a rename may leave both
                // names, never neither).
                Some(&k) if k == e.kind && k != FileKind::Dir => Verdict::Good,
                Some(_) => Verdict::Bad("inode reached twice".into()),
                None => self.entry_target(dir, &mut e, w)?,
            };
            let verdict = match verdict {
                Verdict::Good if !names.insert(e.name.clone()) => {
                    Verdict::Bad(format!("name {:?} twice", e.name))
                }
                v => v,
            };
            match verdict {
                Verdict::Good if again => {
                    if let Some(l) = w.links.get_mut(&e.ino) {
                        l.1 += 1;
                    }
                }
                Verdict::Good => {
                    if let Some(n) = w.last_nlink.take() {
                        w.links.insert(e.ino, (n, 1));
                    }
                }
                Verdict::Bad(why) => {
                    w.faults.push(Fault::BadEntry {
                        dir,
                        ino: e.ino,
                        why,
                    });
                    dirty = true;
                    continue;
                }
                Verdict::Damaged(why) => {
                    // Kept as it is, and what it reaches kept too: damage is for a person to
                    // look at, not for repair to guess about.
                    w.faults.push(Fault::Unreadable { ino: e.ino, why });
                }
            }
            if !placed {
                w.faults.push(Fault::Misplaced { dir, ino: e.ino });
                dirty = true;
            }
            reached.insert(e.ino, e.kind);
            if e.kind == FileKind::Dir {
                queue.push(e.ino);
            }
            actual.entries += 1;
            actual.bytes += logical_entry_bytes(&e.name);
            keep.push(e);
        }
        let recorded = self.dir_size(dir).ok();
        if recorded != Some(actual) {
            w.faults.push(Fault::DirSize {
                dir,
                recorded,
                actual,
            });
        }
        w.sizes.push((dir, actual));
        if dirty {
            w.rewrite.insert(dir, keep);
        }
        Ok(())
    }

    /// Checks what entry `e` of `dir` points to, filling in its name from its entry object
    /// with `dirent_objects`. Errors other than missing or damaged objects end the walk.
    fn entry_target(&mut self, dir: Ino, e: &mut Entry, w: &mut Walk) -> Result<Verdict, FsError> {
        let judge = |r: Result<(), FsError>| -> Result<Verdict, FsError> {
            match r {
                Ok(()) => Ok(Verdict::Good),
                Err(FsError::NotFound(w)) => Ok(Verdict::Bad(format!("{w} not found"))),
                Err(FsError::Corrupted(w) | FsError::Damaged { what: w, .. }) => {
                    Ok(Verdict::Damaged(w))
                }
                Err(err) => Err(err),
            }
        };
        if let v @ (Verdict::Bad(_) | Verdict::Damaged(_)) =
            judge(self.length(data_oid(e.ino)).map(|_| ()))?
        {
            return Ok(v);
        }
        let rec = match self.inode_record(e.ino) {
            Ok(r) => r,
            Err(err) => return judge(Err(err)),
        };
        if rec.kind != e.kind {
            return Ok(Verdict::Bad(format!(
                "entry says {:?}, inode says {:?}",
                e.kind, rec.kind
            )));
        }
        // A directory's parent decides which of its entries counts after a crash during a
        // rename; a file's or link's is only where it was made.
        if rec.kind == FileKind::Dir && rec.parent != dir {
            return Ok(Verdict::Bad(format!("inode's parent is {}", rec.parent)));
        }
        if self.sb.dirent_objects {
            let d = match self.dirent(e.ino) {
                Ok(d) => d,
                Err(err) => return judge(Err(err)),
            };
            if d.parent != dir || d.kind != e.kind || crate::dir::name_hash(&d.name) != e.hash {
                return Ok(Verdict::Bad(format!(
                    "entry object {d:?} disagrees with the bucket entry"
                )));
            }
            e.name = d.name;
        }
        w.last_nlink = (rec.kind != FileKind::Dir).then_some(rec.nlink);
        Ok(Verdict::Good)
    }

    /// Every object of the partition must belong to a reached inode.
    fn walk_objects(
        &mut self,
        reached: &FxHashMap<Ino, FileKind>,
        w: &mut Walk,
    ) -> Result<(), FsError> {
        let mut token = 0;
        loop {
            let (ids, next) = self.store.list(PARTITION, token, 1024).map_err(osd_err)?;
            for id in ids {
                // Inode numbers in use by any object, an orphan kept for a person to look at
                // included: a new inode must not collide with one (found by `ossd torture
                // --stack ofs`: an entry object kept after damage refused a later create).
                if let ObjectRole::Data(i) | ObjectRole::Inode(i) | ObjectRole::Dirent(i) = role(id)
                {
                    w.max_ino = w.max_ino.max(i);
                }
                let why = match role(id) {
                    ObjectRole::Data(i) => {
                        (!reached.contains_key(&i)).then_some("no entry reaches its inode")
                    }
                    ObjectRole::Inode(i) if self.sb.inode_objects => {
                        (!reached.contains_key(&i)).then_some("inode object of no inode")
                    }
                    ObjectRole::Dirent(i) if self.sb.dirent_objects => (!reached.contains_key(&i)
                        || i == ROOT)
                        .then_some("entry object of no entry"),
                    _ => Some("not an object this layout makes"),
                };
                if let Some(why) = why {
                    w.faults.push(Fault::Orphan { object: id, why });
                }
            }
            match next {
                Some(t) => token = t,
                None => return Ok(()),
            }
        }
    }

    /// Mount-time repair after an unclean end: fixes what the walk found, flushes, and returns
    /// the next inode number (above every inode number in use or found).
    pub(crate) fn repair(&mut self) -> Result<Ino, FsError> {
        self.kinds.clear();
        let w = self.walk(true)?;
        for (dir, keep) in &w.rewrite {
            self.rewrite_dir(*dir, keep)?;
        }
        let unreadable = w
            .faults
            .iter()
            .any(|f| matches!(f, Fault::Unreadable { .. }));
        for f in w.faults.iter().filter(|_| !unreadable) {
            if let Fault::Orphan { object, .. } = f {
                self.remove_object(osd::Oid {
                    partition: PARTITION,
                    object: *object,
                })?;
            }
        }
        for f in &w.faults {
            if let Fault::Links { ino, found, .. } = *f {
                let mut rec = self.inode_record(ino)?;
                rec.nlink = found;
                self.write_record(ino, rec)?;
            }
        }
        self.links.clear();
        for &(dir, actual) in &w.sizes {
            if self.dir_size(dir).ok() != Some(actual) {
                self.set_dir_size(dir, actual)?;
            }
        }
        self.kinds.clear();
        self.counters.repair_fixes += w
            .faults
            .iter()
            .filter(|f| !matches!(f, Fault::Unreadable { .. } | Fault::Memory(_)))
            .filter(|f| !unreadable || !matches!(f, Fault::Orphan { .. }))
            .count() as u64;
        self.flush(osd::FlushScope::Device)?;
        Ok(w.max_ino + 1)
    }

    /// Rewrites every bucket of `dir` to hold exactly `keep`, each entry where its hash says.
    fn rewrite_dir(&mut self, dir: Ino, keep: &[Entry]) -> Result<(), FsError> {
        let shape = self.dir_shape(dir)?;
        let mut buckets = vec![Bucket::default(); shape.0 as usize];
        for e in keep {
            let mut e = e.clone();
            if self.sb.dirent_objects {
                e.name.clear();
            }
            buckets[bucket_of(e.hash, shape.0) as usize].entries.push(e);
        }
        if buckets.iter().any(|b| b.encoded_len() as u64 > self.block) {
            return Err(FsError::Corrupted(format!(
                "directory {dir}: its entries do not fit its buckets"
            )));
        }
        // Buckets that gain an entry (a misplaced one moving home) first, durably, then those
        // that only lose some: a power cut in between leaves a copy too many, never none.
        let mut gaining = Vec::new();
        let mut losing = Vec::new();
        for (b, bucket) in buckets.into_iter().enumerate() {
            let old = self.read_bucket(dir, b as u64, shape)?;
            let missing = |from: &Bucket, of: &Bucket| {
                of.entries
                    .iter()
                    .any(|e| !from.entries.iter().any(|o| o.ino == e.ino))
            };
            if missing(&old, &bucket) {
                gaining.push((b as u64, bucket));
            } else if missing(&bucket, &old) {
                losing.push((b as u64, bucket));
            }
        }
        for (b, bucket) in &gaining {
            self.write_bucket(dir, *b, shape, bucket)?;
        }
        if !gaining.is_empty() && !losing.is_empty() {
            self.flush(osd::FlushScope::Object(data_oid(dir)))?;
        }
        for (b, bucket) in &losing {
            self.write_bucket(dir, *b, shape, bucket)?;
        }
        Ok(())
    }
}
