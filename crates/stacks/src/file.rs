//! The file-level stacks: a [`vfs::FileSystem`] with the counters of the stack beneath it.

use blockfs::BlockFs;
use flash::Flash;
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
