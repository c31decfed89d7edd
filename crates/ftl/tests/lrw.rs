//! Write amplification of uniform random writes against the analytic LRW model (FIFO cleaning
//! of a single log): u = exp(-(1 - u) / rho), WA = 1 / (1 - u), with rho = logical / physical
//! units. Also checks that greedy cleaning beats FIFO on the same workload.
//!
//! The model's log cycles through every physical page with no gap between the write head and
//! the cleaning head. The FML keeps `low_watermark_blocks` erased blocks in reserve and one
//! open update block, which hold no live data, so "physical" here is the units in the log:
//! all usable units less those blocks.

use flash::{preset, DeviceConfig, Nand};
use fml::{FmlConfig, VictimPolicy};
use ftl::{Data, Ftl, FtlConfig};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

fn device() -> DeviceConfig {
    let mut c = preset("tiny").unwrap();
    c.geometry.blocks_per_plane = 256;
    c.geometry.pages_per_block = 64;
    c.endurance_cycles = 1_000_000;
    c.seed = 1;
    c
}

fn lrw_model_wa(rho: f64) -> f64 {
    // Fixed-point iteration from u = 0.5 converges for rho < 1.
    let mut u: f64 = 0.5;
    for _ in 0..10_000 {
        u = (-(1.0 - u) / rho).exp();
    }
    1.0 / (1.0 - u)
}

/// Fills `rho` of the physical units, then measures WA over `turns` logical-space overwrites.
fn measure(rho: f64, policy: VictimPolicy, turns: u64) -> f64 {
    let cfg = FtlConfig {
        buffer_bytes: 0,
        overprovision_percent: 0.0,
        separate_gc_stream: false,
        fml: FmlConfig {
            victim_policy: policy,
            static_wear_threshold: 0,
            low_watermark_blocks: 2,
            high_watermark_busy_blocks: 2,
            high_watermark_idle_blocks: 2,
            ..FmlConfig::default()
        },
        ..FtlConfig::default()
    };
    let mut ftl = Ftl::open(Nand::in_memory(device()).unwrap(), cfg).unwrap();
    let unit = ftl.unit_bytes() as u64;
    let per_block = ftl.fml().layout().units_per_superblock as u64;
    let gap_blocks = ftl.fml().config().low_watermark_blocks as u64 + 1;
    let physical = ftl.fml().physical_units() - gap_blocks * per_block;
    let logical = (physical as f64 * rho) as u64;
    assert!(
        logical * unit <= ftl.capacity_bytes(),
        "rho {rho} does not fit the logical space"
    );
    let mut rng = ChaCha8Rng::seed_from_u64(7);
    let mut t = 0;
    for lpn in 0..logical {
        t = ftl.write(t, lpn * unit, unit, Data::Token(lpn)).unwrap();
    }
    // Warm up to the steady state, then measure.
    let mut run = |n: u64, ftl: &mut Ftl<Nand>| {
        for i in 0..n {
            let lpn = rng.gen_range(0..logical);
            t = ftl.write(t, lpn * unit, unit, Data::Token(i)).unwrap();
        }
    };
    run(2 * logical, &mut ftl);
    let before = ftl.fml().stats();
    run(turns * logical, &mut ftl);
    let after = ftl.fml().stats();
    ftl.check().unwrap();
    let host = turns * logical;
    (after.units_written - before.units_written) as f64 / host as f64
}

#[test]
fn fifo_matches_the_lrw_model_and_greedy_beats_it() {
    for rho in [0.8, 0.9] {
        let model = lrw_model_wa(rho);
        let fifo = measure(rho, VictimPolicy::Fifo, 6);
        let err = (fifo - model).abs() / model;
        println!(
            "rho {rho}: model WA {model:.3}, FIFO {fifo:.3} ({:.1}% off)",
            err * 100.0
        );
        assert!(
            err < 0.05,
            "rho {rho}: FIFO WA {fifo:.3} is {:.1}% from the model's {model:.3}",
            err * 100.0
        );
        let greedy = measure(rho, VictimPolicy::Greedy, 6);
        println!("rho {rho}: greedy {greedy:.3}");
        assert!(
            greedy < fifo,
            "rho {rho}: greedy WA {greedy:.3} does not beat FIFO {fifo:.3}"
        );
    }
}
