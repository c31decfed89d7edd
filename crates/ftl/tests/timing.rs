//! Regression: in fingerprint mode a host read must pay for moving the whole unit over the bus,
//! exactly as in bytes mode (it once read only the OOB area and charged t_R alone). Each read
//! also moves the unit's OOB record, which the FTL checks against the logical page it expects.

use flash::{preset, Nand};
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
