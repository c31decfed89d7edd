//! The tree algorithms behind the public `Index` methods.

use super::cache::SlotState;
use super::node::{Body, Child, Entries, Handle, Node};
use super::{CheckError, CheckedNode, Index, IndexError, IndexKey, NodeAddr, NodeIo, NodeLoss};
use rustc_hash::FxHashSet;

type Result<T> = std::result::Result<T, IndexError>;

fn internal(what: &str) -> IndexError {
    IndexError::Io(format!("internal: {what}"))
}

fn below(level: u8) -> Result<u8> {
    level
        .checked_sub(1)
        .ok_or_else(|| internal("inner node at level 0"))
}

/// Where to split an overfull node of `len` entries whose newest entry went to `at`: in the
/// middle, or, when the entry was appended, leaving three quarters on the left so that
/// ascending loads fill nodes well. In an `ascending` run ([`Index::replace_range`]) the node
/// splits right after the new entry (within a quarter of either end), so the run goes on
/// appending to the left node.
fn split_point(len: usize, at: usize, ascending: bool) -> usize {
    if at + 1 == len {
        len - len / 4
    } else if ascending {
        (at + 1).clamp(len / 4, len - len / 4)
    } else {
        len / 2
    }
}

struct CheckCtx {
    visited: Vec<NodeAddr>,
    seen: FxHashSet<NodeAddr>,
    pending: FxHashSet<NodeAddr>,
    dirty_seen: usize,
}

impl Index {
    // ---- node access -----------------------------------------------------------------

    fn read_node(&mut self, io: &mut dyn NodeIo, addr: NodeAddr, level: u8) -> Result<Node> {
        self.buf.clear();
        self.buf.resize(self.geom.node_bytes, 0);
        io.read_node(addr, &mut self.buf)?;
        self.stats.nodes_read += 1;
        self.geom.decode(addr, &self.buf, Some(level))
    }

    /// The committed node at `addr` (expected at `level`), from the cache or read and cached.
    /// The handle stays valid only until the next fetch (which may evict it).
    fn fetch(&mut self, io: &mut dyn NodeIo, addr: NodeAddr, level: u8) -> Result<Handle> {
        if let Some(h) = self.arena.lookup(addr) {
            self.stats.cache_hits += 1;
            let l = self.arena.node(h).level;
            if l != level {
                return Err(IndexError::Corrupted {
                    addr,
                    what: format!("node is at level {l}, expected level {level}"),
                });
            }
            return Ok(h);
        }
        self.stats.cache_misses += 1;
        let node = self.read_node(io, addr, level)?;
        Ok(self.arena.insert_clean(addr, node))
    }

    /// A copy of the committed node at `addr`, without caching it (it is about to be freed).
    fn load_owned(&mut self, io: &mut dyn NodeIo, addr: NodeAddr, level: u8) -> Result<Node> {
        if let Some(h) = self.arena.peek(addr) {
            self.stats.cache_hits += 1;
            let node = self.arena.node(h).clone();
            if node.level != level {
                return Err(IndexError::Corrupted {
                    addr,
                    what: format!("node is at level {}, expected level {level}", node.level),
                });
            }
            return Ok(node);
        }
        self.stats.cache_misses += 1;
        self.read_node(io, addr, level)
    }

    fn resolve(&mut self, io: &mut dyn NodeIo, c: Child, level: u8) -> Result<Handle> {
        match c {
            Child::Mem(h) => Ok(h),
            Child::Addr(a) => self.fetch(io, a, level),
        }
    }

    /// The node behind `c` as a dirty node (copy-on-write): a committed node leaves the cache
    /// and its address is freed at the next commit. The caller must store `Child::Mem` of
    /// the result in the (dirty) parent.
    pub(super) fn make_dirty(
        &mut self,
        io: &mut dyn NodeIo,
        c: Child,
        level: u8,
    ) -> Result<Handle> {
        match c {
            Child::Mem(h) => Ok(h),
            Child::Addr(a) => {
                let h = self.fetch(io, a, level)?;
                if let Some(a) = self.arena.clean_to_dirty(h) {
                    self.pending_free.push(a);
                }
                Ok(h)
            }
        }
    }

    pub(super) fn dirty_root(&mut self, io: &mut dyn NodeIo) -> Result<Option<Handle>> {
        let Some(r) = self.root else {
            return Ok(None);
        };
        let h = self.make_dirty(io, r, self.height)?;
        self.root = Some(Child::Mem(h));
        Ok(Some(h))
    }

    pub(super) fn leaf_mut(&mut self, h: Handle) -> Result<&mut Entries<u64>> {
        match &mut self.arena.node_mut_same_keys(h).body {
            Body::Leaf(v) => Ok(v),
            Body::Inner(_) => Err(internal("expected a leaf")),
        }
    }

    pub(super) fn inner_mut(&mut self, h: Handle) -> Result<&mut Entries<Child>> {
        match &mut self.arena.node_mut(h).body {
            Body::Inner(v) => Ok(v),
            Body::Leaf(_) => Err(internal("expected an inner node")),
        }
    }

    /// Points child `i` of inner node `h` at `c` (its keys stay as they are).
    pub(super) fn set_child(&mut self, h: Handle, i: usize, c: Child) -> Result<()> {
        match &mut self.arena.node_mut_same_keys(h).body {
            Body::Inner(v) => match v.vals.get_mut(i) {
                Some(x) => {
                    *x = c;
                    Ok(())
                }
                None => Err(internal("child index out of range")),
            },
            Body::Leaf(_) => Err(internal("expected an inner node")),
        }
    }

    /// Sets the separator of child `i` of inner node `h` to `k`; when it is already `k`
    /// nothing changes (and routing memos stay valid).
    pub(super) fn set_key(&mut self, h: Handle, i: usize, k: IndexKey) -> Result<()> {
        if self.inner(h)?.keys.get(i) == Some(&k) {
            return Ok(());
        }
        let v = self.inner_mut(h)?;
        if i >= v.len() {
            return Err(internal("child index out of range"));
        }
        v.set_key(i, k);
        Ok(())
    }

    fn inner(&self, h: Handle) -> Result<&Entries<Child>> {
        match &self.arena.node(h).body {
            Body::Inner(v) => Ok(v),
            Body::Leaf(_) => Err(internal("expected an inner node")),
        }
    }

    /// The child of inner node `h` to follow for `key`, and its index.
    pub(super) fn child_for(&self, h: Handle, key: &IndexKey) -> Result<(usize, Child)> {
        let node = self.arena.node(h);
        let Body::Inner(v) = &node.body else {
            return Err(internal("expected an inner node"));
        };
        let i = self.arena.route(h, node.level, v, key);
        let c = *v.vals.get(i).ok_or_else(|| internal("empty inner node"))?;
        Ok((i, c))
    }

    // ---- lookups -----------------------------------------------------------------------

    /// The leaf whose range holds `key` (None for an empty tree).
    fn find_leaf(&mut self, io: &mut dyn NodeIo, key: &IndexKey) -> Result<Option<Handle>> {
        let Some(mut cur) = self.root else {
            return Ok(None);
        };
        let mut level = self.height;
        loop {
            let h = self.resolve(io, cur, level)?;
            if level == 0 {
                return Ok(Some(h));
            }
            cur = self.child_for(h, key)?.1;
            level -= 1;
        }
    }

    pub(super) fn get_impl(&mut self, io: &mut dyn NodeIo, key: &IndexKey) -> Result<Option<u64>> {
        let Some(h) = self.find_leaf(io, key)? else {
            return Ok(None);
        };
        let v = self.leaf_mut(h)?;
        Ok(v.find(key).ok().map(|i| v.vals[i]))
    }

    pub(super) fn floor_impl(
        &mut self,
        io: &mut dyn NodeIo,
        key: &IndexKey,
    ) -> Result<Option<(IndexKey, u64)>> {
        // Separators are exact subtree minima, so the leaf chosen for `key` holds the floor
        // whenever one exists.
        let Some(h) = self.find_leaf(io, key)? else {
            return Ok(None);
        };
        Ok(self.leaf_mut(h)?.floor(key))
    }

    pub(super) fn floor_cached_impl(&self, key: &IndexKey) -> Option<Option<(IndexKey, u64)>> {
        let Some(mut cur) = self.root else {
            return Some(None);
        };
        let mut level = self.height;
        loop {
            let h = match cur {
                Child::Mem(h) => h,
                Child::Addr(a) => self.arena.peek(a)?,
            };
            match &self.arena.node(h).body {
                Body::Leaf(v) if level == 0 => return Some(v.floor(key)),
                Body::Inner(v) if level > 0 && !v.is_empty() => {
                    cur = v.vals[self.arena.route(h, level, v, key)];
                    level -= 1;
                }
                // A node of the wrong kind is corruption the real lookup reports.
                _ => return None,
            }
        }
    }

    pub(super) fn range_impl(
        &mut self,
        io: &mut dyn NodeIo,
        from: &IndexKey,
        to: &IndexKey,
        limit: usize,
    ) -> Result<Vec<(IndexKey, u64)>> {
        let mut out = Vec::new();
        if from >= to || limit == 0 {
            return Ok(out);
        }
        if let Some(r) = self.root {
            self.range_rec(io, r, self.height, from, to, limit, &mut out)?;
        }
        Ok(out)
    }

    #[allow(clippy::too_many_arguments)]
    fn range_rec(
        &mut self,
        io: &mut dyn NodeIo,
        c: Child,
        level: u8,
        from: &IndexKey,
        to: &IndexKey,
        limit: usize,
        out: &mut Vec<(IndexKey, u64)>,
    ) -> Result<()> {
        let h = self.resolve(io, c, level)?;
        let kids: Vec<Child> = match &self.arena.node(h).body {
            Body::Leaf(v) => {
                for e in v.iter().skip(v.lower(from)) {
                    if e.0 >= *to || out.len() >= limit {
                        break;
                    }
                    out.push(e);
                }
                return Ok(());
            }
            Body::Inner(v) => {
                let lo = v.route(from);
                let hi = v.lower(to);
                if hi <= lo {
                    return Ok(());
                }
                v.vals[lo..hi].to_vec()
            }
        };
        let below = below(level)?;
        for k in kids {
            if out.len() >= limit {
                break;
            }
            self.range_rec(io, k, below, from, to, limit, out)?;
        }
        Ok(())
    }

    // ---- insert ------------------------------------------------------------------------

    pub(super) fn insert_impl(
        &mut self,
        io: &mut dyn NodeIo,
        key: IndexKey,
        value: u64,
    ) -> Result<Option<u64>> {
        let Some(root) = self.dirty_root(io)? else {
            let h = self.arena.alloc_dirty(Node {
                level: 0,
                body: Body::Leaf([(key, value)].into_iter().collect()),
            });
            self.root = Some(Child::Mem(h));
            self.height = 0;
            self.root_moved = true;
            self.len = self.len.map(|n| n + 1);
            return Ok(None);
        };
        let (old, split) = self.insert_rec(io, root, self.height, key, value)?;
        if let Some(s) = split {
            let level = self
                .height
                .checked_add(1)
                .ok_or_else(|| internal("tree too tall"))?;
            let k0 = self
                .arena
                .node(root)
                .first_key()
                .ok_or_else(|| internal("empty node"))?;
            let k1 = self
                .arena
                .node(s)
                .first_key()
                .ok_or_else(|| internal("empty node"))?;
            let r = self.arena.alloc_dirty(Node {
                level,
                body: Body::Inner(
                    [(k0, Child::Mem(root)), (k1, Child::Mem(s))]
                        .into_iter()
                        .collect(),
                ),
            });
            self.root = Some(Child::Mem(r));
            self.height = level;
        }
        if old.is_none() {
            self.len = self.len.map(|n| n + 1);
        }
        Ok(old)
    }

    /// Inserts into the dirty subtree `h`; returns the old value and the new right sibling
    /// if `h` split.
    fn insert_rec(
        &mut self,
        io: &mut dyn NodeIo,
        h: Handle,
        level: u8,
        key: IndexKey,
        value: u64,
    ) -> Result<(Option<u64>, Option<Handle>)> {
        if level == 0 {
            let (max, ascending) = (self.geom.leaf_max, self.ascending);
            let v = self.leaf_mut(h)?;
            let i = match v.find(&key) {
                Ok(i) => {
                    let old = std::mem::replace(&mut v.vals[i], value);
                    return Ok((Some(old), None));
                }
                Err(i) => i,
            };
            v.insert(i, key, value);
            if v.len() <= max {
                return Ok((None, None));
            }
            let right = v.split_off(split_point(v.len(), i, ascending));
            let s = self.arena.alloc_dirty(Node {
                level: 0,
                body: Body::Leaf(right),
            });
            return Ok((None, Some(s)));
        }
        let below = below(level)?;
        let (i, c) = self.child_for(h, &key)?;
        let ch = self.make_dirty(io, c, below)?;
        self.set_child(h, i, Child::Mem(ch))?;
        let (old, split) = self.insert_rec(io, ch, below, key, value)?;
        let k = self
            .arena
            .node(ch)
            .first_key()
            .ok_or_else(|| internal("empty node"))?;
        let ks = match split {
            Some(s) => Some((
                s,
                self.arena
                    .node(s)
                    .first_key()
                    .ok_or_else(|| internal("empty node"))?,
            )),
            None => None,
        };
        let (max, ascending) = (self.geom.inner_max, self.ascending);
        self.set_key(h, i, k)?;
        let Some((s, ks)) = ks else {
            return Ok((old, None));
        };
        let v = self.inner_mut(h)?;
        v.insert(i + 1, ks, Child::Mem(s));
        if v.len() <= max {
            return Ok((old, None));
        }
        let right = v.split_off(split_point(v.len(), i + 1, ascending));
        let s = self.arena.alloc_dirty(Node {
            level,
            body: Body::Inner(right),
        });
        Ok((old, Some(s)))
    }

    // ---- removal -----------------------------------------------------------------------

    pub(super) fn remove_impl(
        &mut self,
        io: &mut dyn NodeIo,
        key: &IndexKey,
    ) -> Result<Option<u64>> {
        // Look first, so that removing an absent key dirties nothing.
        if self.get_impl(io, key)?.is_none() {
            return Ok(None);
        }
        self.remove_found_impl(io, key)
    }

    /// Removes `key`, which is in the tree.
    pub(super) fn remove_found_impl(
        &mut self,
        io: &mut dyn NodeIo,
        key: &IndexKey,
    ) -> Result<Option<u64>> {
        let Some(root) = self.dirty_root(io)? else {
            return Ok(None);
        };
        let old = self.remove_rec(io, root, self.height, key)?;
        self.finalize_root();
        if old.is_some() {
            self.len = self.len.map(|n| n.saturating_sub(1));
        }
        Ok(old)
    }

    fn remove_rec(
        &mut self,
        io: &mut dyn NodeIo,
        h: Handle,
        level: u8,
        key: &IndexKey,
    ) -> Result<Option<u64>> {
        if level == 0 {
            let v = self.leaf_mut(h)?;
            return Ok(match v.find(key) {
                Ok(i) => Some(v.remove(i).1),
                Err(_) => None,
            });
        }
        let below = below(level)?;
        let (i, c) = self.child_for(h, key)?;
        let ch = self.make_dirty(io, c, below)?;
        self.set_child(h, i, Child::Mem(ch))?;
        let old = self.remove_rec(io, ch, below, key)?;
        self.fix_child(io, h, level, i)?;
        Ok(old)
    }

    /// After a change below child `i` of `h` only: when that child is still within bounds,
    /// refreshing its separator is all there is to do (the common case, and much cheaper than
    /// the full repair, which looks at every child).
    fn fix_child(&mut self, io: &mut dyn NodeIo, h: Handle, level: u8, i: usize) -> Result<()> {
        let min = self.geom.min(below(level)?);
        if let Some((_, Child::Mem(ch))) = self.inner(h)?.get(i) {
            let node = self.arena.node(ch);
            if node.len() >= min {
                if let Some(k) = node.first_key() {
                    self.set_key(h, i, k)?;
                    return Ok(());
                }
            }
        }
        self.fix_children(io, h, level)
    }

    pub(super) fn remove_range_impl(
        &mut self,
        io: &mut dyn NodeIo,
        from: &IndexKey,
        to: &IndexKey,
    ) -> Result<u64> {
        if from >= to || self.range_impl(io, from, to, 1)?.is_empty() {
            return Ok(0);
        }
        let Some(root) = self.dirty_root(io)? else {
            return Ok(0);
        };
        let n = self.remove_range_rec(io, root, self.height, from, to)?;
        self.finalize_root();
        self.len = self.len.map(|l| l.saturating_sub(n));
        Ok(n)
    }

    fn remove_range_rec(
        &mut self,
        io: &mut dyn NodeIo,
        h: Handle,
        level: u8,
        from: &IndexKey,
        to: &IndexKey,
    ) -> Result<u64> {
        if level == 0 {
            let v = self.leaf_mut(h)?;
            let s = v.lower(from);
            let e = v.lower(to).max(s);
            v.delete(s..e);
            return Ok((e - s) as u64);
        }
        let below = below(level)?;
        let (lo, hi, middle) = {
            let v = self.inner(h)?;
            let lo = v.route(from);
            let hi = v.lower(to);
            if hi <= lo {
                return Ok(0);
            }
            // Children lo+1 .. hi-1 lie wholly inside the range: their smallest keys are
            // > from and the next separator is < to.
            let mid_end = (hi - 1).max(lo + 1);
            let middle: Vec<Child> = v.vals[lo + 1..mid_end].to_vec();
            (lo, hi, middle)
        };
        let mut n = 0;
        let middle_len = middle.len();
        if middle_len > 0 {
            // Count and collect first (may fail), then drop (cannot fail).
            let mut addrs = Vec::new();
            let mut handles = Vec::new();
            for c in middle {
                n += self.collect_subtree(io, c, below, &mut addrs, &mut handles)?;
            }
            self.inner_mut(h)?.delete(lo + 1..lo + 1 + middle_len);
            for a in addrs {
                self.arena.forget(a);
                self.pending_free.push(a);
            }
            for d in handles {
                self.arena.release_dirty(d);
            }
        }
        let last = (hi - 1 > lo).then_some(lo + 1);
        for i in std::iter::once(lo).chain(last) {
            let c = self.inner(h)?.vals[i];
            let ch = self.make_dirty(io, c, below)?;
            self.set_child(h, i, Child::Mem(ch))?;
            n += self.remove_range_rec(io, ch, below, from, to)?;
        }
        self.fix_children(io, h, level)?;
        Ok(n)
    }

    /// Counts the entries of a subtree that is about to be dropped and collects its committed
    /// addresses and dirty handles. Reads but does not cache committed nodes.
    fn collect_subtree(
        &mut self,
        io: &mut dyn NodeIo,
        c: Child,
        level: u8,
        addrs: &mut Vec<NodeAddr>,
        handles: &mut Vec<Handle>,
    ) -> Result<u64> {
        let kids: Vec<Child> = match c {
            Child::Mem(h) => {
                handles.push(h);
                match &self.arena.node(h).body {
                    Body::Leaf(v) => return Ok(v.len() as u64),
                    Body::Inner(v) => v.vals.clone(),
                }
            }
            Child::Addr(a) => {
                addrs.push(a);
                match self.load_owned(io, a, level)?.body {
                    Body::Leaf(v) => return Ok(v.len() as u64),
                    Body::Inner(v) => v.vals.clone(),
                }
            }
        };
        let below = below(level)?;
        let mut n = 0;
        for k in kids {
            n += self.collect_subtree(io, k, below, addrs, handles)?;
        }
        Ok(n)
    }

    /// Restores fill among the children of the dirty inner node `h` (at `level`) after some
    /// of its dirty children lost entries: refreshes their separators, drops empty ones and
    /// merges or rebalances underfull ones with a sibling, recursing into merged inner
    /// nodes whose own children may be underfull.
    ///
    /// Only dirty children can be underfull (committed nodes were valid when written). On
    /// return every child of `h` is within bounds, unless `h` has a single child: then that
    /// child may be underfull too, and so on down (h's parent fixes it by merging h).
    fn fix_children(&mut self, io: &mut dyn NodeIo, h: Handle, level: u8) -> Result<()> {
        let below = below(level)?;
        let min = self.geom.min(below);
        let max = self.geom.max(below);
        loop {
            // Refresh separators and drop empty children.
            let mut empty = Vec::new();
            let mut firsts = Vec::new();
            for (i, e) in self.inner(h)?.iter().enumerate() {
                if let Child::Mem(ch) = e.1 {
                    match self.arena.node(ch).first_key() {
                        Some(k) => firsts.push((i, k)),
                        None => empty.push((i, ch)),
                    }
                }
            }
            {
                let v = self.inner_mut(h)?;
                for (i, k) in firsts {
                    v.set_key(i, k);
                }
                for &(i, _) in empty.iter().rev() {
                    v.remove(i);
                }
            }
            for (_, ch) in empty {
                self.arena.release_dirty(ch);
            }
            let v = self.inner(h)?;
            if v.len() < 2 {
                return Ok(());
            }
            let is_mem = |i: usize| matches!(v.vals[i], Child::Mem(_));
            let under = v.iter().position(|e| match e.1 {
                Child::Mem(ch) => self.arena.node(ch).len() < min,
                Child::Addr(_) => false,
            });
            let Some(i) = under else {
                return Ok(());
            };
            let right = i + 1 < v.len();
            let j = if right && is_mem(i + 1) {
                i + 1
            } else if i > 0 && is_mem(i - 1) {
                i - 1
            } else if right {
                i + 1
            } else {
                i - 1
            };
            let (l, r) = (i.min(j), i.max(j));
            let (cl, cr) = (v.vals[l], v.vals[r]);
            let lh = self.make_dirty(io, cl, below)?;
            self.set_child(h, l, Child::Mem(lh))?;
            let rh = self.make_dirty(io, cr, below)?;
            self.set_child(h, r, Child::Mem(rh))?;
            let total = self.arena.node(lh).len() + self.arena.node(rh).len();
            if total <= max {
                // Merge the right node into the left one.
                let moved = self.arena.release_dirty(rh).body;
                self.inner_mut(h)?.remove(r);
                match (&mut self.arena.node_mut(lh).body, moved) {
                    (Body::Leaf(a), Body::Leaf(mut b)) => a.append(&mut b),
                    (Body::Inner(a), Body::Inner(mut b)) => a.append(&mut b),
                    _ => return Err(internal("merging nodes of different kinds")),
                }
                if below > 0 {
                    self.fix_children(io, lh, below)?;
                }
            } else {
                // Share the entries evenly.
                let keep = total / 2;
                let mut lnode = std::mem::replace(
                    &mut self.arena.node_mut(lh).body,
                    Body::Leaf(Entries::default()),
                );
                let mut rnode = std::mem::replace(
                    &mut self.arena.node_mut(rh).body,
                    Body::Leaf(Entries::default()),
                );
                match (&mut lnode, &mut rnode) {
                    (Body::Leaf(a), Body::Leaf(b)) => a.rebalance(b, keep),
                    (Body::Inner(a), Body::Inner(b)) => a.rebalance(b, keep),
                    _ => return Err(internal("rebalancing nodes of different kinds")),
                }
                self.arena.node_mut(lh).body = lnode;
                self.arena.node_mut(rh).body = rnode;
                if below > 0 {
                    self.fix_children(io, lh, below)?;
                    self.fix_children(io, rh, below)?;
                }
            }
        }
    }

    /// Collapses a root that has one child (or none) after removals.
    fn finalize_root(&mut self) {
        while let Some(Child::Mem(h)) = self.root {
            let next = match &self.arena.node(h).body {
                Body::Leaf(v) if v.is_empty() => None,
                Body::Inner(v) if v.is_empty() => None,
                Body::Inner(v) if v.len() == 1 => Some(v.vals[0]),
                _ => return,
            };
            self.arena.release_dirty(h);
            self.root_moved = true;
            match next {
                None => {
                    self.root = None;
                    self.height = 0;
                    return;
                }
                Some(c) => {
                    self.root = Some(c);
                    self.height = self.height.saturating_sub(1);
                }
            }
        }
    }

    // ---- commit and relocation ---------------------------------------------------------

    pub(super) fn commit_impl(&mut self, io: &mut dyn NodeIo) -> Result<Option<(NodeAddr, u8)>> {
        if let Some(Child::Mem(h)) = self.root {
            let a = self.commit_rec(io, h)?;
            self.root = Some(Child::Addr(a));
        }
        for a in std::mem::take(&mut self.pending_free) {
            self.arena.forget(a);
            io.free_node(a);
            self.stats.nodes_freed += 1;
        }
        self.root_moved = false;
        match self.root {
            None => Ok(None),
            Some(Child::Addr(a)) => Ok(Some((a, self.height))),
            Some(Child::Mem(_)) => Err(internal("root still dirty after commit")),
        }
    }

    fn commit_rec(&mut self, io: &mut dyn NodeIo, h: Handle) -> Result<NodeAddr> {
        let level = self.arena.node(h).level;
        if level > 0 {
            let n = self.inner(h)?.len();
            for i in 0..n {
                if let Child::Mem(ch) = self.inner(h)?.vals[i] {
                    let a = self.commit_rec(io, ch)?;
                    self.set_child(h, i, Child::Addr(a))?;
                }
            }
        }
        let first = self.geom.encode(self.arena.node(h), &mut self.buf)?;
        let a = io.write_node(&self.buf, level, &first)?;
        self.stats.nodes_written += 1;
        self.arena.dirty_to_clean(h, a);
        Ok(a)
    }

    pub(super) fn relocate_impl(
        &mut self,
        io: &mut dyn NodeIo,
        from: NodeAddr,
        to: NodeAddr,
        level: u8,
        first_key: &IndexKey,
    ) -> Result<bool> {
        if let Some(p) = self.pending_free.iter().position(|&a| a == from) {
            self.pending_free[p] = to;
            return Ok(true);
        }
        let Some(root) = self.root else {
            return Ok(false);
        };
        if level >= self.height {
            if level == self.height && root == Child::Addr(from) {
                self.root = Some(Child::Addr(to));
                self.arena.rekey(from, to);
                self.root_moved = true;
                return Ok(true);
            }
            return Ok(false);
        }
        // Find the parent (at level + 1) without modifying anything.
        let mut cur = root;
        let mut lv = self.height;
        loop {
            let h = self.resolve(io, cur, lv)?;
            if lv == level + 1 {
                if !self.inner(h)?.iter().any(|e| e.1 == Child::Addr(from)) {
                    return Ok(false);
                }
                break;
            }
            cur = self.child_for(h, first_key)?.1;
            lv -= 1;
        }
        // Dirty the path to it and repoint.
        let mut h = self
            .dirty_root(io)?
            .ok_or_else(|| internal("root vanished"))?;
        let mut lv = self.height;
        while lv > level + 1 {
            let (i, c) = self.child_for(h, first_key)?;
            let ch = self.make_dirty(io, c, lv - 1)?;
            self.set_child(h, i, Child::Mem(ch))?;
            h = ch;
            lv -= 1;
        }
        let p = self
            .inner(h)?
            .vals
            .iter()
            .position(|c| *c == Child::Addr(from))
            .ok_or_else(|| internal("relocated node vanished from its parent"))?;
        self.set_child(h, p, Child::Addr(to))?;
        self.arena.rekey(from, to);
        Ok(true)
    }

    // ---- check -------------------------------------------------------------------------

    pub(super) fn lost_impl(&mut self, io: &mut dyn NodeIo, addr: NodeAddr) -> Result<NodeLoss> {
        if self.pending_free.contains(&addr) {
            return Ok(NodeLoss::Unreferenced);
        }
        let Some(path) = self.path_to(io, addr)? else {
            return Ok(NodeLoss::Unreferenced);
        };
        if self.arena.peek(addr).is_none() {
            return Ok(NodeLoss::Gone);
        }
        // Dirty the path down to it, then the node itself (from the cache: nothing is read).
        let mut h = self
            .dirty_root(io)?
            .ok_or_else(|| internal("root vanished"))?;
        let mut lv = self.height;
        for i in path {
            let c = *self
                .inner(h)?
                .vals
                .get(i)
                .ok_or_else(|| internal("lost node's path changed"))?;
            let ch = self.make_dirty(io, c, below(lv)?)?;
            self.set_child(h, i, Child::Mem(ch))?;
            h = ch;
            lv -= 1;
        }
        Ok(NodeLoss::Rewritten)
    }

    /// The child indices from the root down to the committed node at `addr` (empty for the
    /// root), or None when the tree does not reference it. Reads the inner nodes only.
    fn path_to(&mut self, io: &mut dyn NodeIo, addr: NodeAddr) -> Result<Option<Vec<usize>>> {
        let Some(root) = self.root else {
            return Ok(None);
        };
        if root == Child::Addr(addr) {
            return Ok(Some(Vec::new()));
        }
        let mut stack = vec![(root, self.height, Vec::new())];
        while let Some((c, lv, path)) = stack.pop() {
            if lv == 0 {
                continue;
            }
            let h = self.resolve(io, c, lv)?;
            let children: Vec<Child> = self.inner(h)?.vals.to_vec();
            for (i, ch) in children.into_iter().enumerate() {
                let mut p = path.clone();
                p.push(i);
                if ch == Child::Addr(addr) {
                    return Ok(Some(p));
                }
                stack.push((ch, lv - 1, p));
            }
        }
        Ok(None)
    }

    pub(super) fn check_impl(
        &mut self,
        io: &mut dyn NodeIo,
    ) -> std::result::Result<(u64, Vec<NodeAddr>), CheckError> {
        let mut ctx = CheckCtx {
            visited: Vec::new(),
            seen: FxHashSet::default(),
            pending: self.pending_free.iter().copied().collect(),
            dirty_seen: 0,
        };
        if ctx.pending.len() != self.pending_free.len() {
            return Err(CheckError::FreedTwice);
        }
        let n = match self.root {
            None => 0,
            Some(r) => {
                self.check_rec(io, r, self.height, (None, None), &mut ctx)?
                    .0
            }
        };
        if ctx.dirty_seen != self.arena.dirty_count() {
            return Err(CheckError::DirtyCount {
                reachable: ctx.dirty_seen,
                accounted: self.arena.dirty_count(),
            });
        }
        if self.arena.clean_count() > self.arena.cap {
            return Err(CheckError::CacheOverBound {
                cached: self.arena.clean_count(),
                bound: self.arena.cap,
            });
        }
        self.len = Some(n);
        Ok((n, ctx.visited))
    }

    /// Checks the subtree at `c`; `bounds` are (exact smallest key, exclusive upper bound)
    /// from the parent. Returns its entry count and smallest key.
    fn check_rec(
        &mut self,
        io: &mut dyn NodeIo,
        c: Child,
        level: u8,
        bounds: (Option<IndexKey>, Option<IndexKey>),
        ctx: &mut CheckCtx,
    ) -> std::result::Result<(u64, IndexKey), CheckError> {
        let is_root = Some(c) == self.root;
        let (node, what) = match c {
            Child::Mem(h) => {
                if self.arena.state(h) != SlotState::Dirty {
                    return Err(CheckError::NotDirty { handle: h });
                }
                ctx.dirty_seen += 1;
                (self.arena.node(h).clone(), CheckedNode::Dirty(h))
            }
            Child::Addr(a) => {
                if !ctx.seen.insert(a) {
                    return Err(CheckError::ReferencedTwice { addr: a });
                }
                if ctx.pending.contains(&a) {
                    return Err(CheckError::ReferencedButFreed { addr: a });
                }
                ctx.visited.push(a);
                let node = self.read_node(io, a, level)?;
                if let Some(h) = self.arena.peek(a) {
                    if *self.arena.node(h) != node {
                        return Err(CheckError::CacheDiffers { addr: a });
                    }
                }
                (node, CheckedNode::Committed(a))
            }
        };
        if node.level != level {
            return Err(CheckError::Level {
                node: what,
                found: node.level,
                expected: level,
            });
        }
        let n = node.len();
        let (min, max) = (self.geom.min(level), self.geom.max(level));
        let low = if is_root {
            if level == 0 {
                1
            } else {
                2
            }
        } else {
            min
        };
        if n < low || n > max {
            return Err(CheckError::Fill {
                node: what,
                entries: n,
                low,
                high: max,
            });
        }
        let keys: &[IndexKey] = node.keys();
        if (level == 0) != matches!(node.body, Body::Leaf(_)) {
            return Err(CheckError::Body { node: what, level });
        }
        if keys.windows(2).any(|w| w[0] >= w[1]) {
            return Err(CheckError::KeyOrder { node: what });
        }
        let first = keys[0];
        if let Some(lo) = bounds.0 {
            if first != lo {
                return Err(CheckError::SmallestKey {
                    node: what,
                    first,
                    parent: lo,
                });
            }
        }
        if let Some(hi) = bounds.1 {
            if keys[n - 1] >= hi {
                return Err(CheckError::AboveSeparator {
                    node: what,
                    key: keys[n - 1],
                    separator: hi,
                });
            }
        }
        match node.body {
            Body::Leaf(v) => Ok((v.len() as u64, first)),
            Body::Inner(v) => {
                let mut total = 0;
                for (i, e) in v.iter().enumerate() {
                    let hi = v.get(i + 1).map(|x| x.0).or(bounds.1);
                    let (cnt, _) = self.check_rec(io, e.1, level - 1, (Some(e.0), hi), ctx)?;
                    total += cnt;
                }
                Ok((total, first))
            }
        }
    }
}
