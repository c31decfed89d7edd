//! Creates and removes without a sync must not fill the device: a removal's tombstone pins its
//! descriptor page until the next checkpoint, and a workload of small creates and removes
//! writes too few data units to reach the data-unit checkpoint interval. Found with OSCM-11
//! V-F's PostMark on 104 NANDsim blocks (`experiments/001-fig8-flashfs.toml` at `--scale
//! 0.05`), which ran out of space holding about 300 KiB of files.

use flash::{preset, Nand};
use fml::FmlConfig;
use ofs::{Ofs, OfsConfig};
use osd::{ObjectStore, Osd, OsdConfig, Placement};
use vfs::{FileData, FileSystem, ROOT};

/// PostMark-like churn (a create or a remove per step, files of 0.5-16 KiB, no sync) on a
/// 13 MiB NANDsim chip; the flash held valid must stay a small multiple of the live files.
fn churn(cfg: OfsConfig, steps: u64) {
    let mut device = preset("nandsim-128m").unwrap();
    device.geometry.blocks_per_plane = 104;
    let store_cfg = OsdConfig {
        placement: Placement::Semantic,
        fml: FmlConfig::for_blocks(104),
        ..OsdConfig::default()
    };
    let store = ObjectStore::format(Nand::in_memory(device).unwrap(), store_cfg).unwrap();
    let mut fs = Ofs::format(store, cfg).unwrap();
    let mut x: u64 = 12345;
    let mut rnd = |n: u64| {
        x = x
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        (x >> 33) % n
    };
    let mut pool: Vec<String> = Vec::new();
    let mut peak = 0;
    for step in 0..steps {
        if pool.len() < 15 || rnd(2) == 0 {
            let name = format!("pm{step}");
            let f = fs.create(ROOT, &name).unwrap();
            let size = 512 + rnd(16384 - 512);
            fs.write(f, 0, size, FileData::Token(step))
                .unwrap_or_else(|e| panic!("step {step}: {e}"));
            pool.push(name);
        } else {
            let name = pool.swap_remove(rnd(pool.len() as u64) as usize);
            fs.unlink(ROOT, &name)
                .unwrap_or_else(|e| panic!("step {step}: {e}"));
        }
        peak = peak.max(fs.store_mut().describe().unwrap().used_bytes);
    }
    let info = fs.store_mut().describe().unwrap();
    // At most about 100 files of 16 KiB are live: 1.6 MiB. The bound leaves room for the
    // metadata a checkpoint has not yet freed, and is far below the 10 MiB capacity.
    assert!(
        peak < info.capacity_bytes / 3,
        "{peak} bytes held valid of {}",
        info.capacity_bytes
    );
}

#[test]
fn creates_and_removes_do_not_fill_the_device() {
    churn(OfsConfig::default(), 8000);
}

#[test]
fn with_inode_and_entry_objects_too() {
    churn(
        OfsConfig {
            inode_objects: true,
            dirent_objects: true,
            ..OfsConfig::default()
        },
        6000,
    );
}
