//! The block-level stacks the engine and the controller drive, behind one narrow trait: the
//! page-mapping FTL (or DFTL) and the object store with the byte space cut into objects.

use flash::{DieId, Flash, Nanos};
use ftl::{Data, Ftl, FtlError, ReadOut};
use osd::OsdError;
use vfs::FsError;

use controller::request::{Op, Request};

use crate::counters::{ftl_counters, osd_counters, Counters};

/// Why a block-level stack failed a request, its background work or its check.
#[derive(Debug, thiserror::Error)]
pub enum StackFault {
    /// The page-mapping FTL (or DFTL) failed.
    #[error(transparent)]
    Ftl(#[from] FtlError),
    /// The object store failed.
    #[error(transparent)]
    Osd(#[from] OsdError),
    /// A file system above the store failed (OFS's check, for the host's stack).
    #[error(transparent)]
    Fs(#[from] FsError),
    /// The consistency check found problems (what each layer's check reports, one per line).
    #[error("{}", .problems.join("; "))]
    Inconsistent {
        /// The problems found.
        problems: Vec<String>,
    },
    /// A stack defined outside this crate failed with an error of its own (the `host` crate's
    /// OFS through OAQ, for a range outside its files).
    #[error(transparent)]
    Other(Box<dyn std::error::Error + Send + Sync>),
}

/// What the engine needs from a stack under test.
pub trait Stack {
    /// The name reports give the stack.
    fn name(&self) -> &str;
    /// Bytes of the logical space the stack exports (what a workload may address).
    fn capacity_bytes(&self) -> u64;
    /// Serves one request issued at `at`; returns when it completes. `token` stands for a
    /// write's bytes (fingerprint mode); `out` collects read fingerprints, one per unit.
    fn submit(
        &mut self,
        at: Nanos,
        req: &Request,
        token: u64,
        out: &mut Vec<u64>,
    ) -> Result<Nanos, StackFault>;
    /// Background work (GC) in an idle interval; returns when the last step completes.
    fn background(&mut self, from: Nanos, until: Nanos) -> Result<Nanos, StackFault>;
    /// The stack's counters so far (they only grow; subtract two to measure a phase).
    fn counters(&self) -> Counters;
    /// Erase counts over usable blocks: (min, max, mean).
    fn erase_counts(&self) -> (u32, u32, f64);
    /// Bytes of the write unit (the FTL's logical page).
    fn unit_bytes(&self) -> u64;
    /// Bytes of memory the device model holds.
    fn device_resident_bytes(&self) -> u64;
    /// The fingerprint a whole write unit (numbered in the flat byte space) holds after a write
    /// with `token` covered it entirely.
    fn expected_fingerprint(&self, flat_unit: u64, token: u64) -> u64;
    /// Whole-structure consistency check.
    fn check(&mut self) -> Result<(), StackFault>;
    /// Free space and GC progress, for the device-side controller's cleaning thresholds.
    fn gc_state(&self) -> GcState;
    /// The dies a request would use if issued now (BLOCKMGMT-09 3.2's parallel elements); nothing
    /// when the stack cannot tell.
    fn dies_of(&self, _req: &Request, _out: &mut Vec<DieId>) {}
    /// When a die finishes the work issued to it so far.
    fn die_free_ns(&self, die: DieId) -> Nanos;
    /// The dies the next GC step would use; nothing when the stack cannot tell.
    fn gc_dies(&self, _out: &mut Vec<DieId>) {}
    /// A copy of the stack and its device, state for state, for a lab that ages a device once
    /// and measures several variants on copies of it; `None` when the stack cannot be copied.
    fn clone_stack(&self) -> Option<Box<dyn Stack + Send + Sync>> {
        None
    }
}

use controller::GcState;

/// The dies of the pages of write units `units`.
pub fn dies_of_units(
    layout: &flash::gang::Layout,
    units: &[flash::gang::Vpa],
    out: &mut Vec<DieId>,
) {
    for &v in units {
        out.extend((0..layout.pages_per_unit()).map(|i| layout.page(v, i).die));
    }
}

/// The dies of the FML's next GC step: a copy's source unit (and its destination, when the
/// caller knows it), or every block of the victim an erase clears.
pub fn gc_dies_of<F: Flash>(
    fml: &fml::Fml<F>,
    dest: Option<flash::gang::Vpa>,
    out: &mut Vec<DieId>,
) {
    let layout = fml.layout();
    match fml.next_gc_step() {
        fml::NextGc::Choose => {}
        fml::NextGc::Copy { from } => {
            for v in std::iter::once(from).chain(dest) {
                out.extend((0..layout.pages_per_unit()).map(|i| layout.page(v, i).die));
            }
        }
        fml::NextGc::Erase { victim } => out.extend(layout.blocks(victim).map(|b| b.die)),
    }
}

/// Free blocks, usable blocks and whether a GC job is under way, of an FML.
pub fn gc_state_of<F: Flash>(fml: &fml::Fml<F>) -> GcState {
    GcState {
        free_blocks: fml.free_blocks(),
        blocks: fml.blocks().len() as u32,
        collecting: fml.job() != fml::GcJob::Idle,
    }
}

/// A [`Ftl`] (page-mapping or DFTL) as a stack.
#[derive(Clone)]
pub struct FtlStack<F: Flash> {
    /// The FTL.
    pub ftl: Ftl<F>,
    /// The name reports give it.
    pub name: String,
    /// Bytes of memory the device model holds (it differs by backend).
    pub resident: fn(&F) -> u64,
}

impl<F: Flash + Clone + Send + Sync + 'static> Stack for FtlStack<F> {
    fn name(&self) -> &str {
        &self.name
    }
    fn capacity_bytes(&self) -> u64 {
        self.ftl.capacity_bytes()
    }
    fn submit(
        &mut self,
        at: Nanos,
        req: &Request,
        token: u64,
        out: &mut Vec<u64>,
    ) -> Result<Nanos, StackFault> {
        Ok(match req.op {
            Op::Write => self
                .ftl
                .write(at, req.offset_bytes, req.len_bytes, Data::Token(token))?,
            Op::Read => {
                out.clear();
                self.ftl.read(
                    at,
                    req.offset_bytes,
                    req.len_bytes,
                    ReadOut::Fingerprints(out),
                )?
            }
            Op::Trim => self.ftl.trim(at, req.offset_bytes, req.len_bytes)?,
            Op::Flush => self.ftl.flush(at)?,
        })
    }
    fn background(&mut self, from: Nanos, until: Nanos) -> Result<Nanos, StackFault> {
        Ok(self.ftl.background(from, until)?)
    }
    fn clone_stack(&self) -> Option<Box<dyn Stack + Send + Sync>> {
        Some(Box::new(self.clone()))
    }
    fn counters(&self) -> Counters {
        ftl_counters(&self.ftl)
    }
    fn erase_counts(&self) -> (u32, u32, f64) {
        self.ftl.fml().erase_counts()
    }
    fn unit_bytes(&self) -> u64 {
        self.ftl.unit_bytes() as u64
    }
    fn device_resident_bytes(&self) -> u64 {
        (self.resident)(self.ftl.fml().flash())
    }
    fn expected_fingerprint(&self, flat_unit: u64, token: u64) -> u64 {
        ftl::fingerprint(flat_unit as u32, token)
    }
    fn check(&mut self) -> Result<(), StackFault> {
        // The FTL's check reports its first problem as text.
        self.ftl
            .check()
            .map_err(|problem| StackFault::Inconsistent {
                problems: vec![problem.to_string()],
            })
    }
    fn gc_state(&self) -> GcState {
        gc_state_of(self.ftl.fml())
    }
    fn dies_of(&self, req: &Request, out: &mut Vec<DieId>) {
        let mut units = Vec::new();
        match req.op {
            Op::Read | Op::Write => self.ftl.units_touched(
                req.offset_bytes,
                req.len_bytes,
                req.op == Op::Write,
                &mut units,
            ),
            Op::Trim | Op::Flush => {}
        }
        dies_of_units(self.ftl.fml().layout(), &units, out);
    }
    fn die_free_ns(&self, die: DieId) -> Nanos {
        self.ftl.fml().flash().die_free_ns(die)
    }
    fn gc_dies(&self, out: &mut Vec<DieId>) {
        gc_dies_of(self.ftl.fml(), self.ftl.next_gc_destination(), out)
    }
}

/// The object store as a stack. The engine's flat byte space is cut into objects of
/// `object_bytes` each (object k holds bytes k x object_bytes onwards), so every block workload
/// becomes an object workload: a request touches one object at an offset within it. Objects are
/// created on their first write; a TRIM covering a whole object removes it.
pub struct OsdStack<F: Flash> {
    /// The object store.
    pub store: osd::ObjectStore<F>,
    /// Bytes of each object the byte space is cut into.
    pub object_bytes: u64,
    /// The name reports give it.
    pub name: String,
    /// Bytes of memory the device model holds (it differs by backend).
    pub resident: fn(&F) -> u64,
    /// Bytes the stack exports: the FML's capacity in write units.
    pub capacity: u64,
    created: rustc_hash::FxHashSet<u64>,
    /// Objects whose priority attribute a prioritized write set.
    prioritized: rustc_hash::FxHashSet<u64>,
}

const OSD_PARTITION: u64 = osd::id::FIRST_USER_ID;

impl<F: Flash> OsdStack<F> {
    /// `store` with one partition made for the objects, cut into objects of `object_bytes`.
    pub fn new(
        mut store: osd::ObjectStore<F>,
        object_bytes: u64,
        name: String,
        resident: fn(&F) -> u64,
    ) -> Result<Self, osd::OsdError> {
        use osd::Osd;
        store.create_partition(Some(osd::PartitionId(OSD_PARTITION)))?;
        let unit = store.unit_bytes() as u64;
        let capacity = store.fml().capacity_units() * unit;
        Ok(OsdStack {
            store,
            object_bytes,
            name,
            resident,
            capacity,
            created: Default::default(),
            prioritized: Default::default(),
        })
    }

    fn oid(k: u64) -> osd::Oid {
        osd::Oid::new(OSD_PARTITION, osd::id::FIRST_USER_ID + k)
    }

    /// The (object, offset in it, length) pieces of a byte range, one per object it touches.
    fn pieces(&self, offset: u64, len: u64) -> impl Iterator<Item = (u64, u64, u64)> + '_ {
        let end = offset + len;
        (offset / self.object_bytes..end.div_ceil(self.object_bytes)).map(move |k| {
            let start = offset.max(k * self.object_bytes);
            let stop = end.min((k + 1) * self.object_bytes);
            (k, start - k * self.object_bytes, stop - start)
        })
    }

    /// A prioritized write makes its object real-time (OSSD-13 IV-C: the priority is an
    /// object attribute the device places and cleans by).
    fn make_realtime(&mut self, k: u64, priority: u8) -> Result<(), osd::OsdError> {
        use osd::Osd;
        let oid = Self::oid(k);
        if self.created.insert(k) {
            self.store.create(oid.partition, Some(oid.object))?;
        }
        if self.prioritized.insert(k) {
            let p = osd::AttrValue::U64(priority as u64);
            self.store.set_attr(oid, osd::Attr::Priority, p)?;
        }
        Ok(())
    }

    fn serve_piece(
        &mut self,
        op: Op,
        k: u64,
        off: u64,
        len: u64,
        token: u64,
        out: &mut Vec<u64>,
    ) -> Result<(), osd::OsdError> {
        use osd::Osd;
        let oid = Self::oid(k);
        match op {
            Op::Write => {
                if self.created.insert(k) {
                    self.store.create(oid.partition, Some(oid.object))?;
                }
                self.store.write_token(oid, off, len, token)
            }
            Op::Read => {
                let mut fps = Vec::new();
                if self.created.contains(&k) {
                    self.store.read_fingerprints(oid, off, len, &mut fps)?;
                } else {
                    let unit = self.store.unit_bytes() as u64;
                    fps.resize(((off + len).div_ceil(unit) - off / unit) as usize, 0);
                }
                out.extend_from_slice(&fps);
                Ok(())
            }
            Op::Trim => {
                if off == 0 && len == self.object_bytes && self.created.remove(&k) {
                    self.prioritized.remove(&k);
                    self.store.remove(oid)?;
                }
                Ok(())
            }
            Op::Flush => self.store.flush(osd::FlushScope::Device),
        }
    }
}

impl<F: Flash> Stack for OsdStack<F> {
    fn name(&self) -> &str {
        &self.name
    }
    fn capacity_bytes(&self) -> u64 {
        self.capacity
    }
    fn submit(
        &mut self,
        at: Nanos,
        req: &Request,
        token: u64,
        out: &mut Vec<u64>,
    ) -> Result<Nanos, StackFault> {
        self.store.set_time(at);
        out.clear();
        if req.op == Op::Flush {
            self.serve_piece(Op::Flush, 0, 0, 0, token, out)?;
        } else {
            let pieces: Vec<(u64, u64, u64)> =
                self.pieces(req.offset_bytes, req.len_bytes).collect();
            for (k, off, len) in pieces {
                if req.op == Op::Write && req.priority > 0 {
                    self.make_realtime(k, req.priority)?;
                }
                self.serve_piece(req.op, k, off, len, token, out)?;
            }
        }
        Ok(self.store.now().max(at))
    }
    fn background(&mut self, from: Nanos, until: Nanos) -> Result<Nanos, StackFault> {
        Ok(self.store.background(from, until)?)
    }
    fn counters(&self) -> Counters {
        osd_counters(&self.store)
    }
    fn erase_counts(&self) -> (u32, u32, f64) {
        self.store.fml().erase_counts()
    }
    fn unit_bytes(&self) -> u64 {
        self.store.unit_bytes() as u64
    }
    fn device_resident_bytes(&self) -> u64 {
        (self.resident)(self.store.fml().flash())
    }
    fn expected_fingerprint(&self, flat_unit: u64, token: u64) -> u64 {
        let unit = self.store.unit_bytes() as u64;
        let per_object = self.object_bytes / unit;
        osd::store::unit_fingerprint(
            Self::oid(flat_unit / per_object),
            flat_unit % per_object,
            token,
        )
    }
    fn check(&mut self) -> Result<(), StackFault> {
        // The structure only: a media scan would add flash reads to the run's counters.
        let report = self.store.fsck_structure()?;
        if report.problems.is_empty() {
            Ok(())
        } else {
            Err(StackFault::Inconsistent {
                problems: report.problems,
            })
        }
    }
    fn gc_state(&self) -> GcState {
        gc_state_of(self.store.fml())
    }
    /// A read's dies come from the store's mapping when it can tell from memory. Any other
    /// request may program anywhere: the write-back data buffer evicts whichever units are
    /// oldest, to the streams of their objects, and metadata follows. Such a request counts as
    /// using every die, so the controller issues it only once the device is idle and never
    /// stacks writes up in the dies' queues ahead of a later prioritized read.
    fn dies_of(&self, req: &Request, out: &mut Vec<DieId>) {
        if req.op == Op::Read {
            let mut units = Vec::new();
            let known = self
                .pieces(req.offset_bytes, req.len_bytes)
                .all(|(k, off, len)| {
                    !self.created.contains(&k)
                        || self
                            .store
                            .peek_read_units(Self::oid(k), off, len, &mut units)
                });
            if known {
                dies_of_units(self.store.fml().layout(), &units, out);
                return;
            }
        }
        let dies = self.store.fml().flash().config().geometry.dies();
        out.extend((0..dies).map(DieId));
    }
    fn die_free_ns(&self, die: DieId) -> Nanos {
        self.store.fml().flash().die_free_ns(die)
    }
    fn gc_dies(&self, out: &mut Vec<DieId>) {
        // The store may send a copy to any of its streams: only the source is predicted.
        gc_dies_of(self.store.fml(), None, out)
    }
}
