//! The scheduled experiments: BLOCKMGMT-09's open-loop synthetic workload, OSSD-13 VI-E's video
//! and prioritized file writes, run through the device-side controller ([`controller`]) on a
//! stack of the lab, with each request's latency accounted for by the host side that issued it.

use std::collections::VecDeque;

use flash::{DieId, Nanos};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use serde::{Deserialize, Serialize};

use controller::{Completion, Controller, ControllerConfig, RunError, Source, Target};

use crate::engine::{EngineError, Failure, PhaseError, Verifier};
use crate::request::{Op, Request};
use stacks::{GcState, Stack};
use workload::files::FileStats;

/// The open-loop synthetic workload of BLOCKMGMT-09 (3.2, 3.4, 3.6): fixed-size requests with
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
    /// Share of priority requests, in percent (default 10, BLOCKMGMT-09 3.6).
    pub priority_percent: f64,
    /// Inter-arrival times are uniform in `[0, interarrival_max_ns]` (default 0.1 ms).
    pub interarrival_max_ns: Nanos,
    /// Probability that a request starts where the previous one ended (default 0).
    pub sequential_probability: f64,
    /// Share of the logical capacity the workload touches, written before measuring (default
    /// 0.75; BLOCKMGMT-09 does not give it).
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
    /// Checks the parameters: `request_bytes` a positive multiple of 512, the percentages in
    /// 0..=100, `sequential_probability` in 0..=1, `utilisation` in (0, 1].
    pub fn validate(&self) -> Result<(), PlanError> {
        if self.request_bytes == 0 || !self.request_bytes.is_multiple_of(512) {
            return Err(PlanError::RequestBytes {
                bytes: self.request_bytes,
            });
        }
        for (field, value) in [
            ("write_percent", self.write_percent),
            ("priority_percent", self.priority_percent),
        ] {
            if !(0.0..=100.0).contains(&value) {
                return Err(PlanError::Percent { field, value });
            }
        }
        if !(0.0..=1.0).contains(&self.sequential_probability) {
            return Err(PlanError::SequentialProbability {
                value: self.sequential_probability,
            });
        }
        if !(self.utilisation > 0.0 && self.utilisation <= 1.0) {
            return Err(PlanError::Utilisation {
                value: self.utilisation,
            });
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

/// A block trace replayed through the device-side scheduler, open loop at the trace's own
/// arrival times (BLOCKMGMT-09 Table 4 replays traces of macro benchmarks this way). Reads
/// and writes only; a request's offset is folded into the footprint (modulo, then moved back
/// to end inside it), so any trace fits any device.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct BlockTrace {
    /// The trace file; a relative path is taken from the experiment file's directory.
    pub path: std::path::PathBuf,
    /// mqsim, msr, blkparse or fiu; guessed from the file when absent.
    #[serde(default)]
    pub format: Option<String>,
    /// Replay at most this many requests (all when absent). `--scale` multiplies it, when set.
    #[serde(default)]
    pub max_requests: Option<u64>,
    /// Share of the logical capacity written before measuring, and into which the trace's
    /// offsets are folded (default 0.75, as [`Synthetic`]).
    #[serde(default = "default_utilisation")]
    pub utilisation: f64,
    /// Multiplies the trace's times since its first request (default 1: as traced; 2 arrives
    /// at half the rate). A trace recorded on another device may arrive faster than this one
    /// serves it, and then its response times are mostly queueing.
    #[serde(default = "default_time_scale")]
    pub time_scale: f64,
}

fn default_utilisation() -> f64 {
    0.75
}

fn default_time_scale() -> f64 {
    1.0
}

/// Why a [`BlockTrace`] could not be replayed.
#[derive(Debug, thiserror::Error)]
pub enum BlockTraceError {
    /// `format` names no format, or none was given and the file's could not be guessed.
    #[error("block-trace {}: {reason}", .path.display())]
    Format {
        /// The trace file.
        path: std::path::PathBuf,
        /// What was wrong.
        reason: String,
    },
    /// The file could not be read, or a line of it parsed.
    #[error(transparent)]
    Read(#[from] workload::trace::TraceError),
    /// `utilisation` outside (0, 1].
    #[error("block-trace: utilisation = {value} must lie in (0, 1]")]
    Utilisation {
        /// The value.
        value: f64,
    },
    /// `time_scale` not a positive finite number.
    #[error("block-trace: time_scale = {value} must be a positive number")]
    TimeScale {
        /// The value.
        value: f64,
    },
    /// A request larger than the footprint or than 64 write units, or not whole sectors.
    #[error("block-trace {} line {line}: a request of {bytes} bytes does not fit the device", .path.display())]
    RequestBytes {
        /// The trace file.
        path: std::path::PathBuf,
        /// Its line.
        line: u64,
        /// The request's length.
        bytes: u64,
    },
}

impl BlockTrace {
    /// Resolves a relative `path` against `dir` (the experiment file's directory).
    pub fn resolve(&mut self, dir: &std::path::Path) {
        if self.path.is_relative() {
            self.path = dir.join(&self.path);
        }
    }

    /// The trace's reads and writes, arriving from `start_ns` on, folded into `footprint`
    /// bytes; `max_bytes` is the longest request the device takes.
    pub fn requests(
        &self,
        footprint: u64,
        max_bytes: u64,
        start_ns: Nanos,
    ) -> Result<Vec<Request>, BlockTraceError> {
        if !(self.utilisation > 0.0 && self.utilisation <= 1.0) {
            return Err(BlockTraceError::Utilisation {
                value: self.utilisation,
            });
        }
        if !(self.time_scale.is_finite() && self.time_scale > 0.0) {
            return Err(BlockTraceError::TimeScale {
                value: self.time_scale,
            });
        }
        let format_error = |reason: String| BlockTraceError::Format {
            path: self.path.clone(),
            reason,
        };
        let format = match &self.format {
            Some(f) => f
                .parse::<workload::trace::TraceFormat>()
                .map_err(|e| format_error(e.to_string()))?,
            None => workload::trace::TraceFormat::detect(&self.path).ok_or_else(|| {
                format_error("cannot tell the trace's format; set `format`".into())
            })?,
        };
        let mut reader = workload::trace::TraceReader::open(&self.path, format)?;
        let limit = self.max_requests.unwrap_or(u64::MAX);
        let mut out = Vec::new();
        while (out.len() as u64) < limit {
            let Some(r) = reader.next() else { break };
            let r = r?;
            if !matches!(r.op, Op::Read | Op::Write) || r.len_bytes == 0 {
                continue;
            }
            if r.len_bytes > footprint || r.len_bytes > max_bytes || r.len_bytes % 512 != 0 {
                return Err(BlockTraceError::RequestBytes {
                    path: self.path.clone(),
                    line: reader.line(),
                    bytes: r.len_bytes,
                });
            }
            let mut offset = r.offset_bytes % footprint / 512 * 512;
            if offset + r.len_bytes > footprint {
                offset = (footprint - r.len_bytes) / 512 * 512;
            }
            out.push(Request {
                op: r.op,
                offset_bytes: offset,
                len_bytes: r.len_bytes,
                priority: 0,
                arrival_ns: Some(
                    start_ns + (r.arrival_ns.unwrap_or(0) as f64 * self.time_scale).round() as u64,
                ),
            });
        }
        Ok(out)
    }
}

/// Why the parameters of a scheduled workload ([`Synthetic`], [`Video`], [`FileWrites`]) were
/// refused, or do not fit the footprint they run on.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
pub enum PlanError {
    /// `request_bytes` of the synthetic workload is 0 or not a multiple of 512.
    #[error("request_bytes = {bytes} must be a positive multiple of 512")]
    RequestBytes {
        /// The value.
        bytes: u64,
    },
    /// `write_percent` or `priority_percent` outside 0..=100.
    #[error("{field} = {value} must lie in 0..=100")]
    Percent {
        /// The parameter.
        field: &'static str,
        /// Its value.
        value: f64,
    },
    /// `sequential_probability` outside 0..=1.
    #[error("sequential_probability = {value} must lie in 0..=1")]
    SequentialProbability {
        /// The value.
        value: f64,
    },
    /// `utilisation` outside (0, 1].
    #[error("utilisation = {value} must lie in (0, 1]")]
    Utilisation {
        /// The value.
        value: f64,
    },
    /// A file-writes run with no files, no file slots or priority 0.
    #[error("file-writes: files, file_slots and priority must be at least 1")]
    FileWritesZero,
    /// `file_bytes` or `request_bytes` of a file-writes run is 0 or not a multiple of 512.
    #[error("file-writes: {field} = {value} must be a positive multiple of 512")]
    FileWritesSectors {
        /// The parameter.
        field: &'static str,
        /// Its value.
        value: u64,
    },
    /// A file-writes request larger than its file.
    #[error("file-writes: request_bytes = {request_bytes} exceeds file_bytes = {file_bytes}")]
    RequestOverFile {
        /// `request_bytes`.
        request_bytes: u64,
        /// `file_bytes`.
        file_bytes: u64,
    },
    /// `file_slots x file_bytes` overflows 64 bits.
    #[error("file-writes: file_slots x file_bytes overflows")]
    FileSlotsOverflow,
    /// A video with no frames per second, frame bytes or priority.
    #[error("video: frames_per_second, frame_bytes and priority must be at least 1")]
    VideoZero,
    /// A video frame that is not whole sectors.
    #[error("video: frame_bytes = {bytes} is not a multiple of 512")]
    FrameBytes {
        /// `frame_bytes`.
        bytes: u64,
    },
    /// The foreground (the video, the file slots) leaves the background writer less than a
    /// quarter of the footprint.
    #[error("{workload}: {bytes} bytes of {what} leave too little of the {footprint}-byte footprint to the background writer")]
    TooLittleLeft {
        /// "video" or "file-writes".
        workload: &'static str,
        /// Bytes the foreground takes.
        bytes: u64,
        /// What takes them ("video", "file slots").
        what: &'static str,
        /// The footprint in bytes.
        footprint: u64,
    },
}

/// OSSD-13 VI-E's prioritized read: a video played at a fixed frame rate (one read of
/// `frame_bytes` per frame, sequentially through the video) while a background writer runs.
/// The video occupies the start of the footprint, the writer the rest; a frame is shown on
/// time when its read completes within one frame period.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Video {
    /// Default 30 (OSSD-13 VI-E).
    pub frames_per_second: u32,
    /// Length of the video (default 200 s, OSSD-13 VI-E); `--scale` shortens it.
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

/// OSSD-13 VI-E's prioritized write: files written one after another with priority (each as
/// a burst of requests, the next file once the last request of the previous one completes)
/// while the background writer runs. A file is one transaction; its write latency is from its
/// first request's issue by the host to its last request's completion.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct FileWrites {
    /// Files written (default 1,000, OSSD-13 VI-E); `--scale` shrinks it.
    pub files: u64,
    /// Bytes per file (default 2 MiB, OSSD-13 VI-E).
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
        source,
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
        source,
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

/// The bytes the files of a [`FileWrites`] run take at the start of the footprint, and the
/// bytes left to the background writer after them.
pub(crate) fn file_writes_region(f: &FileWrites, footprint: u64) -> Result<(u64, u64), PlanError> {
    if f.files == 0 || f.file_slots == 0 || f.priority == 0 {
        return Err(PlanError::FileWritesZero);
    }
    for (field, value) in [
        ("file_bytes", f.file_bytes),
        ("request_bytes", f.request_bytes),
    ] {
        if value == 0 || !value.is_multiple_of(512) {
            return Err(PlanError::FileWritesSectors { field, value });
        }
    }
    if f.request_bytes > f.file_bytes {
        return Err(PlanError::RequestOverFile {
            request_bytes: f.request_bytes,
            file_bytes: f.file_bytes,
        });
    }
    let files = f
        .file_slots
        .checked_mul(f.file_bytes)
        .ok_or(PlanError::FileSlotsOverflow)?;
    let rest =
        footprint.saturating_sub(files) / f.background.request_bytes * f.background.request_bytes;
    if rest < footprint / 4 {
        return Err(PlanError::TooLittleLeft {
            workload: "file-writes",
            bytes: files,
            what: "file slots",
            footprint,
        });
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
) -> Result<(Vec<Request>, Option<Nanos>), PlanError> {
    if video.frames_per_second == 0 || video.frame_bytes == 0 || video.priority == 0 {
        return Err(PlanError::VideoZero);
    }
    if !video.frame_bytes.is_multiple_of(512) {
        return Err(PlanError::FrameBytes {
            bytes: video.frame_bytes,
        });
    }
    let frames = video.seconds * video.frames_per_second as u64;
    let video_bytes = frames * video.frame_bytes;
    let rest = footprint.saturating_sub(video_bytes) / video.background.request_bytes
        * video.background.request_bytes;
    if video_bytes == 0 || rest < footprint / 4 {
        return Err(PlanError::TooLittleLeft {
            workload: "video",
            bytes: video_bytes,
            what: "video",
            footprint,
        });
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
