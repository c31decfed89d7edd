//! Shared rig: a small in-memory device, an FTL over it, a file system over that.
#![allow(dead_code)]

use blockfs::{BlockFs, BlockFsConfig};
use flash::{preset, DeviceConfig, Nand};
use fml::FmlConfig;
use ftl::{Ftl, FtlConfig};
use vfs::{FileData, FileSystem, Ino, ReadInto};

/// The `tiny` preset: 16 MiB, 4 KiB write units.
pub fn device() -> DeviceConfig {
    let mut c = preset("tiny").unwrap();
    c.endurance_cycles = 1_000_000;
    c.seed = 5;
    c
}

pub fn ftl_config() -> FtlConfig {
    FtlConfig {
        fml: FmlConfig::for_blocks(32),
        buffer_bytes: 64 << 10,
        ..FtlConfig::default()
    }
}

pub fn ftl() -> Ftl<Nand> {
    Ftl::open(Nand::in_memory(device()).unwrap(), ftl_config()).unwrap()
}

pub fn format(cfg: BlockFsConfig) -> BlockFs<Nand> {
    BlockFs::format(ftl(), cfg, 0).unwrap()
}

/// Unmounts, closes the FTL, reopens both.
pub fn remount(fs: BlockFs<Nand>, cfg: BlockFsConfig) -> BlockFs<Nand> {
    let (ftl, t) = fs.unmount().unwrap();
    let dev = ftl.close(t).unwrap();
    BlockFs::mount(Ftl::open(dev, ftl_config()).unwrap(), cfg, t).unwrap()
}

/// Drops the file system's and the FTL's memory without writing anything, then mounts.
pub fn crash_and_mount(
    fs: BlockFs<Nand>,
    cfg: BlockFsConfig,
) -> Result<BlockFs<Nand>, vfs::FsError> {
    let t = fs.now();
    let dev = fs.crash().crash();
    BlockFs::mount(Ftl::open(dev, ftl_config()).unwrap(), cfg, t)
}

/// Bytes a test writes: a pattern of the seed and position.
pub fn pattern(seed: u64, offset: u64, len: usize) -> Vec<u8> {
    (0..len as u64)
        .map(|i| {
            let x = (seed.wrapping_mul(0x9E37_79B9_7F4A_7C15)) ^ (offset + i);
            (x ^ (x >> 7) ^ (x >> 17)) as u8
        })
        .collect()
}

pub fn write(fs: &mut impl FileSystem, ino: Ino, offset: u64, data: &[u8]) {
    fs.write(ino, offset, data.len() as u64, FileData::Bytes(data))
        .unwrap();
}

pub fn read_all(fs: &mut impl FileSystem, ino: Ino) -> Vec<u8> {
    let size = fs.stat(ino).unwrap().size;
    let mut buf = vec![0u8; size as usize];
    let n = fs.read(ino, 0, ReadInto::Bytes(&mut buf)).unwrap();
    assert_eq!(n, size);
    buf
}

pub fn counter(fs: &impl FileSystem, name: &str) -> u64 {
    fs.counters()
        .into_iter()
        .find(|(n, _)| *n == name)
        .unwrap_or_else(|| panic!("no counter {name}"))
        .1
}
