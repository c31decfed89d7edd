//! Many torture runs across threads, each from its own seed, within a run or time budget.

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use crate::fault::FaultTally;
use crate::sim::{self, RunReport, SimConfig, Violation};

/// A batch of runs.
#[derive(Clone, Copy, Debug)]
pub struct Campaign {
    /// What each run does (stack, device, fault kinds, step budget).
    pub sim: SimConfig,
    /// Run `i` uses seed [`seed_of`]`(seed, i)`.
    pub seed: u64,
    /// Stop after this many runs...
    pub runs: Option<u64>,
    /// ...or after this much wall time (whichever comes first; one of them must be set).
    pub seconds: Option<f64>,
    /// Worker threads running seeds in parallel (at least one is used).
    pub threads: usize,
}

/// The seed of run `i` of a campaign: distinct runs get unrelated seeds, and the seed alone
/// replays a run.
pub fn seed_of(base: u64, i: u64) -> u64 {
    let mut x = base ^ i.wrapping_mul(0x9E37_79B9_7F4A_7C15);
    x = (x ^ (x >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    x ^ (x >> 31)
}

/// What a campaign found.
#[derive(Clone, Debug, Default)]
pub struct Summary {
    /// Runs finished (a panicked run counts too).
    pub runs: u64,
    /// Workload steps over all runs.
    pub steps: u64,
    /// Recoveries (after a power loss or a clean shutdown) over all runs.
    pub recoveries: u64,
    /// Reads whose bytes the oracle checked, over all runs.
    pub reads_checked: u64,
    /// Errors the contract allowed after destructive faults, over all runs.
    pub errors_tolerated: u64,
    /// Out-of-space refusals over all runs (a refusal, not a fault).
    pub no_space: u64,
    /// The least live data at a refusal over all runs, in thousandths of the capacity.
    pub no_space_lowest_live_permille: Option<u64>,
    /// Runs a destructive fault ended early (the image refused with an error).
    pub ended_early: u64,
    /// Of those, runs whose refusal named the damaged unit (one a fault struck), and runs
    /// whose refusal named no unit after a fault struck what no one slot owns (metadata, or a
    /// page the stack could not name; any other refusal naming no unit is a violation).
    pub ended_naming_struck: u64,
    /// See [`Summary::ended_naming_struck`].
    pub ended_naming_none: u64,
    /// The first [`KEEP`] runs ended early: seed and why (each replays with its seed).
    pub ended: Vec<(u64, String)>,
    /// Runs ended on an image a crash left needing a repair the stack does not make, as its
    /// contract allows ([`crate::RunReport::ended_by_contract`]; blockfs).
    pub ended_by_contract: u64,
    /// Runs whose drawn variant does not fit the device ([`crate::RunReport::unfit`]), and
    /// the first one's reason.
    pub unfit: u64,
    /// See [`Summary::unfit`].
    pub unfit_why: Option<String>,
    /// Runs held to the strict contract throughout (no destructive fault struck live data).
    pub strict_runs: u64,
    /// Runs relaxed for some slots only (damage to one slot's own data): every other slot
    /// stayed under the strict contract.
    pub slot_relaxed_runs: u64,
    /// Power cuts in those runs: each checked against the strict contract.
    pub strict_power_cuts: u64,
    /// Recoveries after a crash, over all runs, and those checked against the whole contract
    /// (nothing relaxed yet, also in runs relaxed later): see [`RunReport::crash_recoveries`].
    pub crash_recoveries: u64,
    /// See [`Summary::crash_recoveries`].
    pub strict_crash_recoveries: u64,
    /// Runs relaxed for every slot, by the reason of the first whole-run relaxation, in the
    /// order of [`crate::sim::RelaxedAll::ALL`].
    pub relaxed_all_by: [u64; 4],
    /// Slots whose relaxation ended (struck blocks erased, contents re-read), over all runs.
    pub relaxations_ended: u64,
    /// Runs relaxed at some point that ended with every slot strict again.
    pub strict_again_runs: u64,
    /// Slot checks after recoveries, strict and relaxed, over all runs.
    pub slot_checks_strict: u64,
    /// See [`Summary::slot_checks_strict`].
    pub slot_checks_relaxed: u64,
    /// Slots a stack promising only what was flushed need not have kept, read and removed
    /// after recoveries ([`crate::RunReport::slot_checks_unsynced`]).
    pub slot_checks_unsynced: u64,
    /// GC, erases and checkpoints reached, summed over all runs.
    pub coverage: crate::subject::Coverage,
    /// Faults that struck, summed over all runs.
    pub tally: FaultTally,
    /// Violations with their runs' fault schedules (the first [`KEEP`] only).
    pub violations: Vec<(Violation, Vec<String>)>,
    /// Runs that broke the contract (all of them, not only the kept ones).
    pub violation_count: u64,
    /// Wall time since the campaign started, in seconds.
    pub wall_seconds: f64,
}

/// Violations whose details a summary keeps.
pub const KEEP: usize = 50;

impl Summary {
    /// Folds one run's report into the totals, keeping its violation if fewer than [`KEEP`]
    /// are kept so far.
    pub fn add(&mut self, r: RunReport) {
        self.runs += 1;
        self.steps += r.steps as u64;
        self.recoveries += r.recoveries;
        self.reads_checked += r.reads_checked;
        self.errors_tolerated += r.errors_tolerated;
        self.no_space += r.no_space;
        if let Some(p) = r.no_space_lowest_live_permille {
            let lowest = self.no_space_lowest_live_permille.get_or_insert(p);
            *lowest = (*lowest).min(p);
        }
        if r.unfit {
            self.unfit += 1;
            if self.unfit_why.is_none() {
                self.unfit_why.clone_from(&r.ended);
            }
        } else if let (Some(why), false) = (&r.ended, r.ended_by_contract) {
            self.ended_early += 1;
            match r.ended_naming {
                Some(true) => self.ended_naming_struck += 1,
                Some(false) => self.ended_naming_none += 1,
                None => {}
            }
            if self.ended.len() < KEEP {
                self.ended.push((r.seed, why.clone()));
            }
        }
        self.ended_by_contract += r.ended_by_contract as u64;
        if let Some(why) = r.relaxed_all_by {
            let i = crate::sim::RelaxedAll::ALL
                .iter()
                .position(|w| *w == why)
                .unwrap_or(0);
            self.relaxed_all_by[i] += 1;
        }
        self.relaxations_ended += r.relaxations_ended;
        self.strict_again_runs += (r.relaxed_at.is_some() && r.strict_at_end) as u64;
        self.crash_recoveries += r.crash_recoveries;
        self.strict_crash_recoveries += r.strict_crash_recoveries;
        self.slot_checks_strict += r.slot_checks_strict;
        self.slot_checks_relaxed += r.slot_checks_relaxed;
        self.slot_checks_unsynced += r.slot_checks_unsynced;
        if r.relaxed_at.is_none() {
            self.strict_runs += 1;
            self.strict_power_cuts += r.tally.power_cuts;
        } else if r.relaxed_all_at.is_none() {
            self.slot_relaxed_runs += 1;
        }
        self.tally += r.tally;
        self.coverage += r.coverage;
        if let Some(v) = r.violation {
            self.violation_count += 1;
            if self.violations.len() < KEEP {
                self.violations.push((v, r.schedule));
            }
        }
    }
}

/// Runs one seed, turning a panic (a stack's assertion, the watchdog) into a violation.
pub fn run_seed(seed: u64, cfg: &SimConfig) -> RunReport {
    match catch_unwind(AssertUnwindSafe(|| sim::run(seed, cfg))) {
        Ok(r) => r,
        Err(payload) => {
            let msg = payload
                .downcast_ref::<&str>()
                .map(|s| s.to_string())
                .or_else(|| payload.downcast_ref::<String>().cloned())
                .unwrap_or_else(|| "a panic with no message".into());
            RunReport {
                seed,
                violation: Some(Violation {
                    seed,
                    step: 0,
                    what: format!("panic: {msg}"),
                }),
                schedule: vec!["(the run panicked; replay the seed to see its schedule)".into()],
                ..RunReport::default()
            }
        }
    }
}

impl Campaign {
    /// Runs the campaign on `threads` threads; `progress` sees the summary so far after each
    /// run (from any thread). `stop` ends it early when set (Ctrl-C).
    pub fn run(&self, progress: &(dyn Fn(&Summary) + Sync), stop: &AtomicBool) -> Summary {
        let start = Instant::now();
        let deadline = self.seconds.map(|s| start + Duration::from_secs_f64(s));
        let next = AtomicU64::new(0);
        let summary = Mutex::new(Summary::default());
        let worker = || loop {
            if stop.load(Ordering::Relaxed) || deadline.is_some_and(|d| Instant::now() >= d) {
                return;
            }
            let i = next.fetch_add(1, Ordering::Relaxed);
            if self.runs.is_some_and(|n| i >= n) {
                return;
            }
            let report = run_seed(seed_of(self.seed, i), &self.sim);
            let mut s = summary.lock().unwrap_or_else(|p| p.into_inner());
            s.add(report);
            s.wall_seconds = start.elapsed().as_secs_f64();
            progress(&s);
        };
        std::thread::scope(|scope| {
            for _ in 0..self.threads.max(1) {
                scope.spawn(worker);
            }
        });
        let mut s = summary.into_inner().unwrap_or_else(|p| p.into_inner());
        s.wall_seconds = start.elapsed().as_secs_f64();
        // Threads finish runs in any order: list violations by seed so output is stable.
        s.violations.sort_by_key(|(v, _)| v.seed);
        s
    }
}
