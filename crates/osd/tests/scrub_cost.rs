//! What a full pass of the background scrub costs: a store of 64 MiB of objects with parity
//! (reliability 1, groups of 16) on an in-memory `nandsim-128m`, scrubbed by idle calls of 100 ms
//! of virtual time each, at the rate a user might choose (1000 units per second) and as fast as
//! the device allows; against the scrub command over the same store. Virtual time the reads
//! keep the device busy, idle time the pass needs, wall time. A measurement, not a check:
//! `cargo test -p osd --release --test scrub_cost -- --ignored --nocapture`, figures in
//! docs/PERFORMANCE.md.

use std::time::Instant;

use flash::{preset, Nand};
use fml::FmlConfig;
use osd::{
    BackgroundScrubConfig, FlushScope, ObjectId, ObjectStore, Oid, Osd, OsdConfig, PartitionId,
};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

const P: u64 = 0x10000;
const OBJECTS: u64 = 16;
const OBJECT_BYTES: usize = 4 << 20;
/// The idle periods the scrub is offered: 100 ms each.
const IDLE: u64 = 100_000_000;

fn store() -> ObjectStore<Nand> {
    let dev = preset("nandsim-128m").unwrap();
    let cfg = OsdConfig {
        default_reliability: 1,
        fml: FmlConfig::for_blocks(dev.gang.superblocks(&dev.geometry)),
        ..OsdConfig::default()
    };
    let mut s = ObjectStore::format(Nand::in_memory(dev).unwrap(), cfg).unwrap();
    s.create_partition(Some(PartitionId(P))).unwrap();
    let mut rng = ChaCha8Rng::seed_from_u64(7);
    let data: Vec<u8> = (0..OBJECT_BYTES).map(|_| rng.gen()).collect();
    for k in 0..OBJECTS {
        s.create(PartitionId(P), Some(ObjectId(P + 1 + k))).unwrap();
        s.write(Oid::new(P, P + 1 + k), 0, &data).unwrap();
    }
    s.flush(FlushScope::Device).unwrap();
    s.checkpoint().unwrap();
    s
}

#[test]
#[ignore = "a measurement for docs/PERFORMANCE.md"]
fn a_full_background_pass() {
    let mut s = store();
    let units = OBJECTS * OBJECT_BYTES as u64 / s.unit_bytes() as u64;
    let t0 = s.now();
    let wall = Instant::now();
    let r = s.scrub(false).unwrap();
    println!(
        "scrub command: {} units, {:.3} virtual s, {:.0} ms wall",
        r.units_checked,
        (s.now() - t0) as f64 / 1e9,
        wall.elapsed().as_secs_f64() * 1e3
    );
    for (name, rate, per_call) in [
        ("1000 units/s, 256 a call", 1_000, 256),
        ("as fast as the device allows", 1_000_000_000, 65_536),
    ] {
        let mut s = store();
        s.set_background_scrub(BackgroundScrubConfig {
            units_per_second: rate,
            max_units_per_call: per_call,
            ..BackgroundScrubConfig::default()
        })
        .unwrap();
        let (mut t, start) = (s.now(), s.now());
        let mut busy = 0;
        let mut calls = 0;
        let wall = Instant::now();
        while s.stats().bg_scrub_passes == 0 {
            let done = s.background(t, t + IDLE).unwrap();
            busy += done.saturating_sub(t);
            t = done.max(t + IDLE);
            calls += 1;
        }
        let st = s.stats();
        assert_eq!(st.bg_scrub_units_checked, units);
        println!(
            "{name}: {} units ({} MiB), {} groups, {calls} idle calls of 100 ms: idle time {:.1} s, \
             device busy {:.3} virtual s ({:.2}% of the idle time), {:.0} ms wall",
            st.bg_scrub_units_checked,
            (OBJECTS * OBJECT_BYTES as u64) >> 20,
            st.bg_scrub_groups_checked,
            (t - start) as f64 / 1e9,
            busy as f64 / 1e9,
            100.0 * busy as f64 / (t - start) as f64,
            wall.elapsed().as_secs_f64() * 1e3
        );
    }
}
