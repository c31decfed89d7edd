//! The device-side scheduler: one controller that orders host requests and GC steps onto the
//! dies, with priorities end to end (seed 000 IV-C, V-F, VI-E; seed 004 3.2, 3.4, 3.6).
//!
//! # Model
//! Requests arrive open-loop (each has an arrival time) into per-priority FIFOs. A controller
//! with its own clock makes one decision at a time:
//!
//! - **GC as a preemptible sequence of steps** (seed 000 V-F). A step copies one valid unit or
//!   erases one victim ([`Stack::background`] with a one-nanosecond window). The controller
//!   issues the next step once the dies it uses ([`Stack::gc_dies`]) are free, so steps on
//!   distinct dies overlap and each die has at most one step under way. With
//!   [`GcPreemption::Step`] a prioritized request is issued before the next step and waits at
//!   most for the step under way on its die; normal requests wait for the collection to
//!   finish. With [`GcPreemption::Collection`] (a device that cannot
//!   preempt its cleaner) every request waits for the whole collection. A prioritized writer
//!   that always has a request queued would otherwise starve GC until the FML, at its floor,
//!   collects a whole victim inside one of its writes; so each write unit a prioritized write
//!   programs while GC wants to run owes GC one step, and owed steps go first. A prioritized
//!   write then waits for at most as many steps as it programs units (seed 000 VI-E's
//!   prioritized write); reads owe nothing, so a prioritized read still waits for at most the
//!   step under way.
//! - **When cleaning runs** (seed 004 3.6). Cleaning starts when free blocks fall below
//!   `low_free_percent` of all blocks. With [`Cleaning::Aware`], while priority requests are
//!   outstanding (queued or in flight) it is postponed until free blocks fall below
//!   `critical_free_percent`; [`Cleaning::Agnostic`] ignores priorities. A collection once
//!   begun runs to its erase (or is preempted step by step, as above).
//! - **Die scheduling** (seed 004 3.2). The controller issues a request only once every die it
//!   needs has finished the work issued to it (one operation per die in flight), so a request
//!   behind a busy die holds up the controller. [`DieScheduler::Fcfs`] takes the oldest request
//!   of the highest priority class; [`DieScheduler::Swtf`] (shortest wait time first) takes the
//!   one, among the first `queue_depth` of that class, whose dies are free soonest. Priority
//!   classes always come first.
//! - **Stripe-aligned write merging** (seed 004 3.4). With [`StripeMerge::Aligned`], a write is
//!   issued together with the queued writes of its class that extend it contiguously within
//!   the stripes (write units, the FTL's logical pages) it touches: one program, or one
//!   read-modify-write, for all of them. [`StripeMerge::Unaligned`] issues writes as they come.
//!
//! Requests never change order within the device's reservation model: the controller issues
//! in time order, and the NAND model serves each die and bus in issue order.

use std::cmp::Reverse;
use std::collections::{BTreeMap, BinaryHeap, VecDeque};

use flash::{DieId, Nanos};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use serde::{Deserialize, Serialize};

use crate::engine::{EngineError, Verifier};
use crate::files::FileStats;
use crate::request::{Op, Request};
use crate::stack::{GcState, Stack};

/// Which queued request the controller issues next (seed 004 3.2).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum DieScheduler {
    /// First come, first served.
    Fcfs,
    /// Shortest wait time first: the request whose dies are free soonest.
    Swtf,
}

/// Whether cleaning looks at outstanding priority requests (seed 004 3.6).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Cleaning {
    /// Postponed to the critical threshold while priority requests are outstanding.
    Aware,
    /// Starts at the low threshold whatever is outstanding.
    Agnostic,
}

/// Whether a prioritized request may run between two GC steps (seed 000 V-F).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum GcPreemption {
    /// Prioritized requests run between steps; they wait for at most one step.
    Step,
    /// Nothing runs until the collection under way has erased its victim.
    Collection,
    /// Any request may run between two steps (prioritized ones first; a step goes before a
    /// normal request whenever its dies are free), until free blocks fall below the critical
    /// threshold; then as [`GcPreemption::Step`]. Cleaning as background work of a device that
    /// shares its dies between the cleaner and the host.
    Interleave,
}

/// Whether writes are merged and aligned to the stripe (seed 004 3.4).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum StripeMerge {
    Aligned,
    Unaligned,
}

/// Settings of the device-side scheduler, with the papers' defaults.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct PrioConfig {
    /// Default FCFS.
    pub scheduler: DieScheduler,
    /// Default priority-aware.
    pub cleaning: Cleaning,
    /// Cleaning starts below this share of free blocks, in percent (default 5, seed 004 3.6).
    pub low_free_percent: f64,
    /// With priority requests outstanding, priority-aware cleaning waits until free blocks fall
    /// below this share, in percent (default 2, seed 004 3.6).
    pub critical_free_percent: f64,
    /// Default step (seed 000 V-F).
    pub gc_preemption: GcPreemption,
    /// Default unaligned (writes issued as they come).
    pub stripe_merge: StripeMerge,
    /// Requests of one class SWTF looks at, oldest first (default 32, a SATA NCQ's depth).
    pub queue_depth: u32,
    /// Whether the device sees the host's priorities (default true). False is a device behind
    /// an interface that does not carry them: every request is served as priority 0 (its
    /// latency is still reported under its own class).
    pub honor_priorities: bool,
}

impl Default for PrioConfig {
    fn default() -> Self {
        PrioConfig {
            scheduler: DieScheduler::Fcfs,
            cleaning: Cleaning::Aware,
            low_free_percent: 5.0,
            critical_free_percent: 2.0,
            gc_preemption: GcPreemption::Step,
            stripe_merge: StripeMerge::Unaligned,
            queue_depth: 32,
            honor_priorities: true,
        }
    }
}

impl PrioConfig {
    pub fn validate(&self) -> Result<(), String> {
        let (c, l) = (self.critical_free_percent, self.low_free_percent);
        if !(c > 0.0 && c <= l && l < 100.0) {
            return Err(format!(
                "prio thresholds must satisfy 0 < critical_free_percent ({c}) <= low_free_percent ({l}) < 100"
            ));
        }
        if self.queue_depth == 0 {
            return Err("prio.queue_depth must be at least 1".into());
        }
        Ok(())
    }

    /// A threshold in blocks: the share of `blocks`, rounded up, at least 1.
    pub fn blocks_below(percent: f64, blocks: u32) -> u32 {
        ((percent / 100.0 * blocks as f64).ceil() as u32).max(1)
    }

    /// FML watermarks that leave the decision of when to clean to this scheduler: the FML
    /// collects inside a write only at 2 free blocks (its floor), and lets background steps run
    /// up to one block above the low threshold.
    pub fn fml_for(&self, mut fml: fml::FmlConfig, blocks: u32) -> fml::FmlConfig {
        let high = Self::blocks_below(self.low_free_percent, blocks) + 1;
        fml.low_watermark_blocks = 2;
        fml.high_watermark_busy_blocks = high.max(2);
        fml.high_watermark_idle_blocks = high.max(2);
        fml
    }
}

/// The open-loop synthetic workload of seed 004 (3.2, 3.4, 3.6): fixed-size requests with
/// uniformly distributed inter-arrival times, a share of writes, a share of priority
/// requests, and a probability that a request continues where the previous one ended.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Synthetic {
    /// Requests measured (default 100,000).
    pub requests: u64,
    /// Bytes per request (default 4096).
    pub request_bytes: u64,
    /// Share of writes, in percent (default 50).
    pub write_percent: f64,
    /// Share of priority requests, in percent (default 10, seed 004 3.6).
    pub priority_percent: f64,
    /// Inter-arrival times are uniform in `[0, interarrival_max_ns]` (default 0.1 ms).
    pub interarrival_max_ns: Nanos,
    /// Probability that a request starts where the previous one ended (default 0).
    pub sequential_probability: f64,
    /// Share of the logical capacity the workload touches, written before measuring (default
    /// 0.75; seed 004 does not give it).
    pub utilisation: f64,
}

impl Default for Synthetic {
    fn default() -> Self {
        Synthetic {
            requests: 100_000,
            request_bytes: 4096,
            write_percent: 50.0,
            priority_percent: 10.0,
            interarrival_max_ns: 100_000,
            sequential_probability: 0.0,
            utilisation: 0.75,
        }
    }
}

impl Synthetic {
    pub fn validate(&self) -> Result<(), String> {
        if self.request_bytes == 0 || !self.request_bytes.is_multiple_of(512) {
            return Err(format!(
                "request_bytes = {} must be a positive multiple of 512",
                self.request_bytes
            ));
        }
        for (name, v) in [
            ("write_percent", self.write_percent),
            ("priority_percent", self.priority_percent),
        ] {
            if !(0.0..=100.0).contains(&v) {
                return Err(format!("{name} = {v} must lie in 0..=100"));
            }
        }
        if !(0.0..=1.0).contains(&self.sequential_probability) {
            return Err(format!(
                "sequential_probability = {} must lie in 0..=1",
                self.sequential_probability
            ));
        }
        if !(self.utilisation > 0.0 && self.utilisation <= 1.0) {
            return Err(format!(
                "utilisation = {} must lie in (0, 1]",
                self.utilisation
            ));
        }
        Ok(())
    }

    /// The requests over a footprint of `footprint_bytes` from `start_ns`, drawn from `seed`.
    pub fn requests(
        &self,
        footprint_bytes: u64,
        start_ns: Nanos,
        seed: u64,
    ) -> impl Iterator<Item = Request> + '_ {
        let mut rng = ChaCha8Rng::seed_from_u64(seed);
        let slots = (footprint_bytes / self.request_bytes).max(1);
        let mut t = start_ns;
        let mut next_offset = 0u64;
        (0..self.requests).map(move |_| {
            t += rng.gen_range(0..=self.interarrival_max_ns);
            let op = if rng.gen_bool(self.write_percent / 100.0) {
                Op::Write
            } else {
                Op::Read
            };
            let priority = rng.gen_bool(self.priority_percent / 100.0) as u8;
            let offset = if rng.gen_bool(self.sequential_probability) {
                next_offset
            } else {
                rng.gen_range(0..slots) * self.request_bytes
            };
            next_offset = (offset + self.request_bytes) % (slots * self.request_bytes);
            Request {
                op,
                offset_bytes: offset,
                len_bytes: self.request_bytes,
                priority,
                arrival_ns: Some(t),
            }
        })
    }
}

/// Seed 000 VI-E's prioritized read: a video played at a fixed frame rate (one read of
/// `frame_bytes` per frame, sequentially through the video) while a background writer runs.
/// The video occupies the start of the footprint, the writer the rest; a frame is shown on
/// time when its read completes within one frame period.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Video {
    /// Default 30 (seed 000 VI-E).
    pub frames_per_second: u32,
    /// Length of the video (default 200 s, seed 000 VI-E); `--scale` shortens it.
    pub seconds: u64,
    /// Bytes read per frame (default 64 KiB, about a 15 Mbit/s stream; the paper does not
    /// give its video's bit rate).
    pub frame_bytes: u64,
    /// The video's priority (default 1).
    pub priority: u8,
    /// The background writer; its requests arrive for as long as the video plays (its
    /// `requests` count is not used) and its priority share is ignored (all normal).
    pub background: Synthetic,
}

impl Default for Video {
    fn default() -> Self {
        Video {
            frames_per_second: 30,
            seconds: 200,
            frame_bytes: 64 << 10,
            priority: 1,
            background: Synthetic {
                write_percent: 100.0,
                priority_percent: 0.0,
                ..Synthetic::default()
            },
        }
    }
}

/// Seed 000 VI-E's prioritized write: files written one after another with priority (each as
/// a burst of requests, the next file once the last request of the previous one completes)
/// while the background writer runs. A file is one transaction; its write latency is from its
/// first request's issue by the host to its last request's completion.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct FileWrites {
    /// Files written (default 1,000, seed 000 VI-E); `--scale` shrinks it.
    pub files: u64,
    /// Bytes per file (default 2 MiB, seed 000 VI-E).
    pub file_bytes: u64,
    /// Bytes per request (default 128 KiB: 256 sectors, OAQ's and RawSSD's largest request).
    pub request_bytes: u64,
    /// Places the files take in turn at the start of the footprint, a later file overwriting
    /// an earlier one as a camcorder's ring does (default 128: 256 MiB, so that the files and
    /// the background writer fit side by side on the 4 GiB preset).
    pub file_slots: u64,
    /// The files' priority (default 1).
    pub priority: u8,
    /// The background writer, as [`Video::background`]; it runs until the last file is done.
    pub background: Synthetic,
}

impl Default for FileWrites {
    fn default() -> Self {
        FileWrites {
            files: 1000,
            file_bytes: 2 << 20,
            request_bytes: 128 << 10,
            file_slots: 128,
            priority: 1,
            background: Video::default().background,
        }
    }
}

/// The prioritized writer of a [`FileWrites`] run, inside the controller: it releases a file's
/// requests when the previous file completes and accounts for each file as a whole.
pub(crate) struct Chain {
    files: u64,
    next_file: u64,
    file_bytes: u64,
    request_bytes: u64,
    slots: u64,
    priority: u8,
    /// Requests of the current file not yet completed; when it started; its last completion.
    outstanding: u64,
    file_start: Nanos,
    file_done: Nanos,
    released: VecDeque<Request>,
}

impl Chain {
    fn new(w: &FileWrites, start: Nanos) -> Chain {
        let mut c = Chain {
            files: w.files,
            next_file: 0,
            file_bytes: w.file_bytes,
            request_bytes: w.request_bytes,
            slots: w.file_slots,
            priority: w.priority,
            outstanding: 0,
            file_start: start,
            file_done: start,
            released: VecDeque::new(),
        };
        c.release(start);
        c
    }

    fn release(&mut self, at: Nanos) {
        if self.next_file == self.files {
            return;
        }
        let base = self.next_file % self.slots * self.file_bytes;
        let n = self.file_bytes.div_ceil(self.request_bytes);
        self.released.extend((0..n).map(|i| {
            let off = i * self.request_bytes;
            Request {
                priority: self.priority,
                arrival_ns: Some(at),
                ..Request::new(
                    Op::Write,
                    base + off,
                    self.request_bytes.min(self.file_bytes - off),
                )
            }
        }));
        self.outstanding = n;
        self.file_start = at;
        self.file_done = at;
        self.next_file += 1;
    }

    /// One of the current file's requests completed at `done`; the file is accounted for in
    /// `stats` and the next one released when it was the last.
    fn completed(&mut self, done: Nanos, stats: &mut FileStats) {
        self.file_done = self.file_done.max(done);
        self.outstanding -= 1;
        if self.outstanding > 0 {
            return;
        }
        account_file(stats, self.file_bytes, self.file_start, self.file_done);
        self.release(self.file_done);
    }

    fn finished(&self) -> bool {
        self.next_file == self.files && self.outstanding == 0
    }
}

/// What [`run_variant`] runs.
pub enum Plan<'a> {
    Synthetic(&'a Synthetic),
    Video(&'a Video),
    FileWrites(&'a FileWrites),
}

/// What a scheduled run measured: the priority requests (foreground, seed 004 Fig. 3) and the
/// others (background), with scheduler counters.
pub struct PrioOutcome {
    pub foreground: FileStats,
    pub background: FileStats,
    pub gc_steps: u64,
    /// Host writes issued as part of a merged stripe write, beyond the first of each.
    pub merged_writes: u64,
    /// Longest the request queues grew.
    pub max_queued: usize,
    pub end_ns: Nanos,
}

struct Waiting {
    req: Request,
    arrival: Nanos,
    /// Reported as foreground (the host's priority, whether the device sees it or not).
    foreground: bool,
    /// Part of a file of the prioritized writer (accounted for per file).
    chained: bool,
    /// Handed over by a [`Host`], which accounts for it under this tag.
    tag: Option<u64>,
}

/// Unmeasured set-up of every prioritized run: writes the first `footprint` bytes once (queue
/// depth 8), then ages the device until free blocks fall to the cleaning threshold
/// (`low_free_percent`). Returns when the aging ends.
pub(crate) fn fill_and_age(
    stack: &mut dyn Stack,
    footprint: u64,
    low_free_percent: f64,
    seed: u64,
    verifier: &mut Verifier,
) -> Result<Nanos, String> {
    let unit = stack.unit_bytes();
    let fill = crate::engine::run_closed(
        stack,
        &mut crate::workload::prefill(footprint, unit),
        crate::engine::Load::SET_UP,
        0,
        seed ^ 0xF111,
        Some(&mut *verifier),
        &mut |_| {},
    )
    .map_err(|e| format!("prefill: {e}"))?;
    let low = PrioConfig::blocks_below(low_free_percent, stack.gc_state().blocks);
    age(
        stack,
        footprint,
        low,
        fill.end_ns,
        seed ^ 0xA6E,
        Some(verifier),
    )
    .map_err(|e| format!("aging: {e}"))
}

/// Queues an arrived request in its priority class (class 0 when priorities are not honored;
/// it is still reported as foreground by the priority it came with).
fn enqueue(
    queues: &mut BTreeMap<u8, VecDeque<Waiting>>,
    cfg: &PrioConfig,
    mut r: Request,
    start_ns: Nanos,
    chained: bool,
    tag: Option<u64>,
) {
    let arrival = r.arrival_ns.unwrap_or(0).max(start_ns);
    let foreground = r.priority > 0;
    if !cfg.honor_priorities {
        r.priority = 0;
    }
    queues.entry(r.priority).or_default().push_back(Waiting {
        req: r,
        arrival,
        foreground,
        chained,
        tag,
    });
}

/// A host-side source of requests with a queue of its own in front of the device (OFS through
/// OAQ, [`crate::ofsprio`]). It hands the controller a request only while the device's queue
/// for that request's class has room, so what waits beyond that waits, and is ordered and
/// merged, on the host; and it accounts for the requests it handed over itself (a merged
/// request completes several host requests, each with its own arrival).
pub trait Host {
    /// The next request the host hands the device at `t`: one that has arrived by then, if
    /// the device's queue of its class has room. `queued(priority)` is how many requests the
    /// device's queue for that priority holds. The tag names it in [`Host::completed`].
    fn take(
        &mut self,
        t: Nanos,
        queued: &dyn Fn(u8) -> usize,
    ) -> Result<Option<(Request, u64)>, String>;
    /// When the next request arrives at the host, if one will (arrivals are not before the
    /// last `take`'s time).
    fn next_arrival(&self) -> Option<Nanos>;
    /// The request tagged `tag` completed at `done`.
    fn completed(
        &mut self,
        tag: u64,
        done: Nanos,
        foreground: &mut FileStats,
        background: &mut FileStats,
    ) -> Result<(), String>;
    /// Whether the measured run is over (the host's remaining arrivals, an endless background
    /// writer's, are not measured).
    fn finished(&self) -> bool {
        false
    }
}

/// Accounts for one file of a prioritized writer in `stats`, started at `start` and written by
/// `done`: one transaction, one write, one latency.
pub(crate) fn account_file(stats: &mut FileStats, bytes: u64, start: Nanos, done: Nanos) {
    stats.transactions += 1;
    stats.account_transaction(done);
    stats.writes += 1;
    stats.creates += 1;
    stats.write_bytes += bytes;
    stats.write_latency.saturating_record((done - start).max(1));
    stats.account_second(done, bytes, 0);
    stats.end_ns = stats.end_ns.max(done);
}

/// Accounts for one completed host request in `stats`: its latency from `arrival`, its bytes
/// in the second it completed, and a transaction when `on_time`.
pub(crate) fn account(
    stats: &mut FileStats,
    op: Op,
    len_bytes: u64,
    arrival: Nanos,
    done: Nanos,
    on_time: bool,
) {
    let latency = (done - arrival).max(1);
    if on_time {
        stats.transactions += 1;
        stats.account_transaction(done);
    }
    match op {
        Op::Read => {
            stats.reads += 1;
            stats.read_bytes += len_bytes;
            stats.read_latency.saturating_record(latency);
            stats.account_second(done, 0, len_bytes);
        }
        Op::Write => {
            stats.writes += 1;
            stats.write_bytes += len_bytes;
            stats.write_latency.saturating_record(latency);
            stats.account_second(done, len_bytes, 0);
        }
        Op::Trim | Op::Flush => {}
    }
    stats.end_ns = stats.end_ns.max(done);
}

/// Runs `requests` (each with its arrival time, in arrival order) through the controller. A
/// foreground request counts as a transaction when it completes within `deadline_ns` of its
/// arrival (a frame shown on time, seed 000 VI-E), or always without a deadline; background
/// requests always count.
pub fn run(
    stack: &mut dyn Stack,
    cfg: &PrioConfig,
    requests: &mut dyn Iterator<Item = Request>,
    start_ns: Nanos,
    seed: u64,
    verify: Option<&mut Verifier>,
    deadline_ns: Option<Nanos>,
) -> Result<PrioOutcome, EngineError> {
    run_with(
        stack,
        cfg,
        requests,
        start_ns,
        seed,
        verify,
        deadline_ns,
        None,
        None,
    )
}

/// As [`run`], with the prioritized file writer of a [`FileWrites`] run, whose files are the
/// foreground; the run ends when its last file is done (`requests` may be endless); and with
/// a [`Host`] whose requests join those of `requests`.
#[allow(clippy::too_many_arguments)]
pub(crate) fn run_with(
    stack: &mut dyn Stack,
    cfg: &PrioConfig,
    requests: &mut dyn Iterator<Item = Request>,
    start_ns: Nanos,
    seed: u64,
    mut verify: Option<&mut Verifier>,
    deadline_ns: Option<Nanos>,
    mut chain: Option<&mut Chain>,
    mut host: Option<&mut dyn Host>,
) -> Result<PrioOutcome, EngineError> {
    cfg.validate().map_err(EngineError::Source)?;
    let mut out = PrioOutcome {
        foreground: FileStats::new(start_ns),
        background: FileStats::new(start_ns),
        gc_steps: 0,
        merged_writes: 0,
        max_queued: 0,
        end_ns: start_ns,
    };
    let unit = stack.unit_bytes();
    let mut queues: BTreeMap<u8, VecDeque<Waiting>> = BTreeMap::new();
    let mut queued = 0usize;
    let mut incoming = requests.peekable();
    let mut t = start_ns;
    let mut gc_last = start_ns;
    // No GC step is tried before this time (see below).
    let mut gc_hold = start_ns;
    // GC found nothing to do at the last try; retried once a write has invalidated something.
    let mut gc_stalled = false;
    // GC steps owed to prioritized writes: one per write unit they programmed while GC wanted
    // to run (see the module doc).
    let mut gc_debt = 0u64;
    let mut inflight_priority: BinaryHeap<Reverse<Nanos>> = BinaryHeap::new();
    let mut index = 0u64;
    let mut dies: Vec<DieId> = Vec::new();
    let mut fps = Vec::new();
    loop {
        if chain.as_ref().is_some_and(|c| c.finished())
            || host.as_deref().is_some_and(|h| h.finished())
        {
            break;
        }
        loop {
            let chained = match chain.as_mut().and_then(|c| c.released.front()) {
                Some(r) if r.arrival_ns.unwrap_or(0) <= t => true,
                _ if incoming
                    .peek()
                    .is_some_and(|r| r.arrival_ns.unwrap_or(0) <= t) =>
                {
                    false
                }
                _ => break,
            };
            let r = if chained {
                let c = chain.as_mut().expect("a chained request");
                c.released.pop_front().expect("peeked")
            } else {
                incoming.next().expect("peeked")
            };
            enqueue(&mut queues, cfg, r, start_ns, chained, None);
            queued += 1;
        }
        if let Some(h) = host.as_deref_mut() {
            loop {
                let honor = cfg.honor_priorities;
                let room = |p: u8| {
                    let class = if honor { p } else { 0 };
                    queues.get(&class).map_or(0, VecDeque::len)
                };
                let Some((r, tag)) = h.take(t, &room).map_err(EngineError::Source)? else {
                    break;
                };
                enqueue(&mut queues, cfg, r, start_ns, false, Some(tag));
                queued += 1;
            }
        }
        out.max_queued = out.max_queued.max(queued);
        while inflight_priority.peek().is_some_and(|Reverse(d)| *d <= t) {
            inflight_priority.pop();
        }
        let next_arrival = [
            incoming.peek().map(|r| r.arrival_ns.unwrap_or(0)),
            chain
                .as_ref()
                .and_then(|c| c.released.front())
                .map(|r| r.arrival_ns.unwrap_or(0)),
            host.as_deref().and_then(|h| h.next_arrival()),
        ]
        .into_iter()
        .flatten()
        .min();
        if queued == 0 && next_arrival.is_none() {
            break;
        }
        let st: GcState = stack.gc_state();
        let priority_queued = queues.iter().any(|(p, q)| *p > 0 && !q.is_empty());
        let priority_outstanding = priority_queued || !inflight_priority.is_empty();
        let percent = match cfg.cleaning {
            Cleaning::Aware if priority_outstanding => cfg.critical_free_percent,
            _ => cfg.low_free_percent,
        };
        let want_gc = !gc_stalled
            && (st.collecting || st.free_blocks < PrioConfig::blocks_below(percent, st.blocks));
        let preempt = cfg.gc_preemption != GcPreemption::Collection;
        // Interleaved cleaning lets normal requests between steps too, until free space is
        // critical.
        let urgent =
            st.free_blocks < PrioConfig::blocks_below(cfg.critical_free_percent, st.blocks);
        let normal_may_go = cfg.gc_preemption == GcPreemption::Interleave && !urgent;
        // The next GC step is issued once the dies it uses are free, like any operation, so
        // steps on distinct dies overlap and each die has at most one step under way.
        let gc_at = want_gc.then(|| {
            dies.clear();
            stack.gc_dies(&mut dies);
            dies.iter()
                .map(|&d| stack.die_free_ns(d))
                .max()
                .unwrap_or(0)
                .max(t)
                .max(gc_hold)
        });
        // A prioritized request goes before the next step (seed 000 V-F: it is served between
        // two successive steps).
        if !want_gc {
            gc_debt = 0;
        }
        let owed = preempt && want_gc && gc_debt > 0;
        if gc_at.is_some_and(|g| g <= t) && (!(preempt && priority_queued) || owed) {
            let before = stack.counters();
            let done = stack
                .background(t, t + 1)
                .map_err(EngineError::Background)?;
            let progressed = stack.gc_state() != st || stack.counters() != before;
            if progressed {
                out.gc_steps += 1;
                gc_debt = gc_debt.saturating_sub(1);
                gc_last = gc_last.max(done);
            } else if done > t {
                // The stack's own clock is ahead (the object store advances it to each of its
                // operations' completion): no step can start before it.
                gc_hold = done;
            } else {
                gc_stalled = true;
            }
            continue;
        }
        // The class to serve: the highest non-empty one, and while a collection wants to run,
        // only prioritized classes (step preemption; any class with interleaving until free
        // space is critical) or none (collection).
        let class = if (want_gc && !preempt) || (owed && !gc_stalled) {
            None
        } else {
            queues
                .iter()
                .rev()
                .find(|(p, q)| !q.is_empty() && (!want_gc || **p > 0 || normal_may_go))
                .map(|(p, _)| *p)
        };
        let gc_event = gc_at.filter(|&g| g > t);
        let next_event = match (next_arrival, gc_event) {
            (Some(a), Some(g)) => Some(a.min(g)),
            (a, g) => a.or(g),
        };
        let Some(class) = class else {
            match next_event {
                Some(e) => {
                    t = e.max(t + 1);
                    continue;
                }
                None => {
                    return Err(EngineError::Source(format!(
                        "scheduler stalled at {t} ns with {queued} requests queued"
                    )))
                }
            }
        };
        // Pick within the class, and when its dies are free.
        let q = queues.get(&class).expect("class is non-empty");
        let mut ready_of = |req: &Request| {
            dies.clear();
            stack.dies_of(req, &mut dies);
            dies.iter()
                .map(|&d| stack.die_free_ns(d))
                .max()
                .unwrap_or(0)
                .max(t)
        };
        let (pick, ready) = match cfg.scheduler {
            DieScheduler::Fcfs => (0, ready_of(&q[0].req)),
            DieScheduler::Swtf => q
                .iter()
                .take(cfg.queue_depth as usize)
                .enumerate()
                .map(|(i, w)| (i, ready_of(&w.req)))
                .min_by_key(|&(i, r)| (r, i))
                .expect("class is non-empty"),
        };
        if let Some(e) = next_event {
            if ready > e {
                // Something arrives (or a GC step ends) before the chosen request could start:
                // decide again then.
                t = e;
                continue;
            }
        }
        t = ready;
        let q = queues.get_mut(&class).expect("class is non-empty");
        let first = q.remove(pick).expect("picked from the queue");
        let mut group = vec![first];
        let mut req = group[0].req;
        if req.op == Op::Write && cfg.stripe_merge == StripeMerge::Aligned {
            // Seed 004 3.4: merge the queued writes that extend this one contiguously within
            // its stripes, and issue them as one.
            let lo = req.offset_bytes / unit * unit;
            let hi = (req.offset_bytes + req.len_bytes).div_ceil(unit) * unit;
            loop {
                let end = req.offset_bytes + req.len_bytes;
                let found = q.iter().position(|w| {
                    w.req.op == Op::Write
                        && ((w.req.offset_bytes == end && end + w.req.len_bytes <= hi)
                            || (w.req.offset_bytes + w.req.len_bytes == req.offset_bytes
                                && w.req.offset_bytes >= lo))
                });
                let Some(i) = found else { break };
                let w = q.remove(i).expect("found in the queue");
                req.offset_bytes = req.offset_bytes.min(w.req.offset_bytes);
                req.len_bytes += w.req.len_bytes;
                out.merged_writes += 1;
                group.push(w);
            }
        }
        queued -= group.len();
        let token = crate::engine::request_token(seed, index);
        let fail = |msg: String| EngineError::request(index, &req, msg);
        let done = stack.submit(t, &req, token, &mut fps).map_err(fail)?;
        if let Some(v) = verify.as_deref_mut() {
            match req.op {
                Op::Read => v.read(&req, &fps).map_err(fail)?,
                Op::Write | Op::Trim => {
                    let s = &*stack;
                    v.wrote(&req, token, &|u, tk| s.expected_fingerprint(u, tk))
                }
                Op::Flush => {}
            }
        }
        index += 1;
        if req.op == Op::Write {
            gc_stalled = false;
        }
        if class > 0 && req.op == Op::Write && preempt && want_gc {
            gc_debt += (req.offset_bytes + req.len_bytes).div_ceil(unit) - req.offset_bytes / unit;
        }
        if class > 0 {
            inflight_priority.push(Reverse(done));
        }
        for w in group {
            if w.chained {
                let c = chain.as_mut().expect("a chained request has its chain");
                c.completed(done, &mut out.foreground);
                continue;
            }
            if let Some(tag) = w.tag {
                let h = host.as_deref_mut().expect("a tagged request has its host");
                h.completed(tag, done, &mut out.foreground, &mut out.background)
                    .map_err(EngineError::Source)?;
                continue;
            }
            let stats = if w.foreground {
                &mut out.foreground
            } else {
                &mut out.background
            };
            let latency = (done - w.arrival).max(1);
            let on_time = !w.foreground || deadline_ns.is_none_or(|d| latency <= d);
            account(stats, w.req.op, w.req.len_bytes, w.arrival, done, on_time);
        }
        out.end_ns = out.end_ns.max(done);
    }
    out.end_ns = out.end_ns.max(gc_last);
    Ok(out)
}

/// Builds a variant of a scheduled experiment on a fresh device: stack `ftl` or `dftl` (the
/// page-mapping FTL, write-through so every request reaches the dies the controller orders) or
/// `ossd` (the object store, the byte space cut into objects of `object_bytes`), with
/// `prio.*`, `ftl.*`, `osd.*` and `fml.*` settings. Explicit `fml.*` settings go on top of the
/// watermarks [`PrioConfig::fml_for`] derives.
pub fn build(
    v: &crate::experiment::Variant,
    device: flash::DeviceConfig,
) -> Result<(Box<dyn Stack>, PrioConfig), String> {
    use crate::files::stacks::apply;
    let at = |e: String| format!("variant {}: {e}", v.label);
    let blocks = flash::gang::Layout::new(&device).superblocks;
    let mut prio = PrioConfig::default();
    let mut ftl = ftl::FtlConfig {
        buffer_bytes: 0,
        ..ftl::FtlConfig::default()
    };
    let mut osd = osd::OsdConfig::default();
    // The object store cuts the byte space into objects of this size (default 8 MiB, RawSSD's
    // virtual erase block: seed 000 V-F dedicates an update block to objects this large).
    let mut object_bytes: u64 = 8 << 20;
    for (k, val) in &v.set {
        match k.split_once('.') {
            Some(("prio", f)) => apply(&mut prio, f, val).map_err(at)?,
            Some(("ftl", f)) => apply(&mut ftl, f, val).map_err(at)?,
            Some(("osd", f)) => apply(&mut osd, f, val).map_err(at)?,
            Some(("fml", _)) => {}
            None if k == "object_bytes" => {
                object_bytes = val
                    .parse()
                    .map_err(|e| at(format!("object_bytes = {val}: {e}")))?
            }
            _ => {
                return Err(at(format!(
                    "unknown setting '{k}' (prio.*, ftl.*, osd.*, fml.*, object_bytes)"
                )))
            }
        }
    }
    prio.validate().map_err(at)?;
    let mut fml = prio.fml_for(fml::FmlConfig::for_blocks(blocks), blocks);
    for (k, val) in &v.set {
        if let Some(("fml", f)) = k.split_once('.') {
            apply(&mut fml, f, val).map_err(at)?;
        }
    }
    let nand = flash::Nand::in_memory(device).map_err(|e| e.to_string())?;
    let resident = |n: &flash::Nand| n.resident_bytes();
    let mapping = match v.stack.as_str() {
        "ftl" => ftl::Mapping::Page,
        "dftl" => ftl::Mapping::Dftl,
        "ossd" => {
            let unit = device.write_unit_bytes() as u64;
            if object_bytes == 0 || !object_bytes.is_multiple_of(unit) {
                return Err(at(format!(
                    "object_bytes = {object_bytes} must be a positive multiple of the {unit}-byte write unit"
                )));
            }
            let store = osd::ObjectStore::format(nand, osd::OsdConfig { fml, ..osd })
                .map_err(|e| e.to_string())?;
            let stack =
                crate::stack::OsdStack::new(store, object_bytes, v.stack.clone(), resident)?;
            return Ok((Box::new(stack), prio));
        }
        s => return Err(at(format!("unknown stack '{s}' (ftl, dftl, ossd or ofs)"))),
    };
    let ftl = ftl::Ftl::open(
        nand,
        ftl::FtlConfig {
            mapping,
            fml,
            ..ftl
        },
    )
    .map_err(|e| e.to_string())?;
    let stack = crate::stack::FtlStack {
        ftl,
        name: v.stack.clone(),
        resident,
    };
    Ok((Box::new(stack), prio))
}

/// Brings a freshly filled device to steady state: random unit writes over the footprint, at
/// least one footprint's worth and until free blocks are down to the cleaning threshold, so
/// the measured run cleans from its start with victims as a long-running device has them
/// (seed 004's simulated SSD is measured full). At most three footprints are written.
pub(crate) fn age(
    stack: &mut dyn Stack,
    footprint: u64,
    threshold_blocks: u32,
    start_ns: Nanos,
    seed: u64,
    verify: Option<&mut Verifier>,
) -> Result<Nanos, EngineError> {
    let unit = stack.unit_bytes();
    let slots = (footprint / unit).max(1);
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let mut written = 0u64;
    let mut t = start_ns;
    let mut verify = verify;
    while (written < slots || stack.gc_state().free_blocks > threshold_blocks)
        && written < 3 * slots
    {
        let mut chunk =
            (0..1024).map(|_| Request::new(Op::Write, rng.gen_range(0..slots) * unit, unit));
        let phase = crate::engine::run_closed(
            stack,
            &mut chunk,
            crate::engine::Load::SET_UP,
            t,
            seed ^ written,
            verify.as_deref_mut(),
            &mut |_| {},
        )?;
        t = phase.end_ns;
        written += 1024;
    }
    // Aging lets free blocks run down to the FML's floor; clean back up to the threshold
    // (unmeasured), so the measured run starts where steady cleaning would hold it.
    let done = stack
        .background(t, Nanos::MAX / 4)
        .map_err(EngineError::Background)?;
    Ok(t.max(done))
}

/// What a scheduled experiment variant measured, as the file-level experiments report it:
/// phases `foreground` (priority requests), `background` (the others) and `all` (both, with
/// the stack's counters over the measured run).
pub struct VariantRun {
    pub phases: Vec<(&'static str, FileStats)>,
    pub erase_counts: (u32, u32, f64),
    pub fsck_problems: Vec<String>,
}

/// Runs a scheduled workload on a variant: fill the footprint, age the device to the cleaning
/// threshold, then the measured requests through the controller, reads verified.
pub fn run_variant(
    plan: Plan<'_>,
    v: &crate::experiment::Variant,
    device: flash::DeviceConfig,
    seed: u64,
) -> Result<VariantRun, String> {
    if v.stack == "ofs" {
        return crate::ofsprio::run_variant(plan, v, device, seed).map(|(run, _)| run);
    }
    let w = match plan {
        Plan::Synthetic(w) => w,
        Plan::Video(video) => &video.background,
        Plan::FileWrites(f) => &f.background,
    };
    w.validate()?;
    let (mut stack, cfg) = build(v, device)?;
    let unit = stack.unit_bytes();
    if !w.request_bytes.is_multiple_of(512) || w.request_bytes > unit * 64 {
        return Err(format!(
            "request_bytes = {} does not fit the device",
            w.request_bytes
        ));
    }
    let capacity = stack.capacity_bytes();
    let footprint = (capacity as f64 * w.utilisation) as u64 / unit * unit;
    let mut verifier = Verifier::new(capacity, unit);
    let t = fill_and_age(
        stack.as_mut(),
        footprint,
        cfg.low_free_percent,
        seed,
        &mut verifier,
    )?;
    let mut chain = None;
    // The background writer of a file-writes run arrives until its last file is done.
    let endless = Synthetic {
        requests: u64::MAX,
        priority_percent: 0.0,
        ..w.clone()
    };
    let (mut requests, deadline): (Box<dyn Iterator<Item = Request>>, _) = match plan {
        Plan::Synthetic(w) => {
            let span = footprint / w.request_bytes * w.request_bytes;
            (Box::new(w.requests(span, t, seed)), None)
        }
        Plan::Video(video) => {
            let (r, d) = video_requests(video, footprint, t, seed)?;
            (Box::new(r.into_iter()), d)
        }
        Plan::FileWrites(f) => {
            let (files, rest) = file_writes_region(f, footprint)?;
            chain = Some(Chain::new(f, t));
            let r = endless.requests(rest, t, seed).map(move |r| Request {
                offset_bytes: r.offset_bytes + files,
                ..r
            });
            (Box::new(r), None)
        }
    };
    let before = stack.counters();
    let out = run_with(
        stack.as_mut(),
        &cfg,
        &mut requests,
        t,
        seed,
        Some(&mut verifier),
        deadline,
        chain.as_mut(),
        None,
    )
    .map_err(|e| format!("measure: {e}"))?;
    finish(stack.as_mut(), out, before, t)
}

/// The phases of a measured run that started at `t`: its foreground, its background and both
/// with the stack's counters since `before`, and the stack's check.
pub(crate) fn finish(
    stack: &mut dyn Stack,
    out: PrioOutcome,
    before: crate::stack::Counters,
    t: Nanos,
) -> Result<VariantRun, String> {
    let counters = stack.counters() - before;
    let mut all = FileStats::new(t);
    for s in [&out.foreground, &out.background] {
        all.reads += s.reads;
        all.writes += s.writes;
        all.read_bytes += s.read_bytes;
        all.write_bytes += s.write_bytes;
        all.transactions += s.transactions;
        all.end_ns = all.end_ns.max(s.end_ns);
        all.read_latency
            .add(&s.read_latency)
            .map_err(|e| e.to_string())?;
        all.write_latency
            .add(&s.write_latency)
            .map_err(|e| e.to_string())?;
    }
    all.counters = counters;
    let fsck_problems = match stack.check() {
        Ok(()) => Vec::new(),
        Err(e) => vec![e],
    };
    Ok(VariantRun {
        phases: vec![
            ("foreground", out.foreground),
            ("background", out.background),
            ("all", all),
        ],
        erase_counts: stack.erase_counts(),
        fsck_problems,
    })
}

/// The bytes the files of a [`FileWrites`] run take at the start of the footprint, and the
/// bytes left to the background writer after them.
pub(crate) fn file_writes_region(f: &FileWrites, footprint: u64) -> Result<(u64, u64), String> {
    if f.files == 0 || f.file_slots == 0 || f.priority == 0 {
        return Err("file-writes: files, file_slots and priority must be at least 1".into());
    }
    for (name, v) in [
        ("file_bytes", f.file_bytes),
        ("request_bytes", f.request_bytes),
    ] {
        if v == 0 || !v.is_multiple_of(512) {
            return Err(format!(
                "file-writes: {name} = {v} must be a positive multiple of 512"
            ));
        }
    }
    if f.request_bytes > f.file_bytes {
        return Err(format!(
            "file-writes: request_bytes = {} exceeds file_bytes = {}",
            f.request_bytes, f.file_bytes
        ));
    }
    let files = f
        .file_slots
        .checked_mul(f.file_bytes)
        .ok_or("file-writes: file_slots x file_bytes overflows")?;
    let rest =
        footprint.saturating_sub(files) / f.background.request_bytes * f.background.request_bytes;
    if rest < footprint / 4 {
        return Err(format!(
            "file-writes: {files} bytes of file slots leave too little of the {footprint}-byte footprint to the background writer"
        ));
    }
    Ok((files, rest))
}

/// The requests of a [`Video`] run from `start`: frame reads at the frame rate through the
/// video (the start of the footprint), and background requests over the rest of the footprint
/// for as long as the video plays; with the frame period as the on-time deadline.
pub(crate) fn video_requests(
    video: &Video,
    footprint: u64,
    start: Nanos,
    seed: u64,
) -> Result<(Vec<Request>, Option<Nanos>), String> {
    if video.frames_per_second == 0 || video.frame_bytes == 0 || video.priority == 0 {
        return Err("video: frames_per_second, frame_bytes and priority must be at least 1".into());
    }
    if !video.frame_bytes.is_multiple_of(512) {
        return Err(format!(
            "video: frame_bytes = {} is not a multiple of 512",
            video.frame_bytes
        ));
    }
    let frames = video.seconds * video.frames_per_second as u64;
    let video_bytes = frames * video.frame_bytes;
    let rest = footprint.saturating_sub(video_bytes) / video.background.request_bytes
        * video.background.request_bytes;
    if video_bytes == 0 || rest < footprint / 4 {
        return Err(format!(
            "video: {video_bytes} bytes of video leave too little of the {footprint}-byte footprint to the background writer"
        ));
    }
    let period = 1_000_000_000 / video.frames_per_second as u64;
    let end = start + video.seconds * 1_000_000_000;
    let mut out: Vec<Request> = (0..frames)
        .map(|k| Request {
            priority: video.priority,
            arrival_ns: Some(start + k * period),
            ..Request::new(Op::Read, k * video.frame_bytes, video.frame_bytes)
        })
        .collect();
    let background = Synthetic {
        requests: u64::MAX,
        priority_percent: 0.0,
        ..video.background.clone()
    };
    out.extend(
        background
            .requests(rest, start, seed)
            .take_while(|r| r.arrival_ns.is_some_and(|a| a < end))
            .map(|r| Request {
                offset_bytes: r.offset_bytes + video_bytes,
                ..r
            }),
    );
    out.sort_by_key(|r| r.arrival_ns);
    Ok((out, Some(period)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn synthetic_requests_follow_their_parameters() {
        let s = Synthetic {
            requests: 20_000,
            write_percent: 40.0,
            priority_percent: 10.0,
            sequential_probability: 0.5,
            ..Synthetic::default()
        };
        let reqs: Vec<Request> = s.requests(1 << 26, 1000, 7).collect();
        let writes = reqs.iter().filter(|r| r.op == Op::Write).count() as f64;
        let prio = reqs.iter().filter(|r| r.priority > 0).count() as f64;
        assert!((writes / 20_000.0 - 0.4).abs() < 0.02, "{writes}");
        assert!((prio / 20_000.0 - 0.1).abs() < 0.01, "{prio}");
        let seq = reqs
            .windows(2)
            .filter(|w| w[1].offset_bytes == w[0].offset_bytes + 4096)
            .count() as f64;
        assert!((seq / 20_000.0 - 0.5).abs() < 0.02, "{seq}");
        let gaps: Vec<u64> = reqs
            .windows(2)
            .map(|w| w[1].arrival_ns.unwrap() - w[0].arrival_ns.unwrap())
            .collect();
        assert!(gaps.iter().all(|&g| g <= 100_000));
        let mean = gaps.iter().sum::<u64>() as f64 / gaps.len() as f64;
        assert!((mean - 50_000.0).abs() < 1500.0, "{mean}");
        assert!(reqs.iter().all(|r| r.offset_bytes + 4096 <= 1 << 26));
        // Deterministic for a seed.
        let again: Vec<Request> = s.requests(1 << 26, 1000, 7).collect();
        assert_eq!(reqs, again);
    }

    #[test]
    fn video_frames_keep_their_period_and_the_writer_keeps_off_the_video() {
        let v = Video {
            seconds: 3,
            ..Video::default()
        };
        let (reqs, deadline) = video_requests(&v, 1 << 30, 1000, 3).unwrap();
        assert_eq!(deadline, Some(33_333_333));
        let frames: Vec<&Request> = reqs.iter().filter(|r| r.priority == 1).collect();
        assert_eq!(frames.len(), 90);
        assert!(frames.iter().enumerate().all(|(k, r)| r.op == Op::Read
            && r.offset_bytes == k as u64 * 65536
            && r.arrival_ns == Some(1000 + k as u64 * 33_333_333)));
        let video_bytes = 90 * 65536;
        let writes: Vec<&Request> = reqs.iter().filter(|r| r.priority == 0).collect();
        assert!(writes.len() > 100);
        assert!(writes.iter().all(|r| r.op == Op::Write
            && r.offset_bytes >= video_bytes
            && r.offset_bytes + r.len_bytes <= 1 << 30
            && r.arrival_ns.unwrap() < 1000 + 3_000_000_000));
        assert!(reqs.windows(2).all(|w| w[0].arrival_ns <= w[1].arrival_ns));
        // A video that leaves the writer too little room is refused, not truncated.
        assert!(video_requests(&v, 6 << 20, 0, 3).is_err());
    }

    #[test]
    fn thresholds_validate_and_round_up() {
        assert_eq!(PrioConfig::blocks_below(5.0, 164), 9);
        assert_eq!(PrioConfig::blocks_below(2.0, 164), 4);
        assert_eq!(PrioConfig::blocks_below(2.0, 10), 1);
        let bad = PrioConfig {
            critical_free_percent: 6.0,
            ..PrioConfig::default()
        };
        assert!(bad.validate().is_err());
        assert!(PrioConfig::default().validate().is_ok());
    }
}
