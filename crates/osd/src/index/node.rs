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

/// A node's entries, keys apart from values: searches (`floor`, routing through inner nodes)
/// read the dense key array only, and inserting or removing an entry moves fewer bytes.
/// `keys` and `vals` always have the same length; keys are strictly ascending.
#[derive(Clone, Debug)]
pub(super) struct Entries<T> {
    pub keys: Vec<IndexKey>,
    pub vals: Vec<T>,
    /// Where a search starts guessing (see [`search`]); kept beside the two vectors' headers
    /// so that a guess costs no load of the key array. Refreshed by every method that
    /// changes the keys. Only a hint: a stale one (after a direct write to `keys`) makes a
    /// search slower, never wrong.
    span: Span,
}

/// The keys a search interpolates between: the last key, and the first key of the same
/// kind as it among the first two (a leaf may begin with an object's onode entry, kind 0,
/// before the object's data extents).
#[derive(Clone, Copy, Debug, Default)]
struct Span {
    lo: IndexKey,
    lo_at: u32,
    hi: IndexKey,
}

/// Equal entries, whatever the hints.
impl<T: PartialEq> PartialEq for Entries<T> {
    fn eq(&self, other: &Self) -> bool {
        self.keys == other.keys && self.vals == other.vals
    }
}

impl<T: Eq> Eq for Entries<T> {}

impl<T> Default for Entries<T> {
    fn default() -> Self {
        Entries {
            keys: Vec::new(),
            vals: Vec::new(),
            span: Span::default(),
        }
    }
}

impl<T: Copy> FromIterator<(IndexKey, T)> for Entries<T> {
    fn from_iter<I: IntoIterator<Item = (IndexKey, T)>>(it: I) -> Self {
        let mut e = Entries::default();
        for (k, v) in it {
            e.keys.push(k);
            e.vals.push(v);
        }
        e.refresh();
        e
    }
}

impl<T: Copy> Entries<T> {
    pub fn with_capacity(n: usize) -> Self {
        Entries {
            keys: Vec::with_capacity(n),
            vals: Vec::with_capacity(n),
            span: Span::default(),
        }
    }

    /// Recomputes the search hint from the keys.
    fn refresh(&mut self) {
        let Some(&hi) = self.keys.last() else {
            self.span = Span::default();
            return;
        };
        let lo_at = match self.keys[..] {
            [a, b, ..] if a.oid == hi.oid && a.kind != hi.kind && b.kind == hi.kind => 1,
            _ => 0,
        };
        self.span = Span {
            lo: self.keys[lo_at],
            lo_at: lo_at as u32,
            hi,
        };
    }

    pub fn len(&self) -> usize {
        self.keys.len()
    }

    pub fn is_empty(&self) -> bool {
        self.keys.is_empty()
    }

    /// Entry `i`, if there is one.
    pub fn get(&self, i: usize) -> Option<(IndexKey, T)> {
        Some((*self.keys.get(i)?, *self.vals.get(i)?))
    }

    /// Entry `i` (which must exist).
    pub fn at(&self, i: usize) -> (IndexKey, T) {
        (self.keys[i], self.vals[i])
    }

    /// The entries in order.
    pub fn iter(&self) -> impl Iterator<Item = (IndexKey, T)> + '_ {
        self.keys.iter().copied().zip(self.vals.iter().copied())
    }

    pub fn insert(&mut self, i: usize, k: IndexKey, v: T) {
        self.keys.insert(i, k);
        self.vals.insert(i, v);
        self.refresh();
    }

    pub fn remove(&mut self, i: usize) -> (IndexKey, T) {
        let e = (self.keys.remove(i), self.vals.remove(i));
        self.refresh();
        e
    }

    /// Sets key `i` (an inner node's separator) to `k`.
    pub fn set_key(&mut self, i: usize, k: IndexKey) {
        self.keys[i] = k;
        self.refresh();
    }

    /// Removes the entries in `r`.
    pub fn delete(&mut self, r: std::ops::Range<usize>) {
        self.keys.drain(r.clone());
        self.vals.drain(r);
        self.refresh();
    }

    /// Replaces the entries in `r` by `with`: the entries after `r` move once (in each
    /// array), or not at all when as many come as go.
    pub fn splice(&mut self, r: std::ops::Range<usize>, with: &[(IndexKey, T)]) {
        let (start, end) = (r.start, r.end);
        let len = self.keys.len();
        let gone = end - start;
        if let (Some(extra), Some(&(k0, v0))) = (with.len().checked_sub(gone), with.first()) {
            if extra > 0 {
                self.keys.resize(len + extra, k0);
                self.vals.resize(len + extra, v0);
                self.keys.copy_within(end..len, end + extra);
                self.vals.copy_within(end..len, end + extra);
            }
        } else {
            let fewer = gone - with.len();
            self.keys.copy_within(end..len, end - fewer);
            self.vals.copy_within(end..len, end - fewer);
            self.keys.truncate(len - fewer);
            self.vals.truncate(len - fewer);
        }
        for (j, (k, v)) in with.iter().enumerate() {
            self.keys[start + j] = *k;
            self.vals[start + j] = *v;
        }
        self.refresh();
    }

    pub fn split_off(&mut self, at: usize) -> Self {
        let mut tail = Entries {
            keys: self.keys.split_off(at),
            vals: self.vals.split_off(at),
            span: Span::default(),
        };
        tail.refresh();
        self.refresh();
        tail
    }

    pub fn append(&mut self, other: &mut Self) {
        self.keys.append(&mut other.keys);
        self.vals.append(&mut other.vals);
        self.refresh();
        other.refresh();
    }

    /// Index of `key`, or where it would go.
    pub fn find(&self, key: &IndexKey) -> Result<usize, usize> {
        let i = self.lower(key);
        if self.keys.get(i) == Some(key) {
            Ok(i)
        } else {
            Err(i)
        }
    }

    /// Number of keys <= `key` (the floor is the entry before that position).
    pub fn upper(&self, key: &IndexKey) -> usize {
        self.search(key, |k| k <= key)
    }

    /// Number of keys < `key`.
    pub fn lower(&self, key: &IndexKey) -> usize {
        self.search(key, |k| k < key)
    }

    /// The number of keys for which `pred` (a comparison with `key`) holds, as
    /// `partition_point`. The position is first guessed by interpolation between the keys of
    /// the hint, then confirmed by galloping from the guess; the value at the guess is loaded
    /// at the same time as its key (the caller usually reads a value next to it). That reads
    /// one or two cache lines of keys where the binary search reads six or so: a randomly
    /// rewritten object has one entry per unit, so the offsets in a leaf of one object are
    /// close to evenly spaced, and so are the object ids of the separators in an inner node
    /// (object ids are handed out in order). Where no guess can be made, the binary search.
    fn search(&self, key: &IndexKey, pred: impl Fn(&IndexKey) -> bool) -> usize {
        match interpolate(self.keys.len(), &self.span, key) {
            Some(g) => {
                std::hint::black_box(self.vals.get(g).copied());
                gallop(&self.keys, g, pred)
            }
            None => partition(&self.keys, pred),
        }
    }

    /// The entry with the greatest key <= `key`.
    pub fn floor(&self, key: &IndexKey) -> Option<(IndexKey, T)> {
        self.upper(key).checked_sub(1).map(|i| self.at(i))
    }

    /// Index of the child of an inner node whose subtree may hold `key`: the last entry whose
    /// key is <= `key`, or the first one if `key` is below all of them.
    pub fn route(&self, key: &IndexKey) -> usize {
        self.upper(key).saturating_sub(1)
    }

    /// Whether `key` routes to child `i` (as `route(key) == i`, from the keys around `i`).
    pub fn routes_to(&self, key: &IndexKey, i: usize) -> bool {
        (i == 0 || self.keys[i] <= *key) && self.keys.get(i + 1).is_none_or(|k| key < k)
    }

    /// Moves entries between two adjacent nodes so the left one (`self`) keeps `keep`.
    pub fn rebalance(&mut self, b: &mut Self, keep: usize) {
        if self.len() > keep {
            let tail = self.split_off(keep);
            b.keys.splice(0..0, tail.keys);
            b.vals.splice(0..0, tail.vals);
        } else {
            let take = (keep - self.len()).min(b.len());
            self.keys.extend(b.keys.drain(..take));
            self.vals.extend(b.vals.drain(..take));
        }
        self.refresh();
        b.refresh();
    }
}

/// Fewest keys for which a guess is worth making.
const INTERPOLATE_MIN_KEYS: usize = 16;

/// A guess of where `key` goes among `n` keys hinted by `span`: by object id when the hint's
/// keys are of different objects, else by offset when `key` is of their object and kind.
/// None when neither applies.
fn interpolate(n: usize, span: &Span, key: &IndexKey) -> Option<usize> {
    let (a, b, at) = (&span.lo, &span.hi, span.lo_at as usize);
    if n < INTERPOLATE_MIN_KEYS || at >= n {
        return None;
    }
    if a.oid != b.oid {
        return Some(between(n, a.oid, b.oid, key.oid));
    }
    if key.oid != a.oid || key.kind != a.kind || a.kind != b.kind {
        return None;
    }
    let g = at + between(n - at, a.offset.into(), b.offset.into(), key.offset.into());
    Some(g.min(n - 1))
}

/// Where `x` falls among `n` values spread evenly from `lo` to `hi` (`lo < hi`), as an index
/// below `n`.
fn between(n: usize, lo: u128, hi: u128, x: u128) -> usize {
    if x <= lo {
        return 0;
    }
    if x >= hi {
        return n - 1;
    }
    // An estimate only (the search confirms it), so floating point's rounding is harmless.
    // Differences that fit 64 bits (offsets, and object ids of one partition) convert in
    // hardware; u128 to f64 is a library call.
    let float = |v: u128| u64::try_from(v).map_or(v as f64, |v| v as f64);
    let at = float(x - lo) / float(hi - lo) * (n - 1) as f64;
    (at as usize).min(n - 1)
}

/// As [`partition`], starting from the guess `g` (any index of `keys`): steps of 1, 2, 4 ...
/// away from it bound the answer, then a binary search inside the bound.
fn gallop(keys: &[IndexKey], g: usize, pred: impl Fn(&IndexKey) -> bool) -> usize {
    let n = keys.len();
    if pred(&keys[g]) {
        // Every key up to `g` satisfies `pred`: the answer is in lo..=hi.
        let mut lo = g + 1;
        let mut step = 1;
        while lo + step <= n && pred(&keys[lo + step - 1]) {
            lo += step;
            step *= 2;
        }
        let hi = (lo + step - 1).min(n);
        lo + partition(&keys[lo..hi], pred)
    } else {
        // No key from `g` on satisfies `pred`: the answer is in lo..=hi.
        let mut hi = g;
        let mut step = 1;
        while step <= hi && !pred(&keys[hi - step]) {
            hi -= step;
            step *= 2;
        }
        let lo = hi.saturating_sub(step - 1);
        lo + partition(&keys[lo..hi], pred)
    }
}

/// The number of `keys` for which `pred` holds (as `partition_point`; `pred` must hold on a
/// prefix only): a branch-free binary search that, every third step, first touches the seven
/// keys the next three steps may compare, so that their cache misses overlap instead of
/// following one another (a node's keys are often not in the CPU caches).
fn partition(keys: &[IndexKey], pred: impl Fn(&IndexKey) -> bool) -> usize {
    let mut size = keys.len();
    if size == 0 {
        return 0;
    }
    let mut base = 0;
    let mut step = 0u32;
    while size > 1 {
        if step.is_multiple_of(3) && size > 4 {
            touch_ahead(keys, base, size);
        }
        let half = size / 2;
        let mid = base + half;
        base = std::hint::select_unpredictable(pred(&keys[mid]), mid, base);
        size -= half;
        step += 1;
    }
    base + usize::from(pred(&keys[base]))
}

/// Loads the keys the next three steps of [`partition`] may compare (from `base`, with
/// `size` candidates left), all at once.
fn touch_ahead(keys: &[IndexKey], base: usize, size: usize) {
    let h1 = size / 2;
    let s1 = size - h1;
    let h2 = s1 / 2;
    let h3 = (s1 - h2) / 2;
    let mut sum = keys[base + h1].oid as u64;
    for b1 in [base, base + h1] {
        sum ^= keys[b1 + h2].oid as u64;
        for b2 in [b1, b1 + h2] {
            sum ^= keys[b2 + h3].oid as u64;
        }
    }
    std::hint::black_box(sum);
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) enum Body {
    /// Entries sorted by key, strictly ascending.
    Leaf(Entries<u64>),
    /// (smallest key of the child's subtree, child), sorted, strictly ascending.
    Inner(Entries<Child>),
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
            body: Body::Leaf(Entries::default()),
        }
    }

    pub fn len(&self) -> usize {
        self.keys().len()
    }

    /// The node's keys, whatever its kind.
    pub fn keys(&self) -> &[IndexKey] {
        match &self.body {
            Body::Leaf(v) => &v.keys,
            Body::Inner(v) => &v.keys,
        }
    }

    pub fn first_key(&self) -> Option<IndexKey> {
        self.keys().first().copied()
    }
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
                for (k, val) in v.iter() {
                    k.encode(&mut out[p..p + IndexKey::ENCODED_BYTES]);
                    p += IndexKey::ENCODED_BYTES;
                    out[p..p + 8].copy_from_slice(&val.to_le_bytes());
                    p += 8;
                }
            }
            Body::Inner(v) => {
                for (k, c) in v.iter() {
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
            let mut v = Entries::with_capacity(n + 1);
            for _ in 0..n {
                let k = IndexKey::decode(&b[p..p + IndexKey::ENCODED_BYTES]);
                p += IndexKey::ENCODED_BYTES;
                let mut val = [0u8; 8];
                val.copy_from_slice(&b[p..p + 8]);
                p += 8;
                v.keys.push(k);
                v.vals.push(u64::from_le_bytes(val));
            }
            if v.keys.windows(2).any(|w| w[0] >= w[1]) {
                return Err(bad("leaf keys not strictly ascending".into()));
            }
            v.refresh();
            Body::Leaf(v)
        } else {
            let mut v = Entries::with_capacity(n + 1);
            for _ in 0..n {
                let k = IndexKey::decode(&b[p..p + IndexKey::ENCODED_BYTES]);
                p += IndexKey::ENCODED_BYTES;
                let a = u32::from_le_bytes([b[p], b[p + 1], b[p + 2], b[p + 3]]);
                p += 4;
                v.keys.push(k);
                v.vals.push(Child::Addr(a));
            }
            if v.keys.windows(2).any(|w| w[0] >= w[1]) {
                return Err(bad("separator keys not strictly ascending".into()));
            }
            v.refresh();
            Body::Inner(v)
        };
        Ok(Node { level, body })
    }
}
