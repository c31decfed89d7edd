//! Regression: in fingerprint mode a host read must pay for moving the whole unit over the bus,
//! exactly as in bytes mode (it once read only the OOB area and charged t_R alone). Each read
//! also moves the unit's OOB record, which the FTL checks against the logical page it expects.

use flash::{preset, Flash, Nand};
use fml::FmlConfig;
use ftl::{Data, Ftl, FtlConfig, ReadOut};

#[test]
fn a_read_costs_array_time_plus_transfer_in_both_payload_modes() {
    let dev = preset("tiny").unwrap();
    let t = dev.timing;
    let expected =
        t.read_ns + t.transfer_ns(dev.geometry.page_size_bytes + ftl::oob::RECORD_BYTES as u32);
    let cfg = FtlConfig {
        fml: FmlConfig::for_blocks(32),
        buffer_bytes: 0,
        ..FtlConfig::default()
    };
    let mut ftl = Ftl::open(Nand::in_memory(dev).unwrap(), cfg).unwrap();
    let unit = ftl.unit_bytes() as u64;
    let done = ftl.write(0, 0, unit, Data::Token(9)).unwrap();
    let bytes = vec![7u8; unit as usize];
    let done = ftl.write(done, unit, unit, Data::Bytes(&bytes)).unwrap();
    let at = done + 1_000_000;
    let mut fps = Vec::new();
    assert_eq!(
        ftl.read(at, 0, unit, ReadOut::Fingerprints(&mut fps))
            .unwrap()
            - at,
        expected
    );
    let mut out = vec![0u8; unit as usize];
    let at = at + 1_000_000;
    assert_eq!(
        ftl.read(at, unit, unit, ReadOut::Bytes(&mut out)).unwrap() - at,
        expected
    );
    assert_eq!(out, bytes);
}

/// The write-back buffer (MQSim's device-level data cache) acknowledges a write when it is
/// buffered; the evicting buffer makes a write into a full buffer wait for a program. A flush
/// waits for the background flushes in flight.
#[test]
fn write_back_acknowledges_from_the_buffer_and_flush_waits_for_the_flushes() {
    let dev = preset("tiny").unwrap();
    let run = |policy: ftl::BufferPolicy, writes: u64| {
        let cfg = FtlConfig {
            fml: FmlConfig::for_blocks(32),
            buffer_bytes: 8 * 4096,
            buffer_policy: policy,
            flush_percent: 50.0,
            ..FtlConfig::default()
        };
        let mut ftl = Ftl::open(Nand::in_memory(dev).unwrap(), cfg).unwrap();
        let unit = ftl.unit_bytes() as u64;
        let latest = (0..writes)
            .map(|i| ftl.write(0, i * unit, unit, Data::Token(i)).unwrap())
            .max()
            .unwrap();
        let flushed = ftl.flush(0).unwrap();
        (latest, flushed)
    };
    // Twelve writes at time 0 into an 8-unit buffer: the last four wait for a program.
    let (evict_latest, _) = run(ftl::BufferPolicy::Evict, 12);
    assert!(evict_latest >= dev.timing.program_ns);
    // Write-back: eight writes (half buffered, half flushing) are all acknowledged at once,
    // and the flush waits for the four flushes in flight.
    let (wb_latest, wb_flushed) = run(ftl::BufferPolicy::WriteBack, 8);
    assert_eq!(wb_latest, 0);
    assert!(wb_flushed >= dev.timing.program_ns);
    // A ninth write finds buffered and in-flight units filling the buffer and waits.
    let (wb_full, _) = run(ftl::BufferPolicy::WriteBack, 9);
    assert!(wb_full >= dev.timing.program_ns);
}

/// `ftl.cache_mb_s`: the buffer's memory channel moves one request's bytes at a time, so
/// writes arriving together complete one transfer apart, a read served from the buffer pays
/// its transfer too, and a channel that is free (0) costs nothing.
#[test]
fn the_buffer_memory_channel_serializes_transfers_in_arrival_order() {
    let dev = preset("tiny").unwrap();
    let open = |cache_mb_s: u64| {
        let cfg = FtlConfig {
            fml: FmlConfig::for_blocks(32),
            buffer_bytes: 8 * 4096,
            buffer_policy: ftl::BufferPolicy::WriteBack,
            flush_percent: 100.0,
            cache_mb_s,
            ..FtlConfig::default()
        };
        Ftl::open(Nand::in_memory(dev).unwrap(), cfg).unwrap()
    };
    let mut ftl = open(100);
    let unit = ftl.unit_bytes() as u64;
    // 100 MB/s: 10 ns a byte.
    let per_unit = unit * 10;
    let done: Vec<u64> = (0..4)
        .map(|i| ftl.write(0, i * unit, unit, Data::Token(i)).unwrap())
        .collect();
    assert_eq!(done, [1, 2, 3, 4].map(|k| k * per_unit));
    // A write arriving after the channel went idle waits for nothing but itself.
    let later = 10 * per_unit;
    assert_eq!(
        ftl.write(later, 4 * unit, unit, Data::Token(4)).unwrap(),
        later + per_unit
    );
    let mut fps = Vec::new();
    let at = 20 * per_unit;
    assert_eq!(
        ftl.read(at, 0, unit, ReadOut::Fingerprints(&mut fps))
            .unwrap(),
        at + per_unit
    );
    let mut free = open(0);
    assert_eq!(free.write(0, 0, unit, Data::Token(0)).unwrap(), 0);
}

/// `destage` (MQSim's destage buffer): a page's first write in the hot window goes to flash
/// at once, yet the write completes on arrival; a second write within the window stays in
/// the buffer; once the write-backs in flight reach the back-pressure depth, the next write
/// waits for the earliest to complete.
#[test]
fn destage_writes_cold_pages_back_at_once_and_keeps_hot_ones() {
    let dev = preset("tiny").unwrap();
    let unit = Nand::in_memory(dev).unwrap().config().write_unit_bytes() as u64;
    let cfg = FtlConfig {
        fml: FmlConfig::for_blocks(32),
        buffer_bytes: 64 * unit,
        buffer_policy: ftl::BufferPolicy::Destage,
        backpressure_bytes: 2 * unit,
        hot_window_ns: 1_000_000_000,
        ..FtlConfig::default()
    };
    let mut ftl = Ftl::open(Nand::in_memory(dev).unwrap(), cfg).unwrap();
    let programmed = |f: &Ftl<Nand>| f.stats().data_units_written;
    // Two cold pages: both written back at once, both acknowledged on arrival.
    assert_eq!(ftl.write(0, 0, unit, Data::Token(1)).unwrap(), 0);
    assert_eq!(ftl.write(0, unit, unit, Data::Token(2)).unwrap(), 0);
    assert_eq!(programmed(&ftl), 2);
    // A third cold page finds two write-backs in flight (the depth) and waits for one.
    let third = ftl.write(0, 2 * unit, unit, Data::Token(3)).unwrap();
    assert!(third >= dev.timing.program_ns, "{third}");
    assert_eq!(programmed(&ftl), 3);
    // Page 0 again within the window: hot, buffered, not programmed.
    let at = third + 10 * dev.timing.program_ns;
    assert_eq!(ftl.write(at, 0, unit, Data::Token(4)).unwrap(), at);
    assert_eq!(programmed(&ftl), 3);
    assert_eq!(ftl.buffered_units(), 1);
    // After the window, page 0 is cold again.
    let later = 2_000_000_000;
    assert_eq!(ftl.write(later, 0, unit, Data::Token(5)).unwrap(), later);
    assert_eq!(programmed(&ftl), 4);
    let mut fps = Vec::new();
    ftl.read(later + 1, 0, unit, ReadOut::Fingerprints(&mut fps))
        .unwrap();
    let mut want = Vec::new();
    let mut reference = Ftl::open(
        Nand::in_memory(dev).unwrap(),
        FtlConfig {
            fml: FmlConfig::for_blocks(32),
            buffer_bytes: 0,
            ..FtlConfig::default()
        },
    )
    .unwrap();
    reference.write(0, 0, unit, Data::Token(5)).unwrap();
    reference
        .read(1, 0, unit, ReadOut::Fingerprints(&mut want))
        .unwrap();
    assert_eq!(fps, want);
}
