//! Aged devices shared between variants (issue 20 item 4).
//!
//! Every scheduled run fills its footprint and ages the device to the cleaning threshold
//! before it measures (`prio::fill_and_age`); on BLOCKMGMT-09's 32 GiB SSD that set-up
//! is almost all of a variant's time, and the seven Table 6 experiments repeat it on the same
//! device, with the same stack, footprint and seed. So the first variant to need an aged
//! device ages a copy of its fresh stack and keeps it; the others take a copy of that
//! (`Stack::clone_stack`, state for state: flash contents, mapping, block table, counters).
//!
//! The key is everything the set-up reads: the device's configuration, the stack's whole
//! specification (its controller settings included), the footprint, the cleaning threshold
//! and the seed, so a copy is exactly what the variant's own set-up would have built, and
//! every result is unchanged (`results.json` compared apart from wall-clock fields). A stack
//! that cannot be copied (the object store) ages its own device as before.
//!
//! The cache is process-wide because the variants that share a device run on whatever
//! threads the caller's pool gives them (`ossd reproduce --jobs`, Python, tests); it keeps at
//! most [`KEPT`] devices (each up to a few hundred MB in fingerprint mode), the oldest dropped
//! first, and [`forget`] empties it at the end of a suite.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex, OnceLock};

use flash::Nanos;
use stacks::Stack;

use crate::engine::{PhaseError, Verifier};

/// Aged devices kept at most.
pub const KEPT: usize = 2;

/// A device after its set-up: the stack, what its verifier expects, and when the set-up ended.
struct Aged {
    stack: Box<dyn Stack + Send + Sync>,
    verifier: Verifier,
    end_ns: Nanos,
}

/// One key's device: aged once, by the first variant that asks; `None` when the stack cannot
/// be copied or its set-up failed (each variant then runs its own, and reports its error).
type Slot = Arc<OnceLock<Option<Aged>>>;

static AGED: Mutex<VecDeque<(String, Slot)>> = Mutex::new(VecDeque::new());

/// What [`crate::prio::fill_and_age`] reads besides the stack's state: the key of an aged
/// device (with the device's and the stack's configurations, which the caller formats).
pub(crate) fn key(
    configuration: String,
    footprint: u64,
    low_free_percent: f64,
    seed: u64,
) -> String {
    format!("{configuration} footprint={footprint} low={low_free_percent:?} seed={seed}")
}

/// Fills and ages `stack` (fresh, built from what `key` names) as
/// [`crate::prio::fill_and_age`] would, from a copy of a device aged before under the same key
/// when there is one. Returns when the set-up ended.
pub(crate) fn fill_and_age(
    stack: &mut Box<dyn Stack>,
    key: String,
    footprint: u64,
    low_free_percent: f64,
    seed: u64,
    verifier: &mut Verifier,
) -> Result<Nanos, PhaseError> {
    let slot = slot(key);
    let aged = slot.get_or_init(|| {
        let mut own = stack.clone_stack()?;
        let mut v = verifier.clone();
        let own_stack: &mut dyn Stack = own.as_mut();
        let end_ns =
            crate::prio::fill_and_age(own_stack, footprint, low_free_percent, seed, &mut v).ok()?;
        Some(Aged {
            stack: own,
            verifier: v,
            end_ns,
        })
    });
    if let Some(a) = aged {
        if let Some(copied) = a.stack.clone_stack() {
            *stack = copied;
            *verifier = a.verifier.clone();
            return Ok(a.end_ns);
        }
    }
    crate::prio::fill_and_age(stack.as_mut(), footprint, low_free_percent, seed, verifier)
}

/// The slot of `key`, made (and the oldest dropped past [`KEPT`]) if there is none.
fn slot(key: String) -> Slot {
    let mut kept = AGED.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
    if let Some((_, s)) = kept.iter().find(|(k, _)| *k == key) {
        return s.clone();
    }
    let s = Slot::default();
    kept.push_back((key, s.clone()));
    while kept.len() > KEPT {
        kept.pop_front();
    }
    s
}

/// Drops every aged device kept (a suite calls it when its variants are done).
pub fn forget() {
    AGED.lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
        .clear();
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::request::{Op, Request};
    use crate::variant::Variant;

    /// A stack aged from the cache, whether the variant aged it or copied it, is the stack its
    /// own set-up builds: same counters, same end of set-up, and the same answers to the same
    /// requests after (completion times, read fingerprints, the check).
    #[test]
    fn a_copied_aged_device_is_the_device_its_own_set_up_builds() {
        let device = crate::experiment::scale_device(flash::preset("ssd-004").unwrap(), 0.004);
        let v = Variant {
            label: "aged".into(),
            stack: stacks::StackKind::Ftl,
            set: [("prio.cleaning".to_string(), "aware".to_string())].into(),
            device: None,
            workload: None,
        };
        let fresh = || crate::scheduled::build(&v, device).unwrap().0;
        let footprint = fresh().capacity_bytes() * 3 / 4 / 4096 * 4096;
        let (low, seed) = (5.0, 77);
        let key = || key(format!("test {device:?}"), footprint, low, seed);
        let verifier = |s: &dyn Stack| Verifier::new(s.capacity_bytes(), s.unit_bytes());

        let mut own = fresh();
        let mut own_v = verifier(own.as_ref());
        let own_end =
            crate::prio::fill_and_age(own.as_mut(), footprint, low, seed, &mut own_v).unwrap();
        forget();
        let (mut aged, mut copied) = (fresh(), fresh());
        let (mut aged_v, mut copied_v) = (verifier(aged.as_ref()), verifier(copied.as_ref()));
        let aged_end = fill_and_age(&mut aged, key(), footprint, low, seed, &mut aged_v).unwrap();
        let copied_end =
            fill_and_age(&mut copied, key(), footprint, low, seed, &mut copied_v).unwrap();
        forget();
        assert_eq!((aged_end, copied_end), (own_end, own_end));
        assert!(own.counters().flash_pages_programmed > footprint / 4096);
        let before = own.counters();
        for s in [&aged, &copied] {
            assert_eq!(s.counters(), own.counters());
            assert_eq!(s.gc_state(), own.gc_state());
        }
        let mut t = own_end;
        let mut outs: [Vec<u64>; 3] = Default::default();
        for i in 0..6000u64 {
            let op = if i % 3 == 0 { Op::Read } else { Op::Write };
            let req = Request::new(op, (i * 7919 % (footprint / 4096)) * 4096, 4096);
            let done: Vec<Nanos> = [&mut own, &mut aged, &mut copied]
                .into_iter()
                .zip(outs.iter_mut())
                .map(|(s, out)| s.submit(t, &req, i + 1, out).unwrap())
                .collect();
            assert!(done.iter().all(|&d| d == done[0]), "request {i}: {done:?}");
            assert!(outs.iter().all(|o| *o == outs[0]), "request {i}");
            t = done[0];
        }
        // The requests after the set-up ran GC, so its state was copied too.
        assert!(own.counters().gc_page_copies > before.gc_page_copies);
        assert!(own.counters().flash_blocks_erased > before.flash_blocks_erased);
        for s in [&mut own, &mut aged, &mut copied] {
            s.check().unwrap();
        }
        assert_eq!(own_v.checked, copied_v.checked);
    }
}
