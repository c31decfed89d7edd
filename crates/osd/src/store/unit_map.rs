//! The unit map: a complete in-memory map of the data units of the objects being written,
//! ahead of the index, as an FTL keeps its page map (issue 20; [`super::OsdConfig::unit_map_bytes`]).
//!
//! Without it every unit written, and every unit GC moves, costs a descent of the index and an
//! extent edit. With it, the data path of an object the map *holds* (`lookup`, `unmap`, `map`,
//! `remap` in `data.rs`) reads and writes one slot of a dense array of the object's unit
//! locations, and marks the unit dirty. The dirty units reach the index later, in sorted order
//! ([`super::ObjectStore::sync_unit_map`]): before a commit, before any other use of the index
//! that may read or edit data extents, and when the edits pending could dirty more index nodes
//! than a checkpoint may write. Nothing here is on flash: the map is built from the index, and
//! recovery rolls forward into it as into the index.
//!
//! # Invariant
//! For an object the map holds, the map is the truth and the index differs from it at most at
//! the object's dirty units; for any other object the index is the truth. So an object is let
//! go of ([`UnitMap::release`], [`UnitMap::clear`]) only once it has no dirty unit.
//!
//! # Memory
//! Four bytes per unit of each held object (up to its highest mapped unit) and a dirty bit,
//! bounded by `unit_map_bytes`: an object that would not fit is not held (its units go through
//! the index as without the map), and when the held objects fill the budget they are synced
//! and all let go. An object is held only up to [`DENSE_UNITS_MAX`] units.

use rustc_hash::FxHashMap;

use crate::id::Oid;

/// No write unit: the unit is not mapped.
const UNMAPPED: u32 = u32::MAX;

/// The most units of one object the map holds (16 GiB of 4 KiB units, a 16 MiB array): a unit
/// past it sends the object through the index.
pub(super) const DENSE_UNITS_MAX: u64 = 1 << 22;

/// Bytes of memory per held unit: its location (4) and its dirty bit, rounded up.
pub(super) const BYTES_PER_UNIT: u64 = 5;

/// One held object's units.
#[derive(Clone, Default)]
struct ObjectUnits {
    /// Unit -> write unit, or [`UNMAPPED`].
    at: Vec<u32>,
    /// A bit per unit of `at`: its slot differs from the index.
    dirty: Vec<u64>,
    /// Whether the object is in [`UnitMap::dirty_objects`].
    listed: bool,
}

/// The held objects' units (module documentation).
#[derive(Clone, Default)]
pub(super) struct UnitMap {
    objects: FxHashMap<Oid, ObjectUnits>,
    /// Objects with a dirty unit, each once, in no order.
    dirty_objects: Vec<Oid>,
    /// Dirty units over all objects.
    pending: usize,
    /// Slots held over all objects.
    held_units: u64,
    /// The most slots held at once; 0: the map is off.
    budget_units: u64,
}

/// The edits a sync applies to the index: each object's dirty units in ascending order, with
/// the write unit each now maps to (`None`: unmapped).
pub(super) type DirtyUnits = Vec<(Oid, Vec<(u64, Option<u32>)>)>;

impl UnitMap {
    /// A map of at most `bytes` of memory; 0 turns it off.
    pub(super) fn new(bytes: u64) -> Self {
        UnitMap {
            budget_units: bytes / BYTES_PER_UNIT,
            ..UnitMap::default()
        }
    }

    /// Whether the map is on.
    pub(super) fn enabled(&self) -> bool {
        self.budget_units > 0
    }

    /// Whether the map holds no object.
    pub(super) fn is_empty(&self) -> bool {
        self.objects.is_empty()
    }

    /// Whether `oid` is held.
    pub(super) fn holds(&self, oid: Oid) -> bool {
        self.objects.contains_key(&oid)
    }

    /// Dirty units over all objects.
    pub(super) fn pending(&self) -> usize {
        self.pending
    }

    /// Where unit `u` of `oid` is: `None` if the object is not held, else `Some` of the write
    /// unit (`None` when unmapped).
    pub(super) fn get(&self, oid: Oid, u: u64) -> Option<Option<u32>> {
        let o = self.objects.get(&oid)?;
        let v = usize::try_from(u)
            .ok()
            .and_then(|i| o.at.get(i))
            .copied()
            .unwrap_or(UNMAPPED);
        Some((v != UNMAPPED).then_some(v))
    }

    /// Whether the held object `oid` can take a slot for unit `u` within the budget.
    pub(super) fn can_take(&self, oid: Oid, u: u64) -> bool {
        let Some(o) = self.objects.get(&oid) else {
            return false;
        };
        let len = o.at.len() as u64;
        u < len
            || (u < DENSE_UNITS_MAX
                && self.held_units + grown_len(len, u) - len <= self.budget_units)
    }

    /// Whether an object of `units` slots fits the budget beside the objects held now
    /// (`alone`: beside none).
    pub(super) fn fits(&self, units: u64, alone: bool) -> bool {
        let held = if alone { 0 } else { self.held_units };
        units <= DENSE_UNITS_MAX && held + units <= self.budget_units
    }

    /// Holds `oid` (not held yet) with the index's extents of it: (first unit, first write
    /// unit, units), the write unit `LOST` standing for each unit of a lost extent.
    pub(super) fn hold(&mut self, oid: Oid, extents: &[(u64, u32, u32)], lost: u32) {
        debug_assert!(!self.holds(oid), "{oid} is held already");
        let len = extents
            .iter()
            .map(|&(k, _, n)| k + u64::from(n))
            .max()
            .unwrap_or(0);
        let mut at = vec![UNMAPPED; len as usize];
        for &(k, s, n) in extents {
            for i in 0..n {
                at[(k + u64::from(i)) as usize] = if s == lost { lost } else { s + i };
            }
        }
        self.held_units += len;
        let dirty = vec![0; at.len().div_ceil(64)];
        self.objects.insert(
            oid,
            ObjectUnits {
                at,
                dirty,
                listed: false,
            },
        );
    }

    /// Maps unit `u` of the held object `oid` to `to` (`None`: unmaps it), marking it dirty;
    /// returns where it was. The caller has checked [`Self::can_take`].
    #[expect(
        clippy::unwrap_used,
        reason = "the caller checked that the map holds the object (can_take)"
    )]
    pub(super) fn set(&mut self, oid: Oid, u: u64, to: Option<u32>) -> Option<u32> {
        let o = self.objects.get_mut(&oid).unwrap();
        let i = u as usize;
        if i >= o.at.len() {
            // Unmapping a unit past the array: it is unmapped already.
            to?;
            let len = grown_len(o.at.len() as u64, u);
            self.held_units += len - o.at.len() as u64;
            o.at.resize(len as usize, UNMAPPED);
            o.dirty.resize(o.at.len().div_ceil(64), 0);
        }
        let new = to.unwrap_or(UNMAPPED);
        let old = std::mem::replace(&mut o.at[i], new);
        if old == new {
            // Nothing changed: the unit differs from the index exactly as it did.
            return to;
        }
        let (w, bit) = (i / 64, 1u64 << (i % 64));
        if o.dirty[w] & bit == 0 {
            o.dirty[w] |= bit;
            self.pending += 1;
            if !o.listed {
                o.listed = true;
                self.dirty_objects.push(oid);
            }
        }
        (old != UNMAPPED).then_some(old)
    }

    /// Takes every dirty unit (all clean afterwards): by object, then unit, ascending.
    pub(super) fn take_dirty(&mut self) -> DirtyUnits {
        let mut oids = std::mem::take(&mut self.dirty_objects);
        oids.sort_unstable();
        let mut out = Vec::with_capacity(oids.len());
        for oid in oids {
            out.push((oid, self.take_dirty_of(oid)));
        }
        debug_assert_eq!(self.pending, 0);
        out
    }

    /// Takes the dirty units of `oid` (clean afterwards), ascending.
    pub(super) fn take_object_dirty(&mut self, oid: Oid) -> Vec<(u64, Option<u32>)> {
        if let Some(i) = self.dirty_objects.iter().position(|&o| o == oid) {
            self.dirty_objects.swap_remove(i);
        }
        self.take_dirty_of(oid)
    }

    fn take_dirty_of(&mut self, oid: Oid) -> Vec<(u64, Option<u32>)> {
        let Some(o) = self.objects.get_mut(&oid) else {
            return Vec::new();
        };
        o.listed = false;
        let mut units = Vec::new();
        for (w, word) in o.dirty.iter_mut().enumerate() {
            let mut bits = std::mem::take(word);
            while bits != 0 {
                let i = w * 64 + bits.trailing_zeros() as usize;
                bits &= bits - 1;
                let v = o.at[i];
                units.push((i as u64, (v != UNMAPPED).then_some(v)));
            }
        }
        self.pending -= units.len();
        units
    }

    /// Slots of the held object `oid` (0 if not held).
    pub(super) fn slots(&self, oid: Oid) -> u64 {
        self.objects.get(&oid).map_or(0, |o| o.at.len() as u64)
    }

    /// The held object's units as the index's entries hold them, ascending: (first unit, first
    /// write unit, units). With `extents`, each run of units in consecutive write units (or
    /// all `lost`) is one entry, up to `u32::MAX / 2` units as the index's extents are;
    /// otherwise one entry per unit (OSCM-11 V-C's page index).
    pub(super) fn runs(&self, oid: Oid, extents: bool, lost: u32) -> Vec<(u64, u32, u32)> {
        let mut out: Vec<(u64, u32, u32)> = Vec::new();
        let Some(o) = self.objects.get(&oid) else {
            return out;
        };
        for (i, &v) in o.at.iter().enumerate() {
            if v == UNMAPPED {
                continue;
            }
            let u = i as u64;
            if let Some((first, start, len)) = out.last_mut() {
                let follows = *first + u64::from(*len) == u
                    && *len < u32::MAX / 2
                    && if v == lost {
                        *start == lost
                    } else {
                        *start != lost && *start + *len == v
                    };
                if extents && follows {
                    *len += 1;
                    continue;
                }
            }
            out.push((u, v, 1));
        }
        out
    }

    /// Lets go of `oid`, which has no dirty unit.
    pub(super) fn release(&mut self, oid: Oid) {
        if let Some(o) = self.objects.remove(&oid) {
            assert!(
                !o.listed && o.dirty.iter().all(|&w| w == 0),
                "unit map: {oid} let go of with dirty units"
            );
            self.held_units -= o.at.len() as u64;
        }
    }

    /// Lets go of every object; none has a dirty unit.
    pub(super) fn clear(&mut self) {
        assert_eq!(
            self.pending, 0,
            "unit map: objects let go of with dirty units"
        );
        self.objects.clear();
        self.dirty_objects.clear();
        self.held_units = 0;
    }

    /// The held objects with each one's mapped units (unit, write unit), ascending: for fsck.
    pub(super) fn held(&self) -> Vec<(Oid, Vec<(u64, u32)>)> {
        let mut out: Vec<_> = self
            .objects
            .iter()
            .map(|(&oid, o)| {
                let units =
                    o.at.iter()
                        .enumerate()
                        .filter(|&(_, &v)| v != UNMAPPED)
                        .map(|(i, &v)| (i as u64, v))
                        .collect();
                (oid, units)
            })
            .collect();
        out.sort_unstable_by_key(|&(oid, _)| oid);
        out
    }
}

/// The length an object's array of `len` slots grows to for unit `u`: at least `u + 1`,
/// doubling so that an object written in order grows in amortised constant time, never past
/// [`DENSE_UNITS_MAX`].
fn grown_len(len: u64, u: u64) -> u64 {
    (u + 1).max(len * 2).min(DENSE_UNITS_MAX).max(u + 1)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use std::collections::BTreeMap;

    const LOST: u32 = u32::MAX - 1;

    fn oid(n: u64) -> Oid {
        Oid::new(1, 0x10000 + n)
    }

    #[test]
    fn an_object_held_from_its_extents_maps_each_unit() {
        let mut m = UnitMap::new(1 << 20);
        m.hold(oid(1), &[(0, 100, 3), (5, LOST, 2), (9, 7, 1)], LOST);
        let got: Vec<_> = (0..12).map(|u| m.get(oid(1), u).unwrap()).collect();
        let want = [
            Some(100),
            Some(101),
            Some(102),
            None,
            None,
            Some(LOST),
            Some(LOST),
            None,
            None,
            Some(7),
            None,
            None,
        ];
        assert_eq!(got, want);
        assert_eq!(m.get(oid(2), 0), None, "an object not held");
        assert_eq!(m.pending(), 0);
    }

    #[test]
    fn runs_are_the_extents_an_object_was_held_with() {
        let mut m = UnitMap::new(1 << 20);
        let extents = [(0, 100, 3), (3, 7, 1), (5, LOST, 2), (7, 9, 2)];
        m.hold(oid(1), &extents, LOST);
        assert_eq!(m.runs(oid(1), true, LOST), extents);
        let pages: Vec<_> = (0..3).map(|i| (i, 100 + i as u32, 1)).collect();
        assert_eq!(m.runs(oid(1), false, LOST)[..3], pages[..]);
        assert_eq!(m.runs(oid(1), false, LOST).len(), 8);
        // A unit moved next to its neighbour's write unit joins its extent.
        m.set(oid(1), 4, Some(8));
        assert_eq!(m.runs(oid(1), true, LOST)[1], (3, 7, 2));
    }

    #[test]
    fn the_budget_bounds_what_an_object_may_grow_to() {
        let mut m = UnitMap::new(100 * BYTES_PER_UNIT);
        m.hold(oid(1), &[(0, 1, 10)], LOST);
        assert!(m.can_take(oid(1), 99));
        assert!(!m.can_take(oid(1), 100), "101 slots are over the budget");
        assert!(!m.fits(91, false));
        assert!(m.fits(90, false));
        assert!(!m.can_take(oid(2), 0), "an object not held takes no slot");
    }

    proptest! {
        /// Random sets against a BTreeMap oracle: the map answers as the oracle, and the dirty
        /// units taken are exactly the units set since the last take, with their last value.
        #[test]
        fn the_map_follows_an_oracle(ops in prop::collection::vec((0u64..3, 0u64..300, prop::option::of(0u32..1000), 0u8..10), 1..400)) {
            let mut m = UnitMap::new(1 << 20);
            let mut oracle: BTreeMap<(Oid, u64), u32> = BTreeMap::new();
            let mut dirty: BTreeMap<(Oid, u64), Option<u32>> = BTreeMap::new();
            for (o, u, to, what) in ops {
                let o = oid(o);
                if !m.holds(o) {
                    m.hold(o, &[], LOST);
                }
                if what == 0 {
                    let taken = m.take_dirty();
                    let flat: BTreeMap<_, _> = taken
                        .into_iter()
                        .flat_map(|(o, us)| us.into_iter().map(move |(u, v)| ((o, u), v)))
                        .collect();
                    prop_assert_eq!(&flat, &dirty);
                    dirty.clear();
                    prop_assert_eq!(m.pending(), 0);
                    continue;
                }
                prop_assert!(m.can_take(o, u));
                let old = m.set(o, u, to);
                prop_assert_eq!(old, oracle.get(&(o, u)).copied());
                match to {
                    Some(v) => { oracle.insert((o, u), v); }
                    None => { oracle.remove(&(o, u)); }
                }
                // A unit is dirty once its location changed; it is taken with its last one.
                if old != to || dirty.contains_key(&(o, u)) {
                    dirty.insert((o, u), to);
                }
                prop_assert_eq!(m.pending(), dirty.len());
                for u in 0..300 {
                    prop_assert_eq!(m.get(o, u).unwrap(), oracle.get(&(o, u)).copied());
                }
            }
        }
    }
}
