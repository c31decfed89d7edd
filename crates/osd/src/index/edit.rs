//! Edits in one descent that leave the tree exactly as a longer sequence of the basic operations
//! would: the same node shapes, the same dirty nodes, the same committed nodes to free and the
//! same clean cache. The owner's results (nodes written, flash reads, time) therefore do not
//! depend on which path an edit took. When an edit cannot promise that, it does nothing and
//! says so, and the owner runs the basic operations instead.

use super::node::{Body, Child, Handle};
use super::{Index, IndexError, IndexKey, NodeIo};

type Result<T> = std::result::Result<T, IndexError>;

/// An entry next to the edited one within its leaf.
pub type Neighbour = Option<(IndexKey, u64)>;

/// The entries of one leaf, read-only, for the plan of [`Index::splice_in_place`].
#[derive(Clone, Copy, Debug)]
pub struct LeafView<'a> {
    keys: &'a [IndexKey],
    vals: &'a [u64],
}

impl LeafView<'_> {
    /// Entries in the leaf.
    pub fn len(&self) -> usize {
        self.keys.len()
    }

    /// Whether the leaf is empty (never, for a leaf of a tree).
    pub fn is_empty(&self) -> bool {
        self.keys.is_empty()
    }

    /// The position of `key` in the leaf, or where it would go.
    pub fn find(&self, key: &IndexKey) -> std::result::Result<usize, usize> {
        self.keys.binary_search(key)
    }

    /// Entry `i`, if the leaf has one.
    pub fn get(&self, i: usize) -> Neighbour {
        Some((*self.keys.get(i)?, *self.vals.get(i)?))
    }
}

/// What [`Index::splice_in_place`] does to a leaf: its entries `start..end` are replaced by
/// the first `n` (at most 2) of `with`, which must be strictly ascending.
#[derive(Clone, Copy, Debug)]
pub struct Splice {
    /// The first entry replaced.
    pub start: usize,
    /// One past the last entry replaced (`start` for none).
    pub end: usize,
    /// The new entries.
    pub with: [(IndexKey, u64); 2],
    /// How many of `with` to insert.
    pub n: usize,
}

impl Index {
    /// The leaf `key` routes to, found from the nodes in memory without touching the cache's
    /// order (so a refusal leaves no trace). None when a node on the way is not in memory or
    /// one of `probes` routes to another leaf.
    fn leaf_in_memory(&self, key: &IndexKey, probes: &[IndexKey]) -> Option<Handle> {
        self.leaf_in_memory_bounded(key, probes).map(|(h, _)| h)
    }

    /// As [`Index::leaf_in_memory`], with the leaf's exclusive upper bound: the nearest
    /// separator to the right of the path (None for the last leaf). A key between the leaf's
    /// first key and that bound routes to the leaf.
    fn leaf_in_memory_bounded(
        &self,
        key: &IndexKey,
        probes: &[IndexKey],
    ) -> Option<(Handle, Option<IndexKey>)> {
        let mut cur = self.root?;
        let mut level = self.height;
        let mut bound = None;
        loop {
            let h = match cur {
                Child::Mem(h) => h,
                Child::Addr(a) => self.arena.peek(a)?,
            };
            let node = self.arena.node(h);
            if node.level != level {
                return None;
            }
            match &node.body {
                Body::Leaf(_) if level == 0 => return Some((h, bound)),
                Body::Inner(v) if level > 0 && !v.is_empty() => {
                    let i = self.arena.route(h, level, v, key);
                    if probes.iter().any(|p| !v.routes_to(p, i)) {
                        return None;
                    }
                    // Deeper separators are tighter: the subtrees nest.
                    if let Some(k) = v.keys.get(i + 1) {
                        bound = Some(*k);
                    }
                    cur = v.vals[i];
                    level -= 1;
                }
                _ => return None,
            }
        }
    }

    /// Makes the path to `key`'s leaf dirty, in the order a removal or insertion does, and
    /// returns the leaf.
    fn dirty_path(&mut self, io: &mut dyn NodeIo, key: &IndexKey) -> Result<Handle> {
        let mut h = self
            .dirty_root(io)?
            .ok_or_else(|| IndexError::Io("internal: dirtying the path of an empty tree".into()))?;
        let mut level = self.height;
        while level > 0 {
            let (i, c) = self.child_for(h, key)?;
            let ch = self.make_dirty(io, c, level - 1)?;
            self.set_child(h, i, Child::Mem(ch))?;
            h = ch;
            level -= 1;
        }
        Ok(h)
    }

    pub(super) fn replace_in_place_impl(
        &mut self,
        io: &mut dyn NodeIo,
        key: &IndexKey,
        probes: &[IndexKey],
        decide: impl FnOnce(Neighbour, u64, Neighbour) -> Option<u64>,
    ) -> Result<Option<u64>> {
        let Some(h) = self.leaf_in_memory(key, probes) else {
            return Ok(None);
        };
        let Body::Leaf(v) = &self.arena.node(h).body else {
            return Ok(None);
        };
        let Ok(i) = v.find(key) else {
            return Ok(None);
        };
        // Removing the entry must not underfill the leaf (the removal would merge or
        // rebalance), nor change its smallest key (re-inserting could then route elsewhere).
        let fewest = if self.height == 0 {
            2
        } else {
            self.geom.leaf_min + 1
        };
        if i == 0 || v.len() < fewest {
            return Ok(None);
        }
        let old = v.vals[i];
        let Some(new) = decide(v.get(i - 1), old, v.get(i + 1)) else {
            return Ok(None);
        };
        let leaf = self.dirty_path(io, key)?;
        let v = self.leaf_mut(leaf)?;
        match v.keys.get(i) {
            Some(k) if k == key => v.vals[i] = new,
            _ => {
                return Err(IndexError::Io(
                    "internal: entry moved while dirtying".into(),
                ))
            }
        }
        Ok(Some(old))
    }

    pub(super) fn insert_in_place_impl(
        &mut self,
        io: &mut dyn NodeIo,
        key: IndexKey,
        probes: &[IndexKey],
        decide: impl FnOnce(Neighbour, Neighbour) -> Option<u64>,
    ) -> Result<bool> {
        let Some(h) = self.leaf_in_memory(&key, probes) else {
            return Ok(false);
        };
        let Body::Leaf(v) = &self.arena.node(h).body else {
            return Ok(false);
        };
        let Err(i) = v.find(&key) else {
            return Ok(false);
        };
        let prev = i.checked_sub(1).and_then(|j| v.get(j));
        let Some(value) = decide(prev, v.get(i)) else {
            return Ok(false);
        };
        // The look-ups it replaces touched only nodes this insertion dirties (or that were
        // dirty), so the insertion itself is all that remains.
        self.insert_impl(io, key, value)?;
        Ok(true)
    }

    /// Removes `key` when the path to its leaf is in memory and holds it, without the look-up
    /// `remove` makes first (the touches of that look-up are undone by dirtying the same
    /// path). None when that cannot be told from memory.
    pub(super) fn remove_present_impl(
        &mut self,
        io: &mut dyn NodeIo,
        key: &IndexKey,
    ) -> Result<Option<Option<u64>>> {
        let Some(h) = self.leaf_in_memory(key, &[]) else {
            return Ok(None);
        };
        let Body::Leaf(v) = &self.arena.node(h).body else {
            return Ok(None);
        };
        if v.find(key).is_err() {
            return Ok(None);
        }
        self.remove_found_impl(io, key).map(Some)
    }
}

impl Index {
    pub(super) fn splice_in_place_impl(
        &mut self,
        io: &mut dyn NodeIo,
        key: &IndexKey,
        probes: &[IndexKey],
        plan: impl FnOnce(LeafView<'_>) -> Option<Splice>,
    ) -> Result<bool> {
        let Some((h, bound)) = self.leaf_in_memory_bounded(key, probes) else {
            return Ok(false);
        };
        let Body::Leaf(v) = &self.arena.node(h).body else {
            return Ok(false);
        };
        let Some(s) = plan(LeafView {
            keys: &v.keys,
            vals: &v.vals,
        }) else {
            return Ok(false);
        };
        let len = v.len();
        let new = s.with.get(..s.n).unwrap_or(&[]);
        // The leaf's first entry stays (its key is the separator above), the entries before
        // and after the splice bound the new ones, and a new entry past the leaf's end stays
        // below the next leaf's separator: every new key routes to this leaf, as the basic
        // insertions would find it.
        if s.start == 0 || s.start > s.end || s.end > len || s.n > 2 {
            return Ok(false);
        }
        if s.end == s.start && new.is_empty() {
            return Ok(false);
        }
        let mut lo = v.keys[s.start - 1];
        for (k, _) in new {
            if *k <= lo {
                return Ok(false);
            }
            lo = *k;
        }
        let hi = if s.end < len {
            Some(v.keys[s.end])
        } else {
            bound
        };
        if hi.is_some_and(|hi| lo >= hi) {
            return Ok(false);
        }
        // The removals must not underfill the leaf (they would merge or rebalance) and the
        // insertions must not overfill it (they would split).
        let removed = s.end - s.start;
        let fewest = if self.height == 0 {
            1
        } else {
            self.geom.leaf_min
        };
        if len - removed < fewest || len - removed + new.len() > self.geom.leaf_max {
            return Ok(false);
        }
        let leaf = self.dirty_path(io, key)?;
        if leaf != h {
            return Err(IndexError::Io(
                "internal: the leaf moved while dirtying".into(),
            ));
        }
        self.leaf_mut(leaf)?.splice(s.start..s.end, new);
        self.len = self.len.map(|n| n - removed as u64 + new.len() as u64);
        Ok(true)
    }
}
