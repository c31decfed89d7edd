//! OSSD-13 VI-B on the block stack, measured (ignored by default; run with
//! `cargo test -p blockfs --test measure -- --ignored --nocapture`): 1 GiB written
//! sequentially in 128 KiB requests, buffered and with fdatasync after each, then read back,
//! on the `rawssd` preset in fingerprint mode. Prints virtual throughput, the metadata blocks
//! written, and the wall time the simulation took.

use blockfs::{BlockFs, BlockFsConfig};
use flash::{preset, Nand};
use ftl::{Ftl, FtlConfig};
use vfs::{FileData, FileSystem, ReadInto, ROOT};

const IO: u64 = 128 << 10;
const TOTAL: u64 = 1 << 30;

fn fresh(cfg: BlockFsConfig) -> BlockFs<Nand> {
    let ftl = Ftl::open(
        Nand::in_memory(preset("rawssd").unwrap()).unwrap(),
        FtlConfig::default(),
    )
    .unwrap();
    BlockFs::format(ftl, cfg, 0).unwrap()
}

fn mib_s(bytes: u64, ns: u64) -> f64 {
    bytes as f64 / (1 << 20) as f64 / (ns as f64 / 1e9)
}

#[test]
#[ignore]
fn base_performance_on_rawssd() {
    for (label, dsync, cfg) in [
        ("write-buffered", false, BlockFsConfig::default()),
        ("write-dsync", true, BlockFsConfig::default()),
        (
            "write-dsync (inode not written, as in OSSD-13)",
            true,
            BlockFsConfig {
                fdatasync_writes_inode: false,
                ..BlockFsConfig::default()
            },
        ),
    ] {
        let wall = std::time::Instant::now();
        let mut fs = fresh(cfg);
        let f = fs.create(ROOT, "big").unwrap();
        fs.sync().unwrap();
        let (t0, m0) = (fs.now(), fs.stats());
        for k in 0..TOTAL / IO {
            fs.write(f, k * IO, IO, FileData::Token(k)).unwrap();
            if dsync {
                fs.fsync(f, true).unwrap();
            }
        }
        fs.sync().unwrap();
        let (t1, m1) = (fs.now(), fs.stats());
        for k in 0..TOTAL / IO {
            fs.read(f, k * IO, ReadInto::Discard(IO)).unwrap();
        }
        let t2 = fs.now();
        println!(
            "{label}: write {:.1} MiB/s, read {:.1} MiB/s; metadata blocks written {} \
             (bitmap {}, inode {}), extents {}, wall {:.2} s",
            mib_s(TOTAL, t1 - t0),
            mib_s(TOTAL, t2 - t1),
            m1.metadata_blocks_written() - m0.metadata_blocks_written(),
            m1.bitmap_blocks_written - m0.bitmap_blocks_written,
            m1.inode_blocks_written - m0.inode_blocks_written,
            fs.extents(f).unwrap().len(),
            wall.elapsed().as_secs_f64()
        );
        assert!(fs.check().unwrap().is_empty());
    }
}
