//! Model-based test of the object store against an in-memory oracle: every command, clean
//! reopens, crashes and power cuts in the middle of flash operations (torn programs,
//! interrupted erases), on a device small enough that GC and checkpoints run often, for each
//! placement policy and both index modes, with parity in some cases and every object encrypted
//! in others.
//!
//! The contract checked after a crash: every object that existed at the last completed flush
//! and was not removed or truncated since still exists, each byte it held then reads back as
//! that value or as a value written there since, and it is no longer than its flushed length
//! or the end of a write since; no object comes back that neither existed at the flush nor was
//! created since; every attribute (user attributes and the inode hint) holds its value at the
//! flush or a value set since (the command a cut interrupted included), or is absent on an
//! object created or removed since; fsck is clean. After a clean reopen every object, byte and
//! attribute matches the oracle exactly, as does everything read while the store runs.

use std::collections::{BTreeMap, BTreeSet};

use flash::fault::{CutMode, Faulty};
use flash::{preset, DeviceConfig, Nand};
use fml::FmlConfig;
use osd::{
    Attr, AttrValue, FlushScope, IndexMode, ObjectId, ObjectStore, Oid, Osd, OsdConfig, OsdError,
    PartitionId, Placement,
};
use proptest::prelude::*;

const P: u64 = 0x10000;
const OBJECTS: u64 = 5;
const SPAN: u64 = 48 * 1024;

fn device() -> DeviceConfig {
    let mut c = preset("tiny").unwrap();
    c.geometry.dies_per_channel = 1;
    c.geometry.blocks_per_plane = 32;
    c.geometry.pages_per_block = 8;
    c.gang.units_per_superblock = 1;
    c.endurance_cycles = 1_000_000;
    c
}

fn config(placement: Placement, index_mode: IndexMode) -> OsdConfig {
    OsdConfig {
        placement,
        index_mode,
        buffer_bytes: 16 << 10,
        index_cache_bytes: 8 * 4096,
        unit_map_bytes: 0,
        onode_cache_entries: 4,
        checkpoint_units: 48,
        atime: true,
        // Merge often, so merges, journal pages and their release all happen in short runs.
        atime_merge_pages: 2,
        small_objects: true,
        realtime_update_blocks: 0,
        fresh_update_block_per_object: false,
        default_reliability: 0,
        parity_group_units: 4,
        // Chunks of 4 units when objects are compressed: several per object.
        compression_chunk_units: 4,
        metadata_copies: 1,
        fml: FmlConfig::for_blocks(64),
    }
}

#[derive(Clone, Debug)]
enum Op {
    Create(u64),
    Remove(u64),
    Write {
        obj: u64,
        offset: u64,
        len: u64,
    },
    Append {
        obj: u64,
        len: u64,
    },
    Truncate {
        obj: u64,
        len: u64,
    },
    Read {
        obj: u64,
        offset: u64,
        len: u64,
    },
    /// Sets or clears the inode hint: small data of an inode object lives in its onode.
    SetInode {
        obj: u64,
        on: bool,
    },
    SetAttr {
        obj: u64,
        id: u16,
        len: u8,
    },
    List,
    /// Lists with pages of two, following the continuation token.
    ListPaged,
    /// Creates, lists and removes a second, empty partition.
    PartitionCycle,
    Flush,
    Idle,
    Reopen,
    Crash,
    PowerCut {
        after: u64,
        torn: bool,
    },
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        3 => (0..OBJECTS).prop_map(Op::Create),
        1 => (0..OBJECTS).prop_map(Op::Remove),
        14 => (0..OBJECTS, 0..SPAN, 1u64..16_000).prop_map(|(obj, offset, len)| Op::Write { obj, offset, len }),
        3 => (0..OBJECTS, 1u64..9000).prop_map(|(obj, len)| Op::Append { obj, len }),
        2 => (0..OBJECTS, 0..SPAN).prop_map(|(obj, len)| Op::Truncate { obj, len }),
        4 => (0..OBJECTS, 0..SPAN, 1u64..12_000).prop_map(|(obj, offset, len)| Op::Read { obj, offset, len }),
        2 => (0..OBJECTS, 0x1000u16..0x1004, 0u8..40).prop_map(|(obj, id, len)| Op::SetAttr { obj, id, len }),
        2 => (0..OBJECTS, any::<bool>()).prop_map(|(obj, on)| Op::SetInode { obj, on }),
        // Small writes, so embedded inodes stay embedded for a while.
        3 => (0..OBJECTS, 0u64..160, 1u64..100).prop_map(|(obj, offset, len)| Op::Write { obj, offset, len }),
        // Writes and truncations within a write unit: small objects, packed, spilled, emptied.
        3 => (0..OBJECTS, 0u64..3000, 1u64..1200).prop_map(|(obj, offset, len)| Op::Write { obj, offset, len }),
        1 => (0..OBJECTS, 0u64..3000).prop_map(|(obj, len)| Op::Truncate { obj, len }),
        1 => Just(Op::List),
        1 => Just(Op::ListPaged),
        1 => Just(Op::PartitionCycle),
        2 => Just(Op::Flush),
        1 => Just(Op::Idle),
        1 => Just(Op::Reopen),
        1 => Just(Op::Crash),
        1 => (0u64..60, any::<bool>()).prop_map(|(after, torn)| Op::PowerCut { after, torn }),
    ]
}

#[derive(Clone, Default, Debug)]
struct Obj {
    data: Vec<u8>,
    /// User attributes by id, and [`INODE`] (value `[1]`) while the inode hint is on.
    attrs: BTreeMap<u16, Vec<u8>>,
}

/// The key of the inode hint (`Attr::InodeEmbedded`) in [`Obj::attrs`]: no user id is 0.
const INODE: u16 = 0;
/// An attribute change: the id and the value set (`None`: cleared).
type AttrSet = (u16, Option<Vec<u8>>);
/// Every attribute the oracle tracks.
const TRACKED: [u16; 5] = [INODE, 0x1000, 0x1001, 0x1002, 0x1003];

struct Rig {
    store: Option<ObjectStore<Faulty<Nand>>>,
    cfg: OsdConfig,
    objects: BTreeMap<u64, Obj>,
    /// State at the last completed flush, and writes since (offset, bytes) per object.
    flushed: BTreeMap<u64, Obj>,
    since: BTreeMap<u64, Vec<(u64, Vec<u8>)>>,
    /// Objects removed or truncated since the last flush: their state after a crash is loose.
    loose: BTreeSet<u64>,
    /// Attribute values set since the last flush (the one a cut interrupted included): after a
    /// crash an attribute holds its flushed value or one of these (`None`: cleared).
    attrs_since: BTreeMap<u64, Vec<AttrSet>>,
    /// Objects created or removed since the last flush (a cut command included): after a crash
    /// their attributes may also be those of a fresh object (none set).
    reborn: BTreeSet<u64>,
    stamp: u8,
    /// Every object is encrypted at creation (the master key is given at every open).
    encrypt: bool,
    /// Objects whose create landed but whose `Encryption` attribute did not: a power cut fell
    /// between the two commands, which are not one transaction, so the object stays plain.
    plain: BTreeSet<u64>,
    /// Every object gets this `compression` attribute at creation (0 none).
    compression: u64,
}

fn oid(obj: u64) -> Oid {
    Oid::new(P, P + obj)
}

fn is_power_loss(e: &OsdError) -> bool {
    e.to_string().contains("power is off")
}

impl Rig {
    fn store(&mut self) -> &mut ObjectStore<Faulty<Nand>> {
        self.store.as_mut().unwrap()
    }

    fn bytes(&mut self, len: u64) -> Vec<u8> {
        self.stamp = self.stamp.wrapping_add(1).max(1);
        let s = self.stamp;
        // 16 symbols at random around the stamp: compressed objects' chunks take several units
        // (generations a cut can tear), some chunks raw.
        (0..len)
            .map(|i| {
                let mut z = ((s as u64) << 40 ^ i).wrapping_mul(0x9E37_79B9_7F4A_7C15);
                z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
                z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
                s ^ ((z ^ (z >> 31)) >> 60) as u8
            })
            .collect()
    }

    fn mark_flushed(&mut self) {
        self.flushed = self.objects.clone();
        self.since.clear();
        self.loose.clear();
        self.attrs_since.clear();
        self.reborn.clear();
    }

    fn fsck(&mut self) -> Result<(), TestCaseError> {
        let report = self
            .store()
            .fsck()
            .map_err(|e| TestCaseError::fail(format!("fsck: {e}")))?;
        prop_assert!(report.problems.is_empty(), "fsck: {:?}", report.problems);
        // Parity (when objects have it) matches the data on flash, through crashes too.
        let scrub = self
            .store()
            .scrub(false)
            .map_err(|e| TestCaseError::fail(format!("scrub: {e}")))?;
        prop_assert!(scrub.findings.is_empty(), "scrub: {:?}", scrub.findings);
        Ok(())
    }

    /// Opens the store, restoring power and trying again when a cut lands during recovery.
    fn open(&mut self, mut dev: Faulty<Nand>) -> Result<(), TestCaseError> {
        for _ in 0..100 {
            dev.restore_power();
            match ObjectStore::open_or_return(dev, self.cfg) {
                Ok(mut s) => {
                    if self.encrypt {
                        s.set_master_key(Some(osd::MasterKey::from_bytes([7; 32])));
                    }
                    self.store = Some(s);
                    return Ok(());
                }
                Err((e, Some(d))) if is_power_loss(&e) => dev = d,
                Err((e, _)) => return Err(TestCaseError::fail(format!("recovery: {e}"))),
            }
        }
        Err(TestCaseError::fail("recovery keeps losing power"))
    }

    fn crash_and_check(&mut self) -> Result<(), TestCaseError> {
        let dev = self.store.take().unwrap().crash();
        self.open(dev)?;
        self.fsck()?;
        // Check what the contract promises, then take what the store holds as the new truth.
        let back = self.read_back()?;
        let mut now = BTreeMap::new();
        for obj in 0..OBJECTS {
            let got = back.get(&obj).cloned();
            if let Some(g) = &got {
                let made = self.flushed.contains_key(&obj) || self.reborn.contains(&obj);
                prop_assert!(
                    made,
                    "object {} came back ({} bytes) though it did not exist at the flush and was not created since",
                    obj,
                    g.data.len()
                );
                self.check_attrs_after_crash(obj, g)?;
                // A create since the flush may come back without the `Encryption` attribute
                // set after it (not one transaction, and not flushed): the object stays plain.
                if self.encrypt && self.reborn.contains(&obj) {
                    let enc = self.store().get_attr(oid(obj), Attr::Encryption);
                    if !matches!(enc, Ok(AttrValue::U64(1))) {
                        self.plain.insert(obj);
                    }
                }
            }
            if let (Some(was), false) = (self.flushed.get(&obj), self.loose.contains(&obj)) {
                let Some(g) = &got else {
                    return Err(TestCaseError::fail(format!(
                        "object {obj} flushed, gone after crash"
                    )));
                };
                for (i, &b) in was.data.iter().enumerate() {
                    let i64 = i as u64;
                    let ok = g.data.get(i) == Some(&b)
                        || self.since.get(&obj).is_some_and(|ws| {
                            ws.iter().any(|(o, d)| {
                                i64 >= *o
                                    && i64 < o + d.len() as u64
                                    && g.data.get(i) == Some(&d[(i64 - o) as usize])
                            })
                        });
                    prop_assert!(
                        ok,
                        "object {} byte {}: flushed {}, recovered {:?}",
                        obj,
                        i,
                        b,
                        g.data.get(i)
                    );
                }
                // Neither truncated nor removed since: no longer than its flushed length or
                // the end of a write since, and every byte past the flushed length is zero (a
                // hole) or was written there since.
                let writes = self.since.get(&obj).map_or(&[][..], |w| &w[..]);
                let max = writes
                    .iter()
                    .map(|(o, d)| (o + d.len() as u64) as usize)
                    .fold(was.data.len(), usize::max);
                prop_assert!(
                    g.data.len() <= max,
                    "object {} recovered {} bytes, longer than its flushed {} and every write since (to {})",
                    obj,
                    g.data.len(),
                    was.data.len(),
                    max
                );
                for (i, &b) in g.data.iter().enumerate().skip(was.data.len()) {
                    let i64 = i as u64;
                    let ok = b == 0
                        || writes.iter().any(|(o, d)| {
                            i64 >= *o && i64 < o + d.len() as u64 && d[(i64 - o) as usize] == b
                        });
                    prop_assert!(
                        ok,
                        "object {} byte {} past its flushed length: {} never written there",
                        obj,
                        i,
                        b
                    );
                }
            }
            if let Some(g) = got {
                now.insert(obj, g);
            }
        }
        self.objects = now;
        self.mark_flushed();
        Ok(())
    }

    /// Every object the store holds, with its bytes and tracked attributes.
    fn read_back(&mut self) -> Result<BTreeMap<u64, Obj>, TestCaseError> {
        let mut out = BTreeMap::new();
        for obj in 0..OBJECTS {
            match self.store().get_attr(oid(obj), Attr::LogicalLength) {
                Ok(AttrValue::U64(len)) => {
                    let mut data = vec![0u8; len as usize];
                    let n = self
                        .store()
                        .read(oid(obj), 0, &mut data)
                        .map_err(|e| TestCaseError::fail(format!("read {obj}: {e}")))?;
                    prop_assert_eq!(n as u64, len);
                    let mut attrs = BTreeMap::new();
                    for id in TRACKED {
                        let attr = if id == INODE {
                            Attr::InodeEmbedded
                        } else {
                            Attr::User(id)
                        };
                        match self.store().get_attr(oid(obj), attr) {
                            Ok(AttrValue::Bytes(v)) => {
                                attrs.insert(id, v);
                            }
                            Ok(AttrValue::Bool(true)) if id == INODE => {
                                attrs.insert(id, vec![1]);
                            }
                            Ok(AttrValue::Absent) if id != INODE => {}
                            Ok(AttrValue::Bool(false)) if id == INODE => {}
                            other => {
                                return Err(TestCaseError::fail(format!(
                                    "object {obj} attribute {id:#x}: {other:?}"
                                )))
                            }
                        }
                    }
                    out.insert(obj, Obj { data, attrs });
                }
                Err(OsdError::NotFound(_)) => {}
                Err(e) => return Err(TestCaseError::fail(format!("get_attr {obj}: {e}"))),
                Ok(v) => return Err(TestCaseError::fail(format!("length attribute {v:?}"))),
            }
        }
        Ok(out)
    }

    /// An object back after a crash: each tracked attribute holds its value at the last flush
    /// or one set since; an object created or removed since may also show a fresh object's
    /// (absent).
    fn check_attrs_after_crash(&self, obj: u64, got: &Obj) -> Result<(), TestCaseError> {
        let fresh = !self.flushed.contains_key(&obj) || self.reborn.contains(&obj);
        for id in TRACKED {
            let g = got.attrs.get(&id);
            let mut allowed: Vec<Option<&Vec<u8>>> = Vec::new();
            if let Some(f) = self.flushed.get(&obj) {
                allowed.push(f.attrs.get(&id));
            }
            if fresh {
                allowed.push(None);
            }
            for (i, v) in self.attrs_since.get(&obj).into_iter().flatten() {
                if *i == id {
                    allowed.push(v.as_ref());
                }
            }
            prop_assert!(
                allowed.contains(&g),
                "object {} attribute {:#x} after a crash: {:?}, allowed {:?}",
                obj,
                id,
                g,
                allowed
            );
        }
        Ok(())
    }

    /// After a clean reopen the store holds exactly what the oracle does.
    fn check_exact(&mut self) -> Result<(), TestCaseError> {
        let back = self.read_back()?;
        let have: Vec<&u64> = back.keys().collect();
        let want: Vec<&u64> = self.objects.keys().collect();
        prop_assert_eq!(have, want, "objects after a clean reopen");
        for (obj, g) in &back {
            let w = &self.objects[obj];
            prop_assert!(
                g.data == w.data,
                "object {} after a clean reopen: {} bytes, expected {} (first difference at {:?})",
                obj,
                g.data.len(),
                w.data.len(),
                g.data.iter().zip(&w.data).position(|(a, b)| a != b)
            );
            prop_assert_eq!(
                &g.attrs,
                &w.attrs,
                "object {} attributes after a clean reopen",
                obj
            );
        }
        Ok(())
    }

    /// CREATE, recorded first: cut short by a power loss, it may still have taken effect.
    fn create(&mut self, obj: u64) -> Result<ObjectId, OsdError> {
        self.reborn.insert(obj);
        self.store().create(PartitionId(P), Some(ObjectId(P + obj)))
    }

    fn run(&mut self, op: &Op) -> Result<(), TestCaseError> {
        let r: Result<(), OsdError> = match *op {
            Op::Create(obj) => match self.create(obj) {
                Ok(_) => {
                    prop_assert!(!self.objects.contains_key(&obj), "created {} twice", obj);
                    self.objects.insert(obj, Obj::default());
                    let c = self.compression;
                    let r = if self.encrypt {
                        self.plain.insert(obj);
                        let r =
                            self.store()
                                .set_attr(oid(obj), Attr::Encryption, AttrValue::U64(1));
                        if r.is_ok() {
                            self.plain.remove(&obj);
                        }
                        r
                    } else {
                        Ok(())
                    };
                    if r.is_ok() && c != 0 {
                        self.store()
                            .set_attr(oid(obj), Attr::Compression, AttrValue::U64(c))
                    } else {
                        r
                    }
                }
                Err(OsdError::AlreadyExists(_)) => {
                    prop_assert!(self.objects.contains_key(&obj));
                    Ok(())
                }
                Err(e) => Err(e),
            },
            Op::Remove(obj) => {
                // Cut short by a power loss, the command may still have taken effect.
                self.loose.insert(obj);
                self.reborn.insert(obj);
                match self.store().remove(oid(obj)) {
                    Ok(()) => {
                        prop_assert!(self.objects.remove(&obj).is_some());
                        self.plain.remove(&obj);
                        Ok(())
                    }
                    Err(OsdError::NotFound(_)) => {
                        prop_assert!(!self.objects.contains_key(&obj));
                        Ok(())
                    }
                    Err(e) => Err(e),
                }
            }
            Op::Write { obj, len, .. } | Op::Append { obj, len } => {
                let exists = self.objects.contains_key(&obj);
                let offset = match *op {
                    Op::Write { offset, .. } => offset,
                    _ => self.objects.get(&obj).map_or(0, |o| o.data.len() as u64),
                };
                let data = self.bytes(len);
                let r = match op {
                    Op::Append { .. } => self
                        .store()
                        .append(oid(obj), &data)
                        .map(|at| assert_eq!(at, offset)),
                    _ => self.store().write(oid(obj), offset, &data),
                };
                if exists {
                    let o = self.objects.get_mut(&obj).unwrap();
                    let end = (offset + len) as usize;
                    if o.data.len() < end {
                        o.data.resize(end, 0);
                    }
                    o.data[offset as usize..end].copy_from_slice(&data);
                    self.since.entry(obj).or_default().push((offset, data));
                }
                match r {
                    Err(OsdError::NotFound(_)) if !exists => Ok(()),
                    r => r,
                }
            }
            Op::Truncate { obj, len } => {
                let exists = self.objects.contains_key(&obj);
                // Cut short by a power loss, the command may still have taken effect.
                self.loose.insert(obj);
                match self.store().truncate(oid(obj), len) {
                    Ok(()) => {
                        self.objects
                            .get_mut(&obj)
                            .unwrap()
                            .data
                            .resize(len as usize, 0);
                        Ok(())
                    }
                    Err(OsdError::NotFound(_)) if !exists => Ok(()),
                    Err(e) => Err(e),
                }
            }
            Op::Read { obj, offset, len } => {
                let mut buf = vec![0u8; len as usize];
                match self.store().read(oid(obj), offset, &mut buf) {
                    Ok(n) => {
                        let o = self
                            .objects
                            .get(&obj)
                            .expect("read of an object the oracle lacks");
                        let end = o.data.len().min((offset + len) as usize);
                        let want = if (offset as usize) < end {
                            &o.data[offset as usize..end]
                        } else {
                            &[][..]
                        };
                        prop_assert_eq!(
                            n,
                            want.len(),
                            "read length of object {} at {}",
                            obj,
                            offset
                        );
                        if let Some(i) = (0..n).find(|&i| buf[i] != want[i]) {
                            return Err(TestCaseError::fail(format!(
                                "read of object {obj} at {offset}: byte {} is {}, expected {}",
                                offset as usize + i,
                                buf[i],
                                want[i]
                            )));
                        }
                        Ok(())
                    }
                    Err(OsdError::NotFound(_)) => {
                        prop_assert!(!self.objects.contains_key(&obj));
                        Ok(())
                    }
                    Err(e) => Err(e),
                }
            }
            Op::SetAttr { obj, id, len } => {
                let v = self.bytes(len as u64);
                // Cut short by a power loss, the command may still have taken effect.
                self.attrs_since
                    .entry(obj)
                    .or_default()
                    .push((id, Some(v.clone())));
                match self
                    .store()
                    .set_attr(oid(obj), Attr::User(id), AttrValue::Bytes(v.clone()))
                {
                    Ok(()) => {
                        self.objects.get_mut(&obj).unwrap().attrs.insert(id, v);
                        Ok(())
                    }
                    Err(OsdError::NotFound(_)) => Ok(()),
                    Err(OsdError::InvalidArgument(m)) if m.contains("do not fit") => Ok(()),
                    Err(e) => Err(e),
                }
            }
            Op::SetInode { obj, on } => {
                let v = on.then(|| vec![1]);
                self.attrs_since
                    .entry(obj)
                    .or_default()
                    .push((INODE, v.clone()));
                match self
                    .store()
                    .set_attr(oid(obj), Attr::InodeEmbedded, AttrValue::Bool(on))
                {
                    Ok(()) => {
                        let o = self.objects.get_mut(&obj).unwrap();
                        match v {
                            Some(v) => o.attrs.insert(INODE, v),
                            None => o.attrs.remove(&INODE),
                        };
                        Ok(())
                    }
                    Err(OsdError::NotFound(_)) => Ok(()),
                    Err(e) => Err(e),
                }
            }
            Op::List => match self.store().list(PartitionId(P), 0, 100) {
                Ok((ids, _)) => {
                    let want: Vec<ObjectId> =
                        self.objects.keys().map(|o| ObjectId(P + o)).collect();
                    prop_assert_eq!(ids, want);
                    Ok(())
                }
                Err(e) => Err(e),
            },
            Op::ListPaged => {
                let mut all = Vec::new();
                let mut token = 0;
                loop {
                    match self.store().list(PartitionId(P), token, 2) {
                        Ok((ids, next)) => {
                            prop_assert!(ids.len() <= 2);
                            all.extend(ids);
                            match next {
                                Some(t) => token = t,
                                None => break,
                            }
                        }
                        Err(e) => return self.fail_or_crash(op, e),
                    }
                }
                let want: Vec<ObjectId> = self.objects.keys().map(|o| ObjectId(P + o)).collect();
                prop_assert_eq!(all, want);
                Ok(())
            }
            Op::PartitionCycle => {
                let q = PartitionId(P + 7);
                let r = (|| {
                    // A crash in an earlier cycle may have left it behind.
                    if let Err(OsdError::AlreadyExists(_)) = self.store().create_partition(Some(q))
                    {
                        self.store().remove_partition(q)?;
                        self.store().create_partition(Some(q))?;
                    }
                    let parts = self.store().list_partitions(0, 10)?.0;
                    assert!(
                        parts.contains(&q) && parts.contains(&PartitionId(P)),
                        "partitions {parts:?}"
                    );
                    assert!(matches!(
                        self.store().create_partition(Some(q)),
                        Err(OsdError::AlreadyExists(_))
                    ));
                    self.store().remove_partition(q)?;
                    let parts = self.store().list_partitions(0, 10)?.0;
                    assert!(
                        !parts.contains(&q),
                        "removed partition still listed: {parts:?}"
                    );
                    if !self.objects.is_empty() {
                        let e = self.store().remove_partition(PartitionId(P));
                        assert!(
                            matches!(e, Err(OsdError::InvalidArgument(_))),
                            "removing a partition with objects: {e:?}"
                        );
                    }
                    Ok(())
                })();
                r
            }
            Op::Flush => {
                let r = self.store().flush(FlushScope::Device);
                if r.is_ok() {
                    self.mark_flushed();
                }
                r
            }
            Op::Idle => {
                let t = self.store().now();
                self.store().background(t, t + 50_000_000).map(|_| ())
            }
            Op::Reopen => match self.store().checkpoint() {
                Ok(_) => {
                    self.mark_flushed();
                    let dev = self.store.take().unwrap().crash();
                    self.open(dev)?;
                    self.fsck()?;
                    self.check_exact()?;
                    Ok(())
                }
                Err(e) => Err(e),
            },
            Op::Crash => return self.crash_and_check(),
            Op::PowerCut { after, torn } => {
                self.store()
                    .device_mut()
                    .cut_power_after(after, if torn { CutMode::Torn } else { CutMode::Clean });
                Ok(())
            }
        };
        match r {
            Ok(()) => Ok(()),
            Err(e) => self.fail_or_crash(op, e),
        }
    }

    fn fail_or_crash(&mut self, op: &Op, e: OsdError) -> Result<(), TestCaseError> {
        if is_power_loss(&e) {
            self.crash_and_check()
        } else {
            Err(TestCaseError::fail(format!("{op:?}: {e}")))
        }
    }
}

fn rig(cfg: OsdConfig) -> Rig {
    rig_with(cfg, false, 0)
}

fn rig_with(cfg: OsdConfig, encrypt: bool, compression: u64) -> Rig {
    let mut store =
        ObjectStore::format(Faulty::new(Nand::in_memory(device()).unwrap()), cfg).unwrap();
    store.set_master_key(Some(osd::MasterKey::from_bytes([7; 32])));
    store.create_partition(Some(PartitionId(P))).unwrap();
    store.flush(FlushScope::Device).unwrap();
    Rig {
        store: Some(store),
        cfg,
        objects: BTreeMap::new(),
        flushed: BTreeMap::new(),
        since: BTreeMap::new(),
        loose: Default::default(),
        attrs_since: BTreeMap::new(),
        reborn: BTreeSet::new(),
        stamp: 0,
        encrypt,
        plain: BTreeSet::new(),
        compression,
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 200, ..ProptestConfig::default() })]

    #[test]
    fn store_matches_the_oracle(
        placement in prop_oneof![Just(Placement::One), Just(Placement::Semantic), Just(Placement::Split), Just(Placement::SplitAtime)],
        extents in any::<bool>(),
        small_objects in any::<bool>(),
        reliability in prop_oneof![2 => Just(0u8), 2 => Just(1u8), 1 => Just(2u8)],
        encrypt in any::<bool>(),
        compression in prop_oneof![3 => Just(0u64), 1 => Just(1u64), 1 => Just(2u64), 1 => Just(3u64)],
        copies in prop_oneof![2 => Just(1u8), 1 => Just(2u8)],
        // The unit map off, small enough that objects are let go of mid-run, or large.
        unit_map_bytes in prop_oneof![2 => Just(0u64), 1 => Just(24 * 5u64), 1 => Just(1u64 << 20)],
        ops in prop::collection::vec(op(), 1..600),
    ) {
        let mode = if extents { IndexMode::Extent } else { IndexMode::Page };
        // Encryption and parity are not combined: a case without parity encrypts every object
        // half the time (a fifth of all cases).
        let mut rig = rig_with(OsdConfig {
            small_objects,
            default_reliability: reliability,
            metadata_copies: copies,
            unit_map_bytes,
            ..config(placement, mode)
        }, encrypt && reliability == 0, if reliability == 0 { compression } else { 0 });
        for op in &ops {
            rig.run(op)?;
        }
        // A cut still pending would land in fsck's checkpoint: cancel it first.
        rig.store().device_mut().restore_power();
        rig.fsck()?;
        if rig.encrypt {
            // Every object was encrypted (and read back right above, through every crash).
            let objs: Vec<u64> = rig
                .objects
                .keys()
                .copied()
                .filter(|o| !rig.plain.contains(o))
                .collect();
            for obj in objs {
                prop_assert_eq!(
                    rig.store().get_attr(oid(obj), Attr::Encryption).unwrap(),
                    AttrValue::U64(1)
                );
            }
        }
    }
}

#[test]
fn basic_round_trip_reopen_and_attributes() {
    let cfg = config(Placement::Semantic, IndexMode::Extent);
    let mut r = rig(cfg);
    let s = r.store();
    let o = s.create(PartitionId(P), None).unwrap();
    assert!(o.0 >= P);
    let oid = Oid {
        partition: PartitionId(P),
        object: o,
    };
    let data: Vec<u8> = (0..100_000u32).map(|i| (i * 7) as u8).collect();
    s.write(oid, 0, &data).unwrap();
    assert_eq!(s.append(oid, b"tail").unwrap(), 100_000);
    s.set_attr(oid, Attr::User(0x1234), AttrValue::Bytes(b"v".to_vec()))
        .unwrap();
    s.set_attr(oid, Attr::Priority, AttrValue::U64(3)).unwrap();
    let dev = r.store.take().unwrap().close().unwrap();
    let mut s = ObjectStore::open(dev, cfg).unwrap();
    let mut back = vec![0u8; 100_004];
    assert_eq!(s.read(oid, 0, &mut back).unwrap(), 100_004);
    assert_eq!(&back[..100_000], &data[..]);
    assert_eq!(&back[100_000..], b"tail");
    assert_eq!(
        s.get_attr(oid, Attr::User(0x1234)).unwrap(),
        AttrValue::Bytes(b"v".to_vec())
    );
    assert_eq!(s.get_attr(oid, Attr::Priority).unwrap(), AttrValue::U64(3));
    assert_eq!(
        s.get_attr(oid, Attr::UsedCapacity).unwrap(),
        AttrValue::U64(25 * 4096)
    );
    assert!(matches!(
        s.create(PartitionId(P), Some(o)),
        Err(OsdError::AlreadyExists(_))
    ));
    assert!(matches!(
        s.create(PartitionId(P), Some(ObjectId(5))),
        Err(OsdError::InvalidArgument(_))
    ));
    assert!(matches!(
        s.read(Oid::new(P, 0x99999), 0, &mut back),
        Err(OsdError::NotFound(_))
    ));
    let report = s.fsck().unwrap();
    assert!(report.problems.is_empty(), "{:?}", report.problems);
}

/// OSCM-11 IV: under split+atime a read journals the access time instead of rewriting the
/// onode; the time is visible at once, merged into the onode at a checkpoint or when the object
/// is written, and survives a reopen and a crash after a flush.
#[test]
fn access_times_are_journaled_under_split_atime() {
    let cfg = config(Placement::SplitAtime, IndexMode::Extent);
    let mut r = rig(cfg);
    let s = r.store();
    let o = s.create(PartitionId(P), None).unwrap();
    let oid = Oid {
        partition: PartitionId(P),
        object: o,
    };
    s.write(oid, 0, b"hello").unwrap();
    s.flush(FlushScope::Device).unwrap();
    let pages_before = s.stats().descriptor_pages_written;
    s.set_time(5_000_000_000);
    let mut buf = [0u8; 5];
    s.read(oid, 0, &mut buf).unwrap();
    let AttrValue::U64(t) = s.get_attr(oid, Attr::AccessedTime).unwrap() else {
        panic!()
    };
    assert!(
        t >= 5_000_000_000,
        "access time {t} not updated by the read"
    );
    s.flush(FlushScope::Device).unwrap();
    assert_eq!(
        s.stats().descriptor_pages_written,
        pages_before,
        "a read rewrote the onode under split+atime"
    );
    let dev = r.store.take().unwrap().crash();
    let mut s = ObjectStore::open(dev, cfg).unwrap();
    let AttrValue::U64(t2) = s.get_attr(oid, Attr::AccessedTime).unwrap() else {
        panic!()
    };
    assert_eq!(t2, t, "journaled access time lost in a crash after a flush");
    let report = s.fsck().unwrap();
    assert!(report.problems.is_empty(), "{:?}", report.problems);
    // Under `split` the same read rewrites the onode.
    let cfg = config(Placement::Split, IndexMode::Extent);
    let mut r = rig(cfg);
    let s = r.store();
    let o = s.create(PartitionId(P), None).unwrap();
    let oid = Oid {
        partition: PartitionId(P),
        object: o,
    };
    s.write(oid, 0, b"hello").unwrap();
    s.flush(FlushScope::Device).unwrap();
    let pages_before = s.stats().descriptor_pages_written;
    s.read(oid, 0, &mut buf).unwrap();
    s.flush(FlushScope::Device).unwrap();
    assert!(s.stats().descriptor_pages_written > pages_before);
}

/// Pending access times wait for a full page or a device-wide FLUSH: a removal's internal
/// flush and an object's FLUSH write no partial atime page (one per PostMark delete outweighed
/// the onode rewrites split+atime saves, OSCM-11 V-A).
#[test]
fn only_a_device_flush_writes_a_partial_atime_page() {
    let cfg = config(Placement::SplitAtime, IndexMode::Extent);
    let mut r = rig(cfg);
    let s = r.store();
    let mut oids = Vec::new();
    for _ in 0..3 {
        let o = s.create(PartitionId(P), None).unwrap();
        let oid = Oid {
            partition: PartitionId(P),
            object: o,
        };
        s.write(oid, 0, b"hello").unwrap();
        oids.push(oid);
    }
    s.flush(FlushScope::Device).unwrap();
    let before = s.stats().atime_pages_written;
    let mut buf = [0u8; 5];
    s.read(oids[0], 0, &mut buf).unwrap();
    s.remove(oids[2]).unwrap();
    s.flush(FlushScope::Object(oids[1])).unwrap();
    assert_eq!(s.stats().atime_pages_written, before);
    s.flush(FlushScope::Device).unwrap();
    assert_eq!(s.stats().atime_pages_written, before + 1);
}

/// An access time journaled for an object that is then removed must not bring the object back
/// when recovery replays the journal page (found by the model test under split+atime).
#[test]
fn a_journaled_access_time_does_not_revive_a_removed_object() {
    for index in [IndexMode::Extent, IndexMode::Page] {
        let cfg = config(Placement::SplitAtime, index);
        let mut r = rig(cfg);
        let s = r.store();
        let o = s.create(PartitionId(P), None).unwrap();
        let oid = Oid {
            partition: PartitionId(P),
            object: o,
        };
        s.write(oid, 0, &[1u8; 3000]).unwrap();
        s.flush(FlushScope::Device).unwrap();
        let mut buf = [0u8; 10];
        s.read(oid, 0, &mut buf).unwrap();
        s.flush(FlushScope::Device).unwrap();
        s.remove(oid).unwrap();
        let dev = r.store.take().unwrap().crash();
        let mut s = ObjectStore::open(dev, cfg).unwrap();
        let (listed, _) = s.list(PartitionId(P), 0, 100).unwrap();
        assert!(
            !listed.contains(&o),
            "{index:?}: removed object listed after a crash"
        );
        assert!(s.get_attr(oid, Attr::AccessedTime).is_err(), "{index:?}");
    }
}

/// OSCM-11 V-D: an object hinted as an inode keeps its small data within its onode (no data
/// unit written or read), survives a reopen, and spills to a data unit once it outgrows the
/// onode.
#[test]
fn inodes_are_embedded_in_their_onodes() {
    let cfg = config(Placement::Split, IndexMode::Extent);
    let mut r = rig(cfg);
    let s = r.store();
    let o = s.create(PartitionId(P), None).unwrap();
    let oid = Oid {
        partition: PartitionId(P),
        object: o,
    };
    s.set_attr(oid, Attr::InodeEmbedded, AttrValue::Bool(true))
        .unwrap();
    s.write(oid, 0, &[7u8; 100]).unwrap();
    s.flush(FlushScope::Device).unwrap();
    assert_eq!(
        s.stats().data_units_written,
        0,
        "an embedded inode wrote a data unit"
    );
    assert_eq!(
        s.get_attr(oid, Attr::UsedCapacity).unwrap(),
        AttrValue::U64(0)
    );
    let dev = r.store.take().unwrap().close().unwrap();
    let mut s = ObjectStore::open(dev, cfg).unwrap();
    let mut buf = [0u8; 200];
    assert_eq!(s.read(oid, 0, &mut buf).unwrap(), 100);
    assert_eq!(&buf[..100], &[7u8; 100][..]);
    assert_eq!(
        s.stats().data_units_read,
        0,
        "reading an embedded inode read a data unit"
    );
    // Outgrowing the onode moves the data into a data unit.
    s.write(oid, 100, &[9u8; 200]).unwrap();
    s.flush(FlushScope::Device).unwrap();
    assert!(s.stats().data_units_written > 0);
    let mut buf = [0u8; 300];
    assert_eq!(s.read(oid, 0, &mut buf).unwrap(), 300);
    assert_eq!(&buf[..100], &[7u8; 100][..]);
    assert_eq!(&buf[100..], &[9u8; 200][..]);
    let report = s.fsck().unwrap();
    assert!(report.problems.is_empty(), "{:?}", report.problems);
}

/// OSCM-11 V-D: with the small-object buffer, objects shorter than a page share pages (200
/// objects of 300 bytes fit in 15 pages instead of taking 200 data units), read back after a
/// crash that follows a flush, spill into data units when they grow past a page, and become
/// small again once emptied.
#[test]
fn small_objects_share_pages() {
    let run = |small_objects: bool| {
        let cfg = OsdConfig {
            small_objects,
            ..config(Placement::Split, IndexMode::Extent)
        };
        let mut r = rig(cfg);
        let s = r.store();
        let before = s.stats();
        let objs: Vec<Oid> = (0..200)
            .map(|i| {
                let o = s
                    .create(PartitionId(P), Some(ObjectId(P + 100 + i)))
                    .unwrap();
                let oid = Oid {
                    partition: PartitionId(P),
                    object: o,
                };
                s.write(oid, 0, &[i as u8; 300]).unwrap();
                oid
            })
            .collect();
        s.flush(FlushScope::Device).unwrap();
        let after = s.stats();
        let dev = r.store.take().unwrap().crash();
        let mut s = ObjectStore::open(dev, cfg).unwrap();
        for (i, oid) in objs.iter().enumerate() {
            let mut back = [0u8; 400];
            assert_eq!(s.read(*oid, 0, &mut back).unwrap(), 300);
            assert!(back[..300].iter().all(|&b| b == i as u8), "object {i}");
            assert_eq!(
                s.get_attr(*oid, Attr::UsedCapacity).unwrap(),
                AttrValue::U64(if small_objects { 300 } else { 4096 })
            );
        }
        let report = s.fsck().unwrap();
        assert!(report.problems.is_empty(), "{:?}", report.problems);
        (
            after.data_units_written - before.data_units_written,
            after.small_pages_written - before.small_pages_written,
            s,
            objs,
        )
    };
    let (units, pages, _, _) = run(false);
    assert_eq!((units, pages), (200, 0));
    let (units, pages, mut s, objs) = run(true);
    // 328 bytes per entry, 12 per 4 KiB page.
    assert_eq!((units, pages), (0, 17));
    // Outgrowing a page spills into data units; emptying makes the object small again.
    let o = objs[7];
    s.write(o, 300, &[9u8; 5000]).unwrap();
    let mut back = vec![0u8; 6000];
    assert_eq!(s.read(o, 0, &mut back).unwrap(), 5300);
    assert!(back[..300].iter().all(|&b| b == 7) && back[300..5300].iter().all(|&b| b == 9));
    s.flush(FlushScope::Device).unwrap();
    assert_eq!(
        s.get_attr(o, Attr::UsedCapacity).unwrap(),
        AttrValue::U64(2 * 4096)
    );
    let units = s.stats().data_units_written;
    s.truncate(o, 0).unwrap();
    s.write(o, 0, b"small again").unwrap();
    s.flush(FlushScope::Device).unwrap();
    assert_eq!(s.stats().data_units_written, units);
    let dev = s.crash();
    let cfg = config(Placement::Split, IndexMode::Extent);
    let mut s = ObjectStore::open(dev, cfg).unwrap();
    assert_eq!(s.read(o, 0, &mut back).unwrap(), 11);
    assert_eq!(&back[..11], b"small again");
    let report = s.fsck().unwrap();
    assert!(report.problems.is_empty(), "{:?}", report.problems);
}
