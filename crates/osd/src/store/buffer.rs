//! The object store's write buffer: the FML's FIFO [`WriteBuffer`] of (object, unit) entries,
//! with the number of units each object has in it.
//!
//! The count answers "does this object still wait for data?" in one look-up. The onode cache's
//! eviction asks it of every dirty onode between commands (`ObjectStore::ready_onodes`);
//! gathering the buffered objects from the buffer's keys each time was 58% of an OSCM-11 read
//! run (docs/PERFORMANCE.md).

use fml::buffer::{Entry as Buffered, WriteBuffer};
use std::collections::hash_map::Entry;

use rustc_hash::FxHashMap;

use crate::id::Oid;

/// A unit of an object: the buffer's key.
type UnitKey = (Oid, u64);

/// [`WriteBuffer`] keyed by (object, unit), counting each object's buffered units.
#[derive(Clone)]
pub(super) struct ObjectBuffer {
    units: WriteBuffer<UnitKey>,
    /// Buffered units per object; an object with none has no entry.
    per_object: FxHashMap<Oid, u32>,
}

impl ObjectBuffer {
    /// `capacity` in units; 0 writes through.
    pub(super) fn new(capacity: usize) -> Self {
        ObjectBuffer {
            units: WriteBuffer::new(capacity),
            per_object: FxHashMap::default(),
        }
    }

    /// Whether any unit of `oid` is buffered.
    pub(super) fn holds_object(&self, oid: Oid) -> bool {
        self.per_object.contains_key(&oid)
    }

    pub(super) fn capacity(&self) -> usize {
        self.units.capacity()
    }
    pub(super) fn is_empty(&self) -> bool {
        self.units.is_empty()
    }
    pub(super) fn is_full(&self) -> bool {
        self.units.is_full()
    }
    pub(super) fn get(&self, key: UnitKey) -> Option<&Buffered<UnitKey>> {
        self.units.get(key)
    }

    /// A new empty entry at the back of the queue; it joins the buffer by [`Self::put_back`].
    pub(super) fn fresh(
        &mut self,
        key: UnitKey,
        bytes_mode: bool,
        unit: usize,
    ) -> Buffered<UnitKey> {
        self.units.fresh(key, bytes_mode, unit)
    }

    /// Returns an entry taken with [`Self::take`] (or made by [`Self::fresh`]) to the buffer.
    pub(super) fn put_back(&mut self, e: Buffered<UnitKey>) {
        let oid = e.key.0;
        if self.units.put_back(e) {
            *self.per_object.entry(oid).or_insert(0) += 1;
        }
    }

    /// Removes and returns the oldest entry.
    pub(super) fn pop_oldest(&mut self) -> Option<Buffered<UnitKey>> {
        let e = self.units.pop_oldest()?;
        self.count_gone(e.key.0, 1);
        Some(e)
    }

    /// Removes a unit's entry wherever it is in the queue.
    pub(super) fn take(&mut self, key: UnitKey) -> Option<Buffered<UnitKey>> {
        let e = self.units.take(key)?;
        self.count_gone(key.0, 1);
        Some(e)
    }

    /// Drops the units of `oid` from `first` on (truncate, remove).
    pub(super) fn drop_object_from(&mut self, oid: Oid, first: u64) {
        if !self.holds_object(oid) {
            return;
        }
        let dropped = self.units.drop_where(|&(o, u)| o == oid && u >= first);
        self.count_gone(oid, dropped as u32);
    }

    /// Gives an entry's byte buffer back for reuse.
    pub(super) fn recycle(&mut self, e: Buffered<UnitKey>) {
        self.units.recycle(e);
    }

    /// Whether the counts match the buffer's entries (fsck and tests).
    pub(super) fn counts_agree(&self) -> bool {
        let mut counted: FxHashMap<Oid, u32> = FxHashMap::default();
        for &(o, _) in self.units.keys() {
            *counted.entry(o).or_insert(0) += 1;
        }
        counted == self.per_object
    }

    /// `gone` units of `oid` left the buffer.
    fn count_gone(&mut self, oid: Oid, gone: u32) {
        if let Entry::Occupied(mut n) = self.per_object.entry(oid) {
            if *n.get() > gone {
                *n.get_mut() -= gone;
            } else {
                n.remove();
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// One step on the buffer: put a unit, take one, pop the oldest, drop an object's units.
    #[derive(Clone, Debug)]
    enum Step {
        Put(u64, u64),
        Take(u64, u64),
        Pop,
        Drop(u64, u64),
    }

    fn step() -> impl Strategy<Value = Step> {
        prop_oneof![
            (0..4u64, 0..6u64).prop_map(|(o, u)| Step::Put(o, u)),
            (0..4u64, 0..6u64).prop_map(|(o, u)| Step::Take(o, u)),
            Just(Step::Pop),
            (0..4u64, 0..6u64).prop_map(|(o, u)| Step::Drop(o, u)),
        ]
    }

    proptest! {
        /// Whatever puts, takes, pops and drops happen, an object is held exactly when one of
        /// its units is in the buffer.
        #[test]
        fn the_per_object_counts_follow_the_entries(steps in proptest::collection::vec(step(), 1..60)) {
            let mut b = ObjectBuffer::new(8);
            for s in steps {
                match s {
                    Step::Put(o, u) => {
                        let key = (Oid::new(1, o), u);
                        let e = b.take(key).unwrap_or_else(|| b.fresh(key, false, 0));
                        b.put_back(e);
                    }
                    Step::Take(o, u) => {
                        if let Some(e) = b.take((Oid::new(1, o), u)) {
                            b.recycle(e);
                        }
                    }
                    Step::Pop => {
                        b.pop_oldest();
                    }
                    Step::Drop(o, first) => b.drop_object_from(Oid::new(1, o), first),
                }
                prop_assert!(b.counts_agree());
                for o in 0..4 {
                    let oid = Oid::new(1, o);
                    let any = (0..6).any(|u| b.get((oid, u)).is_some());
                    prop_assert_eq!(b.holds_object(oid), any);
                }
            }
        }
    }
}
