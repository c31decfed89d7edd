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
use host::{Files, HostQueue, ScheduledFile};
use sched::{Direction, Oaq, Oio, Priority};

pub use host::{HostConfig, HostStats, PriorityBy};

use workload::files::FileStats;

use crate::failure::Failure;
pub use crate::failure::OfsHostError;
use crate::prio::Host;
use crate::request::{Op, Request};

/// Whose an OIO is, for the accounting.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Kind {
    /// A foreground request (a frame): counted when on time.
    Foreground,
    Background,
    /// Part of a file of the prioritized writer: counted per file.
    File,
}

/// OSSD-13 VI-E's prioritized writer on files: file after file (each as a burst of writes,
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
    fn release(&mut self, at: Nanos) -> Result<(), OfsHostError> {
        if self.next_file == self.files {
            return Ok(());
        }
        let file = self.slots[(self.next_file % self.slots.len() as u64) as usize];
        let n = self.file_bytes.div_ceil(self.request_bytes);
        for i in 0..n {
            let off = i * self.request_bytes;
            let len = self.request_bytes.min(self.file_bytes - off);
            let oio = file.oio(Direction::Write, off, len, None)?;
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
    fn completed(&mut self, done: Nanos, stats: &mut FileStats) -> Result<(), OfsHostError> {
        self.file_done = self.file_done.max(done);
        self.outstanding = self
            .outstanding
            .checked_sub(1)
            .ok_or(OfsHostError::NoneOutstanding)?;
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
    pub(crate) fn new(
        oaq: Oaq,
        files: Files,
        requests: Box<dyn Iterator<Item = Request> + 'a>,
        deadline: Option<Nanos>,
        depth: u32,
    ) -> Result<OfsHost<'a>, OfsHostError> {
        let queue = HostQueue::new(oaq, &files, depth)?;
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
    pub(crate) fn with_writer(
        mut self,
        f: &crate::prio::FileWrites,
        slots: Vec<ScheduledFile>,
        start: Nanos,
    ) -> Result<Self, OfsHostError> {
        if slots.is_empty() {
            return Err(OfsHostError::NoSlots);
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

    /// Every foreground OIO carries `priority` itself (`PriorityBy::Request`).
    pub(crate) fn set_request_priority(&mut self, priority: Priority) {
        self.request_priority = Some(priority);
    }

    /// OIOs submitted and not yet completed.
    pub(crate) fn outstanding(&self) -> usize {
        self.queue.outstanding()
    }

    /// Whether the measured run is complete: the prioritized writer's last file written, or
    /// without a writer every request arrived and completed.
    pub(crate) fn all_done(&self) -> bool {
        match &self.writer {
            Some(w) => w.finished(),
            None => self.queue.outstanding() == 0 && self.ahead.is_none(),
        }
    }

    /// What OAQ did.
    pub fn stats(&self) -> HostStats {
        self.queue.stats()
    }

    /// The OIO of a workload request: one file's range.
    fn oio_of(&self, r: &Request) -> Result<Oio, OfsHostError> {
        let dir = match r.op {
            Op::Read => Direction::Read,
            Op::Write => Direction::Write,
            op => return Err(OfsHostError::Op { op }),
        };
        let pieces = self.files.pieces(r.offset_bytes, r.len_bytes)?;
        let [(s, off, len)] = pieces[..] else {
            return Err(OfsHostError::CrossesFiles {
                offset: r.offset_bytes,
                len: r.len_bytes,
            });
        };
        Ok(s.file.oio(dir, off, len, None)?)
    }

    fn queue(&mut self, mut oio: Oio, arrival: Nanos, kind: Kind) -> Result<(), OfsHostError> {
        if kind != Kind::Background {
            oio.priority = oio.priority.or(self.request_priority);
        }
        Ok(self.queue.submit(oio, arrival, kind)?)
    }
}

impl Host for OfsHost<'_> {
    fn take(
        &mut self,
        t: Nanos,
        queued: &dyn Fn(u8) -> usize,
    ) -> Result<Option<(Request, u64)>, Failure> {
        // Everything that has arrived is in OAQ before anything leaves it, so merging sees
        // what a host queue would hold at `t`.
        while let Some(r) = self.ahead.filter(|r| r.arrival_ns.unwrap_or(0) <= t) {
            let arrival = r.arrival_ns.unwrap_or(0);
            if arrival < self.last_arrival {
                return Err(OfsHostError::ArrivalOrder.into());
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
        Ok(self.queue.dispatch(queued).map_err(OfsHostError::from)?)
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
    ) -> Result<(), Failure> {
        for p in self.queue.completed(tag).map_err(OfsHostError::from)? {
            let latency = (done - p.arrival).max(1);
            match p.class {
                Kind::File => self
                    .writer
                    .as_mut()
                    .ok_or(OfsHostError::NoWriter)?
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

#[cfg(test)]
mod tests {
    use super::*;
    use ofs::Ofs;
    use sched::OaqConfig;
    use vfs::FileSystem;
    use vfs::FsError;

    /// Two files of 1 MiB on a small OFS, laid end to end.
    fn files() -> Files {
        // The one builder's object store, with the FML sized for the device.
        let spec = stacks::StackSpec::new(stacks::StackKind::Ofs);
        let store = spec.object_store(flash::preset("tiny").unwrap()).unwrap();
        let mut ofs = Ofs::format(store, spec.ofs).unwrap();
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
            assert!(matches!(
                h.take(0, &empty),
                Err(Failure::Host(
                    OfsHostError::CrossesFiles { .. } | OfsHostError::Fs(FsError::Invalid(_))
                ))
            ));
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
