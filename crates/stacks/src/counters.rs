//! Flat, subtractable counters of a stack, gathered from its device, FML and mapping layer.

use flash::Flash;
use ftl::Ftl;

/// Flat counters of a stack, subtractable so a run can measure a phase.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Counters {
    /// Bytes the host asked the stack to write.
    pub host_write_bytes: u64,
    /// Bytes the host asked the stack to read.
    pub host_read_bytes: u64,
    /// Physical flash pages (the device's count).
    pub flash_pages_programmed: u64,
    /// Physical flash pages read (the device's count).
    pub flash_pages_read: u64,
    /// Physical pages in one write unit; not a counter (a phase keeps the stack's value).
    pub pages_per_unit: u64,
    /// Write units the mapping layer programmed with host data (GC copies not counted).
    pub data_units_written: u64,
    /// Physical blocks erased (the device's count).
    pub flash_blocks_erased: u64,
    /// Valid write units GC copied (FML `gc_units_copied`).
    pub gc_page_copies: u64,
    /// Virtual time of GC steps, issue to completion (FML `gc_busy_ns`).
    pub gc_ns: u64,
    /// Index units written: the object store's index nodes, the FTL's mapping pages.
    pub index_pages_written: u64,
    /// Index units read (index nodes, DFTL translation pages) on cache misses.
    pub index_pages_read: u64,
    /// Metadata units written: onode/descriptor pages, checkpoints, access-time pages, p-OFTL's
    /// record log.
    pub metadata_pages_written: u64,
    /// Reads of a unit's old contents to merge a partial write into (read-modify-write).
    pub rmw_reads: u64,
    /// Units the stack lost to media failures it could not recover from.
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
            pages_per_unit: self.pages_per_unit,
            data_units_written: self.data_units_written - o.data_units_written,
            flash_blocks_erased: self.flash_blocks_erased - o.flash_blocks_erased,
            gc_page_copies: self.gc_page_copies - o.gc_page_copies,
            gc_ns: self.gc_ns - o.gc_ns,
            index_pages_written: self.index_pages_written - o.index_pages_written,
            index_pages_read: self.index_pages_read - o.index_pages_read,
            metadata_pages_written: self.metadata_pages_written - o.metadata_pages_written,
            rmw_reads: self.rmw_reads - o.rmw_reads,
            units_lost: self.units_lost - o.units_lost,
        }
    }
}

/// The device and FML side of the counters, the same for every stack.
pub fn flash_counters<F: Flash>(fml: &fml::Fml<F>) -> Counters {
    let d = fml.flash().stats();
    Counters {
        flash_pages_programmed: d.pages_programmed,
        flash_pages_read: d.pages_read,
        flash_blocks_erased: d.blocks_erased,
        pages_per_unit: (fml.layout().write_unit_bytes
            / fml.flash().config().geometry.page_size_bytes) as u64,
        gc_page_copies: fml.stats().gc_units_copied,
        gc_ns: fml.stats().gc_busy_ns,
        ..Counters::default()
    }
}

/// The counters of a page-mapping FTL stack (mapping pages count as index pages, checkpoint
/// units as metadata).
pub fn ftl_counters<F: Flash>(ftl: &Ftl<F>) -> Counters {
    let s = ftl.stats();
    Counters {
        host_write_bytes: s.host_write_bytes,
        host_read_bytes: s.host_read_bytes,
        data_units_written: s.data_units_written,
        index_pages_written: s.map_pages_written,
        index_pages_read: s.map_pages_read,
        metadata_pages_written: s.checkpoint_units_written,
        rmw_reads: s.rmw_reads,
        units_lost: s.units_lost,
        ..flash_counters(ftl.fml())
    }
}

/// The counters of an object store: small-object pages hold host data; descriptor pages,
/// checkpoints, access-time pages and parity units (OSCM-11 V-E's redundancy, written at
/// checkpoints and evictions) count as metadata, so that every page programmed is counted once.
pub fn osd_counters<F: Flash>(store: &osd::ObjectStore<F>) -> Counters {
    let s = store.stats();
    Counters {
        host_write_bytes: s.host_write_bytes,
        host_read_bytes: s.host_read_bytes,
        data_units_written: s.data_units_written + s.small_pages_written,
        index_pages_written: s.index_nodes_written,
        index_pages_read: s.index_nodes_read,
        metadata_pages_written: s.descriptor_pages_written
            + s.checkpoints
            + s.atime_pages_written
            + s.parity_units_written,
        rmw_reads: s.rmw_reads,
        units_lost: s.units_lost,
        ..flash_counters(store.fml())
    }
}

/// The counters of a p-OFTL store (POFTL-14): data pages, and its record pages (the log of
/// creations, truncations and removals) as metadata; it has no index on flash.
pub fn poftl_counters<F: Flash>(store: &poftl::PoftlStore<F>) -> Counters {
    let s = store.stats();
    Counters {
        host_write_bytes: s.host_write_bytes,
        host_read_bytes: s.host_read_bytes,
        data_units_written: s.host_pages_written,
        metadata_pages_written: s.log_pages_written,
        rmw_reads: s.rmw_reads,
        units_lost: s.units_lost,
        ..flash_counters(store.fml())
    }
}
