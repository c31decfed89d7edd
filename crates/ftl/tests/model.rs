//! Model-based test of the FTL against an in-memory oracle: random writes (partial units
//! included), reads, TRIMs, flushes, idle-time GC, clean reopens, crashes and power cuts in
//! the middle of flash operations (torn programs and interrupted erases), for the page-mapping
//! FTL and DFTL, with and without the write buffer, and with sub-page mapping
//! (`ftl.mapping_unit_bytes`: 2 or 4 logical pages per write unit).
//!
//! The contract checked after a crash, per sector: the value it had at the last completed flush
//! or any value written since. A sector trimmed since the last checkpoint (TRIM is durable only
//! at a checkpoint) may also come back as any value it held since that checkpoint, until a
//! write after the trim is flushed. Nothing else may come back, and everything else must read
//! back exactly.

use std::collections::BTreeSet;

use flash::fault::{CutMode, Faulty};
use flash::{preset, DeviceConfig, FlashError, Nand, Scheduling};
use fml::{FmlConfig, FmlError};
use ftl::{BufferPolicy, Data, Ftl, FtlConfig, FtlError, Mapping, ReadOut};
use proptest::prelude::*;

const SECTOR: usize = 512;

/// The test device for a mapping unit of `mapping_unit_bytes` (0: the write unit): four slots
/// per unit need a longer OOB area than the presets' 64 bytes.
fn device_for(mapping_unit_bytes: u64) -> DeviceConfig {
    let mut c = preset("tiny").unwrap();
    if mapping_unit_bytes == 1024 {
        c.geometry.oob_size_bytes = 128;
    }
    c.geometry.dies_per_channel = 1;
    c.geometry.blocks_per_plane = 24;
    c.geometry.pages_per_block = 8;
    c.gang.units_per_superblock = 1;
    c.endurance_cycles = 1_000_000;
    c.seed = 3;
    c
}

#[derive(Clone, Debug)]
enum Op {
    Write { start: u32, len: u32 },
    Read { start: u32, len: u32 },
    Trim { start: u32, len: u32 },
    Flush,
    Idle,
    Reopen,
    Crash,
    PowerCut { after: u64, torn: bool },
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        12 => (any::<u32>(), 1u32..40).prop_map(|(start, len)| Op::Write { start, len }),
        4 => (any::<u32>(), 1u32..40).prop_map(|(start, len)| Op::Read { start, len }),
        2 => (any::<u32>(), 8u32..64).prop_map(|(start, len)| Op::Trim { start, len }),
        2 => Just(Op::Flush),
        1 => Just(Op::Idle),
        1 => Just(Op::Reopen),
        1 => Just(Op::Crash),
        1 => (0u64..40, any::<bool>()).prop_map(|(after, torn)| Op::PowerCut { after, torn }),
    ]
}

/// Bytes of sector `s` holding value `v` (0 is the zero sector).
fn sector_bytes(v: u64, s: usize, out: &mut [u8]) {
    if v == 0 {
        out.fill(0);
        return;
    }
    for (i, chunk) in out.chunks_mut(8).enumerate() {
        let x = v.wrapping_mul(0x9E37_79B9_7F4A_7C15) ^ (s as u64) << 20 ^ i as u64;
        chunk.copy_from_slice(&x.to_le_bytes());
    }
}

fn value_of(bytes: &[u8], s: usize) -> Option<u64> {
    if bytes.iter().all(|&b| b == 0) {
        return Some(0);
    }
    let x = u64::from_le_bytes(bytes[..8].try_into().unwrap());
    // Recover v from the first word and check the whole sector.
    let v = (x ^ (s as u64) << 20).wrapping_mul(0xF1DE_83E1_9937_733D);
    let mut expect = vec![0u8; SECTOR];
    sector_bytes(v, s, &mut expect);
    (expect == bytes).then_some(v)
}

struct Oracle {
    cur: Vec<u64>,
    since_flush: Vec<Vec<u64>>,
    since_ckpt: Vec<Vec<u64>>,
    trimmed: Vec<bool>,
    touched: BTreeSet<usize>,
}

impl Oracle {
    fn new(sectors: usize) -> Self {
        Oracle {
            cur: vec![0; sectors],
            since_flush: vec![vec![0]; sectors],
            since_ckpt: vec![vec![0]; sectors],
            trimmed: vec![false; sectors],
            touched: BTreeSet::new(),
        }
    }
    fn set(&mut self, s: usize, v: u64) {
        self.cur[s] = v;
        self.since_flush[s].push(v);
        self.since_ckpt[s].push(v);
        self.touched.insert(s);
    }
    fn flush(&mut self) {
        for &s in &self.touched {
            self.since_flush[s] = vec![self.cur[s]];
            // A flushed write after a trim is newer than every copy the trim left behind.
            if self.cur[s] != 0 {
                self.trimmed[s] = false;
            }
        }
    }
    fn checkpoint(&mut self) {
        self.flush();
        for &s in &self.touched {
            self.since_ckpt[s] = vec![self.cur[s]];
            self.trimmed[s] = false;
        }
    }
    fn allowed_after_crash(&self, s: usize) -> Vec<u64> {
        let mut a = self.since_flush[s].clone();
        if self.trimmed[s] {
            a.extend(&self.since_ckpt[s]);
        }
        a
    }
}

struct Rig {
    ftl: Option<Ftl<Faulty<Nand>>>,
    cfg: FtlConfig,
    oracle: Oracle,
    t: u64,
    next_value: u64,
}

fn is_power_loss(e: &FtlError) -> bool {
    matches!(e, FtlError::Fml(FmlError::Flash(FlashError::PowerLoss)))
}

impl Rig {
    /// A rig over a freshly opened FTL, its oracle as large as the FTL's logical space.
    fn new(ftl: Ftl<Faulty<Nand>>, cfg: FtlConfig) -> Self {
        let sectors = (ftl.capacity_bytes() / 512) as usize;
        Rig {
            ftl: Some(ftl),
            cfg,
            oracle: Oracle::new(sectors),
            t: 0,
            next_value: 0,
        }
    }

    /// Sectors of the logical space.
    fn sectors(&mut self) -> u32 {
        (self.ftl().capacity_bytes() / 512) as u32
    }

    fn ftl(&mut self) -> &mut Ftl<Faulty<Nand>> {
        self.ftl.as_mut().unwrap()
    }

    /// Drops the FTL's RAM state, restores power, recovers, and checks every touched sector.
    fn crash_and_check(&mut self) -> Result<(), TestCaseError> {
        let mut dev = self.ftl.take().unwrap().crash();
        dev.restore_power();
        let ftl = Ftl::open(dev, self.cfg)
            .map_err(|e| TestCaseError::fail(format!("recovery failed: {e}")))?;
        self.ftl = Some(ftl);
        self.ftl()
            .check()
            .map_err(|e| TestCaseError::fail(e.to_string()))?;
        let touched: Vec<usize> = self.oracle.touched.iter().copied().collect();
        let mut buf = vec![0u8; SECTOR];
        for s in touched {
            let t = self.t;
            self.ftl()
                .read(
                    t,
                    (s * SECTOR) as u64,
                    SECTOR as u64,
                    ReadOut::Bytes(&mut buf),
                )
                .map_err(|e| TestCaseError::fail(format!("read of sector {s}: {e}")))?;
            let got = value_of(&buf, s).ok_or_else(|| {
                TestCaseError::fail(format!("sector {s} holds bytes never written there"))
            })?;
            let allowed = self.oracle.allowed_after_crash(s);
            prop_assert!(
                allowed.contains(&got),
                "sector {s}: recovered value {got}, allowed {allowed:?}"
            );
            self.oracle.cur[s] = got;
            self.oracle.since_flush[s] = vec![got];
            self.oracle.since_ckpt[s].push(got);
        }
        Ok(())
    }

    fn run(&mut self, op: &Op, sectors: u32) -> Result<(), TestCaseError> {
        let clamp = |start: u32, len: u32| {
            let start = start % sectors;
            (start, len.min(sectors - start))
        };
        let result: Result<(), FtlError> = match *op {
            Op::Write { start, len } => {
                let (start, len) = clamp(start, len);
                let mut data = vec![0u8; len as usize * SECTOR];
                let mut values = Vec::new();
                for i in 0..len as usize {
                    self.next_value += 1;
                    let s = start as usize + i;
                    sector_bytes(self.next_value, s, &mut data[i * SECTOR..(i + 1) * SECTOR]);
                    values.push((s, self.next_value));
                }
                let t = self.t;
                let r =
                    self.ftl()
                        .write(t, start as u64 * 512, len as u64 * 512, Data::Bytes(&data));
                // Even a write cut short may have reached flash in part: all values are possible.
                for (s, v) in values {
                    self.oracle.set(s, v);
                }
                r.map(|done| self.t = self.t.max(done))
            }
            Op::Read { start, len } => {
                let (start, len) = clamp(start, len);
                let mut buf = vec![0u8; len as usize * SECTOR];
                let t = self.t;
                match self.ftl().read(
                    t,
                    start as u64 * 512,
                    len as u64 * 512,
                    ReadOut::Bytes(&mut buf),
                ) {
                    Ok(_) => {
                        for i in 0..len as usize {
                            let s = start as usize + i;
                            let got = value_of(&buf[i * SECTOR..(i + 1) * SECTOR], s);
                            prop_assert_eq!(got, Some(self.oracle.cur[s]), "read of sector {}", s);
                        }
                        Ok(())
                    }
                    Err(e) => Err(e),
                }
            }
            Op::Trim { start, len } => {
                let (start, len) = clamp(start, len);
                let spu = (self.ftl().unit_bytes() / SECTOR) as u32;
                let t = self.t;
                let r = self.ftl().trim(t, start as u64 * 512, len as u64 * 512);
                let first_unit = start.div_ceil(spu);
                let end_unit = (start + len) / spu;
                for u in first_unit..end_unit {
                    for s in u * spu..(u + 1) * spu {
                        self.oracle.set(s as usize, 0);
                        self.oracle.trimmed[s as usize] = true;
                    }
                }
                r.map(|_| ())
            }
            Op::Flush => {
                let t = self.t;
                let r = self.ftl().flush(t);
                if r.is_ok() {
                    self.oracle.flush();
                }
                r.map(|done| self.t = done)
            }
            Op::Idle => {
                let t = self.t;
                self.ftl()
                    .background(t, t + 20_000_000)
                    .map(|done| self.t = done)
            }
            Op::Reopen => {
                // A clean close is a checkpoint followed by dropping the RAM state.
                let t = self.t;
                match self.ftl().checkpoint(t) {
                    Ok(done) => {
                        self.t = done;
                        self.oracle.checkpoint();
                        let dev = self.ftl.take().unwrap().crash();
                        self.ftl = Some(
                            Ftl::open(dev, self.cfg)
                                .map_err(|e| TestCaseError::fail(format!("reopen: {e}")))?,
                        );
                        self.ftl()
                            .check()
                            .map_err(|e| TestCaseError::fail(e.to_string()))?;
                        Ok(())
                    }
                    Err(e) => Err(e),
                }
            }
            Op::Crash => return self.crash_and_check(),
            Op::PowerCut { after, torn } => {
                let mode = if torn { CutMode::Torn } else { CutMode::Clean };
                self.ftl().device_mut().cut_power_after(after, mode);
                Ok(())
            }
        };
        match result {
            Ok(()) => Ok(()),
            Err(e) if is_power_loss(&e) => self.crash_and_check(),
            Err(e) => {
                let f = self.ftl().fml();
                let blocks: Vec<String> = f
                    .blocks()
                    .iter()
                    .map(|b| format!("{:?}/{}/{}", b.state, b.valid, b.next))
                    .collect();
                Err(TestCaseError::fail(format!(
                    "{op:?}: {e}\nfree {} capacity {} job {:?}\n{}",
                    f.free_blocks(),
                    f.capacity_units(),
                    f.job(),
                    blocks.join(" ")
                )))
            }
        }
    }
}

fn config(mapping: Mapping, buffer_units: u64) -> FtlConfig {
    FtlConfig {
        mapping,
        buffer_bytes: buffer_units * 4096,
        dftl_cache_bytes: 8 * 16,
        overprovision_percent: 10.0,
        fml: FmlConfig {
            low_watermark_blocks: 3,
            high_watermark_busy_blocks: 4,
            high_watermark_idle_blocks: 6,
            ..FmlConfig::default()
        },
        ..FtlConfig::default()
    }
}

/// A buffer policy, each equally likely.
fn policy() -> impl Strategy<Value = BufferPolicy> {
    prop_oneof![
        Just(BufferPolicy::Evict),
        Just(BufferPolicy::WriteBack),
        Just(BufferPolicy::Destage),
    ]
}

/// One model run: the settings drawn, then the ops against the oracle.
#[allow(clippy::too_many_arguments)]
fn model_run(
    dftl: bool,
    buffer_units: u64,
    policy: BufferPolicy,
    backfill: bool,
    mapping_unit_bytes: u64,
    ops: &[Op],
) -> Result<(), TestCaseError> {
    let mut cfg = config(
        if dftl { Mapping::Dftl } else { Mapping::Page },
        buffer_units,
    );
    cfg.mapping_unit_bytes = mapping_unit_bytes;
    if buffer_units > 0 {
        // The write-back buffer (MQSim's device-level cache) flushes in the background; the
        // destage buffer (MQSim's) writes cold pages back at once, here with a short hot
        // window so that pages turn cold again within a run, and one unit in flight.
        cfg.buffer_policy = policy;
        cfg.flush_percent = 50.0;
        cfg.hot_window_ns = 5_000_000;
        cfg.backpressure_bytes = 1;
    }
    let mut dev = device_for(mapping_unit_bytes);
    if backfill {
        dev.timing.scheduling = Scheduling::Backfill;
    }
    let ftl = Ftl::open(Faulty::new(Nand::in_memory(dev).unwrap()), cfg).unwrap();
    let mut rig = Rig::new(ftl, cfg);
    let sectors = rig.sectors();
    for op in ops {
        rig.run(op, sectors)?;
    }
    rig.ftl()
        .check()
        .map_err(|e| TestCaseError::fail(e.to_string()))?;
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 1000, ..ProptestConfig::default() })]

    #[test]
    fn ftl_matches_the_oracle(
        dftl in any::<bool>(),
        buffer_units in prop_oneof![Just(0u64), Just(4u64)],
        policy in policy(),
        backfill in any::<bool>(),
        ops in prop::collection::vec(op(), 1..250),
    ) {
        model_run(dftl, buffer_units, policy, backfill, 0, &ops)?;
    }

    /// Sub-page mapping: 2 KiB or 1 KiB logical pages in 4 KiB write units, so units gather
    /// several pages, partial units are padded, and GC copies units with dead slots.
    #[test]
    fn ftl_matches_the_oracle_with_sub_page_mapping(
        dftl in any::<bool>(),
        buffer_units in prop_oneof![Just(0u64), Just(1u64), Just(4u64)],
        policy in policy(),
        backfill in any::<bool>(),
        mapping_unit_bytes in prop_oneof![Just(2048u64), Just(1024u64)],
        ops in prop::collection::vec(op(), 1..250),
    ) {
        model_run(dftl, buffer_units, policy, backfill, mapping_unit_bytes, &ops)?;
    }
}

/// Enough writes to force many GC cycles, with reopen at the end.
#[test]
fn long_run_with_gc_and_reopen() {
    long_run(0);
}

/// The same with sub-page mapping (two 2 KiB logical pages per 4 KiB unit): GC copies units
/// one of whose slots is dead.
#[test]
fn long_run_with_gc_and_reopen_sub_page() {
    long_run(2048);
}

fn long_run(mapping_unit_bytes: u64) {
    let mut cfg = config(Mapping::Page, 4);
    cfg.mapping_unit_bytes = mapping_unit_bytes;
    let ftl = Ftl::open(
        Faulty::new(Nand::in_memory(device_for(mapping_unit_bytes)).unwrap()),
        cfg,
    )
    .unwrap();
    let mut rig = Rig::new(ftl, cfg);
    let sectors = rig.sectors();
    let mut x: u64 = 1;
    let mut repacked = 0;
    for i in 0..3000u32 {
        x = x
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        let start = (x >> 33) as u32 % sectors;
        rig.run(
            &Op::Write {
                start,
                len: 1 + (x >> 20) as u32 % 16,
            },
            sectors,
        )
        .unwrap();
        if i % 500 == 499 {
            repacked += rig.ftl().stats().gc_units_repacked;
            rig.run(&Op::Reopen, sectors).unwrap();
        }
    }
    repacked += rig.ftl().stats().gc_units_repacked;
    rig.run(&Op::Crash, sectors).unwrap();
    use flash::Flash;
    let erased = rig.ftl().fml().flash().stats().blocks_erased;
    assert!(
        erased > 100,
        "only {erased} blocks erased: the run did not exercise GC"
    );
    if mapping_unit_bytes > 0 {
        assert!(
            repacked > 100,
            "GC moved live slots into {repacked} units only"
        );
    }
}

/// Power cuts at every flash command of a checkpoint and of the writes right after it, torn and
/// clean, for both mappings: recovery must find the checkpoint before (a cut during one) or the
/// new one (a cut after it), and roll forward from there. The state before the checkpoint has
/// GC behind it and a trim since the last checkpoint.
#[test]
fn cuts_during_and_right_after_a_checkpoint() {
    cut_sweep(0);
}

/// The same sweep with sub-page mapping (two 2 KiB logical pages per 4 KiB unit).
#[test]
fn cuts_during_and_right_after_a_checkpoint_sub_page() {
    cut_sweep(2048);
}

fn cut_sweep(mapping_unit_bytes: u64) {
    for mapping in [Mapping::Page, Mapping::Dftl] {
        let (mut during, mut after_it) = (0, 0);
        for after in 0..120u64 {
            let mut cfg = config(mapping, 4);
            cfg.mapping_unit_bytes = mapping_unit_bytes;
            let dev = device_for(mapping_unit_bytes);
            let ftl = Ftl::open(Faulty::new(Nand::in_memory(dev).unwrap()), cfg).unwrap();
            let mut rig = Rig::new(ftl, cfg);
            let sectors = rig.sectors();
            let mut x: u64 = 7;
            let mut writes = |rig: &mut Rig, n: u32| {
                for _ in 0..n {
                    x = x
                        .wrapping_mul(6364136223846793005)
                        .wrapping_add(1442695040888963407);
                    let op = Op::Write {
                        start: (x >> 33) as u32,
                        len: 1 + (x >> 20) as u32 % 24,
                    };
                    rig.run(&op, sectors).unwrap();
                }
            };
            writes(&mut rig, 300);
            rig.run(&Op::Reopen, sectors).unwrap();
            writes(&mut rig, 200);
            let trim = Op::Trim {
                start: 64,
                len: 256,
            };
            rig.run(&trim, sectors).unwrap();
            rig.run(&Op::Flush, sectors).unwrap();
            rig.run(
                &Op::PowerCut {
                    after,
                    torn: after % 2 == 1,
                },
                sectors,
            )
            .unwrap();
            let t = rig.t;
            match rig.ftl().checkpoint(t) {
                Ok(done) => {
                    after_it += 1;
                    rig.t = done;
                    rig.oracle.checkpoint();
                    writes(&mut rig, 20);
                    rig.run(&Op::Flush, sectors).unwrap();
                    rig.run(&Op::Crash, sectors).unwrap();
                }
                Err(e) if is_power_loss(&e) => {
                    during += 1;
                    rig.crash_and_check().unwrap();
                }
                Err(e) => panic!("checkpoint with a cut after {after} commands: {e}"),
            }
            rig.ftl().check().unwrap();
        }
        assert!(
            during > 0 && after_it > 0,
            "{mapping:?}: {during} cuts during a checkpoint, {after_it} after one"
        );
    }
}
