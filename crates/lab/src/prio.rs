//! The scheduled experiments: BLOCKMGMT-09's open-loop synthetic workload, OSSD-13 VI-E's video
//! and prioritized file writes, run through the device-side controller ([`controller`]) on a
//! stack of the lab, with each request's latency accounted for by the host side that issued it.
//! The workloads themselves are [`workload::scheduled`]'s.

use std::collections::VecDeque;

use flash::{DieId, Nanos};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

use controller::{Completion, Controller, ControllerConfig, RunError, Source, Target};

use crate::engine::{EngineError, Failure, PhaseError, Verifier};
use crate::request::{Op, Request};
use stacks::{GcState, Stack};
use workload::files::FileStats;
pub(crate) use workload::scheduled::{file_writes_region, video_requests};
pub use workload::scheduled::{
    BlockTrace, BlockTraceError, FileWrites, PlanError, Synthetic, Video,
};

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
    pub(crate) fn new(w: &FileWrites, start: Nanos) -> Chain {
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

/// What [`crate::scheduled::run_variant`] runs.
pub enum Plan<'a> {
    /// BLOCKMGMT-09's open-loop synthetic requests.
    Synthetic(&'a Synthetic),
    /// OSSD-13 VI-E's video playback beside a background writer.
    Video(&'a Video),
    /// OSSD-13 VI-E's prioritized file writes beside a background writer.
    FileWrites(&'a FileWrites),
    /// A block trace at its own arrival times (BLOCKMGMT-09 Table 4).
    BlockTrace(&'a BlockTrace),
}

/// What a scheduled run measured: the priority requests (foreground, BLOCKMGMT-09 Fig. 3) and the
/// others (background), with scheduler counters.
pub struct PrioOutcome {
    /// The priority requests' statistics.
    pub foreground: FileStats,
    /// The other requests' statistics.
    pub background: FileStats,
    /// GC steps that did work.
    pub gc_steps: u64,
    /// Host writes issued as part of a merged stripe write, beyond the first of each.
    pub merged_writes: u64,
    /// Longest the request queues grew.
    pub max_queued: usize,
    /// Virtual time the last request or GC step completed, in nanoseconds.
    pub end_ns: Nanos,
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
) -> Result<Nanos, PhaseError> {
    let unit = stack.unit_bytes();
    let fill = crate::engine::run_closed(
        stack,
        &mut workload::block::prefill(footprint, unit),
        crate::engine::Load::SET_UP,
        0,
        seed ^ 0xF111,
        Some(&mut *verifier),
        &mut |_| {},
    )
    .map_err(|source| PhaseError {
        phase: "prefill",
        source: Box::new(source),
    })?;
    let low = ControllerConfig::blocks_below(low_free_percent, stack.gc_state().blocks);
    age(
        stack,
        footprint,
        low,
        fill.end_ns,
        seed ^ 0xA6E,
        Some(verifier),
    )
    .map_err(|source| PhaseError {
        phase: "aging",
        source: Box::new(source),
    })
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
    ) -> Result<Option<(Request, u64)>, Failure>;
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
    ) -> Result<(), Failure>;
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

/// The lab's stack as the controller's target: each request's bytes are a token from the run's
/// seed (fingerprint mode), and reads and writes are checked against the verifier.
struct Device<'a> {
    stack: &'a mut dyn Stack,
    verify: Option<&'a mut Verifier>,
    seed: u64,
    index: u64,
    fps: Vec<u64>,
}

impl Target for Device<'_> {
    type Error = Failure;

    fn submit(&mut self, at: Nanos, req: &Request) -> Result<Nanos, Failure> {
        let token = crate::engine::request_token(self.seed, self.index);
        let done = self.stack.submit(at, req, token, &mut self.fps)?;
        if let Some(v) = self.verify.as_deref_mut() {
            match req.op {
                Op::Read => v.read(req, &self.fps)?,
                Op::Write | Op::Trim => {
                    let s = &*self.stack;
                    v.wrote(req, token, &|u, tk| s.expected_fingerprint(u, tk))
                }
                Op::Flush => {}
            }
        }
        self.index += 1;
        Ok(done)
    }

    fn gc_step(&mut self, at: Nanos) -> Result<Nanos, Failure> {
        Ok(self.stack.background(at, at + 1)?)
    }

    fn unit_bytes(&self) -> u64 {
        self.stack.unit_bytes()
    }

    fn gc_state(&self) -> GcState {
        self.stack.gc_state()
    }

    fn work_done(&self) -> u64 {
        // Every counter only grows, so their sum moves whenever any of them does.
        let c = self.stack.counters();
        [
            c.host_write_bytes,
            c.host_read_bytes,
            c.flash_pages_programmed,
            c.flash_pages_read,
            c.data_units_written,
            c.flash_blocks_erased,
            c.gc_page_copies,
            c.gc_ns,
            c.index_pages_written,
            c.index_pages_read,
            c.metadata_pages_written,
            c.rmw_reads,
            c.units_lost,
        ]
        .into_iter()
        .fold(0u64, u64::wrapping_add)
    }

    fn dies_of(&self, req: &Request, out: &mut Vec<DieId>) {
        self.stack.dies_of(req, out)
    }

    fn gc_dies(&self, out: &mut Vec<DieId>) {
        self.stack.gc_dies(out)
    }

    fn die_free_ns(&self, die: DieId) -> Nanos {
        self.stack.die_free_ns(die)
    }
}

/// Which of a run's sources a request came from, in the low bits of its tag.
const FROM_CHAIN: u64 = 0;
const FROM_REQUESTS: u64 = 1;
const FROM_HOST: u64 = 2;

/// The host side of a scheduled run: the workload's requests (in arrival order), the
/// prioritized file writer of a [`FileWrites`] run, and a [`Host`] (OFS through OAQ), offered
/// to the controller in that order; each completion accounted for by where it came from.
pub(crate) struct Arrivals<'a> {
    requests: &'a mut dyn Iterator<Item = Request>,
    /// The next of `requests`.
    ahead: Option<Request>,
    chain: Option<&'a mut Chain>,
    host: Option<&'a mut dyn Host>,
    /// A foreground request counts as a transaction when it completes within this time of its
    /// arrival (a frame shown on time); always without one.
    deadline_ns: Option<Nanos>,
    foreground: FileStats,
    background: FileStats,
}

impl<'a> Arrivals<'a> {
    pub(crate) fn new(
        requests: &'a mut dyn Iterator<Item = Request>,
        start_ns: Nanos,
        deadline_ns: Option<Nanos>,
    ) -> Self {
        Arrivals {
            ahead: requests.next(),
            requests,
            chain: None,
            host: None,
            deadline_ns,
            foreground: FileStats::new(start_ns),
            background: FileStats::new(start_ns),
        }
    }

    pub(crate) fn with_chain(mut self, chain: Option<&'a mut Chain>) -> Self {
        self.chain = chain;
        self
    }

    pub(crate) fn with_host(mut self, host: &'a mut dyn Host) -> Self {
        self.host = Some(host);
        self
    }
}

impl Source for Arrivals<'_> {
    type Error = Failure;

    fn take(
        &mut self,
        t: Nanos,
        queued: &dyn Fn(u8) -> usize,
    ) -> Result<Option<(Request, u64)>, Failure> {
        let arrived = |r: &Request| r.arrival_ns.unwrap_or(0) <= t;
        if let Some(c) = self.chain.as_deref_mut() {
            if c.released.front().is_some_and(arrived) {
                return Ok(c.released.pop_front().map(|r| (r, FROM_CHAIN)));
            }
        }
        if self.ahead.as_ref().is_some_and(arrived) {
            let next = self.requests.next();
            return Ok(std::mem::replace(&mut self.ahead, next).map(|r| (r, FROM_REQUESTS)));
        }
        match self.host.as_deref_mut() {
            Some(h) => Ok(h.take(t, queued)?.map(|(r, tag)| (r, tag << 2 | FROM_HOST))),
            None => Ok(None),
        }
    }

    fn next_arrival(&self) -> Option<Nanos> {
        [
            self.ahead.map(|r| r.arrival_ns.unwrap_or(0)),
            self.chain
                .as_deref()
                .and_then(|c| c.released.front())
                .map(|r| r.arrival_ns.unwrap_or(0)),
            self.host.as_deref().and_then(|h| h.next_arrival()),
        ]
        .into_iter()
        .flatten()
        .min()
    }

    fn completed(&mut self, c: Completion) -> Result<(), Failure> {
        let done = c.done_ns;
        match c.tag & 3 {
            FROM_CHAIN => {
                let chain = self.chain.as_deref_mut().ok_or(Failure::NoChain)?;
                chain.completed(done, &mut self.foreground);
            }
            FROM_HOST => {
                let h = self.host.as_deref_mut().ok_or(Failure::NoHost)?;
                h.completed(c.tag >> 2, done, &mut self.foreground, &mut self.background)?;
            }
            _ => {
                let foreground = c.request.priority > 0;
                let stats = if foreground {
                    &mut self.foreground
                } else {
                    &mut self.background
                };
                let latency = (done - c.arrival_ns).max(1);
                let on_time = !foreground || self.deadline_ns.is_none_or(|d| latency <= d);
                let r = c.request;
                account(stats, r.op, r.len_bytes, c.arrival_ns, done, on_time);
            }
        }
        Ok(())
    }

    fn finished(&self) -> bool {
        self.chain.as_deref().is_some_and(Chain::finished)
            || self.host.as_deref().is_some_and(|h| h.finished())
    }
}

/// The engine's error for a controller's.
fn engine_error(e: RunError<Failure>) -> EngineError {
    match e {
        RunError::Submit {
            index,
            request,
            source,
        } => EngineError::request(index, &request, source),
        RunError::GcStep(e) => EngineError::Background(e),
        RunError::Source(e) => EngineError::Source(e),
        RunError::Config(e) => EngineError::Controller(e),
        RunError::Stalled { at_ns, queued } => EngineError::Stalled { at_ns, queued },
    }
}

/// Runs `requests` (each with its arrival time, in arrival order) through the controller. A
/// foreground request counts as a transaction when it completes within `deadline_ns` of its
/// arrival (a frame shown on time, OSSD-13 VI-E), or always without a deadline; background
/// requests always count.
pub fn run(
    stack: &mut dyn Stack,
    cfg: &ControllerConfig,
    requests: &mut dyn Iterator<Item = Request>,
    start_ns: Nanos,
    seed: u64,
    verify: Option<&mut Verifier>,
    deadline_ns: Option<Nanos>,
) -> Result<PrioOutcome, EngineError> {
    let arrivals = Arrivals::new(requests, start_ns, deadline_ns);
    run_with(stack, cfg, arrivals, start_ns, seed, verify)
}

/// As [`run`], with every source of `arrivals` (the prioritized file writer of a
/// [`FileWrites`] run, whose files are the foreground and whose last file ends the run; a
/// [`Host`]).
pub(crate) fn run_with(
    stack: &mut dyn Stack,
    cfg: &ControllerConfig,
    mut arrivals: Arrivals<'_>,
    start_ns: Nanos,
    seed: u64,
    verify: Option<&mut Verifier>,
) -> Result<PrioOutcome, EngineError> {
    let mut device = Device {
        stack,
        verify,
        seed,
        index: 0,
        fps: Vec::new(),
    };
    let o = Controller::run(cfg, &mut device, &mut arrivals, start_ns).map_err(engine_error)?;
    Ok(PrioOutcome {
        foreground: arrivals.foreground,
        background: arrivals.background,
        gc_steps: o.gc_steps,
        merged_writes: o.merged_writes,
        max_queued: o.max_queued,
        end_ns: o.end_ns,
    })
}

/// Brings a freshly filled device to steady state: random unit writes over the footprint, at
/// least one footprint's worth and until free blocks are down to the cleaning threshold, so
/// the measured run cleans from its start with victims as a long-running device has them
/// (BLOCKMGMT-09's simulated SSD is measured full). At most three footprints are written.
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
        .map_err(|e| EngineError::Background(e.into()))?;
    Ok(t.max(done))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A block trace in MQSim's format, written to a fresh temporary file.
    fn trace_file(name: &str, text: &str) -> std::path::PathBuf {
        let dir = std::env::temp_dir().join(format!("lab-blocktrace-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let p = dir.join(name);
        std::fs::write(&p, text).unwrap();
        p
    }

    #[test]
    fn block_trace_requests_fold_into_the_footprint_at_their_arrivals() {
        // arrival_ns device lba_sectors size_sectors type (0 write, 1 read)
        let p = trace_file(
            "t.trace",
            "1000 0 8 16 0\n3000 0 2048 16 1\n5000 0 2040 16 0\n",
        );
        let b = BlockTrace {
            path: p.clone(),
            format: Some("mqsim".into()),
            max_requests: None,
            utilisation: 0.75,
            time_scale: 1.0,
        };
        // A 1 MiB footprint: sector 2048 is at 1 MiB, folded to 0; sector 2040 (1 MiB - 4
        // KiB) with 8 KiB would run past the end, so it moves back to end inside.
        let r = b.requests(1 << 20, 1 << 20, 100).unwrap();
        let got: Vec<_> = r
            .iter()
            .map(|r| (r.op, r.offset_bytes, r.len_bytes, r.arrival_ns))
            .collect();
        assert_eq!(
            got,
            vec![
                (Op::Write, 4096, 8192, Some(100)),
                (Op::Read, 0, 8192, Some(2100)),
                (Op::Write, (1 << 20) - 8192, 8192, Some(4100)),
            ]
        );
        let two = BlockTrace {
            max_requests: Some(2),
            ..b.clone()
        };
        assert_eq!(two.requests(1 << 20, 1 << 20, 0).unwrap().len(), 2);
        let slow = BlockTrace {
            time_scale: 10.0,
            ..b.clone()
        };
        let at: Vec<_> = slow
            .requests(1 << 20, 1 << 20, 100)
            .unwrap()
            .iter()
            .map(|r| r.arrival_ns)
            .collect();
        assert_eq!(at, vec![Some(100), Some(20_100), Some(40_100)]);
        let zero = BlockTrace {
            time_scale: 0.0,
            ..b.clone()
        };
        assert!(zero
            .requests(1 << 20, 1 << 20, 0)
            .unwrap_err()
            .to_string()
            .contains("time_scale"));
        // Bad input: a request longer than the device takes, a format that does not exist,
        // a missing file, a utilisation out of range; each a clear error.
        let e = b.requests(1 << 20, 4096, 0).unwrap_err().to_string();
        assert!(e.contains("line 1") && e.contains("8192 bytes"), "{e}");
        let bad = BlockTrace {
            format: Some("nosuch".into()),
            ..b.clone()
        };
        assert!(bad
            .requests(1 << 20, 1 << 20, 0)
            .unwrap_err()
            .to_string()
            .contains("nosuch"));
        let missing = BlockTrace {
            path: p.with_file_name("missing.trace"),
            ..b.clone()
        };
        assert!(missing
            .requests(1 << 20, 1 << 20, 0)
            .unwrap_err()
            .to_string()
            .contains("missing.trace"));
        let full = BlockTrace {
            utilisation: 1.5,
            ..b
        };
        assert!(full
            .requests(1 << 20, 1 << 20, 0)
            .unwrap_err()
            .to_string()
            .contains("utilisation"));
    }

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
        assert!(matches!(
            video_requests(&v, 6 << 20, 0, 3),
            Err(PlanError::TooLittleLeft {
                workload: "video",
                ..
            })
        ));
    }
}
