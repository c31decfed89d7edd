//! OSSD-13 VI-E on files: the video (prioritized read) or the camcorder's files (prioritized
//! write) and the background writer's files on OFS, through the host path of the `host` crate
//! (OIOs merged and ordered in OAQ, OREQs handed to the device-side controller, run on the
//! object store under OFS). This module is the workload and its accounting:
//!
//! - the video player issues one frame read per period; the camcorder writes a file as a burst
//!   of writes, the next file once the previous one is written; the background writer makes
//!   random writes into its files;
//! - each becomes an OIO of its file ([`host::ScheduledFile::oio`]) queued in a
//!   [`host::HostQueue`];
//! - on completion every OIO is accounted for from its own arrival (a frame counts as shown
//!   when its read completed within one period).
//!
//! Filling and aging the device before the measured run write the files' objects directly
//! (unmeasured set-up, no OAQ).

use flash::Nanos;
use host::{Files, HostQueue, OfsStack, ScheduledFile};
use ofs::Ofs;
use sched::{Direction, Oaq, OaqConfig, Oio, Priority};
use vfs::FileSystem;

pub use host::{HostConfig, HostStats, PriorityBy};

use crate::engine::Verifier;
use crate::files::FileStats;

use crate::prio::{Host, Plan, VariantRun};
use crate::request::{Op, Request};
use stacks::Stack;

/// Whose an OIO is, for the accounting.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Kind {
    /// A foreground request (a frame): counted when on time.
    Foreground,
    Background,
    /// Part of a file of the prioritized writer: counted per file.
    File,
}

/// Seed 000 VI-E's prioritized writer on files: file after file (each as a burst of writes,
/// the next once the last write of the previous one completed), taking `slots` files in turn.
struct Writer {
    slots: Vec<ScheduledFile>,
    files: u64,
    next_file: u64,
    file_bytes: u64,
    request_bytes: u64,
    /// OIOs of the current file not yet completed; when it started; its last completion.
    outstanding: u64,
    file_start: Nanos,
    file_done: Nanos,
    /// The current file's OIOs not yet in OAQ, with their arrival.
    released: std::collections::VecDeque<(Nanos, Oio)>,
}

impl Writer {
    fn release(&mut self, at: Nanos) -> Result<(), String> {
        if self.next_file == self.files {
            return Ok(());
        }
        let file = self.slots[(self.next_file % self.slots.len() as u64) as usize];
        let n = self.file_bytes.div_ceil(self.request_bytes);
        for i in 0..n {
            let off = i * self.request_bytes;
            let len = self.request_bytes.min(self.file_bytes - off);
            let oio = file
                .oio(Direction::Write, off, len, None)
                .map_err(|e| e.to_string())?;
            self.released.push_back((at, oio));
        }
        self.outstanding = n;
        self.file_start = at;
        self.file_done = at;
        self.next_file += 1;
        Ok(())
    }

    /// One of the current file's OIOs completed at `done`: the file is accounted for in
    /// `stats` (one transaction, one write latency) and the next released when it was the last.
    fn completed(&mut self, done: Nanos, stats: &mut FileStats) -> Result<(), String> {
        self.file_done = self.file_done.max(done);
        self.outstanding = self
            .outstanding
            .checked_sub(1)
            .ok_or("a file write completed with none outstanding")?;
        if self.outstanding > 0 {
            return Ok(());
        }
        crate::prio::account_file(stats, self.file_bytes, self.file_start, self.file_done);
        self.release(self.file_done)
    }

    fn finished(&self) -> bool {
        self.next_file == self.files && self.outstanding == 0
    }

    /// The next OIO of the current file released by `t`, with its arrival.
    fn due(&mut self, t: Nanos) -> Option<(Nanos, Oio)> {
        if self.released.front().is_some_and(|(a, _)| *a <= t) {
            self.released.pop_front()
        } else {
            None
        }
    }
}

/// The host: the workload's requests as OIOs of OFS's files, through a [`HostQueue`].
pub struct OfsHost<'a> {
    queue: HostQueue<Kind>,
    files: Files,
    /// The workload's requests (flat, in arrival order; those with a priority above 0 are the
    /// foreground), and the next one.
    incoming: Box<dyn Iterator<Item = Request> + 'a>,
    ahead: Option<Request>,
    last_arrival: Nanos,
    writer: Option<Writer>,
    /// The priority each foreground OIO carries itself (`PriorityBy::Request`).
    request_priority: Option<Priority>,
    deadline: Option<Nanos>,
}

impl<'a> OfsHost<'a> {
    /// The host for `requests` on `files`, the OREQs it hands the device limited to `depth`
    /// queued per priority; frames count as shown within `deadline`.
    fn new(
        oaq: Oaq,
        files: Files,
        requests: Box<dyn Iterator<Item = Request> + 'a>,
        deadline: Option<Nanos>,
        depth: u32,
    ) -> Result<OfsHost<'a>, String> {
        let queue = HostQueue::new(oaq, &files, depth).map_err(|e| e.to_string())?;
        let mut incoming = requests;
        let ahead = incoming.next();
        Ok(OfsHost {
            queue,
            files,
            incoming,
            ahead,
            last_arrival: 0,
            writer: None,
            request_priority: None,
            deadline,
        })
    }

    /// Adds the prioritized file writer, its first file released at `start`.
    fn with_writer(
        mut self,
        f: &crate::prio::FileWrites,
        slots: Vec<ScheduledFile>,
        start: Nanos,
    ) -> Result<Self, String> {
        if slots.is_empty() {
            return Err("file-writes: no file slots".into());
        }
        let mut w = Writer {
            slots,
            files: f.files,
            next_file: 0,
            file_bytes: f.file_bytes,
            request_bytes: f.request_bytes,
            outstanding: 0,
            file_start: start,
            file_done: start,
            released: Default::default(),
        };
        w.release(start)?;
        self.writer = Some(w);
        Ok(self)
    }

    /// What OAQ did.
    pub fn stats(&self) -> HostStats {
        self.queue.stats()
    }

    /// The OIO of a workload request: one file's range.
    fn oio_of(&self, r: &Request) -> Result<Oio, String> {
        let dir = match r.op {
            Op::Read => Direction::Read,
            Op::Write => Direction::Write,
            op => return Err(format!("the scheduled OFS path has no {op:?}")),
        };
        let pieces = self
            .files
            .pieces(r.offset_bytes, r.len_bytes)
            .map_err(|e| e.to_string())?;
        let [(s, off, len)] = pieces[..] else {
            return Err(format!(
                "request {}+{} crosses a file boundary",
                r.offset_bytes, r.len_bytes
            ));
        };
        s.file.oio(dir, off, len, None).map_err(|e| e.to_string())
    }

    fn queue(&mut self, mut oio: Oio, arrival: Nanos, kind: Kind) -> Result<(), String> {
        if kind != Kind::Background {
            oio.priority = oio.priority.or(self.request_priority);
        }
        self.queue
            .submit(oio, arrival, kind)
            .map_err(|e| e.to_string())
    }
}

impl Host for OfsHost<'_> {
    fn take(
        &mut self,
        t: Nanos,
        queued: &dyn Fn(u8) -> usize,
    ) -> Result<Option<(Request, u64)>, String> {
        // Everything that has arrived is in OAQ before anything leaves it, so merging sees
        // what a host queue would hold at `t`.
        while let Some(r) = self.ahead.filter(|r| r.arrival_ns.unwrap_or(0) <= t) {
            let arrival = r.arrival_ns.unwrap_or(0);
            if arrival < self.last_arrival {
                return Err("requests are not in arrival order".into());
            }
            self.last_arrival = arrival;
            self.ahead = self.incoming.next();
            let oio = self.oio_of(&r)?;
            let kind = if r.priority > 0 {
                Kind::Foreground
            } else {
                Kind::Background
            };
            self.queue(oio, arrival, kind)?;
        }
        while let Some((arrival, oio)) = self.writer.as_mut().and_then(|w| w.due(t)) {
            self.queue(oio, arrival, Kind::File)?;
        }
        self.queue.dispatch(queued).map_err(|e| e.to_string())
    }

    fn next_arrival(&self) -> Option<Nanos> {
        let a = self.ahead.map(|r| r.arrival_ns.unwrap_or(0));
        let w = self
            .writer
            .as_ref()
            .and_then(|w| w.released.front())
            .map(|x| x.0);
        match (a, w) {
            (Some(a), Some(w)) => Some(a.min(w)),
            (a, w) => a.or(w),
        }
    }

    fn completed(
        &mut self,
        tag: u64,
        done: Nanos,
        foreground: &mut FileStats,
        background: &mut FileStats,
    ) -> Result<(), String> {
        for p in self.queue.completed(tag).map_err(|e| e.to_string())? {
            let latency = (done - p.arrival).max(1);
            match p.class {
                Kind::File => self
                    .writer
                    .as_mut()
                    .ok_or("a file write without its writer")?
                    .completed(done, foreground)?,
                Kind::Foreground => {
                    let on_time = self.deadline.is_none_or(|d| latency <= d);
                    crate::prio::account(foreground, p.op, p.len, p.arrival, done, on_time)
                }
                Kind::Background => {
                    crate::prio::account(background, p.op, p.len, p.arrival, done, true)
                }
            }
        }
        Ok(())
    }

    fn finished(&self) -> bool {
        self.writer.as_ref().is_some_and(Writer::finished)
    }
}

fn gcd(a: u64, b: u64) -> u64 {
    if b == 0 {
        a
    } else {
        gcd(b, a % b)
    }
}

/// Runs a variant with `stack = "ofs"`: seed 000 VI-E's video, or its prioritized file writer,
/// on OFS through OAQ (see the module doc). Settings: `prio.*`, `osd.*`, `fml.*` (on top of
/// the watermarks [`stacks::controlled_fml`] derives), `oaq.*` ([`OaqConfig`]) and `host.*`
/// ([`HostConfig`]). Returns the run and what OAQ did.
pub fn run_variant(
    plan: Plan<'_>,
    v: &crate::experiment::Variant,
    device: flash::DeviceConfig,
    seed: u64,
) -> Result<(VariantRun, HostStats), String> {
    let at = |e: String| format!("variant {}: {e}", v.label);
    let bg = match plan {
        Plan::Video(video) => &video.background,
        Plan::FileWrites(f) => &f.background,
        Plan::Synthetic(_) => {
            return Err(at(
                "stack 'ofs' runs the video and file-writes workloads only".into(),
            ))
        }
    };
    bg.validate().map_err(at)?;
    let mut oaq = OaqConfig::default();
    let mut host = HostConfig::default();
    let (prio, spec) = crate::prio::scheduled_spec(v, |k, val| match k.split_once('.') {
        Some(("oaq", f)) => stacks::apply(&mut oaq, f, val).map(|()| true),
        Some(("host", f)) => stacks::apply(&mut host, f, val).map(|()| true),
        _ => Ok(false),
    })?;
    let mut oaq = Oaq::new(oaq).map_err(|e| at(e.to_string()))?;
    let store = spec.object_store(device).map_err(|e| at(e.to_string()))?;
    let unit = store.unit_bytes() as u64;
    let capacity = store.fml().capacity_units() * unit;
    let mut ofs = Ofs::format(store, spec.ofs).map_err(|e| format!("format: {e}"))?;

    // The files: the foreground's (the video, or the writer's file slots), then the
    // background writer's files over the rest of the footprint.
    let footprint = (capacity as f64 * bg.utilisation) as u64;
    let (front, front_name, front_bytes, priority) = match plan {
        Plan::Video(video) => {
            let bytes = video.seconds * video.frames_per_second as u64 * video.frame_bytes;
            (1, "video", bytes, video.priority)
        }
        Plan::FileWrites(f) => {
            crate::prio::file_writes_region(f, footprint).map_err(at)?;
            (f.file_slots, "file", f.file_bytes, f.priority)
        }
        Plan::Synthetic(_) => unreachable!("refused above"),
    };
    if front_bytes == 0 || !front_bytes.is_multiple_of(unit) {
        return Err(at(format!(
            "a {front_name} of {front_bytes} bytes is not a positive multiple of the {unit}-byte write unit"
        )));
    }
    let front_total = front
        .checked_mul(front_bytes)
        .ok_or_else(|| at("the foreground's files overflow".into()))?;
    let grain = unit / gcd(unit, bg.request_bytes) * bg.request_bytes;
    let file_bytes = host.background_file_bytes;
    if file_bytes == 0 || !file_bytes.is_multiple_of(grain) {
        return Err(at(format!(
            "host.background_file_bytes = {file_bytes} must be a positive multiple of {grain} (the write unit and the background request)"
        )));
    }
    let rest = footprint.saturating_sub(front_total) / grain * grain;
    if rest < footprint / 4 {
        return Err(at(format!(
            "{front_total} bytes of {front_name}s leave too little of the {footprint}-byte footprint to the background writer"
        )));
    }
    let mut files = Files::default();
    let mut add = |ofs: &mut Ofs<_>, name: String, bytes: u64| -> Result<(), String> {
        let ino = ofs
            .create(vfs::ROOT, &name)
            .map_err(|e| format!("create {name}: {e}"))?;
        let file = ScheduledFile::open(ofs, ino).map_err(|e| e.to_string())?;
        files.push(file, bytes);
        Ok(())
    };
    for k in 0..front {
        add(&mut ofs, format!("{front_name}-{k:04}"), front_bytes)?;
    }
    let mut left = rest;
    let mut k = 0;
    while left > 0 {
        let n = left.min(file_bytes);
        add(&mut ofs, format!("background-{k:04}"), n)?;
        left -= n;
        k += 1;
    }
    let foreground: Vec<ScheduledFile> = files.spans()[..front as usize]
        .iter()
        .map(|s| s.file)
        .collect();
    let mut stack = OfsStack::new(ofs, files, |n: &flash::Nand| n.resident_bytes());
    let flat = stack.capacity_bytes();

    // Unmeasured set-up: write every file whole, then age the device to the cleaning
    // threshold, as the block-level variants do.
    let mut verifier = Verifier::new(flat, unit);
    let t =
        crate::prio::fill_and_age(&mut stack, flat, prio.low_free_percent, seed, &mut verifier)?;

    // The application sets its files' priority (the prototype's ioctl): the objects'
    // attribute, and OAQ's context for each object.
    if host.priority == PriorityBy::File {
        stack.ofs_mut().set_time(t);
        for f in &foreground {
            stack
                .ofs_mut()
                .set_priority(f.ino, priority)
                .map_err(|e| format!("set the priority of inode {}: {e}", f.ino))?;
            oaq.set_object_priority(f.object(), Some(Priority(priority)))
                .map_err(|e| at(e.to_string()))?;
        }
    }
    let files = stack.files().clone();
    // The background writer of a file-writes run arrives until the last file is done.
    let endless = crate::prio::Synthetic {
        requests: if host.background { u64::MAX } else { 0 },
        priority_percent: 0.0,
        ..bg.clone()
    };
    let mut h = match plan {
        Plan::Video(video) => {
            let (mut requests, deadline) = crate::prio::video_requests(video, flat, t, seed)?;
            if !host.background {
                requests.retain(|r| r.priority > 0);
            }
            let requests = Box::new(requests.into_iter());
            OfsHost::new(oaq, files, requests, deadline, host.device_queue_depth).map_err(at)?
        }
        Plan::FileWrites(f) => {
            let requests = endless.requests(rest, t, seed).map(move |r| Request {
                offset_bytes: r.offset_bytes + front_total,
                ..r
            });
            OfsHost::new(
                oaq,
                files,
                Box::new(requests),
                None,
                host.device_queue_depth,
            )
            .map_err(at)?
            .with_writer(f, foreground, t)
            .map_err(at)?
        }
        Plan::Synthetic(_) => unreachable!("refused above"),
    };
    if host.priority == PriorityBy::Request {
        h.request_priority = Some(Priority(priority));
    }
    let before = stack.counters();
    let mut nothing = std::iter::empty();
    let arrivals = crate::prio::Arrivals::new(&mut nothing, t, None).with_host(&mut h);
    let out = crate::prio::run_with(&mut stack, &prio, arrivals, t, seed, Some(&mut verifier))
        .map_err(|e| format!("measure: {e}"))?;
    let done = h.writer.as_ref().is_none_or(Writer::finished);
    let outstanding = h.queue.outstanding();
    if !done || (h.writer.is_none() && (outstanding > 0 || h.ahead.is_some())) {
        return Err(format!("measure: {outstanding} OIOs never completed"));
    }
    if verifier.mismatches > 0 {
        return Err(format!("measure: {} reads mismatched", verifier.mismatches));
    }
    let stats = h.stats();
    let run = crate::prio::finish(&mut stack, out, before, t)?;
    Ok((run, stats))
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
            files.push(ScheduledFile::open(&mut ofs, ino).unwrap(), 1 << 20);
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
        oaq.set_object_priority(f.spans()[0].file.object(), Some(Priority(1)))
            .unwrap();
        let mut h =
            OfsHost::new(oaq, f.clone(), Box::new(reqs.into_iter()), Some(1000), 2).unwrap();
        let empty = |_: u8| 0;
        // At 10 the first three have arrived; the two reads merged, and go first.
        let (r, tag) = h.take(10, &empty).unwrap().unwrap();
        assert_eq!(
            (r.op, r.offset_bytes, r.len_bytes, r.priority, r.arrival_ns),
            (Op::Read, 0, 8192, 1, Some(1))
        );
        assert_eq!(h.next_arrival(), Some(50));
        // The device's queue for priority 0 is full: the write stays in OAQ.
        let full = |p: u8| if p == 0 { 2 } else { 0 };
        assert!(h.take(10, &full).unwrap().is_none());
        let (w, wtag) = h.take(10, &empty).unwrap().unwrap();
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
        // Requests that cross a file or are not whole sectors are refused with an error.
        for bad in [
            at(Op::Read, b - 512, 1024, 0, 0),
            at(Op::Read, 0, 100, 0, 0),
        ] {
            let oaq = Oaq::new(OaqConfig::default()).unwrap();
            let reqs = Box::new(std::iter::once(bad));
            let mut h = OfsHost::new(oaq, f.clone(), reqs, None, 1).unwrap();
            assert!(h.take(0, &empty).is_err());
        }
    }

    /// A per-request priority puts the foreground's OIOs ahead without any object attribute;
    /// background OIOs keep 0.
    #[test]
    fn a_request_priority_tags_the_foreground_oios() {
        let f = files();
        let reqs = vec![
            at(Op::Write, 1 << 20, 4096, 0, 0),
            at(Op::Read, 0, 4096, 1, 1),
        ];
        let oaq = Oaq::new(OaqConfig::default()).unwrap();
        let mut h = OfsHost::new(oaq, f.clone(), Box::new(reqs.into_iter()), None, 8).unwrap();
        h.request_priority = Some(Priority(2));
        let empty = |_: u8| 0;
        let (r, _) = h.take(5, &empty).unwrap().unwrap();
        assert_eq!((r.op, r.priority), (Op::Read, 2));
        let (w, _) = h.take(5, &empty).unwrap().unwrap();
        assert_eq!((w.op, w.priority), (Op::Write, 0));
        // A priority OAQ has no level for is an error, not a panic.
        let oaq = Oaq::new(OaqConfig::default()).unwrap();
        let reqs = Box::new(std::iter::once(at(Op::Read, 0, 4096, 1, 0)));
        let mut h = OfsHost::new(oaq, f.clone(), reqs, None, 8).unwrap();
        h.request_priority = Some(Priority(200));
        assert!(h.take(0, &empty).is_err());
    }

    /// The prioritized writer releases a file's writes when the previous file is done, and
    /// accounts for each file once, from its release to its last write's completion.
    #[test]
    fn the_writer_chains_files_and_accounts_per_file() {
        let f = files();
        let w = crate::prio::FileWrites {
            files: 3,
            file_bytes: 8192,
            request_bytes: 4096,
            file_slots: 2,
            ..crate::prio::FileWrites::default()
        };
        let oaq = Oaq::new(OaqConfig::default()).unwrap();
        let slots = vec![f.spans()[0].file, f.spans()[1].file];
        let mut h = OfsHost::new(oaq, f.clone(), Box::new(std::iter::empty()), None, 8)
            .unwrap()
            .with_writer(&w, slots, 100)
            .unwrap();
        let empty = |_: u8| 0;
        let (mut fg, mut bg) = (FileStats::new(0), FileStats::new(0));
        let mut t = 100;
        let mut offsets = Vec::new();
        while !h.finished() {
            // Both writes of a file merge into one OREQ (contiguous, same object).
            let (r, tag) = h.take(t, &empty).unwrap().unwrap();
            assert!(h.take(t, &empty).unwrap().is_none());
            offsets.push((r.offset_bytes, r.len_bytes));
            t += 1000;
            h.completed(tag, t, &mut fg, &mut bg).unwrap();
        }
        // Files take the two slots in turn: the third overwrites the first.
        assert_eq!(offsets, vec![(0, 8192), (1 << 20, 8192), (0, 8192)]);
        assert_eq!((fg.transactions, fg.write_bytes), (3, 3 * 8192));
        assert_eq!(fg.write_latency.len(), 3);
        assert_eq!(fg.write_latency.max(), 1000);
        assert_eq!(bg.writes, 0);
    }
}
