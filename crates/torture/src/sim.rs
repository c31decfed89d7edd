//! One torture run: from a seed, a random workload against one stack, faults injected through
//! the device, recovery after every power loss, and the oracle's checks after every read and
//! every recovery. Everything random comes from one ChaCha8 stream seeded by the run's seed, so
//! a run replays exactly.

use std::collections::HashMap;

use flash::fault::CutMode;
use flash::{BlockAddr, DeviceConfig, Flash, PageAddr};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

use crate::device::{self, Device};
use crate::fault::{FaultKind, FaultSet, FaultTally};
use crate::oracle::{Mismatch, Oracle, ATTRS, SECTOR};
use crate::subject::{
    discard_durable_at_flush, Contract, Coverage, CutKind, Fail, Guarded, PageRole, StackKind,
    Subject, Variant, METADATA,
};

/// The live data, in thousandths of its capacity, a store of objects or files must be able to
/// hold: an out-of-space refusal with less is a violation (issue 15 item 3). The FTL is held
/// to its whole logical capacity instead.
pub const SPACE_FLOOR_PERMILLE: u64 = 100;

/// What one run does.
#[derive(Clone, Copy, Debug)]
pub struct SimConfig {
    /// The stack under torture.
    pub stack: StackKind,
    /// The device every run formats afresh (default [`device::small`]).
    pub device: DeviceConfig,
    /// Fault kinds a run may inject; each run draws a subset.
    pub faults: FaultSet,
    /// Workload steps per run (the step budget: a run never takes more).
    pub steps: u32,
    /// Share of the stack's capacity the slots span, in percent (default 45: enough that GC
    /// runs).
    pub fill_percent: u64,
    /// Parity units per group every object is made with (object store only; 0, the default:
    /// none). Above 0, a destructive fault on a data or parity unit of a group with no other
    /// damage must be masked, and the harness strikes such units by preference (issue 16
    /// item 4).
    pub reliability: u8,
    /// Destructive faults a run injects on average when its fault set holds masked kinds too
    /// (default [`DESTRUCTIVE_PER_RUN`], a quarter of one). Masked faults come at one step in
    /// four.
    /// Destructive faults come far more rarely: each one that strikes live data relaxes the
    /// contract for what it struck, so at the masked faults' rate nearly every run would be
    /// relaxed and the whole contract checked almost nowhere (issue 15: more than 75% of the
    /// runs of `--faults all` strict). A set of destructive kinds alone, or a run with parity
    /// (`reliability` above 0, where they must be masked), draws them one step in four.
    /// `None` draws every kind alike, one fault a step in four, as before 2026-12-07's second
    /// stop: the pinned seeds of earlier findings replay the schedules they were found with.
    pub destructive_per_run: Option<f64>,
    /// The live data, in thousandths of its capacity, a store of objects or files must hold
    /// before it may refuse a write for want of space (default [`SPACE_FLOOR_PERMILLE`]).
    pub space_floor_permille: u64,
    /// Opens the FTL with its test-only recovery that skips the roll-forward.
    pub broken_recovery: bool,
    /// FTL variants (`ftl`, `dftl`, blockfs's) checkpoint while the host writes in two runs of
    /// three (`ftl.checkpoint_every_units`; issue 15 item 3). False keeps every run to
    /// checkpoints at a clean close, as before 2026-12-07, so pinned seeds of earlier
    /// findings replay the schedules they were found with.
    pub ftl_checkpoints: bool,
    /// Prints the fault schedule to standard error as it happens (replays).
    pub trace: bool,
    /// The deliberately broken variant every run uses (feature `mutants`, tests/mutants.rs);
    /// `None` is the real code.
    #[cfg(feature = "mutants")]
    pub mutant: Option<fml::mutants::Mutant>,
}

impl SimConfig {
    /// The defaults for `stack`: the [`device::small`] device, every fault kind, 300 steps, the
    /// real recovery, no trace.
    pub fn new(stack: StackKind) -> Self {
        SimConfig {
            stack,
            device: device::small(),
            faults: FaultSet::all(),
            steps: 300,
            fill_percent: FILL_PERCENT,
            reliability: 0,
            destructive_per_run: Some(DESTRUCTIVE_PER_RUN),
            space_floor_permille: SPACE_FLOOR_PERMILLE,
            broken_recovery: false,
            ftl_checkpoints: true,
            trace: false,
            #[cfg(feature = "mutants")]
            mutant: None,
        }
    }
}

/// A broken promise, with what replays it.
#[derive(Clone, Debug)]
pub struct Violation {
    /// The run's seed: replaying it reproduces the violation.
    pub seed: u64,
    /// The workload step at which it was found (0 for a failed format or a panic).
    pub step: u32,
    /// What went wrong, for a person.
    pub what: String,
}

/// What one run did.
#[derive(Clone, Debug, Default)]
pub struct RunReport {
    /// The run's seed.
    pub seed: u64,
    /// The stack settings the run drew (see [`Variant::describe`]).
    pub variant: String,
    /// Fault kinds this run drew.
    pub faults_drawn: String,
    /// Workload steps taken (at most [`SimConfig::steps`]).
    pub steps: u32,
    /// Faults that struck.
    pub tally: FaultTally,
    /// Recoveries, after a power loss or a clean shutdown.
    pub recoveries: u64,
    /// Reads whose bytes the oracle checked.
    pub reads_checked: u64,
    /// Recoveries after a crash (not a clean shutdown) that were checked.
    pub crash_recoveries: u64,
    /// Those checked against the whole contract: no slot was relaxed when the check ended.
    pub strict_crash_recoveries: u64,
    /// Slots checked after recoveries under the strict contract, and under the relaxed one
    /// (a destructive fault had struck the slot's data, or metadata): with per-slot
    /// relaxation a run relaxed in part still checks its other slots strictly.
    pub slot_checks_strict: u64,
    /// See [`RunReport::slot_checks_strict`].
    pub slot_checks_relaxed: u64,
    /// Slots a stack with the [`Contract::Synced`] contract need not bring back after a crash
    /// (changed since the last flush): read without a check of their bytes, then removed.
    pub slot_checks_unsynced: u64,
    /// Slots whose relaxation ended: the blocks struck for them erased, their contents re-read
    /// after a recovery (docs/RELIABILITY.md, "The end of a slot's relaxation").
    pub relaxations_ended: u64,
    /// Whether every slot was under the strict contract when the run ended.
    pub strict_at_end: bool,
    /// Errors the contract allowed after a destructive fault (failed commands and reads, damage
    /// fsck found, an image recovery refused).
    pub errors_tolerated: u64,
    /// Out-of-space refusals.
    pub no_space: u64,
    /// The least live data at a refusal, in thousandths of the stack's capacity.
    pub no_space_lowest_live_permille: Option<u64>,
    /// Why the run stopped early without a violation (an image a destructive fault left
    /// unrecoverable, reported as an error; or, on a stack that promises only what was flushed,
    /// an image a crash left needing a repair the stack does not make).
    pub ended: Option<String>,
    /// The run ended on an image a crash left needing repair, as the stack's contract allows
    /// ([`Contract::Synced`]), not by damage.
    pub ended_by_contract: bool,
    /// The run's variant does not fit the device (no run at all; not counted as ended).
    pub unfit: bool,
    /// For a run a recovery's refusal ended: whether the refusal named the unit it found
    /// damaged (one a fault struck: naming any other is a violation), or named none.
    pub ended_naming: Option<bool>,
    /// The broken promise that ended the run, if any.
    pub violation: Option<Violation>,
    /// The step at which a destructive fault first relaxed the contract, for a slot or for
    /// the whole run (`None`: the run was held to the whole contract to its end).
    pub relaxed_at: Option<u32>,
    /// The step at which the contract was relaxed for every slot (damage to metadata, or to
    /// a page whose owner could not be told); `None` while only some slots were relaxed.
    pub relaxed_all_at: Option<u32>,
    /// Why the contract was relaxed for every slot (with [`RunReport::relaxed_all_at`]).
    pub relaxed_all_by: Option<RelaxedAll>,
    /// What GC, erases and checkpoints the run reached, summed over its openings.
    pub coverage: Coverage,
    /// The faults injected and the recoveries, in order: the fault schedule.
    pub schedule: Vec<String>,
}

/// Why a run was relaxed for every slot rather than for the slots struck (issue 15 item 1:
/// each is a place where the harness, or the stack's answers to it, cannot yet scope damage).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RelaxedAll {
    /// A destructive fault struck a live page of no one slot: metadata (descriptor page,
    /// index node, checkpoint, small-object page, FTL map) or data whose owner the stack
    /// could not name.
    SharedPage,
    /// A guarded unit of no one slot (a metadata unit or its copy) was struck while its pair
    /// was already damaged, or a crash exposed a masked strike on one.
    ExposedShared,
    /// The stack could not say what the struck page held.
    UnknownPage,
    /// A misdirected program during a shutdown or a recovery, with no store to ask what the
    /// page was to hold.
    StoreGone,
}

impl RelaxedAll {
    /// Every reason, in the order summaries print them.
    pub const ALL: [RelaxedAll; 4] = [
        RelaxedAll::SharedPage,
        RelaxedAll::ExposedShared,
        RelaxedAll::UnknownPage,
        RelaxedAll::StoreGone,
    ];

    /// The reason for a person.
    pub fn describe(self) -> &'static str {
        match self {
            RelaxedAll::SharedPage => "live page of no one slot (metadata)",
            RelaxedAll::ExposedShared => "metadata pair struck twice or exposed by a crash",
            RelaxedAll::UnknownPage => "page the stack could not name",
            RelaxedAll::StoreGone => "misdirected write in shutdown/recovery",
        }
    }
}

/// A block a destructive fault struck and its erase count then: once the count moves, the
/// damage is gone from flash.
type Struck = (BlockAddr, u32);

/// The blocks a misdirected program touched (the page it left erased, the page it landed on),
/// with their erase counts now.
/// The first page of write unit `u` (an object-store unit), for messages.
fn unit_first_page(d: &Device, u: u32) -> PageAddr {
    flash::gang::Layout::new(d.config()).page(flash::gang::Vpa(u), 0)
}

/// Whether a fault struck a page of write unit `u` (an object-store unit: the layout is the
/// device's own) since its block was last erased.
fn unit_struck(d: &Device, u: u32) -> bool {
    let layout = flash::gang::Layout::new(d.config());
    let v = flash::gang::Vpa(u);
    u < layout.superblocks * layout.units_per_superblock
        && (0..layout.pages_per_unit()).any(|i| d.struck(layout.page(v, i)))
}

fn misdirected_blocks(m: &flash::fault::Misdirected, dev: &Device) -> Vec<Struck> {
    std::iter::once(m.intended)
        .chain(m.landed)
        .map(|p| {
            let b = p.block_addr();
            (b, dev.block_info(b).erase_count)
        })
        .collect()
}

/// Slots (objects or block ranges) a run spreads its data over.
pub(crate) const SLOTS: u32 = 6;
/// Share of the stack's capacity the slots span by default, in percent: enough that GC runs.
const FILL_PERCENT: u64 = 45;

/// Destructive faults per run by default ([`SimConfig::destructive_per_run`]). On a device 80%
/// full nearly every one strikes a page the stack needs (on the FTL's stacks; on the object
/// store's about half strike stale pages), so a run stays wholly strict with odds of about
/// e^-0.25 (78%) at worst, and a campaign still injects a thousand of them a minute. At 0.5
/// the FTL's strict runs were 70% (`ossd torture --stack ftl --faults all --fill 80`).
pub const DESTRUCTIVE_PER_RUN: f64 = 0.25;

/// Odds per workload step of a masked fault (and of a destructive one when the set has nothing
/// else, or parity must mask it).
const FAULT_ODDS: f64 = 0.25;

/// A destructive fault on a guarded unit, which the stack must mask ([`PageRole::Guarded`]).
#[derive(Clone, Copy, Debug)]
struct Strike {
    page: PageAddr,
    /// The erase count of the page's block when it was struck: once the block is erased, the
    /// damaged page is gone (unless the unit was mapped as lost first).
    erase_count: u32,
    guard: Guarded,
    /// A crash already exposed it (its slot relaxed): not counted again.
    exposed: bool,
}

/// Why a run stops.
enum Stop {
    Violation(String),
    Ended(String),
}

struct Sim {
    cfg: SimConfig,
    rng: ChaCha8Rng,
    /// How each torn cut strikes (unreadable, garbled, partial) is drawn from a stream of its
    /// own, so enabling those ways leaves every other draw of a seed's schedule as it was.
    tear_rng: ChaCha8Rng,
    variant: Variant,
    faults: FaultSet,
    /// The kinds [`FaultSet::injected`] gives for `faults`, split into masked and destructive
    /// ones once per run ([`Sim::draw_faults`]).
    masked_kinds: Vec<FaultKind>,
    destructive_kinds: Vec<FaultKind>,
    subject: Option<Box<dyn Subject>>,
    oracle: Oracle,
    slot_bytes: u64,
    /// The stack's capacity in bytes, as its format reported it.
    capacity: u64,
    /// The stack holds objects: the workload truncates, sets attributes, lists, creates and
    /// writes at any byte, and the oracle checks lengths, existence, attributes and listings.
    objects: bool,
    /// The objects keep tracked attributes ([`Subject::attributes`]).
    attributes: bool,
    /// The stack has a second partition ([`Subject::partitions`]).
    partitions: bool,
    /// What the stack promises across a power cut.
    contract: Contract,
    /// Slots changed since the last flush when power was last lost (bit i: slot i): under
    /// [`Contract::Synced`] they are not checked after that recovery.
    changed_at_crash: u64,
    /// Whether the second partition (a directory on file systems) had changed since the last
    /// flush when power was last lost: under [`Contract::Synced`] the structure may then need
    /// repair.
    partition_changed_at_crash: bool,
    /// The stack keeps parity or metadata copies ([`Variant::redundant`]): what a struck page
    /// held is asked before the strike, so a strike on a guarded unit is judged masked.
    redundant: bool,
    /// A destructive fault struck metadata (or data whose slot could not be told): errors (not
    /// wrong bytes) are acceptable from now on, everywhere.
    degraded: bool,
    /// Slots (bit i: slot i) whose own data a destructive fault struck: their checks are
    /// relaxed; every other slot's stay strict (issue 15 item 1).
    relaxed_slots: u64,
    /// Where the faults that relaxed each slot struck: (slot, (block, erase count then)).
    slot_strikes: Vec<(u32, Struck)>,
    cut_pending: bool,
    /// Bits flipped per page since its block's erase (erase count, bits), so "within ECC"
    /// flips stay within it.
    flipped: HashMap<PageAddr, (u32, u32)>,
    grown_bad_armed: u32,
    /// Destructive faults parity must mask, while their damage may still be read.
    strikes: Vec<Strike>,
    /// Misdirected metadata programs of a shutdown or a recovery, to be judged by the stack
    /// that opens next ([`Sim::judge_unasked`]).
    unasked: Vec<flash::fault::Misdirected>,
    /// The device's fault counts at the last reboot (kept if the device is lost after it).
    dev_counts: flash::fault::FaultCounts,
    step: u32,
    /// Reboots under way (a failure while checking a recovery reboots again).
    reboot_depth: u32,
    report: RunReport,
}

/// Mixed into a run's seed for its [`Sim::tear_rng`].
const TEAR_STREAM: u64 = 0x7465_6172_5f6d_6f64;

/// Nested reboots beyond which a run is a violation ([`Sim::reboot`]).
const MAX_REBOOT_DEPTH: u32 = 16;

/// Runs one seed. Never panics on a stack's behalf: see [`crate::campaign`] for the
/// catch_unwind around it.
pub fn run(seed: u64, cfg: &SimConfig) -> RunReport {
    // The mutant is chosen per thread: set it on the thread this run takes.
    #[cfg(feature = "mutants")]
    fml::mutants::set(cfg.mutant);
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let variant = Variant::draw(cfg.stack, &cfg.device, &mut rng)
        .with_reliability(cfg.reliability)
        .with_ftl_checkpoints(cfg.ftl_checkpoints);
    // Each run draws a subset of the enabled kinds, so some runs have only masked faults and
    // are held to the whole contract.
    let faults: FaultSet = cfg
        .faults
        .iter()
        .filter(|k| *k == FaultKind::PowerCut || k.tears() || rng.gen_bool(0.5))
        .collect();
    let mut report = RunReport {
        seed,
        variant: variant.describe(),
        faults_drawn: faults.to_string(),
        ..RunReport::default()
    };
    let budget = 500_000 + cfg.steps as u64 * 5_000;
    let device = match variant.device(cfg.device) {
        Ok(d) => d,
        Err(e) => {
            report.ended = Some(format!("the stack does not fit the device: {e}"));
            report.unfit = true;
            return report;
        }
    };
    let formatted = device::fresh(device, budget)
        .map_err(|e| Fail::Other(e.to_string()))
        .and_then(|d| variant.format(d));
    let (mut subject, capacity) = match formatted {
        Ok(x) => x,
        Err(e) => {
            report.violation = Some(Violation {
                seed,
                step: 0,
                what: format!("format failed: {e}"),
            });
            return report;
        }
    };
    let unit = device.write_unit_bytes() as u64;
    let slot_bytes = (capacity * cfg.fill_percent.min(100) / 100 / SLOTS as u64) / unit * unit;
    if slot_bytes == 0 {
        report.ended = Some("device too small for the torture workload".into());
        return report;
    }
    subject.set_slot_bytes(slot_bytes);
    let mut oracle = Oracle::new(
        SLOTS,
        (slot_bytes / SECTOR as u64) as u32,
        discard_durable_at_flush(cfg.stack),
    );
    oracle.set_unit_bytes(unit);
    let objects = subject.objects();
    let attributes = subject.attributes();
    let partitions = subject.partitions();
    let contract = subject.contract();
    let (destructive_kinds, masked_kinds): (Vec<FaultKind>, Vec<FaultKind>) =
        faults.injected().into_iter().partition(|k| k.destructive());
    let mut sim = Sim {
        cfg: *cfg,
        rng,
        tear_rng: ChaCha8Rng::seed_from_u64(seed ^ TEAR_STREAM),
        variant,
        faults,
        masked_kinds,
        destructive_kinds,
        subject: Some(subject),
        oracle,
        slot_bytes,
        capacity,
        objects,
        attributes,
        partitions,
        contract,
        changed_at_crash: 0,
        partition_changed_at_crash: false,
        redundant: variant.redundant(),
        degraded: false,
        relaxed_slots: 0,
        slot_strikes: Vec::new(),
        cut_pending: false,
        flipped: HashMap::new(),
        grown_bad_armed: 0,
        strikes: Vec::new(),
        unasked: Vec::new(),
        dev_counts: Default::default(),
        step: 0,
        reboot_depth: 0,
        report,
    };
    let stop = sim.body();
    sim.finish(stop)
}

impl Sim {
    #[expect(
        clippy::expect_used,
        reason = "a stack is open at every step; only reboot takes it, and puts one back or ends the run"
    )]
    fn subject(&mut self) -> &mut dyn Subject {
        self.subject.as_deref_mut().expect("a stack is open")
    }
    fn dev(&mut self) -> &mut Device {
        self.subject().device()
    }
    /// A destructive fault struck metadata: the rest of the run is held to the relaxed contract.
    fn relax(&mut self, why: RelaxedAll) {
        if !self.degraded {
            self.degraded = true;
            self.report.relaxed_at.get_or_insert(self.step);
            self.report.relaxed_all_at = Some(self.step);
            self.report.relaxed_all_by = Some(why);
        }
    }

    /// A destructive fault struck data of `slot` alone: that slot is held to the relaxed
    /// contract for the rest of the run.
    fn relax_slot(&mut self, slot: u32, at: &[Struck]) {
        self.relaxed_slots |= 1 << slot;
        self.report.relaxed_at.get_or_insert(self.step);
        self.slot_strikes.extend(at.iter().map(|&b| (slot, b)));
    }

    /// Ends the relaxation of `slot` once every block a fault struck for it has been erased
    /// (the damage is gone from flash) and the check after a recovery has just read the whole
    /// slot back and made what it found the oracle's truth: from then on the slot is held to
    /// the whole contract again (issue 15 item 1). Damage that relaxed every slot never ends.
    fn maybe_end_relaxation(&mut self, slot: u32) {
        if self.degraded || self.relaxed_slots & (1 << slot) == 0 || !self.oracle.known(slot) {
            return;
        }
        let strikes: Vec<Struck> = self
            .slot_strikes
            .iter()
            .filter(|(s, _)| *s == slot)
            .map(|&(_, b)| b)
            .collect();
        if strikes
            .iter()
            .all(|&(b, ec)| self.dev().block_info(b).erase_count != ec)
        {
            self.relaxed_slots &= !(1 << slot);
            self.slot_strikes.retain(|(s, _)| *s != slot);
            self.report.relaxations_ended += 1;
            self.log(format!(
                "slot {slot} strict again: the struck blocks are erased and its contents re-read"
            ));
        }
    }

    /// A misdirected program with no stack left to ask what its page was to hold (a shutdown
    /// or crash took it): a data unit's record names its slot, which alone is relaxed. Anything
    /// else, on a stack that keeps metadata copies, waits for the stack that opens next
    /// ([`Sim::judge_unasked`]); otherwise what the page held cannot be told and every slot is
    /// relaxed.
    fn relax_misdirected_unasked(&mut self, m: &flash::fault::Misdirected, dev: &Device) {
        let at = misdirected_blocks(m, dev);
        match crate::subject::record_slot(self.cfg.stack, &m.oob) {
            Some(s) => self.relax_slot(s, &at),
            None => match crate::subject::record_slots(self.cfg.stack, &m.oob, &m.data) {
                Some(mask) => self.relax_for(PageRole::Slots(mask), &at),
                None if self.redundant => self.unasked.push(m.clone()),
                None => self.relax(RelaxedAll::StoreGone),
            },
        }
    }

    /// Judges the misdirected metadata programs of a shutdown or recovery by the stack just
    /// opened: a unit it references whose copy beside it stands in was masked by that copy
    /// (a strike like any other, until its block is erased). Any other answer proves nothing
    /// (a unit the new stack does not reference may still have been one the old stack needed:
    /// a shutdown's onode, without a copy), so every slot is relaxed, as before.
    fn judge_unasked(&mut self) {
        for m in std::mem::take(&mut self.unasked) {
            let role = self.subject().record_role(m.intended, &m.oob);
            match role {
                PageRole::Guarded(g) if g.oid == METADATA && !self.group_struck(&g) => {
                    self.report.tally.masked_by_parity += 1;
                    let erase_count = self.dev().block_info(m.intended.block_addr()).erase_count;
                    self.strikes.push(Strike {
                        page: m.intended,
                        erase_count,
                        guard: g,
                        exposed: false,
                    });
                    self.log(format!(
                        "misdirected write of the last shutdown or recovery: page {} left erased, masked by its copy",
                        m.intended
                    ));
                }
                _ => self.relax(RelaxedAll::StoreGone),
            }
        }
    }

    /// The misdirected programs still waiting for a stack to judge them, when none will open:
    /// every slot is relaxed.
    fn unasked_unjudged(&mut self) {
        if !self.unasked.is_empty() {
            self.unasked.clear();
            self.relax(RelaxedAll::StoreGone);
        }
    }

    /// Relaxes what damage to a page of this role puts at risk (nothing for a stale page);
    /// `at` is where the damage lies (blocks and their erase counts when struck).
    fn relax_for(&mut self, role: PageRole, at: &[Struck]) {
        match role {
            PageRole::Stale => {}
            PageRole::Slot(s) => self.relax_slot(s, at),
            PageRole::Slots(mask) => {
                for s in (0..SLOTS).filter(|s| mask & (1 << s) != 0) {
                    self.relax_slot(s, at);
                }
            }
            PageRole::Guarded(Guarded { slot: Some(s), .. }) => self.relax_slot(s, at),
            PageRole::Live => self.relax(RelaxedAll::SharedPage),
            PageRole::Guarded(_) => self.relax(RelaxedAll::ExposedShared),
            PageRole::Unknown => self.relax(RelaxedAll::UnknownPage),
        }
    }

    /// Whether `slot`'s checks are relaxed.
    fn slot_relaxed(&self, slot: u32) -> bool {
        self.degraded || self.relaxed_slots & (1 << slot) != 0
    }

    /// Whether any check is relaxed: the harness then accepts errors from commands and
    /// recovery it cannot attribute to one slot.
    fn any_relaxed(&self) -> bool {
        self.degraded || self.relaxed_slots != 0
    }

    /// A live page's role, narrowed to the slot whose data it alone holds when the stack can
    /// tell (asked without a flash command).
    fn narrow(&mut self, role: PageRole, page: PageAddr) -> PageRole {
        match role {
            PageRole::Live => match self.subject().page_owner(page) {
                Some(s) => PageRole::Slot(s),
                None => self
                    .subject()
                    .page_cover(page)
                    .map_or(PageRole::Live, PageRole::Slots),
            },
            r => r,
        }
    }

    fn log(&mut self, what: String) {
        let line = format!("step {}: {what}", self.step);
        if self.cfg.trace {
            eprintln!("  {line}");
        }
        self.report.schedule.push(line);
    }

    fn body(&mut self) -> Result<(), Stop> {
        while self.step < self.cfg.steps {
            self.draw_faults();
            self.workload_step()?;
            self.judge_misdirected();
            self.step += 1;
        }
        // End on a crash, so every run checks recovery at least once.
        self.reboot(false)
    }

    fn finish(mut self, stop: Result<(), Stop>) -> RunReport {
        match stop {
            Ok(()) => {}
            Err(Stop::Ended(why)) => {
                self.log(format!("run ended: {why}"));
                self.report.ended = Some(why);
            }
            Err(Stop::Violation(what)) => {
                self.log(format!("VIOLATION: {what}"));
                self.report.violation = Some(Violation {
                    seed: self.report.seed,
                    step: self.step,
                    what,
                });
            }
        }
        self.report.steps = self.step;
        self.report.strict_at_end = !self.degraded && self.relaxed_slots == 0;
        let dev_counts = match self.subject.take() {
            Some(s) => {
                self.report.coverage += s.coverage();
                s.crash().counts()
            }
            None => self.dev_counts,
        };
        let t = &mut self.report.tally;
        t.power_cuts = dev_counts.power_cuts;
        t.torn_programs = dev_counts.torn_programs;
        t.garbled_programs = dev_counts.garbled_programs;
        t.partial_programs = dev_counts.partial_programs;
        t.disturbed_pages = dev_counts.disturbed_pages;
        t.interrupted_erases = dev_counts.interrupted_erases;
        t.program_failures = dev_counts.program_failures;
        t.erase_failures = dev_counts.erase_failures;
        t.misdirected_writes = dev_counts.misdirected_writes;
        self.report
    }

    // ------------------------------------------------------------------ faults

    /// Draws this step's faults: a masked one with odds [`FAULT_ODDS`], a destructive one with
    /// the odds that give [`SimConfig::destructive_per_run`] a run.
    fn draw_faults(&mut self) {
        let Some(per_run) = self.cfg.destructive_per_run else {
            if !self.faults.is_empty() && self.rng.gen_bool(FAULT_ODDS) {
                let kinds = self.faults.injected();
                let k = kinds[self.rng.gen_range(0..kinds.len())];
                self.inject(k);
            }
            return;
        };
        let (masked, destructive) = (self.masked_kinds.len(), self.destructive_kinds.len());
        if masked > 0 && self.rng.gen_bool(FAULT_ODDS) {
            let k = self.masked_kinds[self.rng.gen_range(0..masked)];
            self.inject(k);
        }
        if destructive == 0 {
            return;
        }
        let odds = if masked == 0 || self.cfg.reliability > 0 {
            FAULT_ODDS
        } else {
            (per_run / f64::from(self.cfg.steps)).clamp(0.0, 1.0)
        };
        if self.rng.gen_bool(odds) {
            let k = self.destructive_kinds[self.rng.gen_range(0..destructive)];
            self.inject(k);
        }
    }

    /// How the next torn cut strikes, among the ways the run's fault set enables.
    fn tear_mode(&mut self) -> CutMode {
        let ways: Vec<FaultKind> = self.faults.tears().collect();
        match ways[self.tear_rng.gen_range(0..ways.len())] {
            FaultKind::Garbled => CutMode::Garbled,
            FaultKind::GarbledPayload => CutMode::GarbledPayload,
            FaultKind::PartialProgram => CutMode::Partial {
                intact: self.tear_rng.gen_range(0..4),
            },
            // The pair distances of common MLC page orders (lower page k shares its cells with
            // upper page k + 1 .. k + 6).
            FaultKind::PairedPage => CutMode::Disturbing {
                distance: self.tear_rng.gen_range(1..=6),
            },
            _ => CutMode::Torn,
        }
    }

    fn inject(&mut self, kind: FaultKind) {
        match kind {
            FaultKind::PowerCut
            | FaultKind::Torn
            | FaultKind::Garbled
            | FaultKind::PartialProgram
            | FaultKind::GarbledPayload
            | FaultKind::PairedPage => {
                if self.cut_pending {
                    return;
                }
                let after = self.rng.gen_range(0..40);
                let mode = if kind == FaultKind::PowerCut {
                    CutMode::Clean
                } else {
                    self.tear_mode()
                };
                self.dev().cut_power_after(after, mode);
                self.cut_pending = true;
                self.log(format!(
                    "arm {mode:?} power cut after {after} flash commands"
                ));
            }
            FaultKind::BitFlip | FaultKind::BitFlipBeyondEcc | FaultKind::PageFailure => {
                self.flip(kind)
            }
            FaultKind::ProgramFailure | FaultKind::EraseFailure => {
                // A few grown bad blocks per run: more would only shrink the device until
                // every write is refused for lack of space.
                if self.grown_bad_armed >= 2 {
                    return;
                }
                let erase = kind == FaultKind::EraseFailure;
                let Some(b) = self.pick_block(|info, ppb| {
                    if erase {
                        info.next_page > 0
                    } else {
                        info.next_page < ppb
                    }
                }) else {
                    return;
                };
                self.grown_bad_armed += 1;
                if erase {
                    self.dev().fail_erase(b);
                    self.log(format!("arm {kind} of block {b}"));
                } else {
                    let page = b.page(self.dev().block_info(b).next_page);
                    self.dev().fail_program(page);
                    self.log(format!("arm {kind} of page {page}"));
                }
            }
            FaultKind::MisdirectedWrite => {
                self.dev().misdirect_next_program();
                // Judged once the program has gone astray ([`Sim::judge_misdirected`]): it
                // relaxes what the page was to hold (or, with parity, is masked).
                self.log(format!("arm {kind} (the next program)"));
            }
        }
    }

    /// A random usable block satisfying `want(info, pages_per_block)`.
    fn pick_block(
        &mut self,
        want: impl Fn(&flash::BlockInfo, u32) -> bool,
    ) -> Option<flash::BlockAddr> {
        let g = self.cfg.device.geometry;
        for _ in 0..16 {
            let b = g.block_at(self.rng.gen_range(0..g.blocks()));
            let info = self.dev().block_info(b);
            if !info.bad && want(&info, g.pages_per_block) {
                return Some(b);
            }
        }
        None
    }

    fn flip(&mut self, kind: FaultKind) {
        // With parity, a destructive fault strikes only where it must be masked (a stale page,
        // or a guarded unit of a group with no other damage), and is skipped when a few draws
        // find no such page: these runs check the stronger promise. Damage parity does not
        // cover (metadata, small objects) is the plain campaigns' business.
        let guarded = kind.destructive() && self.cfg.reliability > 0;
        let mut pick = None;
        for _ in 0..if guarded { 16 } else { 1 } {
            let Some(b) = self.pick_block(|info, _| info.next_page > 0) else {
                continue;
            };
            let info = self.dev().block_info(b);
            let page = b.page(self.rng.gen_range(0..info.next_page));
            if !guarded {
                pick = Some((info, page, None));
                break;
            }
            let role = self.subject().page_role(page);
            let maskable = match role {
                PageRole::Stale => true,
                PageRole::Guarded(g) => !self.group_struck(&g),
                PageRole::Slot(_) | PageRole::Slots(_) | PageRole::Live | PageRole::Unknown => {
                    false
                }
            };
            if maskable {
                pick = Some((info, page, Some(role)));
                break;
            }
        }
        let Some((info, page, mut role)) = pick else {
            return;
        };
        if role.is_none() && self.redundant && kind.destructive() {
            // Copies without parity: any page may be struck, and what it held is asked before
            // the strike (flash reads: these runs' schedules are their own).
            role = Some(self.subject().page_role(page));
        }
        let ecc = self.cfg.device.ecc_correctable_bits;
        let entry = self.flipped.entry(page).or_insert((info.erase_count, 0));
        if entry.0 != info.erase_count {
            *entry = (info.erase_count, 0);
        }
        let bits = match kind {
            FaultKind::BitFlip => {
                let room = ecc.saturating_sub(entry.1);
                if room == 0 {
                    return;
                }
                self.rng.gen_range(1..=room.min(ecc.div_ceil(2)))
            }
            FaultKind::BitFlipBeyondEcc => ecc + self.rng.gen_range(1..=8),
            _ => 1 << 16,
        };
        if let Some(entry) = self.flipped.get_mut(&page) {
            entry.1 = entry.1.saturating_add(bits);
        }
        self.dev().flip_bits(page, bits);
        let t = &mut self.report.tally;
        match kind {
            FaultKind::BitFlip => t.bit_flips_within_ecc += 1,
            FaultKind::BitFlipBeyondEcc => t.bit_flips_beyond_ecc += 1,
            _ => t.page_failures += 1,
        }
        // Without parity the role is asked after the flip, as it always was (pure RAM: the
        // flash commands a power cut counts stay as they were, so old seeds replay).
        let role = match role {
            Some(r) => r,
            None => PageRole::of_live(self.subject().page_live(page)),
        };
        let role = self.narrow(role, page);
        // Damage to a stale page changes nothing the stack may return, and damage to one
        // guarded unit per group is masked: the contract stays strict. Any other damage to
        // live data relaxes the whole run (issue 15 item 1 would scope it to what was struck).
        if kind.destructive() {
            match role {
                PageRole::Stale => self.report.tally.destructive_on_stale += 1,
                PageRole::Guarded(g) if !self.group_struck(&g) => {
                    self.report.tally.masked_by_parity += 1;
                    self.strikes.push(Strike {
                        page,
                        erase_count: info.erase_count,
                        guard: g,
                        exposed: false,
                    });
                }
                r => self.relax_for(r, &[(page.block_addr(), info.erase_count)]),
            }
        }
        let what = match role {
            PageRole::Stale => "stale".to_string(),
            PageRole::Slot(s) => format!("live data of slot {s}"),
            PageRole::Slots(mask) => format!("live metadata of slots {mask:#b}"),
            PageRole::Live => "live".to_string(),
            PageRole::Unknown => "unknown".to_string(),
            PageRole::Guarded(g) => format!(
                "guarded: object {:#x} group {} {}",
                g.oid,
                g.group,
                match g.unit {
                    Some(u) => format!("data unit {u}"),
                    None => "parity unit".into(),
                }
            ),
        };
        self.log(format!("{kind}: {bits} bits in page {page} ({what})"));
    }

    /// With parity: a misdirected program that struck since the last look left its page
    /// erased; masked if that page was to hold a guarded unit of a group with no other damage,
    /// else the run relaxes. Called before any error is judged.
    fn judge_misdirected(&mut self) {
        if self.subject.is_none() {
            return;
        }
        let Some(m) = self.dev().take_misdirected() else {
            return;
        };
        // With parity the store is asked (flash reads); without, only what RAM and the
        // program's own record say, so the run's flash commands stay as they were.
        let role = if self.redundant {
            self.subject().record_role(m.intended, &m.oob)
        } else {
            match self.subject().page_live(m.intended) {
                // Not live by the time it is judged: superseded, or lost already. A data unit
                // GC copied astray and then could not read back when it took that block as its
                // victim in the same step is lost, not stale (`ossd torture --stack ofs --faults
                // all --fill 80 --seed 58`, seed 14853127881339829253: a strict run read the
                // loss as a violation): its slot is relaxed, as for a live unit.
                Some(false) => match self.subject().record_owner(&m.oob) {
                    Some(slot) => PageRole::Slot(slot),
                    None if self.subject().record_is_data(&m.oob) => PageRole::Live,
                    None => PageRole::Stale,
                },
                Some(true) => PageRole::Live,
                // The stack cannot tell (the page is erased: p-OFTL keeps no validity), but the
                // program's own record can: a data unit's names the slot it was to hold.
                None => match self.subject().record_owner(&m.oob) {
                    Some(slot) => PageRole::Slot(slot),
                    None => self
                        .subject()
                        .record_cover(&m.oob, &m.data)
                        .map_or(PageRole::Unknown, PageRole::Slots),
                },
            }
        };
        let role = match role {
            PageRole::Live => self
                .subject()
                .record_owner(&m.oob)
                .map_or(PageRole::Live, PageRole::Slot),
            r => r,
        };
        let erase_count = self.dev().block_info(m.intended.block_addr()).erase_count;
        let what = match role {
            PageRole::Stale => {
                self.report.tally.destructive_on_stale += 1;
                "stale".to_string()
            }
            PageRole::Guarded(g) if !self.group_struck(&g) => {
                self.report.tally.masked_by_parity += 1;
                self.strikes.push(Strike {
                    page: m.intended,
                    erase_count,
                    guard: g,
                    exposed: false,
                });
                format!("guarded: object {:#x} group {}", g.oid, g.group)
            }
            r => {
                let at = misdirected_blocks(&m, self.dev());
                self.relax_for(r, &at);
                format!("{r:?}")
            }
        };
        self.log(format!(
            "misdirected write: page {} left erased, landed on {} ({what})",
            m.intended,
            m.landed
                .map(|p| p.to_string())
                .unwrap_or_else(|| "nothing".into())
        ));
    }

    /// Drops the strikes whose damage is gone (the page's block erased, the unit not mapped as
    /// lost); whether one of those left holds group `g`.
    fn group_struck(&mut self, g: &Guarded) -> bool {
        self.prune_strikes();
        self.strikes
            .iter()
            .any(|s| s.guard.oid == g.oid && s.guard.group == g.group)
    }

    fn prune_strikes(&mut self) {
        let strikes = std::mem::take(&mut self.strikes);
        for s in strikes {
            let erased = self.dev().block_info(s.page.block_addr()).erase_count != s.erase_count;
            // A unit GC could not read stays damaged (mapped as lost) after its block is erased;
            // if the stack cannot say, the strike is kept.
            if !erased || self.subject().guard_lost(&s.guard).unwrap_or(true) {
                self.strikes.push(s);
            }
        }
    }

    /// Masked strikes a crash now would expose: their redundancy is not yet on flash, or
    /// recovery could reach the unit only through its damaged record.
    fn exposed_by_crash(&mut self) -> Vec<Strike> {
        if self.strikes.is_empty() || self.degraded {
            // (A strike of a relaxed slot need not be checked, but costs nothing to.)
            return Vec::new();
        }
        self.prune_strikes();
        let mut strikes = std::mem::take(&mut self.strikes);
        let mut exposed = Vec::new();
        for s in &mut strikes {
            if !s.exposed && !self.subject().guard_survives_crash(&s.guard) {
                s.exposed = true;
                exposed.push(*s);
            }
        }
        self.strikes = strikes;
        exposed
    }

    // ------------------------------------------------------------------ workload

    fn workload_step(&mut self) -> Result<(), Stop> {
        let slot = self.rng.gen_range(0..SLOTS);
        // Objects draw from a wider range: the commands past 100 are theirs (the block stacks'
        // draws stay as they were, so their seeds replay as before).
        let roll = self.rng.gen_range(0..if self.objects { 124 } else { 100 });
        match roll {
            30..=39 if self.objects => self.write_bytes(slot),
            0..=39 => {
                let (first, count) = self.extent(slot);
                self.write(slot, first, count)
            }
            40..=49 if self.objects => {
                // Append at the byte the object ends.
                let offset = self.oracle.len_bytes(slot);
                let most = self.count() as u64 * SECTOR as u64;
                let len = self.rng.gen_range(1..=most);
                self.write_at(slot, offset, len)
            }
            40..=49 => {
                let count = self.count();
                let first = self.oracle.len(slot);
                if first + count <= self.oracle.sectors_per_slot() {
                    self.write(slot, first, count)
                } else {
                    let (first, count) = self.extent(slot);
                    self.write(slot, first, count)
                }
            }
            50..=67 => self.read(slot),
            68..=71 => {
                self.trace(|| format!("discard slot {slot}"));
                self.oracle.discard(slot);
                let r = self.subject().discard(slot);
                self.after(r, "discard")
            }
            72..=84 => {
                self.trace(|| "flush".into());
                match self.subject().flush() {
                    Ok(()) => {
                        self.oracle.flush();
                        Ok(())
                    }
                    Err(f) => self.failed(f, "flush"),
                }
            }
            85..=89 => {
                self.trace(|| "idle".into());
                let r = self.subject().idle();
                self.after(r, "idle")
            }
            90..=93 => self.reboot(true),
            94..=99 => self.reboot(false),
            100..=105 => self.truncate(slot),
            106..=111 if self.attributes => self.set_attr(slot),
            106..=111 => self.truncate(slot),
            112..=115 => self.list(),
            116..=119 => self.create(slot),
            _ if !self.partitions => self.create(slot),
            _ => {
                let present = !self.oracle.partition();
                self.trace(|| format!("set the second partition present={present}"));
                self.oracle.set_partition(present);
                let r = self.subject().set_partition(present);
                self.after(r, "create or remove a partition")
            }
        }
    }

    /// A write of any bytes at any offset (objects).
    fn write_bytes(&mut self, slot: u32) -> Result<(), Stop> {
        let max = self.slot_bytes;
        let most = (self.count() as u64 * SECTOR as u64).min(max);
        let len = self.rng.gen_range(1..=most);
        let offset = self.rng.gen_range(0..=max - len);
        self.write_at(slot, offset, len)
    }

    /// Writes `len` bytes at byte `offset`, or a whole-sector extent where the oracle cannot
    /// record that (past the slot, or a sector it holds in part is unknown after damage).
    fn write_at(&mut self, slot: u32, offset: u64, len: u64) -> Result<(), Stop> {
        if !self.oracle.can_write_bytes(slot, offset, len) {
            let (first, count) = self.extent(slot);
            return self.write(slot, first, count);
        }
        self.trace(|| format!("write slot {slot} bytes {offset}..{}", offset + len));
        let data = self.oracle.write_bytes(slot, offset, len);
        let r = self.subject().write(slot, offset, &data);
        self.after(r, "write")
    }

    /// Creates the object in `slot` (the oracle expects it to exist afterwards).
    fn create(&mut self, slot: u32) -> Result<(), Stop> {
        self.trace(|| format!("create slot {slot}"));
        self.oracle.create(slot);
        let r = self.subject().create(slot);
        self.after(r, "create")
    }

    /// Truncates an object that exists (shrinking most of the time), or creates one.
    fn truncate(&mut self, slot: u32) -> Result<(), Stop> {
        if !self.oracle.exists(slot) || !self.oracle.known(slot) {
            return self.create(slot);
        }
        let len = self.oracle.len_bytes(slot);
        let to = if self.rng.gen_bool(0.7) {
            self.rng.gen_range(0..=len)
        } else {
            self.rng.gen_range(len..=self.slot_bytes)
        };
        // Inside a sector whose bytes a destructive fault made unknown, the oracle could not
        // tell the bytes kept: truncate at the sector's start instead.
        let to = if self.oracle.known_at(slot, to) {
            to
        } else {
            to / SECTOR as u64 * SECTOR as u64
        };
        self.trace(|| format!("truncate slot {slot} from {len} to {to}"));
        self.oracle.truncate(slot, to);
        let r = self.subject().truncate(slot, to);
        self.after(r, "truncate")
    }

    /// Sets or clears a tracked attribute of an object that exists, or creates one.
    fn set_attr(&mut self, slot: u32) -> Result<(), Stop> {
        if !self.oracle.exists(slot) || !self.oracle.known(slot) {
            return self.create(slot);
        }
        let attr = self.rng.gen_range(0..ATTRS);
        let value = if self.rng.gen_bool(0.2) {
            None
        } else {
            let len = self.rng.gen_range(0..=12);
            Some(self.oracle.attr_value(len))
        };
        self.trace(|| format!("set attribute {attr} of slot {slot} to {value:?}"));
        self.oracle.set_attr(slot, attr, value.clone());
        let r = self.subject().set_attr(slot, attr, value.as_deref());
        // A store bounds each object's attributes (an onode's 256 bytes; OFS's extended
        // attributes, like ext4's, report that as out of space): such a refusal says nothing
        // of the device's space, so the floor of live data is not held against it.
        match r {
            Ok(()) => Ok(()),
            Err(f) => self.failed_with(f, "set attribute", false),
        }
    }

    /// Lists the objects and the partitions and compares them with the oracle.
    fn list(&mut self) -> Result<(), Stop> {
        self.trace(|| "list".into());
        let listed = match self.subject().list() {
            Ok(l) => l,
            Err(f) => return self.failed(f, "list"),
        };
        self.oracle
            .check_list(&listed)
            .map_err(|m| Stop::Violation(m.to_string()))?;
        if !self.partitions {
            return Ok(());
        }
        let present = match self.subject().partition() {
            Ok(p) => p,
            Err(f) => return self.failed(f, "list partitions"),
        };
        self.oracle
            .check_partition(present, None)
            .map_err(|m| Stop::Violation(m.to_string()))
    }

    fn count(&mut self) -> u32 {
        let max = if self.rng.gen_bool(0.6) { 8 } else { 40 };
        self.rng
            .gen_range(1..=max)
            .min(self.oracle.sectors_per_slot())
    }

    fn extent(&mut self, _slot: u32) -> (u32, u32) {
        let count = self.count();
        let first = self
            .rng
            .gen_range(0..=self.oracle.sectors_per_slot() - count);
        (first, count)
    }

    /// Logs a workload command, in replays only (runs keep just the fault schedule).
    fn trace(&mut self, what: impl FnOnce() -> String) {
        if self.cfg.trace {
            eprintln!("  step {}: {}", self.step, what());
        }
    }

    fn write(&mut self, slot: u32, first: u32, count: u32) -> Result<(), Stop> {
        self.trace(|| format!("write slot {slot} sectors {first}..{}", first + count));
        let data = self.oracle.write(slot, first, count);
        let r = self
            .subject()
            .write(slot, first as u64 * SECTOR as u64, &data);
        self.after(r, "write")
    }

    fn read(&mut self, slot: u32) -> Result<(), Stop> {
        let (first, count) = self.extent(slot);
        let mut buf = vec![0u8; count as usize * SECTOR];
        match self
            .subject()
            .read(slot, first as u64 * SECTOR as u64, &mut buf)
        {
            Ok(_) if self.contract == Contract::Synced && self.slot_relaxed(slot) => {
                // A file system without checksums of its own metadata may read anything once
                // a destructive fault struck what the slot's file depends on.
                Ok(())
            }
            Ok(n) => {
                self.report.reads_checked += 1;
                self.oracle
                    .check_read(slot, first, count, &buf, n)
                    .map_err(|m| Stop::Violation(m.to_string()))?;
                if !self.attributes {
                    return Ok(());
                }
                match self.subject().attrs(slot) {
                    Ok(a) => self
                        .oracle
                        .check_attrs(slot, a.as_deref())
                        .map_err(|m| Stop::Violation(m.to_string())),
                    Err(f) => self.failed(f, "get attributes"),
                }
            }
            Err(f @ (Fail::Corrupt { .. } | Fail::Device(_) | Fail::Missing(_)))
                if {
                    self.judge_misdirected();
                    self.slot_relaxed(slot)
                } =>
            {
                self.report.errors_tolerated += 1;
                self.oracle.mark_unknown(slot, first, count);
                self.log(format!("read of slot {slot} failed as allowed: {f}"));
                // The read may have been cut short in the middle of an access-time update:
                // start again from what the flash holds.
                self.reboot(false)
            }
            Err(f) => self.failed(f, "read"),
        }
    }

    fn after(&mut self, r: Result<(), Fail>, what: &str) -> Result<(), Stop> {
        match r {
            Ok(()) => Ok(()),
            Err(f) => self.failed(f, what),
        }
    }

    /// A command failed: power loss reboots; out of space or an allowed error reboots too (the
    /// command may have reached flash in part, which only recovery sorts out); anything else is
    /// a violation.
    fn failed(&mut self, f: Fail, what: &str) -> Result<(), Stop> {
        self.failed_with(f, what, true)
    }

    /// [`Sim::failed`]; `floor` holds an out-of-space refusal to the floor of live data.
    fn failed_with(&mut self, f: Fail, what: &str, floor: bool) -> Result<(), Stop> {
        self.judge_misdirected();
        match f {
            Fail::PowerLoss if self.cut_pending => self.reboot(false),
            Fail::PowerLoss => Err(Stop::Violation(format!(
                "{what}: power loss reported with no power cut armed"
            ))),
            Fail::NoSpace => {
                self.no_space(what, floor)?;
                self.reboot(false)?;
                // Make room so the run goes on doing something useful.
                let slot = self.rng.gen_range(0..SLOTS);
                self.oracle.discard(slot);
                let r = self.subject().discard(slot);
                self.after(r, "discard to make room")?;
                match self.subject().flush() {
                    Ok(()) => {
                        self.oracle.flush();
                        Ok(())
                    }
                    Err(f) => self.failed(f, "flush"),
                }
            }
            Fail::Corrupt { .. } | Fail::Device(_) | Fail::Missing(_) if self.any_relaxed() => {
                self.report.errors_tolerated += 1;
                self.log(format!("{what} failed as allowed: {f}"));
                self.reboot(false)
            }
            f => Err(Stop::Violation(format!("{what}: {f}"))),
        }
    }

    /// Counts a refusal of `what` for want of space. The FTL promises its whole logical
    /// capacity ([`Subject::space_promised`]), so a refusal of it is a violation (issue 15
    /// item 3). A store of objects or files spends room on metadata too, so it is held to
    /// [`SimConfig::space_floor_permille`] of its capacity: a refusal with less live data than that is a
    /// violation (a leak of space), one with more is counted.
    fn no_space(&mut self, what: &str, floor: bool) -> Result<(), Stop> {
        let live: u64 = (0..SLOTS).map(|s| self.oracle.len_bytes(s)).sum();
        let permille = live * 1000 / self.capacity.max(1);
        if floor
            && !self.subject.as_ref().is_some_and(|s| s.space_promised())
            && permille < self.cfg.space_floor_permille
        {
            return Err(Stop::Violation(format!(
                "{what}: out of space with {live} bytes live of the stack's {} ({}.{}%; a store \
                 of objects or files promises at least {}% of its capacity)",
                self.capacity,
                permille / 10,
                permille % 10,
                self.cfg.space_floor_permille as f64 / 10.0
            )));
        }
        if floor {
            let lowest = self
                .report
                .no_space_lowest_live_permille
                .get_or_insert(permille);
            *lowest = (*lowest).min(permille);
        }
        if self.subject.as_ref().is_some_and(|s| s.space_promised()) {
            return Err(Stop::Violation(format!(
                "{what}: out of space with {live} bytes written of the FTL's {} (a block \
                 device promises its whole logical capacity)",
                self.capacity
            )));
        }
        self.report.no_space += 1;
        self.log(format!("{what}: out of space"));
        Ok(())
    }

    // ------------------------------------------------------------------ recovery

    /// Shuts the stack down (`clean`: a checkpoint first; else a crash that loses all RAM
    /// state), recovers it, possibly cutting power during recovery too, and checks it.
    fn reboot(&mut self, clean: bool) -> Result<(), Stop> {
        // A command that fails after every recovery (out of space, a refused removal) would
        // reboot from within the check of the reboot before it, without end.
        if self.reboot_depth >= MAX_REBOOT_DEPTH {
            return Err(Stop::Violation(format!(
                "{MAX_REBOOT_DEPTH} reboots nested: a command fails again after every recovery"
            )));
        }
        self.reboot_depth += 1;
        let r = self.reboot_once(clean);
        self.reboot_depth -= 1;
        r
    }

    /// Counts what the power cut that just struck hit, if one did. A paired page it
    /// destroyed with no stack left to ask (a cut during a shutdown or a recovery) relaxes the
    /// slot a data unit's record names, else every slot: what it held cannot be told.
    fn note_cut(&mut self, dev: &mut Device) {
        if let Some(c) = dev.take_cut_command() {
            let kind = CutKind::of(self.cfg.stack, &c);
            self.report.coverage.cuts[kind as usize] += 1;
        }
        if let Some(page) = dev.take_disturbed() {
            // A data unit's record names its slot; anything else cannot be told.
            let mut oob = vec![0u8; dev.config().geometry.oob_size_bytes as usize];
            let slot = dev
                .inner_mut()
                .inner_mut()
                .peek_oob(page, &mut oob)
                .and_then(|()| crate::subject::record_slot(self.cfg.stack, &oob));
            self.log(format!(
                "paired page {page} destroyed by a cut in a shutdown or recovery (slot {slot:?})"
            ));
            match slot {
                Some(s) => {
                    let at = [(
                        page.block_addr(),
                        dev.block_info(page.block_addr()).erase_count,
                    )];
                    self.relax_slot(s, &at);
                }
                None => self.relax(RelaxedAll::UnknownPage),
            }
        }
    }

    /// A torn program that destroyed an earlier page of its block (a paired page): relaxes
    /// what that page held, asked of the stack that was running (from RAM, as for a bit flip
    /// without parity, so the schedule of flash commands is unchanged). Called before the
    /// stack is dropped.
    fn judge_disturbed(&mut self) {
        if self.subject.is_none() {
            return;
        }
        let Some(page) = self.dev().take_disturbed() else {
            return;
        };
        let erase_count = self.dev().block_info(page.block_addr()).erase_count;
        let role = PageRole::of_live(self.subject().page_live(page));
        let role = self.narrow(role, page);
        if role == PageRole::Stale {
            self.report.tally.destructive_on_stale += 1;
        }
        self.log(format!(
            "paired page {page} destroyed by the cut ({role:?})"
        ));
        self.relax_for(role, &[(page.block_addr(), erase_count)]);
    }

    fn reboot_once(&mut self, clean: bool) -> Result<(), Stop> {
        self.judge_misdirected();
        self.judge_disturbed();
        self.changed_at_crash = (0..SLOTS)
            .filter(|&s| self.oracle.changed_since_flush(s))
            .fold(0, |m, s| m | 1 << s);
        self.partition_changed_at_crash = self.oracle.partition_changed_since_flush();
        let mut exposed = if self.subject.is_some() {
            self.exposed_by_crash()
        } else {
            Vec::new()
        };
        let Some(subject) = self.subject.take() else {
            return Err(Stop::Violation(
                "harness: a reboot with no stack open".into(),
            ));
        };
        self.report.coverage += subject.coverage();
        let (mut dev, clean) = if clean {
            let closed = match subject.close() {
                Err((f, mut d)) => {
                    // A program of the shutdown's own may have gone astray.
                    if let Some(m) = d.take_misdirected() {
                        self.relax_misdirected_unasked(&m, &d);
                    }
                    Err((f, d))
                }
                ok => ok,
            };
            match closed {
                Ok(d) => {
                    self.oracle.checkpoint();
                    (d, true)
                }
                Err((f, d)) => {
                    match f {
                        Fail::PowerLoss if self.cut_pending => {}
                        Fail::NoSpace => self.no_space("clean shutdown", true)?,
                        Fail::Corrupt { .. } | Fail::Device(_) | Fail::Missing(_)
                            if self.any_relaxed() =>
                        {
                            self.report.errors_tolerated += 1;
                            self.log(format!("clean shutdown failed as allowed: {f}"));
                        }
                        f => {
                            self.subject = None;
                            drop(d);
                            return Err(Stop::Violation(format!("clean shutdown: {f}")));
                        }
                    }
                    // The shutdown's checkpoint stopped part-way, after programming buffered
                    // units into groups whose parity only the cache then held: a crash at a
                    // point the harness cannot see, which may expose every masked strike
                    // (seed 14287867194901516833, docs/RELIABILITY.md finding 13).
                    // A metadata unit's copy is programmed beside it, never held in a cache:
                    // its strikes stay masked.
                    let parity = |s: &Strike| s.guard.oid != METADATA;
                    exposed.extend(self.strikes.iter().filter(|s| !s.exposed && parity(s)));
                    for s in self.strikes.iter_mut().filter(|s| parity(s)) {
                        s.exposed = true;
                    }
                    (d, false)
                }
            }
        } else {
            (subject.crash(), false)
        };
        self.cut_pending = false;
        self.note_cut(&mut dev);
        if !self.degraded {
            if let Some(m) = dev.take_misdirected() {
                self.relax_misdirected_unasked(&m, &dev);
                self.log(format!(
                    "misdirected write during shutdown: page {} left erased",
                    m.intended
                ));
            }
        }
        if !clean && !exposed.is_empty() {
            // The documented limit of parity (docs/RELIABILITY.md): a crash before the
            // group's parity, or the unit's place in the index, reached flash.
            self.report.tally.exposed_by_crash += exposed.len() as u64;
            for s in &exposed {
                self.relax_for(
                    PageRole::Guarded(s.guard),
                    &[(s.page.block_addr(), s.erase_count)],
                );
            }
            self.log(format!(
                "a crash exposed {} masked strike(s): parity or index not yet on flash (page {})",
                exposed.len(),
                exposed[0].page
            ));
        }
        self.dev_counts = dev.counts();
        let tears = self.faults.tears().next().is_some();
        let power = self.faults.contains(FaultKind::PowerCut) || tears;
        for attempt in 0.. {
            dev.restore_power();
            // Cut power during recovery itself, sometimes: recovery writes a checkpoint.
            if power && attempt < 3 && self.rng.gen_bool(0.3) {
                let after = self.rng.gen_range(0..30);
                let mode = if tears && self.rng.gen_bool(0.5) {
                    self.tear_mode()
                } else {
                    CutMode::Clean
                };
                dev.cut_power_after(after, mode);
                self.log(format!(
                    "arm {mode:?} power cut during recovery after {after} flash commands"
                ));
            }
            let armed = dev.misdirect_armed();
            match self
                .variant
                .open(dev, self.slot_bytes, self.cfg.broken_recovery)
            {
                Ok(s) => {
                    self.subject = Some(s);
                    self.judge_unasked();
                    break;
                }
                Err((Fail::PowerLoss, Some(mut d))) if attempt < 10 => {
                    self.log("power lost during recovery".into());
                    self.note_cut(&mut d);
                    // A program of the interrupted recovery's own may have gone astray.
                    if let Some(m) = d.take_misdirected() {
                        self.relax_misdirected_unasked(&m, &d);
                    }
                    dev = d;
                }
                Err((f, d))
                    if {
                        // A misdirected program may have struck recovery's own writes: with
                        // the store gone, what it destroyed cannot be told.
                        if armed {
                            self.relax(RelaxedAll::StoreGone);
                        }
                        self.unasked_unjudged();
                        self.any_relaxed()
                    } && matches!(
                        f,
                        Fail::Corrupt { .. } | Fail::Device(_) | Fail::Missing(_)
                    ) =>
                {
                    // A refusal that names a unit must name one a fault struck (issue 15
                    // item 1): any other is a recovery bug reporting itself as damage. One
                    // that names none is believed only after damage to what no one slot owns.
                    let named = match (&f, &d) {
                        (Fail::Corrupt { unit: Some(u), .. }, Some(d)) => {
                            Some((*u, unit_struck(d, *u), unit_first_page(d, *u)))
                        }
                        _ => None,
                    };
                    match named {
                        Some((u, false, page)) => {
                            return Err(Stop::Violation(format!(
                                "recovery refused the image naming unit {u} (page {page}), which no fault struck: {f}"
                            )))
                        }
                        // Naming no unit is the stack's word that it cannot tell which:
                        // believable only after damage whose cover the harness could not tell
                        // either (metadata, or a page no stack was there to ask about).
                        None if !self.degraded => {
                            return Err(Stop::Violation(format!(
                                "recovery refused the image naming no unit, though every fault \
                                 that struck was scoped to a slot: {f}"
                            )))
                        }
                        _ => {}
                    }
                    self.report.errors_tolerated += 1;
                    self.report.ended_naming = Some(named.is_some());
                    return Err(Stop::Ended(format!(
                        "recovery refused the image a destructive fault damaged: {f}"
                    )));
                }
                Err((f, _)) => return Err(Stop::Violation(format!("recovery failed: {f}"))),
            }
        }
        // A cut armed for recovery that did not strike is disarmed.
        self.dev().restore_power();
        // Recovery's own programs may have gone astray.
        self.judge_misdirected();
        self.report.recoveries += 1;
        self.log(format!(
            "{} and recovered",
            if clean { "clean shutdown" } else { "crash" }
        ));
        self.check_recovered(clean)
    }

    /// A slot the stack need not bring back after this crash ([`Contract::Synced`]): it must
    /// read without an error the stack does not own up to, whatever it holds; then it is
    /// removed, so that the oracle knows it again.
    fn forget_unsynced(&mut self, slot: u32) -> Result<(), Stop> {
        let mut buf = vec![0u8; self.slot_bytes as usize];
        match self.read_back(slot, &mut buf) {
            Ok(_) => {}
            Err(f @ (Fail::Corrupt { .. } | Fail::Device(_) | Fail::Missing(_))) => {
                self.report.errors_tolerated += 1;
                self.log(format!(
                    "unsynced slot {slot} unreadable after the crash, as allowed: {f}"
                ));
            }
            Err(f) => {
                return Err(Stop::Violation(format!(
                    "reading unsynced slot {slot} after recovery: {f}"
                )))
            }
        }
        self.report.slot_checks_unsynced += 1;
        self.oracle.forget(slot);
        let r = self.subject().discard(slot);
        self.after(r, "remove an unsynced slot")
    }

    /// Reads a slot back after recovery: `None` if the object is gone, else the bytes read
    /// (into `buf`), its length attribute (on block ranges, the bytes read) and its tracked
    /// attributes (none on block ranges).
    #[allow(clippy::type_complexity)]
    fn read_back(
        &mut self,
        slot: u32,
        buf: &mut [u8],
    ) -> Result<Option<(usize, u64, Vec<Option<Vec<u8>>>)>, Fail> {
        if !self.objects {
            if !self.subject().exists(slot)? {
                return Ok(None);
            }
            let n = self.subject().read(slot, 0, buf)?;
            return Ok(Some((n, n as u64, Vec::new())));
        }
        let Some(len) = self.subject().length(slot)? else {
            return Ok(None);
        };
        let n = self.subject().read(slot, 0, buf)?;
        if !self.attributes {
            return Ok(Some((n, len, vec![None; ATTRS])));
        }
        let Some(attrs) = self.subject().attrs(slot)? else {
            return Err(Fail::Missing(format!(
                "slot {slot}: the object vanished between two reads"
            )));
        };
        Ok(Some((n, len, attrs)))
    }

    fn check_recovered(&mut self, clean: bool) -> Result<(), Stop> {
        // Slots the stack need not bring back: changed since the last flush, on a stack that
        // promises only what was flushed (blockfs).
        let synced_only = !clean && self.contract == Contract::Synced;
        let unsynced = if synced_only {
            self.changed_at_crash
        } else {
            0
        };
        match self.subject().fsck() {
            Ok(p) if p.is_empty() => {}
            Ok(p)
                if self.contract == Contract::Synced
                    && unsynced == 0
                    && !(synced_only && self.partition_changed_at_crash)
                    && self.any_relaxed() =>
            {
                // Damage the file system found: it mounted read-only, and has no repair.
                self.report.errors_tolerated += 1;
                return Err(Stop::Ended(format!(
                    "the file system mounted read-only on damage a fault left: {}",
                    p[0]
                )));
            }
            Ok(p) if unsynced != 0 || (synced_only && self.partition_changed_at_crash) => {
                // The documented end of such a crash: an inconsistent image, mounted
                // read-only, with no repair (docs/BLOCKFS.md). Nothing more can be written.
                self.report.ended_by_contract = true;
                return Err(Stop::Ended(format!(
                    "the image needs a repair the stack does not make, after a crash with {} slot(s){} changed since the last flush: {}",
                    unsynced.count_ones(),
                    if self.partition_changed_at_crash { " and the directory" } else { "" },
                    p[0]
                )));
            }
            Ok(p) if self.any_relaxed() => {
                self.report.errors_tolerated += 1;
                self.log(format!("fsck found damage, as allowed: {}", p.join("; ")));
            }
            Ok(p) => return Err(Stop::Violation(format!("fsck: {}", p.join("; ")))),
            Err(f)
                if self.any_relaxed()
                    && matches!(f, Fail::Corrupt { .. } | Fail::Device(_) | Fail::Missing(_)) =>
            {
                self.report.errors_tolerated += 1;
                self.log(format!("fsck failed, as allowed: {f}"));
            }
            Err(f) => return Err(Stop::Violation(format!("fsck: {f}"))),
        }
        let when = if clean {
            "after a clean shutdown"
        } else {
            "after recovery"
        };
        let mut buf = vec![0u8; self.slot_bytes as usize];
        let mut unchecked = false;
        let mut removed = false;
        for slot in 0..SLOTS {
            // Under the synced-only contract a slot relaxed by damage is unconstrained too (no
            // checksums of the file system's own metadata): read, then removed.
            let unconstrained = unsynced & (1 << slot) != 0
                || (self.contract == Contract::Synced && self.slot_relaxed(slot));
            if unconstrained {
                removed = true;
                self.forget_unsynced(slot)?;
                continue;
            }
            let got = match self.read_back(slot, &mut buf) {
                Ok(g) => g,
                Err(f @ (Fail::Corrupt { .. } | Fail::Device(_) | Fail::Missing(_)))
                    if self.slot_relaxed(slot) =>
                {
                    self.report.errors_tolerated += 1;
                    self.oracle.recovered_unknown(slot);
                    self.log(format!("check read of slot {slot} failed as allowed: {f}"));
                    continue;
                }
                Err(Fail::NoSpace) => {
                    // An access-time update found no room: this slot goes unchecked this time.
                    self.no_space("an access time on a check read", true)?;
                    unchecked = true;
                    continue;
                }
                Err(f) => {
                    return Err(Stop::Violation(format!(
                        "reading slot {slot} after recovery: {f}"
                    )))
                }
            };
            self.report.reads_checked += 1;
            if let Some((n, len, _)) = &got {
                if self.objects && *len != *n as u64 {
                    // Longer than the slot is longer than any write made it.
                    let m = if *len > self.slot_bytes {
                        Mismatch::RecoveredLength {
                            slot,
                            len: *len,
                            allowed: vec![],
                        }
                    } else {
                        Mismatch::LengthDisagrees {
                            slot,
                            len: *len,
                            read: *n,
                        }
                    };
                    return Err(Stop::Violation(format!("{when}: {m}")));
                }
            }
            let degraded = self.slot_relaxed(slot);
            if degraded {
                self.report.slot_checks_relaxed += 1;
            } else {
                self.report.slot_checks_strict += 1;
            }
            self.oracle
                .check_recovered(slot, got.as_ref().map(|g| (&buf[..], g.0)), clean, degraded)
                .map_err(|e| Stop::Violation(format!("{when}: {e}")))?;
            if self.objects {
                self.oracle
                    .check_recovered_attrs(slot, got.as_ref().map(|g| &g.2[..]), clean, degraded)
                    .map_err(|e| Stop::Violation(format!("{when}: {e}")))?;
            }
            if degraded {
                self.maybe_end_relaxation(slot);
            }
        }
        if self.objects && !unchecked {
            let partitions = self.partitions;
            let listed = self.subject().list().and_then(|l| {
                let p = if partitions {
                    self.subject().partition()?
                } else {
                    self.oracle.partition()
                };
                Ok((l, p))
            });
            match listed {
                Ok((l, p)) => {
                    self.oracle
                        .check_list(&l)
                        .map_err(|e| Stop::Violation(format!("{when}: {e}")))?;
                    self.oracle
                        .check_partition(p, Some((clean, self.degraded)))
                        .map_err(|e| Stop::Violation(format!("{when}: {e}")))?;
                }
                Err(f @ (Fail::Corrupt { .. } | Fail::Device(_) | Fail::Missing(_)))
                    if self.any_relaxed() =>
                {
                    self.report.errors_tolerated += 1;
                    self.log(format!("listing after recovery failed as allowed: {f}"));
                }
                Err(Fail::NoSpace) => self.no_space("listing", true)?,
                Err(f) => return Err(Stop::Violation(format!("listing {when}: {f}"))),
            }
        }
        if !clean {
            self.report.crash_recoveries += 1;
            self.report.strict_crash_recoveries += !self.any_relaxed() as u64;
        }
        if removed {
            // The slots removed above: durably, before the workload goes on.
            match self.subject().flush() {
                Ok(()) => self.oracle.flush(),
                Err(f) => return self.failed(f, "flush after removing unsynced slots"),
            }
        }
        Ok(())
    }
}
