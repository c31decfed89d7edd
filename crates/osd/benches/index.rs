//! CPU time of the object store's index (`osd::index::Index`, the copy-on-write B+tree)
//! against a `BTreeMap` holding the same entries: floor look-ups, inserts, removals and
//! range scans over a tree of data extents, all nodes in memory (nodes live in a `Vec`, as
//! the flash would hold them; the cache holds every node). Run:
//! `cargo bench -p osd --bench index`; numbers and machine in docs/PERFORMANCE.md.
//!
//! The keys are the store's: 1 MiB objects of 256 units each, one entry per unit (the
//! extents of a randomly rewritten object are mostly one unit long), 4 KiB nodes.

use criterion::{black_box, criterion_group, criterion_main, BenchmarkId, Criterion};
use osd::index::{Index, IndexError, IndexKey, NodeAddr, NodeIo, Splice};
use std::collections::BTreeMap;

const NODE_BYTES: usize = 4096;
const UNITS_PER_OBJECT: u64 = 256;

/// Nodes in memory, addresses handed out in order; freed nodes are dropped.
#[derive(Default)]
struct VecIo {
    nodes: Vec<Option<Vec<u8>>>,
}

impl NodeIo for VecIo {
    fn read_node(&mut self, addr: NodeAddr, buf: &mut [u8]) -> Result<(), IndexError> {
        match self.nodes.get(addr as usize) {
            Some(Some(b)) => {
                buf.copy_from_slice(b);
                Ok(())
            }
            _ => Err(IndexError::Io(format!("no node {addr}"))),
        }
    }
    fn write_node(&mut self, buf: &[u8], _: u8, _: &IndexKey) -> Result<NodeAddr, IndexError> {
        self.nodes.push(Some(buf.to_vec()));
        Ok((self.nodes.len() - 1) as NodeAddr)
    }
    fn free_node(&mut self, addr: NodeAddr) {
        self.nodes[addr as usize] = None;
    }
}

/// A deterministic stream of unit keys spread over `entries / UNITS_PER_OBJECT` objects.
struct Keys {
    x: u64,
    objects: u64,
}

impl Keys {
    fn new(entries: u64) -> Keys {
        Keys {
            x: 42,
            objects: (entries / UNITS_PER_OBJECT).max(1),
        }
    }
    fn next(&mut self) -> IndexKey {
        self.x = self
            .x
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        let r = self.x >> 16;
        IndexKey::new(
            IndexKey::oid_of(1, 0x10000 + r % self.objects),
            1,
            (r / self.objects) % UNITS_PER_OBJECT,
        )
    }
}

/// Every unit of the objects, as one entry each, in the index (committed, then reopened with
/// a cache for all of it) and in a `BTreeMap`.
fn build(entries: u64) -> (Index, VecIo, BTreeMap<IndexKey, u64>) {
    let mut io = VecIo::default();
    let mut ix = Index::new(NODE_BYTES, usize::MAX / 2);
    let mut map = BTreeMap::new();
    let objects = (entries / UNITS_PER_OBJECT).max(1);
    for o in 0..objects {
        for u in 0..UNITS_PER_OBJECT {
            let k = IndexKey::new(IndexKey::oid_of(1, 0x10000 + o), 1, u);
            let v = (o * UNITS_PER_OBJECT + u) << 32 | 1;
            ix.insert(&mut io, k, v).expect("insert");
            map.insert(k, v);
        }
    }
    let (root, height) = ix.commit(&mut io).expect("commit").expect("a root");
    let mut ix = Index::open(root, height, NODE_BYTES, usize::MAX / 2);
    // Warm the cache: every node in memory, as in the store's steady state.
    let _ = ix.range(&mut io, &IndexKey::MIN, &IndexKey::MAX, usize::MAX);
    (ix, io, map)
}

fn bench(c: &mut Criterion) {
    let mut g = c.benchmark_group("index");
    for entries in [1u64 << 16, 1 << 20] {
        let (mut ix, mut io, mut map) = build(entries);
        let mut keys = Keys::new(entries);
        g.bench_function(BenchmarkId::new("floor/index", entries), |b| {
            b.iter(|| ix.floor(&mut io, black_box(&keys.next())).expect("floor"))
        });
        g.bench_function(BenchmarkId::new("floor/btreemap", entries), |b| {
            b.iter(|| {
                map.range(..=black_box(keys.next()))
                    .next_back()
                    .map(|(k, v)| (*k, *v))
            })
        });
        // Remove then re-insert one entry: the tree's size stays put.
        g.bench_function(BenchmarkId::new("remove+insert/index", entries), |b| {
            b.iter(|| {
                let k = keys.next();
                let v = ix.remove(&mut io, &k).expect("remove").expect("present");
                ix.insert(&mut io, k, v).expect("insert")
            })
        });
        g.bench_function(BenchmarkId::new("remove+insert/btreemap", entries), |b| {
            b.iter(|| {
                let k = keys.next();
                let v = map.remove(&k).expect("present");
                map.insert(k, v)
            })
        });
        // The relocation of a unit that GC moved: one in-place edit.
        g.bench_function(BenchmarkId::new("replace_in_place/index", entries), |b| {
            b.iter(|| {
                let k = keys.next();
                ix.replace_in_place(&mut io, &k, &[], |_, v, _| Some(v ^ 1 << 40))
                    .expect("replace")
            })
        });
        g.bench_function(BenchmarkId::new("replace/btreemap", entries), |b| {
            b.iter(|| {
                if let Some(v) = map.get_mut(&keys.next()) {
                    *v ^= 1 << 40;
                }
            })
        });
        // A host write of a unit that is an extent of its own: found, unmapped, mapped again
        // elsewhere. With the basic operations:
        g.bench_function(BenchmarkId::new("unmap+map/index", entries), |b| {
            b.iter(|| {
                let k = keys.next();
                let (fk, v) = ix.floor(&mut io, &k).expect("floor").expect("an entry");
                ix.remove_found(&mut io, &fk).expect("remove");
                ix.insert(&mut io, fk, v ^ 1 << 40).expect("insert")
            })
        });
        // The same with two splices in place (each falling back as the store does).
        g.bench_function(BenchmarkId::new("unmap+map/splice", entries), |b| {
            b.iter(|| {
                let k = keys.next();
                let (fk, v) = ix.floor(&mut io, &k).expect("floor").expect("an entry");
                let gone = ix
                    .splice_in_place(&mut io, &fk, &[], |leaf| {
                        let i = leaf.find(&fk).ok()?;
                        Some(Splice {
                            start: i,
                            end: i + 1,
                            with: [(fk, 0); 2],
                            n: 0,
                        })
                    })
                    .expect("splice");
                if !gone {
                    ix.remove_found(&mut io, &fk).expect("remove");
                }
                let new = v ^ 1 << 40;
                let put = ix
                    .splice_in_place(&mut io, &fk, &[], |leaf| {
                        let i = leaf.find(&fk).err()?;
                        Some(Splice {
                            start: i,
                            end: i,
                            with: [(fk, new); 2],
                            n: 1,
                        })
                    })
                    .expect("splice");
                if !put {
                    ix.insert(&mut io, fk, new).expect("insert");
                }
            })
        });
        // One object's extents, as a read of a whole object or a truncate looks them up.
        g.bench_function(BenchmarkId::new("range_object/index", entries), |b| {
            b.iter(|| {
                let k = keys.next();
                ix.range(
                    &mut io,
                    &IndexKey::first_of(k.oid),
                    &IndexKey::end_of(k.oid),
                    1024,
                )
                .expect("range")
            })
        });
        g.bench_function(BenchmarkId::new("range_object/btreemap", entries), |b| {
            b.iter(|| {
                let k = keys.next();
                map.range(IndexKey::first_of(k.oid)..IndexKey::end_of(k.oid))
                    .map(|(k, v)| (*k, *v))
                    .collect::<Vec<_>>()
            })
        });
        // Commit between groups so the dirty nodes do not pile up across sizes.
        let _ = ix.commit(&mut io);
    }
    g.finish();
}

criterion_group! {
    name = benches;
    config = Criterion::default()
        .sample_size(20)
        .warm_up_time(std::time::Duration::from_millis(500))
        .measurement_time(std::time::Duration::from_secs(2));
    targets = bench
}
criterion_main!(benches);
