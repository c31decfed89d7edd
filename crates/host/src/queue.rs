//! The host's queue in front of the device: OIOs merged and ordered in OAQ, handed to the
//! device-side controller one OREQ at a time while the device's queue for its priority has
//! room (OSSD-13 §IV-C, VI-E).

use std::collections::HashMap;

use controller::request::{Op, Request};
use flash::Nanos;
use sched::{Direction, Oaq, Oio, OioId, Priority};
use serde::{Deserialize, Serialize};

use crate::error::HostError;
use crate::file::SECTOR_BYTES;
use crate::files::Files;

/// How an application gives its files' I/O priority (OSSD-13 V-C: "Priority set per object
/// (attribute) and per request").
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum PriorityBy {
    /// Through OFS before the run (the prototype's `ioctl()`): the files' objects' `Priority`
    /// attribute, registered with OAQ; the device also places the objects' writes as real-time.
    File,
    /// On each of its requests (as Linux `ioprio_set()` tags a process's I/O): every OIO of
    /// the files carries the priority, the objects keep priority 0.
    Request,
    /// Not at all: the paper's "OFS (normal)", every OREQ at priority 0.
    None,
}

/// Settings of the host side (`host.*`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct HostConfig {
    /// How the prioritized application gives its I/O priority (default `file`).
    pub priority: PriorityBy,
    /// Requests the device queues per priority class; the rest wait in OAQ (default 32, a SATA
    /// NCQ's depth).
    pub device_queue_depth: u32,
    /// Bytes of each background file of the lab's OFS runs (default 8 MiB, RawSSD's virtual
    /// erase block; the last file takes what is left). A multiple of the background request.
    pub background_file_bytes: u64,
    /// Whether the lab's background writer runs beside the prioritized application (default
    /// true). False is a reference: the same aged device, the application alone.
    pub background: bool,
}

impl Default for HostConfig {
    fn default() -> Self {
        HostConfig {
            priority: PriorityBy::File,
            device_queue_depth: 32,
            background_file_bytes: 8 << 20,
            background: true,
        }
    }
}

/// What OAQ did.
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
    /// OREQs dispatched at a priority above 0.
    pub prioritized_oreqs: u64,
}

/// One OIO waiting for completion, with the caller's class for its accounting.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Pending<C> {
    /// Read or write.
    pub op: Op,
    /// Bytes.
    pub len: u64,
    /// When it arrived at the host.
    pub arrival: Nanos,
    /// Whose it is, as the caller submitted it.
    pub class: C,
}

/// OAQ in front of the device, for the files of a flat space ([`Files`]).
pub struct HostQueue<C> {
    oaq: Oaq,
    /// Flat start of each file's object, by OAQ's object id.
    starts: HashMap<u64, u64>,
    pending: HashMap<OioId, Pending<C>>,
    inflight: HashMap<u64, Vec<OioId>>,
    next_tag: u64,
    depth: usize,
    stats: HostStats,
}

impl<C: Copy> HostQueue<C> {
    /// OAQ in front of a device that queues at most `depth` requests per priority, for `files`.
    pub fn new(oaq: Oaq, files: &Files, depth: u32) -> Result<Self, HostError> {
        if depth == 0 {
            return Err(HostError::QueueDepth);
        }
        Ok(HostQueue {
            oaq,
            starts: files
                .spans()
                .iter()
                .map(|s| (s.file.object().0, s.start))
                .collect(),
            pending: HashMap::new(),
            inflight: HashMap::new(),
            next_tag: 0,
            depth: depth as usize,
            stats: HostStats::default(),
        })
    }

    /// OAQ itself, to register an object's priority.
    pub fn oaq_mut(&mut self) -> &mut Oaq {
        &mut self.oaq
    }

    /// Queues `oio`, arrived at `arrival`, of `class`.
    pub fn submit(&mut self, oio: Oio, arrival: Nanos, class: C) -> Result<(), HostError> {
        let id = self.oaq.submit(oio)?;
        self.stats.oios += 1;
        let op = match oio.dir {
            Direction::Read => Op::Read,
            Direction::Write => Op::Write,
        };
        let len = oio.sectors as u64 * SECTOR_BYTES;
        self.pending.insert(
            id,
            Pending {
                op,
                len,
                arrival,
                class,
            },
        );
        self.stats.max_queued = self.stats.max_queued.max(self.oaq.queued());
        Ok(())
    }

    /// OAQ's head as the device's next request, if the device's queue for its priority has
    /// room (`queued(priority)` is how many requests that queue holds), with the tag that
    /// names it in [`HostQueue::completed`]. Its arrival is its earliest OIO's.
    pub fn dispatch(
        &mut self,
        queued: &dyn Fn(u8) -> usize,
    ) -> Result<Option<(Request, u64)>, HostError> {
        let Some(head) = self.oaq.highest_queued() else {
            return Ok(None);
        };
        if queued(head.0) >= self.depth {
            return Ok(None);
        }
        let Some(oreq) = self.oaq.dispatch() else {
            return Ok(None);
        };
        self.stats.oreqs += 1;
        if oreq.priority > Priority(0) {
            self.stats.prioritized_oreqs += 1;
        }
        let arrival = oreq
            .oios
            .iter()
            .filter_map(|id| self.pending.get(id).map(|p| p.arrival))
            .min()
            .ok_or(HostError::UnqueuedOreq { object: oreq.oid.0 })?;
        let start = self
            .starts
            .get(&oreq.oid.0)
            .ok_or(HostError::NotAFile { object: oreq.oid.0 })?;
        let tag = self.next_tag;
        self.next_tag += 1;
        let req = Request {
            op: match oreq.dir {
                Direction::Read => Op::Read,
                Direction::Write => Op::Write,
            },
            offset_bytes: start + oreq.offset_sectors * SECTOR_BYTES,
            len_bytes: oreq.sectors as u64 * SECTOR_BYTES,
            priority: oreq.priority.0,
            arrival_ns: Some(arrival),
        };
        self.inflight.insert(tag, oreq.oios);
        Ok(Some((req, tag)))
    }

    /// The request tagged `tag` completed: every OIO it carried, each once.
    pub fn completed(&mut self, tag: u64) -> Result<Vec<Pending<C>>, HostError> {
        let oios = self
            .inflight
            .remove(&tag)
            .ok_or(HostError::UnknownTag(tag))?;
        oios.into_iter()
            .map(|id| {
                self.pending
                    .remove(&id)
                    .ok_or(HostError::CompletedTwice(id))
            })
            .collect()
    }

    /// OIOs submitted and not yet completed.
    pub fn outstanding(&self) -> usize {
        self.pending.len()
    }

    /// What OAQ did so far.
    pub fn stats(&self) -> HostStats {
        HostStats {
            merges: self.oaq.merges(),
            ..self.stats
        }
    }
}
