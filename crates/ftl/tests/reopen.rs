//! The FTL's open time on a full device, clean and after a power cut (docs/PERFORMANCE.md,
//! "Recovery"). Ignored by default: it fills a whole device. Run it in release:
//!
//! ```sh
//! cargo test --release -p ftl --test reopen -- --ignored --nocapture
//! OSSD_REOPEN_DEVICE=rawssd-256g cargo test --release -p ftl --test reopen -- --ignored --nocapture
//! OSSD_REOPEN_IMAGE=/tmp/ftl.img cargo test --release -p ftl --test reopen -- --ignored --nocapture
//! ```
//!
//! `OSSD_REOPEN_DEVICE` names the preset (default `rawssd`); `OSSD_REOPEN_IMAGE` keeps the device
//! in that image file instead of memory (a sparse file: only page headers and OOB records are
//! written, about one file-system block per programmed page).

use std::time::Instant;

use flash::image::ImageStore;
use flash::store::{MemStore, PageStore};
use flash::{preset, Flash, Nand};
use ftl::{Data, Ftl, FtlConfig};

fn config() -> FtlConfig {
    FtlConfig::default()
}

/// Writes every logical unit once, sequentially, then `overwrites` units at random (so GC has
/// run and blocks hold a mix), then a clean close; reopens it; writes `since` more units, flushes,
/// cuts the power and reopens again. Prints what each open cost.
fn run<S: PageStore>(nand: Nand<S>, overwrites: u64, since: u64) {
    let mut ftl = Ftl::open(nand, config()).unwrap();
    let unit = ftl.unit_bytes() as u64;
    let units = ftl.capacity_bytes() / unit;
    let started = Instant::now();
    let mut t = 0;
    for u in 0..units {
        t = ftl.write(t, u * unit, unit, Data::Token(u + 1)).unwrap();
    }
    let mut x = 0x9E37_79B9_7F4A_7C15u64;
    let mut random_writes = |ftl: &mut Ftl<Nand<S>>, t: &mut u64, n: u64| {
        for i in 0..n {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            *t = ftl
                .write(*t, (x % units) * unit, unit, Data::Token(i ^ x))
                .unwrap();
        }
    };
    random_writes(&mut ftl, &mut t, overwrites);
    let nand = ftl.close(t).unwrap();
    println!(
        "filled {units} units of {unit} bytes plus {overwrites} overwrites in {:.1} s; {} units programmed",
        started.elapsed().as_secs_f64(),
        nand.stats().pages_programmed / nand.config().gang.pages_per_unit() as u64,
    );

    let busy = nand.stats().busy_until_ns;
    let started = Instant::now();
    let mut ftl = Ftl::open(nand, config()).unwrap();
    let wall = started.elapsed();
    println!(
        "clean open: {:.3} s wall, {:.3} s virtual, {:?}",
        wall.as_secs_f64(),
        ftl.recovery().scan_done_ns.saturating_sub(busy) as f64 / 1e9,
        ftl.recovery()
    );

    let mut t = ftl.fml().flash().stats().busy_until_ns;
    random_writes(&mut ftl, &mut t, since);
    ftl.flush(t).unwrap();
    let nand = ftl.crash();
    let busy = nand.stats().busy_until_ns;
    let started = Instant::now();
    let ftl = Ftl::open(nand, config()).unwrap();
    let wall = started.elapsed();
    println!(
        "open after a power cut, {since} units written since the checkpoint: {:.3} s wall, \
         {:.3} s virtual, {:?}",
        wall.as_secs_f64(),
        ftl.recovery().scan_done_ns.saturating_sub(busy) as f64 / 1e9,
        ftl.recovery()
    );
}

#[test]
#[ignore = "fills a whole device; a measurement, run in release (see the file's comment)"]
fn open_a_full_device() {
    let name = std::env::var("OSSD_REOPEN_DEVICE").unwrap_or_else(|_| "rawssd".into());
    let cfg = preset(&name).unwrap();
    let overwrites = cfg.geometry.capacity_bytes() / cfg.write_unit_bytes() as u64 / 4;
    match std::env::var_os("OSSD_REOPEN_IMAGE") {
        Some(path) => {
            let path = std::path::PathBuf::from(path);
            let _ = std::fs::remove_file(&path);
            println!("{name} in image {}", path.display());
            let nand = Nand::open(cfg, ImageStore::create(&path, &cfg).unwrap()).unwrap();
            run(nand, overwrites, 2_000);
            std::fs::remove_file(&path).unwrap();
        }
        None => {
            println!("{name} in memory");
            let nand = Nand::open(cfg, MemStore::new(cfg.geometry)).unwrap();
            run(nand, overwrites, 2_000);
        }
    }
}
