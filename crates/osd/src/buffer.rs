//! The object data buffer (seed 000 V-E: FIFO, 2 MiB by default). It absorbs overwrites of
//! units still in RAM and gathers small writes into whole write units; a unit still partial
//! when it leaves is merged with its old contents (read-modify-write).

use std::collections::VecDeque;

use rustc_hash::FxHashMap;

use crate::id::Oid;

/// Content of a buffered unit.
pub enum Fill {
    /// The whole unit's bytes; only sectors in `mask` are meaningful.
    Bytes(Box<[u8]>),
    /// Fingerprint mode: a running fingerprint of what was written.
    Token(u64),
}

pub struct Entry {
    pub oid: Oid,
    /// Unit index within the object.
    pub unit: u64,
    /// 512-byte sectors of the unit present.
    pub mask: u64,
    pub fill: Fill,
    stamp: u64,
}

pub struct DataBuffer {
    capacity: usize,
    entries: FxHashMap<(Oid, u64), Entry>,
    order: VecDeque<((Oid, u64), u64)>,
    next_stamp: u64,
    spare: Vec<Box<[u8]>>,
}

impl DataBuffer {
    /// `capacity` in units; 0 writes through.
    pub fn new(capacity: usize) -> Self {
        DataBuffer {
            capacity,
            entries: FxHashMap::default(),
            order: VecDeque::new(),
            next_stamp: 0,
            spare: Vec::new(),
        }
    }

    pub fn capacity(&self) -> usize {
        self.capacity
    }
    pub fn len(&self) -> usize {
        self.entries.len()
    }
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }
    pub fn is_full(&self) -> bool {
        self.entries.len() >= self.capacity
    }
    pub fn get(&self, oid: Oid, unit: u64) -> Option<&Entry> {
        self.entries.get(&(oid, unit))
    }
    pub fn get_mut(&mut self, oid: Oid, unit: u64) -> Option<&mut Entry> {
        self.entries.get_mut(&(oid, unit))
    }

    /// A new empty entry, placed at the back of the queue; it joins the buffer by
    /// [`DataBuffer::put_back`].
    pub fn fresh(&mut self, oid: Oid, unit: u64, bytes_mode: bool, unit_bytes: usize) -> Entry {
        let stamp = self.next_stamp;
        self.next_stamp += 1;
        self.order.push_back(((oid, unit), stamp));
        let fill = if bytes_mode {
            let mut b = self
                .spare
                .pop()
                .unwrap_or_else(|| vec![0u8; unit_bytes].into_boxed_slice());
            b.fill(0);
            Fill::Bytes(b)
        } else {
            Fill::Token(0)
        };
        Entry {
            oid,
            unit,
            mask: 0,
            fill,
            stamp,
        }
    }

    /// Returns an entry taken with [`DataBuffer::take`] (or made by [`DataBuffer::fresh`]) to
    /// its place in the queue.
    pub fn put_back(&mut self, e: Entry) {
        self.entries.insert((e.oid, e.unit), e);
    }

    pub fn pop_oldest(&mut self) -> Option<Entry> {
        while let Some((key, stamp)) = self.order.pop_front() {
            if self.entries.get(&key).is_some_and(|e| e.stamp == stamp) {
                return self.entries.remove(&key);
            }
        }
        None
    }

    pub fn take(&mut self, oid: Oid, unit: u64) -> Option<Entry> {
        self.entries.remove(&(oid, unit))
    }

    /// Removes every unit of `oid` at index `from` or beyond.
    pub fn drop_object_from(&mut self, oid: Oid, from: u64) {
        let doomed: Vec<(Oid, u64)> = self
            .entries
            .keys()
            .filter(|(o, u)| *o == oid && *u >= from)
            .copied()
            .collect();
        for k in doomed {
            if let Some(e) = self.entries.remove(&k) {
                self.recycle(e);
            }
        }
    }

    pub fn recycle(&mut self, e: Entry) {
        if let Fill::Bytes(b) = e.fill {
            self.spare.push(b);
        }
    }
}
