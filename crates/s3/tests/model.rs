//! The key directory against an in-memory oracle (a `BTreeMap`), with proptest: puts,
//! overwrites, deletes, multipart uploads, listings with prefixes, delimiters and pages,
//! clean reopens, and crashes (the store handed back without a checkpoint, as a power cut
//! leaves it). After a crash the keys must be exactly the durable state plus some prefix of
//! the changes not yet synced; every key's bytes must be the ones written for it; no object is
//! left that no key, part or log references; the log is compacted often (small threshold).

use std::collections::BTreeMap;

use flash::Nand;
use fml::FmlConfig;
use osd::{ObjectStore, Oid, Osd, OsdConfig};
use proptest::prelude::*;
use s3::dir::{Etag, ObjectMeta};
use s3::engine::NewPart;
use s3::{Engine, Limits};

type Store = ObjectStore<Nand>;

const BUCKET: &str = "model";
const KEYS: [&str; 8] = ["a", "a/b", "a/c/d", "a/c/e", "b", "b/x", "c", "é/1"];

fn config(device: &flash::DeviceConfig) -> OsdConfig {
    OsdConfig {
        fml: FmlConfig::for_blocks(device.gang.superblocks(&device.geometry)),
        ..OsdConfig::default()
    }
}

fn device() -> flash::DeviceConfig {
    let mut d = flash::preset("tiny").unwrap();
    d.geometry.blocks_per_plane = 128;
    d
}

fn limits() -> Limits {
    Limits {
        compact_min_dead_records: 6,
        ..Limits::default()
    }
}

fn payload(key: &str, version: u64) -> Vec<u8> {
    let len = (version * 977 % 9000) as usize;
    let seed = key
        .bytes()
        .fold(version, |h, b| h.wrapping_mul(31) ^ b as u64);
    (0..len).map(|i| (seed as usize + i * 7) as u8).collect()
}

fn meta(data: &[u8], version: u64) -> ObjectMeta {
    use md5::{Digest, Md5};
    ObjectMeta {
        size: data.len() as u64,
        etag: Etag {
            md5: Md5::digest(data).into(),
            parts: 0,
        },
        modified_ms: 1,
        content_type: "application/x-test".into(),
        user: vec![("version".into(), version.to_string())],
    }
}

#[derive(Clone, Debug)]
enum Op {
    Put {
        key: usize,
        sync: bool,
    },
    Delete {
        key: usize,
        sync: bool,
    },
    /// Multipart: create an upload for a key, upload `parts` parts, complete it.
    Multipart {
        key: usize,
        parts: u8,
    },
    /// Create an upload and abort it.
    Abort {
        key: usize,
    },
    List {
        prefix: usize,
        delimiter: bool,
        max: usize,
    },
    Reopen,
    Crash,
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        6 => (0..KEYS.len(), any::<bool>()).prop_map(|(key, sync)| Op::Put { key, sync }),
        2 => (0..KEYS.len(), any::<bool>()).prop_map(|(key, sync)| Op::Delete { key, sync }),
        1 => (0..KEYS.len(), 1u8..4).prop_map(|(key, parts)| Op::Multipart { key, parts }),
        1 => (0..KEYS.len()).prop_map(|key| Op::Abort { key }),
        2 => (0..4usize, any::<bool>(), 1..4usize).prop_map(|(prefix, delimiter, max)| Op::List { prefix, delimiter, max }),
        1 => Just(Op::Reopen),
        2 => Just(Op::Crash),
    ]
}

/// Key -> version of its bytes.
type Model = BTreeMap<String, u64>;

#[derive(Clone, Debug)]
enum Change {
    Put(String, u64),
    Delete(String),
}

fn apply(m: &mut Model, c: &Change) {
    match c {
        Change::Put(k, v) => {
            m.insert(k.clone(), *v);
        }
        Change::Delete(k) => {
            m.remove(k);
        }
    }
}

struct Harness {
    engine: Option<Engine<Store>>,
    durable: Model,
    pending: Vec<Change>,
    version: u64,
}

impl Harness {
    fn e(&mut self) -> &mut Engine<Store> {
        self.engine.as_mut().unwrap()
    }

    fn state(&mut self) -> Model {
        let dir = self.e().directory(BUCKET).unwrap().clone();
        dir.keys
            .iter()
            .map(|(k, e)| {
                let v = e.meta.user[0].1.parse().unwrap();
                (k.clone(), v)
            })
            .collect()
    }

    fn expected(&self) -> Model {
        let mut m = self.durable.clone();
        for c in &self.pending {
            apply(&mut m, c);
        }
        m
    }

    fn sync_all(&mut self) {
        self.e().sync(u64::MAX).unwrap();
        let m = self.expected();
        self.durable = m;
        self.pending.clear();
    }

    fn change(&mut self, c: Change, seq: Option<u64>, sync: bool) {
        self.pending.push(c);
        // A delete of a missing key changes nothing and has nothing to sync.
        if let (true, Some(seq)) = (sync, seq) {
            self.e().sync(seq).unwrap();
            // Sync is group commit: everything written before is durable too.
            let m = self.expected();
            self.durable = m;
            self.pending.clear();
        }
    }

    /// Every key's bytes and metadata are the ones written; no orphaned objects.
    fn check_contents(&mut self) -> Result<(), TestCaseError> {
        let model = self.state();
        let p = self.e().partition(BUCKET).unwrap();
        for (k, v) in &model {
            let (oid, entry) = self.e().lookup(BUCKET, k).unwrap();
            let want = payload(k, *v);
            let mut buf = vec![0u8; want.len() + 1];
            let n = self.e().read(oid, 0, &mut buf).unwrap();
            prop_assert_eq!(&buf[..n], &want[..], "bytes of {}", k);
            prop_assert_eq!(entry.meta.size, want.len() as u64);
        }
        let dir = self.e().directory(BUCKET).unwrap().clone();
        let referenced = dir.referenced().count();
        let (objects, _) = self.e().store_mut().list(p, 0, 100_000).unwrap();
        let root = Oid::partition_root(p).object;
        let stored = objects.iter().filter(|o| **o != root).count();
        // Objects still waiting for removal after a sync are removed by the next open; after an
        // open the count is exact: referenced + the log object.
        prop_assert!(
            stored > referenced,
            "{stored} objects for {referenced} references"
        );
        Ok(())
    }

    fn reopen(&mut self, crash: bool) -> Result<(), TestCaseError> {
        let engine = self.engine.take().unwrap();
        let store = if crash {
            // A power cut: the engine's pending removals and the store's buffers are lost.
            engine.abandon().crash()
        } else {
            engine.close().unwrap().close().unwrap()
        };
        let store = ObjectStore::open(store, config(&device())).unwrap();
        self.engine = Some(Engine::open(store, limits()).unwrap());
        let got = self.state();
        if crash {
            let mut m = self.durable.clone();
            let mut ok = m == got;
            for c in &self.pending {
                apply(&mut m, c);
                ok |= m == got;
            }
            prop_assert!(
                ok,
                "after a crash: {:?} is not durable {:?} plus a prefix of {:?}",
                got,
                self.durable,
                self.pending
            );
        } else {
            prop_assert_eq!(&got, &self.expected());
        }
        self.durable = got;
        self.pending.clear();
        // After an open, exactly the referenced objects and the log remain.
        let p = self.e().partition(BUCKET).unwrap();
        let referenced = self.e().directory(BUCKET).unwrap().referenced().count();
        let (objects, _) = self.e().store_mut().list(p, 0, 100_000).unwrap();
        let root = Oid::partition_root(p).object;
        let stored = objects.iter().filter(|o| **o != root).count();
        prop_assert_eq!(stored, referenced + 1, "orphans left after open");
        self.check_contents()
    }
}

fn fresh_store() -> Store {
    let d = device();
    ObjectStore::format(Nand::in_memory(d).unwrap(), config(&d)).unwrap()
}

/// The oracle's listing: a plain scan of every key.
fn oracle_list(
    m: &Model,
    prefix: &str,
    delimiter: Option<&str>,
    after: Option<&str>,
) -> Vec<(bool, String)> {
    let mut out: Vec<(bool, String)> = Vec::new();
    for k in m.keys() {
        if !k.starts_with(prefix) || after.is_some_and(|a| k.as_str() <= a) {
            continue;
        }
        let item = match delimiter.and_then(|d| k[prefix.len()..].find(d).map(|i| (d, i))) {
            Some((d, i)) => (true, k[..prefix.len() + i + d.len()].to_string()),
            None => (false, k.clone()),
        };
        if Some(item.1.as_str()) == after || out.last() == Some(&item) {
            continue;
        }
        out.push(item);
    }
    out
}

fn run(ops: Vec<Op>) -> Result<(), TestCaseError> {
    let store = fresh_store();
    let mut engine = Engine::open(store, limits()).unwrap();
    engine.create_bucket(BUCKET).unwrap();
    let mut h = Harness {
        engine: Some(engine),
        durable: Model::new(),
        pending: Vec::new(),
        version: 0,
    };
    for op in ops {
        match op {
            Op::Put { key, sync } => {
                h.version += 1;
                let v = h.version;
                let k = KEYS[key];
                let data = payload(k, v);
                let seq = h.e().put_small(BUCKET, k, &data, meta(&data, v)).unwrap();
                h.change(Change::Put(k.into(), v), Some(seq), sync);
            }
            Op::Delete { key, sync } => {
                let k = KEYS[key];
                let seq = h.e().delete(BUCKET, k).unwrap();
                h.change(Change::Delete(k.into()), seq, sync);
            }
            Op::Multipart { key, parts } => {
                h.version += 1;
                let v = h.version;
                let k = KEYS[key];
                let data = payload(k, v);
                let (id, _) = h
                    .e()
                    .create_upload(BUCKET, k, String::new(), vec![])
                    .unwrap();
                let chunk = data.len().div_ceil(parts as usize).max(1);
                let mut pieces: Vec<&[u8]> = data.chunks(chunk).collect();
                if pieces.is_empty() {
                    pieces.push(&[]);
                }
                for (i, piece) in pieces.iter().enumerate() {
                    let o = h.e().new_object(BUCKET).unwrap();
                    h.e().write(o, 0, piece).unwrap();
                    let part = NewPart {
                        number: i as u32 + 1,
                        oid: o,
                        size: piece.len() as u64,
                        md5: [0; 16],
                    };
                    h.e().put_part(BUCKET, k, id, part).unwrap();
                }
                // Complete as the service does: concatenate the parts into a new object.
                let up = h.e().upload(BUCKET, id, k).unwrap().clone();
                let p = h.e().partition(BUCKET).unwrap();
                let dst = h.e().new_object(BUCKET).unwrap();
                let mut at = 0;
                for part in up.parts.values() {
                    let mut buf = vec![0u8; part.size as usize];
                    let n = h
                        .e()
                        .read(
                            Oid {
                                partition: p,
                                object: part.object,
                            },
                            0,
                            &mut buf,
                        )
                        .unwrap();
                    prop_assert_eq!(n, buf.len());
                    h.e().write(dst, at, &buf).unwrap();
                    at += n as u64;
                }
                let seq = h
                    .e()
                    .commit(BUCKET, k, dst, meta(&data, v), Some(id))
                    .unwrap();
                h.change(Change::Put(k.into(), v), Some(seq), true);
                prop_assert!(h.e().upload(BUCKET, id, k).is_err());
            }
            Op::Abort { key } => {
                let k = KEYS[key];
                let (id, _) = h
                    .e()
                    .create_upload(BUCKET, k, String::new(), vec![])
                    .unwrap();
                let o = h.e().new_object(BUCKET).unwrap();
                h.e().write(o, 0, b"part").unwrap();
                let part = NewPart {
                    number: 1,
                    oid: o,
                    size: 4,
                    md5: [0; 16],
                };
                h.e().put_part(BUCKET, k, id, part).unwrap();
                let seq = h.e().abort_upload(BUCKET, k, id).unwrap();
                h.e().sync(seq).unwrap();
                h.sync_all();
            }
            Op::List {
                prefix,
                delimiter,
                max,
            } => {
                let prefix = ["", "a", "a/", "a/c/"][prefix];
                let delimiter = delimiter.then_some("/");
                let model = h.expected();
                let want = oracle_list(&model, prefix, delimiter, None);
                let mut got = Vec::new();
                let mut after: Option<String> = None;
                loop {
                    let page = h.e().directory(BUCKET).unwrap().list(
                        prefix,
                        delimiter,
                        after.as_deref(),
                        max,
                    );
                    prop_assert!(page.entries.len() + page.prefixes.len() <= max);
                    let mut items: Vec<(bool, String)> = page
                        .entries
                        .iter()
                        .map(|(k, _)| (false, k.clone()))
                        .chain(page.prefixes.iter().map(|p| (true, p.clone())))
                        .collect();
                    items.sort_by(|a, b| a.1.cmp(&b.1));
                    got.extend(items);
                    if !page.truncated {
                        break;
                    }
                    after = page.last.clone();
                }
                prop_assert_eq!(&got, &want, "prefix {:?} delimiter {:?}", prefix, delimiter);
            }
            Op::Reopen => h.reopen(false)?,
            Op::Crash => h.reopen(true)?,
        }
    }
    h.sync_all();
    h.reopen(false)
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

    #[test]
    fn key_directory_matches_the_oracle(ops in proptest::collection::vec(op(), 1..60)) {
        run(ops)?;
    }
}

#[test]
fn listing_rolls_up_and_pages() {
    let mut e = Engine::open(fresh_store(), limits()).unwrap();
    e.create_bucket(BUCKET).unwrap();
    for (i, k) in KEYS.iter().enumerate() {
        let d = payload(k, i as u64);
        e.put_small(BUCKET, k, &d, meta(&d, i as u64)).unwrap();
    }
    let dir = e.directory(BUCKET).unwrap();
    let page = dir.list("", Some("/"), None, 1000);
    let keys: Vec<&str> = page.entries.iter().map(|(k, _)| k.as_str()).collect();
    assert_eq!(keys, ["a", "b", "c"]);
    assert_eq!(page.prefixes, ["a/", "b/", "é/"]);
    let page = dir.list("a/", Some("/"), None, 1);
    assert_eq!(page.entries.len(), 1);
    assert!(page.truncated);
    let page = dir.list("a/", Some("/"), page.last.as_deref(), 5);
    assert_eq!(page.prefixes, ["a/c/"]);
    assert!(!page.truncated);
}

#[test]
fn overwrites_compact_the_log_and_survive_reopen() {
    let mut e = Engine::open(fresh_store(), limits()).unwrap();
    e.create_bucket(BUCKET).unwrap();
    for v in 1..=50u64 {
        let d = payload("k", v);
        let seq = e.put_small(BUCKET, "k", &d, meta(&d, v)).unwrap();
        e.sync(seq).unwrap();
    }
    let records = e.directory(BUCKET).unwrap().records;
    assert!(records < 20, "{records} records: the log was not compacted");
    let store = e.close().unwrap().close().unwrap();
    let store = ObjectStore::open(store, config(&device())).unwrap();
    let mut e = Engine::open(store, limits()).unwrap();
    let (oid, entry) = e.lookup(BUCKET, "k").unwrap();
    assert_eq!(entry.meta.user[0].1, "50");
    let want = payload("k", 50);
    let mut buf = vec![0u8; want.len()];
    e.read(oid, 0, &mut buf).unwrap();
    assert_eq!(buf, want);
}
