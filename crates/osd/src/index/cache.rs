//! The node arena: every node in memory lives in one slot of a `Vec`, addressed by a small
//! handle; freed slots go on a free list. Dirty nodes are owned by their (dirty) parent's
//! `Child::Mem` pointer and are never evicted. Clean nodes are committed nodes kept in an
//! LRU list (intrusive, through the slots) and found by their flash address.

use super::node::{Child, Entries, Handle, Node};
use super::{IndexKey, NodeAddr};
use rustc_hash::FxHashMap;
use std::cell::Cell;

const NIL: Handle = Handle::MAX;

/// A remembered routing decision: in inner node `h`, `key` routes to child `i`.
#[derive(Clone, Copy, Debug)]
struct RouteMemo {
    h: Handle,
    i: u32,
    key: IndexKey,
}

const NO_ROUTE: RouteMemo = RouteMemo {
    h: NIL,
    i: 0,
    key: IndexKey::MIN,
};

/// Route memos kept, one per level (modulo).
const ROUTE_SLOTS: usize = 8;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum SlotState {
    Free,
    Clean(NodeAddr),
    Dirty,
}

#[derive(Debug)]
pub(super) struct Slot {
    pub node: Node,
    pub state: SlotState,
    prev: Handle,
    next: Handle,
}

#[derive(Debug)]
pub(super) struct Arena {
    slots: Vec<Slot>,
    free: Vec<Handle>,
    /// Clean nodes by committed address.
    map: FxHashMap<NodeAddr, Handle>,
    /// Most recently used clean node.
    head: Handle,
    /// Least recently used clean node.
    tail: Handle,
    clean: usize,
    dirty: usize,
    /// Most clean nodes kept between operations.
    pub cap: usize,
    /// The last routing decision made in an inner node of each level (modulo
    /// `ROUTE_SLOTS`): an edit descends the same path several times (look-up, then
    /// removal, then insertion of the same key), and the repeated descents skip the binary
    /// search. Every memo is dropped whenever a node's keys may change (any mutable access
    /// but [`Arena::node_mut_same_keys`]) and whenever a slot is allocated or released (a
    /// handle may then name another node), so a memo found is always what the search would
    /// return.
    routes: [Cell<RouteMemo>; ROUTE_SLOTS],
}

impl Arena {
    pub fn new(cap: usize) -> Arena {
        Arena {
            slots: Vec::new(),
            free: Vec::new(),
            map: FxHashMap::default(),
            head: NIL,
            tail: NIL,
            clean: 0,
            dirty: 0,
            cap,
            routes: [const { Cell::new(NO_ROUTE) }; ROUTE_SLOTS],
        }
    }

    fn forget_routes(&self) {
        for r in &self.routes {
            r.set(NO_ROUTE);
        }
    }

    /// Index of the child of inner node `h` (with entries `v`, at `level`) whose subtree
    /// may hold `key` (as [`Entries::route`]).
    pub fn route(&self, h: Handle, level: u8, v: &Entries<Child>, key: &IndexKey) -> usize {
        let slot = &self.routes[level as usize % ROUTE_SLOTS];
        let m = slot.get();
        if m.h == h && m.key == *key {
            debug_assert_eq!(m.i as usize, v.route(key));
            return m.i as usize;
        }
        let i = v.route(key);
        slot.set(RouteMemo {
            h,
            i: i as u32,
            key: *key,
        });
        i
    }

    pub fn clean_count(&self) -> usize {
        self.clean
    }

    pub fn dirty_count(&self) -> usize {
        self.dirty
    }

    pub fn node(&self, h: Handle) -> &Node {
        &self.slots[h as usize].node
    }

    pub fn node_mut(&mut self, h: Handle) -> &mut Node {
        self.forget_routes();
        &mut self.slots[h as usize].node
    }

    /// As [`Arena::node_mut`], for a caller that changes no inner node's keys (it edits a
    /// leaf, or only the child pointers of an inner node): routing memos stay valid.
    pub fn node_mut_same_keys(&mut self, h: Handle) -> &mut Node {
        &mut self.slots[h as usize].node
    }

    pub fn state(&self, h: Handle) -> SlotState {
        self.slots[h as usize].state
    }

    fn alloc(&mut self, node: Node, state: SlotState) -> Handle {
        self.forget_routes();
        let slot = Slot {
            node,
            state,
            prev: NIL,
            next: NIL,
        };
        match self.free.pop() {
            Some(h) => {
                self.slots[h as usize] = slot;
                h
            }
            None => {
                self.slots.push(slot);
                (self.slots.len() - 1) as Handle
            }
        }
    }

    fn release(&mut self, h: Handle) -> Node {
        self.forget_routes();
        let s = &mut self.slots[h as usize];
        s.state = SlotState::Free;
        s.prev = NIL;
        s.next = NIL;
        let node = std::mem::replace(&mut s.node, Node::empty_leaf());
        self.free.push(h);
        node
    }

    fn unlink(&mut self, h: Handle) {
        let (prev, next) = {
            let s = &self.slots[h as usize];
            (s.prev, s.next)
        };
        if prev == NIL {
            self.head = next;
        } else {
            self.slots[prev as usize].next = next;
        }
        if next == NIL {
            self.tail = prev;
        } else {
            self.slots[next as usize].prev = prev;
        }
        let s = &mut self.slots[h as usize];
        s.prev = NIL;
        s.next = NIL;
    }

    fn push_front(&mut self, h: Handle) {
        let old = self.head;
        {
            let s = &mut self.slots[h as usize];
            s.prev = NIL;
            s.next = old;
        }
        if old == NIL {
            self.tail = h;
        } else {
            self.slots[old as usize].prev = h;
        }
        self.head = h;
    }

    /// Drops least recently used clean nodes while more than `keep` are cached.
    fn evict_to(&mut self, keep: usize) {
        while self.clean > keep && self.tail != NIL {
            let h = self.tail;
            self.unlink(h);
            if let SlotState::Clean(a) = self.slots[h as usize].state {
                self.map.remove(&a);
            }
            self.clean -= 1;
            self.release(h);
        }
    }

    /// Enforces the cache bound (called at the end of every public operation).
    pub fn trim(&mut self) {
        self.evict_to(self.cap);
    }

    /// Makes room for one more clean node. With a cache smaller than one node, the node
    /// being worked on is still held until the end of the operation.
    fn make_room(&mut self) {
        self.evict_to(self.cap.max(1) - 1);
    }

    /// The clean node at `addr`, marked most recently used.
    pub fn lookup(&mut self, addr: NodeAddr) -> Option<Handle> {
        let h = *self.map.get(&addr)?;
        if self.head != h {
            self.unlink(h);
            self.push_front(h);
        }
        Some(h)
    }

    /// The clean node at `addr`, without touching the LRU order.
    pub fn peek(&self, addr: NodeAddr) -> Option<Handle> {
        self.map.get(&addr).copied()
    }

    /// Caches a clean node just read from `addr`.
    pub fn insert_clean(&mut self, addr: NodeAddr, node: Node) -> Handle {
        self.forget(addr);
        self.make_room();
        let h = self.alloc(node, SlotState::Clean(addr));
        self.map.insert(addr, h);
        self.push_front(h);
        self.clean += 1;
        h
    }

    /// A new dirty node.
    pub fn alloc_dirty(&mut self, node: Node) -> Handle {
        self.dirty += 1;
        self.alloc(node, SlotState::Dirty)
    }

    /// Drops a dirty node (merged away, emptied, or removed with its subtree).
    pub fn release_dirty(&mut self, h: Handle) -> Node {
        self.dirty -= 1;
        self.release(h)
    }

    /// A clean node is about to be modified: it leaves the cache and becomes dirty.
    /// Returns the address it was committed at.
    pub fn clean_to_dirty(&mut self, h: Handle) -> Option<NodeAddr> {
        let SlotState::Clean(a) = self.slots[h as usize].state else {
            return None;
        };
        self.unlink(h);
        self.map.remove(&a);
        self.clean -= 1;
        self.dirty += 1;
        self.slots[h as usize].state = SlotState::Dirty;
        Some(a)
    }

    /// A dirty node was written at `addr`: it becomes clean and cached.
    pub fn dirty_to_clean(&mut self, h: Handle, addr: NodeAddr) {
        if self.slots[h as usize].state != SlotState::Dirty {
            return;
        }
        self.forget(addr);
        self.make_room();
        self.dirty -= 1;
        self.clean += 1;
        self.slots[h as usize].state = SlotState::Clean(addr);
        self.map.insert(addr, h);
        self.push_front(h);
    }

    /// Removes the clean node at `addr` from the cache (its address is going away).
    pub fn forget(&mut self, addr: NodeAddr) -> Option<Node> {
        let h = self.map.remove(&addr)?;
        self.unlink(h);
        self.clean -= 1;
        Some(self.release(h))
    }

    /// The committed node at `from` now lives at `to` (same bytes).
    pub fn rekey(&mut self, from: NodeAddr, to: NodeAddr) {
        if from == to {
            return;
        }
        if let Some(h) = self.map.remove(&from) {
            self.forget(to);
            self.map.insert(to, h);
            self.slots[h as usize].state = SlotState::Clean(to);
        }
    }

    /// The clean nodes' addresses, most recently used first (test aid).
    #[cfg(test)]
    pub fn lru_order(&self) -> Vec<NodeAddr> {
        let mut out = Vec::new();
        let mut h = self.head;
        while h != NIL {
            if let SlotState::Clean(a) = self.slots[h as usize].state {
                out.push(a);
            }
            h = self.slots[h as usize].next;
        }
        out
    }

    /// Number of clean nodes reachable through the LRU list and the address map (test aid).
    #[cfg(test)]
    pub fn lru_len(&self) -> (usize, usize) {
        let mut n = 0;
        let mut h = self.head;
        while h != NIL {
            n += 1;
            h = self.slots[h as usize].next;
        }
        (n, self.map.len())
    }
}
