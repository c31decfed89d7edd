//! FTL settings: the mapping table, the write buffer's policy and size, over-provisioning and
//! GC's stream, as read from the `[ftl]` table.

use serde::{Deserialize, Serialize};

use fml::FmlConfig;

/// Which mapping table.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Mapping {
    /// The whole page map in device RAM (sFTL / PFTL).
    #[default]
    Page,
    /// DFTL: translation pages on flash behind a bounded cache.
    Dftl,
}

/// How the write buffer acknowledges a write.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum BufferPolicy {
    /// A write into a full buffer programs the oldest buffered unit first and completes when
    /// that program does (the seed papers' devices, OSSD-13 V-E).
    #[default]
    Evict,
    /// A device-level write-back data cache (MQSim's, Tavakkol et al., FAST'18): a write
    /// completes when it is in the buffer; units beyond `flush_percent` of the buffer are
    /// programmed in the background, oldest first, and a write waits only when buffered and
    /// in-flight units fill the whole buffer (then for the earliest flush to complete). A
    /// `flush` waits for every flush in flight.
    WriteBack,
    /// MQSim's destage buffer (`Data_Cache_Manager_Flash_Advanced::write_to_destage_buffer`):
    /// a write completes when it is in the buffer; a logical page not written before in the
    /// current `hot_window_ns` is cold and is written back to flash at once (under sub-page
    /// mapping, as soon as a write unit's worth of cold pages is buffered); a page written
    /// again within the window is hot and stays until the buffer is full, then the oldest
    /// goes. Write-backs in flight are bounded by `backpressure_bytes`: a write that finds
    /// the bound reached waits for the earliest to complete.
    Destage,
}

/// FTL settings.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct FtlConfig {
    /// Chosen by the stack (`ftl` or `dftl`), not a setting of its own.
    #[serde(skip)]
    pub mapping: Mapping,
    /// Bytes of a logical page, the unit the map translates (issue 22: 4 KiB logical pages
    /// packed into 8 KiB pages). 0 (the default) = the device's write unit, one
    /// logical page per unit. A smaller value must divide the write unit into at most
    /// [`crate::oob::MAX_SLOTS`] pages of whole 512-byte sectors; each write unit programmed
    /// then gathers that many logical pages (slots), named in its OOB record.
    pub mapping_unit_bytes: u64,
    /// Write buffer size (default 2 MiB, OSSD-13 V-E); 0 writes through.
    pub buffer_bytes: u64,
    /// What a write waits for when the buffer is full (default `evict`).
    pub buffer_policy: BufferPolicy,
    /// `write-back` only: buffered units beyond this share of the buffer, in percent, are
    /// flushed in the background as writes arrive (default 50).
    pub flush_percent: f64,
    /// The write buffer's memory channel in MB/s (10^6 bytes); 0 (the default) = free. A host
    /// write into the buffer, and a read served from it, holds the channel for its bytes, one
    /// transfer at a time, and completes no sooner than its transfer. MQSim's data cache is
    /// one DRAM channel (`Data_Cache_Manager_Flash_Advanced::service_dram_access_request`)
    /// moving `Data_Cache_DRAM_Data_Busrt_Size` bytes twice per `Data_Cache_DRAM_Data_Rate`
    /// cycle: 1 byte at 100 MT/s is 200 MB/s (`mqsim-default`'s value).
    pub cache_mb_s: u64,
    /// `destage` only: how long a logical page stays hot after a write, in ns; MQSim clears
    /// its set of written pages every simulated second (`bloom_filter_reset_step`; default
    /// 1,000,000,000).
    pub hot_window_ns: u64,
    /// `destage` only: the bytes of write-backs in flight before a write waits; 0 (the
    /// default) = one page per plane of the device, MQSim's `back_pressure_buffer_max_depth`
    /// (1 MiB on `mqsim-default`).
    pub backpressure_bytes: u64,
    /// DFTL cache size; 8 bytes per cached entry (default 256 KiB).
    pub dftl_cache_bytes: u64,
    /// DFTL only: hold the mapping cache's hit rate at this percentage instead of letting the
    /// LRU decide (POFTL-14 IV-C sets it "artificially" to 100..80%); 0 (the default) = off.
    pub dftl_hit_percent: f64,
    /// Share of the usable flash held back from the logical space, in percent (default 7).
    pub overprovision_percent: f64,
    /// GC copies go to an update block of their own (default true); false appends them to the
    /// host data stream, one log as in the LRW model.
    pub separate_gc_stream: bool,
    /// Write a checkpoint when a host write finds more than this many units programmed since
    /// the last one (GC copies and translation pages included), so a recovery after a power
    /// cut reads about that many records past the checkpoint at most. The write that finds it
    /// waits for the checkpoint. 0 (the default) = checkpoints only at a clean close or when
    /// asked (`Ftl::checkpoint`), as the papers' FTLs; at least 16 otherwise.
    pub checkpoint_every_units: u64,
    /// The FML's settings (a run sets them once for whichever stack it builds).
    #[serde(skip)]
    pub fml: FmlConfig,
}

impl Default for FtlConfig {
    fn default() -> Self {
        FtlConfig {
            mapping: Mapping::Page,
            mapping_unit_bytes: 0,
            buffer_bytes: 2 << 20,
            buffer_policy: BufferPolicy::Evict,
            flush_percent: 50.0,
            cache_mb_s: 0,
            hot_window_ns: 1_000_000_000,
            backpressure_bytes: 0,
            dftl_cache_bytes: 256 << 10,
            dftl_hit_percent: 0.0,
            overprovision_percent: 7.0,
            separate_gc_stream: true,
            checkpoint_every_units: 0,
            fml: FmlConfig::default(),
        }
    }
}

impl FtlConfig {
    /// Checks each setting's range. Whether the settings fit a device is checked when the FTL is
    /// opened ([`crate::Ftl::open`]).
    pub fn validate(&self) -> Result<(), FtlConfigError> {
        if !(0.0..=90.0).contains(&self.overprovision_percent) {
            return Err(FtlConfigError::OverprovisionPercent {
                percent: self.overprovision_percent,
            });
        }
        if !(0.0..=100.0).contains(&self.dftl_hit_percent) {
            return Err(FtlConfigError::DftlHitPercent {
                percent: self.dftl_hit_percent,
            });
        }
        if !(self.flush_percent > 0.0 && self.flush_percent <= 100.0) {
            return Err(FtlConfigError::FlushPercent {
                percent: self.flush_percent,
            });
        }
        if (1..16).contains(&self.checkpoint_every_units) {
            return Err(FtlConfigError::CheckpointEvery {
                units: self.checkpoint_every_units,
            });
        }
        if self.buffer_policy != BufferPolicy::Evict && self.buffer_bytes == 0 {
            return Err(FtlConfigError::WriteBackWithoutBuffer);
        }
        if self.mapping == Mapping::Dftl && self.dftl_cache_bytes < 8 {
            return Err(FtlConfigError::DftlCacheTooSmall {
                dftl_cache_bytes: self.dftl_cache_bytes,
            });
        }
        Ok(())
    }
}

/// Why FTL settings are refused, by [`FtlConfig::validate`] or when the FTL is opened over a
/// device they do not fit. Settings are named as in TOML (`ftl.<field>`).
#[derive(Clone, Copy, Debug, PartialEq, thiserror::Error)]
pub enum FtlConfigError {
    /// `ftl.overprovision_percent` outside 0..=90.
    #[error("ftl.overprovision_percent = {percent} must lie in 0..=90")]
    OverprovisionPercent {
        /// The value given, in percent.
        percent: f64,
    },
    /// `ftl.dftl_hit_percent` outside 0..=100.
    #[error("ftl.dftl_hit_percent = {percent} must lie in 0..=100 (0 = the LRU decides)")]
    DftlHitPercent {
        /// The value given, in percent.
        percent: f64,
    },
    /// `ftl.flush_percent` outside (0, 100].
    #[error("ftl.flush_percent = {percent} must lie in (0, 100]")]
    FlushPercent {
        /// The value given, in percent.
        percent: f64,
    },
    /// `ftl.checkpoint_every_units` between 1 and 15: a checkpoint's own parts and the GC it
    /// may do would call for the next one at once.
    #[error("ftl.checkpoint_every_units = {units} must be 0 (off) or at least 16")]
    CheckpointEvery {
        /// The value given.
        units: u64,
    },
    /// The write-back policy with no buffer to write back from.
    #[error("ftl.buffer_policy = write-back or destage needs a buffer: ftl.buffer_bytes = 0")]
    WriteBackWithoutBuffer,
    /// A DFTL cache smaller than one 8-byte entry.
    #[error("ftl.dftl_cache_bytes must hold at least one 8-byte entry")]
    DftlCacheTooSmall {
        /// The value given, in bytes.
        dftl_cache_bytes: u64,
    },
    /// The device's write unit has more than 64 sectors (the buffer keeps one bit per sector
    /// in a `u64`).
    #[error("write units over 32 KiB ({unit_bytes} bytes) are not supported")]
    UnitTooLarge {
        /// The device's write unit, in bytes.
        unit_bytes: usize,
    },
    /// `ftl.mapping_unit_bytes` does not divide the device's write unit into slots the FTL
    /// can map.
    #[error(
        "ftl.mapping_unit_bytes = {mapping_unit_bytes} does not fit a {write_unit_bytes}-byte \
         write unit: {why}"
    )]
    MappingUnit {
        /// The value given, in bytes.
        mapping_unit_bytes: u64,
        /// The device's write unit, in bytes.
        write_unit_bytes: usize,
        /// What is wrong with it.
        why: &'static str,
    },
    /// The OOB record of a write unit with this many slots does not fit the device's OOB area.
    #[error(
        "ftl.mapping_unit_bytes = {mapping_unit_bytes} puts {slots} logical pages in a write \
         unit, whose OOB record needs {record_bytes} bytes; the device's OOB area holds \
         {oob_bytes} (geometry.oob_size_bytes)"
    )]
    SlotsOverOob {
        /// The value given, in bytes.
        mapping_unit_bytes: u64,
        /// Logical pages per write unit.
        slots: usize,
        /// Bytes the record needs.
        record_bytes: usize,
        /// Bytes of OOB area in the unit's first page.
        oob_bytes: usize,
    },
    /// Over-provisioning and the FML's reserves leave no logical page.
    #[error("no logical space left after over-provisioning and reserves")]
    NoLogicalSpace,
}
