//! Device geometry, timing and ganging, and the typed physical addresses built from them.

use serde::{Deserialize, Serialize};

use crate::{DeviceConfigError, FlashError};

/// Virtual time in integer nanoseconds. The whole lab runs on it.
pub type Nanos = u64;

/// Physical organisation of the NAND array (OSSD-13 II-B).
///
/// Dies are numbered channel-first: die `d` sits on channel `d % channels`, so consecutive dies
/// are on different buses and ganging consecutive dies spreads a write over channels.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Geometry {
    /// Independent flash buses.
    pub channels: u32,
    /// Dies ("ways") sharing each bus.
    pub dies_per_channel: u32,
    /// Planes per die; one multi-plane operation drives all of them at once.
    pub planes_per_die: u32,
    /// Erase blocks per plane.
    pub blocks_per_plane: u32,
    /// Pages per erase block, programmed strictly in order.
    pub pages_per_block: u32,
    /// Data bytes per physical page.
    pub page_size_bytes: u32,
    /// Spare (OOB) bytes per page left to the FTL after ECC.
    pub oob_size_bytes: u32,
}

impl Geometry {
    /// Dies on the device (channels times dies per channel).
    pub fn dies(&self) -> u32 {
        self.channels * self.dies_per_channel
    }
    /// Erase blocks on the device.
    pub fn blocks(&self) -> u32 {
        self.dies() * self.planes_per_die * self.blocks_per_plane
    }
    /// Physical pages on the device.
    pub fn pages(&self) -> u64 {
        self.blocks() as u64 * self.pages_per_block as u64
    }
    /// Raw capacity in bytes (data areas only, no OOB).
    pub fn capacity_bytes(&self) -> u64 {
        self.pages() * self.page_size_bytes as u64
    }

    /// Flat index of a block: `((die * planes) + plane) * blocks_per_plane + block`.
    pub fn block_index(&self, b: BlockAddr) -> u32 {
        (b.die.0 * self.planes_per_die + b.plane) * self.blocks_per_plane + b.block
    }

    /// The block at a flat index (the inverse of [`Self::block_index`]).
    pub fn block_at(&self, index: u32) -> BlockAddr {
        let block = index % self.blocks_per_plane;
        let rest = index / self.blocks_per_plane;
        BlockAddr {
            die: DieId(rest / self.planes_per_die),
            plane: rest % self.planes_per_die,
            block,
        }
    }

    /// The channel bus a die sits on (`die % channels`).
    pub fn channel_of(&self, die: DieId) -> u32 {
        die.0 % self.channels
    }

    /// [`FlashError::OutOfRange`] unless the block exists in this geometry.
    pub fn check_block(&self, b: BlockAddr) -> Result<(), FlashError> {
        if b.die.0 >= self.dies()
            || b.plane >= self.planes_per_die
            || b.block >= self.blocks_per_plane
        {
            return Err(FlashError::OutOfRange {
                what: "block",
                detail: format!("{b}"),
            });
        }
        Ok(())
    }

    /// [`FlashError::OutOfRange`] unless the page exists in this geometry.
    pub fn check_page(&self, p: PageAddr) -> Result<(), FlashError> {
        self.check_block(p.block_addr())?;
        if p.page >= self.pages_per_block {
            return Err(FlashError::OutOfRange {
                what: "page",
                detail: format!("{p}"),
            });
        }
        Ok(())
    }

    /// Checks that every count is at least 1, pages are whole sectors, and page addresses fit
    /// 32 bits.
    pub fn validate(&self) -> Result<(), DeviceConfigError> {
        let fields = [
            ("channels", self.channels),
            ("dies_per_channel", self.dies_per_channel),
            ("planes_per_die", self.planes_per_die),
            ("blocks_per_plane", self.blocks_per_plane),
            ("pages_per_block", self.pages_per_block),
            ("page_size_bytes", self.page_size_bytes),
        ];
        for (name, v) in fields {
            if v == 0 {
                return Err(DeviceConfigError::Zero {
                    field: name,
                    table: "geometry",
                });
            }
        }
        if !self.page_size_bytes.is_multiple_of(512) {
            return Err(DeviceConfigError::PageSize {
                page_size_bytes: self.page_size_bytes,
            });
        }
        if self.blocks() as u64 * self.pages_per_block as u64 >= u32::MAX as u64 {
            return Err(DeviceConfigError::TooManyPages {
                pages: self.blocks() as u64 * self.pages_per_block as u64,
            });
        }
        Ok(())
    }
}

/// Operation latencies (OSSD-13 Table I; POFTL-14 Table I).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Timing {
    /// Array read time t_R.
    pub read_ns: Nanos,
    /// Array program time t_PROG.
    pub program_ns: Nanos,
    /// Block erase time t_BERS.
    pub erase_ns: Nanos,
    /// Transfer rate of each channel bus in MB/s (10^6 bytes per second).
    pub bus_mb_s: u64,
    /// Fixed controller cost added to every command.
    pub command_ns: Nanos,
    /// How commands share a die and a channel bus over time (default `in-order`).
    #[serde(default)]
    pub scheduling: Scheduling,
}

/// How the device model places a command on its die's and channel's timelines.
///
/// The model is a reservation model: each command is timed when it is issued, in the order
/// the stacks issue them. A stack may issue a command at a time later than the next one's
/// (a read-modify-write programs when its read completes; a GC copy programs when its read
/// completes), so the two modes differ in what a die or bus does before such a reservation.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Scheduling {
    /// Each die and bus keeps one "free at" time: a command starts no earlier than the end of
    /// every command issued before it, even one reserved for later. A die stays idle before a
    /// reservation in its future, and a read holds its die while it waits for the bus. The
    /// seed papers' presets keep this model (their results were measured with it).
    #[default]
    InOrder,
    /// Each die and bus keeps its busy intervals: a command takes the earliest idle gap, at or
    /// after its issue time, long enough for it, so a die serves commands in the order of the
    /// times they are issued, as a device with a command queue per die does (MQSim's
    /// transaction scheduling unit, Tavakkol et al., FAST'18). Gaps older than the last 32
    /// intervals per die or bus are forgotten (treated as busy).
    Backfill,
}

impl Scheduling {
    /// The name used in TOML and `--set` (`in-order`, `backfill`).
    pub fn name(self) -> &'static str {
        match self {
            Scheduling::InOrder => "in-order",
            Scheduling::Backfill => "backfill",
        }
    }
}

impl Timing {
    /// Time to move `bytes` over one channel bus.
    pub fn transfer_ns(&self, bytes: u32) -> Nanos {
        (bytes as u64 * 1000).div_ceil(self.bus_mb_s)
    }
    /// Checks that the bus moves at least 1 MB/s.
    pub fn validate(&self) -> Result<(), DeviceConfigError> {
        if self.bus_mb_s == 0 {
            return Err(DeviceConfigError::Zero {
                field: "bus_mb_s",
                table: "timing",
            });
        }
        Ok(())
    }
}

/// Ganging of physical pages and blocks into the units the FML manages.
///
/// A *parallel unit* is `dies_per_unit` consecutive dies (so on distinct channels) times
/// `planes_per_unit` planes, driven together by one multi-plane, multi-die command. A *write
/// unit* (virtual page) is one page in each member of a parallel unit. A *virtual erase block*
/// (super-block) is one block in each of `units_per_superblock` consecutive parallel units;
/// successive write units of a super-block rotate over its parallel units (page-wise striping,
/// OSSD-13 V-H), and it is erased as a whole.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Gang {
    /// Planes of one die in a parallel unit, driven by one multi-plane command.
    pub planes_per_unit: u32,
    /// Consecutive dies (so on distinct channels) in a parallel unit.
    pub dies_per_unit: u32,
    /// Parallel units whose blocks form one super-block (virtual erase block).
    pub units_per_superblock: u32,
}

impl Gang {
    /// No ganging: a write unit is one page, a super-block one block.
    pub const NONE: Gang = Gang {
        planes_per_unit: 1,
        dies_per_unit: 1,
        units_per_superblock: 1,
    };

    /// Checks that each grouping divides what it groups in geometry `g`.
    pub fn validate(&self, g: &Geometry) -> Result<(), DeviceConfigError> {
        if self.planes_per_unit == 0 || !g.planes_per_die.is_multiple_of(self.planes_per_unit) {
            return Err(DeviceConfigError::PlanesPerUnit {
                planes_per_unit: self.planes_per_unit,
                planes_per_die: g.planes_per_die,
            });
        }
        if self.dies_per_unit == 0 || !g.dies().is_multiple_of(self.dies_per_unit) {
            return Err(DeviceConfigError::DiesPerUnit {
                dies_per_unit: self.dies_per_unit,
                dies: g.dies(),
            });
        }
        let units = self.parallel_units(g);
        if self.units_per_superblock == 0 || !units.is_multiple_of(self.units_per_superblock) {
            return Err(DeviceConfigError::UnitsPerSuperblock {
                units_per_superblock: self.units_per_superblock,
                parallel_units: units,
            });
        }
        Ok(())
    }

    /// Parallel units on the device.
    pub fn parallel_units(&self, g: &Geometry) -> u32 {
        (g.dies() / self.dies_per_unit) * (g.planes_per_die / self.planes_per_unit)
    }
    /// Physical pages in one write unit.
    pub fn pages_per_unit(&self) -> u32 {
        self.planes_per_unit * self.dies_per_unit
    }
    /// Bytes of one write unit.
    pub fn write_unit_bytes(&self, g: &Geometry) -> u32 {
        self.pages_per_unit() * g.page_size_bytes
    }
    /// Super-blocks on the device.
    pub fn superblocks(&self, g: &Geometry) -> u32 {
        self.parallel_units(g) / self.units_per_superblock * g.blocks_per_plane
    }
    /// Write units in one super-block (its parallel units times pages per block).
    pub fn units_per_superblock_total(&self, g: &Geometry) -> u32 {
        self.units_per_superblock * g.pages_per_block
    }
    /// Bytes of one super-block.
    pub fn superblock_bytes(&self, g: &Geometry) -> u64 {
        self.units_per_superblock_total(g) as u64 * self.write_unit_bytes(g) as u64
    }
}

/// A die, numbered channel-first across the whole device.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct DieId(pub u32);

/// One physical erase block.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct BlockAddr {
    /// The die.
    pub die: DieId,
    /// The plane within the die.
    pub plane: u32,
    /// The block within the plane.
    pub block: u32,
}

/// One physical page.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct PageAddr {
    /// The die.
    pub die: DieId,
    /// The plane within the die.
    pub plane: u32,
    /// The block within the plane.
    pub block: u32,
    /// The page within the block.
    pub page: u32,
}

impl PageAddr {
    /// The block holding this page.
    pub fn block_addr(&self) -> BlockAddr {
        BlockAddr {
            die: self.die,
            plane: self.plane,
            block: self.block,
        }
    }
}

impl BlockAddr {
    /// Page `page` of this block.
    pub fn page(&self, page: u32) -> PageAddr {
        PageAddr {
            die: self.die,
            plane: self.plane,
            block: self.block,
            page,
        }
    }
}

impl std::fmt::Display for BlockAddr {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "die {} plane {} block {}",
            self.die.0, self.plane, self.block
        )
    }
}

impl std::fmt::Display for PageAddr {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "die {} plane {} block {} page {}",
            self.die.0, self.plane, self.block, self.page
        )
    }
}
