//! The write buffer every mapping layer puts in front of the FML (OSSD-13 V-E, V-H: FIFO,
//! 2 MiB by default; OSSD-13 V-I gives the block baseline the same one). It absorbs overwrites
//! of units still in RAM and gathers sectors into whole write units, so a unit reaches flash once
//! even when the host writes it piecewise. Entries leave in arrival order; a unit still partial
//! when it leaves is merged with its old contents by the mapping layer (read-modify-write).
//! `K` names a unit: a logical page for the FTL, (object, unit) for the object store.

use std::collections::VecDeque;
use std::hash::Hash;

use rustc_hash::FxHashMap;

/// Content of a buffered unit.
#[derive(Clone)]
pub enum Fill {
    /// The whole unit's bytes; only sectors in `mask` are meaningful.
    Bytes(Box<[u8]>),
    /// Fingerprint mode: a running fingerprint of what was written.
    Token(u64),
}

/// One buffered write unit: which sectors the host has written and their contents.
#[derive(Clone)]
pub struct Entry<K> {
    /// The unit this entry buffers (a logical page, or (object, unit)).
    pub key: K,
    /// 512-byte sectors of the unit present.
    pub mask: u64,
    /// What was written: the bytes, or a fingerprint in fingerprint mode.
    pub fill: Fill,
    /// Arrival order, to skip stale queue slots after an entry was taken and made again.
    stamp: u64,
}

/// The FIFO write buffer in front of the FML, keyed by unit `K`, `capacity` units large.
#[derive(Clone)]
pub struct WriteBuffer<K> {
    capacity: usize,
    entries: FxHashMap<K, Entry<K>>,
    order: VecDeque<(K, u64)>,
    next_stamp: u64,
    /// Byte buffers of entries gone, reused to avoid an allocation per entry.
    spare: Vec<Box<[u8]>>,
}

impl<K: Copy + Eq + Hash> WriteBuffer<K> {
    /// `capacity` in units; 0 writes through.
    pub fn new(capacity: usize) -> Self {
        WriteBuffer {
            capacity,
            entries: FxHashMap::default(),
            order: VecDeque::new(),
            next_stamp: 0,
            spare: Vec::new(),
        }
    }

    /// Capacity in write units (0: write-through).
    pub fn capacity(&self) -> usize {
        self.capacity
    }
    /// Units buffered now.
    pub fn len(&self) -> usize {
        self.entries.len()
    }
    /// Whether no unit is buffered.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }
    /// Whether the buffer holds `capacity` units or more: the oldest must leave before a new one
    /// joins.
    pub fn is_full(&self) -> bool {
        self.entries.len() >= self.capacity
    }
    /// The keys of the buffered units, in no order.
    pub fn keys(&self) -> impl Iterator<Item = &K> {
        self.entries.keys()
    }
    /// The buffered entry of `key`, if any.
    pub fn get(&self, key: K) -> Option<&Entry<K>> {
        self.entries.get(&key)
    }

    /// A new empty entry, placed at the back of the queue; it joins the buffer by
    /// [`WriteBuffer::put_back`].
    pub fn fresh(&mut self, key: K, bytes_mode: bool, unit_bytes: usize) -> Entry<K> {
        let WriteBuffer {
            order,
            next_stamp,
            spare,
            ..
        } = self;
        new_entry(order, next_stamp, spare, key, bytes_mode, unit_bytes)
    }

    /// The entry of a unit, made empty at the back of the queue if absent.
    pub fn entry(&mut self, key: K, bytes_mode: bool, unit_bytes: usize) -> &mut Entry<K> {
        let WriteBuffer {
            entries,
            order,
            next_stamp,
            spare,
            ..
        } = self;
        entries
            .entry(key)
            .or_insert_with(|| new_entry(order, next_stamp, spare, key, bytes_mode, unit_bytes))
    }

    /// Returns an entry taken with [`WriteBuffer::take`] (or made by [`WriteBuffer::fresh`])
    /// to its place in the queue. True if its unit joined the buffer (it held no entry of it).
    pub fn put_back(&mut self, e: Entry<K>) -> bool {
        self.entries.insert(e.key, e).is_none()
    }

    /// Removes and returns the oldest entry.
    pub fn pop_oldest(&mut self) -> Option<Entry<K>> {
        while let Some((key, stamp)) = self.order.pop_front() {
            if self.entries.get(&key).is_some_and(|e| e.stamp == stamp) {
                return self.entries.remove(&key);
            }
        }
        None
    }

    /// Removes a unit's entry wherever it is in the queue.
    pub fn take(&mut self, key: K) -> Option<Entry<K>> {
        self.entries.remove(&key)
    }

    /// Drops the entries whose key satisfies `doomed` (TRIM, truncate, remove); returns how
    /// many it dropped.
    pub fn drop_where(&mut self, doomed: impl Fn(&K) -> bool) -> usize {
        let keys: Vec<K> = self.entries.keys().filter(|k| doomed(k)).copied().collect();
        for k in &keys {
            if let Some(e) = self.entries.remove(k) {
                self.recycle(e);
            }
        }
        keys.len()
    }

    /// Gives an entry's byte buffer back for reuse.
    pub fn recycle(&mut self, e: Entry<K>) {
        if let Fill::Bytes(b) = e.fill {
            self.spare.push(b);
        }
    }
}

/// [`WriteBuffer::fresh`] over the buffer's fields, so that [`WriteBuffer::entry`] can call it
/// while it holds the entry map.
fn new_entry<K: Copy>(
    order: &mut VecDeque<(K, u64)>,
    next_stamp: &mut u64,
    spare: &mut Vec<Box<[u8]>>,
    key: K,
    bytes_mode: bool,
    unit_bytes: usize,
) -> Entry<K> {
    let stamp = *next_stamp;
    *next_stamp += 1;
    order.push_back((key, stamp));
    let fill = if bytes_mode {
        let mut b = spare
            .pop()
            .unwrap_or_else(|| vec![0u8; unit_bytes].into_boxed_slice());
        b.fill(0);
        Fill::Bytes(b)
    } else {
        Fill::Token(0)
    };
    Entry {
        key,
        mask: 0,
        fill,
        stamp,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fifo_order_survives_removal_and_readding() {
        let mut b = WriteBuffer::new(4);
        for k in [1u32, 2, 3] {
            b.entry(k, false, 0).mask = 1;
        }
        b.drop_where(|&k| k == 1);
        b.entry(1, false, 0).mask = 2;
        b.entry(2, false, 0).mask |= 4; // absorbed, keeps its place
        assert_eq!(b.pop_oldest().map(|e| (e.key, e.mask)), Some((2, 5)));
        assert_eq!(b.pop_oldest().map(|e| e.key), Some(3));
        assert_eq!(b.pop_oldest().map(|e| e.key), Some(1));
        assert!(b.pop_oldest().is_none());
    }

    #[test]
    fn taken_entries_keep_their_place() {
        let mut b = WriteBuffer::new(4);
        let e = b.fresh(7u32, true, 1024);
        b.put_back(e);
        b.entry(8, true, 1024);
        let mut e = b.take(7).unwrap();
        e.mask = 3;
        b.put_back(e);
        assert_eq!(b.pop_oldest().map(|e| (e.key, e.mask)), Some((7, 3)));
    }
}
