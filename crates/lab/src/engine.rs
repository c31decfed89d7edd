//! The virtual-time engine.
//!
//! - **Closed loop**: `threads x queue_depth` request slots. Each slot issues its next request
//!   when its previous one completes (plus the think time), so the device always has that many
//!   requests in flight.
//! - **Open loop**: requests are issued at their trace timestamps, whatever is outstanding.
//!
//! Requests are served in issue-time order; the device's reservation time model (per die and
//! per channel bus) turns contention into waiting. Whenever the device falls idle before the
//! next request arrives, the stack gets the gap for background GC; a GC step under way when a
//! request arrives delays it (the step is not preempted).

use std::cmp::Reverse;
use std::collections::{BTreeMap, BinaryHeap};

use flash::Nanos;
use hdrhistogram::Histogram;

pub use crate::failure::{Failure, Mismatch};
use crate::request::{Op, Request};
use stacks::Stack;
use workload::trace::TraceError;

/// Closed-loop load shape: `threads x queue_depth` request slots (see the module doc).
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Load {
    /// Issuing threads (at least 1; `ossd run` defaults to 1).
    pub threads: u32,
    /// Requests each thread keeps outstanding (at least 1; `ossd run` defaults to 1).
    pub queue_depth: u32,
    /// Virtual time a slot waits after a completion before issuing its next request, in
    /// nanoseconds (`ossd run` defaults to 0).
    pub think_time_ns: Nanos,
}

impl Load {
    /// Unmeasured set-up writes (prefill, aging): one thread, 8 requests outstanding, no think
    /// time.
    pub const SET_UP: Load = Load {
        threads: 1,
        queue_depth: 8,
        think_time_ns: 0,
    };
}

/// Latency histograms per priority class and per operation, in nanoseconds from issue to
/// completion (1 ns to 1 hour, 3 significant digits; longer latencies count as 1 hour).
pub struct Latencies {
    /// Every request, by its priority (0: normal).
    pub by_priority: BTreeMap<u8, Histogram<u64>>,
    /// Reads.
    pub reads: Histogram<u64>,
    /// Writes.
    pub writes: Histogram<u64>,
    /// Every request (TRIMs and flushes too).
    pub all: Histogram<u64>,
}

#[expect(
    clippy::expect_used,
    reason = "fixed bounds (1 ns to 1 h, 3 digits) that hdrhistogram always accepts"
)]
fn histogram() -> Histogram<u64> {
    // 1 ns to 1 hour at 3 significant digits.
    Histogram::new_with_bounds(1, 3_600_000_000_000, 3).expect("valid histogram bounds")
}

impl Default for Latencies {
    fn default() -> Self {
        Latencies {
            by_priority: BTreeMap::new(),
            reads: histogram(),
            writes: histogram(),
            all: histogram(),
        }
    }
}

impl Latencies {
    fn record(&mut self, req: &Request, ns: Nanos) {
        let v = ns.clamp(1, 3_600_000_000_000);
        self.all.saturating_record(v);
        match req.op {
            Op::Read => self.reads.saturating_record(v),
            Op::Write => self.writes.saturating_record(v),
            _ => {}
        }
        self.by_priority
            .entry(req.priority)
            .or_insert_with(histogram)
            .saturating_record(v);
    }
}

/// Checks reads in fingerprint mode at write-unit granularity: a unit last written whole by a
/// known request must read back that request's fingerprint; a unit never written reads 0; a
/// unit last written in part (merged by read-modify-write) is not checked.
#[derive(Clone)]
pub struct Verifier {
    expected: Vec<u64>,
    unit: u64,
    /// Write units read back and checked so far.
    pub checked: u64,
    /// Checked units that read back the wrong fingerprint.
    pub mismatches: u64,
}

const UNKNOWN: u64 = u64::MAX;

impl Verifier {
    /// A verifier of a stack exporting `capacity_bytes`, checking whole units of `unit_bytes`
    /// (the stack's write unit); every unit starts out never written (reads as 0).
    pub fn new(capacity_bytes: u64, unit_bytes: u64) -> Self {
        Verifier {
            expected: vec![0; capacity_bytes.div_ceil(unit_bytes) as usize],
            unit: unit_bytes,
            checked: 0,
            mismatches: 0,
        }
    }

    fn units(&self, req: &Request) -> impl Iterator<Item = (u64, bool)> {
        let unit = self.unit;
        let (start, end) = (req.offset_bytes, req.offset_bytes + req.len_bytes);
        (start / unit..end.div_ceil(unit))
            .map(move |u| (u, start <= u * unit && (u + 1) * unit <= end))
    }

    pub(crate) fn wrote(
        &mut self,
        req: &Request,
        token: u64,
        fingerprint: &dyn Fn(u64, u64) -> u64,
    ) {
        let units: Vec<(u64, bool)> = self.units(req).collect();
        for (u, whole) in units {
            self.expected[u as usize] = match (req.op, whole) {
                (Op::Write, true) => fingerprint(u, token),
                // Stacks differ on what a TRIM leaves (the FTL unmaps whole units, the object
                // stack removes whole objects only): trimmed units are not checked.
                (Op::Trim, _) => UNKNOWN,
                _ => UNKNOWN,
            };
        }
    }

    pub(crate) fn read(&mut self, req: &Request, got: &[u64]) -> Result<(), Mismatch> {
        let units: Vec<u64> = self.units(req).map(|(u, _)| u).collect();
        for (u, &fp) in units.iter().zip(got) {
            let want = self.expected[*u as usize];
            if want == UNKNOWN {
                continue;
            }
            self.checked += 1;
            if want != fp {
                self.mismatches += 1;
                return Err(Mismatch {
                    unit: *u,
                    got: fp,
                    expected: want,
                });
            }
        }
        Ok(())
    }
}

/// What a phase of requests did.
pub struct Phase {
    /// Requests served.
    pub requests: u64,
    /// Virtual time the phase started, in nanoseconds.
    pub start_ns: Nanos,
    /// Virtual time the last request completed, in nanoseconds.
    pub end_ns: Nanos,
    /// The requests' latencies.
    pub latencies: Latencies,
}

/// Why a run of requests stopped.
#[derive(Debug, thiserror::Error)]
pub enum EngineError {
    /// Request number `index` of the phase failed.
    #[error("request {index} ({op:?} at byte {offset}, {len} bytes): {source}")]
    Request {
        /// Requests issued before it in the phase.
        index: u64,
        /// Its operation.
        op: Op,
        /// Its first byte.
        offset: u64,
        /// Its length in bytes.
        len: u64,
        /// Why it failed.
        source: Failure,
    },
    /// Background GC failed in an idle gap.
    #[error("background GC: {0}")]
    Background(#[source] Failure),
    /// The source of requests failed (a trace that does not parse, the host side).
    #[error("{0}")]
    Source(#[source] Failure),
    /// The device-side controller's settings are out of range.
    #[error(transparent)]
    Controller(#[from] controller::ConfigError),
    /// The device-side controller holds requests it can never issue.
    #[error("scheduler stalled at {at_ns} ns with {queued} requests queued")]
    Stalled {
        /// The controller's clock.
        at_ns: Nanos,
        /// Requests queued.
        queued: usize,
    },
}

impl EngineError {
    /// Request number `index` (`req`) failed with `source`.
    pub(crate) fn request(index: u64, req: &Request, source: Failure) -> EngineError {
        EngineError::Request {
            index,
            op: req.op,
            offset: req.offset_bytes,
            len: req.len_bytes,
            source,
        }
    }
}

/// An [`EngineError`] in a named phase of a run ("prefill", "aging", "measure").
#[derive(Debug, thiserror::Error)]
#[error("{phase}: {source}")]
pub struct PhaseError {
    /// The phase.
    pub phase: &'static str,
    /// Why it stopped (boxed: a phase's result stays small on the hot path).
    pub source: Box<EngineError>,
}

/// The token standing for request `index`'s bytes (fingerprint mode): distinct per request,
/// reproducible from the run's seed.
pub(crate) fn request_token(seed: u64, index: u64) -> u64 {
    seed ^ index.wrapping_mul(0x9E37_79B9_7F4A_7C15)
}

struct Driver<'a> {
    stack: &'a mut dyn Stack,
    verify: Option<&'a mut Verifier>,
    progress: &'a mut dyn FnMut(u64),
    busy_until: Nanos,
    out: Vec<u64>,
    index: u64,
    seed: u64,
    start_ns: Nanos,
    end_ns: Nanos,
    latencies: Latencies,
}

impl<'a> Driver<'a> {
    fn new(
        stack: &'a mut dyn Stack,
        verify: Option<&'a mut Verifier>,
        progress: &'a mut dyn FnMut(u64),
        start_ns: Nanos,
        seed: u64,
    ) -> Self {
        Driver {
            stack,
            verify,
            progress,
            busy_until: start_ns,
            out: Vec::new(),
            index: 0,
            seed,
            start_ns,
            end_ns: start_ns,
            latencies: Latencies::default(),
        }
    }

    /// Gives an idle gap before `t` to background work, then serves `req` issued at `t`;
    /// returns its completion time.
    fn serve(&mut self, t: Nanos, req: &Request) -> Result<Nanos, EngineError> {
        if t > self.busy_until {
            let done = self
                .stack
                .background(self.busy_until, t)
                .map_err(|e| EngineError::Background(e.into()))?;
            self.busy_until = self.busy_until.max(done);
        }
        let token = request_token(self.seed, self.index);
        let index = self.index;
        let fail = |e: Failure| EngineError::request(index, req, e);
        let done = self
            .stack
            .submit(t, req, token, &mut self.out)
            .map_err(|e| fail(e.into()))?;
        if let Some(v) = self.verify.as_deref_mut() {
            match req.op {
                Op::Read => v.read(req, &self.out).map_err(|e| fail(e.into()))?,
                Op::Write | Op::Trim => {
                    let stack = &*self.stack;
                    v.wrote(req, token, &|u, t| stack.expected_fingerprint(u, t))
                }
                Op::Flush => {}
            }
        }
        self.index += 1;
        self.busy_until = self.busy_until.max(done);
        self.end_ns = self.end_ns.max(done);
        self.latencies.record(req, done - t);
        if self.index.is_multiple_of(4096) {
            (self.progress)(self.index);
        }
        Ok(done)
    }

    fn finish(self) -> Phase {
        (self.progress)(self.index);
        Phase {
            requests: self.index,
            start_ns: self.start_ns,
            end_ns: self.end_ns,
            latencies: self.latencies,
        }
    }
}

/// Runs `requests` in closed loop from `start_ns` (see the module doc) until they run out.
/// Each request's bytes are a token drawn from `seed` and its index (fingerprint mode); reads
/// are checked by `verify` when given. `progress` gets the requests done every 4096 requests
/// and at the end.
pub fn run_closed(
    stack: &mut dyn Stack,
    requests: &mut dyn Iterator<Item = Request>,
    load: Load,
    start_ns: Nanos,
    seed: u64,
    verify: Option<&mut Verifier>,
    progress: &mut dyn FnMut(u64),
) -> Result<Phase, EngineError> {
    let slots = (load.threads.max(1) * load.queue_depth.max(1)) as usize;
    let mut ready: BinaryHeap<Reverse<(Nanos, usize)>> =
        (0..slots).map(|s| Reverse((start_ns, s))).collect();
    let mut d = Driver::new(stack, verify, progress, start_ns, seed);
    while let Some(Reverse((t, slot))) = ready.pop() {
        let Some(req) = requests.next() else { break };
        let done = d.serve(t, &req)?;
        ready.push(Reverse((done + load.think_time_ns, slot)));
    }
    Ok(d.finish())
}

/// Fits a request from a trace made on a larger device into `capacity` bytes: the offset wraps
/// around, keeping sector alignment.
pub fn fit(req: &mut Request, capacity: u64) {
    req.len_bytes = req.len_bytes.min(capacity);
    if req.offset_bytes + req.len_bytes > capacity {
        let room = capacity - req.len_bytes + 512;
        req.offset_bytes = (req.offset_bytes % room) / 512 * 512;
    }
}

/// Replays timestamped requests (open loop) from `start_ns`: each is issued at `start_ns`
/// plus its arrival time (a time that goes backwards is issued at once) and fitted into the
/// stack's capacity ([`fit`]). A request the source fails to produce (a trace line that does
/// not parse) stops the replay with [`EngineError::Source`]. `seed`, `verify` and `progress`
/// as for [`run_closed`].
pub fn run_open(
    stack: &mut dyn Stack,
    requests: &mut dyn Iterator<Item = Result<Request, TraceError>>,
    start_ns: Nanos,
    seed: u64,
    verify: Option<&mut Verifier>,
    progress: &mut dyn FnMut(u64),
) -> Result<Phase, EngineError> {
    let capacity = stack.capacity_bytes();
    let mut d = Driver::new(stack, verify, progress, start_ns, seed);
    let mut last_arrival = start_ns;
    for r in requests {
        let mut req = r.map_err(|e| EngineError::Source(e.into()))?;
        // A trace is replayed in file order; a timestamp that goes backwards is issued at once.
        let t = (start_ns + req.arrival_ns.unwrap_or(0)).max(last_arrival);
        last_arrival = t;
        if req.op != Op::Flush {
            fit(&mut req, capacity);
        }
        d.serve(t, &req)?;
    }
    Ok(d.finish())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fit_wraps_and_keeps_alignment() {
        let mut r = Request::new(Op::Read, 10_000 * 512, 8 * 512);
        fit(&mut r, 1000 * 512);
        assert!(r.offset_bytes + r.len_bytes <= 1000 * 512);
        assert_eq!(r.offset_bytes % 512, 0);
        let mut small = Request::new(Op::Read, 4096, 4096);
        fit(&mut small, 1 << 20);
        assert_eq!(small.offset_bytes, 4096);
    }
}
