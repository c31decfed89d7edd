//! Device configuration and the named presets of the seed papers.

use serde::{Deserialize, Serialize};

use crate::geometry::{Gang, Geometry, Scheduling, Timing};

/// Everything that defines a simulated device. Serializes to TOML as the `[device]` table.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DeviceConfig {
    /// The NAND array: channels, dies, planes, blocks, pages.
    pub geometry: Geometry,
    /// Operation latencies and bus rate.
    pub timing: Timing,
    /// How pages and blocks are ganged into write units and super-blocks.
    pub gang: Gang,
    /// Program/erase cycles a block endures; the erase that would exceed it fails and the block
    /// becomes a grown bad block.
    pub endurance_cycles: u32,
    /// Fraction of blocks bad from the factory, in parts per million, drawn from `seed`.
    pub factory_bad_ppm: u32,
    /// Bit errors per page the ECC corrects; more makes the read fail as uncorrectable.
    pub ecc_correctable_bits: u32,
    /// Seed of the factory bad-block draw.
    pub seed: u64,
    /// What the device keeps of each programmed page: `full` (contents and OOB records, the
    /// default) or `timing` (nothing, like MQSim: for geometry and policy studies that do not
    /// check data).
    #[serde(default, skip_serializing_if = "PayloadMode::is_full")]
    pub payload: PayloadMode,
}

/// What a device keeps of each programmed page (`payload` in the `[device]` table).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum PayloadMode {
    /// Each page's contents (bytes or a fingerprint) and its OOB record: reads can be checked
    /// and a device holding data can be recovered.
    #[default]
    Full,
    /// Timing only: no page contents and no OOB records, so memory does not grow with the
    /// pages written. Reads of programmed pages return [`crate::NOT_STORED`]; the device times
    /// and counts every operation exactly as a full one does. Only a mapping layer that keeps
    /// its own record of what each unit holds can run on it (the page-mapping FTL and DFTL),
    /// reads cannot be verified, and it cannot be recovered or kept in an image.
    Timing,
}

impl PayloadMode {
    /// Whether this is the default, [`PayloadMode::Full`] (left out when serialized, so
    /// configurations and their digests read as before the setting existed).
    pub fn is_full(&self) -> bool {
        *self == PayloadMode::Full
    }
}

impl DeviceConfig {
    /// Checks the geometry, timing and gang and the limits below; the error names the first
    /// setting that is wrong.
    pub fn validate(&self) -> Result<(), DeviceConfigError> {
        self.geometry.validate()?;
        self.timing.validate()?;
        self.gang.validate(&self.geometry)?;
        if self.endurance_cycles == 0 {
            return Err(DeviceConfigError::Endurance);
        }
        if self.factory_bad_ppm > 100_000 {
            return Err(DeviceConfigError::FactoryBad {
                factory_bad_ppm: self.factory_bad_ppm,
            });
        }
        Ok(())
    }

    /// Bytes of one write unit (a ganged virtual page): pages per unit times the page size.
    pub fn write_unit_bytes(&self) -> u32 {
        self.gang.write_unit_bytes(&self.geometry)
    }
}

/// A named preset with a one-line description of where its numbers come from.
pub struct Preset {
    /// The name it is looked up by ([`preset`], `--device`, `device = ...` in experiment files).
    pub name: &'static str,
    /// Where the numbers come from, in one line.
    pub about: &'static str,
    /// The device.
    pub config: DeviceConfig,
    /// Settings of the device's controller that a run takes as its defaults when it names this
    /// preset (`ftl.*` keys and values as `ossd run --set` spells them; a run file or `--set`
    /// overrides each): what the simulated device's own firmware does, such as the sub-page
    /// mapping and MQSim's data cache on `mqsim-default`. Empty for every seed paper's device.
    pub ftl_defaults: &'static [(&'static str, &'static str)],
}

/// Samsung K9GAG08U0M (OSSD-13 Table I): 2 planes, 2,048 blocks per plane, 128 pages of 4 KiB,
/// t_R 60 us, t_PROG 0.8 ms, t_BERS 1.5 ms; MLC endurance 5K-10K cycles (OSSD-13 II-B).
const K9GAG_TIMING: Timing = Timing {
    read_ns: 60_000,
    program_ns: 800_000,
    erase_ns: 1_500_000,
    bus_mb_s: 40,
    command_ns: 0,
    scheduling: Scheduling::InOrder,
};

/// RawSSD ganging (OSSD-13 V-H): two dies with two-plane operation form one 16 KiB write unit,
/// and four such units form a virtual erase block of 8 MiB.
const RAWSSD_GANG: Gang = Gang {
    planes_per_unit: 2,
    dies_per_unit: 2,
    units_per_superblock: 4,
};

fn rawssd(dies_per_channel: u32, blocks_per_plane: u32) -> DeviceConfig {
    DeviceConfig {
        geometry: Geometry {
            channels: 8,
            dies_per_channel,
            planes_per_die: 2,
            blocks_per_plane,
            pages_per_block: 128,
            page_size_bytes: 4096,
            oob_size_bytes: 64,
        },
        timing: K9GAG_TIMING,
        gang: RAWSSD_GANG,
        endurance_cycles: 5_000,
        factory_bad_ppm: 0,
        ecc_correctable_bits: 8,
        seed: 0,
        payload: PayloadMode::Full,
    }
}

/// The SSD of BLOCKMGMT-09's simulator (Agrawal et al., "Design Tradeoffs for SSD Performance",
/// USENIX ATC 2008, Table 1): 25 us page read, 200 us program, 1.5 ms erase, 100 us to move a
/// 4 KiB page over a package's serial interface (about 40 MB/s); eight 4 GiB packages of two
/// dies, each package with its own data path.
fn ssd_004(gang: Gang) -> DeviceConfig {
    DeviceConfig {
        geometry: Geometry {
            channels: 8,
            dies_per_channel: 2,
            planes_per_die: 1,
            blocks_per_plane: 8192,
            pages_per_block: 64,
            page_size_bytes: 4096,
            oob_size_bytes: 64,
        },
        timing: Timing {
            read_ns: 25_000,
            program_ns: 200_000,
            erase_ns: 1_500_000,
            bus_mb_s: 40,
            command_ns: 0,
            scheduling: Scheduling::InOrder,
        },
        gang,
        endurance_cycles: 100_000,
        factory_bad_ppm: 0,
        ecc_correctable_bits: 8,
        seed: 0,
        payload: PayloadMode::Full,
    }
}

/// An enterprise NVMe drive of 4 TiB raw, for geometry and policy studies at scale (usually
/// with `payload = timing`). The numbers are typical of the 1xx-layer TLC generation in such
/// drives (2021-2024 data sheets and ONFI 4.x / Toggle 4 parts):
/// - 16 channels (the controllers of U.2 enterprise drives have 16; client ones 4-8), 4 dies
///   per channel, each die 512 Gbit = 64 GiB: 64 dies, 4 TiB raw;
/// - 4 planes per die, 16 KiB pages, 1,024 pages per block (16 MiB blocks), 1,024 blocks per
///   plane;
/// - TLC array times: t_R 50 us, t_PROG 500 us (a whole word line), t_BERS 3.5 ms;
/// - 1,200 MT/s 8-bit buses (ONFI 4.2 / Toggle 4), 1,200 MB/s per channel;
/// - 3,000 program/erase cycles (enterprise TLC), ECC of 120 bits per page (LDPC);
/// - each plane is a parallel unit (one 16 KiB page per write unit, as MQSim maps pages), and a
///   super-block takes one block from every plane of every die (256 blocks, 4 GiB), as
///   enterprise drives stripe their RAID-like super-blocks over all dies;
/// - dies queue commands and run them in issue-time order (`backfill`).
fn nvme_4t() -> DeviceConfig {
    DeviceConfig {
        geometry: Geometry {
            channels: 16,
            dies_per_channel: 4,
            planes_per_die: 4,
            blocks_per_plane: 1024,
            pages_per_block: 1024,
            page_size_bytes: 16384,
            oob_size_bytes: 64,
        },
        timing: Timing {
            read_ns: 50_000,
            program_ns: 500_000,
            erase_ns: 3_500_000,
            bus_mb_s: 1200,
            command_ns: 0,
            scheduling: Scheduling::Backfill,
        },
        gang: Gang {
            planes_per_unit: 1,
            dies_per_unit: 1,
            units_per_superblock: 256,
        },
        endurance_cycles: 3_000,
        factory_bad_ppm: 0,
        ecc_correctable_bits: 120,
        seed: 0,
        payload: PayloadMode::Full,
    }
}

/// The Linux nandsim module's emulated chip (OSCM-11 V), 2 KiB pages and 128 KiB erase blocks,
/// with `blocks_per_plane` erase blocks.
fn nandsim(blocks_per_plane: u32) -> DeviceConfig {
    DeviceConfig {
        geometry: Geometry {
            channels: 1,
            dies_per_channel: 1,
            planes_per_die: 1,
            blocks_per_plane,
            pages_per_block: 64,
            page_size_bytes: 2048,
            oob_size_bytes: 64,
        },
        // The Linux nandsim module's defaults: 25 us read, 300 us program, 2 ms erase,
        // and a fast emulated bus.
        timing: Timing {
            read_ns: 25_000,
            program_ns: 300_000,
            erase_ns: 2_000_000,
            bus_mb_s: 100,
            command_ns: 0,
            scheduling: Scheduling::InOrder,
        },
        gang: Gang::NONE,
        endurance_cycles: 100_000,
        factory_bad_ppm: 0,
        ecc_correctable_bits: 4,
        seed: 0,
        payload: PayloadMode::Full,
    }
}

/// Every named device, in the order `ossd presets` lists them.
pub fn presets() -> Vec<Preset> {
    vec![
        Preset {
            name: "rawssd",
            about: "OSSD-13 RawSSD as used: 8 buses x 2 dies of K9GAG08U0M, 16 KiB write unit, 8 MiB virtual erase block, 4 GiB",
            config: rawssd(2, 256),
            ftl_defaults: &[],
        },
        Preset {
            name: "rawssd-256g",
            about: "OSSD-13 RawSSD, the whole device: 8 buses x 16 dies of K9GAG08U0M, 256 GiB",
            config: rawssd(16, 2048),
            ftl_defaults: &[],
        },
        Preset {
            name: "nandsim-128m",
            about: "OSCM-11 NANDsim: one 128 MiB chip, 2 KiB pages, 128 KiB erase blocks",
            config: nandsim(1024),
            ftl_defaults: &[],
        },
        Preset {
            name: "nandsim-512m",
            about: "NANDsim's 512 MiB chip (id bytes 0xec 0xdc): 2 KiB pages, 128 KiB erase blocks",
            config: nandsim(4096),
            ftl_defaults: &[],
        },
        Preset {
            name: "poftl",
            about: "POFTL-14 Table I: 3.64 GiB in 16 banks, 4 KiB pages, 64-page blocks, read 0.05 / program 0.2 / erase 1.5 ms, parallelism 16",
            config: DeviceConfig {
                geometry: Geometry {
                    channels: 16,
                    dies_per_channel: 1,
                    planes_per_die: 1,
                    blocks_per_plane: 931,
                    pages_per_block: 64,
                    page_size_bytes: 4096,
                    oob_size_bytes: 64,
                },
                // The paper's simulator charges a transfer per page but does not give its
                // rate; 400 MB/s (ONFI 2) keeps it small next to the array times.
                timing: Timing {
                    read_ns: 50_000,
                    program_ns: 200_000,
                    erase_ns: 1_500_000,
                    bus_mb_s: 400,
                    command_ns: 0,
                    scheduling: Scheduling::InOrder,
                },
                gang: Gang { planes_per_unit: 1, dies_per_unit: 1, units_per_superblock: 16 },
                endurance_cycles: 100_000,
                factory_bad_ppm: 0,
                ecc_correctable_bits: 8,
                seed: 0,
                payload: PayloadMode::Full,
            },
            ftl_defaults: &[],
        },
        Preset {
            name: "mqsim-default",
            about: "MQSim's shipped ssdconfig.xml: 8 channels x 4 chips x 2 dies x 2 planes x 2,048 blocks x 256 pages x 8 KiB",
            config: DeviceConfig {
                geometry: Geometry {
                    channels: 8,
                    dies_per_channel: 8,
                    planes_per_die: 2,
                    blocks_per_plane: 2048,
                    pages_per_block: 256,
                    page_size_bytes: 8192,
                    oob_size_bytes: 64,
                },
                // MQSim defaults: 75 us read, 750 us program, 3.8 ms erase, 333 MT/s 8-bit bus;
                // commands queue per die and run in issue-time order, as MQSim's TSU runs them.
                timing: Timing {
                    read_ns: 75_000,
                    program_ns: 750_000,
                    erase_ns: 3_800_000,
                    bus_mb_s: 333,
                    command_ns: 0,
                    scheduling: Scheduling::Backfill,
                },
                gang: Gang { planes_per_unit: 1, dies_per_unit: 1, units_per_superblock: 128 },
                endurance_cycles: 10_000,
                factory_bad_ppm: 0,
                ecc_correctable_bits: 40,
                seed: 0,
                payload: PayloadMode::Full,
            },
            // Issue 22: 4 KiB logical pages packed two to an 8 KiB page (stock MQSim maps one
            // logical page per page, docs/VALIDATION.md), and MQSim's 256 MiB device-level
            // data cache (`Data_Cache_Capacity`) with its policy (`Caching_Mechanism`
            // ADVANCED: cold pages written back at once, one page per plane in flight), behind
            // its one DRAM channel of 1-byte bursts at 100 MT/s (`Data_Cache_DRAM_Data_Rate`,
            // `..._Busrt_Size`): 200 MB/s.
            ftl_defaults: &[
                ("ftl.mapping_unit_bytes", "4096"),
                ("ftl.buffer_bytes", "268435456"),
                ("ftl.buffer_policy", "destage"),
                ("ftl.cache_mb_s", "200"),
            ],
        },
        Preset {
            name: "ssd-004",
            about: "BLOCKMGMT-09 3.6's 32 GiB SSD (the simulator of Agrawal et al. 2008): 8 packages of 2 dies as independent elements, 4 KiB pages, 64-page blocks striped over all 16 dies",
            config: ssd_004(Gang { planes_per_unit: 1, dies_per_unit: 1, units_per_superblock: 16 }),
            ftl_defaults: &[],
        },
        Preset {
            name: "ssd-004-gang",
            about: "BLOCKMGMT-09 3.4's 32 GiB SSD: one gang of the 8 packages, a 32 KiB logical page striped over all of them",
            config: ssd_004(Gang { planes_per_unit: 1, dies_per_unit: 8, units_per_superblock: 2 }),
            ftl_defaults: &[],
        },
        Preset {
            name: "nvme-4t",
            about: "an enterprise NVMe SSD of 4 TiB (U.2, PCIe 4): 16 channels x 4 dies of 512 Gbit TLC, 4 planes, 16 KiB pages, 16 MiB blocks; t_R 50 us, t_PROG 500 us, t_BERS 3.5 ms, 1,200 MT/s buses",
            config: nvme_4t(),
            ftl_defaults: &[],
        },
        Preset {
            name: "tiny",
            about: "a 16 MiB device for tests and quick runs: 2 channels x 2 dies, 4 KiB pages, 32-page blocks",
            config: DeviceConfig {
                geometry: Geometry {
                    channels: 2,
                    dies_per_channel: 2,
                    planes_per_die: 1,
                    blocks_per_plane: 32,
                    pages_per_block: 32,
                    page_size_bytes: 4096,
                    oob_size_bytes: 64,
                },
                timing: Timing {
                    read_ns: 50_000,
                    program_ns: 200_000,
                    erase_ns: 1_500_000,
                    bus_mb_s: 400,
                    command_ns: 0,
                    scheduling: Scheduling::InOrder,
                },
                gang: Gang { planes_per_unit: 1, dies_per_unit: 1, units_per_superblock: 4 },
                endurance_cycles: 100_000,
                factory_bad_ppm: 0,
                ecc_correctable_bits: 8,
                seed: 0,
                payload: PayloadMode::Full,
            },
            ftl_defaults: &[],
        },
    ]
}

/// Looks a preset up by name; the error lists the names there are.
pub fn preset(name: &str) -> Result<DeviceConfig, UnknownPreset> {
    let all = presets();
    match all.iter().find(|p| p.name == name) {
        Some(p) => Ok(p.config),
        None => Err(UnknownPreset {
            name: name.to_string(),
            known: all.iter().map(|p| p.name).collect(),
        }),
    }
}

/// The controller settings a preset ships with ([`Preset::ftl_defaults`]); empty for a name
/// that is no preset.
pub fn preset_ftl_defaults(name: &str) -> &'static [(&'static str, &'static str)] {
    presets()
        .iter()
        .find(|p| p.name == name)
        .map_or(&[], |p| p.ftl_defaults)
}

/// A device preset name that [`presets`] does not have.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("unknown device preset '{name}'; known presets: {}", known.join(", "))]
pub struct UnknownPreset {
    /// The name asked for.
    pub name: String,
    /// The names there are, in [`presets`] order.
    pub known: Vec<&'static str>,
}

/// Why a device configuration is refused ([`DeviceConfig::validate`], or a device store or
/// image that cannot hold it). Each message names the setting as it is spelled in TOML.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum DeviceConfigError {
    /// A count or rate that must be at least 1 is 0.
    #[error("{table}.{field} must be at least 1")]
    Zero {
        /// The TOML table of the setting (`geometry` or `timing`).
        table: &'static str,
        /// The setting's name in that table.
        field: &'static str,
    },
    /// Pages are whole 512-byte sectors.
    #[error("geometry.page_size_bytes = {page_size_bytes} is not a multiple of 512")]
    PageSize {
        /// The page size asked for, in bytes.
        page_size_bytes: u32,
    },
    /// Page addresses are 32-bit.
    #[error("geometry has 2^32 pages or more; addresses are 32-bit")]
    TooManyPages {
        /// The page count the geometry would have.
        pages: u64,
    },
    /// The planes of a parallel unit must divide a die's planes.
    #[error(
        "gang.planes_per_unit = {planes_per_unit} must divide planes_per_die = {planes_per_die}"
    )]
    PlanesPerUnit {
        /// `gang.planes_per_unit` as given.
        planes_per_unit: u32,
        /// `geometry.planes_per_die`.
        planes_per_die: u32,
    },
    /// The dies of a parallel unit must divide the device's dies.
    #[error("gang.dies_per_unit = {dies_per_unit} must divide the die count {dies}")]
    DiesPerUnit {
        /// `gang.dies_per_unit` as given.
        dies_per_unit: u32,
        /// The device's dies (channels times dies per channel).
        dies: u32,
    },
    /// The parallel units of a super-block must divide the device's parallel units.
    #[error("gang.units_per_superblock = {units_per_superblock} must divide the parallel unit count {parallel_units}")]
    UnitsPerSuperblock {
        /// `gang.units_per_superblock` as given.
        units_per_superblock: u32,
        /// The device's parallel units ([`Gang::parallel_units`](crate::Gang::parallel_units)).
        parallel_units: u32,
    },
    /// A block must endure at least one program/erase cycle.
    #[error("endurance_cycles must be at least 1")]
    Endurance,
    /// Factory bad blocks are capped at 10%.
    #[error(
        "factory_bad_ppm = {factory_bad_ppm} is over 10% of blocks; refusing an unusable device"
    )]
    FactoryBad {
        /// The share asked for, in parts per million.
        factory_bad_ppm: u32,
    },
    /// A page store opened with a geometry other than the one it was made with.
    #[error("store holds {store_blocks} blocks, geometry has {geometry_blocks}")]
    StoreBlocks {
        /// Blocks the store holds.
        store_blocks: usize,
        /// Blocks the configured geometry has.
        geometry_blocks: u32,
    },
    /// Something a timing-only device (`payload = timing`) cannot do: it keeps no page
    /// contents and no OOB records.
    #[error("payload = timing keeps no page contents or OOB records: {what}")]
    TimingOnly {
        /// What was asked of it.
        what: String,
    },
    /// Image files keep a page's OOB length in one byte.
    #[error("oob_size_bytes over 255 is not supported in images")]
    ImageOob {
        /// The OOB size asked for, in bytes.
        oob_size_bytes: u32,
    },
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn payload_mode_reads_from_toml_and_defaults_to_full() {
        let c = preset("tiny").unwrap();
        let text = toml::to_string(&c).unwrap();
        assert!(!text.contains("payload"), "the default is left out: {text}");
        let back: DeviceConfig = toml::from_str(&text).unwrap();
        assert_eq!(back.payload, PayloadMode::Full);
        let timing: DeviceConfig =
            toml::from_str(&format!("payload = \"timing\"\n{text}")).unwrap();
        assert_eq!(timing.payload, PayloadMode::Timing);
        let e = toml::from_str::<DeviceConfig>(&format!("payload = \"none\"\n{text}"));
        assert!(e.unwrap_err().to_string().contains("payload"));
    }

    #[test]
    fn every_preset_is_valid() {
        for p in presets() {
            p.config
                .validate()
                .unwrap_or_else(|e| panic!("{}: {e}", p.name));
        }
    }

    #[test]
    fn rawssd_matches_ossd_13() {
        let c = preset("rawssd").unwrap();
        assert_eq!(c.write_unit_bytes(), 16 * 1024);
        assert_eq!(c.gang.superblock_bytes(&c.geometry), 8 << 20);
        assert_eq!(c.geometry.capacity_bytes(), 4 << 30);
        let full = preset("rawssd-256g").unwrap();
        assert_eq!(full.geometry.capacity_bytes(), 256 << 30);
    }

    #[test]
    fn other_presets_match_their_papers() {
        let n = preset("nandsim-128m").unwrap();
        assert_eq!(n.geometry.capacity_bytes(), 128 << 20);
        assert_eq!(
            n.geometry.pages_per_block * n.geometry.page_size_bytes,
            128 * 1024
        );
        let n512 = preset("nandsim-512m").unwrap();
        assert_eq!(n512.geometry.capacity_bytes(), 512 << 20);
        assert_eq!(n512.timing, n.timing);
        let p = preset("poftl").unwrap();
        let gib = p.geometry.capacity_bytes() as f64 / (1u64 << 30) as f64;
        assert!((gib - 3.64).abs() < 0.01, "poftl is {gib} GiB");
        let m = preset("mqsim-default").unwrap();
        assert_eq!(m.geometry.capacity_bytes(), 512 << 30);
        let n = preset("nvme-4t").unwrap();
        assert_eq!(n.geometry.capacity_bytes(), 4 << 40);
        assert_eq!(n.geometry.dies(), 64);
        let e = preset("nope").unwrap_err();
        assert_eq!(e.name, "nope");
        assert!(e.to_string().contains("rawssd"), "{e}");
    }
}
