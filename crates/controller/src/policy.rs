//! The controller's policy: one pure function from what the controller sees to what it does
//! next, apart from the mechanism that carries it out ([`crate::Controller`]), as
//! `fml::gc::choose_victim` is apart from the collector.

use flash::Nanos;

use crate::config::{Cleaning, ControllerConfig, DieScheduler, GcPreemption};
use crate::target::GcState;

/// One priority class with requests queued, as the policy sees it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ClassView {
    /// The class (0 is normal, higher is more urgent).
    pub priority: u8,
    /// When each candidate could start (its dies free, not before now), oldest first: the head
    /// under FCFS, the first `queue_depth` under SWTF.
    pub ready_ns: Vec<Nanos>,
}

/// What the controller sees when it decides.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct View {
    /// The controller's clock.
    pub now_ns: Nanos,
    /// Free space and GC progress.
    pub gc: GcState,
    /// When the dies of the next GC step are all free (not before now).
    pub gc_dies_free_ns: Nanos,
    /// No GC step may start before this (the target's own clock was ahead at the last try).
    pub gc_hold_ns: Nanos,
    /// The last GC step found nothing to do and no write has happened since.
    pub gc_stalled: bool,
    /// GC steps owed to prioritized writes (one per unit they programmed while GC wanted to run).
    pub gc_debt: u64,
    /// A priority request (class above 0) has been issued and not completed.
    pub priority_in_flight: bool,
    /// When the next request arrives at the controller, if one will.
    pub next_arrival_ns: Option<Nanos>,
    /// The classes with queued requests, lowest priority first.
    pub classes: Vec<ClassView>,
}

/// What the controller does next.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Action {
    /// Run one GC step now.
    GcStep,
    /// Issue the `pick`-th queued request of class `priority` at `at_ns`.
    Issue {
        /// The class.
        priority: u8,
        /// Its position in the class's queue.
        pick: usize,
        /// When it starts.
        at_ns: Nanos,
    },
    /// Nothing can go now: decide again at this time.
    WaitUntil(Nanos),
    /// Requests are queued, none may go, and nothing will change: a policy bug or an
    /// impossible configuration, reported rather than looped on.
    Stalled,
}

/// A decision, and whether GC wanted to run when it was made (the mechanism keeps the debt of
/// prioritized writes only while it does).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Decision {
    /// What to do.
    pub action: Action,
    /// Whether cleaning wanted to run.
    pub want_gc: bool,
}

/// Whether cleaning wants to run (BLOCKMGMT-09 3.6): a collection under way runs on; otherwise below
/// the low threshold, or, with priority-aware cleaning and priority requests outstanding, only
/// below the critical one.
pub fn wants_gc(cfg: &ControllerConfig, v: &View) -> bool {
    let priority_outstanding = v.classes.iter().any(|c| c.priority > 0) || v.priority_in_flight;
    let percent = match cfg.cleaning {
        Cleaning::Aware if priority_outstanding => cfg.critical_free_percent,
        _ => cfg.low_free_percent,
    };
    !v.gc_stalled
        && (v.gc.collecting
            || v.gc.free_blocks < ControllerConfig::blocks_below(percent, v.gc.blocks))
}

/// The candidate of a class the scheduler takes (BLOCKMGMT-09 3.2): the oldest under FCFS, the one
/// whose dies are free soonest under SWTF (the oldest among equals). `None` for an empty class.
pub fn pick(scheduler: DieScheduler, ready_ns: &[Nanos]) -> Option<(usize, Nanos)> {
    match scheduler {
        DieScheduler::Fcfs => ready_ns.first().map(|&r| (0, r)),
        DieScheduler::Swtf => ready_ns
            .iter()
            .copied()
            .enumerate()
            .min_by_key(|&(i, r)| (r, i)),
    }
}

/// The next thing the controller does (see the crate doc for the policies it follows).
pub fn decide(cfg: &ControllerConfig, v: &View) -> Decision {
    let t = v.now_ns;
    let want_gc = wants_gc(cfg, v);
    let decision = |action| Decision { action, want_gc };
    let priority_queued = v.classes.iter().any(|c| c.priority > 0);
    let preempt = cfg.gc_preemption != GcPreemption::Collection;
    // Interleaved cleaning lets normal requests between steps too, until free space is critical.
    let urgent =
        v.gc.free_blocks < ControllerConfig::blocks_below(cfg.critical_free_percent, v.gc.blocks);
    let normal_may_go = cfg.gc_preemption == GcPreemption::Interleave && !urgent;
    // The next GC step is issued once the dies it uses are free, like any operation, so steps on
    // distinct dies overlap and each die has at most one step under way.
    let gc_at = want_gc.then(|| v.gc_dies_free_ns.max(t).max(v.gc_hold_ns));
    // Steps owed to prioritized writes go first; otherwise a prioritized request goes before
    // the next step (OSSD-13 V-F: it is served between two successive steps).
    let owed = preempt && want_gc && v.gc_debt > 0;
    if gc_at.is_some_and(|g| g <= t) && (!(preempt && priority_queued) || owed) {
        return decision(Action::GcStep);
    }
    // The class to serve: the highest non-empty one, and while a collection wants to run, only
    // prioritized classes (step preemption; any class with interleaving until free space is
    // critical) or none (collection, or steps owed).
    let class = if (want_gc && !preempt) || (owed && !v.gc_stalled) {
        None
    } else {
        v.classes
            .iter()
            .rev()
            .find(|c| !c.ready_ns.is_empty() && (!want_gc || c.priority > 0 || normal_may_go))
    };
    let gc_event = gc_at.filter(|&g| g > t);
    let next_event = match (v.next_arrival_ns, gc_event) {
        (Some(a), Some(g)) => Some(a.min(g)),
        (a, g) => a.or(g),
    };
    let Some((class, (pick, ready))) =
        class.and_then(|c| pick(cfg.scheduler, &c.ready_ns).map(|p| (c, p)))
    else {
        return decision(match next_event {
            Some(e) => Action::WaitUntil(e.max(t + 1)),
            None => Action::Stalled,
        });
    };
    if let Some(e) = next_event {
        if ready > e {
            // Something arrives (or a GC step could start) before the chosen request could
            // start: decide again then.
            return decision(Action::WaitUntil(e));
        }
    }
    decision(Action::Issue {
        priority: class.priority,
        pick,
        at_ns: ready,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::StripeMerge;

    const BLOCKS: u32 = 100;

    /// A device with plenty of free space, nothing queued, at t = 1000.
    fn idle() -> View {
        View {
            now_ns: 1000,
            gc: GcState {
                free_blocks: 50,
                blocks: BLOCKS,
                collecting: false,
            },
            gc_dies_free_ns: 0,
            gc_hold_ns: 0,
            gc_stalled: false,
            gc_debt: 0,
            priority_in_flight: false,
            next_arrival_ns: None,
            classes: Vec::new(),
        }
    }

    fn class(priority: u8, ready_ns: &[Nanos]) -> ClassView {
        ClassView {
            priority,
            ready_ns: ready_ns.to_vec(),
        }
    }

    fn cfg() -> ControllerConfig {
        ControllerConfig::default()
    }

    #[test]
    fn an_idle_device_waits_for_the_next_arrival_or_reports_a_stall() {
        let mut v = idle();
        assert_eq!(decide(&cfg(), &v).action, Action::Stalled);
        v.next_arrival_ns = Some(5000);
        assert_eq!(decide(&cfg(), &v).action, Action::WaitUntil(5000));
        // Never a wait into the past or the present.
        v.next_arrival_ns = Some(10);
        assert_eq!(decide(&cfg(), &v).action, Action::WaitUntil(1001));
    }

    #[test]
    fn the_highest_class_goes_first_and_fcfs_takes_its_oldest() {
        let mut v = idle();
        v.classes = vec![class(0, &[1000]), class(2, &[3000, 1000])];
        let d = decide(&cfg(), &v);
        assert_eq!(
            d.action,
            Action::Issue {
                priority: 2,
                pick: 0,
                at_ns: 3000
            }
        );
        assert!(!d.want_gc);
    }

    #[test]
    fn swtf_takes_the_request_whose_dies_are_free_soonest() {
        let swtf = ControllerConfig {
            scheduler: DieScheduler::Swtf,
            ..cfg()
        };
        let mut v = idle();
        v.classes = vec![class(0, &[4000, 2000, 2000, 3000])];
        assert_eq!(
            decide(&swtf, &v).action,
            Action::Issue {
                priority: 0,
                pick: 1,
                at_ns: 2000
            }
        );
        assert_eq!(pick(DieScheduler::Swtf, &[]), None);
        assert_eq!(pick(DieScheduler::Fcfs, &[7, 1]), Some((0, 7)));
    }

    #[test]
    fn a_request_that_could_start_only_after_the_next_arrival_waits_for_it() {
        let mut v = idle();
        v.classes = vec![class(0, &[9000])];
        v.next_arrival_ns = Some(4000);
        assert_eq!(decide(&cfg(), &v).action, Action::WaitUntil(4000));
    }

    #[test]
    fn cleaning_starts_below_the_low_threshold_and_a_step_goes_when_its_dies_are_free() {
        let mut v = idle();
        v.gc.free_blocks = 4; // below 5% of 100
        v.classes = vec![class(0, &[1000])];
        let d = decide(&cfg(), &v);
        assert!(d.want_gc);
        assert_eq!(d.action, Action::GcStep);
        // The step's dies are busy until 2000: normal requests wait for the collection (step
        // preemption), so the controller waits for the dies.
        v.gc_dies_free_ns = 2000;
        assert_eq!(decide(&cfg(), &v).action, Action::WaitUntil(2000));
        // A stalled collector (nothing to do) lets requests go.
        v.gc_stalled = true;
        assert!(matches!(
            decide(&cfg(), &v).action,
            Action::Issue { priority: 0, .. }
        ));
    }

    #[test]
    fn a_prioritized_request_goes_between_two_steps_unless_the_collection_cannot_be_preempted() {
        let mut v = idle();
        v.gc.free_blocks = 1; // below the critical threshold too
        v.gc.collecting = true;
        v.classes = vec![class(0, &[1000]), class(1, &[1000])];
        assert_eq!(
            decide(&cfg(), &v).action,
            Action::Issue {
                priority: 1,
                pick: 0,
                at_ns: 1000
            }
        );
        let whole = ControllerConfig {
            gc_preemption: GcPreemption::Collection,
            ..cfg()
        };
        assert_eq!(decide(&whole, &v).action, Action::GcStep);
        // Owed steps go before the prioritized request.
        v.gc_debt = 3;
        assert_eq!(decide(&cfg(), &v).action, Action::GcStep);
    }

    #[test]
    fn priority_aware_cleaning_waits_for_the_critical_threshold_while_priority_is_outstanding() {
        let mut v = idle();
        v.gc.free_blocks = 3; // below 5%, not below 2%
        v.classes = vec![class(1, &[1000])];
        let aware = decide(&cfg(), &v);
        assert!(!aware.want_gc);
        assert!(matches!(aware.action, Action::Issue { priority: 1, .. }));
        let agnostic = ControllerConfig {
            cleaning: Cleaning::Agnostic,
            ..cfg()
        };
        assert!(decide(&agnostic, &v).want_gc);
        // A priority request in flight counts as outstanding too.
        v.classes = vec![class(0, &[1000])];
        v.priority_in_flight = true;
        let d = decide(&cfg(), &v);
        assert!(!d.want_gc);
        assert!(matches!(d.action, Action::Issue { priority: 0, .. }));
    }

    #[test]
    fn interleaving_lets_normal_requests_between_steps_until_space_is_critical() {
        let inter = ControllerConfig {
            gc_preemption: GcPreemption::Interleave,
            stripe_merge: StripeMerge::Aligned,
            ..cfg()
        };
        let mut v = idle();
        v.gc.free_blocks = 4;
        v.gc_dies_free_ns = 5000;
        v.classes = vec![class(0, &[1000])];
        assert!(matches!(
            decide(&inter, &v).action,
            Action::Issue { priority: 0, .. }
        ));
        v.gc.free_blocks = 1;
        assert_eq!(decide(&inter, &v).action, Action::WaitUntil(5000));
    }

    #[test]
    fn a_held_collector_waits_for_the_targets_clock() {
        let mut v = idle();
        v.gc.free_blocks = 4;
        v.gc_hold_ns = 7000;
        assert_eq!(decide(&cfg(), &v).action, Action::WaitUntil(7000));
    }
}
