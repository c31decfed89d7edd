//! Seed 000 VI-E's prioritized read on files: the video and the background writer's files on
//! OFS, their reads and writes as object I/O instances through OAQ, the object requests OAQ
//! dispatches run by the device-side controller ([`crate::prio`]) on the object store.
//!
//! The path of one request, top to bottom:
//!
//! 1. The workload (the video player, one frame read per period; the background writer, random
//!    writes into its files) issues a read or write of a file at its arrival time.
//! 2. OFS turns it into an OIO: the same range of the file's data object, in sectors
//!    ([`ofs::ScheduledFile::oio`]), with no per-request priority.
//! 3. OAQ ([`sched::Oaq`]) merges it into a queued OREQ of the same object, direction and
//!    priority, or queues a new one at the object's priority: the level the player set on the
//!    video file through OFS ([`ofs::Ofs::set_priority`], the prototype's `ioctl()`), which the
//!    host registers with OAQ; 0 for every other file.
//! 4. The host hands OAQ's head (highest priority first) to the device while the device's queue
//!    for that priority holds fewer than `host.device_queue_depth` requests; beyond that,
//!    requests wait (and merge) in OAQ. The OREQ travels with its priority, as an OSD command
//!    carries it.
//! 5. The device-side controller orders it against GC steps and other requests by that
//!    priority, and issues it as an object READ or WRITE of the object store ([`OfsStack`]).
//! 6. On completion the host accounts for every OIO the OREQ carried, each from its own
//!    arrival (a frame counts as shown when its read completed within one period).
//!
//! The controller speaks the lab's [`Request`], a byte range of one flat space. Here that
//! space is the files laid end to end (the video first, then the background files), so a
//! request names one object and an offset in it, and the controller's verification and
//! per-die look-ahead work unchanged. Filling and aging the device before the measured run
//! write the files' objects directly (unmeasured set-up, no OAQ).

use std::collections::HashMap;

use flash::{DieId, Flash, Nanos};
use ofs::{Ofs, ScheduledFile};
use osd::Osd;
use sched::{Direction, Oaq, OaqConfig, Oio, OioId, Priority};
use serde::{Deserialize, Serialize};
use vfs::FileSystem;

use crate::engine::Verifier;
use crate::files::FileStats;
use crate::prio::{Host, Plan, PrioConfig, VariantRun};
use crate::request::{Op, Request};
use crate::stack::{Counters, GcState, Stack};

/// Settings of the host side of an `ofs` variant (`host.*`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct HostConfig {
    /// Whether the player sets the video file's priority through OFS before playing (default
    /// true). False is the paper's "OFS (normal)": every OREQ queues at priority 0.
    pub set_priority: bool,
    /// Requests the device queues per priority class; the rest wait in OAQ (default 32, a SATA
    /// NCQ's depth).
    pub device_queue_depth: u32,
    /// Bytes of each background file (default 8 MiB, RawSSD's virtual erase block; the last
    /// file takes what is left). A multiple of the background request size.
    pub background_file_bytes: u64,
    /// Whether the background writer runs while the video plays (default true). False is a
    /// reference: the same aged device, the video alone, nothing to clean.
    pub background: bool,
}

impl Default for HostConfig {
    fn default() -> Self {
        HostConfig {
            set_priority: true,
            device_queue_depth: 32,
            background_file_bytes: 8 << 20,
            background: true,
        }
    }
}

/// A file's place in the flat space the controller addresses.
#[derive(Clone, Copy, Debug)]
struct Span {
    start: u64,
    bytes: u64,
    file: ScheduledFile,
}

/// The files laid end to end.
#[derive(Clone, Debug, Default)]
struct Files {
    spans: Vec<Span>,
}

impl Files {
    fn total(&self) -> u64 {
        self.spans.last().map_or(0, |s| s.start + s.bytes)
    }

    /// The file holding flat byte `offset`, and the offset within it.
    fn locate(&self, offset: u64) -> Option<(&Span, u64)> {
        let i = self.spans.partition_point(|s| s.start + s.bytes <= offset);
        self.spans.get(i).map(|s| (s, offset - s.start))
    }

    /// The (file, offset in it, length) pieces of a flat byte range.
    fn pieces(&self, offset: u64, len: u64) -> Result<Vec<(Span, u64, u64)>, String> {
        let end = offset
            .checked_add(len)
            .filter(|&e| e <= self.total())
            .ok_or_else(|| format!("bytes {offset}+{len} lie beyond the files"))?;
        let mut out = Vec::new();
        let mut at = offset;
        while at < end {
            let (s, off) = self.locate(at).expect("within the files");
            let n = (s.bytes - off).min(end - at);
            out.push((*s, off, n));
            at += n;
        }
        Ok(out)
    }
}

/// The object store under OFS as the controller's stack: a request is an object READ or WRITE
/// of the file it falls in.
pub struct OfsStack<F: Flash> {
    ofs: Ofs<F>,
    files: Files,
    resident: fn(&F) -> u64,
}

impl<F: Flash> OfsStack<F> {
    pub fn ofs(&self) -> &Ofs<F> {
        &self.ofs
    }
}

impl<F: Flash> Stack for OfsStack<F> {
    fn name(&self) -> &str {
        "OFS+OAQ"
    }
    fn capacity_bytes(&self) -> u64 {
        self.files.total()
    }
    fn submit(
        &mut self,
        at: Nanos,
        req: &Request,
        token: u64,
        out: &mut Vec<u64>,
    ) -> Result<Nanos, String> {
        self.ofs.set_time(at);
        out.clear();
        let store = self.ofs.store_mut();
        if req.op == Op::Flush {
            store
                .flush(osd::FlushScope::Device)
                .map_err(|e| e.to_string())?;
            return Ok(store.now().max(at));
        }
        let mut fps = Vec::new();
        for (s, off, len) in self.files.pieces(req.offset_bytes, req.len_bytes)? {
            let oid = s.file.oid();
            match req.op {
                Op::Write => store.write_token(oid, off, len, token),
                Op::Read => {
                    let r = store.read_fingerprints(oid, off, len, &mut fps);
                    out.extend_from_slice(&fps);
                    r
                }
                Op::Trim | Op::Flush => Err(osd::OsdError::InvalidArgument(
                    "the scheduled OFS path has no TRIM".into(),
                )),
            }
            .map_err(|e| e.to_string())?;
        }
        Ok(store.now().max(at))
    }
    fn background(&mut self, from: Nanos, until: Nanos) -> Result<Nanos, String> {
        self.ofs
            .store_mut()
            .background(from, until)
            .map_err(|e| e.to_string())
    }
    fn counters(&self) -> Counters {
        crate::stack::osd_counters(self.ofs.store())
    }
    fn erase_counts(&self) -> (u32, u32, f64) {
        self.ofs.store().fml().erase_counts()
    }
    fn unit_bytes(&self) -> u64 {
        self.ofs.store().unit_bytes() as u64
    }
    fn device_resident_bytes(&self) -> u64 {
        (self.resident)(self.ofs.store().fml().flash())
    }
    fn expected_fingerprint(&self, flat_unit: u64, token: u64) -> u64 {
        let unit = self.unit_bytes();
        match self.files.locate(flat_unit * unit) {
            Some((s, off)) => osd::store::unit_fingerprint(s.file.oid(), off / unit, token),
            None => 0,
        }
    }
    fn check(&mut self) -> Result<(), String> {
        let problems = self.ofs.check().map_err(|e| e.to_string())?;
        if problems.is_empty() {
            Ok(())
        } else {
            Err(problems.join("; "))
        }
    }
    fn gc_state(&self) -> GcState {
        crate::stack::gc_state_of(self.ofs.store().fml())
    }
    /// As the object store's stack: a read's dies from the store's mapping when it can tell
    /// from memory, anything else every die.
    fn dies_of(&self, req: &Request, out: &mut Vec<DieId>) {
        let store = self.ofs.store();
        if req.op == Op::Read {
            if let Ok(pieces) = self.files.pieces(req.offset_bytes, req.len_bytes) {
                let mut units = Vec::new();
                let known = pieces.iter().all(|(s, off, len)| {
                    store.peek_read_units(s.file.oid(), *off, *len, &mut units)
                });
                if known {
                    let layout = store.fml().layout();
                    for v in units {
                        out.extend((0..layout.pages_per_unit()).map(|i| layout.page(v, i).die));
                    }
                    return;
                }
            }
        }
        let dies = store.fml().flash().config().geometry.dies();
        out.extend((0..dies).map(DieId));
    }
    fn die_free_ns(&self, die: DieId) -> Nanos {
        self.ofs.store().fml().flash().die_free_ns(die)
    }
    fn gc_dies(&self, out: &mut Vec<DieId>) {
        crate::stack::gc_dies_of(self.ofs.store().fml(), None, out)
    }
}

/// What OAQ did in a run.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct HostStats {
    /// OIOs submitted to OAQ.
    pub oios: u64,
    /// OREQs dispatched to the device.
    pub oreqs: u64,
    /// OIOs merged into a queued OREQ.
    pub merges: u64,
    /// Most OREQs OAQ held at once.
    pub max_queued: usize,
    /// OREQs of the video's object dispatched at a priority above 0.
    pub prioritized_oreqs: u64,
}

/// One OIO waiting for completion.
struct Pending {
    op: Op,
    len: u64,
    arrival: Nanos,
    foreground: bool,
}

/// The host: OFS's OIOs queued in OAQ and handed to the device in priority order.
pub struct OfsHost {
    oaq: Oaq,
    /// Flat start of each file's object, by OAQ's object id.
    starts: HashMap<u64, u64>,
    /// The workload's requests as OIOs, in arrival order; `next` is the first not yet queued.
    arrivals: Vec<(Nanos, Oio, bool)>,
    next: usize,
    pending: HashMap<OioId, Pending>,
    inflight: HashMap<u64, Vec<OioId>>,
    next_tag: u64,
    depth: usize,
    deadline: Option<Nanos>,
    stats: HostStats,
}

impl OfsHost {
    /// The host for `requests` (flat, in arrival order; those with a priority above 0 are the
    /// foreground, reported as such whatever priority OAQ gives them) on `files`.
    fn new(
        oaq: Oaq,
        files: &Files,
        requests: Vec<Request>,
        deadline: Option<Nanos>,
        depth: u32,
    ) -> Result<OfsHost, String> {
        if depth == 0 {
            return Err("host.device_queue_depth must be at least 1".into());
        }
        let mut arrivals = Vec::with_capacity(requests.len());
        for r in requests {
            let dir = match r.op {
                Op::Read => Direction::Read,
                Op::Write => Direction::Write,
                op => return Err(format!("the scheduled OFS path has no {op:?}")),
            };
            let pieces = files.pieces(r.offset_bytes, r.len_bytes)?;
            let [(s, off, len)] = pieces[..] else {
                return Err(format!(
                    "request {}+{} crosses a file boundary",
                    r.offset_bytes, r.len_bytes
                ));
            };
            let oio = s.file.oio(dir, off, len, None).map_err(|e| e.to_string())?;
            arrivals.push((r.arrival_ns.unwrap_or(0), oio, r.priority > 0));
        }
        if !arrivals.windows(2).all(|w| w[0].0 <= w[1].0) {
            return Err("requests are not in arrival order".into());
        }
        Ok(OfsHost {
            oaq,
            starts: files
                .spans
                .iter()
                .map(|s| (s.file.object().0, s.start))
                .collect(),
            arrivals,
            next: 0,
            pending: HashMap::new(),
            inflight: HashMap::new(),
            next_tag: 0,
            depth: depth as usize,
            deadline,
            stats: HostStats::default(),
        })
    }

    pub fn stats(&self) -> HostStats {
        HostStats {
            merges: self.oaq.merges(),
            ..self.stats
        }
    }
}

impl Host for OfsHost {
    fn take(&mut self, t: Nanos, queued: &dyn Fn(u8) -> usize) -> Option<(Request, u64)> {
        // Everything that has arrived is in OAQ before anything leaves it, so merging sees
        // what a host queue would hold at `t`.
        while let Some(&(arrival, oio, foreground)) = self.arrivals.get(self.next) {
            if arrival > t {
                break;
            }
            self.next += 1;
            let id = self
                .oaq
                .submit(oio)
                .expect("OIOs are checked when the host is made");
            self.stats.oios += 1;
            self.pending.insert(
                id,
                Pending {
                    op: match oio.dir {
                        Direction::Read => Op::Read,
                        Direction::Write => Op::Write,
                    },
                    len: oio.sectors as u64 * ofs::oio::SECTOR_BYTES,
                    arrival,
                    foreground,
                },
            );
        }
        self.stats.max_queued = self.stats.max_queued.max(self.oaq.queued());
        let head = self.oaq.highest_queued()?;
        if queued(head.0) >= self.depth {
            return None;
        }
        let oreq = self.oaq.dispatch().expect("OAQ has a queued OREQ");
        self.stats.oreqs += 1;
        if oreq.priority > Priority(0) {
            self.stats.prioritized_oreqs += 1;
        }
        let arrival = oreq
            .oios
            .iter()
            .map(|id| self.pending[id].arrival)
            .min()
            .expect("an OREQ carries an OIO");
        let tag = self.next_tag;
        self.next_tag += 1;
        let req = Request {
            op: match oreq.dir {
                Direction::Read => Op::Read,
                Direction::Write => Op::Write,
            },
            offset_bytes: self.starts[&oreq.oid.0] + oreq.offset_sectors * ofs::oio::SECTOR_BYTES,
            len_bytes: oreq.sectors as u64 * ofs::oio::SECTOR_BYTES,
            priority: oreq.priority.0,
            arrival_ns: Some(arrival),
        };
        self.inflight.insert(tag, oreq.oios);
        Some((req, tag))
    }

    fn next_arrival(&self) -> Option<Nanos> {
        self.arrivals.get(self.next).map(|a| a.0)
    }

    fn completed(
        &mut self,
        tag: u64,
        done: Nanos,
        foreground: &mut FileStats,
        background: &mut FileStats,
    ) -> Result<(), String> {
        let oios = self
            .inflight
            .remove(&tag)
            .ok_or_else(|| format!("no OREQ in flight is tagged {tag}"))?;
        for id in oios {
            let p = self
                .pending
                .remove(&id)
                .ok_or_else(|| format!("OIO {id:?} completed twice"))?;
            let stats = if p.foreground {
                &mut *foreground
            } else {
                &mut *background
            };
            let latency = (done - p.arrival).max(1);
            let on_time = !p.foreground || self.deadline.is_none_or(|d| latency <= d);
            crate::prio::account(stats, p.op, p.len, p.arrival, done, on_time);
        }
        Ok(())
    }
}

fn gcd(a: u64, b: u64) -> u64 {
    if b == 0 {
        a
    } else {
        gcd(b, a % b)
    }
}

/// Runs a variant with `stack = "ofs"`: seed 000 VI-E's video on OFS through OAQ (see the
/// module doc). Settings: `prio.*`, `osd.*`, `fml.*` (on top of the watermarks
/// [`PrioConfig::fml_for`] derives), `oaq.*` ([`OaqConfig`]) and `host.*` ([`HostConfig`]).
/// Returns the run and what OAQ did.
pub fn run_variant(
    plan: Plan<'_>,
    v: &crate::experiment::Variant,
    device: flash::DeviceConfig,
    seed: u64,
) -> Result<(VariantRun, HostStats), String> {
    use crate::files::stacks::apply;
    let at = |e: String| format!("variant {}: {e}", v.label);
    let Plan::Video(video) = plan else {
        return Err(at(
            "stack 'ofs' runs the video workload only (kind = \"video\")".into(),
        ));
    };
    let bg = &video.background;
    bg.validate().map_err(at)?;
    let mut prio = PrioConfig::default();
    let mut osd = osd::OsdConfig::default();
    let mut oaq = OaqConfig::default();
    let mut host = HostConfig::default();
    for (k, val) in &v.set {
        match k.split_once('.') {
            Some(("prio", f)) => apply(&mut prio, f, val).map_err(at)?,
            Some(("osd", f)) => apply(&mut osd, f, val).map_err(at)?,
            Some(("oaq", f)) => apply(&mut oaq, f, val).map_err(at)?,
            Some(("host", f)) => apply(&mut host, f, val).map_err(at)?,
            Some(("fml", _)) => {}
            _ => {
                return Err(at(format!(
                    "unknown setting '{k}' (prio.*, osd.*, fml.*, oaq.*, host.*)"
                )))
            }
        }
    }
    prio.validate().map_err(at)?;
    let blocks = flash::gang::Layout::new(&device).superblocks;
    let mut fml = prio.fml_for(fml::FmlConfig::for_blocks(blocks), blocks);
    for (k, val) in &v.set {
        if let Some(("fml", f)) = k.split_once('.') {
            apply(&mut fml, f, val).map_err(at)?;
        }
    }
    let oaq = Oaq::new(oaq).map_err(|e| at(e.to_string()))?;
    let nand = flash::Nand::in_memory(device).map_err(|e| e.to_string())?;
    let store =
        osd::ObjectStore::format(nand, osd::OsdConfig { fml, ..osd }).map_err(|e| e.to_string())?;
    let unit = store.unit_bytes() as u64;
    let capacity = store.fml().capacity_units() * unit;
    let mut ofs =
        Ofs::format(store, ofs::OfsConfig::default()).map_err(|e| format!("format: {e}"))?;

    // The files: the video, then the background writer's files over the rest of the footprint.
    let grain = unit / gcd(unit, bg.request_bytes) * bg.request_bytes;
    let video_bytes = video.seconds * video.frames_per_second as u64 * video.frame_bytes;
    if video_bytes == 0 || !video_bytes.is_multiple_of(unit) {
        return Err(at(format!(
            "video of {video_bytes} bytes is not a positive multiple of the {unit}-byte write unit"
        )));
    }
    let file_bytes = host.background_file_bytes;
    if file_bytes == 0 || !file_bytes.is_multiple_of(grain) {
        return Err(at(format!(
            "host.background_file_bytes = {file_bytes} must be a positive multiple of {grain} (the write unit and the background request)"
        )));
    }
    let footprint = (capacity as f64 * bg.utilisation) as u64;
    let rest = footprint.saturating_sub(video_bytes) / grain * grain;
    if rest < footprint / 4 {
        return Err(at(format!(
            "video: {video_bytes} bytes of video leave too little of the {footprint}-byte footprint to the background writer"
        )));
    }
    let mut files = Files::default();
    let mut add = |ofs: &mut Ofs<_>, name: String, bytes: u64| -> Result<(), String> {
        let ino = ofs
            .create(vfs::ROOT, &name)
            .map_err(|e| format!("create {name}: {e}"))?;
        let file = ofs.open_scheduled(ino).map_err(|e| e.to_string())?;
        let start = files.total();
        files.spans.push(Span { start, bytes, file });
        Ok(())
    };
    add(&mut ofs, "video".into(), video_bytes)?;
    let mut left = rest;
    let mut k = 0;
    while left > 0 {
        let n = left.min(file_bytes);
        add(&mut ofs, format!("background-{k:04}"), n)?;
        left -= n;
        k += 1;
    }
    let video_ino = files.spans[0].file.ino;
    let video_object = files.spans[0].file.object();
    let mut stack = OfsStack {
        ofs,
        files,
        resident: |n: &flash::Nand| n.resident_bytes(),
    };
    let flat = stack.capacity_bytes();

    // Unmeasured set-up: write every file whole, then age the device to the cleaning
    // threshold, as the block-level variants do.
    let mut verifier = Verifier::new(flat, unit);
    let load = crate::engine::Load {
        threads: 1,
        queue_depth: 8,
        think_time_ns: 0,
    };
    let fill = crate::engine::run_closed(
        &mut stack,
        &mut crate::workload::prefill(flat, unit),
        load,
        0,
        seed ^ 0xF111,
        Some(&mut verifier),
        &mut |_| {},
    )
    .map_err(|e| format!("prefill: {e}"))?;
    let low = PrioConfig::blocks_below(prio.low_free_percent, stack.gc_state().blocks);
    let t = crate::prio::age(
        &mut stack,
        flat,
        low,
        fill.end_ns,
        seed ^ 0xA6E,
        Some(&mut verifier),
    )
    .map_err(|e| format!("aging: {e}"))?;

    // The player sets the video file's priority (the prototype's ioctl): the object's
    // attribute, and OAQ's context for the object.
    let mut oaq = oaq;
    if host.set_priority {
        stack.ofs.set_time(t);
        stack
            .ofs
            .set_priority(video_ino, video.priority)
            .map_err(|e| format!("set the video's priority: {e}"))?;
        oaq.set_object_priority(video_object, Some(Priority(video.priority)))
            .map_err(|e| at(e.to_string()))?;
    }
    let (mut requests, deadline) = crate::prio::video_requests(video, flat, t, seed)?;
    if !host.background {
        requests.retain(|r| r.priority > 0);
    }
    let mut h = OfsHost::new(
        oaq,
        &stack.files,
        requests,
        deadline,
        host.device_queue_depth,
    )
    .map_err(at)?;
    let before = stack.counters();
    let out = crate::prio::run_with(
        &mut stack,
        &prio,
        &mut std::iter::empty(),
        t,
        seed,
        Some(&mut verifier),
        None,
        None,
        Some(&mut h),
    )
    .map_err(|e| format!("measure: {e}"))?;
    if !h.pending.is_empty() || h.next < h.arrivals.len() {
        return Err(format!(
            "measure: {} OIOs never completed",
            h.pending.len() + h.arrivals.len() - h.next
        ));
    }
    if verifier.mismatches > 0 {
        return Err(format!("measure: {} reads mismatched", verifier.mismatches));
    }
    let run = crate::prio::finish(&mut stack, out, before, t)?;
    Ok((run, h.stats()))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Two files of 1 MiB on a small OFS, laid end to end.
    fn files() -> Files {
        let device = flash::preset("tiny").unwrap();
        let blocks = flash::gang::Layout::new(&device).superblocks;
        let store = osd::ObjectStore::format(
            flash::Nand::in_memory(device).unwrap(),
            osd::OsdConfig {
                fml: fml::FmlConfig::for_blocks(blocks),
                ..osd::OsdConfig::default()
            },
        )
        .unwrap();
        let mut ofs = Ofs::format(store, ofs::OfsConfig::default()).unwrap();
        let mut files = Files::default();
        for name in ["a", "b"] {
            let ino = ofs.create(vfs::ROOT, name).unwrap();
            let file = ofs.open_scheduled(ino).unwrap();
            let start = files.total();
            files.spans.push(Span {
                start,
                bytes: 1 << 20,
                file,
            });
        }
        files
    }

    fn at(op: Op, offset: u64, len: u64, priority: u8, t: Nanos) -> Request {
        Request {
            priority,
            arrival_ns: Some(t),
            ..Request::new(op, offset, len)
        }
    }

    #[test]
    fn files_locate_and_split_ranges() {
        let f = files();
        assert_eq!(f.total(), 2 << 20);
        let (s, off) = f.locate((1 << 20) + 5).unwrap();
        assert_eq!((s.file.ino, off), (f.spans[1].file.ino, 5));
        let p = f.pieces((1 << 20) - 512, 1024).unwrap();
        assert_eq!(
            p.iter().map(|(_, o, n)| (*o, *n)).collect::<Vec<_>>(),
            vec![((1 << 20) - 512, 512), (0, 512)]
        );
        assert!(f.pieces(2 << 20, 1).is_err());
        assert!(f.locate(2 << 20).is_none());
    }

    /// Contiguous reads of one file queued together leave OAQ as one OREQ; its completion
    /// accounts for each read from its own arrival; a prioritized file's OREQ overtakes; the
    /// device's full queue keeps OREQs in OAQ.
    #[test]
    fn the_host_merges_orders_and_accounts_per_oio() {
        let f = files();
        let b = 1 << 20;
        let reqs = vec![
            at(Op::Write, b, 4096, 0, 0),
            at(Op::Read, 0, 4096, 1, 1),
            at(Op::Read, 4096, 4096, 1, 2),
            at(Op::Write, b + 65536, 4096, 0, 50),
        ];
        let mut oaq = Oaq::new(OaqConfig::default()).unwrap();
        oaq.set_object_priority(f.spans[0].file.object(), Some(Priority(1)))
            .unwrap();
        let mut h = OfsHost::new(oaq, &f, reqs, Some(1000), 2).unwrap();
        let empty = |_: u8| 0;
        // At 10 the first three have arrived; the two reads merged, and go first.
        let (r, tag) = h.take(10, &empty).unwrap();
        assert_eq!(
            (r.op, r.offset_bytes, r.len_bytes, r.priority, r.arrival_ns),
            (Op::Read, 0, 8192, 1, Some(1))
        );
        assert_eq!(h.next_arrival(), Some(50));
        // The device's queue for priority 0 is full: the write stays in OAQ.
        let full = |p: u8| if p == 0 { 2 } else { 0 };
        assert!(h.take(10, &full).is_none());
        let (w, wtag) = h.take(10, &empty).unwrap();
        assert_eq!((w.op, w.offset_bytes, w.priority), (Op::Write, b, 0));
        let (mut fg, mut bg) = (FileStats::new(0), FileStats::new(0));
        h.completed(tag, 1002, &mut fg, &mut bg).unwrap();
        h.completed(wtag, 30, &mut fg, &mut bg).unwrap();
        assert!(h.completed(tag, 1002, &mut fg, &mut bg).is_err());
        // Two reads: one within its 1000 ns deadline (arrived at 2, done at 1002), one not (arrived at 1).
        assert_eq!((fg.reads, fg.read_bytes, fg.transactions), (2, 8192, 1));
        assert_eq!(fg.read_latency.max(), 1001);
        assert_eq!((bg.writes, bg.transactions), (1, 1));
        let s = h.stats();
        assert_eq!(
            (s.oios, s.oreqs, s.merges, s.prioritized_oreqs),
            (3, 2, 1, 1)
        );
        // Requests that cross a file or are not whole sectors are refused up front.
        let oaq = Oaq::new(OaqConfig::default()).unwrap();
        assert!(OfsHost::new(oaq, &f, vec![at(Op::Read, b - 512, 1024, 0, 0)], None, 1).is_err());
        let oaq = Oaq::new(OaqConfig::default()).unwrap();
        assert!(OfsHost::new(oaq, &f, vec![at(Op::Read, 0, 100, 0, 0)], None, 1).is_err());
    }
}
