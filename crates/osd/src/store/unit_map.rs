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
//! Four bytes per unit of each held object (up to its highest mapped unit), and four more per
//! unit dirty, bounded by `unit_map_bytes`: an object that would not fit is not held (its
//! units go through the index as without the map), and when the held objects fill the budget
//! they are synced and all let go. An object is held only up to [`DENSE_UNITS_MAX`] units.
//! A slot keeps its dirty flag in its top bit, so the hot path touches one word per unit;
//! the map is therefore only for devices of fewer than 2^31 - 2 write units.

use rustc_hash::FxHashMap;

use super::LOST;
use crate::id::Oid;

/// A slot's flag: the unit differs from the index.
const DIRTY: u32 = 1 << 31;
/// A slot's location: the unit is not mapped.
const SLOT_UNMAPPED: u32 = DIRTY - 1;
/// A slot's location: the unit's contents were lost ([`LOST`]).
const SLOT_LOST: u32 = DIRTY - 2;
/// Write units a device may have for the map to hold its locations in a slot beside the flag.
pub(super) const UNITS_MAX: u64 = SLOT_LOST as u64;

/// The most units of one object the map holds (16 GiB of 4 KiB units, a 16 MiB array): a unit
/// past it sends the object through the index.
pub(super) const DENSE_UNITS_MAX: u64 = 1 << 22;

/// Objects edited once that the map remembers ([`UnitMap::edited_before`]).
const SEEN_MAX: usize = 1 << 16;

/// Bytes of memory per held unit, at most: its slot (4) and its place in the object's list of
/// dirty units (4).
pub(super) const BYTES_PER_UNIT: u64 = 8;

/// A slot's location as the store names it: `None` unmapped, [`LOST`], or a write unit.
fn location(slot: u32) -> Option<u32> {
    match slot & !DIRTY {
        SLOT_UNMAPPED => None,
        SLOT_LOST => Some(LOST),
        v => Some(v),
    }
}

/// The slot of a clean unit at `to`.
fn slot_of(to: Option<u32>) -> u32 {
    match to {
        None => SLOT_UNMAPPED,
        Some(LOST) => SLOT_LOST,
        Some(v) => {
            debug_assert!(
                u64::from(v) < UNITS_MAX,
                "write unit {v} past the unit map's slots"
            );
            v
        }
    }
}

/// One held object's units.
#[derive(Clone, Default)]
struct ObjectUnits {
    /// Per unit: its location ([`slot_of`]) and the [`DIRTY`] flag.
    at: Vec<u32>,
    /// The units flagged dirty, in the order they became so.
    dirty: Vec<u32>,
}

impl ObjectUnits {
    /// Sets slot `i` (within `at`) to `to`; returns its old location and whether the unit
    /// became dirty (it was clean and changed).
    fn set(&mut self, i: usize, to: Option<u32>) -> (Option<u32>, bool) {
        let slot = self.at[i];
        let new = slot_of(to);
        if slot & !DIRTY == new {
            // Nothing changed: the unit differs from the index exactly as it did.
            return (location(slot), false);
        }
        self.at[i] = new | DIRTY;
        let fresh = slot & DIRTY == 0;
        if fresh {
            self.dirty.push(i as u32);
        }
        (location(slot), fresh)
    }
}

/// The held objects' units (module documentation).
#[derive(Clone, Default)]
pub(super) struct UnitMap {
    objects: FxHashMap<Oid, ObjectUnits>,
    /// Objects edited once through the index since they were last let go of or held: the
    /// next edit holds them ([`UnitMap::edited_before`]).
    seen: rustc_hash::FxHashSet<Oid>,
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

    /// Whether `oid`, not held, was edited before through the index: an object is held from
    /// its second edit on, so one edited once (a trace's object touched once) costs no load
    /// of its extents. Remembers at most [`SEEN_MAX`] objects (forgets them all past that).
    pub(super) fn edited_before(&mut self, oid: Oid) -> bool {
        if self.seen.remove(&oid) {
            return true;
        }
        if self.seen.len() >= SEEN_MAX {
            self.seen.clear();
        }
        self.seen.insert(oid);
        false
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
        let slot = usize::try_from(u).ok().and_then(|i| o.at.get(i)).copied();
        Some(slot.and_then(location))
    }

    /// Whether an object of `units` slots fits the budget beside the objects held now
    /// (`alone`: beside none).
    pub(super) fn fits(&self, units: u64, alone: bool) -> bool {
        let held = if alone { 0 } else { self.held_units };
        units <= DENSE_UNITS_MAX && held + units <= self.budget_units
    }

    /// Holds `oid` (not held yet) with the index's extents of it: (first unit, first write
    /// unit, units), the write unit [`LOST`] standing for each unit of a lost extent.
    pub(super) fn hold(&mut self, oid: Oid, extents: &[(u64, u32, u32)]) {
        debug_assert!(!self.holds(oid), "{oid} is held already");
        let len = extents
            .iter()
            .map(|&(k, _, n)| k + u64::from(n))
            .max()
            .unwrap_or(0);
        let mut at = vec![SLOT_UNMAPPED; len as usize];
        for &(k, s, n) in extents {
            for i in 0..n {
                let to = if s == LOST { LOST } else { s + i };
                at[(k + u64::from(i)) as usize] = slot_of(Some(to));
            }
        }
        self.held_units += len;
        let dirty = Vec::new();
        self.objects.insert(oid, ObjectUnits { at, dirty });
    }

    /// Maps unit `u` of `oid` to `to` (`None`: unmaps it), marking it dirty, and returns
    /// `Some` of where it was; `None`, and nothing changes, when the object is not held or
    /// has no room for the unit within the budget.
    pub(super) fn try_set(&mut self, oid: Oid, u: u64, to: Option<u32>) -> Option<Option<u32>> {
        let o = self.objects.get_mut(&oid)?;
        let i = usize::try_from(u).ok()?;
        if i >= o.at.len() {
            if to.is_none() {
                // Unmapping a unit past the array: it is unmapped already.
                return Some(None);
            }
            let len = o.at.len() as u64;
            let room = self.budget_units - self.held_units;
            if u >= DENSE_UNITS_MAX || u + 1 - len > room {
                return None;
            }
            let grown = grown_len(len, u).min(len + room);
            self.held_units += grown - len;
            o.at.resize(grown as usize, SLOT_UNMAPPED);
        }
        let (old, fresh) = o.set(i, to);
        if fresh {
            count_dirty(&mut self.pending, &mut self.dirty_objects, oid, o);
        }
        Some(old)
    }

    /// GC moved unit `u` of `oid` from `from` to `to`: `Some(true)` once mapped there,
    /// `Some(false)` (nothing changed) if the object does not map the unit at `from`, `None`
    /// when the object is not held.
    pub(super) fn try_remap(&mut self, oid: Oid, u: u64, from: u32, to: u32) -> Option<bool> {
        let o = self.objects.get_mut(&oid)?;
        let i = usize::try_from(u).ok();
        let Some(i) = i.filter(|&i| o.at.get(i).copied().and_then(location) == Some(from)) else {
            return Some(false);
        };
        if o.set(i, Some(to)).1 {
            count_dirty(&mut self.pending, &mut self.dirty_objects, oid, o);
        }
        Some(true)
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
        if self.objects.get(&oid).is_none_or(|o| o.dirty.is_empty()) {
            return Vec::new();
        }
        // A scan of the dirty objects, but only for an object let go of for want of room.
        if let Some(i) = self.dirty_objects.iter().position(|&o| o == oid) {
            self.dirty_objects.swap_remove(i);
        }
        self.take_dirty_of(oid)
    }

    fn take_dirty_of(&mut self, oid: Oid) -> Vec<(u64, Option<u32>)> {
        let Some(o) = self.objects.get_mut(&oid) else {
            return Vec::new();
        };
        let mut dirty = std::mem::take(&mut o.dirty);
        dirty.sort_unstable();
        let units: Vec<(u64, Option<u32>)> = dirty
            .iter()
            .map(|&i| {
                let slot = &mut o.at[i as usize];
                *slot &= !DIRTY;
                (u64::from(i), location(*slot))
            })
            .collect();
        self.pending -= units.len();
        units
    }

    /// Slots of the held object `oid` (0 if not held).
    pub(super) fn slots(&self, oid: Oid) -> u64 {
        self.objects.get(&oid).map_or(0, |o| o.at.len() as u64)
    }

    /// The held object's units as the index's entries hold them, ascending: (first unit, first
    /// write unit, units). With `extents`, each run of units in consecutive write units (or
    /// all [`LOST`]) is one entry, up to `u32::MAX / 2` units as the index's extents are;
    /// otherwise one entry per unit (OSCM-11 V-C's page index).
    pub(super) fn runs(&self, oid: Oid, extents: bool) -> Vec<(u64, u32, u32)> {
        let mut out: Vec<(u64, u32, u32)> = Vec::new();
        let Some(o) = self.objects.get(&oid) else {
            return out;
        };
        for (i, &slot) in o.at.iter().enumerate() {
            let Some(v) = location(slot) else {
                continue;
            };
            let u = i as u64;
            if let Some((first, start, len)) = out.last_mut() {
                let follows = *first + u64::from(*len) == u
                    && *len < u32::MAX / 2
                    && if v == LOST {
                        *start == LOST
                    } else {
                        *start != LOST && *start + *len == v
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
                o.dirty.is_empty(),
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
                        .filter_map(|(i, &slot)| Some((i as u64, location(slot)?)))
                        .collect();
                (oid, units)
            })
            .collect();
        out.sort_unstable_by_key(|&(oid, _)| oid);
        out
    }
}

/// Counts a unit of `oid` (held as `o`) that just became dirty in `pending`, and lists the
/// object among the dirty ones at its first.
fn count_dirty(pending: &mut usize, dirty_objects: &mut Vec<Oid>, oid: Oid, o: &ObjectUnits) {
    *pending += 1;
    if o.dirty.len() == 1 {
        dirty_objects.push(oid);
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

    fn oid(n: u64) -> Oid {
        Oid::new(1, 0x10000 + n)
    }

    #[test]
    fn an_object_held_from_its_extents_maps_each_unit() {
        let mut m = UnitMap::new(1 << 20);
        m.hold(oid(1), &[(0, 100, 3), (5, LOST, 2), (9, 7, 1)]);
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
        m.hold(oid(1), &extents);
        assert_eq!(m.runs(oid(1), true), extents);
        let pages: Vec<_> = (0..3).map(|i| (i, 100 + i as u32, 1)).collect();
        assert_eq!(m.runs(oid(1), false)[..3], pages[..]);
        assert_eq!(m.runs(oid(1), false).len(), 8);
        // A unit moved next to its neighbour's write unit joins its extent.
        m.try_set(oid(1), 4, Some(8));
        assert_eq!(m.runs(oid(1), true)[1], (3, 7, 2));
    }

    #[test]
    fn the_budget_bounds_what_an_object_may_grow_to() {
        let mut m = UnitMap::new(100 * BYTES_PER_UNIT);
        m.hold(oid(1), &[(0, 1, 10)]);
        assert_eq!(
            m.try_set(oid(1), 100, Some(5)),
            None,
            "101 slots are over the budget"
        );
        assert_eq!(m.try_set(oid(1), 99, Some(5)), Some(None));
        assert_eq!(m.get(oid(1), 99), Some(Some(5)));
        assert!(!m.fits(1, false), "the budget is used up");
        assert!(m.fits(100, true));
        assert_eq!(
            m.try_set(oid(2), 0, Some(5)),
            None,
            "an object not held takes no slot"
        );
        assert_eq!(m.try_remap(oid(1), 99, 6, 7), Some(false), "not at 6");
        assert_eq!(m.try_remap(oid(1), 99, 5, 7), Some(true));
        assert_eq!(m.get(oid(1), 99), Some(Some(7)));
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
                    m.hold(o, &[]);
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
                let old = m.try_set(o, u, to).unwrap();
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
