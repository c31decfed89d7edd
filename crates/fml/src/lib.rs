#![deny(clippy::unwrap_used, clippy::expect_used)]
#![warn(missing_docs)]
//! The flash management layer (FML, OSSD-13 V-F), written once for every mapping layer above
//! it, so the object store and the block baselines are compared on the same mechanism
//! (OSSD-13 V-I).
//!
//! The FML manages super-blocks ("blocks") of write units ("units"). A mapping layer writes a
//! unit into a *stream* (an open update block) it chooses per write, invalidates units it no
//! longer needs, and runs GC steps when the FML says free blocks are short. GC reports every
//! moved unit to the mapping layer through [`Owner`].

pub mod block;
pub mod buffer;
pub mod gc;
#[cfg(feature = "mutants")]
pub mod mutants;
pub mod wear;

use std::collections::VecDeque;

use flash::gang::{Layout, Vpa};
use flash::{Content, DeviceConfigError, Flash, FlashError, Ganged, Nanos, Payload, PayloadMode};
use serde::{Deserialize, Serialize};

pub use block::{Block, BlockState, BlockTable, Inconsistency, Loaded, SegmentClass};
pub use gc::{choose_victim, GcJob, GcStep, Thresholds, UnknownVictimPolicy, VictimPolicy};
use wear::FreePool;

/// FML settings. Defaults are OSSD-13 V-F's.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct FmlConfig {
    /// GC must run before a host write when free blocks fall below this (default 10).
    pub low_watermark_blocks: u32,
    /// Background GC stops at this many free blocks while requests are pending (default 11).
    pub high_watermark_busy_blocks: u32,
    /// Background GC stops at this many free blocks when the device is idle (default 15).
    pub high_watermark_idle_blocks: u32,
    /// Victim selection (default greedy, OSSD-13 V-F).
    pub victim_policy: VictimPolicy,
    /// Erase-count spread over usable blocks that triggers static wear leveling; 0 disables it
    /// (default 1000).
    pub static_wear_threshold: u32,
    /// Share of blocks held back to replace grown bad blocks, in per mille (default 15 = 1.5%,
    /// OSSD-13 V-H).
    pub bad_block_reserve_permille: u32,
    /// Largest live share, in percent, of a data / metadata / atime victim (OSCM-11 V-B; 100 =
    /// the pure policy). While free blocks are below the low watermark and no block qualifies,
    /// GC ignores them rather than run out of space, unless `victim_thresholds_bind` is set.
    pub data_victim_threshold_percent: u8,
    /// As `data_victim_threshold_percent`, for metadata blocks (onodes, index nodes).
    pub metadata_victim_threshold_percent: u8,
    /// As `data_victim_threshold_percent`, for access-time journal blocks.
    pub atime_victim_threshold_percent: u8,
    /// The victim thresholds bind even below the low watermark: when no block qualifies, GC
    /// finds no victim and a write that needs a free block fails with `NoSpace`, as OSCM-11
    /// V-B reports for data thresholds under 60% (default false: GC falls back to the pure
    /// policy there, so a threshold can never run a device out of space).
    pub victim_thresholds_bind: bool,
    /// Free blocks held back for real-time writes (OSSD-13 IV-C: "reserving a number of
    /// update blocks"), default 0. A normal write must collect once free blocks fall below
    /// `low_watermark_blocks + realtime_reserve_blocks`; a real-time write only below
    /// `low_watermark_blocks` ([`Fml::must_collect_realtime`]), so while the reserve lasts it
    /// opens a fresh update block without waiting for a collection. The reserve is not
    /// capacity: [`Fml::capacity_units`] leaves it out.
    pub realtime_reserve_blocks: u32,
}

impl Default for FmlConfig {
    fn default() -> Self {
        FmlConfig {
            low_watermark_blocks: 10,
            high_watermark_busy_blocks: 11,
            high_watermark_idle_blocks: 15,
            victim_policy: VictimPolicy::Greedy,
            static_wear_threshold: 1000,
            bad_block_reserve_permille: 15,
            data_victim_threshold_percent: 100,
            metadata_victim_threshold_percent: 100,
            atime_victim_threshold_percent: 100,
            victim_thresholds_bind: false,
            realtime_reserve_blocks: 0,
        }
    }
}

impl FmlConfig {
    /// Watermarks scaled for a device with few blocks (tests, tiny presets): a quarter of the
    /// blocks at most, and at least 3.
    pub fn for_blocks(blocks: u32) -> Self {
        let d = FmlConfig::default();
        let low = d.low_watermark_blocks.min((blocks / 8).max(3));
        FmlConfig {
            low_watermark_blocks: low,
            high_watermark_busy_blocks: low + 1,
            high_watermark_idle_blocks: low
                + (d.high_watermark_idle_blocks - d.low_watermark_blocks).min(low),
            ..d
        }
    }

    /// Checks the settings against a device of `blocks` super-blocks and `streams` streams (the GC
    /// stream included): watermarks ordered and leaving room for every stream's update block,
    /// percentages at most 100, reserve at most 500 per mille. The error names the offending
    /// setting.
    pub fn validate(&self, blocks: u32, streams: u32) -> Result<(), FmlConfigError> {
        if self.low_watermark_blocks < 2 {
            return Err(FmlConfigError::LowWatermark {
                low: self.low_watermark_blocks,
            });
        }
        if self.high_watermark_busy_blocks < self.low_watermark_blocks
            || self.high_watermark_idle_blocks < self.high_watermark_busy_blocks
        {
            return Err(FmlConfigError::WatermarkOrder {
                low: self.low_watermark_blocks,
                high_busy: self.high_watermark_busy_blocks,
                high_idle: self.high_watermark_idle_blocks,
            });
        }
        if self.high_watermark_busy_blocks
            < self.low_watermark_blocks + self.realtime_reserve_blocks
        {
            return Err(FmlConfigError::BusyBelowReserve {
                high_busy: self.high_watermark_busy_blocks,
                low: self.low_watermark_blocks,
                reserve: self.realtime_reserve_blocks,
            });
        }
        if self.high_watermark_idle_blocks + streams + 2 >= blocks {
            return Err(FmlConfigError::TooFewBlocks {
                blocks,
                streams,
                high_idle: self.high_watermark_idle_blocks,
            });
        }
        for (class, v) in [
            ("data", self.data_victim_threshold_percent),
            ("metadata", self.metadata_victim_threshold_percent),
            ("atime", self.atime_victim_threshold_percent),
        ] {
            if v > 100 {
                return Err(FmlConfigError::ThresholdOver100 { class, percent: v });
            }
        }
        if self.bad_block_reserve_permille > 500 {
            return Err(FmlConfigError::ReserveOver500 {
                permille: self.bad_block_reserve_permille,
            });
        }
        Ok(())
    }
}

/// Why [`FmlConfig::validate`] refused the settings; each variant names the settings involved
/// and their values.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum FmlConfigError {
    /// `low_watermark_blocks` below 2.
    #[error(
        "fml.low_watermark_blocks = {low} must be at least 2 (GC needs a free block to copy into)"
    )]
    LowWatermark {
        /// `low_watermark_blocks`.
        low: u32,
    },
    /// The watermarks are not ordered low <= high_busy <= high_idle.
    #[error("fml watermarks must satisfy low ({low}) <= high_busy ({high_busy}) <= high_idle ({high_idle})")]
    WatermarkOrder {
        /// `low_watermark_blocks`.
        low: u32,
        /// `high_watermark_busy_blocks`.
        high_busy: u32,
        /// `high_watermark_idle_blocks`.
        high_idle: u32,
    },
    /// Background GC would stop below the threshold at which normal writes must collect.
    #[error("fml.high_watermark_busy_blocks ({high_busy}) must be at least low_watermark_blocks ({low}) + realtime_reserve_blocks ({reserve}): background GC would stop below the normal writes' threshold")]
    BusyBelowReserve {
        /// `high_watermark_busy_blocks`.
        high_busy: u32,
        /// `low_watermark_blocks`.
        low: u32,
        /// `realtime_reserve_blocks`.
        reserve: u32,
    },
    /// The device has too few super-blocks for the streams and the idle high watermark.
    #[error("the device has {blocks} blocks: too few for {streams} streams and a high watermark of {high_idle}")]
    TooFewBlocks {
        /// Super-blocks of the device.
        blocks: u32,
        /// Streams, the GC stream included.
        streams: u32,
        /// `high_watermark_idle_blocks`.
        high_idle: u32,
    },
    /// A victim threshold over 100 percent.
    #[error("fml.{class}_victim_threshold_percent = {percent} is over 100")]
    ThresholdOver100 {
        /// The segment class: "data", "metadata" or "atime".
        class: &'static str,
        /// The threshold.
        percent: u8,
    },
    /// A bad-block reserve over 500 per mille.
    #[error("fml.bad_block_reserve_permille = {permille} must be at most 500")]
    ReserveOver500 {
        /// `bad_block_reserve_permille`.
        permille: u32,
    },
}

/// The next step of the GC job, as [`Fml::next_gc_step`] predicts it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum NextGc {
    /// Choose a victim (no flash operation).
    Choose,
    /// Copy the valid unit `from`.
    Copy {
        /// Where the unit to copy lives.
        from: Vpa,
    },
    /// Erase (or retire) the super-block `victim`.
    Erase {
        /// Super-block id of the victim.
        victim: u32,
    },
}

/// An update stream chosen by the mapping layer's placement decision.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct StreamId(
    /// Index of the stream: 0 to n - 1 for the n streams the mapping layer asked for at open;
    /// n is the FML's own GC stream ([`Fml::gc_stream`]).
    pub u8,
);

/// The mapping layer above, as GC sees it.
pub trait Owner {
    /// Whether the owner recognizes the OOB record of a unit GC is about to copy. A unit whose
    /// record is damaged is not copied; it is reported through [`Owner::lost`] instead.
    fn recognizes(&mut self, _from: Vpa, _oob: &[u8]) -> bool {
        true
    }
    /// On a timing-only device ([`flash::PayloadMode::Timing`]), which keeps no OOB records:
    /// writes into `oob` the record the unit at `from` was programmed with, from the owner's
    /// own bookkeeping, before GC copies it. `false` (the default) means the owner cannot, and
    /// GC refuses to run on such a device rather than lose what it holds.
    fn record_of(&mut self, _from: Vpa, _oob: &mut [u8]) -> bool {
        false
    }
    /// Called before GC copies the unit at `from`: the owner may rewrite the copy's OOB record
    /// (for example to give it a fresh sequence number) and choose its stream; `None` sends it
    /// to the FML's GC stream.
    fn before_copy(&mut self, _from: Vpa, _oob: &mut [u8]) -> Option<StreamId> {
        None
    }
    /// Whether the owner keeps a copy of some units beside them ([`Fml::write_with_copy`]):
    /// then GC reads the copy of a unit it cannot read ([`Owner::record_of_copy`]).
    fn keeps_copies(&self) -> bool {
        false
    }
    /// Whether the unit with record `oob` (as [`Owner::before_copy`] left it) is moved with a
    /// copy beside it.
    fn keeps_copy(&mut self, _oob: &[u8]) -> bool {
        false
    }
    /// The record of the copy of a unit with record `oob` written at `primary` (into `out`,
    /// returning the length used); asked only when [`Owner::keeps_copy`] said yes.
    fn copy_record(&mut self, _primary: Vpa, _oob: &[u8], _out: &mut [u8]) -> usize {
        0
    }
    /// Whether `oob`, read from the unit right after `from`, is the record of a copy of the unit
    /// at `from`; if so, rewrites it in place into the record that unit was written with, and
    /// GC moves the copy's payload in its place.
    fn record_of_copy(&mut self, _from: Vpa, _oob: &mut [u8]) -> bool {
        false
    }
    /// The unit at `from` now lives at `to`.
    fn relocated(&mut self, from: Vpa, to: Vpa, oob: &[u8]);
    /// The unit at `from` could not be read back; its contents are lost.
    fn lost(&mut self, from: Vpa, error: &FlashError);
}

/// Why an FML operation failed.
#[derive(Debug, thiserror::Error)]
pub enum FmlError {
    /// The device refused an operation the FML could not work around (a power cut, a read error,
    /// ...).
    #[error(transparent)]
    Flash(#[from] FlashError),
    /// No free block to write into, and GC cannot free one.
    #[error("no space: {free} free blocks and no block GC could reclaim")]
    NoSpace {
        /// Blocks in the free pool (GC keeps the last one to copy into).
        free: u32,
    },
    /// A write named a stream that does not exist (the stream, the streams the mapping layer
    /// asked for).
    #[error("stream {0} does not exist (the mapping layer asked for {1} streams)")]
    NoStream(u8, u8),
    /// The settings do not fit the device ([`FmlConfig::validate`]).
    #[error("FML configuration: {0}")]
    Config(#[from] FmlConfigError),
}

/// Counters of FML work, in write units and blocks.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub struct FmlStats {
    /// Units programmed, host and GC writes alike.
    pub units_written: u64,
    /// Units read.
    pub units_read: u64,
    /// Valid units GC copied out of victims.
    pub gc_units_copied: u64,
    /// Victims GC chose.
    pub gc_victims: u64,
    /// Virtual time GC steps took, each from its issue to its completion (copies and erases;
    /// BLOCKMGMT-09 Table 5's "cleaning time"). Steps on distinct dies may overlap, so this can
    /// exceed the elapsed time.
    pub gc_busy_ns: u64,
    /// Blocks erased (GC victims, and free blocks erased again before first use).
    pub blocks_erased: u64,
    /// Blocks retired as bad (failed erase, failed program, worn out).
    pub blocks_retired: u64,
    /// Valid units GC could not read back: their contents are lost.
    pub units_lost: u64,
    /// Programs the device failed (each turns its block into a victim to retire).
    pub program_failures: u64,
    /// Update blocks closed unfilled because their stream passed to another object
    /// ([`Fml::seal`]).
    pub blocks_sealed: u64,
}

/// The flash management layer over one device: super-block states, streams' update blocks, the free
/// pool, and the GC job. Mapping layers write units through it and run its GC steps.
#[derive(Clone)]
pub struct Fml<F: Flash> {
    dev: Ganged<F>,
    config: FmlConfig,
    layout: Layout,
    table: BlockTable,
    free: FreePool,
    /// Open block per stream; the last entry is the GC stream.
    open: Vec<Option<u32>>,
    job: GcJob,
    /// Blocks whose programs failed: GC empties them first, then retires them.
    retiring: VecDeque<u32>,
    next_seq: u64,
    stats: FmlStats,
    unit_buf: Vec<u8>,
    oob_buf: Vec<u8>,
    /// Blocks not bad from the factory (grown bad blocks included).
    factory_good: u64,
    /// Free blocks found at mount, erased again before first use (a power cut may have
    /// interrupted their erase).
    needs_erase: Vec<bool>,
    /// Segment class of each stream's blocks.
    stream_class: Vec<SegmentClass>,
    /// Blocks found partly programmed at mount (update blocks a power cut left open), reused
    /// as update blocks before any free block: otherwise every reboot would strand the unused
    /// tail of each stream's update block until GC, and a store rebooted often enough runs out
    /// of free blocks before its recovery can checkpoint.
    partial: Vec<u32>,
    /// Host writes may take the last free block ([`Fml::with_last_free_block`]).
    last_free_block: bool,
}

/// Whether super-block `id`'s first `next` units, and only they, are programmed: the FML
/// programs units in order, so any other pattern (a misdirected write landed in it) makes the
/// block unsafe to append to.
fn programmed_in_order<F: Flash>(dev: &Ganged<F>, layout: &Layout, id: u32, next: u32) -> bool {
    let width = dev.flash().config().gang.units_per_superblock;
    (0..width).all(|u| {
        let expected = next / width + u32::from(u < next % width);
        let v = layout.vpa(id, u);
        (0..layout.pages_per_unit()).all(|i| {
            dev.flash()
                .block_info(layout.page(v, i).block_addr())
                .next_page
                == expected
        })
    })
}

impl<F: Flash> Fml<F> {
    /// Opens the FML over a device, fresh or holding data. Blocks the device says hold programmed
    /// units are closed (`Full`) with no valid units: the mapping layer's recovery marks the
    /// live ones with [`Fml::mark_valid`] after a [`Fml::scan`]. `oob_record_bytes` is the size
    /// of the mapping layer's OOB record, which GC copies along with each unit.
    pub fn open(
        flash: F,
        config: FmlConfig,
        streams: u8,
        oob_record_bytes: usize,
    ) -> Result<Self, FmlError> {
        let dev = Ganged::new(flash);
        let layout = *dev.layout();
        config.validate(layout.superblocks, streams as u32 + 1)?;
        let mut table = BlockTable::new(layout.superblocks, layout.units_per_superblock);
        let mut free = FreePool::default();
        let mut needs_erase = vec![false; layout.superblocks as usize];
        let mut retiring = VecDeque::new();
        let mut partial = Vec::new();
        let mut factory_good = 0;
        let width = dev.flash().config().gang.units_per_superblock;
        for id in 0..layout.superblocks {
            let info = dev.superblock_info(id);
            factory_good += !info.factory_bad as u64;
            // Units rotate over the super-block's parallel units: offset `o` is page
            // `o / width` of parallel unit `o % width`. The write pointer is one past the last
            // programmed unit of any of them. Programmed in order, that is the sum of their
            // pages; a page a misdirected write skipped leaves one parallel unit behind, and
            // the sum would then put the other units' last programmed pages past the pointer
            // (recovery refused them as never programmed).
            let next: u32 = (0..width)
                .map(|u| {
                    let pages = dev
                        .flash()
                        .block_info(layout.page(layout.vpa(id, u), 0).block_addr())
                        .next_page;
                    if pages == 0 {
                        0
                    } else {
                        (pages - 1) * width + u + 1
                    }
                })
                .max()
                .unwrap_or(0);
            let mut found = Loaded {
                state: BlockState::Free,
                next,
                erase_count: info.erase_count,
                seq: id as u64,
                retire: false,
            };
            if info.bad {
                // A block that went bad on a failed program still holds the units written
                // before the failure, and they stay readable: open it as a victim to retire
                // once GC has moved them, exactly as before the reboot. Otherwise a power cut
                // between the failure and the end of that GC would lose them.
                if info.factory_bad || next == 0 {
                    found.state = BlockState::Bad;
                    found.next = 0;
                } else {
                    found.state = BlockState::Victim;
                    found.retire = true;
                    retiring.push_back(id);
                }
            } else if next == 0 {
                free.push(id, info.erase_count);
                needs_erase[id as usize] = info.erase_count > 0;
            } else {
                found.state = BlockState::Full;
                if next < layout.units_per_superblock
                    && programmed_in_order(&dev, &layout, id, next)
                {
                    partial.push(id);
                }
            }
            table.load(id, found);
        }
        Ok(Fml {
            unit_buf: vec![0; layout.write_unit_bytes as usize],
            oob_buf: vec![
                0;
                oob_record_bytes
                    .min(dev.flash().config().geometry.oob_size_bytes as usize)
            ],
            dev,
            config,
            layout,
            table,
            free,
            open: vec![None; streams as usize + 1],
            job: GcJob::Idle,
            retiring,
            factory_good,
            next_seq: layout.superblocks as u64,
            stats: FmlStats::default(),
            needs_erase,
            stream_class: vec![SegmentClass::Data; streams as usize + 1],
            partial,
            last_free_block: false,
        })
    }

    /// The device's super-block / write-unit geometry.
    pub fn layout(&self) -> &Layout {
        &self.layout
    }
    /// The settings the FML was opened with.
    pub fn config(&self) -> &FmlConfig {
        &self.config
    }
    /// Bytes of the spare (OOB) area of each page of the device.
    pub fn oob_bytes_per_page(&self) -> usize {
        self.dev.flash().config().geometry.oob_size_bytes as usize
    }

    /// Bytes of each unit's OOB area read from now on by GC copies and scans (at most the
    /// device's spare area per page): for a mapping layer some of whose records are longer than
    /// the `oob_record_bytes` it opened with (the object store's encrypted data units). Reading
    /// more costs the transfer of those bytes on every GC copy, which is why it is not the
    /// default.
    pub fn set_oob_record_bytes(&mut self, bytes: usize) {
        let n = bytes.min(self.oob_bytes_per_page());
        self.oob_buf.resize(n, 0);
    }

    /// The device under the FML.
    pub fn flash(&self) -> &F {
        self.dev.flash()
    }
    /// The device under the FML, mutably (power cuts, fault injection).
    pub fn flash_mut(&mut self) -> &mut F {
        self.dev.flash_mut()
    }
    /// Closes the FML and returns its device.
    pub fn into_flash(self) -> F {
        self.dev.into_flash()
    }
    /// Counters of FML work so far.
    pub fn stats(&self) -> FmlStats {
        self.stats
    }
    /// Every super-block's bookkeeping, indexed by id (read-only: states change only inside the
    /// FML).
    pub fn blocks(&self) -> &[Block] {
        self.table.blocks()
    }
    /// The GC job's state.
    pub fn job(&self) -> GcJob {
        self.job
    }
    /// Blocks in the free pool.
    pub fn free_blocks(&self) -> u32 {
        self.free.len()
    }
    /// Whether the unit at `v` holds live data.
    pub fn is_valid(&self, v: Vpa) -> bool {
        self.table.is_valid(v.0)
    }
    /// Declares what a stream's blocks hold, for per-segment-type cleaning thresholds.
    pub fn set_stream_class(&mut self, stream: StreamId, class: SegmentClass) {
        if let Some(c) = self.stream_class.get_mut(stream.0 as usize) {
            *c = class;
        }
    }

    /// Where the next unit written to `stream` lands, if its update block is open (a die
    /// scheduler's look-ahead, BLOCKMGMT-09 3.2); `None` when the next write opens a new block.
    pub fn next_unit(&self, stream: StreamId) -> Option<Vpa> {
        let id = (*self.open.get(stream.0 as usize)?)?;
        let next = self.table.blocks()[id as usize].next;
        (next < self.layout.units_per_superblock).then(|| self.layout.vpa(id, next))
    }

    /// What the next GC step will touch, so a scheduler can issue it once its dies are free
    /// (OSSD-13 V-F: a prioritized request waits for at most the step under way on its die).
    pub fn next_gc_step(&self) -> NextGc {
        match self.job {
            GcJob::Idle => NextGc::Choose,
            GcJob::Copying { victim, next } => match self.table.next_valid(victim, next) {
                Some(unit) => NextGc::Copy { from: Vpa(unit) },
                None => NextGc::Erase { victim },
            },
            GcJob::Erasing { victim } => NextGc::Erase { victim },
        }
    }

    /// Lets host writes take the last free block, which is otherwise left to GC copies, while
    /// `on`. For the metadata GC itself needs before it can erase an emptied victim (the
    /// mapping layer's checkpoint): the victim copies nothing more, and its erase gives the
    /// block back. Without it a checkpoint whose stream has no open block deadlocks GC.
    pub fn with_last_free_block(&mut self, on: bool) {
        self.last_free_block = on;
    }

    /// The FML's own stream for GC copies.
    pub fn gc_stream(&self) -> StreamId {
        StreamId((self.open.len() - 1) as u8)
    }

    /// Write units a mapping layer may keep valid at once: every usable block less the GC
    /// reserve (low watermark), the open update blocks and the bad-block reserve.
    pub fn capacity_units(&self) -> u64 {
        self.capacity_of(self.good_blocks())
    }

    fn capacity_of(&self, good: u64) -> u64 {
        let reserve = (good * self.config.bad_block_reserve_permille as u64).div_ceil(1000);
        let held = self.config.low_watermark_blocks as u64
            + self.config.realtime_reserve_blocks as u64
            + self.open.len() as u64
            + reserve;
        good.saturating_sub(held) * self.layout.units_per_superblock as u64
    }

    /// Total write units of usable blocks.
    pub fn physical_units(&self) -> u64 {
        self.good_blocks() * self.layout.units_per_superblock as u64
    }

    /// Write units of the blocks that were good when the device left the factory: unlike
    /// [`Fml::physical_units`], grown bad blocks do not change it, so a mapping layer can size
    /// its logical space with it once and for all.
    pub fn factory_good_units(&self) -> u64 {
        self.factory_good * self.layout.units_per_superblock as u64
    }

    /// [`Fml::capacity_units`] of the device as it left the factory (no grown bad blocks).
    pub fn capacity_units_as_built(&self) -> u64 {
        self.capacity_of(self.factory_good)
    }

    fn good_blocks(&self) -> u64 {
        self.table
            .blocks()
            .iter()
            .filter(|b| b.state != BlockState::Bad)
            .count() as u64
    }

    /// Free blocks are below the low watermark: GC must run before the next host write.
    pub fn must_collect(&self) -> bool {
        self.free.len() < self.config.low_watermark_blocks + self.config.realtime_reserve_blocks
    }

    /// As [`Fml::must_collect`] for a real-time write, which may use the blocks held back by
    /// `realtime_reserve_blocks` (OSSD-13 IV-C).
    pub fn must_collect_realtime(&self) -> bool {
        self.free.len() < self.config.low_watermark_blocks
    }

    /// Background GC has work: below the high watermark (idle or busy), or a victim under way.
    pub fn wants_collect(&self, idle: bool) -> bool {
        let high = if idle {
            self.config.high_watermark_idle_blocks
        } else {
            self.config.high_watermark_busy_blocks
        };
        self.job != GcJob::Idle || !self.retiring.is_empty() || self.free.len() < high
    }

    /// Writes one unit into `stream`; returns where it went and when it is programmed.
    pub fn write(
        &mut self,
        at: Nanos,
        stream: StreamId,
        payload: Payload<'_>,
        oob: &[u8],
    ) -> Result<(Vpa, Nanos), FmlError> {
        if stream.0 as usize >= self.open.len() {
            return Err(FmlError::NoStream(stream.0, self.open.len() as u8 - 1));
        }
        let host = stream != self.gc_stream() && !self.last_free_block;
        let mut at = at;
        loop {
            let (id, t) = self.update_block(at, stream, host)?;
            at = t;
            let off = self.table.blocks()[id as usize].next;
            let vpa = self.layout.vpa(id, off);
            let result = self.dev.program(at, vpa, payload, oob);
            let filled = self.table.programmed(id, at) == self.layout.units_per_superblock;
            match result {
                Ok(done) => {
                    self.table.set_valid(vpa.0);
                    if filled {
                        self.table.set_state(id, BlockState::Full);
                        self.open[stream.0 as usize] = None;
                    }
                    self.stats.units_written += 1;
                    return Ok((vpa, done));
                }
                Err(FlashError::ProgramFailed(_) | FlashError::BadBlock(_)) => {
                    // Grown bad block: stop writing here, let GC move what it holds, retry.
                    self.stats.program_failures += 1;
                    self.open[stream.0 as usize] = None;
                    self.table.fail_program(id);
                    self.retiring.push_back(id);
                }
                Err(FlashError::OutOfOrder { .. } | FlashError::NotErased(_)) => {
                    // The page at our write pointer is already programmed: a misdirected
                    // write landed here. Nothing was written; close the block (GC reclaims
                    // it as usual) and retry in another.
                    self.stats.blocks_sealed += 1;
                    self.table.set_state(id, BlockState::Full);
                    self.open[stream.0 as usize] = None;
                }
                Err(e) => return Err(e.into()),
            }
        }
    }

    /// Writes one unit into `stream` followed by a copy of it in the next unit of the same block
    /// (a mapping layer's second copy of its metadata, which it reads when the first fails). The
    /// copy carries the OOB record `copy_oob(primary)` returns (into its buffer, with the length
    /// used) and is never valid: it is no unit of its own, GC never moves it, and it lives and
    /// dies with its block, as the unit it copies does until GC moves that (and writes a new
    /// pair). Returns where the primary went and when both are programmed.
    ///
    /// An update block with one unit left is closed unfilled first, and a pair the device split
    /// (a failed program of the copy moves it to another block) is written again: a copy is
    /// always at the primary's address plus one.
    pub fn write_with_copy(
        &mut self,
        at: Nanos,
        stream: StreamId,
        payload: Payload<'_>,
        oob: &[u8],
        mut copy_oob: impl FnMut(Vpa, &mut [u8]) -> usize,
    ) -> Result<(Vpa, Nanos), FmlError> {
        let units = self.layout.units_per_superblock;
        let mut at = at;
        debug_assert!(units >= 2, "a unit and its copy share a block");
        let mut copy = vec![0u8; oob.len().max(64)];
        loop {
            if let Some(Some(id)) = self.open.get(stream.0 as usize) {
                if self.table.blocks()[*id as usize].next + 2 > units {
                    self.seal(stream);
                }
            }
            let (v, t) = self.write(at, stream, payload, oob)?;
            let n = copy_oob(v, &mut copy);
            let written = self.write(at, stream, payload, &copy[..n]);
            let (c, t2) = match written {
                Ok(x) => x,
                Err(e) => {
                    self.table.clear_valid(v.0);
                    return Err(e);
                }
            };
            self.table.clear_valid(c.0);
            if c.0 == v.0 + 1 && self.layout.superblock_of(c) == self.layout.superblock_of(v) {
                return Ok((v, t.max(t2)));
            }
            // The primary has no copy beside it: drop it and write both again.
            self.table.clear_valid(v.0);
            at = t.max(t2);
        }
    }

    /// Closes `stream`'s update block unfilled, so that its next unit opens a fresh one. The
    /// block's unprogrammed tail is lost to writes until GC erases it; a placement uses this when
    /// a stream passes to another object (OSSD-13 VI-C), so that no block mixes the two.
    pub fn seal(&mut self, stream: StreamId) {
        if let Some(Some(id)) = self.open.get_mut(stream.0 as usize).map(Option::take) {
            self.table.set_state(id, BlockState::Full);
            self.stats.blocks_sealed += 1;
        }
    }

    /// The stream's update block, opening the least-worn free block if it has none.
    fn update_block(
        &mut self,
        at: Nanos,
        stream: StreamId,
        host: bool,
    ) -> Result<(u32, Nanos), FmlError> {
        if let Some(id) = self.open[stream.0 as usize] {
            return Ok((id, at));
        }
        if let Some(id) = self.adopt_partial() {
            self.open_as(id, stream);
            return Ok((id, at));
        }
        // Host streams leave the last free block to GC, which needs somewhere to copy into (a
        // victim's valid units never fill more than one block).
        if host && self.free.len() <= 1 {
            return Err(FmlError::NoSpace {
                free: self.free.len(),
            });
        }
        let mut at = at;
        loop {
            let id = self
                .free
                .pop_least_worn()
                .ok_or(FmlError::NoSpace { free: 0 })?;
            if std::mem::take(&mut self.needs_erase[id as usize]) {
                match self.dev.erase(at, id) {
                    Ok(done) => {
                        at = done;
                        self.table.erased_free(id);
                        self.stats.blocks_erased += 1;
                    }
                    Err(FlashError::EraseFailed(_) | FlashError::BadBlock(_)) => {
                        self.retire_now(id)?;
                        continue;
                    }
                    Err(e) => return Err(e.into()),
                }
            }
            self.open_as(id, stream);
            return Ok((id, at));
        }
    }

    fn open_as(&mut self, id: u32, stream: StreamId) {
        let class = self.stream_class[stream.0 as usize];
        self.table.open(id, stream.0, class, self.next_seq);
        self.next_seq += 1;
        self.open[stream.0 as usize] = Some(id);
    }

    /// A block left partly programmed at mount that is still closed and unclaimed by GC.
    fn adopt_partial(&mut self) -> Option<u32> {
        while let Some(id) = self.partial.pop() {
            let b = &self.table.blocks()[id as usize];
            if b.state == BlockState::Full && !b.retire && b.next < self.layout.units_per_superblock
            {
                return Some(id);
            }
        }
        None
    }

    /// GC's victim `block` held a unit its owner lost ([`Owner::lost`]) that a durable
    /// reference it cannot drop still names: the block is retired as bad when GC has emptied
    /// it, not erased, so the page is never programmed with something else. A block that is
    /// not GC's victim is left as it is.
    pub fn retire_victim_when_empty(&mut self, block: u32) {
        if (block as usize) < self.table.blocks().len() {
            self.table.retire_when_empty(block);
        }
    }

    /// Marks a unit invalid (overwritten, trimmed, deleted). Returns false if it was not valid.
    pub fn invalidate(&mut self, v: Vpa) -> bool {
        self.table.clear_valid(v.0)
    }

    /// Marks a unit valid during recovery. What recovery found on flash is untrusted: a unit
    /// past its block's write pointer, in a bad block, out of range, or referenced twice is an
    /// error naming it, not a panic.
    pub fn mark_valid(&mut self, v: Vpa) -> Result<(), MarkValidError> {
        let unit = v.0;
        let id = self.layout.superblock_of(v);
        let Some(b) = self.table.blocks().get(id as usize) else {
            return Err(MarkValidError::BeyondDevice { unit });
        };
        if b.state == BlockState::Bad {
            return Err(MarkValidError::InBadBlock { unit });
        }
        if self.layout.offset_of(v) >= b.next {
            return Err(MarkValidError::NeverProgrammed { unit });
        }
        #[cfg(feature = "mutants")]
        if mutants::on(mutants::Mutant::SpuriousCorrupted) && self.layout.offset_of(v) + 1 >= b.next
        {
            return Err(MarkValidError::NeverProgrammed { unit });
        }
        if self.table.is_valid(v.0) {
            return Err(MarkValidError::ReferencedTwice { unit });
        }
        self.table.set_valid(v.0);
        Ok(())
    }

    /// Reads one unit (`data` a whole unit, or empty for the OOB record only).
    pub fn read(
        &mut self,
        at: Nanos,
        v: Vpa,
        data: &mut [u8],
        oob: &mut [u8],
    ) -> Result<(Nanos, Content), FmlError> {
        self.stats.units_read += 1;
        Ok(self.dev.read(at, v, data, oob)?)
    }

    /// Reads a unit's OOB record for recovery, checking that every page of the unit was
    /// programmed whole ([`flash::gang::Ganged::read_record_whole`]): a unit a power cut tore
    /// part-way through its program fails as uncorrectable, though its record reads back.
    pub fn read_record_whole(
        &mut self,
        at: Nanos,
        v: Vpa,
        oob: &mut [u8],
    ) -> Result<(Nanos, Content), FmlError> {
        self.stats.units_read += 1;
        Ok(self.dev.read_record_whole(at, v, oob)?)
    }

    /// Reads the OOB record of every programmed unit, block by block in write order, for
    /// recovery. Unreadable units are passed as errors. Returns when the scan completes.
    pub fn scan(
        &mut self,
        at: Nanos,
        mut visit: impl FnMut(Vpa, Result<(Content, &[u8]), FlashError>),
    ) -> Result<Nanos, FmlError> {
        let mut done = at;
        let mut oob = std::mem::take(&mut self.oob_buf);
        for id in 0..self.layout.superblocks {
            let b = self.table.blocks()[id as usize];
            if b.state == BlockState::Bad {
                continue;
            }
            for off in 0..b.next {
                let v = self.layout.vpa(id, off);
                match self.dev.read(at, v, &mut [], &mut oob) {
                    Ok((t, content)) => {
                        done = done.max(t);
                        visit(v, Ok((content, &oob)));
                    }
                    Err(e @ FlashError::Uncorrectable { .. }) => visit(v, Err(e)),
                    Err(e) => {
                        self.oob_buf = oob;
                        return Err(e.into());
                    }
                }
            }
        }
        self.oob_buf = oob;
        Ok(done)
    }

    /// Runs one GC step: choose a victim, copy one valid unit, or erase the emptied victim.
    pub fn gc_step(&mut self, at: Nanos, owner: &mut dyn Owner) -> Result<GcStep, FmlError> {
        match self.job {
            GcJob::Idle => {
                let Some(victim) = self.choose() else {
                    return Ok(GcStep::Idle);
                };
                if self.table.blocks()[victim as usize].state == BlockState::Full {
                    self.table.set_state(victim, BlockState::Victim);
                }
                self.stats.gc_victims += 1;
                self.job = GcJob::Copying { victim, next: 0 };
                Ok(GcStep::Chose { victim })
            }
            GcJob::Copying { victim, next } => match self.mutant_next_valid(victim, next) {
                Some(unit) => {
                    let done = self.copy(at, Vpa(unit), owner)?;
                    self.stats.gc_busy_ns += done.saturating_sub(at);
                    self.job = GcJob::Copying {
                        victim,
                        next: self.layout.offset_of(Vpa(unit)) + 1,
                    };
                    Ok(GcStep::Copied { done_ns: done })
                }
                None => {
                    self.job = GcJob::Erasing { victim };
                    self.timed_erase(at, victim)
                }
            },
            GcJob::Erasing { victim } => self.timed_erase(at, victim),
        }
    }

    /// The next unit GC copies from `victim`: its first valid unit at offset `next` or later;
    /// with the mutant `GcCopiesStale` (feature `mutants`), the victim's first unit whether or not
    /// it is still valid.
    fn mutant_next_valid(&self, victim: u32, next: u32) -> Option<u32> {
        #[cfg(feature = "mutants")]
        if next == 0 && mutants::on(mutants::Mutant::GcCopiesStale) {
            return Some(self.layout.vpa(victim, 0).0);
        }
        self.table.next_valid(victim, next)
    }

    fn timed_erase(&mut self, at: Nanos, victim: u32) -> Result<GcStep, FmlError> {
        let step = self.erase_victim(at, victim)?;
        if let GcStep::Erased { done_ns } = step {
            self.stats.gc_busy_ns += done_ns.saturating_sub(at);
        }
        Ok(step)
    }

    /// Runs GC steps until a whole victim is reclaimed (or nothing can be); returns when the
    /// last step completes.
    pub fn collect_one(
        &mut self,
        at: Nanos,
        owner: &mut dyn Owner,
    ) -> Result<Option<Nanos>, FmlError> {
        let mut t = at;
        loop {
            match self.gc_step(t, owner)? {
                GcStep::Idle => return Ok(None),
                GcStep::Chose { .. } => {}
                GcStep::Copied { done_ns } => t = done_ns,
                GcStep::Erased { done_ns } => return Ok(Some(done_ns)),
                GcStep::Retired => return Ok(Some(t)),
            }
        }
    }

    fn choose(&mut self) -> Option<u32> {
        if let Some(id) = self.retiring.pop_front() {
            return Some(id);
        }
        let units = self.layout.units_per_superblock;
        let c = &self.config;
        let thresholds = Thresholds {
            data_percent: c.data_victim_threshold_percent,
            metadata_percent: c.metadata_victim_threshold_percent,
            atime_percent: c.atime_victim_threshold_percent,
        };
        let now = self.last_time();
        let blocks = self.table.blocks();
        wear::static_victim(blocks, c.static_wear_threshold)
            .or_else(|| choose_victim(c.victim_policy, blocks, units, now, &thresholds))
            .or_else(|| {
                // Short of space and nothing within the thresholds: the pure policy, rather than
                // running out of space (OSCM-11 V-B reports that outcome for low thresholds).
                (self.free.len() < c.low_watermark_blocks && !c.victim_thresholds_bind)
                    .then(|| choose_victim(c.victim_policy, blocks, units, now, &Thresholds::NONE))
                    .flatten()
            })
    }

    fn last_time(&self) -> Nanos {
        self.dev.flash().stats().busy_until_ns
    }

    fn copy(&mut self, at: Nanos, from: Vpa, owner: &mut dyn Owner) -> Result<Nanos, FmlError> {
        let mut data = std::mem::take(&mut self.unit_buf);
        let mut oob = std::mem::take(&mut self.oob_buf);
        let read = self.dev.read(at, from, &mut data, &mut oob);
        self.stats.units_read += 1;
        let timing = self.dev.flash().config().payload == PayloadMode::Timing;
        let result = match read {
            Ok(_) if timing && !owner.record_of(from, &mut oob) => Err(FmlError::Flash(
                FlashError::Config(DeviceConfigError::TimingOnly {
                    what: "GC needs the OOB records of the units it copies, and this mapping \
                           layer does not keep them itself (only the page-mapping FTL and \
                           DFTL run on a timing-only device)"
                        .into(),
                }),
            )),
            Ok((t, content)) if content != Content::Erased && owner.recognizes(from, &oob) => {
                self.move_unit(t, from, content, &data, &mut oob, owner)
            }
            Ok((t, _)) => {
                // A valid unit that reads erased was never really written (a misdirected
                // write), or its record is damaged beyond recognition: its contents are lost,
                // unless the owner keeps a copy of it.
                let lost = FlashError::Uncorrectable {
                    addr: self.layout.page(from, 0),
                    bit_errors: 0,
                };
                self.move_copy_or_lose(t, from, &lost, &mut data, &mut oob, owner)
            }
            Err(e @ FlashError::Uncorrectable { .. }) => {
                self.move_copy_or_lose(at, from, &e, &mut data, &mut oob, owner)
            }
            Err(e) => Err(e.into()),
        };
        self.unit_buf = data;
        self.oob_buf = oob;
        result
    }

    /// Writes the unit GC read from `from` (`content`, `data`, record `oob`) elsewhere, with a
    /// copy beside it if the owner keeps one ([`Owner::keeps_copy`]).
    fn move_unit(
        &mut self,
        t: Nanos,
        from: Vpa,
        content: Content,
        data: &[u8],
        oob: &mut [u8],
        owner: &mut dyn Owner,
    ) -> Result<Nanos, FmlError> {
        let payload = match content {
            Content::Bytes => Payload::Bytes(data),
            Content::Fingerprint(fp) => Payload::Fingerprint(fp),
            Content::Erased => unreachable!("erased units are not moved"),
        };
        let stream = owner.before_copy(from, oob).unwrap_or(self.gc_stream());
        let (to, done) = if owner.keeps_copy(oob) {
            let rec: &[u8] = oob;
            self.write_with_copy(t, stream, payload, rec, |v, out| {
                owner.copy_record(v, rec, out)
            })?
        } else {
            self.write(t, stream, payload, oob)?
        };
        self.table.clear_valid(from.0);
        self.stats.gc_units_copied += 1;
        owner.relocated(from, to, oob);
        Ok(done)
    }

    /// A unit GC could not read at `from` (`e`): moved from the copy beside it if the owner
    /// keeps one and it reads back ([`Owner::record_of_copy`]), else lost.
    fn move_copy_or_lose(
        &mut self,
        at: Nanos,
        from: Vpa,
        e: &FlashError,
        data: &mut [u8],
        oob: &mut [u8],
        owner: &mut dyn Owner,
    ) -> Result<Nanos, FmlError> {
        let next = Vpa(from.0 + 1);
        let id = self.layout.superblock_of(from);
        let beside = self.layout.superblock_of(next) == id
            && self.layout.offset_of(next) < self.table.blocks()[id as usize].next;
        if beside && owner.keeps_copies() {
            self.stats.units_read += 1;
            match self.dev.read(at, next, data, oob) {
                Ok((t, content))
                    if content != Content::Erased && owner.record_of_copy(from, oob) =>
                {
                    return self.move_unit(t, from, content, data, oob, owner);
                }
                Ok(_) | Err(FlashError::Uncorrectable { .. }) => {}
                Err(e) => return Err(e.into()),
            }
        }
        self.lose(from, e, owner);
        Ok(at)
    }

    fn lose(&mut self, from: Vpa, e: &FlashError, owner: &mut dyn Owner) {
        self.table.clear_valid(from.0);
        self.stats.units_lost += 1;
        owner.lost(from, e);
    }

    fn erase_victim(&mut self, at: Nanos, victim: u32) -> Result<GcStep, FmlError> {
        debug_assert_eq!(self.table.blocks()[victim as usize].valid, 0);
        self.job = GcJob::Idle;
        if self.table.blocks()[victim as usize].retire {
            self.retire_now(victim)?;
            return Ok(GcStep::Retired);
        }
        match self.dev.erase(at, victim) {
            Ok(done) => {
                let ec = self.table.erased_victim(victim);
                self.free.push(victim, ec);
                self.stats.blocks_erased += 1;
                Ok(GcStep::Erased { done_ns: done })
            }
            Err(FlashError::EraseFailed(_) | FlashError::BadBlock(_)) => {
                self.retire_now(victim)?;
                Ok(GcStep::Retired)
            }
            Err(e) => {
                self.job = GcJob::Erasing { victim };
                Err(e.into())
            }
        }
    }

    fn retire_now(&mut self, id: u32) -> Result<(), FmlError> {
        self.table.set_state(id, BlockState::Bad);
        self.stats.blocks_retired += 1;
        self.dev.retire(id)?;
        Ok(())
    }

    /// Whole-structure check (tests, debug builds, fsck): bitmap and counts agree, the free pool
    /// holds exactly the free blocks, every open block belongs to its stream.
    pub fn check(&self) -> Result<(), Inconsistency> {
        self.table.check()?;
        let free = self
            .table
            .blocks()
            .iter()
            .filter(|b| b.state == BlockState::Free)
            .count() as u32;
        if free != self.free.len() {
            return Err(Inconsistency::FreePool {
                free,
                pool: self.free.len(),
            });
        }
        for (s, open) in self.open.iter().enumerate() {
            if let Some(id) = open {
                let state = self.table.blocks()[*id as usize].state;
                if state != BlockState::Open(s as u8) {
                    return Err(Inconsistency::StreamBlock {
                        stream: s as u8,
                        block: *id,
                        state,
                    });
                }
            }
        }
        Ok(())
    }

    /// Erase counts over usable blocks: (min, max, mean).
    pub fn erase_counts(&self) -> (u32, u32, f64) {
        let usable: Vec<u32> = self
            .table
            .blocks()
            .iter()
            .filter(|b| b.state != BlockState::Bad)
            .map(|b| b.erase_count)
            .collect();
        let (Some(&min), Some(&max)) = (usable.iter().min(), usable.iter().max()) else {
            return (0, 0, 0.0);
        };
        let mean = usable.iter().map(|&e| e as f64).sum::<f64>() / usable.len() as f64;
        (min, max, mean)
    }
}

#[cfg(test)]
mod realtime_tests {
    use super::*;

    /// OSSD-13 IV-C's reserved update blocks: normal writes must collect earlier, real-time
    /// ones only at the low watermark; the reserve is no capacity; a high watermark below the
    /// normal writes' threshold is refused.
    #[test]
    fn reserved_blocks_for_realtime_writes() {
        let device = flash::preset("tiny").unwrap();
        let blocks = flash::gang::Layout::new(&device).superblocks;
        let open = |reserve: u32| {
            let mut cfg = FmlConfig::for_blocks(blocks);
            cfg.realtime_reserve_blocks = reserve;
            cfg.high_watermark_busy_blocks = cfg.low_watermark_blocks + reserve.max(1);
            cfg.high_watermark_idle_blocks = cfg.high_watermark_busy_blocks;
            Fml::open(flash::Nand::in_memory(device).unwrap(), cfg, 2, 16).unwrap()
        };
        let (plain, reserved) = (open(0), open(2));
        let per_block = plain.layout().units_per_superblock as u64;
        assert_eq!(
            plain.capacity_units() - reserved.capacity_units(),
            2 * per_block
        );
        let low = plain.config.low_watermark_blocks;
        let mut f = reserved;
        let stream = StreamId(0);
        let mut fp = 0u64;
        // Fill until a normal write would have to collect.
        while !f.must_collect() {
            fp += 1;
            f.write(0, stream, Payload::Fingerprint(fp), &[]).unwrap();
        }
        assert_eq!(f.free_blocks(), low + 1);
        assert!(!f.must_collect_realtime());
        let mut bad = FmlConfig::for_blocks(blocks);
        bad.realtime_reserve_blocks = 2;
        assert!(matches!(
            bad.validate(blocks, 3),
            Err(FmlConfigError::BusyBelowReserve { reserve: 2, .. })
        ));
    }
}

#[cfg(test)]
mod seal_tests {
    use super::*;

    /// A sealed update block is closed where it stands: the stream's next unit opens another
    /// block, the sealed one keeps its valid units, and the tables stay consistent.
    #[test]
    fn a_sealed_update_block_is_never_written_again() {
        let device = flash::preset("tiny").unwrap();
        let blocks = flash::gang::Layout::new(&device).superblocks;
        let mut f = Fml::open(
            flash::Nand::in_memory(device).unwrap(),
            FmlConfig::for_blocks(blocks),
            2,
            16,
        )
        .unwrap();
        let per_block = f.layout().units_per_superblock;
        let s = StreamId(0);
        let (a, _) = f.write(0, s, Payload::Fingerprint(1), &[]).unwrap();
        let (b, _) = f.write(0, s, Payload::Fingerprint(2), &[]).unwrap();
        assert_eq!(f.layout().superblock_of(a), f.layout().superblock_of(b));
        f.seal(s);
        f.seal(s); // no update block open: nothing to do
        assert_eq!(f.stats().blocks_sealed, 1);
        let sealed = f.layout().superblock_of(a);
        assert_eq!(f.blocks()[sealed as usize].state, BlockState::Full);
        assert!(f.blocks()[sealed as usize].next < per_block);
        for fp in 3..3 + 2 * per_block as u64 {
            let (v, _) = f.write(0, s, Payload::Fingerprint(fp), &[]).unwrap();
            assert_ne!(f.layout().superblock_of(v), sealed);
        }
        assert!(f.is_valid(a) && f.is_valid(b));
        f.check().unwrap();
    }
}

/// Why recovery could not mark a unit valid ([`Fml::mark_valid`]): what it found on flash
/// references a unit the device cannot back, so the image is corrupted.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum MarkValidError {
    /// The unit lies beyond the device.
    #[error("unit {unit} lies beyond the device")]
    BeyondDevice {
        /// The unit (virtual page address).
        unit: u32,
    },
    /// The unit lies in a bad block.
    #[error("unit {unit} lies in a bad block")]
    InBadBlock {
        /// The unit.
        unit: u32,
    },
    /// The unit lies past its block's write pointer.
    #[error("unit {unit} was never programmed (past its block's write pointer)")]
    NeverProgrammed {
        /// The unit.
        unit: u32,
    },
    /// The unit was marked valid already.
    #[error("unit {unit} is referenced twice")]
    ReferencedTwice {
        /// The unit.
        unit: u32,
    },
}

impl MarkValidError {
    /// The unit the error is about.
    pub fn unit(&self) -> u32 {
        match *self {
            MarkValidError::BeyondDevice { unit }
            | MarkValidError::InBadBlock { unit }
            | MarkValidError::NeverProgrammed { unit }
            | MarkValidError::ReferencedTwice { unit } => unit,
        }
    }
}

#[cfg(test)]
mod threshold_tests {
    use super::*;

    struct Mover;
    impl Owner for Mover {
        fn relocated(&mut self, _from: Vpa, _to: Vpa, _oob: &[u8]) {}
        fn lost(&mut self, _from: Vpa, _error: &FlashError) {}
    }

    /// OSCM-11 V-B: with data thresholds under 60% "the flash runs out of space". Every full
    /// block half live, a 30% data threshold, free blocks below the low watermark: GC falls
    /// back to greedy by default, and finds no victim when the thresholds bind.
    #[test]
    fn binding_thresholds_leave_gc_without_a_victim() {
        let device = flash::preset("tiny").unwrap();
        let blocks = flash::gang::Layout::new(&device).superblocks;
        for bind in [false, true] {
            let mut cfg = FmlConfig::for_blocks(blocks);
            cfg.data_victim_threshold_percent = 30;
            cfg.victim_thresholds_bind = bind;
            let mut f = Fml::open(flash::Nand::in_memory(device).unwrap(), cfg, 1, 16).unwrap();
            let s = StreamId(0);
            let mut fp = 0u64;
            while f.free_blocks() >= f.config().low_watermark_blocks {
                fp += 1;
                let (v, _) = f.write(0, s, Payload::Fingerprint(fp), &[]).unwrap();
                if fp.is_multiple_of(2) {
                    f.invalidate(v);
                }
            }
            let step = f.gc_step(0, &mut Mover).unwrap();
            if bind {
                assert!(matches!(step, GcStep::Idle), "{step:?}");
            } else {
                assert!(matches!(step, GcStep::Chose { .. }), "{step:?}");
            }
        }
    }
}

#[cfg(test)]
mod reopen_tests {
    use super::*;
    use flash::Gang;

    /// A misdirected write skipped one page of a super-block (its die's block stays a page
    /// behind the other's): the unit programmed after it on the other die is still below the
    /// write pointer at the next mount, so recovery may mark it valid. The pointer used to be
    /// the sum of the dies' pages, which put that unit past it ("never programmed").
    #[test]
    fn a_page_skipped_on_one_die_leaves_the_others_programmed() {
        let mut device = flash::preset("tiny").unwrap();
        device.geometry.channels = 2;
        device.geometry.dies_per_channel = 1;
        device.gang = Gang {
            planes_per_unit: 1,
            dies_per_unit: 1,
            units_per_superblock: 2,
        };
        let blocks = flash::gang::Layout::new(&device).superblocks;
        let cfg = FmlConfig::for_blocks(blocks);
        let faulty = flash::fault::Faulty::new(flash::Nand::in_memory(device).unwrap());
        let mut f = Fml::open(faulty, cfg, 1, 16).unwrap();
        let s = StreamId(0);
        let (a, _) = f.write(0, s, Payload::Fingerprint(1), &[]).unwrap();
        f.flash_mut().misdirect_next_program();
        let (skipped, _) = f.write(0, s, Payload::Fingerprint(2), &[]).unwrap();
        let (c, _) = f.write(0, s, Payload::Fingerprint(3), &[]).unwrap();
        let sb = f.layout().superblock_of(a);
        assert!([skipped, c]
            .iter()
            .all(|&v| f.layout().superblock_of(v) == sb));
        assert_eq!(f.flash().counts().misdirected_writes, 1);
        let mut f = Fml::open(f.into_flash(), cfg, 1, 16).unwrap();
        // Die 0 holds offsets 0 and 2, die 1 nothing: one past offset 2.
        assert_eq!(f.blocks()[sb as usize].next, 3);
        for v in [a, c] {
            f.mark_valid(v).unwrap();
        }
    }
}
