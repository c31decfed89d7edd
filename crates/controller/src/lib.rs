//! The device-side controller: one controller that orders host requests and GC steps onto the
//! dies, with priorities end to end (OSSD-13 IV-C, V-F, VI-E; BLOCKMGMT-09 3.2, 3.4, 3.6).
//!
//! The policy is one pure function, [`policy::decide`], from a [`policy::View`] of the queues,
//! the dies and the FML to an [`policy::Action`]; [`Controller::run`] is the mechanism that
//! builds the view, carries the action out on a [`Target`] and hands completions back to their
//! [`Source`]. Every policy is chosen in [`ControllerConfig`].
//!
//! # Model
//! Requests arrive open-loop (each has an arrival time) into per-priority FIFOs. The controller
//! has its own clock and makes one decision at a time:
//!
//! - **GC as a preemptible sequence of steps** (OSSD-13 V-F). A step copies one valid unit or
//!   erases one victim ([`Target::gc_step`]). The controller issues the next step once the dies
//!   it uses ([`Target::gc_dies`]) are free, so steps on distinct dies overlap and each die has
//!   at most one step under way. With [`GcPreemption::Step`] a prioritized request is issued
//!   before the next step and waits at most for the step under way on its die; normal requests
//!   wait for the collection to finish. With [`GcPreemption::Collection`] (a device that cannot
//!   preempt its cleaner) every request waits for the whole collection. A prioritized writer
//!   that always has a request queued would otherwise starve GC until the FML, at its floor,
//!   collects a whole victim inside one of its writes; so each write unit a prioritized write
//!   programs while GC wants to run owes GC one step, and owed steps go first. A prioritized
//!   write then waits for at most as many steps as it programs units (OSSD-13 VI-E's
//!   prioritized write); reads owe nothing, so a prioritized read still waits for at most the
//!   step under way.
//! - **When cleaning runs** (BLOCKMGMT-09 3.6). Cleaning starts when free blocks fall below
//!   `low_free_percent` of all blocks. With [`Cleaning::Aware`], while priority requests are
//!   outstanding (queued or in flight) it is postponed until free blocks fall below
//!   `critical_free_percent`; [`Cleaning::Agnostic`] ignores priorities. A collection once
//!   begun runs to its erase (or is preempted step by step, as above).
//! - **Die scheduling** (BLOCKMGMT-09 3.2). The controller issues a request only once every die it
//!   needs has finished the work issued to it (one operation per die in flight), so a request
//!   behind a busy die holds up the controller. [`DieScheduler::Fcfs`] takes the oldest request
//!   of the highest priority class; [`DieScheduler::Swtf`] (shortest wait time first) takes the
//!   one, among the first `queue_depth` of that class, whose dies are free soonest. Priority
//!   classes always come first.
//! - **Stripe-aligned write merging** (BLOCKMGMT-09 3.4). With [`StripeMerge::Aligned`], a write is
//!   issued together with the queued writes of its class that extend it contiguously within
//!   the stripes (write units, the FTL's logical pages) it touches: one program, or one
//!   read-modify-write, for all of them. [`StripeMerge::Unaligned`] issues writes as they come.
//!
//! Requests never change order within the device's reservation model: the controller issues
//! in time order, and the NAND model serves each die and bus in issue order.

#![deny(clippy::unwrap_used, clippy::expect_used)]
#![warn(missing_docs)]

pub mod config;
pub mod policy;
pub mod request;
pub mod source;
pub mod target;

use std::cmp::Reverse;
use std::collections::{BTreeMap, BinaryHeap, VecDeque};

use flash::{DieId, Nanos};

pub use config::{
    Cleaning, ConfigError, ControllerConfig, DieScheduler, GcPreemption, StripeMerge, Watermarks,
};
pub use policy::{Action, ClassView, Decision, View};
pub use request::{Op, Request};
pub use source::{Completion, Source};
pub use target::{GcState, Target};

/// What a run of the controller did.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Outcome {
    /// GC steps that did work.
    pub gc_steps: u64,
    /// Host writes issued as part of a merged stripe write, beyond the first of each.
    pub merged_writes: u64,
    /// Longest the request queues grew.
    pub max_queued: usize,
    /// When the last request or GC step completed.
    pub end_ns: Nanos,
}

/// Why a run stopped.
#[derive(Debug, thiserror::Error)]
pub enum RunError<E> {
    /// The settings are out of range.
    #[error(transparent)]
    Config(#[from] ConfigError),
    /// The target failed request number `index`.
    #[error("request {index} ({:?} at byte {}, {} bytes): {source}", request.op, request.offset_bytes, request.len_bytes)]
    Submit {
        /// How many requests were issued before it.
        index: u64,
        /// The request as issued (merged, when writes were merged).
        request: Request,
        /// The target's error.
        source: E,
    },
    /// The target failed a GC step.
    #[error("background GC: {0}")]
    GcStep(E),
    /// The source failed.
    #[error("{0}")]
    Source(E),
    /// Requests are queued and nothing can move (see [`Action::Stalled`]).
    #[error("scheduler stalled at {at_ns} ns with {queued} requests queued")]
    Stalled {
        /// The controller's clock.
        at_ns: Nanos,
        /// Requests queued.
        queued: usize,
    },
}

/// A request waiting in the controller's queue.
struct Waiting {
    /// As it will be issued (class 0 when priorities are not honored).
    req: Request,
    /// As the source handed it over.
    original: Request,
    arrival: Nanos,
    tag: u64,
}

/// The controller's state during a run: its queues, its clock and its GC bookkeeping.
pub struct Controller {
    cfg: ControllerConfig,
    queues: BTreeMap<u8, VecDeque<Waiting>>,
    queued: usize,
    now: Nanos,
    start: Nanos,
    gc_last: Nanos,
    gc_hold: Nanos,
    gc_stalled: bool,
    gc_debt: u64,
    priority_in_flight: BinaryHeap<Reverse<Nanos>>,
    issued: u64,
    dies: Vec<DieId>,
    out: Outcome,
}

impl Controller {
    /// A controller whose clock starts at `start_ns`.
    pub fn new(cfg: ControllerConfig, start_ns: Nanos) -> Result<Controller, ConfigError> {
        cfg.validate()?;
        Ok(Controller {
            cfg,
            queues: BTreeMap::new(),
            queued: 0,
            now: start_ns,
            start: start_ns,
            gc_last: start_ns,
            gc_hold: start_ns,
            gc_stalled: false,
            gc_debt: 0,
            priority_in_flight: BinaryHeap::new(),
            issued: 0,
            dies: Vec::new(),
            out: Outcome {
                end_ns: start_ns,
                ..Outcome::default()
            },
        })
    }

    /// Runs `source`'s requests on `target` until the source has nothing more and the queues
    /// are empty, or the source says the run is over.
    pub fn run<E, T, S>(
        cfg: &ControllerConfig,
        target: &mut T,
        source: &mut S,
        start_ns: Nanos,
    ) -> Result<Outcome, RunError<E>>
    where
        T: Target<Error = E> + ?Sized,
        S: Source<Error = E> + ?Sized,
    {
        let mut c = Controller::new(*cfg, start_ns)?;
        loop {
            if source.finished() {
                break;
            }
            c.take_arrivals(source)?;
            c.out.max_queued = c.out.max_queued.max(c.queued);
            let t = c.now;
            while c
                .priority_in_flight
                .peek()
                .is_some_and(|Reverse(d)| *d <= t)
            {
                c.priority_in_flight.pop();
            }
            let next_arrival = source.next_arrival();
            if c.queued == 0 && next_arrival.is_none() {
                break;
            }
            let view = c.view(&*target, next_arrival);
            let d = policy::decide(&c.cfg, &view);
            if !d.want_gc {
                c.gc_debt = 0;
            }
            match d.action {
                Action::GcStep => c.gc_step(target, view.gc)?,
                Action::WaitUntil(at) => c.now = at,
                Action::Stalled => {
                    return Err(RunError::Stalled {
                        at_ns: t,
                        queued: c.queued,
                    })
                }
                Action::Issue {
                    priority,
                    pick,
                    at_ns,
                } => c.issue(target, source, priority, pick, at_ns, d.want_gc)?,
            }
        }
        c.out.end_ns = c.out.end_ns.max(c.gc_last);
        Ok(c.out)
    }

    /// Queues everything the source hands over now.
    fn take_arrivals<E, S: Source<Error = E> + ?Sized>(
        &mut self,
        source: &mut S,
    ) -> Result<(), RunError<E>> {
        loop {
            let honor = self.cfg.honor_priorities;
            let queues = &self.queues;
            let room = |p: u8| {
                let class = if honor { p } else { 0 };
                queues.get(&class).map_or(0, VecDeque::len)
            };
            let Some((r, tag)) = source.take(self.now, &room).map_err(RunError::Source)? else {
                return Ok(());
            };
            let mut req = r;
            if !honor {
                req.priority = 0;
            }
            let arrival = r.arrival_ns.unwrap_or(0).max(self.start);
            self.queues
                .entry(req.priority)
                .or_default()
                .push_back(Waiting {
                    req,
                    original: r,
                    arrival,
                    tag,
                });
            self.queued += 1;
        }
    }

    /// What the policy sees now.
    fn view<T: Target + ?Sized>(&mut self, target: &T, next_arrival: Option<Nanos>) -> View {
        let t = self.now;
        let dies = &mut self.dies;
        let mut ready_of = |dies_of: &dyn Fn(&mut Vec<DieId>)| {
            dies.clear();
            dies_of(dies);
            dies.iter()
                .map(|&d| target.die_free_ns(d))
                .max()
                .unwrap_or(0)
                .max(t)
        };
        let candidates = match self.cfg.scheduler {
            DieScheduler::Fcfs => 1,
            DieScheduler::Swtf => self.cfg.queue_depth as usize,
        };
        let classes = self
            .queues
            .iter()
            .filter(|(_, q)| !q.is_empty())
            .map(|(&priority, q)| ClassView {
                priority,
                ready_ns: q
                    .iter()
                    .take(candidates)
                    .map(|w| ready_of(&|out| target.dies_of(&w.req, out)))
                    .collect(),
            })
            .collect();
        View {
            now_ns: t,
            gc: target.gc_state(),
            gc_dies_free_ns: ready_of(&|out| target.gc_dies(out)),
            gc_hold_ns: self.gc_hold,
            gc_stalled: self.gc_stalled,
            gc_debt: self.gc_debt,
            priority_in_flight: !self.priority_in_flight.is_empty(),
            next_arrival_ns: next_arrival,
            classes,
        }
    }

    /// Runs one GC step now and learns whether it did anything.
    fn gc_step<E, T: Target<Error = E> + ?Sized>(
        &mut self,
        target: &mut T,
        before: GcState,
    ) -> Result<(), RunError<E>> {
        let t = self.now;
        let work = target.work_done();
        let done = target.gc_step(t).map_err(RunError::GcStep)?;
        if target.gc_state() != before || target.work_done() != work {
            self.out.gc_steps += 1;
            self.gc_debt = self.gc_debt.saturating_sub(1);
            self.gc_last = self.gc_last.max(done);
        } else if done > t {
            // The target's own clock is ahead (the object store advances it to each of its
            // operations' completion): no step can start before it.
            self.gc_hold = done;
        } else {
            self.gc_stalled = true;
        }
        Ok(())
    }

    /// Issues the `pick`-th request of class `priority` at `at` (with the writes merged into it),
    /// and hands its completion back to the source.
    #[allow(clippy::too_many_arguments)]
    fn issue<E, T, S>(
        &mut self,
        target: &mut T,
        source: &mut S,
        priority: u8,
        pick: usize,
        at: Nanos,
        want_gc: bool,
    ) -> Result<(), RunError<E>>
    where
        T: Target<Error = E> + ?Sized,
        S: Source<Error = E> + ?Sized,
    {
        self.now = at;
        let unit = target.unit_bytes();
        let merge = self.cfg.stripe_merge == StripeMerge::Aligned;
        let Some(q) = self.queues.get_mut(&priority) else {
            return Err(RunError::Stalled {
                at_ns: at,
                queued: self.queued,
            });
        };
        let Some(first) = q.remove(pick) else {
            return Err(RunError::Stalled {
                at_ns: at,
                queued: self.queued,
            });
        };
        let mut req = first.req;
        let mut group = vec![first];
        if req.op == Op::Write && merge {
            self.out.merged_writes += merge_stripe(q, &mut req, &mut group, unit);
        }
        self.queued -= group.len();
        let done = target.submit(at, &req).map_err(|source| RunError::Submit {
            index: self.issued,
            request: req,
            source,
        })?;
        self.issued += 1;
        if req.op == Op::Write {
            self.gc_stalled = false;
        }
        let preempt = self.cfg.gc_preemption != GcPreemption::Collection;
        if priority > 0 && req.op == Op::Write && preempt && want_gc {
            self.gc_debt +=
                (req.offset_bytes + req.len_bytes).div_ceil(unit) - req.offset_bytes / unit;
        }
        if priority > 0 {
            self.priority_in_flight.push(Reverse(done));
        }
        for w in group {
            source
                .completed(Completion {
                    tag: w.tag,
                    request: w.original,
                    arrival_ns: w.arrival,
                    done_ns: done,
                })
                .map_err(RunError::Source)?;
        }
        self.out.end_ns = self.out.end_ns.max(done);
        Ok(())
    }
}

/// BLOCKMGMT-09 3.4: moves the queued writes that extend `req` contiguously within the stripes it
/// touches from `q` into `group`, growing `req` over them; returns how many it merged.
fn merge_stripe(
    q: &mut VecDeque<Waiting>,
    req: &mut Request,
    group: &mut Vec<Waiting>,
    unit: u64,
) -> u64 {
    let lo = req.offset_bytes / unit * unit;
    let hi = (req.offset_bytes + req.len_bytes).div_ceil(unit) * unit;
    let mut merged = 0;
    loop {
        let end = req.offset_bytes + req.len_bytes;
        let found = q.iter().position(|w| {
            w.req.op == Op::Write
                && ((w.req.offset_bytes == end && end + w.req.len_bytes <= hi)
                    || (w.req.offset_bytes + w.req.len_bytes == req.offset_bytes
                        && w.req.offset_bytes >= lo))
        });
        let Some(w) = found.and_then(|i| q.remove(i)) else {
            return merged;
        };
        req.offset_bytes = req.offset_bytes.min(w.req.offset_bytes);
        req.len_bytes += w.req.len_bytes;
        merged += 1;
        group.push(w);
    }
}
