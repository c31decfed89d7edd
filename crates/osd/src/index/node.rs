//! In-memory node representation and the on-flash node codec (format in the module doc of
//! `index`).

use super::{IndexError, IndexKey, NodeAddr};

/// The four magic bytes at the start of every index node.
pub const NODE_MAGIC: [u8; 4] = *b"OSIX";
/// The node format version written (and the only one accepted).
pub const NODE_FORMAT_VERSION: u8 = 1;
/// Header: magic (4), version (1), level (1), entry count (2).
pub const NODE_HEADER_BYTES: usize = 8;
/// The CRC-32C that follows the last entry.
pub const NODE_CRC_BYTES: usize = 4;
/// A leaf entry: key (25) + value (8).
pub const LEAF_ENTRY_BYTES: usize = IndexKey::ENCODED_BYTES + 8;
/// An inner entry: key (25) + child address (4).
pub const INNER_ENTRY_BYTES: usize = IndexKey::ENCODED_BYTES + 4;
/// Smallest node size the index works with (smaller requests are rounded up to it).
pub const MIN_NODE_BYTES: usize = 256;
/// Largest node size the index works with (larger requests are clamped to it).
pub const MAX_NODE_BYTES: usize = 1 << 20;

/// Handle of a node slot in the in-memory arena.
pub(super) type Handle = u32;

/// An inner node's pointer to a child: a node in memory (always dirty) or a committed node
/// on flash (which may also be in the clean cache, found by its address).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Child {
    Addr(NodeAddr),
    Mem(Handle),
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) enum Body {
    /// Entries sorted by key, strictly ascending.
    Leaf(Vec<(IndexKey, u64)>),
    /// (smallest key of the child's subtree, child), sorted, strictly ascending.
    Inner(Vec<(IndexKey, Child)>),
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) struct Node {
    pub level: u8,
    pub body: Body,
}

impl Node {
    pub fn empty_leaf() -> Node {
        Node {
            level: 0,
            body: Body::Leaf(Vec::new()),
        }
    }

    pub fn len(&self) -> usize {
        match &self.body {
            Body::Leaf(v) => v.len(),
            Body::Inner(v) => v.len(),
        }
    }

    pub fn first_key(&self) -> Option<IndexKey> {
        match &self.body {
            Body::Leaf(v) => v.first().map(|e| e.0),
            Body::Inner(v) => v.first().map(|e| e.0),
        }
    }
}

/// Index of the child of an inner node whose subtree may hold `key`: the last entry whose
/// key is <= `key`, or the first one if `key` is below all of them.
pub(super) fn route<T>(v: &[(IndexKey, T)], key: &IndexKey) -> usize {
    v.partition_point(|e| e.0 <= *key).saturating_sub(1)
}

/// Sizes derived from the node size.
#[derive(Clone, Copy, Debug)]
pub(super) struct Geometry {
    pub node_bytes: usize,
    pub leaf_max: usize,
    pub leaf_min: usize,
    pub inner_max: usize,
    pub inner_min: usize,
}

impl Geometry {
    pub fn new(node_bytes: usize) -> Geometry {
        let node_bytes = node_bytes.clamp(MIN_NODE_BYTES, MAX_NODE_BYTES);
        let room = node_bytes - NODE_HEADER_BYTES - NODE_CRC_BYTES;
        let leaf_max = room / LEAF_ENTRY_BYTES;
        let inner_max = room / INNER_ENTRY_BYTES;
        Geometry {
            node_bytes,
            leaf_max,
            leaf_min: (leaf_max / 4).max(1),
            inner_max,
            // An inner node below the minimum may have a single child; the minimum of two
            // guarantees that a node that is not underfull branches.
            inner_min: (inner_max / 4).max(2),
        }
    }

    pub fn max(&self, level: u8) -> usize {
        if level == 0 {
            self.leaf_max
        } else {
            self.inner_max
        }
    }

    pub fn min(&self, level: u8) -> usize {
        if level == 0 {
            self.leaf_min
        } else {
            self.inner_min
        }
    }

    /// Encodes `node` into `out` (resized to node_bytes). Every child must be committed.
    /// Returns the node's first key.
    pub fn encode(&self, node: &Node, out: &mut Vec<u8>) -> Result<IndexKey, IndexError> {
        out.clear();
        out.resize(self.node_bytes, 0);
        let n = node.len();
        if n == 0
            || n > self.max(node.level)
            || (node.level == 0) != matches!(node.body, Body::Leaf(_))
        {
            return Err(IndexError::Io(format!(
                "internal: cannot encode a level-{} node with {n} entries",
                node.level
            )));
        }
        out[0..4].copy_from_slice(&NODE_MAGIC);
        out[4] = NODE_FORMAT_VERSION;
        out[5] = node.level;
        out[6..8].copy_from_slice(&(n as u16).to_le_bytes());
        let mut p = NODE_HEADER_BYTES;
        match &node.body {
            Body::Leaf(v) => {
                for (k, val) in v {
                    k.encode(&mut out[p..p + IndexKey::ENCODED_BYTES]);
                    p += IndexKey::ENCODED_BYTES;
                    out[p..p + 8].copy_from_slice(&val.to_le_bytes());
                    p += 8;
                }
            }
            Body::Inner(v) => {
                for (k, c) in v {
                    let Child::Addr(a) = c else {
                        return Err(IndexError::Io(
                            "internal: encoding a node with an uncommitted child".into(),
                        ));
                    };
                    k.encode(&mut out[p..p + IndexKey::ENCODED_BYTES]);
                    p += IndexKey::ENCODED_BYTES;
                    out[p..p + 4].copy_from_slice(&a.to_le_bytes());
                    p += 4;
                }
            }
        }
        let crc = crc32c::crc32c(&out[..p]);
        out[p..p + NODE_CRC_BYTES].copy_from_slice(&crc.to_le_bytes());
        node.first_key()
            .ok_or_else(|| IndexError::Io("internal: encoding an empty node".into()))
    }

    /// Decodes an untrusted node image read from `addr`. `expected_level`, if given, must match.
    pub fn decode(
        &self,
        addr: NodeAddr,
        b: &[u8],
        expected_level: Option<u8>,
    ) -> Result<Node, IndexError> {
        let bad = |what: String| IndexError::Corrupted { addr, what };
        if b.len() != self.node_bytes {
            return Err(bad(format!(
                "node is {} bytes, expected {}",
                b.len(),
                self.node_bytes
            )));
        }
        if b[0..4] != NODE_MAGIC {
            return Err(bad(format!("bad magic {:02x?}", &b[0..4])));
        }
        if b[4] != NODE_FORMAT_VERSION {
            return Err(bad(format!("unsupported format version {}", b[4])));
        }
        let level = b[5];
        if let Some(want) = expected_level {
            if level != want {
                return Err(bad(format!(
                    "node is at level {level}, expected level {want}"
                )));
            }
        }
        let n = u16::from_le_bytes([b[6], b[7]]) as usize;
        let (entry, max) = if level == 0 {
            (LEAF_ENTRY_BYTES, self.leaf_max)
        } else {
            (INNER_ENTRY_BYTES, self.inner_max)
        };
        if n == 0 || n > max {
            return Err(bad(format!("entry count {n} outside 1..={max}")));
        }
        let used = NODE_HEADER_BYTES + n * entry;
        // n <= max guarantees used + CRC fits in the node.
        let stored = u32::from_le_bytes([b[used], b[used + 1], b[used + 2], b[used + 3]]);
        let crc = crc32c::crc32c(&b[..used]);
        if stored != crc {
            return Err(bad(format!(
                "CRC mismatch: stored {stored:08x}, computed {crc:08x}"
            )));
        }
        if b[used + NODE_CRC_BYTES..].iter().any(|&x| x != 0) {
            return Err(bad("nonzero bytes after the CRC".into()));
        }
        let mut p = NODE_HEADER_BYTES;
        let body = if level == 0 {
            let mut v = Vec::with_capacity(n + 1);
            for _ in 0..n {
                let k = IndexKey::decode(&b[p..p + IndexKey::ENCODED_BYTES]);
                p += IndexKey::ENCODED_BYTES;
                let mut val = [0u8; 8];
                val.copy_from_slice(&b[p..p + 8]);
                p += 8;
                v.push((k, u64::from_le_bytes(val)));
            }
            if v.windows(2).any(|w| w[0].0 >= w[1].0) {
                return Err(bad("leaf keys not strictly ascending".into()));
            }
            Body::Leaf(v)
        } else {
            let mut v = Vec::with_capacity(n + 1);
            for _ in 0..n {
                let k = IndexKey::decode(&b[p..p + IndexKey::ENCODED_BYTES]);
                p += IndexKey::ENCODED_BYTES;
                let a = u32::from_le_bytes([b[p], b[p + 1], b[p + 2], b[p + 3]]);
                p += 4;
                v.push((k, Child::Addr(a)));
            }
            if v.windows(2).any(|w| w[0].0 >= w[1].0) {
                return Err(bad("separator keys not strictly ascending".into()));
            }
            Body::Inner(v)
        };
        Ok(Node { level, body })
    }
}
