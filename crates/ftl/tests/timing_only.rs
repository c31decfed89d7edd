//! The FTL on a timing-only device (`payload = timing`): the same operations at the same
//! virtual times, with the same counters, as on a full device, while the device keeps nothing
//! per page; reads return the "not stored" marker; a device holding data is not recovered.

use flash::{preset, DeviceConfig, Flash, Nand, PayloadMode, NOT_STORED};
use fml::FmlConfig;
use ftl::{Data, Ftl, FtlConfig, Mapping, ReadOut};

fn device(payload: PayloadMode) -> DeviceConfig {
    let mut c = preset("tiny").unwrap();
    c.geometry.blocks_per_plane = 24;
    c.geometry.pages_per_block = 8;
    c.gang.units_per_superblock = 1;
    c.seed = 11;
    c.payload = payload;
    c
}

fn config(mapping: Mapping) -> FtlConfig {
    FtlConfig {
        mapping,
        buffer_bytes: 4 * 4096,
        dftl_cache_bytes: 8 * 16,
        fml: FmlConfig {
            low_watermark_blocks: 3,
            high_watermark_busy_blocks: 4,
            high_watermark_idle_blocks: 6,
            ..FmlConfig::default()
        },
        ..FtlConfig::default()
    }
}

/// Everything a run reports, after each operation: its completion time and every counter.
#[derive(Debug, PartialEq)]
struct Trace {
    times: Vec<u64>,
    ftl: ftl::FtlStats,
    fml: fml::FmlStats,
    flash: flash::FlashStats,
    fingerprints: Vec<u64>,
}

/// Random partial and whole-unit writes, reads, trims, flushes, idle GC and a checkpoint: enough
/// to fill the device several times over.
fn drive(payload: PayloadMode, mapping: Mapping, mapping_unit_bytes: u64) -> Trace {
    let nand = Nand::in_memory(device(payload)).unwrap();
    let cfg = FtlConfig {
        mapping_unit_bytes,
        ..config(mapping)
    };
    let mut ftl = Ftl::open(nand, cfg).unwrap();
    let sectors = ftl.capacity_bytes() / 512;
    let mut x = 0x2545_F491_4F6C_DD1Du64;
    let mut t = 0;
    let mut times = Vec::new();
    let mut fingerprints = Vec::new();
    for i in 0..4000u64 {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        let start = x % sectors;
        let len = (1 + (x >> 40) % 24).min(sectors - start);
        t = match i % 50 {
            0..=39 => ftl
                .write(t, start * 512, len * 512, Data::Token(x | 1))
                .unwrap(),
            40..=45 => {
                let mut v = Vec::new();
                let done = ftl
                    .read(t, start * 512, len * 512, ReadOut::Fingerprints(&mut v))
                    .unwrap();
                fingerprints.extend(v);
                done
            }
            46 => ftl.trim(t, start * 512, len * 512).unwrap(),
            47 => ftl.flush(t).unwrap(),
            48 => ftl.background(t, t + 5_000_000).unwrap(),
            _ => ftl.checkpoint(t).unwrap(),
        };
        times.push(t);
    }
    ftl.check().unwrap();
    Trace {
        times,
        ftl: ftl.stats(),
        fml: ftl.fml().stats(),
        flash: ftl.fml().flash().stats(),
        fingerprints,
    }
}

#[test]
fn a_timing_only_device_gives_the_same_times_and_counters() {
    same_times_and_counters(0);
}

/// The same under sub-page mapping (two 2 KiB logical pages per 4 KiB unit): the FTL keeps each
/// slot's owner in memory, and GC on the timing-only device moves exactly what it moves on the
/// full one.
#[test]
fn a_timing_only_device_gives_the_same_times_and_counters_sub_page() {
    same_times_and_counters(2048);
}

fn same_times_and_counters(mapping_unit_bytes: u64) {
    for mapping in [Mapping::Page, Mapping::Dftl] {
        let full = drive(PayloadMode::Full, mapping, mapping_unit_bytes);
        let timing = drive(PayloadMode::Timing, mapping, mapping_unit_bytes);
        assert!(
            full.fml.gc_units_copied > 1000 && full.flash.blocks_erased > 100,
            "{mapping:?}: the run must exercise GC: {:?}",
            full.fml
        );
        assert_eq!(full.times, timing.times, "{mapping:?}: completion times");
        assert_eq!(full.ftl, timing.ftl, "{mapping:?}");
        assert_eq!(full.fml, timing.fml, "{mapping:?}");
        assert_eq!(full.flash, timing.flash, "{mapping:?}");
        // Reads of written units return real fingerprints on the full device, and the marker
        // on the timing-only one (unwritten or trimmed units read as 0 on both).
        assert_eq!(full.fingerprints.len(), timing.fingerprints.len());
        let mut stored = 0;
        for (f, t) in full.fingerprints.iter().zip(&timing.fingerprints) {
            if *f == 0 {
                assert_eq!(*t, 0);
            } else if *t != NOT_STORED {
                assert_eq!(f, t, "a unit still in the write buffer reads the same");
            } else {
                stored += 1;
            }
        }
        assert!(stored > 100, "{mapping:?}: {stored} reads of flash");
    }
}

#[test]
fn a_timing_only_device_that_holds_data_is_not_recovered() {
    let nand = Nand::in_memory(device(PayloadMode::Timing)).unwrap();
    let mut ftl = Ftl::open(nand, config(Mapping::Page)).unwrap();
    let t = ftl.write(0, 0, 4096, Data::Token(5)).unwrap();
    let nand = ftl.close(t).unwrap();
    let e = Ftl::open(nand, config(Mapping::Page)).err().unwrap();
    assert!(e.to_string().contains("payload = timing"), "{e}");
    assert!(e.to_string().contains("cannot be recovered"), "{e}");
}
