//! The host stacks of the file-level experiments, built on a fresh in-memory device: `ofs` (the
//! object file system on the object store; placement `ossd` is the papers' "OFS", `one` is
//! "OFS-ONE"), `blockfs` (the ext4-like file system on the page-mapping FTL) and `poftl`
//! (seed 002's p-OFTL under its thin file layer; `poftl.*` settings, the device re-ganged to
//! `poftl.parallelism_degree`).

use blockfs::{BlockFs, BlockFsConfig};
use flash::{DeviceConfig, Flash, Nand};
use fml::FmlConfig;
use ftl::{Ftl, FtlConfig};
use ofs::{Ofs, OfsConfig};
use osd::{ObjectStore, OsdConfig, Placement};
use poftl::fs::PoftlFs;
use poftl::{PoftlConfig, PoftlStore};
use serde::{de::DeserializeOwned, Serialize};

use super::FileStack;
use crate::experiment::Variant;
use crate::stack::{ftl_counters, osd_counters, poftl_counters, Counters, StackKind};

impl<F: Flash> FileStack for Ofs<F> {
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

/// Sets `key` of a config struct from a `--set`-style string (a TOML literal, or a bare word
/// taken as a string).
pub(crate) fn apply<T: Serialize + DeserializeOwned>(
    cfg: &mut T,
    key: &str,
    value: &str,
) -> Result<(), String> {
    let mut v = toml::Value::try_from(&*cfg).map_err(|e| e.to_string())?;
    let parsed = format!("x = {value}")
        .parse::<toml::Table>()
        .ok()
        .and_then(|t| t.get("x").cloned())
        .unwrap_or_else(|| toml::Value::String(value.to_string()));
    let table = v.as_table_mut().ok_or("settings are not a table")?;
    if !table.contains_key(key) {
        return Err(format!("unknown setting '{key}'"));
    }
    table.insert(key.to_string(), parsed);
    *cfg = v
        .try_into()
        .map_err(|e: toml::de::Error| format!("{key} = {value}: {e}"))?;
    Ok(())
}

/// Builds a variant's stack on a fresh device; returns it with the flash page size.
pub fn build(v: &Variant, device: DeviceConfig) -> Result<(Box<dyn FileStack>, u64), String> {
    if v.stack == StackKind::Poftl {
        return build_poftl(v, device);
    }
    // Write amplification counts physical pages programmed against host bytes.
    let page_bytes = device.geometry.page_size_bytes as u64;
    let nand = Nand::in_memory(device).map_err(|e| e.to_string())?;
    let mut placement = Placement::Ossd;
    let mut osd = OsdConfig::default();
    let mut ftl = FtlConfig::default();
    let mut ofs = OfsConfig::default();
    let mut bfs = BlockFsConfig::default();
    // The FML's watermarks fit the (possibly scaled) device; `fml.*` settings go on top.
    let mut fml = FmlConfig::for_blocks(flash::gang::Layout::new(nand.config()).superblocks);
    for (k, val) in &v.set {
        let at = |e: String| format!("variant {}: {e}", v.label);
        match k.split_once('.') {
            None if k == "placement" => placement = val.parse().map_err(at)?,
            // The block stack's mapping: the page map in device RAM (PFTL) or DFTL.
            None if k == "mapping" => {
                ftl.mapping = match val.as_str() {
                    "page" => ftl::Mapping::Page,
                    "dftl" => ftl::Mapping::Dftl,
                    m => return Err(at(format!("mapping '{m}' (page or dftl)"))),
                }
            }
            Some(("osd", f)) => apply(&mut osd, f, val).map_err(at)?,
            Some(("ftl", f)) => apply(&mut ftl, f, val).map_err(at)?,
            Some(("fml", f)) => apply(&mut fml, f, val).map_err(at)?,
            Some(("fs", f)) if v.stack == StackKind::Ofs => apply(&mut ofs, f, val).map_err(at)?,
            Some(("fs", f)) => apply(&mut bfs, f, val).map_err(at)?,
            _ => return Err(at(format!("unknown setting '{k}'"))),
        }
    }
    match v.stack {
        StackKind::Ofs => {
            osd.placement = placement;
            osd.fml = fml;
            let store = ObjectStore::format(nand, osd).map_err(|e| e.to_string())?;
            let fs = Ofs::format(store, ofs).map_err(|e| e.to_string())?;
            Ok((Box::new(fs), page_bytes))
        }
        StackKind::Blockfs => {
            ftl.fml = fml;
            let ftl = Ftl::open(nand, ftl).map_err(|e| e.to_string())?;
            let fs = BlockFs::format(ftl, bfs, 0).map_err(|e| e.to_string())?;
            Ok((Box::new(fs), page_bytes))
        }
        s => Err(format!(
            "variant {}: stack '{s}' does not run file-level workloads (ofs, blockfs or poftl do)",
            v.label
        )),
    }
}

/// p-OFTL: the device is re-ganged to the parallelism degree first, so `fml.*` watermarks are
/// sized for that many super-blocks.
fn build_poftl(v: &Variant, device: DeviceConfig) -> Result<(Box<dyn FileStack>, u64), String> {
    let at = |e: String| format!("variant {}: {e}", v.label);
    let mut cfg = PoftlConfig::default();
    let mut fml_sets = Vec::new();
    for (k, val) in &v.set {
        match k.split_once('.') {
            Some(("poftl", f)) => apply(&mut cfg, f, val).map_err(at)?,
            Some(("fml", f)) => fml_sets.push((f, val)),
            _ => return Err(at(format!("unknown setting '{k}' (poftl.* or fml.*)"))),
        }
    }
    let device = cfg.device(device).map_err(|e| at(e.to_string()))?;
    cfg.fml = FmlConfig::for_blocks(flash::gang::Layout::new(&device).superblocks);
    for (f, val) in fml_sets {
        apply(&mut cfg.fml, f, val).map_err(at)?;
    }
    let nand = Nand::in_memory(device).map_err(|e| e.to_string())?;
    let store = PoftlStore::format(nand, cfg).map_err(|e| at(e.to_string()))?;
    let unit = store.page_bytes();
    Ok((Box::new(PoftlFs::new(store, &v.label)), unit))
}
