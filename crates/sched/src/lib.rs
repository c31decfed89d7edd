#![deny(clippy::unwrap_used, clippy::expect_used)]
#![warn(missing_docs)]
//! OAQ, the host-side object-aware I/O scheduler of the OSSD prototype (OSSD-13 V-C).
//!
//! The object file system produces *object I/O instances* (OIOs): a read or a write of a range
//! of sectors of one object. OAQ merges them into *object requests* (OREQs) and hands OREQs to
//! the object management layer in priority order:
//!
//! - An OIO is merged into the newest queued OREQ of the same object and the same priority when
//!   it has the same direction, is contiguous to it (just after or just before its range), and
//!   the merged request stays within [`OaqConfig::max_request_sectors`] (256 sectors, the
//!   largest request the RawSSD hardware takes, OSSD-13 V-C footnote 2). Otherwise it starts a
//!   new OREQ. Merges therefore never cross objects, directions, priorities or gaps.
//! - The OREQs of one object are summarized in a per-object *I/O context*; contexts are found
//!   by object id through a hash table of [`OaqConfig::hash_buckets`] buckets (16 in the
//!   prototype).
//! - There is one FIFO queue of OREQs per priority level; [`Oaq::dispatch`] takes the head of
//!   the highest-priority non-empty queue.
//! - A priority is set per object (an attribute, as OFS sets it through `ioctl()`), and may be
//!   overridden per OIO. An OIO with neither gets priority 0.
//!
//! Ordering: OREQs of one priority leave in the order they were created. A higher-priority OREQ
//! overtakes lower-priority ones, including those of the same object; a caller that needs a
//! write to stay behind an earlier one of another priority must not mix priorities on it.

use std::collections::VecDeque;

use serde::{Deserialize, Serialize};

/// An object, as the scheduler knows it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct ObjectId(pub u64);

/// A priority level; higher is more urgent, 0 is normal.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct Priority(pub u8);

/// Direction of an I/O.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum Direction {
    /// Data from the object to the host.
    Read,
    /// Data from the host to the object.
    Write,
}

/// An object I/O instance, as the file system submits it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Oio {
    /// The object the I/O is for.
    pub oid: ObjectId,
    /// Read or write.
    pub dir: Direction,
    /// First sector (512 bytes) of the range, within the object.
    pub offset_sectors: u64,
    /// Length in sectors (512 bytes); at least 1.
    pub sectors: u32,
    /// This request's priority; `None` takes the object's.
    pub priority: Option<Priority>,
}

impl Oio {
    fn end(&self) -> u64 {
        self.offset_sectors + self.sectors as u64
    }
}

/// Names a submitted OIO, so the caller can complete it when its OREQ completes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct OioId(pub u64);

/// An object request: merged, contiguous OIOs of one object, one direction, one priority.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Oreq {
    /// The object all its OIOs are for.
    pub oid: ObjectId,
    /// Read or write (OIOs of different directions never merge).
    pub dir: Direction,
    /// First sector (512 bytes) of the merged range, within the object.
    pub offset_sectors: u64,
    /// Length of the merged range in sectors (at most `max_request_sectors`).
    pub sectors: u32,
    /// The queue it waits in: its OIOs' priority (or the object's).
    pub priority: Priority,
    /// The OIOs it carries, in the order they were merged.
    pub oios: Vec<OioId>,
}

impl Oreq {
    /// One past the last sector of the range.
    pub fn end(&self) -> u64 {
        self.offset_sectors + self.sectors as u64
    }
}

/// OAQ settings; the defaults are the prototype's (OSSD-13 V-C).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct OaqConfig {
    /// Largest merged request, in sectors (default 256, RawSSD's limit).
    pub max_request_sectors: u32,
    /// Buckets of the I/O-context hash table (default 16).
    pub hash_buckets: u32,
    /// Priority levels, 0 to `priority_levels - 1` (default 8, as Linux `ioprio` has).
    pub priority_levels: u8,
}

impl Default for OaqConfig {
    fn default() -> Self {
        OaqConfig {
            max_request_sectors: 256,
            hash_buckets: 16,
            priority_levels: 8,
        }
    }
}

/// Why OAQ refused a configuration or an OIO.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SchedError {
    /// A setting is out of range (says which).
    #[error("OAQ configuration: {0}")]
    Config(String),
    /// An OIO of zero sectors.
    #[error("an OIO of object {oid} has no sectors")]
    Empty {
        /// The object's id.
        oid: u64,
    },
    /// An OIO whose range ends past sector 2^64.
    #[error("an OIO of object {oid} ends past sector 2^64")]
    Overflow {
        /// The object's id.
        oid: u64,
    },
    /// A priority at or above the configured number of levels.
    #[error("priority {got} is beyond the {levels} levels OAQ has")]
    Priority {
        /// The priority asked for.
        got: u8,
        /// Levels OAQ has (`priority_levels`).
        levels: u8,
    },
}

/// Per-object I/O context: the object's priority attribute and its queued OREQs (oldest first).
#[derive(Debug)]
struct IoContext {
    oid: ObjectId,
    priority: Option<Priority>,
    pending: Vec<u64>,
}

/// A queued OREQ, by its creation number.
#[derive(Debug)]
struct Slot {
    oreq: Oreq,
}

/// The object-aware I/O scheduler.
#[derive(Debug)]
pub struct Oaq {
    config: OaqConfig,
    /// The hash table of I/O contexts, chained per bucket.
    buckets: Vec<Vec<IoContext>>,
    /// One FIFO of OREQ numbers per priority level.
    queues: Vec<VecDeque<u64>>,
    /// Queued OREQs by number.
    slots: std::collections::HashMap<u64, Slot>,
    next_oio: u64,
    next_oreq: u64,
    merges: u64,
}

impl Oaq {
    /// An empty OAQ; [`SchedError::Config`] if a setting is 0.
    pub fn new(config: OaqConfig) -> Result<Oaq, SchedError> {
        if config.max_request_sectors == 0 {
            return Err(SchedError::Config(
                "max_request_sectors must be at least 1".into(),
            ));
        }
        if config.hash_buckets == 0 {
            return Err(SchedError::Config("hash_buckets must be at least 1".into()));
        }
        if config.priority_levels == 0 {
            return Err(SchedError::Config(
                "priority_levels must be at least 1".into(),
            ));
        }
        Ok(Oaq {
            config,
            buckets: (0..config.hash_buckets).map(|_| Vec::new()).collect(),
            queues: (0..config.priority_levels)
                .map(|_| VecDeque::new())
                .collect(),
            slots: Default::default(),
            next_oio: 0,
            next_oreq: 0,
            merges: 0,
        })
    }

    /// The settings OAQ was made with.
    pub fn config(&self) -> &OaqConfig {
        &self.config
    }

    /// OREQs waiting for dispatch.
    pub fn queued(&self) -> usize {
        self.slots.len()
    }

    /// Whether no OREQ waits for dispatch.
    pub fn is_empty(&self) -> bool {
        self.slots.is_empty()
    }

    /// OIOs merged into an existing OREQ so far.
    pub fn merges(&self) -> u64 {
        self.merges
    }

    /// OREQs waiting in the queue of priority `p` (0 for a level OAQ does not have).
    pub fn queued_at(&self, p: Priority) -> usize {
        self.queues.get(p.0 as usize).map_or(0, |q| q.len())
    }

    /// The highest priority of any queued OREQ.
    pub fn highest_queued(&self) -> Option<Priority> {
        (0..self.queues.len())
            .rev()
            .find(|&p| !self.queues[p].is_empty())
            .map(|p| Priority(p as u8))
    }

    fn bucket(&self, oid: ObjectId) -> usize {
        // Fibonacci hashing spreads consecutive object ids over the buckets.
        let h = oid.0.wrapping_mul(0x9E37_79B9_7F4A_7C15);
        ((h >> 32) % self.buckets.len() as u64) as usize
    }

    fn context(&self, oid: ObjectId) -> Option<&IoContext> {
        self.buckets[self.bucket(oid)].iter().find(|c| c.oid == oid)
    }

    fn context_mut(&mut self, oid: ObjectId) -> &mut IoContext {
        let b = self.bucket(oid);
        let chain = &mut self.buckets[b];
        let i = match chain.iter().position(|c| c.oid == oid) {
            Some(i) => i,
            None => {
                chain.push(IoContext {
                    oid,
                    priority: None,
                    pending: Vec::new(),
                });
                chain.len() - 1
            }
        };
        &mut chain[i]
    }

    /// Drops a context that holds nothing (no attribute, no queued OREQ).
    fn tidy(&mut self, oid: ObjectId) {
        let b = self.bucket(oid);
        self.buckets[b].retain(|c| c.oid != oid || c.priority.is_some() || !c.pending.is_empty());
    }

    fn check_priority(&self, p: Priority) -> Result<(), SchedError> {
        if p.0 >= self.config.priority_levels {
            return Err(SchedError::Priority {
                got: p.0,
                levels: self.config.priority_levels,
            });
        }
        Ok(())
    }

    /// Sets (or with `None` clears) an object's priority attribute. OREQs already queued keep
    /// the priority they were queued with.
    pub fn set_object_priority(
        &mut self,
        oid: ObjectId,
        priority: Option<Priority>,
    ) -> Result<(), SchedError> {
        if let Some(p) = priority {
            self.check_priority(p)?;
        }
        self.context_mut(oid).priority = priority;
        self.tidy(oid);
        Ok(())
    }

    /// The object's priority attribute.
    pub fn object_priority(&self, oid: ObjectId) -> Option<Priority> {
        self.context(oid).and_then(|c| c.priority)
    }

    /// Queues an OIO, merging it into an OREQ when it can; returns its id.
    pub fn submit(&mut self, oio: Oio) -> Result<OioId, SchedError> {
        if oio.sectors == 0 {
            return Err(SchedError::Empty { oid: oio.oid.0 });
        }
        if oio.offset_sectors.checked_add(oio.sectors as u64).is_none() {
            return Err(SchedError::Overflow { oid: oio.oid.0 });
        }
        if let Some(p) = oio.priority {
            self.check_priority(p)?;
        }
        let id = OioId(self.next_oio);
        self.next_oio += 1;
        let max = self.config.max_request_sectors as u64;
        let ctx_priority = self.context(oio.oid).and_then(|c| c.priority);
        let priority = oio.priority.or(ctx_priority).unwrap_or(Priority(0));
        // The newest queued OREQ of this object at this priority is the merge candidate.
        let candidate = self.context(oio.oid).and_then(|c| {
            c.pending
                .iter()
                .rev()
                .copied()
                .find(|n| self.slots[n].oreq.priority == priority)
        });
        // A candidate has a slot (the search above read it).
        if let Some(r) = candidate
            .and_then(|n| self.slots.get_mut(&n))
            .map(|s| &mut s.oreq)
        {
            let fits = r.sectors as u64 + oio.sectors as u64 <= max;
            if r.dir == oio.dir && fits {
                if r.end() == oio.offset_sectors {
                    r.sectors += oio.sectors;
                    r.oios.push(id);
                    self.merges += 1;
                    return Ok(id);
                }
                if oio.end() == r.offset_sectors {
                    r.offset_sectors = oio.offset_sectors;
                    r.sectors += oio.sectors;
                    r.oios.push(id);
                    self.merges += 1;
                    return Ok(id);
                }
            }
        }
        let n = self.next_oreq;
        self.next_oreq += 1;
        self.slots.insert(
            n,
            Slot {
                oreq: Oreq {
                    oid: oio.oid,
                    dir: oio.dir,
                    offset_sectors: oio.offset_sectors,
                    sectors: oio.sectors,
                    priority,
                    oios: vec![id],
                },
            },
        );
        self.queues[priority.0 as usize].push_back(n);
        self.context_mut(oio.oid).pending.push(n);
        Ok(id)
    }

    /// Takes the OREQ at the head of the highest-priority non-empty queue.
    pub fn dispatch(&mut self) -> Option<Oreq> {
        let q = self.queues.iter_mut().rev().find(|q| !q.is_empty())?;
        let n = q.pop_front()?;
        // Every queued OREQ has a slot: submit makes both.
        let slot = self.slots.remove(&n)?;
        let oid = slot.oreq.oid;
        self.context_mut(oid).pending.retain(|&m| m != n);
        self.tidy(oid);
        Some(slot.oreq)
    }

    /// Contexts in the hash table (objects with an attribute or queued OREQs).
    pub fn contexts(&self) -> usize {
        self.buckets.iter().map(Vec::len).sum()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn oio(oid: u64, dir: Direction, off: u64, n: u32) -> Oio {
        Oio {
            oid: ObjectId(oid),
            dir,
            offset_sectors: off,
            sectors: n,
            priority: None,
        }
    }

    fn oaq() -> Oaq {
        Oaq::new(OaqConfig::default()).unwrap()
    }

    #[test]
    fn contiguous_oios_of_one_object_merge_up_to_256_sectors() {
        let mut q = oaq();
        for i in 0..40u64 {
            q.submit(oio(1, Direction::Write, i * 8, 8)).unwrap();
        }
        // 320 sectors: one OREQ of 256, one of 64.
        assert_eq!(q.queued(), 2);
        let a = q.dispatch().unwrap();
        assert_eq!((a.offset_sectors, a.sectors, a.oios.len()), (0, 256, 32));
        let b = q.dispatch().unwrap();
        assert_eq!((b.offset_sectors, b.sectors), (256, 64));
        assert!(q.dispatch().is_none());
        assert_eq!(q.contexts(), 0);
    }

    #[test]
    fn front_merge_and_no_merge_across_objects_gaps_or_directions() {
        let mut q = oaq();
        q.submit(oio(1, Direction::Read, 16, 8)).unwrap();
        q.submit(oio(1, Direction::Read, 8, 8)).unwrap(); // front merge
        q.submit(oio(2, Direction::Read, 24, 8)).unwrap(); // another object
        q.submit(oio(1, Direction::Read, 32, 8)).unwrap(); // gap
        q.submit(oio(1, Direction::Write, 40, 8)).unwrap(); // another direction
        assert_eq!(q.queued(), 4);
        let first = q.dispatch().unwrap();
        assert_eq!((first.offset_sectors, first.sectors), (8, 16));
        assert_eq!(first.oios, vec![OioId(0), OioId(1)]);
    }

    #[test]
    fn highest_priority_head_goes_first_and_fifo_within_a_level() {
        let mut q = oaq();
        q.submit(oio(1, Direction::Write, 0, 8)).unwrap();
        q.submit(oio(2, Direction::Write, 0, 8)).unwrap();
        q.set_object_priority(ObjectId(3), Some(Priority(5)))
            .unwrap();
        q.submit(oio(3, Direction::Read, 0, 8)).unwrap();
        // Per-request priority overrides the object's.
        q.submit(Oio {
            priority: Some(Priority(2)),
            ..oio(4, Direction::Read, 0, 8)
        })
        .unwrap();
        let order: Vec<(u64, u8)> = std::iter::from_fn(|| q.dispatch())
            .map(|r| (r.oid.0, r.priority.0))
            .collect();
        assert_eq!(order, vec![(3, 5), (4, 2), (1, 0), (2, 0)]);
        // The attribute outlives the queued requests.
        assert_eq!(q.object_priority(ObjectId(3)), Some(Priority(5)));
        assert_eq!(q.contexts(), 1);
    }

    #[test]
    fn different_priorities_of_one_object_do_not_merge() {
        let mut q = oaq();
        q.submit(oio(1, Direction::Read, 0, 8)).unwrap();
        q.submit(Oio {
            priority: Some(Priority(1)),
            ..oio(1, Direction::Read, 8, 8)
        })
        .unwrap();
        assert_eq!(q.queued(), 2);
        assert_eq!(q.dispatch().unwrap().priority, Priority(1));
    }

    #[test]
    fn bad_input_is_an_error_not_a_panic() {
        let mut q = oaq();
        assert_eq!(
            q.submit(oio(1, Direction::Read, 0, 0)),
            Err(SchedError::Empty { oid: 1 })
        );
        assert_eq!(
            q.submit(oio(1, Direction::Read, u64::MAX, 1)),
            Err(SchedError::Overflow { oid: 1 })
        );
        assert!(matches!(
            q.set_object_priority(ObjectId(1), Some(Priority(8))),
            Err(SchedError::Priority { got: 8, levels: 8 })
        ));
        assert!(Oaq::new(OaqConfig {
            max_request_sectors: 0,
            ..OaqConfig::default()
        })
        .is_err());
        assert!(q.is_empty());
    }

    #[test]
    fn an_oio_larger_than_the_limit_is_its_own_oreq() {
        let mut q = oaq();
        q.submit(oio(1, Direction::Write, 0, 300)).unwrap();
        q.submit(oio(1, Direction::Write, 300, 8)).unwrap();
        assert_eq!(q.queued(), 2);
        assert_eq!(q.dispatch().unwrap().sectors, 300);
    }
}
