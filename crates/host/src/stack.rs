//! The object store under OFS as the device-side controller's stack: a request of the flat
//! space ([`Files`]) is an object READ or WRITE of the file it falls in.

use controller::request::{Op, Request};
use flash::{DieId, Flash, Nanos};
use ofs::Ofs;
use osd::{ObjectStore, Osd};
use stacks::{Counters, GcState, Stack, StackFault};
use vfs::FileSystem;

use crate::files::Files;

/// The object store under OFS as the controller's stack: a request is an object READ or WRITE
/// of the file it falls in.
pub struct OfsStack<F: Flash> {
    ofs: Ofs<ObjectStore<F>>,
    files: Files,
    resident: fn(&F) -> u64,
}

impl<F: Flash> OfsStack<F> {
    /// `ofs` with `files` laid end to end; `resident` measures the device model's memory.
    pub fn new(ofs: Ofs<ObjectStore<F>>, files: Files, resident: fn(&F) -> u64) -> Self {
        OfsStack {
            ofs,
            files,
            resident,
        }
    }

    /// The file system.
    pub fn ofs(&self) -> &Ofs<ObjectStore<F>> {
        &self.ofs
    }

    /// The file system, to set priorities or the time between runs.
    pub fn ofs_mut(&mut self) -> &mut Ofs<ObjectStore<F>> {
        &mut self.ofs
    }

    /// The files the flat space lays end to end.
    pub fn files(&self) -> &Files {
        &self.files
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
    ) -> Result<Nanos, StackFault> {
        self.ofs.set_time(at);
        out.clear();
        let store = self.ofs.store_mut();
        if req.op == Op::Flush {
            store.flush(osd::FlushScope::Device)?;
            return Ok(store.now().max(at));
        }
        let mut fps = Vec::new();
        for (s, off, len) in self
            .files
            .pieces(req.offset_bytes, req.len_bytes)
            .map_err(|e| StackFault::Other(Box::new(e)))?
        {
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
            }?;
        }
        Ok(store.now().max(at))
    }
    fn background(&mut self, from: Nanos, until: Nanos) -> Result<Nanos, StackFault> {
        Ok(self.ofs.store_mut().background(from, until)?)
    }
    fn counters(&self) -> Counters {
        stacks::osd_counters(self.ofs.store())
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
    fn check(&mut self) -> Result<(), StackFault> {
        let problems = self.ofs.check()?;
        if problems.is_empty() {
            Ok(())
        } else {
            Err(StackFault::Inconsistent { problems })
        }
    }
    fn gc_state(&self) -> GcState {
        stacks::gc_state_of(self.ofs.store().fml())
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
                    stacks::dies_of_units(store.fml().layout(), &units, out);
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
        stacks::gc_dies_of(self.ofs.store().fml(), None, out)
    }
}
