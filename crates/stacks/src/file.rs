//! The file-level stacks: a [`vfs::FileSystem`] with the counters of the stack beneath it.

use blockfs::BlockFs;
use flash::Flash;
use littlefs::LittleFs;
use ofs::Ofs;
use osd::ObjectStore;
use poftl::fs::PoftlFs;
use vfs::FileSystem;

use crate::counters::{ftl_counters, osd_counters, poftl_counters, Counters};

/// A file system under test, with the counters of the stack beneath it.
pub trait FileStack: FileSystem {
    /// Device, FML and store counters (as the block/object runs report them).
    fn stack_counters(&self) -> Counters;
    /// Erase counts of the blocks: (min, max, mean).
    fn erase_counts(&self) -> (u32, u32, f64);
}

impl<F: Flash> FileStack for Ofs<ObjectStore<F>> {
    fn stack_counters(&self) -> Counters {
        osd_counters(self.store())
    }
    fn erase_counts(&self) -> (u32, u32, f64) {
        self.store().fml().erase_counts()
    }
}

impl<F: Flash> FileStack for BlockFs<F> {
    fn stack_counters(&self) -> Counters {
        ftl_counters(self.ftl())
    }
    fn erase_counts(&self) -> (u32, u32, f64) {
        self.ftl().fml().erase_counts()
    }
}

impl<F: Flash> FileStack for PoftlFs<F> {
    fn stack_counters(&self) -> Counters {
        poftl_counters(self.store())
    }
    fn erase_counts(&self) -> (u32, u32, f64) {
        self.store().fml().erase_counts()
    }
}

/// LittleFS drives the device itself: its pages and erases are the device's counts. It has no
/// separate GC (it compacts and relocates inline) and does not say which pages hold data and
/// which metadata: the pages programmed while a write ran (its data, the copy of the file's
/// tail, the file's commit) count as data units, all others (creates, removals, truncations,
/// the format) as metadata, so that the two add up to the device's pages programmed.
impl<F: Flash + Send + 'static> FileStack for LittleFs<F> {
    fn stack_counters(&self) -> Counters {
        let d = self.flash_stats();
        let s = self.stats();
        Counters {
            host_write_bytes: s.host_write_bytes,
            host_read_bytes: s.host_read_bytes,
            flash_pages_programmed: d.pages_programmed,
            flash_pages_read: d.pages_read,
            flash_blocks_erased: d.blocks_erased,
            pages_per_unit: 1,
            data_units_written: s.write_pages,
            metadata_pages_written: s.other_pages,
            ..Counters::default()
        }
    }
    fn erase_counts(&self) -> (u32, u32, f64) {
        LittleFs::erase_counts(self)
    }
}

/// The in-memory oracle file system has no device beneath it: its counters stay zero. Lets
/// the file workloads' own tests run on it.
impl FileStack for vfs::oracle::MemFs {
    fn stack_counters(&self) -> Counters {
        Counters::default()
    }
    fn erase_counts(&self) -> (u32, u32, f64) {
        (0, 0, 0.0)
    }
}
