//! The synchronous heart of the S3 face: buckets (partitions), their key directories (one log
//! object each, see [`crate::dir`]), object data, durability and the removal of objects no key
//! references any more. The HTTP layer ([`crate::service`]) calls it under one lock.
//!
//! Write path of a PUT, with its durability points ("ordered" mode: data before the record
//! that names it):
//! 1. a fresh object is created in the bucket's partition and the body is written into it;
//! 2. FLUSH, unless one since the last data write already happened — **the data is durable**,
//!    so a record can never outlive, in a crash, the object it names;
//! 3. a `Put` record naming the object is appended to the bucket's directory log and applied
//!    in memory;
//! 4. [`Engine::sync`] FLUSHes (one FLUSH covers every record written before it: group
//!    commit) — **the key is durable** — and only then is the reply sent;
//! 5. the object the key named before is removed (after the flush, so a crash can never leave a
//!    durable key pointing at a removed object), unless a reader still streams it, in which case
//!    it is removed when the last reader ends.
//!
//! A crash between 1 and 4 leaves an object no record names; [`Engine::open`] removes such
//! orphans, and cuts a torn record off the end of each log.

use std::collections::{BTreeMap, HashMap, HashSet};

use osd::{Attr, AttrValue, FlushScope, ObjectId, Oid, Osd, OsdError, PartitionId};

use crate::dir::{self, Directory, Entry, Record, Upload};
use crate::Error;

/// The user attribute of a bucket partition's root object that names its directory log object
/// (8 bytes, little-endian object id). Partitions without it are not buckets (the OSD face's).
pub const DIR_ATTR: u16 = 0xfff1;

/// Longest key S3 allows, in bytes.
pub const MAX_KEY_BYTES: usize = 1024;
/// Most user-defined metadata S3 allows per object (names and values), in bytes.
pub const MAX_USER_META_BYTES: usize = 2048;
/// Longest content type kept, in bytes.
pub const MAX_CONTENT_TYPE_BYTES: usize = 1024;

/// Bytes read or written per store call when copying.
pub const CHUNK_BYTES: usize = 1 << 20;

/// Limits of the S3 face; `Default` gives the documented defaults.
#[derive(Clone, Debug)]
pub struct Limits {
    /// Largest object (one PUT, one part, or a completed multipart object), bytes (default
    /// 5 GiB, S3's single-PUT limit).
    pub max_object_bytes: u64,
    /// Smallest part but the last of a multipart upload, bytes (default 5 MiB, as S3).
    pub min_part_bytes: u64,
    /// Compact a bucket's directory log once it holds at least this many dead records and
    /// twice as many dead as live ones (default 4096).
    pub compact_min_dead_records: u64,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            max_object_bytes: 5 << 30,
            min_part_bytes: 5 << 20,
            compact_min_dead_records: 4096,
        }
    }
}

/// A part just uploaded, for [`Engine::put_part`].
#[derive(Clone, Copy, Debug)]
pub struct NewPart {
    /// Part number (1..=10,000).
    pub number: u32,
    /// The object holding its bytes.
    pub oid: Oid,
    /// Its length.
    pub size: u64,
    /// Its MD5.
    pub md5: [u8; 16],
}

struct Bucket {
    partition: PartitionId,
    log: ObjectId,
    log_len: u64,
    dir: Directory,
}

/// Buckets and keys on an OSD store.
pub struct Engine<S> {
    store: S,
    limits: Limits,
    buckets: BTreeMap<String, Bucket>,
    /// Changes made (sequence numbers handed out) and changes known durable.
    written: u64,
    flushed: u64,
    /// Object data or creations not yet flushed: a record must not be appended before them.
    dirty: bool,
    /// Objects to remove once the change that unreferenced them is durable.
    pending: Vec<(u64, Oid)>,
    /// Objects being read by a streaming GET or copied, and how many times.
    pins: HashMap<Oid, u32>,
    /// Unreferenced objects whose removal waits for their last pin.
    doomed: HashSet<Oid>,
    /// Set after a failed change: refuse writes until reopened (the store may be half changed).
    poisoned: Option<String>,
}

fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0)
}

fn all_partitions<S: Osd>(s: &mut S) -> Result<Vec<PartitionId>, OsdError> {
    let mut out = Vec::new();
    let mut token = 0;
    loop {
        let (ids, next) = s.list_partitions(token, 1024)?;
        out.extend(ids);
        match next {
            Some(t) => token = t,
            None => return Ok(out),
        }
    }
}

fn all_objects<S: Osd>(s: &mut S, p: PartitionId) -> Result<Vec<ObjectId>, OsdError> {
    let mut out = Vec::new();
    let mut token = 0;
    loop {
        let (ids, next) = s.list(p, token, 1024)?;
        out.extend(ids);
        match next {
            Some(t) => token = t,
            None => return Ok(out),
        }
    }
}

fn length<S: Osd>(s: &mut S, oid: Oid) -> Result<u64, Error> {
    match s.get_attr(oid, Attr::LogicalLength)? {
        AttrValue::U64(n) => Ok(n),
        other => Err(Error::Corrupted {
            what: format!("logical length {other:?}"),
            location: format!("object {oid}"),
        }),
    }
}

fn read_all<S: Osd>(s: &mut S, oid: Oid) -> Result<Vec<u8>, Error> {
    let len = length(s, oid)?;
    let len = usize::try_from(len).map_err(|_| Error::Corrupted {
        what: format!("directory log of {len} bytes"),
        location: format!("object {oid}"),
    })?;
    let mut buf = vec![0u8; len];
    let mut at = 0;
    while at < len {
        let n = s.read(oid, at as u64, &mut buf[at..])?;
        if n == 0 {
            break;
        }
        at += n;
    }
    buf.truncate(at);
    Ok(buf)
}

/// Checks a key and its metadata against S3's limits before any byte is stored.
pub fn check_key_and_meta(
    key: &str,
    content_type: &str,
    user: &[(String, String)],
) -> Result<(), Error> {
    if key.is_empty() || key.len() > MAX_KEY_BYTES {
        return Err(Error::KeyTooLong(key.len()));
    }
    let meta: usize = user.iter().map(|(k, v)| k.len() + v.len()).sum();
    if meta > MAX_USER_META_BYTES || content_type.len() > MAX_CONTENT_TYPE_BYTES {
        return Err(Error::MetadataTooLarge(meta + content_type.len()));
    }
    Ok(())
}

impl<S: Osd> Engine<S> {
    /// Opens the buckets on `store`: replays each bucket's directory log, cuts torn tails,
    /// finishes interrupted bucket creations and deletions, removes orphaned objects.
    pub fn open(mut store: S, limits: Limits) -> Result<Self, Error> {
        let mut buckets = BTreeMap::new();
        let mut changed = false;
        for p in all_partitions(&mut store)? {
            let log = match store.get_attr(Oid::partition_root(p), Attr::User(DIR_ATTR))? {
                AttrValue::Bytes(b) if b.len() == 8 => ObjectId(u64::from_le_bytes(
                    b.as_slice().try_into().unwrap_or([0; 8]),
                )),
                AttrValue::Absent => continue,
                other => {
                    return Err(Error::Corrupted {
                        what: format!("directory attribute {other:?}"),
                        location: format!("partition {:#x}", p.0),
                    })
                }
            };
            changed = true;
            let Some(b) = Self::load(&mut store, p, log)? else {
                remove_partition(&mut store, p)?;
                continue;
            };
            if buckets.contains_key(&b.dir.name) {
                return Err(Error::Corrupted {
                    what: format!("a second bucket named {:?}", b.dir.name),
                    location: format!("partition {:#x}", p.0),
                });
            }
            buckets.insert(b.dir.name.clone(), b);
        }
        if changed {
            store.flush(FlushScope::Device)?;
        }
        let mut e = Engine {
            store,
            limits,
            buckets,
            written: 0,
            flushed: 0,
            dirty: false,
            pending: Vec::new(),
            pins: HashMap::new(),
            doomed: HashSet::new(),
            poisoned: None,
        };
        let names: Vec<String> = e.buckets.keys().cloned().collect();
        for name in names {
            e.maybe_compact(&name)?;
        }
        Ok(e)
    }

    /// Loads one bucket; `None` for a creation or deletion that a crash interrupted (no log
    /// object, or an empty one).
    fn load(store: &mut S, p: PartitionId, log: ObjectId) -> Result<Option<Bucket>, Error> {
        let oid = Oid {
            partition: p,
            object: log,
        };
        let bytes = match read_all(store, oid) {
            Ok(b) => b,
            Err(Error::Store(OsdError::NotFound(_))) => return Ok(None),
            Err(e) => return Err(e),
        };
        if bytes.is_empty() {
            return Ok(None);
        }
        let (dir, good) = dir::replay(&bytes).map_err(|e| match e {
            Error::Corrupted { what, .. } => Error::Corrupted {
                what,
                location: format!("directory log {oid}"),
            },
            other => other,
        })?;
        if good < bytes.len() {
            store.truncate(oid, good as u64)?;
        }
        let referenced: HashSet<ObjectId> = dir.referenced().collect();
        for o in all_objects(store, p)? {
            if o != log && o != Oid::partition_root(p).object && !referenced.contains(&o) {
                store.remove(Oid {
                    partition: p,
                    object: o,
                })?;
            }
        }
        Ok(Some(Bucket {
            partition: p,
            log,
            log_len: good as u64,
            dir,
        }))
    }

    /// Flushes, removes every object waiting for removal, and hands the store back.
    pub fn close(mut self) -> Result<S, Error> {
        self.store.flush(FlushScope::Device)?;
        for (_, oid) in std::mem::take(&mut self.pending) {
            let _ = self.store.remove(oid);
        }
        for oid in std::mem::take(&mut self.doomed) {
            let _ = self.store.remove(oid);
        }
        self.store.flush(FlushScope::Device)?;
        Ok(self.store)
    }

    /// Hands the store back without flushing or removing anything: what a crash leaves (for
    /// tests).
    pub fn abandon(self) -> S {
        self.store
    }

    fn writable(&self) -> Result<(), Error> {
        match &self.poisoned {
            Some(why) => Err(Error::Poisoned(why.clone())),
            None => Ok(()),
        }
    }

    /// Runs a change; a failure poisons the engine (the store may hold half of it).
    fn change<T>(&mut self, f: impl FnOnce(&mut Self) -> Result<T, Error>) -> Result<T, Error> {
        self.writable()?;
        let r = f(self);
        if let Err(e) = &r {
            // Refusals that changed nothing (an object removed by a concurrent DeleteBucket, a
            // full device) must not stop the service; anything else may have changed half.
            let harmless = matches!(
                e,
                Error::Store(
                    OsdError::NotFound(_)
                        | OsdError::AlreadyExists(_)
                        | OsdError::NoSpace { .. }
                        | OsdError::InvalidArgument(_)
                )
            );
            if matches!(e, Error::Store(_) | Error::Corrupted { .. }) && !harmless {
                self.poisoned = Some(e.to_string());
            }
        }
        r
    }

    fn bucket(&self, name: &str) -> Result<&Bucket, Error> {
        self.buckets
            .get(name)
            .ok_or_else(|| Error::NoSuchBucket(name.to_string()))
    }

    /// Buckets with their creation times (Unix ms), by name.
    pub fn list_buckets(&self) -> Vec<(String, u64)> {
        self.buckets
            .values()
            .map(|b| (b.dir.name.clone(), b.dir.created_ms))
            .collect()
    }

    /// The directory of a bucket (read-only).
    pub fn directory(&self, bucket: &str) -> Result<&Directory, Error> {
        Ok(&self.bucket(bucket)?.dir)
    }

    /// Creates a bucket: a partition, its log object with the header record, the attribute
    /// naming the log; durable on return.
    pub fn create_bucket(&mut self, name: &str) -> Result<(), Error> {
        if self.buckets.contains_key(name) {
            return Err(Error::BucketExists(name.to_string()));
        }
        self.change(|e| {
            let p = e.store.create_partition(None)?;
            let log = e.store.create(p, None)?;
            let header = Record::Header {
                name: name.to_string(),
                created_ms: now_ms(),
                next_upload: 1,
            };
            let bytes = header.encode();
            let oid = Oid {
                partition: p,
                object: log,
            };
            e.store.write(oid, 0, &bytes)?;
            e.store.set_attr(
                Oid::partition_root(p),
                Attr::User(DIR_ATTR),
                AttrValue::Bytes(log.0.to_le_bytes().to_vec()),
            )?;
            e.store.flush(FlushScope::Partition(p))?;
            let mut dir = Directory::default();
            dir.apply(header)?;
            e.buckets.insert(
                name.to_string(),
                Bucket {
                    partition: p,
                    log,
                    log_len: bytes.len() as u64,
                    dir,
                },
            );
            Ok(())
        })
    }

    /// Deletes an empty bucket (its unfinished uploads go with it); durable on return.
    pub fn delete_bucket(&mut self, name: &str) -> Result<(), Error> {
        let b = self.bucket(name)?;
        if !b.dir.keys.is_empty() {
            return Err(Error::BucketNotEmpty(name.to_string()));
        }
        let (p, log) = (b.partition, b.log);
        self.change(|e| {
            // The log goes first: a crash part way leaves a partition with no log, which open
            // finishes removing.
            e.store.remove(Oid {
                partition: p,
                object: log,
            })?;
            e.buckets.remove(name);
            e.pending.retain(|(_, o)| o.partition != p);
            remove_partition(&mut e.store, p)?;
            e.store.flush(FlushScope::Device)?;
            Ok(())
        })
    }

    /// Creates an empty object in a bucket's partition to receive a body.
    pub fn new_object(&mut self, bucket: &str) -> Result<Oid, Error> {
        let p = self.bucket(bucket)?.partition;
        self.change(|e| {
            e.dirty = true;
            let o = e.store.create(p, None)?;
            Ok(Oid {
                partition: p,
                object: o,
            })
        })
    }

    /// Writes body bytes into an object made by [`Engine::new_object`].
    pub fn write(&mut self, oid: Oid, offset: u64, data: &[u8]) -> Result<(), Error> {
        self.change(|e| {
            e.dirty = true;
            Ok(e.store.write(oid, offset, data)?)
        })
    }

    /// Removes an object no record names (a failed upload's).
    pub fn discard(&mut self, oid: Oid) {
        let _ = self.store.remove(oid);
    }

    /// Reads an object's bytes.
    pub fn read(&mut self, oid: Oid, offset: u64, buf: &mut [u8]) -> Result<usize, Error> {
        Ok(self.store.read(oid, offset, buf)?)
    }

    /// Appends a record to a bucket's log and applies it; returns the change's sequence number
    /// (durable after [`Engine::sync`] with it).
    fn log(&mut self, bucket: &str, rec: Record) -> Result<u64, Error> {
        if self.dirty {
            // Step 2 of the write path: the data a record names is durable before the record.
            self.flush_now()?;
        }
        self.change(|e| {
            let b = e
                .buckets
                .get_mut(bucket)
                .ok_or_else(|| Error::NoSuchBucket(bucket.to_string()))?;
            let bytes = rec.encode();
            let oid = Oid {
                partition: b.partition,
                object: b.log,
            };
            e.store.write(oid, b.log_len, &bytes)?;
            b.log_len += bytes.len() as u64;
            let freed = b.dir.apply(rec)?;
            let p = b.partition;
            e.written += 1;
            let seq = e.written;
            e.pending.extend(freed.into_iter().map(|o| {
                (
                    seq,
                    Oid {
                        partition: p,
                        object: o,
                    },
                )
            }));
            Ok(seq)
        })
    }

    fn check_partition(&self, bucket: &str, oid: Oid) -> Result<(), Error> {
        if self.bucket(bucket)?.partition != oid.partition {
            // The bucket was deleted (and perhaps made again) while the body arrived.
            return Err(Error::NoSuchBucket(bucket.to_string()));
        }
        Ok(())
    }

    /// Makes `key` name the object `oid` holds (written whole); returns the sequence number.
    pub fn commit(
        &mut self,
        bucket: &str,
        key: &str,
        oid: Oid,
        meta: dir::ObjectMeta,
        ends_upload: Option<u64>,
    ) -> Result<u64, Error> {
        check_key_and_meta(key, &meta.content_type, &meta.user)?;
        self.check_partition(bucket, oid)?;
        if let Some(id) = ends_upload {
            self.upload(bucket, id, key)?;
        }
        self.log(
            bucket,
            Record::Put {
                key: key.to_string(),
                entry: Entry {
                    object: oid.object,
                    meta,
                },
                ends_upload,
            },
        )
    }

    /// A whole small object in one call: create, write, commit. Returns the sequence number.
    pub fn put_small(
        &mut self,
        bucket: &str,
        key: &str,
        data: &[u8],
        meta: dir::ObjectMeta,
    ) -> Result<u64, Error> {
        check_key_and_meta(key, &meta.content_type, &meta.user)?;
        let oid = self.new_object(bucket)?;
        if let Err(e) = self.write(oid, 0, data) {
            self.discard(oid);
            return Err(e);
        }
        self.commit(bucket, key, oid, meta, None)
    }

    /// Removes a key; `None` if it did not exist (S3 answers success either way).
    pub fn delete(&mut self, bucket: &str, key: &str) -> Result<Option<u64>, Error> {
        if !self.bucket(bucket)?.dir.keys.contains_key(key) {
            return Ok(None);
        }
        self.log(
            bucket,
            Record::Delete {
                key: key.to_string(),
            },
        )
        .map(Some)
    }

    /// A key's entry.
    pub fn lookup(&self, bucket: &str, key: &str) -> Result<(Oid, Entry), Error> {
        let b = self.bucket(bucket)?;
        let e = b.dir.keys.get(key).ok_or_else(|| Error::NoSuchKey {
            bucket: bucket.to_string(),
            key: key.to_string(),
        })?;
        Ok((
            Oid {
                partition: b.partition,
                object: e.object,
            },
            e.clone(),
        ))
    }

    /// Keeps `oid` from being removed until [`Engine::unpin`] (a streaming read or a copy).
    pub fn pin(&mut self, oid: Oid) {
        *self.pins.entry(oid).or_insert(0) += 1;
    }

    /// Ends one pin; removes the object if it was unreferenced meanwhile.
    pub fn unpin(&mut self, oid: Oid) {
        if let Some(n) = self.pins.get_mut(&oid) {
            *n -= 1;
            if *n == 0 {
                self.pins.remove(&oid);
                if self.doomed.remove(&oid) {
                    let _ = self.store.remove(oid);
                }
            }
        }
    }

    /// Makes change `seq` durable: flushes unless a later flush already covered it (group
    /// commit), then removes the objects the durable changes unreferenced.
    pub fn sync(&mut self, seq: u64) -> Result<(), Error> {
        if self.flushed >= seq {
            return Ok(());
        }
        self.flush_now()?;
        let names: Vec<String> = self.buckets.keys().cloned().collect();
        for name in names {
            self.maybe_compact(&name)?;
        }
        Ok(())
    }

    /// FLUSH: every change so far is durable; then the removals that waited for it.
    fn flush_now(&mut self) -> Result<(), Error> {
        self.change(|e| {
            e.store.flush(FlushScope::Device)?;
            e.flushed = e.written;
            e.dirty = false;
            let flushed = e.flushed;
            let (now, later): (Vec<_>, Vec<_>) = std::mem::take(&mut e.pending)
                .into_iter()
                .partition(|(s, _)| *s <= flushed);
            e.pending = later;
            for (_, oid) in now {
                if e.pins.contains_key(&oid) {
                    e.doomed.insert(oid);
                } else {
                    // A failed removal leaves an orphan that the next open removes.
                    let _ = e.store.remove(oid);
                }
            }
            Ok(())
        })
    }

    /// Rewrites a bucket's log as a snapshot once most of it is dead records: new log object,
    /// FLUSH, switch the partition's attribute to it, FLUSH, remove the old one.
    fn maybe_compact(&mut self, bucket: &str) -> Result<(), Error> {
        let Some(b) = self.buckets.get(bucket) else {
            return Ok(());
        };
        let dead = b.dir.dead_records();
        if dead < self.limits.compact_min_dead_records.max(1) || dead < 2 * (b.dir.records - dead) {
            return Ok(());
        }
        let (p, old) = (b.partition, b.log);
        let snapshot = b.dir.snapshot();
        self.change(|e| {
            let new = e.store.create(p, None)?;
            let oid = Oid {
                partition: p,
                object: new,
            };
            let mut bytes = Vec::new();
            for r in &snapshot {
                bytes.extend_from_slice(&r.encode());
            }
            for (i, chunk) in bytes.chunks(CHUNK_BYTES).enumerate() {
                e.store.write(oid, (i * CHUNK_BYTES) as u64, chunk)?;
            }
            e.store.flush(FlushScope::Partition(p))?;
            e.store.set_attr(
                Oid::partition_root(p),
                Attr::User(DIR_ATTR),
                AttrValue::Bytes(new.0.to_le_bytes().to_vec()),
            )?;
            e.store.flush(FlushScope::Partition(p))?;
            let _ = e.store.remove(Oid {
                partition: p,
                object: old,
            });
            if let Some(b) = e.buckets.get_mut(bucket) {
                b.log = new;
                b.log_len = bytes.len() as u64;
                b.dir.records = snapshot.len() as u64;
            }
            Ok(())
        })
    }

    /// Starts a multipart upload; returns its id and the sequence number.
    pub fn create_upload(
        &mut self,
        bucket: &str,
        key: &str,
        content_type: String,
        user: Vec<(String, String)>,
    ) -> Result<(u64, u64), Error> {
        check_key_and_meta(key, &content_type, &user)?;
        let id = self.bucket(bucket)?.dir.next_upload;
        let seq = self.log(
            bucket,
            Record::UploadCreate {
                id,
                upload: Upload {
                    key: key.to_string(),
                    created_ms: now_ms(),
                    content_type,
                    user,
                    parts: BTreeMap::new(),
                },
            },
        )?;
        Ok((id, seq))
    }

    /// An upload in progress, checked against its key.
    pub fn upload(&self, bucket: &str, id: u64, key: &str) -> Result<&Upload, Error> {
        match self.bucket(bucket)?.dir.uploads.get(&id) {
            Some(u) if u.key == key => Ok(u),
            _ => Err(Error::NoSuchUpload(format!("{id:016x}"))),
        }
    }

    /// Records an uploaded part (its object written whole); returns the sequence number.
    pub fn put_part(
        &mut self,
        bucket: &str,
        key: &str,
        id: u64,
        part: NewPart,
    ) -> Result<u64, Error> {
        self.check_partition(bucket, part.oid)?;
        self.upload(bucket, id, key)?;
        self.log(
            bucket,
            Record::UploadPart {
                id,
                number: part.number,
                part: dir::Part {
                    object: part.oid.object,
                    size: part.size,
                    md5: part.md5,
                    modified_ms: now_ms(),
                },
            },
        )
    }

    /// Aborts an upload (its parts are removed once durable); returns the sequence number.
    pub fn abort_upload(&mut self, bucket: &str, key: &str, id: u64) -> Result<u64, Error> {
        self.upload(bucket, id, key)?;
        self.log(bucket, Record::UploadAbort { id })
    }

    /// The partition of a bucket.
    pub fn partition(&self, bucket: &str) -> Result<PartitionId, Error> {
        Ok(self.bucket(bucket)?.partition)
    }

    /// The store (for tests and tools).
    pub fn store_mut(&mut self) -> &mut S {
        &mut self.store
    }
}

/// Removes every object of a partition, then the partition.
fn remove_partition<S: Osd>(s: &mut S, p: PartitionId) -> Result<(), Error> {
    let root = Oid::partition_root(p).object;
    for o in all_objects(s, p)? {
        if o != root {
            s.remove(Oid {
                partition: p,
                object: o,
            })?;
        }
    }
    s.remove_partition(p)?;
    Ok(())
}
