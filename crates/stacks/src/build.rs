//! The one place stacks are built: a [`StackSpec`] holds every layer's config with its
//! defaults, `key = value` settings go on top (`ossd run --set`, an experiment variant's `set`),
//! and [`StackSpec::build_block`] / [`StackSpec::build_file`] format the stack on a fresh
//! in-memory device.

use blockfs::{BlockFs, BlockFsConfig};
use controller::ControllerConfig;
use flash::{DeviceConfig, Nand};
use fml::FmlConfig;
use ftl::{Ftl, FtlConfig, Mapping};
use littlefs::LittleFs;
use ofs::{Ofs, OfsConfig};
use osd::{BackgroundScrubConfig, ObjectStore, OsdConfig, Placement, UnknownPlacement};
use poftl::fs::PoftlFs;
use poftl::{PoftlConfig, PoftlStore};
use serde::{de::DeserializeOwned, Serialize};

use crate::block::{FtlStack, OsdStack, Stack};
use crate::file::FileStack;
use crate::kind::StackKind;

/// Why a stack could not be built: a setting it does not take or cannot parse, or a layer
/// that refused its config.
#[derive(Debug, thiserror::Error)]
pub enum StackError {
    /// A `key = value` setting the stack does not take; the message lists the ones it does
    /// ([`StackSpec::accepted`]).
    #[error("unknown setting '{key}' for stack '{kind}' (it takes {})", StackSpec::accepted(*kind))]
    UnknownSetting {
        /// The setting's key.
        key: String,
        /// The stack.
        kind: StackKind,
    },
    /// A value of `placement`, `mapping` or `object_bytes` that does not parse.
    #[error("{key} = {value}: {source}")]
    BadValue {
        /// The setting's key.
        key: String,
        /// The value given.
        value: String,
        /// Why it does not parse.
        source: ValueError,
    },
    /// A field setting of a layer's config (`ftl.*`, `osd.*`, `fml.*`, `fs.*`, `poftl.*`)
    /// that the config does not have or whose value does not fit it.
    #[error(transparent)]
    Field(#[from] SettingError),
    /// `object_bytes` of a block-level `osd` stack is not a positive multiple of the write unit.
    #[error(
        "object_bytes = {object_bytes} must be a positive multiple of the {unit_bytes}-byte write unit"
    )]
    ObjectBytes {
        /// The setting.
        object_bytes: u64,
        /// The device's write unit in bytes.
        unit_bytes: u64,
    },
    /// A file-level stack asked to build at block level.
    #[error("stack '{kind}' is file-level; block-level runs take {}", StackKind::BLOCK_LEVEL.map(StackKind::name).join(", "))]
    FileLevel {
        /// The stack.
        kind: StackKind,
    },
    /// A block-level stack asked to build at file level.
    #[error(
        "stack '{kind}' does not run file-level workloads (ofs, blockfs, poftl or littlefs do)"
    )]
    BlockLevel {
        /// The stack.
        kind: StackKind,
    },
    /// The device model refused its config.
    #[error("device: {0}")]
    Device(#[from] flash::FlashError),
    /// The page-mapping FTL refused to open.
    #[error("ftl: {0}")]
    Ftl(#[from] ftl::FtlError),
    /// The object store refused to format.
    #[error("object store: {0}")]
    Osd(#[from] osd::OsdError),
    /// A file system (OFS or blockfs) refused to format.
    #[error("file system: {0}")]
    Fs(#[from] vfs::FsError),
    /// p-OFTL refused its config or to format.
    #[error("p-OFTL: {0}")]
    Poftl(#[from] poftl::PoftlError),
    /// LittleFS refused the device or to format.
    #[error("LittleFS: {0}")]
    LittleFs(#[from] littlefs::LittleFsError),
}

/// Where the FML's config comes from.
#[derive(Clone, Debug)]
pub enum FmlBase {
    /// [`FmlConfig::for_blocks`] of the device's super-blocks (after p-OFTL re-gangs it): the
    /// FML decides when to clean.
    ForDevice,
    /// As `ForDevice`, with the watermarks of a device-side controller that decides when to
    /// clean itself ([`controlled_fml`]).
    Controlled(ControllerConfig),
    /// This config, as given (the `fml` table of an `ossd run` config).
    Given(FmlConfig),
}

/// Everything a stack is built from. [`StackSpec::new`] holds the defaults; [`StackSpec::set`]
/// applies a setting.
#[derive(Clone, Debug)]
pub struct StackSpec {
    /// Which stack.
    pub kind: StackKind,
    /// The name reports give the stack; the kind's name unless set.
    pub name: String,
    /// A block-level `osd` stack cuts the byte space into objects of this size (setting
    /// `object_bytes`; default 8 MiB, RawSSD's virtual erase block: OSSD-13 V-F dedicates an
    /// update block to objects this large).
    pub object_bytes: u64,
    /// The FML's base config; `fml.*` settings go on top of it.
    pub fml: FmlBase,
    /// `ftl.*` (and `mapping`) settings; `ftl` and `dftl` fix the mapping themselves.
    pub ftl: FtlConfig,
    /// `osd.*` (and `placement`) settings.
    pub osd: OsdConfig,
    /// `scrub.*` settings: the object store's background scrub (off by default).
    pub scrub: BackgroundScrubConfig,
    /// `fs.*` settings of `ofs`.
    pub ofs: OfsConfig,
    /// `fs.*` settings of `blockfs`.
    pub blockfs: BlockFsConfig,
    /// `poftl.*` settings.
    pub poftl: PoftlConfig,
    /// `fml.*` settings, applied when the device (which p-OFTL re-gangs) is known.
    fml_sets: Vec<(String, String)>,
}

impl StackSpec {
    /// The defaults of every layer, the FML's derived from the device.
    pub fn new(kind: StackKind) -> Self {
        StackSpec {
            kind,
            name: kind.name().to_string(),
            object_bytes: 8 << 20,
            fml: FmlBase::ForDevice,
            ftl: FtlConfig::default(),
            osd: OsdConfig::default(),
            scrub: BackgroundScrubConfig::default(),
            ofs: OfsConfig::default(),
            blockfs: BlockFsConfig::default(),
            poftl: PoftlConfig::default(),
            fml_sets: Vec::new(),
        }
    }

    /// The settings this stack takes, for error messages.
    pub fn accepted(kind: StackKind) -> &'static str {
        match kind {
            StackKind::Ftl | StackKind::Dftl => "ftl.*, fml.*",
            StackKind::Osd => "osd.*, scrub.*, fml.*, placement, object_bytes",
            StackKind::Ofs => "osd.*, scrub.*, fml.*, fs.*, placement",
            StackKind::Blockfs => "ftl.*, fml.*, fs.*, mapping",
            StackKind::Poftl => "poftl.*, fml.*",
            StackKind::Littlefs => "no settings",
        }
    }

    /// Applies one setting: `placement`, `mapping` (`page` or `dftl`), `object_bytes`, or a
    /// field of a layer's config (`ftl.*`, `osd.*`, `scrub.*`, `fml.*`, `fs.*`, `poftl.*`) as a
    /// TOML literal. A setting the stack does not take is an error that lists the ones it does.
    pub fn set(&mut self, key: &str, value: &str) -> Result<(), StackError> {
        use StackKind as K;
        let kind = self.kind;
        let bad = |source: ValueError| StackError::BadValue {
            key: key.to_string(),
            value: value.to_string(),
            source,
        };
        match (key.split_once('.'), kind) {
            (None, K::Osd | K::Ofs) if key == "placement" => {
                self.osd.placement = value.parse::<Placement>().map_err(|e| bad(e.into()))?
            }
            (None, K::Blockfs) if key == "mapping" => {
                self.ftl.mapping = match value {
                    "page" => Mapping::Page,
                    "dftl" => Mapping::Dftl,
                    m => return Err(bad(ValueError::Mapping(m.to_string()))),
                }
            }
            (None, K::Osd) if key == "object_bytes" => {
                self.object_bytes = value.parse().map_err(|e| bad(ValueError::Number(e)))?
            }
            (Some(("fml", f)), _) if kind != K::Littlefs => {
                // Checked now against the defaults, applied at build time on the real base.
                apply(&mut FmlConfig::default(), f, value)?;
                self.fml_sets.push((f.to_string(), value.to_string()));
            }
            (Some(("ftl", f)), K::Ftl | K::Dftl | K::Blockfs) => apply(&mut self.ftl, f, value)?,
            (Some(("osd", f)), K::Osd | K::Ofs) => apply(&mut self.osd, f, value)?,
            (Some(("scrub", f)), K::Osd | K::Ofs) => {
                let mut scrub = self.scrub;
                apply(&mut scrub, f, value)?;
                scrub.validate()?;
                self.scrub = scrub;
            }
            (Some(("fs", f)), K::Ofs) => apply(&mut self.ofs, f, value)?,
            (Some(("fs", f)), K::Blockfs) => apply(&mut self.blockfs, f, value)?,
            (Some(("poftl", f)), K::Poftl) => apply(&mut self.poftl, f, value)?,
            _ => {
                return Err(StackError::UnknownSetting {
                    key: key.to_string(),
                    kind,
                })
            }
        }
        Ok(())
    }

    /// The FML config on `device`: the base, then the `fml.*` settings.
    fn fml_on(&self, device: &DeviceConfig) -> Result<FmlConfig, StackError> {
        let blocks = flash::gang::Layout::new(device).superblocks;
        let mut fml = match &self.fml {
            FmlBase::ForDevice => FmlConfig::for_blocks(blocks),
            FmlBase::Controlled(c) => controlled_fml(c, FmlConfig::for_blocks(blocks), blocks),
            FmlBase::Given(f) => *f,
        };
        for (f, value) in &self.fml_sets {
            apply(&mut fml, f, value)?;
        }
        Ok(fml)
    }

    /// The object store of an `osd` or `ofs` stack, formatted on a fresh `device`.
    pub fn object_store(&self, device: DeviceConfig) -> Result<ObjectStore<Nand>, StackError> {
        let fml = self.fml_on(&device)?;
        let nand = Nand::in_memory(device)?;
        let mut store = ObjectStore::format(nand, OsdConfig { fml, ..self.osd })?;
        store.set_background_scrub(self.scrub)?;
        Ok(store)
    }

    /// A block-level stack (`ftl`, `dftl`, `osd`) on a fresh `device`, for the engine and the
    /// controller.
    pub fn build_block(&self, device: DeviceConfig) -> Result<Box<dyn Stack>, StackError> {
        let resident = |n: &Nand| n.resident_bytes();
        let mapping = match self.kind {
            StackKind::Ftl => Mapping::Page,
            StackKind::Dftl => Mapping::Dftl,
            StackKind::Osd => {
                let unit = device.write_unit_bytes() as u64;
                if self.object_bytes == 0 || !self.object_bytes.is_multiple_of(unit) {
                    return Err(StackError::ObjectBytes {
                        object_bytes: self.object_bytes,
                        unit_bytes: unit,
                    });
                }
                let store = self.object_store(device)?;
                let stack = OsdStack::new(store, self.object_bytes, self.name.clone(), resident)?;
                return Ok(Box::new(stack));
            }
            kind => return Err(StackError::FileLevel { kind }),
        };
        let fml = self.fml_on(&device)?;
        let nand = Nand::in_memory(device)?;
        let ftl = Ftl::open(
            nand,
            FtlConfig {
                mapping,
                fml,
                ..self.ftl
            },
        )?;
        Ok(Box::new(FtlStack {
            ftl,
            name: self.name.clone(),
            resident,
        }))
    }

    /// A file-level stack (`ofs`, `blockfs`, `poftl`, `littlefs`) on a fresh `device`; returns
    /// it with the flash page size (write amplification counts physical pages against host
    /// bytes).
    pub fn build_file(
        &self,
        device: DeviceConfig,
    ) -> Result<(Box<dyn FileStack>, u64), StackError> {
        let page_bytes = device.geometry.page_size_bytes as u64;
        match self.kind {
            StackKind::Ofs => {
                let store = self.object_store(device)?;
                Ok((Box::new(Ofs::format(store, self.ofs)?), page_bytes))
            }
            StackKind::Blockfs => {
                let fml = self.fml_on(&device)?;
                let nand = Nand::in_memory(device)?;
                let ftl = Ftl::open(nand, FtlConfig { fml, ..self.ftl })?;
                Ok((Box::new(BlockFs::format(ftl, self.blockfs, 0)?), page_bytes))
            }
            // p-OFTL re-gangs the device to its parallelism degree first, so the FML's
            // watermarks are sized for that many super-blocks.
            StackKind::Poftl => {
                let device = self.poftl.device(device)?;
                let cfg = PoftlConfig {
                    fml: self.fml_on(&device)?,
                    ..self.poftl
                };
                let store = PoftlStore::format(Nand::in_memory(device)?, cfg)?;
                let unit = store.page_bytes();
                Ok((Box::new(PoftlFs::new(store, &self.name)), unit))
            }
            // LittleFS drives the raw device itself: no FML, no FTL.
            StackKind::Littlefs => {
                let fs = LittleFs::format(Nand::in_memory(device)?, &self.name)?;
                Ok((Box::new(fs), page_bytes))
            }
            kind => Err(StackError::BlockLevel { kind }),
        }
    }
}

/// FML watermarks that leave the decision of when to clean to a device-side controller
/// ([`ControllerConfig::fml_watermarks`]), on top of `fml`.
pub fn controlled_fml(cfg: &ControllerConfig, mut fml: FmlConfig, blocks: u32) -> FmlConfig {
    let w = cfg.fml_watermarks(blocks);
    fml.low_watermark_blocks = w.low_blocks;
    fml.high_watermark_busy_blocks = w.high_busy_blocks;
    fml.high_watermark_idle_blocks = w.high_idle_blocks;
    fml
}

/// A value of `placement`, `mapping` or `object_bytes` that does not parse
/// ([`StackError::BadValue`]).
#[derive(Debug, thiserror::Error)]
pub enum ValueError {
    /// Not a placement policy.
    #[error(transparent)]
    Placement(#[from] UnknownPlacement),
    /// Not a mapping: `page` or `dftl`.
    #[error("mapping '{0}' (page or dftl)")]
    Mapping(String),
    /// Not a number of bytes.
    #[error(transparent)]
    Number(#[from] std::num::ParseIntError),
}

/// Why [`apply`] could not set a field of a config struct.
#[derive(Debug, thiserror::Error)]
pub enum SettingError {
    /// The config has no field `key`; `accepted` lists the fields it has.
    #[error("unknown setting '{key}' (the settings are {})", .accepted.join(", "))]
    Unknown {
        /// The key given.
        key: String,
        /// The config's fields, in its TOML order.
        accepted: Vec<String>,
    },
    /// The value does not fit the field (wrong type, or a value the field's type refuses).
    #[error("{key} = {value}: {source}")]
    Value {
        /// The key.
        key: String,
        /// The value given.
        value: String,
        /// What the config's deserializer said.
        source: Box<toml::de::Error>,
    },
    /// The config does not serialize to a TOML table (a bug in the config type).
    #[error("settings do not serialize as a table: {0}")]
    NotATable(#[source] toml::ser::Error),
    /// The config serializes to a TOML value that is not a table (a bug in the config type).
    #[error("settings are not a table")]
    NotTable,
}

/// Sets field `key` of a config struct from a `--set`-style string (a TOML literal, or a bare
/// word taken as a string). An unknown field or a value of the wrong type is an error naming
/// the key.
pub fn apply<T: Serialize + DeserializeOwned>(
    cfg: &mut T,
    key: &str,
    value: &str,
) -> Result<(), SettingError> {
    let mut v = toml::Value::try_from(&*cfg).map_err(SettingError::NotATable)?;
    let parsed = format!("x = {value}")
        .parse::<toml::Table>()
        .ok()
        .and_then(|t| t.get("x").cloned())
        .unwrap_or_else(|| toml::Value::String(value.to_string()));
    let table = v.as_table_mut().ok_or(SettingError::NotTable)?;
    if !table.contains_key(key) {
        return Err(SettingError::Unknown {
            key: key.to_string(),
            accepted: table.keys().cloned().collect(),
        });
    }
    table.insert(key.to_string(), parsed);
    *cfg = v
        .try_into()
        .map_err(|source: toml::de::Error| SettingError::Value {
            key: key.to_string(),
            value: value.to_string(),
            source: Box::new(source),
        })?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn device() -> DeviceConfig {
        flash::preset("tiny").expect("tiny preset")
    }

    #[test]
    fn settings_outside_the_stack_are_refused_with_the_accepted_ones() {
        let mut spec = StackSpec::new(StackKind::Ftl);
        let e = spec.set("osd.placement", "one").unwrap_err();
        assert!(
            matches!(&e, StackError::UnknownSetting { key, kind: StackKind::Ftl } if key == "osd.placement"),
            "{e}"
        );
        assert!(e.to_string().contains("ftl.*, fml.*"), "{e}");
        assert!(spec.set("ftl.overprovision_percent", "9").is_ok());
        let e = spec.set("fml.no_such_field", "1").unwrap_err();
        assert!(
            matches!(&e, StackError::Field(SettingError::Unknown { key, accepted })
                if key == "no_such_field" && accepted.iter().any(|a| a == "low_watermark_blocks")),
            "{e}"
        );
        assert!(matches!(
            spec.set("ftl.overprovision_percent", "many"),
            Err(StackError::Field(SettingError::Value { .. }))
        ));
        assert!(matches!(
            StackSpec::new(StackKind::Blockfs).set("mapping", "hash"),
            Err(StackError::BadValue {
                source: ValueError::Mapping(_),
                ..
            })
        ));
    }

    /// `scrub.*` reaches the object store the stack builds; a value out of range is the
    /// store's typed refusal, and a block stack without an object store refuses the key.
    #[test]
    fn scrub_settings_reach_the_store() {
        let mut spec = StackSpec::new(StackKind::Ofs);
        spec.set("scrub.units_per_second", "1000").unwrap();
        spec.set("scrub.repair", "false").unwrap();
        let store = spec.object_store(device()).unwrap();
        let got = store.background_scrub();
        assert_eq!((got.units_per_second, got.repair), (1000, false));
        assert!(matches!(
            spec.set("scrub.max_units_per_call", "0"),
            Err(StackError::Osd(osd::OsdError::InvalidArgument(_)))
        ));
        assert_eq!(
            spec.scrub.max_units_per_call, 256,
            "a refused value changes nothing"
        );
        assert!(matches!(
            StackSpec::new(StackKind::Ftl).set("scrub.units_per_second", "1"),
            Err(StackError::UnknownSetting { .. })
        ));
    }

    #[test]
    fn every_stack_builds_at_its_level_and_refuses_the_other() {
        for kind in StackKind::ALL {
            let mut spec = StackSpec::new(kind);
            if kind == StackKind::Poftl {
                // The tiny device has 4 parallel units; p-OFTL's default degree is 16.
                spec.set("poftl.parallelism_degree", "4")
                    .expect("a poftl field");
            }
            let block = spec.build_block(device());
            let file = spec.build_file(device());
            let is_block = StackKind::BLOCK_LEVEL.contains(&kind);
            assert_eq!(block.is_ok(), is_block, "{kind}: {:?}", block.err());
            assert_eq!(file.is_ok(), !is_block, "{kind}: {:?}", file.err());
        }
    }

    #[test]
    fn littlefs_takes_no_settings_and_says_which_devices_it_runs_on() {
        let mut spec = StackSpec::new(StackKind::Littlefs);
        for key in [
            "fml.low_watermark_blocks",
            "ftl.overprovision_percent",
            "placement",
        ] {
            let e = spec.set(key, "3").unwrap_err();
            assert!(
                matches!(
                    &e,
                    StackError::UnknownSetting {
                        kind: StackKind::Littlefs,
                        ..
                    }
                ),
                "{key}: {e}"
            );
            assert!(e.to_string().contains("no settings"), "{e}");
        }
        let mut d = flash::preset("nandsim-128m").expect("preset");
        d.geometry.blocks_per_plane = 64;
        assert!(spec.build_file(d).is_ok());
        d.geometry.page_size_bytes = 512;
        let e = spec
            .build_file(d)
            .err()
            .expect("512-byte pages are refused");
        assert!(matches!(e, StackError::LittleFs(_)), "{e}");
        assert!(e.to_string().contains("LittleFS runs on"), "{e}");
    }

    #[test]
    fn fml_settings_go_on_top_of_the_controlled_watermarks() {
        let mut spec = StackSpec::new(StackKind::Ftl);
        spec.fml = FmlBase::Controlled(ControllerConfig::default());
        spec.set("fml.low_watermark_blocks", "3").expect("a field");
        let fml = spec.fml_on(&device()).expect("fml");
        assert_eq!(fml.low_watermark_blocks, 3);
    }
}
