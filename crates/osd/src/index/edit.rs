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

impl Index {
    /// The leaf `key` routes to, found from the nodes in memory without touching the cache's
    /// order (so a refusal leaves no trace). None when a node on the way is not in memory or
    /// one of `probes` routes to another leaf.
    fn leaf_in_memory(&self, key: &IndexKey, probes: &[IndexKey]) -> Option<Handle> {
        let mut cur = self.root?;
        let mut level = self.height;
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
                Body::Leaf(_) if level == 0 => return Some(h),
                Body::Inner(v) if level > 0 && !v.is_empty() => {
                    let i = self.arena.route(h, level, v, key);
                    if probes.iter().any(|p| !v.routes_to(p, i)) {
                        return None;
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
