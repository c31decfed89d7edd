//! The write buffer (seed 000 V-H: FIFO, 2 MiB by default): it absorbs overwrites of data
//! still in RAM and gathers sectors into whole write units, so a unit reaches flash once even
//! when the host writes it piecewise. Entries leave in arrival order; a unit that is not
//! completely covered when it leaves is merged with its old contents (read-modify-write).

use std::collections::VecDeque;

use rustc_hash::FxHashMap;

/// Content of a buffered unit.
pub enum Fill {
    /// Real bytes of the whole unit; only sectors in `mask` are meaningful.
    Bytes(Box<[u8]>),
    /// Fingerprint mode: a running fingerprint of the sectors written.
    Token(u64),
}

pub struct Entry {
    pub lpn: u32,
    /// Sectors (512 bytes) of the unit present in the buffer.
    pub mask: u64,
    pub fill: Fill,
    /// Arrival order, to skip stale queue slots after an entry was removed and re-added.
    stamp: u64,
}

pub struct WriteBuffer {
    capacity: usize,
    entries: FxHashMap<u32, Entry>,
    order: VecDeque<(u32, u64)>,
    next_stamp: u64,
    /// Spare byte buffers, reused to avoid an allocation per entry.
    spare: Vec<Box<[u8]>>,
}

impl WriteBuffer {
    /// `capacity` is in units; 0 makes the buffer write-through.
    pub fn new(capacity: usize) -> Self {
        WriteBuffer {
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
    pub fn get(&self, lpn: u32) -> Option<&Entry> {
        self.entries.get(&lpn)
    }

    /// The entry for `lpn`, created empty (at the back of the queue) if absent.
    pub fn entry(&mut self, lpn: u32, bytes_mode: bool, unit_bytes: usize) -> &mut Entry {
        let (order, next_stamp, spare) = (&mut self.order, &mut self.next_stamp, &mut self.spare);
        self.entries.entry(lpn).or_insert_with(|| {
            let stamp = *next_stamp;
            *next_stamp += 1;
            order.push_back((lpn, stamp));
            let fill = if bytes_mode {
                Fill::Bytes(
                    spare
                        .pop()
                        .unwrap_or_else(|| vec![0u8; unit_bytes].into_boxed_slice()),
                )
            } else {
                Fill::Token(0)
            };
            Entry {
                lpn,
                mask: 0,
                fill,
                stamp,
            }
        })
    }

    /// Removes and returns the oldest entry.
    pub fn pop_oldest(&mut self) -> Option<Entry> {
        while let Some((lpn, stamp)) = self.order.pop_front() {
            if self.entries.get(&lpn).is_some_and(|e| e.stamp == stamp) {
                return self.entries.remove(&lpn);
            }
        }
        None
    }

    /// Removes a unit's entry wherever it is in the queue.
    pub fn take(&mut self, lpn: u32) -> Option<Entry> {
        self.entries.remove(&lpn)
    }

    /// Drops a unit's buffered data (TRIM).
    pub fn remove(&mut self, lpn: u32) {
        if let Some(e) = self.entries.remove(&lpn) {
            self.recycle(e);
        }
    }

    /// Gives an entry's byte buffer back for reuse.
    pub fn recycle(&mut self, e: Entry) {
        if let Fill::Bytes(b) = e.fill {
            self.spare.push(b);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fifo_order_survives_removal_and_readding() {
        let mut b = WriteBuffer::new(4);
        for lpn in [1, 2, 3] {
            b.entry(lpn, false, 0).mask = 1;
        }
        b.remove(1);
        b.entry(1, false, 0).mask = 2;
        b.entry(2, false, 0).mask |= 4; // absorbed, keeps its place
        assert_eq!(b.pop_oldest().map(|e| (e.lpn, e.mask)), Some((2, 5)));
        assert_eq!(b.pop_oldest().map(|e| e.lpn), Some(3));
        assert_eq!(b.pop_oldest().map(|e| e.lpn), Some(1));
        assert!(b.pop_oldest().is_none());
    }
}
