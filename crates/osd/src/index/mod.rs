//! The on-flash index of the object store: a copy-on-write ("wandering") B+tree that maps
//! fixed-size keys ([`IndexKey`]: object id, kind, offset) to `u64` values, after OSSD's
//! μ-Tree and the extent index of object-based SCM.
//!
//! # Shape
//!
//! Nodes are flash write units of `node_bytes` bytes that are never updated in place. A node
//! that an operation modifies becomes a *dirty* copy in memory (and so do all its ancestors,
//! whose child pointers must change); [`Index::commit`] writes the dirty nodes children first,
//! each at a fresh address handed out by the [`NodeIo`], and only then frees the addresses
//! they replace. Until then the previous committed tree is intact on flash, so a crash
//! returns to it.
//!
//! Every inner entry holds the *smallest key of its child's subtree* (exactly, not a lower
//! bound); entry 0 of an inner node therefore is the smallest key of the node's subtree.
//! The key passed to [`NodeIo::write_node`] as `first_key` is the node's first key, which
//! is how [`Index::relocate`] finds the parent of a node that GC moved: the path from the
//! root towards `first_key` leads to it as long as the node is unchanged. Searches never
//! backtrack: the subtree chosen for `floor(k)` always holds an entry `<= k` if any exists.
//!
//! Fill: a leaf holds `leaf_min..=leaf_max` entries and an inner node `inner_min..=inner_max`
//! children, where the minimum is a quarter of the maximum (at least 1 for leaves and 2 for
//! inner nodes); the root may hold fewer (but an inner root has at least 2 children; an
//! empty tree has no root). Inserts split full nodes (in the middle, or leaving the left node
//! three quarters full when the entry went to the end, so sequential loads pack well);
//! removals merge a node below the minimum with a sibling or borrow from it; a root with one
//! child is replaced by that child.
//!
//! # Node format (version 1; all integers little-endian)
//!
//! ```text
//! offset  size  field
//!      0     4  magic "OSIX" (4f 53 49 58)
//!      4     1  format version = 1
//!      5     1  level: 0 = leaf, n = n levels above the leaves
//!      6     2  entry count n (1..=max for the level)
//!      8   n*E  entries, sorted by key, strictly ascending:
//!                 leaf  (E = 33): key (25) + value u64 (8)
//!                 inner (E = 29): key (25) + child NodeAddr u32 (4); the key is the smallest
//!                                 key in that child's subtree
//!  8+n*E     4  CRC-32C (Castagnoli) of bytes 0 .. 8+n*E
//!  12+n*E  ...  zero up to node_bytes
//! ```
//!
//! A key is encoded in 25 bytes: `oid` u128 (16), `kind` u8 (1), `offset` u64 (8).
//! Fanout: `leaf_max = (node_bytes - 12) / 33`, `inner_max = (node_bytes - 12) / 29`
//! (2 KiB: 61 / 70; 16 KiB: 496 / 564; 256 B: 7 / 8). `node_bytes` is clamped to
//! [`MIN_NODE_BYTES`]..=[`MAX_NODE_BYTES`].
//!
//! Bytes read from flash are untrusted: decoding checks the length, magic, version, level
//! (against the level the parent implies), count, CRC, zero padding and key order, and
//! reports [`IndexError::Corrupted`].
//!
//! # Memory
//!
//! Nodes in memory live in one arena (a `Vec` of slots with a free list) and are referred to
//! by `u32` handles; an inner node's child is either a handle (a dirty node in memory) or a
//! committed address. A node in memory keeps its keys in one dense array and its values (or
//! children) in another, so a search (a floor, the choice of a child) reads keys only; the
//! codec converts to and from the interleaved on-flash entries above. The arena remembers the
//! last child chosen in an inner node of each level for a key, so the repeated descents of one
//! edit (look-up, removal, insertion of the same key) skip the binary searches; any change to
//! an inner node's keys, and any slot allocated or released, forgets them. Clean (committed) nodes are cached in an LRU list bounded by
//! `cache_bytes / node_bytes` nodes and looked up by address; evicting one just drops it.
//! Dirty nodes are not in the cache: they (and, by construction, all their ancestors, which
//! are dirty too) stay in memory until commit, however many there are. With a cache smaller
//! than one node, the single node being read is held only until the call returns.
//!
//! # Errors
//!
//! A failed read or write leaves the committed tree on flash untouched; a mutating call that
//! fails part way may have been partly applied in memory (the tree is still a valid search
//! tree but may be under-filled), so the owner should drop the `Index` and reopen the last
//! committed root.

mod cache;
mod edit;
mod node;
mod tree;

#[cfg(test)]
mod tests;

use cache::Arena;
use node::{Child, Geometry};

pub use edit::{LeafView, Neighbour, Splice};

pub use node::{
    INNER_ENTRY_BYTES, LEAF_ENTRY_BYTES, MAX_NODE_BYTES, MIN_NODE_BYTES, NODE_CRC_BYTES,
    NODE_FORMAT_VERSION, NODE_HEADER_BYTES, NODE_MAGIC,
};

/// Object identity: 64-bit partition id and 64-bit object id, as one u128
/// (partition << 64 | object).
/// Index keys are ordered by (oid, kind, offset).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct IndexKey {
    /// The object, `partition << 64 | object`.
    pub oid: u128,
    /// What the entry maps; the object store's kinds are 0 (onode location), 1 (data extent)
    /// and its own for small objects and parity.
    pub kind: u8,
    /// Within the object: a unit index for data, 0 where there is one entry per object.
    pub offset: u64,
}

impl IndexKey {
    /// The smallest key.
    pub const MIN: IndexKey = IndexKey {
        oid: 0,
        kind: 0,
        offset: 0,
    };
    /// The largest key.
    pub const MAX: IndexKey = IndexKey {
        oid: u128::MAX,
        kind: u8::MAX,
        offset: u64::MAX,
    };
    /// Bytes of an encoded key: `oid` (16), `kind` (1), `offset` (8).
    pub const ENCODED_BYTES: usize = 25;

    /// The key of its three parts.
    pub const fn new(oid: u128, kind: u8, offset: u64) -> IndexKey {
        IndexKey { oid, kind, offset }
    }

    /// The object id `partition << 64 | object`.
    pub const fn oid_of(partition: u64, object: u64) -> u128 {
        ((partition as u128) << 64) | object as u128
    }

    /// The smallest key of object `oid` (every key of the object is >= it).
    pub const fn first_of(oid: u128) -> IndexKey {
        IndexKey {
            oid,
            kind: 0,
            offset: 0,
        }
    }

    /// The exclusive upper bound of object `oid`'s keys for ranges: the first key of the next
    /// object, or `MAX` for the last object id (so a key equal to `MAX` is never covered).
    pub const fn end_of(oid: u128) -> IndexKey {
        match oid.checked_add(1) {
            Some(next) => IndexKey::first_of(next),
            None => IndexKey::MAX,
        }
    }

    /// Writes the 25-byte encoding (oid u128 LE, kind, offset u64 LE) to the start of `out`;
    /// if `out` is shorter, only the bytes that fit.
    pub fn encode(&self, out: &mut [u8]) {
        let mut b = [0u8; Self::ENCODED_BYTES];
        b[0..16].copy_from_slice(&self.oid.to_le_bytes());
        b[16] = self.kind;
        b[17..25].copy_from_slice(&self.offset.to_le_bytes());
        let n = out.len().min(Self::ENCODED_BYTES);
        out[..n].copy_from_slice(&b[..n]);
    }

    /// Decodes the first 25 bytes of `b` (missing bytes read as zero).
    pub fn decode(b: &[u8]) -> IndexKey {
        let mut x = [0u8; Self::ENCODED_BYTES];
        let n = b.len().min(Self::ENCODED_BYTES);
        x[..n].copy_from_slice(&b[..n]);
        let mut oid = [0u8; 16];
        oid.copy_from_slice(&x[0..16]);
        let mut off = [0u8; 8];
        off.copy_from_slice(&x[17..25]);
        IndexKey {
            oid: u128::from_le_bytes(oid),
            kind: x[16],
            offset: u64::from_le_bytes(off),
        }
    }
}

/// Address of a node on flash (an opaque u32 the NodeIo hands out).
pub type NodeAddr = u32;

/// Where nodes live. The index never writes in place: every write gets a fresh address.
pub trait NodeIo {
    /// Reads the node at `addr` into `buf` (exactly node_bytes long).
    fn read_node(&mut self, addr: NodeAddr, buf: &mut [u8]) -> Result<(), IndexError>;
    /// Writes a node (exactly node_bytes long) somewhere new; `level` (0 = leaf) and
    /// `first_key` (the node's smallest key, or the smallest key of the subtree for inner
    /// nodes) are passed so the storage can record them beside the node (the store puts them
    /// in the page's OOB area so GC can later tell the index which node it moved).
    fn write_node(
        &mut self,
        buf: &[u8],
        level: u8,
        first_key: &IndexKey,
    ) -> Result<NodeAddr, IndexError>;
    /// The node at `addr` is no longer referenced (after a commit replaced it, or a node was
    /// merged away).
    fn free_node(&mut self, addr: NodeAddr);
}

/// Why an index operation failed.
#[derive(Debug, thiserror::Error)]
pub enum IndexError {
    /// A node read back that does not decode (bad length, magic, version, level, count, CRC,
    /// padding or key order).
    #[error("index node at {addr}: {what}")]
    Corrupted {
        /// The node's address.
        addr: NodeAddr,
        /// What does not check.
        what: String,
    },
    /// The node read back does not match the checksum written with it.
    #[error(
        "index node at {addr}: uncorrectable (unreadable, or its contents fail their checksum)"
    )]
    Uncorrectable {
        /// The node's address.
        addr: NodeAddr,
    },
    /// The node store's device failed.
    #[error("index storage: {0}")]
    Device(#[from] fml::FmlError),
    /// Internal errors and failures of test node stores.
    #[error("index storage: {0}")]
    Io(String),
}

/// A node [`Index::check`] found wrong: a dirty node in memory, or a committed one on flash.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CheckedNode {
    /// The dirty node with this arena handle.
    Dirty(u32),
    /// The committed node at this address.
    Committed(NodeAddr),
}

impl std::fmt::Display for CheckedNode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            CheckedNode::Dirty(h) => write!(f, "dirty node {h}"),
            CheckedNode::Committed(a) => write!(f, "node {a}"),
        }
    }
}

/// What [`Index::check`] found wrong with the tree: the first inconsistency, naming the node.
#[derive(Debug, thiserror::Error)]
pub enum CheckError {
    /// An address is on the list of nodes to free twice.
    #[error("an address is scheduled for freeing twice")]
    FreedTwice,
    /// The dirty nodes reachable from the root are not the ones the arena accounts for.
    #[error("{reachable} dirty nodes reachable but {accounted} accounted")]
    DirtyCount {
        /// Dirty nodes reached from the root.
        reachable: usize,
        /// Dirty nodes in the arena.
        accounted: usize,
    },
    /// The clean cache holds more nodes than its bound.
    #[error("{cached} clean nodes cached, bound is {bound}")]
    CacheOverBound {
        /// Clean nodes cached.
        cached: usize,
        /// The cache's bound in nodes.
        bound: usize,
    },
    /// An in-memory child that is not a dirty node.
    #[error("in-memory child {handle} is not a dirty node")]
    NotDirty {
        /// Its arena handle.
        handle: u32,
    },
    /// A committed node two parents point to.
    #[error("node {addr} is referenced twice")]
    ReferencedTwice {
        /// The node.
        addr: NodeAddr,
    },
    /// A committed node that is still referenced but scheduled for freeing.
    #[error("node {addr} is referenced but scheduled for freeing")]
    ReferencedButFreed {
        /// The node.
        addr: NodeAddr,
    },
    /// A committed node could not be read or decoded.
    #[error(transparent)]
    Read(#[from] IndexError),
    /// The cached copy of a committed node differs from what is on flash.
    #[error("cached copy of node {addr} differs from flash")]
    CacheDiffers {
        /// The node.
        addr: NodeAddr,
    },
    /// A node at another level than its parent says.
    #[error("{node}: level {found} where {expected} was expected")]
    Level {
        /// The node.
        node: CheckedNode,
        /// The level it claims.
        found: u8,
        /// The level its parent implies.
        expected: u8,
    },
    /// A node with too few or too many entries.
    #[error("{node}: {entries} entries, outside {low}..={high}")]
    Fill {
        /// The node.
        node: CheckedNode,
        /// Its entries.
        entries: usize,
        /// The fewest it may hold (fewer for the root).
        low: usize,
        /// The most it may hold.
        high: usize,
    },
    /// A leaf body above level 0, or an inner body at level 0.
    #[error("{node}: body does not match level {level}")]
    Body {
        /// The node.
        node: CheckedNode,
        /// Its level.
        level: u8,
    },
    /// Keys not strictly ascending within a node.
    #[error("{node}: keys not strictly ascending")]
    KeyOrder {
        /// The node.
        node: CheckedNode,
    },
    /// A node's smallest key is not the separator its parent holds for it.
    #[error("{node}: smallest key {first:?} but parent says {parent:?}")]
    SmallestKey {
        /// The node.
        node: CheckedNode,
        /// Its smallest key.
        first: IndexKey,
        /// The parent's separator.
        parent: IndexKey,
    },
    /// A node's key at or above the parent's next separator.
    #[error("{node}: key {key:?} not below the next separator {separator:?}")]
    AboveSeparator {
        /// The node.
        node: CheckedNode,
        /// Its largest key.
        key: IndexKey,
        /// The next separator in the parent.
        separator: IndexKey,
    },
}

impl CheckError {
    /// The committed node the inconsistency was found in, if it names one.
    pub fn node_addr(&self) -> Option<NodeAddr> {
        let node = match self {
            CheckError::ReferencedTwice { addr }
            | CheckError::ReferencedButFreed { addr }
            | CheckError::CacheDiffers { addr }
            | CheckError::Read(
                IndexError::Corrupted { addr, .. } | IndexError::Uncorrectable { addr },
            ) => return Some(*addr),
            CheckError::Level { node, .. }
            | CheckError::Fill { node, .. }
            | CheckError::Body { node, .. }
            | CheckError::KeyOrder { node }
            | CheckError::SmallestKey { node, .. }
            | CheckError::AboveSeparator { node, .. } => node,
            _ => return None,
        };
        match node {
            CheckedNode::Committed(a) => Some(*a),
            CheckedNode::Dirty(_) => None,
        }
    }
}

/// What became of a lost committed node ([`Index::lost`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum NodeLoss {
    /// The tree does not reference it (stale), or the next commit frees it anyway.
    Unreferenced,
    /// Its cached copy is dirty: the next commit writes it elsewhere.
    Rewritten,
    /// Referenced and not cached: its entries are unreadable.
    Gone,
}

/// Counters of index work.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct IndexStats {
    /// Nodes read through `NodeIo::read_node` (including by `check`).
    pub nodes_read: u64,
    /// Nodes written by commits.
    pub nodes_written: u64,
    /// Committed nodes freed by commits (replaced by a dirty copy, or dropped).
    pub nodes_freed: u64,
    /// Committed nodes an operation found in the clean cache.
    pub cache_hits: u64,
    /// Committed nodes an operation had to read (`check` bypasses the cache and counts
    /// neither hits nor misses).
    pub cache_misses: u64,
}

/// The copy-on-write B+tree. See the module documentation.
pub struct Index {
    geom: Geometry,
    arena: Arena,
    /// The root: a dirty node in memory or the committed root address.
    root: Option<Child>,
    /// Levels above the leaves (0: the root is a leaf).
    height: u8,
    /// Set when the root pointer changed without a dirty root (collapse onto a committed
    /// child, relocation of the root, the tree emptied); cleared by commit.
    root_moved: bool,
    /// Committed addresses replaced or dropped since the last commit, freed by the next one.
    pending_free: Vec<NodeAddr>,
    len: Option<u64>,
    stats: IndexStats,
    buf: Vec<u8>,
    /// Inserting an ascending run ([`Index::replace_range`]): a node overfilled in its middle
    /// splits after the new entry, so that the run's next entries are appended to it.
    ascending: bool,
}

impl std::fmt::Debug for Index {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Index")
            .field("node_bytes", &self.geom.node_bytes)
            .field("root", &self.root)
            .field("height", &self.height)
            .field("dirty_nodes", &self.arena.dirty_count())
            .field("cached_nodes", &self.arena.clean_count())
            .field("pending_free", &self.pending_free.len())
            .field("stats", &self.stats)
            .finish()
    }
}

impl Index {
    /// An empty tree (no root on flash yet).
    pub fn new(node_bytes: usize, cache_bytes: usize) -> Index {
        let geom = Geometry::new(node_bytes);
        Index {
            geom,
            arena: Arena::new(cache_bytes / geom.node_bytes),
            root: None,
            height: 0,
            root_moved: false,
            pending_free: Vec::new(),
            len: Some(0),
            stats: IndexStats::default(),
            buf: vec![0; geom.node_bytes],
            ascending: false,
        }
    }

    /// A tree whose committed root is at `root` (with `height` levels above the leaves, as
    /// returned by commit).
    pub fn open(root: NodeAddr, height: u8, node_bytes: usize, cache_bytes: usize) -> Index {
        let mut ix = Index::new(node_bytes, cache_bytes);
        ix.root = Some(Child::Addr(root));
        ix.height = height;
        ix.len = None;
        ix
    }

    /// (leaf entries, inner children) per node for a node size (after clamping).
    pub fn fanout(node_bytes: usize) -> (usize, usize) {
        let g = Geometry::new(node_bytes);
        (g.leaf_max, g.inner_max)
    }

    /// The node size in use (`node_bytes` as given, clamped to the supported range).
    pub fn node_bytes(&self) -> usize {
        self.geom.node_bytes
    }

    /// Levels above the leaves of the current (possibly uncommitted) tree.
    pub fn height(&self) -> u8 {
        self.height
    }

    /// The value of `key`, if it has one.
    pub fn get(&mut self, io: &mut dyn NodeIo, key: &IndexKey) -> Result<Option<u64>, IndexError> {
        let r = self.get_impl(io, key);
        self.arena.trim();
        r
    }

    /// The entry with the greatest key <= key (used to find the extent covering an offset).
    pub fn floor(
        &mut self,
        io: &mut dyn NodeIo,
        key: &IndexKey,
    ) -> Result<Option<(IndexKey, u64)>, IndexError> {
        let r = self.floor_impl(io, key);
        self.arena.trim();
        r
    }

    /// As [`Index::floor`], from the nodes in memory only: `None` when the path to the leaf
    /// leaves the cache (the answer would need a flash read). For a scheduler's look-ahead,
    /// which must not change the cache or spend time.
    pub fn floor_cached(&self, key: &IndexKey) -> Option<Option<(IndexKey, u64)>> {
        self.floor_cached_impl(key)
    }

    /// Entries with from <= key < to, in order, at most `limit` of them.
    pub fn range(
        &mut self,
        io: &mut dyn NodeIo,
        from: &IndexKey,
        to: &IndexKey,
        limit: usize,
    ) -> Result<Vec<(IndexKey, u64)>, IndexError> {
        let r = self.range_impl(io, from, to, limit);
        self.arena.trim();
        r
    }

    /// Inserts or overwrites; returns the previous value.
    pub fn insert(
        &mut self,
        io: &mut dyn NodeIo,
        key: IndexKey,
        value: u64,
    ) -> Result<Option<u64>, IndexError> {
        let r = self.insert_impl(io, key, value);
        self.arena.trim();
        r
    }

    /// Removes `key`; returns its value, if it had one.
    pub fn remove(
        &mut self,
        io: &mut dyn NodeIo,
        key: &IndexKey,
    ) -> Result<Option<u64>, IndexError> {
        let r = self.remove_impl(io, key);
        self.arena.trim();
        r
    }

    /// Sets the value of `key` in place, in one descent, when that leaves the tree (node
    /// shapes, dirty nodes, nodes to free, clean cache) exactly as `remove(key)`, then a
    /// look-up of each of `probes`, then `insert(key, new)` would: the path to `key` is in
    /// memory, each probe routes to `key`'s leaf, and removing `key` would neither underfill
    /// that leaf nor change its smallest key. `decide` gets the entries before and after `key`
    /// in its leaf (None past its end) and the current value, and returns the new value or
    /// None to decline. Returns the old value, or None when nothing was done (the caller then
    /// runs the basic operations).
    pub fn replace_in_place(
        &mut self,
        io: &mut dyn NodeIo,
        key: &IndexKey,
        probes: &[IndexKey],
        decide: impl FnOnce(Neighbour, u64, Neighbour) -> Option<u64>,
    ) -> Result<Option<u64>, IndexError> {
        let r = self.replace_in_place_impl(io, key, probes, decide);
        self.arena.trim();
        r
    }

    /// Inserts the absent `key` with a look-up's worth of work fewer, when that leaves the tree
    /// exactly as a look-up of each of `probes` and then `insert(key, value)` would: the path
    /// to `key` is in memory and each probe routes to `key`'s leaf. `decide` gets the entries
    /// before and after `key`'s place in that leaf (None past its ends) and returns the value,
    /// or None to decline. Returns whether it inserted (false: nothing was done).
    pub fn insert_in_place(
        &mut self,
        io: &mut dyn NodeIo,
        key: IndexKey,
        probes: &[IndexKey],
        decide: impl FnOnce(Neighbour, Neighbour) -> Option<u64>,
    ) -> Result<bool, IndexError> {
        let r = self.insert_in_place_impl(io, key, probes, decide);
        self.arena.trim();
        r
    }

    /// Replaces a run of entries of one leaf by at most two new ones, in one descent, when
    /// that leaves the tree (node shapes, dirty nodes, nodes to free, clean cache) exactly as
    /// a look-up of each of `probes`, the removal of each replaced entry and then the
    /// insertion of each new one would: the path to `key` is in memory, each probe routes to
    /// `key`'s leaf, the leaf's first entry stays, the new keys belong in that leaf between
    /// the entries around the run, and the removals neither underfill the leaf nor the
    /// insertions overfill it. `plan` sees that leaf's entries and returns the splice, or None
    /// to decline. Returns whether it edited (false: nothing was done, and the caller runs the
    /// basic operations).
    pub fn splice_in_place(
        &mut self,
        io: &mut dyn NodeIo,
        key: &IndexKey,
        probes: &[IndexKey],
        plan: impl FnOnce(LeafView<'_>) -> Option<Splice>,
    ) -> Result<bool, IndexError> {
        let r = self.splice_in_place_impl(io, key, probes, plan);
        self.arena.trim();
        r
    }

    /// As [`Index::remove`] of a key the caller just found, without the look-up `remove`
    /// makes first when the path to it is in memory (the result is the same either way).
    pub fn remove_found(
        &mut self,
        io: &mut dyn NodeIo,
        key: &IndexKey,
    ) -> Result<Option<u64>, IndexError> {
        let r = match self.remove_present_impl(io, key) {
            Ok(Some(old)) => Ok(old),
            Ok(None) => self.remove_impl(io, key),
            Err(e) => Err(e),
        };
        self.arena.trim();
        r
    }

    /// Removes every entry with from <= key < to; returns how many. Subtrees wholly inside
    /// the range are dropped after one visit (their leaves are read only to count entries).
    pub fn remove_range(
        &mut self,
        io: &mut dyn NodeIo,
        from: &IndexKey,
        to: &IndexKey,
    ) -> Result<u64, IndexError> {
        let r = self.remove_range_impl(io, from, to);
        self.arena.trim();
        r
    }

    /// Replaces the entries with from <= key < to by `entries` (ascending, each in the range):
    /// a bulk rewrite of one stretch of keys. The entries are inserted in order, and a node
    /// they overfill splits right after the entry just inserted rather than in the middle, so
    /// a run loaded between existing keys packs its nodes three quarters full (split in the
    /// middle, the left halves it leaves behind would stay half empty). The object store's
    /// unit map writes an object's extents back with it.
    pub fn replace_range(
        &mut self,
        io: &mut dyn NodeIo,
        from: &IndexKey,
        to: &IndexKey,
        entries: &[(IndexKey, u64)],
    ) -> Result<(), IndexError> {
        debug_assert!(
            entries.windows(2).all(|w| w[0].0 < w[1].0),
            "replace_range: entries not ascending"
        );
        debug_assert!(
            entries.iter().all(|(k, _)| from <= k && k < to),
            "replace_range: an entry outside the range"
        );
        let r = self.remove_range_impl(io, from, to).and_then(|_| {
            self.ascending = true;
            let inserted = entries
                .iter()
                .try_for_each(|&(k, v)| self.insert_impl(io, k, v).map(drop));
            self.ascending = false;
            inserted
        });
        self.arena.trim();
        r
    }

    /// Writes every dirty node (children before parents) and frees the addresses they
    /// replace; returns the committed root address and height (None for an empty tree).
    /// After commit nothing is dirty.
    pub fn commit(&mut self, io: &mut dyn NodeIo) -> Result<Option<(NodeAddr, u8)>, IndexError> {
        let r = self.commit_impl(io);
        self.arena.trim();
        r
    }

    /// GC moved the committed node at `from` to `to` (same bytes). `level` and `first_key`
    /// are what write_node was given for it. Updates the parent's pointer (the parent becomes
    /// dirty) or the root address. A `from` that the tree no longer references (stale) is
    /// ignored and reported as Ok(false). A `from` that is still on flash only because the
    /// next commit will free it (it was replaced by a dirty copy, or dropped) counts as
    /// referenced: that commit frees `to` instead.
    ///
    /// The move is recorded in memory only: the committed tree on flash still points at
    /// `from` until the next commit, so the owner must not erase `from` before committing
    /// (or must be ready to redo the relocation after a crash).
    pub fn relocate(
        &mut self,
        io: &mut dyn NodeIo,
        from: NodeAddr,
        to: NodeAddr,
        level: u8,
        first_key: &IndexKey,
    ) -> Result<bool, IndexError> {
        let r = self.relocate_impl(io, from, to, level, first_key);
        self.arena.trim();
        r
    }

    /// The committed node at `addr` is lost: GC could read neither it nor its copy. When the
    /// cache holds it, it becomes dirty (the path to it with it), so the next commit writes it
    /// elsewhere and frees `addr`; a node the next commit frees anyway, or one the tree does
    /// not reference, needs nothing. Only an uncached node the tree still references is gone
    /// for good ([`NodeLoss::Gone`]): the owner must keep its page from being programmed again
    /// while the committed tree points at it.
    pub fn lost(&mut self, io: &mut dyn NodeIo, addr: NodeAddr) -> Result<NodeLoss, IndexError> {
        let r = self.lost_impl(io, addr);
        self.arena.trim();
        r
    }

    /// Whether a commit would write or free anything or change the root.
    pub fn is_dirty(&self) -> bool {
        self.arena.dirty_count() > 0 || !self.pending_free.is_empty() || self.root_moved
    }

    /// Nodes modified in memory since the last commit.
    pub fn dirty_nodes(&self) -> usize {
        self.arena.dirty_count()
    }

    /// Committed nodes the next commit will free (replaced by dirty copies or dropped): still
    /// on flash and still needed by the last committed tree until then.
    pub fn pending_frees(&self) -> &[NodeAddr] {
        &self.pending_free
    }

    /// Number of entries, when known (always for a tree built from `new`; after `open`, once
    /// `check` has counted them).
    pub fn len_hint(&self) -> Option<u64> {
        self.len
    }

    /// Counters of the work done so far.
    pub fn stats(&self) -> IndexStats {
        self.stats
    }

    /// Clean nodes currently cached.
    pub fn cached_nodes(&self) -> usize {
        self.arena.clean_count()
    }

    /// Whole-tree check for tests and fsck: keys sorted across the whole tree, node fill
    /// within bounds (except the root), every leaf at the same depth, separator keys
    /// consistent with children, cached copies equal to what is on flash. Returns the number
    /// of entries and the committed node addresses it visited (so fsck can check each is
    /// referenced exactly once). Committed nodes are read from `io`, not from the cache.
    pub fn check(&mut self, io: &mut dyn NodeIo) -> Result<(u64, Vec<NodeAddr>), CheckError> {
        let r = self.check_impl(io);
        self.arena.trim();
        r
    }
}
