//! The storage stacks the engine drives, behind one narrow trait.

use flash::{Flash, FlashStats, Nanos};
use ftl::{Data, Ftl, FtlError, ReadOut};

use crate::request::{Op, Request};

/// Flat counters of a stack, subtractable so a run can measure a phase.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Counters {
    pub host_write_bytes: u64,
    pub host_read_bytes: u64,
    pub flash_pages_programmed: u64,
    pub flash_pages_read: u64,
    pub flash_blocks_erased: u64,
    pub gc_page_copies: u64,
    pub index_pages_written: u64,
    pub index_pages_read: u64,
    pub metadata_pages_written: u64,
    pub rmw_reads: u64,
    pub units_lost: u64,
}

impl std::ops::Sub for Counters {
    type Output = Counters;
    fn sub(self, o: Counters) -> Counters {
        Counters {
            host_write_bytes: self.host_write_bytes - o.host_write_bytes,
            host_read_bytes: self.host_read_bytes - o.host_read_bytes,
            flash_pages_programmed: self.flash_pages_programmed - o.flash_pages_programmed,
            flash_pages_read: self.flash_pages_read - o.flash_pages_read,
            flash_blocks_erased: self.flash_blocks_erased - o.flash_blocks_erased,
            gc_page_copies: self.gc_page_copies - o.gc_page_copies,
            index_pages_written: self.index_pages_written - o.index_pages_written,
            index_pages_read: self.index_pages_read - o.index_pages_read,
            metadata_pages_written: self.metadata_pages_written - o.metadata_pages_written,
            rmw_reads: self.rmw_reads - o.rmw_reads,
            units_lost: self.units_lost - o.units_lost,
        }
    }
}

/// What the engine needs from a stack under test.
pub trait Stack {
    fn name(&self) -> &str;
    fn capacity_bytes(&self) -> u64;
    /// Serves one request issued at `at`; returns when it completes. `token` stands for a
    /// write's bytes (fingerprint mode); `out` collects read fingerprints, one per unit.
    fn submit(
        &mut self,
        at: Nanos,
        req: &Request,
        token: u64,
        out: &mut Vec<u64>,
    ) -> Result<Nanos, String>;
    /// Background work (GC) in an idle interval; returns when the last step completes.
    fn background(&mut self, from: Nanos, until: Nanos) -> Result<Nanos, String>;
    fn counters(&self) -> Counters;
    fn flash_stats(&self) -> FlashStats;
    /// Erase counts over usable blocks: (min, max, mean).
    fn erase_counts(&self) -> (u32, u32, f64);
    /// Bytes of the write unit (the FTL's logical page).
    fn unit_bytes(&self) -> u64;
    /// Bytes of memory the device model holds.
    fn device_resident_bytes(&self) -> u64;
    /// Whole-structure consistency check.
    fn check(&self) -> Result<(), String>;
}

fn err(e: FtlError) -> String {
    e.to_string()
}

/// A [`Ftl`] (page-mapping or DFTL) as a stack.
pub struct FtlStack<F: Flash> {
    pub ftl: Ftl<F>,
    pub name: String,
    pub resident: fn(&F) -> u64,
}

impl<F: Flash> Stack for FtlStack<F> {
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
    ) -> Result<Nanos, String> {
        match req.op {
            Op::Write => self
                .ftl
                .write(at, req.offset_bytes, req.len_bytes, Data::Token(token))
                .map_err(err),
            Op::Read => {
                out.clear();
                self.ftl
                    .read(
                        at,
                        req.offset_bytes,
                        req.len_bytes,
                        ReadOut::Fingerprints(out),
                    )
                    .map_err(err)
            }
            Op::Trim => self
                .ftl
                .trim(at, req.offset_bytes, req.len_bytes)
                .map_err(err),
            Op::Flush => self.ftl.flush(at).map_err(err),
        }
    }
    fn background(&mut self, from: Nanos, until: Nanos) -> Result<Nanos, String> {
        self.ftl.background(from, until).map_err(err)
    }
    fn counters(&self) -> Counters {
        let s = self.ftl.stats();
        let f = self.ftl.fml().stats();
        let d = self.ftl.fml().flash().stats();
        Counters {
            host_write_bytes: s.host_write_bytes,
            host_read_bytes: s.host_read_bytes,
            flash_pages_programmed: d.pages_programmed,
            flash_pages_read: d.pages_read,
            flash_blocks_erased: d.blocks_erased,
            gc_page_copies: f.gc_units_copied,
            index_pages_written: s.map_pages_written,
            index_pages_read: s.map_pages_read,
            metadata_pages_written: s.checkpoint_units_written,
            rmw_reads: s.rmw_reads,
            units_lost: s.units_lost,
        }
    }
    fn flash_stats(&self) -> FlashStats {
        self.ftl.fml().flash().stats()
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
    fn check(&self) -> Result<(), String> {
        self.ftl.check()
    }
}
