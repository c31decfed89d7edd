//! What the OFS tests share: a small device, a store on it, and OFS formatted or remounted.
#![allow(dead_code)]

use flash::fault::Faulty;
use flash::{preset, DeviceConfig, Flash, Nand};
use fml::FmlConfig;
use ofs::{Ofs, OfsConfig};
use osd::{ObjectStore, OsdConfig, Placement};
use vfs::FileSystem;

/// A device of `blocks` erase blocks of 16 pages of 4 KiB (one die per channel, two channels).
pub fn device(blocks_per_plane: u32) -> DeviceConfig {
    let mut c = preset("tiny").unwrap();
    c.geometry.dies_per_channel = 1;
    c.geometry.blocks_per_plane = blocks_per_plane;
    c.geometry.pages_per_block = 16;
    c.gang.units_per_superblock = 1;
    c.endurance_cycles = 1_000_000;
    c
}

pub fn store_config(placement: Placement, blocks: u32) -> OsdConfig {
    OsdConfig {
        placement,
        buffer_bytes: 64 << 10,
        index_cache_bytes: 16 * 4096,
        onode_cache_entries: 64,
        checkpoint_units: 256,
        fml: FmlConfig::for_blocks(blocks),
        ..OsdConfig::default()
    }
}

/// A fresh OFS on a fresh in-memory device of `blocks_per_plane` x 2 blocks.
pub fn fresh(
    placement: Placement,
    blocks_per_plane: u32,
    config: OfsConfig,
) -> (Ofs<osd::ObjectStore<Faulty<Nand>>>, OsdConfig) {
    let cfg = store_config(placement, blocks_per_plane * 2);
    let nand = Nand::in_memory(device(blocks_per_plane)).unwrap();
    let store = ObjectStore::format(Faulty::new(nand), cfg).unwrap();
    (Ofs::format(store, config).unwrap(), cfg)
}

/// Unmounts, closes the store, reopens it and mounts again.
pub fn remount<F: Flash>(fs: Ofs<osd::ObjectStore<F>>, cfg: OsdConfig) -> Ofs<osd::ObjectStore<F>> {
    let dev = fs.unmount().unwrap().close().unwrap();
    Ofs::mount(ObjectStore::open(dev, cfg).unwrap()).unwrap()
}

pub fn assert_clean<F: Flash>(fs: &mut Ofs<osd::ObjectStore<F>>) {
    let problems = fs.check().unwrap();
    assert!(problems.is_empty(), "check: {problems:#?}");
}
