//! A read the power cut strikes reports the power loss, not a corrupted page: the caller must
//! remount, and nothing on flash is damaged.

use flash::fault::{CutMode, Faulty};
use flash::{preset, FlashError, Nand};
use fml::FmlError;
use ftl::{Data, Ftl, FtlConfig, FtlError, ReadOut};

#[test]
fn a_read_cut_by_power_loss_reports_the_power_loss() {
    let nand = Faulty::new(Nand::in_memory(preset("tiny").unwrap()).unwrap());
    let mut ftl = Ftl::open(nand, FtlConfig::default()).unwrap();
    let unit = ftl.unit_bytes() as u64;
    let data = vec![7u8; unit as usize];
    let t = ftl.write(0, 0, unit, Data::Bytes(&data)).unwrap();
    let t = ftl.flush(t).unwrap();
    // The cut strikes the next program; every command after it finds the power off.
    ftl.device_mut().cut_power_after(0, CutMode::Clean);
    let cut = ftl
        .write(t, unit, unit, Data::Bytes(&data))
        .and_then(|t| ftl.flush(t));
    assert!(cut.is_err());
    let mut out = vec![0u8; unit as usize];
    let e = ftl
        .read(t, 0, unit, ReadOut::Bytes(&mut out))
        .expect_err("the power is off");
    assert!(
        matches!(e, FtlError::Fml(FmlError::Flash(FlashError::PowerLoss))),
        "{e}"
    );
}

/// `ftl.checkpoint_every_units`: checkpoints taken as the host writes bound what recovery reads
/// after a power cut, and lose nothing flushed.
#[test]
fn periodic_checkpoints_bound_the_roll_forward() {
    let run = |every: u64| {
        let nand = Nand::in_memory(preset("tiny").unwrap()).unwrap();
        let config = FtlConfig {
            checkpoint_every_units: every,
            buffer_bytes: 0,
            ..FtlConfig::default()
        };
        let mut ftl = Ftl::open(nand, config).unwrap();
        let unit = ftl.unit_bytes() as u64;
        let units = ftl.capacity_bytes() / unit;
        let mut t = 0;
        let mut expect = vec![0u8; units as usize];
        // Every unit once, then overwrites so that GC runs; each unit holds its last byte.
        for i in 0..units * 3 {
            let lpn = (i * 7919) % units;
            let b = (i % 251) as u8 + 1;
            t = ftl
                .write(t, lpn * unit, unit, Data::Bytes(&vec![b; unit as usize]))
                .unwrap();
            expect[lpn as usize] = b;
        }
        ftl.flush(t).unwrap();
        let checkpoints = ftl.stats().checkpoint_units_written;
        let mut ftl = Ftl::open(ftl.crash(), config).unwrap();
        for (lpn, &b) in expect.iter().enumerate() {
            let mut out = vec![0u8; unit as usize];
            ftl.read(0, lpn as u64 * unit, unit, ReadOut::Bytes(&mut out))
                .unwrap();
            assert!(out.iter().all(|&x| x == b), "every: {every}, lpn {lpn}");
        }
        (checkpoints, ftl.recovery().rolled_forward)
    };
    let (none, rolled_all) = run(0);
    let (some, rolled) = run(64);
    assert_eq!(none, 0, "no checkpoint without a close");
    assert!(some > 10, "checkpoints while writing: {some}");
    assert!(
        rolled <= 64 && rolled_all > 1000,
        "rolled forward {rolled} with checkpoints, {rolled_all} without"
    );
}

/// A torn program whose record reads back whole over a wrong payload (docs/RELIABILITY.md,
/// finding 38): recovery passes the device's newest unit over when its payload fails its
/// checksum, so the logical page keeps its previous version, and keeps it passed over after
/// newer writes and another crash.
#[test]
fn a_torn_newest_unit_with_a_whole_record_is_passed_over_for_good() {
    let config = FtlConfig {
        buffer_bytes: 0,
        ..FtlConfig::default()
    };
    let nand = Faulty::new(Nand::in_memory(preset("tiny").unwrap()).unwrap());
    let mut ftl = Ftl::open(nand, config).unwrap();
    let unit = ftl.unit_bytes() as u64;
    let fill = |b: u8| vec![b; unit as usize];
    let read = |ftl: &mut Ftl<Faulty<Nand>>, lpn: u64| {
        let mut out = fill(0);
        ftl.read(0, lpn * unit, unit, ReadOut::Bytes(&mut out))
            .map(|_| out[0])
    };
    let mut t = 0;
    for lpn in 0..8 {
        t = ftl
            .write(t, lpn * unit, unit, Data::Bytes(&fill(1)))
            .unwrap();
    }
    t = ftl.flush(t).unwrap();
    // The rewrite of page 3 is torn: its record reads back whole, its payload does not.
    ftl.device_mut().cut_power_after(0, CutMode::GarbledPayload);
    assert!(ftl
        .write(t, 3 * unit, unit, Data::Bytes(&fill(2)))
        .and_then(|t| ftl.flush(t))
        .is_err());
    let mut dev = ftl.crash();
    dev.restore_power();
    let mut ftl = Ftl::open(dev, config).unwrap();
    assert!(ftl.recovery().newest_unit_torn);
    assert_eq!(read(&mut ftl, 3).unwrap(), 1, "the previous version");
    // Newer units, then another crash: the torn unit is no longer the newest, and must not
    // come back.
    let mut t = 0;
    for lpn in 4..8 {
        t = ftl
            .write(t, lpn * unit, unit, Data::Bytes(&fill(3)))
            .unwrap();
    }
    ftl.flush(t).unwrap();
    let mut ftl = Ftl::open(ftl.crash(), config).unwrap();
    assert!(!ftl.recovery().newest_unit_torn);
    assert_eq!(read(&mut ftl, 3).unwrap(), 1, "still the previous version");
    assert_eq!(read(&mut ftl, 5).unwrap(), 3);
}
