use super::node::{Body, Geometry};
use super::*;
use proptest::prelude::*;
use std::collections::{BTreeMap, BTreeSet, HashMap};

/// In-memory node storage: fresh addresses from a counter (or, with `reuse`, freed addresses
/// first, to catch stale cache entries); freeing removes the node so that a later read fails.
struct MemIo {
    node_bytes: usize,
    nodes: BTreeMap<NodeAddr, Vec<u8>>,
    meta: HashMap<NodeAddr, (u8, IndexKey)>,
    next: NodeAddr,
    reuse: bool,
    freed: Vec<NodeAddr>,
    fail_writes: bool,
}

impl MemIo {
    fn new(node_bytes: usize) -> MemIo {
        MemIo {
            node_bytes,
            nodes: BTreeMap::new(),
            meta: HashMap::new(),
            next: 1,
            reuse: false,
            freed: Vec::new(),
            fail_writes: false,
        }
    }

    fn alloc(&mut self) -> NodeAddr {
        if self.reuse {
            if let Some(a) = self.freed.pop() {
                return a;
            }
        }
        let a = self.next;
        self.next += 1;
        a
    }

    fn live(&self) -> BTreeSet<NodeAddr> {
        self.nodes.keys().copied().collect()
    }

    /// What GC does: copy the node to a fresh address (the caller frees the old one once the
    /// index has been told).
    fn copy_node(&mut self, from: NodeAddr) -> NodeAddr {
        let bytes = self.nodes[&from].clone();
        let meta = self.meta[&from];
        let to = self.alloc();
        self.nodes.insert(to, bytes);
        self.meta.insert(to, meta);
        to
    }

    fn drop_node(&mut self, a: NodeAddr) {
        assert!(
            self.nodes.remove(&a).is_some(),
            "drop of unallocated node {a}"
        );
        self.meta.remove(&a);
        self.freed.push(a);
    }
}

impl NodeIo for MemIo {
    fn read_node(&mut self, addr: NodeAddr, buf: &mut [u8]) -> Result<(), IndexError> {
        match self.nodes.get(&addr) {
            Some(b) if b.len() == buf.len() => {
                buf.copy_from_slice(b);
                Ok(())
            }
            Some(b) => Err(IndexError::Io(format!(
                "read of {} bytes from a {}-byte node",
                buf.len(),
                b.len()
            ))),
            None => Err(IndexError::Io(format!("read of unallocated node {addr}"))),
        }
    }

    fn write_node(
        &mut self,
        buf: &[u8],
        level: u8,
        first_key: &IndexKey,
    ) -> Result<NodeAddr, IndexError> {
        if self.fail_writes {
            return Err(IndexError::Io("write failed".into()));
        }
        assert_eq!(
            buf.len(),
            self.node_bytes,
            "node written with the wrong size"
        );
        let a = self.alloc();
        assert!(!self.nodes.contains_key(&a));
        self.nodes.insert(a, buf.to_vec());
        self.meta.insert(a, (level, *first_key));
        Ok(a)
    }

    fn free_node(&mut self, addr: NodeAddr) {
        assert!(
            self.nodes.remove(&addr).is_some(),
            "free of unallocated node {addr} (double free?)"
        );
        self.meta.remove(&addr);
        self.freed.push(addr);
    }
}

fn k(oid: u128, kind: u8, offset: u64) -> IndexKey {
    IndexKey { oid, kind, offset }
}

/// Full consistency check of `ix` against the model and the storage.
fn verify(ix: &mut Index, io: &mut MemIo, model: &BTreeMap<IndexKey, u64>) {
    let (n, visited) = ix.check(io).unwrap_or_else(|e| panic!("check failed: {e}"));
    assert_eq!(n, model.len() as u64);
    let visited_set: BTreeSet<NodeAddr> = visited.iter().copied().collect();
    assert_eq!(visited_set.len(), visited.len(), "address visited twice");
    let pending: BTreeSet<NodeAddr> = ix.pending_free.iter().copied().collect();
    assert!(visited_set.is_disjoint(&pending));
    let expected: BTreeSet<NodeAddr> = visited_set.union(&pending).copied().collect();
    assert_eq!(expected, io.live(), "leak or dangling pointer");
    if !ix.is_dirty() {
        assert_eq!(visited_set, io.live());
        assert_eq!(ix.dirty_nodes(), 0);
    }
    assert!(ix.cached_nodes() <= ix.arena.cap);
    let (lru, map) = ix.arena.lru_len();
    assert_eq!(lru, ix.cached_nodes());
    assert_eq!(map, ix.cached_nodes());
    if let Some(len) = ix.len_hint() {
        assert_eq!(len, model.len() as u64);
    }
}

fn model_floor(model: &BTreeMap<IndexKey, u64>, key: &IndexKey) -> Option<(IndexKey, u64)> {
    model.range(..=*key).next_back().map(|(k, v)| (*k, *v))
}

fn model_range(
    model: &BTreeMap<IndexKey, u64>,
    from: &IndexKey,
    to: &IndexKey,
    limit: usize,
) -> Vec<(IndexKey, u64)> {
    if from >= to {
        return Vec::new();
    }
    model
        .range(*from..*to)
        .take(limit)
        .map(|(k, v)| (*k, *v))
        .collect()
}

// ---- unit tests ----------------------------------------------------------------------------

#[test]
fn key_encoding_round_trips_and_orders() {
    let keys = [
        IndexKey::MIN,
        k(1, 0, 0),
        k(1, 0, 7),
        k(1, 2, 0),
        k(IndexKey::oid_of(3, 9), 1, u64::MAX),
        IndexKey::MAX,
    ];
    for w in keys.windows(2) {
        assert!(w[0] < w[1]);
    }
    for key in keys {
        let mut b = [0u8; IndexKey::ENCODED_BYTES];
        key.encode(&mut b);
        assert_eq!(IndexKey::decode(&b), key);
    }
    // Short buffers neither panic nor write past the end.
    let mut short = [0u8; 3];
    k(5, 0, 0).encode(&mut short);
    assert_eq!(short, [5, 0, 0]);
    assert_eq!(IndexKey::decode(&[5]), k(5, 0, 0));
    assert_eq!(IndexKey::oid_of(1, 2), (1u128 << 64) | 2);
    assert_eq!(IndexKey::end_of(u128::MAX), IndexKey::MAX);
    assert_eq!(IndexKey::end_of(4), IndexKey::first_of(5));
}

#[test]
fn fanout() {
    assert_eq!(Index::fanout(2048), (61, 70));
    assert_eq!(Index::fanout(16384), (496, 564));
    assert_eq!(Index::fanout(256), (7, 8));
    // Out-of-range sizes are clamped, never panic.
    assert_eq!(Index::fanout(0), Index::fanout(MIN_NODE_BYTES));
    assert_eq!(Index::fanout(usize::MAX), Index::fanout(MAX_NODE_BYTES));
    let g = Geometry::new(MAX_NODE_BYTES);
    assert!(g.inner_max <= u16::MAX as usize);
    let mut ix = Index::new(1, 0);
    let mut io = MemIo::new(MIN_NODE_BYTES);
    ix.insert(&mut io, k(1, 0, 0), 1).unwrap();
    ix.commit(&mut io).unwrap();
    assert_eq!(ix.get(&mut io, &k(1, 0, 0)).unwrap(), Some(1));
}

#[test]
fn empty_tree() {
    let mut io = MemIo::new(512);
    let mut ix = Index::new(512, 4096);
    assert_eq!(ix.get(&mut io, &k(0, 0, 0)).unwrap(), None);
    assert_eq!(ix.floor(&mut io, &IndexKey::MAX).unwrap(), None);
    assert!(ix
        .range(&mut io, &IndexKey::MIN, &IndexKey::MAX, 10)
        .unwrap()
        .is_empty());
    assert_eq!(ix.remove(&mut io, &k(0, 0, 0)).unwrap(), None);
    assert_eq!(
        ix.remove_range(&mut io, &IndexKey::MIN, &IndexKey::MAX)
            .unwrap(),
        0
    );
    assert!(!ix.is_dirty());
    assert_eq!(ix.commit(&mut io).unwrap(), None);
    assert_eq!(ix.check(&mut io).unwrap(), (0, vec![]));
    assert_eq!(ix.len_hint(), Some(0));
    // A tree that becomes empty frees everything.
    for i in 0..100 {
        ix.insert(&mut io, k(1, 0, i), i).unwrap();
    }
    ix.commit(&mut io).unwrap();
    assert!(!io.nodes.is_empty());
    assert_eq!(
        ix.remove_range(&mut io, &IndexKey::MIN, &IndexKey::MAX)
            .unwrap(),
        100
    );
    assert!(ix.is_dirty());
    assert_eq!(ix.commit(&mut io).unwrap(), None);
    assert!(io.nodes.is_empty());
}

/// Builds a committed tree over `keys` (value = offset * 10 + kind).
fn build(
    node_bytes: usize,
    keys: impl IntoIterator<Item = IndexKey>,
) -> (MemIo, NodeAddr, u8, BTreeMap<IndexKey, u64>) {
    let mut io = MemIo::new(node_bytes);
    let mut ix = Index::new(node_bytes, 1 << 20);
    let mut model = BTreeMap::new();
    for key in keys {
        let v = key.offset * 10 + key.kind as u64;
        ix.insert(&mut io, key, v).unwrap();
        model.insert(key, v);
    }
    let (root, height) = ix.commit(&mut io).unwrap().unwrap();
    verify(&mut ix, &mut io, &model);
    (io, root, height, model)
}

#[test]
fn corruption_is_detected() {
    let (mut io, root, height, _) = build(256, (0..300).map(|i| k(1, 0, i * 3)));
    assert!(height >= 2);
    let addrs: Vec<NodeAddr> = io.live().into_iter().collect();
    // Flipping any single byte of any node is detected when the node is read.
    for &a in addrs.iter().take(5).chain([&root]) {
        for pos in [0usize, 4, 5, 6, 7, 8, 20, 40, 100, 200, 255] {
            let orig = io.nodes[&a].clone();
            io.nodes.get_mut(&a).unwrap()[pos] ^= 0x10;
            let mut ix = Index::open(root, height, 256, 0);
            let r = ix.check(&mut io);
            assert!(r.is_err(), "flip at {pos} of node {a} not detected");
            if a == root {
                let e = ix.get(&mut io, &k(1, 0, 3)).unwrap_err();
                assert!(
                    matches!(e, IndexError::Corrupted { addr, .. } if addr == root),
                    "{e}"
                );
            }
            io.nodes.insert(a, orig);
        }
    }
    // A wrong level claimed by the parent (or by `open`) is detected too.
    let mut ix = Index::open(root, height + 1, 256, 0);
    assert!(matches!(
        ix.get(&mut io, &k(1, 0, 3)),
        Err(IndexError::Corrupted { .. })
    ));
    let mut ix = Index::open(root, height, 256, 0);
    assert_eq!(ix.get(&mut io, &k(1, 0, 3)).unwrap(), Some(30));
    // A leaf corrupted deep in the tree: lookups through it fail, others succeed.
    let leaf = *addrs.iter().find(|a| io.meta[a].0 == 0).unwrap();
    let first = io.meta[&leaf].1;
    io.nodes.get_mut(&leaf).unwrap()[10] ^= 1;
    let mut ix = Index::open(root, height, 256, 1 << 20);
    assert!(
        matches!(ix.get(&mut io, &first), Err(IndexError::Corrupted { addr, .. }) if addr == leaf)
    );
    assert!(matches!(
        ix.insert(&mut io, first, 1),
        Err(IndexError::Corrupted { .. })
    ));
    assert!(ix.check(&mut io).is_err());
}

#[test]
fn decoding_garbage_never_panics() {
    let g = Geometry::new(256);
    let mut rng = <rand_chacha::ChaCha8Rng as rand::SeedableRng>::seed_from_u64(7);
    for round in 0..20_000 {
        let mut b = vec![0u8; 256];
        rand::RngCore::fill_bytes(&mut rng, &mut b);
        if round % 2 == 0 {
            // Plausible header, garbage after it.
            b[0..4].copy_from_slice(&NODE_MAGIC);
            b[4] = NODE_FORMAT_VERSION;
            b[5] = (round % 3) as u8;
            b[6] = (round % 11) as u8;
            b[7] = 0;
        }
        assert!(g.decode(9, &b, None).is_err());
    }
    for len in [0, 1, 7, 8, 255, 257] {
        assert!(g.decode(1, &vec![0u8; len], None).is_err());
    }
    // A valid node with its count raised still fails (CRC), and one with a huge count
    // fails without reading past the end.
    let node = node::Node {
        level: 0,
        body: Body::Leaf([(k(1, 0, 1), 5), (k(1, 0, 2), 6)].into_iter().collect()),
    };
    let mut buf = Vec::new();
    g.encode(&node, &mut buf).unwrap();
    assert_eq!(g.decode(3, &buf, Some(0)).unwrap(), node);
    assert!(g.decode(3, &buf, Some(1)).is_err());
    for count in [3u16, 7, 8, 1000, u16::MAX] {
        let mut b = buf.clone();
        b[6..8].copy_from_slice(&count.to_le_bytes());
        assert!(g.decode(3, &b, None).is_err());
    }
}

#[test]
fn floor_semantics() {
    let keys: Vec<IndexKey> = (0..400)
        .map(|i| k(2 + i % 3, (i % 2) as u8, 10 * i as u64))
        .collect();
    let (mut io, root, height, model) = build(256, keys);
    let mut ix = Index::open(root, height, 256, 3 * 256);
    // Below everything.
    assert_eq!(ix.floor(&mut io, &IndexKey::MIN).unwrap(), None);
    assert_eq!(
        ix.floor(&mut io, &k(2, 0, 0)).unwrap(),
        Some((k(2, 0, 0), 0))
    );
    assert_eq!(ix.floor(&mut io, &k(1, 255, u64::MAX)).unwrap(), None);
    // Exact hits, between keys, at leaf boundaries, above everything.
    for (&key, &v) in model.iter() {
        assert_eq!(ix.floor(&mut io, &key).unwrap(), Some((key, v)));
        let next = IndexKey {
            offset: key.offset + 1,
            ..key
        };
        assert_eq!(
            ix.floor(&mut io, &next).unwrap(),
            model_floor(&model, &next)
        );
        if key.offset > 0 {
            let prev = IndexKey {
                offset: key.offset - 1,
                ..key
            };
            assert_eq!(
                ix.floor(&mut io, &prev).unwrap(),
                model_floor(&model, &prev)
            );
        }
    }
    let last = model.iter().next_back().map(|(k, v)| (*k, *v));
    assert_eq!(ix.floor(&mut io, &IndexKey::MAX).unwrap(), last);
    // Extent lookup: the extent starting at or before an offset of one object.
    let hit = ix.floor(&mut io, &k(3, 1, 55)).unwrap().unwrap();
    assert_eq!(hit, model_floor(&model, &k(3, 1, 55)).unwrap());
}

#[test]
fn remove_range_of_a_whole_object() {
    let keys = (0..5u128)
        .flat_map(|oid| (0..2u8).flat_map(move |kind| (0..300u64).map(move |o| k(oid, kind, o))));
    let (mut io, root, height, mut model) = build(512, keys);
    let total_nodes = io.nodes.len();
    let mut ix = Index::open(root, height, 512, 1 << 20);
    let before = ix.stats();
    let n = ix
        .remove_range(&mut io, &IndexKey::first_of(2), &IndexKey::end_of(2))
        .unwrap();
    assert_eq!(n, 600);
    let reads = ix.stats().nodes_read - before.nodes_read;
    // Every leaf of the object is read once (to count it), not once per key.
    let (leaf_cap, _) = Index::fanout(512);
    assert!(
        reads as usize <= 600 / (leaf_cap / 4) + 4 * (height as usize + 1)
            && (reads as usize) < total_nodes,
        "{reads} reads for {total_nodes} nodes"
    );
    model.retain(|key, _| key.oid != 2);
    verify(&mut ix, &mut io, &model);
    assert_eq!(
        ix.range(&mut io, &IndexKey::first_of(2), &IndexKey::end_of(2), 10)
            .unwrap(),
        vec![]
    );
    assert_eq!(ix.get(&mut io, &k(1, 1, 299)).unwrap(), Some(2991));
    assert_eq!(ix.get(&mut io, &k(3, 0, 0)).unwrap(), Some(0));
    assert_eq!(
        ix.floor(&mut io, &k(2, 1, 5)).unwrap(),
        Some((k(1, 1, 299), 2991))
    );
    ix.commit(&mut io).unwrap();
    verify(&mut ix, &mut io, &model);
    assert!(io.nodes.len() < total_nodes);
    // Removing an object with no entries dirties nothing.
    assert_eq!(
        ix.remove_range(&mut io, &IndexKey::first_of(2), &IndexKey::end_of(2))
            .unwrap(),
        0
    );
    assert!(!ix.is_dirty());
    // Removing all but the first and the last key.
    let first = *model.keys().next().unwrap();
    let last = *model.keys().next_back().unwrap();
    let n = ix
        .remove_range(
            &mut io,
            &IndexKey {
                offset: first.offset + 1,
                ..first
            },
            &last,
        )
        .unwrap();
    assert_eq!(n as usize, model.len() - 2);
    model.retain(|key, _| *key == first || *key == last);
    verify(&mut ix, &mut io, &model);
    ix.commit(&mut io).unwrap();
    verify(&mut ix, &mut io, &model);
    assert_eq!(io.nodes.len(), 1);
}

#[test]
fn stats_counting() {
    let (mut io, root, height, model) = build(256, (0..200).map(|i| k(1, 0, i)));
    let nodes = io.nodes.len() as u64;
    let mut ix = Index::new(256, 1 << 20);
    let mut io2 = MemIo::new(256);
    for (key, v) in &model {
        ix.insert(&mut io2, *key, *v).unwrap();
    }
    assert_eq!(ix.stats().nodes_read, 0);
    ix.commit(&mut io2).unwrap();
    assert_eq!(ix.stats().nodes_written, nodes);
    assert_eq!(ix.stats().nodes_freed, 0);
    // Without a cache every level is a miss.
    let depth = height as u64 + 1;
    let mut ix = Index::open(root, height, 256, 0);
    assert_eq!(ix.get(&mut io, &k(1, 0, 77)).unwrap(), Some(770));
    assert_eq!(
        ix.stats(),
        IndexStats {
            nodes_read: depth,
            cache_misses: depth,
            ..IndexStats::default()
        }
    );
    assert_eq!(ix.cached_nodes(), 0);
    // With one, the second lookup hits everywhere.
    let mut ix = Index::open(root, height, 256, 64 * 256);
    ix.get(&mut io, &k(1, 0, 77)).unwrap();
    ix.get(&mut io, &k(1, 0, 77)).unwrap();
    assert_eq!(
        ix.stats(),
        IndexStats {
            nodes_read: depth,
            cache_misses: depth,
            cache_hits: depth,
            ..IndexStats::default()
        }
    );
    assert_eq!(ix.cached_nodes() as u64, depth);
    // An overwrite rewrites the path (depth nodes) and frees the old path at commit.
    assert_eq!(ix.insert(&mut io, k(1, 0, 77), 1).unwrap(), Some(770));
    assert_eq!(ix.dirty_nodes() as u64, depth);
    assert_eq!(ix.cached_nodes(), 0);
    let (root2, h2) = ix.commit(&mut io).unwrap().unwrap();
    assert_ne!(root2, root);
    assert_eq!(h2, height);
    assert_eq!(ix.stats().nodes_written, depth);
    assert_eq!(ix.stats().nodes_freed, depth);
    assert_eq!(io.nodes.len() as u64, nodes);
    assert!(!io.nodes.contains_key(&root));
    // Committed nodes stay cached (clean).
    let s = ix.stats();
    ix.get(&mut io, &k(1, 0, 77)).unwrap();
    assert_eq!(ix.stats().cache_hits - s.cache_hits, depth);
    assert_eq!(ix.stats().nodes_read, s.nodes_read);
}

#[test]
fn sequential_load_packs_leaves() {
    let (io, _, height, model) = build(2048, (0..10_000).map(|i| k(1, 0, i)));
    let leaves = io.meta.values().filter(|m| m.0 == 0).count();
    let (leaf_max, _) = Index::fanout(2048);
    // 3/4 full on ascending loads, not 1/2.
    assert!(leaves * leaf_max * 7 / 10 <= model.len(), "{leaves} leaves");
    assert_eq!(height, 2);
}

/// A run written back between other keys (the unit map's bulk rewrite of one object) packs
/// its leaves about three quarters full; inserted one by one with middle splits, the left
/// halves stay half empty.
#[test]
fn a_run_replaced_between_keys_packs_leaves() {
    let leaves_after = |bulk: bool| {
        let keys = (0..2_000)
            .map(|i| k(1, 0, i))
            .chain((0..2_000).map(|i| k(3, 0, i)));
        let (mut io, root, height, mut model) = build(2048, keys);
        let mut ix = Index::open(root, height, 2048, 1 << 20);
        let run: Vec<(IndexKey, u64)> = (0..10_000).map(|i| (k(2, 0, i), i)).collect();
        if bulk {
            ix.replace_range(&mut io, &k(2, 0, 0), &k(3, 0, 0), &run)
                .unwrap();
        } else {
            for &(key, v) in &run {
                ix.insert(&mut io, key, v).unwrap();
            }
        }
        model.extend(run.iter().copied());
        ix.commit(&mut io).unwrap();
        verify(&mut ix, &mut io, &model);
        io.meta.values().filter(|m| m.0 == 0).count()
    };
    let (leaf_max, _) = Index::fanout(2048);
    let bulk = leaves_after(true);
    assert!(bulk * leaf_max * 7 / 10 <= 14_000, "{bulk} leaves");
    let one_by_one = leaves_after(false);
    assert!(
        one_by_one > bulk * 5 / 4,
        "{one_by_one} against {bulk} leaves"
    );
}

/// The scheduler's look-ahead: from memory it answers as `floor` does, and says so when the
/// path leaves the cache; it never reads a node.
#[test]
fn floor_cached_answers_from_memory_only() {
    let keys: Vec<IndexKey> = (0..400).map(|i| k(2 + i % 3, 1, 10 * i as u64)).collect();
    let (mut io, root, height, model) = build(256, keys);
    // Nothing cached yet: no answer, and no read was made.
    let mut ix = Index::open(root, height, 256, 1 << 20);
    assert!(height > 0);
    assert_eq!(ix.floor_cached(&k(3, 1, 55)), None);
    assert_eq!(ix.stats(), IndexStats::default());
    // A whole-tree cache once every node was read: every answer as the model's.
    for key in model.keys() {
        ix.get(&mut io, key).unwrap();
    }
    let probes = model.keys().flat_map(|key| {
        [key.offset.saturating_sub(1), key.offset, key.offset + 1]
            .map(|offset| IndexKey { offset, ..*key })
    });
    for probe in probes.chain([IndexKey::MIN, IndexKey::MAX]) {
        assert_eq!(ix.floor_cached(&probe), Some(model_floor(&model, &probe)));
    }
    // Dirty (uncommitted) nodes are in memory too.
    let mut fresh = Index::new(256, 0);
    let mut io2 = MemIo::new(256);
    fresh.insert(&mut io2, k(9, 1, 4), 40).unwrap();
    assert_eq!(
        fresh.floor_cached(&k(9, 1, 7)),
        Some(Some((k(9, 1, 4), 40)))
    );
    assert_eq!(Index::new(256, 0).floor_cached(&k(9, 1, 7)), Some(None));
}

#[test]
fn cache_bound_is_respected() {
    let (mut io, root, height, model) = build(256, (0..500u64).map(|i| k(i as u128 % 4, 0, i)));
    for cache_nodes in [0usize, 1, 2, 5] {
        let mut ix = Index::open(root, height, 256, cache_nodes * 256 + 100);
        for key in model.keys().step_by(7) {
            ix.get(&mut io, key).unwrap();
            assert!(ix.cached_nodes() <= cache_nodes);
            ix.range(&mut io, key, &IndexKey::MAX, 30).unwrap();
            assert!(ix.cached_nodes() <= cache_nodes);
        }
    }
}

/// Relocates `from` the way the store's GC would.
fn gc_move(ix: &mut Index, io: &mut MemIo, from: NodeAddr) -> bool {
    let (level, first) = io.meta[&from];
    let to = io.copy_node(from);
    let r = ix.relocate(io, from, to, level, &first).unwrap();
    if r {
        io.drop_node(from);
    } else {
        io.drop_node(to);
    }
    r
}

#[test]
fn relocate_with_parent_on_flash_cached_or_dirty() {
    let keys: Vec<IndexKey> = (0..300).map(|i| k(1, 0, i)).collect();
    let (io0, root, height, mut model) = build(256, keys);
    assert!(height >= 2);
    let leaves: Vec<NodeAddr> = io0
        .meta
        .iter()
        .filter(|m| m.1 .0 == 0)
        .map(|m| *m.0)
        .collect();
    let inners: Vec<NodeAddr> = io0
        .meta
        .iter()
        .filter(|m| m.1 .0 == 1)
        .map(|m| *m.0)
        .collect();

    // Parent only on flash (no cache at all).
    for &a in leaves.iter().chain(&inners).chain([&root]) {
        let mut io = MemIo {
            nodes: io0.nodes.clone(),
            meta: io0.meta.clone(),
            ..MemIo::new(256)
        };
        io.next = io0.next;
        let mut ix = Index::open(root, height, 256, 0);
        assert!(gc_move(&mut ix, &mut io, a));
        assert!(ix.is_dirty());
        verify(&mut ix, &mut io, &model);
        ix.commit(&mut io).unwrap();
        verify(&mut ix, &mut io, &model);
    }

    let mut io = io0;
    let mut ix = Index::open(root, height, 256, 1 << 20);
    // Parent cached (clean), child cached too: the cached child is re-keyed.
    let leaf = leaves[3];
    let first = io.meta[&leaf].1;
    assert!(ix.get(&mut io, &first).unwrap().is_some());
    let reads = ix.stats().nodes_read;
    assert!(gc_move(&mut ix, &mut io, leaf));
    assert_eq!(
        ix.stats().nodes_read,
        reads,
        "relocation with a cached path reads nothing"
    );
    assert_eq!(ix.get(&mut io, &first).unwrap(), model.get(&first).copied());
    assert_eq!(ix.stats().nodes_read, reads);
    verify(&mut ix, &mut io, &model);
    // Parent dirty: relocating a sibling of a modified leaf.
    let leaf = leaves[7];
    let first = io.meta[&leaf].1;
    let other: Vec<NodeAddr> = io
        .meta
        .iter()
        .filter(|m| m.1 .0 == 0 && *m.0 != leaf)
        .map(|m| *m.0)
        .collect();
    ix.insert(&mut io, first, 99).unwrap();
    model.insert(first, 99);
    // `leaf` is now replaced by a dirty copy: its old address is freed at commit, and may
    // still be moved until then.
    assert!(gc_move(&mut ix, &mut io, leaf));
    for a in other {
        if io.nodes.contains_key(&a) {
            assert!(gc_move(&mut ix, &mut io, a));
        }
    }
    verify(&mut ix, &mut io, &model);
    ix.commit(&mut io).unwrap();
    verify(&mut ix, &mut io, &model);
    // Stale addresses are ignored.
    let (level, first) = (0, k(1, 0, 0));
    assert!(!ix.relocate(&mut io, leaf, 9999, level, &first).unwrap());
    assert!(!ix.relocate(&mut io, 123_456, 9999, 1, &first).unwrap());
    assert!(!ix.relocate(&mut io, 123_456, 9999, 200, &first).unwrap());
    assert!(!ix.is_dirty());
    // The root itself.
    let (root, _) = ix.commit(&mut io).unwrap().unwrap();
    assert!(gc_move(&mut ix, &mut io, root));
    assert!(ix.is_dirty());
    assert_eq!(ix.dirty_nodes(), 0);
    let (root2, _) = ix.commit(&mut io).unwrap().unwrap();
    assert_ne!(root, root2);
    verify(&mut ix, &mut io, &model);
    let mut ix = Index::open(root2, height, 256, 0);
    verify(&mut ix, &mut io, &model);
}

/// A committed node GC could read neither copy of (docs/RELIABILITY.md finding 28): a cached
/// one is written again by the next commit, which frees the lost address; an uncached one the
/// tree references is reported gone; an address the tree does not reference needs nothing.
#[test]
fn lost_nodes_are_rewritten_from_the_cache_or_reported_gone() {
    let keys: Vec<IndexKey> = (0..300).map(|i| k(1, 0, i)).collect();
    let (io0, root, height, model) = build(256, keys);
    assert!(height >= 2);
    let nodes: Vec<NodeAddr> = io0.meta.keys().copied().collect();
    let fresh_io = || {
        let mut io = MemIo {
            nodes: io0.nodes.clone(),
            meta: io0.meta.clone(),
            ..MemIo::new(256)
        };
        io.next = io0.next;
        io
    };
    for &a in &nodes {
        // Cached: every node read once through a large cache.
        let mut io = fresh_io();
        let mut ix = Index::open(root, height, 256, 1 << 20);
        for key in model.keys() {
            ix.get(&mut io, key).unwrap();
        }
        assert_eq!(
            ix.lost(&mut io, a).unwrap(),
            NodeLoss::Rewritten,
            "node {a}"
        );
        // The next commit needs nothing from flash at `a` and frees it.
        let lost = io.nodes.remove(&a).unwrap();
        io.nodes.insert(a, vec![0xEE; lost.len()]);
        let (root2, height2) = ix.commit(&mut io).unwrap().unwrap();
        assert!(!io.nodes.contains_key(&a), "node {a} not freed");
        let mut ix = Index::open(root2, height2, 256, 0);
        verify(&mut ix, &mut io, &model);

        // Not cached: gone, and nothing changes.
        let mut io = fresh_io();
        let mut ix = Index::open(root, height, 256, 0);
        assert_eq!(ix.lost(&mut io, a).unwrap(), NodeLoss::Gone, "node {a}");
        assert!(!ix.is_dirty());
    }
    let mut io = fresh_io();
    let mut ix = Index::open(root, height, 256, 0);
    assert_eq!(ix.lost(&mut io, 123_456).unwrap(), NodeLoss::Unreferenced);
    assert!(!ix.is_dirty());
}

#[test]
fn crash_before_commit_returns_to_the_committed_tree() {
    let (mut io, root, height, model) = build(256, (0..300).map(|i| k(1, 0, i)));
    let live = io.live();
    let mut ix = Index::open(root, height, 256, 2 * 256);
    for i in 0..300 {
        ix.insert(&mut io, k(2, 0, i), i).unwrap();
        ix.remove(&mut io, &k(1, 0, i / 2)).unwrap();
    }
    ix.remove_range(&mut io, &k(1, 0, 200), &k(1, 0, 250))
        .unwrap();
    assert_eq!(io.live(), live, "nothing is written or freed before commit");
    drop(ix);
    let mut ix = Index::open(root, height, 256, 2 * 256);
    verify(&mut ix, &mut io, &model);
}

#[test]
fn failed_commit_can_be_retried() {
    let mut io = MemIo::new(256);
    let mut ix = Index::new(256, 4 * 256);
    let mut model = BTreeMap::new();
    for i in 0..200 {
        ix.insert(&mut io, k(1, 0, i), i).unwrap();
        model.insert(k(1, 0, i), i);
    }
    ix.commit(&mut io).unwrap();
    for i in 0..50 {
        ix.remove(&mut io, &k(1, 0, i * 3)).unwrap();
        model.remove(&k(1, 0, i * 3));
    }
    io.fail_writes = true;
    assert!(matches!(ix.commit(&mut io), Err(IndexError::Io(_))));
    io.fail_writes = false;
    ix.commit(&mut io).unwrap();
    verify(&mut ix, &mut io, &model);
}

// ---- model test ----------------------------------------------------------------------------

#[derive(Clone, Debug)]
enum Op {
    Insert(IndexKey, u64),
    InsertRun(u128, u8, u64, u64),
    Remove(IndexKey),
    RemoveRange(IndexKey, IndexKey),
    /// Object, kind, first offset, entries, stride: `replace_range` of the object's keys of
    /// that kind from the first offset on by the entries.
    ReplaceRun(u128, u8, u64, u64, u64),
    RemoveObject(u128),
    Get(IndexKey),
    Floor(IndexKey),
    Range(IndexKey, IndexKey, usize),
    Commit,
    Reopen,
    Crash,
    Relocate(usize),
}

fn key_strategy() -> impl Strategy<Value = IndexKey> {
    (0u128..8, 0u8..3, prop_oneof![0u64..1000, 0u64..24]).prop_map(|(oid, kind, offset)| IndexKey {
        oid,
        kind,
        offset,
    })
}

fn op_strategy() -> impl Strategy<Value = Op> {
    prop_oneof![
        30 => (key_strategy(), any::<u64>()).prop_map(|(k, v)| Op::Insert(k, v)),
        4 => (0u128..8, 0u8..3, 0u64..1000, 1u64..120).prop_map(|(o, kd, s, n)| Op::InsertRun(o, kd, s, n)),
        10 => key_strategy().prop_map(Op::Remove),
        3 => (key_strategy(), key_strategy()).prop_map(|(a, b)| Op::RemoveRange(a, b)),
        3 => (0u128..8, 0u8..3, 0u64..1000, 0u64..150, 1u64..4).prop_map(|(o, kd, s, n, d)| Op::ReplaceRun(o, kd, s, n, d)),
        2 => (0u128..8).prop_map(Op::RemoveObject),
        5 => key_strategy().prop_map(Op::Get),
        5 => key_strategy().prop_map(Op::Floor),
        3 => (key_strategy(), key_strategy(), 0usize..60).prop_map(|(a, b, l)| Op::Range(a, b, l)),
        3 => Just(Op::Commit),
        1 => Just(Op::Reopen),
        1 => Just(Op::Crash),
        5 => any::<usize>().prop_map(Op::Relocate),
    ]
}

fn run_model(node_bytes: usize, cache_bytes: usize, reuse: bool, ops: Vec<Op>) {
    let mut io = MemIo::new(node_bytes);
    io.reuse = reuse;
    let mut ix = Index::new(node_bytes, cache_bytes);
    let mut model: BTreeMap<IndexKey, u64> = BTreeMap::new();
    let mut committed_model = model.clone();
    let mut committed: Option<(NodeAddr, u8)> = None;
    let mut relocated_since_commit = false;
    for op in ops {
        match op {
            Op::Insert(key, v) => {
                assert_eq!(ix.insert(&mut io, key, v).unwrap(), model.insert(key, v));
            }
            Op::InsertRun(oid, kind, start, n) => {
                for o in start..start + n {
                    let key = IndexKey {
                        oid,
                        kind,
                        offset: o,
                    };
                    assert_eq!(ix.insert(&mut io, key, o).unwrap(), model.insert(key, o));
                }
            }
            Op::Remove(key) => {
                assert_eq!(ix.remove(&mut io, &key).unwrap(), model.remove(&key));
            }
            Op::RemoveRange(from, to) => {
                let n = ix.remove_range(&mut io, &from, &to).unwrap();
                let before = model.len();
                if from < to {
                    model.retain(|key, _| *key < from || *key >= to);
                }
                assert_eq!(n as usize, before - model.len());
            }
            Op::ReplaceRun(oid, kind, start, n, stride) => {
                let from = k(oid, kind, start);
                let to = k(oid, kind + 1, 0);
                let run: Vec<(IndexKey, u64)> = (0..n)
                    .map(|i| (k(oid, kind, start + i * stride), i))
                    .collect();
                ix.replace_range(&mut io, &from, &to, &run).unwrap();
                model.retain(|key, _| *key < from || *key >= to);
                model.extend(run);
            }
            Op::RemoveObject(oid) => {
                let n = ix
                    .remove_range(&mut io, &IndexKey::first_of(oid), &IndexKey::end_of(oid))
                    .unwrap();
                let before = model.len();
                model.retain(|key, _| key.oid != oid);
                assert_eq!(n as usize, before - model.len());
            }
            Op::Get(key) => {
                assert_eq!(ix.get(&mut io, &key).unwrap(), model.get(&key).copied());
            }
            Op::Floor(key) => {
                assert_eq!(ix.floor(&mut io, &key).unwrap(), model_floor(&model, &key));
            }
            Op::Range(from, to, limit) => {
                assert_eq!(
                    ix.range(&mut io, &from, &to, limit).unwrap(),
                    model_range(&model, &from, &to, limit)
                );
            }
            Op::Commit => {
                committed = ix.commit(&mut io).unwrap();
                committed_model = model.clone();
                relocated_since_commit = false;
                assert!(!ix.is_dirty());
            }
            Op::Reopen | Op::Crash => {
                if matches!(op, Op::Reopen) || relocated_since_commit {
                    // A relocation is only in memory until the next commit (the committed
                    // tree still points at the freed source), so commit first.
                    committed = ix.commit(&mut io).unwrap();
                    committed_model = model.clone();
                    relocated_since_commit = false;
                }
                // Drop the index (uncommitted changes are lost) and reopen.
                ix = match committed {
                    Some((root, height)) => Index::open(root, height, node_bytes, cache_bytes),
                    None => Index::new(node_bytes, cache_bytes),
                };
                model = committed_model.clone();
            }
            Op::Relocate(pick) => {
                let live: Vec<NodeAddr> = io.nodes.keys().copied().collect();
                if !live.is_empty() {
                    let from = live[pick % live.len()];
                    assert!(
                        gc_move(&mut ix, &mut io, from),
                        "live node {from} not relocated"
                    );
                    relocated_since_commit = true;
                }
            }
        }
        verify(&mut ix, &mut io, &model);
    }
    ix.commit(&mut io).unwrap();
    verify(&mut ix, &mut io, &model);
    if let Some((root, height)) = ix.commit(&mut io).unwrap() {
        let mut ix = Index::open(root, height, node_bytes, 0);
        verify(&mut ix, &mut io, &model);
        let all = ix
            .range(&mut io, &IndexKey::MIN, &IndexKey::MAX, usize::MAX)
            .unwrap();
        assert_eq!(
            all,
            model_range(&model, &IndexKey::MIN, &IndexKey::MAX, usize::MAX)
        );
    } else {
        assert!(model.is_empty());
        assert!(io.nodes.is_empty());
    }
}

proptest! {
    // Regression seeds go next to this file (tests.proptest-regressions), not to the crate.
    #![proptest_config(ProptestConfig {
        failure_persistence: Some(Box::new(
            prop::test_runner::FileFailurePersistence::WithSource("proptest-regressions"),
        )),
        ..ProptestConfig::default()
    })]

    #[test]
    fn model_test(
        node_bytes in prop::sample::select(vec![256usize, 512, 1024]),
        cache_nodes in 0usize..=4,
        reuse in any::<bool>(),
        ops in prop::collection::vec(op_strategy(), 1..400),
    ) {
        run_model(node_bytes, cache_nodes * node_bytes, reuse, ops);
    }

    /// The interpolating search of a node's keys (`Entries::upper`, `lower`, `find`) agrees
    /// with a plain binary search, on nodes of one object and kind with offsets evenly or
    /// unevenly spaced, on nodes that mix objects and kinds, and behind a stale hint.
    #[test]
    fn searches_agree_with_a_binary_search(
        keys in prop::collection::btree_set(
            (0u128..3, 0u8..2, prop_oneof![0u64..300, 0u64..u64::MAX]),
            0..130,
        ),
        one_object in any::<bool>(),
        probes in prop::collection::vec((0u128..3, 0u8..2, prop_oneof![0u64..300, any::<u64>()]), 1..40),
    ) {
        let keys: BTreeSet<IndexKey> = keys
            .into_iter()
            .map(|(o, kd, off)| if one_object { k(1, 1, off) } else { k(o, kd, off) })
            .collect();
        let e: node::Entries<u64> = keys.iter().map(|&x| (x, x.offset)).collect();
        let sorted: Vec<IndexKey> = keys.into_iter().collect();
        // The same keys behind a stale hint (one computed for other keys): slower, not wrong.
        let mut stale: node::Entries<u64> = (0..200).map(|i| (k(1, 1, 7 * i), i)).collect();
        stale.keys.clone_from(&e.keys);
        stale.vals.clone_from(&e.vals);
        for (o, kd, off) in probes {
            for key in [k(o, kd, off), k(1, 1, off)] {
                for e in [&e, &stale] {
                    prop_assert_eq!(e.upper(&key), sorted.partition_point(|x| *x <= key));
                    prop_assert_eq!(e.lower(&key), sorted.partition_point(|x| *x < key));
                    prop_assert_eq!(e.find(&key), sorted.binary_search(&key));
                }
            }
        }
    }

    #[test]
    fn node_flips_are_detected(pos in 0usize..256, bit in 0u8..8, n in 1usize..7, level in 0u8..3) {
        let g = Geometry::new(256);
        let body = if level == 0 {
            Body::Leaf((0..n as u64).map(|i| (k(1, 0, i), i)).collect())
        } else {
            Body::Inner((0..n as u64).map(|i| (k(1, 0, i), node::Child::Addr(i as u32))).collect())
        };
        let node = node::Node { level, body };
        let mut buf = Vec::new();
        g.encode(&node, &mut buf).unwrap();
        prop_assert_eq!(&g.decode(1, &buf, Some(level)).unwrap(), &node);
        buf[pos] ^= 1 << bit;
        prop_assert!(g.decode(1, &buf, None).is_err());
    }
}

// ---- edits in one descent against the basic operations they stand for ----------------------

/// Everything about a tree that its owner could observe: the shape (every node's level and
/// entries, dirty or at which address), the nodes to free, the clean cache in LRU order, the
/// I/O done and the storage's contents.
fn observable(ix: &Index, io: &MemIo) -> String {
    fn walk(ix: &Index, io: &MemIo, c: Child, level: u8, out: &mut String) {
        let node = match c {
            Child::Mem(h) => ix.arena.node(h).clone(),
            Child::Addr(a) => ix.geom.decode(a, &io.nodes[&a], Some(level)).unwrap(),
        };
        out.push_str(&format!("{c:?} {node:?}\n"));
        if let Body::Inner(v) = &node.body {
            for &c in &v.vals {
                walk(ix, io, c, level - 1, out);
            }
        }
    }
    let mut out = String::new();
    if let Some(r) = ix.root {
        walk(ix, io, r, ix.height, &mut out);
    }
    let s = ix.stats;
    out.push_str(&format!(
        "height {} moved {} pending {:?} lru {:?} len {:?} read {} written {} freed {} misses {} dirty {} nodes {:?}",
        ix.height,
        ix.root_moved,
        ix.pending_free,
        ix.arena.lru_order(),
        ix.len,
        s.nodes_read,
        s.nodes_written,
        s.nodes_freed,
        s.cache_misses,
        ix.arena.dirty_count(),
        io.nodes
    ));
    out
}

#[derive(Clone, Debug)]
enum TwinOp {
    Insert(IndexKey, u64),
    Remove(IndexKey),
    Get(IndexKey),
    Commit,
    /// Reopen from the last commit with an empty cache (so paths are on flash again).
    Reopen,
    /// Replace the value of an existing key (picked by index), probing its neighbours.
    Replace(usize, u64, bool),
    /// Insert a key, probing its neighbours.
    InsertProbed(IndexKey, u64, bool),
    /// Remove an existing key (picked by index) found just before.
    RemoveFound(usize),
    /// Replace `r` entries from an existing key (picked by index) by new ones at that key's
    /// offset plus each delta, probing its neighbours or not, in place if accepted.
    Splice(usize, usize, Vec<(u64, u64)>, bool, bool),
}

fn twin_op_strategy() -> impl Strategy<Value = TwinOp> {
    let key = (0u128..3, 0u8..2, 0u64..200).prop_map(|(o, kd, off)| k(o, kd, off));
    prop_oneof![
        20 => (key.clone(), any::<u64>()).prop_map(|(k, v)| TwinOp::Insert(k, v)),
        6 => key.clone().prop_map(TwinOp::Remove),
        3 => key.clone().prop_map(TwinOp::Get),
        2 => Just(TwinOp::Commit),
        1 => Just(TwinOp::Reopen),
        20 => (any::<usize>(), any::<u64>(), any::<bool>()).prop_map(|(i, v, d)| TwinOp::Replace(i, v, d)),
        10 => (key, any::<u64>(), any::<bool>()).prop_map(|(k, v, d)| TwinOp::InsertProbed(k, v, d)),
        6 => any::<usize>().prop_map(TwinOp::RemoveFound),
        20 => (
            any::<usize>(),
            0usize..=2,
            prop::collection::vec((0u64..4, any::<u64>()), 0..=2),
            any::<bool>(),
            any::<bool>(),
        )
            .prop_map(|(i, r, new, p, d)| TwinOp::Splice(i, r, new, p, d)),
    ]
}

/// The keys next to `key` that the store looks up around an edit.
fn probes_of(key: &IndexKey) -> Vec<IndexKey> {
    let mut p = vec![k(key.oid, key.kind, key.offset + 1)];
    if let Some(b) = key.offset.checked_sub(1) {
        p.push(k(key.oid, key.kind, b));
    }
    p
}

fn model_neighbours(model: &BTreeMap<IndexKey, u64>, key: &IndexKey) -> (Neighbour, Neighbour) {
    let prev = model.range(..*key).next_back().map(|(k, v)| (*k, *v));
    let next = model
        .range((std::ops::Bound::Excluded(*key), std::ops::Bound::Unbounded))
        .next()
        .map(|(k, v)| (*k, *v));
    (prev, next)
}

/// Runs `ops` on two trees, one using the one-descent edits (falling back to the basic
/// operations when they decline, as the store does) and one using only the basic operations,
/// and checks after every step that nothing observable differs and both match the model.
fn run_twins(node_bytes: usize, cache_bytes: usize, ops: Vec<TwinOp>) -> usize {
    let (mut io_a, mut io_b) = (MemIo::new(node_bytes), MemIo::new(node_bytes));
    let mut a = Index::new(node_bytes, cache_bytes);
    let mut b = Index::new(node_bytes, cache_bytes);
    let mut model: BTreeMap<IndexKey, u64> = BTreeMap::new();
    let mut fast = 0usize;
    for op in ops {
        match op {
            TwinOp::Insert(key, v) => {
                assert_eq!(a.insert(&mut io_a, key, v).unwrap(), model.insert(key, v));
                b.insert(&mut io_b, key, v).unwrap();
            }
            TwinOp::Remove(key) => {
                assert_eq!(a.remove(&mut io_a, &key).unwrap(), model.remove(&key));
                b.remove(&mut io_b, &key).unwrap();
            }
            TwinOp::Get(key) => {
                assert_eq!(a.get(&mut io_a, &key).unwrap(), model.get(&key).copied());
                b.get(&mut io_b, &key).unwrap();
            }
            TwinOp::Commit => {
                let r = a.commit(&mut io_a).unwrap();
                assert_eq!(r, b.commit(&mut io_b).unwrap());
            }
            TwinOp::Reopen => {
                // Committed first, so the model stays as it is.
                let r = a.commit(&mut io_a).unwrap();
                assert_eq!(r, b.commit(&mut io_b).unwrap());
                let reopen = |r: Option<(NodeAddr, u8)>| match r {
                    Some((root, height)) => Index::open(root, height, node_bytes, cache_bytes),
                    None => Index::new(node_bytes, cache_bytes),
                };
                a = reopen(r);
                b = reopen(r);
            }
            TwinOp::Replace(pick, v, accept) => {
                if model.is_empty() {
                    continue;
                }
                let key = *model.keys().nth(pick % model.len()).unwrap();
                let probes = probes_of(&key);
                let (mprev, mnext) = model_neighbours(&model, &key);
                let old = model[&key];
                let mut seen = None;
                let r = a
                    .replace_in_place(&mut io_a, &key, &probes, |p, o, n| {
                        seen = Some((p, o, n));
                        accept.then_some(v)
                    })
                    .unwrap();
                if let Some((p, o, n)) = seen {
                    // The leaf's neighbours are the tree's, or nothing past the leaf's end.
                    assert_eq!(p, mprev);
                    assert_eq!(o, old);
                    assert!(n.is_none() || n == mnext);
                }
                match r {
                    Some(o) => {
                        assert_eq!(o, old);
                        fast += 1;
                    }
                    None => {
                        a.remove(&mut io_a, &key).unwrap();
                        for p in &probes {
                            a.get(&mut io_a, p).unwrap();
                        }
                        a.insert(&mut io_a, key, v).unwrap();
                    }
                }
                b.remove(&mut io_b, &key).unwrap();
                for p in &probes {
                    b.get(&mut io_b, p).unwrap();
                }
                b.insert(&mut io_b, key, v).unwrap();
                model.insert(key, v);
            }
            TwinOp::InsertProbed(key, v, accept) => {
                if model.contains_key(&key) {
                    continue;
                }
                let probes = probes_of(&key);
                let (mprev, mnext) = model_neighbours(&model, &key);
                let mut seen = None;
                let done = a
                    .insert_in_place(&mut io_a, key, &probes, |p, n| {
                        seen = Some((p, n));
                        accept.then_some(v)
                    })
                    .unwrap();
                if let Some((p, n)) = seen {
                    assert!(p.is_none() || p == mprev);
                    assert!(n.is_none() || n == mnext);
                }
                if done {
                    fast += 1;
                } else {
                    for p in &probes {
                        a.get(&mut io_a, p).unwrap();
                    }
                    a.insert(&mut io_a, key, v).unwrap();
                }
                for p in &probes {
                    b.get(&mut io_b, p).unwrap();
                }
                b.insert(&mut io_b, key, v).unwrap();
                model.insert(key, v);
            }
            TwinOp::RemoveFound(pick) => {
                if model.is_empty() {
                    continue;
                }
                let key = *model.keys().nth(pick % model.len()).unwrap();
                // As the store does: a floor look-up finds the key, then it goes.
                assert_eq!(a.floor(&mut io_a, &key).unwrap(), Some((key, model[&key])));
                b.floor(&mut io_b, &key).unwrap();
                assert_eq!(a.remove_found(&mut io_a, &key).unwrap(), model.remove(&key));
                b.remove(&mut io_b, &key).unwrap();
            }
            TwinOp::Splice(pick, r, news, probed, accept) => {
                if model.is_empty() {
                    continue;
                }
                let key = *model.keys().nth(pick % model.len()).unwrap();
                let gone: Vec<IndexKey> = model.range(key..).take(r).map(|(k, _)| *k).collect();
                let mut new: Vec<(IndexKey, u64)> = news
                    .iter()
                    .map(|&(d, v)| (k(key.oid, key.kind, key.offset + d), v))
                    .collect();
                new.sort_by_key(|e| e.0);
                new.dedup_by_key(|e| e.0);
                let probes = if probed { probes_of(&key) } else { Vec::new() };
                let done = a
                    .splice_in_place(&mut io_a, &key, &probes, |leaf| {
                        let i = leaf.find(&key).ok()?;
                        for (j, g) in gone.iter().enumerate() {
                            if leaf.get(i + j)?.0 != *g {
                                return None;
                            }
                        }
                        let mut with = [(key, 0); 2];
                        with[..new.len()].copy_from_slice(&new);
                        accept.then_some(Splice {
                            start: i,
                            end: i + gone.len(),
                            with,
                            n: new.len(),
                        })
                    })
                    .unwrap();
                let basic = |ix: &mut Index, io: &mut MemIo| {
                    for p in &probes {
                        ix.get(io, p).unwrap();
                    }
                    for g in &gone {
                        ix.remove(io, g).unwrap();
                    }
                    for &(kk, v) in &new {
                        ix.insert(io, kk, v).unwrap();
                    }
                };
                if done {
                    fast += 1;
                } else {
                    basic(&mut a, &mut io_a);
                }
                basic(&mut b, &mut io_b);
                for g in &gone {
                    model.remove(g);
                }
                for &(kk, v) in &new {
                    model.insert(kk, v);
                }
            }
        }
        // Statistics of cache hits differ by design (fewer look-ups); nothing else may.
        assert_eq!(observable(&a, &io_a), observable(&b, &io_b));
        verify(&mut a, &mut io_a, &model);
        verify(&mut b, &mut io_b, &model);
    }
    fast
}

#[test]
fn edits_in_place_happen_and_match_the_basic_operations() {
    // A deterministic run that must take the one-descent paths (so the property test below
    // is not vacuous): a committed tree, reopened with a cache large enough for its paths.
    let mut ops: Vec<TwinOp> = (0..150)
        .map(|i| TwinOp::Insert(k(1, 1, i * 2), i))
        .collect();
    ops.push(TwinOp::Reopen);
    ops.extend((0..300).map(|i| TwinOp::Replace(i * 7, i as u64, true)));
    ops.extend((0..50).map(|i| TwinOp::InsertProbed(k(1, 1, i * 6 + 1), i, true)));
    ops.extend((0..50).map(|i| TwinOp::RemoveFound(i * 5)));
    let mut io = MemIo::new(256);
    let mut ix = Index::new(256, 64 * 256);
    for i in 0..150u64 {
        ix.insert(&mut io, k(1, 1, i * 2), i).unwrap();
    }
    let hits_before = ix.stats().cache_hits;
    let probes = probes_of(&k(1, 1, 41 * 2));
    let r = ix.replace_in_place(&mut io, &k(1, 1, 82), &probes, |_, _, _| Some(7));
    assert_eq!(r.unwrap(), Some(41));
    assert_eq!(ix.get(&mut io, &k(1, 1, 82)).unwrap(), Some(7));
    assert!(ix.stats().cache_hits >= hits_before);
    let fast = run_twins(256, 64 * 256, ops);
    assert!(fast > 150, "{fast} edits in place");
    // Splices: an entry into two (a unit out of the middle of an extent), two into one (a
    // unit joining the extents on both sides), a new one (a unit alone).
    let mut ops: Vec<TwinOp> = (0..150)
        .map(|i| TwinOp::Insert(k(1, 1, i * 4), i))
        .collect();
    ops.push(TwinOp::Reopen);
    ops.extend(
        (0..60)
            .map(|i| TwinOp::Splice(i * 5 + 1, 1, vec![(0, i as u64), (2, i as u64)], true, true)),
    );
    ops.extend((0..60).map(|i| TwinOp::Splice(i * 3 + 2, 2, vec![(0, i as u64)], false, true)));
    ops.extend((0..60).map(|i| TwinOp::Splice(i * 7 + 3, 0, vec![(1, i as u64)], true, true)));
    let fast = run_twins(512, 64 * 512, ops);
    assert!(fast > 30, "{fast} splices in place");
}

proptest! {
    #![proptest_config(ProptestConfig {
        failure_persistence: Some(Box::new(
            prop::test_runner::FileFailurePersistence::WithSource("proptest-regressions"),
        )),
        ..ProptestConfig::default()
    })]

    #[test]
    fn edits_in_place_leave_the_tree_as_the_basic_operations(
        node_bytes in prop::sample::select(vec![256usize, 512]),
        cache_nodes in 0usize..=12,
        ops in prop::collection::vec(twin_op_strategy(), 1..300),
    ) {
        run_twins(node_bytes, cache_nodes * node_bytes, ops);
    }
}

#[test]
fn key_search_matches_partition_point() {
    use super::node::Entries;
    for n in 0..300u64 {
        let e: Entries<u64> = (0..n).map(|i| (k(1, 0, 2 * i + 1), i)).collect();
        for q in 0..2 * n + 3 {
            let key = k(1, 0, q);
            assert_eq!(e.upper(&key), e.keys.partition_point(|x| *x <= key));
            assert_eq!(e.lower(&key), e.keys.partition_point(|x| *x < key));
        }
    }
}

#[test]
fn splice_matches_vec_splice() {
    use super::node::Entries;
    for len in 0..6u64 {
        for start in 0..=len as usize {
            for end in start..=len as usize {
                for n in 0..3u64 {
                    let mut e: Entries<u64> = (0..len).map(|i| (k(1, 0, i), i)).collect();
                    let with: Vec<(IndexKey, u64)> =
                        (0..n).map(|i| (k(2, 0, i), 100 + i)).collect();
                    let mut keys = e.keys.clone();
                    let mut vals = e.vals.clone();
                    keys.splice(start..end, with.iter().map(|x| x.0));
                    vals.splice(start..end, with.iter().map(|x| x.1));
                    e.splice(start..end, &with);
                    assert_eq!((e.keys, e.vals), (keys, vals), "{len} {start}..{end} {n}");
                }
            }
        }
    }
}
